/* cu_misc.c: the ops a ViT leaves behind only when a fusion did not fire,
 * in plain fp32 SIMT kernels (misc.cuh): MatMul and Gemm between two
 * computed tensors (numpy broadcasting over the batch dims, transposes and
 * broadcasts through strides), and Conv that is not a patch embedding. */
#include "codegen/cuda/cu_impl.h"
#include "codegen/cuda/cu_launch.h"

#include <stdio.h>
#include <string.h>

enum { BMM_THREADS = 256, CONV_THREADS = 256 };

static int fixed(ir_dim d) { return d.e == 0 || d.k == 0; }

int cu_misc_supports(const ir_graph *g, const ir_node *n, char *why, size_t len)
{
    const ir_value *a = &g->values[n->inputs[0]];
    switch (n->op) {
    case IR_OP_MATMUL: {
        const ir_value *b = &g->values[n->inputs[1]];
        if (a->rank < 1 || b->rank < 1) {
            snprintf(why, len, "MatMul of scalars");
            return 0;
        }
        if (b->rank >= 1 && !fixed(b->dims[b->rank - 1])) {
            snprintf(why, len, "MatMul whose column count depends on the batch");
            return 0;
        }
        if (a->rank >= 2 && !fixed(a->dims[a->rank - 2]) && a->rank > 2) {
            snprintf(why, len, "batched MatMul whose row count depends on the batch");
            return 0;
        }
        return 1;
    }
    case IR_OP_GEMM:
        if (a->rank != 2 || g->values[n->inputs[1]].rank != 2) {
            snprintf(why, len, "Gemm of non-matrices");
            return 0;
        }
        if (!fixed(g->values[n->inputs[1]].dims[ir_attr_int(n, IR_ATTR_TRANS_B, 0) ? 0 : 1])) {
            snprintf(why, len, "Gemm whose column count depends on the batch");
            return 0;
        }
        return 1;
    case IR_OP_CONV: {
        const ir_value *w = &g->values[n->inputs[1]];
        const ir_attr *ap = ir_attr_get(n, IR_ATTR_AUTO_PAD);
        if ((a->rank != 4 && a->rank != 3) || w->rank != a->rank) {
            snprintf(why, len, "Conv of rank %d (the CUDA backend takes 1-D and 2-D)", a->rank);
            return 0;
        }
        const int pad = ir_auto_pad_of(n);
        if (pad != IR_PAD_NOTSET && pad != IR_PAD_VALID) {
            snprintf(why, len, "Conv auto_pad=%s", ap && ap->s ? ap->s : "(not a string)");
            return 0;
        }
        for (int i = 1; i < a->rank; i++)
            if (!fixed(a->dims[i]) || !fixed(w->dims[i])) {
                snprintf(why, len, "Conv whose channels or image size depend on the batch");
                return 0;
            }
        return 1;
    }
    default:
        snprintf(why, len, "%s is not supported by the CUDA backend", ir_op_name(n->op));
        return 0;
    }
}

/* One bmm launch: pointers, strides (elements) and the batch dims' strides. */
typedef struct {
    int a, b, y, out;          /* values; y may be -1 */
    cg_poly M, N, K;
    cg_poly a_sm, a_sk, b_sk, b_sn, y_sm, y_sn;
    int nbatch;
    cg_poly bdims[IR_MAX_RANK], ast[IR_MAX_RANK], bst[IR_MAX_RANK];
    float alpha, beta;
} bmm_job;

static int emit_bmm(cu_ctx *c, int node, const bmm_job *j)
{
    char e[160];
    int64_t k;
    int m_static = cg_poly_is_const(j->M, &k);
    cg_poly batches = cg_poly_k(1);
    for (int i = 0; i < j->nbatch; i++)
        batches = cg_poly_mul(batches, j->bdims[i]);
    if (!m_static && !cg_poly_is_const(batches, &k))
        return cu_fail(c, VITC_BAD_INPUT, node, "a batched product whose rows and batch both depend on the batch");
    const char *ta = cu_ctype(cu_sdt(c, j->a)), *tb = cu_ctype(cu_sdt(c, j->b)), *to = cu_ctype(cu_sdt(c, j->out));
    const char *ty = j->y >= 0 ? cu_ctype(cu_sdt(c, j->y)) : "float";
    cu_str t = {0};
    cu_str_add(&t, "VK_KERNEL(@, %d, vk_bmm_params)\n{\n    const vk_i64 B = p.batch;\n    (void)B;\n", BMM_THREADS);
    cu_str_add(&t, "    const vk_i64 M = %s", cu_poly_expr(j->M, e, sizeof e));
    cu_str_add(&t, ", N = %s", cu_poly_expr(j->N, e, sizeof e));
    cu_str_add(&t, ", K = %s;\n", cu_poly_expr(j->K, e, sizeof e));
    cu_str_add(&t, "    const vk_i64 tmn = (M + 15) / 16;\n    vk_i64 q = blockIdx.x, bi, c;\n    (void)c;\n");
    if (m_static)
        cu_str_add(&t, "    const vk_i64 tm = q %% tmn;\n    bi = q / tmn;\n");
    else
        cu_str_add(&t, "    const vk_i64 tm = q;\n    bi = blockIdx.z;\n");
    cu_str_add(&t, "    const vk_i64 tn = blockIdx.y;\n    vk_i64 ao = 0, bo = 0, yo = 0;\n    q = bi;\n");
    for (int i = j->nbatch - 1; i >= 0; i--) {
        cu_str_add(&t, "    c = q %% %s;\n", cu_poly_expr(j->bdims[i], e, sizeof e));
        cu_str_add(&t, "    q /= %s;\n", cu_poly_expr(j->bdims[i], e, sizeof e));
        cu_str_add(&t, "    ao += c * %s;\n", cu_poly_expr(j->ast[i], e, sizeof e));
        cu_str_add(&t, "    bo += c * %s;\n", cu_poly_expr(j->bst[i], e, sizeof e));
    }
    cu_str_add(&t, "    (void)yo;\n");
    cu_str_add(&t, "    vk::bmm_tile((const %s *)p.a + ao, %s", ta, cu_poly_expr(j->a_sm, e, sizeof e));
    cu_str_add(&t, ", %s", cu_poly_expr(j->a_sk, e, sizeof e));
    cu_str_add(&t, ", (const %s *)p.b + bo, %s", tb, cu_poly_expr(j->b_sk, e, sizeof e));
    cu_str_add(&t, ", %s,\n        (const %s *)p.c, %s", cu_poly_expr(j->b_sn, e, sizeof e), ty,
               cu_poly_expr(j->y_sm, e, sizeof e));
    char f1[48], f2[48];
    cu_str_add(&t, ", %s, (%s *)p.y + bi * M * N, N, 1LL, M, N, K, %s, %s, tm, tn);\n}\n",
               cu_poly_expr(j->y_sn, e, sizeof e), to, cu_float_lit(j->alpha, f1, sizeof f1),
               cu_float_lit(j->beta, f2, sizeof f2));
    int f = cu_add_kernel(c, "bmm", "matmul simt", &t);
    cu_str_free(&t);
    cu_launch *l = cu_launch_new(c, f, node, BMM_THREADS, 2 * 16 * 17 * 4);
    if (!l)
        return c->d->status;
    int64_t nt, ntm = 0;
    cg_poly_is_const(j->N, &nt);
    if (m_static) {
        cg_poly_is_const(j->M, &ntm);
        l->grid[0] = cg_poly_scale(batches, (ntm + 15) / 16);
    } else {
        l->grid[0] = j->M;
        l->div[0] = 16;
        l->grid[2] = batches;
    }
    l->grid[1] = cg_poly_k((nt + 15) / 16);
    cu_arg_int(c, l, CU_FIELD(vk_bmm_params, batch), cg_poly_dim(ir_dim_batch(1)));
    cu_arg_value(c, l, CU_FIELD(vk_bmm_params, a), j->a);
    cu_arg_value(c, l, CU_FIELD(vk_bmm_params, b), j->b);
    if (j->y >= 0)
        cu_arg_value(c, l, CU_FIELD(vk_bmm_params, c), j->y);
    cu_arg_value(c, l, CU_FIELD(vk_bmm_params, y), j->out);
    return c->d->status;
}

static int emit_matmul(cu_ctx *c, int node)
{
    const ir_node *n = &c->g->nodes[node];
    const ir_value *a = &c->g->values[n->inputs[0]], *b = &c->g->values[n->inputs[1]];
    const ir_value *o = &c->g->values[n->outputs[0]];
    bmm_job j;
    memset(&j, 0, sizeof j);
    j.a = n->inputs[0];
    j.b = n->inputs[1];
    j.y = -1;
    j.out = n->outputs[0];
    j.alpha = 1.0f;
    cg_poly as[IR_MAX_RANK], bs[IR_MAX_RANK];
    cg_poly_strides(a, as);
    cg_poly_strides(b, bs);
    int am = a->rank >= 2, bn = b->rank >= 2;
    j.K = cg_poly_dim(a->dims[a->rank - 1]);
    j.a_sk = as[a->rank - 1];
    j.M = am ? cg_poly_dim(a->dims[a->rank - 2]) : cg_poly_k(1);
    j.a_sm = am ? as[a->rank - 2] : cg_poly_k(0);
    j.N = bn ? cg_poly_dim(b->dims[b->rank - 1]) : cg_poly_k(1);
    j.b_sn = bn ? bs[b->rank - 1] : cg_poly_k(0);
    j.b_sk = bn ? bs[b->rank - 2] : bs[b->rank - 1];
    j.y_sm = j.y_sn = cg_poly_k(0);
    j.nbatch = o->rank - am - bn;
    if (j.nbatch < 0)
        j.nbatch = 0;
    for (int i = 0; i < j.nbatch; i++) {
        j.bdims[i] = cg_poly_dim(o->dims[i]);
        int ka = i - (j.nbatch - (a->rank - 2)), kb = i - (j.nbatch - (b->rank - 2));
        int a_b = ka < 0 || (a->dims[ka].k == 1 && a->dims[ka].e == 0), b_b = kb < 0 || (b->dims[kb].k == 1 && b->dims[kb].e == 0);
        j.ast[i] = a_b ? cg_poly_k(0) : as[ka];
        j.bst[i] = b_b ? cg_poly_k(0) : bs[kb];
    }
    return emit_bmm(c, node, &j);
}

static int emit_gemm(cu_ctx *c, int node)
{
    const ir_node *n = &c->g->nodes[node];
    const ir_value *a = &c->g->values[n->inputs[0]], *b = &c->g->values[n->inputs[1]];
    bmm_job j;
    memset(&j, 0, sizeof j);
    j.a = n->inputs[0];
    j.b = n->inputs[1];
    j.y = ir_input(n, 2);
    j.out = n->outputs[0];
    j.alpha = ir_attr_float(n, IR_ATTR_ALPHA, 1.0f);
    j.beta = ir_attr_float(n, IR_ATTR_BETA, 1.0f);
    int ta = (int)ir_attr_int(n, IR_ATTR_TRANS_A, 0), tb = (int)ir_attr_int(n, IR_ATTR_TRANS_B, 0);
    cg_poly as[2], bs[2];
    cg_poly_strides(a, as);
    cg_poly_strides(b, bs);
    j.M = cg_poly_dim(a->dims[ta ? 1 : 0]);
    j.K = cg_poly_dim(a->dims[ta ? 0 : 1]);
    j.N = cg_poly_dim(b->dims[tb ? 0 : 1]);
    j.a_sm = as[ta ? 1 : 0];
    j.a_sk = as[ta ? 0 : 1];
    j.b_sk = bs[tb ? 1 : 0];
    j.b_sn = bs[tb ? 0 : 1];
    j.y_sm = j.y_sn = cg_poly_k(0);
    if (j.y >= 0) { /* C broadcasts to [M, N] */
        const ir_value *y = &c->g->values[j.y];
        cg_poly ys[IR_MAX_RANK];
        cg_poly_strides(y, ys);
        if (y->rank >= 1 && !(y->dims[y->rank - 1].k == 1 && y->dims[y->rank - 1].e == 0))
            j.y_sn = ys[y->rank - 1];
        if (y->rank >= 2 && !(y->dims[y->rank - 2].k == 1 && y->dims[y->rank - 2].e == 0))
            j.y_sm = ys[y->rank - 2];
    }
    return emit_bmm(c, node, &j);
}

static int emit_conv(cu_ctx *c, int node)
{
    const ir_node *n = &c->g->nodes[node];
    const ir_value *x = &c->g->values[n->inputs[0]], *w = &c->g->values[n->inputs[1]];
    const ir_value *y = &c->g->values[n->outputs[0]];
    int two = x->rank == 4;
    int64_t H = two ? x->dims[2].k : 1, W = x->dims[two ? 3 : 2].k, KH = two ? w->dims[2].k : 1,
            KW = w->dims[two ? 3 : 2].k, Ho = two ? y->dims[2].k : 1, Wo = y->dims[two ? 3 : 2].k;
    const ir_attr *st = ir_attr_get(n, IR_ATTR_STRIDES), *pd = ir_attr_get(n, IR_ATTR_PADS),
                  *dl = ir_attr_get(n, IR_ATTR_DILATIONS);
    int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
    if (st)
        two ? (sh = st->ints[0], sw = st->ints[1]) : (sw = st->ints[0]);
    if (pd)
        two ? (ph = pd->ints[0], pw = pd->ints[1]) : (pw = pd->ints[0]);
    if (dl)
        two ? (dh = dl->ints[0], dw = dl->ints[1]) : (dw = dl->ints[0]);
    int64_t groups = ir_attr_int(n, IR_ATTR_GROUP, 1);
    int bv = ir_input(n, 2);
    const char *tx = cu_ctype(cu_sdt(c, n->inputs[0])), *tw = cu_ctype(cu_sdt(c, n->inputs[1]));
    const char *tbias = bv >= 0 ? cu_ctype(cu_sdt(c, bv)) : "float", *to = cu_ctype(cu_sdt(c, n->outputs[0]));
    cg_poly total = cg_poly_numel(y);
    char e[160];
    cu_str t = {0};
    cu_str_add(&t, "VK_KERNEL(@, %d, vk_conv_params)\n{\n    const vk_i64 B = p.batch;\n    (void)B;\n", CONV_THREADS);
    cu_str_add(&t, "    vk::conv2d<%s, %s, %s, %s>(p, %s,\n", tx, tw, tbias, to, cu_poly_expr(total, e, sizeof e));
    cu_str_add(&t, "        %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld);\n}\n",
               (long long)x->dims[1].k, (long long)H, (long long)W, (long long)w->dims[0].k, (long long)Ho,
               (long long)Wo, (long long)KH, (long long)KW, (long long)sh, (long long)sw, (long long)ph, (long long)pw,
               (long long)dh, (long long)dw, (long long)groups);
    cu_launch *l =
        cu_launch_flat(c, "conv", "conv simt", &t, node, CONV_THREADS, total, CU_FIELD(vk_conv_params, batch));
    if (!l)
        return c->d->status;
    cu_arg_value(c, l, CU_FIELD(vk_conv_params, x), n->inputs[0]);
    cu_arg_value(c, l, CU_FIELD(vk_conv_params, w), n->inputs[1]);
    if (bv >= 0)
        cu_arg_value(c, l, CU_FIELD(vk_conv_params, bias), bv);
    cu_arg_value(c, l, CU_FIELD(vk_conv_params, y), n->outputs[0]);
    return c->d->status;
}

int cu_emit_misc(cu_ctx *c, int node)
{
    const ir_node *n = &c->g->nodes[node];
    if (c->off[cu_root(c, n->outputs[0])] < 0)
        return VITC_OK;
    switch (n->op) {
    case IR_OP_MATMUL: return emit_matmul(c, node);
    case IR_OP_GEMM: return emit_gemm(c, node);
    case IR_OP_CONV: return emit_conv(c, node);
    default: return cu_fail(c, VITC_INTERNAL, node, "no CUDA code generator");
    }
}
