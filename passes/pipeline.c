/* pipeline.c: the optimisation pipeline, as one readable list, and the
 * runner that verifies the graph after each pass, calls the hook (dumps,
 * bisection) and keeps the --explain-fusion record. */
#include "passes/rewrite.h"

#include <string.h>

static const pass_def pipeline[] = {
    /* canonicalisation */
    {"fold", pass_fold, NULL},                   /* values known at compile time -> constants (batch kept symbolic) */
    {"lower-quant", pass_lower_quant, NULL},     /* QDQ pairs -> FakeQuant; dynamic quantization, integer products -> f32 */
    {"patchify", pass_patchify, NULL},           /* Conv with kernel = stride -> patches @ W */
    {"simplify", pass_simplify, NULL},           /* Identity, Dropout, no-op Cast, Reshape/Transpose chains */
    {"fuse-linear", pass_fuse_linear, NULL},     /* MatMul/Gemm with a constant weight (+ bias) -> Linear */
    {"fold-batchnorm", pass_fold_batchnorm, NULL},/* BatchNormalization -> a Linear's weights, or scale/shift */
    /* fusions */
    {"fuse-layernorm", pass_fuse_layernorm, NULL},/* decomposed LayerNorm and RMSNorm -> one node each */
    {"fuse-gelu", pass_fuse_gelu, NULL},         /* erf and tanh GELU -> Gelu */
    {"sink-views", pass_simplify, NULL},         /* row permutations through Linears, so QKV is one tensor */
    {"merge-qkv", pass_merge_qkv, NULL},         /* separate Q, K, V Linears on one input -> one Linear */
    {"fuse-attention", NULL, pass_fuse_attention},/* QK^T, scale, Softmax, @V, head split/merge -> Attention */
    {"cleanup", pass_simplify, NULL},            /* the head merge against the head split, out-projection views */
    {"fuse-epilogue", pass_fuse_epilogue, NULL}, /* Linear + GELU/ReLU/ReLU6, Linear + residual Add */
    {"int8-linear", NULL, pass_int8_linear},     /* Linears on quantized inputs -> LinearInt8 (backend decides) */
    {"quant-lookup", NULL, pass_quant_lookup},   /* element-wise chains of one fake-quantized value -> a table */
    {"dce", pass_dce, NULL},                     /* drop what no output needs */
};

const pass_def *pass_pipeline(int *count)
{
    *count = (int)(sizeof pipeline / sizeof pipeline[0]);
    return pipeline;
}

int pass_run(ir_graph *g, const pass_options *opt, vitc_diag *d)
{
    int n;
    const pass_def *p = pass_pipeline(&n);
    for (int i = 0; i < n; i++) {
        rw_explain_begin(opt ? opt->explain : NULL, p[i].name);
        int st = p[i].run_opt ? p[i].run_opt(g, opt, d) : p[i].run(g, d);
        rw_explain_end(g);
        if (st == VITC_OK)
            st = ir_verify(g, d);
        if (st != VITC_OK) {
            if (d->nerrors == 0)
                vitc_error(d, st, NULL, "pass %s failed", p[i].name);
            return st;
        }
        if (opt && opt->hook)
            opt->hook(opt->hook_ctx, p[i].name, g);
    }
    rw_explain_leftovers(opt ? opt->explain : NULL, g);
    return VITC_OK;
}

int pass_run_pipeline(ir_graph *g, pass_hook hook, void *ctx, vitc_diag *d)
{
    pass_options o = {.hook = hook, .hook_ctx = ctx};
    return pass_run(g, &o, d);
}

int pass_name_known(const char *name)
{
    int n;
    const pass_def *p = pass_pipeline(&n);
    if (strcmp(name, "all") == 0)
        return 1;
    for (int i = 0; i < n; i++)
        if (strcmp(p[i].name, name) == 0)
            return 1;
    return 0;
}

void pass_dump_hook(void *ctx, const char *pass, const ir_graph *g)
{
    pass_dump *pd = ctx;
    if (strcmp(pd->which, "all") != 0 && strcmp(pd->which, pass) != 0)
        return;
    FILE *f = pd->out ? pd->out : stderr;
    fprintf(f, "# after %s\n", pass);
    ir_print_text(g, f);
    pd->dumped++;
}
