/* kern_ir.c: IR-building helpers shared by the kernel generators (see
 * kern_ir.h).  Everything here emits at the builder's current position. */
#include "codegen/llvm/kern_ir.h"

#include <stdio.h>
#include <string.h>

int kern_init(kern *k, LLVMModuleRef mod, const cg_target *t)
{
    memset(k, 0, sizeof *k);
    if (!mod || !t || (t->vec_floats != 4 && t->vec_floats != 8 && t->vec_floats != 16) || t->nregs < 16)
        return -1;
    k->mod = mod;
    k->ctx = LLVMGetModuleContext(mod);
    k->b = LLVMCreateBuilderInContext(k->ctx);
    if (!k->b)
        return -1;
    k->t = *t;
    k->vf = t->vec_floats;
    k->f32 = LLVMFloatTypeInContext(k->ctx);
    k->i1 = LLVMInt1TypeInContext(k->ctx);
    k->i32 = LLVMInt32TypeInContext(k->ctx);
    k->i64 = LLVMInt64TypeInContext(k->ctx);
    k->ptr = LLVMPointerTypeInContext(k->ctx, 0);
    k->voidt = LLVMVoidTypeInContext(k->ctx);
    k->vty = LLVMVectorType(k->f32, (unsigned)k->vf);
    k->vmask = LLVMVectorType(k->i1, (unsigned)k->vf);
    snprintf(k->tag, sizeof k->tag, "v%dr%df%d", k->vf, t->nregs, t->has_fma ? 1 : 0);
    return 0;
}

void kern_dispose(kern *k)
{
    if (k->b)
        LLVMDisposeBuilder(k->b);
    k->b = NULL;
}

/* ---- functions ---- */

static void add_fn_attr(kern *k, LLVMValueRef fn, const char *name)
{
    unsigned kind = LLVMGetEnumAttributeKindForName(name, strlen(name));
    if (kind)
        LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(k->ctx, kind, 0));
}

LLVMValueRef kern_func(kern *k, const char *name, LLVMTypeRef fnty, int internal)
{
    LLVMValueRef fn = LLVMAddFunction(k->mod, name, fnty);
    if (internal)
        LLVMSetLinkage(fn, LLVMInternalLinkage);
    add_fn_attr(k, fn, "nounwind");
    LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(k->ctx, fn, "entry");
    LLVMPositionBuilderAtEnd(k->b, entry);
    return fn;
}

LLVMBasicBlockRef kern_block(kern *k, const char *name)
{
    LLVMValueRef fn = LLVMGetBasicBlockParent(LLVMGetInsertBlock(k->b));
    return LLVMAppendBasicBlockInContext(k->ctx, fn, name);
}

LLVMTypeRef kern_driver_type(kern *k)
{
    LLVMTypeRef params[4] = {k->ptr, k->ptr, k->ptr, k->i32};
    return LLVMFunctionType(k->voidt, params, 4, 0);
}

LLVMTypeRef kern_task_type(kern *k)
{
    LLVMTypeRef params[3] = {k->ptr, k->i64, k->i64};
    return LLVMFunctionType(k->voidt, params, 3, 0);
}

void kern_call_pf(kern *k, LLVMValueRef pf, LLVMValueRef pool, LLVMValueRef n, LLVMValueRef task,
                  LLVMValueRef arg)
{
    LLVMTypeRef params[4] = {k->ptr, k->i64, k->ptr, k->ptr};
    LLVMTypeRef pfty = LLVMFunctionType(k->voidt, params, 4, 0);
    LLVMValueRef args[4] = {pool, n, task, arg};
    LLVMBuildCall2(k->b, pfty, pf, args, 4, "");
}

LLVMTypeRef kern_args_type(kern *k, int nptr)
{
    LLVMTypeRef f[8]; /* the kernels pass at most 5 pointers */
    for (int i = 0; i < nptr; i++)
        f[i] = k->ptr;
    f[nptr] = k->i64;
    return LLVMStructTypeInContext(k->ctx, f, (unsigned)nptr + 1, 0);
}

LLVMTypeRef kern_closure_type(kern *k)
{
    LLVMTypeRef c[4] = {k->ptr, k->i64, k->i64, k->i64};
    return LLVMStructTypeInContext(k->ctx, c, 4, 0);
}

LLVMValueRef kern_driver_open(kern *k, const char *name, LLVMTypeRef argsty, unsigned count_field,
                              LLVMValueRef *count, LLVMValueRef *nthreads)
{
    LLVMBuilderRef b = k->b;
    LLVMValueRef fn = kern_func(k, name, kern_driver_type(k), 0);
    *count = kern_field(k, argsty, LLVMGetParam(fn, 0), count_field, k->i64);
    LLVMBasicBlockRef brun = kern_block(k, "run"), bret = kern_block(k, "ret");
    LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSGT, *count, kern_i64(k, 0), ""), brun, bret);
    LLVMPositionBuilderAtEnd(b, bret);
    LLVMBuildRetVoid(b);
    LLVMPositionBuilderAtEnd(b, brun);
    *nthreads = kern_max(k, LLVMBuildSExt(b, LLVMGetParam(fn, 3), k->i64, ""), kern_i64(k, 1));
    return fn;
}

void kern_driver_close(kern *k, LLVMValueRef fn, LLVMValueRef nblk, LLVMValueRef blk, LLVMValueRef aux,
                       LLVMValueRef ntasks, LLVMValueRef task)
{
    LLVMBuilderRef b = k->b;
    LLVMTypeRef cloty = kern_closure_type(k);
    LLVMValueRef clo = LLVMBuildAlloca(b, cloty, "closure");
    LLVMBuildStore(b, LLVMGetParam(fn, 0), LLVMBuildStructGEP2(b, cloty, clo, 0, ""));
    LLVMBuildStore(b, nblk, LLVMBuildStructGEP2(b, cloty, clo, 1, ""));
    LLVMBuildStore(b, blk, LLVMBuildStructGEP2(b, cloty, clo, 2, ""));
    LLVMBuildStore(b, aux ? aux : kern_i64(k, 0), LLVMBuildStructGEP2(b, cloty, clo, 3, ""));
    kern_call_pf(k, LLVMGetParam(fn, 2), LLVMGetParam(fn, 1), ntasks, task, clo);
    LLVMBuildRetVoid(b);
}

kern_split kern_split_rows(kern *k, LLVMValueRef outer, int64_t rows, int64_t mr, LLVMValueRef nthreads)
{
    int64_t mrb = (rows + mr - 1) / mr;
    LLVMValueRef nblk = kern_min(k, kern_cdiv(k, kern_mulc(k, nthreads, 3), outer), kern_i64(k, mrb));
    LLVMValueRef blk = kern_mulc(k, kern_cdiv(k, kern_i64(k, mrb), nblk), mr);
    nblk = kern_cdiv(k, kern_i64(k, rows), blk);
    return (kern_split){.nblk = nblk, .blk = blk, .ntasks = kern_mul(k, outer, nblk)};
}

kern_split kern_split_panels(kern *k, LLVMValueRef M, int64_t mr, int64_t mc_max, int64_t npanels,
                             int tasks_per_thread, LLVMValueRef nthreads)
{
    LLVMValueRef tiles = kern_cdiv(k, M, kern_i64(k, mr));
    LLVMValueRef nmb = kern_cdiv(k, M, kern_i64(k, mc_max));
    LLVMValueRef mc = kern_mulc(k, kern_cdiv(k, tiles, nmb), mr);
    nmb = kern_cdiv(k, M, mc);
    LLVMValueRef nnb =
        kern_min(k, kern_cdiv(k, kern_mulc(k, nthreads, tasks_per_thread), nmb), kern_i64(k, npanels));
    return (kern_split){.nblk = nmb, .blk = mc, .aux = nnb, .ntasks = kern_mul(k, nmb, nnb)};
}

static LLVMValueRef emit_kernel(kern *k, const char *name, const kern_kernel *kk)
{
    char task_name[320];
    if (kk->prepare && kk->prepare(k, kk->gen))
        return NULL;
    kk->task_name(k, kk->gen, task_name, sizeof task_name);
    LLVMTypeRef argsty = kern_args_type(k, kk->nptr);
    LLVMValueRef task = LLVMGetNamedFunction(k->mod, task_name);
    if (!task && !(task = kk->task(k, kk->gen, task_name, argsty)))
        return NULL;
    LLVMValueRef count, nt;
    LLVMValueRef fn = kern_driver_open(k, name, argsty, (unsigned)kk->nptr, &count, &nt);
    kern_split s = kk->split(k, kk->gen, count, nt);
    kern_driver_close(k, fn, s.nblk, s.blk, s.aux, s.ntasks, task);
    return fn;
}

LLVMValueRef kern_args_read(kern *k, LLVMTypeRef argsty, LLVMValueRef args, int nptr, LLVMValueRef *ptr)
{
    for (int i = 0; i < nptr; i++)
        ptr[i] = kern_field(k, argsty, args, (unsigned)i, k->ptr);
    return kern_field(k, argsty, args, (unsigned)nptr, k->i64);
}

LLVMValueRef kern_emit(LLVMModuleRef mod, const cg_target *t, const char *name, const kern_kernel *kk)
{
    kern k;
    if (!name || kern_init(&k, mod, t))
        return NULL;
    LLVMValueRef fn = emit_kernel(&k, name, kk);
    kern_dispose(&k);
    return fn;
}

void kern_task_closure(kern *k, LLVMValueRef fn, LLVMValueRef *args, LLVMValueRef *nblk, LLVMValueRef *blk,
                       LLVMValueRef *aux)
{
    LLVMTypeRef cloty = kern_closure_type(k);
    LLVMValueRef clo = LLVMGetParam(fn, 0);
    *args = kern_field(k, cloty, clo, 0, k->ptr);
    *nblk = kern_field(k, cloty, clo, 1, k->i64);
    *blk = kern_field(k, cloty, clo, 2, k->i64);
    if (aux)
        *aux = kern_field(k, cloty, clo, 3, k->i64);
}

void kern_task_loop(kern *k, LLVMValueRef fn, kern_loop *T, LLVMValueRef nblk, LLVMValueRef *outer,
                    LLVMValueRef *inner)
{
    kern_for(k, T, LLVMGetParam(fn, 1), LLVMGetParam(fn, 2), 1, 0, 0, NULL, "task");
    *outer = LLVMBuildSDiv(k->b, T->iv, nblk, "outer");
    *inner = LLVMBuildSub(k->b, T->iv, kern_mul(k, *outer, nblk), "inner");
}

/* ---- scalars ---- */

LLVMValueRef kern_i64(kern *k, int64_t v) { return LLVMConstInt(k->i64, (unsigned long long)v, 1); }
LLVMValueRef kern_f32(kern *k, float v) { return LLVMConstReal(k->f32, v); }
LLVMValueRef kern_add(kern *k, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildAdd(k->b, a, b, ""); }
LLVMValueRef kern_mul(kern *k, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildMul(k->b, a, b, ""); }

LLVMValueRef kern_addc(kern *k, LLVMValueRef a, int64_t c)
{
    return c ? LLVMBuildAdd(k->b, a, kern_i64(k, c), "") : a;
}

LLVMValueRef kern_mulc(kern *k, LLVMValueRef a, int64_t c)
{
    if (c == 0)
        return kern_i64(k, 0);
    return c == 1 ? a : LLVMBuildMul(k->b, a, kern_i64(k, c), "");
}

LLVMValueRef kern_min(kern *k, LLVMValueRef a, LLVMValueRef b)
{
    return LLVMBuildSelect(k->b, LLVMBuildICmp(k->b, LLVMIntSLT, a, b, ""), a, b, "");
}

LLVMValueRef kern_max(kern *k, LLVMValueRef a, LLVMValueRef b)
{
    return LLVMBuildSelect(k->b, LLVMBuildICmp(k->b, LLVMIntSGT, a, b, ""), a, b, "");
}

LLVMValueRef kern_cdiv(kern *k, LLVMValueRef a, LLVMValueRef b)
{
    LLVMValueRef t = LLVMBuildSub(k->b, LLVMBuildAdd(k->b, a, b, ""), kern_i64(k, 1), "");
    return LLVMBuildSDiv(k->b, t, b, "");
}

LLVMValueRef kern_field(kern *k, LLVMTypeRef sty, LLVMValueRef p, unsigned i, LLVMTypeRef fty)
{
    LLVMValueRef addr = LLVMBuildStructGEP2(k->b, sty, p, i, "");
    return LLVMBuildLoad2(k->b, fty, addr, "");
}

/* ---- addressing and memory ---- */

LLVMValueRef kern_gep(kern *k, LLVMValueRef p, LLVMValueRef idx)
{
    return LLVMBuildGEP2(k->b, k->f32, p, &idx, 1, "");
}

LLVMValueRef kern_gepc(kern *k, LLVMValueRef p, int64_t idx)
{
    return idx ? kern_gep(k, p, kern_i64(k, idx)) : p;
}

LLVMValueRef kern_lane_mask(kern *k, int lanes)
{
    LLVMValueRef bits[16];
    for (int i = 0; i < k->vf; i++)
        bits[i] = LLVMConstInt(k->i1, i < lanes, 0);
    return LLVMConstVector(bits, (unsigned)k->vf);
}

LLVMValueRef kern_lanes_below(kern *k, LLVMValueRef n)
{
    LLVMValueRef idx[16];
    for (int i = 0; i < k->vf; i++)
        idx[i] = LLVMConstInt(k->i64, (unsigned long long)i, 0);
    LLVMTypeRef v64 = LLVMVectorType(k->i64, (unsigned)k->vf);
    LLVMValueRef v = LLVMBuildInsertElement(k->b, LLVMGetPoison(v64), n, LLVMConstInt(k->i32, 0, 0), "");
    v = LLVMBuildShuffleVector(k->b, v, LLVMGetPoison(v64), LLVMConstNull(LLVMVectorType(k->i32, (unsigned)k->vf)), "");
    return LLVMBuildICmp(k->b, LLVMIntSLT, LLVMConstVector(idx, (unsigned)k->vf), v, "");
}

/* The declaration of an overloaded intrinsic. */
LLVMValueRef kern_intrinsic(kern *k, const char *name, LLVMTypeRef *types, size_t ntypes, LLVMTypeRef *fnty)
{
    unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
    if (!id)
        return NULL;
    *fnty = LLVMIntrinsicGetType(k->ctx, id, types, ntypes);
    return LLVMGetIntrinsicDeclaration(k->mod, id, types, ntypes);
}

LLVMValueRef kern_vload_masked(kern *k, LLVMValueRef p, LLVMValueRef mask, LLVMValueRef pass)
{
    LLVMTypeRef types[2] = {k->vty, k->ptr}, fnty;
    LLVMValueRef fn = kern_intrinsic(k, "llvm.masked.load", types, 2, &fnty);
    LLVMValueRef args[4] = {p, LLVMConstInt(k->i32, 4, 0), mask, pass ? pass : kern_vconst(k, 0.0f)};
    return LLVMBuildCall2(k->b, fnty, fn, args, 4, "");
}

LLVMValueRef kern_vload(kern *k, LLVMValueRef p, int lanes, LLVMValueRef pass)
{
    if (lanes >= k->vf) {
        LLVMValueRef v = LLVMBuildLoad2(k->b, k->vty, p, "");
        LLVMSetAlignment(v, 4);
        return v;
    }
    return kern_vload_masked(k, p, kern_lane_mask(k, lanes), pass);
}

void kern_vstore_masked(kern *k, LLVMValueRef v, LLVMValueRef p, LLVMValueRef mask)
{
    LLVMTypeRef types[2] = {k->vty, k->ptr}, fnty;
    LLVMValueRef fn = kern_intrinsic(k, "llvm.masked.store", types, 2, &fnty);
    LLVMValueRef args[4] = {v, p, LLVMConstInt(k->i32, 4, 0), mask};
    LLVMBuildCall2(k->b, fnty, fn, args, 4, "");
}

void kern_vstore(kern *k, LLVMValueRef v, LLVMValueRef p, int lanes)
{
    if (lanes >= k->vf) {
        LLVMValueRef st = LLVMBuildStore(k->b, v, p);
        LLVMSetAlignment(st, 4);
        return;
    }
    kern_vstore_masked(k, v, p, kern_lane_mask(k, lanes));
}

LLVMValueRef kern_splat(kern *k, LLVMValueRef scalar)
{
    LLVMValueRef v = LLVMBuildInsertElement(k->b, LLVMGetPoison(k->vty), scalar, LLVMConstInt(k->i32, 0, 0), "");
    LLVMValueRef zeros = LLVMConstNull(LLVMVectorType(k->i32, (unsigned)k->vf));
    return LLVMBuildShuffleVector(k->b, v, LLVMGetPoison(k->vty), zeros, "");
}

LLVMValueRef kern_bcast(kern *k, LLVMValueRef p)
{
    LLVMValueRef s = LLVMBuildLoad2(k->b, k->f32, p, "");
    LLVMSetAlignment(s, 4);
    return kern_splat(k, s);
}

LLVMValueRef kern_vconst(kern *k, float v)
{
    LLVMValueRef lanes[16];
    for (int i = 0; i < k->vf; i++)
        lanes[i] = kern_f32(k, v);
    return LLVMConstVector(lanes, (unsigned)k->vf);
}

/* ---- arithmetic ---- */

LLVMValueRef kern_fma(kern *k, LLVMValueRef a, LLVMValueRef b, LLVMValueRef c)
{
    if (!k->t.has_fma)
        return LLVMBuildFAdd(k->b, LLVMBuildFMul(k->b, a, b, ""), c, "");
    LLVMTypeRef ty = LLVMTypeOf(a), fnty;
    LLVMValueRef fn = kern_intrinsic(k, "llvm.fma", &ty, 1, &fnty);
    LLVMValueRef args[3] = {a, b, c};
    return LLVMBuildCall2(k->b, fnty, fn, args, 3, "");
}

LLVMValueRef kern_fmax(kern *k, LLVMValueRef a, LLVMValueRef b)
{
    return LLVMBuildSelect(k->b, LLVMBuildFCmp(k->b, LLVMRealOGT, a, b, ""), a, b, "");
}

LLVMValueRef kern_fmin(kern *k, LLVMValueRef a, LLVMValueRef b)
{
    return LLVMBuildSelect(k->b, LLVMBuildFCmp(k->b, LLVMRealOLT, a, b, ""), a, b, "");
}

/* Halves the vector until one lane is left, combining with op. */
static LLVMValueRef reduce(kern *k, LLVMValueRef v, int is_max)
{
    for (int w = k->vf; w > 1; w /= 2) {
        LLVMValueRef lo[8], hi[8];
        for (int i = 0; i < w / 2; i++) {
            lo[i] = LLVMConstInt(k->i32, (unsigned long long)i, 0);
            hi[i] = LLVMConstInt(k->i32, (unsigned long long)(i + w / 2), 0);
        }
        LLVMValueRef a = LLVMBuildShuffleVector(k->b, v, v, LLVMConstVector(lo, (unsigned)(w / 2)), "");
        LLVMValueRef b = LLVMBuildShuffleVector(k->b, v, v, LLVMConstVector(hi, (unsigned)(w / 2)), "");
        v = is_max ? kern_fmax(k, a, b) : LLVMBuildFAdd(k->b, a, b, "");
    }
    return LLVMBuildExtractElement(k->b, v, LLVMConstInt(k->i32, 0, 0), "");
}

void kern_prefetch(kern *k, LLVMValueRef p, int locality)
{
    LLVMTypeRef ty = k->ptr;
    unsigned id = LLVMLookupIntrinsicID("llvm.prefetch", 13);
    LLVMTypeRef fnty = LLVMIntrinsicGetType(k->ctx, id, &ty, 1);
    LLVMValueRef fn = LLVMGetIntrinsicDeclaration(k->mod, id, &ty, 1);
    LLVMValueRef args[4] = {p, LLVMConstInt(k->i32, 0, 0), LLVMConstInt(k->i32, (unsigned)locality, 0),
                            LLVMConstInt(k->i32, 1, 0)};
    LLVMBuildCall2(k->b, fnty, fn, args, 4, "");
}

LLVMValueRef kern_hsum(kern *k, LLVMValueRef v) { return reduce(k, v, 0); }
LLVMValueRef kern_hmax(kern *k, LLVMValueRef v) { return reduce(k, v, 1); }

/* ---- loops ---- */

void kern_for(kern *k, kern_loop *l, LLVMValueRef begin, LLVMValueRef end, int64_t step, int whole,
              int ncarry, const LLVMValueRef *init, const char *name)
{
    LLVMBasicBlockRef pre = LLVMGetInsertBlock(k->b);
    l->head = kern_block(k, name);
    l->body = kern_block(k, name);
    l->exit = kern_block(k, name);
    l->step = step;
    l->end = end;
    l->ncarry = ncarry;
    LLVMBuildBr(k->b, l->head);
    LLVMPositionBuilderAtEnd(k->b, l->head);
    l->iv = LLVMBuildPhi(k->b, k->i64, name);
    LLVMAddIncoming(l->iv, &begin, &pre, 1);
    for (int i = 0; i < ncarry; i++) {
        l->carry[i] = LLVMBuildPhi(k->b, LLVMTypeOf(init[i]), "");
        LLVMAddIncoming(l->carry[i], (LLVMValueRef *)&init[i], &pre, 1);
    }
    LLVMValueRef cond = whole ? LLVMBuildICmp(k->b, LLVMIntSLE, kern_addc(k, l->iv, step), end, "")
                              : LLVMBuildICmp(k->b, LLVMIntSLT, l->iv, end, "");
    LLVMBuildCondBr(k->b, cond, l->body, l->exit);
    LLVMPositionBuilderAtEnd(k->b, l->body);
}

void kern_for_end(kern *k, kern_loop *l, const LLVMValueRef *next)
{
    LLVMBasicBlockRef latch = LLVMGetInsertBlock(k->b);
    LLVMValueRef niv = kern_addc(k, l->iv, l->step);
    LLVMBuildBr(k->b, l->head);
    LLVMAddIncoming(l->iv, &niv, &latch, 1);
    for (int i = 0; i < l->ncarry; i++)
        LLVMAddIncoming(l->carry[i], (LLVMValueRef *)&next[i], &latch, 1);
    LLVMPositionBuilderAtEnd(k->b, l->exit);
}
