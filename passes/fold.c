/* fold.c: fold, the compile-time evaluator of the pipeline.
 *
 * Shape inference (ir/shape.c) already knows every small value computable at
 * compile time: integers with the batch in them (symval: Shape -> Gather ->
 * Concat ... of torch exports, the batch kept as k * B^e), and the numbers of
 * any small node whose inputs are known numbers, evaluated by the reference
 * interpreter (truncating integer Div, Cast, Pow, Ceil ...).  This pass makes
 * them constants, in one walk in graph order: a node's reads of known values
 * become constants (fold_known_inputs), then a node whose inputs are
 * all constants that do not depend on the batch is run by the interpreter and
 * its outputs become constants, whatever their size (up to MAX_FOLD_BYTES):
 * torchvision's run-time attention scale (Shape -> Slice -> Cast -> Sqrt ->
 * Div), the weights exporters derive from initializers (Transpose, Cast,
 * Reshape of a weight), a position table interpolated by Resize. */
#include "passes/rewrite.h"

#include "ir/interp.h"

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
