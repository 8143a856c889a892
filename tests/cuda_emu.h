/* cuda_emu.h: runs the CUDA programs vitc generates on the CPU, so that
 * every kernel, launch plan and index computation of the CUDA backend is
 * checked against the reference interpreter on machines without a GPU.
 *
 * The program text NVRTC compiles is compiled here by the host C++ compiler
 * with VITC_EMU defined and this header forced in first (g++ -include).
 * Everything the device library's prelude does with inline PTX gets a host
 * implementation that follows the PTX ISA's definitions: the fragment
 * layouts of mma.m16n8k16 (f16, bf16) and mma.m16n8k8 (tf32), ldmatrix with
 * and without .trans, cp.async with zero fill, cvt rounding, shuffles.
 *
 * Each CUDA thread is a fiber (ucontext).  The blocks of a launch run one
 * after another, in order or (every other launch) in the reverse order; the
 * warps of a block run one at a time, each through its warp collectives
 * until it waits at __syncthreads or ends, in alternating order between
 * barriers, so that a missing barrier shows up as wrong data.  cp.async copies happen only when cp.async.wait_group completes
 * their group, as late as the hardware may make them.  Errors that the
 * hardware would turn into hangs or undefined results (a barrier not reached
 * by every thread, a warp collective with lanes that exited or went
 * elsewhere, a misaligned or out-of-bounds ldmatrix or cp.async, dynamic
 * shared memory above the launch's size) stop the launch with a message.
 *
 * Hopper (sm_90a), for the library compiled with VITC_EMU_SM90A, where the
 * kernels take their wgmma bodies (VK_SM90A): wgmma.mma_async with shared
 * memory descriptors (K-major: no swizzle and the 128-byte swizzle; B
 * MN-major, imm-trans-b: the 128-byte swizzle) or A from registers (the
 * fragments of a warp's 16 rows exchanged between its lanes at issue, as
 * .sync.aligned lets them), emulated per thread on its own accumulator
 * fragment; its fence, commit and wait
 * groups; mbarrier init, arrive, expect_tx and try_wait.parity with phases
 * and transaction counts; cp.async.bulk.tensor from tensor maps (boxes,
 * zeros outside the matrix, the 128-byte swizzle; tests/emu_tmap.h); the
 * proxy fence between cp.async's writes (generic proxy) and wgmma's reads
 * (async proxy).  A thread at an mbarrier whose phase has not completed
 * yields (SPIN) until the other warps have had their turn; a round in which
 * nothing changes is a deadlock, reported with the barrier.  The engines'
 * timing alternates between blocks: bulk copies land at issue or only when
 * a thread waits on their barrier, wgmma reads its operands at issue or
 * only when wait_group retires it (its results appear at the retirement
 * either way), so that a wrong phase, a stage released too early or
 * refilled too soon shows up as wrong data.  What would be undefined (a
 * wgmma without wgmma.fence, a wgmma reading cp.async data no
 * fence.proxy.async ordered, the threads of a warpgroup issuing different
 * wgmma, an mbarrier used before its init or overwritten, a wgmma never
 * retired, a misaligned bulk copy, a block ending with a bulk copy no thread
 * waited for) stops the launch with a message.
 * setmaxnreg and the tensor map prefetch are no-ops.
 *
 * The device library's prelude includes this header in place of its
 * hardware section when VITC_EMU is defined (compile the program with -I
 * pointing here); the params structs (params.h), h16 and b16 are defined by
 * then.  Entry point: vk_emu_launch (extern "C", found with dlsym).
 *
 * A kernel's symbol takes the launch's argument slots (vk_args) by value and
 * runs its body on the params struct they start with, as the driver copies
 * the struct's bytes from the same slots on a GPU. */
#ifndef VK_CUDA_EMU_H
#define VK_CUDA_EMU_H

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>

#include "emu_tmap.h"

struct vk_dim3 {
    unsigned x, y, z;
};

/* The argument slots of a launch, as the runtime fills them. */
struct vk_args {
    unsigned long long a[VK_PARAM_SLOTS];
};

namespace vkemu {

/* SPIN: at an mbarrier wait whose phase has not completed; it runs again
 * after the other warps had their turn */
enum { RUN, BAR_BLOCK, BAR_WARP, SPIN, DONE };
enum { STACK_BYTES = 256 * 1024, MAX_PENDING = 256, MAX_WG = 32, MAX_UNFENCED = 2048, MAX_MBAR = 64, MAX_TMA = 16,
       WG_LOG = 256 };
/* The shared-window address of the first byte of dynamic shared memory: not
 * 1024-aligned, so that a kernel must align its swizzled stages itself. */
enum { SMEM_BASE = 0x10 };

struct pending {
    void *dst;
    const void *src;
    int bytes, group;
};

/* Switching between fibers: on x86-64 a few instructions that save the
 * callee-saved registers (no signal mask system call, unlike swapcontext,
 * which would dominate the run time); elsewhere ucontext. */
#if defined(__x86_64__)
#define VK_EMU_FAST_SWITCH 1
struct ctx_t {
    void *sp;
};
#else
typedef ucontext_t ctx_t;
#endif

/* A wgmma.mma_async, this thread's share of its warpgroup's: the product is
 * taken from shared memory at issue or when a wgmma.wait_group retires its
 * group (the earliest and the latest the hardware may read the operands,
 * alternating between blocks), and added to the accumulators at the
 * retirement (the earliest the program may read them). */
struct wg_op {
    float *d;
    unsigned long long da, db; /* da 0: A from registers (a) */
    int kind, n, group;
    bool read, b_mn; /* b_mn: B MN-major (imm-trans-b 1) */
    float a[2][16];  /* A from registers: this thread's two rows, gathered from its quad at issue */
    float prod[128];
};

struct fiber {
    ctx_t ctx;
    vk_dim3 tid;
    int lane, warp, state;
    unsigned long long ncoll; /* warp collectives this thread has entered */
    char *stack;
    pending cp[MAX_PENDING];
    int ncp, committed;
    wg_op wg[MAX_WG];
    int nwg, wg_committed;
    unsigned long long wg_issued; /* wgmma.mma_async issued: its place in the warpgroup's sequence */
    bool wg_fenced; /* a wgmma.fence since the accumulators were last readable */
    /* 16-byte chunks of shared memory its cp.async wrote since its last fence.proxy.async */
    int unfenced[MAX_UNFENCED];
    int nunfenced;
    bool unfenced_overflow;
    const void *spin_bar; /* SPIN: the mbarrier and parity it waits for */
    unsigned spin_parity;
};

/* A bulk tensor copy in flight (in a block whose copies land late): it lands
 * when a thread waits on its mbarrier's phase, the latest it may. */
struct tma_copy {
    unsigned dst; /* shared address */
    vk_emu_tmap map;
    int c0, c1;
};

/* An mbarrier: its state is the emulation's; the 8 bytes of shared memory
 * hold a stamp that must still be there at each use (nothing overwrote it). */
struct mbar {
    unsigned addr;
    int expected, pending;
    long long tx;
    unsigned phase; /* phases completed */
    unsigned long long stamp;
    tma_copy copy[MAX_TMA];
    int ncopy;
};

struct warpx {
    uint32_t slot[32][12];
    const void *addr[32];
    int op[32];
    unsigned long long computed;
};

struct block {
    fiber *f;
    int n;
    ctx_t sched;
    unsigned char *smem;
    size_t smem_bytes;
    warpx *w;
    int nwarps;
    int failed;
    char err[512];
    /* per 16-byte chunk: 1 + the thread whose cp.async write there no
     * fence.proxy.async has yet ordered before the async proxy's reads; 0 none */
    unsigned short *unfenced_by;
    mbar bars[MAX_MBAR];
    int nbars;
    unsigned long long events; /* progress: a round of the scheduler without any means a deadlock */
    /* the asynchronous engines' timing in this block: bulk copies land at
     * issue (else when a thread waits on their mbarrier), wgmma reads its
     * operands at issue (else at its wait_group) */
    bool tma_early, wg_early;
    /* per warpgroup, its last WG_LOG wgmma as the first of its threads issued
     * them: the others must issue the same (.sync.aligned) */
    struct wg_entry {
        unsigned long long seq; /* 1 + its place in the sequence; 0 none */
        unsigned long long da, db;
        int kind, n, seen, warp;
    } (*wg_log)[WG_LOG];
};

static fiber *cur;
static block *blk;
static vk_tmap g_tmaps[2];
static const vk_tmap *g_tmap[2];
static unsigned long long g_block_seq; /* blocks run by this library: the engines' timing cycles with it */
static unsigned long long g_launch_seq; /* launches run by this library */
static vk_dim3 g_block_idx, g_block_dim, g_grid_dim;
#ifdef VK_EMU_FAST_SWITCH
/* Saves the callee-saved registers and the stack pointer into *from, and
 * resumes the context whose stack pointer is to. */
extern "C" void vk_emu_switch(void **from, void *to);
__asm__(".text\n"
        ".globl vk_emu_switch\n"
        ".hidden vk_emu_switch\n"
        ".type vk_emu_switch,@function\n"
        "vk_emu_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  subq $8, %rsp\n  stmxcsr (%rsp)\n  fnstcw 4(%rsp)\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  ldmxcsr (%rsp)\n  fldcw 4(%rsp)\n  addq $8, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size vk_emu_switch, .-vk_emu_switch\n");
static void ctx_switch(ctx_t *from, ctx_t *to) { vk_emu_switch(&from->sp, to->sp); }
#else
static void ctx_switch(ctx_t *from, ctx_t *to) { swapcontext(from, to); }
#endif

static void fail(const char *fmt, ...)
{
    if (!blk->failed) {
        va_list ap;
        va_start(ap, fmt);
        int k = snprintf(blk->err, sizeof blk->err, "block (%u,%u,%u) thread %u: ", g_block_idx.x, g_block_idx.y,
                         g_block_idx.z, cur ? cur->tid.x : 0u);
        if (k > 0 && (size_t)k < sizeof blk->err)
            vsnprintf(blk->err + k, sizeof blk->err - (size_t)k, fmt, ap);
        va_end(ap);
        blk->failed = 1;
    }
    if (cur) {
        cur->state = DONE;
        ctx_switch(&cur->ctx, &blk->sched); /* never resumed */
    }
}

static void yield_as(int state)
{
    cur->state = state;
    if (state != SPIN)
        blk->events++;
    ctx_switch(&cur->ctx, &blk->sched);
}

/* ---- shared memory and cp.async ---- */
static void check_smem(const void *p, size_t bytes, const char *what)
{
    const unsigned char *c = (const unsigned char *)p;
    if (c < blk->smem || c + bytes > blk->smem + blk->smem_bytes)
        fail("%s: shared address %p outside the %zu bytes of dynamic shared memory", what, p, blk->smem_bytes);
    if (((uintptr_t)p & 15) != 0)
        fail("%s: shared address %p not 16-byte aligned", what, p);
}

static void cp_async16(void *dst, const void *src, bool ok)
{
    check_smem(dst, 16, "cp.async");
    if (ok && ((uintptr_t)src & 15) != 0)
        fail("cp.async: global address %p not 16-byte aligned", src);
    if (cur->ncp == MAX_PENDING)
        fail("cp.async: more than %d copies in flight", MAX_PENDING);
    cur->cp[cur->ncp++] = pending{dst, ok ? src : NULL, ok ? 16 : 0, cur->committed};
}

static void cp_async_wait(int n)
{
    int keep = 0;
    for (int i = 0; i < cur->ncp; i++) {
        pending *p = &cur->cp[i];
        if (p->group < cur->committed - n) {
            if (p->bytes)
                memcpy(p->dst, p->src, 16);
            else
                memset(p->dst, 0, 16);
            int chunk = (int)(((unsigned char *)p->dst - blk->smem) >> 4);
            blk->unfenced_by[chunk] = (unsigned short)(cur - blk->f + 1);
            if (cur->nunfenced < MAX_UNFENCED)
                cur->unfenced[cur->nunfenced++] = chunk;
            else
                cur->unfenced_overflow = true;
        } else {
            cur->cp[keep++] = *p;
        }
    }
    cur->ncp = keep;
}

/* ---- warp collectives: every lane deposits, the first lane to resume
 * after the warp barrier computes for all, a second barrier ends it ---- */
static warpx *enter(int op)
{
    warpx *w = &blk->w[cur->warp];
    w->op[cur->lane] = op;
    cur->ncoll++;
    return w;
}
static bool first(warpx *w, int op)
{
    if (w->computed >= cur->ncoll)
        return false;
    w->computed = cur->ncoll;
    for (int l = 0; l < 32; l++)
        if (w->op[l] != op)
            fail("warp collective: lane %d is in another collective (op %d, not %d)", l, w->op[l], op);
    return true;
}

static float bits_f32(uint32_t u);
static uint32_t f32_bits(float f);
/* shfl.sync: every lane deposits v (collective op), then reads lane from's */
static uint32_t shfl(uint32_t v, int op, int from)
{
    warpx *w = enter(op);
    w->slot[cur->lane][0] = v;
    yield_as(BAR_WARP);
    first(w, op);
    uint32_t r = w->slot[from & 31][0];
    yield_as(BAR_WARP);
    return r;
}
static float shfl_xor(float v, int mask) { return bits_f32(shfl(f32_bits(v), 1, cur->lane ^ (mask & 31))); }
/* lane src's v, for every lane */
static unsigned shfl_idx(unsigned v, int src) { return shfl(v, 5, src); }

/* every lane of the warp here before any goes on */
static void syncwarp(void)
{
    warpx *w = enter(6);
    yield_as(BAR_WARP);
    first(w, 6);
}

static void ldsm_x4(uint32_t *r, const void *row, bool trans)
{
    int op = trans ? 3 : 2;
    warpx *w = enter(op);
    check_smem(row, 16, "ldmatrix");
    w->addr[cur->lane] = row;
    yield_as(BAR_WARP);
    if (first(w, op)) {
        for (int l = 0; l < 32; l++)
            for (int j = 0; j < 4; j++) {
                uint32_t v;
                if (!trans) {
                    const unsigned char *rp = (const unsigned char *)w->addr[8 * j + l / 4];
                    memcpy(&v, rp + 4 * (l % 4), 4);
                } else {
                    uint16_t lo, hi;
                    memcpy(&lo, (const unsigned char *)w->addr[8 * j + 2 * (l % 4)] + 2 * (l / 4), 2);
                    memcpy(&hi, (const unsigned char *)w->addr[8 * j + 2 * (l % 4) + 1] + 2 * (l / 4), 2);
                    v = lo | ((uint32_t)hi << 16);
                }
                w->slot[l][4 + j] = v;
            }
    }
    for (int j = 0; j < 4; j++)
        r[j] = w->slot[cur->lane][4 + j];
    yield_as(BAR_WARP);
}

/* ---- number formats ---- */
static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float h16_f32(uint16_t h)
{
    uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023;
    if (e == 31)
        return bits_f32(s | 0x7f800000u | (m << 13));
    if (e == 0)
        return (s ? -1.0f : 1.0f) * ldexpf((float)m, -24);
    return bits_f32(s | ((e + 112) << 23) | (m << 13));
}
/* Round to nearest even, overflow to infinity, subnormals kept. */
static uint16_t f32_h16(float f)
{
    uint32_t u = f32_bits(f), s = (u >> 16) & 0x8000u;
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)(s | 0x7e00u);
    float a = fabsf(f);
    if (a >= 65520.0f)
        return (uint16_t)(s | 0x7c00u);
    if (a < 6.103515625e-05f) { /* subnormal: multiples of 2^-24 */
        float q = nearbyintf(a * 16777216.0f); /* default rounding: to nearest even */
        return (uint16_t)(s | (uint32_t)q);
    }
    uint32_t e = ((u >> 23) & 255) - 112, m = u & 0x7fffffu;
    uint32_t h = (e << 10) | (m >> 13), rest = m & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1)))
        h++;
    return (uint16_t)(s | h);
}
static float b16_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }
static uint16_t f32_b16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}
static uint32_t tf32_round(uint32_t u)
{
    if ((u & 0x7f800000u) == 0x7f800000u)
        return u;
    return (u + 0x1000u) & 0xffffe000u;
}

/* ---- mma: D = A B + C on one warp, fragments as in the PTX ISA ---- */
enum { MMA_F16 = 10, MMA_BF16 = 11, MMA_TF32 = 12 };

static float frag_elem(uint32_t reg, int half, int kind)
{
    uint16_t h = (uint16_t)(half ? reg >> 16 : reg & 0xffffu);
    return kind == MMA_F16 ? h16_f32(h) : b16_f32(h);
}

static void mma(float *d, const uint32_t *a, const uint32_t *b, int kind)
{
    warpx *w = enter(kind);
    uint32_t *s = w->slot[cur->lane];
    for (int i = 0; i < 4; i++)
        s[i] = a[i];
    s[4] = b[0];
    s[5] = b[1];
    for (int i = 0; i < 4; i++)
        s[6 + i] = f32_bits(d[i]);
    yield_as(BAR_WARP);
    if (first(w, kind)) {
        int K = kind == MMA_TF32 ? 8 : 16;
        float A[16][16], B[16][8], D[16][8];
        for (int l = 0; l < 32; l++) {
            int g = l >> 2, t = l & 3;
            const uint32_t *q = w->slot[l];
            if (kind == MMA_TF32) {
                A[g][t] = bits_f32(q[0] & 0xffffe000u);
                A[g + 8][t] = bits_f32(q[1] & 0xffffe000u);
                A[g][t + 4] = bits_f32(q[2] & 0xffffe000u);
                A[g + 8][t + 4] = bits_f32(q[3] & 0xffffe000u);
                B[t][g] = bits_f32(q[4] & 0xffffe000u);
                B[t + 4][g] = bits_f32(q[5] & 0xffffe000u);
            } else {
                for (int i = 0; i < 8; i++) {
                    int row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8;
                    int col = t * 2 + (i & 1) + (i >= 4 ? 8 : 0);
                    A[row][col] = frag_elem(q[i / 2], i & 1, kind);
                }
                for (int i = 0; i < 4; i++)
                    B[t * 2 + (i & 1) + (i >= 2 ? 8 : 0)][g] = frag_elem(q[4 + i / 2], i & 1, kind);
            }
            D[g][2 * t] = bits_f32(q[6]);
            D[g][2 * t + 1] = bits_f32(q[7]);
            D[g + 8][2 * t] = bits_f32(q[8]);
            D[g + 8][2 * t + 1] = bits_f32(q[9]);
        }
        for (int i = 0; i < 16; i++)
            for (int j = 0; j < 8; j++) {
                float acc = D[i][j];
                for (int k = 0; k < K; k++)
                    acc += A[i][k] * B[k][j];
                D[i][j] = acc;
            }
        for (int l = 0; l < 32; l++) {
            int g = l >> 2, t = l & 3;
            uint32_t *q = w->slot[l];
            q[6] = f32_bits(D[g][2 * t]);
            q[7] = f32_bits(D[g][2 * t + 1]);
            q[8] = f32_bits(D[g + 8][2 * t]);
            q[9] = f32_bits(D[g + 8][2 * t + 1]);
        }
    }
    for (int i = 0; i < 4; i++)
        d[i] = bits_f32(s[6 + i]);
    yield_as(BAR_WARP);
}

/* ---- Hopper: shared addresses, the async proxy, wgmma, mbarrier, TMA ---- */
static unsigned smem_addr(const void *p)
{
    const unsigned char *c = (const unsigned char *)p;
    if (c < blk->smem || c > blk->smem + blk->smem_bytes)
        fail("a shared address of %p, outside the %zu bytes of dynamic shared memory", p, blk->smem_bytes);
    return SMEM_BASE + (unsigned)(c - blk->smem);
}
/* The bytes at shared address a, of which n must be inside dynamic shared memory. */
static unsigned char *smem_at(unsigned long long a, size_t n, const char *what)
{
    if (a < SMEM_BASE || a - SMEM_BASE + n > blk->smem_bytes)
        fail("%s: shared address 0x%llx (%zu bytes) outside the %zu bytes of dynamic shared memory", what, a, n,
             blk->smem_bytes);
    return blk->smem + (a - SMEM_BASE);
}

/* fence.proxy.async: this thread's cp.async writes are now ordered before
 * the async proxy's reads (of any thread, after a barrier). */
static void fence_proxy_async(void)
{
    unsigned short me = (unsigned short)(cur - blk->f + 1);
    if (cur->unfenced_overflow) {
        for (size_t c = 0; c < blk->smem_bytes / 16; c++)
            if (blk->unfenced_by[c] == me)
                blk->unfenced_by[c] = 0;
    } else {
        for (int i = 0; i < cur->nunfenced; i++)
            if (blk->unfenced_by[cur->unfenced[i]] == me)
                blk->unfenced_by[cur->unfenced[i]] = 0;
    }
    cur->nunfenced = 0;
    cur->unfenced_overflow = false;
}

/* The address of byte kb (of k) of row r (M or N) of a wgmma operand, K-major
 * (or MN-major where mn: B with imm-trans-b 1), whose shared memory
 * descriptor is desc (PTX ISA, the matrix descriptor of the warpgroup-level
 * MMA): start address bits 0-13, leading byte offset 16-29, stride byte
 * offset 32-45 (each in 16-byte units), base offset 49-51, swizzle mode 62-63.  No swizzle: core matrices of 8 rows x 16
 * bytes, LBO apart along k, SBO apart between groups of 8 rows.  128-byte
 * swizzle: rows of 128 bytes, groups of 8 rows SBO apart, the 16-byte unit
 * (address bits 4-6) XORed with the row within its 1024 bytes (bits 7-9).
 * The other swizzles (64, 32 bytes) and a base offset: the kernels use none,
 * and what is not checked on a GPU is refused rather than guessed. */
static unsigned long long wg_addr(unsigned long long desc, int r, int kb, bool mn)
{
    unsigned long long start = (desc & 0x3fff) << 4, lbo = ((desc >> 16) & 0x3fff) << 4,
                       sbo = ((desc >> 32) & 0x3fff) << 4;
    int base = (int)((desc >> 49) & 7), sw = (int)(desc >> 62);
    if (base != 0 || (sw != 0 && sw != 1))
        fail("wgmma: a descriptor with base offset %d and swizzle mode %d (the emulation knows none and the "
             "128-byte swizzle, base offset 0)", base, sw);
    if (mn) {
        /* MN-major (B with imm-trans-b 1; the PTX ISA's canonical layout, not yet checked on a GPU), the
         * 128-byte swizzle only: rows of k, 128 bytes (64 elements of N) each, groups of 8 rows SBO apart,
         * the next 64 elements of N LBO on */
        if (sw != 1)
            fail("wgmma: an MN-major operand without the 128-byte swizzle (the emulation knows only that one)");
        int k = kb / 2;
        unsigned long long a = start + (unsigned long long)(k >> 3) * sbo + (unsigned long long)(r >> 6) * lbo +
                               (k & 7) * 128 + (r & 63) * 2;
        return a ^ (((a >> 7) & 7) << 4);
    }
    if (sw == 0)
        return start + (unsigned long long)(r >> 3) * sbo + (unsigned long long)(kb >> 4) * lbo + (r & 7) * 16 +
               (kb & 15);
    unsigned long long a = start + (unsigned long long)(r >> 3) * sbo + (r & 7) * 128 + kb;
    return a ^ (((a >> 7) & 7) << 4);
}

/* Element k of row r of the operand: read where the descriptor says, after
 * checking that no cp.async write there still waits for a proxy fence. */
static float wg_elem(unsigned long long desc, int r, int k, int kind, bool mn)
{
    unsigned long long a = wg_addr(desc, r, 2 * k, mn);
    const unsigned char *p = smem_at(a, 2, "wgmma");
    unsigned short by = blk->unfenced_by[(p - blk->smem) >> 4];
    if (by)
        fail("wgmma reads shared address 0x%llx, which thread %u wrote by cp.async with no fence.proxy.async "
             "between that write and this read", a, by - 1u);
    uint16_t h;
    memcpy(&h, p, 2);
    return kind == MMA_F16 ? h16_f32(h) : b16_f32(h);
}

/* This thread's share of the product A (64 x 16) B (16 x n) into p: its two
 * rows (warp % 4 * 16 + lane / 4, + 8) and, per 8 columns j, columns 8j +
 * lane % 4 * 2 (+1), as mma.m16n8's C fragment (p[4j..4j+3]). */
static void wg_product(const wg_op *o, float *p)
{
    int lane = cur->lane, r0 = (cur->warp & 3) * 16 + lane / 4;
    float A[2][16], B[16];
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 16; k++)
            A[h][k] = o->da ? wg_elem(o->da, r0 + 8 * h, k, o->kind, false) : o->a[h][k];
    for (int j = 0; j < o->n / 8; j++)
        for (int c = 0; c < 2; c++) {
            int col = 8 * j + (lane & 3) * 2 + c;
            for (int k = 0; k < 16; k++)
                B[k] = wg_elem(o->db, col, k, o->kind, o->b_mn);
            for (int h = 0; h < 2; h++) {
                float acc = 0.0f;
                for (int k = 0; k < 16; k++)
                    acc += A[h][k] * B[k];
                p[4 * j + 2 * h + c] = acc;
            }
        }
}

static void wg_fence(void) { cur->wg_fenced = true; }
/* A wgmma.mma_async: A by descriptor da, or (da 0) from the registers areg (mma.m16n8k16's A fragment of the
 * warp's 16 rows), which the warp's lanes exchange as the .sync.aligned instruction lets them; B by descriptor db,
 * MN-major where b_mn. */
static void wg_mma(float *d, unsigned long long da, const uint32_t *areg, unsigned long long db, bool b_mn, int kind,
                   int n)
{
    if (!cur->wg_fenced)
        fail("wgmma.mma_async without a wgmma.fence after the accumulators were last readable");
    if (cur->nwg == MAX_WG)
        fail("wgmma: more than %d wgmma.mma_async in flight", MAX_WG);
    if (n % 8 || n < 8 || n > 256)
        fail("wgmma: N = %d", n);
    /* the same wgmma from every thread of the warpgroup, as .sync.aligned requires (not checked where
     * one warp runs more than WG_LOG wgmma ahead of another) */
    unsigned long long seq = ++cur->wg_issued;
    block::wg_entry *e = &blk->wg_log[cur->warp / 4][seq % WG_LOG];
    if (e->seq != seq) {
        if (e->seq < seq && (e->seen == 0 || e->seen == 128))
            *e = block::wg_entry{seq, da, db, kind | (b_mn ? 0x100 : 0), n, 1, cur->warp};
    } else if (e->da != da || e->db != db || e->kind != (kind | (b_mn ? 0x100 : 0)) || e->n != n) {
        fail("wgmma number %llu of warpgroup %d: warp %d issues descriptors 0x%llx, 0x%llx (N %d), warp %d "
             "0x%llx, 0x%llx (N %d): a warpgroup's threads issue the same wgmma", seq, cur->warp / 4, cur->warp, da,
             db, n, e->warp, e->da, e->db, e->n);
    } else {
        e->seen++;
    }
    wg_op *o = &cur->wg[cur->nwg++];
    o->d = d, o->da = da, o->db = db, o->kind = kind, o->n = n, o->group = cur->wg_committed, o->b_mn = b_mn;
    if (!da) { /* rows g (lane / 4) and g + 8 of the warp's 16: columns 2t, 2t + 1, 2t + 8, 2t + 9 from lane 4g + t */
        warpx *w = enter(4);
        memcpy(w->slot[cur->lane], areg, 16);
        yield_as(BAR_WARP);
        first(w, 4);
        for (int t = 0; t < 4; t++) {
            const uint32_t *q = w->slot[(cur->lane & ~3) + t];
            for (int h = 0; h < 2; h++)
                for (int e = 0; e < 2; e++) {
                    o->a[h][2 * t + e] = frag_elem(q[h], e, kind);
                    o->a[h][2 * t + 8 + e] = frag_elem(q[2 + h], e, kind);
                }
        }
        yield_as(BAR_WARP);
    }
    o->read = blk->wg_early;
    if (o->read)
        wg_product(o, o->prod);
}
static void wg_commit(void) { cur->wg_committed++; }
/* wgmma.wait_group n: the groups older than the newest n are computed (in
 * the order they were issued); the accumulators are readable again. */
static void wg_wait(int n)
{
    int keep = 0;
    for (int i = 0; i < cur->nwg; i++) {
        wg_op *o = &cur->wg[i];
        if (o->group < cur->wg_committed - n) {
            if (!o->read)
                wg_product(o, o->prod);
            for (int e = 0; e < o->n / 2; e++)
                o->d[e] += o->prod[e];
        } else
            cur->wg[keep++] = cur->wg[i];
    }
    cur->nwg = keep;
    cur->wg_fenced = false;
}

static unsigned long long mbar_stamp(unsigned addr) { return 0x6d62617200000000ull ^ addr; }
/* The block's mbarrier at shared address a, or NULL before its init. */
static mbar *mbar_at(unsigned a)
{
    for (int i = 0; i < blk->nbars; i++)
        if (blk->bars[i].addr == a)
            return &blk->bars[i];
    return NULL;
}
static mbar *mbar_of(const void *bar, const char *what)
{
    unsigned a = smem_addr(bar);
    if (a % 8)
        fail("%s: mbarrier at shared address 0x%x, not 8-byte aligned", what, a);
    mbar *m = mbar_at(a);
    if (!m)
        fail("%s: no mbarrier.init at shared address 0x%x", what, a);
    unsigned long long v;
    memcpy(&v, bar, 8);
    if (v != m->stamp)
        fail("%s: the mbarrier at shared address 0x%x was overwritten since its mbarrier.init", what, a);
    return m;
}
static void mbar_init(void *bar, unsigned count)
{
    unsigned a = smem_addr(bar);
    smem_at(a, 8, "mbarrier.init");
    if (a % 8 || count < 1 || count > (1u << 20) - 1)
        fail("mbarrier.init at 0x%x with count %u", a, count);
    mbar *m = mbar_at(a);
    if (!m) {
        if (blk->nbars == MAX_MBAR)
            fail("more than %d mbarriers", MAX_MBAR);
        m = &blk->bars[blk->nbars++];
    }
    *m = mbar{};
    m->addr = a;
    m->expected = m->pending = (int)count;
    m->stamp = mbar_stamp(a);
    memcpy(bar, &m->stamp, 8);
    blk->events++;
}
/* The phase completes once every arrival and every expected byte is in. */
static void mbar_settle(mbar *m)
{
    if (m->pending == 0 && m->tx == 0) {
        m->phase++;
        m->pending = m->expected;
    }
}
static void mbar_arrive(void *bar, unsigned tx)
{
    mbar *m = mbar_of(bar, "mbarrier.arrive");
    if (m->pending == 0)
        fail("mbarrier.arrive at 0x%x: more arrivals than its count of %d in one phase", m->addr, m->expected);
    m->tx += tx;
    m->pending--;
    mbar_settle(m);
    blk->events++;
}
/* A bulk copy lands: the box, with zeros outside the matrix, swizzled by
 * the shared address as wgmma reads it; its bytes counted off the phase. */
static void tma_land(mbar *m, const tma_copy *c)
{
    const vk_emu_tmap *t = &c->map;
    unsigned row = t->box_cols * t->elem_bytes;
    smem_at(c->dst, (size_t)row * t->box_rows, "cp.async.bulk.tensor"); /* the box inside shared memory */
    for (unsigned i = 0; i < t->box_rows; i++)
        for (unsigned j = 0; j < t->box_cols; j++) {
            long long y = (long long)c->c1 + i, x = (long long)c->c0 + j;
            unsigned long long a = c->dst + (unsigned long long)i * row + (unsigned long long)j * t->elem_bytes;
            if (t->swizzle == 128)
                a ^= ((a >> 7) & 7) << 4;
            unsigned char *p = blk->smem + (a - SMEM_BASE);
            if (y >= 0 && x >= 0 && (unsigned long long)y < t->rows && (unsigned long long)x < t->cols)
                memcpy(p, (const unsigned char *)(uintptr_t)t->addr + (unsigned long long)y * t->row_bytes +
                              (unsigned long long)x * t->elem_bytes,
                       t->elem_bytes);
            else
                memset(p, 0, t->elem_bytes);
            blk->unfenced_by[(p - blk->smem) >> 4] = 0; /* written by the async proxy */
        }
    m->tx -= (long long)row * t->box_rows;
    mbar_settle(m);
    blk->events++;
}
static void tma_load2(void *dst, const vk_tmap *map, int c0, int c1, void *bar)
{
    mbar *m = mbar_of(bar, "cp.async.bulk.tensor");
    if (!map)
        fail("cp.async.bulk.tensor: no tensor map (the launch passed none)");
    vk_emu_tmap t;
    memcpy(&t, map, sizeof t);
    if (t.magic != VK_EMU_TMAP_MAGIC)
        fail("cp.async.bulk.tensor: the tensor map was not encoded (cuTensorMapEncodeTiled)");
    unsigned a = smem_addr(dst);
    if (a % (t.swizzle == 128 ? 1024 : 128) != 0)
        fail("cp.async.bulk.tensor: destination 0x%x not %d-byte aligned", a, t.swizzle == 128 ? 1024 : 128);
    if (t.swizzle && t.box_cols * t.elem_bytes != t.swizzle)
        fail("cp.async.bulk.tensor: a box row of %u bytes in a %u-byte swizzle", t.box_cols * t.elem_bytes,
             t.swizzle);
    if (t.swizzle != 0 && t.swizzle != 128)
        fail("cp.async.bulk.tensor: a %u-byte swizzle (the emulation knows none and 128 bytes)", t.swizzle);
    if (m->ncopy == MAX_TMA)
        fail("cp.async.bulk.tensor: more than %d copies in flight on one mbarrier", MAX_TMA);
    tma_copy c = {a, t, c0, c1};
    if (blk->tma_early)
        tma_land(m, &c);
    else
        m->copy[m->ncopy++] = c;
}
/* mbarrier.try_wait.parity: whether the phase of this parity has completed
 * (the current phase's parity: not yet; the other: the phase before).
 * Copies in flight on the barrier land first when it has not. */
static bool mbar_try_wait(void *bar, unsigned parity)
{
    mbar *m = mbar_of(bar, "mbarrier.try_wait");
    if ((m->phase & 1) == (parity & 1)) {
        for (int i = 0; i < m->ncopy; i++)
            tma_land(m, &m->copy[i]);
        m->ncopy = 0;
    }
    return (m->phase & 1) != (parity & 1);
}
static void mbar_wait(void *bar, unsigned parity)
{
    while (!mbar_try_wait(bar, parity)) {
        cur->spin_bar = bar;
        cur->spin_parity = parity;
        yield_as(SPIN);
    }
    blk->events++;
}

} /* namespace vkemu */

/* ---- what the prelude's !VITC_EMU section provides on the GPU ---- */
#define VK_DEV static inline
#define VK_KERNEL(name, threads, P)                                                                                    \
    static void name##_body(const P p);                                                                                \
    extern "C" void name(const vk_args slots)                                                                          \
    {                                                                                                                  \
        static_assert(sizeof(P) <= sizeof(vk_args), #P " fits the argument slots");                                   \
        P p;                                                                                                           \
        memcpy(&p, &slots, sizeof p);                                                                                  \
        name##_body(p);                                                                                                \
    }                                                                                                                  \
    static void name##_body(const P p)
/* The tensor maps of the launch (vk_emu_set_tmaps), as the kernel's two
 * parameters after its params struct are on a GPU. */
#define VK_KERNEL_TMA(name, threads, minb, P)                                                                 \
    extern "C" const int name##_vk_tmaps = 2; /* for the fake driver: the maps it takes */                    \
    VK_KERNEL(name, threads, P)
#define VK_TMAPS vkemu::g_tmap[0], vkemu::g_tmap[1]
#define __device__
#define __forceinline__ inline
#define __global__
#define threadIdx (vkemu::cur->tid)
#define blockIdx (vkemu::g_block_idx)
#define blockDim (vkemu::g_block_dim)
#define gridDim (vkemu::g_grid_dim)
#define vk_smem (vkemu::blk->smem)

/* Copies still in flight stay in flight: a barrier does not wait for them. */
static inline void __syncthreads(void) { vkemu::yield_as(vkemu::BAR_BLOCK); }
static inline float __uint_as_float(unsigned u) { return vkemu::bits_f32(u); }
static inline unsigned __float_as_uint(float f) { return vkemu::f32_bits(f); }
static inline float __int_as_float(int i) { return vkemu::bits_f32((unsigned)i); }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }

static inline float vk_inf(void) { return INFINITY; }
static inline float vk_h16_to_f32(unsigned short h) { return vkemu::h16_f32(h); }
static inline unsigned short vk_f32_to_h16(float f) { return vkemu::f32_h16(f); }
static inline float vk_b16_to_f32(unsigned short h) { return vkemu::b16_f32(h); }
static inline unsigned short vk_f32_to_b16(float f) { return vkemu::f32_b16(f); }
static inline unsigned vk_f32_to_tf32(unsigned bits) { return vkemu::tf32_round(bits); }
static inline float vk_exp2(float x) { return exp2f(x); }
static inline float vk_rsqrt(float x) { return 1.0f / sqrtf(x); }
static inline float vk_shfl_xor(float v, int mask) { return vkemu::shfl_xor(v, mask); }
static inline unsigned vk_shfl_idx(unsigned v, int src) { return vkemu::shfl_idx(v, src); }
static inline void vk_syncwarp(void) { vkemu::syncwarp(); }
static inline void vk_ldsm_x4(unsigned *r, const void *row) { vkemu::ldsm_x4(r, row, false); }
static inline void vk_ldsm_x4_t(unsigned *r, const void *row) { vkemu::ldsm_x4(r, row, true); }
static inline void vk_cp_async16(void *dst, const void *src, bool ok) { vkemu::cp_async16(dst, src, ok); }
static inline void vk_cp_async_commit(void) { vkemu::cur->committed++; }
template <int n> static inline void vk_cp_async_wait(void) { vkemu::cp_async_wait(n); }
/* the blocks of a launch run one after another: every write is seen by the blocks after it */
static inline void vk_threadfence(void) {}
static inline unsigned vk_atomic_add(unsigned *p, unsigned v)
{
    unsigned old = *p;
    *p = old + v;
    return old;
}
static inline float vk_ld_cg(const float *p) { return *p; }
static inline void vk_mma(float *d, const unsigned *a, const unsigned *b, h16) { vkemu::mma(d, a, b, vkemu::MMA_F16); }
static inline void vk_mma(float *d, const unsigned *a, const unsigned *b, b16) { vkemu::mma(d, a, b, vkemu::MMA_BF16); }
static inline void vk_mma(float *d, const unsigned *a, const unsigned *b, float) { vkemu::mma(d, a, b, vkemu::MMA_TF32); }

/* Hopper: compiled with VITC_EMU_SM90A, the kernels take their sm_90a bodies
 * (VK_SM90A), as in the arch-specific image. */
#ifdef VITC_EMU_SM90A
#define VK_SM90A 1
#endif
static inline unsigned vk_smem_addr(const void *p) { return vkemu::smem_addr(p); }
static inline void vk_fence_proxy_async(void) { vkemu::fence_proxy_async(); }
static inline void vk_wg_fence(void) { vkemu::wg_fence(); }
static inline void vk_wg_commit(void) { vkemu::wg_commit(); }
template <int n> static inline void vk_wg_wait(void) { vkemu::wg_wait(n); }
template <int n> static inline void vk_setmaxnreg_dec(void) {}
template <int n> static inline void vk_setmaxnreg_inc(void) {}
template <int N>
static inline void vk_wgmma(float *d, unsigned long long da, unsigned long long db, h16, vk_wgn<N>)
{
    vkemu::wg_mma(d, da, NULL, db, false, vkemu::MMA_F16, N);
}
template <int N>
static inline void vk_wgmma(float *d, unsigned long long da, unsigned long long db, b16, vk_wgn<N>)
{
    vkemu::wg_mma(d, da, NULL, db, false, vkemu::MMA_BF16, N);
}
template <int N>
static inline void vk_wgmma_rs(float *d, const unsigned *a, unsigned long long db, h16, vk_wgn<N>)
{
    vkemu::wg_mma(d, 0, a, db, true, vkemu::MMA_F16, N);
}
template <int N>
static inline void vk_wgmma_rs(float *d, const unsigned *a, unsigned long long db, b16, vk_wgn<N>)
{
    vkemu::wg_mma(d, 0, a, db, true, vkemu::MMA_BF16, N);
}
static inline void vk_mbar_init(void *bar, unsigned count) { vkemu::mbar_init(bar, count); }
static inline void vk_fence_mbar_init(void) {}
static inline void vk_mbar_expect_tx(void *bar, unsigned bytes) { vkemu::mbar_arrive(bar, bytes); }
static inline void vk_mbar_arrive(void *bar) { vkemu::mbar_arrive(bar, 0); }
static inline void vk_mbar_wait(void *bar, unsigned parity) { vkemu::mbar_wait(bar, parity); }
static inline void vk_prefetch_tmap(const vk_tmap *) {}
static inline void vk_tma_load2(void *dst, const vk_tmap *map, int c0, int c1, void *bar)
{
    vkemu::tma_load2(dst, map, c0, c1, bar);
}

namespace vkemu {
static fiber *g_fibers; /* reused by every launch */
static unsigned g_nfibers;
static void (*g_kernel)(vk_args);
static const vk_args *g_args;

/* ---- the scheduler ---- */
static void fiber_main(void)
{
    g_kernel(*g_args);
    if (cur->nwg)
        fail("exits with %d wgmma.mma_async never retired by a wgmma.wait_group", cur->nwg);
    cur->state = DONE;
    blk->events++;
#ifdef VK_EMU_FAST_SWITCH
    ctx_switch(&cur->ctx, &blk->sched); /* never resumed */
    abort();
#endif
}

/* Prepares fiber f to start in fiber_main on its own stack. */
static void fiber_init(fiber *f, block *b)
{
#ifdef VK_EMU_FAST_SWITCH
    (void)b;
    /* the frame vk_emu_switch pops: mxcsr/fpu control, six registers, then
     * the return address, left 16-byte aligned so that fiber_main starts with
     * the stack as after a call */
    uintptr_t top = ((uintptr_t)f->stack + STACK_BYTES - 64) & ~(uintptr_t)15;
    void **ret = (void **)(top - 16);
    *ret = (void *)fiber_main;
    unsigned *fp = (unsigned *)(ret - 7);
    memset(fp, 0, 8 + 6 * sizeof(void *));
    unsigned mxcsr;
    unsigned short fpucw;
    __asm__("stmxcsr %0" : "=m"(mxcsr));
    __asm__("fnstcw %0" : "=m"(fpucw));
    fp[0] = mxcsr;
    fp[1] = fpucw;
    f->ctx.sp = fp;
#else
    getcontext(&f->ctx);
    f->ctx.uc_stack.ss_sp = f->stack;
    f->ctx.uc_stack.ss_size = STACK_BYTES;
    f->ctx.uc_link = &b->sched;
    makecontext(&f->ctx, fiber_main, 0);
#endif
}

/* Runs one block to completion; returns 0 or -1 with blk->err set. */
static int run_block(int rounds_reverse)
{
    block *b = blk;
    for (int i = 0; i < b->n; i++) {
        fiber *f = &b->f[i];
        f->state = RUN;
        f->ncoll = 0;
        f->ncp = 0;
        f->committed = 0;
        f->nwg = 0;
        f->wg_committed = 0;
        f->wg_issued = 0;
        f->wg_fenced = false;
        f->nunfenced = 0;
        f->unfenced_overflow = false;
        f->tid.x = (unsigned)(i % g_block_dim.x);
        f->tid.y = (unsigned)(i / g_block_dim.x % g_block_dim.y);
        f->tid.z = (unsigned)(i / (g_block_dim.x * g_block_dim.y));
        f->lane = i & 31;
        f->warp = i >> 5;
        fiber_init(f, b);
    }
    for (int i = 0; i < b->nwarps; i++)
        b->w[i].computed = 0;
    memset(b->unfenced_by, 0, (b->smem_bytes / 16 + 1) * sizeof *b->unfenced_by);
    b->nbars = 0;
    memset(b->wg_log, 0, sizeof *b->wg_log * (size_t)((b->nwarps + 3) / 4));
    unsigned long long seen = b->events = 0;
    /* Warps run one at a time, each as far as it can get (through its warp
     * collectives) before the next starts, in alternating order at every
     * block barrier: whatever one warp reads from shared memory without a
     * barrier after another warp wrote it comes out wrong.  Each round starts
     * at another warp (the order rotated), so that no warp is always between
     * two others: one that hands data to a third through an mbarrier cannot
     * be relied on to have run first. */
    int reverse = rounds_reverse;
    for (unsigned round = 0;; round++) {
        const int start = (int)((round * 5u + (unsigned)g_block_seq * 3u) % (unsigned)b->nwarps);
        for (int k = 0; k < b->nwarps && !b->failed; k++) {
            const int kk = (start + k) % b->nwarps;
            fiber *lanes = &b->f[(reverse ? b->nwarps - 1 - kk : kk) * 32];
            for (;;) {
                for (int l = 0; l < 32 && !b->failed; l++) {
                    if (lanes[l].state != RUN)
                        continue;
                    cur = &lanes[l];
                    ctx_switch(&b->sched, &lanes[l].ctx);
                }
                int nw = 0, nd = 0, ns = 0;
                for (int l = 0; l < 32; l++) {
                    nw += lanes[l].state == BAR_WARP;
                    nd += lanes[l].state == DONE;
                    ns += lanes[l].state == SPIN;
                }
                if (b->failed || nw == 0)
                    break;
                if (nw != 32 && ns > 0)
                    break; /* the collective waits for lanes at an mbarrier */
                if (nw != 32) {
                    cur = NULL;
                    snprintf(b->err, sizeof b->err,
                             "block (%u,%u,%u) warp %d: a warp collective reached by %d of 32 lanes "
                             "(%d exited, the others wait at __syncthreads)",
                             g_block_idx.x, g_block_idx.y, g_block_idx.z, (int)(lanes - b->f) / 32, nw, nd);
                    return -1;
                }
                for (int l = 0; l < 32; l++)
                    lanes[l].state = RUN;
            }
        }
        cur = NULL;
        if (b->failed)
            return -1;
        reverse ^= 1;
        int done = 0, at_block = 0;
        for (int i = 0; i < b->n; i++) {
            done += b->f[i].state == DONE;
            at_block += b->f[i].state == BAR_BLOCK;
        }
        if (done == b->n) { /* a copy still landing would write the shared memory of the SM's next block */
            for (int i = 0; i < b->nbars; i++)
                if (b->bars[i].ncopy || b->bars[i].tx) {
                    snprintf(b->err, sizeof b->err,
                             "block (%u,%u,%u) ended with %lld bytes of bulk tensor copies in flight on the "
                             "mbarrier at shared address 0x%x (no thread waited for them to land)",
                             g_block_idx.x, g_block_idx.y, g_block_idx.z, (long long)b->bars[i].tx, b->bars[i].addr);
                    return -1;
                }
            return 0;
        }
        int spin = 0;
        for (int i = 0; i < b->n; i++)
            spin += b->f[i].state == SPIN;
        if (spin) { /* another round for the threads at an mbarrier, unless the last changed nothing */
            if (b->events == seen) {
                fiber *f = NULL;
                for (int i = 0; i < b->n && !f; i++)
                    f = b->f[i].state == SPIN ? &b->f[i] : NULL;
                snprintf(b->err, sizeof b->err,
                         "block (%u,%u,%u): no thread can make progress (%d wait at an mbarrier, thread %u at the "
                         "one at shared address 0x%x for the phase of parity %u)",
                         g_block_idx.x, g_block_idx.y, g_block_idx.z, spin, f->tid.x,
                         (unsigned)(SMEM_BASE + ((const unsigned char *)f->spin_bar - b->smem)), f->spin_parity & 1);
                return -1;
            }
            seen = b->events;
            for (int i = 0; i < b->n; i++)
                if (b->f[i].state == SPIN)
                    b->f[i].state = RUN;
            continue;
        }
        if (at_block + done != b->n) {
            snprintf(b->err, sizeof b->err, "block (%u,%u,%u): no thread can make progress", g_block_idx.x,
                     g_block_idx.y, g_block_idx.z);
            return -1;
        }
        for (int i = 0; i < b->n; i++)
            if (b->f[i].state == BAR_BLOCK)
                b->f[i].state = RUN;
    }
}

} /* namespace vkemu */

/* The fibers outlive a launch (they are reused); they go with the library. */
__attribute__((destructor)) static void vk_emu_release(void)
{
    using namespace vkemu;
    for (unsigned i = 0; i < g_nfibers; i++)
        munmap(g_fibers[i].stack, STACK_BYTES);
    free(g_fibers);
    g_fibers = NULL;
    g_nfibers = 0;
}

/* Whether the kernels take their sm_90a bodies (compiled with VITC_EMU_SM90A):
 * launch them with the shared memory and tensor maps of the sm_90a image. */
#ifdef VITC_EMU_SM90A
extern "C" const int vk_emu_sm90a = 1;
#else
extern "C" const int vk_emu_sm90a = 0;
#endif

/* The tensor maps the next launches pass their kernels (VK_TMAPS): n maps
 * of 128 bytes at maps, copied as a launch copies its parameters; n = 0: none. */
extern "C" void vk_emu_set_tmaps(const void *maps, int n)
{
    using namespace vkemu;
    for (int i = 0; i < 2; i++) {
        if (i < n)
            memcpy(&g_tmaps[i], (const unsigned char *)maps + 128 * i, 128);
        g_tmap[i] = i < n ? &g_tmaps[i] : NULL;
    }
}

/* Runs kernel fn over the grid, blocks one after another.  Returns 0, or -1
 * with a message in err. */
extern "C" int vk_emu_launch(void (*fn)(vk_args), const unsigned *grid, const unsigned *block_dim,
                             unsigned long long smem_bytes, const vk_args *args, char *err, unsigned long errlen)
{
    using namespace vkemu;
    unsigned n = block_dim[0] * block_dim[1] * block_dim[2];
    if (n == 0 || n % 32 != 0 || n > 1024) {
        snprintf(err, errlen, "block of %u threads: the emulation takes whole warps, at most 1024", n);
        return -1;
    }
    if (g_nfibers < n) {
        vk_emu_release();
        g_fibers = (fiber *)calloc(n, sizeof(fiber));
        if (!g_fibers) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        for (; g_nfibers < n; g_nfibers++) {
            void *s = mmap(NULL, STACK_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (s == MAP_FAILED) {
                snprintf(err, errlen, "out of memory for fiber stacks");
                return -1;
            }
            g_fibers[g_nfibers].stack = (char *)s;
        }
    }
    fiber *fibers = g_fibers;
    /* dynamic shared memory ends at an inaccessible page */
    size_t page = 4096, sbytes = (size_t)((smem_bytes + 15) & ~15ull);
    size_t span = (sbytes + page - 1) / page * page + page;
    unsigned char *region = (unsigned char *)mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (region == MAP_FAILED) {
        snprintf(err, errlen, "out of memory for shared memory");
        return -1;
    }
    mprotect(region + span - page, page, PROT_NONE);
    block b;
    memset(&b, 0, sizeof b);
    b.f = fibers;
    b.n = (int)n;
    b.smem = region + span - page - sbytes;
    b.smem_bytes = (size_t)smem_bytes;
    b.nwarps = (int)(n / 32);
    b.w = (warpx *)calloc((size_t)b.nwarps, sizeof(warpx));
    b.unfenced_by = (unsigned short *)calloc(sbytes / 16 + 1, sizeof *b.unfenced_by);
    b.wg_log = (block::wg_entry(*)[WG_LOG])calloc((size_t)(b.nwarps + 3) / 4, sizeof *b.wg_log);
    int rc = b.w && b.unfenced_by && b.wg_log ? 0 : -1;
    if (rc)
        snprintf(b.err, sizeof b.err, "out of memory");
    blk = &b;
    g_kernel = fn;
    g_args = args;
    g_block_dim = vk_dim3{block_dim[0], block_dim[1], block_dim[2]};
    g_grid_dim = vk_dim3{grid[0], grid[1], grid[2]};
    /* blocks in order (x first), or, every other launch, in the reverse order: a kernel must not
     * depend on which of its blocks runs last */
    unsigned long long total = (unsigned long long)grid[0] * grid[1] * grid[2];
    bool backwards = g_launch_seq++ & 1;
    for (unsigned long long nb = 0; nb < total && rc == 0; nb++) {
        unsigned long long k = backwards ? total - 1 - nb : nb;
        g_block_idx = vk_dim3{(unsigned)(k % grid[0]), (unsigned)(k / grid[0] % grid[1]),
                              (unsigned)(k / grid[0] / grid[1])};
        memset(b.smem, 0xa5, sbytes); /* stale shared memory is garbage, not zeros */
        /* the engines' timing and the warps' order in the first round cycle through their 8 combinations */
        b.tma_early = g_block_seq & 1;
        b.wg_early = (g_block_seq >> 1) & 1;
        int first_reverse = (int)((g_block_seq >> 2) & 1);
        g_block_seq++;
        rc = run_block(first_reverse);
    }
    if (rc)
        snprintf(err, errlen, "%s", b.err);
    free(b.w);
    free(b.unfenced_by);
    free(b.wg_log);
    munmap(region, span);
    blk = NULL;
    return rc;
}

#endif
