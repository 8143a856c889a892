/* compare.h: what the files of `vitc compare` share.
 *   cmd_compare.c      the command: inputs, reference, table, exit code
 *   compare_metrics.c  errors, tolerance, seeded random inputs
 *   compare_run.c      compiling to a temporary .so, running a .so on ir_tensors
 *   compare_bisect.c   --bisect: after which pass, and at which tensor, outputs part */
#ifndef VITC_COMPARE_H
#define VITC_COMPARE_H

#include "tools/cli.h"

#define CMP_MAX_INPUTS 64

typedef struct {
    double max_rel;     /* norm-wise: max|out-ref| <= max_rel * max|ref| (INFINITY: not checked) */
    int elementwise;    /* and, when set, numpy's allclose: */
    double rtol, atol;  /* |out-ref| <= atol + rtol * |ref| for every element */
    double min_cosine;  /* and cosine >= min_cosine, when > 0 */
} cmp_tolerance;

typedef struct {
    const char *onnx, *so;  /* so NULL: compiled here into tmpdir */
    char *specs[CMP_MAX_INPUTS];
    int nspecs;
    cmp_tolerance tol;
    int rtol_given, atol_given, max_rel_given;
    const char *reference;  /* --reference: "onnxruntime" (ONNX Runtime), else the interpreter */
    int json;
    int bisect;
    long long batch;        /* random inputs: 0 = choose */
    long long seed;         /* random inputs: from 0 to INT64_MAX */
    long long nthreads;
    char tmpdir[256];       /* temporary .so files, "" until made */
    char precision[8];      /* the model's ("bf16", ...): --bisect's cuts are compiled alike; "": fp32 CPU */
    const struct cg_backend *backend; /* the model's backend: the cuts are compiled alike */
    /* the input shape compared, for a model with a dynamic image size: --shapes, else the --input files' */
    cli_shapes shapes;
} cmp_opts;

/* o->onnx imported at the shape compared (o->shapes), shapes inferred; NULL
 * after reporting, *status the exit code. */
ir_graph *cmp_load_model(const cmp_opts *o, int *status);

typedef struct {
    double max_abs;     /* max |out - ref|; NaN when some element is NaN/inf on one side only */
    double max_ref;     /* max |ref| */
    double max_rel;     /* max_abs / max_ref (max_abs when the reference is all zeros) */
    double cosine;      /* of out and ref as vectors */
    int64_t worst;      /* flat index of the largest difference (or the first non-finite one) */
    int64_t nonfinite;  /* elements NaN or infinite in one of them only */
    int64_t beyond;     /* elements beyond the element-wise tolerance (when it is checked) */
    int64_t count;      /* elements compared */
    int shape_mismatch;
} cmp_metrics;

/* ---- compare_metrics.c ---- */
/* Measures out against ref (any dtypes, compared as double); t for the
 * element-wise count. */
void cmp_measure(const ir_tensor *out, const ir_tensor *ref, const cmp_tolerance *t, cmp_metrics *m);
/* 1 if m is within t. */
int cmp_passes(const cmp_metrics *m, const cmp_tolerance *t);
/* A flat index of t as "[i,j,k]". */
char *cmp_index_str(const ir_tensor *t, int64_t flat, char *buf, size_t n);
/* Fills a float tensor with standard normal values from seed (the same on
 * every machine); integer tensors are left as they are (zeros). */
void cmp_random_fill(ir_tensor *t, uint64_t seed);

/* ---- compare_run.c ---- */
/* The batch that inputs (in g's input order) imply; 1 if none depends on it. */
int64_t cmp_batch_of(const ir_graph *g, const ir_tensor *inputs);
/* Makes o->tmpdir if needed and joins name to it into path. */
int cmp_temp_path(cmp_opts *o, const char *name, char *path, size_t n);
/* Removes o->tmpdir and what is in it. */
void cmp_temp_cleanup(cmp_opts *o);
/* Compiles g (imported, shapes inferred; the passes run here and change it)
 * into the .so at path, for batches up to max_batch.  Returns an exit code. */
int cmp_compile_graph(const cmp_opts *o, ir_graph *g, const char *path, int64_t max_batch);
/* Runs m on inputs given in the order of g's inputs (matched by name, else by
 * position); outs[vitc_model_num_outputs(m)] get its outputs, in its order.
 * Returns an exit code, the error printed. */
int cmp_run_so(const cmp_opts *o, vitc_model *m, const ir_graph *g, const ir_tensor *inputs, ir_tensor *outs);

/* --reference onnxruntime: runs o->onnx in ONNX Runtime through Python
 * ($VITC_PYTHON, else python3) on inputs (g's order); ref[g->noutputs] get its
 * outputs and version its version.  A quantized model (QuantizeLinear and
 * the rest) runs with ONNX Runtime's graph optimizations off, for they fuse
 * its Q/DQ pairs into int8 kernels that round otherwise than ONNX's ops;
 * version then says so.  Returns an exit code, the error printed. */
int cmp_reference_ort(cmp_opts *o, const ir_graph *g, const ir_tensor *inputs, ir_tensor *ref, char *version,
                      size_t vlen);

/* ---- compare_bisect.c ---- */
/* Interprets g after each pass of the pipeline (which runs on g) and prints
 * the error against ref (the imported graph's outputs, in g's output order)
 * and the first pass beyond tolerance.  Returns an exit code. */
int cmp_bisect_passes(ir_graph *g, const cmp_opts *o, const ir_tensor *inputs, const ir_tensor *ref);
/* For a compiled model whose output g->outputs[failing] fails: compiles the
 * imported graph cut at the tensors that output depends on (binary search in
 * node order) and reports the first one whose compiled value leaves
 * tolerance.  g is the imported graph, unchanged.  Returns an exit code. */
int cmp_bisect_nodes(const ir_graph *g, cmp_opts *o, const ir_tensor *inputs, int failing);

#endif
