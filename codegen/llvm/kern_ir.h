/* kern_ir.h: the small vocabulary the kernel generators (gemm.c, bgemm.c,
 * attention.c) build LLVM IR with: a context holding the types of one target,
 * constants, float addressing, (masked) vector loads and stores, broadcasts,
 * FMA, horizontal reductions, counted loops with loop-carried values, and the
 * vector math of the epilogues (exp, erf, GELU).  Private to codegen/llvm's
 * kernels; the rest of the backend has its own builders. */
#ifndef VITC_KERN_IR_H
#define VITC_KERN_IR_H

#include "codegen/llvm/kernels.h"
#include "ir/ir.h"

#define KERN_MAX_CARRY 64 /* loop-carried values of one loop (accumulators) */

typedef struct {
    LLVMContextRef ctx;
    LLVMModuleRef mod;
    LLVMBuilderRef b;
    cg_target t;
    int vf;                        /* floats per vector */
    LLVMTypeRef f32, i1, i32, i64, ptr, voidt;
    LLVMTypeRef vty;               /* <vf x float> */
    LLVMTypeRef vmask;             /* <vf x i1> */
    char tag[32];                  /* names the target in generated symbols */
} kern;

/* A counted loop "for (iv = begin; cond; iv += step)" with values carried
 * from one iteration to the next (accumulators).  Inside the body, iv and
 * carry[] are the current values; after kern_for_end, iv is the first value
 * that failed the condition and carry[] the values at exit. */
typedef struct {
    LLVMBasicBlockRef head, body, exit;
    LLVMValueRef iv, end;
    LLVMValueRef carry[KERN_MAX_CARRY];
    int ncarry;
    int64_t step;
} kern_loop;

/* Valid targets: vec_floats 4, 8 or 16 and nregs >= 16.  0 on success. */
int kern_init(kern *k, LLVMModuleRef mod, const cg_target *t);
void kern_dispose(kern *k);

/* ---- functions ---- */
/* Adds a function (internal linkage if internal) with an entry block and
 * positions the builder there.  Every generated function is nounwind. */
LLVMValueRef kern_func(kern *k, const char *name, LLVMTypeRef fnty, int internal);
LLVMBasicBlockRef kern_block(kern *k, const char *name);
/* The type of the kernels' drivers: void(ptr args, ptr pool, ptr pf, i32 nthreads). */
LLVMTypeRef kern_driver_type(kern *k);
/* The type of a task: void(ptr arg, i64 begin, i64 end). */
LLVMTypeRef kern_task_type(kern *k);
/* Emits pf(pool, n, task, arg): the runtime's parallel_for. */
void kern_call_pf(kern *k, LLVMValueRef pf, LLVMValueRef pool, LLVMValueRef n, LLVMValueRef task,
                  LLVMValueRef arg);
/* A kernel's argument struct: nptr pointers, then one i64 (the rows or batch). */
LLVMTypeRef kern_args_type(kern *k, int nptr);
/* The closure every kernel's driver hands its tasks: {ptr args, i64 nblk, i64 blk,
 * i64 aux}: the kernel's argument struct, the number of row blocks, the rows per
 * block, and one more run-time choice of the driver's (0 unless it sets one). */
LLVMTypeRef kern_closure_type(kern *k);
/* Opens driver(args, pool, pf, nthreads) named name: returns at once when the
 * i64 field count_field of args is <= 0.  Leaves the builder in the block that
 * runs, with *count that field and *nthreads the thread count (at least 1). */
LLVMValueRef kern_driver_open(kern *k, const char *name, LLVMTypeRef argsty, unsigned count_field,
                              LLVMValueRef *count, LLVMValueRef *nthreads);
/* Closes driver fn: stores {args, nblk, blk, aux} in a closure (aux NULL: 0),
 * runs tasks 0..ntasks-1 of task over it through the pool's parallel_for. */
void kern_driver_close(kern *k, LLVMValueRef fn, LLVMValueRef nblk, LLVMValueRef blk, LLVMValueRef aux,
                       LLVMValueRef ntasks, LLVMValueRef task);
/* How a driver splits its work: nblk row blocks of blk rows, a run-time
 * choice aux of its own (NULL: 0), and ntasks tasks. */
typedef struct {
    LLVMValueRef nblk, blk, aux, ntasks;
} kern_split;
/* The split of `outer` independent problems (images, or images x heads) of
 * rows rows each: whole problems per task, their rows split into blocks of
 * a multiple of mr only while there would be fewer than 3 tasks a thread. */
kern_split kern_split_rows(kern *k, LLVMValueRef outer, int64_t rows, int64_t mr, LLVMValueRef nthreads);
/* The split of a GEMM's M rows and npanels column panels (the AMX and int8
 * GEMMs): row blocks of at most mc_max rows, as even as whole tiles of mr
 * make them, then column blocks of whole panels until there are
 * tasks_per_thread tasks a thread (at most one per panel, in aux). */
kern_split kern_split_panels(kern *k, LLVMValueRef M, int64_t mr, int64_t mc_max, int64_t npanels,
                             int tasks_per_thread, LLVMValueRef nthreads);
/* A kernel as each generator (gemm.c, gemm_amx.c, bgemm.c, attention.c)
 * describes it to kern_emit: the name of its task, the task, and how its
 * driver splits the work of a call among the tasks. */
typedef struct {
    int nptr; /* pointer fields of the args struct (kern_args_type) before its i64 count */
    /* Optional: what the generator needs of k before naming the task; 0 when it can go on. */
    int (*prepare)(kern *k, void *gen);
    /* The task's symbol into buf: kernels of equal descriptions share one task. */
    void (*task_name)(const kern *k, const void *gen, char *buf, size_t len);
    /* Builds the task named name (and what it calls) into k's module; NULL when it cannot. */
    LLVMValueRef (*task)(kern *k, void *gen, const char *name, LLVMTypeRef argsty);
    /* The split of count (the args' i64: rows or images) over nthreads. */
    kern_split (*split)(kern *k, void *gen, LLVMValueRef count, LLVMValueRef nthreads);
    void *gen; /* the generator's own state, handed to each of the above */
} kern_kernel;
/* The driver named name of kernel kk for target t into mod, its task built
 * unless the module has one of that name already; NULL when t is not a
 * valid target or the task cannot be built. */
LLVMValueRef kern_emit(LLVMModuleRef mod, const cg_target *t, const char *name, const kern_kernel *kk);
/* Reads a task's closure (kern_closure_type) at parameter 0 of task fn; aux
 * may be NULL when unused. */
void kern_task_closure(kern *k, LLVMValueRef fn, LLVMValueRef *args, LLVMValueRef *nblk, LLVMValueRef *blk,
                       LLVMValueRef *aux);
/* Opens the loop over task fn's range [begin, end) in T and splits each task
 * t into *outer = t / nblk and *inner = t % nblk (the row block). */
void kern_task_loop(kern *k, LLVMValueRef fn, kern_loop *T, LLVMValueRef nblk, LLVMValueRef *outer,
                    LLVMValueRef *inner);

/* The declaration of LLVM intrinsic name (overloaded on types, or ntypes 0)
 * and its type in *fnty; NULL when this LLVM does not know the name. */
LLVMValueRef kern_intrinsic(kern *k, const char *name, LLVMTypeRef *types, size_t ntypes, LLVMTypeRef *fnty);

/* ---- scalars ---- */
LLVMValueRef kern_i64(kern *k, int64_t v);
LLVMValueRef kern_f32(kern *k, float v);
LLVMValueRef kern_add(kern *k, LLVMValueRef a, LLVMValueRef b);
LLVMValueRef kern_mul(kern *k, LLVMValueRef a, LLVMValueRef b);
LLVMValueRef kern_addc(kern *k, LLVMValueRef a, int64_t c);
LLVMValueRef kern_mulc(kern *k, LLVMValueRef a, int64_t c);
LLVMValueRef kern_min(kern *k, LLVMValueRef a, LLVMValueRef b); /* signed i64 */
LLVMValueRef kern_max(kern *k, LLVMValueRef a, LLVMValueRef b);
LLVMValueRef kern_cdiv(kern *k, LLVMValueRef a, LLVMValueRef b); /* ceil(a / b), a >= 0, b > 0 */
/* The i64 field i of a struct of pointers and i64s behind p. */
LLVMValueRef kern_field(kern *k, LLVMTypeRef sty, LLVMValueRef p, unsigned i, LLVMTypeRef fty);
/* The nptr pointer fields of a kernel's args struct (kern_args_type) at
 * args into ptr[], in order; returns its i64 count (rows or images). */
LLVMValueRef kern_args_read(kern *k, LLVMTypeRef argsty, LLVMValueRef args, int nptr, LLVMValueRef *ptr);

/* ---- addressing and memory (floats) ---- */
LLVMValueRef kern_gep(kern *k, LLVMValueRef p, LLVMValueRef idx);
LLVMValueRef kern_gepc(kern *k, LLVMValueRef p, int64_t idx);
/* A vector at p; only the first lanes lanes are read when lanes < vf (the
 * others are pass, or zero when pass is NULL). */
LLVMValueRef kern_vload(kern *k, LLVMValueRef p, int lanes, LLVMValueRef pass);
/* The same with a mask computed at run time (<vf x i1>): no memory is read
 * where it is clear. */
LLVMValueRef kern_vload_masked(kern *k, LLVMValueRef p, LLVMValueRef mask, LLVMValueRef pass);
/* A prefetch of the cache line at p for reading: locality 3 into L1, 2 into
 * L2 (llvm.prefetch; never faults, whatever p is). */
void kern_prefetch(kern *k, LLVMValueRef p, int locality);
/* Stores v at p; only the first lanes lanes when lanes < vf. */
void kern_vstore(kern *k, LLVMValueRef v, LLVMValueRef p, int lanes);
/* The same with a mask computed at run time: no memory is written where it is clear. */
void kern_vstore_masked(kern *k, LLVMValueRef v, LLVMValueRef p, LLVMValueRef mask);
LLVMValueRef kern_bcast(kern *k, LLVMValueRef p); /* splat of the float at p */
LLVMValueRef kern_splat(kern *k, LLVMValueRef scalar);
LLVMValueRef kern_vconst(kern *k, float v);
LLVMValueRef kern_lane_mask(kern *k, int lanes); /* <vf x i1>: lane < lanes */
/* <vf x i1>: lane < n for an i64 n known at run time (below 0: none, from vf: all). */
LLVMValueRef kern_lanes_below(kern *k, LLVMValueRef n);

/* ---- arithmetic (scalars or vectors alike) ---- */
LLVMValueRef kern_fma(kern *k, LLVMValueRef a, LLVMValueRef b, LLVMValueRef c); /* a*b + c */
LLVMValueRef kern_fmax(kern *k, LLVMValueRef a, LLVMValueRef b);
LLVMValueRef kern_fmin(kern *k, LLVMValueRef a, LLVMValueRef b);
LLVMValueRef kern_hsum(kern *k, LLVMValueRef v); /* sum of the lanes */
LLVMValueRef kern_hmax(kern *k, LLVMValueRef v); /* max of the lanes */

/* ---- loops ---- */
/* Starts a loop over iv from begin while iv < end (whole == 0) or while
 * iv + step <= end (whole == 1, only whole steps). */
void kern_for(kern *k, kern_loop *l, LLVMValueRef begin, LLVMValueRef end, int64_t step, int whole,
              int ncarry, const LLVMValueRef *init, const char *name);
void kern_for_end(kern *k, kern_loop *l, const LLVMValueRef *next);

/* ---- vector math (kern_math.c: vmath.c's over the kernel's vector type) ---- */
/* exp(x) for x in [-87, 88] within 2 ulp; clamps outside that range.
 * nonpositive: the caller guarantees x <= 0 (up to rounding), saving the
 * upper clamp. */
LLVMValueRef kern_vexp(kern *k, LLVMValueRef x, int nonpositive);
/* FNV-1a of n bytes: a kernel name's tag for parameters too many to spell
 * out (fake-quant points); 0 when every byte is 0 (none). */
static inline uint64_t kern_bytes_hash(const void *p, size_t n)
{
    const unsigned char *c = p;
    uint64_t h = 1469598103934665603ull;
    int any = 0;
    for (size_t i = 0; i < n; i++)
        h = (h ^ c[i]) * 1099511628211ull, any |= c[i] != 0;
    return any ? h : 0;
}
/* FakeQuant of x * fq[0], fq = {mul, scale, zero, qmin, qmax} (vm_fake_quant) */
LLVMValueRef kern_vfake_quant(kern *k, LLVMValueRef x, const float fq[5]);
/* erf(x) within 4e-7 absolute. */
LLVMValueRef kern_verf(kern *k, LLVMValueRef x);
/* Applies the activation of a Linear (ir_act) to a vector. */
LLVMValueRef kern_activation(kern *k, LLVMValueRef x, ir_act act);

#endif
