/* gemm.c: GEMM with constant weights packed at compile time and a fused
 * epilogue (bias, activation, residual): the kernel of every Linear node.
 *
 * Packed layout: W is cut into panels of NR = 2 vectors of columns; panel p
 * holds, for every k, the NR floats W[k, p*NR .. p*NR+NR) (zeros past N), so
 * a panel is one contiguous K x NR block and any K block of it is contiguous.
 *
 * Work: the driver cuts C into nmb row blocks of mc rows and nnb column
 * blocks of whole panels (their sizes differ by one panel at most), handed
 * to the runtime's parallel_for as nmb * nnb tasks; both are chosen at run
 * time from M and the thread count (emit_driver).  K is cut into blocks of
 * kc (a B micro-panel of kc x NR, 16 KiB, stays in L1 while the rows of the
 * task go by).  A task whose rows of A (all of K) fit three quarters of the
 * L2 walks panels, then K blocks, then rows by MR: B in memory order, each
 * panel's C tile in cache across its K blocks (`gemm_bench --cold 1`: the
 * face ViT's layers 6-8% faster, ViT-B's K = 768 layers within the noise);
 * a task with more walks K blocks, then panels, then rows, so that A's K
 * block stays in L2 (ViT-B's fc2, K = 3072, was 5-9% slower the other way),
 * unless B's whole K x NR panel fits half the L2: such a layer is not cut
 * into K blocks at all (gemm_plan_make).  A task of one tile of rows walks
 * the panels outside whatever its K (emit_task).
 * Each step is one micro-kernel call (kern_uk.h) that keeps an MR x NR tile
 * of C in registers, reads A in place and applies the epilogue before the
 * only store. */
#include "codegen/llvm/kern_uk.h"

#include <stdio.h>
#include <string.h>

enum { TASKS_PER_THREAD = 4, PPB_MAX = 8, SMALL_M_TILES = 17 }; /* see emit_driver */
enum { B_BLOCK_BYTES = 16384 }; /* a K block's B micro-panel */

typedef struct {
    int vf, nv, nr, mr;
    int64_t npanels, nfull; /* panels of nr columns; those without padding */
    int rem_nv, rem_lanes;  /* the padded last panel, when N % nr != 0 */
    int64_t kc, nkb;        /* K blocks */
    int64_t mc_max;         /* largest row block of a task */
    int64_t rows_max;       /* most rows a task may have (mc_max, or SMALL_M_TILES tiles) */
    int64_t l2;             /* the L2's bytes per core (the target's, else 512 KiB) */
    int64_t a_budget;       /* bytes of A a task may keep in L2 (see emit_task) */
    int pf_l1;              /* the next B block is prefetched into L1 too */
} gemm_plan;

static int gemm_plan_make(const cg_gemm_desc *d, const cg_target *t, gemm_plan *p)
{
    memset(p, 0, sizeof *p);
    if (!d || !t || d->K < 1 || d->N < 1 || d->lda < d->K || d->ldc < d->N ||
        (d->has_residual && d->ldr != 0 && d->ldr < d->N) || d->activation < 0 || d->activation >= IR_ACT_COUNT ||
        (t->vec_floats != 4 && t->vec_floats != 8 && t->vec_floats != 16))
        return -1;
    p->vf = t->vec_floats;
    kern_uk_shape(t, &p->mr, &p->nv);
    p->nr = p->nv * p->vf;
    p->npanels = (d->N + p->nr - 1) / p->nr;
    p->nfull = d->N / p->nr;
    int64_t rem = d->N - p->nfull * p->nr;
    if (rem) {
        p->rem_nv = (int)((rem + p->vf - 1) / p->vf);
        p->rem_lanes = (int)(rem - (int64_t)(p->rem_nv - 1) * p->vf);
    }
    p->mc_max = 12 * p->mr;
    p->rows_max = SMALL_M_TILES * p->mr > p->mc_max ? SMALL_M_TILES * p->mr : p->mc_max;
    p->l2 = t->l2_bytes > 0 ? t->l2_bytes : 512 * 1024;
    p->a_budget = p->l2 / 4 * 3;
    /* K blocks of at most 16 KiB of B micro-panel, of equal size (multiple
     * of 4 steps) but the last.  A residual after an activation cannot be
     * accumulated through C, so that case keeps K whole. */
    int64_t kc_max = B_BLOCK_BYTES / (p->nr * 4);
    p->nkb = (d->K + kc_max - 1) / kc_max;
    /* A layer whose task's rows of A can outgrow the L2 budget (K large: fc2)
     * would walk K blocks outside the panels (emit_task) and read and write
     * each C tile again, from L2, once per K block.  Where B's whole panel
     * fits half the L2 it keeps K whole instead: each tile's C stays in
     * registers over all of K, B comes from L2 and A from L2 or L3
     * (bench/design-notes.md, "K whole for fc2"). */
    if (p->rows_max * d->K * (int64_t)sizeof(float) > p->a_budget && d->K * p->nr * (int64_t)sizeof(float) <= p->l2 / 2)
        p->nkb = 1;
    if (d->has_residual && d->activation && !d->gate)
        p->nkb = 1;
    p->kc = (d->K + p->nkb - 1) / p->nkb;
    p->kc = (p->kc + 3) / 4 * 4;
    if (p->kc >= d->K)
        p->kc = d->K, p->nkb = 1;
    else
        p->nkb = (d->K + p->kc - 1) / p->kc;
    /* The next B block goes into L1 as well as L2 where the L1 holds three
     * blocks (this one, the next, and A's and C's lines of a tile), but a
     * whole panel of a layer not cut into K blocks only into L2
     * (bench/design-notes.md, "B prefetch into L1"). */
    p->pf_l1 = t->l1_bytes >= 3 * B_BLOCK_BYTES && p->kc * p->nr * (int64_t)sizeof(float) <= B_BLOCK_BYTES;
    return 0;
}

size_t cg_gemm_packed_bytes(const cg_gemm_desc *d, const cg_target *t)
{
    gemm_plan p;
    if (gemm_plan_make(d, t, &p))
        return 0;
    size_t bytes = (size_t)p.npanels * (size_t)d->K * (size_t)p.nr * sizeof(float);
    return (bytes + 63) / 64 * 64;
}

void cg_gemm_pack(const cg_gemm_desc *d, const cg_target *t, const float *W, float *out)
{
    gemm_plan p;
    if (gemm_plan_make(d, t, &p))
        return;
    size_t bytes = cg_gemm_packed_bytes(d, t);
    memset(out, 0, bytes);
    for (int64_t pn = 0; pn < p.npanels; pn++) {
        int64_t n0 = pn * p.nr, w = d->N - n0 < p.nr ? d->N - n0 : p.nr;
        for (int64_t k = 0; k < d->K; k++)
            memcpy(out + (pn * d->K + k) * p.nr, W + k * d->N + n0, (size_t)w * sizeof(float));
    }
}

/* Everything the task function's body needs while it is being emitted. */
typedef struct {
    const cg_gemm_desc *d;
    const gemm_plan *p;
    LLVMValueRef full[17], rem[17]; /* micro-kernels by rows */
    LLVMValueRef A, W, bias, R, C;
    LLVMValueRef m0, m1;
} gemm_emit;

/* One panel of one K block: all rows of the task; pf (or NULL) is the B
 * block read next, pf_lines its cache lines per whole tile of rows.  With a
 * residual, each tile's first K block also prefetches the next tile's rows
 * of R: a tile reads its residual before anything else, and in a model R
 * comes from memory (proj's, in place, was last written by the previous
 * block's fc2).  C without a residual is only written and is not prefetched
 * (bench/design-notes.md, "Residual prefetch"). */
static void emit_panel(kern *k, gemm_emit *e, LLVMValueRef *kernels, LLVMValueRef panel, LLVMValueRef k0,
                       LLVMValueRef kc, LLVMValueRef first, LLVMValueRef last, LLVMValueRef pf, LLVMValueRef pf_lines)
{
    const cg_gemm_desc *d = e->d;
    const gemm_plan *p = e->p;
    LLVMValueRef n0 = kern_mulc(k, panel, p->nr);
    LLVMValueRef boff = kern_mulc(k, kern_add(k, kern_mulc(k, panel, d->K), k0), p->nr);
    kern_uk_pf pfs = {.next = pf, .lines = pf_lines, .l1 = p->pf_l1,
                      .r_cols = d->ldr == 0 ? 0 : kernels == e->rem ? (int64_t)p->rem_nv * p->vf : p->nr};
    kern_uk_rows(k, kernels, p->mr, e->m0, e->m1, kern_gep(k, e->A, k0), d->lda, kern_gep(k, e->W, boff),
                 kern_gep(k, e->C, n0), d->ldc, d->has_residual ? kern_gep(k, e->R, n0) : NULL, d->ldr,
                 d->has_bias ? kern_gep(k, e->bias, n0) : NULL, NULL, kc, first, last, &pfs);
}

/* The cache lines of a B block to prefetch before each whole tile of the
 * task's rows: `lines` spread over the tiles, none unless `any` (there is a
 * next block). */
static LLVMValueRef lines_per_tile(kern *k, gemm_emit *e, LLVMValueRef any, LLVMValueRef lines)
{
    LLVMBuilderRef b = k->b;
    LLVMValueRef tiles = kern_max(k, LLVMBuildSDiv(b, LLVMBuildSub(b, e->m1, e->m0, ""), kern_i64(k, e->p->mr), ""),
                                  kern_i64(k, 1));
    return kern_cdiv(k, LLVMBuildSelect(b, any, lines, kern_i64(k, 0), ""), tiles);
}

/* The B block the task reads after panel `panel` of the K block at k0: the
 * next panel's, or after the task's last panel the first panel's of the next
 * K block (none after the last).  A layer's weights come from memory (a
 * model's do not fit the caches), and the hardware prefetcher starts afresh
 * on each block, so without this the micro-kernel waits for them, most of all
 * at batch 1 where each block serves few rows. */
static void next_block(kern *k, gemm_emit *e, LLVMValueRef panel, LLVMValueRef p0, LLVMValueRef p1, LLVMValueRef k0,
                       LLVMValueRef kc, LLVMValueRef *pf, LLVMValueRef *pf_lines)
{
    const cg_gemm_desc *d = e->d;
    const gemm_plan *p = e->p;
    LLVMBuilderRef b = k->b;
    LLVMValueRef np = kern_addc(k, panel, 1);
    LLVMValueRef in_task = LLVMBuildICmp(b, LLVMIntSLT, np, p1, "");
    LLVMValueRef k1 = kern_add(k, k0, kc);
    LLVMValueRef off = LLVMBuildSelect(b, in_task, kern_add(k, kern_mulc(k, np, d->K), k0),
                                       kern_add(k, kern_mulc(k, p0, d->K), k1), "");
    *pf = kern_gep(k, e->W, kern_mulc(k, off, p->nr));
    LLVMValueRef any = LLVMBuildOr(b, in_task, LLVMBuildICmp(b, LLVMIntSLT, k1, kern_i64(k, d->K), ""), "");
    *pf_lines = lines_per_tile(k, e, any, kern_cdiv(k, kern_mulc(k, kc, p->nr), kern_i64(k, 16)));
}

/* The padded last panel is the task's when its panels end at the last
 * (p1 == npanels): rem_panel_open branches there and returns the join block
 * that rem_panel_close ends the branch in. */
static LLVMBasicBlockRef rem_panel_open(kern *k, const gemm_emit *e, LLVMValueRef p1)
{
    LLVMBasicBlockRef brem = kern_block(k, "rempanel"), bjoin = kern_block(k, "rempanel.join");
    LLVMBuildCondBr(k->b, LLVMBuildICmp(k->b, LLVMIntEQ, p1, kern_i64(k, e->p->npanels), ""), brem, bjoin);
    LLVMPositionBuilderAtEnd(k->b, brem);
    return bjoin;
}

static void rem_panel_close(kern *k, LLVMBasicBlockRef bjoin)
{
    LLVMBuildBr(k->b, bjoin);
    LLVMPositionBuilderAtEnd(k->b, bjoin);
}

/* All panels [p0, p1) of one K block. */
static void emit_kblock(kern *k, gemm_emit *e, LLVMValueRef p0, LLVMValueRef p1, LLVMValueRef k0,
                        LLVMValueRef kc, LLVMValueRef first, LLVMValueRef last)
{
    const gemm_plan *p = e->p;
    if (p->nfull) {
        kern_loop L;
        kern_for(k, &L, p0, kern_min(k, p1, kern_i64(k, p->nfull)), 1, 0, 0, NULL, "panel");
        LLVMValueRef pf, pf_lines;
        next_block(k, e, L.iv, p0, p1, k0, kc, &pf, &pf_lines);
        emit_panel(k, e, e->full, L.iv, k0, kc, first, last, pf, pf_lines);
        kern_for_end(k, &L, NULL);
    }
    if (p->rem_nv) {
        LLVMBasicBlockRef bjoin = rem_panel_open(k, e, p1);
        emit_panel(k, e, e->rem, kern_i64(k, p->nfull), k0, kc, first, last, NULL, NULL);
        rem_panel_close(k, bjoin);
    }
}

/* The K block of loop KB: its start k0, its length kc (the last may be
 * shorter) and whether it is the first or the last. */
typedef struct {
    LLVMValueRef k0, kc, first, last;
} kblock;

static kblock kblock_at(kern *k, const gemm_emit *e, LLVMValueRef iv)
{
    const gemm_plan *p = e->p;
    LLVMBuilderRef b = k->b;
    kblock kb;
    kb.k0 = kern_mulc(k, iv, p->kc);
    kb.kc = kern_min(k, kern_i64(k, p->kc), LLVMBuildSub(b, kern_i64(k, e->d->K), kb.k0, ""));
    kb.first = LLVMBuildICmp(b, LLVMIntEQ, iv, kern_i64(k, 0), "first");
    kb.last = LLVMBuildICmp(b, LLVMIntEQ, iv, kern_i64(k, p->nkb - 1), "last");
    return kb;
}

/* K blocks outside, panels [p0, p1) inside: A's K block of the task's rows
 * stays in L2 while the panels go by; the task's C tile is read and written
 * again for each K block. */
static void emit_kblocks_outer(kern *k, gemm_emit *e, LLVMValueRef p0, LLVMValueRef p1)
{
    kern_loop KB;
    kern_for(k, &KB, kern_i64(k, 0), kern_i64(k, e->p->nkb), 1, 0, 0, NULL, "kb");
    kblock kb = kblock_at(k, e, KB.iv);
    emit_kblock(k, e, p0, p1, kb.k0, kb.kc, kb.first, kb.last);
    kern_for_end(k, &KB, NULL);
}

/* Panels [pb, pe) of one kind (kernels: full or padded) outside, K blocks
 * inside: B is read in the order it lies in memory, each panel's C tile
 * stays in cache across its K blocks, and A (the task's rows, all of K) is
 * read from L2 once per panel.  prefetch: the next B block into L2 while
 * these rows are computed, as next_block does. */
static void panel_kblocks(kern *k, gemm_emit *e, LLVMValueRef *kernels, LLVMValueRef pb, LLVMValueRef pe, int prefetch)
{
    const cg_gemm_desc *d = e->d;
    const gemm_plan *p = e->p;
    LLVMBuilderRef b = k->b;
    kern_loop L, KB;
    kern_for(k, &L, pb, pe, 1, 0, 0, NULL, "panel");
    kern_for(k, &KB, kern_i64(k, 0), kern_i64(k, p->nkb), 1, 0, 0, NULL, "kb");
    kblock kb = kblock_at(k, e, KB.iv);
    LLVMValueRef pf = NULL, pf_lines = NULL;
    if (prefetch) { /* the block after this one in memory, while it is the task's */
        LLVMValueRef next = kern_add(k, kern_add(k, kern_mulc(k, L.iv, d->K), kb.k0), kb.kc);
        pf = kern_gep(k, e->W, kern_mulc(k, next, p->nr));
        LLVMValueRef any = LLVMBuildICmp(b, LLVMIntSLT, next, kern_mulc(k, pe, d->K), "");
        pf_lines = lines_per_tile(k, e, any, kern_i64(k, (p->kc * p->nr + 15) / 16));
    }
    emit_panel(k, e, kernels, L.iv, kb.k0, kb.kc, kb.first, kb.last, pf, pf_lines);
    kern_for_end(k, &KB, NULL);
    kern_for_end(k, &L, NULL);
}

static void emit_panels_outer(kern *k, gemm_emit *e, LLVMValueRef p0, LLVMValueRef p1)
{
    const gemm_plan *p = e->p;
    if (p->nfull)
        panel_kblocks(k, e, e->full, p0, kern_min(k, p1, kern_i64(k, p->nfull)), 1);
    if (p->rem_nv) {
        LLVMBasicBlockRef bjoin = rem_panel_open(k, e, p1);
        panel_kblocks(k, e, e->rem, kern_i64(k, p->nfull), kern_i64(k, p->npanels), 0);
        rem_panel_close(k, bjoin);
    }
}

/* task(closure {args, nmb, mc, nnb}, begin, end): tasks t = ni * nmb + mi,
 * row block mi of mc rows, column block ni: panels [ni * P / nnb,
 * (ni + 1) * P / nnb) of the P panels. */
static LLVMValueRef emit_task(kern *k, gemm_emit *e, const char *name, LLVMTypeRef argsty)
{
    const cg_gemm_desc *d = e->d;
    const gemm_plan *p = e->p;
    LLVMBuilderRef b = k->b;
    LLVMValueRef fn = kern_func(k, name, kern_task_type(k), 1);
    LLVMValueRef args, nmb, mc, nnb, a[5];
    kern_task_closure(k, fn, &args, &nmb, &mc, &nnb);
    LLVMValueRef M = kern_args_read(k, argsty, args, 5, a);
    e->A = a[0], e->W = a[1], e->bias = a[2], e->R = a[3], e->C = a[4];

    kern_loop T;
    LLVMValueRef ni, mi;
    kern_task_loop(k, fn, &T, nmb, &ni, &mi);
    e->m0 = kern_mul(k, mi, mc);
    e->m1 = kern_min(k, M, kern_add(k, e->m0, mc));
    LLVMValueRef p0 = LLVMBuildSDiv(b, kern_mulc(k, ni, p->npanels), nnb, "p0");
    LLVMValueRef p1 = LLVMBuildSDiv(b, kern_mulc(k, kern_addc(k, ni, 1), p->npanels), nnb, "p1");
    if (p->nkb == 1) {
        emit_kblock(k, e, p0, p1, kern_i64(k, 0), kern_i64(k, d->K), NULL, NULL);
    } else {
        /* Panels outside the K blocks when the task's rows of A fit the L2
         * budget, else K blocks outside (A's K block stays in L2 instead),
         * but for a task of one tile of rows, whose A is read once per panel
         * either way: B is then read in memory order (bench/design-notes.md,
         * "One-tile tasks"). */
        int64_t arow = d->K * (int64_t)sizeof(float);
        if (p->rows_max * arow <= p->a_budget) {
            emit_panels_outer(k, e, p0, p1);
        } else {
            LLVMBasicBlockRef bp = kern_block(k, "panels.outer"), bk = kern_block(k, "kblocks.outer"),
                              bj = kern_block(k, "order.join");
            LLVMValueRef rows = LLVMBuildSub(b, e->m1, e->m0, "");
            LLVMValueRef fits = LLVMBuildOr(
                b, LLVMBuildICmp(b, LLVMIntSLE, kern_mulc(k, rows, arow), kern_i64(k, p->a_budget), ""),
                LLVMBuildICmp(b, LLVMIntSLE, rows, kern_i64(k, p->mr), ""), "a.fits");
            LLVMBuildCondBr(b, fits, bp, bk);
            LLVMPositionBuilderAtEnd(b, bp);
            emit_panels_outer(k, e, p0, p1);
            LLVMBuildBr(b, bj);
            LLVMPositionBuilderAtEnd(b, bk);
            emit_kblocks_outer(k, e, p0, p1);
            LLVMBuildBr(b, bj);
            LLVMPositionBuilderAtEnd(b, bj);
        }
    }
    kern_for_end(k, &T, NULL);
    LLVMBuildRetVoid(b);
    return fn;
}

/* driver(args, pool, pf, nthreads): picks the blocks and runs the tasks.
 * Each row block reads all of W again (from memory: a model's weights do not
 * stay in cache) and each column block all of A again (from L2 or L3).  Two
 * choices of row blocks: nmb0 = ceil(M / mc_max), the fewest the A block's
 * cache footprint allows, and, when M fits SMALL_M_TILES tiles, one.  Each
 * gets the fewest column blocks (at most PPB_MAX panels each) that make
 * T = TASKS_PER_THREAD * nthreads tasks, rounded up to a multiple of T, then
 * evened out (split_for: equal blocks, a task count the threads share); the
 * one that reads less again wins: nnb * M * K floats of A plus nmb * K * N
 * of W, W's counted W_REREAD times when it is larger than the L2 (it then
 * comes from memory or L3 again, A from L2).  At batch 1 every ViT-B layer
 * is then cut by columns only, each weight read once (bench/design-notes.md,
 * "W_REREAD"). */
#define MIN_TASK_FLOP 8000000 /* about 40 us of one core */
#define W_REREAD 4

typedef struct {
    LLVMValueRef nmb, nnb, cost;
} gemm_split;

static gemm_split split_for(kern *k, const gemm_plan *p, const cg_gemm_desc *d, LLVMValueRef M, LLVMValueRef nmb,
                            LLVMValueRef nt)
{
    LLVMValueRef np = kern_i64(k, p->npanels), tasks = kern_mulc(k, nt, TASKS_PER_THREAD);
    gemm_split s = {.nmb = nmb};
    LLVMValueRef nnb = kern_max(k, kern_cdiv(k, tasks, nmb), kern_i64(k, (p->npanels + PPB_MAX - 1) / PPB_MAX));
    LLVMValueRef total = kern_mul(k, kern_cdiv(k, kern_mul(k, nmb, nnb), tasks), tasks);
    s.nnb = kern_min(k, kern_cdiv(k, total, nmb), np);
    /* Equal column blocks, in a number of tasks the threads share evenly: the
     * smallest divisor of the panel count from nnb to 2 nnb that makes the
     * tasks a multiple of the threads, if there is one and its tasks are
     * still worth MIN_TASK_FLOP (36 panels in 8 blocks were blocks of 4 and
     * 5, 20 panels for one thread and 16 for the other; in 12 blocks of 3, 18
     * each: ViT-S batch 1 3% faster).  Smaller tasks cost more than they
     * balance: ViT-Ti's layers at batch 1 in 6 blocks instead of 4 made the
     * model 5-8% slower. */
    LLVMBuilderRef b = k->b;
    LLVMValueRef best = s.nnb;
    LLVMValueRef rows = kern_cdiv(k, M, nmb), twice = kern_mulc(k, s.nnb, 2);
    for (int64_t dv = p->npanels; dv >= 1; dv--) {
        if (p->npanels % dv)
            continue;
        LLVMValueRef c = kern_i64(k, dv);
        LLVMValueRef ok = LLVMBuildAnd(b, LLVMBuildICmp(b, LLVMIntSGE, c, s.nnb, ""),
                                       LLVMBuildICmp(b, LLVMIntSLE, c, twice, ""), "");
        LLVMValueRef flop = kern_mulc(k, rows, p->npanels / dv * p->nr * d->K * 2);
        ok = LLVMBuildAnd(b, ok, LLVMBuildICmp(b, LLVMIntSGE, flop, kern_i64(k, MIN_TASK_FLOP), ""), "");
        LLVMValueRef even = LLVMBuildICmp(b, LLVMIntEQ, LLVMBuildSRem(b, kern_mulc(k, nmb, dv), nt, ""),
                                          kern_i64(k, 0), "");
        best = LLVMBuildSelect(b, LLVMBuildAnd(b, ok, even, ""), c, best, "");
    }
    s.nnb = best;
    int64_t wreread = d->K * d->N * (int64_t)sizeof(float) > p->l2 ? W_REREAD : 1;
    s.cost = kern_add(k, kern_mul(k, s.nnb, M), kern_mulc(k, nmb, d->N * wreread));
    return s;
}

static kern_split split(kern *k, void *gen, LLVMValueRef M, LLVMValueRef nt)
{
    const gemm_emit *e = gen;
    const cg_gemm_desc *d = e->d;
    const gemm_plan *p = e->p;
    LLVMBuilderRef b = k->b;
    LLVMValueRef mrb = kern_cdiv(k, M, kern_i64(k, p->mr));
    LLVMValueRef nmb0 = kern_min(k, kern_cdiv(k, M, kern_i64(k, p->mc_max)), mrb);
    LLVMValueRef small = LLVMBuildICmp(b, LLVMIntSLE, M, kern_i64(k, (int64_t)SMALL_M_TILES * p->mr), "");
    gemm_split a = split_for(k, p, d, M, nmb0, nt);
    gemm_split c = split_for(k, p, d, M, LLVMBuildSelect(b, small, kern_i64(k, 1), nmb0, ""), nt);
    LLVMValueRef pick_c = LLVMBuildICmp(b, LLVMIntSLT, c.cost, a.cost, "");
    LLVMValueRef nmb = LLVMBuildSelect(b, pick_c, c.nmb, a.nmb, "");
    LLVMValueRef nnb = LLVMBuildSelect(b, pick_c, c.nnb, a.nnb, "");
    LLVMValueRef mc = kern_mulc(k, kern_cdiv(k, mrb, nmb), p->mr);
    nmb = kern_cdiv(k, M, mc);
    return (kern_split){.nblk = nmb, .blk = mc, .aux = nnb, .ntasks = kern_mul(k, nmb, nnb)};
}

/* The micro-kernels, then the task that calls them. */
static LLVMValueRef build_task(kern *k, void *gen, const char *name, LLVMTypeRef argsty)
{
    gemm_emit *e = gen;
    const cg_gemm_desc *d = e->d;
    const gemm_plan *p = e->p;
    kern_uk s = {
        .mr = p->mr, .nv = p->nv, .last_lanes = p->vf, .lda = d->lda, .a_ks = 1, .ldb = p->nr,
        .ldc = d->ldc, .ldr = d->ldr, .has_bias = d->has_bias, .has_res = d->has_residual && !d->gate,
        .gate = d->has_residual && d->gate, .act = d->activation, .alpha = 1.0f, .kblocked = p->nkb > 1,
    };
    if (kern_uk_set_panels(k, s, p->nfull, e->full, p->rem_nv, p->rem_nv, p->rem_lanes, 0, e->rem))
        return NULL;
    return emit_task(k, e, name, argsty);
}

/* The task depends on the description only: shared by equal layers. */
static void task_name(const kern *k, const void *gen, char *buf, size_t len)
{
    const gemm_emit *e = gen;
    const cg_gemm_desc *d = e->d;
    snprintf(buf, len, "vitc.gemm.%s.K%lld.N%lld.a%lld.c%lld.r%lld.e%d%d%d.l%lld", k->tag, (long long)d->K,
             (long long)d->N, (long long)d->lda, (long long)d->ldc, (long long)d->ldr, d->has_bias ? 1 : 0,
             d->has_residual ? 1 + (d->gate != 0) : 0, d->activation, (long long)e->p->a_budget);
}

LLVMValueRef cg_gemm_emit(LLVMModuleRef mod, const char *name, const cg_gemm_desc *d, const cg_target *t)
{
    gemm_plan p;
    gemm_emit e = {.d = d, .p = &p};
    kern_kernel kk = {.nptr = 5, .task_name = task_name, .task = build_task, .split = split, .gen = &e};
    return gemm_plan_make(d, t, &p) ? NULL : kern_emit(mod, t, name, &kk);
}
