/* cli.c: helpers shared by the subcommands: loading a model with shapes
 * inferred (its batch made symbolic for --dynamic-batch, or, for `vitc
 * dump`, without its unsupported nodes), and matching --input files to
 * graph inputs. */
#include "tools/cli.h"

#include "frontend/onnx.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ir_graph *cli_load_model(const char *path, int *status) { return cli_load_model_with(path, NULL, status); }

const char *cli_reexport_hint(const ir_graph *g, char *buf, size_t n)
{
    size_t k = (size_t)snprintf(buf, n, "re-export the model with a dynamic batch: dynamic_axes={");
    int listed = 0;
    for (int i = 0; i < g->ninputs && k < n; i++) {
        const ir_value *v = &g->values[g->inputs[i]];
        if (v->rank >= 1 && listed < 4)
            k += (size_t)snprintf(buf + k, n - k, "%s'%.64s': {0: 'batch'}", listed ? ", " : "", v->name);
        listed += v->rank >= 1;
    }
    if (k < n)
        snprintf(buf + k, n - k, "%s} in torch.onnx.export(dynamo=False), dynamic_shapes with the dynamo exporter",
                 listed > 4 ? ", ..." : "");
    return buf;
}

/* The first node whose outputs shape inference did not reach: where it
 * stopped.  -1 if none. */
static int first_uninferred(const ir_graph *g)
{
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i].noutputs; k++)
            if (g->nodes[i].outputs[k] >= 0 && g->values[g->nodes[i].outputs[k]].rank < 0)
                return i;
    return -1;
}

static int has_batch(const ir_value *v)
{
    for (int i = 0; i < v->rank; i++)
        if (v->dims[i].e > 0 && v->dims[i].k != 0)
            return 1;
    return 0;
}

/* 1 if the graph of path, as exported (its batch fixed), infers its shapes:
 * then a failure with the batch made symbolic is the batch's. */
static int infers_as_exported(const char *path)
{
    FILE *null = fopen("/dev/null", "w");
    if (!null)
        return 0;
    vitc_diag d;
    vitc_diag_init(&d, path);
    d.out = null;
    ir_graph *g = onnx_import_file(path, &d);
    int ok = g && ir_verify(g, &d) == VITC_OK && ir_infer_shapes(g, &d) == VITC_OK;
    ir_graph_free(g);
    fclose(null);
    return ok;
}

/* With the first dimension of every input made the batch, a node that
 * still holds the export's batch as a number: one that moves the batch out
 * of the first dimension into a merged one (a Reshape to [N, -1, ...] with
 * N the export's batch; merge_pin finds the first, among the nodes whose
 * shapes are inferred), or, where a graph output has lost the batch, the
 * first node on its way that drops it.  Reports it; returns a status. */
static int merge_pin(const ir_graph *g)
{
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *n = &g->nodes[i];
        if (n->ninputs < 1 || n->inputs[0] < 0 || n->noutputs < 1 || n->outputs[0] < 0)
            continue;
        const ir_value *x = &g->values[n->inputs[0]], *y = &g->values[n->outputs[0]];
        if (x->rank < 1 || y->rank < 1 || x->dims[0].e < 1 || y->dims[0].e != 0)
            continue;
        for (int k = 1; k < y->rank; k++)
            if (y->dims[k].e > 0 && y->dims[k].k > 1)
                return i;
    }
    return -1;
}

/* Reports node i, found by merge_pin. */
static int report_merge_pin(const ir_graph *g, int i, int64_t fixed, const char *hint, vitc_diag *d)
{
    char tin[256], tout[256];
    const ir_node *n = &g->nodes[i];
    const ir_value *x = &g->values[n->inputs[0]], *y = &g->values[n->outputs[0]];
    return vitc_error(d, VITC_BAD_INPUT, n,
                      "--dynamic-batch: this node fixes the batch: its output %s has %lld where its input %s has the "
                      "batch (a shape the export wrote for batch %lld); the model cannot run other batches as "
                      "exported: %s",
                      ir_value_type_str(y, tout, sizeof tout), (long long)y->dims[0].k,
                      ir_value_type_str(x, tin, sizeof tin), (long long)fixed, hint);
}

static int check_batch_followed(const ir_graph *g, int64_t fixed, const char *hint, vitc_diag *d)
{
    char tin[256], tout[256];
    int pin = merge_pin(g);
    if (pin >= 0)
        return report_merge_pin(g, pin, fixed, hint, d);
    unsigned char *need = calloc((size_t)g->nvalues + 1, 1);
    if (!need)
        return vitc_error(d, VITC_INTERNAL, NULL, "out of memory");
    int lost = -1;
    for (int i = 0; i < g->noutputs; i++)
        if (g->outputs[i] >= 0 && !has_batch(&g->values[g->outputs[i]])) {
            need[g->outputs[i]] = 1;
            if (lost < 0)
                lost = g->outputs[i];
        }
    if (lost < 0) {
        free(need);
        return VITC_OK;
    }
    for (int i = g->nnodes - 1; i >= 0; i--) { /* what the batch-less outputs are made from */
        const ir_node *n = &g->nodes[i];
        int needed = 0;
        for (int k = 0; k < n->noutputs; k++)
            needed |= n->outputs[k] >= 0 && need[n->outputs[k]];
        for (int k = 0; needed && k < n->ninputs; k++)
            if (n->inputs[k] >= 0)
                need[n->inputs[k]] = 1;
    }
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *n = &g->nodes[i];
        if (ir_op_family_of(n->op) == IR_FAM_SHAPE)
            continue;
        const ir_value *from = NULL, *to = NULL;
        for (int k = 0; k < n->ninputs && !from; k++)
            if (n->inputs[k] >= 0 && has_batch(&g->values[n->inputs[k]]))
                from = &g->values[n->inputs[k]];
        for (int k = 0; k < n->noutputs && !to; k++) {
            const ir_value *v = n->outputs[k] >= 0 ? &g->values[n->outputs[k]] : NULL;
            if (v && need[n->outputs[k]] && !v->symval && !has_batch(v))
                to = v;
        }
        if (from && to) {
            free(need);
            return vitc_error(d, VITC_BAD_INPUT, n,
                              "--dynamic-batch: this node fixes the batch: its output %s has no batch where its input "
                              "%s has one (the export wrote it for batch %lld); the model cannot run other batches as "
                              "exported: %s",
                              ir_value_type_str(to, tout, sizeof tout), ir_value_type_str(from, tin, sizeof tin),
                              (long long)fixed, hint);
        }
    }
    free(need);
    return vitc_error(d, VITC_BAD_INPUT, NULL,
                      "--dynamic-batch: graph output '%s' (%s) does not follow the batch; the model cannot run other "
                      "batches as exported: %s",
                      g->values[lost].name, ir_value_type_str(&g->values[lost], tout, sizeof tout), hint);
}

/* --dynamic-batch: the first dimension of every graph input made the batch.
 * Returns the batch the export had fixed there (the first input's), 0 when
 * no input had a fixed first dimension. */
static int64_t make_batch_dynamic(ir_graph *g)
{
    int64_t fixed = 0;
    for (int i = 0; i < g->ninputs; i++) {
        ir_value *v = &g->values[g->inputs[i]];
        if (v->rank < 1 || v->dims[0].e != 0)
            continue;
        if (!fixed)
            fixed = v->dims[0].k;
        v->dims[0] = ir_dim_batch(1);
    }
    g->fixed_batch = 0;
    return fixed ? fixed : -1;
}

/* Shape inference of a graph without its unsupported nodes, as far as it
 * gets: where a node fails, inference goes on after it (from the next node),
 * so a dump shows every shape that can be known.  A failure at a node that reads what an unsupported or failed
 * node computes (of a shape or values not known, or what follows from them)
 * only leaves its shapes unknown; any other is the model's own error,
 * printed, the first one's status returned (the graph is printed all the
 * same). */
static int infer_partial(ir_graph *g, const onnx_unsupported *u, int nu, vitc_diag *d)
{
    int nafter = g->nvalues;
    unsigned char *after = calloc((size_t)nafter + 1, 1); /* computed from what is not known */
    if (!after)
        return ir_infer_shapes(g, d);
    for (int j = 0; j < nu; j++)
        for (int k = 0; k < u[j].noutputs; k++)
            if (u[j].outputs[k] >= 0)
                after[u[j].outputs[k]] = 1;
    int status = VITC_OK;
    for (int start = 0; start < g->nnodes;) {
        char *text = NULL;
        size_t len = 0;
        FILE *mem = open_memstream(&text, &len);
        vitc_diag quiet;
        vitc_diag_init(&quiet, d->file);
        quiet.out = mem ? mem : fopen("/dev/null", "w");
        int st = quiet.out ? ir_infer_shapes_from(g, start, &quiet) : VITC_INTERNAL;
        if (quiet.out)
            fclose(quiet.out);
        if (g->nvalues > nafter) { /* an If inlined its branch: values of its own */
            unsigned char *more = realloc(after, (size_t)g->nvalues + 1);
            if (!more) {
                free(after);
                free(text);
                return vitc_error(d, VITC_INTERNAL, NULL, "out of memory");
            }
            memset(more + nafter, 0, (size_t)(g->nvalues - nafter) + 1);
            after = more;
            nafter = g->nvalues;
        }
        int at = g->nnodes;
        for (int i = start; st != VITC_OK && i < g->nnodes && at == g->nnodes; i++)
            for (int k = 0; k < g->nodes[i].noutputs; k++)
                if (g->nodes[i].outputs[k] >= 0 && g->values[g->nodes[i].outputs[k]].rank < 0)
                    at = i;
        for (int i = start; i < g->nnodes && i <= at; i++) {
            const ir_node *n = &g->nodes[i];
            int reads = 0;
            for (int k = 0; k < n->ninputs; k++)
                reads |= n->inputs[k] >= 0 && (after[n->inputs[k]] || g->values[n->inputs[k]].rank < 0);
            if (i == at && !reads && text) { /* the model's own error */
                FILE *f = d->out ? d->out : stderr;
                fflush(stdout);
                fputs(text, f);
                status = status ? status : st;
            }
            for (int k = 0; (reads || i == at) && k < n->noutputs; k++)
                if (n->outputs[k] >= 0)
                    after[n->outputs[k]] = 1;
        }
        free(text);
        if (st == VITC_OK || at == g->nnodes)
            break;
        start = at + 1;
    }
    free(after);
    return status;
}

/* Where each unsupported node is printed (its `before`) follows the nodes
 * around it when shape inference replaces Ifs by their branches: anchor[j]
 * names (by its outputs array, which moves with it) the first node other
 * than an If at or after u[j].before; malloc'ed, NULL when out of memory. */
static const int **unsupported_anchors(const ir_graph *g, const onnx_unsupported *u, int nu)
{
    const int **anchor = calloc((size_t)nu + 1, sizeof *anchor);
    for (int j = 0; anchor && j < nu; j++)
        for (int i = u[j].before; i < g->nnodes && !anchor[j]; i++)
            if (g->nodes[i].op != IR_OP_IF)
                anchor[j] = g->nodes[i].outputs;
    return anchor;
}

/* u with `before` moved to where its anchor went, or earlier to the first
 * node that reads one of its outputs (a branch that took an If's place); in
 * g's arena.  u itself where that fails. */
static const onnx_unsupported *place_unsupported(ir_graph *g, const onnx_unsupported *u, int nu, const int **anchor)
{
    onnx_unsupported *p = anchor ? ir_alloc_array(g->arena, (size_t)nu, sizeof *p) : NULL;
    if (!p)
        return u;
    memcpy(p, u, sizeof *p * (size_t)nu);
    for (int j = 0; j < nu; j++) {
        int at = g->nnodes;
        for (int i = 0; anchor[j] && i < g->nnodes && at == g->nnodes; i++)
            if (g->nodes[i].outputs == anchor[j])
                at = i;
        for (int i = 0, found = 0; i < at && !found; i++)
            for (int k = 0; k < g->nodes[i].ninputs && !found; k++)
                for (int m = 0; m < u[j].noutputs && !found; m++)
                    if ((found = u[j].outputs[m] >= 0 && g->nodes[i].inputs[k] == u[j].outputs[m]))
                        at = i;
        p[j].before = at;
    }
    return p;
}

ir_graph *cli_load_model_with(const char *path, cli_load_opts *o, int *status)
{
    vitc_diag d;
    vitc_diag_init(&d, path);
    onnx_import_opts io = {.keep_unsupported = o && o->keep_unsupported, .shapes = o ? o->shapes : NULL,
                           .nshapes = o ? o->nshapes : 0, .shapes_from_inputs = o && o->shapes_from_inputs};
    ir_graph *g = onnx_import_file_opts(path, &io, &d);
    if (o) {
        o->unsupported = io.unsupported;
        o->nunsupported = io.nunsupported;
    }
    int64_t fixed = g && o && o->dynamic_batch ? make_batch_dynamic(g) : 0;
    if (g && ir_verify(g, &d) == VITC_OK) {
        if (io.nunsupported) {
            const int **anchor = g->nbranches ? unsupported_anchors(g, io.unsupported, io.nunsupported) : NULL;
            o->infer_status = infer_partial(g, io.unsupported, io.nunsupported, &d);
            if (g->nbranches)
                o->unsupported = place_unsupported(g, io.unsupported, io.nunsupported, anchor);
            free(anchor);
        }
        else if (ir_infer_shapes(g, &d) != VITC_OK && fixed > 0 && infers_as_exported(path)) {
            char hint[512];
            int at = first_uninferred(g), pin = merge_pin(g);
            cli_reexport_hint(g, hint, sizeof hint);
            if (pin >= 0)
                report_merge_pin(g, pin, fixed, hint, &d);
            else
                vitc_error(&d, VITC_BAD_INPUT, at >= 0 ? &g->nodes[at] : NULL,
                           "--dynamic-batch: this node fixes the batch at %lld, the export's (its shapes follow that "
                           "number, not a symbolic batch: see above); the model cannot run other batches as "
                           "exported: %s",
                           (long long)fixed, hint);
        } else if (d.status == VITC_OK && fixed > 0) {
            char hint[512];
            check_batch_followed(g, fixed, cli_reexport_hint(g, hint, sizeof hint), &d);
        }
    }
    if (d.status != VITC_OK) {
        ir_graph_free(g);
        if (o) {
            o->unsupported = NULL;
            o->nunsupported = 0;
        }
        *status = d.status;
        return NULL;
    }
    *status = VITC_OK;
    return g;
}

/* "NAME TYPE, ..." of the model's inputs into buf, for messages. */
static const char *list_inputs(const cli_input_sig *sig, int n, char *buf, size_t len)
{
    size_t k = (size_t)snprintf(buf, len, "its input%s: ", n == 1 ? "" : "s");
    for (int i = 0; i < n && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, "%s%s %s", i ? ", " : "", sig[i].name, sig[i].type);
    return buf;
}

int cli_read_inputs(const char *path, const cli_input_sig *sig, int n, char **specs, int nspecs, ir_tensor *inputs)
{
    char list[1024];
    memset(inputs, 0, sizeof(ir_tensor) * (size_t)n);
    if (nspecs != n)
        return cli_usage_error("%s: the model has %d input%s; %d --input given (--input [NAME=]FILE.npy, once per "
                               "input; %s)", path, n, n == 1 ? "" : "s", nspecs, list_inputs(sig, n, list, sizeof list));
    for (int i = 0; i < nspecs; i++) {
        const char *spec = specs[i], *eq = strchr(spec, '='), *file = spec;
        int slot = i;
        if (eq) {
            slot = -1;
            for (int k = 0; k < n; k++)
                if (strlen(sig[k].name) == (size_t)(eq - spec) && strncmp(sig[k].name, spec, (size_t)(eq - spec)) == 0)
                    slot = k;
            if (slot < 0)
                return cli_usage_error("%s: the model has no input named '%.*s' (%s)", path, (int)(eq - spec), spec,
                                       list_inputs(sig, n, list, sizeof list));
            file = eq + 1;
        }
        if (inputs[slot].data)
            return cli_usage_error("input '%s' is given twice", sig[slot].name);
        vitc_diag d;
        vitc_diag_init(&d, file);
        int st = ir_npy_read(file, &inputs[slot], &d);
        if (st != VITC_OK)
            return st;
        if (sig[slot].dtype >= 0 && inputs[slot].dtype != (ir_dtype)sig[slot].dtype) {
            fflush(stdout);
            fprintf(stderr, "vitc: %s: holds %s values; input '%s' of %s is %s (convert it, e.g. with numpy's "
                            "astype)\n", file, ir_dtype_name(inputs[slot].dtype), sig[slot].name, path, sig[slot].type);
            return VITC_BAD_INPUT;
        }
    }
    return VITC_OK;
}

int cli_load_inputs(const ir_graph *g, char **specs, int nspecs, ir_tensor *inputs)
{
    cli_input_sig sig[64];
    char types[64][128];
    if (g->ninputs > 64)
        return cli_error("%s: more than 64 inputs", g->path);
    for (int k = 0; k < g->ninputs; k++) {
        const ir_value *v = &g->values[g->inputs[k]];
        sig[k] = (cli_input_sig){v->name, ir_value_type_str(v, types[k], sizeof types[k]), (int)v->dtype};
    }
    return cli_read_inputs(g->path, sig, g->ninputs, specs, nspecs, inputs);
}

/* One S of --shapes (Bx3x224x224 or 3x224x224) into sh, whose name is set. */
static int parse_one_shape(const char *spec, const char *end, onnx_input_shape *sh)
{
    const char *p = spec;
    sh->rank = 1; /* dims[0], the batch, is not read */
    if ((p[0] == 'B' || p[0] == 'b') && p[1] == 'x')
        p += 2;
    for (;;) {
        char *stop;
        errno = 0;
        long long v = strtoll(p, &stop, 10);
        if (stop == p || stop > end || errno || v < 1 || v > (1LL << 31) || (stop < end && *stop != 'x'))
            return cli_usage_error("--shapes: '%.*s' is not a shape: the input's dimensions, each a number from 1 "
                                   "joined by 'x', the batch written B or left out (e.g. Bx3x224x224)",
                                   (int)(end - spec), spec);
        if (sh->rank == IR_MAX_RANK)
            return cli_usage_error("--shapes: '%.*s' has more than %d dimensions", (int)(end - spec), spec,
                                   IR_MAX_RANK);
        sh->dims[sh->rank++] = v;
        if (stop == end)
            return VITC_OK;
        p = stop + 1;
    }
}

int cli_shapes_add(cli_shapes *s, const char *arg)
{
    if (s->ninputs == CLI_MAX_SHAPE_INPUTS)
        return cli_usage_error("--shapes: more than %d inputs", CLI_MAX_SHAPE_INPUTS);
    int k = s->ninputs, n = 0;
    const char *eq = strchr(arg, '='), *p = eq ? eq + 1 : arg;
    if (eq && (eq == arg || (size_t)(eq - arg) >= sizeof s->names[0]))
        return cli_usage_error("--shapes: '%s': the input's name before '=' is empty or too long", arg);
    snprintf(s->names[k], sizeof s->names[k], "%.*s", eq ? (int)(eq - arg) : 0, arg);
    for (;;) {
        const char *end = strchr(p, ',');
        end = end ? end : p + strlen(p);
        if (n == CLI_MAX_SHAPES)
            return cli_usage_error("--shapes: more than %d shapes", CLI_MAX_SHAPES);
        onnx_input_shape *sh = &s->v[n][k];
        *sh = (onnx_input_shape){.name = eq ? s->names[k] : NULL};
        int st = parse_one_shape(p, end, sh);
        if (st)
            return st;
        n++;
        if (!*end)
            break;
        p = end + 1;
    }
    if (k > 0 && n != s->nvariants)
        return cli_usage_error("--shapes: %d shapes for one input, %d for another: give each input as many, the "
                               "i-th of each going together", s->nvariants, n);
    s->nvariants = n;
    s->ninputs++;
    return VITC_OK;
}

int cli_shapes_check(cli_shapes *s, const char *command, int one_only)
{
    for (int k = 0; s->ninputs > 1 && k < s->ninputs; k++) {
        if (!s->names[k][0])
            return cli_usage_error("%s--shapes: with several, each names its input (NAME=S)", command);
        for (int j = 0; j < k; j++)
            if (strcmp(s->names[j], s->names[k]) == 0)
                return cli_usage_error("%s--shapes: input '%s' is given twice", command, s->names[k]);
    }
    if (one_only && s->nvariants > 1)
        return cli_usage_error("%s--shapes takes one shape per input here (a run is at one size); run it once per "
                               "size", command);
    return VITC_OK;
}

int cli_input_shapes(char **specs, int nspecs, cli_shapes *s)
{
    memset(s, 0, sizeof *s);
    s->from_inputs = 1;
    int unnamed = 0;
    for (int i = 0; i < nspecs && s->ninputs < CLI_MAX_SHAPE_INPUTS; i++) {
        const char *eq = strchr(specs[i], '='), *file = eq ? eq + 1 : specs[i];
        if (!eq && unnamed++)
            continue; /* by position: which input it is, only the graph says */
        ir_tensor t = {0};
        vitc_diag d;
        vitc_diag_init(&d, file);
        if (ir_npy_read(file, &t, &d) != VITC_OK)
            return d.status;
        int k = s->ninputs++;
        onnx_input_shape *sh = &s->v[0][k];
        *sh = (onnx_input_shape){.rank = t.rank};
        if (eq) {
            snprintf(s->names[k], sizeof s->names[k], "%.*s", (int)(eq - specs[i]), specs[i]);
            sh->name = s->names[k];
        }
        for (int r = 0; r < t.rank; r++)
            sh->dims[r] = t.dims[r];
        ir_tensor_free(&t);
    }
    s->nvariants = s->ninputs > 0;
    return VITC_OK;
}
