/* emit_matmul.c: the compute-heavy nodes.  They are mapped onto the kernels
 * of kernels.h: every product with a constant weight (Linear, MatMul or Gemm
 * with a constant B, Conv as patches @ W) onto the packed GEMM, whose weight
 * is transposed, scaled and packed here at compile time into the weights
 * blob; products of two computed tensors (MatMul, the two attention Einsums)
 * onto the batched GEMM; fused Attention onto the attention kernel.  Other
 * convolutions run as a direct loop. */
#include "ir/einsum.h"
#include "codegen/llvm/cg_impl.h"

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

typedef struct {
    int nbatch, trans_b;
} einsum_mm;

/* "XYmk,XYkn->XYmn" (trans_b 0) or "XYmk,XYnk->XYmn" (trans_b 1) for any
 * common batch prefix, spaces ignored. */
static int einsum_as_bgemm(const char *eq, einsum_mm *e)
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

typedef struct {
    cg_bgemm_desc d;
    cg_poly count; /* number of products */
} bgemm_plan;

/* C[..., M, N] = A[..., M, K] @ op(B)[..., K, N] where the batch dimensions
 * of A and B are either all those of C or all 1. */
static int plan_bgemm(const ir_graph *g, int va, int vb, int vc, int trans_b, float alpha, bgemm_plan *p, char *why,
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

typedef struct {
    int64_t C, H, W, M, kh, kw, oh, ow;
} patch_plan;

/* Conv with kernel = stride, no padding, no dilation, one group, 2-D. */
static int plan_patchify(const ir_graph *g, const ir_node *n, patch_plan *p)
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

typedef struct {
    int64_t N_e, C, H, W, M, Cg, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, group;
} conv_plan;

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
static int plan_conv(const ir_graph *g, const ir_node *n, conv_plan *p, char *why, size_t len)
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
    const ir_attr *ap = ir_attr_get(n, IR_ATTR_AUTO_PAD);
    if (ap && ap->kind == IR_AT_STRING && strcmp(ap->s, "NOTSET") != 0 && strcmp(ap->s, "VALID") != 0)
        return fail_why(why, len, "Conv auto_pad SAME_* is not supported by the CPU backend");
    int ns = X->rank - 2;
    int64_t st[2], dl[2], pads[4];
    if (!ints_attr(n, IR_ATTR_STRIDES, ns, 1, st) || !ints_attr(n, IR_ATTR_DILATIONS, ns, 1, dl) ||
        !ints_attr(n, IR_ATTR_PADS, 2 * ns, 0, pads))
        return fail_why(why, len, "Conv strides, dilations or pads are malformed");
    memset(p, 0, sizeof *p);
    p->group = ir_attr_int(n, IR_ATTR_GROUP, 1);
    p->C = X->dims[1].k, p->M = Wt->dims[0].k, p->Cg = Wt->dims[1].k;
    if (p->group < 1 || p->Cg * p->group != p->C || p->M % p->group != 0)
        return fail_why(why, len, "Conv group does not fit the channels");
    int two = ns == 2;
    p->H = two ? X->dims[2].k : 1, p->W = X->dims[2 + two].k;
    p->kh = two ? Wt->dims[2].k : 1, p->kw = Wt->dims[2 + two].k;
    p->sh = two ? st[0] : 1, p->sw = st[ns - 1];
    p->dh = two ? dl[0] : 1, p->dw = dl[ns - 1];
    int vp = ap && ap->kind == IR_AT_STRING && strcmp(ap->s, "VALID") == 0;
    p->ph = two && !vp ? pads[0] : 0, p->pw = vp ? 0 : pads[ns - 1];
    int64_t ph_end = two && !vp ? pads[2] : 0, pw_end = vp ? 0 : pads[2 * ns - 1];
    if (p->sh < 1 || p->sw < 1 || p->dh < 1 || p->dw < 1 || p->ph < 0 || p->pw < 0 || ph_end < 0 || pw_end < 0)
        return fail_why(why, len, "Conv strides/dilations must be positive and pads non-negative");
    int64_t sph = p->dh * (p->kh - 1) + 1, spw = p->dw * (p->kw - 1) + 1;
    if (p->H + p->ph + ph_end < sph || p->W + p->pw + pw_end < spw)
        return fail_why(why, len, "the Conv kernel is larger than the padded input");
    p->oh = (p->H + p->ph + ph_end - sph) / p->sh + 1;
    p->ow = (p->W + p->pw + pw_end - spw) / p->sw + 1;
    return 1;
}

/* ---- support ---- */

int cg_matmul_supports(const ir_graph *g, const ir_node *n, char *why, size_t len)
{
    for (int k = 0; k < n->ninputs; k++)
        if (n->inputs[k] >= 0 && g->values[n->inputs[k]].dtype != IR_F32)
            return fail_why(why, len, "matrix products are supported on f32 tensors only");
    const ir_value *A = &g->values[n->inputs[0]];
    int vb = ir_input(n, 1);
    switch (n->op) {
    case IR_OP_MATMUL:
    case IR_OP_LINEAR: {
        const ir_value *B = &g->values[vb];
        ir_linear v;
        if (n->op == IR_OP_LINEAR && !ir_linear_of(n, &v, why, len))
            return 0;
        if (cg_linear_of(g, n, &v)) {
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
            return 1;
        }
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

int64_t cg_matmul_scratch(const ir_graph *g, const ir_node *n, int64_t max_batch)
{
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

/* ---- emission ---- */

/* One generated driver per distinct descriptor: ViT-B's twelve layers share
 * four GEMM shapes, which is most of the compile time saved. */
struct cg_kcache {
    int kind;
    unsigned char desc[96];
    size_t len;
    LLVMValueRef fn;
    char name[48];
};

enum { KC_GEMM, KC_GEMM_AMX, KC_BGEMM, KC_ATTENTION };

static struct cg_kcache *kcache_find(cg_ctx *cg, int kind, const void *desc, size_t len)
{
    for (int i = 0; i < cg->nkcache; i++)
        if (cg->kcache[i].kind == kind && cg->kcache[i].len == len && memcmp(cg->kcache[i].desc, desc, len) == 0)
            return &cg->kcache[i];
    return NULL;
}

static void kcache_add(cg_ctx *cg, int kind, const void *desc, size_t len, LLVMValueRef fn, const char *name)
{
    if (len > sizeof cg->kcache[0].desc)
        return;
    if (cg->nkcache == cg->capkcache) {
        int cap = cg->capkcache ? 2 * cg->capkcache : 16;
        struct cg_kcache *k = realloc(cg->kcache, sizeof *k * (size_t)cap);
        if (!k)
            return; /* no reuse: still correct */
        cg->kcache = k;
        cg->capkcache = cap;
    }
    struct cg_kcache *e = &cg->kcache[cg->nkcache++];
    e->kind = kind;
    memcpy(e->desc, desc, len);
    e->len = len;
    e->fn = fn;
    snprintf(e->name, sizeof e->name, "%s", name);
}

void cg_kcache_free(cg_ctx *cg)
{
    free(cg->kcache);
    cg->kcache = NULL;
    cg->nkcache = cg->capkcache = 0;
}

/* The driver for a descriptor: an earlier one, or a fresh one from gen. */
static LLVMValueRef get_driver(cg_ctx *cg, int kind, const void *desc, size_t len, const char *prefix, char *name,
                               size_t nlen)
{
    struct cg_kcache *e = kcache_find(cg, kind, desc, len);
    if (e) {
        snprintf(name, nlen, "%s", e->name);
        return e->fn;
    }
    snprintf(name, nlen, "%s%d", prefix, cg->nfuncs++);
    LLVMValueRef fn = NULL;
    switch (kind) {
    case KC_GEMM: fn = cg_gemm_emit(cg->mod, name, desc, &cg->target); break;
    case KC_GEMM_AMX: fn = cg_gemm_amx_emit(cg->mod, name, desc, &cg->target); break;
    case KC_BGEMM: fn = cg_bgemm_emit(cg->mod, name, desc, &cg->target); break;
    case KC_ATTENTION: fn = cg_attention_emit(cg->mod, name, desc, &cg->target); break;
    }
    if (fn) {
        LLVMSetLinkage(fn, LLVMInternalLinkage);
        kcache_add(cg, kind, desc, len, fn, name);
    }
    return fn;
}

/* Packs W (K x N floats, row-major) for the GEMM kernel (fp32, or bf16 for
 * AMX) and stores it in the blob. */
static int64_t add_packed(cg_ctx *cg, int node, const cg_gemm_desc *d, const float *W, int bf16)
{
    size_t bytes = bf16 ? cg_gemm_amx_packed_bytes(d, &cg->target) : cg_gemm_packed_bytes(d, &cg->target);
    void *p;
    int64_t off = bytes ? cg_weights_reserve(cg, bytes, &p) : -1;
    if (off < 0) {
        cg_fail(cg, VITC_INTERNAL, node, "cannot pack a %lldx%lld weight for the GEMM kernel", (long long)d->K,
                (long long)d->N);
        return -1;
    }
    if (bf16)
        cg_gemm_amx_pack(d, &cg->target, W, p);
    else
        cg_gemm_pack(d, &cg->target, W, p);
    return off;
}

/* One GEMM call in run(): C = act(A @ W + bias) + R over M rows. */
typedef struct {
    cg_gemm_desc d;
    const float *W;      /* K x N row-major */
    const float *bias;   /* N, or NULL */
    LLVMValueRef A, R, C; /* pointers in run() */
    cg_poly M;
} gemm_call;

static int emit_gemm_call(cg_ctx *cg, int node, gemm_call *c)
{
    c->d.has_bias = c->bias != NULL;
    c->d.has_residual = c->R != NULL;
    int bf16 = cg_target_bf16(&cg->target) && cg_gemm_amx_fits(&c->d);
    int64_t wo = add_packed(cg, node, &c->d, c->W, bf16), bo = -1;
    if (wo < 0)
        return cg->d->status;
    if (c->bias && (bo = cg_weights_add(cg, c->bias, sizeof(float) * (size_t)c->d.N)) < 0)
        return cg_fail(cg, VITC_INTERNAL, node, "out of memory for the weights");
    char name[64], label[256];
    LLVMValueRef fn = get_driver(cg, bf16 ? KC_GEMM_AMX : KC_GEMM, &c->d, sizeof c->d, "vitc_gemm", name, sizeof name);
    if (!fn)
        return cg_fail(cg, VITC_INTERNAL, node, "the GEMM kernel generator refused K=%lld N=%lld", (long long)c->d.K,
                       (long long)c->d.N);
    snprintf(label, sizeof label, "GEMM%s %lldx%lld%s%s act=%d %s", bf16 ? " bf16" : "", (long long)c->d.K,
             (long long)c->d.N, c->bias ? " +bias" : "", c->R ? " +residual" : "", c->d.activation,
             cg->g->nodes[node].name);
    cg_note_kernel(cg, name, label);
    LLVMBuilderRef b = cg->rb;
    LLVMValueRef f[6] = {c->A, cg_weights_ptr(cg, b, cg->run_call, wo),
                         bo >= 0 ? cg_weights_ptr(cg, b, cg->run_call, bo) : LLVMConstNull(cg->t_ptr),
                         c->R ? c->R : LLVMConstNull(cg->t_ptr), c->C, cg_poly_value(cg, b, cg->run_batch, c->M)};
    cg_call_driver(cg, fn, f, 6);
    return cg->d->status;
}

/* Rows of a [..., K] tensor: the product of all but its last dimension. */
static cg_poly rows_of(const ir_value *v)
{
    cg_poly m = cg_poly_k(1);
    for (int i = 0; i < v->rank - 1; i++)
        m = cg_poly_mul(m, cg_poly_dim(v->dims[i]));
    return m;
}

static int emit_linear(cg_ctx *cg, int node, const ir_linear *v)
{
    const ir_value *X = &cg->g->values[v->x], *Wv = &cg->g->values[v->w];
    int64_t K = Wv->dims[0].k, N = Wv->dims[1].k;
    gemm_call c;
    memset(&c, 0, sizeof c);
    c.d.K = K, c.d.N = N, c.d.ldr = N;
    c.d.lda = K + cg->row_pad[v->x], c.d.ldc = N + cg->row_pad[v->y];
    c.d.activation = (int)v->act;
    c.W = Wv->data;
    int vbias = v->bias, vr = v->residual;
    c.bias = vbias >= 0 ? cg->g->values[vbias].data : NULL;
    LLVMBuilderRef b = cg->rb;
    c.A = cg_value_ptr(cg, b, cg->run_call, v->x);
    c.C = cg_value_ptr(cg, b, cg->run_call, v->y);
    if (vr >= 0) {
        const ir_value *R = &cg->g->values[vr];
        c.R = cg_value_ptr(cg, b, cg->run_call, vr);
        if (cg_poly_eq(cg_poly_numel(R), cg_poly_k(N)))
            c.d.ldr = 0; /* one row for every row */
    }
    c.M = X->rank >= 2 ? rows_of(X) : cg_poly_k(1);
    return emit_gemm_call(cg, node, &c);
}

/* Gemm with a constant B: W = alpha * op(B), bias = beta * C broadcast to [N]. */
static int emit_gemm_node(cg_ctx *cg, int node)
{
    const ir_node *n = &cg->g->nodes[node];
    const ir_value *Bv = &cg->g->values[n->inputs[1]];
    int tb = ir_attr_int(n, IR_ATTR_TRANS_B, 0) != 0;
    float alpha = ir_attr_float(n, IR_ATTR_ALPHA, 1.0f), beta = ir_attr_float(n, IR_ATTR_BETA, 1.0f);
    int64_t K = tb ? Bv->dims[1].k : Bv->dims[0].k, N = tb ? Bv->dims[0].k : Bv->dims[1].k;
    float *W = malloc(sizeof(float) * (size_t)(K * N)), *bias = NULL;
    if (!W)
        return cg_fail(cg, VITC_INTERNAL, node, "out of memory");
    const float *B = Bv->data;
    for (int64_t k = 0; k < K; k++)
        for (int64_t j = 0; j < N; j++)
            W[k * N + j] = alpha * (tb ? B[j * K + k] : B[k * N + j]);
    int vc = ir_input(n, 2);
    if (vc >= 0) {
        const ir_value *Cv = &cg->g->values[vc];
        const float *C = Cv->data;
        int64_t cn = (int64_t)(Cv->nbytes / sizeof(float));
        bias = malloc(sizeof(float) * (size_t)N);
        if (!bias) {
            free(W);
            return cg_fail(cg, VITC_INTERNAL, node, "out of memory");
        }
        for (int64_t j = 0; j < N; j++)
            bias[j] = beta * C[cn == 1 ? 0 : j];
    }
    gemm_call c;
    memset(&c, 0, sizeof c);
    c.d.K = K, c.d.N = N, c.d.lda = K, c.d.ldc = N, c.d.ldr = N;
    c.W = W;
    c.bias = bias;
    c.A = cg_value_ptr(cg, cg->rb, cg->run_call, n->inputs[0]);
    c.C = cg_value_ptr(cg, cg->rb, cg->run_call, n->outputs[0]);
    c.M = rows_of(&cg->g->values[n->inputs[0]]);
    int st = emit_gemm_call(cg, node, &c);
    free(W);
    free(bias);
    return st;
}

static int emit_bgemm(cg_ctx *cg, int node, int va, int vb, int trans_b, float alpha)
{
    const ir_node *n = &cg->g->nodes[node];
    bgemm_plan p;
    char why[200], name[64], label[256];
    if (!plan_bgemm(cg->g, va, vb, n->outputs[0], trans_b, alpha, &p, why, sizeof why))
        return cg_fail(cg, VITC_BAD_INPUT, node, "%s", why);
    LLVMValueRef fn = get_driver(cg, KC_BGEMM, &p.d, sizeof p.d, "vitc_bgemm", name, sizeof name);
    if (!fn)
        return cg_fail(cg, VITC_INTERNAL, node, "the batched GEMM kernel generator refused M=%lld N=%lld K=%lld",
                       (long long)p.d.M, (long long)p.d.N, (long long)p.d.K);
    snprintf(label, sizeof label, "BatchedGEMM %lldx%lldx%lld%s %s", (long long)p.d.M, (long long)p.d.N,
             (long long)p.d.K, trans_b ? " B^T" : "", n->name);
    cg_note_kernel(cg, name, label);
    LLVMBuilderRef b = cg->rb;
    LLVMValueRef f[4] = {cg_value_ptr(cg, b, cg->run_call, va), cg_value_ptr(cg, b, cg->run_call, vb),
                         cg_value_ptr(cg, b, cg->run_call, n->outputs[0]), cg_poly_value(cg, b, cg->run_batch, p.count)};
    cg_call_driver(cg, fn, f, 4);
    return cg->d->status;
}

int cg_emit_attention(cg_ctx *cg, int node)
{
    const ir_node *n = &cg->g->nodes[node];
    ir_attention a;
    if (ir_attention_get(n, &a, cg->d))
        return cg->d->status;
    const ir_value *X = &cg->g->values[a.qkv];
    cg_attention_desc d;
    memset(&d, 0, sizeof d); /* padding too: descriptors are compared bytewise */
    d.tokens = X->dims[1].k;
    d.heads = a.heads;
    d.head_size = a.head_size;
    d.qkv_layout = (int)a.layout;
    d.scale = a.scale;
    d.post_scale = a.post_scale;
    int vbias = a.bias, vq = a.q;
    d.q_tokens = vq >= 0 ? cg->g->values[vq].dims[1].k : 0;
    if (vbias >= 0) {
        int64_t s[3];
        ir_attention_bias_strides(cg->g, &a, d.tokens, s);
        d.has_bias = 1;
        d.bias_b = s[0], d.bias_h = s[1], d.bias_i = s[2];
    }
    char name[64], label[256];
    LLVMValueRef fn = get_driver(cg, KC_ATTENTION, &d, sizeof d, "vitc_attention", name, sizeof name);
    if (!fn)
        return cg_fail(cg, VITC_INTERNAL, node, "the attention kernel generator refused N=%lld H=%lld D=%lld",
                       (long long)d.tokens, (long long)d.heads, (long long)d.head_size);
    char cross[32] = "";
    if (vq >= 0)
        snprintf(cross, sizeof cross, " Nq=%lld", (long long)d.q_tokens);
    snprintf(label, sizeof label, "Attention N=%lld%s H=%lld D=%lld%s %s", (long long)d.tokens, cross,
             (long long)d.heads, (long long)d.head_size, d.has_bias ? " +bias" : "", n->name);
    cg_note_kernel(cg, name, label);
    LLVMBuilderRef b = cg->rb;
    LLVMValueRef none = LLVMConstNull(LLVMPointerTypeInContext(cg->llc, 0));
    LLVMValueRef f[5] = {cg_value_ptr(cg, b, cg->run_call, a.qkv), cg_value_ptr(cg, b, cg->run_call, a.y),
                         vbias >= 0 ? cg_value_ptr(cg, b, cg->run_call, vbias) : none,
                         vq >= 0 ? cg_value_ptr(cg, b, cg->run_call, vq) : none,
                         cg_poly_value(cg, b, cg->run_batch, cg_poly_dim(X->dims[0]))};
    cg_call_driver(cg, fn, f, 5);
    return cg->d->status;
}

/* Conv as patches @ W: im2col into scratch, the packed GEMM, then the
 * [B, P, M] result transposed into the NCHW output. */
static int emit_patchify(cg_ctx *cg, int node, const patch_plan *pp)
{
    const ir_node *n = &cg->g->nodes[node];
    const ir_value *X = &cg->g->values[n->inputs[0]], *Wv = &cg->g->values[n->inputs[1]];
    cg_poly B = cg_poly_dim(X->dims[0]);
    int64_t CKK = pp->C * pp->kh * pp->kw, P = pp->oh * pp->ow;
    int64_t col_bytes = (cg_poly_eval(cg_poly_scale(B, P * CKK * 4), cg->max_batch) + 63) / 64 * 64;
    /* 1. col[b, oh, ow, c, i, j] = X[b, c, oh*kh + i, ow*kw + j] */
    cg_map m;
    memset(&m, 0, sizeof m);
    m.rank = 6;
    cg_poly dims[6] = {B, cg_poly_k(pp->oh), cg_poly_k(pp->ow), cg_poly_k(pp->C), cg_poly_k(pp->kh), cg_poly_k(pp->kw)};
    memcpy(m.dims, dims, sizeof dims);
    m.op[0] = cg_view_scratch(node, 0, IR_F32, 6, dims);
    cg_view x = cg_view_of(cg, n->inputs[0]);
    m.op[1] = x;
    m.op[1].rank = 6;
    memcpy(m.op[1].dims, dims, sizeof dims);
    cg_poly s[6] = {x.strides[0], cg_poly_k(pp->kh * pp->W), cg_poly_k(pp->kw), x.strides[1], cg_poly_k(pp->W),
                    cg_poly_k(1)};
    memcpy(m.op[1].strides, s, sizeof s);
    m.nops = 2;
    char label[200];
    snprintf(label, sizeof label, "im2col %s", n->name);
    m.label = label;
    m.cost = 1;
    int st = cg_emit_map(cg, &m, node);
    if (st)
        return st;
    /* 2. tmp[b*P + p, m] = col @ W^T + bias */
    float *W = malloc(sizeof(float) * (size_t)(CKK * pp->M));
    if (!W)
        return cg_fail(cg, VITC_INTERNAL, node, "out of memory");
    const float *w = Wv->data;
    for (int64_t k = 0; k < CKK; k++)
        for (int64_t j = 0; j < pp->M; j++)
            W[k * pp->M + j] = w[j * CKK + k];
    gemm_call c;
    memset(&c, 0, sizeof c);
    c.d.K = CKK, c.d.N = pp->M, c.d.lda = CKK, c.d.ldc = pp->M, c.d.ldr = pp->M;
    c.W = W;
    c.bias = ir_input(n, 2) >= 0 ? cg->g->values[n->inputs[2]].data : NULL;
    c.A = cg_scratch_ptr(cg, cg->rb, cg->run_call, node, 0);
    c.C = cg_scratch_ptr(cg, cg->rb, cg->run_call, node, col_bytes);
    c.M = cg_poly_scale(B, P);
    st = emit_gemm_call(cg, node, &c);
    free(W);
    if (st)
        return st;
    /* 3. out[b, m, p] = tmp[b, p, m] */
    memset(&m, 0, sizeof m);
    m.rank = 3;
    cg_poly od[3] = {B, cg_poly_k(pp->M), cg_poly_k(P)};
    memcpy(m.dims, od, sizeof od);
    cg_view out = cg_view_of(cg, n->outputs[0]);
    m.op[0] = out;
    m.op[0].rank = 3;
    memcpy(m.op[0].dims, od, sizeof od);
    m.op[0].strides[0] = cg_poly_k(pp->M * P), m.op[0].strides[1] = cg_poly_k(P), m.op[0].strides[2] = cg_poly_k(1);
    cg_poly td[3] = {B, cg_poly_k(P), cg_poly_k(pp->M)};
    m.op[1] = cg_view_scratch(node, col_bytes, IR_F32, 3, td);
    memcpy(m.op[1].dims, od, sizeof od);
    m.op[1].strides[0] = cg_poly_k(P * pp->M), m.op[1].strides[1] = cg_poly_k(1), m.op[1].strides[2] = cg_poly_k(pp->M);
    m.nops = 2;
    snprintf(label, sizeof label, "Transpose %s", n->name);
    m.label = label;
    m.cost = 1;
    return cg_emit_map(cg, &m, node);
}

/* Direct convolution: one task per output row (n, m, oh). */
static int emit_conv_direct(cg_ctx *cg, int node)
{
    const ir_node *n = &cg->g->nodes[node];
    conv_plan p;
    char why[200];
    if (!plan_conv(cg->g, n, &p, why, sizeof why))
        return cg_fail(cg, VITC_BAD_INPUT, node, "%s", why);
    const ir_value *X = &cg->g->values[n->inputs[0]];
    int vbias = ir_input(n, 2);
    char label[200];
    snprintf(label, sizeof label, "Conv %s", n->name);
    cg_poly rows = cg_poly_scale(cg_poly_dim(X->dims[0]), p.M * p.oh);
    LLVMBuilderRef rb = cg->rb;
    LLVMValueRef ptrs[4] = {cg_value_ptr(cg, rb, cg->run_call, n->inputs[0]),
                            cg_value_ptr(cg, rb, cg->run_call, n->inputs[1]),
                            vbias >= 0 ? cg_value_ptr(cg, rb, cg->run_call, vbias) : LLVMConstNull(cg->t_ptr),
                            cg_value_ptr(cg, rb, cg->run_call, n->outputs[0])};
    LLVMValueRef fn = cg_kernel_begin(cg, label, 4);
    LLVMBuilderRef b = cg->b;
    LLVMTypeRef f = cg->t_f32;
    LLVMValueRef px = cg->fn_ptr[0], pw = cg->fn_ptr[1], pb = vbias >= 0 ? cg->fn_ptr[2] : NULL, py = cg->fn_ptr[3];
    LLVMValueRef acc = cg_alloca(cg, f, "acc");
    int64_t mg = p.M / p.group;
    cg_loop lt, lw, lc, li, lj;
    cg_loop_begin(cg, b, &lt, LLVMGetParam(fn, 1), LLVMGetParam(fn, 2));
    /* t = (nb * M + m) * oh + y */
    LLVMValueRef y = LLVMBuildSRem(b, lt.iv, cg_i64(cg, p.oh), "");
    LLVMValueRef nm = LLVMBuildSDiv(b, lt.iv, cg_i64(cg, p.oh), "");
    LLVMValueRef m = LLVMBuildSRem(b, nm, cg_i64(cg, p.M), "");
    LLVMValueRef nb = LLVMBuildSDiv(b, nm, cg_i64(cg, p.M), "");
    LLVMValueRef c0 = LLVMBuildMul(b, LLVMBuildSDiv(b, m, cg_i64(cg, mg), ""), cg_i64(cg, p.Cg), "");
    cg_loop_begin(cg, b, &lw, cg_i64(cg, 0), cg_i64(cg, p.ow));
    LLVMBuildStore(b, pb ? LLVMBuildLoad2(b, f, cg_gep(cg, b, f, pb, m), "") : LLVMConstReal(f, 0), acc);
    cg_loop_begin(cg, b, &lc, cg_i64(cg, 0), cg_i64(cg, p.Cg));
    LLVMValueRef xc = LLVMBuildAdd(b, LLVMBuildMul(b, nb, cg_i64(cg, p.C), ""), LLVMBuildAdd(b, c0, lc.iv, ""), "");
    cg_loop_begin(cg, b, &li, cg_i64(cg, 0), cg_i64(cg, p.kh));
    LLVMValueRef ih = LLVMBuildAdd(b, LLVMBuildSub(b, LLVMBuildMul(b, y, cg_i64(cg, p.sh), ""), cg_i64(cg, p.ph), ""),
                                   LLVMBuildMul(b, li.iv, cg_i64(cg, p.dh), ""), "");
    cg_loop_begin(cg, b, &lj, cg_i64(cg, 0), cg_i64(cg, p.kw));
    LLVMValueRef iw = LLVMBuildAdd(b, LLVMBuildSub(b, LLVMBuildMul(b, lw.iv, cg_i64(cg, p.sw), ""), cg_i64(cg, p.pw), ""),
                                   LLVMBuildMul(b, lj.iv, cg_i64(cg, p.dw), ""), "");
    LLVMValueRef inb = LLVMBuildAnd(
        b,
        LLVMBuildAnd(b, LLVMBuildICmp(b, LLVMIntSGE, ih, cg_i64(cg, 0), ""),
                     LLVMBuildICmp(b, LLVMIntSLT, ih, cg_i64(cg, p.H), ""), ""),
        LLVMBuildAnd(b, LLVMBuildICmp(b, LLVMIntSGE, iw, cg_i64(cg, 0), ""),
                     LLVMBuildICmp(b, LLVMIntSLT, iw, cg_i64(cg, p.W), ""), ""),
        "");
    LLVMValueRef xi = LLVMBuildAdd(b, LLVMBuildMul(b, LLVMBuildAdd(b, LLVMBuildMul(b, xc, cg_i64(cg, p.H), ""), ih, ""),
                                                   cg_i64(cg, p.W), ""), iw, "");
    xi = LLVMBuildSelect(b, inb, xi, cg_i64(cg, 0), "");
    LLVMValueRef wi = LLVMBuildAdd(
        b, LLVMBuildMul(b, LLVMBuildAdd(b, LLVMBuildMul(b, LLVMBuildAdd(b, LLVMBuildMul(b, m, cg_i64(cg, p.Cg), ""), lc.iv, ""),
                                                         cg_i64(cg, p.kh), ""), li.iv, ""),
                        cg_i64(cg, p.kw), ""), lj.iv, "");
    LLVMValueRef xv = LLVMBuildLoad2(b, f, cg_gep(cg, b, f, px, xi), "");
    xv = LLVMBuildSelect(b, inb, xv, LLVMConstReal(f, 0), "");
    LLVMValueRef wv = LLVMBuildLoad2(b, f, cg_gep(cg, b, f, pw, wi), "");
    LLVMBuildStore(b, cg_fadd_reassoc(b, LLVMBuildLoad2(b, f, acc, ""), LLVMBuildFMul(b, xv, wv, "")), acc);
    cg_loop_end(cg, b, &lj);
    cg_loop_end(cg, b, &li);
    cg_loop_end(cg, b, &lc);
    LLVMValueRef yo = LLVMBuildAdd(b, LLVMBuildMul(b, lt.iv, cg_i64(cg, p.ow), ""), lw.iv, "");
    LLVMBuildStore(b, LLVMBuildLoad2(b, f, acc, ""), cg_gep(cg, b, f, py, yo));
    cg_loop_end(cg, b, &lw);
    cg_loop_end(cg, b, &lt);
    cg_kernel_end(cg, NULL);
    cg_launch(cg, fn, ptrs, 4, rows, cg_poly_scale(rows, p.ow * p.Cg * p.kh * p.kw * 2));
    return cg->d->status;
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

int cg_emit_matmul(cg_ctx *cg, int node)
{
    const ir_node *n = &cg->g->nodes[node];
    switch (n->op) {
    case IR_OP_LINEAR:
    case IR_OP_MATMUL: {
        ir_linear v;
        if (cg_linear_of(cg->g, n, &v))
            return emit_linear(cg, node, &v);
        return emit_bgemm(cg, node, n->inputs[0], n->inputs[1], 0, 1.0f);
    }
    case IR_OP_GEMM:
        if (ir_value_is_plain_const(cg->g, n->inputs[1]))
            return emit_gemm_node(cg, node);
        return emit_bgemm(cg, node, n->inputs[0], n->inputs[1], ir_attr_int(n, IR_ATTR_TRANS_B, 0) != 0,
                          ir_attr_float(n, IR_ATTR_ALPHA, 1.0f));
    case IR_OP_EINSUM: {
        einsum_mm e;
        const ir_attr *a = ir_attr_get(n, IR_ATTR_EQUATION);
        if (!a || !einsum_as_bgemm(a->s, &e))
            return cg_fail(cg, VITC_BAD_INPUT, node, "Einsum is not a batched matrix product");
        return emit_bgemm(cg, node, n->inputs[0], n->inputs[1], e.trans_b, 1.0f);
    }
    case IR_OP_CONV: {
        patch_plan pp;
        if (plan_patchify(cg->g, n, &pp))
            return emit_patchify(cg, node, &pp);
        return emit_conv_direct(cg, node);
    }
    default:
        return cg_fail(cg, VITC_INTERNAL, node, "is not a matrix product");
    }
}
