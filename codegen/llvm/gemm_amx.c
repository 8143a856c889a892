/* gemm_amx.c: the Linear GEMM in bf16 on AMX tiles (--precision bf16 on a
 * CPU with amx-tile and amx-bf16): W and A rounded to bf16, products summed
 * in fp32 by TDPBF16PS, the epilogue (bias, activation, residual) in fp32.
 *
 * One TDPBF16PS multiplies a 16 x 32 bf16 tile of A by a 32 x 16 tile of B
 * into a 16 x 16 fp32 tile of C.  B's tile holds its 32 rows of k in pairs:
 * tile row i is, for each of the 16 columns n, (B[2i][n], B[2i + 1][n]).
 *
 * Packed W: N cut into panels of 32 columns (two B tiles, zeros past N), K
 * into steps of 32 (zeros past K).  Panel p, step s, half h is one 1 KiB B
 * tile at ((p * steps + s) * 2 + h) * 1 KiB, its rows 64 bytes apart, so a
 * panel's steps lie one after the other.
 *
 * Work: the driver cuts C into row blocks of mc rows (a multiple of 32) and
 * column blocks of whole panels, as nmb * nnb tasks of the runtime's
 * parallel_for.  A task first rounds its rows of A to bf16 into a buffer on
 * its stack (32 rows of zeros at most past M, K padded with zeros to the
 * step), then for each panel and each 32 rows keeps a 2 x 2 block of C
 * tiles over all the steps of K (two A tiles, two B tiles, four products
 * per step), stores it to a 32 x 32 fp32 buffer and applies the epilogue
 * from there to C.  The A buffer is at most AMX_A_BYTES, which bounds K
 * (cg_gemm_amx_fits); a layer with a longer K keeps the fp32 kernel. */
#include "codegen/llvm/kern_ir.h"

#include <stdio.h>
#include <string.h>

enum {
    AMX_NR = 32,                 /* columns of a panel */
    AMX_KS = 32,                 /* k of one step */
    AMX_MR = 32,                 /* rows of one 2 x 2 block of C tiles */
    AMX_TILE = 1024,             /* bytes of a tile: 16 rows of 64 bytes */
    AMX_A_BYTES = 256 * 1024,    /* the task's bf16 rows of A, on its stack */
    AMX_TASKS_PER_THREAD = 2,
};

typedef struct {
    int64_t kp, steps;    /* K padded to the step, steps of K */
    int64_t npanels, nfull; /* panels of 32 columns; those without padding */
    int rem_lanes[2];     /* valid lanes of the padded panel's two 16-column halves */
    int64_t mc_max;       /* rows of A a task's buffer holds (multiple of 32) */
} amx_plan;

int cg_gemm_amx_fits(const cg_gemm_desc *d)
{
    int64_t kp = (d->K + AMX_KS - 1) / AMX_KS * AMX_KS;
    return d->K >= 1 && d->N >= 1 && AMX_MR * kp * 2 <= AMX_A_BYTES;
}

static int amx_plan_make(const cg_gemm_desc *d, const cg_target *t, amx_plan *p)
{
    memset(p, 0, sizeof *p);
    if (!d || !t || !t->amx_bf16 || t->vec_floats != 16 || !cg_gemm_amx_fits(d) || d->lda < d->K ||
        d->ldc < d->N || (d->has_residual && d->ldr != 0 && d->ldr < d->N) || d->activation < 0 ||
        d->activation >= IR_ACT_COUNT)
        return -1;
    p->kp = (d->K + AMX_KS - 1) / AMX_KS * AMX_KS;
    p->steps = p->kp / AMX_KS;
    p->npanels = (d->N + AMX_NR - 1) / AMX_NR;
    p->nfull = d->N / AMX_NR;
    int64_t rem = d->N - p->nfull * AMX_NR;
    p->rem_lanes[0] = rem > 16 ? 16 : (int)rem;
    p->rem_lanes[1] = rem > 16 ? (int)rem - 16 : 0;
    p->mc_max = AMX_A_BYTES / (p->kp * 2) / AMX_MR * AMX_MR;
    if (p->mc_max > 8 * AMX_MR)
        p->mc_max = 8 * AMX_MR;
    return 0;
}

size_t cg_gemm_amx_packed_bytes(const cg_gemm_desc *d, const cg_target *t)
{
    amx_plan p;
    if (amx_plan_make(d, t, &p))
        return 0;
    return (size_t)p.npanels * (size_t)p.steps * 2 * AMX_TILE;
}

/* fp32 to bf16, rounded to nearest even (a NaN stays a NaN). */
static uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)(u >> 16 | 0x40);
    u += 0x7fffu + (u >> 16 & 1);
    return (uint16_t)(u >> 16);
}

void cg_gemm_amx_pack(const cg_gemm_desc *d, const cg_target *t, const float *W, void *out)
{
    amx_plan p;
    if (amx_plan_make(d, t, &p))
        return;
    uint16_t *o = out;
    memset(out, 0, cg_gemm_amx_packed_bytes(d, t));
    for (int64_t pn = 0; pn < p.npanels; pn++)
        for (int64_t s = 0; s < p.steps; s++)
            for (int h = 0; h < 2; h++) {
                uint16_t *tile = o + ((pn * p.steps + s) * 2 + h) * (AMX_TILE / 2);
                for (int i = 0; i < 16; i++)
                    for (int n = 0; n < 16; n++)
                        for (int j = 0; j < 2; j++) {
                            int64_t k = s * AMX_KS + 2 * i + j, col = pn * AMX_NR + h * 16 + n;
                            if (k < d->K && col < d->N)
                                tile[i * 32 + n * 2 + j] = to_bf16(W[k * d->N + col]);
                        }
            }
}

/* ---- emission ---- */

typedef struct {
    kern *k;
    const cg_gemm_desc *d;
    const amx_plan *p;
    LLVMTypeRef amx, i8, i16, bf16v;
    LLVMValueRef f_load, f_dp, f_store, f_zero; /* the AMX intrinsics */
    LLVMTypeRef t_load, t_dp, t_store, t_zero;
    LLVMValueRef A, W, bias, R, C; /* the task's arguments */
    LLVMValueRef abuf, cbuf;       /* bf16 rows of A; one 32 x 32 block of C */
    LLVMValueRef m0, rows;         /* the task's first row and its row count */
} amx_emit;

static LLVMValueRef intrinsic(amx_emit *e, const char *name, LLVMTypeRef *fnty)
{
    unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
    LLVMValueRef fn = id ? LLVMGetIntrinsicDeclaration(e->k->mod, id, NULL, 0) : NULL;
    if (fn)
        *fnty = LLVMIntrinsicGetType(e->k->ctx, id, NULL, 0);
    return fn;
}

static LLVMValueRef i16c(amx_emit *e, int v) { return LLVMConstInt(e->i16, (unsigned long long)v, 0); }

/* A 16-row, 64-byte-wide tile at p, rows stride bytes apart. */
static LLVMValueRef tile_load(amx_emit *e, LLVMValueRef p, LLVMValueRef stride)
{
    LLVMValueRef a[4] = {i16c(e, 16), i16c(e, 64), p, stride};
    return LLVMBuildCall2(e->k->b, e->t_load, e->f_load, a, 4, "");
}

static LLVMValueRef bytes_at(amx_emit *e, LLVMValueRef p, LLVMValueRef off)
{
    return LLVMBuildGEP2(e->k->b, e->i8, p, &off, 1, "");
}

/* The task's rows of A, rounded to bf16, into abuf: row r at r * kp * 2
 * bytes; zeros past K, and for the rows from `rows` to the next multiple of
 * 32. */
static void emit_convert_a(amx_emit *e)
{
    kern *k = e->k;
    LLVMBuilderRef b = k->b;
    const cg_gemm_desc *d = e->d;
    const amx_plan *p = e->p;
    int64_t fullv = d->K / 16, tail = d->K % 16, zerov = (p->kp - (d->K + 15) / 16 * 16) / 16;
    LLVMValueRef zero = LLVMConstNull(e->bf16v);
    LLVMValueRef rows32 = kern_mulc(k, kern_cdiv(k, e->rows, kern_i64(k, AMX_MR)), AMX_MR);
    kern_loop R;
    kern_for(k, &R, kern_i64(k, 0), rows32, 1, 0, 0, NULL, "cvt.row");
    LLVMValueRef dst = bytes_at(e, e->abuf, kern_mulc(k, R.iv, p->kp * 2));
    LLVMBasicBlockRef bdata = kern_block(k, "cvt.data"), bpad = kern_block(k, "cvt.pad"), bnext = kern_block(k, "cvt.next");
    LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSLT, R.iv, e->rows, ""), bdata, bpad);

    LLVMPositionBuilderAtEnd(b, bdata);
    LLVMValueRef src = kern_gep(k, e->A, kern_mul(k, kern_add(k, e->m0, R.iv), kern_i64(k, d->lda)));
    if (fullv) {
        kern_loop V;
        kern_for(k, &V, kern_i64(k, 0), kern_i64(k, fullv), 1, 0, 0, NULL, "cvt.vec");
        LLVMValueRef x = kern_vload(k, kern_gep(k, src, kern_mulc(k, V.iv, 16)), 16, NULL);
        LLVMValueRef st = LLVMBuildStore(b, LLVMBuildFPTrunc(b, x, e->bf16v, ""),
                                         bytes_at(e, dst, kern_mulc(k, V.iv, 32)));
        LLVMSetAlignment(st, 2);
        kern_for_end(k, &V, NULL);
    }
    if (tail) {
        LLVMValueRef x = kern_vload(k, kern_gepc(k, src, fullv * 16), (int)tail, NULL);
        LLVMSetAlignment(LLVMBuildStore(b, LLVMBuildFPTrunc(b, x, e->bf16v, ""), bytes_at(e, dst, kern_i64(k, fullv * 32))),
                         2);
    }
    for (int64_t v = 0; v < zerov; v++)
        LLVMSetAlignment(LLVMBuildStore(b, zero, bytes_at(e, dst, kern_i64(k, p->kp * 2 - (v + 1) * 32))), 2);
    LLVMBuildBr(b, bnext);

    LLVMPositionBuilderAtEnd(b, bpad);
    kern_loop Z;
    kern_for(k, &Z, kern_i64(k, 0), kern_i64(k, p->kp / 16), 1, 0, 0, NULL, "cvt.zero");
    LLVMSetAlignment(LLVMBuildStore(b, zero, bytes_at(e, dst, kern_mulc(k, Z.iv, 32))), 2);
    kern_for_end(k, &Z, NULL);
    LLVMBuildBr(b, bnext);

    LLVMPositionBuilderAtEnd(b, bnext);
    kern_for_end(k, &R, NULL);
}

/* C[rows of block rt, panel's columns] = act(cbuf + bias) + R, for the valid
 * rows; lanes: the valid columns of the panel's two halves. */
static void emit_epilogue(amx_emit *e, LLVMValueRef panel, LLVMValueRef rt, const int lanes[2])
{
    kern *k = e->k;
    const cg_gemm_desc *d = e->d;
    LLVMValueRef r0 = kern_mulc(k, rt, AMX_MR);
    LLVMValueRef nrows = kern_min(k, kern_i64(k, AMX_MR), LLVMBuildSub(k->b, e->rows, r0, ""));
    LLVMValueRef n0 = kern_mulc(k, panel, AMX_NR);
    LLVMValueRef bv[2] = {0};
    for (int h = 0; h < 2 && d->has_bias; h++)
        if (lanes[h])
            bv[h] = kern_vload(k, kern_gep(k, e->bias, kern_addc(k, n0, h * 16)), lanes[h], NULL);
    kern_loop L;
    kern_for(k, &L, kern_i64(k, 0), nrows, 1, 0, 0, NULL, "epi.row");
    LLVMValueRef row = kern_add(k, e->m0, kern_add(k, r0, L.iv));
    for (int h = 0; h < 2; h++) {
        if (!lanes[h])
            continue;
        LLVMValueRef col = kern_addc(k, n0, h * 16);
        LLVMValueRef x = kern_vload(k, kern_gep(k, e->cbuf, kern_addc(k, kern_mulc(k, L.iv, AMX_NR), h * 16)), 16, NULL);
        if (d->has_bias)
            x = LLVMBuildFAdd(k->b, x, bv[h], "");
        x = kern_activation(k, x, (ir_act)d->activation);
        if (d->has_residual)
            x = LLVMBuildFAdd(k->b, x,
                              kern_vload(k, kern_gep(k, e->R, kern_add(k, kern_mulc(k, row, d->ldr), col)), lanes[h],
                                         NULL),
                              "");
        kern_vstore(k, x, kern_gep(k, e->C, kern_add(k, kern_mulc(k, row, d->ldc), col)), lanes[h]);
    }
    kern_for_end(k, &L, NULL);
}

/* Panels [pb, pe), each with the same lanes: for every 32 rows of the task,
 * the 2 x 2 tiles of C over all steps of K, then the epilogue. */
static void emit_panels(amx_emit *e, LLVMValueRef pb, LLVMValueRef pe, const int lanes[2])
{
    kern *k = e->k;
    LLVMBuilderRef b = k->b;
    const amx_plan *p = e->p;
    LLVMValueRef astride = kern_i64(k, p->kp * 2), bstride = kern_i64(k, 64), cstride = kern_i64(k, AMX_NR * 4);
    kern_loop P, T, S;
    kern_for(k, &P, pb, pe, 1, 0, 0, NULL, "amx.panel");
    LLVMValueRef wpanel = bytes_at(e, e->W, kern_mulc(k, P.iv, p->steps * 2 * AMX_TILE));
    kern_for(k, &T, kern_i64(k, 0), kern_cdiv(k, e->rows, kern_i64(k, AMX_MR)), 1, 0, 0, NULL, "amx.rows");
    LLVMValueRef a0 = bytes_at(e, e->abuf, kern_mulc(k, T.iv, AMX_MR * p->kp * 2));
    LLVMValueRef a1 = bytes_at(e, a0, kern_i64(k, 16 * p->kp * 2));
    LLVMValueRef init[4];
    LLVMValueRef zargs[2] = {i16c(e, 16), i16c(e, 64)};
    for (int i = 0; i < 4; i++)
        init[i] = LLVMBuildCall2(b, e->t_zero, e->f_zero, zargs, 2, "");
    kern_for(k, &S, kern_i64(k, 0), kern_i64(k, p->steps), 1, 0, 4, init, "amx.k");
    LLVMValueRef ta[2], tb[2], acc[4];
    ta[0] = tile_load(e, bytes_at(e, a0, kern_mulc(k, S.iv, AMX_KS * 2)), astride);
    ta[1] = tile_load(e, bytes_at(e, a1, kern_mulc(k, S.iv, AMX_KS * 2)), astride);
    LLVMValueRef bstep = bytes_at(e, wpanel, kern_mulc(k, S.iv, 2 * AMX_TILE));
    tb[0] = tile_load(e, bstep, bstride);
    tb[1] = tile_load(e, bytes_at(e, bstep, kern_i64(k, AMX_TILE)), bstride);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) {
            LLVMValueRef a[6] = {i16c(e, 16), i16c(e, 64), i16c(e, 64), S.carry[i * 2 + j], ta[i], tb[j]};
            acc[i * 2 + j] = LLVMBuildCall2(b, e->t_dp, e->f_dp, a, 6, "");
        }
    kern_for_end(k, &S, acc);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) {
            LLVMValueRef dst = bytes_at(e, e->cbuf, kern_i64(k, (i * 16 * AMX_NR + j * 16) * 4));
            LLVMValueRef a[5] = {i16c(e, 16), i16c(e, 64), dst, cstride, S.carry[i * 2 + j]};
            LLVMBuildCall2(b, e->t_store, e->f_store, a, 5, "");
        }
    emit_epilogue(e, P.iv, T.iv, lanes);
    kern_for_end(k, &T, NULL);
    kern_for_end(k, &P, NULL);
}

/* task(closure {args, nmb, mc, nnb}, begin, end): task t = ni * nmb + mi,
 * rows [mi * mc, min(M, (mi + 1) * mc)), panels [ni * P / nnb, (ni + 1) * P / nnb). */
static LLVMValueRef emit_task(amx_emit *e, const char *name, LLVMTypeRef argsty)
{
    kern *k = e->k;
    LLVMBuilderRef b = k->b;
    const amx_plan *p = e->p;
    LLVMValueRef fn = kern_func(k, name, kern_task_type(k), 1);
    e->abuf = LLVMBuildArrayAlloca(b, e->i8, kern_i64(k, p->mc_max * p->kp * 2), "abuf");
    LLVMSetAlignment(e->abuf, 64);
    e->cbuf = LLVMBuildArrayAlloca(b, k->f32, kern_i64(k, AMX_MR * AMX_NR), "cbuf");
    LLVMSetAlignment(e->cbuf, 64);
    LLVMValueRef args, nmb, mc, nnb;
    kern_task_closure(k, fn, &args, &nmb, &mc, &nnb);
    e->A = kern_field(k, argsty, args, 0, k->ptr);
    e->W = kern_field(k, argsty, args, 1, k->ptr);
    e->bias = kern_field(k, argsty, args, 2, k->ptr);
    e->R = kern_field(k, argsty, args, 3, k->ptr);
    e->C = kern_field(k, argsty, args, 4, k->ptr);
    LLVMValueRef M = kern_field(k, argsty, args, 5, k->i64);
    kern_loop T;
    LLVMValueRef ni, mi;
    kern_task_loop(k, fn, &T, nmb, &ni, &mi);
    e->m0 = kern_mul(k, mi, mc);
    e->rows = LLVMBuildSub(b, kern_min(k, M, kern_add(k, e->m0, mc)), e->m0, "rows");
    LLVMValueRef p0 = LLVMBuildSDiv(b, kern_mulc(k, ni, p->npanels), nnb, "p0");
    LLVMValueRef p1 = LLVMBuildSDiv(b, kern_mulc(k, kern_addc(k, ni, 1), p->npanels), nnb, "p1");
    emit_convert_a(e);
    int full[2] = {16, 16};
    if (p->nfull)
        emit_panels(e, p0, kern_min(k, p1, kern_i64(k, p->nfull)), full);
    if (p->nfull < p->npanels) { /* the padded last panel, when it is the task's */
        LLVMBasicBlockRef brem = kern_block(k, "amx.rem"), bjoin = kern_block(k, "amx.rem.join");
        LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntEQ, p1, kern_i64(k, p->npanels), ""), brem, bjoin);
        LLVMPositionBuilderAtEnd(b, brem);
        emit_panels(e, kern_i64(k, p->nfull), kern_i64(k, p->npanels), p->rem_lanes);
        LLVMBuildBr(b, bjoin);
        LLVMPositionBuilderAtEnd(b, bjoin);
    }
    kern_for_end(k, &T, NULL);
    LLVMBuildRetVoid(b);
    return fn;
}

/* driver(args, pool, pf, nthreads): the fewest row blocks the A buffer
 * allows, then column blocks until there are AMX_TASKS_PER_THREAD tasks per
 * thread (at most one panel each), the row blocks evened out. */
static LLVMValueRef emit_driver(kern *k, const char *name, const amx_plan *p, LLVMValueRef task, LLVMTypeRef argsty)
{
    LLVMValueRef M, nt;
    LLVMValueRef fn = kern_driver_open(k, name, argsty, 5, &M, &nt);
    LLVMValueRef tiles = kern_cdiv(k, M, kern_i64(k, AMX_MR));
    LLVMValueRef nmb = kern_cdiv(k, M, kern_i64(k, p->mc_max));
    LLVMValueRef mc = kern_mulc(k, kern_cdiv(k, tiles, nmb), AMX_MR);
    nmb = kern_cdiv(k, M, mc);
    LLVMValueRef nnb = kern_min(k, kern_cdiv(k, kern_mulc(k, nt, AMX_TASKS_PER_THREAD), nmb), kern_i64(k, p->npanels));
    kern_driver_close(k, fn, nmb, mc, nnb, kern_mul(k, nmb, nnb), task);
    return fn;
}

LLVMValueRef cg_gemm_amx_emit(LLVMModuleRef mod, const char *name, const cg_gemm_desc *d, const cg_target *t)
{
    amx_plan p;
    kern k;
    if (!name || amx_plan_make(d, t, &p) || kern_init(&k, mod, t))
        return NULL;
    amx_emit e = {.k = &k, .d = d, .p = &p};
    e.amx = LLVMX86AMXTypeInContext(k.ctx);
    e.i8 = LLVMInt8TypeInContext(k.ctx);
    e.i16 = LLVMInt16TypeInContext(k.ctx);
    e.bf16v = LLVMVectorType(LLVMBFloatTypeInContext(k.ctx), 16);
    e.f_load = intrinsic(&e, "llvm.x86.tileloadd64.internal", &e.t_load);
    e.f_dp = intrinsic(&e, "llvm.x86.tdpbf16ps.internal", &e.t_dp);
    e.f_store = intrinsic(&e, "llvm.x86.tilestored64.internal", &e.t_store);
    e.f_zero = intrinsic(&e, "llvm.x86.tilezero.internal", &e.t_zero);
    LLVMValueRef fn = NULL;
    if (e.f_load && e.f_dp && e.f_store && e.f_zero) {
        char buf[256];
        LLVMTypeRef argsty = kern_args_type(&k, 5);
        snprintf(buf, sizeof buf, "vitc.amx.K%lld.N%lld.a%lld.c%lld.r%lld.e%d%d%d", (long long)d->K, (long long)d->N,
                 (long long)d->lda, (long long)d->ldc, (long long)d->ldr, d->has_bias ? 1 : 0, d->has_residual ? 1 : 0,
                 d->activation);
        LLVMValueRef task = LLVMGetNamedFunction(mod, buf);
        if (!task)
            task = emit_task(&e, buf, argsty);
        fn = emit_driver(&k, name, &p, task, argsty);
    }
    kern_dispose(&k);
    return fn;
}
