/* peak_fma.c: this machine's peak fp32 FLOP/s, per core and for all cores:
 * independent FMA chains on the widest vectors the host has, generated in
 * LLVM IR and JIT-compiled like the real kernels.  The GEMM benchmark
 * reports its results as a fraction of these numbers.
 *
 *   peak_fma [--avx2] [SECONDS]   (default 0.5 s per measurement, best of 3)
 * --avx2: compiled with --features=-avx512f's 8-float vectors and 16
 * registers (the peak of vitc's AVX2 path on an AVX-512 host). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"

int main(int argc, char **argv)
{
    int avx2 = argc > 1 && !strcmp(argv[1], "--avx2");
    double seconds = argc > 1 + avx2 ? atof(argv[1 + avx2]) : 0.5;
    if (!(seconds > 0 && seconds < 100) || argc > 2 + avx2) {
        fprintf(stderr, "usage: peak_fma [--avx2] [SECONDS]\n");
        return 2;
    }
    char err[512];
    cg_jit *j = cg_jit_new_with(avx2 ? "-avx512f" : NULL, err, sizeof err);
    if (!j) {
        fprintf(stderr, "peak_fma: %s\n", err);
        return 3;
    }
    cg_target t = cg_jit_target(j);
    LLVMModuleRef m = cg_jit_module(j, "peak");
    double flops = bench_emit_peak(m, "peak", &t);
    if (flops <= 0 || cg_jit_add(j, m, "default<O2>", err, sizeof err)) {
        fprintf(stderr, "peak_fma: %s\n", flops <= 0 ? "cannot emit the kernel" : err);
        cg_jit_free(j);
        return 3;
    }
    void *fn = cg_jit_lookup(j, "peak");
    int ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (ncpu < 1)
        ncpu = 1;
    printf("host %s: %d-float vectors, %d registers, fma %d, %d cores online\n", cg_jit_cpu(j), t.vec_floats,
           t.nregs, t.has_fma, ncpu);
    double one = bench_peak_gflops(fn, flops, 1, seconds);
    printf("peak fp32, 1 thread:   %8.1f GFLOP/s per core\n", one);
    if (ncpu > 1) {
        double all = bench_peak_gflops(fn, flops, ncpu, seconds);
        printf("peak fp32, %d threads: %8.1f GFLOP/s total, %.1f per core (%.0f%% of %d x 1 thread)\n", ncpu, all,
               all / ncpu, 100.0 * all / (one * ncpu), ncpu);
    }
    cg_jit_free(j);
    return 0;
}
