/* test_qop.c: ONNX Runtime's QOperator format on the seed fixtures.
 *
 * tests/data/quantized/<family>-qop.onnx is the family's fp32 export
 * quantized by onnxruntime.quantization.quantize_static in the QOperator
 * format (tests/data/make_quantized.py), with ONNX Runtime's outputs on the
 * family's inputs at batch 1 and 3, its graph optimizations off (.ort.npy)
 * and all on (.ortopt.npy).  Each export must
 *   - import: its QLinearMatMul, QLinearConv and com.microsoft QGemm,
 *     QLinearAdd, QLinearMul, QLinearSoftmax and QLinearConcat as ops of the
 *     table (counted and printed);
 *   - run in the reference interpreter within QOP_INTERP_MAX_REL of ONNX
 *     Runtime with its optimizations off (max |out - ref| / max |ref|);
 *   - after the passes with int8 Linears (lower-quant's QOperator rewrite,
 *     then the QDQ path), hold no quantized op, have every Linear a
 *     LinearInt8 (counted), and compiled for the CPU be within cosine
 *     QOP_COSINE of ONNX Runtime unoptimized, and within 1.25 times ONNX
 *     Runtime optimized's error against PyTorch's fp32 output
 *     (tests/models/<family>.b<N>.output.npy) plus 2e-3.
 * The compiled model's distance from ONNX Runtime unoptimized is printed:
 * the rewrite is not bit-exact (passes/qop.c), and this is what it costs. */
#include "testutil.h"

#include "codegen/backend.h"
#include "ir/interp.h"
#include "passes/passes.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QOP_INTERP_MAX_REL 1e-3
#define QOP_COSINE 0.995

static char tmpdir[4096];
static const struct {
    const char *family;
    int linears; /* the Linear layers and the patch embedding: all LinearInt8 */
} exports[] = {{"timm", 10}, {"torchvision", 10}, {"einops", 10}};
enum { NEXPORTS = sizeof exports / sizeof exports[0] };
static const int64_t batches[2] = {1, 3};

/* tests/data/quantized/<family>-qop.b<N>.<what>.npy, or tests/models/<family>.b<N>.<what>.npy */
static void read_case(const char *family, int64_t batch, const char *what, int model_dir, ir_tensor *t)
{
    char path[256];
    if (model_dir)
        snprintf(path, sizeof path, "tests/models/%s.b%lld.%s.npy", family, (long long)batch, what);
    else
        snprintf(path, sizeof path, "tests/data/quantized/%s-qop.b%lld.%s.npy", family, (long long)batch, what);
    tu_read_npy(path, t);
}

static void test_qop_exports_import_and_interpret_as_onnxruntime(void **state)
{
    (void)state;
    static const ir_op ops[] = {IR_OP_QLINEAR_MATMUL, IR_OP_QLINEAR_CONV, IR_OP_QGEMM, IR_OP_QLINEAR_ADD,
                                IR_OP_QLINEAR_MUL, IR_OP_QLINEAR_SOFTMAX, IR_OP_QLINEAR_CONCAT};
    for (int k = 0; k < NEXPORTS; k++) {
        char rel[256], line[512];
        snprintf(rel, sizeof rel, "tests/data/quantized/%s-qop.onnx", exports[k].family);
        ir_graph *g = tu_load_model(rel);
        size_t n = (size_t)snprintf(line, sizeof line, "%s-qop imported:", exports[k].family);
        for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
            int c = tu_count_op(g, ops[i]);
            n += (size_t)snprintf(line + n, sizeof line - n, " %d %s", c, ir_op_name(ops[i]));
            if (c == 0)
                fail_msg("%s: no %s imported", rel, ir_op_name(ops[i]));
        }
        print_message("%s\n", line);
        for (int b = 0; b < 2; b++) {
            ir_tensor in, out, ref;
            read_case(exports[k].family, batches[b], "input", 1, &in);
            read_case(exports[k].family, batches[b], "ort", 0, &ref);
            tu_interpret_ok(g, &in, &out);
            double e = tu_error(&out, &ref);
            print_message("%-16s batch %lld: interpreter vs ONNX Runtime (unoptimized) max rel %.3g\n",
                          exports[k].family, (long long)batches[b], e);
            if (!(e <= QOP_INTERP_MAX_REL))
                fail_msg("%s batch %lld: the interpreter is %.3g from ONNX Runtime (bar %.0e)", rel,
                         (long long)batches[b], e, QOP_INTERP_MAX_REL);
            ir_tensor_free(&in), ir_tensor_free(&out), ir_tensor_free(&ref);
        }
        ir_graph_free(g);
    }
}

static void test_qop_exports_on_int8_kernels(void **state)
{
    (void)state;
    for (int k = 0; k < NEXPORTS; k++) {
        const char *family = exports[k].family;
        char rel[256], so[4300];
        snprintf(rel, sizeof rel, "tests/data/quantized/%s-qop.onnx", family);
        ir_graph *g = tu_load_model(rel);
        vitc_diag d;
        vitc_diag_init(&d, rel);
        pass_options po = {.int8 = PASS_INT8_QUANTIZED};
        if (pass_run(g, &po, &d))
            fail_msg("%s: the passes failed (status %d)", rel, d.status);
        for (int i = 0; i < g->nnodes; i++)
            if (ir_op_family_of(g->nodes[i].op) == IR_FAM_QUANT)
                fail_msg("%s: node '%s' (%s) was not lowered", rel, g->nodes[i].name, ir_op_name(g->nodes[i].op));
        int n8 = tu_count_op(g, IR_OP_LINEAR_INT8);
        print_message("%-16s optimized: %d LinearInt8, %d Linear, %d FakeQuant\n", family, n8,
                      tu_count_op(g, IR_OP_LINEAR), tu_count_op(g, IR_OP_FAKE_QUANT));
        assert_int_equal(n8, exports[k].linears);
        assert_int_equal(tu_count_op(g, IR_OP_LINEAR), 0);
        snprintf(so, sizeof so, "%s/%s-qop.so", tmpdir, family);
        char *msg = NULL;
        if (tu_compile_cpu(g, so, 2, 3, &msg) != VITC_OK)
            fail_msg("%s: the CPU backend failed:\n%s", rel, msg ? msg : "");
        free(msg);
        for (int b = 0; b < 2; b++) {
            ir_tensor in, out, off, opt, torch;
            read_case(family, batches[b], "input", 1, &in);
            read_case(family, batches[b], "output", 1, &torch);
            read_case(family, batches[b], "ort", 0, &off);
            read_case(family, batches[b], "ortopt", 0, &opt);
            tu_run_so(so, &in, 1, &out, 1, batches[b]);
            double e_off = tu_error(&out, &off), cos = tu_cosine(&out, &off), e = tu_error(&out, &torch);
            double e_ort = tu_error(&opt, &torch), bar = 1.25 * e_ort + 2e-3;
            print_message("%-16s batch %lld: compiled vs ONNX Runtime (unoptimized) max rel %.3g, cosine %.9f; "
                          "vs PyTorch %.3g (ONNX Runtime optimized %.3g, bar %.3g)\n",
                          family, (long long)batches[b], e_off, cos, e, e_ort, bar);
            if (!(cos >= QOP_COSINE) || !(e <= bar))
                fail_msg("%s batch %lld: cosine %.6f with ONNX Runtime (bar %g), max rel %.3g from PyTorch (bar %.3g)",
                         rel, (long long)batches[b], cos, QOP_COSINE, e, bar);
            ir_tensor_free(&in), ir_tensor_free(&out), ir_tensor_free(&off), ir_tensor_free(&opt);
            ir_tensor_free(&torch);
        }
        ir_graph_free(g);
    }
}

/* `vitc dump` prints the contrib ops by name. */
static void test_dump_prints_the_qop_ops(void **state)
{
    (void)state;
    char path[4096];
    tu_path(path, sizeof path, "tests/data/quantized/timm-qop.onnx");
    const char *args[] = {"dump", path, NULL};
    char *out = NULL, *err = NULL;
    int rc = tu_run_vitc(args, &out, &err);
    const char *want[] = {"= QGemm(", "= QLinearAdd(", "= QLinearMul(", "= QLinearSoftmax(", "= QLinearConcat(",
                          "= QLinearMatMul(", "= QLinearConv("};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (rc != 0 || !out || !strstr(out, want[i]))
            fail_msg("vitc dump %s: exit %d, no \"%s\":\n%s%s", path, rc, want[i], out ? out : "", err ? err : "");
    free(out);
    free(err);
}

static int setup(void **state)
{
    *state = tu_tmpdir(tmpdir, sizeof tmpdir);
    return *state ? 0 : -1;
}

TU_MAIN(setup, tu_teardown_tmpdir, test_qop_exports_import_and_interpret_as_onnxruntime,
        test_qop_exports_on_int8_kernels, test_dump_prints_the_qop_ops)
