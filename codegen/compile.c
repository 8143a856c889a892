/* compile.c: cg_compile, which runs a backend's vtable (codegen/backend.h),
 * and the stand-ins for backends this vitc was built without.
 *
 * Phases, each timed for --verbose by the slot that ends it:
 *   check     every node supported (every unsupported node reported at
 *             once), then the backend's whole-graph check
 *   options   the backend's own (begin), then --batch
 *   plan      the backend's plan slot over codegen/plan.c
 *   emit      emit_node for every node not skipped, in node order
 *   finish    the backend's module or program, packaged into the .so */
#include "codegen/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Every node the backend does not support, reported at once: one line per
 * op type and reason, naming its first node and how many more there are. */
static int sweep(const cg_backend *be, const ir_graph *g, vitc_diag *d)
{
    enum { MAX_GROUPS = 64 };
    struct {
        int node, count;
        char why[256];
    } groups[MAX_GROUPS];
    int ngroups = 0, bad = 0;
    for (int i = 0; i < g->nnodes; i++) {
        char why[256];
        if (be->supports(g, &g->nodes[i], why, sizeof why))
            continue;
        bad++;
        int k = 0;
        while (k < ngroups && !(g->nodes[groups[k].node].op == g->nodes[i].op && strcmp(groups[k].why, why) == 0))
            k++;
        if (k < ngroups) {
            groups[k].count++;
        } else if (ngroups < MAX_GROUPS) {
            groups[ngroups].node = i, groups[ngroups].count = 1;
            snprintf(groups[ngroups++].why, sizeof groups[0].why, "%s", why);
        } else {
            vitc_error(d, VITC_BAD_INPUT, &g->nodes[i], "not supported by the %s backend: %s", be->title, why);
        }
    }
    for (int k = 0; k < ngroups; k++) {
        char more[96] = "";
        if (groups[k].count > 1)
            snprintf(more, sizeof more, " (nor %d more %s node%s)", groups[k].count - 1,
                     ir_op_name(g->nodes[groups[k].node].op), groups[k].count > 2 ? "s" : "");
        vitc_error(d, VITC_BAD_INPUT, &g->nodes[groups[k].node], "not supported by the %s backend%s: %s", be->title,
                   more, groups[k].why);
    }
    if (be->check)
        bad += be->check(g, d);
    return bad;
}

int cg_compile(const cg_backend *be, ir_graph *g, const cg_options *opt, vitc_diag *d)
{
    if (be->unavailable)
        return vitc_error(d, VITC_BAD_INPUT, NULL, "%s", be->unavailable);
    timer t = {.start = opt->start_s > 0 ? opt->start_s : now_s(), .last = now_s(), .verbose = opt->verbose};
    if (sweep(be, g, d))
        return d->status;
    cg_ctx_head *c = calloc(1, be->ctx_size);
    if (!c)
        return vitc_error(d, VITC_INTERNAL, NULL, "out of memory");
    c->g = g;
    c->opt = opt;
    c->d = d;
    c->max_batch = opt->max_batch;
    if (g->fixed_batch > 0)
        c->max_batch = 1; /* the export fixed the batch: no shape depends on one, the code runs as at batch 1 */
    c->t = t;
    c->knobs = opt->knobs ? *opt->knobs : cg_knobs_read();
    int st = be->begin ? be->begin(c) : VITC_OK;
    if (st == VITC_OK && opt->max_batch < 1)
        st = vitc_error(d, VITC_BAD_INPUT, NULL, "--batch must be at least 1");
    if (st == VITC_OK)
        st = be->plan(c);
    for (int i = 0; st == VITC_OK && d->status == VITC_OK && i < g->nnodes; i++)
        if (!c->plan.skip || !c->plan.skip[i])
            st = be->emit_node(c, i);
    if (st == VITC_OK)
        st = d->status;
    if (st == VITC_OK && be->finish)
        st = be->finish(c);
    if (st == VITC_OK && (opt->verbose > 0 || (opt->verbose == 0 && isatty(2))))
        fprintf(stderr, "vitc: wrote %s in %.3f s%s\n", opt->output, now_s() - c->t.start,
                opt->start_s > 0 ? " (import to link)" : "");
    if (be->end)
        be->end(c);
    cg_plan_free(&c->plan);
    free(c);
    return st;
}

#if !defined(VITC_HAVE_LLVM) || !defined(VITC_HAVE_CUDA)
/* A backend that is not in this build: its message says how to get one. */
static int unavailable(const cg_backend *be, char *why, size_t len)
{
    snprintf(why, len, "%s", be->unavailable);
    return 0;
}
#endif

#ifndef VITC_HAVE_LLVM
static int no_llvm(const ir_graph *g, const ir_node *n, char *why, size_t len) { return unavailable(&cg_llvm_backend, why, len); }
const cg_backend cg_llvm_backend = {.name = "cpu", .title = "CPU", .supports = no_llvm,
    .unavailable = "this vitc was built without the CPU backend (VITC_LLVM=OFF): compile with --target cuda"};
#endif

#ifndef VITC_HAVE_CUDA
static int no_cuda(const ir_graph *g, const ir_node *n, char *why, size_t len) { return unavailable(&cg_cuda_backend, why, len); }
const cg_backend cg_cuda_backend = {.name = "cuda", .title = "CUDA", .supports = no_cuda,
    .unavailable = "--target cuda: this vitc was built without the CUDA backend (configure with -DVITC_CUDA=ON)"};
#endif

const cg_backend *const cg_backends[] = {&cg_llvm_backend, &cg_cuda_backend, NULL};

int cg_refuse_folded_only(const ir_node *n, const char *title, char *why, size_t len)
{
    if (n->op == IR_OP_TILE) {
        snprintf(why, len, "Tile is run by the %s backend only as the Expand it becomes where the repeated axes are 1, "
                           "or folded where its input is a constant", title);
        return 1;
    }
    if (n->op == IR_OP_PAD || n->op == IR_OP_GATHER_ND || n->op == IR_OP_SCATTER_ND) {
        snprintf(why, len, "%s is folded at compile time where its inputs are constants; the %s backend does not run "
                           "it on computed tensors yet", ir_op_name(n->op), title);
        return 1;
    }
    if (ir_op_family_of(n->op) == IR_FAM_QUANT) {
        /* what passes/quant.c lowers to f32 ops, and so what is left here */
        const char *runs =
            n->op == IR_OP_QUANTIZE_LINEAR || n->op == IR_OP_DEQUANTIZE_LINEAR
                ? "folds where its inputs are constants, and on computed tensors runs only as a QuantizeLinear -> "
                  "DequantizeLinear pair with one scale and zero point"
            : n->op == IR_OP_MATMUL_INTEGER || n->op == IR_OP_CONV_INTEGER
                ? "folds where its inputs are constants, and on computed tensors runs where its weight is a constant, "
                  "A's zero point one number and the sums exact in f32 (or in two halves)"
            : n->op == IR_OP_DYNAMIC_QUANTIZE_LINEAR
                ? "runs on f32 inputs"
                : "folds where its inputs are constants; on computed tensors only the reference interpreter runs it";
        snprintf(why, len, "%s (quantized ONNX) %s; the %s backend does not run this one", ir_op_name(n->op), runs,
                 title);
        return 1;
    }
    return 0;
}

const cg_backend *cg_backend_named(const char *name)
{
    for (int i = 0; name && cg_backends[i]; i++)
        if (strcmp(cg_backends[i]->name, name) == 0)
            return cg_backends[i];
    return NULL;
}
