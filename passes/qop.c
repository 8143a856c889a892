/* qop.c: ONNX Runtime's QOperator format as QuantizeLinear ->
 * DequantizeLinear pairs around float ops: the first step of lower-quant
 * (pass_lower_quant calls pass_lower_qop before anything else).
 *
 * onnxruntime.quantization.quantize_static(..., quant_format=QOperator)
 * writes a model's products and element-wise ops as integer ops that
 * requantize their results (QLinearMatMul, QLinearConv and, of its domain
 * com.microsoft, QGemm, QLinearAdd, QLinearMul, QLinearSoftmax,
 * QLinearConcat; ops.def), moves quantized tensors between them with the
 * data-movement ops (Reshape, Transpose, Split, Squeeze, ...) and leaves the
 * rest (LayerNormalization, Erf, ...) in f32 between a DequantizeLinear and a
 * QuantizeLinear.  Here each such op whose scales and zero points are
 * constants becomes what it computes in float:
 *
 *   QLinearOp(a, a_scale, a_zp, ..., y_scale, y_zp)
 *       -> QuantizeLinear(Op(DequantizeLinear(a, a_scale, a_zp), ...), y_scale, y_zp)
 *
 * with Op MatMul, Conv, Gemm, Add, Mul, Softmax or Concat.  A quantization
 * per row, column or output channel is a DequantizeLinear along that axis.
 * The i32 bias of QLinearConv and QGemm is the f32 bias B * x_scale *
 * w_scale (QGemm: times alpha too); QGemm without y_zero_point gives f32 (no
 * QuantizeLinear; divided by y_scale where that is given); QLinearSoftmax
 * with its attribute opset below 13 and an axis before the last is Softmax
 * over the flattened trailing dimensions (Flatten, Softmax, Reshape).
 * A data-movement op on the output of a QuantizeLinear (per tensor) then
 * moves its dequantized values instead:
 *
 *   Move(QuantizeLinear(x, s, z)) -> QuantizeLinear(Move(DequantizeLinear(QuantizeLinear(x, s, z))), s, z)
 *
 * which is exact (moving elements commutes with dequantizing each, and
 * quantizing a dequantized value gives it back), so that every
 * DequantizeLinear reads a QuantizeLinear.  fold then makes constants of the
 * DequantizeLinear of each weight (int8 grids in f32) and of the biases, and
 * the rest of lower-quant and the pipeline see what a QDQ export gives:
 * pairs (FakeQuant), and MatMuls with int8-grid weights that int8-linear
 * makes LinearInt8.
 *
 * That is not bit-exact against ONNX Runtime: its QLinear kernels multiply
 * the exact integer sum by one f32 multiplier (a_scale * b_scale / y_scale)
 * and round once, where the float op's result is rounded to f32 and then
 * divided by y_scale; a value within such a rounding of a half step can be
 * quantized to the neighbouring integer (docs/reference.md has the measured
 * difference).  An op whose scales or zero points are computed is left as
 * it is (the backends refuse it, naming it). */
#include "passes/rewrite.h"

#include <stdlib.h>
#include <string.h>

/* rw_append for lower-quant's nodes: add1(g, op, base, suffix, dt, nin, in, nattrs, attrs). */
#define add1(g, op, base, suffix, dt, ...) rw_append((g), (op), (base), (suffix), (dt), __VA_ARGS__, "lower-quant")

/* Value v is absent or a constant. */
static int fixed(const ir_graph *g, int v) { return v < 0 || rw_is_const(g, v); }

/* The scale s and zero point z (-1: none) of an operand of rank `rank`,
 * quantized per tensor or along `axis`: the DequantizeLinear attribute axis
 * (-1 per tensor) into *axis; 0 when they are no constants of such a form. */
static int params_of(const ir_graph *g, int s, int z, int rank, int axis, int *out_axis)
{
    if (!rw_is_const(g, s) || !fixed(g, z) || g->values[s].dtype != IR_F32)
        return 0;
    const ir_value *sv = &g->values[s];
    int64_t n = rw_numel(sv);
    if (z >= 0 && rw_numel(&g->values[z]) != n)
        return 0;
    *out_axis = -1;
    if (n == 1 && sv->rank <= 1)
        return 1;
    if (sv->rank != 1 || axis < 0 || axis >= rank)
        return 0;
    *out_axis = axis;
    return 1;
}

/* DequantizeLinear(x, s, z) along axis (-1: per tensor) -> a new f32 value, or -1. */
static int dequantize(ir_graph *g, int x, int s, int z, int axis, const char *base, const char *suffix)
{
    ir_attr at = rw_attr_int(IR_ATTR_AXIS, axis);
    int in[3] = {x, s, z};
    return add1(g, IR_OP_DEQUANTIZE_LINEAR, base, suffix, IR_F32, z >= 0 ? 3 : 2, in, axis >= 0, &at);
}

/* Node ni becomes QuantizeLinear(y, s, z) into its output; z absent: a zero
 * of the output's type.  0, or -1 when out of memory. */
static int quantize_into(ir_graph *g, int ni, int y, int s, int z)
{
    int out = g->nodes[ni].outputs[0];
    if (z < 0) {
        int64_t zero = 0;
        ir_dtype dt = g->values[out].dtype;
        z = rw_const_raw(g, g->values[out].name, "_zero_point", dt, 0, NULL, &zero, ir_dtype_size(dt));
        if (z < 0)
            return -1;
    }
    const char *name = g->nodes[ni].name;
    return rw_set_node(g, ni, IR_OP_QUANTIZE_LINEAR, name, "lower-quant", 3, (int[]){y, s, z}, 1, &out, 0, NULL);
}

/* The f32 bias of an i32 one: Cast(bias) * scale_a * scale_b (* alpha when
 * it is not 1).  The value, or -1. */
static int float_bias(ir_graph *g, int bias, int sa, int sb, float alpha, const char *base)
{
    ir_attr to = rw_attr_int(IR_ATTR_TO, ir_dtype_onnx_code(IR_F32));
    int bf = add1(g, IR_OP_CAST, base, "_bias_f32", IR_F32, 1, &bias, 1, &to);
    int s = bf < 0 ? -1 : add1(g, IR_OP_MUL, base, "_bias_scale", IR_F32, 2, (int[]){sa, sb}, 0, NULL);
    if (s >= 0 && alpha != 1.0f) {
        int a = rw_const_f32(g, base, "_alpha", 0, NULL, &alpha);
        s = a < 0 ? -1 : add1(g, IR_OP_MUL, base, "_bias_scale_alpha", IR_F32, 2, (int[]){s, a}, 0, NULL);
    }
    return s < 0 ? -1 : add1(g, IR_OP_MUL, base, "_bias_dequantized", IR_F32, 2, (int[]){bf, s}, 0, NULL);
}

/* QLinearMatMul, QLinearConv, QGemm node ni -> DequantizeLinear, MatMul /
 * Conv / Gemm, QuantizeLinear.  1 if rewritten, 0 if not, -1 out of memory. */
static int lower_contraction(ir_graph *g, int ni)
{
    const ir_node *n = &g->nodes[ni];
    ir_op op = n->op;
    int a = n->inputs[0], as = n->inputs[1], az = ir_input(n, 2), b = n->inputs[3], bs = n->inputs[4];
    int bz = ir_input(n, 5), bias = -1, ys, yz, out = n->outputs[0];
    int ra = g->values[a].rank, rb = g->values[b].rank, axa, axb;
    int tb = ir_attr_int(n, IR_ATTR_TRANS_B, 0) != 0;
    if (op == IR_OP_QLINEAR_MATMUL) /* per row of A, per column of B */
        ys = n->inputs[6], yz = n->inputs[7], axa = ra - 2, axb = rb - 1;
    else if (op == IR_OP_QLINEAR_CONV) /* w per output channel */
        ys = n->inputs[6], yz = n->inputs[7], bias = ir_input(n, 8), axa = -1, axb = 0;
    else /* QGemm: B per column */
        bias = ir_input(n, 6), ys = ir_input(n, 7), yz = ir_input(n, 8), axa = -1, axb = tb ? 0 : 1;
    if (!params_of(g, as, az, ra, axa, &axa) || !params_of(g, bs, bz, rb, axb, &axb) || !fixed(g, ys) ||
        !fixed(g, yz) || (bias >= 0 && !rw_is_const(g, bias)))
        return 0;
    int nattrs = n->nattrs;
    const ir_attr *attrs = n->attrs; /* arena memory: stays valid as nodes are added */
    float alpha = ir_attr_float(n, IR_ATTR_ALPHA, 1.0f);
    const char *base = g->values[out].name;
    int da = dequantize(g, a, as, az, axa, base, "_a_dequantized");
    int db = da < 0 ? -1 : dequantize(g, b, bs, bz, axb, base, "_b_dequantized");
    int bf = db < 0 || bias < 0 ? -1 : float_bias(g, bias, as, bs, op == IR_OP_QGEMM ? alpha : 1.0f, base);
    if (db < 0 || (bias >= 0 && bf < 0))
        return -1;
    ir_op fop = op == IR_OP_QLINEAR_MATMUL ? IR_OP_MATMUL : op == IR_OP_QLINEAR_CONV ? IR_OP_CONV : IR_OP_GEMM;
    int in[3] = {da, db, bf}, nin = bf >= 0 ? 3 : 2;
    int keep = fop == IR_OP_MATMUL ? 0 : nattrs; /* Conv's and Gemm's attributes carry over */
    if (op == IR_OP_QGEMM && yz < 0) { /* f32 out: the product itself, or divided by y_scale */
        const char *name = g->nodes[ni].name;
        if (ys < 0)
            return rw_set_node(g, ni, IR_OP_GEMM, name, "lower-quant", nin, in, 1, &out, keep, attrs) ? -1 : 1;
        int y = add1(g, IR_OP_GEMM, base, "_f32", IR_F32, nin, in, keep, attrs);
        return y < 0 || rw_set_node(g, ni, IR_OP_DIV, name, "lower-quant", 2, (int[]){y, ys}, 1, &out, 0, NULL) ? -1
                                                                                                               : 1;
    }
    int y = add1(g, fop, base, "_f32", IR_F32, nin, in, keep, attrs);
    return y < 0 || quantize_into(g, ni, y, ys, yz) ? -1 : 1;
}

/* QLinearAdd, QLinearMul, QLinearSoftmax, QLinearConcat node ni -> the f32
 * op between DequantizeLinear and QuantizeLinear.  1, 0 or -1 as above. */
static int lower_elementwise(ir_graph *g, int ni)
{
    const ir_node *n = &g->nodes[ni];
    ir_op op = n->op;
    int out = n->outputs[0], nin = n->ninputs, ys, yz, first, stride;
    if (op == IR_OP_QLINEAR_CONCAT)
        ys = n->inputs[0], yz = n->inputs[1], first = 2, stride = 3;
    else if (op == IR_OP_QLINEAR_SOFTMAX)
        ys = n->inputs[3], yz = ir_input(n, 4), first = 0, stride = 5;
    else
        ys = n->inputs[6], yz = ir_input(n, 7), first = 0, stride = 3;
    int count = op == IR_OP_QLINEAR_CONCAT ? (nin - 2) / 3 : op == IR_OP_QLINEAR_SOFTMAX ? 1 : 2, ax;
    if (count > 64 || !fixed(g, ys) || !fixed(g, yz))
        return 0;
    for (int k = 0; k < count; k++) {
        int x = n->inputs[first + stride * k];
        if (!params_of(g, n->inputs[first + stride * k + 1], ir_input(n, first + stride * k + 2), g->values[x].rank,
                       -1, &ax))
            return 0;
    }
    const ir_value *xv = &g->values[n->inputs[first]];
    int rank = xv->rank, axis = rw_axis(ir_attr_int(n, IR_ATTR_AXIS, op == IR_OP_QLINEAR_SOFTMAX ? -1 : 0), rank);
    int coerced = op == IR_OP_QLINEAR_SOFTMAX && ir_attr_int(n, IR_ATTR_OPSET, 13) < 13 && axis != rank - 1;
    ir_dim dims[IR_MAX_RANK];
    memcpy(dims, xv->dims, sizeof dims);
    if ((axis < 0 && (op == IR_OP_QLINEAR_SOFTMAX || op == IR_OP_QLINEAR_CONCAT)) ||
        (coerced && !rw_shape_expressible(rank, dims)))
        return 0;
    const char *base = g->values[out].name;
    int d[64];
    for (int k = 0; k < count; k++) {
        n = &g->nodes[ni];
        int x = n->inputs[first + stride * k];
        d[k] = dequantize(g, x, n->inputs[first + stride * k + 1], ir_input(n, first + stride * k + 2), -1, base,
                          "_dequantized");
        if (d[k] < 0)
            return -1;
    }
    int y;
    if (op == IR_OP_QLINEAR_CONCAT) {
        ir_attr at = rw_attr_int(IR_ATTR_AXIS, axis);
        y = add1(g, IR_OP_CONCAT, base, "_f32", IR_F32, count, d, 1, &at);
    } else if (op == IR_OP_QLINEAR_SOFTMAX && coerced) { /* Softmax before opset 13: over the flattened rest */
        ir_attr at = rw_attr_int(IR_ATTR_AXIS, axis), last = rw_attr_int(IR_ATTR_AXIS, 1);
        int flat = add1(g, IR_OP_FLATTEN, base, "_flat", IR_F32, 1, d, 1, &at);
        int sm = flat < 0 ? -1 : add1(g, IR_OP_SOFTMAX, base, "_flat_softmax", IR_F32, 1, &flat, 1, &last);
        y = sm < 0 ? -1 : rw_reshape(g, sm, rank, dims, base, -1);
    } else if (op == IR_OP_QLINEAR_SOFTMAX) {
        ir_attr at = rw_attr_int(IR_ATTR_AXIS, axis);
        y = add1(g, IR_OP_SOFTMAX, base, "_f32", IR_F32, 1, d, 1, &at);
    } else {
        y = add1(g, op == IR_OP_QLINEAR_ADD ? IR_OP_ADD : IR_OP_MUL, base, "_f32", IR_F32, 2, d, 0, NULL);
    }
    return y < 0 || quantize_into(g, ni, y, ys, yz) ? -1 : 1;
}

/* Data-movement node ni reading a QuantizeLinear's output (per tensor):
 * moves the dequantized values and quantizes each output again.  1, 0, -1. */
static int lower_movement(ir_graph *g, int ni)
{
    const ir_node *n = &g->nodes[ni];
    if (n->op == IR_OP_CAST || !ir_op_has(n->op, OPF_MOVEMENT) || n->ninputs < 1 || n->noutputs > 16)
        return 0;
    const ir_node *q = rw_def(g, n->inputs[0], IR_OP_QUANTIZE_LINEAR);
    int ax;
    if (!q || ir_attr_int(q, IR_ATTR_BLOCK_SIZE, 0) || q->ninputs < 3 ||
        !params_of(g, q->inputs[1], q->inputs[2], 0, -1, &ax))
        return 0;
    int s = q->inputs[1], z = q->inputs[2], x = n->inputs[0], nin = n->ninputs, nout = n->noutputs;
    int in[64], f[16];
    if (nin > 64)
        return 0;
    memcpy(in, n->inputs, sizeof(int) * (size_t)nin);
    const int *outs = n->outputs; /* arena memory */
    const char *base = g->values[x].name;
    if ((in[0] = dequantize(g, x, s, z, -1, base, "_dequantized")) < 0)
        return -1;
    for (int k = 0; k < nout; k++) {
        f[k] = outs[k] < 0 ? -1 : rw_new_value(g, g->values[outs[k]].name, "_f32", IR_F32);
        if (outs[k] >= 0 && (f[k] < 0 || rw_add_node(g, IR_OP_QUANTIZE_LINEAR, g->values[outs[k]].name, "lower-quant",
                                                     3, (int[]){f[k], s, z}, outs[k], 0, NULL) < 0))
            return -1;
    }
    n = &g->nodes[ni];
    return rw_set_node(g, ni, n->op, n->name, "lower-quant", nin, in, nout, f, n->nattrs, n->attrs) ? -1 : 1;
}

int pass_lower_qop(ir_graph *g, vitc_diag *d)
{
    int nn = g->nnodes, changed = 0, st = 0;
    for (int i = 0; i < nn && st >= 0; i++) {
        ir_op op = g->nodes[i].op;
        if (op == IR_OP_QLINEAR_MATMUL || op == IR_OP_QLINEAR_CONV || op == IR_OP_QGEMM)
            st = lower_contraction(g, i);
        else if (op == IR_OP_QLINEAR_ADD || op == IR_OP_QLINEAR_MUL || op == IR_OP_QLINEAR_SOFTMAX ||
                 op == IR_OP_QLINEAR_CONCAT)
            st = lower_elementwise(g, i);
        changed |= st > 0;
    }
    /* in order: a chain of moves sees its first one's QuantizeLinear */
    for (int i = 0; i < nn && st >= 0 && changed; i++)
        st = lower_movement(g, i) < 0 ? -1 : st;
    if (st < 0)
        return vitc_error(d, VITC_INTERNAL, NULL, "out of memory while lowering QOperator ops");
    if (!changed)
        return VITC_OK;
    if ((st = rw_finish(g, d)) != VITC_OK)
        return st;
    return pass_fold(g, d); /* the DequantizeLinear of each weight and the biases: f32 constants */
}
