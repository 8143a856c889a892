/* test_codegen.c: the LLVM CPU backend and `vitc MODEL.onnx -o MODEL.so`.
 *
 *  - every fixture compiled once by the CLI (max batch 4) and run through the
 *    runtime at batch 1 and 3: within 1e-4 (max |out - ref| / max |ref|) of
 *    PyTorch, of the reference interpreter and, where the venv has it, of
 *    ONNX Runtime;
 *  - the same fixtures unfused (only shape folding and dce), so that every op
 *    the importers produce goes through its own code generator;
 *  - small hand-built graphs for what the fixtures do not reach: direct and
 *    1-D convolutions, reductions over inner axes, Softmax and
 *    LayerNormalization over non-last axes, integer and bool element-wise
 *    work, negative-step slices, scattered gathers, concatenation along the
 *    batch, batched and broadcast matrix products, the fused Linear and
 *    Attention ops, a GEMM-to-GEMM tensor stored with padded rows; each
 *    against the interpreter at batch 1 and 3;
 *  - the memory plan never overlaps two buffers that are alive together;
 *  - failures leave nothing behind: a broken model, an unsupported node
 *    (every one listed), a failing linker; -o onto the model or a directory
 *    is refused, and so are CPUs and features LLVM does not know;
 *  - --dump-after, --verbose, --cpu; --weights external gives the same numbers. */
#include "testutil.h"

#include "codegen/backend.h"
#include "frontend/onnx.h"
#include "ir/interp.h"
#include "passes/memplan.h"
#include "passes/passes.h"
#include "vitc/runtime.h"

#include <dirent.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TOL 1e-4

extern char **environ;

static tu_fixture fixtures[64];
static int nfixtures;
static char tmp[4096];

/* ---- helpers ---- */

/* Compiles g with the LLVM backend at opt_level for batches up to max_batch
 * into tmp/<name>.so (its path into so), else fails naming the diagnostics. */
static void compile_or_fail(ir_graph *g, const char *name, int opt_level, int64_t max_batch, char *so, size_t n)
{
    char *msg;
    snprintf(so, n, "%.3900s/%.150s.so", tmp, name);
    if (tu_compile_cpu(g, so, opt_level, max_batch, &msg))
        fail_msg("%s: compile failed: %s", name, msg);
    free(msg);
}

static int file_exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

/* Entries of dir whose name starts with prefix. */
static int count_entries(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    if (d)
        closedir(d);
    return n;
}

/* ---- fixtures: CLI compile, runtime run, against PyTorch / interpreter / ORT ---- */

/* ONNX Runtime's outputs for every fixture and batch, written by the Python
 * of env VITC_PYTHON (ctest sets it from the CMake option), else the source
 * tree's .venv/bin/python, into tmp/ort; ort_available 1 once they are there.
 * With no such Python, or one without onnxruntime, the columns are skipped
 * (printed, and ctest reports the test skipped); a script that fails
 * otherwise fails the test. */
static int ort_available;

static void run_ort(void)
{
    char py[4096], script[8192];
    const char *env = getenv("VITC_PYTHON");
    if (env && *env)
        snprintf(py, sizeof py, "%s", env);
    else
        tu_path(py, sizeof py, ".venv/bin/python");
    if (access(py, X_OK) != 0) {
        print_message("ONNX Runtime columns skipped: no Python at %s (set VITC_PYTHON, or run ./setup.sh)\n", py);
        tu_skipped++;
        return;
    }
    snprintf(script, sizeof script,
             "import sys, os\n"
             "try:\n    import numpy as np\n    import onnxruntime as ort\nexcept ImportError as e:\n"
             "    print(e)\n    sys.exit(3)\n"
             "src, out = sys.argv[1], sys.argv[2]\n"
             "os.makedirs(out, exist_ok=True)\n"
             "for line in open(os.path.join(src, 'tests/models/fixtures.tsv')).readlines()[1:]:\n"
             "    model, family = line.split()[:2]\n"
             "    s = ort.InferenceSession(os.path.join(src, 'tests/models', model), providers=['CPUExecutionProvider'])\n"
             "    for b in (1, 3):\n"
             "        x = np.load(os.path.join(src, 'tests/models', '%%s.b%%d.input.npy' %% (family, b)))\n"
             "        y = s.run(None, {s.get_inputs()[0].name: x})[0]\n"
             "        np.save(os.path.join(out, '%%s.b%%d.npy' %% (model, b)), y)\n");
    char outdir[4200];
    snprintf(outdir, sizeof outdir, "%s/ort", tmp);
    char *argv[] = {py, "-c", script, (char *)tu_source_dir(), outdir, NULL};
    pid_t pid;
    int status;
    fflush(stdout);
    if (posix_spawn(&pid, py, NULL, NULL, argv, environ) != 0 || waitpid(pid, &status, 0) != pid)
        fail_msg("could not run %s for the ONNX Runtime columns", py);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 3) {
        print_message("ONNX Runtime columns skipped: %s has no numpy or onnxruntime (the line above)\n", py);
        tu_skipped++;
        return;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("%s, writing ONNX Runtime's outputs of the fixtures, exited %d (signal %d): its messages are above",
                 py, WIFEXITED(status) ? WEXITSTATUS(status) : -1, WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    ort_available = 1;
}

static void test_fixtures_compiled_match_references(void **state)
{
    assert_true(nfixtures >= 15);
    run_ort();
    print_message("%-24s %8s %10s %10s %10s %10s %10s %10s\n", "fixture", "compile", "b1 torch", "b3 torch",
                  "b1 interp", "b3 interp", "b1 ort", "b3 ort");
    double worst = 0;
    for (int i = 0; i < nfixtures; i++) {
        const tu_fixture *fx = &fixtures[i];
        char onnx[4096], rel[256], so[4200];
        snprintf(rel, sizeof rel, "tests/models/%.95s", fx->model);
        tu_path(onnx, sizeof onnx, rel);
        snprintf(so, sizeof so, "%.3900s/%.95s.so", tmp, fx->model);
        char *out, *err;
        const char *args[] = {onnx, "-o", so, "--batch", "4", NULL};
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        int rc = tu_run_vitc(args, &out, &err);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (rc != 0)
            fail_msg("vitc %s -o %s exited %d: %s", fx->model, so, rc, err);
        free(out), free(err);
        double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
        ir_graph *g = tu_load_fixture(fx);
        double e[6] = {NAN, NAN, NAN, NAN, NAN, NAN};
        for (int k = 0; k < 2; k++) {
            int b = k ? 3 : 1;
            ir_tensor in, ref, got, interp = {0};
            snprintf(rel, sizeof rel, "tests/models/%.31s.b%d.input.npy", fx->family, b);
            tu_read_npy(rel, &in);
            snprintf(rel, sizeof rel, "tests/models/%.31s.b%d.output.npy", fx->family, b);
            tu_read_npy(rel, &ref);
            tu_run_so(so, &in, 1, &got, 1, b);
            vitc_diag d;
            vitc_diag_init(&d, fx->model);
            assert_int_equal(ir_interpret(g, &in, &interp, NULL, NULL, &d), 0);
            e[k] = tu_error(&got, &ref);
            e[2 + k] = tu_error(&got, &interp);
            if (ort_available) {
                ir_tensor ort;
                vitc_diag_init(&d, "ort");
                char p[4400];
                snprintf(p, sizeof p, "%.3900s/ort/%.95s.b%d.npy", tmp, fx->model, b);
                assert_int_equal(ir_npy_read(p, &ort, &d), 0);
                e[4 + k] = tu_error(&got, &ort);
                ir_tensor_free(&ort);
            }
            ir_tensor_free(&in), ir_tensor_free(&ref), ir_tensor_free(&got), ir_tensor_free(&interp);
        }
        ir_graph_free(g);
        print_message("%-24s %7.2fs %10.3g %10.3g %10.3g %10.3g %10.3g %10.3g\n", fx->model, secs, e[0], e[1], e[2],
                      e[3], e[4], e[5]);
        for (int k = 0; k < 6; k++) {
            if (k >= 4 && !ort_available)
                continue;
            if (!(e[k] <= TOL))
                fail_msg("%s: error %g (column %d) exceeds %g", fx->model, e[k], k, TOL);
            worst = e[k] > worst ? e[k] : worst;
        }
    }
    print_message("worst error over %d fixtures: %.3g (tolerance %g)\n", nfixtures, worst, TOL);
}

/* The fixtures as imported (shape arithmetic folded, nothing fused): Einsum,
 * Softmax, decomposed LayerNorm, Conv, BatchNormalization, Split, Gather ...
 * each through its own generator, against the interpreter. */
static void test_unfused_fixtures_match_interpreter(void **state)
{
    print_message("%-24s %8s %10s %10s\n", "fixture (unfused)", "nodes", "b1 interp", "b3 interp");
    for (int i = 0; i < nfixtures; i++) {
        const tu_fixture *fx = &fixtures[i];
        ir_graph *g = tu_load_fixture(fx);
        vitc_diag d;
        vitc_diag_init(&d, fx->model);
        assert_int_equal(pass_fold_shapes(g, &d), 0);
        assert_int_equal(pass_dce(g, &d), 0);
        ir_tensor in[2], ref[2], got[2];
        char so[4200], name[128];
        tu_fixture_reference(fx, g, in, ref);
        snprintf(name, sizeof name, "unfused-%.95s", fx->model);
        compile_or_fail(g, name, 2, 4, so, sizeof so);
        double e[2];
        for (int k = 0; k < 2; k++) {
            tu_run_so(so, &in[k], 1, &got[k], 1, k ? 3 : 1);
            e[k] = tu_error(&got[k], &ref[k]);
            ir_tensor_free(&in[k]), ir_tensor_free(&ref[k]), ir_tensor_free(&got[k]);
        }
        print_message("%-24s %8d %10.3g %10.3g\n", fx->model, g->nnodes, e[0], e[1]);
        if (!(e[0] <= TOL && e[1] <= TOL))
            fail_msg("%s unfused: error %g / %g exceeds %g", fx->model, e[0], e[1], TOL);
        ir_graph_free(g);
        unlink(so);
    }
}

/* ---- hand-built graphs ---- */

/* Compiles g unfused and checks every output against the interpreter at
 * batch 1 and 3; returns the worst error. */
static double check_graph(const char *what, ir_graph *g)
{
    vitc_diag d;
    vitc_diag_init(&d, what);
    tu_check_graph(g, what);
    ir_tensor in[2][32], ref[2][32], got[2][32];
    assert_true(g->ninputs <= 32 && g->noutputs <= 32);
    memset(ref, 0, sizeof ref);
    for (int k = 0; k < 2; k++) {
        tu_random_inputs(g, k ? 3 : 1, in[k]);
        if (ir_interpret(g, in[k], ref[k], NULL, NULL, &d))
            fail_msg("%s: the interpreter failed", what);
    }
    char so[4200];
    compile_or_fail(g, what, 2, 3, so, sizeof so);
    double worst = 0;
    char line[512];
    size_t ll = (size_t)snprintf(line, sizeof line, "%-18s", what);
    for (int k = 0; k < 2; k++) {
        tu_run_so(so, in[k], g->ninputs, got[k], g->noutputs, k ? 3 : 1);
        for (int o = 0; o < g->noutputs; o++) {
            double e = tu_error(&got[k][o], &ref[k][o]);
            if (ll < sizeof line)
                ll += (size_t)snprintf(line + ll, sizeof line - ll, " b%d/%s %.3g", k ? 3 : 1,
                                       g->values[g->outputs[o]].name, e);
            if (!(e <= TOL))
                fail_msg("%s: output %d ('%s') at batch %d: error %g exceeds %g", what, o,
                         g->values[g->outputs[o]].name, k ? 3 : 1, e, TOL);
            worst = e > worst ? e : worst;
            ir_tensor_free(&got[k][o]);
            ir_tensor_free(&ref[k][o]);
        }
        for (int i = 0; i < g->ninputs; i++)
            ir_tensor_free(&in[k][i]);
    }
    print_message("%s\n", line);
    unlink(so);
    ir_graph_free(g);
    return worst;
}

static void test_conv_direct_and_1d(void **state)
{
    ir_graph *g = tu_graph_conv();
    int xp = tu_input(g, "xp", IR_F32, 4, TU_DIMS(-1, 3, 8, 8)); /* patchify: kernel = stride */
    int wp = tu_const_f32(g, "wp", 4, TU_DIMS(5, 3, 4, 4), NULL), bp = tu_const_f32(g, "bp", 1, TU_DIMS(5), NULL);
    tu_output(g, tu_node(g, IR_OP_CONV, NULL, IR_F32, 3, TU_IN(xp, wp, bp), 2,
                TU_AT(tu_ints(g, IR_ATTR_STRIDES, 2, TU_DIMS(4, 4)), tu_ints(g, IR_ATTR_KERNEL_SHAPE, 2, TU_DIMS(4, 4)))));
    check_graph("conv", g);
}

static void test_reductions_softmax_layernorm_axes(void **state)
{
    ir_graph *g = tu_graph_reduce(); /* and LayerNorm's three outputs */
    int x = g->inputs[0];
    int s = tu_const_f32(g, "s", 2, TU_DIMS(5, 6), NULL), bb = tu_const_f32(g, "bb", 1, TU_DIMS(6), NULL);
    int y = tu_value(g, "ln", IR_F32), mean = tu_value(g, "mean", IR_F32), inv = tu_value(g, "inv", IR_F32);
    ir_attr la[2] = {tu_int(IR_ATTR_AXIS, 1), tu_float(IR_ATTR_EPSILON, 1e-3f)};
    tu_node_out(g, IR_OP_LAYERNORM, "ln", 3, TU_IN(x, s, bb), 3, TU_IN(y, mean, inv), 2, la);
    tu_output(g, y), tu_output(g, mean), tu_output(g, inv);
    check_graph("reduce-norm", g);
}

static void test_elementwise_float_ops(void **state)
{
    ir_graph *g = tu_graph_elementwise(); /* and Pow with a tensor exponent, Mod with the sign of the divisor */
    int x = g->inputs[0], y = g->inputs[1], one = tu_scalar(g, "one1", 1), half = tu_scalar(g, "half1", 0.5f);
    int ax1 = tu_node(g, IR_OP_ADD, NULL, IR_F32, 2, TU_IN(tu_node(g, IR_OP_ABS, NULL, IR_F32, 1, TU_IN(x), 0, NULL), one), 0, NULL);
    tu_output(g, tu_node(g, IR_OP_POW, NULL, IR_F32, 2, TU_IN(ax1, y), 0, NULL));
    tu_output(g, tu_node(g, IR_OP_MOD, NULL, IR_F32, 2, TU_IN(x, half), 0, NULL));
    check_graph("elementwise", g);
}

/* exp, erf, tanh and sigmoid are generated inline (not libm): element by
 * element against the interpreter's double libm over -100 .. 100; where the
 * reference is below the smallest normal float (1.7e-38: exp and sigmoid far
 * left, erf and tanh at 0), the result must be flushed to 0 or exact. */
static void test_transcendentals_elementwise_accuracy(void **state)
{
    ir_graph *g = tu_graph_new("handmade.onnx", 18);
    int x = tu_input(g, "x", IR_F32, 2, TU_DIMS(-1, 4001));
    int ops[4] = {IR_OP_EXP, IR_OP_ERF, IR_OP_TANH, IR_OP_SIGMOID};
    for (int k = 0; k < 4; k++)
        tu_output(g, tu_node(g, (ir_op)ops[k], NULL, IR_F32, 1, TU_IN(x), 0, NULL));
    vitc_diag d;
    vitc_diag_init(&d, "transcendentals");
    assert_int_equal(ir_infer_shapes(g, &d), 0);
    ir_tensor in, ref[4] = {{0}}, got[4];
    assert_int_equal(ir_tensor_alloc(&in, IR_F32, 2, TU_DIMS(1, 4001)), 0);
    for (int i = 0; i < 4001; i++) /* -100 .. 100 in steps of 0.05, denser near 0 */
        ir_tensor_set(&in, i, i < 1000 ? (i - 500) * 1e-3 : -100 + (i - 1000) * (200.0 / 3000));
    assert_int_equal(ir_interpret(g, &in, ref, NULL, NULL, &d), 0);
    char so[4200];
    compile_or_fail(g, "transcendentals", 3, 1, so, sizeof so);
    tu_run_so(so, &in, 1, got, 4, 1);
    static const char *names[4] = {"Exp", "Erf", "Tanh", "Sigmoid"};
    for (int k = 0; k < 4; k++) {
        double worst_rel = 0, worst_abs = 0;
        int tiny = 0;
        for (int i = 0; i < 4001; i++) {
            double a = ir_tensor_get(&got[k], i), b = ir_tensor_get(&ref[k], i), e = fabs(a - b);
            if (isinf(b) && a == b)
                continue;
            if (fabs(b) < 1.7e-38) { /* below the smallest normal float: exp below -87 flushes to 0 (vmath.c) */
                if (!(a == 0 || e <= 1e-6 * fabs(b)))
                    fail_msg("%s(%.9g) = %.9g, reference %.9g: neither flushed to 0 nor within 1e-6", names[k],
                             ir_tensor_get(&in, i), a, b);
                tiny++;
                continue;
            }
            worst_abs = e > worst_abs ? e : worst_abs;
            worst_rel = e / fabs(b) > worst_rel ? e / fabs(b) : worst_rel;
            int ok = k == 1 ? e <= 3e-7 && (fabs(b) > 0.8 || e <= 1e-6 * fabs(b)) : e <= 1e-6 * fabs(b);
            if (!ok)
                fail_msg("%s(%.9g) = %.9g, reference %.9g", names[k], ir_tensor_get(&in, i), a, b);
        }
        print_message("%-8s worst relative error %.3g, worst absolute error %.3g; %d references below 1.7e-38 "
                      "given as 0 or exactly\n", names[k], worst_rel, worst_abs, tiny);
        ir_tensor_free(&got[k]), ir_tensor_free(&ref[k]);
    }
    ir_tensor_free(&in);
    unlink(so);
    ir_graph_free(g);
}

/* A GELU applied in a Linear's epilogue and a standalone Gelu node run the same
 * vector math: through an identity weight the two agree to the bit, for the
 * erf and the tanh forms, over -10..10 and the tails. */
static void test_gelu_epilogue_and_standalone_agree_bitwise(void **state)
{
    enum { K = 16, ROWS = 500 };
    ir_graph *g = tu_graph_new("handmade.onnx", 18);
    int x = tu_input(g, "x", IR_F32, 3, TU_DIMS(-1, ROWS, K));
    float eye[K * K] = {0};
    for (int i = 0; i < K; i++)
        eye[i * K + i] = 1;
    int w = tu_const_f32(g, "eye", 2, TU_DIMS(K, K), eye);
    static const struct {
        ir_act act;
        const char *approximate;
    } forms[2] = {{IR_ACT_GELU_ERF, "none"}, {IR_ACT_GELU_TANH, "tanh"}};
    for (int f = 0; f < 2; f++) {
        tu_output(g, tu_node(g, IR_OP_LINEAR, NULL, IR_F32, 2, TU_IN(x, w), 1,
                             TU_AT(tu_int(IR_ATTR_ACTIVATION, forms[f].act))));
        tu_output(g, tu_node(g, IR_OP_GELU, NULL, IR_F32, 1, TU_IN(x), 1,
                             TU_AT(tu_str(IR_ATTR_APPROXIMATE, forms[f].approximate))));
    }
    tu_check_graph(g, "gelu-bitwise");
    ir_tensor in, got[4];
    assert_int_equal(ir_tensor_alloc(&in, IR_F32, 3, TU_DIMS(1, ROWS, K)), 0);
    for (int i = 0; i < ROWS * K; i++) /* -10 .. 10, then a few tails */
        ir_tensor_set(&in, i, i < 7000 ? -10 + i * (20.0 / 7000) : (i % 2 ? 1 : -1) * (10 + (i - 7000) * 0.1));
    char so[4200];
    compile_or_fail(g, "gelu-bitwise", 3, 1, so, sizeof so);
    tu_run_so(so, &in, 1, got, 4, 1);
    for (int f = 0; f < 2; f++) {
        const float *a = got[2 * f].data, *b = got[2 * f + 1].data;
        int differ = 0;
        for (int i = 0; i < ROWS * K; i++)
            if (memcmp(&a[i], &b[i], sizeof(float)) != 0 && differ++ == 0)
                print_message("GELU (%s) of %.9g: epilogue %.9g, standalone %.9g\n", forms[f].approximate,
                              ir_tensor_get(&in, i), a[i], b[i]);
        if (differ)
            fail_msg("GELU (%s): %d of %d values differ between the Linear epilogue and the Gelu node",
                     forms[f].approximate, differ, ROWS * K);
        print_message("GELU (%s): %d values, epilogue and standalone identical\n", forms[f].approximate, ROWS * K);
    }
    for (int k = 0; k < 4; k++)
        ir_tensor_free(&got[k]);
    ir_tensor_free(&in);
    unlink(so);
    ir_graph_free(g);
}

static void test_integer_and_bool_ops(void **state)
{
    ir_graph *g = tu_graph_new("handmade.onnx", 18);
    int x = tu_input(g, "x", IR_F32, 3, TU_DIMS(-1, 3, 4)), n = tu_input(g, "n", IR_I64, 3, TU_DIMS(-1, 3, 4));
    int zero = tu_scalar(g, "zero", 0);
    int c = tu_node(g, IR_OP_GREATER, NULL, IR_BOOL, 2, TU_IN(x, zero), 0, NULL);
    tu_output(g, tu_node(g, IR_OP_WHERE, NULL, IR_F32, 3, TU_IN(c, x, tu_node(g, IR_OP_NEG, NULL, IR_F32, 1, TU_IN(x), 0, NULL)), 0, NULL));
    int three = tu_const_i64(g, "three", 0, NULL, TU_DIMS(3)), four = tu_const_i64(g, "four", 0, NULL, TU_DIMS(-4));
    int j = tu_node(g, IR_OP_MOD, NULL, IR_I64, 2, TU_IN(n, three), 0, NULL);
    tu_output(g, j);
    tu_output(g, tu_node(g, IR_OP_DIV, NULL, IR_I64, 2, TU_IN(n, four), 0, NULL));
    int one = tu_const_i64(g, "one", 0, NULL, TU_DIMS(1));
    int e = tu_node(g, IR_OP_EQUAL, NULL, IR_BOOL, 2, TU_IN(j, one), 0, NULL);
    int a = tu_node(g, IR_OP_AND, NULL, IR_BOOL, 2, TU_IN(c, tu_node(g, IR_OP_NOT, NULL, IR_BOOL, 1, TU_IN(e), 0, NULL)), 0, NULL);
    tu_output(g, tu_node(g, IR_OP_CAST, NULL, IR_F32, 1, TU_IN(a), 1, TU_AT(tu_int(IR_ATTR_TO, 1))));
    int ten = tu_scalar(g, "ten", 10);
    tu_output(g, tu_node(g, IR_OP_CAST, NULL, IR_I64, 1, TU_IN(tu_node(g, IR_OP_MUL, NULL, IR_F32, 2, TU_IN(x, ten), 0, NULL)), 1,
                TU_AT(tu_int(IR_ATTR_TO, 7))));
    tu_output(g, tu_node(g, IR_OP_ABS, NULL, IR_I64, 1, TU_IN(tu_node(g, IR_OP_SUB, NULL, IR_I64, 2, TU_IN(n, three), 0, NULL)), 0, NULL));
    check_graph("int-bool", g);
}

static void test_data_movement(void **state) { check_graph("data", tu_graph_data()); }

static void test_matrix_products(void **state)
{
    ir_graph *g = tu_graph_matmul();
    int a = g->inputs[0], b = tu_input(g, "b", IR_F32, 4, TU_DIMS(-1, 2, 5, 4));
    tu_output(g, tu_node(g, IR_OP_EINSUM, NULL, IR_F32, 2, TU_IN(a, b), 1, TU_AT(tu_str(IR_ATTR_EQUATION, "bhqd,bhkd->bhqk"))));
    check_graph("matmul", g);
}

static void test_batchnorm_and_fused_ops(void **state) { check_graph("bn-fused", tu_graph_fused()); }

/* A tensor only GEMMs write and read, whose rows are 4 KiB apart (1024
 * floats, as a ViT's fc1 output), is stored with 16 floats more per row
 * (schedule.c): the producer writes and the consumer reads it with that
 * stride.  The same tensor made a graph output keeps its rows dense. */
static ir_graph *gemm_rows_graph(void)
{
    ir_graph *g = tu_graph_new("handmade.onnx", 18);
    int h = tu_input(g, "h", IR_F32, 3, TU_DIMS(-1, 5, 8)), r = tu_input(g, "r", IR_F32, 3, TU_DIMS(-1, 5, 24));
    int w1 = tu_const_f32(g, "w1", 2, TU_DIMS(8, 1024), NULL), b1 = tu_const_f32(g, "b1", 1, TU_DIMS(1024), NULL);
    int w2 = tu_const_f32(g, "w2", 2, TU_DIMS(1024, 24), NULL), b2 = tu_const_f32(g, "b2", 1, TU_DIMS(24), NULL);
    int t1 = tu_node(g, IR_OP_LINEAR, NULL, IR_F32, 3, TU_IN(h, w1, b1), 1,
                     TU_AT(tu_int(IR_ATTR_ACTIVATION, IR_ACT_GELU_ERF)));
    tu_output(g, tu_node(g, IR_OP_LINEAR, NULL, IR_F32, 4, TU_IN(t1, w2, b2, r), 0, NULL));
    int t2 = tu_node(g, IR_OP_MATMUL, NULL, IR_F32, 2, TU_IN(h, w1), 0, NULL);
    tu_output(g, t2);
    tu_output(g, tu_node(g, IR_OP_MATMUL, NULL, IR_F32, 2, TU_IN(t2, w2), 0, NULL));
    return g;
}

static void test_gemm_only_tensor_rows_padded(void **state)
{
    ir_graph *g = gemm_rows_graph();
    tu_check_graph(g, "gemm-rows");
    char so[4200];
    compile_or_fail(g, "gemm-rows-plan", 2, 3, so, sizeof so);
    vitc_model *m;
    vitc_model_details det;
    assert_int_equal(vitc_model_load(so, &m), VITC_STATUS_OK);
    assert_int_equal(vitc_model_get_details(m, &det), VITC_STATUS_OK);
    /* the workspace holds t1 alone (the rest are inputs, outputs and
     * weights): 3 images x 5 rows of 1024 + 16 floats */
    assert_int_equal(det.workspace_bytes, 3 * 5 * (1024 + 16) * sizeof(float));
    vitc_model_free(m);
    unlink(so);
    ir_graph_free(g);
    check_graph("gemm-rows", gemm_rows_graph());
}

/* ---- the memory plan ---- */

/* Bytes of v at batch 8 with pad elements after each row of its last dimension. */
static int64_t padded_bytes(const ir_value *v, int pad)
{
    int64_t n = ir_value_numel(v, 8), last = v->rank ? ir_dim_eval(v->dims[v->rank - 1], 8) : 1;
    if (last > 0)
        n = n / last * (last + pad);
    return n * (int64_t)ir_dtype_size(v->dtype);
}

/* torchvision's ViT with its shapes folded, for the memory plan: ws[v]
 * whether v needs a buffer (a node's output that is not a graph output),
 * first[v] and last[v] the nodes that compute it and read it last. */
static ir_graph *memplan_graph(vitc_diag *d, unsigned char **ws, int **first, int **last)
{
    ir_graph *g = tu_load_model("tests/models/torchvision-ts13.onnx");
    vitc_diag_init(d, "torchvision-ts13.onnx");
    assert_int_equal(pass_fold_shapes(g, d), 0);
    assert_int_equal(pass_dce(g, d), 0);
    int nv = g->nvalues;
    *ws = calloc((size_t)nv, 1);
    *first = malloc(sizeof(int) * (size_t)nv), *last = malloc(sizeof(int) * (size_t)nv);
    assert_true(*ws && *first && *last);
    for (int v = 0; v < nv; v++) {
        (*first)[v] = (*last)[v] = g->values[v].producer;
        (*ws)[v] = g->values[v].kind == IR_VAL_NODE;
    }
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i].ninputs; k++)
            if (g->nodes[i].inputs[k] >= 0 && (*last)[g->nodes[i].inputs[k]] < i)
                (*last)[g->nodes[i].inputs[k]] = i;
    for (int k = 0; k < g->noutputs; k++)
        (*ws)[g->outputs[k]] = 0;
    return g;
}

static void test_memplan_never_overlaps_live_buffers(void **state)
{
    vitc_diag d;
    unsigned char *ws;
    int *first, *last;
    ir_graph *g = memplan_graph(&d, &ws, &first, &last);
    int nv = g->nvalues;
    /* every third tensor with rows 16 elements further apart: sizes that
     * differ a little from their neighbours' */
    int *pad = calloc((size_t)nv, sizeof *pad);
    for (int v = 0; v < nv; v += 3)
        pad[v] = g->values[v].rank >= 2 ? 16 : 0;
    pass_memplan_req req = {.max_batch = 8, .in_workspace = ws, .row_pad = pad};
    pass_memplan_result r;
    assert_int_equal(pass_memplan(g, &req, &r, &d), 0);
    int pairs = 0;
    for (int u = 0; u < nv; u++) {
        if (!ws[u])
            continue;
        assert_true(r.offset[u] >= 0 && r.offset[u] % PASS_MEMPLAN_ALIGN == 0);
        int64_t su = padded_bytes(&g->values[u], pad[u]);
        assert_true((uint64_t)(r.offset[u] + su) <= r.total);
        for (int v = u + 1; v < nv; v++) {
            if (!ws[v] || first[u] > last[v] || first[v] > last[u])
                continue;
            int64_t sv = padded_bytes(&g->values[v], pad[v]);
            pairs++;
            if (r.offset[u] < r.offset[v] + sv && r.offset[v] < r.offset[u] + su)
                fail_msg("'%s' [%lld, +%lld) and '%s' [%lld, +%lld) are alive together and overlap",
                         g->values[u].name, (long long)r.offset[u], (long long)su, g->values[v].name,
                         (long long)r.offset[v], (long long)sv);
        }
    }
    print_message("memplan: %d buffers, %d live pairs checked, %llu bytes planned vs %llu without reuse\n",
                  r.nbuffers, pairs, (unsigned long long)r.total, (unsigned long long)r.unplanned);
    assert_true(r.total * 4 < r.unplanned); /* a ViT reuses its buffers layer after layer */
    pass_memplan_free(&r);
    free(ws), free(first), free(last), free(pad);
    ir_graph_free(g);
}

/* In-place values (pass_memplan's reuse): every node's output of
 * torchvision's ViT offered its first input's buffer.  Those whose input is
 * as large and read last by that node (a residual Add, a bias Add after a
 * MatMul, a Softmax) must take it over, the others (a LayerNorm of x, which
 * the residual Add reads later; a MatMul, which changes the size) must not,
 * and a value shares bytes with a live one only when it took over that one's
 * buffer at the node where that one was last read. */
static void test_memplan_in_place(void **state)
{
    (void)state;
    vitc_diag d;
    unsigned char *ws;
    int *first, *last;
    ir_graph *g = memplan_graph(&d, &ws, &first, &last);
    int nv = g->nvalues;
    int *reuse = malloc(sizeof(int) * (size_t)nv);
    for (int v = 0; v < nv; v++)
        reuse[v] = -1;
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *n = &g->nodes[i];
        if (n->noutputs >= 1 && n->outputs[0] >= 0 && n->ninputs >= 1)
            reuse[n->outputs[0]] = n->inputs[0];
    }
    pass_memplan_req req = {.max_batch = 8, .in_workspace = ws, .reuse = reuse};
    pass_memplan_result r;
    assert_int_equal(pass_memplan(g, &req, &r, &d), 0);
    int taken = 0, expected = 0, offered = 0;
    for (int v = 0; v < nv; v++) {
        int u = reuse[v];
        if (!ws[v] || u < 0 || !ws[u])
            continue;
        offered++;
        int fits = last[u] == first[v] && padded_bytes(&g->values[u], 0) == padded_bytes(&g->values[v], 0);
        expected += fits;
        taken += r.offset[v] == r.offset[u];
        if (r.offset[v] == r.offset[u] && !fits)
            fail_msg("'%s' took over the buffer of '%s', which is read after it is computed", g->values[v].name,
                     g->values[u].name);
    }
    for (int u = 0; u < nv; u++)
        for (int v = u + 1; v < nv && ws[u]; v++) {
            if (!ws[v] || first[u] > last[v] || first[v] > last[u])
                continue;
            int64_t su = padded_bytes(&g->values[u], 0), sv = padded_bytes(&g->values[v], 0);
            int in_place = (reuse[v] == u && last[u] == first[v]) || (reuse[u] == v && last[v] == first[u]);
            if (r.offset[u] < r.offset[v] + sv && r.offset[v] < r.offset[u] + su && !in_place)
                fail_msg("'%s' and '%s' are alive together and overlap", g->values[u].name, g->values[v].name);
        }
    print_message("memplan in place: %d of %d offered buffers taken over (%d could be)\n", taken, offered, expected);
    assert_int_equal(taken, expected);
    assert_true(expected >= 8 && offered > expected); /* both kinds of offer */
    pass_memplan_free(&r);
    free(ws), free(first), free(last), free(reuse);
    ir_graph_free(g);
}

/* ---- failures ---- */

/* $CC as the test found it, to put back after a case that sets it. */
static char *cc_save(void)
{
    const char *cc = getenv("CC");
    return cc ? strdup(cc) : NULL;
}

static void cc_restore(char *saved)
{
    if (saved)
        setenv("CC", saved, 1);
    else
        unsetenv("CC");
    free(saved);
}

static void test_failed_compiles_leave_nothing(void **state)
{
    char dir[4096], so[4200], model[4200], *out, *err;
    assert_non_null(tu_tmpdir(dir, sizeof dir));
    /* a broken model */
    char broken[4096];
    tu_path(broken, sizeof broken, "tests/data/broken/unsupported-ops.onnx");
    snprintf(so, sizeof so, "%s/broken.so", dir);
    const char *a1[] = {broken, "-o", so, NULL};
    assert_int_equal(tu_run_vitc(a1, &out, &err), 2);
    assert_false(file_exists(so));
    free(out), free(err);

    /* an unsupported node, reported with every other one, by name */
    ir_graph *g = tu_graph_new("handmade.onnx", 18);
    int x = tu_input(g, "x", IR_F32, 4, TU_DIMS(-1, 2, 5, 5));
    int w = tu_const_f32(g, "w", 4, TU_DIMS(2, 2, 3, 3), NULL);
    tu_output(g, tu_node(g, IR_OP_CONV, NULL, IR_F32, 2, TU_IN(x, w), 1, TU_AT(tu_str(IR_ATTR_AUTO_PAD, "SAME_UPPER"))));
    int idx = tu_input(g, "idx", IR_I64, 1, TU_DIMS(2));
    tu_output(g, tu_node(g, IR_OP_GATHER, NULL, IR_F32, 2, TU_IN(x, idx), 0, NULL));
    /* Resize: of a computed tensor, and of a constant the interpreter cannot fold (antialias with nearest) */
    int to = tu_const_ints(g, "to", 2, (int64_t[]){4, 4});
    tu_output(g, tu_node(g, IR_OP_RESIZE, NULL, IR_F32, 4, TU_IN(x, -1, -1, to), 2,
                         TU_AT(tu_str(IR_ATTR_MODE, "linear"), tu_ints(g, IR_ATTR_AXES, 2, (int64_t[]){2, 3}))));
    int table = tu_const_f32(g, "table", 4, TU_DIMS(1, 2, 5, 5), NULL);
    tu_output(g, tu_node(g, IR_OP_RESIZE, NULL, IR_F32, 4, TU_IN(table, -1, -1, to), 2,
                         TU_AT(tu_int(IR_ATTR_ANTIALIAS, 1), tu_ints(g, IR_ATTR_AXES, 2, (int64_t[]){2, 3}))));
    vitc_diag d;
    vitc_diag_init(&d, "handmade.onnx");
    assert_int_equal(ir_infer_shapes(g, &d), 0);
    char *msg;
    assert_int_equal(tu_compile_cpu(g, so, 2, 2, &msg), VITC_BAD_INPUT);
    print_message("unsupported nodes reported as:\n%s", msg);
    assert_non_null(strstr(msg, "node 'n0' (Conv)"));
    assert_non_null(strstr(msg, "node 'n1' (Gather)"));
    assert_non_null(strstr(msg, "the CPU backend does not run it on computed tensors yet"));
    assert_non_null(strstr(msg, "but this one cannot be: antialias applies to modes linear and cubic, not nearest"));
    free(msg);
    assert_false(file_exists(so));

    /* a linker that fails */
    ir_graph_free(g);
    g = tu_graph_new("handmade.onnx", 18);
    x = tu_input(g, "x", IR_F32, 2, TU_DIMS(-1, 3));
    tu_output(g, tu_node(g, IR_OP_RELU, NULL, IR_F32, 1, TU_IN(x), 0, NULL));
    assert_int_equal(ir_infer_shapes(g, &d), 0);
    char *saved = cc_save();
    setenv("CC", "false", 1);
    int st = tu_compile_cpu(g, so, 1, 2, &msg);
    cc_restore(saved);
    assert_int_not_equal(st, 0);
    print_message("with CC=false: %s", msg);
    assert_non_null(strstr(msg, "linking"));
    free(msg);
    assert_false(file_exists(so));
    assert_int_equal(count_entries(dir, ".vitc-"), 0);
    ir_graph_free(g);

    /* -o onto the model, through another spelling of its path, or a directory */
    char src[4096];
    tu_path(src, sizeof src, "tests/models/timm-ts17.onnx");
    snprintf(model, sizeof model, "%s/m.onnx", dir);
    FILE *fi = fopen(src, "rb"), *fo = fopen(model, "wb");
    char buf[65536];
    size_t n, total = 0;
    while ((n = fread(buf, 1, sizeof buf, fi)) > 0)
        total += fwrite(buf, 1, n, fo);
    fclose(fi), fclose(fo);
    char other[4300];
    snprintf(other, sizeof other, "%s/../%s/m.onnx", dir, strrchr(dir, '/') + 1);
    const char *a2[] = {model, "-o", other, NULL};
    assert_int_equal(tu_run_vitc(a2, &out, &err), 2);
    assert_non_null(strstr(err, "overwrite"));
    free(out), free(err);
    struct stat sb;
    assert_int_equal(stat(model, &sb), 0);
    assert_int_equal((size_t)sb.st_size, total);
    const char *a3[] = {model, "-o", dir, NULL};
    assert_int_equal(tu_run_vitc(a3, &out, &err), 2);
    assert_non_null(strstr(err, "directory"));
    free(out), free(err);
#ifndef VITC_HAVE_CUDA /* built with the CUDA backend, --target cuda compiles (tests/test_cuda_*.c) */
    const char *a4[] = {model, "-o", so, "--target", "cuda", NULL};
    assert_int_equal(tu_run_vitc(a4, &out, &err), 2);
    assert_non_null(strstr(err, "CUDA"));
    free(out), free(err);
#endif
    /* CPUs and features LLVM does not know are errors, not aborts */
    const char *a5[] = {model, "-o", so, "--cpu", "no-such-cpu", NULL};
    assert_int_equal(tu_run_vitc(a5, &out, &err), 2);
    assert_non_null(strstr(err, "--cpu 'no-such-cpu'"));
    free(out), free(err);
    const char *a6[] = {model, "-o", so, "--features", "+no-such-feature", NULL};
    assert_int_equal(tu_run_vitc(a6, &out, &err), 2);
    assert_non_null(strstr(err, "no-such-feature"));
    free(out), free(err);
    assert_false(file_exists(so));
    assert_int_equal(count_entries(dir, ".vitc-"), 0);
    tu_rmtree(dir);
}

/* --dump-after prints the IR after that pass on stdout; --verbose reports the
 * phases and the memory plan; another --cpu still computes the same model. */
static void test_cli_dump_verbose_cpu(void **state)
{
    char onnx[4096], so[4200], *out, *err;
    tu_path(onnx, sizeof onnx, "tests/models/einops-ts13.onnx");
    snprintf(so, sizeof so, "%s/dump.so", tmp);
    const char *a[] = {onnx, "-o", so, "--dump-after=fuse-linear", "--verbose", "--cpu", "x86-64", "-O2", NULL};
    if (tu_run_vitc(a, &out, &err) != 0)
        fail_msg("compile with --dump-after: %s", err);
    assert_non_null(strstr(out, "# after fuse-linear"));
    assert_non_null(strstr(out, "Linear("));
    assert_null(strstr(out, "# after dce"));
    assert_non_null(strstr(err, "workspace"));
    assert_non_null(strstr(err, "cpu x86-64"));
    free(out), free(err);
    ir_tensor in, got, ref;
    tu_read_npy("tests/models/einops.b3.input.npy", &in);
    tu_read_npy("tests/models/einops.b3.output.npy", &ref);
    tu_run_so(so, &in, 1, &got, 1, 3);
    double e = tu_error(&got, &ref);
    print_message("einops-ts13 for cpu x86-64 at -O2: error %.3g vs PyTorch\n", e);
    assert_true(e <= TOL);
    ir_tensor_free(&in), ir_tensor_free(&got), ir_tensor_free(&ref);
    const char *b[] = {onnx, "-o", so, "--dump-after=no-such-pass", NULL};
    assert_int_equal(tu_run_vitc(b, &out, &err), 2);
    assert_non_null(strstr(err, "no-such-pass"));
    free(out), free(err);
}

/* --weights external: a small .so, the weights beside it, the same numbers. */
static void test_external_weights_same_numbers(void **state)
{
    char onnx[4096], so[4200], emb[4200], wf[4300], *out, *err;
    tu_path(onnx, sizeof onnx, "tests/models/face_ln-ts17.onnx");
    snprintf(so, sizeof so, "%s/ext.so", tmp);
    snprintf(emb, sizeof emb, "%s/emb.so", tmp);
    snprintf(wf, sizeof wf, "%s.weights", so);
    const char *a[] = {onnx, "-o", so, "--weights", "external", "--batch", "3", NULL};
    const char *b[] = {onnx, "-o", emb, "--batch", "3", NULL};
    if (tu_run_vitc(a, &out, &err) != 0)
        fail_msg("--weights external: %s", err);
    free(out), free(err);
    if (tu_run_vitc(b, &out, &err) != 0)
        fail_msg("embedded: %s", err);
    free(out), free(err);
    struct stat s1, s2, s3;
    assert_int_equal(stat(so, &s1), 0);
    assert_int_equal(stat(emb, &s2), 0);
    assert_int_equal(stat(wf, &s3), 0);
    print_message("external: .so %lld bytes + weights %lld bytes; embedded: %lld bytes\n", (long long)s1.st_size,
                  (long long)s3.st_size, (long long)s2.st_size);
    assert_true(s3.st_size > 1000000 && s1.st_size + s3.st_size / 2 < s2.st_size);
    ir_tensor in, o1, o2;
    tu_read_npy("tests/models/face_ln.b3.input.npy", &in);
    tu_run_so(so, &in, 1, &o1, 1, 3);
    tu_run_so(emb, &in, 1, &o2, 1, 3);
    double e = tu_error(&o1, &o2);
    print_message("external vs embedded weights: %.3g\n", e);
    assert_true(e == 0);
    ir_tensor_free(&in), ir_tensor_free(&o1), ir_tensor_free(&o2);
}

/* The weights reach the .so both ways (codegen/elf_obj.c): through vitc's own
 * lld, whose script reserves their room, and through any other linker ($CC),
 * which copies the hole of the weights object; written into the linked file
 * afterwards, they give PyTorch's numbers, bit for bit the same both ways. */
static void test_weights_written_after_either_link(void **state)
{
    char onnx[4096], so[2][4200], *out, *err;
    tu_path(onnx, sizeof onnx, "tests/models/face_ln-ts17.onnx");
    ir_tensor in, ref, got[2];
    tu_read_npy("tests/models/face_ln.b3.input.npy", &in);
    tu_read_npy("tests/models/face_ln.b3.output.npy", &ref);
    char *saved = cc_save();
    for (int k = 0; k < 2; k++) {
        snprintf(so[k], sizeof so[k], "%s/link%d.so", tmp, k);
        if (k)
            setenv("CC", "cc", 1);
        else
            unsetenv("CC");
        const char *a[] = {onnx, "-o", so[k], "--batch", "3", "--verbose", NULL};
        int st = tu_run_vitc(a, &out, &err);
        if (st != 0)
            fail_msg("compile with %s: %s", k ? "CC=cc" : "vitc's linker", err);
        const char *link = strstr(err, "link (");
        print_message("%.*s", link ? (int)(strcspn(link, "\n") + 1) : 0, link ? link : "");
        assert_non_null(strstr(err, "weights into the .so"));
        free(out), free(err);
        tu_run_so(so[k], &in, 1, &got[k], 1, 3);
        double e = tu_error(&got[k], &ref);
        print_message("face_ln-ts17 batch 3 linked %s: error %.3g vs PyTorch\n", k ? "by CC=cc" : "by vitc's choice", e);
        assert_true(e <= TOL);
    }
    cc_restore(saved);
    assert_true(tu_error(&got[0], &got[1]) == 0);
    ir_tensor_free(&in), ir_tensor_free(&ref), ir_tensor_free(&got[0]), ir_tensor_free(&got[1]);
}

/* A model compiled for a CPU feature this machine lacks is refused before it
 * runs (exit 2, the feature named), not killed by SIGILL; compiled for the
 * machine itself, it runs.  What the machine lacks is read from
 * /proc/cpuinfo, not from the runtime's own CPUID check. */
static void test_model_for_missing_cpu_features_is_refused(void **state)
{
    (void)state;
    /* not AMX: fp32 code has no tile instructions, so its descriptor leaves
     * AMX out and an fp32 model built with +amx-tile runs without AMX */
    static const char *const candidates[][2] = {/* LLVM name, /proc/cpuinfo flag */
                                                {"avx512fp16", "avx512_fp16"},
                                                {"avx512bf16", "avx512_bf16"},
                                                {"avxvnni", "avx_vnni"},
                                                {"sse4a", "sse4a"},
                                                {"fma4", "fma4"},
                                                {"avx512vp2intersect", "avx512_vp2intersect"}};
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) {
        print_message("no /proc/cpuinfo: cannot tell what this machine lacks\n");
        tu_skip();
    }
    char line[8192], flags[8192 + 2] = "";
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "flags", 5)) {
            const char *colon = strchr(line, ':');
            flags[0] = ' ';
            strcpy(flags + 1, colon ? colon + 1 : line);
            strcat(flags, " ");
            break;
        }
    fclose(f);
    char *nl = strchr(flags, '\n');
    if (nl)
        *nl = ' ';
    const char *lacks = NULL;
    for (size_t i = 0; !lacks && i < sizeof candidates / sizeof candidates[0]; i++) {
        char key[64];
        snprintf(key, sizeof key, " %s ", candidates[i][1]);
        if (!strstr(flags, key))
            lacks = candidates[i][0];
    }
    if (!lacks || nfixtures < 1) {
        print_message("this machine has every candidate feature (or no fixture): nothing to refuse\n");
        tu_skip();
    }
    char rel[200], model[4096], so[4200], feat[80], *out, *err;
    snprintf(rel, sizeof rel, "tests/models/%s", fixtures[0].model);
    tu_path(model, sizeof model, rel);
    snprintf(so, sizeof so, "%s/for-%s.so", tmp, lacks);
    snprintf(feat, sizeof feat, "+%s", lacks);
    const char *compile[] = {model, "-o", so, "--features", feat, NULL};
    assert_int_equal(tu_run_vitc(compile, &out, &err), 0);
    free(out), free(err);
    char input[4200];
    snprintf(rel, sizeof rel, "tests/models/%s.b1.input.npy", fixtures[0].family);
    tu_path(input, sizeof input, rel);
    const char *run[] = {"run", so, "--input", input, "--output-dir", tmp, NULL};
    assert_int_equal(tu_run_vitc(run, &out, &err), 2);
    print_message("compiled with --features %s: %s", feat, err);
    assert_non_null(strstr(err, "lacks"));
    assert_non_null(strstr(err, lacks));
    free(out), free(err);
    if (!strstr(flags, " amx_tile ")) { /* fp32 with +amx-tile needs no AMX: it runs here */
        snprintf(so, sizeof so, "%s/for-amx-tile.so", tmp);
        const char *amx[] = {model, "-o", so, "--features", "+amx-tile", NULL};
        assert_int_equal(tu_run_vitc(amx, &out, &err), 0);
        free(out), free(err);
        assert_int_equal(tu_run_vitc(run, &out, &err), 0);
        free(out), free(err);
    }
    snprintf(so, sizeof so, "%s/for-host.so", tmp);
    const char *host[] = {model, "-o", so, NULL};
    assert_int_equal(tu_run_vitc(host, &out, &err), 0);
    free(out), free(err);
    assert_int_equal(tu_run_vitc(run, &out, &err), 0);
    free(out), free(err);
}

/* --features=-avx512f on any x86-64 host gives the AVX2 code path, and its
 * descriptor lists no AVX-512 or AMX feature: LLVM drops avx512bw, avx512vl
 * and the rest with avx512f, and a loader on an AVX2 machine must not be
 * told the model needs them (it would refuse it).  The model runs here, and
 * one fixture of each family built so is within 1e-4 of PyTorch at batch 1
 * and 3. */
static void test_features_minus_avx512f_lists_no_avx512(void **state)
{
    (void)state;
#ifndef __x86_64__
    print_message("not an x86-64 host\n");
    tu_skip();
#endif
    char rel[200], model[4096], so[4200], input[4200], *out, *err;
    snprintf(rel, sizeof rel, "tests/models/%s", fixtures[0].model);
    tu_path(model, sizeof model, rel);
    snprintf(so, sizeof so, "%s/avx2-path.so", tmp);
    const char *compile[] = {model, "-o", so, "--features=-avx512f", "-q", NULL};
    if (tu_run_vitc(compile, &out, &err) != 0)
        fail_msg("--features=-avx512f: %s", err);
    free(out), free(err);
    const char *inspect[] = {"inspect", so, "--json", NULL};
    assert_int_equal(tu_run_vitc(inspect, &out, &err), 0);
    const char *feat = strstr(out, "\"features\": [");
    assert_non_null(feat);
    char list[8192];
    snprintf(list, sizeof list, "%.*s", (int)(strchr(feat, ']') - feat), feat);
    if (strstr(list, "\"avx512") || strstr(list, "\"amx-"))
        fail_msg("an AVX2 build lists AVX-512 or AMX features: %s", list);
    assert_non_null(strstr(list, "\"sse2\""));
    free(out), free(err);
    snprintf(rel, sizeof rel, "tests/models/%s.b1.input.npy", fixtures[0].family);
    tu_path(input, sizeof input, rel);
    const char *run[] = {"run", so, "--input", input, "--output-dir", tmp, NULL};
    if (tu_run_vitc(run, &out, &err) != 0)
        fail_msg("the AVX2 build does not run here: %s", err);
    free(out), free(err);
    /* and its numbers: one fixture of each family, AVX2 build, batch 1 and 3, against PyTorch (1e-4) */
    for (int i = 0; i < nfixtures; i++) {
        int first = 1;
        for (int k = 0; k < i; k++)
            first &= strcmp(fixtures[k].family, fixtures[i].family) != 0;
        if (!first)
            continue;
        snprintf(rel, sizeof rel, "tests/models/%s", fixtures[i].model);
        tu_path(model, sizeof model, rel);
        snprintf(so, sizeof so, "%s/avx2-%s.so", tmp, fixtures[i].family);
        const char *cc[] = {model, "-o", so, "--batch", "3", "--features=-avx512f", "-q", NULL};
        if (tu_run_vitc(cc, &out, &err) != 0)
            fail_msg("%s --features=-avx512f: %s", fixtures[i].model, err);
        free(out), free(err);
        double e[2];
        for (int k = 0; k < 2; k++) {
            ir_tensor in, ref, got;
            snprintf(rel, sizeof rel, "tests/models/%.31s.b%d.input.npy", fixtures[i].family, k ? 3 : 1);
            tu_read_npy(rel, &in);
            snprintf(rel, sizeof rel, "tests/models/%.31s.b%d.output.npy", fixtures[i].family, k ? 3 : 1);
            tu_read_npy(rel, &ref);
            tu_run_so(so, &in, 1, &got, 1, k ? 3 : 1);
            e[k] = tu_error(&got, &ref);
            ir_tensor_free(&in), ir_tensor_free(&ref), ir_tensor_free(&got);
        }
        print_message("AVX2 build of %-24s against PyTorch: b1 %.3g, b3 %.3g\n", fixtures[i].model, e[0], e[1]);
        if (!(e[0] <= 1e-4 && e[1] <= 1e-4))
            fail_msg("the AVX2 build of %s: error %.3g (b1), %.3g (b3) > 1e-4", fixtures[i].model, e[0], e[1]);
        unlink(so);
    }
}

static int setup(void **state)
{
    nfixtures = tu_fixtures(fixtures, 64);
    tu_seed(0x2545f4914f6cdd1dull);
    *state = tu_tmpdir(tmp, sizeof tmp);
    return *state ? 0 : -1;
}

TU_MAIN(setup, tu_teardown_tmpdir, test_fixtures_compiled_match_references, test_unfused_fixtures_match_interpreter,
        test_conv_direct_and_1d, test_reductions_softmax_layernorm_axes, test_elementwise_float_ops,
        test_transcendentals_elementwise_accuracy, test_gelu_epilogue_and_standalone_agree_bitwise,
        test_integer_and_bool_ops, test_data_movement,
        test_matrix_products, test_batchnorm_and_fused_ops, test_gemm_only_tensor_rows_padded,
        test_memplan_never_overlaps_live_buffers, test_memplan_in_place,
        test_failed_compiles_leave_nothing, test_cli_dump_verbose_cpu, test_external_weights_same_numbers,
        test_weights_written_after_either_link,
        test_model_for_missing_cpu_features_is_refused,
        test_features_minus_avx512f_lists_no_avx512)
