/* cu_linear.c: products with a constant weight on the GPU: Linear (ops.def),
 * and MatMul or Gemm whose second operand is a constant matrix.
 *
 * The weight is converted at compile time to the GEMM's operand type (f16,
 * bf16, or f32 for tf32 and fp32), transposed to one row per output column
 * and zero-padded to the tiles (gemm.cuh), so that every tile load is in
 * bounds and 16-byte aligned.  Bias, activation and residual run in the
 * GEMM's epilogue.  fp16/bf16/tf32 use the tensor-core kernel with one of
 * two tiles, chosen per batch: 128 x 128 (8 warps) once the grid fills a
 * GPU of CU_GEMM_WAVE SMs, 64 x 64 (4 warps) below, so that small batches
 * still spread over the machine; fp32 uses the SIMT kernel. */
#include "codegen/cuda/cu_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CU_GEMM_WAVE 132 /* SMs of an H100 SXM: blocks that make one full wave */
#define CU_GEMM_NPAD 128 /* Wt rows: a multiple of every BN */

typedef struct {
    int x, w, trans_w, bias, res, act, out;
    float alpha, beta;  /* Gemm: out = alpha x W + beta bias */
    int64_t K, N, res_ld;
    cg_poly M;
} gemm_job;

typedef struct {
    int bm, bn, wm, wn, stages;
} tile;

static const tile TILE_L = {128, 128, 2, 4, 3}, TILE_S = {64, 64, 2, 2, 3};

static int is_f32_const(const ir_graph *g, int v) { return ir_value_is_plain_const(g, v) && g->values[v].dtype == IR_F32; }

/* The job for node n; 0 with the reason in why when it is not a constant-weight product. */
static int job_of(const ir_graph *g, const ir_node *n, gemm_job *j, char *why, size_t len)
{
    memset(j, 0, sizeof *j);
    j->bias = j->res = -1;
    j->alpha = j->beta = 1.0f;
    j->x = n->inputs[0];
    j->w = n->inputs[1];
    j->out = n->outputs[0];
    const ir_value *x = &g->values[j->x], *w = &g->values[j->w];
    if (!is_f32_const(g, j->w) || w->rank != 2) {
        snprintf(why, len, "its weight '%s' is not a constant f32 matrix", w->name);
        return 0;
    }
    switch (n->op) {
    case IR_OP_LINEAR:
        j->bias = ir_input(n, 2);
        j->res = ir_input(n, 3);
        j->act = (int)ir_attr_int(n, IR_ATTR_ACTIVATION, 0);
        break;
    case IR_OP_MATMUL:
        if (x->rank < 2) {
            snprintf(why, len, "MatMul of a vector");
            return 0;
        }
        break;
    case IR_OP_GEMM:
        if (ir_attr_int(n, IR_ATTR_TRANS_A, 0)) {
            snprintf(why, len, "Gemm with transA");
            return 0;
        }
        j->trans_w = (int)ir_attr_int(n, IR_ATTR_TRANS_B, 0);
        j->alpha = ir_attr_float(n, IR_ATTR_ALPHA, 1.0f);
        j->beta = ir_attr_float(n, IR_ATTR_BETA, 1.0f);
        j->bias = ir_input(n, 2);
        break;
    default:
        snprintf(why, len, "%s is not a product", ir_op_name(n->op));
        return 0;
    }
    if (x->kind == IR_VAL_CONST || (x->dtype != IR_F32 && x->dtype != IR_F16 && x->dtype != IR_BF16)) {
        snprintf(why, len, "its input '%s' is %s", x->name, x->kind == IR_VAL_CONST ? "a constant" : "not float");
        return 0;
    }
    j->K = w->dims[j->trans_w ? 1 : 0].k;
    j->N = w->dims[j->trans_w ? 0 : 1].k;
    if (x->rank < 1 || x->dims[x->rank - 1].e != 0 || x->dims[x->rank - 1].k != j->K) {
        snprintf(why, len, "its input's last axis is not the weight's %lld rows", (long long)j->K);
        return 0;
    }
    if (j->K < 1 || j->N < 1 || j->K > (1 << 24) || j->N > (1 << 24)) {
        snprintf(why, len, "a weight of %lld x %lld", (long long)j->K, (long long)j->N);
        return 0;
    }
    j->M = cg_poly_k(1);
    for (int i = 0; i + 1 < x->rank; i++)
        j->M = cg_poly_mul(j->M, cg_poly_dim(x->dims[i]));
    if (j->bias >= 0 && (!is_f32_const(g, j->bias) || ir_value_numel(&g->values[j->bias], 1) != j->N)) {
        snprintf(why, len, "its bias is not a constant f32 vector of %lld", (long long)j->N);
        return 0;
    }
    if (j->res >= 0) {
        const ir_value *r = &g->values[j->res];
        cg_poly rn = cg_poly_numel(r), on = cg_poly_mul(j->M, cg_poly_k(j->N));
        if (cg_poly_eq(rn, on))
            j->res_ld = j->N;
        else if (cg_poly_eq(rn, cg_poly_k(j->N)))
            j->res_ld = 0;
        else {
            snprintf(why, len, "its residual is neither the output's shape nor one row");
            return 0;
        }
        if (!cu_ctype(r->dtype)) {
            snprintf(why, len, "a residual of type %s", ir_dtype_name(r->dtype));
            return 0;
        }
    }
    if (j->act < 0 || j->act >= IR_ACT_COUNT) {
        snprintf(why, len, "activation %d", j->act);
        return 0;
    }
    if (j->M.bad) {
        snprintf(why, len, "its row count is beyond what the CUDA backend handles");
        return 0;
    }
    return 1;
}

int cu_linear_supports(const ir_graph *g, const ir_node *n, char *why, size_t len)
{
    gemm_job j;
    return job_of(g, n, &j, why, len);
}

void cu_pack_weight(const float *W, int64_t K, int64_t N, int64_t Kp, int64_t Np, ir_dtype t, void *out)
{
    size_t es = ir_dtype_size(t);
    memset(out, 0, (size_t)(Kp * Np) * es);
    for (int64_t k = 0; k < K; k++)
        for (int64_t n = 0; n < N; n++) {
            float v = W[k * N + n];
            size_t at = (size_t)(n * Kp + k);
            if (t == IR_F16)
                ((uint16_t *)out)[at] = ir_f32_to_f16(v);
            else if (t == IR_BF16)
                ((uint16_t *)out)[at] = ir_f32_to_bf16(v);
            else
                ((float *)out)[at] = v;
        }
}

static const char *act_name(int a)
{
    static const char *const names[5] = {"", "+gelu", "+gelu_tanh", "+relu", "+relu6"};
    return a >= 0 && a <= 4 ? names[a] : "+?";
}

/* Offset of the packed weight (and its padded sizes); -1 on error. */
static int64_t packed_weight(cu_ctx *c, int node, const gemm_job *j, ir_dtype t, int64_t Kp, int64_t Np)
{
    int cacheable = !j->trans_w && j->alpha == 1.0f;
    if (cacheable && c->gemm_w[j->w] >= 0)
        return c->gemm_w[j->w];
    const ir_value *w = &c->g->values[j->w];
    const float *src = w->data;
    float *tmp = NULL;
    if (j->trans_w || j->alpha != 1.0f) { /* as [K, N], scaled */
        tmp = malloc(sizeof(float) * (size_t)(j->K * j->N));
        if (!tmp)
            return cu_fail(c, VITC_INTERNAL, node, "out of memory"), -1;
        for (int64_t k = 0; k < j->K; k++)
            for (int64_t n = 0; n < j->N; n++)
                tmp[k * j->N + n] = j->alpha * (j->trans_w ? src[n * j->K + k] : src[k * j->N + n]);
        src = tmp;
    }
    void *p;
    int64_t off = cg_blob_reserve(&c->weights, (size_t)(Kp * Np) * ir_dtype_size(t), &p);
    if (off >= 0)
        cu_pack_weight(src, j->K, j->N, Kp, Np, t, p);
    else
        cu_fail(c, VITC_INTERNAL, node, "out of memory for the weights");
    free(tmp);
    if (cacheable)
        c->gemm_w[j->w] = off;
    return off;
}

/* Bias offset: the constant itself, or a copy scaled by Gemm's beta. */
static int64_t bias_offset(cu_ctx *c, int node, const gemm_job *j)
{
    if (j->beta == 1.0f)
        return cu_weights_of(c, j->bias);
    void *p;
    int64_t off = cg_blob_reserve(&c->weights, sizeof(float) * (size_t)j->N, &p);
    if (off < 0)
        return cu_fail(c, VITC_INTERNAL, node, "out of memory for the weights"), -1;
    const float *b = c->g->values[j->bias].data;
    for (int64_t n = 0; n < j->N; n++)
        ((float *)p)[n] = j->beta * b[n];
    return off;
}

/* The first batch from which the large tile fills a wave (max_batch + 1 if never). */
static int64_t large_from(const cu_ctx *c, const gemm_job *j)
{
    int64_t nt = (j->N + TILE_L.bn - 1) / TILE_L.bn, lo = 1, hi = c->max_batch + 1;
    while (lo < hi) { /* M grows with the batch: binary search */
        int64_t mid = lo + (hi - lo) / 2, m = cg_poly_eval(j->M, mid);
        if (m >= 0 && (m + TILE_L.bm - 1) / TILE_L.bm * nt >= CU_GEMM_WAVE)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

int cu_emit_linear(cu_ctx *c, int node)
{
    const ir_node *n = &c->g->nodes[node];
    gemm_job j;
    char why[256];
    if (!job_of(c->g, n, &j, why, sizeof why))
        return cu_fail(c, VITC_INTERNAL, node, "not a GEMM: %s", why);
    if (c->off[cu_root(c, j.out)] < 0)
        return VITC_OK; /* nobody reads it */
    ir_dtype wt = c->prec == CU_FP16 ? IR_F16 : c->prec == CU_BF16 ? IR_BF16 : IR_F32;
    int simt = c->prec == CU_FP32;
    int64_t bk = simt ? 16 : 64 / (int64_t)ir_dtype_size(wt);
    int64_t Kp = (j.K + bk - 1) / bk * bk, Np = (j.N + CU_GEMM_NPAD - 1) / CU_GEMM_NPAD * CU_GEMM_NPAD;
    int64_t woff = packed_weight(c, node, &j, wt, Kp, Np);
    int64_t boff = j.bias >= 0 ? bias_offset(c, node, &j) : 0;
    if (woff < 0 || boff < 0)
        return c->d->status;
    const char *ta = cu_ctype(cu_sdt(c, j.x)), *tw = cu_ctype(wt), *to = cu_ctype(cu_sdt(c, j.out));
    const char *tr = j.res >= 0 ? cu_ctype(cu_sdt(c, j.res)) : to;
    if (strcmp(ta, tw) != 0 || (simt && strcmp(to, tw) != 0))
        return cu_fail(c, VITC_INTERNAL, node, "GEMM operands stored as %s and %s, output %s", ta, tw, to);
    int vec_a = (j.K * (int64_t)ir_dtype_size(wt)) % 16 == 0;
    int64_t from_l = simt ? 1 : large_from(c, &j);
    for (int variant = 0; variant < (simt ? 1 : 2); variant++) {
        tile tl = variant == 0 ? TILE_S : TILE_L;
        int64_t lo = variant == 0 ? 1 : from_l, hi = variant == 0 ? from_l - 1 : c->max_batch;
        if (simt) {
            lo = 1;
            hi = c->max_batch;
        }
        if (lo > hi)
            continue;
        unsigned threads = simt ? 256u : (unsigned)(tl.wm * tl.wn * 32);
        unsigned smem = simt ? 2u * 16 * 68 * 4 : (unsigned)((tl.bm + tl.bn) * 80 * tl.stages);
        int bm = simt ? 64 : tl.bm, bn = simt ? 64 : tl.bn;
        cu_str t = {0};
        cu_str_add(&t, "VK_KERNEL(@, %u)\n{\n", threads);
        if (simt)
            cu_str_add(&t, "    vk::gemm_simt<%s, %d, %s, %s, %s>(", tw, j.act, j.bias >= 0 ? "true" : "false",
                       j.res >= 0 ? "true" : "false", tr);
        else
            cu_str_add(&t, "    vk::gemm_tc<%s, %d, %d, %d, %d, %d, %s, %d, %s, %s, %s, %s>(", tw, tl.bm, tl.bn, tl.wm,
                       tl.wn, tl.stages, vec_a ? "true" : "false", j.act, j.bias >= 0 ? "true" : "false",
                       j.res >= 0 ? "true" : "false", tr, to);
        cu_str_add(&t, "(const %s *)p.a[0], (const %s *)p.a[1], (const float *)p.a[2], (const %s *)p.a[3], (%s *)p.a[4],"
                       "\n        (vk_i64)p.a[5], %lld, %lld, %lld, %lldLL, %lldLL, %lldLL);\n}\n",
                   ta, tw, tr, to, (long long)j.N, (long long)j.K, (long long)Kp, (long long)j.K, (long long)j.res_ld,
                   (long long)j.N);
        char label[160];
        snprintf(label, sizeof label, "gemm %s %dx%d%s K=%lld N=%lld%s%s%s%s",
                 simt ? "fp32 simt" : c->prec == CU_TF32 ? "tf32 mma" : c->prec == CU_FP16 ? "f16 mma" : "bf16 mma", bm,
                 bn, vec_a || simt ? "" : " (unaligned A)", (long long)j.K, (long long)j.N,
                 j.bias >= 0 ? " +bias" : "", act_name(j.act), j.res >= 0 ? " +residual" : "",
                 strcmp(to, tw) != 0 ? " (fp32 out)" : "");
        int f = cu_add_kernel(c, "gemm", label, &t);
        cu_str_free(&t);
        cu_launch *l = cu_launch_new(c, f, node, threads, smem);
        if (!l)
            return c->d->status;
        l->min_batch = lo;
        l->max_batch = hi;
        l->grid[0] = cg_poly_k((j.N + bn - 1) / bn); /* N tiles first (gemm.cuh) */
        l->grid[1] = j.M;
        l->div[1] = bm;
        cu_arg_value(c, l, j.x);
        cu_arg_ptr(c, l, VITC_CUDA_ARG_WEIGHTS, woff);
        if (j.bias >= 0)
            cu_arg_ptr(c, l, VITC_CUDA_ARG_WEIGHTS, boff);
        else
            cu_arg_int(c, l, cg_poly_k(0));
        if (j.res >= 0)
            cu_arg_value(c, l, j.res);
        else
            cu_arg_int(c, l, cg_poly_k(0));
        cu_arg_value(c, l, j.out);
        cu_arg_int(c, l, j.M);
    }
    return c->d->status;
}
