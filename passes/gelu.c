/* gelu.c: fuse-gelu, the GELU that TorchScript exports as arithmetic becomes
 * one Gelu node: the exact erf form (approximate "none") and the tanh
 * approximation (approximate "tanh") stay distinct.  Opset 20's Gelu is
 * already one node.  The anchor is the Erf (or Tanh). */
#include "passes/rewrite.h"

#include <math.h>
#include <string.h>

#define SQRT2 1.41421356237309504880
#define SQRT_2_OVER_PI 0.79788456080286535588

/* 1 if n computes x * 0.5 (or x / 2) with n's output read once. */
static int is_half_of(const ir_graph *g, const ir_node *n, int x)
{
    int o;
    double c;
    if (!n || !rw_scalar_operand(g, n, &o, &c) || o != x || rw_uses(g, n->outputs[0]) != 1)
        return 0;
    return (n->op == IR_OP_MUL && c == 0.5) || (n->op == IR_OP_DIV && n->inputs[0] == x && c == 2);
}

/* product = Mul(Mul(x, a), 0.5) | Mul(Mul(a, 0.5), x) | Mul(a, Mul(x, 0.5)), either operand order.
 * Returns the root node, or NULL with the reason. */
static const ir_node *half_x_times(const ir_graph *g, int a, int x, char *why, size_t nwhy)
{
    const ir_node *u1 = rw_only_user(g, a);
    if (!u1 || u1->op != IR_OP_MUL) {
        snprintf(why, nwhy, "1 + erf(...) is not multiplied (once) by x and 0.5");
        return NULL;
    }
    int o = rw_other_input(u1, a);
    double c;
    if (o == x) { /* (x * a) * 0.5 */
        const ir_node *u2 = rw_only_user(g, u1->outputs[0]);
        int oo;
        if (u2 && rw_scalar_operand(g, u2, &oo, &c) && oo == u1->outputs[0] &&
            ((u2->op == IR_OP_MUL && c == 0.5) || (u2->op == IR_OP_DIV && c == 2)))
            return u2;
        if (u2 && rw_scalar_operand(g, u2, &oo, &c) && oo == u1->outputs[0])
            snprintf(why, nwhy, "x * (1 + erf(...)) is scaled by %g, not 0.5", u2->op == IR_OP_DIV ? 1 / c : c);
        else
            snprintf(why, nwhy, "x * (1 + erf(...)) is not halved");
        return NULL;
    }
    if (rw_scalar(g, o, &c)) { /* (a * 0.5) * x */
        const ir_node *u2 = rw_only_user(g, u1->outputs[0]);
        if (c != 0.5) {
            snprintf(why, nwhy, "the product's constant is %g, not 0.5", c);
            return NULL;
        }
        if (u2 && u2->op == IR_OP_MUL && rw_other_input(u2, u1->outputs[0]) == x)
            return u2;
        snprintf(why, nwhy, "0.5 * (1 + erf(...)) is not multiplied by x");
        return NULL;
    }
    const ir_node *h = rw_producer(g, o);
    if (is_half_of(g, h, x)) /* a * (x * 0.5) */
        return u1;
    int oo;
    if (h && rw_scalar_operand(g, h, &oo, &c) && oo == x)
        snprintf(why, nwhy, "the product's constant is %g, not 0.5", h->op == IR_OP_DIV ? 1 / c : c);
    else
        snprintf(why, nwhy, "1 + erf(...) is multiplied by something other than x and 0.5");
    return NULL;
}

/* 1 + e, either order; the Add node or NULL. */
static const ir_node *one_plus(const ir_graph *g, int e)
{
    const ir_node *a = rw_only_user(g, e);
    double c;
    int o;
    return a && a->op == IR_OP_ADD && rw_scalar_operand(g, a, &o, &c) && o == e && c == 1 ? a : NULL;
}

/* gelu_erf = half_x_times(Add(Erf(Div(x, sqrt 2)), 1)); Div(x, sqrt 2) may be Mul(x, 1/sqrt 2) */
static const ir_node *match_erf(const ir_graph *g, const ir_node *erf, int *x, char *why, size_t nwhy)
{
    const ir_node *t = rw_producer(g, erf->inputs[0]);
    double c;
    if (!rw_scalar_operand(g, t, x, &c) || (t->op != IR_OP_DIV && t->op != IR_OP_MUL) ||
        (t->op == IR_OP_DIV && t->inputs[0] != *x)) {
        snprintf(why, nwhy, "Erf's input is not x / sqrt(2)");
        return NULL;
    }
    double divisor = t->op == IR_OP_DIV ? c : 1 / c;
    if (!rw_close(divisor, SQRT2, 1e-6)) {
        snprintf(why, nwhy, "Erf's input is x / %.7g, not x / sqrt(2)", divisor);
        return NULL;
    }
    if (rw_uses(g, erf->inputs[0]) != 1) {
        snprintf(why, nwhy, "x / sqrt(2) has other readers");
        return NULL;
    }
    const ir_node *a = one_plus(g, erf->outputs[0]);
    if (!a) {
        snprintf(why, nwhy, "Erf is not followed by Add of 1");
        return NULL;
    }
    return half_x_times(g, a->outputs[0], *x, why, nwhy);
}

/* cube = Pow(x, 3) | Mul(x, Mul(x, x)) | Mul(Mul(x, x), x); 1 if v is x^3. */
static int is_cube(const ir_graph *g, int v, int x)
{
    const ir_node *n = rw_producer(g, v);
    double e;
    if (!n || rw_uses(g, v) != 1)
        return 0;
    if (n->op == IR_OP_POW)
        return n->inputs[0] == x && rw_scalar(g, n->inputs[1], &e) && e == 3;
    if (n->op != IR_OP_MUL)
        return 0;
    int o = rw_other_input(n, x);
    const ir_node *sq = rw_def(g, o, IR_OP_MUL);
    return sq && sq->inputs[0] == x && sq->inputs[1] == x && rw_uses(g, o) == 1;
}

/* gelu_tanh = half_x_times(Add(Tanh(Mul(sqrt(2/pi), Add(x, Mul(0.044715, cube)))), 1)) */
static const ir_node *match_tanh(const ir_graph *g, const ir_node *th, int *x, char *why, size_t nwhy)
{
    const ir_node *m = rw_producer(g, th->inputs[0]);
    int s;
    double c1, c2;
    if (!rw_scalar_operand(g, m, &s, &c1) || m->op != IR_OP_MUL) {
        snprintf(why, nwhy, "Tanh's input is not a constant times (x + 0.044715 x^3)");
        return NULL;
    }
    if (!rw_close(c1, SQRT_2_OVER_PI, 1e-5)) {
        snprintf(why, nwhy, "Tanh's input is scaled by %.7g, not sqrt(2/pi)", c1);
        return NULL;
    }
    const ir_node *add = rw_def(g, s, IR_OP_ADD);
    if (!add || rw_uses(g, s) != 1 || rw_uses(g, th->inputs[0]) != 1) {
        snprintf(why, nwhy, "Tanh's input is not sqrt(2/pi) (x + 0.044715 x^3)");
        return NULL;
    }
    for (int k = 0; k < 2; k++) {
        const ir_node *p = rw_def(g, add->inputs[1 - k], IR_OP_MUL);
        int cube;
        *x = add->inputs[k];
        if (!p || !rw_scalar_operand(g, p, &cube, &c2) || !is_cube(g, cube, *x) || rw_uses(g, p->outputs[0]) != 1)
            continue;
        if (!rw_close(c2, 0.044715, 1e-5)) {
            snprintf(why, nwhy, "the cubic term's constant is %.7g, not 0.044715", c2);
            return NULL;
        }
        const ir_node *a = one_plus(g, th->outputs[0]);
        if (!a) {
            snprintf(why, nwhy, "Tanh is not followed by Add of 1");
            return NULL;
        }
        return half_x_times(g, a->outputs[0], *x, why, nwhy);
    }
    snprintf(why, nwhy, "Tanh's input is not sqrt(2/pi) (x + 0.044715 x^3)");
    return NULL;
}

int pass_fuse_gelu(ir_graph *g, vitc_diag *d)
{
    int changed = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *n = &g->nodes[i];
        if (n->op != IR_OP_ERF && n->op != IR_OP_TANH)
            continue;
        char why[256];
        int x;
        const ir_node *root = n->op == IR_OP_ERF ? match_erf(g, n, &x, why, sizeof why)
                                                 : match_tanh(g, n, &x, why, sizeof why);
        if (!root) {
            rw_miss(g, n, "%s", why);
            continue;
        }
        int tanh_form = n->op == IR_OP_TANH, out = root->outputs[0];
        ir_attr a = {.id = IR_ATTR_APPROXIMATE, .kind = IR_AT_STRING, .tensor = -1};
        a.s = ir_strdup(g->arena, tanh_form ? "tanh" : "none");
        a.n = (int)strlen(tanh_form ? "tanh" : "none");
        const char *name = rw_fused_name(g, n, root);
        if (!a.s || rw_set_node(g, rw_index(g, root), IR_OP_GELU, name, tanh_form ? "GELU(tanh form)" : "GELU(erf form)",
                                1, &x, 1, &out, 1, &a))
            return vitc_error(d, VITC_INTERNAL, n, "out of memory");
        rw_hit();
        changed = 1;
    }
    return changed ? rw_finish(g, d) : VITC_OK;
}
