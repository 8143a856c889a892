/* cli.c: helpers shared by the subcommands: loading a model with shapes
 * inferred, and matching --input files to graph inputs. */
#include "tools/cli.h"

#include "frontend/onnx.h"

#include <stdlib.h>
#include <string.h>

ir_graph *cli_load_model(const char *path, int *status)
{
    vitc_diag d;
    vitc_diag_init(&d, path);
    ir_graph *g = onnx_import_file(path, &d);
    if (g && ir_verify(g, &d) == VITC_OK)
        ir_infer_shapes(g, &d);
    if (d.status != VITC_OK) {
        ir_graph_free(g);
        *status = d.status;
        return NULL;
    }
    *status = VITC_OK;
    return g;
}

int cli_read_inputs(const char *path, const char *const *names, int n, char **specs, int nspecs,
                    ir_tensor *inputs)
{
    memset(inputs, 0, sizeof(ir_tensor) * (size_t)n);
    if (nspecs != n)
        return cli_usage_error("%s: the model has %d input%s; %d --input given", path, n, n == 1 ? "" : "s",
                               nspecs);
    for (int i = 0; i < nspecs; i++) {
        const char *spec = specs[i], *eq = strchr(spec, '='), *file = spec;
        int slot = i;
        if (eq) {
            slot = -1;
            for (int k = 0; k < n; k++)
                if (strlen(names[k]) == (size_t)(eq - spec) && strncmp(names[k], spec, (size_t)(eq - spec)) == 0)
                    slot = k;
            if (slot < 0)
                return cli_usage_error("%s: the model has no input named '%.*s'", path, (int)(eq - spec), spec);
            file = eq + 1;
        }
        if (inputs[slot].data)
            return cli_usage_error("input '%s' is given twice", names[slot]);
        vitc_diag d;
        vitc_diag_init(&d, file);
        int st = ir_npy_read(file, &inputs[slot], &d);
        if (st != VITC_OK)
            return st;
    }
    return VITC_OK;
}

int cli_load_inputs(const ir_graph *g, char **specs, int nspecs, ir_tensor *inputs)
{
    const char *names[64];
    if (g->ninputs > 64)
        return cli_usage_error("%s: more than 64 inputs", g->path);
    for (int k = 0; k < g->ninputs; k++)
        names[k] = g->values[g->inputs[k]].name;
    return cli_read_inputs(g->path, names, g->ninputs, specs, nspecs, inputs);
}
