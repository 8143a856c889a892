/* backend.h: the interface a code generator fills in, and the shared driver
 * that runs it (codegen/compile.c).
 *
 * A backend is a cg_backend vtable filled with designated initializers; the
 * LLVM CPU backend and the NVRTC CUDA backend are two instances.  The driver
 * owns what every backend needs: the unsupported-node sweep through
 * supports(), the --batch check, the phase timer, the node loop in node order;
 * codegen/plan.c owns the backend-neutral planning (uses, views).  A backend
 * writes only what is its own: its checks, its plan (storage, memory), the
 * code of one node, and the module or program it packages. */
#ifndef VITC_BACKEND_H
#define VITC_BACKEND_H

#include "codegen/knobs.h"
#include "codegen/progress.h"
#include "ir/ir.h"

typedef struct {
    const char *output;     /* the .so to write (atomically: temp file + rename) */
    const char *source;     /* the ONNX file, for the descriptor and messages */
    int64_t max_batch;      /* --batch N: the largest batch the .so accepts */
    int opt_level;          /* 0..3 */
    const char *cpu;        /* NULL: the host CPU */
    const char *features;   /* NULL: the host's features */
    int external_weights;   /* --weights external: write OUTPUT.weights beside it */
    int verbose;            /* progress lines on stderr: 1 every phase (--verbose), 0 the phases when
                             * stderr is a terminal, -1 none (--quiet); but for --quiet, the
                             * compile ends with one line saying what it wrote */
    double start_s;         /* now_s() when the compile began (import), for the total; 0: at cg_compile */
    const cg_knobs *knobs;  /* the VITC_* environment variables (cg_knobs_read); NULL: read by cg_compile */
    /* CUDA backend */
    const char *precision;  /* "fp32", "tf32", "fp16" or "bf16"; NULL: bf16 */
    int emit_source;        /* write the generated CUDA program to output instead of a .so */
} cg_options;

/* Backend-neutral planning (codegen/plan.c), per value of the graph. */
typedef struct {
    int nvalues;  /* the graph's value count when it was built */
    int *nuses;   /* node input slots reading it, plus graph-output mentions */
    int *reader;  /* the last node reading it, -1 if none */
    int *view_of; /* the output of a view node (cg_is_view): that node's input 0, else -1 */
    unsigned char *skip; /* per node: no code of its own (a view, work done by another node's
                          * code); the driver does not call emit_node for it */
} cg_plan;

/* The fields every backend context begins with, in this order: the driver
 * fills them and hands the context to the slots as a cg_ctx_head *.  A
 * backend's context is `struct { CG_CTX_HEAD ...its own fields... }`. */
#define CG_CTX_HEAD                                                              \
    ir_graph *g;           /* the optimised graph (shapes inferred, passes run) */ \
    const cg_options *opt;                                                       \
    vitc_diag *d;                                                                \
    int64_t max_batch;     /* opt->max_batch, checked to be at least 1 */       \
    cg_plan plan;          /* codegen/plan.c, built by the backend's plan slot */ \
    timer t;               /* the compile's phase timer (codegen/progress.h) */  \
    cg_knobs knobs;        /* opt->knobs, or the environment's at cg_compile */       \
    int variant;           /* the graph being compiled: 0 .. nvariants - 1 */    \
    int nvariants;         /* graphs compiled into the one .so (cg_begin) */

typedef struct {
    CG_CTX_HEAD
} cg_ctx_head;

typedef struct cg_backend {
    const char *name;  /* "cpu", "cuda": --target */
    const char *title; /* "CPU", "CUDA": in "not supported by the %s backend" */
    /* Non-NULL in a stand-in for a backend this vitc was built without: what
     * cg_compile answers, and the reason supports() gives for every node. */
    const char *unavailable;
    size_t ctx_size;   /* sizeof the backend's context (CG_CTX_HEAD first); zeroed by the driver */
    /* Required.  1 if the backend can compile n; otherwise 0 with the reason
     * in why.  The driver asks about every node and reports every "no". */
    int (*supports)(const ir_graph *g, const ir_node *n, char *why, size_t whylen);
    /* Checks of the whole graph beside the per-node sweep (CUDA: the types of
     * the graph's inputs and outputs): reports each problem through d and
     * returns how many.  NULL: none. */
    int (*check)(const ir_graph *g, vitc_diag *d);
    /* Reads the backend's own options before the shared ones are checked
     * (CUDA: --precision).  Returns status.  NULL: nothing to read. */
    int (*begin)(cg_ctx_head *c);
    /* Required.  Everything before the node loop: the target, cg_plan_build
     * (views and uses), the backend's storage and memory plan, the "plan"
     * phase line.  Sets plan.skip for nodes that make no code.  Returns status. */
    int (*plan)(cg_ctx_head *c);
    /* Required.  The code of node i (not skipped), called in node order while
     * the status is VITC_OK; a backend dispatches on ir_op_family_of.  Returns status. */
    int (*emit_node)(cg_ctx_head *c, int i);
    /* After the node loop of each graph, before the driver lets the graph go:
     * what the backend keeps of it (CPU: the graph-output copies, its run()
     * and its descriptor's fields), and the state of one graph freed, for
     * the next plan slot starts another.  Returns status.  NULL: nothing. */
    int (*end_graph)(cg_ctx_head *c);
    /* After the last graph: the module or program, the .so through
     * codegen/package.h, with their phase lines; c->g is NULL here.  Returns
     * status.  NULL: nothing more (the compile writes no file). */
    int (*finish)(cg_ctx_head *c);
    /* 1 when one .so may hold several graphs, one per input shape (the plan
     * slot is then called once per graph, end_graph after each); otherwise
     * cg_begin refuses more than one. */
    int variants;
    /* Frees what the context owns, whether the compile succeeded or not
     * (the driver frees the plan and the context itself).  NULL: nothing. */
    void (*end)(cg_ctx_head *c);
    /* What generates its code, for `vitc --version` ("LLVM 19.1.7",
     * "NVRTC 13.0"; or why it is not there).  NULL: nothing to say. */
    const char *(*describe)(void);
    /* Which Linears the pass pipeline makes LinearInt8 for these options (a
     * pass_int8 of passes/passes.h), and in *pairs (left 0: no) whether
     * the weights it quantizes must keep their pairs' sums within int8
     * (pass_options.int8_pairs).  NULL: none. */
    int (*int8)(const cg_options *opt, int *pairs);
} cg_backend;

/* be's answer to int8 for opt (PASS_INT8_NONE without the slot): what the
 * pipeline's pass_options.int8 must be for a graph compiled with them. */
int cg_int8_mode(const cg_backend *be, const cg_options *opt, int *pairs);

/* Compiles an optimised graph (shapes inferred, passes run) into
 * opt->output with backend be.  Returns status; every problem is in d.
 * The same as cg_begin for one graph, cg_add and cg_end. */
int cg_compile(const cg_backend *be, ir_graph *g, const cg_options *opt, vitc_diag *d);

/* One .so from several graphs of one model, each for other input shapes
 * (vitc compile --shapes): cg_begin for n graphs, cg_add for each in turn
 * (the caller may free a graph once cg_add returns where the backend has an
 * end_graph slot; otherwise it keeps its one graph until cg_end), then cg_end, which writes the .so when every step succeeded
 * (status VITC_OK) and frees the session either way.  Each returns status,
 * the problems in d.  The graphs are the variants of the .so's descriptor, in
 * the order added: the first is the one a runtime that predates variants runs. */
typedef struct cg_session cg_session;
int cg_begin(const cg_backend *be, const cg_options *opt, int n, vitc_diag *d, cg_session **out);
int cg_add(cg_session *s, ir_graph *g);
int cg_end(cg_session *s, int status);

/* Both always exist: in a vitc built without one (-DVITC_LLVM=OFF,
 * -DVITC_CUDA=OFF) it is a stand-in whose every node is unsupported, so that
 * cg_compile fails with VITC_BAD_INPUT saying how vitc was built
 * (codegen/compile.c). */
extern const cg_backend cg_llvm_backend; /* "cpu": VITC_HAVE_LLVM */
extern const cg_backend cg_cuda_backend; /* "cuda": VITC_HAVE_CUDA */
/* Every backend, in the order --version lists them, NULL-terminated, and the
 * one whose name (its --target, the target a .so records) is name, or NULL:
 * the one place that maps a target's name to its backend (compile.c). */
extern const cg_backend *const cg_backends[];
const cg_backend *cg_backend_named(const char *name);
/* For the ops no backend runs on computed tensors (Resize, and the
 * quantized ops of IR_FAM_QUANT that the lower-quant pass left: folded on
 * constants): 1 with why saying so for the backend titled `title` (for a
 * Resize the interpreter cannot run, what it lacks), 0 for other ops.  (Pad,
 * Tile, GatherND and ScatterND run as the strided moves of codegen/moves.h.) */
int cg_refuse_folded_only(const ir_node *n, const char *title, char *why, size_t len);

/* ---- backend-neutral planning (codegen/plan.c) ---- */

/* Fills c->plan for the graph as it is now: uses, last readers, views by
 * cg_is_view under storage types stored (NULL: each value's dtype); skip is
 * all 0.  Returns status. */
int cg_plan_build(cg_ctx_head *c, const ir_dtype *stored);
void cg_plan_free(cg_plan *p);
/* 1 if node n's output 0 shares input 0's bytes: an OPF_VIEW op whose input
 * 0 and output 0 are stored alike (stored[v], NULL: the dtype), and whose
 * Dropout mask output, if any, nobody reads (nuses). */
int cg_is_view(const ir_graph *g, const ir_node *n, const int *nuses, const ir_dtype *stored);

#endif
