/* rope.c: recognising rotary position embeddings applied to Q or K (attn.h),
 * so that fuse-attention can see through them to the projection and give
 * the rotation to the Attention op as a table.
 *
 * The rotation is recognised by what it computes, not by how an exporter
 * spells it: y = x * C + G(x) * S with C, S constants and G any chain of
 * slices, splits, concatenations, unsqueezes, reshapes and negations along
 * the head's last axis.  G is evaluated symbolically here, as the signed
 * element of x each element of G(x) is, so that timm's interleaved
 * stack([-x[..., 1::2], x[..., ::2]], -1).reshape(...) and HF's rotate-half
 * cat([-x2, x1], -1) are the same kind of thing; the pairing follows from
 * the indices, the signs go into the sine table. */
#include "passes/attn.h"

#include <stdlib.h>
#include <string.h>

#define MISS(...) return (snprintf(why, nwhy, __VA_ARGS__), -1)

enum { GATHER_MAX = 4 * ATTN_ROPE_MAX_D, GATHER_DEPTH = 12, TRAIL_MAX = 4 };

/* A tensor whose leading `lead` axes are x's and whose trailing axes
 * (dims[0..ntrail)) flatten, row-major, to elements each sign * x[.., idx]. */
typedef struct {
    int ntrail;
    int64_t dims[TRAIL_MAX];
    int64_t n; /* product of dims */
    int idx[GATHER_MAX];
    signed char sign[GATHER_MAX];
} gather;

/* outer and inner extents around trailing axis a */
static void around(const gather *s, int a, int64_t *outer, int64_t *inner)
{
    *outer = *inner = 1;
    for (int i = 0; i < a; i++)
        *outer *= s->dims[i];
    for (int i = a + 1; i < s->ntrail; i++)
        *inner *= s->dims[i];
}

/* s along trailing axis a: count elements from first, step apart, into out. */
static void take(const gather *s, int a, int64_t first, int64_t step, int64_t count, gather *out)
{
    int64_t outer, inner, k = 0;
    around(s, a, &outer, &inner);
    *out = (gather){.ntrail = s->ntrail};
    memcpy(out->dims, s->dims, sizeof s->dims);
    out->dims[a] = count;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < count; i++)
            for (int64_t in = 0; in < inner; in++, k++) {
                int64_t from = (o * s->dims[a] + first + i * step) * inner + in;
                out->idx[k] = s->idx[from];
                out->sign[k] = s->sign[from];
            }
    out->n = k;
}

/* Whether value v has x's leading axes, then static trailing ones (their
 * count in *nt, their sizes in dims, their product within GATHER_MAX). */
static int trailing_shape(const ir_graph *g, int v, int x, int lead, int *nt, int64_t *dims, int64_t *n)
{
    const ir_value *a = &g->values[v], *b = &g->values[x];
    *nt = a->rank - lead;
    *n = 1;
    if (a->rank < lead || *nt < 1 || *nt > TRAIL_MAX)
        return 0;
    for (int i = 0; i < lead; i++)
        if (!ir_dim_eq(a->dims[i], b->dims[i]))
            return 0;
    for (int i = 0; i < *nt; i++) {
        ir_dim d = a->dims[lead + i];
        if (d.e || d.k < 1 || (*n *= d.k) > GATHER_MAX)
            return 0;
        dims[i] = d.k;
    }
    return 1;
}

/* First element and step of ONNX Slice (start, step) over a static axis of
 * size dim: negative starts count from the end, then clamp. */
static int64_t slice_first(int64_t start, int64_t step, int64_t dim)
{
    if (start < 0)
        start += dim;
    if (step > 0)
        return start < 0 ? 0 : start > dim ? dim : start;
    return start < 0 ? -1 : start > dim - 1 ? dim - 1 : start;
}

/* v as a signed gather of x's last axis (x has lead + 1 axes); 0 on success. */
static int gather_of(const ir_graph *g, int v, int x, int lead, int depth, gather *s)
{
    int nt;
    int64_t dims[TRAIL_MAX], n;
    if (depth > GATHER_DEPTH || !trailing_shape(g, v, x, lead, &nt, dims, &n))
        return -1;
    if (v == x) {
        *s = (gather){.ntrail = 1, .dims = {n}, .n = n};
        for (int64_t i = 0; i < n; i++)
            s->idx[i] = (int)i, s->sign[i] = 1;
        return 0;
    }
    const ir_node *p = rw_producer(g, v);
    if (!p || p->inputs[0] < 0)
        return -1;
    int o;
    double c;
    gather *t = malloc(sizeof *t);
    if (!t)
        return -1;
    int ok = -1, r = g->values[v].rank;
    switch (p->op) {
    case IR_OP_NEG: case IR_OP_MUL: case IR_OP_DIV: case IR_OP_IDENTITY: {
        double f = 1;
        int in = p->inputs[0];
        if (p->op == IR_OP_NEG)
            f = -1;
        else if (p->op != IR_OP_IDENTITY && rw_scalar_operand(g, p, &o, &c) && (c == 1 || c == -1))
            f = c, in = o;
        else if (p->op != IR_OP_IDENTITY)
            break;
        if (gather_of(g, in, x, lead, depth + 1, s) || s->n != n)
            break;
        for (int64_t i = 0; i < n; i++)
            s->sign[i] = (signed char)(s->sign[i] * (f < 0 ? -1 : 1));
        ok = 0;
        break;
    }
    case IR_OP_RESHAPE: case IR_OP_UNSQUEEZE: case IR_OP_SQUEEZE: /* row-major order kept: new trailing dims */
        if (gather_of(g, p->inputs[0], x, lead, depth + 1, s) || s->n != n)
            break;
        s->ntrail = nt;
        memcpy(s->dims, dims, sizeof dims);
        ok = 0;
        break;
    case IR_OP_SLICE: {
        int64_t st[IR_MAX_RANK], en[IR_MAX_RANK], ax[IR_MAX_RANK], sp[IR_MAX_RANK];
        int ns = rw_const_ints(g, p, 1, st, IR_MAX_RANK), ne = rw_const_ints(g, p, 2, en, IR_MAX_RANK);
        int na = ir_input(p, 3) >= 0 ? rw_const_ints(g, p, 3, ax, IR_MAX_RANK) : ns;
        int nsp = ir_input(p, 4) >= 0 ? rw_const_ints(g, p, 4, sp, IR_MAX_RANK) : ns;
        if (ns < 0 || ne != ns || na != ns || nsp != ns || gather_of(g, p->inputs[0], x, lead, depth + 1, t))
            break;
        ok = 0;
        for (int i = 0; i < ns && !ok; i++) {
            int a = rw_axis(ir_input(p, 3) >= 0 ? ax[i] : i, r) - lead;
            int64_t step = ir_input(p, 4) >= 0 ? sp[i] : 1;
            if (a < 0 || a >= t->ntrail || step == 0) {
                ok = -1;
                break;
            }
            take(t, a, slice_first(st[i], step, t->dims[a]), step, dims[a], s);
            *t = *s;
        }
        *s = *t;
        break;
    }
    case IR_OP_SPLIT: {
        int a = rw_axis(ir_attr_int(p, IR_ATTR_AXIS, 0), r) - lead;
        if (a < 0 || gather_of(g, p->inputs[0], x, lead, depth + 1, t) || a >= t->ntrail)
            break;
        int64_t first = 0;
        int k = 0;
        for (; k < p->noutputs && p->outputs[k] != v; k++) {
            const ir_value *pk = &g->values[p->outputs[k]];
            if (p->outputs[k] < 0 || pk->dims[a + lead].e)
                break;
            first += pk->dims[a + lead].k;
        }
        if (k < p->noutputs && p->outputs[k] == v) {
            take(t, a, first, 1, dims[a], s);
            ok = 0;
        }
        break;
    }
    case IR_OP_CONCAT: {
        int a = rw_axis(ir_attr_int(p, IR_ATTR_AXIS, 0), r) - lead;
        if (a < 0 || a >= nt)
            break;
        int64_t outer, inner, off = 0;
        *s = (gather){.ntrail = nt, .n = n};
        memcpy(s->dims, dims, sizeof dims);
        around(s, a, &outer, &inner);
        ok = 0;
        for (int i = 0; i < p->ninputs && !ok; i++) {
            if (gather_of(g, p->inputs[i], x, lead, depth + 1, t) || t->ntrail != nt) {
                ok = -1;
                break;
            }
            for (int j = 0; j < nt; j++)
                ok |= j != a && t->dims[j] != dims[j];
            int64_t ci = t->n / (outer * inner);
            for (int64_t o2 = 0; o2 < outer; o2++)
                for (int64_t j = 0; j < ci * inner; j++) {
                    int64_t to = o2 * dims[a] * inner + off * inner + j, from = o2 * ci * inner + j;
                    s->idx[to] = t->idx[from];
                    s->sign[to] = t->sign[from];
                }
            off += ci;
        }
        ok = ok || off != dims[a] ? -1 : 0;
        break;
    }
    default:
        break;
    }
    free(t);
    return ok;
}

/* The constant operand of Mul node p and its other operand; 0 when p is no
 * such Mul. */
static int const_product(const ir_graph *g, const ir_node *p, int *other, int *cst)
{
    if (!p || p->op != IR_OP_MUL || p->ninputs != 2)
        return 0;
    for (int i = 0; i < 2; i++)
        if (rw_is_const(g, p->inputs[i]) && !rw_is_const(g, p->inputs[1 - i])) {
            *cst = p->inputs[i];
            *other = p->inputs[1 - i];
            return 1;
        }
    return 0;
}

/* Whether constant c broadcasts against y (rank r) along axes t - 1, t and
 * r - 1 only, with sizes 1 or y's there; its size along t - 1 into *heads. */
static int table_fits(const ir_graph *g, int c, int y, int t, int64_t *heads)
{
    const ir_value *cv = &g->values[c], *yv = &g->values[y];
    if (cv->dtype != IR_F32 || cv->rank > yv->rank || rw_numel(cv) < 0)
        return 0;
    for (int i = 0; i < cv->rank; i++) {
        int a = yv->rank - cv->rank + i;
        ir_dim d = cv->dims[i];
        if (d.k == 1 && d.e == 0)
            continue;
        if (!(a == t - 1 || a == t || a == yv->rank - 1) || !ir_dim_eq(d, yv->dims[a]) || d.e)
            return 0;
        if (a == t - 1)
            *heads = d.k;
    }
    return 1;
}

/* y = x' * C + G(x') * S: fills ro's src (x'), cos, sin, pairing and signs. */
static int rotation(const ir_graph *g, int y, attn_rope *ro, char *why, size_t nwhy)
{
    const ir_node *add = rw_producer(g, y);
    if (!add || add->op != IR_OP_ADD || add->ninputs != 2)
        return 0;
    int xa[2], ca[2];
    if (!const_product(g, rw_producer(g, add->inputs[0]), &xa[0], &ca[0]) ||
        !const_product(g, rw_producer(g, add->inputs[1]), &xa[1], &ca[1]))
        return 0;
    int lead = g->values[y].rank - 1;
    int64_t D = ro->D;
    gather *s = malloc(sizeof *s);
    if (!s)
        MISS("out of memory");
    int found = -1;
    for (int i = 0; i < 2 && found < 0; i++)
        if (g->values[xa[i]].rank == lead + 1 && !gather_of(g, xa[1 - i], xa[i], lead, 0, s) && s->n == D)
            found = i;
    if (found < 0) {
        free(s);
        return 0;
    }
    ro->src = xa[found];
    ro->cos = ca[found];
    ro->sin = ca[1 - found];
    int halves = 1, inter = 1;
    for (int64_t d = 0; d < D; d++) {
        halves &= s->idx[d] == ir_rope_partner(IR_ROPE_HALVES, D, d);
        inter &= s->idx[d] == ir_rope_partner(IR_ROPE_INTERLEAVED, D, d);
        ro->sign[d] = s->sign[d];
    }
    free(s);
    if (!halves && !inter)
        MISS("the rotation of '%s' pairs its elements neither by halves nor interleaved", g->values[y].name);
    ro->pairing = halves ? IR_ROPE_HALVES : IR_ROPE_INTERLEAVED;
    ro->heads = 1;
    if (!table_fits(g, ro->cos, y, ro->axis, &ro->heads) || !table_fits(g, ro->sin, y, ro->axis, &ro->heads))
        MISS("the rotary tables '%s' and '%s' vary along other axes than the tokens and the head's elements",
             g->values[ro->cos].name, g->values[ro->sin].name);
    return 1;
}

/* Value v as x[.., first:first+count, ..] along axis t (a Slice of step 1 or
 * a Split output): x, or -1. */
static int token_range(const ir_graph *g, int v, int t, int64_t *first)
{
    view w;
    char sub[160];
    const ir_node *p = rw_producer(g, v);
    if (!p || (p->op != IR_OP_SLICE && p->op != IR_OP_SPLIT) || view_trace(g, v, p->inputs[0], &w, sub, sizeof sub))
        return -1;
    const ir_value *x = &g->values[p->inputs[0]], *o = &g->values[v];
    if (x->rank != o->rank)
        return -1;
    for (int i = 0; i < x->rank; i++)
        if (i != t && !ir_dim_eq(x->dims[i], o->dims[i]))
            return -1;
    /* the view of a slice along t alone: the base is first * the stride of t */
    int64_t stride = 1;
    for (int i = t + 1; i < x->rank; i++) {
        if (x->dims[i].e)
            return -1;
        stride *= x->dims[i].k;
    }
    if (w.base % stride)
        return -1;
    *first = w.base / stride;
    return p->inputs[0];
}

int attn_rope_of(const ir_graph *g, int r, attn_rope *ro, char *why, size_t nwhy)
{
    memset(ro, 0, sizeof *ro);
    ro->r = r;
    const ir_value *rv = &g->values[r];
    if (rv->rank < 2 || rv->dims[rv->rank - 1].e || rv->dims[rv->rank - 2].e)
        return 0;
    ro->D = rv->dims[rv->rank - 1].k;
    ro->axis = rv->rank - 2;
    int64_t N = rv->dims[ro->axis].k;
    const ir_node *p = rw_producer(g, r);
    int y = r;
    if (p && p->op == IR_OP_CONCAT && p->ninputs == 2 && rw_axis(ir_attr_int(p, IR_ATTR_AXIS, 0), rv->rank) == ro->axis)
        y = p->inputs[1]; /* the first tokens left alone, the rest rotated */
    if (ro->D % 2 || ro->D > ATTN_ROPE_MAX_D)
        return 0;
    int m = rotation(g, y, ro, why, nwhy);
    if (m <= 0)
        return m;
    ro->R = g->values[y].dims[ro->axis].k;
    if (y == r) { /* every token rotated */
        ro->start = 0;
        return 1;
    }
    int64_t f0, f1;
    int x0 = token_range(g, p->inputs[0], ro->axis, &f0), x1 = token_range(g, ro->src, ro->axis, &f1);
    if (x0 < 0 || x0 != x1 || f0 != 0 || f1 != g->values[p->inputs[0]].dims[ro->axis].k || f1 + ro->R != N)
        MISS("'%s' joins tokens that are not the first ones of one tensor and the rotated rest of it", rv->name);
    ro->src = x0;
    ro->start = f1;
    return 1;
}

/* C or S broadcast to [heads, R, D] into out (table_fits checked that it broadcasts there). */
static int expand_table(const ir_graph *g, int c, int64_t Hr, int64_t R, int64_t D, float *out)
{
    int64_t dims[3] = {Hr, R, D};
    double *v = rw_const_broadcast(g, c, 3, dims);
    for (int64_t i = 0; v && i < Hr * R * D; i++)
        out[i] = (float)v[i];
    free(v);
    return v ? 0 : -1;
}

int attn_rope_table(ir_graph *g, const attn_rope *ro, const char *name)
{
    int64_t Hr = ro->heads, R = ro->R, D = ro->D, n = Hr * R * D;
    int64_t dims[4] = {2, Hr, R, D}, dims3[3] = {2, R, D};
    float *t = malloc((size_t)(2 * n + 1) * sizeof *t);
    if (!t || expand_table(g, ro->cos, Hr, R, D, t) || expand_table(g, ro->sin, Hr, R, D, t + n)) {
        free(t);
        return -1;
    }
    for (int64_t i = 0; i < Hr * R; i++)
        for (int64_t d = 0; d < D; d++)
            t[n + i * D + d] *= (float)ro->sign[d];
    int v = Hr > 1 ? rw_const_f32(g, name, "/rope", 4, dims, t) : rw_const_f32(g, name, "/rope", 3, dims3, t);
    free(t);
    return v;
}

/* Whether constants a and b hold the same numbers. */
static int same_numbers(const ir_graph *g, int a, int b)
{
    if (a == b)
        return 1;
    int64_t na, nb;
    double *x = rw_const_f64(g, a, &na), *y = rw_const_f64(g, b, &nb);
    int same = x && y && na == nb && g->values[a].rank == g->values[b].rank;
    for (int i = 0; same && i < g->values[a].rank; i++)
        same = ir_dim_eq(g->values[a].dims[i], g->values[b].dims[i]);
    for (int64_t i = 0; same && i < na; i++)
        same = x[i] == y[i];
    free(x);
    free(y);
    return same;
}

int attn_rope_same(const ir_graph *g, const attn_rope *a, const attn_rope *b)
{
    return a->pairing == b->pairing && a->start == b->start && a->R == b->R && a->D == b->D && a->heads == b->heads &&
           (a->heads == 1 || (a->head_dim == b->head_dim && a->head_sub == b->head_sub)) &&
           !memcmp(a->sign, b->sign, (size_t)a->D) && same_numbers(g, a->cos, b->cos) && same_numbers(g, a->sin, b->sin);
}
