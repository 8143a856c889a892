/* test_ops.c: every op as a row {op, attributes, input shapes, tolerance},
 * run through each backend against the reference interpreter.
 *
 *  - the interpreter: every row that has a formula is checked against it in
 *    double precision: element-wise rows give a scalar formula (numpy
 *    broadcasting done here), the norms, reductions, matrix products, Linear
 *    and Attention rows one over whole tensors, written here from the ops'
 *    definitions (ONNX's, and ir/opview.h's for the fused ops) without
 *    calling vitc.  The rows without one (they move elements by index, or
 *    are computed from shapes) are committed in interp_only with the reason;
 *  - the CPU backend: the rows it supports, one node each, compiled into one
 *    .so by the LLVM backend and run through the runtime at batch 1 and 3;
 *  - the CUDA emulation (built with CUDA): the same in fp32, the generated
 *    program compiled for the host against tests/cuda_emu.h.
 * A row a backend does not support (its `supports` says no) is skipped for
 * that backend only, with the reason; the counts are printed at the end.
 * Which rows each backend skips is committed (cpu_skips, cuda_skips), and so
 * is the count of rows with a formula (FORMULA_ROWS): a row refused that is
 * not listed fails, and so does a listed row that runs; likewise a row
 * without a formula that interp_only does not list, or a listed one with a
 * formula.
 * Adding an op is adding a row to `rows`. */
#include "testutil.h"

#include "codegen/backend.h"
#include "ir/interp.h"
#include "ir/opview.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the rows ---- */

/* An input of a row: a graph input ('x' floats in [-2, 2), 'n' the same with NaNs, 'p' floats in
 * [0.1, 2.1), 'b' bools, 'i' int64 in [-20, 20), 'u' u8), or a constant ('w' random
 * floats, 's' a float scalar, 'c' int64 values, 'j' random i8, 'z' a u8 scalar and 'y' an i8
 * scalar of vals[0], 'g' positive floats: scales). dims < 0: times the batch. */
typedef struct {
    char kind;
    int rank;
    int64_t dims[5];
    int n;             /* 'c': count of vals */
    int64_t vals[6];   /* 'c' */
    float f;           /* 's' */
} in_spec;

typedef struct {
    ir_attr_id id;
    char kind; /* 'i' int, 'f' float, 's' string, 'I' ints, 'F' floats */
    int64_t i;
    float f;
    const char *s;
    int n;
    int64_t ints[6];
    const float *floats;
} attr_spec;

/* A tensor in double, for the whole-tensor formulas: an operand (rank -1 where
 * it is omitted) or the output a formula allocates. */
typedef struct dten {
    int rank;
    int64_t dims[IR_MAX_RANK];
    double *v;
} dten;

typedef struct op_row {
    const char *name;
    ir_op op;
    ir_dtype dt; /* of the outputs */
    int nout;    /* 0: 1 */
    int nin;
    in_spec in[9];
    int nattrs;
    attr_spec at[5];
    double tol;                           /* 0: 1e-4 (max |out - ref| / max |ref|) */
    double (*ref)(const double *args);    /* element-wise: the formula in double, or NULL */
    void (*formula)(const struct op_row *w, const struct dten *in, struct dten *out); /* or this, or NULL */
} op_row;

#define NARGS(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t))
#define X(...) {'x', NARGS(__VA_ARGS__), {__VA_ARGS__}}
#define P(...) {'p', NARGS(__VA_ARGS__), {__VA_ARGS__}}
#define B(...) {'b', NARGS(__VA_ARGS__), {__VA_ARGS__}}
#define N(...) {'n', NARGS(__VA_ARGS__), {__VA_ARGS__}}
#define I(...) {'i', NARGS(__VA_ARGS__), {__VA_ARGS__}}
#define W(...) {'w', NARGS(__VA_ARGS__), {__VA_ARGS__}}
#define S(v) {'s', 0, {0}, 0, {0}, v}
#define C(...) {'c', 1, {NARGS(__VA_ARGS__)}, NARGS(__VA_ARGS__), {__VA_ARGS__}}
#define C0(v) {'c', 0, {0}, 1, {v}}
#define C2D(d0, d1, ...) {'c', 2, {d0, d1}, NARGS(__VA_ARGS__), {__VA_ARGS__}} /* int64 [d0, d1]: the values */
#define C3D(d0, d1, d2, ...) {'c', 3, {d0, d1, d2}, NARGS(__VA_ARGS__), {__VA_ARGS__}}
#define U(...) {'u', NARGS(__VA_ARGS__), {__VA_ARGS__}}
#define J(...) {'j', NARGS(__VA_ARGS__), {__VA_ARGS__}}
#define G(...) {'g', NARGS(__VA_ARGS__), {__VA_ARGS__}}
#define ZU(v) {'z', 0, {0}, 1, {v}}
#define ZI(v) {'y', 0, {0}, 1, {v}}
#define NONE {'-', 0, {0}} /* an omitted optional input */
#define AI(id, v) {IR_ATTR_##id, 'i', .i = v}
#define AF(id, v) {IR_ATTR_##id, 'f', .f = v}
#define AS(id, v) {IR_ATTR_##id, 's', .s = v}
#define AIS(id, ...) {IR_ATTR_##id, 'I', .n = NARGS(__VA_ARGS__), .ints = {__VA_ARGS__}}
#define AFS(id, arr) {IR_ATTR_##id, 'F', .n = (int)(sizeof(arr) / sizeof(arr)[0]), .floats = arr}
#define IN1(a) .nin = 1, .in = {a}
#define IN2(a, b) .nin = 2, .in = {a, b}
#define IN3(a, b, c) .nin = 3, .in = {a, b, c}
#define IN4(a, b, c, d) .nin = 4, .in = {a, b, c, d}
#define IN8(a, b, c, d, e, f, g_, h) .nin = 8, .in = {a, b, c, d, e, f, g_, h}
#define AT1(a) .nattrs = 1, .at = {a}
#define AT2(a, b) .nattrs = 2, .at = {a, b}
#define AT3(a, b, c) .nattrs = 3, .at = {a, b, c}
#define AT4(a, b, c, d) .nattrs = 4, .at = {a, b, c, d}
#define AT5(a, b, c, d, e) .nattrs = 5, .at = {a, b, c, d, e}

/* the scalar formulas, in double */
static double r_abs(const double *a) { return fabs(a[0]); }
static double r_add(const double *a) { return a[0] + a[1]; }
static double r_sub(const double *a) { return a[0] - a[1]; }
static double r_mul(const double *a) { return a[0] * a[1]; }
static double r_div(const double *a) { return a[0] / a[1]; }
static double r_and(const double *a) { return a[0] != 0 && a[1] != 0; }
static double r_or(const double *a) { return a[0] != 0 || a[1] != 0; }
static double r_not(const double *a) { return a[0] == 0; }
static double r_isnan(const double *a) { return isnan(a[0]); }
static double r_quick_gelu(const double *a) { return a[0] / (1 + exp(-1.702 * a[0])); }
static double r_silu(const double *a) { return a[0] / (1 + exp(-a[0])); }
static double r_swish_half(const double *a) { return a[0] / (1 + exp(-0.5 * a[0])); }
static double r_eq(const double *a) { return a[0] == a[1]; }
static double r_gt(const double *a) { return a[0] > a[1]; }
static double r_lt(const double *a) { return a[0] < a[1]; }
static double r_ge(const double *a) { return a[0] >= a[1]; }
static double r_le(const double *a) { return a[0] <= a[1]; }
static double r_neg(const double *a) { return -a[0]; }
static double r_exp(const double *a) { return exp(a[0]); }
static double r_log(const double *a) { return log(a[0]); }
static double r_erf(const double *a) { return erf(a[0]); }
static double r_sqrt(const double *a) { return sqrt(a[0]); }
static double r_tanh(const double *a) { return tanh(a[0]); }
static double r_cos(const double *a) { return cos(a[0]); }
static double r_sin(const double *a) { return sin(a[0]); }
static double r_sigmoid(const double *a) { return 1 / (1 + exp(-a[0])); }
static double r_relu(const double *a) { return a[0] > 0 ? a[0] : 0; }
static double r_hardsigmoid(const double *a) { return fmax(0, fmin(1, 0.3 * a[0] + 0.4)); }
static double r_recip(const double *a) { return 1 / a[0]; }
static double r_pow(const double *a) { return pow(a[0], a[1]); }
static double r_fmod(const double *a) { return fmod(a[0], a[1]); }
static double r_max3(const double *a) { return fmax(fmax(a[0], a[1]), a[2]); }
static double r_min3(const double *a) { return fmin(fmin(a[0], a[1]), a[2]); }
static double r_max2(const double *a) { return fmax(a[0], a[1]); }
static double r_where(const double *a) { return a[0] != 0 ? a[1] : a[2]; }
static double r_clip(const double *a) { return fmin(fmax(a[0], a[1]), a[2]); }
static double r_clip_lo(const double *a) { return fmax(a[0], a[1]); }
static double r_ident(const double *a) { return a[0]; }
static double r_trunc(const double *a) { return trunc(a[0]); }
static double r_round(const double *a) { return nearbyint(a[0]); }
/* DequantizeLinear(QuantizeLinear(x)) with scale a[1] and zero point a[2]: x / scale in f32, ties to even */
static double fake_quant(const double *a, double lo, double hi)
{
    double q = nearbyint((float)(a[0] / a[1])) + a[2];
    return ((isnan(q) || q < lo ? lo : q > hi ? hi : q) - a[2]) * a[1];
}
static double r_fake_quant_u8(const double *a) { return fake_quant(a, 0, 255); }
static double r_fake_quant_i8(const double *a) { return fake_quant(a, -128, 127); }
static double r_gelu(const double *a) { return 0.5 * a[0] * (1 + erf(a[0] / sqrt(2.0))); }
static double r_gelu_tanh(const double *a)
{
    return 0.5 * a[0] * (1 + tanh(sqrt(2 / M_PI) * (a[0] + 0.044715 * a[0] * a[0] * a[0])));
}
static double r_mod(const double *a)
{
    double m = fmod(a[0], a[1]);
    return m != 0 && (m < 0) != (a[1] < 0) ? m + a[1] : m;
}

/* ---- the whole-tensor formulas, in double ----
 * Each computes a row's output from its operands (in[k]: input k of the row;
 * rank -1 where omitted) and its attributes as the row writes them, with the
 * defaults of the op's definition.  Nothing of vitc is called: indexing,
 * broadcasting and the arithmetic are written out here. */

static int64_t d_count(int rank, const int64_t *dims)
{
    int64_t n = 1;
    for (int d = 0; d < rank; d++)
        n *= dims[d];
    return n;
}

static void d_alloc(dten *t, int rank, const int64_t *dims)
{
    t->rank = rank;
    memcpy(t->dims, dims, sizeof(int64_t) * (size_t)rank);
    int64_t n = d_count(rank, dims);
    t->v = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    assert_non_null(t->v);
}

/* The offset in a row-major tensor of dims[rank] of the element that the
 * coordinate c of an n-dimensional index space reads (numpy broadcasting:
 * aligned at the last axis, an axis of size 1 read at 0). */
static int64_t d_bcast(const int64_t *dims, int rank, const int64_t *c, int n)
{
    int64_t off = 0;
    for (int d = 0; d < rank; d++)
        off = off * dims[d] + (dims[d] == 1 ? 0 : c[d + n - rank]);
    return off;
}

/* The coordinate of element i of a row-major dims[rank]. */
static void d_coord(const int64_t *dims, int rank, int64_t i, int64_t *c)
{
    for (int d = rank - 1; d >= 0; d--) {
        c[d] = i % dims[d];
        i /= dims[d];
    }
}

static const attr_spec *row_attr(const op_row *w, ir_attr_id id)
{
    for (int k = 0; k < w->nattrs; k++)
        if (w->at[k].id == id)
            return &w->at[k];
    return NULL;
}
static int64_t attr_i(const op_row *w, ir_attr_id id, int64_t def)
{
    const attr_spec *a = row_attr(w, id);
    return a ? a->i : def;
}
static double attr_f(const op_row *w, ir_attr_id id, float def)
{
    const attr_spec *a = row_attr(w, id);
    return a ? a->f : def; /* the attribute is a float: its value as the graph holds it */
}
static int64_t axis_of(int64_t axis, int rank) { return axis < 0 ? axis + rank : axis; }

/* QuantLookup (ops.def): table[c - qmin] with c x's FakeQuant code: the
 * quotient x / scale rounded to f32, then to an integer (ties to even), plus
 * the zero point, clamped to [qmin, qmax]; a NaN gives qmin. */
static void f_quant_lookup(const op_row *w, const dten *in, dten *out)
{
    double s = in[1].v[0], z = in[2].v[0], lo = attr_f(w, IR_ATTR_QMIN, 0), hi = attr_f(w, IR_ATTR_QMAX, 255);
    d_alloc(out, in[0].rank, in[0].dims);
    for (int64_t i = 0; i < d_count(in[0].rank, in[0].dims); i++) {
        double c = nearbyint((float)(in[0].v[i] / s)) + z;
        c = isnan(c) || c < lo ? lo : c > hi ? hi : c;
        out->v[i] = in[3].v[(int64_t)(c - lo)];
    }
}

/* Softmax (opset 13): over the one axis (default -1). */
static void f_softmax(const op_row *w, const dten *in, dten *out)
{
    const dten *x = &in[0];
    int64_t a = axis_of(attr_i(w, IR_ATTR_AXIS, -1), x->rank);
    int64_t n = x->dims[a], inner = d_count(x->rank - (int)a - 1, x->dims + a + 1);
    int64_t outer = d_count(x->rank, x->dims) / (n * inner);
    d_alloc(out, x->rank, x->dims);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const double *p = x->v + o * n * inner + i;
            double m = -INFINITY, sum = 0;
            for (int64_t j = 0; j < n; j++)
                m = p[j * inner] > m ? p[j * inner] : m;
            for (int64_t j = 0; j < n; j++)
                sum += exp(p[j * inner] - m);
            for (int64_t j = 0; j < n; j++)
                out->v[o * n * inner + j * inner + i] = exp(p[j * inner] - m) / sum;
        }
}

/* LayerNormalization (centered) and RMSNormalization over the axes from
 * `axis` (default -1) on: (x - mean) / sqrt(var + eps) * scale + bias, or
 * x / sqrt(mean(x^2) + eps) * scale; scale and bias of those axes' shape. */
static void norm(const op_row *w, const dten *in, dten *out, int centered)
{
    const dten *x = &in[0], *scale = &in[1], *bias = w->nin > 2 ? &in[2] : NULL;
    int64_t a = axis_of(attr_i(w, IR_ATTR_AXIS, -1), x->rank);
    double eps = attr_f(w, IR_ATTR_EPSILON, 1e-5f);
    int64_t inner = d_count(x->rank - (int)a, x->dims + a), outer = d_count(x->rank, x->dims) / inner;
    assert_int_equal(d_count(scale->rank, scale->dims), inner);
    d_alloc(out, x->rank, x->dims);
    for (int64_t o = 0; o < outer; o++) {
        const double *p = x->v + o * inner;
        double mean = 0, var = 0;
        for (int64_t j = 0; j < inner; j++)
            mean += p[j];
        mean = centered ? mean / (double)inner : 0;
        for (int64_t j = 0; j < inner; j++)
            var += (p[j] - mean) * (p[j] - mean);
        double inv = 1 / sqrt(var / (double)inner + eps);
        for (int64_t j = 0; j < inner; j++)
            out->v[o * inner + j] = (p[j] - mean) * inv * scale->v[j] + (bias && bias->rank >= 0 ? bias->v[j] : 0);
    }
}
static void f_layernorm(const op_row *w, const dten *in, dten *out) { norm(w, in, out, 1); }
static void f_rmsnorm(const op_row *w, const dten *in, dten *out) { norm(w, in, out, 0); }

/* ReduceMean, ReduceSum, ReduceMax, ReduceMin (opset 18): the axes from the attribute
 * or the second input, every axis without either; keepdims default 1. */
static void reduce(const op_row *w, const dten *in, dten *out, char kind)
{
    const dten *x = &in[0];
    int take[IR_MAX_RANK] = {0}, naxes = 0;
    const attr_spec *axes = row_attr(w, IR_ATTR_AXES);
    for (int k = 0; axes && k < axes->n; k++, naxes++)
        take[axis_of(axes->ints[k], x->rank)] = 1;
    for (int k = 0; w->nin > 1 && k < d_count(in[1].rank, in[1].dims); k++, naxes++)
        take[axis_of((int64_t)in[1].v[k], x->rank)] = 1;
    for (int d = 0; !naxes && d < x->rank; d++)
        take[d] = 1;
    int keep = (int)attr_i(w, IR_ATTR_KEEPDIMS, 1), orank = 0;
    int64_t odims[IR_MAX_RANK] = {0}, count = 1;
    for (int d = 0; d < x->rank; d++) {
        if (!take[d])
            odims[orank++] = x->dims[d];
        else if (keep)
            odims[orank++] = 1;
        count *= take[d] ? x->dims[d] : 1;
    }
    d_alloc(out, orank, odims);
    int64_t n = d_count(orank, odims);
    for (int64_t i = 0; i < n; i++)
        out->v[i] = kind == 'x' ? -INFINITY : kind == 'n' ? INFINITY : 0;
    for (int64_t i = 0; i < d_count(x->rank, x->dims); i++) {
        int64_t c[IR_MAX_RANK], o = 0;
        d_coord(x->dims, x->rank, i, c);
        for (int d = 0; d < x->rank; d++)
            if (!take[d])
                o = o * x->dims[d] + c[d];
        if (kind == 'x')
            out->v[o] = x->v[i] > out->v[o] ? x->v[i] : out->v[o];
        else if (kind == 'n')
            out->v[o] = x->v[i] < out->v[o] ? x->v[i] : out->v[o];
        else
            out->v[o] += x->v[i];
    }
    for (int64_t i = 0; kind == 'm' && i < n; i++)
        out->v[i] /= (double)count;
}
static void f_reduce_mean(const op_row *w, const dten *in, dten *out) { reduce(w, in, out, 'm'); }
static void f_reduce_sum(const op_row *w, const dten *in, dten *out) { reduce(w, in, out, 's'); }
static void f_reduce_max(const op_row *w, const dten *in, dten *out) { reduce(w, in, out, 'x'); }
static void f_reduce_min(const op_row *w, const dten *in, dten *out) { reduce(w, in, out, 'n'); }

/* MatMul (numpy's, both operands of rank 2 or more): the leading axes broadcast. */
static void f_matmul(const op_row *w, const dten *in, dten *out)
{
    (void)w;
    const dten *a = &in[0], *b = &in[1];
    assert_true(a->rank >= 2 && b->rank >= 2);
    int64_t M = a->dims[a->rank - 2], K = a->dims[a->rank - 1], N = b->dims[b->rank - 1];
    assert_int_equal(b->dims[b->rank - 2], K);
    int ra = a->rank - 2, rb = b->rank - 2, rank = (ra > rb ? ra : rb) + 2;
    int64_t dims[IR_MAX_RANK];
    for (int d = 0; d < rank - 2; d++) {
        int64_t da = d - (rank - 2 - ra) >= 0 ? a->dims[d - (rank - 2 - ra)] : 1;
        int64_t db = d - (rank - 2 - rb) >= 0 ? b->dims[d - (rank - 2 - rb)] : 1;
        assert_true(da == db || da == 1 || db == 1);
        dims[d] = da > db ? da : db;
    }
    dims[rank - 2] = M, dims[rank - 1] = N;
    d_alloc(out, rank, dims);
    for (int64_t s = 0; s < d_count(rank - 2, dims); s++) {
        int64_t c[IR_MAX_RANK];
        d_coord(dims, rank - 2, s, c);
        const double *pa = a->v + d_bcast(a->dims, ra, c, rank - 2) * M * K;
        const double *pb = b->v + d_bcast(b->dims, rb, c, rank - 2) * K * N;
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) {
                double acc = 0;
                for (int64_t k = 0; k < K; k++)
                    acc += pa[m * K + k] * pb[k * N + n];
                out->v[(s * M + m) * N + n] = acc;
            }
    }
}

/* Gemm: alpha op(A) op(B) + beta C, op transposing where transA/transB, C
 * broadcasting to [M, N]. */
static void f_gemm(const op_row *w, const dten *in, dten *out)
{
    const dten *a = &in[0], *b = &in[1], *c = w->nin > 2 && in[2].rank >= 0 ? &in[2] : NULL;
    int ta = (int)attr_i(w, IR_ATTR_TRANS_A, 0), tb = (int)attr_i(w, IR_ATTR_TRANS_B, 0);
    double alpha = attr_f(w, IR_ATTR_ALPHA, 1.0f), beta = attr_f(w, IR_ATTR_BETA, 1.0f);
    int64_t M = a->dims[ta ? 1 : 0], K = a->dims[ta ? 0 : 1], N = b->dims[tb ? 0 : 1];
    assert_int_equal(b->dims[tb ? 1 : 0], K);
    d_alloc(out, 2, (int64_t[]){M, N});
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double acc = 0;
            for (int64_t k = 0; k < K; k++)
                acc += a->v[ta ? k * M + m : m * K + k] * b->v[tb ? n * K + k : k * N + n];
            int64_t mn[2] = {m, n};
            out->v[m * N + n] = alpha * acc + (c ? beta * c->v[d_bcast(c->dims, c->rank, mn, 2)] : 0);
        }
}

/* The Linear's activations (ir/act.def names them). */
static double act(int64_t a, double x)
{
    switch (a) {
    case IR_ACT_NONE: return x;
    case IR_ACT_GELU_ERF: return 0.5 * x * (1 + erf(x / sqrt(2.0)));
    case IR_ACT_GELU_TANH: return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case IR_ACT_RELU: return x > 0 ? x : 0;
    case IR_ACT_RELU6: return x < 0 ? 0 : x > 6 ? 6 : x;
    case IR_ACT_QUICK_GELU: return x / (1 + exp(-1.702 * x));
    case IR_ACT_SILU: return x / (1 + exp(-x));
    default: fail_msg("activation %lld has no formula", (long long)a);
    }
    return NAN;
}

/* Linear (ir/opview.h): y[..., N] = act(x[..., K] @ w[K, N] + bias[N]) * gate + residual,
 * the residual broadcasting to y, the gate of y's shape. */
static void f_linear(const op_row *w, const dten *in, dten *out)
{
    const dten *x = &in[0], *wt = &in[1];
    const dten *bias = w->nin > 2 && in[2].rank >= 0 ? &in[2] : NULL;
    const dten *res = w->nin > 3 && in[3].rank >= 0 ? &in[3] : NULL;
    const dten *gate = w->nin > 4 && in[4].rank >= 0 ? &in[4] : NULL;
    int64_t K = wt->dims[0], N = wt->dims[1], a = attr_i(w, IR_ATTR_ACTIVATION, IR_ACT_NONE);
    assert_int_equal(x->dims[x->rank - 1], K);
    int64_t dims[IR_MAX_RANK];
    memcpy(dims, x->dims, sizeof dims);
    dims[x->rank - 1] = N;
    d_alloc(out, x->rank, dims);
    if (gate)
        assert_int_equal(d_count(gate->rank, gate->dims), d_count(x->rank, dims));
    int64_t rows_ = d_count(x->rank, x->dims) / K;
    for (int64_t m = 0; m < rows_; m++)
        for (int64_t n = 0; n < N; n++) {
            double acc = bias ? bias->v[n] : 0;
            for (int64_t k = 0; k < K; k++)
                acc += x->v[m * K + k] * wt->v[k * N + n];
            double y = act(a, acc);
            int64_t i = m * N + n, c[IR_MAX_RANK];
            if (gate)
                y *= gate->v[i];
            if (res) {
                d_coord(dims, x->rank, i, c);
                y += res->v[d_bcast(res->dims, res->rank, c, x->rank)];
            }
            out->v[i] = y;
        }
}

/* Attention (ir/opview.h): per image i and head h,
 *   out[i, n, h*D + d] = sum_m P[n, m] V[m, d],
 *   P = softmax_m(scale * Q[n] . K[m] + bias[i % B', h % H', n % N', m]) * post_scale,
 * (bias [B', H', N', Nk], each of B', H', N' 1 or full; B' may be a period of
 * windows); Q, K, V head h of the packed qkv (layout 0: part p, element
 * (h, d) at p*H*D + h*D + d; layout 1: at (h*D + d)*parts + p), Q from the
 * separate queries in cross-attention (K and V parts 0 and 1).  A rotary
 * table [2, (H,) R, D] rotates Q and K of tokens rope_start .. rope_start+R-1:
 * x[d] * rope[0, t, d] + x[partner d] * rope[1, t, d], the partner half a head
 * away (halves) or the other of a pair (interleaved).  A fake_quant
 * attribute puts FakeQuant(t * mul) with {mul, scale, zero, qmin, qmax} on
 * Q, K, V, the scores (twice), the probabilities and the output. */
static double fq_point(const float *f, int p, double x)
{
    f += 5 * p;
    if (f[1] == 0)
        return x;
    double t = nearbyint((float)((double)(float)(x * f[0]) / f[1])) + f[2];
    t = t < f[3] || isnan(t) ? f[3] : t > f[4] ? f[4] : t;
    return (float)((float)(t - f[2]) * f[1]);
}

static void f_attention(const op_row *w, const dten *in, dten *out)
{
    const dten *qkv = &in[0];
    const dten *bias = w->nin > 1 && in[1].rank >= 0 ? &in[1] : NULL;
    const dten *qin = w->nin > 2 && in[2].rank >= 0 ? &in[2] : NULL;
    const dten *rope = w->nin > 3 && in[3].rank >= 0 ? &in[3] : NULL;
    int64_t H = attr_i(w, IR_ATTR_HEADS, 0), D = attr_i(w, IR_ATTR_HEAD_SIZE, 0);
    int64_t layout = attr_i(w, IR_ATTR_QKV_LAYOUT, 0), pairing = attr_i(w, IR_ATTR_ROPE_PAIRING, 0);
    int64_t start = attr_i(w, IR_ATTR_ROPE_START, 0);
    double scale = attr_f(w, IR_ATTR_SCALE, 1.0f), post = attr_f(w, IR_ATTR_POST_SCALE, 1.0f);
    const attr_spec *fa = row_attr(w, IR_ATTR_FAKE_QUANT);
    static const float no_fq[35];
    const float *fq = fa ? fa->floats : no_fq;
    int64_t parts = qin ? 2 : 3, B = qkv->dims[0], Nk = qkv->dims[1], Nq = qin ? qin->dims[1] : Nk;
    assert_int_equal(qkv->dims[2], parts * H * D);
    d_alloc(out, 3, (int64_t[]){B, Nq, H * D});
    double *Q = calloc((size_t)(Nq * D), sizeof(double)), *Kt = calloc((size_t)(Nk * D), sizeof(double));
    double *V = calloc((size_t)(Nk * D), sizeof(double)), *P = calloc((size_t)Nk, sizeof(double));
    assert_true(Q && Kt && V && P);
    for (int64_t i = 0; i < B; i++)
        for (int64_t h = 0; h < H; h++) {
            for (int64_t n = 0; n < Nk; n++)
                for (int64_t d = 0; d < D; d++) {
                    const double *row = qkv->v + (i * Nk + n) * parts * H * D;
                    int64_t e = h * D + d;
                    double part[3];
                    for (int p = 0; p < parts; p++)
                        part[p] = row[layout ? e * parts + p : p * H * D + e];
                    Kt[n * D + d] = fq_point(fq, 1, part[parts - 2]);
                    V[n * D + d] = fq_point(fq, 2, part[parts - 1]);
                    if (!qin)
                        Q[n * D + d] = fq_point(fq, 0, part[0]);
                }
            for (int64_t n = 0; qin && n < Nq; n++)
                for (int64_t d = 0; d < D; d++)
                    Q[n * D + d] = qin->v[(i * Nq + n) * H * D + h * D + d];
            if (rope) {
                int per_head = rope->rank == 4;
                int64_t R = rope->dims[rope->rank - 2];
                const double *cs = rope->v + (per_head ? h * R * D : 0);
                const double *sn = rope->v + (per_head ? H : 1) * R * D + (per_head ? h * R * D : 0);
                double *both[2] = {Q, Kt}, tmp[256];
                assert_true(D <= 256);
                for (int s = 0; s < 2; s++)
                    for (int64_t n = start; n < start + R && n < Nk; n++) {
                        double *x = both[s] + n * D;
                        int64_t t = n - start;
                        for (int64_t d = 0; d < D; d++) {
                            int64_t partner = pairing == IR_ROPE_INTERLEAVED ? (d % 2 ? d - 1 : d + 1)
                                                                             : (d < D / 2 ? d + D / 2 : d - D / 2);
                            tmp[d] = x[d] * cs[t * D + d] + x[partner] * sn[t * D + d];
                        }
                        memcpy(x, tmp, sizeof(double) * (size_t)D);
                    }
            }
            for (int64_t n = 0; n < Nq; n++) {
                double m = -INFINITY, sum = 0;
                for (int64_t j = 0; j < Nk; j++) {
                    double s = 0;
                    for (int64_t d = 0; d < D; d++)
                        s += Q[n * D + d] * Kt[j * D + d];
                    s = fq_point(fq, 4, fq_point(fq, 3, s)) * scale;
                    if (bias) {
                        const int64_t *bd = bias->dims;
                        assert_int_equal(bd[3], Nk);
                        s += bias->v[(((i % bd[0]) * bd[1] + h % bd[1]) * bd[2] + n % bd[2]) * Nk + j];
                    }
                    P[j] = s;
                    m = s > m ? s : m;
                }
                for (int64_t j = 0; j < Nk; j++)
                    sum += P[j] = exp(P[j] - m);
                for (int64_t d = 0; d < D; d++) {
                    double acc = 0;
                    for (int64_t j = 0; j < Nk; j++)
                        acc += fq_point(fq, 5, P[j] / sum) * post * V[j * D + d];
                    out->v[(i * Nq + n) * H * D + h * D + d] = fq_point(fq, 6, acc);
                }
            }
        }
    free(Q), free(Kt), free(V), free(P);
}

/* Attention's fake-quant points: {mul, scale, zero, qmin, qmax} for Q, K, V, the scores twice, the
 * probabilities and the output; int8 and u8 grids, zero points inside and at the ends */
static const float attn_fq[35] = {0.5f, 0.02f, 3,   -128, 127, 1, 0.03f,  0,   -128, 127, 1, 0.025f, 128, 0, 255,
                                  0.9f, 0.01f, 120, 0,    255, 0.7f, 0.015f, 100, 0, 255, 1, 1 / 255.0f, 0, 0, 255,
                                  1,    0.01f, 128, 0,    255};
static const float attn_fq_p[35] = {[25] = 2, 1 / 255.0f, 0, 0, 255};

static const op_row rows[] = {
    /* element-wise: unary */
    {"Abs", IR_OP_ABS, IN1(X(-1, 3, 4)), .ref = r_abs},
    {"Neg", IR_OP_NEG, IN1(X(-1, 3, 4)), .ref = r_neg},
    {"Relu", IR_OP_RELU, IN1(X(-1, 3, 4)), .ref = r_relu},
    {"Exp", IR_OP_EXP, IN1(X(-1, 3, 4)), .ref = r_exp},
    {"Log", IR_OP_LOG, IN1(P(-1, 3, 4)), .ref = r_log},
    {"Erf", IR_OP_ERF, IN1(X(-1, 3, 4)), .ref = r_erf},
    {"Sqrt", IR_OP_SQRT, IN1(P(-1, 3, 4)), .ref = r_sqrt},
    {"Tanh", IR_OP_TANH, IN1(X(-1, 3, 4)), .ref = r_tanh},
    {"Sigmoid", IR_OP_SIGMOID, IN1(X(-1, 3, 4)), .ref = r_sigmoid},
    {"Cos", IR_OP_COS, IN1(X(-1, 3, 4)), .ref = r_cos},
    {"Sin", IR_OP_SIN, IN1(X(-1, 3, 4)), .ref = r_sin},
    {"HardSigmoid", IR_OP_HARD_SIGMOID, IN1(X(-1, 3, 4)), AT2(AF(ALPHA, 0.3), AF(BETA, 0.4)), .ref = r_hardsigmoid},
    {"Reciprocal", IR_OP_RECIPROCAL, IN1(P(-1, 3, 4)), .ref = r_recip},
    {"Round", IR_OP_ROUND, IN1(X(-1, 3, 4)), .ref = r_round},
    {"Gelu", IR_OP_GELU, IN1(X(-1, 3, 4)), .ref = r_gelu},
    {"Gelu/tanh", IR_OP_GELU, IN1(X(-1, 3, 4)), AT1(AS(APPROXIMATE, "tanh")), .ref = r_gelu_tanh},
    {"Not", IR_OP_NOT, .dt = IR_BOOL, IN1(B(-1, 3, 4)), .ref = r_not},
    {"QuickGelu", IR_OP_QUICK_GELU, IN1(X(-1, 3, 4)), .ref = r_quick_gelu},
    {"FakeQuant", IR_OP_FAKE_QUANT, IN3(X(-1, 3, 4), S(0.02f), S(128.0f)), AT2(AF(QMIN, 0), AF(QMAX, 255)),
     .ref = r_fake_quant_u8},
    {"FakeQuant/saturating-nan", IR_OP_FAKE_QUANT, IN3(N(-1, 3, 4), S(0.01f), S(-3.0f)), AT2(AF(QMIN, -128), AF(QMAX, 127)),
     .ref = r_fake_quant_i8},
    /* x / 0.02 spans +-100 around code 128; x / 0.01 saturates both ends of int8; NaNs take entry 0 */
    {"QuantLookup", IR_OP_QUANT_LOOKUP, IN4(N(-1, 3, 4), S(0.02f), S(128.0f), W(256)), AT2(AF(QMIN, 0), AF(QMAX, 255)),
     .formula = f_quant_lookup},
    {"QuantLookup/i8-saturating", IR_OP_QUANT_LOOKUP, IN4(N(-1, 5, 4), S(0.01f), S(-3.0f), W(256)),
     AT2(AF(QMIN, -128), AF(QMAX, 127)), .formula = f_quant_lookup},
    {"Swish", IR_OP_SWISH, IN1(X(-1, 3, 4)), .ref = r_silu},
    {"Swish/alpha", IR_OP_SWISH, IN1(X(-1, 3, 4)), AT1(AF(ALPHA, 0.5)), .ref = r_swish_half},
    {"IsNaN", IR_OP_IS_NAN, .dt = IR_BOOL, IN1(N(-1, 3, 4)), .ref = r_isnan},
    {"Cast/bool->f32", IR_OP_CAST, IN1(B(-1, 3, 4)), AT1(AI(TO, 1)), .ref = r_ident},
    {"Cast/f32->i64", IR_OP_CAST, .dt = IR_I64, IN1(X(-1, 3, 4)), AT1(AI(TO, 7)), .ref = r_trunc},
    {"CastLike/bool->f32", IR_OP_CAST_LIKE, IN2(B(-1, 3, 4), S(0)), .ref = r_ident},
    /* element-wise: binary, broadcasting */
    {"Add", IR_OP_ADD, IN2(X(-1, 3, 4), X(4)), .ref = r_add},
    {"Add/i64", IR_OP_ADD, .dt = IR_I64, IN2(I(-1, 3, 4), I(3, 1)), .ref = r_add},
    {"Sub", IR_OP_SUB, IN2(X(-1, 1, 4), X(-1, 3, 1)), .ref = r_sub},
    {"Mul", IR_OP_MUL, IN2(X(-1, 3, 4), S(0.5f)), .ref = r_mul},
    {"Div", IR_OP_DIV, IN2(X(-1, 3, 4), P(3, 1)), .ref = r_div},
    {"Pow", IR_OP_POW, IN2(P(-1, 3, 4), X(4)), .ref = r_pow},
    {"Pow/3", IR_OP_POW, IN2(X(-1, 3, 4), S(3)), .ref = r_pow},
    {"Mod/fmod", IR_OP_MOD, IN2(X(-1, 3, 4), S(0.5f)), AT1(AI(FMOD, 1)), .ref = r_fmod},
    {"Mod", IR_OP_MOD, IN2(X(-1, 3, 4), S(0.7f)), .ref = r_mod},
    {"Equal/i64", IR_OP_EQUAL, .dt = IR_BOOL, IN2(I(-1, 3, 4), I(4)), .ref = r_eq},
    {"Greater", IR_OP_GREATER, .dt = IR_BOOL, IN2(X(-1, 3, 4), X(3, 1)), .ref = r_gt},
    {"Less", IR_OP_LESS, .dt = IR_BOOL, IN2(X(-1, 3, 4), S(0)), .ref = r_lt},
    /* integers from [-20, 20): many ties; NaN compares false */
    {"GreaterOrEqual/i64", IR_OP_GREATER_OR_EQUAL, .dt = IR_BOOL, IN2(I(-1, 3, 4), I(3, 1)), .ref = r_ge},
    {"LessOrEqual/nan", IR_OP_LESS_OR_EQUAL, .dt = IR_BOOL, IN2(N(-1, 3, 4), X(4)), .ref = r_le},
    {"And", IR_OP_AND, .dt = IR_BOOL, IN2(B(-1, 3, 4), B(4)), .ref = r_and},
    {"Or", IR_OP_OR, .dt = IR_BOOL, IN2(B(-1, 3, 4), B(3, 1)), .ref = r_or},
    /* element-wise: more inputs */
    {"Max/2", IR_OP_MAX, IN2(X(-1, 3, 4), X(4)), .ref = r_max2},
    {"Max/3", IR_OP_MAX, IN3(X(-1, 3, 4), X(4), S(0.25f)), .ref = r_max3},
    {"Min/3", IR_OP_MIN, IN3(X(-1, 3, 4), X(3, 1), S(-0.25f)), .ref = r_min3},
    {"Where", IR_OP_WHERE, IN3(B(-1, 3, 4), X(-1, 3, 4), X(4)), .ref = r_where},
    {"Clip", IR_OP_CLIP, IN3(X(-1, 3, 4), S(-0.5f), S(0.7f)), .ref = r_clip},
    {"Clip/min", IR_OP_CLIP, IN2(X(-1, 3, 4), S(-0.5f)), .ref = r_clip_lo},
    /* normalisation and reductions */
    {"Softmax", IR_OP_SOFTMAX, IN1(X(-1, 5, 6)), .formula = f_softmax},
    {"Softmax/axis1", IR_OP_SOFTMAX, IN1(X(-1, 5, 6)), AT1(AI(AXIS, 1)), .formula = f_softmax},
    {"LayerNorm", IR_OP_LAYERNORM, IN3(X(-1, 5, 16), W(16), W(16)), AT1(AF(EPSILON, 1e-5f)), .formula = f_layernorm},
    {"LayerNorm/axis1", IR_OP_LAYERNORM, IN3(X(-1, 5, 6), W(5, 6), W(5, 6)), AT2(AI(AXIS, 1), AF(EPSILON, 1e-3f)),
     .formula = f_layernorm},
    {"RMSNorm", IR_OP_RMS_NORM, IN2(X(-1, 5, 16), W(16)), AT1(AF(EPSILON, 1e-6f)), .formula = f_rmsnorm},
    {"RMSNorm/axis1", IR_OP_RMS_NORM, IN2(X(-1, 5, 6), W(5, 6)), AT2(AI(AXIS, 1), AF(EPSILON, 1e-3f)),
     .formula = f_rmsnorm},
    {"ReduceMean", IR_OP_REDUCE_MEAN, IN1(X(-1, 5, 6)), AT1(AIS(AXES, -1)), .formula = f_reduce_mean},
    {"ReduceMean/all", IR_OP_REDUCE_MEAN, IN1(X(-1, 5, 6)), .formula = f_reduce_mean},
    {"ReduceSum", IR_OP_REDUCE_SUM, IN1(X(-1, 5, 6)), AT2(AIS(AXES, 1), AI(KEEPDIMS, 0)), .formula = f_reduce_sum},
    {"ReduceMax", IR_OP_REDUCE_MAX, IN2(X(-1, 5, 6), C(0, 2)), .formula = f_reduce_max},
    {"ReduceMin", IR_OP_REDUCE_MIN, IN1(X(-1, 5, 6)), AT2(AIS(AXES, 1), AI(KEEPDIMS, 0)), .formula = f_reduce_min},
    {"ReduceMin/all", IR_OP_REDUCE_MIN, IN1(X(-1, 5, 6)), .formula = f_reduce_min},
    /* matrix products */
    {"MatMul", IR_OP_MATMUL, IN2(X(-1, 3, 4), W(4, 5)), .formula = f_matmul},
    {"MatMul/batched", IR_OP_MATMUL, IN2(X(-1, 2, 3, 4), X(-1, 2, 4, 3)), .formula = f_matmul},
    {"MatMul/broadcast", IR_OP_MATMUL, IN2(X(-1, 2, 3, 4), X(4, 5)), .formula = f_matmul},
    {"Gemm", IR_OP_GEMM, IN3(X(-1, 4), W(5, 4), W(5)), AT3(AI(TRANS_B, 1), AF(ALPHA, 0.5f), AF(BETA, 2.0f)),
     .formula = f_gemm},
    {"Gemm/transA", IR_OP_GEMM, IN3(X(6, 3), X(6, 5), X(3, 1)), AT2(AI(TRANS_A, 1), AF(BETA, -1.0f)),
     .formula = f_gemm},
    /* data movement */
    {"Transpose", IR_OP_TRANSPOSE, IN1(X(-1, 4, 6)), AT1(AIS(PERM, 2, 0, 1))},
    {"Slice", IR_OP_SLICE, IN4(X(-1, 4, 6), C(1), C(-1), C(2))},
    {"Slice/steps", IR_OP_SLICE, .nin = 5, .in = {X(-1, 4, 6), C(5), C(0), C(2), C(-2)}},
    {"Concat", IR_OP_CONCAT, IN2(X(-1, 4, 6), X(-1, 4, 2)), AT1(AI(AXIS, 2))},
    {"Concat/batch", IR_OP_CONCAT, IN2(X(-1, 4, 6), X(-1, 4, 6)), AT1(AI(AXIS, 0))},
    {"Gather", IR_OP_GATHER, IN2(X(-1, 4, 6), C(3, 0, -2)), AT1(AI(AXIS, 1))},
    {"Gather/scalar", IR_OP_GATHER, IN2(X(-1, 4, 6), C0(-1)), AT1(AI(AXIS, 2))},
    {"Expand", IR_OP_EXPAND, IN2(W(1, 1, 6), C(2, 4, 6))},
    {"Split", IR_OP_SPLIT, .nout = 2, IN2(X(-1, 4, 6), C(1, 3)), AT1(AI(AXIS, 1))},
    {"Tile", IR_OP_TILE, IN2(X(-1, 2, 3), C(1, 3, 2))},
    {"Tile/batch", IR_OP_TILE, IN2(X(-1, 1, 3), C(2, 3, 2))}, /* the batch axis repeated: [2B, 3, 6] */
    {"Tile/rank4", IR_OP_TILE, IN2(X(-1, 2, 1, 3), C(1, 2, 3, 2))},
    /* pads [begins..., ends...]; negative ones crop */
    {"Pad", IR_OP_PAD, IN3(X(-1, 4, 6), C(0, 1, 2, 0, 0, -1), S(0.5f))},
    {"Pad/zero-axes", IR_OP_PAD, IN4(X(-1, 4, 6), C(2, -1, 1, 3), NONE, C(-1, 1))},
    {"Pad/reflect", IR_OP_PAD, IN2(X(-1, 4, 6), C(0, 2, 1, 0, 3, 2)), AT1(AS(MODE, "reflect"))},
    {"Pad/reflect-wide", IR_OP_PAD, IN2(X(-1, 3, 2), C(0, 4, 3, 0, 5, 1)), AT1(AS(MODE, "reflect"))},
    {"Pad/edge", IR_OP_PAD, IN2(X(-1, 4, 6), C(0, 1, 7, 0, 2, 0)), AT1(AS(MODE, "edge"))},
    {"Pad/edge-crop", IR_OP_PAD, IN2(X(-1, 4, 6), C(0, -1, 2, 0, 2, -3)), AT1(AS(MODE, "edge"))},
    {"Pad/wrap", IR_OP_PAD, IN2(X(-1, 3, 4), C(0, 2, 5, 0, 4, 1)), AT1(AS(MODE, "wrap"))},
    /* constant indices: [2] picks x[0, 3]; per batch_dims block; along an axis before the batch-sized one */
    {"GatherND", IR_OP_GATHER_ND, IN2(X(-1, 4, 6), C(0, 3))},
    {"GatherND/batch_dims", IR_OP_GATHER_ND, IN2(X(3, 4, 5), C3D(3, 2, 1, 3, 0, 1, 1, -1, 2)),
     AT1(AI(BATCH_DIMS, 1))},
    {"GatherND/inner-batch", IR_OP_GATHER_ND, IN2(X(5, -1, 3), C2D(3, 1, 4, 0, 2))},
    {"ScatterND", IR_OP_SCATTER_ND, IN3(X(-1, 4, 6), C(0, 2), X(6))},
    {"ScatterND/add", IR_OP_SCATTER_ND, IN3(X(-1, 4, 6), C(0, 2), X(6)), AT1(AS(REDUCTION, "add"))},
    /* a repeated index reduces in the order of the tuples */
    {"ScatterND/max-repeated", IR_OP_SCATTER_ND, IN3(X(-1, 4, 6), C2D(2, 2, 0, 2, 0, 2), X(2, 6)),
     AT1(AS(REDUCTION, "max"))},
    {"ScatterND/min-run", IR_OP_SCATTER_ND, IN3(X(-1, 4, 6), C2D(3, 2, 0, 1, 0, 2, 0, 3), X(3, 6)),
     AT1(AS(REDUCTION, "min"))},
    {"ScatterND/mul-rows", IR_OP_SCATTER_ND, IN3(X(4, -1, 3), C2D(2, 1, 3, 1), X(2, -1, 3)),
     AT1(AS(REDUCTION, "mul"))},
    {"Resize/axes", IR_OP_RESIZE, IN4(X(-1, 2, 4, 3), NONE, NONE, C(6, 5)), AT2(AS(MODE, "cubic"), AIS(AXES, 2, 3))},
    /* quantized ONNX: the interpreter runs them (test_interp checks their numbers), the backends
     * leave them to the fold pass */
    {"QuantizeLinear", IR_OP_QUANTIZE_LINEAR, .dt = IR_U8, IN3(X(-1, 3, 4), S(0.02f), ZU(128))},
    {"QuantizeLinear/axis", IR_OP_QUANTIZE_LINEAR, .dt = IR_I8, IN3(X(-1, 3, 4), G(3), J(3)), AT1(AI(AXIS, 1))},
    {"DequantizeLinear", IR_OP_DEQUANTIZE_LINEAR, IN3(U(-1, 3, 4), S(0.02f), ZU(128))},
    {"DynamicQuantizeLinear", IR_OP_DYNAMIC_QUANTIZE_LINEAR, .dt = IR_U8, .nout = 3, IN1(X(-1, 3, 4))},
    {"MatMulInteger", IR_OP_MATMUL_INTEGER, .dt = IR_I32, IN4(U(-1, 3, 4), J(4, 5), ZU(128), ZI(0))},
    {"ConvInteger", IR_OP_CONV_INTEGER, .dt = IR_I32, IN3(U(-1, 2, 5, 5), J(3, 2, 3, 3), ZU(100))},
    {"QLinearMatMul", IR_OP_QLINEAR_MATMUL, .dt = IR_U8,
     IN8(U(-1, 3, 4), S(0.02f), ZU(128), J(4, 5), G(5), ZI(0), S(0.05f), ZU(120))},
    {"QLinearConv", IR_OP_QLINEAR_CONV, .dt = IR_U8,
     IN8(U(-1, 2, 5, 5), S(0.02f), ZU(100), J(3, 2, 3, 3), G(3), ZI(0), S(0.5f), ZU(128)), AT1(AIS(PADS, 1, 1, 1, 1))},
    /* ONNX Runtime's QOperator ops (com.microsoft) */
    {"QLinearAdd", IR_OP_QLINEAR_ADD, .dt = IR_U8,
     IN8(U(-1, 3, 4), S(0.02f), ZU(128), U(1, 4), S(0.03f), ZU(100), S(0.05f), ZU(120))},
    {"QLinearMul", IR_OP_QLINEAR_MUL, .dt = IR_U8,
     IN8(U(-1, 3, 4), S(0.02f), ZU(128), U(-1, 3, 4), S(0.03f), ZU(100), S(0.05f), ZU(120))},
    {"QLinearSoftmax", IR_OP_QLINEAR_SOFTMAX, .dt = IR_U8, .nin = 5,
     .in = {U(-1, 3, 4), S(0.1f), ZU(0), S(1 / 255.0f), ZU(0)}, AT2(AI(AXIS, -1), AI(OPSET, 13))},
    {"QLinearConcat", IR_OP_QLINEAR_CONCAT, .dt = IR_U8, .nin = 8,
     .in = {S(0.05f), ZU(128), U(-1, 3, 4), S(0.02f), ZU(100), U(-1, 2, 4), S(0.05f), ZU(128)}, AT1(AI(AXIS, 1))},
    {"QGemm", IR_OP_QGEMM, .dt = IR_U8, .nin = 9,
     .in = {U(-1, 6), S(0.02f), ZU(128), J(5, 6), G(5), ZI(0), NONE, S(0.05f), ZU(120)}, AT1(AI(TRANS_B, 1))},
    /* shape ops: folded at compile time, the interpreter alone runs them */
    {"Size", IR_OP_SIZE, .dt = IR_I64, IN1(X(-1, 4, 6))},
    /* fused: Linear with each activation, Attention in both layouts, with a bias broadcast or not */
    {"Linear", IR_OP_LINEAR, IN4(X(-1, 5, 8), W(8, 6), W(6), X(-1, 5, 6)), AT1(AI(ACTIVATION, IR_ACT_NONE)),
     .formula = f_linear},
    {"Linear/gelu", IR_OP_LINEAR, IN3(X(-1, 5, 8), W(8, 6), W(6)), AT1(AI(ACTIVATION, IR_ACT_GELU_ERF)),
     .formula = f_linear},
    {"Linear/gelu-tanh", IR_OP_LINEAR, IN3(X(-1, 5, 8), W(8, 6), W(6)), AT1(AI(ACTIVATION, IR_ACT_GELU_TANH)),
     .formula = f_linear},
    {"Linear/quick-gelu", IR_OP_LINEAR, IN3(X(-1, 5, 8), W(8, 6), W(6)), AT1(AI(ACTIVATION, IR_ACT_QUICK_GELU)),
     .formula = f_linear},
    {"Linear/silu", IR_OP_LINEAR, IN3(X(-1, 5, 8), W(8, 6), W(6)), AT1(AI(ACTIVATION, IR_ACT_SILU)),
     .formula = f_linear},
    {"Linear/gate", IR_OP_LINEAR, .nin = 5, .in = {X(-1, 5, 8), W(8, 6), W(6), NONE, X(-1, 5, 6)}, .formula = f_linear},
    {"Linear/gate-gelu", IR_OP_LINEAR, .nin = 5, .in = {X(-1, 5, 8), W(8, 6), NONE, NONE, X(-1, 5, 6)},
     AT1(AI(ACTIVATION, IR_ACT_GELU_ERF)), .formula = f_linear},
    /* K in several blocks: the partial sums pass through the output, the gate is read at the end */
    {"Linear/gate-kblocked", IR_OP_LINEAR, .nin = 5, .in = {X(-1, 3, 300), W(300, 40), W(40), NONE, X(-1, 3, 40)},
     AT1(AI(ACTIVATION, IR_ACT_SILU)), .formula = f_linear},
    {"Linear/relu", IR_OP_LINEAR, IN2(X(-1, 5, 6), W(6, 3)), AT1(AI(ACTIVATION, IR_ACT_RELU)), .formula = f_linear},
    {"Linear/relu6", IR_OP_LINEAR, IN2(X(-1, 5, 8), W(8, 6)), AT1(AI(ACTIVATION, IR_ACT_RELU6)), .formula = f_linear},
    {"Attention", IR_OP_ATTENTION, IN1(X(-1, 7, 24)), AT3(AI(HEADS, 2), AI(HEAD_SIZE, 4), AF(SCALE, 0.5f)),
     .formula = f_attention},
    /* a quantized model's attention: every fake-quant point (Q, K, V, scores twice, probabilities, output) */
    {"Attention/fake-quant", IR_OP_ATTENTION, IN1(X(-1, 7, 24)),
     AT4(AI(HEADS, 2), AI(HEAD_SIZE, 4), AF(SCALE, 1.1f), AFS(FAKE_QUANT, attn_fq)), .formula = f_attention},
    /* the probabilities' point alone, with a post_scale after it, layout 1 */
    {"Attention/fake-quant-p", IR_OP_ATTENTION, IN1(X(-1, 5, 24)),
     AT5(AI(HEADS, 2), AI(HEAD_SIZE, 4), AI(QKV_LAYOUT, 1), AF(POST_SCALE, 0.5f), AFS(FAKE_QUANT, attn_fq_p)),
     .formula = f_attention},
    {"Attention/interleaved", IR_OP_ATTENTION, IN1(X(-1, 5, 24)),
     AT4(AI(HEADS, 2), AI(HEAD_SIZE, 4), AI(QKV_LAYOUT, 1), AF(POST_SCALE, 0.25f)), .formula = f_attention},
    {"Attention/bias", IR_OP_ATTENTION, IN2(X(-1, 7, 24), X(-1, 2, 7, 7)), AT2(AI(HEADS, 2), AI(HEAD_SIZE, 4)),
     .formula = f_attention},
    {"Attention/bias-broadcast", IR_OP_ATTENTION, IN2(X(-1, 5, 24), W(1, 2, 1, 5)),
     AT4(AI(HEADS, 2), AI(HEAD_SIZE, 4), AI(QKV_LAYOUT, 1), AF(SCALE, 0.5f)), .formula = f_attention},
    {"Attention/bias-table", IR_OP_ATTENTION, IN2(X(-1, 6, 24), W(1, 2, 6, 6)), AT2(AI(HEADS, 2), AI(HEAD_SIZE, 4)),
     .formula = f_attention},
    /* windowed: 4 windows of each image (4B images), the bias one row per window */
    {"Attention/bias-windows", IR_OP_ATTENTION, IN2(X(-4, 5, 24), W(4, 2, 5, 5)), AT2(AI(HEADS, 2), AI(HEAD_SIZE, 4)),
     .formula = f_attention},
    /* cross-attention: kv [B, 6, 2*H*D], no bias, queries [B, 3, H*D]; a learned single query with a bias */
    {"Attention/cross", IR_OP_ATTENTION, IN3(X(-1, 6, 16), NONE, X(-1, 3, 8)), AT2(AI(HEADS, 2), AI(HEAD_SIZE, 4)),
     .formula = f_attention},
    {"Attention/cross-bias", IR_OP_ATTENTION, IN3(X(-1, 7, 16), W(1, 2, 1, 7), X(-1, 1, 8)),
     AT4(AI(HEADS, 2), AI(HEAD_SIZE, 4), AI(QKV_LAYOUT, 1), AF(SCALE, 0.5f)), .formula = f_attention},
    /* the head sizes of ViT-H/14 (80), SigLIP so400m (72) and ViT-g/14 (88): not whole vectors */
    {"Attention/d72", IR_OP_ATTENTION, IN1(X(-1, 9, 432)), AT3(AI(HEADS, 2), AI(HEAD_SIZE, 72), AF(SCALE, 0.118f)),
     .formula = f_attention},
    {"Attention/d80", IR_OP_ATTENTION, IN1(X(-1, 5, 480)), AT3(AI(HEADS, 2), AI(HEAD_SIZE, 80), AF(SCALE, 0.112f)),
     .formula = f_attention},
    {"Attention/d88", IR_OP_ATTENTION, IN1(X(-1, 6, 264)), AT3(AI(HEADS, 1), AI(HEAD_SIZE, 88), AF(SCALE, 0.107f)),
     .formula = f_attention},
    /* rotary embeddings: tokens 2.. rotated by halves; all of them interleaved, with a bias; layout 1 */
    {"Attention/rope", IR_OP_ATTENTION, IN4(X(-1, 7, 24), NONE, NONE, W(2, 5, 4)),
     AT4(AI(HEADS, 2), AI(HEAD_SIZE, 4), AI(ROPE_PAIRING, IR_ROPE_HALVES), AI(ROPE_START, 2)), .formula = f_attention},
    {"Attention/rope-interleaved-bias", IR_OP_ATTENTION, IN4(X(-1, 6, 48), W(1, 2, 6, 6), NONE, W(2, 6, 8)),
     AT5(AI(HEADS, 2), AI(HEAD_SIZE, 8), AF(SCALE, 0.35f), AI(ROPE_PAIRING, IR_ROPE_INTERLEAVED), AI(ROPE_START, 0)),
     .formula = f_attention},
    {"Attention/rope-per-head", IR_OP_ATTENTION, IN4(X(-1, 6, 24), NONE, NONE, W(2, 2, 4, 4)),
     AT4(AI(HEADS, 2), AI(HEAD_SIZE, 4), AI(ROPE_PAIRING, IR_ROPE_INTERLEAVED), AI(ROPE_START, 2)),
     .formula = f_attention},
    {"Attention/rope-layout1", IR_OP_ATTENTION, IN4(X(-1, 5, 24), NONE, NONE, W(2, 4, 4)),
     AT5(AI(HEADS, 2), AI(HEAD_SIZE, 4), AI(QKV_LAYOUT, 1), AI(ROPE_PAIRING, IR_ROPE_HALVES), AI(ROPE_START, 1)),
     .formula = f_attention},
};
enum { NROWS = sizeof rows / sizeof rows[0], NB = 2, MAXIN = 9 };
static const int64_t batches[NB] = {1, 3};

/* ---- building and feeding the rows ---- */

static char tmpdir[4096];
static ir_tensor inputs[NB][NROWS][MAXIN]; /* per batch, row, graph input of the row */
static ir_tensor refs[NB][NROWS][3];        /* the interpreter's outputs */
static float *consts[NROWS][MAXIN];         /* the values of the rows' 'w' constants, for the formulas */

static int is_input(char kind)
{
    return kind == 'x' || kind == 'p' || kind == 'b' || kind == 'i' || kind == 'n' || kind == 'u';
}

static ir_dtype input_dtype(char kind)
{
    return kind == 'b' ? IR_BOOL : kind == 'i' ? IR_I64 : kind == 'u' ? IR_U8 : IR_F32;
}

/* A constant of dtype dt: vals (one of them for a scalar), else i8 values in
 * [-127, 127] ('j') or scales 0.01 * (1 + i / 4) ('g'). */
static int quant_const(ir_graph *g, const char *name, const in_spec *s, ir_dtype dt)
{
    ir_tensor t;
    assert_int_equal(ir_tensor_alloc(&t, dt, s->rank, s->dims), VITC_OK);
    for (int64_t i = 0; i < ir_tensor_numel(&t); i++)
        ir_tensor_set(&t, i, s->n ? (double)s->vals[0] : s->kind == 'g' ? 0.01 * (1 + i / 4.0) : floor(127 * tu_rnd()));
    int v = ir_add_const(g, name, dt, s->rank, s->dims, t.data, ir_tensor_nbytes(&t));
    assert_true(v >= 0);
    ir_tensor_free(&t);
    return v;
}

/* Adds row r to g (its inputs named r<r>_<k>, its outputs marked); constants
 * come from a seed of their own, so every graph holding the row has the same. */
static void add_row(ir_graph *g, int r)
{
    const op_row *w = &rows[r];
    int in[MAXIN + 1], out[3];
    tu_seed(0x5851f42d4c957f2dull + (uint64_t)r);
    for (int k = 0; k < w->nin; k++) {
        const in_spec *s = &w->in[k];
        char name[32];
        snprintf(name, sizeof name, "r%d_%d", r, k);
        if (is_input(s->kind))
            in[k] = tu_input(g, name, input_dtype(s->kind), s->rank, s->dims);
        else if (s->kind == 'w') {
            int64_t n = 1;
            for (int d = 0; d < s->rank; d++)
                n *= s->dims[d];
            float *v = malloc(sizeof(float) * (size_t)n);
            assert_non_null(v);
            for (int64_t i = 0; i < n; i++)
                v[i] = tu_rnd();
            in[k] = tu_const_f32(g, name, s->rank, s->dims, v);
            if (consts[r][k]) /* the same values every time (the row's seed) */
                free(v);
            else
                consts[r][k] = v;
        }
        else if (s->kind == 's')
            in[k] = tu_scalar(g, name, s->f);
        else if (s->kind == '-')
            in[k] = -1;
        else if (s->kind == 'j' || s->kind == 'y')
            in[k] = quant_const(g, name, s, IR_I8);
        else if (s->kind == 'z')
            in[k] = quant_const(g, name, s, IR_U8);
        else if (s->kind == 'g')
            in[k] = quant_const(g, name, s, IR_F32);
        else
            in[k] = tu_const_i64(g, name, s->rank, s->dims, s->vals);
    }
    ir_attr at[sizeof rows[0].at / sizeof rows[0].at[0]];
    for (int k = 0; k < w->nattrs; k++) {
        const attr_spec *a = &w->at[k];
        at[k] = a->kind == 'i'   ? tu_int(a->id, a->i)
                : a->kind == 'f' ? tu_float(a->id, a->f)
                : a->kind == 's' ? tu_str(a->id, a->s)
                : a->kind == 'F' ? tu_floats(g, a->id, a->n, a->floats)
                                 : tu_ints(g, a->id, a->n, a->ints);
    }
    int nout = w->nout ? w->nout : 1;
    char name[40];
    for (int o = 0; o < nout; o++) {
        snprintf(name, sizeof name, "r%d_out%d", r, o);
        out[o] = tu_value(g, name, w->dt);
    }
    snprintf(name, sizeof name, "r%d_%s", r, w->name);
    tu_node_out(g, w->op, name, w->nin, in, nout, out, w->nattrs, at);
    for (int o = 0; o < nout; o++)
        tu_output(g, out[o]);
}

/* A graph of the rows whose bit is set in take (NULL: all). */
static ir_graph *build(const char *what, const unsigned char *take)
{
    ir_graph *g = tu_graph_new(what, 18);
    for (int r = 0; r < NROWS; r++)
        if (!take || take[r])
            add_row(g, r);
    tu_check_graph(g, what);
    return g;
}

/* The inputs of the rows of take, in graph order, for a batch. */
static int gather_inputs(const unsigned char *take, int b, ir_tensor *in)
{
    int n = 0;
    for (int r = 0; r < NROWS; r++)
        for (int k = 0; take[r] && k < rows[r].nin; k++)
            if (is_input(rows[r].in[k].kind))
                in[n++] = inputs[b][r][k];
    return n;
}

static void make_inputs(void)
{
    tu_seed(0x9e3779b97f4a7c15ull);
    for (int b = 0; b < NB; b++)
        for (int r = 0; r < NROWS; r++)
            for (int k = 0; k < rows[r].nin; k++) {
                const in_spec *s = &rows[r].in[k];
                if (!is_input(s->kind))
                    continue;
                int64_t dims[IR_MAX_RANK];
                for (int d = 0; d < s->rank; d++)
                    dims[d] = s->dims[d] < 0 ? -s->dims[d] * batches[b] : s->dims[d];
                ir_tensor *t = &inputs[b][r][k];
                assert_int_equal(ir_tensor_alloc(t, input_dtype(s->kind), s->rank, dims), 0);
                for (int64_t i = 0; i < ir_tensor_numel(t); i++) {
                    double u = tu_rnd();
                    if (s->kind == 'x')
                        ir_tensor_set(t, i, 2 * u);
                    else if (s->kind == 'p')
                        ir_tensor_set(t, i, 1.1 + u);
                    else if (s->kind == 'n') /* 'x' with a NaN in every third element */
                        ir_tensor_set(t, i, i % 3 == 1 ? NAN : 2 * u);
                    else if (s->kind == 'b')
                        ir_tensor_set_i64(t, i, u > 0);
                    else if (s->kind == 'u')
                        ir_tensor_set_i64(t, i, (int64_t)floor(128 + 127.9 * u));
                    else
                        ir_tensor_set_i64(t, i, (int64_t)floor(20 * u));
                }
            }
}

/* ---- the interpreter against the scalar formulas ---- */

/* The value of input k of row r at output element i (numpy broadcasting). */
static double operand(int r, int b, int k, const ir_tensor *out, int64_t i)
{
    const in_spec *s = &rows[r].in[k];
    if (s->kind == 's')
        return s->f;
    if (!is_input(s->kind))
        fail_msg("row %s: element-wise rows take graph inputs and scalars only", rows[r].name);
    const ir_tensor *t = &inputs[b][r][k];
    int64_t coord[IR_MAX_RANK], idx = 0, stride = 1, rem = i;
    for (int d = out->rank - 1; d >= 0; d--) {
        coord[d] = rem % out->dims[d];
        rem /= out->dims[d];
    }
    for (int d = t->rank - 1; d >= 0; d--) {
        idx += (t->dims[d] == 1 ? 0 : coord[d + out->rank - t->rank]) * stride;
        stride *= t->dims[d];
    }
    return ir_dtype_is_float(t->dtype) ? ir_tensor_get(t, idx) : (double)ir_tensor_get_i64(t, idx);
}

/* The worst relative error of the interpreter's out against want (its
 * numel values): max |got - want| / max |want|, INFINITY where a NaN or an
 * infinity of either side is not matched by the other. */
static double compare(const ir_tensor *out, const double *want)
{
    double maxdiff = 0, maxref = 0;
    for (int64_t i = 0; i < ir_tensor_numel(out); i++) {
        double got = ir_dtype_is_float(out->dtype) ? ir_tensor_get(out, i) : (double)ir_tensor_get_i64(out, i);
        if (isnan(want[i]) || isnan(got)) { /* fmax would drop a NaN: a NaN matches only a NaN */
            if (isnan(want[i]) != isnan(got))
                return INFINITY;
            continue;
        }
        if (isinf(want[i]) || isinf(got)) { /* an infinity matches only itself (inf - inf is NaN) */
            if (got != want[i])
                return INFINITY;
            continue;
        }
        if (fabs(got - want[i]) > maxdiff)
            maxdiff = fabs(got - want[i]);
        if (fabs(want[i]) > maxref)
            maxref = fabs(want[i]);
    }
    return maxdiff / (maxref > 0 ? maxref : 1);
}

/* Row r's operands at batch b in double, for its whole-tensor formula; free
 * each .v. */
static void operands(int r, int b, dten *d)
{
    for (int k = 0; k < rows[r].nin; k++) {
        const in_spec *s = &rows[r].in[k];
        const ir_tensor *t = is_input(s->kind) ? &inputs[b][r][k] : NULL;
        d[k].rank = s->kind == '-' ? -1 : t ? t->rank : s->kind == 's' ? 0 : s->rank;
        if (d[k].rank < 0) {
            d[k].v = NULL;
            continue;
        }
        memcpy(d[k].dims, t ? t->dims : s->kind == 'c' ? (const int64_t[]){s->n} : s->dims,
               sizeof(int64_t) * (size_t)d[k].rank);
        int64_t n = d_count(d[k].rank, d[k].dims);
        d[k].v = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
        assert_non_null(d[k].v);
        for (int64_t i = 0; i < n; i++)
            d[k].v[i] = t ? (ir_dtype_is_float(t->dtype) ? ir_tensor_get(t, i) : (double)ir_tensor_get_i64(t, i))
                        : s->kind == 's' ? s->f
                        : s->kind == 'c' ? (double)s->vals[i]
                                         : consts[r][k][i];
    }
}

/* Returns the worst relative error of the interpreter against row r's
 * formula at batch b (compare), INFINITY where the shapes differ. */
static double check_formula(int r, int b)
{
    const ir_tensor *out = &refs[b][r][0];
    int64_t n = ir_tensor_numel(out);
    double *want = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1)), e;
    assert_non_null(want);
    if (rows[r].ref) {
        for (int64_t i = 0; i < n; i++) {
            double a[MAXIN];
            for (int k = 0; k < rows[r].nin; k++)
                a[k] = operand(r, b, k, out, i);
            want[i] = rows[r].ref(a);
        }
        e = compare(out, want);
    } else {
        dten in[MAXIN], y = {0};
        operands(r, b, in);
        rows[r].formula(&rows[r], in, &y);
        int same = y.rank == out->rank && !memcmp(y.dims, out->dims, sizeof(int64_t) * (size_t)y.rank);
        if (!same)
            print_message("%-22s interp: shape of rank %d, the formula's of rank %d (or the dims differ)\n",
                          rows[r].name, out->rank, y.rank);
        e = same ? compare(out, y.v) : INFINITY;
        for (int k = 0; k < rows[r].nin; k++)
            free(in[k].v);
        free(y.v);
    }
    free(want);
    return e;
}

/* ---- the backends ---- */

/* The rows a backend is expected to refuse, by name, with why: committed so
 * that a row a backend stops supporting fails the test (it is not in the
 * list), and a row it comes to support fails too until it is taken off the
 * list (one line), so the list stays true.  NULL-terminated. */
typedef struct {
    const char *row, *why;
} expected_skip;

#define Q_FOLDED "quantized ONNX: folded on constants; on computed tensors the lower-quant pass makes f32 ops of it"
/* the rows of ops both backends leave to the fold pass (cg_refuse_folded_only) */
#define FOLDED_ONLY                                                                                                    \
    {"Resize/axes", "folded where its input is a constant; not run on computed tensors yet"},                         \
        {"Size", "computed from shapes: folded at compile time"}, {"QuantizeLinear", Q_FOLDED},                       \
        {"QuantizeLinear/axis", Q_FOLDED}, {"DequantizeLinear", Q_FOLDED}, {"DynamicQuantizeLinear", Q_FOLDED},       \
        {"MatMulInteger", Q_FOLDED}, {"ConvInteger", Q_FOLDED}, {"QLinearMatMul", Q_FOLDED},                          \
        {"QLinearConv", Q_FOLDED}, {"QLinearAdd", Q_FOLDED}, {"QLinearMul", Q_FOLDED}, {"QLinearSoftmax", Q_FOLDED},  \
        {"QLinearConcat", Q_FOLDED}, {"QGemm", Q_FOLDED}
static const expected_skip cpu_skips[] = {
    {"Gemm/transA", "the LLVM backend has no Gemm with transA=1"},
    FOLDED_ONLY,
    {NULL, NULL},
};
static const expected_skip cuda_skips[] = {
    {"Cast/f32->i64", "element-wise ops compute in fp32 on the GPU and give float or bool"},
    {"Add/i64", "element-wise ops compute in fp32 on the GPU and give float or bool"},
    {"Attention/fake-quant", "quantized attention runs unfused on CUDA (fuse-attention keeps it so there)"},
    {"Attention/fake-quant-p", "quantized attention runs unfused on CUDA (fuse-attention keeps it so there)"},
    {"QuantLookup", "QuantLookup (int8 models' tables) runs on the CPU only"},
    {"QuantLookup/i8-saturating", "QuantLookup (int8 models' tables) runs on the CPU only"},
    FOLDED_ONLY,
    {NULL, NULL},
};
/* Rows of `rows` that check the interpreter against a formula (.ref or .formula). */
#define FORMULA_ROWS 94

/* The rows without a formula, checked against the interpreter alone, with
 * why: committed like the skip lists (a row without a formula that is not
 * listed fails, and so does a listed row that has one).  The interpreter's
 * ops of these rows are checked against ONNX's own node tests
 * (test_onnx_node runs Transpose, Slice, Concat, Gather, Expand, Split,
 * Tile, Pad, GatherND, ScatterND and Size). */
#define MOVES "moves elements by index and computes none; its interpreter op is checked by ONNX's node tests"
static const expected_skip interp_only[] = {
    {"Transpose", MOVES},    {"Slice", MOVES},        {"Slice/steps", MOVES}, {"Concat", MOVES},
    {"Concat/batch", MOVES}, {"Gather", MOVES},       {"Gather/scalar", MOVES}, {"Expand", MOVES},
    {"Split", MOVES},        {"Tile", MOVES},         {"Pad", MOVES},         {"Pad/reflect", MOVES},
    {"Pad/edge", MOVES},     {"GatherND", MOVES},     {"ScatterND", MOVES},
    {"ScatterND/add", "moves elements by index, adding some; its interpreter op is checked by ONNX's node tests"},
    {"Tile/batch", MOVES},   {"Tile/rank4", MOVES},    {"Pad/zero-axes", MOVES}, {"Pad/reflect-wide", MOVES},
    {"Pad/edge-crop", MOVES}, {"Pad/wrap", MOVES},      {"GatherND/batch_dims", MOVES},
    {"GatherND/inner-batch", MOVES},
    {"ScatterND/max-repeated", "moves elements by index, keeping the larger; its interpreter op is checked by ONNX's "
                               "node tests"},
    {"ScatterND/min-run", "moves elements by index, keeping the smaller; its interpreter op is checked by ONNX's node "
                          "tests"},
    {"ScatterND/mul-rows", "moves elements by index, multiplying some; its interpreter op is checked by ONNX's node "
                           "tests"},
    {"Resize/axes", "interpolates along two axes; its interpreter op is checked against ONNX's reference on the "
                    "fixtures of tests/data/resize (test_interp)"},
    {"Size", "an element count computed from the shape alone; its interpreter op is checked by ONNX's node tests"},
#define QUANT "quantized ONNX; its interpreter op is checked by ONNX's node tests and test_interp's hand-worked cases"
    {"QuantizeLinear", QUANT},        {"QuantizeLinear/axis", QUANT}, {"DequantizeLinear", QUANT},
    {"DynamicQuantizeLinear", QUANT}, {"MatMulInteger", QUANT},       {"ConvInteger", QUANT},
    {"QLinearMatMul", QUANT},         {"QLinearConv", QUANT},
#define QOP "ONNX Runtime's QOperator op; its interpreter op is checked against ONNX Runtime by test_qop_ops"
    {"QLinearAdd", QOP},              {"QLinearMul", QOP},            {"QLinearSoftmax", QOP},
    {"QLinearConcat", QOP},           {"QGemm", QOP},
    {NULL, NULL},
};

typedef struct {
    const char *name;
    const cg_backend *be;
    const expected_skip *expect; /* the rows it is expected to refuse */
    int ran, skipped;
    double worst;
    const char *worst_row;
} backend_run;

/* The entry of list naming row, else NULL. */
static const expected_skip *listed(const expected_skip *list, const char *row)
{
    for (; list->row; list++)
        if (strcmp(list->row, row) == 0)
            return list;
    return NULL;
}

/* Fails the test if a row of the expected-skip list is not a row of `rows` (a typo). */
static void check_skip_list(const char *backend, const expected_skip *list)
{
    for (; list->row; list++) {
        int found = 0;
        for (int r = 0; r < NROWS && !found; r++)
            found = strcmp(rows[r].name, list->row) == 0;
        if (!found)
            fail_msg("%s: the expected-skip list names '%s', which is no row", backend, list->row);
    }
}

/* Runs the compiled graph of the rows in take on a backend at batch b; outputs in out. */
typedef void (*run_fn)(const char *so, const char *emu, const ir_tensor *in, int nin, ir_tensor *out, int nout,
                       int64_t batch);

static void run_cpu(const char *so, const char *emu, const ir_tensor *in, int nin, ir_tensor *out, int nout,
                    int64_t batch)
{
    (void)emu;
    tu_run_so(so, in, nin, out, nout, batch);
}

#ifdef VITC_HAVE_CUDA
static void run_emu(const char *so, const char *emu, const ir_tensor *in, int nin, ir_tensor *out, int nout,
                    int64_t batch)
{
    int nl;
    tu_emulate(so, emu, batch, in, nin, out, nout, &nl);
}
#endif

/* Asks the backend about each row, compiles the ones it supports into one
 * .so, runs it at each batch and compares every output with the
 * interpreter's; returns the count of failures. */
static int check_backend(backend_run *br, run_fn run)
{
    ir_graph *all = build("ops.onnx", NULL);
    unsigned char take[NROWS];
    int node = 0, failures = 0;
    check_skip_list(br->name, br->expect);
    for (int r = 0; r < NROWS; r++) {
        char why[256] = "";
        take[r] = (unsigned char)br->be->supports(all, &all->nodes[node++], why, sizeof why);
        const expected_skip *x = listed(br->expect, rows[r].name);
        if (!take[r]) {
            br->skipped++;
            print_message("%-22s %-5s skipped: %s\n", rows[r].name, br->name, why);
            if (!x) {
                failures++;
                print_message("%-22s %-5s FAIL: refused, and not in the %s backend's expected-skip list\n",
                              rows[r].name, br->name, br->name);
            }
        } else if (x) {
            failures++;
            print_message("%-22s %-5s FAIL: supported now, but listed as skipped (%s): take it off the %s "
                          "backend's expected-skip list in tests/test_ops.c\n",
                          rows[r].name, br->name, x->why, br->name);
        }
    }
    ir_graph_free(all);
    ir_graph *g = build("ops.onnx", take);
    char so[4200], cu[4200], emu[8300] = "";
    snprintf(so, sizeof so, "%s/ops-%s.so", tmpdir, br->name);
    vitc_diag d;
    vitc_diag_init(&d, "ops.onnx");
    cg_options opt = {.output = so, .source = "ops.onnx", .max_batch = 3, .opt_level = 2, .precision = "fp32"};
    if (cg_compile(br->be, g, &opt, &d) != VITC_OK)
        fail_msg("%s: the backend failed on the rows it says it supports (status %d)", br->name, d.status);
#ifdef VITC_HAVE_CUDA
    if (run != run_cpu) {
        snprintf(cu, sizeof cu, "%s/ops-%s.cu", tmpdir, br->name);
        opt.output = cu;
        opt.emit_source = 1;
        if (cg_compile(br->be, g, &opt, &d) != VITC_OK)
            fail_msg("%s: --emit cuda failed", br->name);
        tu_emu_build(cu, emu, sizeof emu);
    }
#endif
    static ir_tensor in[TU_MAX_IO], out[TU_MAX_IO];
    double err[NROWS] = {0};
    for (int b = 0; b < NB; b++) {
        int nin = gather_inputs(take, b, in);
        run(so, emu, in, nin, out, g->noutputs, batches[b]);
        int o = 0;
        for (int r = 0; r < NROWS; r++) {
            if (!take[r])
                continue;
            for (int k = 0; k < (rows[r].nout ? rows[r].nout : 1); k++, o++) {
                double e = tu_error(&out[o], &refs[b][r][k]);
                err[r] = e > err[r] || isnan(e) ? e : err[r]; /* fmax would drop a NaN */
                ir_tensor_free(&out[o]);
            }
        }
    }
    for (int r = 0; r < NROWS; r++) {
        if (!take[r])
            continue;
        double tol = rows[r].tol > 0 ? rows[r].tol : 1e-4;
        br->ran++;
        if (err[r] > br->worst || !br->worst_row)
            br->worst = err[r], br->worst_row = rows[r].name;
        if (!(err[r] <= tol)) {
            failures++;
            print_message("%-22s %-5s FAIL: rel error %.3g > tolerance %.3g\n", rows[r].name, br->name, err[r], tol);
        }
    }
    print_message("%s: %d rows ran, %d skipped, worst rel error %.3g (%s)\n", br->name, br->ran, br->skipped,
                  br->worst, br->worst_row ? br->worst_row : "-");
    unlink(so);
    if (*cu)
        unlink(cu);
    ir_graph_free(g);
    return failures;
}

static void test_every_row_on_every_backend(void **state)
{
    (void)state;
    make_inputs();
    /* the interpreter: the ground truth, itself checked against the formulas */
    ir_graph *g = build("ops.onnx", NULL);
    unsigned char every[NROWS];
    memset(every, 1, sizeof every);
    int failures = 0, formulas = 0;
    double worst_formula = 0;
    for (int b = 0; b < NB; b++) {
        ir_tensor in[TU_MAX_IO], out[TU_MAX_IO];
        int nin = gather_inputs(every, b, in);
        assert_int_equal(nin, g->ninputs);
        tu_interpret_ok(g, in, out);
        int o = 0;
        for (int r = 0; r < NROWS; r++)
            for (int k = 0; k < (rows[r].nout ? rows[r].nout : 1); k++)
                refs[b][r][k] = out[o++];
        for (int r = 0; r < NROWS; r++) {
            if (!rows[r].ref && !rows[r].formula)
                continue;
            double e = check_formula(r, b), tol = rows[r].tol > 0 ? rows[r].tol : 1e-6;
            formulas += b == 0;
            worst_formula = e > worst_formula || isnan(e) ? e : worst_formula;
            if (!(e <= tol)) {
                failures++;
                print_message("%-22s interp FAIL at batch %lld: rel error %.3g against the formula > %.3g\n",
                              rows[r].name, (long long)batches[b], e, tol);
            }
        }
    }
    ir_graph_free(g);
    print_message("interp: %d rows checked against a double formula (of %d), worst rel error %.3g\n", formulas,
                  (int)NROWS, worst_formula);
    if (formulas != FORMULA_ROWS) {
        failures++;
        print_message("interp FAIL: %d rows have a formula, FORMULA_ROWS says %d\n", formulas, FORMULA_ROWS);
    }
    check_skip_list("interp", interp_only);
    int unchecked = 0;
    for (int r = 0; r < NROWS; r++) {
        const expected_skip *x = listed(interp_only, rows[r].name);
        int has = rows[r].ref || rows[r].formula;
        unchecked += !has;
        if (!has && x)
            print_message("%-22s interp only: %s\n", rows[r].name, x->why);
        else if (!has) {
            failures++;
            print_message("%-22s interp FAIL: no formula, and not in interp_only (say why there)\n", rows[r].name);
        } else if (x) {
            failures++;
            print_message("%-22s interp FAIL: has a formula, but listed in interp_only: take it off\n", rows[r].name);
        }
    }
    print_message("interp: %d rows without a formula, checked against the interpreter alone (listed above)\n",
                  unchecked);

    backend_run cpu = {.name = "cpu", .be = &cg_llvm_backend, .expect = cpu_skips};
    failures += check_backend(&cpu, run_cpu);
    int skipped = cpu.skipped;
#ifdef VITC_HAVE_CUDA
    backend_run cuda = {.name = "cuda", .be = &cg_cuda_backend, .expect = cuda_skips};
    failures += check_backend(&cuda, run_emu);
    skipped += cuda.skipped;
#else
    print_message("cuda: not built, no rows ran\n");
#endif
    print_message("%d rows; %d (row, backend) pairs skipped as unsupported\n", (int)NROWS, skipped);
    for (int b = 0; b < NB; b++)
        for (int r = 0; r < NROWS; r++) {
            for (int k = 0; k < MAXIN; k++)
                ir_tensor_free(&inputs[b][r][k]);
            for (int k = 0; k < 3; k++)
                ir_tensor_free(&refs[b][r][k]);
        }
    for (int r = 0; r < NROWS; r++)
        for (int k = 0; k < MAXIN; k++)
            free(consts[r][k]), consts[r][k] = NULL;
    if (failures)
        fail_msg("%d checks failed (the FAIL lines above)", failures);
}

static int setup(void **state)
{
    (void)state;
#ifdef VITC_HAVE_CUDA
    if (tu_emu_init())
        return -1;
#endif
    *state = tu_tmpdir(tmpdir, sizeof tmpdir);
    return *state ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_every_row_on_every_backend)};
    return tu_run_group(tests, setup, tu_teardown_tmpdir);
}
