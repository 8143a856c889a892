/* lookup.c: quant-lookup.  A fake-quantized value takes at most
 * qmax - qmin + 1 values, the points of its grid; an element-wise chain
 * whose only varying input y is such a value is, element by element, one of
 * that many numbers.  Such a chain becomes QuantLookup(y) (ops.def), its
 * table the chain's values at the grid points, computed here by the
 * interpreter, so each entry has the bits the interpreter gives the chain.
 *
 * In a static QDQ export the GELU between fc1 and fc2 is that chain: Div by
 * sqrt(2), Erf, Add 1, Mul by x, Mul by 1/2 with FakeQuants between, two
 * divisions and an erf per element of the widest tensor of the block, on
 * fc1's output, which is on the grid of fc1's last fake-quant point.
 *
 * y is on a grid when a FakeQuant with one scale and zero point makes it, or
 * a LinearInt8 whose last output fake-quant point does (no residual after
 * it).  The chain: the element-wise nodes after y's producer whose inputs
 * are y, one-element f32 constants and the chain's own values, each of y's
 * shape and f32.  Each value of the chain read outside it (or a graph
 * output) becomes a lookup when the nodes it depends on are worth a table: an
 * op with a transcendental function or a division among them, or at least
 * LOOKUP_MIN_NODES nodes (a gather costs about what a few cheap vector
 * operations do).  The tables are small (grids of at most MAX_GRID points:
 * 8-bit types).
 *
 * A lookup quantizes its input itself: where y is an int8 Linear's output
 * that only the lookup reads, on the grid of the Linear's last point (mul 1),
 * the Linear drops that point, as the lookup gives FakeQuant(t) the entry it
 * gives t (the code of a grid point is its own code, NaN and infinities
 * included). */
#include "ir/interp.h"
#include "ir/opview.h"
#include "passes/rewrite.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_GRID = 256, MAX_CHAIN = 64, LOOKUP_MIN_NODES = 4 };

/* Which of int8 Linear lv's output points makes its output, -1 none: the
 * bias's, or the product's where there is no bias. */
static int last_point(const ir_linear *lv)
{
    return lv->fq[1][1] != 0 ? 1 : lv->bias < 0 && lv->fq[0][1] != 0 ? 0 : -1;
}

/* 1 and the grid (fq = {1, scale, zero, qmin, qmax}) when every element of
 * v is a point of a FakeQuant grid of at most MAX_GRID points. */
static int on_grid(const ir_graph *g, int v, float fq[5])
{
    const ir_node *p = rw_producer(g, v);
    if (!p || p->noutputs != 1)
        return 0;
    ir_linear lv;
    char why[160];
    if (p->op == IR_OP_LINEAR_INT8 && ir_linear_of(p, &lv, why, sizeof why) && lv.y == v && lv.residual < 0 &&
        lv.gate < 0 && lv.act == IR_ACT_NONE && last_point(&lv) >= 0) {
        memcpy(fq, lv.fq[last_point(&lv)], 5 * sizeof(float));
        fq[0] = 1; /* the point's mul scales what it quantizes, not the grid */
    } else if (!rw_fake_quant_point(g, p, 1, fq)) {
        return 0;
    }
    return fq[1] > 0 && isfinite(fq[1]) && fq[3] == floorf(fq[3]) && fq[4] >= fq[3] && fq[4] - fq[3] < MAX_GRID;
}

static int is_scalar_f32(const ir_graph *g, int v)
{
    double x;
    return g->values[v].dtype == IR_F32 && rw_scalar(g, v, &x);
}

/* 1 if node j joins y's chain (member: the nodes already in it). */
static int joins(const ir_graph *g, int j, int y, const unsigned char *member)
{
    const ir_node *n = &g->nodes[j];
    if (!ir_ew(n->op) || n->noutputs != 1 || n->outputs[0] < 0 || g->values[n->outputs[0]].dtype != IR_F32 ||
        !ir_same_shape(&g->values[n->outputs[0]], &g->values[y]))
        return 0;
    int linked = 0;
    for (int k = 0; k < n->ninputs; k++) {
        int v = n->inputs[k], p = v >= 0 ? g->values[v].producer : -1;
        if (v == y || (p >= 0 && member[p]))
            linked = 1;
        else if (v < 0 || !is_scalar_f32(g, v))
            return 0;
    }
    return linked;
}

/* 1 if value v of the chain is read outside it or is a graph output. */
static int leaves_chain(const ir_graph *g, int v, const unsigned char *member)
{
    if (rw_is_graph_output(g, v))
        return 1;
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i].ninputs; k++)
            if (g->nodes[i].inputs[k] == v && !member[i])
                return 1;
    return 0;
}

/* The chain's nodes that node e depends on (e included), ascending. */
static int cone_of(const ir_graph *g, int e, const unsigned char *member, int *cone)
{
    int stack[MAX_CHAIN], nstack = 0, ids[MAX_CHAIN], nids = 0;
    stack[nstack++] = e;
    while (nstack > 0) {
        int j = stack[--nstack], seen = 0;
        for (int i = 0; i < nids && !seen; i++)
            seen = ids[i] == j;
        if (seen || nids == MAX_CHAIN)
            continue;
        ids[nids++] = j;
        const ir_node *n = &g->nodes[j];
        for (int k = 0; k < n->ninputs; k++) {
            int p = n->inputs[k] >= 0 ? g->values[n->inputs[k]].producer : -1;
            if (p >= 0 && member[p] && nstack < MAX_CHAIN)
                stack[nstack++] = p;
        }
    }
    int n = 0;
    for (int j = 0; j <= e; j++)
        for (int i = 0; i < nids; i++)
            if (ids[i] == j)
                cone[n++] = j;
    return n;
}

static int worth_a_table(const ir_graph *g, const int *cone, int n)
{
    for (int i = 0; i < n; i++) {
        ir_op op = g->nodes[cone[i]].op;
        if (ir_op_has(op, OPF_TRANSCENDENTAL) || op == IR_OP_DIV)
            return 1;
    }
    return n >= LOOKUP_MIN_NODES;
}

/* table[i] = the value of cone's last node with y at grid point i: the
 * interpreter runs the cone's nodes on the grid.  0, or -1 when it cannot. */
static int make_table(const ir_graph *g, int y, const float fq[5], const int *cone, int n, float *table, int npts)
{
    float grid[MAX_GRID];
    for (int i = 0; i < npts; i++) /* as FakeQuant gives the point: (code - zero) * scale in f32 */
        grid[i] = (float)(fq[3] + (float)i - fq[2]) * fq[1];
    ir_tensor out[MAX_CHAIN];
    memset(out, 0, sizeof out);
    int st = 0, done = 0;
    for (int c = 0; c < n && !st; c++, done++) {
        const ir_node *nd = &g->nodes[cone[c]];
        ir_tensor in[8];
        memset(in, 0, sizeof in);
        for (int k = 0; k < nd->ninputs && k < 8 && !st; k++) {
            int v = nd->inputs[k], p = g->values[v].producer;
            if (v == y) {
                in[k] = (ir_tensor){.dtype = IR_F32, .rank = 1, .dims = {npts}, .data = grid};
                continue;
            }
            int from = -1;
            for (int i = 0; i < c && from < 0; i++)
                if (cone[i] == p)
                    from = i;
            if (from >= 0) {
                in[k] = out[from];
            } else {
                const ir_value *cv = &g->values[v];
                in[k] = (ir_tensor){.dtype = cv->dtype, .rank = cv->rank, .data = cv->data};
                st = rw_static_dims(cv, in[k].dims) ? 0 : -1;
            }
        }
        st = st || nd->ninputs > 8 || ir_interp_eval_any(g, nd, in, &out[c]) ? -1 : 0;
    }
    const ir_tensor *r = &out[n - 1];
    if (!st && (r->dtype != IR_F32 || ir_tensor_numel(r) != npts))
        st = -1;
    if (!st)
        memcpy(table, r->data, sizeof(float) * (size_t)npts);
    for (int c = 0; c < done && c < n; c++)
        ir_tensor_free(&out[c]);
    return st;
}

/* Node j (the cone's last) becomes QuantLookup(y) with the table. */
static int to_lookup(ir_graph *g, int j, int y, const float fq[5], const float *table, int npts)
{
    char name[256];
    snprintf(name, sizeof name, "%s", g->nodes[j].name ? g->nodes[j].name : "lookup");
    int64_t dims[1] = {npts};
    int tv = rw_const_f32(g, name, "/table", 1, dims, table);
    int sv = tv < 0 ? -1 : rw_const_f32(g, name, "/scale", 0, NULL, &fq[1]);
    int zv = sv < 0 ? -1 : rw_const_f32(g, name, "/zero_point", 0, NULL, &fq[2]);
    if (zv < 0)
        return -1;
    int in[4] = {y, sv, zv, tv}, out = g->nodes[j].outputs[0];
    ir_attr at[2] = {rw_attr_float(IR_ATTR_QMIN, fq[3]), rw_attr_float(IR_ATTR_QMAX, fq[4])};
    return rw_set_node(g, j, IR_OP_QUANT_LOOKUP, name, "quant-lookup", 4, in, 1, &out, 2, at) ? -1 : 0;
}

/* The int8 Linear that alone feeds lookup node j drops its last point
 * where that is the lookup's grid; 1 if it did, 0 if not, -1 out of memory. */
static int quantize_in_lookup(ir_graph *g, int j)
{
    const ir_node *n = &g->nodes[j];
    int y = n->inputs[0];
    const ir_node *p = rw_producer(g, y);
    ir_linear lv;
    char why[160];
    double s, z;
    if (!p || p->op != IR_OP_LINEAR_INT8 || rw_uses(g, y) != 1 || rw_is_graph_output(g, y) ||
        !ir_linear_of(p, &lv, why, sizeof why) || lv.y != y || !rw_scalar(g, n->inputs[1], &s) ||
        !rw_scalar(g, n->inputs[2], &z))
        return 0;
    int last = last_point(&lv);
    if (last < 0 || lv.fq[last][0] != 1 || lv.fq[last][1] != (float)s || lv.fq[last][2] != (float)z ||
        lv.fq[last][3] != ir_attr_float(n, IR_ATTR_QMIN, 0) || lv.fq[last][4] != ir_attr_float(n, IR_ATTR_QMAX, 255))
        return 0;
    memset(lv.fq[last], 0, sizeof lv.fq[last]);
    ir_node_spec spec;
    ir_linear_spec(&lv, &spec);
    int pi = rw_index(g, p);
    return rw_set_spec(g, pi, p->name, p->op_type, &spec) ? -1 : 1;
}

int pass_quant_lookup(ir_graph *g, const pass_options *o, vitc_diag *d)
{
    if (!o || o->int8 == PASS_INT8_NONE)
        return VITC_OK;
    int nn = g->nnodes, changed = 0, st = 0;
    unsigned char *member = calloc((size_t)nn + 1, 1), *taken = calloc((size_t)nn + 1, 1);
    if (!member || !taken) {
        free(member), free(taken);
        return vitc_error(d, VITC_INTERNAL, NULL, "out of memory");
    }
    for (int p = 0; p < nn && !st; p++) {
        float fq[5];
        int y = g->nodes[p].noutputs == 1 ? g->nodes[p].outputs[0] : -1;
        if (taken[p] || y < 0 || !on_grid(g, y, fq))
            continue;
        int chain[MAX_CHAIN], nchain = 0;
        for (int j = p + 1; j < nn && nchain < MAX_CHAIN; j++)
            if (!taken[j] && joins(g, j, y, member))
                member[chain[nchain++] = j] = 1;
        int npts = (int)(fq[4] - fq[3]) + 1, exits[MAX_CHAIN], nexits = 0;
        for (int c = 0; c < nchain; c++)
            if (leaves_chain(g, g->nodes[chain[c]].outputs[0], member))
                exits[nexits++] = chain[c];
        for (int x = 0; x < nexits && !st; x++) {
            int cone[MAX_CHAIN], n = cone_of(g, exits[x], member, cone);
            float table[MAX_GRID];
            if (!worth_a_table(g, cone, n) || make_table(g, y, fq, cone, n, table, npts))
                continue; /* left as it is: the chain still computes it */
            for (int i = 0; i < n; i++)
                taken[cone[i]] = 1;
            st = to_lookup(g, exits[x], y, fq, table, npts);
            changed = 1;
        }
        for (int c = 0; c < nchain; c++)
            member[chain[c]] = 0;
    }
    free(member), free(taken);
    if (st)
        return vitc_error(d, VITC_INTERNAL, NULL, "out of memory while making lookup tables");
    if (!changed || (st = rw_finish(g, d)) != VITC_OK) /* the chains go: the lookups alone read their y */
        return st;
    changed = 0;
    for (int j = 0; j < g->nnodes && st >= 0; j++)
        if (g->nodes[j].op == IR_OP_QUANT_LOOKUP && (st = quantize_in_lookup(g, j)) > 0)
            changed = 1;
    if (st < 0)
        return vitc_error(d, VITC_INTERNAL, NULL, "out of memory while making lookup tables");
    return changed ? rw_finish(g, d) : VITC_OK;
}
