/* quant.c: lower-quant, quantized ONNX as f32 ops that compute it exactly.
 *
 * The correctness path for quantized models on the backends, not the fast
 * one (int8 kernels come later): after fold, where every DequantizeLinear of
 * a constant weight has become an f32 constant, what is left on computed
 * tensors becomes ops the backends run, giving the numbers ONNX defines:
 *
 *   DequantizeLinear(QuantizeLinear(x, s, z), s, z)   (a QDQ pair: one scale
 *       and zero point, per tensor or per axis) -> FakeQuant(x, s, z), one
 *       element-wise op (ops.def);
 *   DynamicQuantizeLinear(x) -> its function body in f32: ReduceMin and
 *       ReduceMax of x, the scale (1 where the range is 0, as ONNX Runtime),
 *       the zero point, round(x / scale) + zero point clamped to [0, 255],
 *       then Cast to u8 for the outputs (their f32 values are kept for the
 *       contractions below, which read them without the Casts);
 *   MatMulInteger(A, B, a_zp, b_zp) and ConvInteger(x, w, x_zp, w_zp), B and
 *       w constants and A's zero point one number -> MatMul / Conv in f32 of
 *       (A - a_zp) and the constant B - b_zp, then Cast to i32.  That is
 *       exact: the operands are whole numbers, and every partial sum, in
 *       whatever order a kernel adds, is bounded by max |A - a_zp| times the
 *       largest sum of |B - b_zp| over a column, checked to be at most 2^24,
 *       where f32 holds every whole number.  Where it is not, B - b_zp is
 *       split as 16 Bh + Bl (Bl in [0, 15]), each product exact in f32, and
 *       the two are combined in i32; where even that bound fails, the node
 *       is left as it is (the backends refuse it, naming it).  A Cast of the
 *       result back to f32 reads the f32 product directly.
 *
 * First of all, the QOperator format's ops with constant scales (QLinearMatMul,
 * QLinearConv, ONNX Runtime's QGemm, QLinearAdd, ...) become
 * DequantizeLinear -> the float op -> QuantizeLinear (qop.c), and ONNX
 * Runtime's dynamic MatMuls a MatMul of DynamicFakeQuant (below).  Per-row
 * zero points of A, blocked quantization, and a QuantizeLinear or
 * DequantizeLinear on its own are left as they are.
 *
 * int8-linear, at the end of the pipeline, is here too: Linears on
 * fake-quantized inputs whose weights are int8 grids (and with --precision
 * int8 every Linear) become LinearInt8. */
#include "passes/rewrite.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define EXACT_F32 16777216.0 /* 2^24: every whole number up to it is an f32 */

/* rw_append for lower-quant's nodes: add1(g, op, base, suffix, dt, nin, in, nattrs, attrs). */
#define add1(g, op, base, suffix, dt, ...) rw_append((g), (op), (base), (suffix), (dt), __VA_ARGS__, "lower-quant")

static int scalar_f32(ir_graph *g, const char *base, const char *suffix, float x)
{
    return rw_const_f32(g, base, suffix, 0, NULL, &x);
}

static int cast_to(ir_graph *g, int v, ir_dtype dt, const char *base, const char *suffix)
{
    ir_attr to = rw_attr_int(IR_ATTR_TO, ir_dtype_onnx_code(dt));
    return add1(g, IR_OP_CAST, base, suffix, dt, 1, &v, 1, &to);
}

/* The range of a quantized integer type; 0 for others. */
static int qrange(ir_dtype t, double *lo, double *hi)
{
    switch (t) {
    case IR_U8: *lo = 0, *hi = 255; return 1;
    case IR_I8: *lo = -128, *hi = 127; return 1;
    case IR_U16: *lo = 0, *hi = 65535; return 1;
    case IR_I16: *lo = -32768, *hi = 32767; return 1;
    default: return 0;
    }
}

/* ---- QDQ pairs -> FakeQuant ---- */

/* The values of a constant parameter (scale or zero point; -1: absent, read
 * as `count` zeros) as doubles, with their count; NULL when it is not a constant. */
static double *param_values(const ir_graph *g, int v, int64_t count, int64_t *n)
{
    if (v < 0) {
        *n = count;
        return calloc((size_t)count, sizeof(double));
    }
    return rw_const_f64(g, v, n);
}

static int same_values(const double *a, const double *b, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (!(a[i] == b[i]))
            return 0;
    return 1;
}

/* DequantizeLinear node di reading a QuantizeLinear with the same scale and
 * zero point -> FakeQuant in its place.  1 if rewritten, 0 if not, -1 out of memory. */
static int lower_qdq(ir_graph *g, int di)
{
    const ir_node *dq = &g->nodes[di];
    const ir_node *q = rw_def(g, dq->inputs[0], IR_OP_QUANTIZE_LINEAR);
    if (!q || g->values[q->inputs[0]].dtype != IR_F32 || g->values[dq->outputs[0]].dtype != IR_F32)
        return 0;
    if (ir_attr_int(q, IR_ATTR_BLOCK_SIZE, 0) || ir_attr_int(dq, IR_ATTR_BLOCK_SIZE, 0) ||
        (ir_attr_int(q, IR_ATTR_PRECISION, 0) && ir_attr_int(q, IR_ATTR_PRECISION, 0) != 1))
        return 0;
    double lo, hi;
    if (!qrange(g->values[q->outputs[0]].dtype, &lo, &hi))
        return 0;
    const ir_value *x = &g->values[q->inputs[0]];
    int64_t ns, nz, ns2, nz2;
    int64_t count = rw_numel(&g->values[q->inputs[1]]);
    if (count < 1)
        return 0;
    double *s = param_values(g, q->inputs[1], 1, &ns), *z = param_values(g, ir_input(q, 2), count, &nz);
    double *s2 = param_values(g, dq->inputs[1], 1, &ns2), *z2 = param_values(g, ir_input(dq, 2), count, &nz2);
    int ok = s && z && s2 && z2 && ns == ns2 && nz == nz2 && nz == ns && same_values(s, s2, ns) &&
             same_values(z, z2, nz) && g->values[q->inputs[1]].dtype == IR_F32 &&
             g->values[dq->inputs[1]].dtype == IR_F32;
    int axis = -1;
    if (ok && ns > 1) { /* per axis: the same axis in both */
        axis = rw_axis(ir_attr_int(q, IR_ATTR_AXIS, 1), x->rank);
        ok = axis >= 0 && axis == rw_axis(ir_attr_int(dq, IR_ATTR_AXIS, 1), x->rank) &&
             x->dims[axis].e == 0 && x->dims[axis].k == ns;
    }
    int rank = 0, st = 0;
    int64_t dims[IR_MAX_RANK];
    float *sf = ok ? malloc((size_t)ns * sizeof *sf) : NULL, *zf = ok ? malloc((size_t)ns * sizeof *zf) : NULL;
    if (ok && (!sf || !zf))
        st = -1;
    if (ok && !st) {
        for (int64_t i = 0; i < ns; i++)
            sf[i] = (float)s[i], zf[i] = (float)z[i];
        if (axis >= 0) { /* [C, 1, ...]: broadcasts along `axis` */
            rank = x->rank - axis;
            dims[0] = ns;
            for (int i = 1; i < rank; i++)
                dims[i] = 1;
        }
        const char *base = g->values[dq->outputs[0]].name;
        int sv = rw_const_f32(g, base, "_scale", rank, dims, sf), zv = rw_const_f32(g, base, "_zero_point", rank, dims, zf);
        dq = &g->nodes[di];
        q = rw_producer(g, dq->inputs[0]);
        ir_attr at[2] = {rw_attr_float(IR_ATTR_QMIN, (float)lo), rw_attr_float(IR_ATTR_QMAX, (float)hi)};
        int in[3] = {q->inputs[0], sv, zv}, out = dq->outputs[0];
        st = sv < 0 || zv < 0 || rw_set_node(g, di, IR_OP_FAKE_QUANT, dq->name, "lower-quant", 3, in, 1, &out, 2, at)
                 ? -1
                 : 1;
    }
    free(s), free(z), free(s2), free(z2), free(sf), free(zf);
    return st;
}

/* A FakeQuant of what element moves (views, Transpose, Split, Slice,
 * Gather) made of another FakeQuant's output with the same scale, zero point
 * and range changes nothing: its input is already on that grid, and x /
 * scale of a grid value q * scale rounds back to q.  QDQ exports repeat the
 * pair after each such op; each repeat goes.  Returns how many. */
static int drop_repeated_fake_quant(ir_graph *g)
{
    int dropped = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *n = &g->nodes[i];
        double p[4], q[4];
        if (n->op != IR_OP_FAKE_QUANT || !rw_fake_quant_params(g, n, p))
            continue;
        const ir_node *m = rw_producer(g, n->inputs[0]);
        while (m && m->op != IR_OP_CAST && ir_op_has(m->op, OPF_MOVEMENT))
            m = rw_producer(g, m->inputs[0]);
        if (!m || m->op != IR_OP_FAKE_QUANT || m == n || !rw_fake_quant_params(g, m, q) || memcmp(p, q, sizeof p) != 0 ||
            rw_is_graph_output(g, n->outputs[0]))
            continue;
        rw_replace_uses(g, n->outputs[0], n->inputs[0]);
        dropped++;
    }
    return dropped;
}

/* ---- DynamicQuantizeLinear -> f32 ops ---- */

/* The f32 values behind the u8 outputs of the DynamicQuantizeLinear nodes
 * lowered so far: shadow[v] for value v, or -1. */
typedef struct {
    int *shadow;
    int n;
} shadows;

static int shadow_of(const shadows *sh, int v) { return v >= 0 && v < sh->n ? sh->shadow[v] : -1; }

/* DynamicQuantizeLinear's arithmetic on x as f32 ops: the quantized values
 * (whole numbers in [0, 255]) in *qf, the zero point in *zpf and the scale
 * in value `scale` (-1: a new one).  The scale's value, or -1 out of memory. */
static int dynq_ops(ir_graph *g, int x, int scale, int *qf, int *zpf)
{
    const char *base = g->values[x].name;
    ir_attr keep0 = rw_attr_int(IR_ATTR_KEEPDIMS, 0);
    int zero = scalar_f32(g, base, "_0", 0), one = scalar_f32(g, base, "_1", 1), q255 = scalar_f32(g, base, "_255", 255);
    if (zero < 0 || one < 0 || q255 < 0)
        return -1;
    int mn = add1(g, IR_OP_REDUCE_MIN, base, "_min", IR_F32, 1, &x, 1, &keep0);
    int mx = add1(g, IR_OP_REDUCE_MAX, base, "_max", IR_F32, 1, &x, 1, &keep0);
    int lo = mn < 0 ? -1 : add1(g, IR_OP_MIN, base, "_min0", IR_F32, 2, (int[]){mn, zero}, 0, NULL);
    int hi = mx < 0 ? -1 : add1(g, IR_OP_MAX, base, "_max0", IR_F32, 2, (int[]){mx, zero}, 0, NULL);
    int range = lo < 0 || hi < 0 ? -1 : add1(g, IR_OP_SUB, base, "_range", IR_F32, 2, (int[]){hi, lo}, 0, NULL);
    int flat = range < 0 ? -1 : add1(g, IR_OP_EQUAL, base, "_flat", IR_BOOL, 2, (int[]){range, zero}, 0, NULL);
    int step = range < 0 ? -1 : add1(g, IR_OP_DIV, base, "_step", IR_F32, 2, (int[]){range, q255}, 0, NULL);
    if (scale < 0)
        scale = rw_new_value(g, base, "_scale", IR_F32);
    if (flat < 0 || step < 0 || scale < 0 ||
        rw_add_node(g, IR_OP_WHERE, g->values[scale].name, "lower-quant", 3, (int[]){flat, one, step}, scale, 0, NULL) < 0)
        return -1;
    int t = add1(g, IR_OP_DIV, base, "_min_scaled", IR_F32, 2, (int[]){lo, scale}, 0, NULL);
    int zp0 = t < 0 ? -1 : add1(g, IR_OP_NEG, base, "_zp_unclipped", IR_F32, 1, &t, 0, NULL);
    int zpc = zp0 < 0 ? -1 : add1(g, IR_OP_CLIP, base, "_zp_clipped", IR_F32, 3, (int[]){zp0, zero, q255}, 0, NULL);
    *zpf = zpc < 0 ? -1 : add1(g, IR_OP_ROUND, base, "_zp_f32", IR_F32, 1, &zpc, 0, NULL);
    int xs = *zpf < 0 ? -1 : add1(g, IR_OP_DIV, base, "_scaled", IR_F32, 2, (int[]){x, scale}, 0, NULL);
    int xr = xs < 0 ? -1 : add1(g, IR_OP_ROUND, base, "_rounded", IR_F32, 1, &xs, 0, NULL);
    int xz = xr < 0 ? -1 : add1(g, IR_OP_ADD, base, "_shifted", IR_F32, 2, (int[]){xr, *zpf}, 0, NULL);
    *qf = xz < 0 ? -1 : add1(g, IR_OP_CLIP, base, "_quantized_f32", IR_F32, 3, (int[]){xz, zero, q255}, 0, NULL);
    return *qf < 0 ? -1 : scale;
}

/* DynamicQuantizeLinear node ni -> its function body; 1 if rewritten, -1 out of memory. */
static int lower_dynamic_quantize(ir_graph *g, int ni, shadows *sh)
{
    const ir_node *n = &g->nodes[ni];
    int x = n->inputs[0], y = n->outputs[0], ys = n->noutputs > 1 ? n->outputs[1] : -1;
    int yz = n->noutputs > 2 ? n->outputs[2] : -1;
    if (g->values[x].dtype != IR_F32)
        return 0;
    const char *name = n->name;
    int qf, zpf;
    if (dynq_ops(g, x, ys, &qf, &zpf) < 0)
        return -1;
    if (yz >= 0) {
        ir_attr to = rw_attr_int(IR_ATTR_TO, ir_dtype_onnx_code(IR_U8));
        if (rw_add_node(g, IR_OP_CAST, g->values[yz].name, "lower-quant", 1, &zpf, yz, 1, &to) < 0)
            return -1;
    }
    /* y: the node itself, now a Cast */
    ir_attr to = rw_attr_int(IR_ATTR_TO, ir_dtype_onnx_code(IR_U8));
    if (rw_set_node(g, ni, IR_OP_CAST, name, "lower-quant", 1, &qf, 1, &y, 1, &to))
        return -1;
    if (y < sh->n)
        sh->shadow[y] = qf;
    if (yz >= 0 && yz < sh->n)
        sh->shadow[yz] = zpf;
    return 1;
}

/* DynamicFakeQuant node ni -> f32 ops: (q - zero point) * scale.  1, or -1 out of memory. */
static int expand_dynamic_fake_quant(ir_graph *g, int ni)
{
    int x = g->nodes[ni].inputs[0], qf, zpf;
    int scale = dynq_ops(g, x, -1, &qf, &zpf);
    int c = scale < 0 ? -1 : add1(g, IR_OP_SUB, g->values[x].name, "_centred", IR_F32, 2, (int[]){qf, zpf}, 0, NULL);
    const ir_node *n = &g->nodes[ni];
    int out = n->outputs[0];
    return c < 0 || rw_set_node(g, ni, IR_OP_MUL, n->name, "lower-quant", 2, (int[]){c, scale}, 1, &out, 0, NULL) ? -1 : 1;
}

/* ---- MatMulInteger, ConvInteger -> f32 contractions ---- */

/* The constant weight of contraction n (input wi, its zero point zi)
 * centred: w - w_zp as doubles, w's rows (MatMul: K of N columns; Conv: M
 * output channels of `per` elements each) in *rows / *per, and the largest
 * sum of |w - w_zp| over what one output element reads in *l1.  NULL when
 * the weight or its zero point is no constant of that form. */
static double *centred_weight(const ir_graph *g, const ir_node *n, int wi, int zi, int conv, int64_t *count,
                              double *l1)
{
    int w = ir_input(n, wi), z = ir_input(n, zi);
    const ir_value *wv = &g->values[w];
    if (!rw_is_const(g, w) || (conv ? wv->rank < 3 : wv->rank != 2) || (z >= 0 && !rw_is_const(g, z)))
        return NULL;
    int64_t nw, nz = 1;
    double *c = rw_const_f64(g, w, &nw), *zp = z >= 0 ? rw_const_f64(g, z, &nz) : NULL;
    int64_t outs = conv ? wv->dims[0].k : wv->dims[1].k; /* output channels, columns */
    if (!c || (z >= 0 && !zp) || (nz != 1 && nz != outs) || outs < 1) {
        free(c), free(zp);
        return NULL;
    }
    int64_t per = nw / outs;
    double *sum = calloc((size_t)outs, sizeof *sum);
    if (!sum) {
        free(c), free(zp);
        return NULL;
    }
    for (int64_t i = 0; i < nw; i++) {
        int64_t o = conv ? i / per : i % outs; /* the output element w[i] contributes to */
        c[i] -= zp ? zp[nz == 1 ? 0 : o] : 0;
        sum[o] += fabs(c[i]);
    }
    *l1 = 0;
    for (int64_t o = 0; o < outs; o++)
        *l1 = sum[o] > *l1 ? sum[o] : *l1;
    *count = nw;
    free(sum), free(zp);
    return c;
}

/* The largest |a - a_zp| of an operand of dtype t, a_zp the constant zv (-1:
 * 0) or computed (any value of t). */
static double operand_bound(const ir_graph *g, ir_dtype t, int zv)
{
    double lo, hi, z;
    qrange(t, &lo, &hi);
    if (zv >= 0 && !rw_scalar(g, zv, &z))
        return hi - lo; /* computed: it is some value of t */
    z = zv >= 0 ? z : 0;
    return fmax(fabs(lo - z), fabs(hi - z));
}

/* The contraction (MatMul or Conv, with node ni's attributes) of value a by
 * the constant weight wc (count values, shaped as ni's weight input wi). */
static int contract(ir_graph *g, int ni, int wi, int a, const double *wc, int64_t count, const char *suffix)
{
    const ir_node *n = &g->nodes[ni];
    const ir_value *wv = &g->values[n->inputs[wi]];
    int64_t dims[IR_MAX_RANK];
    float *f = malloc((size_t)(count ? count : 1) * sizeof *f);
    if (!f)
        return -1;
    for (int64_t i = 0; i < count; i++)
        f[i] = (float)wc[i];
    rw_static_dims(wv, dims);
    const char *base = g->values[n->outputs[0]].name;
    int w = rw_const_f32(g, base, suffix, wv->rank, dims, f);
    free(f);
    if (w < 0)
        return -1;
    n = &g->nodes[ni]; /* the attributes, copied by the node added */
    int conv = n->op == IR_OP_CONV_INTEGER;
    return add1(g, conv ? IR_OP_CONV : IR_OP_MATMUL, base, suffix, IR_F32, 2, (int[]){a, w}, conv ? n->nattrs : 0,
                conv ? n->attrs : NULL);
}

/* MatMulInteger or ConvInteger node ni -> f32 contractions; 1 if rewritten,
 * 0 if left, -1 out of memory. */
static int lower_int_contraction(ir_graph *g, int ni, const shadows *sh)
{
    const ir_node *n = &g->nodes[ni];
    int conv = n->op == IR_OP_CONV_INTEGER;
    int a = n->inputs[0], az = ir_input(n, 2), out = n->outputs[0];
    ir_dtype at = g->values[a].dtype;
    double lo, hi;
    if (!qrange(at, &lo, &hi) || (az >= 0 && rw_numel(&g->values[az]) != 1) || g->values[out].dtype != IR_I32)
        return 0;
    int64_t count;
    double l1, *wc = centred_weight(g, n, 1, 3, conv, &count, &l1);
    if (!wc)
        return 0;
    double bound = operand_bound(g, at, az);
    int split = !(bound * l1 <= EXACT_F32);
    double *wh = NULL, l1h = 0, l1l = 0;
    if (split) { /* wc = 16 wh + wl, wl in [0, 15] */
        int64_t outs = conv ? g->values[n->inputs[1]].dims[0].k : g->values[n->inputs[1]].dims[1].k, per = count / outs;
        double *sh1 = calloc((size_t)outs, sizeof *sh1), *sl1 = calloc((size_t)outs, sizeof *sl1);
        wh = malloc((size_t)(count ? count : 1) * sizeof *wh);
        if (!sh1 || !sl1 || !wh) {
            free(sh1), free(sl1), free(wh), free(wc);
            return -1;
        }
        for (int64_t i = 0; i < count; i++) {
            int64_t o = conv ? i / per : i % outs;
            wh[i] = floor(wc[i] / 16);
            wc[i] -= 16 * wh[i];
            sh1[o] += fabs(wh[i]);
            sl1[o] += wc[i];
        }
        for (int64_t o = 0; o < outs; o++)
            l1h = fmax(l1h, sh1[o]), l1l = fmax(l1l, sl1[o]);
        free(sh1), free(sl1);
        if (!(bound * l1h <= EXACT_F32 && bound * l1l <= EXACT_F32)) {
            free(wh), free(wc);
            return 0; /* not exact in f32 even split: the backends refuse the node */
        }
    }
    const char *base = g->values[out].name;
    /* A - a_zp in f32, from the f32 values DynamicQuantizeLinear's lowering kept where it made A */
    int af = shadow_of(sh, a) >= 0 ? shadow_of(sh, a) : cast_to(g, a, IR_F32, base, "_a_f32");
    int zf = az < 0 ? -1 : shadow_of(sh, az) >= 0 ? shadow_of(sh, az) : cast_to(g, az, IR_F32, base, "_a_zp_f32");
    int ac = af < 0 || (az >= 0 && zf < 0) ? -1
             : az < 0                      ? af
                                           : add1(g, IR_OP_SUB, base, "_a_centred", IR_F32, 2, (int[]){af, zf}, 0, NULL);
    int st = ac < 0 ? -1 : 1;
    if (st > 0 && !split) {
        int c = contract(g, ni, 1, ac, wc, count, "_f32");
        ir_attr to = rw_attr_int(IR_ATTR_TO, ir_dtype_onnx_code(IR_I32));
        n = &g->nodes[ni];
        if (c < 0 || rw_set_node(g, ni, IR_OP_CAST, n->name, "lower-quant", 1, &c, 1, &out, 1, &to))
            st = -1;
        /* a Cast of the i32 result back to f32 reads the f32 product: the same number */
        const ir_node *users[64];
        int nu = st > 0 ? rw_users(g, out, users, 64) : 0;
        int casts[64], nc = 0;
        for (int k = 0; k < nu && k < 64; k++)
            if (users[k]->op == IR_OP_CAST && ir_attr_int(users[k], IR_ATTR_TO, -1) == ir_dtype_onnx_code(IR_F32))
                casts[nc++] = users[k]->outputs[0];
        for (int k = 0; k < nc; k++)
            rw_replace_uses(g, casts[k], c);
    } else if (st > 0) {
        int ch = contract(g, ni, 1, ac, wh, count, "_f32_high");
        int cl = ch < 0 ? -1 : contract(g, ni, 1, ac, wc, count, "_f32_low");
        int ih = cl < 0 ? -1 : cast_to(g, ch, IR_I32, base, "_high");
        int il = ih < 0 ? -1 : cast_to(g, cl, IR_I32, base, "_low");
        int32_t sixteen = 16;
        int k16 = il < 0 ? -1 : rw_const_raw(g, base, "_16", IR_I32, 0, NULL, &sixteen, sizeof sixteen);
        int hs = k16 < 0 ? -1 : add1(g, IR_OP_MUL, base, "_high_x16", IR_I32, 2, (int[]){ih, k16}, 0, NULL);
        n = &g->nodes[ni];
        if (hs < 0 || rw_set_node(g, ni, IR_OP_ADD, n->name, "lower-quant", 2, (int[]){hs, il}, 1, &out, 0, NULL))
            st = -1;
    }
    free(wh), free(wc);
    return st;
}

/* ---- DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul: a MatMul of DynamicFakeQuant ---- */

/* The values of constant v as doubles if it holds one or n of them and
 * broadcasts along the last axis of a [..., n] tensor; NULL otherwise. */
static double *per_column(const ir_graph *g, int v, int64_t n, int64_t *count)
{
    const ir_value *c = &g->values[v];
    for (int i = 0; i + 1 < c->rank; i++)
        if (c->dims[i].e != 0 || c->dims[i].k != 1)
            return NULL;
    double *x = rw_const_f64(g, v, count);
    if (x && *count != 1 && *count != n) {
        free(x);
        return NULL;
    }
    return x;
}

/* MatMulInteger node ni reading DynamicQuantizeLinear's u8 output and zero
 * point, with a constant 2-D weight, its i32 result cast to f32 and
 * multiplied by the product of that node's scale and a constant weight
 * scale (one, or one per column), as ONNX Runtime's quantize_dynamic writes
 * a MatMul: that Mul becomes MatMul(DynamicFakeQuant(x), (B - b_zp) * w_scale).
 * The same numbers up to the f32 rounding of the products, in a form the
 * Linear fusions take and int8-linear makes an int8 Linear again.  dfq[x]:
 * the DynamicFakeQuant of x made so far.  1 if rewritten, 0 if not, -1 out
 * of memory. */
static int lower_dynamic_matmul(ir_graph *g, int ni, int *dfq)
{
    const ir_node *n = &g->nodes[ni];
    int a = n->inputs[0], b = n->inputs[1], az = ir_input(n, 2), bz = ir_input(n, 3);
    const ir_node *dq = rw_producer(g, a);
    if (!dq || dq->op != IR_OP_DYNAMIC_QUANTIZE_LINEAR || dq->noutputs < 3 || dq->outputs[0] != a ||
        az != dq->outputs[2] || g->values[dq->inputs[0]].dtype != IR_F32)
        return 0;
    int x = dq->inputs[0], s = dq->outputs[1], ws;
    const ir_value *bv = &g->values[b];
    if (!rw_is_const(g, b) || bv->rank != 2 || (bz >= 0 && !rw_is_const(g, bz)))
        return 0;
    const ir_node *cast = rw_only_user(g, n->outputs[0]);
    if (!cast || cast->op != IR_OP_CAST || ir_attr_int(cast, IR_ATTR_TO, -1) != ir_dtype_onnx_code(IR_F32))
        return 0;
    const ir_node *mul = rw_only_user(g, cast->outputs[0]);
    int m = mul && mul->op == IR_OP_MUL ? rw_other_input(mul, cast->outputs[0]) : -1;
    if (m < 0 || !pat_with(g, m, IR_OP_MUL, s, &ws) || !rw_is_const(g, ws))
        return 0;
    int mi = rw_index(g, mul), y = mul->outputs[0];
    int64_t K = bv->dims[0].k, N = bv->dims[1].k, nb, nws, nbz = 1;
    double *w = rw_const_f64(g, b, &nb), *sw = per_column(g, ws, N, &nws);
    double *zw = bz >= 0 ? per_column(g, bz, N, &nbz) : calloc(1, sizeof(double));
    float *f = malloc(sizeof(float) * (size_t)(K * N > 0 ? K * N : 1));
    int st = w && sw && zw && f ? 1 : 0;
    if (st && nb == K * N) {
        for (int64_t k = 0; k < K; k++)
            for (int64_t j = 0; j < N; j++)
                f[k * N + j] = (float)((w[k * N + j] - zw[nbz == 1 ? 0 : j]) * sw[nws == 1 ? 0 : j]);
        const char *base = g->values[y].name;
        int wc = rw_const_f32(g, base, "_dequantized_weight", 2, (int64_t[]){K, N}, f);
        if (wc >= 0 && dfq[x] < 0)
            dfq[x] = add1(g, IR_OP_DYNAMIC_FAKE_QUANT, g->values[x].name, "_fake_quantized", IR_F32, 1, &x, 0, NULL);
        const char *name = g->nodes[mi].name;
        st = wc < 0 || dfq[x] < 0 ||
                     rw_set_node(g, mi, IR_OP_MATMUL, name, "lower-quant", 2, (int[]){dfq[x], wc}, 1, &y, 0, NULL)
                 ? -1
                 : 1;
    } else if (st) {
        st = 0;
    } else if (w && sw && zw) {
        st = -1; /* f: out of memory */
    }
    free(w), free(sw), free(zw), free(f);
    return st;
}

/* ---- int8-linear: Linears on fake-quantized inputs -> LinearInt8 ---- */

/* Column j of W [K, N] (row-major) as whole multiples in [-128, 127] of
 * one f32 step: q[k * N + j] and *step; 0 when it is no such grid.  The
 * step is found from the column's largest magnitude, the multiple it is
 * (127 and 128 first, as symmetric int8 weights have, then every other),
 * and the f32 neighbours of their quotient; every element must then lie
 * within 1e-3 of a multiple. */
static int column_grid(const float *w, int64_t K, int64_t N, int64_t j, int8_t *q, float *step)
{
    float a = 0;
    for (int64_t k = 0; k < K; k++)
        a = fmaxf(a, fabsf(w[k * N + j]));
    if (!isfinite(a))
        return 0;
    if (a == 0) {
        for (int64_t k = 0; k < K; k++)
            q[k * N + j] = 0;
        *step = 1;
        return 1;
    }
    for (int t = 0; t < 129; t++) {
        int mult = t == 0 ? 127 : t == 1 ? 128 : 129 - t; /* 127, 128, then 127 again (skipped), 126, ..., 1 */
        if (t == 2)
            continue;
        float s0 = a / (float)mult, s = s0;
        for (int u = 0; u < 5; u++) {
            s = u == 0 ? s0 : u == 1 ? nextafterf(s0, 0) : u == 2 ? nextafterf(s0, INFINITY)
                : u == 3 ? nextafterf(nextafterf(s0, 0), 0) : nextafterf(nextafterf(s0, INFINITY), INFINITY);
            int64_t k = 0;
            for (; k < K; k++) {
                double r = (double)w[k * N + j] / s, qi = nearbyint(r);
                if (fabs(r - qi) > 1e-3 || qi < -128 || qi > 127)
                    break;
                q[k * N + j] = (int8_t)qi;
            }
            if (k == K) {
                *step = s;
                return 1;
            }
        }
    }
    return 0;
}

/* W [K, N] quantized per column, symmetric, as whole multiples in
 * [-127, 127] of step[j] = a / 127, a = max |W[:, j]|; with pairs
 * (pass_options.int8_pairs) a is at least each pair of k's (2i, 2i + 1)
 * positive elements' sum and its negative ones' magnitude too: each
 * multiple then rounds by at most a half, so a pair's sum to at most 128 on
 * either side.  (A column's pairs rarely share its largest magnitude's sign
 * and size: its step is finer than the max / 64 that bounds every pair.) */
static void quantize_columns(const float *w, int64_t K, int64_t N, int pairs, int8_t *q, float *step)
{
    for (int64_t j = 0; j < N; j++) {
        float a = 0;
        for (int64_t k = 0; k < K; k++)
            a = fmaxf(a, fabsf(w[k * N + j]));
        for (int64_t k = 0; pairs && k < K; k += 2) {
            float w0 = w[k * N + j], w1 = k + 1 < K ? w[(k + 1) * N + j] : 0;
            a = fmaxf(a, fmaxf(fmaxf(w0, 0) + fmaxf(w1, 0), -(fminf(w0, 0) + fminf(w1, 0))));
        }
        step[j] = a > 0 && isfinite(a) ? a / 127.0f : 1.0f;
        for (int64_t k = 0; k < K; k++) {
            float r = nearbyintf(w[k * N + j] / step[j]);
            q[k * N + j] = (int8_t)(r > 127 ? 127 : r < -127 ? -127 : isnan(r) ? 0 : r);
        }
    }
}

/* How Linear node n's input is quantized: from a FakeQuant with one scale
 * and zero point of an 8-bit range, or an Attention's output fake-quant
 * point (static), a DynamicFakeQuant (per
 * tensor), or with `all`, per row at run time; the input before it in *x0.
 * 0: not quantized (why says so where it nearly is). */
static int input_quant(const ir_graph *g, int x, int all, const float *calib, ir_linear *v, int *x0, char *why,
                       size_t nwhy)
{
    const ir_node *p = rw_producer(g, x);
    *x0 = x;
    why[0] = 0;
    /* through what moves elements: x itself is then on the FakeQuant's grid, and quantizing it gives the same */
    int moved = 0;
    while (p && p->op != IR_OP_CAST && ir_op_has(p->op, OPF_MOVEMENT))
        p = rw_producer(g, p->inputs[0]), moved = 1;
    if (p && p->op == IR_OP_DYNAMIC_FAKE_QUANT && !moved) {
        v->aq = IR_AQ_TENSOR;
        *x0 = p->inputs[0];
        return 1;
    }
    double sc, zp;
    ir_attention at;
    int attn_fq = p && ir_attention_of(p, &at, why, nwhy) && at.fq[IR_ATTN_FQ_O][1] != 0;
    if (attn_fq) { /* an Attention whose output is fake-quantized: x is on that grid */
        sc = at.fq[IR_ATTN_FQ_O][1], zp = at.fq[IR_ATTN_FQ_O][2];
        moved = 1;
    }
    if (p && (p->op == IR_OP_FAKE_QUANT || attn_fq)) {
        float qmin = attn_fq ? at.fq[IR_ATTN_FQ_O][3] : ir_attr_float(p, IR_ATTR_QMIN, 0);
        float qmax = attn_fq ? at.fq[IR_ATTN_FQ_O][4] : ir_attr_float(p, IR_ATTR_QMAX, 255);
        int u8 = qmin == 0 && qmax == 255, s8 = qmin == -128 && qmax == 127;
        if (!attn_fq && (!rw_scalar(g, p->inputs[1], &sc) || !rw_scalar(g, p->inputs[2], &zp)))
            snprintf(why, nwhy, "its input is fake-quantized per axis, not per tensor");
        else if (!(u8 || s8) || !(sc > 0) || !isfinite((float)sc) || zp != floor(zp) || zp < qmin || zp > qmax)
            snprintf(why, nwhy, "its input is fake-quantized to [%g, %g] (scale %g, zero point %g), not 8 bits",
                     (double)qmin, (double)qmax, sc, zp);
        else {
            v->aq = IR_AQ_STATIC;
            v->a_scale = (float)sc;
            v->a_zero = (int)(zp - qmin); /* an int8 value q is the u8 value q + 128 */
            *x0 = moved ? x : p->inputs[0];
            return 1;
        }
    }
    if (all && calib) { /* static, from the calibration's range, as DynamicQuantizeLinear would have it */
        float range = calib[1] - calib[0], s = range > 0 ? range / 255.0f : 1.0f, z = 0.0f - calib[0] / s;
        v->aq = IR_AQ_STATIC;
        v->a_scale = s;
        v->a_zero = (int)nearbyintf(z < 0 ? 0 : z > 255 ? 255 : z);
        return 1;
    }
    if (all) {
        v->aq = IR_AQ_ROW;
        return 1;
    }
    return 0;
}

/* Linear node ni -> LinearInt8 where its input is quantized (input_quant)
 * and its weight is an int8 grid (column_grid; with `all`, made one per
 * column where it is not; pairs: as quantize_columns).  1 if rewritten, 0
 * if not, -1 out of memory. */
static int int8_linear(ir_graph *g, int ni, int all, int pairs, const float *calib)
{
    const ir_node *n = &g->nodes[ni];
    ir_linear v;
    char why[160];
    if (!ir_linear_of(n, &v, why, sizeof why))
        return 0;
    if (v.gate >= 0) {
        if (all)
            rw_miss(g, n, "a gated Linear (its output times another projection) has no int8 kernel: it stays f32");
        return 0;
    }
    int x0;
    if (!input_quant(g, v.x, all, calib, &v, &x0, why, sizeof why)) {
        if (why[0])
            rw_miss(g, n, "%s", why);
        return 0;
    }
    const ir_value *W = &g->values[v.w];
    int64_t K = W->dims[0].k, N = W->dims[1].k;
    if (W->dtype != IR_F32 || !W->data || K > 65000) {
        rw_miss(g, n, "the weight is %s [%lld, %lld]: an int8 Linear takes an f32 constant of K <= 65000",
                ir_dtype_name(W->dtype), (long long)K, (long long)N);
        return 0;
    }
    int8_t *q = malloc((size_t)(K * N));
    float *step = malloc(sizeof(float) * (size_t)N);
    if (!q || !step) {
        free(q), free(step);
        return -1;
    }
    int grid = 1;
    const float *w = W->data;
    for (int64_t j = 0; grid && j < N; j++)
        grid = column_grid(w, K, N, j, q, &step[j]);
    int st = 0;
    if (!grid && (all || v.aq == IR_AQ_ROW))
        quantize_columns(w, K, N, pairs, q, step), grid = 1;
    if (!grid) {
        rw_miss(g, n, "its input is quantized but its weight has a column that is no int8 grid (whole multiples in "
                      "[-128, 127] of one scale)");
    } else {
        const char *base = g->values[v.w].name;
        int wq = rw_const_raw(g, base, "_int8", IR_I8, 2, (int64_t[]){K, N}, q, (size_t)(K * N));
        int ws = wq < 0 ? -1 : rw_const_f32(g, base, "_int8_scale", 1, &N, step);
        st = -1;
        if (ws >= 0) {
            v.int8 = 1, v.x = x0, v.w = wq, v.w_scale = ws;
            ir_node_spec spec;
            ir_linear_spec(&v, &spec);
            if (!rw_set_spec(g, ni, g->nodes[ni].name, "int8-linear", &spec)) {
                rw_hit();
                st = 1;
            }
        }
    }
    free(q), free(step);
    return st;
}

/* The Linears --precision int8 quantizes with a range of their own (not a
 * quantized model's): their inputs into values (node indices into nodes),
 * how many. */
static int own_linears(const ir_graph *g, int *nodes, int *values)
{
    int n = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *nd = &g->nodes[i];
        ir_linear v;
        char why[160];
        int x0;
        if (nd->op == IR_OP_LINEAR && ir_linear_of(nd, &v, why, sizeof why) && v.gate < 0 &&
            !input_quant(g, v.x, 0, NULL, &v, &x0, why, sizeof why))
            nodes[n] = i, values[n++] = v.x;
    }
    return n;
}

/* The relative error, sqrt(sum (W - Wq)^2 / sum W^2), of W [K, N] quantized
 * by quantize_columns; -1 out of memory. */
static double weight_error(const float *w, int64_t K, int64_t N, int pairs)
{
    int8_t *q = malloc((size_t)(K * N > 0 ? K * N : 1));
    float *step = malloc(sizeof(float) * (size_t)(N > 0 ? N : 1));
    double num = 0, den = 0;
    if (!q || !step) {
        free(q), free(step);
        return -1;
    }
    quantize_columns(w, K, N, pairs, q, step);
    for (int64_t i = 0; i < K * N; i++) {
        double x = w[i], e = x - (double)q[i] * step[i % N];
        num += e * e;
        den += x * x;
    }
    free(q), free(step);
    return den > 0 ? sqrt(num / den) : 0;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* A Linear --precision int8 quantizes whose weight's int8 error is out of
 * line with the model's others: more than 4 times their median, and above
 * 1%.  Such a layer stays f32 (reported). */
#define WEIGHT_ERROR_RATIO 4.0
#define WEIGHT_ERROR_FLOOR 1e-2

/* The FakeQuant (one scale and zero point) that alone reads v, as a point
 * {1, scale, zero, qmin, qmax}; NULL when there is none. */
static const ir_node *only_fake_quant(const ir_graph *g, int v, float f[5])
{
    const ir_node *u = rw_is_graph_output(g, v) ? NULL : rw_only_user(g, v);
    return u && u->inputs[0] == v && rw_fake_quant_point(g, u, 1, f) ? u : NULL;
}

/* The Add that alone reads v and adds it an f32 constant of [N] (or
 * [1, .., N]), the constant in *o. */
static const ir_node *only_bias_add(const ir_graph *g, int v, int64_t N, int *o)
{
    const ir_node *u = rw_is_graph_output(g, v) ? NULL : rw_only_user(g, v);
    if (!u || u->op != IR_OP_ADD || u->ninputs != 2)
        return NULL;
    *o = u->inputs[u->inputs[0] == v ? 1 : 0];
    const ir_value *c = &g->values[*o];
    if (*o == v || !rw_is_const(g, *o) || c->dtype != IR_F32 || c->rank < 1 ||
        !ir_dim_eq(c->dims[c->rank - 1], ir_dim_const(N)))
        return NULL;
    for (int i = 0; i + 1 < c->rank; i++)
        if (!ir_dim_eq(c->dims[i], ir_dim_const(1)))
            return NULL;
    return u;
}

/* A quantized model's Linear is MatMul -> Q/DQ -> Add(bias) -> Q/DQ (or
 * Gemm -> Q/DQ): LinearInt8 node ni without residual or activation takes
 * that chain into its epilogue (its output fake-quant points, ops.def), in place of
 * the chain's last node.  A residual Add and its Q/DQ after that stay an
 * element-wise kernel: in the int8 GEMM's epilogue they cost more than
 * that kernel (ViT-B/16 QDQ at batch 8, fc2: +0.9 ms in the epilogue for
 * 0.4 ms saved).  1 when it did, 0 when there is no such chain, -1 out of
 * memory. */
static int absorb_output_points(ir_graph *g, int ni)
{
    ir_linear v;
    char why[160];
    if (!ir_linear_of(&g->nodes[ni], &v, why, sizeof why) || !v.int8 || v.residual >= 0 || v.act != IR_ACT_NONE)
        return 0;
    int64_t N = g->values[v.w].dims[1].k;
    const ir_node *last = only_fake_quant(g, v.y, v.fq[v.bias >= 0]); /* a Gemm's bias is its own */
    if (!last)
        return 0;
    int o;
    const ir_node *add = v.bias >= 0 ? NULL : only_bias_add(g, last->outputs[0], N, &o), *q;
    if (add && (q = only_fake_quant(g, add->outputs[0], v.fq[1]))) {
        v.bias = o;
        last = q;
    }
    if (v.bias >= 0) { /* the bias as [N] */
        int64_t dims[1] = {N};
        const ir_value *b = &g->values[v.bias];
        if (b->rank != 1 && (v.bias = rw_const_f32(g, b->name, "/flat", 1, dims, b->data)) < 0)
            return -1;
    }
    v.y = last->outputs[0];
    ir_node_spec spec;
    ir_linear_spec(&v, &spec);
    const ir_node *n = &g->nodes[ni];
    char op_type[96];
    snprintf(op_type, sizeof op_type, "%s+output fake-quant", n->op_type);
    return rw_set_spec(g, rw_index(g, last), n->name, op_type, &spec) ? -1 : 1;
}

int pass_int8_linear(ir_graph *g, const pass_options *o, vitc_diag *d)
{
    pass_int8 mode = o ? o->int8 : PASS_INT8_NONE;
    int pairs = o && o->int8_pairs;
    int nn = g->nnodes, changed = 0, st = 0, nown = 0;
    int *own = NULL, *own_x = NULL;
    double *err = NULL, bar = INFINITY;
    float(*range)[2] = NULL;
    if (mode == PASS_INT8_ALL) { /* the model's own Linears: each weight's error, the calibration */
        own = calloc((size_t)(nn + 1), sizeof(int)), own_x = calloc((size_t)(nn + 1), sizeof(int));
        err = calloc((size_t)(2 * nn + 2), sizeof(double));
        range = o->calib && o->ncalib > 0 ? malloc(sizeof *range * (size_t)(nn + 1)) : NULL;
        if (!own || !own_x || !err || (o->calib && o->ncalib > 0 && !range)) {
            free(own), free(own_x), free(err), free(range);
            return vitc_error(d, VITC_INTERNAL, NULL, "out of memory");
        }
        nown = own_linears(g, own, own_x);
        for (int c = 0; c < nown; c++) {
            const ir_value *W = &g->values[g->nodes[own[c]].inputs[IR_LINEAR_W]];
            err[c] = W->dtype == IR_F32 && W->data ? weight_error(W->data, W->dims[0].k, W->dims[1].k, pairs) : 0;
            if (err[c] < 0) {
                free(own), free(own_x), free(err), free(range);
                return vitc_error(d, VITC_INTERNAL, NULL, "out of memory");
            }
            err[nn + 1 + c] = err[c];
        }
        qsort(err + nn + 1, (size_t)nown, sizeof(double), by_value);
        if (nown)
            bar = fmax(WEIGHT_ERROR_RATIO * err[nn + 1 + nown / 2], WEIGHT_ERROR_FLOOR);
        if (range && (st = pass_calib_ranges(g, o->calib, o->ncalib, own_x, nown, range, d)) != VITC_OK) {
            free(own), free(own_x), free(err), free(range);
            return st;
        }
    }
    for (int i = 0, c = 0; i < nn && st >= 0 && mode != PASS_INT8_NONE; i++) {
        int mine = c < nown && own[c] == i;
        const float *calib = mine && range ? range[c] : NULL;
        if (mine && err[c] > bar) {
            rw_miss(g, &g->nodes[i], "its weight quantizes to int8 with a relative error of %.3g, out of line with "
                    "the model's other Linears (median %.3g): it stays f32", err[c], err[nn + 1 + nown / 2]);
        } else if (g->nodes[i].op == IR_OP_LINEAR &&
                   (st = int8_linear(g, i, mode == PASS_INT8_ALL, pairs, calib)) > 0) {
            changed = 1;
        }
        c += mine;
    }
    free(own), free(own_x), free(err), free(range);
    /* the DynamicFakeQuants no int8 Linear took: f32 ops (dead ones go in rw_finish) */
    if (st >= 0 && changed && (st = rw_finish(g, d)) != VITC_OK)
        return st;
    nn = g->nnodes;
    for (int i = 0; i < nn && st >= 0; i++)
        if (g->nodes[i].op == IR_OP_DYNAMIC_FAKE_QUANT && (st = expand_dynamic_fake_quant(g, i)) > 0)
            changed = 1;
    /* the Q/DQ pairs after each int8 Linear: its epilogue (all Linears decided first, from the FakeQuants) */
    for (int i = 0; i < nn && st >= 0; i++)
        if (g->nodes[i].op == IR_OP_LINEAR_INT8 && (st = absorb_output_points(g, i)) > 0)
            changed = 1;
    if (st < 0)
        return vitc_error(d, VITC_INTERNAL, NULL, "out of memory while making int8 Linears");
    return changed ? rw_finish(g, d) : VITC_OK;
}

int pass_lower_quant(ir_graph *g, vitc_diag *d)
{
    int st = pass_lower_qop(g, d); /* ONNX Runtime's QOperator ops -> QDQ around float ops (qop.c) */
    if (st != VITC_OK)
        return st;
    int nn = g->nnodes, changed = 0;
    for (int i = 0; i < nn && !changed; i++)
        changed = ir_op_family_of(g->nodes[i].op) == IR_FAM_QUANT;
    if (!changed)
        return VITC_OK;
    changed = 0;
    /* ONNX Runtime's dynamic MatMuls first: MatMuls of DynamicFakeQuant */
    int *dfq = malloc(sizeof(int) * ((size_t)g->nvalues + 1));
    if (!dfq)
        return vitc_error(d, VITC_INTERNAL, NULL, "out of memory");
    for (int v = 0; v < g->nvalues; v++)
        dfq[v] = -1;
    for (int i = 0; i < nn && st >= 0; i++)
        if (g->nodes[i].op == IR_OP_MATMUL_INTEGER && (st = lower_dynamic_matmul(g, i, dfq)) > 0)
            changed = 1;
    free(dfq);
    if (st < 0)
        return vitc_error(d, VITC_INTERNAL, NULL, "out of memory while lowering quantized ops");
    if (changed && (st = rw_finish(g, d)) != VITC_OK) /* what only those MatMuls read goes */
        return st;
    nn = g->nnodes;
    shadows sh = {.n = g->nvalues, .shadow = malloc(sizeof(int) * ((size_t)g->nvalues + 1))};
    if (!sh.shadow)
        return vitc_error(d, VITC_INTERNAL, NULL, "out of memory");
    for (int v = 0; v < sh.n; v++)
        sh.shadow[v] = -1;
    /* producers first: DynamicQuantizeLinear, then what reads it, then the QDQ pairs */
    for (int i = 0; i < nn && st >= 0; i++)
        if (g->nodes[i].op == IR_OP_DYNAMIC_QUANTIZE_LINEAR && (st = lower_dynamic_quantize(g, i, &sh)) > 0)
            changed = 1;
    for (int i = 0; i < nn && st >= 0; i++)
        if ((g->nodes[i].op == IR_OP_MATMUL_INTEGER || g->nodes[i].op == IR_OP_CONV_INTEGER) &&
            (st = lower_int_contraction(g, i, &sh)) > 0)
            changed = 1;
    for (int i = 0; i < nn && st >= 0; i++)
        if (g->nodes[i].op == IR_OP_DEQUANTIZE_LINEAR && (st = lower_qdq(g, i)) > 0)
            changed = 1;
    if (st >= 0 && drop_repeated_fake_quant(g))
        changed = 1;
    free(sh.shadow);
    if (st < 0)
        return vitc_error(d, VITC_INTERNAL, NULL, "out of memory while lowering quantized ops");
    return changed ? rw_finish(g, d) : VITC_OK;
}
