/* gemm.cuh: C = act(A Wt^T + bias) + R, the Linear op of ops.def.
 * The kernels take the operands and M from vk_gemm_params (params.h: a, wt,
 * bias, res, out, m, partial, splits), the sizes known at compile time as
 * arguments.
 *
 *   A    [M, K]  activations, row stride lda (elements), M known at run time
 *   Wt   [Np, Kp] the weight, transposed at compile time to one row per output
 *                column and zero-padded: Np a multiple of every BN used, Kp of BK
 *   bias [N]     float, optional
 *   R    [M, N]  residual (RES 1, added after the activation) or gate (RES 2,
 *                multiplied), row stride ldr (0: one row [N] for every row), optional
 *   C    [M, N]  row stride ldc; C may be R (in place), never A; its type may
 *                differ from A's (a residual stream kept in fp32)
 *
 * gemm_tc runs on tensor cores: a block computes a BM x BN tile with WM x WN
 * warps; k advances BKB bytes per stage (64: 32 halves or 16 floats for TF32;
 * 128: twice that) through a STAGES-deep cp.async pipeline, both tiles
 * k-contiguous in shared memory with rows padded by 16 bytes so that ldmatrix
 * is free of bank conflicts.  Each 32-byte k step is one mma per (16-row,
 * 8-column) fragment (m16n8k16 for f16/bf16, m16n8k8 for TF32), which load
 * through identical ldmatrix addressing.  gemm_simt is the plain fp32 FFMA
 * version.
 *
 * Grid: x over N tiles (ceil(N / BN)), y over M tiles (ceil(M / BM)).  Blocks
 * are scheduled x first, so the blocks in flight share a few rows of A and
 * sweep the weight (small: it stays in L2); with M tiles first, an A larger
 * than L2 (ViT-B at batch 256: 77 MB of activations) would be read from
 * memory once per N tile.
 *
 * Split K (SPLIT, for grids too small to fill the GPU: a batch-1 ViT's fc2
 * has 48 blocks of 64 x 64 for 132 SMs, each walking K = 3072 alone):
 * gridDim.z blocks share a tile, block z taking the k tiles [z nkt / S,
 * (z+1) nkt / S), and store their fp32 sums to P[z] ([M, N]); the last of
 * the tile's S blocks to be done (a ticket from the tile's counter, after a
 * fence that makes its stores visible first) adds the S partial tiles in the
 * order z = 0..S-1 (the same bits on every run, whichever block is last),
 * applies the epilogue and sets the counter back to 0 for the next GEMM
 * (gemm_zero_counters zeroes them at the start of a run). */
#ifndef VK_GEMM_CUH
#define VK_GEMM_CUH

namespace vk {

template <int BM, int BN, int STAGES, int BKB> struct gemm_smem {
    enum { row = BKB + 16, stage = (BM + BN) * row, bytes = STAGES * stage };
};

/* The 16 bytes of A's row `row` from byte kb of k into shared memory at dst,
 * zeros past M rows and K columns: one cp.async when the rows are 16-byte
 * aligned (VEC_A), element by element otherwise. */
template <bool VEC_A, class T>
VK_DEV void gemm_load_a16(unsigned char *dst, const T *A, vk_i64 row, int kb, vk_i64 M, int K, vk_i64 lda)
{
    if (VEC_A) {
        bool ok = row < M && kb < K * (int)sizeof(T);
        const unsigned char *src = (const unsigned char *)(A + (ok ? row : 0) * lda) + (ok ? kb : 0);
        vk_cp_async16(dst, src, ok);
    } else {
        T *d = (T *)dst;
        int k0 = kb / (int)sizeof(T);
#pragma unroll
        for (int e = 0; e < 16 / (int)sizeof(T); e++) {
            int k = k0 + e;
            if (row < M && k < K)
                d[e] = A[row * lda + k];
            else
                vk_put(&d[e], 0.0f);
        }
    }
}

/* The pipeline's first STAGES - 1 k tiles, one cp.async group each (empty
 * groups past nkt keep the wait counts of the main loop right). */
template <int STAGES, class F> VK_DEV void gemm_prefill(int nkt, F &load_stage)
{
#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < nkt)
            load_stage(s, s);
        vk_cp_async_commit();
    }
}

/* A LayerNorm or RMSNorm folded into the GEMM (cu_linear.c): A is the
 * norm's input x, Wt the weight scaled by the norm's scale, p.ln [M] pairs
 * (mean, 1 / std) of A's rows (layernorm's STATS form) and p.lnsum [N] the
 * columns' sums of Wt as packed: the product of the normalised row is
 * rstd (x Wt^T - mean lnsum), and the norm's bias is in the GEMM's.  A
 * row's part of it: lsum NULL without a norm or past M rows. */
struct gemm_ln {
    const float *lsum;
    float mean, rstd;
};

VK_DEV gemm_ln gemm_ln_row(const vk_gemm_params &p, vk_i64 r)
{
    gemm_ln l = {0, 0.0f, 1.0f};
    if (p.ln && r < p.m) {
        l.lsum = p.lnsum;
        l.mean = p.ln[2 * r];
        l.rstd = p.ln[2 * r + 1];
    }
    return l;
}

/* Epilogue for one output element pair (c, c + 1) of row r; v1 is ignored
 * when c + 1 >= N; ln: row r's folded norm (gemm_ln_row). */
template <int ACT, bool BIAS, int RES, class TR, class TC>
VK_DEV void gemm_store2(float v0, float v1, vk_i64 r, int c, int N, const float *bias, const TR *R, vk_i64 ldr,
                        TC *C, vk_i64 ldc, gemm_ln ln = gemm_ln{0, 0.0f, 1.0f})
{
    bool two = c + 1 < N;
    if (ln.lsum) {
        v0 = (v0 - ln.mean * ln.lsum[c]) * ln.rstd;
        if (two)
            v1 = (v1 - ln.mean * ln.lsum[c + 1]) * ln.rstd;
    }
    if (BIAS) {
        v0 += bias[c];
        if (two)
            v1 += bias[c + 1];
    }
    v0 = vk_act<ACT>(v0);
    v1 = vk_act<ACT>(v1);
    if (RES == 1) { /* a residual */
        v0 += vk_get(R + r * ldr + c);
        if (two)
            v1 += vk_get(R + r * ldr + c + 1);
    } else if (RES == 2) { /* a gate: a gated MLP's other projection */
        v0 *= vk_get(R + r * ldr + c);
        if (two)
            v1 *= vk_get(R + r * ldr + c + 1);
    }
    TC *dst = C + r * ldc + c;
    if (two && ((ldc | c) & 1) == 0) {
        vk_put2(dst, v0, v1);
    } else {
        vk_put(dst, v0);
        if (two)
            vk_put(dst + 1, v1);
    }
}

/* The tile at rows tm0.. and columns tn0.. (a persistent kernel's), or the
 * block's (blockIdx) where tm0 < 0. */
/* The end of a split-K block (all NT threads of it, after its partial tile
 * is stored): the last of the tile's blocks adds the partial tiles and
 * applies the epilogue (gemm_tc: "Split K"). */
template <int ACT, bool BIAS, int RES, int BM, int BN, int NT, class TR, class TC>
VK_DEV void gemm_split_finish(const vk_gemm_params &p, vk_i64 m0, int n0, int N, vk_i64 ldr, vk_i64 ldc)
{
    const int tid = threadIdx.x;
    const vk_i64 M = p.m;
    unsigned *cnt = p.counters + blockIdx.y * gridDim.x + blockIdx.x;
    int *last = (int *)vk_smem; /* the stages are read by now: every thread is past the k loop below */
    vk_threadfence();
    __syncthreads();
    if (tid == 0)
        *last = vk_atomic_add(cnt, 1u) == gridDim.z - 1;
    __syncthreads();
    if (!*last)
        return;
    vk_threadfence();
    const TR *R = (const TR *)p.res;
    TC *C = (TC *)p.out;
    for (int e = tid; e < BM * BN / 2; e += NT) {
        const vk_i64 r = m0 + e / (BN / 2);
        const int c = n0 + e % (BN / 2) * 2;
        if (r >= M || c >= N)
            continue;
        const bool two = c + 1 < N;
        float v0 = 0.0f, v1 = 0.0f;
        for (int z = 0; z < (int)gridDim.z; z++) {
            const float *pz = p.partial + (vk_i64)z * M * N + r * N + c;
            v0 += vk_ld_cg(pz);
            if (two)
                v1 += vk_ld_cg(pz + 1);
        }
        gemm_store2<ACT, BIAS, RES>(v0, v1, r, c, N, p.bias, R, ldr, C, ldc, gemm_ln_row(p, r));
    }
    if (tid == 0)
        *cnt = 0;
}

/* A run's split-K counters (p.counters, p.m of them) set to 0: one block. */
VK_DEV void gemm_zero_counters(const vk_gemm_params &p)
{
    for (vk_i64 i = threadIdx.x; i < p.m; i += blockDim.x)
        p.counters[i] = 0;
}

template <class T, int BM, int BN, int WM, int WN, int STAGES, int BKB, bool VEC_A, bool SPLIT, int ACT, bool BIAS,
          int RES, class TR, class TC, int NTH = WM * WN * 32>
VK_DEV void gemm_tc(const vk_gemm_params &p, int N, int K, int Kp, vk_i64 lda, vk_i64 ldr, vk_i64 ldc,
                    vk_i64 tm0 = -1, int tn0 = 0)
{
    const T *A = (const T *)p.a, *Wt = (const T *)p.wt;
    const float *bias = p.bias;
    const TR *R = (const TR *)p.res;
    TC *C = (TC *)p.out;
    float *P = p.partial;
    const vk_i64 M = p.m;
    enum {
        EL = sizeof(T),
        BK = BKB / EL,
        CH = BKB / 16, /* 16-byte chunks of a row per stage */
        KS = BKB / 32, /* mma k steps per stage */
        RS = gemm_smem<BM, BN, STAGES, BKB>::row,
        NT = NTH, /* threads of the block: the loads use them all, the first WM * WN warps compute */
        WTM = BM / WM,
        WTN = BN / WN,
        MF = WTM / 16,
        NF = WTN / 8,
        STAGE = gemm_smem<BM, BN, STAGES, BKB>::stage
    };
    static_assert(WTM % 16 == 0 && WTN % 16 == 0, "warp tiles are multiples of 16");
    static_assert(STAGES >= 2, "at least double buffering");
    static_assert(BKB == 64 || BKB == 128, "64 or 128 bytes of k per stage");
    static_assert(NTH >= WM * WN * 32 && NTH % 32 == 0, "whole warps, at least the computing ones");
    static_assert(!SPLIT || NTH == WM * WN * 32, "a split's every thread reaches its end (gemm_split_finish)");

    unsigned char *smem = vk_smem;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp / WN, wn = warp % WN;
    const vk_i64 m0 = tm0 >= 0 ? tm0 : (vk_i64)blockIdx.y * BM;
    const int n0 = tm0 >= 0 ? tn0 : blockIdx.x * BN;
    /* this block's k tiles: all of them, or its share of a split K */
    const int kt0 = SPLIT ? (int)((vk_i64)blockIdx.z * (Kp / BK) / gridDim.z) : 0;
    const int nkt = SPLIT ? (int)((vk_i64)(blockIdx.z + 1) * (Kp / BK) / gridDim.z) - kt0 : Kp / BK;

    float acc[MF][NF][4];
#pragma unroll
    for (int i = 0; i < MF; i++)
#pragma unroll
        for (int j = 0; j < NF; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                acc[i][j][e] = 0.0f;

    /* Loads k tile kt0 + kt into stage s: A rows past M and k past K read as zeros. */
    auto load_stage = [&](int s, int kt) {
        unsigned char *sa = smem + s * STAGE, *sb = sa + BM * RS;
        kt += kt0;
        for (int c = tid; c < BM * CH; c += NT) {
            int r = c / CH, ch = c % CH, kb = kt * BKB + ch * 16;
            vk_i64 row = m0 + r;
            gemm_load_a16<VEC_A>(sa + r * RS + ch * 16, A, row, kb, M, K, lda);
        }
        for (int c = tid; c < BN * CH; c += NT) {
            int r = c / CH, ch = c % CH;
            const unsigned char *src = (const unsigned char *)(Wt + (vk_i64)(n0 + r) * Kp) + kt * BKB + ch * 16;
            vk_cp_async16(sb + r * RS + ch * 16, src, true);
        }
    };

    gemm_prefill<STAGES>(nkt, load_stage);

    for (int kt = 0; kt < nkt; kt++) {
        vk_cp_async_wait<STAGES - 2>();
        __syncthreads();
        /* the stage refilled here was last read in iteration kt - 1, which
         * every thread has finished: it passed the barrier above */
        int nt = kt + STAGES - 1;
        if (nt < nkt)
            load_stage(nt % STAGES, nt);
        vk_cp_async_commit();
        if (NTH > WM * WN * 32 && warp >= WM * WN)
            continue; /* a loading warp only */

        const unsigned char *sa = smem + (kt % STAGES) * STAGE, *sb = sa + BM * RS;
#pragma unroll
        for (int ks = 0; ks < KS; ks++) {
            vk_u32 af[MF][4], bf[NF][2];
#pragma unroll
            for (int i = 0; i < MF; i++) {
                vk_ldsm_x4(af[i], sa + (wm * WTM + i * 16 + (lane & 15)) * RS + ks * 32 + (lane >> 4) * 16);
#pragma unroll
                for (int e = 0; e < 4; e++)
                    af[i][e] = vk_frag(af[i][e], T());
            }
#pragma unroll
            for (int j = 0; j < NF / 2; j++) {
                vk_u32 r[4];
                vk_ldsm_x4(r, sb + (wn * WTN + j * 16 + (lane & 7) + ((lane >> 4) << 3)) * RS + ks * 32 +
                                  ((lane >> 3) & 1) * 16);
                bf[2 * j][0] = vk_frag(r[0], T());
                bf[2 * j][1] = vk_frag(r[1], T());
                bf[2 * j + 1][0] = vk_frag(r[2], T());
                bf[2 * j + 1][1] = vk_frag(r[3], T());
            }
#pragma unroll
            for (int i = 0; i < MF; i++)
#pragma unroll
                for (int j = 0; j < NF; j++)
                    vk_mma(acc[i][j], af[i], bf[j], T());
        }
    }
    vk_cp_async_wait<0>();
    if (NTH > WM * WN * 32 && warp >= WM * WN)
        return;

#pragma unroll
    for (int i = 0; i < MF; i++) {
        const vk_i64 r = m0 + wm * WTM + i * 16 + (lane >> 2);
        const gemm_ln l0 = gemm_ln_row(p, r), l1 = gemm_ln_row(p, r + 8);
#pragma unroll
        for (int j = 0; j < NF; j++) {
            int c = n0 + wn * WTN + j * 8 + (lane & 3) * 2;
            if (c >= N)
                continue;
            if (SPLIT) { /* this block's share of the sum */
                float *pz = P + (vk_i64)blockIdx.z * M * N;
                const float *none = 0;
                if (r < M)
                    gemm_store2<0, false, false>(acc[i][j][0], acc[i][j][1], r, c, N, none, none, 0, pz, N);
                if (r + 8 < M)
                    gemm_store2<0, false, false>(acc[i][j][2], acc[i][j][3], r + 8, c, N, none, none, 0, pz, N);
                continue;
            }
            if (r < M)
                gemm_store2<ACT, BIAS, RES>(acc[i][j][0], acc[i][j][1], r, c, N, bias, R, ldr, C, ldc, l0);
            if (r + 8 < M)
                gemm_store2<ACT, BIAS, RES>(acc[i][j][2], acc[i][j][3], r + 8, c, N, bias, R, ldr, C, ldc, l1);
        }
    }
    if (SPLIT)
        gemm_split_finish<ACT, BIAS, RES, BM, BN, NT, TR, TC>(p, m0, n0, N, ldr, ldc);
}

/* ---- Hopper (sm_90a): the large tile on wgmma (VITC_CUDA_WGMMA) ----
 *
 * gemm_wg computes what gemm_tc<T, 128, BN, 2, 4, TS, TBKB> computes, with the
 * same grid and 256 threads, so that one plan serves every GPU: compiled for
 * sm_90a it runs the k loop on wgmma, with gemm_wg_smem's shared memory (the
 * launch's shared_bytes_specific, which the runtime passes when it loaded the
 * sm_90a image), for any other target it is that gemm_tc, with gemm_smem's
 * (VK_SM90A: prelude.cuh; the emulation runs either).
 *
 * Shared memory holds WS stages of BKB bytes of k, filled by cp.async: with
 * BKB 128, rows of 128 bytes in the 128-byte swizzle (16-byte chunk c of row
 * r at r * 128 + (c ^ r % 8) * 16, atoms of 8 rows 1024 bytes apart, the
 * stages 1024-aligned); with BKB 64, wgmma's canonical no-swizzle K-major
 * layout: core matrices of 8 rows x 16 bytes (128 contiguous bytes), the
 * BKB / 16 of a row group along k 128 bytes apart (the descriptor's leading
 * byte offset), row groups BKB * 8 bytes apart (its stride byte offset).
 * Both for A's 128 rows and Wt's BN columns alike; eight consecutive threads
 * fill 128 contiguous bytes, so the 16-byte stores are free of bank
 * conflicts.  On an H100 the swizzle made ViT-B/16 twice as fast at batch
 * 256 (69.4 -> 35.2 ms; the no-swizzle layout's shared-memory reads were the
 * limit: bench/results-gpu.md).  Two
 * warpgroups each issue wgmma.m64nBNk16 for their 64 rows, BKB / 32 per
 * stage, and commit them as one group; with WAIT = 1 a warpgroup lets one
 * group run on while it waits for the next stage, so the stage refilled is
 * the one read two groups back (k tiles run WS - 2 ahead), with WAIT = 0 it
 * waits for each group (WS - 1 ahead).  The cp.async writes reach the tensor
 * cores' (async) proxy through fence.proxy.async before the barrier.
 * Accumulators: per 8 columns j, d[4j..4j+3] as mma.m16n8's C fragment, for
 * the warp's 16 rows of its warpgroup's 64. */

/* gemm_wg's shared memory on sm_90a: WS stages and 1 KiB to align them. */
template <int BN, int BKB, int WS> struct gemm_wg_smem {
    enum { bytes = 1024 + WS * (128 + BN) * BKB };
};
#if VK_SM90A
/* The shared memory descriptor of a K-major operand at smem: no swizzle, row
 * groups sbo bytes apart and core matrices along k 128 bytes apart; or
 * (sw128) rows of 128 bytes swizzled in atoms of 8 rows (1024 bytes, sbo). */
VK_DEV unsigned long long wg_desc(const void *smem, unsigned sbo, bool sw128)
{
    unsigned long long a = vk_smem_addr(smem);
    return ((a & 0x3ffff) >> 4) | ((unsigned long long)(sw128 ? 1 : 128 >> 4) << 16) |
           ((unsigned long long)(sbo >> 4) << 32) | ((unsigned long long)(sw128 ? 1 : 0) << 62);
}
#endif

/* The epilogue of a warpgroup's wgmma accumulators d (BN / 2 a thread: per 8
 * columns j, d[4j..4j+3] as mma.m16n8's C fragment) for row r (the thread's
 * first; the second is r + 8) and the tile's first column n0. */
template <int BN, int ACT, bool BIAS, int RES, class TR, class TC>
VK_DEV void wg_store(const float *d, vk_i64 r, int n0, vk_i64 M, int N, const float *bias, const TR *R, vk_i64 ldr,
                     TC *C, vk_i64 ldc, const vk_gemm_params &p)
{
    const int lane = threadIdx.x & 31;
    const gemm_ln l0 = gemm_ln_row(p, r), l1 = gemm_ln_row(p, r + 8);
#pragma unroll
    for (int j = 0; j < BN / 8; j++) {
        int c = n0 + j * 8 + (lane & 3) * 2;
        if (c >= N)
            continue;
        if (r < M)
            gemm_store2<ACT, BIAS, RES>(d[4 * j], d[4 * j + 1], r, c, N, bias, R, ldr, C, ldc, l0);
        if (r + 8 < M)
            gemm_store2<ACT, BIAS, RES>(d[4 * j + 2], d[4 * j + 3], r + 8, c, N, bias, R, ldr, C, ldc, l1);
    }
}

template <class T, int BN, int BKB, int WS, int WAIT, int TS, int TBKB, bool VEC_A, int ACT, bool BIAS, int RES,
          class TR, class TC>
VK_DEV void gemm_wg(const vk_gemm_params &p, int N, int K, int Kp, vk_i64 lda, vk_i64 ldr, vk_i64 ldc)
{
#if VK_SM90A
    const T *A = (const T *)p.a, *Wt = (const T *)p.wt;
    const float *bias = p.bias;
    const TR *R = (const TR *)p.res;
    TC *C = (TC *)p.out;
    const vk_i64 M = p.m;
    enum {
        BM = 128,
        EL = sizeof(T),
        BK = BKB / EL,
        SW = BKB == 128,      /* rows of 128 bytes: the 128-byte swizzle */
        CH = BKB / 16,        /* 16-byte chunks of a row */
        SBO = 8 * BKB,        /* bytes between row groups (swizzle atoms) */
        TA = BM * BKB,        /* A's part of a stage */
        STAGE = (BM + BN) * BKB,
        AHEAD = WAIT ? WS - 2 : WS - 1 /* k tiles loaded ahead of the one computed */
    };
    static_assert(EL == 2, "wgmma here takes f16 or bf16");
    static_assert(BN == 128 || BN == 256, "wgmma.m64n128 or m64n256");
    static_assert(WAIT == 0 || WAIT == 1, "0 or 1 wgmma groups left in flight");
    static_assert(BKB == 64 || BKB == 128, "64 bytes of k (no swizzle) or 128 (128-byte swizzle)");
    static_assert(AHEAD >= 1, "a k tile loaded ahead");
    unsigned char *smem = vk_smem + ((1024 - (vk_smem_addr(vk_smem) & 1023)) & 1023);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wgi = warp >> 2;
    const vk_i64 m0 = (vk_i64)blockIdx.y * BM;
    const int n0 = blockIdx.x * BN;
    const int nkt = Kp / BK;
    float d[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; i++)
        d[i] = 0.0f;

    /* Byte offset of 16-byte chunk ch of row r in an operand tile.  No swizzle:
     * (r / 8) * SBO + ch * 128 + (r % 8) * 16; 128-byte swizzle: r * 128 +
     * (ch ^ r % 8) * 16. */
    auto chunk_at = [](int r, int ch) {
        return SW ? r * 128 + ((ch ^ (r & 7)) << 4) : (r >> 3) * SBO + ch * 128 + (r & 7) * 16;
    };
    /* chunk i of a stage: eight consecutive threads fill 128 contiguous bytes
     * of shared memory (free of bank conflicts) */
    auto chunk_rc = [](int i, int &r, int &ch) {
        if (SW)
            r = i >> 3, ch = i & 7;
        else
            r = (i >> 3) / CH * 8 + (i & 7), ch = (i >> 3) % CH;
    };
    auto load_stage = [&](int s, int kt) {
        unsigned char *sa = smem + s * STAGE, *sb = sa + TA;
        int r, ch;
        for (int i = tid; i < BM * CH; i += 256) {
            chunk_rc(i, r, ch);
            gemm_load_a16<VEC_A>(sa + chunk_at(r, ch), A, m0 + r, kt * BKB + ch * 16, M, K, lda);
        }
        for (int i = tid; i < BN * CH; i += 256) {
            chunk_rc(i, r, ch);
            const unsigned char *src = (const unsigned char *)(Wt + (vk_i64)(n0 + r) * Kp) + kt * BKB + ch * 16;
            vk_cp_async16(sb + chunk_at(r, ch), src, true);
        }
    };

    gemm_prefill<AHEAD + 1>(nkt, load_stage);
    for (int kt = 0; kt < nkt; kt++) {
        vk_cp_async_wait<AHEAD - 1>();
        vk_fence_proxy_async();
        __syncthreads();
        /* the stage refilled here was last read by the wgmma group of tile
         * kt - 1 - WAIT, which every warpgroup has waited for */
        int nt = kt + AHEAD;
        if (nt < nkt)
            load_stage(nt % WS, nt);
        vk_cp_async_commit();
        const unsigned char *sa = smem + (kt % WS) * STAGE, *sb = sa + TA;
        vk_wg_fence();
#pragma unroll
        for (int ks = 0; ks < BK / 16; ks++)
            vk_wgmma(d, wg_desc(sa + wgi * 8 * SBO + ks * (SW ? 32 : 256), SBO, SW),
                   wg_desc(sb + ks * (SW ? 32 : 256), SBO, SW), T(), vk_wgn<BN>());
        vk_wg_commit();
        if (WAIT)
            vk_wg_wait<1>();
        else
            vk_wg_wait<0>();
    }
    vk_wg_wait<0>();
    vk_cp_async_wait<0>();

    wg_store<BN, ACT, BIAS, RES>(d, m0 + wgi * 64 + (warp & 3) * 16 + (lane >> 2), n0, M, N, bias, R, ldr, C, ldc, p);
#else
    gemm_tc<T, 128, BN, 2, 4, TS, TBKB, VEC_A, false, ACT, BIAS, RES, TR, TC>(p, N, K, Kp, lda, ldr, ldc);
#endif
}

/* ---- Hopper (sm_90a): the warp-specialised wgmma GEMM fed by TMA ----
 *
 * gemm_tma computes gemm_wg's 128 x BN tile with warp roles: warpgroups 0 and
 * 1 consume, each running wgmma.m64nBNk16 over its 64 rows; the warp after
 * them produces, one thread issuing per k tile two bulk tensor copies
 * (cp.async.bulk.tensor, the tensor memory accelerator) of A's 128 rows and
 * Wt's BN rows, 64 elements of k each, into a WS-deep ring of stages in the
 * 128-byte swizzle (the layout gemm_wg writes with cp.async: 16-byte chunk c
 * of row r at r * 128 + (c ^ r % 8) * 16).  Stage s has two mbarriers:
 * full[s] completes when the copy engine has written the stage's bytes (the
 * producer's arrive.expect_tx and the copies' complete_tx), empty[s] when
 * the 8 consumer warps have released it (each warp's lane 0 arrives after
 * wgmma.wait_group shows the group reading it finished).  Phases alternate
 * per pass around the ring: the consumer waits full[s] with parity (kt / WS)
 * & 1, the producer empty[s] with the opposite parity, which the barrier's
 * initial phase satisfies on the first pass.
 *
 * The tensor maps (vk_tmap, 128 bytes, the driver's CUtensorMap encoded by
 * the runtime) describe A as [M rows, K columns] with row stride lda * 2
 * bytes, box 64 x 128, and Wt as [Np, Kp], box 64 x BN, both SWIZZLE_128B;
 * the copy engine fills rows past M and columns past K with zeros, so A
 * needs no padding.  They arrive as __grid_constant__ kernel parameters.
 *
 * MINB blocks share an SM (__launch_bounds__(threads, MINB)).  One: 384
 * threads, the producer a whole warpgroup that hands registers to the
 * consumers (setmaxnreg: from 168 a thread to 40 and 232), for BN 256.  Two
 * (BN 128): 288 threads, the producer one warp, 112 registers a thread; one
 * block's epilogue then runs beside the other's k loop.  The epilogue stores
 * from the accumulators as gemm_wg's does.  PERSIST (for measuring: the
 * compiler does not emit it yet) runs a grid of (blocks, 1) over all tiles,
 * the producer loading the next tile's stages during the epilogue.
 *
 * Any other target runs gemm_tc's 128 x BN tile with
 * TS stages of TBKB bytes in the same grid and block, the extra warps
 * helping to load; the kernel is declared with VK_KERNEL_TMA and passes
 * VK_TMAPS (prelude.cuh), the maps there unused. */
template <int BN, int WS, int MINB> struct gemm_tma_smem {
    enum { stage = (128 + BN) * 128, bytes = 1024 + WS * stage + 2 * WS * 8, threads = MINB == 1 ? 384 : 288 };
};


#if VK_SM90A
/* Which k tiles of which tiles a block of a persistent GEMM computes: the
 * tiles below dp whole, every G-th from the block's own (t = b, b + G, ...),
 * then, with stream-K (W > 0), an even share of the W k tiles of the tiles
 * from dp on, counted tile after tile (tile dp + q has q nkt .. q nkt + nkt
 * - 1): block b takes [b W / G, (b + 1) W / G), which may end one tile part
 * way and start the next (gemm_pp: "Stream-K"). */
struct pp_sched {
    int G, nkt, dp;
    vk_i64 W;
};
/* Every tile whole (no stream-K): gemm_tma's, and gemm_pp's without VITC_CUDA_STREAM_K. */
VK_DEV pp_sched pp_whole(int ntiles, int G, int nkt) { return pp_sched{G, nkt, ntiles, 0}; }
/* Stream-K over the last partial round of tiles and the whole round before
 * it (at least a tile's k tiles a block; none when the tiles make whole
 * rounds). */
VK_DEV pp_sched pp_stream_k(int ntiles, int G, int nkt)
{
    pp_sched s = pp_whole(ntiles, G, nkt);
    if (ntiles % G) {
        s.dp = ntiles / G ? (ntiles / G - 1) * G : 0;
        s.W = (vk_i64)(ntiles - s.dp) * nkt;
    }
    return s;
}
/* The first of block b's share of the W k tiles (b = G: W). */
VK_DEV vk_i64 pp_share(const pp_sched &s, int b) { return (vk_i64)b * s.W / s.G; }
/* The block whose share holds k tile x of the W. */
VK_DEV int pp_owner(const pp_sched &s, vk_i64 x) { return (int)(((x + 1) * s.G - 1) / s.W); }

/* A unit of a block's work: k tiles [k0, k1) of tile t. */
struct pp_unit {
    int t, k0, k1;
};
/* A block's units in order: its whole tiles (i counts them), then its share. */
struct pp_walk {
    pp_sched s;
    int b, i;
    vk_i64 x, end;
};
VK_DEV pp_walk pp_start(const pp_sched &s, int b) { return pp_walk{s, b, 0, pp_share(s, b), pp_share(s, b + 1)}; }
/* The walk's next unit in u; false past its last. */
VK_DEV bool pp_next(pp_walk &w, pp_unit &u)
{
    const pp_sched &s = w.s;
    if (w.b + w.i * s.G < s.dp) {
        u = pp_unit{w.b + w.i++ * s.G, 0, s.nkt};
        return true;
    }
    if (w.x >= w.end)
        return false;
    const vk_i64 q = w.x / s.nkt, stop = w.end < (q + 1) * s.nkt ? w.end : (q + 1) * s.nkt;
    u = pp_unit{s.dp + (int)q, (int)(w.x - q * s.nkt), (int)(stop - q * s.nkt)};
    w.x = stop;
    return true;
}

/* The producer of a TMA ring of WS stages (gemm_tma, gemm_pp), one thread:
 * for block b's units of schedule s (ntn tiles a row of N tiles, N tiles
 * first), each k tile's boxes of A (128 rows) and Wt (BN rows), 64 elements
 * of k, into stage it % WS (it counting k tiles over all the units: the
 * ring's position and phase) once empty[s] shows it free, completing on
 * full[s]. */
template <int BN, int WS>
VK_DEV void tma_produce(unsigned char *smem, unsigned long long *full, unsigned long long *empty, const vk_tmap *ma,
                        const vk_tmap *mb, const pp_sched &sch, int b, int ntn)
{
    enum { STAGE = (128 + BN) * 128 };
    pp_walk w = pp_start(sch, b);
    pp_unit u;
    for (int it = 0; pp_next(w, u);)
        for (int kt = u.k0; kt < u.k1; kt++, it++) {
            int s = it % WS;
            vk_mbar_wait(&empty[s], ((it / WS) & 1) ^ 1);
            unsigned char *sa = smem + s * STAGE;
            vk_mbar_expect_tx(&full[s], STAGE);
            vk_tma_load2(sa, ma, kt * 64, u.t / ntn * 128, &full[s]);
            vk_tma_load2(sa + 128 * 128, mb, kt * 64, u.t % ntn * BN, &full[s]);
        }
}

/* One k tile of a TMA ring's stage sa on wgmma, committed as one group:
 * d[h] += A's 64 rows from row a_row + 64 h times Wt's BN rows, h < H. */
template <class T, int BN, int H> VK_DEV void tma_mma_stage(float (*d)[BN / 2], const unsigned char *sa, int a_row)
{
    const unsigned char *sb = sa + 128 * 128;
    vk_wg_fence();
#pragma unroll
    for (int ks = 0; ks < 4; ks++)
#pragma unroll
        for (int h = 0; h < H; h++)
            vk_wgmma(d[h], wg_desc(sa + (a_row + 64 * h) * 128 + ks * 32, 1024, true), wg_desc(sb + ks * 32, 1024, true),
                     T(), vk_wgn<BN>());
    vk_wg_commit();
}
#endif

template <class T, int BN, int WS, int MINB, int TS, int TBKB, bool VEC_A, int ACT, bool BIAS, int RES, class TR,
          class TC, bool PERSIST = false>
VK_DEV void gemm_tma(const vk_tmap *ma, const vk_tmap *mb, const vk_gemm_params &p, int N, int K, int Kp, vk_i64 lda,
                     vk_i64 ldr, vk_i64 ldc)
{
#if VK_SM90A
    const float *bias = p.bias;
    const TR *R = (const TR *)p.res;
    TC *C = (TC *)p.out;
    const vk_i64 M = p.m;
    enum { BM = 128, BK = 64, STAGE = gemm_tma_smem<BN, WS, MINB>::stage };
    static_assert(sizeof(T) == 2, "wgmma here takes f16 or bf16");
    static_assert(BN == 128 || BN == 256, "wgmma.m64n128 or m64n256");
    static_assert(MINB == 1 || (MINB == 2 && BN == 128), "two blocks per SM only of the 128 x 128 tile");
    unsigned char *smem = vk_smem + ((1024 - (vk_smem_addr(vk_smem) & 1023)) & 1023);
    unsigned long long *full = (unsigned long long *)(smem + WS * STAGE), *empty = full + WS;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2;
    const int nkt = Kp / BK;
    /* the tiles of this block, N tiles first: its own (grid x over N tiles, y over M tiles), or with
     * PERSIST every gridDim.x-th of them from blockIdx.x, in a grid of (blocks, 1) */
    const int ntn = (N + BN - 1) / BN;
    const int t0 = PERSIST ? (int)blockIdx.x : (int)blockIdx.y * ntn + (int)blockIdx.x;
    const int ntiles = PERSIST ? ntn * (int)((M + BM - 1) / BM) : t0 + 1, tstep = PERSIST ? (int)gridDim.x : 1;
    if (tid == 0) {
        for (int s = 0; s < WS; s++) {
            vk_mbar_init(&full[s], 1);
            vk_mbar_init(&empty[s], 8);
        }
        vk_fence_mbar_init();
        vk_prefetch_tmap(ma);
        vk_prefetch_tmap(mb);
    }
    __syncthreads();
    /* producer and consumers walk the same units: whole tiles t0, t0 + tstep, ... */
    const pp_sched sch = pp_whole(ntiles, tstep, nkt);
    if (wg == 2) {
        if (MINB == 1)
            vk_setmaxnreg_dec<40>();
        if (tid == 256)
            tma_produce<BN, WS>(smem, full, empty, ma, mb, sch, t0, ntn);
        return;
    }
    if (MINB == 1)
        vk_setmaxnreg_inc<232>();
    const int cw = wg;
    pp_walk walk = pp_start(sch, t0);
    pp_unit u;
    for (int it = 0; pp_next(walk, u);) {
        const int t = u.t;
        float d[1][BN / 2];
#pragma unroll
        for (int i = 0; i < BN / 2; i++)
            d[0][i] = 0.0f;
        for (int kt = u.k0; kt < u.k1; kt++, it++) {
            int s = it % WS;
            vk_mbar_wait(&full[s], (it / WS) & 1);
            tma_mma_stage<T, BN, 1>(d, smem + s * STAGE, cw * 64);
            vk_wg_wait<1>();
            /* the group of k tile it - 1 is done: its stage goes back to the producer */
            if (kt > u.k0 && lane == 0)
                vk_mbar_arrive(&empty[(it - 1) % WS]);
        }
        vk_wg_wait<0>();
        if (PERSIST && lane == 0) /* the tile's last stage, for the producer's next tile */
            vk_mbar_arrive(&empty[(it - 1) % WS]);

        wg_store<BN, ACT, BIAS, RES>(d[0], (vk_i64)(t / ntn) * BM + cw * 64 + (warp & 3) * 16 + (lane >> 2),
                                     t % ntn * BN, M, N, bias, R, ldr, C, ldc, p);
    }
#else
    (void)ma, (void)mb;
    gemm_tc<T, 128, BN, 2, 4, TS, TBKB, VEC_A, false, ACT, BIAS, RES, TR, TC, gemm_tma_smem<BN, WS, MINB>::threads>(
        p, N, K, Kp, lda, ldr, ldc);
#endif
}

/* ---- Hopper (sm_90a): the persistent ping-pong GEMM (VITC_CUDA_PINGPONG) ----
 *
 * gemm_pp computes C over 128 x 128 tiles with a grid of its own: gridDim.x
 * blocks (one an SM) walk their units of work (pp_sched: whole tiles t =
 * blockIdx.x, + gridDim.x, ..., N tiles first, then with SK their share of
 * the last tiles' k tiles), the i-th unit (i counted from 0 in the block)
 * going to consumer warpgroup i % 2.  Three warpgroups: the two consumers,
 * each running its unit's k loop on wgmma (two m64n128k16 a k step, for its
 * 128 rows: 128 accumulators a thread, setmaxnreg 232) and then its epilogue
 * from the registers, and a producer (setmaxnreg 40) whose one thread issues
 * the bulk tensor copies of every unit's k tiles in order into one WS-deep
 * ring (the stages and tensor maps of gemm_tma, BN = 128).  The ring's k
 * tiles are counted over the block's units: unit i's first is at it = the
 * k tiles of units 0..i-1, stage (it % WS), phase (it / WS) & 1.  As the
 * units alternate, one consumer's k loop runs while the other stores its
 * tile (ping-pong): the epilogue is hidden behind the other's wgmma, which
 * gemm_tma's blocks leave to the next block on the SM.  empty[s] takes the
 * arrivals of one consumer's 4 warps.  The k loops take turns: a consumer
 * starts unit i once the other has waited for every stage of unit i - 1
 * (order[c] completes a phase when consumer c's 128 threads are through a k
 * loop); without that turn a consumer could wait for a stage two phases
 * ahead, which the phase parity cannot tell from the current one.
 *
 * Stream-K (SK, VITC_CUDA_STREAM_K): when the tiles do not make whole
 * rounds of gridDim.x (ViT-B's N = 768 at batch 64: 594 tiles, 4.5 a block),
 * the last partial round and the whole one before it are shared out by k
 * tiles (pp_stream_k), so that every block does the same work instead of
 * half of them one tile more.  A unit that is part of a tile stores its fp32
 * sums to one of its block's two slots in p.partial (slot 0 where the
 * block's share starts in that tile, 1 where it ends in it; 128 x 128 floats
 * each, in the accumulators' order), and each of its 4 warps, for its 32
 * rows, takes a ticket from the tile's counter for that warp (a fence
 * first); the last of the tile's blocks to be done adds the parts in block
 * order (the same bits whichever is last), applies the epilogue and sets
 * the counter back to 0.  No block waits for another.
 *
 * Any other target runs gemm_tc's 128 x 128 tile (its 8 warps computing,
 * the other 4 loading) over the tiles in turn, each whole. */
template <int WS> struct gemm_pp_smem {
    enum { stage = 256 * 128, bytes = 1024 + WS * stage + (2 * WS + 2) * 8, threads = 384 };
};

#if VK_SM90A
/* The end of a stream-K unit that is part of tile dp + q, by one warp for
 * its 32 rows of d (as tma_mma_stage's, H = 2): true when this warp's rows
 * are to be stored with d now holding the tile's whole sums (the last part
 * of the tile to be done), false when another block finishes them. */
VK_DEV bool pp_part_done(float (*d)[64], const pp_sched &s, int q, const vk_gemm_params &p)
{
    enum { SLOT = 128 * 128 };
    const int lane = threadIdx.x & 31, w = (threadIdx.x >> 5) & 3;
    const vk_i64 x0 = (vk_i64)q * s.nkt;
    const int first = pp_owner(s, x0), last = pp_owner(s, x0 + s.nkt - 1);
    /* block c's part of the tile: slot 0 where its share starts in the tile; this warp's 2 x 64 floats a lane */
    auto part = [&](int c) {
        return p.partial + ((vk_i64)c * 2 + (pp_share(s, c) / s.nkt == q ? 0 : 1)) * SLOT + w * (2 * 64 * 32) + lane;
    };
    float *mine = part((int)blockIdx.x);
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int e = 0; e < 64; e++)
            mine[(h * 64 + e) * 32] = d[h][e];
    vk_threadfence();
    vk_syncwarp();
    unsigned *cnt = p.counters + q * 4 + w, ticket = 0;
    if (lane == 0)
        ticket = vk_atomic_add(cnt, 1u);
    if (vk_shfl_idx(ticket, 0) != (unsigned)(last - first))
        return false;
    vk_threadfence();
    for (int c = first; c <= last; c++) {
        const float *pc = part(c);
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int e = 0; e < 64; e++)
                d[h][e] = c == first ? vk_ld_cg(pc + (h * 64 + e) * 32) : d[h][e] + vk_ld_cg(pc + (h * 64 + e) * 32);
    }
    if (lane == 0)
        *cnt = 0;
    return true;
}
#endif

template <class T, int WS, int TS, int TBKB, bool VEC_A, int ACT, bool BIAS, int RES, class TR, class TC, bool SK>
VK_DEV void gemm_pp(const vk_tmap *ma, const vk_tmap *mb, const vk_gemm_params &p, int N, int K, int Kp, vk_i64 lda,
                    vk_i64 ldr, vk_i64 ldc)
{
    enum { BM = 128, BN = 128 };
    const vk_i64 M = p.m;
    const int ntn = (N + BN - 1) / BN, ntiles = ntn * (int)((M + BM - 1) / BM);
#if VK_SM90A
    const float *bias = p.bias;
    const TR *R = (const TR *)p.res;
    TC *C = (TC *)p.out;
    enum { BK = 64, STAGE = gemm_pp_smem<WS>::stage };
    static_assert(sizeof(T) == 2, "wgmma here takes f16 or bf16");
    unsigned char *smem = vk_smem + ((1024 - (vk_smem_addr(vk_smem) & 1023)) & 1023);
    unsigned long long *full = (unsigned long long *)(smem + WS * STAGE), *empty = full + WS, *order = empty + WS;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2;
    const int nkt = Kp / BK;
    const pp_sched sch = SK ? pp_stream_k(ntiles, (int)gridDim.x, nkt) : pp_whole(ntiles, (int)gridDim.x, nkt);
    if (tid == 0) {
        for (int s = 0; s < WS; s++) {
            vk_mbar_init(&full[s], 1);
            vk_mbar_init(&empty[s], 4);
        }
        vk_mbar_init(&order[0], 128);
        vk_mbar_init(&order[1], 128);
        vk_fence_mbar_init();
        vk_prefetch_tmap(ma);
        vk_prefetch_tmap(mb);
    }
    __syncthreads();
    if (wg == 2) {
        vk_setmaxnreg_dec<40>();
        if (tid == 256)
            tma_produce<BN, WS>(smem, full, empty, ma, mb, sch, blockIdx.x, ntn);
        return;
    }
    vk_setmaxnreg_inc<232>();
    /* this consumer's units: every other one of the block's, from its own */
    pp_walk walk = pp_start(sch, blockIdx.x);
    pp_unit u;
    for (int i = 0, it = 0; pp_next(walk, u); it += u.k1 - u.k0, i++) {
        if ((i & 1) != wg)
            continue;
        const int n = u.k1 - u.k0;
        float d[2][BN / 2];
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int e = 0; e < BN / 2; e++)
                d[h][e] = 0.0f;
        if (i > 0) /* the other consumer's k loop of unit i - 1 is through */
            vk_mbar_wait(&order[wg ^ 1], ((i - 1) / 2) & 1);
        for (int kt = 0; kt < n; kt++) {
            int s = (it + kt) % WS;
            vk_mbar_wait(&full[s], ((it + kt) / WS) & 1);
            tma_mma_stage<T, BN, 2>(d, smem + s * STAGE, 0);
            vk_wg_wait<1>();
            /* the group of the k tile before is done: its stage goes back to the producer */
            if (kt > 0 && lane == 0)
                vk_mbar_arrive(&empty[(it + kt - 1) % WS]);
        }
        vk_mbar_arrive(&order[wg]); /* the other consumer's turn */
        vk_wg_wait<0>();
        if (lane == 0) /* the unit's last stage */
            vk_mbar_arrive(&empty[(it + n - 1) % WS]);
        if (n < nkt && !pp_part_done(d, sch, u.t - sch.dp, p))
            continue; /* another block adds this part */
        const vk_i64 m0 = (vk_i64)(u.t / ntn) * BM;
        const int n0 = u.t % ntn * BN;
#pragma unroll
        for (int h = 0; h < 2; h++)
            wg_store<BN, ACT, BIAS, RES>(d[h], m0 + h * 64 + (warp & 3) * 16 + (lane >> 2), n0, M, N, bias, R, ldr,
                                         C, ldc, p);
    }
#else
    (void)ma, (void)mb;
    for (int t = blockIdx.x; t < ntiles; t += gridDim.x) {
        gemm_tc<T, 128, BN, 2, 4, TS, TBKB, VEC_A, false, ACT, BIAS, RES, TR, TC, gemm_pp_smem<WS>::threads>(
            p, N, K, Kp, lda, ldr, ldc, (vk_i64)(t / ntn) * BM, t % ntn * BN);
        __syncthreads(); /* its shared memory is the next tile's */
    }
#endif
}

/* fp32 SIMT version: 64 x 64 tiles, 256 threads, 4 x 4 outputs each, k in
 * steps of 16.  Wt as for gemm_tc (Np a multiple of 64, Kp of 16). */
enum { SIMT_BM = 64, SIMT_BN = 64, SIMT_BK = 16, SIMT_SMEM = 2 * SIMT_BK * (64 + 4) * 4 };

template <class T, int ACT, bool BIAS, int RES, class TR>
VK_DEV void gemm_simt(const vk_gemm_params &p, int N, int K, int Kp, vk_i64 lda, vk_i64 ldr, vk_i64 ldc)
{
    const T *A = (const T *)p.a, *Wt = (const T *)p.wt;
    const float *bias = p.bias;
    const TR *R = (const TR *)p.res;
    T *C = (T *)p.out;
    const vk_i64 M = p.m;
    enum { LS = 64 + 4 };
    float *As = (float *)vk_smem;  /* [BK][LS]: As[k][m] */
    float *Bs = As + SIMT_BK * LS; /* [BK][LS]: Bs[k][n] */
    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    const vk_i64 m0 = (vk_i64)blockIdx.y * SIMT_BM;
    const int n0 = blockIdx.x * SIMT_BN;
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
            acc[i][j] = 0.0f;
    for (int k0 = 0; k0 < Kp; k0 += SIMT_BK) {
        for (int c = tid; c < SIMT_BM * SIMT_BK; c += 256) {
            int r = c / SIMT_BK, k = c % SIMT_BK;
            vk_i64 row = m0 + r;
            As[k * LS + r] = row < M && k0 + k < K ? vk_get(A + row * lda + k0 + k) : 0.0f;
            Bs[k * LS + r] = vk_get(Wt + (vk_i64)(n0 + r) * Kp + k0 + k);
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < SIMT_BK; k++) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                a[i] = As[k * LS + ty * 4 + i];
                b[i] = Bs[k * LS + tx * 4 + i];
            }
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        vk_i64 r = m0 + ty * 4 + i;
        if (r >= M)
            continue;
        const gemm_ln l = gemm_ln_row(p, r);
#pragma unroll
        for (int j = 0; j < 4; j += 2) {
            int c = n0 + tx * 4 + j;
            if (c < N)
                gemm_store2<ACT, BIAS, RES>(acc[i][j], acc[i][j + 1], r, c, N, bias, R, ldr, C, ldc, l);
        }
    }
}

} /* namespace vk */

#endif
