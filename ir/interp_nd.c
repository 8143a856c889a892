/* interp_nd.c: the interpreter's kernels that index by coordinates: Tile,
 * Pad (constant, reflect, edge and wrap), GatherND and ScatterND (with its
 * reductions).  Elements move as raw bytes (ScatterND's reductions
 * excepted), so every dtype comes out exact. */
#include "ir/interp_impl.h"

#include <stdlib.h>
#include <string.h>

/* Tile(x, repeats): out[i] = x[i mod x.dims] along every axis. */
int ik_tile(ik_ctx *c)
{
    const ir_tensor *x = c->in[0];
    int64_t reps[IR_MAX_RANK], dims[IR_MAX_RANK];
    int n, st = ik_int_list(c, c->in[1], "repeats", reps, IR_MAX_RANK, &n);
    if (st)
        return st;
    if (n != x->rank || c->in[1]->rank != 1)
        return ik_fail(c, VITC_BAD_INPUT, "repeats has %d entries for an input of rank %d", n, x->rank);
    for (int i = 0; i < n; i++)
        if (reps[i] < 0 || ir_mul_ovf(x->dims[i], reps[i], &dims[i]))
            return ik_fail(c, VITC_BAD_INPUT, "repeat %d is %lld", i, (long long)reps[i]);
    if ((st = ik_alloc(c, &c->out[0], x->dtype, x->rank, dims)))
        return st;
    int64_t xs[IR_MAX_RANK], idx[IR_MAX_RANK] = {0}, cnt = ir_tensor_numel(&c->out[0]);
    ik_strides(x->rank, x->dims, xs);
    size_t es = ir_dtype_size(x->dtype);
    for (int64_t i = 0; i < cnt; i++) {
        int64_t off = 0;
        for (int a = 0; a < x->rank; a++)
            off += (idx[a] % x->dims[a]) * xs[a];
        memcpy((char *)c->out[0].data + (size_t)i * es, (const char *)x->data + (size_t)off * es, es);
        for (int a = x->rank - 1; a >= 0 && ++idx[a] == dims[a]; a--)
            idx[a] = 0;
    }
    return VITC_OK;
}

char ir_pad_mode(const ir_node *n)
{
    const ir_attr *a = ir_attr_get(n, IR_ATTR_MODE);
    if (!a)
        return 'c';
    if (a->kind != IR_AT_STRING)
        return 0;
    return strcmp(a->s, "constant") == 0 ? 'c' : strcmp(a->s, "reflect") == 0 ? 'r'
           : strcmp(a->s, "edge") == 0   ? 'e' : strcmp(a->s, "wrap") == 0    ? 'w' : 0;
}

char ir_scatter_nd_reduction(const ir_node *n)
{
    const ir_attr *a = ir_attr_get(n, IR_ATTR_REDUCTION);
    if (!a)
        return 0;
    if (a->kind != IR_AT_STRING)
        return '?';
    return strcmp(a->s, "none") == 0 ? 0 : strcmp(a->s, "add") == 0 ? '+' : strcmp(a->s, "mul") == 0 ? '*'
           : strcmp(a->s, "max") == 0 ? '>' : strcmp(a->s, "min") == 0 ? '<' : '?';
}

int64_t ir_pad_source(int64_t j, int64_t n, char m)
{
    if (j >= 0 && j < n)
        return j;
    if (m == 'c' || n == 0)
        return -1;
    if (m == 'e')
        return j < 0 ? 0 : n - 1;
    if (m == 'w')
        return ((j % n) + n) % n;
    if (n == 1) /* reflect */
        return 0;
    int64_t p = 2 * (n - 1), k = ((j % p) + p) % p;
    return k < n ? k : p - k;
}

/* Pad(x, pads, constant_value?, axes?): pads [begins..., ends...] over the
 * axes (every axis without them); a negative pad crops. */
int ik_pad(ik_ctx *c)
{
    const ir_tensor *x = c->in[0], *cv = ik_in(c, 2);
    int64_t pads[2 * IR_MAX_RANK], axes[IR_MAX_RANK], begin[IR_MAX_RANK] = {0}, dims[IR_MAX_RANK];
    int np, na = x->rank, st = ik_int_list(c, c->in[1], "pads", pads, 2 * IR_MAX_RANK, &np);
    if (st || (ik_in(c, 3) && (st = ik_int_list(c, ik_in(c, 3), "axes", axes, IR_MAX_RANK, &na))))
        return st;
    if (!ik_in(c, 3))
        for (int i = 0; i < na; i++)
            axes[i] = i;
    if (np != 2 * na)
        return ik_fail(c, VITC_BAD_INPUT, "pads has %d entries for %d axes; it needs two per axis", np, na);
    const ir_attr *ma = ir_attr_get(c->n, IR_ATTR_MODE);
    const char *mode = ma && ma->kind == IR_AT_STRING ? ma->s : "constant";
    char m = ir_pad_mode(c->n);
    if (!m)
        return ik_fail(c, VITC_BAD_INPUT, "mode '%s' is not supported", mode);
    if (cv && (cv->dtype != x->dtype || ir_tensor_numel(cv) != 1))
        return ik_fail(c, VITC_BAD_INPUT, "constant_value must be one value of the input's type");
    memcpy(dims, x->dims, sizeof dims);
    int seen[IR_MAX_RANK] = {0};
    for (int i = 0; i < na; i++) {
        int a;
        if ((st = ik_axis(c, axes[i], x->rank, 0, &a)))
            return st;
        int64_t add;
        if (seen[a] || ir_add_ovf(pads[i], pads[i + na], &add) || ir_add_ovf(x->dims[a], add, &dims[a]) || dims[a] < 0)
            return ik_fail(c, VITC_BAD_INPUT, "axis %d (of %lld) cannot be padded by %lld and %lld", a,
                           (long long)x->dims[a], (long long)pads[i], (long long)pads[i + na]);
        seen[a] = 1;
        begin[a] = pads[i];
    }
    if ((st = ik_alloc(c, &c->out[0], x->dtype, x->rank, dims)))
        return st;
    size_t es = ir_dtype_size(x->dtype);
    unsigned char fill[16] = {0};
    if (cv)
        memcpy(fill, cv->data, es);
    int64_t xs[IR_MAX_RANK], idx[IR_MAX_RANK] = {0}, cnt = ir_tensor_numel(&c->out[0]);
    ik_strides(x->rank, x->dims, xs);
    for (int64_t i = 0; i < cnt; i++) {
        int64_t off = 0;
        for (int a = 0; a < x->rank && off >= 0; a++) {
            int64_t j = ir_pad_source(idx[a] - begin[a], x->dims[a], m);
            off = j < 0 ? -1 : off + j * xs[a];
        }
        if (off < 0 && m != 'c')
            return ik_fail(c, VITC_BAD_INPUT, "an empty axis cannot be padded in mode '%s'", mode);
        memcpy((char *)c->out[0].data + (size_t)i * es, off < 0 ? (const void *)fill : (const char *)x->data + (size_t)off * es,
               es);
        for (int a = x->rank - 1; a >= 0 && ++idx[a] == dims[a]; a--)
            idx[a] = 0;
    }
    return VITC_OK;
}

/* The offset of the slice indices[j*m .. j*m + m) selects in x (a row of
 * `inner` elements after axis first + m), checked against x's dims. */
static int nd_offset(ik_ctx *c, const ir_tensor *x, const ir_tensor *idx, int64_t j, int first, int m,
                     const int64_t *xs, int64_t *off)
{
    for (int k = 0; k < m; k++) {
        int a = first + k;
        int64_t v = ir_tensor_get_i64(idx, j * m + k);
        if (v < -x->dims[a] || v >= x->dims[a])
            return ik_fail(c, VITC_BAD_INPUT, "index %lld is out of range for axis %d of size %lld", (long long)v, a,
                           (long long)x->dims[a]);
        *off += (v < 0 ? v + x->dims[a] : v) * xs[a];
    }
    return VITC_OK;
}

/* GatherND(data, indices), batch_dims b: for each index tuple (the last
 * axis of indices, m long) the slice of data it selects after the b batch
 * axes, which data and indices share. */
int ik_gather_nd(ik_ctx *c)
{
    const ir_tensor *x = c->in[0], *idx = c->in[1];
    int64_t b = ir_attr_int(c->n, IR_ATTR_BATCH_DIMS, 0);
    if (idx->dtype != IR_I64 && idx->dtype != IR_I32)
        return ik_fail(c, VITC_BAD_INPUT, "indices must be int64 or int32, not %s", ir_dtype_name(idx->dtype));
    if (x->rank < 1 || idx->rank < 1 || b < 0 || b >= x->rank || b >= idx->rank)
        return ik_fail(c, VITC_BAD_INPUT, "data (rank %d) and indices (rank %d) need rank >= 1 and more than "
                       "batch_dims (%lld)", x->rank, idx->rank, (long long)b);
    int64_t m = idx->dims[idx->rank - 1];
    if (m < 1 || m > x->rank - b)
        return ik_fail(c, VITC_BAD_INPUT, "the last dimension of indices is %lld; it must be 1 to %lld", (long long)m,
                       (long long)(x->rank - b));
    for (int i = 0; i < b; i++)
        if (x->dims[i] != idx->dims[i])
            return ik_fail(c, VITC_BAD_INPUT, "batch dimension %d is %lld in data and %lld in indices", i,
                           (long long)x->dims[i], (long long)idx->dims[i]);
    int rank = idx->rank - 1 + x->rank - (int)b - (int)m, k = 0, st;
    if (rank > IR_MAX_RANK)
        return ik_fail(c, VITC_BAD_INPUT, "the result would have rank %d, more than %d", rank, IR_MAX_RANK);
    int64_t dims[IR_MAX_RANK], xs[IR_MAX_RANK], batches = 1, inner = 1;
    for (int i = 0; i < idx->rank - 1; i++)
        dims[k++] = idx->dims[i];
    for (int i = (int)(b + m); i < x->rank; i++) {
        dims[k++] = x->dims[i];
        inner *= x->dims[i];
    }
    for (int i = 0; i < b; i++)
        batches *= x->dims[i];
    if ((st = ik_alloc(c, &c->out[0], x->dtype, rank, dims)))
        return st;
    ik_strides(x->rank, x->dims, xs);
    int64_t tuples = ir_tensor_numel(idx) / m, per = batches ? tuples / batches : 0;
    size_t row = (size_t)inner * ir_dtype_size(x->dtype);
    for (int64_t j = 0; j < tuples; j++) {
        int64_t off = b ? (j / per) * xs[b - 1] : 0; /* the batch's block of data */
        if ((st = nd_offset(c, x, idx, j, (int)b, (int)m, xs, &off)))
            return st;
        if (row)
            memcpy((char *)c->out[0].data + (size_t)j * row, (const char *)x->data + (size_t)off * ir_dtype_size(x->dtype),
                   row);
    }
    return VITC_OK;
}

/* ScatterND(data, indices, updates): a copy of data with the slice each
 * index tuple selects replaced by (or, with a reduction, combined with) its
 * row of updates, in the order of the tuples. */
int ik_scatter_nd(ik_ctx *c)
{
    const ir_tensor *x = c->in[0], *idx = c->in[1], *u = c->in[2];
    const ir_attr *ra = ir_attr_get(c->n, IR_ATTR_REDUCTION);
    const char *red = ra && ra->kind == IR_AT_STRING ? ra->s : "none";
    char r = ir_scatter_nd_reduction(c->n);
    if (r == '?')
        return ik_fail(c, VITC_BAD_INPUT, "reduction '%s' is not supported", red);
    if (idx->dtype != IR_I64 && idx->dtype != IR_I32)
        return ik_fail(c, VITC_BAD_INPUT, "indices must be int64 or int32, not %s", ir_dtype_name(idx->dtype));
    if (u->dtype != x->dtype)
        return ik_fail(c, VITC_BAD_INPUT, "updates are %s but data is %s", ir_dtype_name(u->dtype),
                       ir_dtype_name(x->dtype));
    int64_t m = idx->rank >= 1 ? idx->dims[idx->rank - 1] : 0;
    if (x->rank < 1 || m < 1 || m > x->rank)
        return ik_fail(c, VITC_BAD_INPUT, "the last dimension of indices must be 1 to data's rank %d", x->rank);
    int ok = u->rank == idx->rank - 1 + x->rank - (int)m;
    for (int i = 0; ok && i < idx->rank - 1; i++)
        ok = u->dims[i] == idx->dims[i];
    for (int i = (int)m; ok && i < x->rank; i++)
        ok = u->dims[idx->rank - 1 + i - m] == x->dims[i];
    if (!ok) {
        char a[160], b[160];
        return ik_fail(c, VITC_BAD_INPUT, "updates %s do not fit indices %s on data %s",
                       ik_type_str(u, a, sizeof a), ik_dims_str(idx->rank, idx->dims, b, sizeof b),
                       ik_dims_str(x->rank, x->dims, (char[160]){0}, 160));
    }
    int st = ik_copy(c, &c->out[0], x);
    if (st)
        return st;
    int64_t xs[IR_MAX_RANK], inner = 1, tuples = ir_tensor_numel(idx) / m;
    for (int i = (int)m; i < x->rank; i++)
        inner *= x->dims[i];
    ik_strides(x->rank, x->dims, xs);
    size_t es = ir_dtype_size(x->dtype);
    int fl = ir_dtype_is_float(x->dtype);
    for (int64_t j = 0; j < tuples; j++) {
        int64_t off = 0;
        if ((st = nd_offset(c, x, idx, j, 0, (int)m, xs, &off))) {
            ir_tensor_free(&c->out[0]);
            return st;
        }
        if (!r) {
            if (inner)
                memcpy((char *)c->out[0].data + (size_t)off * es, (const char *)u->data + (size_t)(j * inner) * es,
                       (size_t)inner * es);
            continue;
        }
        for (int64_t e = 0; e < inner; e++) {
            ir_tensor *o = &c->out[0];
            int64_t at = off + e, from = j * inner + e;
            if (fl) {
                double a = ir_tensor_get(o, at), v = ir_tensor_get(u, from);
                ir_tensor_set(o, at, r == '+' ? a + v : r == '*' ? a * v : r == '>' ? (v > a ? v : a) : (v < a ? v : a));
            } else {
                int64_t a = ir_tensor_get_i64(o, at), v = ir_tensor_get_i64(u, from);
                ir_tensor_set_i64(o, at, r == '+' ? (int64_t)((uint64_t)a + (uint64_t)v)
                                         : r == '*' ? (int64_t)((uint64_t)a * (uint64_t)v)
                                         : r == '>' ? (v > a ? v : a) : (v < a ? v : a));
            }
        }
    }
    return VITC_OK;
}
