/* test_runtime.c: the runtime library (include/vitc/runtime.h) as a program
 * that deploys a model meets it: this test links only the runtime and loads
 * hand-written models that implement runtime/abi.h (tests/data/runtime/
 * toy_model.c in variants).  It checks the reported signature, runs at every
 * batch against values computed here, every bad argument (each must return
 * its status and a message, and leave the outputs alone), external weights
 * (missing, wrong size, wrong checksum), where big weights and workspaces
 * are placed (huge pages), files that are not vitc models, and
 * several contexts running on several threads at once with identical results. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <vitc/runtime.h>

#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define COLS 4
#define MAX_BATCH 8

static const float scale[COLS] = {2, -1, 0.5f, 3}, bias[COLS] = {1, 0, -2, 0.25f};
static const float shift[COLS] = {0.5f, -0.25f, 1, 0};

static char *toy_path(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/%s.so", VITC_TOY_MODEL_DIR, name);
    return buf;
}

static vitc_model *load_toy(const char *name)
{
    char path[4096];
    vitc_model *m = NULL;
    vitc_status st = vitc_model_load(toy_path(path, sizeof path, name), &m);
    if (st != VITC_STATUS_OK)
        fail_msg("loading %s: %s: %s", path, vitc_status_string(st), vitc_last_error());
    return m;
}

/* Deterministic input: row r, column c. */
static float x_at(int64_t r, int c, int seed)
{
    return (float)(((r * 7 + c * 3 + seed * 11) % 17) - 8) * 0.375f;
}

/* A run's buffers at one batch, with the expected outputs computed here. */
typedef struct {
    int64_t batch;
    float x[MAX_BATCH * COLS + COLS], y[MAX_BATCH * COLS + COLS], want_y[MAX_BATCH * COLS];
    long long argmax[MAX_BATCH + 1], want_argmax[MAX_BATCH];
    vitc_tensor in[2], out[2];
} toy_run;

static void toy_setup(toy_run *t, int64_t batch, int seed)
{
    memset(t, 0, sizeof *t);
    t->batch = batch;
    for (int64_t r = 0; r < batch; r++) {
        int best = 0;
        for (int c = 0; c < COLS; c++) {
            float p = scale[c] * x_at(r, c, seed);
            float v = p + bias[c];
            v = v + shift[c];
            t->x[r * COLS + c] = x_at(r, c, seed);
            t->want_y[r * COLS + c] = v;
            if (v > t->want_y[r * COLS + best])
                best = c;
        }
        t->want_argmax[r] = best;
    }
    for (int i = 0; i < MAX_BATCH * COLS + COLS; i++)
        t->y[i] = -12345.0f; /* sentinel: a failed run must not write */
    for (int i = 0; i <= MAX_BATCH; i++)
        t->argmax[i] = -7;
    t->in[0] = (vitc_tensor){.dtype = VITC_DTYPE_F32, .rank = 2, .dims = {batch, COLS}, .data = t->x};
    t->in[1] = (vitc_tensor){.dtype = VITC_DTYPE_F32, .rank = 1, .dims = {COLS}, .data = (void *)shift};
    t->out[0] = (vitc_tensor){.dtype = VITC_DTYPE_F32, .rank = 2, .dims = {batch, COLS}, .data = t->y};
    t->out[1] = (vitc_tensor){.dtype = VITC_DTYPE_I64, .rank = 1, .dims = {batch}, .data = t->argmax};
}

/* Fails with the numbers unless the outputs are what toy_setup computed and
 * nothing past the batch was written. */
static void toy_check(const toy_run *t, const char *what)
{
    for (int64_t i = 0; i < t->batch * COLS; i++)
        if (t->y[i] != t->want_y[i])
            fail_msg("%s, batch %lld: y[%lld] = %g, expected %g", what, (long long)t->batch, (long long)i, t->y[i],
                     t->want_y[i]);
    for (int64_t r = 0; r < t->batch; r++)
        if (t->argmax[r] != t->want_argmax[r])
            fail_msg("%s, batch %lld: argmax[%lld] = %lld, expected %lld", what, (long long)t->batch, (long long)r,
                     t->argmax[r], t->want_argmax[r]);
    if (t->y[t->batch * COLS] != -12345.0f || t->argmax[t->batch] != -7)
        fail_msg("%s, batch %lld: wrote past the end of the outputs", what, (long long)t->batch);
}

static void test_signature(void **state)
{
    vitc_model *m = load_toy("toy_model");
    assert_int_equal(vitc_model_num_inputs(m), 2);
    assert_int_equal(vitc_model_num_outputs(m), 2);
    assert_int_equal(vitc_model_max_batch(m), MAX_BATCH);
    assert_string_equal(vitc_model_target(m), "cpu");
    assert_string_equal(vitc_model_compiler_version(m), "toy-1");

    vitc_tensor_info info;
    assert_int_equal(vitc_model_input(m, 0, &info), VITC_STATUS_OK);
    assert_string_equal(info.name, "x");
    assert_int_equal(info.dtype, VITC_DTYPE_F32);
    assert_int_equal(info.rank, 2);
    assert_true(info.dims[0] == 1 && info.is_batch[0] == 1 && info.dims[1] == COLS && info.is_batch[1] == 0);
    assert_int_equal(vitc_model_input(m, 1, &info), VITC_STATUS_OK);
    assert_string_equal(info.name, "shift");
    assert_true(info.rank == 1 && info.dims[0] == COLS && info.is_batch[0] == 0);
    assert_int_equal(vitc_model_output(m, 0, &info), VITC_STATUS_OK);
    assert_string_equal(info.name, "y");
    assert_int_equal(vitc_model_output(m, 1, &info), VITC_STATUS_OK);
    assert_string_equal(info.name, "argmax");
    assert_true(info.dtype == VITC_DTYPE_I64 && info.rank == 1 && info.is_batch[0] == 1);

    vitc_model_details d;
    assert_int_equal(vitc_model_get_details(m, &d), VITC_STATUS_OK);
    assert_int_equal(d.abi_version, 1);
    assert_string_equal(d.source, "toy_model.c");
    assert_string_equal(d.triple, "x86_64-pc-linux-gnu");
    assert_int_equal(d.workspace_bytes, MAX_BATCH * COLS * 4);
    assert_int_equal(d.weights_bytes, 32);
    assert_null(d.weights_file);
    assert_int_equal(d.nkernels, 2);
    assert_string_equal(d.kernel_names[1], "toy_finish");
    vitc_model_free(m);
}

/* Every batch from 1 to the limit, with 1, 2, 3 and 16 threads (more threads
 * than work items at small batches), and inputs given by name in another order. */
static void test_runs_every_batch(void **state)
{
    vitc_model *m = load_toy("toy_model");
    const int threads[] = {1, 2, 3, 16};
    for (int k = 0; k < 4; k++) {
        vitc_context *c;
        assert_int_equal(vitc_context_create(m, threads[k], &c), VITC_STATUS_OK);
        for (int64_t b = 1; b <= MAX_BATCH; b++) {
            toy_run t;
            toy_setup(&t, b, k);
            vitc_status st = vitc_run(c, t.in, 2, t.out, 2);
            if (st != VITC_STATUS_OK)
                fail_msg("batch %lld, %d threads: %s: %s", (long long)b, threads[k], vitc_status_string(st),
                         vitc_last_error());
            char what[64];
            snprintf(what, sizeof what, "%d threads", threads[k]);
            toy_check(&t, what);
        }
        toy_run t;
        toy_setup(&t, 5, 9);
        vitc_tensor in[2] = {t.in[1], t.in[0]}, out[2] = {t.out[1], t.out[0]};
        in[0].name = "shift", in[1].name = "x", out[0].name = "argmax", out[1].name = "y";
        assert_int_equal(vitc_run(c, in, 2, out, 2), VITC_STATUS_OK);
        toy_check(&t, "named, reordered");
        vitc_context_free(c);
    }
    /* 0 threads: one per core (or VITC_NUM_THREADS). */
    vitc_context *c;
    assert_int_equal(vitc_context_create(m, 0, &c), VITC_STATUS_OK);
    toy_run t;
    toy_setup(&t, MAX_BATCH, 3);
    assert_int_equal(vitc_run(c, t.in, 2, t.out, 2), VITC_STATUS_OK);
    toy_check(&t, "default threads");
    vitc_context_free(c);
    vitc_model_free(m);
}

/* One bad-argument case: the call must return want, leave a message that
 * contains needle, and not touch the outputs.  in and out (each NULL or the
 * model's 2 tensors, as this case changed them) are then t's again, for the
 * next case to change one thing. */
static void expect_fail(vitc_context *c, toy_run *t, vitc_tensor *in, int nin, vitc_tensor *out, int nout,
                        vitc_status want, const char *needle, const char *what)
{
    vitc_status st = vitc_run(c, in, nin, out, nout);
    const char *msg = vitc_last_error();
    printf("  %-34s -> %s: %s\n", what, vitc_status_string(st), msg);
    if (st != want)
        fail_msg("%s: status %s (%d), expected %s (%d): %s", what, vitc_status_string(st), st, vitc_status_string(want),
                 want, msg);
    if (!strstr(msg, needle))
        fail_msg("%s: message '%s' does not mention '%s'", what, msg, needle);
    for (int i = 0; i < MAX_BATCH * COLS; i++)
        if (t->y[i] != -12345.0f)
            fail_msg("%s: a failed run wrote y[%d] = %g", what, i, t->y[i]);
    if (in)
        memcpy(in, t->in, sizeof t->in);
    if (out)
        memcpy(out, t->out, sizeof t->out);
}

static void test_bad_arguments(void **state)
{
    vitc_model *m = load_toy("toy_model");
    vitc_context *c;
    assert_int_equal(vitc_context_create(m, 2, &c), VITC_STATUS_OK);
    toy_run t;
    toy_setup(&t, 2, 0);
    vitc_tensor in[2], out[2];
    memcpy(in, t.in, sizeof in), memcpy(out, t.out, sizeof out);
    expect_fail(NULL, &t, in, 2, out, 2, VITC_STATUS_INVALID_ARGUMENT, "context is NULL", "NULL context");
    expect_fail(c, &t, NULL, 2, out, 2, VITC_STATUS_INVALID_ARGUMENT, "inputs is NULL", "NULL inputs");
    expect_fail(c, &t, in, 2, NULL, 2, VITC_STATUS_INVALID_ARGUMENT, "outputs is NULL", "NULL outputs");
    expect_fail(c, &t, in, 1, out, 2, VITC_STATUS_INVALID_ARGUMENT, "2 inputs; 1 given", "one input missing");
    expect_fail(c, &t, in, 2, out, 3, VITC_STATUS_INVALID_ARGUMENT, "2 outputs; 3 given", "an output too many");
    expect_fail(c, &t, in, -1, out, 2, VITC_STATUS_INVALID_ARGUMENT, "-1 given", "negative count");
    in[0].name = "pixels";
    expect_fail(c, &t, in, 2, out, 2, VITC_STATUS_INVALID_ARGUMENT, "no input named 'pixels'", "unknown input name");
    in[1].name = "x";
    expect_fail(c, &t, in, 2, out, 2, VITC_STATUS_INVALID_ARGUMENT, "'x' is given twice", "input given twice");
    out[0].name = "logits";
    expect_fail(c, &t, in, 2, out, 2, VITC_STATUS_INVALID_ARGUMENT, "no output named 'logits'", "unknown output name");
    in[0].data = NULL;
    expect_fail(c, &t, in, 2, out, 2, VITC_STATUS_INVALID_ARGUMENT, "'x': data is NULL", "NULL input data");
    out[1].data = NULL;
    expect_fail(c, &t, in, 2, out, 2, VITC_STATUS_INVALID_ARGUMENT, "'argmax': data is NULL", "NULL output data");
    in[0].dtype = VITC_DTYPE_I64;
    expect_fail(c, &t, in, 2, out, 2, VITC_STATUS_DTYPE_MISMATCH, "'x' has dtype int64 (7); the model expects float32 (1)", "input dtype i64");
    out[1].dtype = VITC_DTYPE_F32;
    expect_fail(c, &t, in, 2, out, 2, VITC_STATUS_DTYPE_MISMATCH, "'argmax' has dtype float32 (1)", "output dtype f32");
    in[0].rank = 3, in[0].dims[2] = 1;
    expect_fail(c, &t, in, 2, out, 2, VITC_STATUS_SHAPE_MISMATCH, "rank 3", "input rank 3");
    in[0].rank = 99;
    expect_fail(c, &t, in, 2, out, 2, VITC_STATUS_SHAPE_MISMATCH, "rank 99", "input rank 99");
    in[0].dims[1] = 5;
    expect_fail(c, &t, in, 2, out, 2, VITC_STATUS_SHAPE_MISMATCH, "[2,5]; the model expects [B,4]", "input [2,5]");
    in[1].dims[0] = 3;
    expect_fail(c, &t, in, 2, out, 2, VITC_STATUS_SHAPE_MISMATCH, "'shift' has shape [3]", "static input [3]");
    in[0].dims[0] = 9, out[0].dims[0] = 9, out[1].dims[0] = 9;
    expect_fail(c, &t, in, 2, out, 2, VITC_STATUS_BATCH_OUT_OF_RANGE, "batch 9; the model runs batches 1 to 8",
                "batch 9 > limit 8");
    in[0].dims[0] = 0, out[0].dims[0] = 0, out[1].dims[0] = 0;
    expect_fail(c, &t, in, 2, out, 2, VITC_STATUS_BATCH_OUT_OF_RANGE, "batch 0", "batch 0");
    in[0].dims[0] = -2;
    expect_fail(c, &t, in, 2, out, 2, VITC_STATUS_SHAPE_MISMATCH, "[-2,4]", "negative batch");
    out[0].dims[0] = 3;
    expect_fail(c, &t, in, 2, out, 2, VITC_STATUS_SHAPE_MISMATCH, "'y' has shape [3,4]: batch 3, but batch 2",
                "output batch 3, input batch 2");
    out[1].dims[0] = 1;
    expect_fail(c, &t, in, 2, out, 2, VITC_STATUS_SHAPE_MISMATCH, "'argmax' has shape [1]", "argmax batch 1");

    /* After all that, the context still runs. */
    assert_int_equal(vitc_run(c, t.in, 2, t.out, 2), VITC_STATUS_OK);
    toy_check(&t, "after the failures");

    /* The rest of the API with NULLs and bad indices. */
    vitc_tensor_info info;
    vitc_model_details det;
    vitc_model *none = (vitc_model *)&info;
    assert_int_equal(vitc_model_input(m, 2, &info), VITC_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(vitc_last_error(), "index 2 is out of range"));
    assert_int_equal(vitc_model_output(m, -1, &info), VITC_STATUS_INVALID_ARGUMENT);
    assert_int_equal(vitc_model_input(NULL, 0, &info), VITC_STATUS_INVALID_ARGUMENT);
    assert_int_equal(vitc_model_input(m, 0, NULL), VITC_STATUS_INVALID_ARGUMENT);
    assert_int_equal(vitc_model_get_details(NULL, &det), VITC_STATUS_INVALID_ARGUMENT);
    assert_int_equal(vitc_model_num_inputs(NULL), -1);
    assert_int_equal(vitc_model_max_batch(NULL), -1);
    assert_string_equal(vitc_model_target(NULL), "");
    assert_int_equal(vitc_model_load(NULL, &none), VITC_STATUS_INVALID_ARGUMENT);
    assert_null(none);
    char path[4096];
    assert_int_equal(vitc_model_load(toy_path(path, sizeof path, "toy_model"), NULL), VITC_STATUS_INVALID_ARGUMENT);
    vitc_context *c2 = (vitc_context *)&info;
    assert_int_equal(vitc_context_create(NULL, 1, &c2), VITC_STATUS_INVALID_ARGUMENT);
    assert_null(c2);
    assert_int_equal(vitc_context_create(m, -3, &c2), VITC_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(vitc_last_error(), "-3 threads"));
    assert_int_equal(vitc_context_create(m, 1, NULL), VITC_STATUS_INVALID_ARGUMENT);
    vitc_context_free(NULL);
    vitc_model_free(NULL);
    assert_string_equal(vitc_status_string(VITC_STATUS_BATCH_OUT_OF_RANGE), "batch out of range");
    vitc_context_free(c);
    vitc_model_free(m);
}

/* ---- external weights ---- */

static uint64_t fnv1a64(const void *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ ((const unsigned char *)p)[i]) * 0x100000001b3ull;
    return h;
}

static void copy_file(const char *from, const char *to)
{
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    assert_non_null(a);
    assert_non_null(b);
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, a)) > 0)
        assert_int_equal(fwrite(buf, 1, n, b), n);
    fclose(a);
    assert_int_equal(fclose(b), 0);
}

static void write_bytes(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static void expect_load_fail(const char *path, vitc_status want, const char *needle, const char *what)
{
    vitc_model *m = (vitc_model *)&m;
    vitc_status st = vitc_model_load(path, &m);
    printf("  %-34s -> %s: %s\n", what, vitc_status_string(st), vitc_last_error());
    if (st != want)
        fail_msg("%s: status %s, expected %s: %s", what, vitc_status_string(st), vitc_status_string(want),
                 vitc_last_error());
    if (!strstr(vitc_last_error(), needle))
        fail_msg("%s: message '%s' does not mention '%s'", what, vitc_last_error(), needle);
    assert_null(m);
}

/* The details two ways of opening a model report are the same. */
static void expect_same_details(const vitc_model *a, const vitc_model *b, const char *what)
{
    vitc_model_details x, y;
    assert_int_equal(vitc_model_get_details(a, &x), VITC_STATUS_OK);
    assert_int_equal(vitc_model_get_details(b, &y), VITC_STATUS_OK);
    assert_int_equal(x.abi_version, y.abi_version);
    assert_string_equal(x.compiler_version, y.compiler_version);
    assert_string_equal(x.target, y.target);
    assert_string_equal(x.triple, y.triple);
    assert_string_equal(x.cpu, y.cpu);
    assert_string_equal(x.features, y.features);
    assert_string_equal(x.source, y.source);
    assert_int_equal(x.max_batch, y.max_batch);
    assert_int_equal(x.workspace_bytes, y.workspace_bytes);
    assert_int_equal(x.weights_bytes, y.weights_bytes);
    assert_int_equal(x.weights_fnv1a, y.weights_fnv1a);
    assert_int_equal(!x.weights_file, !y.weights_file);
    assert_int_equal(x.nkernels, y.nkernels);
    for (int i = 0; i < x.nkernels; i++)
        assert_string_equal(x.kernel_names[i], y.kernel_names[i]);
    assert_int_equal(vitc_model_num_inputs(a), vitc_model_num_inputs(b));
    assert_int_equal(vitc_model_num_outputs(a), vitc_model_num_outputs(b));
    for (int o = 0; o < 2; o++)
        for (int i = 0; i < (o ? vitc_model_num_outputs(a) : vitc_model_num_inputs(a)); i++) {
            vitc_tensor_info p, q;
            assert_int_equal((o ? vitc_model_output : vitc_model_input)(a, i, &p), VITC_STATUS_OK);
            assert_int_equal((o ? vitc_model_output : vitc_model_input)(b, i, &q), VITC_STATUS_OK);
            assert_string_equal(p.name, q.name);
            assert_int_equal(p.dtype, q.dtype);
            assert_int_equal(p.rank, q.rank);
            assert_memory_equal(p.dims, q.dims, sizeof p.dims);
            assert_memory_equal(p.is_batch, q.is_batch, sizeof p.is_batch);
        }
    printf("  %-22s read as data = loaded: %d inputs, %d outputs, %d kernels, features '%s'\n", what,
           vitc_model_num_inputs(a), vitc_model_num_outputs(a), x.nkernels, x.features);
}

/* vitc_model_read describes a model without running any of its code: a
 * model whose constructor writes a file leaves none, and one compiled for
 * CPU features this machine lacks is described, while vitc_model_load
 * refuses it before its constructor runs. */
static void test_read_runs_nothing(void **state)
{
    char dir[] = "/tmp/vitc-rt-XXXXXX", marker[4200], path[4096];
    assert_non_null(mkdtemp(dir));
    snprintf(marker, sizeof marker, "%s/constructor-ran", dir);
    setenv("VITC_TOY_CTOR_FILE", marker, 1);

    const char *names[] = {"toy_model", "toy_model_y", "toy_model_unaligned", "toy_model_ctor"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        vitc_model *r = NULL;
        vitc_status st = vitc_model_read(toy_path(path, sizeof path, names[i]), &r);
        if (st != VITC_STATUS_OK)
            fail_msg("reading %s: %s", names[i], vitc_last_error());
        assert_int_not_equal(access(marker, F_OK), 0);
        vitc_context *c = (vitc_context *)&c;
        assert_int_equal(vitc_context_create(r, 1, &c), VITC_STATUS_INVALID_ARGUMENT);
        assert_null(c);
        assert_non_null(strstr(vitc_last_error(), "vitc_model_load"));
        vitc_model *l = load_toy(names[i]);
        expect_same_details(r, l, names[i]);
        vitc_model_free(l);
        vitc_model_free(r);
    }
    /* Loading the constructor model did run its constructor: the check above can see one. */
    assert_int_equal(access(marker, F_OK), 0);
    assert_int_equal(unlink(marker), 0);

    vitc_model *r = NULL;
    toy_path(path, sizeof path, "toy_model_foreign_cpu");
    assert_int_equal(vitc_model_read(path, &r), VITC_STATUS_OK);
    vitc_model_details d;
    assert_int_equal(vitc_model_get_details(r, &d), VITC_STATUS_OK);
    assert_string_equal(d.features, "+sse2,+amx-tile,+sse4a");
    vitc_model_free(r);
    expect_load_fail(path, VITC_STATUS_LOAD_FAILED, "CPU features this machine lacks", "features no CPU has");
    assert_int_not_equal(access(marker, F_OK), 0);
    unsetenv("VITC_TOY_CTOR_FILE");
    rmdir(dir);
    (void)state;
}

/* A model without profile marks (these hand-written ones) says so. */
static void test_profile_without_marks(void **state)
{
    vitc_model *m = load_toy("toy_model");
    vitc_context *c = NULL;
    assert_int_equal(vitc_context_create(m, 1, &c), VITC_STATUS_OK);
    assert_int_equal(vitc_context_set_profiling(c, 1), VITC_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(vitc_last_error(), "no profile marks"));
    assert_int_equal(vitc_context_profile_parts(c), -1);
    vitc_profile_part p;
    assert_int_equal(vitc_context_profile_part(c, 0, &p), VITC_STATUS_INVALID_ARGUMENT);
    assert_int_equal(vitc_context_set_profiling(NULL, 1), VITC_STATUS_INVALID_ARGUMENT);
    vitc_context_free(c);
    vitc_model_free(m);
    (void)state;
}

/* Damaged files: every truncation and thousands of byte changes of a model
 * are read without a crash or a read outside the file (ASan in CI); the
 * intact file reads back the same after all that. */
static void test_read_damaged_files(void **state)
{
    char dir[] = "/tmp/vitc-rt-XXXXXX", copy[4200], path[4096];
    assert_non_null(mkdtemp(dir));
    snprintf(copy, sizeof copy, "%s/damaged.so", dir);
    FILE *f = fopen(toy_path(path, sizeof path, "toy_model"), "rb");
    assert_non_null(f);
    static unsigned char orig[1 << 20], buf[1 << 20];
    size_t n = fread(orig, 1, sizeof orig, f);
    fclose(f);
    assert_true(n > 1000 && n < sizeof orig);
    int ok = 0, refused = 0;
    for (size_t cut = 0; cut < n; cut += n / 97 + 1) {
        write_bytes(copy, orig, cut);
        vitc_model *m = NULL;
        vitc_status st = vitc_model_read(copy, &m);
        assert_true(st == VITC_STATUS_LOAD_FAILED || st == VITC_STATUS_ABI_MISMATCH);
        assert_null(m);
        assert_true(strlen(vitc_last_error()) > 0);
        refused++;
    }
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    for (int trial = 0; trial < 3000; trial++) {
        memcpy(buf, orig, n);
        for (int k = 0; k < 1 + trial % 8; k++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            size_t at = (size_t)(seed >> 33) % n;
            /* the headers and tables, at the file's start and end, most of the time */
            if (trial % 3 == 0)
                at %= 2048;
            else if (trial % 3 == 1)
                at = n - 1 - at % (n < 4096 ? n : 4096);
            buf[at] = (unsigned char)(seed >> 17);
        }
        write_bytes(copy, buf, n);
        vitc_model *m = NULL;
        if (vitc_model_read(copy, &m) == VITC_STATUS_OK) {
            vitc_model_details d;
            assert_int_equal(vitc_model_get_details(m, &d), VITC_STATUS_OK);
            ok++;
        } else {
            refused++;
        }
        vitc_model_free(m);
    }
    write_bytes(copy, orig, n);
    vitc_model *m = NULL;
    assert_int_equal(vitc_model_read(copy, &m), VITC_STATUS_OK);
    assert_int_equal(vitc_model_num_inputs(m), 2);
    vitc_model_free(m);
    printf("  damaged copies of a %zu-byte model: %d read, %d refused with a message\n", n, ok, refused);
    unlink(copy);
    rmdir(dir);
    (void)state;
}

static void test_external_weights(void **state)
{
    char dir[] = "/tmp/vitc-rt-XXXXXX", so[4200], wfile[4200], src[4096];
    assert_non_null(mkdtemp(dir));
    snprintf(so, sizeof so, "%s/toy_model_ext.so", dir);
    snprintf(wfile, sizeof wfile, "%s/toy_model_ext.weights", dir);
    copy_file(toy_path(src, sizeof src, "toy_model_ext"), so);

    float w[2 * COLS];
    memcpy(w, scale, sizeof scale);
    memcpy(w + COLS, bias, sizeof bias);
    printf("  weights FNV-1a %016llx\n", (unsigned long long)fnv1a64(w, sizeof w));
    assert_true(fnv1a64(w, sizeof w) == 0x4d05ad38320c76b2ull);

    expect_load_fail(so, VITC_STATUS_LOAD_FAILED, "toy_model_ext.weights", "weights file missing");
    write_bytes(wfile, w, sizeof w - 4);
    expect_load_fail(so, VITC_STATUS_LOAD_FAILED, "has 28 bytes; the model expects 32", "weights file short");
    float bad[2 * COLS];
    memcpy(bad, w, sizeof w);
    bad[5] = 0.5f;
    write_bytes(wfile, bad, sizeof bad);
    expect_load_fail(so, VITC_STATUS_LOAD_FAILED, "does not belong to this model", "weights file altered");

    write_bytes(wfile, w, sizeof w);
    vitc_model *m;
    vitc_status st = vitc_model_load(so, &m);
    if (st != VITC_STATUS_OK)
        fail_msg("%s: %s", so, vitc_last_error());
    vitc_model_details d;
    assert_int_equal(vitc_model_get_details(m, &d), VITC_STATUS_OK);
    assert_string_equal(d.weights_file, "toy_model_ext.weights");
    vitc_context *c;
    assert_int_equal(vitc_context_create(m, 2, &c), VITC_STATUS_OK);
    toy_run t;
    toy_setup(&t, 6, 1);
    assert_int_equal(vitc_run(c, t.in, 2, t.out, 2), VITC_STATUS_OK);
    toy_check(&t, "external weights");
    vitc_context_free(c);
    vitc_model_free(m);

    /* Loaded from the directory itself, with a path that has no '/'. */
    char cwd[4096];
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(dir), 0);
    st = vitc_model_load("toy_model_ext.so", &m);
    assert_int_equal(chdir(cwd), 0);
    if (st != VITC_STATUS_OK)
        fail_msg("toy_model_ext.so from its directory: %s", vitc_last_error());
    vitc_model_free(m);

    unlink(wfile);
    unlink(so);
    rmdir(dir);
}

/* Loads toy model `name`, runs it once on 2 threads at `batch` and checks
 * the outputs; `what` names the case in a failure. */
static void run_toy_once(const char *name, int64_t batch, int seed, const char *what)
{
    vitc_model *m = load_toy(name);
    vitc_context *c;
    assert_int_equal(vitc_context_create(m, 2, &c), VITC_STATUS_OK);
    toy_run t;
    toy_setup(&t, batch, seed);
    vitc_status st = vitc_run(c, t.in, 2, t.out, 2);
    if (st != VITC_STATUS_OK)
        fail_msg("%s: %s", what, vitc_last_error());
    toy_check(&t, what);
    vitc_context_free(c);
    vitc_model_free(m);
}

/* Embedded weights at an odd address are copied to aligned memory (the toy's
 * run() returns an error if the weights it gets are not 64-byte aligned). */
static void test_unaligned_embedded_weights(void **state)
{
    run_toy_once("toy_model_unaligned", 3, 2, "unaligned weights");
    (void)state;
}

/* Weights of 2 MiB and more are copied into 2 MiB-aligned memory meant for
 * huge pages, and the workspace is aligned the same way; VITC_HUGE_PAGES=0
 * leaves the weights in the file.  toy_model_big's run() checks where its
 * weights and workspace are, that its 3 MiB arrived whole, and that its own
 * storage, whose pages the loader dropped behind the copy, still reads back. */
static void test_big_weights_placement(void **state)
{
    unsetenv("VITC_HUGE_PAGES");
    run_toy_once("toy_model_big", 5, 3, "3 MiB of weights, VITC_HUGE_PAGES unset");
    setenv("VITC_HUGE_PAGES", "0", 1);
    run_toy_once("toy_model_big", 5, 3, "3 MiB of weights, VITC_HUGE_PAGES=0");
    setenv("VITC_HUGE_PAGES", "1", 1);
    run_toy_once("toy_model_big", 5, 3, "3 MiB of weights, VITC_HUGE_PAGES=1");
    unsetenv("VITC_HUGE_PAGES");
    (void)state;
}

static void test_not_a_model(void **state)
{
    char path[4096], dir[] = "/tmp/vitc-rt-XXXXXX", fake[4200];
    expect_load_fail(toy_path(path, sizeof path, "toy_not_a_model"), VITC_STATUS_LOAD_FAILED,
                     "not a vitc model (no symbol vitc_model_v1)", "shared library without descriptor");
    expect_load_fail(toy_path(path, sizeof path, "toy_model_abi99"), VITC_STATUS_ABI_MISMATCH, "version 99",
                     "descriptor of ABI version 99");
    expect_load_fail(toy_path(path, sizeof path, "toy_model_v2"), VITC_STATUS_ABI_MISMATCH,
                     "compiled for vitc model ABI 2", "symbol vitc_model_v2");
    expect_load_fail(toy_path(path, sizeof path, "no_such_model"), VITC_STATUS_LOAD_FAILED, "No such file",
                     "missing file");
    expect_load_fail(VITC_TOY_MODEL_DIR, VITC_STATUS_LOAD_FAILED, "not a regular file", "a directory");
    assert_non_null(mkdtemp(dir));
    snprintf(fake, sizeof fake, "%s/model.so", dir);
    char text[256];
    memset(text, 'x', sizeof text);
    write_bytes(fake, text, sizeof text);
    expect_load_fail(fake, VITC_STATUS_LOAD_FAILED, "not an ELF file", "text file named .so");
    write_bytes(fake, "", 0);
    expect_load_fail(fake, VITC_STATUS_LOAD_FAILED, "the file is empty", "empty file named .so");
    unlink(fake);
    rmdir(dir);
}

/* ---- several contexts on several threads ---- */

typedef struct {
    vitc_model *m;
    int id, failures;
    char first_failure[512];
} worker_arg;

static void *worker(void *p)
{
    worker_arg *w = p;
    vitc_context *c[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++)
        if (vitc_context_create(w->m, 2, &c[k]) != VITC_STATUS_OK) {
            snprintf(w->first_failure, sizeof w->first_failure, "context: %s", vitc_last_error());
            w->failures++;
        }
    for (int it = 0; it < 300 && !w->failures; it++) {
        toy_run t;
        int64_t batch = 1 + (it + w->id) % MAX_BATCH;
        toy_setup(&t, batch, it % 5);
        if (vitc_run(c[it & 1], t.in, 2, t.out, 2) != VITC_STATUS_OK) {
            snprintf(w->first_failure, sizeof w->first_failure, "run %d: %s", it, vitc_last_error());
            w->failures++;
            break;
        }
        for (int64_t i = 0; i < batch * COLS; i++)
            if (memcmp(&t.y[i], &t.want_y[i], sizeof(float)) != 0) {
                snprintf(w->first_failure, sizeof w->first_failure, "run %d, batch %lld: y[%lld] = %.9g, expected %.9g",
                         it, (long long)batch, (long long)i, t.y[i], t.want_y[i]);
                w->failures++;
                break;
            }
    }
    /* A failing call here sets this thread's message only. */
    toy_run t;
    toy_setup(&t, 1, 0);
    t.in[0].dims[1] = 3 + w->id;
    if (c[0] && vitc_run(c[0], t.in, 2, t.out, 2) == VITC_STATUS_SHAPE_MISMATCH) {
        char want[32];
        snprintf(want, sizeof want, "[1,%d]", 3 + w->id);
        usleep(1000);
        if (!strstr(vitc_last_error(), want)) {
            snprintf(w->first_failure, sizeof w->first_failure, "thread %d sees another thread's error: %s", w->id,
                     vitc_last_error());
            w->failures++;
        }
    }
    vitc_context_free(c[0]);
    vitc_context_free(c[1]);
    return NULL;
}

static void test_threads_and_contexts(void **state)
{
    vitc_model *m = load_toy("toy_model");
    pthread_t th[4];
    worker_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (worker_arg){.m = m, .id = i};
        assert_int_equal(pthread_create(&th[i], NULL, worker, &args[i]), 0);
    }
    int failures = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        if (args[i].failures)
            printf("  thread %d: %s\n", i, args[i].first_failure);
        failures += args[i].failures;
    }
    printf("  4 threads x 2 contexts x 300 runs (2 pool threads each): %d mismatches\n", failures);
    assert_int_equal(failures, 0);
    /* The main thread's message is its own. */
    vitc_context *c;
    assert_int_equal(vitc_context_create(NULL, 1, &c), VITC_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(vitc_last_error(), "model is NULL"));
    vitc_model_free(m);
}

/* Many short jobs back to back: a lost wake-up or a race in the pool shows
 * as a hang (ctest's timeout) or a wrong value. */
static void test_pool_many_jobs(void **state)
{
    vitc_model *m = load_toy("toy_model");
    vitc_context *c;
    assert_int_equal(vitc_context_create(m, 4, &c), VITC_STATUS_OK);
    for (int it = 0; it < 5000; it++) {
        toy_run t;
        toy_setup(&t, 1 + it % MAX_BATCH, it % 3);
        assert_int_equal(vitc_run(c, t.in, 2, t.out, 2), VITC_STATUS_OK);
        if (it % 97 == 0)
            toy_check(&t, "many jobs");
        if (it % 1000 == 999)
            usleep(20000); /* let the workers fall asleep, then wake them */
    }
    vitc_context_free(c);
    vitc_model_free(m);
}

/* How many of this process's threads may run on one CPU only. */
static int single_cpu_threads(void)
{
    DIR *dir = opendir("/proc/self/task");
    assert_non_null(dir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        cpu_set_t s;
        if (e->d_name[0] != '.' && sched_getaffinity((pid_t)atoi(e->d_name), sizeof s, &s) == 0)
            n += CPU_COUNT(&s) == 1;
    }
    closedir(dir);
    return n;
}

/* A context's worker threads run each on a CPU of its own (pool.c), none
 * with VITC_PIN_THREADS=0; the caller's thread is left as it is. */
static void test_workers_pinned(void **state)
{
    (void)state;
    cpu_set_t all;
    assert_int_equal(sched_getaffinity(0, sizeof all, &all), 0);
    if (CPU_COUNT(&all) < 2)
        skip(); /* one CPU: nothing to spread the threads over */
    int before = single_cpu_threads();
    vitc_model *m = load_toy("toy_model");
    vitc_context *c;
    unsetenv("VITC_PIN_THREADS");
    assert_int_equal(vitc_context_create(m, 2, &c), VITC_STATUS_OK);
    int pinned = single_cpu_threads() - before;
    print_message("2 threads: %d worker pinned to one CPU\n", pinned);
    assert_int_equal(pinned, 1);
    run_toy_once("toy_model", 3, 1, "pinned workers");
    vitc_context_free(c);
    setenv("VITC_PIN_THREADS", "0", 1);
    assert_int_equal(vitc_context_create(m, 2, &c), VITC_STATUS_OK);
    assert_int_equal(single_cpu_threads() - before, 0);
    vitc_context_free(c);
    unsetenv("VITC_PIN_THREADS");
    vitc_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_signature),
        cmocka_unit_test(test_runs_every_batch),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_external_weights),
        cmocka_unit_test(test_unaligned_embedded_weights),
        cmocka_unit_test(test_big_weights_placement),
        cmocka_unit_test(test_not_a_model),
        cmocka_unit_test(test_read_runs_nothing),
        cmocka_unit_test(test_read_damaged_files),
        cmocka_unit_test(test_profile_without_marks),
        cmocka_unit_test(test_threads_and_contexts),
        cmocka_unit_test(test_pool_many_jobs),
        cmocka_unit_test(test_workers_pinned),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
