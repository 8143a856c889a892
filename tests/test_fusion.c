/* test_fusion.c: the fused ops and the passes that make them, on small
 * hand-built graphs.  The fused ops (Linear, Attention) are checked in the
 * reference interpreter against loops written here from their spec in
 * ops.def; each fusion pattern is checked to fire on its exporter spellings,
 * to leave the numbers unchanged, and not to fire on near misses, with the
 * reason --explain-fusion gives. */
#include "testutil.h"

#include "frontend/onnx.h"
#include "ir/interp.h"
#include "passes/passes.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- tensors ---- */

/* max |got - want| / max |want| <= tol, printing the numbers either way. */
static void expect_rel(const char *what, const ir_tensor *got, const double *want, int64_t n, double tol)
{
    assert_int_equal(ir_tensor_numel(got), n);
    double maxdiff = 0, maxref = 0;
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        double diff = fabs(ir_tensor_get(got, i) - want[i]);
        if (!(diff <= maxdiff)) {
            maxdiff = diff;
            at = i;
        }
        maxref = fmax(maxref, fabs(want[i]));
    }
    double rel = maxdiff / (maxref > 0 ? maxref : 1);
    print_message("%s: rel error %.3g (max |diff| %.3g at %lld, max |ref| %.3g)\n", what, rel, maxdiff, (long long)at,
                  maxref);
    if (!(rel <= tol))
        fail_msg("%s: rel error %.3g > %.3g (element %lld is %.9g, expected %.9g)", what, rel, tol, (long long)at,
                 ir_tensor_get(got, at), want[at]);
}

/* ---- the fused ops in the interpreter ---- */

static double ref_act(double y, int act)
{
    switch (act) {
    case 1: return y * 0.5 * (1.0 + erf(y * 0.70710678118654752440));
    case 2: return 0.5 * y * (1.0 + tanh(0.79788456080286535588 * (y + 0.044715 * y * y * y)));
    case 3: return fmax(y, 0.0);
    case 4: return fmin(fmax(y, 0.0), 6.0);
    default: return y;
    }
}

/* The graph of one node with output y: verified, y of type want, and the node one the interpreter runs. */
static void one_node_typed(ir_graph *g, int y, const char *want)
{
    tu_output(g, y);
    tu_check_graph(g, "test.onnx");
    char buf[64];
    ir_value_type_str(&g->values[y], buf, sizeof buf);
    assert_string_equal(buf, want);
    assert_true(ir_interp_supports(g, &g->nodes[0]));
}

/* Linear on x [B, 3, 4], W [4, 5], bias [5], residual [B, 3, 5], for every
 * activation, against a plain triple loop. */
static void test_linear_kernel_matches_a_loop_for_every_activation(void **state)
{
    (void)state;
    enum { T = 3, K = 4, N = 5, BATCH = 2 };
    for (int act = 0; act <= 4; act++) {
        ir_graph *g = tu_graph_new("test.onnx", 17);
        int64_t xd[3] = {-1, T, K}, rd[3] = {-1, T, N}, wd[2] = {K, N}, bd[1] = {N};
        int x = tu_input(g, "x", IR_F32, 3, xd), r = tu_input(g, "r", IR_F32, 3, rd);
        int w = tu_const_rand(g, "W", 2, wd, 2.0f), b = tu_const_rand(g, "bias", 1, bd, 1.0f);
        int y = tu_value(g, "y", IR_F32);
        ir_attr a = tu_int(IR_ATTR_ACTIVATION, act);
        int ins[4] = {x, w, b, r};
        tu_node_out(g, IR_OP_LINEAR, "fc", 4, ins, 1, &y, 1, &a);
        one_node_typed(g, y, "f32[B,3,5]");

        int64_t cxd[3] = {BATCH, T, K}, crd[3] = {BATCH, T, N};
        ir_tensor in[2] = {tu_f32_tensor(3, cxd, NULL), tu_f32_tensor(3, crd, NULL)}, out;
        tu_interpret_ok(g, in, &out);
        double want[BATCH * T * N];
        const float *W = g->values[w].data, *B = g->values[b].data;
        for (int m = 0; m < BATCH * T; m++)
            for (int j = 0; j < N; j++) {
                double s = B[j];
                for (int k = 0; k < K; k++)
                    s += ir_tensor_get(&in[0], m * K + k) * (double)W[k * N + j];
                want[m * N + j] = ref_act(s, act) + ir_tensor_get(&in[1], m * N + j);
            }
        char what[64];
        snprintf(what, sizeof what, "Linear activation %d", act);
        expect_rel(what, &out, want, BATCH * T * N, 1e-6);
        ir_tensor_free(&in[0]);
        ir_tensor_free(&in[1]);
        ir_tensor_free(&out);
        ir_graph_free(g);
    }
}

/* Linear without bias and residual on a rank-2 input. */
static void test_linear_kernel_without_bias_or_residual(void **state)
{
    (void)state;
    ir_graph *g = tu_graph_new("test.onnx", 17);
    int64_t xd[2] = {-1, 6}, wd[2] = {6, 3};
    int x = tu_input(g, "x", IR_F32, 2, xd), w = tu_const_rand(g, "W", 2, wd, 1.0f), y = tu_value(g, "y", IR_F32);
    int ins[4] = {x, w, -1, -1};
    tu_node_out(g, IR_OP_LINEAR, "fc", 4, ins, 1, &y, 0, NULL);
    tu_output(g, y);
    tu_check_graph(g, "test.onnx");
    int64_t cxd[2] = {4, 6};
    ir_tensor in = tu_f32_tensor(2, cxd, NULL), out;
    tu_interpret_ok(g, &in, &out);
    double want[4 * 3];
    const float *W = g->values[w].data;
    for (int m = 0; m < 4; m++)
        for (int j = 0; j < 3; j++) {
            double s = 0;
            for (int k = 0; k < 6; k++)
                s += ir_tensor_get(&in, m * 6 + k) * (double)W[k * 3 + j];
            want[m * 3 + j] = s;
        }
    expect_rel("Linear without bias", &out, want, 12, 1e-6);
    ir_tensor_free(&in);
    ir_tensor_free(&out);
    ir_graph_free(g);
}

/* The spec of Attention, written out independently: Q, K, V gathered from
 * the packed axis by layout, scores, a softmax, post_scale, then P @ V with
 * the heads merged as [H][D]. */
static void ref_attention(const ir_tensor *x, int B, int N, int H, int D, int layout, double scale, double post,
                          double *want)
{
    int HD = H * D;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < N; i++) {
                double s[64], mx = -INFINITY, sum = 0;
                assert_true(N <= 64);
                for (int j = 0; j < N; j++) {
                    double dot = 0;
                    for (int d = 0; d < D; d++) {
                        int qi = layout == 0 ? 0 * HD + h * D + d : (h * D + d) * 3 + 0;
                        int ki = layout == 0 ? 1 * HD + h * D + d : (h * D + d) * 3 + 1;
                        dot += ir_tensor_get(x, ((int64_t)b * N + i) * 3 * HD + qi) *
                               ir_tensor_get(x, ((int64_t)b * N + j) * 3 * HD + ki);
                    }
                    s[j] = dot * scale;
                    mx = fmax(mx, s[j]);
                }
                for (int j = 0; j < N; j++)
                    sum += exp(s[j] - mx);
                for (int d = 0; d < D; d++) {
                    double o = 0;
                    for (int j = 0; j < N; j++) {
                        int vi = layout == 0 ? 2 * HD + h * D + d : (h * D + d) * 3 + 2;
                        o += exp(s[j] - mx) / sum * post * ir_tensor_get(x, ((int64_t)b * N + j) * 3 * HD + vi);
                    }
                    want[((int64_t)b * N + i) * HD + h * D + d] = o;
                }
            }
}

static void check_attention(int layout, float scale, float post)
{
    enum { BATCH = 2, N = 5, H = 3, D = 4 };
    ir_graph *g = tu_graph_new("test.onnx", 17);
    int64_t xd[3] = {-1, N, 3 * H * D};
    int x = tu_input(g, "qkv", IR_F32, 3, xd), y = tu_value(g, "y", IR_F32);
    ir_attr a[5] = {tu_int(IR_ATTR_HEADS, H), tu_int(IR_ATTR_HEAD_SIZE, D), tu_float(IR_ATTR_SCALE, scale),
                    tu_float(IR_ATTR_POST_SCALE, post), tu_int(IR_ATTR_QKV_LAYOUT, layout)};
    tu_node_out(g, IR_OP_ATTENTION, "attn", 1, &x, 1, &y, 5, a);
    one_node_typed(g, y, "f32[B,5,12]");
    int64_t cxd[3] = {BATCH, N, 3 * H * D};
    ir_tensor in = tu_f32_tensor(3, cxd, NULL), out;
    for (int64_t i = 0; i < ir_tensor_numel(&in); i++) /* scores large enough for the softmax to matter */
        ir_tensor_set(&in, i, 3 * ir_tensor_get(&in, i));
    tu_interpret_ok(g, &in, &out);
    double want[BATCH * N * H * D];
    ref_attention(&in, BATCH, N, H, D, layout, scale, post, want);
    char what[96];
    snprintf(what, sizeof what, "Attention layout %d scale %g post_scale %g", layout, scale, post);
    expect_rel(what, &out, want, BATCH * N * H * D, 1e-6);
    ir_tensor_free(&in);
    ir_tensor_free(&out);
    ir_graph_free(g);
}

static void test_attention_kernel_packed_qkv_layout_matches_the_spec(void **state)
{
    (void)state;
    check_attention(0, 0.5f, 1.0f);
}

static void test_attention_kernel_interleaved_layout_and_post_scale_match_the_spec(void **state)
{
    (void)state;
    check_attention(1, 1.0f, 0.125f);
}

/* A malformed Attention (qkv not 3*H*D wide) is a shape error naming the node. */
static void test_attention_with_a_wrong_width_is_a_shape_error(void **state)
{
    (void)state;
    ir_graph *g = tu_graph_new("test.onnx", 17);
    int64_t xd[3] = {-1, 5, 35};
    int x = tu_input(g, "qkv", IR_F32, 3, xd), y = tu_value(g, "y", IR_F32);
    ir_attr a[2] = {tu_int(IR_ATTR_HEADS, 3), tu_int(IR_ATTR_HEAD_SIZE, 4)};
    tu_node_out(g, IR_OP_ATTENTION, "attn_bad", 1, &x, 1, &y, 2, a);
    size_t len;
    char *text = NULL;
    FILE *mem = open_memstream(&text, &len);
    assert_non_null(mem);
    vitc_diag d;
    vitc_diag_init(&d, "test.onnx");
    d.out = mem;
    int st = ir_infer_shapes(g, &d);
    fclose(mem);
    print_message("message: %s", text);
    assert_int_equal(st, VITC_BAD_INPUT);
    assert_non_null(strstr(text, "attn_bad"));
    assert_non_null(strstr(text, "[B, N, 36]"));
    free(text);
    ir_graph_free(g);
}

/* ---- the passes on hand-built graphs ---- */

static int op_by_name(const char *name)
{
    for (int i = 0; i < IR_OP_COUNT; i++)
        if (strcmp(ir_op_table[i].name, name) == 0)
            return i;
    return -1;
}

static const ir_node *producer(const ir_graph *g, int v)
{
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i].noutputs; k++)
            if (g->nodes[i].outputs[k] == v)
                return &g->nodes[i];
    return NULL;
}

#define N1(op, name, a) tu_node(g, op, name, IR_F32, 1, (int[]){a}, 0, NULL)
#define N2(op, name, a, b) tu_node(g, op, name, IR_F32, 2, (int[]){a, b}, 0, NULL)

/* Runs g through the reference interpreter on seeded inputs at batch 2,
 * then through the pipeline (collecting explanations), then again, and
 * checks that the outputs agree within tol.  Returns the explanation text
 * (free it). */
static char *optimize_checked(ir_graph *g, double tol)
{
    tu_check_graph(g, "test.onnx");
    ir_tensor in[8], before[4], after[4];
    assert_true(g->ninputs <= 8 && g->noutputs <= 4);
    for (int i = 0; i < g->ninputs; i++) {
        const ir_value *v = &g->values[g->inputs[i]];
        int64_t dims[IR_MAX_RANK];
        for (int k = 0; k < v->rank; k++)
            dims[k] = ir_dim_eval(v->dims[k], 2);
        in[i] = tu_f32_tensor(v->rank, dims, NULL);
    }
    tu_interpret_ok(g, in, before);
    pass_explain *e = pass_explain_new();
    assert_non_null(e);
    pass_options o = {.explain = e};
    vitc_diag d;
    vitc_diag_init(&d, "test.onnx");
    assert_int_equal(pass_run(g, &o, &d), VITC_OK);
    tu_interpret_ok(g, in, after);
    for (int k = 0; k < g->noutputs; k++) {
        double err = ir_rel_error(&after[k], &before[k]);
        print_message("output %d: optimized vs imported rel error %.3g (tolerance %.0e)\n", k, err, tol);
        if (!(err <= tol))
            fail_msg("output %d moved by %.3g > %.3g through the passes", k, err, tol);
        ir_tensor_free(&before[k]);
        ir_tensor_free(&after[k]);
    }
    for (int i = 0; i < g->ninputs; i++)
        ir_tensor_free(&in[i]);
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    assert_non_null(mem);
    pass_explain_print(e, mem);
    fclose(mem);
    pass_explain_free(e);
    print_message("%s", text);
    return text;
}

/* The decomposed LayerNorm of TorchScript's opset-13 export, over the last axis. */
static void test_layernorm_decomposed_becomes_one_layernormalization(void **state)
{
    (void)state;
    ir_graph *g = tu_graph_new("test.onnx", 17);
    int64_t xd[3] = {-1, 3, 8}, cd[1] = {8};
    int x = tu_input(g, "x", IR_F32, 3, xd);
    ir_attr axes = {.id = IR_ATTR_AXES, .kind = IR_AT_INTS, .n = 1, .ints = (int64_t[]){-1}, .tensor = -1};
    int mean = tu_node(g, IR_OP_REDUCE_MEAN, "ln/ReduceMean", IR_F32, 1, &x, 1, &axes);
    int dv = N2(IR_OP_SUB, "ln/Sub", x, mean);
    int sq = N2(IR_OP_POW, "ln/Pow", dv, tu_scalar(g, "two", 2));
    int var = tu_node(g, IR_OP_REDUCE_MEAN, "ln/ReduceMean_1", IR_F32, 1, &sq, 1, &axes);
    int sd = N1(IR_OP_SQRT, "ln/Sqrt", N2(IR_OP_ADD, "ln/Add", var, tu_scalar(g, "eps", 1e-6f)));
    int y = N2(IR_OP_DIV, "ln/Div", dv, sd);
    y = N2(IR_OP_MUL, "ln/Mul", y, tu_const_rand(g, "gamma", 1, cd, 1));
    y = N2(IR_OP_ADD, "ln/Add_1", tu_const_rand(g, "beta", 1, cd, 1), y);
    tu_output(g, y);
    free(optimize_checked(g, 1e-5));
    assert_int_equal(g->nnodes, 1);
    const ir_node *n = &g->nodes[0];
    assert_int_equal(n->op, IR_OP_LAYERNORM);
    assert_string_equal(n->name, "ln");
    assert_int_equal(ir_attr_int(n, IR_ATTR_AXIS, 0), -1);
    assert_true(ir_attr_float(n, IR_ATTR_EPSILON, 0) == 1e-6f);
    assert_int_equal(n->ninputs, 3);
    ir_graph_free(g);
}

/* x * 0.5 * (1 + erf(x / sqrt 2)) in the order (x * 0.5) * (1 + erf), after a
 * MatMul + Add: becomes one Linear with activation 1 (GELU, erf). */
static void test_gelu_erf_after_matmul_becomes_linear_with_gelu(void **state)
{
    (void)state;
    ir_graph *g = tu_graph_new("test.onnx", 17);
    int64_t xd[3] = {-1, 3, 6}, wd[2] = {6, 5}, bd[1] = {5};
    int x = tu_input(g, "x", IR_F32, 3, xd);
    int h = N2(IR_OP_MATMUL, "fc1/MatMul", x, tu_const_rand(g, "W", 2, wd, 1));
    h = N2(IR_OP_ADD, "fc1/Add", tu_const_rand(g, "b", 1, bd, 1), h);
    int e = N1(IR_OP_ERF, "act/Erf", N2(IR_OP_MUL, "act/Mul_s", h, tu_scalar(g, "inv_sqrt2", 0.70710678f)));
    int a = N2(IR_OP_ADD, "act/Add", tu_scalar(g, "one", 1), e);
    int y = N2(IR_OP_MUL, "act/Mul", N2(IR_OP_MUL, "act/Half", h, tu_scalar(g, "half", 0.5f)), a);
    tu_output(g, y);
    free(optimize_checked(g, 1e-5));
    assert_int_equal(g->nnodes, 1);
    assert_int_equal(g->nodes[0].op, IR_OP_LINEAR);
    assert_int_equal(ir_attr_int(&g->nodes[0], IR_ATTR_ACTIVATION, 0), 1);
    ir_graph_free(g);
}

/* Gemm(transB=1, alpha, beta) + Clip(0, 6) + a residual Add: one Linear with
 * W transposed and scaled, activation 4 (ReLU6) and the residual. */
static void test_gemm_relu6_residual_becomes_one_linear(void **state)
{
    (void)state;
    ir_graph *g = tu_graph_new("test.onnx", 17);
    int64_t xd[2] = {-1, 6}, wd[2] = {6, 6}, bd[1] = {6};
    int x = tu_input(g, "x", IR_F32, 2, xd);
    ir_attr at[3] = {tu_int(IR_ATTR_TRANS_B, 1), tu_float(IR_ATTR_ALPHA, 2.0f), tu_float(IR_ATTR_BETA, 0.5f)};
    int h = tu_node(g, IR_OP_GEMM, "fc", IR_F32, 3, (int[]){x, tu_const_rand(g, "W", 2, wd, 3), tu_const_rand(g, "b", 1, bd, 4)},
                 3, at);
    int c = tu_node(g, IR_OP_CLIP, "act", IR_F32, 3, (int[]){h, tu_scalar(g, "lo", 0), tu_scalar(g, "hi", 6)}, 0, NULL);
    int y = N2(IR_OP_ADD, "residual", x, c);
    tu_output(g, y);
    free(optimize_checked(g, 1e-5));
    assert_int_equal(g->nnodes, 1);
    const ir_node *n = &g->nodes[0];
    assert_int_equal(n->op, IR_OP_LINEAR);
    assert_int_equal(ir_attr_int(n, IR_ATTR_ACTIVATION, 0), 4);
    assert_int_equal(n->ninputs, 4);
    assert_int_equal(n->inputs[3], x);
    ir_graph_free(g);
}

/* A Clip(0, 5) is not ReLU6: the Linear keeps no activation and says why. */
static void test_clip_to_5_is_not_relu6(void **state)
{
    (void)state;
    ir_graph *g = tu_graph_new("test.onnx", 17);
    int64_t xd[2] = {-1, 4}, wd[2] = {4, 4};
    int x = tu_input(g, "x", IR_F32, 2, xd);
    int h = N2(IR_OP_MATMUL, "fc", x, tu_const_rand(g, "W", 2, wd, 3));
    int y = tu_node(g, IR_OP_CLIP, "act", IR_F32, 3, (int[]){h, tu_scalar(g, "lo", 0), tu_scalar(g, "hi", 5)}, 0, NULL);
    tu_output(g, y);
    char *text = optimize_checked(g, 1e-5);
    assert_int_equal(tu_count_op(g, IR_OP_CLIP), 1);
    assert_non_null(strstr(text, "node 'fc' (MatMul): Clip's bounds are [0, 5], not [0, 6] (ReLU6)"));
    free(text);
    ir_graph_free(g);
}

/* einops's attention, hand-built: qkv Linear, Reshape to (b n h d qkv),
 * Transpose to (qkv b h n d), Gather q/k/v, Einsum scores, Softmax, Div by a
 * constant after the softmax, Einsum with v, head merge.  One Attention with
 * the interleaved layout and the scale after the softmax. */
static void test_einsum_attention_interleaved_with_scale_after_softmax(void **state)
{
    (void)state;
    enum { T = 5, H = 2, D = 4, C = 8 };
    ir_graph *g = tu_graph_new("test.onnx", 17);
    int64_t xd[3] = {-1, T, C}, wd[2] = {C, 3 * C}, bd[1] = {3 * C};
    int x = tu_input(g, "x", IR_F32, 3, xd);
    int qkv = N2(IR_OP_ADD, "qkv/Add", N2(IR_OP_MATMUL, "qkv/MatMul", x, tu_const_rand(g, "Wqkv", 2, wd, 1)),
                 tu_const_rand(g, "bqkv", 1, bd, 0.1f));
    int r = N2(IR_OP_RESHAPE, "Reshape", qkv, tu_const_ints(g, "shape5", 5, (int64_t[]){-1, T, H, D, 3}));
    ir_attr perm = {.id = IR_ATTR_PERM, .kind = IR_AT_INTS, .n = 5, .ints = (int64_t[]){4, 0, 2, 1, 3}, .tensor = -1};
    int t = tu_node(g, IR_OP_TRANSPOSE, "Transpose", IR_F32, 1, &r, 1, &perm);
    int parts[3];
    tu_unbind(g, t, 3, "Gather_", parts);
    ir_attr e1 = {.id = IR_ATTR_EQUATION, .kind = IR_AT_STRING, .s = "bhqd, bhkd -> bhqk", .n = 18, .tensor = -1};
    ir_attr e2 = {.id = IR_ATTR_EQUATION, .kind = IR_AT_STRING, .s = "bhal, bhlv -> bhav ", .n = 19, .tensor = -1};
    int s = tu_node(g, IR_OP_EINSUM, "Einsum", IR_F32, 2, (int[]){parts[0], parts[1]}, 1, &e1);
    ir_attr last = tu_int(IR_ATTR_AXIS, -1);
    int p = tu_node(g, IR_OP_SOFTMAX, "Softmax", IR_F32, 1, &s, 1, &last);
    p = N2(IR_OP_DIV, "Div", p, tu_scalar(g, "sqrt_emb", 8));
    int o = tu_node(g, IR_OP_EINSUM, "Einsum_1", IR_F32, 2, (int[]){p, parts[2]}, 1, &e2);
    ir_attr perm2 = {.id = IR_ATTR_PERM, .kind = IR_AT_INTS, .n = 4, .ints = (int64_t[]){0, 2, 1, 3}, .tensor = -1};
    o = tu_node(g, IR_OP_TRANSPOSE, "Transpose_1", IR_F32, 1, &o, 1, &perm2);
    o = N2(IR_OP_RESHAPE, "Reshape_1", o, tu_const_ints(g, "shape3", 3, (int64_t[]){-1, T, C}));
    tu_output(g, o);
    free(optimize_checked(g, 1e-5));
    assert_int_equal(tu_count_op(g, IR_OP_ATTENTION), 1);
    assert_int_equal(tu_count_op(g, IR_OP_SOFTMAX), 0);
    assert_int_equal(tu_count_op(g, IR_OP_EINSUM), 0);
    assert_int_equal(tu_count_op(g, IR_OP_GATHER), 0);
    assert_int_equal(tu_count_op(g, IR_OP_TRANSPOSE), 0);
    assert_int_equal(g->nnodes, 2); /* the qkv Linear and the Attention */
    const ir_node *a = &g->nodes[1];
    assert_int_equal(a->op, IR_OP_ATTENTION);
    assert_int_equal(ir_attr_int(a, IR_ATTR_HEADS, 0), H);
    assert_int_equal(ir_attr_int(a, IR_ATTR_HEAD_SIZE, 0), D);
    assert_int_equal(ir_attr_int(a, IR_ATTR_QKV_LAYOUT, -1), 1);
    assert_true(ir_attr_float(a, IR_ATTR_SCALE, 0) == 1.0f);
    assert_true(ir_attr_float(a, IR_ATTR_POST_SCALE, 0) == 0.125f);
    ir_graph_free(g);
}

/* BatchNormalization after a Linear on [B, C] goes into W and the bias. */
static void test_batchnorm_after_linear_folds_into_its_weights(void **state)
{
    (void)state;
    ir_graph *g = tu_graph_new("test.onnx", 17);
    int64_t xd[2] = {-1, 6}, wd[2] = {6, 4}, cd[1] = {4};
    float var[4] = {0.5f, 1.0f, 1.5f, 2.0f};
    int x = tu_input(g, "x", IR_F32, 2, xd);
    int h = N2(IR_OP_MATMUL, "fc", x, tu_const_rand(g, "W", 2, wd, 1));
    ir_attr eps = tu_float(IR_ATTR_EPSILON, 2e-5f);
    int y = tu_node(g, IR_OP_BATCHNORM, "bn", IR_F32, 5,
                 (int[]){h, tu_const_rand(g, "gamma", 1, cd, 1), tu_const_rand(g, "beta", 1, cd, 1),
                         tu_const_rand(g, "mean", 1, cd, 1), tu_const_f32(g, "var", 1, cd, var)},
                 1, &eps);
    tu_output(g, y);
    free(optimize_checked(g, 1e-5));
    assert_int_equal(g->nnodes, 1);
    assert_int_equal(g->nodes[0].op, IR_OP_LINEAR);
    assert_string_equal(g->nodes[0].op_type, "MatMul+BatchNormalization");
    assert_int_equal(g->outputs[0], y); /* the graph output keeps its value (and name) */
    ir_graph_free(g);
}

/* Conv with kernel = stride = 3 on a 7x7 image (the last row and column are
 * ignored): patches (after a crop) times a [C*3*3, O] Linear. */
static void test_patch_conv_becomes_crop_reshape_and_linear(void **state)
{
    (void)state;
    ir_graph *g = tu_graph_new("test.onnx", 17);
    int64_t xd[4] = {-1, 2, 7, 7}, wd[4] = {5, 2, 3, 3}, bd[1] = {5};
    int x = tu_input(g, "x", IR_F32, 4, xd);
    ir_attr at[2] = {{.id = IR_ATTR_STRIDES, .kind = IR_AT_INTS, .n = 2, .ints = (int64_t[]){3, 3}, .tensor = -1},
                     {.id = IR_ATTR_KERNEL_SHAPE, .kind = IR_AT_INTS, .n = 2, .ints = (int64_t[]){3, 3}, .tensor = -1}};
    int y = tu_node(g, IR_OP_CONV, "conv", IR_F32, 3,
                 (int[]){x, tu_const_rand(g, "W", 4, wd, 1), tu_const_rand(g, "b", 1, bd, 1)}, 2, at);
    tu_output(g, y);
    free(optimize_checked(g, 1e-5));
    assert_int_equal(tu_count_op(g, IR_OP_CONV), 0);
    assert_int_equal(tu_count_op(g, IR_OP_LINEAR), 1);
    assert_int_equal(tu_count_op(g, IR_OP_SLICE), 1);
    char buf[64];
    ir_value_type_str(&g->values[y], buf, sizeof buf);
    assert_string_equal(buf, "f32[B,5,2,2]");
    ir_graph_free(g);
}

/* Transpose then its inverse, and Reshape chains: gone or one Reshape. */
static void test_view_round_trips_cancel_and_reshape_chains_collapse(void **state)
{
    (void)state;
    ir_graph *g = tu_graph_new("test.onnx", 17);
    int64_t xd[3] = {-1, 4, 6};
    int x = tu_input(g, "x", IR_F32, 3, xd);
    ir_attr p1 = {.id = IR_ATTR_PERM, .kind = IR_AT_INTS, .n = 3, .ints = (int64_t[]){1, 0, 2}, .tensor = -1};
    int t = tu_node(g, IR_OP_TRANSPOSE, "t1", IR_F32, 1, &x, 1, &p1);
    t = N2(IR_OP_RESHAPE, "r1", t, tu_const_ints(g, "s1", 4, (int64_t[]){4, -1, 2, 3}));
    t = N2(IR_OP_RESHAPE, "r2", t, tu_const_ints(g, "s2", 3, (int64_t[]){4, -1, 6}));
    t = tu_node(g, IR_OP_TRANSPOSE, "t2", IR_F32, 1, &t, 1, &p1);
    int y = N1(IR_OP_RELU, "relu", t);
    int z = N2(IR_OP_RESHAPE, "r3", N2(IR_OP_RESHAPE, "r4", y, tu_const_ints(g, "s4", 2, (int64_t[]){-1, 24})),
               tu_const_ints(g, "s3", 4, (int64_t[]){-1, 2, 2, 6}));
    z = N1(IR_OP_NEG, "neg", z);
    tu_output(g, z);
    free(optimize_checked(g, 0));
    assert_int_equal(tu_count_op(g, IR_OP_TRANSPOSE), 0);
    assert_int_equal(tu_count_op(g, IR_OP_RESHAPE), 1);
    assert_int_equal(g->nodes[0].op, IR_OP_RELU);
    assert_int_equal(g->nodes[0].inputs[0], x);
    ir_graph_free(g);
}

/* A Slice that keeps its input's shape is dropped only when it is the
 * identity: with step -1 it reverses its axis and must stay. */
static void test_full_slice_is_dropped_but_a_reversing_one_stays(void **state)
{
    (void)state;
    ir_graph *g = tu_graph_new("test.onnx", 17);
    int x = tu_input(g, "x", IR_F32, 3, TU_DIMS(-1, 4, 6));
    int axes = tu_const_ints(g, "axes", 1, (int64_t[]){2});
    int full = tu_node(g, IR_OP_SLICE, "full", IR_F32, 4,
                       TU_IN(x, tu_const_ints(g, "s0", 1, (int64_t[]){0}), tu_const_ints(g, "e6", 1, (int64_t[]){6}),
                             axes),
                       0, NULL);
    int rev = tu_node(g, IR_OP_SLICE, "reverse", IR_F32, 5,
                      TU_IN(full, tu_const_ints(g, "sm1", 1, (int64_t[]){-1}),
                            tu_const_ints(g, "emax", 1, (int64_t[]){-100}), axes,
                            tu_const_ints(g, "step", 1, (int64_t[]){-1})),
                      0, NULL);
    tu_output(g, N1(IR_OP_NEG, "neg", rev));
    free(optimize_checked(g, 0));
    assert_int_equal(tu_count_op(g, IR_OP_SLICE), 1);
    ir_graph_free(g);
}

/* GELU as users write it, with the 1/2 and the products grouped in other
 * orders: (x * (1 + erf(x * 0.7071))) / 2 and x * (0.5 * (1 + erf(x / 1.4142))). */
static void test_gelu_spellings_with_other_groupings_fuse(void **state)
{
    (void)state;
    ir_graph *g = tu_graph_new("test.onnx", 17);
    int x = tu_input(g, "x", IR_F32, 3, TU_DIMS(-1, 3, 6));
    int e1 = N1(IR_OP_ERF, "g1/Erf", N2(IR_OP_MUL, "g1/Scale", x, tu_scalar(g, "inv_sqrt2", 0.70710678f)));
    int a1 = N2(IR_OP_ADD, "g1/Add", e1, tu_scalar(g, "one1", 1));
    tu_output(g, N2(IR_OP_DIV, "g1/Half", N2(IR_OP_MUL, "g1/Mul", x, a1), tu_scalar(g, "two", 2)));
    int e2 = N1(IR_OP_ERF, "g2/Erf", N2(IR_OP_DIV, "g2/Scale", x, tu_scalar(g, "sqrt2", 1.41421356f)));
    int a2 = N2(IR_OP_ADD, "g2/Add", tu_scalar(g, "one2", 1), e2);
    tu_output(g, N2(IR_OP_MUL, "g2/Mul", x, N2(IR_OP_MUL, "g2/Half", tu_scalar(g, "half", 0.5f), a2)));
    free(optimize_checked(g, 1e-6));
    assert_int_equal(tu_count_op(g, IR_OP_GELU), 2);
    assert_int_equal(tu_count_op(g, IR_OP_ERF), 0);
    ir_graph_free(g);
}

/* sqrt(16) / 2 of constants is folded to a constant before it scales x. */
static void test_constant_arithmetic_folds(void **state)
{
    (void)state;
    ir_graph *g = tu_graph_new("test.onnx", 17);
    int64_t xd[2] = {-1, 3};
    int x = tu_input(g, "x", IR_F32, 2, xd);
    int c = N2(IR_OP_DIV, "div", N1(IR_OP_SQRT, "sqrt", tu_scalar(g, "sixteen", 16)), tu_scalar(g, "two", 2));
    int y = N2(IR_OP_MUL, "mul", x, c);
    tu_output(g, y);
    free(optimize_checked(g, 0));
    assert_int_equal(g->nnodes, 1);
    const ir_value *k = &g->values[g->nodes[0].inputs[1]];
    assert_int_equal(k->kind, IR_VAL_CONST);
    float v;
    memcpy(&v, k->data, sizeof v);
    assert_true(v == 2.0f);
    ir_graph_free(g);
}

/* A weight stored as int8 with a scale per output column (DequantizeLinear of
 * constants, as ONNX Runtime's static quantization writes it) folds into an
 * f32 constant, and the MatMul that reads it becomes a Linear. */
static void test_dequantized_constant_weight_folds_into_a_linear(void **state)
{
    (void)state;
    ir_graph *g = tu_graph_new("test.onnx", 13);
    int64_t dw[2] = {6, 4}, dn[1] = {4};
    int8_t wq[24], zp[4] = {0, 3, -2, 0};
    float sc[4] = {0.01f, 0.02f, 0.005f, 0.1f};
    for (int i = 0; i < 24; i++)
        wq[i] = (int8_t)((i * 53) % 255 - 127);
    int x = tu_input(g, "x", IR_F32, 3, TU_DIMS(-1, 5, 6));
    int w = ir_add_const(g, "w_quantized", IR_I8, 2, dw, wq, sizeof wq);
    int s = ir_add_const(g, "w_scale", IR_F32, 1, dn, sc, sizeof sc), z = ir_add_const(g, "w_zero_point", IR_I8, 1, dn, zp, sizeof zp);
    ir_attr axis = tu_int(IR_ATTR_AXIS, 1);
    int wf = tu_node(g, IR_OP_DEQUANTIZE_LINEAR, "w_dq", IR_F32, 3, TU_IN(w, s, z), 1, &axis);
    tu_output(g, N2(IR_OP_MATMUL, "mm", x, wf));
    free(optimize_checked(g, 1e-6));
    assert_int_equal(tu_count_op(g, IR_OP_DEQUANTIZE_LINEAR), 0);
    assert_int_equal(tu_count_op(g, IR_OP_LINEAR), 1);
    ir_graph_free(g);
}

/* Shape arithmetic the fold pass evaluates through the interpreter with the
 * batch kept symbolic: old TorchScript's nn.MultiheadAttention in-projection
 * split, Slice bounds from a ceiling-style (E + 2) / 3 on Shape (truncating
 * integer Div), and HF Dinov2's Reshape target from float Pow and Cast on a
 * token count; the target's first entry is the batch.  Every Shape, Gather,
 * Div, Pow and Cast folds away. */
static void test_shape_arithmetic_with_truncating_div_and_float_pow_folds(void **state)
{
    (void)state;
    ir_graph *g = tu_graph_new("test.onnx", 17);
    int x = tu_input(g, "x", IR_F32, 3, TU_DIMS(-1, 16, 10));
    int s = tu_node(g, IR_OP_SHAPE, "shape", IR_I64, 1, TU_IN(x), 0, NULL);
    int64_t two = 2, one = 1, zero = 0;
    int e = tu_node(g, IR_OP_GATHER, "e", IR_I64, 2, TU_IN(s, tu_const_i64(g, "i2", 0, NULL, &two)), 0, NULL);
    int sum = tu_node(g, IR_OP_ADD, "e_plus_2", IR_I64, 2, TU_IN(e, tu_const_i64(g, "two", 0, NULL, &two)), 0, NULL);
    int64_t three = 3;
    int third = tu_node(g, IR_OP_DIV, "third", IR_I64, 2, TU_IN(sum, tu_const_i64(g, "three", 0, NULL, &three)), 0, NULL);
    int end = tu_node(g, IR_OP_MUL, "end", IR_I64, 2, TU_IN(third, tu_const_i64(g, "two_", 0, NULL, &two)), 0, NULL);
    int ax0 = tu_const_ints(g, "ax0", 1, &zero);
    int starts = tu_node(g, IR_OP_UNSQUEEZE, "starts", IR_I64, 2, TU_IN(third, ax0), 0, NULL);
    int ends = tu_node(g, IR_OP_UNSQUEEZE, "ends", IR_I64, 2, TU_IN(end, ax0), 0, NULL);
    int k = tu_node(g, IR_OP_SLICE, "k", IR_F32, 4, TU_IN(x, starts, ends, tu_const_ints(g, "ax2", 1, &two)), 0, NULL);
    /* side = Cast(Pow(Cast(tokens, float), 0.5), int64) */
    int tok = tu_node(g, IR_OP_GATHER, "tokens", IR_I64, 2, TU_IN(s, tu_const_i64(g, "i1", 0, NULL, &one)), 0, NULL);
    int tf = tu_node(g, IR_OP_CAST, "tokens_f", IR_F32, 1, TU_IN(tok), 1, TU_AT(tu_int(IR_ATTR_TO, 1)));
    int root = tu_node(g, IR_OP_POW, "root", IR_F32, 2, TU_IN(tf, tu_scalar(g, "half", 0.5f)), 0, NULL);
    int side = tu_node(g, IR_OP_CAST, "side", IR_I64, 1, TU_IN(root), 1, TU_AT(tu_int(IR_ATTR_TO, 7)));
    int b = tu_node(g, IR_OP_GATHER, "b", IR_I64, 2, TU_IN(s, tu_const_i64(g, "i0", 0, NULL, &zero)), 0, NULL);
    int parts[4];
    int64_t minus1 = -1;
    parts[0] = tu_node(g, IR_OP_UNSQUEEZE, "b1", IR_I64, 2, TU_IN(b, ax0), 0, NULL);
    parts[1] = parts[2] = tu_node(g, IR_OP_UNSQUEEZE, "side1", IR_I64, 2, TU_IN(side, ax0), 0, NULL);
    parts[3] = tu_const_ints(g, "rest", 1, &minus1);
    int target = tu_node(g, IR_OP_CONCAT, "target", IR_I64, 4, parts, 1, TU_AT(tu_int(IR_ATTR_AXIS, 0)));
    int grid = tu_node(g, IR_OP_RESHAPE, "grid", IR_F32, 2, TU_IN(k, target), 0, NULL);
    tu_output(g, grid);
    free(optimize_checked(g, 0));
    const ir_value *y = &g->values[g->outputs[0]];
    assert_int_equal(y->rank, 4);
    assert_true(ir_dim_eq(y->dims[0], (ir_dim){1, 1}) && y->dims[1].k == 4 && y->dims[2].k == 4 && y->dims[3].k == 4);
    static const ir_op gone[] = {IR_OP_SHAPE, IR_OP_GATHER, IR_OP_DIV, IR_OP_POW, IR_OP_CAST, IR_OP_CONCAT};
    for (size_t i = 0; i < sizeof gone / sizeof gone[0]; i++)
        if (tu_count_op(g, gone[i]))
            fail_msg("%s is left after folding", ir_op_name(gone[i]));
    ir_graph_free(g);
}

/* softmax(x + Where(x > 0, 0, m)) guarded by Where(IsNaN(p), 0, p): with m
 * = -3.4e38 (finite) no row is NaN and the guard folds; with m = -inf a row
 * with no x > 0 is NaN and the guard stays. */
static void test_nan_guard_folds_only_after_finite_logits(void **state)
{
    (void)state;
    for (int finite = 0; finite < 2; finite++) {
        ir_graph *g = tu_graph_new("test.onnx", 17);
        int x = tu_input(g, "x", IR_F32, 2, TU_DIMS(-1, 3));
        int pos = tu_node(g, IR_OP_GREATER, "pos", IR_BOOL, 2, TU_IN(x, tu_scalar(g, "zero", 0)), 0, NULL);
        int mask = tu_node(g, IR_OP_WHERE, "mask", IR_F32, 3,
                           TU_IN(pos, tu_scalar(g, "z", 0), tu_scalar(g, "m", finite ? -3.4e38f : -INFINITY)), 0, NULL);
        int p = tu_node(g, IR_OP_SOFTMAX, "p", IR_F32, 1, TU_IN(N2(IR_OP_ADD, "logits", x, mask)), 1,
                        TU_AT(tu_int(IR_ATTR_AXIS, -1)));
        int nan = tu_node(g, IR_OP_IS_NAN, "isnan", IR_BOOL, 1, TU_IN(p), 0, NULL);
        int guard = tu_node(g, IR_OP_WHERE, "guard", IR_F32, 3, TU_IN(nan, tu_scalar(g, "z2", 0), p), 0, NULL);
        tu_output(g, N1(IR_OP_NEG, "neg", guard)); /* a graph output itself would stay */
        free(optimize_checked(g, 0));
        if (tu_count_op(g, IR_OP_IS_NAN) != !finite)
            fail_msg("mask %s: %d IsNaN left, expected %d", finite ? "-3.4e38" : "-inf", tu_count_op(g, IR_OP_IS_NAN),
                     !finite);
        ir_graph_free(g);
    }
}

/* A bicubic Resize of a constant (a position table interpolated to another
 * grid) becomes a constant, with antialias too (timm's dynamic_img_size
 * through the dynamo exporter shrinking its table); a linear Resize of the
 * input to its own size is dropped; only the Adds are left.  One whose
 * scales are not 1 but floor to its input's shape stays. */
static void test_resize_of_a_constant_folds_and_at_its_own_size_is_dropped(void **state)
{
    (void)state;
    ir_graph *g = tu_graph_new("test.onnx", 17);
    int x = tu_input(g, "x", IR_F32, 4, TU_DIMS(-1, 3, 6, 6));
    int pos = tu_const_rand(g, "pos", 4, TU_DIMS(1, 3, 4, 4), 1);
    float up[4] = {1, 1, 1.5f, 1.5f}, same[4] = {1, 1, 1, 1};
    int grid = tu_node(g, IR_OP_RESIZE, "pos/Resize", IR_F32, 3,
                       TU_IN(pos, -1, tu_const_f32(g, "up", 1, TU_DIMS(4), up)), 2,
                       TU_AT(tu_str(IR_ATTR_MODE, "cubic"), tu_int(IR_ATTR_EXCLUDE_OUTSIDE, 1)));
    int xs = tu_node(g, IR_OP_RESIZE, "x/Resize", IR_F32, 3, TU_IN(x, -1, tu_const_f32(g, "same", 1, TU_DIMS(4), same)),
                     2, TU_AT(tu_str(IR_ATTR_MODE, "linear"), tu_str(IR_ATTR_COORD_MODE, "align_corners")));
    int big = tu_const_rand(g, "pos_big", 4, TU_DIMS(1, 3, 9, 9), 1);
    int64_t to[4] = {1, 3, 6, 6};
    int shrunk = tu_node(g, IR_OP_RESIZE, "pos_big/Resize", IR_F32, 4,
                         TU_IN(big, -1, -1, tu_const_i64(g, "to", 1, TU_DIMS(4), to)), 5,
                         TU_AT(tu_str(IR_ATTR_MODE, "cubic"), tu_float(IR_ATTR_CUBIC_COEFF_A, -0.5f),
                               tu_int(IR_ATTR_ANTIALIAS, 1), tu_int(IR_ATTR_EXCLUDE_OUTSIDE, 1),
                               tu_str(IR_ATTR_KEEP_ASPECT_RATIO_POLICY, "stretch")));
    tu_output(g, N2(IR_OP_ADD, "add2", N2(IR_OP_ADD, "add", xs, grid), shrunk));
    free(optimize_checked(g, 0));
    assert_int_equal(tu_count_op(g, IR_OP_RESIZE), 0);
    assert_int_equal(g->nnodes, 2);
    ir_graph_free(g);

    /* scales 1.1 floor 5 to 5: the same shape, but interpolated, so it stays */
    g = tu_graph_new("test.onnx", 17);
    x = tu_input(g, "x", IR_F32, 4, TU_DIMS(-1, 3, 5, 5));
    float near1[4] = {1, 1, 1.1f, 1.1f};
    int rs = tu_node(g, IR_OP_RESIZE, "x/Resize", IR_F32, 3, TU_IN(x, -1, tu_const_f32(g, "near1", 1, TU_DIMS(4), near1)),
                     1, TU_AT(tu_str(IR_ATTR_MODE, "linear")));
    tu_output(g, N1(IR_OP_NEG, "neg", rs));
    free(optimize_checked(g, 0));
    assert_int_equal(tu_count_op(g, IR_OP_RESIZE), 1);
    ir_graph_free(g);
}

/* Tile(x [B, 1, 6], [1, 4, 1]) repeats an axis of size 1: it becomes
 * Expand(x, [1, 4, 1]), which the backends run.  Tile(x, [1, 1, 2]) repeats
 * an axis of size 6 and stays, --explain-fusion saying why. */
static void test_tile_of_axes_of_size_1_becomes_expand(void **state)
{
    (void)state;
    ir_graph *g = tu_graph_new("test.onnx", 17);
    int x = tu_input(g, "x", IR_F32, 3, TU_DIMS(-1, 1, 6));
    int64_t r1[3] = {1, 4, 1}, r2[3] = {1, 1, 2};
    int a = tu_node(g, IR_OP_TILE, "tile_b", IR_F32, 2, TU_IN(x, tu_const_ints(g, "r1", 3, r1)), 0, NULL);
    int b = tu_node(g, IR_OP_TILE, "tile_w", IR_F32, 2, TU_IN(x, tu_const_ints(g, "r2", 3, r2)), 0, NULL);
    tu_output(g, N1(IR_OP_NEG, "neg_a", a));
    tu_output(g, N1(IR_OP_NEG, "neg_b", b));
    char *explain = optimize_checked(g, 0);
    assert_int_equal(tu_count_op(g, IR_OP_TILE), 1);
    assert_int_equal(tu_count_op(g, IR_OP_EXPAND), 1);
    assert_non_null(strstr(explain, "node 'tile_w' (Tile): axis 2, of size 6, is repeated 2 times: not a broadcast"));
    char t[64];
    assert_string_equal(ir_value_type_str(&g->values[g->nodes[0].outputs[0]], t, sizeof t), "f32[B,4,6]");
    free(explain);
    ir_graph_free(g);
}

/* An index table built of constants (BEiT's relative position index is
 * ScatterND on constants; Pad, GatherND and Tile around it) folds to one
 * constant, Size of a constant with it; only the Add that reads it is left.
 * Size of the input follows the batch: 12 * B. */
static void test_index_ops_on_constants_fold_and_size_follows_the_batch(void **state)
{
    (void)state;
    ir_graph *g = tu_graph_new("test.onnx", 17);
    int x = tu_input(g, "x", IR_F32, 3, TU_DIMS(-1, 3, 4));
    int64_t iv[4] = {0, 1, 2, 3}, pads[4] = {0, 1, 0, -1}, rows[3] = {2, 0, 1}, reps[2] = {1, 2};
    float uv[2] = {5, 7}, zeros[12] = {0};
    int t = tu_node(g, IR_OP_SCATTER_ND, "scatter", IR_F32, 3,
                    TU_IN(tu_const_f32(g, "zeros", 2, TU_DIMS(3, 4), zeros), tu_const_i64(g, "idx", 2, TU_DIMS(2, 2), iv),
                          tu_const_f32(g, "upd", 1, TU_DIMS(2), uv)), 0, NULL);
    t = tu_node(g, IR_OP_PAD, "pad", IR_F32, 2, TU_IN(t, tu_const_ints(g, "pads", 4, pads)), 1,
                TU_AT(tu_str(IR_ATTR_MODE, "edge")));
    t = tu_node(g, IR_OP_GATHER_ND, "rows", IR_F32, 2, TU_IN(t, tu_const_i64(g, "ri", 2, TU_DIMS(3, 1), rows)), 0, NULL);
    int half = tu_node(g, IR_OP_SLICE, "half", IR_F32, 4,
                       TU_IN(t, tu_const_ints(g, "s0", 1, (int64_t[]){1}), tu_const_ints(g, "s1", 1, (int64_t[]){3}),
                             tu_const_ints(g, "s2", 1, (int64_t[]){1})), 0, NULL);
    t = tu_node(g, IR_OP_TILE, "tile", IR_F32, 2, TU_IN(half, tu_const_ints(g, "reps", 2, reps)), 0, NULL);
    int n = tu_node(g, IR_OP_SIZE, "n", IR_I64, 1, TU_IN(t), 0, NULL);
    int nf = tu_node(g, IR_OP_CAST, "nf", IR_F32, 1, TU_IN(n), 1, TU_AT(tu_int(IR_ATTR_TO, 1)));
    int nx = tu_node(g, IR_OP_SIZE, "nx", IR_I64, 1, TU_IN(x), 0, NULL);
    tu_output(g, N2(IR_OP_ADD, "add", x, N2(IR_OP_ADD, "bias", t, nf)));
    tu_check_graph(g, "test.onnx");
    const ir_value *vx = &g->values[nx];
    assert_int_equal(vx->nsymval, 1);
    assert_true(ir_dim_eq(vx->symval[0], (ir_dim){12, 1}));
    free(optimize_checked(g, 0));
    assert_int_equal(g->nnodes, 1);
    assert_int_equal(g->nodes[0].op, IR_OP_ADD);
    const ir_value *k = &g->values[g->nodes[0].inputs[1]];
    assert_int_equal(k->kind, IR_VAL_CONST);
    /* the table [[0,5,0,0],[0,0,0,0],[0,0,0,7]], padded on the left by its edge column and cropped on the
     * right ([[0,0,5,0],[0,0,0,0],[0,0,0,0]]), rows 2, 0, 1, columns 1..2 tiled twice, plus its Size 12 */
    static const float want[12] = {12, 12, 12, 12, 12, 17, 12, 17, 12, 12, 12, 12};
    float got[12];
    assert_int_equal(k->nbytes, sizeof got);
    memcpy(got, k->data, sizeof got);
    for (int i = 0; i < 12; i++)
        if (got[i] != want[i])
            fail_msg("folded table element %d is %g, expected %g", i, got[i], want[i]);
    ir_graph_free(g);
}

/* A LayerNormalization whose Mean and InvStdDev nothing reads keeps only Y. */
static void test_unread_layernorm_statistics_are_dropped(void **state)
{
    (void)state;
    ir_graph *g = tu_graph_new("test.onnx", 17);
    int64_t xd[2] = {-1, 6}, cd[1] = {6};
    int x = tu_input(g, "x", IR_F32, 2, xd), outs[3] = {tu_value(g, "y", IR_F32), tu_value(g, "mean", IR_F32), tu_value(g, "inv", IR_F32)};
    int in[3] = {x, tu_const_rand(g, "scale", 1, cd, 1), tu_const_rand(g, "bias", 1, cd, 1)};
    tu_node_out(g, IR_OP_LAYERNORM, "ln", 3, in, 3, outs, 0, NULL);
    tu_output(g, outs[0]);
    free(optimize_checked(g, 0));
    assert_int_equal(g->nnodes, 1);
    assert_int_equal(g->nodes[0].noutputs, 1);
    ir_graph_free(g);
}

/* ---- the fixtures ---- */

static tu_fixture fixtures[64];
static int nfixtures;

static double run_and_compare(const ir_graph *g, const ir_tensor *in, const ir_tensor *ref, ir_tensor *out)
{
    vitc_diag d;
    vitc_diag_init(&d, "fixture");
    int st = ir_interpret(g, in, out, NULL, NULL, &d);
    if (st)
        fail_msg("interpreter failed with status %d", st);
    return ir_rel_error(out, ref);
}

/* What every optimised fixture must be, for depth d (documented in the
 * README): per block 2 LayerNorm (none for face_bn, whose BatchNorm1d over
 * the patches stays a per-token scale/shift: 1 Mul + 1 Add each), 1 QKV
 * Linear, 1 Attention, 1 output projection Linear with the residual, 2 MLP
 * Linears (the first with the activation, the second with the residual);
 * then the final norm and the head.  Besides: the patch embedding's Linear
 * and its patch extraction (Reshape, Transpose, Reshape; face models crop
 * 112 to 108 with a Slice first), the class token (Expand, Concat, Gather)
 * and the position embedding Add; einops's mean-pool is a ReduceMean over
 * the token axis; face models flatten (Reshape) into a 2-Linear feature
 * head into which the feature BatchNorms fold. */
typedef struct {
    const char *op;
    int count;
} op_expect;

static int expected_ops(const tu_fixture *fx, op_expect *e)
{
    int d = fx->depth, n = 0;
    int face = strncmp(fx->family, "face", 4) == 0, bn = strcmp(fx->family, "face_bn") == 0;
    int einops = strcmp(fx->family, "einops") == 0;
    e[n++] = (op_expect){"Attention", d};
    e[n++] = (op_expect){"LayerNormalization", bn ? 0 : 2 * d + 1};
    e[n++] = (op_expect){"Linear", 4 * d + (face ? 3 : 2)};
    e[n++] = (op_expect){"Add", bn ? 2 * d + 1 : 1};
    e[n++] = (op_expect){"Mul", bn ? 2 * d : 0};
    e[n++] = (op_expect){"Reshape", face ? 3 : 2};
    e[n++] = (op_expect){"Transpose", 1};
    e[n++] = (op_expect){"Slice", face ? 1 : 0};
    e[n++] = (op_expect){"Concat", face ? 0 : 1};
    e[n++] = (op_expect){"Expand", face ? 0 : 1};
    e[n++] = (op_expect){"Gather", face || einops ? 0 : 1};
    e[n++] = (op_expect){"ReduceMean", einops ? 1 : 0};
    return n;
}

static void test_fixtures_fuse_to_the_expected_graph_and_keep_their_outputs(void **state)
{
    (void)state;
    assert_true(nfixtures >= 15);
    static const char *const gone[] = {"Softmax", "Erf", "Pow", "Sqrt", "Gelu", "Clip", "Relu", "MatMul", "Gemm",
                                       "Conv", "Einsum", "BatchNormalization", "Split", "Squeeze", "Unsqueeze",
                                       "Div", "Sub", "Cast", "Identity"};
    print_message("%-24s %6s %6s %5s %5s %7s %7s %7s %10s %10s\n", "fixture", "nodes", "->", "attn", "ln", "linear",
                  "mlp-act", "resid", "err b1", "err b3");
    for (int i = 0; i < nfixtures; i++) {
        const tu_fixture *fx = &fixtures[i];
        char rel[256];
        snprintf(rel, sizeof rel, "tests/models/%.200s", fx->model);
        ir_graph *g = tu_load_model(rel);
        int before = g->nnodes;
        ir_tensor in[2], ref[2], out0[2], out1[2];
        for (int b = 0; b < 2; b++) {
            char path[4096];
            vitc_diag d;
            vitc_diag_init(&d, "npy");
            snprintf(rel, sizeof rel, "tests/models/%s.b%d.input.npy", fx->family, b ? 3 : 1);
            assert_int_equal(ir_npy_read(tu_path(path, sizeof path, rel), &in[b], &d), 0);
            snprintf(rel, sizeof rel, "tests/models/%s.b%d.output.npy", fx->family, b ? 3 : 1);
            assert_int_equal(ir_npy_read(tu_path(path, sizeof path, rel), &ref[b], &d), 0);
            run_and_compare(g, &in[b], &ref[b], &out0[b]);
        }
        pass_explain *ex = pass_explain_new();
        pass_options o = {.explain = ex};
        vitc_diag d;
        vitc_diag_init(&d, fx->model);
        if (pass_run(g, &o, &d))
            fail_msg("%s: the pipeline failed (status %d)", fx->model, d.status);
        op_expect e[32];
        int ne = expected_ops(fx, e);
        for (int k = 0; k < ne; k++) {
            int got = tu_count_op(g, (ir_op)op_by_name(e[k].op));
            if (got != e[k].count)
                fail_msg("%s: %d %s nodes after the passes, expected %d", fx->model, got, e[k].op, e[k].count);
        }
        int known = 0;
        for (int k = 0; k < ne; k++)
            known += e[k].count;
        if (known != g->nnodes)
            fail_msg("%s: %d nodes after the passes, expected exactly %d", fx->model, g->nnodes, known);
        for (size_t k = 0; k < sizeof gone / sizeof gone[0]; k++)
            if (tu_count_op(g, (ir_op)op_by_name(gone[k])))
                fail_msg("%s: %d %s nodes are left", fx->model, tu_count_op(g, (ir_op)op_by_name(gone[k])), gone[k]);
        int act = 0, res = 0, qkv = 0;
        int face = strncmp(fx->family, "face", 4) == 0, einops = strcmp(fx->family, "einops") == 0;
        for (int k = 0; k < g->nnodes; k++) {
            const ir_node *n = &g->nodes[k];
            if (n->op == IR_OP_LINEAR) {
                int64_t a = ir_attr_int(n, IR_ATTR_ACTIVATION, 0);
                act += a != 0;
                if (a)
                    assert_int_equal(a, face ? 4 : 1); /* ReLU6 / exact GELU */
                res += ir_input(n, 3) >= 0;
            }
            if (n->op == IR_OP_REDUCE_MEAN) { /* einops's mean-pool: over the tokens, not a LayerNorm part */
                char t[64];
                const ir_value *pooled = &g->values[n->inputs[0]];
                ir_value_type_str(pooled, t, sizeof t);
                int64_t cnt = 0, ax = -9;
                const ir_attr *a = ir_attr_get(n, IR_ATTR_AXES);
                if (a && a->n == 1)
                    cnt = 1, ax = a->ints[0];
                else if (ir_input(n, 1) >= 0 && g->values[n->inputs[1]].nbytes == sizeof(int64_t))
                    cnt = 1, memcpy(&ax, g->values[n->inputs[1]].data, sizeof ax);
                if (cnt != 1 || (ax != 1 && ax != -2) || ir_attr_int(n, IR_ATTR_KEEPDIMS, 1) != 0 ||
                    pooled->rank != 3 || pooled->dims[1].k != fx->tokens)
                    fail_msg("%s: ReduceMean '%s' on %s over axis %lld is not the mean over the %d tokens", fx->model,
                             n->name, t, (long long)ax, fx->tokens);
            }
            if (n->op == IR_OP_ATTENTION) {
                const ir_node *p = producer(g, n->inputs[0]);
                if (!p || p->op != IR_OP_LINEAR || ir_input(p, 3) >= 0 || ir_attr_int(p, IR_ATTR_ACTIVATION, 0))
                    fail_msg("%s: Attention '%s' does not read one plain QKV Linear", fx->model, n->name);
                qkv++;
                assert_int_equal(ir_attr_int(n, IR_ATTR_HEADS, 0), fx->heads);
                assert_int_equal(ir_attr_int(n, IR_ATTR_HEAD_SIZE, 0), fx->width / fx->heads);
                assert_int_equal(ir_attr_int(n, IR_ATTR_QKV_LAYOUT, -1), einops ? 1 : 0);
                float scale = ir_attr_float(n, IR_ATTR_SCALE, 0), post = ir_attr_float(n, IR_ATTR_POST_SCALE, 0);
                double want_scale = einops ? 1 : 1 / sqrt((double)fx->width / fx->heads);
                double want_post = einops ? 1 / sqrt((double)fx->width) : 1;
                if (fabs(scale - want_scale) > 1e-6 * want_scale || fabs(post - want_post) > 1e-6 * want_post)
                    fail_msg("%s: Attention scale %g post_scale %g, expected %g and %g", fx->model, scale, post,
                             want_scale, want_post);
            }
        }
        if (act != fx->depth || res != 2 * fx->depth)
            fail_msg("%s: %d Linears with an activation and %d with a residual, expected %d and %d", fx->model, act,
                     res, fx->depth, 2 * fx->depth);
        double err[2];
        for (int b = 0; b < 2; b++) {
            double vs_torch = run_and_compare(g, &in[b], &ref[b], &out1[b]);
            err[b] = ir_rel_error(&out1[b], &out0[b]);
            if (!(err[b] <= 1e-5) || !(vs_torch <= 1e-5))
                fail_msg("%s batch %d: optimized output differs from the imported graph's by %.3g and from "
                         "PyTorch's by %.3g (tolerance 1e-5)",
                         fx->model, b ? 3 : 1, err[b], vs_torch);
            ir_tensor_free(&in[b]), ir_tensor_free(&ref[b]), ir_tensor_free(&out0[b]), ir_tensor_free(&out1[b]);
        }
        print_message("%-24s %6d %6d %5d %5d %7d %7d %7d %10.2e %10.2e\n", fx->model, before, g->nnodes,
                      tu_count_op(g, IR_OP_ATTENTION), tu_count_op(g, IR_OP_LAYERNORM), tu_count_op(g, IR_OP_LINEAR), act, res,
                      err[0], err[1]);
        assert_int_equal(qkv, fx->depth);
        pass_explain_free(ex);
        ir_graph_free(g);
    }
}

/* Every fixture compiled by the CPU backend (-O0, to keep the test quick;
 * test_cli_backend covers -O3) matches PyTorch within 1e-4 at batch 1 and 3. */
static void test_fixtures_through_the_cpu_backend_match_pytorch(void **state)
{
    (void)state;
    char dir[256];
    assert_non_null(tu_tmpdir(dir, sizeof dir));
    print_message("%-24s %12s %12s\n", "fixture", "cpu b1", "cpu b3");
    double worst = 0;
    for (int i = 0; i < nfixtures; i++) {
        const tu_fixture *fx = &fixtures[i];
        char rel[512], onnx[4096], so[1024], *out, *err;
        snprintf(rel, sizeof rel, "tests/models/%.200s", fx->model);
        tu_path(onnx, sizeof onnx, rel);
        snprintf(so, sizeof so, "%s/%.200s.so", dir, fx->model);
        const char *cargs[] = {onnx, "-o", so, "--batch", "3", "-O0", NULL};
        int rc = tu_run_vitc(cargs, &out, &err);
        if (rc != 0)
            fail_msg("vitc %s -o %s exited %d: %s", fx->model, so, rc, err);
        free(out), free(err);
        double e[2];
        for (int b = 0; b < 2; b++) {
            char input[4096], refp[4096], got[1200];
            snprintf(rel, sizeof rel, "tests/models/%.100s.b%d.input.npy", fx->family, b ? 3 : 1);
            tu_path(input, sizeof input, rel);
            snprintf(rel, sizeof rel, "tests/models/%.100s.b%d.output.npy", fx->family, b ? 3 : 1);
            tu_path(refp, sizeof refp, rel);
            const char *rargs[] = {"run", so, "--input", input, "--output-dir", dir, NULL};
            rc = tu_run_vitc(rargs, &out, &err);
            if (rc != 0)
                fail_msg("vitc run %s exited %d: %s", so, rc, err);
            free(out), free(err);
            snprintf(got, sizeof got, "%s/output.npy", dir);
            ir_tensor t, r;
            vitc_diag d;
            vitc_diag_init(&d, got);
            assert_int_equal(ir_npy_read(got, &t, &d), 0);
            assert_int_equal(ir_npy_read(refp, &r, &d), 0);
            e[b] = ir_rel_error(&t, &r);
            ir_tensor_free(&t), ir_tensor_free(&r);
            worst = fmax(worst, e[b]);
            if (!(e[b] <= 1e-4))
                fail_msg("%s batch %d: the compiled model differs from PyTorch by %.3g (tolerance 1e-4)", fx->model,
                         b ? 3 : 1, e[b]);
        }
        print_message("%-24s %12.2e %12.2e\n", fx->model, e[0], e[1]);
    }
    print_message("worst: %.2e (tolerance 1e-4)\n", worst);
    tu_rmtree(dir);
}

/* ---- the pattern and near-miss models of tests/data/fusion ---- */

/* Checks "Op=count ..." against g. */
static void check_counts(const char *file, const ir_graph *g, const char *spec)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s", spec);
    for (char *tok = strtok(buf, " "); tok; tok = strtok(NULL, " ")) {
        char *eq = strchr(tok, '=');
        assert_non_null(eq);
        *eq = 0;
        int op = op_by_name(tok);
        if (op < 0)
            fail_msg("%s: EXPECT.tsv names an unknown op '%s'", file, tok);
        int got = tu_count_op(g, (ir_op)op), want = atoi(eq + 1);
        if (got != want)
            fail_msg("%s: %d %s nodes after the passes, expected %d", file, got, tok, want);
    }
}

static void test_pattern_and_near_miss_models_fuse_or_explain_why_not(void **state)
{
    (void)state;
    char path[4096], line[1024];
    FILE *f = fopen(tu_path(path, sizeof path, "tests/data/fusion/EXPECT.tsv"), "r");
    if (!f)
        fail_msg("cannot open %s (regenerate with tests/data/make_fusion_cases.py)", path);
    int cases = 0, misses = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n')
            continue;
        line[strcspn(line, "\n")] = 0;
        char *file = strtok(line, "\t"), *counts = strtok(NULL, "\t"), *why = strtok(NULL, "\t");
        assert_non_null(why);
        char rel[512];
        snprintf(rel, sizeof rel, "tests/data/fusion/%s", file);
        ir_graph *g = tu_load_model(rel);
        print_message("%s:\n", file);
        char *text = optimize_checked(g, 1e-5);
        check_counts(file, g, counts);
        if (strcmp(why, "-") == 0) {
            if (!strstr(text, "0 candidates did not fuse"))
                fail_msg("%s: expected every candidate to fuse, got:\n%s", file, text);
        } else {
            if (!strstr(text, why))
                fail_msg("%s: the explanation does not say \"%s\":\n%s", file, why, text);
            misses++;
        }
        free(text);
        ir_graph_free(g);
        cases++;
    }
    fclose(f);
    print_message("%d models, %d near misses explained\n", cases, misses);
    assert_true(cases >= 9 && misses >= 6);
}

/* ---- the command line ---- */

static void test_cli_dump_after_and_explain_fusion(void **state)
{
    (void)state;
    char model[4096], *out, *err;
    tu_path(model, sizeof model, "tests/models/timm-ts13.onnx");
    const char *a1[] = {"dump", model, "--dump-after=fuse-attention", NULL};
    assert_int_equal(tu_run_vitc(a1, &out, &err), 0);
    assert_non_null(strstr(out, "# after fuse-attention\n"));
    assert_null(strstr(out, "# after cleanup"));
    assert_non_null(strstr(out, "= Attention("));
    free(out), free(err);
    const char *a2[] = {"dump", model, "--dump-after", "all", NULL};
    assert_int_equal(tu_run_vitc(a2, &out, &err), 0);
    int n;
    const pass_def *p = pass_pipeline(&n);
    for (int i = 0; i < n; i++) {
        char head[64];
        snprintf(head, sizeof head, "# after %s\n", p[i].name);
        if (!strstr(out, head))
            fail_msg("--dump-after=all printed no '%s'", head);
    }
    free(out), free(err);
    const char *a3[] = {"dump", model, "--dump-after=no-such-pass", NULL};
    assert_int_equal(tu_run_vitc(a3, &out, &err), 2);
    assert_non_null(strstr(err, "fuse-attention"));
    free(out), free(err);
    char near[4096];
    tu_path(near, sizeof near, "tests/data/fusion/near_softmax_not_last_axis.onnx");
    const char *a4[] = {"dump", near, "--explain-fusion", NULL};
    assert_int_equal(tu_run_vitc(a4, &out, &err), 0);
    print_message("%s", out);
    assert_non_null(strstr(out, "fuse-attention: node 'attn/Softmax' (Softmax): Softmax axis is 2, not the last axis"));
    free(out), free(err);
    const char *a5[] = {"dump", model, "--stage", "optimized", "--stats", NULL};
    assert_int_equal(tu_run_vitc(a5, &out, &err), 0);
    assert_non_null(strstr(out, "Attention 2\n"));
    assert_null(strstr(out, "Softmax"));
    free(out), free(err);
}

static int setup(void **state)
{
    (void)state;
    nfixtures = tu_fixtures(fixtures, 64);
    tu_seed(0x243f6a8885a308d3ull);
    return 0;
}

TU_MAIN(setup, NULL, test_linear_kernel_matches_a_loop_for_every_activation,
        test_linear_kernel_without_bias_or_residual, test_attention_kernel_packed_qkv_layout_matches_the_spec,
        test_attention_kernel_interleaved_layout_and_post_scale_match_the_spec,
        test_attention_with_a_wrong_width_is_a_shape_error,
        test_layernorm_decomposed_becomes_one_layernormalization,
        test_gelu_erf_after_matmul_becomes_linear_with_gelu, test_gemm_relu6_residual_becomes_one_linear,
        test_clip_to_5_is_not_relu6, test_einsum_attention_interleaved_with_scale_after_softmax,
        test_batchnorm_after_linear_folds_into_its_weights, test_patch_conv_becomes_crop_reshape_and_linear,
        test_view_round_trips_cancel_and_reshape_chains_collapse, test_full_slice_is_dropped_but_a_reversing_one_stays,
        test_gelu_spellings_with_other_groupings_fuse, test_constant_arithmetic_folds,
        test_dequantized_constant_weight_folds_into_a_linear,
        test_shape_arithmetic_with_truncating_div_and_float_pow_folds,
        test_nan_guard_folds_only_after_finite_logits, test_resize_of_a_constant_folds_and_at_its_own_size_is_dropped, test_unread_layernorm_statistics_are_dropped,
        test_tile_of_axes_of_size_1_becomes_expand, test_index_ops_on_constants_fold_and_size_follows_the_batch,
        test_pattern_and_near_miss_models_fuse_or_explain_why_not,
        test_fixtures_fuse_to_the_expected_graph_and_keep_their_outputs,
        test_fixtures_through_the_cpu_backend_match_pytorch, test_cli_dump_after_and_explain_fusion)
