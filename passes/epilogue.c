/* epilogue.c: fuse-epilogue, what follows a Linear becomes part of it:
 * its activation (Gelu exact or tanh, QuickGelu, SiLU, Relu, Clip(0, 6) =
 * ReLU6), then the multiplication by a gate (a gated MLP's other
 * projection, SwiGLU's and GeGLU's) or a residual Add of a tensor of the
 * Linear's own shape, in that order, as ops.def specifies:
 * y = act(x @ W + bias) * gate + residual.  A gated MLP whose two
 * projections are one packed Linear split in halves becomes two Linears
 * first (glu-split), so that each half's epilogue is its own. */
#include "passes/rewrite.h"

#include <stdlib.h>
#include <string.h>

/* Clip's bounds (optional constant inputs); 0 if they are not constants. */
static int clip_bounds(const ir_graph *g, const ir_node *n, double *lo, double *hi)
{
    *lo = -1e300;
    *hi = 1e300;
    return (ir_input(n, 1) < 0 || rw_scalar(g, n->inputs[1], lo)) && (ir_input(n, 2) < 0 || rw_scalar(g, n->inputs[2], hi));
}

/* The activation n applies to the Linear output; -1 if n is no activation,
 * -2 (with why) for a near miss. */
static int activation_of(const ir_graph *g, const ir_node *n, char *why, size_t nwhy)
{
    if (n->op == IR_OP_GELU) {
        ir_act a = ir_gelu_act(n);
        if (a != IR_ACT_NONE)
            return a;
        snprintf(why, nwhy, "the Gelu's approximation is neither \"none\" nor \"tanh\"");
        return -2;
    }
    if (n->op == IR_OP_RELU)
        return IR_ACT_RELU;
    if (n->op == IR_OP_QUICK_GELU)
        return IR_ACT_QUICK_GELU;
    if (n->op == IR_OP_SWISH) {
        double alpha = ir_attr_float(n, IR_ATTR_ALPHA, 1.0f);
        if (alpha == 1)
            return IR_ACT_SILU;
        if ((float)alpha == 1.702f)
            return IR_ACT_QUICK_GELU;
        snprintf(why, nwhy, "Swish's alpha is %g, not 1 (SiLU) or 1.702 (QuickGELU)", alpha);
        return -2;
    }
    if (n->op != IR_OP_CLIP)
        return -1;
    double lo, hi;
    if (!clip_bounds(g, n, &lo, &hi)) {
        snprintf(why, nwhy, "Clip's bounds are not constants");
        return -2;
    }
    if (lo == 0 && hi == 6)
        return IR_ACT_RELU6;
    if (lo == 0 && hi >= 1e300)
        return IR_ACT_RELU;
    snprintf(why, nwhy, "Clip's bounds are [%g, %g], not [0, 6] (ReLU6)", lo, hi);
    return -2;
}


static int same_shape(const ir_value *a, const ir_value *b) { return a->dtype == b->dtype && ir_same_shape(a, b); }

typedef struct {
    const ir_node *user; /* the activation, the gate's Mul or the residual Add */
    int act;             /* ir_act the Linear gets */
    int residual;        /* the Add's other input, or -1 */
    int gate;            /* the Mul's other input, or -1 */
} epi_match;

#define MISS(...) return (snprintf(why, nwhy, __VA_ARGS__), -1)

/* The only reader of a Linear without residual, or NULL; for a Linear whose
 * output has several readers of which one is an epilogue (wanted: an
 * activation, or an Add when want_add), *miss is set. */
static const ir_node *epilogue_user(const ir_graph *g, const ir_node *l, int want_add, int *miss)
{
    int y = l->outputs[0];
    const ir_node *u = rw_only_user(g, y), *users[2];
    char why[256];
    ir_linear v;
    *miss = 0;
    if (!ir_linear_of(l, &v, why, sizeof why) || v.residual >= 0 || v.gate >= 0)
        return NULL; /* the residual comes last, the gate after the activation: nothing more fuses */
    if (u || rw_is_graph_output(g, y) || rw_users(g, y, users, 2) < 2)
        return u;
    for (int k = 0; k < 2; k++)
        *miss |= want_add ? users[k]->op == IR_OP_ADD : activation_of(g, users[k], why, sizeof why) >= 0;
    return NULL;
}

/* linear_act = act(Linear(x, W, b)), act one of ir_act */
static int match_activation(const ir_graph *g, const ir_node *l, void *mv, char *why, size_t nwhy)
{
    epi_match *m = mv;
    int miss;
    const ir_node *u = epilogue_user(g, l, 0, &miss);
    if (miss)
        MISS("the Linear's output has %d readers, so its epilogue stays separate", rw_uses(g, l->outputs[0]));
    if (!u || (m->act = activation_of(g, u, why, nwhy)) == -1)
        return 0;
    if (m->act == -2)
        return -1;
    ir_linear v;
    if (!ir_linear_of(l, &v, why, nwhy) || v.act != IR_ACT_NONE)
        return 0; /* one activation per Linear */
    m->user = u;
    m->residual = m->gate = -1;
    return 1;
}

/* linear_res = Add(Linear(x, W, b), r) | Add(r, Linear(x, W, b)), r of the Linear's shape */
static int match_residual(const ir_graph *g, const ir_node *l, void *mv, char *why, size_t nwhy)
{
    epi_match *m = mv;
    int miss, y = l->outputs[0];
    const ir_node *u = epilogue_user(g, l, 1, &miss);
    if (miss)
        MISS("the Linear's output has %d readers, so its epilogue stays separate", rw_uses(g, y));
    if (!u || !pat_with(g, u->outputs[0], IR_OP_ADD, y, &m->residual))
        return 0;
    if (m->residual == y)
        MISS("the residual Add adds the Linear's output to itself");
    if (!same_shape(&g->values[m->residual], &g->values[y])) {
        char a1[128], a2[128];
        MISS("the Add's other input %s does not have the Linear's shape %s (only a full residual is fused)",
             ir_value_type_str(&g->values[m->residual], a1, sizeof a1), ir_value_type_str(&g->values[y], a2, sizeof a2));
    }
    ir_linear v;
    if (!ir_linear_of(l, &v, why, nwhy))
        return 0;
    m->user = u;
    m->act = v.act;
    m->gate = -1;
    return 1;
}

/* A Linear without activation, gate or residual, whose output is read only by n. */
static int plain_linear_read_by(const ir_graph *g, int y, const ir_node *n)
{
    const ir_node *p = rw_producer(g, y);
    ir_linear v;
    char why[96];
    return p && ir_linear_of(p, &v, why, sizeof why) && v.act == IR_ACT_NONE && v.residual < 0 && v.gate < 0 &&
           rw_only_user(g, y) == n && !rw_is_graph_output(g, y);
}

/* linear_gated = Mul(Linear(x, W, b), g) | Mul(g, Linear(...)), g computed
 * and of the Linear's shape: a gated MLP, g its other projection after the
 * activation.  Where both operands are Linears, the one without an
 * activation takes the Mul (the other keeps its activation). */
static int match_gate(const ir_graph *g, const ir_node *l, void *mv, char *why, size_t nwhy)
{
    epi_match *m = mv;
    ir_linear v;
    int y = l->outputs[0];
    if (!ir_linear_of(l, &v, why, nwhy) || v.residual >= 0 || v.gate >= 0)
        return 0;
    const ir_node *u = rw_only_user(g, y);
    if (!u || u->op != IR_OP_MUL || u->ninputs != 2 || rw_is_graph_output(g, y))
        return 0;
    int other = rw_other_input(u, y);
    if (other < 0 || other == y || rw_is_const(g, other) || !same_shape(&g->values[other], &g->values[y]) ||
        !same_shape(&g->values[u->outputs[0]], &g->values[y]))
        return 0; /* a scale (layer scale: batchnorm.c) or a broadcast product, not a gate */
    if (v.act != IR_ACT_NONE && plain_linear_read_by(g, other, u))
        return 0; /* the other projection takes it */
    m->user = u;
    m->act = v.act;
    m->residual = -1;
    m->gate = other;
    return 1;
}

/* glu = act(a) * b with [a | b] = Split(Linear(x, W, b)) in two halves along
 * the last axis (either half activated): the two halves become two Linears. */
typedef struct {
    const ir_node *split;
    int64_t N;    /* the width of each half */
} glu_match;

static int match_glu(const ir_graph *g, const ir_node *l, void *mv, char *why, size_t nwhy)
{
    glu_match *m = mv;
    ir_linear v;
    int y = l->outputs[0];
    if (!ir_linear_of(l, &v, why, nwhy) || v.act != IR_ACT_NONE || v.residual >= 0 || v.gate >= 0 ||
        !rw_is_const(g, v.w) || (v.bias >= 0 && !rw_is_const(g, v.bias)) || g->values[v.w].dtype != IR_F32)
        return 0;
    const ir_node *s = rw_only_user(g, y);
    const ir_value *yv = &g->values[y];
    if (!s || s->op != IR_OP_SPLIT || s->noutputs != 2 || rw_is_graph_output(g, y) ||
        rw_axis(ir_attr_int(s, IR_ATTR_AXIS, 0), yv->rank) != yv->rank - 1)
        return 0;
    int64_t N2 = g->values[v.w].dims[1].k;
    for (int k = 0; k < 2; k++) {
        const ir_value *o = &g->values[s->outputs[k]];
        if (s->outputs[k] < 0 || o->rank != yv->rank || o->dims[o->rank - 1].e || 2 * o->dims[o->rank - 1].k != N2)
            return 0;
    }
    for (int k = 0; k < 2; k++) { /* half k activated, then multiplied by the other half */
        int a = s->outputs[k], b = s->outputs[1 - k];
        const ir_node *act = rw_only_user(g, a), *mul = act ? rw_only_user(g, act->outputs[0]) : NULL;
        char sub[96];
        if (!act || activation_of(g, act, sub, sizeof sub) < 0 || !mul || mul->op != IR_OP_MUL ||
            rw_other_input(mul, act->outputs[0]) != b || rw_only_user(g, b) != mul || rw_is_graph_output(g, a) ||
            rw_is_graph_output(g, b) || rw_is_graph_output(g, act->outputs[0]))
            continue;
        m->split = s;
        m->N = N2 / 2;
        return 1;
    }
    return 0;
}

#undef MISS

/* Columns [c0, c0 + n) of the constant c ([K, N2], or [N2] when K is 0) as a new constant. */
static int columns(ir_graph *g, int c, int64_t K, int64_t N2, int64_t c0, int64_t n, const char *name,
                   const char *suffix)
{
    const float *src = g->values[c].data;
    float *f = malloc(sizeof(float) * (size_t)((K ? K : 1) * n + 1));
    if (!f)
        return -1;
    for (int64_t k = 0; k < (K ? K : 1); k++)
        memcpy(f + k * n, src + k * N2 + c0, sizeof(float) * (size_t)n);
    int64_t dims[2] = {K, n};
    int r = K ? rw_const_f32(g, name, suffix, 2, dims, f) : rw_const_f32(g, name, suffix, 1, dims + 1, f);
    free(f);
    return r;
}

/* The Linear computes the first half in its place, a new one the second half
 * in the Split's. */
static int rewrite_glu(ir_graph *g, int li, const void *mv)
{
    const glu_match *m = mv;
    char why[96];
    ir_linear v, h[2];
    if (!ir_linear_of(&g->nodes[li], &v, why, sizeof why))
        return -1;
    const char *name = g->nodes[li].name;
    char op_type[2][160];
    for (int k = 0; k < 2; k++)
        snprintf(op_type[k], sizeof op_type[k], "%s(half %d of 2)", g->nodes[li].op_type, k + 1);
    int64_t K = g->values[v.w].dims[0].k, N = m->N;
    int at[2] = {li, rw_index(g, m->split)}, outs[2] = {m->split->outputs[0], m->split->outputs[1]};
    for (int k = 0; k < 2; k++) {
        h[k] = ir_linear_make(v.x, columns(g, v.w, K, 2 * N, k * N, N, name, k ? "/weight_1" : "/weight_0"), outs[k]);
        h[k].bias = v.bias >= 0 ? columns(g, v.bias, 0, 2 * N, k * N, N, name, k ? "/bias_1" : "/bias_0") : -1;
        if (h[k].w < 0 || (v.bias >= 0 && h[k].bias < 0))
            return -1;
    }
    for (int k = 0; k < 2; k++) {
        ir_node_spec s;
        ir_linear_spec(&h[k], &s);
        if (rw_set_spec(g, at[k], name, op_type[k], &s))
            return -1;
    }
    return 0;
}

/* The Linear computes its epilogue too, in place of the epilogue's node. */
static int rewrite(ir_graph *g, int li, const void *mv)
{
    const epi_match *m = mv;
    const ir_node *l = &g->nodes[li];
    char op_type[128], why[96];
    ir_linear v;
    ir_node_spec s;
    if (!ir_linear_of(l, &v, why, sizeof why))
        return -1;
    snprintf(op_type, sizeof op_type, "%s%s", l->op_type,
             m->residual >= 0 ? "+Add" : m->gate >= 0 ? "+Mul" : ir_act_label(m->act));
    v.residual = m->residual;
    v.gate = m->gate;
    v.act = (ir_act)m->act;
    v.y = m->user->outputs[0];
    ir_linear_spec(&v, &s);
    return rw_set_spec(g, rw_index(g, m->user), l->name, op_type, &s);
}

static const rw_rule rules[] = {
    {.name = "linear-activation", .anchor = IR_OP_LINEAR, .size = sizeof(epi_match), .match = match_activation,
     .rewrite = rewrite},
    {.name = "linear-residual", .anchor = IR_OP_LINEAR, .size = sizeof(epi_match), .match = match_residual,
     .rewrite = rewrite},
    {.name = "linear-gate", .anchor = IR_OP_LINEAR, .size = sizeof(epi_match), .match = match_gate, .rewrite = rewrite},
    {.name = "glu-split", .anchor = IR_OP_LINEAR, .size = sizeof(glu_match), .match = match_glu, .rewrite = rewrite_glu},
};

int pass_fuse_epilogue(ir_graph *g, vitc_diag *d) { return RW_APPLY(g, rules, d); }
