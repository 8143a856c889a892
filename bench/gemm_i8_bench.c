/* gemm_i8_bench.c: the int8 GEMM (cg_gemm_i8_emit, VPDPBUSD) against the
 * fp32 GEMM (cg_gemm_emit) on ViT-B/16's Linear layers, in the same run, at
 * 1 and 2 threads of the runtime's pool: GOP/s (2 M N K multiplies and adds
 * per call, for both) and the share of the peaks measured first, int8 of
 * VPDPBUSD's and fp32 of the FMA's (peak_dot.c, peak_fma.c).  Each layer has
 * a bias (and a residual where the model has one); the int8 GEMM's
 * activation scale and zero point are per row.  Weights stay in cache
 * between calls (no --cold here).
 *
 *   gemm_i8_bench [BATCH ...]   (default 1 and 8: M = 197 * BATCH) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "runtime/rt_impl.h"

typedef void (*task_fn)(void *, int64_t, int64_t);
typedef void (*driver_fn)(const void *args, void *pool, void (*pf)(void *, int64_t, task_fn, void *),
                          int32_t nthreads);

static const struct {
    const char *layer;
    int64_t K, N;
    int has_residual, activation;
} layers[] = {{"qkv", 768, 2304, 0, 0}, {"proj", 768, 768, 1, 0}, {"fc1", 768, 3072, 0, 1}, {"fc2", 3072, 768, 1, 0}};
#define NLAYERS (sizeof layers / sizeof layers[0])

static void *xalloc(size_t bytes)
{
    void *p = rt_aligned_alloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "gemm_i8_bench: out of memory\n");
        exit(3);
    }
    return p;
}

/* Seconds of the fastest call among at least 5 calls and 0.3 s, after a warm-up. */
static double time_kernel(driver_fn fn, const void *args, rt_pool *pool, int nthreads)
{
    fn(args, pool, rt_parallel_for, nthreads);
    double start = bench_now(), best = 1e30;
    for (int n = 0; n < 10000 && (n < 5 || bench_now() - start < 0.3); n++) {
        double t0 = bench_now();
        fn(args, pool, rt_parallel_for, nthreads);
        double t = bench_now() - t0;
        best = t < best ? t : best;
    }
    return best;
}

int main(int argc, char **argv)
{
    int batches[16], nb = 0;
    for (int i = 1; i < argc && nb < 16; i++)
        if ((batches[nb++] = atoi(argv[i])) < 1) {
            fprintf(stderr, "usage: gemm_i8_bench [BATCH ...]\n");
            return 2;
        }
    if (!nb)
        batches[nb++] = 1, batches[nb++] = 8;
    char err[512], missing[256];
    if (rt_cpu_missing_features("+avx512f,+avx512vnni", missing, sizeof missing) > 0) {
        printf("gemm_i8_bench: not available (this CPU lacks %s)\n", missing);
        return 0;
    }
    cg_jit *j = cg_jit_new(err, sizeof err);
    if (!j) {
        fprintf(stderr, "gemm_i8_bench: %s\n", err);
        return 3;
    }
    cg_target t = cg_jit_target(j);
    if (t.vec_floats != 16) {
        printf("gemm_i8_bench: not available (no AVX-512 in the JIT's features)\n");
        cg_jit_free(j);
        return 0;
    }
    int ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN), maxthreads = ncpu > 1 ? 2 : 1;

    /* the peaks: fp32 FMA and int8 VPDPBUSD, at 1 and 2 threads */
    LLVMModuleRef pm = cg_jit_module(j, "peak");
    double flops = bench_emit_peak(pm, "peak", &t);
    if (flops <= 0 || cg_jit_add(j, pm, "default<O2>", err, sizeof err)) {
        fprintf(stderr, "gemm_i8_bench: cannot build the peak kernel\n");
        return 3;
    }
    bench_dot_unit u[BENCH_DOT_UNITS];
    bench_dot_units(u);
    const bench_dot_unit *vnni = NULL;
    for (int i = 0; i < BENCH_DOT_UNITS; i++)
        if (!strcmp(u[i].insn, "VPDPBUSD") || !strcmp(u[i].insn, "vpdpbusd"))
            vnni = &u[i];
    double peak32[3] = {0}, peak8[3] = {0};
    for (int nt = 1; nt <= maxthreads; nt++) {
        peak32[nt] = bench_peak_gflops(cg_jit_lookup(j, "peak"), flops, nt, 0.3);
        peak8[nt] = vnni && vnni->fn ? bench_peak_gflops((void *)vnni->fn, vnni->ops_per_iter, nt, 0.3) : 0;
    }
    printf("host %s, %d cores online; peaks: fp32 FMA %.0f / %.0f GFLOP/s, int8 VPDPBUSD %.0f / %.0f GOP/s "
           "(1 / %d threads)\n",
           cg_jit_cpu(j), ncpu, peak32[1], peak32[maxthreads], peak8[1], peak8[maxthreads], maxthreads);
    if (!(peak8[1] > 0))
        printf("  (the int8 peak is not available: %s)\n", vnni ? vnni->why : "no VPDPBUSD unit listed");

    LLVMModuleRef m = cg_jit_module(j, "gemm");
    for (size_t l = 0; l < NLAYERS; l++) {
        char name[32];
        cg_gemm_desc d = {.K = layers[l].K, .N = layers[l].N, .lda = layers[l].K, .ldc = layers[l].N,
                          .ldr = layers[l].N, .has_bias = 1, .has_residual = layers[l].has_residual,
                          .activation = layers[l].activation};
        cg_gemm_i8_desc di = {.g = d, .a_per_row = 1};
        snprintf(name, sizeof name, "f32_%zu", l);
        if (!cg_gemm_emit(m, name, &d, &t))
            return 3;
        snprintf(name, sizeof name, "i8_%zu", l);
        if (!cg_gemm_i8_emit(m, name, &di, &t))
            return 3;
    }
    if (cg_jit_add(j, m, "default<O2>", err, sizeof err)) {
        fprintf(stderr, "gemm_i8_bench: %s\n", err);
        return 3;
    }
    rt_pool *pools[3] = {NULL, rt_pool_new(1), maxthreads > 1 ? rt_pool_new(2) : NULL};
    printf("%-6s %5s %5s %5s %3s  %9s %6s  %9s %6s  %7s\n", "layer", "M", "K", "N", "thr", "fp32 GOP/s", "%peak",
           "int8 GOP/s", "%peak", "speedup");
    for (int bi = 0; bi < nb; bi++)
        for (size_t l = 0; l < NLAYERS; l++) {
            int64_t M = 197 * (int64_t)batches[bi], K = layers[l].K, N = layers[l].N;
            cg_gemm_desc d = {.K = K, .N = N, .lda = K, .ldc = N, .ldr = N, .has_bias = 1,
                              .has_residual = layers[l].has_residual, .activation = layers[l].activation};
            cg_gemm_i8_desc di = {.g = d, .a_per_row = 1};
            float *A = xalloc((size_t)(M * K) * 4), *W = xalloc((size_t)(K * N) * 4), *bias = xalloc((size_t)N * 4);
            float *R = xalloc((size_t)(M * N) * 4), *C = xalloc((size_t)(M * N) * 4), *sw = xalloc((size_t)N * 4);
            float *sa = xalloc((size_t)M * 4);
            int32_t *za = xalloc((size_t)M * 4);
            uint8_t *A8 = xalloc((size_t)(M * K));
            int8_t *W8 = xalloc((size_t)(K * N));
            for (int64_t i = 0; i < M * K; i++)
                A[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f, A8[i] = (uint8_t)(i * 2654435761u >> 7);
            for (int64_t i = 0; i < K * N; i++)
                W[i] = (float)((i * 40503u) % 1000) / 1000.0f - 0.5f, W8[i] = (int8_t)(i * 40503u >> 5);
            for (int64_t i = 0; i < N; i++)
                bias[i] = 0.1f, sw[i] = 0.01f;
            for (int64_t i = 0; i < M; i++)
                sa[i] = 0.02f, za[i] = 128;
            memset(R, 0, (size_t)(M * N) * 4);
            void *P32 = xalloc(cg_gemm_packed_bytes(&d, &t)), *P8 = xalloc(cg_gemm_i8_packed_bytes(&di, &t));
            cg_gemm_pack(&d, &t, W, P32);
            cg_gemm_i8_pack(&di, &t, W8, sw, P8);
            cg_gemm_args a32 = {.A = A, .W = P32, .bias = bias, .R = d.has_residual ? R : NULL, .C = C, .M = M};
            cg_gemm_i8_args a8 = {.A = A8, .W = P8, .bias = bias, .R = d.has_residual ? R : NULL, .C = C,
                                  .a_scale = sa, .a_zero = za, .M = M};
            char n32[32], n8[32];
            snprintf(n32, sizeof n32, "f32_%zu", l);
            snprintf(n8, sizeof n8, "i8_%zu", l);
            for (int nt = 1; nt <= maxthreads; nt++) {
                double ops = 2.0 * (double)M * (double)N * (double)K;
                double g32 = ops / time_kernel((driver_fn)cg_jit_lookup(j, n32), &a32, pools[nt], nt) * 1e-9;
                double g8 = ops / time_kernel((driver_fn)cg_jit_lookup(j, n8), &a8, pools[nt], nt) * 1e-9;
                printf("%-6s %5lld %5lld %5lld %3d  %9.0f %5.0f%%  %9.0f %5.0f%%  %6.2fx\n", layers[l].layer,
                       (long long)M, (long long)K, (long long)N, nt, g32, 100 * g32 / peak32[nt], g8,
                       peak8[nt] > 0 ? 100 * g8 / peak8[nt] : 0.0, g8 / g32);
                fflush(stdout);
            }
            free(A), free(W), free(bias), free(R), free(C);
            free(sw), free(sa), free(za), free(A8), free(W8);
            free(P32), free(P8);
        }
    rt_pool_free(pools[1]);
    rt_pool_free(pools[2]);
    cg_jit_free(j);
    return 0;
}
