/* compare_bisect.c: `vitc compare --bisect`, finding where outputs part.
 *
 * Over the passes: the reference interpreter runs the graph after each pass
 * of the pipeline, on the same inputs, against the imported graph's outputs;
 * the first pass that moves them beyond tolerance is named.
 *
 * Over the tensors, for a compiled model that fails: the imported graph is
 * cut at one of its tensors (that tensor made the only output; everything it
 * does not need is dropped by the passes), compiled, run, and compared with
 * the interpreter's value of that tensor.  A binary search in node order
 * over the tensors the failing output depends on finds the first one that
 * leaves tolerance, in log2(N) compilations.  It assumes that once a tensor
 * is wrong everything after it is; a cut also stops fusions across the cut
 * tensor, so it checks the code for a slightly different graph. */
#include "tools/compare.h"

#include "ir/interp.h"
#include "passes/passes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- over the passes ---- */

typedef struct {
    const cmp_opts *o;
    const ir_tensor *inputs;     /* in the imported graph's input order */
    const char **in_names, **out_names;
    int nin, nout;
    const ir_tensor *ref;
    const char *first_bad;       /* the first pass beyond tolerance */
    int status;
} pass_bisect;

/* Interprets g (after a pass) on the reference inputs and prints the worst
 * output error against the imported graph's outputs. */
static void after_pass(void *arg, const char *pass, const ir_graph *g)
{
    pass_bisect *b = arg;
    if (b->status != VITC_OK)
        return;
    ir_tensor *in = calloc((size_t)g->ninputs + 1, sizeof *in), *out = calloc((size_t)g->noutputs + 1, sizeof *out);
    if (!in || !out) {
        b->status = VITC_INTERNAL;
        free(in);
        free(out);
        return;
    }
    for (int i = 0; i < g->ninputs; i++) { /* matched to the imported inputs by name */
        int k = 0;
        while (k < b->nin && strcmp(b->in_names[k], g->values[g->inputs[i]].name) != 0)
            k++;
        if (k == b->nin) {
            printf("  after %-22s input '%s' is not an input of the imported graph\n", pass,
                   g->values[g->inputs[i]].name);
            b->status = VITC_INTERNAL;
            goto done;
        }
        in[i] = b->inputs[k]; /* borrowed */
    }
    vitc_diag d;
    vitc_diag_init(&d, b->o->onnx);
    if (ir_interpret(g, in, out, NULL, NULL, &d) != VITC_OK) {
        printf("  after %-22s the interpreter failed (above)\n", pass);
        b->status = d.status;
        goto done;
    }
    double worst = 0;
    const char *worst_name = "";
    int ok = 1;
    for (int i = 0; i < g->noutputs; i++) {
        const char *name = g->values[g->outputs[i]].name;
        int k = 0;
        while (k < b->nout && strcmp(b->out_names[k], name) != 0)
            k++;
        if (k == b->nout)
            k = i < b->nout ? i : 0;
        cmp_metrics m;
        cmp_measure(&out[i], &b->ref[k], &b->o->tol, &m);
        ok &= cmp_passes(&m, &b->o->tol);
        if (!(m.max_rel <= worst)) {
            worst = m.max_rel;
            worst_name = name;
        }
    }
    printf("  after %-22s max rel error %-10.3g%s%s  %s\n", pass, worst, g->noutputs > 1 ? " in " : "",
           g->noutputs > 1 ? worst_name : "", ok ? "PASS" : "FAIL");
    if (!ok && !b->first_bad)
        b->first_bad = pass;
done:
    for (int i = 0; i < g->noutputs; i++)
        ir_tensor_free(&out[i]);
    free(in);
    free(out);
}

int cmp_bisect_passes(ir_graph *g, const cmp_opts *o, const ir_tensor *inputs, const ir_tensor *ref)
{
    pass_bisect b = {.o = o, .inputs = inputs, .ref = ref, .nin = g->ninputs, .nout = g->noutputs};
    b.in_names = calloc((size_t)g->ninputs + 1, sizeof *b.in_names);
    b.out_names = calloc((size_t)g->noutputs + 1, sizeof *b.out_names);
    if (!b.in_names || !b.out_names) {
        free(b.in_names);
        free(b.out_names);
        return VITC_INTERNAL;
    }
    for (int i = 0; i < g->ninputs; i++) /* names live in g's arena, which passes only add to */
        b.in_names[i] = g->values[g->inputs[i]].name;
    for (int i = 0; i < g->noutputs; i++)
        b.out_names[i] = g->values[g->outputs[i]].name;
    printf("bisect: the reference interpreter after each pass, against the imported graph:\n");
    vitc_diag d;
    vitc_diag_init(&d, o->onnx);
    cg_options co = {.precision = o->precision[0] ? o->precision : NULL};
    pass_options po = {.hook = after_pass, .hook_ctx = &b};
    po.int8 = cg_int8_mode(o->backend, &co, &po.int8_pairs);
    int st = pass_run(g, &po, &d);
    if (st == VITC_OK)
        st = b.status;
    if (st == VITC_OK && b.first_bad)
        printf("bisect: the outputs first move beyond tolerance after pass '%s'\n", b.first_bad);
    else if (st == VITC_OK)
        printf("bisect: every pass keeps the outputs within tolerance\n");
    free(b.in_names);
    free(b.out_names);
    return st;
}

/* ---- over the tensors of the compiled model ---- */

typedef struct {
    int value;
    ir_tensor t;
    int found;
} capture;

static void capture_value(void *ctx, const ir_graph *g, int node, int value, const ir_tensor *t)
{
    capture *c = ctx;
    if (value != c->value || c->found || ir_tensor_alloc(&c->t, t->dtype, t->rank, t->dims) != VITC_OK)
        return;
    memcpy(c->t.data, t->data, ir_tensor_nbytes(t));
    c->found = 1;
}

/* Compiles the imported graph cut at value v, runs it and measures it against
 * the interpreter's value of v.  Returns an exit code; *ok gets pass/fail. */
static int probe(const ir_graph *g, cmp_opts *o, const ir_tensor *inputs, int v, int step, int *ok)
{
    char so[512], name[64];
    snprintf(name, sizeof name, "cut-%d.so", step);
    int st = cmp_temp_path(o, name, so, sizeof so);
    if (st)
        return st;
    ir_graph *cut = cmp_load_model(o, &st);
    if (!cut)
        return st;
    int *outs = ir_alloc(cut->arena, sizeof *outs);
    if (!outs || cut->nvalues != g->nvalues || strcmp(cut->values[v].name, g->values[v].name) != 0) {
        fprintf(stderr, "vitc: %s: a second import differs from the first; cannot cut it\n", o->onnx);
        ir_graph_free(cut);
        return VITC_INTERNAL;
    }
    outs[0] = v;
    cut->outputs = outs;
    cut->noutputs = 1;
    st = cmp_compile_graph(o, cut, so, cmp_batch_of(g, inputs));
    ir_graph_free(cut);
    if (st)
        return st;

    capture ref = {.value = v};
    ir_tensor *out = calloc((size_t)g->noutputs + 1, sizeof *out), got = {0};
    vitc_diag d;
    vitc_diag_init(&d, o->onnx);
    st = out ? ir_interpret(g, inputs, out, capture_value, &ref, &d) : VITC_INTERNAL;
    for (int i = 0; out && i < g->noutputs; i++)
        ir_tensor_free(&out[i]);
    free(out);
    vitc_model *m = NULL;
    if (st == VITC_OK && !ref.found)
        st = VITC_INTERNAL;
    if (st == VITC_OK)
        st = cli_rt_load(so, &m);
    if (st == VITC_OK && vitc_model_num_outputs(m) != 1) {
        fprintf(stderr, "vitc: %s has %d outputs; 1 expected\n", so, vitc_model_num_outputs(m));
        st = VITC_INTERNAL;
    }
    if (st == VITC_OK)
        st = cmp_run_so(o, m, g, inputs, &got);
    if (st == VITC_OK) {
        cmp_metrics mt;
        cmp_measure(&got, &ref.t, &o->tol, &mt);
        *ok = cmp_passes(&mt, &o->tol);
        const ir_node *n = &g->nodes[g->values[v].producer];
        printf("  tensor %-28s of node '%s' (%s): max rel error %-10.3g cosine %.9f  %s\n", g->values[v].name,
               n->name, n->op_type, mt.max_rel, mt.cosine, *ok ? "PASS" : "FAIL");
    }
    ir_tensor_free(&got);
    ir_tensor_free(&ref.t);
    vitc_model_free(m);
    return st;
}

int cmp_bisect_nodes(const ir_graph *g, cmp_opts *o, const ir_tensor *inputs, int failing)
{
    /* The failing output is the last tensor of the search; its ancestors, in
     * node order, the rest. */
    int target = g->outputs[failing];
    if (g->values[target].producer < 0)
        return VITC_OK;
    unsigned char *need = calloc((size_t)g->nvalues + 1, 1);
    int *cand = calloc((size_t)g->nnodes + 1, sizeof *cand), nc = 0;
    if (!need || !cand) {
        free(need);
        free(cand);
        return VITC_INTERNAL;
    }
    need[target] = 1;
    for (int i = g->nnodes - 1; i >= 0; i--) {
        const ir_node *n = &g->nodes[i];
        int used = 0;
        for (int k = 0; k < n->noutputs; k++)
            used |= n->outputs[k] >= 0 && need[n->outputs[k]];
        for (int k = 0; used && k < n->ninputs; k++)
            if (n->inputs[k] >= 0)
                need[n->inputs[k]] = 1;
    }
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *n = &g->nodes[i];
        int v = n->noutputs > 0 ? n->outputs[0] : -1;
        if (v >= 0 && need[v] && ir_dtype_is_float(g->values[v].dtype) && g->values[v].rank >= 1)
            cand[nc++] = v;
    }
    printf("bisect: cutting the graph at the %d tensors that '%s' depends on, compiling each cut:\n", nc,
           g->values[target].name);
    int lo = 0, hi = nc - 1, st = VITC_OK, step = 0;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2, ok = 0;
        if ((st = probe(g, o, inputs, cand[mid], step++, &ok)) != VITC_OK)
            break;
        if (ok)
            lo = mid + 1;
        else
            hi = mid;
    }
    int last_ok = 0;
    if (st == VITC_OK && nc > 0 && hi == nc - 1) /* never probed: confirm it */
        st = probe(g, o, inputs, cand[hi], step++, &last_ok);
    if (st == VITC_OK && last_ok) {
        printf("bisect: compiled here, every cut (the output included) is within tolerance: the difference is in "
               "%s itself (compiled from another model, or by another vitc?)\n", o->so);
    } else if (st == VITC_OK && nc > 0) {
        const ir_node *n = &g->nodes[g->values[cand[hi]].producer];
        printf("bisect: the compiled model first parts from the reference at tensor '%s', the output of node "
               "'%s' (%s)\n", g->values[cand[hi]].name, n->name, n->op_type);
    } else if (st != VITC_OK) {
        printf("bisect: stopped: a cut of the graph did not compile or run (above)\n");
    }
    free(need);
    free(cand);
    return st;
}
