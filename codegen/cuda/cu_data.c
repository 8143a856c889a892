/* cu_data.c: data movement on the GPU.  Every op that only moves elements is
 * one strided copy (or one per input for Concat, per output for Split):
 *
 *   dst[base_d + sum_i idx_i * dstride_i] = src[base_s + sum_i idx_i * sstride_i]
 *
 * over the output's dims, with strides that express the op: a permutation
 * (Transpose), offsets and steps (Slice, Split, a scalar Gather), zeros
 * (Expand), an offset into the output (Concat).  Pad, Tile, GatherND and
 * ScatterND are the lists of such copies planned for every backend
 * (codegen/moves.h), a zero fill or ScatterND's reduction (dst = dst op src)
 * the only other things the loop stores.  Adjacent dims that are
 * contiguous on both sides are merged first, so a plain copy is one flat
 * loop.  Gather with an index tensor reads its indices on the device.  The
 * graph's inputs and outputs go through the same copy when the caller's
 * type differs from the stored one (f32 <-> f16/bf16). */
#include "codegen/cuda/cu_impl.h"
#include "codegen/cuda/cu_launch.h"
#include "codegen/moves.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { COPY_THREADS = 256 };

cu_view cu_view_of(cu_ctx *c, int v)
{
    int r = cu_root(c, v);
    cu_view w;
    memset(&w, 0, sizeof w);
    const ir_value *x = &c->g->values[v];
    if (c->g->values[r].kind == IR_VAL_CONST) {
        w.kind = VITC_CUDA_ARG_WEIGHTS;
        w.byte_off = cu_weights_of(c, r);
    } else {
        w.kind = VITC_CUDA_ARG_WORKSPACE;
        w.byte_off = c->off[r];
    }
    w.t = c->sdt[r];
    w.base = cg_poly_k(0);
    cg_poly_strides(x, w.stride);
    return w;
}

cu_view cu_view_ws(int64_t byte_off, ir_dtype t, int rank, const cg_poly *dims)
{
    cu_view w;
    memset(&w, 0, sizeof w);
    w.kind = VITC_CUDA_ARG_WORKSPACE;
    w.byte_off = byte_off;
    w.t = t;
    w.base = cg_poly_k(0);
    cg_poly s = cg_poly_k(1);
    for (int i = rank - 1; i >= 0; i--) {
        w.stride[i] = s;
        s = cg_poly_mul(s, dims[i]);
    }
    return w;
}

static void arg_view(cu_ctx *c, cu_launch *l, int slot, const cu_view *v)
{
    cu_arg_ptr(c, l, slot, v->kind, v->byte_off);
}

/* 1 if the view is row-major contiguous from element 0 over dims. */
static int contiguous(const cu_view *v, int rank, const cg_poly *dims)
{
    int64_t b;
    if (!cg_poly_is_const(v->base, &b) || b != 0)
        return 0;
    cg_poly s = cg_poly_k(1);
    for (int i = rank - 1; i >= 0; i--) {
        if (!cg_poly_eq(v->stride[i], s))
            return 0;
        s = cg_poly_mul(s, dims[i]);
    }
    return 1;
}

/* The strided loop of cu_emit_copy, storing at each point (op): 0 the
 * source, 'z' a zero (no source), '+', '*', '>', '<' the destination
 * combined with the source in fp32 (ScatterND's reductions; float storage). */
static int emit_strided(cu_ctx *c, int node, int rank, const cg_poly *in_dims, const cu_view *dst0,
                        const cu_view *src0, char op, const char *label)
{
    cu_view d = *dst0, s = src0 ? *src0 : *dst0;
    cg_poly dims[IR_MAX_RANK];
    int r = 0;
    /* drop unit dims, merge dims contiguous on both sides */
    for (int i = 0; i < rank; i++) {
        int64_t k;
        if (cg_poly_is_const(in_dims[i], &k) && k == 1)
            continue;
        if (cg_poly_is_const(in_dims[i], &k) && k == 0)
            return VITC_OK; /* nothing to copy */
        if (r > 0 && cg_poly_eq(d.stride[r - 1], cg_poly_mul(d.stride[i], in_dims[i])) &&
            cg_poly_eq(s.stride[r - 1], cg_poly_mul(s.stride[i], in_dims[i]))) {
            dims[r - 1] = cg_poly_mul(dims[r - 1], in_dims[i]);
            d.stride[r - 1] = d.stride[i];
            s.stride[r - 1] = s.stride[i];
            continue;
        }
        dims[r] = in_dims[i];
        d.stride[r] = d.stride[i];
        s.stride[r] = s.stride[i];
        r++;
    }
    cg_poly n = cg_poly_k(1);
    for (int i = 0; i < r; i++)
        n = cg_poly_mul(n, dims[i]);
    if (n.bad)
        return cu_fail(c, VITC_BAD_INPUT, node, "a size of this copy is beyond what the CUDA backend handles");
    const char *ts = cu_ctype(s.t), *td = cu_ctype(d.t);
    if (!ts || !td)
        return cu_fail(c, VITC_INTERNAL, node, "no device type for a copy");
    int dc = contiguous(&d, r, dims), sc = op == 'z' || contiguous(&s, r, dims);
    char e[160];
    cu_str t = {0};
    cu_str_add(&t, "VK_KERNEL(@, %d, vk_copy_params)\n{\n    const vk_i64 B = p.batch;\n", COPY_THREADS);
    cu_str_add(&t, "    (void)B;\n    %s *dst = (%s *)p.dst;\n", td, td);
    if (op != 'z')
        cu_str_add(&t, "    const %s *src = (const %s *)p.src;\n", ts, ts);
    cu_str_add(&t, "    const vk_i64 n = %s;\n", cu_poly_expr(n, e, sizeof e));
    cu_str_add(&t, "    for (vk_i64 i = (vk_i64)blockIdx.x * %d + threadIdx.x; i < n; i += (vk_i64)gridDim.x * %d) {\n",
               COPY_THREADS, COPY_THREADS);
    cu_str_add(&t, "        vk_i64 q = i, c;\n");
    cu_str_add(&t, "        vk_i64 so = %s", sc ? "i" : cu_poly_expr(s.base, e, sizeof e));
    cu_str_add(&t, ", do_ = %s;\n", dc ? "i" : cu_poly_expr(d.base, e, sizeof e));
    cu_str_add(&t, "        (void)q;\n        (void)c;\n");
    if (!sc || !dc)
        for (int i = r - 1; i >= 0; i--) {
            if (i > 0)
                cu_str_add(&t, "        c = q %% %s;\n        q /= %s;\n", cu_poly_expr(dims[i], e, sizeof e),
                           cu_poly_expr(dims[i], e, sizeof e));
            else
                cu_str_add(&t, "        c = q;\n");
            if (!sc)
                cu_str_add(&t, "        so += c * %s;\n", cu_poly_expr(s.stride[i], e, sizeof e));
            if (!dc)
                cu_str_add(&t, "        do_ += c * %s;\n", cu_poly_expr(d.stride[i], e, sizeof e));
        }
    if (op == 'z')
        cu_str_add(&t, "        const %s zero = {};\n        (void)so;\n        dst[do_] = zero;\n", td);
    else if (op)
        cu_str_add(&t, "        const float a = vk_get(dst + do_), v = vk_get(src + so);\n"
                       "        vk_put(dst + do_, %s);\n",
                   op == '+' ? "a + v" : op == '*' ? "a * v" : op == '>' ? "v > a ? v : a" : "v < a ? v : a");
    else if (s.t == d.t)
        cu_str_add(&t, "        dst[do_] = src[so];\n");
    else
        cu_str_add(&t, "        vk_put(dst + do_, vk_get(src + so));\n");
    cu_str_add(&t, "    }\n}\n");
    cu_launch *l = cu_launch_flat(c, "copy", label, &t, node, COPY_THREADS, n, CU_FIELD(vk_copy_params, batch));
    if (!l)
        return c->d->status;
    if (op != 'z')
        arg_view(c, l, CU_FIELD(vk_copy_params, src), &s);
    arg_view(c, l, CU_FIELD(vk_copy_params, dst), &d);
    return c->d->status;
}

int cu_emit_copy(cu_ctx *c, int node, int rank, const cg_poly *dims, const cu_view *dst, const cu_view *src,
                 const char *label)
{
    return emit_strided(c, node, rank, dims, dst, src, 0, label);
}

static cu_view move_view(cu_ctx *c, const cg_move_side *s)
{
    cu_view v = cu_view_of(c, s->value);
    v.base = s->base;
    memcpy(v.stride, s->strides, sizeof v.stride);
    return v;
}

/* Pad, Tile, GatherND, ScatterND: their moves (codegen/moves.h), one strided
 * loop each, in order. */
static int emit_moves(cu_ctx *c, int node, const char *label)
{
    cg_moves mv;
    char why[256];
    if (!cg_moves_plan(c->g, &c->g->nodes[node], &mv, why, sizeof why))
        return cu_fail(c, VITC_BAD_INPUT, node, "%s", why);
    static const char ops[] = {[CG_MOVE_COPY] = 0,   [CG_MOVE_ZERO] = 'z', [CG_MOVE_ADD] = '+',
                               [CG_MOVE_MUL] = '*', [CG_MOVE_MAX] = '>',  [CG_MOVE_MIN] = '<'};
    for (int i = 0; i < mv.n && c->d->status == VITC_OK; i++) {
        const cg_move *m = &mv.m[i];
        cu_view d = move_view(c, &m->dst), s;
        if (m->op != CG_MOVE_ZERO)
            s = move_view(c, &m->src);
        emit_strided(c, node, m->rank, m->dims, &d, m->op == CG_MOVE_ZERO ? NULL : &s, ops[m->op], label);
    }
    cg_moves_free(&mv);
    return c->d->status;
}

/* ---- support ---- */

/* Starts, ends, axes and steps of a Slice as int64 constants; 0 if not. */
static int slice_params(const ir_graph *g, const ir_node *n, int64_t *st, int64_t *en, int64_t *ax, int64_t *sp,
                        int *count)
{
    int v[4] = {ir_input(n, 1), ir_input(n, 2), ir_input(n, 3), ir_input(n, 4)};
    int64_t *out[4] = {st, en, ax, sp};
    int cnt = -1;
    for (int k = 0; k < 4; k++) {
        if (v[k] < 0)
            continue;
        const ir_value *x = &g->values[v[k]];
        if (!ir_value_is_plain_const(g, v[k]) || (x->dtype != IR_I64 && x->dtype != IR_I32) || x->rank > 1)
            return 0;
        int64_t m = ir_value_numel(x, 1);
        if (m < 0 || m > IR_MAX_RANK || (cnt >= 0 && m != cnt))
            return 0;
        cnt = (int)m;
        for (int64_t i = 0; i < m; i++)
            out[k][i] = x->dtype == IR_I64 ? ((const int64_t *)x->data)[i] : ((const int32_t *)x->data)[i];
    }
    if (cnt < 0)
        return 0;
    for (int i = 0; i < cnt; i++) {
        if (v[2] < 0)
            ax[i] = i;
        if (v[3] < 0)
            sp[i] = 1;
    }
    *count = cnt;
    return 1;
}

int cu_data_supports(const ir_graph *g, const ir_node *n, char *why, size_t len)
{
    const ir_value *x = &g->values[n->inputs[0]];
    switch (n->op) {
    case IR_OP_DROPOUT:
        if (!ir_dropout_is_inference(g, n)) {
            snprintf(why, len, "training-mode Dropout is not supported");
            return 0;
        }
        return 1;
    case IR_OP_RESHAPE: case IR_OP_FLATTEN: case IR_OP_SQUEEZE: case IR_OP_UNSQUEEZE: case IR_OP_IDENTITY:
    case IR_OP_TRANSPOSE: case IR_OP_EXPAND: case IR_OP_CONCAT: case IR_OP_SPLIT:
        return 1;
    case IR_OP_SLICE: {
        int64_t st[IR_MAX_RANK], en[IR_MAX_RANK], ax[IR_MAX_RANK], sp[IR_MAX_RANK];
        int cnt;
        if (!slice_params(g, n, st, en, ax, sp, &cnt)) {
            snprintf(why, len, "Slice needs constant starts, ends, axes and steps");
            return 0;
        }
        for (int i = 0; i < cnt; i++) {
            int64_t a = ax[i] < 0 ? ax[i] + x->rank : ax[i];
            if (a < 0 || a >= x->rank || x->dims[a].e != 0 || sp[i] == 0) {
                snprintf(why, len, "Slice along axis %lld, which depends on the batch or is out of range",
                         (long long)ax[i]);
                return 0;
            }
        }
        return 1;
    }
    case IR_OP_GATHER: {
        int64_t axis = ir_attr_int(n, IR_ATTR_AXIS, 0);
        if (axis < 0)
            axis += x->rank;
        if (axis < 0 || axis >= x->rank || x->dims[axis].e != 0) {
            snprintf(why, len, "Gather along an axis that depends on the batch");
            return 0;
        }
        const ir_value *ind = &g->values[n->inputs[1]];
        if (ind->dtype != IR_I64 && ind->dtype != IR_I32) {
            snprintf(why, len, "Gather indices of type %s", ir_dtype_name(ind->dtype));
            return 0;
        }
        return 1;
    }
    case IR_OP_TILE: case IR_OP_PAD: case IR_OP_GATHER_ND: case IR_OP_SCATTER_ND: {
        static const ir_dtype reduce_ok[] = {IR_F32, IR_F16, IR_BF16}; /* reduced in fp32 */
        return cg_moves_supported(g, n, reduce_ok, 3, "CUDA", why, len);
    }
    case IR_OP_RESIZE:
        return !cg_refuse_folded_only(n, "CUDA", why, len);
    default:
        snprintf(why, len, "%s is not a data-movement op", ir_op_name(n->op));
        return 0;
    }
}

/* ---- per op ---- */

static void value_dims(const ir_value *v, cg_poly *dims)
{
    for (int i = 0; i < v->rank; i++)
        dims[i] = cg_poly_dim(v->dims[i]);
}

static int emit_gather(cu_ctx *c, int node)
{
    const ir_node *n = &c->g->nodes[node];
    const ir_value *x = &c->g->values[n->inputs[0]], *ind = &c->g->values[n->inputs[1]];
    int out = n->outputs[0];
    int axis = (int)ir_attr_int(n, IR_ATTR_AXIS, 0);
    if (axis < 0)
        axis += x->rank;
    int64_t A = x->dims[axis].k;
    /* a constant scalar index: a slice without the axis */
    if (ir_value_is_plain_const(c->g, n->inputs[1]) && ind->rank == 0) {
        int64_t i = ind->dtype == IR_I64 ? *(const int64_t *)ind->data : *(const int32_t *)ind->data;
        if (i < 0)
            i += A;
        if (i < 0 || i >= A)
            return cu_fail(c, VITC_BAD_INPUT, node, "index %lld is outside axis %d of size %lld", (long long)i, axis,
                           (long long)A);
        cu_view s = cu_view_of(c, n->inputs[0]), d = cu_view_of(c, out);
        s.base = cg_poly_add(s.base, cg_poly_scale(s.stride[axis], i));
        for (int k = axis; k + 1 < x->rank; k++)
            s.stride[k] = s.stride[k + 1];
        cg_poly dims[IR_MAX_RANK];
        value_dims(&c->g->values[out], dims);
        return cu_emit_copy(c, node, c->g->values[out].rank, dims, &d, &s, "gather (constant index)");
    }
    cg_poly inner = cg_poly_k(1), J = cg_poly_numel(ind), total = cg_poly_numel(&c->g->values[out]);
    for (int k = axis + 1; k < x->rank; k++)
        inner = cg_poly_mul(inner, cg_poly_dim(x->dims[k]));
    char e1[160], e2[160], e3[160];
    const char *tx = cu_ctype(cu_sdt(c, n->inputs[0])), *ti = cu_ctype(cu_sdt(c, n->inputs[1]));
    const char *ty = cu_ctype(cu_sdt(c, out));
    if (strcmp(tx, ty) != 0)
        return cu_fail(c, VITC_INTERNAL, node, "Gather between storage types %s and %s", tx, ty);
    cu_str t = {0};
    cu_str_add(&t, "VK_KERNEL(@, %d, vk_copy_params)\n{\n    const vk_i64 B = p.batch;\n    (void)B;\n", COPY_THREADS);
    cu_str_add(&t, "    const %s *x = (const %s *)p.src;\n    const %s *ind = (const %s *)p.index;\n", tx, tx, ti, ti);
    cu_str_add(&t, "    %s *y = (%s *)p.dst;\n", ty, ty);
    cu_str_add(&t, "    const vk_i64 n = %s, inner = %s, J = %s, A = %lldLL;\n", cu_poly_expr(total, e1, sizeof e1),
               cu_poly_expr(inner, e2, sizeof e2), cu_poly_expr(J, e3, sizeof e3), (long long)A);
    cu_str_add(&t, "    for (vk_i64 i = (vk_i64)blockIdx.x * %d + threadIdx.x; i < n; i += (vk_i64)gridDim.x * %d) {\n",
               COPY_THREADS, COPY_THREADS);
    cu_str_add(&t, "        vk_i64 in = i %% inner, j = (i / inner) %% J, o = i / (inner * J);\n"
                   "        vk_i64 k = (vk_i64)ind[j];\n"
                   "        if (k < 0)\n            k += A;\n"
                   "        k = k < 0 ? 0 : k >= A ? A - 1 : k; /* out-of-range indices are clamped */\n"
                   "        y[i] = x[(o * A + k) * inner + in];\n    }\n}\n");
    cu_launch *l =
        cu_launch_flat(c, "gather", "gather", &t, node, COPY_THREADS, total, CU_FIELD(vk_copy_params, batch));
    if (!l)
        return c->d->status;
    cu_arg_value(c, l, CU_FIELD(vk_copy_params, src), n->inputs[0]);
    cu_arg_value(c, l, CU_FIELD(vk_copy_params, index), n->inputs[1]);
    cu_arg_value(c, l, CU_FIELD(vk_copy_params, dst), out);
    return c->d->status;
}

int cu_emit_data(cu_ctx *c, int node)
{
    const ir_graph *g = c->g;
    const ir_node *n = &g->nodes[node];
    int out = n->outputs[0];
    const ir_value *x = &g->values[n->inputs[0]], *y = out >= 0 ? &g->values[out] : NULL;
    cg_poly dims[IR_MAX_RANK];
    char label[96];
    snprintf(label, sizeof label, "%s", ir_op_name(n->op));
    for (char *p = label; *p; p++)
        *p = (char)(*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p);
    switch (n->op) {
    case IR_OP_CONCAT: {
        int axis = (int)ir_attr_int(n, IR_ATTR_AXIS, 0);
        if (axis < 0)
            axis += y->rank;
        cu_view d0 = cu_view_of(c, out);
        cg_poly at = cg_poly_k(0);
        for (int k = 0; k < n->ninputs && c->d->status == VITC_OK; k++) {
            const ir_value *xi = &g->values[n->inputs[k]];
            cu_view d = d0, s = cu_view_of(c, n->inputs[k]);
            d.base = cg_poly_add(d.base, cg_poly_mul(at, d0.stride[axis]));
            value_dims(xi, dims);
            cu_emit_copy(c, node, xi->rank, dims, &d, &s, "concat");
            at = cg_poly_add(at, cg_poly_dim(xi->dims[axis]));
        }
        return c->d->status;
    }
    case IR_OP_SPLIT: {
        int axis = (int)ir_attr_int(n, IR_ATTR_AXIS, 0);
        if (axis < 0)
            axis += x->rank;
        cu_view s0 = cu_view_of(c, n->inputs[0]);
        cg_poly at = cg_poly_k(0);
        for (int k = 0; k < n->noutputs && c->d->status == VITC_OK; k++) {
            int o = n->outputs[k];
            if (o < 0)
                continue;
            const ir_value *yo = &g->values[o];
            if (c->off[cu_root(c, o)] >= 0) {
                cu_view s = s0, d = cu_view_of(c, o);
                s.base = cg_poly_add(s.base, cg_poly_mul(at, s0.stride[axis]));
                value_dims(yo, dims);
                cu_emit_copy(c, node, yo->rank, dims, &d, &s, "split");
            }
            at = cg_poly_add(at, cg_poly_dim(yo->dims[axis]));
        }
        return c->d->status;
    }
    case IR_OP_GATHER:
        return emit_gather(c, node);
    default:
        break;
    }
    if (c->off[cu_root(c, out)] < 0 && g->values[cu_root(c, out)].kind != IR_VAL_CONST)
        return VITC_OK; /* nobody reads it */
    if (cg_moves_op(n->op))
        return emit_moves(c, node, label);
    cu_view s = cu_view_of(c, n->inputs[0]), d = cu_view_of(c, out);
    value_dims(y, dims);
    switch (n->op) {
    case IR_OP_TRANSPOSE: {
        const ir_attr *pa = ir_attr_get(n, IR_ATTR_PERM);
        cg_poly st[IR_MAX_RANK];
        for (int i = 0; i < y->rank; i++) {
            int p = pa ? (int)pa->ints[i] : y->rank - 1 - i;
            st[i] = s.stride[p];
        }
        memcpy(s.stride, st, sizeof st);
        break;
    }
    case IR_OP_EXPAND: {
        cg_poly st[IR_MAX_RANK];
        for (int i = 0; i < y->rank; i++) {
            int k = i - (y->rank - x->rank);
            int bcast = k < 0 || (x->dims[k].k == 1 && x->dims[k].e == 0);
            st[i] = bcast ? cg_poly_k(0) : s.stride[k];
        }
        memcpy(s.stride, st, sizeof st);
        break;
    }
    case IR_OP_SLICE: {
        int64_t stt[IR_MAX_RANK], en[IR_MAX_RANK], ax[IR_MAX_RANK], sp[IR_MAX_RANK];
        int cnt = 0;
        slice_params(g, n, stt, en, ax, sp, &cnt);
        for (int i = 0; i < cnt; i++) {
            int a = (int)(ax[i] < 0 ? ax[i] + x->rank : ax[i]);
            int64_t dim = x->dims[a].k, b = stt[i];
            if (b < 0)
                b += dim;
            if (sp[i] > 0)
                b = b < 0 ? 0 : b > dim ? dim : b;
            else
                b = b < 0 ? 0 : b > dim - 1 ? dim - 1 : b;
            s.base = cg_poly_add(s.base, cg_poly_scale(s.stride[a], b));
            s.stride[a] = cg_poly_scale(s.stride[a], sp[i]);
        }
        break;
    }
    default: /* a view op that is not a view here (its types differ): a converting copy, same order */
        cg_poly_strides(y, s.stride);
        break;
    }
    return cu_emit_copy(c, node, y->rank, dims, &d, &s, label);
}

/* ---- graph inputs and outputs ---- */

/* Copies value v between its storage and the caller's tensor at offset in
 * the workspace (in the graph's dtype): into that tensor (out) or from it. */
static void emit_io_copy(cu_ctx *c, int v, uint64_t offset, int out, const char *label)
{
    const ir_value *x = &c->g->values[v];
    cg_poly dims[IR_MAX_RANK];
    value_dims(x, dims);
    cu_view io = cu_view_ws((int64_t)offset, x->dtype, x->rank, dims), val = cu_view_of(c, v);
    if (out)
        cu_emit_copy(c, -1, x->rank, dims, &io, &val, label);
    else
        cu_emit_copy(c, -1, x->rank, dims, &val, &io, label);
}

int cu_emit_input_conversions(cu_ctx *c)
{
    const ir_graph *g = c->g;
    for (int k = 0; k < g->ninputs && c->d->status == VITC_OK; k++) {
        int v = g->inputs[k];
        if (c->sdt[v] != g->values[v].dtype)
            emit_io_copy(c, v, c->in_io[k].offset, 0, "input conversion");
    }
    return c->d->status;
}

int cu_emit_output_conversions(cu_ctx *c)
{
    const ir_graph *g = c->g;
    for (int k = 0; k < g->noutputs && c->d->status == VITC_OK; k++) {
        int v = g->outputs[k], r = cu_root(c, v);
        if (c->out_io[k].space == VITC_CUDA_SPACE_WEIGHTS) {
            int64_t off = cu_weights_of(c, r);
            c->out_io[k].offset = off < 0 ? 0 : (uint64_t)off;
            continue;
        }
        if (c->sdt[r] != g->values[v].dtype)
            emit_io_copy(c, v, c->out_io[k].offset, 1, "output conversion");
    }
    return c->d->status;
}
