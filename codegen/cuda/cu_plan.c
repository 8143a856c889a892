/* cu_plan.c: where every value of a CUDA model lives, and the bookkeeping of
 * kernels and launches.
 *
 *  - Reshape, Flatten, Squeeze, Unsqueeze, Identity, inference Dropout and
 *    Casts between types stored alike are views: their output shares the
 *    bytes of their input.
 *  - Float activations are stored in the precision's type (f32, or f16/bf16
 *    with fp32 arithmetic inside every kernel), except the residual stream,
 *    which stays fp32 in fp16/bf16 (mark_wide); constants keep their type in
 *    the weights blob (GEMM weights get a converted copy, cu_linear.c).
 *  - Node outputs and graph inputs get offsets in one device workspace from
 *    passes/memplan.c, sized at the largest batch in their stored types.
 *    Inputs and outputs whose stored type differs from the caller's are
 *    staged: host arrays land in a staging buffer that a kernel converts
 *    (and back for outputs); staging buffers follow the planned area.
 *  - Kernels are registered by their text: the layers of a transformer
 *    repeat a few shapes, and identical text becomes one entry point. */
#include "codegen/cuda/cu_impl.h"

#include "passes/memplan.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- strings ---- */

void cu_str_add(cu_str *b, const char *fmt, ...)
{
    if (b->oom)
        return;
    va_list ap;
    va_start(ap, fmt);
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || b->len + (size_t)n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (n >= 0 && cap < b->len + (size_t)n + 1)
            cap *= 2;
        char *s = n < 0 ? NULL : realloc(b->s, cap);
        if (!s) {
            b->oom = 1;
            va_end(ap2);
            return;
        }
        b->s = s;
        b->cap = cap;
    }
    vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap2);
    va_end(ap2);
    b->len += (size_t)n;
}

void cu_str_free(cu_str *b)
{
    free(b->s);
    memset(b, 0, sizeof *b);
}

/* ---- errors, types ---- */

int cu_fail(cu_ctx *c, int status, int node, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vitc_verror(c->d, status, node >= 0 ? &c->g->nodes[node] : NULL, fmt, ap);
    va_end(ap);
    return status;
}

const char *cu_ctype(ir_dtype t)
{
    switch (t) {
    case IR_F32: return "float";
    case IR_F16: return "h16";
    case IR_BF16: return "b16";
    case IR_F64: return "double";
    case IR_I64: return "vk_i64";
    case IR_I32: return "int";
    case IR_U8: case IR_BOOL: return "unsigned char";
    case IR_I8: return "signed char";
    default: return NULL;
    }
}

static int is_float(ir_dtype t) { return t == IR_F32 || t == IR_F16 || t == IR_BF16 || t == IR_F64; }

ir_dtype cu_sdt(const cu_ctx *c, int v) { return c->sdt[cu_root(c, v)]; }

int cu_root(const cu_ctx *c, int v)
{
    for (int hops = 0; v >= 0 && c->plan.view_of[v] >= 0 && hops < c->g->nvalues; hops++)
        v = c->plan.view_of[v];
    return v;
}

const char *cu_poly_expr(cg_poly p, char *buf, size_t n)
{
    static const char *const pw[4] = {"", " * B", " * B * B", " * B * B * B"};
    int terms = 0;
    for (int e = 0; e <= CG_POLY_DEG; e++)
        terms += p.c[e] != 0;
    if (terms == 0) {
        snprintf(buf, n, "0LL");
        return buf;
    }
    size_t k = 0;
    if (terms > 1 || p.c[0] == 0)
        k += (size_t)snprintf(buf + k, n - k, "(");
    int first = 1;
    for (int e = 0; e <= CG_POLY_DEG && k < n; e++) {
        if (!p.c[e])
            continue;
        k += (size_t)snprintf(buf + k, n - k, "%s%lldLL%s", first ? "" : " + ", (long long)p.c[e], pw[e]);
        first = 0;
    }
    if ((terms > 1 || p.c[0] == 0) && k < n)
        snprintf(buf + k, n - k, ")");
    return buf;
}

const char *cu_float_lit(float f, char *buf, size_t n)
{
    if (f != f)
        snprintf(buf, n, "__int_as_float(0x7fc00000)");
    else if (f > 3.4e38f || f < -3.4e38f)
        snprintf(buf, n, "%s__int_as_float(0x7f800000)", f < 0 ? "-" : "");
    else {
        snprintf(buf, n, "%.9g", (double)f);
        if (!strpbrk(buf, ".e"))
            strncat(buf, ".0", n - strlen(buf) - 1);
        strncat(buf, "f", n - strlen(buf) - 1);
    }
    return buf;
}

/* ---- storage ---- */

/* In fp16/bf16, the residual stream stays fp32 (as under PyTorch's
 * autocast): the residual operand of every Linear and the output of a
 * Linear with a residual, except where a value must be 16-bit because a
 * tensor-core kernel reads it (a GEMM's input, Attention's qkv).  Rounding
 * the running sum of a transformer to 8 bits of mantissa at every layer is
 * what costs bf16 its accuracy; the GEMMs themselves stay 16-bit.
 * VITC_CUDA_WIDE_RESIDUAL=0 stores it 16-bit, as a model converted to the
 * type keeps it (`model.to(torch.bfloat16)`): half the bytes the residual
 * GEMMs' epilogues and the LayerNorms after them move. */
static void mark_wide(cu_ctx *c)
{
    const ir_graph *g = c->g;
    if (c->act == IR_F32)
        return;
    unsigned char *wide = calloc((size_t)g->nvalues + 1, 1), *narrow = calloc((size_t)g->nvalues + 1, 1);
    if (!wide || !narrow) {
        free(wide), free(narrow);
        return; /* all 16-bit: still correct */
    }
    char why[160];
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *n = &g->nodes[i];
        ir_linear l;
        ir_attention a;
        if (c->knobs.cuda_wide_residual && ir_linear_of(n, &l, why, sizeof why) && l.residual >= 0) {
            wide[cu_root(c, l.residual)] = 1;
            wide[cu_root(c, l.y)] = 1;
        }
        if (ir_attention_of(n, &a, why, sizeof why)) {
            narrow[cu_root(c, a.qkv)] = 1;
            if (a.q >= 0) /* cross-attention's queries, stored like its keys */
                narrow[cu_root(c, a.q)] = 1;
        } else if (cu_linear_supports(g, n, why, sizeof why)) { /* the GEMM's A */
            narrow[cu_root(c, n->inputs[0])] = 1;
        }
    }
    for (int k = 0; k < g->noutputs; k++) { /* a GEMM writes the model's outputs (logits) in fp32 directly */
        int v = cu_root(c, g->outputs[k]), pn = g->values[v].producer;
        if (pn >= 0 && cu_linear_supports(g, &g->nodes[pn], why, sizeof why))
            wide[v] = 1;
    }
    for (int v = 0; v < g->nvalues; v++)
        if (wide[v] && !narrow[v] && g->values[v].kind != IR_VAL_CONST && c->sdt[v] == c->act)
            c->sdt[v] = IR_F32;
    free(wide), free(narrow);
}

int cu_plan_storage(cu_ctx *c)
{
    ir_graph *g = c->g;
    int nv = g->nvalues, nn = g->nnodes;
    c->sdt = calloc((size_t)nv + 1, sizeof(ir_dtype));
    c->off = malloc(sizeof(int64_t) * ((size_t)nv + 1));
    c->woff = malloc(sizeof(int64_t) * ((size_t)nv + 1));
    c->gemm_w = malloc(sizeof(int64_t) * ((size_t)nv + 1));
    c->in_io = calloc((size_t)g->ninputs + 1, sizeof(vitc_cuda_io));
    c->out_io = calloc((size_t)g->noutputs + 1, sizeof(vitc_cuda_io));
    c->scratch_off = malloc(sizeof(int64_t) * ((size_t)nn + 1));
    c->ln_of = malloc(sizeof(int) * ((size_t)nn + 1));
    c->ln_folded = calloc((size_t)nn + 1, 1);
    int64_t *scratch = calloc((size_t)nn + 1, sizeof(int64_t));
    unsigned char *in_ws = calloc((size_t)nv + 1, 1);
    ir_value *sized = malloc(sizeof(ir_value) * ((size_t)nv + 1));
    if (!c->sdt || !c->off || !c->woff || !c->gemm_w || !c->in_io || !c->out_io || !in_ws || !sized ||
        !c->scratch_off || !scratch || !c->ln_of || !c->ln_folded) {
        free(in_ws), free(sized), free(scratch);
        return cu_fail(c, VITC_INTERNAL, -1, "out of memory");
    }
    for (int v = 0; v < nv; v++) {
        const ir_value *x = &g->values[v];
        c->off[v] = c->woff[v] = c->gemm_w[v] = -1;
        c->sdt[v] = x->kind != IR_VAL_CONST && is_float(x->dtype) ? c->act : x->dtype;
    }
    /* views: input 0 and output 0 stored alike (a Cast between types stored alike is one too) */
    if (cg_plan_build((cg_ctx_head *)c, c->sdt) != VITC_OK) {
        free(in_ws), free(sized), free(scratch);
        return c->d->status;
    }
    char why[8];
    int splits = 0;
    for (int i = 0; i < nn; i++) {
        const ir_node *n = &g->nodes[i];
        c->plan.skip[i] = n->noutputs >= 1 && n->outputs[0] >= 0 && c->plan.view_of[n->outputs[0]] >= 0;
        c->scratch_off[i] = -1;
        if (!c->plan.skip[i] && cu_linear_supports(g, n, why, sizeof why))
            scratch[i] = cu_linear_scratch(c, i);
        splits |= scratch[i] > 0;
    }

    mark_wide(c);
    cu_norm_fold(c);

    for (int k = 0; k < g->ninputs; k++)
        in_ws[g->inputs[k]] = 1;
    for (int i = 0; i < nn; i++) {
        const ir_node *n = &g->nodes[i];
        for (int k = 0; k < n->noutputs; k++) {
            int v = n->outputs[k];
            if (v >= 0 && c->plan.view_of[v] < 0 && c->plan.nuses[v] > 0)
                in_ws[v] = 1;
        }
    }
    /* memplan sizes buffers by dtype: give it the stored ones */
    memcpy(sized, g->values, sizeof(ir_value) * (size_t)nv);
    for (int v = 0; v < nv; v++)
        sized[v].dtype = c->sdt[v];
    ir_graph gs = *g;
    gs.values = sized;
    /* a GEMM with a norm folded in reads the norm's input too: it lives until then */
    size_t nextra = 0;
    for (int i = 0; i < nn; i++)
        nextra += c->ln_of[i] >= 0 ? (size_t)g->nodes[i].ninputs + 1 : 0;
    ir_node *nodes = malloc(sizeof(ir_node) * ((size_t)nn + 1));
    int *extra = malloc(sizeof(int) * (nextra + 1)), *in = extra;
    if (!nodes || !extra) {
        free(in_ws), free(sized), free(scratch), free(nodes), free(extra);
        return cu_fail(c, VITC_INTERNAL, -1, "out of memory");
    }
    memcpy(nodes, g->nodes, sizeof(ir_node) * (size_t)nn);
    for (int i = 0; i < nn; i++) {
        const ir_node *n = &g->nodes[i];
        if (c->ln_of[i] < 0)
            continue;
        memcpy(in, n->inputs, sizeof(int) * (size_t)n->ninputs);
        in[n->ninputs] = g->nodes[c->ln_of[i]].inputs[0];
        nodes[i].inputs = in;
        nodes[i].ninputs = n->ninputs + 1;
        in += n->ninputs + 1;
    }
    gs.nodes = nodes;
    pass_memplan_req req = {
        .max_batch = c->max_batch, .in_workspace = in_ws, .alias_of = c->plan.view_of, .scratch = scratch};
    pass_memplan_result plan;
    int st = pass_memplan(&gs, &req, &plan, c->d);
    free(sized), free(nodes), free(extra);
    free(scratch);
    if (st != VITC_OK) {
        free(in_ws);
        return st;
    }
    for (int v = 0; v < nv; v++)
        if (in_ws[v])
            c->off[v] = plan.offset[v];
    for (int i = 0; i < nn; i++)
        c->scratch_off[i] = plan.scratch_offset ? plan.scratch_offset[i] : -1;
    uint64_t end = plan.total;
    c->ws_unplanned = plan.unplanned;
    pass_memplan_free(&plan);
    free(in_ws);

    /* staging: inputs and outputs whose device type is not the caller's */
    for (int k = 0; k < g->ninputs + g->noutputs; k++) {
        int is_in = k < g->ninputs, v = is_in ? g->inputs[k] : g->outputs[k - g->ninputs];
        int r = cu_root(c, v);
        const ir_value *x = &g->values[v];
        vitc_cuda_io *io = is_in ? &c->in_io[k] : &c->out_io[k - g->ninputs];
        if (c->sdt[r] == x->dtype && g->values[r].kind == IR_VAL_CONST) {
            io->space = VITC_CUDA_SPACE_WEIGHTS; /* its offset is set when the weights are laid out */
            io->offset = 0;
            continue;
        }
        if (c->sdt[r] == x->dtype) {
            io->space = VITC_CUDA_SPACE_WORKSPACE;
            io->offset = (uint64_t)c->off[r];
            continue;
        }
        int64_t n = ir_value_numel(x, c->max_batch), bytes;
        if (n < 0 || ir_mul_ovf(n, (int64_t)ir_dtype_size(x->dtype), &bytes))
            return cu_fail(c, VITC_BAD_INPUT, -1, "the size of '%s' at batch %lld overflows", x->name,
                           (long long)c->max_batch);
        io->space = VITC_CUDA_SPACE_WORKSPACE;
        io->offset = end;
        end += ((uint64_t)bytes + 255) & ~(uint64_t)255;
    }
    /* the split-K GEMMs' tile counters: one region for all, each GEMM leaving them at 0 */
    c->counters_off = -1;
    if (splits) {
        c->counters_off = (int64_t)end;
        c->ncounters = cu_linear_counters(c);
        end += (uint64_t)c->ncounters * sizeof(unsigned);
    }
    c->ws_bytes = end;
    return VITC_OK;
}

void cu_plan_free(cu_ctx *c)
{
    free(c->sdt), free(c->off), free(c->woff), free(c->gemm_w);
    free(c->scratch_off), free(c->ln_of), free(c->ln_folded);
    c->scratch_off = NULL;
    c->ln_of = NULL;
    c->ln_folded = NULL;
    free(c->in_io), free(c->out_io);
    c->sdt = NULL;
    c->off = c->woff = c->gemm_w = NULL;
    c->in_io = c->out_io = NULL;
    for (int i = 0; i < c->nk; i++)
        free(c->k[i].name), free(c->k[i].label), free(c->k[i].text);
    free(c->k);
    free(c->l);
    c->k = NULL;
    c->l = NULL;
    c->nk = c->nl = c->capk = c->capl = 0;
}

int64_t cu_weights_of(cu_ctx *c, int v)
{
    if (c->woff[v] >= 0)
        return c->woff[v];
    const ir_value *x = &c->g->values[v];
    if (!ir_value_is_plain_const(c->g, v))
        return cu_fail(c, VITC_BAD_INPUT, x->producer, "constant '%s' depends on the batch at run time", x->name), -1;
    c->woff[v] = cg_blob_add(&c->weights, x->data, x->nbytes);
    if (c->woff[v] < 0)
        cu_fail(c, VITC_INTERNAL, -1, "out of memory for the weights (%zu bytes)", c->weights.len);
    return c->woff[v];
}

/* ---- kernels and launches ---- */

int cu_add_kernel(cu_ctx *c, const char *kind, const char *label, const cu_str *text)
{
    if (text->oom)
        return cu_fail(c, VITC_INTERNAL, -1, "out of memory"), -1;
    for (int i = 0; i < c->nk; i++)
        if (strcmp(c->k[i].text, text->s) == 0)
            return i;
    if (c->nk == c->capk) {
        int cap = c->capk ? 2 * c->capk : 32;
        cu_kernel *k = realloc(c->k, sizeof *k * (size_t)cap);
        if (!k)
            return cu_fail(c, VITC_INTERNAL, -1, "out of memory"), -1;
        c->k = k;
        c->capk = cap;
    }
    cu_kernel *k = &c->k[c->nk];
    memset(k, 0, sizeof *k);
    char name[64];
    snprintf(name, sizeof name, "vk_%s%d", kind, c->nk);
    k->name = strdup(name);
    k->label = strdup(label);
    k->text = strdup(text->s);
    for (int t = 0; t < CU_NSTATS; t++)
        k->regs[t] = k->spill[t] = k->stack[t] = -1;
    if (!k->name || !k->label || !k->text) {
        free(k->name), free(k->label), free(k->text);
        return cu_fail(c, VITC_INTERNAL, -1, "out of memory"), -1;
    }
    return c->nk++;
}

cu_launch *cu_launch_new(cu_ctx *c, int func, int node, unsigned block, unsigned smem)
{
    if (func < 0)
        return NULL;
    if (c->nl == c->capl) {
        int cap = c->capl ? 2 * c->capl : 64;
        cu_launch *l = realloc(c->l, sizeof *l * (size_t)cap);
        if (!l) {
            cu_fail(c, VITC_INTERNAL, -1, "out of memory");
            return NULL;
        }
        c->l = l;
        c->capl = cap;
    }
    cu_launch *l = &c->l[c->nl++];
    memset(l, 0, sizeof *l);
    l->func = func;
    l->node = node;
    l->block = block;
    l->smem = smem;
    for (int k = 0; k < 3; k++) {
        l->grid[k] = cg_poly_k(1);
        l->div[k] = 1;
    }
    l->min_batch = 1;
    l->max_batch = c->max_batch;
    c->k[func].nlaunches++;
    return l;
}

static void set_arg(cu_ctx *c, cu_launch *l, int slot, int kind, cg_poly v)
{
    if (slot < 0 || slot >= VITC_CUDA_MAX_ARGS || ((l->args_set >> slot) & 1)) {
        cu_fail(c, VITC_INTERNAL, l->node, "kernel argument slot %d out of range or set twice", slot);
        return;
    }
    while (l->nargs <= slot)
        l->args[l->nargs++] = (cu_arg){VITC_CUDA_ARG_INT, cg_poly_k(0)};
    l->args[slot] = (cu_arg){kind, v};
    l->args_set |= 1u << slot;
}

void cu_arg_value(cu_ctx *c, cu_launch *l, int slot, int v)
{
    int r = cu_root(c, v);
    if (c->g->values[r].kind == IR_VAL_CONST) {
        int64_t off = cu_weights_of(c, r);
        set_arg(c, l, slot, VITC_CUDA_ARG_WEIGHTS, cg_poly_k(off < 0 ? 0 : off));
        return;
    }
    if (c->off[r] < 0)
        cu_fail(c, VITC_INTERNAL, l->node, "value '%s' has no device memory", c->g->values[v].name);
    set_arg(c, l, slot, VITC_CUDA_ARG_WORKSPACE, cg_poly_k(c->off[r] < 0 ? 0 : c->off[r]));
}

void cu_arg_ws(cu_ctx *c, cu_launch *l, int slot, int64_t off)
{
    set_arg(c, l, slot, VITC_CUDA_ARG_WORKSPACE, cg_poly_k(off));
}

void cu_arg_ptr(cu_ctx *c, cu_launch *l, int slot, int kind, int64_t off) { set_arg(c, l, slot, kind, cg_poly_k(off)); }

void cu_arg_int(cu_ctx *c, cu_launch *l, int slot, cg_poly p) { set_arg(c, l, slot, VITC_CUDA_ARG_INT, p); }

char *cu_program_text(cu_ctx *c)
{
    cu_str b = {0};
    cu_str_add(&b, "/* Generated by vitc %s from %s: precision %s.\n * The device library, then the %d kernels. */\n",
               VITC_VERSION, c->opt->source ? c->opt->source : c->g->path,
               c->prec == CU_FP32 ? "fp32" : c->prec == CU_TF32 ? "tf32" : c->prec == CU_FP16 ? "fp16" : "bf16", c->nk);
    cu_str_add(&b, "%s", cu_lib_text);
    cu_str_add(&b, "\n/* ---- kernels ---- */\n");
    for (int i = 0; i < c->nk; i++) {
        const char *t = c->k[i].text, *at = strchr(t, '@');
        cu_str_add(&b, "\n/* %s: %s (%d launch%s) */\n", c->k[i].name, c->k[i].label, c->k[i].nlaunches,
                   c->k[i].nlaunches == 1 ? "" : "es");
        if (at)
            cu_str_add(&b, "%.*s%s%s", (int)(at - t), t, c->k[i].name, at + 1);
        else
            cu_str_add(&b, "%s", t);
    }
    if (b.oom) {
        cu_str_free(&b);
        return NULL;
    }
    /* an identifier of the text above, kept in every image (external linkage) */
    uint64_t h = vitc_fnv1a(VITC_FNV1A_INIT, b.s, b.len);
    cu_str_add(&b, "\n/* FNV-1a 64 of the program above: names it in every image it is compiled into */\n"
                   "extern \"C\" __device__ const char vk_program_id[] = \"vitc-program:%016llx\";\n"
                   "#if VK_SM90A /* and names the arch-specific image as such */\n"
                   "extern \"C\" __device__ const char vk_image_kind[] = \"vitc-image:sm_90a\";\n"
                   "#endif\n",
               (unsigned long long)h);
    if (b.oom) {
        cu_str_free(&b);
        return NULL;
    }
    return b.s;
}
