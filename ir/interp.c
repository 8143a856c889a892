/* interp.c: the reference interpreter's driver.
 *
 * Checks the caller's tensors against the graph inputs (one batch size for
 * all), runs the nodes in order through the kernels of interp_elem.c,
 * interp_data.c, interp_math.c and interp_einsum.c, hands each result to the
 * observer, and frees every intermediate tensor after its last use so that a
 * ViT-B run stays within a few hundred MB.  It also owns the helpers the
 * kernels share (allocation, broadcasting, the odometer). */
#include "ir/einsum.h"
#include "ir/opview.h"
#include "ir/interp_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers shared by the kernels ---- */

int ik_fail(ik_ctx *c, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vitc_verror(c->d, status, c->n, fmt, ap);
    va_end(ap);
    return status;
}

const ir_tensor *ik_in(const ik_ctx *c, int i) { return i >= 0 && i < c->nin ? c->in[i] : NULL; }

const char *ik_dims_str(int rank, const int64_t *dims, char *buf, size_t n)
{
    size_t off = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < rank && off < n; i++)
        off += (size_t)snprintf(buf + off, n - off, "%s%lld", i ? "," : "", (long long)dims[i]);
    if (off < n)
        snprintf(buf + off, n - off, "]");
    return buf;
}

const char *ik_type_str(const ir_tensor *t, char *buf, size_t n)
{
    size_t off = (size_t)snprintf(buf, n, "%s", ir_dtype_name(t->dtype));
    if (off < n)
        ik_dims_str(t->rank, t->dims, buf + off, n - off);
    return buf;
}

int ik_alloc(ik_ctx *c, ir_tensor *t, ir_dtype dt, int rank, const int64_t *dims)
{
    int st = ir_tensor_alloc(t, dt, rank, dims);
    if (st == VITC_OK)
        return VITC_OK;
    char buf[160];
    if (st == VITC_INTERNAL)
        return ik_fail(c, st, "out of memory for a %s%s result", ir_dtype_name(dt),
                       ik_dims_str(rank, dims, buf, sizeof buf));
    return ik_fail(c, st, "result %s%s is too big (over 4 GiB) or malformed", ir_dtype_name(dt),
                   ik_dims_str(rank, dims, buf, sizeof buf));
}

int ik_copy(ik_ctx *c, ir_tensor *dst, const ir_tensor *src)
{
    int st = ik_alloc(c, dst, src->dtype, src->rank, src->dims);
    if (st == VITC_OK && ir_tensor_nbytes(src))
        memcpy(dst->data, src->data, ir_tensor_nbytes(src));
    return st;
}

/* t's elements as doubles, or (ints) as int64s, in a malloc'ed array; NULL
 * with c's error set when memory runs out. */
static void *ik_load(ik_ctx *c, const ir_tensor *t, int ints)
{
    _Static_assert(sizeof(double) == sizeof(int64_t), "one element size for both loads");
    int64_t n = ir_tensor_numel(t);
    void *p = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    if (!p) {
        ik_fail(c, VITC_INTERNAL, "out of memory");
        return NULL;
    }
    for (int64_t i = 0; i < n; i++)
        if (ints)
            ((int64_t *)p)[i] = ir_tensor_get_i64(t, i);
        else
            ((double *)p)[i] = ir_tensor_get(t, i);
    return p;
}

double *ik_load_f64(ik_ctx *c, const ir_tensor *t) { return ik_load(c, t, 0); }
int64_t *ik_load_i64(ik_ctx *c, const ir_tensor *t) { return ik_load(c, t, 1); }

int ik_axis(ik_ctx *c, int64_t axis, int rank, int inclusive_end, int *out)
{
    int64_t hi = inclusive_end ? rank : rank - 1;
    if (axis < -(int64_t)rank || axis > hi)
        return ik_fail(c, VITC_BAD_INPUT, "axis %lld is out of range for rank %d", (long long)axis, rank);
    *out = (int)(axis < 0 ? axis + rank : axis);
    return VITC_OK;
}

int ik_int_list(ik_ctx *c, const ir_tensor *t, const char *what, int64_t *vals, int max, int *n)
{
    if (t->dtype != IR_I64 && t->dtype != IR_I32)
        return ik_fail(c, VITC_BAD_INPUT, "%s must be int64 or int32, not %s", what, ir_dtype_name(t->dtype));
    if (t->rank > 1)
        return ik_fail(c, VITC_BAD_INPUT, "%s must be 1-D, not rank %d", what, t->rank);
    int64_t cnt = ir_tensor_numel(t);
    if (cnt > max)
        return ik_fail(c, VITC_BAD_INPUT, "%s has %lld elements, more than %d", what, (long long)cnt, max);
    for (int64_t i = 0; i < cnt; i++)
        vals[i] = ir_tensor_get_i64(t, i);
    *n = (int)cnt;
    return VITC_OK;
}

int ik_same_dtype(ik_ctx *c, int n, const ir_tensor *const *ts)
{
    for (int i = 1; i < n; i++)
        if (ts[i] && ts[i]->dtype != ts[0]->dtype)
            return ik_fail(c, VITC_BAD_INPUT, "input %d is %s but input 0 is %s; they must have one type", i,
                           ir_dtype_name(ts[i]->dtype), ir_dtype_name(ts[0]->dtype));
    return VITC_OK;
}

int ik_broadcast(ik_ctx *c, int n, const int *ranks, const int64_t (*dims)[IR_MAX_RANK], int *rank,
                 int64_t *out_dims)
{
    int r = 0;
    for (int i = 0; i < n; i++)
        if (ranks[i] > r)
            r = ranks[i];
    for (int j = 0; j < r; j++) { /* j-th dimension from the right */
        int64_t d = 1;
        for (int i = 0; i < n; i++) {
            if (j >= ranks[i])
                continue;
            int64_t td = dims[i][ranks[i] - 1 - j];
            if (td == 1 || td == d)
                continue;
            if (d != 1) {
                char a[160], b[160];
                return ik_fail(c, VITC_BAD_INPUT, "shapes %s and %s do not broadcast",
                               ik_dims_str(ranks[0], dims[0], a, sizeof a), ik_dims_str(ranks[i], dims[i], b, sizeof b));
            }
            d = td;
        }
        out_dims[r - 1 - j] = d;
    }
    *rank = r;
    return VITC_OK;
}

int ik_broadcast_tensors(ik_ctx *c, int n, const ir_tensor *const *ts, int *rank, int64_t *dims)
{
    int ranks[IK_MAX_OPERANDS];
    int64_t d[IK_MAX_OPERANDS][IR_MAX_RANK];
    for (int i = 0; i < n; i++) {
        ranks[i] = ts[i]->rank;
        memcpy(d[i], ts[i]->dims, sizeof d[i]);
    }
    return ik_broadcast(c, n, ranks, (const int64_t(*)[IR_MAX_RANK])d, rank, dims);
}

void ik_strides(int rank, const int64_t *dims, int64_t *strides)
{
    int64_t s = 1;
    for (int i = rank - 1; i >= 0; i--) {
        strides[i] = s;
        s *= dims[i];
    }
}

void ik_bcast_strides(int trank, const int64_t *tdims, int rank, const int64_t *dims, int64_t *strides)
{
    int64_t ts[IR_MAX_RANK];
    ik_strides(trank, tdims, ts);
    for (int i = 0; i < rank; i++) {
        int ti = i - (rank - trank);
        strides[i] = ti < 0 || (tdims[ti] == 1 && dims[i] != 1) ? 0 : ts[ti];
    }
}

void ik_iter_init(ik_iter *it, int rank, const int64_t *dims)
{
    memset(it, 0, sizeof *it);
    it->rank = rank;
    memcpy(it->dims, dims, (size_t)rank * sizeof *dims);
}

void ik_iter_add(ik_iter *it, const int64_t *strides, int64_t base)
{
    memcpy(it->strides[it->n], strides, (size_t)it->rank * sizeof *strides);
    it->off[it->n++] = base;
}

void ik_iter_next(ik_iter *it)
{
    for (int d = it->rank - 1; d >= 0; d--) {
        for (int k = 0; k < it->n; k++)
            it->off[k] += it->strides[k][d];
        if (++it->idx[d] < it->dims[d])
            return;
        for (int k = 0; k < it->n; k++)
            it->off[k] -= it->strides[k][d] * it->dims[d];
        it->idx[d] = 0;
    }
}

/* ---- what the interpreter supports ---- */

/* The constant value behind input i of n, or NULL. */
static const ir_value *const_input(const ir_graph *g, const ir_node *n, int i)
{
    int v = ir_input(n, i);
    return v >= 0 && v < g->nvalues && g->values[v].kind == IR_VAL_CONST ? &g->values[v] : NULL;
}

/* Per-op conditions beyond having a kernel; NULL: every node of the op runs. */

static int einsum_ok(const ir_graph *g, const ir_node *n)
{
    (void)g;
    ir_einsum eq;
    char why[128];
    return ir_einsum_of(n, &eq, why, sizeof why) == 0;
}

/* Conv, ConvInteger and QLinearConv: 1-D and 2-D, the auto_pad modes ik_conv_geom_of reads. */
static int conv_ok(const ir_graph *g, const ir_node *n)
{
    if (ir_auto_pad_of(n) < 0)
        return 0;
    const ir_attr *ks = ir_attr_get(n, IR_ATTR_KERNEL_SHAPE);
    if (ks && (ks->kind != IR_AT_INTS || ks->n < 1 || ks->n > 2))
        return 0;
    int w = ir_input(n, n->op == IR_OP_QLINEAR_CONV ? 3 : 1);
    int wrank = w >= 0 && w < g->nvalues ? g->values[w].rank : -1;
    return wrank < 0 || wrank == 3 || wrank == 4; /* 1-D and 2-D */
}

static int batchnorm_ok(const ir_graph *g, const ir_node *n)
{
    (void)g;
    return ir_attr_int(n, IR_ATTR_TRAINING_MODE, 0) == 0;
}

static int gelu_ok(const ir_graph *g, const ir_node *n)
{
    (void)g;
    return ir_gelu_act(n) != IR_ACT_NONE;
}

static int cast_ok(const ir_graph *g, const ir_node *n)
{
    (void)g;
    const ir_attr *a = ir_attr_get(n, IR_ATTR_TO);
    return a && a->kind == IR_AT_INT && a->i >= 0 && a->i < 1000 && ir_dtype_from_onnx((int)a->i) >= 0;
}

/* Training-mode dropout with a non-zero ratio is random. */
static int dropout_ok(const ir_graph *g, const ir_node *n)
{
    const ir_value *tm = const_input(g, n, 2), *ratio = const_input(g, n, 1);
    if (!tm || tm->nbytes < 1 || ((const unsigned char *)tm->data)[0] == 0)
        return 1;
    if (ir_input(n, 1) < 0)
        return 0; /* default ratio 0.5 */
    if (!ratio)
        return 1; /* decided at run time */
    if (ratio->dtype == IR_F32 && ratio->nbytes == sizeof(float)) {
        float r;
        memcpy(&r, ratio->data, sizeof r);
        return r == 0;
    }
    if (ratio->dtype == IR_F64 && ratio->nbytes == sizeof(double)) {
        double r;
        memcpy(&r, ratio->data, sizeof r);
        return r == 0;
    }
    return 1;
}

static int constant_of_shape_ok(const ir_graph *g, const ir_node *n)
{
    const ir_attr *a = ir_attr_get(n, IR_ATTR_VALUE);
    if (!a)
        return 1;
    return a->kind == IR_AT_TENSOR && a->tensor >= 0 && a->tensor < g->nvalues &&
           g->values[a->tensor].kind == IR_VAL_CONST;
}

static int linear_ok(const ir_graph *g, const ir_node *n)
{
    ir_linear v;
    char why[160];
    (void)g;
    return ir_linear_of(n, &v, why, sizeof why);
}

static int attention_ok(const ir_graph *g, const ir_node *n)
{
    ir_attention v;
    char why[160];
    (void)g;
    return ir_attention_of(n, &v, why, sizeof why);
}

/* Pad and ScatterND: the modes and reductions ik_pad and ik_scatter_nd implement. */
static int pad_ok(const ir_graph *g, const ir_node *n)
{
    (void)g;
    return ir_pad_mode(n) != 0;
}

static int scatter_nd_ok(const ir_graph *g, const ir_node *n)
{
    (void)g;
    return ir_scatter_nd_reduction(n) != '?';
}

/* Resize: the modes and attributes ik_resize implements (interp_resize.c). */
static int resize_ok(const ir_graph *g, const ir_node *n)
{
    (void)g;
    return ir_resize_supported(n, NULL, 0);
}

static int (*const checks[IR_OP_COUNT])(const ir_graph *g, const ir_node *n) = {
    [IR_OP_RESIZE] = resize_ok,
    [IR_OP_EINSUM] = einsum_ok,
    [IR_OP_CONV] = conv_ok,
    [IR_OP_CONV_INTEGER] = conv_ok,
    [IR_OP_QLINEAR_CONV] = conv_ok,
    [IR_OP_BATCHNORM] = batchnorm_ok,
    [IR_OP_GELU] = gelu_ok,
    [IR_OP_CAST] = cast_ok,
    [IR_OP_DROPOUT] = dropout_ok,
    [IR_OP_CONSTANT_OF_SHAPE] = constant_of_shape_ok,
    [IR_OP_LINEAR] = linear_ok,
    [IR_OP_LINEAR_INT8] = linear_ok,
    [IR_OP_ATTENTION] = attention_ok,
    [IR_OP_PAD] = pad_ok,
    [IR_OP_SCATTER_ND] = scatter_nd_ok,
};

/* The kernel of every op without a formula in elemwise.def (those run
 * ik_elem), and of Where, whose raw copies keep every dtype exact.  NULL:
 * the op never reaches the interpreter (the frontend turns Constant nodes
 * into values). */
static const ik_kernel kernels[IR_OP_COUNT] = {
    [IR_OP_WHERE] = ik_where,
    [IR_OP_CLIP] = ik_clip,
    [IR_OP_CAST] = ik_cast,
    [IR_OP_CAST_LIKE] = ik_cast,
    [IR_OP_IDENTITY] = ik_identity,
    [IR_OP_DROPOUT] = ik_dropout,
    [IR_OP_RESHAPE] = ik_reshape,
    [IR_OP_FLATTEN] = ik_flatten,
    [IR_OP_SQUEEZE] = ik_squeeze,
    [IR_OP_UNSQUEEZE] = ik_unsqueeze,
    [IR_OP_TRANSPOSE] = ik_transpose,
    [IR_OP_CONCAT] = ik_concat,
    [IR_OP_SPLIT] = ik_split,
    [IR_OP_SLICE] = ik_slice,
    [IR_OP_GATHER] = ik_gather,
    [IR_OP_EXPAND] = ik_expand,
    [IR_OP_RESIZE] = ik_resize,
    [IR_OP_SHAPE] = ik_shape,
    [IR_OP_CONSTANT_OF_SHAPE] = ik_constant_of_shape,
    [IR_OP_RANGE] = ik_range,
    [IR_OP_MATMUL] = ik_matmul,
    [IR_OP_GEMM] = ik_gemm,
    [IR_OP_CONV] = ik_conv,
    [IR_OP_EINSUM] = ik_einsum,
    [IR_OP_REDUCE_MAX] = ik_reduce,
    [IR_OP_REDUCE_MEAN] = ik_reduce,
    [IR_OP_REDUCE_SUM] = ik_reduce,
    [IR_OP_REDUCE_MIN] = ik_reduce,
    [IR_OP_SOFTMAX] = ik_softmax,
    [IR_OP_LAYERNORM] = ik_layernorm,
    [IR_OP_RMS_NORM] = ik_layernorm,
    [IR_OP_BATCHNORM] = ik_batchnorm,
    [IR_OP_LINEAR] = ik_linear,
    [IR_OP_LINEAR_INT8] = ik_linear_int8,
    [IR_OP_DYNAMIC_FAKE_QUANT] = ik_dynamic_fake_quant,
    [IR_OP_QUANT_LOOKUP] = ik_quant_lookup,
    [IR_OP_ATTENTION] = ik_attention,
    [IR_OP_SIZE] = ik_size,
    [IR_OP_TILE] = ik_tile,
    [IR_OP_PAD] = ik_pad,
    [IR_OP_GATHER_ND] = ik_gather_nd,
    [IR_OP_SCATTER_ND] = ik_scatter_nd,
    [IR_OP_QUANTIZE_LINEAR] = ik_quantize,
    [IR_OP_DEQUANTIZE_LINEAR] = ik_dequantize,
    [IR_OP_DYNAMIC_QUANTIZE_LINEAR] = ik_dynamic_quantize,
    [IR_OP_MATMUL_INTEGER] = ik_matmul_integer,
    [IR_OP_CONV_INTEGER] = ik_conv_integer,
    [IR_OP_QLINEAR_MATMUL] = ik_qlinear_matmul,
    [IR_OP_QLINEAR_CONV] = ik_qlinear_conv,
    [IR_OP_QLINEAR_ADD] = ik_qlinear_binary,
    [IR_OP_QLINEAR_MUL] = ik_qlinear_binary,
    [IR_OP_QLINEAR_SOFTMAX] = ik_qlinear_softmax,
    [IR_OP_QLINEAR_CONCAT] = ik_qlinear_concat,
    [IR_OP_QGEMM] = ik_qgemm,
    [IR_OP_CONSTANT] = NULL,
    [IR_OP_IF] = NULL, /* shape inference puts the branch it picks in its place */
};
/* Every op without a formula has its line above (Constant's and If's NULL included). */
_Static_assert(IR_OP_COUNT - IR_EW_COUNT == 55, "kernels[]: one entry per op without a formula in elemwise.def");

static ik_kernel kernel_for(ir_op op)
{
    if ((unsigned)op >= IR_OP_COUNT)
        return NULL;
    return kernels[op] ? kernels[op] : ir_ew(op) ? ik_elem : NULL;
}

int ir_interp_supports(const ir_graph *g, const ir_node *n)
{
    if (!kernel_for(n->op))
        return 0;
    return !checks[n->op] || checks[n->op](g, n);
}

/* ---- one node on its own ---- */

/* The kernel of c's node into *k; an error (c's) when the interpreter does
 * not run the node or its number of inputs or outputs is off. */
static int node_kernel(ik_ctx *c, ik_kernel *k)
{
    const ir_node *n = c->n;
    const ir_op_info *info = &ir_op_table[n->op];
    *k = kernel_for(n->op);
    if (!*k || !ir_interp_supports(c->g, n))
        return ik_fail(c, VITC_BAD_INPUT, "not supported by the reference interpreter");
    if (n->ninputs < info->min_in || (info->max_in != VAR && n->ninputs > info->max_in) || n->noutputs < 1 ||
        (info->max_out != VAR && n->noutputs > info->max_out))
        return ik_fail(c, VITC_INTERNAL, "has %d inputs and %d outputs", n->ninputs, n->noutputs);
    return VITC_OK;
}

int ir_interp_node(const ir_graph *g, const ir_node *n, const ir_tensor *in, ir_tensor *out, int64_t batch,
                   vitc_diag *d)
{
    const ir_op_info *info = &ir_op_table[n->op];
    const ir_tensor *ins[n->ninputs + 1];
    for (int j = 0; j < n->noutputs; j++)
        memset(&out[j], 0, sizeof out[j]);
    for (int j = 0; j < n->ninputs; j++)
        ins[j] = n->inputs[j] >= 0 ? &in[j] : NULL;
    ik_ctx c = {.g = g, .n = n, .d = d, .batch = batch, .in = ins, .nin = n->ninputs, .out = out};
    ik_kernel k;
    int st = node_kernel(&c, &k);
    if (st)
        return st;
    for (int j = 0; j < info->min_in; j++)
        if (!ins[j])
            return ik_fail(&c, VITC_BAD_INPUT, "input %d is required", j);
    st = k(&c);
    for (int j = 0; j < n->noutputs && st == VITC_OK; j++)
        if (n->outputs[j] >= 0 && !out[j].data)
            st = ik_fail(&c, VITC_INTERNAL, "output %d was not computed", j);
    if (st != VITC_OK)
        for (int j = 0; j < n->noutputs; j++)
            ir_tensor_free(&out[j]);
    return st;
}

int ir_interp_eval(const ir_graph *g, const ir_node *n, const ir_tensor *in, ir_tensor *out)
{
    if (ir_op_table[n->op].flags & OPF_FUSED)
        return VITC_BAD_INPUT;
    return ir_interp_eval_any(g, n, in, out);
}

int ir_interp_eval_any(const ir_graph *g, const ir_node *n, const ir_tensor *in, ir_tensor *out)
{
    if (!ir_interp_supports(g, n))
        return VITC_BAD_INPUT;
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    if (!mem)
        return VITC_INTERNAL;
    vitc_diag quiet;
    vitc_diag_init(&quiet, g->path);
    quiet.out = mem;
    int st = ir_interp_node(g, n, in, out, 1, &quiet);
    fclose(mem);
    free(text);
    return st;
}

/* ---- the driver ---- */

typedef struct {
    ir_tensor t;
    unsigned char live;     /* holds a tensor */
    unsigned char borrowed; /* data belongs to the caller or the graph */
} slot;

/* Checks the caller's inputs against the graph's declared dtypes and shapes
 * and finds the batch: the first dimension k*B (e == 1) fixes B. */
static int check_inputs(const ir_graph *g, const ir_tensor *inputs, int64_t *batch, vitc_diag *d)
{
    *batch = 1;
    int found = 0;
    for (int i = 0; i < g->ninputs && !found; i++) {
        const ir_value *v = &g->values[g->inputs[i]];
        const ir_tensor *t = &inputs[i];
        for (int j = 0; j < v->rank && j < t->rank && !found; j++) {
            if (v->dims[j].e == 1 && v->dims[j].k > 0 && t->dims[j] % v->dims[j].k == 0 && t->dims[j] > 0) {
                *batch = t->dims[j] / v->dims[j].k;
                found = 1;
            }
        }
    }
    int st = VITC_OK;
    for (int i = 0; i < g->ninputs; i++) {
        const ir_value *v = &g->values[g->inputs[i]];
        const ir_tensor *t = &inputs[i];
        int ok = t->dtype == v->dtype && (v->rank < 0 || t->rank == v->rank) && (t->data || ir_tensor_numel(t) == 0);
        for (int j = 0; ok && j < v->rank; j++)
            ok = ir_dim_eval(v->dims[j], *batch) == t->dims[j];
        if (!ok) {
            char want[256], got[256];
            st = vitc_error(d, VITC_BAD_INPUT, NULL, "input '%s': expected %s, got %s%s%s", v->name,
                            ir_value_type_str(v, want, sizeof want), ir_dtype_name(t->dtype),
                            ik_dims_str(t->rank, t->dims, got, sizeof got), t->data ? "" : " without data");
        }
    }
    return st;
}

/* A tensor view of a constant value (the graph keeps the data). */
static int const_view(const ir_graph *g, int v, int64_t batch, slot *s, vitc_diag *d)
{
    const ir_value *val = &g->values[v];
    ir_tensor *t = &s->t;
    memset(t, 0, sizeof *t);
    t->dtype = val->dtype;
    t->rank = val->rank;
    if (val->rank < 0 || val->rank > IR_MAX_RANK)
        return vitc_error(d, VITC_INTERNAL, NULL, "constant '%s' has no shape", val->name);
    for (int i = 0; i < val->rank; i++)
        t->dims[i] = ir_dim_eval(val->dims[i], batch);
    if ((size_t)ir_tensor_numel(t) * ir_dtype_size(t->dtype) != val->nbytes)
        return vitc_error(d, VITC_INTERNAL, NULL, "constant '%s' holds %zu bytes, not the %lld of its shape",
                          val->name, val->nbytes, (long long)ir_tensor_numel(t) * (long long)ir_dtype_size(t->dtype));
    /* A constant whose values depend on the batch (folded shape arithmetic):
     * its symval entries k * B^e, evaluated now. */
    int symbolic = 0;
    for (int i = 0; val->symval && i < val->nsymval; i++)
        symbolic |= val->symval[i].e != 0 && val->symval[i].k != 0;
    if (symbolic) {
        int64_t dims[IR_MAX_RANK];
        memcpy(dims, t->dims, sizeof dims);
        int st = ir_tensor_alloc(t, val->dtype, val->rank, dims);
        if (st)
            return vitc_error(d, st, NULL, "constant '%s': out of memory", val->name);
        for (int i = 0; i < val->nsymval && i < ir_tensor_numel(t); i++)
            ir_tensor_set_i64(t, i, ir_dim_eval(val->symval[i], batch));
        s->live = 1;
        s->borrowed = 0;
        return VITC_OK;
    }
    t->data = val->data;
    s->live = s->borrowed = 1;
    return VITC_OK;
}

static void release(slot *s)
{
    if (s->live && !s->borrowed)
        ir_tensor_free(&s->t);
    s->live = s->borrowed = 0;
}

/* Runs node i: gathers its inputs, calls the kernel, stores the outputs. */
static int run_node(const ir_graph *g, int i, slot *slots, int64_t batch, ir_interp_observer observer, void *ctx,
                    vitc_diag *d)
{
    const ir_node *n = &g->nodes[i];
    const ir_op_info *info = &ir_op_table[n->op];
    const ir_tensor *ins[n->ninputs + 1];
    ir_tensor outs[n->noutputs + 1];
    memset(outs, 0, sizeof outs);
    ik_ctx c = {.g = g, .n = n, .d = d, .batch = batch, .in = ins, .nin = n->ninputs, .out = outs};
    ik_kernel k;
    int st = node_kernel(&c, &k);
    if (st)
        return st;
    for (int j = 0; j < n->ninputs; j++) {
        int v = n->inputs[j];
        ins[j] = NULL;
        if (v < 0) {
            if (j < info->min_in)
                return ik_fail(&c, VITC_BAD_INPUT, "input %d is required", j);
            continue;
        }
        if (v >= g->nvalues)
            return ik_fail(&c, VITC_INTERNAL, "input %d refers to value %d of %d", j, v, g->nvalues);
        if (!slots[v].live && g->values[v].kind == IR_VAL_CONST) {
            st = const_view(g, v, batch, &slots[v], d);
            if (st)
                return st;
        }
        if (!slots[v].live)
            return ik_fail(&c, VITC_INTERNAL, "input '%s' has not been computed (graph not in topological order?)",
                           g->values[v].name);
        ins[j] = &slots[v].t;
    }
    st = k(&c);
    for (int j = 0; j < n->noutputs; j++) {
        int v = n->outputs[j];
        if (st == VITC_OK && v >= 0 && (v >= g->nvalues || slots[v].live || !outs[j].data))
            st = ik_fail(&c, VITC_INTERNAL, "output %d ('%s') %s", j, v < g->nvalues ? g->values[v].name : "?",
                         v >= g->nvalues ? "is out of range" : slots[v].live ? "is produced twice" : "was not computed");
        if (st != VITC_OK || v < 0) {
            ir_tensor_free(&outs[j]);
            continue;
        }
        slots[v].t = outs[j];
        slots[v].live = 1;
        slots[v].borrowed = 0;
        outs[j].data = NULL;
    }
    if (st != VITC_OK)
        return st;
    if (observer)
        for (int j = 0; j < n->noutputs; j++)
            if (n->outputs[j] >= 0)
                observer(ctx, g, i, n->outputs[j], &slots[n->outputs[j]].t);
    return VITC_OK;
}

int ir_interpret(const ir_graph *g, const ir_tensor *inputs, ir_tensor *outputs, ir_interp_observer observer,
                 void *ctx, vitc_diag *d)
{
    for (int i = 0; i < g->noutputs; i++)
        memset(&outputs[i], 0, sizeof outputs[i]);
    int64_t batch;
    int st = check_inputs(g, inputs, &batch, d);
    if (st)
        return st;
    int nv = g->nvalues;
    slot *slots = calloc((size_t)nv + 1, sizeof *slots);
    int *last_use = malloc(((size_t)nv + 1) * sizeof *last_use);
    if (!slots || !last_use) {
        free(slots);
        free(last_use);
        return vitc_error(d, VITC_INTERNAL, NULL, "out of memory");
    }
    /* last_use[v]: the last node reading v; INT_MAX for graph outputs. */
    for (int v = 0; v < nv; v++)
        last_use[v] = -1;
    for (int i = 0; i < g->nnodes; i++)
        for (int j = 0; j < g->nodes[i].ninputs; j++)
            if (g->nodes[i].inputs[j] >= 0 && g->nodes[i].inputs[j] < nv)
                last_use[g->nodes[i].inputs[j]] = i;
    for (int k = 0; k < g->noutputs; k++)
        if (g->outputs[k] >= 0 && g->outputs[k] < nv)
            last_use[g->outputs[k]] = g->nnodes;
    for (int i = 0; i < g->ninputs; i++) {
        slot *s = &slots[g->inputs[i]];
        s->t = inputs[i];
        s->live = s->borrowed = 1;
    }

    for (int i = 0; i < g->nnodes && st == VITC_OK; i++) {
        st = run_node(g, i, slots, batch, observer, ctx, d);
        if (st)
            break;
        const ir_node *n = &g->nodes[i];
        for (int j = 0; j < n->ninputs; j++)
            if (n->inputs[j] >= 0 && last_use[n->inputs[j]] <= i)
                release(&slots[n->inputs[j]]);
        for (int j = 0; j < n->noutputs; j++)
            if (n->outputs[j] >= 0 && last_use[n->outputs[j]] <= i)
                release(&slots[n->outputs[j]]);
    }

    /* Graph outputs: move each owned tensor to its last mention, copy otherwise. */
    for (int k = 0; k < g->noutputs && st == VITC_OK; k++) {
        int v = g->outputs[k];
        if (v >= 0 && v < nv && !slots[v].live && g->values[v].kind == IR_VAL_CONST)
            st = const_view(g, v, batch, &slots[v], d);
        if (st)
            break;
        if (v < 0 || v >= nv || !slots[v].live) {
            st = vitc_error(d, VITC_INTERNAL, NULL, "graph output %d ('%s') was not computed", k,
                            v >= 0 && v < nv ? g->values[v].name : "?");
            break;
        }
        int later = 0;
        for (int k2 = k + 1; k2 < g->noutputs; k2++)
            later |= g->outputs[k2] == v;
        if (!later && !slots[v].borrowed) {
            outputs[k] = slots[v].t;
            slots[v].live = 0;
            continue;
        }
        st = ir_tensor_alloc(&outputs[k], slots[v].t.dtype, slots[v].t.rank, slots[v].t.dims);
        if (st)
            vitc_error(d, st, NULL, "out of memory for graph output '%s'", g->values[v].name);
        else if (ir_tensor_nbytes(&slots[v].t))
            memcpy(outputs[k].data, slots[v].t.data, ir_tensor_nbytes(&slots[v].t));
    }
    for (int v = 0; v < nv; v++)
        release(&slots[v]);
    if (st)
        for (int k = 0; k < g->noutputs; k++)
            ir_tensor_free(&outputs[k]);
    free(slots);
    free(last_use);
    return st;
}
