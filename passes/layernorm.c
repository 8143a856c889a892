/* layernorm.c: fuse-layernorm, the decomposed normalisations become one node
 * that keeps their epsilon and axis: LayerNorm as TorchScript exports it at
 * opset < 17 (from opset 17 the exporters emit LayerNormalization
 * themselves), then RMSNorm (EVA02, SwiGLU ViTs, T5-style layers) as every
 * exporter writes it before opset 23's RMSNormalization.
 *
 * The LayerNorm rule's anchor is the ReduceMean computing the mean; a
 * ReduceMean that no Sub(x, mean) reads (a mean-pool) is not a candidate.
 * The RMSNorm rule's is the ReduceMean of the squares, and runs once every
 * LayerNorm has fused, so that it never takes a LayerNorm's tail. */
#include "passes/rewrite.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    const ir_node *mean, *sub, *square, *var, *add_eps, *sqrt, *norm, *mul, *add;
    int x, axis, gamma, beta;
    double eps;
} ln_match;

/* What tells the two normalisations apart after their means: what the
 * explanations call the parts, and whether a bias Add after the scale
 * belongs to the node (RMSNorm has none: such an Add stays). */
typedef struct {
    const char *var, *sd;
    int bias;
} norm_kind;
static const norm_kind ln_kind = {"the variance", "the standard deviation", 1};
static const norm_kind rms_kind = {"the mean of squares", "the root mean square", 0};

/* Axes of a ReduceMean (attribute or input) as the first of a trailing
 * range [axis, rank); -1 with the axes in text otherwise. */
static int trailing_axis(const ir_graph *g, const ir_node *n, int rank, char *text, size_t ntext)
{
    int64_t axes[IR_MAX_RANK];
    int na = 0;
    if (ir_input(n, 1) >= 0) {
        int64_t cnt;
        double *v = rw_const_f64(g, n->inputs[1], &cnt);
        if (!v || cnt > IR_MAX_RANK) {
            free(v);
            snprintf(text, ntext, "axes that are not a constant");
            return -1;
        }
        for (int64_t i = 0; i < cnt; i++)
            axes[na++] = (int64_t)v[i];
        free(v);
    } else {
        const ir_attr *a = ir_attr_get(n, IR_ATTR_AXES);
        for (int i = 0; a && i < a->n && i < IR_MAX_RANK; i++)
            axes[na++] = a->ints[i];
    }
    size_t off = (size_t)snprintf(text, ntext, "[");
    int seen[IR_MAX_RANK] = {0}, lo = rank;
    for (int i = 0; i < na; i++) {
        int a = rw_axis(axes[i], rank);
        if (off < ntext)
            off += (size_t)snprintf(text + off, ntext - off, "%s%lld", i ? "," : "", (long long)axes[i]);
        if (a < 0)
            return -1;
        seen[a] = 1;
        lo = a < lo ? a : lo;
    }
    if (off < ntext)
        snprintf(text + off, ntext - off, "]");
    if (na == 0)
        return -1;
    for (int i = lo; i < rank; i++)
        if (!seen[i])
            return -1;
    return lo;
}

/* The only reader of v if it has op (any of two); NULL otherwise. */
static const ir_node *only(const ir_graph *g, int v, ir_op a, ir_op b)
{
    const ir_node *u = rw_only_user(g, v);
    return u && (u->op == a || u->op == b) ? u : NULL;
}

/* A constant usable as Scale/B over the normalised dims [axis, rank) of x. */
static int affine_const(const ir_graph *g, int c, const ir_value *x, int axis)
{
    if (c < 0 || !rw_is_const(g, c) || g->values[c].dtype != x->dtype)
        return 0;
    const ir_value *v = &g->values[c];
    if (v->rank > x->rank)
        return 0;
    for (int i = 0; i < v->rank; i++) {
        int xi = x->rank - v->rank + i;
        if (xi < axis ? v->dims[i].k != 1 : !ir_dim_eq(v->dims[i], x->dims[xi]))
            return 0;
    }
    return 1;
}

#define MISS(...) return (snprintf(why, nwhy, __VA_ARGS__), -1)

/* m->axis from mean r (named what in the explanations) of the float32 m->x:
 * trailing, without the batch, keepdims; its axes as text in axes.  0, or -1
 * with why. */
static int normalised_axes(const ir_graph *g, ln_match *m, const ir_node *r, const char *what, char *axes, size_t na,
                           char *why, size_t nwhy)
{
    const ir_value *xv = &g->values[m->x];
    if (xv->dtype != IR_F32)
        MISS("only float32 normalisations are fused, this one is %s", ir_dtype_name(xv->dtype));
    if ((m->axis = trailing_axis(g, r, xv->rank, axes, na)) < 0)
        MISS("%s is over axes %s, not the trailing axes of a rank-%d input", what, axes, xv->rank);
    for (int i = m->axis; i < xv->rank; i++)
        if (xv->dims[i].e && xv->dims[i].k)
            MISS("the normalised axes include the batch");
    if (ir_attr_int(r, IR_ATTR_KEEPDIMS, 1) != 1)
        MISS("%s has keepdims=0", what);
    return 0;
}

/* From the mean of squares of d (m->var) on, for both normalisations:
 * Add(Mul(Div(d, Sqrt(Add(var, eps))), gamma), beta), the Mul optional, the
 * Add too and only where the kind has a bias.  m->norm, when set, is the division the caller found; else it is
 * the reader of d that divides it by the square root. */
static int match_tail(const ir_graph *g, ln_match *m, int d, const norm_kind *w, char *why, size_t nwhy)
{
    const ir_value *xv = &g->values[m->x];
    const ir_node *after = rw_only_user(g, m->var->outputs[0]);
    if (after && after->op == IR_OP_SQRT) {
        const ir_node *add = rw_only_user(g, after->outputs[0]);
        if (add && add->op == IR_OP_ADD)
            MISS("epsilon is added after the square root (sqrt(var) + eps), not inside it");
        MISS("there is no epsilon added to %s", w->var);
    }
    int var;
    if (!after || !pat_plus(g, after->outputs[0], &var, &m->eps) || var != m->var->outputs[0])
        MISS("%s is not followed by Add of a constant epsilon", w->var);
    m->add_eps = after;
    if (!(m->sqrt = only(g, after->outputs[0], IR_OP_SQRT, IR_OP_SQRT)))
        MISS("var + eps is not followed by Sqrt");
    int s = m->sqrt->outputs[0], num, den;
    if (!m->norm) {
        const ir_node *users[8];
        int nu = rw_users(g, d, users, 8);
        for (int i = 0; i < nu && i < 8 && !m->norm; i++)
            if (pat_divide(g, users[i]->outputs[0], &num, &den) && num == d && den == s)
                m->norm = users[i];
        if (!m->norm)
            MISS("x is not divided by %s", w->sd);
    }
    if (!pat_divide(g, m->norm->outputs[0], &num, &den) || num != d || den != s)
        MISS(m->norm->op == IR_OP_DIV ? "x - mean is divided by something other than the standard deviation"
                                      : "x - mean is multiplied by something other than 1 / standard deviation");
    if (rw_uses(g, s) != 1)
        MISS("%s has other readers", w->sd);
    int y = m->norm->outputs[0], c;
    const ir_node *u = rw_only_user(g, y);
    if (u && pat_with(g, u->outputs[0], IR_OP_MUL, y, &c) && affine_const(g, c, xv, m->axis)) {
        m->mul = u;
        m->gamma = c;
        y = u->outputs[0];
        u = rw_only_user(g, y);
    }
    if (w->bias && u && pat_with(g, u->outputs[0], IR_OP_ADD, y, &c) && affine_const(g, c, xv, m->axis)) {
        m->add = u;
        m->beta = c;
    }
    return 1;
}

#undef MISS

/* layernorm = Add(Mul(Div(d, Sqrt(Add(ReduceMean(Pow(d, 2)), eps))), gamma), beta)
 *   d = Sub(x, ReduceMean(x))
 * Pow(d, 2) may be Mul(d, d); Div(d, s) may be Mul(d, Reciprocal(s)); Mul by
 * gamma and Add of beta take either operand order and are optional. */
static int match(const ir_graph *g, const ir_node *mean, void *bind, char *why, size_t nwhy)
{
    ln_match *m = bind;
    m->gamma = m->beta = -1;
    m->mean = mean;
    m->x = mean->inputs[0];
    int mv = mean->outputs[0];
    const ir_node *users[4];
    int nu = rw_users(g, mv, users, 4);
    for (int i = 0; i < nu && i < 4 && !m->sub; i++)
        if (users[i]->op == IR_OP_SUB && users[i]->inputs[0] == m->x && users[i]->inputs[1] == mv)
            m->sub = users[i];
    if (!m->sub)
        return 0; /* not a normalisation (e.g. a mean-pool) */
#define MISS(...) return (snprintf(why, nwhy, __VA_ARGS__), -1)
    const ir_value *xv = &g->values[m->x];
    char axes[96];
    if (normalised_axes(g, m, mean, "ReduceMean", axes, sizeof axes, why, nwhy))
        return -1;
    if (rw_uses(g, mv) != 1)
        MISS("the mean has %d readers besides the Sub", rw_uses(g, mv) - 1);
    int d = m->sub->outputs[0];
    nu = rw_users(g, d, users, 4);
    if (nu != 2 || rw_is_graph_output(g, d))
        MISS("x - mean has %d readers, not 2 (the square and the division)", nu);
    for (int i = 0; i < nu; i++) {
        const ir_node *u = users[i];
        int base;
        if (pat_square(g, u->outputs[0], &base) && base == d)
            m->square = u;
        else if ((u->op == IR_OP_DIV && u->inputs[0] == d) || u->op == IR_OP_MUL)
            m->norm = u;
        else if (u->op == IR_OP_POW)
            MISS("x - mean is raised to a power other than 2");
    }
    if (!m->square || !m->norm)
        MISS("x - mean is not both squared and divided by the standard deviation");
    if (!(m->var = only(g, m->square->outputs[0], IR_OP_REDUCE_MEAN, IR_OP_REDUCE_MEAN)))
        MISS("the square is not averaged by one ReduceMean");
    char axes2[96];
    if (trailing_axis(g, m->var, xv->rank, axes2, sizeof axes2) != m->axis ||
        ir_attr_int(m->var, IR_ATTR_KEEPDIMS, 1) != 1)
        MISS("the variance is over axes %s, the mean over %s", axes2, axes);
    return match_tail(g, m, d, &ln_kind, why, nwhy);
}

/* rmsnorm = Mul(Div(x, Sqrt(Add(ReduceMean(Pow(x, 2)), eps))), gamma)
 * Pow(x, 2) may be Mul(x, x); Div(x, s) may be Mul(x, Reciprocal(s)); the
 * Mul by gamma takes either operand order and is optional.  x may have other
 * readers (it is the residual stream). */
static int match_rms(const ir_graph *g, const ir_node *var, void *bind, char *why, size_t nwhy)
{
    ln_match *m = bind;
    m->gamma = m->beta = -1;
    m->var = var;
    if (!(m->square = pat_square(g, var->inputs[0], &m->x)))
        return 0; /* not a mean of squares */
    const ir_node *p = rw_def(g, m->x, IR_OP_SUB), *mean = p ? rw_def(g, p->inputs[1], IR_OP_REDUCE_MEAN) : NULL;
    if (mean && mean->inputs[0] == p->inputs[0])
        return 0; /* x - mean(x): a LayerNorm, explained by its own rule */
    char axes[96];
    if (normalised_axes(g, m, var, rms_kind.var, axes, sizeof axes, why, nwhy) ||
        match_tail(g, m, m->x, &rms_kind, why, nwhy) != 1)
        return -1;
    return 1;
}

#undef MISS

/* A constant of shape x.dims[axis:] with c's data (ones when c < 0). */
static int param(ir_graph *g, int c, const ir_value *x, int axis, const char *name, const char *suffix)
{
    int64_t dims[IR_MAX_RANK], n = 1;
    for (int i = axis; i < x->rank; i++)
        n *= (dims[i - axis] = x->dims[i].k);
    if (c >= 0 && g->values[c].rank == x->rank - axis)
        return c;
    float *f = malloc(sizeof(float) * (size_t)(n ? n : 1));
    if (!f)
        return -1;
    if (c >= 0)
        memcpy(f, g->values[c].data, sizeof(float) * (size_t)n);
    for (int64_t i = 0; c < 0 && i < n; i++)
        f[i] = 1;
    int r = rw_const_f32(g, name, suffix, x->rank - axis, dims, f);
    free(f);
    return r;
}

static int rewrite(ir_graph *g, int ni, const void *mv)
{
    const ln_match *m = mv;
    (void)ni; /* the anchor (a mean) is one of the nodes replaced */
    const ir_node *root = m->add ? m->add : m->mul ? m->mul : m->norm;
    int ri = rw_index(g, root), out = root->outputs[0];
    const char *name = rw_fused_name(g, m->mean ? m->mean : m->square, root);
    const ir_value xv = g->values[m->x];
    int centered = m->sub != NULL;
    ir_norm v = ir_norm_make(m->x, param(g, m->gamma, &xv, m->axis, name, "/scale"), out, m->axis - xv.rank,
                             (float)m->eps, centered);
    ir_node_spec spec;
    if (v.scale < 0 || (m->beta >= 0 && (v.bias = param(g, m->beta, &xv, m->axis, name, "/bias")) < 0))
        return -1;
    ir_norm_spec(&v, &spec);
    return rw_set_spec(g, ri, name, centered ? "LayerNorm(decomposed)" : "RMSNorm(decomposed)", &spec);
}

static const rw_rule ln_rules[] = {
    {.name = "layernorm", .anchor = IR_OP_REDUCE_MEAN, .size = sizeof(ln_match), .match = match, .rewrite = rewrite},
};
static const rw_rule rms_rules[] = {
    {.name = "rmsnorm", .anchor = IR_OP_REDUCE_MEAN, .size = sizeof(ln_match), .match = match_rms, .rewrite = rewrite},
};

int pass_fuse_layernorm(ir_graph *g, vitc_diag *d)
{
    int st = RW_APPLY(g, ln_rules, d);
    return st ? st : RW_APPLY(g, rms_rules, d);
}
