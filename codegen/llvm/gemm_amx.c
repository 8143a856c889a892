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
 * parallel_for.  A task walks K in blocks of kcs steps.  For each it rounds
 * its rows of A in that block to bf16 into a buffer on its stack, laid out
 * tile by tile (32 rows x 32 k: 2 KiB, the two A tiles of a step), zeros
 * past K and past its rows; then for each panel and each 32 rows it loads
 * the 2 x 2 block of C tiles, adds the block's steps (two A tiles, two B
 * tiles, four products each) and stores it back.  The partial sums live in
 * C itself between K blocks (through a 32 x 32 buffer where the tiles would
 * reach past C's rows or columns); a residual is their start, so R may be C.
 * After the last block the epilogue goes from that buffer to C.  A block's B
 * (kcs steps of a panel, 16 KiB) stays in L1 while the task's rows go by; the
 * rows' A streams from L2 (the blockings tried and their speeds:
 * bench/design-notes.md, "AMX GEMM").
 *
 * A residual after an activation cannot start the sums (it is added after
 * the activation), so that case keeps K in one block, which AMX_A_BYTES
 * bounds (cg_gemm_amx_fits); a longer K keeps the fp32 kernel.
 *
 * Without AMX, on AVX512-BF16 (t->bf16_dot: Zen 4 and later, Cooper Lake),
 * the same packed W, the same A buffer and the same task and blocks, with
 * the 32 x 32 block of C in vector registers 8 rows at a time instead of
 * tiles: 16 accumulators of 16 floats, and per pair of k one VDPBF16PS per
 * accumulator, its A a broadcast pair of the row's bf16 (4 bytes of the A
 * buffer's row), its B the B tile's row for that pair (64 bytes: the pair
 * of 16 columns).  VDPBF16PS sums each pair's two products into the lane,
 * as TDPBF16PS does.  Rows and columns past C's edges are masked in the
 * loads and stores of C, so no buffer is needed there. */
#include "codegen/llvm/kern_ir.h"

#include <stdio.h>
#include <string.h>

enum {
    AMX_NR = 32,              /* columns of a panel */
    AMX_KS = 32,              /* k of one step */
    AMX_MR = 32,              /* rows of one 2 x 2 block of C tiles */
    AMX_TILE = 1024,          /* bytes of a tile: 16 rows of 64 bytes */
    AMX_A_BYTES = 256 * 1024, /* the task's bf16 rows of A, on its stack */
    AMX_KC_STEPS = 8,         /* steps of a K block: its B is 16 KiB per panel */
    AMX_MC_TILES = 16,        /* row blocks of at most 16 x 32 rows */
    AMX_TASKS_PER_THREAD = 2,
    DOT_MR = 8,               /* rows of C in registers on AVX512-BF16 (divides AMX_MR) */
};

typedef struct {
    int64_t steps;          /* steps of K (K padded to a step with zeros) */
    int64_t kcs, nkb;       /* steps of a K block (the last may have fewer), K blocks */
    int64_t npanels, nfull; /* panels of 32 columns; those without padding */
    int rem_lanes[2];       /* valid lanes of the padded panel's two 16-column halves */
    int64_t mc_max;         /* rows of A a task's buffer holds (multiple of 32) */
} amx_plan;

/* Whether R starts the sums (a residual, K in several blocks: C holds the
 * partial sums), rather than joining them in the epilogue (a residual after
 * one block, or a gate, which multiplies). */
static int r_starts_sums(const cg_gemm_desc *d, const amx_plan *p) { return d->has_residual && !d->gate && p->nkb > 1; }
static int r_in_epilogue(const cg_gemm_desc *d, const amx_plan *p) { return d->has_residual && !r_starts_sums(d, p); }

/* Steps of a K block: all of them when a residual follows an activation. */
static int64_t block_steps(const cg_gemm_desc *d, int64_t steps)
{
    return d->has_residual && d->activation && !d->gate ? steps : steps < AMX_KC_STEPS ? steps : AMX_KC_STEPS;
}

int cg_gemm_amx_fits(const cg_gemm_desc *d)
{
    int64_t steps = (d->K + AMX_KS - 1) / AMX_KS;
    return d->K >= 1 && d->N >= 1 && AMX_MR * block_steps(d, steps) * AMX_KS * 2 <= AMX_A_BYTES;
}

static int amx_plan_make(const cg_gemm_desc *d, const cg_target *t, amx_plan *p)
{
    memset(p, 0, sizeof *p);
    if (!d || !t || !cg_target_bf16(t) || t->vec_floats != 16 || !cg_gemm_amx_fits(d) || d->lda < d->K ||
        d->ldc < d->N || (d->has_residual && d->ldr != 0 && d->ldr < d->N) || d->activation < 0 ||
        d->activation >= IR_ACT_COUNT)
        return -1;
    p->steps = (d->K + AMX_KS - 1) / AMX_KS;
    p->kcs = block_steps(d, p->steps);
    p->nkb = (p->steps + p->kcs - 1) / p->kcs;
    p->npanels = (d->N + AMX_NR - 1) / AMX_NR;
    p->nfull = d->N / AMX_NR;
    int64_t rem = d->N - p->nfull * AMX_NR;
    p->rem_lanes[0] = rem > 16 ? 16 : (int)rem;
    p->rem_lanes[1] = rem > 16 ? (int)rem - 16 : 0;
    p->mc_max = AMX_A_BYTES / (p->kcs * AMX_KS * 2) / AMX_MR * AMX_MR;
    if (p->mc_max > AMX_MC_TILES * AMX_MR)
        p->mc_max = AMX_MC_TILES * AMX_MR;
    return 0;
}

size_t cg_gemm_amx_packed_bytes(const cg_gemm_desc *d, const cg_target *t)
{
    amx_plan p;
    if (amx_plan_make(d, t, &p))
        return 0;
    return (size_t)p.npanels * (size_t)p.steps * 2 * AMX_TILE;
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
                                tile[i * 32 + n * 2 + j] = ir_f32_to_bf16(W[k * d->N + col]);
                        }
            }
}

/* ---- emission ---- */

typedef struct {
    kern *k;
    const cg_gemm_desc *d;
    const amx_plan *p;
    LLVMTypeRef amx, i8, i16;
    LLVMValueRef f_load, f_dp, f_store, f_zero; /* the AMX intrinsics */
    LLVMTypeRef t_load, t_dp, t_store, t_zero;
    LLVMValueRef f_dot; /* VDPBF16PS (t->bf16_dot without AMX) */
    LLVMTypeRef t_dot;
    LLVMValueRef A, W, bias, R, C; /* the task's arguments */
    LLVMValueRef abuf, cbuf;       /* bf16 A of a K block, tile by tile; one 32 x 32 block of C */
    LLVMValueRef m0, rows;         /* the task's first row and its row count */
    LLVMValueRef kb, ksteps;       /* the K block and its steps */
} amx_emit;

static LLVMValueRef i16c(amx_emit *e, int v) { return LLVMConstInt(e->i16, (unsigned long long)v, 0); }

static LLVMValueRef bytes_at(amx_emit *e, LLVMValueRef p, LLVMValueRef off)
{
    return LLVMBuildGEP2(e->k->b, e->i8, p, &off, 1, "");
}

/* The packed W of panel pn in the K block: its first step's two B tiles. */
static LLVMValueRef panel_block(amx_emit *e, LLVMValueRef pn)
{
    kern *k = e->k;
    const amx_plan *p = e->p;
    return bytes_at(e, e->W,
                    kern_mulc(k, kern_add(k, kern_mulc(k, pn, p->steps), kern_mulc(k, e->kb, p->kcs)), 2 * AMX_TILE));
}

/* Whether the K block is the first and the last. */
static void kblock_ends(amx_emit *e, LLVMValueRef *first, LLVMValueRef *last)
{
    kern *k = e->k;
    *first = LLVMBuildICmp(k->b, LLVMIntEQ, e->kb, kern_i64(k, 0), "first");
    *last = LLVMBuildICmp(k->b, LLVMIntEQ, e->kb, kern_i64(k, e->p->nkb - 1), "last");
}

/* A 16-row, 64-byte-wide tile at p, rows stride bytes apart. */
static LLVMValueRef tile_load(amx_emit *e, LLVMValueRef p, LLVMValueRef stride)
{
    LLVMValueRef a[4] = {i16c(e, 16), i16c(e, 64), p, stride};
    return LLVMBuildCall2(e->k->b, e->t_load, e->f_load, a, 4, "");
}

static void tile_store(amx_emit *e, LLVMValueRef p, LLVMValueRef stride, LLVMValueRef t)
{
    LLVMValueRef a[5] = {i16c(e, 16), i16c(e, 64), p, stride, t};
    LLVMBuildCall2(e->k->b, e->t_store, e->f_store, a, 5, "");
}

/* The 2 x 2 block of C tiles from rows stride bytes apart at p (tile (i, j)
 * at p + i * 16 rows + j * 16 floats), or stored there. */
static void block_load(amx_emit *e, LLVMValueRef p, LLVMValueRef stride, LLVMValueRef t[4])
{
    kern *k = e->k;
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
            t[i * 2 + j] =
                tile_load(e, bytes_at(e, p, kern_add(k, kern_mulc(k, stride, 16 * i), kern_i64(k, 64 * j))), stride);
}

static void block_store(amx_emit *e, LLVMValueRef p, LLVMValueRef stride, LLVMValueRef t[4])
{
    kern *k = e->k;
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
            tile_store(e, bytes_at(e, p, kern_add(k, kern_mulc(k, stride, 16 * i), kern_i64(k, 64 * j))), stride,
                       t[i * 2 + j]);
}

/* The task's rows of A in K block kb, rounded to bf16, into abuf: row r,
 * step s of the block at ((r / 32) * kcs + s) * 2 KiB + (r % 32) * 64 bytes;
 * zeros past K and for the rows from `rows` to the next multiple of 32.  A
 * step of a row is one 64-byte store of 32 bf16 (VCVTNE2PS2BF16); only the
 * step K ends in loads under a mask. */
static void emit_convert_a(amx_emit *e)
{
    kern *k = e->k;
    LLVMBuilderRef b = k->b;
    const cg_gemm_desc *d = e->d;
    const amx_plan *p = e->p;
    LLVMTypeRef b32 = LLVMVectorType(LLVMBFloatTypeInContext(k->ctx), 32);
    LLVMValueRef idx[32];
    for (int i = 0; i < 32; i++)
        idx[i] = LLVMConstInt(k->i32, (unsigned long long)i, 0);
    LLVMValueRef cat = LLVMConstVector(idx, 32);
    LLVMValueRef k0 = kern_mulc(k, e->kb, p->kcs * AMX_KS);
    /* the block's steps that K fills; the step K ends in, if any, follows them */
    LLVMValueRef nfull =
        kern_min(k, e->ksteps, LLVMBuildSDiv(b, LLVMBuildSub(b, kern_i64(k, d->K), k0, ""), kern_i64(k, AMX_KS), ""));
    int tail = (int)(d->K % AMX_KS);
    int tl[2] = {tail > 16 ? 16 : tail, tail > 16 ? tail - 16 : 0};
    kern_loop R, S;
    kern_for(k, &R, kern_i64(k, 0), e->rows, 1, 0, 0, NULL, "cvt.row");
    LLVMValueRef rt = LLVMBuildUDiv(b, R.iv, kern_i64(k, AMX_MR), ""),
                 rr = LLVMBuildURem(b, R.iv, kern_i64(k, AMX_MR), "");
    LLVMValueRef dst = bytes_at(e, e->abuf, kern_add(k, kern_mulc(k, rt, p->kcs * 2 * AMX_TILE), kern_mulc(k, rr, 64)));
    LLVMValueRef src = kern_gep(k, e->A, kern_add(k, kern_mul(k, kern_add(k, e->m0, R.iv), kern_i64(k, d->lda)), k0));
    kern_for(k, &S, kern_i64(k, 0), nfull, 1, 0, 0, NULL, "cvt.step");
    LLVMValueRef ps = kern_gep(k, src, kern_mulc(k, S.iv, AMX_KS));
    LLVMValueRef x =
        LLVMBuildShuffleVector(b, kern_vload(k, ps, 16, NULL), kern_vload(k, kern_gepc(k, ps, 16), 16, NULL), cat, "");
    LLVMSetAlignment(
        LLVMBuildStore(b, LLVMBuildFPTrunc(b, x, b32, ""), bytes_at(e, dst, kern_mulc(k, S.iv, 2 * AMX_TILE))), 64);
    kern_for_end(k, &S, NULL);
    if (tail) { /* the step K ends in, when it is this block's */
        LLVMBasicBlockRef bt = kern_block(k, "cvt.tail"), bj = kern_block(k, "cvt.tail.join");
        LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSLT, nfull, e->ksteps, ""), bt, bj);
        LLVMPositionBuilderAtEnd(b, bt);
        LLVMValueRef pt = kern_gep(k, src, kern_mulc(k, nfull, AMX_KS));
        LLVMValueRef lo = kern_vload(k, pt, tl[0], NULL);
        LLVMValueRef hi = tl[1] ? kern_vload(k, kern_gepc(k, pt, 16), tl[1], NULL) : kern_vconst(k, 0.0f);
        x = LLVMBuildShuffleVector(b, lo, hi, cat, "");
        LLVMSetAlignment(
            LLVMBuildStore(b, LLVMBuildFPTrunc(b, x, b32, ""), bytes_at(e, dst, kern_mulc(k, nfull, 2 * AMX_TILE))),
            64);
        LLVMBuildBr(b, bj);
        LLVMPositionBuilderAtEnd(b, bj);
    }
    kern_for_end(k, &R, NULL);
    /* the rows past the task's, to the next multiple of 32: zeros */
    LLVMValueRef rows32 = kern_mulc(k, kern_cdiv(k, e->rows, kern_i64(k, AMX_MR)), AMX_MR);
    kern_loop Z, ZS;
    kern_for(k, &Z, e->rows, rows32, 1, 0, 0, NULL, "cvt.pad");
    LLVMValueRef zt = LLVMBuildUDiv(b, Z.iv, kern_i64(k, AMX_MR), ""),
                 zr = LLVMBuildURem(b, Z.iv, kern_i64(k, AMX_MR), "");
    LLVMValueRef zdst =
        bytes_at(e, e->abuf, kern_add(k, kern_mulc(k, zt, p->kcs * 2 * AMX_TILE), kern_mulc(k, zr, 64)));
    kern_for(k, &ZS, kern_i64(k, 0), e->ksteps, 1, 0, 0, NULL, "cvt.zero");
    LLVMSetAlignment(LLVMBuildStore(b, LLVMConstNull(b32), bytes_at(e, zdst, kern_mulc(k, ZS.iv, 2 * AMX_TILE))), 64);
    kern_for_end(k, &ZS, NULL);
    kern_for_end(k, &Z, NULL);
}

/* cbuf's first nrows rows (32 floats each) from src, rows ld floats apart:
 * lanes[h] columns of each half, zeros elsewhere and below. */
static void fill_cbuf(amx_emit *e, LLVMValueRef src, LLVMValueRef ld, LLVMValueRef nrows, const int lanes[2])
{
    kern *k = e->k;
    kern_loop L;
    kern_for(k, &L, kern_i64(k, 0), kern_i64(k, AMX_MR), 1, 0, 0, NULL, "fill.row");
    LLVMValueRef in = LLVMBuildICmp(k->b, LLVMIntSLT, L.iv, nrows, "");
    for (int h = 0; h < 2; h++) {
        LLVMValueRef n = LLVMBuildSelect(k->b, in, kern_i64(k, lanes[h]), kern_i64(k, 0), "");
        LLVMValueRef row = kern_gep(k, src, kern_addc(k, kern_mul(k, L.iv, ld), h * 16));
        LLVMValueRef x = kern_vload_masked(k, row, kern_lanes_below(k, n), NULL);
        kern_vstore(k, x, kern_gep(k, e->cbuf, kern_addc(k, kern_mulc(k, L.iv, AMX_NR), h * 16)), 16);
    }
    kern_for_end(k, &L, NULL);
}

/* C's rows r0 .. r0 + nrows of the panel at n0 from cbuf: with last, the
 * epilogue C = act(cbuf + bias) + R (R when it did not start the sums),
 * else the partial sums as they are; lanes: the valid columns of each half. */
static void store_cbuf(amx_emit *e, LLVMValueRef n0, LLVMValueRef r0, LLVMValueRef nrows, const int lanes[2], int last)
{
    kern *k = e->k;
    const cg_gemm_desc *d = e->d;
    int res_late = last && r_in_epilogue(d, e->p);
    LLVMValueRef bv[2] = {0};
    for (int h = 0; h < 2 && last && d->has_bias; h++)
        if (lanes[h])
            bv[h] = kern_vload(k, kern_gep(k, e->bias, kern_addc(k, n0, h * 16)), lanes[h], NULL);
    kern_loop L;
    kern_for(k, &L, kern_i64(k, 0), nrows, 1, 0, 0, NULL, "epi.row");
    LLVMValueRef row = kern_add(k, e->m0, kern_add(k, r0, L.iv));
    for (int h = 0; h < 2; h++) {
        if (!lanes[h])
            continue;
        LLVMValueRef col = kern_addc(k, n0, h * 16);
        LLVMValueRef x =
            kern_vload(k, kern_gep(k, e->cbuf, kern_addc(k, kern_mulc(k, L.iv, AMX_NR), h * 16)), 16, NULL);
        if (last) {
            if (d->has_bias)
                x = LLVMBuildFAdd(k->b, x, bv[h], "");
            x = kern_activation(k, x, (ir_act)d->activation);
            if (res_late) {
                LLVMValueRef rv =
                    kern_vload(k, kern_gep(k, e->R, kern_add(k, kern_mulc(k, row, d->ldr), col)), lanes[h], NULL);
                x = d->gate ? LLVMBuildFMul(k->b, x, rv, "") : LLVMBuildFAdd(k->b, x, rv, "");
            }
        }
        kern_vstore(k, x, kern_gep(k, e->C, kern_add(k, kern_mulc(k, row, d->ldc), col)), lanes[h]);
    }
    kern_for_end(k, &L, NULL);
}

/* Panels [pb, pe) of K block kb, each with the same lanes: for every 32
 * rows of the task, the 2 x 2 tiles of C from where the sums stand (zeros,
 * the residual, or C), the block's steps, then back to C (the epilogue
 * after the last block). */
static void emit_panels(amx_emit *e, LLVMValueRef pb, LLVMValueRef pe, const int lanes[2])
{
    kern *k = e->k;
    LLVMBuilderRef b = k->b;
    const cg_gemm_desc *d = e->d;
    const amx_plan *p = e->p;
    int whole = lanes[0] == 16 && lanes[1] == 16, res_first = r_starts_sums(d, p);
    LLVMValueRef astride = kern_i64(k, 64), bstride = kern_i64(k, 64), cstride = kern_i64(k, AMX_NR * 4);
    LLVMValueRef first, last;
    kblock_ends(e, &first, &last);
    kern_loop P, T, S;
    kern_for(k, &P, pb, pe, 1, 0, 0, NULL, "amx.panel");
    LLVMValueRef n0 = kern_mulc(k, P.iv, AMX_NR);
    LLVMValueRef wblk = panel_block(e, P.iv);
    kern_for(k, &T, kern_i64(k, 0), kern_cdiv(k, e->rows, kern_i64(k, AMX_MR)), 1, 0, 0, NULL, "amx.rows");
    LLVMValueRef r0 = kern_mulc(k, T.iv, AMX_MR);
    LLVMValueRef nrows = kern_min(k, kern_i64(k, AMX_MR), LLVMBuildSub(b, e->rows, r0, ""));
    LLVMValueRef inside =
        whole ? LLVMBuildICmp(b, LLVMIntEQ, nrows, kern_i64(k, AMX_MR), "inside") : LLVMConstInt(k->i1, 0, 0);
    LLVMValueRef grow = kern_add(k, e->m0, r0);
    LLVMValueRef cblk = kern_gep(k, e->C, kern_add(k, kern_mulc(k, grow, d->ldc), n0));
    LLVMValueRef cld = kern_i64(k, d->ldc * 4);

    /* where the sums start: zeros at the first block (or the residual), C after;
     * a block at C's edge goes through cbuf */
    LLVMValueRef src = cblk, ld = kern_i64(k, d->ldc);
    if (res_first) {
        LLVMValueRef rblk = kern_gep(k, e->R, kern_add(k, kern_mulc(k, grow, d->ldr), n0));
        src = LLVMBuildSelect(b, first, rblk, cblk, "");
        ld = LLVMBuildSelect(b, first, kern_i64(k, d->ldr), ld, "");
    }
    LLVMValueRef zero = res_first ? LLVMConstInt(k->i1, 0, 0) : first;
    LLVMBasicBlockRef binit = kern_block(k, "amx.init"), bfill = kern_block(k, "amx.fill"),
                      bload = kern_block(k, "amx.load"), bzero = kern_block(k, "amx.zero"),
                      bgo = kern_block(k, "amx.go");
    LLVMBuildCondBr(b, zero, bzero, binit);
    LLVMPositionBuilderAtEnd(b, binit);
    LLVMBuildCondBr(b, inside, bload, bfill);
    LLVMPositionBuilderAtEnd(b, bfill);
    fill_cbuf(e, src, ld, nrows, lanes);
    LLVMBuildBr(b, bload);
    LLVMPositionBuilderAtEnd(b, bload);
    LLVMValueRef from = LLVMBuildSelect(b, inside, src, e->cbuf, "");
    LLVMValueRef fld = LLVMBuildSelect(b, inside, kern_mulc(k, ld, 4), cstride, "");
    LLVMValueRef tl[4], tz[4], init[4];
    block_load(e, from, fld, tl);
    LLVMBuildBr(b, bgo);
    LLVMPositionBuilderAtEnd(b, bzero);
    LLVMValueRef zargs[2] = {i16c(e, 16), i16c(e, 64)};
    for (int i = 0; i < 4; i++)
        tz[i] = LLVMBuildCall2(b, e->t_zero, e->f_zero, zargs, 2, "");
    LLVMBuildBr(b, bgo);
    LLVMPositionBuilderAtEnd(b, bgo);
    for (int i = 0; i < 4; i++) {
        init[i] = LLVMBuildPhi(b, e->amx, "");
        LLVMValueRef v[2] = {tl[i], tz[i]};
        LLVMBasicBlockRef from_bb[2] = {bload, bzero};
        LLVMAddIncoming(init[i], v, from_bb, 2);
    }

    kern_for(k, &S, kern_i64(k, 0), e->ksteps, 1, 0, 4, init, "amx.k");
    LLVMValueRef a0 = bytes_at(e, e->abuf, kern_mulc(k, kern_add(k, kern_mulc(k, T.iv, p->kcs), S.iv), 2 * AMX_TILE));
    LLVMValueRef bstep = bytes_at(e, wblk, kern_mulc(k, S.iv, 2 * AMX_TILE));
    LLVMValueRef ta[2] = {tile_load(e, a0, astride), tile_load(e, bytes_at(e, a0, kern_i64(k, AMX_TILE)), astride)};
    LLVMValueRef tb[2] = {tile_load(e, bstep, bstride),
                          tile_load(e, bytes_at(e, bstep, kern_i64(k, AMX_TILE)), bstride)};
    LLVMValueRef acc[4];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) {
            LLVMValueRef a[6] = {i16c(e, 16), i16c(e, 64), i16c(e, 64), S.carry[i * 2 + j], ta[i], tb[j]};
            acc[i * 2 + j] = LLVMBuildCall2(b, e->t_dp, e->f_dp, a, 6, "");
        }
    kern_for_end(k, &S, acc);

    /* back to C: the epilogue after the last block; between blocks straight
     * from the tiles inside C, through cbuf at its edges */
    LLVMBasicBlockRef bepi = kern_block(k, "amx.epi"), bmid = kern_block(k, "amx.mid"),
                      bdirect = kern_block(k, "amx.direct"), bedge = kern_block(k, "amx.edge"),
                      bdone = kern_block(k, "amx.done");
    LLVMBuildCondBr(b, last, bepi, bmid);
    LLVMPositionBuilderAtEnd(b, bepi);
    block_store(e, e->cbuf, cstride, S.carry);
    store_cbuf(e, n0, r0, nrows, lanes, 1);
    LLVMBuildBr(b, bdone);
    LLVMPositionBuilderAtEnd(b, bmid);
    LLVMBuildCondBr(b, inside, bdirect, bedge);
    LLVMPositionBuilderAtEnd(b, bdirect);
    block_store(e, cblk, cld, S.carry);
    LLVMBuildBr(b, bdone);
    LLVMPositionBuilderAtEnd(b, bedge);
    block_store(e, e->cbuf, cstride, S.carry);
    store_cbuf(e, n0, r0, nrows, lanes, 0);
    LLVMBuildBr(b, bdone);
    LLVMPositionBuilderAtEnd(b, bdone);
    kern_for_end(k, &T, NULL);
    kern_for_end(k, &P, NULL);
}

/* VDPBF16PS: acc + the pairwise products of a and b (both 32 bf16, as
 * vectors of 16 i32 pairs: bitcast to the intrinsic's own types). */
static LLVMValueRef dot(amx_emit *e, LLVMValueRef acc, LLVMValueRef a, LLVMValueRef b)
{
    LLVMTypeRef pt[3];
    LLVMGetParamTypes(e->t_dot, pt);
    LLVMValueRef args[3] = {acc, LLVMBuildBitCast(e->k->b, a, pt[1], ""), LLVMBuildBitCast(e->k->b, b, pt[2], "")};
    return LLVMBuildCall2(e->k->b, e->t_dot, e->f_dot, args, 3, "");
}

/* emit_panels on AVX512-BF16: for each panel and each DOT_MR rows of the
 * task, C's 8 x 32 block in 16 registers from where the sums stand (zeros,
 * the residual, or C; masked past C's rows and columns), the block's steps,
 * then back to C (the epilogue after the last block). */
static void emit_panels_dot(amx_emit *e, LLVMValueRef pb, LLVMValueRef pe, const int lanes[2])
{
    kern *k = e->k;
    LLVMBuilderRef b = k->b;
    const cg_gemm_desc *d = e->d;
    const amx_plan *p = e->p;
    int res_first = r_starts_sums(d, p), res_late = r_in_epilogue(d, p);
    int nh = lanes[1] ? 2 : 1; /* the padded panel may have no second half */
    LLVMTypeRef v16i = LLVMVectorType(k->i32, 16);
    LLVMValueRef first, last;
    kblock_ends(e, &first, &last);
    kern_loop P, G, S;
    kern_for(k, &P, pb, pe, 1, 0, 0, NULL, "dot.panel");
    LLVMValueRef n0 = kern_mulc(k, P.iv, AMX_NR);
    LLVMValueRef wblk = panel_block(e, P.iv);
    kern_for(k, &G, kern_i64(k, 0), kern_cdiv(k, e->rows, kern_i64(k, DOT_MR)), 1, 0, 0, NULL, "dot.rows");
    LLVMValueRef r0 = kern_mulc(k, G.iv, DOT_MR);
    LLVMValueRef nrows = LLVMBuildSub(b, e->rows, r0, "");
    LLVMValueRef grow = kern_add(k, e->m0, r0);
    /* row r's mask of half h: its lanes while r is one of the task's rows */
    LLVMValueRef mask[DOT_MR][2];
    for (int r = 0; r < DOT_MR; r++) {
        LLVMValueRef in = LLVMBuildICmp(b, LLVMIntSGT, nrows, kern_i64(k, r), "");
        for (int h = 0; h < nh; h++)
            mask[r][h] = kern_lanes_below(k, LLVMBuildSelect(b, in, kern_i64(k, lanes[h]), kern_i64(k, 0), ""));
    }
    LLVMValueRef src = kern_gep(k, e->C, kern_add(k, kern_mulc(k, grow, d->ldc), n0)), ld = kern_i64(k, d->ldc);
    if (res_first) {
        LLVMValueRef rblk = kern_gep(k, e->R, kern_add(k, kern_mulc(k, grow, d->ldr), n0));
        src = LLVMBuildSelect(b, first, rblk, src, "");
        ld = LLVMBuildSelect(b, first, kern_i64(k, d->ldr), ld, "");
    }
    LLVMValueRef init[DOT_MR * 2], zero = kern_vconst(k, 0.0f);
    for (int r = 0; r < DOT_MR; r++)
        for (int h = 0; h < nh; h++) {
            LLVMValueRef x =
                kern_vload_masked(k, kern_gep(k, src, kern_addc(k, kern_mulc(k, ld, r), h * 16)), mask[r][h], NULL);
            init[r * nh + h] = res_first ? x : LLVMBuildSelect(b, first, zero, x, "");
        }

    /* the block's steps: 16 pairs of k each, 2 KiB of A (this group's rows
     * at 64 bytes apart inside its 32-row block) and two B tiles */
    LLVMValueRef arow = kern_mulc(k, LLVMBuildURem(b, r0, kern_i64(k, AMX_MR), ""), 64);
    LLVMValueRef ablk = LLVMBuildUDiv(b, r0, kern_i64(k, AMX_MR), "");
    kern_for(k, &S, kern_i64(k, 0), e->ksteps, 1, 0, DOT_MR * nh, init, "dot.k");
    LLVMValueRef a0 = bytes_at(
        e, e->abuf, kern_add(k, kern_mulc(k, kern_add(k, kern_mulc(k, ablk, p->kcs), S.iv), 2 * AMX_TILE), arow));
    LLVMValueRef bstep = bytes_at(e, wblk, kern_mulc(k, S.iv, 2 * AMX_TILE));
    LLVMValueRef acc[DOT_MR * 2];
    memcpy(acc, S.carry, sizeof(LLVMValueRef) * DOT_MR * (size_t)nh);
    for (int kp = 0; kp < AMX_KS / 2; kp++) {
        LLVMValueRef bv[2];
        for (int h = 0; h < nh; h++) {
            LLVMValueRef ld16 = LLVMBuildLoad2(b, v16i, bytes_at(e, bstep, kern_i64(k, h * AMX_TILE + kp * 64)), "");
            LLVMSetAlignment(ld16, 4);
            bv[h] = ld16;
        }
        for (int r = 0; r < DOT_MR; r++) {
            LLVMValueRef pair = LLVMBuildLoad2(b, k->i32, bytes_at(e, a0, kern_i64(k, r * 64 + kp * 4)), "");
            LLVMSetAlignment(pair, 4);
            LLVMValueRef av = LLVMBuildInsertElement(b, LLVMGetPoison(v16i), pair, LLVMConstInt(k->i32, 0, 0), "");
            av = LLVMBuildShuffleVector(b, av, LLVMGetPoison(v16i), LLVMConstNull(v16i), "");
            for (int h = 0; h < nh; h++)
                acc[r * nh + h] = dot(e, acc[r * nh + h], av, bv[h]);
        }
    }
    kern_for_end(k, &S, acc);

    /* back to C: the epilogue after the last block, else the sums as they are */
    LLVMBasicBlockRef bepi = kern_block(k, "dot.epi"), bmid = kern_block(k, "dot.mid"),
                      bdone = kern_block(k, "dot.done");
    LLVMBuildCondBr(b, last, bepi, bmid);
    for (int epi = 1; epi >= 0; epi--) {
        LLVMPositionBuilderAtEnd(b, epi ? bepi : bmid);
        for (int h = 0; h < nh; h++) {
            LLVMValueRef col = kern_addc(k, n0, h * 16);
            LLVMValueRef bias = epi && d->has_bias ? kern_vload(k, kern_gep(k, e->bias, col), lanes[h], NULL) : NULL;
            for (int r = 0; r < DOT_MR; r++) {
                LLVMValueRef row = kern_addc(k, grow, r), x = S.carry[r * nh + h];
                if (epi) {
                    if (bias)
                        x = LLVMBuildFAdd(b, x, bias, "");
                    x = kern_activation(k, x, (ir_act)d->activation);
                    if (res_late) {
                        LLVMValueRef rv = kern_vload_masked(
                            k, kern_gep(k, e->R, kern_add(k, kern_mulc(k, row, d->ldr), col)), mask[r][h], NULL);
                        x = d->gate ? LLVMBuildFMul(b, x, rv, "") : LLVMBuildFAdd(b, x, rv, "");
                    }
                }
                kern_vstore_masked(k, x, kern_gep(k, e->C, kern_add(k, kern_mulc(k, row, d->ldc), col)), mask[r][h]);
            }
        }
        LLVMBuildBr(b, bdone);
    }
    LLVMPositionBuilderAtEnd(b, bdone);
    kern_for_end(k, &G, NULL);
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
    e->abuf = LLVMBuildArrayAlloca(b, e->i8, kern_i64(k, p->mc_max * p->kcs * AMX_KS * 2), "abuf");
    LLVMSetAlignment(e->abuf, 64);
    if (!e->f_dot) { /* the tiles' edge buffer */
        e->cbuf = LLVMBuildArrayAlloca(b, k->f32, kern_i64(k, AMX_MR * AMX_NR), "cbuf");
        LLVMSetAlignment(e->cbuf, 64);
    }
    void (*panels)(amx_emit *, LLVMValueRef, LLVMValueRef, const int[2]) = e->f_dot ? emit_panels_dot : emit_panels;
    LLVMValueRef args, nmb, mc, nnb, a[5];
    kern_task_closure(k, fn, &args, &nmb, &mc, &nnb);
    LLVMValueRef M = kern_args_read(k, argsty, args, 5, a);
    e->A = a[0], e->W = a[1], e->bias = a[2], e->R = a[3], e->C = a[4];
    kern_loop T, KB;
    LLVMValueRef ni, mi;
    kern_task_loop(k, fn, &T, nmb, &ni, &mi);
    e->m0 = kern_mul(k, mi, mc);
    e->rows = LLVMBuildSub(b, kern_min(k, M, kern_add(k, e->m0, mc)), e->m0, "rows");
    LLVMValueRef p0 = LLVMBuildSDiv(b, kern_mulc(k, ni, p->npanels), nnb, "p0");
    LLVMValueRef p1 = LLVMBuildSDiv(b, kern_mulc(k, kern_addc(k, ni, 1), p->npanels), nnb, "p1");
    kern_for(k, &KB, kern_i64(k, 0), kern_i64(k, p->nkb), 1, 0, 0, NULL, "amx.kb");
    e->kb = KB.iv;
    e->ksteps =
        kern_min(k, kern_i64(k, p->kcs), LLVMBuildSub(b, kern_i64(k, p->steps), kern_mulc(k, KB.iv, p->kcs), ""));
    emit_convert_a(e);
    int full[2] = {16, 16};
    if (p->nfull)
        panels(e, p0, kern_min(k, p1, kern_i64(k, p->nfull)), full);
    if (p->nfull < p->npanels) { /* the padded last panel, when it is the task's */
        LLVMBasicBlockRef brem = kern_block(k, "amx.rem"), bjoin = kern_block(k, "amx.rem.join");
        LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntEQ, p1, kern_i64(k, p->npanels), ""), brem, bjoin);
        LLVMPositionBuilderAtEnd(b, brem);
        panels(e, kern_i64(k, p->nfull), kern_i64(k, p->npanels), p->rem_lanes);
        LLVMBuildBr(b, bjoin);
        LLVMPositionBuilderAtEnd(b, bjoin);
    }
    kern_for_end(k, &KB, NULL);
    kern_for_end(k, &T, NULL);
    LLVMBuildRetVoid(b);
    return fn;
}

/* The driver's split: the fewest row blocks the A buffer allows, evened out, then column blocks until there are
 * AMX_TASKS_PER_THREAD tasks per thread (at most one per panel). */
static kern_split split(kern *k, void *gen, LLVMValueRef M, LLVMValueRef nt)
{
    const amx_plan *p = ((const amx_emit *)gen)->p;
    return kern_split_panels(k, M, AMX_MR, p->mc_max, p->npanels, AMX_TASKS_PER_THREAD, nt);
}

static LLVMValueRef build_task(kern *k, void *gen, const char *name, LLVMTypeRef argsty)
{
    (void)k;
    return emit_task(gen, name, argsty);
}

/* The AMX intrinsics, or VDPBF16PS without AMX; -1 when this LLVM lacks them. */
static int prepare(kern *k, void *gen)
{
    amx_emit *e = gen;
    e->k = k;
    e->amx = LLVMX86AMXTypeInContext(k->ctx);
    e->i8 = LLVMInt8TypeInContext(k->ctx);
    e->i16 = LLVMInt16TypeInContext(k->ctx);
    if (k->t.amx_bf16) {
        e->f_load = kern_intrinsic(k, "llvm.x86.tileloadd64.internal", NULL, 0, &e->t_load);
        e->f_dp = kern_intrinsic(k, "llvm.x86.tdpbf16ps.internal", NULL, 0, &e->t_dp);
        e->f_store = kern_intrinsic(k, "llvm.x86.tilestored64.internal", NULL, 0, &e->t_store);
        e->f_zero = kern_intrinsic(k, "llvm.x86.tilezero.internal", NULL, 0, &e->t_zero);
        return e->f_load && e->f_dp && e->f_store && e->f_zero ? 0 : -1;
    }
    e->f_dot = kern_intrinsic(k, "llvm.x86.avx512bf16.dpbf16ps.512", NULL, 0, &e->t_dot);
    return e->f_dot && LLVMCountParamTypes(e->t_dot) == 3 ? 0 : -1;
}

static void task_name(const kern *k, const void *gen, char *buf, size_t len)
{
    const amx_emit *e = gen;
    const cg_gemm_desc *d = e->d;
    (void)k;
    snprintf(buf, len, "vitc.%s.K%lld.N%lld.a%lld.c%lld.r%lld.e%d%d%d", e->f_dot ? "bf16dot" : "amx", (long long)d->K,
             (long long)d->N, (long long)d->lda, (long long)d->ldc, (long long)d->ldr, d->has_bias ? 1 : 0,
             d->has_residual ? 1 + (d->gate != 0) : 0, d->activation);
}

LLVMValueRef cg_gemm_amx_emit(LLVMModuleRef mod, const char *name, const cg_gemm_desc *d, const cg_target *t)
{
    amx_plan p;
    amx_emit e = {.d = d, .p = &p};
    kern_kernel kk = {.nptr = 5, .prepare = prepare, .task_name = task_name, .task = build_task, .split = split,
                      .gen = &e};
    return amx_plan_make(d, t, &p) ? NULL : kern_emit(mod, t, name, &kk);
}
