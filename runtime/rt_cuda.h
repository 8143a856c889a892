/* rt_cuda.h: the runtime's CUDA executor (cuda_exec.c) and driver loader
 * (cuda_driver.c), as the loader and vitc_run see them.  A CUDA model is
 * data: code images, a launch plan and weights (runtime/abi.h); everything
 * that touches the GPU is here, behind the driver API loaded at run time. */
#ifndef VITC_RT_CUDA_H
#define VITC_RT_CUDA_H

#include "runtime/cuda_api.h"
#include "runtime/rt_impl.h"

/* The driver's entry points, loaded and initialised on first use; NULL with
 * the reason in *why when there is no usable driver or device. */
RT_HIDDEN const rt_cuda_api *rt_cuda_driver(const char **why);
RT_HIDDEN const char *rt_cuda_error_string(rt_cu_result r);

/* At load: checks a CUDA model's plan against its descriptor (every index,
 * size and offset in range) and sets m->cuda_plan.  No GPU is touched. */
RT_HIDDEN vitc_status rt_cuda_model_load(vitc_model *m);
RT_HIDDEN void rt_cuda_model_free(vitc_model *m);
/* A context on the device: the model's module and weights on first use,
 * then this context's stream and workspace.  NO_DEVICE without a GPU. */
RT_HIDDEN vitc_status rt_cuda_context_create(vitc_context *c);
RT_HIDDEN void rt_cuda_context_free(vitc_context *c);
/* Runs the checked call: c->in_ptrs / c->out_ptrs at this batch. */
RT_HIDDEN vitc_status rt_cuda_run(vitc_context *c, int64_t batch);

#endif
