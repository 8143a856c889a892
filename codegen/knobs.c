/* knobs.c: the table of the compiler's VITC_* environment variables
 * (codegen/knobs.def), reading them, and the text of those set that a .so
 * records. */
#include "codegen/knobs.h"

#include <stdio.h>

const cg_knob cg_knob_table[] = {
#define CG_KNOB(field, name, type, def, lo, hi, shapes, doc) \
    {{name, VITC_KNOB_##type, def, lo, hi, doc}, shapes, offsetof(cg_knobs, field)},
#include "codegen/knobs.def"
#undef CG_KNOB
};
const int cg_nknobs = (int)(sizeof cg_knob_table / sizeof cg_knob_table[0]);

cg_knobs cg_knobs_read(void)
{
    cg_knobs out = {0};
    for (int i = 0; i < cg_nknobs; i++) {
        const vitc_knob *k = &cg_knob_table[i].k;
        const char *v = getenv(k->name);
        unsigned char *field = (unsigned char *)&out + cg_knob_table[i].offset;
        if (k->type == VITC_KNOB_STR) {
            const char *s = v && *v ? v : k->def;
            memcpy(field, &s, sizeof s);
        } else {
            int64_t x = vitc_knob_int(k, v);
            memcpy(field, &x, sizeof x);
        }
    }
    return out;
}

/* cg_knobs_recorded's text into buf; its whole length, as snprintf's. */
static size_t recorded(const cg_knobs *kn, const char *backend, char *buf, size_t n)
{
    size_t len = 0;
    if (n)
        buf[0] = 0;
    for (int i = 0; i < cg_nknobs; i++) {
        const cg_knob *r = &cg_knob_table[i];
        const unsigned char *field = (const unsigned char *)kn + r->offset;
        if (!r->shapes || strcmp(r->shapes, backend) != 0)
            continue;
        char val[32];
        const char *s = val;
        if (r->k.type == VITC_KNOB_STR) {
            memcpy(&s, field, sizeof s);
            if (strcmp(s, r->k.def) == 0)
                continue;
        } else {
            int64_t x;
            memcpy(&x, field, sizeof x);
            if (x == vitc_knob_int(&r->k, NULL))
                continue;
            snprintf(val, sizeof val, "%lld", (long long)x);
        }
        int w = snprintf(len < n ? buf + len : NULL, len < n ? n - len : 0, "%s%s=%s", len ? " " : "", r->k.name, s);
        len += w > 0 ? (size_t)w : 0;
    }
    return len;
}

char *cg_knobs_recorded(const cg_knobs *k, const char *backend)
{
    size_t n = recorded(k, backend, NULL, 0) + 1;
    char *s = malloc(n);
    if (s)
        recorded(k, backend, s, n);
    return s;
}
