/* cu_backend.c: the CUDA backend instance (codegen/backend.h).
 *
 * The shared driver (codegen/compile.c) runs its slots in phases, each timed
 * for --verbose:
 *   check     supports() for every node, then the graph's input and output types
 *   plan      views (codegen/plan.c), storage types, the device workspace (cu_plan.c)
 *   generate  the kernels and launches of every node, in node order, between
 *             the conversions of the graph's inputs and outputs (finish)
 *   nvrtc     the program for every GPU target (cu_nvrtc.c); --emit-cuda
 *             stops before this and writes the program instead
 *   package   the .so (cu_package.c)
 *
 * Precision (--precision): bf16 by default.  fp16 and bf16 store activations
 * and GEMM weights in 16 bits and run GEMMs and attention on tensor cores,
 * accumulating in fp32; the residual stream stays fp32 (as under PyTorch's
 * autocast), and LayerNorm statistics, softmax and every element-wise op
 * compute in fp32.  tf32 keeps fp32 storage with TF32 tensor-core GEMMs;
 * fp32 is plain fp32 throughout (SIMT GEMM and attention). */
#include "codegen/cuda/cu_impl.h"
#include "codegen/progress.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef enum { K_VIEW, K_DATA, K_ELEM, K_NORM, K_LINEAR, K_ATTN, K_MISC, K_QUANT, K_NONE } op_kind;

/* Which of the backend's files makes node n: by the op table's family. */
static op_kind kind_of(const ir_graph *g, const ir_node *n)
{
    char why[8];
    switch (ir_op_family_of(n->op)) {
    case IR_FAM_VIEW: return K_VIEW;
    case IR_FAM_DATA: return K_DATA;
    case IR_FAM_MAP: return K_ELEM;
    case IR_FAM_NORM: return K_NORM;
    case IR_FAM_ATTENTION: return K_ATTN;
    case IR_FAM_MATMUL:
        if (ir_op_has(n->op, OPF_FUSED)) /* Linear */
            return K_LINEAR;
        if (n->op == IR_OP_MATMUL || n->op == IR_OP_GEMM) /* a GEMM with a constant weight, else cu_misc.c */
            return cu_linear_supports(g, n, why, sizeof why) ? K_LINEAR : K_MISC;
        return n->op == IR_OP_CONV ? K_MISC : K_NONE; /* Einsum: none */
    case IR_FAM_QUANT: return K_QUANT;
    case IR_FAM_SHAPE: break;
    }
    return K_NONE;
}

static int cuda_supports(const ir_graph *g, const ir_node *n, char *why, size_t len)
{
    if (kind_of(g, n) == K_QUANT) /* before its integer outputs are named as the reason */
        return !cg_refuse_folded_only(n, "CUDA", why, len);
    for (int k = 0; k < n->noutputs; k++) {
        int v = n->outputs[k];
        if (v < 0)
            continue;
        const ir_value *o = &g->values[v];
        if (o->rank < 0) {
            snprintf(why, len, "output '%s' has no inferred shape", o->name);
            return 0;
        }
        for (int i = 0; i < o->rank; i++)
            if (o->dims[i].e < 0 || o->dims[i].e > 1) {
                snprintf(why, len, "output '%s' has a dimension in B^%d (the CUDA backend takes k*B)", o->name,
                         o->dims[i].e);
                return 0;
            }
        if (o->dtype == IR_F64) {
            snprintf(why, len, "output '%s' is f64 (the CUDA backend computes in fp32)", o->name);
            return 0;
        }
        if (!cu_ctype(o->dtype)) {
            snprintf(why, len, "output '%s' is %s", o->name, ir_dtype_name(o->dtype));
            return 0;
        }
    }
    switch (kind_of(g, n)) {
    case K_VIEW: case K_DATA: return cu_data_supports(g, n, why, len);
    case K_ELEM: return cu_elem_supports(g, n, why, len);
    case K_NORM: return cu_norm_supports(g, n, why, len);
    case K_LINEAR: return cu_linear_supports(g, n, why, len);
    case K_ATTN: return cu_attention_supports(g, n, why, len);
    case K_MISC: return cu_misc_supports(g, n, why, len);
    case K_QUANT: return !cg_refuse_folded_only(n, "CUDA", why, len);
    case K_NONE: break;
    }
    if (n->op == IR_OP_SHAPE || n->op == IR_OP_SIZE || n->op == IR_OP_CONSTANT_OF_SHAPE || n->op == IR_OP_RANGE ||
        n->op == IR_OP_CONSTANT)
        snprintf(why, len, "%s is computed from shapes and should have been folded at compile time", ir_op_name(n->op));
    else
        snprintf(why, len, "%s is not supported by the CUDA backend", ir_op_name(n->op));
    return 0;
}

/* The kernels and launches of node i (views are skipped: cu_plan.c). */
static int cuda_emit_node(cg_ctx_head *h, int i)
{
    cu_ctx *c = (cu_ctx *)h;
    const ir_node *n = &c->g->nodes[i];
    switch (kind_of(c->g, n)) {
    case K_VIEW:
    case K_DATA: return cu_emit_data(c, i);
    case K_ELEM: return cu_emit_elem(c, i);
    case K_NORM: return cu_emit_norm(c, i);
    case K_LINEAR: return cu_emit_linear(c, i);
    case K_ATTN: return cu_emit_attention(c, i);
    case K_MISC: return cu_emit_misc(c, i);
    case K_QUANT: /* refused by cuda_supports */
    case K_NONE: break;
    }
    return cu_fail(c, VITC_INTERNAL, i, "has no CUDA code generator");
}

static int parse_precision(const char *s, cu_precision *p)
{
    static const char *const names[4] = {"fp32", "tf32", "fp16", "bf16"};
    for (int i = 0; i < 4; i++)
        if (strcmp(s, names[i]) == 0) {
            *p = (cu_precision)i;
            return 1;
        }
    return 0;
}

static int write_program(cu_ctx *c, const char *text)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", c->opt->output);
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return cu_fail(c, VITC_BAD_INPUT, -1, "cannot write %s: %s", tmp, strerror(errno));
    size_t n = strlen(text);
    int ok = fwrite(text, 1, n, f) == n;
    if (fclose(f) != 0)
        ok = 0;
    if (!ok || rename(tmp, c->opt->output) != 0) {
        int e = errno;
        remove(tmp);
        return cu_fail(c, VITC_BAD_INPUT, -1, "cannot write %s: %s", c->opt->output, strerror(e));
    }
    return VITC_OK;
}

static void report_kernels(const cu_ctx *c)
{
    for (int i = 0; i < c->nk; i++) {
        const cu_kernel *k = &c->k[i];
        fprintf(stderr, "vitc:   %-12s %-56s", k->name, k->label);
        for (int t = 0; t < CU_NSTATS; t++)
            if (k->regs[t] >= 0)
                fprintf(stderr, " %s %3d regs %d spill", cu_stats_target(t), k->regs[t], k->spill[t]);
        fprintf(stderr, "\n");
    }
}

/* The graph's inputs and outputs in types the runtime converts. */
static int cuda_check(const ir_graph *g, vitc_diag *d)
{
    int bad = 0;
    for (int k = 0; k < g->ninputs + g->noutputs; k++) {
        const ir_value *v = &g->values[k < g->ninputs ? g->inputs[k] : g->outputs[k - g->ninputs]];
        if (!cu_ctype(v->dtype) || v->dtype == IR_F64) {
            vitc_error(d, VITC_BAD_INPUT, NULL, "%s '%s' is %s, which the CUDA backend does not take",
                       k < g->ninputs ? "input" : "output", v->name, ir_dtype_name(v->dtype));
            bad++;
        }
    }
    return bad;
}

static int cuda_begin(cg_ctx_head *h)
{
    cu_ctx *c = (cu_ctx *)h;
    const cg_options *opt = c->opt;
    c->prec = CU_BF16;
    if (opt->precision && !parse_precision(opt->precision, &c->prec))
        return vitc_error(c->d, VITC_BAD_INPUT, NULL, "--precision takes fp32, tf32, fp16 or bf16, not '%s'",
                          opt->precision);
    c->act = c->prec == CU_FP16 ? IR_F16 : c->prec == CU_BF16 ? IR_BF16 : IR_F32;
    return VITC_OK;
}

/* NVRTC, then views, storage types and the device workspace (cu_plan.c),
 * then the conversions of the graph's inputs. */
static int cuda_plan(cg_ctx_head *h)
{
    cu_ctx *c = (cu_ctx *)h;
    const cg_options *opt = c->opt;
    const char *nvrtc_missing;
    if (!opt->emit_source && !cu_nvrtc_load(&nvrtc_missing))
        return vitc_error(c->d, VITC_BAD_INPUT, NULL, "--target cuda: %s", nvrtc_missing);
    if (opt->verbose > 0)
        fprintf(stderr, "vitc: compiling %s for CUDA (sm_80, sm_90, PTX), %s, batch 1..%lld, NVRTC %s\n",
                opt->source ? opt->source : c->g->path, opt->precision ? opt->precision : "bf16",
                (long long)opt->max_batch, cu_nvrtc_version());
    int st = cu_plan_storage(c);
    if (st != VITC_OK)
        return st;
    char msg[160];
    snprintf(msg, sizeof msg, "plan (%.3f MB of device workspace at batch %lld)", (double)c->ws_bytes / 1e6,
             (long long)c->max_batch);
    phase_done(&c->t, msg);
    return cu_emit_input_conversions(c);
}

/* The conversions of the graph's outputs, the program, then NVRTC and the
 * .so, or the program itself with --emit-cuda. */
static int cuda_finish(cg_ctx_head *h)
{
    cu_ctx *c = (cu_ctx *)h;
    const cg_options *opt = c->opt;
    int st = cu_emit_output_conversions(c);
    char *program = NULL;
    if (st == VITC_OK && !(program = cu_program_text(c)))
        st = cu_fail(c, VITC_INTERNAL, -1, "out of memory");
    if (st == VITC_OK) {
        char msg[160];
        snprintf(msg, sizeof msg, "generate (%d kernels, %d launches, %.1f MB of weights)", c->nk, c->nl,
                 (double)c->weights.len / 1e6);
        phase_done(&c->t, msg);
    }
    if (st == VITC_OK && opt->emit_source) {
        st = write_program(c, program);
    } else if (st == VITC_OK) {
        cu_image images[2 * CU_NTARGETS];
        int nimages = 0;
        st = cu_nvrtc_compile(c, program, images, &nimages);
        if (st == VITC_OK) {
            phase_done(&c->t, c->wgmma ? "nvrtc (sm_80, sm_90, sm_90a, PTX)" : "nvrtc (sm_80, sm_90, PTX)");
            int spills = 0;
            for (int i = 0; i < c->nk; i++)
                for (int k = 0; k < CU_NSTATS; k++)
                    spills += c->k[i].spill[k] > 0;
            if (opt->verbose > 0 || spills)
                report_kernels(c);
            if (spills)
                fprintf(stderr, "vitc: warning: %d kernel compilations spill registers to local memory\n", spills);
            st = cu_package(c, images, nimages);
            if (st == VITC_OK)
                phase_done(&c->t, "package and link");
        }
        cu_images_free(images, nimages);
    }
    free(program);
    return st;
}

static void cuda_end(cg_ctx_head *h)
{
    cu_ctx *c = (cu_ctx *)h;
    cg_blob_free(&c->weights);
    cu_plan_free(c);
}

static const char *cuda_describe(void)
{
    static char buf[300];
    const char *why;
    if (!cu_nvrtc_load(&why))
        snprintf(buf, sizeof buf, "NVRTC not found (%s)", why ? why : "?");
    else
        snprintf(buf, sizeof buf, "NVRTC %s", cu_nvrtc_version());
    return buf;
}

const cg_backend cg_cuda_backend = {
    .name = "cuda",
    .title = "CUDA",
    .ctx_size = sizeof(cu_ctx),
    .supports = cuda_supports,
    .check = cuda_check,
    .begin = cuda_begin,
    .plan = cuda_plan,
    .emit_node = cuda_emit_node,
    .finish = cuda_finish,
    .end = cuda_end,
    .describe = cuda_describe,
};
