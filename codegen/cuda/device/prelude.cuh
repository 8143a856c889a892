/* prelude.cuh: the base of the device library that every CUDA program vitc
 * generates starts with (after ir/act.def and params.h, embedded ahead of it).
 *
 * The kernels are plain CUDA C++ compiled by NVRTC for sm_80 and later.
 * Everything that touches the hardware directly (inline PTX for tensor-core
 * MMA, ldmatrix, cp.async, conversions; on sm_90a wgmma, mbarrier and the
 * tensor memory accelerator) lives here behind small functions,
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

/* A tensor map: the driver's CUtensorMap (128 opaque bytes), encoded by the
 * runtime, passed to a kernel by value (VK_KERNEL_TMA). */
struct alignas(64) vk_tmap {
    unsigned long long w[16];
};
/* The N of a wgmma shape, as an overload tag of vk_wgmma. */
template <int N> struct vk_wgn {
};

#ifdef VITC_EMU
#include "cuda_emu.h" /* the host emulation of this section (tests/) */
#else

#define VK_DEV static __device__ __forceinline__

/* What every kernel does first.  From sm_90: wait for the grids before it
 * in the stream to complete and their writes to be visible (a no-op unless
 * the kernel was launched as a programmatic dependent launch, which the
 * runtime does on sm_90 and later: VITC_CUDA_IMAGE_PDL), then let the next
 * kernel's launch begin (its blocks wait in their own griddepcontrol.wait,
 * so its launch overlaps this kernel's run instead of following its end). */
VK_DEV void vk_kernel_enter(void)
{
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* A kernel of `threads` threads a block taking its family's params struct P
 * (params.h) as p: the runtime passes the launch's argument slots, of which
 * the driver copies sizeof(P) bytes.  Its body follows the macro. */
#define VK_KERNEL(name, threads, P)                                                                           \
    static __device__ __forceinline__ void name##_body(const P &p);                                          \
    extern "C" __global__ void __launch_bounds__(threads) name(const __grid_constant__ P p)                   \
    {                                                                                                         \
        vk_kernel_enter();                                                                                    \
        name##_body(p);                                                                                       \
    }                                                                                                         \
    static __device__ __forceinline__ void name##_body(const P &p)
/* A kernel that also takes two tensor maps by value (gemm_tma, in gemm.cuh),
 * passed on to the body as VK_TMAPS; minb blocks per SM on sm_90a. */
#ifdef __CUDA_ARCH_FEAT_SM90_ALL
#define VK_TMA_BOUNDS(threads, minb) __launch_bounds__(threads, minb)
#else
#define VK_TMA_BOUNDS(threads, minb) __launch_bounds__(threads)
#endif
#define VK_KERNEL_TMA(name, threads, minb, P)                                                                 \
    static __device__ __forceinline__ void name##_body(const P &p, const vk_tmap *vk_ma, const vk_tmap *vk_mb); \
    extern "C" __global__ void VK_TMA_BOUNDS(threads, minb)                                                   \
        name(const __grid_constant__ P p, const __grid_constant__ vk_tmap vk_ma,                              \
             const __grid_constant__ vk_tmap vk_mb)                                                           \
    {                                                                                                         \
        vk_kernel_enter();                                                                                    \
        name##_body(p, &vk_ma, &vk_mb);                                                                       \
    }                                                                                                         \
    static __device__ __forceinline__ void name##_body(const P &p, const vk_tmap *vk_ma, const vk_tmap *vk_mb)
#define VK_TMAPS vk_ma, vk_mb

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
/* Lane src's v, for every lane of the warp. */
VK_DEV unsigned vk_shfl_idx(unsigned v, int src) { return __shfl_sync(0xffffffffu, v, src); }
/* Every lane of the warp here, their memory operations before it ordered before those after. */
VK_DEV void vk_syncwarp(void) { __syncwarp(); }

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

/* ---- between the blocks of a grid ---- */
/* This thread's writes before it are seen by every thread of the GPU before its writes after it. */
VK_DEV void vk_threadfence(void) { __threadfence(); }
/* *p += v atomically; the value before. */
VK_DEV unsigned vk_atomic_add(unsigned *p, unsigned v) { return atomicAdd(p, v); }
/* A load from L2, past the SM's L1 (which other SMs' writes do not update). */
VK_DEV float vk_ld_cg(const float *p) { return __ldcg(p); }
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


/* ---- Hopper (sm_90a only): wgmma, mbarrier, the tensor memory accelerator ----
 * Compiled only into the arch-specific image (NVRTC's sm_90a target), where
 * VK_SM90A is 1; the kernels test it to choose their body. */
#ifdef __CUDA_ARCH_FEAT_SM90_ALL
#define VK_SM90A 1
/* The cp.async (generic proxy) writes of this thread before it are seen by
 * the tensor cores' (async proxy) reads after it (with a barrier for others). */
VK_DEV void vk_fence_proxy_async(void) { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
/* wgmma.fence: before a warpgroup's first wgmma.mma_async of a sequence and
 * after the accumulators were touched by other instructions. */
VK_DEV void vk_wg_fence(void) { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
/* The wgmma.mma_async issued since the last commit become one group. */
VK_DEV void vk_wg_commit(void) { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
/* Waits until at most n of the warpgroup's committed groups are pending;
 * their accumulators are readable then, their shared memory reads done. */
template <int n> VK_DEV void vk_wg_wait(void) { asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(n) : "memory"); }
/* setmaxnreg for the warpgroup: registers a thread down to, or up to, n. */
template <int n> VK_DEV void vk_setmaxnreg_dec(void) { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(n)); }
template <int n> VK_DEV void vk_setmaxnreg_inc(void) { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(n)); }

/* d (N / 2 floats) += A (64 x 16, descriptor da) * B (16 x N, db), both
 * K-major in shared memory: one wgmma whose N / 2 accumulators are operands
 * 0..N/2-1, the descriptors and the scale-d predicate's value the three
 * after them.  Accumulators: per 8 columns j, d[4j..4j+3] as mma.m16n8's C
 * fragment, for the warp's 16 rows (warp % 4) of the warpgroup's 64. */
#define VK_WG_D8(i)                                                                                           \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
        "+f"(d[i + 7])
#define VK_WG_D64                                                                                             \
    VK_WG_D8(0), VK_WG_D8(8), VK_WG_D8(16), VK_WG_D8(24), VK_WG_D8(32), VK_WG_D8(40), VK_WG_D8(48), VK_WG_D8(56)
#define VK_WG_D128                                                                                            \
    VK_WG_D64, VK_WG_D8(64), VK_WG_D8(72), VK_WG_D8(80), VK_WG_D8(88), VK_WG_D8(96), VK_WG_D8(104), VK_WG_D8(112), \
        VK_WG_D8(120)
#define VK_WG_R8 "%0,%1,%2,%3,%4,%5,%6,%7"
#define VK_WG_R16 VK_WG_R8 ",%8,%9,%10,%11,%12,%13,%14,%15"
#define VK_WG_R24 VK_WG_R16 ",%16,%17,%18,%19,%20,%21,%22,%23"
#define VK_WG_R32 VK_WG_R24 ",%24,%25,%26,%27,%28,%29,%30,%31"
#define VK_WG_R40 VK_WG_R32 ",%32,%33,%34,%35,%36,%37,%38,%39"
#define VK_WG_R48 VK_WG_R40 ",%40,%41,%42,%43,%44,%45,%46,%47"
#define VK_WG_R56 VK_WG_R48 ",%48,%49,%50,%51,%52,%53,%54,%55"
#define VK_WG_R64 VK_WG_R56 ",%56,%57,%58,%59,%60,%61,%62,%63"
#define VK_WG_R128                                                                                            \
    VK_WG_R64 "," \
    "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88," \
    "%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110," \
    "%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127"
#define VK_WG_MMA(SHAPE, TY, REGS, A, B, P, ...)                                                              \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" P ", 0;\nwgmma.mma_async.sync.aligned." SHAPE ".f32." TY "." TY  \
                 " {" REGS "}, %" A ", %" B ", p, 1, 1, 0, 0;\n}\n"                                            \
                 : __VA_ARGS__                                                                                \
                 : "l"(da), "l"(db), "r"(1))
/* The bf16 and f16 forms of wgmma function FN (d, its A operand ARG, db, the
 * element type, vk_wgn<N>), issued by MMA (VK_WG_MMA or VK_WG_MMA_RS). */
#define VK_WG_PAIR(FN, ARG, MMA, N, REGS, A, B, P, ...)                                                       \
    VK_DEV void FN(float *d, ARG, unsigned long long db, b16, vk_wgn<N>)                                       \
    {                                                                                                         \
        MMA("m64n" #N "k16", "bf16", REGS, A, B, P, __VA_ARGS__);                                              \
    }                                                                                                         \
    VK_DEV void FN(float *d, ARG, unsigned long long db, h16, vk_wgn<N>)                                       \
    {                                                                                                         \
        MMA("m64n" #N "k16", "f16", REGS, A, B, P, __VA_ARGS__);                                               \
    }
#define VK_WG_DESC(N, REGS, A, B, P, ...)                                                                     \
    VK_WG_PAIR(vk_wgmma, unsigned long long da, VK_WG_MMA, N, REGS, A, B, P, __VA_ARGS__)
/* the GEMMs' N (128, 256) and the narrower shapes of attention's S = Q K^T (keys 16 to 64 of a block of 64) */
VK_WG_DESC(16, VK_WG_R8, "8", "9", "10", VK_WG_D8(0))
VK_WG_DESC(32, VK_WG_R16, "16", "17", "18", VK_WG_D8(0), VK_WG_D8(8))
VK_WG_DESC(48, VK_WG_R24, "24", "25", "26", VK_WG_D8(0), VK_WG_D8(8), VK_WG_D8(16))
VK_WG_DESC(64, VK_WG_R32, "32", "33", "34", VK_WG_D8(0), VK_WG_D8(8), VK_WG_D8(16), VK_WG_D8(24))
VK_WG_DESC(128, VK_WG_R64, "64", "65", "66", VK_WG_D64)
VK_WG_DESC(256, VK_WG_R128, "128", "129", "130", VK_WG_D128)

/* d (N / 2 floats) += A (64 x 16, this thread's fragment a[4]: mma.m16n8k16's
 * A fragment of the warp's 16 rows, warp % 4) * B (16 x N, db), B MN-major
 * in shared memory (rows of k, N contiguous: wgmma's transposed B, imm-trans-b
 * 1); the accumulators as vk_wgmma's. */
#define VK_WG_MMA_RS(SHAPE, TY, REGS, A, B, P, ...)                                                           \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" P ", 0;\nwgmma.mma_async.sync.aligned." SHAPE ".f32." TY "." TY  \
                 " {" REGS "}, {" A "}, %" B ", p, 1, 1, 1;\n}\n"                                             \
                 : __VA_ARGS__                                                                                \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1))
#define VK_WG_RS(N, REGS, A, B, P, ...)                                                                       \
    VK_WG_PAIR(vk_wgmma_rs, const vk_u32 *a, VK_WG_MMA_RS, N, REGS, A, B, P, __VA_ARGS__)
/* N = the head size of attention's O = P V: 16 to 128 in steps of 16 */
VK_WG_RS(16, VK_WG_R8, "%8,%9,%10,%11", "12", "13", VK_WG_D8(0))
VK_WG_RS(32, VK_WG_R16, "%16,%17,%18,%19", "20", "21", VK_WG_D8(0), VK_WG_D8(8))
VK_WG_RS(48, VK_WG_R24, "%24,%25,%26,%27", "28", "29", VK_WG_D8(0), VK_WG_D8(8), VK_WG_D8(16))
VK_WG_RS(64, VK_WG_R32, "%32,%33,%34,%35", "36", "37", VK_WG_D8(0), VK_WG_D8(8), VK_WG_D8(16), VK_WG_D8(24))
VK_WG_RS(80, VK_WG_R40, "%40,%41,%42,%43", "44", "45", VK_WG_D8(0), VK_WG_D8(8), VK_WG_D8(16), VK_WG_D8(24),
           VK_WG_D8(32))
VK_WG_RS(96, VK_WG_R48, "%48,%49,%50,%51", "52", "53", VK_WG_D8(0), VK_WG_D8(8), VK_WG_D8(16), VK_WG_D8(24),
           VK_WG_D8(32), VK_WG_D8(40))
VK_WG_RS(112, VK_WG_R56, "%56,%57,%58,%59", "60", "61", VK_WG_D8(0), VK_WG_D8(8), VK_WG_D8(16), VK_WG_D8(24),
           VK_WG_D8(32), VK_WG_D8(40), VK_WG_D8(48))
VK_WG_RS(128, VK_WG_R64, "%64,%65,%66,%67", "68", "69", VK_WG_D64)

/* mbarrier (8 bytes of shared memory): init with the arrivals a phase takes;
 * fence_mbar_init makes the inits visible to the async proxy (the copy
 * engine); expect_tx adds bytes the phase waits for (counted down by the
 * copies' complete_tx) and arrives; vk_mbar_wait waits for the completion
 * of the phase of this parity (the current phase's parity: its completion;
 * the other: the preceding phase, complete). */
VK_DEV void vk_mbar_init(void *bar, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(vk_smem_addr(bar)), "r"(count) : "memory");
}
VK_DEV void vk_fence_mbar_init(void) { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
VK_DEV void vk_mbar_expect_tx(void *bar, unsigned bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(vk_smem_addr(bar)), "r"(bytes)
                 : "memory");
}
VK_DEV void vk_mbar_arrive(void *bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(vk_smem_addr(bar)) : "memory");
}
VK_DEV void vk_mbar_wait(void *bar, unsigned parity)
{
    vk_u32 a = vk_smem_addr(bar), done;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(a), "r"(parity)
                     : "memory");
    } while (!done);
}
VK_DEV void vk_prefetch_tmap(const vk_tmap *map) { asm volatile("prefetch.tensormap [%0];" ::"l"(map) : "memory"); }
/* The box of map at (c0 along the rows, c1 rows down) into shared memory at
 * dst, completing on bar's transaction count. */
VK_DEV void vk_tma_load2(void *dst, const vk_tmap *map, int c0, int c1, void *bar)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
                 "[%4];" ::"r"(vk_smem_addr(dst)),
                 "l"(map), "r"(c0), "r"(c1), "r"(vk_smem_addr(bar))
                 : "memory");
}
#endif /* __CUDA_ARCH_FEAT_SM90_ALL */

#endif /* VITC_EMU */

#ifndef VK_SM90A
#define VK_SM90A 0 /* no wgmma, mbarrier or TMA: the kernels' portable bodies */
#endif

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
