/* cmd_dump.c: `vitc dump`, the IR as imported or optimized, as text, dot or
 * op counts. */
#include "tools/cli.h"

#include "passes/passes.h"

#include <stdio.h>
#include <string.h>

int cmd_dump(int argc, char **argv)
{
    const char *model = NULL, *stage = "imported", *format = "text";
    int stats = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--stats") == 0)
            stats = 1;
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

    int status;
    ir_graph *g = cli_load_model(model, &status);
    if (!g)
        return status;
    if (optimized) {
        vitc_diag d;
        vitc_diag_init(&d, model);
        status = pass_run_pipeline(g, NULL, NULL, &d);
        if (status) {
            ir_graph_free(g);
            return status;
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
