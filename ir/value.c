/* value.c: questions about one value of a graph that more than one stage asks. */
#include "ir/ir.h"

int ir_value_is_plain_const(const ir_graph *g, int v)
{
    if (v < 0 || v >= g->nvalues || g->values[v].kind != IR_VAL_CONST || g->values[v].rank < 0)
        return 0;
    const ir_value *c = &g->values[v];
    for (int i = 0; c->symval && i < c->nsymval; i++)
        if (c->symval[i].e != 0 && c->symval[i].k != 0)
            return 0;
    return 1;
}

int ir_dropout_is_inference(const ir_graph *g, const ir_node *n)
{
    int v = ir_input(n, 2);
    if (v < 0)
        return 1;
    const ir_value *tm = &g->values[v];
    return ir_value_is_plain_const(g, v) && (tm->nbytes < 1 || ((const unsigned char *)tm->data)[0] == 0);
}
