/* pattern.c: the arithmetic vocabulary of the matchers (rewrite.h).
 *
 * Exporters write one formula in many ways: 0.5 * x * g, x * 0.5 * g,
 * (x * g) / 2, x / sqrt(2) or x * 0.7071.  These helpers answer for a value
 * whether it has a shape up to commutativity of Add and Mul, grouping of
 * products and Div by a constant as Mul by its reciprocal, so that a rule
 * states the formula once and never lists operand orders. */
#include "passes/rewrite.h"

#include <math.h>

const ir_node *pat_with(const ir_graph *g, int v, ir_op op, int a, int *other)
{
    const ir_node *n = rw_def(g, v, op);
    int o = n ? rw_other_input(n, a) : -1;
    if (o < 0)
        return NULL;
    *other = o;
    return n;
}

const ir_node *pat_scaled(const ir_graph *g, int v, int *x, double *c)
{
    const ir_node *n = rw_producer(g, v);
    if (!n || (n->op != IR_OP_MUL && n->op != IR_OP_DIV) || !rw_scalar_operand(g, n, x, c))
        return NULL;
    if (n->op == IR_OP_DIV) {
        if (n->inputs[0] != *x || *c == 0)
            return NULL; /* c / x is no scaling */
        *c = 1 / *c;
    }
    return n;
}

const ir_node *pat_plus(const ir_graph *g, int v, int *x, double *c)
{
    const ir_node *n = rw_def(g, v, IR_OP_ADD);
    return n && rw_scalar_operand(g, n, x, c) ? n : NULL;
}

const ir_node *pat_square(const ir_graph *g, int v, int *x)
{
    const ir_node *n = rw_producer(g, v);
    double e;
    if (n && n->op == IR_OP_POW && rw_scalar(g, n->inputs[1], &e) && e == 2) {
        *x = n->inputs[0];
        return n;
    }
    if (n && n->op == IR_OP_MUL && n->inputs[0] == n->inputs[1]) {
        *x = n->inputs[0];
        return n;
    }
    return NULL;
}

const ir_node *pat_cube(const ir_graph *g, int v, int *x)
{
    const ir_node *n = rw_producer(g, v);
    double e, coef = 1;
    int f[3];
    if (n && n->op == IR_OP_POW && rw_scalar(g, n->inputs[1], &e) && e == 3) {
        *x = n->inputs[0];
        return n;
    }
    if (!n || n->op != IR_OP_MUL || pat_factors(g, n, f, 3, &coef) != 3 || coef != 1 || f[0] != f[1] ||
        f[1] != f[2])
        return NULL;
    *x = f[0];
    return n;
}

int pat_const_near(const ir_graph *g, int v, double want, double tol)
{
    double c;
    return rw_scalar(g, v, &c) && rw_close(c, want, tol);
}

const ir_node *pat_divide(const ir_graph *g, int v, int *num, int *den)
{
    const ir_node *n = rw_producer(g, v);
    if (n && n->op == IR_OP_DIV) {
        *num = n->inputs[0];
        *den = n->inputs[1];
        return n;
    }
    for (int k = 0; n && n->op == IR_OP_MUL && k < 2; k++) {
        const ir_node *r = rw_def(g, n->inputs[k], IR_OP_RECIPROCAL);
        if (r && rw_uses(g, n->inputs[k]) == 1) {
            *num = n->inputs[1 - k];
            *den = r->inputs[0];
            return n;
        }
    }
    return NULL;
}

const ir_node *pat_affine(const ir_graph *g, int v, int *x, int *s, int *t)
{
    const ir_node *add = rw_def(g, v, IR_OP_ADD);
    for (int k = 0; add && k < 2; k++) {
        int p = add->inputs[k];
        const ir_node *mul = rw_def(g, p, IR_OP_MUL);
        if (!mul || !rw_is_const(g, add->inputs[1 - k]) || rw_uses(g, p) != 1)
            continue;
        for (int j = 0; j < 2; j++)
            if (rw_is_const(g, mul->inputs[1 - j]) && !rw_is_const(g, mul->inputs[j])) {
                *x = mul->inputs[j];
                *s = mul->inputs[1 - j];
                *t = add->inputs[1 - k];
                return add;
            }
        return NULL;
    }
    return NULL;
}

/* v's producer if it is a Mul, or a Div by a scalar, and v is read only once. */
static const ir_node *inner_product(const ir_graph *g, int v)
{
    const ir_node *n = rw_producer(g, v);
    double c;
    if (!n || rw_uses(g, v) != 1 || rw_is_graph_output(g, v))
        return NULL;
    if (n->op == IR_OP_MUL || (n->op == IR_OP_DIV && rw_scalar(g, n->inputs[1], &c) && c != 0))
        return n;
    return NULL;
}

int pat_factors(const ir_graph *g, const ir_node *n, int *f, int max, double *coef)
{
    int nf = 0;
    for (int k = 0; k < 2; k++) {
        int v = n->inputs[k];
        double c;
        const ir_node *p = inner_product(g, v);
        if (n->op == IR_OP_DIV && k == 1) {
            rw_scalar(g, v, &c);
            *coef /= c;
        } else if (rw_scalar(g, v, &c)) {
            *coef *= c;
        } else if (p) {
            int sub = pat_factors(g, p, f + nf, max - nf, coef);
            if (sub < 0)
                return -1;
            nf += sub;
        } else {
            if (nf >= max)
                return -1;
            f[nf++] = v;
        }
    }
    return nf;
}

const ir_node *pat_product_of(const ir_graph *g, int v, int a, int b, double want, double *coef, int *why)
{
    *why = PAT_NOT_MULTIPLIED;
    for (;;) {
        const ir_node *u = rw_only_user(g, v);
        double c;
        if (!u || !(u->op == IR_OP_MUL ||
                    (u->op == IR_OP_DIV && u->inputs[0] == v && rw_scalar(g, u->inputs[1], &c) && c != 0)))
            return NULL;
        int f[2];
        double k = 1;
        int nf = pat_factors(g, u, f, 2, &k);
        for (int i = 0; i < nf; i++)
            if ((f[i] != a && f[i] != b) || (i == 1 && f[0] == f[1]))
                nf = -1;
        if (nf < 0) {
            *why = PAT_OTHER_FACTOR;
            return NULL;
        }
        if (nf == 2) {
            *why = PAT_OTHER_SCALAR;
            *coef = k;
            if (rw_close(k, want, 1e-6))
                return u;
        }
        v = u->outputs[0];
    }
}
