/* constfold.c: fold, the compile-time evaluator of the pipeline.
 *
 * Shape inference (ir/shape.c) already knows every small value computable at
 * compile time: integers with the batch in them (symval: Shape -> Gather ->
 * Concat ... of torch exports, the batch kept as k * B^e), and the numbers of
 * any small node whose inputs are known numbers, evaluated by the reference
 * interpreter (truncating integer Div, Cast, Pow, Ceil ...).  This pass makes
 * them constants, in one walk in graph order: a node's reads of known values
 * become constants (fold_known_inputs, fold.c), then a node whose inputs are
 * all constants that do not depend on the batch is run by the interpreter and
 * its outputs become constants, whatever their size (up to MAX_FOLD_BYTES):
 * torchvision's run-time attention scale (Shape -> Slice -> Cast -> Sqrt ->
 * Div), the weights exporters derive from initializers (Transpose, Cast,
 * Reshape of a weight), a position table interpolated by Resize. */
#include "passes/rewrite.h"

#include "ir/interp.h"

#include <stdlib.h>
#include <string.h>

enum { MAX_FOLD_BYTES = 64 << 20 }; /* results larger than this stay computed at run time */

static int foldable(const ir_graph *g, const ir_node *n)
{
    if ((ir_op_table[n->op].flags & OPF_FUSED) || n->op == IR_OP_CONSTANT || n->ninputs == 0)
        return 0;
    for (int k = 0; k < n->ninputs; k++)
        if (n->inputs[k] >= 0 && !rw_is_const(g, n->inputs[k]))
            return 0;
    for (int k = 0; k < n->noutputs; k++) {
        int v = n->outputs[k];
        if (v < 0)
            continue;
        int64_t numel = rw_numel(&g->values[v]);
        if (rw_is_graph_output(g, v) || numel < 0 ||
            numel * (int64_t)ir_dtype_size(g->values[v].dtype) > MAX_FOLD_BYTES)
            return 0;
    }
    return ir_interp_supports(g, n);
}

/* Folds node i; 1 if it did, 0 if it left it, or a negative status. */
static int fold(ir_graph *g, int i, vitc_diag *d)
{
    const ir_node *n = &g->nodes[i];
    ir_tensor in[n->ninputs + 1], out[n->noutputs + 1];
    memset(in, 0, sizeof in);
    for (int k = 0; k < n->ninputs; k++) {
        int v = n->inputs[k];
        if (v < 0)
            continue;
        const ir_value *c = &g->values[v];
        in[k].dtype = c->dtype;
        in[k].rank = c->rank;
        rw_static_dims(c, in[k].dims);
        in[k].data = c->data;
        if (ir_tensor_nbytes(&in[k]) != c->nbytes)
            return 0;
    }
    /* A failure (a malformed constant computation) is left for run time to
     * report with the same message; folding is only an optimisation. */
    if (ir_interp_eval(g, n, in, out))
        return 0;
    int made[n->noutputs + 1];
    for (int k = 0; k < n->noutputs; k++) {
        made[k] = -1;
        int v = n->outputs[k];
        if (v < 0)
            continue;
        made[k] = ir_add_const(g, g->values[v].name, out[k].dtype, out[k].rank, out[k].dims, out[k].data, ir_tensor_nbytes(&out[k]));
        n = &g->nodes[i];
        if (made[k] < 0)
            break;
    }
    for (int k = 0; k < n->noutputs; k++)
        ir_tensor_free(&out[k]);
    for (int k = 0; k < n->noutputs; k++)
        if (made[k] < 0 && n->outputs[k] >= 0)
            return -vitc_error(d, VITC_INTERNAL, n, "out of memory while folding");
    for (int k = 0; k < n->noutputs; k++)
        if (n->outputs[k] >= 0)
            rw_replace_uses(g, n->outputs[k], made[k]);
    return 1;
}

int pass_fold(ir_graph *g, vitc_diag *d)
{
    int nv = g->nvalues, changed = 0, *repl = fold_repl_new(g, d);
    if (!repl)
        return VITC_INTERNAL;
    for (int i = 0; i < g->nnodes; i++) {
        fold_known_inputs(g, i, repl, nv);
        if (!foldable(g, &g->nodes[i]))
            continue;
        int r = fold(g, i, d);
        if (r < 0) {
            free(repl);
            return -r;
        }
        changed |= r;
    }
    free(repl);
    /* the chains that computed known values are left without readers */
    return changed ? rw_finish(g, d) : pass_dce(g, d);
}
