/* interp_math.c: the interpreter's contractions and normalisations: MatMul,
 * Gemm, Conv (1-D and 2-D), ReduceMean/Sum/Max/Min, Softmax, LayerNormalization
 * and inference-mode BatchNormalization.  Float inputs are read into double,
 * every sum and statistic is accumulated in double, and results are rounded
 * once to the output dtype.  Integer MatMul / Gemm / reductions are exact
 * (wrapping) int64 arithmetic. */
#include "ir/interp_impl.h"
#include "ir/opview.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int64_t wrap_mul_add(int64_t acc, int64_t a, int64_t b)
{
    return (int64_t)((uint64_t)acc + (uint64_t)a * (uint64_t)b);
}

/* c[M,N] = a[M,K] . b[K,N], row-major.  Each c[i,j] is summed over k in
 * order; rows go in blocks of 8 so that a row of b is reused from cache. */
static void mm_f64(const double *restrict a, const double *restrict b, double *restrict c, int64_t M, int64_t K,
                   int64_t N)
{
    for (int64_t i0 = 0; i0 < M; i0 += 8) {
        int64_t i1 = i0 + 8 < M ? i0 + 8 : M;
        memset(c + i0 * N, 0, (size_t)((i1 - i0) * N) * sizeof *c);
        for (int64_t k = 0; k < K; k++) {
            const double *restrict bk = b + k * N;
            for (int64_t i = i0; i < i1; i++) {
                double aik = a[i * K + k];
                double *restrict ci = c + i * N;
                int64_t j = 0;
                for (; j + 4 <= N; j += 4) { /* unrolled so that -O2 vectorises it */
                    ci[j] += aik * bk[j];
                    ci[j + 1] += aik * bk[j + 1];
                    ci[j + 2] += aik * bk[j + 2];
                    ci[j + 3] += aik * bk[j + 3];
                }
                for (; j < N; j++)
                    ci[j] += aik * bk[j];
            }
        }
    }
}

static void mm_i64(const int64_t *a, const int64_t *b, int64_t *c, int64_t M, int64_t K, int64_t N)
{
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            int64_t acc = 0;
            for (int64_t k = 0; k < K; k++)
                acc = wrap_mul_add(acc, a[i * K + k], b[k * N + j]);
            c[i * N + j] = acc;
        }
}

/* Numeric operands: float tensors as double, integer ones as int64. */
typedef struct {
    double *f;
    int64_t *i;
} num_buf;

static int num_load(ik_ctx *c, const ir_tensor *t, int fl, num_buf *b)
{
    b->f = NULL;
    b->i = NULL;
    if (fl)
        b->f = ik_load_f64(c, t);
    else
        b->i = ik_load_i64(c, t);
    return b->f || b->i ? VITC_OK : c->d->status;
}

static int num_alloc(ik_ctx *c, int64_t n, int fl, num_buf *b)
{
    b->f = NULL;
    b->i = NULL;
    if (fl)
        b->f = calloc((size_t)(n ? n : 1), sizeof *b->f);
    else
        b->i = calloc((size_t)(n ? n : 1), sizeof *b->i);
    return b->f || b->i ? VITC_OK : ik_fail(c, VITC_INTERNAL, "out of memory");
}

static void num_free(num_buf *b)
{
    free(b->f);
    free(b->i);
}

static int numeric_dtype(ik_ctx *c, const ir_tensor *t)
{
    if (t->dtype == IR_BOOL)
        return ik_fail(c, VITC_BAD_INPUT, "%s does not take bool tensors", ir_op_name(c->n->op));
    return VITC_OK;
}

/* MatMul with numpy semantics: 1-D operands are promoted and the added
 * dimension removed again; batch dimensions broadcast. */
int ik_matmul(ik_ctx *c)
{
    int st = ik_same_dtype(c, 2, c->in);
    if (st || (st = numeric_dtype(c, c->in[0])))
        return st;
    return ik_matmul_of(c, c->in[0], c->in[1], &c->out[0]);
}

int ik_matmul_of(ik_ctx *c, const ir_tensor *A, const ir_tensor *B, ir_tensor *res)
{
    int st;
    if (A->rank < 1 || B->rank < 1)
        return ik_fail(c, VITC_BAD_INPUT, "MatMul does not take scalars");
    int64_t M = A->rank > 1 ? A->dims[A->rank - 2] : 1, K = A->dims[A->rank - 1];
    int64_t K2 = B->rank > 1 ? B->dims[B->rank - 2] : B->dims[0], N = B->rank > 1 ? B->dims[B->rank - 1] : 1;
    if (K != K2) {
        char a[160], b[160];
        return ik_fail(c, VITC_BAD_INPUT, "shapes %s and %s do not multiply (%lld vs %lld)",
                       ik_dims_str(A->rank, A->dims, a, sizeof a), ik_dims_str(B->rank, B->dims, b, sizeof b),
                       (long long)K, (long long)K2);
    }
    int ranks[2] = {A->rank > 2 ? A->rank - 2 : 0, B->rank > 2 ? B->rank - 2 : 0}, brank;
    int64_t bd[2][IR_MAX_RANK] = {{0}}, dims[IR_MAX_RANK], sa[IR_MAX_RANK], sb[IR_MAX_RANK];
    memcpy(bd[0], A->dims, (size_t)ranks[0] * sizeof(int64_t));
    memcpy(bd[1], B->dims, (size_t)ranks[1] * sizeof(int64_t));
    if ((st = ik_broadcast(c, 2, ranks, (const int64_t(*)[IR_MAX_RANK])bd, &brank, dims)))
        return st;
    int rank = brank;
    if (A->rank > 1)
        dims[rank++] = M;
    if (B->rank > 1)
        dims[rank++] = N;
    if ((st = ik_alloc(c, res, A->dtype, rank, dims)))
        return st;
    ik_bcast_strides(ranks[0], bd[0], brank, dims, sa);
    ik_bcast_strides(ranks[1], bd[1], brank, dims, sb);
    int64_t nbatch = 1;
    for (int i = 0; i < brank; i++)
        nbatch *= dims[i];
    int fl = ir_dtype_is_float(A->dtype);
    num_buf a, b, out;
    st = num_load(c, A, fl, &a);
    if (!st && (st = num_load(c, B, fl, &b)))
        num_free(&a);
    if (!st && (st = num_alloc(c, M * N, fl, &out))) {
        num_free(&a);
        num_free(&b);
    }
    if (st)
        return st;
    ik_iter it;
    ik_iter_init(&it, brank, dims);
    ik_iter_add(&it, sa, 0);
    ik_iter_add(&it, sb, 0);
    for (int64_t bi = 0; bi < nbatch; bi++, ik_iter_next(&it)) {
        int64_t oa = it.off[0] * M * K, ob = it.off[1] * K * N, oc = bi * M * N;
        if (fl) {
            mm_f64(a.f + oa, b.f + ob, out.f, M, K, N);
            for (int64_t i = 0; i < M * N; i++)
                ir_tensor_set(res, oc + i, out.f[i]);
        } else {
            mm_i64(a.i + oa, b.i + ob, out.i, M, K, N);
            for (int64_t i = 0; i < M * N; i++)
                ir_tensor_set_i64(res, oc + i, out.i[i]);
        }
    }
    num_free(&a);
    num_free(&b);
    num_free(&out);
    return VITC_OK;
}

/* Y = alpha * A' B' + beta * C, A' = transA ? A^T : A (likewise B'); C
 * broadcasts to [M, N]. */
int ik_gemm(ik_ctx *c)
{
    const ir_tensor *A = c->in[0], *B = c->in[1], *C = ik_in(c, 2);
    const ir_tensor *all[3] = {A, B, C};
    int st = ik_same_dtype(c, 3, all);
    if (st || (st = numeric_dtype(c, A)))
        return st;
    if (A->rank != 2 || B->rank != 2)
        return ik_fail(c, VITC_BAD_INPUT, "A and B must be 2-D, not rank %d and %d", A->rank, B->rank);
    int ta = ir_attr_int(c->n, IR_ATTR_TRANS_A, 0) != 0, tb = ir_attr_int(c->n, IR_ATTR_TRANS_B, 0) != 0;
    double alpha = ir_attr_float(c->n, IR_ATTR_ALPHA, 1.0f), beta = ir_attr_float(c->n, IR_ATTR_BETA, 1.0f);
    int64_t M = A->dims[ta], K = A->dims[!ta], K2 = B->dims[tb], N = B->dims[!tb];
    if (K != K2)
        return ik_fail(c, VITC_BAD_INPUT, "A' is [%lld,%lld] but B' is [%lld,%lld]", (long long)M, (long long)K,
                       (long long)K2, (long long)N);
    int64_t dims[2] = {M, N}, sc[2] = {0, 0};
    if (C) {
        int ok = C->rank <= 2;
        for (int i = 0; ok && i < C->rank; i++)
            ok = C->dims[i] == 1 || C->dims[i] == dims[2 - C->rank + i];
        if (!ok)
            return ik_fail(c, VITC_BAD_INPUT, "C of shape %s does not broadcast to [%lld,%lld]",
                           ik_dims_str(C->rank, C->dims, (char[160]){0}, 160), (long long)M, (long long)N);
        ik_bcast_strides(C->rank, C->dims, 2, dims, sc);
    }
    if ((st = ik_alloc(c, &c->out[0], A->dtype, 2, dims)))
        return st;
    int fl = ir_dtype_is_float(A->dtype);
    num_buf a = {0}, b = {0}, at = {0}, bt = {0}, out = {0}, ai = {0}, bi = {0}, oi = {0};
    /* Contiguous A' [M,K] and B' [K,N] (in double, and in int64 for integers). */
    st = num_load(c, A, 1, &a);
    if (!st)
        st = num_load(c, B, 1, &b);
    if (!st)
        st = num_alloc(c, M * K, 1, &at);
    if (!st)
        st = num_alloc(c, K * N, 1, &bt);
    if (!st)
        st = num_alloc(c, M * N, 1, &out);
    if (!st && !fl && !(st = num_load(c, A, 0, &ai)) && !(st = num_load(c, B, 0, &bi)))
        st = num_alloc(c, M * N, 0, &oi);
    if (!st) {
        for (int64_t i = 0; i < M; i++)
            for (int64_t k = 0; k < K; k++)
                at.f[i * K + k] = a.f[ta ? k * M + i : i * K + k];
        for (int64_t k = 0; k < K; k++)
            for (int64_t j = 0; j < N; j++)
                bt.f[k * N + j] = b.f[tb ? j * K + k : k * N + j];
        mm_f64(at.f, bt.f, out.f, M, K, N);
        if (!fl) {
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++) {
                    int64_t acc = 0;
                    for (int64_t k = 0; k < K; k++)
                        acc = wrap_mul_add(acc, ai.i[ta ? k * M + i : i * K + k], bi.i[tb ? j * K + k : k * N + j]);
                    oi.i[i * N + j] = acc;
                }
        }
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                int64_t o = i * N + j, co = i * sc[0] + j * sc[1];
                if (!fl && alpha == 1 && beta == 1) {
                    int64_t y = oi.i[o];
                    if (C)
                        y = wrap_mul_add(y, 1, ir_tensor_get_i64(C, co));
                    ir_tensor_set_i64(&c->out[0], o, y);
                    continue;
                }
                double y = alpha * out.f[o] + (C ? beta * ir_tensor_get(C, co) : 0);
                ir_tensor_set(&c->out[0], o, y);
            }
    }
    num_free(&a);
    num_free(&b);
    num_free(&at);
    num_free(&bt);
    num_free(&out);
    num_free(&ai);
    num_free(&bi);
    num_free(&oi);
    return st;
}

/* Reads an ints attribute of exactly n entries into v, or fills dflt. */
static int ints_attr(ik_ctx *c, ir_attr_id id, int n, int64_t dflt, int64_t *v)
{
    const ir_attr *a = ir_attr_get(c->n, id);
    if (!a) {
        for (int i = 0; i < n; i++)
            v[i] = dflt;
        return VITC_OK;
    }
    if (a->kind != IR_AT_INTS || a->n != n)
        return ik_fail(c, VITC_BAD_INPUT, "%s must list %d ints", ir_attr_name(id), n);
    memcpy(v, a->ints, (size_t)n * sizeof *v);
    return VITC_OK;
}

/* Conv's geometry over 1 or 2 spatial dimensions (a 1-D conv is a 2-D one of
 * height 1): strides, pads, dilations, group, auto_pad NOTSET / VALID /
 * SAME_*; X [N, C, ...] and W [M, C / group, ...], checked. */
int ik_conv_geom_of(ik_ctx *c, const ir_tensor *X, const ir_tensor *W, ik_conv_geom *g)
{
    int st;
    if ((X->rank != 3 && X->rank != 4) || W->rank != X->rank)
        return ik_fail(c, VITC_BAD_INPUT, "only 1-D and 2-D convolutions are supported (input rank %d, weight rank %d)",
                       X->rank, W->rank);
    int ns = X->rank - 2;
    int64_t group = ir_attr_int(c->n, IR_ATTR_GROUP, 1);
    int64_t C = X->dims[1], M = W->dims[0], Cg = W->dims[1], cin;
    if (group < 1 || ir_mul_ovf(Cg, group, &cin) || cin != C || M % group != 0)
        return ik_fail(c, VITC_BAD_INPUT, "group %lld does not fit %lld input channels, weight [%lld,%lld,...]",
                       (long long)group, (long long)C, (long long)M, (long long)Cg);
    memset(g, 0, sizeof *g);
    g->Nb = X->dims[0], g->C = C, g->M = M, g->Cg = Cg, g->group = group;
    int64_t *in = g->in, *k = g->k, *str = g->str, *dil = g->dil, *pb = g->pb, *pe = g->pe, *out = g->out;
    for (int d = 0; d < 2; d++)
        in[d] = k[d] = str[d] = dil[d] = out[d] = 1;
    int64_t ks[2], pads[4];
    if ((st = ints_attr(c, IR_ATTR_STRIDES, ns, 1, str + 2 - ns)) ||
        (st = ints_attr(c, IR_ATTR_DILATIONS, ns, 1, dil + 2 - ns)) || (st = ints_attr(c, IR_ATTR_PADS, 2 * ns, 0, pads)))
        return st;
    if (ir_attr_get(c->n, IR_ATTR_KERNEL_SHAPE)) {
        if ((st = ints_attr(c, IR_ATTR_KERNEL_SHAPE, ns, 0, ks)))
            return st;
        for (int i = 0; i < ns; i++)
            if (ks[i] != W->dims[2 + i])
                return ik_fail(c, VITC_BAD_INPUT, "kernel_shape does not match the weight's shape");
    }
    int pad = ir_auto_pad_of(c->n);
    if (pad < 0)
        return ik_fail(c, VITC_BAD_INPUT, "auto_pad must be NOTSET, VALID, SAME_UPPER or SAME_LOWER");
    for (int i = 0; i < ns; i++) {
        int d = 2 - ns + i;
        in[d] = X->dims[2 + i];
        k[d] = W->dims[2 + i];
        pb[d] = pads[i];
        pe[d] = pads[ns + i];
        const char *why = ir_conv_axis(in[d], k[d], str[d], dil[d], (ir_auto_pad)pad, &pb[d], &pe[d], &out[d]);
        if (why)
            return ik_fail(c, VITC_BAD_INPUT, "spatial dimension %d (input %lld, kernel %lld): %s", i,
                           (long long)in[d], (long long)k[d], why);
    }
    g->rank = X->rank;
    g->dims[0] = g->Nb, g->dims[1] = M, g->dims[2] = out[0], g->dims[3] = out[1];
    if (ns == 1)
        g->dims[2] = out[1];
    return VITC_OK;
}

void ik_conv_f64(const ik_conv_geom *g, const double *x, const double *w, const double *b, double *y)
{
    const int64_t *in = g->in, *k = g->k, *str = g->str, *dil = g->dil, *pb = g->pb, *out = g->out;
    int64_t mg = g->M / g->group, o = 0, C = g->C, Cg = g->Cg;
    for (int64_t n = 0; n < g->Nb; n++)
        for (int64_t m = 0; m < g->M; m++) {
            int64_t c0 = (m / mg) * Cg;
            for (int64_t oh = 0; oh < out[0]; oh++)
                for (int64_t ow = 0; ow < out[1]; ow++, o++) {
                    double acc = b ? b[m] : 0;
                    for (int64_t ci = 0; ci < Cg; ci++)
                        for (int64_t kh = 0; kh < k[0]; kh++) {
                            int64_t ih = oh * str[0] - pb[0] + kh * dil[0];
                            if (ih < 0 || ih >= in[0])
                                continue;
                            const double *xr = x + ((n * C + c0 + ci) * in[0] + ih) * in[1];
                            const double *wr = w + ((m * Cg + ci) * k[0] + kh) * k[1];
                            for (int64_t kw = 0; kw < k[1]; kw++) {
                                int64_t iw = ow * str[1] - pb[1] + kw * dil[1];
                                if (iw >= 0 && iw < in[1])
                                    acc += xr[iw] * wr[kw];
                            }
                        }
                    y[o] = acc;
                }
        }
}

int ik_conv(ik_ctx *c)
{
    const ir_tensor *X = c->in[0], *W = c->in[1], *Bias = ik_in(c, 2);
    const ir_tensor *all[3] = {X, W, Bias};
    int st = ik_same_dtype(c, 3, all);
    if (st)
        return st;
    if (!ir_dtype_is_float(X->dtype))
        return ik_fail(c, VITC_BAD_INPUT, "Conv takes float tensors, not %s", ir_dtype_name(X->dtype));
    ik_conv_geom g;
    if ((st = ik_conv_geom_of(c, X, W, &g)))
        return st;
    if (Bias && (Bias->rank != 1 || Bias->dims[0] != g.M))
        return ik_fail(c, VITC_BAD_INPUT, "the bias must be [%lld]", (long long)g.M);
    if ((st = ik_alloc(c, &c->out[0], X->dtype, g.rank, g.dims)))
        return st;
    int64_t ny = ir_tensor_numel(&c->out[0]);
    double *x = ik_load_f64(c, X), *w = x ? ik_load_f64(c, W) : NULL, *b = w && Bias ? ik_load_f64(c, Bias) : NULL;
    double *y = w && (b || !Bias) ? malloc((size_t)(ny ? ny : 1) * sizeof *y) : NULL;
    if (!y) {
        free(x);
        free(w);
        free(b);
        return w && (b || !Bias) ? ik_fail(c, VITC_INTERNAL, "out of memory") : c->d->status;
    }
    ik_conv_f64(&g, x, w, b, y);
    for (int64_t i = 0; i < ny; i++)
        ir_tensor_set(&c->out[0], i, y[i]);
    free(x);
    free(w);
    free(b);
    free(y);
    return VITC_OK;
}

/* ReduceMean / ReduceSum / ReduceMax / ReduceMin: axes from input 1 when present, else the
 * axes attribute; none means all (or nothing, with noop_with_empty_axes). */
int ik_reduce(ik_ctx *c)
{
    const ir_tensor *X = c->in[0];
    ir_op op = c->n->op;
    int st = numeric_dtype(c, X), n = 0, r = X->rank;
    if (st)
        return st;
    int64_t axes[IR_MAX_RANK];
    if (ik_in(c, 1)) {
        if ((st = ik_int_list(c, ik_in(c, 1), "axes", axes, IR_MAX_RANK, &n)))
            return st;
    } else {
        const ir_attr *a = ir_attr_get(c->n, IR_ATTR_AXES);
        if (a && (a->kind != IR_AT_INTS || a->n > IR_MAX_RANK))
            return ik_fail(c, VITC_BAD_INPUT, "the axes attribute must list at most %d ints", IR_MAX_RANK);
        if (a) {
            n = a->n;
            memcpy(axes, a->ints, (size_t)n * sizeof *axes);
        }
    }
    if (n == 0 && ir_attr_int(c->n, IR_ATTR_NOOP_WITH_EMPTY_AXES, 0))
        return ik_copy(c, &c->out[0], X);
    int red[IR_MAX_RANK] = {0};
    for (int i = 0; i < n; i++) {
        int a;
        if ((st = ik_axis(c, axes[i], r, 0, &a)))
            return st;
        red[a] = 1;
    }
    int64_t kd[IR_MAX_RANK], dims[IR_MAX_RANK], count = 1;
    int rank = 0, keep = ir_attr_int(c->n, IR_ATTR_KEEPDIMS, 1) != 0;
    for (int i = 0; i < r; i++) {
        int reduced = n == 0 || red[i];
        kd[i] = reduced ? 1 : X->dims[i];
        if (reduced)
            count *= X->dims[i];
        if (!reduced || keep)
            dims[rank++] = kd[i];
    }
    if ((st = ik_alloc(c, &c->out[0], X->dtype, rank, dims)))
        return st;
    /* Scatter: every input element adds into its output slot. */
    int64_t so[IR_MAX_RANK], on = ir_tensor_numel(&c->out[0]), xn = ir_tensor_numel(X);
    ik_bcast_strides(r, kd, r, X->dims, so);
    int fl = ir_dtype_is_float(X->dtype), uns = X->dtype == IR_U64;
    num_buf acc;
    if ((st = num_alloc(c, on, fl, &acc)))
        return st;
    int ext = op == IR_OP_REDUCE_MAX ? 1 : op == IR_OP_REDUCE_MIN ? -1 : 0; /* an extreme: the max or the min */
    for (int64_t i = 0; i < on && ext; i++) {
        if (fl)
            acc.f[i] = ext * -INFINITY;
        else
            acc.i[i] = ext > 0 ? (uns ? 0 : INT64_MIN) : (uns ? -1 : INT64_MAX);
    }
    ik_iter it;
    ik_iter_init(&it, r, X->dims);
    ik_iter_add(&it, so, 0);
    for (int64_t i = 0; i < xn; i++, ik_iter_next(&it)) {
        int64_t o = it.off[0];
        if (fl) {
            double v = ir_tensor_get(X, i);
            if (!ext)
                acc.f[o] += v;
            else if (isnan(v) || (ext > 0 ? v > acc.f[o] : v < acc.f[o]))
                acc.f[o] = isnan(acc.f[o]) ? acc.f[o] : v;
        } else {
            int64_t v = ir_tensor_get_i64(X, i);
            int cmp = uns ? ((uint64_t)v > (uint64_t)acc.i[o]) - ((uint64_t)v < (uint64_t)acc.i[o])
                          : (v > acc.i[o]) - (v < acc.i[o]);
            if (!ext)
                acc.i[o] = wrap_mul_add(acc.i[o], v, 1);
            else if (cmp == ext)
                acc.i[o] = v;
        }
    }
    for (int64_t i = 0; i < on; i++) {
        if (fl)
            ir_tensor_set(&c->out[0], i, op == IR_OP_REDUCE_MEAN ? acc.f[i] / (double)count : acc.f[i]);
        else
            ir_tensor_set_i64(&c->out[0], i, op == IR_OP_REDUCE_MEAN && count ? acc.i[i] / count : acc.i[i]);
    }
    num_free(&acc);
    return VITC_OK;
}

static int float_only(ik_ctx *c, const ir_tensor *t)
{
    if (!ir_dtype_is_float(t->dtype))
        return ik_fail(c, VITC_BAD_INPUT, "%s takes float tensors, not %s", ir_op_name(c->n->op),
                       ir_dtype_name(t->dtype));
    return VITC_OK;
}

/* Softmax along one axis (opset 13 semantics; default -1). */
int ik_softmax(ik_ctx *c)
{
    const ir_tensor *X = c->in[0];
    int axis, st = float_only(c, X);
    if (st || (st = ik_axis(c, ir_attr_int(c->n, IR_ATTR_AXIS, -1), X->rank ? X->rank : 1, 0, &axis)) ||
        (st = ik_alloc(c, &c->out[0], X->dtype, X->rank, X->dims)))
        return st;
    int64_t outer = 1, len = X->rank ? X->dims[axis] : 1, inner = 1;
    for (int i = 0; i < X->rank; i++) {
        if (i < axis)
            outer *= X->dims[i];
        else if (i > axis)
            inner *= X->dims[i];
    }
    for (int64_t o = 0; o < outer; o++)
        for (int64_t in = 0; in < inner; in++) {
            int64_t base = o * len * inner + in;
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j < len; j++) {
                double v = ir_tensor_get(X, base + j * inner);
                mx = v > mx || isnan(v) ? v : mx;
            }
            for (int64_t j = 0; j < len; j++)
                sum += exp(ir_tensor_get(X, base + j * inner) - mx);
            for (int64_t j = 0; j < len; j++)
                ir_tensor_set(&c->out[0], base + j * inner, exp(ir_tensor_get(X, base + j * inner) - mx) / sum);
        }
    return VITC_OK;
}

/* Expands t (broadcastable to the shape (rank, dims)) into n doubles. */
static double *expand_f64(ik_ctx *c, const ir_tensor *t, int rank, const int64_t *dims, int64_t n, const char *what)
{
    int ok = t->rank <= rank;
    for (int i = 0; ok && i < t->rank; i++)
        ok = t->dims[i] == 1 || t->dims[i] == dims[rank - t->rank + i];
    if (!ok) {
        char a[160], b[160];
        ik_fail(c, VITC_BAD_INPUT, "%s of shape %s does not broadcast to %s", what,
                ik_dims_str(t->rank, t->dims, a, sizeof a), ik_dims_str(rank, dims, b, sizeof b));
        return NULL;
    }
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    if (!v) {
        ik_fail(c, VITC_INTERNAL, "out of memory");
        return NULL;
    }
    int64_t s[IR_MAX_RANK];
    ik_bcast_strides(t->rank, t->dims, rank, dims, s);
    ik_iter it;
    ik_iter_init(&it, rank, dims);
    ik_iter_add(&it, s, 0);
    for (int64_t i = 0; i < n; i++, ik_iter_next(&it))
        v[i] = ir_tensor_get(t, it.off[0]);
    return v;
}

/* LayerNormalization over the axes [axis, rank): Y, and optionally Mean and
 * InvStdDev (shape dims[:axis] + 1s, dtype from stash_type); RMSNormalization
 * the same with a mean of 0 (and no bias). */
int ik_layernorm(ik_ctx *c)
{
    const ir_tensor *X = c->in[IR_NORM_X], *S = c->in[IR_NORM_SCALE], *B = ik_in(c, IR_NORM_BIAS);
    ir_norm v;
    int axis, st = float_only(c, X);
    if (!st)
        st = ir_norm_get(c->n, &v, c->d);
    if (st || (st = ik_axis(c, v.axis, X->rank, 0, &axis)))
        return st;
    double eps = v.eps;
    ir_dtype sdt = v.stash;
    int64_t outer = 1, inner = 1, sdims[IR_MAX_RANK];
    for (int i = 0; i < X->rank; i++) {
        if (i < axis)
            outer *= X->dims[i];
        else
            inner *= X->dims[i];
        sdims[i] = i < axis ? X->dims[i] : 1;
    }
    int nr = X->rank - axis;
    const int64_t *nd = X->dims + axis;
    double *sc = expand_f64(c, S, nr, nd, inner, "Scale"), *bi = NULL;
    if (!sc || (B && !(bi = expand_f64(c, B, nr, nd, inner, "B")))) {
        free(sc);
        return c->d->status;
    }
    st = ik_alloc(c, &c->out[0], X->dtype, X->rank, X->dims);
    for (int k = 1; k < 3 && k < c->n->noutputs && !st; k++)
        st = ik_alloc(c, &c->out[k], sdt, X->rank, sdims);
    for (int64_t o = 0; o < outer && !st; o++) {
        int64_t base = o * inner;
        double mean = 0, var = 0;
        for (int64_t j = 0; v.centered && j < inner; j++)
            mean += ir_tensor_get(X, base + j);
        mean /= (double)inner;
        for (int64_t j = 0; j < inner; j++) {
            double dv = ir_tensor_get(X, base + j) - mean;
            var += dv * dv;
        }
        var /= (double)inner;
        double inv = 1 / sqrt(var + eps);
        for (int64_t j = 0; j < inner; j++) {
            double y = (ir_tensor_get(X, base + j) - mean) * inv * sc[j] + (bi ? bi[j] : 0);
            ir_tensor_set(&c->out[0], base + j, y);
        }
        if (c->n->noutputs > 1)
            ir_tensor_set(&c->out[1], o, mean);
        if (c->n->noutputs > 2)
            ir_tensor_set(&c->out[2], o, inv);
    }
    free(sc);
    free(bi);
    return st;
}

/* Inference-mode BatchNormalization over channel axis 1 of (N, C, ...):
 * y = (x - mean) / sqrt(var + epsilon) * scale + B. */
int ik_batchnorm(ik_ctx *c)
{
    const ir_tensor *X = c->in[0];
    int st = float_only(c, X);
    if (st)
        return st;
    if (ir_attr_int(c->n, IR_ATTR_TRAINING_MODE, 0))
        return ik_fail(c, VITC_BAD_INPUT, "training_mode=1 is not supported (inference only)");
    if (X->rank < 2)
        return ik_fail(c, VITC_BAD_INPUT, "the input must be (N, C, ...), not rank %d", X->rank);
    int64_t C = X->dims[1], inner = 1;
    for (int i = 2; i < X->rank; i++)
        inner *= X->dims[i];
    static const char *const names[] = {"", "scale", "B", "input_mean", "input_var"};
    double *p[5] = {NULL};
    for (int k = 1; k < 5 && !st; k++) {
        const ir_tensor *t = c->in[k];
        if (!ir_dtype_is_float(t->dtype) || ir_tensor_numel(t) != C || t->rank != 1)
            st = ik_fail(c, VITC_BAD_INPUT, "%s must be a float [%lld], not %s", names[k], (long long)C,
                         ik_type_str(t, (char[160]){0}, 160));
        else if (!(p[k] = ik_load_f64(c, t)))
            st = c->d->status;
    }
    double eps = ir_attr_float(c->n, IR_ATTR_EPSILON, 1e-5f);
    if (!st)
        st = ik_alloc(c, &c->out[0], X->dtype, X->rank, X->dims);
    int64_t nb = X->dims[0];
    for (int64_t n = 0; n < nb && !st; n++)
        for (int64_t ch = 0; ch < C; ch++) {
            double inv = 1 / sqrt(p[4][ch] + eps);
            for (int64_t j = 0; j < inner; j++) {
                int64_t i = (n * C + ch) * inner + j;
                ir_tensor_set(&c->out[0], i, (ir_tensor_get(X, i) - p[3][ch]) * inv * p[1][ch] + p[2][ch]);
            }
        }
    for (int k = 1; k < 5; k++)
        free(p[k]);
    return st;
}
