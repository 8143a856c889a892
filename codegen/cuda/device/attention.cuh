/* attention.cuh: the Attention op of ops.def, one (query tile, head, image)
 * per block: out = softmax((Q K^T) * scale + bias) * post_scale @ V.
 *
 * qkv is [B, N, 3*H*D]: LAYOUT 0 puts its last axis as [3][H][D] (timm,
 * torchvision), LAYOUT 1 as [H][D][3] (einops "(h d qkv)").  out is
 * [B, N, H*D].  Cross-attention (NP 2): qkv holds only K and V, as
 * [B, N, 2*H*D], Q is q [B, Nq, H*D] and out [B, Nq, H*D]; for NP 3, q is
 * unused and Nq is N.  The pointers are vk_attention_params' (params.h).
 * bias (read when BIAS) element (image b, head h, row i, key j)
 * is at b*sb + h*sh + i*si + j (a stride 0 broadcasts; with bp > 0, windowed
 * attention's bias, (b % bp)*sb for b); it is multiplied by
 * log2(e) like the scale.  The softmax is computed online in fp32 (running maximum and
 * sum per row, base-2 exponentials with log2(e) folded into the scale), so
 * that any N works with registers bounded by the key block.
 *
 * Rotary position embeddings (ROPE 1 or 2, self-attention only): Q and K of
 * tokens rope_start .. rope_start + R - 1 are rotated before Q K^T by the
 * table rope [2, R, D], or [2, H, R, D] with one per head (rope_heads 1 or H;
 * p.rope, f32): element d of token n becomes x[d] * rope[0, (h,) t, d] +
 * x[partner(d)] * rope[1, (h,) t, d], t = n - rope_start, the partner
 * d + D/2 mod D (ROPE 1, halves) or d xor 1 (ROPE 2, interleaved).
 * attention_tc rotates the Q tile and each block of 64 keys in shared memory
 * once they have landed (fp32, rounded back to T); attention_simt rotates Q
 * in registers and K on its way to shared memory.  ROPE 0 (no table)
 * compiles none of it.
 *
 * attention_tc (f16/bf16, D a multiple of 8, computed over D rounded up to 16): QW warps (4 or 8), 16 query
 * rows each, 16 QW rows per block.  Q, and K and V in chunks of KC keys (all
 * of them when they fit: 197 tokens x 64 fits), live in shared memory,
 * loaded by cp.async in one group per 64 keys so that the first 64 keys are
 * computed on while the rest land; S = Q K^T for 64 keys at a time stays in
 * mma accumulators, is turned into probabilities in registers and fed
 * straight back as the A operand of P V.
 *
 * attention_simt (any type, fp32 math): one query row per thread, 128 per
 * block, keys streamed through shared memory 64 at a time.
 *
 * Grid: (ceil(N / rows per block) * B, H): blockIdx.x is query tile + tiles * image,
 * so that the batch never meets the 65535 limit of the other grid axes. */
#ifndef VK_ATTENTION_CUH
#define VK_ATTENTION_CUH

namespace vk {

/* Element (b, n, head h, d) of part which of a row of NP packed parts: Q
 * (which 0), K (1) or V (2) of qkv; K (0) or V (1) of kv; Q (0) of q. */
template <int LAYOUT, int NP> VK_DEV vk_i64 qkv_index(vk_i64 row, int H, int D, int h, int d, int which)
{
    vk_i64 base = row * NP * H * D;
    if (LAYOUT == 0)
        return base + (vk_i64)which * H * D + h * D + d;
    return base + ((vk_i64)h * D + d) * NP + which;
}

/* Shared-memory rows of a head padded to whole 16-column steps (DP), plus 8
 * elements so that ldmatrix's rows fall on distinct banks. */
template <int D, int KC, int QW = 4> struct attn_tc_smem {
    enum { dp = (D + 15) / 16 * 16, rs = (dp + 8) * 2, bytes = (16 * QW + 2 * KC) * rs };
};

/* Waits until at most p of this thread's cp.async groups are in flight (p <=
 * P; cp.async.wait_group takes a constant). */
template <int P> struct attn_pend {
};
VK_DEV void attn_wait_at_most(int, attn_pend<0>) { vk_cp_async_wait<0>(); }
template <int P> VK_DEV void attn_wait_at_most(int p, attn_pend<P>)
{
    if (p >= P)
        vk_cp_async_wait<P>();
    else
        attn_wait_at_most(p, attn_pend<P - 1>());
}

struct alignas(16) attn_piece {
    vk_u32 w[4];
};

/* Element e of row r of a tile in shared memory at base: rows of rs bytes; or (SW) rows of 128 bytes in the
 * 128-byte swizzle (attention_wg's, as the copy engine writes them), elements 64 and on rs bytes further per 64. */
template <class T, bool SW> VK_DEV T *attn_tile_at(unsigned char *base, int rs, int r, int e)
{
    if (!SW)
        return (T *)(base + r * rs) + e;
    return (T *)(base + (e >> 6) * rs + r * 128 + ((((e & 63) >> 3) ^ (r & 7)) << 4)) + (e & 7);
}

/* Piece ch (16 bytes: elements 8 ch .. 8 ch + 7) of a token's span in the einops layout, NP parts of a head
 * interleaved, element i being (d, part) = divmod(8 ch + i, NP): those of part which go to row r of the tile at
 * dst, with dst2 those of part which + 1 to row r of dst2 (attn_tile_at's layouts). */
template <class T, int NP, bool SW>
VK_DEV void attn_einops_piece(unsigned char *dst, unsigned char *dst2, int rs, int r, const attn_piece &v, int ch,
                              int which)
{
    const T *e = (const T *)&v;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int pos = ch * 8 + i, part = pos % NP, d = pos / NP;
        if (part == which)
            *attn_tile_at<T, SW>(dst, rs, r, d) = e[i];
        else if (dst2 && part == which + 1)
            *attn_tile_at<T, SW>(dst2, rs, r, d) = e[i];
    }
}

/* Copies rows [r0, r0 + nrows) of Q, K or V (part which) for head h of
 * image b into shared memory rows of rs bytes, and with dst2 those of part
 * which + 1 into dst2; rows at or past N become zeros. */
template <class T, int D, int LAYOUT, int NT, int NP>
VK_DEV void attn_load_rows(unsigned char *dst, int rs, const T *qkv, vk_i64 b, int N, int H, int h, int which, int r0,
                           int nrows, unsigned char *dst2 = nullptr)
{
    if (LAYOUT == 0) {
        enum { CH = D * 2 / 16 }; /* 16-byte chunks per row */
        for (int part = 0; part < (dst2 ? 2 : 1); part++)
            for (int c = threadIdx.x; c < nrows * CH; c += NT) {
                int r = c / CH, ch = c % CH, n = r0 + r;
                bool ok = n < N;
                const T *src = qkv + qkv_index<0, NP>(b * N + (ok ? n : 0), H, D, h, ch * 8, which + part);
                vk_cp_async16((part ? dst2 : dst) + r * rs + ch * 16, src, ok);
            }
    } else {
        /* the head's NP parts lie interleaved in one span of a row, D * NP elements from element (h, 0, 0):
         * read it once in 16-byte pieces (attn_einops_piece keeps the elements of part which, and which + 1) */
        enum { CH = D * NP * 2 / 16 };
        static_assert(D % 8 == 0, "a head's span in whole 16-byte pieces");
        for (int c = threadIdx.x; c < nrows * CH; c += NT) {
            int r = c / CH, ch = c % CH, n = r0 + r;
            attn_piece v = {};
            if (n < N)
                v = *(const attn_piece *)(qkv + qkv_index<1, NP>(b * N + n, H, D, h, 0, 0) + ch * 8);
            attn_einops_piece<T, NP, false>(dst, dst2, rs, r, v, ch, which);
        }
    }
}

/* The element of a head that element d is rotated with (ROPE 1: halves, 2: interleaved). */
template <int ROPE, int D> VK_DEV int attn_rope_partner(int d) { return ROPE == 2 ? d ^ 1 : (d + D / 2) % D; }

/* The head's [R, D] tables of rope[0] (cos-like factors, at *cs) and rope[1] (sine-like, at *sn) in the table of
 * rope_heads [R, D] tables each (1: shared by the heads, H: one per head). */
VK_DEV void attn_rope_head(const float *rope, int R, int D, int rope_heads, int h, const float **cs, const float **sn)
{
    *cs = rope + (vk_i64)(rope_heads > 1 ? h : 0) * R * D;
    *sn = *cs + (vk_i64)rope_heads * R * D;
}

/* Rotates in place the rows of a tile in shared memory (rows r0 .. nrows - 1 from base, attn_tile_at's layout, row r
 * holding token n0 + r) whose tokens the head's tables cs, sn [R, D] cover (rope_start <= n0 + r < rope_start +
 * R), thread t of NT taking whole pairs of elements, in fp32, rounding back to T; rows outside the table (zero
 * padding past N among them) are left as they are.  Returns whether any row was rotated: the same in every
 * thread, so that the caller's barrier after it is reached by all or none. */
template <class T, int D, int ROPE, int NT, bool SW = false>
VK_DEV bool attn_rope_tile(unsigned char *base, int rs, const float *cs0, const float *sn0, int R, int rope_start,
                           int n0, int nrows, int t = threadIdx.x, int r0 = 0)
{
    enum { HP = D / 2 }; /* pairs per row */
    const int lo = rope_start - n0 > r0 ? rope_start - n0 : r0; /* rows r0 .. nrows - 1 only */
    const int hi = rope_start + R - n0 < nrows ? rope_start + R - n0 : nrows;
#pragma unroll 1 /* unrolled, it spilled the 8-warp kernel at head size 16 on sm_80 */
    for (int c = lo * HP + t; c < hi * HP; c += NT) {
        const int r = c / HP, i = c % HP;
        const int e0 = ROPE == 2 ? 2 * i : i, e1 = ROPE == 2 ? 2 * i + 1 : i + HP; /* partners of each other */
        T *p0 = attn_tile_at<T, SW>(base, rs, r, e0), *p1 = attn_tile_at<T, SW>(base, rs, r, e1);
        const vk_i64 tr = (vk_i64)(n0 + r - rope_start) * D; /* row n0 + r - rope_start of the tables */
        const float *cs = cs0 + tr, *sn = sn0 + tr;
        const float x0 = vk_get(p0), x1 = vk_get(p1);
        vk_put(p0, x0 * cs[e0] + x1 * sn[e0]);
        vk_put(p1, x1 * cs[e1] + x0 * sn[e1]);
    }
    return lo < hi;
}

/* The bias of (row q, key) in base-2 units, 0 without one. */
template <class TB> VK_DEV float attn_bias(const TB *bias, vk_i64 si, int q, int key)
{
    return bias ? vk_get(bias + q * si + key) * 1.4426950408889634f : 0.0f;
}

/* One block of up to 64 keys' scores s (per 8 keys j, mma.m16n8's C fragment
 * for the warp's rows q and q + 8: keys key0 + 8j + 2 (lane % 4) + {0, 1}, kn
 * of them in use) into probabilities in place, online: scaled to base 2,
 * biased, keys past the kn masked; the rows' running maxima m and sums l
 * updated and the DF fragments of o rescaled to the new maxima.  Shared by
 * the mma.sync and the wgmma kernel (whose accumulators have this layout). */
template <int DF, class TB>
VK_DEV void attn_softmax_block(float (*s)[4], float (*o)[4], float *m, float *l, int kn, int key0, int q, int Nq,
                               float scale_log2, const TB *bias, vk_i64 si)
{
    const int lane = threadIdx.x & 31;
    /* scale, mask keys past the block's kn, row maxima over the quad sharing a row; a block of 64 keys
     * in use without a bias (all but the last of a ViT's) needs no index arithmetic */
    float mx[2] = {-vk_inf(), -vk_inf()};
    if (kn >= 64 && !bias) {
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                s[j][e] *= scale_log2;
                mx[e >> 1] = fmaxf(mx[e >> 1], s[j][e]);
            }
    } else {
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int k = j * 8 + (lane & 3) * 2 + (e & 1), qe = q + (e >> 1) * 8;
                s[j][e] = k < kn ? s[j][e] * scale_log2 + (qe < Nq ? attn_bias(bias, si, qe, key0 + k) : 0.0f)
                                 : -vk_inf();
                mx[e >> 1] = fmaxf(mx[e >> 1], s[j][e]);
            }
    }
    float alpha[2], rs[2] = {0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < 2; i++) {
        mx[i] = fmaxf(mx[i], vk_shfl_xor(mx[i], 1));
        mx[i] = fmaxf(mx[i], vk_shfl_xor(mx[i], 2));
        float mn = fmaxf(m[i], mx[i]); /* finite: key key0 is in use */
        alpha[i] = vk_exp2(m[i] - mn);
        m[i] = mn;
    }
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            s[j][e] = vk_exp2(s[j][e] - m[e >> 1]);
            rs[e >> 1] += s[j][e];
        }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        rs[i] += vk_shfl_xor(rs[i], 1);
        rs[i] += vk_shfl_xor(rs[i], 2);
        l[i] = l[i] * alpha[i] + rs[i];
    }
#pragma unroll
    for (int j = 0; j < DF; j++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            o[j][e] *= alpha[e >> 1];
}

/* The probabilities of keys 16k .. 16k + 15 (s as attn_softmax_block leaves
 * them) as mma.m16n8k16's A fragment: key fragments 2k and 2k + 1. */
template <class T> VK_DEV void attn_p_frag(vk_u32 *pa, const float (*s)[4], int k)
{
    pa[0] = vk_pack2(s[2 * k][0], s[2 * k][1], T());
    pa[1] = vk_pack2(s[2 * k][2], s[2 * k][3], T());
    pa[2] = vk_pack2(s[2 * k + 1][0], s[2 * k + 1][1], T());
    pa[3] = vk_pack2(s[2 * k + 1][2], s[2 * k + 1][3], T());
}

/* Stores rows q and q + 8 (those below Nq) of head h's output o (DF
 * fragments, the head's D columns of them) of image b, divided by the rows'
 * sums l and multiplied by post_scale. */
template <class T, int D, int DF>
VK_DEV void attn_store(T *out, const float (*o)[4], const float *l, float post_scale, vk_i64 b, int q, int Nq, int HD,
                       int h)
{
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        if (q + i * 8 >= Nq)
            continue;
        float inv = post_scale / l[i];
        T *dst = out + (b * Nq + q + i * 8) * HD + h * D;
#pragma unroll
        for (int j = 0; j < DF; j++)
            if (j * 8 < D) /* the padding columns of O are not the head's */
                vk_put2(dst + j * 8 + (lane & 3) * 2, o[j][2 * i] * inv, o[j][2 * i + 1] * inv);
    }
}

template <class T, int D, int LAYOUT, int KC, int NP, bool BIAS, class TB, int QW = 4, int ROPE = 0, int NTH = 32 * QW>
VK_DEV void attention_tc(const vk_attention_params &p, int N, int H, float scale_log2, float post_scale, vk_i64 sb,
                         vk_i64 sh, vk_i64 si, int Nq, int R = 0, int rope_start = 0, int rope_heads = 1,
                         vk_i64 bp = 0)
{
    const T *qkv = (const T *)p.qkv, *qsrc = NP == 2 ? (const T *)p.q : nullptr;
    T *out = (T *)p.y;
    const TB *bias = BIAS ? (const TB *)p.bias : nullptr;
    /* D not a multiple of 16 (72, 88): the products run over DP columns, those past D zeros in shared memory */
    enum { DP = attn_tc_smem<D, KC, QW>::dp, RS = attn_tc_smem<D, KC, QW>::rs, DK = DP / 16, DF = DP / 8 };
    enum { QR = 16 * QW, NT = NTH, NC = KC / 64 }; /* NT: every thread of the block loads, QW warps compute */
    static_assert(D % 8 == 0 && KC % 64 == 0, "D a multiple of 8, KC of 64");
    static_assert(NTH >= 32 * QW && NTH % 32 == 0, "at least QW warps");
    static_assert(QW == 4 || QW == 8, "4 or 8 warps");
    static_assert(ROPE == 0 || (NP == 3 && (ROPE == 1 || ROPE == 2)), "a rotary table: self-attention, pairing 1 or 2");
    unsigned char *Qs = vk_smem, *Ks = Qs + QR * RS, *Vs = Ks + KC * RS;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (DP != D) /* the 8 padding columns of every row: zeros, which the loads never write */
        for (int r = threadIdx.x; r < QR + 2 * KC; r += NT)
            *(attn_piece *)(Qs + r * RS + D * 2) = attn_piece{};
    const int tiles = (Nq + QR - 1) / QR, q0 = (int)(blockIdx.x % tiles) * QR, h = blockIdx.y;
    const vk_i64 b = blockIdx.x / tiles;
    if (bias)
        bias += (bp ? b % bp : b) * sb + h * sh; /* bp: one bias row per window of bp */
    const float *rcs = nullptr, *rsn = nullptr; /* the head's rotary tables */
    if (ROPE)
        attn_rope_head(p.rope, R, D, rope_heads, h, &rcs, &rsn);

    /* Q lands with the first group of keys */
    if (NP == 2)
        attn_load_rows<T, D, 0, NT, 1>(Qs, RS, qsrc, b, Nq, H, h, 0, q0, QR);
    else
        attn_load_rows<T, D, LAYOUT, NT, 3>(Qs, RS, qkv, b, N, H, h, 0, q0, QR);

    vk_u32 qf[DK][4];
    float o[DF][4], m[2], l[2];
#pragma unroll
    for (int j = 0; j < DF; j++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            o[j][e] = 0.0f;
    m[0] = m[1] = -vk_inf();
    l[0] = l[1] = 0.0f;

    for (int c0 = 0; c0 < N; c0 += KC) {
        __syncthreads(); /* the previous chunk is no longer read */
        for (int g = 0; g < NC; g++) { /* one cp.async group per 64 keys */
            attn_load_rows<T, D, LAYOUT, NT, NP>(Ks + g * 64 * RS, RS, qkv, b, N, H, h, NP - 2, c0 + g * 64, 64,
                                                 Vs + g * 64 * RS); /* K and V, the einops span read once */
            vk_cp_async_commit();
        }
        for (int kb = 0; kb < KC && c0 + kb < N; kb += 64) {
            attn_wait_at_most(NC - 1 - kb / 64, attn_pend<NC - 1>()); /* this thread's keys kb.. landed */
            __syncthreads();                                /* and every other thread's */
            if (ROPE) {
                /* rotate Q (landed with the first keys) and these keys in place, then let every warp see them */
                const bool rq = c0 == 0 && kb == 0 &&
                                attn_rope_tile<T, D, ROPE, NT>(Qs, RS, rcs, rsn, R, rope_start, q0, QR);
                const bool rk =
                    attn_rope_tile<T, D, ROPE, NT>(Ks + kb * RS, RS, rcs, rsn, R, rope_start, c0 + kb, 64);
                if (rq || rk)
                    __syncthreads();
            }
            if (warp >= QW || q0 + warp * 16 >= Nq)
                continue; /* a warp past the last query, or one only loading: the barriers */
            const int kn = N - c0 - kb; /* keys of this block of 64 in use (16-key steps past them skipped) */
            if (c0 == 0 && kb == 0) {
#pragma unroll
                for (int k = 0; k < DK; k++)
                    vk_ldsm_x4(qf[k], Qs + (warp * 16 + (lane & 15)) * RS + k * 32 + (lane >> 4) * 16);
            }
            float s[8][4];
#pragma unroll
            for (int j = 0; j < 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    s[j][e] = 0.0f;
#pragma unroll
            for (int k = 0; k < DK; k++)
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    if (j * 16 >= kn)
                        break;
                    vk_u32 r[4];
                    vk_ldsm_x4(r, Ks + (kb + j * 16 + (lane & 7) + ((lane >> 4) << 3)) * RS + k * 32 +
                                      ((lane >> 3) & 1) * 16);
                    vk_mma(s[2 * j], qf[k], r, T());
                    vk_mma(s[2 * j + 1], qf[k], r + 2, T());
                }
            attn_softmax_block<DF>(s, o, m, l, kn, c0 + kb, q0 + warp * 16 + (lane >> 2), Nq, scale_log2, bias, si);
            /* O += P V: the accumulators of key fragments 2k and 2k+1 are the A operand of k step k */
#pragma unroll
            for (int k = 0; k < 4; k++) {
                if (k * 16 >= kn)
                    break; /* probabilities of keys past N: zeros */
                vk_u32 pa[4];
                attn_p_frag<T>(pa, s, k);
#pragma unroll
                for (int j = 0; j < DK; j++) {
                    vk_u32 r[4];
                    vk_ldsm_x4_t(r, Vs + (kb + k * 16 + (lane & 15)) * RS + j * 32 + (lane >> 4) * 16);
                    vk_mma(o[2 * j], pa, r, T());
                    vk_mma(o[2 * j + 1], pa, r + 2, T());
                }
            }
        }
    }
    vk_cp_async_wait<0>(); /* groups of keys past N, never waited for */

    if (warp < QW)
        attn_store<T, D, DF>(out, o, l, post_scale, b, q0 + warp * 16 + (lane >> 2), Nq, H * D, h);
}

/* ---- Hopper (sm_90a): attention on wgmma, fed by the tensor memory accelerator ----
 *
 * attention_wg (f16/bf16, self-attention of the [3][H][D] or the einops
 * layout or cross-attention, head size a multiple of 16 up to 128): 128 query rows a
 * block, as attention_tc's 8-warp grid.  Warpgroups 0 and 1 compute 64 rows
 * each; the warp after them produces: its lane 0 issues bulk tensor copies
 * (boxes of 64 rows x 64 elements, 128-byte swizzle) of the block's Q (mq:
 * qkv, or q for cross-attention) once, and of K and V (mkv) 64 keys at a time
 * into a ring of WS stages, with gemm_tma's full/empty mbarrier protocol
 * (empty[s] takes the 8 consumer warps' arrivals).  A row of 128 bytes is 64
 * elements of the head, so a head above 64 has two column blocks a tile;
 * the columns of a box past the head (the next head's, or zeros past the
 * matrix) are never read: S's k steps stop at D, P V's N is D.
 *
 * Per block of 64 keys a consumer warpgroup runs S = Q K^T on wgmma (both
 * K-major in shared memory, over 16, 32, 48 or 64 keys: the last block of
 * 197 tokens pays for 16 keys, not 64), turns S into probabilities in
 * registers (attn_softmax_block, shared with attention_tc: the accumulators
 * of wgmma and mma.m16n8 have one layout), and runs O += P V on wgmma with P
 * from registers (the A fragment of mma.m16n8k16, attn_p_frag) and V read
 * MN-major (imm-trans-b) from its stage: key rows of 128 bytes, 8-row groups
 * 1024 bytes apart (SBO), the head's columns past 64 one column block on
 * (LBO).  It then releases the stage.
 *
 * The maps are [images * tokens, columns] matrices, so the rows of a last
 * block past N are the next image's tokens (zeros after the last image).
 * Their scores are masked; their V rows, multiplied by zero probabilities,
 * must not be Inf or NaN from another image: the producer warp waits for the
 * last block, zeroes its V rows from N to the end of its last 16-key step
 * (generic stores, then fence.proxy.async for wgmma's reads) and arrives on
 * tail, which the consumers wait for too.
 *
 * With a rotary table (ROPE 1 or 2) the producer is a warpgroup: its last
 * warp loads as above, the other three rotate, in place in the swizzled
 * tiles (attn_rope_tile, SW), Q once it has landed and each key block's K
 * as it lands (zeroing the last one's V rows past N too), then fence the
 * proxy and arrive on qready / ready[s], which the consumers wait for after
 * full[s].  The rotation of one block runs under the consumers' work on the
 * block before.
 *
 * The einops layout ([H][D][3]: LAYOUT 1, self-attention) has no box the
 * copy engine could load: there all four producer warps prepare, each
 * thread loading whole rows (the head's span read once in 16-byte pieces,
 * Q, or K and V together, attn_wg_einops_row) into a stage that empty[s]
 * shows free, rows past N as zeros, rotating its own rows, then ready[s].
 *
 * A warpgroup whose 64 rows are all past the queries (Nq <= 64 leaves the
 * second so) only waits for each key block and releases it.
 *
 * Other targets run attention_tc with 8 computing warps over the same grid,
 * the ninth loading (NTH 288), K and V in chunks of KC keys; the kernel is
 * declared with VK_KERNEL_TMA, the maps there unused. */
template <int D, int WS, int PREP = 0, int TMA = 1> struct attn_wg_smem {
    enum {
        DB = (D + 63) / 64,  /* column blocks of 64 elements */
        q = 128 * 128 * DB,  /* Q: 128 rows a column block */
        kv = 64 * 128 * DB,  /* K or V of 64 keys */
        stage = 2 * kv,
        bytes = 1024 + q + WS * stage + (3 * WS + 3) * 8, /* full, empty, ready; qbar, tail, qready */
        pw = PREP ? 4 : 1,   /* producer warps: preparing ones (three, or four without TMA) and a loading one */
        pt = PREP ? 32 * (pw - TMA) : 0, /* preparing threads */
        threads = 256 + 32 * pw
    };
};

#if VK_SM90A
/* The descriptor of an MN-major wgmma operand at smem in the 128-byte swizzle:
 * rows of k 128 bytes long in atoms of 8 rows (SBO 1024), the next 64
 * elements of N lbo bytes on. */
VK_DEV unsigned long long attn_mn_desc(const void *smem, unsigned lbo)
{
    unsigned long long a = vk_smem_addr(smem);
    return ((a & 0x3ffff) >> 4) | ((unsigned long long)(lbo >> 4) << 16) | ((unsigned long long)(1024 >> 4) << 32) |
           (1ull << 62);
}

/* Zeroes rows r0 .. r0 + rows - 1 of a tile of DB column blocks of 64 rows of 128 bytes (the 128-byte
 * swizzle: whole rows), thread t of nt. */
template <int DB> VK_DEV void attn_wg_zero_rows(unsigned char *tile, int r0, int rows, int t, int nt)
{
    for (int i = t; i < rows * 8 * DB; i += nt) /* 16-byte chunk ch of row r of column block d */
        *(attn_piece *)(tile + i / 8 % DB * 64 * 128 + (r0 + i / (8 * DB)) * 128 + i % 8 * 16) = attn_piece{};
}

/* sc (the accumulators of n keys, 16 <= n <= 64 rounded up to 16) += Q's 64 rows at qa times K's rows at ka, 16
 * elements of the head (K-major, 128-byte swizzle); kn keys in use choose the shape. */
template <class T> VK_DEV void attn_wg_qk(float *sc, const unsigned char *qa, const unsigned char *ka, int kn)
{
    unsigned long long da = wg_desc(qa, 1024, true), db = wg_desc(ka, 1024, true);
    if (kn > 48)
        vk_wgmma(sc, da, db, T(), vk_wgn<64>());
    else if (kn > 32)
        vk_wgmma(sc, da, db, T(), vk_wgn<48>());
    else if (kn > 16)
        vk_wgmma(sc, da, db, T(), vk_wgn<32>());
    else
        vk_wgmma(sc, da, db, T(), vk_wgn<16>());
}
#endif

/* Row r of a tile of attention_wg's (attn_tile_at's swizzled layout, column blocks rs bytes apart): the head's
 * part which of token n of image b from the einops [H][D][3] layout, its span read once in 16-byte pieces; with
 * dst2, part which + 1 into the same row of dst2; zeros where n is not below N. */
template <class T, int D>
VK_DEV void attn_wg_einops_row(unsigned char *dst, unsigned char *dst2, int rs, int r, const T *qkv, vk_i64 b, int n,
                               int N, int H, int h, int which)
{
    const attn_piece *src = (const attn_piece *)(qkv + qkv_index<1, 3>(b * N + (n < N ? n : 0), H, D, h, 0, 0));
    for (int ch = 0; ch < D * 3 / 8; ch++) {
        attn_piece v = {};
        if (n < N)
            v = src[ch];
        attn_einops_piece<T, 3, true>(dst, dst2, rs, r, v, ch, which);
    }
}

template <class T, int D, int NP, bool BIAS, class TB, int WS, int KC, int ROPE = 0, int LAYOUT = 0>
VK_DEV void attention_wg(const vk_tmap *mkv, const vk_tmap *mq, const vk_attention_params &p, int N, int H,
                         float scale_log2, float post_scale, vk_i64 sb, vk_i64 sh, vk_i64 si, int Nq, int R = 0,
                         int rope_start = 0, int rope_heads = 1, vk_i64 bp = 0)
{
#if VK_SM90A
    enum { PREP = ROPE || LAYOUT == 1, TMA = LAYOUT == 0 };
    typedef attn_wg_smem<D, WS, PREP, TMA> SM;
    enum { DB = SM::DB, QB = 128 * 128, KB = 64 * 128, PT = SM::pt };
    static_assert(sizeof(T) == 2 && D % 16 == 0 && D <= 128 && (NP == 2 || NP == 3), "f16/bf16, heads of 16k <= 128");
    static_assert((ROPE == 0 && LAYOUT == 0) || NP == 3, "a rotary table or the einops layout: self-attention");
    T *out = (T *)p.y;
    const TB *bias = BIAS ? (const TB *)p.bias : nullptr;
    unsigned char *smem = vk_smem + ((1024 - (vk_smem_addr(vk_smem) & 1023)) & 1023);
    unsigned char *Qs = smem, *St = Qs + SM::q;
    unsigned long long *full = (unsigned long long *)(St + WS * SM::stage), *empty = full + WS, *ready = empty + WS,
                       *qbar = ready + WS, *tail = qbar + 1, *qready = tail + 1;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2;
    const int tiles = (Nq + 127) / 128, q0 = (int)(blockIdx.x % tiles) * 128, h = blockIdx.y;
    const int b = (int)(blockIdx.x / tiles);
    const int nch = (N + 63) / 64, kn_last = N - (nch - 1) * 64;
    const bool zero_tail = kn_last % 16 != 0; /* the last 16-key step runs past N */
    if (tid == 0) {
        for (int s = 0; s < WS; s++) {
            vk_mbar_init(&full[s], 1);
            vk_mbar_init(&empty[s], 8);
            if (PREP)
                vk_mbar_init(&ready[s], PT);
        }
        vk_mbar_init(qbar, 1);
        if (!PREP)
            vk_mbar_init(tail, 32);
        if (PREP)
            vk_mbar_init(qready, PT);
        vk_fence_mbar_init();
        if (TMA) {
            vk_prefetch_tmap(mkv);
            vk_prefetch_tmap(mq);
        }
    }
    __syncthreads();
    const float *rcs = nullptr, *rsn = nullptr; /* the head's rotary tables */
    if (ROPE)
        attn_rope_head(p.rope, R, D, rope_heads, h, &rcs, &rsn);
    if (wg == 2 && PREP && tid < 256 + PT) {
        /* the preparing warps: Q once, then each key block, made visible to wgmma and announced on qready /
         * ready[s].  With TMA: rotated as it lands (the last one's V rows past N zeroed); einops: loaded into
         * a free stage a row a thread (rows past N zeros), each row rotated by the thread that wrote it */
        const int t = tid - 256;
        if (TMA) {
            vk_mbar_wait(qbar, 0);
            attn_rope_tile<T, D, ROPE, PT, true>(Qs, QB, rcs, rsn, R, rope_start, q0, 128, t);
        } else {
            for (int r = t; r < 128; r += PT) {
                attn_wg_einops_row<T, D>(Qs, nullptr, QB, r, (const T *)p.qkv, b, q0 + r, N, H, h, 0);
                if (ROPE)
                    attn_rope_tile<T, D, ROPE, 1, true>(Qs, QB, rcs, rsn, R, rope_start, q0, r + 1, 0, r);
            }
        }
        vk_fence_proxy_async();
        vk_mbar_arrive(qready);
        for (int c = 0; c < nch; c++) {
            const int s = c % WS;
            unsigned char *Ks = St + s * SM::stage;
            if (TMA) {
                vk_mbar_wait(&full[s], (c / WS) & 1);
                attn_rope_tile<T, D, ROPE, PT, true>(Ks, KB, rcs, rsn, R, rope_start, c * 64, 64, t);
                if (c == nch - 1 && zero_tail)
                    attn_wg_zero_rows<DB>(Ks + SM::kv, kn_last, 16 - kn_last % 16, t, PT);
            } else {
                vk_mbar_wait(&empty[s], ((c / WS) & 1) ^ 1);
                for (int r = t; r < 64; r += PT) {
                    attn_wg_einops_row<T, D>(Ks, Ks + SM::kv, KB, r, (const T *)p.qkv, b, c * 64 + r, N, H, h, 1);
                    if (ROPE)
                        attn_rope_tile<T, D, ROPE, 1, true>(Ks, KB, rcs, rsn, R, rope_start, c * 64, r + 1, 0, r);
                }
            }
            vk_fence_proxy_async();
            vk_mbar_arrive(&ready[s]);
        }
        return;
    }
    if (wg == 2) { /* the loading warp */
        const int kcol = (NP - 2) * H * D + h * D, vcol = kcol + H * D; /* K's and V's columns of the head */
        if (lane == 0) {
            vk_mbar_expect_tx(qbar, SM::q);
            for (int r = 0; r < 2; r++)
#pragma unroll
                for (int d = 0; d < DB; d++)
                    vk_tma_load2(Qs + d * QB + r * 64 * 128, mq, h * D + d * 64, b * Nq + q0 + r * 64, qbar);
            for (int c = 0; c < nch; c++) {
                const int s = c % WS;
                unsigned char *Ks = St + s * SM::stage, *Vs = Ks + SM::kv;
                vk_mbar_wait(&empty[s], ((c / WS) & 1) ^ 1);
                vk_mbar_expect_tx(&full[s], SM::stage);
#pragma unroll
                for (int d = 0; d < DB; d++) {
                    vk_tma_load2(Ks + d * KB, mkv, kcol + d * 64, b * N + c * 64, &full[s]);
                    vk_tma_load2(Vs + d * KB, mkv, vcol + d * 64, b * N + c * 64, &full[s]);
                }
            }
        }
        if (!PREP && zero_tail) {
            const int c = nch - 1, s = c % WS;
            vk_mbar_wait(&full[s], (c / WS) & 1);
            attn_wg_zero_rows<DB>(St + s * SM::stage + SM::kv, kn_last, 16 - kn_last % 16, lane, 32);
            vk_fence_proxy_async();
            vk_mbar_arrive(tail);
        }
        return;
    }

    const int qr = q0 + wg * 64 + (warp & 3) * 16 + (lane >> 2); /* this thread's rows qr and qr + 8 */
    const bool idle = q0 + wg * 64 >= Nq; /* rows all past the queries: the barriers only */
    if (bias)
        bias += (bp ? b % bp : b) * sb + h * sh; /* bp: one bias row per window of bp */
    float o[D / 8][4], m[2] = {-vk_inf(), -vk_inf()}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < D / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            o[j][e] = 0.0f;
    vk_mbar_wait(PREP ? qready : qbar, 0);
    for (int c = 0; c < nch; c++) {
        const int s = c % WS, kn = c == nch - 1 ? kn_last : 64;
        vk_mbar_wait(PREP ? &ready[s] : &full[s], (c / WS) & 1);
        if (idle) { /* released once ready (an earlier release could count towards the stage's previous phase) */
            if (lane == 0)
                vk_mbar_arrive(&empty[s]);
            continue;
        }
        if (!PREP && c == nch - 1 && zero_tail)
            vk_mbar_wait(tail, 0);
        const unsigned char *Ks = St + s * SM::stage, *Vs = Ks + SM::kv;
        float sc[8][4];
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                sc[j][e] = 0.0f;
        vk_wg_fence();
#pragma unroll
        for (int ks = 0; ks < D / 16; ks++)
            attn_wg_qk<T>(sc[0], Qs + ks / 4 * QB + wg * 64 * 128 + ks % 4 * 32, Ks + ks / 4 * KB + ks % 4 * 32, kn);
        vk_wg_commit();
        vk_wg_wait<0>();
        attn_softmax_block<D / 8>(sc, o, m, l, kn, c * 64, qr, Nq, scale_log2, bias, si);
        vk_wg_fence(); /* o rescaled and P written by this thread before the wgmma reading them */
#pragma unroll
        for (int k = 0; k < 4; k++) {
            if (k * 16 >= kn)
                break;
            vk_u32 pa[4];
            attn_p_frag<T>(pa, sc, k);
            vk_wgmma_rs(o[0], pa, attn_mn_desc(Vs + k * 16 * 128, KB), T(), vk_wgn<D>());
        }
        vk_wg_commit();
        vk_wg_wait<0>();
        if (lane == 0) /* K and V of this stage read */
            vk_mbar_arrive(&empty[s]);
    }
    if (!idle)
        attn_store<T, D, D / 8>(out, o, l, post_scale, b, qr, Nq, H * D, h);
#else
    (void)mkv, (void)mq;
    enum { NTH = attn_wg_smem<D, WS, ROPE || LAYOUT == 1, LAYOUT == 0>::threads };
    attention_tc<T, D, LAYOUT, KC, NP, BIAS, TB, 8, ROPE, NTH>(p, N, H, scale_log2, post_scale, sb, sh, si, Nq, R,
                                                              rope_start, rope_heads, bp);
#endif
}

enum { ATTN_SIMT_ROWS = 128, ATTN_SIMT_KEYS = 64 };

template <int D> struct attn_simt_smem {
    enum { bytes = 2 * ATTN_SIMT_KEYS * D * 4 };
};

template <class T, int D, int LAYOUT, int NP, bool BIAS, class TB, int ROPE = 0>
VK_DEV void attention_simt(const vk_attention_params &p, int N, int H, float scale_log2, float post_scale, vk_i64 sb,
                           vk_i64 sh, vk_i64 si, int Nq, int R = 0, int rope_start = 0, int rope_heads = 1,
                         vk_i64 bp = 0)
{
    static_assert(ROPE == 0 || (NP == 3 && D % 2 == 0 && (ROPE == 1 || ROPE == 2)),
                  "a rotary table: self-attention, an even head size, pairing 1 or 2");
    const T *qkv = (const T *)p.qkv, *qsrc = NP == 2 ? (const T *)p.q : nullptr;
    T *out = (T *)p.y;
    const TB *bias = BIAS ? (const TB *)p.bias : nullptr;
    float *Ks = (float *)vk_smem, *Vs = Ks + ATTN_SIMT_KEYS * D;
    const int tiles = (Nq + ATTN_SIMT_ROWS - 1) / ATTN_SIMT_ROWS, h = blockIdx.y;
    const int q = (int)(blockIdx.x % tiles) * ATTN_SIMT_ROWS + threadIdx.x;
    const vk_i64 b = blockIdx.x / tiles;
    const bool active = q < Nq;
    if (bias)
        bias += (bp ? b % bp : b) * sb + h * sh; /* bp: one bias row per window of bp */
    /* this row's query rotated (self-attention: query q is token q), by row tq of the head's tables */
    const float *rcs = nullptr, *rsn = nullptr;
    if (ROPE)
        attn_rope_head(p.rope, R, D, rope_heads, h, &rcs, &rsn);
    const int tq = q - rope_start;
    const bool qrot = ROPE && active && tq >= 0 && tq < R;
    float qv[D], o[D], m = -vk_inf(), l = 0.0f;
#pragma unroll
    for (int d = 0; d < D; d++) {
        const T *qe = NP == 2 ? qsrc + qkv_index<0, 1>(b * Nq + q, H, D, h, d, 0)
                              : qkv + qkv_index<LAYOUT, 3>(b * N + q, H, D, h, d, 0);
        float x = active ? vk_get(qe) : 0.0f;
        if (ROPE && qrot)
            x = x * rcs[(vk_i64)tq * D + d] +
                vk_get(qkv + qkv_index<LAYOUT, 3>(b * N + q, H, D, h, attn_rope_partner<ROPE, D>(d), 0)) *
                    rsn[(vk_i64)tq * D + d];
        qv[d] = x * scale_log2;
        o[d] = 0.0f;
    }
    for (int c0 = 0; c0 < N; c0 += ATTN_SIMT_KEYS) {
        __syncthreads();
        for (int c = threadIdx.x; c < ATTN_SIMT_KEYS * D; c += ATTN_SIMT_ROWS) {
            int r = c / D, d = c % D, n = c0 + r;
            bool ok = n < N;
            float k = ok ? vk_get(qkv + qkv_index<LAYOUT, NP>(b * N + n, H, D, h, d, NP - 2)) : 0.0f;
            const int t = n - rope_start; /* row t of the head's tables; keys past N stay zeros */
            if (ROPE && ok && t >= 0 && t < R)
                k = k * rcs[(vk_i64)t * D + d] +
                    vk_get(qkv + qkv_index<LAYOUT, NP>(b * N + n, H, D, h, attn_rope_partner<ROPE, D>(d), NP - 2)) *
                        rsn[(vk_i64)t * D + d];
            Ks[c] = k;
            Vs[c] = ok ? vk_get(qkv + qkv_index<LAYOUT, NP>(b * N + n, H, D, h, d, NP - 1)) : 0.0f;
        }
        __syncthreads();
        int nk = N - c0 < ATTN_SIMT_KEYS ? N - c0 : ATTN_SIMT_KEYS;
        for (int j = 0; j < nk; j++) {
            float s = 0.0f;
#pragma unroll
            for (int d = 0; d < D; d++)
                s += qv[d] * Ks[j * D + d];
            if (active)
                s += attn_bias(bias, si, q, c0 + j);
            if (s > m) {
                float c = vk_exp2(m - s);
                l *= c;
#pragma unroll
                for (int d = 0; d < D; d++)
                    o[d] *= c;
                m = s;
            }
            float pr = vk_exp2(s - m);
            l += pr;
#pragma unroll
            for (int d = 0; d < D; d++)
                o[d] += pr * Vs[j * D + d];
        }
    }
    if (!active)
        return;
    float inv = post_scale / l;
    T *dst = out + (b * Nq + q) * (vk_i64)(H * D) + h * D;
#pragma unroll
    for (int d = 0; d < D; d++)
        vk_put(dst + d, o[d] * inv);
}

} /* namespace vk */

#endif
