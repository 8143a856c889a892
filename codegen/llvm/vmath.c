/* vmath.c: exp, erf, tanh and the activations of f32 as straight-line LLVM IR
 * (see vmath.h).  A loop that calls libm stays scalar; one made of these
 * (compares and selects, multiply-adds, an integer add and a shift) is
 * vectorised like any other element-wise loop, and the explicit vectors of
 * the GEMM epilogues use the very same sequence.
 *
 * Coefficients were fitted for this file (iteratively reweighted least
 * squares in double precision, against math.exp / math.erf):
 *   exp:  e^r on |r| <= ln2/2, degree 6, relative error 2e-9 before rounding;
 *   erf:  x * P(x^2) / Q(x^2) on |x| <= 3.925 (deg P 6, deg Q 4), absolute
 *         error 4.4e-8 before rounding; beyond 3.925 erf is 1 in float;
 *   tanh: odd polynomial (Cephes' tanhf) below |x| = 0.625, else
 *         1 - 2 / (exp(2|x|) + 1). */
#include "codegen/llvm/vmath.h"

#include <math.h>
#include <string.h>

/* c splatted to v's type. */
static LLVMValueRef k(const vm_ctx *v, double c)
{
    LLVMTypeRef et = LLVMGetTypeKind(v->t) == LLVMVectorTypeKind ? LLVMGetElementType(v->t) : v->t;
    LLVMValueRef s = LLVMConstReal(et, c);
    if (et == v->t)
        return s;
    LLVMValueRef lanes[64];
    unsigned n = LLVMGetVectorSize(v->t);
    for (unsigned i = 0; i < n && i < 64; i++)
        lanes[i] = s;
    return LLVMConstVector(lanes, n);
}

/* The i32 type (or vector of i32) shaped like v's float type. */
static LLVMTypeRef int_type(const vm_ctx *v)
{
    LLVMTypeRef i32 = LLVMInt32TypeInContext(LLVMGetModuleContext(v->mod));
    return LLVMGetTypeKind(v->t) == LLVMVectorTypeKind ? LLVMVectorType(i32, LLVMGetVectorSize(v->t)) : i32;
}

static LLVMValueRef ki(const vm_ctx *v, long long c)
{
    LLVMTypeRef it = int_type(v);
    if (LLVMGetTypeKind(it) != LLVMVectorTypeKind)
        return LLVMConstInt(it, (unsigned long long)c, 1);
    LLVMValueRef lanes[64], s = LLVMConstInt(LLVMGetElementType(it), (unsigned long long)c, 1);
    unsigned n = LLVMGetVectorSize(it);
    for (unsigned i = 0; i < n && i < 64; i++)
        lanes[i] = s;
    return LLVMConstVector(lanes, n);
}

static LLVMValueRef intrinsic(const vm_ctx *v, const char *name, LLVMValueRef *args, unsigned n)
{
    unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
    LLVMTypeRef t = v->t;
    LLVMValueRef f = LLVMGetIntrinsicDeclaration(v->mod, id, &t, 1);
    return LLVMBuildCall2(v->b, LLVMGlobalGetValueType(f), f, args, n, "");
}

static LLVMValueRef fma3(const vm_ctx *v, LLVMValueRef a, LLVMValueRef b, LLVMValueRef c)
{
    if (!v->has_fma)
        return LLVMBuildFAdd(v->b, LLVMBuildFMul(v->b, a, b, ""), c, "");
    LLVMValueRef args[3] = {a, b, c};
    return intrinsic(v, "llvm.fma", args, 3);
}

/* max and min as compare and select: a NaN in a gives b. */
static LLVMValueRef fmax2(const vm_ctx *v, LLVMValueRef a, LLVMValueRef b)
{
    return LLVMBuildSelect(v->b, LLVMBuildFCmp(v->b, LLVMRealOGT, a, b, ""), a, b, "");
}

static LLVMValueRef fmin2(const vm_ctx *v, LLVMValueRef a, LLVMValueRef b)
{
    return LLVMBuildSelect(v->b, LLVMBuildFCmp(v->b, LLVMRealOLT, a, b, ""), a, b, "");
}

/* Horner's rule over c[0] + c[1] x + ... + c[n-1] x^(n-1). */
static LLVMValueRef horner(const vm_ctx *v, LLVMValueRef x, const float *c, int n)
{
    LLVMValueRef acc = k(v, c[n - 1]);
    for (int i = n - 2; i >= 0; i--)
        acc = fma3(v, acc, x, k(v, c[i]));
    return acc;
}

/* x, but NaN where x0 is NaN. */
static LLVMValueRef keep_nan(const vm_ctx *v, LLVMValueRef x0, LLVMValueRef x)
{
    return LLVMBuildSelect(v->b, LLVMBuildFCmp(v->b, LLVMRealUNO, x0, x0, ""), x0, x, "");
}

/* exp(x) = 2^n * e^r with n = round(x / ln2), r = x - n ln2 (ln2 split in
 * two so that n * ln2_hi is exact).  n is rounded by adding 1.5 * 2^23, which
 * also leaves 0x4b400000 + n in the sum's bits: 2^n is built from them
 * without a float-to-int conversion.  The IEEE form builds 2^(n-1) * 2 so that
 * n may reach 128 at the top of the float range. */
LLVMValueRef vm_exp(const vm_ctx *v, LLVMValueRef x, vm_exp_mode mode)
{
    static const float c[7] = {1.0f, 1.000000032f, 4.999999421e-01f, 1.666643136e-01f,
                               4.166800225e-02f, 8.374146738e-03f, 1.384360868e-03f};
    LLVMBuilderRef b = v->b;
    LLVMValueRef x0 = x;
    int ieee = mode == VM_EXP_IEEE;
    x = fmax2(v, x, k(v, -87.3f));
    if (mode != VM_EXP_NONPOSITIVE)
        x = fmin2(v, x, k(v, ieee ? 88.72f : 88.3f));
    LLVMValueRef magic = k(v, 12582912.0f);
    LLVMValueRef t = fma3(v, x, k(v, 1.44269504f), magic);
    LLVMValueRef n = LLVMBuildFSub(b, t, magic, "");
    LLVMValueRef r = fma3(v, n, k(v, -0.693359375f), x);
    r = fma3(v, n, k(v, 2.12194440e-4f), r);
    LLVMValueRef p = horner(v, r, c, 7);
    LLVMValueRef bits = LLVMBuildAdd(b, LLVMBuildBitCast(b, t, int_type(v), ""),
                                     ki(v, (ieee ? 126 : 127) - 0x4b400000), "");
    bits = LLVMBuildShl(b, bits, ki(v, 23), "");
    LLVMValueRef y = LLVMBuildFMul(b, p, LLVMBuildBitCast(b, bits, v->t, ""), "");
    if (!ieee)
        return y;
    y = LLVMBuildFMul(b, y, k(v, 2), "");
    y = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOGT, x0, k(v, 88.72f), ""), k(v, __builtin_inff()), y, "");
    y = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOLT, x0, k(v, -87.3f), ""), k(v, 0), y, "");
    return keep_nan(v, x0, y);
}

/* erf(x) = x P(x^2) / Q(x^2) for |x| <= ERF_ONE, and +-1 in float beyond */
static const float erf_p[7] = {1.128378772f,     2.065748644e-01f,  5.145791776e-02f, 3.991604130e-03f,
                               1.493589691e-04f, -1.993747203e-06f, 1.987479231e-08f};
static const float erf_q[5] = {1.0f, 5.164009110e-01f, 1.177545753e-01f, 1.492796611e-02f, 1.028412038e-03f};
#define ERF_ONE 3.925
#define SQRT2 1.4142135623730951

LLVMValueRef vm_erf(const vm_ctx *v, LLVMValueRef x)
{
    LLVMBuilderRef b = v->b;
    LLVMValueRef x0 = x;
    x = fmin2(v, fmax2(v, x, k(v, -ERF_ONE)), k(v, ERF_ONE));
    LLVMValueRef t = LLVMBuildFMul(b, x, x, "");
    LLVMValueRef num = LLVMBuildFMul(b, x, horner(v, t, erf_p, 7), "");
    return keep_nan(v, x0, LLVMBuildFDiv(b, num, horner(v, t, erf_q, 5), ""));
}

/* GELU(x) = x (1/2 + erf(x / sqrt 2) / 2) with erf's P and Q taken in
 * t = x^2 instead of (x / sqrt 2)^2 (coefficient i scaled by 2^-i, P's by
 * 1 / (2 sqrt 2) too): x (1/2 + c P'(t) / Q'(t)), c = x clamped to where erf
 * reaches +-1.  Neither x / sqrt 2 nor x / 2 is computed, and no NaN select
 * is needed: the last product by x keeps a NaN.  Two multiplies and a
 * select fewer than through vm_erf, in the epilogue of every GELU GEMM,
 * where this sequence's multiplies compete with the GEMM's own. */
static LLVMValueRef gelu_erf(const vm_ctx *v, LLVMValueRef x)
{
    float p[7], q[5];
    for (int i = 0; i < 7; i++)
        p[i] = (float)((double)erf_p[i] / (double)(1 << i) / (2.0 * SQRT2));
    for (int i = 0; i < 5; i++)
        q[i] = (float)((double)erf_q[i] / (double)(1 << i));
    LLVMBuilderRef b = v->b;
    double lim = ERF_ONE * SQRT2;
    LLVMValueRef c = fmin2(v, fmax2(v, x, k(v, -lim)), k(v, lim));
    LLVMValueRef t = LLVMBuildFMul(b, c, c, "");
    LLVMValueRef e = LLVMBuildFDiv(b, LLVMBuildFMul(b, c, horner(v, t, p, 7), ""), horner(v, t, q, 5), "");
    return LLVMBuildFMul(b, x, LLVMBuildFAdd(b, e, k(v, 0.5), ""), "");
}

LLVMValueRef vm_tanh(const vm_ctx *v, LLVMValueRef x)
{
    static const float c[5] = {-3.33332819422e-1f, 1.33314422036e-1f, -5.37397155531e-2f, 2.06390887954e-2f,
                               -5.70498872745e-3f};
    LLVMBuilderRef b = v->b;
    LLVMValueRef ax = intrinsic(v, "llvm.fabs", &x, 1);
    LLVMValueRef z = LLVMBuildFMul(b, x, x, "");
    LLVMValueRef small = fma3(v, LLVMBuildFMul(b, horner(v, z, c, 5), z, ""), x, x);
    LLVMValueRef e = vm_exp(v, LLVMBuildFMul(b, ax, k(v, 2), ""), VM_EXP_FINITE);
    LLVMValueRef big = LLVMBuildFSub(b, k(v, 1), LLVMBuildFDiv(b, k(v, 2), LLVMBuildFAdd(b, e, k(v, 1), ""), ""), "");
    LLVMValueRef args[2] = {big, x};
    big = intrinsic(v, "llvm.copysign", args, 2);
    return keep_nan(v, x, LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOLT, ax, k(v, 0.625f), ""), small, big, ""));
}

LLVMValueRef vm_act(const vm_ctx *v, LLVMValueRef x, ir_act act)
{
    LLVMBuilderRef b = v->b;
    switch (act) {
    case IR_ACT_GELU_ERF: return gelu_erf(v, x);
    case IR_ACT_GELU_TANH: {
        /* x/2 (1 + tanh(z)), z = sqrt(2/pi) (x + 0.044715 x^3), computed as
         * x / (1 + exp(-2 z)) (the same function, no tanh needed) */
        LLVMValueRef x2 = LLVMBuildFMul(b, x, x, "");
        LLVMValueRef inner = fma3(v, x2, k(v, 0.044715f), k(v, 1.0f));
        LLVMValueRef z2 = LLVMBuildFMul(b, LLVMBuildFMul(b, x, inner, ""), k(v, -1.5957691216f), "");
        LLVMValueRef den = LLVMBuildFAdd(b, vm_exp(v, z2, VM_EXP_FINITE), k(v, 1.0f), "");
        return LLVMBuildFDiv(b, x, den, "");
    }
    case IR_ACT_RELU: return fmax2(v, x, k(v, 0.0f));
    case IR_ACT_RELU6: return fmin2(v, fmax2(v, x, k(v, 0.0f)), k(v, 6.0f));
    case IR_ACT_QUICK_GELU: { /* x / (1 + exp(-1.702 x)) */
        LLVMValueRef e = vm_exp(v, LLVMBuildFMul(b, x, k(v, -1.702f), ""), VM_EXP_FINITE);
        return LLVMBuildFDiv(b, x, LLVMBuildFAdd(b, e, k(v, 1.0f), ""), "");
    }
    case IR_ACT_SILU: { /* x / (1 + exp(-x)) */
        LLVMValueRef e = vm_exp(v, LLVMBuildFNeg(b, x, ""), VM_EXP_FINITE);
        return LLVMBuildFDiv(b, x, LLVMBuildFAdd(b, e, k(v, 1.0f), ""), "");
    }
    case IR_ACT_NONE: case IR_ACT_COUNT: return x;
    }
    return x;
}

/* FakeQuant with the zero point folded into the bounds (qmin - zero and
 * qmax - zero: the integers are exact) and, where the target has FMA and
 * 2^-60 <= scale <= 2^60, without a division: x is clamped to +-scale 2^24
 * first (a NaN to the low end, which gives qmin as QuantizeLinear's NaN
 * does; an infinity to its own end), then q0 = x * r, r = 1/scale rounded, is
 * within an ulp of x / scale, the remainder x - q0 scale is exact (one FMA)
 * while it is a normal float, and q0 + rem * r rounds to the correctly
 * rounded quotient (Markstein).  Where the remainder is not normal (|x|
 * below about 2^-100) the quotient is below 2^-40 and rounds to 0 either
 * way.  10 vector operations where the formula takes 9 and a division. */
static LLVMValueRef quant_code(const vm_ctx *v, LLVMValueRef x, const float fq[5])
{
    LLVMBuilderRef b = v->b;
    float s = fq[1], r = 1.0f / s, big = s * 0x1p24f, lo = fq[3] - fq[2], hi = fq[4] - fq[2];
    if (fq[0] != 1)
        x = LLVMBuildFMul(b, x, k(v, fq[0]), "");
    LLVMValueRef q;
    if (v->has_fma && s >= 0x1p-60f && s <= 0x1p60f && isnormal(r)) {
        x = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOGT, x, k(v, -big), ""), x, k(v, -big), "");
        x = fmin2(v, x, k(v, big));
        LLVMValueRef q0 = LLVMBuildFMul(b, x, k(v, r), "");
        LLVMValueRef rem = fma3(v, LLVMBuildFNeg(b, q0, ""), k(v, s), x);
        q = fma3(v, rem, k(v, r), q0);
    } else {
        q = LLVMBuildFDiv(b, x, k(v, s), "");
    }
    LLVMValueRef args[1] = {q};
    /* + 0: a -0 becomes +0, as round(..) + zero - zero gives it */
    LLVMValueRef t = LLVMBuildFAdd(b, intrinsic(v, "llvm.roundeven", args, 1), k(v, 0.0), "");
    t = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOGT, t, k(v, lo), ""), t, k(v, lo), ""); /* NaN: qmin */
    return fmin2(v, t, k(v, hi));
}

LLVMValueRef vm_fake_quant(const vm_ctx *v, LLVMValueRef x, const float fq[5])
{
    return LLVMBuildFMul(v->b, quant_code(v, x, fq), k(v, fq[1]), "");
}

LLVMValueRef vm_quant_lookup(const vm_ctx *v, LLVMValueRef x, const float fq[5], LLVMValueRef table)
{
    LLVMBuilderRef b = v->b;
    LLVMContextRef ctx = LLVMGetModuleContext(v->mod);
    LLVMTypeRef f32 = LLVMFloatTypeInContext(ctx);
    /* the code less qmin: an exact small integer */
    LLVMValueRef t = LLVMBuildFSub(b, quant_code(v, x, fq), k(v, fq[3] - fq[2]), "");
    LLVMValueRef i = LLVMBuildFPToSI(b, t, int_type(v), "");
    LLVMValueRef at = LLVMBuildGEP2(b, f32, table, &i, 1, "");
    if (LLVMGetTypeKind(v->t) != LLVMVectorTypeKind)
        return LLVMBuildLoad2(b, f32, at, "");
    LLVMTypeRef tys[2] = {v->t, LLVMTypeOf(at)};
    const char *name = "llvm.masked.gather";
    LLVMValueRef f = LLVMGetIntrinsicDeclaration(v->mod, LLVMLookupIntrinsicID(name, strlen(name)), tys, 2);
    LLVMValueRef all = LLVMConstAllOnes(LLVMVectorType(LLVMInt1TypeInContext(ctx), LLVMGetVectorSize(v->t)));
    LLVMValueRef args[4] = {at, LLVMConstInt(LLVMInt32TypeInContext(ctx), 4, 0), all, LLVMGetUndef(v->t)};
    return LLVMBuildCall2(b, LLVMGlobalGetValueType(f), f, args, 4, "");
}
