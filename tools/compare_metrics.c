/* compare_metrics.c: how `vitc compare` measures one output against its
 * reference (max abs error, max rel error = max|out-ref|/max|ref|, cosine,
 * the worst element), decides pass/fail, and draws seeded random inputs. */
#include "tools/compare.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void cmp_measure(const ir_tensor *out, const ir_tensor *ref, const cmp_tolerance *t, cmp_metrics *m)
{
    memset(m, 0, sizeof *m);
    m->worst = -1;
    m->cosine = 1;
    int same = out->rank == ref->rank;
    for (int k = 0; same && k < ref->rank; k++)
        same = out->dims[k] == ref->dims[k];
    if (!same) {
        m->shape_mismatch = 1;
        m->max_abs = m->max_rel = INFINITY;
        m->cosine = 0;
        return;
    }
    int64_t n = ir_tensor_numel(ref), first_bad = -1;
    m->count = n;
    double dot = 0, na = 0, nb = 0;
    for (int64_t i = 0; i < n; i++) {
        double a = ir_tensor_get(out, i), b = ir_tensor_get(ref, i);
        if (!isfinite(a) || !isfinite(b)) {
            if ((isnan(a) && isnan(b)) || a == b) /* the same NaN-ness or infinity */
                continue;
            m->nonfinite++;
            if (first_bad < 0)
                first_bad = i;
            continue;
        }
        double diff = fabs(a - b);
        if (t && t->elementwise && !(diff <= t->atol + t->rtol * fabs(b)))
            m->beyond++;
        if (m->worst < 0 || diff > m->max_abs) {
            m->max_abs = diff;
            m->worst = i;
        }
        if (fabs(b) > m->max_ref)
            m->max_ref = fabs(b);
        dot += a * b;
        na += a * a;
        nb += b * b;
    }
    if (m->nonfinite)
        m->worst = first_bad;
    m->max_rel = m->max_ref > 0 ? m->max_abs / m->max_ref : m->max_abs;
    if (m->nonfinite)
        m->max_abs = m->max_rel = NAN;
    m->cosine = na > 0 && nb > 0 ? dot / (sqrt(na) * sqrt(nb)) : (na == nb ? 1 : 0);
}

int cmp_passes(const cmp_metrics *m, const cmp_tolerance *t)
{
    if (m->shape_mismatch || m->nonfinite)
        return 0;
    if (!(m->max_abs <= t->max_rel * m->max_ref) && t->max_rel < INFINITY)
        return 0;
    if (t->elementwise && m->beyond)
        return 0;
    return !(t->min_cosine > 0) || m->cosine >= t->min_cosine;
}

char *cmp_index_str(const ir_tensor *t, int64_t flat, char *buf, size_t n)
{
    int64_t idx[IR_MAX_RANK];
    for (int k = t->rank - 1; k >= 0; k--) {
        idx[k] = t->dims[k] ? flat % t->dims[k] : 0;
        flat = t->dims[k] ? flat / t->dims[k] : 0;
    }
    size_t len = (size_t)snprintf(buf, n, "[");
    for (int k = 0; k < t->rank && len < n; k++)
        len += (size_t)snprintf(buf + len, n - len, "%s%lld", k ? "," : "", (long long)idx[k]);
    if (len < n)
        snprintf(buf + len, n - len, "]");
    return buf;
}

/* xorshift64*: small, seeded, the same on every machine. */
static uint64_t next_u64(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545f4914f6cdd1dull;
}

static double next_unit(uint64_t *s) /* (0, 1) */
{
    return ((double)(next_u64(s) >> 11) + 0.5) / 9007199254740992.0;
}

void cmp_random_fill(ir_tensor *t, uint64_t seed)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;
    if (s == 0)
        s = 1;
    int64_t n = ir_tensor_numel(t);
    if (!ir_dtype_is_float(t->dtype))
        return; /* integer inputs (indices, sizes) stay 0: any other value may be out of range */
    for (int64_t i = 0; i < n; i += 2) {
        /* Box-Muller: two standard normal values from two uniform ones. */
        double r = sqrt(-2 * log(next_unit(&s))), th = 2 * M_PI * next_unit(&s);
        ir_tensor_set(t, i, r * cos(th));
        if (i + 1 < n)
            ir_tensor_set(t, i + 1, r * sin(th));
    }
}
