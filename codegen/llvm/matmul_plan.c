/* matmul_plan.c: the compute-heavy nodes (the op table's matmul and
 * attention families) as the CPU kernels take them: which products have a
 * constant weight and run as the packed GEMM (cg_linear_of), which are
 * batched products, patch embeddings or direct convolutions, what each
 * needs of scratch, and what the backend supports.  The schedule and the
 * emitter (emit_matmul.c) both read these plans. */
#include "ir/einsum.h"
#include "codegen/llvm/matmul_plan.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int is_static(ir_dim d) { return d.e == 0 || d.k == 0; }

static int fail_why(char *why, size_t len, const char *msg)
{
    snprintf(why, len, "%s", msg);
    return 0;
}

/* ---- Einsum equations that are batched matrix products ---- */


/* "XYmk,XYkn->XYmn" (trans_b 0) or "XYmk,XYnk->XYmn" (trans_b 1) for any
 * common batch prefix, spaces ignored. */
int einsum_as_bgemm(const char *eq, einsum_mm *e)
{
    ir_einsum p;
    char why[128];
    if (ir_einsum_parse(eq, &p, why, sizeof why) || p.nterms != 2 || !p.explicit_out)
        return 0;
    const char *t[3] = {p.terms[0], p.terms[1], p.out};
    int len[3] = {(int)strlen(t[0]), (int)strlen(t[1]), (int)strlen(t[2])};
    if (len[0] < 2 || len[0] != len[1] || len[0] != len[2])
        return 0;
    int r = len[0], nb = r - 2;
    for (int i = 0; i < nb; i++)
        if (t[0][i] != t[1][i] || t[0][i] != t[2][i])
            return 0;
    char m = t[0][nb], k = t[0][nb + 1];
    if (t[2][nb] != m || m == k)
        return 0;
    char n = t[2][nb + 1];
    if (n == m || n == k)
        return 0;
    for (int i = 0; i < nb; i++)
        if (t[0][i] == m || t[0][i] == k || t[0][i] == n)
            return 0;
    if (t[1][nb] == k && t[1][nb + 1] == n)
        e->trans_b = 0;
    else if (t[1][nb] == n && t[1][nb + 1] == k)
        e->trans_b = 1;
    else
        return 0;
    e->nbatch = nb;
    return 1;
}

/* ---- batched GEMM shapes ---- */


/* C[..., M, N] = A[..., M, K] @ op(B)[..., K, N] where the batch dimensions
 * of A and B are either all those of C or all 1. */
int plan_bgemm(const ir_graph *g, int va, int vb, int vc, int trans_b, float alpha, bgemm_plan *p, char *why,
                      size_t len)
{
    const ir_value *A = &g->values[va], *B = &g->values[vb], *C = &g->values[vc];
    if (A->rank < 2 || B->rank < 2)
        return fail_why(why, len, "a matrix product of 1-D operands is not supported");
    int ra = A->rank, rb = B->rank, rc = C->rank;
    ir_dim M = A->dims[ra - 2], K = A->dims[ra - 1];
    ir_dim N = trans_b ? B->dims[rb - 2] : B->dims[rb - 1];
    if (!is_static(M) || !is_static(K) || !is_static(N))
        return fail_why(why, len, "a matrix product of batch-sized matrices is not supported");
    memset(p, 0, sizeof *p);
    p->d.M = M.k, p->d.K = K.k, p->d.N = N.k;
    p->d.lda = K.k, p->d.ldb = B->dims[rb - 1].k, p->d.ldc = N.k;
    p->d.trans_b = trans_b;
    p->d.alpha = alpha;
    p->count = cg_poly_k(1);
    for (int i = 0; i < rc - 2; i++)
        p->count = cg_poly_mul(p->count, cg_poly_dim(C->dims[i]));
    cg_poly na = cg_poly_k(1), nb = cg_poly_k(1);
    for (int i = 0; i < ra - 2; i++)
        na = cg_poly_mul(na, cg_poly_dim(A->dims[i]));
    for (int i = 0; i < rb - 2; i++)
        nb = cg_poly_mul(nb, cg_poly_dim(B->dims[i]));
    /* A operand with all of C's batch dims walks it; one with none is shared. */
    cg_poly one = cg_poly_k(1);
    int a_full = cg_poly_eq(na, p->count) && ra == rc, b_full = cg_poly_eq(nb, p->count) && rb == rc;
    for (int i = 0; a_full && i < rc - 2; i++)
        a_full = ir_dim_eq(A->dims[i], C->dims[i]);
    for (int i = 0; b_full && i < rc - 2; i++)
        b_full = ir_dim_eq(B->dims[i], C->dims[i]);
    if ((!a_full && !cg_poly_eq(na, one)) || (!b_full && !cg_poly_eq(nb, one)))
        return fail_why(why, len, "a matrix product whose batch dimensions broadcast partially is not supported");
    p->d.a_batch_stride = a_full ? M.k * K.k : 0;
    p->d.b_batch_stride = b_full ? B->dims[rb - 2].k * B->dims[rb - 1].k : 0;
    p->d.c_batch_stride = M.k * N.k;
    if (p->count.bad)
        return fail_why(why, len, "its sizes overflow");
    return 1;
}

/* ---- patch-embedding convolution ---- */


/* Conv with kernel = stride, no padding, no dilation, one group, 2-D. */
int plan_patchify(const ir_graph *g, const ir_node *n, patch_plan *p)
{
    const ir_value *X = &g->values[n->inputs[0]], *Wt = &g->values[n->inputs[1]];
    if (X->rank != 4 || Wt->rank != 4 || !ir_value_is_plain_const(g, n->inputs[1]) || X->dtype != IR_F32)
        return 0;
    for (int i = 1; i < 4; i++)
        if (!is_static(X->dims[i]))
            return 0;
    if (ir_attr_int(n, IR_ATTR_GROUP, 1) != 1)
        return 0;
    const ir_attr *a;
    p->kh = Wt->dims[2].k, p->kw = Wt->dims[3].k;
    if ((a = ir_attr_get(n, IR_ATTR_STRIDES)) && (a->n != 2 || a->ints[0] != p->kh || a->ints[1] != p->kw))
        return 0;
    if (!a && (p->kh != 1 || p->kw != 1))
        return 0;
    if ((a = ir_attr_get(n, IR_ATTR_PADS)))
        for (int i = 0; i < a->n; i++)
            if (a->ints[i] != 0)
                return 0;
    if ((a = ir_attr_get(n, IR_ATTR_DILATIONS)))
        for (int i = 0; i < a->n; i++)
            if (a->ints[i] != 1)
                return 0;
    if ((a = ir_attr_get(n, IR_ATTR_AUTO_PAD)) && a->kind == IR_AT_STRING && strcmp(a->s, "NOTSET") != 0 &&
        strcmp(a->s, "VALID") != 0)
        return 0;
    p->C = X->dims[1].k, p->H = X->dims[2].k, p->W = X->dims[3].k, p->M = Wt->dims[0].k;
    if (Wt->dims[1].k != p->C || p->H < p->kh || p->W < p->kw)
        return 0;
    p->oh = p->H / p->kh, p->ow = p->W / p->kw;
    return 1;
}

/* ---- direct convolution ---- */


static int ints_attr(const ir_node *n, ir_attr_id id, int cnt, int64_t dflt, int64_t *v)
{
    const ir_attr *a = ir_attr_get(n, id);
    for (int i = 0; i < cnt; i++)
        v[i] = dflt;
    if (!a)
        return 1;
    if (a->kind != IR_AT_INTS || a->n != cnt)
        return 0;
    memcpy(v, a->ints, sizeof(int64_t) * (size_t)cnt);
    return 1;
}

/* 1-D or 2-D Conv with a constant weight, explicit pads (auto_pad NOTSET or VALID). */
int plan_conv(const ir_graph *g, const ir_node *n, conv_plan *p, char *why, size_t len)
{
    const ir_value *X = &g->values[n->inputs[0]], *Wt = &g->values[n->inputs[1]];
    if ((X->rank != 3 && X->rank != 4) || Wt->rank != X->rank)
        return fail_why(why, len, "only 1-D and 2-D convolutions are supported");
    if (X->dtype != IR_F32 || !ir_value_is_plain_const(g, n->inputs[1]))
        return fail_why(why, len, "Conv needs f32 data and a constant weight");
    if (ir_input(n, 2) >= 0 && !ir_value_is_plain_const(g, n->inputs[2]))
        return fail_why(why, len, "Conv needs a constant bias");
    for (int i = 1; i < X->rank; i++)
        if (!is_static(X->dims[i]))
            return fail_why(why, len, "Conv over batch-sized channels or pixels is not supported");
    int pad = ir_auto_pad_of(n);
    if (pad != IR_PAD_NOTSET && pad != IR_PAD_VALID)
        return fail_why(why, len, "Conv auto_pad SAME_* is not supported by the CPU backend");
    int ns = X->rank - 2;
    int64_t st[2], dl[2], pads[4];
    if (!ints_attr(n, IR_ATTR_STRIDES, ns, 1, st) || !ints_attr(n, IR_ATTR_DILATIONS, ns, 1, dl) ||
        !ints_attr(n, IR_ATTR_PADS, 2 * ns, 0, pads))
        return fail_why(why, len, "Conv strides, dilations or pads are malformed");
    memset(p, 0, sizeof *p);
    p->group = ir_attr_int(n, IR_ATTR_GROUP, 1);
    p->C = X->dims[1].k, p->M = Wt->dims[0].k, p->Cg = Wt->dims[1].k;
    int64_t cin;
    if (p->group < 1 || ir_mul_ovf(p->Cg, p->group, &cin) || cin != p->C || p->M % p->group != 0)
        return fail_why(why, len, "Conv group does not fit the channels");
    /* a 1-D convolution is a 2-D one of height 1 */
    int two = ns == 2;
    p->H = two ? X->dims[2].k : 1, p->W = X->dims[2 + two].k;
    p->kh = two ? Wt->dims[2].k : 1, p->kw = Wt->dims[2 + two].k;
    p->sh = two ? st[0] : 1, p->sw = st[ns - 1];
    p->dh = two ? dl[0] : 1, p->dw = dl[ns - 1];
    p->ph = two ? pads[0] : 0, p->pw = pads[ns - 1];
    int64_t h_end = two ? pads[2] : 0, w_end = pads[2 * ns - 1];
    const char *bad = ir_conv_axis(p->H, p->kh, p->sh, p->dh, (ir_auto_pad)pad, &p->ph, &h_end, &p->oh);
    if (!bad)
        bad = ir_conv_axis(p->W, p->kw, p->sw, p->dw, (ir_auto_pad)pad, &p->pw, &w_end, &p->ow);
    if (bad)
        return fail_why(why, len, bad);
    return 1;
}

/* ---- support ---- */

int cg_matmul_supports(const ir_graph *g, const ir_node *n, char *why, size_t len)
{
    for (int k = 0; k < n->ninputs; k++)
        if (n->inputs[k] >= 0 && g->values[n->inputs[k]].dtype != IR_F32 &&
            !(n->op == IR_OP_LINEAR_INT8 && k == IR_LINEAR_W))
            return fail_why(why, len, "matrix products are supported on f32 tensors only");
    if (n->op == IR_OP_LINEAR_INT8 && g->values[n->inputs[IR_LINEAR_W]].dtype != IR_I8)
        return fail_why(why, len, "LinearInt8 needs an i8 weight");
    const ir_value *A = &g->values[n->inputs[0]];
    int vb = ir_input(n, 1);
    ir_linear v;
    if (!ir_linear_of(n, &v, why, len) && why[0])
        return 0; /* a Linear with an attribute out of range */
    if (cg_linear_of(g, n, &v)) {
        const ir_value *B = &g->values[v.w];
        if (!ir_value_is_plain_const(g, v.w) || B->rank != 2 || A->rank < 1)
            return fail_why(why, len, "Linear needs a constant 2-D weight");
        if (v.bias >= 0 && !ir_value_is_plain_const(g, v.bias))
            return fail_why(why, len, "Linear needs a constant bias");
        int vr = v.residual;
        if (vr >= 0) {
            const ir_value *R = &g->values[vr], *Y = &g->values[v.y];
            int full = R->rank == Y->rank, row = 1;
            for (int i = 0; i < R->rank; i++) {
                full = full && ir_dim_eq(R->dims[i], Y->dims[i]);
                if (i < R->rank - 1)
                    row = row && R->dims[i].k == 1 && R->dims[i].e == 0;
            }
            if (!full && !(row && R->rank >= 1 && ir_dim_eq(R->dims[R->rank - 1], Y->dims[Y->rank - 1])))
                return fail_why(why, len, "a residual that broadcasts other than along rows is not supported");
        }
        if (v.gate >= 0 && vr >= 0)
            return fail_why(why, len, "a Linear with both a gate and a residual is not supported");
        return 1;
    }
    switch (n->op) {
    case IR_OP_MATMUL: {
        bgemm_plan p;
        return plan_bgemm(g, n->inputs[0], vb, n->outputs[0], 0, 1.0f, &p, why, len);
    }
    case IR_OP_GEMM: {
        if (ir_attr_int(n, IR_ATTR_TRANS_A, 0))
            return fail_why(why, len, "Gemm with transA=1 is not supported");
        if (A->rank != 2 || g->values[vb].rank != 2)
            return fail_why(why, len, "Gemm needs 2-D A and B");
        int vc = ir_input(n, 2);
        if (!ir_value_is_plain_const(g, vb)) {
            if (vc >= 0)
                return fail_why(why, len, "Gemm with a computed B and a C is not supported");
            bgemm_plan p;
            return plan_bgemm(g, n->inputs[0], vb, n->outputs[0], ir_attr_int(n, IR_ATTR_TRANS_B, 0) != 0,
                              ir_attr_float(n, IR_ATTR_ALPHA, 1.0f), &p, why, len);
        }
        if (vc >= 0) {
            const ir_value *C = &g->values[vc];
            int ok = ir_value_is_plain_const(g, vc) && C->rank <= 2;
            for (int i = 0; ok && i < C->rank - 1; i++)
                ok = C->dims[i].k == 1;
            if (!ok)
                return fail_why(why, len, "Gemm's C must be a constant that broadcasts along rows");
        }
        return 1;
    }
    case IR_OP_EINSUM: {
        const ir_attr *a = ir_attr_get(n, IR_ATTR_EQUATION);
        einsum_mm e;
        if (n->ninputs != 2 || !a || a->kind != IR_AT_STRING || !einsum_as_bgemm(a->s, &e)) {
            snprintf(why, len, "Einsum '%s' is not a batched matrix product", a && a->kind == IR_AT_STRING ? a->s : "");
            return 0;
        }
        bgemm_plan p;
        return plan_bgemm(g, n->inputs[0], n->inputs[1], n->outputs[0], e.trans_b, 1.0f, &p, why, len);
    }
    case IR_OP_CONV: {
        patch_plan pp;
        conv_plan cp;
        if (plan_patchify(g, n, &pp))
            return 1;
        return plan_conv(g, n, &cp, why, len);
    }
    default:
        return fail_why(why, len, "not a matrix product");
    }
}

int64_t cg_int8_scratch(const ir_graph *g, const ir_linear *v, int64_t max_batch, int64_t off[4])
{
    const ir_value *X = &g->values[v->x];
    int64_t M = 1, K = X->dims[X->rank - 1].k, ldq = cg_int8_row_bytes(K);
    for (int i = 0; i < X->rank - 1; i++) {
        int64_t d = ir_dim_eval(X->dims[i], max_batch);
        if (d < 0 || (d && M > INT64_MAX / 4 / d))
            return -1;
        M *= d;
    }
    if (M > INT64_MAX / 4 / ldq)
        return -1;
    int64_t a64 = 64;
    off[0] = 0;                                              /* the u8 rows */
    off[1] = (M * ldq + a64 - 1) / a64 * a64;                /* sa [M] */
    off[2] = off[1] + (M * 4 + a64 - 1) / a64 * a64;         /* za [M] */
    off[3] = off[2] + (M * 4 + a64 - 1) / a64 * a64;         /* the rows' ranges [2 M] */
    return off[3] + (v->aq == IR_AQ_TENSOR ? (M * 8 + a64 - 1) / a64 * a64 : 0);
}

int64_t cg_matmul_scratch(const ir_graph *g, const ir_node *n, int64_t max_batch)
{
    ir_linear v;
    char why[8];
    int64_t off[4];
    if (n->op == IR_OP_LINEAR_INT8)
        return ir_linear_of(n, &v, why, sizeof why) ? cg_int8_scratch(g, &v, max_batch, off) : -1;
    patch_plan p;
    if (n->op != IR_OP_CONV || !plan_patchify(g, n, &p))
        return 0;
    int64_t b = ir_dim_eval(g->values[n->inputs[0]].dims[0], max_batch);
    int64_t rows = b * p.oh * p.ow, col = rows * p.C * p.kh * p.kw * 4, tmp = rows * p.M * 4;
    if (b < 0 || rows / (p.oh * p.ow) != b)
        return -1;
    return (col + 63) / 64 * 64 + tmp;
}

int cg_attention_supports(const ir_graph *g, const ir_node *n, char *why, size_t len)
{
    ir_attention a;
    if (!ir_attention_of(n, &a, why, len))
        return 0;
    for (int k = 0; k < n->ninputs; k++)
        if (n->inputs[k] >= 0 && g->values[n->inputs[k]].dtype != IR_F32)
            return fail_why(why, len, "matrix products are supported on f32 tensors only");
    const ir_value *A = &g->values[a.qkv];
    if (A->rank != 3 || !is_static(A->dims[1]))
        return fail_why(why, len, "Attention needs qkv [B, N, 3*H*D] with a static N");
    if (A->dims[2].e != 0 || A->dims[2].k != a.parts * a.heads * a.head_size)
        return fail_why(why, len, "Attention heads, head_size or qkv_layout do not fit its input");
    if (a.q >= 0 && (g->values[a.q].rank != 3 || !is_static(g->values[a.q].dims[1])))
        return fail_why(why, len, "Attention's queries are not [B, Nq, H*D] with a static Nq");
    return 1;
}

int cg_linear_of(const ir_graph *g, const ir_node *n, ir_linear *v)
{
    char why[96];
    if (ir_linear_of(n, v, why, sizeof why))
        return 1;
    if (n->op != IR_OP_MATMUL || !ir_value_is_plain_const(g, n->inputs[1]) || g->values[n->inputs[1]].rank != 2)
        return 0;
    *v = ir_linear_make(n->inputs[0], n->inputs[1], n->outputs[0]);
    return 1;
}
