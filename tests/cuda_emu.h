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
 * Each CUDA thread is a fiber (ucontext).  The warps of a block run one at
 * a time, each through its warp collectives until it waits at __syncthreads
 * or ends, in alternating order between barriers, so that a missing barrier
 * shows up as wrong data.  cp.async copies happen only when cp.async.wait_group completes
 * their group, as late as the hardware may make them.  Errors that the
 * hardware would turn into hangs or undefined results (a barrier not reached
 * by every thread, a warp collective with lanes that exited or went
 * elsewhere, a misaligned or out-of-bounds ldmatrix or cp.async, dynamic
 * shared memory above the launch's size) stop the launch with a message.
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

struct vk_dim3 {
    unsigned x, y, z;
};

/* The argument slots of a launch, as the runtime fills them. */
struct vk_args {
    unsigned long long a[VK_PARAM_SLOTS];
};

namespace vkemu {

enum { RUN, BAR_BLOCK, BAR_WARP, DONE };
enum { STACK_BYTES = 256 * 1024, MAX_PENDING = 256 };

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

struct fiber {
    ctx_t ctx;
    vk_dim3 tid;
    int lane, warp, state;
    unsigned long long ncoll; /* warp collectives this thread has entered */
    char *stack;
    pending cp[MAX_PENDING];
    int ncp, committed;
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
};

static fiber *cur;
static block *blk;
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

static float shfl_xor(float v, int mask)
{
    warpx *w = enter(1);
    memcpy(&w->slot[cur->lane][0], &v, 4);
    yield_as(BAR_WARP);
    first(w, 1);
    float r;
    memcpy(&r, &w->slot[cur->lane ^ (mask & 31)][0], 4);
    yield_as(BAR_WARP);
    return r;
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
/* the tensor maps are the sm_90a path's, which the emulation does not run */
#define VK_KERNEL_TMA(name, threads, minb, P) VK_KERNEL(name, threads, P)
#define VK_TMAPS nullptr, nullptr
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
static inline void vk_ldsm_x4(unsigned *r, const void *row) { vkemu::ldsm_x4(r, row, false); }
static inline void vk_ldsm_x4_t(unsigned *r, const void *row) { vkemu::ldsm_x4(r, row, true); }
static inline void vk_cp_async16(void *dst, const void *src, bool ok) { vkemu::cp_async16(dst, src, ok); }
static inline void vk_cp_async_commit(void) { vkemu::cur->committed++; }
template <int n> static inline void vk_cp_async_wait(void) { vkemu::cp_async_wait(n); }
static inline void vk_mma(float *d, const unsigned *a, const unsigned *b, h16) { vkemu::mma(d, a, b, vkemu::MMA_F16); }
static inline void vk_mma(float *d, const unsigned *a, const unsigned *b, b16) { vkemu::mma(d, a, b, vkemu::MMA_BF16); }
static inline void vk_mma(float *d, const unsigned *a, const unsigned *b, float) { vkemu::mma(d, a, b, vkemu::MMA_TF32); }

namespace vkemu {
static fiber *g_fibers; /* reused by every launch */
static unsigned g_nfibers;
static void (*g_kernel)(vk_args);
static const vk_args *g_args;

/* ---- the scheduler ---- */
static void fiber_main(void)
{
    g_kernel(*g_args);
    cur->state = DONE;
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
        f->tid.x = (unsigned)(i % g_block_dim.x);
        f->tid.y = (unsigned)(i / g_block_dim.x % g_block_dim.y);
        f->tid.z = (unsigned)(i / (g_block_dim.x * g_block_dim.y));
        f->lane = i & 31;
        f->warp = i >> 5;
        fiber_init(f, b);
    }
    for (int i = 0; i < b->nwarps; i++)
        b->w[i].computed = 0;
    /* Warps run one at a time, each as far as it can get (through its warp
     * collectives) before the next starts, in alternating order at every
     * block barrier: whatever one warp reads from shared memory without a
     * barrier after another warp wrote it comes out wrong. */
    int reverse = rounds_reverse;
    for (;;) {
        for (int k = 0; k < b->nwarps && !b->failed; k++) {
            fiber *lanes = &b->f[(reverse ? b->nwarps - 1 - k : k) * 32];
            for (;;) {
                for (int l = 0; l < 32 && !b->failed; l++) {
                    if (lanes[l].state != RUN)
                        continue;
                    cur = &lanes[l];
                    ctx_switch(&b->sched, &lanes[l].ctx);
                }
                int nw = 0, nd = 0;
                for (int l = 0; l < 32; l++) {
                    nw += lanes[l].state == BAR_WARP;
                    nd += lanes[l].state == DONE;
                }
                if (b->failed || nw == 0)
                    break;
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
        if (done == b->n)
            return 0;
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
    int rc = b.w ? 0 : -1;
    if (!b.w)
        snprintf(b.err, sizeof b.err, "out of memory");
    blk = &b;
    g_kernel = fn;
    g_args = args;
    g_block_dim = vk_dim3{block_dim[0], block_dim[1], block_dim[2]};
    g_grid_dim = vk_dim3{grid[0], grid[1], grid[2]};
    unsigned long long nb = 0;
    for (unsigned z = 0; z < grid[2] && rc == 0; z++)
        for (unsigned y = 0; y < grid[1] && rc == 0; y++)
            for (unsigned x = 0; x < grid[0] && rc == 0; x++) {
                g_block_idx = vk_dim3{x, y, z};
                memset(b.smem, 0xa5, sbytes); /* stale shared memory is garbage, not zeros */
                rc = run_block((int)(nb++ & 1));
            }
    if (rc)
        snprintf(err, errlen, "%s", b.err);
    free(b.w);
    munmap(region, span);
    blk = NULL;
    return rc;
}

#endif
