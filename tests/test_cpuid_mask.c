/* test_cpuid_mask.c: bench/cpuid_mask.c, which bench/run.py loads into the
 * workers of its avx2 rows so that ONNX Runtime and PyTorch run their AVX2
 * kernels.  After vitc_bench_hide_avx512(), CPUID, as this thread and a
 * thread started afterwards see it, reports no AVX-512 or AMX and every
 * other leaf as before; vitc's own loader check (which asks CPUID) then
 * finds avx512f missing and the AVX2 features present.  Skipped, saying
 * why, where the CPU or the kernel cannot fault on CPUID, or where the CPU
 * has no AVX-512 to hide. */
#include "testutil.h"

#include "runtime/rt_impl.h"

#include <pthread.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>

int vitc_bench_hide_avx512(char *err, size_t errlen);

typedef struct {
    unsigned r[4];
} regs;

static regs leaf(unsigned l, unsigned sub)
{
    regs x = {{0}};
    __cpuid_count(l, sub, x.r[0], x.r[1], x.r[2], x.r[3]);
    return x;
}

static void *leaf7_in_thread(void *out)
{
    *(regs *)out = leaf(7, 0);
    return NULL;
}

static void test_hide_avx512(void **state)
{
    (void)state;
    regs before0 = leaf(0, 0), before1 = leaf(1, 0), before7 = leaf(7, 0);
    if (!(before7.r[1] >> 16 & 1)) {
        printf("  skipped: this CPU has no AVX-512 to hide\n");
        tu_skip();
        return;
    }
    char err[256];
    if (vitc_bench_hide_avx512(err, sizeof err) != 0) {
        printf("  skipped: %s\n", err);
        tu_skip();
        return;
    }
    regs after0 = leaf(0, 0), after1 = leaf(1, 0), after7 = leaf(7, 0), in_thread;
    assert_memory_equal(&before0, &after0, sizeof before0);
    /* leaf 1 EBX holds the APIC id of the core the thread runs on */
    assert_int_equal(before1.r[0], after1.r[0]);
    assert_int_equal(before1.r[2], after1.r[2]);
    assert_int_equal(before1.r[3], after1.r[3]);
    assert_int_equal(after7.r[1] >> 16 & 1, 0);                  /* avx512f */
    assert_int_equal(after7.r[1] >> 30 & 1, 0);                  /* avx512bw */
    assert_int_equal(after7.r[3] >> 24 & 1, 0);                  /* amx-tile */
    assert_int_equal(after7.r[1] >> 5 & 1, before7.r[1] >> 5 & 1); /* avx2 kept */
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, leaf7_in_thread, &in_thread), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_memory_equal(&in_thread, &after7, sizeof after7);
    char missing[256];
    assert_int_equal(rt_cpu_missing_features("+avx512f,+avx512bw", missing, sizeof missing), 2);
    printf("  after hiding, the loader finds missing: %s\n", missing);
    if (before7.r[1] >> 5 & 1)
        assert_int_equal(rt_cpu_missing_features("+avx2,+fma", missing, sizeof missing), 0);
}
#else
static void test_hide_avx512(void **state)
{
    (void)state;
    printf("  skipped: not an x86-64 host\n");
    tu_skip();
}
#endif

TU_MAIN(NULL, NULL, test_hide_avx512)
