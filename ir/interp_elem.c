/* interp_elem.c: the interpreter's elementwise kernels, with numpy-style
 * multidirectional broadcasting.  Float tensors are computed in double and
 * stored as their dtype; integer tensors are computed exactly in int64 (wrapping
 * to their width as numpy does; u64 compares and divides unsigned). */
#include "ir/interp_impl.h"

#include <math.h>
#include <string.h>

static int is_u64(ir_dtype t) { return t == IR_U64; }
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

static double gelu(double x, int tanh_approx)
{
    if (tanh_approx)
        return 0.5 * x * (1 + tanh(sqrt(2 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
    return 0.5 * x * (1 + erf(x / sqrt(2)));
}

/* y = f(x) for Abs, Erf, Exp, Gelu, Log, Neg, Not, Reciprocal, Relu, Sigmoid, Sqrt, Tanh. */
int ik_unary(ik_ctx *c)
{
    const ir_tensor *x = c->in[0];
    ir_op op = c->n->op;
    int fl = ir_dtype_is_float(x->dtype);
    if (op == IR_OP_NOT ? x->dtype != IR_BOOL
                        : !fl && (x->dtype == IR_BOOL || (op != IR_OP_ABS && op != IR_OP_NEG && op != IR_OP_RELU)))
        return ik_fail(c, VITC_BAD_INPUT, "%s does not take %s tensors", ir_op_name(op), ir_dtype_name(x->dtype));
    const ir_attr *ap = ir_attr_get(c->n, IR_ATTR_APPROXIMATE);
    int tanh_approx = ap && ap->kind == IR_AT_STRING && strcmp(ap->s, "tanh") == 0;
    int st = ik_alloc(c, &c->out[0], x->dtype, x->rank, x->dims);
    if (st)
        return st;
    int64_t n = ir_tensor_numel(x);
    for (int64_t i = 0; i < n; i++) {
        if (fl) {
            double v = ir_tensor_get(x, i), r = v;
            switch (op) {
            case IR_OP_ABS: r = fabs(v); break;
            case IR_OP_ERF: r = erf(v); break;
            case IR_OP_EXP: r = exp(v); break;
            case IR_OP_GELU: r = gelu(v, tanh_approx); break;
            case IR_OP_LOG: r = log(v); break;
            case IR_OP_NEG: r = -v; break;
            case IR_OP_RECIPROCAL: r = 1 / v; break;
            case IR_OP_RELU: r = v < 0 ? 0 : v; break;
            case IR_OP_SIGMOID: r = 1 / (1 + exp(-v)); break;
            case IR_OP_SQRT: r = sqrt(v); break;
            case IR_OP_TANH: r = tanh(v); break;
            default: return ik_fail(c, VITC_INTERNAL, "not a unary op");
            }
            ir_tensor_set(&c->out[0], i, r);
        } else {
            int64_t v = ir_tensor_get_i64(x, i), r = v;
            int uns = is_unsigned(x->dtype);
            switch (op) {
            case IR_OP_ABS: r = !uns && v < 0 ? isub(0, v) : v; break;
            case IR_OP_NEG: r = isub(0, v); break;
            case IR_OP_RELU: r = !uns && v < 0 ? 0 : v; break;
            case IR_OP_NOT: r = !v; break;
            default: return ik_fail(c, VITC_INTERNAL, "not an integer unary op");
            }
            ir_tensor_set_i64(&c->out[0], i, r);
        }
    }
    return VITC_OK;
}

static int is_compare(ir_op op) { return op == IR_OP_EQUAL || op == IR_OP_GREATER || op == IR_OP_LESS; }

/* z = a op b for Add, Sub, Mul, Div, Mod, Pow, And, Or, Equal, Greater, Less.
 * Mod: fmod=1 keeps the dividend's sign (C fmod / %), fmod=0 the divisor's
 * (Python, numpy.mod). */
int ik_binary(ik_ctx *c)
{
    const ir_tensor *a = c->in[0], *b = c->in[1];
    ir_op op = c->n->op;
    if (op != IR_OP_POW && ik_same_dtype(c, 2, c->in))
        return c->d->status;
    int logic = op == IR_OP_AND || op == IR_OP_OR;
    if (logic != (a->dtype == IR_BOOL) && !(op == IR_OP_EQUAL && a->dtype == IR_BOOL))
        return ik_fail(c, VITC_BAD_INPUT, "%s does not take %s tensors", ir_op_name(op), ir_dtype_name(a->dtype));
    if (op == IR_OP_POW && b->dtype == IR_BOOL)
        return ik_fail(c, VITC_BAD_INPUT, "Pow does not take a bool exponent");
    ir_dtype odt = logic || is_compare(op) ? IR_BOOL : a->dtype;
    int rank;
    int64_t dims[IR_MAX_RANK], sa[IR_MAX_RANK], sb[IR_MAX_RANK];
    int st = ik_broadcast_tensors(c, 2, c->in, &rank, dims);
    if (!st)
        st = ik_alloc(c, &c->out[0], odt, rank, dims);
    if (st)
        return st;
    ir_tensor *z = &c->out[0];
    ik_bcast_strides(a->rank, a->dims, rank, dims, sa);
    ik_bcast_strides(b->rank, b->dims, rank, dims, sb);
    ik_iter it;
    ik_iter_init(&it, rank, dims);
    ik_iter_add(&it, sa, 0);
    ik_iter_add(&it, sb, 0);
    int fl = ir_dtype_is_float(a->dtype), uns = is_u64(a->dtype);
    int fmod_sign = ir_attr_int(c->n, IR_ATTR_FMOD, 0) != 0;
    int64_t n = ir_tensor_numel(z);
    for (int64_t i = 0; i < n; i++, ik_iter_next(&it)) {
        int64_t ia = it.off[0], ib = it.off[1];
        if (fl) {
            double x = ir_tensor_get(a, ia), y = ir_tensor_get(b, ib), r;
            switch (op) {
            case IR_OP_ADD: r = x + y; break;
            case IR_OP_SUB: r = x - y; break;
            case IR_OP_MUL: r = x * y; break;
            case IR_OP_DIV: r = x / y; break;
            case IR_OP_MOD:
                r = fmod(x, y);
                if (!fmod_sign && r != 0 && (r < 0) != (y < 0))
                    r += y;
                break;
            case IR_OP_POW: r = pow(x, y); break;
            case IR_OP_EQUAL: r = x == y; break;
            case IR_OP_GREATER: r = x > y; break;
            case IR_OP_LESS: r = x < y; break;
            default: return ik_fail(c, VITC_INTERNAL, "not a float binary op");
            }
            ir_tensor_set(z, i, r);
            continue;
        }
        int64_t x = ir_tensor_get_i64(a, ia), y, r;
        if (op == IR_OP_POW && ir_dtype_is_float(b->dtype)) {
            ir_tensor_set(z, i, pow((double)x, ir_tensor_get(b, ib)));
            continue;
        }
        y = ir_tensor_get_i64(b, ib);
        switch (op) {
        case IR_OP_ADD: r = iadd(x, y); break;
        case IR_OP_SUB: r = isub(x, y); break;
        case IR_OP_MUL: r = imul(x, y); break;
        case IR_OP_DIV:
            if (y == 0)
                return ik_fail(c, VITC_BAD_INPUT, "integer division by zero (element %lld)", (long long)i);
            if (uns)
                r = (int64_t)((uint64_t)x / (uint64_t)y);
            else
                r = y == -1 ? isub(0, x) : x / y; /* truncates, as C and ONNX Runtime do */
            break;
        case IR_OP_MOD:
            if (y == 0)
                return ik_fail(c, VITC_BAD_INPUT, "integer modulo by zero (element %lld)", (long long)i);
            if (uns)
                r = (int64_t)((uint64_t)x % (uint64_t)y);
            else
                r = y == -1 ? 0 : x % y;
            if (!uns && !fmod_sign && r != 0 && (r < 0) != (y < 0))
                r += y;
            break;
        case IR_OP_POW: r = ipow(x, y); break;
        case IR_OP_AND: r = x && y; break;
        case IR_OP_OR: r = x || y; break;
        case IR_OP_EQUAL: r = x == y; break;
        case IR_OP_GREATER: r = icmp(x, y, uns) > 0; break;
        case IR_OP_LESS: r = icmp(x, y, uns) < 0; break;
        default: return ik_fail(c, VITC_INTERNAL, "not an integer binary op");
        }
        ir_tensor_set_i64(z, i, r);
    }
    return VITC_OK;
}

/* Max / Min over one or more inputs; NaN wins, as in numpy. */
int ik_minmax(ik_ctx *c)
{
    int is_max = c->n->op == IR_OP_MAX;
    for (int k = 0; k < c->nin; k++)
        if (!c->in[k])
            return ik_fail(c, VITC_BAD_INPUT, "input %d is omitted", k);
    if (ik_same_dtype(c, c->nin, c->in))
        return c->d->status;
    ir_dtype dt = c->in[0]->dtype;
    if (dt == IR_BOOL)
        return ik_fail(c, VITC_BAD_INPUT, "%s does not take bool tensors", ir_op_name(c->n->op));
    int rank = c->in[0]->rank, st = VITC_OK;
    int64_t dims[IR_MAX_RANK];
    memcpy(dims, c->in[0]->dims, sizeof dims);
    for (int k = 1; k < c->nin && !st; k++) {
        int ranks[2] = {rank, c->in[k]->rank};
        int64_t d2[2][IR_MAX_RANK];
        memcpy(d2[0], dims, sizeof dims);
        memcpy(d2[1], c->in[k]->dims, sizeof dims);
        st = ik_broadcast(c, 2, ranks, (const int64_t(*)[IR_MAX_RANK])d2, &rank, dims);
    }
    if (!st)
        st = ik_alloc(c, &c->out[0], dt, rank, dims);
    if (st)
        return st;
    ir_tensor *z = &c->out[0];
    int fl = ir_dtype_is_float(dt), uns = is_u64(dt);
    int64_t n = ir_tensor_numel(z);
    for (int k = 0; k < c->nin; k++) {
        const ir_tensor *x = c->in[k];
        int64_t sx[IR_MAX_RANK];
        ik_bcast_strides(x->rank, x->dims, rank, dims, sx);
        ik_iter it;
        ik_iter_init(&it, rank, dims);
        ik_iter_add(&it, sx, 0);
        for (int64_t i = 0; i < n; i++, ik_iter_next(&it)) {
            if (fl) {
                double v = ir_tensor_get(x, it.off[0]), r = v;
                if (k > 0) {
                    double acc = ir_tensor_get(z, i);
                    r = isnan(acc) || isnan(v) ? NAN : is_max ? fmax(acc, v) : fmin(acc, v);
                }
                ir_tensor_set(z, i, r);
            } else {
                int64_t v = ir_tensor_get_i64(x, it.off[0]), r = v;
                if (k > 0) {
                    int64_t acc = ir_tensor_get_i64(z, i);
                    int cmp = icmp(acc, v, uns);
                    r = (is_max ? cmp >= 0 : cmp <= 0) ? acc : v;
                }
                ir_tensor_set_i64(z, i, r);
            }
        }
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
        int uns = is_u64(x->dtype);
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
