/* cu_impl.h: what the files of the CUDA backend share.
 *
 *   cu_backend.c   the cg_backend instance: supports(), compile() in phases
 *   cu_plan.c      where every value lives (views, storage types, the device
 *                  workspace from passes/memplan.c, host staging), kernels
 *                  (deduplicated by their text) and launches
 *   cu_linear.c    Linear / MatMul / Gemm with a constant weight: tensor-core
 *                  or SIMT GEMM, the weight converted and laid out at compile time
 *   cu_attention.c Attention
 *   cu_norm.c      LayerNormalization, Softmax, reductions
 *   cu_elem.c      element-wise ops (broadcasting), BatchNormalization
 *   cu_data.c      data movement (Transpose, Slice, Concat, Split, Expand,
 *                  Gather), and the conversions at the graph's inputs and outputs
 *   cu_misc.c      MatMul and Gemm between activations, Conv
 *   cu_nvrtc.c     the program through NVRTC for every target, ptxas statistics
 *   cu_package.c   the .so: plan, images, weights and descriptor, as C source
 *                  and an ELF object linked by cc (codegen/package.h)
 *
 * Generated kernels are CUDA C++ over the device library
 * (codegen/cuda/device, embedded as cu_lib_text): each is
 *     VK_KERNEL(name, threads, vk_gemm_params) { ... p.out ... }
 * taking its family's struct of device/params.h, whose fields the launch
 * sets by name: cu_arg_*(c, l, CU_FIELD(vk_gemm_params, out), ...). */
#ifndef VITC_CU_IMPL_H
#define VITC_CU_IMPL_H

#include "codegen/backend.h"
#include "codegen/cuda/device/params.h"
#include "codegen/package.h"
#include "codegen/poly.h"
#include "ir/opview.h"
#include "ir/ir.h"
#include "runtime/abi.h"

#include <stddef.h>
#include <stdint.h>

extern const char cu_lib_text[];

/* A params struct's fields are the launch's argument slots (params.h). */
_Static_assert(VK_PARAM_SLOTS == VITC_CUDA_MAX_ARGS, "params.h's slots are the launch's");
_Static_assert(sizeof(void *) == 8, "device pointers and host pointers of 8 bytes");
/* The argument slot of field f of params struct T. */
#define CU_FIELD(T, f) ((int)(offsetof(T, f) / 8))

typedef enum { CU_FP32, CU_TF32, CU_FP16, CU_BF16 } cu_precision;

/* Tile counters of the split-K GEMMs: a split GEMM has fewer tiles than a
 * wave of blocks (cu_linear.c), so this many cover any; a stream-K GEMM's
 * need more where its grid is large (cu_linear_counters). */
enum { CU_COUNTERS = 256 };

/* The GPU targets every program is compiled for; the statistics of ptxas
 * are kept for those and for sm_90a (slot CU_NTARGETS), the image of a
 * program whose GEMMs run on wgmma there (cu_ctx.wgmma). */
enum { CU_NTARGETS = 2, CU_NSTATS = CU_NTARGETS + 1 };
extern const int cu_target_arch[CU_NTARGETS]; /* 80, 90 */
/* "sm_80", "sm_90", "sm_90a": the target of statistics slot t. */
const char *cu_stats_target(int t);

/* ---- a growable string ---- */
typedef struct {
    char *s;
    size_t len, cap;
    int oom;
} cu_str;
void cu_str_add(cu_str *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cu_str_free(cu_str *b);

/* ---- kernels and launches ---- */
typedef struct {
    char *name;      /* entry point: "vk_<kind><n>" */
    char *label;     /* what it computes, for `vitc inspect` */
    char *text;      /* the definition, its name as "@" */
    int nlaunches;
    int regs[CU_NSTATS], spill[CU_NSTATS], stack[CU_NSTATS]; /* ptxas -v; -1 unknown (no such image) */
} cu_kernel;

typedef struct {
    int kind;        /* VITC_CUDA_ARG_* */
    cg_poly v;
} cu_arg;

typedef struct {    /* vitc_cuda_tmap, rows a polynomial in the batch */
    int arg, elem;  /* arg: the slot of the pointer where row 0 starts (CU_FIELD) */
    cg_poly rows;
    int64_t cols, row_bytes;
    unsigned box_rows, box_cols;
} cu_tmap;

typedef struct {
    int func, node;
    unsigned block, smem;
    unsigned smem_specific; /* with the arch-specific image (gemm_wg, gemm_tma); 0: smem */
    int ntmaps;             /* 0 or VITC_CUDA_MAX_TMAPS (gemm_tma) */
    cu_tmap tmaps[VITC_CUDA_MAX_TMAPS];
    cg_poly grid[3];
    int64_t div[3];
    int64_t min_batch, max_batch;
    int nargs;              /* slots up to the last one set; those not set are 0 */
    cu_arg args[VITC_CUDA_MAX_ARGS];
    uint32_t args_set;      /* bit k: slot k set */
} cu_launch;

typedef struct cu_ctx {
    CG_CTX_HEAD /* codegen/backend.h: g, opt, d, max_batch, plan (uses, views), t */
    cg_blob weights;      /* the weights blob (codegen/package.h) */
    cu_precision prec;
    int wgmma;            /* a kernel uses gemm_wg (VITC_CUDA_WGMMA=1): NVRTC adds an sm_90a image */
    ir_dtype act;         /* storage of float activations: IR_F32, IR_F16 or IR_BF16 */

    /* per value */
    ir_dtype *sdt;        /* element type as stored on the device */
    int64_t *off;         /* root values: workspace offset (bytes), -1 if none */
    int64_t *woff;        /* constants: weights offset as stored, -1 until used */
    int64_t *gemm_w;      /* constants used as GEMM weights: offset of their GEMM form, -1 */
    /* per node */
    int64_t *scratch_off; /* workspace offset of the node's scratch (a split GEMM's partial sums), -1 */
    int *ln_of;           /* a GEMM: the LayerNorm or RMSNorm node folded into it (cu_norm_fold), -1 */
    unsigned char *ln_folded; /* a norm folded into the GEMMs that read it: it computes its rows' statistics */
    /* per graph input / output */
    vitc_cuda_io *in_io, *out_io;
    uint64_t ws_bytes, ws_unplanned;
    int64_t counters_off; /* the split-K and stream-K GEMMs' tile counters in the workspace; -1 none */
    int64_t ncounters;    /* how many (cu_linear_counters) */
    int counters_launch;  /* 1 + the launch that zeroes them at the start of a run; 0: none yet */

    cu_kernel *k;
    int nk, capk;
    cu_launch *l;
    int nl, capl;
} cu_ctx;

/* ---- cu_plan.c ---- */
/* Views, storage types, the workspace plan and staging; returns status. */
int cu_plan_storage(cu_ctx *c);
void cu_plan_free(cu_ctx *c);
int cu_root(const cu_ctx *c, int v);
int cu_fail(cu_ctx *c, int status, int node, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* The device library's name of a storage type ("float", "h16", ...); NULL if none. */
const char *cu_ctype(ir_dtype t);
/* Storage type of value v. */
ir_dtype cu_sdt(const cu_ctx *c, int v);

/* Registers a kernel (text with its name written "@"), reusing an identical
 * one; returns its index or -1 (error reported). */
int cu_add_kernel(cu_ctx *c, const char *kind, const char *label, const cu_str *text);
/* A new launch of kernel func for node (grid 1x1x1, every batch); NULL on error. */
cu_launch *cu_launch_new(cu_ctx *c, int func, int node, unsigned block, unsigned smem);
/* Sets argument slot `slot` (CU_FIELD of the kernel's params struct; each
 * slot once) to: value v's storage (a device pointer), the workspace at
 * off, off in the buffer of kind (VITC_CUDA_ARG_WORKSPACE or _WEIGHTS), an
 * integer polynomial in the batch.  Slots left unset read 0. */
void cu_arg_value(cu_ctx *c, cu_launch *l, int slot, int v);
void cu_arg_ws(cu_ctx *c, cu_launch *l, int slot, int64_t off);
void cu_arg_ptr(cu_ctx *c, cu_launch *l, int slot, int kind, int64_t off);
void cu_arg_int(cu_ctx *c, cu_launch *l, int slot, cg_poly p);
/* Offset of constant v's bytes in the weights blob (added on first use); -1 on error. */
int64_t cu_weights_of(cu_ctx *c, int v);

/* f as a C float literal ("1.0f", "1e-06f", ...) into buf. */
const char *cu_float_lit(float f, char *buf, size_t n);
/* A polynomial in B as a C expression of the kernel's local `B` ("(17LL * B)"). */
const char *cu_poly_expr(cg_poly p, char *buf, size_t n);

/* ---- per-op generators: each checks support, and emits a node's launches ---- */
int cu_linear_supports(const ir_graph *g, const ir_node *n, char *why, size_t len);
int cu_emit_linear(cu_ctx *c, int node);
/* Bytes of scratch node n needs at some batch (a split GEMM's partial sums), 0 if none. */
int64_t cu_linear_scratch(const cu_ctx *c, int node);
/* The tile counters the GEMMs need where any has scratch. */
int64_t cu_linear_counters(const cu_ctx *c);
/* The GEMM weight layout: W [K, N] fp32 into Wt [Np, Kp] of type t (F32, F16
 * or BF16), transposed, zero-padded, converted rounding to nearest even. */
void cu_pack_weight(const float *W, int64_t K, int64_t N, int64_t Kp, int64_t Np, ir_dtype t, void *out);
int cu_attention_supports(const ir_graph *g, const ir_node *n, char *why, size_t len);
int cu_emit_attention(cu_ctx *c, int node);
int cu_norm_supports(const ir_graph *g, const ir_node *n, char *why, size_t len);
int cu_emit_norm(cu_ctx *c, int node);
/* Marks the norms to fold into the GEMMs that read them (ln_of, ln_folded),
 * once the storage types are known; returns status. */
int cu_norm_fold(cu_ctx *c);
int cu_elem_supports(const ir_graph *g, const ir_node *n, char *why, size_t len);
int cu_emit_elem(cu_ctx *c, int node);
int cu_data_supports(const ir_graph *g, const ir_node *n, char *why, size_t len);
int cu_emit_data(cu_ctx *c, int node);
int cu_misc_supports(const ir_graph *g, const ir_node *n, char *why, size_t len);
int cu_emit_misc(cu_ctx *c, int node);

/* ---- strided copies (cu_data.c): the workhorse of data movement ----
 * dst[i] = src[...] over `rank` dims, each side addressed as base + sum idx
 * * stride (elements, polynomials in B), converting between storage types. */
typedef struct {
    int kind;              /* VITC_CUDA_ARG_WORKSPACE or _WEIGHTS */
    int64_t byte_off;      /* of the buffer */
    ir_dtype t;
    cg_poly base;          /* element offset */
    cg_poly stride[IR_MAX_RANK];
} cu_view;
/* The row-major view of value v's storage. */
cu_view cu_view_of(cu_ctx *c, int v);
/* A row-major view of a workspace buffer of type t with the given dims. */
cu_view cu_view_ws(int64_t byte_off, ir_dtype t, int rank, const cg_poly *dims);
int cu_emit_copy(cu_ctx *c, int node, int rank, const cg_poly *dims, const cu_view *dst, const cu_view *src,
                 const char *label);
/* Graph inputs into their device buffers, outputs into their staging. */
int cu_emit_input_conversions(cu_ctx *c);
int cu_emit_output_conversions(cu_ctx *c);

/* ---- cu_nvrtc.c ---- */
typedef struct {
    int kind, arch, arch_specific; /* VITC_CUDA_IMAGE_* */
    void *data;
    size_t bytes;
} cu_image;
/* Compiles the program for every target: images (CUBIN per target, plus PTX
 * of the newest) and each kernel's registers and spills.  Returns status. */
int cu_nvrtc_compile(cu_ctx *c, const char *program, cu_image *images, int *nimages);
void cu_images_free(cu_image *images, int n);
/* Loads NVRTC (dlopen, once); 0 with *why saying what was looked for. */
int cu_nvrtc_load(const char **why);
/* The NVRTC version as "13.0" ("?" when it cannot be loaded). */
const char *cu_nvrtc_version(void);

/* ---- cu_package.c ---- */
int cu_package(cu_ctx *c, const cu_image *images, int nimages);

/* The whole program text (library + kernels); malloc'ed, NULL when out of memory. */
char *cu_program_text(cu_ctx *c);

#endif
