/* test_cuda_gpu.c: the CUDA backend on a GPU.  Skips, saying why, where the
 * runtime finds no CUDA driver or device (vitc_cuda_device).
 *
 * Every fixture in fp32, tf32, fp16 and bf16, compiled by `vitc --target
 * cuda` and run through the C API at batch 1 and 3 against the reference
 * interpreter (fp32, double accumulation), within the bars of
 * tests/testutil.h (tu_precision_ok): max |out - ref| / max |ref| <= 1e-4
 * for fp32; <= 2e-3 for tf32 and <= 1e-2 for fp16 and bf16, those with
 * cosine >= 0.9999.  Each batch runs twice (the second replays the captured
 * CUDA graph) and once more in a context without graphs (VITC_CUDA_GRAPH=0):
 * all three must agree bit for bit.  Then `vitc run` and `vitc compare` on a
 * compiled model, as a user runs them; the device-pointer entry point
 * (vitc_run_device, on buffers this test allocates through the driver) and
 * the device time (vitc_context_device_ms) on a poisoned workspace.  Without
 * a GPU it says why and exits 77, which ctest reports as skipped.
 *
 * test_cuda_emu also runs this program on a CPU emulation of the driver
 * (tests/fake_libcuda.c), so that it is known to work before it first meets
 * a GPU. */
#include "testutil.h"

#include "ir/interp.h"

#include "runtime/cuda_api.h"

#include <vitc/runtime.h>

#include <dlfcn.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static tu_fixture fixtures[64];
static int nfixtures;
static char tmpdir[4096], device[256], no_device[1024];
static int arch;

static const char *const precisions[4] = {"fp32", "tf32", "fp16", "bf16"};

static void compile(const char *model, const char *prec, const char *so)
{
    const char *args[] = {model, "--target", "cuda", "--precision", prec, "-o", so, NULL};
    char *out, *err;
    int rc = tu_run_vitc(args, &out, &err);
    if (rc != 0)
        fail_msg("%s (%s): vitc exited %d:\n%s%s", model, prec, rc, out, err);
    free(out), free(err);
}

/* timm-ts17 (its path into model) compiled in precision prec into
 * tmpdir/timm.<prec>.so (its path into so). */
static void compile_timm(const char *prec, char *model, size_t mn, char *so, size_t sn)
{
    tu_path(model, mn, "tests/models/timm-ts17.onnx");
    snprintf(so, sn, "%s/timm.%s.so", tmpdir, prec);
    compile(model, prec, so);
}

/* Runs the model once on in (one input, one output) into out (allocated here). */
static void run_once(vitc_context *c, const ir_tensor *in, ir_tensor *out, const ir_tensor *shape_of)
{
    assert_int_equal(ir_tensor_alloc(out, IR_F32, shape_of->rank, shape_of->dims), 0);
    vitc_tensor ti = {.dtype = VITC_DTYPE_F32, .rank = in->rank, .data = in->data};
    vitc_tensor to = {.dtype = VITC_DTYPE_F32, .rank = out->rank, .data = out->data};
    memcpy(ti.dims, in->dims, sizeof(int64_t) * (size_t)in->rank);
    memcpy(to.dims, out->dims, sizeof(int64_t) * (size_t)out->rank);
    vitc_status st = vitc_run(c, &ti, 1, &to, 1);
    if (st != VITC_STATUS_OK)
        fail_msg("vitc_run: %s", vitc_last_error());
}

static void test_fixtures_on_gpu(void **state)
{
    (void)state;
    assert_true(nfixtures >= 15);
    print_message("device: %s (sm_%d)\n", device, arch);
    print_message("%-24s %-5s %11s %11s %9s %9s\n", "fixture", "prec", "b1 rel err", "b3 rel err", "b1 cos", "b3 cos");
    int failures = 0;
    double worst[4] = {0};
    for (int i = 0; i < nfixtures; i++) {
        const tu_fixture *fx = &fixtures[i];
        char model[4096];
        ir_tensor in[2], ref[2];
        tu_fixture_case(fx, model, sizeof model, in, ref);
        for (int pi = 0; pi < 4; pi++) {
            char so[8400];
            snprintf(so, sizeof so, "%.4000s/%.95s.%s.so", tmpdir, fx->model, precisions[pi]);
            compile(model, precisions[pi], so);
            vitc_model *m;
            vitc_context *c, *c_nograph;
            if (vitc_model_load(so, &m) != VITC_STATUS_OK)
                fail_msg("%s", vitc_last_error());
            assert_string_equal(vitc_model_target(m), "cuda");
            if (vitc_context_create(m, 0, &c) != VITC_STATUS_OK)
                fail_msg("%s", vitc_last_error());
            setenv("VITC_CUDA_GRAPH", "0", 1);
            vitc_status cs = vitc_context_create(m, 0, &c_nograph);
            unsetenv("VITC_CUDA_GRAPH");
            if (cs != VITC_STATUS_OK)
                fail_msg("%s", vitc_last_error());
            double e[2], cosv[2];
            for (int b = 0; b < 2; b++) {
                ir_tensor o1, o2, o3;
                run_once(c, &in[b], &o1, &ref[b]);
                run_once(c, &in[b], &o2, &ref[b]); /* the graph, replayed */
                run_once(c_nograph, &in[b], &o3, &ref[b]);
                size_t bytes = ir_tensor_nbytes(&o1);
                if (memcmp(o1.data, o2.data, bytes) != 0 || memcmp(o1.data, o3.data, bytes) != 0)
                    fail_msg("%s %s batch %d: replaying the graph or launching without one changed the output",
                             fx->model, precisions[pi], b ? 3 : 1);
                e[b] = ir_rel_error(&o1, &ref[b]);
                cosv[b] = tu_cosine(&o1, &ref[b]);
                ir_tensor_free(&o1), ir_tensor_free(&o2), ir_tensor_free(&o3);
            }
            vitc_context_free(c_nograph);
            vitc_context_free(c);
            vitc_model_free(m);
            unlink(so);
            int ok = tu_precision_ok(pi, e, cosv, worst);
            failures += !ok;
            print_message("%-24s %-5s %11.3g %11.3g %9.6f %9.6f %s\n", fx->model, precisions[pi], e[0], e[1], cosv[0],
                          cosv[1], ok ? "ok" : "FAIL");
        }
        for (int b = 0; b < 2; b++)
            ir_tensor_free(&in[b]), ir_tensor_free(&ref[b]);
    }
    tu_precision_report(worst, failures);
}

/* The driver, for device buffers of our own (the runtime's copy is private). */
static rt_cuda_api cu;

static int load_driver(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return 0;
#define RESOLVE(name, sym, params)                                                                                 \
    if (!(*(void **)&cu.name = dlsym(h, #sym)))                                                                     \
        return 0;
    RT_CUDA_FUNCTIONS(RESOLVE)
#undef RESOLVE
    return 1;
}

/* Profiling a CUDA model: its parts are the plan's launches.  Two profiled
 * runs (plain launches, an event after each) give the output of the graph
 * run before them (out, bytes) bit for bit; every launch the plan makes at
 * this batch is charged two calls and the others none; the part times add
 * up to at most the runs' device time (the events lie inside it); each part
 * names its kernel, its op (the label's first word) and its label. */
static void check_profile(vitc_model *m, vitc_context *c, const vitc_tensor *ti, vitc_tensor *to, const void *out,
                          size_t bytes)
{
    vitc_cuda_details cd;
    assert_int_equal(vitc_model_cuda_details(m, &cd), VITC_STATUS_OK);
    if (vitc_context_set_profiling(c, 1) != VITC_STATUS_OK)
        fail_msg("vitc_context_set_profiling: %s", vitc_last_error());
    assert_int_equal(vitc_context_profile_parts(c), cd.nlaunches);
    void *keep = to->data, *again = malloc(bytes);
    assert_non_null(again);
    to->data = again;
    double dev_ms = 0, ms;
    for (int r = 0; r < 2; r++) {
        if (vitc_run(c, ti, 1, to, 1) != VITC_STATUS_OK)
            fail_msg("profiled vitc_run: %s", vitc_last_error());
        assert_int_equal(vitc_context_device_ms(c, &ms), VITC_STATUS_OK);
        dev_ms += ms;
        if (memcmp(again, out, bytes) != 0)
            fail_msg("a profiled run (plain launches) differs from the graph run");
    }
    to->data = keep;
    free(again);
    double parts_ms = 0;
    int charged = 0, gemms = 0;
    for (int i = 0; i < cd.nlaunches; i++) {
        vitc_profile_part p;
        vitc_cuda_launch_info li;
        assert_int_equal(vitc_context_profile_part(c, i, &p), VITC_STATUS_OK);
        assert_int_equal(vitc_model_cuda_launch(m, i, &li), VITC_STATUS_OK);
        int here = ti->dims[0] >= li.min_batch && ti->dims[0] <= li.max_batch;
        if (p.calls != (here ? 2 : 0) || p.seconds < 0 || !p.kernels || !*p.op || !strstr(p.source, p.op))
            fail_msg("part %d (%s, %s, %s): %lld calls, %g s; launch for batches %lld-%lld", i, p.kernels, p.op,
                     p.source, (long long)p.calls, p.seconds, (long long)li.min_batch, (long long)li.max_batch);
        charged += here;
        gemms += strcmp(p.op, "gemm") == 0;
        parts_ms += 1e3 * p.seconds;
    }
    print_message("profile: %d of %d launches charged, %d gemm parts, %.3f ms in parts, %.3f ms device time\n",
                  charged, cd.nlaunches, gemms, parts_ms, dev_ms);
    assert_true(charged > 0 && gemms > 0);
    assert_true(parts_ms <= dev_ms * 1.01 + 1e-3);
    assert_int_equal(vitc_context_set_profiling(c, 0), VITC_STATUS_OK);
}

/* vitc_run_device on device buffers gives vitc_run's output bit for bit;
 * vitc_context_device_ms says how long the kernels took. */
static void test_device_pointers(void **state)
{
    (void)state;
    char model[4096], so[8400], cpu_so[8400];
    compile_timm("bf16", model, sizeof model, so, sizeof so);
    ir_tensor in, out_h, out_d;
    tu_read_npy("tests/models/timm.b3.input.npy", &in);
    int64_t odims[2] = {3, 10};
    assert_int_equal(ir_tensor_alloc(&out_h, IR_F32, 2, odims), 0);
    assert_int_equal(ir_tensor_alloc(&out_d, IR_F32, 2, odims), 0);
    vitc_model *m;
    vitc_context *c;
    assert_int_equal(vitc_model_load(so, &m), VITC_STATUS_OK);
    setenv("VITC_CUDA_POISON", "1", 1);
    vitc_status cs = vitc_context_create(m, 0, &c);
    unsetenv("VITC_CUDA_POISON");
    if (cs != VITC_STATUS_OK)
        fail_msg("%s", vitc_last_error());
    double ms = -1;
    assert_int_equal(vitc_context_device_ms(c, &ms), VITC_STATUS_INVALID_ARGUMENT); /* no run yet */
    vitc_tensor ti = {.dtype = VITC_DTYPE_F32, .rank = 4, .dims = {3, 3, 32, 32}, .data = in.data};
    vitc_tensor to = {.dtype = VITC_DTYPE_F32, .rank = 2, .dims = {3, 10}, .data = out_h.data};
    if (vitc_run(c, &ti, 1, &to, 1) != VITC_STATUS_OK)
        fail_msg("vitc_run: %s", vitc_last_error());
    assert_int_equal(vitc_context_device_ms(c, &ms), VITC_STATUS_OK);
    assert_true(ms >= 0 && ms < 10000);
    check_profile(m, c, &ti, &to, out_h.data, ir_tensor_nbytes(&out_h));

    assert_true(load_driver());
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr din, dout;
    size_t ib = ir_tensor_nbytes(&in), ob = ir_tensor_nbytes(&out_d);
    assert_int_equal(cu.DeviceGet(&dev, 0), 0);
    assert_int_equal(cu.DevicePrimaryCtxRetain(&ctx, dev), 0);
    assert_int_equal(cu.CtxSetCurrent(ctx), 0);
    assert_int_equal(cu.MemAlloc(&din, ib), 0);
    assert_int_equal(cu.MemAlloc(&dout, ob), 0);
    assert_int_equal(cu.MemcpyHtoD(din, in.data, ib), 0);
    assert_int_equal(cu.CtxSynchronize(), 0);
    ti.data = (void *)(uintptr_t)din;
    to.data = (void *)(uintptr_t)dout;
    if (vitc_run_device(c, &ti, 1, &to, 1) != VITC_STATUS_OK)
        fail_msg("vitc_run_device: %s", vitc_last_error());
    assert_int_equal(cu.MemcpyDtoHAsync(out_d.data, dout, ob, NULL), 0);
    assert_int_equal(cu.CtxSynchronize(), 0);
    if (memcmp(out_h.data, out_d.data, ob) != 0)
        fail_msg("vitc_run_device and vitc_run differ");
    assert_int_equal(vitc_context_device_ms(c, &ms), VITC_STATUS_OK);
    print_message("vitc_run_device = vitc_run at batch 3; device time %.3f ms\n", ms);
    to.dims[0] = 2; /* the same checks as vitc_run */
    assert_int_equal(vitc_run_device(c, &ti, 1, &to, 1), VITC_STATUS_SHAPE_MISMATCH);
    cu.MemFree(din), cu.MemFree(dout);
    cu.DevicePrimaryCtxRelease(dev);
    vitc_context_free(c);
    vitc_model_free(m);

    /* a CPU model has no device entry point */
    snprintf(cpu_so, sizeof cpu_so, "%s/timm.cpu.so", tmpdir);
    const char *args[] = {model, "-o", cpu_so, NULL};
    char *o, *e;
    assert_int_equal(tu_run_vitc(args, &o, &e), 0);
    free(o), free(e);
    assert_int_equal(vitc_model_load(cpu_so, &m), VITC_STATUS_OK);
    assert_int_equal(vitc_context_create(m, 1, &c), VITC_STATUS_OK);
    to.data = out_h.data, ti.data = in.data, to.dims[0] = 3;
    assert_int_equal(vitc_run_device(c, &ti, 1, &to, 1), VITC_STATUS_INVALID_ARGUMENT);
    assert_int_equal(vitc_context_device_ms(c, &ms), VITC_STATUS_INVALID_ARGUMENT);
    vitc_context_free(c);
    vitc_model_free(m);
    ir_tensor_free(&in), ir_tensor_free(&out_h), ir_tensor_free(&out_d);
}

/* `vitc run` and `vitc compare` on a CUDA model. */
static void test_cli_on_gpu(void **state)
{
    (void)state;
    char model[4096], so[8400], in[4096], outdir[8400];
    compile_timm("fp16", model, sizeof model, so, sizeof so);
    tu_path(in, sizeof in, "tests/models/timm.b3.input.npy");
    snprintf(outdir, sizeof outdir, "%s/out", tmpdir);
    mkdir(outdir, 0755);
    const char *run[] = {"run", so, "--input", in, "--output-dir", outdir, "--repeat", "3", NULL};
    char *out, *err;
    int rc = tu_run_vitc(run, &out, &err);
    print_message("vitc run: exit %d\n%s%s", rc, out, err);
    assert_int_equal(rc, 0);
    free(out), free(err);
    const char *prof[] = {"run", so, "--input", in, "--output-dir", outdir, "--repeat", "2", "--profile", "--top", "5",
                          NULL};
    rc = tu_run_vitc(prof, &out, &err);
    print_message("vitc run --profile: exit %d\n%s%s", rc, out, err);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "profile: "));
    assert_non_null(strstr(out, "by op: "));
    assert_non_null(strstr(out, " gemm "));
    free(out), free(err);
    const char *cmp[] = {"compare", model, so, "--batch", "3", NULL};
    rc = tu_run_vitc(cmp, &out, &err);
    print_message("vitc compare: exit %d\n%s%s", rc, out, err);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "PASS"));
    free(out), free(err);
}

static int setup(void **state)
{
    nfixtures = tu_fixtures(fixtures, 64);
    tu_nvrtc_cache(); /* programs shared by fixtures and builds compile once */
    *state = tu_tmpdir(tmpdir, sizeof tmpdir);
    return *state ? 0 : -1;
}

int main(void)
{
#ifdef VITC_HAVE_CUDA
    if (vitc_cuda_device(device, sizeof device, &arch) != VITC_STATUS_OK)
        snprintf(no_device, sizeof no_device, "%s", vitc_last_error());
#else
    snprintf(no_device, sizeof no_device, "this vitc was built without the CUDA backend (no NVRTC at configure time)");
#endif
    if (*no_device) {
        printf("test_cuda_gpu: skipped: no CUDA device (%s)\n", no_device);
        return TU_SKIP_RC;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixtures_on_gpu),
        cmocka_unit_test(test_device_pointers),
        cmocka_unit_test(test_cli_on_gpu),
    };
    return cmocka_run_group_tests(tests, setup, tu_teardown_tmpdir);
}
