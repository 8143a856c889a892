/* passes.h: graph-to-graph passes and the pipeline that orders them.
 *
 * The pipeline (pipeline.c) canonicalises an imported graph (constant and
 * shape folding, no-op removal, view chains, patch-embedding Conv, BatchNorm)
 * and then fuses what a ViT is made of into the ops at the end of ops.def
 * (Linear, Attention) and into LayerNormalization and Gelu.  Every pass keeps
 * the graph's shapes inferred and its outputs' names, and the graph is
 * verified after each pass. */
#ifndef VITC_PASSES_H
#define VITC_PASSES_H

#include "ir/ir.h"

#include <stdio.h>


/* Called after each pass of the pipeline (for dumps and bisection). */
typedef void (*pass_hook)(void *ctx, const char *pass, const ir_graph *g);

/* Runs the pipeline over a graph whose shapes are inferred, verifying the
 * graph after each pass.  hook may be NULL.  Returns a status. */
int pass_run_pipeline(ir_graph *g, pass_hook hook, void *ctx, vitc_diag *d);

/* ---- what the fusions did: --explain-fusion ----
 * While a pipeline runs with a collector, every pattern matcher records each
 * candidate that did not fuse (its anchor node and the first condition that
 * failed) and counts the ones that did.  After the run, only candidates whose
 * anchor node is still in the graph are kept (a later pass may have fused it
 * after all), one entry per pass and node. */
typedef struct pass_explain pass_explain;
pass_explain *pass_explain_new(void);
void pass_explain_free(pass_explain *e);
/* Number of candidates that did not fuse. */
int pass_explain_misses(const pass_explain *e);
/* Prints "PASS: N fused" lines, then one line per miss:
 * "PASS: node 'NAME' (OpType): reason"; then, after a whole pipeline, one
 * line per op a fusion exists for (Softmax, Sigmoid, Pow, Sqrt, Reciprocal,
 * MatMul, Erf) left outside fused ops: "left over: node 'NAME' (OpType):
 * the candidate that did not fuse at it or a few nodes from it, or that no
 * fusion took it as a candidate". */
void pass_explain_print(const pass_explain *e, FILE *f);

/* ---- running the pipeline with options ---- */
/* Which Linears int8-linear makes LinearInt8 (the backend's choice, from
 * --precision): none; those a quantized model computes in integers (their
 * input fake-quantized, their weight on an int8 grid); those and every other
 * (--precision int8: weights per column, inputs per row at run time).  A
 * backend that takes either also runs Attention with fake-quant points
 * (fuse-attention). */
typedef enum { PASS_INT8_NONE = 0, PASS_INT8_QUANTIZED = 1, PASS_INT8_ALL = 2 } pass_int8;

typedef struct {
    pass_hook hook;        /* after each pass, may be NULL */
    void *hook_ctx;
    pass_explain *explain; /* NULL: candidates are not recorded */
    pass_int8 int8;
    /* PASS_INT8_ALL: the weights it quantizes with each column's step
     * chosen so that in every pair of k (2i, 2i + 1; the last k, where K is
     * odd, alone) the positive multiples sum to at most 128 and the
     * negative ones to at least -128 (so a0 w0 + a1 w1 fits int16 for u8 a:
     * VPMADDUBSW's pair sums, which a backend asks for, cg_int8_mode). */
    int int8_pairs;
    /* --calibrate: ncalib samples of the graph's inputs (g->ninputs tensors
     * each, one after another); with PASS_INT8_ALL the inputs of the Linears
     * it quantizes get static ranges from them instead of per-row ones */
    const ir_tensor *calib;
    int ncalib;
} pass_options;

typedef struct {
    const char *name; /* for dumps and --dump-after, never for lookup */
    int (*run)(ir_graph *g, vitc_diag *d);
    int (*run_opt)(ir_graph *g, const pass_options *o, vitc_diag *d); /* instead of run: a pass with options */
} pass_def;

/* pass_run_pipeline with options; opt may be NULL. */
int pass_run(ir_graph *g, const pass_options *opt, vitc_diag *d);
/* The pipeline's passes, in order; *count gets their number. */
const pass_def *pass_pipeline(int *count);

/* ---- --dump-after=PASS|all ----
 * A hook that prints the graph (ir_print_text) to out after the pass named
 * `which`, or after every pass when `which` is "all", each dump headed by
 * "# after PASS".  Set ctx to a pass_dump. */
typedef struct {
    const char *which;
    FILE *out;
    int dumped; /* how many dumps were printed */
} pass_dump;
void pass_dump_hook(void *ctx, const char *pass, const ir_graph *g);
/* 1 if name is "all" or the name of a pass of the pipeline. */
int pass_name_known(const char *name);

/* ---- the passes, in pipeline order (see pipeline.c) ---- */
int pass_fold(ir_graph *g, vitc_diag *d);
/* fold's first half alone (known shape values as constants), for tests that
 * compile a graph unfused */
int pass_fold_shapes(ir_graph *g, vitc_diag *d);
/* quantized ONNX on computed tensors -> f32 ops that compute it exactly (quant.c) */
int pass_lower_quant(ir_graph *g, vitc_diag *d);
/* lower-quant's first step: ONNX Runtime's QOperator ops (QLinear*, QGemm)
 * -> DequantizeLinear, the float op, QuantizeLinear; then fold (qop.c) */
int pass_lower_qop(ir_graph *g, vitc_diag *d);
/* Linears on fake-quantized inputs (and with --precision int8 every Linear)
 * -> LinearInt8; what is left of DynamicFakeQuant -> f32 ops (quant.c) */
int pass_int8_linear(ir_graph *g, const pass_options *o, vitc_diag *d);
/* Element-wise chains whose one varying input is fake-quantized (at most
 * 256 values) -> QuantLookup with the chain's table, where the backend has
 * int8 kernels (lookup.c) */
int pass_quant_lookup(ir_graph *g, const pass_options *o, vitc_diag *d);
/* The ranges [lo, hi] (range[i], each holding 0) of values[0..nvalues-1]
 * over the interpreter's runs of g on ninputs samples (g->ninputs tensors
 * each): the rarest 0.01% of elements on each side left out (calib.c). */
int pass_calib_ranges(const ir_graph *g, const ir_tensor *inputs, int ninputs, const int *values, int nvalues,
                      float (*range)[2], vitc_diag *d);
int pass_simplify(ir_graph *g, vitc_diag *d);
int pass_patchify(ir_graph *g, vitc_diag *d);
int pass_fuse_linear(ir_graph *g, vitc_diag *d);
int pass_fold_batchnorm(ir_graph *g, vitc_diag *d);
int pass_fuse_layernorm(ir_graph *g, vitc_diag *d);
int pass_fuse_gelu(ir_graph *g, vitc_diag *d);
int pass_merge_qkv(ir_graph *g, vitc_diag *d);
/* with options: a backend with int8 kernels (o->int8) also fuses quantized
 * attention, its FakeQuants the Attention's fake-quant points */
int pass_fuse_attention(ir_graph *g, const pass_options *o, vitc_diag *d);
int pass_fuse_epilogue(ir_graph *g, vitc_diag *d);
int pass_dce(ir_graph *g, vitc_diag *d);

#endif
