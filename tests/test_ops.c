/* test_ops.c: every op as a row {op, attributes, input shapes, tolerance},
 * run through each backend against the reference interpreter.
 *
 *  - the interpreter: element-wise rows that give a scalar formula are
 *    checked against it in double precision, with numpy broadcasting done here;
 *  - the CPU backend: the rows it supports, one node each, compiled into one
 *    .so by the LLVM backend and run through the runtime at batch 1 and 3;
 *  - the CUDA emulation (built with CUDA): the same in fp32, the generated
 *    program compiled for the host against tests/cuda_emu.h.
 * A row a backend does not support (its `supports` says no) is skipped for
 * that backend only, with the reason; the counts are printed at the end.
 * Which rows each backend skips is committed (cpu_skips, cuda_skips), and so
 * is the count of rows with a formula (FORMULA_ROWS): a row refused that is
 * not listed fails, and so does a listed row that runs.
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
    char kind; /* 'i' int, 'f' float, 's' string, 'I' ints */
    int64_t i;
    float f;
    const char *s;
    int n;
    int64_t ints[6];
} attr_spec;

typedef struct {
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
    {"Softmax", IR_OP_SOFTMAX, IN1(X(-1, 5, 6))},
    {"Softmax/axis1", IR_OP_SOFTMAX, IN1(X(-1, 5, 6)), AT1(AI(AXIS, 1))},
    {"LayerNorm", IR_OP_LAYERNORM, IN3(X(-1, 5, 16), W(16), W(16)), AT1(AF(EPSILON, 1e-5f))},
    {"LayerNorm/axis1", IR_OP_LAYERNORM, IN3(X(-1, 5, 6), W(5, 6), W(5, 6)), AT2(AI(AXIS, 1), AF(EPSILON, 1e-3f))},
    {"RMSNorm", IR_OP_RMS_NORM, IN2(X(-1, 5, 16), W(16)), AT1(AF(EPSILON, 1e-6f))},
    {"RMSNorm/axis1", IR_OP_RMS_NORM, IN2(X(-1, 5, 6), W(5, 6)), AT2(AI(AXIS, 1), AF(EPSILON, 1e-3f))},
    {"ReduceMean", IR_OP_REDUCE_MEAN, IN1(X(-1, 5, 6)), AT1(AIS(AXES, -1))},
    {"ReduceMean/all", IR_OP_REDUCE_MEAN, IN1(X(-1, 5, 6))},
    {"ReduceSum", IR_OP_REDUCE_SUM, IN1(X(-1, 5, 6)), AT2(AIS(AXES, 1), AI(KEEPDIMS, 0))},
    {"ReduceMax", IR_OP_REDUCE_MAX, IN2(X(-1, 5, 6), C(0, 2))},
    {"ReduceMin", IR_OP_REDUCE_MIN, IN1(X(-1, 5, 6)), AT2(AIS(AXES, 1), AI(KEEPDIMS, 0))},
    {"ReduceMin/all", IR_OP_REDUCE_MIN, IN1(X(-1, 5, 6))},
    /* matrix products */
    {"MatMul", IR_OP_MATMUL, IN2(X(-1, 3, 4), W(4, 5))},
    {"MatMul/batched", IR_OP_MATMUL, IN2(X(-1, 2, 3, 4), X(-1, 2, 4, 3))},
    {"MatMul/broadcast", IR_OP_MATMUL, IN2(X(-1, 2, 3, 4), X(4, 5))},
    {"Gemm", IR_OP_GEMM, IN3(X(-1, 4), W(5, 4), W(5)), AT3(AI(TRANS_B, 1), AF(ALPHA, 0.5f), AF(BETA, 2.0f))},
    {"Gemm/transA", IR_OP_GEMM, IN3(X(6, 3), X(6, 5), X(3, 1)), AT2(AI(TRANS_A, 1), AF(BETA, -1.0f))},
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
    {"Pad", IR_OP_PAD, IN3(X(-1, 4, 6), C(0, 1, 2, 0, 0, -1), S(0.5f))},
    {"Pad/reflect", IR_OP_PAD, IN2(X(-1, 4, 6), C(0, 2, 1, 0, 3, 2)), AT1(AS(MODE, "reflect"))},
    {"Pad/edge", IR_OP_PAD, IN2(X(-1, 4, 6), C(0, 1, 7, 0, 2, 0)), AT1(AS(MODE, "edge"))},
    {"GatherND", IR_OP_GATHER_ND, IN2(X(-1, 4, 6), C(0, 3))},
    {"ScatterND", IR_OP_SCATTER_ND, IN3(X(-1, 4, 6), C(0, 2), X(6))},
    {"ScatterND/add", IR_OP_SCATTER_ND, IN3(X(-1, 4, 6), C(0, 2), X(6)), AT1(AS(REDUCTION, "add"))},
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
    /* shape ops: folded at compile time, the interpreter alone runs them */
    {"Size", IR_OP_SIZE, .dt = IR_I64, IN1(X(-1, 4, 6))},
    /* fused: Linear with each activation, Attention in both layouts, with a bias broadcast or not */
    {"Linear", IR_OP_LINEAR, IN4(X(-1, 5, 8), W(8, 6), W(6), X(-1, 5, 6)), AT1(AI(ACTIVATION, IR_ACT_NONE))},
    {"Linear/gelu", IR_OP_LINEAR, IN3(X(-1, 5, 8), W(8, 6), W(6)), AT1(AI(ACTIVATION, IR_ACT_GELU_ERF))},
    {"Linear/gelu-tanh", IR_OP_LINEAR, IN3(X(-1, 5, 8), W(8, 6), W(6)), AT1(AI(ACTIVATION, IR_ACT_GELU_TANH))},
    {"Linear/quick-gelu", IR_OP_LINEAR, IN3(X(-1, 5, 8), W(8, 6), W(6)), AT1(AI(ACTIVATION, IR_ACT_QUICK_GELU))},
    {"Linear/silu", IR_OP_LINEAR, IN3(X(-1, 5, 8), W(8, 6), W(6)), AT1(AI(ACTIVATION, IR_ACT_SILU))},
    {"Linear/gate", IR_OP_LINEAR, .nin = 5, .in = {X(-1, 5, 8), W(8, 6), W(6), NONE, X(-1, 5, 6)}},
    {"Linear/gate-gelu", IR_OP_LINEAR, .nin = 5, .in = {X(-1, 5, 8), W(8, 6), NONE, NONE, X(-1, 5, 6)},
     AT1(AI(ACTIVATION, IR_ACT_GELU_ERF))},
    /* K in several blocks: the partial sums pass through the output, the gate is read at the end */
    {"Linear/gate-kblocked", IR_OP_LINEAR, .nin = 5, .in = {X(-1, 3, 300), W(300, 40), W(40), NONE, X(-1, 3, 40)},
     AT1(AI(ACTIVATION, IR_ACT_SILU))},
    {"Linear/relu", IR_OP_LINEAR, IN2(X(-1, 5, 6), W(6, 3)), AT1(AI(ACTIVATION, IR_ACT_RELU))},
    {"Linear/relu6", IR_OP_LINEAR, IN2(X(-1, 5, 8), W(8, 6)), AT1(AI(ACTIVATION, IR_ACT_RELU6))},
    {"Attention", IR_OP_ATTENTION, IN1(X(-1, 7, 24)), AT3(AI(HEADS, 2), AI(HEAD_SIZE, 4), AF(SCALE, 0.5f))},
    {"Attention/interleaved", IR_OP_ATTENTION, IN1(X(-1, 5, 24)),
     AT4(AI(HEADS, 2), AI(HEAD_SIZE, 4), AI(QKV_LAYOUT, 1), AF(POST_SCALE, 0.25f))},
    {"Attention/bias", IR_OP_ATTENTION, IN2(X(-1, 7, 24), X(-1, 2, 7, 7)), AT2(AI(HEADS, 2), AI(HEAD_SIZE, 4))},
    {"Attention/bias-broadcast", IR_OP_ATTENTION, IN2(X(-1, 5, 24), W(1, 2, 1, 5)),
     AT4(AI(HEADS, 2), AI(HEAD_SIZE, 4), AI(QKV_LAYOUT, 1), AF(SCALE, 0.5f))},
    {"Attention/bias-table", IR_OP_ATTENTION, IN2(X(-1, 6, 24), W(1, 2, 6, 6)), AT2(AI(HEADS, 2), AI(HEAD_SIZE, 4))},
    /* windowed: 4 windows of each image (4B images), the bias one row per window */
    {"Attention/bias-windows", IR_OP_ATTENTION, IN2(X(-4, 5, 24), W(4, 2, 5, 5)), AT2(AI(HEADS, 2), AI(HEAD_SIZE, 4))},
    /* cross-attention: kv [B, 6, 2*H*D], no bias, queries [B, 3, H*D]; a learned single query with a bias */
    {"Attention/cross", IR_OP_ATTENTION, IN3(X(-1, 6, 16), NONE, X(-1, 3, 8)), AT2(AI(HEADS, 2), AI(HEAD_SIZE, 4))},
    {"Attention/cross-bias", IR_OP_ATTENTION, IN3(X(-1, 7, 16), W(1, 2, 1, 7), X(-1, 1, 8)),
     AT4(AI(HEADS, 2), AI(HEAD_SIZE, 4), AI(QKV_LAYOUT, 1), AF(SCALE, 0.5f))},
    /* the head sizes of ViT-H/14 (80), SigLIP so400m (72) and ViT-g/14 (88): not whole vectors */
    {"Attention/d72", IR_OP_ATTENTION, IN1(X(-1, 9, 432)), AT3(AI(HEADS, 2), AI(HEAD_SIZE, 72), AF(SCALE, 0.118f))},
    {"Attention/d80", IR_OP_ATTENTION, IN1(X(-1, 5, 480)), AT3(AI(HEADS, 2), AI(HEAD_SIZE, 80), AF(SCALE, 0.112f))},
    {"Attention/d88", IR_OP_ATTENTION, IN1(X(-1, 6, 264)), AT3(AI(HEADS, 1), AI(HEAD_SIZE, 88), AF(SCALE, 0.107f))},
    /* rotary embeddings: tokens 2.. rotated by halves; all of them interleaved, with a bias; layout 1 */
    {"Attention/rope", IR_OP_ATTENTION, IN4(X(-1, 7, 24), NONE, NONE, W(2, 5, 4)),
     AT4(AI(HEADS, 2), AI(HEAD_SIZE, 4), AI(ROPE_PAIRING, IR_ROPE_HALVES), AI(ROPE_START, 2))},
    {"Attention/rope-interleaved-bias", IR_OP_ATTENTION, IN4(X(-1, 6, 48), W(1, 2, 6, 6), NONE, W(2, 6, 8)),
     AT5(AI(HEADS, 2), AI(HEAD_SIZE, 8), AF(SCALE, 0.35f), AI(ROPE_PAIRING, IR_ROPE_INTERLEAVED), AI(ROPE_START, 0))},
    {"Attention/rope-per-head", IR_OP_ATTENTION, IN4(X(-1, 6, 24), NONE, NONE, W(2, 2, 4, 4)),
     AT4(AI(HEADS, 2), AI(HEAD_SIZE, 4), AI(ROPE_PAIRING, IR_ROPE_INTERLEAVED), AI(ROPE_START, 2))},
    {"Attention/rope-layout1", IR_OP_ATTENTION, IN4(X(-1, 5, 24), NONE, NONE, W(2, 4, 4)),
     AT5(AI(HEADS, 2), AI(HEAD_SIZE, 4), AI(QKV_LAYOUT, 1), AI(ROPE_PAIRING, IR_ROPE_HALVES), AI(ROPE_START, 1))},
};
enum { NROWS = sizeof rows / sizeof rows[0], NB = 2, MAXIN = 9 };
static const int64_t batches[NB] = {1, 3};

/* ---- building and feeding the rows ---- */

static char tmpdir[4096];
static ir_tensor inputs[NB][NROWS][MAXIN]; /* per batch, row, graph input of the row */
static ir_tensor refs[NB][NROWS][3];        /* the interpreter's outputs */

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
        else if (s->kind == 'w')
            in[k] = tu_const_f32(g, name, s->rank, s->dims, NULL);
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

/* Returns the worst relative error of the interpreter against row r's formula:
 * max |got - want| / max |want|, INFINITY where a NaN or an infinity of
 * either side is not matched by the other. */
static double check_formula(int r, int b)
{
    const ir_tensor *out = &refs[b][r][0];
    double maxdiff = 0, maxref = 0;
    for (int64_t i = 0; i < ir_tensor_numel(out); i++) {
        double a[MAXIN];
        for (int k = 0; k < rows[r].nin; k++)
            a[k] = operand(r, b, k, out, i);
        double want = rows[r].ref(a);
        double got = ir_dtype_is_float(out->dtype) ? ir_tensor_get(out, i) : (double)ir_tensor_get_i64(out, i);
        if (isnan(want) || isnan(got)) { /* fmax would drop a NaN: a NaN matches only a NaN */
            if (isnan(want) != isnan(got))
                return INFINITY;
            continue;
        }
        if (isinf(want) || isinf(got)) { /* an infinity matches only itself (inf - inf is NaN) */
            if (got != want)
                return INFINITY;
            continue;
        }
        if (fabs(got - want) > maxdiff)
            maxdiff = fabs(got - want);
        if (fabs(want) > maxref)
            maxref = fabs(want);
    }
    return maxdiff / (maxref > 0 ? maxref : 1);
}

/* ---- the backends ---- */

/* The rows a backend is expected to refuse, by name, with why: committed so
 * that a row a backend stops supporting fails the test (it is not in the
 * list), and a row it comes to support fails too until it is taken off the
 * list (one line), so the list stays true.  NULL-terminated. */
typedef struct {
    const char *row, *why;
} expected_skip;

#define ND_FOLDED "folded where its inputs are constants; not run on computed tensors yet"
#define Q_FOLDED "quantized ONNX: folded on constants; on computed tensors the lower-quant pass makes f32 ops of it"
/* the rows of ops both backends leave to the fold pass (cg_refuse_folded_only) */
#define FOLDED_ONLY                                                                                                    \
    {"Tile", "run as the Expand it becomes where the repeated axes are 1 (simplify), or folded"}, {"Pad", ND_FOLDED}, \
        {"Pad/reflect", ND_FOLDED}, {"Pad/edge", ND_FOLDED}, {"GatherND", ND_FOLDED}, {"ScatterND", ND_FOLDED},       \
        {"ScatterND/add", ND_FOLDED}, {"Size", "computed from shapes: folded at compile time"},                  \
        {"QuantizeLinear", Q_FOLDED}, {"QuantizeLinear/axis", Q_FOLDED}, {"DequantizeLinear", Q_FOLDED},             \
        {"DynamicQuantizeLinear", Q_FOLDED}, {"MatMulInteger", Q_FOLDED}, {"ConvInteger", Q_FOLDED},               \
        {"QLinearMatMul", Q_FOLDED}, {"QLinearConv", Q_FOLDED}
static const expected_skip cpu_skips[] = {
    {"Gemm/transA", "the LLVM backend has no Gemm with transA=1"},
    FOLDED_ONLY,
    {NULL, NULL},
};
static const expected_skip cuda_skips[] = {
    {"Cast/f32->i64", "element-wise ops compute in fp32 on the GPU and give float or bool"},
    {"Add/i64", "element-wise ops compute in fp32 on the GPU and give float or bool"},
    FOLDED_ONLY,
    {NULL, NULL},
};
/* Rows of `rows` that give the interpreter a scalar formula (.ref). */
#define FORMULA_ROWS 46

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
            if (!rows[r].ref)
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
    print_message("interp: %d rows checked against their formula (of %d), worst rel error %.3g\n", formulas,
                  (int)NROWS, worst_formula);
    if (formulas != FORMULA_ROWS) {
        failures++;
        print_message("interp FAIL: %d rows have a formula, FORMULA_ROWS says %d\n", formulas, FORMULA_ROWS);
    }

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
