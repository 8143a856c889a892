/* rewrite.c: reading and changing the graph, for every pass (rewrite.h). */
#include "passes/rewrite.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- reading ---- */

const ir_node *rw_producer(const ir_graph *g, int v)
{
    if (v < 0 || v >= g->nvalues || g->values[v].kind != IR_VAL_NODE)
        return NULL;
    int p = g->values[v].producer;
    return p >= 0 && p < g->nnodes ? &g->nodes[p] : NULL;
}

const ir_node *rw_def(const ir_graph *g, int v, ir_op op)
{
    const ir_node *n = rw_producer(g, v);
    return n && n->op == op ? n : NULL;
}

int rw_index(const ir_graph *g, const ir_node *n) { return (int)(n - g->nodes); }

int rw_is_graph_output(const ir_graph *g, int v)
{
    for (int i = 0; i < g->noutputs; i++)
        if (g->outputs[i] == v)
            return 1;
    return 0;
}

int rw_uses(const ir_graph *g, int v)
{
    int n = 0;
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i].ninputs; k++)
            n += g->nodes[i].inputs[k] == v;
    for (int i = 0; i < g->noutputs; i++)
        n += g->outputs[i] == v;
    return n;
}

const ir_node *rw_only_user(const ir_graph *g, int v)
{
    if (rw_uses(g, v) != 1 || rw_is_graph_output(g, v))
        return NULL;
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i].ninputs; k++)
            if (g->nodes[i].inputs[k] == v)
                return &g->nodes[i];
    return NULL;
}

int rw_users(const ir_graph *g, int v, const ir_node **users, int max)
{
    int n = 0;
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i].ninputs; k++)
            if (g->nodes[i].inputs[k] == v) {
                if (n < max)
                    users[n] = &g->nodes[i];
                n++;
                break;
            }
    return n;
}

int rw_is_const(const ir_graph *g, int v) { return ir_value_is_plain_const(g, v); }

static double elem_f64(const ir_value *c, int64_t i)
{
    ir_tensor t = {.dtype = c->dtype, .rank = 1, .dims = {(int64_t)(c->nbytes / ir_dtype_size(c->dtype))},
                   .data = c->data};
    return ir_tensor_get(&t, i);
}

int rw_scalar(const ir_graph *g, int v, double *out)
{
    if (!rw_is_const(g, v) || g->values[v].dtype == IR_BOOL || ir_dtype_size(g->values[v].dtype) == 0)
        return 0;
    const ir_value *c = &g->values[v];
    if (rw_numel(c) != 1 || c->nbytes != ir_dtype_size(c->dtype))
        return 0;
    *out = elem_f64(c, 0);
    return 1;
}

int rw_fake_quant_params(const ir_graph *g, const ir_node *n, double p[4])
{
    p[2] = ir_attr_float(n, IR_ATTR_QMIN, 0), p[3] = ir_attr_float(n, IR_ATTR_QMAX, 255);
    return n->op == IR_OP_FAKE_QUANT && rw_scalar(g, n->inputs[1], &p[0]) && rw_scalar(g, n->inputs[2], &p[1]);
}

int rw_fake_quant_point(const ir_graph *g, const ir_node *n, double mul, float f[5])
{
    double p[4];
    if (!rw_fake_quant_params(g, n, p) || !(p[0] > 0))
        return 0;
    float r[5] = {(float)mul, (float)p[0], (float)p[1], (float)p[2], (float)p[3]};
    memcpy(f, r, sizeof r);
    return 1;
}

int rw_splat(const ir_graph *g, int v, double *out)
{
    for (int depth = 0; v >= 0 && depth < 32; depth++) {
        const ir_value *c = &g->values[v];
        if (rw_is_const(g, v)) {
            int64_t n = rw_numel(c);
            if (n < 1 || ir_dtype_size(c->dtype) == 0 || (size_t)n * ir_dtype_size(c->dtype) != c->nbytes)
                return 0;
            double x = elem_f64(c, 0);
            for (int64_t i = 1; i < n; i++)
                if (elem_f64(c, i) != x) /* a NaN is never a splat: it differs from itself */
                    return 0;
            *out = x;
            return x == x;
        }
        const ir_node *p = rw_producer(g, v);
        if (!p)
            return 0;
        double cond;
        switch (ir_op_family_of(p->op)) {
        case IR_FAM_VIEW: /* the same elements, another shape */
            v = ir_input(p, 0);
            continue;
        default:
            break;
        }
        if (p->op == IR_OP_EXPAND || p->op == IR_OP_TRANSPOSE) {
            v = ir_input(p, 0);
        } else if (p->op == IR_OP_WHERE && rw_splat(g, ir_input(p, 0), &cond)) {
            v = ir_input(p, cond != 0 ? 1 : 2);
        } else if (p->op == IR_OP_CAST && g->values[v].dtype == IR_BOOL) {
            if (!rw_splat(g, ir_input(p, 0), &cond))
                return 0;
            *out = cond != 0;
            return 1;
        } else if (p->op == IR_OP_CAST && ir_dtype_is_float(g->values[v].dtype) &&
                   ir_dtype_is_float(g->values[ir_input(p, 0)].dtype)) {
            v = ir_input(p, 0); /* 0 and 1, what the identities ask about, survive any float cast */
        } else {
            return 0;
        }
    }
    return 0;
}

double *rw_const_broadcast(const ir_graph *g, int v, int rank, const int64_t *dims)
{
    const ir_value *c = &g->values[v];
    int64_t st[IR_MAX_RANK] = {0}, stride = 1, n = 1, cnt;
    if (rank < 0 || rank > IR_MAX_RANK)
        return NULL;
    for (int i = c->rank - 1; i >= 0; i--) { /* v's strides over dims, 0 where it broadcasts */
        int a = rank - c->rank + i;
        int64_t k = c->dims[i].k;
        if (c->dims[i].e || (a < 0 ? k != 1 : k != 1 && k != dims[a]))
            return NULL;
        if (a >= 0 && k != 1)
            st[a] = stride;
        stride *= k;
    }
    for (int a = 0; a < rank; a++)
        n *= dims[a];
    double *src = rw_const_f64(g, v, &cnt), *out = src ? malloc((size_t)(n ? n : 1) * sizeof *out) : NULL;
    for (int64_t i = 0; out && i < n; i++) {
        int64_t rest = i, off = 0;
        for (int a = rank - 1; a >= 0; a--) {
            off += rest % dims[a] * st[a];
            rest /= dims[a];
        }
        out[i] = src[off];
    }
    free(src);
    return out;
}

double *rw_const_f64(const ir_graph *g, int v, int64_t *count)
{
    if (!rw_is_const(g, v) || ir_dtype_size(g->values[v].dtype) == 0)
        return NULL;
    const ir_value *c = &g->values[v];
    int64_t n = rw_numel(c);
    if (n < 0 || (size_t)n * ir_dtype_size(c->dtype) != c->nbytes)
        return NULL;
    double *p = malloc((size_t)(n ? n : 1) * sizeof *p);
    if (!p)
        return NULL;
    if (c->dtype == IR_F32) { /* weights: the common case, without a call per element */
        const float *f = c->data;
        for (int64_t i = 0; i < n; i++)
            p[i] = f[i];
    } else {
        for (int64_t i = 0; i < n; i++)
            p[i] = elem_f64(c, i);
    }
    *count = n;
    return p;
}

int rw_const_ints(const ir_graph *g, const ir_node *n, int i, int64_t *vals, int max)
{
    int v = ir_input(n, i);
    int64_t cnt;
    if (v < 0)
        return -1;
    const ir_value *c = &g->values[v];
    if (!rw_is_const(g, v) || (c->dtype != IR_I64 && c->dtype != IR_I32) || c->rank > 1 ||
        (cnt = rw_numel(c)) < 0 || cnt > max)
        return -1;
    ir_tensor t = {.dtype = c->dtype, .rank = 1, .dims = {cnt}, .data = c->data};
    for (int64_t k = 0; k < cnt; k++)
        vals[k] = ir_tensor_get_i64(&t, k);
    return (int)cnt;
}

int rw_scalar_operand(const ir_graph *g, const ir_node *n, int *other, double *c)
{
    if (!n || n->ninputs != 2)
        return 0;
    for (int k = 0; k < 2; k++)
        if (rw_scalar(g, n->inputs[k], c) && !rw_is_const(g, n->inputs[1 - k])) {
            *other = n->inputs[1 - k];
            return 1;
        }
    return 0;
}

int rw_other_input(const ir_node *n, int v)
{
    if (n->ninputs != 2)
        return -1;
    if (n->inputs[0] == v)
        return n->inputs[1];
    if (n->inputs[1] == v)
        return n->inputs[0];
    return -1;
}

int64_t rw_numel(const ir_value *v)
{
    if (v->rank < 0)
        return -1;
    int64_t n = 1;
    for (int i = 0; i < v->rank; i++)
        if ((v->dims[i].e != 0 && v->dims[i].k != 0) || ir_mul_ovf(n, v->dims[i].k, &n))
            return -1;
    return n;
}

int rw_static_dims(const ir_value *v, int64_t *dims)
{
    for (int i = 0; i < v->rank; i++) {
        if (v->dims[i].e != 0 && v->dims[i].k != 0)
            return 0;
        dims[i] = v->dims[i].k;
    }
    return v->rank >= 0;
}

int rw_axis(int64_t axis, int rank)
{
    if (axis < -(int64_t)rank || axis >= rank)
        return -1;
    return (int)(axis < 0 ? axis + rank : axis);
}

int rw_close(double a, double b, double tol) { return fabs(a - b) <= tol * fabs(b); }

/* ---- changing ---- */

int rw_replace_uses(ir_graph *g, int from, int to)
{
    if (rw_is_graph_output(g, from))
        return 0;
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i].ninputs; k++)
            if (g->nodes[i].inputs[k] == from)
                g->nodes[i].inputs[k] = to;
    return 1;
}

int rw_set_spec(ir_graph *g, int ni, const char *name, const char *op_type, const ir_node_spec *s)
{
    return rw_set_node(g, ni, s->op, name, op_type, s->nin, s->in, 1, &s->out, s->nattrs, s->attrs);
}

int rw_set_node(ir_graph *g, int ni, ir_op op, const char *name, const char *op_type, int nin, const int *in,
                int nout, const int *out, int nattrs, const ir_attr *attrs)
{
    ir_node *n = &g->nodes[ni];
    int *ins = ir_alloc_array(g->arena, (size_t)nin + 1, sizeof(int));
    int *outs = ir_alloc_array(g->arena, (size_t)nout + 1, sizeof(int));
    ir_attr *at = ir_alloc_array(g->arena, (size_t)nattrs + 1, sizeof(ir_attr));
    const char *nm = ir_strdup(g->arena, name), *ot = ir_strdup(g->arena, op_type ? op_type : ir_op_name(op));
    if (!ins || !outs || !at || !nm || !ot)
        return -1;
    if (nin)
        memcpy(ins, in, (size_t)nin * sizeof(int));
    if (nout)
        memcpy(outs, out, (size_t)nout * sizeof(int));
    if (nattrs)
        memcpy(at, attrs, (size_t)nattrs * sizeof(ir_attr));
    for (int k = 0; k < nattrs; k++) /* arrays into the graph's arena: the caller's may be its own */
        if ((at[k].kind == IR_AT_INTS || at[k].kind == IR_AT_FLOATS) && at[k].n > 0) {
            size_t sz = at[k].kind == IR_AT_INTS ? sizeof(int64_t) : sizeof(float);
            void *copy = ir_alloc_array(g->arena, (size_t)at[k].n, sz);
            if (!copy)
                return -1;
            memcpy(copy, at[k].kind == IR_AT_INTS ? (void *)at[k].ints : (void *)at[k].floats, (size_t)at[k].n * sz);
            if (at[k].kind == IR_AT_INTS)
                at[k].ints = copy;
            else
                at[k].floats = copy;
        }
    for (int k = 0; k < n->noutputs; k++)
        if (n->outputs[k] >= 0 && g->values[n->outputs[k]].producer == ni)
            g->values[n->outputs[k]].producer = -1;
    n->op = op;
    n->name = nm;
    n->op_type = ot;
    n->ninputs = nin;
    n->inputs = ins;
    n->noutputs = nout;
    n->outputs = outs;
    n->nattrs = nattrs;
    n->attrs = at;
    for (int k = 0; k < nout; k++)
        if (outs[k] >= 0)
            g->values[outs[k]].producer = ni;
    return 0;
}

int rw_add_node(ir_graph *g, ir_op op, const char *name, const char *op_type, int nin, const int *in, int out,
                int nattrs, const ir_attr *attrs)
{
    return ir_add_node(g, op, name, op_type, nin, in, 1, &out, nattrs, attrs);
}

/* base + suffix, with a counter appended when the name is taken; in the arena. */
static const char *unique_name(ir_graph *g, const char *base, const char *suffix)
{
    size_t n = strlen(base) + strlen(suffix) + 24;
    char *name = malloc(n);
    if (!name)
        return NULL;
    snprintf(name, n, "%s%s", base, suffix);
    for (int k = 2; ir_find_value(g, name) >= 0; k++)
        snprintf(name, n, "%s%s_%d", base, suffix, k);
    const char *s = ir_strdup(g->arena, name);
    free(name);
    return s;
}

int rw_append(ir_graph *g, ir_op op, const char *base, const char *suffix, ir_dtype dt, int nin, const int *in,
              int nattrs, const ir_attr *at, const char *op_type)
{
    int v = rw_new_value(g, base, suffix, dt);
    if (v < 0)
        return -1;
    const char *name = g->values[v].name;
    return rw_add_node(g, op, name, op_type, nin, in, v, nattrs, at) < 0 ? -1 : v;
}

int rw_new_value(ir_graph *g, const char *base, const char *suffix, ir_dtype dt)
{
    const char *name = unique_name(g, base, suffix);
    return name ? ir_add_value(g, name, IR_VAL_NODE, dt) : -1;
}

static int new_const(ir_graph *g, const char *base, const char *suffix, ir_dtype dt, int rank, const int64_t *dims,
                     const void *data, size_t nbytes)
{
    const char *name = unique_name(g, base, suffix);
    return name ? ir_add_const(g, name, dt, rank, dims, data, nbytes) : -1;
}

int rw_const_f32(ir_graph *g, const char *base, const char *suffix, int rank, const int64_t *dims,
                 const float *data)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= dims[i];
    return new_const(g, base, suffix, IR_F32, rank, dims, data, (size_t)n * sizeof(float));
}

int rw_const_raw(ir_graph *g, const char *base, const char *suffix, ir_dtype dt, int rank, const int64_t *dims,
                 const void *data, size_t nbytes)
{
    return new_const(g, base, suffix, dt, rank, dims, data, nbytes);
}

int rw_const_i64(ir_graph *g, const char *base, const char *suffix, int n, const int64_t *vals)
{
    int64_t dims[1] = {n};
    return new_const(g, base, suffix, IR_I64, 1, dims, vals, (size_t)n * sizeof(int64_t));
}

int rw_shape_expressible(int rank, const ir_dim *dims)
{
    int batch_dims = 0;
    for (int i = 0; i < rank; i++) {
        batch_dims += dims[i].e != 0 && dims[i].k != 0;
        if (dims[i].k == 0)
            return 0; /* a 0 would copy the input's dimension */
    }
    return batch_dims <= 1; /* the one that depends on the batch is written -1 */
}

int rw_shape_const(ir_graph *g, const char *base, int rank, const ir_dim *dims)
{
    if (!rw_shape_expressible(rank, dims))
        return -1;
    int64_t v[IR_MAX_RANK];
    for (int i = 0; i < rank; i++)
        v[i] = dims[i].e != 0 ? -1 : dims[i].k;
    return rw_const_i64(g, base, "/shape", rank, v);
}

int rw_reshape(ir_graph *g, int x, int rank, const ir_dim *dims, const char *name, int out)
{
    int s = rw_shape_const(g, name, rank, dims);
    if (s < 0)
        return -1;
    if (out < 0 && (out = rw_new_value(g, name, "/reshaped", g->values[x].dtype)) < 0)
        return -1;
    int in[2] = {x, s};
    return rw_add_node(g, IR_OP_RESHAPE, name, "Reshape", 2, in, out, 0, NULL) < 0 ? -1 : out;
}

int rw_transpose(ir_graph *g, int x, int rank, const int64_t *perm, const char *name, int out)
{
    if (out < 0 && (out = rw_new_value(g, name, "/transposed", g->values[x].dtype)) < 0)
        return -1;
    ir_attr a = rw_attr_ints(g, IR_ATTR_PERM, rank, perm);
    if (!a.ints)
        return -1;
    return rw_add_node(g, IR_OP_TRANSPOSE, name, "Transpose", 1, &x, out, 1, &a) < 0 ? -1 : out;
}

/* Producers from the node list; fails when a value has two. */
static int fix_producers(ir_graph *g, vitc_diag *d)
{
    for (int v = 0; v < g->nvalues; v++)
        if (g->values[v].kind == IR_VAL_NODE)
            g->values[v].producer = -1;
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i].noutputs; k++) {
            int v = g->nodes[i].outputs[k];
            if (v < 0)
                continue;
            if (g->values[v].producer >= 0)
                return vitc_error(d, VITC_INTERNAL, &g->nodes[i], "value '%s' has two producers", g->values[v].name);
            g->values[v].producer = i;
        }
    return VITC_OK;
}

/* Depth-first topological order that keeps the existing order where it is
 * valid: each node is placed after the producers of its inputs. */
static int toposort(ir_graph *g, vitc_diag *d)
{
    int n = g->nnodes, st = fix_producers(g, d);
    if (st || n == 0)
        return st;
    int *order = malloc(sizeof(int) * (size_t)n), *state = calloc((size_t)n, sizeof(int));
    int *stack = malloc(sizeof(int) * (size_t)n), *next = calloc((size_t)n, sizeof(int));
    ir_node *copy = malloc(sizeof(ir_node) * (size_t)n);
    if (!order || !state || !stack || !next || !copy) {
        st = vitc_error(d, VITC_INTERNAL, NULL, "out of memory");
        goto out;
    }
    int no = 0;
    for (int r = 0; r < n && !st; r++) {
        if (state[r])
            continue;
        int sp = 0;
        stack[sp++] = r;
        state[r] = 1;
        while (sp > 0 && !st) {
            int i = stack[sp - 1];
            const ir_node *nd = &g->nodes[i];
            if (next[i] < nd->ninputs) {
                int v = nd->inputs[next[i]++];
                int p = v >= 0 && g->values[v].kind == IR_VAL_NODE ? g->values[v].producer : -1;
                if (p < 0 || state[p] == 2)
                    continue;
                if (state[p] == 1)
                    st = vitc_error(d, VITC_INTERNAL, nd, "the graph has a cycle through '%s'", g->values[v].name);
                else {
                    state[p] = 1;
                    stack[sp++] = p;
                }
                continue;
            }
            state[i] = 2;
            order[no++] = i;
            sp--;
        }
    }
    if (!st) {
        for (int i = 0; i < n; i++)
            copy[i] = g->nodes[order[i]];
        memcpy(g->nodes, copy, sizeof(ir_node) * (size_t)n);
        st = fix_producers(g, d);
    }
out:
    free(order);
    free(state);
    free(stack);
    free(next);
    free(copy);
    return st;
}

int rw_finish(ir_graph *g, vitc_diag *d)
{
    int st = toposort(g, d);
    if (!st)
        st = pass_dce(g, d);
    if (!st)
        st = ir_infer_shapes(g, d);
    return st;
}

const char *rw_fused_name(ir_graph *g, const ir_node *first, const ir_node *last)
{
    const char *a = first->name, *b = last->name;
    size_t cut = 0;
    for (size_t i = 0; a[i] && a[i] == b[i]; i++)
        if (a[i] == '/')
            cut = i;
    if (cut > 0) {
        const char *s = ir_strndup(g->arena, a, cut);
        if (s)
            return s;
    }
    return b;
}

ir_attr rw_attr_int(ir_attr_id id, int64_t v)
{
    ir_attr a = {.id = id, .kind = IR_AT_INT, .i = v, .tensor = -1};
    return a;
}

ir_attr rw_attr_float(ir_attr_id id, float v)
{
    ir_attr a = {.id = id, .kind = IR_AT_FLOAT, .f = v, .tensor = -1};
    return a;
}

ir_attr rw_attr_ints(ir_graph *g, ir_attr_id id, int n, const int64_t *v)
{
    ir_attr a = {.id = id, .kind = IR_AT_INTS, .n = n, .tensor = -1};
    a.ints = ir_alloc_array(g->arena, (size_t)n + 1, sizeof(int64_t));
    if (a.ints && n)
        memcpy(a.ints, v, (size_t)n * sizeof(int64_t));
    return a;
}
