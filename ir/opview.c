/* opview.c: decoding and building the structured ops' views (opview.h): the
 * one place that reads their input slots and attributes. */
#include "ir/opview.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define IR_MAX_HEADS 65536 /* heads and head_size: beyond any model, small enough for int64 products */

static int slot(const ir_node *n, int i) { return ir_input(n, i); }

/* n's fake_quant attribute as npoints points {mul, scale, zero, qmin,
 * qmax} in out (all 0 without it; a point with scale 0 is absent): 1, or 0
 * when it holds another count or a point that is none (a positive finite
 * scale, a non-zero mul, a whole zero point inside its range), why saying
 * which. */
static int fake_quant_points(const ir_node *n, int npoints, float (*out)[5], char *why, size_t len)
{
    const char *op = ir_op_name(n->op);
    const ir_attr *fq = ir_attr_get(n, IR_ATTR_FAKE_QUANT);
    memset(out, 0, sizeof(float[5]) * (size_t)npoints);
    if (fq && (fq->kind != IR_AT_FLOATS || fq->n != npoints * 5)) {
        snprintf(why, len, "%s's fake_quant holds %d floats, not %d", op, fq->n, npoints * 5);
        return 0;
    }
    for (int p = 0; fq && p < npoints; p++) {
        const float *f = fq->floats + 5 * p;
        if (f[1] == 0)
            continue;
        if (!(f[1] > 0 && isfinite(f[1]) && isfinite(f[0]) && f[0] != 0 && f[3] < f[4] && isfinite(f[3]) &&
              isfinite(f[4]) && f[2] >= f[3] && f[2] <= f[4] && f[2] == nearbyintf(f[2]))) {
            snprintf(why, len, "%s's fake-quant point %d (mul %g, scale %g, zero %g, range %g..%g) is not a positive "
                     "scale with a whole zero point in its range", op, p, f[0], f[1], f[2], f[3], f[4]);
            return 0;
        }
        memcpy(out[p], f, sizeof out[p]);
    }
    return 1;
}

int ir_linear_of(const ir_node *n, ir_linear *v, char *why, size_t len)
{
    if (len)
        why[0] = 0;
    if ((n->op != IR_OP_LINEAR && n->op != IR_OP_LINEAR_INT8) || n->ninputs < 2 || n->noutputs < 1)
        return 0;
    int64_t act = ir_attr_int(n, IR_ATTR_ACTIVATION, IR_ACT_NONE);
    if (act < 0 || act >= IR_ACT_COUNT) {
        snprintf(why, len, "unknown Linear activation %lld (not one of 0..%d)", (long long)act, IR_ACT_COUNT - 1);
        return 0;
    }
    memset(v, 0, sizeof *v);
    v->x = n->inputs[IR_LINEAR_X];
    v->w = n->inputs[IR_LINEAR_W];
    v->bias = slot(n, IR_LINEAR_BIAS);
    v->residual = slot(n, IR_LINEAR_RESIDUAL);
    v->gate = slot(n, IR_LINEAR_GATE);
    v->w_scale = -1;
    v->y = n->outputs[0];
    v->act = (ir_act)act;
    if (n->op == IR_OP_LINEAR)
        return 1;
    v->int8 = 1;
    v->w_scale = v->gate;
    v->gate = -1;
    int64_t aq = ir_attr_int(n, IR_ATTR_A_QUANT, -1), za = ir_attr_int(n, IR_ATTR_A_ZERO, 0);
    v->a_scale = ir_attr_float(n, IR_ATTR_A_SCALE, 1.0f);
    if (v->w_scale < 0) {
        snprintf(why, len, "LinearInt8 needs its weight scales (input %d)", IR_LINEAR_W_SCALE);
        return 0;
    }
    if (aq < 0 || aq >= IR_AQ_COUNT || za < 0 || za > 255 || !(v->a_scale > 0) || v->a_scale > 3.4e38f) {
        snprintf(why, len, "LinearInt8's a_quant %lld (0..%d), a_zero %lld (0..255) or a_scale %g (> 0) is out of range",
                 (long long)aq, IR_AQ_COUNT - 1, (long long)za, (double)v->a_scale);
        return 0;
    }
    v->aq = (ir_aquant)aq;
    v->a_zero = (int)za;
    if (!fake_quant_points(n, 2, v->fq, why, len))
        return 0;
    if (ir_fake_quant_any(v->fq, 2) && v->act != IR_ACT_NONE) {
        snprintf(why, len, "LinearInt8 has fake-quant points and an activation");
        return 0;
    }
    return 1;
}

int ir_attention_of(const ir_node *n, ir_attention *v, char *why, size_t len)
{
    if (len)
        why[0] = 0;
    if (n->op != IR_OP_ATTENTION || n->ninputs < 1 || n->noutputs < 1)
        return 0;
    int64_t h = ir_attr_int(n, IR_ATTR_HEADS, 0), d = ir_attr_int(n, IR_ATTR_HEAD_SIZE, 0);
    int64_t layout = ir_attr_int(n, IR_ATTR_QKV_LAYOUT, IR_QKV_PARTS_HEADS);
    if (h < 1 || d < 1 || h > IR_MAX_HEADS || d > IR_MAX_HEADS) {
        snprintf(why, len, "Attention needs positive heads and head_size, got %lld and %lld", (long long)h,
                 (long long)d);
        return 0;
    }
    if (layout != IR_QKV_PARTS_HEADS && layout != IR_QKV_HEADS_PARTS) {
        snprintf(why, len, "Attention's qkv_layout is %lld, not 0 or 1", (long long)layout);
        return 0;
    }
    int64_t pairing = ir_attr_int(n, IR_ATTR_ROPE_PAIRING, IR_ROPE_NONE);
    int64_t start = ir_attr_int(n, IR_ATTR_ROPE_START, 0);
    v->rope = slot(n, IR_ATTN_ROPE);
    if (v->rope >= 0) {
        if (pairing != IR_ROPE_HALVES && pairing != IR_ROPE_INTERLEAVED) {
            snprintf(why, len, "Attention's rope_pairing is %lld, not 1 (halves) or 2 (interleaved)", (long long)pairing);
            return 0;
        }
        if (d % 2 || start < 0 || start > INT32_MAX || slot(n, IR_ATTN_Q) >= 0) {
            snprintf(why, len, "a rotary table needs self-attention, an even head_size and a rope_start in 0..2^31 "
                     "(head_size %lld, rope_start %lld)", (long long)d, (long long)start);
            return 0;
        }
    } else if (pairing != IR_ROPE_NONE) {
        snprintf(why, len, "Attention has a rope_pairing but no rotary table");
        return 0;
    }
    if (!fake_quant_points(n, IR_ATTN_FQ_N, v->fq, why, len))
        return 0;
    for (int p = 0; p < IR_ATTN_FQ_N; p++) {
        const float *f = v->fq[p];
        if (f[1] == 0)
            continue;
        if ((p == IR_ATTN_FQ_S || p == IR_ATTN_FQ_S2) && (f[0] < 0 || slot(n, IR_ATTN_BIAS) >= 0)) {
            snprintf(why, len, "Attention's scores fake-quant point has mul %g or a bias with it", f[0]);
            return 0;
        }
        if (p <= IR_ATTN_FQ_K && v->rope >= 0) {
            snprintf(why, len, "Attention fake-quantizes Q or K and rotates them");
            return 0;
        }
    }
    if (v->fq[IR_ATTN_FQ_S2][1] != 0 && v->fq[IR_ATTN_FQ_S][1] == 0) {
        snprintf(why, len, "Attention's second scores fake-quant point comes without the first");
        return 0;
    }
    v->rope_pairing = v->rope >= 0 ? (ir_rope_pairing)pairing : IR_ROPE_NONE;
    v->rope_start = v->rope >= 0 ? start : 0;
    v->qkv = n->inputs[IR_ATTN_QKV];
    v->bias = slot(n, IR_ATTN_BIAS);
    v->q = slot(n, IR_ATTN_Q);
    v->y = n->outputs[0];
    v->heads = h;
    v->head_size = d;
    v->layout = (ir_qkv_layout)layout;
    v->scale = ir_attr_float(n, IR_ATTR_SCALE, 1.0f);
    v->post_scale = ir_attr_float(n, IR_ATTR_POST_SCALE, 1.0f);
    v->parts = v->q >= 0 ? 2 : 3;
    return 1;
}

int ir_norm_of(const ir_node *n, ir_norm *v, char *why, size_t len)
{
    if (len)
        why[0] = 0;
    if ((n->op != IR_OP_LAYERNORM && n->op != IR_OP_RMS_NORM) || n->ninputs < 2 || n->noutputs < 1)
        return 0;
    int64_t stash = ir_attr_int(n, IR_ATTR_STASH_TYPE, 1);
    int sdt = stash > 0 && stash < 1000 ? ir_dtype_from_onnx((int)stash) : -1;
    if (sdt < 0 || !ir_dtype_is_float((ir_dtype)sdt)) {
        snprintf(why, len, "stash_type %lld is not a float type", (long long)stash);
        return 0;
    }
    v->x = n->inputs[IR_NORM_X];
    v->scale = n->inputs[IR_NORM_SCALE];
    v->bias = slot(n, IR_NORM_BIAS);
    v->y = n->outputs[IR_NORM_Y];
    v->mean = n->noutputs > IR_NORM_MEAN ? n->outputs[IR_NORM_MEAN] : -1;
    v->inv_std = n->noutputs > IR_NORM_INV_STD ? n->outputs[IR_NORM_INV_STD] : -1;
    v->axis = ir_attr_int(n, IR_ATTR_AXIS, -1);
    v->eps = ir_attr_float(n, IR_ATTR_EPSILON, 1e-5f);
    v->stash = (ir_dtype)sdt;
    v->centered = n->op == IR_OP_LAYERNORM;
    return 1;
}

int ir_norm_axis(const ir_norm *v, int rank)
{
    int64_t a = v->axis < 0 ? v->axis + rank : v->axis;
    return a >= 0 && a < rank ? (int)a : -1;
}

static int report(const ir_node *n, vitc_diag *d, int ok, const char *why)
{
    if (ok)
        return VITC_OK;
    return vitc_error(d, VITC_BAD_INPUT, n, "%s", why[0] ? why : "is not the op its view decodes");
}

int ir_linear_get(const ir_node *n, ir_linear *v, vitc_diag *d)
{
    char why[160];
    return report(n, d, ir_linear_of(n, v, why, sizeof why), why);
}

int ir_attention_get(const ir_node *n, ir_attention *v, vitc_diag *d)
{
    char why[160];
    return report(n, d, ir_attention_of(n, v, why, sizeof why), why);
}

int ir_norm_get(const ir_node *n, ir_norm *v, vitc_diag *d)
{
    char why[160];
    return report(n, d, ir_norm_of(n, v, why, sizeof why), why);
}

void ir_attention_bias_strides(const ir_graph *g, const ir_attention *a, int64_t nk, int64_t s[3])
{
    s[0] = s[1] = s[2] = 0;
    if (a->bias < 0)
        return;
    const ir_dim *d = g->values[a->bias].dims; /* [1|B, 1|H, 1|Nq, Nk] (shape.c) */
    s[2] = d[2].k == 1 && d[2].e == 0 ? 0 : nk;
    s[1] = d[1].k == 1 ? 0 : d[2].k * nk;
    s[0] = d[0].k == 1 && d[0].e == 0 ? 0 : d[1].k * d[2].k * nk;
}

int64_t ir_attention_bias_period(const ir_graph *g, const ir_attention *a)
{
    if (a->bias < 0)
        return 0;
    ir_dim b = g->values[a->bias].dims[0], x = g->values[a->qkv].dims[0];
    return b.e == 0 && b.k > 1 && !ir_dim_eq(b, x) && x.e >= 1 && x.k == b.k ? b.k : 0;
}

static ir_attr attr_int(ir_attr_id id, int64_t v) { return (ir_attr){.id = id, .kind = IR_AT_INT, .i = v, .tensor = -1}; }
static ir_attr attr_float(ir_attr_id id, float v) { return (ir_attr){.id = id, .kind = IR_AT_FLOAT, .f = v, .tensor = -1}; }

/* The operands up to the last present one. */
static void spec_inputs(ir_node_spec *s, int n, const int *in)
{
    s->nin = 0;
    for (int i = 0; i < n; i++) {
        s->in[i] = in[i];
        if (in[i] >= 0 || i == 0)
            s->nin = i + 1;
    }
}

void ir_linear_spec(const ir_linear *v, ir_node_spec *s)
{
    memset(s, 0, sizeof *s);
    s->op = v->int8 ? IR_OP_LINEAR_INT8 : IR_OP_LINEAR;
    int in[IR_LINEAR_NIN] = {[IR_LINEAR_X] = v->x, [IR_LINEAR_W] = v->w, [IR_LINEAR_BIAS] = v->bias,
                             [IR_LINEAR_RESIDUAL] = v->residual, [IR_LINEAR_GATE] = v->int8 ? v->w_scale : v->gate};
    spec_inputs(s, IR_LINEAR_NIN, in);
    if (s->nin < 2)
        s->nin = 2;
    s->out = v->y;
    if (v->act != IR_ACT_NONE)
        s->attrs[s->nattrs++] = attr_int(IR_ATTR_ACTIVATION, v->act);
    if (v->int8) {
        s->attrs[s->nattrs++] = attr_int(IR_ATTR_A_QUANT, v->aq);
        if (v->aq == IR_AQ_STATIC) {
            s->attrs[s->nattrs++] = attr_float(IR_ATTR_A_SCALE, v->a_scale);
            s->attrs[s->nattrs++] = attr_int(IR_ATTR_A_ZERO, v->a_zero);
        }
        if (ir_fake_quant_any(v->fq, 2)) /* copied where the node is made */
            s->attrs[s->nattrs++] = (ir_attr){.id = IR_ATTR_FAKE_QUANT, .kind = IR_AT_FLOATS, .n = 10,
                                              .floats = (float *)&v->fq[0][0], .tensor = -1};
    }
}

void ir_attention_spec(const ir_attention *v, ir_node_spec *s)
{
    memset(s, 0, sizeof *s);
    s->op = IR_OP_ATTENTION;
    int in[IR_ATTN_NIN] = {[IR_ATTN_QKV] = v->qkv, [IR_ATTN_BIAS] = v->bias, [IR_ATTN_Q] = v->q,
                           [IR_ATTN_ROPE] = v->rope};
    spec_inputs(s, IR_ATTN_NIN, in);
    s->out = v->y;
    ir_attr at[5] = {attr_int(IR_ATTR_HEADS, v->heads), attr_int(IR_ATTR_HEAD_SIZE, v->head_size),
                     attr_float(IR_ATTR_SCALE, v->scale), attr_float(IR_ATTR_POST_SCALE, v->post_scale),
                     attr_int(IR_ATTR_QKV_LAYOUT, v->layout)};
    memcpy(s->attrs, at, sizeof at);
    s->nattrs = 5;
    if (v->rope >= 0) {
        s->attrs[s->nattrs++] = attr_int(IR_ATTR_ROPE_PAIRING, v->rope_pairing);
        s->attrs[s->nattrs++] = attr_int(IR_ATTR_ROPE_START, v->rope_start);
    }
    if (ir_fake_quant_any(v->fq, IR_ATTN_FQ_N)) /* the floats are copied where the node is made (rw_set_node) */
        s->attrs[s->nattrs++] = (ir_attr){.id = IR_ATTR_FAKE_QUANT, .kind = IR_AT_FLOATS, .n = IR_ATTN_FQ_N * 5,
                                          .floats = (float *)&v->fq[0][0], .tensor = -1};
}

double ir_fake_quant_code(const float fq[5], double x)
{
    float xs = (float)(x * fq[0]);
    double t = nearbyint((double)(float)((double)xs / fq[1])) + fq[2];
    t = t > fq[3] ? t : fq[3]; /* a NaN goes to qmin */
    return t < fq[4] ? t : fq[4];
}

double ir_fake_quant_point(const float fq[5], double x)
{
    if (fq[1] == 0)
        return x;
    return (double)(float)((float)(ir_fake_quant_code(fq, x) - fq[2]) * fq[1]);
}

void ir_norm_spec(const ir_norm *v, ir_node_spec *s)
{
    memset(s, 0, sizeof *s);
    s->op = v->centered ? IR_OP_LAYERNORM : IR_OP_RMS_NORM;
    int in[IR_NORM_NIN] = {[IR_NORM_X] = v->x, [IR_NORM_SCALE] = v->scale, [IR_NORM_BIAS] = v->bias};
    spec_inputs(s, IR_NORM_NIN, in);
    s->out = v->y;
    s->attrs[s->nattrs++] = attr_int(IR_ATTR_AXIS, v->axis);
    s->attrs[s->nattrs++] = attr_float(IR_ATTR_EPSILON, v->eps);
    if (v->stash != IR_F32)
        s->attrs[s->nattrs++] = attr_int(IR_ATTR_STASH_TYPE, ir_dtype_onnx_code(v->stash));
}

ir_linear ir_linear_make(int x, int w, int y)
{
    return (ir_linear){.x = x, .w = w, .bias = -1, .residual = -1, .gate = -1, .y = y, .act = IR_ACT_NONE,
                       .w_scale = -1, .a_scale = 1.0f};
}

ir_norm ir_norm_make(int x, int scale, int y, int64_t axis, float eps, int centered)
{
    return (ir_norm){.x = x, .scale = scale, .bias = -1, .y = y, .mean = -1, .inv_std = -1, .axis = axis, .eps = eps,
                     .stash = IR_F32, .centered = centered};
}

ir_attention ir_attention_make(int qkv, int y, int64_t heads, int64_t head_size)
{
    return (ir_attention){.qkv = qkv, .bias = -1, .q = -1, .rope = -1, .y = y, .heads = heads, .head_size = head_size,
                          .layout = IR_QKV_PARTS_HEADS, .scale = 1.0f, .post_scale = 1.0f, .parts = 3};
}
