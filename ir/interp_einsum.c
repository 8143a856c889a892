/* interp_einsum.c: Einsum for the interpreter.
 *
 * equation = term ("," term)* ["->" output], each term a string of letters.
 * Without "->" the output is every letter that appears exactly once, in ASCII
 * order (numpy's rule).  A letter repeated inside one term takes a diagonal;
 * letters missing from the output are summed over.  A dimension of size 1
 * broadcasts against the same letter elsewhere, as in numpy.  Ellipsis ("...")
 * is not supported and is reported as such.
 *
 * The loop is the definition: for each output position, sum over every
 * combination of the contracted letters the product of the operands (in
 * double for floats, exactly in int64 for integers). */
#include "ir/einsum.h"
#include "ir/interp_impl.h"

#include <stdlib.h>
#include <string.h>

int ik_einsum(ik_ctx *c)
{
    const ir_attr *a = ir_attr_get(c->n, IR_ATTR_EQUATION);
    ir_einsum eq;
    char why[128];
    if (!a || a->kind != IR_AT_STRING)
        return ik_fail(c, VITC_BAD_INPUT, "the equation attribute is missing");
    if (ir_einsum_parse(a->s, &eq, why, sizeof why))
        return ik_fail(c, VITC_BAD_INPUT, "equation '%s': %s", a->s, why);
    if (eq.nterms != c->nin)
        return ik_fail(c, VITC_BAD_INPUT, "equation '%s' has %d operands but the node has %d inputs", a->s, eq.nterms,
                       c->nin);
    for (int k = 0; k < c->nin; k++)
        if (!c->in[k])
            return ik_fail(c, VITC_BAD_INPUT, "input %d is omitted", k);
    int st = ik_same_dtype(c, c->nin, c->in);
    if (st)
        return st;
    ir_dtype dt = c->in[0]->dtype;
    if (dt == IR_BOOL)
        return ik_fail(c, VITC_BAD_INPUT, "Einsum does not take bool tensors");

    /* Letter sizes, checked across operands (1 broadcasts). */
    int64_t size[128];
    for (int i = 0; i < 128; i++)
        size[i] = -1;
    for (int k = 0; k < c->nin; k++) {
        const ir_tensor *x = c->in[k];
        if ((int)strlen(eq.terms[k]) != x->rank)
            return ik_fail(c, VITC_BAD_INPUT, "operand %d has rank %d but its subscripts are '%s'", k, x->rank,
                           eq.terms[k]);
        for (int p = 0; p < x->rank; p++) {
            int64_t *sz = &size[(unsigned char)eq.terms[k][p]];
            if (*sz < 0 || *sz == 1)
                *sz = x->dims[p];
            else if (x->dims[p] != *sz && x->dims[p] != 1)
                return ik_fail(c, VITC_BAD_INPUT, "subscript '%c' is %lld in operand %d but %lld elsewhere",
                               eq.terms[k][p], (long long)x->dims[p], k, (long long)*sz);
        }
    }
    /* Letters: the output's first, then the contracted ones. */
    char letters[64];
    int nl = 0, nout = (int)strlen(eq.out);
    for (int i = 0; i < nout; i++)
        letters[nl++] = eq.out[i];
    for (int k = 0; k < c->nin; k++)
        for (const char *q = eq.terms[k]; *q; q++)
            if (!memchr(letters, *q, (size_t)nl))
                letters[nl++] = *q;
    int64_t dims[IR_MAX_RANK], sz[64], idx[64] = {0};
    for (int l = 0; l < nl; l++)
        sz[l] = size[(unsigned char)letters[l]];
    for (int l = 0; l < nout; l++)
        dims[l] = sz[l];
    if ((st = ik_alloc(c, &c->out[0], dt, nout, dims)))
        return st;
    /* stride[k][l]: how far operand k moves when letter l steps (summed over
     * repeats of l in its term: a diagonal). */
    int64_t(*stride)[64] = calloc((size_t)c->nin, sizeof *stride);
    int64_t *off = calloc((size_t)c->nin * 2, sizeof *off), *base = off + c->nin;
    int fl = ir_dtype_is_float(dt);
    double **xf = calloc((size_t)c->nin, sizeof *xf);
    int64_t **xi = calloc((size_t)c->nin, sizeof *xi);
    if (!stride || !off || !xf || !xi)
        st = ik_fail(c, VITC_INTERNAL, "out of memory");
    for (int k = 0; k < c->nin && !st; k++) {
        const ir_tensor *x = c->in[k];
        int64_t xs[IR_MAX_RANK];
        ik_strides(x->rank, x->dims, xs);
        for (int p = 0; p < x->rank; p++) {
            int l = (int)((const char *)memchr(letters, eq.terms[k][p], (size_t)nl) - letters);
            if (!(x->dims[p] == 1 && sz[l] != 1))
                stride[k][l] += xs[p];
        }
        if (fl ? !(xf[k] = ik_load_f64(c, x)) : !(xi[k] = ik_load_i64(c, x)))
            st = c->d->status;
    }
    int64_t n = ir_tensor_numel(&c->out[0]), ninner = 1;
    for (int l = nout; l < nl; l++)
        ninner *= sz[l];
    for (int64_t o = 0; o < n && !st; o++) {
        /* base: the operands' offsets at this output position (contracted letters at 0). */
        double accf = 0;
        int64_t acci = 0;
        memcpy(off, base, (size_t)c->nin * sizeof *off);
        for (int64_t j = 0; j < ninner; j++) {
            double pf = 1;
            int64_t pi = 1;
            for (int k = 0; k < c->nin; k++) {
                if (fl)
                    pf *= xf[k][off[k]];
                else
                    pi = (int64_t)((uint64_t)pi * (uint64_t)xi[k][off[k]]);
            }
            accf += pf;
            acci = (int64_t)((uint64_t)acci + (uint64_t)pi);
            for (int l = nl - 1; l >= nout; l--) { /* next contracted combination */
                for (int k = 0; k < c->nin; k++)
                    off[k] += stride[k][l];
                if (++idx[l] < sz[l])
                    break;
                for (int k = 0; k < c->nin; k++)
                    off[k] -= stride[k][l] * sz[l];
                idx[l] = 0;
            }
        }
        if (fl)
            ir_tensor_set(&c->out[0], o, accf);
        else
            ir_tensor_set_i64(&c->out[0], o, acci);
        for (int l = nout - 1; l >= 0; l--) { /* next output position */
            for (int k = 0; k < c->nin; k++)
                base[k] += stride[k][l];
            if (++idx[l] < sz[l])
                break;
            for (int k = 0; k < c->nin; k++)
                base[k] -= stride[k][l] * sz[l];
            idx[l] = 0;
        }
    }
    for (int k = 0; xf && xi && k < c->nin; k++) {
        free(xf[k]);
        free(xi[k]);
    }
    free(xf);
    free(xi);
    free(stride);
    free(off);
    return st;
}
