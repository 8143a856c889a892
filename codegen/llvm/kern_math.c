/* kern_math.c: vector transcendental functions in LLVM IR, for the fused
 * epilogues (GELU) and the softmax of attention.  No libm calls: each is a
 * short branch-free sequence of FMAs so that it runs on the accumulators.
 *
 * Coefficients were fitted for this file (iteratively reweighted least
 * squares in double precision, against math.exp / math.erf):
 *   exp: e^r on |r| <= ln2/2, degree 6, relative error 2e-9 before rounding;
 *   erf: x * P(x^2) / Q(x^2) on |x| <= 3.925 (deg P 6, deg Q 4), absolute
 *        error 4.4e-8 before rounding; beyond 3.925 erf is 1 in float. */
#include "codegen/llvm/kern_ir.h"

#include <stdint.h>

/* Horner's rule over coefficients c[0] + c[1] x + ... + c[n-1] x^(n-1). */
static LLVMValueRef horner(kern *k, LLVMValueRef x, const float *c, int n)
{
    LLVMValueRef acc = kern_vconst(k, c[n - 1]);
    for (int i = n - 2; i >= 0; i--)
        acc = kern_fma(k, acc, x, kern_vconst(k, c[i]));
    return acc;
}

static LLVMValueRef clamp(kern *k, LLVMValueRef x, float lo, float hi)
{
    return kern_fmin(k, kern_fmax(k, x, kern_vconst(k, lo)), kern_vconst(k, hi));
}

/* exp(x) = 2^n * e^r with n = round(x / ln2), r = x - n ln2 (ln2 split in
 * two so that n * ln2_hi is exact).  x is clamped to [-87.3, 88.3] so that
 * 2^n stays a normal float: exp(-87.3) is 1.2e-38, not 0, which callers that
 * need an exact zero (masked softmax lanes) select themselves.  n is rounded
 * by adding 1.5 * 2^23, which also leaves 0x4b400000 + n in the sum's bits:
 * 2^n is built from them without a float-to-int conversion. */
LLVMValueRef kern_vexp(kern *k, LLVMValueRef x, int nonpositive)
{
    static const float c[7] = {1.0f, 1.000000032f, 4.999999421e-01f, 1.666643136e-01f,
                               4.166800225e-02f, 8.374146738e-03f, 1.384360868e-03f};
    LLVMBuilderRef b = k->b;
    x = nonpositive ? kern_fmax(k, x, kern_vconst(k, -87.3f)) : clamp(k, x, -87.3f, 88.3f);
    LLVMValueRef magic = kern_vconst(k, 12582912.0f);
    LLVMValueRef t = kern_fma(k, x, kern_vconst(k, 1.44269504f), magic);
    LLVMValueRef n = LLVMBuildFSub(b, t, magic, "");
    LLVMValueRef r = kern_fma(k, n, kern_vconst(k, -0.693359375f), x);
    r = kern_fma(k, n, kern_vconst(k, 2.12194440e-4f), r);
    LLVMValueRef p = horner(k, r, c, 7);
    LLVMTypeRef vi = LLVMVectorType(k->i32, (unsigned)k->vf);
    LLVMValueRef lanes[16];
    for (int i = 0; i < k->vf; i++)
        lanes[i] = LLVMConstInt(k->i32, (unsigned long long)(int64_t)(127 - 0x4b400000), 1);
    LLVMValueRef bias = LLVMConstVector(lanes, (unsigned)k->vf);
    for (int i = 0; i < k->vf; i++)
        lanes[i] = LLVMConstInt(k->i32, 23, 0);
    LLVMValueRef shift = LLVMConstVector(lanes, (unsigned)k->vf);
    LLVMValueRef bits = LLVMBuildShl(b, LLVMBuildAdd(b, LLVMBuildBitCast(b, t, vi, ""), bias, ""), shift, "");
    return LLVMBuildFMul(b, p, LLVMBuildBitCast(b, bits, k->vty, ""), "");
}

LLVMValueRef kern_verf(kern *k, LLVMValueRef x)
{
    static const float p[7] = {1.128378772f, 2.065748644e-01f, 5.145791776e-02f, 3.991604130e-03f,
                               1.493589691e-04f, -1.993747203e-06f, 1.987479231e-08f};
    static const float q[5] = {1.0f, 5.164009110e-01f, 1.177545753e-01f, 1.492796611e-02f,
                               1.028412038e-03f};
    LLVMBuilderRef b = k->b;
    x = clamp(k, x, -3.925f, 3.925f);
    LLVMValueRef t = LLVMBuildFMul(b, x, x, "");
    LLVMValueRef num = LLVMBuildFMul(b, x, horner(k, t, p, 7), "");
    return LLVMBuildFDiv(b, num, horner(k, t, q, 5), "");
}

/* GELU(x) = x/2 (1 + erf(x / sqrt 2)). */
static LLVMValueRef gelu_erf(kern *k, LLVMValueRef x)
{
    LLVMBuilderRef b = k->b;
    LLVMValueRef e = kern_verf(k, LLVMBuildFMul(b, x, kern_vconst(k, 0.70710678f), ""));
    LLVMValueRef h = LLVMBuildFMul(b, x, kern_vconst(k, 0.5f), "");
    return kern_fma(k, h, e, h);
}

/* GELU-tanh(x) = x/2 (1 + tanh(z)), z = sqrt(2/pi) (x + 0.044715 x^3),
 * computed as x / (1 + exp(-2 z)) (the same function, no tanh needed). */
static LLVMValueRef gelu_tanh(kern *k, LLVMValueRef x)
{
    LLVMBuilderRef b = k->b;
    LLVMValueRef x2 = LLVMBuildFMul(b, x, x, "");
    LLVMValueRef inner = kern_fma(k, x2, kern_vconst(k, 0.044715f), kern_vconst(k, 1.0f));
    LLVMValueRef z2 = LLVMBuildFMul(b, LLVMBuildFMul(b, x, inner, ""), kern_vconst(k, -1.5957691216f), "");
    LLVMValueRef den = LLVMBuildFAdd(b, kern_vexp(k, z2, 0), kern_vconst(k, 1.0f), "");
    return LLVMBuildFDiv(b, x, den, "");
}

LLVMValueRef kern_activation(kern *k, LLVMValueRef x, int act)
{
    switch (act) {
    case 1: return gelu_erf(k, x);
    case 2: return gelu_tanh(k, x);
    case 3: return kern_fmax(k, x, kern_vconst(k, 0.0f));
    case 4: return kern_fmin(k, kern_fmax(k, x, kern_vconst(k, 0.0f)), kern_vconst(k, 6.0f));
    default: return x;
    }
}
