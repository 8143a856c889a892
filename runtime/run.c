/* run.c: contexts and vitc_run.  A context owns what one running model
 * needs besides the shared, read-only model: the activation workspace that
 * the compiler planned (workspace_bytes, valid for every batch) and a thread
 * pool.  vitc_run checks every argument against the descriptor before the
 * model's code sees it, so a compiled model never runs on a buffer of the
 * wrong size. */
#include "runtime/rt_impl.h"
#include "runtime/rt_knobs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int default_threads(void)
{
    int64_t set = rt_knob(RT_KNOB_NUM_THREADS); /* 1 to RT_MAX_THREADS; 0 unset */
    if (set)
        return (int)set;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > RT_MAX_THREADS ? RT_MAX_THREADS : (int)n;
}

VITC_API vitc_status vitc_context_create(vitc_model *m, int nthreads, vitc_context **out)
{
    if (out)
        *out = NULL;
    if (!m || !out)
        return rt_fail(VITC_STATUS_INVALID_ARGUMENT, "vitc_context_create: %s is NULL", m ? "out" : "model");
    if (nthreads < 0 || nthreads > RT_MAX_THREADS)
        return rt_fail(VITC_STATUS_INVALID_ARGUMENT, "vitc_context_create: %d threads (0 for one per core, at most %d)",
                       nthreads, RT_MAX_THREADS);
    if (m->data_only)
        return rt_fail(VITC_STATUS_INVALID_ARGUMENT,
                       "%s: read with vitc_model_read, to be described only; load it with vitc_model_load to run it",
                       m->path);
    vitc_context *c = calloc(1, sizeof *c);
    if (!c)
        return rt_fail(VITC_STATUS_OUT_OF_MEMORY, "out of memory");
    c->model = m;
    c->abi = m->abi;
    c->nthreads = m->exec->one_thread ? 1 : nthreads ? nthreads : default_threads();
    size_t nin = (size_t)m->abi->ninputs + 1, nout = (size_t)m->abi->noutputs + 1;
    c->in_slots = calloc(nin, sizeof *c->in_slots);
    c->out_slots = calloc(nout, sizeof *c->out_slots);
    c->in_ptrs = calloc(nin, sizeof *c->in_ptrs);
    c->out_ptrs = calloc(nout, sizeof *c->out_ptrs);
    if (!c->in_slots || !c->out_slots || !c->in_ptrs || !c->out_ptrs) {
        vitc_context_free(c);
        return rt_fail(VITC_STATUS_OUT_OF_MEMORY, "%s: out of memory for a context", m->path);
    }
    vitc_status st = m->exec->context_create(c);
    if (st != VITC_STATUS_OK) {
        char why[1024];
        snprintf(why, sizeof why, "%s", vitc_last_error());
        vitc_context_free(c);
        return rt_fail(st, "%s", why);
    }
    *out = c;
    return VITC_STATUS_OK;
}

/* The CPU executor's context: its workspace in host memory and its pool of threads. */
static vitc_status cpu_context_create(vitc_context *c)
{
    const vitc_model *m = c->model;
    if (!(c->workspace = rt_aligned_alloc(m->workspace_bytes)))
        return rt_fail(VITC_STATUS_OUT_OF_MEMORY, "%s: out of memory for a context (%llu bytes of workspace)", m->path,
                       (unsigned long long)m->workspace_bytes);
    if (!(c->pool = rt_pool_new(c->nthreads))) {
        char why[512];
        snprintf(why, sizeof why, "%s", vitc_last_error());
        return rt_fail(VITC_STATUS_OUT_OF_MEMORY, "%s: %s", m->path, why);
    }
    return VITC_STATUS_OK;
}

static void cpu_context_free(vitc_context *c)
{
    rt_pool_free(c->pool);
    free(c->workspace);
}

VITC_API void vitc_context_free(vitc_context *c)
{
    if (!c)
        return;
    if (c->model->exec->context_free)
        c->model->exec->context_free(c);
    rt_profile_free(c);
    free(c->in_slots);
    free(c->out_slots);
    free(c->in_ptrs);
    free(c->out_ptrs);
    free(c);
}

VITC_API int vitc_context_num_threads(const vitc_context *c)
{
    return c ? c->nthreads : (rt_fail(VITC_STATUS_INVALID_ARGUMENT, "vitc_context_num_threads: context is NULL"), -1);
}

/* "[B,4]" for a descriptor entry (at batch 0: symbolic) or "[2,4]". */
static const char *shape_str(const vitc_abi_tensor *t, char *buf, size_t n)
{
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < t->rank && k < n; i++) {
        int batch = (t->batch_mask >> i) & 1;
        if (batch && t->dims[i] == 1)
            k += (size_t)snprintf(buf + k, n - k, "%sB", i ? "," : "");
        else
            k += (size_t)snprintf(buf + k, n - k, "%s%lld%s", i ? "," : "", (long long)t->dims[i], batch ? "*B" : "");
    }
    if (k < n)
        snprintf(buf + k, n - k, "]");
    return buf;
}

static const char *given_str(const vitc_tensor *t, char *buf, size_t n)
{
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < t->rank && i < VITC_MAX_RANK && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? "," : "", (long long)t->dims[i]);
    if (k < n)
        snprintf(buf + k, n - k, "]");
    return buf;
}

/* Matches the caller's tensors to the descriptor's entries: by name where a
 * name is given, else by position.  slots[j] gets the tensor for entry j. */
static vitc_status match(const vitc_model *m, const char *what, const vitc_abi_tensor *decl, int ndecl,
                         const vitc_tensor *given, int ngiven, const vitc_tensor **slots)
{
    if (ngiven != ndecl)
        return rt_fail(VITC_STATUS_INVALID_ARGUMENT, "%s: the model has %d %s; %d given", m->path, ndecl, what, ngiven);
    if (ndecl > 0 && !given)
        return rt_fail(VITC_STATUS_INVALID_ARGUMENT, "%s: %s is NULL", m->path, what);
    for (int j = 0; j < ndecl; j++)
        slots[j] = NULL;
    for (int i = 0; i < ngiven; i++) {
        int j = i;
        if (given[i].name) {
            for (j = 0; j < ndecl && strcmp(decl[j].name, given[i].name) != 0; j++)
                ;
            if (j == ndecl)
                return rt_fail(VITC_STATUS_INVALID_ARGUMENT, "%s: the model has no %.*s named '%s'", m->path,
                               (int)strlen(what) - 1, what, given[i].name);
        }
        if (slots[j])
            return rt_fail(VITC_STATUS_INVALID_ARGUMENT, "%s: %.*s '%s' is given twice", m->path, (int)strlen(what) - 1,
                           what, decl[j].name);
        slots[j] = &given[i];
    }
    return VITC_STATUS_OK;
}

/* Checks one tensor against its entry; *batch is the batch seen so far
 * (0 if none yet) and is set from the first batch dimension met. */
static vitc_status check_tensor(const vitc_model *m, const char *what, const vitc_abi_tensor *decl,
                                const vitc_tensor *t, int64_t *batch)
{
    char want[256], got[256];
    if (!t->data)
        return rt_fail(VITC_STATUS_INVALID_ARGUMENT, "%s: %s '%s': data is NULL", m->path, what, decl->name);
    if (t->dtype != decl->dtype)
        return rt_fail(VITC_STATUS_DTYPE_MISMATCH, "%s: %s '%s' has dtype %s (%d); the model expects %s (%d)", m->path,
                       what, decl->name, rt_dtype_name(t->dtype), t->dtype, rt_dtype_name(decl->dtype), decl->dtype);
    if (t->rank != decl->rank)
        return rt_fail(VITC_STATUS_SHAPE_MISMATCH, "%s: %s '%s' has rank %d; the model expects %s", m->path, what,
                       decl->name, t->rank, shape_str(decl, want, sizeof want));
    /* A model whose export fixed the batch: a tensor right but for its first
     * dimension, the batch, is given another batch than the one it runs. */
    int64_t fixed = rt_abi_fixed_batch(m->abi);
    int other_batch = fixed && decl->rank >= 1 && !(decl->batch_mask & 1) && decl->dims[0] == fixed &&
                      t->dims[0] != fixed;
    for (int k = 1; other_batch && k < decl->rank; k++)
        other_batch = t->dims[k] == decl->dims[k];
    if (other_batch)
        return rt_fail(VITC_STATUS_BATCH_OUT_OF_RANGE,
                       "%s: %s '%s' has shape %s: batch %lld; the model runs batch %lld only (its ONNX export fixed "
                       "the batch; compile it with --dynamic-batch, or export it with a dynamic batch, to run others)",
                       m->path, what, decl->name, given_str(t, got, sizeof got), (long long)t->dims[0],
                       (long long)fixed);
    for (int k = 0; k < decl->rank; k++) {
        int64_t d = t->dims[k], w = decl->dims[k];
        if (!((decl->batch_mask >> k) & 1)) {
            if (d != w)
                return rt_fail(VITC_STATUS_SHAPE_MISMATCH, "%s: %s '%s' has shape %s; the model expects %s", m->path,
                               what, decl->name, given_str(t, got, sizeof got), shape_str(decl, want, sizeof want));
            continue;
        }
        if (w == 0) { /* 0 * B: only 0 fits, and it says nothing about B */
            if (d != 0)
                return rt_fail(VITC_STATUS_SHAPE_MISMATCH, "%s: %s '%s' has shape %s; the model expects %s", m->path,
                               what, decl->name, given_str(t, got, sizeof got), shape_str(decl, want, sizeof want));
            continue;
        }
        if (d < 0 || d % w != 0)
            return rt_fail(VITC_STATUS_SHAPE_MISMATCH,
                           "%s: %s '%s' has shape %s; the model expects %s (dim %d a multiple of %lld)", m->path, what,
                           decl->name, given_str(t, got, sizeof got), shape_str(decl, want, sizeof want), k,
                           (long long)w);
        int64_t b = d / w;
        if (*batch == 0) {
            if (b < 1 || b > m->abi->max_batch)
                return rt_fail(VITC_STATUS_BATCH_OUT_OF_RANGE,
                               "%s: %s '%s' has shape %s: batch %lld; the model runs batches 1 to %lld%s", m->path,
                               what, decl->name, given_str(t, got, sizeof got), (long long)b,
                               (long long)m->abi->max_batch,
                               b > m->abi->max_batch ? " (compile it with a larger --batch to run more)" : "");
            *batch = b;
        } else if (b != *batch) {
            return rt_fail(VITC_STATUS_SHAPE_MISMATCH, "%s: %s '%s' has shape %s: batch %lld, but batch %lld before",
                           m->path, what, decl->name, given_str(t, got, sizeof got), (long long)b, (long long)*batch);
        }
    }
    return VITC_STATUS_OK;
}

/* The variant whose inputs have the shapes given (c->in_slots, matched),
 * but for the batch; NULL with the error naming the shapes compiled. */
static const vitc_abi_model *pick_variant(const vitc_context *c)
{
    const vitc_model *m = c->model;
    for (int i = 0; i < m->nvariants; i++) {
        const vitc_abi_model *v = m->variants[i];
        int fits = 1;
        for (int j = 0; fits && j < v->ninputs; j++) {
            const vitc_abi_tensor *decl = &v->inputs[j];
            const vitc_tensor *t = c->in_slots[j];
            fits = t->rank == decl->rank;
            for (int k = 0; fits && k < decl->rank; k++)
                fits = ((decl->batch_mask >> k) & 1) || t->dims[k] == decl->dims[k];
        }
        if (fits)
            return v;
    }
    char got[256], list[1024];
    size_t k = 0;
    const vitc_abi_tensor *first = &m->abi->inputs[0];
    for (int i = 0; i < m->nvariants && k < sizeof list; i++) {
        char one[256];
        k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", i ? ", " : "",
                              shape_str(&m->variants[i]->inputs[0], one, sizeof one));
    }
    rt_fail(VITC_STATUS_SHAPE_MISMATCH,
            "%s: input '%s' has shape %s; the model was compiled for %s (compile it with --shapes listing this size "
            "to run it)", m->path, first->name, given_str(c->in_slots[0], got, sizeof got), list);
    return NULL;
}

VITC_API vitc_status vitc_run(vitc_context *c, const vitc_tensor *inputs, int ninputs, vitc_tensor *outputs,
                              int noutputs)
{
    if (!c)
        return rt_fail(VITC_STATUS_INVALID_ARGUMENT, "vitc_run: context is NULL");
    const vitc_model *m = c->model;
    const vitc_abi_model *a = m->abi;
    vitc_status st = match(m, "inputs", a->inputs, a->ninputs, inputs, ninputs, c->in_slots);
    if (st == VITC_STATUS_OK && m->nvariants > 1 && !(a = pick_variant(c))) /* inputs named as the first's */
        return VITC_STATUS_SHAPE_MISMATCH;
    if (st == VITC_STATUS_OK)
        st = match(m, "outputs", a->outputs, a->noutputs, outputs, noutputs, c->out_slots);
    int64_t batch = 0;
    for (int j = 0; st == VITC_STATUS_OK && j < a->ninputs; j++)
        st = check_tensor(m, "input", &a->inputs[j], c->in_slots[j], &batch);
    for (int j = 0; st == VITC_STATUS_OK && j < a->noutputs; j++)
        st = check_tensor(m, "output", &a->outputs[j], c->out_slots[j], &batch);
    if (st != VITC_STATUS_OK)
        return st;
    for (int j = 0; j < a->ninputs; j++)
        c->in_ptrs[j] = c->in_slots[j]->data;
    for (int j = 0; j < a->noutputs; j++)
        c->out_ptrs[j] = c->out_slots[j]->data;
    rt_profile_variant(c, a);
    c->abi = a;
    return m->exec->run(c, batch ? batch : 1);
}

/* The CPU executor's run: the model's own code, on the context's pool. */
static vitc_status cpu_run(vitc_context *c, int64_t batch)
{
    const vitc_model *m = c->model;
    const vitc_abi_model *a = c->abi;
    vitc_abi_call call = {
        .batch = batch,
        .inputs = (const void *const *)c->in_ptrs,
        .outputs = (void *const *)c->out_ptrs,
        .workspace = c->workspace,
        .weights = m->weights,
        .pool = c->pool,
        .parallel_for = rt_parallel_for,
        .nthreads = c->nthreads,
    };
    rt_profile_begin(c, &call);
    int32_t r = a->run(&call);
    if (r == 0)
        return VITC_STATUS_OK;
    /* A model reports a vitc_status (e.g. NO_DEVICE from a CUDA model); anything else is internal. */
    vitc_status rs = (r > 0 && r <= VITC_STATUS_INTERNAL) ? (vitc_status)r : VITC_STATUS_INTERNAL;
    return rt_fail(rs, "%s: the model failed at batch %lld (code %d: %s)", m->path, (long long)call.batch, (int)r,
                   vitc_status_string(rs));
}

const rt_executor rt_cpu_executor = {
    .target = "cpu",
    .context_create = cpu_context_create,
    .context_free = cpu_context_free,
    .run = cpu_run,
};
