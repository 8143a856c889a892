/* test_quantized.c: quantized ONNX as users make it, against ONNX Runtime.
 *
 * tests/data/quantized/ holds the timm seed fixture quantized by ONNX
 * Runtime's own tools (tests/data/make_quantized.py): a static QDQ export
 * (int8 weights per output channel, uint8 activations per tensor, calibrated),
 * a dynamic one (DynamicQuantizeLinear -> MatMulInteger / ConvInteger) and the
 * static one in the QOperator format (QLinear ops; test_qop has more of it),
 * with ONNX Runtime's outputs, its graph optimizations off, on the fixture's
 * inputs at batch 1 and 3.  Each export runs through the reference
 * interpreter as imported and after the passes (where every DequantizeLinear
 * of a constant weight has folded into an f32 constant and lower-quant has
 * made the rest f32 ops), compiled by the CPU backend, and by the CUDA
 * backend in fp32 run on the emulation of the GPU, within
 * QUANT_MAX_REL of ONNX Runtime (max |out - ref| / max |ref|) and a cosine of
 * at least TU_BAR_COSINE; `vitc dump` prints each.
 *
 * Then lower-quant's rewrites on hand-built graphs, compiled for the CPU, to
 * the bit against the interpreter on the graph as built: QDQ pairs per tensor
 * and per axis, DynamicQuantizeLinear's three outputs (an all-zero input
 * too), MatMulInteger whose sums fit f32 and one whose do not (split in two),
 * ConvInteger with a zero point per output channel and padding.  This is the
 * correctness path (f32 ops that compute the integers exactly), not int8
 * kernels. */
#include "testutil.h"

#include "codegen/backend.h"
#include "ir/interp.h"
#include "ir/opview.h"
#include "passes/passes.h"
#include "vitc/runtime.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Both sides round each activation to u8 the same way, so they agree to the
 * float rounding of the ops in between (measured: 0 for the QDQ export, 2e-7
 * for the dynamic one); a quantum of the output's own u8 step would be about
 * 4e-3. */
#define QUANT_MAX_REL 1e-3

static char tmpdir[4096];
static const char *const exports[] = {"timm-qdq", "timm-dynamic", "timm-qop"};
enum { NEXPORTS = sizeof exports / sizeof exports[0] };
static const int64_t batches[2] = {1, 3};

/* g in the interpreter, or (g NULL) the compiled export so, at both batches
 * against ONNX Runtime's outputs; what says which graph or build it is.
 * Prints and checks the errors. */
static void check_against_ort(const char *name, const char *what, const ir_graph *g, const char *so)
{
    for (int b = 0; b < 2; b++) {
        char path[256];
        ir_tensor in, out, ref;
        snprintf(path, sizeof path, "tests/models/timm.b%lld.input.npy", (long long)batches[b]);
        tu_read_npy(path, &in);
        snprintf(path, sizeof path, "tests/data/quantized/%s.b%lld.ort.npy", name, (long long)batches[b]);
        tu_read_npy(path, &ref);
        if (g)
            tu_interpret_ok(g, &in, &out);
        else
            tu_run_so(so, &in, 1, &out, 1, batches[b]);
        double e = tu_error(&out, &ref), cos = tu_cosine(&out, &ref);
        print_message("%-13s %-9s batch %lld: %s vs ONNX Runtime max rel %.3g, cosine %.9f\n", name, what,
                      (long long)batches[b], g ? "interpreter" : "compiled", e, cos);
        if (!(e <= QUANT_MAX_REL) || !(cos >= TU_BAR_COSINE))
            fail_msg("%s (%s%s), batch %lld: max rel %.3g (bar %.0e), cosine %.9f (bar %g)", name, what,
                     g ? ", interpreter" : "", (long long)batches[b], e, QUANT_MAX_REL, cos, TU_BAR_COSINE);
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
                      exports[k], tu_count_op(g, IR_OP_QUANTIZE_LINEAR), tu_count_op(g, IR_OP_DEQUANTIZE_LINEAR),
                      tu_count_op(g, IR_OP_DYNAMIC_QUANTIZE_LINEAR), tu_count_op(g, IR_OP_MATMUL_INTEGER),
                      tu_count_op(g, IR_OP_CONV_INTEGER));
        check_against_ort(exports[k], "imported", g, NULL);
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
        check_against_ort(exports[k], "optimized", g, NULL);
        ir_graph_free(g);
    }
}

/* The exports after the passes hold no quantized op (lower-quant made them
 * f32 ops) and compile for the CPU; the .so against ONNX Runtime. */
static void test_quantized_exports_on_the_cpu_match_onnxruntime(void **state)
{
    (void)state;
    for (int k = 0; k < NEXPORTS; k++) {
        char rel[256], so[4300];
        snprintf(rel, sizeof rel, "tests/data/quantized/%s.onnx", exports[k]);
        ir_graph *g = tu_load_model(rel);
        vitc_diag d;
        vitc_diag_init(&d, rel);
        if (pass_run(g, NULL, &d))
            fail_msg("%s: the passes failed (status %d)", rel, d.status);
        for (int i = 0; i < g->nnodes; i++)
            if (ir_op_family_of(g->nodes[i].op) == IR_FAM_QUANT)
                fail_msg("%s: node '%s' (%s) was not lowered", rel, g->nodes[i].name, ir_op_name(g->nodes[i].op));
        print_message("%-13s optimized: %d FakeQuant, %d Linear, %d Round\n", exports[k], tu_count_op(g, IR_OP_FAKE_QUANT),
                      tu_count_op(g, IR_OP_LINEAR), tu_count_op(g, IR_OP_ROUND));
        snprintf(so, sizeof so, "%s/%s.so", tmpdir, exports[k]);
        char *msg = NULL;
        if (tu_compile_cpu(g, so, 2, 3, &msg) != VITC_OK)
            fail_msg("%s: the CPU backend failed:\n%s", rel, msg ? msg : "");
        free(msg);
        check_against_ort(exports[k], "cpu", NULL, so);
        ir_graph_free(g);
    }
}

/* The exports through the CUDA backend in fp32, lowered alike, run on the
 * emulation of the GPU (tests/cuda_emu.h) against ONNX Runtime. */
static void test_quantized_exports_on_the_cuda_emulation_match_onnxruntime(void **state)
{
    (void)state;
#ifndef VITC_HAVE_CUDA
    print_message("the CUDA backend is not built: nothing to emulate\n");
#else
    for (int k = 0; k < NEXPORTS; k++) {
        char model[4096], rel[256], so[4300], cu[4300], emu[8300];
        snprintf(rel, sizeof rel, "tests/data/quantized/%s.onnx", exports[k]);
        tu_path(model, sizeof model, rel);
        snprintf(so, sizeof so, "%s/%s.cuda.so", tmpdir, exports[k]);
        snprintf(cu, sizeof cu, "%s/%s.cu", tmpdir, exports[k]);
        const char *a1[] = {model, "--target", "cuda", "--precision", "fp32", "-o", so, "--quiet", NULL};
        const char *a2[] = {model, "--emit", "cuda", "--precision", "fp32", "-o", cu, "--quiet", NULL};
        for (int a = 0; a < 2; a++) {
            char *out = NULL, *err = NULL;
            int rc = tu_run_vitc(a ? a2 : a1, &out, &err);
            if (rc != 0)
                fail_msg("vitc %s for CUDA: exit %d\n%s%s", rel, rc, out ? out : "", err ? err : "");
            free(out);
            free(err);
        }
        tu_emu_build(cu, emu, sizeof emu);
        for (int b = 0; b < 2; b++) {
            char path[256];
            ir_tensor in, out, ref;
            int nl = 0;
            snprintf(path, sizeof path, "tests/models/timm.b%lld.input.npy", (long long)batches[b]);
            tu_read_npy(path, &in);
            snprintf(path, sizeof path, "tests/data/quantized/%s.b%lld.ort.npy", exports[k], (long long)batches[b]);
            tu_read_npy(path, &ref);
            tu_emulate(so, emu, batches[b], &in, 1, &out, 1, &nl);
            double e = tu_error(&out, &ref), cos = tu_cosine(&out, &ref);
            print_message("%-13s cuda fp32 batch %lld: emulated vs ONNX Runtime max rel %.3g, cosine %.9f\n",
                          exports[k], (long long)batches[b], e, cos);
            if (!(e <= QUANT_MAX_REL) || !(cos >= TU_BAR_COSINE))
                fail_msg("%s on the CUDA emulation, batch %lld: max rel %.3g (bar %.0e), cosine %.9f (bar %g)",
                         exports[k], (long long)batches[b], e, QUANT_MAX_REL, cos, TU_BAR_COSINE);
            ir_tensor_free(&in);
            ir_tensor_free(&out);
            ir_tensor_free(&ref);
        }
    }
#endif
}

/* ---- lower-quant on hand-built graphs ---- */

static int qconst(ir_graph *g, const char *name, ir_dtype dt, int rank, const int64_t *dims, const double *vals)
{
    ir_tensor t;
    assert_int_equal(ir_tensor_alloc(&t, dt, rank, dims), VITC_OK);
    for (int64_t i = 0; i < ir_tensor_numel(&t); i++)
        ir_tensor_set(&t, i, vals ? vals[i] : floor(127.99 * tu_rnd()));
    int id = ir_add_const(g, name, dt, rank, dims, t.data, ir_tensor_nbytes(&t));
    assert_true(id >= 0);
    ir_tensor_free(&t);
    return id;
}

/* x [B, 5, 64] and z [B, 5, 1024] quantized at run time, then MatMulInteger
 * by an int8 weight with zero points per column: into 64 columns (sums
 * within 2^24: one f32 product), and into 8 columns whose weights are all
 * -127 or 127 (255 * 127 * 1024 > 2^24: split in two); ConvInteger of the
 * quantized image w [B, 2, 7, 7], zero points per output channel, padded.
 * The integer results, DynamicQuantizeLinear's outputs and a scaled f32 are
 * graph outputs. */
static ir_graph *build_dynamic(void)
{
    tu_seed(0x51ab1e);
    ir_graph *g = tu_graph_new("dynamic.onnx", 13);
    int x = tu_input(g, "x", IR_F32, 3, TU_DIMS(-1, 5, 64)), z = tu_input(g, "z", IR_F32, 3, TU_DIMS(-1, 5, 1024));
    int w = tu_input(g, "w", IR_F32, 4, TU_DIMS(-1, 2, 7, 7));
    int q[3][3];
    const int src[3] = {x, z, w};
    for (int k = 0; k < 3; k++) {
        char nm[3][16];
        snprintf(nm[0], 16, "q%d", k), snprintf(nm[1], 16, "q%d_scale", k), snprintf(nm[2], 16, "q%d_zp", k);
        int outs[3] = {tu_value(g, nm[0], IR_U8), tu_value(g, nm[1], IR_F32), tu_value(g, nm[2], IR_U8)};
        tu_node_out(g, IR_OP_DYNAMIC_QUANTIZE_LINEAR, nm[0], 1, &src[k], 3, outs, 0, NULL);
        memcpy(q[k], outs, sizeof outs);
    }
    double zp64[64], big[1024 * 8], zp8[8] = {0, 1, -1, 5, 0, 0, 3, -2}, zpc[3] = {0, -7, 4};
    for (int i = 0; i < 64; i++)
        zp64[i] = (i % 7) - 3;
    for (int i = 0; i < 1024 * 8; i++)
        big[i] = i % 8 < 4 ? 127 : -127;
    int w1 = qconst(g, "w1", IR_I8, 2, TU_DIMS(64, 64), NULL), z1 = qconst(g, "w1_zp", IR_I8, 1, TU_DIMS(64), zp64);
    int w2 = qconst(g, "w2", IR_I8, 2, TU_DIMS(1024, 8), big), z2 = qconst(g, "w2_zp", IR_I8, 1, TU_DIMS(8), zp8);
    int w3 = qconst(g, "w3", IR_I8, 4, TU_DIMS(3, 2, 3, 3), NULL), z3 = qconst(g, "w3_zp", IR_I8, 1, TU_DIMS(3), zpc);
    int m1 = tu_node(g, IR_OP_MATMUL_INTEGER, "mm_direct", IR_I32, 4, TU_IN(q[0][0], w1, q[0][2], z1), 0, NULL);
    int m2 = tu_node(g, IR_OP_MATMUL_INTEGER, "mm_split", IR_I32, 4, TU_IN(q[1][0], w2, q[1][2], z2), 0, NULL);
    ir_attr pads = tu_ints(g, IR_ATTR_PADS, 4, TU_DIMS(1, 1, 1, 1));
    int c3 = tu_node(g, IR_OP_CONV_INTEGER, "conv", IR_I32, 4, TU_IN(q[2][0], w3, q[2][2], z3), 1, &pads);
    ir_attr to = tu_int(IR_ATTR_TO, 1);
    int f1 = tu_node(g, IR_OP_CAST, "mm_direct_f32", IR_F32, 1, TU_IN(m1), 1, &to);
    int scaled = tu_node(g, IR_OP_MUL, "mm_direct_scaled", IR_F32, 2, TU_IN(f1, q[0][1]), 0, NULL);
    int outs[] = {m1, m2, c3, scaled, q[0][0], q[0][1], q[0][2]};
    for (size_t k = 0; k < sizeof outs / sizeof outs[0]; k++)
        tu_output(g, outs[k]);
    tu_check_graph(g, "dynamic.onnx");
    return g;
}

/* x [B, 4, 6] through QDQ pairs: u8 per tensor, i8 per axis 1 (a zero point
 * per channel), u8 per axis 2 with a tiny scale (saturating), and per axis 1
 * without a zero point (u8, zero). */
static ir_graph *build_qdq(void)
{
    tu_seed(0x0dd);
    ir_graph *g = tu_graph_new("qdq.onnx", 13);
    int x = tu_input(g, "x", IR_F32, 3, TU_DIMS(-1, 4, 6));
    double s0 = 0.013, z0 = 131, s1[4] = {0.01, 0.02, 0.005, 0.03}, z1[4] = {0, -5, 9, 127}, s2[6], z2[6];
    for (int i = 0; i < 6; i++)
        s2[i] = 0.001 * (i + 1), z2[i] = 40 * i;
    int sc[3] = {qconst(g, "s0", IR_F32, 0, NULL, &s0), qconst(g, "s1", IR_F32, 1, TU_DIMS(4), s1),
                 qconst(g, "s2", IR_F32, 1, TU_DIMS(6), s2)};
    int zp[3] = {qconst(g, "z0", IR_U8, 0, NULL, &z0), qconst(g, "z1", IR_I8, 1, TU_DIMS(4), z1),
                 qconst(g, "z2", IR_U8, 1, TU_DIMS(6), z2)};
    const ir_dtype qt[4] = {IR_U8, IR_I8, IR_U8, IR_U8};
    for (int k = 0; k < 4; k++) {
        ir_attr axis = tu_int(IR_ATTR_AXIS, k == 2 ? -1 : 1);
        int nin = k < 3 ? 3 : 2, s = sc[k < 3 ? k : 1], z = k < 3 ? zp[k] : -1;
        int qv = tu_node(g, IR_OP_QUANTIZE_LINEAR, NULL, qt[k], nin, TU_IN(x, s, z), 1, &axis);
        tu_output(g, tu_node(g, IR_OP_DEQUANTIZE_LINEAR, NULL, IR_F32, nin, TU_IN(qv, s, z), 1, &axis));
    }
    tu_check_graph(g, "qdq.onnx");
    return g;
}

/* g as built (the interpreter) against g lowered and compiled for the CPU,
 * on random inputs and on zeros, at batch 1 and 3: every output to the bit. */
static void check_lowered_on_cpu(ir_graph *(*build)(void), const char *name, int expect_linears)
{
    ir_graph *ref_g = build(), *g = build();
    vitc_diag d;
    vitc_diag_init(&d, name);
    if (pass_run(g, NULL, &d))
        fail_msg("%s: the passes failed (status %d)", name, d.status);
    for (int i = 0; i < g->nnodes; i++)
        if (ir_op_family_of(g->nodes[i].op) == IR_FAM_QUANT)
            fail_msg("%s: node '%s' (%s) was not lowered", name, g->nodes[i].name, ir_op_name(g->nodes[i].op));
    if (expect_linears >= 0)
        assert_int_equal(tu_count_op(g, IR_OP_LINEAR), expect_linears);
    char so[4300], *msg = NULL;
    snprintf(so, sizeof so, "%s/%s.so", tmpdir, name);
    if (tu_compile_cpu(g, so, 2, 3, &msg) != VITC_OK)
        fail_msg("%s: the CPU backend failed:\n%s", name, msg ? msg : "");
    free(msg);
    for (int run = 0; run < 4; run++) {
        int64_t batch = batches[run % 2];
        ir_tensor in[TU_MAX_IO], want[TU_MAX_IO], got[TU_MAX_IO];
        tu_random_inputs(ref_g, batch, in);
        for (int i = 0; run >= 2 && i < ref_g->ninputs; i++)
            memset(in[i].data, 0, ir_tensor_nbytes(&in[i])); /* zeros: DynamicQuantizeLinear's range is 0 */
        tu_interpret_ok(ref_g, in, want);
        tu_run_so(so, in, ref_g->ninputs, got, ref_g->noutputs, batch);
        for (int k = 0; k < ref_g->noutputs; k++) {
            double e = tu_error(&got[k], &want[k]);
            if (!(e == 0) || got[k].dtype != want[k].dtype)
                fail_msg("%s, batch %lld%s: output %d ('%s') %s differs from the interpreter by %.3g", name,
                         (long long)batch, run >= 2 ? " (zeros)" : "", k, ref_g->values[ref_g->outputs[k]].name,
                         ir_dtype_name(got[k].dtype), e);
            ir_tensor_free(&got[k]);
            ir_tensor_free(&want[k]);
        }
        for (int i = 0; i < ref_g->ninputs; i++)
            ir_tensor_free(&in[i]);
    }
    print_message("%s: lowered, compiled for the CPU, every output equal to the interpreter's (batch 1 and 3, "
                  "random and zero inputs)\n", name);
    ir_graph_free(ref_g);
    ir_graph_free(g);
}

/* The scales of fake_quant_ties: a quantized ViT's (qkv, the probabilities,
 * the scores, the output), a power of two, ones above 1, an odd tiny one,
 * one just inside 2^-60 and three outside [2^-60, 2^60] (where the CPU divides). */
static const float tie_scales[] = {0.0397284f, 1 / 255.0f, 0.0442552f, 0.015978f, 0.125f, 1.41421354f,
                                   3.0f,       0.1f,       7.3e-5f,    1.5e-18f,  1e-30f, 1e-37f, 1e20f};
enum { NTIE_SCALES = sizeof tie_scales / sizeof tie_scales[0], TIE_K = 300, TIE_RANDOM = 128,
       TIE_N = (2 * TIE_K + 1) * 7 + 8 + TIE_RANDOM };

/* y_j = DequantizeLinear(QuantizeLinear(x_j, s_j, z_j)): u8 around 128 and
 * i8 around 0 in turn. */
static ir_graph *build_fake_quant_ties(void)
{
    ir_graph *g = tu_graph_new("fq_ties.onnx", 13);
    for (int j = 0; j < NTIE_SCALES; j++) {
        char name[32];
        double s = tie_scales[j], z = j % 2 ? 0 : 128;
        snprintf(name, sizeof name, "x%d", j);
        int x = tu_input(g, name, IR_F32, 2, TU_DIMS(-1, TIE_N));
        snprintf(name, sizeof name, "s%d", j);
        int sv = qconst(g, name, IR_F32, 0, NULL, &s);
        snprintf(name, sizeof name, "z%d", j);
        int zv = qconst(g, name, j % 2 ? IR_I8 : IR_U8, 0, NULL, &z);
        int q = tu_node(g, IR_OP_QUANTIZE_LINEAR, NULL, j % 2 ? IR_I8 : IR_U8, 3, TU_IN(x, sv, zv), 0, NULL);
        tu_output(g, tu_node(g, IR_OP_DEQUANTIZE_LINEAR, NULL, IR_F32, 3, TU_IN(q, sv, zv), 0, NULL));
    }
    tu_check_graph(g, "fq_ties.onnx");
    return g;
}

/* FakeQuant where x / scale is within 3 ulps of a half-way point k + 1/2
 * (where a quotient off by an ulp rounds to the other integer), for k over
 * the whole 8-bit range and beyond, at infinities, NaN, -0 and tiny x, and
 * at random x (half within the range, half of any exponent): compiled for
 * the CPU (which divides without a division: vm_fake_quant), every output
 * equal to the interpreter's, which divides. */
static void test_fake_quant_ties_are_exact(void **state)
{
    (void)state;
    ir_graph *g = build_fake_quant_ties(), *lowered = build_fake_quant_ties();
    vitc_diag d;
    vitc_diag_init(&d, "fq_ties");
    assert_int_equal(pass_run(lowered, NULL, &d), VITC_OK);
    assert_int_equal(tu_count_op(lowered, IR_OP_FAKE_QUANT), NTIE_SCALES);
    char so[4300], *msg = NULL;
    snprintf(so, sizeof so, "%s/fq_ties.so", tmpdir);
    if (tu_compile_cpu(lowered, so, 2, 1, &msg) != VITC_OK)
        fail_msg("fq_ties: the CPU backend failed:\n%s", msg ? msg : "");
    free(msg);
    ir_tensor in[NTIE_SCALES], want[NTIE_SCALES], got[NTIE_SCALES];
    for (int j = 0; j < NTIE_SCALES; j++) {
        assert_int_equal(ir_tensor_alloc(&in[j], IR_F32, 2, TU_DIMS(1, TIE_N)), VITC_OK);
        float *x = in[j].data, s = tie_scales[j];
        int n = 0;
        for (int k = -TIE_K; k <= TIE_K; k++) {
            float t = (float)((k + 0.5) * s), up = t, down = t;
            x[n++] = t;
            for (int u = 0; u < 3; u++)
                x[n++] = up = nextafterf(up, INFINITY), x[n++] = down = nextafterf(down, -INFINITY);
        }
        const float special[8] = {INFINITY, -INFINITY, NAN, -0.0f, 1e-40f, -1e-38f, 3e38f, -3e38f};
        memcpy(x + n, special, sizeof special);
        n += 8;
        tu_seed(0x7135 + (uint64_t)j);
        for (int i = 0; i < TIE_RANDOM / 2; i++) {
            x[n++] = tu_rnd() * 400 * s;
            int e = (int)(tu_rnd() * 140);
            x[n++] = ldexpf(tu_rnd(), e);
        }
        assert_int_equal(n, TIE_N);
    }
    tu_interpret_ok(g, in, want);
    tu_run_so(so, in, NTIE_SCALES, got, NTIE_SCALES, 1);
    for (int j = 0; j < NTIE_SCALES; j++) {
        const float *a = got[j].data, *b = want[j].data;
        for (int i = 0; i < TIE_N; i++)
            if (memcmp(&a[i], &b[i], sizeof a[i]) != 0)
                fail_msg("scale %g, x = %.9g: compiled %.9g, interpreter %.9g", (double)tie_scales[j],
                         (double)((const float *)in[j].data)[i], (double)a[i], (double)b[i]);
        ir_tensor_free(&in[j]), ir_tensor_free(&got[j]), ir_tensor_free(&want[j]);
    }
    print_message("FakeQuant: %d scales x %d values at and around its ties, compiled equal to the interpreter\n",
                  NTIE_SCALES, TIE_N);
    ir_graph_free(g);
    ir_graph_free(lowered);
}

/* What lower-quant leaves (a QuantizeLinear whose output feeds no
 * DequantizeLinear, QLinearMatMul whose output scale is computed, a
 * DequantizeLinear of what it makes) both backends refuse in the grouped
 * error, each op named with what would run. */
static void test_what_is_not_lowered_is_refused_by_name(void **state)
{
    (void)state;
    for (int be = 0; be < 2; be++) {
        ir_graph *g = tu_graph_new("qop.onnx", 17);
        double s = 0.02, z = 128, ws = 0.01, wz = 0, yz = 120;
        int x = tu_input(g, "x", IR_F32, 2, TU_DIMS(-1, 8)), ysv = tu_input(g, "ys", IR_F32, 1, TU_DIMS(1));
        int sv = qconst(g, "s", IR_F32, 0, NULL, &s), zv = qconst(g, "z", IR_U8, 0, NULL, &z);
        int w = qconst(g, "w", IR_I8, 2, TU_DIMS(8, 8), NULL), wsv = qconst(g, "ws", IR_F32, 0, NULL, &ws);
        int wzv = qconst(g, "wz", IR_I8, 0, NULL, &wz);
        int yzv = qconst(g, "yz", IR_U8, 0, NULL, &yz);
        int q = tu_node(g, IR_OP_QUANTIZE_LINEAR, "q_in", IR_U8, 3, TU_IN(x, sv, zv), 0, NULL);
        int m0 = tu_node(g, IR_OP_QLINEAR_MATMUL, "qmm0", IR_U8, 8, TU_IN(q, sv, zv, w, wsv, wzv, ysv, yzv), 0, NULL);
        int m1 = tu_node(g, IR_OP_QLINEAR_MATMUL, "qmm1", IR_U8, 8, TU_IN(m0, ysv, yzv, w, wsv, wzv, ysv, yzv), 0, NULL);
        tu_output(g, tu_node(g, IR_OP_DEQUANTIZE_LINEAR, "dq_out", IR_F32, 3, TU_IN(m1, ysv, yzv), 0, NULL));
        tu_check_graph(g, "qop.onnx");
        vitc_diag d;
        vitc_diag_init(&d, "qop.onnx");
        assert_int_equal(pass_run(g, NULL, &d), VITC_OK);
        char so[4300], *msg = NULL;
        snprintf(so, sizeof so, "%s/qop.so", tmpdir);
        int st;
        if (be == 0) {
            st = tu_compile_cpu(g, so, 2, 3, &msg);
        } else {
#ifdef VITC_HAVE_CUDA
            size_t len;
            FILE *mem = open_memstream(&msg, &len);
            vitc_diag_init(&d, "qop.onnx");
            d.out = mem;
            cg_options o = {.output = so, .source = "qop.onnx", .max_batch = 3, .opt_level = 2, .precision = "fp32"};
            st = cg_compile(&cg_cuda_backend, g, &o, &d);
            fclose(mem);
#else
            ir_graph_free(g);
            continue;
#endif
        }
        print_message("%s", msg ? msg : "");
        assert_int_equal(st, VITC_BAD_INPUT);
        const char *want[] = {"node 'q_in' (QuantizeLinear)", "runs only as a QuantizeLinear -> DequantizeLinear pair",
                              "node 'qmm0' (QLinearMatMul)", "(nor 1 more QLinearMatMul node)",
                              "node 'dq_out' (DequantizeLinear)", be ? "the CUDA backend" : "the CPU backend"};
        for (size_t k = 0; k < sizeof want / sizeof want[0]; k++)
            if (!msg || !strstr(msg, want[k]))
                fail_msg("the refusal does not say \"%s\":\n%s", want[k], msg ? msg : "");
        free(msg);
        ir_graph_free(g);
    }
}

static void test_lowered_dynamic_quantization_on_the_cpu_is_exact(void **state)
{
    (void)state;
    /* the direct MatMulInteger one Linear, the split one two, the ConvInteger a Conv */
    check_lowered_on_cpu(build_dynamic, "dynamic", 3);
}

static void test_lowered_qdq_pairs_on_the_cpu_are_exact(void **state)
{
    (void)state;
    check_lowered_on_cpu(build_qdq, "qdq", -1);
}

/* ---- int8 Linears (int8-linear, the int8 kernels) ---- */

/* The exports with their Linears on int8 kernels (the CPU backend's default
 * for a quantized model): in the interpreter and compiled, against ONNX
 * Runtime run as ONNX defines each op.  Every Linear of the blocks and the
 * head is a LinearInt8, and the static exports' patch embedding (a Conv of
 * the fake-quantized image, made a Linear of its patches); the dynamic
 * export's patch embedding, a ConvInteger, stays f32; the Q/DQ pairs after
 * a static export's int8 Linear and its bias are the Linear's epilogue.  Each block's
 * attention is one Attention, the static exports' FakeQuants inside it its
 * fake-quant points (Q after its scale, the scores, the probabilities, the
 * output). */
static void test_quantized_exports_on_int8_kernels_match_onnxruntime(void **state)
{
    (void)state;
    for (int k = 0; k < NEXPORTS; k++) {
        char rel[256], so[4300];
        snprintf(rel, sizeof rel, "tests/data/quantized/%s.onnx", exports[k]);
        ir_graph *g = tu_load_model(rel);
        vitc_diag d;
        vitc_diag_init(&d, rel);
        pass_options po = {.int8 = PASS_INT8_QUANTIZED};
        if (pass_run(g, &po, &d))
            fail_msg("%s: the passes failed (status %d)", rel, d.status);
        int n8 = tu_count_op(g, IR_OP_LINEAR_INT8);
        print_message("%-13s int8: %d LinearInt8, %d Linear, %d DynamicFakeQuant left, %d Attention\n", exports[k],
                      n8, tu_count_op(g, IR_OP_LINEAR), tu_count_op(g, IR_OP_DYNAMIC_FAKE_QUANT),
                      tu_count_op(g, IR_OP_ATTENTION));
        assert_int_equal(n8, strcmp(exports[k], "timm-dynamic") == 0 ? 9 : 10);
        assert_int_equal(tu_count_op(g, IR_OP_ATTENTION), 2);
        assert_int_equal(tu_count_op(g, IR_OP_SOFTMAX), 0);
        for (int i = 0; i < g->nnodes; i++) /* each int8 Linear's Q/DQ after it is its epilogue's */
            for (int j = 0; g->nodes[i].op == IR_OP_LINEAR_INT8 && j < g->nnodes; j++)
                if (g->nodes[j].op == IR_OP_FAKE_QUANT && g->nodes[j].inputs[0] == g->nodes[i].outputs[0])
                    fail_msg("%s: LinearInt8 '%s' is read by FakeQuant '%s'", exports[k], g->nodes[i].name,
                             g->nodes[j].name);
        assert_int_equal(tu_count_op(g, IR_OP_DYNAMIC_FAKE_QUANT), 0);
        check_against_ort(exports[k], "int8", g, NULL);
        snprintf(so, sizeof so, "%s/%s.int8.so", tmpdir, exports[k]);
        char *msg = NULL;
        if (tu_compile_cpu(g, so, 2, 3, &msg) != VITC_OK)
            fail_msg("%s: the CPU backend failed:\n%s", rel, msg ? msg : "");
        free(msg);
        check_against_ort(exports[k], "int8 cpu", NULL, so);
        ir_graph_free(g);
    }
}

/* An i8 weight [K, N] of random values and positive scales [N]. */
static void int8_weight(ir_graph *g, const char *name, int64_t K, int64_t N, int *w, int *ws)
{
    double *q = malloc(sizeof(double) * (size_t)(K * N)), *s = malloc(sizeof(double) * (size_t)N);
    assert_non_null(q), assert_non_null(s);
    for (int64_t i = 0; i < K * N; i++)
        q[i] = floor(128 * tu_rnd()); /* -128 .. 127 */
    for (int64_t j = 0; j < N; j++)
        s[j] = 0.002 + 0.003 * fabs(tu_rnd());
    char nm[64];
    *w = qconst(g, name, IR_I8, 2, TU_DIMS(K, N), q);
    snprintf(nm, sizeof nm, "%s_scale", name);
    *ws = qconst(g, nm, IR_F32, 1, TU_DIMS(N), s);
    free(q), free(s);
}

/* LinearInt8 nodes as int8-linear makes them, each way of quantizing the
 * input: x [B, 7, 70] (K not a multiple of 4 or of a vector) into N = 37
 * columns: static (zero point 131), per tensor with a residual, per row
 * with a bias and GELU, per row with a bias, ReLU and a residual; two with
 * output fake-quant points; and one with both points read by a QuantLookup
 * of the second point's grid (random table), which the CPU computes in the
 * GEMM's epilogue. */
static ir_graph *build_linear_int8(void)
{
    tu_seed(0x1a8);
    ir_graph *g = tu_graph_new("linear_int8.onnx", 17);
    int x = tu_input(g, "x", IR_F32, 3, TU_DIMS(-1, 7, 70)), r = tu_input(g, "r", IR_F32, 3, TU_DIMS(-1, 7, 37));
    int bias = tu_const_rand(g, "bias", 1, TU_DIMS(37), 0.5f);
    /* output fake-quant points: u8 on the product, i8 after the bias; the first alone */
    static const float both[10] = {1, 0.05f, 120, 0, 255, 1, 0.04f, 0, -128, 127};
    static const float first[10] = {1, 0.03f, 7, -128, 127};
    struct {
        ir_aquant aq;
        int bias, residual;
        ir_act act;
        const float *fq;
    } v[7] = {{IR_AQ_STATIC, 1, 0, IR_ACT_NONE, NULL},
              {IR_AQ_TENSOR, 0, 1, IR_ACT_NONE, NULL},
              {IR_AQ_ROW, 1, 0, IR_ACT_GELU_ERF, NULL},
              {IR_AQ_ROW, 1, 1, IR_ACT_RELU, NULL},
              {IR_AQ_STATIC, 1, 1, IR_ACT_NONE, both},
              {IR_AQ_ROW, 0, 1, IR_ACT_NONE, first},
              {IR_AQ_STATIC, 1, 0, IR_ACT_NONE, both}};
    for (int i = 0; i < 7; i++) {
        char nm[32];
        int w, ws;
        snprintf(nm, sizeof nm, "w%d", i);
        int8_weight(g, nm, 70, 37, &w, &ws);
        ir_attr at[5] = {tu_int(IR_ATTR_A_QUANT, v[i].aq), tu_int(IR_ATTR_ACTIVATION, v[i].act),
                         tu_float(IR_ATTR_A_SCALE, 0.0157f), tu_int(IR_ATTR_A_ZERO, 131)};
        if (v[i].fq)
            at[4] = tu_floats(g, IR_ATTR_FAKE_QUANT, 10, v[i].fq);
        snprintf(nm, sizeof nm, "linear%d", i);
        int y = tu_node(g, IR_OP_LINEAR_INT8, nm, IR_F32, 5,
                        TU_IN(x, w, v[i].bias ? bias : -1, v[i].residual ? r : -1, ws), v[i].fq ? 5 : 4, at);
        if (i == 6) { /* the second point's grid: i8, step 0.04, zero 0 */
            float s = both[6], z = both[7];
            int sv = tu_const_f32(g, "lut_scale", 0, NULL, &s), zv = tu_const_f32(g, "lut_zero", 0, NULL, &z);
            int tv = tu_const_rand(g, "lut_table", 1, TU_DIMS(256), 3.0f);
            ir_attr la[2] = {tu_float(IR_ATTR_QMIN, both[8]), tu_float(IR_ATTR_QMAX, both[9])};
            y = tu_node(g, IR_OP_QUANT_LOOKUP, "lookup", IR_F32, 4, TU_IN(y, sv, zv, tv), 2, la);
        }
        tu_output(g, y);
    }
    tu_check_graph(g, "linear_int8.onnx");
    return g;
}

/* The CPU's LinearInt8 against the interpreter's, at batch 1 and 3, on
 * random inputs, zeros (an empty range: scale 1), and inputs whose first row
 * is 1000 times the others (the per-tensor range is that row's, the per-row
 * ones are not): equal to the bit but for the GELU (its vector form, within
 * 1e-6); two with output fake-quant points (both, and the product's alone);
 * the lookup after one, computed in its GEMM (no part of the run is a
 * QuantLookup of its own).  For the host, and for an AVX2 CPU without VNNI
 * (haswell: 8-lane vectors, VPMADDWD, the lookup's 8-lane gather) where the
 * host runs its code. */
static void linear_int8_on(const char *cpu)
{
    ir_graph *g = build_linear_int8();
    char so[4300], *msg = NULL;
    snprintf(so, sizeof so, "%s/linear_int8.%s.so", tmpdir, cpu ? cpu : "host");
    if (tu_compile_cpu_as(g, so, 2, 3, cpu, &msg) != VITC_OK)
        fail_msg("linear_int8 (%s): the CPU backend failed:\n%s", cpu ? cpu : "host", msg ? msg : "");
    free(msg);
    vitc_model *m;
    vitc_context *c;
    assert_int_equal(vitc_model_load(so, &m), VITC_STATUS_OK);
    assert_int_equal(vitc_context_create(m, 1, &c), VITC_STATUS_OK);
    int nparts = vitc_context_profile_parts(c), nlinear = 0;
    for (int i = 0; i < nparts; i++) {
        vitc_profile_part p;
        assert_int_equal(vitc_context_profile_part(c, i, &p), VITC_STATUS_OK);
        if (strcmp(p.op, "QuantLookup") == 0)
            fail_msg("linear_int8: the QuantLookup after linear6 runs apart (%s), not in its GEMM's epilogue", p.kernels);
        nlinear += strcmp(p.op, "LinearInt8") == 0;
    }
    assert_int_equal(nlinear, 7);
    vitc_context_free(c);
    vitc_model_free(m);
    for (int run = 0; run < 6; run++) {
        int64_t batch = batches[run % 2];
        ir_tensor in[TU_MAX_IO], want[TU_MAX_IO], got[TU_MAX_IO];
        tu_random_inputs(g, batch, in);
        float *x = in[0].data;
        for (int64_t i = 0; i < ir_tensor_numel(&in[0]); i++)
            x[i] = run >= 4 ? (i < 70 ? 1000 * x[i] : x[i]) : run >= 2 ? 0 : x[i];
        tu_interpret_ok(g, in, want);
        tu_run_so(so, in, g->ninputs, got, g->noutputs, batch);
        for (int k = 0; k < g->noutputs; k++) {
            double e = tu_error(&got[k], &want[k]), bar = k == 2 ? 1e-6 : 0;
            if (!(e <= bar))
                fail_msg("linear_int8, batch %lld, %s inputs: output %d differs from the interpreter by %.3g "
                         "(bar %g)", (long long)batch, run >= 4 ? "one large row" : run >= 2 ? "zero" : "random", k,
                         e, bar);
            ir_tensor_free(&got[k]);
            ir_tensor_free(&want[k]);
        }
        for (int i = 0; i < g->ninputs; i++)
            ir_tensor_free(&in[i]);
    }
    print_message("linear_int8 (%s): static, per-tensor and per-row LinearInt8, with output fake-quant points, and a "
                  "lookup in the epilogue, on the CPU equal the interpreter's\n", cpu ? cpu : "host");
    ir_graph_free(g);
}

static void test_linear_int8_on_the_cpu_matches_the_interpreter(void **state)
{
    (void)state;
    for (int t = 0; t < 2; t++) {
        if (t == 1 && !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) {
            print_message("linear_int8: no AVX2 and FMA on this host: the haswell build is not run\n");
            break;
        }
        linear_int8_on(t ? "haswell" : NULL);
    }
}

/* x fake-quantized (int8, zero point 3) into three MatMuls + bias: one
 * weight on a per-tensor grid (step 0.01, multiples within +-73, so the
 * grid's step is found from each column's own largest), one of random
 * floats; and x itself into a third.  int8-linear makes the first a
 * LinearInt8 (its output equal to the f32 graph's up to summation order),
 * says why not for the second, and leaves the third alone; with
 * --precision int8 all three. */
static ir_graph *build_grids(void)
{
    tu_seed(0x9a1d);
    ir_graph *g = tu_graph_new("grids.onnx", 17);
    int x = tu_input(g, "x", IR_F32, 3, TU_DIMS(-1, 5, 32));
    double s = 0.05, z = 3;
    int sv = qconst(g, "s", IR_F32, 0, NULL, &s), zv = qconst(g, "z", IR_I8, 0, NULL, &z);
    int q = tu_node(g, IR_OP_QUANTIZE_LINEAR, "q", IR_I8, 3, TU_IN(x, sv, zv), 0, NULL);
    int fq = tu_node(g, IR_OP_DEQUANTIZE_LINEAR, "dq", IR_F32, 3, TU_IN(q, sv, zv), 0, NULL);
    float grid[32 * 24];
    for (int i = 0; i < 32 * 24; i++)
        grid[i] = (float)(0.01 * floor(74 * tu_rnd()));
    int w[3] = {tu_const_f32(g, "w_grid", 2, TU_DIMS(32, 24), grid), tu_const_rand(g, "w_float", 2, TU_DIMS(32, 24), 0.1f),
                tu_const_rand(g, "w_plain", 2, TU_DIMS(32, 24), 0.1f)};
    int b = tu_const_rand(g, "b", 1, TU_DIMS(24), 0.1f);
    for (int i = 0; i < 3; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "mm%d", i);
        int m = tu_node(g, IR_OP_MATMUL, nm, IR_F32, 2, TU_IN(i < 2 ? fq : x, w[i]), 0, NULL);
        snprintf(nm, sizeof nm, "add%d", i);
        tu_output(g, tu_node(g, IR_OP_ADD, nm, IR_F32, 2, TU_IN(m, b), 0, NULL));
    }
    tu_check_graph(g, "grids.onnx");
    return g;
}

/* g through the passes with int8 mode `mode`; what --explain-fusion says (free it). */
static char *run_passes_explained(ir_graph *g, pass_int8 mode, const char *name)
{
    vitc_diag d;
    vitc_diag_init(&d, name);
    pass_options po = {.int8 = mode, .explain = pass_explain_new()};
    assert_non_null(po.explain);
    assert_int_equal(pass_run(g, &po, &d), VITC_OK);
    char *text = NULL;
    size_t len;
    FILE *f = open_memstream(&text, &len);
    pass_explain_print(po.explain, f);
    fclose(f);
    pass_explain_free(po.explain);
    return text;
}

static void test_int8_linear_takes_int8_grids_and_says_why_not(void **state)
{
    (void)state;
    for (int all = 0; all < 2; all++) {
        ir_graph *ref = build_grids(), *g = build_grids();
        char *text = run_passes_explained(g, all ? PASS_INT8_ALL : PASS_INT8_QUANTIZED, "grids.onnx");
        print_message("int8-linear (%s): %d LinearInt8, %d Linear\n%s", all ? "all" : "quantized",
                      tu_count_op(g, IR_OP_LINEAR_INT8), tu_count_op(g, IR_OP_LINEAR), all ? "" : text);
        assert_int_equal(tu_count_op(g, IR_OP_LINEAR_INT8), all ? 3 : 1);
        if (!all && (!strstr(text, "node 'add1'") || !strstr(text, "no int8 grid")))
            fail_msg("--explain-fusion does not say why add1 (mm1 + b) stays f32:\n%s", text);
        free(text);
        ir_tensor in, want[3], got[3];
        tu_random_inputs(ref, 3, &in);
        tu_interpret_ok(ref, &in, want);
        tu_interpret_ok(g, &in, got);
        /* the grid's Linear computes what the graph does; the others are quantized per row with --precision int8 */
        for (int k = 0; k < 3; k++) {
            double e = tu_error(&got[k], &want[k]), bar = k == 0 || !all ? 1e-6 : 3e-2;
            print_message("  output %d: max rel %.3g from the f32 graph (bar %g)\n", k, e, bar);
            if (!(e <= bar))
                fail_msg("int8-linear (%s): output %d moved by %.3g (bar %g)", all ? "all" : "quantized", k, e, bar);
            ir_tensor_free(&got[k]);
            ir_tensor_free(&want[k]);
        }
        ir_tensor_free(&in);
        ir_graph_free(ref);
        ir_graph_free(g);
    }
}

/* --precision int8 keeps in f32 a Linear whose weight quantizes out of line
 * with the others: x [B, 5, 64] into five Linears, four of random weights
 * (about 0.5% error in int8), one whose columns hold one 1 and 63 values
 * just past half the int8 step (each rounded up: about 3% error in all). */
static void test_int8_keeps_an_out_of_line_weight_in_f32(void **state)
{
    (void)state;
    tu_seed(0x0071e);
    ir_graph *g = tu_graph_new("outlier.onnx", 17);
    int x = tu_input(g, "x", IR_F32, 3, TU_DIMS(-1, 5, 64));
    float odd[64 * 16];
    for (int k = 0; k < 64; k++)
        for (int j = 0; j < 16; j++)
            odd[k * 16 + j] = k == j ? 1.0f : (k + j) % 2 ? 0.004f : -0.004f;
    for (int i = 0; i < 5; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "w%d", i);
        int w = i == 3 ? tu_const_f32(g, nm, 2, TU_DIMS(64, 16), odd) : tu_const_rand(g, nm, 2, TU_DIMS(64, 16), 0.1f);
        snprintf(nm, sizeof nm, "mm%d", i);
        tu_output(g, tu_node(g, IR_OP_MATMUL, nm, IR_F32, 2, TU_IN(x, w), 0, NULL));
    }
    tu_check_graph(g, "outlier.onnx");
    char *text = run_passes_explained(g, PASS_INT8_ALL, "outlier.onnx");
    print_message("%d LinearInt8, %d Linear\n%s", tu_count_op(g, IR_OP_LINEAR_INT8), tu_count_op(g, IR_OP_LINEAR), text);
    assert_int_equal(tu_count_op(g, IR_OP_LINEAR_INT8), 4);
    assert_int_equal(tu_count_op(g, IR_OP_LINEAR), 1);
    if (!strstr(text, "node 'mm3'") || !strstr(text, "out of line"))
        fail_msg("--explain-fusion does not say why mm3 stays f32:\n%s", text);
    free(text);
    ir_graph_free(g);
}

/* --precision int8 with int8_pairs (a CPU without VNNI): every weight it
 * quantizes has its pairs of k (2i, 2i + 1) summing to at most 128 on each
 * side, checked here element by element, with steps finer than the
 * max|column| / 64 that bounds every pair (some weight past 64); the grid's
 * Linear (add0) keeps the model's own multiples, whose pairs reach 146 (the
 * backend then takes its 16-bit path); the outputs within the same bars of
 * the f32 graph as without. */
static void test_int8_pairs_keep_pair_sums_in_int16(void **state)
{
    (void)state;
    ir_graph *ref = build_grids(), *g = build_grids();
    vitc_diag d;
    vitc_diag_init(&d, "grids.onnx");
    pass_options po = {.int8 = PASS_INT8_ALL, .int8_pairs = 1};
    assert_int_equal(pass_run(g, &po, &d), VITC_OK);
    int n8 = 0, past64 = 0, grid_over = 0;
    for (int i = 0; i < g->nnodes; i++) {
        ir_linear v;
        char why[160];
        if (g->nodes[i].op != IR_OP_LINEAR_INT8 || !ir_linear_of(&g->nodes[i], &v, why, sizeof why))
            continue;
        const ir_value *W = &g->values[v.w];
        const int8_t *q = W->data;
        int64_t K = W->dims[0].k, N = W->dims[1].k;
        n8++;
        for (int64_t k = 0; k < K; k += 2)
            for (int64_t j = 0; j < N; j++) {
                int w0 = q[k * N + j], w1 = k + 1 < K ? q[(k + 1) * N + j] : 0;
                int pos = (w0 > 0 ? w0 : 0) + (w1 > 0 ? w1 : 0), neg = (w0 < 0 ? w0 : 0) + (w1 < 0 ? w1 : 0);
                int over = pos > 128 || neg < -128, grid = strcmp(g->nodes[i].name, "add0") == 0;
                if (over && !grid)
                    fail_msg("LinearInt8 '%s': k %lld and %lld of column %lld are %d and %d: past int16 for u8 inputs",
                             g->nodes[i].name, (long long)k, (long long)k + 1, (long long)j, w0, w1);
                grid_over += over;
                past64 += !grid && abs(w0) > 64;
            }
    }
    print_message("int8_pairs: %d LinearInt8; quantized: %d weights past 64, every pair within +-128; the grid's: %d "
                  "pairs past\n", n8, past64, grid_over);
    assert_int_equal(n8, 3);
    assert_true(past64 > 0 && grid_over > 0);
    ir_tensor in, want[3], got[3];
    tu_random_inputs(ref, 3, &in);
    tu_interpret_ok(ref, &in, want);
    tu_interpret_ok(g, &in, got);
    for (int k = 0; k < 3; k++) {
        double e = tu_error(&got[k], &want[k]), bar = k == 0 ? 1e-6 : 3e-2;
        print_message("  output %d: max rel %.3g from the f32 graph (bar %g)\n", k, e, bar);
        if (!(e <= bar))
            fail_msg("int8_pairs: output %d moved by %.3g (bar %g)", k, e, bar);
        ir_tensor_free(&got[k]);
        ir_tensor_free(&want[k]);
    }
    ir_tensor_free(&in);
    ir_graph_free(ref);
    ir_graph_free(g);
}

/* vitc compile --precision int8 of the timm seed fixture: every Linear on
 * int8 kernels (inspect says so), within cosine 0.999 of PyTorch's fp32;
 * for this host, and for it without VNNI (--features), where every GEMM
 * takes the VPMADDUBSW path (the weights' pairs quantized to fit). */
static void precision_int8_fp32_model(int novnni)
{
    char model[4096], so[4300];
    tu_path(model, sizeof model, "tests/models/timm-ts17.onnx");
    snprintf(so, sizeof so, "%s/timm.int8%s.so", tmpdir, novnni ? ".novnni" : "");
    const char *a1[] = {"compile", model, "-o", so, "--batch", "3", "--precision", "int8", "--quiet",
                        novnni ? "--features=-avx512vnni,-avxvnni,-amx-int8" : NULL, NULL};
    const char *a2[] = {"inspect", so, NULL};
    char *out = NULL, *err = NULL;
    if (tu_run_vitc(a1, &out, &err) != 0)
        fail_msg("vitc compile --precision int8: %s%s", out ? out : "", err ? err : "");
    free(out), free(err);
    if (tu_run_vitc(a2, &out, &err) != 0 || !out || !strstr(out, "precision int8") || !strstr(out, "GEMM int8"))
        fail_msg("vitc inspect of an int8 model:\n%s%s", out ? out : "", err ? err : "");
    int paths[4] = {0};
    static const char *const names[4] = {"amx", "vnni", "maddubs", "wide"};
    for (const char *at = out; (at = strstr(at, "GEMM int8 ")); at++) {
        char word[32] = "";
        sscanf(at, "GEMM int8 %*s %31s", word);
        for (int i = 0; i < 4; i++)
            paths[i] += strcmp(word, names[i]) == 0;
    }
    print_message("timm --precision int8%s: GEMM int8 paths amx %d, vnni %d, maddubs %d, wide %d\n",
                  novnni ? " without VNNI" : "", paths[0], paths[1], paths[2], paths[3]);
    if (paths[0] + paths[1] + paths[2] + paths[3] == 0 || (novnni && (paths[0] || paths[1] || paths[3])))
        fail_msg("vitc inspect of an int8 model%s: not every GEMM on %s:\n%s", novnni ? " without VNNI" : "",
                 novnni ? "maddubs" : "a named path", out);
    free(out), free(err);
    for (int b = 0; b < 2; b++) {
        char path[256];
        ir_tensor in, got, ref;
        snprintf(path, sizeof path, "tests/models/timm.b%lld.input.npy", (long long)batches[b]);
        tu_read_npy(path, &in);
        snprintf(path, sizeof path, "tests/models/timm.b%lld.output.npy", (long long)batches[b]);
        tu_read_npy(path, &ref);
        tu_run_so(so, &in, 1, &got, 1, batches[b]);
        double e = tu_error(&got, &ref), cos = tu_cosine(&got, &ref);
        print_message("timm --precision int8%s, batch %lld: max rel %.3g, cosine %.6f against PyTorch's fp32\n",
                      novnni ? " without VNNI" : "", (long long)batches[b], e, cos);
        if (!(cos >= 0.999))
            fail_msg("--precision int8, batch %lld: cosine %.6f (bar 0.999)", (long long)batches[b], cos);
        ir_tensor_free(&in), ir_tensor_free(&got), ir_tensor_free(&ref);
    }
}

static void test_precision_int8_compiles_an_fp32_model(void **state)
{
    (void)state;
    for (int novnni = 0; novnni < 2; novnni++)
        precision_int8_fp32_model(novnni);
}

/* --precision int8 --calibrate DIR: static input ranges from the fixture's
 * batch-3 inputs (and one image of them, rank 3), every Linear quantized
 * with them (inspect lists static quantizers, no per-row ones), the outputs
 * on the batch-1 input within cosine 0.995 of PyTorch's fp32; a folder
 * without .npy files, a sample of the wrong size, and --calibrate without
 * --precision int8 are refused (exit 2) without writing the .so. */
static void test_precision_int8_calibrated(void **state)
{
    (void)state;
    char model[4096], so[4300], dir[4300], path[4400];
    tu_path(model, sizeof model, "tests/models/timm-ts17.onnx");
    snprintf(so, sizeof so, "%s/timm.calibrated.so", tmpdir);
    snprintf(dir, sizeof dir, "%s/calibration", tmpdir);
    assert_int_equal(mkdir(dir, 0700), 0);
    ir_tensor in, one, got, ref, wrong;
    tu_read_npy("tests/models/timm.b3.input.npy", &in);
    one = in;
    one.rank = 3, one.dims[0] = in.dims[1], one.dims[1] = in.dims[2], one.dims[2] = in.dims[3];
    vitc_diag d;
    vitc_diag_init(&d, dir);
    snprintf(path, sizeof path, "%s/a.npy", dir);
    assert_int_equal(ir_npy_write(path, &in, &d), VITC_OK);
    snprintf(path, sizeof path, "%s/b.npy", dir);
    assert_int_equal(ir_npy_write(path, &one, &d), VITC_OK);
    const char *a1[] = {"compile", model, "-o", so, "--batch", "3", "--precision", "int8", "--calibrate", dir,
                        "--quiet", NULL};
    const char *a2[] = {"inspect", so, NULL};
    char *out = NULL, *err = NULL;
    if (tu_run_vitc(a1, &out, &err) != 0)
        fail_msg("vitc compile --precision int8 --calibrate: %s%s", out ? out : "", err ? err : "");
    free(out), free(err);
    if (tu_run_vitc(a2, &out, &err) != 0 || !out || !strstr(out, "quantize static") || strstr(out, "quantize per row"))
        fail_msg("vitc inspect of a calibrated int8 model:\n%s%s", out ? out : "", err ? err : "");
    free(out), free(err);
    tu_read_npy("tests/models/timm.b1.input.npy", &one);
    tu_read_npy("tests/models/timm.b1.output.npy", &ref);
    tu_run_so(so, &one, 1, &got, 1, 1);
    double e = tu_error(&got, &ref), cos = tu_cosine(&got, &ref);
    print_message("timm --precision int8 --calibrate (4 images), batch 1: max rel %.3g, cosine %.6f against PyTorch's "
                  "fp32\n", e, cos);
    if (!(cos >= 0.995))
        fail_msg("--calibrate: cosine %.6f (bar 0.995)", cos);
    ir_tensor_free(&one), ir_tensor_free(&got), ir_tensor_free(&ref), ir_tensor_free(&in);
    /* refusals */
    unlink(so);
    char empty[4300];
    snprintf(empty, sizeof empty, "%s/empty", tmpdir);
    assert_int_equal(mkdir(empty, 0700), 0);
    wrong = tu_f32_tensor(4, TU_DIMS(1, 3, 16, 16), NULL);
    snprintf(path, sizeof path, "%s/c.npy", dir);
    assert_int_equal(ir_npy_write(path, &wrong, &d), VITC_OK);
    ir_tensor_free(&wrong);
    const char *bad[3][12] = {
        {"compile", model, "-o", so, "--precision", "int8", "--calibrate", empty, NULL},
        {"compile", model, "-o", so, "--precision", "int8", "--calibrate", dir, NULL},
        {"compile", model, "-o", so, "--calibrate", dir, NULL}};
    const char *want[3] = {"no .npy file", "sample 3", "give --precision int8"};
    for (int k = 0; k < 3; k++) {
        int rc = tu_run_vitc(bad[k], &out, &err);
        if (rc != 2 || !err || !strstr(err, want[k]) || access(so, F_OK) == 0)
            fail_msg("refusal %d: exit %d, no \"%s\" or a .so written:\n%s", k, rc, want[k], err ? err : "");
        free(out), free(err);
    }
}

static int setup(void **state)
{
#ifdef VITC_HAVE_CUDA
    if (tu_emu_init())
        return -1;
#endif
    *state = tu_tmpdir(tmpdir, sizeof tmpdir);
    return *state ? 0 : -1;
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
        const char *want = k == 0 ? "= DequantizeLinear(" : k == 1 ? "= MatMulInteger(" : "= QLinearAdd(";
        if (rc != 0 || !out || !strstr(out, want))
            fail_msg("vitc dump %s: exit %d\n%s%s", rel, rc, out ? out : "", err ? err : "");
        free(out);
        free(err);
    }
}

/* `vitc compare` of a model that rounds computed tensors, held to a bar it
 * misses, says why such a model can miss a bar; of a float model, not. */
static void test_compare_says_why_a_quantized_model_misses_a_bar(void **state)
{
    (void)state;
    static const char *const models[2] = {"tests/data/quantized/face_bn-dynamic.onnx", "tests/models/face_bn-ts17.onnx"};
    for (int k = 0; k < 2; k++) {
        char path[4096];
        tu_path(path, sizeof path, models[k]);
        const char *args[] = {"compare", path, "--max-rel", "1e-12", "--batch", "3", NULL};
        char *out = NULL, *err = NULL;
        int rc = tu_run_vitc(args, &out, &err);
        const char *note = out ? strstr(out, "rounds computed tensors to integer steps (") : NULL;
        print_message("vitc compare %s --max-rel 1e-12: exit %d, %s\n", models[k], rc,
                      note ? "the note on rounding" : "no note");
        if (rc != 1 || !out || !strstr(out, "FAIL") || (k == 0) != (note != NULL))
            fail_msg("vitc compare %s: exit %d\n%s%s", models[k], rc, out ? out : "", err ? err : "");
        free(out);
        free(err);
    }
}

/* The pipeline with every pass but quant-lookup. */
static int passes_without_lookup(ir_graph *g, const pass_options *po, vitc_diag *d)
{
    int n, st = VITC_OK;
    const pass_def *p = pass_pipeline(&n);
    for (int i = 0; i < n && st == VITC_OK; i++)
        if (strcmp(p[i].name, "quant-lookup") != 0)
            st = p[i].run_opt ? p[i].run_opt(g, po, d) : p[i].run(g, d);
    return st;
}

/* The committed static and QOperator exports with the CPU's int8 passes:
 * each block's GELU (Div, Erf, Add, Mul, Mul and the FakeQuants between, on
 * fc1's fake-quantized output) is one QuantLookup, fc1 without its last
 * fake-quant point (the lookup's grid, which it quantizes to), no erf is left, and the
 * interpreter gives the graph with the tables the bits it gives the graph
 * without them (batch 2, random images): the tables are its own values of
 * the chains.  The face models have no GELU chain (nothing to look up). */
static void test_quant_lookup_tables_are_the_chains_to_the_bit(void **state)
{
    (void)state;
    static const char *const files[] = {"timm-qdq", "timm-qop", "torchvision-qdq", "torchvision-qop", "einops-qdq",
                                        "einops-qop", "face_ln-qdq", "face_bn-qdq"};
    tu_seed(0x100c);
    for (size_t k = 0; k < sizeof files / sizeof files[0]; k++) {
        char rel[256];
        snprintf(rel, sizeof rel, "tests/data/quantized/%s.onnx", files[k]);
        ir_graph *with = tu_load_model(rel), *without = tu_load_model(rel);
        vitc_diag d;
        vitc_diag_init(&d, rel);
        pass_options po = {.int8 = PASS_INT8_QUANTIZED};
        assert_int_equal(pass_run(with, &po, &d), VITC_OK);
        assert_int_equal(passes_without_lookup(without, &po, &d), VITC_OK);
        int want = strncmp(files[k], "face", 4) == 0 ? 0 : 2, got = tu_count_op(with, IR_OP_QUANT_LOOKUP);
        print_message("%-16s %d QuantLookup; Erf: %d without the pass, %d with it\n", files[k], got,
                      tu_count_op(without, IR_OP_ERF), tu_count_op(with, IR_OP_ERF));
        if (got != want || tu_count_op(with, IR_OP_ERF) != 0 || tu_count_op(without, IR_OP_ERF) != want)
            fail_msg("%s: %d QuantLookup (%d expected), %d Erf left", files[k], got, want, tu_count_op(with, IR_OP_ERF));
        int from_linear = 0; /* a lookup on fc1's output: fc1 leaves its last point to it */
        for (int i = 0; i < with->nnodes; i++) {
            const ir_node *n = &with->nodes[i];
            int p = n->op == IR_OP_QUANT_LOOKUP ? with->values[n->inputs[0]].producer : -1;
            ir_linear lv;
            char why[160];
            if (p < 0 || with->nodes[p].op != IR_OP_LINEAR_INT8)
                continue;
            from_linear++;
            if (!ir_linear_of(&with->nodes[p], &lv, why, sizeof why) || lv.fq[1][1] != 0 || lv.fq[0][1] == 0)
                fail_msg("%s: lookup '%s' reads an int8 Linear that keeps its last point", files[k], n->name);
        }
        if (strstr(files[k], "-qdq") && from_linear != want) /* the static exports: fc1 with its bias point */
            fail_msg("%s: %d lookups on an int8 Linear's output, %d expected", files[k], from_linear, want);
        ir_tensor in[TU_MAX_IO], a[TU_MAX_IO], b[TU_MAX_IO];
        tu_random_inputs(with, 2, in);
        tu_interpret_ok(with, in, a);
        tu_interpret_ok(without, in, b);
        for (int o = 0; o < with->noutputs; o++) {
            double e = tu_error(&a[o], &b[o]);
            if (e != 0)
                fail_msg("%s: output %d with the tables differs from the chains' by %.3g", files[k], o, e);
            ir_tensor_free(&a[o]), ir_tensor_free(&b[o]);
        }
        for (int i = 0; i < with->ninputs; i++)
            ir_tensor_free(&in[i]);
        ir_graph_free(with), ir_graph_free(without);
    }
}

/* Every committed quantized export (five families, QDQ, dynamic and
 * QOperator) with the CPU backend's passes: each block's attention one
 * Attention, whatever the export put inside it (the fake-quant points) and
 * around its projection (torchvision's sequence-first Transpose, moved below
 * the FakeQuants and the bias Add by rows-through-elementwise).  The one
 * miss is named: torchvision's QOperator export fake-quantizes Q twice
 * (QLinearMul's input and its output), which Attention has no point for. */
static void test_quantized_attention_is_fused(void **state)
{
    (void)state;
    static const char *const files[] = {"timm-qdq", "timm-dynamic", "timm-qop", "torchvision-qdq",
                                        "torchvision-dynamic", "torchvision-qop", "einops-qdq", "einops-dynamic",
                                        "einops-qop", "face_ln-qdq", "face_ln-dynamic", "face_bn-qdq",
                                        "face_bn-dynamic"};
    for (size_t k = 0; k < sizeof files / sizeof files[0]; k++) {
        char rel[256];
        snprintf(rel, sizeof rel, "tests/data/quantized/%s.onnx", files[k]);
        ir_graph *g = tu_load_model(rel);
        vitc_diag d;
        vitc_diag_init(&d, rel);
        pass_options po = {.int8 = PASS_INT8_QUANTIZED};
        assert_int_equal(pass_run(g, &po, &d), VITC_OK);
        int want = strcmp(files[k], "torchvision-qop") == 0 ? 0 : 2, got = tu_count_op(g, IR_OP_ATTENTION);
        print_message("%-20s %d Attention, %d Softmax left\n", files[k], got, tu_count_op(g, IR_OP_SOFTMAX));
        if (got != want)
            fail_msg("%s: %d Attention, %d expected", files[k], got, want);
        ir_graph_free(g);
    }
}

/* v fake-quantized (u8, one scale and zero point): a QDQ pair. */
static int qdq(ir_graph *g, const char *name, int v, double s, double z)
{
    char nm[64];
    snprintf(nm, sizeof nm, "%s_s", name);
    int sv = qconst(g, nm, IR_F32, 0, NULL, &s);
    snprintf(nm, sizeof nm, "%s_z", name);
    int zv = qconst(g, nm, IR_U8, 0, NULL, &z);
    int q = tu_node(g, IR_OP_QUANTIZE_LINEAR, NULL, IR_U8, 3, TU_IN(v, sv, zv), 0, NULL);
    return tu_node(g, IR_OP_DEQUANTIZE_LINEAR, NULL, IR_F32, 3, TU_IN(q, sv, zv), 0, NULL);
}

/* Attention whose Q is scaled after its QDQ pair (softmax(QDQ(QDQ(Q) * 0.5
 * @ K^T))): the factor scales the product the scores' point rounds, so it is
 * the scores point's mul, not the Attention's scale (applied after the
 * point); the fused graph within cosine 0.9999 of the graph as built. */
static void test_quantized_attention_keeps_its_factors_in_order(void **state)
{
    (void)state;
    enum { T = 6, H = 2, D = 4, C = 8 };
    tu_seed(0xa77);
    ir_graph *g = tu_graph_new("qattn.onnx", 17);
    int x = tu_input(g, "x", IR_F32, 3, TU_DIMS(-1, T, C));
    int qkv = tu_node(g, IR_OP_MATMUL, "qkv", IR_F32, 2, TU_IN(x, tu_const_rand(g, "W", 2, TU_DIMS(C, 3 * C), 1)), 0,
                      NULL);
    qkv = qdq(g, "qkv_q", qkv, 0.02, 128);
    int r = tu_node(g, IR_OP_RESHAPE, NULL, IR_F32, 2, TU_IN(qkv, tu_const_ints(g, "shape5", 5, TU_DIMS(-1, T, 3, H, D))),
                    0, NULL);
    ir_attr perm = tu_ints(g, IR_ATTR_PERM, 5, TU_DIMS(2, 0, 3, 1, 4));
    int t = tu_node(g, IR_OP_TRANSPOSE, NULL, IR_F32, 1, &r, 1, &perm);
    int parts[3];
    tu_unbind(g, t, 3, "part", parts);
    int q = tu_node(g, IR_OP_MUL, NULL, IR_F32, 2, TU_IN(qdq(g, "q_q", parts[0], 0.015, 120), tu_scalar(g, "half", 0.5f)),
                    0, NULL);
    ir_attr perm2 = tu_ints(g, IR_ATTR_PERM, 4, TU_DIMS(0, 1, 3, 2));
    int kt = tu_node(g, IR_OP_TRANSPOSE, NULL, IR_F32, 1, &parts[1], 1, &perm2);
    int s = qdq(g, "s_q", tu_node(g, IR_OP_MATMUL, "scores", IR_F32, 2, TU_IN(q, kt), 0, NULL), 0.01, 100);
    ir_attr last = tu_int(IR_ATTR_AXIS, -1);
    int p = qdq(g, "p_q", tu_node(g, IR_OP_SOFTMAX, "softmax", IR_F32, 1, &s, 1, &last), 1 / 255.0, 0);
    int o = tu_node(g, IR_OP_MATMUL, "pv", IR_F32, 2, TU_IN(p, parts[2]), 0, NULL);
    ir_attr perm3 = tu_ints(g, IR_ATTR_PERM, 4, TU_DIMS(0, 2, 1, 3));
    o = tu_node(g, IR_OP_TRANSPOSE, NULL, IR_F32, 1, &o, 1, &perm3);
    tu_output(g, tu_node(g, IR_OP_RESHAPE, NULL, IR_F32, 2, TU_IN(o, tu_const_ints(g, "shape3", 3, TU_DIMS(-1, T, C))),
                         0, NULL));
    tu_check_graph(g, "qattn.onnx");
    ir_tensor in[1], want[1], got[1];
    tu_random_inputs(g, 3, in);
    tu_interpret_ok(g, in, want);
    vitc_diag d;
    vitc_diag_init(&d, "qattn");
    pass_options po = {.int8 = PASS_INT8_QUANTIZED};
    assert_int_equal(pass_run(g, &po, &d), VITC_OK);
    assert_int_equal(tu_count_op(g, IR_OP_ATTENTION), 1);
    ir_attention a;
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i].op == IR_OP_ATTENTION)
            assert_int_equal(ir_attention_of(&g->nodes[i], &a, (char[160]){0}, 160), 1);
    print_message("qattn: Attention scale %g, Q point mul %g, scores point mul %g\n", (double)a.scale,
                  (double)a.fq[IR_ATTN_FQ_Q][0], (double)a.fq[IR_ATTN_FQ_S][0]);
    assert_true(a.scale == 1.0f && a.fq[IR_ATTN_FQ_S][0] == 0.5f && a.fq[IR_ATTN_FQ_Q][0] == 1.0f);
    tu_interpret_ok(g, in, got);
    double cos = tu_cosine(&got[0], &want[0]);
    print_message("qattn: fused vs as built, cosine %.6f\n", cos);
    assert_true(cos >= 0.9999);
    ir_tensor_free(&in[0]), ir_tensor_free(&want[0]), ir_tensor_free(&got[0]);
    ir_graph_free(g);
}

TU_MAIN(setup, tu_teardown_tmpdir, test_quantized_exports_in_the_interpreter_match_onnxruntime,
        test_quantized_exports_on_the_cpu_match_onnxruntime, test_quantized_exports_on_the_cuda_emulation_match_onnxruntime,
        test_lowered_dynamic_quantization_on_the_cpu_is_exact,
        test_lowered_qdq_pairs_on_the_cpu_are_exact, test_what_is_not_lowered_is_refused_by_name, test_dump_prints_the_quantized_exports,
        test_quantized_exports_on_int8_kernels_match_onnxruntime, test_linear_int8_on_the_cpu_matches_the_interpreter,
        test_int8_linear_takes_int8_grids_and_says_why_not, test_int8_pairs_keep_pair_sums_in_int16,
        test_precision_int8_compiles_an_fp32_model,
        test_precision_int8_calibrated, test_int8_keeps_an_out_of_line_weight_in_f32, test_quantized_attention_is_fused,
        test_fake_quant_ties_are_exact, test_quantized_attention_keeps_its_factors_in_order,
        test_quant_lookup_tables_are_the_chains_to_the_bit, test_compare_says_why_a_quantized_model_misses_a_bar)
