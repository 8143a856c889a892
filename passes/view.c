/* view.c: index maps of data-movement chains.
 *
 * Exporters spell the same tensor in many ways: timm reaches q through
 * Reshape -> Transpose -> Split -> Squeeze, einops through Reshape ->
 * Transpose -> Gather, torchvision through a dozen Reshape/Transpose/Gather
 * nodes with the batch folded into the heads.  Rather than match each
 * spelling, the passes ask what a chain computes: a view is the strided map
 * from the chain's output back to the tensor it reads (rewrite.h), built
 * op by op here.  Two chains are the same exactly when their views are. */
#include "passes/rewrite.h"

#include <stdio.h>
#include <string.h>

static ir_dim one(void) { return ir_dim_const(1); }
static int is_one(ir_dim d) { return d.k == 1 && d.e == 0; }
static int is_static(ir_dim d) { return d.e == 0 || d.k == 0; }

static int dmul(ir_dim a, ir_dim b, ir_dim *r)
{
    int64_t k;
    if (ir_mul_ovf(a.k, b.k, &k))
        return 0;
    r->k = k;
    r->e = k == 0 ? 0 : a.e + b.e;
    return 1;
}

/* a / b when it is exact in k * B^e. */
static int ddiv(ir_dim a, ir_dim b, ir_dim *q)
{
    if (b.k <= 0 || a.k % b.k != 0 || a.e < b.e)
        return 0;
    q->k = a.k / b.k;
    q->e = q->k == 0 ? 0 : a.e - b.e;
    return 1;
}

#define FAIL(...) (snprintf(why, nwhy, __VA_ARGS__), -1)

ir_dim view_dim(const view *w, int i)
{
    ir_dim d = one();
    for (int j = 0; j < w->nsub[i]; j++)
        if (!dmul(d, w->sub[i][j].size, &d))
            return ir_dim_const(-1);
    return d;
}

void view_normalize(view *w)
{
    for (int i = 0; i < w->rank; i++) {
        int n = 0;
        for (int j = 0; j < w->nsub[i]; j++) {
            view_sub s = w->sub[i][j];
            if (is_one(s.size))
                continue;
            ir_dim m, sz;
            if (n > 0 && dmul(s.size, s.stride, &m) && ir_dim_eq(w->sub[i][n - 1].stride, m) &&
                dmul(w->sub[i][n - 1].size, s.size, &sz)) {
                w->sub[i][n - 1].size = sz;
                w->sub[i][n - 1].stride = s.stride;
                continue;
            }
            w->sub[i][n++] = s;
        }
        w->nsub[i] = n;
    }
}

int view_identity(const ir_graph *g, int v, view *out, char *why, size_t nwhy)
{
    const ir_value *val = &g->values[v];
    if (val->rank < 0 || val->rank > IR_MAX_RANK)
        return FAIL("'%s' has no shape", val->name);
    memset(out, 0, sizeof *out);
    out->root = v;
    out->rank = val->rank;
    ir_dim stride = one();
    for (int i = val->rank - 1; i >= 0; i--) {
        out->nsub[i] = 1;
        out->sub[i][0].size = val->dims[i];
        out->sub[i][0].stride = stride;
        if (!dmul(stride, val->dims[i], &stride))
            return FAIL("'%s' is too large", val->name);
    }
    view_normalize(out);
    return 0;
}

/* ---- the ops ---- */

/* Regroups the sub-axes of `in`, in row-major order, into dims. */
static int apply_reshape(const view *in, int rank, const ir_dim *dims, view *out, char *why, size_t nwhy)
{
    view_sub flat[IR_MAX_RANK * VIEW_MAX_SUB];
    int nf = 0, at = 0;
    for (int i = 0; i < in->rank; i++)
        for (int j = 0; j < in->nsub[i]; j++)
            flat[nf++] = in->sub[i][j];
    memset(out, 0, sizeof *out);
    out->root = in->root;
    out->base = in->base;
    out->rank = rank;
    for (int i = 0; i < rank; i++) {
        ir_dim rem = dims[i];
        while (!is_one(rem)) {
            if (at >= nf)
                return FAIL("the reshape needs more elements than its input has");
            if (out->nsub[i] >= VIEW_MAX_SUB)
                return FAIL("the reshape splits a dimension into too many parts");
            view_sub f = flat[at];
            ir_dim q;
            if (ir_dim_eq(f.size, rem)) {
                out->sub[i][out->nsub[i]++] = f;
                at++;
                rem = one();
            } else if (ddiv(rem, f.size, &q)) { /* the whole sub-axis, and more */
                out->sub[i][out->nsub[i]++] = f;
                at++;
                rem = q;
            } else if (ddiv(f.size, rem, &q)) { /* the outer part of the sub-axis */
                view_sub outer = {rem, f.stride};
                if (!dmul(f.stride, q, &outer.stride))
                    return FAIL("stride overflow");
                out->sub[i][out->nsub[i]++] = outer;
                flat[at].size = q;
                rem = one();
            } else {
                char a[48], b[48];
                return FAIL("the reshape does not split along dimension boundaries (%s against %s)",
                            ir_dim_str(rem, a, sizeof a), ir_dim_str(f.size, b, sizeof b));
            }
        }
    }
    if (at != nf)
        return FAIL("the reshape drops elements");
    view_normalize(out);
    return 0;
}

/* Keeps [start, start + count) of dimension axis. */
static int apply_range(const view *in, int axis, int64_t start, ir_dim count, view *out, char *why, size_t nwhy)
{
    *out = *in;
    ir_dim size = view_dim(in, axis);
    if (ir_dim_eq(size, count) && start == 0)
        return 0;
    int ns = in->nsub[axis];
    if (ns == 0)
        return start == 0 && is_one(count) ? 0 : FAIL("slice outside a dimension of size 1");
    ir_dim inner = one();
    for (int j = 1; j < ns; j++)
        if (!dmul(inner, in->sub[axis][j].size, &inner))
            return FAIL("overflow");
    ir_dim outer_count, outer_start = ir_dim_const(start);
    if (!is_static(inner) || inner.k <= 0 || !is_static(count) || start % inner.k != 0 ||
        !ddiv(count, inner, &outer_count))
        return FAIL("the slice cuts through a merged dimension");
    outer_start.k = start / inner.k;
    const view_sub *s0 = &in->sub[axis][0];
    if (outer_start.k != 0) {
        if (!is_static(s0->stride))
            return FAIL("the slice offset depends on the batch");
        int64_t off;
        if (ir_mul_ovf(outer_start.k, s0->stride.k, &off) || ir_add_ovf(out->base, off, &out->base))
            return FAIL("overflow");
    }
    out->sub[axis][0].size = outer_count;
    view_normalize(out);
    return 0;
}

static int remove_dim(view *w, int axis)
{
    if (w->nsub[axis] != 0)
        return -1;
    for (int i = axis; i + 1 < w->rank; i++) {
        w->nsub[i] = w->nsub[i + 1];
        memcpy(w->sub[i], w->sub[i + 1], sizeof w->sub[i]);
    }
    w->rank--;
    return 0;
}

/* Reads a small constant integer list (input i of n); count or -1. */
static int same_dtype_cast(const ir_graph *g, const ir_node *n)
{
    const ir_attr *a = ir_attr_get(n, IR_ATTR_TO);
    int v = ir_input(n, 0);
    return a && a->kind == IR_AT_INT && v >= 0 && a->i > 0 && a->i < 1000 &&
           ir_dtype_from_onnx((int)a->i) == (int)g->values[v].dtype;
}

int view_is_movement(const ir_graph *g, const ir_node *n)
{
    if (!ir_op_has(n->op, OPF_MOVEMENT))
        return 0;
    if (n->op == IR_OP_GATHER) { /* one index: a slice */
        int v = ir_input(n, 1);
        return v >= 0 && rw_is_const(g, v) && g->values[v].rank <= 1 && rw_numel(&g->values[v]) == 1;
    }
    return n->op != IR_OP_CAST || same_dtype_cast(g, n);
}

int view_apply(const ir_graph *g, const ir_node *n, int k, const view *in, view *out, char *why, size_t nwhy)
{
    int ov = n->outputs[k];
    const ir_value *o = &g->values[ov], *x = &g->values[n->inputs[0]];
    if (o->rank < 0)
        return FAIL("'%s' has no shape", o->name);
    switch (n->op) {
    case IR_OP_IDENTITY: case IR_OP_CAST:
        *out = *in;
        return 0;
    case IR_OP_RESHAPE: case IR_OP_SQUEEZE: case IR_OP_UNSQUEEZE: case IR_OP_FLATTEN:
        return apply_reshape(in, o->rank, o->dims, out, why, nwhy);
    case IR_OP_TRANSPOSE: {
        const ir_attr *p = ir_attr_get(n, IR_ATTR_PERM);
        *out = *in;
        for (int i = 0; i < in->rank; i++) {
            int src = p ? (p->kind == IR_AT_INTS && p->n == in->rank ? (int)p->ints[i] : -1) : in->rank - 1 - i;
            if (src < 0 || src >= in->rank)
                return FAIL("bad perm");
            out->nsub[i] = in->nsub[src];
            memcpy(out->sub[i], in->sub[src], sizeof out->sub[i]);
        }
        return 0;
    }
    case IR_OP_SLICE: {
        int64_t starts[IR_MAX_RANK], ends[IR_MAX_RANK], axes[IR_MAX_RANK], steps[IR_MAX_RANK];
        int ns = rw_const_ints(g, n, 1, starts, IR_MAX_RANK), ne = rw_const_ints(g, n, 2, ends, IR_MAX_RANK);
        int na = ir_input(n, 3) >= 0 ? rw_const_ints(g, n, 3, axes, IR_MAX_RANK) : ns;
        int nst = ir_input(n, 4) >= 0 ? rw_const_ints(g, n, 4, steps, IR_MAX_RANK) : ns;
        if (ns < 0 || ne != ns || na != ns || nst != ns)
            return FAIL("the slice bounds are not constants");
        view cur = *in, nxt;
        for (int i = 0; i < ns; i++) {
            int a = rw_axis(ir_input(n, 3) >= 0 ? axes[i] : i, x->rank);
            if (a < 0 || (ir_input(n, 4) >= 0 && steps[i] != 1))
                return FAIL("the slice has a step other than 1");
            int64_t st = starts[i];
            if (st < 0) {
                if (!is_static(x->dims[a]))
                    return FAIL("negative slice start on a dimension that depends on the batch");
                st += x->dims[a].k;
            }
            if (st < 0)
                st = 0;
            if (apply_range(&cur, a, st, o->dims[a], &nxt, why, nwhy))
                return -1;
            cur = nxt;
        }
        *out = cur;
        return 0;
    }
    case IR_OP_SPLIT: {
        int a = rw_axis(ir_attr_int(n, IR_ATTR_AXIS, 0), x->rank);
        if (a < 0)
            return FAIL("bad axis");
        int64_t start = 0;
        for (int j = 0; j < k; j++) {
            const ir_value *pj = &g->values[n->outputs[j]];
            if (n->outputs[j] < 0 || !is_static(pj->dims[a]))
                return FAIL("split sizes depend on the batch");
            start += pj->dims[a].k;
        }
        return apply_range(in, a, start, o->dims[a], out, why, nwhy);
    }
    case IR_OP_GATHER: {
        int a = rw_axis(ir_attr_int(n, IR_ATTR_AXIS, 0), x->rank);
        int64_t idx;
        if (a < 0 || rw_const_ints(g, n, 1, &idx, 1) != 1)
            return FAIL("the gather index is not a constant");
        if (idx < 0) {
            if (!is_static(x->dims[a]))
                return FAIL("negative index on a dimension that depends on the batch");
            idx += x->dims[a].k;
        }
        if (apply_range(in, a, idx, one(), out, why, nwhy))
            return -1;
        if (g->values[n->inputs[1]].rank == 0 && remove_dim(out, a))
            return FAIL("internal: gathered dimension is not of size 1");
        return 0;
    }
    default:
        return FAIL("%s is not a data-movement op", ir_op_name(n->op));
    }
}

int view_trace(const ir_graph *g, int v, int stop, view *out, char *why, size_t nwhy)
{
    return view_trace_over(g, v, stop, NULL, out, why, nwhy);
}

int view_trace_over(const ir_graph *g, int v, int stop, const view *start, view *out, char *why, size_t nwhy)
{
    enum { MAX_CHAIN = 256 };
    const ir_node *chain[MAX_CHAIN];
    int outk[MAX_CHAIN], n = 0, cur = v;
    while (cur != stop && n < MAX_CHAIN) {
        const ir_node *p = rw_producer(g, cur);
        if (!p || !view_is_movement(g, p) || p->inputs[0] < 0)
            break;
        int k = 0;
        while (k < p->noutputs && p->outputs[k] != cur)
            k++;
        chain[n] = p;
        outk[n++] = k;
        cur = p->inputs[0];
    }
    if (start && cur != stop)
        return FAIL("'%s' does not read '%s' through data movement only", g->values[v].name, g->values[stop].name);
    if (start)
        *out = *start;
    else if (view_identity(g, cur, out, why, nwhy))
        return -1;
    for (int i = n - 1; i >= 0; i--) {
        view nxt;
        char sub[200];
        if (view_apply(g, chain[i], outk[i], out, &nxt, sub, sizeof sub))
            return FAIL("%s '%s': %s", ir_op_name(chain[i]->op), chain[i]->name, sub);
        *out = nxt;
    }
    return 0;
}

int view_same_subs(const view *a, const view *b)
{
    if (a->rank != b->rank)
        return 0;
    for (int i = 0; i < a->rank; i++) {
        if (a->nsub[i] != b->nsub[i])
            return 0;
        for (int j = 0; j < a->nsub[i]; j++)
            if (!ir_dim_eq(a->sub[i][j].size, b->sub[i][j].size) || !ir_dim_eq(a->sub[i][j].stride, b->sub[i][j].stride))
                return 0;
    }
    return 1;
}

static int same_view(const view *a, const view *b)
{
    return a->root == b->root && a->base == b->base && view_same_subs(a, b);
}

int view_is_identity(const ir_graph *g, const view *w)
{
    view id;
    char why[8];
    if (view_identity(g, w->root, &id, why, sizeof why))
        return 0;
    view a = *w;
    view_normalize(&a);
    return same_view(&a, &id);
}

/* All sub-axes of w in order, merged across dimensions. */
static int flatten_subs(const view *w, view_sub *flat)
{
    view one_dim = {.root = w->root, .base = w->base, .rank = 1};
    int n = 0;
    for (int i = 0; i < w->rank; i++)
        for (int j = 0; j < w->nsub[i]; j++) {
            if (n >= VIEW_MAX_SUB)
                return -1;
            one_dim.sub[0][n++] = w->sub[i][j];
        }
    one_dim.nsub[0] = n;
    view_normalize(&one_dim);
    memcpy(flat, one_dim.sub[0], sizeof(view_sub) * (size_t)one_dim.nsub[0]);
    return one_dim.nsub[0];
}

int view_is_reshape(const ir_graph *g, const view *w)
{
    view_sub flat[VIEW_MAX_SUB];
    int n = flatten_subs(w, flat);
    const ir_value *r = &g->values[w->root];
    ir_dim total = one();
    for (int i = 0; i < r->rank; i++)
        if (!dmul(total, r->dims[i], &total))
            return 0;
    if (w->base != 0 || n < 0)
        return 0;
    if (n == 0)
        return is_one(total);
    return n == 1 && is_one(flat[0].stride) && ir_dim_eq(flat[0].size, total);
}

/* The sub-axes of w ordered as they lie in the root, outermost first: order[k]
 * indexes the flattened list subs.  Returns their count, or -1 when they do
 * not tile the whole root exactly once. */
static int root_order(int root_rank, const ir_dim *root_dims, const view *w, view_sub *subs, int *order)
{
    int n = 0;
    for (int i = 0; i < w->rank; i++)
        for (int j = 0; j < w->nsub[i]; j++) {
            if (n >= IR_MAX_RANK)
                return -1;
            subs[n++] = w->sub[i][j];
        }
    if (w->base != 0)
        return -1;
    int used[IR_MAX_RANK] = {0};
    ir_dim expect = one();
    for (int k = n - 1; k >= 0; k--) { /* innermost first: the stride each next one must have */
        int found = -1;
        for (int s = 0; s < n && found < 0; s++)
            if (!used[s] && ir_dim_eq(subs[s].stride, expect))
                found = s;
        if (found < 0)
            return -1;
        used[found] = 1;
        order[k] = found;
        if (!dmul(expect, subs[found].size, &expect))
            return -1;
    }
    ir_dim total = one();
    for (int i = 0; i < root_rank; i++)
        if (!dmul(total, root_dims[i], &total))
            return -1;
    return ir_dim_eq(expect, total) ? n : -1;
}

int view_is_permutation(const ir_graph *g, const view *w)
{
    view_sub subs[IR_MAX_RANK];
    int order[IR_MAX_RANK];
    view a = *w;
    view_normalize(&a);
    const ir_value *r = &g->values[w->root];
    return root_order(r->rank, r->dims, &a, subs, order) >= 0;
}

static int dims_equal(int ra, const ir_dim *a, int rb, const ir_dim *b)
{
    if (ra != rb)
        return 0;
    for (int i = 0; i < ra; i++)
        if (!ir_dim_eq(a[i], b[i]))
            return 0;
    return 1;
}

/* How view_emit computes a view: Reshape the root to its sub-axes in root
 * order (first), Transpose them to view order, Reshape to the view (last);
 * each step only where needed. */
typedef struct {
    int n, is_perm, need_first, need_last, rank;
    ir_dim rdims[IR_MAX_RANK], vdims[IR_MAX_RANK];
    int64_t perm[IR_MAX_RANK];
} view_plan;

/* 0 and *p filled when w can be emitted over a root of the given shape. */
static int plan_emit(const view *win, int root_rank, const ir_dim *root_dims, view_plan *p)
{
    view w = *win;
    view_normalize(&w);
    view_sub subs[IR_MAX_RANK];
    int order[IR_MAX_RANK], n = root_order(root_rank, root_dims, &w, subs, order);
    if (n < 0)
        return -1;
    ir_dim sdims[IR_MAX_RANK];
    memset(p, 0, sizeof *p);
    p->n = n;
    p->rank = w.rank;
    for (int k = 0; k < n; k++) {
        p->rdims[k] = subs[order[k]].size; /* root order */
        sdims[k] = subs[k].size;           /* view order */
    }
    for (int k = 0; k < n; k++) { /* view position k reads root-order position perm[k] */
        for (int q = 0; q < n; q++)
            if (order[q] == k)
                p->perm[k] = q;
        p->is_perm |= p->perm[k] != k;
    }
    for (int i = 0; i < w.rank; i++)
        p->vdims[i] = view_dim(&w, i);
    p->need_first = p->is_perm && !dims_equal(root_rank, root_dims, n, p->rdims);
    p->need_last = !dims_equal(p->is_perm ? n : root_rank, p->is_perm ? sdims : root_dims, w.rank, p->vdims);
    if ((p->need_first && !rw_shape_expressible(n, p->rdims)) ||
        (p->need_last && !rw_shape_expressible(w.rank, p->vdims)))
        return -1;
    return 0;
}

int view_can_emit(const view *w, int root_rank, const ir_dim *root_dims)
{
    view_plan p;
    return plan_emit(w, root_rank, root_dims, &p) == 0;
}

int view_emit(ir_graph *g, const view *w, int out, const char *name)
{
    const ir_value *r = &g->values[w->root];
    view_plan p;
    if (plan_emit(w, r->rank, r->dims, &p))
        return -1;
    int cur = w->root;
    if (p.need_first && (cur = rw_reshape(g, cur, p.n, p.rdims, name, -1)) < 0)
        return -1;
    if (p.is_perm && (cur = rw_transpose(g, cur, p.n, p.perm, name, p.need_last ? -1 : out)) < 0)
        return -1;
    if (p.need_last && (cur = rw_reshape(g, cur, p.rank, p.vdims, name, out)) < 0)
        return -1;
    if (!p.is_perm && !p.need_last) {
        int in = cur;
        if (rw_add_node(g, IR_OP_IDENTITY, name, "Identity", 1, &in, out, 0, NULL) < 0)
            return -1;
    }
    return 0;
}
