/* test_cli_backend.c: the commands that work on compiled models, as a user
 * meets them: `vitc inspect`, `vitc run MODEL.so`, `vitc compare` and the
 * classify example.  First on the hand-written ABI models of
 * tests/data/runtime (toy_model.c, with toy_y.onnx as its ONNX twin), then
 * on fixtures compiled by `vitc MODEL.onnx -o MODEL.so`, checked against
 * PyTorch's outputs and the reference interpreter. */
#include "testutil.h"

#include <vitc/runtime.h>

#include <libgen.h>
#include <pthread.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The build directory holds vitc, the toy models and the examples. */
static char *build_path(char *buf, size_t n, const char *rel)
{
    const char *bin = getenv("VITC_BIN");
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", bin ? bin : "./vitc");
    snprintf(buf, n, "%s/%s", dirname(tmp), rel);
    return buf;
}

static char *toy(char *buf, size_t n, const char *name)
{
    char rel[256];
    snprintf(rel, sizeof rel, "tests/data/runtime/models/%s.so", name);
    return build_path(buf, n, rel);
}

static void write_npy(const char *path, ir_dtype dt, int rank, const int64_t *dims, const double *v)
{
    ir_tensor t;
    assert_int_equal(ir_tensor_alloc(&t, dt, rank, dims), 0);
    for (int64_t i = 0; i < ir_tensor_numel(&t); i++)
        ir_tensor_set(&t, i, v[i]);
    vitc_diag d;
    vitc_diag_init(&d, path);
    assert_int_equal(ir_npy_write(path, &t, &d), 0);
    ir_tensor_free(&t);
}

/* Runs vitc; fails unless it exits with want.  Returns stdout (free it). */
static char *vitc_expect(int want, const char *const *args, const char *what)
{
    char *out, *err;
    int rc = tu_run_vitc(args, &out, &err);
    if (rc != want)
        fail_msg("%s: exit %d, expected %d\nstdout: %s\nstderr: %s", what, rc, want, out, err);
    if (want == 2 && !strstr(err, "vitc: "))
        fail_msg("%s: exit 2 without a message: %s", what, err);
    size_t lo = strlen(out), le = strlen(err);
    out = realloc(out, lo + le + 1);
    memcpy(out + lo, err, le + 1); /* stdout, then stderr */
    free(err);
    return out;
}

static void expect_contains(const char *text, const char *needle, const char *what)
{
    if (!strstr(text, needle))
        fail_msg("%s: output does not contain '%s':\n%s", what, needle, text);
}

/* vitc_expect, then fails unless what vitc wrote (printed here) contains
 * each of the needles that follow what, up to a NULL. */
__attribute__((sentinel)) static void vitc_expect_text(int want, const char *const *args, const char *what, ...)
{
    char *out = vitc_expect(want, args, what);
    printf("%s", out);
    va_list ap;
    va_start(ap, what);
    for (const char *needle; (needle = va_arg(ap, const char *));)
        expect_contains(out, needle, what);
    va_end(ap);
    free(out);
}

static void test_inspect_toy(void **state)
{
    char so[4096];
    const char *args[] = {"inspect", toy(so, sizeof so, "toy_model"), NULL};
    char *out = vitc_expect(0, args, "inspect toy_model.so");
    printf("%s", out);
    const char *want[] = {"source:     toy_model.c", "vitc toy-1, model ABI 1", "batch:      1 to 8",
                          "x                        f32[B,4]", "shift                    f32[4]",
                          "argmax                   i64[B]", "workspace:  128 bytes", "weights:    32 bytes, embedded",
                          "kernels (2 compiled, 2 launches):\n  toy_scale\n  toy_finish"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        expect_contains(out, want[i], "inspect");
    free(out);

    const char *bad[] = {"inspect", toy(so, sizeof so, "toy_not_a_model"), NULL};
    free(vitc_expect(2, bad, "inspect a library without descriptor"));
    const char *v2[] = {"inspect", toy(so, sizeof so, "toy_model_v2"), NULL};
    vitc_expect_text(2, v2, "inspect a model of ABI 2", "ABI 2", NULL);
    char onnx[4096];
    const char *o[] = {"inspect", tu_path(onnx, sizeof onnx, "tests/data/runtime/toy_y.onnx"), NULL};
    free(vitc_expect(2, o, "inspect an ONNX file"));

    /* inspect reads a file as data: a constructor in it does not run.  run
     * refuses a model built for CPU features this machine lacks before
     * opening it (so its constructor does not run either). */
    char dir[4096], marker[4200], npy[4200];
    tu_tmpdir(dir, sizeof dir);
    snprintf(marker, sizeof marker, "%s/constructor-ran", dir);
    setenv("VITC_TOY_CTOR_FILE", marker, 1);
    const char *ctor[] = {"inspect", toy(so, sizeof so, "toy_model_ctor"), NULL};
    free(vitc_expect(0, ctor, "inspect a model with a constructor"));
    assert_int_not_equal(access(marker, F_OK), 0);
    const char *fj[] = {"inspect", "--json", toy(so, sizeof so, "toy_model_foreign_cpu"), NULL};
    vitc_expect_text(0, fj, "inspect a model for another CPU", "\"amx-tile\"", NULL);
    snprintf(npy, sizeof npy, "%s/x.npy", dir);
    const int64_t dims[] = {2, 4};
    const double x[8] = {0};
    write_npy(npy, IR_F32, 2, dims, x);
    const char *fr[] = {"run", toy(so, sizeof so, "toy_model_foreign_cpu"), "--input", npy, NULL};
    vitc_expect_text(2, fr, "run a model for another CPU", "CPU features this machine lacks", NULL);
    assert_int_not_equal(access(marker, F_OK), 0);
    const char *lr[] = {"run", toy(so, sizeof so, "toy_model_ctor"), "--input", npy, NULL};
    free(vitc_expect(2, lr, "run a model with a constructor (one input missing)"));
    assert_int_equal(access(marker, F_OK), 0); /* loading it does run it: the check above can fail */
    unsetenv("VITC_TOY_CTOR_FILE");
}

static void test_run_toy(void **state)
{
    char dir[256], so[4096], x[512], shift[512], y[512], am[512], x9[512];
    assert_non_null(tu_tmpdir(dir, sizeof dir));
    snprintf(x, sizeof x, "%s/x.npy", dir);
    snprintf(shift, sizeof shift, "%s/shift.npy", dir);
    snprintf(x9, sizeof x9, "%s/x9.npy", dir);
    double xv[12], sv[4] = {0.5, -0.25, 1, 0}, zeros[36] = {0};
    for (int i = 0; i < 12; i++)
        xv[i] = i * 0.75 - 4;
    write_npy(x, IR_F32, 2, (int64_t[]){3, 4}, xv);
    write_npy(shift, IR_F32, 1, (int64_t[]){4}, sv);
    write_npy(x9, IR_F32, 2, (int64_t[]){9, 4}, zeros);
    char xs[600], ss[600];
    snprintf(xs, sizeof xs, "x=%s", x);
    snprintf(ss, sizeof ss, "shift=%s", shift);

    /* Named inputs in another order than the model's, timed. */
    const char *args[] = {"run", toy(so, sizeof so, "toy_model"), "--input", ss, "--input", xs, "--output-dir", dir,
                          "--repeat", "5", "--threads", "2", NULL};
    vitc_expect_text(0, args, "run toy_model.so", "y: f32[3,4] -> ", "argmax: i64[3] -> ",
                     "compiled model, batch 3, 2 threads: 5 runs: min ", NULL);
    snprintf(y, sizeof y, "%s/y.npy", dir);
    snprintf(am, sizeof am, "%s/argmax.npy", dir);
    ir_tensor ty, ta;
    tu_read_npy(y, &ty);
    tu_read_npy(am, &ta);
    const double scale[4] = {2, -1, 0.5, 3}, bias[4] = {1, 0, -2, 0.25};
    for (int r = 0; r < 3; r++) {
        int best = 0;
        for (int c = 0; c < 4; c++) {
            double want = scale[c] * xv[r * 4 + c] + bias[c] + sv[c], got = ir_tensor_get(&ty, r * 4 + c);
            if (fabs(got - want) > 1e-6 * (1 + fabs(want)))
                fail_msg("y[%d,%d] = %g, expected %g", r, c, got, want);
            if (want > scale[best] * xv[r * 4 + best] + bias[best] + sv[best])
                best = c;
        }
        if (ir_tensor_get_i64(&ta, r) != best)
            fail_msg("argmax[%d] = %lld, expected %d", r, (long long)ir_tensor_get_i64(&ta, r), best);
    }
    ir_tensor_free(&ty), ir_tensor_free(&ta);

    /* Bad inputs: exit 2 with the runtime's message. */
    const char *big[] = {"run", so, "--input", x9, "--input", shift, "--output-dir", dir, NULL};
    vitc_expect_text(2, big, "run at batch 9", "batch 9; the model runs batches 1 to 8", "larger --batch", NULL);
    const char *swapped[] = {"run", so, "--input", shift, "--input", x, "--output-dir", dir, NULL};
    vitc_expect_text(2, swapped, "run with inputs swapped", "input 'x' has rank 1", NULL);
    const char *one[] = {"run", so, "--input", x, NULL};
    free(vitc_expect(2, one, "run with one input of two"));
    const char *unknown[] = {"run", so, "--input", "pixels=x.npy", "--input", ss, NULL};
    vitc_expect_text(2, unknown, "run with an unknown input name", "no input named 'pixels'", NULL);
    const char *threads[] = {"run", so, "--input", x, "--input", shift, "--threads", "-1", NULL};
    free(vitc_expect(2, threads, "run --threads -1"));
    tu_rmtree(dir);
}

/* compare on toy_y.onnx against its hand-written twin: within tolerance on
 * random and on given inputs; a model with one bias off by 0.01 fails (exit
 * 1) with that number, and --bisect clears every pass. */
static void test_compare_toy(void **state)
{
    char onnx[4096], wrong[4096], so[4096];
    tu_path(onnx, sizeof onnx, "tests/data/runtime/toy_y.onnx");
    tu_path(wrong, sizeof wrong, "tests/data/runtime/toy_y_wrong.onnx");
    toy(so, sizeof so, "toy_model_y");

    const char *ok[] = {"compare", onnx, so, NULL};
    vitc_expect_text(0, ok, "compare toy_y", "seeded random normal (seed 0), batch 2", "f32[2,4]", "PASS", NULL);
    const char *b8[] = {"compare", onnx, so, "--batch", "8", "--seed", "7", NULL};
    vitc_expect_text(0, b8, "compare toy_y at batch 8", "f32[8,4]", NULL);

    const char *bad[] = {"compare", wrong, so, "--bisect", NULL};
    char *out = vitc_expect(1, bad, "compare toy_y_wrong");
    printf("%s", out);
    double max_abs = -1, max_rel = -1;
    const char *row = strstr(out, "\ny ");
    assert_non_null(row);
    assert_int_equal(sscanf(row, "\ny %*s %lf %lf", &max_abs, &max_rel), 2);
    if (fabs(max_abs - 0.01) > 1e-6)
        fail_msg("max_abs %g, expected 0.01 (the bias moved by 0.01)", max_abs);
    expect_contains(out, "FAIL", "compare wrong");
    expect_contains(out, "worst element of y: [", "compare wrong");
    expect_contains(out, "after dce", "compare --bisect");
    expect_contains(out, "every pass keeps the outputs within tolerance", "compare --bisect");
#ifdef VITC_HAVE_LLVM /* the cuts of toy_y_wrong.onnx compile right: the .so differs */
    expect_contains(out, "the difference is in", "compare --bisect over tensors");
#endif
    free(out);
    /* A looser tolerance passes it: 0.01 <= 0.02. */
    const char *loose[] = {"compare", wrong, so, "--atol", "0.02", NULL};
    free(vitc_expect(0, loose, "compare toy_y_wrong --atol 0.02"));

    char toy2[4096];
    const char *mismatch[] = {"compare", onnx, toy(toy2, sizeof toy2, "toy_model"), NULL};
    vitc_expect_text(2, mismatch, "compare against a model with another signature", "2 inputs and 2 outputs",
                     NULL);
    const char *usage[] = {"compare", so, onnx, NULL};
    free(vitc_expect(2, usage, "compare with the models swapped"));

    /* a .so vitc compiled records its model's hash: compare refuses another
     * model, even one with the same signature (toy_y_wrong differs in one bias) */
#ifdef VITC_HAVE_LLVM
    {
        char dir[4096], mine[4200];
        tu_tmpdir(dir, sizeof dir);
        snprintf(mine, sizeof mine, "%s/toy_y.so", dir);
        const char *cc[] = {onnx, "-o", mine, "--quiet", NULL};
        free(vitc_expect(0, cc, "compile toy_y"));
        const char *same[] = {"compare", onnx, mine, NULL};
        free(vitc_expect(0, same, "compare toy_y with its own .so"));
        const char *other[] = {"compare", wrong, mine, NULL};
        char *out2, *err2;
        int rc = tu_run_vitc(other, &out2, &err2);
        if (rc != 2 || !strstr(err2, "was compiled from a different model than"))
            fail_msg("compare toy_y_wrong with toy_y's .so: exit %d, stderr %s", rc, err2);
        free(out2), free(err2);
        tu_rmtree(dir);
    }
#endif
}

/* ---- compiled fixtures ---- */

static char compile_dir[256];
/* Compiles tests/models/NAME into the shared temporary directory (once: a
 * second call finds the .so there) and fills so; any failure fails the test.
 * Skips the case (saying why) in a build without the CPU backend. */
static void compile_fixture(const char *name, char *so, size_t n)
{
#ifndef VITC_HAVE_LLVM
    print_message("skipped: built with VITC_LLVM=OFF, so `vitc MODEL.onnx -o MODEL.so` has no CPU backend\n");
    tu_skip();
#endif
    if (!compile_dir[0])
        assert_non_null(tu_tmpdir(compile_dir, sizeof compile_dir));
    char onnx[4096], rel[256];
    snprintf(rel, sizeof rel, "tests/models/%s", name);
    tu_path(onnx, sizeof onnx, rel);
    snprintf(so, n, "%s/%.*s.so", compile_dir, (int)(strlen(name) - 5), name);
    if (access(so, R_OK) == 0)
        return;
    char *out, *err;
    const char *args[] = {onnx, "-o", so, "--batch", "4", NULL};
    int rc = tu_run_vitc(args, &out, &err);
    if (rc != 0)
        fail_msg("vitc %s -o %s exited %d: %s", onnx, so, rc, err);
    free(out), free(err);
}

/* Runs `vitc run` (args, writing the model's one output to dir/output.npy);
 * returns its max rel error against the .npy at ref_path. */
static double run_error(const char *const *args, const char *dir, const char *ref_path, const char *what)
{
    free(vitc_expect(0, args, what));
    char got_path[4200];
    snprintf(got_path, sizeof got_path, "%s/output.npy", dir);
    ir_tensor got, ref;
    tu_read_npy(got_path, &got);
    tu_read_npy(ref_path, &ref);
    double e = ir_rel_error(&got, &ref);
    ir_tensor_free(&got), ir_tensor_free(&ref);
    return e;
}

static const char *const compiled_fixtures[] = {"timm-ts17.onnx", "torchvision-dynamo.onnx", "einops-ts13.onnx",
                                                "face_bn-ts13.onnx", "face_ln-dynamo.onnx"};

/* run, compare and inspect on compiled fixtures, against PyTorch's outputs at batch 3. */
static void test_compiled_fixtures(void **state)
{
    for (size_t f = 0; f < sizeof compiled_fixtures / sizeof *compiled_fixtures; f++) {
        const char *name = compiled_fixtures[f];
        char so[512], onnx[4096], rel[256], input[4096], ref_path[4096], family[64];
        compile_fixture(name, so, sizeof so);
        snprintf(family, sizeof family, "%.*s", (int)strcspn(name, "-"), name);
        snprintf(rel, sizeof rel, "tests/models/%s", name);
        tu_path(onnx, sizeof onnx, rel);
        snprintf(rel, sizeof rel, "tests/models/%s.b3.input.npy", family);
        tu_path(input, sizeof input, rel);
        snprintf(rel, sizeof rel, "tests/models/%s.b3.output.npy", family);
        tu_path(ref_path, sizeof ref_path, rel);

        char dir[256];
        assert_non_null(tu_tmpdir(dir, sizeof dir));
        const char *run[] = {"run", so, "--input", input, "--output-dir", dir, NULL};
        double e = run_error(run, dir, ref_path, name);
        printf("%-26s vitc run MODEL.so vs PyTorch at batch 3: max rel error %.3g\n", name, e);
        if (!(e <= 1e-4))
            fail_msg("%s: compiled output differs from PyTorch by %g (tolerance 1e-4)", name, e);
        tu_rmtree(dir);

        const char *cmp[] = {"compare", onnx, so, NULL};
        vitc_expect_text(0, cmp, name, "PASS", NULL);
        const char *insp[] = {"inspect", so, NULL};
        char *out = vitc_expect(0, insp, name);
        expect_contains(out, name, "inspect source");
        expect_contains(out, "batch:      1 to 4", "inspect batch");
        /* two blocks: each repeated kernel listed once, with its launches;
         * no line (the feature list included) much wider than a terminal */
        expect_contains(out, " compiled, ", "inspect kernel count");
        expect_contains(out, "(2 launches)", "inspect repeated kernels");
        for (const char *l = out; *l; l += strcspn(l, "\n") + (l[strcspn(l, "\n")] != 0))
            if (strcspn(l, "\n") > 120)
                fail_msg("inspect prints a line of %zu characters: %.60s...", strcspn(l, "\n"), l);
        free(out);
    }
    /* Without a .so, compare compiles one; at a tolerance no float32 code meets
     * it fails, and --bisect names the first tensor that parts. */
    char onnx0[4096];
    tu_path(onnx0, sizeof onnx0, "tests/models/timm-ts17.onnx");
    const char *tight[] = {"compare", onnx0, "--rtol", "1e-9", "--bisect", NULL};
    char *tout = vitc_expect(1, tight, "compare timm-ts17 --rtol 1e-9 --bisect");
    printf("%s", tout);
    expect_contains(tout, "compiling ", "compare without .so");
    expect_contains(tout, "first parts from the reference at tensor '", "compare --bisect over tensors");
    free(tout);

    /* A model compared with another model's compiled code (same signature)
     * is refused: the .so records the hash of the file it came from. */
    char so[512], onnx[4096], *out, *err;
    compile_fixture("timm-ts17.onnx", so, sizeof so);
    tu_path(onnx, sizeof onnx, "tests/models/torchvision-ts17.onnx");
    const char *cmp[] = {"compare", onnx, so, NULL};
    int rc = tu_run_vitc(cmp, &out, &err);
    if (rc != 2 || !strstr(err, "was compiled from a different model than"))
        fail_msg("torchvision-ts17.onnx against timm-ts17's .so: exit %d, stderr %s", rc, err);
    free(out), free(err);
}

/* --weights external: the .so loads its weights from MODEL.so.weights beside
 * it, and refuses a missing or altered file. */
static void test_external_weights_compiled(void **state)
{
    char so[512], onnx[4096], input[4096], refp[4096];
    compile_fixture("timm-ts17.onnx", so, sizeof so);
    char ext[600], wfile[700], moved[720];
    snprintf(ext, sizeof ext, "%s/ext.so", compile_dir);
    snprintf(wfile, sizeof wfile, "%s.weights", ext);
    snprintf(moved, sizeof moved, "%s.moved", wfile);
    tu_path(onnx, sizeof onnx, "tests/models/timm-ts17.onnx");
    tu_path(input, sizeof input, "tests/models/timm.b1.input.npy");
    tu_path(refp, sizeof refp, "tests/models/timm.b1.output.npy");
    const char *comp[] = {onnx, "-o", ext, "--weights", "external", "--batch", "2", NULL};
    free(vitc_expect(0, comp, "compile --weights external"));
    assert_int_equal(access(wfile, R_OK), 0);
    const char *insp[] = {"inspect", ext, NULL};
    vitc_expect_text(0, insp, "inspect ext.so", "in external file ext.so.weights", NULL);

    const char *run[] = {"run", ext, "--input", input, "--output-dir", compile_dir, NULL};
    double e = run_error(run, compile_dir, refp, "run with external weights");
    printf("external weights: vitc run vs PyTorch at batch 1: max rel error %.3g\n", e);
    if (!(e <= 1e-4))
        fail_msg("external weights: output differs from PyTorch by %g", e);

    assert_int_equal(rename(wfile, moved), 0);
    vitc_expect_text(2, run, "run without the weights file", "ext.so.weights", NULL);
    /* The same size, one byte changed. */
    FILE *a = fopen(moved, "rb"), *b = fopen(wfile, "wb");
    assert_non_null(a);
    assert_non_null(b);
    int c;
    long pos = 0;
    while ((c = fgetc(a)) != EOF)
        fputc(pos++ == 1000 ? c ^ 0x40 : c, b);
    fclose(a);
    assert_int_equal(fclose(b), 0);
    vitc_expect_text(2, run, "run with an altered weights file", "does not belong to this model", NULL);
}

typedef struct {
    vitc_model *m;
    const ir_tensor *in;
    const float *want;
    size_t nbytes;
    int mismatches;
    char why[256];
} conc_arg;

static void *conc_worker(void *p)
{
    conc_arg *a = p;
    vitc_context *c[2] = {NULL, NULL};
    float *out = malloc(a->nbytes);
    vitc_tensor in = {.dtype = VITC_DTYPE_F32, .rank = a->in->rank, .data = a->in->data};
    for (int k = 0; k < a->in->rank; k++)
        in.dims[k] = a->in->dims[k];
    vitc_tensor o = {.dtype = VITC_DTYPE_F32, .rank = 2, .dims = {a->in->dims[0], (int64_t)(a->nbytes / 4) / a->in->dims[0]},
                     .data = out};
    for (int k = 0; k < 2; k++)
        if (vitc_context_create(a->m, 2, &c[k]) != VITC_STATUS_OK) {
            snprintf(a->why, sizeof a->why, "%s", vitc_last_error());
            a->mismatches++;
        }
    for (int it = 0; it < 20 && !a->mismatches; it++) {
        if (vitc_run(c[it & 1], &in, 1, &o, 1) != VITC_STATUS_OK) {
            snprintf(a->why, sizeof a->why, "%s", vitc_last_error());
            a->mismatches++;
        } else if (memcmp(out, a->want, a->nbytes) != 0) {
            snprintf(a->why, sizeof a->why, "run %d differs from the single-threaded run", it);
            a->mismatches++;
        }
    }
    vitc_context_free(c[0]);
    vitc_context_free(c[1]);
    free(out);
    return NULL;
}

/* A compiled model from 4 threads x 2 contexts at once (2 pool threads each):
 * every output bit-identical to a single-threaded run. */
static void test_compiled_concurrent(void **state)
{
    char so[512], input[4096];
    compile_fixture("timm-ts17.onnx", so, sizeof so);
    tu_path(input, sizeof input, "tests/models/timm.b3.input.npy");
    ir_tensor in;
    tu_read_npy(input, &in);
    vitc_model *m;
    if (vitc_model_load(so, &m) != VITC_STATUS_OK)
        fail_msg("%s", vitc_last_error());
    vitc_tensor_info info;
    assert_int_equal(vitc_model_output(m, 0, &info), VITC_STATUS_OK);
    size_t nbytes = (size_t)in.dims[0] * (size_t)info.dims[1] * 4;
    float *want = malloc(nbytes);
    vitc_context *c;
    assert_int_equal(vitc_context_create(m, 1, &c), VITC_STATUS_OK);
    vitc_tensor vin = {.dtype = VITC_DTYPE_F32, .rank = in.rank, .data = in.data};
    for (int k = 0; k < in.rank; k++)
        vin.dims[k] = in.dims[k];
    vitc_tensor vout = {.dtype = VITC_DTYPE_F32, .rank = 2, .dims = {in.dims[0], info.dims[1]}, .data = want};
    assert_int_equal(vitc_run(c, &vin, 1, &vout, 1), VITC_STATUS_OK);
    vitc_context_free(c);

    pthread_t th[4];
    conc_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (conc_arg){.m = m, .in = &in, .want = want, .nbytes = nbytes};
        assert_int_equal(pthread_create(&th[i], NULL, conc_worker, &args[i]), 0);
    }
    int bad = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        if (args[i].mismatches)
            printf("thread %d: %s\n", i, args[i].why);
        bad += args[i].mismatches;
    }
    printf("timm-ts17.so, 4 threads x 2 contexts x 20 runs at batch %lld: %d differ from the 1-thread run\n",
           (long long)in.dims[0], bad);
    assert_int_equal(bad, 0);
    free(want);
    ir_tensor_free(&in);
    vitc_model_free(m);
}

/* The classify example on a compiled fixture: its top 5 match the reference
 * interpreter run on the very input it built (--dump-input). */
static void test_classify_example(void **state)
{
    char classify[4096], so[512], onnx[4096], image[4096];
    build_path(classify, sizeof classify, "examples/classify");
    if (access(classify, X_OK) != 0) {
        printf("skipped: %s was not built (needs Debian's libstb-dev)\n", classify);
        tu_skip();
    }
    compile_fixture("timm-ts17.onnx", so, sizeof so);
    tu_path(onnx, sizeof onnx, "tests/models/timm-ts17.onnx");
    tu_path(image, sizeof image, "tests/data/runtime/pattern64.png");
    char dir[256], dumped[512], cmd[16384];
    assert_non_null(tu_tmpdir(dir, sizeof dir));
    snprintf(dumped, sizeof dumped, "%s/input.npy", dir);
    snprintf(cmd, sizeof cmd, "'%s' '%s' '%s' --dump-input '%s' --threads 2", classify, so, image, dumped);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char line[512];
    long long cls[5];
    double score[5];
    int n = 0;
    while (fgets(line, sizeof line, p)) {
        printf("classify: %s", line);
        int rank;
        if (n < 5 && sscanf(line, " %d. class %lld score %lf", &rank, &cls[n], &score[n]) == 3)
            n++;
    }
    int rc = pclose(p);
    if (rc != 0 || n != 5)
        fail_msg("classify exited %d with %d top-5 lines", rc, n);

    const char *run[] = {"run", onnx, "--input", dumped, "--output-dir", dir, NULL};
    free(vitc_expect(0, run, "interpreter on classify's input"));
    char ref_path[512];
    snprintf(ref_path, sizeof ref_path, "%s/output.npy", dir);
    ir_tensor ref;
    tu_read_npy(ref_path, &ref);
    double maxref = 0;
    for (int64_t i = 0; i < ir_tensor_numel(&ref); i++)
        maxref = fmax(maxref, fabs(ir_tensor_get(&ref, i)));
    for (int r = 0; r < 5; r++) {
        double want = ir_tensor_get(&ref, cls[r]);
        for (int64_t i = 0; i < ir_tensor_numel(&ref); i++) /* nothing outside the top r beats it */
            if (ir_tensor_get(&ref, i) > want + 1e-4 * maxref) {
                int listed = 0;
                for (int k = 0; k < r; k++)
                    listed |= cls[k] == i;
                if (!listed)
                    fail_msg("rank %d: class %lld (%g), but the interpreter scores class %lld higher (%g)", r + 1,
                             cls[r], want, (long long)i, ir_tensor_get(&ref, i));
            }
        if (fabs(score[r] - want) > 1e-4 * maxref + 1e-6)
            fail_msg("rank %d, class %lld: score %.6f, interpreter %.6f", r + 1, cls[r], score[r], want);
    }
    ir_tensor_free(&ref);
    tu_rmtree(dir);
}

static int teardown(void **state)
{
    if (compile_dir[0])
        tu_rmtree(compile_dir);
    return 0;
}

TU_MAIN(NULL, teardown, test_inspect_toy, test_run_toy, test_compare_toy, test_compiled_fixtures,
        test_external_weights_compiled, test_compiled_concurrent, test_classify_example)
