/* kern_math.c: the kernels' vector math, which is vmath.c's over the kernel's
 * vector type: the GEMM epilogues and attention compute exactly what the
 * element-wise kernels compute. */
#include "codegen/llvm/kern_ir.h"
#include "codegen/llvm/vmath.h"

static vm_ctx vm_of(const kern *k)
{
    vm_ctx v = {.mod = k->mod, .b = k->b, .t = k->vty, .has_fma = k->t.has_fma};
    return v;
}

LLVMValueRef kern_vexp(kern *k, LLVMValueRef x, int nonpositive)
{
    vm_ctx v = vm_of(k);
    return vm_exp(&v, x, nonpositive ? VM_EXP_NONPOSITIVE : VM_EXP_FINITE);
}

LLVMValueRef kern_verf(kern *k, LLVMValueRef x)
{
    vm_ctx v = vm_of(k);
    return vm_erf(&v, x);
}

LLVMValueRef kern_activation(kern *k, LLVMValueRef x, ir_act act)
{
    vm_ctx v = vm_of(k);
    return vm_act(&v, x, act);
}

LLVMValueRef kern_vfake_quant(kern *k, LLVMValueRef x, const float fq[5])
{
    vm_ctx v = vm_of(k);
    return vm_fake_quant(&v, x, fq);
}
