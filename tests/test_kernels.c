/* test_kernels.c: the generated compute kernels (codegen/llvm/kernels.h)
 * against naive double-accumulating loops written here: packed GEMM with
 * every epilogue, batched GEMM, fused attention, and the vector exp/erf the
 * epilogues use.  Kernels are JIT-compiled for the host (kern_jit.h) and run
 * through a parallel_for written here that hands out ragged ranges.  The GEMM
 * and attention cases run again in the AVX2 path's shape (8-float vectors,
 * 16 registers) on any host that can execute it; elsewhere that is skipped,
 * saying why.
 *
 * Every operand lives in a guarded buffer that ends at an inaccessible page,
 * so a read or write past an operand's end crashes the test; outputs are
 * surrounded by sentinels (padding columns, a row after the last) that must
 * survive.  Error = max |out - ref| / max |ref| <= 1e-5, printed per case. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <llvm-c/Analysis.h>

#include "codegen/llvm/kern_ir.h"
#include "codegen/llvm/kern_jit.h"
#include "codegen/llvm/kernels.h"
#include "runtime/rt_impl.h"

#define TOL 1e-5
#define SENTINEL 12345.0f

typedef void (*task_fn)(void *arg, int64_t begin, int64_t end);
typedef void (*driver_fn)(const void *args, void *pool, void (*pf)(void *, int64_t, task_fn, void *), int32_t nthreads);

/* Runs [0, n) as ranges of 1, 2, 3, 1, 2, 3, ... tasks, last range first:
 * any order and any split must give the same result. */
static void ragged_pf(void *pool, int64_t n, task_fn fn, void *arg)
{
    int64_t *calls = pool;
    int64_t bounds[4096], nb = 0, at = 0;
    for (int step = 1; at < n && nb < 4095; step = step % 3 + 1) {
        bounds[nb++] = at;
        at = at + step < n ? at + step : n;
    }
    if (at < n)
        bounds[nb++] = at, at = n;
    bounds[nb] = n;
    for (int64_t i = nb - 1; i >= 0; i--) {
        fn(arg, bounds[i], bounds[i + 1]);
        (*calls)++;
    }
}

/* ---- guarded buffers ---- */

typedef struct {
    void *map;
    size_t maplen;
    float *p;
} guarded;

/* n floats ending exactly at a PROT_NONE page (so only 4-byte aligned). */
static float *galloc(guarded *g, size_t n)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE), bytes = (n ? n : 1) * sizeof(float);
    size_t data = (bytes + page - 1) / page * page;
    g->maplen = data + page;
    g->map = mmap(NULL, g->maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(g->map != MAP_FAILED);
    assert_int_equal(mprotect((char *)g->map + data, page, PROT_NONE), 0);
    g->p = (float *)((char *)g->map + data - bytes);
    return g->p;
}

static void gfree(guarded *g)
{
    if (g->map)
        munmap(g->map, g->maplen);
    g->map = NULL;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float frand(void) /* uniform in [-1, 1) */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void fill(float *p, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++)
        p[i] = frand() * scale;
}

/* ---- a JIT per group of cases ---- */

static cg_jit *jit_new(void)
{
    char err[512];
    cg_jit *j = cg_jit_new(err, sizeof err);
    if (!j)
        fail_msg("cannot create the JIT: %s", err);
    return j;
}

static void jit_add(cg_jit *j, LLVMModuleRef m)
{
    char err[4096];
    if (cg_jit_add(j, m, "default<O2>", err, sizeof err))
        fail_msg("%s", err);
}

/* Emits the kernel of case i as name; NULL if it cannot. */
typedef LLVMValueRef (*case_emit)(LLVMModuleRef m, const char *name, size_t i, const cg_target *t);

/* The AVX2 code path's shape (--features=-avx512f, or --cpu of an AVX2 CPU):
 * 8-float vectors, 16 registers, FMA; the host's caches. */
static cg_target avx2_target(cg_target host)
{
    cg_target t = host;
    t.vec_floats = 8, t.nregs = 16, t.has_fma = 1, t.amx_bf16 = 0, t.bf16_dot = 0;
    return t;
}

/* 1 if this host can execute the AVX2 path's code (8-float vectors and FMA);
 * else 0, having said why and counted a skip (ctest reports the test skipped). */
static int host_runs_avx2(const cg_target *host, const char *what)
{
    if (host->vec_floats >= 8 && host->has_fma)
        return 1;
    printf("  skipped: %s on the AVX2 path: this host has %d-float vectors%s\n", what, host->vec_floats,
           host->has_fma ? "" : " and no FMA");
    tu_skipped++;
    return 0;
}

/* A JIT with one kernel per case i < n for target t (NULL: the host), named
 * <prefix><i>; fails naming what and the case whose kernel could not be emitted. */
static cg_jit *jit_cases_for(const char *prefix, size_t n, case_emit emit, const char *what, const cg_target *target)
{
    cg_jit *j = jit_new();
    cg_target t = target ? *target : cg_jit_target(j);
    LLVMModuleRef m = cg_jit_module(j, prefix);
    for (size_t i = 0; i < n; i++) {
        char name[64];
        snprintf(name, sizeof name, "%s%zu", prefix, i);
        if (!emit(m, name, i, &t))
            fail_msg("%s failed for case %zu", what, i);
    }
    jit_add(j, m);
    return j;
}

static cg_jit *jit_cases(const char *prefix, size_t n, case_emit emit, const char *what)
{
    return jit_cases_for(prefix, n, emit, what, NULL);
}

/* Runs the driver called name on args with nthreads, over ragged_pf's
 * ranges; returns how many ranges ran. */
static int64_t run_driver(cg_jit *j, const char *name, const void *args, int nthreads)
{
    driver_fn fn = (driver_fn)cg_jit_lookup(j, name);
    assert_non_null(fn);
    int64_t calls = 0;
    fn(args, &calls, ragged_pf, nthreads);
    return calls;
}

/* What check_output finds in C (M rows of ldc floats and a sentinel row
 * after them) against ref (M x N). */
typedef struct {
    double maxerr, maxref;  /* the largest error (NaN: infinite) and the largest |ref| */
    int64_t mismatches;     /* results that are not ref exactly */
    int64_t bad_sentinels;  /* sentinels overwritten: past column N, or in row M */
} out_check;

/* Every result of C against ref, its error |got - ref| / scale (scale NULL:
 * 1, else one per result), and every sentinel around them. */
static out_check check_output(const float *C, int64_t M, int64_t N, int64_t ldc, const double *ref,
                              const double *scale)
{
    out_check o = {0};
    for (int64_t m = 0; m <= M; m++)
        for (int64_t n = 0; n < ldc; n++) {
            float got = C[m * ldc + n];
            if (m == M || n >= N) {
                o.bad_sentinels += got != SENTINEL;
                continue;
            }
            double r = ref[m * N + n];
            o.maxerr = isnan(got) ? INFINITY : fmax(o.maxerr, fabs(got - r) / (scale ? scale[m * N + n] : 1.0));
            o.maxref = fmax(o.maxref, fabs(r));
            o.mismatches += (double)got != r;
        }
    return o;
}

static double act_ref(double y, int act)
{
    switch (act) {
    case 1: return 0.5 * y * (1 + erf(y / sqrt(2)));
    case 2: return 0.5 * y * (1 + tanh(sqrt(2 / 3.14159265358979323846) * (y + 0.044715 * y * y * y)));
    case 3: return y > 0 ? y : 0;
    case 4: return y < 0 ? 0 : y > 6 ? 6 : y;
    case 5: return y / (1 + exp(-1.702 * y));
    case 6: return y / (1 + exp(-y));
    default: return y;
    }
}

/* ---- GEMM ---- */

typedef struct {
    int64_t M, K, N, lda, ldc;
    int bias, res, act; /* res: 0 none, 1 separate R (ldr = N + 3), 2 in place (R == C), 3 one row broadcast */
} gemm_case;

static const gemm_case gemm_cases[] = {
    /* odd shapes (each driver also runs at M = 1 and M = 0) */
    {1, 1, 1, 1, 1, 1, 1, 1},          {3, 3, 3, 3, 3, 1, 1, 2},            {17, 17, 17, 17, 17, 1, 2, 3},
    {63, 64, 65, 64, 65, 1, 1, 4},     {64, 65, 63, 70, 66, 1, 2, 1},       {197, 197, 197, 197, 197, 1, 2, 0},
    {197, 64, 773, 64, 773, 1, 0, 1},  {19, 40, 37, 40, 37, 0, 0, 0},
    /* K blocked (K > 256): partial sums through C, the residual read first */
    {5, 773, 773, 773, 773, 1, 1, 0},  {197, 773, 40, 800, 41, 0, 2, 0},    {29, 520, 33, 521, 40, 1, 3, 0},
    {29, 520, 48, 520, 48, 0, 0, 4},
    /* an activation then a residual: K kept whole */
    {2, 1000, 3, 1000, 3, 1, 2, 1},    {29, 520, 33, 521, 40, 1, 2, 2},
    /* rows of A a multiple of 4 KiB apart, K blocked: each K block of a task's rows copied apart
     * (gemm.c), M beyond one task and within one, K below lda */
    {300, 1024, 70, 1024, 70, 1, 1, 0}, {197, 2048, 33, 2048, 33, 0, 2, 4}, {45, 1000, 64, 1024, 64, 1, 0, 0},
};
#define NGEMM (sizeof gemm_cases / sizeof gemm_cases[0])

static void gemm_reference(const gemm_case *c, const float *A, const float *W, const float *bias, const float *R,
                           int64_t ldr, double *ref)
{
    for (int64_t m = 0; m < c->M; m++)
        for (int64_t n = 0; n < c->N; n++) {
            double s = bias ? bias[n] : 0;
            for (int64_t k = 0; k < c->K; k++)
                s += (double)A[m * c->lda + k] * W[k * c->N + n];
            s = act_ref(s, c->act);
            if (R)
                s += R[m * ldr + n];
            ref[m * c->N + n] = s;
        }
}

/* x rounded to bf16 (to nearest, ties to even), as a float. */
static float bf16_round(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    u = (u + 0x7fffu + (u >> 16 & 1)) & 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}

/* bf16: the bf16 kernel (gemm_amx.c, on AMX tiles or VDPBF16PS as t says),
 * whose reference multiplies A and W rounded to bf16, exactly as the kernel
 * reads them: what is left is the order of its fp32 sums. */
static void run_gemm_case(cg_jit *j, const cg_target *t, const gemm_case *c, const char *name, int nthreads,
                          int bf16)
{
    int64_t M = c->M, K = c->K, N = c->N;
    int64_t ldr = c->res == 1 ? N + 3 : c->res == 2 ? c->ldc : 0;
    cg_gemm_desc d = {.K = K, .N = N, .lda = c->lda, .ldc = c->ldc, .ldr = ldr, .has_bias = c->bias,
                      .has_residual = c->res != 0, .activation = c->act};
    guarded ga = {0}, gw = {0}, gp = {0}, gb = {0}, gr = {0}, gc = {0};
    float *A = galloc(&ga, (size_t)(M ? (M - 1) * c->lda + K : 0));
    float *W = galloc(&gw, (size_t)(K * N));
    size_t pbytes = bf16 ? cg_gemm_amx_packed_bytes(&d, t) : cg_gemm_packed_bytes(&d, t);
    assert_true(pbytes > 0 && pbytes % 64 == 0);
    float *P = galloc(&gp, pbytes / sizeof(float));
    float *bias = c->bias ? galloc(&gb, (size_t)N) : NULL;
    /* C has one sentinel row after the last; padding columns are sentinels too */
    size_t csize = (size_t)(M * c->ldc + c->ldc);
    float *C = galloc(&gc, csize);
    float *R = NULL;
    fill(A, (size_t)(M ? (M - 1) * c->lda + K : 0), 1.0f);
    fill(W, (size_t)(K * N), 1.0f / sqrtf((float)K));
    if (bias)
        fill(bias, (size_t)N, 0.5f);
    for (size_t i = 0; i < csize; i++)
        C[i] = SENTINEL;
    if (c->res == 1) {
        R = galloc(&gr, (size_t)(M ? (M - 1) * ldr + N : 0));
        fill(R, (size_t)(M ? (M - 1) * ldr + N : 0), 1.0f);
    } else if (c->res == 2) {
        for (int64_t m = 0; m < M; m++)
            fill(C + m * c->ldc, (size_t)N, 1.0f);
        R = C;
    } else if (c->res == 3) {
        R = galloc(&gr, (size_t)N);
        fill(R, (size_t)N, 1.0f);
    }
    double *ref = malloc((size_t)(M * N + 1) * sizeof *ref);
    assert_non_null(ref);
    if (bf16) {
        size_t na = (size_t)(M ? (M - 1) * c->lda + K : 0), nw = (size_t)(K * N);
        float *Ar = malloc((na + 1) * sizeof *Ar), *Wr = malloc((nw + 1) * sizeof *Wr);
        assert_true(Ar && Wr);
        for (size_t i = 0; i < na; i++)
            Ar[i] = bf16_round(A[i]);
        for (size_t i = 0; i < nw; i++)
            Wr[i] = bf16_round(W[i]);
        gemm_reference(c, Ar, Wr, bias, R, ldr, ref);
        free(Ar), free(Wr);
        cg_gemm_amx_pack(&d, t, W, P);
    } else {
        gemm_reference(c, A, W, bias, R, ldr, ref);
        cg_gemm_pack(&d, t, W, P);
    }

    cg_gemm_args args = {.A = A, .W = P, .bias = bias, .R = R, .C = C, .M = M};
    int64_t calls = run_driver(j, name, &args, nthreads);

    out_check o = check_output(C, M, N, c->ldc, ref, NULL);
    double err = o.maxref > 0 ? o.maxerr / o.maxref : o.maxerr;
    printf("  gemm%s M %4lld K %4lld N %4lld lda %4lld ldc %4lld bias %d res %d act %d threads %d: err %.2e "
           "(%lld ranges)\n",
           !bf16 ? "" : t->amx_bf16 ? " bf16 amx" : " bf16 dot", (long long)M, (long long)K, (long long)N,
           (long long)c->lda, (long long)c->ldc, c->bias, c->res, c->act, nthreads, err, (long long)calls);
    if (err > TOL || o.bad_sentinels)
        fail_msg("gemm %s: error %.3e > %.0e or %lld sentinels overwritten", name, err, TOL,
                 (long long)o.bad_sentinels);
    if (M == 0 && calls != 0)
        fail_msg("gemm %s: M = 0 ran %lld task ranges", name, (long long)calls);
    free(ref);
    gfree(&ga), gfree(&gw), gfree(&gp), gfree(&gb), gfree(&gr), gfree(&gc);
}

/* Case i at its M with 1 or 4 threads, then at one row (13 where M is 1) with
 * 2, then at none (no task may run). */
static void run_gemm_case_sizes(cg_jit *j, const cg_target *t, gemm_case c, size_t i, const char *name, int bf16)
{
    run_gemm_case(j, t, &c, name, i % 2 ? 4 : 1, bf16);
    c.M = c.M > 1 ? 1 : 13;
    run_gemm_case(j, t, &c, name, 2, bf16);
    c.M = 0;
    run_gemm_case(j, t, &c, name, 1, bf16);
}

/* Each case with three L2 sizes: the host's, one that fits no rows of A
 * (K blocks outside the panels), and 64 KiB, where a K-blocked task of few
 * rows walks the panels outside and one of many rows the K blocks (gemm.c
 * picks at run time).  With the host's (1 MiB or more) the cases of K = 1000
 * to 2048 are not cut into K blocks: their rows of A outgrow the L2, their
 * panels of B do not (gemm.c). */
static void gemm_all_cases(void **state)
{
    cg_jit *j = jit_new();
    cg_target host = cg_jit_target(j);
    printf("  host %s: %d floats per vector, %d registers, fma %d, L2 %lld bytes\n", cg_jit_cpu(j), host.vec_floats,
           host.nregs, host.has_fma, (long long)host.l2_bytes);
    const int64_t l2[3] = {host.l2_bytes, 1, 64 * 1024};
    LLVMModuleRef m = cg_jit_module(j, "gemm");
    char name[64];
    for (int li = 0; li < 3; li++) {
        cg_target t = host;
        t.l2_bytes = l2[li];
        for (size_t i = 0; i < NGEMM; i++) {
            const gemm_case *c = &gemm_cases[i];
            int64_t ldr = c->res == 1 ? c->N + 3 : c->res == 2 ? c->ldc : 0;
            cg_gemm_desc d = {.K = c->K, .N = c->N, .lda = c->lda, .ldc = c->ldc, .ldr = ldr, .has_bias = c->bias,
                              .has_residual = c->res != 0, .activation = c->act};
            snprintf(name, sizeof name, "gemm%zu_l%d", i, li);
            if (!cg_gemm_emit(m, name, &d, &t))
                fail_msg("cg_gemm_emit failed for case %zu", i);
        }
    }
    jit_add(j, m);
    for (int li = 0; li < 3; li++) {
        for (size_t i = 0; i < NGEMM; i++) {
            snprintf(name, sizeof name, "gemm%zu_l%d", i, li);
            run_gemm_case_sizes(j, &host, gemm_cases[i], i, name, 0);
        }
    }
    cg_jit_free(j);
}

/* The bf16 GEMM (on AMX tiles, or with VDPBF16PS: t says which) with every
 * case of the fp32 one (K tails of a step, N tails of a panel's halves, row
 * strides, each epilogue, M = 0 and 1), plus ViT-like shapes, row blocks of
 * more than one task (M = 600), a K of 20 blocks, an activation then a
 * residual (K in one block), and residuals that start the sums (a broadcast
 * row: stride 0). */
static void gemm_bf16_all_cases(cg_jit *j, const cg_target *t, const char *prefix)
{
    static const gemm_case extra[] = {
        {197, 768, 2304, 768, 2304, 1, 0, 0}, {100, 3072, 100, 3088, 100, 1, 2, 0}, {70, 4096, 48, 4096, 50, 0, 3, 1},
        {600, 300, 40, 300, 40, 1, 2, 0},     {40, 5000, 40, 5000, 40, 1, 1, 0},    {33, 1000, 17, 1000, 17, 1, 1, 2},
        /* whole 32 x 32 blocks whose sums start from the residual: its own rows, one row for all */
        {64, 300, 64, 300, 64, 1, 1, 0},      {64, 300, 32, 300, 32, 1, 3, 0},
    };
    enum { NEXTRA = sizeof extra / sizeof extra[0] };
    gemm_case cases[NGEMM + NEXTRA];
    memcpy(cases, gemm_cases, sizeof gemm_cases);
    memcpy(cases + NGEMM, extra, sizeof extra);
    LLVMModuleRef m = cg_jit_module(j, prefix);
    char name[64];
    for (size_t i = 0; i < NGEMM + NEXTRA; i++) {
        const gemm_case *c = &cases[i];
        int64_t ldr = c->res == 1 ? c->N + 3 : c->res == 2 ? c->ldc : 0;
        cg_gemm_desc d = {.K = c->K, .N = c->N, .lda = c->lda, .ldc = c->ldc, .ldr = ldr, .has_bias = c->bias,
                          .has_residual = c->res != 0, .activation = c->act};
        assert_true(cg_gemm_amx_fits(&d));
        snprintf(name, sizeof name, "%s%zu", prefix, i);
        if (!cg_gemm_amx_emit(m, name, &d, t))
            fail_msg("cg_gemm_amx_emit (%s) failed for case %zu", prefix, i);
    }
    /* a residual after an activation keeps K in one block: 4096 at most */
    cg_gemm_desc longk = {.K = 4097, .N = 8, .lda = 4097, .ldc = 8, .ldr = 8, .has_residual = 1, .activation = 1};
    assert_false(cg_gemm_amx_fits(&longk));
    assert_null(cg_gemm_amx_emit(m, "longk", &longk, t));
    jit_add(j, m);
    for (size_t i = 0; i < NGEMM + NEXTRA; i++) {
        snprintf(name, sizeof name, "%s%zu", prefix, i);
        run_gemm_case_sizes(j, t, cases[i], i, name, 1);
    }
}

/* gemm_bf16_all_cases on AMX tiles (amx) or on AVX512-BF16 (VDPBF16PS, as
 * --precision bf16 compiles it for a CPU without AMX; on an AMX host too,
 * where the JIT has avx512bf16); skipped, saying why, where the host or the
 * JIT's features lack it. */
static void gemm_bf16_on(int amx)
{
    if (!tu_bf16_cpu(amx))
        return;
    cg_jit *j = jit_new();
    cg_target t = cg_jit_target(j);
    if (t.vec_floats != 16) {
        cg_jit_free(j);
        printf("  skipped: no AVX-512 in the JIT's features\n");
        tu_skip();
        return;
    }
    if (amx)
        t.amx_bf16 = 1;
    else
        t.bf16_dot = 1;
    gemm_bf16_all_cases(j, &t, amx ? "amx" : "dot");
    cg_jit_free(j);
}

static void test_gemm_bf16_amx(void **state)
{
    (void)state;
    gemm_bf16_on(1);
}

static void test_gemm_bf16_dot(void **state)
{
    (void)state;
    gemm_bf16_on(0);
}

/* The SSE shape runs anywhere; the AVX-512 shape runs on an AVX-512 host and
 * is only verified as IR elsewhere; the AVX2 path's shape (8-float vectors,
 * 16 registers, FMA) runs every GEMM case, at each of its sizes, on any host
 * that can execute it (the AVX2 rows of bench/results.md use it). */
static void gemm_other_targets(void **state)
{
    cg_jit *j = jit_new();
    cg_target host = cg_jit_target(j);
    cg_target sse = {.vec_floats = 4, .nregs = 16, .has_fma = 0};
    cg_target avx512 = {.vec_floats = 16, .nregs = 32, .has_fma = 1};
    cg_target avx2 = avx2_target(host);
    int run_avx2 = host_runs_avx2(&host, "the GEMM cases");
    static const gemm_case c = {37, 300, 45, 300, 45, 1, 2, 1};
    cg_gemm_desc d = {.K = c.K, .N = c.N, .lda = c.lda, .ldc = c.ldc, .ldr = c.ldc, .has_bias = 1, .has_residual = 1,
                      .activation = c.act};
    LLVMModuleRef m = cg_jit_module(j, "targets");
    assert_non_null(cg_gemm_emit(m, "g_sse", &d, &sse));
    char name[64];
    for (size_t i = 0; run_avx2 && i < NGEMM; i++) {
        const gemm_case *g = &gemm_cases[i];
        int64_t ldr = g->res == 1 ? g->N + 3 : g->res == 2 ? g->ldc : 0;
        cg_gemm_desc gd = {.K = g->K, .N = g->N, .lda = g->lda, .ldc = g->ldc, .ldr = ldr, .has_bias = g->bias,
                           .has_residual = g->res != 0, .activation = g->act};
        snprintf(name, sizeof name, "gemm%zu_avx2", i);
        if (!cg_gemm_emit(m, name, &gd, &avx2))
            fail_msg("cg_gemm_emit failed for case %zu on the AVX2 path", i);
    }
    if (host.vec_floats == 16)
        assert_non_null(cg_gemm_emit(m, "g_avx512", &d, &avx512));
    jit_add(j, m);
    run_gemm_case(j, &sse, &c, "g_sse", 2, 0);
    if (run_avx2)
        printf("  the AVX2 path (8-float vectors, 16 registers, FMA): every GEMM case\n");
    for (size_t i = 0; run_avx2 && i < NGEMM; i++) {
        snprintf(name, sizeof name, "gemm%zu_avx2", i);
        run_gemm_case_sizes(j, &avx2, gemm_cases[i], i, name, 0);
    }
    if (host.vec_floats == 16) {
        run_gemm_case(j, &avx512, &c, "g_avx512", 2, 0);
    } else {
        LLVMModuleRef v = cg_jit_module(j, "avx512");
        assert_non_null(cg_gemm_emit(v, "g_avx512", &d, &avx512));
        char *msg = NULL;
        int bad = LLVMVerifyModule(v, LLVMReturnStatusAction, &msg);
        printf("  AVX-512 GEMM emitted, IR %s; not run: the host has %d-float vectors\n", bad ? "invalid" : "valid",
               host.vec_floats);
        if (bad)
            fail_msg("AVX-512 GEMM: %s", msg);
        LLVMDisposeMessage(msg);
        LLVMDisposeModule(v);
    }
    cg_jit_free(j);
}

static void gemm_rejects_bad_descs(void **state)
{
    cg_jit *j = jit_new();
    cg_target t = cg_jit_target(j);
    LLVMModuleRef m = cg_jit_module(j, "bad");
    cg_gemm_desc bad[] = {
        {.K = 0, .N = 4, .lda = 4, .ldc = 4},
        {.K = 4, .N = 0, .lda = 4, .ldc = 4},
        {.K = 4, .N = 4, .lda = 3, .ldc = 4},
        {.K = 4, .N = 4, .lda = 4, .ldc = 4, .activation = IR_ACT_COUNT},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_null(cg_gemm_emit(m, "bad", &bad[i], &t));
        assert_int_equal(cg_gemm_packed_bytes(&bad[i], &t), 0);
    }
    cg_target odd = {.vec_floats = 6, .nregs = 16};
    cg_gemm_desc ok = {.K = 4, .N = 4, .lda = 4, .ldc = 4};
    assert_null(cg_gemm_emit(m, "bad", &ok, &odd));
    LLVMDisposeModule(m);
    cg_jit_free(j);
}

/* ---- batched GEMM ---- */

typedef struct {
    int64_t batch, M, N, K, pad; /* pad: extra floats per row of A, B and C */
    int trans_b, bcast_b;        /* bcast_b: b_batch_stride 0 */
    float alpha;
} bgemm_case;

static const bgemm_case bgemm_cases[] = {
    /* each driver also runs at batch 1 and batch 0 */
    {12, 17, 17, 16, 0, 1, 0, 0.25f}, {12, 17, 16, 17, 0, 0, 0, 1.0f},  {3, 197, 197, 64, 0, 1, 0, 0.125f},
    {3, 197, 64, 197, 0, 0, 0, 1.0f}, {2, 5, 7, 3, 2, 1, 0, 1.0f},      {2, 5, 7, 3, 2, 0, 1, -2.0f},
    {2, 33, 45, 600, 3, 1, 0, 0.5f},  {2, 33, 45, 600, 3, 0, 1, 0.5f},  {5, 63, 65, 64, 1, 0, 0, 1.0f},
};
#define NBGEMM (sizeof bgemm_cases / sizeof bgemm_cases[0])

static cg_bgemm_desc bgemm_desc_of(const bgemm_case *c)
{
    cg_bgemm_desc d = {.M = c->M, .N = c->N, .K = c->K, .lda = c->K + c->pad,
                       .ldb = (c->trans_b ? c->K : c->N) + c->pad, .ldc = c->N + c->pad, .trans_b = c->trans_b,
                       .alpha = c->alpha};
    d.a_batch_stride = d.M * d.lda;
    d.b_batch_stride = c->bcast_b ? 0 : (c->trans_b ? d.N : d.K) * d.ldb;
    d.c_batch_stride = d.M * d.ldc + 5;
    return d;
}

static LLVMValueRef emit_bgemm(LLVMModuleRef m, const char *name, size_t i, const cg_target *t)
{
    cg_bgemm_desc d = bgemm_desc_of(&bgemm_cases[i]);
    return cg_bgemm_emit(m, name, &d, t);
}

/* Case i's kernel on c (case i, at some batch) with nthreads. */
static void run_bgemm_case(cg_jit *j, size_t i, const bgemm_case *c, int nthreads)
{
    cg_bgemm_desc d = bgemm_desc_of(c);
    int64_t nb = c->batch;
    size_t na = (size_t)(nb ? (nb - 1) * d.a_batch_stride + (d.M - 1) * d.lda + d.K : 0);
    size_t rowsb = (size_t)(c->trans_b ? d.N : d.K), colsb = (size_t)(c->trans_b ? d.K : d.N);
    size_t nbb = (size_t)(nb ? (nb - 1) * d.b_batch_stride + (int64_t)(rowsb - 1) * d.ldb + (int64_t)colsb : 0);
    size_t nc = (size_t)(nb * d.c_batch_stride + d.c_batch_stride);
    guarded ga = {0}, gb = {0}, gc = {0};
    float *A = galloc(&ga, na), *B = galloc(&gb, nbb), *C = galloc(&gc, nc);
    fill(A, na, 1.0f);
    fill(B, nbb, 1.0f);
    for (size_t x = 0; x < nc; x++)
        C[x] = SENTINEL;
    char name[64];
    snprintf(name, sizeof name, "bgemm%zu", i);
    cg_bgemm_args args = {.A = A, .B = B, .C = C, .batch = nb};
    int64_t calls = run_driver(j, name, &args, nthreads);
    double maxerr = 0, maxref = 0;
    int64_t bad = 0;
    for (int64_t bi = 0; bi <= nb; bi++)
        for (int64_t x = 0; x < d.c_batch_stride; x++) {
            int64_t r = x / d.ldc, col = x % d.ldc;
            float got = C[bi * d.c_batch_stride + x];
            if (bi == nb || r >= d.M || col >= d.N) {
                bad += got != SENTINEL;
                continue;
            }
            double s = 0;
            for (int64_t k = 0; k < d.K; k++) {
                double bv = c->trans_b ? B[bi * d.b_batch_stride + col * d.ldb + k]
                                       : B[bi * d.b_batch_stride + k * d.ldb + col];
                s += (double)A[bi * d.a_batch_stride + r * d.lda + k] * bv;
            }
            s *= c->alpha;
            maxerr = fmax(maxerr, isnan(got) ? INFINITY : fabs(got - s));
            maxref = fmax(maxref, fabs(s));
        }
    double err = maxref > 0 ? maxerr / maxref : maxerr;
    printf("  bgemm batch %2lld M %3lld N %3lld K %3lld pad %lld trans_b %d bcast_b %d alpha %5.3f: err %.2e\n",
           (long long)nb, (long long)d.M, (long long)d.N, (long long)d.K, (long long)c->pad, c->trans_b, c->bcast_b,
           c->alpha, err);
    if (err > TOL || bad || (nb == 0 && calls))
        fail_msg("bgemm case %zu: error %.3e > %.0e or %lld sentinels overwritten", i, err, TOL, (long long)bad);
    gfree(&ga), gfree(&gb), gfree(&gc);
}

static void bgemm_all_cases(void **state)
{
    cg_jit *j = jit_cases("bgemm", NBGEMM, emit_bgemm, "cg_bgemm_emit");
    for (size_t run = 0; run < 3 * NBGEMM; run++) { /* each case at its batch, at 1 and at 0 */
        bgemm_case c = bgemm_cases[run / 3];
        c.batch = run % 3 == 0 ? c.batch : run % 3 == 1 ? 1 : 0;
        run_bgemm_case(j, run / 3, &c, (int)(run % 4) + 1);
    }
    cg_jit_free(j);
}

/* ---- attention ---- */

typedef struct {
    int64_t batch, tokens, heads, head_size;
    int layout;
    float post_scale;
    float scale; /* 0: 1 / sqrt(head_size) */
} attn_case;

static const attn_case attn_cases[] = {
    /* each driver also runs at batch 0 */
    {1, 1, 1, 16, 0, 1.0f, 0},    {2, 1, 4, 64, 1, 1.0f, 0},   {2, 17, 4, 16, 0, 1.0f, 0},
    {2, 17, 4, 16, 1, 0.125f, 0}, {1, 197, 12, 64, 0, 1.0f, 0}, {1, 197, 3, 64, 1, 0.5f, 0},
    {3, 17, 1, 64, 0, 2.0f, 0},   {2, 23, 2, 20, 0, 1.0f, 0},   {1, 23, 2, 20, 1, 0.7f, 0},
    {2, 29, 3, 24, 0, 1.0f, -0.3f},
};
#define NATTN (sizeof attn_cases / sizeof attn_cases[0])

static float attn_scale(const attn_case *c)
{
    return c->scale != 0 ? c->scale : 1.0f / sqrtf((float)c->head_size);
}

static void attention_reference(const attn_case *c, const float *qkv, float scale, double *out)
{
    int64_t N = c->tokens, H = c->heads, D = c->head_size, E = H * D;
    double *p = malloc((size_t)N * sizeof *p);
    assert_non_null(p);
    for (int64_t b = 0; b < c->batch; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < N; i++) {
#define QKV(which, tok, d)                                                                                              \
    qkv[(b * N + (tok)) * 3 * E + (c->layout ? h * 3 * D + (d) * 3 + (which) : (which) * E + h * D + (d))]
                double mx = -INFINITY, sum = 0;
                for (int64_t jj = 0; jj < N; jj++) {
                    double s = 0;
                    for (int64_t d = 0; d < D; d++)
                        s += (double)QKV(0, i, d) * QKV(1, jj, d);
                    p[jj] = s * scale;
                    mx = fmax(mx, p[jj]);
                }
                for (int64_t jj = 0; jj < N; jj++)
                    sum += p[jj] = exp(p[jj] - mx);
                for (int64_t d = 0; d < D; d++) {
                    double o = 0;
                    for (int64_t jj = 0; jj < N; jj++)
                        o += p[jj] / sum * c->post_scale * QKV(2, jj, d);
                    out[(b * N + i) * E + h * D + d] = o;
                }
#undef QKV
            }
    free(p);
}

static cg_attention_desc attn_desc_of(const attn_case *c)
{
    return (cg_attention_desc){.tokens = c->tokens, .heads = c->heads, .head_size = c->head_size,
                               .qkv_layout = c->layout, .scale = attn_scale(c), .post_scale = c->post_scale};
}

static LLVMValueRef emit_attention(LLVMModuleRef m, const char *name, size_t i, const cg_target *t)
{
    cg_attention_desc d = attn_desc_of(&attn_cases[i]);
    return cg_attention_emit(m, name, &d, t);
}

/* Case i's kernel (<prefix><i>) on c (case i, at some batch) with nthreads. */
static void run_attention_case(cg_jit *j, const char *prefix, size_t i, const attn_case *c, int nthreads)
{
    int64_t E = c->heads * c->head_size;
    size_t nin = (size_t)(c->batch * c->tokens * 3 * E), nout = (size_t)(c->batch * c->tokens * E);
    guarded gi = {0}, go = {0};
    float *qkv = galloc(&gi, nin), *out = galloc(&go, nout + 1);
    fill(qkv, nin, 2.0f);
    for (size_t x = 0; x <= nout; x++)
        out[x] = SENTINEL;
    double *ref = malloc((nout + 1) * sizeof *ref);
    assert_non_null(ref);
    attention_reference(c, qkv, attn_scale(c), ref);
    char name[64];
    snprintf(name, sizeof name, "%s%zu", prefix, i);
    cg_attention_args args = {.qkv = qkv, .out = out, .batch = c->batch};
    int64_t calls = run_driver(j, name, &args, nthreads);
    double maxerr = 0, maxref = 0;
    for (size_t x = 0; x < nout; x++) {
        maxerr = fmax(maxerr, isnan(out[x]) ? INFINITY : fabs(out[x] - ref[x]));
        maxref = fmax(maxref, fabs(ref[x]));
    }
    double err = maxref > 0 ? maxerr / maxref : maxerr;
    printf("  %s batch %lld tokens %3lld heads %2lld head_size %2lld layout %d scale %6.3f post_scale "
           "%5.3f: err %.2e\n",
           prefix, (long long)c->batch, (long long)c->tokens, (long long)c->heads, (long long)c->head_size, c->layout,
           attn_scale(c), c->post_scale, err);
    if (!(err <= TOL) || out[nout] != SENTINEL || (c->batch == 0 && calls))
        fail_msg("%s case %zu: error %.3e > %.0e or the sentinel was overwritten", prefix, i, err, TOL);
    free(ref);
    gfree(&gi), gfree(&go);
}

/* Every case for the host's vectors ("attn"), then for the AVX2 path's
 * ("attn_avx2": 8-float vectors, 16 registers) where the host can run it. */
static void attention_all_cases(void **state)
{
    cg_jit *h = jit_new();
    cg_target host = cg_jit_target(h), avx2 = avx2_target(host);
    cg_jit_free(h);
    for (int path = 0; path < 2; path++) {
        if (path == 1 && !host_runs_avx2(&host, "attention"))
            break;
        const char *prefix = path ? "attn_avx2" : "attn";
        cg_jit *j = jit_cases_for(prefix, NATTN, emit_attention, "cg_attention_emit", path ? &avx2 : NULL);
        for (size_t run = 0; run < 2 * NATTN; run++) { /* each case at its batch and at 0 */
            attn_case c = attn_cases[run / 2];
            if (run % 2)
                c.batch = 0;
            run_attention_case(j, prefix, run / 2, &c, (int)(run % 4) + 1);
        }
        cg_jit_free(j);
    }
}

/* ---- vector math ---- */

/* void f(const float *x, float *y, i64 n): y = op(x), n a multiple of vf. */
static void emit_map(kern *k, const char *name, int op)
{
    LLVMTypeRef params[3] = {k->ptr, k->ptr, k->i64};
    LLVMValueRef fn = kern_func(k, name, LLVMFunctionType(k->voidt, params, 3, 0), 0);
    kern_loop L;
    kern_for(k, &L, kern_i64(k, 0), LLVMGetParam(fn, 2), k->vf, 1, 0, NULL, "i");
    LLVMValueRef x = kern_vload(k, kern_gep(k, LLVMGetParam(fn, 0), L.iv), k->vf, NULL);
    LLVMValueRef y = op == 0 ? kern_vexp(k, x, 0) : op == 1 ? kern_verf(k, x) : kern_activation(k, x, op - 1);
    kern_vstore(k, y, kern_gep(k, LLVMGetParam(fn, 1), L.iv), k->vf);
    kern_for_end(k, &L, NULL);
    LLVMBuildRetVoid(k->b);
}

static void vector_math_accuracy(void **state)
{
    cg_jit *j = jit_new();
    cg_target t = cg_jit_target(j);
    LLVMModuleRef m = cg_jit_module(j, "math");
    kern k;
    assert_int_equal(kern_init(&k, m, &t), 0);
    static const char *names[8] = {"exp", "erf", "gelu_erf", "gelu_tanh", "relu", "relu6", "quick_gelu", "silu"};
    _Static_assert(IR_ACT_COUNT == 7, "a name and a reference for every activation");
    for (int op = 0; op < 8; op++)
        emit_map(&k, names[op], op);
    kern_dispose(&k);
    jit_add(j, m);
    enum { N = 1 << 16 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    assert_true(x && y);
    typedef void (*map_fn)(const float *, float *, int64_t);
    for (int op = 0; op < 8; op++) {
        float lo = op == 0 ? -87.0f : -10.0f, hi = op == 0 ? 88.0f : 10.0f;
        for (int i = 0; i < N; i++)
            x[i] = lo + (hi - lo) * (float)i / (N - 1);
        map_fn f = (map_fn)cg_jit_lookup(j, names[op]);
        assert_non_null(f);
        f(x, y, N);
        double worst = 0, worst_at = 0, libm_worst = 0;
        for (int i = 0; i < N; i++) {
            double r, e, libm = 0;
            if (op == 0) { /* relative error, and expf's own for scale */
                r = exp((double)x[i]);
                e = fabs(y[i] - r) / r;
                libm = fabs(expf(x[i]) - r) / r;
            } else if (op == 1) { /* absolute error, and erff's own */
                r = erf((double)x[i]);
                e = fabs(y[i] - r);
                libm = fabs(erff(x[i]) - r);
            } else { /* absolute error relative to max(1, |x|) */
                r = act_ref(x[i], op - 1);
                e = fabs(y[i] - r) / fmax(1.0, fabs(x[i]));
            }
            if (!(e <= worst)) /* NaN counts as worst */
                worst = isnan(e) ? INFINITY : e, worst_at = x[i];
            libm_worst = fmax(libm_worst, libm);
        }
        double bound = op == 0 ? 3e-7 : op == 1 ? 5e-7 : 5e-7;
        printf("  %-9s on [%g, %g]: worst error %.2e at %g (libm %.2e), bound %.0e\n", names[op], lo, hi, worst,
               worst_at, libm_worst, bound);
        if (!(worst <= bound))
            fail_msg("%s: error %.3e at %g above %.0e", names[op], worst, worst_at, bound);
    }
    free(x);
    free(y);
    cg_jit_free(j);
}

/* ---- the int8 GEMM (gemm_i8.c) ----
 * Against sums in int64 written here: with unit scales and no epilogue the
 * output must be exactly (float)(sum - za * colsum) (the sums and the zero
 * point's term are exact in int32, the conversion rounds once, as here);
 * with scales, bias, activation and residual within a few float roundings
 * of a double reference.  A and C in guarded buffers with sentinels.  Each
 * case runs on every path of the kernel the host can run: AMX-INT8 tiles,
 * VPDPBUSD on 16 and 8 lanes, and without VNNI on 16 and 8 lanes both the
 * 16-bit products (any weights) and VPMADDUBSW (weights in -64..64, the
 * extremes of a pair's sum reached). */

typedef struct {
    int64_t M, K, N, lda, ldc;
    int bias, res, act, per_row; /* res as gemm_case: 1 separate R, 2 in place, 3 one row; 4 a gate */
} i8_case;

static const i8_case i8_cases[] = {
    {197, 768, 768, 768, 768, 1, 0, 0, 0}, {197, 768, 2304, 768, 2304, 1, 0, 0, 1},
    {1, 768, 768, 768, 768, 1, 1, 0, 1},   {5, 13, 37, 16, 40, 1, 0, 1, 0},
    {31, 770, 50, 773, 50, 0, 2, 0, 1},    {13, 3, 100, 3, 101, 1, 3, 4, 0},
    {40, 1, 33, 1, 33, 1, 4, 0, 1},        {29, 3072, 96, 3072, 96, 1, 1, 0, 1},
    {12, 64, 16, 64, 16, 0, 0, 0, 0},      {25, 255, 31, 255, 31, 1, 0, 2, 1},
    /* for the tiles: whole 32 x 32 blocks and K one block of 8 steps; one
     * row past them; more rows than one task's buffer holds (K in one
     * block, in place); K in 313 steps (40 blocks, one 32-row block per
     * task); K past what AMX takes (another path) */
    {64, 512, 64, 512, 64, 1, 3, 3, 1},    {33, 64, 32, 64, 32, 0, 0, 0, 0},
    {600, 300, 40, 300, 40, 1, 2, 1, 1},   {70, 20000, 20, 20001, 24, 1, 1, 0, 0},
    {9, 40000, 17, 40000, 17, 0, 0, 0, 1},
};
#define I8_NCASES (sizeof i8_cases / sizeof i8_cases[0])

static uint8_t *galloc_bytes(guarded *g, size_t n)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE), bytes = n ? n : 1;
    size_t data = (bytes + page - 1) / page * page;
    g->maplen = data + page;
    g->map = mmap(NULL, g->maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(g->map != MAP_FAILED);
    assert_int_equal(mprotect((char *)g->map + data, page, PROT_NONE), 0);
    return (uint8_t *)g->map + data - bytes;
}

static uint32_t urand(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 32);
}

/* maddubs: as cg_gemm_i8_desc's. */
static cg_gemm_i8_desc i8_desc(const i8_case *c, int exact, int maddubs)
{
    int64_t ldr = c->res == 1 || c->res == 4 ? c->N + 3 : c->res == 2 ? c->ldc : 0;
    cg_gemm_i8_desc d = {.g = {.K = c->K, .N = c->N, .lda = c->lda, .ldc = c->ldc, .ldr = ldr},
                         .a_per_row = c->per_row, .maddubs = maddubs};
    if (!exact) {
        d.g.has_bias = c->bias, d.g.has_residual = c->res != 0, d.g.activation = c->act, d.g.gate = c->res == 4;
    }
    return d;
}

/* The weights of a case: any int8 (W_ANY), in -64..64 with pairs at the
 * int16 bound (W_NARROW: every pair fits VPMADDUBSW), or mostly in
 * -30..30 with one in 64 past +-100 (W_SPARSE: a few pairs do not, as a
 * quantized model's). */
enum { W_ANY, W_NARROW, W_SPARSE };

/* Case c through the driver name at nthreads; exact: unit scales, no
 * epilogue, compared bit for bit; maddubs: as i8_desc; wmode: W_*. */
static void run_i8_case(cg_jit *j, const cg_target *t, const i8_case *c, const char *name, int nthreads, int exact,
                        int maddubs, int wmode)
{
    int64_t M = c->M, K = c->K, N = c->N;
    cg_gemm_i8_desc d = i8_desc(c, exact, maddubs);
    const cg_gemm_desc *g = &d.g;
    guarded ga = {0}, gc = {0}, gr = {0};
    size_t asize = (size_t)(M ? (M - 1) * c->lda + K : 0);
    uint8_t *A = galloc_bytes(&ga, asize);
    int8_t *W = malloc((size_t)(K * N));
    float *sw = malloc((size_t)N * sizeof *sw), *bias = malloc((size_t)N * sizeof *bias);
    float *sa = malloc((size_t)(M + 1) * sizeof *sa);
    int32_t *za = malloc((size_t)(M + 1) * sizeof *za);
    assert_true(W && sw && bias && sa && za);
    for (size_t i = 0; i < asize; i++)
        A[i] = (uint8_t)urand();
    for (int64_t i = 0; i < K * N; i++) {
        uint32_t u = urand();
        W[i] = wmode == W_NARROW   ? (int8_t)((int)(u % 129) - 64)
               : wmode == W_ANY    ? (int8_t)(uint8_t)u
               : (u >> 8) % 64 == 0 ? (int8_t)((u & 1 ? 1 : -1) * (int)(100 + (u >> 1) % 28))
                                    : (int8_t)((int)(u % 61) - 30);
    }
    int narrow = wmode == W_NARROW;
    if (K * N > 1)
        W[0] = narrow ? 64 : wmode == W_SPARSE ? 127 : -128, W[1] = narrow ? -64 : 127;
    /* k 0 and 1 of columns 0 and 1: at the pair sums' bounds, +-255 * 128 (narrow), past them (sparse) */
    if (wmode != W_ANY && K > 1 && N > 1)
        W[N] = narrow ? 64 : 127, W[N + 1] = -64;
    if (asize > 1)
        A[0] = 255, A[1] = wmode == W_ANY ? 0 : 255;
    if (narrow)
        assert_true(cg_gemm_i8_pairs_fit(W, K, N));
    int64_t nfix = cg_gemm_i8_fixes(&d, t, W);
    if (maddubs && !t->vnni && !t->amx_int8 && (narrow ? nfix != 0 : K > 1 && N > 1 && nfix <= 0))
        fail_msg("gemm int8 %s: %lld fixes of %s weights", name, (long long)nfix, narrow ? "narrow" : "wide-ranging");
    size_t pbytes = cg_gemm_i8_packed_bytes(&d, t, W);
    assert_true(pbytes > 0 && pbytes % 64 == 0);
    void *P = aligned_alloc(64, pbytes);
    assert_non_null(P);
    for (int64_t n = 0; n < N; n++) {
        sw[n] = exact ? 1.0f : (0.5f + 0.5f * fabsf(frand())) / 128.0f;
        bias[n] = frand();
    }
    for (int64_t m = 0; m <= M; m++) {
        sa[m] = exact ? 1.0f : (0.5f + 0.5f * fabsf(frand())) / 255.0f / sqrtf((float)K);
        za[m] = (int32_t)(urand() % 256);
    }
    size_t csize = (size_t)(M * c->ldc + c->ldc);
    float *C = galloc(&gc, csize), *R = NULL;
    for (size_t i = 0; i < csize; i++)
        C[i] = SENTINEL;
    if (g->has_residual && g->ldr != 0 && R == NULL && c->res != 2) {
        size_t rsize = (size_t)(M ? (M - 1) * g->ldr + N : 0);
        R = galloc(&gr, rsize);
        fill(R, rsize, 1.0f);
    } else if (g->has_residual && c->res == 2) {
        for (int64_t m = 0; m < M; m++)
            fill(C + m * c->ldc, (size_t)N, 1.0f);
        R = C;
    } else if (g->has_residual) {
        R = galloc(&gr, (size_t)N);
        fill(R, (size_t)N, 1.0f);
    }
    /* the reference, before C (maybe R) is overwritten; mag: the terms'
     * magnitude, whose float epsilon is the unit of the error */
    double *ref = malloc((size_t)(M * N + 1) * sizeof *ref), *mag = malloc((size_t)(M * N + 1) * sizeof *mag);
    assert_true(ref && mag);
    for (int64_t n = 0; n < N; n++) {
        int64_t colsum = 0;
        for (int64_t k = 0; k < K; k++)
            colsum += W[k * N + n];
        for (int64_t m = 0; m < M; m++) {
            int64_t acc = 0;
            for (int64_t k = 0; k < K; k++)
                acc += (int64_t)A[m * c->lda + k] * W[k * N + n];
            int64_t q = c->per_row ? m : 0;
            int64_t tq = acc - (int64_t)za[q] * colsum;
            if (exact) {
                ref[m * N + n] = (double)(float)tq;
                mag[m * N + n] = 0x1p-23;
                continue;
            }
            double y = (double)sa[q] * sw[n] * (double)tq + (g->has_bias ? bias[n] : 0.0);
            double m0 = fabs((double)sa[q] * sw[n] * (double)tq) + (g->has_bias ? fabs(bias[n]) : 0.0);
            y = act_ref(y, g->activation);
            if (g->has_residual) {
                double r = R[m * g->ldr + n];
                m0 = m0 * fmax(1.0, fabs(r)) + fabs(r);
                y = g->gate ? y * r : y + r;
            }
            ref[m * N + n] = y;
            mag[m * N + n] = fmax(m0, 1.0) * 0x1p-23;
        }
    }
    assert_int_equal(cg_gemm_i8_pack(&d, t, W, sw, P), 0);
    cg_gemm_i8_args args = {.A = A, .W = P, .bias = g->has_bias ? bias : NULL, .R = R, .C = C,
                            .a_scale = sa, .a_zero = za, .M = M};
    int64_t calls = run_driver(j, name, &args, nthreads);
    out_check o = check_output(C, M, N, c->ldc, ref, mag);
    int64_t mismatches = exact ? o.mismatches : 0;
    double worst = exact ? 0 : o.maxerr; /* in float epsilons */
    char fixes[32] = "";
    if (nfix >= 0)
        snprintf(fixes, sizeof fixes, " %lld fixes", (long long)nfix);
    printf("  gemm int8 %s%d%s M %4lld K %5lld N %4lld lda %5lld ldc %4lld %s bias %d res %d act %d za %s threads %d: "
           "%s %.2f eps (%lld ranges)\n",
           cg_gemm_i8_path(&d, t), t->vec_floats, fixes, (long long)M, (long long)K, (long long)N, (long long)c->lda,
           (long long)c->ldc, exact ? "exact" : "dequant", g->has_bias, c->res, g->activation,
           c->per_row ? "per row" : "per tensor", nthreads, exact ? "mismatches" : "worst",
           exact ? (double)mismatches : worst, (long long)calls);
    if (o.bad_sentinels || mismatches || worst > 8)
        fail_msg("gemm int8 %s: %lld sums differ, %.2f eps > 8, or %lld sentinels overwritten", name,
                 (long long)mismatches, worst, (long long)o.bad_sentinels);
    if (M == 0 && calls != 0)
        fail_msg("gemm int8 %s: M = 0 ran %lld task ranges", name, (long long)calls);
    free(ref), free(mag), free(W), free(sw), free(bias), free(sa), free(za), free(P);
    gfree(&ga), gfree(&gc), gfree(&gr);
}

/* Every int8 case, exact and dequantized, at its M with 1 or 4 threads, at
 * one row (13 where M is 1) with 2, and at none, for target t, in a JIT for
 * the host with its features changed by features (NULL: none); maddubs: as
 * i8_desc, with weights of each W_* mode; else W_ANY. */
static void gemm_i8_all_cases(const cg_target *t, const char *features, const char *prefix, int maddubs)
{
    char err[512];
    cg_jit *j = cg_jit_new_with(features, err, sizeof err);
    if (!j)
        fail_msg("cannot create the JIT: %s", err);
    LLVMModuleRef m = cg_jit_module(j, prefix);
    for (size_t i = 0; i < I8_NCASES; i++)
        for (int exact = 0; exact < 2; exact++) {
            char name[64];
            snprintf(name, sizeof name, "%s%zu_%d", prefix, i, exact);
            cg_gemm_i8_desc d = i8_desc(&i8_cases[i], exact, maddubs);
            if (!cg_gemm_i8_emit(m, name, &d, t))
                fail_msg("cg_gemm_i8_emit (%s) failed for case %zu", prefix, i);
        }
    cg_gemm_i8_desc bad = i8_desc(&i8_cases[0], 1, maddubs);
    bad.g.K = 70000, bad.g.lda = 70000;
    assert_null(cg_gemm_i8_emit(m, "bad_k", &bad, t));
    assert_int_equal(cg_gemm_i8_packed_bytes(&bad, t, NULL), 0);
    /* targets without a path: 4-float vectors; neither VNNI nor VPMADDWD */
    cg_target none[2] = {*t, *t};
    none[0].vec_floats = 4;
    none[1].vnni = 0, none[1].madd16 = 0, none[1].amx_int8 = 0;
    bad = i8_desc(&i8_cases[0], 1, maddubs);
    for (int i = 0; i < 2; i++) {
        assert_false(cg_target_int8_ok(&none[i]));
        assert_null(cg_gemm_i8_emit(m, "bad_target", &bad, &none[i]));
        assert_int_equal(cg_gemm_i8_packed_bytes(&bad, &none[i], NULL), 0);
    }
    jit_add(j, m);
    /* maddubs: W_ANY (fixes nearly everywhere), W_NARROW (none), W_SPARSE (a few) */
    for (int wmode = W_ANY; wmode <= (maddubs ? W_SPARSE : W_ANY); wmode++)
        for (size_t i = 0; i < I8_NCASES; i++)
            for (int exact = 0; exact < 2; exact++) {
                char name[64];
                snprintf(name, sizeof name, "%s%zu_%d", prefix, i, exact);
                i8_case c = i8_cases[i];
                run_i8_case(j, t, &c, name, i % 2 ? 4 : 1, exact, maddubs, wmode);
                c.M = c.M > 1 ? 1 : 13;
                run_i8_case(j, t, &c, name, 2, exact, maddubs, wmode);
                c.M = 0;
                run_i8_case(j, t, &c, name, 1, exact, maddubs, wmode);
            }
    cg_jit_free(j);
}

/* The host's target as the JIT sees it (features: as for cg_jit_new_with). */
static cg_target i8_host(const char *features)
{
    char err[512];
    cg_jit *j = cg_jit_new_with(features, err, sizeof err);
    if (!j)
        fail_msg("cannot create the JIT: %s", err);
    cg_target t = cg_jit_target(j);
    cg_jit_free(j);
    return t;
}

/* Whether this CPU has every feature of list; else says why the path what
 * is skipped. */
static int i8_cpu_has(const char *list, const char *what)
{
    char missing[256];
    if (rt_cpu_missing_features(list, missing, sizeof missing) == 0)
        return 1;
    printf("  skipped: %s: this CPU lacks %s\n", what, missing);
    return 0;
}

/* The int8 GEMM on AMX-INT8 tiles (TDPBUSD; K past the tiles' reach on
 * VPDPBUSD); skipped, saying why, where the CPU or the kernel does not
 * allow it. */
static void test_gemm_int8_amx(void **state)
{
    (void)state;
    cg_target t = i8_host(NULL);
    char why[300];
    if (t.vec_floats != 16) {
        printf("  skipped: AMX-INT8: no AVX-512 in the JIT's features\n");
        tu_skip();
        return;
    }
    if (!i8_cpu_has("+avx512f,+amx-tile,+amx-int8", "AMX-INT8")) {
        tu_skip();
        return;
    }
    if (rt_cpu_enable_amx("+amx-tile", why, sizeof why) != 0) {
        printf("  skipped: AMX-INT8: %s\n", why);
        tu_skip();
        return;
    }
    t.amx_int8 = 1;
    t.vnni = rt_cpu_missing_features("+avx512vnni", why, sizeof why) == 0;
    t.madd16 = rt_cpu_missing_features("+avx512bw", why, sizeof why) == 0;
    gemm_i8_all_cases(&t, NULL, "i8amx_", 0);
}

/* VPDPBUSD on 16-lane vectors (AVX512-VNNI) and on 8-lane ones (the AVX2
 * path's shape: AVX-VNNI, or AVX512-VNNI with VL); each skipped, saying
 * why, where this CPU lacks the instructions. */
static void test_gemm_int8_vnni(void **state)
{
    (void)state;
    cg_target host = i8_host(NULL);
    int ran = 0;
    if (host.vec_floats != 16) {
        printf("  skipped: VPDPBUSD on 16 lanes: no AVX-512 in the JIT's features\n");
    } else if (i8_cpu_has("+avx512f,+avx512vnni", "VPDPBUSD on 16 lanes")) {
        cg_target t = host;
        t.vnni = 1;
        gemm_i8_all_cases(&t, NULL, "i8v16_", 0);
        ran++;
    }
    char missing[256];
    if (host.vec_floats >= 8 && (rt_cpu_missing_features("+avxvnni", missing, sizeof missing) == 0 ||
                                 rt_cpu_missing_features("+avx512vnni,+avx512vl", missing, sizeof missing) == 0)) {
        cg_target t = avx2_target(host);
        t.vnni = 1;
        gemm_i8_all_cases(&t, NULL, "i8v8_", 0);
        ran++;
    } else {
        printf("  skipped: VPDPBUSD on 8 lanes: this CPU has neither AVX-VNNI nor AVX512-VNNI with VL\n");
    }
    if (!ran)
        tu_skip();
}

/* Without VNNI, on 16 lanes (AVX512BW) and 8 (AVX2), in a JIT whose
 * features leave the VNNI instructions out (as a CPU without them compiles
 * it): maddubs, VPMADDUBSW then VPMADDWD (with weights whose pairs all fit,
 * a few that do not, most that do not), else 16-bit products summed in
 * pairs (VPMADDWD); each skipped, saying why, where the JIT or this CPU has
 * no such vectors. */
static void gemm_i8_novnni(int maddubs)
{
    static const char *const novnni = "-avx512vnni,-avxvnni,-amx-int8";
    const char *what = maddubs ? "VPMADDUBSW" : "VPMADDWD";
    char msg[64];
    cg_target host = i8_host(novnni);
    int ran = 0;
    snprintf(msg, sizeof msg, "%s on 16 lanes", what);
    if (host.vec_floats != 16) {
        printf("  skipped: %s: no AVX-512 in the JIT's features\n", msg);
    } else if (i8_cpu_has("+avx512f,+avx512bw", msg)) {
        cg_target t = host;
        t.vnni = 0, t.amx_int8 = 0, t.madd16 = 1;
        gemm_i8_all_cases(&t, novnni, maddubs ? "i8u16_" : "i8w16_", maddubs);
        ran++;
    }
    snprintf(msg, sizeof msg, "%s on 8 lanes", what);
    if (host.vec_floats < 8) {
        printf("  skipped: %s: the JIT has %d-float vectors\n", msg, host.vec_floats);
    } else if (i8_cpu_has("+avx2", msg)) {
        cg_target t = avx2_target(host);
        t.vnni = 0, t.amx_int8 = 0, t.madd16 = 1;
        gemm_i8_all_cases(&t, novnni, maddubs ? "i8u8_" : "i8w8_", maddubs);
        ran++;
    }
    if (!ran)
        tu_skip();
}

static void test_gemm_int8_wide(void **state)
{
    (void)state;
    gemm_i8_novnni(0);
}

static void test_gemm_int8_maddubs(void **state)
{
    (void)state;
    gemm_i8_novnni(1);
}

/* cg_gemm_i8_pairs_fit at its bounds (a pair's positive weights summing to
 * 128 fit, 129 not; likewise -128 and -129; a lone k past K pairs with a
 * zero).  On a W whose pairs mostly do not fit, all of A 255: the
 * VPMADDUBSW path without its fixes (the panels packed as VPDPBUSD packs
 * them, the fix table zero) misses the exact sums where the pairs do not
 * fit (the bound is the instruction's), and with them (one for each pair of
 * k) gets every sum; cg_gemm_i8_maddubs_pays says no to that many fixes,
 * yes to none. */
static void test_gemm_int8_pairs_fit(void **state)
{
    (void)state;
    static const struct {
        int8_t w[6]; /* K = 3, N = 2: k 0 and 1 pair, k 2 with the zero past K */
        int fit;
    } cases[] = {
        {{64, 64, 64, -64, 127, -128}, 1},   {{65, 0, 64, 0, 0, 0}, 0},     {{-64, 0, -65, 0, 0, 0}, 0},
        {{0, 127, 0, 1, 0, 0}, 1},           {{0, 127, 0, 2, 0, 0}, 0},     {{0, -128, 0, 0, 0, 0}, 1},
        {{0, -128, 0, -1, 0, 0}, 0},         {{127, -128, -128, 127, 0, 0}, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (cg_gemm_i8_pairs_fit(cases[i].w, 3, 2) != cases[i].fit)
            fail_msg("cg_gemm_i8_pairs_fit case %zu: %d, expected %d", i, !cases[i].fit, cases[i].fit);
    cg_target host = i8_host("-avx512vnni,-avxvnni,-amx-int8");
    if (host.vec_floats < 8 || !i8_cpu_has("+avx2", "VPMADDUBSW on 8 lanes")) {
        tu_skip();
        return;
    }
    cg_target t = avx2_target(host), tv = t;
    t.vnni = 0, t.amx_int8 = 0, t.madd16 = 1;
    tv.vnni = 1;
    enum { K = 64, N = 16 };
    cg_gemm_i8_desc d = {.g = {.K = K, .N = N, .lda = K, .ldc = N}, .a_per_row = 0, .maddubs = 1};
    int8_t W[K * N], Wn[K * N];
    uint8_t A[K];
    float sw[N], C[N], sa = 1;
    int32_t za = 0;
    for (int i = 0; i < K * N; i++) { /* column n: +-(64 + 8 (n % 8)) in every k, pairs 2x that */
        W[i] = (int8_t)((i % N < 8 ? 1 : -1) * (64 + 8 * (i % 8)));
        Wn[i] = (int8_t)(i % 2 ? 64 : -64);
    }
    for (int k = 0; k < K; k++)
        A[k] = 255;
    for (int n = 0; n < N; n++)
        sw[n] = 1;
    assert_false(cg_gemm_i8_pairs_fit(W, K, N));
    assert_int_equal(cg_gemm_i8_fixes(&d, &t, W), K / 2);
    assert_int_equal(cg_gemm_i8_fixes(&d, &t, Wn), 0);
    assert_false(cg_gemm_i8_maddubs_pays(&d, &t, W));
    assert_true(cg_gemm_i8_maddubs_pays(&d, &t, Wn));
    assert_false(cg_gemm_i8_maddubs_pays(&d, &tv, Wn)); /* VNNI: VPDPBUSD */
    size_t bytes = cg_gemm_i8_packed_bytes(&d, &t, W);
    assert_true(bytes > cg_gemm_i8_packed_bytes(&d, &tv, W));
    void *P = aligned_alloc(64, bytes);
    assert_non_null(P);
    memset(P, 0, bytes);
    char err[512];
    cg_jit *j = cg_jit_new_with("-avx512vnni,-avxvnni,-amx-int8", err, sizeof err);
    if (!j)
        fail_msg("cannot create the JIT: %s", err);
    LLVMModuleRef m = cg_jit_module(j, "sat");
    assert_non_null(cg_gemm_i8_emit(m, "sat", &d, &t));
    jit_add(j, m);
    cg_gemm_i8_args args = {.A = A, .W = P, .C = C, .a_scale = &sa, .a_zero = &za, .M = 1};
    for (int fixed = 0; fixed < 2; fixed++) {
        assert_int_equal(cg_gemm_i8_pack(&d, fixed ? &t : &tv, W, sw, P), 0);
        run_driver(j, "sat", &args, 1);
        int exact = 0, under = 0;
        for (int n = 0; n < N; n++) { /* only columns 0 and 8 (+-64) fit: the others' pairs saturate */
            float want = 255.0f * (float)W[n] * K;
            exact += C[n] == want;
            under += fabsf(C[n]) < fabsf(want);
        }
        printf("  VPMADDUBSW on weights past the bound, %s: %d of %d columns exact, %d short\n",
               fixed ? "with its fixes" : "without fixes", exact, N, under);
        if (fixed ? exact != N : exact != 2 || under != N - 2)
            fail_msg("VPMADDUBSW past the bound %s: %d columns exact, %d short", fixed ? "with fixes" : "without fixes",
                     exact, under);
    }
    cg_jit_free(j);
    free(P);
}

/* test_gemm_bf16_amx and test_gemm_bf16_dot run as ctests of their own, test_kernels_bf16amx and
 * test_kernels_bf16dot (tests/CMakeLists.txt), so that a host without AMX or AVX512-BF16 reports that
 * one as skipped and still runs the rest here. */
TU_MAIN(NULL, NULL, vector_math_accuracy, gemm_all_cases, gemm_other_targets, gemm_rejects_bad_descs,
        bgemm_all_cases, attention_all_cases, test_gemm_bf16_amx, test_gemm_bf16_dot, test_gemm_int8_amx,
        test_gemm_int8_vnni, test_gemm_int8_wide, test_gemm_int8_maddubs, test_gemm_int8_pairs_fit)
