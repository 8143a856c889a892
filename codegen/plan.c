/* plan.c: the planning every backend shares, before its own storage and
 * memory plan: how often each value is read and by whom, and which nodes are
 * views (their output shares input 0's bytes). */
#include "codegen/backend.h"

#include <stdlib.h>
#include <string.h>

int cg_is_view(const ir_graph *g, const ir_node *n, const int *nuses, const ir_dtype *stored)
{
    int in = ir_input(n, 0), out = n->noutputs >= 1 ? n->outputs[0] : -1;
    if (!ir_op_has(n->op, OPF_VIEW) || in < 0 || out < 0)
        return 0;
    if (stored ? stored[in] != stored[out] : g->values[in].dtype != g->values[out].dtype)
        return 0;
    /* Dropout's mask, if anyone reads it, is not a view */
    return n->op != IR_OP_DROPOUT || n->noutputs < 2 || n->outputs[1] < 0 || nuses[n->outputs[1]] == 0;
}

int cg_plan_build(cg_ctx_head *c, const ir_dtype *stored)
{
    const ir_graph *g = c->g;
    cg_plan *p = &c->plan;
    int nv = g->nvalues, nn = g->nnodes;
    cg_plan_free(p);
    p->nvalues = nv;
    p->nuses = calloc((size_t)nv + 1, sizeof *p->nuses);
    p->reader = malloc(sizeof *p->reader * ((size_t)nv + 1));
    p->view_of = malloc(sizeof *p->view_of * ((size_t)nv + 1));
    p->skip = calloc((size_t)nn + 1, 1);
    if (!p->nuses || !p->reader || !p->view_of || !p->skip)
        return vitc_error(c->d, VITC_INTERNAL, NULL, "out of memory");
    for (int v = 0; v < nv; v++)
        p->reader[v] = p->view_of[v] = -1;
    for (int i = 0; i < nn; i++)
        for (int k = 0; k < g->nodes[i].ninputs; k++) {
            int v = g->nodes[i].inputs[k];
            if (v >= 0) {
                p->nuses[v]++;
                p->reader[v] = i;
            }
        }
    for (int k = 0; k < g->noutputs; k++)
        p->nuses[g->outputs[k]]++;
    for (int i = 0; i < nn; i++)
        if (cg_is_view(g, &g->nodes[i], p->nuses, stored))
            p->view_of[g->nodes[i].outputs[0]] = g->nodes[i].inputs[0];
    return VITC_OK;
}

void cg_plan_free(cg_plan *p)
{
    free(p->nuses), free(p->reader), free(p->view_of), free(p->skip);
    memset(p, 0, sizeof *p);
}
