/* linear.c: fuse-linear, a matrix product with a constant weight becomes a
 * Linear node (ops.def), with its bias.
 *
 * TorchScript exports nn.Linear as MatMul(x, W^T-initializer) + Add(bias),
 * the dynamo exporter the same with the operands swapped in the Add, and
 * both use Gemm(transB=1) for rank-2 inputs.  Linear always takes W as
 * [K, N]; a transposed or alpha-scaled Gemm weight is rewritten as such. */
#include "passes/rewrite.h"

#include <stdlib.h>
#include <string.h>

/* The bias Add reading MatMul output y, if it adds a constant [N] (or
 * [1, .., 1, N]); its constant in *bias. */
static const ir_node *bias_add(const ir_graph *g, int y, int64_t N, int *bias)
{
    const ir_node *a = rw_only_user(g, y);
    if (!a || a->op != IR_OP_ADD)
        return NULL;
    int b = rw_other_input(a, y);
    if (b < 0 || b == y || !rw_is_const(g, b) || g->values[b].dtype != IR_F32)
        return NULL;
    const ir_value *bv = &g->values[b];
    if (bv->rank < 1 || bv->rank > g->values[y].rank || !ir_dim_eq(bv->dims[bv->rank - 1], ir_dim_const(N)) ||
        rw_numel(bv) != N)
        return NULL;
    *bias = b;
    return a;
}

/* A [N] constant with the data of bias (any shape of N elements), scaled. */
static int bias_vector(ir_graph *g, int bias, double scale, const char *name)
{
    const ir_value *bv = &g->values[bias];
    if (bv->rank == 1 && scale == 1)
        return bias;
    int64_t n;
    double *v = rw_const_f64(g, bias, &n);
    float *f = v ? malloc(sizeof(float) * (size_t)(n ? n : 1)) : NULL;
    int r = -1;
    if (f) {
        for (int64_t i = 0; i < n; i++)
            f[i] = (float)(v[i] * scale);
        r = rw_const_f32(g, name, "/bias", 1, &n, f);
    }
    free(v);
    free(f);
    return r;
}

/* W [K, N] for a Gemm weight B (transposed when transB) scaled by alpha. */
static int gemm_weight(ir_graph *g, int b, int trans, double alpha, const char *name)
{
    if (!trans && alpha == 1)
        return b;
    int64_t d[2], n;
    rw_static_dims(&g->values[b], d);
    int64_t K = trans ? d[1] : d[0], N = trans ? d[0] : d[1], dims[2] = {K, N};
    double *v = rw_const_f64(g, b, &n);
    float *f = v ? malloc(sizeof(float) * (size_t)(K * N > 0 ? K * N : 1)) : NULL;
    int r = -1;
    if (f) {
        for (int64_t k = 0; k < K; k++)
            for (int64_t j = 0; j < N; j++)
                f[k * N + j] = (float)(alpha * v[trans ? j * K + k : k * N + j]);
        r = rw_const_f32(g, name, "/weight", 2, dims, f);
    }
    free(v);
    free(f);
    return r;
}

typedef struct {
    const ir_node *add; /* the bias Add after a MatMul, or NULL */
    int bias;           /* its constant */
} linear_match;

#define MISS(...) return (snprintf(why, nwhy, __VA_ARGS__), -1)

/* linear = Add(MatMul(x, W), bias) | Add(bias, MatMul(x, W)) | MatMul(x, W)
 * with W a constant [K, N] and bias a constant of N elements. */
static int match_matmul(const ir_graph *g, const ir_node *n, void *mv, char *why, size_t nwhy)
{
    linear_match *m = mv;
    int x = n->inputs[0], w = n->inputs[1];
    if (!rw_is_const(g, w) || rw_is_const(g, x))
        return 0; /* a product of two computed tensors (attention) is not a Linear */
    const ir_value *wv = &g->values[w], *xv = &g->values[x];
    if (wv->rank != 2)
        MISS("the constant weight has rank %d, not 2", wv->rank);
    if (wv->dtype != IR_F32 || xv->dtype != IR_F32)
        MISS("only float32 products become Linear, this one is %s", ir_dtype_name(xv->dtype));
    if (xv->rank < 1)
        MISS("the input is a scalar");
    m->bias = -1;
    m->add = bias_add(g, n->outputs[0], wv->dims[1].k, &m->bias);
    return 1;
}

static int rewrite_matmul(ir_graph *g, int ni, const void *mv)
{
    const linear_match *m = mv;
    const ir_node *n = &g->nodes[ni], *root = m->add ? m->add : n;
    const char *name = rw_fused_name(g, n, root);
    ir_linear v = ir_linear_make(n->inputs[0], n->inputs[1], root->outputs[0]);
    ir_node_spec spec;
    if (m->add && (v.bias = bias_vector(g, m->bias, 1, name)) < 0)
        return -1;
    ir_linear_spec(&v, &spec);
    return rw_set_spec(g, rw_index(g, root), name, m->add ? "MatMul+Add" : "MatMul", &spec);
}

/* linear = Gemm(x, B, C) with B a constant, transA = 0, and C a constant of
 * N elements (or none): W = alpha * (transB ? B^T : B), bias = beta * C. */
static int match_gemm(const ir_graph *g, const ir_node *n, void *mv, char *why, size_t nwhy)
{
    (void)mv;
    int x = n->inputs[0], b = n->inputs[1], c = ir_input(n, 2);
    if (!rw_is_const(g, b) || rw_is_const(g, x))
        return 0;
    if (ir_attr_int(n, IR_ATTR_TRANS_A, 0))
        MISS("transA=1: the input is transposed");
    if (g->values[b].dtype != IR_F32 || g->values[x].dtype != IR_F32)
        MISS("only float32 products become Linear, this one is %s", ir_dtype_name(g->values[x].dtype));
    int64_t N = g->values[n->outputs[0]].dims[1].k;
    if (c >= 0 && (!rw_is_const(g, c) || g->values[c].dtype != IR_F32 || g->values[c].rank < 1 ||
                   rw_numel(&g->values[c]) != N ||
                   !ir_dim_eq(g->values[c].dims[g->values[c].rank - 1], ir_dim_const(N))))
        MISS("C is not a constant bias of %lld elements", (long long)N);
    return 1;
}

#undef MISS

static int rewrite_gemm(ir_graph *g, int ni, const void *mv)
{
    (void)mv;
    const ir_node *n = &g->nodes[ni];
    int x = n->inputs[0], b = n->inputs[1], c = ir_input(n, 2), tb = ir_attr_int(n, IR_ATTR_TRANS_B, 0) != 0;
    double alpha = ir_attr_float(n, IR_ATTR_ALPHA, 1.0f), beta = ir_attr_float(n, IR_ATTR_BETA, 1.0f);
    const char *name = n->name;
    ir_linear v = ir_linear_make(x, gemm_weight(g, b, tb, alpha, name), n->outputs[0]);
    ir_node_spec spec;
    if (v.w < 0 || (c >= 0 && beta != 0 && (v.bias = bias_vector(g, c, beta, name)) < 0))
        return -1;
    ir_linear_spec(&v, &spec);
    return rw_set_spec(g, ni, name, "Gemm", &spec);
}

static const rw_rule rules[] = {
    {.name = "matmul-add", .anchor = IR_OP_MATMUL, .size = sizeof(linear_match), .match = match_matmul,
     .rewrite = rewrite_matmul},
    {.name = "gemm", .anchor = IR_OP_GEMM, .match = match_gemm, .rewrite = rewrite_gemm},
};

int pass_fuse_linear(ir_graph *g, vitc_diag *d) { return RW_APPLY(g, rules, d); }
