/* simplify.c: local canonicalisation, run three times in the pipeline.
 *
 * - No-ops go: Identity, inference Dropout, Cast to the same type, Reshape /
 *   Squeeze / Unsqueeze / Flatten / Expand to the same shape, Pad by 0, Transpose by
 *   the identity, a full Slice, a one-input Concat, adding 0 or multiplying
 *   by 1 (a splat of any shape that broadcasts away: a mask that masks
 *   nothing), a Where whose condition is a splat, a NaN guard after a
 *   Softmax, a Resize to its input's size; outputs nothing reads (LayerNormalization's statistics,
 *   Dropout's mask).
 * - A chain of data-movement ops that computes its input unchanged goes, and
 *   one that only reshapes becomes a single Reshape (view.c decides).
 * - A Transpose feeding a reduction with keepdims=0 is absorbed into the
 *   reduction's axes when the kept axes stay in order (einops's mean-pool).
 * - A Tile that repeats only axes of size 1 becomes the Expand it is.
 * - A Linear whose input is a row permutation of a tensor (torch's
 *   MultiheadAttention works on (L, B, E)) is computed on that tensor and the
 *   permutation moved after it; then the permutation usually meets its
 *   inverse and the chain goes. */
#include "ir/interp.h"
#include "passes/rewrite.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int identity_perm(const ir_node *n, int rank)
{
    const ir_attr *p = ir_attr_get(n, IR_ATTR_PERM);
    if (!p)
        return rank <= 1;
    for (int i = 0; i < p->n; i++)
        if (p->ints[i] != i)
            return 0;
    return 1;
}

/* 1 if every step of Slice n is a known positive number (absent steps are 1):
 * then a Slice that keeps its input's shape starts at 0 on every axis and is
 * the identity.  A negative step keeps the shape and reverses the axis. */
static int forward_slice(const ir_graph *g, const ir_node *n)
{
    int st = ir_input(n, 4);
    if (st < 0)
        return 1;
    int64_t count;
    double *steps = rw_const_f64(g, st, &count);
    if (!steps)
        return 0;
    int ok = 1;
    for (int64_t i = 0; i < count; i++)
        ok &= steps[i] > 0;
    free(steps);
    return ok;
}

/* 1 if Resize n resizes at scale 1 where its output has its input's shape:
 * its size comes from sizes (scale = size / input), or from scales that are
 * all 1.  Scales such as 1.1 floor 5 to 5 and still interpolate. */
static int resize_at_scale_1(const ir_graph *g, const ir_node *n)
{
    if (ir_input(n, 3) >= 0)
        return 1;
    int64_t count = 0;
    double *s = ir_input(n, 2) >= 0 ? rw_const_f64(g, n->inputs[2], &count) : NULL;
    int ones = s != NULL;
    for (int64_t i = 0; ones && i < count; i++)
        ones = s[i] == 1;
    free(s);
    return ones;
}

/* The input a no-op node passes through unchanged, or -1. */
static int noop_input(const ir_graph *g, const ir_node *n)
{
    int x = ir_input(n, 0), y = n->noutputs > 0 ? n->outputs[0] : -1;
    if (x < 0 || y < 0 || g->values[x].dtype != g->values[y].dtype || !ir_same_shape(&g->values[x], &g->values[y]))
        return -1;
    for (int k = 1; k < n->noutputs; k++)
        if (n->outputs[k] >= 0 && rw_uses(g, n->outputs[k]) > 0)
            return -1; /* Dropout's mask is read */
    if (n->op == IR_OP_DROPOUT) { /* inference only: training_mode absent or a constant false */
        const ir_value *tm = ir_input(n, 2) >= 0 ? &g->values[n->inputs[2]] : NULL;
        if (tm && (!rw_is_const(g, n->inputs[2]) || tm->nbytes < 1 || ((const unsigned char *)tm->data)[0] != 0))
            return -1;
    }
    if (ir_op_family_of(n->op) == IR_FAM_VIEW) /* it renames its input; with the same shape, unchanged */
        return x;
    if (n->op == IR_OP_TRANSPOSE)
        return identity_perm(n, g->values[x].rank) ? x : -1;
    if (n->op == IR_OP_CONCAT)
        return n->ninputs == 1 ? x : -1;
    if (n->op == IR_OP_SLICE)
        return forward_slice(g, n) ? x : -1;
    if (n->op == IR_OP_RESIZE) /* at its own size, at scale 1 */
        return ir_resize_copies_at_same_size(n) && resize_at_scale_1(g, n) ? x : -1;
    if (n->op == IR_OP_PAD) { /* by nothing (Swin pads to whole windows, by 0 where they fit) */
        int64_t pads[2 * IR_MAX_RANK];
        int np = rw_const_ints(g, n, 1, pads, 2 * IR_MAX_RANK);
        for (int i = 0; i < np; i++)
            if (pads[i] != 0)
                return -1;
        return np >= 0 ? x : -1;
    }
    return n->op == IR_OP_EXPAND || n->op == IR_OP_CAST ? x : -1;
}

/* 1 when v is finite wherever the model's inputs are: an input, a product of
 * activations (MatMul, Einsum, Linear), a constant of finite numbers, a
 * comparison or a Cast of one, and Add, Sub, Mul, Neg, Where (finite
 * branches), Expand and views of such values, depth levels down. */
static int finite_logits(const ir_graph *g, int v, int depth)
{
    const ir_value *x = &g->values[v];
    if (ir_value_is_plain_const(g, v)) {
        int64_t n;
        double *d = rw_const_f64(g, v, &n);
        int ok = d != NULL;
        for (int64_t i = 0; ok && i < n; i++)
            ok = isfinite(d[i]);
        free(d);
        return ok;
    }
    if (x->kind == IR_VAL_INPUT)
        return 1;
    const ir_node *p = x->kind == IR_VAL_NODE && x->producer >= 0 ? &g->nodes[x->producer] : NULL;
    if (!p || depth <= 0)
        return 0;
    const ir_ew_info *ew = ir_ew(p->op);
    if (ew && ew->result == IR_EW_PRED)
        return 1; /* a bool */
    if (ir_op_family_of(p->op) == IR_FAM_MATMUL)
        return 1;
    if (ir_op_family_of(p->op) == IR_FAM_VIEW || p->op == IR_OP_EXPAND || p->op == IR_OP_CAST || p->op == IR_OP_NEG)
        return finite_logits(g, p->inputs[0], depth - 1);
    if (p->op == IR_OP_ADD || p->op == IR_OP_SUB || p->op == IR_OP_MUL)
        return finite_logits(g, p->inputs[0], depth - 1) && finite_logits(g, p->inputs[1], depth - 1);
    if (p->op == IR_OP_WHERE)
        return finite_logits(g, p->inputs[1], depth - 1) && finite_logits(g, p->inputs[2], depth - 1);
    return 0;
}

/* The operand an arithmetic identity or a decided Where passes through, -1
 * if none: x + 0, 0 + x, x - 0, x * 1, 1 * x, x / 1, Where(true, a, _),
 * Where(false, _, b), where the 0, 1 or condition is a splat (rw_splat: a
 * mask that broadcasts one value, as exporters write an attention mask that
 * masks nothing) and the result has the operand's shape and type.  Then
 * Where(IsNaN(p), 0, p) with p a Softmax's output whose input is finite_logits:
 * a softmax row is NaN only when its input holds NaN or +inf or is -inf
 * throughout, which an exporter's guard meets after a mask of -inf over a
 * whole row; logits that are products plus finite masks never are (for
 * finite model inputs), so there the guard guards nothing.  A mask computed
 * from data keeps its guard. */
static int identity_operand(const ir_graph *g, const ir_node *n)
{
    int y = n->noutputs == 1 ? n->outputs[0] : -1, pass = -1;
    double c;
    if (y < 0 || n->ninputs < 2)
        return -1;
    int a = n->inputs[0], b = n->inputs[1];
    if (a < 0 || b < 0)
        return -1;
    /* x op e = x for op's neutral element e, and e op x = x where op commutes */
    static const struct {
        ir_op op;
        double e;
        int commutes;
    } neutral[] = {{IR_OP_ADD, 0, 1}, {IR_OP_SUB, 0, 0}, {IR_OP_MUL, 1, 1}, {IR_OP_DIV, 1, 0}};
    for (size_t i = 0; i < sizeof neutral / sizeof neutral[0]; i++)
        if (n->op == neutral[i].op)
            pass = rw_splat(g, b, &c) && c == neutral[i].e                         ? a
                   : neutral[i].commutes && rw_splat(g, a, &c) && c == neutral[i].e ? b
                                                                                   : -1;
    if (n->op == IR_OP_WHERE) {
        int other = n->ninputs == 3 ? n->inputs[2] : -1;
        const ir_node *nan = rw_def(g, a, IR_OP_IS_NAN);
        if (other >= 0 && rw_splat(g, a, &c))
            pass = c != 0 ? b : other;
        else if (nan && other >= 0 && ir_input(nan, 0) == other && rw_def(g, other, IR_OP_SOFTMAX) &&
                 finite_logits(g, rw_def(g, other, IR_OP_SOFTMAX)->inputs[0], 8) && rw_splat(g, b, &c) && c == 0)
            pass = other;
    }
    if (pass < 0 || g->values[pass].dtype != g->values[y].dtype || !ir_same_shape(&g->values[pass], &g->values[y]))
        return -1;
    return pass;
}

typedef struct {
    int x;                      /* the Transpose's input */
    int axes_input;             /* the axes are input 1 (opset 18), not an attribute */
    int naxes;
    int64_t axes[IR_MAX_RANK]; /* the axes of x to reduce */
} absorb_match;

/* ReduceX(Transpose(x, perm), axes A, keepdims=0) -> ReduceX(x, perm[A]) when
 * the axes that stay keep their order. */
static int match_absorb(const ir_graph *g, const ir_node *n, void *mv, char *why, size_t nwhy)
{
    absorb_match *m = mv;
    (void)why, (void)nwhy;
    if (n->op != IR_OP_REDUCE_MEAN && n->op != IR_OP_REDUCE_SUM && n->op != IR_OP_REDUCE_MAX && n->op != IR_OP_REDUCE_MIN)
        return 0;
    const ir_node *t = rw_def(g, ir_input(n, 0), IR_OP_TRANSPOSE);
    if (!t || ir_attr_int(n, IR_ATTR_KEEPDIMS, 1) != 0)
        return 0;
    int rank = g->values[t->outputs[0]].rank;
    const ir_attr *p = ir_attr_get(t, IR_ATTR_PERM);
    if (!p || p->n != rank)
        return 0;
    int64_t axes[IR_MAX_RANK];
    int na = 0;
    m->axes_input = ir_input(n, 1) >= 0;
    if (m->axes_input) {
        int64_t cnt;
        double *v = rw_const_f64(g, n->inputs[1], &cnt);
        if (!v)
            return 0;
        for (int64_t i = 0; i < cnt && i < IR_MAX_RANK; i++)
            axes[na++] = (int64_t)v[i];
        free(v);
    } else {
        const ir_attr *a = ir_attr_get(n, IR_ATTR_AXES);
        if (!a || a->n > IR_MAX_RANK)
            return 0;
        for (int i = 0; i < a->n; i++)
            axes[na++] = a->ints[i];
    }
    int reduced[IR_MAX_RANK] = {0};
    for (int i = 0; i < na; i++) {
        int a = rw_axis(axes[i], rank);
        if (a < 0)
            return 0;
        reduced[a] = 1;
    }
    if (na == 0)
        return 0;
    int64_t last = -1;
    for (int i = 0; i < rank; i++) {
        if (reduced[i])
            continue;
        if (p->ints[i] < last)
            return 0; /* the kept axes would come out in another order */
        last = p->ints[i];
    }
    for (int i = 0; i < na; i++)
        m->axes[i] = p->ints[rw_axis(axes[i], rank)];
    m->naxes = na;
    m->x = t->inputs[0];
    return 1;
}

static int rewrite_absorb(ir_graph *g, int ni, const void *mv)
{
    const absorb_match *m = mv;
    const ir_node *n = &g->nodes[ni];
    int in[2] = {m->x, -1}, nin = 1;
    ir_attr attrs[n->nattrs + 1];
    int nat = 0;
    for (int i = 0; i < n->nattrs; i++)
        if (n->attrs[i].id != IR_ATTR_AXES)
            attrs[nat++] = n->attrs[i];
    if (m->axes_input) {
        if ((in[1] = rw_const_i64(g, n->name, "/axes", m->naxes, m->axes)) < 0)
            return -1;
        nin = 2;
    } else {
        attrs[nat] = rw_attr_ints(g, IR_ATTR_AXES, m->naxes, m->axes);
        if (!attrs[nat++].ints)
            return -1;
    }
    n = &g->nodes[ni];
    int out = n->outputs[0];
    return rw_set_node(g, ni, n->op, n->name, n->op_type, nin, in, 1, &out, nat, attrs);
}

/* A node that passes its input through unchanged: its output reads the input. */
static int match_noop(const ir_graph *g, const ir_node *n, void *mv, char *why, size_t nwhy)
{
    (void)why, (void)nwhy;
    int x = noop_input(g, n);
    if (x < 0)
        x = identity_operand(g, n);
    if (x < 0 || rw_is_graph_output(g, n->outputs[0]))
        return 0;
    *(int *)mv = x;
    return 1;
}

static int rewrite_noop(ir_graph *g, int ni, const void *mv)
{
    rw_replace_uses(g, g->nodes[ni].outputs[0], *(const int *)mv);
    return 0;
}

typedef struct {
    view w; /* the Linear's output rows, as a view of Linear(S) */
} sink_match;

/* Whether a leading dimension of w holds the images (a sub-axis whose size
 * depends on the batch) followed by tokens (static sub-axes inside it): a
 * window partition, each image split into windows.  (Tokens before the
 * images, as in a sequence-first layout flattened, are no windows.) */
static int tokens_into_images(const view *w)
{
    for (int i = 0; i + 1 < w->rank; i++) {
        int images = 0;
        for (int j = 0; j < w->nsub[i]; j++) {
            if (images && w->sub[i][j].size.e == 0 && w->sub[i][j].size.k > 1)
                return 1;
            images |= w->sub[i][j].size.e > 0;
        }
    }
    return 0;
}

/* Whether view w of x permutes whole rows of its root (the last axis kept,
 * contiguous) without partitioning images into windows: what
 * rows-through-linear and rows-through-elementwise move below a node. */
static int row_permutation(const ir_graph *g, int x, const view *w)
{
    const ir_value *s = &g->values[w->root];
    int last = w->rank - 1;
    return w->root != x && s->rank >= 1 && last >= 0 && !view_is_reshape(g, w) && view_is_permutation(g, w) &&
           !tokens_into_images(w) && w->nsub[last] == 1 && ir_dim_eq(w->sub[last][0].stride, ir_dim_const(1)) &&
           ir_dim_eq(w->sub[last][0].size, s->dims[s->rank - 1]);
}

/* Linear(rows permuted out of S) -> the permutation applied to Linear(S),
 * unless the permutation partitions the images into windows: the Linear then
 * computes its rows in window order, as a window attention reads them. */
static int match_sink(const ir_graph *g, const ir_node *n, void *mv, char *why, size_t nwhy)
{
    sink_match *m = mv;
    ir_linear lv;
    if (!ir_linear_of(n, &lv, why, nwhy) || lv.residual >= 0 || lv.gate >= 0)
        return 0;
    int x = lv.x;
    view w;
    if (!rw_producer(g, x) || !view_is_movement(g, rw_producer(g, x)) || view_trace(g, x, -1, &w, why, nwhy))
        return 0;
    const ir_value *s = &g->values[w.root], *wt = &g->values[lv.w];
    int last = w.rank - 1;
    if (wt->rank != 2 || !row_permutation(g, x, &w))
        return 0;
    ir_dim K = wt->dims[0], N = wt->dims[1];
    m->w = w;
    m->w.sub[last][0].size = N;
    for (int i = 0; i < last; i++)
        for (int j = 0; j < m->w.nsub[i]; j++) { /* strides in rows of K -> rows of N */
            ir_dim t = m->w.sub[i][j].stride;
            if (t.e != 0 || K.k <= 0 || t.k % K.k != 0)
                return 0;
            m->w.sub[i][j].stride = ir_dim_const(t.k / K.k * N.k);
        }
    ir_dim rows[IR_MAX_RANK]; /* the shape rewrite_sink gives Linear(S) */
    memcpy(rows, s->dims, sizeof rows);
    rows[s->rank - 1] = N;
    return view_can_emit(&m->w, s->rank, rows);
}

static int rewrite_sink(ir_graph *g, int ni, const void *mv)
{
    view w = ((const sink_match *)mv)->w;
    const ir_node *n = &g->nodes[ni];
    ir_linear v;
    ir_node_spec spec;
    char why[96];
    if (!ir_linear_of(n, &v, why, sizeof why))
        return -1;
    int y = v.y, src = w.root;
    ir_dim N = g->values[v.w].dims[1];
    int rows = rw_new_value(g, n->name, "/rows", g->values[y].dtype);
    if (rows < 0)
        return -1;
    n = &g->nodes[ni];
    v.x = src;
    v.y = rows;
    ir_linear_spec(&v, &spec);
    if (rw_set_spec(g, ni, n->name, n->op_type, &spec))
        return -1;
    w.root = rows;
    const ir_value *s = &g->values[src];
    g->values[rows].rank = s->rank; /* the shape view_emit needs; rw_finish infers it again */
    memcpy(g->values[rows].dims, s->dims, sizeof s->dims);
    g->values[rows].dims[s->rank - 1] = N;
    return view_emit(g, &w, y, g->nodes[ni].name);
}

typedef struct {
    view w; /* the permuted operand, as a view of its root */
    int k;  /* which operand it is */
} ew_sink_match;

/* An element-wise op on rows permuted out of S, its other operands
 * constants that vary along the last axis at most (a bias, a quantization's
 * scale and zero point) -> the op on S, the permutation after it; a
 * sequence-first model's projection (Transpose after the Linear) then meets
 * its head split in one view across what a quantized export puts between
 * (FakeQuant, the bias Add, FakeQuant; DynamicFakeQuant, whose range over the
 * whole tensor a permutation leaves as it is). */
static int match_ew_sink(const ir_graph *g, const ir_node *n, void *mv, char *why, size_t nwhy)
{
    ew_sink_match *m = mv;
    /* element-wise, or DynamicFakeQuant: the range of the whole tensor is the permutation's */
    if ((!ir_ew(n->op) && n->op != IR_OP_DYNAMIC_FAKE_QUANT) || n->noutputs != 1 || n->outputs[0] < 0 ||
        rw_is_graph_output(g, n->outputs[0]))
        return 0;
    m->k = -1;
    for (int k = 0; k < n->ninputs; k++) {
        if (n->inputs[k] < 0)
            return 0;
        if (!rw_is_const(g, n->inputs[k]) && (m->k >= 0 || (m->k = k) < 0))
            return 0;
    }
    int x = m->k >= 0 ? n->inputs[m->k] : -1;
    const ir_node *p = x >= 0 ? rw_producer(g, x) : NULL;
    if (!p || !view_is_movement(g, p) || rw_uses(g, x) != 1 || view_trace(g, x, -1, &m->w, why, nwhy) ||
        !row_permutation(g, x, &m->w))
        return 0;
    const ir_value *s = &g->values[m->w.root], *xv = &g->values[x], *y = &g->values[n->outputs[0]];
    if (xv->rank != y->rank)
        return 0;
    for (int i = 0; i < y->rank; i++)
        if (!ir_dim_eq(xv->dims[i], y->dims[i]))
            return 0; /* the operand itself broadcast */
    for (int k = 0; k < n->ninputs; k++) {
        const ir_value *c = &g->values[n->inputs[k]];
        if (k == m->k)
            continue;
        if (c->rank > s->rank || (c->rank >= 1 && !ir_dim_eq(c->dims[c->rank - 1], ir_dim_const(1)) &&
                                   !ir_dim_eq(c->dims[c->rank - 1], s->dims[s->rank - 1])))
            return 0;
        for (int i = 0; i + 1 < c->rank; i++)
            if (!ir_dim_eq(c->dims[i], ir_dim_const(1)))
                return 0;
    }
    return view_can_emit(&m->w, s->rank, s->dims);
}

static int rewrite_ew_sink(ir_graph *g, int ni, const void *mv)
{
    const ew_sink_match *m = mv;
    view w = m->w;
    const ir_node *n = &g->nodes[ni];
    int y = n->outputs[0], in[8];
    if (n->ninputs > 8)
        return -1;
    memcpy(in, n->inputs, sizeof(int) * (size_t)n->ninputs);
    in[m->k] = w.root;
    int rows = rw_new_value(g, n->name, "/rows", g->values[y].dtype);
    if (rows < 0)
        return -1;
    n = &g->nodes[ni];
    if (rw_set_node(g, ni, n->op, n->name, n->op_type, n->ninputs, in, 1, &rows, n->nattrs, n->attrs))
        return -1;
    const ir_value *s = &g->values[w.root];
    g->values[rows].rank = s->rank; /* the shape view_emit needs; rw_finish infers it again */
    memcpy(g->values[rows].dims, s->dims, sizeof s->dims);
    w.root = rows;
    return view_emit(g, &w, y, g->nodes[ni].name);
}

typedef struct {
    enum { CHAIN_IDENTITY, CHAIN_IDENTITY_OUTPUT, CHAIN_RESHAPE } kind;
    int root; /* the value the chain reads */
} chain_match;

/* Chains of data movement: identity -> gone; a plain reshape -> one Reshape. */
static int match_chain(const ir_graph *g, const ir_node *n, void *mv, char *why, size_t nwhy)
{
    chain_match *m = mv;
    if (!view_is_movement(g, n) || n->noutputs != 1 || n->inputs[0] < 0)
        return 0;
    int y = n->outputs[0], x = n->inputs[0];
    view w;
    if (view_trace(g, y, -1, &w, why, nwhy))
        return 0;
    m->root = w.root;
    if (view_is_identity(g, &w)) {
        m->kind = rw_is_graph_output(g, y) ? CHAIN_IDENTITY_OUTPUT : CHAIN_IDENTITY;
        const ir_node *p = rw_producer(g, w.root); /* an output keeps its name: w.root's producer computes it */
        return m->kind == CHAIN_IDENTITY || (p && p->noutputs == 1 && !rw_is_graph_output(g, w.root));
    }
    m->kind = CHAIN_RESHAPE;
    if (rw_is_graph_output(g, y) || w.root == x || !view_is_reshape(g, &w))
        return 0; /* a single op already, or more than a reshape */
    return rw_shape_expressible(g->values[y].rank, g->values[y].dims);
}

/* Graph output y (of node ni) equals value r: r's producer computes y
 * directly (keeping the output's name) and ni loses its output. */
static int produce_directly(ir_graph *g, int ni, int r)
{
    const ir_node *p = rw_producer(g, r);
    int y = g->nodes[ni].outputs[0];
    int dead = rw_new_value(g, g->nodes[ni].name, "/unused", g->values[y].dtype);
    if (dead < 0)
        return -1;
    for (int i = 0; i < g->nnodes; i++) /* readers of r read y, which is the same tensor */
        for (int k = 0; k < g->nodes[i].ninputs; k++)
            if (g->nodes[i].inputs[k] == r)
                g->nodes[i].inputs[k] = y;
    ir_node *nn = &g->nodes[ni];
    nn->outputs[0] = dead;
    g->values[dead].producer = ni;
    ir_node *pn = &g->nodes[rw_index(g, p)];
    pn->outputs[0] = y;
    g->values[y].producer = rw_index(g, p);
    g->values[r].producer = -1;
    return 0;
}

static int rewrite_chain(ir_graph *g, int ni, const void *mv)
{
    const chain_match *m = mv;
    const ir_node *n = &g->nodes[ni];
    int y = n->outputs[0];
    if (m->kind == CHAIN_IDENTITY_OUTPUT)
        return produce_directly(g, ni, m->root);
    if (m->kind == CHAIN_IDENTITY) {
        rw_replace_uses(g, y, m->root);
        return 0;
    }
    const ir_value *v = &g->values[y];
    int shape = rw_shape_const(g, n->name, v->rank, v->dims);
    if (shape < 0)
        return -1;
    int in[2] = {m->root, shape};
    n = &g->nodes[ni];
    return rw_set_node(g, ni, IR_OP_RESHAPE, n->name, n->op_type, 2, in, 1, &y, 0, NULL);
}

/* Tile(x, repeats) that repeats only axes of size 1 (a repeat other than 1
 * on an axis of x of size 1) is Expand(x, repeats), which the backends run:
 * SigLIP's attention-pool head tiles its probe [1, 1, D] over the batch. */
static int match_tile_expand(const ir_graph *g, const ir_node *n, void *mv, char *why, size_t nwhy)
{
    (void)mv;
    const ir_value *x = &g->values[n->inputs[0]], *rv = &g->values[n->inputs[1]];
    int64_t r[IR_MAX_RANK];
    int cnt = rv->symval ? rv->nsymval : rw_const_ints(g, n, 1, r, IR_MAX_RANK);
    if (cnt != x->rank || rv->rank != 1 || (!rv->symval && rv->kind != IR_VAL_CONST)) {
        snprintf(why, nwhy, "the repeats are not known, one per axis");
        return -1;
    }
    for (int i = 0; i < x->rank; i++) {
        ir_dim ri = rv->symval ? rv->symval[i] : ir_dim_const(r[i]);
        if (!ir_dim_eq(ri, ir_dim_const(1)) && !ir_dim_eq(x->dims[i], ir_dim_const(1))) {
            char d[48], t[48];
            snprintf(why, nwhy, "axis %d, of size %s, is repeated %s times: not a broadcast", i,
                     ir_dim_str(x->dims[i], d, sizeof d), ir_dim_str(ri, t, sizeof t));
            return -1;
        }
    }
    return 1;
}

static int rewrite_tile_expand(ir_graph *g, int ni, const void *mv)
{
    (void)mv;
    const ir_node *n = &g->nodes[ni];
    int in[2] = {n->inputs[0], n->inputs[1]}, out = n->outputs[0];
    return rw_set_node(g, ni, IR_OP_EXPAND, n->name, n->op_type, 2, in, 1, &out, 0, NULL);
}

/* LayerNormalization's Mean and InvStdDev and Dropout's mask, when nothing
 * reads them, are not computed. */
static int match_unread_outputs(const ir_graph *g, const ir_node *n, void *mv, char *why, size_t nwhy)
{
    (void)mv, (void)why, (void)nwhy;
    if ((n->op != IR_OP_LAYERNORM && n->op != IR_OP_DROPOUT) || n->noutputs < 2)
        return 0;
    for (int k = 1; k < n->noutputs; k++)
        if (n->outputs[k] >= 0 && rw_uses(g, n->outputs[k]) > 0)
            return 0;
    return 1;
}

static int rewrite_unread_outputs(ir_graph *g, int ni, const void *mv)
{
    (void)mv;
    ir_node *n = &g->nodes[ni];
    for (int k = 1; k < n->noutputs; k++)
        if (n->outputs[k] >= 0)
            g->values[n->outputs[k]].producer = -1;
    n->noutputs = 1;
    return 0;
}

/* Tried in this order at each node. */
static const rw_rule rules[] = {
    {.name = "no-op", .anchor = RW_ANY_OP, .size = sizeof(int), .canonical = 1, .match = match_noop,
     .rewrite = rewrite_noop},
    {.name = "view-chain", .anchor = RW_ANY_OP, .size = sizeof(chain_match), .canonical = 1, .match = match_chain,
     .rewrite = rewrite_chain},
    {.name = "transpose-into-reduction", .anchor = RW_ANY_OP, .size = sizeof(absorb_match), .canonical = 1,
     .match = match_absorb, .rewrite = rewrite_absorb},
    {.name = "rows-through-linear", .anchor = IR_OP_LINEAR, .size = sizeof(sink_match), .canonical = 1,
     .match = match_sink, .rewrite = rewrite_sink},
    {.name = "rows-through-elementwise", .anchor = RW_ANY_OP, .size = sizeof(ew_sink_match), .canonical = 1,
     .match = match_ew_sink, .rewrite = rewrite_ew_sink},
    {.name = "unread-outputs", .anchor = RW_ANY_OP, .canonical = 1, .match = match_unread_outputs,
     .rewrite = rewrite_unread_outputs},
    {.name = "tile-as-expand", .anchor = IR_OP_TILE, .canonical = 1, .match = match_tile_expand,
     .rewrite = rewrite_tile_expand},
};

int pass_simplify(ir_graph *g, vitc_diag *d) { return RW_APPLY(g, rules, d); }
