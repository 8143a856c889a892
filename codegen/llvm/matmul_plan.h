/* matmul_plan.h: how the CPU backend maps the compute-heavy nodes onto the
 * kernels of kernels.h (matmul_plan.c), read by the schedule (scratch, which
 * nodes are GEMMs) and by the emitter (emit_matmul.c). */
#ifndef VITC_MATMUL_PLAN_H
#define VITC_MATMUL_PLAN_H

#include "codegen/llvm/cg_impl.h"

typedef struct {
    int nbatch, trans_b;
} einsum_mm;

typedef struct {
    cg_bgemm_desc d;
    cg_poly count; /* number of products */
} bgemm_plan;

typedef struct {
    int64_t C, H, W, M, kh, kw, oh, ow;
} patch_plan;

typedef struct {
    int64_t N_e, C, H, W, M, Cg, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, group;
} conv_plan;

/* "XYmk,XYkn->XYmn" (trans_b 0) or "XYmk,XYnk->XYmn" (trans_b 1) for any
 * common batch prefix, spaces ignored. */
int einsum_as_bgemm(const char *eq, einsum_mm *e);
/* C[..., M, N] = A[..., M, K] @ op(B)[..., K, N] where the batch dimensions
 * of A and B are either all those of C or all 1; 0 with why otherwise. */
int plan_bgemm(const ir_graph *g, int va, int vb, int vc, int trans_b, float alpha, bgemm_plan *p, char *why,
               size_t len);
/* Conv with kernel = stride, no padding, no dilation, one group, 2-D. */
int plan_patchify(const ir_graph *g, const ir_node *n, patch_plan *p);
/* Any other 2-D (or 1-D) Conv as a direct loop; 0 with why when not. */
int plan_conv(const ir_graph *g, const ir_node *n, conv_plan *p, char *why, size_t len);

#endif
