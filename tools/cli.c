/* cli.c: helpers shared by the subcommands: loading a model with shapes
 * inferred, and matching --input files to graph inputs. */
#include "tools/cli.h"

#include "frontend/onnx.h"

#include <stdio.h>
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
        return cli_usage_error("%s: more than 64 inputs", g->path);
    for (int k = 0; k < g->ninputs; k++) {
        const ir_value *v = &g->values[g->inputs[k]];
        sig[k] = (cli_input_sig){v->name, ir_value_type_str(v, types[k], sizeof types[k]), (int)v->dtype};
    }
    return cli_read_inputs(g->path, sig, g->ninputs, specs, nspecs, inputs);
}
