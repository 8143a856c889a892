/* attention.c: the fused Attention op (ops.def): for each image and head,
 *     O = softmax((Q K^T) * scale + bias) * post_scale @ V
 * reading Q, K and V straight out of the packed qkv projection (no split or
 * transpose of qkv beforehand) and writing O with the heads merged, [B, N, H*D];
 * for cross-attention Q out of its own q [B, Nq, H*D] and K, V out of kv.
 *
 * A task is one (image, head, block of query rows); rows are split only when
 * there are fewer than 3 (image, head) pairs per thread.  A task first copies
 * K^T and V of its head and its rows of Q (each padded to whole panels) into
 * buffers on its stack.  In qkv the rows of a head lie 3*H*D floats apart
 * (strided by 3 more in qkv_layout 1): the copies read them once, with
 * prefetching, and everything after reads contiguous rows that stay in L2
 * while the query rows go by in chunks of RB rows:
 *     S = Q_chunk @ K^T                (micro-kernel, S chunk in L1)
 *     [S = scale * S + bias_chunk]     (with a bias: scale applied by the product)
 *     E = exp(scale * (S - rowmax))    (in place), rs = post_scale / rowsum
 *     O_chunk = rs * (E @ V)           (micro-kernel, stored into out)
 * With fake-quant points (a quantized model's Q/DQ pairs, ops.def), Q, K and
 * V are fake-quantized in their buffers, the scores on their way into the
 * exponent (the row maximum of FakeQuant(s) is FakeQuant of the maximum:
 * FakeQuant never decreases), the probabilities normalised in place and
 * fake-quantized before E @ V, and the output in out after it.
 * Stack per task: D * NP + 2 * N * DP + RB * (NP + 1) floats (NP, DP: N, D
 * rounded up to whole panels), 170 KiB for ViT-B/16 (N 197, D 64); the
 * generator refuses shapes that would need more than ATTN_MAX_STACK. */
#include "codegen/llvm/kern_uk.h"
#include "ir/opview.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

enum { RB_TILES = 4 };                    /* query rows per chunk: RB_TILES * MR */
enum { PREFETCH_ROWS = 6 };               /* qkv rows prefetched ahead of a copy */
#define ATTN_MAX_STACK (2u * 1024 * 1024) /* bytes of stack buffers per task */

typedef struct {
    int vf, nv, nr, mr, rb;
    int parts;                /* projections packed in qkv: 3, or 2 (K and V) with a separate Q */
    int64_t nq;               /* query rows: tokens, or q_tokens */
    int64_t E, ld;            /* H*D; qkv row stride parts*H*D */
    int64_t ks;               /* stride of d inside a head: 1 (layout 0) or parts */
    int64_t npn, nfn, np;     /* panels over the keys (columns of S) */
    int remn_nv, remn_lanes, remn_cols;
    int64_t npd, nfd, dp;     /* panels over the head dimension (columns of O) */
    int remd_nv, remd_lanes, remd_cols;
} attn_plan;

/* Whether scale folds into the softmax's exponent: max(scale * s) is
 * scale * max(s) only for scale > 0, and without a bias added after it. */
static int fold_scale(const cg_attention_desc *d) { return d->scale > 0 && !d->has_bias; }

static void panels(int64_t n, int nr, int vf, int64_t *np, int64_t *nf, int *rnv, int *rlanes, int *rcols)
{
    *np = (n + nr - 1) / nr;
    *nf = n / nr;
    *rcols = (int)(n - *nf * nr);
    *rnv = (*rcols + vf - 1) / vf;
    *rlanes = *rcols - (*rnv - 1) * vf;
}

static int attn_plan_make(const cg_attention_desc *d, const cg_target *t, attn_plan *p)
{
    memset(p, 0, sizeof *p);
    if (!d || !t || d->tokens < 1 || d->q_tokens < 0 || d->heads < 1 || d->head_size < 1 ||
        (d->qkv_layout != 0 && d->qkv_layout != 1) || (t->vec_floats != 4 && t->vec_floats != 8 && t->vec_floats != 16))
        return -1;
    if (d->rope_pairing && (d->q_tokens > 0 || d->head_size % 2 || d->rope_start < 0 || d->rope_rows < 0 ||
                            d->rope_start + d->rope_rows > d->tokens ||
                            (d->rope_pairing != IR_ROPE_HALVES && d->rope_pairing != IR_ROPE_INTERLEAVED)))
        return -1;
    if (d->fq[IR_ATTN_FQ_S][1] != 0 && (!fold_scale(d) || !(d->fq[IR_ATTN_FQ_S][0] > 0) ||
                                        d->fq[IR_ATTN_FQ_S2][0] < 0)) /* see emit_softmax */
        return -1;
    if ((d->fq[IR_ATTN_FQ_Q][1] != 0 || d->fq[IR_ATTN_FQ_K][1] != 0) && d->rope_pairing)
        return -1;
    p->vf = t->vec_floats;
    kern_uk_shape(t, &p->mr, &p->nv);
    p->nr = p->nv * p->vf;
    p->rb = RB_TILES * p->mr;
    p->parts = d->q_tokens > 0 ? 2 : 3;
    p->nq = d->q_tokens > 0 ? d->q_tokens : d->tokens;
    p->E = d->heads * d->head_size;
    p->ld = p->parts * p->E;
    p->ks = d->qkv_layout ? p->parts : 1;
    panels(d->tokens, p->nr, p->vf, &p->npn, &p->nfn, &p->remn_nv, &p->remn_lanes, &p->remn_cols);
    panels(d->head_size, p->nr, p->vf, &p->npd, &p->nfd, &p->remd_nv, &p->remd_lanes, &p->remd_cols);
    p->np = p->npn * p->nr;
    p->dp = p->npd * p->nr;
    double bytes = 4.0 * ((double)d->head_size * p->np + (double)(p->nq + d->tokens) * p->dp + (double)p->rb * (p->np + 1));
    return bytes <= ATTN_MAX_STACK ? 0 : -1;
}

/* Offset of part which (Q, K, V: 0, 1, 2; K, V of kv: 0, 1) of head h in a qkv row. */
static LLVMValueRef head_offset(kern *k, const cg_attention_desc *d, const attn_plan *p, LLVMValueRef h, int which)
{
    if (d->qkv_layout == 0)
        return kern_addc(k, kern_mulc(k, h, d->head_size), which * p->E);
    return kern_addc(k, kern_mulc(k, h, p->parts * d->head_size), which);
}


static int has_fq(const cg_attention_desc *d, ir_attn_fq_point p) { return d->fq[p][1] != 0; }

/* The scores' fake-quant points on s (the first's mul applied by the product). */
static LLVMValueRef scores_fq(kern *k, const cg_attention_desc *d, LLVMValueRef s)
{
    float first[5];
    memcpy(first, d->fq[IR_ATTN_FQ_S], sizeof first);
    first[0] = 1;
    s = kern_vfake_quant(k, s, first);
    return has_fq(d, IR_ATTN_FQ_S2) ? kern_vfake_quant(k, s, d->fq[IR_ATTN_FQ_S2]) : s;
}

/* FakeQuant (fake-quant point p) in place over rows x cols floats at buf,
 * row stride ld. */
static void emit_fq_rows(kern *k, const cg_attention_desc *d, ir_attn_fq_point p, LLVMValueRef buf, int64_t ld,
                         LLVMValueRef rows, int64_t cols)
{
    kern_loop R;
    kern_for(k, &R, kern_i64(k, 0), rows, 1, 0, 0, NULL, "fq.r");
    LLVMValueRef row = kern_gep(k, buf, kern_mulc(k, R.iv, ld));
    for (int64_t c = 0; c < cols; c += k->vf) {
        int lanes = cols - c < k->vf ? (int)(cols - c) : k->vf;
        LLVMValueRef at = kern_gepc(k, row, c);
        kern_vstore(k, kern_vfake_quant(k, kern_vload(k, at, lanes, kern_vconst(k, 0.0f)), d->fq[p]), at, lanes);
    }
    kern_for_end(k, &R, NULL);
}

/* softmax(ptr S, i64 rows, ptr rs, ptr bias): row r of S (stride NP, N valid
 * columns) becomes e = exp(scale * (s - max)) (scale folded here, or applied
 * by the S product), and rs[r] = post_scale / sum(e), the factor the P @ V
 * product applies to its row: the probabilities are never normalised in
 * memory.  With a bias, its row r (at r * bias_i) is added to the scaled row
 * first. */
static LLVMValueRef emit_softmax(kern *k, const char *name, const cg_attention_desc *d, const attn_plan *p)
{
    LLVMBuilderRef b = k->b;
    LLVMTypeRef params[4] = {k->ptr, k->i64, k->ptr, k->ptr};
    LLVMValueRef fn = kern_func(k, name, LLVMFunctionType(k->voidt, params, 4, 0), 1);
    LLVMValueRef S = LLVMGetParam(fn, 0);
    int64_t nfv = d->tokens / p->vf;
    int tail = (int)(d->tokens % p->vf);
    LLVMValueRef ninf = kern_vconst(k, -INFINITY), zero = kern_vconst(k, 0.0f);
    LLVMValueRef c0 = kern_i64(k, 0), cn = kern_i64(k, nfv);
    int fold = fold_scale(d);

    kern_loop R;
    kern_for(k, &R, c0, LLVMGetParam(fn, 1), 1, 0, 0, NULL, "row");
    LLVMValueRef row = kern_gep(k, S, kern_mulc(k, R.iv, p->np));
    LLVMValueRef trow = kern_gepc(k, row, nfv * p->vf);

    LLVMValueRef brow = d->has_bias ? kern_gep(k, LLVMGetParam(fn, 3), kern_mulc(k, R.iv, d->bias_i)) : NULL;
    kern_loop L;
    kern_for(k, &L, c0, cn, 1, 0, 1, &ninf, "max");
    LLVMValueRef at0 = kern_gep(k, row, kern_mulc(k, L.iv, p->vf)), s0 = kern_vload(k, at0, k->vf, NULL);
    if (brow) { /* s + bias, stored back for the exponent */
        s0 = LLVMBuildFAdd(b, s0, kern_vload(k, kern_gep(k, brow, kern_mulc(k, L.iv, p->vf)), k->vf, NULL), "");
        kern_vstore(k, s0, at0, k->vf);
    }
    LLVMValueRef mx = kern_fmax(k, L.carry[0], s0);
    kern_for_end(k, &L, &mx);
    mx = L.carry[0];
    if (tail) {
        LLVMValueRef st = kern_vload(k, trow, tail, ninf);
        if (brow) {
            st = LLVMBuildFAdd(b, st, kern_vload(k, kern_gepc(k, brow, nfv * p->vf), tail, zero), "");
            kern_vstore(k, st, trow, tail);
        }
        mx = kern_fmax(k, mx, st);
    }
    LLVMValueRef m = kern_hmax(k, mx);
    int fqs = has_fq(d, IR_ATTN_FQ_S), fqp = has_fq(d, IR_ATTN_FQ_P);
    if (fqs) /* FakeQuant of a positive multiple does not decrease: the maximum of the fake-quantized row */
        m = LLVMBuildExtractElement(b, scores_fq(k, d, kern_splat(k, m)), kern_i64(k, 0), "");
    /* exponent: fma(s, scale, -scale * max) or s - max */
    LLVMValueRef vscale = kern_vconst(k, fold ? d->scale : 1.0f);
    LLVMValueRef vshift = kern_splat(k, LLVMBuildFNeg(b, fold ? LLVMBuildFMul(b, m, kern_f32(k, d->scale), "") : m, ""));

    kern_for(k, &L, c0, cn, 1, 0, 1, &zero, "exp");
    LLVMValueRef at = kern_gep(k, row, kern_mulc(k, L.iv, p->vf));
    LLVMValueRef sv = kern_vload(k, at, k->vf, NULL);
    if (fqs)
        sv = scores_fq(k, d, sv);
    LLVMValueRef ex = kern_vexp(k, kern_fma(k, sv, vscale, vshift), 1);
    kern_vstore(k, ex, at, k->vf);
    LLVMValueRef sum = LLVMBuildFAdd(b, L.carry[0], ex, "");
    kern_for_end(k, &L, &sum);
    sum = L.carry[0];
    if (tail) {
        LLVMValueRef st = kern_vload(k, trow, tail, ninf);
        if (fqs)
            st = scores_fq(k, d, st);
        ex = kern_vexp(k, kern_fma(k, st, vscale, vshift), 1);
        ex = LLVMBuildSelect(b, kern_lane_mask(k, tail), ex, zero, "");
        kern_vstore(k, ex, trow, tail);
        sum = LLVMBuildFAdd(b, sum, ex, "");
    }
    LLVMValueRef f = LLVMBuildFDiv(b, kern_f32(k, d->post_scale), kern_hsum(k, sum), "");
    if (fqp) { /* the probabilities e * (1 / sum), fake-quantized, in place; the product scales by post_scale only */
        LLVMValueRef vinv = kern_splat(k, LLVMBuildFDiv(b, kern_f32(k, 1.0f), kern_hsum(k, sum), ""));
        for (int part = 0; part < 2; part++) {
            if (part == 1 && !tail)
                break;
            LLVMValueRef pat;
            if (part == 0) {
                kern_for(k, &L, c0, cn, 1, 0, 0, NULL, "fq.p");
                pat = kern_gep(k, row, kern_mulc(k, L.iv, p->vf));
            } else {
                pat = trow;
            }
            int lanes = part == 0 ? p->vf : tail;
            LLVMValueRef pr = LLVMBuildFMul(b, kern_vload(k, pat, lanes, zero), vinv, "");
            kern_vstore(k, kern_vfake_quant(k, pr, d->fq[IR_ATTN_FQ_P]), pat, lanes);
            if (part == 0)
                kern_for_end(k, &L, NULL);
        }
        f = kern_f32(k, d->post_scale);
    }
    LLVMSetAlignment(LLVMBuildStore(b, f, kern_gep(k, LLVMGetParam(fn, 2), R.iv)), 4);
    kern_for_end(k, &R, NULL);
    LLVMBuildRetVoid(b);
    return fn;
}

typedef struct {
    const cg_attention_desc *d;
    const attn_plan *p;
    LLVMValueRef s_full[17], s_rem[17], o_full[17], o_rem[17], softmax, rotate;
} attn_emit;

/* rotate(ptr buf, i64 rs, i64 cs, i64 first, i64 count, ptr rope): the rows
 * of buf (row stride rs, element stride cs) hold tokens first ..
 * first + count - 1 of Q or K; those of them from rope_start on, rope_rows
 * of them, are rotated in place by the head's table: C = rope [rope_rows, D],
 * S at rope + H' rope_rows D (H': heads with rope_per_head, else 1); for
 * each pair (a, b) of elements rotated together,
 *     x[a], x[b] = x[a] C[a] + x[b] S[a],  x[b] C[b] + x[a] S[b]. */
static LLVMValueRef emit_rotate(kern *k, const char *name, const cg_attention_desc *d)
{
    LLVMBuilderRef b = k->b;
    LLVMTypeRef params[6] = {k->ptr, k->i64, k->i64, k->i64, k->i64, k->ptr};
    LLVMValueRef fn = kern_func(k, name, LLVMFunctionType(k->voidt, params, 6, 0), 1);
    LLVMValueRef buf = LLVMGetParam(fn, 0), rs = LLVMGetParam(fn, 1), cs = LLVMGetParam(fn, 2);
    LLVMValueRef first = LLVMGetParam(fn, 3), rope = LLVMGetParam(fn, 5);
    int64_t D = d->head_size, R = d->rope_rows, r0 = d->rope_start;
    LLVMValueRef lo = kern_max(k, first, kern_i64(k, r0));
    LLVMValueRef hi = kern_min(k, kern_add(k, first, LLVMGetParam(fn, 4)), kern_i64(k, r0 + R));
    kern_loop T, P;
    kern_for(k, &T, lo, kern_max(k, lo, hi), 1, 0, 0, NULL, "rope.t");
    LLVMValueRef row = kern_gep(k, buf, kern_mul(k, LLVMBuildSub(b, T.iv, first, ""), rs));
    int64_t sin_at = (d->rope_per_head ? d->heads : 1) * R * D;
    LLVMValueRef c = kern_gep(k, rope, kern_mulc(k, kern_addc(k, T.iv, -r0), D)), s = kern_gepc(k, c, sin_at);
    kern_for(k, &P, kern_i64(k, 0), kern_i64(k, D / 2), 1, 0, 0, NULL, "rope.pair");
    LLVMValueRef ia = d->rope_pairing == IR_ROPE_INTERLEAVED ? kern_mulc(k, P.iv, 2) : P.iv;
    LLVMValueRef ib = kern_addc(k, ia, d->rope_pairing == IR_ROPE_INTERLEAVED ? 1 : D / 2);
    LLVMValueRef pa = kern_gep(k, row, kern_mul(k, ia, cs)), pb = kern_gep(k, row, kern_mul(k, ib, cs));
    LLVMValueRef v[6], at[6] = {pa, pb, kern_gep(k, c, ia), kern_gep(k, c, ib), kern_gep(k, s, ia), kern_gep(k, s, ib)};
    for (int i = 0; i < 6; i++) {
        v[i] = LLVMBuildLoad2(b, k->f32, at[i], "");
        LLVMSetAlignment(v[i], 4);
    }
    LLVMValueRef ya = LLVMBuildFAdd(b, LLVMBuildFMul(b, v[0], v[2], ""), LLVMBuildFMul(b, v[1], v[4], ""), "");
    LLVMValueRef yb = LLVMBuildFAdd(b, LLVMBuildFMul(b, v[1], v[3], ""), LLVMBuildFMul(b, v[0], v[5], ""), "");
    LLVMSetAlignment(LLVMBuildStore(b, ya, pa), 4);
    LLVMSetAlignment(LLVMBuildStore(b, yb, pb), 4);
    kern_for_end(k, &P, NULL);
    kern_for_end(k, &T, NULL);
    LLVMBuildRetVoid(b);
    return fn;
}

/* Prefetches (for reading) the cache lines of n floats from p. */
static void emit_prefetch(kern *k, LLVMValueRef p, int64_t n)
{
    for (int64_t off = 0; off < n + 15; off += 16)
        kern_prefetch(k, kern_gepc(k, p, off < n ? off : n - 1), 3);
}

/* Copies rows of one head out of qkv into a buffer:
 *     dst[r * drs + c * dcs] = src[r * ld + c * ks]   for r < rows, c < cols.
 * Rows of a head lie 3*H*D floats apart, too far apart for the hardware
 * prefetcher, so each row is prefetched PREFETCH_ROWS ahead; contiguous rows
 * (ks 1) are read as vectors, so that many rows' misses are in flight at
 * once, and stored as vectors or, transposed (dcs != 1), lane by lane. */
static void emit_copy(kern *k, LLVMValueRef dst, int64_t drs, int64_t dcs, LLVMValueRef src, int64_t ld, int64_t ks,
                      LLVMValueRef rows, int64_t cols)
{
    kern_loop R;
    kern_for(k, &R, kern_i64(k, 0), rows, 1, 0, 0, NULL, "copy.r");
    LLVMValueRef s = kern_gep(k, src, kern_mulc(k, R.iv, ld));
    LLVMValueRef t = kern_gep(k, dst, kern_mulc(k, R.iv, drs));
    emit_prefetch(k, kern_gepc(k, s, PREFETCH_ROWS * ld), (cols - 1) * ks + 1);
    if (ks == 1 && cols <= 256) {
        for (int64_t c = 0; c < cols; c += k->vf) {
            int lanes = cols - c < k->vf ? (int)(cols - c) : k->vf;
            LLVMValueRef x = kern_vload(k, kern_gepc(k, s, c), lanes, NULL);
            if (dcs == 1) {
                kern_vstore(k, x, kern_gepc(k, t, c), lanes);
                continue;
            }
            for (int l = 0; l < lanes; l++) {
                LLVMValueRef e = LLVMBuildExtractElement(k->b, x, LLVMConstInt(k->i32, (unsigned)l, 0), "");
                LLVMSetAlignment(LLVMBuildStore(k->b, e, kern_gepc(k, t, (c + l) * dcs)), 4);
            }
        }
    } else {
        kern_loop C;
        kern_for(k, &C, kern_i64(k, 0), kern_i64(k, cols), 1, 0, 0, NULL, "copy.c");
        LLVMValueRef x = LLVMBuildLoad2(k->b, k->f32, kern_gep(k, s, kern_mulc(k, C.iv, ks)), "");
        LLVMSetAlignment(x, 4);
        LLVMSetAlignment(LLVMBuildStore(k->b, x, kern_gep(k, t, kern_mulc(k, C.iv, dcs))), 4);
        kern_for_end(k, &C, NULL);
    }
    kern_for_end(k, &R, NULL);
}

/* Transposes vf vectors in registers: x[r][l] becomes x[l][r].  log2(vf)
 * stages; the stage of block size h swaps, between rows i and i + h, the
 * odd h-lane blocks of row i with the even ones of row i + h. */
static void transpose_vectors(kern *k, LLVMValueRef *x)
{
    int n = k->vf;
    LLVMValueRef lo_idx[16], hi_idx[16];
    for (int h = n / 2; h >= 1; h /= 2) {
        for (int l = 0; l < n; l++) {
            int blk = l / h, in = l % h, pair = blk / 2 * 2 * h; /* lanes of the block pair */
            /* lo: block 2m from row i, block 2m+1 from row i+h's block 2m */
            lo_idx[l] = LLVMConstInt(k->i32, (unsigned)(blk % 2 ? n + pair + in : pair + in), 0);
            /* hi: row i's block 2m+1, then row i+h's block 2m+1 */
            hi_idx[l] = LLVMConstInt(k->i32, (unsigned)(blk % 2 ? n + pair + h + in : pair + h + in), 0);
        }
        LLVMValueRef lo = LLVMConstVector(lo_idx, (unsigned)n), hi = LLVMConstVector(hi_idx, (unsigned)n);
        for (int i = 0; i < n; i++) {
            if (i & h)
                continue;
            LLVMValueRef a = x[i], c = x[i + h];
            x[i] = LLVMBuildShuffleVector(k->b, a, c, lo, "");
            x[i + h] = LLVMBuildShuffleVector(k->b, a, c, hi, "");
        }
    }
}

/* The transposed copy of emit_copy for contiguous rows (ks 1, drs 1) and
 * whole vectors of columns: dst[c * dcs + r] = src[r * ld + c], rows taken vf
 * at a time, each block of vf x vf transposed in registers and stored as
 * vectors (the lane-by-lane stores cost 8 times the instructions).  Rows past
 * `rows` in the last block are stored as zeros: dst needs room for whole
 * blocks (dcs >= rows rounded up to vf). */
static void emit_copy_t(kern *k, LLVMValueRef dst, int64_t dcs, LLVMValueRef src, int64_t ld, int64_t rows,
                        int64_t cols)
{
    int vf = k->vf;
    LLVMValueRef x[16];
    int64_t full = rows / vf, tail = rows % vf;
    for (int part = 0; part < 2; part++) {
        int64_t nblk = part == 0 ? full : tail != 0;
        if (!nblk)
            continue;
        int valid = part == 0 ? vf : (int)tail;
        kern_loop R;
        LLVMValueRef r0;
        if (part == 0) {
            kern_for(k, &R, kern_i64(k, 0), kern_i64(k, full), 1, 0, 0, NULL, "copyt.r");
            r0 = kern_mulc(k, R.iv, vf);
        } else {
            r0 = kern_i64(k, full * vf);
        }
        LLVMValueRef s = kern_gep(k, src, kern_mulc(k, r0, ld));
        LLVMValueRef t = kern_gep(k, dst, r0);
        for (int r = 0; r < valid; r++)
            emit_prefetch(k, kern_gepc(k, s, (r + vf) * ld), cols);
        for (int64_t c = 0; c < cols; c += vf) {
            for (int r = 0; r < vf; r++)
                x[r] = r < valid ? kern_vload(k, kern_gepc(k, s, r * ld + c), vf, NULL) : kern_vconst(k, 0.0f);
            transpose_vectors(k, x);
            for (int l = 0; l < vf; l++)
                kern_vstore(k, x[l], kern_gepc(k, t, (c + l) * dcs), vf);
        }
        if (part == 0)
            kern_for_end(k, &R, NULL);
    }
}

/* Zeroes columns [c0, c1) of rows rows of a buffer with row stride ld. */
static void emit_zero_cols(kern *k, LLVMValueRef buf, int64_t ld, int64_t rows, int64_t c0, int64_t c1)
{
    if (c0 >= c1)
        return;
    kern_loop R;
    kern_for(k, &R, kern_i64(k, 0), kern_i64(k, rows), 1, 0, 0, NULL, "zero");
    LLVMValueRef row = kern_gep(k, buf, kern_mulc(k, R.iv, ld));
    for (int64_t c = c0; c < c1; c++)
        LLVMSetAlignment(LLVMBuildStore(k->b, kern_f32(k, 0.0f), kern_gepc(k, row, c)), 4);
    kern_for_end(k, &R, NULL);
}

/* The micro-kernel calls of one product over all its column panels. */
static void emit_product(kern *k, LLVMValueRef *full, LLVMValueRef *rem, int64_t nf, int has_rem, int mr,
                         LLVMValueRef rows, LLVMValueRef A, int64_t lda, LLVMValueRef B, LLVMValueRef C,
                         int64_t ldc, LLVMValueRef rs, int nr, int64_t kdim)
{
    LLVMValueRef zero = kern_i64(k, 0), kc = kern_i64(k, kdim);
    if (nf) {
        kern_loop P;
        kern_for(k, &P, zero, kern_i64(k, nf), 1, 0, 0, NULL, "panel");
        LLVMValueRef off = kern_mulc(k, P.iv, nr);
        kern_uk_rows(k, full, mr, zero, rows, A, lda, kern_gep(k, B, off), kern_gep(k, C, off), ldc, NULL, 0, NULL,
                     rs, kc, NULL, NULL, NULL);
        kern_for_end(k, &P, NULL);
    }
    if (has_rem)
        kern_uk_rows(k, rem, mr, zero, rows, A, lda, kern_gepc(k, B, nf * nr), kern_gepc(k, C, nf * nr), ldc, NULL, 0,
                     NULL, rs, kc, NULL, NULL, NULL);
}

static LLVMValueRef emit_task(kern *k, attn_emit *e, const char *name, LLVMTypeRef argsty)
{
    const cg_attention_desc *d = e->d;
    const attn_plan *p = e->p;
    LLVMBuilderRef b = k->b;
    int64_t N = d->tokens, D = d->head_size;
    LLVMValueRef fn = kern_func(k, name, kern_task_type(k), 1);
    LLVMValueRef kt = LLVMBuildArrayAlloca(b, k->f32, kern_i64(k, D * p->np), "kt");
    LLVMValueRef sbuf = LLVMBuildArrayAlloca(b, k->f32, kern_i64(k, p->rb * p->np), "s");
    LLVMValueRef vp = LLVMBuildArrayAlloca(b, k->f32, kern_i64(k, N * p->dp), "v");
    LLVMValueRef qb = LLVMBuildArrayAlloca(b, k->f32, kern_i64(k, p->nq * p->dp), "q");
    LLVMValueRef rs = LLVMBuildArrayAlloca(b, k->f32, kern_i64(k, p->rb), "rowscale");
    LLVMSetAlignment(kt, 64);
    LLVMSetAlignment(sbuf, 64);
    LLVMSetAlignment(vp, 64);
    LLVMSetAlignment(qb, 64);
    /* padding read by whole-vector loads, never written by the copies */
    emit_zero_cols(k, kt, p->np, D, N, p->np);
    emit_zero_cols(k, vp, p->dp, N, D, p->dp);

    LLVMValueRef args, nrb, rbk;
    kern_task_closure(k, fn, &args, &nrb, &rbk, NULL);
    LLVMValueRef qkv = kern_field(k, argsty, args, 0, k->ptr);
    LLVMValueRef out = kern_field(k, argsty, args, 1, k->ptr);
    LLVMValueRef bias = d->has_bias ? kern_field(k, argsty, args, 2, k->ptr) : NULL;

    kern_loop T;
    LLVMValueRef bh, rblk;
    kern_task_loop(k, fn, &T, nrb, &bh, &rblk);
    LLVMValueRef img = LLVMBuildSDiv(b, bh, kern_i64(k, d->heads), "img");
    LLVMValueRef h = LLVMBuildSub(b, bh, kern_mulc(k, img, d->heads), "head");
    LLVMValueRef base = kern_gep(k, qkv, kern_mulc(k, img, N * p->ld));
    int kw = p->parts - 2; /* K's part: 1 in qkv, 0 in kv */
    LLVMValueRef kk = kern_gep(k, base, head_offset(k, d, p, h, kw));
    LLVMValueRef v = kern_gep(k, base, head_offset(k, d, p, h, kw + 1));
    /* Q: in qkv (row stride ld, d stride ks), or in q [B, nq, E] */
    int64_t ldq = p->parts == 3 ? p->ld : p->E, ksq = p->parts == 3 ? p->ks : 1;
    LLVMValueRef q = p->parts == 3 ? kern_gep(k, base, head_offset(k, d, p, h, 0))
                                   : kern_gep(k, kern_field(k, argsty, args, 3, k->ptr),
                                              kern_add(k, kern_mulc(k, img, p->nq * p->E), kern_mulc(k, h, D)));
    LLVMValueRef o = kern_gep(k, out, kern_add(k, kern_mulc(k, img, p->nq * p->E), kern_mulc(k, h, D)));
    LLVMValueRef bimg = d->bias_period > 0 ? LLVMBuildSRem(b, img, kern_i64(k, d->bias_period), "window") : img;
    LLVMValueRef bh_bias =
        bias ? kern_gep(k, bias, kern_add(k, kern_mulc(k, bimg, d->bias_b), kern_mulc(k, h, d->bias_h))) : NULL;

    /* K^T: kt[d][j] = K[j][d]; V: vp[j][d] = V[j][d]; the task's rows of Q */
    LLVMValueRef r0 = kern_mul(k, rblk, rbk);
    LLVMValueRef r1 = kern_min(k, kern_i64(k, p->nq), kern_add(k, r0, rbk));
    if (p->ks == 1 && D % k->vf == 0 && k->vf <= 16)
        emit_copy_t(k, kt, p->np, kk, p->ld, N, D); /* np >= N rounded up to vf: whole blocks fit */
    else
        emit_copy(k, kt, 1, p->np, kk, p->ld, p->ks, kern_i64(k, N), D);
    emit_copy(k, vp, p->dp, 1, v, p->ld, p->ks, kern_i64(k, N), D);
    emit_copy(k, qb, p->dp, 1, kern_gep(k, q, kern_mulc(k, r0, ldq)), ldq, ksq, LLVMBuildSub(b, r1, r0, ""), D);
    if (has_fq(d, IR_ATTN_FQ_Q))
        emit_fq_rows(k, d, IR_ATTN_FQ_Q, qb, p->dp, LLVMBuildSub(b, r1, r0, ""), D);
    if (has_fq(d, IR_ATTN_FQ_K))
        emit_fq_rows(k, d, IR_ATTN_FQ_K, kt, p->np, kern_i64(k, D), N);
    if (has_fq(d, IR_ATTN_FQ_V))
        emit_fq_rows(k, d, IR_ATTN_FQ_V, vp, p->dp, kern_i64(k, N), D);
    if (e->rotate) { /* self-attention: the query rows are tokens r0.., the keys all N */
        LLVMValueRef rope = kern_field(k, argsty, args, 4, k->ptr);
        if (d->rope_per_head)
            rope = kern_gep(k, rope, kern_mulc(k, h, d->rope_rows * D));
        LLVMTypeRef rp[6] = {k->ptr, k->i64, k->i64, k->i64, k->i64, k->ptr};
        LLVMTypeRef rty = LLVMFunctionType(k->voidt, rp, 6, 0);
        LLVMValueRef qa[6] = {qb, kern_i64(k, p->dp), kern_i64(k, 1), r0, LLVMBuildSub(b, r1, r0, ""), rope};
        LLVMValueRef ka[6] = {kt, kern_i64(k, 1), kern_i64(k, p->np), kern_i64(k, 0), kern_i64(k, N), rope};
        LLVMBuildCall2(b, rty, e->rotate, qa, 6, "");
        LLVMBuildCall2(b, rty, e->rotate, ka, 6, "");
    }

    kern_loop I;
    kern_for(k, &I, r0, r1, p->rb, 0, 0, NULL, "chunk");
    LLVMValueRef rows = kern_min(k, kern_i64(k, p->rb), LLVMBuildSub(b, r1, I.iv, ""));
    LLVMValueRef qrows = kern_gep(k, qb, kern_mulc(k, LLVMBuildSub(b, I.iv, r0, ""), p->dp));
    emit_product(k, e->s_full, e->s_rem, p->nfn, p->remn_cols != 0, p->mr, rows, qrows, p->dp, kt, sbuf, p->np, NULL,
                 p->nr, D);
    LLVMValueRef sa[4] = {sbuf, rows, rs,
                          bh_bias ? kern_gep(k, bh_bias, kern_mulc(k, I.iv, d->bias_i)) : LLVMConstNull(k->ptr)};
    LLVMTypeRef smp[4] = {k->ptr, k->i64, k->ptr, k->ptr};
    LLVMBuildCall2(b, LLVMFunctionType(k->voidt, smp, 4, 0), e->softmax, sa, 4, "");
    emit_product(k, e->o_full, e->o_rem, p->nfd, p->remd_cols != 0, p->mr, rows, sbuf, p->np, vp,
                 kern_gep(k, o, kern_mulc(k, I.iv, p->E)), p->E, rs, p->nr, N);
    if (has_fq(d, IR_ATTN_FQ_O))
        emit_fq_rows(k, d, IR_ATTN_FQ_O, kern_gep(k, o, kern_mulc(k, I.iv, p->E)), p->E, rows, D);
    kern_for_end(k, &I, NULL);
    kern_for_end(k, &T, NULL);
    LLVMBuildRetVoid(b);
    return fn;
}

/* The driver's split: one (image, head) per task, its query rows split while there are few. */
static kern_split split(kern *k, void *gen, LLVMValueRef batch, LLVMValueRef nt)
{
    const attn_emit *e = gen;
    return kern_split_rows(k, kern_mulc(k, batch, e->d->heads), e->p->nq, e->p->mr, nt);
}

/* The micro-kernels of S = Q @ K^T and O = P @ V and the softmax, then the
 * task that calls them. */
static LLVMValueRef build_task(kern *k, void *gen, const char *name, LLVMTypeRef argsty)
{
    attn_emit *e = gen;
    const cg_attention_desc *d = e->d;
    const attn_plan *p = e->p;
    /* S = Q @ K^T (times scale unless folded): A = the Q buffer, B = the K^T buffer */
    kern_uk s = {.mr = p->mr, .nv = p->nv, .last_lanes = p->vf, .lda = p->dp, .a_ks = 1, .ldb = p->np,
                 .ldc = p->np, .alpha = has_fq(d, IR_ATTN_FQ_S) ? d->fq[IR_ATTN_FQ_S][0] : fold_scale(d) ? 1.0f : d->scale};
    if (kern_uk_set_panels(k, s, p->nfn, e->s_full, p->remn_cols, p->remn_nv, p->remn_lanes, 0, e->s_rem))
        return NULL;
    /* O = P @ V: A = P (stride NP), B = the V buffer */
    kern_uk o = {.mr = p->mr, .nv = p->nv, .last_lanes = p->vf, .lda = p->np, .a_ks = 1, .ldb = p->dp, .ldc = p->E,
                 .alpha = 1.0f, .row_scale = 1};
    if (kern_uk_set_panels(k, o, p->nfd, e->o_full, p->remd_cols, p->remd_nv, p->remd_lanes, 0, e->o_rem))
        return NULL;
    char smname[340];
    snprintf(smname, sizeof smname, "%s.softmax", name);
    e->softmax = emit_softmax(k, smname, d, p);
    if (d->rope_pairing) {
        snprintf(smname, sizeof smname, "%s.rotate", name);
        e->rotate = emit_rotate(k, smname, d);
    }
    return emit_task(k, e, name, argsty);
}

static void task_name(const kern *k, const void *gen, char *buf, size_t len)
{
    const cg_attention_desc *d = ((const attn_emit *)gen)->d;
    union { float f; uint32_t u; } sc = {.f = d->scale}, ps = {.f = d->post_scale};
    char suffix[96] = ""; /* the bias's strides, the queries of cross-attention */
    if (d->has_bias)
        snprintf(suffix, sizeof suffix, ".b%lld_%lld_%lld", (long long)d->bias_b, (long long)d->bias_h,
                 (long long)d->bias_i);
    if (d->bias_period > 0)
        snprintf(suffix + strlen(suffix), sizeof suffix - strlen(suffix), ".w%lld", (long long)d->bias_period);
    if (d->q_tokens > 0)
        snprintf(suffix + strlen(suffix), sizeof suffix - strlen(suffix), ".q%lld", (long long)d->q_tokens);
    if (d->rope_pairing)
        snprintf(suffix + strlen(suffix), sizeof suffix - strlen(suffix), ".r%d%s_%lld_%lld", d->rope_pairing,
                 d->rope_per_head ? "h" : "", (long long)d->rope_start, (long long)d->rope_rows);
    uint64_t h = kern_bytes_hash(d->fq, sizeof d->fq);
    if (h)
        snprintf(suffix + strlen(suffix), sizeof suffix - strlen(suffix), ".fq%016llx", (unsigned long long)h);
    snprintf(buf, len, "vitc.attention.%s.n%lld.h%lld.d%lld.l%d.s%08x.p%08x%s", k->tag, (long long)d->tokens,
             (long long)d->heads, (long long)d->head_size, d->qkv_layout, (unsigned)sc.u, (unsigned)ps.u, suffix);
}

LLVMValueRef cg_attention_emit(LLVMModuleRef mod, const char *name, const cg_attention_desc *d, const cg_target *t)
{
    attn_plan p;
    attn_emit e = {.d = d, .p = &p};
    kern_kernel kk = {.nptr = 5, .task_name = task_name, .task = build_task, .split = split, .gen = &e};
    return attn_plan_make(d, t, &p) ? NULL : kern_emit(mod, t, name, &kk);
}
