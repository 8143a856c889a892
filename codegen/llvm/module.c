/* module.c: the LLVM module of a compiled model and the plumbing every
 * emitter uses: the run() function that calls the kernels in node order,
 * kernel functions and their launches (direct or through the runtime's
 * parallel_for), pointers to a value's storage, counted loops, math calls,
 * the weights blob and, at the end, the exported descriptor (runtime/abi.h). */
#include "codegen/llvm/cg_impl.h"

#include "runtime/abi.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Work below this many simple operations runs on the calling thread: handing
 * it to the pool would cost more than it saves. */
#define CG_PARALLEL_MIN_WORK (1 << 15)

enum {
    CALL_BATCH, CALL_INPUTS, CALL_OUTPUTS, CALL_WORKSPACE, CALL_WEIGHTS, CALL_POOL, CALL_PF, CALL_NTHREADS,
    CALL_PROFILE, CALL_PROFILE_ARG, CALL_NFIELDS
};

/* vitc_abi_model's fields (runtime/abi.h), checked against its size at the
 * end; the per-graph ones kept in a cg_variant until then. */
enum { DESC_NFIELDS = 30 };

/* A stored range of the weights blob, by its bytes' hash. */
struct cg_wshare {
    uint64_t hash;
    int64_t off;
    size_t n;
};

int cg_fail(cg_ctx *cg, int status, int node, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vitc_verror(cg->d, status, node >= 0 ? &cg->g->nodes[node] : NULL, fmt, ap);
    va_end(ap);
    return status;
}

LLVMValueRef cg_i64(cg_ctx *cg, int64_t x) { return LLVMConstInt(cg->t_i64, (unsigned long long)x, 1); }
LLVMValueRef cg_f32(cg_ctx *cg, double x) { return LLVMConstReal(cg->t_f32, x); }

LLVMTypeRef cg_mem_type(cg_ctx *cg, ir_dtype t)
{
    switch (t) {
    case IR_F32: return cg->t_f32;
    case IR_F64: return cg->t_f64;
    case IR_I64: case IR_U64: return cg->t_i64;
    case IR_I32: case IR_U32: return cg->t_i32;
    case IR_I16: case IR_U16: return cg->t_i16;
    case IR_I8: case IR_U8: case IR_BOOL: return cg->t_i8;
    default: return NULL; /* f16, bf16: no CPU arithmetic for them here */
    }
}

LLVMTypeRef cg_raw_type(cg_ctx *cg, ir_dtype t)
{
    switch (ir_dtype_size(t)) {
    case 1: return cg->t_i8;
    case 2: return cg->t_i16;
    case 4: return cg->t_i32;
    default: return cg->t_i64;
    }
}

/* ---- the module and run() ---- */

int cg_module_begin(cg_ctx *cg)
{
    cg->llc = LLVMContextCreate();
    cg->mod = LLVMModuleCreateWithNameInContext("vitc_model", cg->llc);
    cg->b = LLVMCreateBuilderInContext(cg->llc);
    cg->rb = LLVMCreateBuilderInContext(cg->llc);
    LLVMContextRef c = cg->llc;
    cg->t_i1 = LLVMInt1TypeInContext(c);
    cg->t_i8 = LLVMInt8TypeInContext(c);
    cg->t_i16 = LLVMInt16TypeInContext(c);
    cg->t_i32 = LLVMInt32TypeInContext(c);
    cg->t_i64 = LLVMInt64TypeInContext(c);
    cg->t_f32 = LLVMFloatTypeInContext(c);
    cg->t_f64 = LLVMDoubleTypeInContext(c);
    cg->t_ptr = LLVMPointerTypeInContext(c, 0);
    cg->t_void = LLVMVoidTypeInContext(c);
    LLVMTypeRef task_args[3] = {cg->t_ptr, cg->t_i64, cg->t_i64};
    cg->t_task = LLVMFunctionType(cg->t_void, task_args, 3, 0);
    LLVMTypeRef pf_args[4] = {cg->t_ptr, cg->t_i64, cg->t_ptr, cg->t_ptr};
    cg->t_pf = LLVMFunctionType(cg->t_void, pf_args, 4, 0);
    LLVMTypeRef drv_args[4] = {cg->t_ptr, cg->t_ptr, cg->t_ptr, cg->t_i32};
    cg->t_driver = LLVMFunctionType(cg->t_void, drv_args, 4, 0);
    LLVMTypeRef call_fields[CALL_NFIELDS] = {cg->t_i64, cg->t_ptr, cg->t_ptr, cg->t_ptr, cg->t_ptr,
                                             cg->t_ptr, cg->t_ptr, cg->t_i32, cg->t_ptr, cg->t_ptr};
    cg->t_call = LLVMStructCreateNamed(c, "vitc_abi_call");
    LLVMStructSetBody(cg->t_call, call_fields, CALL_NFIELDS, 0);
    cg->t_tensor = LLVMStructCreateNamed(c, "vitc_abi_tensor");
    LLVMTypeRef tf[5] = {cg->t_ptr, cg->t_i32, cg->t_i32, LLVMArrayType2(cg->t_i64, VITC_ABI_MAX_RANK), cg->t_i32};
    LLVMStructSetBody(cg->t_tensor, tf, 5, 0);
    cg->t_model = LLVMStructCreateNamed(c, "vitc_abi_model");
    LLVMTypeRef mf[DESC_NFIELDS] = {cg->t_i32, cg->t_i32, cg->t_ptr, cg->t_ptr, cg->t_ptr, cg->t_ptr, cg->t_ptr,
                                    cg->t_ptr, cg->t_i32, cg->t_i32, cg->t_ptr, cg->t_ptr, cg->t_i64, cg->t_i64,
                                    cg->t_ptr, cg->t_i64, cg->t_ptr, cg->t_i64, cg->t_ptr, cg->t_i32, cg->t_ptr,
                                    cg->t_ptr, cg->t_i64, cg->t_i32, cg->t_ptr, cg->t_ptr, cg->t_ptr, cg->t_i64,
                                    cg->t_i32, cg->t_ptr};
    LLVMStructSetBody(cg->t_model, mf, DESC_NFIELDS, 0);
    LLVMTypeRef pf[3] = {cg->t_ptr, cg->t_ptr, cg->t_ptr};
    cg->t_part = LLVMStructTypeInContext(c, pf, 3, 0);
    return VITC_OK;
}

int cg_run_begin(cg_ctx *cg)
{
    LLVMContextRef c = cg->llc;
    LLVMTypeRef run_args[1] = {cg->t_ptr};
    cg->run_fn = LLVMAddFunction(cg->mod, "vitc_run", LLVMFunctionType(cg->t_i32, run_args, 1, 0));
    LLVMSetLinkage(cg->run_fn, LLVMInternalLinkage);
    LLVMPositionBuilderAtEnd(cg->rb, LLVMAppendBasicBlockInContext(c, cg->run_fn, "entry"));
    cg->run_call = LLVMGetParam(cg->run_fn, 0);
    LLVMValueRef f;
    f = LLVMBuildStructGEP2(cg->rb, cg->t_call, cg->run_call, CALL_BATCH, "");
    cg->run_batch = LLVMBuildLoad2(cg->rb, cg->t_i64, f, "batch");
    f = LLVMBuildStructGEP2(cg->rb, cg->t_call, cg->run_call, CALL_POOL, "");
    cg->run_pool = LLVMBuildLoad2(cg->rb, cg->t_ptr, f, "pool");
    f = LLVMBuildStructGEP2(cg->rb, cg->t_call, cg->run_call, CALL_PF, "");
    cg->run_pf = LLVMBuildLoad2(cg->rb, cg->t_ptr, f, "parallel_for");
    f = LLVMBuildStructGEP2(cg->rb, cg->t_call, cg->run_call, CALL_NTHREADS, "");
    cg->run_nthreads = LLVMBuildLoad2(cg->rb, cg->t_i32, f, "nthreads");
    f = LLVMBuildStructGEP2(cg->rb, cg->t_call, cg->run_call, CALL_PROFILE, "");
    cg->run_profile = LLVMBuildLoad2(cg->rb, cg->t_ptr, f, "profile");
    f = LLVMBuildStructGEP2(cg->rb, cg->t_call, cg->run_call, CALL_PROFILE_ARG, "");
    cg->run_profile_arg = LLVMBuildLoad2(cg->rb, cg->t_ptr, f, "profile_arg");
    cg->run_closure = LLVMBuildAlloca(cg->rb, LLVMArrayType2(cg->t_ptr, CG_MAX_KPTRS + 1), "closure");
    return VITC_OK;
}

void cg_module_free(cg_ctx *cg)
{
    if (cg->b)
        LLVMDisposeBuilder(cg->b);
    if (cg->rb)
        LLVMDisposeBuilder(cg->rb);
    if (cg->mod)
        LLVMDisposeModule(cg->mod);
    if (cg->llc)
        LLVMContextDispose(cg->llc);
    cg->b = cg->rb = NULL;
    cg->mod = NULL;
    cg->llc = NULL;
    cg_kernel_keys_free(cg);
    for (int i = 0; i < cg->nknames; i++)
        free(cg->knames[i]);
    free(cg->knames);
    cg->knames = NULL;
    cg->nknames = cg->capknames = 0;
    for (int i = 0; i < cg->nparts; i++)
        for (int k = 0; k < 3; k++)
            free(cg->parts[i].text[k]);
    free(cg->parts);
    cg->parts = NULL;
    cg->nparts = cg->capparts = 0;
    cg_blob_free(&cg->blob);
    free(cg->wshare);
    cg->wshare = NULL;
    cg->nwshare = cg->capwshare = 0;
    free(cg->variants);
    cg->variants = NULL;
    cg->nvariants_done = 0;
}

/* The kernel names and profile parts of one graph, freed for the next. */
static void free_graph_lists(cg_ctx *cg)
{
    for (int i = 0; i < cg->nknames; i++)
        free(cg->knames[i]);
    cg->nknames = 0;
    for (int i = 0; i < cg->nparts; i++)
        for (int k = 0; k < 3; k++)
            free(cg->parts[i].text[k]);
    cg->nparts = 0;
}

int cg_is_run(const cg_ctx *cg, LLVMValueRef fn)
{
    if (fn == cg->run_fn)
        return 1;
    for (int i = 0; i < cg->nvariants_done; i++)
        if (cg->variants[i].run_fn == fn)
            return 1;
    return 0;
}

/* ---- kernels and launches ---- */

static LLVMAttributeRef enum_attr(cg_ctx *cg, const char *name)
{
    return LLVMCreateEnumAttribute(cg->llc, LLVMGetEnumAttributeKindForName(name, strlen(name)), 0);
}

struct cg_kkey {
    char *key;
    LLVMValueRef fn;
};

LLVMValueRef cg_kernel_find(cg_ctx *cg, const char *key, const char *label)
{
    if (!key || !*key || *key == '!')
        return NULL;
    for (int i = 0; i < cg->nkkeys; i++)
        if (strcmp(cg->kkeys[i].key, key) == 0) {
            size_t len;
            const char *name = LLVMGetValueName2(cg->kkeys[i].fn, &len);
            cg_note_kernel(cg, name, label);
            return cg->kkeys[i].fn;
        }
    return NULL;
}

static void kernel_remember(cg_ctx *cg, const char *key, LLVMValueRef fn)
{
    if (!key || !*key || *key == '!')
        return;
    if (cg->nkkeys == cg->capkkeys) {
        int cap = cg->capkkeys ? 2 * cg->capkkeys : 32;
        struct cg_kkey *k = realloc(cg->kkeys, sizeof *k * (size_t)cap);
        if (!k)
            return; /* not shared: still correct */
        cg->kkeys = k;
        cg->capkkeys = cap;
    }
    char *copy = strdup(key);
    if (!copy)
        return;
    cg->kkeys[cg->nkkeys++] = (struct cg_kkey){copy, fn};
}

void cg_kernel_keys_free(cg_ctx *cg)
{
    for (int i = 0; i < cg->nkkeys; i++)
        free(cg->kkeys[i].key);
    free(cg->kkeys);
    cg->kkeys = NULL;
    cg->nkkeys = cg->capkkeys = 0;
}

void cg_key_add(char *key, size_t n, const char *fmt, ...)
{
    if (key[0] == '!')
        return;
    size_t len = strlen(key);
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(key + len, n - len, fmt, ap);
    va_end(ap);
    if (w < 0 || (size_t)w >= n - len)
        snprintf(key, n, "!"); /* too long: this kernel is not shared */
}

void cg_key_poly(char *key, size_t n, cg_poly p)
{
    cg_key_add(key, n, "(%lld,%lld,%lld,%lld%s)", (long long)p.c[0], (long long)p.c[1], (long long)p.c[2],
               (long long)p.c[3], p.bad ? "!" : "");
}

LLVMValueRef cg_kernel_begin(cg_ctx *cg, const char *label, int nptrs)
{
    char name[64];
    snprintf(name, sizeof name, "vitc_k%d", cg->nfuncs++);
    cg->fn = LLVMAddFunction(cg->mod, name, cg->t_task);
    LLVMSetLinkage(cg->fn, LLVMInternalLinkage);
    /* run() calls each kernel once: inlining them all there would only grow
     * run() and the compile time, the code is reached through parallel_for too */
    LLVMAddAttributeAtIndex(cg->fn, LLVMAttributeFunctionIndex, enum_attr(cg, "noinline"));
    LLVMAddAttributeAtIndex(cg->fn, LLVMAttributeFunctionIndex, enum_attr(cg, "nounwind"));
    if (cg->target.vec_floats == 16)
        LLVMAddAttributeAtIndex(cg->fn, LLVMAttributeFunctionIndex,
                                LLVMCreateStringAttribute(cg->llc, "prefer-vector-width", 19, "512", 3));
    cg->fn_entry = LLVMAppendBasicBlockInContext(cg->llc, cg->fn, "entry");
    LLVMPositionBuilderAtEnd(cg->b, cg->fn_entry);
    LLVMValueRef clo = LLVMGetParam(cg->fn, 0);
    cg->fn_call = LLVMBuildLoad2(cg->b, cg->t_ptr, clo, "call");
    for (int i = 0; i < nptrs && i < CG_MAX_KPTRS; i++)
        cg->fn_ptr[i] = LLVMBuildLoad2(cg->b, cg->t_ptr, cg_gep(cg, cg->b, cg->t_ptr, clo, cg_i64(cg, i + 1)), "");
    if (nptrs > CG_MAX_KPTRS)
        cg_fail(cg, VITC_INTERNAL, -1, "a kernel with %d tensors", nptrs);
    LLVMValueRef f = LLVMBuildStructGEP2(cg->b, cg->t_call, cg->fn_call, CALL_BATCH, "");
    cg->fn_batch = LLVMBuildLoad2(cg->b, cg->t_i64, f, "batch");
    cg_note_kernel(cg, name, label);
    return cg->fn;
}

void cg_kernel_end(cg_ctx *cg, const char *key)
{
    LLVMBuildRetVoid(cg->b);
    kernel_remember(cg, key, cg->fn);
}

void cg_note_kernel(cg_ctx *cg, const char *fname, const char *label)
{
    if (cg->nknames == cg->capknames) {
        int cap = cg->capknames ? 2 * cg->capknames : 64;
        char **k = realloc(cg->knames, sizeof(char *) * (size_t)cap);
        if (!k)
            return; /* the list is informative only */
        cg->knames = k;
        cg->capknames = cap;
    }
    size_t len = strlen(fname) + strlen(label) + 2;
    char *s = malloc(len);
    if (s) {
        snprintf(s, len, "%s %s", fname, label);
        cg->knames[cg->nknames++] = s;
    }
}

/* "fn1,fn2" from the kernel names "FUNCTION LABEL..." noted from first on. */
static char *part_kernels(const cg_ctx *cg, int first)
{
    size_t len = 1;
    for (int i = first; i < cg->nknames; i++)
        len += strcspn(cg->knames[i], " ") + 1;
    char *s = malloc(len);
    if (!s)
        return NULL;
    size_t k = 0;
    for (int i = first; i < cg->nknames; i++) {
        size_t n = strcspn(cg->knames[i], " ");
        int seen = 0;
        for (int j = first; j < i && !seen; j++)
            seen = strcspn(cg->knames[j], " ") == n && strncmp(cg->knames[j], cg->knames[i], n) == 0;
        if (seen)
            continue;
        if (k)
            s[k++] = ',';
        memcpy(s + k, cg->knames[i], n);
        k += n;
    }
    s[k] = 0;
    return s;
}

void cg_profile_mark(cg_ctx *cg, int node, int first_kname)
{
    if (cg->nparts == cg->capparts) {
        int cap = cg->capparts ? 2 * cg->capparts : 64;
        void *p = realloc(cg->parts, sizeof *cg->parts * (size_t)cap);
        if (!p) {
            cg_fail(cg, VITC_INTERNAL, node, "out of memory");
            return;
        }
        cg->parts = p;
        cg->capparts = cap;
    }
    const ir_node *n = node >= 0 ? &cg->g->nodes[node] : NULL; /* NULL: the copies into graph outputs */
    const char *name = !n ? "graph outputs" : n->name && *n->name ? n->name : "(unnamed)";
    const char *types = !n ? "copies" : n->op_type && *n->op_type ? n->op_type : ir_op_name(n->op);
    size_t len = strlen(name) + strlen(types) + 4;
    char *source = malloc(len), *op = strdup(n ? ir_op_name(n->op) : "Copy"), *kernels = part_kernels(cg, first_kname);
    if (source)
        snprintf(source, len, "%s (%s)", name, types);
    int i = cg->nparts++;
    cg->parts[i].text[0] = kernels;
    cg->parts[i].text[1] = op;
    cg->parts[i].text[2] = source;
    if (!kernels || !op || !source) {
        cg_fail(cg, VITC_INTERNAL, node, "out of memory");
        return;
    }
    /* if (call->profile) call->profile(call->profile_arg, i); */
    LLVMBuilderRef b = cg->rb;
    LLVMBasicBlockRef on = LLVMAppendBasicBlockInContext(cg->llc, cg->run_fn, "profile");
    LLVMBasicBlockRef next = LLVMAppendBasicBlockInContext(cg->llc, cg->run_fn, "next");
    LLVMBuildCondBr(b, LLVMBuildIsNotNull(b, cg->run_profile, ""), on, next);
    LLVMPositionBuilderAtEnd(b, on);
    LLVMTypeRef args[2] = {cg->t_ptr, cg->t_i32};
    LLVMValueRef vals[2] = {cg->run_profile_arg, LLVMConstInt(cg->t_i32, (unsigned)i, 0)};
    LLVMBuildCall2(b, LLVMFunctionType(cg->t_void, args, 2, 0), cg->run_profile, vals, 2, "");
    LLVMBuildBr(b, next);
    LLVMPositionBuilderAtEnd(b, next);
}

void cg_launch(cg_ctx *cg, LLVMValueRef fn, const LLVMValueRef *ptrs, int nptrs, cg_poly nitems, cg_poly work)
{
    LLVMBuilderRef b = cg->rb;
    LLVMValueRef clo = cg->run_closure;
    LLVMBuildStore(b, cg->run_call, clo);
    for (int i = 0; i < nptrs && i < CG_MAX_KPTRS; i++)
        LLVMBuildStore(b, ptrs[i], cg_gep(cg, b, cg->t_ptr, clo, cg_i64(cg, i + 1)));
    LLVMValueRef n = cg_poly_value(cg, b, cg->run_batch, nitems);
    LLVMValueRef serial_args[3] = {clo, cg_i64(cg, 0), n};
    int64_t wk, nk;
    int small = cg_poly_is_const(work, &wk) && wk < CG_PARALLEL_MIN_WORK;
    if (small || (cg_poly_is_const(nitems, &nk) && nk <= 1)) {
        LLVMBuildCall2(b, cg->t_task, fn, serial_args, 3, "");
        return;
    }
    LLVMValueRef w = cg_poly_value(cg, b, cg->run_batch, work);
    LLVMValueRef par = LLVMBuildAnd(
        b, LLVMBuildICmp(b, LLVMIntSGT, cg->run_nthreads, LLVMConstInt(cg->t_i32, 1, 0), ""),
        LLVMBuildAnd(b, LLVMBuildICmp(b, LLVMIntSGE, w, cg_i64(cg, CG_PARALLEL_MIN_WORK), ""),
                     LLVMBuildICmp(b, LLVMIntSGT, n, cg_i64(cg, 1), ""), ""),
        "parallel");
    LLVMBasicBlockRef bp = LLVMAppendBasicBlockInContext(cg->llc, cg->run_fn, "par");
    LLVMBasicBlockRef bs = LLVMAppendBasicBlockInContext(cg->llc, cg->run_fn, "ser");
    LLVMBasicBlockRef bj = LLVMAppendBasicBlockInContext(cg->llc, cg->run_fn, "next");
    LLVMBuildCondBr(b, par, bp, bs);
    LLVMPositionBuilderAtEnd(b, bp);
    LLVMValueRef pargs[4] = {cg->run_pool, n, fn, clo};
    LLVMBuildCall2(b, cg->t_pf, cg->run_pf, pargs, 4, "");
    LLVMBuildBr(b, bj);
    LLVMPositionBuilderAtEnd(b, bs);
    LLVMBuildCall2(b, cg->t_task, fn, serial_args, 3, "");
    LLVMBuildBr(b, bj);
    LLVMPositionBuilderAtEnd(b, bj);
}

void cg_call_driver(cg_ctx *cg, LLVMValueRef driver, LLVMValueRef *fields, int nfields)
{
    LLVMTypeRef types[16];
    for (int i = 0; i < nfields && i < 16; i++)
        types[i] = LLVMTypeOf(fields[i]);
    LLVMTypeRef st = LLVMStructTypeInContext(cg->llc, types, (unsigned)nfields, 0);
    /* the args struct lives in run()'s entry block, one per call site */
    LLVMBasicBlockRef cur = LLVMGetInsertBlock(cg->rb);
    LLVMBasicBlockRef entry = LLVMGetEntryBasicBlock(cg->run_fn);
    LLVMValueRef first = LLVMGetFirstInstruction(entry);
    if (first)
        LLVMPositionBuilderBefore(cg->rb, first);
    else
        LLVMPositionBuilderAtEnd(cg->rb, entry);
    LLVMValueRef args = LLVMBuildAlloca(cg->rb, st, "args");
    LLVMPositionBuilderAtEnd(cg->rb, cur);
    for (int i = 0; i < nfields; i++)
        LLVMBuildStore(cg->rb, fields[i], LLVMBuildStructGEP2(cg->rb, st, args, (unsigned)i, ""));
    LLVMValueRef cargs[4] = {args, cg->run_pool, cg->run_pf, cg->run_nthreads};
    LLVMBuildCall2(cg->rb, cg->t_driver, driver, cargs, 4, "");
}

/* ---- values, pointers, loops ---- */

LLVMValueRef cg_poly_value(cg_ctx *cg, LLVMBuilderRef b, LLVMValueRef batch, cg_poly p)
{
    LLVMValueRef r = cg_i64(cg, p.c[0]), pw = NULL;
    for (int e = 1; e <= CG_POLY_DEG; e++) {
        pw = pw ? LLVMBuildMul(b, pw, batch, "") : batch;
        if (p.c[e] != 0)
            r = LLVMBuildAdd(b, r, LLVMBuildMul(b, cg_i64(cg, p.c[e]), pw, ""), "");
    }
    return r;
}

LLVMValueRef cg_gep(cg_ctx *cg, LLVMBuilderRef b, LLVMTypeRef t, LLVMValueRef base, LLVMValueRef idx)
{
    (void)cg;
    return LLVMBuildInBoundsGEP2(b, t, base, &idx, 1, "");
}

static LLVMValueRef call_field(cg_ctx *cg, LLVMBuilderRef b, LLVMValueRef call, int field)
{
    LLVMValueRef f = LLVMBuildStructGEP2(b, cg->t_call, call, (unsigned)field, "");
    return LLVMBuildLoad2(b, cg->t_ptr, f, "");
}

LLVMValueRef cg_value_ptr(cg_ctx *cg, LLVMBuilderRef b, LLVMValueRef call, int v)
{
    v = cg_root(cg, v);
    const cg_loc *l = &cg->loc[v];
    switch (l->kind) {
    case CG_LOC_INPUT:
    case CG_LOC_OUTPUT: {
        LLVMValueRef arr = call_field(cg, b, call, l->kind == CG_LOC_INPUT ? CALL_INPUTS : CALL_OUTPUTS);
        return LLVMBuildLoad2(b, cg->t_ptr, cg_gep(cg, b, cg->t_ptr, arr, cg_i64(cg, l->index)), "");
    }
    case CG_LOC_WEIGHTS: {
        int64_t off = cg_weights_of(cg, v);
        return cg_weights_ptr(cg, b, call, off < 0 ? 0 : off);
    }
    case CG_LOC_WORKSPACE:
        return cg_gep(cg, b, cg->t_i8, call_field(cg, b, call, CALL_WORKSPACE), cg_i64(cg, l->offset));
    case CG_LOC_NONE:
        break;
    }
    cg_fail(cg, VITC_INTERNAL, cg->g->values[v].producer, "value '%s' has no storage", cg->g->values[v].name);
    return LLVMConstNull(cg->t_ptr);
}

LLVMValueRef cg_weights_ptr(cg_ctx *cg, LLVMBuilderRef b, LLVMValueRef call, int64_t off)
{
    return cg_gep(cg, b, cg->t_i8, call_field(cg, b, call, CALL_WEIGHTS), cg_i64(cg, off));
}

LLVMValueRef cg_scratch_ptr(cg_ctx *cg, LLVMBuilderRef b, LLVMValueRef call, int node, int64_t byte_off)
{
    if (cg->scratch_off[node] < 0) {
        cg_fail(cg, VITC_INTERNAL, node, "has no scratch memory planned");
        return LLVMConstNull(cg->t_ptr);
    }
    return cg_gep(cg, b, cg->t_i8, call_field(cg, b, call, CALL_WORKSPACE),
                  cg_i64(cg, cg->scratch_off[node] + byte_off));
}

LLVMValueRef cg_out_slot_ptr(cg_ctx *cg, LLVMBuilderRef b, LLVMValueRef call, int k)
{
    LLVMValueRef arr = call_field(cg, b, call, CALL_OUTPUTS);
    return LLVMBuildLoad2(b, cg->t_ptr, cg_gep(cg, b, cg->t_ptr, arr, cg_i64(cg, k)), "");
}

void cg_loop_begin(cg_ctx *cg, LLVMBuilderRef b, cg_loop *l, LLVMValueRef from, LLVMValueRef to)
{
    LLVMValueRef fn = LLVMGetBasicBlockParent(LLVMGetInsertBlock(b));
    LLVMBasicBlockRef pre = LLVMGetInsertBlock(b);
    l->head = LLVMAppendBasicBlockInContext(cg->llc, fn, "loop");
    l->body = LLVMAppendBasicBlockInContext(cg->llc, fn, "body");
    l->exit = LLVMAppendBasicBlockInContext(cg->llc, fn, "done");
    LLVMBuildBr(b, l->head);
    LLVMPositionBuilderAtEnd(b, l->head);
    l->iv = LLVMBuildPhi(b, cg->t_i64, "i");
    LLVMAddIncoming(l->iv, &from, &pre, 1);
    LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSLT, l->iv, to, ""), l->body, l->exit);
    LLVMPositionBuilderAtEnd(b, l->body);
}

void cg_loop_end(cg_ctx *cg, LLVMBuilderRef b, cg_loop *l)
{
    LLVMValueRef next = LLVMBuildAdd(b, l->iv, cg_i64(cg, 1), "");
    LLVMSetNSW(next, 1);
    LLVMBasicBlockRef cur = LLVMGetInsertBlock(b);
    LLVMAddIncoming(l->iv, &next, &cur, 1);
    LLVMBuildBr(b, l->head);
    LLVMPositionBuilderAtEnd(b, l->exit);
}

LLVMValueRef cg_alloca(cg_ctx *cg, LLVMTypeRef t, const char *name)
{
    LLVMBuilderRef tmp = LLVMCreateBuilderInContext(cg->llc);
    LLVMValueRef first = LLVMGetFirstInstruction(cg->fn_entry);
    if (first)
        LLVMPositionBuilderBefore(tmp, first);
    else
        LLVMPositionBuilderAtEnd(tmp, cg->fn_entry);
    LLVMValueRef a = LLVMBuildAlloca(tmp, t, name);
    LLVMDisposeBuilder(tmp);
    return a;
}

LLVMValueRef cg_intrinsic(cg_ctx *cg, LLVMBuilderRef b, const char *name, LLVMTypeRef t, LLVMValueRef *args, int n)
{
    unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
    LLVMValueRef f = LLVMGetIntrinsicDeclaration(cg->mod, id, &t, 1);
    LLVMTypeRef ft = LLVMGlobalGetValueType(f);
    return LLVMBuildCall2(b, ft, f, args, (unsigned)n, "");
}

LLVMValueRef cg_libm(cg_ctx *cg, LLVMBuilderRef b, const char *name, LLVMTypeRef t, LLVMValueRef *args, int n)
{
    LLVMTypeRef params[2] = {t, t};
    LLVMTypeRef ft = LLVMFunctionType(t, params, (unsigned)n, 0);
    LLVMValueRef f = LLVMGetNamedFunction(cg->mod, name);
    if (!f) {
        f = LLVMAddFunction(cg->mod, name, ft);
        LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex, enum_attr(cg, "nounwind"));
    }
    return LLVMBuildCall2(b, ft, f, args, (unsigned)n, "");
}

LLVMValueRef cg_fadd_reassoc(LLVMBuilderRef b, LLVMValueRef x, LLVMValueRef y)
{
    LLVMValueRef r = LLVMBuildFAdd(b, x, y, "");
    LLVMSetFastMathFlags(r, LLVMFastMathAllowReassoc);
    return r;
}

/* ---- the weights blob ---- */

int64_t cg_weights_reserve(cg_ctx *cg, size_t n, void **p) { return cg_blob_reserve(&cg->blob, n, p); }

int64_t cg_weights_add(cg_ctx *cg, const void *data, size_t n)
{
    int64_t off = cg_blob_add(&cg->blob, data, n);
    return off < 0 ? off : cg_weights_share(cg, off, n);
}

int64_t cg_weights_share(cg_ctx *cg, int64_t off, size_t n)
{
    if (cg->nvariants < 2 || off < 0 || n == 0)
        return off;
    const unsigned char *p = cg->blob.data + off;
    uint64_t h = vitc_model_hash(p, n);
    for (int i = 0; i < cg->nwshare; i++) {
        const struct cg_wshare *w = &cg->wshare[i];
        if (w->hash == h && w->n == n && w->off != off && memcmp(cg->blob.data + w->off, p, n) == 0) {
            if ((size_t)off + n == cg->blob.len)
                cg->blob.len = (size_t)off; /* the copy was the blob's last bytes: gone */
            return w->off;
        }
    }
    if (cg->nwshare == cg->capwshare) {
        int cap = cg->capwshare ? 2 * cg->capwshare : 256;
        void *grown = realloc(cg->wshare, sizeof *cg->wshare * (size_t)cap);
        if (!grown)
            return off; /* stored twice: only bigger */
        cg->wshare = grown;
        cg->capwshare = cap;
    }
    cg->wshare[cg->nwshare++] = (struct cg_wshare){.hash = h, .off = off, .n = n};
    return off;
}

int64_t cg_weights_of(cg_ctx *cg, int v)
{
    cg_loc *l = &cg->loc[v];
    if (l->offset >= 0)
        return l->offset;
    const ir_value *val = &cg->g->values[v];
    if (val->kind != IR_VAL_CONST || !ir_value_is_plain_const(cg->g, v)) {
        cg_fail(cg, VITC_BAD_INPUT, val->producer, "constant '%s' depends on the batch at run time", val->name);
        return -1;
    }
    l->offset = cg_weights_add(cg, val->data, val->nbytes);
    if (l->offset < 0)
        cg_fail(cg, VITC_INTERNAL, -1, "out of memory for the weights (%zu bytes)", cg->blob.len);
    return l->offset;
}

/* ---- the descriptor ---- */

static LLVMValueRef cstr(cg_ctx *cg, const char *s)
{
    if (!s)
        return LLVMConstNull(cg->t_ptr);
    LLVMValueRef init = LLVMConstStringInContext2(cg->llc, s, strlen(s), 0);
    LLVMValueRef gv = LLVMAddGlobal(cg->mod, LLVMTypeOf(init), ".str");
    LLVMSetInitializer(gv, init);
    LLVMSetGlobalConstant(gv, 1);
    LLVMSetLinkage(gv, LLVMPrivateLinkage);
    LLVMSetUnnamedAddress(gv, LLVMGlobalUnnamedAddr);
    return gv;
}

static LLVMValueRef private_const(cg_ctx *cg, LLVMValueRef init, const char *name, unsigned align)
{
    LLVMValueRef gv = LLVMAddGlobal(cg->mod, LLVMTypeOf(init), name);
    LLVMSetInitializer(gv, init);
    LLVMSetGlobalConstant(gv, 1);
    LLVMSetLinkage(gv, LLVMPrivateLinkage);
    if (align)
        LLVMSetAlignment(gv, align);
    return gv;
}

/* The vitc_abi_tensor array for the graph's inputs or outputs. */
static LLVMValueRef tensor_array(cg_ctx *cg, const int *vals, int n, const char *name)
{
    LLVMTypeRef tt = cg->t_tensor;
    if (n == 0)
        return LLVMConstNull(cg->t_ptr);
    LLVMValueRef *elems = calloc((size_t)n, sizeof *elems);
    if (!elems)
        return NULL;
    for (int i = 0; i < n; i++) {
        const ir_value *v = &cg->g->values[vals[i]];
        LLVMValueRef dims[VITC_ABI_MAX_RANK];
        uint32_t mask = 0;
        for (int k = 0; k < VITC_ABI_MAX_RANK; k++) {
            int64_t d = k < v->rank ? v->dims[k].k : 0;
            if (k < v->rank && v->dims[k].e == 1)
                mask |= 1u << k;
            dims[k] = cg_i64(cg, d);
        }
        LLVMValueRef f[5] = {cstr(cg, v->name), LLVMConstInt(cg->t_i32, (unsigned)ir_dtype_onnx_code(v->dtype), 0),
                             LLVMConstInt(cg->t_i32, (unsigned)v->rank, 0),
                             LLVMConstArray2(cg->t_i64, dims, VITC_ABI_MAX_RANK), LLVMConstInt(cg->t_i32, mask, 0)};
        elems[i] = LLVMConstNamedStruct(tt, f, 5);
    }
    LLVMValueRef arr = LLVMConstArray2(tt, elems, (uint64_t)n);
    free(elems);
    return private_const(cg, arr, name, 8);
}

int cg_module_end_graph(cg_ctx *cg)
{
    LLVMBuildRet(cg->rb, LLVMConstInt(cg->t_i32, 0, 0));
    const ir_graph *g = cg->g;
    if (cg_check_io(g, cg->d))
        return cg->d->status;
    LLVMValueRef *pv = calloc((size_t)cg->nparts + 1, sizeof *pv);
    LLVMValueRef *names = calloc((size_t)cg->nknames + 1, sizeof *names);
    struct cg_variant *vs = realloc(cg->variants, sizeof *vs * (size_t)(cg->nvariants_done + 1));
    if (vs)
        cg->variants = vs;
    if (!pv || !names || !vs) {
        free(pv), free(names);
        return cg_fail(cg, VITC_INTERNAL, -1, "out of memory");
    }
    for (int i = 0; i < cg->nparts; i++) {
        LLVMValueRef t[3] = {cstr(cg, cg->parts[i].text[0]), cstr(cg, cg->parts[i].text[1]),
                             cstr(cg, cg->parts[i].text[2])};
        pv[i] = LLVMConstStructInContext(cg->llc, t, 3, 0);
    }
    for (int i = 0; i < cg->nknames; i++)
        names[i] = cstr(cg, cg->knames[i]);
    struct cg_variant *v = &cg->variants[cg->nvariants_done];
    *v = (struct cg_variant){
        .run_fn = cg->run_fn,
        .ins = tensor_array(cg, g->inputs, g->ninputs, "vitc_inputs"),
        .outs = tensor_array(cg, g->outputs, g->noutputs, "vitc_outputs"),
        .knames = cg->nknames
            ? private_const(cg, LLVMConstArray2(cg->t_ptr, names, (uint64_t)cg->nknames), "vitc_kernel_names", 8)
            : LLVMConstNull(cg->t_ptr),
        .parts = cg->nparts ? private_const(cg, LLVMConstArray2(cg->t_part, pv, (uint64_t)cg->nparts), "vitc_parts", 8)
                            : LLVMConstNull(cg->t_ptr),
        .ninputs = g->ninputs,
        .noutputs = g->noutputs,
        .nknames = cg->nknames,
        .nparts = cg->nparts,
        .max_batch = cg->max_batch,
        .fixed_batch = g->fixed_batch,
        .workspace_bytes = cg->workspace_bytes ? cg->workspace_bytes : 64,
        .source_hash = g->source_hash,
    };
    free(pv), free(names);
    if (!v->ins || !v->outs)
        return cg_fail(cg, VITC_INTERNAL, -1, "out of memory");
    cg->nvariants_done++;
    cg->run_fn = NULL;
    free_graph_lists(cg);
    return cg->d->status;
}

int cg_module_finish(cg_ctx *cg)
{
    LLVMTargetDataRef td = LLVMGetModuleDataLayout(cg->mod);
    if (LLVMABISizeOfType(td, cg->t_model) != sizeof(vitc_abi_model) ||
        LLVMABISizeOfType(td, cg->t_tensor) != sizeof(vitc_abi_tensor) ||
        LLVMABISizeOfType(td, cg->t_call) != sizeof(vitc_abi_call) ||
        LLVMABISizeOfType(td, cg->t_part) != sizeof(vitc_abi_part))
        return cg_fail(cg, VITC_INTERNAL, -1, "the descriptor's layout for %s differs from runtime/abi.h", cg->triple);
    int nv = cg->nvariants_done;
    if (nv < 1)
        return cg_fail(cg, VITC_INTERNAL, -1, "no graph was compiled");

    LLVMValueRef weights = LLVMConstNull(cg->t_ptr), wfile = LLVMConstNull(cg->t_ptr);
    if (cg->opt->external_weights) {
        char wname[4096];
        cg_weights_file_name(cg->opt->output, wname, sizeof wname);
        wfile = cstr(cg, wname);
    } else if (cg->blob.len > 0 && cg_elf_machine(cg->triple)) {
        /* defined by the object codegen/elf_obj.c writes, joined at link time */
        weights = LLVMAddGlobal(cg->mod, LLVMArrayType2(cg->t_i8, cg->blob.len), CG_WEIGHTS_SYMBOL);
        LLVMSetGlobalConstant(weights, 1);
        LLVMSetLinkage(weights, LLVMExternalLinkage);
        LLVMSetVisibility(weights, LLVMHiddenVisibility);
        LLVMSetAlignment(weights, 64);
        cg->blob_object = 1;
    } else if (cg->blob.len > 0) {
        LLVMValueRef init = LLVMConstStringInContext2(cg->llc, (const char *)cg->blob.data, cg->blob.len, 1);
        weights = private_const(cg, init, "vitc_weights", 64);
    }
    char *knobs = cg_knobs_recorded(&cg->knobs, "cpu");
    LLVMValueRef *desc = calloc((size_t)nv, sizeof *desc);
    if (!knobs || !desc) {
        free(knobs), free(desc);
        return cg_fail(cg, VITC_INTERNAL, -1, "out of memory");
    }
    /* the exported descriptor, variant 0, lists every variant, itself first */
    desc[0] = LLVMAddGlobal(cg->mod, cg->t_model, VITC_ABI_SYMBOL);
    for (int i = 1; i < nv; i++)
        desc[i] = LLVMAddGlobal(cg->mod, cg->t_model, "vitc_variant");
    LLVMValueRef list = nv > 1 ? private_const(cg, LLVMConstArray2(cg->t_ptr, desc, (uint64_t)nv), "vitc_variants", 8)
                               : LLVMConstNull(cg->t_ptr);
    /* checked where the weights are a file of their own; embedded ones are the .so's
     * own bytes, and hashing hundreds of MB byte by byte costs a good part of a second */
    uint64_t wsum = cg->opt->external_weights ? vitc_fnv1a(VITC_FNV1A_INIT, cg->blob.data, cg->blob.len) : 0;
    for (int i = 0; i < nv; i++) {
        const struct cg_variant *v = &cg->variants[i];
        LLVMValueRef f[DESC_NFIELDS] = {
            LLVMConstInt(cg->t_i32, VITC_ABI_VERSION, 0),
            LLVMConstInt(cg->t_i32, sizeof(vitc_abi_model), 0),
            cstr(cg, VITC_VERSION),
            cstr(cg, "cpu"),
            cstr(cg, cg->triple),
            cstr(cg, cg->cpu),
            cstr(cg, cg->features),
            cstr(cg, cg_base_name(cg->opt->source)),
            LLVMConstInt(cg->t_i32, (unsigned)v->ninputs, 0),
            LLVMConstInt(cg->t_i32, (unsigned)v->noutputs, 0),
            v->ins,
            v->outs,
            cg_i64(cg, v->max_batch),
            cg_i64(cg, (int64_t)v->workspace_bytes),
            weights,
            cg_i64(cg, (int64_t)cg->blob.len),
            wfile,
            LLVMConstInt(cg->t_i64, wsum, 0),
            v->run_fn,
            LLVMConstInt(cg->t_i32, (unsigned)v->nknames, 0),
            v->knames,
            LLVMConstNull(cg->t_ptr), /* cuda_plan */
            LLVMConstInt(cg->t_i64, v->source_hash, 0),
            LLVMConstInt(cg->t_i32, (unsigned)v->nparts, 0),
            v->parts,
            cstr(cg, cg_target_bf16(&cg->target)                                  ? "bf16"
                     : cg->opt->precision && strcmp(cg->opt->precision, "int8") == 0 ? "int8"
                                                                                      : "fp32"),
            cstr(cg, knobs),
            cg_i64(cg, v->fixed_batch),
            LLVMConstInt(cg->t_i32, (unsigned)(i == 0 && nv > 1 ? nv : 0), 0),
            i == 0 ? list : LLVMConstNull(cg->t_ptr),
        };
        LLVMSetInitializer(desc[i], LLVMConstNamedStruct(cg->t_model, f, DESC_NFIELDS));
        LLVMSetGlobalConstant(desc[i], 1);
        if (i == 0) {
            LLVMSetLinkage(desc[i], LLVMExternalLinkage);
            LLVMSetVisibility(desc[i], LLVMDefaultVisibility);
        } else {
            LLVMSetLinkage(desc[i], LLVMPrivateLinkage);
            LLVMSetAlignment(desc[i], 8);
        }
    }
    free(knobs), free(desc);
    return cg->d->status;
}
