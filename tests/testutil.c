/* testutil.c: paths, fixtures, subprocesses, the graph builder and the ways
 * of running a graph (interpreter, compiled .so, CUDA emulation) for the tests. */
#include "testutil.h"

#include "codegen/backend.h"
#include "frontend/onnx.h"
#include "ir/interp.h"
#include "runtime/rt_impl.h"
#include "vitc/runtime.h"
#ifdef VITC_HAVE_CUDA
#include "emu_tmap.h"
#include "runtime/abi.h"
#include <dlfcn.h>
#include <sys/mman.h>
#endif

#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

int tu_skipped;

int tu_exit_status(int failures)
{
    if (failures)
        return failures;
    if (tu_skipped)
        printf("%d case(s) skipped: reported to ctest as skipped (exit %d)\n", tu_skipped, TU_SKIP_RC);
    return tu_skipped ? TU_SKIP_RC : 0;
}

/* Whether name matches one of the comma-separated glob patterns of the
 * environment variable var (unset: dflt). */
static int matches_env(const char *var, const char *name, int dflt)
{
    const char *v = getenv(var);
    if (!v || !*v)
        return dflt;
    char *list = strdup(v), *save = NULL;
    assert_non_null(list);
    int hit = 0;
    for (char *p = strtok_r(list, ",", &save); p && !hit; p = strtok_r(NULL, ",", &save))
        hit = fnmatch(p, name, 0) == 0;
    free(list);
    return hit;
}

int tu_main(const char *names, const CMUnitTestFunction *cases, size_t n, CMFixtureFunction setup,
            CMFixtureFunction teardown)
{
    char *list = strdup(names), *save = NULL;
    struct CMUnitTest *tests = calloc(n, sizeof *tests);
    assert_non_null(list);
    assert_non_null(tests);
    size_t i = 0, run = 0;
    for (char *name = strtok_r(list, ", \t\n", &save); name && i < n; name = strtok_r(NULL, ", \t\n", &save), i++)
        if (matches_env("VITC_TEST_FILTER", name, 1) && !matches_env("VITC_TEST_SKIP_FILTER", name, 0))
            tests[run++] = (struct CMUnitTest){.name = name, .test_func = cases[i]};
    assert_int_equal(i, n);
    int failures = _cmocka_run_group_tests("tests", tests, run, setup, teardown);
    free(tests);
    free(list);
    return tu_exit_status(failures);
}

const char *tu_source_dir(void)
{
    const char *s = getenv("VITC_SOURCE_DIR");
    return s && *s ? s : VITC_SOURCE_DIR_DEFAULT;
}

char *tu_path(char *buf, size_t n, const char *rel)
{
    snprintf(buf, n, "%s/%s", tu_source_dir(), rel);
    return buf;
}

ir_graph *tu_load_model(const char *rel)
{
    char path[4096];
    vitc_diag d;
    vitc_diag_init(&d, tu_path(path, sizeof path, rel));
    ir_graph *g = onnx_import_file(path, &d);
    if (!g)
        fail_msg("%s: import failed (status %d)", rel, d.status);
    if (ir_verify(g, &d) || ir_infer_shapes(g, &d))
        fail_msg("%s: verify/shape inference failed (status %d)", rel, d.status);
    return g;
}

ir_graph *tu_load_fixture(const tu_fixture *fx)
{
    char rel[256];
    snprintf(rel, sizeof rel, "tests/models/%.120s", fx->model);
    return tu_load_model(rel);
}

void tu_read_npy(const char *path, ir_tensor *t)
{
    char full[4096];
    if (path[0] != '/')
        path = tu_path(full, sizeof full, path);
    vitc_diag d;
    vitc_diag_init(&d, path);
    if (ir_npy_read(path, t, &d) != 0)
        fail_msg("cannot read %s", path);
}

int tu_bf16_cpu(int amx)
{
    const char *need = amx ? "+avx512f,+amx-tile,+amx-bf16" : "+avx512f,+avx512bf16";
    char missing[256], why[300];
    if (rt_cpu_missing_features(need, missing, sizeof missing) > 0)
        snprintf(why, sizeof why, "this CPU lacks %s", missing);
    else if (rt_cpu_enable_amx(need, why, sizeof why) == 0)
        return 1;
    printf("  skipped: %s\n", why);
    tu_skip();
    return 0;
}

void tu_fixture_reference(const tu_fixture *fx, const ir_graph *g, ir_tensor in[2], ir_tensor ref[2])
{
    for (int b = 0; b < 2; b++) {
        char rel[256];
        snprintf(rel, sizeof rel, "tests/models/%.31s.b%d.input.npy", fx->family, b ? 3 : 1);
        tu_read_npy(rel, &in[b]);
        memset(&ref[b], 0, sizeof ref[b]);
        tu_interpret_ok(g, &in[b], &ref[b]);
    }
}

double tu_precision_bar(int pi) { return pi == 0 ? TU_BAR_FP32 : pi == 1 ? TU_BAR_TF32 : TU_BAR_HALF; }

int tu_precision_ok(int pi, const double e[2], const double cos[2], double worst[4])
{
    double tol = tu_precision_bar(pi), ctol = pi == 0 ? 0 : TU_BAR_COSINE;
    for (int b = 0; b < 2; b++)
        worst[pi] = e[b] > worst[pi] || isnan(e[b]) ? e[b] : worst[pi];
    return e[0] <= tol && e[1] <= tol && cos[0] >= ctol && cos[1] >= ctol;
}

void tu_precision_report(const double worst[4], int failures)
{
    print_message("worst rel err: fp32 %.3g (bar %g), tf32 %.3g (bar %g, cosine >= %g), fp16 %.3g, bf16 %.3g "
                  "(bar %g, cosine >= %g)\n",
                  worst[0], TU_BAR_FP32, worst[1], TU_BAR_TF32, TU_BAR_COSINE, worst[2], worst[3], TU_BAR_HALF,
                  TU_BAR_COSINE);
    if (failures)
        fail_msg("%d fixture/precision pairs beyond the bars", failures);
}

void tu_fixture_case(const tu_fixture *fx, char *model, size_t n, ir_tensor in[2], ir_tensor ref[2])
{
    char rel[256];
    snprintf(rel, sizeof rel, "tests/models/%.120s", fx->model);
    tu_path(model, n, rel);
    ir_graph *g = tu_load_fixture(fx);
    tu_fixture_reference(fx, g, in, ref);
    ir_graph_free(g);
}

const char *tu_nvrtc_cache(void)
{
    static char dir[4200];
    const char *t = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/vitc-cuda-test-cache-%ld", t && *t ? t : "/tmp", (long)getuid());
    mkdir(dir, 0755);
    setenv("VITC_NVRTC_CACHE", dir, 0);
    return dir;
}

int tu_fixtures(tu_fixture *out, int max)
{
    char path[4096];
    FILE *f = fopen(tu_path(path, sizeof path, "tests/models/fixtures.tsv"), "r");
    if (!f)
        return 0;
    char line[1024];
    int n = 0;
    if (!fgets(line, sizeof line, f)) { /* header */
        fclose(f);
        return 0;
    }
    while (n < max && fgets(line, sizeof line, f)) {
        tu_fixture *x = &out[n];
        memset(x, 0, sizeof *x);
        if (sscanf(line, "%95s %31s %15s %d %d %d %d %d %d %d", x->model, x->family, x->exporter, &x->opset,
                   &x->depth, &x->heads, &x->width, &x->tokens, &x->image, &x->has_batchnorm) >= 9)
            n++;
    }
    fclose(f);
    return n;
}

static char *slurp(FILE *f)
{
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)(len > 0 ? len : 0) + 1);
    size_t r = len > 0 ? fread(s, 1, (size_t)len, f) : 0;
    s[r] = 0;
    return s;
}

int tu_run_vitc(const char *const *args, char **out, char **err)
{
    const char *bin = getenv("VITC_BIN");
    if (!bin)
        bin = "vitc";
    const char *argv[64];
    int n = 0;
    argv[n++] = bin;
    for (; args[n - 1] && n < 63; n++)
        argv[n] = args[n - 1];
    argv[n] = NULL;
    FILE *fo = tmpfile(), *fe = tmpfile();
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fileno(fo), 1);
    posix_spawn_file_actions_adddup2(&fa, fileno(fe), 2);
    pid_t pid;
    int rc = -1;
    int serr = posix_spawnp(&pid, bin, &fa, NULL, (char *const *)argv, environ);
    if (serr == 0) {
        int st = 0;
        pid_t w;
        while ((w = waitpid(pid, &st, 0)) < 0 && errno == EINTR)
            ;
        if (w != pid)
            fprintf(stderr, "waiting for %s failed: %s\n", bin, strerror(errno));
        else if (WIFEXITED(st))
            rc = WEXITSTATUS(st);
        else if (WIFSIGNALED(st))
            fprintf(stderr, "vitc died with signal %d\n", WTERMSIG(st));
    } else {
        fprintf(stderr, "cannot run %s: %s\n", bin, strerror(serr));
    }
    posix_spawn_file_actions_destroy(&fa);
    char *so = slurp(fo), *se = slurp(fe);
    fclose(fo);
    fclose(fe);
    if (out)
        *out = so;
    else
        free(so);
    if (err)
        *err = se;
    else
        free(se);
    return rc;
}

char *tu_tmpdir(char *buf, size_t n)
{
    snprintf(buf, n, "%s/vitc-test-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    return mkdtemp(buf);
}

void tu_rmtree(const char *dir)
{
    if (!dir || strncmp(dir, "/tmp/vitc-test-", 15) != 0)
        return;
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

int tu_teardown_tmpdir(void **state)
{
    const char *dir = *state;
    if (dir && getenv("VITC_KEEP_TMP"))
        print_message("kept %s\n", dir);
    else
        tu_rmtree(dir);
    return 0;
}

/* ---- random numbers ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

void tu_seed(uint64_t seed) { rng_state = seed; }

float tu_rnd(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng_state >> 11) / (double)(1ull << 53) * 2 - 1);
}

/* ---- building graphs ---- */

ir_graph *tu_graph_new(const char *file, int64_t opset)
{
    ir_graph *g = ir_graph_new(file);
    assert_non_null(g);
    g->opset = opset;
    g->inputs = ir_alloc_array(g->arena, TU_MAX_IO, sizeof(int));
    g->outputs = ir_alloc_array(g->arena, TU_MAX_IO, sizeof(int));
    assert_non_null(g->inputs);
    assert_non_null(g->outputs);
    return g;
}

int tu_input(ir_graph *g, const char *name, ir_dtype dt, int rank, const int64_t *dims)
{
    assert_true(g->ninputs < TU_MAX_IO);
    int v = ir_add_value(g, name, IR_VAL_INPUT, dt);
    assert_true(v >= 0);
    g->values[v].rank = rank;
    for (int i = 0; i < rank; i++)
        g->values[v].dims[i] = dims[i] < 0 ? ir_dim_batch(-dims[i]) : ir_dim_const(dims[i]);
    g->inputs[g->ninputs++] = v;
    return v;
}

static int const_f32(ir_graph *g, const char *name, int rank, const int64_t *dims, const float *vals, float amp)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= dims[i];
    float *buf = malloc(sizeof(float) * (size_t)(n ? n : 1));
    assert_non_null(buf);
    for (int64_t i = 0; i < n; i++)
        buf[i] = vals ? vals[i] : tu_rnd() * amp;
    int v = ir_add_const(g, name, IR_F32, rank, dims, buf, sizeof(float) * (size_t)n);
    free(buf);
    assert_true(v >= 0);
    return v;
}

int tu_const_f32(ir_graph *g, const char *name, int rank, const int64_t *dims, const float *vals)
{
    return const_f32(g, name, rank, dims, vals, 1.0f);
}

int tu_const_rand(ir_graph *g, const char *name, int rank, const int64_t *dims, float amp)
{
    return const_f32(g, name, rank, dims, NULL, amp);
}

int tu_const_i64(ir_graph *g, const char *name, int rank, const int64_t *dims, const int64_t *vals)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= dims[i];
    int v = ir_add_const(g, name, IR_I64, rank, dims, vals, sizeof(int64_t) * (size_t)n);
    assert_true(v >= 0);
    return v;
}

int tu_const_ints(ir_graph *g, const char *name, int n, const int64_t *vals)
{
    return tu_const_i64(g, name, 1, (int64_t[]){n}, vals);
}

int tu_scalar(ir_graph *g, const char *name, float x) { return tu_const_f32(g, name, 0, NULL, &x); }

int tu_value(ir_graph *g, const char *name, ir_dtype dt)
{
    int v = ir_add_value(g, name, IR_VAL_NODE, dt);
    assert_true(v >= 0);
    return v;
}

int tu_node_out(ir_graph *g, ir_op op, const char *name, int nin, const int *in, int nout, const int *out,
                int nattrs, const ir_attr *attrs)
{
    int n = ir_add_node(g, op, name, ir_op_name(op), nin, in, nout, out, nattrs, attrs);
    assert_true(n >= 0);
    return n;
}

int tu_node(ir_graph *g, ir_op op, const char *name, ir_dtype dt, int nin, const int *in, int nattrs,
            const ir_attr *attrs)
{
    char nname[128], yname[136];
    if (name)
        snprintf(nname, sizeof nname, "%s", name), snprintf(yname, sizeof yname, "%s:0", name);
    else
        snprintf(nname, sizeof nname, "n%d", g->nnodes), snprintf(yname, sizeof yname, "n%d", g->nnodes);
    int y = tu_value(g, yname, dt);
    tu_node_out(g, op, nname, nin, in, 1, &y, nattrs, attrs);
    return y;
}

void tu_output(ir_graph *g, int v)
{
    assert_true(g->noutputs < TU_MAX_IO);
    g->outputs[g->noutputs++] = v;
}

ir_attr tu_int(ir_attr_id id, int64_t i) { return (ir_attr){.id = id, .kind = IR_AT_INT, .i = i, .tensor = -1}; }
ir_attr tu_float(ir_attr_id id, float f) { return (ir_attr){.id = id, .kind = IR_AT_FLOAT, .f = f, .tensor = -1}; }
ir_attr tu_str(ir_attr_id id, const char *s)
{
    return (ir_attr){.id = id, .kind = IR_AT_STRING, .s = s, .n = (int)strlen(s), .tensor = -1};
}
ir_attr tu_ints(ir_graph *g, ir_attr_id id, int n, const int64_t *v)
{
    int64_t *p = ir_alloc_array(g->arena, (size_t)(n ? n : 1), sizeof *p);
    memcpy(p, v, sizeof *p * (size_t)n);
    return (ir_attr){.id = id, .kind = IR_AT_INTS, .n = n, .ints = p, .tensor = -1};
}

ir_attr tu_floats(ir_graph *g, ir_attr_id id, int n, const float *v)
{
    float *p = ir_alloc_array(g->arena, (size_t)(n ? n : 1), sizeof *p);
    memcpy(p, v, sizeof *p * (size_t)n);
    return (ir_attr){.id = id, .kind = IR_AT_FLOATS, .n = n, .ints = NULL, .floats = p, .tensor = -1};
}

void tu_unbind(ir_graph *g, int x, int n, const char *prefix, int *parts)
{
    for (int i = 0; i < n; i++) {
        char name[64];
        snprintf(name, sizeof name, "%s%d", prefix, i);
        int64_t idx = i;
        int iv = ir_add_const(g, name, IR_I64, 0, NULL, &idx, sizeof idx);
        ir_attr ax = tu_int(IR_ATTR_AXIS, 0);
        parts[i] = tu_node(g, IR_OP_GATHER, name, IR_F32, 2, (int[]){x, iv}, 1, &ax);
    }
}

int tu_count_op(const ir_graph *g, ir_op op)
{
    int n = 0;
    for (int i = 0; i < g->nnodes; i++)
        n += g->nodes[i].op == op;
    return n;
}

void tu_check_graph(ir_graph *g, const char *what)
{
    vitc_diag d;
    vitc_diag_init(&d, what);
    if (ir_verify(g, &d) || ir_infer_shapes(g, &d) || ir_verify(g, &d))
        fail_msg("%s: the hand-built graph is malformed (status %d)", what, d.status);
}

/* ---- graphs every backend runs ---- */

ir_graph *tu_graph_conv(void)
{
    ir_graph *g = tu_graph_new("handmade.onnx", 18);
    int x = tu_input(g, "x", IR_F32, 4, TU_DIMS(-1, 4, 9, 7));
    int w = tu_const_f32(g, "w", 4, TU_DIMS(6, 2, 3, 3), NULL), b = tu_const_f32(g, "b", 1, TU_DIMS(6), NULL);
    tu_output(g, tu_node(g, IR_OP_CONV, NULL, IR_F32, 3, TU_IN(x, w, b), 4,
                         TU_AT(tu_int(IR_ATTR_GROUP, 2), tu_ints(g, IR_ATTR_PADS, 4, TU_DIMS(1, 0, 1, 2)),
                               tu_ints(g, IR_ATTR_STRIDES, 2, TU_DIMS(2, 1)),
                               tu_ints(g, IR_ATTR_DILATIONS, 2, TU_DIMS(1, 2)))));
    int x1 = tu_input(g, "x1", IR_F32, 3, TU_DIMS(-1, 3, 10));
    int w1 = tu_const_f32(g, "w1", 3, TU_DIMS(4, 3, 3), NULL);
    tu_output(g, tu_node(g, IR_OP_CONV, NULL, IR_F32, 2, TU_IN(x1, w1), 1,
                         TU_AT(tu_ints(g, IR_ATTR_PADS, 2, TU_DIMS(1, 1)))));
    return g;
}

ir_graph *tu_graph_reduce(void)
{
    ir_graph *g = tu_graph_new("handmade.onnx", 18);
    int x = tu_input(g, "x", IR_F32, 3, TU_DIMS(-1, 5, 6));
    tu_output(g, tu_node(g, IR_OP_REDUCE_SUM, NULL, IR_F32, 1, TU_IN(x), 2,
                         TU_AT(tu_ints(g, IR_ATTR_AXES, 1, TU_DIMS(1)), tu_int(IR_ATTR_KEEPDIMS, 0))));
    int axes = tu_const_ints(g, "axes", 2, TU_DIMS(0, 2));
    tu_output(g, tu_node(g, IR_OP_REDUCE_MAX, NULL, IR_F32, 2, TU_IN(x, axes), 0, NULL));
    tu_output(g, tu_node(g, IR_OP_REDUCE_MEAN, NULL, IR_F32, 1, TU_IN(x), 0, NULL));
    tu_output(g, tu_node(g, IR_OP_SOFTMAX, NULL, IR_F32, 1, TU_IN(x), 1, TU_AT(tu_int(IR_ATTR_AXIS, 1))));
    return g;
}

ir_graph *tu_graph_elementwise(void)
{
    ir_graph *g = tu_graph_new("handmade.onnx", 18);
    int x = tu_input(g, "x", IR_F32, 3, TU_DIMS(-1, 3, 4)), y = tu_input(g, "y", IR_F32, 1, TU_DIMS(4));
    int one = tu_scalar(g, "one", 1), three = tu_scalar(g, "three", 3), half = tu_scalar(g, "half", 0.5f);
    int ax = tu_node(g, IR_OP_ABS, NULL, IR_F32, 1, TU_IN(x), 0, NULL);
    int ex = tu_node(g, IR_OP_EXP, NULL, IR_F32, 1, TU_IN(x), 0, NULL);
    int lg = tu_node(g, IR_OP_LOG, NULL, IR_F32, 1, TU_IN(tu_node(g, IR_OP_ADD, NULL, IR_F32, 2, TU_IN(ax, one), 0, NULL)),
                     0, NULL);
    int nl = tu_node(g, IR_OP_NEG, NULL, IR_F32, 1, TU_IN(lg), 0, NULL);
    tu_output(g, tu_node(g, IR_OP_SIGMOID, NULL, IR_F32, 1, TU_IN(x), 0, NULL));
    tu_output(g, tu_node(g, IR_OP_TANH, NULL, IR_F32, 1, TU_IN(ex), 0, NULL));
    tu_output(g, tu_node(g, IR_OP_RECIPROCAL, NULL, IR_F32, 1, TU_IN(nl), 0, NULL));
    tu_output(g, tu_node(g, IR_OP_MAX, NULL, IR_F32, 2, TU_IN(x, y), 0, NULL));
    tu_output(g, tu_node(g, IR_OP_MIN, NULL, IR_F32, 3, TU_IN(x, y, half), 0, NULL));
    tu_output(g, tu_node(g, IR_OP_POW, NULL, IR_F32, 2, TU_IN(x, three), 0, NULL));
    tu_output(g, tu_node(g, IR_OP_SQRT, NULL, IR_F32, 1, TU_IN(ax), 0, NULL));
    tu_output(g, tu_node(g, IR_OP_MOD, NULL, IR_F32, 2, TU_IN(x, half), 1, TU_AT(tu_int(IR_ATTR_FMOD, 1))));
    int lo = tu_scalar(g, "lo", -0.5f), hi = tu_scalar(g, "hi", 0.7f);
    tu_output(g, tu_node(g, IR_OP_CLIP, NULL, IR_F32, 3, TU_IN(x, lo, hi), 0, NULL));
    int rl = tu_node(g, IR_OP_RELU, NULL, IR_F32, 1, TU_IN(x), 0, NULL);
    tu_output(g, tu_node(g, IR_OP_GELU, NULL, IR_F32, 1, TU_IN(rl), 1, TU_AT(tu_str(IR_ATTR_APPROXIMATE, "tanh"))));
    int dv = tu_node(g, IR_OP_DIV, NULL, IR_F32, 2, TU_IN(x, y), 0, NULL);
    tu_output(g, tu_node(g, IR_OP_ERF, NULL, IR_F32, 1, TU_IN(dv), 0, NULL));
    return g;
}

ir_graph *tu_graph_data(void)
{
    ir_graph *g = tu_graph_new("handmade.onnx", 18);
    int x = tu_input(g, "x", IR_F32, 3, TU_DIMS(-1, 4, 6));
    tu_output(g, tu_node(g, IR_OP_TRANSPOSE, NULL, IR_F32, 1, TU_IN(x), 1,
                         TU_AT(tu_ints(g, IR_ATTR_PERM, 3, TU_DIMS(2, 0, 1)))));
    int st = tu_const_ints(g, "st", 1, TU_DIMS(5)), en = tu_const_ints(g, "en", 1, TU_DIMS(0));
    int axs = tu_const_ints(g, "axs", 1, TU_DIMS(2)), stp = tu_const_ints(g, "stp", 1, TU_DIMS(-2));
    int sl = tu_node(g, IR_OP_SLICE, NULL, IR_F32, 5, TU_IN(x, st, en, axs, stp), 0, NULL);
    tu_output(g, sl);
    int idx = tu_const_ints(g, "idx", 3, TU_DIMS(3, 0, 2)), nidx = tu_const_ints(g, "nidx", 3, TU_DIMS(3, 0, -2));
    int last = tu_const_i64(g, "last", 0, NULL, TU_DIMS(-1));
    const ir_attr axis1 = tu_int(IR_ATTR_AXIS, 1), axis2 = tu_int(IR_ATTR_AXIS, 2), axis0 = tu_int(IR_ATTR_AXIS, 0);
    tu_output(g, tu_node(g, IR_OP_GATHER, NULL, IR_F32, 2, TU_IN(x, idx), 1, &axis1));
    tu_output(g, tu_node(g, IR_OP_GATHER, NULL, IR_F32, 2, TU_IN(x, nidx), 1, &axis1));
    tu_output(g, tu_node(g, IR_OP_GATHER, NULL, IR_F32, 2, TU_IN(x, last), 1, &axis2));
    tu_output(g, tu_node(g, IR_OP_CONCAT, NULL, IR_F32, 2, TU_IN(x, sl), 1, &axis2));
    tu_output(g, tu_node(g, IR_OP_CONCAT, NULL, IR_F32, 2, TU_IN(x, x), 1, &axis0));
    int parts[2] = {tu_value(g, "p0", IR_F32), tu_value(g, "p1", IR_F32)};
    int sizes = tu_const_ints(g, "sizes", 2, TU_DIMS(1, 3));
    tu_node_out(g, IR_OP_SPLIT, "split", 2, TU_IN(x, sizes), 2, parts, 1, &axis1);
    tu_output(g, parts[1]);
    int t = tu_const_f32(g, "t", 3, TU_DIMS(1, 1, 6), NULL), shp = tu_const_ints(g, "shp", 3, TU_DIMS(2, 4, 6));
    tu_output(g, tu_node(g, IR_OP_EXPAND, NULL, IR_F32, 2, TU_IN(t, shp), 0, NULL));
    int rs = tu_const_ints(g, "rs", 2, TU_DIMS(0, 24));
    tu_output(g, tu_node(g, IR_OP_RESHAPE, NULL, IR_F32, 2, TU_IN(x, rs), 0, NULL)); /* a view that is an output */
    tu_output(g, x);                                                                  /* an input that is an output */
    tu_output(g, t); /* a constant that is an output */
    return g;
}

ir_graph *tu_graph_matmul(void)
{
    ir_graph *g = tu_graph_new("handmade.onnx", 18);
    int a = tu_input(g, "a", IR_F32, 4, TU_DIMS(-1, 2, 3, 4));
    int wv = tu_input(g, "wv", IR_F32, 2, TU_DIMS(4, 5));
    tu_output(g, tu_node(g, IR_OP_MATMUL, NULL, IR_F32, 2, TU_IN(a, wv), 0, NULL)); /* B shared by every batch */
    int v = tu_input(g, "v", IR_F32, 4, TU_DIMS(-1, 2, 4, 3));
    tu_output(g, tu_node(g, IR_OP_MATMUL, NULL, IR_F32, 2, TU_IN(a, v), 0, NULL));
    int x = tu_input(g, "x", IR_F32, 2, TU_DIMS(-1, 4));
    int wb = tu_const_f32(g, "wb", 2, TU_DIMS(5, 4), NULL), cb = tu_const_f32(g, "cb", 1, TU_DIMS(5), NULL);
    tu_output(g, tu_node(g, IR_OP_GEMM, NULL, IR_F32, 3, TU_IN(x, wb, cb), 3,
                         TU_AT(tu_int(IR_ATTR_TRANS_B, 1), tu_float(IR_ATTR_ALPHA, 0.5f),
                               tu_float(IR_ATTR_BETA, 2.0f))));
    int wc = tu_const_f32(g, "wc", 2, TU_DIMS(4, 7), NULL);
    tu_output(g, tu_node(g, IR_OP_MATMUL, NULL, IR_F32, 2, TU_IN(a, wc), 0, NULL)); /* constant weight: packed */
    return g;
}

ir_graph *tu_graph_fused(void)
{
    ir_graph *g = tu_graph_new("handmade.onnx", 18);
    int x = tu_input(g, "x", IR_F32, 4, TU_DIMS(-1, 3, 4, 5));
    float var[3] = {0.5f, 1.5f, 2.0f};
    int s = tu_const_f32(g, "s", 1, TU_DIMS(3), NULL), bn_b = tu_const_f32(g, "bn_b", 1, TU_DIMS(3), NULL);
    int m = tu_const_f32(g, "m", 1, TU_DIMS(3), NULL), vv = tu_const_f32(g, "vv", 1, TU_DIMS(3), var);
    tu_output(g, tu_node(g, IR_OP_BATCHNORM, NULL, IR_F32, 5, TU_IN(x, s, bn_b, m, vv), 1,
                         TU_AT(tu_float(IR_ATTR_EPSILON, 1e-3f))));
    int h = tu_input(g, "h", IR_F32, 3, TU_DIMS(-1, 5, 8)), r = tu_input(g, "r", IR_F32, 3, TU_DIMS(-1, 5, 6));
    int wl = tu_const_f32(g, "wl", 2, TU_DIMS(8, 6), NULL), bias = tu_const_f32(g, "bias", 1, TU_DIMS(6), NULL);
    tu_output(g, tu_node(g, IR_OP_LINEAR, NULL, IR_F32, 4, TU_IN(h, wl, bias, r), 1,
                         TU_AT(tu_int(IR_ATTR_ACTIVATION, IR_ACT_GELU_ERF))));
    tu_output(g, tu_node(g, IR_OP_LINEAR, NULL, IR_F32, 2, TU_IN(h, wl), 1,
                         TU_AT(tu_int(IR_ATTR_ACTIVATION, IR_ACT_RELU6))));
    int h6 = tu_input(g, "h6", IR_F32, 3, TU_DIMS(-1, 5, 6)), w6 = tu_const_f32(g, "w6", 2, TU_DIMS(6, 3), NULL);
    tu_output(g, tu_node(g, IR_OP_LINEAR, NULL, IR_F32, 2, TU_IN(h6, w6), 1,
                         TU_AT(tu_int(IR_ATTR_ACTIVATION, IR_ACT_RELU)))); /* K = 6: unaligned rows */
    int qkv = tu_input(g, "qkv", IR_F32, 3, TU_DIMS(-1, 5, 24));
    tu_output(g, tu_node(g, IR_OP_ATTENTION, NULL, IR_F32, 1, TU_IN(qkv), 5,
                         TU_AT(tu_int(IR_ATTR_HEADS, 2), tu_int(IR_ATTR_HEAD_SIZE, 4), tu_int(IR_ATTR_QKV_LAYOUT, 1),
                               tu_float(IR_ATTR_SCALE, 0.5f), tu_float(IR_ATTR_POST_SCALE, 0.25f))));
    tu_output(g, tu_node(g, IR_OP_ATTENTION, NULL, IR_F32, 1, TU_IN(qkv), 3,
                         TU_AT(tu_int(IR_ATTR_HEADS, 2), tu_int(IR_ATTR_HEAD_SIZE, 4), tu_float(IR_ATTR_SCALE, 0.5f))));
    int qkv16 = tu_input(g, "qkv16", IR_F32, 3, TU_DIMS(-1, 70, 96)); /* 70 tokens: partial query and key blocks */
    tu_output(g, tu_node(g, IR_OP_ATTENTION, NULL, IR_F32, 1, TU_IN(qkv16), 3,
                         TU_AT(tu_int(IR_ATTR_HEADS, 2), tu_int(IR_ATTR_HEAD_SIZE, 16), tu_float(IR_ATTR_SCALE, 0.25f))));
    tu_output(g, tu_node(g, IR_OP_ATTENTION, NULL, IR_F32, 1, TU_IN(qkv16), 4,
                         TU_AT(tu_int(IR_ATTR_HEADS, 2), tu_int(IR_ATTR_HEAD_SIZE, 16), tu_int(IR_ATTR_QKV_LAYOUT, 1),
                               tu_float(IR_ATTR_SCALE, 0.25f))));
    /* a bias per image, head and row; cross-attention of 33 queries with a bias broadcast over images and rows */
    int mask = tu_input(g, "mask", IR_F32, 4, TU_DIMS(-1, 2, 70, 70));
    tu_output(g, tu_node(g, IR_OP_ATTENTION, NULL, IR_F32, 2, TU_IN(qkv16, mask), 3,
                         TU_AT(tu_int(IR_ATTR_HEADS, 2), tu_int(IR_ATTR_HEAD_SIZE, 16), tu_float(IR_ATTR_SCALE, 0.25f))));
    int kv16 = tu_input(g, "kv16", IR_F32, 3, TU_DIMS(-1, 70, 64)), q16 = tu_input(g, "q16", IR_F32, 3, TU_DIMS(-1, 33, 32));
    int table = tu_const_f32(g, "table", 4, TU_DIMS(1, 2, 1, 70), NULL);
    tu_output(g, tu_node(g, IR_OP_ATTENTION, NULL, IR_F32, 3, TU_IN(kv16, table, q16), 3,
                         TU_AT(tu_int(IR_ATTR_HEADS, 2), tu_int(IR_ATTR_HEAD_SIZE, 16), tu_float(IR_ATTR_SCALE, 0.25f))));
    return g;
}

/* ---- running graphs ---- */

ir_tensor tu_f32_tensor(int rank, const int64_t *dims, const float *vals)
{
    ir_tensor t;
    assert_int_equal(ir_tensor_alloc(&t, IR_F32, rank, dims), VITC_OK);
    int64_t n = ir_tensor_numel(&t);
    for (int64_t i = 0; i < n; i++)
        ir_tensor_set(&t, i, vals ? vals[i] : tu_rnd());
    return t;
}

void tu_random_inputs(const ir_graph *g, int64_t batch, ir_tensor *in)
{
    for (int i = 0; i < g->ninputs; i++) {
        const ir_value *v = &g->values[g->inputs[i]];
        int64_t dims[IR_MAX_RANK];
        for (int k = 0; k < v->rank; k++)
            dims[k] = ir_dim_eval(v->dims[k], batch);
        assert_int_equal(ir_tensor_alloc(&in[i], v->dtype, v->rank, dims), 0);
        int64_t n = ir_tensor_numel(&in[i]);
        for (int64_t k = 0; k < n; k++) {
            if (ir_dtype_is_float(v->dtype))
                ir_tensor_set(&in[i], k, 2 * tu_rnd());
            else
                ir_tensor_set_i64(&in[i], k, (int64_t)floor(20 * tu_rnd()));
        }
    }
}

int tu_interpret(const ir_graph *g, const ir_tensor *in, ir_tensor *out, char **msg)
{
    size_t len;
    char *text = NULL;
    FILE *mem = open_memstream(&text, &len);
    assert_non_null(mem);
    vitc_diag d;
    vitc_diag_init(&d, g->path);
    d.out = mem;
    int st = ir_interpret(g, in, out, NULL, NULL, &d);
    fclose(mem);
    if (msg)
        *msg = text;
    else
        free(text);
    return st;
}

void tu_interpret_ok(const ir_graph *g, const ir_tensor *in, ir_tensor *out)
{
    char *msg;
    int st = tu_interpret(g, in, out, &msg);
    if (st)
        fail_msg("the interpreter failed with status %d: %s", st, msg);
    free(msg);
}

double tu_error(const ir_tensor *a, const ir_tensor *b)
{
    assert_int_equal(a->rank, b->rank);
    for (int i = 0; i < a->rank; i++)
        assert_int_equal(a->dims[i], b->dims[i]);
    if (ir_dtype_is_float(b->dtype))
        return ir_rel_error(a, b);
    int64_t n = ir_tensor_numel(b);
    for (int64_t i = 0; i < n; i++)
        if (ir_tensor_get_i64(a, i) != ir_tensor_get_i64(b, i))
            return 1;
    return 0;
}

double tu_cosine(const ir_tensor *a, const ir_tensor *b)
{
    double ab = 0, aa = 0, bb = 0;
    for (int64_t i = 0; i < ir_tensor_numel(a); i++) {
        double x = ir_tensor_get(a, i), y = ir_tensor_get(b, i);
        ab += x * y, aa += x * x, bb += y * y;
    }
    return aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : (aa == bb ? 1.0 : 0.0);
}

int tu_compile_cpu(ir_graph *g, const char *so, int opt_level, int64_t max_batch, char **msg)
{
    return tu_compile_cpu_as(g, so, opt_level, max_batch, NULL, msg);
}

int tu_compile_cpu_as(ir_graph *g, const char *so, int opt_level, int64_t max_batch, const char *cpu, char **msg)
{
    size_t len;
    char *text = NULL;
    FILE *mem = open_memstream(&text, &len);
    vitc_diag d;
    vitc_diag_init(&d, g->path);
    d.out = mem;
    cg_options o = {.output = so, .source = g->path, .max_batch = max_batch, .opt_level = opt_level, .cpu = cpu};
    int st = cg_compile(&cg_llvm_backend, g, &o, &d);
    fclose(mem);
    if (msg)
        *msg = text;
    else
        free(text);
    return st;
}

/* Runs a compiled model at the batch of its inputs; outputs are allocated
 * here from the model's descriptor. */
void tu_run_so(const char *so, const ir_tensor *in, int nin, ir_tensor *out, int nout, int64_t batch)
{
    vitc_model *m;
    vitc_context *c;
    vitc_status st = vitc_model_load(so, &m);
    if (st)
        fail_msg("loading %s: %s", so, vitc_last_error());
    assert_int_equal(vitc_model_num_inputs(m), nin);
    assert_int_equal(vitc_model_num_outputs(m), nout);
    assert_int_equal(vitc_context_create(m, 2, &c), VITC_STATUS_OK);
    vitc_tensor *ti = calloc((size_t)nin + 1, sizeof *ti), *to = calloc((size_t)nout + 1, sizeof *to);
    assert_true(ti && to);
    for (int i = 0; i < nin; i++) {
        ti[i].dtype = ir_dtype_onnx_code(in[i].dtype);
        ti[i].rank = in[i].rank;
        memcpy(ti[i].dims, in[i].dims, sizeof(int64_t) * (size_t)in[i].rank);
        ti[i].data = in[i].data;
    }
    for (int i = 0; i < nout; i++) {
        vitc_tensor_info info;
        assert_int_equal(vitc_model_output(m, i, &info), VITC_STATUS_OK);
        int64_t dims[IR_MAX_RANK];
        for (int k = 0; k < info.rank; k++)
            dims[k] = info.dims[k] * (info.is_batch[k] ? batch : 1);
        assert_int_equal(ir_tensor_alloc(&out[i], (ir_dtype)ir_dtype_from_onnx(info.dtype), info.rank, dims), 0);
        to[i].dtype = info.dtype;
        to[i].rank = info.rank;
        memcpy(to[i].dims, dims, sizeof(int64_t) * (size_t)info.rank);
        to[i].data = out[i].data;
    }
    st = vitc_run(c, ti, nin, to, nout);
    if (st)
        fail_msg("running %s at batch %lld: %s", so, (long long)batch, vitc_last_error());
    free(ti), free(to);
    vitc_context_free(c);
    vitc_model_free(m);
}

char *tu_read_file(const char *path, size_t *len)
{
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s)
        s[n] = 0;
    fclose(f);
    *len = (size_t)n;
    return s;
}

void tu_set_knobs(const char *const *kv, int n, int on)
{
    for (int k = 0; k < n && kv[k]; k++) {
        const char *eq = strchr(kv[k], '=');
        assert_non_null(eq);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)(eq - kv[k]), kv[k]);
        if (on)
            assert_int_equal(setenv(name, eq + 1, 1), 0);
        else
            unsetenv(name);
    }
}

#ifdef VITC_HAVE_CUDA
/* ---- the CUDA emulation ---- */

static char cachedir[4096], emudir[8300];

typedef int (*emu_launch_fn)(void *fn, const unsigned *grid, const unsigned *block, unsigned long long smem,
                             const void *args, char *err, unsigned long errlen);

/* Compiles the program at cu into the host library emu-<program id>.so of
 * the cache directory (where the fake driver looks for it), or with sm90a
 * emu-<program id>-sm90a.so, whose kernels take their sm_90a bodies (wgmma,
 * TMA, mbarrier: VITC_EMU_SM90A); kept across runs. */
void tu_emu_build_as(const char *cu, int sm90a, char *so, size_t n)
{
    size_t len;
    char *text = tu_read_file(cu, &len);
    assert_non_null(text);
    const char *id = strstr(text, "\"vitc-program:");
    if (!id)
        fail_msg("%s has no program id", cu);
    snprintf(so, n, "%.8000s/emu-%.16s%s.so", emudir, id + strlen("\"vitc-program:"), sm90a ? "-sm90a" : "");
    free(text);
    struct stat sb;
    if (stat(so, &sb) == 0)
        return;
    char tmp[8300], inc[4096], cmd[32768];
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", so, (long)getpid());
    const char *cxx = getenv("CXX");
    snprintf(cmd, sizeof cmd, "%s -std=c++17 -O1 -w -shared -fPIC -DVITC_EMU%s -I'%s' -x c++ '%s' -o '%s' 2>&1",
             cxx && *cxx ? cxx : "c++", sm90a ? " -DVITC_EMU_SM90A" : "", tu_path(inc, sizeof inc, "tests"), cu,
             tmp);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char out[8192];
    size_t r = fread(out, 1, sizeof out - 1, p);
    out[r] = 0;
    int rc = pclose(p);
    if (rc != 0)
        fail_msg("host compile of %s failed (%d):\n%s", cu, rc, out);
    assert_int_equal(rename(tmp, so), 0);
}

void tu_emu_build(const char *cu, char *so, size_t n) { tu_emu_build_as(cu, 0, so, n); }

/* Device memory of the emulation: n bytes ending at an inaccessible page. */
typedef struct {
    void *map;
    size_t span;
    unsigned char *p;
} guarded;

static void guarded_alloc(guarded *g, size_t n)
{
    size_t page = 4096, body = (n + 255) / 256 * 256;
    g->span = (body + page - 1) / page * page + page;
    g->map = mmap(NULL, g->span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(g->map != MAP_FAILED);
    assert_int_equal(mprotect((char *)g->map + g->span - page, page, PROT_NONE), 0);
    g->p = (unsigned char *)g->map + g->span - page - body;
    memset(g->map, 0x7f, g->span - page); /* stale memory is garbage */
}

/* Runs the plan of the model .so on the emulation, as the runtime would:
 * inputs copied in at their offsets, every launch of this batch in order
 * (on an sm_90a emulation library with the launch's shared memory for that
 * image and its tensor maps encoded), outputs (allocated here, as the
 * descriptor says) copied back.  0, or -1 with the failed launch in err
 * (and no outputs). */
int tu_emulate_try(const char *model_so, const char *emu_so, int64_t batch, const ir_tensor *in, int nin,
                   ir_tensor *out, int nout, int *nlaunches, char *err, size_t errlen)
{
    void *mh = dlopen(model_so, RTLD_NOW | RTLD_LOCAL), *eh = dlopen(emu_so, RTLD_NOW | RTLD_LOCAL);
    if (!mh || !eh)
        fail_msg("dlopen: %s", dlerror());
    const vitc_abi_model *a = dlsym(mh, VITC_ABI_SYMBOL);
    emu_launch_fn launch = (emu_launch_fn)dlsym(eh, "vk_emu_launch");
    void (*set_tmaps)(const void *, int) = (void (*)(const void *, int))dlsym(eh, "vk_emu_set_tmaps");
    const int *sm90a = dlsym(eh, "vk_emu_sm90a");
    assert_non_null(a);
    assert_non_null(launch);
    assert_non_null(set_tmaps);
    assert_non_null(sm90a);
    const vitc_cuda_plan *p = a->cuda_plan;
    assert_non_null(p);
    assert_int_equal(a->ninputs, nin);
    assert_int_equal(a->noutputs, nout);
    guarded ws, w;
    guarded_alloc(&ws, (size_t)p->workspace_bytes);
    guarded_alloc(&w, (size_t)a->weights_bytes);
    if (a->weights_bytes) /* a graph without constants has no weights (NULL) */
        memcpy(w.p, a->weights, (size_t)a->weights_bytes);
    for (int j = 0; j < nin; j++) {
        assert_int_equal(vitc_abi_numel_at(&a->inputs[j], batch), ir_tensor_numel(&in[j]));
        assert_int_equal(a->inputs[j].dtype, ir_dtype_onnx_code(in[j].dtype));
        memcpy(ws.p + p->inputs[j].offset, in[j].data, ir_tensor_nbytes(&in[j]));
    }
    int rc = 0;
    *nlaunches = 0;
    for (int i = 0; i < p->nlaunches && rc == 0; i++) {
        const vitc_cuda_launch *l = &p->launches[i];
        if (batch < l->min_batch || batch > l->max_batch)
            continue;
        unsigned grid[3], block[3] = {l->block, 1, 1};
        int empty = 0;
        for (int k = 0; k < 3; k++) {
            int64_t n = vitc_cuda_poly_at(&l->grid[k], batch);
            grid[k] = n <= 0 ? 0 : (unsigned)((n + l->grid_div[k] - 1) / l->grid_div[k]);
            empty |= grid[k] == 0;
        }
        if (empty)
            continue;
        unsigned long long args[VITC_CUDA_MAX_ARGS] = {0};
        for (int k = 0; k < l->nargs; k++) {
            int64_t v = vitc_cuda_poly_at(&l->args[k].value, batch);
            args[k] = l->args[k].kind == VITC_CUDA_ARG_WORKSPACE ? (unsigned long long)(uintptr_t)(ws.p + v)
                      : l->args[k].kind == VITC_CUDA_ARG_WEIGHTS ? (unsigned long long)(uintptr_t)(w.p + v)
                                                                 : (unsigned long long)v;
        }
        /* the tensor maps as the runtime encodes them for the sm_90a image (runtime/cuda_exec.c) */
        unsigned char maps[VITC_CUDA_MAX_TMAPS][128];
        int nmaps = *sm90a ? l->ntmaps : 0;
        for (int k = 0; k < nmaps; k++) {
            const vitc_cuda_tmap *t = &l->tmaps[k];
            vk_emu_tmap_encode(maps[k], args[t->arg], (uint64_t)t->cols, (uint64_t)vitc_cuda_poly_at(&t->rows, batch),
                               (uint64_t)t->row_bytes, t->box_cols, t->box_rows, 2, 128);
        }
        set_tmaps(maps, nmaps);
        const char *name = p->functions[l->function];
        void *fn = dlsym(eh, name);
        if (!fn)
            fail_msg("%s: no kernel %s in the emulation", model_so, name);
        unsigned smem = *sm90a && l->shared_bytes_specific ? l->shared_bytes_specific : l->shared_bytes;
        char why[2048];
        if (launch(fn, grid, block, smem, args, why, sizeof why) != 0) {
            snprintf(err, errlen, "%s batch %lld: launch %d (%s, grid %u x %u x %u, block %u, %u bytes shared): %s",
                     model_so, (long long)batch, i, name, grid[0], grid[1], grid[2], l->block, smem, why);
            rc = -1;
        }
        ++*nlaunches;
    }
    for (int j = 0; j < nout && rc == 0; j++) {
        const vitc_abi_tensor *t = &a->outputs[j];
        int64_t dims[VITC_ABI_MAX_RANK];
        for (int k = 0; k < t->rank; k++)
            dims[k] = ((t->batch_mask >> k) & 1) ? t->dims[k] * batch : t->dims[k];
        int dt = ir_dtype_from_onnx(t->dtype);
        assert_true(dt >= 0);
        assert_int_equal(ir_tensor_alloc(&out[j], (ir_dtype)dt, t->rank, dims), 0);
        const unsigned char *src = (p->outputs[j].space == VITC_CUDA_SPACE_WEIGHTS ? w.p : ws.p) + p->outputs[j].offset;
        memcpy(out[j].data, src, ir_tensor_nbytes(&out[j]));
    }
    munmap(ws.map, ws.span);
    munmap(w.map, w.span);
    dlclose(eh);
    dlclose(mh);
    return rc;
}

void tu_emulate(const char *model_so, const char *emu_so, int64_t batch, const ir_tensor *in, int nin,
                ir_tensor *out, int nout, int *nlaunches)
{
    char err[4096];
    if (tu_emulate_try(model_so, emu_so, batch, in, nin, out, nout, nlaunches, err, sizeof err) != 0)
        fail_msg("%s", err);
}

int tu_emu_init(void)
{
    /* one cache for every build directory (the sanitizer build compiles the
     * same programs): NVRTC images and emulation libraries, keyed by program */
    snprintf(cachedir, sizeof cachedir, "%s", tu_nvrtc_cache());
    /* emulation libraries depend on the emulation too: a directory per version of it */
    char hdr[4096];
    size_t len;
    char *text = tu_read_file(tu_path(hdr, sizeof hdr, "tests/cuda_emu.h"), &len);
    if (!text)
        return -1;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)text[i];
        h *= 0x100000001b3ull;
    }
    free(text);
    snprintf(emudir, sizeof emudir, "%s/emu-%016llx", cachedir, (unsigned long long)h);
    mkdir(emudir, 0755);
    return 0;
}

const char *tu_emu_cache_dir(void) { return cachedir; }
const char *tu_emu_dir(void) { return emudir; }
#endif
