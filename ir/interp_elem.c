/* interp_elem.c: the interpreter's elementwise kernels, with numpy-style
 * multidirectional broadcasting.  Float tensors are computed in double and
 * stored as their dtype; integer tensors are computed exactly in int64 (wrapping
 * to their width as numpy does; u64 compares and divides unsigned). */
#include "ir/interp_impl.h"

#include <math.h>
#include <string.h>

static int is_unsigned(ir_dtype t) { return t == IR_U8 || t == IR_U16 || t == IR_U32 || t == IR_U64; }

/* -1, 0, 1 as a <, ==, > b, for int64 or (uns) uint64 bit patterns. */
static int icmp(int64_t a, int64_t b, int uns)
{
    if (uns)
        return (uint64_t)a < (uint64_t)b ? -1 : (uint64_t)a > (uint64_t)b;
    return a < b ? -1 : a > b;
}

static int64_t iadd(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }
static int64_t isub(int64_t a, int64_t b) { return (int64_t)((uint64_t)a - (uint64_t)b); }
static int64_t imul(int64_t a, int64_t b) { return (int64_t)((uint64_t)a * (uint64_t)b); }

/* base^e in wrapping integer arithmetic; negative e truncates 1/base^|e|. */
static int64_t ipow(int64_t base, int64_t e)
{
    if (e < 0)
        return base == 1 ? 1 : base == -1 ? (e & 1 ? -1 : 1) : 0;
    int64_t r = 1;
    while (e) {
        if (e & 1)
            r = imul(r, base);
        base = imul(base, base);
        e >>= 1;
    }
    return r;
}

/* The environment of one element's formula: the node's attributes and, for
 * integer math, signedness and the first error. */
typedef struct {
    const ir_node *n;
    ir_act act;  /* GELU's form */
    int fmod;    /* Mod's fmod attribute */
    int uns;     /* integer operands are unsigned */
    int err;     /* integer division or modulo by zero */
} ew_env;

static double f_mod(double x, double y, const ew_env *e)
{
    double r = fmod(x, y);
    if (!e->fmod && r != 0 && (r < 0) != (y < 0))
        r += y;
    return r;
}

static double f_max(double a, double b) { return isnan(a) || isnan(b) ? NAN : fmax(a, b); }
static double f_min(double a, double b) { return isnan(a) || isnan(b) ? NAN : fmin(a, b); }

static int64_t i_div(int64_t x, int64_t y, ew_env *e)
{
    if (y == 0) {
        e->err = 1;
        return 0;
    }
    if (e->uns)
        return (int64_t)((uint64_t)x / (uint64_t)y);
    return y == -1 ? isub(0, x) : x / y; /* truncates, as C and ONNX Runtime do */
}

static int64_t i_mod(int64_t x, int64_t y, ew_env *e)
{
    if (y == 0) {
        e->err = 1;
        return 0;
    }
    if (e->uns)
        return (int64_t)((uint64_t)x % (uint64_t)y);
    int64_t r = y == -1 ? 0 : x % y;
    if (!e->fmod && r != 0 && (r < 0) != (y < 0))
        r += y;
    return r;
}

/* Words that have no integer meaning (their ops take floats only). */
static int64_t i_none(void) { return 0; }

/* ---- the formulas in double ---- */
#define X0 x[0]
#define X1 x[1]
#define X2 x[2]
#define K(c) (c)
#define ATTR(id, d) ((double)ir_attr_float(e->n, IR_ATTR_##id, (float)(d)))
#define ADD(a, b) ((a) + (b))
#define SUB(a, b) ((a) - (b))
#define MUL(a, b) ((a) * (b))
#define DIV(a, b) ((a) / (b))
#define MOD(a, b) f_mod(a, b, e)
#define POW(a, b) pow(a, b)
#define NEG(a) (-(a))
#define ABS(a) fabs(a)
#define EXP(a) exp(a)
#define LOG(a) log(a)
#define ERF(a) erf(a)
#define TANH(a) tanh(a)
#define COS(a) cos(a)
#define SIN(a) sin(a)
#define SQRT(a) sqrt(a)
#define ROUND(a) nearbyint(a)
#define F32(a) ((double)(float)(a))
#define GELU(a) ir_act_ref(a, e->act)
#define MAX(a, b) f_max(a, b)
#define MIN(a, b) f_min(a, b)
#define LT(a, b) (double)((a) < (b))
#define GT(a, b) (double)((a) > (b))
#define LE(a, b) (double)((a) <= (b))
#define GE(a, b) (double)((a) >= (b))
#define EQ(a, b) (double)((a) == (b))
#define AND(a, b) (double)((a) != 0 && (b) != 0)
#define OR(a, b) (double)((a) != 0 || (b) != 0)
#define NOT(a) (double)((a) == 0)
#define SELECT(c, a, b) ((c) != 0 ? (a) : (b))
#define EW(id, in, res, same, F) \
    static double f_##id(const double *x, ew_env *e) { (void)x; (void)e; return F; }
#include "ir/elemwise.def"
#undef EW
#include "ir/elemwise_end.h"

/* ---- the same formulas in int64, wrapping like numpy ---- */
#define X0 x[0]
#define X1 x[1]
#define X2 x[2]
#define K(c) ((int64_t)(c))
#define ATTR(id, d) i_none()
#define ADD(a, b) iadd(a, b)
#define SUB(a, b) isub(a, b)
#define MUL(a, b) imul(a, b)
#define DIV(a, b) i_div(a, b, e)
#define MOD(a, b) i_mod(a, b, e)
#define POW(a, b) ipow(a, b)
#define NEG(a) isub(0, a)
#define ABS(a) (!e->uns && (a) < 0 ? isub(0, a) : (a))
#define EXP(a) i_none()
#define LOG(a) i_none()
#define ERF(a) i_none()
#define TANH(a) i_none()
#define COS(a) i_none()
#define SIN(a) i_none()
#define SQRT(a) i_none()
#define ROUND(a) i_none()
#define F32(a) i_none()
#define GELU(a) i_none()
#define MAX(a, b) (icmp(a, b, e->uns) >= 0 ? (a) : (b))
#define MIN(a, b) (icmp(a, b, e->uns) <= 0 ? (a) : (b))
#define LT(a, b) (int64_t)(icmp(a, b, e->uns) < 0)
#define GT(a, b) (int64_t)(icmp(a, b, e->uns) > 0)
#define LE(a, b) (int64_t)(icmp(a, b, e->uns) <= 0)
#define GE(a, b) (int64_t)(icmp(a, b, e->uns) >= 0)
#define EQ(a, b) (int64_t)((a) == (b))
#define AND(a, b) (int64_t)((a) && (b))
#define OR(a, b) (int64_t)((a) || (b))
#define NOT(a) (int64_t)!(a)
#define SELECT(c, a, b) ((c) ? (a) : (b))
#define EW(id, in, res, same, F) \
    static int64_t i_##id(const int64_t *x, ew_env *e) { (void)x; (void)e; return F; }
#include "ir/elemwise.def"
#undef EW
#include "ir/elemwise_end.h"

typedef double (*ew_float_fn)(const double *x, ew_env *e);
typedef int64_t (*ew_int_fn)(const int64_t *x, ew_env *e);
static const struct {
    ew_float_fn f;
    ew_int_fn i;
} formulas[IR_OP_COUNT] = {
#define EW(id, in, res, same, F) [IR_OP_##id] = {f_##id, i_##id},
#include "ir/elemwise.def"
#undef EW
};

/* The element types an op of elemwise.def takes, as a message; NULL if t is fine. */
static const char *refuses(const ir_ew_info *ew, ir_dtype t)
{
    int fl = ir_dtype_is_float(t), b = t == IR_BOOL;
    switch ((ir_ew_inputs)ew->inputs) {
    case IR_EW_FLOAT: return fl ? NULL : "float";
    case IR_EW_NUM: return b ? "number" : NULL;
    case IR_EW_BOOL: return b ? NULL : "bool";
    case IR_EW_ALL: return NULL;
    }
    return NULL;
}

/* Every op with a row in elemwise.def: its formula per element of the
 * broadcast inputs, in double when any input is float (exact for every float
 * type), else in int64.  A variadic op folds its binary formula over its inputs. */
int ik_elem(ik_ctx *c)
{
    ir_op op = c->n->op;
    const ir_ew_info *ew = ir_ew(op);
    int nin = c->nin, variadic = ir_op_table[op].max_in == VAR;
    if (!ew || nin > IK_MAX_OPERANDS || (!variadic && nin > 3))
        return ik_fail(c, VITC_INTERNAL, "no formula for %d inputs", nin);
    for (int k = 0; k < nin; k++)
        if (!c->in[k])
            return ik_fail(c, VITC_BAD_INPUT, "input %d is omitted", k);
    const ir_tensor *a = c->in[0];
    if (ew->same && ik_same_dtype(c, nin, c->in))
        return c->d->status;
    const char *want = refuses(ew, a->dtype);
    for (int k = 1; !want && !ew->same && k < nin; k++)
        if (c->in[k]->dtype == IR_BOOL)
            want = "number";
    if (want)
        return ik_fail(c, VITC_BAD_INPUT, "%s does not take %s tensors (it takes %s)", ir_op_name(op),
                       ir_dtype_name(a->dtype), want);
    ir_dtype odt = ew->result == IR_EW_PRED ? IR_BOOL : ew->result == IR_EW_LIKE1 ? c->in[1]->dtype : a->dtype;
    int rank, fl = 0;
    int64_t dims[IR_MAX_RANK], s[IK_MAX_OPERANDS][IR_MAX_RANK];
    int st = ik_broadcast_tensors(c, nin, c->in, &rank, dims);
    if (!st)
        st = ik_alloc(c, &c->out[0], odt, rank, dims);
    if (st)
        return st;
    ik_iter it;
    ik_iter_init(&it, rank, dims);
    for (int k = 0; k < nin; k++) {
        fl |= ir_dtype_is_float(c->in[k]->dtype);
        ik_bcast_strides(c->in[k]->rank, c->in[k]->dims, rank, dims, s[k]);
        ik_iter_add(&it, s[k], 0);
    }
    ew_env e = {.n = c->n, .act = ir_gelu_act(c->n), .fmod = ir_attr_int(c->n, IR_ATTR_FMOD, 0) != 0,
                .uns = is_unsigned(a->dtype)};
    ir_tensor *z = &c->out[0];
    int64_t n = ir_tensor_numel(z);
    for (int64_t i = 0; i < n; i++, ik_iter_next(&it)) {
        if (fl) {
            double x[IK_MAX_OPERANDS];
            for (int k = 0; k < nin; k++)
                x[k] = ir_tensor_get(c->in[k], it.off[k]);
            double r = variadic ? x[0] : formulas[op].f(x, &e);
            for (int k = 1; variadic && k < nin; k++)
                r = formulas[op].f((double[2]){r, x[k]}, &e);
            ir_tensor_set(z, i, r);
            continue;
        }
        int64_t x[IK_MAX_OPERANDS];
        for (int k = 0; k < nin; k++)
            x[k] = ir_tensor_get_i64(c->in[k], it.off[k]);
        int64_t r = variadic ? x[0] : formulas[op].i(x, &e);
        for (int k = 1; variadic && k < nin; k++)
            r = formulas[op].i((int64_t[2]){r, x[k]}, &e);
        if (e.err)
            return ik_fail(c, VITC_BAD_INPUT, "integer %s by zero (element %lld)",
                           op == IR_OP_MOD ? "modulo" : "division", (long long)i);
        ir_tensor_set_i64(z, i, r);
    }
    return VITC_OK;
}

/* z = cond ? x : y, element by element (raw copies: exact in every dtype). */
int ik_where(ik_ctx *c)
{
    const ir_tensor *cond = c->in[0], *x = c->in[1], *y = c->in[2];
    if (cond->dtype != IR_BOOL)
        return ik_fail(c, VITC_BAD_INPUT, "the condition must be bool, not %s", ir_dtype_name(cond->dtype));
    if (ik_same_dtype(c, 2, c->in + 1))
        return c->d->status;
    int rank;
    int64_t dims[IR_MAX_RANK], s[3][IR_MAX_RANK];
    int st = ik_broadcast_tensors(c, 3, c->in, &rank, dims);
    if (!st)
        st = ik_alloc(c, &c->out[0], x->dtype, rank, dims);
    if (st)
        return st;
    ik_iter it;
    ik_iter_init(&it, rank, dims);
    for (int k = 0; k < 3; k++) {
        ik_bcast_strides(c->in[k]->rank, c->in[k]->dims, rank, dims, s[k]);
        ik_iter_add(&it, s[k], 0);
    }
    size_t es = ir_dtype_size(x->dtype);
    char *out = c->out[0].data;
    int64_t n = ir_tensor_numel(&c->out[0]);
    for (int64_t i = 0; i < n; i++, ik_iter_next(&it)) {
        int take_x = ((const unsigned char *)cond->data)[it.off[0]] != 0;
        const char *src = take_x ? (const char *)x->data + (size_t)it.off[1] * es
                                 : (const char *)y->data + (size_t)it.off[2] * es;
        memcpy(out + (size_t)i * es, src, es);
    }
    return VITC_OK;
}

/* Clip(x, min?, max?): min and max are scalars (or one-element tensors). */
int ik_clip(ik_ctx *c)
{
    const ir_tensor *x = c->in[0], *lo = ik_in(c, 1), *hi = ik_in(c, 2);
    const ir_tensor *all[3] = {x, lo, hi};
    if (ik_same_dtype(c, 3, all))
        return c->d->status;
    if (x->dtype == IR_BOOL)
        return ik_fail(c, VITC_BAD_INPUT, "Clip does not take bool tensors");
    for (int k = 1; k < 3; k++)
        if (all[k] && ir_tensor_numel(all[k]) != 1)
            return ik_fail(c, VITC_BAD_INPUT, "%s must be a scalar, not %lld elements", k == 1 ? "min" : "max",
                           (long long)ir_tensor_numel(all[k]));
    int st = ik_alloc(c, &c->out[0], x->dtype, x->rank, x->dims);
    if (st)
        return st;
    int64_t n = ir_tensor_numel(x);
    if (ir_dtype_is_float(x->dtype)) {
        double a = lo ? ir_tensor_get(lo, 0) : -INFINITY, b = hi ? ir_tensor_get(hi, 0) : INFINITY;
        for (int64_t i = 0; i < n; i++) {
            double v = ir_tensor_get(x, i);
            v = v < a ? a : v;
            ir_tensor_set(&c->out[0], i, v > b ? b : v);
        }
    } else {
        int uns = is_unsigned(x->dtype);
        for (int64_t i = 0; i < n; i++) {
            int64_t v = ir_tensor_get_i64(x, i);
            if (lo && icmp(v, ir_tensor_get_i64(lo, 0), uns) < 0)
                v = ir_tensor_get_i64(lo, 0);
            if (hi && icmp(v, ir_tensor_get_i64(hi, 0), uns) > 0)
                v = ir_tensor_get_i64(hi, 0);
            ir_tensor_set_i64(&c->out[0], i, v);
        }
    }
    return VITC_OK;
}

/* Cast (to = ONNX dtype code) and CastLike (the type of input 1).  Integer to
 * integer is exact; float to integer truncates toward zero. */
int ik_cast(ik_ctx *c)
{
    const ir_tensor *x = c->in[0];
    int dt;
    if (c->n->op == IR_OP_CAST_LIKE) {
        dt = c->in[1]->dtype;
    } else {
        int64_t to = ir_attr_int(c->n, IR_ATTR_TO, -1);
        dt = to >= 0 && to < 1000 ? ir_dtype_from_onnx((int)to) : -1;
        if (dt < 0)
            return ik_fail(c, VITC_BAD_INPUT, "cannot cast to ONNX type %lld", (long long)to);
    }
    int st = ik_alloc(c, &c->out[0], (ir_dtype)dt, x->rank, x->dims);
    if (st)
        return st;
    int64_t n = ir_tensor_numel(x);
    int exact = !ir_dtype_is_float(x->dtype) && !ir_dtype_is_float((ir_dtype)dt);
    for (int64_t i = 0; i < n; i++) {
        if (exact)
            ir_tensor_set_i64(&c->out[0], i, ir_tensor_get_i64(x, i));
        else
            ir_tensor_set(&c->out[0], i, ir_tensor_get(x, i));
    }
    return VITC_OK;
}
