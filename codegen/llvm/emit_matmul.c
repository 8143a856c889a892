/* emit_matmul.c: the compute-heavy nodes.  They are mapped onto the kernels
 * of kernels.h: every product with a constant weight (Linear, MatMul or Gemm
 * with a constant B, Conv as patches @ W) onto the packed GEMM, whose weight
 * is transposed, scaled and packed here at compile time into the weights
 * blob; products of two computed tensors (MatMul, the two attention Einsums)
 * onto the batched GEMM; fused Attention onto the attention kernel.  Other
 * convolutions run as a direct loop.  Which node takes which kernel, and
 * with what shapes, is matmul_plan.c's. */
#include "codegen/llvm/matmul_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

enum { KC_GEMM, KC_GEMM_AMX, KC_BGEMM, KC_ATTENTION, KC_GEMM_I8, KC_QUANT_ROWS };

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
    case KC_GEMM_I8: fn = cg_gemm_i8_emit(cg->mod, name, desc, &cg->target); break;
    case KC_QUANT_ROWS: fn = cg_quant_rows_emit(cg->mod, name, desc, &cg->target); break;
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
    return cg_weights_share(cg, off, bytes);
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
    snprintf(label, sizeof label, "GEMM%s %lldx%lld%s%s%s%s %s", bf16 ? " bf16" : "", (long long)c->d.K,
             (long long)c->d.N, c->bias ? " +bias" : "", c->d.activation ? " " : "",
             ir_act_label((ir_act)c->d.activation), !c->R ? "" : c->d.gate ? " *gate" : " +residual",
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

static const char *const aq_names[IR_AQ_COUNT] = {"static", "per tensor", "per row"};

/* LinearInt8: its input quantized to u8 rows in the node's scratch
 * (quant_rows.c; per tensor in two calls, the rows' ranges first), then the
 * int8 GEMM on them with the weight packed here. */
static int emit_linear_int8(cg_ctx *cg, int node, const ir_linear *v)
{
    const ir_graph *g = cg->g;
    const ir_value *X = &g->values[v->x], *Wv = &g->values[v->w], *Sv = &g->values[v->w_scale];
    int64_t K = Wv->dims[0].k, N = Wv->dims[1].k, off[4];
    if (cg_int8_scratch(g, v, cg->max_batch, off) < 0)
        return cg_fail(cg, VITC_INTERNAL, node, "the int8 Linear's scratch does not fit");
    cg_gemm_i8_desc di;
    memset(&di, 0, sizeof di);
    int epi = cg->epilogue[node], y = epi >= 0 ? g->nodes[epi].outputs[0] : v->y; /* the value stored */
    char epi_ops[128] = "";
    if (epi >= 0) {
        if (!cg_elem_epilogue(cg, epi, v->y, cg->target.vec_floats, di.epilogue, sizeof di.epilogue))
            return cg->d->status;
        cg_group_ops(cg, epi, epi_ops, sizeof epi_ops);
    }
    di.g = (cg_gemm_desc){.K = K, .N = N, .lda = cg_int8_row_bytes(K), .ldc = N + cg->row_pad[y], .ldr = N,
                          .has_bias = v->bias >= 0, .has_residual = v->residual >= 0, .activation = (int)v->act};
    di.a_per_row = 1;
    di.maddubs = cg_gemm_i8_maddubs_pays(&di, &cg->target, Wv->data);
    memcpy(di.fq, v->fq, sizeof di.fq);
    if (v->residual >= 0 && cg_poly_eq(cg_poly_numel(&g->values[v->residual]), cg_poly_k(N)))
        di.g.ldr = 0; /* one row for every row */
    size_t bytes = cg_gemm_i8_packed_bytes(&di, &cg->target, Wv->data);
    void *p = NULL;
    int64_t wo = bytes ? cg_weights_reserve(cg, bytes, &p) : -1, bo = -1;
    if (wo < 0)
        return cg_fail(cg, VITC_BAD_INPUT, node,
                       "the int8 GEMM cannot take K=%lld N=%lld on cpu '%s' (it needs AVX2 or AVX-512, K <= 65000)",
                       (long long)K, (long long)N, cg->cpu ? cg->cpu : "?");
    if (cg_gemm_i8_pack(&di, &cg->target, Wv->data, Sv->data, p))
        return cg_fail(cg, VITC_INTERNAL, node, "the int8 GEMM's packing refused K=%lld N=%lld", (long long)K,
                       (long long)N);
    wo = cg_weights_share(cg, wo, bytes);
    if (v->bias >= 0 && (bo = cg_weights_add(cg, g->values[v->bias].data, sizeof(float) * (size_t)N)) < 0)
        return cg_fail(cg, VITC_INTERNAL, node, "out of memory for the weights");
    LLVMBuilderRef b = cg->rb;
    LLVMValueRef call = cg->run_call;
    LLVMValueRef M = cg_poly_value(cg, b, cg->run_batch, X->rank >= 2 ? rows_of(X) : cg_poly_k(1));
    LLVMValueRef x = cg_value_ptr(cg, b, call, v->x), q = cg_scratch_ptr(cg, b, call, node, off[0]);
    LLVMValueRef sa = cg_scratch_ptr(cg, b, call, node, off[1]), za = cg_scratch_ptr(cg, b, call, node, off[2]);
    LLVMValueRef st = LLVMConstNull(cg->t_ptr);
    if (v->aq == IR_AQ_TENSOR)
        st = cg_scratch_ptr(cg, b, call, node, off[3]);
    if (v->aq == IR_AQ_STATIC) {
        float sz[2] = {v->a_scale, (float)v->a_zero};
        int64_t so = cg_weights_add(cg, sz, sizeof sz);
        if (so < 0)
            return cg_fail(cg, VITC_INTERNAL, node, "out of memory for the weights");
        st = cg_weights_ptr(cg, b, call, so);
    }
    char name[64], label[256];
    static const cg_quant_rows_mode modes[IR_AQ_COUNT] = {CG_QR_STATIC, CG_QR_TENSOR, CG_QR_ROW};
    for (int pass = v->aq == IR_AQ_TENSOR ? 0 : 1; pass < 2; pass++) {
        cg_quant_rows_desc qd;
        memset(&qd, 0, sizeof qd);
        qd.K = K, qd.lda = K + cg->row_pad[v->x], qd.ldq = di.g.lda; /* field by field: the padding stays 0 */
        qd.mode = pass ? modes[v->aq] : CG_QR_STATS;
        LLVMValueRef fn = get_driver(cg, KC_QUANT_ROWS, &qd, sizeof qd, "vitc_qrows", name, sizeof name);
        if (!fn)
            return cg_fail(cg, VITC_INTERNAL, node, "the row quantizer's generator refused K=%lld", (long long)K);
        snprintf(label, sizeof label, "quantize %s K %lld%s %s", aq_names[v->aq], (long long)K,
                 pass ? "" : " (ranges)", g->nodes[node].name);
        cg_note_kernel(cg, name, label);
        LLVMValueRef f[6] = {x, q, sa, za, st, M};
        cg_call_driver(cg, fn, f, 6);
    }
    LLVMValueRef fn = get_driver(cg, KC_GEMM_I8, &di, sizeof di, "vitc_gemm_i8_", name, sizeof name);
    if (!fn)
        return cg_fail(cg, VITC_INTERNAL, node, "the int8 GEMM generator refused K=%lld N=%lld", (long long)K,
                       (long long)N);
    char fixes[32] = "";
    int64_t nfix = cg_gemm_i8_fixes(&di, &cg->target, Wv->data);
    if (nfix > 0)
        snprintf(fixes, sizeof fixes, " (%lld fixes)", (long long)nfix);
    snprintf(label, sizeof label, "GEMM int8 %lldx%lld %s%s%s%s%s%s%s%s%s %s", (long long)K, (long long)N,
             cg_gemm_i8_path(&di, &cg->target), fixes,
             v->bias >= 0 ? " +bias" : "", v->act ? " " : "", ir_act_label(v->act),
             v->residual >= 0 ? " +residual" : "", ir_fake_quant_any(v->fq, 2) ? " +fake-quant" : "",
             epi >= 0 ? " +" : "", epi_ops, g->nodes[node].name);
    cg_note_kernel(cg, name, label);
    LLVMValueRef f[8] = {q, cg_weights_ptr(cg, b, call, wo),
                         bo >= 0 ? cg_weights_ptr(cg, b, call, bo) : LLVMConstNull(cg->t_ptr),
                         v->residual >= 0 ? cg_value_ptr(cg, b, call, v->residual) : LLVMConstNull(cg->t_ptr),
                         cg_value_ptr(cg, b, call, y), sa, za, M};
    cg_call_driver(cg, fn, f, 8);
    return cg->d->status;
}

static int emit_linear(cg_ctx *cg, int node, const ir_linear *v)
{
    if (v->int8)
        return emit_linear_int8(cg, node, v);
    const ir_value *X = &cg->g->values[v->x], *Wv = &cg->g->values[v->w];
    int64_t K = Wv->dims[0].k, N = Wv->dims[1].k;
    gemm_call c;
    memset(&c, 0, sizeof c);
    c.d.K = K, c.d.N = N, c.d.ldr = N;
    c.d.lda = K + cg->row_pad[v->x], c.d.ldc = N + cg->row_pad[v->y];
    c.d.activation = (int)v->act;
    c.W = Wv->data;
    int vbias = v->bias, vr = v->residual >= 0 ? v->residual : v->gate;
    c.d.gate = v->gate >= 0;
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
    _Static_assert(sizeof d.fq == sizeof a.fq, "cg_attention_desc.fq holds Attention's fake-quant points");
    memcpy(d.fq, a.fq, sizeof d.fq);
    int vbias = a.bias, vq = a.q;
    d.q_tokens = vq >= 0 ? cg->g->values[vq].dims[1].k : 0;
    if (vbias >= 0) {
        int64_t s[3];
        ir_attention_bias_strides(cg->g, &a, d.tokens, s);
        d.has_bias = 1;
        d.bias_b = s[0], d.bias_h = s[1], d.bias_i = s[2];
        d.bias_period = ir_attention_bias_period(cg->g, &a);
    }
    if (a.rope >= 0) {
        d.rope_pairing = (int)a.rope_pairing;
        const ir_value *t = &cg->g->values[a.rope];
        d.rope_per_head = t->rank == 4;
        d.rope_start = a.rope_start;
        d.rope_rows = t->dims[t->rank - 2].k;
    }
    char name[64], label[256];
    LLVMValueRef fn = get_driver(cg, KC_ATTENTION, &d, sizeof d, "vitc_attention", name, sizeof name);
    if (!fn)
        return cg_fail(cg, VITC_INTERNAL, node, "the attention kernel generator refused N=%lld H=%lld D=%lld",
                       (long long)d.tokens, (long long)d.heads, (long long)d.head_size);
    char cross[32] = "";
    if (vq >= 0)
        snprintf(cross, sizeof cross, " Nq=%lld", (long long)d.q_tokens);
    int fq = 0;
    for (int i = 0; i < IR_ATTN_FQ_N; i++)
        fq |= d.fq[i][1] != 0;
    snprintf(label, sizeof label, "Attention N=%lld%s H=%lld D=%lld%s%s%s %s", (long long)d.tokens, cross,
             (long long)d.heads, (long long)d.head_size, d.has_bias ? " +bias" : "", a.rope >= 0 ? " +rope" : "",
             fq ? " +fake-quant" : "", n->name);
    cg_note_kernel(cg, name, label);
    LLVMBuilderRef b = cg->rb;
    LLVMValueRef none = LLVMConstNull(LLVMPointerTypeInContext(cg->llc, 0));
    LLVMValueRef f[6] = {cg_value_ptr(cg, b, cg->run_call, a.qkv), cg_value_ptr(cg, b, cg->run_call, a.y),
                         vbias >= 0 ? cg_value_ptr(cg, b, cg->run_call, vbias) : none,
                         vq >= 0 ? cg_value_ptr(cg, b, cg->run_call, vq) : none,
                         a.rope >= 0 ? cg_value_ptr(cg, b, cg->run_call, a.rope) : none,
                         cg_poly_value(cg, b, cg->run_batch, cg_poly_dim(X->dims[0]))};
    cg_call_driver(cg, fn, f, 6);
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

int cg_emit_matmul(cg_ctx *cg, int node)
{
    const ir_node *n = &cg->g->nodes[node];
    ir_linear v;
    if (cg_linear_of(cg->g, n, &v))
        return emit_linear(cg, node, &v);
    switch (n->op) {
    case IR_OP_MATMUL:
        return emit_bgemm(cg, node, n->inputs[0], n->inputs[1], 0, 1.0f);
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
