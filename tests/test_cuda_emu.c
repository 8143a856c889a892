/* test_cuda_emu.c: every fixture through the CUDA backend in every
 * precision, run without a GPU: the generated program (--emit cuda) is
 * compiled by the host C++ compiler against tests/cuda_emu.h, which gives
 * the device library's hardware layer (tensor-core MMA fragments, ldmatrix,
 * cp.async, shuffles, rounding) a CPU implementation that follows the PTX
 * ISA, and the launch plan of the compiled .so is executed launch by launch
 * as the runtime would: same grids, same arguments, same workspace offsets.
 * Outputs are checked against the reference interpreter (fp32, double
 * accumulation) at batch 1 and 3 with the bars of the GPU tests:
 * max |out - ref| / max |ref| within the bars of tests/testutil.h (fp32 1e-4,
 * tf32 2e-3, fp16 and bf16 1e-2, the last three with cosine >= 0.9999).
 *
 * What this cannot show: speed, and anything where the hardware departs
 * from the ISA document (that is test_cuda_gpu.c's job on a GPU). */
#include "testutil.h"

#include <vitc/runtime.h>

#include "codegen/backend.h"
#include "frontend/onnx.h"
#include "ir/interp.h"
#include "ir/opview.h"
#include "runtime/abi.h"

#include <dlfcn.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#ifdef VITC_HAVE_CUDA

/* Under AddressSanitizer every vitc this test starts is instrumented and
 * several times slower; the three exporters of a family give the same
 * program, so there one of them (ts17) stands for its family (TU_SANITIZED). */

static tu_fixture fixtures[64];
static int nfixtures;
static char tmpdir[4096];

static const char *const precisions[4] = {"fp32", "tf32", "fp16", "bf16"};

static void run_vitc(const char *const *args, const char *what)
{
    char *out, *err;
    int rc = tu_run_vitc(args, &out, &err);
    if (rc != 0)
        fail_msg("%s: vitc exited %d:\n%s%s", what, rc, out, err);
    free(out), free(err);
}

/* How a model is compiled and emulated: knobs (NAME=VALUE) set while vitc
 * compiles it, the precisions (bits of precisions[]), and whether the
 * emulation takes the kernels' sm_90a bodies (wgmma, TMA, mbarrier) with the
 * plan's shared memory and tensor maps for that image. */
typedef struct {
    const char *knobs[3];
    unsigned precisions;
    int sm90a;
} emu_mode;

/* Default options, every precision: test_cuda_gpu compiles the same programs,
 * and on the fake driver runs them on the emulation libraries built here. */
static const emu_mode MODE_DEFAULT = {{NULL}, 15, 0};
/* fp16 and bf16 with every tensor-core GEMM on the large tile at any batch,
 * run as on an H100 with the sm_90a image: gemm_tma (128 x 128, 3 stages, two
 * blocks an SM) where A's rows are whole 16 bytes, gemm_wg (128 x 128) where
 * they are not; attention with heads of 64 or 128 on attention_wg at any batch. */
static const emu_mode MODE_SM90A = {
    {"VITC_CUDA_GEMM_WAVE=1", "VITC_CUDA_ATTN_WGMMA=1", "VITC_CUDA_ATTN_WIDE_BLOCKS=1"}, 12, 1};
/* The other shapes: gemm_tma 128 x 256 in 4 stages, one block an SM (a
 * producer warpgroup, setmaxnreg) and gemm_wg 128 x 256; gemm_wg 128 x 128
 * everywhere, in 5 stages. */
static const emu_mode MODE_SM90A_WIDE = {
    {"VITC_CUDA_GEMM_WAVE=1", "VITC_CUDA_TMA=256/4/1", "VITC_CUDA_GEMM_LARGE=128x256/2x4/3/64"}, 12, 1};
static const emu_mode MODE_SM90A_WG = {{"VITC_CUDA_GEMM_WAVE=1", "VITC_CUDA_TMA=0", "VITC_CUDA_WGMMA_STAGES=5"}, 12, 1};
/* The persistent ping-pong GEMM (4 stages) where gemm_tma would run: on sm_90a, and in the portable
 * form other GPUs run (gemm_tc's tile over the tiles in turn). */
static const emu_mode MODE_SM90A_PP = {{"VITC_CUDA_GEMM_WAVE=1", "VITC_CUDA_PINGPONG=4"}, 12, 1};
static const emu_mode MODE_PP_PORTABLE = {{"VITC_CUDA_GEMM_WAVE=1", "VITC_CUDA_PINGPONG=4"}, 12, 0};
/* gemm_pp on a grid of 3 blocks: where a GEMM's tiles are not a multiple of 3, its last ones by stream-K
 * (GEMMs of fewer than 3 tiles on gemm_wg's 64 x 64 tile, or split K). */
static const emu_mode MODE_SM90A_PP_SK = {{"VITC_CUDA_GEMM_WAVE=3", "VITC_CUDA_PINGPONG=4"}, 12, 1};

/* The sm_90a GEMM kernels of the program at cu by shape, e.g. "tma
 * 128/3/2 x6, wg 128/3 x1" (gemm_tma's BN/stages/blocks an SM, gemm_wg's
 * BN/stages, gemm_pp's stages and "stream-k" where it has it); "none"
 * without any. */
static void variants(const char *cu, char *out, size_t n)
{
    size_t len;
    char *text = tu_read_file(cu, &len);
    assert_non_null(text);
    enum { MAXV = 8 };
    char shape[MAXV][32];
    int count[MAXV], nv = 0;
    static const char *const kinds[4] = {"vk::gemm_tma<", "vk::gemm_wg<", "vk::gemm_pp<", "vk::attention_wg<"};
    for (int k = 0; k < 4; k++)
        for (const char *q = text; (q = strstr(q, kinds[k])); q++) {
            int bn, a2, a3;
            char s[32];
            if (sscanf(q + strlen(kinds[k]), "%*[^,], %d, %d, %d", &bn, &a2, &a3) < 2 + (k < 3))
                continue;
            if (k == 3)
                snprintf(s, sizeof s, "attention_wg D%d", bn); /* head size */
            else if (k == 0)
                snprintf(s, sizeof s, "tma %d/%d/%d", bn, a2, a3);
            else if (k == 1)
                snprintf(s, sizeof s, "wg %d/%d", bn, a3); /* BN, BKB, stages */
            else { /* stages; its last template argument: stream-K */
                const char *e = strchr(q, '>');
                snprintf(s, sizeof s, "pingpong %d%s", bn, e && e - q > 5 && !strncmp(e - 5, " true", 5) ? " stream-k" : "");
            }
            int i = 0;
            while (i < nv && strcmp(shape[i], s) != 0)
                i++;
            if (i == nv && nv < MAXV) {
                snprintf(shape[nv], sizeof shape[nv], "%s", s);
                count[nv++] = 0;
            }
            if (i < nv)
                count[i]++;
        }
    free(text);
    size_t k = 0;
    out[0] = 0;
    for (int i = 0; i < nv && k < n; i++)
        k += (size_t)snprintf(out + k, n - k, "%s%s x%d", i ? ", " : "", shape[i], count[i]);
    if (!nv)
        snprintf(out, n, "none");
}

/* The ONNX file model compiled for CUDA and emitted as CUDA in each precision
 * of the mode, run on the emulation at batch 1 and 3 (inputs in[b]) against
 * ref[b] within the precision's bars, bf16's raised to bf16_bar where that is
 * larger (twice PyTorch's own bf16 error on the model); one line each (with
 * the sm_90a variants: how many GEMM kernels of each).  The count of
 * precisions that failed. */
static int emulate_model(const char *name, const char *model, const ir_tensor in[2], const ir_tensor ref[2],
                         double bf16_bar, double worst[4], const emu_mode *mode)
{
    int failures = 0;
    for (int pi = 0; pi < 4; pi++) {
        if (!((mode->precisions >> pi) & 1))
            continue;
        char so[8300], cu[8300], emu[8300], var[64] = "";
        snprintf(so, sizeof so, "%.4000s/%.95s.%s.so", tmpdir, name, precisions[pi]);
        snprintf(cu, sizeof cu, "%.4000s/%.95s.%s.cu", tmpdir, name, precisions[pi]);
        const char *a1[] = {model, "--target", "cuda", "--precision", precisions[pi], "-o", so, NULL};
        const char *a2[] = {model, "--emit", "cuda", "--precision", precisions[pi], "-o", cu, NULL};
        tu_set_knobs(mode->knobs, 3, 1);
        run_vitc(a1, so);
        run_vitc(a2, cu);
        tu_set_knobs(mode->knobs, 3, 0);
        tu_emu_build_as(cu, mode->sm90a, emu, sizeof emu);
        if (mode->sm90a)
            variants(cu, var, sizeof var);
        double e[2], c[2];
        int nl = 0;
        for (int b = 0; b < 2; b++) {
            ir_tensor out;
            tu_emulate(so, emu, b ? 3 : 1, &in[b], 1, &out, 1, &nl);
            assert_int_equal(out.rank, ref[b].rank);
            for (int k = 0; k < out.rank; k++)
                assert_int_equal(out.dims[k], ref[b].dims[k]);
            e[b] = ir_rel_error(&out, &ref[b]);
            c[b] = tu_cosine(&out, &ref[b]);
            ir_tensor_free(&out);
        }
        int ok = tu_precision_ok(pi, e, c, worst);
        int raised = pi == 3 && bf16_bar > tu_precision_bar(pi);
        if (raised)
            ok = e[0] <= bf16_bar && e[1] <= bf16_bar && c[0] >= TU_BAR_COSINE && c[1] >= TU_BAR_COSINE;
        failures += !ok;
        print_message("%-24s %-5s %11.3g %11.3g %9.6f %9.6f %8d %s%s%s", name, precisions[pi], e[0], e[1], c[0], c[1],
                      nl, ok ? "ok" : "FAIL", *var ? "  sm_90a GEMMs: " : "", var);
        if (raised)
            print_message(" (bar %.3g: twice PyTorch's own bf16 error)", bf16_bar);
        print_message("\n");
        unlink(so);
        unlink(cu);
    }
    return failures;
}

static void print_header(const char *what)
{
    print_message("%-24s %-5s %11s %11s %9s %9s %8s\n", what, "prec", "b1 rel err", "b3 rel err", "b1 cos", "b3 cos",
                  "launches");
}

/* Every fixture in the mode, against the interpreter's outputs; only the
 * ts17 export of each family where ts17_only (the three exporters of a family
 * give the same program). */
static void fixtures_emulated(const emu_mode *mode, int ts17_only)
{
    assert_true(nfixtures >= 15);
    print_header("fixture");
    int failures = 0;
    double worst[4] = {0};
    if (ts17_only)
        print_message("(one exporter per family, ts17)\n");
    for (int i = 0; i < nfixtures; i++) {
        const tu_fixture *fx = &fixtures[i];
        if (ts17_only && strcmp(fx->exporter, "ts17") != 0)
            continue;
        char model[4096];
        ir_tensor in[2], ref[2];
        tu_fixture_case(fx, model, sizeof model, in, ref);
        failures += emulate_model(fx->model, model, in, ref, 0, worst, mode);
        for (int b = 0; b < 2; b++)
            ir_tensor_free(&in[b]), ir_tensor_free(&ref[b]);
    }
    tu_precision_report(worst, failures);
}

/* Under AddressSanitizer, one exporter per family (TU_SANITIZED). */
static void test_fixtures_emulated(void **state)
{
    (void)state;
    fixtures_emulated(&MODE_DEFAULT, TU_SANITIZED);
}

/* The zoo's families whose ops the fixtures do not have, against PyTorch's
 * outputs: rotary attention (interleaved, rotate-half with register tokens,
 * tables per head), gated MLPs (SwiGLU with separate projections), a
 * LayerNorm inside the MLP, windowed attention (Swin: shifted windows, one
 * bias row per window, patch merging; and at a size that pads its
 * activations to whole windows, from tests/padded), an attention-pool head
 * whose single query is sequence first (SigLIP).  Their bf16 error is held to
 * twice PyTorch's own in bf16 (MODEL.b*.bf16-output.npy from gen_zoo.py) where
 * that is above the fixed bar: a gated MLP multiplies two rounded projections. */
static void zoo_emulated(const emu_mode *mode)
{
    static const char *const zoo[][3] = { /* folder of tests/, export, model */
        {"zoo", "timm_eva02-dynamo.onnx", "timm_eva02"},
        {"zoo", "hf_dinov3_sdpa-dynamo.onnx", "hf_dinov3_sdpa"},
        {"zoo", "timm_rope_mixed-dynamo.onnx", "timm_rope_mixed"},
        {"zoo", "timm_swin-dynamo.onnx", "timm_swin"},
        {"zoo", "hf_siglip-dynamo.onnx", "hf_siglip"},
        {"padded", "timm_swin_pad36-ts17.onnx", "timm_swin_pad36"},
    };
    print_header("zoo export");
    int failures = 0;
    double worst[4] = {0};
    for (size_t i = 0; i < sizeof zoo / sizeof zoo[0]; i++) {
        char model[4096], rel[512];
        ir_tensor in[2], ref[2];
        snprintf(rel, sizeof rel, "tests/%s/%s", zoo[i][0], zoo[i][1]);
        tu_path(model, sizeof model, rel);
        double pt = 0;
        for (int b = 0; b < 2; b++) {
            ir_tensor pt_bf16;
            snprintf(rel, sizeof rel, "tests/%s/%s.b%d.input.npy", zoo[i][0], zoo[i][2], b ? 3 : 1);
            tu_read_npy(rel, &in[b]);
            snprintf(rel, sizeof rel, "tests/%s/%s.b%d.output.npy", zoo[i][0], zoo[i][2], b ? 3 : 1);
            tu_read_npy(rel, &ref[b]);
            snprintf(rel, sizeof rel, "tests/%s/%s.b%d.bf16-output.npy", zoo[i][0], zoo[i][2], b ? 3 : 1);
            tu_read_npy(rel, &pt_bf16);
            double e = ir_rel_error(&pt_bf16, &ref[b]);
            pt = e > pt ? e : pt;
            ir_tensor_free(&pt_bf16);
        }
        print_message("%-24s PyTorch's own bf16 error %.3g\n", zoo[i][2], pt);
        failures += emulate_model(zoo[i][2], model, in, ref, 2 * pt, worst, mode);
        for (int b = 0; b < 2; b++)
            ir_tensor_free(&in[b]), ir_tensor_free(&ref[b]);
    }
    tu_precision_report(worst, failures);
}

static void test_zoo_families_emulated(void **state)
{
    (void)state;
    zoo_emulated(&MODE_DEFAULT);
}

/* `vitc inspect` of the fixture model compiled for CUDA in bf16 with knob (NAME=VALUE, or NULL): how many
 * kernels' labels say "+residual (fp32 out)" and how many only "+residual"; the workspace's bytes. */
static int64_t residual_plan(const char *model, const char *knob, int *wide, int *narrow)
{
    char so[8300];
    snprintf(so, sizeof so, "%.4000s/residual.so", tmpdir);
    const char *a1[] = {model, "--target", "cuda", "--precision", "bf16", "-o", so, NULL};
    const char *const knobs[1] = {knob};
    tu_set_knobs(knobs, 1, 1);
    run_vitc(a1, so);
    tu_set_knobs(knobs, 1, 0);
    const char *a2[] = {"inspect", so, NULL};
    char *out, *err;
    assert_int_equal(tu_run_vitc(a2, &out, &err), 0);
    *wide = *narrow = 0;
    for (const char *q = out; (q = strstr(q, "+residual")); q++) {
        int fp32 = strncmp(q, "+residual (fp32 out)", 20) == 0;
        *wide += fp32;
        *narrow += !fp32;
    }
    const char *w = strstr(out, "workspace:");
    long long bytes = -1;
    assert_non_null(w);
    assert_non_null(strchr(w, '('));
    assert_int_equal(sscanf(strchr(w, '(') + 1, "%lld bytes", &bytes), 1);
    free(out), free(err);
    unlink(so);
    return bytes;
}

/* VITC_CUDA_WIDE_RESIDUAL=0 keeps the residual stream in the precision's 16-bit type: every residual GEMM of
 * a ViT then writes 16-bit (by default each writes fp32), the workspace shrinks, and every fixture (and,
 * outside a sanitizer build, zoo model) still meets fp16's and bf16's bars on the emulation. */
static void test_narrow_residual_emulated(void **state)
{
    (void)state;
    static const emu_mode narrow = {{"VITC_CUDA_WIDE_RESIDUAL=0"}, 12, 0};
    char model[4096];
    tu_path(model, sizeof model, "tests/models/timm-ts17.onnx");
    int w0, n0, w1, n1;
    int64_t ws0 = residual_plan(model, NULL, &w0, &n0), ws1 = residual_plan(model, narrow.knobs[0], &w1, &n1);
    print_message("timm-ts17 bf16: residual GEMMs fp32 out %d, 16-bit %d, workspace %lld bytes; with %s: %d, %d, "
                  "%lld bytes\n", w0, n0, (long long)ws0, narrow.knobs[0], w1, n1, (long long)ws1);
    assert_true(w0 >= 2 && n0 == 0);
    assert_true(w1 == 0 && n1 == w0);
    assert_true(ws1 < ws0);
    fixtures_emulated(&narrow, 1);
    if (!TU_SANITIZED) /* the zoo's families, bf16 held to twice PyTorch's own bf16 error where that is larger */
        zoo_emulated(&narrow);
}

/* The sm_90a kernels (gemm_tma: TMA, mbarrier ring, warp roles; gemm_wg:
 * wgmma from cp.async stages) on every fixture (one exporter per family)
 * and zoo model in fp16 and bf16, as an H100 runs them (their other shapes:
 * test_gemm_shapes_sm90a_emulated).  Under a sanitizer (every vitc it
 * starts several times slower) on the fixtures only. */
static void test_sm90a_emulated(void **state)
{
    (void)state;
    print_message("sm_90a: gemm_tma 128x128 (3 stages, 2 blocks an SM) and gemm_wg 128x128\n");
    fixtures_emulated(&MODE_SM90A, 1);
    if (TU_SANITIZED) {
        print_message("(sanitizer build: the zoo is run in the normal build)\n");
        return;
    }
    zoo_emulated(&MODE_SM90A);
}

/* The sm_90a GEMMs' other shapes and forms on the fixtures (one exporter
 * per family); under a sanitizer, left to the normal build. */
static void test_gemm_shapes_sm90a_emulated(void **state)
{
    (void)state;
    if (TU_SANITIZED) {
        print_message("(sanitizer build: the other shapes are run in the normal build)\n");
        return;
    }
    print_message("sm_90a: gemm_tma 128x256 (4 stages, a producer warpgroup) and gemm_wg 128x256\n");
    fixtures_emulated(&MODE_SM90A_WIDE, 1);
    print_message("sm_90a: gemm_wg 128x128 in 5 stages everywhere\n");
    fixtures_emulated(&MODE_SM90A_WG, 1);
    print_message("sm_90a: gemm_pp (persistent, ping-pong, 4 stages) and gemm_wg 128x128\n");
    fixtures_emulated(&MODE_SM90A_PP, 1);
    print_message("gemm_pp's portable form (gemm_tc's tile over the tiles in turn)\n");
    fixtures_emulated(&MODE_PP_PORTABLE, 1);
    print_message("sm_90a: gemm_pp on 3 blocks, the last tiles of a GEMM by stream-K\n");
    fixtures_emulated(&MODE_SM90A_PP_SK, 1);
}

/* ---- hand-built graphs: the ops the fixtures do not reach ---- */

/* Compiles g with the CUDA backend in each precision of mask (bit i:
 * precisions[i]) and runs it on the emulation at batch 1 and 3 against the
 * interpreter within the bars of tests/testutil.h (tu_precision_bar: fp32
 * 1e-4, tf32 2e-3, fp16 and bf16 1e-2, those with cosine >= 0.9999); bool
 * outputs exactly. */
/* g compiled in this process for CUDA (max batch 3) in precision prec: the .so at so and, --emit cuda, the
 * program at cu. */
static void compile_cuda(ir_graph *g, const char *what, const char *prec, const char *so, const char *cu)
{
    vitc_diag d;
    vitc_diag_init(&d, what);
    cg_options opt = {.output = so, .source = what, .max_batch = 3, .opt_level = 2, .precision = prec};
    if (cg_compile(&cg_cuda_backend, g, &opt, &d) != VITC_OK)
        fail_msg("%s (%s): the CUDA backend failed (status %d)", what, prec, d.status);
    opt.output = cu;
    opt.emit_source = 1;
    if (cg_compile(&cg_cuda_backend, g, &opt, &d) != VITC_OK)
        fail_msg("%s (%s): --emit cuda failed", what, prec);
}

/* Fails unless every kernel of the CUDA model at so has ptxas's report for the sm_90a image and none of them
 * spills registers there. */
static void no_sm90a_spills(const char *so)
{
    vitc_model *m;
    if (vitc_model_load(so, &m) != VITC_STATUS_OK)
        fail_msg("%s: %s", so, vitc_last_error());
    vitc_model_details d;
    assert_int_equal(vitc_model_get_details(m, &d), VITC_STATUS_OK);
    for (int k = 0; k < d.nkernels; k++) {
        const char *n = d.kernel_names[k], *a = strstr(n, "sm_90a: ");
        int regs, spill;
        if (!a || sscanf(a, "sm_90a: %d regs, %d bytes spilled", &regs, &spill) != 2)
            fail_msg("%s: kernel '%s' has no ptxas report for sm_90a", so, n);
        if (spill > 0)
            fail_msg("%s: kernel '%s' spills on sm_90a", so, n);
    }
    vitc_model_free(m);
}

static void check_graph_as(const char *what, ir_graph *g, unsigned mask, int sm90a)
{
    vitc_diag d;
    vitc_diag_init(&d, what);
    tu_check_graph(g, what);
    enum { MAXIO = 32 };
    ir_tensor in[2][MAXIO], ref[2][MAXIO];
    memset(ref, 0, sizeof ref);
    for (int b = 0; b < 2; b++) {
        tu_random_inputs(g, b ? 3 : 1, in[b]);
        if (ir_interpret(g, in[b], ref[b], NULL, NULL, &d))
            fail_msg("%s: the interpreter failed", what);
    }
    for (int pi = 0; pi < 4; pi++) {
        if (!((mask >> pi) & 1) || (getenv("VITC_ONLY") && !strstr(what, getenv("VITC_ONLY"))))
            continue;
        char so[8300], cu[8300], emu[8300];
        snprintf(so, sizeof so, "%s/%s.%s.so", tmpdir, what, precisions[pi]);
        snprintf(cu, sizeof cu, "%s/%s.%s.cu", tmpdir, what, precisions[pi]);
        compile_cuda(g, what, precisions[pi], so, cu);
        tu_emu_build_as(cu, sm90a, emu, sizeof emu);
        char line[2048];
        size_t ll = (size_t)snprintf(line, sizeof line, "%-12s %-5s", what, precisions[pi]);
        double tol = tu_precision_bar(pi);
        for (int b = 0; b < 2; b++) {
            ir_tensor out[MAXIO];
            int nl;
            tu_emulate(so, emu, b ? 3 : 1, in[b], g->ninputs, out, g->noutputs, &nl);
            for (int o = 0; o < g->noutputs; o++) {
                const char *name = g->values[g->outputs[o]].name;
                if (out[o].dtype == IR_BOOL) {
                    int64_t bad = 0;
                    for (int64_t k = 0; k < ir_tensor_numel(&out[o]); k++)
                        bad += ir_tensor_get(&out[o], k) != ir_tensor_get(&ref[b][o], k);
                    if (bad)
                        fail_msg("%s (%s) batch %d: %lld of '%s' wrong", what, precisions[pi], b ? 3 : 1,
                                 (long long)bad, name);
                    ir_tensor_free(&out[o]);
                    continue;
                }
                double e = ir_rel_error(&out[o], &ref[b][o]), c = tu_cosine(&out[o], &ref[b][o]);
                if (ll < sizeof line)
                    ll += (size_t)snprintf(line + ll, sizeof line - ll, " %s:%.2g", name, e);
                if (!(e <= tol) || (pi > 0 && !(c >= TU_BAR_COSINE)))
                    fail_msg("%s (%s) batch %d: '%s' error %g, cosine %.6f", what, precisions[pi], b ? 3 : 1, name, e,
                             c);
                ir_tensor_free(&out[o]);
            }
        }
        print_message("%s\n", line);
        if (sm90a)
            no_sm90a_spills(so);
        if (!getenv("VITC_KEEP_TMP"))
            unlink(so), unlink(cu);
    }
    for (int b = 0; b < 2; b++) {
        for (int i = 0; i < g->ninputs; i++)
            ir_tensor_free(&in[b][i]);
        for (int o = 0; o < g->noutputs; o++)
            ir_tensor_free(&ref[b][o]);
    }
    ir_graph_free(g);
}
static void check_graph(const char *what, ir_graph *g, unsigned mask) { check_graph_as(what, g, mask, 0); }

enum { FP32 = 1, TF32 = 2, FP16 = 4, BF16 = 8, ALL = 15 };

static void test_ops_emulated(void **state)
{
    (void)state;
    check_graph("conv", tu_graph_conv(), FP32 | FP16);

    ir_graph *g = tu_graph_reduce(); /* and LayerNorm over two axes and over 1100 */
    int x = g->inputs[0];
    int sc = tu_const_f32(g, "s", 2, TU_DIMS(5, 6), NULL), bb = tu_const_f32(g, "bb", 2, TU_DIMS(5, 6), NULL);
    tu_output(g, tu_node(g, IR_OP_LAYERNORM, NULL, IR_F32, 3, TU_IN(x, sc, bb), 2, TU_AT(tu_int(IR_ATTR_AXIS, 1), tu_float(IR_ATTR_EPSILON, 1e-3f))));
    int xl = tu_input(g, "xl", IR_F32, 3, TU_DIMS(-1, 2, 1100));
    int sl = tu_const_f32(g, "sl", 1, TU_DIMS(1100), NULL);
    tu_output(g, tu_node(g, IR_OP_LAYERNORM, NULL, IR_F32, 2, TU_IN(xl, sl), 0, NULL));
    check_graph("reduce-norm", g, FP32 | FP16);

    g = tu_graph_elementwise(); /* and comparisons, Where and boolean logic */
    x = g->inputs[0];
    int y = g->inputs[1];
    int zero = tu_scalar(g, "zero", 0);
    int c = tu_node(g, IR_OP_GREATER, NULL, IR_BOOL, 2, TU_IN(x, zero), 0, NULL);
    tu_output(g, tu_node(g, IR_OP_WHERE, NULL, IR_F32, 3, TU_IN(c, x, tu_node(g, IR_OP_NEG, NULL, IR_F32, 1, TU_IN(x), 0, NULL)), 0, NULL));
    int lt = tu_node(g, IR_OP_LESS, NULL, IR_BOOL, 2, TU_IN(x, y), 0, NULL);
    tu_output(g, tu_node(g, IR_OP_AND, NULL, IR_BOOL, 2, TU_IN(c, tu_node(g, IR_OP_NOT, NULL, IR_BOOL, 1, TU_IN(lt), 0, NULL)), 0, NULL));
    tu_output(g, tu_node(g, IR_OP_CAST, NULL, IR_F32, 1, TU_IN(tu_node(g, IR_OP_OR, NULL, IR_BOOL, 2, TU_IN(c, lt), 0, NULL)), 1,
                TU_AT(tu_int(IR_ATTR_TO, 1))));
    check_graph("elementwise", g, FP32);

    check_graph("data", tu_graph_data(), FP32 | FP16);

    g = tu_graph_matmul(); /* and Gemm with transA, which the CPU backend does not take */
    int xt = tu_input(g, "xt", IR_F32, 2, TU_DIMS(6, 3)), bt = tu_input(g, "bt", IR_F32, 2, TU_DIMS(6, 5));
    int yt = tu_input(g, "yt", IR_F32, 2, TU_DIMS(3, 1));
    tu_output(g, tu_node(g, IR_OP_GEMM, NULL, IR_F32, 3, TU_IN(xt, bt, yt), 2,
                         TU_AT(tu_int(IR_ATTR_TRANS_A, 1), tu_float(IR_ATTR_BETA, -1.0f))));
    check_graph("matmul", g, FP32 | FP16);

    check_graph("bn-fused", tu_graph_fused(), ALL);

    /* a K long enough to split (2048: 16 blocks share each 64 x 64 tile at
     * batch 1 and 3), an odd N, and every epilogue (bias, GELU, residual) in
     * the last block of a tile, which adds the partial sums; a second split
     * GEMM after it on the same tile counters, which the first leaves at 0 */
    g = tu_graph_new("splitk.onnx", 18);
    int xs = tu_input(g, "xs", IR_F32, 3, TU_DIMS(-1, 7, 2048)), rs = tu_input(g, "rs", IR_F32, 3, TU_DIMS(-1, 7, 41));
    int ws = tu_const_f32(g, "ws", 2, TU_DIMS(2048, 41), NULL), bs = tu_const_f32(g, "bs", 1, TU_DIMS(41), NULL);
    tu_output(g, tu_node(g, IR_OP_LINEAR, NULL, IR_F32, 4, TU_IN(xs, ws, bs, rs), 1,
                         TU_AT(tu_int(IR_ATTR_ACTIVATION, IR_ACT_GELU_ERF))));
    int ws2 = tu_const_f32(g, "ws2", 2, TU_DIMS(2048, 30), NULL);
    tu_output(g, tu_node(g, IR_OP_LINEAR, NULL, IR_F32, 2, TU_IN(xs, ws2), 0, NULL));
    check_graph("split-k", g, TF32 | FP16 | BF16);

    /* attention whose keys do not fit shared memory at once: 300 tokens of head size 64 go through in
     * chunks of 256 keys (the second with one group of 64 in use, three past N), in both qkv layouts;
     * 64 query rows a block at batch 1 and, the threshold lowered to 10 blocks of 64 rows, 128 at
     * batch 3 */
    setenv("VITC_CUDA_ATTN_WIDE_BLOCKS", "10", 1);
    g = tu_graph_new("attn-chunks.onnx", 18);
    int qa = tu_input(g, "qa", IR_F32, 3, TU_DIMS(-1, 300, 192));
    tu_output(g, tu_node(g, IR_OP_ATTENTION, NULL, IR_F32, 1, TU_IN(qa), 3,
                         TU_AT(tu_int(IR_ATTR_HEADS, 1), tu_int(IR_ATTR_HEAD_SIZE, 64), tu_float(IR_ATTR_SCALE, 0.125f))));
    tu_output(g, tu_node(g, IR_OP_ATTENTION, NULL, IR_F32, 1, TU_IN(qa), 4,
                         TU_AT(tu_int(IR_ATTR_HEADS, 1), tu_int(IR_ATTR_HEAD_SIZE, 64), tu_int(IR_ATTR_QKV_LAYOUT, 1),
                               tu_float(IR_ATTR_SCALE, 0.125f))));
    check_graph("attn-chunks", g, FP16 | BF16);
    unsetenv("VITC_CUDA_ATTN_WIDE_BLOCKS");
}

/* How many kernels of the CUDA model at so have label text in their name. */
static int kernels_with(const char *so, const char *text)
{
    vitc_model *m;
    if (vitc_model_load(so, &m) != VITC_STATUS_OK)
        fail_msg("%s: %s", so, vitc_last_error());
    vitc_model_details d;
    assert_int_equal(vitc_model_get_details(m, &d), VITC_STATUS_OK);
    int count = 0;
    for (int k = 0; k < d.nkernels; k++)
        count += strstr(d.kernel_names[k], text) != NULL;
    vitc_model_free(m);
    return count;
}

/* x + off (rows whose mean, near 3, is several times their spread) through
 * a LayerNorm read by a Linear with GELU and by a MatMul, and an RMSNorm read
 * by a Gemm (transB, alpha, beta) through a Reshape, on C channels; a
 * LayerNorm of x that is an output is not folded (x without the offset: in
 * bf16, rounding x + off to 8 bits costs a plain LayerNorm its bar). */
static ir_graph *norm_gemm_graph(int64_t C)
{
    ir_graph *g = tu_graph_new("norm-gemm.onnx", 18);
    int x = tu_input(g, "x", IR_F32, 3, TU_DIMS(-1, 7, C));
    float *o = malloc(sizeof(float) * (size_t)C);
    assert_non_null(o);
    for (int64_t i = 0; i < C; i++)
        o[i] = 3.0f + 0.01f * (float)(i % 17);
    int xo = tu_node(g, IR_OP_ADD, NULL, IR_F32, 2, TU_IN(x, tu_const_f32(g, "off", 1, TU_DIMS(C), o)), 0, NULL);
    free(o);
    int s = tu_const_f32(g, "s", 1, TU_DIMS(C), NULL), b = tu_const_f32(g, "b", 1, TU_DIMS(C), NULL);
    int h = tu_node(g, IR_OP_LAYERNORM, NULL, IR_F32, 3, TU_IN(xo, s, b), 2,
                    TU_AT(tu_int(IR_ATTR_AXIS, -1), tu_float(IR_ATTR_EPSILON, 1e-5f)));
    int w1 = tu_const_f32(g, "w1", 2, TU_DIMS(C, 40), NULL), b1 = tu_const_f32(g, "b1", 1, TU_DIMS(40), NULL);
    tu_output(g, tu_node(g, IR_OP_LINEAR, NULL, IR_F32, 3, TU_IN(h, w1, b1), 1,
                         TU_AT(tu_int(IR_ATTR_ACTIVATION, IR_ACT_GELU_ERF))));
    tu_output(g, tu_node(g, IR_OP_MATMUL, NULL, IR_F32, 2, TU_IN(h, tu_const_f32(g, "w2", 2, TU_DIMS(C, 24), NULL)),
                         0, NULL));
    int hr = tu_node(g, IR_OP_RMS_NORM, NULL, IR_F32, 2, TU_IN(xo, tu_const_f32(g, "sr", 1, TU_DIMS(C), NULL)), 1,
                     TU_AT(tu_float(IR_ATTR_EPSILON, 1e-6f)));
    int h2 = tu_node(g, IR_OP_RESHAPE, NULL, IR_F32, 2, TU_IN(hr, tu_const_i64(g, "r2", 1, TU_DIMS(2), TU_DIMS(-1, C))),
                     0, NULL);
    int w3 = tu_const_f32(g, "w3", 2, TU_DIMS(33, C), NULL), b3 = tu_const_f32(g, "b3", 1, TU_DIMS(33), NULL);
    tu_output(g, tu_node(g, IR_OP_GEMM, NULL, IR_F32, 3, TU_IN(h2, w3, b3), 3,
                         TU_AT(tu_int(IR_ATTR_TRANS_B, 1), tu_float(IR_ATTR_ALPHA, 0.5f),
                               tu_float(IR_ATTR_BETA, 2.0f))));
    tu_output(g, tu_node(g, IR_OP_LAYERNORM, NULL, IR_F32, 2, TU_IN(x, s), 0, NULL));
    tu_check_graph(g, "norm-gemm");
    return g;
}

/* A LayerNorm or RMSNorm whose output only GEMMs read is folded into them
 * (cu_norm.c): the norm's kernel writes the rows' statistics and the GEMMs
 * read its input; in fp32, and in fp16 and bf16 where that input is 16-bit
 * (here: no residual stream), not in tf32 or with VITC_CUDA_LN_FOLD=0.  On
 * every GEMM of the emulation: the SIMT and mma.sync ones, gemm_tma, gemm_wg
 * and the ping-pong GEMM on sm_90a. */
static void test_norm_folded_emulated(void **state)
{
    (void)state;
    static const char *const prec[4] = {"fp32", "tf32", "bf16", "bf16"};
    static const int want[4] = {2, 0, 2, 0}; /* kernels labelled +layernorm */
    for (int i = 0; i < 4; i++) {
        char so[8300], cu[8300];
        snprintf(so, sizeof so, "%s/norm-gemm.%d.so", tmpdir, i);
        snprintf(cu, sizeof cu, "%s/norm-gemm.%d.cu", tmpdir, i);
        if (i == 3)
            setenv("VITC_CUDA_LN_FOLD", "0", 1);
        ir_graph *g = norm_gemm_graph(96);
        compile_cuda(g, "norm-gemm", prec[i], so, cu);
        ir_graph_free(g);
        unsetenv("VITC_CUDA_LN_FOLD");
        int ln = kernels_with(so, "+layernorm"), rms = kernels_with(so, "+rmsnorm");
        int stats = kernels_with(so, "statistics (folded");
        print_message("%s%s: GEMMs +layernorm %d, +rmsnorm %d; norms as statistics %d\n", prec[i],
                      i == 3 ? " VITC_CUDA_LN_FOLD=0" : "", ln, rms, stats);
        assert_int_equal(ln, want[i]);
        assert_int_equal(rms, want[i] / 2);
        assert_int_equal(stats, want[i]);
        unlink(so), unlink(cu);
    }
    check_graph("norm-gemm", norm_gemm_graph(96), ALL);
    check_graph("norm-gemm-big", norm_gemm_graph(1100), FP32 | FP16); /* layernorm_big's statistics */
    static const char *const knobs[3][2] = {{"VITC_CUDA_GEMM_WAVE", "1"}, {"VITC_CUDA_TMA", "0"},
                                            {"VITC_CUDA_PINGPONG", "4"}};
    for (int k = 0; k < 3; k++) { /* gemm_tma; gemm_wg; gemm_pp */
        setenv("VITC_CUDA_GEMM_WAVE", "1", 1);
        if (k > 0)
            setenv(knobs[k][0], knobs[k][1], 1);
        print_message("sm_90a, %s=%s\n", knobs[k][0], knobs[k][1]);
        check_graph_as("norm-gemm", norm_gemm_graph(128), FP16 | BF16, 1);
        unsetenv(knobs[k][0]);
    }
    unsetenv("VITC_CUDA_GEMM_WAVE");
}

/* A rotary table for pairing (ir_rope_pairing) as models build it, [2, R, D], or [2, heads, R, D] with one per
 * head where heads > 0: row t rotates each pair of elements (a, b = partner of a, a the lower) by the angle
 * (t + 1) * 10000^(-2i/D) of pair i (head h's by (1 + h / 3) times that, plus h / 2), a's factors cos and -sin,
 * b's cos and sin; a constant of g. */
static int rope_table(ir_graph *g, const char *name, int64_t heads, int64_t R, int64_t D, int pairing)
{
    int64_t nh = heads > 0 ? heads : 1;
    float *t = malloc(sizeof(float) * (size_t)(2 * nh * R * D));
    assert_non_null(t);
    for (int64_t h = 0; h < nh; h++)
        for (int64_t r = 0; r < R; r++)
            for (int64_t d = 0; d < D; d++) {
                int64_t i = pairing == IR_ROPE_INTERLEAVED ? d / 2 : d % (D / 2); /* the pair */
                int lower = d < ir_rope_partner((ir_rope_pairing)pairing, D, d);
                double angle = (double)(r + 1) * pow(10000.0, -2.0 * (double)i / (double)D) * (1.0 + (double)h / 3) +
                               (double)h / 2;
                t[(h * R + r) * D + d] = (float)cos(angle);
                t[((nh + h) * R + r) * D + d] = (float)(lower ? -sin(angle) : sin(angle));
            }
    int v = heads > 0 ? tu_const_f32(g, name, 4, TU_DIMS(2, heads, R, D), t)
                      : tu_const_f32(g, name, 3, TU_DIMS(2, R, D), t);
    free(t);
    return v;
}

/* Self-attention over qkv with a rotary table of R rows from token 1 (after a class token), one per head when
 * per_head. */
static int rope_attention(ir_graph *g, int qkv, int64_t heads, int64_t D, int layout, int pairing, int64_t R,
                          int per_head, const char *table)
{
    int rope = rope_table(g, table, per_head ? heads : 0, R, D, pairing);
    return tu_node(g, IR_OP_ATTENTION, NULL, IR_F32, 4, TU_IN(qkv, -1, -1, rope), 6,
                   TU_AT(tu_int(IR_ATTR_HEADS, heads), tu_int(IR_ATTR_HEAD_SIZE, D), tu_int(IR_ATTR_QKV_LAYOUT, layout),
                         tu_float(IR_ATTR_SCALE, 1.0f / sqrtf((float)D)), tu_int(IR_ATTR_ROPE_PAIRING, pairing),
                         tu_int(IR_ATTR_ROPE_START, 1)));
}

/* Attention over qkv (or, with q >= 0, cross-attention of q over kv = qkv) with bias (-1: none), scale
 * 1/sqrt(D). */
static int attention(ir_graph *g, int qkv, int bias, int q, int64_t heads, int64_t D)
{
    return tu_node(g, IR_OP_ATTENTION, NULL, IR_F32, 3, TU_IN(qkv, bias, q), 3,
                   TU_AT(tu_int(IR_ATTR_HEADS, heads), tu_int(IR_ATTR_HEAD_SIZE, D),
                         tu_float(IR_ATTR_SCALE, 1.0f / sqrtf((float)D))));
}

/* Attention with rotary embeddings on the tensor-core kernel (fp16, bf16) and, at head sizes test_ops' rows do
 * not reach, on the SIMT kernel (fp32); both pairings, rotating from token 1 (after a class token).  Head size 64
 * over 80 tokens, the table covering the rest: Q rotated in two query tiles of 64 rows (the second with 3 warps
 * past the last query), K in two blocks of 64 keys (the second partly padding); at batch 3, the threshold lowered
 * to 8 blocks, one tile of 128 rows (3 warps past the last query).  Head size 16 over 70 tokens with a table of
 * 60 rows (tokens 61.. left alone), in both qkv layouts, the interleaved one with a table per head.  Head size 64
 * over 300 tokens: keys in chunks of 256, those of the second chunk rotated by rows 255.. of the table; not in
 * bf16, whose error over 300 tokens (~0.008: Q and K rounded again after their rotation, as in any bf16 model) is
 * too near its bar of 1e-2 to tell much.  Each against the interpreter at batch 1 and 3 (check_graph). */
static void test_rope_emulated(void **state)
{
    (void)state;
    setenv("VITC_CUDA_ATTN_WIDE_BLOCKS", "8", 1);
    ir_graph *g = tu_graph_new("attn-rope.onnx", 18);
    int qa = tu_input(g, "qa", IR_F32, 3, TU_DIMS(-1, 80, 3 * 2 * 64));
    tu_output(g, rope_attention(g, qa, 2, 64, 0, IR_ROPE_HALVES, 79, 0, "rope64h"));
    tu_output(g, rope_attention(g, qa, 2, 64, 0, IR_ROPE_INTERLEAVED, 79, 0, "rope64i"));
    int qb = tu_input(g, "qb", IR_F32, 3, TU_DIMS(-1, 70, 3 * 2 * 16));
    tu_output(g, rope_attention(g, qb, 2, 16, 1, IR_ROPE_HALVES, 60, 0, "rope16h"));
    tu_output(g, rope_attention(g, qb, 2, 16, 0, IR_ROPE_INTERLEAVED, 60, 1, "rope16i"));
    check_graph("attn-rope", g, FP32 | FP16 | BF16);
    g = tu_graph_new("attn-rope-chunks.onnx", 18);
    int qc = tu_input(g, "qc", IR_F32, 3, TU_DIMS(-1, 300, 3 * 64));
    tu_output(g, rope_attention(g, qc, 1, 64, 1, IR_ROPE_HALVES, 299, 0, "rope64c"));
    check_graph("attn-rope-chunks", g, FP32 | FP16);
    unsetenv("VITC_CUDA_ATTN_WIDE_BLOCKS");
}

/* The head sizes of ViT-H/14 (80), SigLIP so400m (72) and ViT-g/14 (88) on the tensor-core kernel (fp16, bf16:
 * 72 and 88 computed over 80 and 96 columns, the padding zeros in shared memory) and the SIMT one (fp32), 50
 * tokens, two heads; 72 with a rotary table too.  Against the interpreter (check_graph). */
static void test_head_sizes_emulated(void **state)
{
    (void)state;
    ir_graph *g = tu_graph_new("attn-heads.onnx", 18);
    static const int64_t sizes[3] = {72, 80, 88};
    for (int i = 0; i < 3; i++) {
        int64_t D = sizes[i];
        char name[16];
        snprintf(name, sizeof name, "x%lld", (long long)D);
        int x = tu_input(g, name, IR_F32, 3, TU_DIMS(-1, 50, 3 * 2 * D));
        tu_output(g, attention(g, x, -1, -1, 2, D));
        if (D == 72)
            tu_output(g, rope_attention(g, x, 2, 72, 0, IR_ROPE_HALVES, 49, 0, "rope72"));
    }
    check_graph("attn-heads", g, FP32 | FP16 | BF16);
}

/* attention_wg (VITC_CUDA_ATTN_WGMMA=1, the 128-row threshold at one block: every batch) against the
 * interpreter, as an H100 runs it (the sm_90a bodies: TMA, wgmma with P from registers and V MN-major) and in
 * its portable form (attention_tc's 8 warps and a ninth that only loads).  Heads of 64 over 197 tokens (a last
 * block of 5 keys: the 16-key shape, V's rows past N zeroed by the producer) and over 300 with a bias
 * [B, H, N, N] (5 blocks around a ring of 4 stages); heads of 128 over 130 tokens (3 blocks, 2 stages, two
 * column blocks a row) and of 96 over 90 (the second column block half the head's, half beyond);
 * cross-attention of 150 queries (two tiles of 128) over 70 keys with a bias broadcast over images and rows;
 * none spilling registers on sm_90a (NVRTC's report).  With rotary tables (rotated in shared memory by the
 * producer's three rotating warps): heads of 64 over 197 tokens from token 1 (halves), heads of 32 over 300
 * with a table of 290 rows per head (interleaved; keys 291.. left alone).  The einops layout (loaded by
 * the producer's four warps, no TMA): heads of 64 over 197 tokens, and of 32 over 300 with a rotary table.
 * Then a NaN image beside two others.  The fixtures' and
 * zoo's heads of 16 run it in test_sm90a_emulated. */
static void test_attention_wg_emulated(void **state)
{
    (void)state;
    setenv("VITC_CUDA_ATTN_WGMMA", "1", 1);
    setenv("VITC_CUDA_ATTN_WIDE_BLOCKS", "1", 1);
    ir_graph *g = tu_graph_new("attn-wg.onnx", 18);
    int xa = tu_input(g, "xa", IR_F32, 3, TU_DIMS(-1, 197, 3 * 2 * 64));
    tu_output(g, attention(g, xa, -1, -1, 2, 64));
    int xb = tu_input(g, "xb", IR_F32, 3, TU_DIMS(-1, 300, 3 * 64));
    tu_output(g, attention(g, xb, tu_input(g, "bb", IR_F32, 4, TU_DIMS(-1, 1, 300, 300)), -1, 1, 64));
    int xc = tu_input(g, "xc", IR_F32, 3, TU_DIMS(-1, 130, 3 * 2 * 128));
    tu_output(g, attention(g, xc, -1, -1, 2, 128));
    int xd = tu_input(g, "xd", IR_F32, 3, TU_DIMS(-1, 90, 3 * 96));
    tu_output(g, attention(g, xd, -1, -1, 1, 96));
    int kv = tu_input(g, "kv", IR_F32, 3, TU_DIMS(-1, 70, 2 * 2 * 64)), q = tu_input(g, "q", IR_F32, 3, TU_DIMS(-1, 150, 2 * 64));
    tu_output(g, attention(g, kv, tu_const_f32(g, "cb", 4, TU_DIMS(1, 2, 1, 70), NULL), q, 2, 64));
    check_graph_as("attn-wg", g, FP16 | BF16, 1);
    g = tu_graph_new("attn-wg-rope.onnx", 18);
    int xr = tu_input(g, "xr", IR_F32, 3, TU_DIMS(-1, 197, 3 * 2 * 64));
    tu_output(g, rope_attention(g, xr, 2, 64, 0, IR_ROPE_HALVES, 196, 0, "rope64h"));
    int xs = tu_input(g, "xs", IR_F32, 3, TU_DIMS(-1, 300, 3 * 2 * 32));
    tu_output(g, rope_attention(g, xs, 2, 32, 0, IR_ROPE_INTERLEAVED, 290, 1, "rope32i"));
    check_graph_as("attn-wg-rope", g, FP16, 1);
    g = tu_graph_new("attn-wg-einops.onnx", 18);
    int xe = tu_input(g, "xe", IR_F32, 3, TU_DIMS(-1, 197, 3 * 2 * 64));
    tu_output(g, tu_node(g, IR_OP_ATTENTION, NULL, IR_F32, 1, TU_IN(xe), 4,
                         TU_AT(tu_int(IR_ATTR_HEADS, 2), tu_int(IR_ATTR_HEAD_SIZE, 64), tu_int(IR_ATTR_QKV_LAYOUT, 1),
                               tu_float(IR_ATTR_SCALE, 0.125f))));
    int xf = tu_input(g, "xf", IR_F32, 3, TU_DIMS(-1, 300, 3 * 2 * 32));
    tu_output(g, rope_attention(g, xf, 2, 32, 1, IR_ROPE_HALVES, 290, 0, "rope32e"));
    check_graph_as("attn-wg-einops", g, FP16 | BF16, 1);
    g = tu_graph_new("attn-wg-portable.onnx", 18);
    tu_output(g, attention(g, tu_input(g, "xa", IR_F32, 3, TU_DIMS(-1, 197, 3 * 2 * 64)), -1, -1, 2, 64));
    check_graph_as("attn-wg-portable", g, FP16, 0);

    /* the rows past N of image 0's last key block are image 1's tokens: with image 1 all NaN, images 0 and 2
     * still match the interpreter (V's rows past N zeroed, not multiplied by zero probabilities) */
    g = tu_graph_new("attn-wg-nan.onnx", 18);
    tu_output(g, attention(g, tu_input(g, "xa", IR_F32, 3, TU_DIMS(-1, 197, 3 * 2 * 64)), -1, -1, 2, 64));
    tu_check_graph(g, "attn-wg-nan");
    ir_tensor in, ref, out;
    tu_random_inputs(g, 3, &in);
    const int64_t per = 197 * 3 * 2 * 64, oper = 197 * 2 * 64;
    for (int64_t i = per; i < 2 * per; i++)
        ir_tensor_set(&in, i, NAN);
    tu_interpret_ok(g, &in, &ref);
    char so[8300], cu[8300], emu[8300];
    snprintf(so, sizeof so, "%s/attn-wg-nan.so", tmpdir);
    snprintf(cu, sizeof cu, "%s/attn-wg-nan.cu", tmpdir);
    compile_cuda(g, "attn-wg-nan", "fp16", so, cu);
    tu_emu_build_as(cu, 1, emu, sizeof emu);
    int nl;
    tu_emulate(so, emu, 3, &in, 1, &out, 1, &nl);
    for (int b = 0; b < 3; b += 2) {
        double err = 0, mx = 0;
        for (int64_t i = b * oper; i < (b + 1) * oper; i++) {
            double r = ir_tensor_get(&ref, i), e = fabs(ir_tensor_get(&out, i) - r);
            err = e > err || isnan(e) ? e : err;
            mx = fabs(r) > mx ? fabs(r) : mx;
        }
        print_message("attn-wg-nan  fp16  image %d of 3 (image 1 NaN): error %.2g\n", b, err / mx);
        if (!(err / mx <= tu_precision_bar(2)))
            fail_msg("attn-wg-nan: image %d error %g beside a NaN image", b, err / mx);
    }
    ir_tensor_free(&in), ir_tensor_free(&ref), ir_tensor_free(&out);
    ir_graph_free(g);
    unsetenv("VITC_CUDA_ATTN_WGMMA");
    unsetenv("VITC_CUDA_ATTN_WIDE_BLOCKS");
}

/* ---- the sm_90a GEMMs with a bug put in ---- */

/* The program at cu with `from` (which must occur once) replaced by `to`,
 * under a program id of its own, written to out. */
static void mutate_program(const char *cu, const char *from, const char *to, const char *out)
{
    size_t len;
    char *text = tu_read_file(cu, &len);
    assert_non_null(text);
    char *at = strstr(text, from);
    if (!at || strstr(at + 1, from))
        fail_msg("the program has %s of '%s'", at ? "more than one occurrence" : "no occurrence", from);
    char *id = strstr(text, "\"vitc-program:");
    assert_non_null(id);
    id += strlen("\"vitc-program:");
    FILE *f = fopen(out, "w");
    assert_non_null(f);
    /* the id: FNV-1a of the program's own id, the replacement and where it goes, so that a program
     * differs from every other one (and from an earlier version of this test's programs, whose emulation
     * libraries the cache keeps) in its name as in its text */
    uint64_t h = 0xcbf29ce484222325ull;
    for (int k = 0; k < 16; k++)
        h = (h ^ (unsigned char)id[k]) * 0x100000001b3ull;
    for (const char *q = to; *q; q++)
        h = (h ^ (unsigned char)*q) * 0x100000001b3ull;
    h ^= (uint64_t)(at - text);
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)h);
    memcpy(id, hex, 16);
    fwrite(text, 1, (size_t)(at - text), f);
    fputs(to, f);
    fputs(at + strlen(from), f);
    assert_int_equal(fclose(f), 0);
    free(text);
}

/* A bug in the sm_90a kernels must fail their emulation, with a message or
 * with outputs beyond the bar.  In gemm_tma and gemm_wg: the 128-byte
 * swizzle missing from the wgmma descriptors; a consumer waiting for the
 * wrong phase of a stage's full barrier (it reads the stage before the copy
 * engine has written it); the producer waiting for the wrong phase of an
 * empty barrier (it waits for an arrival that never comes: a deadlock); the
 * proxy fence between gemm_wg's cp.async writes and wgmma's reads left out;
 * the wgmma.fence before a sequence of wgmma left out; the warps of a
 * warpgroup issuing different wgmma (a descriptor from the warp, not the
 * warpgroup); a consumer releasing a stage while its wgmma group may still
 * read it (wait_group 2 for 1).  In
 * gemm_pp (one block over all tiles: the consumers alternate over 9 tiles,
 * the ring's phases carried from tile to tile): a consumer counting only
 * its own units' k tiles in the ring; an empty barrier waiting for
 * both consumers' warps; a tile's last stage never released; the consumers'
 * k loops not taking turns (a consumer then waits for a stage two phases
 * ahead, which the parity takes for the current one).  gemm_pp on 4 blocks
 * (9 tiles: 4 whole, the last 5 shared out by stream-K, 10 k tiles a block,
 * three tiles in two parts): the last part of a tile taken for not the
 * last (the tile never stored); the parts added from the second block on;
 * a block's part stored in its other slot; the producer's share one k tile
 * longer than the consumers' (a block ending with a bulk copy in flight).
 * On two bf16
 * GEMMs at batch 3 (300 rows: 3 row tiles, the last part past M): K = 512
 * (8 k tiles around a ring of 3 stages) and N = 320 (the last column tile
 * part padding) on gemm_tma or gemm_pp, K = 196 (rows of A not 16-byte
 * aligned) on gemm_wg.  In attention_wg (head size 64 over 300 tokens: 5
 * key blocks around a ring of 4 stages, with and without a rotary table): V's MN-major descriptor without the
 * 128-byte swizzle, or with its 8-key groups 512 bytes apart; a consumer
 * waiting for the wrong phase of a key block; the wgmma.fence between the
 * softmax (registers P and O) and P V left out; a key block released with
 * P V in flight; with a rotary table, consumers not waiting for the keys'
 * rotation.  Each program without a bug passes first. */
static void test_sm90a_mutations(void **state)
{
    (void)state;
    ir_graph *g = tu_graph_new("sm90a-mutations.onnx", 18);
    int x = tu_input(g, "x", IR_F32, 3, TU_DIMS(-1, 100, 512)), y = tu_input(g, "y", IR_F32, 3, TU_DIMS(-1, 100, 196));
    int w1 = tu_const_f32(g, "w1", 2, TU_DIMS(512, 320), NULL), b1 = tu_const_f32(g, "b1", 1, TU_DIMS(320), NULL);
    int w2 = tu_const_f32(g, "w2", 2, TU_DIMS(196, 136), NULL);
    tu_output(g, tu_node(g, IR_OP_LINEAR, NULL, IR_F32, 3, TU_IN(x, w1, b1), 1,
                         TU_AT(tu_int(IR_ATTR_ACTIVATION, IR_ACT_GELU_ERF))));
    tu_output(g, tu_node(g, IR_OP_LINEAR, NULL, IR_F32, 2, TU_IN(y, w2), 0, NULL));
    /* attention over 300 tokens: 5 blocks of keys around attention_wg's ring of 4 stages, the last of 44;
     * and with a rotary table over tokens 1..290 */
    int z = tu_input(g, "z", IR_F32, 3, TU_DIMS(-1, 300, 3 * 64));
    tu_output(g, attention(g, z, -1, -1, 1, 64));
    tu_output(g, rope_attention(g, z, 1, 64, 0, IR_ROPE_HALVES, 290, 0, "rope64"));
    enum { NOUT = 4 };
    tu_check_graph(g, "sm90a-mutations");
    vitc_diag d;
    vitc_diag_init(&d, "sm90a-mutations");
    ir_tensor in[3], ref[NOUT];
    tu_random_inputs(g, 3, in);
    if (ir_interpret(g, in, ref, NULL, NULL, &d))
        fail_msg("the interpreter failed");

    typedef struct {
        const char *what, *from, *to;
    } bug;
    static const bug tma_bugs[] = {
        {"no 128-byte swizzle in the wgmma descriptors", "((unsigned long long)(sw128 ? 1 : 0) << 62)",
         "((unsigned long long)0 << 62)"},
        {"a consumer waits for the other phase of full[s]",
         "vk_mbar_wait(&full[s], (it / WS) & 1);\n            tma_mma_stage<T, BN, 1>",
         "vk_mbar_wait(&full[s], ((it / WS) & 1) ^ 1);\n            tma_mma_stage<T, BN, 1>"},
        {"the producer waits for the other phase of empty[s]", "vk_mbar_wait(&empty[s], ((it / WS) & 1) ^ 1);",
         "vk_mbar_wait(&empty[s], (it / WS) & 1);"},
        {"no fence.proxy.async after gemm_wg's cp.async", "        vk_fence_proxy_async();\n        __syncthreads();",
         "        __syncthreads();"},
        {"the warps of a warpgroup issue different wgmma", "wg_desc(sa + wgi * 8 * SBO + ks",
         "wg_desc(sa + (warp >> 1) * 4 * SBO + ks"},
        {"no wgmma.fence before the stage's wgmma", "    const unsigned char *sb = sa + 128 * 128;\n    vk_wg_fence();",
         "    const unsigned char *sb = sa + 128 * 128;"},
        {"a stage released with its wgmma group in flight",
         "tma_mma_stage<T, BN, 1>(d, smem + s * STAGE, cw * 64);\n            vk_wg_wait<1>();",
         "tma_mma_stage<T, BN, 1>(d, smem + s * STAGE, cw * 64);\n            vk_wg_wait<2>();"},
        {NULL, NULL, NULL},
    };
    static const bug pp_bugs[] = {
        {"a consumer counts only its own units' k tiles", "it += u.k1 - u.k0, i++)",
         "it += (i & 1) == wg ? u.k1 - u.k0 : 0, i++)"},
        {"empty[s] waits for both consumers' warps", "vk_mbar_init(&empty[s], 4);", "vk_mbar_init(&empty[s], 8);"},
        {"a tile's last stage never released", "            vk_mbar_arrive(&empty[(it + n - 1) % WS]);",
         "            ;"},
        {"the consumers' k loops not taking turns", "        if (i > 0) /* the other consumer's k loop", "        if (0) /* the other consumer's k loop"},
        {NULL, NULL, NULL},
    };
    static const bug attn_bugs[] = {
        {"V's descriptor without the 128-byte swizzle", "(unsigned long long)(1024 >> 4) << 32) |\n           (1ull << 62)",
         "(unsigned long long)(1024 >> 4) << 32) |\n           (0ull << 62)"},
        {"V's 8-key groups taken 512 bytes apart", "(unsigned long long)(1024 >> 4) << 32) |",
         "(unsigned long long)(512 >> 4) << 32) |"},
        {"a consumer waits for the other phase of a key block",
         "vk_mbar_wait(PREP ? &ready[s] : &full[s], (c / WS) & 1);",
         "vk_mbar_wait(PREP ? &ready[s] : &full[s], ((c / WS) & 1) ^ 1);"},
        {"no wgmma.fence between the softmax and P V", "        vk_wg_fence(); /* o rescaled", "        /* o rescaled"},
        {"a key block released with P V in flight", "        vk_wg_wait<0>();\n        if (lane == 0) /* K and V",
         "        vk_wg_wait<1>();\n        if (lane == 0) /* K and V"},
        {"consumers not waiting for the rotated keys", "vk_mbar_wait(PREP ? &ready[s] : &full[s], (c / WS) & 1);",
         "vk_mbar_wait(&full[s], (c / WS) & 1);"},
        {NULL, NULL, NULL},
    };
    static const bug sk_bugs[] = {
        {"the last part of a tile taken for not the last", "!= (unsigned)(last - first))",
         "!= (unsigned)(last - first + 1))"},
        {"the parts added from the second block on", "for (int c = first; c <= last; c++)",
         "for (int c = first + 1; c <= last; c++)"},
        {"a block's part stored in its other slot", "float *mine = part((int)blockIdx.x);",
         "float *mine = part((int)blockIdx.x) + (pp_share(s, (int)blockIdx.x) / s.nkt == q ? SLOT : -SLOT);"},
        {"the producer's share one k tile longer", "pp_start(const pp_sched &s, int b) { return pp_walk{s, b, 0, pp_share(s, b), pp_share(s, b + 1)}; }",
         "pp_start(const pp_sched &s, int b) { return pp_walk{s, b, 0, pp_share(s, b), pp_share(s, b + 1) + (threadIdx.x == 256 && b + 1 < s.G)}; }"},
        {NULL, NULL, NULL},
    };
    static const struct {
        const char *wave, *pingpong, *variants;
        int attn_wg;
        const bug *bugs;
    } programs[4] = {
        {"1", NULL, "tma 128/3/2 x1, wg 128/3 x1", 0, tma_bugs},
        {"1", "3", "wg 128/3 x1, pingpong 3 stream-k x1", 0, pp_bugs},
        {"4", "3", "wg 128/3 x1, pingpong 3 stream-k x1", 0, sk_bugs}, /* four blocks, the last 5 tiles by stream-K */
        {"1", NULL, "tma 128/3/2 x1, wg 128/3 x1, attention_wg D64 x2", 1, attn_bugs},
    };
    for (int pr = 0; pr < 4; pr++) {
        char so[8300], cu[8300], mut[8300], emu[8300];
        snprintf(so, sizeof so, "%s/sm90a-mutations%d.so", tmpdir, pr);
        snprintf(cu, sizeof cu, "%s/sm90a-mutations%d.cu", tmpdir, pr);
        snprintf(mut, sizeof mut, "%s/sm90a-mutated.cu", tmpdir);
        setenv("VITC_CUDA_GEMM_WAVE", programs[pr].wave, 1); /* the large tile; gemm_pp: that many blocks */
        if (programs[pr].pingpong)
            setenv("VITC_CUDA_PINGPONG", programs[pr].pingpong, 1);
        if (programs[pr].attn_wg) {
            setenv("VITC_CUDA_ATTN_WGMMA", "1", 1);
            setenv("VITC_CUDA_ATTN_WIDE_BLOCKS", "1", 1);
        }
        compile_cuda(g, "sm90a-mutations", "bf16", so, cu);
        unsetenv("VITC_CUDA_GEMM_WAVE");
        unsetenv("VITC_CUDA_PINGPONG");
        unsetenv("VITC_CUDA_ATTN_WGMMA");
        unsetenv("VITC_CUDA_ATTN_WIDE_BLOCKS");
        char var[80];
        variants(cu, var, sizeof var);
        assert_string_equal(var, programs[pr].variants);
        print_message("%-52s emulation (bf16, batch 3, VITC_CUDA_GEMM_WAVE=%s)\n", var, programs[pr].wave);
        for (int i = -1; i < 0 || programs[pr].bugs[i].what; i++) {
            const bug *b = i >= 0 ? &programs[pr].bugs[i] : NULL;
            const char *prog = cu;
            if (b) {
                mutate_program(cu, b->from, b->to, mut);
                prog = mut;
            }
            tu_emu_build_as(prog, 1, emu, sizeof emu);
            ir_tensor out[NOUT];
            int nl;
            char err[4096];
            int rc = tu_emulate_try(so, emu, 3, in, 3, out, NOUT, &nl, err, sizeof err);
            double e = 0;
            for (int o = 0; o < NOUT && rc == 0; o++) {
                double eo = ir_rel_error(&out[o], &ref[o]);
                e = eo > e || isnan(eo) ? eo : e;
                ir_tensor_free(&out[o]);
            }
            int failed = rc != 0 || !(e <= tu_precision_bar(3));
            const char *what = b ? b->what : "(no bug)";
            if (rc)
                print_message("  %-50s failed: %s\n", what, strstr(err, "): ") ? strstr(err, "): ") + 3 : err);
            else
                print_message("  %-50s rel err %.3g: %s\n", what, e, failed ? "beyond the bar" : "within the bar");
            if (failed != (b != NULL))
                fail_msg("%s: the emulation %s", what, failed ? "failed" : "passed");
        }
        unlink(so);
        unlink(cu);
    }
    for (int k = 0; k < 3; k++)
        ir_tensor_free(&in[k]);
    for (int k = 0; k < NOUT; k++)
        ir_tensor_free(&ref[k]);
    ir_graph_free(g);
}

/* ---- the runtime on a fake driver ---- */

/* Builds tests/fake_libcuda.c as cachedir/fakecuda/libcuda.so.1 (once). */
static void build_fake_driver(char *dir, size_t n)
{
    snprintf(dir, n, "%s/fakecuda", tu_emu_cache_dir());
    mkdir(dir, 0755);
    char so[8300], src[4096], cmd[32768], tmp[8400];
    snprintf(so, sizeof so, "%.8000s/libcuda.so.1", dir);
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", so, (long)getpid());
    tu_path(src, sizeof src, "tests/fake_libcuda.c");
    const char *cc = getenv("CC");
    snprintf(cmd, sizeof cmd, "%s -std=c11 -O1 -shared -fPIC '%s' -o '%s' -ldl 2>&1 && mv '%s' '%s'",
             cc && *cc ? cc : "cc", src, tmp, tmp, so);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char out[8192];
    size_t r = fread(out, 1, sizeof out - 1, p);
    out[r] = 0;
    if (pclose(p) != 0)
        fail_msg("building the fake driver failed:\n%s", out);
}

static int count_lines(const char *path, const char *prefix)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strncmp(line, prefix, strlen(prefix)) == 0;
    fclose(f);
    return n;
}

/* From the trace's (last) "instantiate N launches, M programmatic": N and M; 0 without one. */
static int graph_launches(const char *path, int *n, int *m)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char line[512];
    int found = 0;
    while (fgets(line, sizeof line, f))
        found |= sscanf(line, "instantiate %d launches, %d programmatic", n, m) == 2;
    fclose(f);
    return found;
}

/* Runs vitc with args; returns its exit code, stdout+stderr into text. */
static int vitc_text(const char *const *args, char *text, size_t n)
{
    char *out, *err;
    int rc = tu_run_vitc(args, &out, &err);
    snprintf(text, n, "%s%s", out ? out : "", err ? err : "");
    free(out), free(err);
    return rc;
}

/* The runtime's CUDA executor end to end (driver loading, image choice by
 * architecture, graphs captured once and replayed, the shared memory opt-in,
 * copies in and out) on tests/fake_libcuda.c, whose kernels run on the
 * emulation; then test_cuda_gpu, the GPU test itself, on the same.  It runs
 * the fixtures' programs on the emulation libraries test_fixtures_emulated
 * builds, so it comes after it (and in the same ctest: test_fixtures_*). */
static void test_fixtures_on_fake_driver(void **state)
{
    (void)state;
    char fake[8300], trace[8300], text[65536];
    build_fake_driver(fake, sizeof fake);
    const char *old = getenv("LD_LIBRARY_PATH");
    char ld[16384];
    snprintf(ld, sizeof ld, "%s%s%s", fake, old && *old ? ":" : "", old && *old ? old : "");
    char *saved = old ? strdup(old) : NULL;
    setenv("LD_LIBRARY_PATH", ld, 1);
    setenv("VITC_FAKE_CUDA_EMU_DIR", tu_emu_dir(), 1);
    snprintf(trace, sizeof trace, "%s/trace", tmpdir);
    setenv("VITC_FAKE_CUDA_TRACE", trace, 1);

    /* 1. the image for each architecture, the graph captured once */
    char model[4096], so[8300], cu[8300], emu[8300], in[4096], outdir[8300];
    tu_path(model, sizeof model, "tests/models/timm-ts17.onnx");
    tu_path(in, sizeof in, "tests/models/timm.b3.input.npy");
    snprintf(so, sizeof so, "%s/timm.so", tmpdir);
    snprintf(cu, sizeof cu, "%s/timm.cu", tmpdir);
    snprintf(outdir, sizeof outdir, "%s/out", tmpdir);
    mkdir(outdir, 0755);
    const char *c1[] = {model, "--target", "cuda", "-o", so, NULL};
    const char *c2[] = {model, "--emit", "cuda", "-o", cu, NULL};
    run_vitc(c1, so);
    run_vitc(c2, cu);
    tu_emu_build(cu, emu, sizeof emu);
    static const struct {
        const char *arch, *want;
    } archs[] = {{"90", "load cubin sm_90"}, {"86", "load cubin sm_80"}, {"89", "load cubin sm_80"},
                 {"100", "load ptx"}, {"75", NULL}};
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++) {
        unlink(trace);
        setenv("VITC_FAKE_CUDA_ARCH", archs[i].arch, 1);
        /* one warm-up run and three timed: four replays of the one graph */
        const char *run[] = {"run",      so,  "--input",  in, "--output-dir", outdir,
                             "--repeat", "3", "--warmup", "1", NULL};
        int rc = vitc_text(run, text, sizeof text);
        print_message("fake sm_%s: vitc run exit %d, %d image(s) loaded as '%s', %d graph(s) captured, %d replays\n",
                      archs[i].arch, rc, count_lines(trace, "load"), archs[i].want ? archs[i].want : "-",
                      count_lines(trace, "instantiate"), count_lines(trace, "graph launch"));
        if (!archs[i].want) { /* sm_75: no code for it, said clearly */
            assert_int_equal(rc, 2);
            if (!strstr(text, "has code for sm_80, sm_90, compute_90"))
                fail_msg("sm_75: %s", text);
            continue;
        }
        if (rc != 0)
            fail_msg("fake sm_%s: vitc run exited %d:\n%s", archs[i].arch, rc, text);
        assert_int_equal(count_lines(trace, archs[i].want), 1);
        assert_int_equal(count_lines(trace, "instantiate"), 1);
        assert_int_equal(count_lines(trace, "graph launch"), 4);
        /* from sm_90 every kernel but the run's first is a programmatic dependent launch (the images
         * for sm_90 on wait for the grid before: VITC_CUDA_IMAGE_PDL), none before */
        int nk = 0, np = -1;
        assert_true(graph_launches(trace, &nk, &np));
        print_message("fake sm_%s: %d kernels in the graph, %d programmatic dependent launches\n", archs[i].arch, nk,
                      np);
        assert_true(nk > 5);
        assert_int_equal(np, atoi(archs[i].arch) >= 90 ? nk - 1 : 0);
    }
    unsetenv("VITC_FAKE_CUDA_ARCH");
    { /* VITC_CUDA_PDL=0: plain launches on sm_90 too */
        unlink(trace);
        setenv("VITC_CUDA_PDL", "0", 1);
        const char *run[] = {"run", so, "--input", in, "--output-dir", outdir, NULL};
        int rc = vitc_text(run, text, sizeof text);
        unsetenv("VITC_CUDA_PDL");
        int nk = 0, np = -1;
        if (rc != 0 || !graph_launches(trace, &nk, &np))
            fail_msg("VITC_CUDA_PDL=0: vitc run exited %d:\n%s", rc, text);
        print_message("fake sm_90, VITC_CUDA_PDL=0: %d kernels in the graph, %d programmatic\n", nk, np);
        assert_int_equal(np, 0);
    }

    /* vitc bench on the CUDA model: its context (a stream of its own) through the same calls, a warm-up
     * request and two timed ones replaying the one graph; one request at a time, as the fake driver
     * keeps its state without locks */
    unlink(trace);
    const char *bench[] = {"bench", so, "--requests", "2", "--warmup", "1", "--json", NULL};
    int brc = vitc_text(bench, text, sizeof text);
    print_message("fake sm_90: vitc bench --requests 2: exit %d, %d graph(s) captured, %d replays\n", brc,
                  count_lines(trace, "instantiate"), count_lines(trace, "graph launch"));
    if (brc != 0 || !strstr(text, "\"target\": \"cuda\"") || !strstr(text, "\"requests\": 2,"))
        fail_msg("vitc bench on the fake driver exited %d:\n%s", brc, text);
    assert_int_equal(count_lines(trace, "graph launch"), 3);

    /* 2. a batch where the 128x128 GEMM tile takes over: more than 48 KiB of
     * shared memory, which the runtime must opt into */
    tu_path(model, sizeof model, "tests/models/face_ln-ts17.onnx");
    snprintf(so, sizeof so, "%s/face.so", tmpdir);
    snprintf(cu, sizeof cu, "%s/face.cu", tmpdir);
    const char *c3[] = {model, "--target", "cuda", "--batch", "128", "-o", so, NULL};
    const char *c4[] = {model, "--emit", "cuda", "--batch", "128", "-o", cu, NULL};
    run_vitc(c3, so);
    run_vitc(c4, cu);
    tu_emu_build(cu, emu, sizeof emu);
    tu_emu_build_as(cu, 1, emu, sizeof emu); /* the sm_90a image's: gemm_wg and gemm_tma on wgmma */
    size_t len;
    char *prog = tu_read_file(cu, &len);
    assert_non_null(prog);
    /* on mma.sync (gemm_tc) or wgmma (gemm_wg); the aligned ones through gemm_tma, whose tensor maps
     * the runtime encodes on the fake sm_90 (the fake driver checks them against the allocations and
     * encodes them for the emulation's bulk copies): the runtime loads the sm_90a image, whose
     * emulation runs the wgmma bodies */
    int large = strstr(prog, "vk::gemm_tc<b16, 128, 128") || strstr(prog, "vk::gemm_wg<b16, 128, ");
    int tma = strstr(prog, "vk::gemm_tma<b16, 128, ") != NULL;
    free(prog);
    if (!large || !tma)
        fail_msg("face_ln at batch 128 has no 128x128 GEMM tile %sto test the shared memory opt-in with",
                 large ? "through gemm_tma " : "");
    const char *cmp[] = {"compare", model, so, "--batch", "120", NULL};
    unlink(trace);
    int rc = vitc_text(cmp, text, sizeof text);
    print_message("fake sm_90: vitc compare face_ln-ts17 at batch 120 (128x128 tiles on wgmma and TMA, over 48 "
                  "KiB of shared memory): exit %d, %d sm_90a image(s) loaded\n%s",
                  rc, count_lines(trace, "load cubin sm_90a"), text);
    assert_int_equal(rc, 0);
    assert_int_equal(count_lines(trace, "load cubin sm_90a"), 1);

    /* 3. the GPU test, on the fake device (not under a sanitizer: it repeats
     * the fixtures' emulation above through the slower instrumented tools) */
    char self[4096], cmd[16384];
    if (TU_SANITIZED) {
        print_message("test_cuda_gpu on the fake driver: not run in the sanitizer build (run in the normal one)\n");
        goto restore;
    }
    ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
    assert_true(k > 0);
    self[k] = 0;
    snprintf(cmd, sizeof cmd, "'%s/test_cuda_gpu' 2>&1", dirname(self));
    unlink(trace);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t r = fread(text, 1, sizeof text - 1, p);
    text[r] = 0;
    rc = pclose(p);
    print_message("test_cuda_gpu on the fake driver: exit status %d\n%s", rc, text);
    if (rc != 0 || !strstr(text, "device: fake CUDA device") || !strstr(text, "[  PASSED  ] 3 test(s)"))
        fail_msg("test_cuda_gpu failed on the fake driver");

restore:
    if (saved) {
        setenv("LD_LIBRARY_PATH", saved, 1);
        free(saved);
    } else {
        unsetenv("LD_LIBRARY_PATH");
    }
    unsetenv("VITC_FAKE_CUDA_EMU_DIR");
    unsetenv("VITC_FAKE_CUDA_TRACE");
}

static int setup(void **state)
{
    nfixtures = tu_fixtures(fixtures, 64);
    tu_seed(0x9e3779b97f4a7c15ull);
    *state = tu_tmpdir(tmpdir, sizeof tmpdir);
    return *state && !tu_emu_init() ? 0 : -1;
}

TU_MAIN(setup, tu_teardown_tmpdir, test_fixtures_emulated, test_zoo_families_emulated, test_sm90a_emulated,
        test_gemm_shapes_sm90a_emulated, test_ops_emulated,
        test_rope_emulated, test_head_sizes_emulated, test_attention_wg_emulated, test_sm90a_mutations,
        test_narrow_residual_emulated, test_norm_folded_emulated,
        test_fixtures_on_fake_driver)

#else

static void test_cuda_backend_not_built(void **state)
{
    (void)state;
    tu_skip(); /* this vitc was configured without the CUDA backend (no NVRTC): nothing to emulate */
}

int main(void)
{
    print_message("skipped: the CUDA backend is not built (configure with the CUDA toolkit, -DVITC_CUDA=ON)\n");
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_cuda_backend_not_built)};
    return tu_run_group(tests, NULL, NULL);
}

#endif
