/* cu_linear.c: products with a constant weight on the GPU: Linear (ops.def),
 * and MatMul or Gemm whose second operand is a constant matrix.
 *
 * The weight is converted at compile time to the GEMM's operand type (f16,
 * bf16, or f32 for tf32 and fp32), transposed to one row per output column
 * and zero-padded to the tiles (gemm.cuh), so that every tile load is in
 * bounds and 16-byte aligned.  Bias, activation and residual run in the
 * GEMM's epilogue.  fp16/bf16/tf32 use the tensor-core kernel with one of
 * two tiles, chosen per batch: the large one (128 x 128, 8 warps) once its
 * grid fills a GPU of CU_GEMM_WAVE SMs (VITC_CUDA_GEMM_WAVE), 64 x 64 (4 warps) below, so that
 * small batches still spread over the machine; where even the 64 x 64 grid
 * has fewer blocks than SMs (a batch-1 ViT-B's fc2 and proj: 48), K is split
 * over up to CU_SPLIT_MAX blocks per tile, towards CU_SPLIT_BLOCKS blocks,
 * whose fp32 partial sums the last of them to finish adds in a fixed order
 * before the epilogue (gemm.cuh), counting on tile counters in the
 * workspace that one launch before the first split GEMM zeroes (each split
 * GEMM leaves them at 0).  The launches cover the batches in ranges of one
 * (tile, split) each.  fp32 uses the SIMT kernel.  (The tiles and splits
 * tried: bench/design-notes.md, "GPU GEMM tiles and split K".)
 *
 * On sm_90a (an extra NVRTC image, which the runtime prefers on Hopper) the
 * large tile runs as gemm_wg: wgmma from shared memory in the 128-byte
 * swizzled layout, 3 stages of 128 bytes of k (97 KiB: two blocks per SM),
 * the launch's shared memory for that image (shared_bytes_specific); other
 * GPUs run gemm_tc's large tile in the same grid (bench/design-notes.md,
 * "wgmma GEMM").
 *
 * Where A's rows are whole 16-byte units (K * 2 % 16 == 0), the large tile
 * on sm_90a is gemm_tma instead: warp-specialised (two consumer warpgroups
 * on wgmma, a producer warp issuing the copy engine's bulk tensor copies of
 * A and Wt, an mbarrier ring of stages), 288 threads, 3 stages of 32 KiB and
 * two blocks per SM; the launch carries the two tensor maps the runtime
 * encodes per batch (vitc_cuda_tmap), and the other GPUs run gemm_tc's tile
 * with a ninth, loading warp (bench/design-notes.md, "TMA GEMM").
 *
 * With VITC_CUDA_PINGPONG=STAGES, those GEMMs run as gemm_pp instead: one
 * block an SM (VITC_CUDA_GEMM_WAVE of them, at most CU_PP_BLOCKS) over all
 * 128 x 128 tiles, two consumer warpgroups taking every other tile (one's
 * epilogue under the other's k loop) fed by one producer through a ring of
 * STAGES stages, and where the tiles do not make whole rounds of the grid,
 * the last ones shared out by k (stream-K, unless VITC_CUDA_STREAM_K=0):
 * its scratch holds two partial tiles a block, and 8 tile counters a block
 * join those of the split GEMMs; elsewhere the same grid runs gemm_tc's
 * tile over the tiles in turn, each whole.
 *
 * A LayerNorm or RMSNorm folded in (cu_norm_fold: every reader of its output
 * a GEMM): A is the norm's input, W's rows are scaled by the norm's scale
 * before packing (not shared with other GEMMs of the same weight), the bias
 * gains the norm's bias times W, and the epilogue takes the rows' (mean,
 * rstd) from the norm's output buffer and the packed weight's column sums
 * (gemm.cuh: gemm_store2).
 *
 * The knobs VITC_CUDA_GEMM_LARGE, VITC_CUDA_GEMM_WAVE, VITC_CUDA_TMA,
 * VITC_CUDA_SPLIT_K, VITC_CUDA_WGMMA_STAGES and VITC_CUDA_WGMMA
 * (codegen/knobs.def) change these choices for measuring on a GPU (bench/kit)
 * and for the emulation's tests (the large tile at small batches), not for
 * users. */
#include "codegen/cuda/cu_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CU_GEMM_WAVE 132      /* SMs of an H100 SXM: blocks that make one full wave */
#define CU_SPLIT_BLOCKS 528   /* a split K aims at this many blocks (4 per SM) */
#define CU_SPLIT_MAX 16       /* blocks per tile at most */
#define CU_SPLIT_MIN_KT 4     /* k tiles per block at least */
#define CU_SPLIT_SCAN 4096    /* batches looked at for ranges (above: no split) */
#define CU_PP_BLOCKS 1024     /* gemm_pp's grid at most (its stream-K scratch: 128 KiB a block) */

typedef struct {
    int x, w, trans_w, bias, res, act, out;
    int gate; /* res is a gate (multiplied) rather than a residual (added) */
    int has_bias; /* a bias in the epilogue: bias's, or a folded norm's (ln) */
    int ln;       /* the LayerNorm or RMSNorm folded in (cu_norm_fold): x is its input, -1 none */
    float alpha, beta;  /* Gemm: out = alpha x W + beta bias */
    int64_t K, N, res_ld;
    cg_poly M;
} gemm_job;

typedef struct {
    int bm, bn, wm, wn, stages, bkb;
} tile;

static const tile TILE_S = {64, 64, 2, 2, 3, 64};
enum { WG_BKB = 128 }; /* gemm_wg's k bytes per stage on sm_90a (the 128-byte swizzle) */

/* The large tile: 128 x 128, or VITC_CUDA_GEMM_LARGE's when it names one
 * gemm_tc can run (warp tiles of whole 16 x 16 fragments, 2 to 8 stages, at
 * most 227 KiB of shared memory); *bad set when it is set and does not. */
static tile large_tile(const cu_ctx *c, int *bad)
{
    tile t = {128, 128, 2, 4, 4, 64}, u;
    const char *e = c->knobs.cuda_gemm_large;
    char end;
    *bad = 0;
    if (!e || !*e)
        return t;
    if (sscanf(e, "%dx%d/%dx%d/%d/%d%c", &u.bm, &u.bn, &u.wm, &u.wn, &u.stages, &u.bkb, &end) == 6 && u.wm > 0 &&
        u.wn > 0 && u.wm * u.wn <= 16 && u.bm > 0 && u.bn > 0 && u.bm % (16 * u.wm) == 0 && u.bn % (16 * u.wn) == 0 &&
        u.bm <= 256 && u.bn <= 256 && u.stages >= 2 && u.stages <= 8 && (u.bkb == 64 || u.bkb == 128) &&
        (u.bm + u.bn) * (u.bkb + 16) * u.stages <= 227 * 1024)
        return u;
    *bad = 1;
    return t;
}

static unsigned tile_smem(tile t) { return (unsigned)((t.bm + t.bn) * (t.bkb + 16) * t.stages); }

/* The kernels' RES template argument: 0 none, 1 a residual, 2 a gate. */
static const char *res_arg(const gemm_job *j) { return j->res < 0 ? "0" : j->gate ? "2" : "1"; }

static int is_f32_const(const ir_graph *g, int v) { return ir_value_is_plain_const(g, v) && g->values[v].dtype == IR_F32; }

/* The job for node n; 0 with the reason in why when it is not a constant-weight product. */
static int job_of(const ir_graph *g, const ir_node *n, gemm_job *j, char *why, size_t len)
{
    memset(j, 0, sizeof *j);
    j->bias = j->res = j->ln = -1;
    j->alpha = j->beta = 1.0f;
    if ((n->op != IR_OP_LINEAR && n->op != IR_OP_MATMUL && n->op != IR_OP_GEMM) || n->ninputs < 2 ||
        n->noutputs < 1 || n->inputs[0] < 0 || n->inputs[1] < 0) {
        snprintf(why, len, "%s is not a product of two inputs", ir_op_name(n->op));
        return 0;
    }
    j->x = n->inputs[0];
    j->w = n->inputs[1];
    j->out = n->outputs[0];
    const ir_value *x = &g->values[j->x], *w = &g->values[j->w];
    if (!is_f32_const(g, j->w) || w->rank != 2) {
        snprintf(why, len, "its weight '%s' is not a constant f32 matrix", w->name);
        return 0;
    }
    ir_linear l;
    switch (n->op) {
    case IR_OP_LINEAR:
        if (!ir_linear_of(n, &l, why, len))
            return 0;
        if (l.gate >= 0 && l.residual >= 0) {
            snprintf(why, len, "a Linear with both a gate and a residual");
            return 0;
        }
        j->bias = l.bias;
        j->res = l.gate >= 0 ? l.gate : l.residual;
        j->gate = l.gate >= 0;
        j->act = (int)l.act;
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
    j->has_bias = j->bias >= 0;
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

static const char *act_name(int a) { return ir_act_label((ir_act)a); }

/* The label's word for a folded norm. */
static const char *norm_label(const cu_ctx *c, const gemm_job *j)
{
    return c->g->nodes[j->ln].op == IR_OP_RMS_NORM ? " +rmsnorm" : " +layernorm";
}

/* A folded norm's scale (NULL: none) and bias values (f32 constants: cu_norm_fold). */
static const float *norm_scale(const cu_ctx *c, const gemm_job *j)
{
    ir_norm v;
    char why[8];
    ir_norm_of(&c->g->nodes[j->ln], &v, why, sizeof why);
    return v.scale >= 0 ? c->g->values[v.scale].data : NULL;
}

static const float *norm_bias(const cu_ctx *c, const gemm_job *j)
{
    ir_norm v;
    char why[8];
    ir_norm_of(&c->g->nodes[j->ln], &v, why, sizeof why);
    return v.bias >= 0 ? c->g->values[v.bias].data : NULL;
}

/* W as [K, N] fp32: Gemm's alpha and transB applied, row k scaled by g[k]
 * (a folded norm's scale, NULL: none); NULL when W is that already, or out
 * of memory (*oom). */
static float *weight_kn(const ir_graph *g, const gemm_job *j, const float *gs, int *oom)
{
    *oom = 0;
    if (!j->trans_w && j->alpha == 1.0f && !gs)
        return NULL;
    const float *src = g->values[j->w].data;
    float *w = malloc(sizeof(float) * (size_t)(j->K * j->N));
    if (!w) {
        *oom = 1;
        return NULL;
    }
    for (int64_t k = 0; k < j->K; k++)
        for (int64_t n = 0; n < j->N; n++)
            w[k * j->N + n] = j->alpha * (j->trans_w ? src[n * j->K + k] : src[k * j->N + n]) * (gs ? gs[k] : 1.0f);
    return w;
}

/* Offset of the packed weight (and its padded sizes); -1 on error. */
static int64_t packed_weight(cu_ctx *c, int node, const gemm_job *j, ir_dtype t, int64_t Kp, int64_t Np)
{
    int cacheable = !j->trans_w && j->alpha == 1.0f && j->ln < 0;
    if (cacheable && c->gemm_w[j->w] >= 0)
        return c->gemm_w[j->w];
    int oom;
    float *tmp = weight_kn(c->g, j, j->ln >= 0 ? norm_scale(c, j) : NULL, &oom);
    const float *src = tmp ? tmp : c->g->values[j->w].data;
    if (oom)
        return cu_fail(c, VITC_INTERNAL, node, "out of memory"), -1;
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

/* With a norm folded in (j->ln): the GEMM's bias (beta times its own) plus
 * the norm's bias times W (alpha W), in double; the offset of its copy. */
static int64_t folded_bias(cu_ctx *c, int node, const gemm_job *j)
{
    void *p;
    int64_t off = cg_blob_reserve(&c->weights, sizeof(float) * (size_t)j->N, &p);
    if (off < 0)
        return cu_fail(c, VITC_INTERNAL, node, "out of memory for the weights"), -1;
    int oom;
    const float *b = j->bias >= 0 ? c->g->values[j->bias].data : NULL, *nb = norm_bias(c, j);
    float *w = nb ? weight_kn(c->g, j, NULL, &oom) : NULL;
    if (nb && oom)
        return cu_fail(c, VITC_INTERNAL, node, "out of memory"), -1;
    const float *wk = w ? w : c->g->values[j->w].data;
    for (int64_t n = 0; n < j->N; n++) {
        double acc = b ? (double)j->beta * b[n] : 0.0;
        for (int64_t k = 0; nb && k < j->K; k++)
            acc += (double)nb[k] * wk[k * j->N + n];
        ((float *)p)[n] = (float)acc;
    }
    free(w);
    return off;
}

/* With a norm folded in: the sums of the packed weight's columns (g W as
 * stored: rounded to t), the offset of their copy. */
static int64_t folded_colsum(cu_ctx *c, int node, const gemm_job *j, ir_dtype t)
{
    int oom;
    float *w = weight_kn(c->g, j, norm_scale(c, j), &oom);
    if (oom)
        return cu_fail(c, VITC_INTERNAL, node, "out of memory"), -1;
    const float *wk = w ? w : c->g->values[j->w].data;
    void *p;
    int64_t off = cg_blob_reserve(&c->weights, sizeof(float) * (size_t)j->N, &p);
    if (off < 0) {
        free(w);
        return cu_fail(c, VITC_INTERNAL, node, "out of memory for the weights"), -1;
    }
    for (int64_t n = 0; n < j->N; n++) {
        double acc = 0.0;
        for (int64_t k = 0; k < j->K; k++) {
            float v = wk[k * j->N + n];
            acc += t == IR_F16 ? ir_f16_to_f32(ir_f32_to_f16(v)) : t == IR_BF16 ? ir_bf16_to_f32(ir_f32_to_bf16(v)) : v;
        }
        ((float *)p)[n] = (float)acc;
    }
    free(w);
    return off;
}

/* Bias offset: the constant itself, or a copy scaled by Gemm's beta. */
static int64_t bias_offset(cu_ctx *c, int node, const gemm_job *j)
{
    if (j->ln >= 0)
        return folded_bias(c, node, j);
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

/* gemm_tma's shape on sm_90a (gemm.cuh): BN, stages, blocks per SM. */
typedef struct {
    int bn, stages, minb;
} tma_shape;

/* 128 x 128, 3 stages, two blocks per SM, or VITC_CUDA_TMA=BN/STAGES/MINB
 * (128/2..6/1, 128/2..3/2 or 256/2..4/1); bn 0 with VITC_CUDA_TMA=0 or a
 * shape it cannot run (*bad set). */
static tma_shape tma_of(const cu_ctx *c, int *bad)
{
    tma_shape t = {128, 3, 2}, u;
    const char *e = c->knobs.cuda_tma;
    char end;
    *bad = 0;
    if (!e || !*e)
        return t;
    if (strcmp(e, "0") == 0)
        return (tma_shape){0, 0, 0};
    if (sscanf(e, "%d/%d/%d%c", &u.bn, &u.stages, &u.minb, &end) == 3 && u.stages >= 2 &&
        ((u.bn == 128 && u.minb == 1 && u.stages <= 6) || (u.bn == 128 && u.minb == 2 && u.stages <= 3) ||
         (u.bn == 256 && u.minb == 1 && u.stages <= 4)))
        return u;
    *bad = 1;
    return (tma_shape){0, 0, 0};
}

/* gemm_tma_smem's threads and bytes. */
static unsigned tma_threads(tma_shape t) { return t.minb == 1 ? 384u : 288u; }
static unsigned tma_smem(tma_shape t) { return 1024u + (unsigned)(t.stages * (128 + t.bn) * 128 + 2 * t.stages * 8); }
/* gemm_pp_smem's bytes (threads: 384). */
static unsigned pp_smem(int stages) { return 1024u + (unsigned)(stages * 256 * 128 + (2 * stages + 2) * 8); }

/* The GEMM's padded sizes for the precision: Kp a multiple of every tile's k
 * step, Np of every BN. */
static void padded(const cu_ctx *c, const gemm_job *j, int64_t *Kp, int64_t *Np)
{
    int bad;
    tile L = large_tile(c, &bad);
    int simt = c->prec == CU_FP32;
    int64_t es = c->prec == CU_FP16 || c->prec == CU_BF16 ? 2 : 4;
    int64_t bkb = L.bkb > TILE_S.bkb ? L.bkb : TILE_S.bkb;
    if (es == 2 && bkb < WG_BKB)
        bkb = WG_BKB; /* gemm_wg's k steps */
    int64_t bk = simt ? 16 : bkb / es;
    int64_t np = simt ? 64 : L.bn > TILE_S.bn ? L.bn : TILE_S.bn;
    tma_shape tma = tma_of(c, &bad);
    if (!simt && tma.bn > np)
        np = tma.bn;
    *Kp = (j->K + bk - 1) / bk * bk;
    *Np = (j->N + np - 1) / np * np;
}

/* The tile and the K split (1: none) of the tensor-core GEMM (Kp: padded())
 * at a batch (no split above CU_SPLIT_SCAN, the batches cu_linear_scratch
 * sizes); returns 1 for the large tile, which, M growing with the batch,
 * every larger batch takes too. */
static int choose(const cu_ctx *c, const gemm_job *j, int64_t Kp, int64_t batch, tile *t, int *split)
{
    int bad;
    tile L = large_tile(c, &bad);
    int64_t m = cg_poly_eval(j->M, batch);
    *split = 1;
    if (m >= 0 && (m + L.bm - 1) / L.bm * ((j->N + L.bn - 1) / L.bn) >= c->knobs.cuda_gemm_wave) {
        *t = L;
        return 1;
    }
    *t = TILE_S;
    if (m <= 0 || batch > CU_SPLIT_SCAN || !c->knobs.cuda_split_k)
        return 0;
    int64_t blocks = (m + TILE_S.bm - 1) / TILE_S.bm * ((j->N + TILE_S.bn - 1) / TILE_S.bn);
    int64_t nkt = Kp / (TILE_S.bkb / (c->prec == CU_TF32 ? 4 : 2));
    int64_t s = blocks >= CU_GEMM_WAVE ? 1 : (CU_SPLIT_BLOCKS + blocks - 1) / blocks;
    if (s > nkt / CU_SPLIT_MIN_KT)
        s = nkt / CU_SPLIT_MIN_KT;
    if (s > CU_SPLIT_MAX)
        s = CU_SPLIT_MAX;
    *split = s > 1 ? (int)s : 1;
    return 0;
}

/* gemm_wg's stages on sm_90a (128 bytes of k each, 128-byte swizzle, one
 * wgmma group left in flight): 3, or VITC_CUDA_WGMMA_STAGES. */
static int wg_stages(const cu_ctx *c) { return (int)c->knobs.cuda_wgmma_stages; }

static unsigned wg_smem(const cu_ctx *c, tile tl)
{
    return 1024u + (unsigned)(wg_stages(c) * (tl.bm + tl.bn) * WG_BKB);
}

/* Whether the large tile runs as gemm_wg on sm_90a (f16/bf16 unless
 * VITC_CUDA_WGMMA=0; a tile of 128 x 128 or 128 x 256 with 2 x 4 warps, two
 * warpgroups, whose stages fit the shared memory of a block). */
static int use_wgmma(const cu_ctx *c, tile tl, int split)
{
    return c->knobs.cuda_wgmma && split == 1 && (c->prec == CU_BF16 || c->prec == CU_FP16) &&
           tl.bm == 128 && (tl.bn == 128 || tl.bn == 256) && tl.wm == 2 && tl.wn == 4 && wg_smem(c, tl) <= 227 * 1024;
}

/* The stages of gemm_pp where the large tile tl runs it (wgmma on sm_90a,
 * rows of A of whole 16 bytes, 128 columns: where gemm_tma would), else 0. */
static int pingpong_of(const cu_ctx *c, tile tl, int wg, int vec_a)
{
    return wg && vec_a && tl.bn == 128 ? (int)c->knobs.cuda_pingpong : 0;
}

/* Whether gemm_pp (pp stages) shares its last tiles out by k. */
static int stream_k(const cu_ctx *c, int pp) { return pp && c->knobs.cuda_stream_k; }

/* gemm_pp's blocks (the knob's, bounded for the scratch it sizes). */
static int64_t pp_blocks(const cu_ctx *c)
{
    return c->knobs.cuda_gemm_wave < CU_PP_BLOCKS ? c->knobs.cuda_gemm_wave : CU_PP_BLOCKS;
}

int64_t cu_linear_counters(const cu_ctx *c)
{
    int pp = c->prec == CU_FP16 || c->prec == CU_BF16 ? (int)c->knobs.cuda_pingpong : 0;
    /* 4 a tile (one a consumer's warp) over the last tiles: fewer than two rounds of blocks */
    return stream_k(c, pp) && 8 * pp_blocks(c) > CU_COUNTERS ? 8 * pp_blocks(c) : CU_COUNTERS;
}

int64_t cu_linear_scratch(const cu_ctx *c, int node)
{
    gemm_job j;
    char why[256];
    if (c->prec == CU_FP32 || !job_of(c->g, &c->g->nodes[node], &j, why, sizeof why))
        return 0;
    int64_t bytes = 0, Kp, Np;
    padded(c, &j, &Kp, &Np);
    for (int64_t b = 1; b <= c->max_batch && b <= CU_SPLIT_SCAN; b++) {
        tile t;
        int s;
        if (choose(c, &j, Kp, b, &t, &s))
            break; /* the large tile from here on: no split */
        int64_t m = cg_poly_eval(j.M, b);
        if (s > 1 && m > 0 && s * m * j.N * 4 > bytes)
            bytes = s * m * j.N * 4;
    }
    /* gemm_pp with stream-K at the largest batches: two 128 x 128 fp32 tiles a block */
    tile t;
    int s;
    if (choose(c, &j, Kp, c->max_batch, &t, &s) &&
        stream_k(c, pingpong_of(c, t, use_wgmma(c, t, s), j.K * 2 % 16 == 0)) && pp_blocks(c) * 2 * 128 * 128 * 4 > bytes)
        bytes = pp_blocks(c) * 2 * 128 * 128 * 4;
    return bytes;
}

/* The kernel text of a tensor-core GEMM (split: the partial-sum form; wg:
 * gemm_wg; tma.bn: gemm_tma; pp: gemm_pp with that many stages). */
static void gemm_text(const cu_ctx *c, cu_str *t, const gemm_job *j, tile tl, int split, int wg, tma_shape tma,
                      int pp, int vec_a, const char *tw, const char *tr, const char *to, int64_t Kp)
{
    if (pp) {
        cu_str_add(t, "VK_KERNEL_TMA(@, 384, 1, vk_gemm_params)\n{\n"
                      "    vk::gemm_pp<%s, %d, %d, %d, %s, %d, %s, %s, %s, %s, %s>(VK_TMAPS, ",
                   tw, pp, tl.stages, tl.bkb, vec_a ? "true" : "false", j->act, j->has_bias ? "true" : "false",
                   res_arg(j), tr, to, stream_k(c, pp) ? "true" : "false");
    } else if (tma.bn) {
        cu_str_add(t, "VK_KERNEL_TMA(@, %u, %d, vk_gemm_params)\n{\n"
                      "    vk::gemm_tma<%s, %d, %d, %d, %d, %d, %s, %d, %s, %s, %s, %s>(VK_TMAPS, ",
                   tma_threads(tma), tma.minb, tw, tma.bn, tma.stages, tma.minb, tl.stages, tl.bkb,
                   vec_a ? "true" : "false", j->act, j->has_bias ? "true" : "false", res_arg(j),
                   tr, to);
    } else {
        cu_str_add(t, "VK_KERNEL(@, %u, vk_gemm_params)\n{\n", (unsigned)(tl.wm * tl.wn * 32));
        if (wg)
            cu_str_add(t, "    vk::gemm_wg<%s, %d, %d, %d, 1, %d, %d, %s, %d, %s, %s, %s, %s>(", tw, tl.bn, WG_BKB,
                       wg_stages(c), tl.stages, tl.bkb, vec_a ? "true" : "false", j->act,
                       j->has_bias ? "true" : "false", res_arg(j), tr, to);
        else
            cu_str_add(t, "    vk::gemm_tc<%s, %d, %d, %d, %d, %d, %d, %s, %s, %d, %s, %s, %s, %s>(", tw, tl.bm, tl.bn,
                       tl.wm, tl.wn, tl.stages, tl.bkb, vec_a ? "true" : "false", split > 1 ? "true" : "false",
                       j->act, j->has_bias ? "true" : "false", res_arg(j), tr, to);
    }
    /* N, K, Kp, lda, ldr, ldc */
    cu_str_add(t, "p, %lld, %lld, %lld, %lldLL, %lldLL, %lldLL);\n}\n", (long long)j->N, (long long)j->K, (long long)Kp,
               (long long)j->K, (long long)j->res_ld, (long long)j->N);
}

/* A GEMM launch's fields: a, wt and the epilogue's (bias, res, out, m; a
 * folded norm's statistics, in its output's buffer, and column sums at soff). */
static void gemm_args(cu_ctx *c, cu_launch *l, const gemm_job *j, int64_t woff, int64_t boff, int64_t soff)
{
    cu_arg_value(c, l, CU_FIELD(vk_gemm_params, a), j->x);
    cu_arg_ptr(c, l, CU_FIELD(vk_gemm_params, wt), VITC_CUDA_ARG_WEIGHTS, woff);
    if (j->has_bias)
        cu_arg_ptr(c, l, CU_FIELD(vk_gemm_params, bias), VITC_CUDA_ARG_WEIGHTS, boff);
    if (j->ln >= 0) {
        cu_arg_value(c, l, CU_FIELD(vk_gemm_params, ln), c->g->nodes[j->ln].outputs[0]);
        cu_arg_ptr(c, l, CU_FIELD(vk_gemm_params, lnsum), VITC_CUDA_ARG_WEIGHTS, soff);
    }
    if (j->res >= 0)
        cu_arg_value(c, l, CU_FIELD(vk_gemm_params, res), j->res);
    cu_arg_value(c, l, CU_FIELD(vk_gemm_params, out), j->out);
    cu_arg_int(c, l, CU_FIELD(vk_gemm_params, m), j->M);
}

/* The launch that sets the split-K GEMMs' tile counters to 0 at the start of
 * a run (each split GEMM leaves them at 0 after it, but the workspace starts
 * as anything): before the plan's first split GEMM, at the batches up to the
 * last one any GEMM splits at (hi: those of this one; later ones extend it). */
static int zero_counters(cu_ctx *c, int node, int64_t hi)
{
    if (c->counters_launch) {
        cu_launch *z = &c->l[c->counters_launch - 1];
        z->max_batch = hi > z->max_batch ? hi : z->max_batch;
        return c->d->status;
    }
    cu_str t = {0};
    cu_str_add(&t, "VK_KERNEL(@, 256, vk_gemm_params)\n{\n    vk::gemm_zero_counters(p);\n}\n");
    int f = cu_add_kernel(c, "gemm", "gemm split-k tile counters to 0", &t);
    cu_str_free(&t);
    if (f < 0)
        return c->d->status;
    cu_launch *l = cu_launch_new(c, f, node, 256, 0);
    if (!l)
        return c->d->status;
    l->min_batch = 1;
    l->max_batch = hi;
    l->grid[0] = cg_poly_k(1);
    cu_arg_ws(c, l, CU_FIELD(vk_gemm_params, counters), c->counters_off);
    cu_arg_int(c, l, CU_FIELD(vk_gemm_params, m), cg_poly_k(c->ncounters));
    c->counters_launch = c->nl;
    return c->d->status;
}

/* The fp32 SIMT GEMM: one launch for every batch. */
static int emit_simt(cu_ctx *c, int node, const gemm_job *j, int64_t woff, int64_t boff, int64_t soff,
                     const char *tw, const char *tr, int64_t Kp)
{
    cu_str t = {0};
    cu_str_add(&t, "VK_KERNEL(@, 256, vk_gemm_params)\n{\n");
    cu_str_add(&t, "    vk::gemm_simt<%s, %d, %s, %s, %s>(", tw, j->act, j->has_bias ? "true" : "false",
               res_arg(j), tr);
    cu_str_add(&t, "p, %lld, %lld, %lld, %lldLL, %lldLL, %lldLL);\n}\n", (long long)j->N, (long long)j->K,
               (long long)Kp, (long long)j->K, (long long)j->res_ld, (long long)j->N);
    char label[160];
    snprintf(label, sizeof label, "gemm fp32 simt 64x64 K=%lld N=%lld%s%s%s%s", (long long)j->K, (long long)j->N,
             j->ln < 0 ? "" : norm_label(c, j), j->has_bias ? " +bias" : "", act_name(j->act),
             j->res < 0 ? "" : j->gate ? " +gate" : " +residual");
    int f = cu_add_kernel(c, "gemm", label, &t);
    cu_str_free(&t);
    cu_launch *l = cu_launch_new(c, f, node, 256, 2u * 16 * 68 * 4);
    if (!l)
        return c->d->status;
    l->min_batch = 1;
    l->max_batch = c->max_batch;
    l->grid[0] = cg_poly_k((j->N + 63) / 64);
    l->grid[1] = j->M;
    l->div[1] = 64;
    gemm_args(c, l, j, woff, boff, soff);
    return c->d->status;
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
    if (c->ln_of && c->ln_of[node] >= 0) { /* A is the norm's input (cu_norm_fold) */
        ir_norm v;
        j.ln = c->ln_of[node];
        ir_norm_of(&c->g->nodes[j.ln], &v, why, sizeof why);
        j.x = v.x;
        j.has_bias = j.bias >= 0 || v.bias >= 0;
    }
    ir_dtype wt = c->prec == CU_FP16 ? IR_F16 : c->prec == CU_BF16 ? IR_BF16 : IR_F32;
    int simt = c->prec == CU_FP32;
    int64_t Kp, Np;
    padded(c, &j, &Kp, &Np);
    int64_t woff = packed_weight(c, node, &j, wt, Kp, Np);
    int64_t boff = j.has_bias ? bias_offset(c, node, &j) : 0;
    int64_t soff = j.ln >= 0 ? folded_colsum(c, node, &j, wt) : 0;
    if (woff < 0 || boff < 0 || soff < 0)
        return c->d->status;
    const char *ta = cu_ctype(cu_sdt(c, j.x)), *tw = cu_ctype(wt), *to = cu_ctype(cu_sdt(c, j.out));
    const char *tr = j.res >= 0 ? cu_ctype(cu_sdt(c, j.res)) : to;
    if (strcmp(ta, tw) != 0 || (simt && strcmp(to, tw) != 0))
        return cu_fail(c, VITC_INTERNAL, node, "GEMM operands stored as %s and %s, output %s", ta, tw, to);
    int vec_a = (j.K * (int64_t)ir_dtype_size(wt)) % 16 == 0;
    if (simt)
        return emit_simt(c, node, &j, woff, boff, soff, tw, tr, Kp);
    int bad;
    tma_of(c, &bad);
    if (bad)
        return cu_fail(c, VITC_BAD_INPUT, node,
                       "VITC_CUDA_TMA='%s' is not a shape the TMA GEMM runs (BN/STAGES/MINB: 128/2..6/1, 128/2..3/2, "
                       "256/2..4/1, or 0 for none)", c->knobs.cuda_tma);
    large_tile(c, &bad);
    if (bad)
        return cu_fail(c, VITC_BAD_INPUT, node,
                       "VITC_CUDA_GEMM_LARGE='%s' is not a tile the GEMM can run (BMxBN/WMxWN/STAGES/BKB, e.g. "
                       "128x128/2x4/4/64: warp tiles of whole 16x16 fragments, 2 to 8 stages, 64 or 128 k bytes, "
                       "at most 227 KiB of shared memory)", c->knobs.cuda_gemm_large);
    if (c->knobs.cuda_pingpong && c->knobs.cuda_gemm_wave > CU_PP_BLOCKS)
        return cu_fail(c, VITC_BAD_INPUT, node,
                       "VITC_CUDA_GEMM_WAVE=%lld with VITC_CUDA_PINGPONG: the ping-pong GEMM runs at most %d blocks",
                       (long long)c->knobs.cuda_gemm_wave, CU_PP_BLOCKS);
    int64_t scratch = c->scratch_off ? c->scratch_off[node] : -1;
    for (int64_t lo = 1; lo <= c->max_batch;) {
        /* the range of batches from lo with lo's tile and split */
        tile tl, t2;
        int split, s2;
        int64_t hi = lo;
        if (choose(c, &j, Kp, lo, &tl, &split) || lo > CU_SPLIT_SCAN)
            hi = c->max_batch; /* the large tile stays; past the scan nothing splits */
        else /* the 64 x 64 tile while the split stays the same */
            while (hi < c->max_batch && hi < CU_SPLIT_SCAN && !choose(c, &j, Kp, hi + 1, &t2, &s2) && s2 == split)
                hi++;
        if (split > 1 && (scratch < 0 || c->counters_off < 0 ||
                          (cg_poly_eval(j.M, hi) + tl.bm - 1) / tl.bm * ((j.N + tl.bn - 1) / tl.bn) > c->ncounters))
            return cu_fail(c, VITC_INTERNAL, node, "a split GEMM without scratch or enough tile counters");
        if (split > 1 && zero_counters(c, node, hi) != VITC_OK)
            return c->d->status;
        cu_str t = {0};
        int wg = use_wgmma(c, tl, split);
        c->wgmma |= wg;
        /* gemm_tma where the copy engine can read A: rows of whole 16 bytes; or gemm_pp, of the
         * 128 x 128 tile */
        tma_shape tma = wg && vec_a ? tma_of(c, &bad) : (tma_shape){0, 0, 0};
        int pp = pingpong_of(c, tl, wg, vec_a), sk = stream_k(c, pp);
        if (sk && (scratch < 0 || c->counters_off < 0 || c->ncounters < 8 * pp_blocks(c)))
            return cu_fail(c, VITC_INTERNAL, node, "a stream-K GEMM without scratch or enough tile counters");
        if (sk && zero_counters(c, node, hi) != VITC_OK)
            return c->d->status;
        if (pp)
            tma = (tma_shape){128, pp, 1};
        if (tma.bn)
            tl.bn = tma.bn; /* its grid; other GPUs run gemm_tc's tile of that width */
        gemm_text(c, &t, &j, tl, split, wg, tma, pp, vec_a, tw, tr, to, Kp);
        char label[192];
        snprintf(label, sizeof label, "gemm %s%s %dx%d%s K=%lld N=%lld%s%s%s%s%s%s",
                 c->prec == CU_TF32 ? "tf32 mma" : c->prec == CU_FP16 ? (wg ? "f16 wgmma" : "f16 mma")
                                                                      : (wg ? "bf16 wgmma" : "bf16 mma"),
                 pp ? "+tma pingpong" : tma.bn ? "+tma" : "",
                 tl.bm, tl.bn,
                 vec_a ? "" : " (unaligned A)", (long long)j.K, (long long)j.N,
                 split > 1 ? " split-k" : sk ? " stream-k" : "", j.ln < 0 ? "" : norm_label(c, &j),
                 j.has_bias ? " +bias" : "", act_name(j.act), j.res < 0 ? "" : j.gate ? " +gate" : " +residual",
                 strcmp(to, tw) != 0 ? " (fp32 out)" : "");
        int f = cu_add_kernel(c, "gemm", label, &t);
        cu_str_free(&t);
        cu_launch *l = cu_launch_new(c, f, node, tma.bn ? tma_threads(tma) : (unsigned)(tl.wm * tl.wn * 32),
                                     tile_smem(tl));
        if (!l)
            return c->d->status;
        l->smem_specific = pp ? pp_smem(pp) : tma.bn ? tma_smem(tma) : wg ? wg_smem(c, tl) : 0;
        if (tma.bn) { /* A [M, K] in boxes of 128 rows, Wt [Np, Kp] of BN rows, 64 elements of k */
            int elem = c->prec == CU_BF16 ? VITC_CUDA_TMAP_BF16 : VITC_CUDA_TMAP_F16;
            l->ntmaps = 2;
            l->tmaps[0] = (cu_tmap){CU_FIELD(vk_gemm_params, a), elem, j.M, j.K, j.K * 2, 128, 64};
            l->tmaps[1] =
                (cu_tmap){CU_FIELD(vk_gemm_params, wt), elem, cg_poly_k(Np), Kp, Kp * 2, (unsigned)tma.bn, 64};
        }
        l->min_batch = lo;
        l->max_batch = hi;
        l->grid[0] = cg_poly_k((j.N + tl.bn - 1) / tl.bn); /* N tiles first (gemm.cuh) */
        l->grid[1] = j.M;
        l->div[1] = tl.bm;
        l->grid[2] = cg_poly_k(split);
        if (pp) { /* persistent: a block an SM (VITC_CUDA_GEMM_WAVE: the SMs of a wave), over every tile */
            l->grid[0] = cg_poly_k(c->knobs.cuda_gemm_wave);
            l->grid[1] = cg_poly_k(1);
            l->div[1] = 1;
        }
        gemm_args(c, l, &j, woff, boff, soff);
        if (split > 1 || sk) { /* its blocks' partial sums, and the tile counters that find each tile's last */
            cu_arg_ws(c, l, CU_FIELD(vk_gemm_params, partial), scratch);
            cu_arg_ws(c, l, CU_FIELD(vk_gemm_params, counters), c->counters_off);
        }
        lo = hi + 1;
    }
    return c->d->status;
}
