/* gelu.c: fuse-gelu, the GELU that TorchScript exports as arithmetic becomes
 * one Gelu node: the exact erf form (approximate "none") and the tanh
 * approximation (approximate "tanh") stay distinct; CLIP's QuickGELU,
 * x * sigmoid(1.702 x), becomes one QuickGelu node, and any other
 * x * sigmoid(alpha x) (SiLU, alpha 1, in SwiGLU MLPs) a Swish node.  Opset 20's Gelu is
 * already one node.  Each spelling is one rule anchored at its Erf or Tanh;
 * the order and grouping of the products is the pattern vocabulary's
 * business (pattern.c). */
#include "passes/rewrite.h"

#include <string.h>

#define SQRT2 1.41421356237309504880
#define SQRT_2_OVER_PI 0.79788456080286535588

typedef struct {
    int x;                /* GELU's input */
    const ir_node *root;  /* the last node of the pattern: the Gelu goes there */
    const char *approx;   /* "none", "tanh", "quick" or "swish" */
    double alpha;         /* Swish's */
} gelu_match;

#define MISS(...) return (snprintf(why, nwhy, __VA_ARGS__), -1)

/* gelu = 0.5 * x * (1 + f), read from f: the product in any order and grouping. */
static int half_x_times_one_plus(const ir_graph *g, const ir_node *f, const char *fn, gelu_match *m, char *why,
                                 size_t nwhy)
{
    int e;
    double one, coef = 0;
    const ir_node *a = rw_only_user(g, f->outputs[0]);
    if (!a || !pat_plus(g, a->outputs[0], &e, &one) || e != f->outputs[0] || one != 1)
        MISS("%s is not followed by Add of 1", ir_op_name(f->op));
    m->root = pat_product_of(g, a->outputs[0], a->outputs[0], m->x, 0.5, &coef, &e);
    if (m->root)
        return 1;
    if (e == PAT_OTHER_SCALAR)
        MISS("x * (1 + %s(...)) is scaled by %g, not 0.5", fn, coef);
    if (e == PAT_OTHER_FACTOR)
        MISS("1 + %s(...) is multiplied by something other than x and 0.5", fn);
    MISS("1 + %s(...) is not multiplied (once) by x and 0.5", fn);
}

/* gelu_erf = 0.5 * x * (1 + Erf(x / sqrt 2)) */
static int match_erf(const ir_graph *g, const ir_node *erf, void *mv, char *why, size_t nwhy)
{
    gelu_match *m = mv;
    double c;
    m->approx = "none";
    if (!pat_scaled(g, erf->inputs[0], &m->x, &c))
        MISS("Erf's input is not x / sqrt(2)");
    if (!rw_close(1 / c, SQRT2, 1e-6))
        MISS("Erf's input is x / %.7g, not x / sqrt(2)", 1 / c);
    if (rw_uses(g, erf->inputs[0]) != 1)
        MISS("x / sqrt(2) has other readers");
    return half_x_times_one_plus(g, erf, "erf", m, why, nwhy);
}

/* gelu_tanh = 0.5 * x * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3))) */
static int match_tanh(const ir_graph *g, const ir_node *th, void *mv, char *why, size_t nwhy)
{
    gelu_match *m = mv;
    int s, cube, y;
    double c1, c2;
    m->approx = "tanh";
    if (!pat_scaled(g, th->inputs[0], &s, &c1))
        MISS("Tanh's input is not a constant times (x + 0.044715 x^3)");
    if (!rw_close(c1, SQRT_2_OVER_PI, 1e-5))
        MISS("Tanh's input is scaled by %.7g, not sqrt(2/pi)", c1);
    const ir_node *add = rw_def(g, s, IR_OP_ADD);
    if (!add || rw_uses(g, s) != 1 || rw_uses(g, th->inputs[0]) != 1)
        MISS("Tanh's input is not sqrt(2/pi) (x + 0.044715 x^3)");
    for (int k = 0; k < 2; k++) {
        int p = add->inputs[1 - k];
        m->x = add->inputs[k];
        if (!pat_scaled(g, p, &cube, &c2) || rw_uses(g, p) != 1 || !pat_cube(g, cube, &y) || y != m->x ||
            rw_uses(g, cube) != 1)
            continue;
        if (!rw_close(c2, 0.044715, 1e-5))
            MISS("the cubic term's constant is %.7g, not 0.044715", c2);
        return half_x_times_one_plus(g, th, "tanh", m, why, nwhy);
    }
    MISS("Tanh's input is not sqrt(2/pi) (x + 0.044715 x^3)");
}

/* swish = x * Sigmoid(alpha x): CLIP's QuickGELU (alpha 1.702), SiLU
 * (alpha 1, x itself the Sigmoid's input).  A Sigmoid that is not
 * multiplied by its own input (a gate) is no candidate. */
static int match_swish(const ir_graph *g, const ir_node *sg, void *mv, char *why, size_t nwhy)
{
    gelu_match *m = mv;
    const ir_node *mul = rw_only_user(g, sg->outputs[0]);
    int other = mul && mul->op == IR_OP_MUL ? rw_other_input(mul, sg->outputs[0]) : -1, x;
    double c = 1;
    if (other >= 0 && other == sg->inputs[0])
        x = other; /* x * Sigmoid(x) */
    else if (!pat_scaled(g, sg->inputs[0], &x, &c) || c == 0)
        return 0;
    else if (other != x)
        MISS("Sigmoid(%.7g x) is not multiplied (once) by x", c);
    else if (rw_uses(g, sg->inputs[0]) != 1)
        MISS("%.7g x has other readers", c);
    m->x = x;
    m->alpha = c;
    m->approx = rw_close(c, 1.702, 1e-4) ? "quick" : "swish";
    m->root = mul;
    return 1;
}

#undef MISS

static int rewrite(ir_graph *g, int ni, const void *mv)
{
    const gelu_match *m = mv;
    int out = m->root->outputs[0];
    const char *name = rw_fused_name(g, &g->nodes[ni], m->root);
    if (strcmp(m->approx, "quick") == 0)
        return rw_set_node(g, rw_index(g, m->root), IR_OP_QUICK_GELU, name, "QuickGELU", 1, &m->x, 1, &out, 0, NULL)
                   ? -1
                   : 0;
    if (strcmp(m->approx, "swish") == 0) {
        ir_attr alpha = rw_attr_float(IR_ATTR_ALPHA, (float)m->alpha);
        return rw_set_node(g, rw_index(g, m->root), IR_OP_SWISH, name, m->alpha == 1 ? "SiLU" : "Swish", 1, &m->x, 1,
                           &out, m->alpha == 1 ? 0 : 1, &alpha)
                   ? -1
                   : 0;
    }
    int tanh_form = strcmp(m->approx, "tanh") == 0;
    ir_attr a = {.id = IR_ATTR_APPROXIMATE, .kind = IR_AT_STRING, .tensor = -1, .n = (int)strlen(m->approx)};
    a.s = ir_strdup(g->arena, m->approx);
    return !a.s || rw_set_node(g, rw_index(g, m->root), IR_OP_GELU, name,
                               tanh_form ? "GELU(tanh form)" : "GELU(erf form)", 1, &m->x, 1, &out, 1, &a)
               ? -1
               : 0;
}

static const rw_rule rules[] = {
    {.name = "gelu-erf", .anchor = IR_OP_ERF, .size = sizeof(gelu_match), .match = match_erf, .rewrite = rewrite},
    {.name = "gelu-tanh", .anchor = IR_OP_TANH, .size = sizeof(gelu_match), .match = match_tanh, .rewrite = rewrite},
    {.name = "swish", .anchor = IR_OP_SIGMOID, .size = sizeof(gelu_match), .match = match_swish,
     .rewrite = rewrite},
};

int pass_fuse_gelu(ir_graph *g, vitc_diag *d) { return RW_APPLY(g, rules, d); }
