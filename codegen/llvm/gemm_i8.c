/* gemm_i8.c: the Linear GEMM on int8 operands with int32 sums (VPDPBUSD:
 * AVX512-VNNI on 16-lane vectors, AVX-VNNI or AVX512-VNNI with VL on 8-lane
 * ones), dequantized to fp32 in the epilogue:
 *     C[m, n] = act(sa[m] * sw[n] * (sum_k A[m, k] * W[k, n] - za[m] * colsum[n]) + bias[n]) (+|*) R[m, n]
 * with A unsigned 8-bit (zero point za, scale sa: one for the tensor or one
 * per row), W signed 8-bit (scale sw per output column) and colsum[n] the
 * sum of W's column n, made when W is packed.  The sums are exact in int32
 * (K up to 2^31 / (255 * 128), about 65000); A's zero point is subtracted
 * from them in int32 as well, so the only rounding is the conversion to
 * float and the scaling.
 *
 * VPDPBUSD adds to each 32-bit lane the four products of that lane's four
 * unsigned bytes of its first operand and four signed bytes of its second.
 * The first is one row's A[m, 4g .. 4g + 3] broadcast to every lane, the
 * second 4 k of each of vf columns of W.
 *
 * Packed W: N cut into panels of NR = 2 vf columns (zeros past N), K into
 * groups of 4 (zeros past K).  Panel p, group g is NR * 4 bytes at
 * (p * groups + g) * NR * 4: column j's 4 bytes at j * 4, so a vector load
 * at h * vf * 4 is the group's half h.  After the panels: colsum as int32,
 * then sw as float, each npanels * NR long (zeros past N).
 *
 * Work: the driver cuts C into row blocks of at most MC_GROUPS * MR rows
 * and column blocks of whole panels, two tasks per thread where the rows
 * allow.  A task walks its panels and, in each, its rows MR at a time: the
 * MR x NR block of sums in registers (2 MR vectors) over all of K, then the
 * epilogue from the registers to C.  A group of fewer than MR rows computes
 * its last row again in place of the missing ones and masks their stores;
 * a padded panel masks the columns past N.  The group K ends in (K not a
 * multiple of 4) reads A's last bytes one by one, never past the row. */
#include "codegen/llvm/kern_ir.h"

#include <stdio.h>
#include <string.h>

enum {
    I8_MC_GROUPS = 16, /* row groups of a row block */
    I8_TASKS_PER_THREAD = 2,
};

typedef struct {
    int vf, nr, mr;          /* lanes per vector, columns of a panel (2 vf), rows in registers */
    int64_t groups;          /* K / 4, rounded up */
    int64_t npanels, nfull;  /* panels; those without padding */
    int rem_lanes[2];        /* valid lanes of the padded panel's halves */
    size_t panel_bytes;      /* packed bytes of one panel */
} i8_plan;

static int i8_plan_make(const cg_gemm_i8_desc *di, const cg_target *t, i8_plan *p)
{
    memset(p, 0, sizeof *p);
    if (!di || !t)
        return -1;
    const cg_gemm_desc *d = &di->g;
    if ( (t->vec_floats != 16 && t->vec_floats != 8) || d->K < 1 || d->N < 1 || d->K > 65000 ||
        d->lda < d->K || d->ldc < d->N || (d->has_residual && d->ldr != 0 && d->ldr < d->N) || d->activation < 0 ||
        d->activation >= IR_ACT_COUNT)
        return -1;
    p->vf = t->vec_floats;
    p->nr = 2 * p->vf;
    /* accumulators, two vectors of W and a broadcast in the registers */
    p->mr = p->vf == 16 && t->nregs >= 32 ? 12 : 6;
    p->groups = (d->K + 3) / 4;
    p->npanels = (d->N + p->nr - 1) / p->nr;
    p->nfull = d->N / p->nr;
    int64_t rem = d->N - p->nfull * p->nr;
    p->rem_lanes[0] = rem > p->vf ? p->vf : (int)rem;
    p->rem_lanes[1] = rem > p->vf ? (int)rem - p->vf : 0;
    p->panel_bytes = (size_t)p->groups * (size_t)p->nr * 4;
    return 0;
}

size_t cg_gemm_i8_packed_bytes(const cg_gemm_i8_desc *d, const cg_target *t)
{
    i8_plan p;
    if (i8_plan_make(d, t, &p))
        return 0;
    size_t bytes = (size_t)p.npanels * p.panel_bytes + 2 * (size_t)p.npanels * (size_t)p.nr * 4;
    return (bytes + 63) / 64 * 64;
}

void cg_gemm_i8_pack(const cg_gemm_i8_desc *di, const cg_target *t, const int8_t *W, const float *w_scale, void *out)
{
    i8_plan p;
    if (i8_plan_make(di, t, &p))
        return;
    const cg_gemm_desc *d = &di->g;
    memset(out, 0, cg_gemm_i8_packed_bytes(di, t));
    int8_t *o = out;
    int32_t *colsum = (int32_t *)(o + (size_t)p.npanels * p.panel_bytes);
    float *sw = (float *)(colsum + p.npanels * p.nr);
    for (int64_t pn = 0; pn < p.npanels; pn++)
        for (int64_t g = 0; g < p.groups; g++)
            for (int j = 0; j < p.nr; j++)
                for (int i = 0; i < 4; i++) {
                    int64_t k = 4 * g + i, col = pn * p.nr + j;
                    if (k < d->K && col < d->N)
                        o[(size_t)pn * p.panel_bytes + ((size_t)g * (size_t)p.nr + (size_t)j) * 4 + (size_t)i] =
                            W[k * d->N + col];
                }
    for (int64_t n = 0; n < d->N; n++) {
        int32_t s = 0;
        for (int64_t k = 0; k < d->K; k++)
            s += W[k * d->N + n];
        colsum[n] = s;
        sw[n] = w_scale[n];
    }
}

/* ---- emission ---- */

typedef struct {
    kern *k;
    const cg_gemm_i8_desc *di;
    const cg_gemm_desc *d;
    const i8_plan *p;
    LLVMTypeRef i8, vi;   /* i8, <vf x i32> */
    LLVMValueRef f_dot;   /* VPDPBUSD on vf lanes */
    LLVMTypeRef t_dot;
    LLVMValueRef A, W, bias, R, C, sa, za; /* the task's arguments */
    LLVMValueRef m0, rows;                 /* the task's first row and its row count */
} i8_emit;

static LLVMValueRef bytes_at(i8_emit *e, LLVMValueRef p, LLVMValueRef off)
{
    return LLVMBuildGEP2(e->k->b, e->i8, p, &off, 1, "");
}

static LLVMValueRef splat_i32(i8_emit *e, LLVMValueRef x)
{
    LLVMBuilderRef b = e->k->b;
    LLVMValueRef v = LLVMBuildInsertElement(b, LLVMGetPoison(e->vi), x, LLVMConstInt(e->k->i32, 0, 0), "");
    return LLVMBuildShuffleVector(b, v, LLVMGetPoison(e->vi), LLVMConstNull(e->vi), "");
}

static LLVMValueRef dot(i8_emit *e, LLVMValueRef acc, LLVMValueRef a, LLVMValueRef w)
{
    LLVMValueRef args[3] = {acc, a, w};
    return LLVMBuildCall2(e->k->b, e->t_dot, e->f_dot, args, 3, "");
}

/* The 4 bytes of A at p as one i32 (unaligned). */
static LLVMValueRef load_i32(i8_emit *e, LLVMValueRef p)
{
    LLVMValueRef x = LLVMBuildLoad2(e->k->b, e->k->i32, p, "");
    LLVMSetAlignment(x, 1);
    return x;
}

/* The first n (1..3) bytes at p as the low bytes of an i32, zeros above. */
static LLVMValueRef load_tail(i8_emit *e, LLVMValueRef p, int n)
{
    kern *k = e->k;
    LLVMValueRef x = LLVMConstInt(k->i32, 0, 0);
    for (int i = 0; i < n; i++) {
        LLVMValueRef by = LLVMBuildLoad2(k->b, e->i8, bytes_at(e, p, kern_i64(k, i)), "");
        LLVMSetAlignment(by, 1);
        LLVMValueRef w = LLVMBuildZExt(k->b, by, k->i32, "");
        if (i)
            w = LLVMBuildShl(k->b, w, LLVMConstInt(k->i32, (unsigned long long)(8 * i), 0), "");
        x = LLVMBuildOr(k->b, x, w, "");
    }
    return x;
}

/* Panels [pb, pe) over the task's rows, MR at a time; lanes: the valid
 * columns of each half of these panels. */
static void emit_panels(i8_emit *e, LLVMValueRef pb, LLVMValueRef pe, const int lanes[2])
{
    kern *k = e->k;
    LLVMBuilderRef b = k->b;
    const cg_gemm_desc *d = e->d;
    const i8_plan *p = e->p;
    int vf = p->vf, mr = p->mr, nh = lanes[1] ? 2 : 1;
    LLVMTypeRef vf32 = k->vty;
    kern_loop P, G, S;
    kern_for(k, &P, pb, pe, 1, 0, 0, NULL, "i8.panel");
    LLVMValueRef n0 = kern_mulc(k, P.iv, p->nr);
    LLVMValueRef wp = bytes_at(e, e->W, kern_mulc(k, P.iv, (int64_t)p->panel_bytes));
    kern_for(k, &G, kern_i64(k, 0), kern_cdiv(k, e->rows, kern_i64(k, mr)), 1, 0, 0, NULL, "i8.rows");
    LLVMValueRef r0 = kern_mulc(k, G.iv, mr);
    LLVMValueRef nrows = LLVMBuildSub(b, e->rows, r0, "");
    LLVMValueRef grow = kern_add(k, e->m0, r0);
    /* row r reads A's row min(r, nrows - 1): a short group repeats its last row */
    LLVMValueRef arow[16], in[16];
    for (int r = 0; r < mr; r++) {
        in[r] = LLVMBuildICmp(b, LLVMIntSGT, nrows, kern_i64(k, r), "");
        LLVMValueRef rr = LLVMBuildSelect(b, in[r], kern_i64(k, r), LLVMBuildSub(b, nrows, kern_i64(k, 1), ""), "");
        arow[r] = bytes_at(e, e->A, kern_mulc(k, kern_add(k, grow, rr), d->lda));
    }
    LLVMValueRef init[KERN_MAX_CARRY];
    for (int i = 0; i < mr * nh; i++)
        init[i] = LLVMConstNull(e->vi);
    int64_t whole = d->K / 4; /* groups A fills */
    kern_for(k, &S, kern_i64(k, 0), kern_i64(k, whole), 1, 0, mr * nh, init, "i8.k");
    LLVMValueRef acc[KERN_MAX_CARRY];
    memcpy(acc, S.carry, sizeof(LLVMValueRef) * (size_t)(mr * nh));
    LLVMValueRef wg = bytes_at(e, wp, kern_mulc(k, S.iv, p->nr * 4)), wv[2];
    for (int h = 0; h < nh; h++) {
        wv[h] = LLVMBuildLoad2(b, e->vi, bytes_at(e, wg, kern_i64(k, h * vf * 4)), "");
        LLVMSetAlignment(wv[h], (unsigned)(vf * 4));
    }
    LLVMValueRef ka = kern_mulc(k, S.iv, 4);
    for (int r = 0; r < mr; r++) {
        LLVMValueRef av = splat_i32(e, load_i32(e, bytes_at(e, arow[r], ka)));
        for (int h = 0; h < nh; h++)
            acc[r * nh + h] = dot(e, acc[r * nh + h], av, wv[h]);
    }
    kern_for_end(k, &S, acc);
    memcpy(acc, S.carry, sizeof(LLVMValueRef) * (size_t)(mr * nh));
    if (d->K % 4) { /* the group K ends in: A's last bytes, W's zeros past K */
        LLVMValueRef wg2 = bytes_at(e, wp, kern_i64(k, whole * p->nr * 4));
        for (int h = 0; h < nh; h++) {
            wv[h] = LLVMBuildLoad2(b, e->vi, bytes_at(e, wg2, kern_i64(k, h * vf * 4)), "");
            LLVMSetAlignment(wv[h], (unsigned)(vf * 4));
        }
        for (int r = 0; r < mr; r++) {
            LLVMValueRef av =
                splat_i32(e, load_tail(e, bytes_at(e, arow[r], kern_i64(k, whole * 4)), (int)(d->K % 4)));
            for (int h = 0; h < nh; h++)
                acc[r * nh + h] = dot(e, acc[r * nh + h], av, wv[h]);
        }
    }

    /* the epilogue: sums less za * colsum in int32, then scaled in fp32 */
    LLVMValueRef colsum = bytes_at(e, e->W, kern_i64(k, (int64_t)((size_t)p->npanels * p->panel_bytes)));
    LLVMValueRef swp = bytes_at(e, colsum, kern_i64(k, p->npanels * p->nr * 4));
    LLVMValueRef cs[2], sw[2], bias[2] = {0};
    for (int h = 0; h < nh; h++) {
        LLVMValueRef col = kern_addc(k, n0, h * vf);
        cs[h] = LLVMBuildLoad2(b, e->vi, bytes_at(e, colsum, kern_mulc(k, col, 4)), "");
        LLVMSetAlignment(cs[h], 4);
        sw[h] = kern_vload(k, kern_gep(k, swp, col), vf, NULL);
        if (d->has_bias)
            bias[h] = kern_vload(k, kern_gep(k, e->bias, col), lanes[h], NULL);
    }
    int res_late = d->has_residual;
    for (int r = 0; r < mr; r++) {
        LLVMValueRef row = kern_addc(k, grow, r);
        /* the row's scale and zero point (a missing row reads its group's last) */
        LLVMValueRef qi = kern_i64(k, 0);
        if (e->di->a_per_row)
            qi = kern_add(k, grow, LLVMBuildSelect(b, in[r], kern_i64(k, r), LLVMBuildSub(b, nrows, kern_i64(k, 1), ""),
                                                   ""));
        LLVMValueRef zp = LLVMBuildLoad2(b, k->i32, LLVMBuildGEP2(b, k->i32, e->za, &qi, 1, ""), "za");
        LLVMValueRef sa = LLVMBuildLoad2(b, k->f32, kern_gep(k, e->sa, qi), "sa");
        LLVMValueRef zv = splat_i32(e, zp), sv = kern_splat(k, sa);
        for (int h = 0; h < nh; h++) {
            LLVMValueRef col = kern_addc(k, n0, h * vf);
            LLVMValueRef n = LLVMBuildSelect(b, in[r], kern_i64(k, lanes[h]), kern_i64(k, 0), "");
            LLVMValueRef mask = kern_lanes_below(k, n);
            LLVMValueRef t = LLVMBuildSub(b, acc[r * nh + h], LLVMBuildMul(b, zv, cs[h], ""), "");
            LLVMValueRef x = LLVMBuildSIToFP(b, t, vf32, "");
            LLVMValueRef s = LLVMBuildFMul(b, sv, sw[h], "");
            x = bias[h] ? kern_fma(k, x, s, bias[h]) : LLVMBuildFMul(b, x, s, "");
            x = kern_activation(k, x, (ir_act)d->activation);
            if (res_late) {
                LLVMValueRef rv =
                    kern_vload_masked(k, kern_gep(k, e->R, kern_add(k, kern_mulc(k, row, d->ldr), col)), mask, NULL);
                x = d->gate ? LLVMBuildFMul(b, x, rv, "") : LLVMBuildFAdd(b, x, rv, "");
            }
            kern_vstore_masked(k, x, kern_gep(k, e->C, kern_add(k, kern_mulc(k, row, d->ldc), col)), mask);
        }
    }
    kern_for_end(k, &G, NULL);
    kern_for_end(k, &P, NULL);
}

/* task(closure {args, nmb, mc, nnb}, begin, end): task t = ni * nmb + mi,
 * rows [mi * mc, min(M, (mi + 1) * mc)), panels [ni * P / nnb, (ni + 1) * P / nnb). */
static LLVMValueRef emit_task(i8_emit *e, const char *name, LLVMTypeRef argsty)
{
    kern *k = e->k;
    LLVMBuilderRef b = k->b;
    const i8_plan *p = e->p;
    LLVMValueRef fn = kern_func(k, name, kern_task_type(k), 1);
    LLVMValueRef args, nmb, mc, nnb, a[7];
    kern_task_closure(k, fn, &args, &nmb, &mc, &nnb);
    LLVMValueRef M = kern_args_read(k, argsty, args, 7, a);
    e->A = a[0], e->W = a[1], e->bias = a[2], e->R = a[3], e->C = a[4], e->sa = a[5], e->za = a[6];
    kern_loop T;
    LLVMValueRef ni, mi;
    kern_task_loop(k, fn, &T, nmb, &ni, &mi);
    e->m0 = kern_mul(k, mi, mc);
    e->rows = LLVMBuildSub(b, kern_min(k, M, kern_add(k, e->m0, mc)), e->m0, "rows");
    LLVMValueRef p0 = LLVMBuildSDiv(b, kern_mulc(k, ni, p->npanels), nnb, "p0");
    LLVMValueRef p1 = LLVMBuildSDiv(b, kern_mulc(k, kern_addc(k, ni, 1), p->npanels), nnb, "p1");
    int full[2] = {p->vf, p->vf};
    if (p->nfull)
        emit_panels(e, p0, kern_min(k, p1, kern_i64(k, p->nfull)), full);
    if (p->nfull < p->npanels) { /* the padded last panel, when it is the task's */
        LLVMBasicBlockRef brem = kern_block(k, "i8.rem"), bjoin = kern_block(k, "i8.rem.join");
        LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntEQ, p1, kern_i64(k, p->npanels), ""), brem, bjoin);
        LLVMPositionBuilderAtEnd(b, brem);
        emit_panels(e, kern_i64(k, p->nfull), kern_i64(k, p->npanels), p->rem_lanes);
        LLVMBuildBr(b, bjoin);
        LLVMPositionBuilderAtEnd(b, bjoin);
    }
    kern_for_end(k, &T, NULL);
    LLVMBuildRetVoid(b);
    return fn;
}

/* The fewest row blocks of at most I8_MC_GROUPS groups, evened out, then
 * column blocks until there are I8_TASKS_PER_THREAD tasks per thread (at
 * most one per panel). */
static kern_split split(kern *k, void *gen, LLVMValueRef M, LLVMValueRef nt)
{
    const i8_plan *p = ((const i8_emit *)gen)->p;
    return kern_split_panels(k, M, p->mr, (int64_t)I8_MC_GROUPS * p->mr, p->npanels, I8_TASKS_PER_THREAD, nt);
}

static LLVMValueRef build_task(kern *k, void *gen, const char *name, LLVMTypeRef argsty)
{
    (void)k;
    return emit_task(gen, name, argsty);
}

/* VPDPBUSD on the target's vectors; -1 when this LLVM lacks it. */
static int prepare(kern *k, void *gen)
{
    i8_emit *e = gen;
    e->k = k;
    e->i8 = LLVMInt8TypeInContext(k->ctx);
    e->vi = LLVMVectorType(k->i32, (unsigned)e->p->vf);
    e->f_dot = kern_intrinsic(k, e->p->vf == 16 ? "llvm.x86.avx512.vpdpbusd.512" : "llvm.x86.avx512.vpdpbusd.256",
                              NULL, 0, &e->t_dot);
    return e->f_dot && LLVMCountParamTypes(e->t_dot) == 3 ? 0 : -1;
}

static void task_name(const kern *k, const void *gen, char *buf, size_t len)
{
    const i8_emit *e = gen;
    const cg_gemm_desc *d = e->d;
    snprintf(buf, len, "vitc.i8.%s.K%lld.N%lld.a%lld.c%lld.r%lld.e%d%d%d.q%d", k->tag, (long long)d->K,
             (long long)d->N, (long long)d->lda, (long long)d->ldc, (long long)d->ldr, d->has_bias ? 1 : 0,
             d->has_residual ? 1 + (d->gate != 0) : 0, d->activation, e->di->a_per_row ? 1 : 0);
}

LLVMValueRef cg_gemm_i8_emit(LLVMModuleRef mod, const char *name, const cg_gemm_i8_desc *d, const cg_target *t)
{
    i8_plan p;
    i8_emit e = {.di = d, .d = d ? &d->g : NULL, .p = &p};
    kern_kernel kk = {.nptr = 7, .prepare = prepare, .task_name = task_name, .task = build_task, .split = split,
                      .gen = &e};
    return !d || i8_plan_make(d, t, &p) ? NULL : kern_emit(mod, t, name, &kk);
}
