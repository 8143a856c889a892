/* cmd_dump.c: `vitc dump`, the IR as imported or optimized, as text, dot or
 * op counts; the IR after any pass (--dump-after=PASS|all); and which
 * fusions fired and why each other candidate did not (--explain-fusion). */
#include "tools/cli.h"

#include "passes/passes.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    const char *model, *stage, *format, *dump_after;
    int stats, explain;
} dump_args;

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
     "condition that failed.",
     .store = CLI_FLAG, .at = offsetof(dump_args, explain)},
    {0},
};

const cli_command cli_dump_command = {
    "dump",
    "vitc dump MODEL.onnx [--stage imported|optimized] [--format text|dot] [--stats]\n"
    "                     [--dump-after PASS|all] [--explain-fusion]",
    "Print the graph IR of an ONNX model.",
    dump_options,
};

/* The options are stored by cli_parse: only the model comes here. */
static int take_dump(void *ctx, int key, const char *v)
{
    dump_args *a = ctx;
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
    ir_graph *g = cli_load_model(model, &status);
    if (!g)
        return status;
    if (optimized || explain || dump_after) {
        vitc_diag d;
        vitc_diag_init(&d, model);
        pass_dump pd = {.which = dump_after, .out = stdout};
        pass_options o = {.hook = dump_after ? pass_dump_hook : NULL, .hook_ctx = &pd};
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
