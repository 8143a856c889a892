/* poly.c: sizes, strides and offsets of the generated code as polynomials in
 * the batch B.  A dimension of the IR is k * B^e; products of dimensions are
 * monomials, and offsets (slice starts, concat positions) sums of them.  All
 * arithmetic is overflow-checked: a result that does not fit is marked bad
 * and stays bad, so an emitter checks once at the end. */
#include "codegen/poly.h"

#include <string.h>

static cg_poly bad_poly(void)
{
    cg_poly p;
    memset(&p, 0, sizeof p);
    p.bad = 1;
    return p;
}

cg_poly cg_poly_k(int64_t k)
{
    cg_poly p;
    memset(&p, 0, sizeof p);
    p.c[0] = k;
    return p;
}

cg_poly cg_poly_dim(ir_dim d)
{
    if (d.k == 0)
        return cg_poly_k(0);
    if (d.e < 0 || d.e > CG_POLY_DEG)
        return bad_poly();
    cg_poly p = cg_poly_k(0);
    p.c[d.e] = d.k;
    return p;
}

cg_poly cg_poly_add(cg_poly a, cg_poly b)
{
    if (a.bad || b.bad)
        return bad_poly();
    cg_poly r = cg_poly_k(0);
    for (int e = 0; e <= CG_POLY_DEG; e++)
        if (ir_add_ovf(a.c[e], b.c[e], &r.c[e]))
            return bad_poly();
    return r;
}

cg_poly cg_poly_mul(cg_poly a, cg_poly b)
{
    if (a.bad || b.bad)
        return bad_poly();
    cg_poly r = cg_poly_k(0);
    for (int i = 0; i <= CG_POLY_DEG; i++)
        for (int j = 0; j <= CG_POLY_DEG; j++) {
            if (a.c[i] == 0 || b.c[j] == 0)
                continue;
            int64_t t;
            if (i + j > CG_POLY_DEG || ir_mul_ovf(a.c[i], b.c[j], &t) || ir_add_ovf(r.c[i + j], t, &r.c[i + j]))
                return bad_poly();
        }
    return r;
}

cg_poly cg_poly_scale(cg_poly a, int64_t k) { return cg_poly_mul(a, cg_poly_k(k)); }

int cg_poly_eq(cg_poly a, cg_poly b)
{
    if (a.bad || b.bad)
        return 0;
    for (int e = 0; e <= CG_POLY_DEG; e++)
        if (a.c[e] != b.c[e])
            return 0;
    return 1;
}

int cg_poly_is_const(cg_poly a, int64_t *k)
{
    if (a.bad)
        return 0;
    for (int e = 1; e <= CG_POLY_DEG; e++)
        if (a.c[e] != 0)
            return 0;
    if (k)
        *k = a.c[0];
    return 1;
}

int64_t cg_poly_eval(cg_poly a, int64_t batch)
{
    if (a.bad)
        return -1;
    int64_t r = 0, pw = 1;
    for (int e = 0; e <= CG_POLY_DEG; e++) {
        int64_t t;
        if ((e > 0 && ir_mul_ovf(pw, batch, &pw)) || ir_mul_ovf(a.c[e], pw, &t) || ir_add_ovf(r, t, &r))
            return -1;
    }
    return r;
}

cg_poly cg_poly_numel(const ir_value *v)
{
    if (v->rank < 0)
        return bad_poly();
    cg_poly p = cg_poly_k(1);
    for (int i = 0; i < v->rank; i++)
        p = cg_poly_mul(p, cg_poly_dim(v->dims[i]));
    return p;
}

void cg_poly_strides(const ir_value *v, cg_poly *s)
{
    cg_poly p = cg_poly_k(1);
    for (int i = v->rank - 1; i >= 0; i--) {
        s[i] = p;
        p = cg_poly_mul(p, cg_poly_dim(v->dims[i]));
    }
}
