/* shape.c: shape and type inference with a symbolic batch.
 *
 * Every node output gets an element type and dimensions of the form k * B^e.
 * Small integer tensors whose values are known at compile time (constants, and
 * everything computed from Shape: the Shape -> Gather -> Unsqueeze -> Concat ->
 * Reshape chains of torch exports) carry those values in symval, so a Reshape
 * whose target is computed at run time still gets a static shape in terms of
 * the batch.  A shape that would depend on data is an error naming the node. */
#include "ir/einsum.h"
#include "ir/opview.h"
#include "ir/interp.h"
#include "ir/ir.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SYMVAL_MAX 64 /* longest integer tensor whose values are tracked */

typedef struct {
    ir_graph *g;
    vitc_diag *d;
    const ir_node *n;
} ctx;

#define FAIL(c, ...) return vitc_error((c)->d, VITC_BAD_INPUT, (c)->n, __VA_ARGS__)

static char *dimstr(ir_dim d, char *buf) { return ir_dim_str(d, buf, 48); }

/* ---- symbolic integer arithmetic; each returns 0 when not representable ---- */
static int sym_mul(ir_dim a, ir_dim b, ir_dim *r)
{
    if (ir_mul_ovf(a.k, b.k, &r->k))
        return 0;
    r->e = r->k == 0 ? 0 : a.e + b.e;
    return r->e <= 4;
}

static int sym_div(ir_dim a, ir_dim b, ir_dim *r)
{
    /* INT64_MIN / -1 does not fit (and % traps on it as well) */
    if (b.k == 0 || a.e < b.e || (b.k == -1 && a.k == INT64_MIN) || a.k % b.k != 0)
        return 0;
    r->k = a.k / b.k;
    r->e = r->k == 0 ? 0 : a.e - b.e;
    return 1;
}

static int sym_add(ir_dim a, ir_dim b, int sign, ir_dim *r)
{
    if (a.k != 0 && b.k != 0 && a.e != b.e)
        return 0;
    int64_t k;
    /* x - y computed as such: -y does not fit when y is INT64_MIN */
    if (sign < 0 ? __builtin_sub_overflow(a.k, b.k, &k) : __builtin_add_overflow(a.k, b.k, &k))
        return 0;
    r->k = k;
    r->e = r->k == 0 ? 0 : (a.k ? a.e : b.e);
    return 1;
}

static int is_static(ir_dim d) { return d.e == 0 || d.k == 0; }
static int is_one(ir_dim d) { return d.k == 1 && d.e == 0; }

/* Known values of an integer value (from its constant data or symval). */
static const ir_dim *known(ctx *c, int id, int *count)
{
    if (id < 0)
        return NULL;
    ir_value *v = &c->g->values[id];
    if (v->symval) {
        *count = v->nsymval;
        return v->symval;
    }
    if (v->kind != IR_VAL_CONST || (v->dtype != IR_I64 && v->dtype != IR_I32))
        return NULL;
    size_t es = ir_dtype_size(v->dtype), n = v->nbytes / es;
    if (n > SYMVAL_MAX)
        return NULL;
    ir_dim *s = ir_alloc_array(c->g->arena, n + 1, sizeof(ir_dim));
    if (!s)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        int64_t x = v->dtype == IR_I64 ? ((int64_t *)v->data)[i] : ((int32_t *)v->data)[i];
        s[i] = ir_dim_const(x);
    }
    v->symval = s;
    v->nsymval = (int)n;
    *count = (int)n;
    return s;
}

/* Known values that must also be static numbers; -1 when unknown or symbolic. */
static int known_ints(ctx *c, int id, int64_t *out, int max)
{
    int n;
    const ir_dim *s = known(c, id, &n);
    if (!s || n > max)
        return -1;
    for (int i = 0; i < n; i++) {
        if (!is_static(s[i]))
            return -1;
        out[i] = s[i].k;
    }
    return n;
}

static ir_value *in(ctx *c, int i) { return &c->g->values[c->n->inputs[i]]; }

static ir_value *out_set(ctx *c, int i, ir_dtype dt, int rank, const ir_dim *dims)
{
    if (i >= c->n->noutputs || c->n->outputs[i] < 0)
        return NULL;
    ir_value *v = &c->g->values[c->n->outputs[i]];
    v->dtype = dt;
    v->rank = rank;
    memcpy(v->dims, dims, (size_t)rank * sizeof(ir_dim));
    v->symval = NULL;
    v->nsymval = 0;
    v->kval = NULL;
    v->nkval = 0;
    return v;
}

static void set_symval(ctx *c, ir_value *v, const ir_dim *vals, int n)
{
    if (!v || n > SYMVAL_MAX)
        return;
    v->symval = ir_alloc_array(c->g->arena, (size_t)n + 1, sizeof(ir_dim));
    if (v->symval) {
        memcpy(v->symval, vals, (size_t)n * sizeof(ir_dim));
        v->nsymval = n;
    }
}

/* Normalises axis a for rank r; -1 if out of range. */
static int norm_axis(int64_t a, int r)
{
    if (a < -r || a >= (r ? r : 1))
        return -1;
    return (int)(a < 0 ? a + r : a);
}

static int64_t numel_static(const ir_value *v)
{
    int64_t n = 1;
    for (int i = 0; i < v->rank; i++)
        if (!is_static(v->dims[i]) || ir_mul_ovf(n, v->dims[i].k, &n))
            return -1;
    return n;
}

/* Multidirectional (numpy) broadcast of a and b into r (r may alias a or b). */
static int broadcast(ctx *c, const ir_dim *a, int ra, const ir_dim *b, int rb, ir_dim *out, int *rr)
{
    int n = ra > rb ? ra : rb;
    ir_dim r[IR_MAX_RANK];
    for (int i = 0; i < n; i++) {
        ir_dim x = i < n - ra ? ir_dim_const(1) : a[i - (n - ra)];
        ir_dim y = i < n - rb ? ir_dim_const(1) : b[i - (n - rb)];
        if (ir_dim_eq(x, y) || is_one(y))
            r[i] = x;
        else if (is_one(x))
            r[i] = y;
        else {
            char s1[48], s2[48];
            FAIL(c, "shapes cannot be broadcast together: dimension %d is %s in one input and %s in another", i,
                 dimstr(x, s1), dimstr(y, s2));
        }
    }
    memcpy(out, r, (size_t)n * sizeof(ir_dim));
    *rr = n;
    return VITC_OK;
}

/* ---- values of element-wise ops on known integers (shape arithmetic) ----
 * Each computes r from the operands' values x, y, z; 0 when it cannot. */
typedef int (*sym_fold_fn)(const ir_node *n, ir_dim x, ir_dim y, ir_dim z, ir_dim *r);

static int fold_add(const ir_node *n, ir_dim x, ir_dim y, ir_dim z, ir_dim *r)
{
    (void)n, (void)z;
    return sym_add(x, y, 1, r);
}

static int fold_sub(const ir_node *n, ir_dim x, ir_dim y, ir_dim z, ir_dim *r)
{
    (void)n, (void)z;
    return sym_add(x, y, -1, r);
}

static int fold_mul(const ir_node *n, ir_dim x, ir_dim y, ir_dim z, ir_dim *r)
{
    (void)n, (void)z;
    return sym_mul(x, y, r);
}

static int fold_div(const ir_node *n, ir_dim x, ir_dim y, ir_dim z, ir_dim *r)
{
    (void)n, (void)z;
    return sym_div(x, y, r);
}

static int fold_cast(const ir_node *n, ir_dim x, ir_dim y, ir_dim z, ir_dim *r)
{
    (void)n, (void)y, (void)z;
    *r = x;
    return 1;
}

static int fold_equal(const ir_node *n, ir_dim x, ir_dim y, ir_dim z, ir_dim *r)
{
    (void)n, (void)z;
    if (is_static(x) && is_static(y))
        *r = ir_dim_const(x.k == y.k);
    else if (ir_dim_eq(x, y))
        *r = ir_dim_const(1);
    else if ((!is_static(x) && x.k > 0 && is_static(y) && y.k <= 0) ||
             (!is_static(y) && y.k > 0 && is_static(x) && x.k <= 0))
        *r = ir_dim_const(0); /* k*B^e with k > 0 is positive */
    else
        return 0;
    return 1;
}

static int fold_where(const ir_node *n, ir_dim x, ir_dim y, ir_dim z, ir_dim *r)
{
    (void)n;
    if (!is_static(x))
        return 0;
    *r = x.k ? y : z;
    return 1;
}

/* The ops whose values are followed with the batch in them; the others
 * leave symval unknown, and evaluate_known computes them when their inputs
 * are numbers (an inexact Div, Mod, comparisons, float arithmetic). */
static const sym_fold_fn sym_folds[IR_OP_COUNT] = {
    [IR_OP_ADD] = fold_add,       [IR_OP_SUB] = fold_sub,   [IR_OP_MUL] = fold_mul,
    [IR_OP_DIV] = fold_div,       [IR_OP_CAST] = fold_cast,
    [IR_OP_CAST_LIKE] = fold_cast, [IR_OP_EQUAL] = fold_equal, [IR_OP_WHERE] = fold_where,
};

/* Element-wise ops: broadcast all inputs; values folded for integer math. */
static int infer_elementwise(ctx *c)
{
    const ir_node *n = c->n;
    ir_dim dims[IR_MAX_RANK];
    int rank = 0, first = -1;
    /* CastLike takes only the type of its second input, not its shape; Clip's
     * bounds are scalars that do not shape the output. */
    int shaped = n->op == IR_OP_CAST_LIKE || n->op == IR_OP_CLIP ? 1 : n->ninputs;
    for (int i = 1; n->op == IR_OP_CLIP && i < n->ninputs; i++)
        if (n->inputs[i] >= 0 && numel_static(in(c, i)) != 1)
            FAIL(c, "Clip's %s must be a single value", i == 1 ? "min" : "max");
    for (int i = 0; i < shaped; i++) {
        if (n->inputs[i] < 0)
            continue;
        ir_value *v = in(c, i);
        if (first < 0) {
            first = i;
            rank = v->rank;
            memcpy(dims, v->dims, (size_t)rank * sizeof(ir_dim));
        } else if (broadcast(c, dims, rank, v->dims, v->rank, dims, &rank)) {
            return VITC_BAD_INPUT;
        }
    }
    const ir_ew_info *ew = ir_ew(n->op);
    ir_dtype dt = in(c, 0)->dtype;
    if (ew && ew->result == IR_EW_PRED)
        dt = IR_BOOL;
    else if ((ew && ew->result == IR_EW_LIKE1) || n->op == IR_OP_CAST_LIKE)
        dt = in(c, 1)->dtype;
    if (n->op == IR_OP_CAST) {
        int t = ir_dtype_from_onnx((int)ir_attr_int(n, IR_ATTR_TO, -1));
        if (t < 0)
            FAIL(c, "Cast to an unsupported type (to=%lld)", (long long)ir_attr_int(n, IR_ATTR_TO, -1));
        dt = (ir_dtype)t;
    }
    /* Same-type rule for arithmetic and comparisons. */
    int same = ew && ew->same;
    for (int i = 1; same && i < n->ninputs; i++)
        if (n->inputs[i] >= 0 && in(c, i)->dtype != in(c, 0)->dtype)
            FAIL(c, "input %d is %s but input 0 is %s", i, ir_dtype_name(in(c, i)->dtype),
                 ir_dtype_name(in(c, 0)->dtype));
    if (n->op == IR_OP_WHERE && in(c, 1)->dtype != in(c, 2)->dtype)
        FAIL(c, "Where branches differ in type (%s vs %s)", ir_dtype_name(in(c, 1)->dtype),
             ir_dtype_name(in(c, 2)->dtype));
    ir_value *o = out_set(c, 0, dt, rank, dims);

    /* Values: integer arithmetic on known small tensors (shape arithmetic). */
    int64_t cnt = o ? numel_static(o) : -1; /* o is NULL when the output is omitted */
    if (cnt < 0 || cnt > SYMVAL_MAX || dt == IR_F32 || dt == IR_F64 || dt == IR_F16 || dt == IR_BF16)
        return VITC_OK;
    int na = 0, nb = 0, nc = 0;
    const ir_dim *a = known(c, n->inputs[0], &na);
    const ir_dim *b = n->ninputs > 1 ? known(c, n->inputs[1], &nb) : NULL;
    const ir_dim *cc = n->ninputs > 2 ? known(c, n->inputs[2], &nc) : NULL;
    if (!a || (n->ninputs > 1 && !b) || (n->ninputs > 2 && !cc) || in(c, 0)->rank > 1 ||
        (n->ninputs > 1 && in(c, 1)->rank > 1))
        return VITC_OK;
    if ((na != 1 && na != cnt) || (b && nb != 1 && nb != cnt) || (cc && nc != 1 && nc != cnt))
        return VITC_OK; /* e.g. Where's third input broadcasting from rank 2: not tracked */
    sym_fold_fn fold = sym_folds[n->op];
    if (!fold)
        return VITC_OK;
    ir_dim r[SYMVAL_MAX];
    for (int i = 0; i < cnt; i++) {
        ir_dim x = a[na == 1 ? 0 : i], y = b ? b[nb == 1 ? 0 : i] : x, z = cc ? cc[nc == 1 ? 0 : i] : x;
        if (!fold(n, x, y, z, &r[i]))
            return VITC_OK;
    }
    set_symval(c, o, r, (int)cnt);
    return VITC_OK;
}

/* numpy matmul of a by b: the output dimensions into r (*rr of them). */
static int matmul_dims(ctx *c, const ir_value *a, const ir_value *b, ir_dim *r, int *rr)
{
    if (a->rank < 1 || b->rank < 1)
        FAIL(c, "%s operands must have rank >= 1", ir_op_name(c->n->op));
    ir_dim ad[IR_MAX_RANK + 1], bd[IR_MAX_RANK + 1];
    int ra = a->rank, rb = b->rank;
    memcpy(ad, a->dims, (size_t)ra * sizeof(ir_dim));
    memcpy(bd, b->dims, (size_t)rb * sizeof(ir_dim));
    if (ra == 1) { ad[1] = ad[0]; ad[0] = ir_dim_const(1); ra = 2; }
    if (rb == 1) { bd[1] = ir_dim_const(1); rb = 2; }
    char s1[48], s2[48];
    if (!ir_dim_eq(ad[ra - 1], bd[rb - 2]))
        FAIL(c, "%s inner dimensions differ: %s vs %s", ir_op_name(c->n->op), dimstr(ad[ra - 1], s1),
             dimstr(bd[rb - 2], s2));
    if (broadcast(c, ad, ra - 2, bd, rb - 2, r, rr))
        return VITC_BAD_INPUT;
    if (a->rank > 1)
        r[(*rr)++] = ad[ra - 2];
    if (b->rank > 1)
        r[(*rr)++] = bd[rb - 1];
    return VITC_OK;
}

static int infer_matmul(ctx *c)
{
    ir_value *a = in(c, 0), *b = in(c, 1);
    ir_dim r[IR_MAX_RANK];
    int rr;
    if (matmul_dims(c, a, b, r, &rr))
        return VITC_BAD_INPUT;
    if (a->dtype != b->dtype)
        FAIL(c, "MatMul operands differ in type (%s vs %s)", ir_dtype_name(a->dtype), ir_dtype_name(b->dtype));
    out_set(c, 0, a->dtype, rr, r);
    return VITC_OK;
}

static int infer_gemm(ctx *c)
{
    ir_value *a = in(c, 0), *b = in(c, 1);
    if (a->rank != 2 || b->rank != 2)
        FAIL(c, "Gemm operands must be 2-D, got ranks %d and %d", a->rank, b->rank);
    int ta = ir_attr_int(c->n, IR_ATTR_TRANS_A, 0) != 0, tb = ir_attr_int(c->n, IR_ATTR_TRANS_B, 0) != 0;
    ir_dim m = a->dims[ta], ka = a->dims[1 - ta], kb = b->dims[tb], nn = b->dims[1 - tb];
    char s1[48], s2[48];
    if (!ir_dim_eq(ka, kb))
        FAIL(c, "Gemm inner dimensions differ: %s vs %s", dimstr(ka, s1), dimstr(kb, s2));
    ir_dim r[2] = {m, nn};
    if (c->n->ninputs > 2 && c->n->inputs[2] >= 0) {
        ir_dim t[IR_MAX_RANK];
        int rt;
        if (broadcast(c, r, 2, in(c, 2)->dims, in(c, 2)->rank, t, &rt) || rt != 2 || !ir_dim_eq(t[0], m) ||
            !ir_dim_eq(t[1], nn))
            FAIL(c, "Gemm bias does not broadcast to the output");
    }
    out_set(c, 0, a->dtype, 2, r);
    return VITC_OK;
}

/* Shape: output [rank] (or [end-start]); values = the input's dims. */
static int infer_shape_op(ctx *c)
{
    ir_value *x = in(c, 0);
    int r = x->rank;
    int64_t s = ir_attr_int(c->n, IR_ATTR_START, 0), e = ir_attr_int(c->n, IR_ATTR_END, r);
    if (s < 0) s += r;
    if (e < 0) e += r;
    s = s < 0 ? 0 : s > r ? r : s;
    e = e < 0 ? 0 : e > r ? r : e;
    int64_t len = e > s ? e - s : 0;
    ir_dim d = ir_dim_const(len);
    ir_value *o = out_set(c, 0, IR_I64, 1, &d);
    set_symval(c, o, x->dims + s, (int)len);
    return VITC_OK;
}

static int infer_reshape(ctx *c)
{
    ir_value *x = in(c, 0);
    int n;
    const ir_dim *t = known(c, c->n->inputs[1], &n);
    if (!t)
        FAIL(c, "the target shape is computed from data, not from shapes; vitc needs it at compile time");
    if (n > IR_MAX_RANK)
        FAIL(c, "target rank %d exceeds %d", n, IR_MAX_RANK);
    int allowzero = ir_attr_int(c->n, IR_ATTR_ALLOWZERO, 0) != 0;
    ir_dim r[IR_MAX_RANK];
    int infer = -1;
    ir_dim known_prod = ir_dim_const(1), total = ir_dim_const(1);
    for (int i = 0; i < x->rank; i++)
        if (!sym_mul(total, x->dims[i], &total))
            FAIL(c, "element count overflows");
    for (int i = 0; i < n; i++) {
        r[i] = t[i];
        if (is_static(t[i]) && t[i].k == 0 && !allowzero) {
            if (i >= x->rank)
                FAIL(c, "target dimension %d is 0 (copy) but the input has rank %d", i, x->rank);
            r[i] = x->dims[i];
        } else if (is_static(t[i]) && t[i].k == -1) {
            if (infer >= 0)
                FAIL(c, "more than one -1 in the target shape");
            infer = i;
            continue;
        } else if (t[i].k < 0) {
            FAIL(c, "target dimension %d is negative (%lld)", i, (long long)t[i].k);
        }
        if (!sym_mul(known_prod, r[i], &known_prod))
            FAIL(c, "element count overflows");
    }
    char s1[48], s2[48];
    if (infer >= 0) {
        if (!sym_div(total, known_prod, &r[infer]))
            FAIL(c, "cannot infer the -1 dimension: %s elements do not divide by %s", dimstr(total, s1),
                 dimstr(known_prod, s2));
    } else if (!ir_dim_eq(total, known_prod)) {
        FAIL(c, "the input has %s elements but the target shape holds %s", dimstr(total, s1),
             dimstr(known_prod, s2));
    }
    ir_value *o = out_set(c, 0, x->dtype, n, r);
    if (x->symval)
        set_symval(c, o, x->symval, x->nsymval);
    return VITC_OK;
}

/* Axes from input idx if present, else from the axes attribute. -1: none given. */
static int get_axes(ctx *c, int idx, int64_t *axes)
{
    if (ir_input(c->n, idx) >= 0) {
        int n = known_ints(c, c->n->inputs[idx], axes, IR_MAX_RANK);
        if (n < 0)
            return -2;
        return n;
    }
    const ir_attr *a = ir_attr_get(c->n, IR_ATTR_AXES);
    if (!a)
        return -1;
    if (a->kind != IR_AT_INTS || a->n > IR_MAX_RANK)
        return -2;
    memcpy(axes, a->ints, (size_t)a->n * sizeof(int64_t));
    return a->n;
}

static int infer_unsqueeze(ctx *c)
{
    ir_value *x = in(c, 0);
    int64_t axes[IR_MAX_RANK];
    int na = get_axes(c, 1, axes);
    if (na < 0)
        FAIL(c, "axes must be known at compile time");
    int r = x->rank + na;
    if (r > IR_MAX_RANK)
        FAIL(c, "result rank %d exceeds %d", r, IR_MAX_RANK);
    int mark[IR_MAX_RANK] = {0};
    for (int i = 0; i < na; i++) {
        int a = norm_axis(axes[i], r);
        if (a < 0 || mark[a])
            FAIL(c, "axis %lld is out of range or repeated", (long long)axes[i]);
        mark[a] = 1;
    }
    ir_dim d[IR_MAX_RANK];
    for (int i = 0, j = 0; i < r; i++)
        d[i] = mark[i] ? ir_dim_const(1) : x->dims[j++];
    ir_value *o = out_set(c, 0, x->dtype, r, d);
    if (x->symval && x->rank <= 1)
        set_symval(c, o, x->symval, x->nsymval);
    return VITC_OK;
}

static int infer_squeeze(ctx *c)
{
    ir_value *x = in(c, 0);
    int64_t axes[IR_MAX_RANK];
    int na = get_axes(c, 1, axes);
    if (na == -2)
        FAIL(c, "axes must be known at compile time");
    int mark[IR_MAX_RANK] = {0};
    for (int i = 0; i < na; i++) {
        int a = norm_axis(axes[i], x->rank);
        if (a < 0 || !is_one(x->dims[a]))
            FAIL(c, "axis %lld is out of range or not of size 1", (long long)axes[i]);
        mark[a] = 1;
    }
    if (na <= 0) /* no axes or an empty list: every dimension of size 1 (as the interpreter) */
        for (int i = 0; i < x->rank; i++)
            mark[i] = is_one(x->dims[i]);
    ir_dim d[IR_MAX_RANK];
    int r = 0;
    for (int i = 0; i < x->rank; i++)
        if (!mark[i])
            d[r++] = x->dims[i];
    ir_value *o = out_set(c, 0, x->dtype, r, d);
    if (x->symval && r <= 1)
        set_symval(c, o, x->symval, x->nsymval);
    return VITC_OK;
}

static int infer_concat(ctx *c)
{
    ir_value *x = in(c, 0);
    int axis = norm_axis(ir_attr_int(c->n, IR_ATTR_AXIS, 0), x->rank);
    if (axis < 0 || !ir_attr_get(c->n, IR_ATTR_AXIS) || x->rank < 1)
        FAIL(c, "axis is missing or out of range (or the inputs are scalars)");
    ir_dim d[IR_MAX_RANK];
    memcpy(d, x->dims, sizeof d);
    ir_dim vals[SYMVAL_MAX];
    int nvals = 0, values_known = x->rank == 1;
    for (int i = 0; i < c->n->ninputs; i++) {
        ir_value *v = in(c, i);
        if (v->rank != x->rank || v->dtype != x->dtype)
            FAIL(c, "input %d is %s of rank %d; input 0 is %s of rank %d", i, ir_dtype_name(v->dtype), v->rank,
                 ir_dtype_name(x->dtype), x->rank);
        for (int k = 0; k < x->rank; k++) {
            char s1[48], s2[48];
            if (k != axis && !ir_dim_eq(v->dims[k], x->dims[k]))
                FAIL(c, "input %d has dimension %d of %s, input 0 of %s", i, k, dimstr(v->dims[k], s1),
                     dimstr(x->dims[k], s2));
        }
        if (i && !sym_add(d[axis], v->dims[axis], 1, &d[axis]))
            FAIL(c, "the concatenated dimension mixes batch and non-batch sizes");
        int nk;
        const ir_dim *kv = values_known ? known(c, c->n->inputs[i], &nk) : NULL;
        if (!kv || nvals + nk > SYMVAL_MAX)
            values_known = 0;
        else {
            memcpy(vals + nvals, kv, (size_t)nk * sizeof(ir_dim));
            nvals += nk;
        }
    }
    ir_value *o = out_set(c, 0, x->dtype, x->rank, d);
    if (values_known)
        set_symval(c, o, vals, nvals);
    return VITC_OK;
}

static int infer_gather(ctx *c)
{
    ir_value *x = in(c, 0), *idx = in(c, 1);
    int axis = norm_axis(ir_attr_int(c->n, IR_ATTR_AXIS, 0), x->rank);
    if (axis < 0 || x->rank < 1)
        FAIL(c, "axis is out of range (or the data is a scalar)");
    if (idx->dtype != IR_I64 && idx->dtype != IR_I32)
        FAIL(c, "indices must be int32 or int64");
    int64_t ci[SYMVAL_MAX];
    int nci = is_static(x->dims[axis]) ? known_ints(c, c->n->inputs[1], ci, SYMVAL_MAX) : -1;
    for (int i = 0; i < nci; i++) /* constant indices are checked now */
        if (ci[i] < -x->dims[axis].k || ci[i] >= x->dims[axis].k)
            FAIL(c, "index %lld is out of range for dimension %d of size %lld", (long long)ci[i], axis,
                 (long long)x->dims[axis].k);
    int r = x->rank - 1 + idx->rank;
    if (r > IR_MAX_RANK)
        FAIL(c, "result rank exceeds %d", IR_MAX_RANK);
    ir_dim d[IR_MAX_RANK];
    int k = 0;
    for (int i = 0; i < axis; i++)
        d[k++] = x->dims[i];
    for (int i = 0; i < idx->rank; i++)
        d[k++] = idx->dims[i];
    for (int i = axis + 1; i < x->rank; i++)
        d[k++] = x->dims[i];
    ir_value *o = out_set(c, 0, x->dtype, r, d);
    /* Values: gathering entries of a known 1-D tensor. */
    int nx, ni;
    const ir_dim *xv = x->rank == 1 ? known(c, c->n->inputs[0], &nx) : NULL;
    int64_t iv[SYMVAL_MAX];
    ni = xv ? known_ints(c, c->n->inputs[1], iv, SYMVAL_MAX) : -1;
    if (xv && ni >= 0) {
        ir_dim vals[SYMVAL_MAX];
        for (int i = 0; i < ni; i++) {
            int64_t j = iv[i] < 0 ? iv[i] + nx : iv[i];
            if (j < 0 || j >= nx)
                FAIL(c, "index %lld is out of range for %d entries", (long long)iv[i], nx);
            vals[i] = xv[j];
        }
        set_symval(c, o, vals, ni);
    }
    return VITC_OK;
}

/* Slice bound clamp per ONNX: start/end adjusted for negatives and clamped. */
static int64_t clamp_bound(int64_t v, int64_t dim, int64_t lo, int64_t hi)
{
    if (v < 0)
        v = v < -dim ? -1 : v + dim; /* tentative, then clamp */
    if (v < lo)
        v = lo;
    if (v > hi)
        v = hi;
    return v;
}

static int infer_slice(ctx *c)
{
    ir_value *x = in(c, 0);
    int64_t st[IR_MAX_RANK], en[IR_MAX_RANK], ax[IR_MAX_RANK], sp[IR_MAX_RANK];
    int n = known_ints(c, c->n->inputs[1], st, IR_MAX_RANK);
    int m = known_ints(c, c->n->inputs[2], en, IR_MAX_RANK);
    if (n < 0 || m != n)
        FAIL(c, "starts and ends must be known numbers at compile time, of equal length");
    if (ir_input(c->n, 3) >= 0) {
        if (known_ints(c, c->n->inputs[3], ax, IR_MAX_RANK) != n)
            FAIL(c, "axes must be known at compile time and match starts");
    } else {
        for (int i = 0; i < n; i++)
            ax[i] = i;
    }
    if (ir_input(c->n, 4) >= 0) {
        if (known_ints(c, c->n->inputs[4], sp, IR_MAX_RANK) != n)
            FAIL(c, "steps must be known at compile time and match starts");
    } else {
        for (int i = 0; i < n; i++)
            sp[i] = 1;
    }
    ir_dim d[IR_MAX_RANK];
    memcpy(d, x->dims, sizeof d);
    int64_t lo_idx[IR_MAX_RANK] = {0}, step_of[IR_MAX_RANK];
    int sliced[IR_MAX_RANK] = {0};
    for (int i = 0; i < IR_MAX_RANK; i++)
        step_of[i] = 1;
    for (int i = 0; i < n; i++) {
        int a = norm_axis(ax[i], x->rank);
        if (a < 0 || sliced[a])
            FAIL(c, "axis %lld is out of range or repeated", (long long)ax[i]);
        if (sp[i] == 0)
            FAIL(c, "step is 0");
        sliced[a] = 1;
        ir_dim dim = x->dims[a];
        if (!is_static(dim)) {
            /* The batch axis may only be taken whole. */
            if (sp[i] == 1 && st[i] == 0 && en[i] >= INT32_MAX)
                continue;
            FAIL(c, "slicing the batch dimension is not supported");
        }
        int64_t D = dim.k, s, e;
        /* A step longer than the dimension takes one element, as D does; the
         * clamp keeps the arithmetic below (and -step) from overflowing. */
        int64_t step = sp[i] > D ? (D > 0 ? D : 1) : sp[i] < -D ? (D > 0 ? -D : -1) : sp[i];
        if (step > 0) {
            s = clamp_bound(st[i], D, 0, D);
            e = clamp_bound(en[i], D, 0, D);
        } else { /* ONNX: start in [0, D-1], end in [-1, D-1] */
            s = clamp_bound(st[i], D, 0, D - 1);
            e = clamp_bound(en[i], D, -1, D - 1);
        }
        int64_t len = step > 0 ? (e > s ? (e - s - 1) / step + 1 : 0) : (s > e ? (s - e - 1) / -step + 1 : 0);
        d[a] = ir_dim_const(len);
        lo_idx[a] = s;
        step_of[a] = step;
    }
    ir_value *o = out_set(c, 0, x->dtype, x->rank, d);
    int nx;
    const ir_dim *xv = x->rank == 1 ? known(c, c->n->inputs[0], &nx) : NULL;
    if (xv && is_static(d[0])) {
        ir_dim vals[SYMVAL_MAX];
        for (int64_t i = 0; i < d[0].k; i++)
            vals[i] = xv[lo_idx[0] + i * step_of[0]];
        set_symval(c, o, vals, (int)d[0].k);
    }
    return VITC_OK;
}

static int infer_transpose(ctx *c)
{
    ir_value *x = in(c, 0);
    const ir_attr *p = ir_attr_get(c->n, IR_ATTR_PERM);
    ir_dim d[IR_MAX_RANK];
    int seen[IR_MAX_RANK] = {0};
    if (p && (p->kind != IR_AT_INTS || p->n != x->rank))
        FAIL(c, "perm has %d entries for a rank-%d input", p->n, x->rank);
    for (int i = 0; i < x->rank; i++) {
        int64_t j = p ? p->ints[i] : x->rank - 1 - i;
        if (j < 0 || j >= x->rank || seen[j])
            FAIL(c, "perm is not a permutation of 0..%d", x->rank - 1);
        seen[j] = 1;
        d[i] = x->dims[j];
    }
    out_set(c, 0, x->dtype, x->rank, d);
    return VITC_OK;
}

static int infer_reduce(ctx *c)
{
    ir_value *x = in(c, 0);
    int64_t axes[IR_MAX_RANK];
    int na = get_axes(c, 1, axes);
    if (na == -2)
        FAIL(c, "axes must be known at compile time");
    int keep = ir_attr_int(c->n, IR_ATTR_KEEPDIMS, 1) != 0;
    int mark[IR_MAX_RANK] = {0};
    if (na <= 0) {
        /* no axes, or an empty list: the identity when noop_with_empty_axes */
        if (ir_attr_int(c->n, IR_ATTR_NOOP_WITH_EMPTY_AXES, 0)) {
            out_set(c, 0, x->dtype, x->rank, x->dims);
            return VITC_OK;
        }
        for (int i = 0; i < x->rank; i++)
            mark[i] = 1;
    }
    for (int i = 0; i < na; i++) {
        int a = norm_axis(axes[i], x->rank);
        if (a < 0)
            FAIL(c, "axis %lld is out of range", (long long)axes[i]);
        mark[a] = 1;
    }
    ir_dim d[IR_MAX_RANK];
    int r = 0;
    for (int i = 0; i < x->rank; i++)
        if (!mark[i])
            d[r++] = x->dims[i];
        else if (keep)
            d[r++] = ir_dim_const(1);
    out_set(c, 0, x->dtype, r, d);
    return VITC_OK;
}

static int infer_split(ctx *c)
{
    ir_value *x = in(c, 0);
    int axis = norm_axis(ir_attr_int(c->n, IR_ATTR_AXIS, 0), x->rank);
    if (axis < 0 || x->rank < 1)
        FAIL(c, "axis is out of range (or the input is a scalar)");
    ir_dim D = x->dims[axis];
    int no = c->n->noutputs;
    int64_t sizes[SYMVAL_MAX];
    if (no > SYMVAL_MAX)
        FAIL(c, "too many outputs");
    if (!is_static(D))
        FAIL(c, "splitting the batch dimension is not supported");
    if (ir_input(c->n, 1) >= 0) {
        if (known_ints(c, c->n->inputs[1], sizes, SYMVAL_MAX) != no)
            FAIL(c, "split sizes must be known at compile time, one per output");
    } else {
        int64_t parts = ir_attr_int(c->n, IR_ATTR_NUM_OUTPUTS, no);
        if (parts != no || no <= 0)
            FAIL(c, "num_outputs is %lld but the node has %d outputs", (long long)parts, no);
        int64_t chunk = D.k / no + (D.k % no != 0);
        for (int i = 0; i < no; i++) {
            int64_t left = D.k - chunk * i;
            sizes[i] = left < chunk ? (left > 0 ? left : 0) : chunk;
        }
        if (!ir_attr_get(c->n, IR_ATTR_NUM_OUTPUTS) && D.k % no)
            FAIL(c, "dimension %lld does not split into %d equal parts", (long long)D.k, no);
    }
    int64_t sum = 0;
    for (int i = 0; i < no; i++) {
        if (sizes[i] < 0)
            FAIL(c, "negative split size");
        if (ir_add_ovf(sum, sizes[i], &sum))
            FAIL(c, "split sizes add up past int64");
    }
    if (sum != D.k)
        FAIL(c, "split sizes add up to %lld, not %lld", (long long)sum, (long long)D.k);
    for (int i = 0; i < no; i++) {
        ir_dim d[IR_MAX_RANK];
        memcpy(d, x->dims, sizeof d);
        d[axis] = ir_dim_const(sizes[i]);
        out_set(c, i, x->dtype, x->rank, d);
    }
    return VITC_OK;
}

static int known_tensor(const ir_graph *g, int id, ir_tensor *t);

/* Resize(X, roi, scales, sizes): the output shape from sizes (integers known
 * at compile time) or from scales (floats: constants or kval), one entry per
 * axis of `axes` (every axis without it), the other axes kept. */
static int infer_resize(ctx *c)
{
    const ir_node *n = c->n;
    ir_value *x = in(c, 0);
    ir_dim dims[IR_MAX_RANK];
    char why[200];
    int axes[IR_MAX_RANK], na = ir_resize_axes(n, x->rank, axes, why, sizeof why);
    if (na < 0)
        FAIL(c, "%s", why);
    memcpy(dims, x->dims, sizeof dims);
    int ns = 0;
    const ir_dim *sizes = ir_input(n, 3) >= 0 ? known(c, n->inputs[3], &ns) : NULL;
    const ir_attr *keep = ir_attr_get(n, IR_ATTR_KEEP_ASPECT_RATIO_POLICY);
    if (sizes) {
        if (ns != na)
            FAIL(c, "sizes has %d entries for %d resized axes", ns, na);
        if (keep && !(keep->kind == IR_AT_STRING && strcmp(keep->s, "stretch") == 0)) {
            /* one scale for every axis, from the numbers: all must be known */
            int64_t din[IR_MAX_RANK], want[IR_MAX_RANK], got[IR_MAX_RANK];
            double scale[IR_MAX_RANK];
            for (int i = 0; i < na; i++) {
                if (!is_static(x->dims[axes[i]]) || !is_static(sizes[i]))
                    FAIL(c, "keep_aspect_ratio_policy needs the sizes and input dimensions of the resized axes at "
                            "compile time; axis %d depends on the batch", axes[i]);
                din[i] = x->dims[axes[i]].k, want[i] = sizes[i].k;
            }
            if (ir_resize_keep_aspect(n, na, din, want, got, scale, why, sizeof why))
                FAIL(c, "%s", why);
            for (int i = 0; i < na; i++)
                dims[axes[i]] = ir_dim_const(got[i]);
        } else {
            for (int i = 0; i < na; i++)
                dims[axes[i]] = sizes[i];
        }
    } else if (ir_input(n, 2) >= 0 && ir_input(n, 3) < 0) {
        ir_tensor s = {0};
        if (!known_tensor(c->g, n->inputs[2], &s))
            FAIL(c, "the scales are computed from data; vitc needs them at compile time");
        int64_t cnt = ir_tensor_numel(&s);
        if (cnt != na) {
            ir_tensor_free(&s);
            FAIL(c, "scales has %lld entries for %d resized axes", (long long)cnt, na);
        }
        for (int i = 0; i < na; i++) {
            int a = axes[i];
            double f = ir_tensor_get(&s, i);
            if (f == 1)
                dims[a] = x->dims[a];
            else if (is_static(x->dims[a]) && f > 0 && f * (double)x->dims[a].k < 1e15)
                dims[a] = ir_dim_const((int64_t)floor(f * (double)x->dims[a].k));
            else {
                ir_tensor_free(&s);
                FAIL(c, "scale %g of dimension %d cannot be applied at compile time", f, a);
            }
        }
        ir_tensor_free(&s);
    } else {
        FAIL(c, "the output size is computed from data; vitc needs sizes or scales at compile time");
    }
    for (int i = 0; i < x->rank; i++)
        if (dims[i].k < 0)
            FAIL(c, "output dimension %d is negative", i);
    out_set(c, 0, x->dtype, x->rank, dims);
    return VITC_OK;
}

static int infer_expand(ctx *c)
{
    ir_value *x = in(c, 0);
    int n;
    const ir_dim *s = known(c, c->n->inputs[1], &n);
    if (!s || n > IR_MAX_RANK)
        FAIL(c, "the target shape must be known at compile time");
    for (int i = 0; i < n; i++)
        if (s[i].k < 0)
            FAIL(c, "target dimension %d is negative (%lld)", i, (long long)s[i].k);
    ir_dim d[IR_MAX_RANK];
    int r;
    if (broadcast(c, x->dims, x->rank, s, n, d, &r))
        return VITC_BAD_INPUT;
    out_set(c, 0, x->dtype, r, d);
    return VITC_OK;
}

static int infer_constant_of_shape(ctx *c)
{
    int n;
    const ir_dim *s = known(c, c->n->inputs[0], &n);
    if (!s || n > IR_MAX_RANK)
        FAIL(c, "the shape must be known at compile time");
    const ir_attr *a = ir_attr_get(c->n, IR_ATTR_VALUE);
    ir_dtype dt = IR_F32;
    if (a && a->kind == IR_AT_TENSOR)
        dt = c->g->values[a->tensor].dtype;
    for (int i = 0; i < n; i++)
        if (s[i].k < 0)
            FAIL(c, "dimension %d is negative", i);
    ir_value *o = out_set(c, 0, dt, n, s);
    int64_t cnt = o ? numel_static(o) : -1; /* o is NULL when the output is omitted */
    if (a && a->kind == IR_AT_TENSOR && (dt == IR_I64 || dt == IR_I32) && cnt >= 0 && cnt <= SYMVAL_MAX && n <= 1) {
        int nv;
        const ir_dim *v = known(c, a->tensor, &nv);
        ir_dim vals[SYMVAL_MAX];
        for (int i = 0; v && nv == 1 && i < cnt; i++)
            vals[i] = v[0];
        if (v && nv == 1)
            set_symval(c, o, vals, (int)cnt);
    }
    return VITC_OK;
}

/* A scalar float constant's value, or one computed at compile time (kval);
 * 0 if the value is neither. */
static int const_float(ctx *c, int id, double *out)
{
    const ir_value *v = &c->g->values[id];
    if (v->kval && v->nkval == 1 && ir_dtype_is_float(v->dtype) && numel_static(v) == 1) {
        *out = v->kval[0];
        return 1;
    }
    if (v->kind != IR_VAL_CONST || !ir_dtype_is_float(v->dtype) || v->nbytes != ir_dtype_size(v->dtype))
        return 0;
    ir_tensor t = {.dtype = v->dtype, .rank = 0, .data = v->data};
    *out = ir_tensor_get(&t, 0);
    return 1;
}

static int infer_range(ctx *c)
{
    int64_t s, l, dl, len;
    double fs, fl, fd;
    if (known_ints(c, c->n->inputs[0], &s, 1) == 1 && known_ints(c, c->n->inputs[1], &l, 1) == 1 &&
        known_ints(c, c->n->inputs[2], &dl, 1) == 1) {
        int64_t diff;
        if (dl == 0)
            FAIL(c, "delta is 0");
        if (__builtin_sub_overflow(l, s, &diff))
            FAIL(c, "limit - start overflows");
        /* ceil(diff / dl) when they have one sign, without negating either */
        len = dl > 0 ? (diff > 0 ? (diff - 1) / dl + 1 : 0) : (diff < 0 ? (diff + 1) / dl + 1 : 0);
    } else if (const_float(c, c->n->inputs[0], &fs) && const_float(c, c->n->inputs[1], &fl) &&
               const_float(c, c->n->inputs[2], &fd)) {
        /* in the input's precision, as the interpreter counts */
        double cnt = in(c, 0)->dtype == IR_F32 ? ceilf(((float)fl - (float)fs) / (float)fd) : ceil((fl - fs) / fd);
        if (fd == 0 || !isfinite(cnt) || fabs(cnt) > 1e9)
            FAIL(c, "delta is 0 or the range is not finite");
        len = (int64_t)cnt;
        s = l = dl = 0;
    } else {
        FAIL(c, "start, limit and delta must be known at compile time");
    }
    if (len < 0)
        len = 0;
    ir_dim d = ir_dim_const(len);
    ir_value *o = out_set(c, 0, in(c, 0)->dtype, 1, &d);
    if (len <= SYMVAL_MAX && !ir_dtype_is_float(in(c, 0)->dtype)) {
        ir_dim vals[SYMVAL_MAX];
        for (int64_t i = 0; i < len; i++)
            vals[i] = ir_dim_const(s + i * dl);
        set_symval(c, o, vals, (int)len);
    }
    return VITC_OK;
}

static int infer_flatten(ctx *c)
{
    ir_value *x = in(c, 0);
    int64_t a = ir_attr_int(c->n, IR_ATTR_AXIS, 1);
    if (a < 0)
        a += x->rank;
    if (a < 0 || a > x->rank)
        FAIL(c, "axis is out of range");
    ir_dim d[2] = {ir_dim_const(1), ir_dim_const(1)};
    for (int i = 0; i < x->rank; i++)
        if (!sym_mul(d[i >= a], x->dims[i], &d[i >= a]))
            FAIL(c, "element count overflows");
    out_set(c, 0, x->dtype, 2, d);
    return VITC_OK;
}

/* Conv's output dimensions (x's rank of them) from input x and weight w. */
static int conv_dims(ctx *c, const ir_value *x, const ir_value *w, ir_dim *d)
{
    int sp = x->rank - 2;
    if (sp < 1 || sp > 3 || w->rank != x->rank)
        FAIL(c, "%s expects (N, C, spatial...) input and a weight of the same rank", ir_op_name(c->n->op));
    const ir_attr *st = ir_attr_get(c->n, IR_ATTR_STRIDES), *pd = ir_attr_get(c->n, IR_ATTR_PADS),
                  *dl = ir_attr_get(c->n, IR_ATTR_DILATIONS);
    int64_t group = ir_attr_int(c->n, IR_ATTR_GROUP, 1), cin;
    int pad = ir_auto_pad_of(c->n);
    if (pad < 0)
        FAIL(c, "auto_pad must be NOTSET, VALID, SAME_UPPER or SAME_LOWER");
    if (!is_static(x->dims[1]) || !is_static(w->dims[1]) || group <= 0 || ir_mul_ovf(w->dims[1].k, group, &cin) ||
        x->dims[1].k != cin)
        FAIL(c, "input has %lld channels; weight expects %lld x group %lld", (long long)x->dims[1].k,
             (long long)w->dims[1].k, (long long)group);
    d[0] = x->dims[0];
    d[1] = w->dims[0];
    for (int i = 0; i < sp; i++) {
        int64_t s = st && st->n > i ? st->ints[i] : 1, di = dl && dl->n > i ? dl->ints[i] : 1;
        int64_t p0 = pd && pd->n == 2 * sp ? pd->ints[i] : 0, p1 = pd && pd->n == 2 * sp ? pd->ints[i + sp] : 0, o;
        if (!is_static(x->dims[2 + i]) || !is_static(w->dims[2 + i]))
            FAIL(c, "spatial dimension %d of the input or the kernel is not static", i);
        const int64_t in_ = x->dims[2 + i].k, k = w->dims[2 + i].k;
        const char *why = ir_conv_axis(in_, k, s, di, (ir_auto_pad)pad, &p0, &p1, &o);
        if (why)
            FAIL(c, "spatial dimension %d (input %lld, kernel %lld): %s", i, (long long)in_, (long long)k, why);
        d[2 + i] = ir_dim_const(o);
    }
    return VITC_OK;
}

static int infer_conv(ctx *c)
{
    ir_dim d[IR_MAX_RANK];
    if (conv_dims(c, in(c, 0), in(c, 1), d))
        return VITC_BAD_INPUT;
    out_set(c, 0, in(c, 0)->dtype, in(c, 0)->rank, d);
    return VITC_OK;
}

/* ---- quantized ONNX ---- */

static int is_quant_int(ir_dtype t) { return t == IR_U8 || t == IR_I8 || t == IR_U16 || t == IR_I16; }
static int is_float_dt(ir_dtype t) { return t == IR_F32 || t == IR_F16 || t == IR_BF16; }

/* An ONNX element-type attribute (output_dtype, precision) as a dtype: -1
 * when absent or 0, -2 when it names a type vitc does not hold. */
static int dtype_attr(const ir_node *n, ir_attr_id id)
{
    int64_t code = ir_attr_int(n, id, 0);
    if (code == 0)
        return -1;
    int t = code > 0 && code < 1000 ? ir_dtype_from_onnx((int)code) : -1;
    return t < 0 ? -2 : t;
}

/* A scale or zero point (input k) of QuantizeLinear / DequantizeLinear on
 * x: one element (per tensor), a 1-D tensor of x's dimension `axis` (per
 * axis), or with block_size, x's shape with dimension `axis` divided by the
 * block size, rounded up (blocked). */
static int check_qparam(ctx *c, int k, const ir_value *x, int axis, int64_t block, const char *what)
{
    const ir_value *p = in(c, k);
    char s1[48];
    int64_t cnt = numel_static(p);
    if (cnt < 0)
        FAIL(c, "the %s must have a static shape", what);
    if (cnt == 1 && p->rank <= 1 && !block)
        return VITC_OK;
    if (axis < 0)
        FAIL(c, "axis %lld is out of range for rank %d", (long long)ir_attr_int(c->n, IR_ATTR_AXIS, 1), x->rank);
    if (!is_static(x->dims[axis]))
        FAIL(c, "quantization along axis %d, whose size %s depends on the batch, is not supported", axis,
             dimstr(x->dims[axis], s1));
    if (!block) {
        if (p->rank != 1 || p->dims[0].k != x->dims[axis].k)
            FAIL(c, "the %s must hold one element or one per element of axis %d (%lld), not %lld", what, axis,
                 (long long)x->dims[axis].k, (long long)cnt);
        return VITC_OK;
    }
    int64_t nblocks = x->dims[axis].k / block + (x->dims[axis].k % block != 0);
    int ok = p->rank == x->rank;
    for (int i = 0; ok && i < x->rank; i++)
        ok = ir_dim_eq(p->dims[i], i == axis ? ir_dim_const(nblocks) : x->dims[i]);
    if (!ok)
        FAIL(c, "with block_size %lld the %s must have the input's shape with dimension %d of %lld", (long long)block,
             what, axis, (long long)nblocks);
    return VITC_OK;
}

/* The axis and block size of QuantizeLinear / DequantizeLinear, checked,
 * then their scale and zero point. */
static int check_qdq_params(ctx *c, const ir_value *x)
{
    const ir_node *n = c->n;
    int axis = norm_axis(ir_attr_int(n, IR_ATTR_AXIS, 1), x->rank);
    int64_t block = ir_attr_int(n, IR_ATTR_BLOCK_SIZE, 0);
    const ir_value *scale = in(c, 1);
    if (block < 0)
        FAIL(c, "block_size must not be negative (%lld)", (long long)block);
    if (axis < 0 && (block || numel_static(scale) != 1))
        FAIL(c, "axis %lld is out of range for rank %d", (long long)ir_attr_int(n, IR_ATTR_AXIS, 1), x->rank);
    if (!is_float_dt(scale->dtype))
        FAIL(c, "the scale is %s; it must be f32, f16 or bf16", ir_dtype_name(scale->dtype));
    if (check_qparam(c, 1, x, axis, block, "scale"))
        return VITC_BAD_INPUT;
    if (ir_input(n, 2) >= 0) {
        const ir_value *zp = in(c, 2);
        if (check_qparam(c, 2, x, axis, block, "zero point"))
            return VITC_BAD_INPUT;
        if (numel_static(zp) != numel_static(scale))
            FAIL(c, "the zero point has %lld elements and the scale %lld", (long long)numel_static(zp),
                 (long long)numel_static(scale));
    }
    return VITC_OK;
}

/* QuantizeLinear: y = saturate(round(x / scale) + zero_point), of the zero
 * point's type (else output_dtype's, else u8), shaped like x. */
static int infer_quantize(ctx *c)
{
    const ir_node *n = c->n;
    ir_value *x = in(c, 0);
    if (!is_float_dt(x->dtype) && x->dtype != IR_I32)
        FAIL(c, "the input is %s; QuantizeLinear takes f32, f16, bf16 or i32", ir_dtype_name(x->dtype));
    int out = dtype_attr(n, IR_ATTR_OUTPUT_DTYPE), prec = dtype_attr(n, IR_ATTR_PRECISION);
    if (out == -2 || (out >= 0 && !is_quant_int((ir_dtype)out)))
        FAIL(c, "output_dtype %lld is not a quantized type vitc holds (u8, i8, u16, i16)",
             (long long)ir_attr_int(n, IR_ATTR_OUTPUT_DTYPE, 0));
    if (prec == -2 || (prec >= 0 && !is_float_dt((ir_dtype)prec)))
        FAIL(c, "precision %lld is not f32, f16 or bf16", (long long)ir_attr_int(n, IR_ATTR_PRECISION, 0));
    if (ir_input(n, 2) >= 0) {
        ir_dtype zt = in(c, 2)->dtype;
        if (!is_quant_int(zt))
            FAIL(c, "the zero point is %s; vitc quantizes to u8, i8, u16 and i16", ir_dtype_name(zt));
        if (out >= 0 && (ir_dtype)out != zt)
            FAIL(c, "output_dtype says %s but the zero point is %s", ir_dtype_name((ir_dtype)out), ir_dtype_name(zt));
        out = zt;
    }
    if (check_qdq_params(c, x))
        return VITC_BAD_INPUT;
    out_set(c, 0, out >= 0 ? (ir_dtype)out : IR_U8, x->rank, x->dims);
    return VITC_OK;
}

/* DequantizeLinear: y = (x - zero_point) * scale, of the scale's type (or
 * output_dtype's), shaped like x. */
static int infer_dequantize(ctx *c)
{
    const ir_node *n = c->n;
    ir_value *x = in(c, 0);
    if (!is_quant_int(x->dtype) && x->dtype != IR_I32)
        FAIL(c, "the input is %s; DequantizeLinear takes u8, i8, u16, i16 or i32", ir_dtype_name(x->dtype));
    if (ir_input(n, 2) >= 0 && in(c, 2)->dtype != x->dtype)
        FAIL(c, "the zero point is %s but the input is %s", ir_dtype_name(in(c, 2)->dtype), ir_dtype_name(x->dtype));
    int out = dtype_attr(n, IR_ATTR_OUTPUT_DTYPE);
    if (out == -2 || (out >= 0 && !is_float_dt((ir_dtype)out)))
        FAIL(c, "output_dtype %lld is not f32, f16 or bf16", (long long)ir_attr_int(n, IR_ATTR_OUTPUT_DTYPE, 0));
    if (check_qdq_params(c, x))
        return VITC_BAD_INPUT;
    out_set(c, 0, out >= 0 ? (ir_dtype)out : in(c, 1)->dtype, x->rank, x->dims);
    return VITC_OK;
}

/* DynamicQuantizeLinear: y u8 shaped like x, its scale (f32) and zero point
 * (u8) scalars. */
static int infer_dynamic_quantize(ctx *c)
{
    ir_value *x = in(c, 0);
    if (x->dtype != IR_F32)
        FAIL(c, "the input is %s; DynamicQuantizeLinear takes f32", ir_dtype_name(x->dtype));
    ir_dim scalar[1] = {{1, 0}};
    out_set(c, 0, IR_U8, x->rank, x->dims);
    out_set(c, 1, IR_F32, 0, scalar);
    out_set(c, 2, IR_U8, 0, scalar);
    return VITC_OK;
}

static int is_u8_i8(ir_dtype t) { return t == IR_U8 || t == IR_I8; }

/* Input k of a quantized contraction: an operand of u8 or i8 (is an operand),
 * else a scale (f32) or a zero point of the operand's type at input `of`. */
static int check_qtype(ctx *c, int k, int of, const char *what)
{
    if (ir_input(c->n, k) < 0)
        return VITC_OK;
    ir_dtype t = in(c, k)->dtype;
    if (of == -1 && !is_u8_i8(t))
        FAIL(c, "%s is %s; it must be u8 or i8", what, ir_dtype_name(t));
    if (of == -2 && t != IR_F32)
        FAIL(c, "%s is %s; it must be f32", what, ir_dtype_name(t));
    if (of >= 0 && t != in(c, of)->dtype)
        FAIL(c, "%s is %s but its operand is %s", what, ir_dtype_name(t), ir_dtype_name(in(c, of)->dtype));
    return VITC_OK;
}

/* A quantization parameter (input k, optional where absent) of a
 * contraction: one element, or a 1-D tensor of n elements (per row of A,
 * per column of B, per output channel of a Conv) where n >= 0.  With op
 * (MatMulInteger's operand), also op's rank with op's dimensions or 1 before
 * the last two, and [M, 1] (rows: per row of A) or [1, N] (per column of B)
 * last. */
static int check_qcount(ctx *c, int k, ir_dim n, const ir_value *op, int rows, const char *what)
{
    if (ir_input(c->n, k) < 0)
        return VITC_OK;
    const ir_value *p = in(c, k);
    int64_t cnt = numel_static(p);
    char s1[48];
    if (cnt == 1 && p->rank <= 1)
        return VITC_OK;
    if (n.k >= 0 && p->rank == 1 && ir_dim_eq(p->dims[0], n))
        return VITC_OK;
    int r = op ? op->rank : 0, ok = r >= 2 && p->rank == r;
    for (int i = 0; ok && i < r - 2; i++)
        ok = is_one(p->dims[i]) || ir_dim_eq(p->dims[i], op->dims[i]);
    if (ok && ir_dim_eq(p->dims[r - (rows ? 2 : 1)], n) && is_one(p->dims[r - (rows ? 1 : 2)]))
        return VITC_OK;
    if (n.k < 0)
        FAIL(c, "%s must hold one element", what);
    FAIL(c, "%s must hold one element or %s (one per %s)", what, dimstr(n, s1),
         c->n->op == IR_OP_CONV_INTEGER || c->n->op == IR_OP_QLINEAR_CONV ? "output channel" : rows ? "row" : "column");
}

/* MatMulInteger (A, B, a_zero_point, b_zero_point) -> i32 and QLinearMatMul
 * (a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point)
 * -> y_zero_point's type: numpy matmul shapes. */
static int infer_qmatmul(ctx *c)
{
    int q = c->n->op == IR_OP_QLINEAR_MATMUL, ia = 0, ib = q ? 3 : 1;
    ir_value *a = in(c, ia), *b = in(c, ib);
    ir_dim r[IR_MAX_RANK];
    int rr;
    if (check_qtype(c, ia, -1, "A") || check_qtype(c, ib, -1, "B") || matmul_dims(c, a, b, r, &rr))
        return VITC_BAD_INPUT;
    ir_dim m = a->rank > 1 ? a->dims[a->rank - 2] : ir_dim_const(1);
    ir_dim nn = b->rank > 1 ? b->dims[b->rank - 1] : ir_dim_const(1);
    if (!q) {
        if (check_qtype(c, 2, 0, "a_zero_point") || check_qtype(c, 3, 1, "b_zero_point") ||
            check_qcount(c, 2, m, a, 1, "a_zero_point") || check_qcount(c, 3, nn, b, 0, "b_zero_point"))
            return VITC_BAD_INPUT;
        out_set(c, 0, IR_I32, rr, r);
        return VITC_OK;
    }
    if (check_qtype(c, 1, -2, "a_scale") || check_qtype(c, 2, 0, "a_zero_point") || check_qtype(c, 4, -2, "b_scale") ||
        check_qtype(c, 5, 3, "b_zero_point") || check_qtype(c, 6, -2, "y_scale") || check_qtype(c, 7, -1, "y_zero_point") ||
        check_qcount(c, 1, m, NULL, 1, "a_scale") || check_qcount(c, 2, m, NULL, 1, "a_zero_point") ||
        check_qcount(c, 4, nn, NULL, 0, "b_scale") || check_qcount(c, 5, nn, NULL, 0, "b_zero_point") ||
        check_qcount(c, 6, ir_dim_const(-1), NULL, 0, "y_scale") || check_qcount(c, 7, ir_dim_const(-1), NULL, 0, "y_zero_point"))
        return VITC_BAD_INPUT;
    out_set(c, 0, in(c, 7)->dtype, rr, r);
    return VITC_OK;
}

/* ConvInteger (x, w, x_zero_point, w_zero_point) -> i32 and QLinearConv (x,
 * x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point,
 * B) -> y_zero_point's type: Conv's shapes; w's parameters per output channel. */
static int infer_qconv(ctx *c)
{
    int q = c->n->op == IR_OP_QLINEAR_CONV, iw = q ? 3 : 1;
    ir_value *x = in(c, 0), *w = in(c, iw);
    ir_dim d[IR_MAX_RANK], none = ir_dim_const(-1);
    if (check_qtype(c, 0, -1, "x") || check_qtype(c, iw, -1, "w") || conv_dims(c, x, w, d))
        return VITC_BAD_INPUT;
    if (!q) {
        if (check_qtype(c, 2, 0, "x_zero_point") || check_qtype(c, 3, 1, "w_zero_point") ||
            check_qcount(c, 2, none, NULL, 0, "x_zero_point") || check_qcount(c, 3, w->dims[0], NULL, 1, "w_zero_point"))
            return VITC_BAD_INPUT;
        out_set(c, 0, IR_I32, x->rank, d);
        return VITC_OK;
    }
    if (check_qtype(c, 1, -2, "x_scale") || check_qtype(c, 2, 0, "x_zero_point") || check_qtype(c, 4, -2, "w_scale") ||
        check_qtype(c, 5, 3, "w_zero_point") || check_qtype(c, 6, -2, "y_scale") || check_qtype(c, 7, -1, "y_zero_point") ||
        check_qcount(c, 1, none, NULL, 0, "x_scale") || check_qcount(c, 2, none, NULL, 0, "x_zero_point") ||
        check_qcount(c, 4, w->dims[0], NULL, 1, "w_scale") || check_qcount(c, 5, w->dims[0], NULL, 1, "w_zero_point") ||
        check_qcount(c, 6, none, NULL, 0, "y_scale") || check_qcount(c, 7, none, NULL, 0, "y_zero_point"))
        return VITC_BAD_INPUT;
    if (ir_input(c->n, 8) >= 0) {
        const ir_value *bias = in(c, 8);
        if (bias->dtype != IR_I32 || bias->rank != 1 || !ir_dim_eq(bias->dims[0], w->dims[0]))
            FAIL(c, "the bias B must be i32 with one element per output channel");
    }
    out_set(c, 0, in(c, 7)->dtype, x->rank, d);
    return VITC_OK;
}

/* ---- ONNX Runtime's QOperator ops (com.microsoft) ---- */

/* Input k (optional where absent) holds one element: a scale (f32, of = -2)
 * or a zero point of input `of`'s type. */
static int check_qscalar(ctx *c, int k, int of, const char *what)
{
    return check_qtype(c, k, of, what) || check_qcount(c, k, ir_dim_const(-1), NULL, 0, what) ? VITC_BAD_INPUT
                                                                                                : VITC_OK;
}

/* QLinearAdd, QLinearMul (A, A_scale, A_zero_point, B, B_scale,
 * B_zero_point, C_scale, C_zero_point) -> A's type, broadcast. */
static int infer_qlinear_binary(ctx *c)
{
    ir_value *a = in(c, 0), *b = in(c, 3);
    if (check_qtype(c, 0, -1, "A") || check_qtype(c, 3, -1, "B"))
        return VITC_BAD_INPUT;
    if (a->dtype != b->dtype)
        FAIL(c, "A is %s and B %s; they must be of one type", ir_dtype_name(a->dtype), ir_dtype_name(b->dtype));
    if (check_qscalar(c, 1, -2, "A_scale") || check_qscalar(c, 2, 0, "A_zero_point") ||
        check_qscalar(c, 4, -2, "B_scale") || check_qscalar(c, 5, 3, "B_zero_point") ||
        check_qscalar(c, 6, -2, "C_scale") || check_qscalar(c, 7, 0, "C_zero_point"))
        return VITC_BAD_INPUT;
    ir_dim r[IR_MAX_RANK];
    int rr;
    if (broadcast(c, a->dims, a->rank, b->dims, b->rank, r, &rr))
        return VITC_BAD_INPUT;
    out_set(c, 0, a->dtype, rr, r);
    return VITC_OK;
}

/* QLinearSoftmax (X, X_scale, x_zero_point, y_scale, y_zero_point) -> X's
 * shape and type; attributes axis (-1) and opset (required). */
static int infer_qlinear_softmax(ctx *c)
{
    ir_value *x = in(c, 0);
    if (check_qtype(c, 0, -1, "X") || check_qscalar(c, 1, -2, "X_scale") || check_qscalar(c, 2, 0, "x_zero_point") ||
        check_qscalar(c, 3, -2, "y_scale") || check_qscalar(c, 4, 0, "y_zero_point"))
        return VITC_BAD_INPUT;
    if (!ir_attr_get(c->n, IR_ATTR_OPSET))
        FAIL(c, "QLinearSoftmax needs its attribute opset (the opset whose Softmax it follows)");
    if (x->rank < 1 || norm_axis(ir_attr_int(c->n, IR_ATTR_AXIS, -1), x->rank) < 0)
        FAIL(c, "axis %lld is out of range for an input of rank %d", (long long)ir_attr_int(c->n, IR_ATTR_AXIS, -1),
             x->rank);
    out_set(c, 0, x->dtype, x->rank, x->dims);
    return VITC_OK;
}

/* QLinearConcat (Y_scale, Y_zero_point, then X, X_scale, X_zero_point per
 * input) -> Y_zero_point's type, the inputs joined along axis. */
static int infer_qlinear_concat(ctx *c)
{
    int n = c->n->ninputs;
    if ((n - 2) % 3)
        FAIL(c, "QLinearConcat takes Y_scale, Y_zero_point, then X, X_scale and X_zero_point per input; it has %d "
                "inputs", n);
    if (check_qscalar(c, 0, -2, "Y_scale") || check_qtype(c, 1, -1, "Y_zero_point") ||
        check_qscalar(c, 1, 1, "Y_zero_point"))
        return VITC_BAD_INPUT;
    ir_value *x = in(c, 2);
    int axis = norm_axis(ir_attr_int(c->n, IR_ATTR_AXIS, 0), x->rank);
    if (axis < 0 || !ir_attr_get(c->n, IR_ATTR_AXIS) || x->rank < 1)
        FAIL(c, "axis is missing or out of range (or the inputs are scalars)");
    ir_dim d[IR_MAX_RANK];
    memcpy(d, x->dims, sizeof d);
    for (int i = 2; i < n; i += 3) {
        ir_value *v = in(c, i);
        if (v->rank != x->rank || v->dtype != in(c, 1)->dtype)
            FAIL(c, "input %d is %s of rank %d; Y_zero_point is %s and input 2 of rank %d", i,
                 ir_dtype_name(v->dtype), v->rank, ir_dtype_name(in(c, 1)->dtype), x->rank);
        if (check_qscalar(c, i + 1, -2, "X_scale") || check_qscalar(c, i + 2, 1, "X_zero_point"))
            return VITC_BAD_INPUT;
        for (int k = 0; k < x->rank; k++) {
            char s1[48], s2[48];
            if (k != axis && !ir_dim_eq(v->dims[k], x->dims[k]))
                FAIL(c, "input %d has dimension %d of %s, input 2 of %s", i, k, dimstr(v->dims[k], s1),
                     dimstr(x->dims[k], s2));
        }
        if (i > 2 && !sym_add(d[axis], v->dims[axis], 1, &d[axis]))
            FAIL(c, "the concatenated dimension mixes batch and non-batch sizes");
    }
    out_set(c, 0, in(c, 1)->dtype, x->rank, d);
    return VITC_OK;
}

/* QGemm (A, a_scale, a_zero_point, B, b_scale, b_zero_point, C, y_scale,
 * y_zero_point) -> [M, N] of A's type with y_zero_point, else f32. */
static int infer_qgemm(ctx *c)
{
    ir_value *a = in(c, 0), *b = in(c, 3);
    if (check_qtype(c, 0, -1, "A") || check_qtype(c, 3, -1, "B"))
        return VITC_BAD_INPUT;
    if (a->rank != 2 || b->rank != 2)
        FAIL(c, "QGemm operands must be 2-D, got ranks %d and %d", a->rank, b->rank);
    int ta = ir_attr_int(c->n, IR_ATTR_TRANS_A, 0) != 0, tb = ir_attr_int(c->n, IR_ATTR_TRANS_B, 0) != 0;
    ir_dim m = a->dims[ta], ka = a->dims[1 - ta], kb = b->dims[tb], nn = b->dims[1 - tb];
    char s1[48], s2[48];
    if (!ir_dim_eq(ka, kb))
        FAIL(c, "QGemm inner dimensions differ: %s vs %s", dimstr(ka, s1), dimstr(kb, s2));
    if (check_qscalar(c, 1, -2, "a_scale") || check_qscalar(c, 2, 0, "a_zero_point") ||
        check_qtype(c, 4, -2, "b_scale") || check_qcount(c, 4, nn, NULL, 0, "b_scale") ||
        check_qtype(c, 5, 3, "b_zero_point") || check_qcount(c, 5, nn, NULL, 0, "b_zero_point") ||
        check_qscalar(c, 7, -2, "y_scale") || check_qscalar(c, 8, 0, "y_zero_point"))
        return VITC_BAD_INPUT;
    int has_ys = ir_input(c->n, 7) >= 0, has_yz = ir_input(c->n, 8) >= 0;
    if (has_yz && !has_ys)
        FAIL(c, "QGemm has y_zero_point without y_scale");
    ir_dim r[2] = {m, nn};
    if (ir_input(c->n, 6) >= 0) {
        ir_value *bias = in(c, 6);
        ir_dim t[IR_MAX_RANK];
        int rt;
        if (bias->dtype != IR_I32 || bias->rank > 2 || broadcast(c, r, 2, bias->dims, bias->rank, t, &rt) ||
            !ir_dim_eq(t[0], m) || !ir_dim_eq(t[1], nn))
            FAIL(c, "QGemm's C must be i32 and broadcast to the output");
    }
    out_set(c, 0, has_yz ? a->dtype : IR_F32, 2, r);
    return VITC_OK;
}

/* Einsum "ab,bc->ac": each letter's size from the operands. */
static int infer_einsum(ctx *c)
{
    ir_einsum eq;
    char why[160];
    if (ir_einsum_of(c->n, &eq, why, sizeof why))
        FAIL(c, "%s", why);
    ir_dim size[128];
    int seen[128] = {0};
    for (int op = 0; op < eq.nterms; op++) {
        const ir_value *x = in(c, op);
        if ((int)strlen(eq.terms[op]) != x->rank)
            FAIL(c, "operand %d has rank %d, the equation gives it %d letters", op, x->rank,
                 (int)strlen(eq.terms[op]));
        for (int dim = 0; dim < x->rank; dim++) {
            unsigned char ch = (unsigned char)eq.terms[op][dim];
            ir_dim s = x->dims[dim];
            if (seen[ch] && !ir_dim_eq(size[ch], s) && !is_one(s) && !is_one(size[ch]))
                FAIL(c, "letter '%c' has two different sizes", ch);
            if (!seen[ch] || is_one(size[ch]))
                size[ch] = s;
            seen[ch] = 1;
        }
    }
    ir_dim d[IR_MAX_RANK];
    int r = 0;
    for (const char *p = eq.out; *p; p++)
        d[r++] = size[(unsigned char)*p];
    out_set(c, 0, in(c, 0)->dtype, r, d);
    return VITC_OK;
}

/* LayerNormalization, RMSNormalization: Y shaped like X; LayerNorm's Mean and
 * InvStdDev [dims before axis, then 1s] of the stash type. */
static int infer_norm(ctx *c)
{
    ir_norm v;
    ir_value *x = in(c, IR_NORM_X);
    if (ir_norm_get(c->n, &v, c->d))
        return VITC_BAD_INPUT;
    int axis = ir_norm_axis(&v, x->rank);
    if (axis < 0)
        FAIL(c, "axis is out of range");
    out_set(c, IR_NORM_Y, x->dtype, x->rank, x->dims);
    ir_dim d[IR_MAX_RANK];
    for (int i = 0; i < x->rank; i++)
        d[i] = i < axis ? x->dims[i] : ir_dim_const(1);
    out_set(c, IR_NORM_MEAN, v.stash, x->rank, d); /* Mean and InvStdDev are of the stash type */
    out_set(c, IR_NORM_INV_STD, v.stash, x->rank, d);
    return VITC_OK;
}

/* Linear (fused): x [..., K] @ W [K, N] -> [..., N]; bias [N], residual
 * broadcasting to the output. */
static int infer_linear(ctx *c)
{
    ir_linear l;
    char s1[48], s2[48];
    if (ir_linear_get(c->n, &l, c->d))
        return VITC_BAD_INPUT;
    ir_value *x = &c->g->values[l.x], *w = &c->g->values[l.w];
    if (x->rank < 1 || w->rank != 2)
        FAIL(c, "Linear needs x of rank >= 1 and a 2-D W, got ranks %d and %d", x->rank, w->rank);
    if (l.int8) {
        const ir_value *ws = &c->g->values[l.w_scale];
        if (w->dtype != IR_I8 || x->dtype != IR_F32 || ws->dtype != IR_F32 || ws->rank != 1 ||
            !ir_dim_eq(ws->dims[0], w->dims[1]))
            FAIL(c, "LinearInt8 needs an f32 x, an i8 W [K, N] and f32 weight scales [N], got %s, %s and %s",
                 ir_dtype_name(x->dtype), ir_dtype_name(w->dtype), ir_dtype_name(ws->dtype));
    }
    if (!ir_dim_eq(x->dims[x->rank - 1], w->dims[0]))
        FAIL(c, "Linear inner dimensions differ: %s vs %s", dimstr(x->dims[x->rank - 1], s1), dimstr(w->dims[0], s2));
    ir_dim r[IR_MAX_RANK];
    memcpy(r, x->dims, (size_t)x->rank * sizeof(ir_dim));
    r[x->rank - 1] = w->dims[1];
    const ir_value *bias = l.bias >= 0 ? &c->g->values[l.bias] : NULL;
    if (bias && (bias->rank != 1 || !ir_dim_eq(bias->dims[0], w->dims[1])))
        FAIL(c, "Linear bias must be [%s]", dimstr(w->dims[1], s1));
    if (l.residual >= 0) {
        const ir_value *res = &c->g->values[l.residual];
        ir_dim t[IR_MAX_RANK];
        int rt;
        if (broadcast(c, r, x->rank, res->dims, res->rank, t, &rt))
            return VITC_BAD_INPUT;
        for (int i = 0; i < rt; i++)
            if (rt != x->rank || !ir_dim_eq(t[i], r[i]))
                FAIL(c, "Linear residual does not broadcast to the output");
    }
    if (l.gate >= 0) {
        const ir_value *gv = &c->g->values[l.gate];
        int ok = gv->rank == x->rank && gv->dtype == x->dtype;
        for (int i = 0; ok && i < x->rank; i++)
            ok = ir_dim_eq(gv->dims[i], r[i]);
        if (!ok) {
            char t[96];
            FAIL(c, "Linear's gate is %s, not of the output's shape", ir_value_type_str(gv, t, sizeof t));
        }
    }
    out_set(c, 0, x->dtype, x->rank, r);
    return VITC_OK;
}

/* Attention (fused): qkv [B, N, 3*H*D] -> [B, N, H*D]. */
static int infer_attention(ctx *c)
{
    ir_attention a;
    char s1[48];
    if (ir_attention_get(c->n, &a, c->d))
        return VITC_BAD_INPUT;
    ir_value *x = &c->g->values[a.qkv];
    int64_t h = a.heads, hd = a.head_size;
    int cross = a.q >= 0, parts = a.parts;
    if (x->rank != 3 || !ir_dim_eq(x->dims[2], ir_dim_const(parts * h * hd)))
        FAIL(c, "Attention input must be [B, N, %lld], last dimension is %s", (long long)(parts * h * hd),
             x->rank > 0 ? dimstr(x->dims[x->rank - 1], s1) : "missing");
    ir_dim nq = x->dims[1];
    if (cross) { /* q [B, Nq, H*D] */
        const ir_value *q = &c->g->values[a.q];
        if (q->rank != 3 || !ir_dim_eq(q->dims[0], x->dims[0]) || !ir_dim_eq(q->dims[2], ir_dim_const(h * hd)) ||
            q->dtype != x->dtype)
            FAIL(c, "Attention's queries must be [B, Nq, %lld] like its keys' images", (long long)(h * hd));
        nq = q->dims[1];
    }
    if (a.bias >= 0) { /* bias [1|B, 1|H, 1|Nq, Nk] */
        const ir_value *b = &c->g->values[a.bias];
        ir_dim want[4] = {x->dims[0], ir_dim_const(h), nq, x->dims[1]};
        int ok = b->rank == 4 && b->dtype == IR_F32;
        for (int i = 0; ok && i < 4; i++)
            ok = ir_dim_eq(b->dims[i], want[i]) || (i < 3 && is_one(b->dims[i])) ||
                 (i == 0 && ir_attention_bias_period(c->g, &a) > 0); /* one row per window */
        if (!ok) {
            char t[96];
            FAIL(c, "Attention's bias is %s, not f32[1|B, 1|%lld, 1|Nq, Nk] with Nk = %s", ir_value_type_str(b, t, sizeof t),
                 (long long)h, dimstr(x->dims[1], s1));
        }
    }
    if (a.rope >= 0) { /* rope f32 [2, (H,) R, D] with rope_start + R <= N */
        const ir_value *t = &c->g->values[a.rope];
        int r4 = t->rank == 4;
        int ok = (t->rank == 3 || (r4 && ir_dim_eq(t->dims[1], ir_dim_const(h)))) && t->dtype == IR_F32 &&
                 ir_dim_eq(t->dims[0], ir_dim_const(2)) && !t->dims[1 + r4].e &&
                 ir_dim_eq(t->dims[2 + r4], ir_dim_const(hd)) && !x->dims[1].e &&
                 a.rope_start >= 0 && t->dims[1 + r4].k <= x->dims[1].k - a.rope_start;
        if (!ok) {
            char tt[96];
            FAIL(c, "Attention's rotary table is %s, not f32[2, R, %lld] or f32[2, %lld, R, %lld] with rope_start %lld + R "
                 "at most the %s tokens", ir_value_type_str(t, tt, sizeof tt), (long long)hd, (long long)h, (long long)hd,
                 (long long)a.rope_start, dimstr(x->dims[1], s1));
        }
    }
    ir_dim r[3] = {x->dims[0], nq, ir_dim_const(h * hd)};
    out_set(c, 0, x->dtype, 3, r);
    return VITC_OK;
}

/* Size: the element count, an int64 scalar; its value in terms of the batch. */
static int infer_size(ctx *c)
{
    ir_value *x = in(c, 0);
    ir_dim n = ir_dim_const(1);
    for (int i = 0; i < x->rank; i++)
        if (!sym_mul(n, x->dims[i], &n))
            FAIL(c, "the element count overflows");
    ir_value *o = out_set(c, 0, IR_I64, 0, &n); /* a scalar: no dims read */
    set_symval(c, o, &n, 1);
    return VITC_OK;
}

/* Tile(x, repeats): dimension i repeated repeats[i] times (a number, or
 * the batch: SigLIP repeats its probe per image). */
static int infer_tile(ctx *c)
{
    ir_value *x = in(c, 0);
    int n;
    const ir_dim *r = known(c, c->n->inputs[1], &n);
    if (!r)
        FAIL(c, "the repeats must be known at compile time");
    if (n != x->rank || in(c, 1)->rank != 1)
        FAIL(c, "repeats must be 1-D with one entry per dimension of the input (%d), not %d", x->rank, n);
    ir_dim d[IR_MAX_RANK];
    for (int i = 0; i < n; i++) {
        if (r[i].k < 0)
            FAIL(c, "repeat %d is negative (%lld)", i, (long long)r[i].k);
        if (!sym_mul(x->dims[i], r[i], &d[i]))
            FAIL(c, "dimension %d overflows", i);
    }
    out_set(c, 0, x->dtype, x->rank, d);
    return VITC_OK;
}

/* GatherND(data, indices), batch_dims b: indices' last dimension m picks
 * m coordinates after the b batch dimensions; the output is
 * indices.shape[:-1] + data.shape[b + m:]. */
static int infer_gather_nd(ctx *c)
{
    ir_value *x = in(c, 0), *idx = in(c, 1);
    int64_t b = ir_attr_int(c->n, IR_ATTR_BATCH_DIMS, 0);
    char s1[48], s2[48];
    if (idx->dtype != IR_I64 && idx->dtype != IR_I32)
        FAIL(c, "indices must be int64 or int32");
    if (x->rank < 1 || idx->rank < 1 || b < 0 || b >= x->rank || b >= idx->rank)
        FAIL(c, "data (rank %d) and indices (rank %d) need rank >= 1 and more than batch_dims (%lld)", x->rank,
             idx->rank, (long long)b);
    ir_dim last = idx->dims[idx->rank - 1];
    if (!is_static(last) || last.k < 1 || last.k > x->rank - b)
        FAIL(c, "the last dimension of indices is %s; it must be 1 to %lld (data's rank less batch_dims)",
             dimstr(last, s1), (long long)(x->rank - b));
    for (int i = 0; i < b; i++)
        if (!ir_dim_eq(x->dims[i], idx->dims[i]))
            FAIL(c, "batch dimension %d is %s in data and %s in indices", i, dimstr(x->dims[i], s1),
                 dimstr(idx->dims[i], s2));
    int r = idx->rank - 1 + x->rank - (int)b - (int)last.k;
    if (r > IR_MAX_RANK)
        FAIL(c, "result rank exceeds %d", IR_MAX_RANK);
    ir_dim d[IR_MAX_RANK];
    int k = 0;
    for (int i = 0; i < idx->rank - 1; i++)
        d[k++] = idx->dims[i];
    for (int i = (int)(b + last.k); i < x->rank; i++)
        d[k++] = x->dims[i];
    out_set(c, 0, x->dtype, r, d);
    return VITC_OK;
}

/* ScatterND(data, indices, updates): shaped like data; updates must be
 * indices.shape[:-1] + data.shape[m:], m the last dimension of indices. */
static int infer_scatter_nd(ctx *c)
{
    ir_value *x = in(c, 0), *idx = in(c, 1), *u = in(c, 2);
    const ir_attr *red = ir_attr_get(c->n, IR_ATTR_REDUCTION);
    char s1[48], t1[96], t2[96];
    if (red && (red->kind != IR_AT_STRING ||
                (strcmp(red->s, "none") && strcmp(red->s, "add") && strcmp(red->s, "mul") && strcmp(red->s, "max") &&
                 strcmp(red->s, "min"))))
        FAIL(c, "reduction '%s' is not supported", red->kind == IR_AT_STRING ? red->s : "?");
    if (idx->dtype != IR_I64 && idx->dtype != IR_I32)
        FAIL(c, "indices must be int64 or int32");
    if (u->dtype != x->dtype)
        FAIL(c, "updates are %s but data is %s", ir_dtype_name(u->dtype), ir_dtype_name(x->dtype));
    ir_dim m = idx->rank >= 1 ? idx->dims[idx->rank - 1] : ir_dim_const(-1);
    if (x->rank < 1 || idx->rank < 1 || !is_static(m) || m.k < 1 || m.k > x->rank)
        FAIL(c, "the last dimension of indices is %s; it must be 1 to data's rank %d",
             idx->rank >= 1 ? dimstr(m, s1) : "missing", x->rank);
    int ok = u->rank == idx->rank - 1 + x->rank - (int)m.k;
    for (int i = 0; ok && i < idx->rank - 1; i++)
        ok = ir_dim_eq(u->dims[i], idx->dims[i]);
    for (int i = (int)m.k; ok && i < x->rank; i++)
        ok = ir_dim_eq(u->dims[idx->rank - 1 + i - m.k], x->dims[i]);
    if (!ok)
        FAIL(c, "updates are %s; with indices %s they must be indices' shape but the last, then data's after "
             "dimension %lld", ir_value_type_str(u, t1, sizeof t1), ir_value_type_str(idx, t2, sizeof t2),
             (long long)m.k);
    out_set(c, 0, x->dtype, x->rank, x->dims);
    return VITC_OK;
}

/* Pad(x, pads, constant_value?, axes?): pads [begins..., ends...] over the
 * axes (all of them without axes); negative pads crop. */
static int infer_pad(ctx *c)
{
    ir_value *x = in(c, 0);
    const ir_attr *mode = ir_attr_get(c->n, IR_ATTR_MODE);
    if (mode && (mode->kind != IR_AT_STRING || (strcmp(mode->s, "constant") && strcmp(mode->s, "reflect") &&
                                                strcmp(mode->s, "edge") && strcmp(mode->s, "wrap"))))
        FAIL(c, "mode '%s' is not supported", mode->kind == IR_AT_STRING ? mode->s : "?");
    int64_t pads[2 * IR_MAX_RANK], axes[IR_MAX_RANK];
    int np = known_ints(c, c->n->inputs[1], pads, 2 * IR_MAX_RANK), na = x->rank;
    if (np < 0)
        FAIL(c, "the pads must be known at compile time");
    if (ir_input(c->n, 3) >= 0) {
        if ((na = known_ints(c, c->n->inputs[3], axes, IR_MAX_RANK)) < 0)
            FAIL(c, "the axes must be known at compile time");
    } else {
        for (int i = 0; i < na; i++)
            axes[i] = i;
    }
    if (np != 2 * na)
        FAIL(c, "pads has %d entries for %d axes; it needs two per axis", np, na);
    if (ir_input(c->n, 2) >= 0 && (in(c, 2)->dtype != x->dtype || numel_static(in(c, 2)) != 1))
        FAIL(c, "constant_value must be one value of the input's type");
    ir_dim d[IR_MAX_RANK];
    memcpy(d, x->dims, sizeof d);
    int seen[IR_MAX_RANK] = {0};
    for (int i = 0; i < na; i++) {
        int a = norm_axis(axes[i], x->rank);
        if (a < 0 || seen[a])
            FAIL(c, "axis %lld is out of range or repeated", (long long)axes[i]);
        seen[a] = 1;
        int64_t add;
        if (ir_add_ovf(pads[i], pads[i + na], &add) || (add && !is_static(x->dims[a])) ||
            ir_add_ovf(x->dims[a].k, add, &d[a].k) || d[a].k < 0)
            FAIL(c, "axis %d cannot be padded by %lld and %lld%s", a, (long long)pads[i], (long long)pads[i + na],
                 is_static(x->dims[a]) ? "" : " (it is the batch)");
    }
    out_set(c, 0, x->dtype, x->rank, d);
    return VITC_OK;
}

/* Softmax, BatchNormalization, Identity, Dropout: the output is shaped like
 * input 0 (Dropout's mask too). */
static int infer_same(ctx *c)
{
    const ir_node *n = c->n;
    ir_value *x = in(c, 0);
    if (n->op == IR_OP_SOFTMAX && norm_axis(ir_attr_int(n, IR_ATTR_AXIS, -1), x->rank) < 0)
        FAIL(c, "axis is out of range");
    if (n->op == IR_OP_BATCHNORM && (x->rank < 2 || ir_attr_int(n, IR_ATTR_TRAINING_MODE, 0)))
        FAIL(c, "BatchNormalization needs rank >= 2 and inference mode");
    ir_value *o = out_set(c, 0, x->dtype, x->rank, x->dims);
    if (o && x->symval)
        set_symval(c, o, x->symval, x->nsymval);
    out_set(c, 1, IR_BOOL, x->rank, x->dims); /* Dropout's mask */
    return VITC_OK;
}

/* The shape rule of every op that is not element-wise (OPF_ELEMWISE ops all
 * take infer_elementwise).  Constant has none: the frontend folds it. */
static int (*const rules[IR_OP_COUNT])(ctx *c) = {
    [IR_OP_MATMUL] = infer_matmul,
    [IR_OP_GEMM] = infer_gemm,
    [IR_OP_SHAPE] = infer_shape_op,
    [IR_OP_RESHAPE] = infer_reshape,
    [IR_OP_UNSQUEEZE] = infer_unsqueeze,
    [IR_OP_SQUEEZE] = infer_squeeze,
    [IR_OP_CONCAT] = infer_concat,
    [IR_OP_GATHER] = infer_gather,
    [IR_OP_SLICE] = infer_slice,
    [IR_OP_TRANSPOSE] = infer_transpose,
    [IR_OP_REDUCE_MAX] = infer_reduce,
    [IR_OP_REDUCE_MEAN] = infer_reduce,
    [IR_OP_REDUCE_SUM] = infer_reduce,
    [IR_OP_REDUCE_MIN] = infer_reduce,
    [IR_OP_SPLIT] = infer_split,
    [IR_OP_EXPAND] = infer_expand,
    [IR_OP_RESIZE] = infer_resize,
    [IR_OP_CONSTANT_OF_SHAPE] = infer_constant_of_shape,
    [IR_OP_RANGE] = infer_range,
    [IR_OP_FLATTEN] = infer_flatten,
    [IR_OP_CONV] = infer_conv,
    [IR_OP_EINSUM] = infer_einsum,
    [IR_OP_LAYERNORM] = infer_norm,
    [IR_OP_RMS_NORM] = infer_norm,
    [IR_OP_LINEAR] = infer_linear,
    [IR_OP_LINEAR_INT8] = infer_linear,
    [IR_OP_DYNAMIC_FAKE_QUANT] = infer_same,
    [IR_OP_QUANT_LOOKUP] = infer_same,
    [IR_OP_ATTENTION] = infer_attention,
    [IR_OP_SOFTMAX] = infer_same,
    [IR_OP_BATCHNORM] = infer_same,
    [IR_OP_IDENTITY] = infer_same,
    [IR_OP_DROPOUT] = infer_same,
    [IR_OP_SIZE] = infer_size,
    [IR_OP_TILE] = infer_tile,
    [IR_OP_GATHER_ND] = infer_gather_nd,
    [IR_OP_SCATTER_ND] = infer_scatter_nd,
    [IR_OP_PAD] = infer_pad,
    [IR_OP_QUANTIZE_LINEAR] = infer_quantize,
    [IR_OP_DEQUANTIZE_LINEAR] = infer_dequantize,
    [IR_OP_DYNAMIC_QUANTIZE_LINEAR] = infer_dynamic_quantize,
    [IR_OP_MATMUL_INTEGER] = infer_qmatmul,
    [IR_OP_QLINEAR_MATMUL] = infer_qmatmul,
    [IR_OP_CONV_INTEGER] = infer_qconv,
    [IR_OP_QLINEAR_CONV] = infer_qconv,
    [IR_OP_QLINEAR_ADD] = infer_qlinear_binary,
    [IR_OP_QLINEAR_MUL] = infer_qlinear_binary,
    [IR_OP_QLINEAR_SOFTMAX] = infer_qlinear_softmax,
    [IR_OP_QLINEAR_CONCAT] = infer_qlinear_concat,
    [IR_OP_QGEMM] = infer_qgemm,
    [IR_OP_CONSTANT] = NULL,
    [IR_OP_IF] = NULL, /* replaced by the branch it picks before a rule would run (ir_infer_shapes_from) */
    /* element-wise without a formula: infer_elementwise */
    [IR_OP_CAST] = NULL,
    [IR_OP_CAST_LIKE] = NULL,
    [IR_OP_CLIP] = NULL,
};
_Static_assert(IR_OP_COUNT - IR_EW_COUNT == 55, "rules[]: one line per op without a formula in elemwise.def");

static int infer_node(ctx *c)
{
    const ir_node *n = c->n;
    for (int i = 0; i < n->ninputs; i++)
        if (n->inputs[i] >= 0 && c->g->values[n->inputs[i]].rank < 0)
            FAIL(c, "input %d ('%s') has no inferred shape", i, c->g->values[n->inputs[i]].name);
    if (ir_op_table[n->op].flags & OPF_ELEMWISE)
        return infer_elementwise(c);
    if (!rules[n->op])
        return vitc_error(c->d, VITC_INTERNAL, n, "no shape rule for %s", ir_op_name(n->op));
    return rules[n->op](c);
}

/* Refuses an output that would hold more than 4 GiB for one image (batch 1):
 * no stage after this one has to guard its size arithmetic against it. */
static int check_output_sizes(ctx *c)
{
    for (int k = 0; k < c->n->noutputs; k++) {
        if (c->n->outputs[k] < 0)
            continue;
        const ir_value *v = &c->g->values[c->n->outputs[k]];
        int64_t bytes = (int64_t)ir_dtype_size(v->dtype);
        for (int i = 0; i < v->rank; i++)
            if (ir_mul_ovf(bytes, v->dims[i].k, &bytes) || bytes > ((int64_t)4 << 30))
                FAIL(c, "output '%s' would hold more than 4 GiB for one image", v->name);
    }
    return VITC_OK;
}

/* ---- values known at compile time, computed by the interpreter ----
 * A node whose inputs are all known numbers (constants, symval free of the
 * batch, kval) and whose output is small is evaluated by the reference
 * interpreter, with its exact semantics (truncating integer Div, Cast,
 * Pow...): a float result goes to kval, where the next evaluation finds it,
 * an integer one to symval, where Reshape, Slice, Expand and the rest find
 * their targets.  So shape arithmetic written in floats (HF Dinov2 takes the
 * square root of its patch count through Pow and Cast) is known like the
 * integer arithmetic sym_folds follow with the batch in it. */
enum { KNOWN_CONST_MAX = 4096 }; /* largest constant read as an input */

static int known_tensor(const ir_graph *g, int id, ir_tensor *t)
{
    const ir_value *v = &g->values[id];
    int64_t dims[IR_MAX_RANK], n = numel_static(v);
    if (v->rank < 0 || n < 0 || n > (v->kind == IR_VAL_CONST ? KNOWN_CONST_MAX : SYMVAL_MAX))
        return 0;
    for (int i = 0; i < v->rank; i++)
        dims[i] = v->dims[i].k;
    int from_const = v->kind == IR_VAL_CONST && !v->symval && v->data;
    if (!(v->kval && v->nkval == n) && !(v->symval && v->nsymval == n) && !from_const)
        return 0;
    for (int i = 0; v->symval && i < v->nsymval; i++)
        if (!is_static(v->symval[i]))
            return 0;
    if (ir_tensor_alloc(t, v->dtype, v->rank, dims))
        return 0;
    if (from_const && ir_tensor_nbytes(t) != v->nbytes) {
        ir_tensor_free(t);
        return 0;
    }
    for (int64_t i = 0; i < n; i++)
        if (v->kval)
            ir_tensor_set(t, i, v->kval[i]);
        else if (v->symval)
            ir_tensor_set_i64(t, i, v->symval[i].k);
    if (from_const && !v->kval)
        memcpy(t->data, v->data, v->nbytes);
    return 1;
}

static void evaluate_known(ctx *c)
{
    const ir_node *n = c->n;
    ir_graph *g = c->g;
    if (n->noutputs != 1 || n->outputs[0] < 0)
        return;
    ir_value *o = &g->values[n->outputs[0]];
    int64_t cnt = numel_static(o);
    if (o->symval || cnt < 0 || cnt > SYMVAL_MAX)
        return;
    ir_tensor in[n->ninputs + 1], out[2];
    memset(in, 0, sizeof in);
    memset(out, 0, sizeof out);
    int ok = 1;
    for (int k = 0; k < n->ninputs && ok; k++)
        ok = n->inputs[k] < 0 || known_tensor(g, n->inputs[k], &in[k]);
    /* a failure here is reported where the node runs, as without this */
    if (ok && ir_interp_eval(g, n, in, out) == VITC_OK) {
        if (ir_tensor_numel(&out[0]) == cnt && out[0].dtype == o->dtype && ir_dtype_is_float(o->dtype)) {
            o->kval = ir_alloc_array(g->arena, (size_t)cnt + 1, sizeof(double));
            for (int64_t i = 0; o->kval && i < cnt; i++)
                o->kval[i] = ir_tensor_get(&out[0], i);
            o->nkval = o->kval ? (int)cnt : 0;
        } else if (ir_tensor_numel(&out[0]) == cnt && out[0].dtype == o->dtype) {
            ir_dim vals[SYMVAL_MAX];
            for (int64_t i = 0; i < cnt; i++)
                vals[i] = ir_dim_const(ir_tensor_get_i64(&out[0], i));
            set_symval(c, o, vals, (int)cnt);
        }
        ir_tensor_free(&out[0]);
    }
    for (int k = 0; k < n->ninputs; k++)
        ir_tensor_free(&in[k]);
}

/* If node i: its condition known at compile time picks the branch whose
 * nodes are appended to replace it (ir_inline_if, *first the first of
 * them); the other is never looked at. */
static int pick_branch(ctx *c, int i, int *first)
{
    int cond = c->n->inputs[0];
    ir_tensor t = {0};
    if (cond < 0 || c->g->values[cond].rank < 0)
        FAIL(c, "its condition has no inferred shape");
    if (!known_tensor(c->g, cond, &t))
        FAIL(c, "If whose condition is computed at run time is not supported: vitc compiles one branch, so the "
                "condition must be known at compile time (computed from shapes and constants)");
    int64_t n = ir_tensor_numel(&t);
    int take_then = n == 1 && ir_tensor_get(&t, 0) != 0;
    ir_tensor_free(&t);
    if (n != 1)
        FAIL(c, "its condition has %lld elements; an If takes one", (long long)n);
    return ir_inline_if(c->g, i, take_then, first, c->d);
}

/* One node that is not an If. */
static int infer_one(ctx *c)
{
    int status = infer_node(c);
    if (status == VITC_OK)
        status = check_output_sizes(c);
    if (status == VITC_OK)
        evaluate_known(c);
    return status;
}

/* Shape inference over a graph with Ifs from node start on: the nodes in a
 * list (next[]), where an If's branch, appended to the node array, is
 * linked in its place and inferred next; then the array is put in the
 * list's order, the Ifs gone, and every producer set again. */
static int infer_with_branches(ctx *c, int start)
{
    ir_graph *g = c->g;
    int cap = g->nnodes + 64, head = 0, prev = start - 1, status = VITC_OK;
    int *next = malloc(sizeof(int) * (size_t)cap);
    if (!next)
        return vitc_error(c->d, VITC_INTERNAL, NULL, "out of memory");
    for (int i = 0; i < g->nnodes; i++)
        next[i] = i + 1 < g->nnodes ? i + 1 : -1;
    for (int i = start; i >= 0 && status == VITC_OK;) {
        c->n = &g->nodes[i];
        if (c->n->op != IR_OP_IF) {
            status = infer_one(c);
            prev = i;
            i = next[i];
            continue;
        }
        int first, before = g->nnodes;
        status = pick_branch(c, i, &first);
        if (g->nnodes > cap) {
            int *more = realloc(next, sizeof(int) * (size_t)(cap = g->nnodes + cap));
            if (!more) {
                free(next);
                return vitc_error(c->d, VITC_INTERNAL, NULL, "out of memory");
            }
            next = more;
        }
        if (status)
            break; /* the nodes appended are linked nowhere: dropped below */
        for (int k = before; k < g->nnodes; k++)
            next[k] = k + 1 < g->nnodes ? k + 1 : next[i];
        int repl = g->nnodes > before ? before : next[i];
        if (prev >= 0)
            next[prev] = repl;
        else
            head = repl;
        i = repl;
    }
    ir_node *order = malloc(sizeof(ir_node) * ((size_t)g->nnodes + 1));
    if (!order) {
        free(next);
        return vitc_error(c->d, VITC_INTERNAL, NULL, "out of memory");
    }
    int n = 0;
    for (int i = head; i >= 0; i = next[i])
        if (g->nodes[i].op != IR_OP_IF || status) /* an If not reached stays, for the error to name */
            order[n++] = g->nodes[i];
    memcpy(g->nodes, order, sizeof(ir_node) * (size_t)n);
    g->nnodes = n;
    free(order);
    free(next);
    for (int v = 0; v < g->nvalues; v++)
        if (g->values[v].kind == IR_VAL_NODE)
            g->values[v].producer = -1;
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i].noutputs; k++)
            if (g->nodes[i].outputs[k] >= 0 && g->nodes[i].outputs[k] < g->nvalues)
                g->values[g->nodes[i].outputs[k]].producer = i;
    return status;
}

int ir_infer_shapes(ir_graph *g, vitc_diag *d) { return ir_infer_shapes_from(g, 0, d); }

int ir_infer_shapes_from(ir_graph *g, int start, vitc_diag *d)
{
    ctx c = {.g = g, .d = d};
    int status = VITC_OK, branches = 0;
    start = start > 0 ? start : 0;
    for (int i = start; i < g->nnodes && !branches; i++)
        branches = g->nodes[i].op == IR_OP_IF;
    if (branches)
        return infer_with_branches(&c, start);
    for (int i = start; i < g->nnodes && status == VITC_OK; i++) {
        c.n = &g->nodes[i];
        status = infer_one(&c);
    }
    return status;
}
