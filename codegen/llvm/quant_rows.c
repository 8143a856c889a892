/* quant_rows.c: the activations of an int8 Linear quantized to u8 rows for
 * the int8 GEMM (gemm_i8.c), as LinearInt8 defines it (ops.def):
 *     q[m, k] = clamp(roundeven(x[m, k] / sa) + za, 0, 255)
 * with x / sa a correctly rounded f32 division (the same number ONNX's
 * QuantizeLinear and DynamicQuantizeLinear take), and the scale and zero
 * point given (static), from each row's range (per row), or from the whole
 * tensor's: a first call gathers each row's range (CG_QR_STATS), a second
 * reduces them and quantizes (CG_QR_TENSOR).  A range always holds 0:
 *     sa = (hi - lo) / 255 (1 where hi == lo),  za = roundeven(clamp(-lo / sa, 0, 255)).
 * A NaN of x is left out of the range and quantizes to 0, as the
 * interpreter has it.  Every row's sa and za are written, so the GEMM reads
 * them per row whatever the mode.  A static scale and zero point are read
 * from memory (the weights), so that one kernel serves every layer of a K.
 *
 * Work: rows in blocks, about four per thread; each row's range in one pass
 * of vectors (lanes past K read as 0, which the range holds anyway), then
 * the quantization in a second. */
#include "codegen/llvm/kern_ir.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    kern *k;
    const cg_quant_rows_desc *d;
    LLVMTypeRef vi32, vi8;
    LLVMValueRef f_round, f_store; /* llvm.roundeven, llvm.masked.store on <vf x i8> */
    LLVMTypeRef t_round, t_store;
} qr_emit;

/* The range of the row's K floats at x, widened to hold 0: lo, and hi in *hi. */
static LLVMValueRef row_range(qr_emit *e, LLVMValueRef x, LLVMValueRef *hi)
{
    kern *k = e->k;
    int64_t K = e->d->K, whole = K / k->vf * k->vf;
    LLVMValueRef init[2] = {kern_vconst(k, 0.0f), kern_vconst(k, 0.0f)};
    kern_loop L;
    kern_for(k, &L, kern_i64(k, 0), kern_i64(k, whole), k->vf, 1, 2, init, "qr.range");
    LLVMValueRef v = kern_vload(k, kern_gep(k, x, L.iv), k->vf, NULL);
    LLVMValueRef next[2] = {kern_fmin(k, v, L.carry[0]), kern_fmax(k, v, L.carry[1])};
    kern_for_end(k, &L, next);
    LLVMValueRef lo = L.carry[0], h = L.carry[1];
    if (whole < K) {
        LLVMValueRef v2 = kern_vload(k, kern_gepc(k, x, whole), (int)(K - whole), NULL);
        lo = kern_fmin(k, v2, lo);
        h = kern_fmax(k, v2, h);
    }
    *hi = kern_hmax(k, h);
    return LLVMBuildFNeg(k->b, kern_hmax(k, LLVMBuildFNeg(k->b, lo, "")), "");
}

/* The scale and zero point (as f32) of the range [lo, hi]. */
static void params(qr_emit *e, LLVMValueRef lo, LLVMValueRef hi, LLVMValueRef *sa, LLVMValueRef *za)
{
    kern *k = e->k;
    LLVMBuilderRef b = k->b;
    LLVMValueRef range = LLVMBuildFSub(b, hi, lo, "");
    LLVMValueRef flat = LLVMBuildFCmp(b, LLVMRealOEQ, hi, lo, "");
    *sa = LLVMBuildSelect(b, flat, kern_f32(k, 1.0f), LLVMBuildFDiv(b, range, kern_f32(k, 255.0f), ""), "sa");
    LLVMValueRef z0 = LLVMBuildFSub(b, kern_f32(k, 0.0f), LLVMBuildFDiv(b, lo, *sa, ""), "");
    z0 = kern_fmin(k, kern_fmax(k, z0, kern_f32(k, 0.0f)), kern_f32(k, 255.0f));
    LLVMTypeRef fty;
    LLVMValueRef fr = kern_intrinsic(k, "llvm.roundeven", &k->f32, 1, &fty);
    *za = LLVMBuildCall2(b, fty, fr, &z0, 1, "za");
}

/* Quantizes the row's K floats at x into the bytes at q. */
static void quantize_row(qr_emit *e, LLVMValueRef x, LLVMValueRef q, LLVMValueRef sa, LLVMValueRef za)
{
    kern *k = e->k;
    LLVMBuilderRef b = k->b;
    int64_t K = e->d->K, whole = K / k->vf * k->vf;
    LLVMValueRef vs = kern_splat(k, sa), vz = kern_splat(k, za);
    LLVMTypeRef i8 = LLVMInt8TypeInContext(k->ctx);
    for (int tail = 0; tail < 2; tail++) {
        if (tail && whole == K)
            break;
        kern_loop L;
        if (!tail)
            kern_for(k, &L, kern_i64(k, 0), kern_i64(k, whole), k->vf, 1, 0, NULL, "qr.quant");
        LLVMValueRef at = tail ? kern_i64(k, whole) : L.iv;
        LLVMValueRef v = kern_vload(k, kern_gep(k, x, at), tail ? (int)(K - whole) : k->vf, NULL);
        LLVMValueRef r = LLVMBuildFDiv(b, v, vs, "");
        r = LLVMBuildCall2(b, e->t_round, e->f_round, &r, 1, "");
        r = LLVMBuildFAdd(b, r, vz, "");
        r = kern_fmin(k, kern_fmax(k, r, kern_vconst(k, 0.0f)), kern_vconst(k, 255.0f));
        LLVMValueRef bytes = LLVMBuildTrunc(b, LLVMBuildFPToSI(b, r, e->vi32, ""), e->vi8, "");
        LLVMValueRef p = LLVMBuildGEP2(b, i8, q, &at, 1, "");
        if (!tail) {
            LLVMValueRef st = LLVMBuildStore(b, bytes, p);
            LLVMSetAlignment(st, 1);
            kern_for_end(k, &L, NULL);
        } else {
            LLVMValueRef args[4] = {bytes, p, LLVMConstInt(k->i32, 1, 0), kern_lane_mask(k, (int)(K - whole))};
            LLVMBuildCall2(b, e->t_store, e->f_store, args, 4, "");
        }
    }
}

/* task(closure {args, nblk, blk}, begin, end): rows [t * blk, min(M, (t + 1) * blk)) of task t. */
static LLVMValueRef emit_task(qr_emit *e, const char *name, LLVMTypeRef argsty)
{
    kern *k = e->k;
    LLVMBuilderRef b = k->b;
    const cg_quant_rows_desc *d = e->d;
    LLVMValueRef fn = kern_func(k, name, kern_task_type(k), 1);
    LLVMValueRef args, nblk, blk, a[5];
    kern_task_closure(k, fn, &args, &nblk, &blk, NULL);
    LLVMValueRef M = kern_args_read(k, argsty, args, 5, a);
    LLVMValueRef X = a[0], Q = a[1], SA = a[2], ZA = a[3], ST = a[4];
    LLVMTypeRef i8 = LLVMInt8TypeInContext(k->ctx);
    /* the whole tensor's range, from every row's (CG_QR_TENSOR) */
    LLVMValueRef tsa = NULL, tza = NULL;
    if (d->mode == CG_QR_TENSOR) {
        LLVMValueRef init[2] = {kern_f32(k, 0.0f), kern_f32(k, 0.0f)};
        kern_loop R;
        kern_for(k, &R, kern_i64(k, 0), M, 1, 0, 2, init, "qr.tensor");
        LLVMValueRef lo = LLVMBuildLoad2(b, k->f32, kern_gep(k, ST, kern_mulc(k, R.iv, 2)), "");
        LLVMValueRef hi = LLVMBuildLoad2(b, k->f32, kern_gep(k, ST, kern_addc(k, kern_mulc(k, R.iv, 2), 1)), "");
        LLVMValueRef next[2] = {kern_fmin(k, lo, R.carry[0]), kern_fmax(k, hi, R.carry[1])};
        kern_for_end(k, &R, next);
        params(e, R.carry[0], R.carry[1], &tsa, &tza);
    }
    kern_loop T, Rw;
    LLVMValueRef outer, inner;
    kern_task_loop(k, fn, &T, nblk, &outer, &inner);
    LLVMValueRef m0 = kern_mul(k, inner, blk), m1 = kern_min(k, M, kern_add(k, m0, blk));
    kern_for(k, &Rw, m0, m1, 1, 0, 0, NULL, "qr.row");
    LLVMValueRef m = Rw.iv;
    LLVMValueRef x = kern_gep(k, X, kern_mulc(k, m, d->lda));
    LLVMValueRef q = LLVMBuildGEP2(b, i8, Q, (LLVMValueRef[]){kern_mulc(k, m, d->ldq)}, 1, "");
    LLVMValueRef sa = NULL, za = NULL;
    switch (d->mode) {
    case CG_QR_STATS: {
        LLVMValueRef hi, lo = row_range(e, x, &hi);
        LLVMBuildStore(b, lo, kern_gep(k, ST, kern_mulc(k, m, 2)));
        LLVMBuildStore(b, hi, kern_gep(k, ST, kern_addc(k, kern_mulc(k, m, 2), 1)));
        break;
    }
    case CG_QR_ROW: {
        LLVMValueRef hi, lo = row_range(e, x, &hi);
        params(e, lo, hi, &sa, &za);
        break;
    }
    case CG_QR_TENSOR: sa = tsa, za = tza; break;
    case CG_QR_STATIC: /* st: {scale, zero point} */
        sa = LLVMBuildLoad2(b, k->f32, ST, "sa");
        za = LLVMBuildLoad2(b, k->f32, kern_gepc(k, ST, 1), "za");
        break;
    }
    if (sa) {
        LLVMBuildStore(b, sa, kern_gep(k, SA, m));
        LLVMBuildStore(b, LLVMBuildFPToSI(b, za, k->i32, ""), LLVMBuildGEP2(b, k->i32, ZA, &m, 1, ""));
        quantize_row(e, x, q, sa, za);
    }
    kern_for_end(k, &Rw, NULL);
    kern_for_end(k, &T, NULL);
    LLVMBuildRetVoid(b);
    return fn;
}

/* Blocks of rows, about four a thread. */
static kern_split split(kern *k, void *gen, LLVMValueRef M, LLVMValueRef nt)
{
    (void)gen;
    LLVMValueRef blk = kern_cdiv(k, M, kern_mulc(k, nt, 4));
    LLVMValueRef nblk = kern_cdiv(k, M, blk);
    return (kern_split){.nblk = nblk, .blk = blk, .ntasks = nblk};
}

static LLVMValueRef build_task(kern *k, void *gen, const char *name, LLVMTypeRef argsty)
{
    (void)k;
    return emit_task(gen, name, argsty);
}

static int prepare(kern *k, void *gen)
{
    qr_emit *e = gen;
    e->k = k;
    e->vi32 = LLVMVectorType(k->i32, (unsigned)k->vf);
    e->vi8 = LLVMVectorType(LLVMInt8TypeInContext(k->ctx), (unsigned)k->vf);
    e->f_round = kern_intrinsic(k, "llvm.roundeven", &k->vty, 1, &e->t_round);
    LLVMTypeRef st[2] = {e->vi8, k->ptr};
    e->f_store = kern_intrinsic(k, "llvm.masked.store", st, 2, &e->t_store);
    return e->f_round && e->f_store ? 0 : -1;
}

static void task_name(const kern *k, const void *gen, char *buf, size_t len)
{
    const cg_quant_rows_desc *d = ((const qr_emit *)gen)->d;
    snprintf(buf, len, "vitc.qrows.%s.K%lld.a%lld.q%lld.m%d", k->tag, (long long)d->K, (long long)d->lda,
             (long long)d->ldq, (int)d->mode);
}

LLVMValueRef cg_quant_rows_emit(LLVMModuleRef mod, const char *name, const cg_quant_rows_desc *d, const cg_target *t)
{
    if (!d || d->K < 1 || d->lda < d->K || d->ldq < d->K || (int)d->mode < 0 || d->mode > CG_QR_STATIC)
        return NULL;
    qr_emit e = {.d = d};
    kern_kernel kk = {.nptr = 5, .prepare = prepare, .task_name = task_name, .task = build_task, .split = split,
                      .gen = &e};
    return kern_emit(mod, t, name, &kk);
}
