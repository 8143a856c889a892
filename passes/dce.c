/* dce.c: dead-code elimination: the nodes no graph output needs are dropped,
 * the rest keep their order. */
#include "passes/rewrite.h"

#include <stdlib.h>

int pass_dce(ir_graph *g, vitc_diag *d)
{
    unsigned char *live = calloc((size_t)g->nvalues + 1, 1);
    if (!live)
        return vitc_error(d, VITC_INTERNAL, NULL, "out of memory");
    for (int i = 0; i < g->noutputs; i++)
        if (g->outputs[i] >= 0)
            live[g->outputs[i]] = 1;
    unsigned char *keep = calloc((size_t)g->nnodes + 1, 1);
    if (!keep) {
        free(live);
        return vitc_error(d, VITC_INTERNAL, NULL, "out of memory");
    }
    for (int i = g->nnodes - 1; i >= 0; i--) {
        const ir_node *n = &g->nodes[i];
        for (int k = 0; k < n->noutputs && !keep[i]; k++)
            keep[i] = n->outputs[k] >= 0 && live[n->outputs[k]];
        if (!keep[i])
            continue;
        for (int k = 0; k < n->ninputs; k++)
            if (n->inputs[k] >= 0)
                live[n->inputs[k]] = 1;
    }
    for (int i = 0; i < g->nvalues; i++)
        if (g->values[i].kind == IR_VAL_NODE)
            g->values[i].producer = -1;
    int w = 0;
    for (int i = 0; i < g->nnodes; i++) {
        if (!keep[i])
            continue;
        g->nodes[w] = g->nodes[i];
        for (int k = 0; k < g->nodes[w].noutputs; k++)
            if (g->nodes[w].outputs[k] >= 0)
                g->values[g->nodes[w].outputs[k]].producer = w;
        w++;
    }
    g->nnodes = w;
    free(live);
    free(keep);
    return VITC_OK;
}
