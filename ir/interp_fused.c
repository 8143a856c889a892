/* interp_fused.c: the interpreter's kernels for the ops only passes create
 * (Linear and Attention, specified at the end of ops.def).  They follow the
 * rest of the interpreter: operands read into double, every sum accumulated
 * in double, each result rounded once to the output dtype.  They exist so
 * that a fused graph can be checked against the graph it came from, pass by
 * pass, with the same reference. */
#include "ir/opview.h"
#include "ir/interp_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* y[..., N] = act(x[..., K] @ W[K, N] + bias[N]) * gate + residual, the
 * residual broadcasting to y's shape, the gate of y's shape. */
int ik_linear(ik_ctx *c)
{
    const ir_tensor *X = c->in[IR_LINEAR_X], *W = c->in[IR_LINEAR_W], *Bias = ik_in(c, IR_LINEAR_BIAS),
                    *R = ik_in(c, IR_LINEAR_RESIDUAL), *G = ik_in(c, IR_LINEAR_GATE);
    const ir_tensor *all[5] = {X, W, Bias, R, G};
    int st = ik_same_dtype(c, 5, all);
    if (st)
        return st;
    if (!ir_dtype_is_float(X->dtype))
        return ik_fail(c, VITC_BAD_INPUT, "Linear takes float tensors, not %s", ir_dtype_name(X->dtype));
    ir_linear v;
    if (ir_linear_get(c->n, &v, c->d))
        return VITC_BAD_INPUT;
    ir_act act = v.act;
    if (X->rank < 1 || W->rank != 2 || W->dims[0] != X->dims[X->rank - 1]) {
        char a[160], b[160];
        return ik_fail(c, VITC_BAD_INPUT, "x %s and W %s do not multiply (W must be [K, N])",
                       ik_dims_str(X->rank, X->dims, a, sizeof a), ik_dims_str(W->rank, W->dims, b, sizeof b));
    }
    int64_t K = W->dims[0], N = W->dims[1], M = 1, dims[IR_MAX_RANK];
    for (int i = 0; i < X->rank - 1; i++) {
        M *= X->dims[i];
        dims[i] = X->dims[i];
    }
    dims[X->rank - 1] = N;
    if (Bias && (Bias->rank != 1 || Bias->dims[0] != N))
        return ik_fail(c, VITC_BAD_INPUT, "the bias must be [%lld], not %s", (long long)N,
                       ik_type_str(Bias, (char[160]){0}, 160));
    int64_t rs[IR_MAX_RANK] = {0};
    if (R) {
        int ok = R->rank <= X->rank;
        for (int i = 0; ok && i < R->rank; i++)
            ok = R->dims[i] == 1 || R->dims[i] == dims[X->rank - R->rank + i];
        if (!ok) {
            char a[160], b[160];
            return ik_fail(c, VITC_BAD_INPUT, "the residual %s does not broadcast to the output %s",
                           ik_dims_str(R->rank, R->dims, a, sizeof a), ik_dims_str(X->rank, dims, b, sizeof b));
        }
        ik_bcast_strides(R->rank, R->dims, X->rank, dims, rs);
    }
    int gate_ok = !G || G->rank == X->rank;
    for (int i = 0; G && gate_ok && i < X->rank; i++)
        gate_ok = G->dims[i] == dims[i];
    if (!gate_ok) {
        char a[160], b[160];
        return ik_fail(c, VITC_BAD_INPUT, "the gate %s is not of the output's shape %s",
                       ik_dims_str(G->rank, G->dims, a, sizeof a), ik_dims_str(X->rank, dims, b, sizeof b));
    }
    if ((st = ik_alloc(c, &c->out[0], X->dtype, X->rank, dims)))
        return st;
    double *w = ik_load_f64(c, W), *b = w && Bias ? ik_load_f64(c, Bias) : NULL;
    int loaded = w && (!Bias || b);
    double *row = loaded ? malloc((size_t)(K ? K : 1) * sizeof *row) : NULL;
    double *acc = row ? malloc((size_t)(N ? N : 1) * sizeof *acc) : NULL;
    if (!acc) {
        st = loaded ? ik_fail(c, VITC_INTERNAL, "out of memory") : c->d->status;
        free(w);
        free(b);
        free(row);
        return st;
    }
    ik_iter it;
    ik_iter_init(&it, X->rank, dims);
    ik_iter_add(&it, rs, 0);
    for (int64_t m = 0; m < M; m++) {
        for (int64_t k = 0; k < K; k++)
            row[k] = ir_tensor_get(X, m * K + k);
        for (int64_t j = 0; j < N; j++)
            acc[j] = b ? b[j] : 0;
        for (int64_t k = 0; k < K; k++) {
            const double *wk = w + k * N;
            for (int64_t j = 0; j < N; j++)
                acc[j] += row[k] * wk[j];
        }
        for (int64_t j = 0; j < N; j++, ik_iter_next(&it)) {
            double y = ir_act_ref(acc[j], act);
            if (G)
                y *= ir_tensor_get(G, m * N + j);
            if (R)
                y += ir_tensor_get(R, it.off[0]);
            ir_tensor_set(&c->out[0], m * N + j, y);
        }
    }
    free(w);
    free(b);
    free(row);
    free(acc);
    return VITC_OK;
}

/* Rotates rows [start, start + R) of x [rows, D] in place as Attention's
 * rotary table says (opview.h): cos-like factors at cs, sine-like ones at
 * sn, [R, D] each. */
static void rotate_rows(double *x, int64_t D, const double *cs0, const double *sn0, int64_t R, int64_t start,
                        ir_rope_pairing pairing, double *tmp)
{
    for (int64_t t = 0; t < R; t++) {
        double *row = x + (start + t) * D;
        const double *cs = cs0 + t * D, *sn = sn0 + t * D;
        for (int64_t d = 0; d < D; d++)
            tmp[d] = row[d] * cs[d] + row[ir_rope_partner(pairing, D, d)] * sn[d];
        memcpy(row, tmp, (size_t)D * sizeof *row);
    }
}

/* out[b, n, h*D + d] = sum_m P[b,h,n,m] * V[b,h,m,d] with
 * P = softmax_m(scale * sum_d Q[b,h,n,d] K[b,h,m,d] + bias[b,h,n,m]) * post_scale,
 * where Q, K, V are read out of the packed qkv[B, N, 3*H*D] by qkv_layout
 * (or, for cross-attention, Q out of q[B, Nq, H*D] and K, V out of
 * kv[B, Nk, 2*H*D]) and bias (0 when absent) broadcasts over its
 * dimensions of size 1; each fake-quant point present rounds its tensor to
 * its grid (ops.def). */
int ik_attention(ik_ctx *c)
{
    const ir_tensor *X = c->in[IR_ATTN_QKV], *Qt = ik_in(c, IR_ATTN_Q), *bias = ik_in(c, IR_ATTN_BIAS),
                    *Rope = ik_in(c, IR_ATTN_ROPE);
    if (!ir_dtype_is_float(X->dtype))
        return ik_fail(c, VITC_BAD_INPUT, "Attention takes float tensors, not %s", ir_dtype_name(X->dtype));
    ir_attention a;
    if (ir_attention_get(c->n, &a, c->d))
        return VITC_BAD_INPUT;
    int64_t H = a.heads, D = a.head_size, layout = a.layout, P = a.parts;
    double scale = a.scale, post = a.post_scale;
    const float(*fq)[5] = a.fq;
    if (X->rank != 3 || X->dims[2] != P * H * D)
        return ik_fail(c, VITC_BAD_INPUT, "%s must be [B, N, %lld] (%lld x %lld heads x %lld), not %s", Qt ? "kv" : "qkv",
                       (long long)(P * H * D), (long long)P, (long long)H, (long long)D,
                       ik_type_str(X, (char[160]){0}, 160));
    int64_t Bn = X->dims[0], N = X->dims[1], HD = H * D, Nq = Qt ? Qt->dims[1] : N;
    if (Qt && (Qt->rank != 3 || Qt->dims[0] != Bn || Qt->dims[2] != HD || Qt->dtype != X->dtype))
        return ik_fail(c, VITC_BAD_INPUT, "q must be [%lld, Nq, %lld], not %s", (long long)Bn, (long long)HD,
                       ik_type_str(Qt, (char[160]){0}, 160));
    int64_t dims[3] = {Bn, Nq, HD}, bs[4] = {0, 0, 0, 0}; /* bias strides over (image, head, row, key) */
    if (bias) {
        int64_t want[4] = {Bn, H, Nq, N};
        int ok = bias->rank == 4;
        for (int i = 0; ok && i < 4; i++) /* images: 1, all, or a period (windows) dividing them */
            ok = bias->dims[i] == want[i] || (i < 3 && bias->dims[i] == 1) ||
                 (i == 0 && bias->dims[0] > 0 && Bn % bias->dims[0] == 0);
        if (!ok)
            return ik_fail(c, VITC_BAD_INPUT, "the bias is %s, not [1|%lld, 1|%lld, 1|%lld, %lld]",
                           ik_type_str(bias, (char[160]){0}, 160), (long long)Bn, (long long)H, (long long)Nq,
                           (long long)N);
        ik_strides(4, bias->dims, bs);
        for (int i = 0; i < 4; i++)
            bs[i] = bias->dims[i] == 1 ? 0 : bs[i];
    }
    int r4 = Rope && Rope->rank == 4; /* one table per head */
    int64_t RH = r4 ? Rope->dims[1] : 1, RR = Rope ? Rope->dims[1 + r4] : 0;
    if (Rope && ((Rope->rank != 3 && !r4) || Rope->dims[0] != 2 || Rope->dims[2 + r4] != D || (r4 && RH != H) ||
                 RR > N - a.rope_start))
        return ik_fail(c, VITC_BAD_INPUT, "the rotary table is %s, not [2, R, %lld] or [2, %lld, R, %lld] with R at most %lld",
                       ik_type_str(Rope, (char[160]){0}, 160), (long long)D, (long long)H, (long long)D,
                       (long long)(N - a.rope_start));
    int st = ik_alloc(c, &c->out[0], X->dtype, 3, dims);
    if (st)
        return st;
    /* Element (which, h, d) of token n sits at index which*HD + h*D + d
     * (layout 0) or (h*D + d)*P + which (layout 1) of the last axis; K and V
     * are parts 1 and 2 of qkv, 0 and 1 of kv. */
    int64_t sw = layout ? 1 : HD, sh = layout ? P * D : D, sd = layout ? P : 1, k0 = Qt ? 0 : 1;
    double *x = ik_load_f64(c, X), *bv = bias && x ? ik_load_f64(c, bias) : NULL;
    double *xq = Qt && x && (bv || !bias) ? ik_load_f64(c, Qt) : NULL;
    double *rope = Rope && x && (bv || !bias) ? ik_load_f64(c, Rope) : NULL;
    if ((bias && !bv) || (Qt && !xq) || (Rope && !rope)) {
        free(x), free(xq), free(bv);
        return c->d->status;
    }
    double *q = x ? malloc((size_t)((Nq + 2 * N) * D + 1) * sizeof *q) : NULL;
    double *p = q ? malloc((size_t)(N + D + 1) * sizeof *p) : NULL, *o = p ? malloc((size_t)D * sizeof *o) : NULL;
    if (!o) {
        st = x ? ik_fail(c, VITC_INTERNAL, "out of memory") : c->d->status;
        free(x), free(xq), free(bv), free(rope), free(q), free(p);
        return st;
    }
    double *k = q + Nq * D, *v = k + N * D;
    for (int64_t b = 0; b < Bn; b++)
        for (int64_t h = 0; h < H; h++) {
            const double *xb = x + b * N * P * HD;
            for (int64_t n = 0; n < N; n++)
                for (int64_t d = 0; d < D; d++) {
                    const double *e = xb + n * P * HD + h * sh + d * sd;
                    if (!Qt)
                        q[n * D + d] = e[0];
                    k[n * D + d] = e[k0 * sw];
                    v[n * D + d] = e[(k0 + 1) * sw];
                }
            for (int64_t n = 0; Qt && n < Nq; n++)
                for (int64_t d = 0; d < D; d++)
                    q[n * D + d] = xq[(b * Nq + n) * HD + h * D + d];
            if (rope) { /* self-attention: Q's rows are K's tokens */
                const double *cs = rope + (r4 ? h : 0) * RR * D, *sn = cs + RH * RR * D;
                rotate_rows(q, D, cs, sn, RR, a.rope_start, a.rope_pairing, p);
                rotate_rows(k, D, cs, sn, RR, a.rope_start, a.rope_pairing, p);
            }
            for (int64_t i = 0; fq[IR_ATTN_FQ_Q][1] != 0 && i < Nq * D; i++)
                q[i] = ir_fake_quant_point(fq[IR_ATTN_FQ_Q], q[i]);
            for (int64_t i = 0; fq[IR_ATTN_FQ_K][1] != 0 && i < N * D; i++)
                k[i] = ir_fake_quant_point(fq[IR_ATTN_FQ_K], k[i]);
            for (int64_t i = 0; fq[IR_ATTN_FQ_V][1] != 0 && i < N * D; i++)
                v[i] = ir_fake_quant_point(fq[IR_ATTN_FQ_V], v[i]);
            for (int64_t n = 0; n < Nq; n++) {
                double mx = -INFINITY, sum = 0;
                for (int64_t m = 0; m < N; m++) {
                    double s = 0;
                    for (int64_t d = 0; d < D; d++)
                        s += q[n * D + d] * k[m * D + d];
                    if (fq[IR_ATTN_FQ_S][1] != 0)
                        s = ir_fake_quant_point(fq[IR_ATTN_FQ_S], s);
                    if (fq[IR_ATTN_FQ_S2][1] != 0)
                        s = ir_fake_quant_point(fq[IR_ATTN_FQ_S2], s);
                    p[m] = s * scale + (bv ? bv[b % bias->dims[0] * bs[0] + h * bs[1] + n * bs[2] + m * bs[3]] : 0);
                    mx = p[m] > mx || isnan(p[m]) ? p[m] : mx;
                }
                for (int64_t m = 0; m < N; m++)
                    sum += (p[m] = exp(p[m] - mx));
                memset(o, 0, (size_t)D * sizeof *o);
                for (int64_t m = 0; m < N; m++) {
                    double pm = p[m] / sum;
                    pm = (fq[IR_ATTN_FQ_P][1] != 0 ? ir_fake_quant_point(fq[IR_ATTN_FQ_P], pm) : pm) * post;
                    for (int64_t d = 0; d < D; d++)
                        o[d] += pm * v[m * D + d];
                }
                for (int64_t d = 0; d < D; d++)
                    ir_tensor_set(&c->out[0], (b * Nq + n) * HD + h * D + d,
                                  fq[IR_ATTN_FQ_O][1] != 0 ? ir_fake_quant_point(fq[IR_ATTN_FQ_O], o[d]) : o[d]);
            }
        }
    free(x), free(xq), free(bv), free(rope), free(q), free(p), free(o);
    return VITC_OK;
}
