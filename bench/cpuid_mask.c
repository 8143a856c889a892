/* cpuid_mask.c: makes this process see a CPU without AVX-512 and AMX, so that
 * ONNX Runtime and PyTorch, which choose their kernels from CPUID when they
 * load and have no switch of their own to leave AVX-512 aside, run their
 * AVX2 kernels on an AVX-512 host.  bench/run.py loads it (ctypes) into each
 * worker of its avx2 rows before the runtime is imported, so that those rows
 * compare vitc's AVX2 code path with the others' AVX2 code as on an AVX2
 * machine.
 *
 * How: Linux's CPUID faulting (arch_prctl ARCH_SET_CPUID 0, where the CPU
 * supports it; /proc/cpuinfo's cpuid_fault flag) turns every CPUID
 * instruction of the thread, and of threads it creates afterwards, into a
 * SIGSEGV.  The handler below runs the real CPUID with faulting lifted for
 * that one instruction, clears the AVX-512 and AMX bits of leaf 7, and
 * resumes after the instruction.  Any other SIGSEGV goes to the handler
 * that was there before (or the default action: the process dies as it
 * would have).  XGETBV still reports the ZMM state enabled; runtimes check
 * the CPUID bits as well, so they leave AVX-512 aside.
 *
 * Linux x86-64 only; elsewhere the call reports that it cannot. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#if defined(__linux__) && defined(__x86_64__)
#include <asm/prctl.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

/* leaf 7 subleaf 0, EBX: avx512 f, dq, ifma, pf, er, cd, bw, vl */
#define L7_EBX_AVX512 (1u << 16 | 1u << 17 | 1u << 21 | 1u << 26 | 1u << 27 | 1u << 28 | 1u << 30 | 1u << 31)
/* ECX: avx512 vbmi, vbmi2, vnni, bitalg, vpopcntdq */
#define L7_ECX_AVX512 (1u << 1 | 1u << 6 | 1u << 11 | 1u << 12 | 1u << 14)
/* EDX: avx512 4vnniw, 4fmaps, vp2intersect, fp16; amx bf16, tile, int8 */
#define L7_EDX_AVX512_AMX (1u << 2 | 1u << 3 | 1u << 8 | 1u << 23 | 1u << 22 | 1u << 24 | 1u << 25)
/* leaf 7 subleaf 1, EAX: avx512_bf16 */
#define L7S1_EAX_AVX512 (1u << 5)

static struct sigaction previous;

static void real_cpuid(uint32_t leaf, uint32_t sub, uint32_t r[4])
{
    __asm__ volatile("cpuid" : "=a"(r[0]), "=b"(r[1]), "=c"(r[2]), "=d"(r[3]) : "a"(leaf), "c"(sub));
}

static void on_segv(int sig, siginfo_t *si, void *ctx)
{
    ucontext_t *uc = ctx;
    greg_t *g = uc->uc_mcontext.gregs;
    const unsigned char *ip = (const unsigned char *)g[REG_RIP];
    /* a CPUID that faulted was fetched, so its two bytes are readable */
    if (si->si_code != SI_KERNEL || ip[0] != 0x0f || ip[1] != 0xa2) {
        sigaction(SIGSEGV, &previous, NULL); /* not ours: returning re-executes it under the old handler */
        return;
    }
    uint32_t leaf = (uint32_t)g[REG_RAX], sub = (uint32_t)g[REG_RCX], r[4];
    syscall(SYS_arch_prctl, ARCH_SET_CPUID, 1);
    real_cpuid(leaf, sub, r);
    syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0);
    if (leaf == 7 && sub == 0) {
        r[1] &= ~L7_EBX_AVX512;
        r[2] &= ~L7_ECX_AVX512;
        r[3] &= ~L7_EDX_AVX512_AMX;
    } else if (leaf == 7 && sub == 1) {
        r[0] &= ~L7S1_EAX_AVX512;
    }
    g[REG_RAX] = r[0], g[REG_RBX] = r[1], g[REG_RCX] = r[2], g[REG_RDX] = r[3];
    g[REG_RIP] += 2;
    (void)sig;
}

int vitc_bench_hide_avx512(char *err, size_t errlen)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGSEGV, &sa, &previous)) {
        snprintf(err, errlen, "cannot install a SIGSEGV handler: %s", strerror(errno));
        return -1;
    }
    if (syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0)) {
        int e = errno;
        sigaction(SIGSEGV, &previous, NULL);
        snprintf(err, errlen, "this CPU or kernel cannot fault on CPUID (arch_prctl ARCH_SET_CPUID: %s)",
                 strerror(e));
        return -1;
    }
    /* check: the bits are gone */
    uint32_t r[4];
    real_cpuid(7, 0, r);
    if (r[1] & L7_EBX_AVX512) {
        snprintf(err, errlen, "CPUID still reports AVX-512 after enabling CPUID faulting");
        return -1;
    }
    return 0;
}
#else
int vitc_bench_hide_avx512(char *err, size_t errlen)
{
    snprintf(err, errlen, "hiding AVX-512 needs Linux on x86-64 (CPUID faulting)");
    return -1;
}
#endif
