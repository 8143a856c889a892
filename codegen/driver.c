/* driver.c: what every backend shares around its own code generation, and
 * the stand-ins for backends this vitc was built without. */
#include "codegen/backend.h"

#include <stdio.h>

#if !defined(VITC_HAVE_LLVM) || !defined(VITC_HAVE_CUDA)
/* A backend that is not in this build: its message says how to get one. */
static int missing(const char *why, const ir_node *n, char *buf, size_t len, vitc_diag *d)
{
    if (buf)
        snprintf(buf, len, "%s", why);
    return d ? vitc_error(d, VITC_BAD_INPUT, n, "%s", why) : 0;
}
#endif

#ifndef VITC_HAVE_LLVM
#define NO_LLVM "this vitc was built without the CPU backend (VITC_LLVM=OFF): compile with --target cuda"
static int no_llvm_supports(const ir_graph *g, const ir_node *n, char *why, size_t len)
{
    return missing(NO_LLVM, n, why, len, NULL);
}
static int no_llvm_compile(ir_graph *g, const cg_options *opt, vitc_diag *d) { return missing(NO_LLVM, NULL, NULL, 0, d); }
const cg_backend cg_llvm_backend = {.name = "cpu", .supports = no_llvm_supports, .compile = no_llvm_compile};
#endif

#ifndef VITC_HAVE_CUDA
#define NO_CUDA "--target cuda: this vitc was built without the CUDA backend (configure with -DVITC_CUDA=ON)"
static int no_cuda_supports(const ir_graph *g, const ir_node *n, char *why, size_t len)
{
    return missing(NO_CUDA, n, why, len, NULL);
}
static int no_cuda_compile(ir_graph *g, const cg_options *opt, vitc_diag *d) { return missing(NO_CUDA, NULL, NULL, 0, d); }
const cg_backend cg_cuda_backend = {.name = "cuda", .supports = no_cuda_supports, .compile = no_cuda_compile};
#endif
