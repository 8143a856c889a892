/* emit_elem.c: element-wise kernels.  A kernel computes a group of
 * element-wise nodes (schedule.c folds a chain into its last node) as one
 * expression per element: the group's inputs are loaded with numpy
 * broadcasting, one-element constants become immediates, and every
 * intermediate stays in registers.  Floats are computed in their own type
 * (f32 in f32), integers with wrapping arithmetic, bools as i1. */
#include "codegen/llvm/cg_impl.h"
#include "codegen/llvm/kern_ir.h"
#include "codegen/llvm/vmath.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { MAX_MEMBERS = 64 };

typedef struct {
    cg_ctx *cg;
    int root;
    int lanes; /* 0: a scalar loop body; else <lanes x float> registers (cg_elem_epilogue) */
    int nleaves;
    int leaf_value[CG_MAP_MAX_OPS]; /* operand k + 1 reads this value */
    LLVMValueRef *ptrs;
    int nmemo;
    int memo_value[MAX_MEMBERS];
    LLVMValueRef memo[MAX_MEMBERS];
} group;

static int is_unsigned(ir_dtype t) { return t == IR_U8 || t == IR_U16 || t == IR_U32 || t == IR_U64 || t == IR_BOOL; }

/* Register type of a dtype in expressions (bool as i1). */
static LLVMTypeRef expr_type(cg_ctx *cg, ir_dtype t) { return t == IR_BOOL ? cg->t_i1 : cg_mem_type(cg, t); }

/* The value of the only element of a plain one-element constant, else NULL. */
static LLVMValueRef scalar_const(cg_ctx *cg, int v)
{
    const ir_value *c = &cg->g->values[v];
    if (!ir_value_is_plain_const(cg->g, v) || c->nbytes != ir_dtype_size(c->dtype) || !cg_mem_type(cg, c->dtype))
        return NULL;
    const unsigned char *p = c->data;
    switch (c->dtype) {
    case IR_F32: { float f; memcpy(&f, p, 4); return LLVMConstReal(cg->t_f32, f); }
    case IR_F64: { double f; memcpy(&f, p, 8); return LLVMConstReal(cg->t_f64, f); }
    case IR_BOOL: return LLVMConstInt(cg->t_i1, p[0] != 0, 0);
    default: {
        uint64_t x = 0;
        memcpy(&x, p, c->nbytes); /* little-endian */
        return LLVMConstInt(cg_mem_type(cg, c->dtype), x, 0);
    }
    }
}

/* 1 and *x if v is a plain one-element float constant. */
static int const_float(const ir_graph *g, int v, double *x)
{
    const ir_value *c = &g->values[v];
    if (!ir_value_is_plain_const(g, v) || c->nbytes != ir_dtype_size(c->dtype))
        return 0;
    if (c->dtype == IR_F32) {
        float f;
        memcpy(&f, c->data, 4);
        *x = f;
        return 1;
    }
    if (c->dtype == IR_F64) {
        memcpy(x, c->data, 8);
        return 1;
    }
    return 0;
}

/* ---- support ---- */

/* QuantLookup's scale, zero point and bounds as a fake-quant point
 * {1, scale, zero, qmin, qmax} (fq may be NULL); 0 if they or the table do
 * not fit. */
static int lookup_params(const ir_graph *g, const ir_node *n, float *fq)
{
    double s, z;
    float qmin = ir_attr_float(n, IR_ATTR_QMIN, 0), qmax = ir_attr_float(n, IR_ATTR_QMAX, 255);
    const ir_value *t = &g->values[n->inputs[3]];
    if (!const_float(g, n->inputs[1], &s) || !const_float(g, n->inputs[2], &z) || !(s > 0) || !isfinite((float)s) ||
        !ir_value_is_plain_const(g, n->inputs[3]) || t->dtype != IR_F32 || qmin != floorf(qmin) || !(qmax >= qmin) ||
        (double)t->nbytes != ((double)qmax - qmin + 1) * sizeof(float))
        return 0;
    if (fq) {
        float r[5] = {1, (float)s, (float)z, qmin, qmax};
        memcpy(fq, r, sizeof r);
    }
    return 1;
}

static int batchnorm_supported(const ir_graph *g, const ir_node *n, char *why, size_t len)
{
    const ir_value *x = &g->values[n->inputs[0]];
    if (ir_attr_int(n, IR_ATTR_TRAINING_MODE, 0) != 0) {
        snprintf(why, len, "training-mode BatchNormalization is not supported");
        return 0;
    }
    if (x->dtype != IR_F32 || x->rank < 2 || x->dims[1].e != 0) {
        snprintf(why, len, "BatchNormalization needs an f32 input [N, C, ...] with a static C");
        return 0;
    }
    for (int k = 1; k < 5; k++) {
        const ir_value *p = &g->values[n->inputs[k]];
        if (!ir_value_is_plain_const(g, n->inputs[k]) || p->dtype != IR_F32 ||
            p->nbytes != sizeof(float) * (size_t)x->dims[1].k) {
            snprintf(why, len, "BatchNormalization's input %d must be a constant f32[%lld]", k,
                     (long long)x->dims[1].k);
            return 0;
        }
    }
    return 1;
}

int cg_elem_supports(const ir_graph *g, const ir_node *n, char *why, size_t len)
{
    for (int k = 0; k < n->ninputs; k++) {
        int v = n->inputs[k];
        if (v < 0) {
            if (n->op == IR_OP_CLIP)
                continue;
            snprintf(why, len, "input %d is omitted", k);
            return 0;
        }
        ir_dtype t = g->values[v].dtype;
        if (t == IR_F16 || t == IR_BF16) {
            snprintf(why, len, "%s tensors are not computed on the CPU", ir_dtype_name(t));
            return 0;
        }
        if (g->values[v].kind == IR_VAL_CONST && !ir_value_is_plain_const(g, v)) {
            snprintf(why, len, "input %d holds values computed from the batch", k);
            return 0;
        }
    }
    ir_dtype ot = g->values[n->outputs[0]].dtype;
    if (ot == IR_F16 || ot == IR_BF16) {
        snprintf(why, len, "%s tensors are not computed on the CPU", ir_dtype_name(ot));
        return 0;
    }
    ir_dtype t0 = g->values[n->inputs[0]].dtype;
    if (ir_op_has(n->op, OPF_FLOAT_ONLY) && !ir_dtype_is_float(t0)) {
        snprintf(why, len, "%s of %s tensors is not supported", ir_op_name(n->op), ir_dtype_name(t0));
        return 0;
    }
    if (n->op == IR_OP_GELU && ir_gelu_act(n) == IR_ACT_NONE) {
        snprintf(why, len, "Gelu's approximate attribute is neither 'none' nor 'tanh'");
        return 0;
    }
    if (n->op == IR_OP_BATCHNORM)
        return batchnorm_supported(g, n, why, len);
    if (n->op == IR_OP_QUANT_LOOKUP && !lookup_params(g, n, NULL)) {
        snprintf(why, len, "QuantLookup needs a one-element scale (> 0) and zero point and a table of qmax - qmin + 1 "
                           "floats, all constants");
        return 0;
    }
    return 1;
}

/* ---- expressions ---- */

static LLVMValueRef gen(group *gr, LLVMBuilderRef b, int v);

/* c where t is a scalar type, else c in every lane of vector type t. */
static LLVMValueRef splat_like(LLVMTypeRef t, LLVMValueRef c)
{
    if (LLVMGetTypeKind(t) != LLVMVectorTypeKind)
        return c;
    unsigned n = LLVMGetVectorSize(t);
    LLVMValueRef lanes[64];
    for (unsigned i = 0; i < n && i < 64; i++)
        lanes[i] = c;
    return LLVMConstVector(lanes, n);
}

static LLVMTypeRef scalar_of(LLVMTypeRef t)
{
    return LLVMGetTypeKind(t) == LLVMVectorTypeKind ? LLVMGetElementType(t) : t;
}

static LLVMValueRef fconst(LLVMTypeRef t, double x) { return splat_like(t, LLVMConstReal(scalar_of(t), x)); }

/* The one vector-math set (vmath.c) over f32 values of type t (a float or
 * a vector of floats) in builder b. */
static vm_ctx vm_of(cg_ctx *cg, LLVMBuilderRef b, LLVMTypeRef t)
{
    vm_ctx v = {.mod = cg->mod, .b = b, .t = t, .has_fma = cg->target.has_fma};
    return v;
}

LLVMValueRef cg_exp_f32(cg_ctx *cg, LLVMBuilderRef b, LLVMValueRef x)
{
    vm_ctx v = vm_of(cg, b, cg->t_f32);
    return vm_exp(&v, x, VM_EXP_IEEE);
}

/* A libm function of one argument; exp, erf and tanh of f32 (or of f32
 * vectors) are inline (vmath.c) so that their loops vectorise.  The others
 * take scalars only (cg_elem_vector_ok keeps them out of vectors). */
static LLVMValueRef call1(cg_ctx *cg, LLVMBuilderRef b, const char *f32name, const char *f64name, LLVMTypeRef t,
                          LLVMValueRef x)
{
    vm_ctx v = vm_of(cg, b, t);
    int f32 = scalar_of(t) == cg->t_f32;
    if (f32 && strcmp(f32name, "expf") == 0)
        return vm_exp(&v, x, VM_EXP_IEEE);
    if (f32 && strcmp(f32name, "erff") == 0)
        return vm_erf(&v, x);
    if (f32 && strcmp(f32name, "tanhf") == 0)
        return vm_tanh(&v, x);
    return cg_libm(cg, b, f32 ? f32name : f64name, t, &x, 1);
}

static LLVMValueRef intr1(cg_ctx *cg, LLVMBuilderRef b, const char *name, LLVMTypeRef t, LLVMValueRef x)
{
    return cg_intrinsic(cg, b, name, t, &x, 1);
}

/* Converts x (register type of `from`) to the register type of `to`. */
static LLVMValueRef convert(cg_ctx *cg, LLVMBuilderRef b, LLVMValueRef x, ir_dtype from, ir_dtype to)
{
    LLVMTypeRef tt = expr_type(cg, to);
    if (from == to)
        return x;
    int ff = ir_dtype_is_float(from), tf = ir_dtype_is_float(to);
    if (ff && tf)
        return LLVMBuildFPCast(b, x, tt, "");
    if (to == IR_BOOL)
        return ff ? LLVMBuildFCmp(b, LLVMRealUNE, x, LLVMConstNull(LLVMTypeOf(x)), "")
                  : LLVMBuildICmp(b, LLVMIntNE, x, LLVMConstNull(LLVMTypeOf(x)), "");
    if (tf)
        return is_unsigned(from) ? LLVMBuildUIToFP(b, x, tt, "") : LLVMBuildSIToFP(b, x, tt, "");
    if (ff) { /* truncates toward zero; saturates instead of producing poison */
        LLVMTypeRef tys[2] = {tt, LLVMTypeOf(x)};
        const char *name = is_unsigned(to) ? "llvm.fptoui.sat" : "llvm.fptosi.sat";
        unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
        LLVMValueRef f = LLVMGetIntrinsicDeclaration(cg->mod, id, tys, 2);
        return LLVMBuildCall2(b, LLVMGlobalGetValueType(f), f, &x, 1, "");
    }
    return LLVMBuildIntCast2(b, x, tt, !is_unsigned(from), "");
}

/* Integer division and remainder that never trap: x/0 is 0, x%0 is 0. */
static LLVMValueRef safe_idiv(cg_ctx *cg, LLVMBuilderRef b, LLVMValueRef x, LLVMValueRef y, int uns, int rem)
{
    LLVMTypeRef t = LLVMTypeOf(x);
    LLVMValueRef zero = LLVMConstNull(t), one = LLVMConstInt(t, 1, 0), m1 = LLVMConstAllOnes(t);
    LLVMValueRef y0 = LLVMBuildICmp(b, LLVMIntEQ, y, zero, "");
    LLVMValueRef ym1 = uns ? LLVMConstInt(cg->t_i1, 0, 0) : LLVMBuildICmp(b, LLVMIntEQ, y, m1, "");
    LLVMValueRef ys = LLVMBuildSelect(b, LLVMBuildOr(b, y0, ym1, ""), one, y, "");
    LLVMValueRef r = rem ? (uns ? LLVMBuildURem(b, x, ys, "") : LLVMBuildSRem(b, x, ys, ""))
                         : (uns ? LLVMBuildUDiv(b, x, ys, "") : LLVMBuildSDiv(b, x, ys, ""));
    if (!uns)
        r = LLVMBuildSelect(b, ym1, rem ? zero : LLVMBuildSub(b, zero, x, ""), r, "");
    return LLVMBuildSelect(b, y0, zero, r, "");
}

/* ---- the formulas of elemwise.def as LLVM IR ----
 * Every word works on the register type t of the node's input 0: floats in
 * their own type, integers wrapping (signed or not), bools as i1. */
typedef struct {
    group *gr;
    cg_ctx *cg;
    LLVMBuilderRef b;
    const ir_node *n;
    LLVMTypeRef t;
    int fl, uns;
} ew_env;

static LLVMValueRef w_k(const ew_env *e, double c)
{
    if (e->fl)
        return fconst(e->t, c);
    return splat_like(e->t, LLVMConstInt(scalar_of(e->t), (unsigned long long)(long long)c, 1));
}

static LLVMValueRef w_arith(const ew_env *e, LLVMOpcode fop, LLVMOpcode iop, LLVMValueRef a, LLVMValueRef b)
{
    return LLVMBuildBinOp(e->b, e->fl ? fop : iop, a, b, "");
}

static LLVMValueRef w_cmp(const ew_env *e, LLVMRealPredicate fp, LLVMIntPredicate sp, LLVMIntPredicate up,
                          LLVMValueRef a, LLVMValueRef b)
{
    if (e->fl)
        return LLVMBuildFCmp(e->b, fp, a, b, "");
    return LLVMBuildICmp(e->b, e->uns ? up : sp, a, b, "");
}

static LLVMValueRef w_div(const ew_env *e, LLVMValueRef a, LLVMValueRef b)
{
    return e->fl ? LLVMBuildFDiv(e->b, a, b, "") : safe_idiv(e->cg, e->b, a, b, e->uns, 0);
}

static LLVMValueRef w_mod(const ew_env *e, LLVMValueRef x, LLVMValueRef y)
{
    LLVMBuilderRef b = e->b;
    int fl = e->fl;
    LLVMValueRef r = fl ? LLVMBuildFRem(b, x, y, "") : safe_idiv(e->cg, b, x, y, e->uns, 1);
    if (ir_attr_int(e->n, IR_ATTR_FMOD, 0) || e->uns)
        return r;
    /* Python's sign rule: a non-zero remainder takes the divisor's sign. */
    LLVMValueRef z = LLVMConstNull(e->t);
    LLVMValueRef nz = w_cmp(e, LLVMRealUNE, LLVMIntNE, LLVMIntNE, r, z);
    LLVMValueRef diff = LLVMBuildXor(b, w_cmp(e, LLVMRealOLT, LLVMIntSLT, LLVMIntSLT, r, z),
                                     w_cmp(e, LLVMRealOLT, LLVMIntSLT, LLVMIntSLT, y, z), "");
    return LLVMBuildSelect(b, LLVMBuildAnd(b, nz, diff, ""), w_arith(e, LLVMFAdd, LLVMAdd, r, y), r, "");
}

/* x^y; a constant exponent 1, 2, 3, 1/2 or -1 becomes arithmetic. */
static LLVMValueRef w_pow(const ew_env *e, LLVMValueRef x, LLVMValueRef y)
{
    cg_ctx *cg = e->cg;
    LLVMBuilderRef b = e->b;
    double c;
    if (const_float(cg->g, e->n->inputs[1], &c)) {
        if (c == 1)
            return x;
        if (c == 2)
            return LLVMBuildFMul(b, x, x, "");
        if (c == 3)
            return LLVMBuildFMul(b, LLVMBuildFMul(b, x, x, ""), x, "");
        if (c == 0.5)
            return intr1(cg, b, "llvm.sqrt", e->t, x);
        if (c == -1)
            return LLVMBuildFDiv(b, fconst(e->t, 1), x, "");
    }
    ir_dtype et = cg->g->values[e->n->inputs[1]].dtype;
    LLVMValueRef args[2] = {x, convert(cg, b, y, et, e->t == cg->t_f32 ? IR_F32 : IR_F64)};
    return cg_libm(cg, b, e->t == cg->t_f32 ? "powf" : "pow", e->t, args, 2);
}

static LLVMValueRef w_abs(const ew_env *e, LLVMValueRef x)
{
    if (e->fl)
        return intr1(e->cg, e->b, "llvm.fabs", e->t, x);
    if (e->uns)
        return x;
    LLVMValueRef z = LLVMConstNull(e->t);
    return LLVMBuildSelect(e->b, LLVMBuildICmp(e->b, LLVMIntSLT, x, z, ""), LLVMBuildSub(e->b, z, x, ""), x, "");
}

static LLVMValueRef w_neg(const ew_env *e, LLVMValueRef x)
{
    return e->fl ? LLVMBuildFNeg(e->b, x, "") : LLVMBuildSub(e->b, LLVMConstNull(e->t), x, "");
}

static LLVMValueRef w_minmax(const ew_env *e, int mx, LLVMValueRef a, LLVMValueRef b)
{
    if (e->fl) {
        LLVMValueRef args[2] = {a, b};
        return cg_intrinsic(e->cg, e->b, mx ? "llvm.maximum" : "llvm.minimum", e->t, args, 2);
    }
    LLVMIntPredicate p = mx ? (e->uns ? LLVMIntUGE : LLVMIntSGE) : (e->uns ? LLVMIntULE : LLVMIntSLE);
    return LLVMBuildSelect(e->b, LLVMBuildICmp(e->b, p, a, b, ""), a, b, "");
}

/* The node's GELU: vmath.c's for f32 (the GEMM epilogues' very sequence),
 * the reference formula through libm for f64. */
static LLVMValueRef w_gelu(const ew_env *e, LLVMValueRef x)
{
    cg_ctx *cg = e->cg;
    LLVMBuilderRef b = e->b;
    LLVMTypeRef t = e->t;
    ir_act act = ir_gelu_act(e->n);
    if (scalar_of(t) == cg->t_f32) {
        vm_ctx v = vm_of(cg, b, t);
        return vm_act(&v, x, act);
    }
    LLVMValueRef inner;
    if (act == IR_ACT_QUICK_GELU) {
        LLVMValueRef ex = call1(cg, b, "expf", "exp", t, LLVMBuildFMul(b, x, fconst(t, -1.702), ""));
        return LLVMBuildFDiv(b, x, LLVMBuildFAdd(b, fconst(t, 1.0), ex, ""), "");
    }
    if (act == IR_ACT_GELU_TANH) {
        LLVMValueRef x3 = LLVMBuildFMul(b, LLVMBuildFMul(b, x, x, ""), x, "");
        LLVMValueRef u = LLVMBuildFAdd(b, x, LLVMBuildFMul(b, fconst(t, 0.044715), x3, ""), "");
        inner = call1(cg, b, "tanhf", "tanh", t, LLVMBuildFMul(b, fconst(t, 0.7978845608028654), u, ""));
    } else {
        inner = call1(cg, b, "erff", "erf", t, LLVMBuildFMul(b, x, fconst(t, 0.7071067811865476), ""));
    }
    LLVMValueRef h = LLVMBuildFMul(b, fconst(t, 0.5), x, "");
    return LLVMBuildFMul(b, h, LLVMBuildFAdd(b, fconst(t, 1.0), inner, ""), "");
}

#define X0 x[0]
#define X1 x[1]
#define X2 x[2]
#define K(c_) w_k(e, c_)
#define ATTR(id, d_) fconst(e->t, ir_attr_float(e->n, IR_ATTR_##id, (float)(d_)))
#define ADD(p_, q_) w_arith(e, LLVMFAdd, LLVMAdd, p_, q_)
#define SUB(p_, q_) w_arith(e, LLVMFSub, LLVMSub, p_, q_)
#define MUL(p_, q_) w_arith(e, LLVMFMul, LLVMMul, p_, q_)
#define DIV(p_, q_) w_div(e, p_, q_)
#define MOD(p_, q_) w_mod(e, p_, q_)
#define POW(p_, q_) w_pow(e, p_, q_)
#define NEG(p_) w_neg(e, p_)
#define ABS(p_) w_abs(e, p_)
#define EXP(p_) call1(e->cg, e->b, "expf", "exp", e->t, p_)
#define LOG(p_) call1(e->cg, e->b, "logf", "log", e->t, p_)
#define ERF(p_) call1(e->cg, e->b, "erff", "erf", e->t, p_)
#define TANH(p_) call1(e->cg, e->b, "tanhf", "tanh", e->t, p_)
#define COS(p_) call1(e->cg, e->b, "cosf", "cos", e->t, p_)
#define SIN(p_) call1(e->cg, e->b, "sinf", "sin", e->t, p_)
#define SQRT(p_) intr1(e->cg, e->b, "llvm.sqrt", e->t, p_)
#define ROUND(p_) intr1(e->cg, e->b, "llvm.roundeven", e->t, p_)
#define F32(p_) (p_)
#define GELU(p_) w_gelu(e, p_)
#define MAX(p_, q_) w_minmax(e, 1, p_, q_)
#define MIN(p_, q_) w_minmax(e, 0, p_, q_)
#define LT(p_, q_) w_cmp(e, LLVMRealOLT, LLVMIntSLT, LLVMIntULT, p_, q_)
#define GT(p_, q_) w_cmp(e, LLVMRealOGT, LLVMIntSGT, LLVMIntUGT, p_, q_)
#define LE(p_, q_) w_cmp(e, LLVMRealOLE, LLVMIntSLE, LLVMIntULE, p_, q_)
#define GE(p_, q_) w_cmp(e, LLVMRealOGE, LLVMIntSGE, LLVMIntUGE, p_, q_)
#define EQ(p_, q_) w_cmp(e, LLVMRealOEQ, LLVMIntEQ, LLVMIntEQ, p_, q_)
#define AND(p_, q_) LLVMBuildAnd(e->b, p_, q_, "")
#define OR(p_, q_) LLVMBuildOr(e->b, p_, q_, "")
#define NOT(p_) LLVMBuildNot(e->b, p_, "")
#define SELECT(c_, p_, q_) LLVMBuildSelect(e->b, c_, p_, q_, "")
#define EW(id, in, res, same, F) \
    static LLVMValueRef f_##id(const ew_env *e, const LLVMValueRef *x) { (void)x; return F; }
#include "ir/elemwise.def"
#undef EW
#include "ir/elemwise_end.h"

static LLVMValueRef (*const formulas[IR_OP_COUNT])(const ew_env *e, const LLVMValueRef *x) = {
#define EW(id, in, res, same, F) [IR_OP_##id] = f_##id,
#include "ir/elemwise.def"
#undef EW
};

/* Clip(x, min?, max?): each bound applied when given; NaN stays NaN. */
static LLVMValueRef clip_expr(const ew_env *e, LLVMValueRef x)
{
    LLVMValueRef r = x;
    if (ir_input(e->n, 1) >= 0) {
        LLVMValueRef lo = gen(e->gr, e->b, e->n->inputs[1]);
        r = LLVMBuildSelect(e->b, w_cmp(e, LLVMRealOLT, LLVMIntSLT, LLVMIntULT, r, lo), lo, r, "");
    }
    if (ir_input(e->n, 2) >= 0) {
        LLVMValueRef hi = gen(e->gr, e->b, e->n->inputs[2]);
        r = LLVMBuildSelect(e->b, w_cmp(e, LLVMRealOGT, LLVMIntSGT, LLVMIntUGT, r, hi), hi, r, "");
    }
    return r;
}

/* QuantLookup's table as a private constant of the module (one per content). */
static LLVMValueRef lookup_table(cg_ctx *cg, int v)
{
    const ir_value *t = &cg->g->values[v];
    size_t n = t->nbytes / sizeof(float);
    char name[64];
    snprintf(name, sizeof name, "vitc.lut.%zu.%016llx", n, (unsigned long long)kern_bytes_hash(t->data, t->nbytes));
    LLVMValueRef gv = LLVMGetNamedGlobal(cg->mod, name);
    if (gv)
        return gv;
    LLVMValueRef *el = malloc(sizeof *el * (n ? n : 1));
    if (!el) {
        cg_fail(cg, VITC_INTERNAL, -1, "out of memory");
        return LLVMConstNull(cg->t_ptr);
    }
    for (size_t i = 0; i < n; i++) {
        float f;
        memcpy(&f, (const char *)t->data + i * sizeof f, sizeof f);
        el[i] = LLVMConstReal(cg->t_f32, f);
    }
    gv = LLVMAddGlobal(cg->mod, LLVMArrayType2(cg->t_f32, n), name);
    LLVMSetInitializer(gv, LLVMConstArray2(cg->t_f32, el, n));
    free(el);
    LLVMSetGlobalConstant(gv, 1);
    LLVMSetLinkage(gv, LLVMPrivateLinkage);
    LLVMSetAlignment(gv, 64);
    return gv;
}

/* The value computed by member node n, in the register type of its output. */
static LLVMValueRef node_expr(group *gr, LLVMBuilderRef b, int node)
{
    cg_ctx *cg = gr->cg;
    const ir_node *n = &cg->g->nodes[node];
    ir_dtype it = cg->g->values[n->inputs[0]].dtype, ot = cg->g->values[n->outputs[0]].dtype;
    LLVMTypeRef et = expr_type(cg, it);
    ew_env e = {.gr = gr, .cg = cg, .b = b, .n = n, .t = gr->lanes ? LLVMVectorType(et, (unsigned)gr->lanes) : et,
                .fl = ir_dtype_is_float(it), .uns = is_unsigned(it)};
    LLVMValueRef x = gen(gr, b, n->inputs[0]);
    double sc, zp; /* FakeQuant's inputs are all f32 (ops.def): its scale and zero point as they are */
    if (n->op == IR_OP_FAKE_QUANT && et == cg->t_f32 && const_float(cg->g, n->inputs[1], &sc) &&
        const_float(cg->g, n->inputs[2], &zp) && sc > 0 && isfinite((float)sc)) { /* what attention's points compute */
        float fq[5] = {1, (float)sc, (float)zp, ir_attr_float(n, IR_ATTR_QMIN, 0), ir_attr_float(n, IR_ATTR_QMAX, 255)};
        vm_ctx v = vm_of(cg, b, e.t);
        return vm_fake_quant(&v, x, fq);
    }
    float lq[5];
    if (n->op == IR_OP_QUANT_LOOKUP && lookup_params(cg->g, n, lq)) {
        vm_ctx v = vm_of(cg, b, e.t);
        return vm_quant_lookup(&v, x, lq, lookup_table(cg, n->inputs[3]));
    }
    if (formulas[n->op]) {
        LLVMValueRef xs[3] = {x, NULL, NULL};
        if (ir_op_table[n->op].max_in == VAR) { /* fold over the inputs */
            for (int k = 1; k < n->ninputs; k++) {
                xs[1] = gen(gr, b, n->inputs[k]);
                xs[0] = formulas[n->op](&e, xs);
            }
            return n->ninputs > 1 ? xs[0] : x;
        }
        for (int k = 1; k < n->ninputs && k < 3; k++)
            xs[k] = gen(gr, b, n->inputs[k]);
        return formulas[n->op](&e, xs);
    }
    if (n->op == IR_OP_CLIP)
        return clip_expr(&e, x);
    if (n->op == IR_OP_CAST || n->op == IR_OP_CAST_LIKE)
        return convert(cg, b, x, it, ot);
    if (n->op == IR_OP_BATCHNORM) {
        LLVMValueRef s = gen(gr, b, cg->bn_scale[node]), h = gen(gr, b, cg->bn_shift[node]);
        return LLVMBuildFAdd(b, LLVMBuildFMul(b, x, s, ""), h, "");
    }
    cg_fail(cg, VITC_INTERNAL, node, "is not an element-wise op");
    return LLVMGetUndef(expr_type(cg, ot));
}

static LLVMValueRef gen(group *gr, LLVMBuilderRef b, int v)
{
    cg_ctx *cg = gr->cg;
    for (int i = 0; i < gr->nmemo; i++)
        if (gr->memo_value[i] == v)
            return gr->memo[i];
    LLVMValueRef r = NULL;
    const ir_value *val = &cg->g->values[v];
    for (int k = 0; k < gr->nleaves && !r; k++)
        if (gr->leaf_value[k] == v) {
            r = LLVMBuildLoad2(b, cg_mem_type(cg, val->dtype), gr->ptrs[k + 1], "");
            if (val->dtype == IR_BOOL)
                r = LLVMBuildICmp(b, LLVMIntNE, r, LLVMConstNull(cg->t_i8), "");
        }
    if (!r && (r = scalar_const(cg, v)) && gr->lanes)
        r = splat_like(LLVMVectorType(LLVMTypeOf(r), (unsigned)gr->lanes), r);
    if (!r && val->producer >= 0)
        r = node_expr(gr, b, val->producer);
    if (!r) {
        cg_fail(cg, VITC_INTERNAL, gr->root, "element-wise input '%s' has no source", val->name);
        return LLVMGetUndef(expr_type(cg, val->dtype));
    }
    if (gr->nmemo < MAX_MEMBERS) {
        gr->memo_value[gr->nmemo] = v;
        gr->memo[gr->nmemo++] = r;
    }
    return r;
}

static LLVMValueRef group_body(cg_ctx *cg, const cg_map *m, LLVMBuilderRef b, LLVMValueRef *ptrs)
{
    group *gr = m->ud;
    gr->ptrs = ptrs;
    gr->nmemo = 0;
    int out = cg->g->nodes[gr->root].outputs[0];
    LLVMValueRef r = gen(gr, b, out);
    if (cg->g->values[out].dtype == IR_BOOL)
        r = LLVMBuildZExt(b, r, cg->t_i8, "");
    return r;
}

/* 1 if value v is computed inside the group (by a member other than a leaf). */
static int computed_inside(const cg_ctx *cg, int root, int v)
{
    int p = cg->g->values[v].producer;
    return p >= 0 && p != root && cg->kind[p] == CG_NODE_FUSED && cg->group[p] == root;
}

/* Appends to sig what member node i computes: its op, dtypes, the
 * attributes its code depends on, and where each argument comes from (a
 * group input by position, an earlier member, or an immediate's bits), so
 * that two groups with equal signatures (and equal loop nests) can share one
 * kernel. */
static void sign_arg(cg_ctx *cg, const group *gr, char *sig, size_t n, int v, const int *members, int nmembers)
{
    if (v < 0) {
        cg_key_add(sig, n, "-,");
        return;
    }
    for (int k = 0; k < gr->nleaves; k++)
        if (gr->leaf_value[k] == v) {
            cg_key_add(sig, n, "L%d,", k);
            return;
        }
    const ir_value *val = &cg->g->values[v];
    for (int j = 0; j < nmembers; j++)
        if (val->producer == members[j]) {
            cg_key_add(sig, n, "N%d,", j);
            return;
        }
    uint64_t bits = 0;
    if (val->kind == IR_VAL_CONST && val->nbytes <= sizeof bits)
        memcpy(&bits, val->data, val->nbytes);
    cg_key_add(sig, n, "C%d:%llx,", (int)val->dtype, (unsigned long long)bits);
}

static void sign_node(cg_ctx *cg, const group *gr, char *sig, size_t n, int node, const int *members, int nmembers)
{
    const ir_node *nd = &cg->g->nodes[node];
    cg_key_add(sig, n, "%d.%d.%d.%d.%d(", (int)nd->op, (int)cg->g->values[nd->outputs[0]].dtype,
               (int)cg->g->values[nd->inputs[0]].dtype, (int)ir_gelu_act(nd), (int)ir_attr_int(nd, IR_ATTR_FMOD, 0));
    for (int k = 0; k < nd->nattrs; k++) /* float attributes a formula reads (ATTR) */
        if (nd->attrs[k].kind == IR_AT_FLOAT)
            cg_key_add(sig, n, "a%d=%a,", (int)nd->attrs[k].id, (double)nd->attrs[k].f);
    int nin = nd->op == IR_OP_BATCHNORM ? 1 : nd->op == IR_OP_QUANT_LOOKUP ? 3 : nd->ninputs;
    if (nd->op == IR_OP_QUANT_LOOKUP) { /* the table by its content */
        const ir_value *t = &cg->g->values[nd->inputs[3]];
        cg_key_add(sig, n, "t%zu.%llx,", t->nbytes, (unsigned long long)kern_bytes_hash(t->data, t->nbytes));
    }
    for (int k = 0; k < nin; k++)
        sign_arg(cg, gr, sig, n, nd->inputs[k], members, nmembers - 1);
    if (nd->op == IR_OP_BATCHNORM) {
        sign_arg(cg, gr, sig, n, cg->bn_scale[node], members, nmembers - 1);
        sign_arg(cg, gr, sig, n, cg->bn_shift[node], members, nmembers - 1);
    }
    cg_key_add(sig, n, ")");
}

static int add_leaf(cg_ctx *cg, group *gr, cg_map *m, int v)
{
    if (computed_inside(cg, gr->root, v) || scalar_const(cg, v))
        return VITC_OK;
    for (int k = 0; k < gr->nleaves; k++)
        if (gr->leaf_value[k] == v)
            return VITC_OK;
    if (m->nops >= CG_MAP_MAX_OPS)
        return cg_fail(cg, VITC_INTERNAL, gr->root, "too many inputs for one element-wise kernel");
    cg_view view = cg_view_of(cg, v);
    m->op[m->nops++] = cg_view_broadcast(&view, m->rank, m->dims);
    gr->leaf_value[gr->nleaves++] = v;
    return VITC_OK;
}

/* 1 if node i is computed in the kernel of group root (root included). */
static int in_group(const cg_ctx *cg, int root, int i)
{
    return i == root || (cg->kind[i] == CG_NODE_FUSED && cg->group[i] == root);
}

void cg_group_ops(const cg_ctx *cg, int root, char *buf, size_t len)
{
    size_t ll = 0;
    buf[0] = 0;
    for (int i = 0; i <= root && ll < len; i++)
        if (in_group(cg, root, i))
            ll += (size_t)snprintf(buf + ll, len - ll, "%s%s", ll ? "+" : "", ir_op_name(cg->g->nodes[i].op));
}

int cg_emit_elementwise(cg_ctx *cg, int root)
{
    const ir_graph *g = cg->g;
    const ir_node *rn = &g->nodes[root];
    group gr;
    memset(&gr, 0, sizeof gr);
    gr.cg = cg;
    gr.root = root;
    cg_map m;
    memset(&m, 0, sizeof m);
    int out = rn->outputs[0];
    m.op[0] = cg_view_of(cg, out);
    m.rank = m.op[0].rank;
    memcpy(m.dims, m.op[0].dims, sizeof m.dims);
    m.nops = 1;
    char label[256], sig[1024] = "";
    cg_group_ops(cg, root, label, sizeof label);
    size_t ll = strlen(label);
    int cost = 0, members[MAX_MEMBERS], nmembers = 0;
    for (int i = 0; i <= root; i++) {
        if (!in_group(cg, root, i))
            continue;
        const ir_node *n = &g->nodes[i];
        for (int k = 0; k < n->ninputs; k++) {
            if (n->inputs[k] < 0 || (n->op == IR_OP_BATCHNORM && k > 0) || (n->op == IR_OP_QUANT_LOOKUP && k == 3))
                continue;
            if (add_leaf(cg, &gr, &m, n->inputs[k]))
                return cg->d->status;
        }
        if (n->op == IR_OP_BATCHNORM &&
            (add_leaf(cg, &gr, &m, cg->bn_scale[i]) || add_leaf(cg, &gr, &m, cg->bn_shift[i])))
            return cg->d->status;
        if (nmembers < MAX_MEMBERS)
            members[nmembers++] = i;
        sign_node(cg, &gr, sig, sizeof sig, i, members, nmembers);
        cost += ir_op_has(n->op, OPF_TRANSCENDENTAL) ? 20 : 1;
    }
    if (ll < sizeof label)
        snprintf(label + ll, sizeof label - ll, " %s", rn->name);
    m.label = label;
    m.body = group_body;
    m.sig = nmembers < MAX_MEMBERS ? sig : NULL;
    m.ud = &gr;
    m.cost = cost;
    return cg_emit_map(cg, &m, root);
}

/* ---- a group as a GEMM's epilogue ---- */

int cg_elem_vector_ok(const ir_graph *g, const ir_node *n)
{
    for (int k = 0; k < n->ninputs; k++)
        if (n->inputs[k] >= 0 && g->values[n->inputs[k]].dtype != IR_F32)
            return 0;
    if (n->noutputs != 1 || g->values[n->outputs[0]].dtype != IR_F32)
        return 0;
    switch (n->op) { /* formulas of straight-line vector IR: no libm call, no bool or integer lanes */
    case IR_OP_ABS: case IR_OP_ADD: case IR_OP_CLIP: case IR_OP_DIV: case IR_OP_ERF: case IR_OP_EXP:
    case IR_OP_FAKE_QUANT: case IR_OP_GELU: case IR_OP_HARD_SIGMOID: case IR_OP_MAX: case IR_OP_MIN:
    case IR_OP_MUL: case IR_OP_NEG: case IR_OP_QUICK_GELU: case IR_OP_RECIPROCAL: case IR_OP_RELU:
    case IR_OP_ROUND: case IR_OP_SIGMOID: case IR_OP_SQRT: case IR_OP_SUB: case IR_OP_SWISH: case IR_OP_TANH:
    case IR_OP_QUANT_LOOKUP:
        return n->op != IR_OP_GELU || ir_gelu_act(n) != IR_ACT_NONE;
    case IR_OP_POW: { /* the exponents w_pow turns into arithmetic */
        double c;
        return const_float(g, n->inputs[1], &c) && (c == 1 || c == 2 || c == 3 || c == 0.5 || c == -1);
    }
    default: return 0;
    }
}

LLVMValueRef cg_elem_epilogue(cg_ctx *cg, int root, int leaf, int lanes, char *name, size_t nlen)
{
    const ir_graph *g = cg->g;
    group gr;
    memset(&gr, 0, sizeof gr);
    gr.cg = cg;
    gr.root = root;
    gr.lanes = lanes;
    gr.nleaves = 1;
    gr.leaf_value[0] = leaf;
    char sig[1024] = "";
    int members[MAX_MEMBERS], nmembers = 0;
    for (int i = 0; i <= root; i++) {
        if (!in_group(cg, root, i))
            continue;
        if (nmembers == MAX_MEMBERS) {
            cg_fail(cg, VITC_INTERNAL, root, "too many nodes for a GEMM's epilogue");
            return NULL;
        }
        members[nmembers++] = i;
        sign_node(cg, &gr, sig, sizeof sig, i, members, nmembers);
    }
    if (sig[0] == '!') /* a signature too long to hold: a function of its own */
        snprintf(name, nlen, "vitc.epi.v%d.u%d", lanes, cg->nfuncs++);
    else
        snprintf(name, nlen, "vitc.epi.v%d.%016llx", lanes, (unsigned long long)kern_bytes_hash(sig, strlen(sig)));
    LLVMValueRef fn = LLVMGetNamedFunction(cg->mod, name);
    if (fn)
        return fn;
    LLVMTypeRef vt = LLVMVectorType(cg->t_f32, (unsigned)lanes);
    fn = LLVMAddFunction(cg->mod, name, LLVMFunctionType(vt, &vt, 1, 0));
    LLVMSetLinkage(fn, LLVMInternalLinkage);
    static const char *const attrs[] = {"alwaysinline", "nounwind"};
    for (int i = 0; i < 2; i++)
        LLVMAddAttributeAtIndex(
            fn, LLVMAttributeFunctionIndex,
            LLVMCreateEnumAttribute(cg->llc, LLVMGetEnumAttributeKindForName(attrs[i], strlen(attrs[i])), 0));
    LLVMBuilderRef b = LLVMCreateBuilderInContext(cg->llc);
    LLVMPositionBuilderAtEnd(b, LLVMAppendBasicBlockInContext(cg->llc, fn, "entry"));
    gr.memo_value[0] = leaf;
    gr.memo[0] = LLVMGetParam(fn, 0);
    gr.nmemo = 1;
    LLVMBuildRet(b, gen(&gr, b, g->nodes[root].outputs[0]));
    LLVMDisposeBuilder(b);
    return fn;
}

int cg_emit_copy(cg_ctx *cg, int src, const cg_view *dst, int node)
{
    cg_map m;
    memset(&m, 0, sizeof m);
    m.op[0] = *dst;
    m.rank = dst->rank;
    memcpy(m.dims, dst->dims, sizeof m.dims);
    cg_view s = cg_view_of(cg, src);
    m.op[1] = cg_view_broadcast(&s, m.rank, m.dims);
    m.nops = 2;
    char label[160];
    snprintf(label, sizeof label, "Copy %s", cg->g->values[src].name);
    m.label = label;
    m.cost = 1;
    return cg_emit_map(cg, &m, node);
}
