/* vmath.c: exp, erf and tanh of f32 as straight-line LLVM IR instead of
 * calls to libm's expf/erff/tanhf.  A loop that calls libm stays scalar; one
 * made of these (fcmp/select, FMA-able multiply-adds, a float-to-int and a
 * shift) is vectorised by LLVM like any other element-wise loop.
 *
 * Accuracy, measured against double-precision libm over the float range:
 *   exp   range reduction by ln2 (split in two), then a degree-6 polynomial
 *         (Cephes' expf coefficients): about 2 ulp;
 *   erf   its Maclaurin series below |x| = 1 (about 1 ulp), Abramowitz &
 *         Stegun 7.1.26 with exp above from there (absolute error below
 *         2.5e-7 where erf is above 0.84); odd by construction;
 *   tanh  odd polynomial (Cephes' tanhf) below |x| = 0.625, else
 *         1 - 2 / (exp(2|x|) + 1): about 2 ulp, odd.
 * NaN in gives NaN out; exp overflows to +inf above 88.72 and gives 0 below
 * -87 (where the true result is below 1.7e-38). */
#include "codegen/llvm/cg_impl.h"

static LLVMValueRef k(cg_ctx *cg, double x) { return LLVMConstReal(cg->t_f32, x); }

static LLVMValueRef fma3(cg_ctx *cg, LLVMBuilderRef b, LLVMValueRef x, LLVMValueRef y, LLVMValueRef z)
{
    LLVMValueRef args[3] = {x, y, z};
    return cg_intrinsic(cg, b, "llvm.fmuladd", cg->t_f32, args, 3);
}

static LLVMValueRef poly(cg_ctx *cg, LLVMBuilderRef b, LLVMValueRef x, const double *c, int n)
{
    LLVMValueRef acc = k(cg, c[0]);
    for (int i = 1; i < n; i++)
        acc = fma3(cg, b, acc, x, k(cg, c[i]));
    return acc;
}

static LLVMValueRef minmax(cg_ctx *cg, LLVMBuilderRef b, const char *which, LLVMValueRef x, double c)
{
    LLVMValueRef args[2] = {x, k(cg, c)};
    return cg_intrinsic(cg, b, which, cg->t_f32, args, 2);
}

LLVMValueRef cg_exp_f32(cg_ctx *cg, LLVMBuilderRef b, LLVMValueRef x)
{
    /* minnum/maxnum turn NaN into the bound: the result is fixed up at the end */
    LLVMValueRef xc = minmax(cg, b, "llvm.minnum", minmax(cg, b, "llvm.maxnum", x, -87.0), 88.72);
    LLVMValueRef fn = LLVMBuildFMul(b, xc, k(cg, 1.44269504088896341), "");
    fn = LLVMBuildFAdd(b, fn, k(cg, 0.5), "");
    fn = cg_intrinsic(cg, b, "llvm.floor", cg->t_f32, &fn, 1);
    LLVMValueRef r = fma3(cg, b, fn, k(cg, -0.693359375), xc);
    r = fma3(cg, b, fn, k(cg, 2.12194440e-4), r);
    static const double c[6] = {1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3,
                                4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1};
    LLVMValueRef p = poly(cg, b, r, c, 6);
    LLVMValueRef y = fma3(cg, b, LLVMBuildFMul(b, p, r, ""), r, LLVMBuildFAdd(b, r, k(cg, 1), ""));
    /* 2^(n-1) * 2: n reaches 128 at the top of the range */
    LLVMValueRef n = LLVMBuildFPToSI(b, fn, cg->t_i32, "");
    LLVMValueRef bits = LLVMBuildShl(b, LLVMBuildAdd(b, n, LLVMConstInt(cg->t_i32, 126, 0), ""),
                                     LLVMConstInt(cg->t_i32, 23, 0), "");
    LLVMValueRef scale = LLVMBuildBitCast(b, bits, cg->t_f32, "");
    y = LLVMBuildFMul(b, LLVMBuildFMul(b, y, scale, ""), k(cg, 2), "");
    y = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOGT, x, k(cg, 88.72), ""), k(cg, __builtin_inff()), y, "");
    y = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOLT, x, k(cg, -87.0), ""), k(cg, 0), y, "");
    return LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealUNO, x, x, ""), x, y, "");
}

LLVMValueRef cg_erf_f32(cg_ctx *cg, LLVMBuilderRef b, LLVMValueRef x)
{
    /* |x| < 1: the Maclaurin series x * sum_n (-1)^n x^2n / (n! (2n+1)) * 2/sqrt(pi),
     * eleven terms (the first one left out is below 2e-8) */
    double c[11], fact = 1;
    for (int n = 0; n < 11; n++) {
        fact *= n > 0 ? n : 1;
        c[10 - n] = (n % 2 ? -1 : 1) / (fact * (2 * n + 1)) * 1.1283791670955126;
    }
    LLVMValueRef z = LLVMBuildFMul(b, x, x, "");
    LLVMValueRef small = LLVMBuildFMul(b, poly(cg, b, z, c, 11), x, "");
    /* |x| >= 1: Abramowitz & Stegun 7.1.26, 1 - t P(t) exp(-x^2) with t = 1 / (1 + p|x|) */
    LLVMValueRef ax = cg_intrinsic(cg, b, "llvm.fabs", cg->t_f32, &x, 1);
    LLVMValueRef t = LLVMBuildFDiv(b, k(cg, 1), fma3(cg, b, ax, k(cg, 0.3275911), k(cg, 1)), "");
    static const double a[5] = {1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592};
    LLVMValueRef p = LLVMBuildFMul(b, poly(cg, b, t, a, 5), t, "");
    LLVMValueRef e = cg_exp_f32(cg, b, LLVMBuildFNeg(b, z, ""));
    LLVMValueRef big = LLVMBuildFSub(b, k(cg, 1), LLVMBuildFMul(b, p, e, ""), "");
    LLVMValueRef args[2] = {big, x};
    big = cg_intrinsic(cg, b, "llvm.copysign", cg->t_f32, args, 2); /* NaN stays NaN through exp */
    return LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOLT, ax, k(cg, 1), ""), small, big, "");
}

LLVMValueRef cg_tanh_f32(cg_ctx *cg, LLVMBuilderRef b, LLVMValueRef x)
{
    LLVMValueRef ax = cg_intrinsic(cg, b, "llvm.fabs", cg->t_f32, &x, 1);
    LLVMValueRef z = LLVMBuildFMul(b, x, x, "");
    static const double c[5] = {-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1,
                                -3.33332819422e-1};
    LLVMValueRef small = fma3(cg, b, LLVMBuildFMul(b, poly(cg, b, z, c, 5), z, ""), x, x);
    LLVMValueRef e = cg_exp_f32(cg, b, LLVMBuildFMul(b, ax, k(cg, 2), ""));
    LLVMValueRef big = LLVMBuildFSub(b, k(cg, 1), LLVMBuildFDiv(b, k(cg, 2), LLVMBuildFAdd(b, e, k(cg, 1), ""), ""), "");
    LLVMValueRef args[2] = {big, x};
    big = cg_intrinsic(cg, b, "llvm.copysign", cg->t_f32, args, 2);
    return LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOLT, ax, k(cg, 0.625), ""), small, big, "");
}
