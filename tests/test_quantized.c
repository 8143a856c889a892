/* test_quantized.c: quantized ONNX as users make it, against ONNX Runtime.
 *
 * tests/data/quantized/ holds the timm seed fixture quantized by ONNX
 * Runtime's own tools (tests/data/make_quantized.py): a static QDQ export
 * (int8 weights per output channel, uint8 activations per tensor, calibrated)
 * and a dynamic one (DynamicQuantizeLinear -> MatMulInteger / ConvInteger),
 * with ONNX Runtime's outputs, its graph optimizations off, on the fixture's
 * inputs at batch 1 and 3.  Each export runs through the reference
 * interpreter as imported and after the passes (where every DequantizeLinear
 * of a constant weight has folded into an f32 constant), within
 * QUANT_MAX_REL of ONNX Runtime (max |out - ref| / max |ref|) and a cosine of
 * at least TU_BAR_COSINE; `vitc dump` prints each. */
#include "testutil.h"

#include "ir/interp.h"
#include "passes/passes.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Both sides round each activation to u8 the same way, so they agree to the
 * float rounding of the ops in between (measured: 0 for the QDQ export, 2e-7
 * for the dynamic one); a quantum of the output's own u8 step would be about
 * 4e-3. */
#define QUANT_MAX_REL 1e-3

static const char *const exports[] = {"timm-qdq", "timm-dynamic"};
enum { NEXPORTS = sizeof exports / sizeof exports[0] };
static const int64_t batches[2] = {1, 3};

static int count_op(const ir_graph *g, ir_op op)
{
    int n = 0;
    for (int i = 0; i < g->nnodes; i++)
        n += g->nodes[i].op == op;
    return n;
}

/* The interpreter on g at both batches against ONNX Runtime's outputs;
 * prints and checks the errors. */
static void check_interpreter(const char *name, const char *stage, const ir_graph *g)
{
    for (int b = 0; b < 2; b++) {
        char path[256];
        ir_tensor in, out, ref;
        snprintf(path, sizeof path, "tests/models/timm.b%lld.input.npy", (long long)batches[b]);
        tu_read_npy(path, &in);
        snprintf(path, sizeof path, "tests/data/quantized/%s.b%lld.ort.npy", name, (long long)batches[b]);
        tu_read_npy(path, &ref);
        tu_interpret_ok(g, &in, &out);
        double e = tu_error(&out, &ref), cos = tu_cosine(&out, &ref);
        print_message("%-13s %-9s batch %lld: interpreter vs ONNX Runtime max rel %.3g, cosine %.9f\n", name, stage,
                      (long long)batches[b], e, cos);
        if (!(e <= QUANT_MAX_REL) || !(cos >= TU_BAR_COSINE))
            fail_msg("%s (%s) batch %lld: max rel %.3g (bar %.0e), cosine %.9f (bar %g)", name, stage,
                     (long long)batches[b], e, QUANT_MAX_REL, cos, TU_BAR_COSINE);
        ir_tensor_free(&in);
        ir_tensor_free(&out);
        ir_tensor_free(&ref);
    }
}

static void test_quantized_exports_in_the_interpreter_match_onnxruntime(void **state)
{
    (void)state;
    for (int k = 0; k < NEXPORTS; k++) {
        char rel[256];
        snprintf(rel, sizeof rel, "tests/data/quantized/%s.onnx", exports[k]);
        ir_graph *g = tu_load_model(rel);
        print_message("%-13s imported: %d QuantizeLinear, %d DequantizeLinear, %d DynamicQuantizeLinear, "
                      "%d MatMulInteger, %d ConvInteger\n",
                      exports[k], count_op(g, IR_OP_QUANTIZE_LINEAR), count_op(g, IR_OP_DEQUANTIZE_LINEAR),
                      count_op(g, IR_OP_DYNAMIC_QUANTIZE_LINEAR), count_op(g, IR_OP_MATMUL_INTEGER),
                      count_op(g, IR_OP_CONV_INTEGER));
        check_interpreter(exports[k], "imported", g);
        vitc_diag d;
        vitc_diag_init(&d, rel);
        if (pass_run(g, NULL, &d))
            fail_msg("%s: the passes failed (status %d)", rel, d.status);
        /* no DequantizeLinear of a constant is left: the weights folded into f32 constants */
        for (int i = 0; i < g->nnodes; i++) {
            const ir_node *n = &g->nodes[i];
            if (n->op == IR_OP_DEQUANTIZE_LINEAR && g->values[n->inputs[0]].kind == IR_VAL_CONST)
                fail_msg("%s: node '%s' dequantizes a constant after the passes", rel, n->name);
        }
        check_interpreter(exports[k], "optimized", g);
        ir_graph_free(g);
    }
}

static void test_dump_prints_the_quantized_exports(void **state)
{
    (void)state;
    for (int k = 0; k < NEXPORTS; k++) {
        char rel[256], path[4096];
        snprintf(rel, sizeof rel, "tests/data/quantized/%s.onnx", exports[k]);
        tu_path(path, sizeof path, rel);
        const char *args[] = {"dump", path, NULL};
        char *out = NULL, *err = NULL;
        int rc = tu_run_vitc(args, &out, &err);
        if (rc != 0 || !out || !strstr(out, k == 0 ? "= DequantizeLinear(" : "= MatMulInteger("))
            fail_msg("vitc dump %s: exit %d\n%s%s", rel, rc, out ? out : "", err ? err : "");
        free(out);
        free(err);
    }
}

TU_MAIN(NULL, NULL, test_quantized_exports_in_the_interpreter_match_onnxruntime, test_dump_prints_the_quantized_exports)
