/* gemm_gpu.cu: the GEMM kernels of codegen/cuda/device/gemm.cuh alone on a GPU, each variant
 * checked against an fp32 reference and timed, on the shapes of a ViT-B/16 (and odd ones for the
 * edges): gemm_tc (mma.sync, the kernel of every GPU) and gemm_wg (wgmma, sm_90a; skipped on other
 * GPUs) in the tiles, k steps and pipeline depths the compiler can ask for.  The kit's gemm-gpu
 * builds it there with the machine's nvcc and runs it; from a checkout:
 *
 *   nvcc -std=c++17 -O3 -I codegen/cuda/device -gencode=arch=compute_90a,code=sm_90a \
 *        -gencode=arch=compute_80,code=sm_80 -o gemm-gpu bench/kit/gemm_gpu.cu && ./gemm-gpu [--quick]
 *
 * Per variant and shape: the error max|C - ref| / max|ref| (bf16 inputs, so the reference is exact
 * up to fp32 summation; a bf16 output rounds at 2^-9), whether every element was written (C is
 * poisoned with NaN first), and the median of 20 timed launches (CUDA events) as TFLOP/s.  Exit
 * status 1 when a variant is wrong anywhere. */
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "act.def"  /* ir/act.def: the activations */
#include "params.h" /* the kernels' params structs */
#include "prelude.cuh"
#include "gemm.cuh"

using vk::gemm_pp;
using vk::gemm_tc;
using vk::gemm_tma;
using vk::gemm_wg;

#define CK(x)                                                                                       \
    do {                                                                                            \
        cudaError_t e_ = (x);                                                                       \
        if (e_ != cudaSuccess) {                                                                    \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));    \
            exit(3);                                                                                \
        }                                                                                           \
    } while (0)

struct args {
    const b16 *A, *W;
    const float *bias;
    const b16 *R;
    b16 *C;
    long long M;
    int N, K, Kp;
    float *partial;     /* gemm_pp's stream-K: two 128 x 128 tiles a block */
    unsigned *counters; /* and 8 tile counters a block, zero */
};

/* The params struct the compiled kernels take. */
static __device__ vk_gemm_params params_of(const args &a)
{
    vk_gemm_params p = {a.A, a.W, a.bias, a.R, a.C, a.M, a.partial, a.counters};
    return p;
}

/* act 1 (GELU) with bias and residual, or bias alone: the two epilogues of a ViT's GEMMs */
template <int BM, int BN, int WM, int WN, int S, int BKB, bool VA, bool EPI>
__global__ void __launch_bounds__(WM *WN * 32) k_tc(args a)
{
    gemm_tc<b16, BM, BN, WM, WN, S, BKB, VA, false, EPI ? 1 : 0, true, EPI, b16, b16>(params_of(a), a.N, a.K, a.Kp,
                                                                                      a.K, a.N, a.N);
}
template <int BN, int WS, int BKB, int WAIT, bool VA, bool EPI>
__global__ void __launch_bounds__(256) k_wg(args a)
{
    gemm_wg<b16, BN, BKB, WS, WAIT, 4, 64, VA, EPI ? 1 : 0, true, EPI, b16, b16>(params_of(a), a.N, a.K, a.Kp, a.K,
                                                                                a.N, a.N);
}

template <int BN, int WS, int MINB, bool EPI, bool PERSIST = false>
__global__ void __launch_bounds__(vk::gemm_tma_smem<BN, WS, MINB>::threads, MINB)
    k_tma(args a, const __grid_constant__ vk_tmap ma, const __grid_constant__ vk_tmap mb)
{
    gemm_tma<b16, BN, WS, MINB, 4, 64, true, EPI ? 1 : 0, true, EPI, b16, b16, PERSIST>(&ma, &mb, params_of(a), a.N,
                                                                                           a.K, a.Kp, a.K, a.N, a.N);
}

template <int WS, bool EPI, bool SK>
__global__ void __launch_bounds__(384, 1)
    k_pp(args a, const __grid_constant__ vk_tmap ma, const __grid_constant__ vk_tmap mb)
{
    gemm_pp<b16, WS, 4, 64, true, EPI ? 1 : 0, true, EPI, b16, b16, SK>(&ma, &mb, params_of(a), a.N, a.K, a.Kp, a.K,
                                                                      a.N, a.N);
}

/* A tensor map of a row-major bf16 matrix [rows, cols], row stride `stride` bytes, in boxes of 64
 * columns x box_rows rows, 128-byte swizzle: what gemm_tma reads. */
static vk_tmap make_map(const void *base, long long rows, long long cols, long long stride, unsigned box_rows)
{
    CUtensorMap m;
    cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows}, strides[1] = {(cuuint64_t)stride};
    cuuint32_t box[2] = {64, box_rows}, es[2] = {1, 1};
    CUresult r = cuTensorMapEncodeTiled(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)base, dims, strides, box, es,
                                        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "cuTensorMapEncodeTiled: error %d\n", (int)r);
        exit(3);
    }
    vk_tmap t;
    static_assert(sizeof t == sizeof m, "a tensor map is 128 bytes");
    memcpy(&t, &m, sizeof t);
    return t;
}

/* fp32 reference of the same epilogue, one thread per output */
__global__ void k_ref(args a, bool epi, float *out)
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= a.M * a.N)
        return;
    long long m = i / a.N;
    int n = (int)(i % a.N);
    float s = 0.0f;
    for (int k = 0; k < a.K; k++)
        s += vk_get(a.A + m * a.K + k) * vk_get(a.W + (long long)n * a.Kp + k);
    s += a.bias[n];
    if (epi)
        s = vk_act<1>(s) + vk_get(a.R + m * a.N + n);
    out[i] = s;
}

__global__ void k_diff(const b16 *C, const float *ref, long long n, float *res) /* res: max|d|, max|ref|, bad */
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    float c = vk_get(C + i), r = ref[i];
    if (!(c == c) || fabsf(c) == INFINITY)
        atomicAdd(&res[2], 1.0f);
    else
        atomicMax((int *)&res[0], __float_as_int(fabsf(c - r)));
    atomicMax((int *)&res[1], __float_as_int(fabsf(r)));
}

struct variant {
    const char *name;
    void (*kernel)(args);
    int bm, bn, threads, smem;
    bool hopper;
    void (*tma)(args, vk_tmap, vk_tmap); /* gemm_tma: kernel is NULL */
    int persist;                         /* gemm_tma over all tiles: this many blocks per SM */
};

#define TC(BM, BN, WM, WN, S, BKB, VA, EPI)                                                         \
    {"tc " #BM "x" #BN "/" #WM "x" #WN "/" #S "/" #BKB, k_tc<BM, BN, WM, WN, S, BKB, VA, EPI>, BM, BN, WM *WN * 32, \
     vk::gemm_smem<BM, BN, S, BKB>::bytes, false}
#define WG(BN, WS, BKB, W, VA, EPI)                                                                 \
    {"wg 128x" #BN "/2x4/" #WS "/" #BKB " wait" #W, k_wg<BN, WS, BKB, W, VA, EPI>, 128, BN, 256,   \
     vk::gemm_wg_smem<BN, BKB, WS>::bytes, true}
#define TMA(BN, WS, MINB, EPI)                                                                      \
    {"tma 128x" #BN "/ws/" #WS " x" #MINB, nullptr, 128, BN, vk::gemm_tma_smem<BN, WS, MINB>::threads,       \
     vk::gemm_tma_smem<BN, WS, MINB>::bytes, true,                                                           \
     k_tma<BN, WS, MINB, EPI>, 0}
#define PP(WS, EPI, SK, NAME)                                                                       \
    {"pingpong 128x128/ws/" #WS " persistent" NAME, nullptr, 128, 128, 384, vk::gemm_pp_smem<WS>::bytes, true,   \
     k_pp<WS, EPI, SK>, 1}
#define TMAP(BN, WS, MINB, EPI)                                                                     \
    {"tma 128x" #BN "/ws/" #WS " x" #MINB " persistent", nullptr, 128, BN,                          \
     vk::gemm_tma_smem<BN, WS, MINB>::threads, vk::gemm_tma_smem<BN, WS, MINB>::bytes, true,        \
     k_tma<BN, WS, MINB, EPI, true>, MINB}
/* gemm_wg as the compiler emits it on sm_90a (3 stages of 128 bytes of k, 128-byte swizzle), the
 * large tile of other GPUs (mma.sync), then the alternatives: wgmma stages and wait depth, 128 x 256,
 * and the no-swizzle layout (64 bytes of k); gemm_tma, also over all tiles from a persistent grid; the
 * persistent ping-pong gemm_pp (a block an SM), with and without stream-K (the same grid: it changes
 * only where the tiles are not whole rounds of it, ViT-B's N = 768 at batch 64) */
#define VARIANTS(VA, EPI)                                                                           \
    {WG(128, 3, 128, 1, VA, EPI),   TC(128, 128, 2, 4, 4, 64, VA, EPI),  TC(128, 128, 2, 4, 3, 128, VA, EPI), \
     WG(128, 3, 128, 0, VA, EPI),   WG(128, 4, 128, 1, VA, EPI),         WG(256, 4, 128, 1, VA, EPI),       \
     WG(128, 4, 64, 1, VA, EPI),    TMA(128, 4, 1, EPI),                 TMA(128, 3, 2, EPI),              \
     TMA(128, 2, 2, EPI),           TMA(256, 3, 1, EPI),                 TMA(256, 4, 1, EPI),              \
     TMAP(128, 3, 2, EPI),          TMAP(256, 3, 1, EPI),                TMAP(256, 4, 1, EPI),             \
     PP(4, EPI, false, ""),         PP(5, EPI, false, ""),               PP(6, EPI, false, ""),            \
     PP(4, EPI, true, " stream-k"), PP(5, EPI, true, " stream-k")}

static variant V_VE[] = VARIANTS(true, true), V_VB[] = VARIANTS(true, false), V_UE[] = VARIANTS(false, true);
enum { NV = sizeof V_VE / sizeof V_VE[0] };

static unsigned short to_b16(float f)
{
    unsigned u;
    memcpy(&u, &f, 4);
    u += 0x7fff + ((u >> 16) & 1);
    return (unsigned short)(u >> 16);
}

struct shape {
    const char *name;
    long long M;
    int N, K;
    bool epi;
    bool time;
};

int main(int argc, char **argv)
{
    bool quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device %s, sm_%d%d, %d SMs\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
    bool hopper = prop.major == 9;
    const shape shapes[] = {
        {"edges M=197 N=1000 K=196 (unaligned A)", 197, 1000, 196, true, false}, /* rows 392 bytes apart: VEC_A false */
        {"edges M=300 N=520 K=776 bias", 300, 520, 776, false, false},
        {"ViT-B b64 qkv", 64 * 197, 2304, 768, false, true},
        {"ViT-B b64 proj", 64 * 197, 768, 768, true, true},
        {"ViT-B b64 fc1", 64 * 197, 3072, 768, true, true},
        {"ViT-B b64 fc1 without GELU", 64 * 197, 3072, 768, false, true}, /* the epilogue's share */
        {"ViT-B b64 fc2", 64 * 197, 768, 3072, true, true},
        {"ViT-B b256 qkv", 256 * 197, 2304, 768, false, true},
        {"ViT-B b256 fc1", 256 * 197, 3072, 768, true, true},
        {"ViT-B b256 fc2", 256 * 197, 768, 3072, true, true},
        {"8192^3", 8192, 8192, 8192, false, true},
    };
    int fails = 0;
    std::vector<std::vector<double>> tflops(NV);
    float *partial; /* gemm_pp's stream-K scratch: two tiles and 8 counters a block, a block an SM */
    unsigned *counters;
    CK(cudaMalloc(&partial, (size_t)prop.multiProcessorCount * 2 * 128 * 128 * 4));
    CK(cudaMalloc(&counters, (size_t)prop.multiProcessorCount * 8 * 4));
    for (const shape &sh : shapes) {
        if (quick && sh.M > 20000)
            continue;
        long long M = sh.M;
        int N = sh.N, K = sh.K, Kp = (K + 63) / 64 * 64, Np = (N + 255) / 256 * 256;
        std::vector<unsigned short> hA(M * K), hW((size_t)Np * Kp, 0), hR(M * N);
        std::vector<float> hb(N);
        srand(1234 + (int)M + N + K);
        auto rnd = [] { return (float)rand() / RAND_MAX * 2.0f - 1.0f; };
        for (auto &x : hA)
            x = to_b16(rnd());
        for (int n = 0; n < N; n++)
            for (int k = 0; k < K; k++)
                hW[(size_t)n * Kp + k] = to_b16(rnd() * 0.1f);
        for (auto &x : hR)
            x = to_b16(rnd());
        for (auto &x : hb)
            x = rnd();
        args a;
        b16 *dA, *dW, *dR, *dC;
        float *db, *dref, *dres;
        CK(cudaMalloc(&dA, M * K * 2));
        CK(cudaMalloc(&dW, (size_t)Np * Kp * 2));
        CK(cudaMalloc(&dR, M * N * 2));
        CK(cudaMalloc(&dC, M * N * 2));
        CK(cudaMalloc(&db, N * 4));
        CK(cudaMalloc(&dref, M * N * 4));
        CK(cudaMalloc(&dres, 12));
        CK(cudaMemcpy(dA, hA.data(), M * K * 2, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dW, hW.data(), (size_t)Np * Kp * 2, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dR, hR.data(), M * N * 2, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(db, hb.data(), N * 4, cudaMemcpyHostToDevice));
        a = {dA, dW, db, dR, dC, M, N, K, Kp, partial, counters};
        long long MN = M * N;
        k_ref<<<(unsigned)((MN + 255) / 256), 256>>>(a, sh.epi, dref);
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        double flop = 2.0 * M * N * K;
        printf("\n== %s: M=%lld N=%d K=%d%s\n", sh.name, M, N, K, sh.epi ? " +bias+gelu+residual" : " +bias");
        variant *vs = K % 8 ? V_UE : sh.epi ? V_VE : V_VB;
        vk_tmap mapA{}, mapW128{}, mapW256{};
        if (hopper && K % 8 == 0) {
            mapA = make_map(dA, M, K, (long long)K * 2, 128);
            mapW128 = make_map(dW, Np, Kp, (long long)Kp * 2, 128);
            mapW256 = make_map(dW, Np, Kp, (long long)Kp * 2, 256);
        }
        for (int v = 0; v < NV; v++) {
            variant &x = vs[v];
            if ((x.hopper && !hopper) || (x.tma && K % 8))
                continue;
            vk_tmap mapW = x.bn == 256 ? mapW256 : mapW128;
            if (x.tma)
                CK(cudaFuncSetAttribute(x.tma, cudaFuncAttributeMaxDynamicSharedMemorySize, x.smem));
            else
                CK(cudaFuncSetAttribute(x.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, x.smem));
            dim3 grid((N + x.bn - 1) / x.bn, (unsigned)((M + x.bm - 1) / x.bm));
            if (x.persist) /* every tile from a grid of blocks per SM x SMs (fewer when there are fewer tiles) */
                grid = dim3((unsigned)std::min<long long>((long long)grid.x * grid.y,
                                                          (long long)x.persist * prop.multiProcessorCount),
                            1);
            auto launch = [&] {
                if (x.tma)
                    x.tma<<<grid, x.threads, x.smem>>>(a, mapA, mapW);
                else
                    x.kernel<<<grid, x.threads, x.smem>>>(a);
            };
            CK(cudaMemset(dC, 0xff, M * N * 2)); /* NaN */
            CK(cudaMemset(counters, 0, (size_t)prop.multiProcessorCount * 8 * 4)); /* each stream-K GEMM leaves them 0 */
            CK(cudaMemset(dres, 0, 12));
            launch();
            CK(cudaGetLastError());
            CK(cudaDeviceSynchronize());
            k_diff<<<(unsigned)((MN + 255) / 256), 256>>>(dC, dref, MN, dres);
            CK(cudaGetLastError());
            float res[3];
            CK(cudaMemcpy(res, dres, 12, cudaMemcpyDeviceToHost));
            double err = res[0] / res[1];
            bool ok = res[2] == 0 && err < 1e-2;
            fails += !ok;
            double med = 0;
            if (sh.time) {
                cudaEvent_t e0, e1;
                CK(cudaEventCreate(&e0));
                CK(cudaEventCreate(&e1));
                std::vector<float> ms;
                for (int i = 0; i < 23; i++) {
                    CK(cudaEventRecord(e0));
                    launch();
                    CK(cudaEventRecord(e1));
                    CK(cudaEventSynchronize(e1));
                    float t;
                    CK(cudaEventElapsedTime(&t, e0, e1));
                    if (i >= 3)
                        ms.push_back(t);
                }
                CK(cudaGetLastError());
                std::sort(ms.begin(), ms.end());
                med = ms[ms.size() / 2];
                tflops[v].push_back(flop / med / 1e9);
            }
            printf("  %-28s err %.2e unwritten/NaN %6.0f %s", x.name, err, res[2], ok ? "ok  " : "FAIL");
            if (sh.time)
                printf("  %8.3f ms %6.1f TFLOP/s", med, flop / med / 1e9);
            printf("\n");
        }
        cudaFree(dA), cudaFree(dW), cudaFree(dR), cudaFree(dC), cudaFree(db), cudaFree(dref), cudaFree(dres);
    }
    printf("\n== geometric mean over the timed shapes\n");
    for (int v = 0; v < NV; v++) {
        if (tflops[v].empty())
            continue;
        double l = 0;
        for (double t : tflops[v])
            l += log(t);
        printf("  %-28s %6.1f TFLOP/s\n", V_VE[v].name, exp(l / tflops[v].size()));
    }
    cudaFree(partial), cudaFree(counters);
    printf("%s: %d failing\n", fails ? "FAIL" : "PASS", fails);
    return fails ? 1 : 0;
}
