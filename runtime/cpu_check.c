/* cpu_check.c: does this CPU have what a model was compiled for?
 *
 * A CPU model records the LLVM target features it was compiled with
 * ("+avx2,+fma,+avx512f,..."); code for a feature the host lacks dies with
 * SIGILL at the first such instruction.  Before anything of the model runs,
 * each enabled feature that this table knows is looked up with CPUID (and,
 * for the AVX families, in XCR0: whether the OS saves those registers).
 * Features the table does not list are not checked: they are baseline
 * x86-64, or instructions the generated code does not use. */
#include "runtime/rt_impl.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

enum { EAX, EBX, ECX, EDX };
enum { OS_NONE, OS_AVX, OS_AVX512, OS_AMX };

typedef struct {
    const char *name; /* LLVM's name */
    unsigned leaf, sub;
    int reg, bit;
    int os; /* register state the OS must save */
} cpu_feature;

static const cpu_feature features[] = {
#define CPU_FEATURE(name, leaf, sub, reg, bit, os) {name, leaf, sub, reg, bit, OS_##os},
#include "runtime/cpu_features.def"
#undef CPU_FEATURE
};

/* The register state the OS has enabled (XCR0), 0 without OSXSAVE. */
static unsigned long long xcr0(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27)))
        return 0;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}

static int host_has(const cpu_feature *f, unsigned long long x)
{
    static const unsigned long long need[] = {
        [OS_NONE] = 0, [OS_AVX] = 0x6, [OS_AVX512] = 0xe6, [OS_AMX] = 0x60006};
    unsigned r[4] = {0};
    if (!__get_cpuid_count(f->leaf, f->sub, &r[EAX], &r[EBX], &r[ECX], &r[EDX]))
        return 0;
    return (r[f->reg] >> f->bit & 1) && (x & need[f->os]) == need[f->os];
}

/* '+' or '-' as the last entry for name in an LLVM feature list says (the
 * last one wins), 0 if it is not there. */
static int last_sign(const char *list, const char *name)
{
    int sign = 0;
    size_t n = strlen(name);
    for (const char *p = list; p && *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n + 1 && (p[0] == '+' || p[0] == '-') && !strncmp(p + 1, name, n))
            sign = p[0];
        p = end ? end + 1 : NULL;
    }
    return sign;
}

int rt_cpu_feature_enabled(const char *list, const char *name)
{
    return last_sign(list, name) == '+';
}

int rt_cpu_missing_features(const char *list, char *missing, size_t n)
{
    if (n)
        missing[0] = 0;
    unsigned long long x = xcr0();
    int count = 0;
    size_t used = 0;
    for (size_t i = 0; i < sizeof features / sizeof features[0]; i++)
        if (last_sign(list, features[i].name) == '+' && !host_has(&features[i], x)) {
            int w = snprintf(missing + used, n > used ? n - used : 0, "%s%s", count ? ", " : "", features[i].name);
            used += w > 0 ? (size_t)w : 0;
            count++;
        }
    return count;
}

/* Linux gives a process AMX's tile registers only on request (the tile
 * data enlarges every signal frame); the first tile instruction without it
 * faults.  Asked once per process, for models whose features list amx-tile
 * (compiled with --precision bf16, or int8 on AMX-INT8: the backend keeps
 * AMX out of the others' list). */
int rt_cpu_enable_amx(const char *list, char *err, size_t n)
{
    enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
    if (!rt_cpu_feature_enabled(list, "amx-tile"))
        return 0;
#ifdef SYS_arch_prctl
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0)
        return 0;
    snprintf(err, n, "the kernel refused the AMX tile registers (arch_prctl: %s)", strerror(errno));
#else
    snprintf(err, n, "this system cannot grant the AMX tile registers");
#endif
    return -1;
}

#else

int rt_cpu_feature_enabled(const char *list, const char *name)
{
    (void)list, (void)name;
    return 0;
}

int rt_cpu_enable_amx(const char *list, char *err, size_t n)
{
    (void)list, (void)err, (void)n;
    return 0;
}

int rt_cpu_missing_features(const char *list, char *missing, size_t n)
{
    (void)list;
    if (n)
        missing[0] = 0;
    return 0;
}

#endif
