/* cg_impl.h: what the files of the LLVM CPU backend share.
 *
 *   llvm_backend.c  the cg_backend instance: supports(), compile() in phases
 *   schedule.c      which nodes make kernels, which fold into others, which are
 *                   views; where every value lives (memplan for the workspace)
 *   module.c        the module: types, run(), kernel functions, launches, loops,
 *                   value pointers, the weights blob and the exported descriptor
 *   map.c           the strided loop nest every element-wise kernel is built on
 *   emit_*.c        per-op code: element-wise groups, data movement,
 *                   normalisations and reductions, matmuls/convolutions/attention
 *                   (the GEMM, batched GEMM and attention kernels themselves come
 *                   from kernels.h: gemm.c, bgemm.c, attention.c)
 *   target.c        target machine, optimisation pipeline, object file
 *
 * Shared with every backend (codegen/): poly.h, sizes and strides as
 * polynomials in the batch; package.h, the weights blob, the weights as an
 * ELF object of their own, linking the .so and moving it into place.
 *   vmath.c         exp, erf, tanh as vectorisable IR
 *
 * Generated code: run(call) calls, node by node, one kernel function per
 * group of work, `void kernel(const vitc_abi_call *call, i64 begin, i64 end)`,
 * directly or through call->parallel_for.  A kernel reads call->batch and
 * finds its tensors at planned offsets in call->workspace, in call->weights,
 * or in the caller's input and output arrays.
 *
 * Nothing outside codegen/llvm includes this. */
#ifndef VITC_CG_IMPL_H
#define VITC_CG_IMPL_H

#include "codegen/backend.h"
#include "codegen/package.h"
#include "codegen/poly.h"
#include "codegen/llvm/kernels.h"
#include "ir/opview.h"
#include "ir/ir.h"

#include <llvm-c/Core.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>

/* ---- schedule (schedule.c) ---- */
typedef enum {
    CG_NODE_KERNEL, /* makes code */
    CG_NODE_FUSED,  /* element-wise work computed inside the kernel of group[node] */
    CG_NODE_ALIAS   /* its output is its input 0 under another shape (Reshape & co) */
} cg_node_kind;

typedef enum { CG_LOC_NONE, CG_LOC_INPUT, CG_LOC_OUTPUT, CG_LOC_WEIGHTS, CG_LOC_WORKSPACE } cg_loc_kind;

typedef struct {
    cg_loc_kind kind;
    int index;      /* input / output slot */
    int64_t offset; /* bytes into the weights blob or the workspace; -1: not yet placed */
} cg_loc;

#define CG_MAX_KPTRS 40 /* tensors one kernel reads or writes */

/* What the descriptor of a graph compiled into the module says, kept from
 * its last node (cg_module_end_graph) to the descriptors (cg_module_finish). */
struct cg_variant {
    LLVMValueRef run_fn, ins, outs, knames, parts;
    int ninputs, noutputs, nknames, nparts;
    int64_t max_batch, fixed_batch;
    uint64_t workspace_bytes, source_hash;
};

typedef struct cg_ctx {
    CG_CTX_HEAD /* codegen/backend.h: g, opt, d, max_batch, plan (uses, views), t */
    cg_target target;
    char *triple, *cpu, *features; /* of the target machine; malloc'ed */
    LLVMTargetMachineRef tm;

    /* schedule: per node */
    cg_node_kind *kind;
    int *group;            /* the kernel node that computes this node's work */
    int *epilogue;         /* per int8 Linear: the root of the element-wise group its GEMM computes in
                            * its epilogue (schedule.c, epilogue_groups), else -1 */
    int64_t *scratch;      /* scratch bytes at max_batch */
    int64_t *scratch_off;  /* planned workspace offset of that scratch */
    int *bn_scale, *bn_shift; /* BatchNormalization folded to x*scale+shift: constant values */
    /* schedule: per value */
    int *alias_of;         /* a view's storage value, else -1 */
    cg_loc *loc;
    int *row_pad;          /* elements after each row: values only GEMMs write and read (schedule.c) */
    int npadded;           /* values with row_pad > 0 */
    uint64_t workspace_bytes, workspace_unplanned;

    /* weights blob, one for every graph of the module */
    cg_blob blob;
    int blob_object; /* embedded as an object file of its own (codegen/elf_obj.c) */
    /* with several graphs (one per input shape), weights are shared by
     * content: a graph's packed weights equal to another's are stored once */
    struct cg_wshare *wshare;
    int nwshare, capwshare;
    /* what the descriptor of each graph compiled so far says (cg_module_end_graph) */
    struct cg_variant *variants;
    int nvariants_done;

    /* LLVM */
    LLVMContextRef llc;
    LLVMModuleRef mod;
    LLVMBuilderRef b;  /* inside the kernel being built */
    LLVMBuilderRef rb; /* inside run() */
    LLVMTypeRef t_i1, t_i8, t_i16, t_i32, t_i64, t_f32, t_f64, t_ptr, t_void;
    LLVMTypeRef t_task; /* void (ptr, i64, i64) */
    LLVMTypeRef t_pf;   /* void (ptr pool, i64 n, ptr task, ptr arg) */
    LLVMTypeRef t_call; /* vitc_abi_call */
    LLVMTypeRef t_driver; /* void (ptr args, ptr pool, ptr pf, i32 nthreads): kernels.h drivers */
    LLVMValueRef run_fn, run_call, run_batch, run_pool, run_pf, run_nthreads, run_profile, run_profile_arg; /* this graph's */
    LLVMTypeRef t_tensor, t_model, t_part; /* vitc_abi_tensor, vitc_abi_model, vitc_abi_part */
    LLVMValueRef run_closure; /* [CG_MAX_KPTRS + 1 x ptr] in run()'s frame, reused by every launch */
    LLVMValueRef fn, fn_call, fn_batch; /* the kernel being built */
    LLVMValueRef fn_ptr[CG_MAX_KPTRS];  /* its tensors' base pointers, from the closure */
    LLVMBasicBlockRef fn_entry;
    /* kernels by the key of what they compute: one function for every node
     * that does the same work on other tensors (the layers of a ViT) */
    struct cg_kkey *kkeys;
    int nkkeys, capkkeys;

    /* kernels.h drivers already emitted, by kind and descriptor: the layers
     * of a transformer repeat the same few shapes */
    struct cg_kcache *kcache;
    int nkcache, capkcache;

    /* kernels, for the descriptor */
    char **knames;
    int nknames, capknames;
    struct {
        char *text[3]; /* kernels, op, source: vitc_abi_part */
    } *parts;          /* the profile's parts, one per node that launched code */
    int nparts, capparts;
    int nfuncs;
} cg_ctx;

/* Classifies nodes, folds element-wise chains, turns BatchNormalization into
 * constants, places every value (memplan for the workspace).  Returns status. */
int cg_schedule(cg_ctx *cg);
void cg_schedule_free(cg_ctx *cg);
/* The value whose storage v uses (follows views). */
int cg_root(const cg_ctx *cg, int v);

/* ---- the module (module.c) ----
 * One module holds the code of every graph compiled into the .so (one per
 * input shape): each graph has a run() of its own (cg_run_begin), its
 * descriptor's fields are kept when its last node is done
 * (cg_module_end_graph), and the descriptors, the first one exported and
 * listing the others, are made when the weights are all in (cg_module_finish).
 * Kernels are shared between graphs as between nodes, by what they compute. */
int cg_module_begin(cg_ctx *cg);
/* A new run() for the graph cg->g, the builder rb at its start. */
int cg_run_begin(cg_ctx *cg);
/* Ends run() of cg->g and keeps what its descriptor says. */
int cg_module_end_graph(cg_ctx *cg);
/* Adds the weights blob and the descriptors. */
int cg_module_finish(cg_ctx *cg);
/* 1 if fn is the run() of one of the module's graphs. */
int cg_is_run(const cg_ctx *cg, LLVMValueRef fn);
void cg_module_free(cg_ctx *cg);

/* Memory type of a dtype (bool as i8); NULL if the backend cannot compute on it. */
LLVMTypeRef cg_mem_type(cg_ctx *cg, ir_dtype t);
/* The same for bits only (any dtype, as an integer of its size). */
LLVMTypeRef cg_raw_type(cg_ctx *cg, ir_dtype t);

/* Kernels take a closure {call, p0, p1, ...}: the base pointers of their
 * tensors are computed in run(), so that the code depends only on shapes and
 * one function serves every node that does the same work.
 *
 * cg_kernel_find returns the kernel made earlier under key (noting it with
 * label for the descriptor), or NULL; then cg_kernel_begin starts a new one
 * reading nptrs pointers (cg->fn_ptr[i]) with the builder cg->b in its entry,
 * cg->fn_call and cg->fn_batch loaded; cg_kernel_end finishes it and files it
 * under key (NULL: never shared). */
LLVMValueRef cg_kernel_find(cg_ctx *cg, const char *key, const char *label);
LLVMValueRef cg_kernel_begin(cg_ctx *cg, const char *label, int nptrs);
void cg_kernel_end(cg_ctx *cg, const char *key);
void cg_kernel_keys_free(cg_ctx *cg);
/* In run(): calls fn over [0, nitems) with the closure {call, ptrs...},
 * through parallel_for when the work (about `work` simple operations in all)
 * is worth splitting. */
void cg_launch(cg_ctx *cg, LLVMValueRef fn, const LLVMValueRef *ptrs, int nptrs, cg_poly nitems, cg_poly work);
/* Appends printf-style text to a kernel key of n bytes (start from "").  A
 * key that does not fit becomes "!" for good: such a kernel is never shared. */
void cg_key_add(char *key, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void cg_key_poly(char *key, size_t n, cg_poly p);
/* Declares a kernels.h driver and calls it from run() with an args struct
 * whose fields are the given values (all pointer- or i64-sized). */
void cg_call_driver(cg_ctx *cg, LLVMValueRef driver, LLVMValueRef *fields, int nfields);

/* A polynomial's value as i64 inside builder b (batch: the i64 batch there). */
LLVMValueRef cg_poly_value(cg_ctx *cg, LLVMBuilderRef b, LLVMValueRef batch, cg_poly p);
/* Base pointer of value v's storage, computed in builder b from the call. */
LLVMValueRef cg_value_ptr(cg_ctx *cg, LLVMBuilderRef b, LLVMValueRef call, int v);
/* Pointer to byte off of the weights blob, in builder b. */
LLVMValueRef cg_weights_ptr(cg_ctx *cg, LLVMBuilderRef b, LLVMValueRef call, int64_t off);
/* Records a kernel function's name and label for the descriptor. */
void cg_note_kernel(cg_ctx *cg, const char *fname, const char *label);
/* Ends a part of the profile: node's code, whose kernels are those noted
 * from kernel_names[first_kname] on.  Records the part for the descriptor
 * and makes run() report it done (call->profile) when profiling. */
void cg_profile_mark(cg_ctx *cg, int node, int first_kname);
/* Base pointer of node's scratch (plus byte offset). */
LLVMValueRef cg_scratch_ptr(cg_ctx *cg, LLVMBuilderRef b, LLVMValueRef call, int node, int64_t byte_off);
/* The caller's buffer for graph output k. */
LLVMValueRef cg_out_slot_ptr(cg_ctx *cg, LLVMBuilderRef b, LLVMValueRef call, int k);
/* Pointer to element idx (i64) of type t from base. */
LLVMValueRef cg_gep(cg_ctx *cg, LLVMBuilderRef b, LLVMTypeRef t, LLVMValueRef base, LLVMValueRef idx);
LLVMValueRef cg_i64(cg_ctx *cg, int64_t x);
LLVMValueRef cg_f32(cg_ctx *cg, double x);

/* Weights: appends bytes (64-byte aligned), returns the offset or -1. */
int64_t cg_weights_add(cg_ctx *cg, const void *data, size_t n);
/* Reserves n zeroed bytes; *p points at them until the next add. */
int64_t cg_weights_reserve(cg_ctx *cg, size_t n, void **p);
/* Offset of constant v's data in the blob (added on first use); -1 on error. */
int64_t cg_weights_of(cg_ctx *cg, int v);
/* The n bytes at off, the blob's last, are final: with several graphs, the
 * offset of the same bytes stored before (the blob cut back to off), else
 * off.  Every offset into the blob goes through here once its bytes are
 * written (cg_weights_add and cg_weights_of do it themselves). */
int64_t cg_weights_share(cg_ctx *cg, int64_t off, size_t n);

/* Counted loop [from, to) in builder b; the body goes between begin and end. */
typedef struct {
    LLVMValueRef iv;
    LLVMBasicBlockRef head, body, exit;
} cg_loop;
void cg_loop_begin(cg_ctx *cg, LLVMBuilderRef b, cg_loop *l, LLVMValueRef from, LLVMValueRef to);
void cg_loop_end(cg_ctx *cg, LLVMBuilderRef b, cg_loop *l);
/* A stack slot in the current kernel's entry block (promoted to a register by -O1+). */
LLVMValueRef cg_alloca(cg_ctx *cg, LLVMTypeRef t, const char *name);
/* Calls an overloaded intrinsic ("llvm.sqrt") or a libm function of one/two args. */
LLVMValueRef cg_intrinsic(cg_ctx *cg, LLVMBuilderRef b, const char *name, LLVMTypeRef t, LLVMValueRef *args, int n);
LLVMValueRef cg_libm(cg_ctx *cg, LLVMBuilderRef b, const char *name, LLVMTypeRef t, LLVMValueRef *args, int n);
/* exp of f32 as vectorisable IR (vmath.c). */
LLVMValueRef cg_exp_f32(cg_ctx *cg, LLVMBuilderRef b, LLVMValueRef x);
/* Float ops with reassociation allowed (for vectorised reductions). */
LLVMValueRef cg_fadd_reassoc(LLVMBuilderRef b, LLVMValueRef x, LLVMValueRef y);
/* Reports an error on node (or the graph if node < 0); returns the status. */
int cg_fail(cg_ctx *cg, int status, int node, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* ---- strided views and the map loop nest (map.c) ---- */
/* Elements of `value`'s storage (or of a node's scratch when value < 0)
 * addressed as base + sum idx[i] * strides[i]. */
typedef struct {
    int value;        /* a graph value's storage, or -1 */
    int scratch_node; /* else a node's scratch (plus byte_off), or -1 */
    int out_slot;     /* else the caller's output k */
    int64_t byte_off;
    ir_dtype dtype;
    int rank;
    cg_poly dims[IR_MAX_RANK], strides[IR_MAX_RANK];
    cg_poly base;
} cg_view;

/* The row-major view of value v in its storage. */
cg_view cg_view_of(cg_ctx *cg, int v);
/* The row-major view of graph output slot k (shaped as that output). */
cg_view cg_view_out_slot(cg_ctx *cg, int k);
/* The view's storage base pointer (without its base offset) in builder b. */
LLVMValueRef cg_view_ptr(cg_ctx *cg, LLVMBuilderRef b, LLVMValueRef call, const cg_view *v);
/* A row-major view of a node's scratch with the given dims. */
cg_view cg_view_scratch(int node, int64_t byte_off, ir_dtype dt, int rank, const cg_poly *dims);
/* v read under numpy broadcasting as the shape dims[rank]: strides 0 where it broadcasts. */
cg_view cg_view_broadcast(const cg_view *v, int rank, const cg_poly *dims);

#define CG_MAP_MAX_OPS 32
typedef struct cg_map cg_map;
/* Computes one element: ptrs[k] points at operand k's element (k = 0 is the
 * output).  Returns the value to store in the output (its memory type), or
 * NULL when the body stored it itself. */
typedef LLVMValueRef (*cg_map_body)(cg_ctx *cg, const cg_map *m, LLVMBuilderRef b, LLVMValueRef *ptrs);
struct cg_map {
    const char *label;
    int rank;
    cg_poly dims[IR_MAX_RANK];
    int nops;
    cg_view op[CG_MAP_MAX_OPS]; /* each of rank `rank` with strides over dims */
    cg_map_body body;           /* NULL: copy operand 1's bits into operand 0 */
    const char *sig;            /* what body computes, for sharing the kernel (NULL: never) */
    int raw;                    /* body reads and writes raw bits (cg_raw_type), not numbers */
    void *ud;
    int cost;                   /* rough operations per element, for the threading decision */
};
/* Emits the kernel for m and its launch in run(). */
int cg_emit_map(cg_ctx *cg, const cg_map *m, int node);

/* ---- per-op code (emit_*.c): each checks support and emits a node's kernel ---- */
int cg_elem_supports(const ir_graph *g, const ir_node *n, char *why, size_t len);
int cg_emit_elementwise(cg_ctx *cg, int node);
/* 1 if node n computes in straight-line IR on <n x float> registers: f32
 * inputs and output, an op whose formula calls no libm function. */
int cg_elem_vector_ok(const ir_graph *g, const ir_node *n);
/* The element-wise group of root (schedule.c's epilogue_groups) as an
 * internal always-inline function <lanes x float> f(<lanes x float> leaf),
 * its only other inputs one-element constants; name gets its symbol
 * (vitc.epi.*, named after what it computes, so equal groups share one).
 * NULL after a cg_fail. */
LLVMValueRef cg_elem_epilogue(cg_ctx *cg, int root, int leaf, int lanes, char *name, size_t nlen);
/* The ops of group root joined by '+' ("Div+Erf+Mul"), for labels. */
void cg_group_ops(const cg_ctx *cg, int root, char *buf, size_t len);
/* Copies value src into dst (a view of the same shape); node labels it. */
int cg_emit_copy(cg_ctx *cg, int src, const cg_view *dst, int node);
/* 1 for ops the map kernels compute element by element: the op table's IR_FAM_MAP
 * (the element-wise ops and BatchNormalization). */
int cg_is_map_op(ir_op op);
int cg_data_supports(const ir_graph *g, const ir_node *n, char *why, size_t len);
int cg_emit_data(cg_ctx *cg, int node);
int cg_norm_supports(const ir_graph *g, const ir_node *n, char *why, size_t len);
int cg_emit_norm(cg_ctx *cg, int node);
int cg_matmul_supports(const ir_graph *g, const ir_node *n, char *why, size_t len);
int cg_emit_matmul(cg_ctx *cg, int node);
int cg_attention_supports(const ir_graph *g, const ir_node *n, char *why, size_t len);
int cg_emit_attention(cg_ctx *cg, int node);
/* Frees the cache of kernels.h drivers. */
void cg_kcache_free(cg_ctx *cg);
/* Scratch bytes a node needs at max_batch (convolutions as im2col + GEMM). */
int64_t cg_matmul_scratch(const ir_graph *g, const ir_node *n, int64_t max_batch);
/* A LinearInt8's scratch at max_batch (bytes, or -1 past int64): its input
 * quantized to u8 rows of cg_int8_row_bytes, then the rows' scales, zero
 * points and (per-tensor quantization) ranges, at byte offsets off[0..3]. */
int64_t cg_int8_scratch(const ir_graph *g, const ir_linear *v, int64_t max_batch, int64_t off[4]);
/* The row stride of those u8 rows: K rounded up to 64 bytes. */
static inline int64_t cg_int8_row_bytes(int64_t K) { return (K + 63) / 64 * 64; }
/* 1 if n's code is the GEMM of gemm.c with its x as A [M, K] and its y as
 * C [M, N] (row strides cg->row_pad apart: any lda >= K, ldc >= N), its
 * operands in *v: a Linear, or a MatMul by a constant 2-D weight (as a
 * Linear without bias, activation or residual). */
int cg_linear_of(const ir_graph *g, const ir_node *n, ir_linear *v);

/* ---- target machine, optimisation, object file (target.c) ---- */
int cg_target_create(cg_ctx *cg, LLVMTargetMachineRef *tm);
/* The target cg_target_create makes of o, with no graph and nothing
 * reported; 0, or -1 where it fails (the compile then says why). */
int cg_target_of_options(const cg_options *o, cg_target *t);
int cg_optimize(cg_ctx *cg, LLVMTargetMachineRef tm);
int cg_emit_object(cg_ctx *cg, LLVMTargetMachineRef tm, const char *path);
/* The pieces of cg_optimize, for split.c: the code generator's level for
 * -O, the module check, and the -O pipeline on any module (0, or -1 with err). */
LLVMCodeGenOptLevel cg_codegen_level(const cg_ctx *cg);
int cg_verify_module(cg_ctx *cg);
int cg_run_pipeline(LLVMModuleRef mod, LLVMTargetMachineRef tm, int opt_level, char *err, size_t nerr);
/* split.c: how many parts the optimisation and code generation are worth
 * (one per core, each with enough code); then optimises and writes the
 * module's code as *nparts objects (paths[0..]), on as many threads, and sets
 * *nparts to the number written (1: the module was optimised in place and
 * written to paths[0]).  Returns status. */
int cg_split_parts(const cg_ctx *cg);
int cg_optimize_split(cg_ctx *cg, LLVMTargetMachineRef tm, char paths[][PATH_MAX], int *nparts);

#endif
