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

int cli_load_inputs(const ir_graph *g, char **specs, int nspecs, ir_tensor *inputs)
{
    memset(inputs, 0, sizeof(ir_tensor) * (size_t)g->ninputs);
    if (nspecs != g->ninputs) {
        cli_usage_error("%s: the model has %d input%s; %d --input given", g->path, g->ninputs,
                        g->ninputs == 1 ? "" : "s", nspecs);
        return VITC_BAD_INPUT;
    }
    for (int i = 0; i < nspecs; i++) {
        const char *spec = specs[i], *eq = strchr(spec, '=');
        int slot = i;
        const char *file = spec;
        if (eq) {
            slot = -1;
            for (int k = 0; k < g->ninputs; k++)
                if (strlen(g->values[g->inputs[k]].name) == (size_t)(eq - spec) &&
                    strncmp(g->values[g->inputs[k]].name, spec, (size_t)(eq - spec)) == 0)
                    slot = k;
            if (slot < 0) {
                cli_usage_error("%s: the model has no input named '%.*s'", g->path, (int)(eq - spec), spec);
                return VITC_BAD_INPUT;
            }
            file = eq + 1;
        }
        if (inputs[slot].data) {
            cli_usage_error("input '%s' is given twice", g->values[g->inputs[slot]].name);
            return VITC_BAD_INPUT;
        }
        vitc_diag d;
        vitc_diag_init(&d, file);
        int st = ir_npy_read(file, &inputs[slot], &d);
        if (st != VITC_OK)
            return st;
    }
    return VITC_OK;
}
