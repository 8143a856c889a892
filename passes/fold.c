/* fold.c: known shape values as constants, and dead-code elimination.
 *
 * Shape inference already knows the values of the small integer tensors that
 * torch exports compute from Shape at run time (Shape -> Gather -> Unsqueeze ->
 * Concat -> Reshape), with the batch in them where they depend on it.
 * fold_known_inputs (one half of the fold pass, constfold.c) replaces a node's
 * reads of such a tensor by a constant: a plain one when its values are
 * numbers, or a batch-dependent one (symval entries k * B^e, evaluated when
 * the batch is known) otherwise.  The chains that computed them then have no
 * users, and dce removes them. */
#include "passes/rewrite.h"

#include <stdlib.h>
#include <string.h>

/* A constant holding v's known values (as v's dtype, evaluated at batch 1 in
 * data; symval is what counts when it mentions the batch). */
static int make_const(ir_graph *g, int vid)
{
    ir_value v = g->values[vid]; /* copy: adding values may move the array */
    int64_t n = v.nsymval, dims[IR_MAX_RANK];
    for (int i = 0; i < v.rank; i++)
        dims[i] = v.dims[i].k;
    size_t es = ir_dtype_size(v.dtype);
    if (es == 0 || (v.dtype != IR_I64 && v.dtype != IR_I32))
        return -1;
    unsigned char buf[64 * 8];
    for (int64_t i = 0; i < n; i++) {
        int64_t x = v.symval[i].k;
        if (v.dtype == IR_I64)
            memcpy(buf + i * 8, &x, 8);
        else {
            int32_t y = (int32_t)x;
            memcpy(buf + i * 4, &y, 4);
        }
    }
    int id = ir_add_const(g, v.name, v.dtype, v.rank, dims, buf, (size_t)n * es);
    if (id < 0)
        return -1;
    ir_value *c = &g->values[id];
    c->symval = v.symval;
    c->nsymval = v.nsymval;
    return id;
}

int fold_known_inputs(ir_graph *g, int i, int *repl, int nv)
{
    for (int k = 0; k < g->nodes[i].ninputs; k++) {
        int v = g->nodes[i].inputs[k];
        if (v < 0 || v >= nv || g->values[v].kind != IR_VAL_NODE || !g->values[v].symval || g->values[v].rank > 1)
            continue;
        if (repl[v] < 0)
            repl[v] = make_const(g, v);
        if (repl[v] >= 0)
            g->nodes[i].inputs[k] = repl[v];
    }
    return VITC_OK;
}

int pass_fold_shapes(ir_graph *g, vitc_diag *d)
{
    int nv = g->nvalues, *repl = fold_repl_new(g, d);
    if (!repl)
        return VITC_INTERNAL;
    for (int i = 0; i < g->nnodes; i++)
        fold_known_inputs(g, i, repl, nv);
    free(repl);
    return VITC_OK;
}

int *fold_repl_new(const ir_graph *g, vitc_diag *d)
{
    int *repl = malloc(sizeof(int) * ((size_t)g->nvalues + 1));
    if (!repl) {
        vitc_error(d, VITC_INTERNAL, NULL, "out of memory");
        return NULL;
    }
    for (int i = 0; i < g->nvalues; i++)
        repl[i] = -1;
    return repl;
}

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
