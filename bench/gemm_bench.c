/* gemm_bench.c: the generated GEMM (cg_gemm_emit) on the Linear layers of
 * ViT-B/16, ViT-S/16, ViT-Ti/16 and the face ViT, at 1 and 2 threads of the
 * runtime's own pool, in GFLOP/s and as a fraction of this machine's peak
 * (measured first with the same FMA loop as peak_fma); then fused attention
 * (cg_attention_emit) and the two batched GEMMs it replaces (cg_bgemm_emit)
 * on the same models, counting only the 4 N^2 D flops of the two products.
 *
 *   gemm_bench [--peak G1,G2] [--cold] [--rounds R] [--bf16|--avx2] [--only TEXT] [BATCH ...]
 * BATCH: default 1 and 8 (M = tokens * batch: 197, the face ViT's 144).
 * --peak: the 1- and 2-thread peaks in GFLOP/s (from peak_fma on a quiet
 * machine) when this run shares the machine with other work and would
 * measure them too low.  --cold: each GEMM call reads another copy of the
 * packed weights, from copies that together exceed the last-level cache
 * (COLD_BYTES), as a model's layers read theirs: from memory, not from cache
 * as a repeated call would; and writes another copy of C (the residual read
 * in place from it), as a model's layer writes a buffer last used layers
 * before.  Fused attention likewise reads another copy of qkv and writes
 * another of its output per call (in ViT-B/16 it runs as fast as that, 4-14%
 * slower than from cache); the batched GEMMs' rows stay in cache.
 * --rounds R: the GEMM table measured R times over (the rows of a round one
 * after another, so that two variants of a layer, such as fc2 and "fc2
 * lda+16", alternate), then each row's median (the upper middle one for an
 * even R) and range over the rounds: on a shared machine one round's rows
 * move by several percent.  --bf16: the GEMMs of --precision bf16
 * (gemm_amx.c: AMX tiles, else AVX512-BF16) instead of fp32; their % of peak
 * is still of the fp32 FMA peak, so it may pass 100%.  --avx2: the code of
 * --features=-avx512f (8-float vectors, 16 registers), and the peak of that
 * code path.  --only TEXT: just the layers whose "model layer" (such as
 * "ViT-B fc2") contains TEXT, and no attention rows: a run short enough to
 * profile one layer with perf. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "runtime/rt_impl.h"

typedef struct {
    const char *model, *layer;
    int64_t tokens, K, N;
    int has_residual, activation; /* every layer has a bias */
} layer;

static const layer layers[] = {
    {"ViT-B", "qkv", 197, 768, 2304, 0, 0},  {"ViT-B", "proj", 197, 768, 768, 1, 0},
    {"ViT-B", "fc1", 197, 768, 3072, 0, 1},  {"ViT-B", "fc2", 197, 3072, 768, 1, 0},
    {"ViT-Ti", "qkv", 197, 192, 576, 0, 0},  {"ViT-Ti", "proj", 197, 192, 192, 1, 0},
    {"ViT-Ti", "fc1", 197, 192, 768, 0, 1},  {"ViT-Ti", "fc2", 197, 768, 192, 1, 0},
    {"ViT-S", "qkv", 197, 384, 1152, 0, 0},  {"ViT-S", "proj", 197, 384, 384, 1, 0},
    {"ViT-S", "fc1", 197, 384, 1536, 0, 1},  {"ViT-S", "fc2", 197, 1536, 384, 1, 0},
    {"face", "qkv", 144, 512, 1536, 0, 0},   {"face", "proj", 144, 512, 512, 1, 0},
    {"face", "fc1", 144, 512, 2048, 0, 4},   {"face", "fc2", 144, 2048, 512, 1, 0}, /* fc1: ReLU6 */
    /* fc2 with A's rows 16 floats further apart than K (lda = K + 16): not a multiple of 4 KiB, where the
     * 12 rows a micro-kernel broadcasts from share one L1 set (2 KiB: two sets; ViT-S's 6 KiB and ViT-Ti's
     * 3 KiB rows use two and four).  Over three runs here (2026-11-26, Xeon with AVX-512, --cold 8, 2
     * threads) ViT-B's fc2 ran at 79-85% of peak and with lda + 16 at 84-88%; copying each K block of a
     * task's rows apart inside the GEMM (K blocks then outside the panels) did not recover it.  A compiled
     * model stores such a tensor with lda = K + 16 (codegen/llvm/schedule.c, pad_gemm_rows). */
    {"ViT-B", "fc2 lda+16", 197, 3072, 768, 1, 0}, {"face", "fc2 lda+16", 144, 2048, 512, 1, 0},
    {"ViT-S", "fc2 lda+16", 197, 1536, 384, 1, 0}, {"ViT-Ti", "fc2 lda+16", 197, 768, 192, 1, 0},
    /* fc1 storing C with rows 16 floats further apart (ldc = N + 16), as a model stores fc1's output (fc2's
     * A) where N floats are a multiple of 2 KiB; the plain fc1 rows store them dense.  On a Zen 5
     * (2026-11-27, --cold, 2 threads, two runs) ViT-B's fc1 ran at 79-83% of peak dense and 89-93% with
     * ldc + 16 at batch 1 (85-90% and 93-95% at batch 8), whatever its activation; in ViT-B/16 itself
     * (vitc run --profile, batch 1, after a warm-up run) fc1 ran as fast as qkv and fc2, 83-86%. */
    {"ViT-B", "fc1 ldc+16", 197, 768, 3072, 0, 1}, {"ViT-S", "fc1 ldc+16", 197, 384, 1536, 0, 1},
};
#define LDA_OF(ly) ((ly)->K + (strstr((ly)->layer, "lda+16") ? 16 : 0))
#define LDC_OF(ly) ((ly)->N + (strstr((ly)->layer, "ldc+16") ? 16 : 0))
#define NLAYERS (sizeof layers / sizeof layers[0])

/* The GEMM of a layer: every layer has a bias. */
static cg_gemm_desc desc_of(const layer *ly)
{
    return (cg_gemm_desc){.K = ly->K, .N = ly->N, .lda = LDA_OF(ly), .ldc = LDC_OF(ly), .ldr = LDC_OF(ly),
                          .has_bias = 1, .has_residual = ly->has_residual, .activation = ly->activation};
}

/* --cold: weight copies of this many bytes in all, above the largest
 * last-level caches (a virtual machine may report a whole socket's) */
#define COLD_BYTES ((size_t)640 << 20)
/* Copies of a buffer of `bytes` that --cold cycles through: together at least COLD_BYTES (1 without --cold). */
static int cold_copies(int cold, size_t bytes) { return cold ? (int)((COLD_BYTES + bytes - 1) / bytes) : 1; }

typedef struct {
    const char *model;
    int64_t heads; /* 197 tokens, head size 64 */
} attn_model;

static const attn_model attn_models[] = {{"ViT-B", 12}, {"ViT-Ti", 3}};

typedef void (*task_fn)(void *, int64_t, int64_t);
typedef void (*driver_fn)(const void *args, void *pool, void (*pf)(void *, int64_t, task_fn, void *),
                          int32_t nthreads);

/* Allocated as the runtime allocates a model's weights and workspace (huge
 * pages from 2 MiB), so that the GEMM sees the TLB a model's layers see. */
static float *aligned_floats(size_t n)
{
    void *p = rt_aligned_alloc((uint64_t)(n ? n : 1) * sizeof(float));
    if (!p) {
        fprintf(stderr, "gemm_bench: out of memory\n");
        exit(3);
    }
    float *f = p;
    for (size_t i = 0; i < n; i++)
        f[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    return f;
}

/* Seconds of the fastest call among at least 5 calls and 0.3 s, after a
 * warm-up: on a machine shared with other work the minimum is the stable
 * statistic (interference only ever adds time).  Call i gets the arguments
 * at args + (i % nargs) * size: one set, or (--cold) one per copy of the
 * weights (or of qkv). */
static double time_kernel_n(driver_fn fn, const void *args, size_t size, int nargs, rt_pool *pool, int nthreads)
{
    const char *a = args;
    fn(a, pool, rt_parallel_for, nthreads);
    double start = bench_now(), best = 1e30;
    for (int n = 0; n < 10000 && (n < 5 || bench_now() - start < 0.3); n++) {
        const void *an = a + (size_t)((n + 1) % nargs) * size;
        double t0 = bench_now();
        fn(an, pool, rt_parallel_for, nthreads);
        double t = bench_now() - t0;
        best = t < best ? t : best;
    }
    return best;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double time_kernel(driver_fn fn, const void *args, rt_pool *pool, int nthreads)
{
    return time_kernel_n(fn, args, 0, 1, pool, nthreads);
}

#define USAGE "usage: gemm_bench [--peak G1,G2] [--cold] [--rounds R] [--bf16|--avx2] [--only TEXT] [BATCH ...]"

/* Whether --only's text (NULL: every layer) is in the layer's "model layer". */
static int layer_selected(const layer *ly, const char *only)
{
    char both[64];
    snprintf(both, sizeof both, "%s %s", ly->model, ly->layer);
    return !only || strstr(both, only) != NULL;
}

int main(int argc, char **argv)
{
    int batches[16] = {1, 8}, nb = 2, first = 1, cold = 0, rounds = 1, bf16 = 0, avx2 = 0;
    double given[3] = {0};
    const char *only = NULL;
    for (;;) {
        if (argc > first + 1 && !strcmp(argv[first], "--peak")) {
            if (sscanf(argv[first + 1], "%lf,%lf", &given[1], &given[2]) < 1 || !(given[1] > 0)) {
                fprintf(stderr, USAGE "\n");
                return 2;
            }
            first += 2;
        } else if (argc > first && !strcmp(argv[first], "--cold")) {
            cold = 1;
            first++;
        } else if (argc > first && !strcmp(argv[first], "--bf16")) {
            bf16 = 1;
            first++;
        } else if (argc > first && !strcmp(argv[first], "--avx2")) {
            avx2 = 1;
            first++;
        } else if (argc > first + 1 && !strcmp(argv[first], "--only")) {
            only = argv[first + 1];
            first += 2;
        } else if (argc > first + 1 && !strcmp(argv[first], "--rounds")) {
            rounds = atoi(argv[first + 1]);
            if (rounds < 1 || rounds > 99) {
                fprintf(stderr, "gemm_bench: --rounds takes 1..99\n");
                return 2;
            }
            first += 2;
        } else {
            break;
        }
    }
    if (argc > first) {
        nb = 0;
        for (int i = first; i < argc && nb < 16; i++) {
            batches[nb] = atoi(argv[i]);
            if (batches[nb] < 1 || batches[nb] > 1024) {
                fprintf(stderr, USAGE " (batches 1..1024)\n");
                return 2;
            }
            nb++;
        }
    }
    char err[4096];
    if (bf16 && avx2) {
        fprintf(stderr, "gemm_bench: --bf16 and --avx2 exclude each other\n");
        return 2;
    }
    cg_jit *j = cg_jit_new_with(avx2 ? "-avx512f" : NULL, err, sizeof err);
    if (!j) {
        fprintf(stderr, "gemm_bench: %s\n", err);
        return 3;
    }
    cg_target t = cg_jit_target(j);
    if (bf16) { /* as --precision bf16 picks (AMX, else AVX512-BF16) and the loader checks the host */
        static const char amx[] = "+avx512f,+amx-tile,+amx-bf16", dot[] = "+avx512f,+avx512bf16";
        char why[256];
        if (rt_cpu_missing_features(amx, why, sizeof why) == 0 && rt_cpu_enable_amx(amx, why, sizeof why) == 0) {
            t.amx_bf16 = 1;
        } else if (rt_cpu_missing_features(dot, err, sizeof err) == 0 && t.vec_floats == 16) {
            t.bf16_dot = 1;
        } else {
            fprintf(stderr, "gemm_bench: --bf16 needs AMX-BF16 (%s) or AVX512-BF16 (%s)\n", why, err);
            return 2;
        }
    }
    LLVMModuleRef m = cg_jit_module(j, "gemm_bench");
    double peak_flops = bench_emit_peak(m, "peak", &t);
    char name[64];
    for (size_t l = 0; l < NLAYERS; l++) {
        cg_gemm_desc d = desc_of(&layers[l]);
        snprintf(name, sizeof name, "gemm%zu", l);
        if (!(bf16 ? cg_gemm_amx_emit(m, name, &d, &t) : cg_gemm_emit(m, name, &d, &t))) {
            fprintf(stderr, "gemm_bench: cg_gemm_emit failed for %s %s\n", layers[l].model, layers[l].layer);
            return 3;
        }
    }
    for (size_t a = 0; a < 2; a++) {
        int64_t H = attn_models[a].heads;
        cg_attention_desc ad = {.tokens = 197, .heads = H, .head_size = 64, .qkv_layout = 0, .scale = 0.125f,
                                .post_scale = 1.0f};
        /* unfused: S[b*H] = Q K^T (from a [B, H, N, D] copy), O = P V */
        cg_bgemm_desc qk = {.M = 197, .N = 197, .K = 64, .lda = 64, .ldb = 64, .ldc = 197, .a_batch_stride = 197 * 64,
                            .b_batch_stride = 197 * 64, .c_batch_stride = 197 * 197, .trans_b = 1, .alpha = 0.125f};
        cg_bgemm_desc pv = {.M = 197, .N = 64, .K = 197, .lda = 197, .ldb = 64, .ldc = 64, .a_batch_stride = 197 * 197,
                            .b_batch_stride = 197 * 64, .c_batch_stride = 197 * 64, .alpha = 1.0f};
        snprintf(name, sizeof name, "attn%zu", a);
        int ok = cg_attention_emit(m, name, &ad, &t) != NULL;
        if (a == 0)
            ok = ok && cg_bgemm_emit(m, "qk", &qk, &t) && cg_bgemm_emit(m, "pv", &pv, &t);
        if (!ok) {
            fprintf(stderr, "gemm_bench: emitting attention kernels failed\n");
            return 3;
        }
    }
    double c0 = bench_now();
    if (peak_flops <= 0 || cg_jit_add(j, m, "default<O2>", err, sizeof err)) {
        fprintf(stderr, "gemm_bench: %s\n", err);
        return 3;
    }
    for (size_t l = 0; l < NLAYERS; l++) { /* forces compilation */
        snprintf(name, sizeof name, "gemm%zu", l);
        if (!cg_jit_lookup(j, name)) {
            fprintf(stderr, "gemm_bench: %s not found\n", name);
            return 3;
        }
    }
    double compile_s = bench_now() - c0;
    int maxthreads = (int)sysconf(_SC_NPROCESSORS_ONLN) >= 2 ? 2 : 1;
    double peak[3] = {0};
    void *pk = cg_jit_lookup(j, "peak");
    for (int nt = 1; nt <= maxthreads; nt++)
        peak[nt] = given[nt] > 0 ? given[nt] : bench_peak_gflops(pk, peak_flops, nt, 0.3);
    printf("host %s, %d-float vectors; JIT of %zu %s GEMM drivers %.2f s\n", cg_jit_cpu(j), t.vec_floats, NLAYERS,
           !bf16 ? "fp32" : t.amx_bf16 ? "bf16 (AMX)" : "bf16 (AVX512-BF16)", compile_s);
    printf("peak: %.1f GFLOP/s at 1 thread, %.1f at %d threads (%s)\n", peak[1], peak[maxthreads], maxthreads,
           given[1] > 0 ? "given" : "measured now");
    if (cold)
        printf("weights and C: a different copy per call, %zu MiB of copies of each per layer (--cold)\n",
               COLD_BYTES >> 20);
    printf("%-7s %-10s %6s %5s %5s  %-22s %-22s\n", "model", "layer", "M", "K", "N", "1 thread: GFLOP/s peak",
           maxthreads > 1 ? "2 threads: GFLOP/s peak" : "");
    rt_pool *pools[3] = {NULL, rt_pool_new(1), maxthreads > 1 ? rt_pool_new(2) : NULL};
    if (!pools[1] || (maxthreads > 1 && !pools[2])) {
        fprintf(stderr, "gemm_bench: cannot start the thread pool\n");
        return 3;
    }
    /* % of peak by round, batch, layer and thread count */
    double *pct = calloc((size_t)rounds * (size_t)nb * NLAYERS * 3, sizeof *pct);
#define PCT_AT(rd, bi, l, nt) ((((size_t)(rd) * (size_t)nb + (size_t)(bi)) * NLAYERS + (l)) * 3 + (size_t)(nt))
    if (!pct) {
        fprintf(stderr, "gemm_bench: out of memory\n");
        return 3;
    }
    for (int rd = 0; rd < rounds; rd++) {
        for (int bi = 0; bi < nb; bi++) {
            for (size_t l = 0; l < NLAYERS; l++) {
                const layer *ly = &layers[l];
                if (!layer_selected(ly, only))
                    continue;
                int64_t M = ly->tokens * (int64_t)batches[bi];
                cg_gemm_desc d = desc_of(ly);
                float *A = aligned_floats((size_t)(M * LDA_OF(ly))), *W = aligned_floats((size_t)(ly->K * ly->N));
                size_t pbytes = bf16 ? cg_gemm_amx_packed_bytes(&d, &t) : cg_gemm_packed_bytes(&d, &t);
                int ncopies = cold_copies(cold, pbytes);
                float *P = aligned_floats(pbytes / sizeof(float) * (size_t)ncopies);
                size_t cfloats = (size_t)(M * LDC_OF(ly));
                int ccopies = cold_copies(cold, cfloats * sizeof(float));
                ccopies = ccopies < ncopies ? ccopies : ncopies;
                float *bias = aligned_floats((size_t)ly->N), *C = aligned_floats(cfloats * (size_t)ccopies);
                cg_gemm_args *args = calloc((size_t)ncopies, sizeof *args);
                if (!args) {
                    fprintf(stderr, "gemm_bench: out of memory\n");
                    return 3;
                }
                for (int c = 0; c < ncopies; c++) {
                    float *Pc = P + pbytes / sizeof(float) * (size_t)c;
                    if (bf16)
                        cg_gemm_amx_pack(&d, &t, W, Pc);
                    else
                        cg_gemm_pack(&d, &t, W, Pc);
                    float *Cc = C + cfloats * (size_t)(c % ccopies);
                    /* the residual in place, as the compiler plans it */
                    args[c] = (cg_gemm_args){.A = A, .W = Pc, .bias = bias, .R = ly->has_residual ? Cc : NULL, .C = Cc,
                                             .M = M};
                }
                snprintf(name, sizeof name, "gemm%zu", l);
                driver_fn fn = (driver_fn)cg_jit_lookup(j, name);
                double flops = 2.0 * (double)M * (double)ly->K * (double)ly->N;
                if (rounds > 1)
                    printf("round %d ", rd + 1);
                printf("%-7s %-10s %6lld %5lld %5lld ", ly->model, ly->layer, (long long)M, (long long)ly->K,
                       (long long)ly->N);
                for (int nt = 1; nt <= maxthreads; nt++) {
                    double s = time_kernel_n(fn, args, sizeof *args, ncopies, pools[nt], nt);
                    double g = flops / s * 1e-9;
                    printf(" %8.1f %5.1f%%        ", g, 100.0 * g / peak[nt]);
                    pct[PCT_AT(rd, bi, l, nt)] = 100.0 * g / peak[nt];
                }
                printf("\n");
                fflush(stdout);
                free(args);
                free(A), free(W), free(P), free(bias), free(C);
            }
        }
    }
    if (rounds > 1) {
        printf("%% of peak over %d rounds: median [lowest-highest]\n", rounds);
        printf("%-7s %-10s %6s  %-22s %-22s\n", "model", "layer", "M", "1 thread", maxthreads > 1 ? "2 threads" : "");
        for (int bi = 0; bi < nb; bi++)
            for (size_t l = 0; l < NLAYERS; l++) {
                if (!layer_selected(&layers[l], only))
                    continue;
                printf("%-7s %-10s %6lld ", layers[l].model, layers[l].layer,
                       (long long)(layers[l].tokens * batches[bi]));
                for (int nt = 1; nt <= maxthreads; nt++) {
                    double v[99];
                    for (int rd = 0; rd < rounds; rd++)
                        v[rd] = pct[PCT_AT(rd, bi, l, nt)];
                    qsort(v, (size_t)rounds, sizeof v[0], cmp_double);
                    printf(" %5.1f%% [%4.1f-%4.1f]     ", v[rounds / 2], v[0], v[rounds - 1]);
                }
                printf("\n");
            }
    }
    free(pct);
    if (only) /* --only: no attention rows */
        nb = 0;
    else
        printf("%-7s %-9s %6s %5s %5s  %-22s %-22s\n", "model", "attention", "images", "heads", "D",
               "1 thread: GFLOP/s peak", maxthreads > 1 ? "2 threads: GFLOP/s peak" : "");
    for (int bi = 0; bi < nb; bi++) {
        for (size_t a = 0; a < 2; a++) {
            int64_t B = batches[bi], H = attn_models[a].heads, N = 197, D = 64;
            /* --cold: each fused call reads another copy of qkv and writes another of out */
            size_t qkv_n = (size_t)(B * N * 3 * H * D), out_n = (size_t)(B * N * H * D);
            int nc = cold_copies(cold, (qkv_n + out_n) * sizeof(float));
            float *qkv = aligned_floats(qkv_n * (size_t)nc), *out = aligned_floats(out_n * (size_t)nc);
            cg_attention_args *fused = calloc((size_t)nc, sizeof *fused);
            if (!fused) {
                fprintf(stderr, "gemm_bench: out of memory\n");
                return 3;
            }
            for (int c = 0; c < nc; c++)
                fused[c] =
                    (cg_attention_args){.qkv = qkv + qkv_n * (size_t)c, .out = out + out_n * (size_t)c, .batch = B};
            float *S = aligned_floats((size_t)(B * H * N * N));
            double flops = 4.0 * (double)(B * H) * (double)(N * N * D);
            for (int kind = 0; kind < (a == 0 ? 3 : 1); kind++) {
                static const char *kinds[3] = {"fused", "Q@K^T", "P@V"};
                cg_bgemm_args qa = {.A = qkv, .B = qkv, .C = S, .batch = B * H};
                cg_bgemm_args pa = {.A = S, .B = qkv, .C = out, .batch = B * H};
                const void *args = kind == 1 ? (const void *)&qa : (const void *)&pa;
                snprintf(name, sizeof name, "attn%zu", a);
                driver_fn fn = (driver_fn)cg_jit_lookup(j, kind == 0 ? name : kind == 1 ? "qk" : "pv");
                printf("%-7s %-9s %6lld %5lld %5lld ", attn_models[a].model, kinds[kind], (long long)B, (long long)H,
                       (long long)D);
                for (int nt = 1; nt <= maxthreads; nt++) {
                    double sec = kind == 0 ? time_kernel_n(fn, fused, sizeof *fused, nc, pools[nt], nt)
                                           : time_kernel(fn, args, pools[nt], nt);
                    double g = (kind == 0 ? flops : flops / 2) / sec * 1e-9;
                    printf(" %8.1f %5.1f%%        ", g, 100.0 * g / peak[nt]);
                }
                printf("\n");
                fflush(stdout);
            }
            free(qkv), free(out), free(S), free(fused);
        }
    }
    rt_pool_free(pools[1]);
    rt_pool_free(pools[2]);
    cg_jit_free(j);
    return 0;
}
