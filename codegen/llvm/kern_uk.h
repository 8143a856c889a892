/* kern_uk.h: the register-blocked micro-kernel every matrix product of the
 * kernels is made of (packed GEMM, batched GEMM, both products of attention).
 *
 * One micro-kernel computes an mr x (nv * vf) tile of C over kc steps of k:
 *     acc[r][v] += A(r, k) * B(k, v)     (A broadcast, B a vector load, FMA)
 * with the accumulators in registers, then applies the epilogue
 *     C = act(alpha * acc + bias) + R     (or * R: gate)
 * on them before the store (alpha may also be a per-row factor rs[r]).  The last vector of a row may be partial
 * (last_lanes < vf): it is loaded and stored masked, never out of bounds. */
#ifndef VITC_KERN_UK_H
#define VITC_KERN_UK_H

#include "codegen/llvm/kern_ir.h"

typedef struct {
    int mr, nv;         /* rows and vectors of the tile: mr * nv accumulators */
    int last_lanes;     /* valid lanes of the last vector (vf: all) */
    int64_t lda, a_ks;  /* A(r, k) = A[r * lda + k * a_ks] */
    int64_t ldb;        /* B(k, v) = B[k * ldb + v * vf .. + vf) */
    int b_masked;       /* the last B vector is loaded masked (B not padded) */
    int64_t ldc, ldr;   /* row strides of C and R */
    int has_bias, has_res, act;
    int gate;           /* R multiplies act(...) (read in the epilogue; has_res 0) */
    float alpha;
    int row_scale;      /* also multiply row r by rs[r] (softmax's 1 / sum) */
    /* K blocking: the k range is split into blocks, called in order with
     * run-time flags first/last.  Partial sums live in C between blocks;
     * with a residual, R is read at the first block (before C is written, so
     * R may equal C), which needs act == 0 and alpha == 1. */
    int kblocked;
} kern_uk;

/* void uk(ptr A, ptr B, ptr C, ptr R, ptr bias, i64 kc, i1 first, i1 last,
 * ptr rs).  A, B, C, R, bias and rs point at the tile's first element; R,
 * bias and rs are ignored unless used.  first/last are ignored unless
 * kblocked. */
LLVMTypeRef kern_uk_type(kern *k);
/* Emits one micro-kernel as an internal function; NULL if the spec is not
 * supported (too many accumulators, kblocked with act/alpha and residual). */
LLVMValueRef kern_uk_emit(kern *k, const char *name, const kern_uk *s);

/* Rows and vectors of the main tile for a target: nv = 2, mr such that
 * mr * nv accumulators + nv B vectors + 1 broadcast fit the registers. */
void kern_uk_shape(const cg_target *t, int *mr, int *nv);

/* What kern_uk_rows prefetches while it computes its rows.
 * next (or NULL): memory the caller reads next (the next B block), into L2
 * (l1: into L1 too): before its call, the t-th whole tile prefetches `lines`
 * cache lines from next + t * lines * 64 bytes, a few at a time rather than
 * in one burst.  r_cols (or 0): on a tile's first K block (first true, or
 * NULL), the next tile's rows of R, r_cols floats each, into L2: the
 * residual is the first thing a tile reads, and in a model it comes from
 * memory. */
typedef struct {
    LLVMValueRef next, lines;
    int l1;
    int64_t r_cols;
} kern_uk_pf;

/* Emits a loop over rows [row0, row1): whole tiles of mr rows, then the
 * remainder (< mr rows) as a sum of powers of two, each with its kernel
 * (kernels[r] handles r rows; see kern_uk_set).  Pointers advance by lda /
 * ldc / ldr / 1 per row; R, bias, rs and pf may be NULL when unused;
 * first/last NULL mean true. */
void kern_uk_rows(kern *k, LLVMValueRef *kernels, int mr, LLVMValueRef row0, LLVMValueRef row1,
                  LLVMValueRef A, int64_t lda, LLVMValueRef B, LLVMValueRef C, int64_t ldc,
                  LLVMValueRef R, int64_t ldr, LLVMValueRef bias, LLVMValueRef rs, LLVMValueRef kc,
                  LLVMValueRef first, LLVMValueRef last, const kern_uk_pf *pf);

/* Emits the kernels kern_uk_rows needs for one spec: kernels[s->mr] and
 * kernels[p] for the powers of two p < s->mr.  A kernel already in the
 * module with the same spec (same name, derived from the spec) is reused,
 * so repeated layers cost nothing to compile.  0 on success. */
int kern_uk_set(kern *k, const kern_uk *s, LLVMValueRef *kernels);
/* The kernels of a panel split into full panels and one narrower remainder:
 * full[] as *s says when any panel is full, then, when rem, rem[] with
 * rem_nv vectors of which the last has rem_lanes lanes (B read masked there
 * when rem_b_masked).  0 on success. */
int kern_uk_set_panels(kern *k, kern_uk s, int full_panels, LLVMValueRef *full, int rem, int rem_nv, int rem_lanes,
                       int rem_b_masked, LLVMValueRef *remk);

#endif
