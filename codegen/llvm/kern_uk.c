/* kern_uk.c: the register-blocked micro-kernel (see kern_uk.h) and the row
 * loop that dispatches full tiles and the M remainder to it. */
#include "codegen/llvm/kern_uk.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* k steps per iteration of the main loop */
enum { UNROLL = 4 };

LLVMTypeRef kern_uk_type(kern *k)
{
    LLVMTypeRef p[9] = {k->ptr, k->ptr, k->ptr, k->ptr, k->ptr, k->i64, k->i1, k->i1, k->ptr};
    return LLVMFunctionType(k->voidt, p, 9, 0);
}

void kern_uk_shape(const cg_target *t, int *mr, int *nv)
{
    *nv = 2;
    *mr = (t->nregs - *nv - 1) / *nv;
    if (*mr > 12)
        *mr = 12;
}

/* The largest power of two below n (n >= 2), 0 for n == 1. */
static int pow2_below(int n)
{
    int p = 1;
    while (p * 2 < n)
        p *= 2;
    return n > 1 ? p : 0;
}

static int lanes_of(const kern *k, const kern_uk *s, int v)
{
    return v == s->nv - 1 ? s->last_lanes : k->vf;
}

/* One k step: acc[r][v] += A(r, kk) * B(kk, v). */
static void uk_step(kern *k, const kern_uk *s, LLVMValueRef A, LLVMValueRef B, LLVMValueRef kk,
                    LLVMValueRef *acc)
{
    LLVMValueRef bv[16];
    LLVMValueRef brow = kern_gep(k, B, kern_mulc(k, kk, s->ldb));
    for (int v = 0; v < s->nv; v++)
        bv[v] = kern_vload(k, kern_gepc(k, brow, (int64_t)v * k->vf), s->b_masked ? lanes_of(k, s, v) : k->vf,
                           NULL);
    LLVMValueRef acol = kern_gep(k, A, kern_mulc(k, kk, s->a_ks));
    for (int r = 0; r < s->mr; r++) {
        LLVMValueRef a = kern_bcast(k, kern_gepc(k, acol, r * s->lda));
        for (int v = 0; v < s->nv; v++)
            acc[r * s->nv + v] = kern_fma(k, a, bv[v], acc[r * s->nv + v]);
    }
}

static void uk_store(kern *k, const kern_uk *s, LLVMValueRef C, LLVMValueRef *acc)
{
    for (int r = 0; r < s->mr; r++)
        for (int v = 0; v < s->nv; v++)
            kern_vstore(k, acc[r * s->nv + v], kern_gepc(k, C, r * s->ldc + (int64_t)v * k->vf), lanes_of(k, s, v));
}

/* C = act(alpha * rs[r] * acc + bias) + R (or * R with gate), stored. */
static void uk_epilogue(kern *k, const kern_uk *s, LLVMValueRef C, LLVMValueRef R, LLVMValueRef bias,
                        LLVMValueRef rs, LLVMValueRef *acc)
{
    LLVMValueRef bv[16] = {0};
    if (s->has_bias)
        for (int v = 0; v < s->nv; v++)
            bv[v] = kern_vload(k, kern_gepc(k, bias, (int64_t)v * k->vf), lanes_of(k, s, v), NULL);
    int res_late = s->has_res && !s->kblocked;
    for (int r = 0; r < s->mr; r++) {
        LLVMValueRef rsv = s->row_scale ? kern_bcast(k, kern_gepc(k, rs, r)) : NULL;
        for (int v = 0; v < s->nv; v++) {
            LLVMValueRef x = acc[r * s->nv + v];
            if (rsv)
                x = LLVMBuildFMul(k->b, x, rsv, "");
            if (s->alpha != 1.0f)
                x = LLVMBuildFMul(k->b, x, kern_vconst(k, s->alpha), "");
            if (s->has_bias)
                x = LLVMBuildFAdd(k->b, x, bv[v], "");
            x = kern_activation(k, x, s->act);
            if (res_late || s->gate) {
                LLVMValueRef rv =
                    kern_vload(k, kern_gepc(k, R, r * s->ldr + (int64_t)v * k->vf), lanes_of(k, s, v), NULL);
                x = s->gate ? LLVMBuildFMul(k->b, x, rv, "") : LLVMBuildFAdd(k->b, x, rv, "");
            }
            acc[r * s->nv + v] = x;
        }
    }
    uk_store(k, s, C, acc);
}

LLVMValueRef kern_uk_emit(kern *k, const char *name, const kern_uk *s)
{
    int n = s->mr * s->nv;
    if (s->mr < 1 || s->nv < 1 || s->nv > 16 || n > KERN_MAX_CARRY || s->last_lanes < 1 || s->last_lanes > k->vf)
        return NULL;
    if (s->kblocked && s->has_res && (s->act || s->alpha != 1.0f))
        return NULL;
    LLVMBasicBlockRef saved = LLVMGetInsertBlock(k->b);
    LLVMBuilderRef b = k->b;
    LLVMValueRef fn = kern_func(k, name, kern_uk_type(k), 1);
    LLVMValueRef A = LLVMGetParam(fn, 0), B = LLVMGetParam(fn, 1), C = LLVMGetParam(fn, 2);
    LLVMValueRef R = LLVMGetParam(fn, 3), bias = LLVMGetParam(fn, 4), kc = LLVMGetParam(fn, 5);
    LLVMValueRef acc[KERN_MAX_CARRY];
    LLVMValueRef zero = kern_vconst(k, 0.0f);

    if (s->kblocked) {
        /* first block: zero, or the residual; later blocks: the partial sums in C */
        LLVMBasicBlockRef bfirst = kern_block(k, "first"), bmore = kern_block(k, "more"), bk = kern_block(k, "k");
        LLVMBuildCondBr(b, LLVMGetParam(fn, 6), bfirst, bmore);
        LLVMValueRef init0[KERN_MAX_CARRY], init1[KERN_MAX_CARRY];
        LLVMPositionBuilderAtEnd(b, bfirst);
        for (int r = 0; r < s->mr; r++)
            for (int v = 0; v < s->nv; v++)
                init0[r * s->nv + v] =
                    s->has_res
                        ? kern_vload(k, kern_gepc(k, R, r * s->ldr + (int64_t)v * k->vf), lanes_of(k, s, v), NULL)
                        : zero;
        LLVMBasicBlockRef bfirst_end = LLVMGetInsertBlock(b);
        LLVMBuildBr(b, bk);
        LLVMPositionBuilderAtEnd(b, bmore);
        for (int r = 0; r < s->mr; r++)
            for (int v = 0; v < s->nv; v++)
                init1[r * s->nv + v] =
                    kern_vload(k, kern_gepc(k, C, r * s->ldc + (int64_t)v * k->vf), lanes_of(k, s, v), NULL);
        LLVMBasicBlockRef bmore_end = LLVMGetInsertBlock(b);
        LLVMBuildBr(b, bk);
        LLVMPositionBuilderAtEnd(b, bk);
        for (int i = 0; i < n; i++) {
            acc[i] = LLVMBuildPhi(b, k->vty, "acc");
            LLVMValueRef vals[2] = {init0[i], init1[i]};
            LLVMBasicBlockRef from[2] = {bfirst_end, bmore_end};
            LLVMAddIncoming(acc[i], vals, from, 2);
        }
    } else {
        for (int i = 0; i < n; i++)
            acc[i] = zero;
    }

    /* main loop: UNROLL steps per iteration, then the remaining steps.  A
     * tile of 1 or 2 rows has too few accumulators to keep both FMA pipes
     * busy through their latency (2 or 4 chains): it keeps SETS of them,
     * step u of an iteration adding into set u % SETS, and adds the sets
     * together after the loop (1 row: 4 chains at the pipes' full rate
     * instead of a quarter of it). */
    int sets = s->mr >= 4 ? 1 : s->mr == 2 ? 2 : 4;
    while (sets > 1 && sets * n > KERN_MAX_CARRY)
        sets /= 2;
    for (int i = n; i < sets * n; i++)
        acc[i] = zero;
    kern_loop L;
    kern_for(k, &L, kern_i64(k, 0), kc, UNROLL, 1, sets * n, acc, "k");
    LLVMValueRef cur[KERN_MAX_CARRY];
    for (int i = 0; i < sets * n; i++)
        cur[i] = L.carry[i];
    for (int u = 0; u < UNROLL; u++)
        uk_step(k, s, A, B, kern_addc(k, L.iv, u), cur + (u % sets) * n);
    kern_for_end(k, &L, cur);
    for (int i = 0; i < n; i++) {
        acc[i] = L.carry[i];
        for (int g = 1; g < sets; g++)
            acc[i] = LLVMBuildFAdd(b, acc[i], L.carry[g * n + i], "");
    }
    kern_loop T;
    kern_for(k, &T, L.iv, kc, 1, 0, n, acc, "kt");
    for (int i = 0; i < n; i++)
        cur[i] = T.carry[i];
    uk_step(k, s, A, B, T.iv, cur);
    kern_for_end(k, &T, cur);
    for (int i = 0; i < n; i++)
        acc[i] = T.carry[i];

    if (s->kblocked) {
        LLVMBasicBlockRef bepi = kern_block(k, "epilogue"), braw = kern_block(k, "partial");
        LLVMBasicBlockRef bret = kern_block(k, "ret");
        LLVMBuildCondBr(b, LLVMGetParam(fn, 7), bepi, braw);
        LLVMPositionBuilderAtEnd(b, braw);
        uk_store(k, s, C, acc);
        LLVMBuildBr(b, bret);
        LLVMPositionBuilderAtEnd(b, bepi);
        uk_epilogue(k, s, C, R, bias, LLVMGetParam(fn, 8), acc);
        LLVMBuildBr(b, bret);
        LLVMPositionBuilderAtEnd(b, bret);
    } else {
        uk_epilogue(k, s, C, R, bias, LLVMGetParam(fn, 8), acc);
    }
    LLVMBuildRetVoid(b);
    if (saved)
        LLVMPositionBuilderAtEnd(b, saved);
    return fn;
}

/* The module-level name of a micro-kernel: every field of the spec. */
static void uk_name(const kern *k, const kern_uk *s, char *buf, size_t n)
{
    union { float f; uint32_t u; } alpha = {.f = s->alpha};
    snprintf(buf, n, "vitc.uk.%s.%dx%d.l%d.a%lld.%lld.b%lld.%d.c%lld.r%lld.e%d%d%d.s%08x.%d.k%d", k->tag, s->mr, s->nv,
             s->last_lanes, (long long)s->lda, (long long)s->a_ks, (long long)s->ldb, s->b_masked, (long long)s->ldc,
             (long long)s->ldr, s->has_bias, s->has_res, s->act, (unsigned)alpha.u, s->row_scale, s->kblocked);
    if (s->gate) /* a suffix: the names of kernels without a gate stay as they were */
        snprintf(buf + strlen(buf), n - strlen(buf), ".gate");
}

int kern_uk_set(kern *k, const kern_uk *s, LLVMValueRef *kernels)
{
    char name[256];
    for (int r = s->mr; r >= 1; r = r == s->mr ? pow2_below(s->mr) : r / 2) {
        kern_uk one = *s;
        one.mr = r;
        uk_name(k, &one, name, sizeof name);
        kernels[r] = LLVMGetNamedFunction(k->mod, name);
        if (!kernels[r])
            kernels[r] = kern_uk_emit(k, name, &one);
        if (!kernels[r])
            return -1;
    }
    return 0;
}

int kern_uk_set_panels(kern *k, kern_uk s, int full_panels, LLVMValueRef *full, int rem, int rem_nv, int rem_lanes,
                       int rem_b_masked, LLVMValueRef *remk)
{
    if (full_panels && kern_uk_set(k, &s, full))
        return -1;
    if (!rem)
        return 0;
    s.nv = rem_nv;
    s.last_lanes = rem_lanes;
    s.b_masked = rem_b_masked;
    return kern_uk_set(k, &s, remk);
}

/* Before tile `row` (of mr rows) on its first K block: the next tile's
 * rows of R, cols floats each (rows past row1 are not touched: the last one
 * is taken again). */
static void prefetch_next_rows(kern *k, int mr, LLVMValueRef row, LLVMValueRef row1, LLVMValueRef R, int64_t ldr,
                               LLVMValueRef first, int64_t cols)
{
    LLVMBuilderRef b = k->b;
    LLVMBasicBlockRef bpf = kern_block(k, "pfr"), bnext = kern_block(k, "pfr.next");
    LLVMValueRef next = kern_addc(k, row, mr);
    LLVMValueRef any = LLVMBuildICmp(b, LLVMIntSLT, next, row1, "");
    LLVMBuildCondBr(b, first ? LLVMBuildAnd(b, first, any, "") : any, bpf, bnext);
    LLVMPositionBuilderAtEnd(b, bpf);
    LLVMValueRef last = LLVMBuildSub(b, row1, kern_i64(k, 1), "");
    for (int r = 0; r < mr; r++) {
        LLVMValueRef at = kern_gep(k, R, kern_mulc(k, kern_min(k, kern_addc(k, next, r), last), ldr));
        for (int64_t c = 0; c < cols; c += 16)
            kern_prefetch(k, kern_gepc(k, at, c), 2);
    }
    LLVMBuildBr(b, bnext);
    LLVMPositionBuilderAtEnd(b, bnext);
}

void kern_uk_rows(kern *k, LLVMValueRef *kernels, int mr, LLVMValueRef row0, LLVMValueRef row1,
                  LLVMValueRef A, int64_t lda, LLVMValueRef B, LLVMValueRef C, int64_t ldc,
                  LLVMValueRef R, int64_t ldr, LLVMValueRef bias, LLVMValueRef rs, LLVMValueRef kc,
                  LLVMValueRef first, LLVMValueRef last, const kern_uk_pf *pf)
{
    LLVMBuilderRef b = k->b;
    LLVMValueRef null = LLVMConstPointerNull(k->ptr);
    LLVMValueRef yes = LLVMConstInt(k->i1, 1, 0);
    LLVMTypeRef ukty = kern_uk_type(k);
    LLVMValueRef args[9] = {NULL, B,  NULL, NULL, bias ? bias : null, kc, first ? first : yes, last ? last : yes,
                            NULL};
#define ROW_ARGS(row)                                                                                                   \
    do {                                                                                                               \
        args[0] = kern_gep(k, A, kern_mulc(k, (row), lda));                                                            \
        args[2] = kern_gep(k, C, kern_mulc(k, (row), ldc));                                                            \
        args[3] = R ? kern_gep(k, R, kern_mulc(k, (row), ldr)) : null;                                                 \
        args[8] = rs ? kern_gep(k, rs, (row)) : null;                                                                  \
    } while (0)

    kern_loop L;
    kern_for(k, &L, row0, row1, mr, 1, 0, NULL, "rows");
    if (pf && pf->next) {
        LLVMValueRef tile = LLVMBuildUDiv(b, LLVMBuildSub(b, L.iv, row0, ""), kern_i64(k, mr), "");
        LLVMValueRef first_line = kern_mul(k, tile, pf->lines);
        kern_loop P;
        kern_for(k, &P, first_line, kern_add(k, first_line, pf->lines), 1, 0, 0, NULL, "pf");
        kern_prefetch(k, kern_gep(k, pf->next, kern_mulc(k, P.iv, 16)), pf->l1 ? 3 : 2);
        kern_for_end(k, &P, NULL);
    }
    if (pf && pf->r_cols > 0 && R)
        prefetch_next_rows(k, mr, L.iv, row1, R, ldr, first, pf->r_cols);
    ROW_ARGS(L.iv);
    LLVMBuildCall2(b, ukty, kernels[mr], args, 9, "");
    kern_for_end(k, &L, NULL);
    /* rem = row1 - i < mr rows left: bit p of rem is a tile of p rows, after
     * the tiles of the higher bits */
    LLVMValueRef rem = LLVMBuildSub(b, row1, L.iv, "rem");
    for (int p = pow2_below(mr); p >= 1; p /= 2) {
        LLVMBasicBlockRef bcall = kern_block(k, "rows.tail"), bnext = kern_block(k, "rows.next");
        LLVMValueRef bit = LLVMBuildAnd(b, rem, kern_i64(k, p), "");
        LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntNE, bit, kern_i64(k, 0), ""), bcall, bnext);
        LLVMPositionBuilderAtEnd(b, bcall);
        ROW_ARGS(kern_add(k, L.iv, LLVMBuildAnd(b, rem, kern_i64(k, -2 * (int64_t)p), "")));
        LLVMBuildCall2(b, ukty, kernels[p], args, 9, "");
        LLVMBuildBr(b, bnext);
        LLVMPositionBuilderAtEnd(b, bnext);
    }
#undef ROW_ARGS
}
