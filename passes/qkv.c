/* qkv.c: merge-qkv.  Models that project q, k and v with three Linears on
 * the same input get one Linear with W = [Wq | Wk | Wv] (and the biases
 * side by side), whose output is [q | k | v] on the last axis: the [3][H][D]
 * layout the Attention node reads.  q, k and v become Slices of it, which
 * fuse-attention then sees through (view.c).
 *
 * merge = three Linears of one x, no activation or residual, equal shapes,
 *         feeding Q, K and V of one attention (attn.h), each read only there. */
#include "passes/attn.h"

#include <stdlib.h>
#include <string.h>

static const char *const role[3] = {"Q", "K", "V"};

/* The merged weight or bias: the three constants side by side on the last
 * axis (a missing bias is zeros).  K rows of N columns each. */
static int side_by_side(ir_graph *g, const int *c, int64_t K, int64_t N, int rank, const char *name,
                        const char *suffix)
{
    float *f = calloc((size_t)(K * 3 * N) + 1, sizeof(float));
    if (!f)
        return -1;
    for (int p = 0; p < 3; p++) {
        if (c[p] < 0)
            continue;
        const float *src = g->values[c[p]].data;
        for (int64_t k = 0; k < K; k++)
            memcpy(f + k * 3 * N + p * N, src + k * N, sizeof(float) * (size_t)N);
    }
    int64_t dims[2] = {K, 3 * N};
    int r = rank == 2 ? rw_const_f32(g, name, suffix, 2, dims, f) : rw_const_f32(g, name, suffix, 1, dims + 1, f);
    free(f);
    return r;
}

typedef struct {
    const ir_node *l[3]; /* the Q, K and V projections */
    ir_linear v[3];      /* and their views */
    int roots[3];        /* their outputs */
} qkv_match;

#define MISS(...) return (snprintf(why, nwhy, __VA_ARGS__), -1)

static int match(const ir_graph *g, const ir_node *sm, void *mv, char *why, size_t nwhy)
{
    qkv_match *m = mv;
    attn_skel s;
    view w[3];
    attn_rope rope;
    if (attn_skeleton(g, sm, &s, 0, why, nwhy) <= 0 ||
        attn_views(g, &s, &w[0], &w[1], &w[2], &rope, &s.scale, why, nwhy))
        return 0; /* fuse-attention explains these */
    if (w[0].root == w[1].root && w[0].root == w[2].root)
        return 0; /* already one projection */
    const ir_node **l = m->l;
    for (int p = 0; p < 3; p++) {
        l[p] = rw_producer(g, w[p].root);
        m->roots[p] = w[p].root;
        if (!l[p] || !ir_linear_of(l[p], &m->v[p], why, nwhy))
            return 0; /* not projections: nothing to merge */
    }
    for (int p = 0; p < 3; p++) {
        const ir_linear *v = &m->v[p];
        if (v->residual >= 0 || v->gate >= 0 || v->act != IR_ACT_NONE)
            MISS("the %s projection '%s' has an activation, a gate or a residual", role[p], l[p]->name);
        if (v->x != m->v[0].x)
            MISS("the %s projection '%s' reads another input than the Q projection", role[p], l[p]->name);
        if (p > 0 && (l[p] == l[0] || l[p] == l[p - 1]))
            MISS("Q, K and V share projections without being one packed projection");
        const ir_value *wp = &g->values[v->w], *w0 = &g->values[m->v[0].w];
        if (!ir_dim_eq(wp->dims[1], w0->dims[1]) || wp->dtype != IR_F32 || !rw_is_const(g, v->w) ||
            (v->bias >= 0 && !rw_is_const(g, v->bias)))
            MISS("the %s projection '%s' differs in width or is not constant", role[p], l[p]->name);
        int uses = rw_uses(g, w[p].root);
        if (uses != 1)
            MISS("the %s projection '%s' has %d readers; merging it would need a copy", role[p], l[p]->name, uses);
    }
    return 1;
}

#undef MISS

/* One Linear computes [q | k | v]; q, k and v become Slices of it. */
static int rewrite(ir_graph *g, int ni, const void *mv)
{
    const qkv_match *m = mv;
    const ir_node *const *l = m->l;
    const ir_value *w0 = &g->values[m->v[0].w];
    int64_t K = w0->dims[0].k, N = w0->dims[1].k;
    const char *name = rw_fused_name(g, l[0], l[2]);
    int ws[3], bs[3], idx[3], has_bias = 0;
    (void)ni;
    for (int p = 0; p < 3; p++) {
        ws[p] = m->v[p].w;
        bs[p] = m->v[p].bias;
        idx[p] = rw_index(g, l[p]);
        has_bias |= bs[p] >= 0;
    }
    int x = m->v[0].x;
    int wm = side_by_side(g, ws, K, N, 2, name, "/qkv_weight");
    int bm = has_bias ? side_by_side(g, bs, 1, N, 1, name, "/qkv_bias") : -1;
    int qkv = rw_new_value(g, name, "/qkv", IR_F32);
    if (wm < 0 || (has_bias && bm < 0) || qkv < 0)
        return -1;
    ir_linear v = ir_linear_make(x, wm, qkv);
    ir_node_spec spec;
    v.bias = bm;
    ir_linear_spec(&v, &spec);
    if (rw_set_spec(g, idx[0], name, "Linear+Linear+Linear", &spec))
        return -1;
    for (int p = 0; p < 3; p++) {
        int64_t st = p * N, en = (p + 1) * N, ax = -1;
        int sin[4] = {qkv, rw_const_i64(g, name, "/starts", 1, &st), rw_const_i64(g, name, "/ends", 1, &en),
                      rw_const_i64(g, name, "/axes", 1, &ax)};
        if (sin[1] < 0 || sin[2] < 0 || sin[3] < 0)
            return -1;
        int ok = p == 0 ? rw_add_node(g, IR_OP_SLICE, name, "Slice", 4, sin, m->roots[0], 0, NULL) >= 0
                        : !rw_set_node(g, idx[p], IR_OP_SLICE, name, "Slice", 4, sin, 1, &m->roots[p], 0, NULL);
        if (!ok)
            return -1;
    }
    return 0;
}

static const rw_rule rules[] = {
    {.name = "merge-qkv", .anchor = IR_OP_SOFTMAX, .size = sizeof(qkv_match), .match = match, .rewrite = rewrite},
};

int pass_merge_qkv(ir_graph *g, vitc_diag *d) { return RW_APPLY(g, rules, d); }
