/* passes.h: graph-to-graph passes and the pipeline that orders them. */
#ifndef VITC_PASSES_H
#define VITC_PASSES_H

#include "ir/ir.h"

typedef struct {
    const char *name; /* for dumps and --dump-after, never for lookup */
    int (*run)(ir_graph *g, vitc_diag *d);
} pass_def;

/* Called after each pass of the pipeline (for dumps and bisection). */
typedef void (*pass_hook)(void *ctx, const char *pass, const ir_graph *g);

/* Runs the pipeline over a graph whose shapes are inferred, verifying the
 * graph after each pass.  hook may be NULL.  Returns a status. */
int pass_run_pipeline(ir_graph *g, pass_hook hook, void *ctx, vitc_diag *d);
/* The pipeline's passes, in order; *count gets their number. */
const pass_def *pass_pipeline(int *count);

/* The passes. */
int pass_fold_shapes(ir_graph *g, vitc_diag *d);
int pass_dce(ir_graph *g, vitc_diag *d);

#endif
