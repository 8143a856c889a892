/* norm.cuh: row-wise kernels: LayerNormalization (and RMSNormalization, the
 * same without the mean: CENTER false) and Softmax.
 *
 * layernorm: one warp per row of C elements (the normalised axes
 * flattened), 8 rows per block; statistics in fp32 from values held in
 * registers (two passes over registers: the mean, then the variance of the
 * deviations).  C is a compile-time constant up to 32 * 32; layernorm_big
 * takes any C, reading the row three times (L1/L2-cached).  With STATS
 * they write only each row's statistics, (mean, 1 / std) as two floats, for
 * the GEMMs that a norm is folded into (gemm.cuh: gemm_store2).
 *
 * softmax_rows: one warp per softmax row (any axis, as outer x C x inner),
 * fp32 throughout.
 *
 * Pointers and run-time sizes come from the kernel's params (params.h:
 * vk_norm_params, vk_softmax_params), the element types as template
 * arguments. */
#ifndef VK_NORM_CUH
#define VK_NORM_CUH

namespace vk {

enum { NORM_ROWS = 8 }; /* rows (warps) per block; grid ceil(rows / 8) */

/* The STATS form's output: row's (mean, 1 / std) at y[2 row] (by lane 0). */
VK_DEV void layernorm_stats_put(const vk_norm_params &p, vk_i64 row, float mean, float rstd)
{
    if ((threadIdx.x & 31) == 0) {
        ((float *)p.y)[2 * row] = mean;
        ((float *)p.y)[2 * row + 1] = rstd;
    }
}

template <int C, bool HAS_G, bool HAS_B, class TX, class TG, class TB, class TY, bool CENTER = true,
          bool STATS = false>
VK_DEV void layernorm(const vk_norm_params &p, float eps)
{
    const TX *x = (const TX *)p.x;
    const TG *g = (const TG *)p.scale;
    const TB *bta = (const TB *)p.bias;
    TY *y = (TY *)p.y;
    const vk_i64 rows = p.rows;
    enum { PER = (C + 31) / 32 };
    const int lane = threadIdx.x & 31;
    const vk_i64 row = (vk_i64)blockIdx.x * NORM_ROWS + (threadIdx.x >> 5);
    if (row >= rows)
        return; /* a whole warp leaves: no barrier or shuffle is shared across warps */
    const TX *xr = x + row * C;
    float v[PER], sum = 0.0f;
#pragma unroll
    for (int i = 0; i < PER; i++) {
        int c = lane + 32 * i;
        v[i] = c < C ? vk_get(xr + c) : 0.0f;
        sum += v[i];
    }
    const float mean = CENTER ? vk_warp_sum(sum) * (1.0f / C) : 0.0f; /* RMSNorm: x itself */
    float sq = 0.0f;
#pragma unroll
    for (int i = 0; i < PER; i++) {
        int c = lane + 32 * i;
        float dv = c < C ? v[i] - mean : 0.0f;
        sq += dv * dv;
    }
    const float rstd = vk_rsqrt(vk_warp_sum(sq) * (1.0f / C) + eps);
    if (STATS) {
        layernorm_stats_put(p, row, mean, rstd);
        return;
    }
    TY *yr = y + row * C;
#pragma unroll
    for (int i = 0; i < PER; i++) {
        int c = lane + 32 * i;
        if (c < C) {
            float r = (v[i] - mean) * rstd;
            if (HAS_G)
                r *= vk_get(g + c);
            if (HAS_B)
                r += vk_get(bta + c);
            vk_put(yr + c, r);
        }
    }
}

template <bool HAS_G, bool HAS_B, class TX, class TG, class TB, class TY, bool CENTER = true, bool STATS = false>
VK_DEV void layernorm_big(const vk_norm_params &p, float eps)
{
    const TX *x = (const TX *)p.x;
    const TG *g = (const TG *)p.scale;
    const TB *bta = (const TB *)p.bias;
    TY *y = (TY *)p.y;
    const vk_i64 rows = p.rows, C = p.cols;
    const int lane = threadIdx.x & 31;
    const vk_i64 row = (vk_i64)blockIdx.x * NORM_ROWS + (threadIdx.x >> 5);
    if (row >= rows)
        return;
    const TX *xr = x + row * C;
    float sum = 0.0f;
    for (vk_i64 c = lane; CENTER && c < C; c += 32)
        sum += vk_get(xr + c);
    const float mean = CENTER ? vk_warp_sum(sum) / (float)C : 0.0f;
    float sq = 0.0f;
    for (vk_i64 c = lane; c < C; c += 32) {
        float dv = vk_get(xr + c) - mean;
        sq += dv * dv;
    }
    const float rstd = vk_rsqrt(vk_warp_sum(sq) / (float)C + eps);
    if (STATS) {
        layernorm_stats_put(p, row, mean, rstd);
        return;
    }
    TY *yr = y + row * C;
    for (vk_i64 c = lane; c < C; c += 32) {
        float r = (vk_get(xr + c) - mean) * rstd;
        if (HAS_G)
            r *= vk_get(g + c);
        if (HAS_B)
            r += vk_get(bta + c);
        vk_put(yr + c, r);
    }
}

/* y = softmax(x) along an axis of C elements: row r (of outer * inner rows)
 * has its elements at (r / inner) * C * inner + r % inner + c * inner. */
template <class TX, class TY> VK_DEV void softmax_rows(const vk_softmax_params &p)
{
    const TX *x = (const TX *)p.x;
    TY *y = (TY *)p.y;
    const vk_i64 rows = p.rows, C = p.cols, inner = p.inner;
    const int lane = threadIdx.x & 31;
    const vk_i64 row = (vk_i64)blockIdx.x * NORM_ROWS + (threadIdx.x >> 5);
    if (row >= rows)
        return;
    const vk_i64 base = (row / inner) * C * inner + row % inner;
    float mx = -vk_inf();
    for (vk_i64 c = lane; c < C; c += 32)
        mx = fmaxf(mx, vk_get(x + base + c * inner));
    mx = vk_warp_max(mx);
    float sum = 0.0f;
    for (vk_i64 c = lane; c < C; c += 32)
        sum += vk_exp2((vk_get(x + base + c * inner) - mx) * VK_LOG2E);
    const float inv = 1.0f / vk_warp_sum(sum);
    for (vk_i64 c = lane; c < C; c += 32)
        vk_put(y + base + c * inner, vk_exp2((vk_get(x + base + c * inner) - mx) * VK_LOG2E) * inv);
}

} /* namespace vk */

#endif
