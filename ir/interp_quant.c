/* interp_quant.c: the interpreter's quantized ONNX ops, exactly as ONNX
 * defines them (its reference implementation, onnx/reference/ops, where the
 * text leaves a detail open):
 *
 *   QuantizeLinear     y = saturate(round(x / scale) + zero_point): the
 *                      quotient rounded to the type numpy divides in (f32
 *                      for f32 operands, the `precision` type when given),
 *                      then to the nearest integer, ties to even; saturated
 *                      to the output type's range (NaN to its minimum, as
 *                      ONNX Runtime and the reference give)
 *   DequantizeLinear   y = (x - zero_point) * scale, in f32 (the difference
 *                      is exact for 8- and 16-bit x), then the output type
 *   DynamicQuantizeLinear  u8 over [min(0, min x), max(0, max x)]: scale =
 *                      range / 255, zero point = round(clamp(-min / scale)),
 *                      in f32; an all-zero input (range 0) gets scale 1, as
 *                      in ONNX Runtime (the spec says nothing of it)
 *   MatMulInteger, ConvInteger   (A - a_zp) @ (B - b_zp), i32 (wrapping)
 *   QLinearMatMul, QLinearConv   the same (plus the i32 bias B), times the
 *                      f32 multiplier a_scale * b_scale / y_scale (per
 *                      column or output channel), rounded ties to even,
 *                      plus y_zero_point, saturated
 *
 * Scales and zero points are per tensor (one element), per axis (a 1-D
 * tensor along `axis`) or blocked (block_size: x's shape with that axis
 * divided into blocks) for Q/DQ; per row of A, per column of B or per output
 * channel for the contractions.  The integer sums are computed in double:
 * exact, since products of 8-bit operands summed over fewer than 2^37 terms
 * stay below 2^53. */
#include "ir/interp_impl.h"
#include "ir/opview.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The range of a quantized integer type. */
static void qrange(ir_dtype t, double *lo, double *hi)
{
    switch (t) {
    case IR_U8: *lo = 0, *hi = 255; return;
    case IR_I8: *lo = -128, *hi = 127; return;
    case IR_U16: *lo = 0, *hi = 65535; return;
    case IR_I16: *lo = -32768, *hi = 32767; return;
    default: *lo = -2147483648.0, *hi = 2147483647.0; return;
    }
}

/* round(v) + zp, ties to even, saturated to [lo, hi]; NaN gives lo. */
static double saturate_round(double v, double zp, double lo, double hi)
{
    if (isnan(v))
        return lo;
    double q = nearbyint(v) + zp;
    return q < lo ? lo : q > hi ? hi : q;
}

/* v rounded to the float type t (double: unchanged).  Rounding the double
 * quotient of two floats to f32, f16 or bf16 gives the correctly rounded
 * quotient in that type (double has more than twice the bits, plus two). */
static double round_to(double v, ir_dtype t)
{
    switch (t) {
    case IR_F32: return (float)v;
    case IR_F16: return ir_f16_to_f32(ir_f32_to_f16((float)v));
    case IR_BF16: return ir_bf16_to_f32(ir_f32_to_bf16((float)v));
    default: return v;
    }
}

/* Where the scale and zero point of element i of x lie: per tensor, per
 * axis, or blocked (the axis coordinate divided by the block size). */
typedef struct {
    int per_tensor, blocked;
    int64_t dim, inner, block, nblocks;
} qindex;

static int qindex_of(ik_ctx *c, const ir_tensor *x, const ir_tensor *scale, qindex *q)
{
    memset(q, 0, sizeof *q);
    int64_t block = ir_attr_int(c->n, IR_ATTR_BLOCK_SIZE, 0);
    if (block < 0)
        return ik_fail(c, VITC_BAD_INPUT, "block_size must not be negative (%lld)", (long long)block);
    if (ir_tensor_numel(scale) == 1 && scale->rank <= 1 && !block) {
        q->per_tensor = 1;
        return VITC_OK;
    }
    int axis, st = ik_axis(c, ir_attr_int(c->n, IR_ATTR_AXIS, 1), x->rank, 0, &axis);
    if (st)
        return st;
    q->dim = x->dims[axis];
    q->inner = 1;
    for (int i = axis + 1; i < x->rank; i++)
        q->inner *= x->dims[i];
    q->blocked = block != 0;
    q->block = block > 0 ? block : 1;
    q->nblocks = q->dim / q->block + (q->dim % q->block != 0);
    int ok = block ? scale->rank == x->rank : scale->rank == 1 && scale->dims[0] == q->dim;
    for (int i = 0; block && ok && i < x->rank; i++)
        ok = scale->dims[i] == (i == axis ? q->nblocks : x->dims[i]);
    if (!ok) {
        char a[160], b[160];
        return ik_fail(c, VITC_BAD_INPUT, "a scale of shape %s does not fit an input of shape %s along axis %d%s",
                       ik_dims_str(scale->rank, scale->dims, a, sizeof a), ik_dims_str(x->rank, x->dims, b, sizeof b),
                       axis, block ? " in blocks" : "");
    }
    return VITC_OK;
}

static int64_t qindex_at(const qindex *q, int64_t i)
{
    if (q->per_tensor)
        return 0;
    int64_t d = i / q->inner % q->dim;
    if (!q->blocked)
        return d;
    int64_t outer = i / (q->inner * q->dim);
    return (outer * q->nblocks + d / q->block) * q->inner + i % q->inner;
}

/* The zero point's elements agree with the scale's in count (shape inference
 * checked their shapes alike). */
static int zp_fits(ik_ctx *c, const ir_tensor *zp, const ir_tensor *scale)
{
    if (zp && ir_tensor_numel(zp) != ir_tensor_numel(scale))
        return ik_fail(c, VITC_BAD_INPUT, "the zero point has %lld elements and the scale %lld",
                       (long long)ir_tensor_numel(zp), (long long)ir_tensor_numel(scale));
    return VITC_OK;
}

/* The float type x / scale is computed in: numpy's promotion of the two
 * (i32 / f32 is f64), or the precision attribute's type. */
static ir_dtype quotient_type(const ik_ctx *c, ir_dtype x, ir_dtype s)
{
    int64_t p = ir_attr_int(c->n, IR_ATTR_PRECISION, 0);
    if (p > 0 && p < 1000 && ir_dtype_from_onnx((int)p) >= 0)
        return (ir_dtype)ir_dtype_from_onnx((int)p);
    if (x == IR_I32 || x == IR_F64 || s == IR_F64)
        return IR_F64;
    return x == s ? x : IR_F32;
}

int ik_quantize(ik_ctx *c)
{
    const ir_tensor *x = c->in[0], *scale = c->in[1], *zp = ik_in(c, 2);
    ir_dtype out = IR_U8;
    int64_t od = ir_attr_int(c->n, IR_ATTR_OUTPUT_DTYPE, 0);
    if (zp)
        out = zp->dtype;
    else if (od > 0 && od < 1000 && ir_dtype_from_onnx((int)od) >= 0)
        out = (ir_dtype)ir_dtype_from_onnx((int)od);
    if (out != IR_U8 && out != IR_I8 && out != IR_U16 && out != IR_I16)
        return ik_fail(c, VITC_BAD_INPUT, "cannot quantize to %s", ir_dtype_name(out));
    qindex q;
    int st = qindex_of(c, x, scale, &q);
    if (st || (st = zp_fits(c, zp, scale)) || (st = ik_alloc(c, &c->out[0], out, x->rank, x->dims)))
        return st;
    ir_dtype qt = quotient_type(c, x->dtype, scale->dtype);
    double lo, hi;
    qrange(out, &lo, &hi);
    int64_t n = ir_tensor_numel(x);
    for (int64_t i = 0; i < n; i++) {
        int64_t k = qindex_at(&q, i);
        double xv = round_to(ir_tensor_get(x, i), qt), s = round_to(ir_tensor_get(scale, k), qt);
        double z = zp ? (double)ir_tensor_get_i64(zp, k) : 0;
        ir_tensor_set_i64(&c->out[0], i, (int64_t)saturate_round(round_to(xv / s, qt), z, lo, hi));
    }
    return VITC_OK;
}

int ik_dequantize(ik_ctx *c)
{
    const ir_tensor *x = c->in[0], *scale = c->in[1], *zp = ik_in(c, 2);
    ir_dtype out = scale->dtype;
    int64_t od = ir_attr_int(c->n, IR_ATTR_OUTPUT_DTYPE, 0);
    if (od > 0 && od < 1000 && ir_dtype_from_onnx((int)od) >= 0)
        out = (ir_dtype)ir_dtype_from_onnx((int)od);
    if (zp && zp->dtype != x->dtype)
        return ik_fail(c, VITC_BAD_INPUT, "the zero point is %s but the input is %s", ir_dtype_name(zp->dtype),
                       ir_dtype_name(x->dtype));
    qindex q;
    int st = qindex_of(c, x, scale, &q);
    if (st || (st = zp_fits(c, zp, scale)) || (st = ik_alloc(c, &c->out[0], out, x->rank, x->dims)))
        return st;
    int64_t n = ir_tensor_numel(x);
    for (int64_t i = 0; i < n; i++) {
        int64_t k = qindex_at(&q, i);
        float dx = (float)ir_tensor_get_i64(x, i) - (float)(zp ? ir_tensor_get_i64(zp, k) : 0);
        ir_tensor_set(&c->out[0], i, (float)((double)dx * ir_tensor_get(scale, k)));
    }
    return VITC_OK;
}

/* DynamicQuantizeLinear's u8 scale and zero point for n elements of x from
 * element `first` on, every `stride`-th one; the range is widened to hold 0. */
static void dynq_params(const ir_tensor *x, int64_t first, int64_t n, float *scale, float *zp)
{
    float lo = 0, hi = 0;
    for (int64_t i = 0; i < n; i++) {
        float v = (float)ir_tensor_get(x, first + i);
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
    }
    *scale = hi == lo ? 1.0f : (hi - lo) / 255.0f;
    float zp0 = 0.0f - lo / *scale;
    *zp = nearbyintf(zp0 < 0 ? 0 : zp0 > 255 ? 255 : zp0);
}

int ik_dynamic_quantize(ik_ctx *c)
{
    const ir_tensor *x = c->in[0];
    if (x->dtype != IR_F32)
        return ik_fail(c, VITC_BAD_INPUT, "DynamicQuantizeLinear takes f32, not %s", ir_dtype_name(x->dtype));
    int64_t n = ir_tensor_numel(x);
    float scale, zp;
    dynq_params(x, 0, n, &scale, &zp);
    int st = ik_alloc(c, &c->out[0], IR_U8, x->rank, x->dims);
    if (!st)
        st = ik_alloc(c, &c->out[1], IR_F32, 0, NULL);
    if (!st)
        st = ik_alloc(c, &c->out[2], IR_U8, 0, NULL);
    if (st)
        return st;
    for (int64_t i = 0; i < n; i++)
        ir_tensor_set_i64(&c->out[0], i, (int64_t)saturate_round((float)(ir_tensor_get(x, i) / scale), zp, 0, 255));
    ir_tensor_set(&c->out[1], 0, scale);
    ir_tensor_set_i64(&c->out[2], 0, (int64_t)zp);
    return VITC_OK;
}

int ik_dynamic_fake_quant(ik_ctx *c)
{
    const ir_tensor *x = c->in[0];
    if (x->dtype != IR_F32)
        return ik_fail(c, VITC_BAD_INPUT, "DynamicFakeQuant takes f32, not %s", ir_dtype_name(x->dtype));
    int64_t n = ir_tensor_numel(x);
    float scale, zp;
    dynq_params(x, 0, n, &scale, &zp);
    int st = ik_alloc(c, &c->out[0], IR_F32, x->rank, x->dims);
    for (int64_t i = 0; !st && i < n; i++) {
        float q = (float)saturate_round((float)(ir_tensor_get(x, i) / scale), zp, 0, 255);
        ir_tensor_set(&c->out[0], i, (q - zp) * scale);
    }
    return st;
}

/* QuantLookup (ops.def): the entry of x's FakeQuant code. */
int ik_quant_lookup(ik_ctx *c)
{
    const ir_tensor *x = c->in[0], *s = c->in[1], *z = c->in[2], *t = c->in[3];
    float fq[5] = {1, 0, 0, ir_attr_float(c->n, IR_ATTR_QMIN, 0), ir_attr_float(c->n, IR_ATTR_QMAX, 255)};
    if (x->dtype != IR_F32 || s->dtype != IR_F32 || z->dtype != IR_F32 || t->dtype != IR_F32 ||
        ir_tensor_numel(s) != 1 || ir_tensor_numel(z) != 1)
        return ik_fail(c, VITC_BAD_INPUT, "QuantLookup takes an f32 x, one f32 scale and zero point and an f32 table");
    fq[1] = (float)ir_tensor_get(s, 0), fq[2] = (float)ir_tensor_get(z, 0);
    if (!(fq[1] > 0) || !isfinite(fq[1]) || fq[3] != floorf(fq[3]) || !(fq[4] >= fq[3]) ||
        (double)fq[4] - fq[3] + 1 != (double)ir_tensor_numel(t))
        return ik_fail(c, VITC_BAD_INPUT, "QuantLookup's scale %g, qmin %g, qmax %g and table of %lld do not fit",
                       (double)fq[1], (double)fq[3], (double)fq[4], (long long)ir_tensor_numel(t));
    int64_t n = ir_tensor_numel(x);
    int st = ik_alloc(c, &c->out[0], IR_F32, x->rank, x->dims);
    for (int64_t i = 0; !st && i < n; i++)
        ir_tensor_set(&c->out[0], i, ir_tensor_get(t, (int64_t)(ir_fake_quant_code(fq, ir_tensor_get(x, i)) - fq[3])));
    return st;
}

/* LinearInt8 (ops.def) as the CPU kernels compute it: x quantized to u8 as
 * a_quant says, the sums of (qa - za) * W exact, each scaled in f32 by
 * sa * w_scale[n] (one rounding), the bias added with one more (a fused
 * multiply-add), then the activation and the residual. */
int ik_linear_int8(ik_ctx *c)
{
    ir_linear v;
    if (ir_linear_get(c->n, &v, c->d))
        return VITC_BAD_INPUT;
    const ir_tensor *X = c->in[IR_LINEAR_X], *W = c->in[IR_LINEAR_W], *S = c->in[IR_LINEAR_W_SCALE];
    const ir_tensor *Bias = ik_in(c, IR_LINEAR_BIAS), *R = ik_in(c, IR_LINEAR_RESIDUAL);
    if (X->dtype != IR_F32 || W->dtype != IR_I8 || S->dtype != IR_F32 || (Bias && Bias->dtype != IR_F32) ||
        (R && R->dtype != IR_F32))
        return ik_fail(c, VITC_BAD_INPUT, "LinearInt8 takes an f32 x, bias and residual, an i8 W and f32 scales");
    if (X->rank < 1 || W->rank != 2 || W->dims[0] != X->dims[X->rank - 1] || ir_tensor_numel(S) != W->dims[1] ||
        (Bias && ir_tensor_numel(Bias) != W->dims[1]))
        return ik_fail(c, VITC_BAD_INPUT, "LinearInt8's x, W [K, N], scales [N] and bias [N] do not fit");
    int64_t K = W->dims[0], N = W->dims[1], M = 1, dims[IR_MAX_RANK], rs[IR_MAX_RANK] = {0};
    for (int i = 0; i < X->rank - 1; i++)
        M *= X->dims[i], dims[i] = X->dims[i];
    dims[X->rank - 1] = N;
    if (R) {
        int ok = R->rank <= X->rank;
        for (int i = 0; ok && i < R->rank; i++)
            ok = R->dims[i] == 1 || R->dims[i] == dims[X->rank - R->rank + i];
        if (!ok)
            return ik_fail(c, VITC_BAD_INPUT, "LinearInt8's residual does not broadcast to its output");
        ik_bcast_strides(R->rank, R->dims, X->rank, dims, rs);
    }
    int st = ik_alloc(c, &c->out[0], IR_F32, X->rank, dims);
    if (st)
        return st;
    double *qa = malloc((size_t)(K ? K : 1) * sizeof *qa);
    if (!qa)
        return ik_fail(c, VITC_INTERNAL, "out of memory");
    float sa = v.a_scale, za = (float)v.a_zero;
    int pts = ir_fake_quant_any(v.fq, 2);
    if (v.aq == IR_AQ_TENSOR)
        dynq_params(X, 0, M * K, &sa, &za);
    ik_iter it;
    ik_iter_init(&it, X->rank, dims);
    ik_iter_add(&it, rs, 0);
    for (int64_t m = 0; m < M; m++) {
        if (v.aq == IR_AQ_ROW)
            dynq_params(X, m * K, K, &sa, &za);
        for (int64_t k = 0; k < K; k++)
            qa[k] = saturate_round((float)(ir_tensor_get(X, m * K + k) / sa), za, 0, 255) - za;
        for (int64_t j = 0; j < N; j++, ik_iter_next(&it)) {
            double t = 0; /* exact: |terms| < 2^15, fewer than 2^37 of them */
            for (int64_t k = 0; k < K; k++)
                t += qa[k] * ir_tensor_get(W, k * N + j);
            float s = sa * (float)ir_tensor_get(S, j);
            float y;
            if (pts) { /* the points between the ops the graph had: each result rounded to f32 */
                y = (float)ir_fake_quant_point(v.fq[0], (float)t * s);
                y = Bias ? y + (float)ir_tensor_get(Bias, j) : y;
                y = (float)ir_fake_quant_point(v.fq[1], y);
            } else {
                y = Bias ? fmaf((float)t, s, (float)ir_tensor_get(Bias, j)) : (float)t * s;
            }
            double out = ir_act_ref(y, v.act);
            if (R)
                out += ir_tensor_get(R, it.off[0]);
            ir_tensor_set(&c->out[0], m * N + j, out);
        }
    }
    free(qa);
    return VITC_OK;
}

/* ---- contractions ---- */

/* A zero point or scale of a contraction: one element, or per row / column
 * / output channel: read as the shape (rank, dims) that broadcasts it
 * against its operand. */
typedef struct {
    int rank;
    int64_t dims[IR_MAX_RANK];
} qshape;

/* p (may be NULL) as a shape broadcasting against an operand of rank r:
 * one element: a scalar; 1-D per row (rows): [M, 1]; 1-D per column: [N];
 * else its own shape. */
static qshape qshape_of(const ir_tensor *p, int rows)
{
    qshape s = {0, {0}};
    if (!p || ir_tensor_numel(p) == 1)
        return s;
    if (p->rank == 1 && rows) {
        s.rank = 2;
        s.dims[0] = p->dims[0];
        s.dims[1] = 1;
        return s;
    }
    s.rank = p->rank;
    memcpy(s.dims, p->dims, sizeof s.dims);
    return s;
}

/* x - zp as doubles into a fresh tensor of x's shape (exact integers); zp
 * read as shape zs broadcasting against x. */
static int centered(ik_ctx *c, const ir_tensor *x, const ir_tensor *zp, qshape zs, const char *what, ir_tensor *out)
{
    int st = ik_alloc(c, out, IR_F64, x->rank, x->dims);
    if (st)
        return st;
    int ranks[2] = {x->rank, zs.rank}, rank;
    int64_t d[2][IR_MAX_RANK], bd[IR_MAX_RANK], zstr[IR_MAX_RANK];
    memcpy(d[0], x->dims, sizeof d[0]);
    memcpy(d[1], zs.dims, sizeof d[1]);
    if (zp && zs.rank) {
        int same = ik_broadcast(c, 2, ranks, (const int64_t(*)[IR_MAX_RANK])d, &rank, bd) == VITC_OK && rank == x->rank;
        for (int i = 0; same && i < rank; i++)
            same = bd[i] == x->dims[i];
        if (!same) {
            ir_tensor_free(out);
            char a[160], b[160];
            return ik_fail(c, VITC_BAD_INPUT, "%s of shape %s does not fit an operand of shape %s", what,
                           ik_dims_str(zp->rank, zp->dims, a, sizeof a), ik_dims_str(x->rank, x->dims, b, sizeof b));
        }
        ik_bcast_strides(zs.rank, zs.dims, x->rank, x->dims, zstr);
    }
    ik_iter it;
    ik_iter_init(&it, x->rank, x->dims);
    if (zp && zs.rank)
        ik_iter_add(&it, zstr, 0);
    double *o = out->data;
    int64_t n = ir_tensor_numel(x);
    for (int64_t i = 0; i < n; i++, ik_iter_next(&it))
        o[i] = (double)ir_tensor_get_i64(x, i) - (zp ? (double)ir_tensor_get_i64(zp, zs.rank ? it.off[0] : 0) : 0);
    return VITC_OK;
}

static int check_8bit(ik_ctx *c, const ir_tensor *t, const char *what)
{
    if (t->dtype != IR_U8 && t->dtype != IR_I8)
        return ik_fail(c, VITC_BAD_INPUT, "%s is %s; it must be u8 or i8", what, ir_dtype_name(t->dtype));
    return VITC_OK;
}

/* The integer product (a - a_zp) @ (b - b_zp) into *prod (f64, exact). */
static int int_matmul(ik_ctx *c, const ir_tensor *a, const ir_tensor *azp, const ir_tensor *b, const ir_tensor *bzp,
                      ir_tensor *prod)
{
    ir_tensor ac = {0}, bc = {0};
    int st = check_8bit(c, a, "A");
    if (!st)
        st = check_8bit(c, b, "B");
    if (!st)
        st = centered(c, a, azp, qshape_of(azp, 1), "a_zero_point", &ac);
    if (!st)
        st = centered(c, b, bzp, qshape_of(bzp, 0), "b_zero_point", &bc);
    if (!st)
        st = ik_matmul_of(c, &ac, &bc, prod);
    ir_tensor_free(&ac);
    ir_tensor_free(&bc);
    return st;
}

/* A whole number held in a double, wrapped to int32 as two's complement. */
static int64_t wrap_i32(double v) { return (int64_t)(int32_t)(uint32_t)(uint64_t)(int64_t)v; }

int ik_matmul_integer(ik_ctx *c)
{
    ir_tensor prod = {0};
    int st = int_matmul(c, c->in[0], ik_in(c, 2), c->in[1], ik_in(c, 3), &prod);
    if (!st)
        st = ik_alloc(c, &c->out[0], IR_I32, prod.rank, prod.dims);
    for (int64_t i = 0; !st && i < ir_tensor_numel(&prod); i++)
        ir_tensor_set_i64(&c->out[0], i, wrap_i32(((const double *)prod.data)[i]));
    ir_tensor_free(&prod);
    return st;
}

/* A scale or zero point of a QLinear op: one element, else one per `count`
 * (rows, columns or output channels); element k of it (k in [0, count)). */
static int qparam_count(ik_ctx *c, const ir_tensor *p, int64_t count, const char *what)
{
    int64_t n = ir_tensor_numel(p);
    if (n == 1 || (p->rank == 1 && n == count))
        return VITC_OK;
    return ik_fail(c, VITC_BAD_INPUT, "%s has %lld elements; it must have 1 or %lld", what, (long long)n,
                   (long long)count);
}

static double qparam(const ir_tensor *p, int64_t k) { return ir_tensor_numel(p) == 1 ? ir_tensor_get(p, 0) : ir_tensor_get(p, k); }

/* The f32 multiplier a_scale * b_scale / y_scale, rounded as ONNX's
 * reference computes it (in f32, left to right). */
static double multiplier(double as, double bs, double ys) { return (float)((float)(as * bs) / ys); }

int ik_qlinear_matmul(ik_ctx *c)
{
    const ir_tensor *a = c->in[0], *as = c->in[1], *azp = c->in[2], *b = c->in[3], *bs = c->in[4], *bzp = c->in[5];
    const ir_tensor *ys = c->in[6], *yzp = c->in[7];
    if (a->rank < 1 || b->rank < 1)
        return ik_fail(c, VITC_BAD_INPUT, "QLinearMatMul does not take scalars");
    int64_t M = a->rank > 1 ? a->dims[a->rank - 2] : 1, N = b->rank > 1 ? b->dims[b->rank - 1] : 1;
    int st = check_8bit(c, yzp, "y_zero_point");
    if (st || (st = qparam_count(c, as, M, "a_scale")) || (st = qparam_count(c, azp, M, "a_zero_point")) ||
        (st = qparam_count(c, bs, N, "b_scale")) || (st = qparam_count(c, bzp, N, "b_zero_point")) ||
        (st = qparam_count(c, ys, 1, "y_scale")) || (st = qparam_count(c, yzp, 1, "y_zero_point")))
        return st;
    ir_tensor prod = {0};
    if ((st = int_matmul(c, a, azp, b, bzp, &prod)) || (st = ik_alloc(c, &c->out[0], yzp->dtype, prod.rank, prod.dims))) {
        ir_tensor_free(&prod);
        return st;
    }
    double lo, hi, z = (double)ir_tensor_get_i64(yzp, 0), y = ir_tensor_get(ys, 0);
    qrange(yzp->dtype, &lo, &hi);
    int64_t n = ir_tensor_numel(&prod);
    for (int64_t i = 0; i < n; i++) {
        int64_t col = i % N, row = i / N % M;
        double v = (double)wrap_i32(((const double *)prod.data)[i]) * multiplier(qparam(as, row), qparam(bs, col), y);
        ir_tensor_set_i64(&c->out[0], i, (int64_t)saturate_round(v, z, lo, hi));
    }
    ir_tensor_free(&prod);
    return VITC_OK;
}

/* The integer convolution (x - x_zp) * (w - w_zp) (+ bias) into y (f64,
 * exact), of geometry g. */
static int int_conv(ik_ctx *c, const ir_tensor *x, const ir_tensor *xzp, const ir_tensor *w, const ir_tensor *wzp,
                    const ir_tensor *bias, ik_conv_geom *g, double **y)
{
    *y = NULL;
    int st = check_8bit(c, x, "x");
    if (st || (st = check_8bit(c, w, "w")) || (st = ik_conv_geom_of(c, x, w, g)))
        return st;
    if (xzp && (st = qparam_count(c, xzp, 1, "x_zero_point")))
        return st;
    if (wzp && (st = qparam_count(c, wzp, g->M, "w_zero_point")))
        return st;
    if (bias && (bias->dtype != IR_I32 || bias->rank != 1 || bias->dims[0] != g->M))
        return ik_fail(c, VITC_BAD_INPUT, "the bias B must be i32[%lld]", (long long)g->M);
    /* w's zero point per output channel: its first axis */
    qshape ws = {0, {0}};
    if (wzp && ir_tensor_numel(wzp) > 1) {
        ws.rank = w->rank;
        ws.dims[0] = g->M;
        for (int i = 1; i < w->rank; i++)
            ws.dims[i] = 1;
    }
    ir_tensor xc = {0}, wc = {0};
    double *b = NULL;
    int64_t ny = g->dims[0] * g->dims[1] * g->dims[2] * (g->rank == 4 ? g->dims[3] : 1);
    if (!(st = centered(c, x, xzp, qshape_of(NULL, 0), "x_zero_point", &xc)) &&
        !(st = centered(c, w, wzp, ws, "w_zero_point", &wc)) && bias && !(b = ik_load_f64(c, bias)))
        st = c->d->status;
    if (!st && !(*y = malloc((size_t)(ny ? ny : 1) * sizeof **y)))
        st = ik_fail(c, VITC_INTERNAL, "out of memory");
    if (!st)
        ik_conv_f64(g, xc.data, wc.data, b, *y);
    ir_tensor_free(&xc);
    ir_tensor_free(&wc);
    free(b);
    return st;
}

int ik_conv_integer(ik_ctx *c)
{
    ik_conv_geom g;
    double *y;
    int st = int_conv(c, c->in[0], ik_in(c, 2), c->in[1], ik_in(c, 3), NULL, &g, &y);
    if (!st)
        st = ik_alloc(c, &c->out[0], IR_I32, g.rank, g.dims);
    for (int64_t i = 0; !st && i < ir_tensor_numel(&c->out[0]); i++)
        ir_tensor_set_i64(&c->out[0], i, wrap_i32(y[i]));
    free(y);
    return st;
}

int ik_qlinear_conv(ik_ctx *c)
{
    const ir_tensor *xs = c->in[1], *ws = c->in[4], *ys = c->in[6], *yzp = c->in[7];
    ik_conv_geom g;
    double *y;
    int st = check_8bit(c, yzp, "y_zero_point");
    if (st || (st = qparam_count(c, xs, 1, "x_scale")) || (st = qparam_count(c, ys, 1, "y_scale")) ||
        (st = qparam_count(c, yzp, 1, "y_zero_point")))
        return st;
    if ((st = int_conv(c, c->in[0], c->in[2], c->in[3], c->in[5], ik_in(c, 8), &g, &y)))
        return st;
    if (!(st = qparam_count(c, ws, g.M, "w_scale")))
        st = ik_alloc(c, &c->out[0], yzp->dtype, g.rank, g.dims);
    double lo, hi, z = (double)ir_tensor_get_i64(yzp, 0);
    qrange(yzp->dtype, &lo, &hi);
    int64_t n = st ? 0 : ir_tensor_numel(&c->out[0]), plane = n / (g.Nb * g.M > 0 ? g.Nb * g.M : 1);
    for (int64_t i = 0; i < n; i++) {
        int64_t m = i / plane % g.M;
        double v = (double)wrap_i32(y[i]) * multiplier(ir_tensor_get(xs, 0), qparam(ws, m), ir_tensor_get(ys, 0));
        ir_tensor_set_i64(&c->out[0], i, (int64_t)saturate_round(v, z, lo, hi));
    }
    free(y);
    return st;
}
