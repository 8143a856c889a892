/* fuzz_model.c: the model harness.  Bytes -> onnx_import_buffer -> ir_verify
 * -> ir_infer_shapes -> the printers -> the pass pipeline -> the printers, as
 * `vitc dump` does.  Besides the sanitizers it checks what later stages
 * trust: a successful import verifies, and every shape inference leaves each
 * node output with a rank in [0, IR_MAX_RANK], non-negative dimensions and
 * compile-time values (symval) that agree with the value's element count. */
#include "fuzz.h"

#include "frontend/onnx.h"
#include "passes/passes.h"

#include <string.h>

/* Aborts when the graph breaks an invariant that shape inference promises. */
static void check_shapes(const ir_graph *g, const vitc_diag *d)
{
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *n = &g->nodes[i];
        for (int k = 0; k < n->noutputs; k++) {
            if (n->outputs[k] < 0)
                continue;
            const ir_value *v = &g->values[n->outputs[k]];
            if (v->rank < 0 || v->rank > IR_MAX_RANK || (unsigned)v->dtype >= IR_DTYPE_COUNT)
                fz_die("a node output has no valid rank or dtype after shape inference", d);
            int64_t numel = 1;
            int is_static = 1;
            for (int j = 0; j < v->rank; j++) {
                if (v->dims[j].k < 0 || v->dims[j].e < 0)
                    fz_die("a node output has a negative dimension after shape inference", d);
                if (v->dims[j].e != 0 && v->dims[j].k != 0)
                    is_static = 0;
                else if (ir_mul_ovf(numel, v->dims[j].k, &numel))
                    is_static = 0;
            }
            if (v->symval && (v->nsymval < 0 || (is_static && numel != v->nsymval)))
                fz_die("compile-time values (symval) disagree with the value's shape", d);
        }
    }
}

static void print_all(const ir_graph *g)
{
    FILE *f = fz_devnull();
    ir_print_text(g, f);
    ir_print_dot(g, f);
    ir_print_stats(g, f);
}

ir_graph *fz_load(const uint8_t *data, size_t size, vitc_diag *d)
{
    const char *path = fz_model_path();
    fz_diag(d, path);
    ir_graph *g = onnx_import_buffer(data, size, path, d);
    if (!g) {
        if (d->status != VITC_BAD_INPUT || d->nerrors == 0)
            fz_die("import failed without a bad-input message", d);
        return NULL;
    }
    if (d->status != VITC_OK)
        fz_die("import returned a graph with an error status", d);
    if (ir_verify(g, d) != VITC_OK)
        fz_die("an imported graph does not verify", d);
    if (ir_infer_shapes(g, d) != VITC_OK) {
        if (d->status != VITC_BAD_INPUT || d->nerrors == 0)
            fz_die("shape inference failed without a bad-input message", d);
        ir_graph_free(g);
        return NULL;
    }
    check_shapes(g, d);
    return g;
}

int fz_passes(ir_graph *g, vitc_diag *d)
{
    int st = pass_run_pipeline(g, NULL, NULL, d);
    if (st == VITC_INTERNAL)
        fz_die("the passes failed with an internal error", d);
    if (st == VITC_OK)
        check_shapes(g, d);
    return st;
}

int fz_model_one(const uint8_t *data, size_t size)
{
    vitc_diag d;
    ir_graph *g = fz_load(data, size, &d);
    if (!g)
        return 0;
    print_all(g);
    if (fz_passes(g, &d) == VITC_OK)
        print_all(g);
    ir_graph_free(g);
    return 0;
}
