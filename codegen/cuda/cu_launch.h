/* cu_launch.h: the launch that most of the CUDA backend's kernels take: one
 * thread per element over a one-dimensional grid, the batch in a field of
 * the kernel's params struct, then whatever fields the caller sets. */
#ifndef VITC_CU_LAUNCH_H
#define VITC_CU_LAUNCH_H

#include "codegen/cuda/cu_impl.h"

/* Adds the kernel in *t (freed here in every case) as kind and label, and a
 * launch of it for node over n threads in blocks of threads, with the batch
 * in argument slot batch_slot (CU_FIELD of its params struct).  NULL when
 * either fails; c->d->status says why. */
cu_launch *cu_launch_flat(cu_ctx *c, const char *kind, const char *label, cu_str *t, int node, unsigned threads,
                          cg_poly n, int batch_slot);

#endif
