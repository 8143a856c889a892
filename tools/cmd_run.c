/* cmd_run.c: `vitc run MODEL.onnx`, the reference interpreter on .npy inputs,
 * writing one NAME.npy per output. */
#include "tools/cli.h"

#include "ir/interp.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* An output name as a file name: path separators and odd bytes become '_'. */
static void safe_name(const char *name, char *out, size_t n)
{
    size_t k = 0;
    for (; *name && k + 1 < n; name++)
        out[k++] = (*name == '/' || *name == '\\' || (unsigned char)*name < 0x20) ? '_' : *name;
    out[k] = 0;
    if (k == 0 || strcmp(out, ".") == 0 || strcmp(out, "..") == 0)
        snprintf(out, n, "output");
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int cmd_run(int argc, char **argv)
{
    const char *model = NULL, *outdir = ".";
    char *specs[64];
    int nspecs = 0;
    long repeat = 1;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--input") == 0 && i + 1 < argc) {
            if (nspecs == 64)
                return cli_usage_error("run: too many --input options");
            specs[nspecs++] = argv[++i];
        } else if (strcmp(a, "--output-dir") == 0 && i + 1 < argc) {
            outdir = argv[++i];
        } else if (strcmp(a, "--repeat") == 0 && i + 1 < argc) {
            char *end;
            repeat = strtol(argv[++i], &end, 10);
            if (*end || repeat < 1 || repeat > 100000)
                return cli_usage_error("run: --repeat takes a count from 1 to 100000");
        } else if (a[0] == '-') {
            return cli_usage_error("run: unknown option or missing value '%s'", a);
        } else if (model) {
            return cli_usage_error("run: more than one model given");
        } else {
            model = a;
        }
    }
    if (!model)
        return cli_usage_error("run: no model given");
    size_t ml = strlen(model);
    if (ml < 5 || strcmp(model + ml - 5, ".onnx") != 0)
        return cli_usage_error("run: '%s' is not an .onnx model (running compiled .so files is not built yet)", model);
    struct stat st;
    if (stat(outdir, &st) != 0 || !S_ISDIR(st.st_mode))
        return cli_usage_error("run: output directory '%s' does not exist", outdir);

    int status;
    ir_graph *g = cli_load_model(model, &status);
    if (!g)
        return status;
    ir_tensor *inputs = calloc((size_t)g->ninputs + 1, sizeof(ir_tensor));
    ir_tensor *outputs = calloc((size_t)g->noutputs + 1, sizeof(ir_tensor));
    if (!inputs || !outputs) {
        status = VITC_INTERNAL;
        goto done;
    }
    status = cli_load_inputs(g, specs, nspecs, inputs);
    if (status)
        goto done;
    vitc_diag d;
    vitc_diag_init(&d, model);
    double best = 1e300;
    for (long r = 0; r < repeat && status == VITC_OK; r++) {
        for (int i = 0; i < g->noutputs; i++)
            ir_tensor_free(&outputs[i]);
        double t0 = now_ms();
        status = ir_interpret(g, inputs, outputs, NULL, NULL, &d);
        double t = now_ms() - t0;
        best = t < best ? t : best;
    }
    if (status)
        goto done;
    for (int i = 0; i < g->noutputs && status == VITC_OK; i++) {
        char name[256], path[PATH_MAX];
        safe_name(g->values[g->outputs[i]].name, name, sizeof name);
        snprintf(path, sizeof path, "%s/%s.npy", outdir, name);
        vitc_diag_init(&d, path);
        status = ir_npy_write(path, &outputs[i], &d);
        if (status == VITC_OK) {
            char t[256];
            ir_value v = g->values[g->outputs[i]];
            v.rank = outputs[i].rank;
            for (int k = 0; k < v.rank; k++)
                v.dims[k] = ir_dim_const(outputs[i].dims[k]);
            printf("%s: %s -> %s\n", g->values[g->outputs[i]].name, ir_value_type_str(&v, t, sizeof t), path);
        }
    }
    if (status == VITC_OK && repeat > 1)
        printf("reference interpreter: best of %ld runs %.3f ms\n", repeat, best);
done:
    for (int i = 0; inputs && i < g->ninputs; i++)
        ir_tensor_free(&inputs[i]);
    for (int i = 0; outputs && i < g->noutputs; i++)
        ir_tensor_free(&outputs[i]);
    free(inputs);
    free(outputs);
    ir_graph_free(g);
    return status;
}
