/* llvm_backend.c: the CPU backend instance (codegen/backend.h).
 *
 * The shared driver (codegen/compile.c) runs its slots in phases, each timed
 * for --verbose:
 *   check     supports(): every unsupported node reported at once
 *   plan      the target machine and the module (first graph), then
 *             schedule.c: views (codegen/plan.c), element-wise fusion,
 *             memory plan
 *   emit      one or more kernels per node, in node order, called from the
 *             graph's run(); a .so of several input shapes (--shapes) holds
 *             one graph per shape in one module, kernels shared by what they
 *             compute, weights by their bytes
 *   optimise  (finish) LLVM's -O pipeline for the target CPU
 *   object    machine code into a private directory next to the output
 *   link      cc -shared, then rename into place */
#include "codegen/llvm/cg_impl.h"
#include "codegen/progress.h"
#include "passes/passes.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int llvm_supports(const ir_graph *g, const ir_node *n, char *why, size_t len)
{
    if (ir_op_family_of(n->op) == IR_FAM_QUANT)
        return !cg_refuse_folded_only(n, "CPU", why, len);
    for (int k = 0; k < n->noutputs; k++) {
        int v = n->outputs[k];
        if (v < 0)
            continue;
        const ir_value *o = &g->values[v];
        if (o->rank < 0) {
            snprintf(why, len, "output '%s' has no inferred shape", o->name);
            return 0;
        }
        for (int i = 0; i < o->rank; i++) {
            if (o->dims[i].e < 0 || o->dims[i].e > CG_POLY_DEG) {
                snprintf(why, len, "output '%s' has a dimension in B^%d", o->name, o->dims[i].e);
                return 0;
            }
            if (o->dims[i].k == 0 && n->op == IR_OP_CONV) {
                snprintf(why, len, "output '%s' is empty (dimension %d is 0)", o->name, i);
                return 0;
            }
        }
    }
    switch (ir_op_family_of(n->op)) {
    case IR_FAM_VIEW:
        if (n->op == IR_OP_DROPOUT && !ir_dropout_is_inference(g, n)) {
            snprintf(why, len, "training-mode Dropout is not supported");
            return 0;
        }
        return 1;
    case IR_FAM_MAP: return cg_elem_supports(g, n, why, len);
    case IR_FAM_DATA: return cg_data_supports(g, n, why, len);
    case IR_FAM_NORM: return cg_norm_supports(g, n, why, len);
    case IR_FAM_MATMUL: return cg_matmul_supports(g, n, why, len);
    case IR_FAM_ATTENTION: return cg_attention_supports(g, n, why, len);
    case IR_FAM_QUANT: break; /* refused above */
    case IR_FAM_SHAPE: break;
    }
    if (n->op == IR_OP_SHAPE || n->op == IR_OP_SIZE || n->op == IR_OP_CONSTANT_OF_SHAPE || n->op == IR_OP_RANGE)
        snprintf(why, len, "%s is computed from shapes and should have been folded at compile time", ir_op_name(n->op));
    else
        snprintf(why, len, "%s is not supported by the CPU backend", ir_op_name(n->op));
    return 0;
}

/* The code of one kernel node (cg_schedule skips views and fused nodes). */
static int emit_node_code(cg_ctx *cg, int i)
{
    const ir_node *n = &cg->g->nodes[i];
    switch (ir_op_family_of(n->op)) {
    case IR_FAM_VIEW: return cg_emit_data(cg, i); /* a view that is a graph output: a copy */
    case IR_FAM_MAP: return cg_emit_elementwise(cg, i);
    case IR_FAM_DATA: return cg_emit_data(cg, i);
    case IR_FAM_NORM: return cg_emit_norm(cg, i);
    case IR_FAM_MATMUL: return cg_emit_matmul(cg, i);
    case IR_FAM_ATTENTION: return cg_emit_attention(cg, i);
    case IR_FAM_QUANT: /* refused by llvm_supports */
    case IR_FAM_SHAPE: break;
    }
    return cg_fail(cg, VITC_INTERNAL, i, "has no code generator");
}

/* A node's code, then its profile mark when it launched any. */
static int llvm_emit_node(cg_ctx_head *c, int i)
{
    cg_ctx *cg = (cg_ctx *)c;
    int first = cg->nknames;
    int st = emit_node_code(cg, i);
    if (st == VITC_OK && cg->nknames > first)
        cg_profile_mark(cg, i, first);
    return st == VITC_OK ? cg->d->status : st;
}

/* Graph outputs not computed in place: inputs, constants, repeated outputs. */
static int emit_output_copies(cg_ctx *cg)
{
    const ir_graph *g = cg->g;
    for (int k = 0; k < g->noutputs && cg->d->status == VITC_OK; k++) {
        int v = g->outputs[k];
        if (cg->loc[v].kind == CG_LOC_OUTPUT && cg->loc[v].index == k)
            continue;
        cg_view dst = cg_view_out_slot(cg, k);
        cg_emit_copy(cg, v, &dst, -1);
    }
    return cg->d->status;
}

/* Every function but the exported descriptor's stays inside the .so. */
static void internalize(cg_ctx *cg)
{
    for (LLVMValueRef f = LLVMGetFirstFunction(cg->mod); f; f = LLVMGetNextFunction(f))
        if (!LLVMIsDeclaration(f))
            LLVMSetLinkage(f, LLVMInternalLinkage);
}

/* The target machine, the module, then cg_schedule: views, element-wise
 * fusion, the memory plan. */
static int llvm_plan(cg_ctx_head *c)
{
    cg_ctx *cg = (cg_ctx *)c;
    const ir_graph *g = cg->g;
    const cg_options *opt = cg->opt;
    int st;
    if (cg->variant == 0) { /* the module, for every graph */
        if ((st = cg_target_create(cg, &cg->tm)) != VITC_OK)
            return st;
        cg_module_begin(cg);
        LLVMTargetDataRef dl = LLVMCreateTargetDataLayout(cg->tm);
        LLVMSetModuleDataLayout(cg->mod, dl);
        LLVMDisposeTargetData(dl);
        LLVMSetTarget(cg->mod, cg->triple);
        if (opt->verbose > 0)
            fprintf(stderr, "vitc: compiling %s for %s, cpu %s (%d-float vectors), -O%d, batch 1..%lld\n",
                    opt->source ? opt->source : g->path, cg->triple, cg->cpu, cg->target.vec_floats, opt->opt_level,
                    (long long)opt->max_batch);
    }
    cg_run_begin(cg);
    if ((st = cg_schedule(cg)) != VITC_OK)
        return st;
    char msg[200], shape[96] = "";
    int nk = 0;
    for (int i = 0; i < g->nnodes; i++)
        nk += cg->kind[i] == CG_NODE_KERNEL;
    if (cg->nvariants > 1 && g->ninputs > 0)
        snprintf(shape, sizeof shape, ", shape %d of %d: %s", cg->variant + 1, cg->nvariants,
                 ir_value_type_str(&g->values[g->inputs[0]], (char[80]){0}, 80));
    snprintf(msg, sizeof msg, "plan (%d of %d nodes make kernels%s)", nk, g->nnodes, shape);
    phase_done(&cg->t, msg);
    if (opt->verbose > 0)
        fprintf(stderr, "vitc: workspace %.3f MB at batch %lld (%.3f MB without reuse); %d GEMM-only tensor%s with padded rows\n",
                (double)cg->workspace_bytes / 1e6, (long long)cg->max_batch, (double)cg->workspace_unplanned / 1e6,
                cg->npadded, cg->npadded == 1 ? "" : "s");
    return VITC_OK;
}

/* After a graph's kernels: its outputs not computed in place, the end of
 * its run() and its descriptor's fields; then its schedule is freed. */
static int llvm_end_graph(cg_ctx_head *c)
{
    cg_ctx *cg = (cg_ctx *)c;
    int first = cg->nknames;
    emit_output_copies(cg);
    if (cg->d->status == VITC_OK && cg->nknames > first)
        cg_profile_mark(cg, -1, first);
    if (cg->d->status == VITC_OK)
        cg_module_end_graph(cg);
    cg_schedule_free(cg);
    return cg->d->status;
}

/* After every graph: the descriptors; then LLVM's -O pipeline and the
 * objects, the link, the weights written into the linked file (an embedded
 * blob is an object of its own, codegen/elf_obj.c, with a hole where they
 * go) and the move into place (codegen/package.h). */
static int llvm_finish(cg_ctx_head *c)
{
    cg_ctx *cg = (cg_ctx *)c;
    if (cg->d->status == VITC_OK)
        cg_module_finish(cg);
    if (cg->d->status == VITC_OK)
        internalize(cg);
    char msg[160];
    int nk = 0;
    for (int v = 0; v < cg->nvariants_done; v++)
        nk += cg->variants[v].nknames;
    snprintf(msg, sizeof msg, "emit (%d kernels%s, %.1f MB of weights)", nk,
             cg->nvariants_done > 1 ? " over the shapes" : "", (double)cg->blob.len / 1e6);
    phase_done(&cg->t, msg);
    int st = cg->d->status;
    if (st != VITC_OK)
        return st;
    cg_package pk;
    enum { MAX_OBJECTS = 8 };
    char obj[MAX_OBJECTS][PATH_MAX], wobj[PATH_MAX];
    cg_section w = {.symbol = CG_WEIGHTS_SYMBOL, .data = cg->blob.data, .bytes = cg->blob.len, .late = 1};
    size_t late = cg->blob_object ? cg_elf_late_bytes(&w, 1) : 0;
    int nparts = cg_split_parts(cg);
    nparts = nparts > MAX_OBJECTS - 1 ? MAX_OBJECTS - 1 : nparts;
    st = cg_package_begin(&pk, cg->opt, cg->d);
    for (int p = 0; p < nparts && st == VITC_OK; p++) {
        char name[32];
        snprintf(name, sizeof name, "model%d.o", p);
        if (!cg_package_path(&pk, name, obj[p], sizeof obj[p]))
            st = cg->d->status;
    }
    if (st == VITC_OK && !cg_package_path(&pk, "weights.o", wobj, sizeof wobj))
        st = cg->d->status;
    if (st == VITC_OK && cg->blob_object)
        st = cg_write_elf_object(cg->d, wobj, cg_elf_machine(cg->triple), &w, 1, late && cg_package_reserves());
    if (st == VITC_OK && (st = cg_optimize_split(cg, cg->tm, obj, &nparts)) == VITC_OK) {
        snprintf(msg, sizeof msg, "optimise and object file (%d thread%s)", nparts, nparts > 1 ? "s" : "");
        phase_done(&cg->t, msg);
    }
    const char *inputs[MAX_OBJECTS];
    for (int p = 0; p < nparts; p++)
        inputs[p] = obj[p];
    inputs[nparts] = wobj;
    if (st == VITC_OK)
        st = cg_package_link(&pk, inputs, nparts + (cg->blob_object ? 1 : 0), late);
    if (st == VITC_OK) {
        char what[160];
        snprintf(what, sizeof what, "link (%s)", cg_package_linker());
        phase_done(&cg->t, what);
    }
    if (st == VITC_OK && cg->blob_object)
        st = cg_package_fill_late(&pk, &w, 1);
    if (st == VITC_OK)
        st = cg_package_install(&pk, &cg->blob);
    if (st == VITC_OK) {
        if (cg->blob_object)
            snprintf(msg, sizeof msg, "weights into the .so (%.1f MB), install", (double)cg->blob.len / 1e6);
        else if (cg->opt->external_weights)
            snprintf(msg, sizeof msg, "weights file (%.1f MB), install", (double)cg->blob.len / 1e6);
        else
            snprintf(msg, sizeof msg, "install");
        phase_done(&cg->t, msg);
    }
    cg_package_end(&pk);
    return st ? st : cg->d->status;
}

static void llvm_end(cg_ctx_head *c)
{
    cg_ctx *cg = (cg_ctx *)c;
    cg_module_free(cg);
    cg_schedule_free(cg);
    cg_kcache_free(cg);
    if (cg->tm)
        LLVMDisposeTargetMachine(cg->tm);
    free(cg->triple), free(cg->cpu), free(cg->features);
}

static const char *llvm_describe(void)
{
    static char buf[48];
    unsigned major, minor, patch;
    LLVMGetVersion(&major, &minor, &patch);
    snprintf(buf, sizeof buf, "LLVM %u.%u.%u", major, minor, patch);
    return buf;
}

/* Int8 Linears: a quantized model's own; with --precision int8 every one,
 * its weights' pairs within int8 where the target's int8 GEMM is
 * VPMADDUBSW's (AVX2 or AVX-512 without VNNI: exact for such weights,
 * gemm_i8.c). */
static int llvm_int8(const cg_options *o, int *pairs)
{
    if (!o || !o->precision || strcmp(o->precision, "int8") != 0)
        return PASS_INT8_QUANTIZED;
    cg_target t;
    if (!cg_target_of_options(o, &t) && t.madd16 && !t.vnni && !t.amx_int8)
        *pairs = 1;
    return PASS_INT8_ALL;
}

const cg_backend cg_llvm_backend = {
    .name = "cpu",
    .title = "CPU",
    .ctx_size = sizeof(cg_ctx),
    .supports = llvm_supports,
    .plan = llvm_plan,
    .emit_node = llvm_emit_node,
    .end_graph = llvm_end_graph,
    .finish = llvm_finish,
    .variants = 1,
    .end = llvm_end,
    .describe = llvm_describe,
    .int8 = llvm_int8,
};
