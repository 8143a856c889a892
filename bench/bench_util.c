/* bench_util.c: clock, peak-FLOP/s kernel and its threaded measurement (see
 * bench_util.h). */
#include "bench_util.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codegen/llvm/kern_ir.h"

enum { PEAK_ROUNDS = 4 };

double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Accumulators: every register but the two operands, so that the FMA units'
 * latency is hidden by independent chains (12 on AVX2: 4-cycle latency x 2
 * units needs at least 8). */
static int peak_chains(const cg_target *t) { return t->nregs - 4 > 24 ? 24 : t->nregs - 4; }

double bench_emit_peak(LLVMModuleRef mod, const char *name, const cg_target *t)
{
    kern k;
    if (kern_init(&k, mod, t))
        return 0;
    int nacc = peak_chains(t);
    LLVMTypeRef params[2] = {k.ptr, k.i64};
    LLVMValueRef fn = kern_func(&k, name, LLVMFunctionType(k.voidt, params, 2, 0), 0);
    LLVMValueRef st = LLVMGetParam(fn, 0);
    LLVMValueRef x = kern_vload(&k, st, k.vf, NULL);
    LLVMValueRef y = kern_vload(&k, kern_gepc(&k, st, k.vf), k.vf, NULL);
    LLVMValueRef acc[KERN_MAX_CARRY];
    for (int i = 0; i < nacc; i++)
        acc[i] = kern_vload(&k, kern_gepc(&k, st, (int64_t)(2 + i) * k.vf), k.vf, NULL);
    kern_loop L;
    kern_for(&k, &L, kern_i64(&k, 0), LLVMGetParam(fn, 1), 1, 0, nacc, acc, "iter");
    for (int i = 0; i < nacc; i++)
        acc[i] = L.carry[i];
    for (int r = 0; r < PEAK_ROUNDS; r++)
        for (int i = 0; i < nacc; i++)
            acc[i] = kern_fma(&k, acc[i], x, y);
    kern_for_end(&k, &L, acc);
    for (int i = 0; i < nacc; i++)
        kern_vstore(&k, L.carry[i], kern_gepc(&k, st, (int64_t)(2 + i) * k.vf), k.vf);
    LLVMBuildRetVoid(k.b);
    kern_dispose(&k);
    return 2.0 * PEAK_ROUNDS * nacc * k.vf;
}

typedef void (*peak_fn)(float *state, int64_t iters);

typedef struct {
    peak_fn fn;
    int64_t iters;
    pthread_barrier_t *start;
    float state[2 * 16 + 24 * 16];
} peak_job;

static void *peak_thread(void *arg)
{
    peak_job *j = arg;
    pthread_barrier_wait(j->start);
    j->fn(j->state, j->iters);
    return NULL;
}

/* Runs iters on nthreads threads; returns the wall time. */
static double peak_run(peak_fn fn, int64_t iters, int nthreads)
{
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)nthreads + 1);
    peak_job *jobs = calloc((size_t)nthreads, sizeof *jobs);
    pthread_t *th = calloc((size_t)nthreads, sizeof *th);
    if (!jobs || !th) {
        fprintf(stderr, "out of memory\n");
        exit(3);
    }
    for (int i = 0; i < nthreads; i++) {
        jobs[i].fn = fn;
        jobs[i].iters = iters;
        jobs[i].start = &start;
        /* acc = acc * 0.999999 + 1e-7 converges to 0.1: no overflow, no denormals */
        for (size_t s = 0; s < sizeof jobs[i].state / sizeof(float); s++)
            jobs[i].state[s] = s < 16 ? 0.999999f : s < 32 ? 1e-7f : 0.5f;
        if (pthread_create(&th[i], NULL, peak_thread, &jobs[i])) {
            fprintf(stderr, "pthread_create failed\n");
            exit(3);
        }
    }
    pthread_barrier_wait(&start);
    double t0 = bench_now();
    for (int i = 0; i < nthreads; i++)
        pthread_join(th[i], NULL);
    double t = bench_now() - t0;
    pthread_barrier_destroy(&start);
    free(jobs);
    free(th);
    return t;
}

double bench_peak_gflops(void *fn, double flops_per_iter, int nthreads, double seconds)
{
    peak_fn f = (peak_fn)fn;
    int64_t iters = 1 << 16;
    double t = peak_run(f, iters, 1);
    while (t < 0.05) {
        iters *= 4;
        t = peak_run(f, iters, 1);
    }
    iters = (int64_t)((double)iters * seconds / t);
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        double tt = peak_run(f, iters, nthreads);
        double g = flops_per_iter * (double)iters * nthreads / tt * 1e-9;
        if (g > best)
            best = g;
    }
    return best;
}
