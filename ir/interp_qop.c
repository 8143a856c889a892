/* interp_qop.c: ONNX Runtime's QOperator ops (domain com.microsoft) in the
 * reference interpreter, as its contrib-op documentation defines them
 * (ContribOperators.md), rounded as its CPU kernels on x86-64 round (MLAS,
 * onnxruntime/core/mlas/lib: qladd, qlmul, quantize; contrib_ops/cpu/
 * quantization: qlinear_softmax, qlinear_concat, quant_gemm) where the text
 * leaves that open.  The quantized fixtures come from there, and
 * tests/quantized/test_qop_ops.py holds each op to ONNX Runtime's outputs on
 * hand-made models to the bit, every pair of 8-bit operands and tie-prone
 * scales included:
 *
 *   QLinearAdd   C = A_scale (A - A_zp) + B_scale (B - B_zp), requantized to
 *                C_scale and C_zp.  In f32 as the AVX2 kernel computes it:
 *                ratios ra = A_scale / C_scale, rb = B_scale / C_scale, a
 *                fixed part f = C_zp - fma(ra, A_zp, rb B_zp), then
 *                fma(A, ra, fma(B, rb, f)) (the contractions ONNX Runtime's
 *                build makes).  Where A is a single element (all of it, or
 *                along the innermost axis of the broadcast) A and B swap
 *                places: the kernel runs along the other operand.
 *   QLinearMul   (A - A_zp) (B - B_zp), exact in integers, to f32, times
 *                the f32 ratio A_scale * B_scale / C_scale, plus C_zp.
 *   QLinearSoftmax  a table of exponentials: for an input scale s and a row
 *                of D elements whose largest is m, e(x) = (float)exp((x - m +
 *                t) s), t = max(0, ln(FLT_MAX / D) - 5) / s (the f32 sum of
 *                the row stays finite), the row's sum S in f32 in order, and
 *                y = e(x) * floor(1 / y_scale) / S in f32, plus y_zp: the
 *                output scale taken as 1 / floor(1 / y_scale), as ONNX
 *                Runtime takes it; x's zero point cancels.  `axis` (-1) is
 *                the dimension reduced; with the attribute `opset` below 13,
 *                the dimensions from it on, as Softmax before opset 13.
 *   QLinearConcat  each input dequantized in f32 (X_scale * (x - X_zp)) and
 *                quantized to Y_scale and Y_zp (the f32 quotient), or copied
 *                where its scale and zero point are Y's.
 *   QGemm        A' B' of the centred integers (A' = A^T with transA, B' =
 *                B^T with transB) plus the i32 bias C, in i32 (wrapping),
 *                to f32, times the f32 scale (alpha * a_scale) * b_scale
 *                (b_scale one element or one per column) divided by
 *                y_scale where given; with y_zero_point requantized, else
 *                that f32 product is the output.
 *
 * Every requantization rounds to the nearest integer, ties to even, and
 * saturates to the output type (in QLinearAdd and QLinearMul a value beyond
 * int32 gives the type's minimum, as their kernels' conversion does). */
#include "ir/interp_impl.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The range of an 8-bit type; 0 for others. */
static int range8(ir_dtype t, int *lo, int *hi)
{
    if (t == IR_U8)
        return *lo = 0, *hi = 255, 1;
    if (t == IR_I8)
        return *lo = -128, *hi = 127, 1;
    return 0;
}

/* A whole number r (already rounded) saturated to [lo, hi]; NaN gives lo. */
static int saturate(float r, int lo, int hi) { return !(r >= (float)lo) ? lo : r > (float)hi ? hi : (int)r; }

/* v rounded to the nearest integer, ties to even, then saturated, as the
 * element-wise kernels convert (cvtps2dq, then packing with saturation): a
 * value outside int32 (or NaN) converts to INT32_MIN, hence lo. */
static int convert(float v, int lo, int hi)
{
    if (!(v > -2147483648.0f && v < 2147483648.0f))
        return lo;
    return saturate(nearbyintf(v), lo, hi);
}

/* Input i: one f32 element (a scale). */
static int scale_of(ik_ctx *c, int i, const char *what, float *s)
{
    const ir_tensor *t = ik_in(c, i);
    if (!t || t->dtype != IR_F32 || ir_tensor_numel(t) != 1)
        return ik_fail(c, VITC_BAD_INPUT, "%s must be one f32 element", what);
    *s = (float)ir_tensor_get(t, 0);
    return VITC_OK;
}

/* Input i: absent (0) or one element of type dt (a zero point). */
static int zero_of(ik_ctx *c, int i, ir_dtype dt, const char *what, int *z)
{
    const ir_tensor *t = ik_in(c, i);
    *z = 0;
    if (!t)
        return VITC_OK;
    if (t->dtype != dt || ir_tensor_numel(t) != 1)
        return ik_fail(c, VITC_BAD_INPUT, "%s must be one %s element", what, ir_dtype_name(dt));
    *z = (int)ir_tensor_get_i64(t, 0);
    return VITC_OK;
}

/* ---- QLinearAdd, QLinearMul ---- */

/* Which operand ONNX Runtime's broadcasting loop hands its kernel as a
 * single element (all of it, or one along the innermost axis that is not 1
 * for each run of elements): 1 A, 2 B, 0 neither. */
static int scalar_operand(const ir_tensor *a, const ir_tensor *b, int rank, const int64_t *dims)
{
    if (ir_tensor_numel(a) == 1)
        return 1;
    if (ir_tensor_numel(b) == 1)
        return 2;
    for (int i = rank - 1; i >= 0; i--) {
        if (dims[i] == 1)
            continue;
        int ia = i - (rank - a->rank), ib = i - (rank - b->rank);
        if (ia < 0 || a->dims[ia] == 1)
            return 1;
        if (ib < 0 || b->dims[ib] == 1)
            return 2;
        return 0;
    }
    return 0;
}

/* QLinearAdd's kernel on one element: x the operand that runs along the
 * innermost axis (scale sx, zero point zx), y the other. */
static float qadd(int x, float sx, int zx, int y, float sy, int zy, float sc, int zc)
{
    float rx = sx / sc, ry = sy / sc;
    float fixed = (float)zc - fmaf(rx, (float)zx, ry * (float)zy); /* as ONNX Runtime's build contracts it */
    return fmaf((float)x, rx, fmaf((float)y, ry, fixed));
}

int ik_qlinear_binary(ik_ctx *c)
{
    const ir_tensor *a = c->in[0], *b = c->in[3];
    int lo, hi, za, zb, zc, mul = c->n->op == IR_OP_QLINEAR_MUL;
    float sa, sb, sc;
    if (!range8(a->dtype, &lo, &hi) || b->dtype != a->dtype)
        return ik_fail(c, VITC_BAD_INPUT, "A and B must be both u8 or both i8, not %s and %s",
                       ir_dtype_name(a->dtype), ir_dtype_name(b->dtype));
    int st = scale_of(c, 1, "A_scale", &sa);
    if (st || (st = zero_of(c, 2, a->dtype, "A_zero_point", &za)) || (st = scale_of(c, 4, "B_scale", &sb)) ||
        (st = zero_of(c, 5, a->dtype, "B_zero_point", &zb)) || (st = scale_of(c, 6, "C_scale", &sc)) ||
        (st = zero_of(c, 7, a->dtype, "C_zero_point", &zc)))
        return st;
    const ir_tensor *ts[2] = {a, b};
    int rank;
    int64_t dims[IR_MAX_RANK], sta[IR_MAX_RANK], stb[IR_MAX_RANK];
    if ((st = ik_broadcast_tensors(c, 2, ts, &rank, dims)) || (st = ik_alloc(c, &c->out[0], a->dtype, rank, dims)))
        return st;
    ik_bcast_strides(a->rank, a->dims, rank, dims, sta);
    ik_bcast_strides(b->rank, b->dims, rank, dims, stb);
    ik_iter it;
    ik_iter_init(&it, rank, dims);
    ik_iter_add(&it, sta, 0);
    ik_iter_add(&it, stb, 0);
    int a_single = scalar_operand(a, b, rank, dims) == 1;
    float ratio = sa * sb / sc; /* QLinearMul's, left to right as the kernel */
    int64_t n = ir_tensor_numel(&c->out[0]);
    for (int64_t i = 0; i < n; i++, ik_iter_next(&it)) {
        int x = (int)ir_tensor_get_i64(a, it.off[0]), y = (int)ir_tensor_get_i64(b, it.off[1]);
        float v = mul ? (float)((x - za) * (y - zb)) * ratio + (float)zc
                : a_single ? qadd(y, sb, zb, x, sa, za, sc, zc)
                           : qadd(x, sa, za, y, sb, zb, sc, zc);
        ir_tensor_set_i64(&c->out[0], i, convert(v, lo, hi));
    }
    return VITC_OK;
}

/* ---- QLinearSoftmax ---- */

int ik_qlinear_softmax(ik_ctx *c)
{
    const ir_tensor *x = c->in[0];
    int lo, hi, z;
    float xs, ys;
    if (!range8(x->dtype, &lo, &hi))
        return ik_fail(c, VITC_BAD_INPUT, "X must be u8 or i8, not %s", ir_dtype_name(x->dtype));
    int st = scale_of(c, 1, "X_scale", &xs), axis;
    if (st || (st = scale_of(c, 3, "y_scale", &ys)) || (st = zero_of(c, 4, x->dtype, "y_zero_point", &z)) ||
        (st = ik_axis(c, ir_attr_int(c->n, IR_ATTR_AXIS, -1), x->rank, 0, &axis)))
        return st;
    if (!ir_attr_get(c->n, IR_ATTR_OPSET))
        return ik_fail(c, VITC_BAD_INPUT, "QLinearSoftmax needs its attribute opset");
    int coerced = ir_attr_int(c->n, IR_ATTR_OPSET, 13) < 13;
    int64_t outer = 1, D = 1, inner = 1;
    for (int i = 0; i < x->rank; i++) {
        int64_t d = x->dims[i];
        if (i < axis)
            outer *= d;
        else if (i == axis || coerced)
            D *= d;
        else
            inner *= d;
    }
    if ((st = ik_alloc(c, &c->out[0], x->dtype, x->rank, x->dims)) || D == 0)
        return st;
    float table[256];
    double t = log((double)(FLT_MAX / (float)D)) - 5;
    t = (t > 0 ? t : 0) / (double)xs;
    for (int i = 0; i < 256; i++)
        table[i] = (float)exp(((double)i - 255 + t) * (double)xs);
    float yq = floorf(1.0f / ys);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < inner; j++) {
            int64_t base = o * D * inner + j, m = INT64_MIN;
            for (int64_t k = 0; k < D; k++) {
                int64_t v = ir_tensor_get_i64(x, base + k * inner);
                m = v > m ? v : m;
            }
            float sum = 0;
            for (int64_t k = 0; k < D; k++)
                sum += table[ir_tensor_get_i64(x, base + k * inner) - m + 255];
            for (int64_t k = 0; k < D; k++) {
                float e = table[ir_tensor_get_i64(x, base + k * inner) - m + 255];
                ir_tensor_set_i64(&c->out[0], base + k * inner, saturate(nearbyintf(e * yq / sum) + (float)z, lo, hi));
            }
        }
    return VITC_OK;
}

/* ---- QLinearConcat ---- */

int ik_qlinear_concat(ik_ctx *c)
{
    const ir_tensor *x0 = c->in[2], *yz = c->in[1];
    int lo, hi, zy, axis, count = (c->nin - 2) / 3;
    float sy;
    if ((c->nin - 2) % 3 || count < 1)
        return ik_fail(c, VITC_BAD_INPUT, "QLinearConcat takes Y_scale, Y_zero_point, then X, X_scale and "
                                          "X_zero_point per input, not %d inputs", c->nin);
    if (!range8(yz->dtype, &lo, &hi))
        return ik_fail(c, VITC_BAD_INPUT, "Y_zero_point must be u8 or i8, not %s", ir_dtype_name(yz->dtype));
    int st = scale_of(c, 0, "Y_scale", &sy);
    if (st || (st = zero_of(c, 1, yz->dtype, "Y_zero_point", &zy)) ||
        (st = ik_axis(c, ir_attr_int(c->n, IR_ATTR_AXIS, 0), x0->rank, 0, &axis)))
        return st;
    int64_t dims[IR_MAX_RANK], outer = 1, inner = 1;
    memcpy(dims, x0->dims, sizeof dims);
    dims[axis] = 0;
    for (int t = 0; t < count; t++) {
        const ir_tensor *x = c->in[2 + 3 * t];
        int same = x->dtype == yz->dtype && x->rank == x0->rank;
        for (int i = 0; same && i < x->rank; i++)
            same = i == axis || x->dims[i] == x0->dims[i];
        if (!same) {
            char a[160], b[160];
            return ik_fail(c, VITC_BAD_INPUT, "input %d (%s) does not join input 0 (%s) along axis %d", t,
                           ik_type_str(x, a, sizeof a), ik_type_str(x0, b, sizeof b), axis);
        }
        dims[axis] += x->dims[axis];
    }
    for (int i = 0; i < x0->rank; i++)
        if (i < axis)
            outer *= x0->dims[i];
        else if (i > axis)
            inner *= x0->dims[i];
    if ((st = ik_alloc(c, &c->out[0], yz->dtype, x0->rank, dims)))
        return st;
    int64_t at = 0; /* where input t starts along the axis */
    for (int t = 0; t < count; t++) {
        const ir_tensor *x = c->in[2 + 3 * t];
        int zx, table[256];
        float sx;
        if ((st = scale_of(c, 3 + 3 * t, "X_scale", &sx)) ||
            (st = zero_of(c, 4 + 3 * t, yz->dtype, "X_zero_point", &zx)))
            return st;
        int copy = sx == sy && zx == zy;
        for (int v = lo; v <= hi; v++) /* dequantized, then quantized: rounded before the zero point is added */
            table[v - lo] = copy ? v : saturate(nearbyintf(sx * (float)(v - zx) / sy) + (float)zy, lo, hi);
        int64_t len = x->dims[axis] * inner;
        for (int64_t o = 0; o < outer; o++)
            for (int64_t k = 0; k < len; k++) {
                int64_t v = ir_tensor_get_i64(x, o * len + k);
                ir_tensor_set_i64(&c->out[0], (o * dims[axis] + at) * inner + k, table[v - lo]);
            }
        at += x->dims[axis];
    }
    return VITC_OK;
}

/* ---- QGemm ---- */

int ik_qgemm(ik_ctx *c)
{
    const ir_tensor *a = c->in[0], *b = c->in[3], *bs = c->in[4], *bz = ik_in(c, 5), *bias = ik_in(c, 6);
    const ir_tensor *yzt = ik_in(c, 8);
    int lo = 0, hi = 0, za, zy = 0, blo, bhi;
    float sa, sy = 1;
    if (!range8(a->dtype, &lo, &hi) || !range8(b->dtype, &blo, &bhi) || a->rank != 2 || b->rank != 2)
        return ik_fail(c, VITC_BAD_INPUT, "QGemm takes 2-D u8 or i8 A and B");
    int st = scale_of(c, 1, "a_scale", &sa);
    if (st || (st = zero_of(c, 2, a->dtype, "a_zero_point", &za)) ||
        (ik_in(c, 7) && (st = scale_of(c, 7, "y_scale", &sy))) ||
        (yzt && (st = zero_of(c, 8, a->dtype, "y_zero_point", &zy))))
        return st;
    int ta = ir_attr_int(c->n, IR_ATTR_TRANS_A, 0) != 0, tb = ir_attr_int(c->n, IR_ATTR_TRANS_B, 0) != 0;
    int64_t M = a->dims[ta], K = a->dims[1 - ta], N = b->dims[1 - tb];
    if (b->dims[tb] != K)
        return ik_fail(c, VITC_BAD_INPUT, "QGemm's inner dimensions differ: %lld and %lld", (long long)K,
                       (long long)b->dims[tb]);
    int64_t nbs = ir_tensor_numel(bs), nbz = bz ? ir_tensor_numel(bz) : 1;
    if (bs->dtype != IR_F32 || (nbs != 1 && nbs != N) || (bz && (bz->dtype != b->dtype || (nbz != 1 && nbz != N))))
        return ik_fail(c, VITC_BAD_INPUT, "b_scale (f32) and b_zero_point (B's type) must hold one element or %lld",
                       (long long)N);
    int64_t dims[2] = {M, N}, cs[2] = {0, 0};
    if (bias) {
        int ok = bias->dtype == IR_I32 && bias->rank <= 2;
        for (int i = 0; ok && i < bias->rank; i++)
            ok = bias->dims[i] == 1 || bias->dims[i] == dims[2 - bias->rank + i];
        if (!ok)
            return ik_fail(c, VITC_BAD_INPUT, "C must be i32 and broadcast to [%lld, %lld]", (long long)M,
                           (long long)N);
        ik_bcast_strides(bias->rank, bias->dims, 2, dims, cs);
    }
    if ((st = ik_alloc(c, &c->out[0], yzt ? a->dtype : IR_F32, 2, dims)))
        return st;
    float alpha = ir_attr_float(c->n, IR_ATTR_ALPHA, 1.0f);
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            int64_t acc = bias ? ir_tensor_get_i64(bias, m * cs[0] + n * cs[1]) : 0;
            int64_t zb = bz ? ir_tensor_get_i64(bz, nbz == 1 ? 0 : n) : 0;
            for (int64_t k = 0; k < K; k++)
                acc += (ir_tensor_get_i64(a, ta ? k * M + m : m * K + k) - za) *
                       (ir_tensor_get_i64(b, tb ? n * K + k : k * N + n) - zb);
            float scale = alpha * sa * (float)ir_tensor_get(bs, nbs == 1 ? 0 : n);
            if (ik_in(c, 7))
                scale /= sy;
            float v = (float)(int32_t)(uint32_t)(uint64_t)acc * scale;
            if (yzt)
                ir_tensor_set_i64(&c->out[0], m * N + n, saturate(nearbyintf(v) + (float)zy, lo, hi));
            else
                ir_tensor_set(&c->out[0], m * N + n, v);
        }
    return VITC_OK;
}
