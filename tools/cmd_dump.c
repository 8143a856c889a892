/* cmd_dump.c: `vitc dump`, the IR as imported or optimized, as text, dot or
 * op counts; the IR after any pass (--dump-after=PASS|all); and which
 * fusions fired and why each other candidate did not (--explain-fusion). */
#include "tools/cli.h"

#include "passes/passes.h"

#include <stdio.h>
#include <string.h>

int cmd_dump(int argc, char **argv)
{
    const char *model = NULL, *stage = "imported", *format = "text", *dump_after = NULL;
    int stats = 0, explain = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--stats") == 0)
            stats = 1;
        else if (strcmp(a, "--explain-fusion") == 0)
            explain = 1;
        else if (strcmp(a, "--dump-after") == 0 && i + 1 < argc)
            dump_after = argv[++i];
        else if (strncmp(a, "--dump-after=", 13) == 0)
            dump_after = a + 13;
        else if ((strcmp(a, "--stage") == 0 || strcmp(a, "--format") == 0) && i + 1 < argc)
            *(a[2] == 's' ? &stage : &format) = argv[++i];
        else if (strncmp(a, "--stage=", 8) == 0)
            stage = a + 8;
        else if (strncmp(a, "--format=", 9) == 0)
            format = a + 9;
        else if (a[0] == '-')
            return cli_usage_error("dump: unknown option '%s'", a);
        else if (model)
            return cli_usage_error("dump: more than one model given ('%s' and '%s')", model, a);
        else
            model = a;
    }
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
