/* patchify.c: the patch-embedding Conv (kernel = stride = patch, no padding,
 * no dilation, one group) becomes a reshape into patches plus a Linear:
 *
 *   x [B, C, H, W] -> (Slice to [.., Ho*p, Wo*q] when p, q do not divide H, W)
 *     -> Reshape [B, C, Ho, p, Wo, q] -> Transpose [B, Ho, Wo, C, p, q]
 *     -> Reshape [B, Ho*Wo, C*p*q] -> Linear(W [C*p*q, O], bias)
 *     -> Reshape [B, Ho, Wo, O] -> Transpose [B, O, Ho, Wo]  (the Conv's output)
 *
 * The tail usually meets the exporter's own Reshape/Transpose to tokens and
 * cancels in the next simplify, leaving Linear output [B, tokens, O]. */
#include "passes/rewrite.h"

#include <stdlib.h>
#include <string.h>

static int ints_are(const ir_node *n, ir_attr_id id, int count, int64_t v)
{
    const ir_attr *a = ir_attr_get(n, id);
    if (!a)
        return 1;
    if (a->kind != IR_AT_INTS || a->n != count)
        return 0;
    for (int i = 0; i < count; i++)
        if (a->ints[i] != v)
            return 0;
    return 1;
}

typedef struct {
    int64_t C, H, W, O, p, q; /* input channels and image size, output channels, patch size */
} patch_match;

/* The shapes the rewrite reshapes through: the image as patches, the
 * patches as rows of the matrix product, the product as the Conv's output. */
typedef struct {
    ir_dim d6[6], d3[3], d4[4];
} patch_dims;

static void patch_dims_of(const patch_match *m, ir_dim B, patch_dims *d)
{
    int64_t Ho = m->H / m->p, Wo = m->W / m->q;
    *d = (patch_dims){
        .d6 = {B, ir_dim_const(m->C), ir_dim_const(Ho), ir_dim_const(m->p), ir_dim_const(Wo), ir_dim_const(m->q)},
        .d3 = {B, ir_dim_const(Ho * Wo), ir_dim_const(m->C * m->p * m->q)},
        .d4 = {B, ir_dim_const(Ho), ir_dim_const(Wo), ir_dim_const(m->O)},
    };
}

#define MISS(...) return (snprintf(why, nwhy, __VA_ARGS__), -1)

/* conv_patchify = Conv(x, W, b) with kernel_shape = strides, pads 0, dilations 1, group 1 */
static int match(const ir_graph *g, const ir_node *n, void *mv, char *why, size_t nwhy)
{
    patch_match *m = mv;
    int x = n->inputs[0], w = n->inputs[1], b = ir_input(n, 2);
    const ir_value *xv = &g->values[x], *wv = &g->values[w];
    if (xv->rank != 4 || wv->rank != 4)
        return 0; /* 1-D convolutions are not patch embeddings */
    int64_t wd[4], kin[2] = {wv->dims[2].k, wv->dims[3].k};
    const ir_attr *st = ir_attr_get(n, IR_ATTR_STRIDES);
    if (!st || st->kind != IR_AT_INTS || st->n != 2 || st->ints[0] != kin[0] || st->ints[1] != kin[1])
        MISS("the strides are not the kernel size %lldx%lld (not a patch embedding)", (long long)kin[0],
             (long long)kin[1]);
    const int pad = ir_auto_pad_of(n);
    if (!ints_are(n, IR_ATTR_PADS, 4, 0) || (pad != IR_PAD_NOTSET && pad != IR_PAD_VALID))
        MISS("the Conv pads its input");
    if (!ints_are(n, IR_ATTR_DILATIONS, 2, 1) || ir_attr_int(n, IR_ATTR_GROUP, 1) != 1)
        MISS("the Conv is dilated or grouped");
    if (!rw_is_const(g, w) || (b >= 0 && !rw_is_const(g, b)) || wv->dtype != IR_F32 || xv->dtype != IR_F32)
        MISS("the weight or bias is not a float32 constant");
    if (!rw_static_dims(wv, wd) || xv->dims[2].e || xv->dims[3].e || xv->dims[1].e)
        MISS("the image size depends on the batch");
    *m = (patch_match){.C = xv->dims[1].k, .H = xv->dims[2].k, .W = xv->dims[3].k, .O = wd[0], .p = wd[2], .q = wd[3]};
    if (m->p < 1 || m->q < 1 || m->O < 1 || wd[1] != m->C || m->H < m->p || m->W < m->q)
        return 0; /* malformed; the interpreter reports it */
    patch_dims d;
    patch_dims_of(m, xv->dims[0], &d);
    if (!rw_shape_expressible(6, d.d6) || !rw_shape_expressible(3, d.d3) || !rw_shape_expressible(4, d.d4))
        MISS("the patches cannot be written as Reshapes (an empty dimension?)");
    return 1;
}

#undef MISS

static int rewrite(ir_graph *g, int ni, const void *mv)
{
    const patch_match *m = mv;
    const ir_node *n = &g->nodes[ni];
    int x = n->inputs[0], w = n->inputs[1], b = ir_input(n, 2), y = n->outputs[0];
    int64_t O = m->O, C = m->C, p = m->p, q = m->q, Ho = m->H / p, Wo = m->W / q, K = C * p * q;
    const char *name = n->name;
    ir_dim B = g->values[x].dims[0];
    /* Wm[(c*p + i)*q + j, o] = W[o, c, i, j] */
    int64_t cnt, mdims[2] = {K, O};
    double *wt = rw_const_f64(g, w, &cnt);
    float *wm = wt ? malloc(sizeof(float) * (size_t)(K * O)) : NULL;
    if (!wm) {
        free(wt);
        return -1;
    }
    for (int64_t o = 0; o < O; o++)
        for (int64_t k = 0; k < K; k++)
            wm[k * O + o] = (float)wt[o * K + k];
    int wmat = rw_const_f32(g, name, "/weight", 2, mdims, wm);
    free(wt);
    free(wm);
    if (wmat < 0)
        return -1;
    int cur = x;
    if (Ho * p != m->H || Wo * q != m->W) { /* the Conv ignores the last rows and columns */
        int64_t s[2] = {0, 0}, e[2] = {Ho * p, Wo * q}, ax[2] = {2, 3};
        int in[4] = {cur, rw_const_i64(g, name, "/starts", 2, s), rw_const_i64(g, name, "/ends", 2, e),
                     rw_const_i64(g, name, "/axes", 2, ax)};
        int out = rw_new_value(g, name, "/cropped", IR_F32);
        if (in[1] < 0 || in[2] < 0 || in[3] < 0 || out < 0 ||
            rw_add_node(g, IR_OP_SLICE, name, "Slice", 4, in, out, 0, NULL) < 0)
            return -1;
        cur = out;
    }
    patch_dims d;
    patch_dims_of(m, B, &d);
    int64_t perm6[6] = {0, 2, 4, 1, 3, 5}, perm4[4] = {0, 3, 1, 2};
    if ((cur = rw_reshape(g, cur, 6, d.d6, name, -1)) < 0 || (cur = rw_transpose(g, cur, 6, perm6, name, -1)) < 0 ||
        (cur = rw_reshape(g, cur, 3, d.d3, name, -1)) < 0)
        return -1;
    int tokens = rw_new_value(g, name, "/tokens", IR_F32);
    if (tokens < 0)
        return -1;
    ir_linear v = ir_linear_make(cur, wmat, tokens);
    ir_node_spec spec;
    v.bias = b;
    ir_linear_spec(&v, &spec);
    if (rw_set_spec(g, ni, name, "Conv", &spec))
        return -1;
    if ((cur = rw_reshape(g, tokens, 4, d.d4, name, -1)) < 0 || rw_transpose(g, cur, 4, perm4, name, y) < 0)
        return -1;
    return 0;
}

static const rw_rule rules[] = {
    {.name = "conv-patchify", .anchor = IR_OP_CONV, .size = sizeof(patch_match), .match = match, .rewrite = rewrite},
};

int pass_patchify(ir_graph *g, vitc_diag *d) { return RW_APPLY(g, rules, d); }
