/* interp_data.c: the interpreter's data-movement and shape kernels: Identity,
 * Dropout, Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Concat, Split,
 * Slice, Gather, Expand, Shape, Size, ConstantOfShape and Range.  Elements move as
 * raw bytes, so every dtype comes out bit-exact; shape arithmetic is int64. */
#include "ir/interp_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The same elements under new dims (Reshape, Flatten, Squeeze, Unsqueeze). */
static int copy_as(ik_ctx *c, const ir_tensor *x, int rank, const int64_t *dims)
{
    int st = ik_alloc(c, &c->out[0], x->dtype, rank, dims);
    if (!st && ir_tensor_nbytes(x))
        memcpy(c->out[0].data, x->data, ir_tensor_nbytes(x));
    return st;
}

/* Axes from input i when present, else from the `axes` attribute. *have is
 * 0 when neither gives any. */
static int axes_arg(ik_ctx *c, int i, int64_t *axes, int *n, int *have)
{
    *n = 0;
    *have = 0;
    if (ik_in(c, i)) {
        *have = 1;
        return ik_int_list(c, ik_in(c, i), "axes", axes, IR_MAX_RANK, n);
    }
    const ir_attr *a = ir_attr_get(c->n, IR_ATTR_AXES);
    if (!a)
        return VITC_OK;
    if (a->kind != IR_AT_INTS || a->n > IR_MAX_RANK)
        return ik_fail(c, VITC_BAD_INPUT, "the axes attribute must list at most %d ints", IR_MAX_RANK);
    *have = 1;
    *n = a->n;
    memcpy(axes, a->ints, (size_t)a->n * sizeof *axes);
    return VITC_OK;
}

int ik_identity(ik_ctx *c) { return ik_copy(c, &c->out[0], c->in[0]); }

/* Inference-mode Dropout: the identity, and a mask of all true. */
int ik_dropout(ik_ctx *c)
{
    const ir_tensor *ratio = ik_in(c, 1), *training = ik_in(c, 2);
    if (training && ir_tensor_numel(training) >= 1 && ir_tensor_get_i64(training, 0)) {
        double r = ratio && ir_tensor_numel(ratio) >= 1 ? ir_tensor_get(ratio, 0) : 0.5;
        if (r != 0)
            return ik_fail(c, VITC_BAD_INPUT,
                           "training-mode Dropout with ratio %g is random; the reference interpreter runs inference", r);
    }
    int st = ik_copy(c, &c->out[0], c->in[0]);
    if (st || c->n->noutputs < 2)
        return st;
    st = ik_alloc(c, &c->out[1], IR_BOOL, c->in[0]->rank, c->in[0]->dims);
    if (!st)
        memset(c->out[1].data, 1, ir_tensor_nbytes(&c->out[1]));
    return st;
}

/* Reshape: 0 copies the input's dimension (unless allowzero), -1 is inferred. */
int ik_reshape(ik_ctx *c)
{
    const ir_tensor *x = c->in[0];
    int64_t shape[IR_MAX_RANK], dims[IR_MAX_RANK], known = 1;
    int rank, infer = -1, allowzero = ir_attr_int(c->n, IR_ATTR_ALLOWZERO, 0) != 0;
    int st = ik_int_list(c, c->in[1], "the shape", shape, IR_MAX_RANK, &rank);
    if (st)
        return st;
    char xs[160], ss[160];
    ik_type_str(x, xs, sizeof xs);
    ik_dims_str(rank, shape, ss, sizeof ss);
    for (int i = 0; i < rank; i++) {
        int64_t s = shape[i];
        if (s == 0 && !allowzero) {
            if (i >= x->rank)
                return ik_fail(c, VITC_BAD_INPUT, "cannot reshape %s to %s: dimension %d is 0 (copy) but the input "
                               "has rank %d", xs, ss, i, x->rank);
            s = x->dims[i];
        } else if (s == -1) {
            if (infer >= 0)
                return ik_fail(c, VITC_BAD_INPUT, "cannot reshape %s to %s: more than one -1", xs, ss);
            infer = i;
            continue;
        } else if (s < 0) {
            return ik_fail(c, VITC_BAD_INPUT, "cannot reshape %s to %s: dimension %d is %lld", xs, ss, i, (long long)s);
        }
        dims[i] = s;
        if (ir_mul_ovf(known, s, &known))
            return ik_fail(c, VITC_BAD_INPUT, "cannot reshape %s to %s: the size overflows", xs, ss);
    }
    int64_t numel = ir_tensor_numel(x);
    if (infer >= 0) {
        if (known == 0 || numel % known != 0)
            return ik_fail(c, VITC_BAD_INPUT, "cannot reshape %s (%lld elements) to %s: no -1 fits", xs,
                           (long long)numel, ss);
        dims[infer] = numel / known;
        known = numel;
    }
    if (known != numel)
        return ik_fail(c, VITC_BAD_INPUT, "cannot reshape %s (%lld elements) to %s (%lld elements)", xs,
                       (long long)numel, ss, (long long)known);
    return copy_as(c, x, rank, dims);
}

int ik_flatten(ik_ctx *c)
{
    const ir_tensor *x = c->in[0];
    int axis;
    int st = ik_axis(c, ir_attr_int(c->n, IR_ATTR_AXIS, 1), x->rank, 1, &axis);
    if (st)
        return st;
    int64_t dims[2] = {1, 1};
    for (int i = 0; i < x->rank; i++)
        dims[i >= axis] *= x->dims[i];
    return copy_as(c, x, 2, dims);
}

int ik_squeeze(ik_ctx *c)
{
    const ir_tensor *x = c->in[0];
    int64_t axes[IR_MAX_RANK], dims[IR_MAX_RANK];
    int n, have, drop[IR_MAX_RANK] = {0}, rank = 0;
    int st = axes_arg(c, 1, axes, &n, &have);
    if (st)
        return st;
    for (int i = 0; i < n; i++) {
        int a;
        if ((st = ik_axis(c, axes[i], x->rank, 0, &a)))
            return st;
        if (x->dims[a] != 1)
            return ik_fail(c, VITC_BAD_INPUT, "cannot squeeze axis %lld of a tensor of shape %s: it is not 1",
                           (long long)axes[i], ik_dims_str(x->rank, x->dims, (char[160]){0}, 160));
        drop[a] = 1;
    }
    for (int i = 0; i < x->rank; i++)
        if (!(n ? drop[i] : x->dims[i] == 1))
            dims[rank++] = x->dims[i];
    return copy_as(c, x, rank, dims);
}

int ik_unsqueeze(ik_ctx *c)
{
    const ir_tensor *x = c->in[0];
    int64_t axes[IR_MAX_RANK], dims[IR_MAX_RANK];
    int n, have, ones[IR_MAX_RANK] = {0};
    int st = axes_arg(c, 1, axes, &n, &have);
    if (st)
        return st;
    int rank = x->rank + n;
    if (rank > IR_MAX_RANK)
        return ik_fail(c, VITC_BAD_INPUT, "the result would have rank %d, more than %d", rank, IR_MAX_RANK);
    for (int i = 0; i < n; i++) {
        int a;
        if ((st = ik_axis(c, axes[i], rank, 0, &a)))
            return st;
        if (ones[a])
            return ik_fail(c, VITC_BAD_INPUT, "axis %lld is repeated", (long long)axes[i]);
        ones[a] = 1;
    }
    for (int i = 0, j = 0; i < rank; i++)
        dims[i] = ones[i] ? 1 : x->dims[j++];
    return copy_as(c, x, rank, dims);
}

int ik_transpose(ik_ctx *c)
{
    const ir_tensor *x = c->in[0];
    int r = x->rank, perm[IR_MAX_RANK], seen[IR_MAX_RANK] = {0};
    const ir_attr *a = ir_attr_get(c->n, IR_ATTR_PERM);
    if (a && (a->kind != IR_AT_INTS || a->n != r))
        return ik_fail(c, VITC_BAD_INPUT, "perm has %d entries for a rank-%d input", a->n, r);
    for (int i = 0; i < r; i++) {
        int64_t p = a ? a->ints[i] : r - 1 - i;
        if (p < -r || p >= r || seen[p < 0 ? p + r : p])
            return ik_fail(c, VITC_BAD_INPUT, "perm is not a permutation of 0..%d", r - 1);
        perm[i] = (int)(p < 0 ? p + r : p);
        seen[perm[i]] = 1;
    }
    int64_t dims[IR_MAX_RANK], xs[IR_MAX_RANK], s[IR_MAX_RANK];
    ik_strides(r, x->dims, xs);
    for (int i = 0; i < r; i++) {
        dims[i] = x->dims[perm[i]];
        s[i] = xs[perm[i]];
    }
    int st = ik_alloc(c, &c->out[0], x->dtype, r, dims);
    if (st)
        return st;
    size_t es = ir_dtype_size(x->dtype);
    ik_iter it;
    ik_iter_init(&it, r, dims);
    ik_iter_add(&it, s, 0);
    int64_t n = ir_tensor_numel(x);
    for (int64_t i = 0; i < n; i++, ik_iter_next(&it))
        memcpy((char *)c->out[0].data + (size_t)i * es, (const char *)x->data + (size_t)it.off[0] * es, es);
    return VITC_OK;
}

/* Products of dims before axis (outer) and after it (inner). */
static void outer_inner(const ir_tensor *x, int axis, int64_t *outer, int64_t *inner)
{
    *outer = *inner = 1;
    for (int i = 0; i < x->rank; i++) {
        if (i < axis)
            *outer *= x->dims[i];
        else if (i > axis)
            *inner *= x->dims[i];
    }
}

int ik_concat(ik_ctx *c)
{
    const ir_tensor *x0 = c->in[0];
    if (!ir_attr_get(c->n, IR_ATTR_AXIS))
        return ik_fail(c, VITC_BAD_INPUT, "the axis attribute is required");
    for (int k = 0; k < c->nin; k++)
        if (!c->in[k])
            return ik_fail(c, VITC_BAD_INPUT, "input %d is omitted", k);
    if (x0->rank == 0)
        return ik_fail(c, VITC_BAD_INPUT, "cannot concatenate scalars");
    int axis, st = ik_same_dtype(c, c->nin, c->in);
    if (st || (st = ik_axis(c, ir_attr_int(c->n, IR_ATTR_AXIS, 0), x0->rank, 0, &axis)))
        return st;
    int64_t dims[IR_MAX_RANK];
    memcpy(dims, x0->dims, sizeof dims);
    dims[axis] = 0;
    for (int k = 0; k < c->nin; k++) {
        const ir_tensor *x = c->in[k];
        int ok = x->rank == x0->rank;
        for (int i = 0; ok && i < x->rank; i++)
            ok = i == axis || x->dims[i] == x0->dims[i];
        if (!ok) {
            char a[160], b[160];
            return ik_fail(c, VITC_BAD_INPUT, "input %d has shape %s, which does not concatenate with %s on axis %d",
                           k, ik_dims_str(x->rank, x->dims, a, sizeof a), ik_dims_str(x0->rank, x0->dims, b, sizeof b),
                           axis);
        }
        dims[axis] += x->dims[axis];
    }
    if ((st = ik_alloc(c, &c->out[0], x0->dtype, x0->rank, dims)))
        return st;
    size_t es = ir_dtype_size(x0->dtype);
    int64_t outer, inner;
    outer_inner(&c->out[0], axis, &outer, &inner);
    char *dst = c->out[0].data;
    for (int64_t o = 0; o < outer; o++) {
        for (int k = 0; k < c->nin; k++) {
            size_t chunk = (size_t)(c->in[k]->dims[axis] * inner) * es;
            if (chunk)
                memcpy(dst, (const char *)c->in[k]->data + (size_t)o * chunk, chunk);
            dst += chunk;
        }
    }
    return VITC_OK;
}

/* Split sizes: input 1, else the split attribute, else num_outputs (opset 18:
 * equal chunks, the last smaller), else equal parts over the outputs. */
int ik_split(ik_ctx *c)
{
    const ir_tensor *x = c->in[0];
    int nout = c->n->noutputs, axis, st;
    if (x->rank == 0)
        return ik_fail(c, VITC_BAD_INPUT, "cannot split a scalar");
    if ((st = ik_axis(c, ir_attr_int(c->n, IR_ATTR_AXIS, 0), x->rank, 0, &axis)))
        return st;
    int64_t dim = x->dims[axis], *sizes = calloc((size_t)nout, sizeof *sizes);
    if (!sizes)
        return ik_fail(c, VITC_INTERNAL, "out of memory");
    const ir_attr *sa = ir_attr_get(c->n, IR_ATTR_SPLIT);
    const ir_tensor *si = ik_in(c, 1);
    if (si || sa) {
        int64_t cnt = si ? ir_tensor_numel(si) : sa->n;
        if (si && ((si->dtype != IR_I64 && si->dtype != IR_I32) || si->rank != 1))
            st = ik_fail(c, VITC_BAD_INPUT, "split must be a 1-D int64 tensor, not %s", ir_dtype_name(si->dtype));
        else if (!si && sa->kind != IR_AT_INTS)
            st = ik_fail(c, VITC_BAD_INPUT, "the split attribute must be ints");
        else if (cnt != nout)
            st = ik_fail(c, VITC_BAD_INPUT, "split lists %lld sizes for %d outputs", (long long)cnt, nout);
        int64_t sum = 0;
        for (int k = 0; !st && k < nout; k++) {
            sizes[k] = si ? ir_tensor_get_i64(si, k) : sa->ints[k];
            if (sizes[k] < 0 || ir_add_ovf(sum, sizes[k], &sum))
                st = ik_fail(c, VITC_BAD_INPUT, "split size %d is %lld", k, (long long)sizes[k]);
        }
        if (!st && sum != dim)
            st = ik_fail(c, VITC_BAD_INPUT, "split sizes add up to %lld, but axis %d has %lld", (long long)sum, axis,
                         (long long)dim);
    } else if (ir_attr_get(c->n, IR_ATTR_NUM_OUTPUTS)) {
        int64_t num = ir_attr_int(c->n, IR_ATTR_NUM_OUTPUTS, 0);
        if (num != nout)
            st = ik_fail(c, VITC_BAD_INPUT, "num_outputs is %lld but the node has %d outputs", (long long)num, nout);
        int64_t chunk = num > 0 ? (dim + num - 1) / num : 0, last = dim - chunk * (num - 1);
        if (!st && last < 0)
            st = ik_fail(c, VITC_BAD_INPUT, "cannot split %lld into %lld chunks of %lld", (long long)dim, (long long)num,
                         (long long)chunk);
        for (int k = 0; !st && k < nout; k++)
            sizes[k] = k < nout - 1 ? chunk : last;
    } else {
        if (dim % nout != 0)
            st = ik_fail(c, VITC_BAD_INPUT, "axis %d of size %lld does not split into %d equal parts", axis,
                         (long long)dim, nout);
        for (int k = 0; !st && k < nout; k++)
            sizes[k] = dim / nout;
    }
    for (int k = 0; !st && k < nout; k++) {
        int64_t dims[IR_MAX_RANK];
        memcpy(dims, x->dims, sizeof dims);
        dims[axis] = sizes[k];
        st = ik_alloc(c, &c->out[k], x->dtype, x->rank, dims);
    }
    if (st) {
        free(sizes);
        return st;
    }
    size_t es = ir_dtype_size(x->dtype);
    int64_t outer, inner;
    outer_inner(x, axis, &outer, &inner);
    const char *src = x->data;
    for (int64_t o = 0; o < outer; o++) {
        for (int k = 0; k < nout; k++) {
            size_t chunk = (size_t)(sizes[k] * inner) * es;
            if (chunk)
                memcpy((char *)c->out[k].data + (size_t)o * chunk, src, chunk);
            src += chunk;
        }
    }
    free(sizes);
    return VITC_OK;
}

/* Slice(data, starts, ends, axes?, steps?), clamping exactly as ONNX says. */
int ik_slice(ik_ctx *c)
{
    const ir_tensor *x = c->in[0];
    int r = x->rank, ns, ne, na, nst, st;
    int64_t starts[IR_MAX_RANK], ends[IR_MAX_RANK], axes[IR_MAX_RANK], steps[IR_MAX_RANK];
    if ((st = ik_int_list(c, c->in[1], "starts", starts, IR_MAX_RANK, &ns)) ||
        (st = ik_int_list(c, c->in[2], "ends", ends, IR_MAX_RANK, &ne)))
        return st;
    if (ne != ns)
        return ik_fail(c, VITC_BAD_INPUT, "starts has %d entries but ends has %d", ns, ne);
    na = nst = ns;
    if (ik_in(c, 3) && (st = ik_int_list(c, ik_in(c, 3), "axes", axes, IR_MAX_RANK, &na)))
        return st;
    if (ik_in(c, 4) && (st = ik_int_list(c, ik_in(c, 4), "steps", steps, IR_MAX_RANK, &nst)))
        return st;
    if (na != ns || nst != ns)
        return ik_fail(c, VITC_BAD_INPUT, "starts, ends, axes and steps have %d, %d, %d and %d entries", ns, ne, na, nst);
    int64_t first[IR_MAX_RANK], step[IR_MAX_RANK], dims[IR_MAX_RANK];
    int seen[IR_MAX_RANK] = {0};
    for (int i = 0; i < r; i++) {
        first[i] = 0;
        step[i] = 1;
        dims[i] = x->dims[i];
    }
    for (int k = 0; k < ns; k++) {
        int a;
        if ((st = ik_axis(c, ik_in(c, 3) ? axes[k] : k, r, 0, &a)))
            return st;
        if (seen[a])
            return ik_fail(c, VITC_BAD_INPUT, "axis %d is sliced twice", a);
        seen[a] = 1;
        int64_t s = ik_in(c, 4) ? steps[k] : 1, d = x->dims[a], b = starts[k], e = ends[k];
        if (s == 0)
            return ik_fail(c, VITC_BAD_INPUT, "step %d is 0", k);
        if (s > d || s < -d) /* takes one element, as a step of d does; keeps s * stride in range */
            s = s > 0 ? (d > 0 ? d : 1) : (d > 0 ? -d : -1);
        if (b < 0)
            b += d;
        if (e < 0)
            e += d;
        if (s > 0) {
            b = b < 0 ? 0 : b > d ? d : b;
            e = e < 0 ? 0 : e > d ? d : e;
            dims[a] = e > b ? (e - b - 1) / s + 1 : 0;
        } else {
            b = b < 0 ? 0 : b > d - 1 ? d - 1 : b;
            e = e < -1 ? -1 : e > d - 1 ? d - 1 : e;
            dims[a] = d > 0 && b > e ? (b - e - 1) / -s + 1 : 0; /* an empty axis stays empty */
        }
        first[a] = b;
        step[a] = s;
    }
    if ((st = ik_alloc(c, &c->out[0], x->dtype, r, dims)))
        return st;
    int64_t xs[IR_MAX_RANK], s[IR_MAX_RANK], base = 0;
    ik_strides(r, x->dims, xs);
    for (int i = 0; i < r; i++) {
        s[i] = xs[i] * step[i];
        if (dims[i] > 0)
            base += first[i] * xs[i];
    }
    size_t es = ir_dtype_size(x->dtype);
    ik_iter it;
    ik_iter_init(&it, r, dims);
    ik_iter_add(&it, s, base);
    int64_t n = ir_tensor_numel(&c->out[0]);
    for (int64_t i = 0; i < n; i++, ik_iter_next(&it))
        memcpy((char *)c->out[0].data + (size_t)i * es, (const char *)x->data + (size_t)it.off[0] * es, es);
    return VITC_OK;
}

/* Gather(data, indices) along axis; negative indices count from the end. */
int ik_gather(ik_ctx *c)
{
    const ir_tensor *x = c->in[0], *idx = c->in[1];
    int axis, st;
    if (x->rank == 0)
        return ik_fail(c, VITC_BAD_INPUT, "cannot gather from a scalar");
    if (idx->dtype != IR_I64 && idx->dtype != IR_I32)
        return ik_fail(c, VITC_BAD_INPUT, "indices must be int64 or int32, not %s", ir_dtype_name(idx->dtype));
    if ((st = ik_axis(c, ir_attr_int(c->n, IR_ATTR_AXIS, 0), x->rank, 0, &axis)))
        return st;
    int rank = x->rank - 1 + idx->rank;
    if (rank > IR_MAX_RANK)
        return ik_fail(c, VITC_BAD_INPUT, "the result would have rank %d, more than %d", rank, IR_MAX_RANK);
    int64_t dims[IR_MAX_RANK];
    int k = 0;
    for (int i = 0; i < axis; i++)
        dims[k++] = x->dims[i];
    for (int i = 0; i < idx->rank; i++)
        dims[k++] = idx->dims[i];
    for (int i = axis + 1; i < x->rank; i++)
        dims[k++] = x->dims[i];
    if ((st = ik_alloc(c, &c->out[0], x->dtype, rank, dims)))
        return st;
    int64_t outer, inner, d = x->dims[axis], ni = ir_tensor_numel(idx);
    outer_inner(x, axis, &outer, &inner);
    size_t row = (size_t)inner * ir_dtype_size(x->dtype);
    char *dst = c->out[0].data;
    for (int64_t j = 0; j < ni; j++) {
        int64_t v = ir_tensor_get_i64(idx, j);
        if (v < -d || v >= d)
            return ik_fail(c, VITC_BAD_INPUT, "index %lld (element %lld of the indices) is out of range for axis %d "
                           "of size %lld", (long long)v, (long long)j, axis, (long long)d);
    }
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t j = 0; j < ni; j++) {
            int64_t v = ir_tensor_get_i64(idx, j);
            v = v < 0 ? v + d : v;
            if (row)
                memcpy(dst, (const char *)x->data + (size_t)(o * d + v) * row, row);
            dst += row;
        }
    }
    return VITC_OK;
}

/* Expand(x, shape): numpy broadcast of x's shape with the given one. */
int ik_expand(ik_ctx *c)
{
    const ir_tensor *x = c->in[0];
    int ranks[2] = {x->rank, 0}, rank, st;
    int64_t d2[2][IR_MAX_RANK], dims[IR_MAX_RANK], s[IR_MAX_RANK];
    memcpy(d2[0], x->dims, sizeof d2[0]);
    if ((st = ik_int_list(c, c->in[1], "the shape", d2[1], IR_MAX_RANK, &ranks[1])))
        return st;
    for (int i = 0; i < ranks[1]; i++)
        if (d2[1][i] < 0)
            return ik_fail(c, VITC_BAD_INPUT, "shape dimension %d is %lld", i, (long long)d2[1][i]);
    if ((st = ik_broadcast(c, 2, ranks, (const int64_t(*)[IR_MAX_RANK])d2, &rank, dims)) ||
        (st = ik_alloc(c, &c->out[0], x->dtype, rank, dims)))
        return st;
    ik_bcast_strides(x->rank, x->dims, rank, dims, s);
    size_t es = ir_dtype_size(x->dtype);
    ik_iter it;
    ik_iter_init(&it, rank, dims);
    ik_iter_add(&it, s, 0);
    int64_t n = ir_tensor_numel(&c->out[0]);
    for (int64_t i = 0; i < n; i++, ik_iter_next(&it))
        memcpy((char *)c->out[0].data + (size_t)i * es, (const char *)x->data + (size_t)it.off[0] * es, es);
    return VITC_OK;
}

/* Shape(x) with the optional start / end attributes (clamped). */
int ik_shape(ik_ctx *c)
{
    const ir_tensor *x = c->in[0];
    int64_t r = x->rank, b = ir_attr_int(c->n, IR_ATTR_START, 0), e = ir_attr_int(c->n, IR_ATTR_END, r);
    b = b < 0 ? b + r : b;
    e = e < 0 ? e + r : e;
    b = b < 0 ? 0 : b > r ? r : b;
    e = e < 0 ? 0 : e > r ? r : e;
    int64_t len = e > b ? e - b : 0;
    int st = ik_alloc(c, &c->out[0], IR_I64, 1, &len);
    for (int64_t i = 0; !st && i < len; i++)
        ir_tensor_set_i64(&c->out[0], i, x->dims[b + i]);
    return st;
}

/* Size(x): x's element count, an int64 scalar. */
int ik_size(ik_ctx *c)
{
    int st = ik_alloc(c, &c->out[0], IR_I64, 0, NULL);
    if (!st)
        ir_tensor_set_i64(&c->out[0], 0, ir_tensor_numel(c->in[0]));
    return st;
}

/* ConstantOfShape(shape): filled with the one-element `value` (default f32 0). */
int ik_constant_of_shape(ik_ctx *c)
{
    int64_t dims[IR_MAX_RANK];
    int rank, st = ik_int_list(c, c->in[0], "the shape", dims, IR_MAX_RANK, &rank);
    if (st)
        return st;
    for (int i = 0; i < rank; i++)
        if (dims[i] < 0)
            return ik_fail(c, VITC_BAD_INPUT, "shape dimension %d is %lld", i, (long long)dims[i]);
    const ir_attr *a = ir_attr_get(c->n, IR_ATTR_VALUE);
    ir_dtype dt = IR_F32;
    static const unsigned char zero[8];
    const void *val = zero;
    if (a) {
        if (a->kind != IR_AT_TENSOR || a->tensor < 0 || a->tensor >= c->g->nvalues ||
            c->g->values[a->tensor].kind != IR_VAL_CONST)
            return ik_fail(c, VITC_INTERNAL, "the value attribute is not a constant tensor");
        const ir_value *v = &c->g->values[a->tensor];
        if (v->nbytes != ir_dtype_size(v->dtype))
            return ik_fail(c, VITC_BAD_INPUT, "the value attribute must hold one element, not %zu bytes of %s",
                           v->nbytes, ir_dtype_name(v->dtype));
        dt = v->dtype;
        val = v->data;
    }
    if ((st = ik_alloc(c, &c->out[0], dt, rank, dims)))
        return st;
    size_t es = ir_dtype_size(dt);
    int64_t n = ir_tensor_numel(&c->out[0]);
    for (int64_t i = 0; i < n; i++)
        memcpy((char *)c->out[0].data + (size_t)i * es, val, es);
    return VITC_OK;
}

/* Range(start, limit, delta): max(ceil((limit - start) / delta), 0) elements
 * start + i * delta; exact for integers. */
int ik_range(ik_ctx *c)
{
    const ir_tensor *s = c->in[0], *l = c->in[1], *dl = c->in[2];
    int st = ik_same_dtype(c, 3, c->in);
    if (st)
        return st;
    for (int k = 0; k < 3; k++)
        if (ir_tensor_numel(c->in[k]) != 1)
            return ik_fail(c, VITC_BAD_INPUT, "input %d must be a scalar, not %lld elements", k,
                           (long long)ir_tensor_numel(c->in[k]));
    ir_dtype dt = s->dtype;
    if (dt == IR_BOOL)
        return ik_fail(c, VITC_BAD_INPUT, "Range does not take bool");
    int64_t n;
    if (ir_dtype_is_float(dt)) {
        double a = ir_tensor_get(s, 0), b = ir_tensor_get(l, 0), d = ir_tensor_get(dl, 0);
        double cnt = dt == IR_F32 ? ceilf(((float)b - (float)a) / (float)d) : ceil((b - a) / d);
        if (d == 0 || isnan(cnt) || cnt > 1e10)
            return ik_fail(c, VITC_BAD_INPUT, "Range(%g, %g, %g) has no sensible length", a, b, d);
        n = cnt > 0 ? (int64_t)cnt : 0;
        if ((st = ik_alloc(c, &c->out[0], dt, 1, &n)))
            return st;
        for (int64_t i = 0; i < n; i++)
            ir_tensor_set(&c->out[0], i, a + (double)i * d);
        return VITC_OK;
    }
    int64_t a = ir_tensor_get_i64(s, 0), b = ir_tensor_get_i64(l, 0), d = ir_tensor_get_i64(dl, 0);
    if (d == 0)
        return ik_fail(c, VITC_BAD_INPUT, "Range delta is 0");
    uint64_t span = 0, step = d > 0 ? (uint64_t)d : 0 - (uint64_t)d;
    if (d > 0 && b > a)
        span = (uint64_t)b - (uint64_t)a;
    else if (d < 0 && a > b)
        span = (uint64_t)a - (uint64_t)b;
    uint64_t cnt = span / step + (span % step != 0);
    if (cnt > ((uint64_t)1 << 40))
        return ik_fail(c, VITC_BAD_INPUT, "Range(%lld, %lld, %lld) has %llu elements", (long long)a, (long long)b,
                       (long long)d, (unsigned long long)cnt);
    n = (int64_t)cnt;
    if ((st = ik_alloc(c, &c->out[0], dt, 1, &n)))
        return st;
    for (int64_t i = 0; i < n; i++)
        ir_tensor_set_i64(&c->out[0], i, (int64_t)((uint64_t)a + (uint64_t)i * (uint64_t)d));
    return VITC_OK;
}
