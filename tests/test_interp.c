/* test_interp.c: the reference interpreter and the concrete-tensor helpers on
 * small hand-built graphs, for what ONNX's own node tests (Debian's onnx
 * 1.12) do not cover: Gelu (opset 20), the Einsum forms attention uses,
 * LayerNormalization over a non-last axis, BatchNormalization on (N, C, L),
 * Split's num_outputs, exact int64 Slice, Resize's antialias, axes,
 * keep_aspect_ratio_policy and half_pixel_symmetric (opsets 18 and 19),
 * half-type rounding, the errors a user sees (a bad Reshape, an input of the
 * wrong shape, an antialias filter too wide), and the quantized ops'
 * rounding, saturation, per-axis, blocked, per-row and per-column parameters. */
#include "testutil.h"

#include "ir/interp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* |got - want| <= atol + rtol |want| everywhere, printing the first miss. */
static void expect_close(const char *what, const ir_tensor *got, const double *want, int64_t n, double atol,
                         double rtol)
{
    assert_int_equal(ir_tensor_numel(got), n);
    for (int64_t i = 0; i < n; i++) {
        double x = ir_tensor_get(got, i);
        if (!(fabs(x - want[i]) <= atol + rtol * fabs(want[i])))
            fail_msg("%s: element %lld is %.9g, expected %.9g (|diff| %.3g > %.3g)", what, (long long)i, x, want[i],
                     fabs(x - want[i]), atol + rtol * fabs(want[i]));
    }
}

static void expect_dims(const char *what, const ir_tensor *t, int rank, const int64_t *dims)
{
    int ok = t->rank == rank;
    for (int i = 0; ok && i < rank; i++)
        ok = t->dims[i] == dims[i];
    if (!ok)
        fail_msg("%s: rank %d [%lld,%lld,%lld,...], expected rank %d [%lld,%lld,%lld,...]", what, t->rank,
                 (long long)(t->rank > 0 ? t->dims[0] : -1), (long long)(t->rank > 1 ? t->dims[1] : -1),
                 (long long)(t->rank > 2 ? t->dims[2] : -1), rank, (long long)(rank > 0 ? dims[0] : -1),
                 (long long)(rank > 1 ? dims[1] : -1), (long long)(rank > 2 ? dims[2] : -1));
}

/* Frees what a test ran: g, its nin inputs and its nout outputs. */
static void free_run(ir_graph *g, ir_tensor *in, int nin, ir_tensor *out, int nout)
{
    for (int i = 0; i < nin; i++)
        ir_tensor_free(&in[i]);
    for (int i = 0; i < nout; i++)
        ir_tensor_free(&out[i]);
    ir_graph_free(g);
}

/* ---- Gelu ---- */

static void test_gelu_exact_and_tanh_match_their_formulas(void **state)
{
    (void)state;
    ir_graph *g = tu_graph_new("test.onnx", 20);
    int64_t dims[1] = {121};
    int x = tu_input(g, "x", IR_F32, 1, dims), y1 = tu_value(g, "y_exact", IR_F32), y2 = tu_value(g, "y_tanh", IR_F32);
    ir_attr none = tu_str(IR_ATTR_APPROXIMATE, "none"), tanh_ = tu_str(IR_ATTR_APPROXIMATE, "tanh");
    tu_node_out(g, IR_OP_GELU, "gelu_exact", 1, &x, 1, &y1, 1, &none);
    tu_node_out(g, IR_OP_GELU, "gelu_tanh", 1, &x, 1, &y2, 1, &tanh_);
    tu_output(g, y1);
    tu_output(g, y2);
    float xs[121];
    double e1[121], e2[121];
    for (int i = 0; i < 121; i++) {
        xs[i] = (float)(i - 60) / 10.0f; /* -6 .. 6 */
        double v = xs[i];
        e1[i] = v * 0.5 * (1.0 + erf(v / sqrt(2.0)));
        e2[i] = 0.5 * v * (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) * (v + 0.044715 * pow(v, 3))));
    }
    ir_tensor in = tu_f32_tensor(1, dims, xs), out[2];
    tu_interpret_ok(g, &in, out);
    expect_close("Gelu approximate=none", &out[0], e1, 121, 1e-7, 1e-6);
    expect_close("Gelu approximate=tanh", &out[1], e2, 121, 1e-7, 1e-6);
    free_run(g, &in, 1, out, 2);
}

/* ---- Einsum ---- */

/* Runs a two-operand Einsum of a (rank 4) and b (rank 4). */
static ir_tensor run_einsum2(const char *eq, const int64_t *da, const int64_t *db, ir_tensor *a, ir_tensor *b)
{
    ir_graph *g = tu_graph_new("test.onnx", 17);
    int ins[2] = {tu_input(g, "a", IR_F32, 4, da), tu_input(g, "b", IR_F32, 4, db)}, y = tu_value(g, "y", IR_F32);
    ir_attr e = tu_str(IR_ATTR_EQUATION, eq);
    tu_node_out(g, IR_OP_EINSUM, "einsum", 2, ins, 1, &y, 1, &e);
    tu_output(g, y);
    assert_true(ir_interp_supports(g, &g->nodes[0]));
    *a = tu_f32_tensor(4, da, NULL);
    *b = tu_f32_tensor(4, db, NULL);
    ir_tensor in[2] = {*a, *b}, out;
    tu_interpret_ok(g, in, &out);
    ir_graph_free(g);
    return out;
}

static float at4(const ir_tensor *t, int64_t i, int64_t j, int64_t k, int64_t l)
{
    return (float)ir_tensor_get(t, ((i * t->dims[1] + j) * t->dims[2] + k) * t->dims[3] + l);
}

/* The attention Einsums, scores (a . b^T per batch and head) and values (a . b), against a naive loop. */
static void test_einsum_attention_scores_and_values_match_a_naive_loop(void **state)
{
    (void)state;
    enum { B = 2, H = 3 };
    static const struct {
        const char *equation;
        int P, L, Q;      /* a is [B,H,P,L], the output [B,H,P,Q] */
        int b_transposed; /* b is [B,H,Q,L] (scores), else [B,H,L,Q] (values) */
    } rows[] = {{"bhqd,bhkd->bhqk", 4, 6, 5, 1}, {"bhal,bhlv->bhav", 4, 5, 6, 0}};
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        const int P = rows[r].P, L = rows[r].L, Q = rows[r].Q, tb = rows[r].b_transposed;
        int64_t da[4] = {B, H, P, L}, db[4] = {B, H, tb ? Q : L, tb ? L : Q}, want_dims[4] = {B, H, P, Q};
        ir_tensor a, b, out = run_einsum2(rows[r].equation, da, db, &a, &b);
        expect_dims(rows[r].equation, &out, 4, want_dims);
        double want[B * H * 4 * 6];
        assert_true(P * Q <= 4 * 6);
        for (int i = 0; i < B; i++)
            for (int h = 0; h < H; h++)
                for (int p = 0; p < P; p++)
                    for (int q = 0; q < Q; q++) {
                        double s = 0;
                        for (int l = 0; l < L; l++)
                            s += (double)at4(&a, i, h, p, l) * (tb ? at4(&b, i, h, q, l) : at4(&b, i, h, l, q));
                        want[((i * H + h) * P + p) * Q + q] = s;
                    }
        expect_close(rows[r].equation, &out, want, B * H * P * Q, 1e-7, 1e-6);
        ir_tensor_free(&a);
        ir_tensor_free(&b);
        ir_tensor_free(&out);
    }
}

static void test_einsum_implicit_output_and_diagonal(void **state)
{
    (void)state;
    /* "ij,jk" (implicit: "->ik") is a matrix product; "ii->i" a diagonal. */
    ir_graph *g = tu_graph_new("test.onnx", 17);
    int64_t da[2] = {2, 3}, db[2] = {3, 2};
    int ins[2] = {tu_input(g, "a", IR_F32, 2, da), tu_input(g, "b", IR_F32, 2, db)};
    int y = tu_value(g, "y", IR_F32), diag = tu_value(g, "diag", IR_F32);
    ir_attr e1 = tu_str(IR_ATTR_EQUATION, "ij,jk"), e2 = tu_str(IR_ATTR_EQUATION, "ii->i");
    tu_node_out(g, IR_OP_EINSUM, "matmul", 2, ins, 1, &y, 1, &e1);
    tu_node_out(g, IR_OP_EINSUM, "diagonal", 1, &y, 1, &diag, 1, &e2);
    tu_output(g, y);
    tu_output(g, diag);
    float av[6] = {1, 2, 3, 4, 5, 6}, bv[6] = {7, 8, 9, 10, 11, 12};
    ir_tensor in[2] = {tu_f32_tensor(2, da, av), tu_f32_tensor(2, db, bv)}, out[2];
    tu_interpret_ok(g, in, out);
    double want[4] = {58, 64, 139, 154}, want_diag[2] = {58, 154};
    int64_t d22[2] = {2, 2}, d2[1] = {2};
    expect_dims("ij,jk", &out[0], 2, d22);
    expect_close("ij,jk", &out[0], want, 4, 0, 0);
    expect_dims("ii->i", &out[1], 1, d2);
    expect_close("ii->i", &out[1], want_diag, 2, 0, 0);
    free_run(g, in, 2, out, 2);
}

static void test_einsum_with_ellipsis_is_reported_unsupported(void **state)
{
    (void)state;
    ir_graph *g = tu_graph_new("test.onnx", 17);
    int64_t da[2] = {2, 3};
    int x = tu_input(g, "a", IR_F32, 2, da), y = tu_value(g, "y", IR_F32);
    ir_attr e = tu_str(IR_ATTR_EQUATION, "...ij->...ji");
    tu_node_out(g, IR_OP_EINSUM, "einsum_ellipsis", 1, &x, 1, &y, 1, &e);
    tu_output(g, y);
    assert_false(ir_interp_supports(g, &g->nodes[0]));
    ir_tensor in = tu_f32_tensor(2, da, NULL), out;
    char *msg;
    assert_int_equal(tu_interpret(g, &in, &out, &msg), VITC_BAD_INPUT);
    if (!strstr(msg, "einsum_ellipsis"))
        fail_msg("the message does not name the node: %s", msg);
    free(msg);
    free_run(g, &in, 1, NULL, 0);
}

/* ---- normalisations ---- */

static void test_layernorm_over_axis_1_of_a_rank3_input(void **state)
{
    (void)state;
    enum { N = 2, C = 3, L = 4 };
    ir_graph *g = tu_graph_new("test.onnx", 17);
    int64_t dx[3] = {N, C, L}, ds[2] = {C, L};
    int x = tu_input(g, "x", IR_F32, 3, dx), s = tu_input(g, "scale", IR_F32, 2, ds),
        b = tu_input(g, "bias", IR_F32, 2, ds);
    int ins[3] = {x, s, b}, outs[3] = {tu_value(g, "y", IR_F32), tu_value(g, "mean", IR_F32), tu_value(g, "inv_std", IR_F32)};
    ir_attr at[2] = {tu_int(IR_ATTR_AXIS, 1), tu_float(IR_ATTR_EPSILON, 1e-3f)};
    tu_node_out(g, IR_OP_LAYERNORM, "ln", 3, ins, 3, outs, 2, at);
    for (int i = 0; i < 3; i++)
        tu_output(g, outs[i]);
    ir_tensor in[3] = {tu_f32_tensor(3, dx, NULL), tu_f32_tensor(2, ds, NULL), tu_f32_tensor(2, ds, NULL)}, out[3];
    tu_interpret_ok(g, in, out);
    double want[N * C * L], wmean[N], winv[N];
    for (int n = 0; n < N; n++) {
        double mean = 0, var = 0;
        for (int j = 0; j < C * L; j++)
            mean += ir_tensor_get(&in[0], n * C * L + j);
        mean /= C * L;
        for (int j = 0; j < C * L; j++)
            var += pow(ir_tensor_get(&in[0], n * C * L + j) - mean, 2);
        var /= C * L;
        double inv = 1 / sqrt(var + (double)1e-3f);
        for (int j = 0; j < C * L; j++)
            want[n * C * L + j] =
                (ir_tensor_get(&in[0], n * C * L + j) - mean) * inv * ir_tensor_get(&in[1], j) + ir_tensor_get(&in[2], j);
        wmean[n] = mean;
        winv[n] = inv;
    }
    int64_t dstat[3] = {N, 1, 1};
    expect_dims("LayerNormalization Y", &out[0], 3, dx);
    expect_close("LayerNormalization Y", &out[0], want, N * C * L, 1e-6, 1e-6);
    expect_dims("LayerNormalization Mean", &out[1], 3, dstat);
    expect_close("LayerNormalization Mean", &out[1], wmean, N, 1e-7, 1e-6);
    expect_dims("LayerNormalization InvStdDev", &out[2], 3, dstat);
    expect_close("LayerNormalization InvStdDev", &out[2], winv, N, 1e-7, 1e-6);
    free_run(g, in, 3, out, 3);
}

static void test_batchnorm_inference_on_n_c_l(void **state)
{
    (void)state;
    enum { N = 2, C = 3, L = 5 };
    ir_graph *g = tu_graph_new("test.onnx", 15);
    int64_t dx[3] = {N, C, L}, dc[1] = {C};
    int ins[5] = {tu_input(g, "x", IR_F32, 3, dx), tu_input(g, "scale", IR_F32, 1, dc),
                  tu_input(g, "b", IR_F32, 1, dc), tu_input(g, "mean", IR_F32, 1, dc),
                  tu_input(g, "var", IR_F32, 1, dc)};
    int y = tu_value(g, "y", IR_F32);
    ir_attr eps = tu_float(IR_ATTR_EPSILON, 1e-2f);
    tu_node_out(g, IR_OP_BATCHNORM, "bn", 5, ins, 1, &y, 1, &eps);
    tu_output(g, y);
    float var[C] = {0.5f, 1.5f, 2.0f};
    ir_tensor in[5] = {tu_f32_tensor(3, dx, NULL), tu_f32_tensor(1, dc, NULL), tu_f32_tensor(1, dc, NULL),
                       tu_f32_tensor(1, dc, NULL), tu_f32_tensor(1, dc, var)},
              out;
    tu_interpret_ok(g, in, &out);
    double want[N * C * L];
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++)
            for (int l = 0; l < L; l++) {
                int i = (n * C + c) * L + l;
                want[i] = (ir_tensor_get(&in[0], i) - ir_tensor_get(&in[3], c)) /
                              sqrt(ir_tensor_get(&in[4], c) + (double)1e-2f) * ir_tensor_get(&in[1], c) +
                          ir_tensor_get(&in[2], c);
            }
    expect_dims("BatchNormalization", &out, 3, dx);
    expect_close("BatchNormalization", &out, want, N * C * L, 1e-6, 1e-6);
    free_run(g, in, 5, &out, 1);
}

/* ---- data movement ---- */

static void test_split_num_outputs_gives_equal_chunks_and_a_smaller_last(void **state)
{
    (void)state;
    ir_graph *g = tu_graph_new("test.onnx", 18);
    int64_t dx[2] = {2, 7};
    int x = tu_input(g, "x", IR_F32, 2, dx), outs[3] = {tu_value(g, "a", IR_F32), tu_value(g, "b", IR_F32), tu_value(g, "c", IR_F32)};
    ir_attr at[2] = {tu_int(IR_ATTR_AXIS, 1), tu_int(IR_ATTR_NUM_OUTPUTS, 3)};
    tu_node_out(g, IR_OP_SPLIT, "split", 1, &x, 3, outs, 2, at);
    for (int i = 0; i < 3; i++)
        tu_output(g, outs[i]);
    float xv[14];
    for (int i = 0; i < 14; i++)
        xv[i] = (float)i;
    ir_tensor in = tu_f32_tensor(2, dx, xv), out[3];
    tu_interpret_ok(g, &in, out);
    int64_t sizes[3] = {3, 3, 1}, first[3] = {0, 3, 6};
    for (int k = 0; k < 3; k++) {
        int64_t want_dims[2] = {2, sizes[k]};
        double want[6];
        for (int r = 0; r < 2; r++)
            for (int j = 0; j < sizes[k]; j++)
                want[r * sizes[k] + j] = r * 7 + first[k] + j;
        char what[32];
        snprintf(what, sizeof what, "Split output %d", k);
        expect_dims(what, &out[k], 2, want_dims);
        expect_close(what, &out[k], want, 2 * sizes[k], 0, 0);
    }
    free_run(g, &in, 1, out, 3);
}

static void test_slice_reverses_int64_exactly_with_extreme_ends(void **state)
{
    (void)state;
    /* starts INT64_MAX, ends INT64_MIN, step -1: the whole axis reversed. */
    ir_graph *g = tu_graph_new("test.onnx", 13);
    int64_t dx[1] = {4}, st[1] = {INT64_MAX}, en[1] = {INT64_MIN}, ax[1] = {0}, sp[1] = {-1};
    int ins[5] = {tu_input(g, "x", IR_I64, 1, dx), tu_const_ints(g, "starts", 1, st), tu_const_ints(g, "ends", 1, en),
                  tu_const_ints(g, "axes", 1, ax), tu_const_ints(g, "steps", 1, sp)};
    int y = ir_add_value(g, "y", IR_VAL_NODE, IR_I64);
    tu_node_out(g, IR_OP_SLICE, "reverse", 5, ins, 1, &y, 0, NULL);
    tu_output(g, y);
    int64_t vals[4] = {((int64_t)1 << 53) + 1, -3, INT64_MAX, INT64_MIN + 1};
    ir_tensor in, out;
    assert_int_equal(ir_tensor_alloc(&in, IR_I64, 1, dx), VITC_OK);
    memcpy(in.data, vals, sizeof vals);
    tu_interpret_ok(g, &in, &out);
    assert_int_equal(out.dtype, IR_I64);
    expect_dims("Slice reversed", &out, 1, dx);
    for (int i = 0; i < 4; i++)
        if (ir_tensor_get_i64(&out, i) != vals[3 - i])
            fail_msg("Slice reversed: element %d is %lld, expected %lld", i, (long long)ir_tensor_get_i64(&out, i),
                     (long long)vals[3 - i]);
    free_run(g, &in, 1, &out, 1);
}

/* ---- Resize ---- */

/* Each model of tests/data/resize/ (written by make_resize.py: antialias
 * down and up, linear and cubic, by sizes and by scales; axes;
 * keep_aspect_ratio_policy; half_pixel_symmetric) through import, shape
 * inference and the interpreter, against ONNX's reference resize code run in
 * double (which ONNX Runtime and onnx's ReferenceEvaluator match within
 * 3e-6, computing in float32). */
static void test_resize_antialias_axes_and_aspect_match_onnx_reference(void **state)
{
    (void)state;
    static const char *const cases[] = {"cubic_aa_down",   "cubic_aa_up",      "linear_aa_down",
                                        "linear_aa_up",    "cubic_aa_mixed",   "axes_not_larger",
                                        "axes_not_smaller", "axes_scales",     "half_pixel_symmetric"};
    ir_tensor x;
    tu_read_npy("tests/data/resize/table.npy", &x);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char rel[128];
        snprintf(rel, sizeof rel, "tests/data/resize/%s.onnx", cases[k]);
        ir_graph *g = tu_load_model(rel);
        snprintf(rel, sizeof rel, "tests/data/resize/%s.npy", cases[k]);
        ir_tensor want, out;
        tu_read_npy(rel, &want);
        assert_int_equal(want.dtype, IR_F64);
        const ir_value *y = &g->values[g->outputs[0]];
        int same = y->rank == want.rank;
        for (int i = 0; same && i < y->rank; i++)
            same = ir_dim_eval(y->dims[i], 1) == want.dims[i];
        if (!same) {
            char got[128];
            fail_msg("%s: shape inference says %s, the reference's output is [%lld,%lld,%lld,%lld]", cases[k],
                     ir_value_type_str(y, got, sizeof got), (long long)want.dims[0], (long long)want.dims[1],
                     (long long)want.dims[2], (long long)want.dims[3]);
        }
        tu_interpret_ok(g, &x, &out);
        expect_dims(cases[k], &out, want.rank, want.dims);
        expect_close(cases[k], &out, (const double *)want.data, ir_tensor_numel(&want), 1e-7, 1e-6);
        ir_tensor_free(&want);
        free_run(g, NULL, 0, &out, 1);
    }
    ir_tensor_free(&x);
}

/* ---- errors ---- */

static void test_reshape_with_wrong_element_count_is_bad_input_naming_the_node(void **state)
{
    (void)state;
    ir_graph *g = tu_graph_new("test.onnx", 17);
    int64_t dx[2] = {2, 3}, shape[2] = {4, 2};
    int ins[2] = {tu_input(g, "x", IR_F32, 2, dx), tu_const_ints(g, "shape", 2, shape)}, y = tu_value(g, "y", IR_F32);
    tu_node_out(g, IR_OP_RESHAPE, "my_reshape", 2, ins, 1, &y, 0, NULL);
    tu_output(g, y);
    ir_tensor in = tu_f32_tensor(2, dx, NULL), out;
    char *msg;
    int st = tu_interpret(g, &in, &out, &msg);
    if (st != VITC_BAD_INPUT || !strstr(msg, "node 'my_reshape' (Reshape)") || !strstr(msg, "6 elements") ||
        !strstr(msg, "8 elements"))
        fail_msg("status %d (expected %d), message: %s", st, VITC_BAD_INPUT, msg);
    assert_null(out.data);
    free(msg);
    free_run(g, &in, 1, NULL, 0);
}

/* Resize with antialias reads about 2 / scale taps per output element
 * (linear): shrinking 10000 elements to 4 is 5000 taps, more than the
 * interpreter takes, and it says so; to 5 (4000 taps) it runs, each output
 * element the mean of the inputs within 2000 of its centre weighted by a
 * triangle (exclude_outside: the edges are not read again past the ends).
 * Antialias with mode nearest is refused, with the reason. */
static void test_resize_antialias_bounds_its_taps_and_refuses_nearest(void **state)
{
    (void)state;
    int64_t dx[2] = {1, 10000};
    for (int64_t to = 4; to <= 5; to++) {
        ir_graph *g = tu_graph_new("test.onnx", 18);
        int64_t sizes[2] = {1, to};
        int ins[4] = {tu_input(g, "x", IR_F32, 2, dx), -1, -1, tu_const_ints(g, "sizes", 2, sizes)};
        int y = tu_value(g, "y", IR_F32);
        ir_attr at[3] = {tu_str(IR_ATTR_MODE, "linear"), tu_int(IR_ATTR_ANTIALIAS, 1),
                         tu_int(IR_ATTR_EXCLUDE_OUTSIDE, 1)};
        tu_node_out(g, IR_OP_RESIZE, "shrink", 4, ins, 1, &y, 3, at);
        tu_output(g, y);
        tu_check_graph(g, "shrink");
        float *v = malloc(sizeof(float) * 10000);
        for (int i = 0; i < 10000; i++)
            v[i] = (float)(i % 7);
        ir_tensor in = tu_f32_tensor(2, dx, v), out = {0};
        free(v);
        char *msg;
        int st = tu_interpret(g, &in, &out, &msg);
        if (to == 4) {
            if (st != VITC_BAD_INPUT || !strstr(msg, "node 'shrink' (Resize)") ||
                !strstr(msg, "antialias shrinks axis 1 to 0.0004 of its length: its filter would read 5000 input "
                             "elements per output element, more than 4096"))
                fail_msg("status %d (expected %d), message: %s", st, VITC_BAD_INPUT, msg);
        } else {
            if (st != VITC_OK)
                fail_msg("status %d: %s", st, msg);
            double want[5];
            for (int j = 0; j < 5; j++) { /* a triangle 2000 wide on each side of 2000 j + 999.5: the window's mean */
                double sum = 0, wsum = 0;
                for (int i = 0; i < 10000; i++) {
                    double w = 1 - fabs(((double)i - (2000.0 * j + 999.5)) / 2000.0);
                    if (w > 0)
                        sum += w * (i % 7), wsum += w;
                }
                want[j] = sum / wsum;
            }
            expect_close("shrunk 2000 times", &out, want, 5, 1e-9, 1e-6);
        }
        free(msg);
        free_run(g, &in, 1, &out, st == VITC_OK);
    }

    ir_graph *g = tu_graph_new("test.onnx", 18);
    int64_t scales_dims[1] = {2};
    float scales[2] = {1, 0.5f};
    int ins[3] = {tu_input(g, "x", IR_F32, 2, dx), -1, tu_const_f32(g, "scales", 1, scales_dims, scales)};
    int y = tu_value(g, "y", IR_F32);
    ir_attr at[2] = {tu_str(IR_ATTR_MODE, "nearest"), tu_int(IR_ATTR_ANTIALIAS, 1)};
    tu_node_out(g, IR_OP_RESIZE, "nearest_aa", 3, ins, 1, &y, 2, at);
    tu_output(g, y);
    char why[200] = "";
    assert_false(ir_interp_supports(g, &g->nodes[0]));
    assert_false(ir_resize_supported(&g->nodes[0], why, sizeof why));
    if (!strstr(why, "antialias applies to modes linear and cubic, not nearest"))
        fail_msg("the reason given: '%s'", why);
    ir_graph_free(g);
}

/* x: f32[B,3,4] -> Relu -> y, for the input checks. */
static ir_graph *batched_relu(void)
{
    ir_graph *g = tu_graph_new("test.onnx", 17);
    int64_t dx[3] = {-1, 3, 4};
    int x = tu_input(g, "x", IR_F32, 3, dx), y = tu_value(g, "y", IR_F32);
    tu_node_out(g, IR_OP_RELU, "relu", 1, &x, 1, &y, 0, NULL);
    tu_output(g, y);
    return g;
}

static void test_input_of_the_wrong_shape_is_bad_input(void **state)
{
    (void)state;
    ir_graph *g = batched_relu();
    int64_t dx[3] = {2, 3, 5};
    ir_tensor in = tu_f32_tensor(3, dx, NULL), out;
    char *msg;
    int st = tu_interpret(g, &in, &out, &msg);
    if (st != VITC_BAD_INPUT || !strstr(msg, "input 'x': expected f32[B,3,4], got f32[2,3,5]"))
        fail_msg("status %d (expected %d), message: %s", st, VITC_BAD_INPUT, msg);
    free(msg);
    ir_tensor_free(&in);
    ir_tensor in64;
    assert_int_equal(ir_tensor_alloc(&in64, IR_F64, 3, (int64_t[3]){2, 3, 4}), VITC_OK);
    st = tu_interpret(g, &in64, &out, &msg);
    if (st != VITC_BAD_INPUT || !strstr(msg, "expected f32[B,3,4], got f64[2,3,4]"))
        fail_msg("status %d (expected %d), message: %s", st, VITC_BAD_INPUT, msg);
    free(msg);
    ir_tensor_free(&in64);
    ir_graph_free(g);
}

/* Counts the outputs it is shown (Relu's only output, 'y'). */
static void count_outputs(void *ctx, const ir_graph *g, int node, int value, const ir_tensor *t)
{
    (void)t;
    assert_int_equal(node, 0);
    assert_string_equal(g->values[value].name, "y");
    ++*(int *)ctx;
}

static void test_batch_comes_from_the_input_and_the_observer_sees_each_output(void **state)
{
    (void)state;
    ir_graph *g = batched_relu();
    int64_t dx[3] = {5, 3, 4};
    ir_tensor in = tu_f32_tensor(3, dx, NULL), out;
    vitc_diag d;
    vitc_diag_init(&d, "test.onnx");
    int seen = 0;
    assert_int_equal(ir_interpret(g, &in, &out, count_outputs, &seen, &d), VITC_OK);
    assert_int_equal(seen, 1);
    expect_dims("Relu at batch 5", &out, 3, dx);
    for (int64_t i = 0; i < 60; i++) {
        double x = ir_tensor_get(&in, i), y = ir_tensor_get(&out, i);
        if (y != (x < 0 ? 0 : x))
            fail_msg("Relu element %lld: %g -> %g", (long long)i, x, y);
    }
    free_run(g, &in, 1, &out, 1);
}

/* ---- tensor helpers ---- */

static void test_half_conversions_round_to_nearest_even(void **state)
{
    (void)state;
    static const struct {
        float f;
        uint16_t h;
    } f16[] = {
        {1.0f, 0x3c00},           {-2.0f, 0xc000},           {65504.0f, 0x7bff},
        {65519.0f, 0x7bff},       {65520.0f, 0x7c00},        {1e10f, 0x7c00},
        {0x1p-24f, 0x0001},       {0x1p-25f, 0x0000},        {0x1.8p-25f, 0x0001},
        {0x1p-14f, 0x0400},       {1.0f + 0x1p-11f, 0x3c00}, {1.0f + 0x3p-11f, 0x3c02},
        {-0.0f, 0x8000},          {INFINITY, 0x7c00},        {0x1.ffep-15f, 0x0400}, /* a tie: rounds to the even smallest normal */
    };
    for (size_t i = 0; i < sizeof f16 / sizeof f16[0]; i++)
        if (ir_f32_to_f16(f16[i].f) != f16[i].h)
            fail_msg("f32 %a -> f16 0x%04x, expected 0x%04x", f16[i].f, ir_f32_to_f16(f16[i].f), f16[i].h);
    static const struct {
        float f;
        uint16_t h;
    } bf16[] = {
        {1.0f, 0x3f80}, {1.0f + 0x1p-8f, 0x3f80}, {1.0f + 0x3p-8f, 0x3f82}, {-3.0f, 0xc040}, {0x1.fffffep127f, 0x7f80},
    };
    for (size_t i = 0; i < sizeof bf16 / sizeof bf16[0]; i++)
        if (ir_f32_to_bf16(bf16[i].f) != bf16[i].h)
            fail_msg("f32 %a -> bf16 0x%04x, expected 0x%04x", bf16[i].f, ir_f32_to_bf16(bf16[i].f), bf16[i].h);
    uint16_t nan16 = ir_f32_to_f16(NAN), nanb = ir_f32_to_bf16(NAN);
    if ((nan16 & 0x7c00) != 0x7c00 || !(nan16 & 0x3ff) || !isnan(ir_f16_to_f32(nan16)))
        fail_msg("NaN -> f16 0x%04x is not a NaN", nan16);
    if (!isnan(ir_bf16_to_f32(nanb)))
        fail_msg("NaN -> bf16 0x%04x is not a NaN", nanb);
    /* Every finite half value survives the round trip through f32. */
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) != 0x7c00 && ir_f32_to_f16(ir_f16_to_f32((uint16_t)h)) != h)
            fail_msg("f16 0x%04x -> %a -> 0x%04x", h, ir_f16_to_f32((uint16_t)h), ir_f32_to_f16(ir_f16_to_f32((uint16_t)h)));
        if ((h & 0x7f80) != 0x7f80 && ir_f32_to_bf16(ir_bf16_to_f32((uint16_t)h)) != h)
            fail_msg("bf16 0x%04x -> %a -> 0x%04x", h, ir_bf16_to_f32((uint16_t)h),
                     ir_f32_to_bf16(ir_bf16_to_f32((uint16_t)h)));
    }
}

static void test_tensor_alloc_refuses_huge_or_overflowing_shapes(void **state)
{
    (void)state;
    ir_tensor t;
    int64_t huge[2] = {1 << 20, 1 << 20}, ovf[3] = {INT64_MAX / 2, 3, 1}, neg[1] = {-1};
    assert_int_equal(ir_tensor_alloc(&t, IR_F32, 2, huge), VITC_BAD_INPUT);
    assert_int_equal(ir_tensor_alloc(&t, IR_F32, 3, ovf), VITC_BAD_INPUT);
    assert_int_equal(ir_tensor_alloc(&t, IR_F32, 1, neg), VITC_BAD_INPUT);
    int64_t ok[2] = {3, 0};
    assert_int_equal(ir_tensor_alloc(&t, IR_F16, 2, ok), VITC_OK);
    assert_int_equal(ir_tensor_numel(&t), 0);
    assert_int_equal(ir_tensor_nbytes(&t), 0);
    ir_tensor_free(&t);
}

static void test_tensor_get_set_every_dtype_and_rel_error(void **state)
{
    (void)state;
    int64_t dims[1] = {3};
    for (int dt = 0; dt < IR_DTYPE_COUNT; dt++) {
        ir_tensor t;
        assert_int_equal(ir_tensor_alloc(&t, (ir_dtype)dt, 1, dims), VITC_OK);
        ir_tensor_set(&t, 0, 1.0);
        ir_tensor_set_i64(&t, 1, 1);
        if (ir_tensor_get(&t, 0) != 1.0 || ir_tensor_get_i64(&t, 1) != 1 || ir_tensor_get(&t, 2) != 0)
            fail_msg("%s: got %g, %lld, %g; expected 1, 1, 0", ir_dtype_name((ir_dtype)dt), ir_tensor_get(&t, 0),
                     (long long)ir_tensor_get_i64(&t, 1), ir_tensor_get(&t, 2));
        ir_tensor_free(&t);
    }
    ir_tensor a, b;
    assert_int_equal(ir_tensor_alloc(&a, IR_I8, 1, dims), VITC_OK);
    ir_tensor_set_i64(&a, 0, 300); /* wraps, as numpy does */
    ir_tensor_set(&a, 1, -2.7);    /* truncates toward zero */
    assert_int_equal(ir_tensor_get_i64(&a, 0), 44);
    assert_int_equal(ir_tensor_get_i64(&a, 1), -2);
    ir_tensor_free(&a);
    float av[3] = {1, 2, 3.5f}, bv[3] = {1, 2, 4};
    a = tu_f32_tensor(1, dims, av);
    b = tu_f32_tensor(1, dims, bv);
    double e = ir_rel_error(&a, &b);
    if (e != 0.125)
        fail_msg("rel error %g, expected 0.125", e);
    ir_tensor_set(&a, 0, NAN);
    e = ir_rel_error(&a, &b);
    if (!isinf(e))
        fail_msg("rel error with a NaN is %g, expected inf", e);
    ir_tensor_free(&a);
    ir_tensor_free(&b);
}

/* ---- quantized ONNX ---- */

/* A constant of any dtype holding vals. */
static int qconst(ir_graph *g, const char *name, ir_dtype dt, int rank, const int64_t *dims, const double *vals)
{
    ir_tensor t;
    assert_int_equal(ir_tensor_alloc(&t, dt, rank, dims), VITC_OK);
    for (int64_t i = 0; i < ir_tensor_numel(&t); i++)
        ir_tensor_set(&t, i, vals[i]);
    int id = ir_add_const(g, name, dt, rank, dims, t.data, ir_tensor_nbytes(&t));
    assert_true(id >= 0);
    ir_tensor_free(&t);
    return id;
}

static float f32_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void expect_ints(const char *what, const ir_tensor *t, ir_dtype dt, const int64_t *want, int64_t n)
{
    assert_int_equal(t->dtype, dt);
    assert_int_equal(ir_tensor_numel(t), n);
    for (int64_t i = 0; i < n; i++)
        if (ir_tensor_get_i64(t, i) != want[i])
            fail_msg("%s: element %lld is %lld, expected %lld", what, (long long)i, (long long)ir_tensor_get_i64(t, i),
                     (long long)want[i]);
}

/* QuantizeLinear to u8 and i8: ties to even, saturation, NaN to the type's
 * minimum; the quotient rounded to f32 before it is rounded to an integer
 * (0.6519815f / 0.26079258f is 2.5 in f32, 2.50000006 exactly: 2, as ONNX's
 * reference and ONNX Runtime give, where a division in double gives 3). */
static void test_quantize_rounds_ties_to_even_in_f32_and_saturates(void **state)
{
    (void)state;
    ir_graph *g = tu_graph_new("test.onnx", 13);
    int64_t dx[1] = {13};
    double one = 1, zero = 0, tie_s = f32_bits(1048938139u);
    int x = tu_input(g, "x", IR_F32, 1, dx), s = qconst(g, "s", IR_F32, 0, NULL, &one);
    int zu = qconst(g, "zu", IR_U8, 0, NULL, &zero), zi = qconst(g, "zi", IR_I8, 0, NULL, &zero);
    int yu = tu_node(g, IR_OP_QUANTIZE_LINEAR, "qu", IR_U8, 3, TU_IN(x, s, zu), 0, NULL);
    int yi = tu_node(g, IR_OP_QUANTIZE_LINEAR, "qi", IR_I8, 3, TU_IN(x, s, zi), 0, NULL);
    int yd = tu_node(g, IR_OP_QUANTIZE_LINEAR, "qdefault", IR_U8, 2, TU_IN(x, s), 0, NULL);
    int yt = tu_node(g, IR_OP_QUANTIZE_LINEAR, "qtie", IR_U8, 2, TU_IN(x, qconst(g, "st", IR_F32, 0, NULL, &tie_s)), 0, NULL);
    tu_output(g, yu);
    tu_output(g, yi);
    tu_output(g, yd);
    tu_output(g, yt);
    float xv[13] = {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 300, -300, 127.5f, NAN, 1e30f, -0.49999997f,
                    f32_bits(1059514434u)};
    ir_tensor in = tu_f32_tensor(1, dx, xv), out[4];
    tu_interpret_ok(g, &in, out);
    int64_t want_u[13] = {0, 2, 2, 0, 0, 0, 255, 0, 128, 0, 255, 0, 1};
    int64_t want_i[13] = {0, 2, 2, 0, -2, -2, 127, -128, 127, -128, 127, 0, 1};
    expect_ints("QuantizeLinear to u8", &out[0], IR_U8, want_u, 13);
    expect_ints("QuantizeLinear to i8", &out[1], IR_I8, want_i, 13);
    expect_ints("QuantizeLinear without a zero point (u8)", &out[2], IR_U8, want_u, 13);
    assert_int_equal(ir_tensor_get_i64(&out[3], 12), 2);
    free_run(g, &in, 1, out, 4);
}

/* Per-axis and blocked scales and zero points, Q then DQ, against the
 * formula written out here. */
static void test_quantize_dequantize_per_axis_and_blocked(void **state)
{
    (void)state;
    ir_graph *g = tu_graph_new("test.onnx", 21);
    int64_t dx[3] = {2, 3, 4}, d3[1] = {3}, db[3] = {2, 3, 2};
    double sc[3] = {0.05, 0.1, 0.2}, zp[3] = {-3, 0, 7}, sb[12], zb[12];
    for (int i = 0; i < 12; i++)
        sb[i] = 0.01 * (i + 1), zb[i] = (i % 5) * 10 + 100;
    int x = tu_input(g, "x", IR_F32, 3, dx);
    int s = qconst(g, "s", IR_F32, 1, d3, sc), z = qconst(g, "z", IR_I8, 1, d3, zp);
    int q = tu_node(g, IR_OP_QUANTIZE_LINEAR, "q", IR_I8, 3, TU_IN(x, s, z), 0, NULL);
    int dq = tu_node(g, IR_OP_DEQUANTIZE_LINEAR, "dq", IR_F32, 3, TU_IN(q, s, z), 0, NULL);
    ir_attr blk[2] = {tu_int(IR_ATTR_AXIS, 2), tu_int(IR_ATTR_BLOCK_SIZE, 2)};
    int s2 = qconst(g, "sb", IR_F32, 3, db, sb), z2 = qconst(g, "zb", IR_U8, 3, db, zb);
    int qb = tu_node(g, IR_OP_QUANTIZE_LINEAR, "qb", IR_U8, 3, TU_IN(x, s2, z2), 2, blk);
    int dqb = tu_node(g, IR_OP_DEQUANTIZE_LINEAR, "dqb", IR_F32, 3, TU_IN(qb, s2, z2), 2, blk);
    tu_output(g, q);
    tu_output(g, dq);
    tu_output(g, qb);
    tu_output(g, dqb);
    ir_tensor in = tu_f32_tensor(3, dx, NULL), out[4];
    tu_interpret_ok(g, &in, out);
    int64_t wq[24], wqb[24];
    double wdq[24], wdqb[24];
    for (int i = 0; i < 24; i++) {
        int c = i / 4 % 3, k = (i / 12 * 3 + c) * 2 + i % 4 / 2; /* per axis 1; blocks of 2 along axis 2 */
        float xv = (float)ir_tensor_get(&in, i);
        double r = nearbyint((float)(xv / (float)sc[c])) + zp[c];
        wq[i] = (int64_t)(r < -128 ? -128 : r > 127 ? 127 : r);
        wdq[i] = (float)((float)(wq[i] - zp[c]) * (float)sc[c]);
        double rb = nearbyint((float)(xv / (float)sb[k])) + zb[k];
        wqb[i] = (int64_t)(rb < 0 ? 0 : rb > 255 ? 255 : rb);
        wdqb[i] = (float)((float)(wqb[i] - zb[k]) * (float)sb[k]);
    }
    expect_ints("QuantizeLinear per axis", &out[0], IR_I8, wq, 24);
    expect_close("DequantizeLinear per axis", &out[1], wdq, 24, 0, 0);
    expect_ints("QuantizeLinear blocked", &out[2], IR_U8, wqb, 24);
    expect_close("DequantizeLinear blocked", &out[3], wdqb, 24, 0, 0);
    free_run(g, &in, 1, out, 4);
}

/* DynamicQuantizeLinear: the range always holds 0; an all-zero input gets
 * scale 1 and zero point 0 (ONNX Runtime's choice: the spec divides by 0). */
static void test_dynamic_quantize_range_and_all_zeros(void **state)
{
    (void)state;
    ir_graph *g = tu_graph_new("test.onnx", 13);
    int64_t dx[1] = {5};
    int x = tu_input(g, "x", IR_F32, 1, dx);
    int outs[3] = {tu_value(g, "y", IR_U8), tu_value(g, "y_scale", IR_F32), tu_value(g, "y_zp", IR_U8)};
    tu_node_out(g, IR_OP_DYNAMIC_QUANTIZE_LINEAR, "dql", 1, &x, 3, outs, 0, NULL);
    for (int k = 0; k < 3; k++)
        tu_output(g, outs[k]);
    float pos[5] = {1, 2, 3, 0.5f, 2.5f}, zeros[5] = {0, 0, 0, 0, 0}, mixed[5] = {-1, 0, 1, 2, 3};
    ir_tensor in = tu_f32_tensor(1, dx, pos), out[3];
    tu_interpret_ok(g, &in, out);
    int64_t want_pos[5] = {85, 170, 255, 42, 212}; /* scale 3/255, zero point 0 */
    expect_ints("DynamicQuantizeLinear y", &out[0], IR_U8, want_pos, 5);
    assert_true(ir_tensor_get(&out[1], 0) == (double)(3.0f / 255.0f));
    assert_int_equal(ir_tensor_get_i64(&out[2], 0), 0);
    for (int k = 0; k < 3; k++)
        ir_tensor_free(&out[k]);
    ir_tensor_free(&in);
    in = tu_f32_tensor(1, dx, zeros);
    tu_interpret_ok(g, &in, out);
    int64_t want_zero[5] = {0, 0, 0, 0, 0};
    expect_ints("DynamicQuantizeLinear y of zeros", &out[0], IR_U8, want_zero, 5);
    assert_true(ir_tensor_get(&out[1], 0) == 1.0);
    assert_int_equal(ir_tensor_get_i64(&out[2], 0), 0);
    for (int k = 0; k < 3; k++)
        ir_tensor_free(&out[k]);
    ir_tensor_free(&in);
    in = tu_f32_tensor(1, dx, mixed);
    tu_interpret_ok(g, &in, out);
    /* scale 4/255 (f32); zero point round(63.75) = 64; 2 / scale is 127.49999 in f32, so 2 gives 191,
     * as in ONNX Runtime */
    int64_t want_mixed[5] = {0, 64, 128, 191, 255};
    expect_ints("DynamicQuantizeLinear y of [-1, 3]", &out[0], IR_U8, want_mixed, 5);
    assert_int_equal(ir_tensor_get_i64(&out[2], 0), 64);
    free_run(g, &in, 1, out, 3);
}

/* MatMulInteger with zero points per row of A and per column of B, and
 * QLinearMatMul with per-column scales, against loops written here. */
static void test_integer_matmuls_with_per_row_and_per_column_parameters(void **state)
{
    (void)state;
    ir_graph *g = tu_graph_new("test.onnx", 21);
    enum { M = 3, K = 5, N = 4 };
    int64_t da[2] = {M, K}, db[2] = {K, N}, dm[1] = {M}, dn[1] = {N};
    double bv[K * N], azp[M] = {1, 128, 255}, bzp[N] = {0, -1, 5, -128}, bs[N] = {0.5, 0.25, 0.125, 2};
    double as = 0.02, ys = 0.7, yzp = 3;
    for (int i = 0; i < K * N; i++)
        bv[i] = (i * 37) % 256 - 128;
    int a = tu_input(g, "a", IR_U8, 2, da), b = qconst(g, "b", IR_I8, 2, db, bv);
    int za = qconst(g, "azp", IR_U8, 1, dm, azp), zb = qconst(g, "bzp", IR_I8, 1, dn, bzp);
    int y = tu_node(g, IR_OP_MATMUL_INTEGER, "mmi", IR_I32, 4, TU_IN(a, b, za, zb), 0, NULL);
    int q = tu_node(g, IR_OP_QLINEAR_MATMUL, "qmm", IR_U8, 8,
                    TU_IN(a, qconst(g, "as", IR_F32, 0, NULL, &as), qconst(g, "azp0", IR_U8, 0, NULL, &azp[1]), b,
                          qconst(g, "bs", IR_F32, 1, dn, bs), zb, qconst(g, "ys", IR_F32, 0, NULL, &ys),
                          qconst(g, "yzp", IR_U8, 0, NULL, &yzp)),
                    0, NULL);
    tu_output(g, y);
    tu_output(g, q);
    ir_tensor in, out[2];
    assert_int_equal(ir_tensor_alloc(&in, IR_U8, 2, da), VITC_OK);
    for (int i = 0; i < M * K; i++)
        ir_tensor_set_i64(&in, i, (i * 91 + 7) % 256);
    tu_interpret_ok(g, &in, out);
    int64_t want[M * N], wantq[M * N];
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            int64_t acc = 0, accq = 0;
            for (int k = 0; k < K; k++) {
                acc += (ir_tensor_get_i64(&in, i * K + k) - (int64_t)azp[i]) * ((int64_t)bv[k * N + j] - (int64_t)bzp[j]);
                accq += (ir_tensor_get_i64(&in, i * K + k) - (int64_t)azp[1]) * ((int64_t)bv[k * N + j] - (int64_t)bzp[j]);
            }
            want[i * N + j] = acc;
            double r = nearbyint((double)accq * (float)((float)(as * (float)bs[j]) / (float)ys)) + yzp;
            wantq[i * N + j] = (int64_t)(r < 0 ? 0 : r > 255 ? 255 : r);
        }
    expect_ints("MatMulInteger", &out[0], IR_I32, want, M * N);
    expect_ints("QLinearMatMul", &out[1], IR_U8, wantq, M * N);
    free_run(g, &in, 1, out, 2);
}

/* A zero point per axis whose count is not the axis's size is refused by
 * shape inference, naming the node. */
static void test_quantize_with_a_mismatched_scale_is_refused(void **state)
{
    (void)state;
    ir_graph *g = tu_graph_new("test.onnx", 13);
    int64_t dx[2] = {2, 3}, d4[1] = {4};
    double sc[4] = {1, 1, 1, 1};
    int x = tu_input(g, "x", IR_F32, 2, dx);
    tu_output(g, tu_node(g, IR_OP_QUANTIZE_LINEAR, "my_q", IR_U8, 2, TU_IN(x, qconst(g, "s", IR_F32, 1, d4, sc)), 0, NULL));
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    vitc_diag d;
    vitc_diag_init(&d, "test.onnx");
    d.out = mem;
    assert_int_equal(ir_infer_shapes(g, &d), VITC_BAD_INPUT);
    fclose(mem);
    if (!strstr(text, "my_q") || !strstr(text, "one per element of axis 1 (3), not 4"))
        fail_msg("unexpected message: %s", text);
    free(text);
    ir_graph_free(g);
}

static int setup(void **state)
{
    (void)state;
    tu_seed(0x9e3779b97f4a7c15ull);
    return 0;
}

TU_MAIN(setup, NULL, test_gelu_exact_and_tanh_match_their_formulas,
        test_einsum_attention_scores_and_values_match_a_naive_loop, test_einsum_implicit_output_and_diagonal,
        test_einsum_with_ellipsis_is_reported_unsupported, test_layernorm_over_axis_1_of_a_rank3_input,
        test_batchnorm_inference_on_n_c_l, test_split_num_outputs_gives_equal_chunks_and_a_smaller_last,
        test_slice_reverses_int64_exactly_with_extreme_ends, test_resize_antialias_axes_and_aspect_match_onnx_reference,
        test_reshape_with_wrong_element_count_is_bad_input_naming_the_node,
        test_resize_antialias_bounds_its_taps_and_refuses_nearest,
        test_input_of_the_wrong_shape_is_bad_input,
        test_batch_comes_from_the_input_and_the_observer_sees_each_output,
        test_half_conversions_round_to_nearest_even, test_tensor_alloc_refuses_huge_or_overflowing_shapes,
        test_tensor_get_set_every_dtype_and_rel_error, test_quantize_rounds_ties_to_even_in_f32_and_saturates,
        test_quantize_dequantize_per_axis_and_blocked, test_dynamic_quantize_range_and_all_zeros,
        test_integer_matmuls_with_per_row_and_per_column_parameters, test_quantize_with_a_mismatched_scale_is_refused)
