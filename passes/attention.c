/* attention.c: fuse-attention.  Where attn_match.c recognises attention on
 * a packed projection (attn.h), the probabilities @ V node is replaced by an
 * Attention node (ops.def) reading the projection, followed by the view
 * that gives back the exporter's head-split result O from Attention's
 * [B, N, H*D] output.  The exporter's head merge after O then cancels
 * against that view in the next simplify, and the Q/K/V head splits, the
 * scores, the Softmax and the scale factors are left without readers. */
#include "passes/attn.h"

#include <string.h>

/* O's view of Y = Attention(...) [B, N, H*D], in O's own dimension order. */
static void o_view(const ir_graph *g, const attn_skel *s, const view *q, const attn_layout *L, int y, view *out)
{
    int nb = s->rank - 2;
    int64_t HD = L->heads * L->head_size;
    view c = {.root = y, .rank = s->rank};
    for (int d = 0; d < nb; d++) {
        c.nsub[d] = q->nsub[d];
        for (int j = 0; j < q->nsub[d]; j++) {
            view_sub sub = {g->values[L->root].dims[0], ir_dim_const(L->tokens * HD)};
            if (L->is_head[d][j])
                sub = (view_sub){ir_dim_const(L->heads), ir_dim_const(L->head_size)};
            c.sub[d][j] = sub;
        }
    }
    c.nsub[nb] = c.nsub[nb + 1] = 1;
    c.sub[nb][0] = (view_sub){ir_dim_const(L->tokens), ir_dim_const(HD)};
    c.sub[nb + 1][0] = (view_sub){ir_dim_const(L->head_size), ir_dim_const(1)};
    *out = c;
    for (int d = 0; d < s->rank; d++) {
        out->nsub[s->operm[d]] = c.nsub[d];
        memcpy(out->sub[s->operm[d]], c.sub[d], sizeof c.sub[d]);
    }
}

typedef struct {
    attn_skel s;
    attn_layout L;
    view q;
} attention_match;

static int match(const ir_graph *g, const ir_node *sm, void *mv, char *why, size_t nwhy)
{
    attention_match *m = mv;
    view k, v;
    int r = attn_skeleton(g, sm, &m->s, why, nwhy);
    if (r <= 0)
        return r;
    if (attn_views(g, &m->s, &m->q, &k, &v, why, nwhy) || attn_layout_of(g, &m->q, &k, &v, &m->L, why, nwhy))
        return -1;
    /* The rewrite gives back O as a view of the fused output; that view must
     * exist (it does not where a dimension is 0: an empty tensor). */
    view ov;
    const attn_layout *L = &m->L;
    ir_dim ydims[3] = {g->values[L->root].dims[0], ir_dim_const(L->tokens), ir_dim_const(L->heads * L->head_size)};
    o_view(g, &m->s, &m->q, L, L->root, &ov);
    if (!view_can_emit(&ov, 3, ydims)) {
        snprintf(why, nwhy, "the exporter's attention output cannot be written as a view of [B, tokens, heads*head_size] (an empty dimension?)");
        return -1;
    }
    return 1;
}

/* The probabilities @ V node becomes the Attention; the view after it gives
 * back the exporter's O. */
static int rewrite(ir_graph *g, int ni, const void *mv)
{
    const attention_match *m = mv;
    const attn_skel *s = &m->s;
    const attn_layout *L = &m->L;
    (void)ni;
    const char *name = rw_fused_name(g, s->scores, s->pv);
    char op_type[64];
    snprintf(op_type, sizeof op_type, "%s+Softmax+%s", ir_op_name(s->scores->op), ir_op_name(s->pv->op));
    int y = rw_new_value(g, name, "/heads_merged", g->values[L->root].dtype);
    if (y < 0)
        return -1;
    const ir_value *root = &g->values[L->root];
    ir_value *yv = &g->values[y];
    yv->rank = 3;
    yv->dims[0] = root->dims[0];
    yv->dims[1] = ir_dim_const(L->tokens);
    yv->dims[2] = ir_dim_const(L->heads * L->head_size);
    ir_attr at[5] = {rw_attr_int(IR_ATTR_HEADS, L->heads), rw_attr_int(IR_ATTR_HEAD_SIZE, L->head_size),
                     rw_attr_float(IR_ATTR_SCALE, (float)s->scale), rw_attr_float(IR_ATTR_POST_SCALE, (float)s->post_scale),
                     rw_attr_int(IR_ATTR_QKV_LAYOUT, L->layout)};
    int in = L->root;
    view ov;
    o_view(g, s, &m->q, L, y, &ov);
    return rw_set_node(g, rw_index(g, s->pv), IR_OP_ATTENTION, name, op_type, 1, &in, 1, &y, 5, at) ||
                   view_emit(g, &ov, s->o, name)
               ? -1
               : 0;
}

static const rw_rule rules[] = {
    {.name = "attention", .anchor = IR_OP_SOFTMAX, .size = sizeof(attention_match), .match = match, .rewrite = rewrite},
};

int pass_fuse_attention(ir_graph *g, vitc_diag *d) { return RW_APPLY(g, rules, d); }
