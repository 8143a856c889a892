/* pipeline.c: the optimisation pipeline, as one readable list. */
#include "passes/passes.h"

static const pass_def pipeline[] = {
    {"fold-shapes", pass_fold_shapes}, /* shape arithmetic -> constants in terms of the batch */
    {"dce", pass_dce},                 /* drop what no output needs */
};

const pass_def *pass_pipeline(int *count)
{
    *count = (int)(sizeof pipeline / sizeof pipeline[0]);
    return pipeline;
}

int pass_run_pipeline(ir_graph *g, pass_hook hook, void *ctx, vitc_diag *d)
{
    int n;
    const pass_def *p = pass_pipeline(&n);
    for (int i = 0; i < n; i++) {
        int st = p[i].run(g, d);
        if (st == VITC_OK)
            st = ir_verify(g, d);
        if (st != VITC_OK) {
            if (d->nerrors == 0)
                vitc_error(d, st, NULL, "pass %s failed", p[i].name);
            return st;
        }
        if (hook)
            hook(ctx, p[i].name, g);
    }
    return VITC_OK;
}
