/* cu_norm.c: LayerNormalization, Softmax and the reductions on the GPU.
 * LayerNormalization and Softmax are row kernels of the device library
 * (norm.cuh: a warp per row, statistics in fp32); ReduceMean/Sum/Max are
 * generated: one thread per output element looping over the reduced ones. */
#include "codegen/cuda/cu_impl.h"
#include "codegen/cuda/cu_launch.h"

#include <stdio.h>
#include <string.h>

enum { ROW_THREADS = 256, ROWS_PER_BLOCK = 8, RED_THREADS = 256, LN_REG_MAX = 1024 };

/* The reduced axes of a Reduce* node into red[] (1 = reduced); 0 if not constant. */
static int reduce_axes(const ir_graph *g, const ir_node *n, int *red)
{
    const ir_value *x = &g->values[n->inputs[0]];
    for (int i = 0; i < x->rank; i++)
        red[i] = 0;
    const ir_attr *a = ir_attr_get(n, IR_ATTR_AXES);
    int av = ir_input(n, 1), count = 0;
    int64_t axes[IR_MAX_RANK];
    if (a) {
        count = a->n;
        for (int i = 0; i < a->n && i < IR_MAX_RANK; i++)
            axes[i] = a->ints[i];
    } else if (av >= 0) {
        const ir_value *v = &g->values[av];
        if (!ir_value_is_plain_const(g, av) || v->dtype != IR_I64)
            return 0;
        count = (int)ir_value_numel(v, 1);
        for (int i = 0; i < count && i < IR_MAX_RANK; i++)
            axes[i] = ((const int64_t *)v->data)[i];
    }
    if (count > IR_MAX_RANK)
        return 0;
    if (count == 0) {
        if (ir_attr_int(n, IR_ATTR_NOOP_WITH_EMPTY_AXES, 0))
            return 1;
        for (int i = 0; i < x->rank; i++)
            red[i] = 1;
        return 1;
    }
    for (int i = 0; i < count; i++) {
        int64_t ax = axes[i] < 0 ? axes[i] + x->rank : axes[i];
        if (ax < 0 || ax >= x->rank)
            return 0;
        red[ax] = 1;
    }
    return 1;
}

int cu_norm_supports(const ir_graph *g, const ir_node *n, char *why, size_t len)
{
    const ir_value *x = &g->values[n->inputs[0]];
    switch (n->op) {
    case IR_OP_LAYERNORM:
    case IR_OP_RMS_NORM: {
        ir_norm v;
        if (!ir_norm_of(n, &v, why, len))
            return 0;
        int axis = ir_norm_axis(&v, x->rank);
        if (axis < 0) {
            snprintf(why, len, "%s axis out of range", ir_op_name(n->op));
            return 0;
        }
        int64_t C = 1;
        for (int i = (int)axis; i < x->rank; i++) {
            if (x->dims[i].e != 0) {
                snprintf(why, len, "%s over axes that depend on the batch", ir_op_name(n->op));
                return 0;
            }
            C *= x->dims[i].k;
        }
        const int params[2] = {v.scale, v.bias}, stats[2] = {v.mean, v.inv_std};
        for (int k = 0; k < 2; k++)
            if (params[k] >= 0 && ir_value_numel(&g->values[params[k]], 1) != C) {
                snprintf(why, len, "%s %s is not one value per normalised element", ir_op_name(n->op),
                         k == 0 ? "scale" : "bias");
                return 0;
            }
        for (int k = 0; k < 2; k++)
            if (stats[k] >= 0) {
                int used = 0;
                for (int i = 0; i < g->nnodes && !used; i++)
                    for (int j = 0; j < g->nodes[i].ninputs; j++)
                        used |= g->nodes[i].inputs[j] == stats[k];
                for (int j = 0; j < g->noutputs; j++)
                    used |= g->outputs[j] == stats[k];
                if (used) {
                    snprintf(why, len, "LayerNormalization's Mean and InvStdDev outputs are not supported");
                    return 0;
                }
            }
        return 1;
    }
    case IR_OP_SOFTMAX: {
        int64_t axis = ir_attr_int(n, IR_ATTR_AXIS, g->opset >= 13 ? -1 : 1);
        if (axis < 0)
            axis += x->rank;
        if (axis < 0 || axis >= x->rank) {
            snprintf(why, len, "Softmax axis out of range");
            return 0;
        }
        return 1;
    }
    case IR_OP_REDUCE_MEAN: case IR_OP_REDUCE_SUM: case IR_OP_REDUCE_MAX: case IR_OP_REDUCE_MIN: {
        int red[IR_MAX_RANK];
        if (!reduce_axes(g, n, red)) {
            snprintf(why, len, "%s needs constant axes in range", ir_op_name(n->op));
            return 0;
        }
        return 1;
    }
    default:
        snprintf(why, len, "%s is not a normalisation or reduction", ir_op_name(n->op));
        return 0;
    }
}

/* ---- a norm folded into the GEMMs after it ----
 *
 * y = (x - mean) rstd g + b, then y W: where every reader of y is a GEMM with
 * a constant weight taking y as its A, the GEMMs read x instead, with W's
 * rows scaled by g and b W added to their bias (cu_linear.c), and correct
 * each output in their epilogue: y W = rstd (x (g W) - mean colsum(g W)) + b W
 * (gemm.cuh: gemm_store2).  The norm's kernel then writes only the rows'
 * (mean, rstd), into y's own buffer (which is larger: C elements a row,
 * C * size >= 8 bytes), instead of the normalised rows: y is never written
 * nor read, which halves the norm's memory traffic and takes a kernel's
 * worth of reads out of the GEMM's A loads.
 *
 * Only where x is stored in the GEMM's operand type (fp32; fp16 and bf16
 * with a 16-bit residual stream, VITC_CUDA_WIDE_RESIDUAL=0): the GEMM then
 * multiplies x's stored values exactly as it would y's.  With an fp32
 * residual stream in fp16/bf16, or in tf32 (whose tensor cores round A to
 * 10 bits), x would be rounded before the mean is taken out: a row far from
 * 0 (a large mean against its spread) would lose its precision. */

static int plain_f32(const ir_graph *g, int v)
{
    return v < 0 || (ir_value_is_plain_const(g, v) && g->values[v].dtype == IR_F32);
}

/* Whether every reader of y (rows of C) is a GEMM taking it as its A, or a
 * view keeping rows of C whose readers are; mark: set their ln_of to norm.
 * Depth: views of views. */
static int gemm_readers(cu_ctx *c, int y, int64_t C, int norm, int mark, int depth)
{
    const ir_graph *g = c->g;
    char why[160];
    int readers = 0;
    for (int k = 0; k < g->noutputs; k++)
        if (g->outputs[k] == y)
            return 0;
    for (int j = 0; j < g->nnodes && depth < 8; j++) {
        const ir_node *m = &g->nodes[j];
        int reads = 0, as_a = 0;
        for (int k = 0; k < m->ninputs; k++)
            if (m->inputs[k] == y)
                reads++, as_a += k == 0;
        if (!reads)
            continue;
        if (reads != 1 || !as_a)
            return 0;
        int out = m->noutputs > 0 ? m->outputs[0] : -1;
        if (out >= 0 && c->plan.view_of[out] == y) { /* a view: its rows must stay the norm's */
            const ir_value *o = &g->values[out];
            if (o->rank < 1 || o->dims[o->rank - 1].e != 0 || o->dims[o->rank - 1].k != C ||
                !gemm_readers(c, out, C, norm, mark, depth + 1))
                return 0;
        } else if (c->plan.skip[j] || !cu_linear_supports(g, m, why, sizeof why)) {
            return 0;
        } else if (mark) {
            c->ln_of[j] = norm;
        }
        readers++;
    }
    return readers > 0 && depth < 8;
}

/* Whether norm node i can be folded into every node that reads its output. */
static int foldable(cu_ctx *c, int i)
{
    const ir_graph *g = c->g;
    const ir_node *n = &g->nodes[i];
    ir_norm v;
    char why[160];
    if ((n->op != IR_OP_LAYERNORM && n->op != IR_OP_RMS_NORM) || c->plan.skip[i] ||
        !cu_norm_supports(g, n, why, sizeof why) || !ir_norm_of(n, &v, why, sizeof why))
        return 0;
    const ir_value *x = &g->values[v.x];
    int rx = cu_root(c, v.x);
    if (ir_norm_axis(&v, x->rank) != x->rank - 1 || x->kind == IR_VAL_CONST || g->values[rx].kind == IR_VAL_CONST ||
        !plain_f32(g, v.scale) || !plain_f32(g, v.bias) || c->sdt[rx] != c->sdt[v.y] || cu_root(c, v.y) != v.y ||
        x->dims[x->rank - 1].k * (int64_t)ir_dtype_size(c->sdt[v.y]) < 8)
        return 0;
    return gemm_readers(c, v.y, x->dims[x->rank - 1].k, i, 0, 0);
}

int cu_norm_fold(cu_ctx *c)
{
    const ir_graph *g = c->g;
    for (int i = 0; i < g->nnodes; i++) {
        c->ln_of[i] = -1;
        c->ln_folded[i] = 0;
    }
    if (!c->knobs.cuda_ln_fold || c->prec == CU_TF32)
        return VITC_OK;
    for (int i = 0; i < g->nnodes; i++) {
        if (!foldable(c, i))
            continue;
        const ir_value *x = &g->values[g->nodes[i].inputs[0]];
        c->ln_folded[i] = 1;
        gemm_readers(c, g->nodes[i].outputs[0], x->dims[x->rank - 1].k, i, 1, 0);
    }
    return VITC_OK;
}

static int emit_layernorm(cu_ctx *c, int node)
{
    const ir_node *n = &c->g->nodes[node];
    ir_norm v;
    if (ir_norm_get(n, &v, c->d))
        return c->d->status;
    const ir_value *x = &c->g->values[v.x];
    int out = v.y, axis = ir_norm_axis(&v, x->rank);
    int64_t C = 1;
    for (int i = (int)axis; i < x->rank; i++)
        C *= x->dims[i].k;
    cg_poly rows = cg_poly_k(1);
    for (int i = 0; i < axis; i++)
        rows = cg_poly_mul(rows, cg_poly_dim(x->dims[i]));
    int gv = v.scale, bv = v.bias;
    const char *tx = cu_ctype(cu_sdt(c, v.x)), *ty = cu_ctype(cu_sdt(c, out));
    const char *tg = gv >= 0 ? cu_ctype(cu_sdt(c, gv)) : "float", *tb = bv >= 0 ? cu_ctype(cu_sdt(c, bv)) : "float";
    float eps = v.eps;
    cu_str t = {0};
    cu_str_add(&t, "VK_KERNEL(@, %d, vk_norm_params)\n{\n", ROW_THREADS);
    if (C <= LN_REG_MAX)
        cu_str_add(&t, "    vk::layernorm<%lld, ", (long long)C);
    else
        cu_str_add(&t, "    vk::layernorm_big<");
    char el[48];
    int stats = c->ln_folded[node];
    if (stats) /* only (mean, rstd) a row: the GEMMs after it apply the rest */
        gv = bv = -1;
    cu_str_add(&t, "%s, %s, %s, %s, %s, %s%s>(p, %s);\n}\n", gv >= 0 ? "true" : "false", bv >= 0 ? "true" : "false",
               tx, tg, tb, ty, stats ? v.centered ? ", true, true" : ", false, true" : v.centered ? "" : ", false",
               cu_float_lit(eps, el, sizeof el));
    char label[96];
    snprintf(label, sizeof label, "%s C=%lld%s", v.centered ? "layernorm" : "rmsnorm", (long long)C,
             stats ? " statistics (folded into the GEMMs after it)" : "");
    int f = cu_add_kernel(c, v.centered ? "ln" : "rms", label, &t);
    cu_str_free(&t);
    cu_launch *l = cu_launch_new(c, f, node, ROW_THREADS, 0);
    if (!l)
        return c->d->status;
    l->grid[0] = rows;
    l->div[0] = ROWS_PER_BLOCK;
    cu_arg_value(c, l, CU_FIELD(vk_norm_params, x), v.x);
    if (gv >= 0)
        cu_arg_value(c, l, CU_FIELD(vk_norm_params, scale), gv);
    if (bv >= 0)
        cu_arg_value(c, l, CU_FIELD(vk_norm_params, bias), bv);
    cu_arg_value(c, l, CU_FIELD(vk_norm_params, y), out);
    cu_arg_int(c, l, CU_FIELD(vk_norm_params, rows), rows);
    if (C > LN_REG_MAX)
        cu_arg_int(c, l, CU_FIELD(vk_norm_params, cols), cg_poly_k(C));
    return c->d->status;
}

static int emit_softmax(cu_ctx *c, int node)
{
    const ir_node *n = &c->g->nodes[node];
    const ir_value *x = &c->g->values[n->inputs[0]];
    int out = n->outputs[0];
    int64_t axis = ir_attr_int(n, IR_ATTR_AXIS, c->g->opset >= 13 ? -1 : 1);
    if (axis < 0)
        axis += x->rank;
    /* opset 13+: one axis; before: the flattened trailing axes from axis on */
    cg_poly outer = cg_poly_k(1), C = cg_poly_k(1), inner = cg_poly_k(1);
    for (int i = 0; i < x->rank; i++) {
        cg_poly d = cg_poly_dim(x->dims[i]);
        if (i < axis)
            outer = cg_poly_mul(outer, d);
        else if (i == axis || c->g->opset < 13)
            C = cg_poly_mul(C, d);
        else
            inner = cg_poly_mul(inner, d);
    }
    const char *tx = cu_ctype(cu_sdt(c, n->inputs[0])), *ty = cu_ctype(cu_sdt(c, out));
    cu_str t = {0};
    cu_str_add(&t, "VK_KERNEL(@, %d, vk_softmax_params)\n{\n    vk::softmax_rows<%s, %s>(p);\n}\n", ROW_THREADS, tx,
               ty);
    int f = cu_add_kernel(c, "softmax", "softmax", &t);
    cu_str_free(&t);
    cu_launch *l = cu_launch_new(c, f, node, ROW_THREADS, 0);
    if (!l)
        return c->d->status;
    cg_poly rows = cg_poly_mul(outer, inner);
    l->grid[0] = rows;
    l->div[0] = ROWS_PER_BLOCK;
    cu_arg_value(c, l, CU_FIELD(vk_softmax_params, x), n->inputs[0]);
    cu_arg_value(c, l, CU_FIELD(vk_softmax_params, y), out);
    cu_arg_int(c, l, CU_FIELD(vk_softmax_params, rows), rows);
    cu_arg_int(c, l, CU_FIELD(vk_softmax_params, cols), C);
    cu_arg_int(c, l, CU_FIELD(vk_softmax_params, inner), inner);
    return c->d->status;
}

static int emit_reduce(cu_ctx *c, int node)
{
    const ir_node *n = &c->g->nodes[node];
    const ir_value *x = &c->g->values[n->inputs[0]];
    int out = n->outputs[0];
    int red[IR_MAX_RANK];
    reduce_axes(c->g, n, red);
    cg_poly xs[IR_MAX_RANK], kept[IR_MAX_RANK], kst[IR_MAX_RANK], rd[IR_MAX_RANK], rst[IR_MAX_RANK];
    cg_poly_strides(x, xs);
    int nk = 0, nr = 0;
    cg_poly nout = cg_poly_k(1), nred = cg_poly_k(1);
    for (int i = 0; i < x->rank; i++) {
        cg_poly d = cg_poly_dim(x->dims[i]);
        if (red[i]) {
            rd[nr] = d;
            rst[nr++] = xs[i];
            nred = cg_poly_mul(nred, d);
        } else {
            kept[nk] = d;
            kst[nk++] = xs[i];
            nout = cg_poly_mul(nout, d);
        }
    }
    const char *tx = cu_ctype(cu_sdt(c, n->inputs[0])), *ty = cu_ctype(cu_sdt(c, out));
    const char *init = n->op == IR_OP_REDUCE_MAX ? "-vk_inf()" : n->op == IR_OP_REDUCE_MIN ? "vk_inf()" : "0.0f";
    char e[160];
    cu_str t = {0};
    cu_str_add(&t, "VK_KERNEL(@, %d, vk_reduce_params)\n{\n    const vk_i64 B = p.batch;\n    (void)B;\n", RED_THREADS);
    cu_str_add(&t, "    const %s *x = (const %s *)p.x;\n    %s *y = (%s *)p.y;\n", tx, tx, ty, ty);
    cu_str_add(&t, "    const vk_i64 n = %s;\n", cu_poly_expr(nout, e, sizeof e));
    cu_str_add(&t, "    const vk_i64 R = %s;\n", cu_poly_expr(nred, e, sizeof e));
    cu_str_add(&t, "    for (vk_i64 i = (vk_i64)blockIdx.x * %d + threadIdx.x; i < n; i += (vk_i64)gridDim.x * %d) {\n",
               RED_THREADS, RED_THREADS);
    cu_str_add(&t, "        vk_i64 q = i, c, base = 0;\n        (void)q;\n        (void)c;\n");
    for (int i = nk - 1; i >= 0; i--) {
        if (i > 0)
            cu_str_add(&t, "        c = q %% %s;\n        q /= %s;\n", cu_poly_expr(kept[i], e, sizeof e),
                       cu_poly_expr(kept[i], e, sizeof e));
        else
            cu_str_add(&t, "        c = q;\n");
        cu_str_add(&t, "        base += c * %s;\n", cu_poly_expr(kst[i], e, sizeof e));
    }
    cu_str_add(&t, "        float acc = %s;\n        for (vk_i64 r = 0; r < R; r++) {\n", init);
    cu_str_add(&t, "            vk_i64 s = r, o = base;\n            (void)s;\n");
    for (int i = nr - 1; i >= 0; i--) {
        if (i > 0) {
            char e2[160];
            cu_str_add(&t, "            o += (s %% %s) * %s;\n", cu_poly_expr(rd[i], e, sizeof e),
                       cu_poly_expr(rst[i], e2, sizeof e2));
            cu_str_add(&t, "            s /= %s;\n", cu_poly_expr(rd[i], e, sizeof e));
        } else
            cu_str_add(&t, "            o += s * %s;\n", cu_poly_expr(rst[i], e, sizeof e));
    }
    if (n->op == IR_OP_REDUCE_MAX)
        cu_str_add(&t, "            acc = fmaxf(acc, vk_get(x + o));\n        }\n");
    else if (n->op == IR_OP_REDUCE_MIN)
        cu_str_add(&t, "            acc = fminf(acc, vk_get(x + o));\n        }\n");
    else
        cu_str_add(&t, "            acc += vk_get(x + o);\n        }\n");
    if (n->op == IR_OP_REDUCE_MEAN)
        cu_str_add(&t, "        acc /= (float)R;\n");
    cu_str_add(&t, "        vk_put(y + i, acc);\n    }\n}\n");
    cu_launch *l = cu_launch_flat(c, "reduce", ir_op_name(n->op), &t, node, RED_THREADS, nout,
                                  CU_FIELD(vk_reduce_params, batch));
    if (!l)
        return c->d->status;
    cu_arg_value(c, l, CU_FIELD(vk_reduce_params, x), n->inputs[0]);
    cu_arg_value(c, l, CU_FIELD(vk_reduce_params, y), out);
    return c->d->status;
}

int cu_emit_norm(cu_ctx *c, int node)
{
    const ir_node *n = &c->g->nodes[node];
    if (n->outputs[0] < 0 || c->off[cu_root(c, n->outputs[0])] < 0)
        return VITC_OK;
    switch (n->op) {
    case IR_OP_LAYERNORM:
    case IR_OP_RMS_NORM: return emit_layernorm(c, node);
    case IR_OP_SOFTMAX: return emit_softmax(c, node);
    default: return emit_reduce(c, node);
    }
}
