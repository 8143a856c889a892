/* peak_fma.c: this machine's peak FLOP/s, per core and for all cores: fp32
 * as independent FMA chains on the widest vectors the host has, generated in
 * LLVM IR and JIT-compiled like the real kernels; then the peaks of the
 * reduced precisions' dot-product units where the CPU has them (peak_dot.c):
 * bf16 on VDPBF16PS (AVX512-BF16) and TDPBF16PS (AMX-BF16), int8 on
 * VPDPBUSD (AVX512-VNNI) and TDPBUSD (AMX-INT8, in GOP/s), each line saying
 * "not available" and why where the CPU, the OS or the build cannot run it.
 * The GEMM benchmark and bench/run.py report their results as fractions of
 * these numbers.
 *
 *   peak_fma [--avx2] [SECONDS]   (default 0.5 s per measurement, best of 3)
 * --avx2: compiled with --features=-avx512f's 8-float vectors and 16
 * registers (the peak of vitc's AVX2 path on an AVX-512 host); fp32 only.
 *
 * Each line reads "peak PRECISION[ INSTRUCTION], N thread(s): VALUE UNIT ..."
 * or "peak PRECISION INSTRUCTION: not available (WHY)". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"

/* The peak of kernel fn on 1 thread, then on every core. */
static void report(const char *what, void *fn, double ops_per_iter, const char *unit, int ncpu, double seconds)
{
    double one = bench_peak_gflops(fn, ops_per_iter, 1, seconds);
    printf("peak %s, 1 thread:   %8.1f %s per core\n", what, one, unit);
    if (ncpu > 1) {
        double all = bench_peak_gflops(fn, ops_per_iter, ncpu, seconds);
        printf("peak %s, %d threads: %8.1f %s total, %.1f per core (%.0f%% of %d x 1 thread)\n", what, ncpu, all,
               unit, all / ncpu, 100.0 * all / (one * ncpu), ncpu);
    }
    fflush(stdout);
}

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
    report("fp32", fn, flops, "GFLOP/s", ncpu, seconds);
    if (!avx2) {
        bench_dot_unit u[BENCH_DOT_UNITS];
        int n = bench_dot_units(u);
        for (int i = 0; i < n; i++) {
            char what[64];
            snprintf(what, sizeof what, "%s %s", u[i].precision, u[i].insn);
            if (u[i].fn)
                report(what, (void *)u[i].fn, u[i].ops_per_iter, strcmp(u[i].precision, "int8") ? "GFLOP/s" : "GOP/s",
                       ncpu, seconds);
            else
                printf("peak %s: not available (%s)\n", what, u[i].why);
        }
    }
    cg_jit_free(j);
    return 0;
}
