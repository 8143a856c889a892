/* compile.c: cg_compile, which runs a backend's vtable (codegen/backend.h),
 * and the stand-ins for backends this vitc was built without.
 *
 * Phases, each timed for --verbose by the slot that ends it:
 *   options   the backend's own (begin), then --batch           cg_begin
 *   check     every node supported (every unsupported node      cg_add, per graph
 *             reported at once), then the backend's whole-graph check
 *   plan      the backend's plan slot over codegen/plan.c
 *   emit      emit_node for every node not skipped, in node order,
 *             then end_graph
 *   finish    the backend's module or program, packaged         cg_end
 *             into the .so */
#include "codegen/backend.h"
#include "ir/interp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

struct cg_session {
    const cg_backend *be;
    cg_ctx_head *c;
    vitc_diag *d;
    int added;
};

int cg_begin(const cg_backend *be, const cg_options *opt, int n, vitc_diag *d, cg_session **out)
{
    *out = NULL;
    if (be->unavailable)
        return vitc_error(d, VITC_BAD_INPUT, NULL, "%s", be->unavailable);
    if (n < 1 || (n > 1 && !be->variants))
        return vitc_error(d, VITC_BAD_INPUT, NULL,
                          "%d input shapes: the %s backend compiles one shape per .so (compile one .so per shape)", n,
                          be->title);
    cg_session *s = calloc(1, sizeof *s);
    cg_ctx_head *c = calloc(1, be->ctx_size);
    if (!s || !c) {
        free(s), free(c);
        return vitc_error(d, VITC_INTERNAL, NULL, "out of memory");
    }
    s->be = be, s->c = c, s->d = d;
    c->opt = opt;
    c->d = d;
    c->max_batch = opt->max_batch;
    c->t = (timer){.start = opt->start_s > 0 ? opt->start_s : now_s(), .last = now_s(), .verbose = opt->verbose};
    c->knobs = opt->knobs ? *opt->knobs : cg_knobs_read();
    c->nvariants = n;
    c->variant = -1;
    int st = be->begin ? be->begin(c) : VITC_OK;
    if (st == VITC_OK && opt->max_batch < 1)
        st = vitc_error(d, VITC_BAD_INPUT, NULL, "--batch must be at least 1");
    *out = s;
    return st;
}

int cg_add(cg_session *s, ir_graph *g)
{
    const cg_backend *be = s->be;
    cg_ctx_head *c = s->c;
    if (s->added >= c->nvariants)
        return vitc_error(s->d, VITC_INTERNAL, NULL, "more graphs than the %d the compile began with", c->nvariants);
    if (sweep(be, g, s->d))
        return s->d->status;
    c->g = g;
    c->variant = s->added++;
    c->max_batch = g->fixed_batch > 0 ? 1 : c->opt->max_batch; /* a fixed batch: the code runs as at batch 1 */
    int st = be->plan(c);
    for (int i = 0; st == VITC_OK && s->d->status == VITC_OK && i < g->nnodes; i++)
        if (!c->plan.skip || !c->plan.skip[i])
            st = be->emit_node(c, i);
    if (st == VITC_OK)
        st = s->d->status;
    if (be->end_graph) { /* the backend has kept what it needs of g */
        if (st == VITC_OK)
            st = be->end_graph(c);
        cg_plan_free(&c->plan);
        c->plan = (cg_plan){0};
        c->g = NULL;
    }
    return st;
}

int cg_end(cg_session *s, int st)
{
    if (!s)
        return st;
    const cg_backend *be = s->be;
    cg_ctx_head *c = s->c;
    const cg_options *opt = c->opt;
    if (st == VITC_OK && s->added != c->nvariants)
        st = vitc_error(s->d, VITC_INTERNAL, NULL, "%d graphs compiled of the %d the compile began with", s->added,
                        c->nvariants);
    if (st == VITC_OK && be->finish)
        st = be->finish(c);
    struct stat sb;
    if (st == VITC_OK && opt->verbose >= 0 && stat(opt->output, &sb) == 0) /* every phase's line, or none, before */
        fprintf(stderr, "vitc: wrote %s (%.1f MB) in %.3f s%s\n", opt->output, (double)sb.st_size / 1e6,
                now_s() - c->t.start, opt->start_s > 0 ? " (import to link)" : "");
    if (be->end)
        be->end(c);
    cg_plan_free(&c->plan);
    free(c);
    free(s);
    return st;
}

int cg_int8_mode(const cg_backend *be, const cg_options *opt, int *pairs)
{
    *pairs = 0;
    return be && be->int8 ? be->int8(opt, pairs) : 0;
}

int cg_compile(const cg_backend *be, ir_graph *g, const cg_options *opt, vitc_diag *d)
{
    cg_session *s;
    int st = cg_begin(be, opt, 1, d, &s);
    if (st == VITC_OK)
        st = cg_add(s, g);
    return cg_end(s, st);
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
    if (n->op == IR_OP_RESIZE) {
        char what[200] = "";
        if (!ir_resize_supported(n, what, sizeof what))
            snprintf(why, len, "Resize is folded at compile time where its input is a constant, but this one cannot "
                               "be: %s", what);
        else
            snprintf(why, len, "Resize is folded at compile time where its input is a constant; the %s backend does not "
                               "run it on computed tensors yet", title);
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
                : "folds where its inputs are constants, and on computed tensors runs where its scales and zero points "
                  "are constants (as DequantizeLinear -> the f32 op -> QuantizeLinear)";
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
