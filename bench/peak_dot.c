/* peak_dot.c: the peak kernels of the dot-product units (see bench_util.h):
 * VDPBF16PS (AVX512-BF16), TDPBF16PS (AMX-BF16), VPDPBUSD (AVX512-VNNI) and
 * TDPBUSD (AMX-INT8), in inline assembly, each found by CPUID and the
 * operating system's XCR0 (and, for AMX, granted the tile registers by
 * Linux's arch_prctl) before it is offered.
 *
 * The vector kernels run 24 independent accumulators (zmm0-23) on two operand
 * registers: enough to cover the units' latency at two instructions a cycle.
 * The AMX kernels run the 2x2 tiles of a GEMM's inner step (C 0-3 += A 4-5 x
 * B 6-7, tiles of 16 rows of 64 bytes): four independent accumulators, the
 * tiles loaded once, so that only the multiplier is measured. */
#include "bench_util.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__)
#include <cpuid.h>
#include <errno.h>
#include <sys/syscall.h>
#include <unistd.h>
#define PEAK_DOT_X86 1
#endif

#ifdef PEAK_DOT_X86

/* The operands: bf16 pairs (1.0, 1.0) and (~1e-3, ~1e-3), so that the float
 * accumulators grow by about 2e-3 a step, never reaching denormals or
 * infinity; int8 all 1 (the int32 sums wrap harmlessly). */
static const uint32_t dot_operands[2][16] __attribute__((aligned(64))) = {
    {0x3f803f80u, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u,
     0x3f803f80u, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u},
    {0x3a833a83u, 0x3a833a83u, 0x3a833a83u, 0x3a833a83u, 0x3a833a83u, 0x3a833a83u, 0x3a833a83u, 0x3a833a83u,
     0x3a833a83u, 0x3a833a83u, 0x3a833a83u, 0x3a833a83u, 0x3a833a83u, 0x3a833a83u, 0x3a833a83u, 0x3a833a83u},
};
static const uint32_t int8_operands[16] __attribute__((aligned(64))) = {
    0x01010101u, 0x01010101u, 0x01010101u, 0x01010101u, 0x01010101u, 0x01010101u, 0x01010101u, 0x01010101u,
    0x01010101u, 0x01010101u, 0x01010101u, 0x01010101u, 0x01010101u, 0x01010101u, 0x01010101u, 0x01010101u,
};

#define DOT_ZERO(r) "vpxord %%zmm" #r ", %%zmm" #r ", %%zmm" #r "\n\t"
#define DOT_STEP(insn, r) insn " %%zmm30, %%zmm31, %%zmm" #r "\n\t"
#define DOT_24(X, a)                                                                                                   \
    X(a, 0) X(a, 1) X(a, 2) X(a, 3) X(a, 4) X(a, 5) X(a, 6) X(a, 7) X(a, 8) X(a, 9) X(a, 10) X(a, 11) X(a, 12)         \
        X(a, 13) X(a, 14) X(a, 15) X(a, 16) X(a, 17) X(a, 18) X(a, 19) X(a, 20) X(a, 21) X(a, 22) X(a, 23)
#define DOT_Z(a, r) DOT_ZERO(r)
#define DOT_S(a, r) DOT_STEP(a, r)
#define DOT_CLOBBERS                                                                                                   \
    "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12",        \
        "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", "xmm23", "xmm30",   \
        "xmm31"

/* iters x 24 dot-product instructions on zmm registers; the first
 * accumulator ends in state[0..15]. */
#define DOT_KERNEL(name, insn)                                                                                         \
    __attribute__((target("avx512f"), noinline)) static void name(float *state, int64_t iters, const void *a,          \
                                                                  const void *b)                                       \
    {                                                                                                                  \
        if (iters < 1)                                                                                                 \
            return;                                                                                                    \
        __asm__ volatile("vmovdqu32 (%[a]), %%zmm30\n\t"                                                              \
                         "vmovdqu32 (%[b]), %%zmm31\n\t" DOT_24(DOT_Z, 0) "1:\n\t" DOT_24(DOT_S, insn)                 \
                         "dec %[n]\n\t"                                                                                \
                         "jnz 1b\n\t"                                                                                  \
                         "vmovups %%zmm0, (%[s])\n\t"                                                                  \
                         : [n] "+r"(iters)                                                                             \
                         : [s] "r"(state), [a] "r"(a), [b] "r"(b)                                                      \
                         : "memory", "cc", DOT_CLOBBERS);                                                              \
    }
DOT_KERNEL(dot_vdpbf16ps, "vdpbf16ps")
DOT_KERNEL(dot_vpdpbusd, "vpdpbusd")

static void peak_vdpbf16ps(float *state, int64_t iters) { dot_vdpbf16ps(state, iters, dot_operands[0], dot_operands[1]); }
static void peak_vpdpbusd(float *state, int64_t iters) { dot_vpdpbusd(state, iters, int8_operands, int8_operands); }

/* The tile configuration: palette 1, tiles 0-7 of 16 rows of 64 bytes. */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

/* iters x 4 tile products (int8: TDPBUSD, else TDPBF16PS) on tiles loaded once. */
static void amx_kernel(float *state, int64_t iters, int int8)
{
    tile_config cfg __attribute__((aligned(64)));
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++)
        cfg.colsb[t] = 64, cfg.rows[t] = 16;
    static uint32_t tile[2][256] __attribute__((aligned(64)));
    for (int i = 0; i < 256; i++)
        tile[0][i] = int8 ? 0x01010101u : 0x3f803f80u, tile[1][i] = int8 ? 0x01010101u : 0x3a833a83u;
    if (iters < 1)
        return;
    __asm__ volatile("ldtilecfg (%[cfg])\n\t"
                     "tileloadd (%[a], %[stride], 1), %%tmm4\n\t"
                     "tileloadd (%[a], %[stride], 1), %%tmm5\n\t"
                     "tileloadd (%[b], %[stride], 1), %%tmm6\n\t"
                     "tileloadd (%[b], %[stride], 1), %%tmm7\n\t"
                     "tilezero %%tmm0\n\t"
                     "tilezero %%tmm1\n\t"
                     "tilezero %%tmm2\n\t"
                     "tilezero %%tmm3\n\t"
                     :
                     : [cfg] "r"(&cfg), [a] "r"(tile[0]), [b] "r"(tile[1]), [stride] "r"((int64_t)64)
                     : "memory");
    if (int8)
        __asm__ volatile("1:\n\t"
                         "tdpbusd %%tmm6, %%tmm4, %%tmm0\n\t"
                         "tdpbusd %%tmm7, %%tmm4, %%tmm1\n\t"
                         "tdpbusd %%tmm6, %%tmm5, %%tmm2\n\t"
                         "tdpbusd %%tmm7, %%tmm5, %%tmm3\n\t"
                         "dec %[n]\n\t"
                         "jnz 1b\n\t"
                         : [n] "+r"(iters)
                         :
                         : "cc");
    else
        __asm__ volatile("1:\n\t"
                         "tdpbf16ps %%tmm6, %%tmm4, %%tmm0\n\t"
                         "tdpbf16ps %%tmm7, %%tmm4, %%tmm1\n\t"
                         "tdpbf16ps %%tmm6, %%tmm5, %%tmm2\n\t"
                         "tdpbf16ps %%tmm7, %%tmm5, %%tmm3\n\t"
                         "dec %[n]\n\t"
                         "jnz 1b\n\t"
                         : [n] "+r"(iters)
                         :
                         : "cc");
    /* C 0 into state[0..255], then the tiles released */
    __asm__ volatile("tilestored %%tmm0, (%[s], %[stride], 1)\n\t"
                     "tilerelease\n\t"
                     :
                     : [s] "r"(state), [stride] "r"((int64_t)64)
                     : "memory");
}
static void peak_tdpbf16ps(float *state, int64_t iters) { amx_kernel(state, iters, 0); }
static void peak_tdpbusd(float *state, int64_t iters) { amx_kernel(state, iters, 1); }

static unsigned long long xcr0(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) /* OSXSAVE */
        return 0;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (unsigned long long)hi << 32 | lo;
}

/* 1 when the operating system has granted this process AMX's tile data
 * (Linux: asked once, per process); 0 with the reason in why. */
static int amx_granted(char *why, size_t n)
{
    static int state; /* 0 not asked, 1 granted, -1 refused */
    static char refused[160];
    if (!state) {
        enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
        state = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0 ? 1 : -1;
        if (state < 0)
            snprintf(refused, sizeof refused, "the kernel refused the AMX tile registers (arch_prctl: %s)",
                     strerror(errno));
    }
    if (state < 0)
        snprintf(why, n, "%s", refused);
    return state > 0;
}

int bench_dot_units(bench_dot_unit *u)
{
    unsigned a, b, c, d;
    unsigned b7 = 0, c7 = 0, d7 = 0, a71 = 0;
    if (__get_cpuid_max(0, NULL) >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        b7 = b, c7 = c, d7 = d;
        if (a >= 1) {
            __cpuid_count(7, 1, a, b, c, d);
            a71 = a;
        }
    }
    unsigned long long x = xcr0();
    int avx512 = (b7 & (1u << 16)) && (x & 0xe6) == 0xe6;  /* AVX512F; XMM, YMM, opmask, ZMM state */
    int tiles = (d7 & (1u << 24)) && (x & 0x60000) == 0x60000; /* AMX-TILE; TILECFG, TILEDATA state */
    const struct {
        const char *precision, *insn, *feature;
        int has, amx;
        double ops;
        void (*fn)(float *, int64_t);
    } all[BENCH_DOT_UNITS] = {
        /* 24 x 16 lanes x 2 bf16 products, each a multiply and an add */
        {"bf16", "VDPBF16PS", "AVX512-BF16", avx512 && (a71 & (1u << 5)), 0, 24.0 * 16 * 2 * 2, peak_vdpbf16ps},
        /* 4 x C[16 x 16] += A[16 x 32] B[32 x 16] */
        {"bf16", "TDPBF16PS", "AMX-BF16", tiles && (d7 & (1u << 22)), 1, 4.0 * 16 * 16 * 32 * 2, peak_tdpbf16ps},
        /* 24 x 16 lanes x 4 u8 x s8 products */
        {"int8", "VPDPBUSD", "AVX512-VNNI", avx512 && (c7 & (1u << 11)), 0, 24.0 * 16 * 4 * 2, peak_vpdpbusd},
        /* 4 x C[16 x 16] += A[16 x 64] B[64 x 16] */
        {"int8", "TDPBUSD", "AMX-INT8", tiles && (d7 & (1u << 25)), 1, 4.0 * 16 * 16 * 64 * 2, peak_tdpbusd},
    };
    for (int i = 0; i < BENCH_DOT_UNITS; i++) {
        memset(&u[i], 0, sizeof u[i]);
        u[i].precision = all[i].precision, u[i].insn = all[i].insn, u[i].feature = all[i].feature;
        u[i].ops_per_iter = all[i].ops;
        if (!all[i].has)
            snprintf(u[i].why, sizeof u[i].why, "the CPU has no %s%s", all[i].feature,
                     all[i].amx && (d7 & (1u << 24)) && !tiles   ? " tile state enabled by the OS"
                     : !all[i].amx && (b7 & (1u << 16)) && !avx512 ? " state enabled by the OS"
                                                                   : "");
        else if (!all[i].amx || amx_granted(u[i].why, sizeof u[i].why))
            u[i].fn = all[i].fn;
    }
    return BENCH_DOT_UNITS;
}

#else

int bench_dot_units(bench_dot_unit *u)
{
    static const char *const names[BENCH_DOT_UNITS][3] = {{"bf16", "VDPBF16PS", "AVX512-BF16"},
                                                          {"bf16", "TDPBF16PS", "AMX-BF16"},
                                                          {"int8", "VPDPBUSD", "AVX512-VNNI"},
                                                          {"int8", "TDPBUSD", "AMX-INT8"}};
    for (int i = 0; i < BENCH_DOT_UNITS; i++) {
        memset(&u[i], 0, sizeof u[i]);
        u[i].precision = names[i][0], u[i].insn = names[i][1], u[i].feature = names[i][2];
        snprintf(u[i].why, sizeof u[i].why, "not an x86-64 Linux build");
    }
    return BENCH_DOT_UNITS;
}

#endif
