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

/* Copies rows [r0, r0 + nrows) of Q, K or V for head h of image b into
 * shared memory rows of rs bytes; rows at or past N become zeros. */
template <class T, int D, int LAYOUT, int NT, int NP>
VK_DEV void attn_load_rows(unsigned char *dst, int rs, const T *qkv, vk_i64 b, int N, int H, int h, int which, int r0,
                           int nrows)
{
    if (LAYOUT == 0) {
        enum { CH = D * 2 / 16 }; /* 16-byte chunks per row */
        for (int c = threadIdx.x; c < nrows * CH; c += NT) {
            int r = c / CH, ch = c % CH, n = r0 + r;
            bool ok = n < N;
            const T *src = qkv + qkv_index<0, NP>(b * N + (ok ? n : 0), H, D, h, ch * 8, which);
            vk_cp_async16(dst + r * rs + ch * 16, src, ok);
        }
    } else {
        /* the head's NP parts lie interleaved in one span of a row, D * NP elements from element (h, 0, 0):
         * read it in 16-byte pieces and keep the elements of part `which`, each piece's element i being
         * (d, part) = divmod(8 ch + i, NP) */
        enum { CH = D * NP * 2 / 16 };
        static_assert(D % 8 == 0, "a head's span in whole 16-byte pieces");
        for (int c = threadIdx.x; c < nrows * CH; c += NT) {
            int r = c / CH, ch = c % CH, n = r0 + r;
            T *row = (T *)(dst + r * rs);
            attn_piece v = {};
            if (n < N)
                v = *(const attn_piece *)(qkv + qkv_index<1, NP>(b * N + n, H, D, h, 0, 0) + ch * 8);
            const T *e = (const T *)&v;
#pragma unroll
            for (int i = 0; i < 8; i++) {
                int pos = ch * 8 + i;
                if (pos % NP == which)
                    row[pos / NP] = e[i];
            }
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

/* Rotates in place the rows of a tile in shared memory (nrows rows of rs bytes from base, row r holding token
 * n0 + r) whose tokens the head's tables cs, sn [R, D] cover (rope_start <= n0 + r < rope_start + R), each thread
 * whole pairs of elements, in fp32, rounding back to T; rows outside the table (zero padding past N among them)
 * are left as they are.  Returns whether any row was rotated: the same in every thread, so that the caller's
 * barrier after it is reached by all or none. */
template <class T, int D, int ROPE, int NT>
VK_DEV bool attn_rope_tile(unsigned char *base, int rs, const float *cs0, const float *sn0, int R, int rope_start,
                           int n0, int nrows)
{
    enum { HP = D / 2 }; /* pairs per row */
    const int lo = rope_start - n0 > 0 ? rope_start - n0 : 0;
    const int hi = rope_start + R - n0 < nrows ? rope_start + R - n0 : nrows;
#pragma unroll 1 /* unrolled, it spilled the 8-warp kernel at head size 16 on sm_80 */
    for (int c = lo * HP + threadIdx.x; c < hi * HP; c += NT) {
        const int r = c / HP, i = c % HP;
        const int e0 = ROPE == 2 ? 2 * i : i, e1 = ROPE == 2 ? 2 * i + 1 : i + HP; /* partners of each other */
        T *row = (T *)(base + r * rs);
        const vk_i64 t = (vk_i64)(n0 + r - rope_start) * D; /* row n0 + r - rope_start of the tables */
        const float *cs = cs0 + t, *sn = sn0 + t;
        const float x0 = vk_get(row + e0), x1 = vk_get(row + e1);
        vk_put(row + e0, x0 * cs[e0] + x1 * sn[e0]);
        vk_put(row + e1, x1 * cs[e1] + x0 * sn[e1]);
    }
    return lo < hi;
}

/* The bias of (row q, key) in base-2 units, 0 without one. */
template <class TB> VK_DEV float attn_bias(const TB *bias, vk_i64 si, int q, int key)
{
    return bias ? vk_get(bias + q * si + key) * 1.4426950408889634f : 0.0f;
}

template <class T, int D, int LAYOUT, int KC, int NP, bool BIAS, class TB, int QW = 4, int ROPE = 0>
VK_DEV void attention_tc(const vk_attention_params &p, int N, int H, float scale_log2, float post_scale, vk_i64 sb,
                         vk_i64 sh, vk_i64 si, int Nq, int R = 0, int rope_start = 0, int rope_heads = 1,
                         vk_i64 bp = 0)
{
    const T *qkv = (const T *)p.qkv, *qsrc = NP == 2 ? (const T *)p.q : nullptr;
    T *out = (T *)p.y;
    const TB *bias = BIAS ? (const TB *)p.bias : nullptr;
    /* D not a multiple of 16 (72, 88): the products run over DP columns, those past D zeros in shared memory */
    enum { DP = attn_tc_smem<D, KC, QW>::dp, RS = attn_tc_smem<D, KC, QW>::rs, DK = DP / 16, DF = DP / 8 };
    enum { QR = 16 * QW, NT = 32 * QW, NC = KC / 64 };
    static_assert(D % 8 == 0 && KC % 64 == 0, "D a multiple of 8, KC of 64");
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
            attn_load_rows<T, D, LAYOUT, NT, NP>(Ks + g * 64 * RS, RS, qkv, b, N, H, h, NP - 2, c0 + g * 64, 64);
            attn_load_rows<T, D, LAYOUT, NT, NP>(Vs + g * 64 * RS, RS, qkv, b, N, H, h, NP - 1, c0 + g * 64, 64);
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
            if (q0 + warp * 16 >= Nq)
                continue; /* a warp past the last query: only the barriers */
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
            /* scale, mask keys past N, row maxima over the quad sharing a row; a block of 64 keys
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
                        int key = c0 + kb + j * 8 + (lane & 3) * 2 + (e & 1);
                        int q = q0 + warp * 16 + (lane >> 2) + (e >> 1) * 8;
                        s[j][e] = key < N ? s[j][e] * scale_log2 + (q < Nq ? attn_bias(bias, si, q, key) : 0.0f)
                                          : -vk_inf();
                        mx[e >> 1] = fmaxf(mx[e >> 1], s[j][e]);
                    }
            }
            float alpha[2], rs[2] = {0.0f, 0.0f};
#pragma unroll
            for (int i = 0; i < 2; i++) {
                mx[i] = fmaxf(mx[i], vk_shfl_xor(mx[i], 1));
                mx[i] = fmaxf(mx[i], vk_shfl_xor(mx[i], 2));
                float mn = fmaxf(m[i], mx[i]); /* finite: key c0 + kb < N is in this block */
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
            /* O += P V: the accumulators of key fragments 2k and 2k+1 are the A operand of k step k */
#pragma unroll
            for (int k = 0; k < 4; k++) {
                if (k * 16 >= kn)
                    break; /* probabilities of keys past N: zeros */
                vk_u32 pa[4];
                pa[0] = vk_pack2(s[2 * k][0], s[2 * k][1], T());
                pa[1] = vk_pack2(s[2 * k][2], s[2 * k][3], T());
                pa[2] = vk_pack2(s[2 * k + 1][0], s[2 * k + 1][1], T());
                pa[3] = vk_pack2(s[2 * k + 1][2], s[2 * k + 1][3], T());
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

    const int HD = H * D;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        int q = q0 + warp * 16 + (lane >> 2) + i * 8;
        if (q >= Nq)
            continue;
        float inv = post_scale / l[i];
        T *dst = out + (b * Nq + q) * HD + h * D;
#pragma unroll
        for (int j = 0; j < DF; j++)
            if (j * 8 < D) /* the padding columns of O are not the head's */
                vk_put2(dst + j * 8 + (lane & 3) * 2, o[j][2 * i] * inv, o[j][2 * i + 1] * inv);
    }
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
