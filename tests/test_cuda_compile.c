/* test_cuda_compile.c: the CUDA backend without a GPU.
 *
 *  - every fixture in every precision compiles (NVRTC, sm_80 and sm_90
 *    CUBINs and compute_90 PTX), the .so loads on this machine, its plan
 *    passes the runtime's checks, `vitc inspect` lists its kernels and GPU
 *    targets, and ptxas reports no kernel spilling registers;
 *  - the host-side pieces: the runtime's driver-API constants against the
 *    toolkit's cuda.h, the GEMM weight layout and its fp16/bf16 rounding
 *    against the definition of round-to-nearest-even, float literals and
 *    batch polynomials in generated code, the per-batch GEMM tile ranges of
 *    a launch plan;
 *  - what a user meets: unsupported nodes all listed at once, bad options,
 *    --emit cuda, and `vitc run` on a machine without a GPU failing with
 *    VITC_STATUS_NO_DEVICE and a message that says so.
 *
 * Numbers (the kernels run correctly) are test_cuda_emu's and, on a GPU,
 * test_cuda_gpu's. */
#include "testutil.h"

#include <vitc/runtime.h>

#ifdef VITC_HAVE_CUDA
#include "codegen/cuda/cu_impl.h"
#include "runtime/abi.h"
#include "runtime/cuda_api.h"

#include <cuda.h>
#endif

#include <dlfcn.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifdef VITC_HAVE_CUDA

/* Under AddressSanitizer every vitc this test starts is instrumented and
 * several times slower; the three exporters of a family give the same
 * program, so there one of them (ts17) stands for its family (TU_SANITIZED). */

static tu_fixture fixtures[64];
static int nfixtures;
static char tmpdir[4096];

static const char *const precisions[4] = {"fp32", "tf32", "fp16", "bf16"};

static int vitc_text(const char *const *args, char **text)
{
    char *out, *err;
    int rc = tu_run_vitc(args, &out, &err);
    size_t n = strlen(out ? out : "") + strlen(err ? err : "") + 1;
    *text = malloc(n);
    snprintf(*text, n, "%s%s", out ? out : "", err ? err : "");
    free(out), free(err);
    return rc;
}

/* ---- the driver API as the runtime declares it, against cuda.h ---- */

static void test_driver_constants_match_cuda_h(void **state)
{
    (void)state;
    assert_int_equal(RT_CUDA_SUCCESS, CUDA_SUCCESS);
    assert_int_equal(RT_CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_OUT_OF_MEMORY);
    assert_int_equal(RT_CUDA_ERROR_NO_DEVICE, CUDA_ERROR_NO_DEVICE);
    assert_int_equal(RT_CUDA_ERROR_NO_BINARY_FOR_GPU, CUDA_ERROR_NO_BINARY_FOR_GPU);
    assert_int_equal(RT_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    assert_int_equal(RT_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    assert_int_equal(RT_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    assert_int_equal(RT_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                     CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
    assert_int_equal(RT_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
    assert_int_equal(RT_CU_STREAM_NON_BLOCKING, CU_STREAM_NON_BLOCKING);
    assert_int_equal(RT_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
    assert_int_equal(RT_CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER);
    assert_int_equal(RT_CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES);
    assert_int_equal(RT_CU_TENSOR_MAP_DATA_TYPE_FLOAT16, CU_TENSOR_MAP_DATA_TYPE_FLOAT16);
    assert_int_equal(RT_CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16);
    assert_int_equal(RT_CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_INTERLEAVE_NONE);
    assert_int_equal(RT_CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_SWIZZLE_128B);
    assert_int_equal(RT_CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
    assert_int_equal(RT_CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    assert_int_equal(sizeof(rt_cu_tensor_map), sizeof(CUtensorMap));
    assert_int_equal(sizeof(rt_cu_tensor_map), 128);
    /* the optional entry point: cuda.h's prototype but for the map's pointer type */
    _Static_assert(__builtin_types_compatible_p(
                       __typeof__(&cuTensorMapEncodeTiled),
                       CUresult (*)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                    const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                    CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill)),
                   "cuTensorMapEncodeTiled's prototype");
    _Static_assert(sizeof(cuuint64_t) == sizeof(unsigned long long) && sizeof(cuuint32_t) == sizeof(unsigned),
                   "the map's dimension types");
    /* cuLaunchKernelEx (optional too) and its config and attribute, field by field */
    assert_int_equal(RT_CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
                     CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION);
    assert_int_equal(sizeof(rt_cu_launch_attribute), sizeof(CUlaunchAttribute));
    assert_int_equal(offsetof(rt_cu_launch_attribute, value), offsetof(CUlaunchAttribute, value));
    assert_int_equal(offsetof(rt_cu_launch_attribute, value.programmatic_stream_serialization_allowed),
                     offsetof(CUlaunchAttribute, value.programmaticStreamSerializationAllowed));
    assert_int_equal(sizeof(rt_cu_launch_config), sizeof(CUlaunchConfig));
    assert_int_equal(offsetof(rt_cu_launch_config, shared_bytes), offsetof(CUlaunchConfig, sharedMemBytes));
    assert_int_equal(offsetof(rt_cu_launch_config, stream), offsetof(CUlaunchConfig, hStream));
    assert_int_equal(offsetof(rt_cu_launch_config, attrs), offsetof(CUlaunchConfig, attrs));
    assert_int_equal(offsetof(rt_cu_launch_config, nattrs), offsetof(CUlaunchConfig, numAttrs));
    _Static_assert(__builtin_types_compatible_p(__typeof__(&cuLaunchKernelEx),
                                                CUresult (*)(const CUlaunchConfig *, CUfunction, void **, void **)),
                   "cuLaunchKernelEx's prototype");
    assert_int_equal(sizeof(CUdeviceptr), 8);
    assert_int_equal(sizeof(CUresult), sizeof(rt_cu_result));
    /* the exported names cuda.h's macros resolve to are the ones the runtime looks up */
#define NAME_OF(x) #x
#define EXPANDED(x) NAME_OF(x)
    assert_string_equal(EXPANDED(cuMemAlloc), "cuMemAlloc_v2");
    assert_string_equal(EXPANDED(cuMemFree), "cuMemFree_v2");
    assert_string_equal(EXPANDED(cuStreamDestroy), "cuStreamDestroy_v2");
    assert_string_equal(EXPANDED(cuDevicePrimaryCtxRelease), "cuDevicePrimaryCtxRelease_v2");
    assert_string_equal(EXPANDED(cuGraphInstantiate), "cuGraphInstantiateWithFlags");
    /* every entry point the runtime resolves has cuda.h's prototype (enum
     * parameters as unsigned, compatible with the enums) */
#define CHECK_PROTOTYPE(name, sym, params)                                                                         \
    _Static_assert(__builtin_types_compatible_p(__typeof__(&sym), CUresult(*) params), #sym "'s prototype");
    RT_CUDA_FUNCTIONS(CHECK_PROTOTYPE)
#undef CHECK_PROTOTYPE
}

/* ---- GEMM weights: layout and rounding ---- */

static double dec_f16(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

static double dec_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* h is the nearest representable to x, ties to an even mantissa. */
static int nearest_even(double x, uint16_t h, double (*dec)(uint16_t), double max_finite)
{
    if (isnan(x))
        return isnan(dec(h));
    double ax = fabs(x);
    /* from the largest finite value plus half its ulp on, the result overflows */
    if (ax >= max_finite + (dec == dec_f16 ? 16.0 : ldexp(1.0, 119)))
        return isinf(dec(h)) && (dec(h) > 0) == (x > 0);
    double got = dec(h);
    if (signbit(got) != signbit(x) && x != 0)
        return 0;
    uint16_t up = (uint16_t)(h + 1), down = (uint16_t)(h - 1);
    double e = fabs(got - x);
    for (int k = 0; k < 2; k++) {
        uint16_t o = k ? up : down;
        double ov = dec(o);
        if (isnan(ov) || (signbit(ov) != signbit(got)))
            continue;
        double eo = fabs(ov - x);
        if (eo < e || (eo == e && (h & 1)))
            return 0;
    }
    return 1;
}

static void test_weight_packing_and_rounding(void **state)
{
    (void)state;
    enum { K = 70, N = 37, KP = 96, NP = 128 };
    static float W[K * N];
    uint64_t r = 88172645463325252ull;
    for (int i = 0; i < K * N; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        double u = (double)(r >> 11) / (double)(1ull << 53);
        W[i] = (float)((u - 0.5) * pow(10.0, (double)(i % 13) - 8)); /* 1e-8 .. 1e4 */
    }
    const float special[] = {0.0f, -0.0f, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 65504.0f, 65519.0f, 65520.0f, 70000.0f,
                             -1e9f, 6e-8f, 3e-8f, 2.9802322e-8f, 1e-40f, 1.0f + 1.0f / 256, 1.0f + 3.0f / 256, 3.3895314e38f,
                             NAN};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
        W[i * 31] = special[i];
    static uint16_t h[KP * NP], b[KP * NP];
    static float f[KP * NP];
    cu_pack_weight(W, K, N, KP, NP, IR_F16, h);
    cu_pack_weight(W, K, N, KP, NP, IR_BF16, b);
    cu_pack_weight(W, K, N, KP, NP, IR_F32, f);
    int bad16 = 0, badb = 0, badl = 0;
    for (int n = 0; n < NP; n++)
        for (int k = 0; k < KP; k++) {
            int at = n * KP + k;
            if (n >= N || k >= K) { /* padding is zero in every type */
                badl += h[at] != 0 || b[at] != 0 || f[at] != 0.0f;
                continue;
            }
            float x = W[k * N + n];
            badl += memcmp(&f[at], &x, 4) != 0;
            if (!nearest_even(x, h[at], dec_f16, 65504.0)) {
                if (bad16++ < 5)
                    print_message("f16: %.9g -> 0x%04x (%.9g)\n", (double)x, h[at], dec_f16(h[at]));
            }
            if (!nearest_even(x, b[at], dec_bf16, 3.3895313892515355e38)) {
                if (badb++ < 5)
                    print_message("bf16: %.9g -> 0x%04x (%.9g)\n", (double)x, b[at], dec_bf16(b[at]));
            }
        }
    print_message("Wt %dx%d from W %dx%d: %d layout errors, %d f16 and %d bf16 values not nearest-even "
                  "(of %d, with ties, subnormals, overflow, NaN)\n",
                  NP, KP, K, N, badl, bad16, badb, K * N);
    assert_int_equal(badl, 0);
    assert_int_equal(bad16, 0);
    assert_int_equal(badb, 0);
}

/* ---- generated-code helpers ---- */

static void test_literals_and_polynomials(void **state)
{
    (void)state;
    char buf[64];
    assert_string_equal(cu_float_lit(1.0f, buf, sizeof buf), "1.0f");
    assert_string_equal(cu_float_lit(0.25f, buf, sizeof buf), "0.25f");
    assert_string_equal(cu_float_lit(1e-6f, buf, sizeof buf), "9.99999997e-07f");
    assert_string_equal(cu_float_lit(-2.0f, buf, sizeof buf), "-2.0f");
    assert_string_equal(cu_float_lit(INFINITY, buf, sizeof buf), "__int_as_float(0x7f800000)");
    float back = strtof(cu_float_lit(0.1f, buf, sizeof buf), NULL);
    assert_true(back == 0.1f); /* 9 digits: every float round-trips */
    cg_poly p = cg_poly_k(0);
    assert_string_equal(cu_poly_expr(p, buf, sizeof buf), "0LL");
    p = cg_poly_dim(ir_dim_batch(197));
    assert_string_equal(cu_poly_expr(p, buf, sizeof buf), "(197LL * B)");
    p = cg_poly_add(p, cg_poly_k(5));
    assert_string_equal(cu_poly_expr(p, buf, sizeof buf), "(5LL + 197LL * B)");
    p = cg_poly_mul(cg_poly_dim(ir_dim_batch(2)), cg_poly_dim(ir_dim_batch(3)));
    assert_string_equal(cu_poly_expr(p, buf, sizeof buf), "(6LL * B * B)");
}

/* ---- every fixture, every precision ---- */

/* The "sm_80: R regs, S bytes spilled, T bytes stack" entries of a kernel name (sm_80, sm_90 and
 * sm_90a's where there is that image), at most 3. */
static int kernel_stats(const char *name, int *regs, int *spill)
{
    int n = 0;
    for (const char *p = strstr(name, "sm_"); p && n < 3; p = strstr(p + 1, "sm_")) {
        int arch, r, s, t;
        char tag[4];
        if (sscanf(p, "sm_%d%3[a:] %d regs, %d bytes spilled, %d bytes stack", &arch, tag, &r, &s, &t) == 5) {
            regs[n] = r;
            spill[n] = s;
            n++;
        }
    }
    return n;
}

static void test_fixtures_compile_for_every_target(void **state)
{
    (void)state;
    assert_true(nfixtures >= 15);
    print_message("%-24s %-5s %7s %8s %8s %7s %10s %10s %10s %8s\n", "fixture", "prec", "kernels", "launches",
                  "max regs", "spills", "sm_80", "sm_90", "ptx", "seconds");
    int spilled = 0;
    if (TU_SANITIZED)
        print_message("(sanitizer build: one exporter per family, ts17)\n");
    for (int i = 0; i < nfixtures; i++) {
        if (TU_SANITIZED && strcmp(fixtures[i].exporter, "ts17") != 0)
            continue;
        char model[4096], rel[1024];
        snprintf(rel, sizeof rel, "tests/models/%.95s", fixtures[i].model);
        tu_path(model, sizeof model, rel);
        for (int pi = 0; pi < 4; pi++) {
            char so[8300], *text;
            snprintf(so, sizeof so, "%.4000s/%.95s.%s.so", tmpdir, fixtures[i].model, precisions[pi]);
            const char *args[] = {model, "--target", "cuda", "--precision", precisions[pi], "-o", so, NULL};
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            int rc = vitc_text(args, &text);
            clock_gettime(CLOCK_MONOTONIC, &t1);
            if (rc != 0)
                fail_msg("%s %s: vitc exited %d:\n%s", fixtures[i].model, precisions[pi], rc, text);
            free(text);
            vitc_model *m;
            if (vitc_model_load(so, &m) != VITC_STATUS_OK)
                fail_msg("%s: %s", so, vitc_last_error());
            assert_string_equal(vitc_model_target(m), "cuda");
            vitc_cuda_details cd;
            assert_int_equal(vitc_model_cuda_details(m, &cd), VITC_STATUS_OK);
            assert_string_equal(cd.precision, precisions[pi]);
            /* sm_80, sm_90, [sm_90a where a GEMM runs on wgmma,] compute_90 */
            int ptx = cd.nimages - 1;
            assert_true(cd.nimages == 3 || cd.nimages == 4);
            assert_string_equal(cd.images[0].target, "sm_80");
            assert_string_equal(cd.images[0].kind, "cubin");
            assert_string_equal(cd.images[1].target, "sm_90");
            assert_string_equal(cd.images[1].kind, "cubin");
            if (cd.nimages == 4) {
                assert_string_equal(cd.images[2].target, "sm_90a");
                assert_string_equal(cd.images[2].kind, "cubin");
            }
            assert_string_equal(cd.images[ptx].target, "compute_90");
            assert_string_equal(cd.images[ptx].kind, "ptx");
            for (int k = 0; k < cd.nimages; k++)
                assert_true(cd.images[k].bytes > 1000);
            assert_true(cd.nlaunches >= cd.nfunctions && cd.nfunctions > 5);
            vitc_model_details d;
            assert_int_equal(vitc_model_get_details(m, &d), VITC_STATUS_OK);
            assert_int_equal(d.nkernels, cd.nfunctions);
            int maxregs = 0, spills = 0;
            for (int k = 0; k < d.nkernels; k++) {
                int regs[3] = {0}, spill[3] = {0}, ncubin = cd.nimages - 1;
                if (kernel_stats(d.kernel_names[k], regs, spill) != ncubin)
                    fail_msg("%s: kernel '%s' has no ptxas report for each of its %d CUBIN targets", so,
                             d.kernel_names[k], ncubin);
                for (int t = 0; t < ncubin; t++) {
                    maxregs = regs[t] > maxregs ? regs[t] : maxregs;
                    spills += spill[t] > 0;
                    if (spill[t] > 0)
                        print_message("SPILL %s: %s\n", fixtures[i].model, d.kernel_names[k]);
                }
            }
            spilled += spills;
            print_message("%-24s %-5s %7d %8d %8d %7d %10llu %10llu %10llu %8.2f\n", fixtures[i].model,
                          precisions[pi], cd.nfunctions, cd.nlaunches, maxregs, spills,
                          (unsigned long long)cd.images[0].bytes, (unsigned long long)cd.images[1].bytes,
                          (unsigned long long)cd.images[ptx].bytes,
                          (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
            vitc_model_free(m);
            if (i == 0 && pi == 2) { /* what `vitc inspect` shows of one of them */
                const char *ia[] = {"inspect", so, NULL};
                rc = vitc_text(ia, &text);
                assert_int_equal(rc, 0);
                if (!strstr(text, "target:     cuda") || !strstr(text, "sm_80 (cubin") || !strstr(text, "sm_90 (cubin") ||
                    !strstr(text, "compute_90 (ptx") || !strstr(text, "precision fp16") || !strstr(text, "vk_gemm") ||
                    !strstr(text, "vk_attn") || !strstr(text, "bytes spilled"))
                    fail_msg("vitc inspect lacks the CUDA targets or kernels:\n%s", text);
                free(text);
            }
            unlink(so);
        }
    }
    if (spilled)
        fail_msg("%d kernel compilations spill registers", spilled);
}

/* Compiles tests/models/face_ln-ts17.onnx for CUDA, batches 1 to batch, into
 * tmpdir/name (its path in so), the command line in args (8 entries, reading
 * the caller's model and so); fails the test when vitc does. */
static void compile_face(const char *batch, const char *name, char model[4096], char so[8300], const char **args)
{
    tu_path(model, 4096, "tests/models/face_ln-ts17.onnx");
    snprintf(so, 8300, "%s/%s", tmpdir, name);
    const char *a[8] = {model, "--target", "cuda", "--batch", batch, "-o", so, NULL};
    memcpy(args, a, sizeof a);
    char *text;
    int rc = vitc_text(args, &text);
    if (rc != 0)
        fail_msg("vitc exited %d:\n%s", rc, text);
    free(text);
}

/* The sm_90a GEMMs in each shape the plan can pick (gemm_tma 128x128 in 3
 * stages with two blocks an SM, 128x128 in 6 stages and 128x256 in 4 with a
 * producer warpgroup and setmaxnreg; gemm_wg 128x128 and 128x256; gemm_pp,
 * two consumer warpgroups of 128 accumulators each, in 4 stages), and the
 * wgmma attention (attention_wg) with the first, fp16 and bf16, compiled by
 * NVRTC for sm_90a: every kernel has ptxas's report for
 * that image, and none spills registers (face_ln at batch 256, every GEMM on
 * the large tile; its K = 243 GEMM runs gemm_wg, rows of A not 16-byte
 * aligned). */
static void test_sm90a_kernels_do_not_spill(void **state)
{
    (void)state;
    static const char *const shapes[][3] = {
        {"VITC_CUDA_GEMM_WAVE=1", "VITC_CUDA_ATTN_WGMMA=1", NULL},
        {"VITC_CUDA_GEMM_WAVE=1", "VITC_CUDA_TMA=128/6/1", "VITC_CUDA_WGMMA_STAGES=5"},
        {"VITC_CUDA_GEMM_WAVE=1", "VITC_CUDA_TMA=256/4/1", "VITC_CUDA_GEMM_LARGE=128x256/2x4/3/64"},
        {"VITC_CUDA_GEMM_WAVE=1", "VITC_CUDA_PINGPONG=4", NULL},
    };
    static const char *const precs[2] = {"bf16", "fp16"};
    char model[4096], so[8300];
    tu_path(model, sizeof model, "tests/models/face_ln-ts17.onnx");
    snprintf(so, sizeof so, "%s/face-sm90a.so", tmpdir);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int pi = 0; pi < 2; pi++) {
            tu_set_knobs(shapes[s], 3, 1);
            const char *args[] = {model, "--target", "cuda", "--batch", "256", "--precision", precs[pi], "-o", so, NULL};
            char *text;
            int rc = vitc_text(args, &text);
            tu_set_knobs(shapes[s], 3, 0);
            if (rc != 0)
                fail_msg("vitc exited %d:\n%s", rc, text);
            free(text);
            vitc_model *m;
            if (vitc_model_load(so, &m) != VITC_STATUS_OK)
                fail_msg("%s: %s", so, vitc_last_error());
            vitc_model_details d;
            assert_int_equal(vitc_model_get_details(m, &d), VITC_STATUS_OK);
            int wg = 0, attn = 0;
            for (int k = 0; k < d.nkernels; k++) {
                const char *n = d.kernel_names[k], *a = strstr(n, "sm_90a: ");
                int regs, spill, stack;
                if (!a || sscanf(a, "sm_90a: %d regs, %d bytes spilled, %d bytes stack", &regs, &spill, &stack) != 3)
                    fail_msg("%s: kernel '%s' has no ptxas report for sm_90a", so, n);
                if (!strstr(n, "wgmma"))
                    continue;
                if (strstr(n, "attention"))
                    attn++;
                else
                    wg++;
                print_message("%-5s %.*s\n", precs[pi], (int)strcspn(n, "["), n);
                print_message("      sm_90a: %d registers, %d bytes spilled, %d bytes stack\n", regs, spill, stack);
                if (spill > 0)
                    fail_msg("%s: kernel '%s' spills on sm_90a", so, n);
            }
            assert_int_equal(wg, 7);            /* face_ln's 7 GEMMs */
            assert_int_equal(attn, s == 0 ? 1 : 0); /* and its attention, with VITC_CUDA_ATTN_WGMMA=1 */
            vitc_model_free(m);
            unlink(so);
        }
}

/* The GEMM tiles a plan picks per batch range: for each GEMM node, ranges
 * from batch 1 to 256 that meet end to end; a launch whose grid splits K
 * (grid z > 1, 64 x 64 tiles) adds its partial sums in its own last block of
 * each tile, on tile counters that one launch before the first split zeroes
 * at every batch a GEMM splits at; the 64 x 64 tile (4 warps) until a wave of large
 * blocks fills the GPU, the large tile (8 warps, more than 48 KiB of shared
 * memory, on mma.sync and on sm_90a's wgmma, within what sm_86 and sm_89 give
 * a block) from there.  face_ln at batch 1 has too few 64 x 64 blocks for 132
 * SMs: some GEMM splits K there. */
static void test_gemm_tile_ranges_cover_every_batch(void **state)
{
    (void)state;
    char model[4096], so[8300];
    const char *args[8];
    compile_face("256", "face256.so", model, so, args);
    void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    assert_non_null(h);
    const vitc_abi_model *a = dlsym(h, VITC_ABI_SYMBOL);
    assert_non_null(a);
    const vitc_cuda_plan *p = a->cuda_plan;
    int chains = 0, splits = 0, large = 0, zeroing = -1, first_split = -1;
    int64_t last_split = 0;
    for (int i = 0; i < p->nlaunches;) {
        const vitc_cuda_launch *l = &p->launches[i];
        if (strncmp(p->functions[l->function], "vk_gemm", 7) == 0 && l->block == 256 && l->shared_bytes == 0) {
            assert_int_equal(zeroing, -1); /* the counters' zeroing, once, up to the last batch any split is at */
            assert_int_equal(l->min_batch, 1);
            zeroing = i++;
            continue;
        }
        if (strncmp(p->functions[l->function], "vk_gemm", 7) != 0 ||
            (l->block != 128 && l->block != 256 && l->block != 288)) {
            i++;
            continue;
        }
        /* one GEMM node's chain of ranges */
        assert_int_equal(l->min_batch, 1);
        chains++;
        int64_t next = 1;
        char line[1024];
        size_t len = (size_t)snprintf(line, sizeof line, "%s:", p->functions[l->function]);
        while (next <= 256) {
            assert_true(i < p->nlaunches);
            l = &p->launches[i];
            assert_int_equal(l->min_batch, next);
            int64_t z = vitc_cuda_poly_at(&l->grid[2], l->min_batch);
            int big = l->shared_bytes > 48 * 1024;
            /* the large tile on sm_90a is gemm_tma (bf16, rows of A in whole 16 bytes): 288 threads
             * (two consumer warpgroups and a producer warp; gemm_tc's 8 warps and a loading one
             * elsewhere), A's and Wt's tensor maps; else 256 */
            assert_true(big ? l->block == 256 || l->block == 288 : l->block == 128);
            if (l->block == 288) {
                assert_int_equal(l->ntmaps, 2);
                assert_int_equal(l->tmaps[0].arg, 0);
                assert_int_equal(l->tmaps[1].arg, 1);
                assert_int_equal(l->tmaps[0].box_rows, 128);
                assert_int_equal(l->tmaps[0].box_cols * 2, 128);
                assert_int_equal(l->tmaps[0].row_bytes % 16, 0);
                assert_int_equal(vitc_cuda_poly_at(&l->tmaps[0].rows, 256) % 256, 0); /* M = 256 x tokens */
            } else {
                assert_int_equal(l->ntmaps, 0);
            }
            /* the large tile on wgmma (bf16: sm_90a's image) has shared memory of its own; both sizes
             * within the 99 KiB a block may have on sm_86 and sm_89 */
            if (big)
                assert_true(l->shared_bytes_specific > 48 * 1024);
            else
                assert_int_equal(l->shared_bytes_specific, 0);
            assert_true(l->shared_bytes <= 99 * 1024 && l->shared_bytes_specific <= 99 * 1024);
            if (len < sizeof line)
                len += (size_t)snprintf(line + len, sizeof line - len, " %lld..%lld %s", (long long)l->min_batch,
                                        (long long)l->max_batch, big ? "large" : "64x64");
            if (z > 1) {
                assert_false(big);
                if (first_split < 0)
                    first_split = i;
                last_split = l->max_batch > last_split ? l->max_batch : last_split;
                if (len < sizeof line)
                    len += (size_t)snprintf(line + len, sizeof line - len, " split %lld", (long long)z);
                splits++;
            }
            large += big;
            next = l->max_batch + 1;
            i++;
        }
        assert_int_equal(next, 257);
        print_message("%s\n", line);
    }
    assert_true(chains > 0);
    assert_true(splits > 0);
    assert_true(large > 0);
    assert_true(zeroing >= 0 && zeroing < first_split);
    assert_int_equal(p->launches[zeroing].max_batch, last_split);
    /* the plan as the C API gives it (vitc_model_cuda_launch; `vitc inspect --json`'s cuda.plan):
     * launch by launch the same kernel, batches, block and shared memory */
    vitc_model *m;
    if (vitc_model_load(so, &m) != VITC_STATUS_OK)
        fail_msg("%s: %s", so, vitc_last_error());
    vitc_cuda_details cd;
    assert_int_equal(vitc_model_cuda_details(m, &cd), VITC_STATUS_OK);
    assert_int_equal(cd.nlaunches, p->nlaunches);
    for (int i = 0; i < p->nlaunches; i++) {
        vitc_cuda_launch_info li;
        const vitc_cuda_launch *l = &p->launches[i];
        assert_int_equal(vitc_model_cuda_launch(m, i, &li), VITC_STATUS_OK);
        assert_int_equal(li.function, l->function);
        assert_int_equal(li.min_batch, l->min_batch);
        assert_int_equal(li.max_batch, l->max_batch);
        assert_int_equal(li.block, l->block);
        assert_int_equal(li.shared_bytes, l->shared_bytes);
        assert_int_equal(li.shared_bytes_specific, l->shared_bytes_specific);
    }
    vitc_cuda_launch_info li;
    assert_int_equal(vitc_model_cuda_launch(m, p->nlaunches, &li), VITC_STATUS_INVALID_ARGUMENT);
    assert_int_equal(vitc_model_cuda_launch(m, -1, &li), VITC_STATUS_INVALID_ARGUMENT);
    vitc_model_free(m);
    dlclose(h);
    unlink(so);
}

/* ---- what a user meets ---- */

static void test_unsupported_nodes_all_listed(void **state)
{
    (void)state;
    ir_graph *g = tu_graph_new("unsupported.onnx", 18);
    int x = tu_input(g, "x", IR_F32, 2, TU_DIMS(-1, 4));
    int y1 = tu_value(g, "y1", IR_F32), y2 = tu_value(g, "y2", IR_I64);
    tu_node_out(g, IR_OP_EINSUM, "the_einsum", 2, TU_IN(x, x), 1, &y1, 1,
                TU_AT(tu_str(IR_ATTR_EQUATION, "bi,bi->bi")));
    tu_node_out(g, IR_OP_CAST, "the_cast", 1, &x, 1, &y2, 1, TU_AT(tu_int(IR_ATTR_TO, 7)));
    tu_output(g, y1);
    tu_output(g, y2);
    vitc_diag d;
    vitc_diag_init(&d, "unsupported.onnx");
    assert_int_equal(ir_infer_shapes(g, &d), 0);
    char *buf = NULL;
    size_t len = 0;
    d.out = open_memstream(&buf, &len);
    char so[8300];
    snprintf(so, sizeof so, "%s/unsupported.so", tmpdir);
    cg_options opt = {.output = so, .source = "unsupported.onnx", .max_batch = 4, .opt_level = 2};
    int st = cg_compile(&cg_cuda_backend, g, &opt, &d);
    fclose(d.out);
    print_message("%s", buf);
    assert_int_equal(st, VITC_BAD_INPUT);
    assert_non_null(strstr(buf, "unsupported.onnx: node 'the_einsum' (Einsum)"));
    assert_non_null(strstr(buf, "node 'the_cast' (Cast)"));
    assert_non_null(strstr(buf, "not supported by the CUDA backend"));
    assert_int_equal(access(so, F_OK), -1); /* nothing written */
    free(buf);
    ir_graph_free(g);
}

static void test_cli_options_and_no_device(void **state)
{
    (void)state;
    char model[4096], so[8300], cu[8300], in[4096], *text;
    tu_path(model, sizeof model, "tests/models/timm-ts17.onnx");
    tu_path(in, sizeof in, "tests/models/timm.b1.input.npy");
    snprintf(so, sizeof so, "%s/timm.so", tmpdir);
    snprintf(cu, sizeof cu, "%s/timm.cu", tmpdir);

    const char *bad_prec[] = {model, "--target", "cuda", "--precision", "fp8", "-o", so, NULL};
    assert_int_equal(vitc_text(bad_prec, &text), 2);
    assert_non_null(strstr(text, "--precision takes fp32, tf32, fp16 or bf16"));
    free(text);
    const char *cpu_prec[] = {model, "--precision", "fp16", "-o", so, NULL};
    assert_int_equal(vitc_text(cpu_prec, &text), 2);
    assert_non_null(strstr(text, "the CPU backend computes in fp32, bf16 or int8 (--precision fp32|bf16|int8), not 'fp16'"));
    free(text);
    const char *emit_cpu[] = {model, "--target", "cpu", "--emit", "cuda", "-o", cu, NULL};
    assert_int_equal(vitc_text(emit_cpu, &text), 2);
    free(text);
    assert_int_equal(access(so, F_OK), -1);

    /* --emit cuda: the program, readable, nothing compiled */
    const char *emit[] = {model, "--emit", "cuda", "-o", cu, NULL};
    assert_int_equal(vitc_text(emit, &text), 0);
    free(text);
    size_t n = 0;
    FILE *f = fopen(cu, "r");
    assert_non_null(f);
    char *prog = malloc(1 << 22);
    n = fread(prog, 1, (1 << 22) - 1, f);
    prog[n] = 0;
    fclose(f);
    assert_non_null(strstr(prog, "VK_KERNEL(vk_gemm"));
    assert_non_null(strstr(prog, "vk::attention_tc<b16"));
    assert_non_null(strstr(prog, "vitc-program:"));
    assert_null(strstr(prog, "\x7f" "ELF"));
    print_message("--emit cuda: %zu bytes of CUDA C++\n", n);
    free(prog);

    /* a CUDA model where there is no GPU: loads, inspects, refuses to run */
    const char *build[] = {model, "--target", "cuda", "-o", so, NULL};
    assert_int_equal(vitc_text(build, &text), 0);
    free(text);
    char name[256];
    int arch = 0;
    if (vitc_cuda_device(name, sizeof name, &arch) == VITC_STATUS_OK) {
        print_message("a CUDA device is present (%s, sm_%d): the no-device path is not exercised here\n", name, arch);
        return;
    }
    char why[1024];
    snprintf(why, sizeof why, "%s", vitc_last_error());
    vitc_model *m;
    assert_int_equal(vitc_model_load(so, &m), VITC_STATUS_OK);
    vitc_context *c = NULL;
    assert_int_equal(vitc_context_create(m, 0, &c), VITC_STATUS_NO_DEVICE);
    assert_null(c);
    print_message("vitc_context_create: %s\n", vitc_last_error());
    assert_non_null(strstr(vitc_last_error(), "cannot run this CUDA model"));
    vitc_model_free(m);
    char outdir[8300];
    snprintf(outdir, sizeof outdir, "%s/out", tmpdir);
    mkdir(outdir, 0755);
    const char *run[] = {"run", so, "--input", in, "--output-dir", outdir, NULL};
    assert_int_equal(vitc_text(run, &text), 2);
    print_message("vitc run without a GPU (%s): %s", why, text);
    assert_non_null(strstr(text, "cannot run this CUDA model"));
    free(text);
}

/* Compiles with args while var=val, then returns `vitc inspect so`'s text. */
static char *knob_build(const char *var, const char *val, const char *const *args, const char *so)
{
    char *text;
    setenv(var, val, 1);
    int rc = vitc_text(args, &text);
    unsetenv(var);
    if (rc != 0)
        fail_msg("vitc with %s=%s exited %d:\n%s", var, val, rc, text);
    free(text);
    const char *insp[] = {"inspect", so, NULL};
    rc = vitc_text(insp, &text);
    assert_int_equal(rc, 0);
    return text;
}

/* The knobs of bench/kit/tile-sweep: a tile the GEMM cannot run is refused
 * (exit 2, naming the variable), one it can is compiled in; the wgmma GEMM
 * compiles for sm_90a unless turned off; the ping-pong GEMM has stream-K
 * unless VITC_CUDA_STREAM_K=0, and a grid of it larger than its scratch's
 * bound is refused. */
static void test_gemm_tile_knob(void **state)
{
    (void)state;
    char model[4096], so[8300], *text;
    tu_path(model, sizeof model, "tests/models/face_ln-ts17.onnx");
    snprintf(so, sizeof so, "%s/knob.so", tmpdir);
    const char *args[] = {model, "--target", "cuda", "--batch", "256", "-o", so, NULL};
    setenv("VITC_CUDA_GEMM_LARGE", "128x100/2x4/4/64", 1);
    int rc = vitc_text(args, &text);
    unsetenv("VITC_CUDA_GEMM_LARGE");
    print_message("%s", text);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(text, "VITC_CUDA_GEMM_LARGE='128x100/2x4/4/64' is not a tile"));
    free(text);
    text = knob_build("VITC_CUDA_GEMM_LARGE", "128x256/2x4/3/64", args, so);
    assert_non_null(strstr(text, "mma 128x256 "));
    free(text);
    /* by default the large tile runs on wgmma in an sm_90a image (NVRTC
     * defines __CUDA_ARCH_FEAT_SM90_ALL for sm_90a only, so this compile takes
     * the wgmma body and fails on a bad operand); VITC_CUDA_WGMMA=0 leaves it
     * on mma.sync with no sm_90a image */
    text = knob_build("VITC_CUDA_WGMMA", "", args, so);
    print_message("%s", strstr(text, "gpu code:") ? strstr(text, "gpu code:") : text);
    assert_non_null(strstr(text, "bf16 wgmma 128x128 "));
    assert_non_null(strstr(text, "sm_90a (cubin"));
    free(text);
    text = knob_build("VITC_CUDA_WGMMA", "0", args, so);
    assert_non_null(strstr(text, "bf16 mma 128x128 "));
    assert_null(strstr(text, "wgmma"));
    assert_null(strstr(text, "sm_90a"));
    free(text);
    setenv("VITC_CUDA_GEMM_WAVE", "1", 1); /* the large tile everywhere */
    text = knob_build("VITC_CUDA_PINGPONG", "4", args, so);
    assert_non_null(strstr(text, "bf16 wgmma+tma pingpong 128x128 "));
    assert_non_null(strstr(text, " stream-k"));
    free(text);
    setenv("VITC_CUDA_STREAM_K", "0", 1);
    text = knob_build("VITC_CUDA_PINGPONG", "4", args, so);
    unsetenv("VITC_CUDA_STREAM_K");
    unsetenv("VITC_CUDA_GEMM_WAVE");
    assert_non_null(strstr(text, "bf16 wgmma+tma pingpong 128x128 "));
    assert_null(strstr(text, "stream-k"));
    free(text);
    setenv("VITC_CUDA_PINGPONG", "4", 1);
    setenv("VITC_CUDA_GEMM_WAVE", "1025", 1);
    rc = vitc_text(args, &text);
    unsetenv("VITC_CUDA_PINGPONG");
    unsetenv("VITC_CUDA_GEMM_WAVE");
    print_message("%s", text);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(text, "VITC_CUDA_GEMM_WAVE=1025 with VITC_CUDA_PINGPONG: the ping-pong GEMM runs at most 1024"));
    free(text);
    unlink(so);
}

/* A .so records the knobs that changed its code and were set to other than
 * their defaults (codegen/knobs.def), and `vitc inspect` prints them: none
 * for a plain build, nor for a knob set to its default or one that shapes no
 * code (VITC_NVRTC_CACHE, set by setup); VITC_CUDA_SPLIT_K=0 by name, in the
 * text and in --json. */
static void test_knobs_recorded_in_so(void **state)
{
    (void)state;
    char model[4096], so[8300], *text;
    const char *args[8];
    compile_face("4", "knobs.so", model, so, args);
    const char *insp[] = {"inspect", so, NULL}, *json[] = {"inspect", "--json", so, NULL};
    assert_int_equal(vitc_text(insp, &text), 0);
    if (!strstr(text, "\nknobs:      none\n"))
        fail_msg("a plain build: inspect does not say 'knobs:      none':\n%s", text);
    free(text);
    text = knob_build("VITC_CUDA_WGMMA_STAGES", "3", args, so);
    if (!strstr(text, "\nknobs:      none\n"))
        fail_msg("VITC_CUDA_WGMMA_STAGES=3 (its default): inspect does not say 'knobs:      none':\n%s", text);
    free(text);
    text = knob_build("VITC_CUDA_SPLIT_K", "0", args, so);
    if (!strstr(text, "\nknobs:      VITC_CUDA_SPLIT_K=0\n"))
        fail_msg("VITC_CUDA_SPLIT_K=0: inspect does not say 'knobs:      VITC_CUDA_SPLIT_K=0':\n%s", text);
    free(text);
    assert_int_equal(vitc_text(json, &text), 0);
    if (!strstr(text, "\"knobs\": {\n    \"VITC_CUDA_SPLIT_K\": \"0\"\n  }"))
        fail_msg("VITC_CUDA_SPLIT_K=0: inspect --json has no \"knobs\": {\"VITC_CUDA_SPLIT_K\": \"0\"}:\n%s", text);
    free(text);
    unlink(so);
}

static int setup(void **state)
{
    nfixtures = tu_fixtures(fixtures, 64);
    tu_nvrtc_cache(); /* programs shared by fixtures and builds compile once */
    *state = tu_tmpdir(tmpdir, sizeof tmpdir);
    return *state ? 0 : -1;
}

TU_MAIN(setup, tu_teardown_tmpdir, test_driver_constants_match_cuda_h, test_weight_packing_and_rounding,
        test_literals_and_polynomials, test_fixtures_compile_for_every_target,
        test_gemm_tile_ranges_cover_every_batch, test_sm90a_kernels_do_not_spill, test_gemm_tile_knob,
        test_knobs_recorded_in_so,
        test_unsupported_nodes_all_listed, test_cli_options_and_no_device)

#else

/* Without the CUDA backend, a CUDA request is refused clearly. */
static void test_target_cuda_refused_without_backend(void **state)
{
    (void)state;
    char model[4096], *out, *err;
    tu_path(model, sizeof model, "tests/models/timm-ts17.onnx");
    const char *args[] = {model, "--target", "cuda", "-o", "/tmp/vitc-no-cuda.so", NULL};
    int rc = tu_run_vitc(args, &out, &err);
    print_message("%s", err);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(err, "built without the CUDA backend"));
    free(out), free(err);
}

int main(void)
{
    print_message("the CUDA backend is not built (no NVRTC at configure time): only the refusal is tested, "
                  "and ctest reports the rest skipped\n");
    tu_skipped++; /* the CUDA backend's cases: exit TU_SKIP_RC unless the refusal fails */
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_target_cuda_refused_without_backend)};
    return tu_run_group(tests, NULL, NULL);
}

#endif
