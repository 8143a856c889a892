/* kern_jit.h: compiles a module of kernels in process for the host CPU and
 * hands back function addresses.  Used by the kernel tests and benchmarks to
 * run generated code without writing a shared object; the compiler itself
 * emits objects (llvm_backend.c). */
#ifndef VITC_KERN_JIT_H
#define VITC_KERN_JIT_H

#include <llvm-c/Core.h>
#include <stddef.h>

#include "codegen/llvm/kernels.h"

typedef struct cg_jit cg_jit;

/* A JIT for the host CPU (its name and features from LLVM).  NULL on failure
 * with the reason in err. */
cg_jit *cg_jit_new(char *err, size_t errlen);
/* The same with the host's features changed as an LLVM feature list says
 * ("-avx512f": the AVX2 code path of an AVX-512 host); NULL or "": none. */
cg_jit *cg_jit_new_with(const char *features, char *err, size_t errlen);
void cg_jit_free(cg_jit *j);
/* A new empty module in the JIT's context, to emit kernels into. */
LLVMModuleRef cg_jit_module(cg_jit *j, const char *name);
/* The host's SIMD shape, from its features. */
cg_target cg_jit_target(const cg_jit *j);
const char *cg_jit_cpu(const cg_jit *j);
/* Verifies mod, runs the optimisation pipeline passes (e.g. "default<O2>";
 * NULL: none) and adds it to the JIT, which owns it afterwards (also on
 * failure).  0 on success, else -1 with the reason in err. */
int cg_jit_add(cg_jit *j, LLVMModuleRef mod, const char *passes, char *err, size_t errlen);
/* The address of a defined function; NULL if absent. */
void *cg_jit_lookup(cg_jit *j, const char *name);

#endif
