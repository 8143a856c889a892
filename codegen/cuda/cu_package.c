/* cu_package.c: a CUDA model as a shared library.  The .so is data: the
 * launch plan, the code images and the weights, described by the same
 * exported descriptor as a CPU model (target "cuda", its cuda_plan set and a
 * run() that only answers VITC_STATUS_NO_DEVICE, for a runtime that would
 * call it).  It is built with the CPU backend's machinery (codegen/llvm):
 * the module and descriptor (module.c), the weights as an ELF object of
 * their own (elf_blob.c), object file and link (target.c, link.c). */
#include "codegen/cuda/cu_impl.h"

#include "vitc/runtime.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    LLVMTypeRef poly, arg, launch, image, io, plan;
} plan_types;

static LLVMTypeRef named(cg_ctx *g, const char *name, LLVMTypeRef *fields, unsigned n)
{
    LLVMTypeRef t = LLVMStructCreateNamed(g->llc, name);
    LLVMStructSetBody(t, fields, n, 0);
    return t;
}

static int make_types(cu_ctx *c, plan_types *t)
{
    cg_ctx *g = &c->cg;
    LLVMTypeRef i32 = g->t_i32, i64 = g->t_i64, ptr = g->t_ptr;
    LLVMTypeRef pf[1] = {LLVMArrayType2(i64, 4)};
    t->poly = named(g, "vitc_cuda_poly", pf, 1);
    LLVMTypeRef af[3] = {i32, i32, t->poly};
    t->arg = named(g, "vitc_cuda_arg", af, 3);
    LLVMTypeRef lf[10] = {i32, i32, i32, i32, LLVMArrayType2(t->poly, 3), LLVMArrayType2(i64, 3), i64, i64, i32, ptr};
    t->launch = named(g, "vitc_cuda_launch", lf, 10);
    LLVMTypeRef imf[6] = {i32, i32, i32, i32, ptr, i64};
    t->image = named(g, "vitc_cuda_image", imf, 6);
    LLVMTypeRef iof[3] = {i32, i32, i64};
    t->io = named(g, "vitc_cuda_io", iof, 3);
    LLVMTypeRef plf[12] = {i32, i32, ptr, i32, ptr, i32, ptr, i32, ptr, ptr, ptr, i64};
    t->plan = named(g, "vitc_cuda_plan", plf, 12);
    LLVMTargetDataRef td = LLVMGetModuleDataLayout(g->mod);
    if (LLVMABISizeOfType(td, t->poly) != sizeof(vitc_cuda_poly) ||
        LLVMABISizeOfType(td, t->arg) != sizeof(vitc_cuda_arg) ||
        LLVMABISizeOfType(td, t->launch) != sizeof(vitc_cuda_launch) ||
        LLVMABISizeOfType(td, t->image) != sizeof(vitc_cuda_image) ||
        LLVMABISizeOfType(td, t->io) != sizeof(vitc_cuda_io) || LLVMABISizeOfType(td, t->plan) != sizeof(vitc_cuda_plan))
        return cu_fail(c, VITC_INTERNAL, -1, "the CUDA plan's layout for %s differs from runtime/abi.h", g->triple);
    return VITC_OK;
}

static LLVMValueRef i32c(cg_ctx *g, int64_t v) { return LLVMConstInt(g->t_i32, (unsigned long long)v, 1); }
static LLVMValueRef i64c(cg_ctx *g, int64_t v) { return LLVMConstInt(g->t_i64, (unsigned long long)v, 1); }

static LLVMValueRef poly_const(cg_ctx *g, const plan_types *t, cg_poly p)
{
    LLVMValueRef c4[4];
    for (int k = 0; k < 4; k++)
        c4[k] = i64c(g, k <= CG_POLY_DEG ? p.c[k] : 0);
    LLVMValueRef arr = LLVMConstArray2(g->t_i64, c4, 4);
    return LLVMConstNamedStruct(t->poly, &arr, 1);
}

/* A private constant array of n elements of type et; a null pointer when n is 0. */
static LLVMValueRef array_global(cg_ctx *g, LLVMTypeRef et, LLVMValueRef *elems, size_t n, const char *name)
{
    if (n == 0)
        return LLVMConstNull(g->t_ptr);
    return cg_const_global(g, LLVMConstArray2(et, elems, (uint64_t)n), name, 8);
}

static LLVMValueRef build_plan(cu_ctx *c, const plan_types *t, const cu_image *images, int nimages)
{
    cg_ctx *g = &c->cg;
    size_t most = (size_t)(c->nl > c->nk ? c->nl : c->nk) + (size_t)nimages + (size_t)g->g->ninputs +
                  (size_t)g->g->noutputs + VITC_CUDA_MAX_ARGS + 1;
    LLVMValueRef *el = calloc(most, sizeof *el), *launches = calloc((size_t)c->nl + 1, sizeof *launches);
    if (!el || !launches) {
        free(el), free(launches);
        cu_fail(c, VITC_INTERNAL, -1, "out of memory");
        return NULL;
    }
    for (int i = 0; i < nimages; i++) {
        const cu_image *im = &images[i];
        int nul = im->kind == VITC_CUDA_IMAGE_PTX && (im->bytes == 0 || ((const char *)im->data)[im->bytes - 1] != 0);
        LLVMValueRef data = LLVMConstStringInContext2(g->llc, im->data, im->bytes, nul ? 0 : 1);
        char name[32];
        snprintf(name, sizeof name, "vitc_cuda_image%d", i);
        LLVMValueRef gv = cg_const_global(g, data, name, 64);
        LLVMValueRef f[6] = {i32c(g, im->kind), i32c(g, im->arch), i32c(g, im->arch_specific), i32c(g, 0), gv,
                             i64c(g, (int64_t)im->bytes)};
        el[i] = LLVMConstNamedStruct(t->image, f, 6);
    }
    LLVMValueRef imgs = array_global(g, t->image, el, (size_t)nimages, "vitc_cuda_images");
    for (int i = 0; i < c->nk; i++)
        el[i] = cg_const_cstr(g, c->k[i].name);
    LLVMValueRef fns = array_global(g, g->t_ptr, el, (size_t)c->nk, "vitc_cuda_functions");
    for (int i = 0; i < c->nl; i++) {
        const cu_launch *l = &c->l[i];
        LLVMValueRef args[VITC_CUDA_MAX_ARGS], grid[3], div[3];
        for (int k = 0; k < l->nargs; k++) {
            LLVMValueRef f[3] = {i32c(g, l->args[k].kind), i32c(g, 0), poly_const(g, t, l->args[k].v)};
            args[k] = LLVMConstNamedStruct(t->arg, f, 3);
        }
        for (int k = 0; k < 3; k++) {
            grid[k] = poly_const(g, t, l->grid[k]);
            div[k] = i64c(g, l->div[k]);
        }
        LLVMValueRef f[10] = {i32c(g, l->func), i32c(g, l->block), i32c(g, l->smem), i32c(g, 0),
                              LLVMConstArray2(t->poly, grid, 3), LLVMConstArray2(g->t_i64, div, 3),
                              i64c(g, l->min_batch), i64c(g, l->max_batch), i32c(g, l->nargs),
                              array_global(g, t->arg, args, (size_t)l->nargs, "vitc_cuda_args")};
        launches[i] = LLVMConstNamedStruct(t->launch, f, 10);
    }
    LLVMValueRef lch = array_global(g, t->launch, launches, (size_t)c->nl, "vitc_cuda_launches");
    LLVMValueRef ios[2];
    for (int side = 0; side < 2; side++) {
        int n = side ? g->g->noutputs : g->g->ninputs;
        const vitc_cuda_io *io = side ? c->out_io : c->in_io;
        for (int i = 0; i < n; i++) {
            LLVMValueRef f[3] = {i32c(g, io[i].space), i32c(g, 0), i64c(g, (int64_t)io[i].offset)};
            el[i] = LLVMConstNamedStruct(t->io, f, 3);
        }
        ios[side] = array_global(g, t->io, el, (size_t)n, side ? "vitc_cuda_outputs" : "vitc_cuda_inputs");
    }
    static const char *const prec[4] = {"fp32", "tf32", "fp16", "bf16"};
    LLVMValueRef f[12] = {i32c(g, VITC_CUDA_PLAN_VERSION), i32c(g, sizeof(vitc_cuda_plan)), cg_const_cstr(g, prec[c->prec]),
                          i32c(g, nimages), imgs, i32c(g, c->nk), fns, i32c(g, c->nl), lch, ios[0], ios[1],
                          i64c(g, (int64_t)c->ws_bytes)};
    LLVMValueRef plan = cg_const_global(g, LLVMConstNamedStruct(t->plan, f, 12), "vitc_cuda_plan", 8);
    free(el), free(launches);
    return plan;
}

/* "name label [sm_80: R regs, S spill; sm_90: ...] (N launches)" for the descriptor's kernel list. */
static void note_kernels(cu_ctx *c)
{
    for (int i = 0; i < c->nk; i++) {
        const cu_kernel *k = &c->k[i];
        char label[512];
        size_t n = (size_t)snprintf(label, sizeof label, "%s [", k->label);
        for (int t = 0; t < CU_NTARGETS && n < sizeof label; t++)
            n += (size_t)snprintf(label + n, sizeof label - n, "%ssm_%d: %d regs, %d bytes spilled, %d bytes stack",
                                  t ? "; " : "", cu_target_arch[t], k->regs[t], k->spill[t], k->stack[t]);
        if (n < sizeof label)
            snprintf(label + n, sizeof label - n, "] (%d launch%s)", k->nlaunches, k->nlaunches == 1 ? "" : "es");
        cg_note_kernel(&c->cg, k->name, label);
    }
}

int cu_package(cu_ctx *c, const cu_image *images, int nimages)
{
    cg_ctx *g = &c->cg;
    LLVMTargetMachineRef tm = NULL;
    char dir[PATH_MAX] = "", obj[PATH_MAX + 16];
    int st = cg_target_create(g, &tm);
    if (st == VITC_OK) {
        /* the descriptor's cpu and features say what the GPU code targets */
        char archs[128];
        size_t k = 0;
        for (int t = 0; t < CU_NTARGETS; t++)
            k += (size_t)snprintf(archs + k, sizeof archs - k, "sm_%d,", cu_target_arch[t]);
        snprintf(archs + k, sizeof archs - k, "compute_%d", cu_target_arch[CU_NTARGETS - 1]);
        static const char *const prec[4] = {"fp32", "tf32", "fp16", "bf16"};
        free(g->cpu), free(g->features);
        g->cpu = strdup(archs);
        g->features = strdup(prec[c->prec]);
        if (!g->cpu || !g->features)
            st = cu_fail(c, VITC_INTERNAL, -1, "out of memory");
    }
    if (st == VITC_OK) {
        cg_module_begin(g);
        LLVMTargetDataRef dl = LLVMCreateTargetDataLayout(tm);
        LLVMSetModuleDataLayout(g->mod, dl);
        LLVMDisposeTargetData(dl);
        LLVMSetTarget(g->mod, g->triple);
        plan_types t;
        st = make_types(c, &t);
        if (st == VITC_OK) {
            note_kernels(c);
            g->abi_cuda_plan = build_plan(c, &t, images, nimages);
            g->abi_target = "cuda";
            g->run_status = VITC_STATUS_NO_DEVICE;
            g->workspace_bytes = c->ws_bytes;
            st = g->abi_cuda_plan ? cg_module_finish(g) : c->d->status;
        }
    }
    if (st == VITC_OK)
        st = cg_optimize(g, tm);
    if (st == VITC_OK && (st = cg_tmpdir_create(g, dir, sizeof dir)) == VITC_OK) {
        snprintf(obj, sizeof obj, "%s/model.o", dir);
        if ((st = cg_emit_object(g, tm, obj)) == VITC_OK)
            st = cg_link_install(g, dir, obj);
        cg_tmpdir_remove(dir);
    }
    cg_module_free(g);
    if (tm)
        LLVMDisposeTargetMachine(tm);
    free(g->triple), free(g->cpu), free(g->features);
    g->triple = g->cpu = g->features = NULL;
    return st;
}
