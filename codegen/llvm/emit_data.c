/* emit_data.c: data movement.  Transpose, Slice, Gather with constant
 * indices, Expand, Concat and Split are all copies between two strided views
 * of stored tensors (map.c), so each is a few lines of stride arithmetic:
 * permuted strides, a start offset and a step, a dropped axis, zero strides
 * for broadcast dimensions, sub-blocks of the output or of the input.  Pad,
 * Tile, GatherND and ScatterND are lists of such copies planned for every
 * backend (codegen/moves.h), each one map here (a zero fill, or ScatterND's
 * reduction, as its body).  The view ops (Reshape and friends) cost nothing
 * unless their result is a graph output, which gets a flat copy.  Elements
 * move as raw bits of their size, so every dtype is exact. */
#include "codegen/llvm/cg_impl.h"
#include "codegen/moves.h"

#include <stdio.h>
#include <string.h>

/* Reads a plain integer constant of at most max entries. */
static int int_list(const ir_graph *g, int v, int64_t *out, int max, int *n)
{
    if (!ir_value_is_plain_const(g, v))
        return 0;
    const ir_value *c = &g->values[v];
    size_t es = ir_dtype_size(c->dtype);
    if ((c->dtype != IR_I64 && c->dtype != IR_I32) || c->nbytes / es > (size_t)max)
        return 0;
    *n = (int)(c->nbytes / es);
    for (int i = 0; i < *n; i++) {
        if (c->dtype == IR_I64) {
            memcpy(&out[i], (const char *)c->data + 8 * i, 8);
        } else {
            int32_t x;
            memcpy(&x, (const char *)c->data + 4 * i, 4);
            out[i] = x;
        }
    }
    return 1;
}

static int static_dim(ir_dim d, int64_t *k)
{
    if (d.e != 0 && d.k != 0)
        return 0;
    *k = d.e == 0 ? d.k : 0;
    return 1;
}

/* Slice: per axis of x, the first element and the step (ONNX clamping). */
typedef struct {
    int64_t first[IR_MAX_RANK], step[IR_MAX_RANK];
} slice_plan;

static int plan_slice(const ir_graph *g, const ir_node *n, slice_plan *sp, char *why, size_t len)
{
    const ir_value *x = &g->values[n->inputs[0]], *y = &g->values[n->outputs[0]];
    int64_t st[IR_MAX_RANK], en[IR_MAX_RANK], ax[IR_MAX_RANK], stp[IR_MAX_RANK];
    int ns, ne, na = 0, nst = 0;
    if (!int_list(g, n->inputs[1], st, IR_MAX_RANK, &ns) || !int_list(g, n->inputs[2], en, IR_MAX_RANK, &ne) ||
        (ir_input(n, 3) >= 0 && !int_list(g, n->inputs[3], ax, IR_MAX_RANK, &na)) ||
        (ir_input(n, 4) >= 0 && !int_list(g, n->inputs[4], stp, IR_MAX_RANK, &nst))) {
        snprintf(why, len, "Slice needs constant starts, ends, axes and steps");
        return 0;
    }
    if (ne != ns || (ir_input(n, 3) >= 0 && na != ns) || (ir_input(n, 4) >= 0 && nst != ns)) {
        snprintf(why, len, "Slice's starts, ends, axes and steps differ in length");
        return 0;
    }
    for (int i = 0; i < x->rank; i++) {
        sp->first[i] = 0;
        sp->step[i] = 1;
    }
    for (int k = 0; k < ns; k++) {
        int64_t a = ir_input(n, 3) >= 0 ? ax[k] : k, s = ir_input(n, 4) >= 0 ? stp[k] : 1, d;
        a = a < 0 ? a + x->rank : a;
        if (a < 0 || a >= x->rank || s == 0) {
            snprintf(why, len, "Slice axis %lld or step %lld is invalid", (long long)a, (long long)s);
            return 0;
        }
        if (!static_dim(x->dims[a], &d)) {
            /* a batch-sized axis: only the whole of it */
            if (s == 1 && ir_dim_eq(x->dims[a], y->dims[a]) && (st[k] == 0 || st[k] <= -(INT64_MAX / 2)))
                continue;
            snprintf(why, len, "Slice of part of a batch-sized axis is not supported");
            return 0;
        }
        int64_t b = st[k];
        if (b < 0)
            b += d;
        if (s > 0)
            b = b < 0 ? 0 : b > d ? d : b;
        else
            b = b < 0 ? 0 : b > d - 1 ? d - 1 : b;
        sp->first[a] = b;
        sp->step[a] = s;
    }
    return 1;
}

int cg_data_supports(const ir_graph *g, const ir_node *n, char *why, size_t len)
{
    switch (n->op) {
    case IR_OP_SLICE: {
        slice_plan sp;
        return plan_slice(g, n, &sp, why, len);
    }
    case IR_OP_GATHER: {
        const ir_value *iv = &g->values[n->inputs[1]];
        if (!ir_value_is_plain_const(g, n->inputs[1]) || (iv->dtype != IR_I64 && iv->dtype != IR_I32)) {
            snprintf(why, len, "Gather needs constant int indices");
            return 0;
        }
        const ir_value *x = &g->values[n->inputs[0]];
        int64_t axis = ir_attr_int(n, IR_ATTR_AXIS, 0), d;
        axis = axis < 0 ? axis + x->rank : axis;
        if (axis < 0 || axis >= x->rank || !static_dim(x->dims[axis], &d)) {
            snprintf(why, len, "Gather along a batch-sized axis is not supported");
            return 0;
        }
        if (iv->nbytes / ir_dtype_size(iv->dtype) > 4096) {
            snprintf(why, len, "Gather with more than 4096 indices is not supported");
            return 0;
        }
        return 1;
    }
    case IR_OP_TILE: case IR_OP_PAD: case IR_OP_GATHER_ND: case IR_OP_SCATTER_ND: {
        static const ir_dtype reduce_ok[] = {IR_F32, IR_F64, IR_I32, IR_I64};
        return cg_moves_supported(g, n, reduce_ok, 4, "CPU", why, len);
    }
    case IR_OP_RESIZE:
        return !cg_refuse_folded_only(n, "CPU", why, len);
    default:
        return 1;
    }
}

static int emit_views(cg_ctx *cg, int node, const cg_view *dst, const cg_view *src, const char *what)
{
    cg_map m;
    memset(&m, 0, sizeof m);
    m.op[0] = *dst;
    m.op[1] = *src;
    m.nops = 2;
    m.rank = dst->rank;
    memcpy(m.dims, dst->dims, sizeof m.dims);
    m.op[1].rank = dst->rank;
    char label[200];
    snprintf(label, sizeof label, "%s %s", what, cg->g->nodes[node].name);
    m.label = label;
    m.cost = 1;
    return cg_emit_map(cg, &m, node);
}

/* A flat copy: same elements in the same order, any shapes of equal size. */
static int emit_flat_copy(cg_ctx *cg, int node, int src, int dst)
{
    cg_view d = cg_view_of(cg, dst), s = cg_view_of(cg, src);
    cg_poly n = cg_poly_numel(&cg->g->values[dst]);
    d.rank = s.rank = 1;
    d.dims[0] = s.dims[0] = n;
    d.strides[0] = s.strides[0] = cg_poly_k(1);
    return emit_views(cg, node, &d, &s, ir_op_name(cg->g->nodes[node].op));
}

static LLVMValueRef ones_body(cg_ctx *cg, const cg_map *m, LLVMBuilderRef b, LLVMValueRef *ptrs)
{
    (void)m, (void)b, (void)ptrs;
    return LLVMConstInt(cg->t_i8, 1, 0);
}

static int emit_transpose(cg_ctx *cg, int node)
{
    const ir_node *n = &cg->g->nodes[node];
    cg_view src = cg_view_of(cg, n->inputs[0]), dst = cg_view_of(cg, n->outputs[0]), s = src;
    const ir_attr *a = ir_attr_get(n, IR_ATTR_PERM);
    int r = src.rank;
    for (int i = 0; i < r; i++) {
        int64_t p = a && a->kind == IR_AT_INTS && a->n == r ? a->ints[i] : r - 1 - i;
        p = p < 0 ? p + r : p;
        if (p < 0 || p >= r)
            return cg_fail(cg, VITC_BAD_INPUT, node, "perm is not a permutation of 0..%d", r - 1);
        s.strides[i] = src.strides[p];
        s.dims[i] = src.dims[p];
    }
    return emit_views(cg, node, &dst, &s, "Transpose");
}

static int emit_slice(cg_ctx *cg, int node)
{
    const ir_node *n = &cg->g->nodes[node];
    slice_plan sp;
    char why[200];
    if (!plan_slice(cg->g, n, &sp, why, sizeof why))
        return cg_fail(cg, VITC_BAD_INPUT, node, "%s", why);
    cg_view s = cg_view_of(cg, n->inputs[0]), dst = cg_view_of(cg, n->outputs[0]);
    for (int i = 0; i < s.rank; i++) {
        s.base = cg_poly_add(s.base, cg_poly_scale(s.strides[i], sp.first[i]));
        s.strides[i] = cg_poly_scale(s.strides[i], sp.step[i]);
    }
    return emit_views(cg, node, &dst, &s, "Slice");
}

static int emit_gather(cg_ctx *cg, int node)
{
    const ir_graph *g = cg->g;
    const ir_node *n = &g->nodes[node];
    const ir_value *x = &g->values[n->inputs[0]], *iv = &g->values[n->inputs[1]];
    int axis = (int)ir_attr_int(n, IR_ATTR_AXIS, 0);
    axis = axis < 0 ? axis + x->rank : axis;
    int64_t d = x->dims[axis].k, cnt = (int64_t)(iv->nbytes / ir_dtype_size(iv->dtype));
    int64_t idx[4096];
    int ni;
    if (!int_list(g, n->inputs[1], idx, 4096, &ni) || ni != cnt)
        return cg_fail(cg, VITC_BAD_INPUT, node, "Gather needs constant int indices");
    for (int j = 0; j < ni; j++) {
        if (idx[j] < -d || idx[j] >= d)
            return cg_fail(cg, VITC_BAD_INPUT, node, "index %lld is out of range for axis %d of size %lld",
                           (long long)idx[j], axis, (long long)d);
        idx[j] = idx[j] < 0 ? idx[j] + d : idx[j];
    }
    cg_view xs = cg_view_of(cg, n->inputs[0]), out = cg_view_of(cg, n->outputs[0]);
    /* x without its gathered axis */
    cg_view s = xs;
    s.rank = x->rank - 1;
    for (int i = axis; i < s.rank; i++) {
        s.dims[i] = xs.dims[i + 1];
        s.strides[i] = xs.strides[i + 1];
    }
    int step_ok = ni >= 1 && iv->rank <= 1;
    for (int j = 2; j < ni && step_ok; j++)
        step_ok = idx[j] - idx[j - 1] == idx[1] - idx[0];
    if (iv->rank == 0 || (step_ok && iv->rank == 1)) {
        /* one index, or an arithmetic run of them: a strided view */
        cg_view v = xs;
        v.base = cg_poly_add(xs.base, cg_poly_scale(xs.strides[axis], idx[0]));
        if (iv->rank == 0) {
            v = s;
            v.base = cg_poly_add(xs.base, cg_poly_scale(xs.strides[axis], idx[0]));
        } else {
            v.dims[axis] = cg_poly_k(ni);
            v.strides[axis] = cg_poly_scale(xs.strides[axis], ni > 1 ? idx[1] - idx[0] : 1);
        }
        return emit_views(cg, node, &out, &v, "Gather");
    }
    /* Otherwise one copy per index: out[..., j, ...] = x[..., idx[j], ...]. */
    cg_view o = out;
    o.rank = x->rank - 1;
    for (int i = 0; i < axis; i++) {
        o.dims[i] = out.dims[i];
        o.strides[i] = out.strides[i];
    }
    for (int i = axis; i < o.rank; i++) {
        o.dims[i] = out.dims[i + iv->rank];
        o.strides[i] = out.strides[i + iv->rank];
    }
    cg_poly inner = cg_poly_k(1);
    for (int i = axis + 1; i < x->rank; i++)
        inner = cg_poly_mul(inner, xs.dims[i]);
    for (int j = 0; j < ni; j++) {
        cg_view oj = o, sj = s;
        oj.base = cg_poly_scale(inner, j);
        sj.base = cg_poly_add(xs.base, cg_poly_scale(xs.strides[axis], idx[j]));
        int st = emit_views(cg, node, &oj, &sj, "Gather");
        if (st)
            return st;
    }
    return VITC_OK;
}

static int emit_expand(cg_ctx *cg, int node)
{
    const ir_node *n = &cg->g->nodes[node];
    cg_view dst = cg_view_of(cg, n->outputs[0]), s = cg_view_of(cg, n->inputs[0]);
    cg_view b = cg_view_broadcast(&s, dst.rank, dst.dims);
    return emit_views(cg, node, &dst, &b, "Expand");
}

/* Concat and Split: the pieces (Concat's inputs, Split's outputs) stand one
 * after another along the axis of the whole (Concat's output, Split's input);
 * each piece is copied into (Concat) or out of (Split) its window of the whole. */
static int emit_pieces(cg_ctx *cg, int node, int split)
{
    const ir_node *n = &cg->g->nodes[node];
    cg_view whole = cg_view_of(cg, split ? n->inputs[0] : n->outputs[0]);
    int axis = (int)ir_attr_int(n, IR_ATTR_AXIS, 0);
    axis = axis < 0 ? axis + whole.rank : axis;
    if (axis < 0 || axis >= whole.rank)
        return cg_fail(cg, VITC_BAD_INPUT, node, "axis %d is out of range", axis);
    cg_poly at = cg_poly_k(0);
    int npieces = split ? n->noutputs : n->ninputs;
    for (int k = 0; k < npieces; k++) {
        int v = split ? n->outputs[k] : n->inputs[k];
        if (v < 0)
            continue;
        cg_view piece = cg_view_of(cg, v), win = whole;
        memcpy(win.dims, piece.dims, sizeof win.dims);
        win.base = cg_poly_mul(at, whole.strides[axis]);
        at = cg_poly_add(at, piece.dims[axis]);
        if (split && cg->loc[v].kind == CG_LOC_NONE)
            continue; /* nobody reads it */
        int st = split ? emit_views(cg, node, &piece, &win, "Split") : emit_views(cg, node, &win, &piece, "Concat");
        if (st)
            return st;
    }
    return VITC_OK;
}

static LLVMValueRef zero_body(cg_ctx *cg, const cg_map *m, LLVMBuilderRef b, LLVMValueRef *ptrs)
{
    (void)b, (void)ptrs;
    return LLVMConstNull(cg_raw_type(cg, m->op[0].dtype));
}

/* ScatterND's reductions, as the interpreter computes them: dst op src,
 * max and min keeping dst unless src compares greater (less). */
static LLVMValueRef combine_body(cg_ctx *cg, const cg_map *m, LLVMBuilderRef b, LLVMValueRef *ptrs)
{
    const cg_move *mo = m->ud;
    LLVMTypeRef t = cg_mem_type(cg, m->op[0].dtype);
    LLVMValueRef a = LLVMBuildLoad2(b, t, ptrs[0], ""), v = LLVMBuildLoad2(b, t, ptrs[1], "");
    int fl = ir_dtype_is_float(m->op[0].dtype);
    switch (mo->op) {
    case CG_MOVE_ADD: return fl ? LLVMBuildFAdd(b, a, v, "") : LLVMBuildAdd(b, a, v, "");
    case CG_MOVE_MUL: return fl ? LLVMBuildFMul(b, a, v, "") : LLVMBuildMul(b, a, v, "");
    case CG_MOVE_MAX:
        return LLVMBuildSelect(b, fl ? LLVMBuildFCmp(b, LLVMRealOGT, v, a, "") : LLVMBuildICmp(b, LLVMIntSGT, v, a, ""),
                               v, a, "");
    case CG_MOVE_MIN:
        return LLVMBuildSelect(b, fl ? LLVMBuildFCmp(b, LLVMRealOLT, v, a, "") : LLVMBuildICmp(b, LLVMIntSLT, v, a, ""),
                               v, a, "");
    case CG_MOVE_COPY: case CG_MOVE_ZERO: break;
    }
    return v;
}

static cg_view move_view(cg_ctx *cg, const cg_move *mo, const cg_move_side *s)
{
    cg_view v = cg_view_of(cg, s->value);
    v.rank = mo->rank;
    memcpy(v.dims, mo->dims, sizeof v.dims);
    memcpy(v.strides, s->strides, sizeof v.strides);
    v.base = s->base;
    return v;
}

/* Pad, Tile, GatherND, ScatterND: their moves (codegen/moves.h), in order. */
static int emit_moves(cg_ctx *cg, int node)
{
    const ir_node *n = &cg->g->nodes[node];
    cg_moves mv;
    char why[256], label[200];
    if (!cg_moves_plan(cg->g, n, &mv, why, sizeof why))
        return cg_fail(cg, VITC_BAD_INPUT, node, "%s", why);
    snprintf(label, sizeof label, "%s %s", ir_op_name(n->op), n->name);
    static const char *const sigs[] = {
        [CG_MOVE_COPY] = "copy", [CG_MOVE_ZERO] = "zero", [CG_MOVE_ADD] = "add", [CG_MOVE_MUL] = "mul",
        [CG_MOVE_MAX] = "max", [CG_MOVE_MIN] = "min"};
    int st = VITC_OK;
    for (int i = 0; i < mv.n && st == VITC_OK; i++) {
        const cg_move *mo = &mv.m[i];
        cg_map m;
        memset(&m, 0, sizeof m);
        m.rank = mo->rank;
        memcpy(m.dims, mo->dims, sizeof m.dims);
        m.op[0] = move_view(cg, mo, &mo->dst);
        m.nops = 1;
        if (mo->op != CG_MOVE_ZERO)
            m.op[m.nops++] = move_view(cg, mo, &mo->src);
        if (mo->op == CG_MOVE_ZERO) {
            m.body = zero_body;
            m.raw = 1;
        } else if (mo->op != CG_MOVE_COPY) {
            m.body = combine_body;
        }
        m.sig = sigs[mo->op];
        m.ud = (void *)mo;
        m.label = label;
        m.cost = 1;
        st = cg_emit_map(cg, &m, node);
    }
    cg_moves_free(&mv);
    return st;
}

int cg_emit_data(cg_ctx *cg, int node)
{
    const ir_node *n = &cg->g->nodes[node];
    switch (n->op) {
    case IR_OP_TRANSPOSE: return emit_transpose(cg, node);
    case IR_OP_SLICE: return emit_slice(cg, node);
    case IR_OP_GATHER: return emit_gather(cg, node);
    case IR_OP_EXPAND: return emit_expand(cg, node);
    case IR_OP_CONCAT: return emit_pieces(cg, node, 0);
    case IR_OP_SPLIT: return emit_pieces(cg, node, 1);
    case IR_OP_PAD: case IR_OP_TILE: case IR_OP_GATHER_ND: case IR_OP_SCATTER_ND: return emit_moves(cg, node);
    case IR_OP_DROPOUT:
        if (n->noutputs > 1 && n->outputs[1] >= 0 && cg->loc[n->outputs[1]].kind != CG_LOC_NONE) {
            cg_map m;
            memset(&m, 0, sizeof m);
            m.op[0] = cg_view_of(cg, n->outputs[1]);
            m.rank = m.op[0].rank;
            memcpy(m.dims, m.op[0].dims, sizeof m.dims);
            m.nops = 1;
            m.body = ones_body;
            m.sig = "ones";
            m.label = "Dropout mask";
            m.cost = 1;
            int st = cg_emit_map(cg, &m, node);
            if (st)
                return st;
        }
        /* fall through */
    case IR_OP_RESHAPE: case IR_OP_FLATTEN: case IR_OP_SQUEEZE: case IR_OP_UNSQUEEZE: case IR_OP_IDENTITY:
        return emit_flat_copy(cg, node, n->inputs[0], n->outputs[0]);
    default:
        return cg_fail(cg, VITC_INTERNAL, node, "is not a data-movement op");
    }
}
