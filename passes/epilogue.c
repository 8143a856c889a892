/* epilogue.c: fuse-epilogue, what follows a Linear becomes part of it:
 * its activation (Gelu exact or tanh, QuickGelu, Relu, Clip(0, 6) = ReLU6), then a
 * residual Add of a tensor of the Linear's own shape, in that order, as
 * ops.def specifies: y = act(x @ W + bias) + residual. */
#include "passes/rewrite.h"

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


static int same_shape(const ir_value *a, const ir_value *b)
{
    if (a->rank != b->rank || a->dtype != b->dtype)
        return 0;
    for (int i = 0; i < a->rank; i++)
        if (!ir_dim_eq(a->dims[i], b->dims[i]))
            return 0;
    return 1;
}

typedef struct {
    const ir_node *user; /* the activation or the residual Add */
    int act;             /* ir_act the Linear gets */
    int residual;        /* the Add's other input, or -1 */
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
    if (!ir_linear_of(l, &v, why, sizeof why) || v.residual >= 0)
        return NULL; /* the residual comes last: nothing more fuses */
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
    m->residual = -1;
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
    return 1;
}

#undef MISS

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
    snprintf(op_type, sizeof op_type, "%s%s", l->op_type, m->residual >= 0 ? "+Add" : ir_act_label(m->act));
    v.residual = m->residual;
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
};

int pass_fuse_epilogue(ir_graph *g, vitc_diag *d) { return RW_APPLY(g, rules, d); }
