/* gemm_i8.c: the Linear GEMM on int8 operands with int32 sums, dequantized
 * to fp32 in the epilogue:
 *     C[m, n] = act(sa[m] * sw[n] * (sum_k A[m, k] * W[k, n] - za[m] * colsum[n]) + bias[n]) (+|*) R[m, n]
 * with A unsigned 8-bit (zero point za, scale sa: one for the tensor or one
 * per row), W signed 8-bit (scale sw per output column) and colsum[n] the
 * sum of W's column n, made when W is packed.  The sums are exact in int32
 * (K up to 2^31 / (255 * 128), about 65000); A's zero point is subtracted
 * from them in int32 as well, so the only rounding is the conversion to
 * float and the scaling.
 *
 * Four ways to the sums, picked from the target and W (i8_plan_make), each
 * with W packed its own way:
 *   amx      t->amx_int8 (and K up to AMX8_MAX_STEPS * 64): TDPBUSD on AMX
 *            tiles;
 *   vnni     t->vnni: VPDPBUSD (AVX512-VNNI on 16-lane vectors, AVX-VNNI or
 *            AVX512-VNNI with VL on 8-lane ones);
 *   maddubs  t->madd16 (AVX2, AVX512BW) without VNNI, with d->maddubs
 *            (where it pays for W, cg_gemm_i8_maddubs_pays): VPMADDUBSW sums
 *            each pair of u8 x s8 products into 16 bits, VPMADDWD by ones
 *            each two of those into a 32-bit lane, VPDPBUSD's sum in two
 *            instructions and an add; the pairs it cannot take (below) fixed
 *            up after;
 *   wide     t->madd16 without VNNI, any W: A's bytes zero-extended and W's
 *            sign-extended to 16 bits, each pair of products summed into a
 *            32-bit lane (VPMADDWD), twice maddubs's instructions.
 *
 * VPMADDUBSW saturates its 16-bit sums a0 w0 + a1 w1 (a in 0..255): they
 * are exact for every A where the pair's positive weights sum to at most
 * 128 and its negative ones to at least -128 (255 * 128 = 32640).  Weights
 * in -64..64 always are; --precision int8 on a target with this path picks
 * each column's step so that all its pairs (k 2i and 2i + 1) are
 * (pass_options.int8_pairs, passes/quant.c).  A pair of a column that is
 * not (cg_gemm_i8_pairs_fit) is packed as zeros in the panel and goes to a
 * fix of its panel: for that pair of k, every column's pair that does not
 * fit, as two int16 in a 32-bit lane (zeros for the others), which VPMADDWD
 * multiplies exactly with the row's two bytes of A widened to 16 bits.  A
 * quantized model's 8-bit weights need few: ONNX Runtime's dynamic export
 * of ViT-B/16 0.03% of its pairs, its static QDQ export 1.6%.
 *
 * ---- vnni, maddubs and wide ----
 * VPDPBUSD adds to each 32-bit lane the four products of that lane's four
 * unsigned bytes of its first operand and four signed bytes of its second.
 * The first is one row's A[m, 4g .. 4g + 3] broadcast to every lane, the
 * second 4 k of each of vf columns of W.  maddubs multiplies the same two
 * vectors.  The wide path takes the same broadcast, spreads its bytes into
 * two vectors of 16-bit pairs (A[4g], A[4g + 1]) and (A[4g + 2],
 * A[4g + 3]), and multiplies each with the matching pairs of W's words,
 * summing each pair into the lane.
 *
 * Packed W: N cut into panels of NR = 2 vf columns (zeros past N), K into
 * groups of 4 (zeros past K).  vnni and maddubs: panel p, group g is NR * 4
 * bytes at (p * groups + g) * NR * 4: column j's 4 bytes at j * 4, so a
 * vector load at h * vf * 4 is the group's half h.  wide: the group is NR * 8 bytes,
 * its pair q (k 4g + 2q and 4g + 2q + 1) at q * NR * 4: column j's two
 * int16 at j * 4.  After the panels, on every path: colsum as int32, then
 * sw as float, each npanels * NR long (zeros past N).  maddubs: then the
 * fixes: off[npanels + 1] (int32; panel p's fixes are [off[p], off[p + 1]),
 * off[npanels] of them in all), kpair[off[npanels]] (int32: the fix's
 * first k, even), then from the next multiple of 64 bytes NR * 4 bytes a
 * fix (column j's two int16 at j * 4).
 *
 * Work: the driver cuts C into row blocks of at most MC_GROUPS * MR rows
 * and column blocks of whole panels, two tasks per thread where the rows
 * allow.  A task walks its panels and, in each, its rows MR at a time: the
 * MR x NR block of sums in registers (2 MR vectors) over all of K, then the
 * epilogue from the registers to C.  A group of fewer than MR rows computes
 * its last row again in place of the missing ones and masks their stores;
 * a padded panel masks the columns past N.  The group K ends in (K not a
 * multiple of 4) reads A's last bytes one by one, never past the row.
 *
 * ---- amx ----
 * One TDPBUSD multiplies a 16 x 64 u8 tile of A by a 64 x 16 s8 tile of B
 * into a 16 x 16 int32 tile of C; B's tile holds its 64 rows of k in
 * quads: tile row i is, for each of the 16 columns n, B[4i .. 4i + 3][n].
 * Packed W: panels of 32 columns (two B tiles), K in steps of 64 (zeros
 * past N and K); panel p, step s, half h is one 1 KiB B tile at
 * ((p * steps + s) * 2 + h) * 1 KiB, so a panel's steps lie one after the
 * other; then colsum and sw as above (NR = 32).
 *
 * A task first copies its rows of A, all of K, into a buffer on its stack
 * laid out tile by tile: row r, step s at ((r / 32) * steps + s) * 2 KiB +
 * (r % 32) * 64 (zeros past K and for the rows from the task's last to the
 * next multiple of 32), at most AMX8_A_BYTES.  Then for each of its panels
 * and each K block of at most AMX8_KC_STEPS steps (the block's B, 16 KiB,
 * stays in L1 while the rows go by), for each 32 rows: the 2 x 2 block of C
 * tiles from zeros (first block) or from the int32 partial sums of those
 * rows, the block's steps (two A tiles, two B tiles, four products each),
 * and the tiles stored back to the partial sums, a buffer of 32 int32 a row
 * for the task's rows (at most AMX8_MC_TILES * 32, 64 KiB).  After the last
 * block the epilogue goes from there to C, row by row, masking the columns
 * past N.  So rows, N and K need no tile of their own at the edges: the
 * buffers' zeros and the packing's make the sums exact, the epilogue only
 * writes what C has.  The tiles are configured by LLVM in each task. */
#include "codegen/llvm/kern_ir.h"
#include "ir/opview.h"

#include <stdio.h>
#include <string.h>

enum {
    I8_MC_GROUPS = 16, /* row groups of a row block (vnni, maddubs, wide) */
    I8_TASKS_PER_THREAD = 2,
    AMX8_NR = 32,                  /* columns of a panel */
    AMX8_KS = 64,                  /* k of one step */
    AMX8_MR = 32,                  /* rows of one 2 x 2 block of C tiles */
    AMX8_TILE = 1024,              /* bytes of a tile: 16 rows of 64 bytes */
    AMX8_A_BYTES = 1024 * 1024,    /* the task's rows of A, on its stack */
    AMX8_MAX_STEPS = AMX8_A_BYTES / (AMX8_MR * AMX8_KS), /* steps of K for 32 rows in that buffer */
    AMX8_KC_STEPS = 8,             /* steps of a K block: its B is 16 KiB per panel */
    AMX8_MC_TILES = 16,            /* row blocks of at most 16 x 32 rows */
};

typedef enum { I8_AMX, I8_VNNI, I8_MADDUBS, I8_WIDE } i8_path;

typedef struct {
    i8_path path;
    int vf, nr, mr;          /* lanes per vector, columns of a panel (2 vf), rows of a block of sums */
    int64_t groups;          /* vnni, maddubs, wide: K / 4, rounded up */
    size_t group_bytes;      /* vnni, maddubs, wide: packed bytes of a group of a panel */
    int64_t steps, kcs, nkb; /* amx: steps of K, steps of a K block (the last may have fewer), K blocks */
    int64_t mc_max;          /* amx: rows of A a task's buffer holds (multiple of 32) */
    int64_t npanels, nfull;  /* panels; those without padding */
    int rem_lanes[2];        /* valid lanes of the padded panel's halves */
    size_t panel_bytes;      /* packed bytes of one panel */
} i8_plan;

static int i8_plan_make(const cg_gemm_i8_desc *di, const cg_target *t, i8_plan *p)
{
    memset(p, 0, sizeof *p);
    if (!di || !t)
        return -1;
    const cg_gemm_desc *d = &di->g;
    if (!cg_target_int8_ok(t) || d->K < 1 || d->N < 1 || d->K > 65000 || d->lda < d->K || d->ldc < d->N ||
        (d->has_residual && d->ldr != 0 && d->ldr < d->N) || d->activation < 0 || d->activation >= IR_ACT_COUNT)
        return -1;
    p->vf = t->vec_floats;
    p->nr = 2 * p->vf;
    int64_t steps = (d->K + AMX8_KS - 1) / AMX8_KS;
    if (t->amx_int8 && p->vf == 16 && steps <= AMX8_MAX_STEPS) {
        p->path = I8_AMX;
        p->mr = AMX8_MR;
        p->steps = steps;
        p->kcs = steps < AMX8_KC_STEPS ? steps : AMX8_KC_STEPS;
        p->nkb = (steps + p->kcs - 1) / p->kcs;
        p->mc_max = AMX8_A_BYTES / (steps * AMX8_KS) / AMX8_MR * AMX8_MR;
        if (p->mc_max > AMX8_MC_TILES * AMX8_MR)
            p->mc_max = AMX8_MC_TILES * AMX8_MR;
        p->panel_bytes = (size_t)steps * 2 * AMX8_TILE;
    } else if (t->vnni || t->madd16) {
        p->path = t->vnni ? I8_VNNI : di->maddubs ? I8_MADDUBS : I8_WIDE;
        /* accumulators, two vectors of W and a broadcast in the registers */
        p->mr = p->vf == 16 && t->nregs >= 32 ? 12 : p->path == I8_MADDUBS ? 5 : 6;
        p->groups = (d->K + 3) / 4;
        p->group_bytes = (size_t)p->nr * (p->path == I8_WIDE ? 8 : 4);
        p->panel_bytes = (size_t)p->groups * p->group_bytes;
    } else {
        return -1;
    }
    p->npanels = (d->N + p->nr - 1) / p->nr;
    p->nfull = d->N / p->nr;
    int64_t rem = d->N - p->nfull * p->nr;
    p->rem_lanes[0] = rem > p->vf ? p->vf : (int)rem;
    p->rem_lanes[1] = rem > p->vf ? (int)rem - p->vf : 0;
    return 0;
}

/* Bytes of the packed panels, colsum and sw: where maddubs's fixes start. */
static size_t fixes_at(const i8_plan *p)
{
    return (size_t)p->npanels * p->panel_bytes + 2 * (size_t)p->npanels * (size_t)p->nr * 4;
}

/* Whether w0 (k even) and w1 (its next k, 0 past K) fit VPMADDUBSW's 16 bits. */
static int pair_fits(int w0, int w1)
{
    return (w0 > 0 ? w0 : 0) + (w1 > 0 ? w1 : 0) <= 128 && (w0 < 0 ? w0 : 0) + (w1 < 0 ? w1 : 0) >= -128;
}

/* W[k, n] and W[k + 1, n] (0 past K) fit. */
static int fits_at(const int8_t *W, int64_t K, int64_t N, int64_t k, int64_t n)
{
    return pair_fits(W[k * N + n], k + 1 < K ? W[(k + 1) * N + n] : 0);
}

/* maddubs: the fixes of W, one for each panel and pair of k with a column
 * whose pair does not fit; with off, kpair and rec (the header's tables)
 * written as well: each panel's first fix in off (npanels + 1 entries), each
 * fix's k in kpair and its columns' pairs in its record at rec. */
static int64_t count_fixes(const i8_plan *p, const cg_gemm_desc *d, const int8_t *W, int32_t *off, int32_t *kpair,
                           uint8_t *rec)
{
    int64_t n = 0;
    for (int64_t pn = 0; pn < p->npanels; pn++) {
        if (off)
            off[pn] = (int32_t)n;
        for (int64_t k = 0; k < d->K; k += 2) {
            int fix = 0;
            for (int64_t c = pn * p->nr; c < d->N && c < (pn + 1) * p->nr; c++) {
                if (fits_at(W, d->K, d->N, k, c))
                    continue;
                fix = 1;
                if (!rec)
                    break;
                int16_t w2[2] = {W[k * d->N + c], W[(k + 1) * d->N + c]}; /* a lone k past K fits */
                memcpy(rec + (size_t)n * (size_t)p->nr * 4 + (size_t)(c - pn * p->nr) * 4, w2, sizeof w2);
            }
            if (fix && kpair)
                kpair[n] = (int32_t)k;
            n += fix;
        }
    }
    if (off)
        off[p->npanels] = (int32_t)n;
    return n;
}

/* Where maddubs's fix records start, for nfix fixes. */
static size_t fix_records_at(const i8_plan *p, int64_t nfix)
{
    return (fixes_at(p) + 4 * (size_t)(p->npanels + 1 + nfix) + 63) / 64 * 64;
}

size_t cg_gemm_i8_packed_bytes(const cg_gemm_i8_desc *d, const cg_target *t, const int8_t *W)
{
    i8_plan p;
    if (i8_plan_make(d, t, &p) || (p.path == I8_MADDUBS && !W))
        return 0;
    size_t bytes = fixes_at(&p);
    if (p.path == I8_MADDUBS) {
        int64_t nfix = count_fixes(&p, &d->g, W, NULL, NULL, NULL);
        bytes = fix_records_at(&p, nfix) + (size_t)nfix * (size_t)p.nr * 4;
    }
    return (bytes + 63) / 64 * 64;
}

int64_t cg_gemm_i8_fixes(const cg_gemm_i8_desc *d, const cg_target *t, const int8_t *W)
{
    i8_plan p;
    if (i8_plan_make(d, t, &p) || p.path != I8_MADDUBS || !W)
        return -1;
    return count_fixes(&p, &d->g, W, NULL, NULL, NULL);
}

int cg_gemm_i8_maddubs_pays(const cg_gemm_i8_desc *d, const cg_target *t, const int8_t *W)
{
    cg_gemm_i8_desc m = *d;
    m.maddubs = 1;
    i8_plan p;
    if (!W || i8_plan_make(&m, t, &p) || p.path != I8_MADDUBS)
        return 0;
    /* measured on a Zen 3 (gemm_i8_bench's maddubs8): a fix costs about
     * 1.4 groups of 4 k of maddubs, wide about 1.5 of them a group: up to
     * one fix for every four groups of a panel */
    return count_fixes(&p, &d->g, W, NULL, NULL, NULL) * 4 <= p.npanels * p.groups;
}

/* Where W[k, col] goes in the packed panels, in bytes (wide: an int16). */
static size_t packed_at(const i8_plan *p, int64_t k, int64_t col)
{
    int64_t pn = col / p->nr, j = col % p->nr, g = k / 4, i = k % 4;
    size_t at = (size_t)pn * p->panel_bytes;
    switch (p->path) {
    case I8_AMX:
        return at + (size_t)(((k / AMX8_KS) * 2 + j / 16) * AMX8_TILE + (k % AMX8_KS) / 4 * 64 + (j % 16) * 4 + i);
    case I8_VNNI:
    case I8_MADDUBS:
        return at + (size_t)g * p->group_bytes + (size_t)(j * 4 + i);
    default:
        return at + (size_t)g * p->group_bytes + (size_t)(((i / 2) * p->nr + j) * 4 + (i % 2) * 2);
    }
}

int cg_gemm_i8_pairs_fit(const int8_t *W, int64_t K, int64_t N)
{
    for (int64_t k = 0; k < K; k += 2)
        for (int64_t n = 0; n < N; n++)
            if (!fits_at(W, K, N, k, n))
                return 0;
    return 1;
}

int cg_gemm_i8_pack(const cg_gemm_i8_desc *di, const cg_target *t, const int8_t *W, const float *w_scale, void *out)
{
    i8_plan p;
    if (i8_plan_make(di, t, &p))
        return -1;
    const cg_gemm_desc *d = &di->g;
    memset(out, 0, cg_gemm_i8_packed_bytes(di, t, W));
    uint8_t *o = out;
    int32_t *colsum = (int32_t *)(o + (size_t)p.npanels * p.panel_bytes);
    float *sw = (float *)(colsum + p.npanels * p.nr);
    if (p.path == I8_MADDUBS) { /* the fixes, and their pairs out of the panels */
        int32_t *off = (int32_t *)(o + fixes_at(&p));
        int64_t nfix = count_fixes(&p, d, W, NULL, NULL, NULL);
        count_fixes(&p, d, W, off, off + p.npanels + 1, o + fix_records_at(&p, nfix));
    }
    for (int64_t k = 0; k < d->K; k++)
        for (int64_t n = 0; n < d->N; n++) {
            int8_t w = W[k * d->N + n];
            if (p.path == I8_MADDUBS && !fits_at(W, d->K, d->N, k & ~(int64_t)1, n))
                w = 0; /* in the panel's fix */
            if (p.path == I8_WIDE) {
                int16_t w16 = w;
                memcpy(o + packed_at(&p, k, n), &w16, sizeof w16);
            } else {
                o[packed_at(&p, k, n)] = (uint8_t)w;
            }
        }
    for (int64_t n = 0; n < d->N; n++) {
        int32_t s = 0;
        for (int64_t k = 0; k < d->K; k++)
            s += W[k * d->N + n];
        colsum[n] = s;
        sw[n] = w_scale[n];
    }
    return 0;
}

/* ---- emission ---- */

typedef struct {
    kern *k;
    const cg_gemm_i8_desc *di;
    const cg_gemm_desc *d;
    const i8_plan *p;
    LLVMTypeRef i8, i16, vi; /* i8, i16, <vf x i32> */
    LLVMValueRef f_dot;      /* VPDPBUSD (vnni) or VPMADDWD (maddubs, wide) on vf lanes */
    LLVMTypeRef t_dot;
    LLVMValueRef f_ub;       /* maddubs: VPMADDUBSW */
    LLVMTypeRef t_ub;
    LLVMTypeRef amx;         /* amx: the tile type and intrinsics */
    LLVMValueRef f_load, f_dp, f_store, f_zero;
    LLVMTypeRef t_load, t_dp, t_store, t_zero;
    LLVMValueRef A, W, bias, R, C, sa, za; /* the task's arguments */
    LLVMValueRef m0, rows;                 /* the task's first row and its row count */
    LLVMValueRef abuf, pbuf;               /* amx: the task's rows of A; its partial sums */
    LLVMValueRef epi;                      /* the epilogue function, or NULL */
} i8_emit;

static LLVMValueRef bytes_at(i8_emit *e, LLVMValueRef p, LLVMValueRef off)
{
    return LLVMBuildGEP2(e->k->b, e->i8, p, &off, 1, "");
}

static LLVMValueRef splat_i32(i8_emit *e, LLVMValueRef x)
{
    LLVMBuilderRef b = e->k->b;
    LLVMValueRef v = LLVMBuildInsertElement(b, LLVMGetPoison(e->vi), x, LLVMConstInt(e->k->i32, 0, 0), "");
    return LLVMBuildShuffleVector(b, v, LLVMGetPoison(e->vi), LLVMConstNull(e->vi), "");
}

/* The 4 bytes of A at p as one i32 (unaligned). */
static LLVMValueRef load_i32(i8_emit *e, LLVMValueRef p)
{
    LLVMValueRef x = LLVMBuildLoad2(e->k->b, e->k->i32, p, "");
    LLVMSetAlignment(x, 1);
    return x;
}

/* The first n (1..3) bytes at p as the low bytes of an i32, zeros above. */
static LLVMValueRef load_tail(i8_emit *e, LLVMValueRef p, int n)
{
    kern *k = e->k;
    LLVMValueRef x = LLVMConstInt(k->i32, 0, 0);
    for (int i = 0; i < n; i++) {
        LLVMValueRef by = LLVMBuildLoad2(k->b, e->i8, bytes_at(e, p, kern_i64(k, i)), "");
        LLVMSetAlignment(by, 1);
        LLVMValueRef w = LLVMBuildZExt(k->b, by, k->i32, "");
        if (i)
            w = LLVMBuildShl(k->b, w, LLVMConstInt(k->i32, (unsigned long long)(8 * i), 0), "");
        x = LLVMBuildOr(k->b, x, w, "");
    }
    return x;
}

/* A vector of type ty at p, aligned to align bytes. */
static LLVMValueRef load_vec(i8_emit *e, LLVMTypeRef ty, LLVMValueRef p, unsigned align)
{
    LLVMValueRef v = LLVMBuildLoad2(e->k->b, ty, p, "");
    LLVMSetAlignment(v, align);
    return v;
}

/* The constant <n x i32> vector of idx[i] (a negative entry: n, the first
 * lane of a shuffle's second operand). */
static LLVMValueRef shuffle_mask(i8_emit *e, const int *idx, int n)
{
    LLVMValueRef lanes[128];
    for (int i = 0; i < n; i++)
        lanes[i] = LLVMConstInt(e->k->i32, (unsigned long long)(idx[i] < 0 ? n : idx[i]), 0);
    return LLVMConstVector(lanes, (unsigned)n);
}

/* One group of 4 k of a block of rows: acc[r * nh + h] += the products of
 * row r's 4 bytes of A (av[r], broadcast to every lane) and the group's
 * columns of half h (packed at wg). */
static void group_dot(i8_emit *e, LLVMValueRef wg, const LLVMValueRef *av, int nh, LLVMValueRef *acc)
{
    kern *k = e->k;
    LLVMBuilderRef b = k->b;
    const i8_plan *p = e->p;
    int vf = p->vf, mr = p->mr;
    LLVMTypeRef v8 = LLVMVectorType(e->i8, (unsigned)(4 * vf)), v16 = LLVMVectorType(e->i16, (unsigned)(2 * vf));
    if (p->path == I8_VNNI || p->path == I8_MADDUBS) {
        int ub = p->path == I8_MADDUBS;
        LLVMValueRef wv[2], one[32];
        for (int i = 0; i < 2 * vf; i++)
            one[i] = LLVMConstInt(e->i16, 1, 0);
        LLVMValueRef ones = LLVMConstVector(one, (unsigned)(2 * vf)); /* maddubs: VPMADDWD's other operand */
        for (int h = 0; h < nh; h++)
            wv[h] = load_vec(e, ub ? v8 : e->vi, bytes_at(e, wg, kern_i64(k, h * vf * 4)), (unsigned)(vf * 4));
        for (int r = 0; r < mr; r++)
            for (int h = 0; h < nh; h++) {
                if (!ub) {
                    LLVMValueRef args[3] = {acc[r * nh + h], av[r], wv[h]};
                    acc[r * nh + h] = LLVMBuildCall2(b, e->t_dot, e->f_dot, args, 3, "");
                    continue;
                }
                LLVMValueRef ua[2] = {LLVMBuildBitCast(b, av[r], v8, ""), wv[h]};
                LLVMValueRef da[2] = {LLVMBuildCall2(b, e->t_ub, e->f_ub, ua, 2, ""), ones};
                LLVMValueRef sum = LLVMBuildCall2(b, e->t_dot, e->f_dot, da, 2, "");
                acc[r * nh + h] = LLVMBuildAdd(b, acc[r * nh + h], sum, "");
            }
        return;
    }
    /* wide: per pair q of k, VPMADDWD of the row's pair (A[4g + 2q],
     * A[4g + 2q + 1]) zero-extended in every lane and the columns' pairs */
    int spread[2][64];
    for (int j = 0; j < vf; j++)
        for (int q = 0; q < 2; q++) {
            spread[q][4 * j] = 4 * j + 2 * q, spread[q][4 * j + 1] = -1;
            spread[q][4 * j + 2] = 4 * j + 2 * q + 1, spread[q][4 * j + 3] = -1;
        }
    LLVMValueRef ws[2][2];
    for (int q = 0; q < 2; q++)
        for (int h = 0; h < nh; h++)
            ws[q][h] = load_vec(e, v16, bytes_at(e, wg, kern_i64(k, (q * p->nr + h * vf) * 4)), (unsigned)(vf * 4));
    for (int r = 0; r < mr; r++) {
        LLVMValueRef bytes = LLVMBuildBitCast(b, av[r], v8, "");
        for (int q = 0; q < 2; q++) {
            LLVMValueRef pairs = LLVMBuildShuffleVector(b, bytes, LLVMConstNull(v8), shuffle_mask(e, spread[q], 4 * vf),
                                                        "");
            pairs = LLVMBuildBitCast(b, pairs, v16, "");
            for (int h = 0; h < nh; h++) {
                LLVMValueRef args[2] = {pairs, ws[q][h]};
                acc[r * nh + h] =
                    LLVMBuildAdd(b, acc[r * nh + h], LLVMBuildCall2(b, e->t_dot, e->f_dot, args, 2, ""), "");
            }
        }
    }
}

/* ---- the epilogue, shared by the paths ---- */

/* The epilogue's columns of the panel at n0: for each half h < nh, colsum,
 * sw and (has_bias) lanes[h] columns of the bias. */
static void panel_consts(i8_emit *e, LLVMValueRef n0, const int lanes[2], int nh, LLVMValueRef cs[2],
                         LLVMValueRef sw[2], LLVMValueRef bias[2])
{
    kern *k = e->k;
    const i8_plan *p = e->p;
    LLVMValueRef colsum = bytes_at(e, e->W, kern_i64(k, (int64_t)((size_t)p->npanels * p->panel_bytes)));
    LLVMValueRef swp = bytes_at(e, colsum, kern_i64(k, p->npanels * p->nr * 4));
    for (int h = 0; h < nh; h++) {
        LLVMValueRef col = kern_addc(k, n0, h * p->vf);
        cs[h] = load_vec(e, e->vi, bytes_at(e, colsum, kern_mulc(k, col, 4)), 4);
        sw[h] = kern_vload(k, kern_gep(k, swp, col), p->vf, NULL);
        bias[h] = e->d->has_bias ? kern_vload(k, kern_gep(k, e->bias, col), lanes[h], NULL) : NULL;
    }
}

/* A's zero point and scale of row q (the row, or 0 per tensor), each splat. */
static void row_quant(i8_emit *e, LLVMValueRef q, LLVMValueRef *zv, LLVMValueRef *sv)
{
    kern *k = e->k;
    LLVMValueRef zp = LLVMBuildLoad2(k->b, k->i32, LLVMBuildGEP2(k->b, k->i32, e->za, &q, 1, ""), "za");
    LLVMValueRef sa = LLVMBuildLoad2(k->b, k->f32, kern_gep(k, e->sa, q), "sa");
    *zv = splat_i32(e, zp);
    *sv = kern_splat(k, sa);
}

/* C[row, col ..] where mask is set: the sums (vf lanes of int32) less
 * za * colsum in int32, scaled by sa * sw, plus bias, the activation, then
 * the residual added or (gate) multiplied. */
static void dequant_store(i8_emit *e, LLVMValueRef sums, LLVMValueRef zv, LLVMValueRef sv, LLVMValueRef cs,
                          LLVMValueRef sw, LLVMValueRef bias, LLVMValueRef row, LLVMValueRef col, LLVMValueRef mask)
{
    kern *k = e->k;
    LLVMBuilderRef b = k->b;
    const cg_gemm_desc *d = e->d;
    LLVMValueRef t = LLVMBuildSub(b, sums, LLVMBuildMul(b, zv, cs, ""), "");
    LLVMValueRef x = LLVMBuildSIToFP(b, t, k->vty, "");
    LLVMValueRef s = LLVMBuildFMul(b, sv, sw, "");
    const float(*fq)[5] = e->di->fq;
    if (ir_fake_quant_any(fq, 2)) { /* the graph's ops one by one, each rounded, its points between */
        x = LLVMBuildFMul(b, x, s, "");
        x = fq[0][1] != 0 ? kern_vfake_quant(k, x, fq[0]) : x;
        x = bias ? LLVMBuildFAdd(b, x, bias, "") : x;
        x = fq[1][1] != 0 ? kern_vfake_quant(k, x, fq[1]) : x;
    } else {
        x = bias ? kern_fma(k, x, s, bias) : LLVMBuildFMul(b, x, s, "");
    }
    x = kern_activation(k, x, (ir_act)d->activation);
    if (d->has_residual) {
        LLVMValueRef rv =
            kern_vload_masked(k, kern_gep(k, e->R, kern_add(k, kern_mulc(k, row, d->ldr), col)), mask, NULL);
        x = d->gate ? LLVMBuildFMul(b, x, rv, "") : LLVMBuildFAdd(b, x, rv, "");
    }
    if (e->epi)
        x = LLVMBuildCall2(b, LLVMGlobalGetValueType(e->epi), e->epi, &x, 1, "");
    kern_vstore_masked(k, x, kern_gep(k, e->C, kern_add(k, kern_mulc(k, row, d->ldc), col)), mask);
}

/* ---- vnni, maddubs and wide: sums in registers ---- */

/* maddubs: panel pn's fixes into acc (mr * nh sums), the rows' A at
 * arow[r]: for each, the row's two bytes at the fix's k widened to a pair
 * of int16 in every lane, times the fix's pairs (VPMADDWD). */
static void emit_fixes(i8_emit *e, LLVMValueRef pn, LLVMValueRef *arow, int nh, LLVMValueRef *acc)
{
    kern *k = e->k;
    LLVMBuilderRef b = k->b;
    const i8_plan *p = e->p;
    int vf = p->vf, mr = p->mr, n = mr * nh;
    LLVMValueRef off = bytes_at(e, e->W, kern_i64(k, (int64_t)fixes_at(p)));
    LLVMValueRef kpair = bytes_at(e, off, kern_i64(k, 4 * (p->npanels + 1)));
    LLVMValueRef at[3], idx[3] = {pn, kern_addc(k, pn, 1), kern_i64(k, p->npanels)};
    for (int i = 0; i < 3; i++)
        at[i] = LLVMBuildSExt(b, LLVMBuildLoad2(b, k->i32, LLVMBuildGEP2(b, k->i32, off, &idx[i], 1, ""), ""), k->i64,
                              "");
    /* the records from the first multiple of 64 bytes past kpair[all] */
    LLVMValueRef rec_at = kern_mulc(k, kern_cdiv(k, kern_addc(k, kern_mulc(k, at[2], 4),
                                                             (int64_t)fixes_at(p) + 4 * (p->npanels + 1)),
                                                 kern_i64(k, 64)),
                                    64);
    LLVMTypeRef v16 = LLVMVectorType(e->i16, (unsigned)(2 * vf));
    kern_loop F;
    kern_for(k, &F, at[0], at[1], 1, 0, n, acc, "i8.fix");
    LLVMValueRef kk = LLVMBuildSExt(b, LLVMBuildLoad2(b, k->i32, LLVMBuildGEP2(b, k->i32, kpair, &F.iv, 1, ""), ""),
                                    k->i64, "");
    LLVMValueRef rec = bytes_at(e, e->W, kern_add(k, rec_at, kern_mulc(k, F.iv, (int64_t)p->nr * 4)));
    LLVMValueRef wv[2], next[KERN_MAX_CARRY];
    for (int h = 0; h < nh; h++)
        wv[h] = load_vec(e, v16, bytes_at(e, rec, kern_i64(k, h * vf * 4)), (unsigned)(vf * 4));
    for (int r = 0; r < mr; r++) {
        LLVMValueRef two = LLVMBuildLoad2(b, e->i16, bytes_at(e, arow[r], kk), "");
        LLVMSetAlignment(two, 1);
        LLVMValueRef x = LLVMBuildZExt(b, two, k->i32, "");
        x = LLVMBuildOr(b, LLVMBuildAnd(b, x, LLVMConstInt(k->i32, 0xff, 0), ""),
                        LLVMBuildShl(b, LLVMBuildLShr(b, x, LLVMConstInt(k->i32, 8, 0), ""),
                                     LLVMConstInt(k->i32, 16, 0), ""),
                        "");
        LLVMValueRef pairs = LLVMBuildBitCast(b, splat_i32(e, x), v16, "");
        for (int h = 0; h < nh; h++) {
            LLVMValueRef args[2] = {pairs, wv[h]};
            LLVMValueRef sum = LLVMBuildCall2(b, e->t_dot, e->f_dot, args, 2, "");
            next[r * nh + h] = LLVMBuildAdd(b, F.carry[r * nh + h], sum, "");
        }
    }
    kern_for_end(k, &F, next);
    memcpy(acc, F.carry, sizeof(LLVMValueRef) * (size_t)n);
}

/* Panels [pb, pe) over the task's rows, MR at a time; lanes: the valid
 * columns of each half of these panels. */
static void emit_panels(i8_emit *e, LLVMValueRef pb, LLVMValueRef pe, const int lanes[2])
{
    kern *k = e->k;
    LLVMBuilderRef b = k->b;
    const cg_gemm_desc *d = e->d;
    const i8_plan *p = e->p;
    int vf = p->vf, mr = p->mr, nh = lanes[1] ? 2 : 1;
    kern_loop P, G, S;
    kern_for(k, &P, pb, pe, 1, 0, 0, NULL, "i8.panel");
    LLVMValueRef n0 = kern_mulc(k, P.iv, p->nr);
    LLVMValueRef wp = bytes_at(e, e->W, kern_mulc(k, P.iv, (int64_t)p->panel_bytes));
    kern_for(k, &G, kern_i64(k, 0), kern_cdiv(k, e->rows, kern_i64(k, mr)), 1, 0, 0, NULL, "i8.rows");
    LLVMValueRef r0 = kern_mulc(k, G.iv, mr);
    LLVMValueRef nrows = LLVMBuildSub(b, e->rows, r0, "");
    LLVMValueRef grow = kern_add(k, e->m0, r0);
    /* row r reads A's row min(r, nrows - 1): a short group repeats its last row */
    LLVMValueRef arow[16], in[16], rr[16];
    for (int r = 0; r < mr; r++) {
        in[r] = LLVMBuildICmp(b, LLVMIntSGT, nrows, kern_i64(k, r), "");
        rr[r] = LLVMBuildSelect(b, in[r], kern_i64(k, r), LLVMBuildSub(b, nrows, kern_i64(k, 1), ""), "");
        arow[r] = bytes_at(e, e->A, kern_mulc(k, kern_add(k, grow, rr[r]), d->lda));
    }
    LLVMValueRef init[KERN_MAX_CARRY];
    for (int i = 0; i < mr * nh; i++)
        init[i] = LLVMConstNull(e->vi);
    int64_t whole = d->K / 4; /* groups A fills */
    kern_for(k, &S, kern_i64(k, 0), kern_i64(k, whole), 1, 0, mr * nh, init, "i8.k");
    LLVMValueRef acc[KERN_MAX_CARRY], av[16] = {0};
    memcpy(acc, S.carry, sizeof(LLVMValueRef) * (size_t)(mr * nh));
    LLVMValueRef ka = kern_mulc(k, S.iv, 4);
    for (int r = 0; r < mr; r++)
        av[r] = splat_i32(e, load_i32(e, bytes_at(e, arow[r], ka)));
    group_dot(e, bytes_at(e, wp, kern_mulc(k, S.iv, (int64_t)p->group_bytes)), av, nh, acc);
    kern_for_end(k, &S, acc);
    memcpy(acc, S.carry, sizeof(LLVMValueRef) * (size_t)(mr * nh));
    if (d->K % 4) { /* the group K ends in: A's last bytes, W's zeros past K */
        for (int r = 0; r < mr; r++)
            av[r] = splat_i32(e, load_tail(e, bytes_at(e, arow[r], kern_i64(k, whole * 4)), (int)(d->K % 4)));
        group_dot(e, bytes_at(e, wp, kern_i64(k, whole * (int64_t)p->group_bytes)), av, nh, acc);
    }
    if (p->path == I8_MADDUBS)
        emit_fixes(e, P.iv, arow, nh, acc);

    /* the epilogue from the registers */
    LLVMValueRef cs[2], sw[2], bias[2];
    panel_consts(e, n0, lanes, nh, cs, sw, bias);
    for (int r = 0; r < mr; r++) {
        /* the row's scale and zero point (a missing row reads its group's last) */
        LLVMValueRef zv, sv;
        row_quant(e, e->di->a_per_row ? kern_add(k, grow, rr[r]) : kern_i64(k, 0), &zv, &sv);
        for (int h = 0; h < nh; h++) {
            LLVMValueRef n = LLVMBuildSelect(b, in[r], kern_i64(k, lanes[h]), kern_i64(k, 0), "");
            dequant_store(e, acc[r * nh + h], zv, sv, cs[h], sw[h], bias[h], kern_addc(k, grow, r),
                          kern_addc(k, n0, h * vf), kern_lanes_below(k, n));
        }
    }
    kern_for_end(k, &G, NULL);
    kern_for_end(k, &P, NULL);
}

/* ---- amx: sums in tiles ---- */

static LLVMValueRef i16c(i8_emit *e, int v) { return LLVMConstInt(e->i16, (unsigned long long)v, 0); }

/* A 16-row, 64-byte-wide tile at p, rows stride bytes apart. */
static LLVMValueRef tile_load(i8_emit *e, LLVMValueRef p, LLVMValueRef stride)
{
    LLVMValueRef a[4] = {i16c(e, 16), i16c(e, 64), p, stride};
    return LLVMBuildCall2(e->k->b, e->t_load, e->f_load, a, 4, "");
}

static void tile_store(i8_emit *e, LLVMValueRef p, LLVMValueRef stride, LLVMValueRef t)
{
    LLVMValueRef a[5] = {i16c(e, 16), i16c(e, 64), p, stride, t};
    LLVMBuildCall2(e->k->b, e->t_store, e->f_store, a, 5, "");
}

/* The task's rows of A, all of K, into abuf tile by tile (the header's
 * layout): 64 bytes a step, the step K ends in under a mask, zeros past K
 * and for the rows from `rows` to the next multiple of 32. */
static void emit_stage_a(i8_emit *e)
{
    kern *k = e->k;
    LLVMBuilderRef b = k->b;
    const cg_gemm_desc *d = e->d;
    const i8_plan *p = e->p;
    LLVMTypeRef v64 = LLVMVectorType(e->i8, AMX8_KS);
    int64_t whole = d->K / AMX8_KS, row_tiles = p->steps * 2 * AMX8_TILE;
    int tail = (int)(d->K % AMX8_KS);
    kern_loop R, S;
    kern_for(k, &R, kern_i64(k, 0), e->rows, 1, 0, 0, NULL, "i8amx.stage");
    LLVMValueRef dst = bytes_at(e, e->abuf,
                                kern_add(k, kern_mulc(k, LLVMBuildUDiv(b, R.iv, kern_i64(k, AMX8_MR), ""), row_tiles),
                                         kern_mulc(k, LLVMBuildURem(b, R.iv, kern_i64(k, AMX8_MR), ""), AMX8_KS)));
    LLVMValueRef src = bytes_at(e, e->A, kern_mulc(k, kern_add(k, e->m0, R.iv), d->lda));
    if (whole) {
        kern_for(k, &S, kern_i64(k, 0), kern_i64(k, whole), 1, 0, 0, NULL, "i8amx.stage.k");
        LLVMValueRef v = load_vec(e, v64, bytes_at(e, src, kern_mulc(k, S.iv, AMX8_KS)), 1);
        LLVMSetAlignment(LLVMBuildStore(b, v, bytes_at(e, dst, kern_mulc(k, S.iv, 2 * AMX8_TILE))), 64);
        kern_for_end(k, &S, NULL);
    }
    if (tail) {
        LLVMValueRef bits[AMX8_KS];
        for (int i = 0; i < AMX8_KS; i++)
            bits[i] = LLVMConstInt(k->i1, i < tail, 0);
        LLVMTypeRef types[2] = {v64, k->ptr}, fnty;
        LLVMValueRef fn = kern_intrinsic(k, "llvm.masked.load", types, 2, &fnty);
        LLVMValueRef args[4] = {bytes_at(e, src, kern_i64(k, whole * AMX8_KS)), LLVMConstInt(k->i32, 1, 0),
                                LLVMConstVector(bits, AMX8_KS), LLVMConstNull(v64)};
        LLVMValueRef v = LLVMBuildCall2(b, fnty, fn, args, 4, "");
        LLVMSetAlignment(LLVMBuildStore(b, v, bytes_at(e, dst, kern_i64(k, whole * 2 * AMX8_TILE))), 64);
    }
    kern_for_end(k, &R, NULL);
    LLVMValueRef rows32 = kern_mulc(k, kern_cdiv(k, e->rows, kern_i64(k, AMX8_MR)), AMX8_MR);
    kern_loop Z, ZS;
    kern_for(k, &Z, e->rows, rows32, 1, 0, 0, NULL, "i8amx.pad");
    LLVMValueRef zdst = bytes_at(e, e->abuf,
                                 kern_add(k, kern_mulc(k, LLVMBuildUDiv(b, Z.iv, kern_i64(k, AMX8_MR), ""), row_tiles),
                                          kern_mulc(k, LLVMBuildURem(b, Z.iv, kern_i64(k, AMX8_MR), ""), AMX8_KS)));
    kern_for(k, &ZS, kern_i64(k, 0), kern_i64(k, p->steps), 1, 0, 0, NULL, "i8amx.pad.k");
    LLVMSetAlignment(LLVMBuildStore(b, LLVMConstNull(v64), bytes_at(e, zdst, kern_mulc(k, ZS.iv, 2 * AMX8_TILE))), 64);
    kern_for_end(k, &ZS, NULL);
    kern_for_end(k, &Z, NULL);
}

/* Panels [pb, pe), each with the same lanes: for each K block and each 32
 * rows of the task, the 2 x 2 tiles of C from zeros or the partial sums,
 * the block's steps, the tiles back to the partial sums, and after the last
 * block the epilogue from there to C. */
static void emit_panels_amx(i8_emit *e, LLVMValueRef pb, LLVMValueRef pe, const int lanes[2])
{
    kern *k = e->k;
    LLVMBuilderRef b = k->b;
    const i8_plan *p = e->p;
    int nh = lanes[1] ? 2 : 1, kblocked = p->nkb > 1;
    LLVMValueRef s64 = kern_i64(k, 64), sp = kern_i64(k, AMX8_NR * 4); /* tiles' strides: A and B, the partial sums */
    kern_loop P, KB, T, S, L;
    kern_for(k, &P, pb, pe, 1, 0, 0, NULL, "i8amx.panel");
    LLVMValueRef n0 = kern_mulc(k, P.iv, AMX8_NR);
    kern_for(k, &KB, kern_i64(k, 0), kern_i64(k, p->nkb), 1, 0, 0, NULL, "i8amx.kb");
    LLVMValueRef ks = kern_mulc(k, KB.iv, p->kcs); /* the block's first step */
    LLVMValueRef ksteps = kern_min(k, kern_i64(k, p->kcs), LLVMBuildSub(b, kern_i64(k, p->steps), ks, ""));
    LLVMValueRef wblk = bytes_at(e, e->W, kern_mulc(k, kern_add(k, kern_mulc(k, P.iv, p->steps), ks), 2 * AMX8_TILE));
    LLVMValueRef first = LLVMBuildICmp(b, LLVMIntEQ, KB.iv, kern_i64(k, 0), "first");
    LLVMValueRef last = LLVMBuildICmp(b, LLVMIntEQ, KB.iv, kern_i64(k, p->nkb - 1), "last");
    kern_for(k, &T, kern_i64(k, 0), kern_cdiv(k, e->rows, kern_i64(k, AMX8_MR)), 1, 0, 0, NULL, "i8amx.rows");
    LLVMValueRef r0 = kern_mulc(k, T.iv, AMX8_MR);
    LLVMValueRef slot = bytes_at(e, e->pbuf, kern_mulc(k, T.iv, AMX8_MR * AMX8_NR * 4));
    LLVMValueRef tile_at[4], init[4], zargs[2] = {i16c(e, 16), i16c(e, 64)};
    for (int i = 0; i < 4; i++) /* tile (i / 2, i % 2): 16 rows down, 16 columns across */
        tile_at[i] = bytes_at(e, slot, kern_i64(k, (i / 2) * 16 * AMX8_NR * 4 + (i % 2) * 64));
    if (kblocked) {
        LLVMBasicBlockRef bzero = kern_block(k, "i8amx.zero"), bload = kern_block(k, "i8amx.load"),
                          bgo = kern_block(k, "i8amx.go");
        LLVMBuildCondBr(b, first, bzero, bload);
        LLVMPositionBuilderAtEnd(b, bzero);
        LLVMValueRef tz[4], tl[4];
        for (int i = 0; i < 4; i++)
            tz[i] = LLVMBuildCall2(b, e->t_zero, e->f_zero, zargs, 2, "");
        LLVMBuildBr(b, bgo);
        LLVMPositionBuilderAtEnd(b, bload);
        for (int i = 0; i < 4; i++)
            tl[i] = tile_load(e, tile_at[i], sp);
        LLVMBuildBr(b, bgo);
        LLVMPositionBuilderAtEnd(b, bgo);
        for (int i = 0; i < 4; i++) {
            init[i] = LLVMBuildPhi(b, e->amx, "");
            LLVMValueRef v[2] = {tz[i], tl[i]};
            LLVMBasicBlockRef from[2] = {bzero, bload};
            LLVMAddIncoming(init[i], v, from, 2);
        }
    } else {
        for (int i = 0; i < 4; i++)
            init[i] = LLVMBuildCall2(b, e->t_zero, e->f_zero, zargs, 2, "");
    }
    kern_for(k, &S, kern_i64(k, 0), ksteps, 1, 0, 4, init, "i8amx.k");
    LLVMValueRef a0 = bytes_at(e, e->abuf,
                               kern_mulc(k, kern_add(k, kern_mulc(k, T.iv, p->steps), kern_add(k, ks, S.iv)),
                                         2 * AMX8_TILE));
    LLVMValueRef bstep = bytes_at(e, wblk, kern_mulc(k, S.iv, 2 * AMX8_TILE));
    LLVMValueRef ta[2] = {tile_load(e, a0, s64), tile_load(e, bytes_at(e, a0, kern_i64(k, AMX8_TILE)), s64)};
    LLVMValueRef tb[2] = {tile_load(e, bstep, s64), tile_load(e, bytes_at(e, bstep, kern_i64(k, AMX8_TILE)), s64)};
    LLVMValueRef acc[4];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) {
            LLVMValueRef a[6] = {i16c(e, 16), i16c(e, 64), i16c(e, 64), S.carry[i * 2 + j], ta[i], tb[j]};
            acc[i * 2 + j] = LLVMBuildCall2(b, e->t_dp, e->f_dp, a, 6, "");
        }
    kern_for_end(k, &S, acc);
    for (int i = 0; i < 4; i++)
        tile_store(e, tile_at[i], sp, S.carry[i]);

    /* after the last block: the epilogue of these rows from their partial sums */
    LLVMBasicBlockRef bepi = kern_block(k, "i8amx.epi"), bdone = kern_block(k, "i8amx.done");
    LLVMBuildCondBr(b, last, bepi, bdone);
    LLVMPositionBuilderAtEnd(b, bepi);
    LLVMValueRef cs[2], sw[2], bias[2], mask[2];
    panel_consts(e, n0, lanes, nh, cs, sw, bias);
    for (int h = 0; h < nh; h++)
        mask[h] = kern_lane_mask(k, lanes[h]);
    LLVMValueRef nrows = kern_min(k, kern_i64(k, AMX8_MR), LLVMBuildSub(b, e->rows, r0, ""));
    kern_for(k, &L, kern_i64(k, 0), nrows, 1, 0, 0, NULL, "i8amx.epi.row");
    LLVMValueRef row = kern_add(k, e->m0, kern_add(k, r0, L.iv)), zv, sv;
    row_quant(e, e->di->a_per_row ? row : kern_i64(k, 0), &zv, &sv);
    LLVMValueRef srow = bytes_at(e, slot, kern_mulc(k, L.iv, AMX8_NR * 4));
    for (int h = 0; h < nh; h++) {
        LLVMValueRef sums = load_vec(e, e->vi, bytes_at(e, srow, kern_i64(k, h * 64)), 64);
        dequant_store(e, sums, zv, sv, cs[h], sw[h], bias[h], row, kern_addc(k, n0, h * 16), mask[h]);
    }
    kern_for_end(k, &L, NULL);
    LLVMBuildBr(b, bdone);
    LLVMPositionBuilderAtEnd(b, bdone);
    kern_for_end(k, &T, NULL);
    kern_for_end(k, &KB, NULL);
    kern_for_end(k, &P, NULL);
}

/* ---- the task and the driver ---- */

/* task(closure {args, nmb, mc, nnb}, begin, end): task t = ni * nmb + mi,
 * rows [mi * mc, min(M, (mi + 1) * mc)), panels [ni * P / nnb, (ni + 1) * P / nnb). */
static LLVMValueRef emit_task(i8_emit *e, const char *name, LLVMTypeRef argsty)
{
    kern *k = e->k;
    LLVMBuilderRef b = k->b;
    const i8_plan *p = e->p;
    LLVMValueRef fn = kern_func(k, name, kern_task_type(k), 1);
    int amx = p->path == I8_AMX;
    if (amx) {
        e->abuf = LLVMBuildArrayAlloca(b, e->i8, kern_i64(k, p->mc_max * p->steps * AMX8_KS), "abuf");
        LLVMSetAlignment(e->abuf, 64);
        e->pbuf = LLVMBuildArrayAlloca(b, e->i8, kern_i64(k, p->mc_max * AMX8_NR * 4), "pbuf");
        LLVMSetAlignment(e->pbuf, 64);
    }
    void (*panels)(i8_emit *, LLVMValueRef, LLVMValueRef, const int[2]) = amx ? emit_panels_amx : emit_panels;
    LLVMValueRef args, nmb, mc, nnb, a[7];
    kern_task_closure(k, fn, &args, &nmb, &mc, &nnb);
    LLVMValueRef M = kern_args_read(k, argsty, args, 7, a);
    e->A = a[0], e->W = a[1], e->bias = a[2], e->R = a[3], e->C = a[4], e->sa = a[5], e->za = a[6];
    kern_loop T;
    LLVMValueRef ni, mi;
    kern_task_loop(k, fn, &T, nmb, &ni, &mi);
    e->m0 = kern_mul(k, mi, mc);
    e->rows = LLVMBuildSub(b, kern_min(k, M, kern_add(k, e->m0, mc)), e->m0, "rows");
    LLVMValueRef p0 = LLVMBuildSDiv(b, kern_mulc(k, ni, p->npanels), nnb, "p0");
    LLVMValueRef p1 = LLVMBuildSDiv(b, kern_mulc(k, kern_addc(k, ni, 1), p->npanels), nnb, "p1");
    if (amx)
        emit_stage_a(e);
    int full[2] = {p->vf, p->vf};
    if (p->nfull)
        panels(e, p0, kern_min(k, p1, kern_i64(k, p->nfull)), full);
    if (p->nfull < p->npanels) { /* the padded last panel, when it is the task's */
        LLVMBasicBlockRef brem = kern_block(k, "i8.rem"), bjoin = kern_block(k, "i8.rem.join");
        LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntEQ, p1, kern_i64(k, p->npanels), ""), brem, bjoin);
        LLVMPositionBuilderAtEnd(b, brem);
        panels(e, kern_i64(k, p->nfull), kern_i64(k, p->npanels), p->rem_lanes);
        LLVMBuildBr(b, bjoin);
        LLVMPositionBuilderAtEnd(b, bjoin);
    }
    kern_for_end(k, &T, NULL);
    LLVMBuildRetVoid(b);
    return fn;
}

/* The fewest row blocks of at most I8_MC_GROUPS groups (amx: as many rows
 * as the A buffer holds), evened out, then column blocks until there are
 * I8_TASKS_PER_THREAD tasks per thread (at most one per panel). */
static kern_split split(kern *k, void *gen, LLVMValueRef M, LLVMValueRef nt)
{
    const i8_plan *p = ((const i8_emit *)gen)->p;
    int64_t mc_max = p->path == I8_AMX ? p->mc_max : (int64_t)I8_MC_GROUPS * p->mr;
    return kern_split_panels(k, M, p->mr, mc_max, p->npanels, I8_TASKS_PER_THREAD, nt);
}

static LLVMValueRef build_task(kern *k, void *gen, const char *name, LLVMTypeRef argsty)
{
    (void)k;
    return emit_task(gen, name, argsty);
}

/* The path's intrinsics: the AMX tiles', or VPDPBUSD, VPMADDUBSW and
 * VPMADDWD, or VPMADDWD on the target's vectors; -1 when this LLVM lacks
 * them. */
static int prepare(kern *k, void *gen)
{
    i8_emit *e = gen;
    e->k = k;
    if (e->di->epilogue[0]) { /* the module's function of <vf x float>, applied last */
        e->epi = LLVMGetNamedFunction(k->mod, e->di->epilogue);
        LLVMTypeRef ft = e->epi ? LLVMGlobalGetValueType(e->epi) : NULL;
        if (!ft || LLVMGetReturnType(ft) != k->vty || LLVMCountParamTypes(ft) != 1)
            return -1;
    }
    e->i8 = LLVMInt8TypeInContext(k->ctx);
    e->i16 = LLVMInt16TypeInContext(k->ctx);
    e->vi = LLVMVectorType(k->i32, (unsigned)e->p->vf);
    switch (e->p->path) {
    case I8_AMX:
        e->amx = LLVMX86AMXTypeInContext(k->ctx);
        e->f_load = kern_intrinsic(k, "llvm.x86.tileloadd64.internal", NULL, 0, &e->t_load);
        e->f_dp = kern_intrinsic(k, "llvm.x86.tdpbusd.internal", NULL, 0, &e->t_dp);
        e->f_store = kern_intrinsic(k, "llvm.x86.tilestored64.internal", NULL, 0, &e->t_store);
        e->f_zero = kern_intrinsic(k, "llvm.x86.tilezero.internal", NULL, 0, &e->t_zero);
        return e->f_load && e->f_dp && e->f_store && e->f_zero ? 0 : -1;
    case I8_VNNI:
        e->f_dot = kern_intrinsic(k, e->p->vf == 16 ? "llvm.x86.avx512.vpdpbusd.512" : "llvm.x86.avx512.vpdpbusd.256",
                                  NULL, 0, &e->t_dot);
        return e->f_dot && LLVMCountParamTypes(e->t_dot) == 3 ? 0 : -1;
    case I8_MADDUBS:
        e->f_ub = kern_intrinsic(k, e->p->vf == 16 ? "llvm.x86.avx512.pmaddubs.w.512" : "llvm.x86.avx2.pmadd.ub.sw",
                                 NULL, 0, &e->t_ub);
        if (!e->f_ub || LLVMCountParamTypes(e->t_ub) != 2)
            return -1;
        /* fall through */
    default: /* VPMADDWD (wide; maddubs's second step): LLVM makes it of plain IR only where no value has two uses */
        e->f_dot = kern_intrinsic(k, e->p->vf == 16 ? "llvm.x86.avx512.pmaddw.d.512" : "llvm.x86.avx2.pmadd.wd", NULL,
                                  0, &e->t_dot);
        return e->f_dot && LLVMCountParamTypes(e->t_dot) == 2 ? 0 : -1;
    }
}

static const char *const path_names[] = {"amx", "vnni", "maddubs", "wide"};

const char *cg_gemm_i8_path(const cg_gemm_i8_desc *d, const cg_target *t)
{
    i8_plan p;
    return i8_plan_make(d, t, &p) ? NULL : path_names[p.path];
}

static void task_name(const kern *k, const void *gen, char *buf, size_t len)
{
    const i8_emit *e = gen;
    const cg_gemm_desc *d = e->d;
    snprintf(buf, len, "vitc.i8.%s.%s.K%lld.N%lld.a%lld.c%lld.r%lld.e%d%d%d.q%d.f%llx%s%s", path_names[e->p->path],
             k->tag, (long long)d->K, (long long)d->N, (long long)d->lda, (long long)d->ldc, (long long)d->ldr,
             d->has_bias ? 1 : 0, d->has_residual ? 1 + (d->gate != 0) : 0, d->activation, e->di->a_per_row ? 1 : 0,
             (unsigned long long)kern_bytes_hash(e->di->fq, sizeof e->di->fq), e->di->epilogue[0] ? "." : "",
             e->di->epilogue);
}

LLVMValueRef cg_gemm_i8_emit(LLVMModuleRef mod, const char *name, const cg_gemm_i8_desc *d, const cg_target *t)
{
    i8_plan p;
    i8_emit e = {.di = d, .d = d ? &d->g : NULL, .p = &p};
    kern_kernel kk = {.nptr = 7, .prepare = prepare, .task_name = task_name, .task = build_task, .split = split,
                      .gen = &e};
    return !d || i8_plan_make(d, t, &p) ? NULL : kern_emit(mod, t, name, &kk);
}
