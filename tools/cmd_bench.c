/* cmd_bench.c: `vitc bench MODEL.so`, a compiled model's throughput and
 * latency under load, as trtexec and OpenVINO's benchmark_app measure them.
 *
 * --concurrency N requests are in flight at once, each on a thread of its
 * own with a context of its own (its workspace, and --threads T threads of
 * the runtime's pool), all made before the clock starts, each with its own
 * input and output buffers: the model's inputs at --batch B, filled with
 * seeded standard normal values as `vitc compare` makes them.  Each context
 * first runs --warmup untimed requests; then all start together, and each
 * runs request after request until --time S has passed (a request started
 * before then completes and counts) or --requests N have been started
 * among them.  Throughput is the requests (and images: requests x B)
 * completed over the wall time from the start to the last completion;
 * latency is each request's time in vitc_run, reported as min, mean, p50,
 * p90, p99 (nearest rank) and max.
 *
 * CUDA models run through the same calls (vitc_run on host buffers: inputs
 * copied in, outputs out, on each context's own stream, one host thread per
 * context); without a GPU the first context fails with the runtime's
 * VITC_STATUS_NO_DEVICE message. */
#include "tools/cli.h"

#include "codegen/progress.h" /* now_s */
#include "tools/compare.h"    /* cmp_random_fill */

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BENCH_MAX_TIME_S 86400.0

enum { OPT_TIME = 256 };

typedef struct {
    const char *model;
    double time_s;         /* 0: not given */
    long long requests;    /* 0: not given */
    long long concurrency; /* requests in flight */
    long long batch;       /* 0: the model's smallest */
    long long threads;     /* per context; 0: the online cores shared among the requests */
    long long warmup;      /* untimed requests per context */
    long long seed;
    int json;
} bench_opts;

typedef struct bench_state bench_state;

/* One request slot: a thread, its context, its buffers and what it measured. */
typedef struct {
    bench_state *b;
    vitc_context *ctx;
    ir_tensor *in, *out;         /* the model's inputs and outputs at the batch */
    vitc_tensor *vin, *vout;     /* the same, as vitc_run takes them */
    double *lat;                 /* seconds per timed request */
    size_t nlat, cap;
    double last_done;            /* when its last timed request completed (seconds) */
    vitc_status status;          /* a failed request's */
    char error[1024];            /* and its vitc_last_error() */
    pthread_t thread;
} bench_slot;

struct bench_state {
    int nin, nout;
    long long warmup;
    long long limit;             /* --requests, or 0: until t_end */
    double time_s;
    double t_start, t_end;       /* set by one thread between the two barriers */
    atomic_llong issued;         /* requests started under --requests */
    atomic_int stop;             /* a request failed: everyone stops */
    pthread_barrier_t warmed, go;
};

/* One request; 0 (and everyone told to stop) when it failed. */
static int request(bench_slot *w)
{
    vitc_status st = vitc_run(w->ctx, w->vin, w->b->nin, w->vout, w->b->nout);
    if (st == VITC_STATUS_OK)
        return 1;
    w->status = st;
    snprintf(w->error, sizeof w->error, "%s", vitc_last_error());
    atomic_store(&w->b->stop, 1);
    return 0;
}

static int record(bench_slot *w, double seconds)
{
    if (w->nlat == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 1024;
        double *p = realloc(w->lat, cap * sizeof *p);
        if (!p) {
            w->status = VITC_STATUS_OUT_OF_MEMORY;
            snprintf(w->error, sizeof w->error, "bench: out of memory for the latencies of %zu requests", w->nlat);
            atomic_store(&w->b->stop, 1);
            return 0;
        }
        w->lat = p;
        w->cap = cap;
    }
    w->lat[w->nlat++] = seconds;
    return 1;
}

static void *slot_main(void *arg)
{
    bench_slot *w = arg;
    bench_state *b = w->b;
    for (long long i = 0; i < b->warmup && !atomic_load(&b->stop); i++)
        if (!request(w))
            break;
    /* all warmed up (or failed): one thread starts the clock, then all go */
    if (pthread_barrier_wait(&b->warmed) == PTHREAD_BARRIER_SERIAL_THREAD) {
        b->t_start = now_s();
        b->t_end = b->t_start + b->time_s;
    }
    pthread_barrier_wait(&b->go);
    w->last_done = b->t_start;
    for (int first = 1; !atomic_load_explicit(&b->stop, memory_order_relaxed); first = 0) {
        if (b->limit) {
            if (atomic_fetch_add(&b->issued, 1) >= b->limit)
                break;
        } else if (!first && now_s() >= b->t_end) { /* every slot runs at least one request */
            break;
        }
        double t0 = now_s();
        if (!request(w))
            break;
        double t1 = now_s();
        if (!record(w, t1 - t0))
            break;
        w->last_done = t1;
    }
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The nearest-rank percentile q (0 < q <= 1) of n sorted values. */
static double percentile(const double *v, size_t n, double q)
{
    size_t k = (size_t)ceil(q * (double)n);
    return v[k > 0 ? k - 1 : 0];
}

/* The model's inputs (fill: seeded random) or outputs at a batch into t. */
static int alloc_tensors(const vitc_model *m, int outputs, int64_t batch, uint64_t seed, ir_tensor *t,
                         vitc_tensor *v)
{
    int n = outputs ? vitc_model_num_outputs(m) : vitc_model_num_inputs(m);
    for (int i = 0; i < n; i++) {
        vitc_tensor_info info;
        if (outputs)
            vitc_model_output(m, i, &info);
        else
            vitc_model_input(m, i, &info);
        int dt = ir_dtype_from_onnx(info.dtype);
        if (dt < 0)
            return cli_error("bench: %s '%s' has dtype %d, which the tools cannot hold", outputs ? "output" : "input",
                             info.name, info.dtype);
        int64_t dims[VITC_MAX_RANK];
        for (int k = 0; k < info.rank; k++)
            dims[k] = info.dims[k] * (info.is_batch[k] ? batch : 1);
        int st = ir_tensor_alloc(&t[i], (ir_dtype)dt, info.rank, dims);
        if (st != VITC_OK)
            return st == VITC_INTERNAL ? (fprintf(stderr, "vitc: bench: out of memory\n"), VITC_INTERNAL)
                                       : cli_error("bench: %s '%s' at batch %lld is too large",
                                                   outputs ? "output" : "input", info.name, (long long)batch);
        if (!outputs)
            cmp_random_fill(&t[i], seed + (uint64_t)i);
        cli_rt_tensor(&t[i], &v[i]);
    }
    return VITC_OK;
}

/* Writes the results, text or JSON. */
static void report(const bench_opts *o, const vitc_model *m, const bench_slot *slots, int nslots, int64_t batch,
                   int threads, const ir_tensor *inputs, double *lat, size_t n, double duration)
{
    qsort(lat, n, sizeof *lat, cmp_double);
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += lat[i];
    double ms[6] = {1e3 * lat[0], 1e3 * sum / (double)n, 1e3 * percentile(lat, n, 0.5), 1e3 * percentile(lat, n, 0.9),
                    1e3 * percentile(lat, n, 0.99), 1e3 * lat[n - 1]};
    double rps = (double)n / duration, ips = (double)n * (double)batch / duration;
    if (!o->json) {
        printf("%s: %s, batch %lld, %lld request%s at a time, %d thread%s each, ", o->model, vitc_model_target(m),
               (long long)batch, o->concurrency, o->concurrency == 1 ? "" : "s", threads, threads == 1 ? "" : "s");
        if (o->requests)
            printf("%lld requests", o->requests);
        else
            printf("for %g s", o->time_s);
        printf(" (after %lld untimed warm-up request%s per context)\n", o->warmup, o->warmup == 1 ? "" : "s");
        printf("throughput: %zu requests (%lld images) in %.3f %s: %.2f requests/s, %.2f images/s\n", n,
               (long long)n * (long long)batch, duration < 1 ? 1e3 * duration : duration, duration < 1 ? "ms" : "s",
               rps, ips);
        printf("latency: min %.3f ms, mean %.3f ms, p50 %.3f ms, p90 %.3f ms, p99 %.3f ms, max %.3f ms\n", ms[0],
               ms[1], ms[2], ms[3], ms[4], ms[5]);
        return;
    }
    json_w jw = {.f = stdout}, *w = &jw;
    json_object(w, NULL);
    json_str(w, "model", o->model);
    json_str(w, "target", vitc_model_target(m));
    json_str(w, "precision", vitc_model_precision(m));
    json_int(w, "batch", batch);
    json_int(w, "concurrency", o->concurrency);
    json_int(w, "threads", threads); /* per request */
    json_int(w, "warmup_requests", o->warmup); /* per context */
    json_int(w, "seed", o->seed);
    json_object(w, "limit");
    if (o->requests)
        json_int(w, "requests", o->requests);
    else
        json_num(w, "time_s", o->time_s);
    json_end_object(w);
    json_array(w, "inputs");
    for (int i = 0; i < vitc_model_num_inputs(m); i++) {
        vitc_tensor_info info;
        vitc_model_input(m, i, &info);
        json_object(w, NULL);
        cli_tensor_json_members(w, info.name, &inputs[i]);
        json_end_object(w);
    }
    json_end_array(w);
    json_int(w, "requests", (long long)n);
    json_int(w, "images", (long long)n * (long long)batch);
    json_num(w, "duration_s", duration);
    json_num(w, "requests_per_s", rps);
    json_num(w, "images_per_s", ips);
    json_object(w, "latency");
    static const char *const keys[6] = {"min_ms", "mean_ms", "p50_ms", "p90_ms", "p99_ms", "max_ms"};
    for (int i = 0; i < 6; i++)
        json_num(w, keys[i], ms[i]);
    json_end_object(w);
    json_array(w, "requests_per_context");
    for (int i = 0; i < nslots; i++)
        json_int(w, NULL, (long long)slots[i].nlat);
    json_end_array(w);
    json_end_object(w);
}

static int bench(const bench_opts *o0)
{
    bench_opts o = *o0;
    vitc_model *m = NULL;
    int status = cli_rt_load(o.model, &m);
    if (status)
        return status;
    int64_t lo = vitc_model_min_batch(m), hi = vitc_model_max_batch(m);
    int64_t batch = o.batch ? o.batch : lo;
    if (batch < lo || batch > hi) {
        if (lo == hi)
            cli_error("bench: --batch %lld: %s runs batch %lld only", (long long)batch, o.model, (long long)lo);
        else
            cli_error("bench: --batch %lld: %s runs batches %lld to %lld", (long long)batch, o.model, (long long)lo,
                      (long long)hi);
        vitc_model_free(m);
        return VITC_BAD_INPUT;
    }
    int cuda = strcmp(vitc_model_target(m), "cpu") != 0;
    if (cuda && o.threads > 1) {
        vitc_diag d;
        vitc_diag_init(&d, o.model);
        vitc_warning(&d, NULL, "--threads %lld does nothing for a %s model: each request runs on a stream of its own, "
                               "driven by one host thread", o.threads, vitc_model_target(m));
    }
    int nthreads = (int)o.threads;
    if (nthreads == 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        nthreads = cores > o.concurrency ? (int)(cores / o.concurrency) : 1;
    }

    int nslots = (int)o.concurrency;
    bench_state b = {.nin = vitc_model_num_inputs(m), .nout = vitc_model_num_outputs(m), .warmup = o.warmup,
                     .limit = o.requests, .time_s = o.time_s};
    bench_slot *slots = calloc((size_t)nslots, sizeof *slots);
    double *lat = NULL;
    int barriers = 0;
    if (!slots) {
        status = VITC_INTERNAL;
        goto done;
    }
    /* the contexts and buffers first, so that a failure is reported before anything runs */
    for (int i = 0; i < nslots; i++) {
        bench_slot *w = &slots[i];
        w->b = &b;
        w->in = calloc((size_t)b.nin + 1, sizeof *w->in);
        w->out = calloc((size_t)b.nout + 1, sizeof *w->out);
        w->vin = calloc((size_t)b.nin + 1, sizeof *w->vin);
        w->vout = calloc((size_t)b.nout + 1, sizeof *w->vout);
        if (!w->in || !w->out || !w->vin || !w->vout) {
            fprintf(stderr, "vitc: bench: out of memory\n");
            status = VITC_INTERNAL;
            goto done;
        }
        if ((status = alloc_tensors(m, 0, batch, (uint64_t)o.seed, w->in, w->vin)) != VITC_OK ||
            (status = alloc_tensors(m, 1, batch, 0, w->out, w->vout)) != VITC_OK)
            goto done;
        vitc_status vs = vitc_context_create(m, nthreads, &w->ctx);
        if (vs != VITC_STATUS_OK) {
            status = cli_rt_fail(vs);
            goto done;
        }
    }
    int threads = vitc_context_num_threads(slots[0].ctx);
    if (pthread_barrier_init(&b.warmed, NULL, (unsigned)nslots) != 0 ||
        pthread_barrier_init(&b.go, NULL, (unsigned)nslots) != 0) {
        fprintf(stderr, "vitc: bench: cannot make a barrier for %d threads\n", nslots);
        status = VITC_INTERNAL;
        goto done;
    }
    barriers = 1;
    for (int i = 0; i < nslots; i++) {
        int err = pthread_create(&slots[i].thread, NULL, slot_main, &slots[i]);
        if (err) {
            /* the others wait at the barrier for this one: there is no going on */
            fprintf(stderr, "vitc: bench: could not start request thread %d of %d: %s\n", i + 1, nslots,
                    strerror(err));
            exit(VITC_INTERNAL);
        }
    }
    size_t n = 0;
    double end = 0;
    for (int i = 0; i < nslots; i++) {
        pthread_join(slots[i].thread, NULL);
        n += slots[i].nlat;
        if (slots[i].last_done > end)
            end = slots[i].last_done;
    }
    for (int i = 0; i < nslots; i++)
        if (slots[i].status != VITC_STATUS_OK) {
            fprintf(stderr, "vitc: %s\n", slots[i].error);
            status = cli_rt_exit_code(slots[i].status);
            goto done;
        }
    if (n == 0 || !(lat = malloc(n * sizeof *lat))) {
        fprintf(stderr, "vitc: bench: %s\n", n ? "out of memory" : "no request completed");
        status = VITC_INTERNAL;
        goto done;
    }
    for (size_t i = 0, k = 0; i < (size_t)nslots; k += slots[i].nlat, i++)
        if (slots[i].nlat) /* a context that ran none has no array */
            memcpy(lat + k, slots[i].lat, slots[i].nlat * sizeof *lat);
    report(&o, m, slots, nslots, batch, threads, slots[0].in, lat, n, end - b.t_start);
    status = VITC_OK;
done:
    if (barriers) {
        pthread_barrier_destroy(&b.warmed);
        pthread_barrier_destroy(&b.go);
    }
    for (int i = 0; slots && i < nslots; i++) {
        bench_slot *w = &slots[i];
        for (int k = 0; w->in && k < b.nin; k++)
            ir_tensor_free(&w->in[k]);
        for (int k = 0; w->out && k < b.nout; k++)
            ir_tensor_free(&w->out[k]);
        free(w->in), free(w->out), free(w->vin), free(w->vout), free(w->lat);
        vitc_context_free(w->ctx);
    }
    free(slots);
    free(lat);
    vitc_model_free(m);
    return status;
}

static const cli_option bench_options[] = {
    {"time", OPT_TIME, "S",
     "Send requests for S seconds (default 5; a fraction allowed); requests under way then complete and count.",
     .store = CLI_TAKE},
    {"requests", 0, "N", "Send N requests in all instead, shared among the concurrent ones.", .store = CLI_COUNT,
     .at = offsetof(bench_opts, requests), .lo = 1, .hi = 1000000000},
    {"concurrency", 0, "N",
     "Requests in flight at once (default 1), each on a thread and a context of its own (its own memory).",
     .store = CLI_COUNT, .at = offsetof(bench_opts, concurrency), .lo = 1, .hi = 256},
    {"batch", 0, "B", "Images per request (default the model's smallest batch, 1 unless its export fixed it).",
     .store = CLI_COUNT, .at = offsetof(bench_opts, batch), .lo = 1, .hi = 1000000},
    {"threads", 0, "T",
     "Threads per request, the request's own included (default 0: the online cores shared among the concurrent "
     "requests, at least 1 each). CPU models only.",
     .store = CLI_COUNT, .at = offsetof(bench_opts, threads), .lo = 0, .hi = 1024},
    {"warmup", 0, "N", "Untimed requests on each context before the clock starts (default 1).", .store = CLI_COUNT,
     .at = offsetof(bench_opts, warmup), .lo = 0, .hi = 100000},
    {"seed", 0, "S", "The seed of the random inputs (standard normal, as vitc compare's; default 0).",
     .store = CLI_COUNT, .at = offsetof(bench_opts, seed), .lo = 0, .hi = INT64_MAX},
    {"json", 0, NULL, "Print the settings and results as one JSON object instead.", .store = CLI_FLAG,
     .at = offsetof(bench_opts, json)},
    {0},
};

const cli_command cli_bench_command = {
    "bench",
    "vitc bench MODEL.so [--time S | --requests N] [--concurrency N] [--batch B] [--threads T]\n"
    "                    [--warmup N] [--seed S] [--json]",
    "Measure a compiled model's throughput (requests/s, images/s) and latency (p50, p90, p99): N requests\n"
    "in flight at once, each on a context of its own, on seeded random inputs, for S seconds or N requests\n"
    "in all. A CUDA model runs a stream per request (tested on an emulated GPU only, not yet on a real one).",
    bench_options,
    cmd_bench,
};

static int take_bench(void *ctx, int key, const char *v)
{
    bench_opts *o = ctx;
    if (key == CLI_POSITIONAL)
        return cli_take_model(&cli_bench_command, &o->model, v);
    if (key == OPT_TIME) {
        char *end;
        double t = strtod(v, &end);
        if (!*v || *end || !(t > 0) || t > BENCH_MAX_TIME_S)
            return cli_usage_error("bench: --time takes seconds, a number above 0 and up to %g, not '%s'",
                                   BENCH_MAX_TIME_S, v);
        o->time_s = t;
        return VITC_OK;
    }
    return VITC_INTERNAL;
}

int cmd_bench(int argc, char **argv)
{
    bench_opts o = {.concurrency = 1, .warmup = 1};
    int st = cli_parse(&cli_bench_command, argc, argv, take_bench, &o);
    if (st != VITC_OK)
        return st == CLI_HELP_SHOWN ? VITC_OK : st;
    if (!o.model)
        return cli_usage_error("bench: no model given");
    if (cli_is_onnx(o.model))
        return cli_usage_error("bench: '%s' is an ONNX model; bench runs compiled ones (vitc compile %s -o MODEL.so)",
                               o.model, o.model);
    if (o.time_s > 0 && o.requests)
        return cli_usage_error("bench: --time and --requests do not go together (one says when to stop)");
    if (o.time_s == 0 && o.requests == 0)
        o.time_s = 5;
    return bench(&o);
}
