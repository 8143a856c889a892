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

/* 1 if it fused the attention at Softmax node i, 0 if not, -1 out of memory. */
static int fuse(ir_graph *g, int i)
{
    const ir_node *sm = &g->nodes[i];
    attn_skel s;
    attn_layout L;
    view q, k, v;
    char why[512];
    int r = attn_skeleton(g, sm, &s, why, sizeof why);
    if (r == 0)
        return 0;
    if (r < 0 || attn_views(g, &s, &q, &k, &v, why, sizeof why) || attn_layout_of(g, &q, &k, &v, &L, why, sizeof why)) {
        rw_miss(g, sm, "%s", why);
        return 0;
    }
    const ir_value *root = &g->values[L.root];
    const char *name = rw_fused_name(g, s.scores, s.pv);
    char op_type[64];
    snprintf(op_type, sizeof op_type, "%s+Softmax+%s", ir_op_name(s.scores->op), ir_op_name(s.pv->op));
    int y = rw_new_value(g, name, "/heads_merged", root->dtype);
    if (y < 0)
        return -1;
    root = &g->values[L.root];
    ir_value *yv = &g->values[y];
    yv->rank = 3;
    yv->dims[0] = root->dims[0];
    yv->dims[1] = ir_dim_const(L.tokens);
    yv->dims[2] = ir_dim_const(L.heads * L.head_size);
    ir_attr at[5] = {rw_attr_int(IR_ATTR_HEADS, L.heads), rw_attr_int(IR_ATTR_HEAD_SIZE, L.head_size),
                     rw_attr_float(IR_ATTR_SCALE, (float)s.scale), rw_attr_float(IR_ATTR_POST_SCALE, (float)s.post_scale),
                     rw_attr_int(IR_ATTR_QKV_LAYOUT, L.layout)};
    int in = L.root;
    view ov;
    o_view(g, &s, &q, &L, y, &ov);
    if (rw_set_node(g, rw_index(g, s.pv), IR_OP_ATTENTION, name, op_type, 1, &in, 1, &y, 5, at) ||
        view_emit(g, &ov, s.o, name))
        return -1;
    rw_hit();
    return 1;
}

int pass_fuse_attention(ir_graph *g, vitc_diag *d)
{
    int changed = 0, again = 1;
    while (again) {
        again = 0;
        for (int i = 0; i < g->nnodes && !again; i++) {
            if (g->nodes[i].op != IR_OP_SOFTMAX)
                continue;
            int r = fuse(g, i);
            if (r < 0)
                return vitc_error(d, VITC_INTERNAL, &g->nodes[i], "out of memory");
            if (r > 0) {
                int st = rw_finish(g, d);
                if (st)
                    return st;
                again = changed = 1;
            }
        }
    }
    return changed ? rw_finish(g, d) : VITC_OK;
}
