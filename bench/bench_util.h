/* bench_util.h: what the kernel benchmarks share: a clock, the peak-FLOP/s
 * kernel (generated in LLVM IR like the real kernels) and its measurement on
 * one or more threads. */
#ifndef VITC_BENCH_UTIL_H
#define VITC_BENCH_UTIL_H

#include "codegen/llvm/kern_jit.h"

double bench_now(void); /* seconds, monotonic */

/* Emits `void name(float *state, i64 iters)`: iters x 4 rounds of
 * independent FMA chains on the target's vectors.  Returns the flops of one
 * iteration. */
double bench_emit_peak(LLVMModuleRef mod, const char *name, const cg_target *t);

/* Runs the peak kernel fn on nthreads threads at once for about seconds;
 * returns the total GFLOP/s (all threads together). */
double bench_peak_gflops(void *fn, double flops_per_iter, int nthreads, double seconds);

/* The dot-product units of the reduced precisions (peak_dot.c): VDPBF16PS
 * (AVX512-BF16), TDPBF16PS (AMX-BF16), VPDPBUSD (AVX512-VNNI) and TDPBUSD
 * (AMX-INT8), in that order.  fn, a kernel for bench_peak_gflops (its state
 * is written, at most 256 floats), is NULL where this CPU, its operating
 * system or this build cannot run the unit, and why then says why.  The
 * first call asks Linux for AMX's tile registers where the CPU has AMX. */
enum { BENCH_DOT_UNITS = 4 };
typedef struct {
    const char *precision; /* "bf16" or "int8" */
    const char *insn;      /* the instruction timed */
    const char *feature;   /* the CPUID feature it needs */
    double ops_per_iter;   /* multiplies and adds of one iteration of fn */
    void (*fn)(float *state, int64_t iters);
    char why[160];
} bench_dot_unit;
int bench_dot_units(bench_dot_unit *u); /* fills u[BENCH_DOT_UNITS]; returns BENCH_DOT_UNITS */

#endif
