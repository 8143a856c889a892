/* poly.h: sizes, strides and offsets as polynomials in the batch B, the
 * arithmetic both backends plan and emit with (poly.c).  A dimension of the
 * IR is k * B^e; products of dimensions are monomials, offsets sums of them. */
#ifndef VITC_CG_POLY_H
#define VITC_CG_POLY_H

#include "ir/ir.h"

#include <stdint.h>

/* sum of c[e] * B^e */
#define CG_POLY_DEG 3
typedef struct {
    int64_t c[CG_POLY_DEG + 1];
    int bad; /* overflow or too high a power of B; sticky through arithmetic */
} cg_poly;

cg_poly cg_poly_k(int64_t k);
cg_poly cg_poly_dim(ir_dim d);
cg_poly cg_poly_add(cg_poly a, cg_poly b);
cg_poly cg_poly_mul(cg_poly a, cg_poly b);
cg_poly cg_poly_scale(cg_poly a, int64_t k);
int cg_poly_eq(cg_poly a, cg_poly b);
/* 1 (and *k) when a does not depend on the batch. */
int cg_poly_is_const(cg_poly a, int64_t *k);
/* a at a concrete batch; -1 on overflow or a bad polynomial. */
int64_t cg_poly_eval(cg_poly a, int64_t batch);
/* Product of v's dims (its element count). */
cg_poly cg_poly_numel(const ir_value *v);
/* Row-major element strides of v's dims into s (v->rank entries). */
void cg_poly_strides(const ir_value *v, cg_poly *s);

#endif
