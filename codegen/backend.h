/* backend.h: what a code generator offers the compiler driver.  A backend is
 * a vtable of functions filled with designated initializers; the LLVM CPU
 * backend and the NVRTC CUDA backend are instances of it. */
#ifndef VITC_BACKEND_H
#define VITC_BACKEND_H

#include "ir/ir.h"

typedef struct {
    const char *output;     /* the .so to write (atomically: temp file + rename) */
    const char *source;     /* the ONNX file, for the descriptor and messages */
    int64_t max_batch;      /* --batch N: the largest batch the .so accepts */
    int opt_level;          /* 0..3 */
    const char *cpu;        /* NULL: the host CPU */
    const char *features;   /* NULL: the host's features */
    int external_weights;   /* --weights external: write OUTPUT.weights beside it */
    int verbose;            /* progress lines on stderr */
    /* CUDA backend */
    const char *precision;  /* "fp32", "tf32", "fp16" or "bf16"; NULL: fp16 */
    int emit_source;        /* write the generated CUDA program to output instead of a .so */
} cg_options;

typedef struct cg_backend {
    const char *name; /* "cpu", "cuda" */
    /* 1 if the backend can compile n; otherwise 0 with the reason in why. */
    int (*supports)(const ir_graph *g, const ir_node *n, char *why, size_t whylen);
    /* Compiles an optimised graph (shapes inferred, passes run) into opt->output. */
    int (*compile)(ir_graph *g, const cg_options *opt, vitc_diag *d);
} cg_backend;

/* Both always exist: in a vitc built without one (-DVITC_LLVM=OFF,
 * -DVITC_CUDA=OFF) it is a stand-in whose every node is unsupported and
 * whose compile fails with VITC_BAD_INPUT saying how vitc was built
 * (codegen/driver.c). */
extern const cg_backend cg_llvm_backend; /* "cpu": VITC_HAVE_LLVM */
extern const cg_backend cg_cuda_backend; /* "cuda": VITC_HAVE_CUDA */

#endif
