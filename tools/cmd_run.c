/* cmd_run.c: `vitc run MODEL`, on .npy inputs, writing one NAME.npy per
 * output.  MODEL.onnx runs on the reference interpreter; anything else is
 * taken as a compiled model (.so) and runs through the runtime API.  With
 * --repeat N it times N runs and prints the min and median (for a CUDA model
 * also of its kernels' GPU time, from CUDA events). */
#include "tools/cli.h"

#include "ir/interp.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define MAX_INPUTS 64

typedef struct {
    const char *model, *outdir;
    char *specs[MAX_INPUTS];
    int nspecs;
    long repeat;
    int nthreads; /* compiled models: 0 = one per core */
} run_opts;

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

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* "N runs: min X ms, median Y ms" for the times of the runs (sorted here). */
static void print_timing(const char *what, double *ms, long n)
{
    qsort(ms, (size_t)n, sizeof *ms, cmp_double);
    double median = n % 2 ? ms[n / 2] : (ms[n / 2 - 1] + ms[n / 2]) / 2;
    printf("%s: %ld runs: min %.3f ms, median %.3f ms\n", what, n, ms[0], median);
}

/* Makes directory dir and the missing ones above it (mkdir -p); status. */
static int make_dirs(const char *dir)
{
    char p[PATH_MAX];
    if (!*dir)
        return cli_usage_error("run: the output directory is an empty name");
    if ((size_t)snprintf(p, sizeof p, "%s", dir) >= sizeof p)
        return cli_usage_error("run: output directory '%s' is too long", dir);
    for (char *s = p + 1;; s++) {
        char c = *s;
        if (c != '/' && c != 0)
            continue;
        *s = 0;
        if (mkdir(p, 0777) != 0 && errno != EEXIST)
            return cli_usage_error("run: cannot create output directory '%s': %s", p, strerror(errno));
        *s = c;
        if (!c)
            return VITC_OK;
    }
}

/* Writes outputs[i] to DIR/NAME.npy (DIR made when missing, only now that
 * there is something to write) and prints one line for each. */
static int write_outputs(const char *outdir, const char *const *names, const ir_tensor *outputs, int n)
{
    struct stat st;
    int status = stat(outdir, &st) == 0 ? VITC_OK : make_dirs(outdir);
    if (status != VITC_OK)
        return status;
    for (int i = 0; i < n; i++) {
        char name[256], path[PATH_MAX], t[256];
        safe_name(names[i], name, sizeof name);
        snprintf(path, sizeof path, "%s/%s.npy", outdir, name);
        vitc_diag d;
        vitc_diag_init(&d, path);
        if ((status = ir_npy_write(path, &outputs[i], &d)) != VITC_OK)
            return status;
        ir_value v = {.name = names[i], .dtype = outputs[i].dtype, .rank = outputs[i].rank};
        for (int k = 0; k < v.rank; k++)
            v.dims[k] = ir_dim_const(outputs[i].dims[k]);
        printf("%s: %s -> %s\n", names[i], ir_value_type_str(&v, t, sizeof t), path);
    }
    return VITC_OK;
}

static int run_interpreter(const run_opts *o, double *ms)
{
    int status;
    ir_graph *g = cli_load_model(o->model, &status);
    if (!g)
        return status;
    ir_tensor *inputs = calloc((size_t)g->ninputs + 1, sizeof(ir_tensor));
    ir_tensor *outputs = calloc((size_t)g->noutputs + 1, sizeof(ir_tensor));
    const char **names = calloc((size_t)g->noutputs + 1, sizeof *names);
    if (!inputs || !outputs || !names) {
        status = VITC_INTERNAL;
        goto done;
    }
    status = cli_load_inputs(g, (char **)o->specs, o->nspecs, inputs);
    if (status)
        goto done;
    vitc_diag d;
    vitc_diag_init(&d, o->model);
    for (long r = 0; r < o->repeat && status == VITC_OK; r++) {
        for (int i = 0; i < g->noutputs; i++)
            ir_tensor_free(&outputs[i]);
        double t0 = now_ms();
        status = ir_interpret(g, inputs, outputs, NULL, NULL, &d);
        ms[r] = now_ms() - t0;
    }
    if (status)
        goto done;
    for (int i = 0; i < g->noutputs; i++)
        names[i] = g->values[g->outputs[i]].name;
    status = write_outputs(o->outdir, names, outputs, g->noutputs);
    if (status == VITC_OK && o->repeat > 1)
        print_timing("reference interpreter", ms, o->repeat);
done:
    for (int i = 0; inputs && i < g->ninputs; i++)
        ir_tensor_free(&inputs[i]);
    for (int i = 0; outputs && i < g->noutputs; i++)
        ir_tensor_free(&outputs[i]);
    free(inputs);
    free(outputs);
    free(names);
    ir_graph_free(g);
    return status;
}

static int run_compiled(const run_opts *o, double *ms)
{
    vitc_model *m = NULL;
    vitc_context *c = NULL;
    int status = cli_rt_load(o->model, &m);
    if (status)
        return status;
    int nin = vitc_model_num_inputs(m), nout = vitc_model_num_outputs(m);
    ir_tensor *inputs = calloc((size_t)nin + 1, sizeof(ir_tensor));
    ir_tensor *outputs = calloc((size_t)nout + 1, sizeof(ir_tensor));
    const char **names = calloc((size_t)nout + 1, sizeof *names);
    if (!inputs || !outputs || !names) {
        status = VITC_INTERNAL;
        goto done;
    }
    status = cli_rt_load_inputs(m, o->model, (char **)o->specs, o->nspecs, inputs);
    if (status)
        goto done;
    /* Outputs at the inputs' batch; where that is out of range, the run below
     * reports it (inputs are checked before outputs). */
    int64_t batch = cli_rt_batch_of(m, inputs), max = vitc_model_max_batch(m);
    status = cli_rt_alloc_outputs(m, batch < 1 ? 1 : batch > max ? max : batch, outputs);
    if (status)
        goto done;
    vitc_status vs = vitc_context_create(m, o->nthreads, &c);
    if (vs != VITC_STATUS_OK) {
        status = cli_rt_fail(vs);
        goto done;
    }
    /* a CUDA model also reports its kernels' GPU time (CUDA events on its stream) */
    int cuda = strcmp(vitc_model_target(m), "cuda") == 0;
    double *gpu_ms = cuda ? calloc((size_t)o->repeat, sizeof *gpu_ms) : NULL;
    for (long r = 0; r < o->repeat && status == VITC_OK; r++) {
        double t0 = now_ms();
        status = cli_rt_run(c, m, inputs, outputs);
        ms[r] = now_ms() - t0;
        if (gpu_ms && status == VITC_OK && vitc_context_device_ms(c, &gpu_ms[r]) != VITC_STATUS_OK)
            gpu_ms[r] = 0;
    }
    if (status) {
        free(gpu_ms);
        goto done;
    }
    for (int i = 0; i < nout; i++) {
        vitc_tensor_info info;
        vitc_model_output(m, i, &info);
        names[i] = info.name;
    }
    status = write_outputs(o->outdir, names, outputs, nout);
    if (status == VITC_OK && o->repeat > 1) {
        char what[128];
        int nt = vitc_context_num_threads(c);
        snprintf(what, sizeof what, "compiled model, batch %lld, %d thread%s", (long long)batch, nt,
                 nt == 1 ? "" : "s");
        print_timing(what, ms, o->repeat);
        if (gpu_ms) {
            snprintf(what, sizeof what, "GPU kernels (CUDA events), batch %lld", (long long)batch);
            print_timing(what, gpu_ms, o->repeat);
        }
    }
    free(gpu_ms);
done:
    for (int i = 0; inputs && i < nin; i++)
        ir_tensor_free(&inputs[i]);
    for (int i = 0; outputs && i < nout; i++)
        ir_tensor_free(&outputs[i]);
    free(inputs);
    free(outputs);
    free(names);
    vitc_context_free(c);
    vitc_model_free(m);
    return status;
}

int cmd_run(int argc, char **argv)
{
    run_opts o = {.outdir = ".", .repeat = 1};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        char *end;
        if (strcmp(a, "--input") == 0 && i + 1 < argc) {
            if (o.nspecs == MAX_INPUTS)
                return cli_usage_error("run: too many --input options");
            o.specs[o.nspecs++] = argv[++i];
        } else if (strcmp(a, "--output-dir") == 0 && i + 1 < argc) {
            o.outdir = argv[++i];
        } else if (strcmp(a, "--repeat") == 0 && i + 1 < argc) {
            o.repeat = strtol(argv[++i], &end, 10);
            if (*end || o.repeat < 1 || o.repeat > 100000)
                return cli_usage_error("run: --repeat takes a count from 1 to 100000");
        } else if (strcmp(a, "--threads") == 0 && i + 1 < argc) {
            long n = strtol(argv[++i], &end, 10);
            if (*end || n < 0 || n > 1024)
                return cli_usage_error("run: --threads takes a count from 0 (one per core) to 1024");
            o.nthreads = (int)n;
        } else if (a[0] == '-') {
            return cli_usage_error("run: unknown option or missing value '%s'", a);
        } else if (o.model) {
            return cli_usage_error("run: more than one model given");
        } else {
            o.model = a;
        }
    }
    if (!o.model)
        return cli_usage_error("run: no model given");
    struct stat st;
    if (stat(o.outdir, &st) == 0 && !S_ISDIR(st.st_mode))
        return cli_usage_error("run: output directory '%s' is not a directory", o.outdir);
    double *ms = calloc((size_t)o.repeat, sizeof *ms);
    if (!ms)
        return VITC_INTERNAL;
    int status = cli_is_onnx(o.model) ? run_interpreter(&o, ms) : run_compiled(&o, ms);
    free(ms);
    return status;
}
