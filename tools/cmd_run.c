/* cmd_run.c: `vitc run MODEL`, on .npy inputs, writing one NAME.npy per
 * output.  MODEL.onnx runs on the reference interpreter; anything else is
 * taken as a compiled model (.so) and runs through the runtime API.  With
 * --repeat N it times N runs and prints the min and median (for a CUDA model
 * also of its kernels' GPU time, from CUDA events), a compiled model's after
 * --warmup untimed runs (one by default with --repeat); with --profile, the
 * time of each part of a compiled model's timed runs (a CPU model's nodes, a
 * CUDA model's launches: vitc_context_profile_part). */
#include "tools/cli.h"

#include "ir/interp.h"
#include "tools/compare.h"

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
    long long repeat;
    long long warmup;   /* compiled models: untimed runs first; -1: one with --repeat N > 1, else none */
    long long nthreads; /* compiled models: 0 = one per core */
    int json;
    int profile;
    long long top;      /* --profile: the longest parts printed (0: all) */
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

/* The times of n runs (sorted here) as min, median, mean, p90 (nearest
 * rank) and images per second at the median, printed as one line or, with
 * json, as the member key. */
static void report_timing(json_w *json, const char *key, const char *what, double *ms, long n, long warmup,
                          int64_t batch)
{
    qsort(ms, (size_t)n, sizeof *ms, cmp_double);
    double median = n % 2 ? ms[n / 2] : (ms[n / 2 - 1] + ms[n / 2]) / 2, sum = 0;
    for (long i = 0; i < n; i++)
        sum += ms[i];
    long k90 = (long)((9 * n + 9) / 10) - 1; /* nearest rank: ceil(0.9 n) */
    double p90 = ms[k90 < 0 ? 0 : k90], ips = median > 0 ? (double)batch * 1e3 / median : 0;
    if (!json) {
        printf("%s: %ld runs: min %.3f ms, median %.3f ms, mean %.3f ms, p90 %.3f ms; %.1f images/s", what, n,
               ms[0], median, sum / (double)n, p90, ips);
        if (warmup > 0)
            printf(" (after %ld untimed warm-up run%s)", warmup, warmup == 1 ? "" : "s");
        printf("\n");
        return;
    }
    json_object(json, key);
    json_str(json, "what", what);
    json_int(json, "runs", n);
    json_int(json, "warmup_runs", warmup);
    json_num(json, "min_ms", ms[0]);
    json_num(json, "median_ms", median);
    json_num(json, "mean_ms", sum / (double)n);
    json_num(json, "p90_ms", p90);
    json_num(json, "images_per_s", ips);
    json_end_object(json);
}

/* Makes directory dir and the missing ones above it (mkdir -p); status. */
static int make_dirs(const char *dir)
{
    char p[PATH_MAX];
    if (!*dir)
        return cli_usage_error("run: the output directory is an empty name");
    if ((size_t)snprintf(p, sizeof p, "%s", dir) >= sizeof p)
        return cli_error("run: output directory '%s' is too long", dir);
    for (char *s = p + 1;; s++) {
        char c = *s;
        if (c != '/' && c != 0)
            continue;
        *s = 0;
        if (mkdir(p, 0777) != 0 && errno != EEXIST)
            return cli_error("run: cannot create output directory '%s': %s", p, strerror(errno));
        *s = c;
        if (!c)
            return VITC_OK;
    }
}

/* Writes outputs[i] to DIR/NAME.npy (DIR made when missing, only now that
 * there is something to write) and prints one line for each (with json, the
 * member "outputs"). */
static int write_outputs(json_w *json, const char *outdir, const char *const *names, const ir_tensor *outputs, int n)
{
    struct stat st;
    int status = stat(outdir, &st) == 0 ? VITC_OK : make_dirs(outdir);
    if (status != VITC_OK)
        return status;
    if (json)
        json_array(json, "outputs");
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
        ir_value_type_str(&v, t, sizeof t);
        if (!json) {
            printf("%s: %s -> %s\n", names[i], t, path);
            continue;
        }
        json_object(json, NULL);
        cli_tensor_json_members(json, names[i], &outputs[i]);
        json_str(json, "file", path);
        json_end_object(json);
    }
    if (json)
        json_end_array(json);
    return VITC_OK;
}

static int run_interpreter(const run_opts *o, double *ms)
{
    int status;
    static cli_shapes sh; /* a dynamic image size: the files' */
    if ((status = cli_input_shapes((char **)o->specs, o->nspecs, &sh)))
        return status;
    cli_load_opts lo = {.shapes = sh.v[0], .nshapes = sh.ninputs, .shapes_from_inputs = 1};
    ir_graph *g = cli_load_model_with(o->model, &lo, &status);
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
    json_w jw = {.f = stdout}, *json = o->json ? &jw : NULL;
    if (json) {
        json_object(json, NULL);
        json_str(json, "model", o->model);
        json_str(json, "runner", "interpreter");
    }
    status = write_outputs(json, o->outdir, names, outputs, g->noutputs);
    if (status == VITC_OK && (o->repeat > 1 || json))
        report_timing(json, "timing", "reference interpreter", ms, o->repeat, 0, cmp_batch_of(g, inputs));
    if (json)
        json_end_object(json);
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

typedef struct {
    int index;
    vitc_profile_part p;
} profile_row;

static int longest_first(const void *a, const void *b)
{
    const profile_row *x = a, *y = b;
    return x->p.seconds < y->p.seconds ? 1 : x->p.seconds > y->p.seconds ? -1 : x->index - y->index;
}

/* The profile of c's runs: every part, longest first, with its share of the
 * time in all parts; then the time per op.  With json, as member "profile". */
static int report_profile(json_w *json, const vitc_context *c, long runs, long long top)
{
    int n = vitc_context_profile_parts(c);
    profile_row *rows = calloc((size_t)(n > 0 ? n : 1), sizeof *rows);
    if (n < 0 || !rows) {
        free(rows);
        return n < 0 ? cli_rt_fail(VITC_STATUS_INVALID_ARGUMENT) : VITC_INTERNAL;
    }
    double total = 0;
    for (int i = 0; i < n; i++) {
        rows[i].index = i;
        vitc_context_profile_part(c, i, &rows[i].p);
        total += rows[i].p.seconds;
    }
    qsort(rows, (size_t)n, sizeof *rows, longest_first);
    /* time per op, in the order ops first appear among the longest */
    const char **ops = calloc((size_t)(n > 0 ? n : 1), sizeof *ops);
    double *op_s = calloc((size_t)(n > 0 ? n : 1), sizeof *op_s);
    int nops = 0;
    for (int i = 0; ops && op_s && i < n; i++) {
        int k = 0;
        while (k < nops && strcmp(ops[k], rows[i].p.op) != 0)
            k++;
        if (k == nops)
            ops[nops++] = rows[i].p.op;
        op_s[k] += rows[i].p.seconds;
    }
    double share_den = total > 0 ? total : 1;
    int shown = top > 0 && top < n ? (int)top : n;
    if (json) {
        json_object(json, "profile");
        json_int(json, "runs", runs);
        json_num(json, "ms_per_run", 1e3 * total / (double)runs);
        json_int(json, "parts_total", n);
        json_array(json, "parts");
        for (int i = 0; i < shown; i++) {
            json_object(json, NULL);
            json_int(json, "index", rows[i].index);
            json_str(json, "op", rows[i].p.op);
            json_str(json, "kernels", rows[i].p.kernels);
            json_str(json, "source", rows[i].p.source);
            json_int(json, "calls", rows[i].p.calls);
            json_num(json, "total_ms", 1e3 * rows[i].p.seconds);
            json_num(json, "share", rows[i].p.seconds / share_den);
            json_end_object(json);
        }
        json_end_array(json);
        json_array(json, "ops");
        for (int k = 0; k < nops; k++) {
            json_object(json, NULL);
            json_str(json, "op", ops[k]);
            json_num(json, "total_ms", 1e3 * op_s[k]);
            json_num(json, "share", op_s[k] / share_den);
            json_end_object(json);
        }
        json_end_array(json);
        json_end_object(json);
    } else {
        printf("profile: %d parts, %ld run%s, %.3f ms per run in them; longest first\n", n, runs, runs == 1 ? "" : "s",
               1e3 * total / (double)runs);
        printf("  %5s %6s %10s %6s  %-18s %-22s %s\n", "part", "share", "total ms", "calls", "op", "kernels", "from");
        for (int i = 0; i < shown; i++)
            printf("  %5d %5.1f%% %10.3f %6lld  %-18s %-22s %s\n", rows[i].index, 100 * rows[i].p.seconds / share_den,
                   1e3 * rows[i].p.seconds, (long long)rows[i].p.calls, rows[i].p.op, rows[i].p.kernels,
                   rows[i].p.source);
        if (shown < n) {
            double rest = 0;
            for (int i = shown; i < n; i++)
                rest += rows[i].p.seconds;
            printf("  %5s %5.1f%% %10.3f         the other %d parts\n", "...", 100 * rest / share_den, 1e3 * rest,
                   n - shown);
        }
        printf("by op:");
        for (int k = 0; k < nops; k++)
            printf("%s %s %.1f%%", k ? "," : "", ops[k], 100 * op_s[k] / share_den);
        printf("\n");
    }
    free(ops);
    free(op_s);
    free(rows);
    return VITC_OK;
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
    status = cli_rt_alloc_outputs(m, batch < 1 ? 1 : batch > max ? max : batch, inputs, outputs);
    if (status)
        goto done;
    vitc_status vs = vitc_context_create(m, (int)o->nthreads, &c);
    if (vs != VITC_STATUS_OK) {
        status = cli_rt_fail(vs);
        goto done;
    }
    /* untimed first: the first run after loading faults the workspace and the
     * weights' pages in and wakes the threads, which is not the model's speed */
    long warmup = o->warmup >= 0 ? o->warmup : o->repeat > 1 ? 1 : 0;
    for (long r = 0; r < warmup && status == VITC_OK; r++)
        status = cli_rt_run(c, m, inputs, outputs);
    if (status)
        goto done;
    if (o->profile && (vs = vitc_context_set_profiling(c, 1)) != VITC_STATUS_OK) {
        status = cli_rt_fail(vs);
        goto done;
    }
    /* a model on a device also reports its kernels' time there (CUDA events on its stream) */
    vitc_cuda_details cd;
    double *gpu_ms = vitc_model_cuda_details(m, &cd) == VITC_STATUS_OK ? calloc((size_t)o->repeat, sizeof *gpu_ms) : NULL;
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
    json_w jw = {.f = stdout}, *json = o->json ? &jw : NULL;
    int nt = vitc_context_num_threads(c);
    if (json) {
        json_object(json, NULL);
        json_str(json, "model", o->model);
        json_str(json, "runner", vitc_model_target(m));
        json_int(json, "batch", batch);
        json_int(json, "threads", nt);
    }
    status = write_outputs(json, o->outdir, names, outputs, nout);
    if (status == VITC_OK && (o->repeat > 1 || json)) {
        char what[128];
        snprintf(what, sizeof what, "compiled model, batch %lld, %d thread%s", (long long)batch, nt,
                 nt == 1 ? "" : "s");
        report_timing(json, "timing", what, ms, o->repeat, warmup, batch);
        if (gpu_ms) {
            snprintf(what, sizeof what, "GPU kernels (CUDA events), batch %lld", (long long)batch);
            report_timing(json, "gpu_timing", what, gpu_ms, o->repeat, warmup, batch);
        }
    }
    if (status == VITC_OK && o->profile)
        status = report_profile(json, c, o->repeat, o->top);
    if (json)
        json_end_object(json);
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

static const cli_option run_options[] = {
    {"input", 'i', "[NAME=]FILE.npy",
     "An input, by name or (without NAME=) in the model's input order; once per input.", .store = CLI_TAKE},
    {"output-dir", 0, "DIR",
     "Where to write one NAME.npy per output (default '.'; made, with its parents, when the run succeeds).",
     .store = CLI_STRING, .at = offsetof(run_opts, outdir)},
    {"repeat", 0, "N",
     "Run N times and print min, median, mean and p90 times and images/s (for a CUDA model also its kernels' GPU "
     "time).",
     .store = CLI_COUNT, .at = offsetof(run_opts, repeat), .lo = 1, .hi = 100000},
    {"warmup", 0, "N",
     "Compiled models: N untimed runs before the timed ones, outside the timing and the profile (default 1 with "
     "--repeat above 1, else 0).",
     .store = CLI_COUNT, .at = offsetof(run_opts, warmup), .lo = 0, .hi = 100000},
    {"threads", 0, "N", "Compiled models: threads to run on, the caller's included (default 0: one per core).",
     .store = CLI_COUNT, .at = offsetof(run_opts, nthreads), .lo = 0, .hi = 1024},
    {"profile", 0, NULL,
     "Compiled models: time each part of the runs (CPU: the code of one node of the compiled graph, its op, kernels "
     "and ONNX nodes; CUDA: each kernel launch, by CUDA events, launched one by one) and print the parts longest "
     "first with their share, then the time per op.",
     .store = CLI_FLAG, .at = offsetof(run_opts, profile)},
    {"top", 0, "N",
     "With --profile: print the N longest parts only (then one line for the rest); the time per op counts all.",
     .store = CLI_COUNT, .at = offsetof(run_opts, top), .lo = 1, .hi = 1000000},
    {"json", 0, NULL, "Print the outputs written, the timings and the profile as one JSON object instead.",
     .store = CLI_FLAG, .at = offsetof(run_opts, json)},
    {0},
};

const cli_command cli_run_command = {
    "run",
    "vitc run MODEL.onnx|MODEL.so --input [NAME=]FILE.npy ... [--output-dir DIR] [--repeat N]\n"
    "                             [--warmup N] [--threads N] [--profile [--top N]] [--json]",
    "Run a compiled model (.so) through the runtime, or an ONNX model with the reference interpreter\n"
    "(plain loops, double accumulation), and write one NAME.npy per output.",
    run_options,
    cmd_run,
};

/* The model and the --input files; cli_parse stores the other options. */
static int take_run(void *ctx, int key, const char *v)
{
    run_opts *o = ctx;
    if (key == CLI_POSITIONAL)
        return cli_take_model(&cli_run_command, &o->model, v);
    if (o->nspecs == MAX_INPUTS)
        return cli_usage_error("run: too many --input options");
    o->specs[o->nspecs++] = (char *)v;
    return VITC_OK;
}

int cmd_run(int argc, char **argv)
{
    run_opts o = {.outdir = ".", .repeat = 1, .warmup = -1};
    int st = cli_parse(&cli_run_command, argc, argv, take_run, &o);
    if (st != VITC_OK)
        return st == CLI_HELP_SHOWN ? VITC_OK : st;
    if (!o.model)
        return cli_usage_error("run: no model given");
    struct stat sb;
    if (stat(o.outdir, &sb) == 0 && !S_ISDIR(sb.st_mode))
        return cli_error("run: output directory '%s' is not a directory", o.outdir);
    if (o.top && !o.profile)
        return cli_usage_error("run: --top N chooses the parts --profile prints; give --profile too");
    if (o.profile && cli_is_onnx(o.model))
        return cli_usage_error("run: --profile times compiled models; '%s' is an ONNX model (compile it first)",
                               o.model);
    double *ms = calloc((size_t)o.repeat, sizeof *ms);
    if (!ms)
        return VITC_INTERNAL;
    int status = cli_is_onnx(o.model) ? run_interpreter(&o, ms) : run_compiled(&o, ms);
    free(ms);
    return status;
}
