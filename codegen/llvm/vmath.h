/* vmath.h: the LLVM backend's one set of f32 transcendental functions and
 * activations, as straight-line IR (no libm calls) over a float or a vector
 * of floats.  The element-wise kernels (scalar loops LLVM vectorises), the
 * softmax, and the GEMM epilogues and attention (explicit vectors) all build
 * through it, so a GELU fused into a Linear and a standalone Gelu compute the
 * same bits. */
#ifndef VITC_CG_VMATH_H
#define VITC_CG_VMATH_H

#include "ir/ir.h"

#include <llvm-c/Core.h>

typedef struct {
    LLVMModuleRef mod;
    LLVMBuilderRef b;
    LLVMTypeRef t;  /* float, or <n x float> */
    int has_fma;    /* multiply-adds as llvm.fma (one rounding) or fmul + fadd */
} vm_ctx;

/* What exp may assume about its argument and must give at the edges. */
typedef enum {
    VM_EXP_IEEE,        /* any x: +inf above 88.72, 0 below -87.3, NaN stays NaN */
    VM_EXP_FINITE,      /* x clamped to [-87.3, 88.3]; the result is a normal float */
    VM_EXP_NONPOSITIVE, /* the caller guarantees x <= 0 (up to rounding) */
} vm_exp_mode;

/* exp(x) within 2 ulp on [-87.3, 88.3]. */
LLVMValueRef vm_exp(const vm_ctx *v, LLVMValueRef x, vm_exp_mode mode);
/* erf(x) within 4e-7 absolute; NaN stays NaN. */
LLVMValueRef vm_erf(const vm_ctx *v, LLVMValueRef x);
/* tanh(x) within 2 ulp, odd; NaN stays NaN. */
LLVMValueRef vm_tanh(const vm_ctx *v, LLVMValueRef x);
/* FakeQuant (ops.def) of x * fq[0] with fq = {mul, scale, zero, qmin, qmax}:
 * (clamp(roundeven((x * mul) / scale) + zero, qmin, qmax) - zero) * scale, a
 * NaN giving qmin; the same bits as the formula, without a division where
 * the target has FMA (vmath.c).  scale > 0. */
LLVMValueRef vm_fake_quant(const vm_ctx *v, LLVMValueRef x, const float fq[5]);
/* QuantLookup (ops.def): table[code - qmin] of x's FakeQuant code with
 * fq = {1, scale, zero, qmin, qmax} (the code as vm_fake_quant makes it);
 * table points to qmax - qmin + 1 floats.  Vectors gather. */
LLVMValueRef vm_quant_lookup(const vm_ctx *v, LLVMValueRef x, const float fq[5], LLVMValueRef table);
/* Activation act of x (ir_act: GELU in its erf or tanh form, ReLU, ReLU6). */
LLVMValueRef vm_act(const vm_ctx *v, LLVMValueRef x, ir_act act);

#endif
