/* knob.h: a VITC_* environment variable as a row of a table, and how its
 * value is read.  Two tables use it: the compiler's (codegen/knobs.def,
 * read once per compile) and the runtime's (runtime/knobs.c, read where a
 * model loads or runs).  Header only, needing libc alone, so that the
 * runtime stays free of the compiler. */
#ifndef VITC_KNOB_H
#define VITC_KNOB_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef enum {
    VITC_KNOB_FLAG, /* "0" off, "1" on; anything else: the default */
    VITC_KNOB_INT,  /* the integer the value starts with, as atoll reads it, when in [lo, hi]; else the default */
    VITC_KNOB_WHOLE_INT, /* the value, all of it an integer in [lo, hi]; else the default */
    VITC_KNOB_STR,  /* the value as it is; unset or empty: the default */
} vitc_knob_type;

typedef struct {
    const char *name;    /* the environment variable */
    vitc_knob_type type;
    const char *def;     /* the value when unset, as text; "": none (a number: 0) */
    int64_t lo, hi;      /* INT, WHOLE_INT: the values taken */
    const char *doc;     /* what it changes, one line */
} vitc_knob;

static inline const char *vitc_knob_type_name(vitc_knob_type t)
{
    return t == VITC_KNOB_FLAG ? "0|1" : t == VITC_KNOB_STR ? "text" : "integer";
}

/* The value of a FLAG, INT or WHOLE_INT knob when the variable holds v
 * (NULL: unset). */
static inline int64_t vitc_knob_int(const vitc_knob *k, const char *v)
{
    int64_t def = strtoll(k->def, NULL, 10);
    if (!v || !*v)
        return def;
    if (k->type == VITC_KNOB_FLAG)
        return strcmp(v, "0") == 0 ? 0 : strcmp(v, "1") == 0 ? 1 : def;
    char *end;
    long long n = strtoll(v, &end, 10);
    if (k->type == VITC_KNOB_WHOLE_INT && *end)
        return def;
    return n >= k->lo && n <= k->hi ? n : def;
}

#endif
