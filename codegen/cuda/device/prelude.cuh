/* prelude.cuh: the base of the device library that every CUDA program vitc
 * generates starts with (after ir/act.def and params.h, embedded ahead of it).
 *
 * The kernels are plain CUDA C++ compiled by NVRTC for sm_80 and later.
 * Everything that touches the hardware directly (inline PTX for tensor-core
 * MMA, ldmatrix, cp.async, conversions) lives here behind small functions,
 * so that the rest of the device library reads as ordinary C++ and so that a
 * host emulation (tests/cuda_emu.h, compiled with VITC_EMU defined) can give
 * the very same kernels a CPU implementation of these functions.
 *
 * Storage types: float, h16 (IEEE binary16 bits) and b16 (bfloat16 bits),
 * plus the integer types of index tensors.  vk_get() reads any of them as a
 * float, vk_put() writes a float rounding to nearest even. */
#ifndef VK_PRELUDE_CUH
#define VK_PRELUDE_CUH

typedef long long vk_i64;
typedef unsigned int vk_u32;

struct h16 {
    unsigned short x;
};
struct b16 {
    unsigned short x;
};

#ifdef VITC_EMU
#include "cuda_emu.h" /* the host emulation of this section (tests/) */
#else

#define VK_DEV static __device__ __forceinline__
/* A kernel of `threads` threads a block taking its family's params struct P
 * (params.h) as p: the runtime passes the launch's argument slots, of which
 * the driver copies sizeof(P) bytes. */
#define VK_KERNEL(name, threads, P) extern "C" __global__ void __launch_bounds__(threads) name(const P p)
/* A kernel that also takes two tensor maps by value (gemm_tma, in gemm.cuh),
 * passed on as VK_TMAPS; minb blocks per SM on sm_90a. */
#ifdef __CUDA_ARCH_FEAT_SM90_ALL
#define VK_KERNEL_TMA(name, threads, minb, P)                                                                 \
    extern "C" __global__ void __launch_bounds__(threads, minb)                                               \
        name(const P p, const __grid_constant__ vk::vk_tmap vk_ma, const __grid_constant__ vk::vk_tmap vk_mb)
#else
#define VK_KERNEL_TMA(name, threads, minb, P)                                                                 \
    extern "C" __global__ void __launch_bounds__(threads)                                                     \
        name(const P p, const __grid_constant__ vk::vk_tmap vk_ma, const __grid_constant__ vk::vk_tmap vk_mb)
#endif
#define VK_TMAPS &vk_ma, &vk_mb

extern __shared__ __align__(16) unsigned char vk_smem[];

VK_DEV float vk_inf(void) { return __int_as_float(0x7f800000); }

/* ---- conversions ---- */
VK_DEV float vk_h16_to_f32(unsigned short h)
{
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
VK_DEV unsigned short vk_f32_to_h16(float f)
{
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
VK_DEV float vk_b16_to_f32(unsigned short h) { return __uint_as_float(((vk_u32)h) << 16); }
VK_DEV unsigned short vk_f32_to_b16(float f)
{
    unsigned short h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
/* The bits of f rounded to TensorFloat-32 (nearest, ties away from zero). */
VK_DEV vk_u32 vk_f32_to_tf32(vk_u32 bits)
{
    vk_u32 r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(__uint_as_float(bits)));
    return r;
}

/* ---- math ---- */
/* 2^x; +0 for -inf. */
VK_DEV float vk_exp2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
VK_DEV float vk_rsqrt(float x) { return rsqrtf(x); }
VK_DEV float vk_shfl_xor(float v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }

/* ---- shared memory, ldmatrix, cp.async ---- */
VK_DEV vk_u32 vk_smem_addr(const void *p)
{
    vk_u32 a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}
/* Four 8x8 b16 matrices: lanes 8j..8j+7 give the row addresses of matrix j
 * (16-byte aligned); register j of lane l gets row l/4, columns 2(l%4) and
 * 2(l%4)+1 of matrix j (the lower column in the low half). */
VK_DEV void vk_ldsm_x4(vk_u32 *r, const void *row)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(vk_smem_addr(row)));
}
/* The same, transposed: register j of lane l gets column l/4, rows 2(l%4)
 * and 2(l%4)+1 of matrix j. */
VK_DEV void vk_ldsm_x4_t(vk_u32 *r, const void *row)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(vk_smem_addr(row)));
}
/* Copies 16 bytes from global to shared memory asynchronously; when ok is
 * false nothing is read and the 16 bytes become zeros.  Both addresses are
 * 16-byte aligned. */
VK_DEV void vk_cp_async16(void *dst, const void *src, bool ok)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(vk_smem_addr(dst)), "l"(src),
                 "r"(ok ? 16 : 0));
}
VK_DEV void vk_cp_async_commit(void) { asm volatile("cp.async.commit_group;"); }
/* Waits until at most n of this thread's committed groups are still in flight. */
template <int n> VK_DEV void vk_cp_async_wait(void) { asm volatile("cp.async.wait_group %0;" ::"n"(n)); }

/* ---- tensor cores: d[0..3] += A (16x16 or 16x8) * B, fp32 accumulators ----
 * Fragments as the PTX ISA lays them out for mma.m16n8k16 (f16, bf16) and
 * mma.m16n8k8 (tf32): a[4] and b[2] registers per lane. */
VK_DEV void vk_mma(float *d, const vk_u32 *a, const vk_u32 *b, h16)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
VK_DEV void vk_mma(float *d, const vk_u32 *a, const vk_u32 *b, b16)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
VK_DEV void vk_mma(float *d, const vk_u32 *a, const vk_u32 *b, float)
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

#endif /* VITC_EMU */

/* ---- what follows is common to the GPU and the emulation ---- */

VK_DEV float vk_get(const float *p) { return *p; }
VK_DEV float vk_get(const h16 *p) { return vk_h16_to_f32(p->x); }
VK_DEV float vk_get(const b16 *p) { return vk_b16_to_f32(p->x); }
VK_DEV float vk_get(const vk_i64 *p) { return (float)*p; }
VK_DEV float vk_get(const int *p) { return (float)*p; }
VK_DEV float vk_get(const unsigned char *p) { return (float)*p; }
VK_DEV float vk_get(const signed char *p) { return (float)*p; }
VK_DEV void vk_put(float *p, float v) { *p = v; }
VK_DEV void vk_put(h16 *p, float v) { p->x = vk_f32_to_h16(v); }
VK_DEV void vk_put(b16 *p, float v) { p->x = vk_f32_to_b16(v); }
VK_DEV void vk_put(unsigned char *p, float v) { *p = v != 0.0f; }

/* Two values packed as one 32-bit register of a 16-bit type (lo in the low half). */
VK_DEV vk_u32 vk_pack2(float lo, float hi, h16) { return vk_f32_to_h16(lo) | ((vk_u32)vk_f32_to_h16(hi) << 16); }
VK_DEV vk_u32 vk_pack2(float lo, float hi, b16) { return vk_f32_to_b16(lo) | ((vk_u32)vk_f32_to_b16(hi) << 16); }

/* Stores two adjacent values; p is 4-byte aligned for 16-bit types. */
VK_DEV void vk_put2(h16 *p, float lo, float hi) { *(vk_u32 *)p = vk_pack2(lo, hi, h16()); }
VK_DEV void vk_put2(b16 *p, float lo, float hi) { *(vk_u32 *)p = vk_pack2(lo, hi, b16()); }
VK_DEV void vk_put2(float *p, float lo, float hi)
{
    p[0] = lo;
    p[1] = hi;
}

/* A fragment register as the MMA of element type T consumes it: TF32
 * operands are rounded from the fp32 bits, 16-bit ones pass unchanged. */
VK_DEV vk_u32 vk_frag(vk_u32 r, h16) { return r; }
VK_DEV vk_u32 vk_frag(vk_u32 r, b16) { return r; }
VK_DEV vk_u32 vk_frag(vk_u32 r, float) { return vk_f32_to_tf32(r); }

VK_DEV float vk_warp_sum(float v)
{
    for (int m = 16; m > 0; m >>= 1)
        v += vk_shfl_xor(v, m);
    return v;
}
VK_DEV float vk_warp_max(float v)
{
    for (int m = 16; m > 0; m >>= 1)
        v = fmaxf(v, vk_shfl_xor(v, m));
    return v;
}

/* Activations: ir_act of ir/ir.h, from the same rows (ir/act.def; the
 * Linear's `activation` attribute, and Gelu through ir_gelu_act). */
#define VK_ACT_ENUM(name) IR_ACT_##name,
enum { IR_ACT_ROWS(VK_ACT_ENUM) IR_ACT_COUNT };
#undef VK_ACT_ENUM
template <int ACT> VK_DEV float vk_act(float x)
{
    if (ACT == IR_ACT_GELU_ERF)
        return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    if (ACT == IR_ACT_GELU_TANH)
        return 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
    if (ACT == IR_ACT_RELU)
        return fmaxf(x, 0.0f);
    if (ACT == IR_ACT_RELU6)
        return fminf(fmaxf(x, 0.0f), 6.0f);
    if (ACT == IR_ACT_QUICK_GELU)
        return x / (1.0f + expf(-1.702f * x));
    if (ACT == IR_ACT_SILU)
        return x / (1.0f + expf(-x));
    return x;
}

#define VK_LOG2E 1.4426950408889634f

#endif
