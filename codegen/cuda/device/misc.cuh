/* misc.cuh: the rare ops, in plain fp32 SIMT code: batched matrix products
 * between activations (MatMul, Gemm, whatever attention did not fuse) and
 * direct 2-D convolution (a Conv that is not a patch embedding). */
#ifndef VK_MISC_CUH
#define VK_MISC_CUH

namespace vk {

enum { BMM_SMEM = 2 * 16 * 17 * 4 };

/* The 16 x 16 tile (tm, tn) (256 threads) of
 *   C[m, n] = alpha * sum_k A[m, k] B[k, n] + beta * Y[m, n]
 * with every operand addressed through element strides (so transposes and
 * broadcasts need no copies); the caller has offset the pointers to the
 * batch entry and picked the tile from the block index.  Y may be NULL
 * (then beta is unused). */
template <class TA, class TB, class TY, class TC>
VK_DEV void bmm_tile(const TA *A, vk_i64 a_sm, vk_i64 a_sk, const TB *B, vk_i64 b_sk, vk_i64 b_sn, const TY *Y,
                     vk_i64 y_sm, vk_i64 y_sn, TC *C, vk_i64 c_sm, vk_i64 c_sn, vk_i64 M, vk_i64 N, vk_i64 K,
                     float alpha, float beta, vk_i64 tm, vk_i64 tn)
{
    float *As = (float *)vk_smem, *Bs = As + 16 * 17;
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const vk_i64 m = tm * 16 + ty, n = tn * 16 + tx;
    float acc = 0.0f;
    for (vk_i64 k0 = 0; k0 < K; k0 += 16) {
        As[ty * 17 + tx] = m < M && k0 + tx < K ? vk_get(A + m * a_sm + (k0 + tx) * a_sk) : 0.0f;
        Bs[ty * 17 + tx] = k0 + ty < K && n < N ? vk_get(B + (k0 + ty) * b_sk + n * b_sn) : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < 16; k++)
            acc += As[ty * 17 + k] * Bs[k * 17 + tx];
        __syncthreads();
    }
    if (m < M && n < N) {
        float v = alpha * acc;
        if (Y)
            v += beta * vk_get(Y + m * y_sm + n * y_sn);
        vk_put(C + m * c_sm + n * c_sn, v);
    }
}

/* y[n, co, oh, ow] = bias[co] + sum over the group's input channels and the
 * kernel window of x * w (vk_conv_params; bias NULL: none), NCHW, zero
 * padding; one output per thread, grid-stride over total = N * Cout * Ho * Wo. */
template <class TX, class TW, class TB, class TY>
VK_DEV void conv2d(const vk_conv_params &p, vk_i64 total, int Cin, int H, int W, int Cout, int Ho, int Wo, int KH,
                   int KW, int sh, int sw, int ph, int pw, int dh, int dw, int groups)
{
    const TX *x = (const TX *)p.x;
    const TW *w = (const TW *)p.w;
    const TB *bias = (const TB *)p.bias;
    TY *y = (TY *)p.y;
    const int cin_g = Cin / groups, cout_g = Cout / groups;
    for (vk_i64 i = (vk_i64)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (vk_i64)gridDim.x * blockDim.x) {
        vk_i64 r = i;
        int ow = (int)(r % Wo);
        r /= Wo;
        int oh = (int)(r % Ho);
        r /= Ho;
        int co = (int)(r % Cout);
        vk_i64 nb = r / Cout;
        int g = co / cout_g;
        float acc = bias ? vk_get(bias + co) : 0.0f;
        for (int ci = 0; ci < cin_g; ci++) {
            const TX *xc = x + (nb * Cin + g * cin_g + ci) * (vk_i64)H * W;
            const TW *wc = w + ((vk_i64)co * cin_g + ci) * KH * KW;
            for (int kh = 0; kh < KH; kh++) {
                int ih = oh * sh - ph + kh * dh;
                if (ih < 0 || ih >= H)
                    continue;
                for (int kw = 0; kw < KW; kw++) {
                    int iw = ow * sw - pw + kw * dw;
                    if (iw >= 0 && iw < W)
                        acc += vk_get(xc + (vk_i64)ih * W + iw) * vk_get(wc + kh * KW + kw);
                }
            }
        }
        vk_put(y + i, acc);
    }
}

} /* namespace vk */

#endif
