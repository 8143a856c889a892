/* rt_knobs.h: the VITC_* environment variables the runtime reads
 * (runtime/knobs.c), for its own files and for `vitc help env`.  Each is
 * read where it is used, every time, so that a program may change one
 * between loads or contexts. */
#ifndef VITC_RT_KNOBS_H
#define VITC_RT_KNOBS_H

#include "runtime/knob.h"

#define RT_MAX_THREADS 1024 /* threads of a context at most */

typedef enum {
    RT_KNOB_NUM_THREADS,
    RT_KNOB_HUGE_PAGES,
    RT_KNOB_PIN_THREADS,
    RT_KNOB_CUDA_DEVICE,
    RT_KNOB_CUDA_GRAPH,
    RT_KNOB_CUDA_POISON,
    RT_KNOB_CUDA_PDL,
    RT_NKNOBS
} rt_knob_id;

extern const vitc_knob rt_knob_table[RT_NKNOBS];

/* The knob's value as the environment says now (runtime/knob.h). */
int64_t rt_knob(rt_knob_id id);

#endif
