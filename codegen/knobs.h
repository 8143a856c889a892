/* knobs.h: the compiler's VITC_* environment variables (codegen/knobs.def),
 * read once into a cg_knobs that the compile options carry and the backends
 * read. */
#ifndef VITC_CG_KNOBS_H
#define VITC_CG_KNOBS_H

#include "runtime/knob.h"

#include <stddef.h>
#include <stdint.h>

#define CG_KNOB_FIELD_FLAG int64_t
#define CG_KNOB_FIELD_INT int64_t
#define CG_KNOB_FIELD_STR const char *

/* Each knob's value: a STR the variable's text (pointing into the
 * environment) or its default; FLAG and INT as runtime/knob.h reads them. */
typedef struct {
#define CG_KNOB(field, name, type, def, lo, hi, shapes, doc) CG_KNOB_FIELD_##type field;
#include "codegen/knobs.def"
#undef CG_KNOB
} cg_knobs;

typedef struct {
    vitc_knob k;
    const char *shapes; /* the backend whose code it changes ("cuda"); NULL: none */
    size_t offset;      /* its field in cg_knobs */
} cg_knob;

extern const cg_knob cg_knob_table[];
extern const int cg_nknobs;

/* Every knob as the environment says now. */
cg_knobs cg_knobs_read(void);

/* What a .so of backend ("cpu", "cuda") records (vitc_abi_model.knobs): the
 * knobs that change its code and are set to other than their defaults, as
 * "NAME=VALUE" separated by spaces, "" when none.  A new string (free it);
 * NULL when out of memory. */
char *cg_knobs_recorded(const cg_knobs *k, const char *backend);

#endif
