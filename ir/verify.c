/* verify.c: structural invariants of a graph, checked after import and after
 * every pass in debug and test builds.  A failure here is a bug in vitc (or a
 * malformed model that slipped past the frontend), reported with the node. */
#include "ir/ir.h"

#include <stdlib.h>

int ir_verify(const ir_graph *g, vitc_diag *d)
{
    int before = d->nerrors;
    int *producer = calloc((size_t)g->nvalues + 1, sizeof(int));
    if (!producer)
        return vitc_error(d, VITC_INTERNAL, NULL, "out of memory");
    for (int i = 0; i < g->nvalues; i++)
        producer[i] = g->values[i].kind == IR_VAL_NODE ? -1 : -2; /* -2: defined from the start */
    for (int i = 0; i < g->ninputs; i++)
        if (g->inputs[i] < 0 || g->inputs[i] >= g->nvalues || g->values[g->inputs[i]].kind != IR_VAL_INPUT)
            vitc_error(d, VITC_INTERNAL, NULL, "graph input %d is not an input value", i);
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *n = &g->nodes[i];
        const ir_op_info *info = &ir_op_table[n->op];
        if ((unsigned)n->op >= IR_OP_COUNT) {
            vitc_error(d, VITC_INTERNAL, n, "op %d is out of range", (int)n->op);
            continue;
        }
        if (n->ninputs < info->min_in || (info->max_in != VAR && n->ninputs > info->max_in) ||
            n->noutputs < info->min_out || (info->max_out != VAR && n->noutputs > info->max_out))
            vitc_error(d, VITC_INTERNAL, n, "%d inputs, %d outputs is outside %s's arity", n->ninputs,
                       n->noutputs, info->name);
        for (int k = 0; k < n->ninputs; k++) {
            int v = n->inputs[k];
            if (v == -1 && k < info->min_in)
                vitc_error(d, VITC_INTERNAL, n, "required input %d is missing", k);
            if (v == -1)
                continue;
            if (v < 0 || v >= g->nvalues)
                vitc_error(d, VITC_INTERNAL, n, "input %d refers to value %d of %d", k, v, g->nvalues);
            else if (producer[v] == -1)
                vitc_error(d, VITC_INTERNAL, n, "input %d ('%s') is used before it is produced", k,
                           g->values[v].name);
        }
        for (int k = 0; k < n->noutputs; k++) {
            int v = n->outputs[k];
            if (v == -1)
                continue;
            if (v < 0 || v >= g->nvalues)
                vitc_error(d, VITC_INTERNAL, n, "output %d refers to value %d of %d", k, v, g->nvalues);
            else if (producer[v] != -1)
                vitc_error(d, VITC_INTERNAL, n, "output '%s' has a second producer", g->values[v].name);
            else if (g->values[v].producer != i)
                vitc_error(d, VITC_INTERNAL, n, "output '%s' does not record its producer", g->values[v].name);
            else
                producer[v] = i;
        }
    }
    for (int i = 0; i < g->noutputs; i++) {
        int v = g->outputs[i];
        if (v < 0 || v >= g->nvalues || producer[v] == -1)
            vitc_error(d, VITC_INTERNAL, NULL, "graph output %d is never produced", i);
    }
    free(producer);
    return d->nerrors != before ? VITC_INTERNAL : VITC_OK;
}
