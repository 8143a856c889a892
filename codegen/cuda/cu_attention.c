/* cu_attention.c: the fused Attention op (ops.def) on the GPU.
 *
 * fp16/bf16 with a head size that is a multiple of 8 (72 and 88 padded to
 * whole 16-column steps in shared memory): the tensor-core
 * kernel (attention.cuh), 128 query rows per block (8 warps) at batches whose
 * grid of 64-row blocks would have VITC_CUDA_ATTN_WIDE_BLOCKS, 64 rows (4 warps)
 * below and for at most 64 queries, K and V of the image and head in
 * shared memory in chunks of KC keys: all of them when they fit in
 * CU_ATTN_SMEM bytes (197 tokens of 64 do), else the largest multiple of 64
 * that fits.  128 rows read K and V once for twice the queries of 64 and,
 * at 92 KiB for 197 tokens of 64, keep 16 warps on an SM instead of 8.
 * VITC_CUDA_ATTN_WIDE_BLOCKS (read when compiling) moves the threshold, for
 * tests and measurements.  Otherwise (fp32, tf32, other head sizes): the
 * SIMT kernel, one query row per thread, in fp32.  Both take log2(e) folded
 * into the scale, and a rotary table (rope, a constant f32 [2, R, D] or
 * [2, H, R, D] in the weights) with its pairing as a template argument, R,
 * rope_start and the table's heads (1 or H) as arguments: a model without
 * one runs the kernels it ran before.  (Why 64 rows below the threshold:
 * bench/design-notes.md, "GPU attention blocks".)
 *
 * With VITC_CUDA_ATTN_WGMMA=1 (not yet the default: untimed), the 128-row
 * blocks of fp16/bf16 attention with heads of a multiple of 16 up to 128 and
 * the [3][H][D] layout or cross-attention run attention_wg on sm_90a: TMA
 * into a ring of key blocks, S and P V on wgmma, 288 threads (a producing
 * warp; 384 with a rotary table, three more warps rotating Q and K in shared
 * memory), two blocks an SM up to heads of 64 without one; its two tensor
 * maps are qkv's (K and V) and the queries' (qkv or q), boxes of 64 x 64.
 * Self-attention in the einops layout runs it too, 384 threads, its four
 * producing warps loading the tiles without TMA (no tensor maps).
 * Up to 64 queries its blocks take as many as the 64-row ones, so there the
 * threshold applies too.  Other GPUs run attention_tc's 8 warps in its grid. */
#include "codegen/cuda/cu_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CU_ATTN_SMEM (96 * 1024)
#define CU_ATTN_SIMT_MAX_D 128

/* The rotary table of a (ops.def): 1 with its rows R and its heads (1: [2, R, D] shared by the heads, H:
 * [2, H, R, D]) when it is a constant f32 table of N tokens the kernels can read, else 0. */
static int rope_table(const ir_graph *g, const ir_attention *a, int64_t N, int64_t *R, int64_t *heads)
{
    const ir_value *t = &g->values[a->rope];
    int r4 = t->rank == 4, ok = ir_value_is_plain_const(g, a->rope) && t->dtype == IR_F32 && (t->rank == 3 || r4);
    for (int i = 0; ok && i < t->rank; i++)
        ok = t->dims[i].e == 0;
    if (!ok || t->dims[0].k != 2 || t->dims[2 + r4].k != a->head_size || (r4 && t->dims[1].k != a->heads) ||
        a->rope_start + t->dims[1 + r4].k > N)
        return 0;
    *R = t->dims[1 + r4].k;
    *heads = r4 ? a->heads : 1;
    return 1;
}

int cu_attention_supports(const ir_graph *g, const ir_node *n, char *why, size_t len)
{
    ir_attention a;
    if (!ir_attention_of(n, &a, why, len))
        return 0;
    const ir_value *x = &g->values[a.qkv];
    int64_t H = a.heads, D = a.head_size;
    int vq = a.q, parts = a.parts;
    if (ir_fake_quant_any(a.fq, IR_ATTN_FQ_N)) {
        snprintf(why, len, "Attention with fake-quant points (a quantized model's attention runs unfused on CUDA)");
        return 0;
    }
    if (x->rank != 3 || x->dims[1].e != 0 || x->dims[2].e != 0 || x->dims[2].k != parts * H * D) {
        snprintf(why, len, "Attention input is not [images, tokens, %d*heads*head_size] with a known layout", parts);
        return 0;
    }
    if (vq >= 0 && (g->values[vq].rank != 3 || g->values[vq].dims[1].e != 0 || g->values[vq].dims[1].k < 1 ||
                    g->values[vq].dims[1].k > (1 << 20))) {
        snprintf(why, len, "Attention's queries are not [images, tokens, heads*head_size]");
        return 0;
    }
    if (x->dims[1].k < 1 || x->dims[1].k > (1 << 20) || H > 65535) {
        snprintf(why, len, "Attention with %lld tokens and %lld heads", (long long)x->dims[1].k, (long long)H);
        return 0;
    }
    int vb = a.bias;
    if (vb >= 0 && (g->values[vb].rank != 4 || g->values[vb].dims[3].k != x->dims[1].k)) {
        snprintf(why, len, "Attention's bias is not [1|B, 1|H, 1|N, N]");
        return 0;
    }
    int64_t R, rh;
    if (a.rope >= 0 && !rope_table(g, &a, x->dims[1].k, &R, &rh)) {
        snprintf(why, len, "Attention's rotary table is not a constant f32 [2, R, %lld] or [2, %lld, R, %lld] with "
                 "rope_start + R at most %lld", (long long)D, (long long)H, (long long)D, (long long)x->dims[1].k);
        return 0;
    }
    if (D % 8 != 0 && D > CU_ATTN_SIMT_MAX_D) {
        snprintf(why, len, "head size %lld: the CUDA attention takes multiples of 8, or at most %d", (long long)D,
                 CU_ATTN_SIMT_MAX_D);
        return 0;
    }
    return 1;
}

/* attention_wg's stages of 64 keys (4 for heads up to 64, 2 above), its shared memory and threads
 * (attn_wg_smem of attention.cuh), and its blocks an SM: two up to heads of 64 unless the producer prepares
 * the tiles (prep: a rotary table or the einops layout). */
static int wg_stages(int64_t D) { return D <= 64 ? 4 : 2; }
static unsigned wg_smem(int64_t D)
{
    int64_t db = (D + 63) / 64, ws = wg_stages(D);
    return (unsigned)(1024 + 128 * 128 * db + ws * 2 * 64 * 128 * db + (3 * ws + 3) * 8);
}
static unsigned wg_threads(int prep) { return prep ? 384u : 288u; }
static int wg_blocks(int64_t D, int prep) { return D <= 64 && !prep ? 2 : 1; }

/* Whether the 128-row blocks of node (view a) run attention_wg on sm_90a (VITC_CUDA_ATTN_WGMMA): fp16/bf16,
 * heads a multiple of 16 up to 128, the [3][H][D] layout or cross-attention (or self-attention in the einops
 * layout, which its producer loads without TMA), and rows the copy engine's 32-bit coordinates reach at the
 * largest batch. */
static int use_attn_wg(const cu_ctx *c, const ir_attention *a, int64_t N, int64_t Nq)
{
    int64_t D = a->head_size, rows = c->max_batch * (N > Nq ? N : Nq);
    return c->knobs.cuda_attn_wgmma && (c->prec == CU_FP16 || c->prec == CU_BF16) && D % 16 == 0 && D <= 128 &&
           (a->layout == 0 || a->parts == 3) && rows < ((int64_t)1 << 31) - 256;
}

/* The kernel of node (view a) with qw warps (the tensor-core kernel; the SIMT one ignores qw; wg: attention_wg
 * with 8 warps) and its launch for batches lo..hi. */
static int attention_launch(cu_ctx *c, int node, const ir_attention *a, int qw, int wg, int64_t lo, int64_t hi)
{
    int out = a->y, vb = a->bias, vq = a->q, np = a->parts;
    const ir_value *x = &c->g->values[a->qkv];
    int64_t N = x->dims[1].k, H = a->heads, D = a->head_size;
    int64_t Nq = vq >= 0 ? c->g->values[vq].dims[1].k : N;
    int layout = (int)a->layout;
    float scale = a->scale, post = a->post_scale;
    int tc = (c->prec == CU_FP16 || c->prec == CU_BF16) && D % 8 == 0;
    const char *t = cu_ctype(cu_sdt(c, a->qkv));
    int64_t rows, kc = 0;
    unsigned threads = 128, smem;
    if (tc) {
        rows = 16 * qw;
        threads = wg ? wg_threads(a->rope >= 0 || layout == 1) : 32u * (unsigned)qw; /* attention_wg: producing warps */
        int64_t rs = ((D + 15) / 16 * 16 + 8) * 2, fit = (CU_ATTN_SMEM / rs - rows) / 2 / 64 * 64, all = (N + 63) / 64 * 64;
        kc = all <= fit ? all : fit;
        if (kc < 64)
            return cu_fail(c, VITC_BAD_INPUT, node, "head size %lld leaves no room for keys in shared memory",
                           (long long)D);
        smem = (unsigned)((rows + 2 * kc) * rs);
    } else {
        rows = 128;
        smem = (unsigned)(2 * 64 * D * 4);
    }
    /* log2(e) folded into the scale: the kernels exponentiate in base 2 */
    float scale_log2 = scale * 1.4426950408889634f;
    cu_str s = {0};
    const char *tb = vb >= 0 ? cu_ctype(cu_sdt(c, vb)) : "float", *bias = vb >= 0 ? "true" : "false";
    /* the rotary table's pairing as the last template argument, its R, rope_start and heads as the last
     * arguments; without one the defaults (ROPE 0) */
    int rope = a->rope >= 0;
    int64_t R = 0, rh = 1;
    char rt[16] = "", ra[80] = "", rl[48] = "";
    if (rope) {
        if (!rope_table(c->g, a, N, &R, &rh))
            return cu_fail(c, VITC_INTERNAL, node, "attention's rotary table is not one the kernels read");
        snprintf(rt, sizeof rt, ", %d", (int)a->rope_pairing);
        snprintf(ra, sizeof ra, ", %lld, %lld, %lld", (long long)R, (long long)a->rope_start, (long long)rh);
        snprintf(rl, sizeof rl, " +rope (%s%s)", a->rope_pairing == IR_ROPE_INTERLEAVED ? "interleaved" : "halves",
                 rh > 1 ? ", per head" : "");
    }
    if (wg && layout == 0) /* the tensor maps */
        cu_str_add(&s,
                   "VK_KERNEL_TMA(@, %u, %d, vk_attention_params)\n{\n    vk::attention_wg<%s, %lld, %d, %s, %s, %d, "
                   "%lld, %d>(VK_TMAPS, ", threads, wg_blocks(D, rope), t, (long long)D, np, bias, tb, wg_stages(D),
                   (long long)kc, rope ? (int)a->rope_pairing : 0);
    else if (wg) /* einops: none */
        cu_str_add(&s,
                   "VK_KERNEL(@, %u, vk_attention_params)\n{\n    vk::attention_wg<%s, %lld, %d, %s, %s, %d, %lld, %d, "
                   "1>(nullptr, nullptr, ", threads, t, (long long)D, np, bias, tb, wg_stages(D), (long long)kc,
                   rope ? (int)a->rope_pairing : 0);
    else if (tc)
        cu_str_add(&s, "VK_KERNEL(@, %u, vk_attention_params)\n{\n    vk::attention_tc<%s, %lld, %d, %lld, %d, %s, %s, "
                   "%d%s>(", threads, t, (long long)D, layout, (long long)kc, np, bias, tb, qw, rt);
    else
        cu_str_add(&s, "VK_KERNEL(@, %u, vk_attention_params)\n{\n    vk::attention_simt<%s, %lld, %d, %d, %s, %s%s>(",
                   threads, t, (long long)D, layout, np, bias, tb, rt);
    char f1[48], f2[48];
    cu_str_add(&s, "p, %lld, %lld, %s, %s, ", (long long)N, (long long)H, cu_float_lit(scale_log2, f1, sizeof f1),
               cu_float_lit(post, f2, sizeof f2));
    int64_t st[3] = {0, 0, 0}; /* the bias's strides, 0 where broadcast */
    if (vb >= 0)
        ir_attention_bias_strides(c->g, a, N, st);
    int64_t bp = vb >= 0 ? ir_attention_bias_period(c->g, a) : 0; /* windowed attention: one bias row per window */
    char pa[48] = "";
    if (bp > 0)
        snprintf(pa, sizeof pa, "%s, %lldll", rope ? "" : ", 0, 0, 1", (long long)bp);
    cu_str_add(&s, "%lldll, %lldll, %lldll, %lld%s%s);\n}\n", (long long)st[0], (long long)st[1], (long long)st[2],
               (long long)Nq, ra, pa);
    char label[128];
    snprintf(label, sizeof label, "attention %s %lldx N=%lld H=%lld D=%lld%s%s%s%s%s",
             wg ? (layout ? "wgmma" : "wgmma+tma") : tc ? "mma" : "simt", /* einops: loaded without TMA */
             (long long)rows, (long long)N, (long long)H, (long long)D, layout ? " (h d qkv)" : "",
             tc && kc < (N + 63) / 64 * 64 ? " chunked" : "", vb >= 0 ? " +bias" : "", vq >= 0 ? " cross" : "", rl);
    int f = cu_add_kernel(c, "attn", label, &s);
    cu_str_free(&s);
    cu_launch *l = cu_launch_new(c, f, node, threads, smem);
    if (!l)
        return c->d->status;
    l->min_batch = lo;
    l->max_batch = hi;
    if (wg) { /* on sm_90a: its own shared memory */
        l->smem_specific = wg_smem(D);
        c->wgmma = 1;
    }
    if (wg && layout == 0) { /* the maps of K and V (qkv) and of Q (qkv, or q), boxes of 64 x 64 */
        int elem = c->prec == CU_BF16 ? VITC_CUDA_TMAP_BF16 : VITC_CUDA_TMAP_F16;
        cg_poly brows = cg_poly_scale(cg_poly_dim(x->dims[0]), N);
        l->ntmaps = 2;
        l->tmaps[0] = (cu_tmap){CU_FIELD(vk_attention_params, qkv), elem, brows, np * H * D, np * H * D * 2, 64, 64};
        if (vq >= 0)
            l->tmaps[1] = (cu_tmap){CU_FIELD(vk_attention_params, q), elem,
                                    cg_poly_scale(cg_poly_dim(c->g->values[vq].dims[0]), Nq), H * D, H * D * 2, 64, 64};
        else
            l->tmaps[1] = l->tmaps[0];
    }
    /* blockIdx.x: query tile + tiles * image */
    l->grid[0] = cg_poly_scale(cg_poly_dim(x->dims[0]), (Nq + rows - 1) / rows);
    l->grid[1] = cg_poly_k(H);
    cu_arg_value(c, l, CU_FIELD(vk_attention_params, qkv), a->qkv);
    cu_arg_value(c, l, CU_FIELD(vk_attention_params, y), out);
    if (vb >= 0)
        cu_arg_value(c, l, CU_FIELD(vk_attention_params, bias), vb);
    if (vq >= 0)
        cu_arg_value(c, l, CU_FIELD(vk_attention_params, q), vq);
    if (rope)
        cu_arg_value(c, l, CU_FIELD(vk_attention_params, rope), a->rope);
    return c->d->status;
}

int cu_emit_attention(cu_ctx *c, int node)
{
    const ir_node *n = &c->g->nodes[node];
    ir_attention a;
    if (ir_attention_get(n, &a, c->d))
        return c->d->status;
    int out = a.y;
    if (c->off[cu_root(c, out)] < 0)
        return VITC_OK;
    const ir_value *x = &c->g->values[a.qkv];
    int64_t N = x->dims[1].k, H = a.heads, D = a.head_size;
    int vq = a.q;
    int64_t Nq = vq >= 0 ? c->g->values[vq].dims[1].k : N;
    if (vq >= 0 && strcmp(cu_ctype(cu_sdt(c, vq)), cu_ctype(cu_sdt(c, a.qkv))) != 0)
        return cu_fail(c, VITC_INTERNAL, node, "attention queries and keys in different storage types");
    int tc = (c->prec == CU_FP16 || c->prec == CU_BF16) && D % 8 == 0;
    if (!tc && D > CU_ATTN_SIMT_MAX_D)
        return cu_fail(c, VITC_BAD_INPUT, node, "head size %lld in %s: the CUDA attention takes at most %d", (long long)D,
                       c->prec == CU_FP32 ? "fp32" : c->prec == CU_TF32 ? "tf32" : "this precision", CU_ATTN_SIMT_MAX_D);
    const char *t = cu_ctype(cu_sdt(c, a.qkv)), *to = cu_ctype(cu_sdt(c, out));
    if (strcmp(t, to) != 0)
        return cu_fail(c, VITC_INTERNAL, node, "attention between storage types %s and %s", t, to);
    /* 8 warps (128 query rows) from the batch whose 64-row grid has VITC_CUDA_ATTN_WIDE_BLOCKS blocks on; 4 warps
     * below, where half as many blocks would leave SMs idle */
    int64_t wide = c->max_batch + 1, blocks = c->knobs.cuda_attn_wide_blocks;
    int wg = tc && use_attn_wg(c, &a, N, Nq); /* whose 128-row blocks take as many as 64-row ones up to 64 queries */
    for (int64_t b = 1; tc && (Nq > 64 || wg) && b <= c->max_batch; b++)
        if ((Nq + 63) / 64 * cg_poly_eval(cg_poly_dim(x->dims[0]), b) * H >= blocks) {
            wide = b;
            break;
        }
    if (wide > 1 && attention_launch(c, node, &a, 4, 0, 1, wide - 1) != VITC_OK)
        return c->d->status;
    if (wide <= c->max_batch)
        attention_launch(c, node, &a, 8, wg, wide, c->max_batch);
    return c->d->status;
}
