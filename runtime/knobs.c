/* knobs.c: the runtime's VITC_* environment variables in one table: name,
 * type, default, what it changes (runtime/knob.h says how a value is read).
 * None of them shapes a model's code; they choose how this process runs it. */
#include "runtime/rt_knobs.h"

const vitc_knob rt_knob_table[RT_NKNOBS] = {
    [RT_KNOB_NUM_THREADS] = {"VITC_NUM_THREADS", VITC_KNOB_WHOLE_INT, "", 1, RT_MAX_THREADS,
                             "Threads of a context created with nthreads 0, 1 to 1024 (unset: one per online core)"},
    [RT_KNOB_HUGE_PAGES] = {"VITC_HUGE_PAGES", VITC_KNOB_FLAG, "1", 0, 0,
                            "0: weights and workspaces on plain pages, embedded weights used in place in the file"},
    [RT_KNOB_PIN_THREADS] = {"VITC_PIN_THREADS", VITC_KNOB_FLAG, "1", 0, 0,
                             "0: a context's worker threads run on whichever cores the OS picks, instead of "
                             "each on a core of its own"},
    [RT_KNOB_CUDA_DEVICE] = {"VITC_CUDA_DEVICE", VITC_KNOB_INT, "0", INT32_MIN, INT32_MAX,
                             "The CUDA device (its ordinal) that CUDA models run on"},
    [RT_KNOB_CUDA_GRAPH] = {"VITC_CUDA_GRAPH", VITC_KNOB_FLAG, "1", 0, 0,
                            "0: CUDA models launch their kernels one by one on each run instead of replaying a "
                            "CUDA graph"},
    [RT_KNOB_CUDA_POISON] = {"VITC_CUDA_POISON", VITC_KNOB_FLAG, "0", 0, 0,
                             "1: a CUDA context's device workspace starts filled with 0xff bytes (to catch reads "
                             "of what no kernel wrote)"},
    [RT_KNOB_CUDA_PDL] = {"VITC_CUDA_PDL", VITC_KNOB_FLAG, "1", 0, 0,
                          "0: on sm_90 and later, a CUDA model's kernels are not launched as programmatic "
                          "dependent launches (each starting while the one before it finishes)"},
};

int64_t rt_knob(rt_knob_id id)
{
    const vitc_knob *k = &rt_knob_table[id];
    return vitc_knob_int(k, getenv(k->name));
}
