/* profile.c: time per part of a run.
 *
 * A CPU model compiled with profile marks lists its parts in the descriptor
 * (vitc_abi_part: the code of one node of the compiled graph) and, when the
 * call carries a hook, calls it as each part ends; the hook charges the time
 * since the previous mark (or the start of the run) to that part.  Without
 * the hook a mark is one test of a NULL pointer.
 *
 * A CUDA model's parts are the launches of its plan: while profiling, a run
 * launches its kernels one by one (no graph, no programmatic dependent
 * launch, which would let one kernel overlap the next) with a CUDA event
 * after each, and charges each launch the GPU time between its event and
 * the one before (cuda_exec.c, rt_profile_add). */
#include "runtime/rt_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct rt_profile {
    int on;
    int nparts;
    double last;     /* when the previous part ended, seconds */
    int64_t *calls;
    double *seconds;
    char **text;     /* a CUDA model's: per launch, its op and its source (2 strings each) */
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

/* One call of part, `seconds` long. */
static void charge(struct rt_profile *p, int part, double seconds)
{
    if (part >= 0 && part < p->nparts) {
        p->seconds[part] += seconds;
        p->calls[part]++;
    }
}

static void mark(void *arg, int32_t part)
{
    struct rt_profile *p = arg;
    double t = now_s();
    charge(p, part, t - p->last);
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

int rt_profile_on(const vitc_context *c) { return c->profile && c->profile->on; }

void rt_profile_add(vitc_context *c, int part, double seconds)
{
    if (rt_profile_on(c))
        charge(c->profile, part, seconds);
}

void rt_profile_free(vitc_context *c)
{
    struct rt_profile *p = c->profile;
    if (!p)
        return;
    for (int i = 0; p->text && i < 2 * p->nparts; i++)
        free(p->text[i]);
    free(p->text);
    free(p->calls);
    free(p->seconds);
    free(p);
    c->profile = NULL;
}

/* A CUDA model's parts: its plan's launches. */
static int cuda_parts(const vitc_model *m) { return m->cuda_plan ? m->cuda_plan->nlaunches : 0; }

/* Launch i's op and source from its kernel's name in the descriptor ("vk_gemm2 gemm bf16 mma 64x64 K=192
 * N=64 +bias [sm_80: ...] (1 launch)"): the label's first word ("gemm"), and the label with the batches the
 * launch runs at.  0, or -1 when out of memory. */
static int cuda_part_text(const vitc_model *m, int i, char **op, char **source)
{
    const vitc_cuda_launch *l = &m->cuda_plan->launches[i];
    const vitc_abi_model *a = m->abi;
    const char *name = l->function >= 0 && l->function < a->nkernels && a->kernel_names && a->kernel_names[l->function]
                           ? a->kernel_names[l->function]
                           : "?";
    const char *label = strchr(name, ' ');
    label = label ? label + 1 : name;
    size_t n = strcspn(label, "[");
    while (n && label[n - 1] == ' ')
        n--;
    size_t w = strcspn(label, " ");
    *op = malloc(w + 1);
    *source = malloc(n + 64);
    if (!*op || !*source)
        return -1;
    memcpy(*op, label, w);
    (*op)[w] = 0;
    snprintf(*source, n + 64, "%.*s (batch %lld-%lld)", (int)n, label, (long long)l->min_batch,
             (long long)l->max_batch);
    return 0;
}

/* INVALID_ARGUMENT with the reason where c's model has no parts. */
static vitc_status has_parts(const char *fn, const vitc_context *c)
{
    if (!c)
        return rt_fail(VITC_STATUS_INVALID_ARGUMENT, "%s: context is NULL", fn);
    const vitc_model *m = c->model;
    if (m->cuda_plan)
        return cuda_parts(m) > 0 ? VITC_STATUS_OK
                                 : rt_fail(VITC_STATUS_INVALID_ARGUMENT, "%s: the CUDA model launches no kernel", m->path);
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
    const vitc_model *m = c->model;
    int n = cuda_parts(m); /* room for the parts of every variant */
    for (int i = 0; i < m->nvariants; i++)
        n = rt_abi_nparts(m->variants[i]) > n ? rt_abi_nparts(m->variants[i]) : n;
    struct rt_profile *p = c->profile;
    if (!p) {
        p = calloc(1, sizeof *p);
        c->profile = p;
        int bad = !p;
        if (p) {
            p->nparts = n;
            p->calls = calloc((size_t)n, sizeof *p->calls);
            p->seconds = calloc((size_t)n, sizeof *p->seconds);
            p->text = m->cuda_plan ? calloc(2 * (size_t)n, sizeof *p->text) : NULL;
            bad = !p->calls || !p->seconds || (m->cuda_plan && !p->text);
            for (int i = 0; !bad && m->cuda_plan && i < n; i++)
                bad = cuda_part_text(m, i, &p->text[2 * i], &p->text[2 * i + 1]) != 0;
        }
        if (bad) {
            rt_profile_free(c);
            return rt_fail(VITC_STATUS_OUT_OF_MEMORY, "out of memory");
        }
    }
    memset(p->calls, 0, sizeof *p->calls * (size_t)n);
    memset(p->seconds, 0, sizeof *p->seconds * (size_t)n);
    p->on = 1;
    return VITC_STATUS_OK;
}

VITC_API int vitc_context_profile_parts(const vitc_context *c)
{
    if (has_parts("vitc_context_profile_parts", c) != VITC_STATUS_OK)
        return -1;
    return c->model->cuda_plan ? cuda_parts(c->model) : rt_abi_nparts(c->abi);
}

VITC_API vitc_status vitc_context_profile_part(const vitc_context *c, int i, vitc_profile_part *out)
{
    vitc_status st = has_parts("vitc_context_profile_part", c);
    if (st != VITC_STATUS_OK)
        return st;
    const vitc_model *m = c->model;
    int n = m->cuda_plan ? cuda_parts(m) : rt_abi_nparts(c->abi);
    if (!out || i < 0 || i >= n)
        return rt_fail(VITC_STATUS_INVALID_ARGUMENT, "vitc_context_profile_part: %s", out ? "index out of range" : "out is NULL");
    if (m->cuda_plan) {
        const struct rt_profile *p = c->profile;
        out->kernels = m->cuda_plan->functions[m->cuda_plan->launches[i].function];
        out->op = p && p->text ? p->text[2 * i] : "";
        out->source = p && p->text ? p->text[2 * i + 1] : "";
    } else {
        const vitc_abi_part *part = &c->abi->parts[i];
        out->kernels = part->kernels;
        out->op = part->op;
        out->source = part->source;
    }
    out->calls = c->profile ? c->profile->calls[i] : 0;
    out->seconds = c->profile ? c->profile->seconds[i] : 0;
    return VITC_STATUS_OK;
}
