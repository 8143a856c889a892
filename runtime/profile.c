/* profile.c: time per part of a CPU model's run.  A model compiled with
 * profile marks lists its parts in the descriptor (vitc_abi_part: the code
 * of one node of the compiled graph) and, when the call carries a hook,
 * calls it as each part ends; the hook charges the time since the previous
 * mark (or the start of the run) to that part.  Without the hook a mark is
 * one test of a NULL pointer. */
#include "runtime/rt_impl.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

struct rt_profile {
    int on;
    int nparts;
    double last;     /* when the previous part ended, seconds */
    int64_t *calls;
    double *seconds;
};

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int rt_abi_nparts(const vitc_abi_model *a)
{
    if (a->size < offsetof(vitc_abi_model, parts) + sizeof a->parts || a->nparts <= 0 || !a->parts)
        return 0;
    return a->nparts;
}

static void mark(void *arg, int32_t part)
{
    struct rt_profile *p = arg;
    double t = now_s();
    if (part >= 0 && part < p->nparts) {
        p->seconds[part] += t - p->last;
        p->calls[part]++;
    }
    p->last = t;
}

void rt_profile_begin(vitc_context *c, vitc_abi_call *call)
{
    struct rt_profile *p = c->profile;
    if (!p || !p->on)
        return;
    call->profile = mark;
    call->profile_arg = p;
    p->last = now_s();
}

void rt_profile_variant(vitc_context *c, const vitc_abi_model *a)
{
    struct rt_profile *p = c->profile;
    if (!p || a == c->abi)
        return;
    memset(p->calls, 0, sizeof *p->calls * (size_t)p->nparts);
    memset(p->seconds, 0, sizeof *p->seconds * (size_t)p->nparts);
}

void rt_profile_free(vitc_context *c)
{
    struct rt_profile *p = c->profile;
    if (!p)
        return;
    free(p->calls);
    free(p->seconds);
    free(p);
    c->profile = NULL;
}

/* INVALID_ARGUMENT with the reason where c's model has no parts. */
static vitc_status has_parts(const char *fn, const vitc_context *c)
{
    if (!c)
        return rt_fail(VITC_STATUS_INVALID_ARGUMENT, "%s: context is NULL", fn);
    const vitc_model *m = c->model;
    if (m->cuda_plan)
        return rt_fail(VITC_STATUS_INVALID_ARGUMENT,
                       "%s: a CUDA model has no per-part profile (its kernels run as one CUDA graph); "
                       "vitc_context_device_ms gives the GPU time of a run",
                       m->path);
    if (!rt_abi_nparts(m->abi))
        return rt_fail(VITC_STATUS_INVALID_ARGUMENT,
                       "%s: the model has no profile marks (compiled by vitc %s); compile it again to profile it",
                       m->path, m->abi->vitc_version ? m->abi->vitc_version : "?");
    return VITC_STATUS_OK;
}

VITC_API vitc_status vitc_context_set_profiling(vitc_context *c, int on)
{
    vitc_status st = has_parts("vitc_context_set_profiling", c);
    if (st != VITC_STATUS_OK)
        return st;
    if (!on) {
        if (c->profile)
            c->profile->on = 0;
        return VITC_STATUS_OK;
    }
    int n = 0; /* room for the parts of every variant */
    for (int i = 0; i < c->model->nvariants; i++)
        n = rt_abi_nparts(c->model->variants[i]) > n ? rt_abi_nparts(c->model->variants[i]) : n;
    struct rt_profile *p = c->profile;
    if (!p) {
        p = calloc(1, sizeof *p);
        if (p) {
            p->calls = calloc((size_t)n, sizeof *p->calls);
            p->seconds = calloc((size_t)n, sizeof *p->seconds);
        }
        c->profile = p;
        if (!p || !p->calls || !p->seconds) {
            rt_profile_free(c);
            return rt_fail(VITC_STATUS_OUT_OF_MEMORY, "out of memory");
        }
        p->nparts = n;
    }
    memset(p->calls, 0, sizeof *p->calls * (size_t)n);
    memset(p->seconds, 0, sizeof *p->seconds * (size_t)n);
    p->on = 1;
    return VITC_STATUS_OK;
}

VITC_API int vitc_context_profile_parts(const vitc_context *c)
{
    return has_parts("vitc_context_profile_parts", c) == VITC_STATUS_OK ? rt_abi_nparts(c->abi) : -1;
}

VITC_API vitc_status vitc_context_profile_part(const vitc_context *c, int i, vitc_profile_part *out)
{
    vitc_status st = has_parts("vitc_context_profile_part", c);
    if (st != VITC_STATUS_OK)
        return st;
    int n = rt_abi_nparts(c->abi);
    if (!out || i < 0 || i >= n)
        return rt_fail(VITC_STATUS_INVALID_ARGUMENT, "vitc_context_profile_part: %s", out ? "index out of range" : "out is NULL");
    const vitc_abi_part *part = &c->abi->parts[i];
    out->kernels = part->kernels;
    out->op = part->op;
    out->source = part->source;
    out->calls = c->profile ? c->profile->calls[i] : 0;
    out->seconds = c->profile ? c->profile->seconds[i] : 0;
    return VITC_STATUS_OK;
}
