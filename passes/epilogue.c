/* epilogue.c: fuse-epilogue, what follows a Linear becomes part of it:
 * its activation (Gelu exact or tanh, Relu, Clip(0, 6) = ReLU6), then a
 * residual Add of a tensor of the Linear's own shape, in that order, as
 * ops.def specifies: y = act(x @ W + bias) + residual. */
#include "passes/rewrite.h"

#include <string.h>

enum { ACT_NONE, ACT_GELU, ACT_GELU_TANH, ACT_RELU, ACT_RELU6 };

/* Clip's bounds (optional constant inputs); 0 if they are not constants. */
static int clip_bounds(const ir_graph *g, const ir_node *n, double *lo, double *hi)
{
    *lo = -1e300;
    *hi = 1e300;
    return (ir_input(n, 1) < 0 || rw_scalar(g, n->inputs[1], lo)) && (ir_input(n, 2) < 0 || rw_scalar(g, n->inputs[2], hi));
}

/* The activation code of n applied to the Linear output; -1 if n is no
 * activation, -2 (with why) for a near miss. */
static int activation_of(const ir_graph *g, const ir_node *n, char *why, size_t nwhy)
{
    switch (n->op) {
    case IR_OP_GELU: {
        const ir_attr *a = ir_attr_get(n, IR_ATTR_APPROXIMATE);
        return a && a->kind == IR_AT_STRING && strcmp(a->s, "tanh") == 0 ? ACT_GELU_TANH : ACT_GELU;
    }
    case IR_OP_RELU:
        return ACT_RELU;
    case IR_OP_CLIP: {
        double lo, hi;
        if (!clip_bounds(g, n, &lo, &hi)) {
            snprintf(why, nwhy, "Clip's bounds are not constants");
            return -2;
        }
        if (lo == 0 && hi == 6)
            return ACT_RELU6;
        if (lo == 0 && hi >= 1e300)
            return ACT_RELU;
        snprintf(why, nwhy, "Clip's bounds are [%g, %g], not [0, 6] (ReLU6)", lo, hi);
        return -2;
    }
    default:
        return -1;
    }
}

static const char *act_name(int a)
{
    static const char *const names[] = {"", "+Gelu", "+Gelu(tanh)", "+Relu", "+ReLU6"};
    return names[a];
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

/* linear_act = act(Linear(x, W, b)); linear_res = Add(Linear(x, W, b), r) | Add(r, Linear(..)) */
static int fuse_at(ir_graph *g, int li)
{
    const ir_node *l = &g->nodes[li];
    int y = l->outputs[0], has_res = ir_input(l, 3) >= 0;
    int64_t act = ir_attr_int(l, IR_ATTR_ACTIVATION, 0);
    if (has_res)
        return 0;
    const ir_node *u = rw_only_user(g, y);
    char why[256];
    if (!u) {
        const ir_node *users[2];
        if (!rw_is_graph_output(g, y) && rw_users(g, y, users, 2) > 1) {
            int a = -1;
            for (int k = 0; k < 2 && a < 0; k++)
                a = activation_of(g, users[k], why, sizeof why);
            if (a >= 0 || users[0]->op == IR_OP_ADD || users[1]->op == IR_OP_ADD)
                rw_miss(g, l, "the Linear's output has %d readers, so its epilogue stays separate", rw_uses(g, y));
        }
        return 0;
    }
    int in[4] = {l->inputs[0], l->inputs[1], ir_input(l, 2), -1};
    char op_type[128];
    int a = activation_of(g, u, why, sizeof why);
    if (a == -2) {
        rw_miss(g, l, "%s", why);
        return 0;
    }
    if (a >= 0) {
        if (act != ACT_NONE)
            return 0;
        snprintf(op_type, sizeof op_type, "%s%s", l->op_type, act_name(a));
        ir_attr at = rw_attr_int(IR_ATTR_ACTIVATION, a);
        int out = u->outputs[0];
        if (rw_set_node(g, rw_index(g, u), IR_OP_LINEAR, l->name, op_type, 3, in, 1, &out, 1, &at))
            return -1;
        rw_hit();
        return 1;
    }
    if (u->op != IR_OP_ADD)
        return 0;
    int r = rw_other_input(u, y);
    if (r == y) {
        rw_miss(g, l, "the residual Add adds the Linear's output to itself");
        return 0;
    }
    if (!same_shape(&g->values[r], &g->values[y])) {
        char a1[128], a2[128];
        rw_miss(g, l, "the Add's other input %s does not have the Linear's shape %s (only a full residual is fused)",
                ir_value_type_str(&g->values[r], a1, sizeof a1), ir_value_type_str(&g->values[y], a2, sizeof a2));
        return 0;
    }
    in[3] = r;
    snprintf(op_type, sizeof op_type, "%s+Add", l->op_type);
    ir_attr at = rw_attr_int(IR_ATTR_ACTIVATION, act);
    int out = u->outputs[0];
    if (rw_set_node(g, rw_index(g, u), IR_OP_LINEAR, l->name, op_type, 4, in, 1, &out, act ? 1 : 0, &at))
        return -1;
    rw_hit();
    return 1;
}

int pass_fuse_epilogue(ir_graph *g, vitc_diag *d)
{
    int changed = 0, again = 1;
    while (again) {
        again = 0;
        for (int i = 0; i < g->nnodes; i++) {
            if (g->nodes[i].op != IR_OP_LINEAR)
                continue;
            int r = fuse_at(g, i);
            if (r < 0)
                return vitc_error(d, VITC_INTERNAL, &g->nodes[i], "out of memory");
            if (r > 0) {
                int st = pass_dce(g, d); /* the fused Linear is dead now; users are counted again */
                if (st)
                    return st;
                again = changed = 1;
                break;
            }
        }
    }
    return changed ? rw_finish(g, d) : VITC_OK;
}
