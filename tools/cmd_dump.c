/* cmd_dump.c: `vitc dump`, the IR as imported or optimized, as text, dot or
 * op counts (as imported, also of a model with unsupported operators: the
 * graph without them, their nodes put back in place and marked); the IR
 * after any pass (--dump-after=PASS|all); and which fusions fired, why each
 * other candidate did not, and what was left outside fused ops
 * (--explain-fusion). */
#include "tools/cli.h"

#include "codegen/backend.h"
#include "passes/passes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *model, *stage, *format, *dump_after, *precision;
    int stats, explain;
    cli_shapes shapes;
} dump_args;

enum { K_SHAPES = 256 };

static const cli_option dump_options[] = {
    {"stage", 0, "imported|optimized", "The graph as read with shapes inferred (default), or after the passes.",
     .store = CLI_STRING, .at = offsetof(dump_args, stage)},
    {"format", 0, "text|dot",
     "One node per line with types and shapes in terms of the batch B (default), or a Graphviz graph.",
     .store = CLI_STRING, .at = offsetof(dump_args, format)},
    {"stats", 0, NULL, "One 'OpType count' line per op type, sorted by op type.", .store = CLI_FLAG,
     .at = offsetof(dump_args, stats)},
    {"dump-after", 0, "PASS|all", "Print the IR after that pass (or after every pass) instead.", .store = CLI_STRING,
     .at = offsetof(dump_args, dump_after)},
    {"explain-fusion", 0, NULL,
     "Print how many patterns each pass fused and, for every candidate that did not fuse, its node and the first "
     "condition that failed; then every Softmax, Sigmoid, Pow, Sqrt, Reciprocal, MatMul or Erf left outside fused "
     "ops, with the candidate at it or a few nodes from it that did not fuse.",
     .store = CLI_FLAG, .at = offsetof(dump_args, explain)},
    {"precision", 0, "fp32|int8",
     "The passes as the CPU backend runs them for that --precision: by default a quantized model's Linears become "
     "LinearInt8; with int8 every Linear does.",
     .store = CLI_STRING, .at = offsetof(dump_args, precision)},
    {"shapes", K_SHAPES, "[NAME=]S",
     "For a model exported with a dynamic image size: the input shape to print it at (e.g. Bx3x336x336; once "
     "per input for several).",
     .store = CLI_TAKE},
    {0},
};

const cli_command cli_dump_command = {
    "dump",
    "vitc dump MODEL.onnx [--stage imported|optimized] [--format text|dot] [--stats]\n"
    "                     [--dump-after PASS|all] [--explain-fusion] [--precision fp32|int8]\n"
    "                     [--shapes [NAME=]S]",
    "Print the graph IR of an ONNX model; of one with unsupported operators, the graph with those nodes\n"
    "marked '!! unsupported' (then exit 2).",
    dump_options,
    cmd_dump,
};

/* ---- a model with unsupported operators: the graph without them, their
 * lines put back where they were, marked ---- */
typedef struct {
    const ir_graph *g;
    const onnx_unsupported *u;
    int n;
} unsupported_lines;

static const char *mark(const onnx_unsupported *u, char *buf, size_t n)
{
    if (u->domain)
        snprintf(buf, n, "  !! unsupported (domain '%s')", u->domain);
    else
        snprintf(buf, n, "  !! unsupported");
    return buf;
}

/* "OUT: TYPE, ... = OpType(IN, ...)  # NAME  !! unsupported" for each node
 * that stood before graph node i. */
static void text_before(void *ctx, int node, FILE *f)
{
    const unsupported_lines *x = ctx;
    char t[256], m[300];
    for (int j = 0; j < x->n; j++) {
        const onnx_unsupported *u = &x->u[j];
        if (u->before != node)
            continue;
        for (int k = 0; k < u->noutputs; k++) {
            const ir_value *v = u->outputs[k] >= 0 ? &x->g->values[u->outputs[k]] : NULL;
            fprintf(f, "%s%s%s%s", k ? ", " : "", v ? v->name : "_", v ? ": " : "",
                    !v ? "" : v->rank < 0 ? "?" : ir_value_type_str(v, t, sizeof t));
        }
        fprintf(f, " = %s(", *u->op_type ? u->op_type : "?");
        for (int k = 0; k < u->ninputs; k++)
            fprintf(f, "%s%s", k ? ", " : "", *u->inputs[k] ? u->inputs[k] : "_");
        fprintf(f, ")  # %s%s\n", *u->name ? u->name : "<unnamed>", mark(u, m, sizeof m));
    }
}

/* Writes s as the inside of a dot string literal. */
static void dot_str(const char *s, FILE *f)
{
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fputc('\\', f);
        if ((unsigned char)*s >= 0x20)
            fputc(*s, f);
    }
}

/* The unsupported nodes as red boxes, with edges from what they read to
 * what reads them (their outputs are the graph's v<id> nodes). */
static void dot_before(void *ctx, int node, FILE *f)
{
    const unsupported_lines *x = ctx;
    const ir_graph *g = x->g;
    char t[256];
    (void)node;
    for (int j = 0; j < x->n; j++) {
        const onnx_unsupported *u = &x->u[j];
        fprintf(f, "  u%d [color=red, fontcolor=red, label=\"", j);
        dot_str(*u->op_type ? u->op_type : "?", f);
        fputs("\\n# ", f);
        dot_str(*u->name ? u->name : "<unnamed>", f);
        fputs("\\n!! unsupported\"];\n", f);
        for (int k = 0; k < u->ninputs; k++) {
            int v = *u->inputs[k] ? ir_find_value(g, u->inputs[k]) : -1;
            if (v < 0 || g->values[v].kind == IR_VAL_CONST)
                continue;
            int p = g->values[v].producer;
            fprintf(f, "  %s%d -> u%d [label=\"%s\"];\n", p >= 0 ? "n" : "v", p >= 0 ? p : v, j,
                    g->values[v].rank < 0 ? "?" : ir_value_type_str(&g->values[v], t, sizeof t));
        }
        for (int k = 0; k < u->noutputs; k++)
            if (u->outputs[k] >= 0)
                fprintf(f, "  v%d [shape=point];\n  u%d -> v%d;\n", u->outputs[k], j, u->outputs[k]);
    }
}

typedef struct {
    const char *name;
    int count, unsupported;
} stat_row;

static int cmp_stat(const void *a, const void *b)
{
    const stat_row *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : x->unsupported - y->unsupported;
}

/* --stats with the unsupported op types among the graph's, each marked. */
static int print_stats_with(const ir_graph *g, const onnx_unsupported *u, int n, FILE *f)
{
    stat_row *rows = calloc((size_t)(IR_OP_COUNT + n), sizeof *rows);
    if (!rows)
        return VITC_INTERNAL;
    int nrows = 0;
    for (int op = 0; op < IR_OP_COUNT; op++) {
        int count = 0;
        for (int i = 0; i < g->nnodes; i++)
            count += g->nodes[i].op == (ir_op)op;
        if (count)
            rows[nrows++] = (stat_row){ir_op_name((ir_op)op), count, 0};
    }
    for (int j = 0; j < n; j++) {
        int r = nrows;
        for (int i = 0; i < nrows; i++)
            if (rows[i].unsupported && strcmp(rows[i].name, u[j].op_type) == 0)
                r = i;
        if (r == nrows)
            rows[nrows++] = (stat_row){u[j].op_type, 0, 1};
        rows[r].count++;
    }
    qsort(rows, (size_t)nrows, sizeof *rows, cmp_stat);
    for (int i = 0; i < nrows; i++)
        fprintf(f, "%s %d%s\n", *rows[i].name ? rows[i].name : "?", rows[i].count,
                rows[i].unsupported ? "  !! unsupported" : "");
    free(rows);
    return VITC_OK;
}

/* The options are stored by cli_parse: only the model comes here. */
static int take_dump(void *ctx, int key, const char *v)
{
    dump_args *a = ctx;
    if (key == K_SHAPES)
        return cli_shapes_add(&a->shapes, v);
    return cli_take_model(&cli_dump_command, &a->model, v);
}

int cmd_dump(int argc, char **argv)
{
    dump_args a = {.stage = "imported", .format = "text"};
    int st = cli_parse(&cli_dump_command, argc, argv, take_dump, &a);
    if (st != VITC_OK)
        return st == CLI_HELP_SHOWN ? VITC_OK : st;
    const char *model = a.model, *stage = a.stage, *format = a.format, *dump_after = a.dump_after;
    int stats = a.stats, explain = a.explain;
    if (!model)
        return cli_usage_error("dump: no model given");
    int optimized = strcmp(stage, "optimized") == 0;
    if (!optimized && strcmp(stage, "imported") != 0)
        return cli_usage_error("dump: --stage must be 'imported' or 'optimized', not '%s'", stage);
    if (a.precision && strcmp(a.precision, "fp32") != 0 && strcmp(a.precision, "int8") != 0)
        return cli_usage_error("dump: --precision must be 'fp32' or 'int8', not '%s'", a.precision);
    if (strcmp(format, "text") != 0 && strcmp(format, "dot") != 0)
        return cli_usage_error("dump: --format must be 'text' or 'dot', not '%s'", format);
    if (dump_after && !pass_name_known(dump_after)) {
        int n;
        const pass_def *p = pass_pipeline(&n);
        char names[1024];
        size_t off = 0;
        for (int i = 0; i < n && off < sizeof names; i++)
            off += (size_t)snprintf(names + off, sizeof names - off, "%s%s", i ? ", " : "", p[i].name);
        return cli_usage_error("dump: --dump-after must be 'all' or a pass (%s), not '%s'", names, dump_after);
    }

    int status;
    /* the graph as imported is printed even where some operators are unsupported: marked, in their place */
    int printable = !(optimized || explain || dump_after);
    cli_load_opts lo = {.keep_unsupported = printable};
    if ((status = cli_shapes_check(&a.shapes, "dump: ", 1)) != VITC_OK)
        return status;
    if (a.shapes.nvariants) {
        lo.shapes = a.shapes.v[0];
        lo.nshapes = a.shapes.ninputs;
    }
    ir_graph *g = cli_load_model_with(model, &lo, &status);
    if (!g)
        return status;
    if (lo.nunsupported) {
        unsupported_lines ul = {g, lo.unsupported, lo.nunsupported};
        char note[64];
        snprintf(note, sizeof note, "%d unsupported", lo.nunsupported);
        ir_print_extra x = {.note = note, .ctx = &ul};
        status = VITC_OK;
        if (stats) {
            status = print_stats_with(g, lo.unsupported, lo.nunsupported, stdout);
        } else if (strcmp(format, "dot") == 0) {
            x.before = dot_before;
            ir_print_dot_with(g, stdout, &x);
        } else {
            x.before = text_before;
            ir_print_text_with(g, stdout, &x);
        }
        vitc_diag d;
        vitc_diag_init(&d, model);
        int one = lo.nunsupported == 1;
        const char *which = one ? "this node" : "these nodes", *reads = one ? "it reads" : "they read",
                   *them = one ? "it" : "them";
        char next[512];
        if (stats)
            snprintf(next, sizeof next, "`vitc dump` without --stats prints the graph with %s marked "
                     "'!! unsupported', with what %s and what reads %s", which, reads, them);
        else
            snprintf(next, sizeof next, "the graph printed marks %s '!! unsupported', with what %s and what reads %s "
                     "(a shape printed as '?' is not known there)", which, reads, them);
        onnx_report_unsupported(lo.unsupported, lo.nunsupported, next, &d);
        ir_graph_free(g);
        if (fflush(stdout) != 0)
            return VITC_INTERNAL;
        return status ? status : lo.infer_status ? lo.infer_status : d.status;
    }
    if (optimized || explain || dump_after) {
        vitc_diag d;
        vitc_diag_init(&d, model);
        pass_dump pd = {.which = dump_after, .out = stdout};
        cg_options co = {.precision = a.precision};
        pass_options o = {.hook = dump_after ? pass_dump_hook : NULL, .hook_ctx = &pd};
        o.int8 = cg_int8_mode(&cg_llvm_backend, &co, &o.int8_pairs);
        if (explain && !(o.explain = pass_explain_new())) {
            ir_graph_free(g);
            return vitc_error(&d, VITC_INTERNAL, NULL, "out of memory");
        }
        status = pass_run(g, &o, &d);
        if (status == VITC_OK && explain)
            pass_explain_print(o.explain, stdout);
        pass_explain_free(o.explain);
        if (status || explain || dump_after) {
            ir_graph_free(g);
            return status ? status : fflush(stdout) == 0 ? VITC_OK : VITC_INTERNAL;
        }
    }
    if (stats)
        ir_print_stats(g, stdout);
    else if (strcmp(format, "dot") == 0)
        ir_print_dot(g, stdout);
    else
        ir_print_text(g, stdout);
    ir_graph_free(g);
    return fflush(stdout) == 0 ? VITC_OK : VITC_INTERNAL;
}
