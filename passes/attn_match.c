/* attn_match.c: recognising attention (attn.h).
 *
 * The skeleton (scores, Softmax, probabilities @ V, scalar factors) is
 * matched on the ops themselves; where Q, K and V come from is decided on
 * their views (view.c), so that every exporter's way of splitting heads out
 * of a packed projection -- timm's reshape/permute/unbind, einops's
 * "(h d qkv)", torchvision's in_proj with batch-folded heads -- is recognised
 * by what it computes, not by how it is spelled. */
#include "ir/einsum.h"
#include "passes/attn.h"

#include <stdlib.h>
#include <string.h>

#define MISS(...) return (snprintf(why, nwhy, __VA_ARGS__), -1)

/* Strips scalar factors (Mul by a constant, Div by a constant) off v,
 * multiplying them into *f. */
static int strip_factors(const ir_graph *g, int v, double *f)
{
    int o;
    double c;
    while (pat_scaled(g, v, &o, &c) && c != 0) {
        *f *= c;
        v = o;
    }
    return v;
}

/* Where v is made by a FakeQuant of one scale and zero point: f = {mul,
 * scale, zero, qmin, qmax} (mul: the scalar factors on its input) and the
 * value under them; else v, f[1] 0. */
static int strip_fake_quant(const ir_graph *g, int v, float f[5])
{
    const ir_node *p = rw_producer(g, v);
    double mul = 1;
    f[1] = 0;
    if (!p || !rw_fake_quant_point(g, p, 1, f))
        return v;
    int x = strip_factors(g, p->inputs[0], &mul);
    f[0] = (float)mul;
    return x;
}

/* An Einsum equation "t0,t1->out" (ir/einsum.h), no letter repeated in a term; 0 when it is one. */
static int parse_einsum(const ir_node *n, char t[2][IR_MAX_RANK + 1], char out[IR_MAX_RANK + 1])
{
    ir_einsum e;
    char why[128];
    if (ir_einsum_of(n, &e, why, sizeof why) || e.nterms != 2 || !e.explicit_out || e.repeats)
        return -1;
    memcpy(t, e.terms, 2 * sizeof e.terms[0]);
    memcpy(out, e.out, sizeof e.out);
    return 0;
}

/* Positions in term of the letters of want (length n); 0 if all found. */
static int positions(const char *term, const char *want, int n, int *perm)
{
    if ((int)strlen(term) != n)
        return -1;
    for (int c = 0; c < n; c++) {
        const char *p = strchr(term, want[c]);
        if (!p)
            return -1;
        perm[c] = (int)(p - term);
    }
    return 0;
}

/* scores = MatMul(Q, K^T) | Einsum("..id,..jd->..ij") with i, j, d anywhere in the terms */
static int match_scores(const ir_graph *g, const ir_node *n, attn_skel *s, char *why, size_t nwhy)
{
    int r = g->values[n->outputs[0]].rank;
    s->rank = r;
    if (r < 2)
        MISS("the scores have rank %d", r);
    if (n->op == IR_OP_MATMUL) {
        const ir_value *a = &g->values[n->inputs[0]], *b = &g->values[n->inputs[1]];
        if (a->rank != r || b->rank != r)
            MISS("Q @ K^T broadcasts (ranks %d and %d)", a->rank, b->rank);
        for (int c = 0; c < r; c++) {
            s->qperm[c] = c;
            s->kperm[c] = c < r - 2 ? c : c == r - 2 ? r - 1 : r - 2;
        }
        s->q = n->inputs[0];
        s->k = n->inputs[1];
        return 0;
    }
    char t[2][IR_MAX_RANK + 1], out[IR_MAX_RANK + 1], want[IR_MAX_RANK + 1];
    if (parse_einsum(n, t, out) || (int)strlen(out) != r)
        MISS("the scores Einsum is not of the form \"..id,..jd->..ij\"");
    char i = out[r - 2], j = out[r - 1], d = 0;
    for (const char *p = t[0]; *p; p++)
        if (strchr(t[1], *p) && !strchr(out, *p))
            d = d ? '?' : *p;
    int qi = strchr(t[0], i) ? 0 : 1;
    if (!d || d == '?' || !strchr(t[qi], i) || !strchr(t[1 - qi], j))
        MISS("the scores Einsum \"%s,%s->%s\" does not contract one head-size axis", t[0], t[1], out);
    memcpy(want, out, (size_t)r);
    want[r - 1] = d;
    if (positions(t[qi], want, r, s->qperm))
        MISS("the scores Einsum's Q term \"%s\" is not the batch axes, the queries and the head size", t[qi]);
    want[r - 2] = j;
    if (positions(t[1 - qi], want, r, s->kperm))
        MISS("the scores Einsum's K term \"%s\" is not the batch axes, the keys and the head size", t[1 - qi]);
    s->q = n->inputs[qi];
    s->k = n->inputs[1 - qi];
    return 0;
}

/* pv = MatMul(P, V) | Einsum("..ij,..je->..ie") with P's letters in P's order */
static int match_pv(const ir_graph *g, const ir_node *n, int p, attn_skel *s, char *why, size_t nwhy)
{
    int r = s->rank;
    if (r < 2 || r > IR_MAX_RANK)
        MISS("the probabilities have rank %d", r);
    if (n->op == IR_OP_MATMUL) {
        if (n->inputs[0] != p || g->values[n->inputs[1]].rank != r)
            MISS("the probabilities are not the left operand of a MatMul with V of rank %d", r);
        for (int c = 0; c < r; c++)
            s->vperm[c] = s->operm[c] = c;
        s->v = n->inputs[1];
        return 0;
    }
    char t[2][IR_MAX_RANK + 1], out[IR_MAX_RANK + 1], want[IR_MAX_RANK + 1];
    int pi = n->inputs[0] == p ? 0 : 1;
    if (parse_einsum(n, t, out) || n->inputs[pi] != p || (int)strlen(t[pi]) != r || (int)strlen(out) != r)
        MISS("the probabilities Einsum is not of the form \"..ij,..je->..ie\"");
    const char *pt = t[pi], *vt = t[1 - pi];
    char j = pt[r - 1], e = 0;
    for (const char *c = vt; *c; c++)
        if (!strchr(pt, *c))
            e = e ? '?' : *c;
    if (!e || e == '?' || strchr(out, j))
        MISS("the probabilities Einsum \"%s,%s->%s\" does not contract the keys", t[0], t[1], out);
    memcpy(want, pt, (size_t)r);
    want[r - 1] = e;
    want[r - 2] = j;
    if (positions(vt, want, r, s->vperm))
        MISS("the V term \"%s\" of the probabilities Einsum is not the batch axes, the keys and the head size", vt);
    want[r - 2] = pt[r - 2];
    if (positions(out, want, r, s->operm))
        MISS("the result \"%s\" of the probabilities Einsum is not the batch axes, the queries and the head size", out);
    s->v = n->inputs[1 - pi];
    return 0;
}

/* For n = Add(scores, m) with scores a product (MatMul or Einsum, maybe
 * scaled), in either operand order: m, the term added to the scores, with
 * the scores' operand in *prod; -1 otherwise.  A mask that adds one number
 * everywhere has folded away before (simplify). */
static int additive_term(const ir_graph *g, const ir_node *n, int *prod)
{
    if (!n || n->op != IR_OP_ADD)
        return -1;
    for (int i = 0; i < 2; i++) {
        double f = 1;
        const ir_node *p = rw_producer(g, strip_factors(g, n->inputs[i], &f));
        if (p && (p->op == IR_OP_MATMUL || p->op == IR_OP_EINSUM) && !rw_is_const(g, n->inputs[i])) {
            *prod = n->inputs[i];
            return n->inputs[1 - i];
        }
    }
    return -1;
}

/* P when `to` is a Reshape of `from` that splits its first axis into
 * (images, P) or merges those back, every other axis kept; else 0. */
static int64_t batch_split(const ir_graph *g, int from, int to)
{
    const ir_value *a = &g->values[from], *b = &g->values[to];
    const ir_value *big = a->rank > b->rank ? a : b, *small = a->rank > b->rank ? b : a;
    if (big->rank != small->rank + 1 || small->rank < 2)
        return 0;
    for (int i = 1; i < small->rank; i++)
        if (!ir_dim_eq(small->dims[i], big->dims[i + 1]))
            return 0;
    ir_dim P = big->dims[1], m = big->dims[0];
    if (P.e || P.k < 2 || m.k * P.k != small->dims[0].k || m.e != small->dims[0].e)
        return 0;
    return P.k;
}

/* How v continues a chain of scores: 2 a product (maybe scaled), 1 an Add or
 * a Reshape, 0 neither. */
static int chain_link(const ir_graph *g, int v)
{
    double f = 1;
    if (rw_is_const(g, v))
        return 0;
    const ir_node *p = rw_producer(g, strip_factors(g, v, &f));
    return !p ? 0 : p->op == IR_OP_MATMUL || p->op == IR_OP_EINSUM ? 2 : p->op == IR_OP_ADD || p->op == IR_OP_RESHAPE;
}

/* Windowed attention's scores: from the Softmax's input `in` down to the
 * product, constants added to the scores or to their split view [images, P,
 * ...] between reshapes that split and merge the images (Swin's shift mask
 * and relative position bias).  1 with s's terms, period and *prod (the
 * product's output, factors stripped into s->scale) set; 0 when the chain has
 * no reshape and at most one term (the one-bias form matched below); -1. */
static int windowed_chain(const ir_graph *g, attn_skel *s, int in, int *prod, char *why, size_t nwhy)
{
    int cur = in, split = 0, nreshape = 0, n = 0;
    int64_t P = 0;
    double f = 1; /* the product's factors, Attention's scale when this is the chain */
    for (int step = 0; step < 16; step++) {
        const ir_node *p = rw_producer(g, cur);
        if (p && p->op == IR_OP_RESHAPE) {
            int64_t q = batch_split(g, p->inputs[0], cur);
            if (!q || (P && q != P))
                return 0;
            P = q;
            split = g->values[p->inputs[0]].rank > g->values[cur].rank;
            nreshape++;
            cur = p->inputs[0];
        } else if (p && p->op == IR_OP_ADD && p->ninputs == 2) {
            int c0 = chain_link(g, p->inputs[0]), c1 = chain_link(g, p->inputs[1]);
            int k = c0 == 2 ? 0 : c1 == 2 ? 1 : c0 == 1 && c1 == 0 ? 0 : c1 == 1 && c0 == 0 ? 1 : -1;
            if (k < 0 || n == 4)
                return 0;
            s->terms[n] = p->inputs[1 - k];
            s->term_split[n++] = split;
            cur = p->inputs[k];
            if (chain_link(g, cur) == 2) {
                cur = strip_factors(g, cur, &f);
                break;
            }
        } else {
            return 0;
        }
        if (rw_uses(g, cur) != 1)
            return nreshape || n > 1 ? (snprintf(why, nwhy, "the scores plus their masks or biases have other readers"), -1)
                                     : 0;
    }
    if (nreshape == 0 && n <= 1)
        return 0;
    if (split || n == 0)
        return 0;
    for (int i = 0; i < n; i++) {
        const ir_value *t = &g->values[s->terms[i]];
        if (!rw_is_const(g, s->terms[i]) || t->dtype != IR_F32)
            MISS("the windowed scores add '%s', which is not an f32 constant", t->name);
    }
    s->nterms = n;
    s->period = P;
    s->scale *= f;
    *prod = cur;
    return 1;
}

int attn_skeleton(const ir_graph *g, const ir_node *sm, attn_skel *s, int fq_ok, char *why, size_t nwhy)
{
    memset(s, 0, sizeof *s);
    s->softmax = sm;
    s->scale = s->post_scale = 1;
    const ir_value *x = &g->values[sm->inputs[0]];
    int in = strip_factors(g, sm->inputs[0], &s->scale);
    float *fqs = s->fq[IR_ATTN_FQ_S];
    int under = strip_fake_quant(g, in, fqs);
    if (fqs[1] != 0) { /* softmax(FakeQuant(Q K^T * mul) * scale), maybe FakeQuant twice; no bias with it */
        if (!fq_ok)
            MISS("the scores are fake-quantized (this backend runs quantized attention unfused)");
        if (rw_uses(g, in) != 1)
            MISS("the fake-quantized scores have other readers");
        float inner[5];
        int under2 = strip_fake_quant(g, under, inner);
        if (inner[1] != 0) {
            if (rw_uses(g, under) != 1)
                MISS("the fake-quantized scores have other readers");
            memcpy(s->fq[IR_ATTN_FQ_S2], fqs, sizeof inner);
            memcpy(fqs, inner, sizeof inner);
            under = under2;
        }
        if (!(s->scale > 0) || !(fqs[0] > 0) || s->fq[IR_ATTN_FQ_S2][0] < 0)
            MISS("the fake-quantized scores are scaled by %g, not by a positive factor",
                 s->scale > 0 ? (fqs[0] > 0 ? s->fq[IR_ATTN_FQ_S2][0] : fqs[0]) : s->scale);
        in = under;
    }
    const ir_node *sc = rw_producer(g, in);
    int prod = -1;
    double top = s->scale;
    int w = fqs[1] != 0 ? 0 : windowed_chain(g, s, in, &prod, why, nwhy);
    if (w < 0)
        return -1;
    s->bias = w || fqs[1] != 0 ? -1 : additive_term(g, sc, &prod);
    if (w) {
        if (top != 1)
            MISS("the scores are scaled by %g after their masks or biases are added", top);
        if (rw_uses(g, sm->inputs[0]) != 1)
            MISS("the scores plus their masks or biases have other readers");
        in = prod;
        sc = rw_producer(g, in);
    } else if (s->bias >= 0) { /* softmax(scores * s + bias): s is Attention's scale, the bias added after it */
        const ir_value *bv = &g->values[s->bias];
        if (s->scale != 1)
            MISS("the scores are scaled by %g after the mask or bias '%s' is added", s->scale, bv->name);
        if (rw_uses(g, in) != 1 || rw_uses(g, sm->inputs[0]) != 1)
            MISS("the scores plus the mask or bias have other readers");
        if (bv->dtype != x->dtype)
            MISS("the mask or bias '%s' is %s, not %s like the scores", bv->name, ir_dtype_name(bv->dtype),
                 ir_dtype_name(x->dtype));
        for (int i = 0; i < x->rank; i++)
            if (!ir_dim_eq(g->values[in].dims[i], g->values[prod].dims[i]) || x->rank != g->values[prod].rank)
                MISS("the mask or bias '%s' broadcasts the scores to another shape", bv->name);
        in = strip_factors(g, prod, &s->scale);
        sc = rw_producer(g, in);
    }
    if (!sc || (sc->op != IR_OP_MATMUL && sc->op != IR_OP_EINSUM) || rw_is_const(g, sc->inputs[0]) ||
        rw_is_const(g, sc->inputs[sc->ninputs - 1]))
        MISS("the Softmax's input is %s%s, not a product of two computed tensors (Q K^T)", sc ? "produced by " : "",
             sc ? ir_op_name(sc->op) : "not computed by a node");
    int axis = rw_axis(ir_attr_int(sm, IR_ATTR_AXIS, -1), x->rank);
    if (axis != x->rank - 1)
        MISS("Softmax axis is %lld, not the last axis", (long long)ir_attr_int(sm, IR_ATTR_AXIS, -1));
    s->scores = sc;
    if (match_scores(g, sc, s, why, nwhy))
        return -1;
    if (rw_uses(g, in) != 1 || rw_uses(g, sm->inputs[0]) != 1)
        MISS("the scores have other readers");
    double qf = 1, kf = 1;
    s->q = strip_factors(g, s->q, &qf);
    s->k = strip_factors(g, s->k, &kf);
    if (fqs[1] != 0) /* factors on Q and K scale the product the scores' point rounds */
        fqs[0] = (float)(fqs[0] * qf * kf);
    else
        s->scale *= qf * kf;
    if (fqs[1] != 0 && !(fqs[0] > 0))
        MISS("the fake-quantized scores are scaled by %g, not by a positive factor", fqs[0]);
    s->q = strip_fake_quant(g, s->q, s->fq[IR_ATTN_FQ_Q]);
    s->k = strip_fake_quant(g, s->k, s->fq[IR_ATTN_FQ_K]);
    if (!fq_ok && (s->fq[IR_ATTN_FQ_Q][1] != 0 || s->fq[IR_ATTN_FQ_K][1] != 0))
        MISS("Q or K is fake-quantized (this backend runs quantized attention unfused)");
    /* probabilities: Softmax -> scalar factors -> pv */
    int p = sm->outputs[0];
    for (;;) {
        const ir_node *u = rw_only_user(g, p);
        int o;
        double c;
        if (!u) {
            if (rw_is_graph_output(g, p))
                MISS("the probabilities are a graph output");
            MISS("the probabilities have %d readers", rw_uses(g, p));
        }
        if (pat_scaled(g, u->outputs[0], &o, &c) && o == p && c != 0) {
            s->post_scale *= c;
            p = u->outputs[0];
            continue;
        }
        float f[5];
        if (rw_fake_quant_point(g, u, s->post_scale, f) && u->inputs[0] == p && s->fq[IR_ATTN_FQ_P][1] == 0) {
            if (!fq_ok)
                MISS("the probabilities are fake-quantized (this backend runs quantized attention unfused)");
            memcpy(s->fq[IR_ATTN_FQ_P], f, sizeof f);
            s->post_scale = 1;
            p = u->outputs[0];
            continue;
        }
        if (u->op != IR_OP_MATMUL && u->op != IR_OP_EINSUM)
            MISS("the probabilities are read by %s '%s', not multiplied by V", ir_op_name(u->op), u->name);
        s->pv = u;
        break;
    }
    if (match_pv(g, s->pv, p, s, why, nwhy))
        return -1;
    s->v = strip_fake_quant(g, s->v, s->fq[IR_ATTN_FQ_V]);
    if (!fq_ok && s->fq[IR_ATTN_FQ_V][1] != 0)
        MISS("V is fake-quantized (this backend runs quantized attention unfused)");
    const ir_node *vs = rw_producer(g, s->v);
    int o;
    double c;
    if (vs && (vs->op == IR_OP_MUL || vs->op == IR_OP_DIV) && rw_scalar_operand(g, vs, &o, &c))
        MISS("V is scaled by %s '%s'; the scale must be on Q, K, the scores or the probabilities",
             ir_op_name(vs->op), vs->name);
    s->o = s->pv->outputs[0];
    const ir_node *u = fq_ok ? rw_only_user(g, s->o) : NULL;
    float f[5];
    if (u && u->inputs[0] == s->o && rw_fake_quant_point(g, u, 1, f) && !rw_is_graph_output(g, s->o)) {
        memcpy(s->fq[IR_ATTN_FQ_O], f, sizeof f);
        s->fq_out = u;
        s->o = u->outputs[0];
    }
    return 1;
}

/* The canonical view of operand v: its traced view with dims permuted. */
static void permute(const view *w, const int *perm, int rank, view *out);

static int canonical(const ir_graph *g, int v, const int *perm, int rank, view *out, const char *what, char *why,
                     size_t nwhy)
{
    view w;
    char sub[256];
    if (view_trace(g, v, -1, &w, sub, sizeof sub))
        MISS("%s cannot be followed to a projection: %s", what, sub);
    if (w.rank != rank)
        MISS("%s has rank %d", what, w.rank);
    permute(&w, perm, rank, out);
    return 0;
}

static void permute(const view *w, const int *perm, int rank, view *out)
{
    *out = *w;
    for (int c = 0; c < rank; c++) {
        out->nsub[c] = w->nsub[perm[c]];
        memcpy(out->sub[c], w->sub[perm[c]], sizeof out->sub[c]);
    }
}

/* Q's or K's canonical view, seen through a rotary embedding when the
 * operand reads one (*ro filled; ro->r -1 when it does not); scalar factors
 * on what is rotated are multiplied into *f. */
static int canonical_rotated(const ir_graph *g, int v, const int *perm, int rank, view *out, attn_rope *ro, double *f,
                             const char *what, char *why, size_t nwhy)
{
    view w, c, w0;
    char sub[256];
    ro->r = -1;
    if (view_trace(g, v, -1, &w, sub, sizeof sub) || w.rank != rank)
        return canonical(g, v, perm, rank, out, what, why, nwhy); /* says why */
    int m = attn_rope_of(g, w.root, ro, why, nwhy);
    if (m <= 0) { /* no rotation: w is the operand's view (canonical's, without tracing it again) */
        ro->r = -1;
        if (m == 0)
            permute(&w, perm, rank, out);
        return m;
    }
    /* the rotated tensor's last axis must be the head's elements, its token axis the rows */
    const ir_value *rv = &g->values[ro->r];
    permute(&w, perm, rank, &c);
    view_sub d = c.sub[rank - 1][0], t = c.sub[rank - 2][0];
    if (c.nsub[rank - 1] != 1 || c.nsub[rank - 2] != 1 || !ir_dim_eq(d.size, ir_dim_const(ro->D)) ||
        !ir_dim_eq(d.stride, ir_dim_const(1)) || !ir_dim_eq(t.size, rv->dims[ro->axis]) ||
        !ir_dim_eq(t.stride, ir_dim_const(ro->D)) || ro->axis != rv->rank - 2)
        MISS("%s reads the rotated '%s' along other axes than its tokens and the head's elements", what, rv->name);
    ro->head_dim = ro->head_sub = -1;
    for (int i = 0; ro->heads > 1 && i < rank - 2; i++) /* where Q reads the axis the tables vary along */
        for (int j = 0; j < c.nsub[i]; j++)
            if (ir_dim_eq(c.sub[i][j].size, ir_dim_const(ro->heads)) &&
                ir_dim_eq(c.sub[i][j].stride, ir_dim_const(ro->D * rv->dims[ro->axis].k)))
                ro->head_dim = i, ro->head_sub = j;
    if (ro->heads > 1 && ro->head_dim < 0)
        MISS("the rotary tables of '%s' vary along an axis %s does not read as a batch axis", rv->name, what);
    int src = strip_factors(g, ro->src, f);
    if (view_trace(g, src, -1, &w0, sub, sizeof sub))
        MISS("what %s rotates cannot be followed to a projection: %s", what, sub);
    if (view_trace_over(g, v, ro->r, &w0, &w, sub, sizeof sub))
        MISS("%s cannot be followed to a projection through its rotation: %s", what, sub);
    if (w.rank != rank)
        MISS("%s has rank %d", what, w.rank);
    permute(&w, perm, rank, out);
    return 0;
}

int attn_views(const ir_graph *g, const attn_skel *s, view *q, view *k, view *v, attn_rope *rope, double *scale,
               char *why, size_t nwhy)
{
    attn_rope *kr = malloc(sizeof *kr);
    double f = 1;
    int st = !kr || canonical_rotated(g, s->q, s->qperm, s->rank, q, rope, &f, "Q", why, nwhy) ||
             canonical_rotated(g, s->k, s->kperm, s->rank, k, kr, &f, "K", why, nwhy) ||
             canonical(g, s->v, s->vperm, s->rank, v, "V", why, nwhy)
                 ? -1
                 : 0;
    if (!kr)
        snprintf(why, nwhy, "out of memory");
    else if (!st && (rope->r >= 0) != (kr->r >= 0))
        st = (snprintf(why, nwhy, "only %s is rotated (a rotary embedding must rotate both)", rope->r >= 0 ? "Q" : "K"), -1);
    else if (!st && rope->r >= 0 && !attn_rope_same(g, rope, kr))
        st = (snprintf(why, nwhy, "Q and K are rotated with different tables or tokens ('%s', '%s')",
                       g->values[rope->r].name, g->values[kr->r].name), -1);
    free(kr);
    *scale *= f;
    return st;
}

/* How one operand's canonical view w (batch..., rows, columns) reads its
 * root [B', T, C]: every token as a row, D columns at stride sd, batch
 * sub-axes that are the image (size B', the root's own) or one static head
 * axis (H heads at stride sh). */
typedef struct {
    ir_dim B;   /* the images */
    int64_t T, C, D, sd, H, sh;
    int nbatch_sub[IR_MAX_RANK];
    int is_head[IR_MAX_RANK][VIEW_MAX_SUB];
} operand_shape;

/* A projection r [B, T, C] as its images B, tokens T and features C: 1, or 0
 * when r is no such tensor.  [1, B, C] (one token, sequence first:
 * nn.MultiheadAttention's queries) lies in memory as [B, 1, C]. */
static int projection_shape(const ir_value *r, ir_dim *B, int64_t *T, int64_t *C)
{
    if (r->rank != 3 || r->dims[2].e)
        return 0;
    int seq_first = ir_dim_eq(r->dims[0], ir_dim_const(1)) && r->dims[1].e > 0;
    if (r->dims[1].e && !seq_first)
        return 0;
    *B = seq_first ? r->dims[1] : r->dims[0];
    *T = seq_first ? 1 : r->dims[1].k;
    *C = r->dims[2].k;
    return 1;
}

static int operand_of(const ir_graph *g, const view *w, const char *what, operand_shape *o, char *why, size_t nwhy)
{
    const ir_value *r = &g->values[w->root];
    char t[128];
    memset(o, 0, sizeof *o);
    if (!projection_shape(r, &o->B, &o->T, &o->C))
        MISS("%s is read from '%s' of type %s, not from a [B, N, features] projection", what, r->name,
             ir_value_type_str(r, t, sizeof t));
    ir_dim Bd = o->B;
    o->H = 1;
    int nb = w->rank - 2, seen_b = 0, seen_h = 0;
    ir_dim bstride = ir_dim_const(o->T * o->C);
    /* rows: all the tokens; columns: one head's D features */
    int one_row = o->T == 1 && w->nsub[nb] == 0; /* a dimension of size 1 has no sub-axes */
    if (!one_row && (w->nsub[nb] != 1 || !ir_dim_eq(w->sub[nb][0].size, ir_dim_const(o->T)) ||
                     !ir_dim_eq(w->sub[nb][0].stride, ir_dim_const(o->C))))
        MISS("%s's rows are not the %lld tokens of '%s'", what, (long long)o->T, r->name);
    if (w->nsub[nb + 1] != 1 || w->sub[nb + 1][0].size.e || w->sub[nb + 1][0].stride.e)
        MISS("%s's columns are not one head of '%s'", what, r->name);
    o->D = w->sub[nb + 1][0].size.k, o->sd = w->sub[nb + 1][0].stride.k;
    for (int c = 0; c < nb; c++) {
        o->nbatch_sub[c] = w->nsub[c];
        for (int j = 0; j < w->nsub[c]; j++) {
            view_sub s = w->sub[c][j];
            if (!seen_b && !seen_h && ir_dim_eq(s.size, Bd) && ir_dim_eq(s.stride, bstride)) {
                seen_b = 1;
                o->is_head[c][j] = 0;
            } else if (!seen_h && !s.size.e && !s.stride.e) {
                seen_h = 1;
                o->H = s.size.k;
                o->sh = s.stride.k;
                o->is_head[c][j] = 1;
            } else {
                MISS("%s's batch axes are not (image, head) of '%s'", what, r->name);
            }
        }
    }
    if (!seen_b && !(Bd.e == 0 && Bd.k == 1))
        MISS("%s's batch axes do not include the images of '%s'", what, r->name);
    return 0;
}

/* The layout (0: [parts][H][D], 1: [H][D][parts]) in which o holds parts
 * projections of H heads of D, with the element offset of each part; -1. */
static int parts_layout(const operand_shape *o, int parts, int64_t *off)
{
    if (o->C != parts * o->H * o->D)
        return -1;
    for (int i = 0; i < parts; i++)
        off[i] = o->sd == 1 ? i * o->H * o->D : i;
    if (o->sd == 1 && (o->H == 1 || o->sh == o->D))
        return 0;
    return o->sd == parts && (o->H == 1 || o->sh == parts * o->D) ? 1 : -1;
}

/* Cross-attention: Q from its own projection [B|1, Nq, H*D] (heads as
 * [H][D]), K and V from one packed [B, Nk, 2*H*D]. */
static int cross_layout_of(const ir_graph *g, view *q, view *k, view *v, attn_layout *L, char *why,
                           size_t nwhy)
{
    operand_shape oq, ok;
    int64_t off[2], qoff[1];
    if (operand_of(g, q, "Q", &oq, why, nwhy) || operand_of(g, k, "K", &ok, why, nwhy))
        return -1;
    const char *kv = g->values[k->root].name;
    if (ok.H != oq.H || ok.D != oq.D)
        MISS("Q has %lld heads of %lld, K %lld of %lld", (long long)oq.H, (long long)oq.D, (long long)ok.H,
             (long long)ok.D);
    if (parts_layout(&oq, 1, qoff) != 0 || q->base != 0)
        MISS("Q's heads are not all of '%s' laid out as [H][D]", g->values[q->root].name);
    if ((L->layout = parts_layout(&ok, 2, off)) < 0)
        MISS("'%s' has %lld features, not K and V of %lld heads x %lld as [2][H][D] or [H][D][2]", kv,
             (long long)ok.C, (long long)ok.H, (long long)ok.D);
    if (!view_same_subs(k, v) || memcmp(oq.is_head, ok.is_head, sizeof ok.is_head) ||
        memcmp(oq.nbatch_sub, ok.nbatch_sub, sizeof ok.nbatch_sub))
        MISS("Q, K and V are not read with the same images and heads");
    if (k->base != off[0] || v->base != off[1])
        MISS("K and V are not the two parts of the packed projection '%s'", kv);
    if (!ir_dim_eq(oq.B, ok.B))
        MISS("Q is read from '%s' for other images than K and V", g->values[q->root].name);
    L->root = k->root;
    L->q_root = q->root;
    L->heads = ok.H;
    L->head_size = ok.D;
    L->tokens = oq.T;
    L->kv_tokens = ok.T;
    memcpy(L->nbatch_sub, oq.nbatch_sub, sizeof L->nbatch_sub);
    memcpy(L->is_head, oq.is_head, sizeof L->is_head);
    return 0;
}

/* Where a projection holds one token per image, its images and the heads
 * folded into the batch after them are one contiguous sub-axis of w (view.c
 * merges them): split it back into the images (of the root's image stride)
 * and the heads. */
static void split_merged_images(const ir_graph *g, view *w)
{
    ir_dim Bd;
    int64_t T, C;
    if (!projection_shape(&g->values[w->root], &Bd, &T, &C))
        return;
    for (int c = 0; c + 2 < w->rank; c++)
        for (int j = 0; j < w->nsub[c]; j++) {
            view_sub s = w->sub[c][j];
            if (Bd.e == 0 || s.size.e != Bd.e || s.stride.e || Bd.k < 1 || s.size.k % Bd.k ||
                w->nsub[c] >= VIEW_MAX_SUB)
                continue;
            int64_t m = s.size.k / Bd.k;
            if (m < 2 || s.stride.k * m != T * C)
                continue;
            memmove(&w->sub[c][j + 1], &w->sub[c][j], (size_t)(w->nsub[c] - j) * sizeof w->sub[c][0]);
            w->sub[c][j] = (view_sub){Bd, ir_dim_const(T * C)};
            w->sub[c][j + 1] = (view_sub){ir_dim_const(m), s.stride};
            w->nsub[c]++;
            return;
        }
}

int attn_layout_of(const ir_graph *g, view *q, view *k, view *v, attn_layout *L, char *why, size_t nwhy)
{
    memset(L, 0, sizeof *L);
    split_merged_images(g, q);
    split_merged_images(g, k);
    split_merged_images(g, v);
    L->q_root = -1;
    if (q->root != k->root && k->root == v->root)
        return cross_layout_of(g, q, k, v, L, why, nwhy);
    if (q->root != k->root || q->root != v->root)
        MISS("Q, K and V are read from different tensors ('%s', '%s', '%s'), not from one projection",
             g->values[q->root].name, g->values[k->root].name, g->values[v->root].name);
    operand_shape o;
    int64_t off[3];
    if (operand_of(g, q, "Q", &o, why, nwhy))
        return -1;
    const char *r = g->values[q->root].name;
    if (o.C != 3 * o.H * o.D)
        MISS("'%s' has %lld features, not 3 x %lld heads x %lld", r, (long long)o.C, (long long)o.H, (long long)o.D);
    if ((L->layout = parts_layout(&o, 3, off)) < 0)
        MISS("the heads of '%s' are laid out neither as [3][H][D] nor as [H][D][3]", r);
    const view *qkv[3] = {q, k, v};
    const char *names[3] = {"Q", "K", "V"};
    for (int i = 0; i < 3; i++) {
        if (!view_same_subs(qkv[i], q))
            MISS("%s is not read with the same heads and tokens as Q", names[i]);
        if (qkv[i]->base != off[i])
            MISS("%s is not part %d of the packed projection '%s' (it starts at element %lld)", names[i], i + 1, r,
                 (long long)qkv[i]->base);
    }
    L->root = q->root;
    L->heads = o.H;
    L->head_size = o.D;
    L->tokens = L->kv_tokens = o.T;
    memcpy(L->nbatch_sub, o.nbatch_sub, sizeof L->nbatch_sub);
    memcpy(L->is_head, o.is_head, sizeof L->is_head);
    return 0;
}
