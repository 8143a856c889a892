/* signature.c: what a loaded model says about itself: its inputs and
 * outputs with the symbolic batch, limits, target and provenance, read from
 * the descriptor that loader.c checked. */
#include "runtime/rt_impl.h"

#include <string.h>

VITC_API int vitc_model_num_inputs(const vitc_model *m)
{
    return m ? m->abi->ninputs : (rt_fail(VITC_STATUS_INVALID_ARGUMENT, "vitc_model_num_inputs: model is NULL"), -1);
}

VITC_API int vitc_model_num_outputs(const vitc_model *m)
{
    return m ? m->abi->noutputs : (rt_fail(VITC_STATUS_INVALID_ARGUMENT, "vitc_model_num_outputs: model is NULL"), -1);
}

static vitc_status tensor_info(const char *fn, const vitc_model *m, int shape, int i, vitc_tensor_info *info,
                               int outputs)
{
    if (!m || !info)
        return rt_fail(VITC_STATUS_INVALID_ARGUMENT, "%s: %s is NULL", fn, m ? "info" : "model");
    if (shape < 0 || shape >= m->nvariants)
        return rt_fail(VITC_STATUS_INVALID_ARGUMENT, "%s: %s was compiled for %d input shape%s; index %d is out of "
                       "range", fn, m->path, m->nvariants, m->nvariants == 1 ? "" : "s", shape);
    const vitc_abi_model *a = m->variants[shape];
    int n = outputs ? a->noutputs : a->ninputs;
    if (i < 0 || i >= n)
        return rt_fail(VITC_STATUS_INVALID_ARGUMENT, "%s: %s has %d %s; index %d is out of range", fn, m->path, n,
                       outputs ? "outputs" : "inputs", i);
    const vitc_abi_tensor *t = outputs ? &a->outputs[i] : &a->inputs[i];
    memset(info, 0, sizeof *info);
    info->name = t->name;
    info->dtype = t->dtype;
    info->rank = t->rank;
    for (int k = 0; k < t->rank; k++) {
        info->dims[k] = t->dims[k];
        info->is_batch[k] = (uint8_t)((t->batch_mask >> k) & 1);
    }
    return VITC_STATUS_OK;
}

VITC_API vitc_status vitc_model_input(const vitc_model *m, int i, vitc_tensor_info *info)
{
    return tensor_info("vitc_model_input", m, 0, i, info, 0);
}

VITC_API vitc_status vitc_model_output(const vitc_model *m, int i, vitc_tensor_info *info)
{
    return tensor_info("vitc_model_output", m, 0, i, info, 1);
}

VITC_API int vitc_model_num_shapes(const vitc_model *m)
{
    return m ? m->nvariants : (rt_fail(VITC_STATUS_INVALID_ARGUMENT, "vitc_model_num_shapes: model is NULL"), -1);
}

VITC_API vitc_status vitc_model_shape_input(const vitc_model *m, int shape, int i, vitc_tensor_info *info)
{
    return tensor_info("vitc_model_shape_input", m, shape, i, info, 0);
}

VITC_API vitc_status vitc_model_shape_output(const vitc_model *m, int shape, int i, vitc_tensor_info *info)
{
    return tensor_info("vitc_model_shape_output", m, shape, i, info, 1);
}

int64_t rt_abi_fixed_batch(const vitc_abi_model *a)
{
    return a->size >= offsetof(vitc_abi_model, fixed_batch) + sizeof a->fixed_batch && a->fixed_batch > 0
        ? a->fixed_batch : 0;
}

VITC_API int64_t vitc_model_max_batch(const vitc_model *m)
{
    if (!m)
        return rt_fail(VITC_STATUS_INVALID_ARGUMENT, "vitc_model_max_batch: model is NULL"), -1;
    int64_t fixed = rt_abi_fixed_batch(m->abi);
    return fixed ? fixed : m->abi->max_batch;
}

VITC_API int64_t vitc_model_min_batch(const vitc_model *m)
{
    if (!m)
        return rt_fail(VITC_STATUS_INVALID_ARGUMENT, "vitc_model_min_batch: model is NULL"), -1;
    int64_t fixed = rt_abi_fixed_batch(m->abi);
    return fixed ? fixed : 1;
}

VITC_API const char *vitc_model_target(const vitc_model *m)
{
    return m ? m->abi->target : "";
}

VITC_API const char *vitc_model_precision(const vitc_model *m)
{
    if (!m)
        return "";
    if (m->cuda_plan)
        return m->cuda_plan->precision ? m->cuda_plan->precision : "";
    const vitc_abi_model *a = m->abi;
    if (a->size >= offsetof(vitc_abi_model, precision) + sizeof(void *) && a->precision)
        return a->precision;
    /* a CPU model from before the field: only --precision bf16 enabled amx-tile */
    return a->features && rt_cpu_feature_enabled(a->features, "amx-tile") ? "bf16" : "fp32";
}

VITC_API const char *vitc_model_knobs(const vitc_model *m)
{
    if (!m)
        return NULL;
    const vitc_abi_model *a = m->abi;
    return a->size >= offsetof(vitc_abi_model, knobs) + sizeof(void *) ? a->knobs : NULL;
}

VITC_API const char *vitc_model_compiler_version(const vitc_model *m)
{
    return m && m->abi->vitc_version ? m->abi->vitc_version : "";
}

VITC_API vitc_status vitc_model_get_details(const vitc_model *m, vitc_model_details *out)
{
    vitc_model_details *d = out;
    if (!m || !d)
        return rt_fail(VITC_STATUS_INVALID_ARGUMENT, "vitc_model_get_details: %s is NULL", m ? "details" : "model");
    const vitc_abi_model *a = m->abi;
    memset(d, 0, sizeof *d);
    d->abi_version = (int)a->abi_version;
    d->compiler_version = a->vitc_version ? a->vitc_version : "";
    d->target = a->target;
    d->triple = a->triple ? a->triple : "";
    d->cpu = a->cpu ? a->cpu : "";
    d->features = a->features ? a->features : "";
    d->source = a->source ? a->source : "";
    d->max_batch = vitc_model_max_batch(m);
    d->workspace_bytes = m->workspace_bytes;
    d->weights_bytes = a->weights_bytes;
    d->weights_file = a->weights_file;
    d->weights_fnv1a = a->weights_fnv1a;
    d->nkernels = a->nkernels;
    d->kernel_names = a->kernel_names;
    /* fields added to the descriptor later: 0 where it ends before them */
    if (a->size >= offsetof(vitc_abi_model, source_hash) + sizeof a->source_hash)
        d->source_hash = a->source_hash;
    return VITC_STATUS_OK;
}
