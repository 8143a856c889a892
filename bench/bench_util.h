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

#endif
