/* bgemm.c: batched GEMM between two computed tensors (MatMul of activations,
 * attention's Q @ K^T and P @ V when they are not fused), C_b = alpha * A_b @
 * op(B_b) with every size and stride static but the batch count.
 *
 * B is read in place, a row of B being contiguous in N, except with trans_b
 * (K^T), where each panel of NR columns is first transposed into a small
 * buffer on the task's stack (kc x NR floats, at most 16 KiB).  Tasks are
 * (batch item, row block) pairs; rows are split only when there are too few
 * batch items for the threads.  The micro-kernel is the GEMM's (kern_uk.h). */
#include "codegen/llvm/kern_uk.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    int vf, nv, nr, mr;
    int64_t npanels, nfull;
    int rem_nv, rem_lanes, rem_cols;
    int64_t kc, nkb;
} bgemm_plan;

static int bgemm_plan_make(const cg_bgemm_desc *d, const cg_target *t, bgemm_plan *p)
{
    memset(p, 0, sizeof *p);
    if (!d || !t || d->M < 1 || d->N < 1 || d->K < 1 || d->lda < d->K || d->ldc < d->N ||
        d->ldb < (d->trans_b ? d->K : d->N) || d->a_batch_stride < 0 || d->b_batch_stride < 0 ||
        d->c_batch_stride < 0 || (t->vec_floats != 4 && t->vec_floats != 8 && t->vec_floats != 16))
        return -1;
    p->vf = t->vec_floats;
    kern_uk_shape(t, &p->mr, &p->nv);
    p->nr = p->nv * p->vf;
    p->npanels = (d->N + p->nr - 1) / p->nr;
    p->nfull = d->N / p->nr;
    p->rem_cols = (int)(d->N - p->nfull * p->nr);
    if (p->rem_cols) {
        p->rem_nv = (p->rem_cols + p->vf - 1) / p->vf;
        p->rem_lanes = p->rem_cols - (p->rem_nv - 1) * p->vf;
    }
    int64_t kc_max = 16384 / (p->nr * 4);
    p->nkb = (d->K + kc_max - 1) / kc_max;
    p->kc = (d->K + p->nkb - 1) / p->nkb;
    p->kc = (p->kc + 3) / 4 * 4;
    if (p->kc >= d->K)
        p->kc = d->K, p->nkb = 1;
    else
        p->nkb = (d->K + p->kc - 1) / p->kc;
    return 0;
}

typedef struct {
    const cg_bgemm_desc *d;
    const bgemm_plan *p;
    LLVMValueRef full[17], rem[17];
    LLVMValueRef Ab, Bb, Cb, scratch;
    LLVMValueRef m0, m1;
} bgemm_emit;

/* scratch[kk * NR + c] = B_b[(n0 + c) * ldb + k0 + kk] for kk < kc, c < cols. */
static void emit_pack_bt(kern *k, bgemm_emit *e, LLVMValueRef n0, LLVMValueRef k0, LLVMValueRef kc, int cols)
{
    const bgemm_plan *p = e->p;
    LLVMValueRef src = kern_gep(k, e->Bb, kern_add(k, kern_mulc(k, n0, e->d->ldb), k0));
    kern_loop L;
    kern_for(k, &L, kern_i64(k, 0), kc, 1, 0, 0, NULL, "pack");
    LLVMValueRef s = kern_gep(k, src, L.iv);
    LLVMValueRef dst = kern_gep(k, e->scratch, kern_mulc(k, L.iv, p->nr));
    for (int c = 0; c < cols; c++) {
        LLVMValueRef x = LLVMBuildLoad2(k->b, k->f32, kern_gepc(k, s, c * e->d->ldb), "");
        LLVMSetAlignment(x, 4);
        LLVMSetAlignment(LLVMBuildStore(k->b, x, kern_gepc(k, dst, c)), 4);
    }
    kern_for_end(k, &L, NULL);
}

/* One panel of columns (cols of them), every K block, the task's rows. */
static void emit_panel(kern *k, bgemm_emit *e, LLVMValueRef *kernels, LLVMValueRef panel, int cols)
{
    const cg_bgemm_desc *d = e->d;
    const bgemm_plan *p = e->p;
    LLVMBuilderRef b = k->b;
    LLVMValueRef n0 = kern_mulc(k, panel, p->nr);
    kern_loop KB;
    LLVMValueRef k0 = kern_i64(k, 0), kc = kern_i64(k, d->K), first = NULL, last = NULL;
    if (p->nkb > 1) {
        kern_for(k, &KB, kern_i64(k, 0), kern_i64(k, p->nkb), 1, 0, 0, NULL, "kb");
        k0 = kern_mulc(k, KB.iv, p->kc);
        kc = kern_min(k, kern_i64(k, p->kc), LLVMBuildSub(b, kern_i64(k, d->K), k0, ""));
        first = LLVMBuildICmp(b, LLVMIntEQ, KB.iv, kern_i64(k, 0), "first");
        last = LLVMBuildICmp(b, LLVMIntEQ, KB.iv, kern_i64(k, p->nkb - 1), "last");
    }
    LLVMValueRef bsrc;
    if (d->trans_b) {
        emit_pack_bt(k, e, n0, k0, kc, cols);
        bsrc = e->scratch;
    } else {
        bsrc = kern_gep(k, e->Bb, kern_add(k, kern_mulc(k, k0, d->ldb), n0));
    }
    kern_uk_rows(k, kernels, p->mr, e->m0, e->m1, kern_gep(k, e->Ab, k0), d->lda, bsrc, kern_gep(k, e->Cb, n0),
                 d->ldc, NULL, 0, NULL, NULL, kc, first, last, NULL);
    if (p->nkb > 1)
        kern_for_end(k, &KB, NULL);
}

static LLVMValueRef emit_task(kern *k, bgemm_emit *e, const char *name, LLVMTypeRef argsty)
{
    const cg_bgemm_desc *d = e->d;
    const bgemm_plan *p = e->p;
    LLVMBuilderRef b = k->b;
    LLVMValueRef fn = kern_func(k, name, kern_task_type(k), 1);
    if (d->trans_b) {
        int64_t n = p->kc * p->nr;
        e->scratch = LLVMBuildArrayAlloca(b, k->f32, kern_i64(k, n), "bt");
        LLVMSetAlignment(e->scratch, 64);
        /* the padding columns of the last panel are read, never stored: zero them once */
        if (p->rem_cols) {
            kern_loop Z;
            kern_for(k, &Z, kern_i64(k, 0), kern_i64(k, p->kc), 1, 0, 0, NULL, "zero");
            LLVMValueRef row = kern_gep(k, e->scratch, kern_mulc(k, Z.iv, p->nr));
            for (int c = p->rem_cols; c < p->nr; c++)
                LLVMSetAlignment(LLVMBuildStore(b, kern_f32(k, 0.0f), kern_gepc(k, row, c)), 4);
            kern_for_end(k, &Z, NULL);
        }
    }
    LLVMValueRef args, nmb, mc;
    kern_task_closure(k, fn, &args, &nmb, &mc, NULL);
    LLVMValueRef A = kern_field(k, argsty, args, 0, k->ptr);
    LLVMValueRef B = kern_field(k, argsty, args, 1, k->ptr);
    LLVMValueRef C = kern_field(k, argsty, args, 2, k->ptr);

    kern_loop T;
    LLVMValueRef bi, mi;
    kern_task_loop(k, fn, &T, nmb, &bi, &mi);
    e->m0 = kern_mul(k, mi, mc);
    e->m1 = kern_min(k, kern_i64(k, d->M), kern_add(k, e->m0, mc));
    e->Ab = kern_gep(k, A, kern_mulc(k, bi, d->a_batch_stride));
    e->Bb = kern_gep(k, B, kern_mulc(k, bi, d->b_batch_stride));
    e->Cb = kern_gep(k, C, kern_mulc(k, bi, d->c_batch_stride));
    if (p->nfull) {
        kern_loop L;
        kern_for(k, &L, kern_i64(k, 0), kern_i64(k, p->nfull), 1, 0, 0, NULL, "panel");
        emit_panel(k, e, e->full, L.iv, p->nr);
        kern_for_end(k, &L, NULL);
    }
    if (p->rem_cols)
        emit_panel(k, e, e->rem, kern_i64(k, p->nfull), p->rem_cols);
    kern_for_end(k, &T, NULL);
    LLVMBuildRetVoid(b);
    return fn;
}

/* The driver's split: whole products per task, rows split while there are few. */
static kern_split split(kern *k, void *gen, LLVMValueRef batch, LLVMValueRef nt)
{
    const bgemm_emit *e = gen;
    return kern_split_rows(k, batch, e->d->M, e->p->mr, nt);
}

/* The micro-kernels, then the task that calls them. */
static LLVMValueRef build_task(kern *k, void *gen, const char *name, LLVMTypeRef argsty)
{
    bgemm_emit *e = gen;
    const cg_bgemm_desc *d = e->d;
    const bgemm_plan *p = e->p;
    kern_uk s = {
        .mr = p->mr, .nv = p->nv, .last_lanes = p->vf, .lda = d->lda, .a_ks = 1,
        .ldb = d->trans_b ? p->nr : d->ldb, .ldc = d->ldc, .alpha = d->alpha, .kblocked = p->nkb > 1,
    };
    if (kern_uk_set_panels(k, s, p->nfull, e->full, p->rem_cols, p->rem_nv, p->rem_lanes, !d->trans_b, e->rem))
        return NULL;
    return emit_task(k, e, name, argsty);
}

static void task_name(const kern *k, const void *gen, char *buf, size_t len)
{
    const cg_bgemm_desc *d = ((const bgemm_emit *)gen)->d;
    union { float f; uint32_t u; } alpha = {.f = d->alpha};
    snprintf(buf, len, "vitc.bgemm.%s.M%lld.N%lld.K%lld.ld%lld.%lld.%lld.bs%lld.%lld.%lld.t%d.s%08x", k->tag,
             (long long)d->M, (long long)d->N, (long long)d->K, (long long)d->lda, (long long)d->ldb,
             (long long)d->ldc, (long long)d->a_batch_stride, (long long)d->b_batch_stride,
             (long long)d->c_batch_stride, d->trans_b ? 1 : 0, (unsigned)alpha.u);
}

LLVMValueRef cg_bgemm_emit(LLVMModuleRef mod, const char *name, const cg_bgemm_desc *d, const cg_target *t)
{
    bgemm_plan p;
    bgemm_emit e = {.d = d, .p = &p};
    kern_kernel kk = {.nptr = 3, .task_name = task_name, .task = build_task, .split = split, .gen = &e};
    return bgemm_plan_make(d, t, &p) ? NULL : kern_emit(mod, t, name, &kk);
}
