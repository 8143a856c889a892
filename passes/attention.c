/* attention.c: fuse-attention.  Where attn_match.c recognises attention on
 * a packed projection, or cross-attention on a Q projection and a packed K, V
 * one (attn.h), the probabilities @ V node is replaced by an
 * Attention node (ops.def) reading the projection, followed by the view
 * that gives back the exporter's head-split result O from Attention's
 * [B, N, H*D] output.  The exporter's head merge after O then cancels
 * against that view in the next simplify, and the Q/K/V head splits, the
 * scores, the Softmax and the scale factors are left without readers. */
#include "passes/attn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MISS(...) return (snprintf(why, nwhy, __VA_ARGS__), -1)

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
    attn_rope rope; /* rope.r -1: none */
    view q;
    ir_dim bias_dims[4]; /* the bias as Attention reads it: [1|B, 1|H, 1|N, N] */
} attention_match;

/* The bias added to the scores as Attention's [1|B, 1|H, 1|N, N] input.
 * Its dimensions, right-aligned against the scores' (batch..., i, j), are 1
 * (broadcast) or the scores' own; the batch dimensions hold the image and
 * head sub-axes of Q's view (attn_layout_of), and a bias that is not
 * broadcast along them must hold the image before the head, so that a
 * Reshape (no copy) gives the bias Attention reads. */
static int bias_dims(const ir_graph *g, attention_match *m, char *why, size_t nwhy)
{
    const attn_skel *s = &m->s;
    const attn_layout *L = &m->L;
    const ir_value *b = &g->values[s->bias], *sc = &g->values[s->scores->outputs[0]];
    int r = s->rank, off = r - b->rank, seen_head = 0;
    if (off < 0)
        MISS("the mask or bias '%s' has rank %d, the scores %d", b->name, b->rank, r);
    m->bias_dims[0] = m->bias_dims[1] = m->bias_dims[2] = ir_dim_const(1);
    m->bias_dims[3] = ir_dim_const(L->kv_tokens);
    for (int c = 0; c < r; c++) {
        ir_dim d = c >= off ? b->dims[c - off] : ir_dim_const(1);
        if (d.k == 1 && d.e == 0 && c != r - 1)
            continue;
        if (!ir_dim_eq(d, sc->dims[c]))
            MISS("the mask or bias '%s' dimension %d is not 1 or the scores' own", b->name, c - off);
        if (c == r - 2)
            m->bias_dims[2] = d;
        for (int j = 0; c < r - 2 && j < L->nbatch_sub[c]; j++) {
            if (!L->is_head[c][j] && seen_head)
                MISS("the mask or bias '%s' holds the heads before the images", b->name);
            seen_head |= L->is_head[c][j];
            m->bias_dims[L->is_head[c][j] ? 1 : 0] = L->is_head[c][j] ? ir_dim_const(L->heads) : g->values[L->root].dims[0];
        }
    }
    if (!rw_shape_expressible(4, m->bias_dims))
        MISS("the mask or bias '%s' cannot be reshaped for the Attention op", b->name);
    return 0;
}

/* Windowed attention's constant terms (attn_skeleton) as one bias the
 * Attention reads, [P|1, H, N, Nk]: image i takes row i % P.  The scores
 * must be [images, heads, N, Nk] and the images P windows of each image. */
static int window_bias_dims(const ir_graph *g, attention_match *m, char *why, size_t nwhy)
{
    const attn_skel *s = &m->s;
    const attn_layout *L = &m->L;
    const ir_value *root = &g->values[L->root];
    if (s->rank != 4 || L->nbatch_sub[0] != 1 || L->is_head[0][0] || L->nbatch_sub[1] != 1 || !L->is_head[1][0])
        MISS("the windowed scores are not [images, heads, queries, keys]");
    if (s->period && (root->dims[0].k != s->period || root->dims[0].e != 1))
        MISS("the scores are split into %lld windows, but '%s' does not hold %lld windows of each image",
             (long long)s->period, root->name, (long long)s->period);
    for (int i = 0; i < s->nterms; i++) {
        const ir_value *t = &g->values[s->terms[i]];
        int r = s->term_split[i] ? 5 : 4;
        for (int k = 0; k < t->rank; k++) {
            int a = r - t->rank + k; /* its axis among (images[, windows], heads, queries, keys) */
            if (a < 0 || (a == 0 && !(t->dims[k].k == 1 && t->dims[k].e == 0)))
                MISS("the windowed bias '%s' varies along the images", t->name);
        }
    }
    m->bias_dims[0] = ir_dim_const(s->period ? s->period : 1);
    m->bias_dims[1] = ir_dim_const(L->heads);
    m->bias_dims[2] = ir_dim_const(L->tokens);
    m->bias_dims[3] = ir_dim_const(L->kv_tokens);
    return 0;
}

/* The windowed terms summed into the bias [P|1, H, N, Nk] (window_bias_dims). */
static int window_bias(ir_graph *g, const attention_match *m, const char *name)
{
    const attn_skel *s = &m->s;
    int64_t d[4] = {m->bias_dims[0].k, m->bias_dims[1].k, m->bias_dims[2].k, m->bias_dims[3].k};
    int64_t n = d[0] * d[1] * d[2] * d[3];
    float *b = calloc((size_t)n + 1, sizeof *b);
    if (!b)
        return -1;
    for (int i = 0; i < s->nterms; i++) {
        /* a term added to the split view [images, windows, H, N, Nk] has one row per window; one added to the
         * scores [images, H, N, Nk] the same for every window (window_bias_dims: neither varies with the image) */
        int split = s->term_split[i];
        int64_t sd[5] = {1, d[0], d[1], d[2], d[3]}, pd[4] = {1, d[1], d[2], d[3]}, per = d[1] * d[2] * d[3];
        double *v = split ? rw_const_broadcast(g, s->terms[i], 5, sd) : rw_const_broadcast(g, s->terms[i], 4, pd);
        if (!v) {
            free(b);
            return -1;
        }
        for (int64_t w = 0; w < d[0]; w++)
            for (int64_t j = 0; j < per; j++)
                b[w * per + j] += (float)v[(split ? w * per : 0) + j];
        free(v);
    }
    int v = rw_const_f32(g, name, "/window_bias", 4, d, b);
    free(b);
    return v;
}

static int match_with(const ir_graph *g, const ir_node *sm, void *mv, int fq_ok, char *why, size_t nwhy)
{
    attention_match *m = mv;
    view k, v;
    int r = attn_skeleton(g, sm, &m->s, fq_ok, why, nwhy);
    if (r <= 0)
        return r;
    if (attn_views(g, &m->s, &m->q, &k, &v, &m->rope, &m->s.scale, why, nwhy) ||
        attn_layout_of(g, &m->q, &k, &v, &m->L, why, nwhy) || (m->s.bias >= 0 && bias_dims(g, m, why, nwhy)) ||
        (m->s.nterms && window_bias_dims(g, m, why, nwhy)))
        return -1;
    if (m->rope.r >= 0 && m->L.q_root >= 0) {
        snprintf(why, nwhy, "Q and K of cross-attention are rotated (Attention rotates those of self-attention only)");
        return -1;
    }
    if (m->rope.r >= 0 && (m->s.fq[IR_ATTN_FQ_Q][1] != 0 || m->s.fq[IR_ATTN_FQ_K][1] != 0)) {
        snprintf(why, nwhy, "Q or K is both rotated and fake-quantized");
        return -1;
    }
    const attn_rope *ro = &m->rope;
    if (ro->r >= 0 && ro->heads > 1 &&
        (ro->heads != m->L.heads || ro->head_sub >= m->L.nbatch_sub[ro->head_dim] ||
         !m->L.is_head[ro->head_dim][ro->head_sub])) {
        snprintf(why, nwhy, "the rotary tables of '%s' vary along an axis of %lld that is not Q's %lld heads",
                 g->values[ro->r].name, (long long)ro->heads, (long long)m->L.heads);
        return -1;
    }
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

static int match(const ir_graph *g, const ir_node *sm, void *mv, char *why, size_t nwhy)
{
    return match_with(g, sm, mv, 0, why, nwhy);
}

static int match_fq(const ir_graph *g, const ir_node *sm, void *mv, char *why, size_t nwhy)
{
    return match_with(g, sm, mv, 1, why, nwhy);
}

/* v as the shape dims: v itself where it has it, else a Reshape of it; -1. */
static int shaped(ir_graph *g, int v, int rank, const ir_dim *dims, const char *name)
{
    const ir_value *x = &g->values[v];
    int same = x->rank == rank;
    for (int i = 0; same && i < rank; i++)
        same = ir_dim_eq(x->dims[i], dims[i]);
    return same ? v : rw_reshape(g, v, rank, dims, name, -1);
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
    ir_attention a = ir_attention_make(L->root, y, L->heads, L->head_size);
    a.bias = s->bias;
    a.q = L->q_root;
    ir_dim qdims[3] = {g->values[L->root].dims[0], ir_dim_const(L->tokens), ir_dim_const(L->heads * L->head_size)};
    if (a.q >= 0 && (a.q = shaped(g, a.q, 3, qdims, name)) < 0) /* [1, B, HD] (one query, sequence first) */
        return -1;
    a.layout = (ir_qkv_layout)L->layout;
    a.scale = (float)s->scale;
    a.post_scale = (float)s->post_scale;
    memcpy(a.fq, s->fq, sizeof a.fq);
    if (m->rope.r >= 0) {
        if ((a.rope = attn_rope_table(g, &m->rope, name)) < 0)
            return -1;
        a.rope_pairing = m->rope.pairing;
        a.rope_start = m->rope.start;
    }
    if (s->bias >= 0 && (a.bias = shaped(g, s->bias, 4, m->bias_dims, name)) < 0)
        return -1;
    if (s->nterms && (a.bias = window_bias(g, m, name)) < 0)
        return -1;
    view ov;
    ir_node_spec spec;
    o_view(g, s, &m->q, L, y, &ov);
    ir_attention_spec(&a, &spec);
    /* the Attention takes the place of the output's FakeQuant where it has one */
    return rw_set_spec(g, rw_index(g, s->fq_out ? s->fq_out : s->pv), name, op_type, &spec) ||
                   view_emit(g, &ov, s->o, name)
               ? -1
               : 0;
}

static const rw_rule rules[] = {
    {.name = "attention", .anchor = IR_OP_SOFTMAX, .size = sizeof(attention_match), .match = match, .rewrite = rewrite},
};
/* A backend with int8 kernels (pass_options.int8) runs quantized attention
 * fused: its FakeQuants become the Attention's fake-quant points. */
static const rw_rule rules_fq[] = {
    {.name = "attention", .anchor = IR_OP_SOFTMAX, .size = sizeof(attention_match), .match = match_fq,
     .rewrite = rewrite},
};

int pass_fuse_attention(ir_graph *g, const pass_options *o, vitc_diag *d)
{
    return o && o->int8 != PASS_INT8_NONE ? RW_APPLY(g, rules_fq, d) : RW_APPLY(g, rules, d);
}
