/* gemm_i8_bench.c: the int8 GEMM (cg_gemm_i8_emit) on each of its paths
 * this host runs, against the fp32 GEMM (cg_gemm_emit) on ViT-B/16's Linear
 * layers, in the same run, at 1 and 2 threads of the runtime's pool: GOP/s
 * (2 M N K multiplies and adds per call, for all) and the share of the
 * peaks measured first (peak_dot.c, peak_fma.c):
 *   fp32  the FMA's peak;
 *   amx   AMX-INT8 tiles (TDPBUSD), of TDPBUSD's peak;
 *   vnni     VPDPBUSD, of VPDPBUSD's peak;
 *   maddubs  u8 x s8 pairs summed into 16 bits (VPMADDUBSW), then into 32
 *            (VPMADDWD by ones), as a CPU without VNNI runs it (compiled
 *            with the VNNI features taken away) for weights whose pairs fit
 *            (weights in -64..64, as --precision int8 makes them fit on
 *            such a CPU), of the same VPDPBUSD peak;
 *   maddubs8 the same on 8-bit weights (per column, near normal with the
 *            column's largest at 127), whose pairs often do not fit: the
 *            path's fixes, their count printed (0.7-0.9 a group of 4 k of a
 *            panel: past the 0.25 where cg_gemm_i8_maddubs_pays takes the
 *            path, to show what a fix costs);
 *   wide     16-bit products summed in pairs (VPMADDWD), as such a CPU runs
 *            any other weights, of the same peak: a VPMADDWD and a VPADDD
 *            do half a VPDPBUSD's work.
 * Each int8 path on the JIT's vectors (16 lanes with AVX-512).  Each layer
 * has a bias (and a residual where the model has one); the int8 GEMM's
 * activation scale and zero point are per row.  Weights stay in cache
 * between calls (no --cold here).  A path the host cannot run is left out,
 * saying why.
 *
 *   gemm_i8_bench [BATCH ...]   (default 1 and 8: M = 197 * BATCH) */
#include <math.h>
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

enum { P_AMX, P_VNNI, P_MADDUBS, P_MADDUBS8, P_WIDE, NPATHS };

/* An int8 path: its JIT and target, the peak it is measured against. */
typedef struct {
    const char *name, *unit;
    cg_jit *j;
    cg_target t;
    double peak[3]; /* GOP/s at 1 and 2 threads; 0: unknown */
    char why[800];  /* why the host cannot run it ("" when it can) */
} i8_path;

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

/* W [K, N] as a quantized model's 8-bit weights: each column normal (the
 * sum of four uniforms), scaled so its largest magnitude is 127. */
static void quantized_weights(int8_t *W, int64_t K, int64_t N)
{
    float *f = xalloc((size_t)(K * N) * 4);
    uint32_t x = 12345;
    for (int64_t i = 0; i < K * N; i++) {
        float v = 0;
        for (int u = 0; u < 4; u++) {
            x = x * 1664525u + 1013904223u;
            v += (float)(x >> 8) / 16777216.0f - 0.5f;
        }
        f[i] = v;
    }
    for (int64_t n = 0; n < N; n++) {
        float a = 0;
        for (int64_t k = 0; k < K; k++)
            a = f[k * N + n] > a ? f[k * N + n] : -f[k * N + n] > a ? -f[k * N + n] : a;
        for (int64_t k = 0; k < K; k++)
            W[k * N + n] = (int8_t)lrintf(f[k * N + n] * 127.0f / (a > 0 ? a : 1));
    }
    free(f);
}

static const bench_dot_unit *find_unit(const bench_dot_unit *u, const char *insn)
{
    for (int i = 0; i < BENCH_DOT_UNITS; i++)
        if (!strcmp(u[i].insn, insn))
            return &u[i];
    return NULL;
}

/* Which int8 paths this host runs, on the JIT's vectors: p[P_AMX] and
 * p[P_VNNI] in j, p[P_MADDUBS] and p[P_WIDE] in a JIT of their own without
 * VNNI. */
static void find_paths(cg_jit *j, const bench_dot_unit *u, i8_path *p)
{
    char missing[256], err[512];
    cg_target host = cg_jit_target(j);
    const bench_dot_unit *tdp = find_unit(u, "TDPBUSD"), *vdp = find_unit(u, "VPDPBUSD");
    p[P_AMX] = (i8_path){.name = "amx", .unit = "TDPBUSD", .t = host};
    p[P_VNNI] = (i8_path){.name = "vnni", .unit = "VPDPBUSD", .t = host};
    p[P_WIDE] = (i8_path){.name = "wide", .unit = "VPDPBUSD", .t = host};
    p[P_MADDUBS] = (i8_path){.name = "maddubs", .unit = "VPDPBUSD", .t = host};
    p[P_MADDUBS8] = (i8_path){.name = "maddubs8", .unit = "VPDPBUSD", .t = host};
    if (host.vec_floats != 16)
        snprintf(p[P_AMX].why, sizeof p[P_AMX].why, "no AVX-512 in the JIT's features");
    else if (!tdp || !tdp->fn)
        snprintf(p[P_AMX].why, sizeof p[P_AMX].why, "%s", tdp ? tdp->why : "no TDPBUSD unit listed");
    else
        p[P_AMX].j = j, p[P_AMX].t.amx_int8 = 1, p[P_AMX].t.vnni = 1, p[P_AMX].t.madd16 = 1;
    const char *vnni_need = host.vec_floats == 16 ? "+avx512f,+avx512vnni" : "+avxvnni";
    if (host.vec_floats < 8)
        snprintf(p[P_VNNI].why, sizeof p[P_VNNI].why, "the JIT has %d-float vectors", host.vec_floats);
    else if (rt_cpu_missing_features(vnni_need, missing, sizeof missing) > 0)
        snprintf(p[P_VNNI].why, sizeof p[P_VNNI].why, "this CPU lacks %s", missing);
    else
        p[P_VNNI].j = j, p[P_VNNI].t.vnni = 1;
    cg_jit *jw = cg_jit_new_with("-avx512vnni,-avxvnni,-amx-int8", err, sizeof err);
    cg_target tw = jw ? cg_jit_target(jw) : host;
    const char *wide_need = tw.vec_floats == 16 ? "+avx512f,+avx512bw" : "+avx2";
    if (!jw)
        snprintf(p[P_WIDE].why, sizeof p[P_WIDE].why, "no JIT without VNNI: %s", err);
    else if (tw.vec_floats < 8)
        snprintf(p[P_WIDE].why, sizeof p[P_WIDE].why, "the JIT has %d-float vectors", tw.vec_floats);
    else if (rt_cpu_missing_features(wide_need, missing, sizeof missing) > 0)
        snprintf(p[P_WIDE].why, sizeof p[P_WIDE].why, "this CPU lacks %s", missing);
    else
        p[P_WIDE].j = jw, p[P_WIDE].t = tw, p[P_WIDE].t.madd16 = 1, jw = NULL;
    cg_jit_free(jw);
    for (int i = P_MADDUBS; i < P_WIDE; i++) {
        memcpy(p[i].why, p[P_WIDE].why, sizeof p[P_WIDE].why);
        p[i].j = p[P_WIDE].j, p[i].t = p[P_WIDE].t;
    }
    /* the peaks: the tiles', and VPDPBUSD's (on zmm) for the vector paths on 16 lanes */
    int maxthreads = sysconf(_SC_NPROCESSORS_ONLN) > 1 ? 2 : 1, vec16 = 0;
    for (int i = P_VNNI; i < NPATHS; i++)
        vec16 |= p[i].j && p[i].t.vec_floats == 16;
    for (int nt = 1; nt <= maxthreads; nt++) {
        if (p[P_AMX].j)
            p[P_AMX].peak[nt] = bench_peak_gflops((void *)tdp->fn, tdp->ops_per_iter, nt, 0.3);
        double v = vec16 && vdp && vdp->fn ? bench_peak_gflops((void *)vdp->fn, vdp->ops_per_iter, nt, 0.3) : 0;
        for (int i = P_VNNI; i < NPATHS; i++)
            p[i].peak[nt] = p[i].j && p[i].t.vec_floats == 16 ? v : 0;
    }
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
    char err[512];
    cg_jit *j = cg_jit_new(err, sizeof err);
    if (!j) {
        fprintf(stderr, "gemm_i8_bench: %s\n", err);
        return 3;
    }
    cg_target t = cg_jit_target(j);
    int ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN), maxthreads = ncpu > 1 ? 2 : 1;

    /* the peaks: fp32 FMA, then the int8 units (asking Linux for the tiles) */
    LLVMModuleRef pm = cg_jit_module(j, "peak");
    double flops = bench_emit_peak(pm, "peak", &t);
    if (flops <= 0 || cg_jit_add(j, pm, "default<O2>", err, sizeof err)) {
        fprintf(stderr, "gemm_i8_bench: cannot build the peak kernel\n");
        return 3;
    }
    double peak32[3] = {0};
    for (int nt = 1; nt <= maxthreads; nt++)
        peak32[nt] = bench_peak_gflops(cg_jit_lookup(j, "peak"), flops, nt, 0.3);
    bench_dot_unit u[BENCH_DOT_UNITS];
    bench_dot_units(u);
    i8_path path[NPATHS];
    find_paths(j, u, path);
    printf("host %s, %d cores online; peaks (1 / %d threads): fp32 FMA %.0f / %.0f GFLOP/s", cg_jit_cpu(j), ncpu,
           maxthreads, peak32[1], peak32[maxthreads]);
    const double *vpeak = path[P_VNNI].peak[1] > 0 ? path[P_VNNI].peak : path[P_WIDE].peak;
    if (path[P_AMX].peak[1] > 0)
        printf(", TDPBUSD %.0f / %.0f GOP/s", path[P_AMX].peak[1], path[P_AMX].peak[maxthreads]);
    if (vpeak[1] > 0)
        printf(", VPDPBUSD %.0f / %.0f GOP/s", vpeak[1], vpeak[maxthreads]);
    printf("\n");
    for (int i = 0; i < NPATHS; i++) {
        if (path[i].why[0])
            printf("  %s: not run (%s)\n", path[i].name, path[i].why);
        else
            printf("  %s: %d lanes, %% of the %s peak%s\n", path[i].name, path[i].t.vec_floats, path[i].unit,
                   path[i].peak[1] > 0 ? "" : " (not measured here)");
    }

    /* the kernels: fp32 in j, each int8 path in its JIT */
    LLVMModuleRef m = cg_jit_module(j, "gemm"), mi[NPATHS] = {0};
    for (int i = 0; i < NPATHS; i++) /* a module per JIT */
        for (int o = 0; path[i].j && o <= i && !mi[i]; o++)
            if (o == i)
                mi[i] = path[i].j == j ? m : cg_jit_module(path[i].j, path[i].name);
            else if (path[o].j == path[i].j)
                mi[i] = mi[o];
    for (size_t l = 0; l < NLAYERS; l++) {
        char name[32];
        cg_gemm_desc d = {.K = layers[l].K, .N = layers[l].N, .lda = layers[l].K, .ldc = layers[l].N,
                          .ldr = layers[l].N, .has_bias = 1, .has_residual = layers[l].has_residual,
                          .activation = layers[l].activation};
        cg_gemm_i8_desc di = {.g = d, .a_per_row = 1};
        snprintf(name, sizeof name, "f32_%zu", l);
        if (!cg_gemm_emit(m, name, &d, &t))
            return 3;
        for (int i = 0; i < NPATHS; i++) {
            snprintf(name, sizeof name, "%s_%zu", path[i].name, l);
            di.maddubs = i == P_MADDUBS || i == P_MADDUBS8;
            if (mi[i] && !cg_gemm_i8_emit(mi[i], name, &di, &path[i].t)) {
                fprintf(stderr, "gemm_i8_bench: cannot emit the %s kernel of %s\n", path[i].name, layers[l].layer);
                return 3;
            }
        }
    }
    for (int i = 0; i < NPATHS; i++)
        if (mi[i] && mi[i] != m && (i < P_MADDUBS8 || mi[i] != mi[P_MADDUBS]) &&
            cg_jit_add(path[i].j, mi[i], "default<O2>", err, sizeof err)) {
            fprintf(stderr, "gemm_i8_bench: %s\n", err);
            return 3;
        }
    if (cg_jit_add(j, m, "default<O2>", err, sizeof err)) {
        fprintf(stderr, "gemm_i8_bench: %s\n", err);
        return 3;
    }

    rt_pool *pools[3] = {NULL, rt_pool_new(1), maxthreads > 1 ? rt_pool_new(2) : NULL};
    printf("%-5s %5s %5s %5s %3s  %6s %5s", "layer", "M", "K", "N", "thr", "fp32", "%peak");
    for (int i = 0; i < NPATHS; i++)
        if (path[i].j)
            printf("  %6s %5s %5s", path[i].name, "%peak", "x fp32");
    printf("   (GOP/s)\n");
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
            int8_t *W8 = xalloc((size_t)(K * N)), *W8q = xalloc((size_t)(K * N));
            for (int64_t i = 0; i < M * K; i++)
                A[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f, A8[i] = (uint8_t)(i * 2654435761u >> 7);
            for (int64_t i = 0; i < K * N; i++)
                W[i] = (float)((i * 40503u) % 1000) / 1000.0f - 0.5f, W8[i] = (int8_t)((i * 40503u >> 5) % 129 - 64);
            quantized_weights(W8q, K, N);
            for (int64_t i = 0; i < N; i++)
                bias[i] = 0.1f, sw[i] = 0.01f;
            for (int64_t i = 0; i < M; i++)
                sa[i] = 0.02f, za[i] = 128;
            memset(R, 0, (size_t)(M * N) * 4);
            void *P32 = xalloc(cg_gemm_packed_bytes(&d, &t)), *P8[NPATHS] = {0};
            cg_gemm_pack(&d, &t, W, P32);
            for (int i = 0; i < NPATHS; i++)
                if (path[i].j) {
                    di.maddubs = i == P_MADDUBS || i == P_MADDUBS8;
                    const int8_t *w8 = i == P_MADDUBS8 ? W8q : W8;
                    P8[i] = xalloc(cg_gemm_i8_packed_bytes(&di, &path[i].t, w8));
                    if (i == P_MADDUBS8 && bi == 0) {
                        int64_t nr = 2 * path[i].t.vec_floats, fixes = cg_gemm_i8_fixes(&di, &path[i].t, w8);
                        printf("%-5s maddubs8: %lld fixes, %.3f of the panels' groups of 4 k\n", layers[l].layer,
                               (long long)fixes, (double)fixes / (double)((N + nr - 1) / nr * ((K + 3) / 4)));
                    }
                    if (cg_gemm_i8_pack(&di, &path[i].t, w8, sw, P8[i])) {
                        fprintf(stderr, "gemm_i8_bench: cannot pack the %s weights\n", path[i].name);
                        return 3;
                    }
                }
            cg_gemm_args a32 = {.A = A, .W = P32, .bias = bias, .R = d.has_residual ? R : NULL, .C = C, .M = M};
            char name[32];
            for (int nt = 1; nt <= maxthreads; nt++) {
                double ops = 2.0 * (double)M * (double)N * (double)K;
                snprintf(name, sizeof name, "f32_%zu", l);
                double g32 = ops / time_kernel((driver_fn)cg_jit_lookup(j, name), &a32, pools[nt], nt) * 1e-9;
                printf("%-5s %5lld %5lld %5lld %3d  %6.0f %4.0f%%", layers[l].layer, (long long)M, (long long)K,
                       (long long)N, nt, g32, 100 * g32 / peak32[nt]);
                for (int i = 0; i < NPATHS; i++) {
                    if (!path[i].j)
                        continue;
                    cg_gemm_i8_args a8 = {.A = A8, .W = P8[i], .bias = bias, .R = d.has_residual ? R : NULL,
                                          .C = C, .a_scale = sa, .a_zero = za, .M = M};
                    snprintf(name, sizeof name, "%s_%zu", path[i].name, l);
                    double g8 =
                        ops / time_kernel((driver_fn)cg_jit_lookup(path[i].j, name), &a8, pools[nt], nt) * 1e-9;
                    if (path[i].peak[nt] > 0)
                        printf("  %6.0f %4.0f%% %5.2fx", g8, 100 * g8 / path[i].peak[nt], g8 / g32);
                    else
                        printf("  %6.0f %5s %5.2fx", g8, "-", g8 / g32);
                }
                printf("\n");
                fflush(stdout);
            }
            free(A), free(W), free(bias), free(R), free(C);
            free(sw), free(sa), free(za), free(A8), free(W8), free(W8q), free(P32);
            for (int i = 0; i < NPATHS; i++)
                free(P8[i]);
        }
    rt_pool_free(pools[1]);
    rt_pool_free(pools[2]);
    if (path[P_WIDE].j && path[P_WIDE].j != j)
        cg_jit_free(path[P_WIDE].j);
    cg_jit_free(j);
    return 0;
}
