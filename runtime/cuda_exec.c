/* cuda_exec.c: running a CUDA model.
 *
 *   load     the plan is checked against the descriptor before anything
 *            trusts it (indices, argument counts, every offset inside the
 *            workspace or the weights at the largest batch); no GPU needed
 *   model    on the first context: the primary context of the device
 *            (VITC_CUDA_DEVICE, default 0), the code image that fits it
 *            (the CUBIN of its architecture, else of an older minor version
 *            of the same major, else PTX for the driver to compile), every
 *            kernel with its shared memory limit raised where the plan needs
 *            it, and the weights uploaded once (the context synchronised
 *            after it: a copy from pageable memory may return before it
 *            lands, and the kernels run on non-blocking streams)
 *   context  a stream and the planned device workspace (VITC_CUDA_POISON=1:
 *            filled with 0xff bytes, a NaN in every float type, so that a
 *            kernel reading what nothing wrote shows); per batch size the
 *            launch sequence captured once as a CUDA graph (VITC_CUDA_GRAPH=0:
 *            launched one by one) and replayed; a launch with tensor maps
 *            (the TMA GEMM of the sm_90a image) gets them encoded at that
 *            batch by the driver and passed by value after its arguments
 *   run      inputs copied in (from the host, or device to device for
 *            vitc_run_device), the graph launched between two events (the
 *            device time of vitc_context_device_ms), outputs copied out, one
 *            synchronisation, errors reported with the driver's words */
#include "runtime/rt_cuda.h"
#include "runtime/rt_knobs.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RT_CUDA_MAX_GRAPHS 16      /* graphs kept per context (distinct batch sizes) */
#define RT_CUDA_STATIC_SMEM 49152  /* dynamic shared memory every kernel may use without opting in */

struct rt_cuda_model {
    pthread_mutex_t lock;
    int ready;                     /* the device state below exists */
    const rt_cuda_api *cu;
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction *fns;
    CUdeviceptr weights;
    int arch, nsm;
    char name[128];
    const vitc_cuda_image *image;
};

typedef struct {
    int64_t batch;
    CUgraphExec exec;
    uint64_t used;
} rt_graph;

struct rt_cuda_ctx {
    CUstream stream;
    CUdeviceptr ws;
    int use_graphs;
    rt_graph graphs[RT_CUDA_MAX_GRAPHS];
    int ngraphs;
    uint64_t tick;
    unsigned long long *args;      /* VITC_CUDA_MAX_ARGS slots per launch */
    CUevent ev[2];                 /* around the kernels of each run */
    int device_io;                 /* this run's tensors are device addresses (vitc_run_device) */
    int pdl;                       /* kernels after the first of a run as programmatic dependent launches */
    double device_ms;              /* of the last run; < 0 before the first */
    CUevent *pev;                  /* profiling: an event after each launch (made at the first profiled run) */
    int *ran, nran;                /* profiling: the launches of the last run, in order */
};

/* ---- load: the plan's sanity ---- */

/* 1 if p stays within [0, limit - bytes] at batches 1 and max (every poly
 * in a plan is monotonic in the batch: sizes and offsets only grow). */
static int in_range(const vitc_cuda_poly *p, int64_t max_batch, uint64_t bytes, uint64_t limit)
{
    for (int k = 0; k < 4; k++)
        if (p->c[k] < -((int64_t)1 << 40) || p->c[k] > ((int64_t)1 << 50))
            return 0;
    int64_t lo = vitc_cuda_poly_at(p, 1), hi = vitc_cuda_poly_at(p, max_batch);
    return lo >= 0 && hi >= 0 && (uint64_t)hi <= limit && bytes <= limit - (uint64_t)hi;
}

/* 1 if the matrix of tensor map t lies within the memory of its launch
 * argument at every batch up to max_batch (the argument already checked),
 * and the map is one the device library reads (2-byte elements, rows of a
 * multiple of 16 bytes, boxes of 128-byte rows). */
static int tmap_ok(const vitc_cuda_tmap *t, const vitc_cuda_launch *l, int64_t max_batch, uint64_t ws_bytes,
                   uint64_t w_bytes)
{
    if (t->arg < 0 || t->arg >= l->nargs || (t->elem != VITC_CUDA_TMAP_F16 && t->elem != VITC_CUDA_TMAP_BF16) ||
        t->cols < 1 || t->cols > ((int64_t)1 << 31) || t->row_bytes < 2 * t->cols || t->row_bytes % 16 ||
        t->row_bytes > ((int64_t)1 << 40) || t->box_cols * 2 != 128 || t->box_rows < 1 || t->box_rows > 256)
        return 0;
    const vitc_cuda_arg *g = &l->args[t->arg];
    uint64_t limit = g->kind == VITC_CUDA_ARG_WORKSPACE ? ws_bytes : g->kind == VITC_CUDA_ARG_WEIGHTS ? w_bytes : 0;
    if (!limit || !in_range(&t->rows, max_batch, 0, (uint64_t)1 << 32))
        return 0;
    uint64_t start = (uint64_t)vitc_cuda_poly_at(&g->value, max_batch);
    uint64_t rows = (uint64_t)vitc_cuda_poly_at(&t->rows, max_batch);
    return start <= limit && rows <= (limit - start) / (uint64_t)t->row_bytes;
}

static vitc_status check_io(const vitc_model *m, const char *what, const vitc_cuda_io *io, const vitc_abi_tensor *t,
                            int n, int outputs)
{
    const vitc_abi_model *a = m->abi;
    const vitc_cuda_plan *p = a->cuda_plan;
    for (int i = 0; i < n; i++) {
        uint64_t bytes = (uint64_t)vitc_abi_numel_at(&t[i], a->max_batch) * rt_dtype_size(t[i].dtype);
        uint64_t limit = io[i].space == VITC_CUDA_SPACE_WORKSPACE ? p->workspace_bytes
                         : io[i].space == VITC_CUDA_SPACE_WEIGHTS && outputs ? a->weights_bytes : 0;
        if (!limit || io[i].offset > limit || bytes > limit - io[i].offset)
            return rt_fail(VITC_STATUS_LOAD_FAILED, "%s: malformed CUDA plan: %s %d ('%s') outside device memory",
                           m->path, what, i, t[i].name);
    }
    return VITC_STATUS_OK;
}

vitc_status rt_cuda_model_load(vitc_model *m)
{
    const vitc_abi_model *a = m->abi;
    const vitc_cuda_plan *p = a->size >= offsetof(vitc_abi_model, cuda_plan) + sizeof(void *) ? a->cuda_plan : NULL;
    if (!p)
        return rt_fail(VITC_STATUS_LOAD_FAILED, "%s: a CUDA model without a launch plan", m->path);
    if (p->version != VITC_CUDA_PLAN_VERSION || p->size != sizeof(vitc_cuda_plan))
        return rt_fail(VITC_STATUS_ABI_MISMATCH,
                       "%s: CUDA plan version %u (%u bytes); this runtime reads version %d (%zu bytes)", m->path,
                       p->version, p->size, VITC_CUDA_PLAN_VERSION, sizeof(vitc_cuda_plan));
    const char *bad = NULL;
    if (!p->precision || p->nimages < 1 || p->nimages > 64 || !p->images || p->nfunctions < 1 ||
        p->nfunctions > 100000 || !p->functions || p->nlaunches < 0 || p->nlaunches > 1000000 ||
        (p->nlaunches && !p->launches) || (a->ninputs && !p->inputs) || (a->noutputs && !p->outputs))
        bad = "counts";
    for (int i = 0; !bad && i < p->nimages; i++) {
        const vitc_cuda_image *im = &p->images[i];
        if (!im->data || !im->bytes || (im->kind != VITC_CUDA_IMAGE_CUBIN && im->kind != VITC_CUDA_IMAGE_PTX))
            bad = "code image";
    }
    for (int i = 0; !bad && i < p->nfunctions; i++)
        if (!p->functions[i])
            bad = "function name";
    for (int i = 0; !bad && i < p->nlaunches; i++) {
        const vitc_cuda_launch *l = &p->launches[i];
        if (l->function < 0 || l->function >= p->nfunctions || l->block < 1 || l->block > 1024 ||
            l->nargs < 0 || l->nargs > VITC_CUDA_MAX_ARGS || (l->nargs && !l->args) || l->min_batch < 1 ||
            l->min_batch > l->max_batch)
            bad = "launch";
        for (int k = 0; !bad && k < 3; k++)
            if (l->grid_div[k] < 1 || !in_range(&l->grid[k], a->max_batch, 0, (uint64_t)1 << 62))
                bad = "launch grid";
        for (int k = 0; !bad && k < l->nargs; k++) {
            const vitc_cuda_arg *g = &l->args[k];
            if (g->kind == VITC_CUDA_ARG_WORKSPACE ? !in_range(&g->value, a->max_batch, 0, p->workspace_bytes)
                : g->kind == VITC_CUDA_ARG_WEIGHTS ? !in_range(&g->value, a->max_batch, 0, a->weights_bytes)
                : g->kind != VITC_CUDA_ARG_INT)
                bad = "launch argument";
        }
        if (!bad && (l->ntmaps != 0 && (l->ntmaps != VITC_CUDA_MAX_TMAPS || !l->tmaps)))
            bad = "launch tensor maps";
        for (int k = 0; !bad && k < l->ntmaps; k++)
            if (!tmap_ok(&l->tmaps[k], l, a->max_batch, p->workspace_bytes, a->weights_bytes))
                bad = "launch tensor map";
    }
    if (bad)
        return rt_fail(VITC_STATUS_LOAD_FAILED, "%s: malformed CUDA plan (%s)", m->path, bad);
    vitc_status st = check_io(m, "input", p->inputs, a->inputs, a->ninputs, 0);
    if (st == VITC_STATUS_OK)
        st = check_io(m, "output", p->outputs, a->outputs, a->noutputs, 1);
    if (st != VITC_STATUS_OK)
        return st;
    m->cuda = calloc(1, sizeof *m->cuda);
    if (!m->cuda)
        return rt_fail(VITC_STATUS_OUT_OF_MEMORY, "out of memory");
    pthread_mutex_init(&m->cuda->lock, NULL);
    m->cuda_plan = p;
    return VITC_STATUS_OK;
}

void rt_cuda_model_free(vitc_model *m)
{
    struct rt_cuda_model *d = m->cuda;
    if (!d)
        return;
    if (d->ready) {
        const rt_cuda_api *cu = d->cu;
        cu->CtxSetCurrent(d->ctx);
        if (d->weights)
            cu->MemFree(d->weights);
        cu->ModuleUnload(d->mod);
        cu->DevicePrimaryCtxRelease(d->dev);
    }
    free(d->fns);
    pthread_mutex_destroy(&d->lock);
    free(d);
    m->cuda = NULL;
}

/* ---- the model on the device ---- */

#define CU_TRY(call, ...)                                                                                          \
    do {                                                                                                           \
        rt_cu_result r_ = (call);                                                                                  \
        if (r_ != RT_CUDA_SUCCESS)                                                                                 \
            return rt_fail(r_ == RT_CUDA_ERROR_OUT_OF_MEMORY ? VITC_STATUS_OUT_OF_MEMORY : VITC_STATUS_INTERNAL,   \
                           __VA_ARGS__), rt_append_cuda_error(r_, #call);                                          \
    } while (0)

static _Thread_local char append_buf[1280];

/* Appends "(CALL: driver message)" to the last error; returns its status. */
static vitc_status rt_append_cuda_error(rt_cu_result r, const char *call)
{
    const char *name = strchr(call, '>');
    name = name ? name + 1 : call;
    snprintf(append_buf, sizeof append_buf, "%s (%s%.*s: %s)", vitc_last_error(), strncmp(name, "cu", 2) ? "cu" : "",
             (int)strcspn(name, "("), name, rt_cuda_error_string(r));
    return rt_fail(r == RT_CUDA_ERROR_OUT_OF_MEMORY ? VITC_STATUS_OUT_OF_MEMORY : VITC_STATUS_INTERNAL, "%s",
                   append_buf);
}

/* A launch's dynamic shared memory with the image loaded. */
static unsigned launch_smem(const struct rt_cuda_model *d, const vitc_cuda_launch *l)
{
    return d->image && d->image->arch_specific && l->shared_bytes_specific ? l->shared_bytes_specific
                                                                             : l->shared_bytes;
}

/* The image to load on an sm_<arch> device, or NULL. */
static const vitc_cuda_image *pick_image(const vitc_cuda_plan *p, int arch)
{
    const vitc_cuda_image *best = NULL;
    for (int i = 0; i < p->nimages; i++) { /* exact architecture; arch-specific first */
        const vitc_cuda_image *im = &p->images[i];
        if (im->kind == VITC_CUDA_IMAGE_CUBIN && im->arch == arch && (!best || im->arch_specific))
            best = im;
    }
    for (int i = 0; !best && i < p->nimages; i++) { /* same major, older minor */
        const vitc_cuda_image *im = &p->images[i];
        if (im->kind == VITC_CUDA_IMAGE_CUBIN && !im->arch_specific && im->arch / 10 == arch / 10 && im->arch < arch &&
            (!best || im->arch > best->arch))
            best = im;
    }
    for (int i = 0; !best && i < p->nimages; i++) { /* PTX for the driver to compile */
        const vitc_cuda_image *im = &p->images[i];
        if (im->kind == VITC_CUDA_IMAGE_PTX && im->arch <= arch)
            best = im;
    }
    return best;
}

static void image_list(const vitc_cuda_plan *p, char *buf, size_t n)
{
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < p->nimages && k < n; i++) {
        const vitc_cuda_image *im = &p->images[i];
        k += (size_t)snprintf(buf + k, n - k, "%s%s_%d%s", i ? ", " : "",
                              im->kind == VITC_CUDA_IMAGE_PTX ? "compute" : "sm", im->arch,
                              im->arch_specific ? "a" : "");
    }
}

static vitc_status model_on_device(vitc_model *m)
{
    struct rt_cuda_model *d = m->cuda;
    const vitc_cuda_plan *p = m->cuda_plan;
    const char *why;
    const rt_cuda_api *cu = rt_cuda_driver(&why);
    if (!cu)
        return rt_fail(VITC_STATUS_NO_DEVICE, "%s: cannot run this CUDA model: %s", m->path, why);
    d->cu = cu;
    int ordinal = (int)rt_knob(RT_KNOB_CUDA_DEVICE);
    int major = 0, minor = 0, optin = 0;
    if (cu->DeviceGet(&d->dev, ordinal) != RT_CUDA_SUCCESS)
        return rt_fail(VITC_STATUS_NO_DEVICE, "%s: no CUDA device %d (VITC_CUDA_DEVICE)", m->path, ordinal);
    CU_TRY(cu->DeviceGetAttribute(&major, RT_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d->dev), "%s", m->path);
    CU_TRY(cu->DeviceGetAttribute(&minor, RT_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d->dev), "%s", m->path);
    CU_TRY(cu->DeviceGetAttribute(&optin, RT_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, d->dev), "%s",
           m->path);
    CU_TRY(cu->DeviceGetAttribute(&d->nsm, RT_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d->dev), "%s", m->path);
    if (cu->DeviceGetName(d->name, (int)sizeof d->name, d->dev) != RT_CUDA_SUCCESS)
        snprintf(d->name, sizeof d->name, "CUDA device %d", ordinal);
    d->arch = major * 10 + minor;
    d->image = pick_image(p, d->arch);
    if (!d->image) {
        char list[256];
        image_list(p, list, sizeof list);
        return rt_fail(VITC_STATUS_NO_DEVICE, "%s: the model has code for %s; %s is sm_%d", m->path, list, d->name,
                       d->arch);
    }
    CU_TRY(cu->DevicePrimaryCtxRetain(&d->ctx, d->dev), "%s: %s", m->path, d->name);
    vitc_status st = VITC_STATUS_OK;
    char log[4096] = "";
    unsigned opts[2] = {RT_CU_JIT_ERROR_LOG_BUFFER, RT_CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *vals[2] = {log, (void *)(uintptr_t)sizeof log};
    rt_cu_result r = cu->CtxSetCurrent(d->ctx);
    if (r == RT_CUDA_SUCCESS)
        r = cu->ModuleLoadDataEx(&d->mod, d->image->data, 2, opts, vals);
    if (r != RT_CUDA_SUCCESS) {
        st = rt_fail(r == RT_CUDA_ERROR_OUT_OF_MEMORY ? VITC_STATUS_OUT_OF_MEMORY : VITC_STATUS_INTERNAL,
                     "%s: loading its %s image for sm_%d on %s: %s%s%s", m->path,
                     d->image->kind == VITC_CUDA_IMAGE_PTX ? "PTX" : "CUBIN", d->image->arch, d->name,
                     rt_cuda_error_string(r), *log ? ": " : "", log);
        cu->DevicePrimaryCtxRelease(d->dev);
        return st;
    }
    d->fns = calloc((size_t)p->nfunctions, sizeof *d->fns);
    int *smem = calloc((size_t)p->nfunctions, sizeof *smem);
    if (!d->fns || !smem)
        st = rt_fail(VITC_STATUS_OUT_OF_MEMORY, "out of memory");
    for (int i = 0; st == VITC_STATUS_OK && i < p->nlaunches; i++) {
        int need = (int)launch_smem(d, &p->launches[i]), *f = &smem[p->launches[i].function];
        if (need > *f)
            *f = need;
    }
    for (int i = 0; st == VITC_STATUS_OK && i < p->nfunctions; i++) {
        r = cu->ModuleGetFunction(&d->fns[i], d->mod, p->functions[i]);
        if (r != RT_CUDA_SUCCESS) {
            st = rt_fail(VITC_STATUS_LOAD_FAILED, "%s: kernel %s is missing from its image (%s)", m->path,
                         p->functions[i], rt_cuda_error_string(r));
        } else if (smem[i] > RT_CUDA_STATIC_SMEM) {
            if (smem[i] > optin)
                st = rt_fail(VITC_STATUS_NO_DEVICE, "%s: kernel %s needs %d bytes of shared memory; %s has %d",
                             m->path, p->functions[i], smem[i], d->name, optin);
            else if ((r = cu->FuncSetAttribute(d->fns[i], RT_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                               smem[i])) != RT_CUDA_SUCCESS)
                st = rt_fail(VITC_STATUS_INTERNAL, "%s: kernel %s: raising its shared memory to %d bytes: %s",
                             m->path, p->functions[i], smem[i], rt_cuda_error_string(r));
        }
    }
    free(smem);
    if (st == VITC_STATUS_OK && m->abi->weights_bytes) {
        r = cu->MemAlloc(&d->weights, (size_t)m->abi->weights_bytes);
        if (r == RT_CUDA_SUCCESS)
            r = cu->MemcpyHtoD(d->weights, m->weights, (size_t)m->abi->weights_bytes);
        if (r != RT_CUDA_SUCCESS)
            st = rt_fail(r == RT_CUDA_ERROR_OUT_OF_MEMORY ? VITC_STATUS_OUT_OF_MEMORY : VITC_STATUS_INTERNAL,
                         "%s: uploading %llu bytes of weights to %s: %s", m->path,
                         (unsigned long long)m->abi->weights_bytes, d->name, rt_cuda_error_string(r));
        else if ((r = cu->CtxSynchronize()) != RT_CUDA_SUCCESS)
            st = rt_fail(VITC_STATUS_INTERNAL, "%s: waiting for the weights to reach %s: %s", m->path, d->name,
                         rt_cuda_error_string(r));
    }
    if (st != VITC_STATUS_OK) {
        if (d->weights)
            cu->MemFree(d->weights);
        d->weights = 0;
        cu->ModuleUnload(d->mod);
        cu->DevicePrimaryCtxRelease(d->dev);
        free(d->fns);
        d->fns = NULL;
        return st;
    }
    d->ready = 1;
    return VITC_STATUS_OK;
}

/* ---- contexts ---- */

vitc_status rt_cuda_context_create(vitc_context *c)
{
    vitc_model *m = c->model;
    struct rt_cuda_model *d = m->cuda;
    pthread_mutex_lock(&d->lock);
    vitc_status st = d->ready ? VITC_STATUS_OK : model_on_device(m);
    pthread_mutex_unlock(&d->lock);
    if (st != VITC_STATUS_OK)
        return st;
    const rt_cuda_api *cu = d->cu;
    const vitc_cuda_plan *p = m->cuda_plan;
    struct rt_cuda_ctx *x = calloc(1, sizeof *x);
    if (!x)
        return rt_fail(VITC_STATUS_OUT_OF_MEMORY, "out of memory");
    c->cuda = x;
    x->use_graphs = rt_knob(RT_KNOB_CUDA_GRAPH) != 0;
    /* the image's kernels wait for the grids before them, the device (sm_90 on) can launch them early, and
     * the driver too, also into a graph by stream capture (CUDA 12.3) */
    int driver = 0;
    x->pdl = rt_knob(RT_KNOB_CUDA_PDL) != 0 && (d->image->flags & VITC_CUDA_IMAGE_PDL) && d->arch >= 90 &&
             cu->LaunchKernelEx && cu->DriverGetVersion(&driver) == RT_CUDA_SUCCESS && driver >= 12030;
    x->device_ms = -1;
    x->args = calloc((size_t)p->nlaunches * VITC_CUDA_MAX_ARGS + 1, sizeof *x->args);
    if (!x->args)
        return rt_fail(VITC_STATUS_OUT_OF_MEMORY, "out of memory");
    CU_TRY(cu->CtxSetCurrent(d->ctx), "%s", m->path);
    CU_TRY(cu->StreamCreate(&x->stream, RT_CU_STREAM_NON_BLOCKING), "%s: a stream on %s", m->path, d->name);
    CU_TRY(cu->MemAlloc(&x->ws, (size_t)(p->workspace_bytes ? p->workspace_bytes : 256)),
           "%s: %llu bytes of device workspace on %s", m->path, (unsigned long long)p->workspace_bytes, d->name);
    for (int i = 0; i < 2; i++)
        CU_TRY(cu->EventCreate(&x->ev[i], RT_CU_EVENT_DEFAULT), "%s: an event on %s", m->path, d->name);
    if (rt_knob(RT_KNOB_CUDA_POISON)) {
        CU_TRY(cu->MemsetD8(x->ws, 0xff, (size_t)(p->workspace_bytes ? p->workspace_bytes : 256)),
               "%s: poisoning the workspace on %s", m->path, d->name);
        CU_TRY(cu->CtxSynchronize(), "%s: poisoning the workspace on %s", m->path, d->name);
    }
    return VITC_STATUS_OK;
}

void rt_cuda_context_free(vitc_context *c)
{
    struct rt_cuda_ctx *x = c->cuda;
    if (!x)
        return;
    struct rt_cuda_model *d = c->model->cuda;
    if (d && d->ready) {
        const rt_cuda_api *cu = d->cu;
        cu->CtxSetCurrent(d->ctx);
        if (x->stream)
            cu->StreamSynchronize(x->stream);
        for (int i = 0; i < x->ngraphs; i++)
            cu->GraphExecDestroy(x->graphs[i].exec);
        if (x->ws)
            cu->MemFree(x->ws);
        for (int i = 0; i < 2; i++)
            if (x->ev[i])
                cu->EventDestroy(x->ev[i]);
        for (int i = 0; x->pev && i < c->model->cuda_plan->nlaunches; i++)
            if (x->pev[i])
                cu->EventDestroy(x->pev[i]);
        if (x->stream)
            cu->StreamDestroy(x->stream);
    }
    free(x->args);
    free(x->pev);
    free(x->ran);
    free(x);
    c->cuda = NULL;
}

/* ---- running ---- */

/* Tensor map k of launch i (its argument slots a) at this batch: encoded
 * where the arch-specific image runs, whose kernels read it; zeros
 * elsewhere. */
static vitc_status encode_tmap(vitc_context *c, const vitc_cuda_launch *l, int i, const unsigned long long *a,
                               int64_t batch, rt_cu_tensor_map *map, int k)
{
    const vitc_model *m = c->model;
    const struct rt_cuda_model *d = m->cuda;
    const char *fn = m->cuda_plan->functions[l->function];
    memset(map, 0, sizeof *map);
    if (!d->image->arch_specific)
        return VITC_STATUS_OK;
    if (!d->cu->TensorMapEncodeTiled)
        return rt_fail(VITC_STATUS_NO_DEVICE, "%s: kernel %s needs the CUDA driver's cuTensorMapEncodeTiled (CUDA 12)",
                       m->path, fn);
    const vitc_cuda_tmap *t = &l->tmaps[k];
    unsigned long long dims[2] = {(unsigned long long)t->cols,
                                  (unsigned long long)vitc_cuda_poly_at(&t->rows, batch)},
                       strides[1] = {(unsigned long long)t->row_bytes};
    unsigned box[2] = {t->box_cols, t->box_rows}, one[2] = {1, 1};
    rt_cu_result r = d->cu->TensorMapEncodeTiled(
        map, t->elem == VITC_CUDA_TMAP_BF16 ? RT_CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : RT_CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        2, (void *)(uintptr_t)a[t->arg], dims, strides, box, one, RT_CU_TENSOR_MAP_INTERLEAVE_NONE,
        RT_CU_TENSOR_MAP_SWIZZLE_128B, RT_CU_TENSOR_MAP_L2_PROMOTION_L2_256B, RT_CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != RT_CUDA_SUCCESS)
        return rt_fail(VITC_STATUS_INTERNAL,
                       "%s: kernel %s (launch %d) at batch %lld: its tensor map %d (%llu x %llu elements, rows %lld "
                       "bytes apart, at 0x%llx): %s",
                       m->path, fn, i, (long long)batch, k, dims[1], dims[0], (long long)t->row_bytes, a[t->arg],
                       rt_cuda_error_string(r));
    return VITC_STATUS_OK;
}

/* Enqueues every launch of the plan for this batch on the stream.  profiled: plain launches, each followed
 * by its event (x->pev), the launches that ran listed in x->ran. */
static vitc_status enqueue(vitc_context *c, int64_t batch, int profiled)
{
    const vitc_model *m = c->model;
    const struct rt_cuda_model *d = m->cuda;
    const vitc_cuda_plan *p = m->cuda_plan;
    struct rt_cuda_ctx *x = c->cuda;
    int launched = 0; /* the first kernel of a run follows the copies in plainly */
    for (int i = 0; i < p->nlaunches; i++) {
        const vitc_cuda_launch *l = &p->launches[i];
        if (batch < l->min_batch || batch > l->max_batch)
            continue;
        int64_t g[3];
        for (int k = 0; k < 3; k++) {
            int64_t n = vitc_cuda_poly_at(&l->grid[k], batch);
            g[k] = n <= 0 ? 0 : (n + l->grid_div[k] - 1) / l->grid_div[k];
        }
        if (g[0] == 0 || g[1] == 0 || g[2] == 0)
            continue; /* nothing to do at this batch */
        if (g[0] > 0x7fffffff || g[1] > 65535 || g[2] > 65535)
            return rt_fail(VITC_STATUS_BATCH_OUT_OF_RANGE,
                           "%s: kernel %s at batch %lld needs a grid of %lld x %lld x %lld blocks, above CUDA's limits",
                           m->path, p->functions[l->function], (long long)batch, (long long)g[0], (long long)g[1],
                           (long long)g[2]);
        unsigned long long *a = x->args + (size_t)i * VITC_CUDA_MAX_ARGS;
        for (int k = 0; k < VITC_CUDA_MAX_ARGS; k++) {
            const vitc_cuda_arg *arg = k < l->nargs ? &l->args[k] : NULL;
            int64_t v = arg ? vitc_cuda_poly_at(&arg->value, batch) : 0;
            a[k] = !arg ? 0
                   : arg->kind == VITC_CUDA_ARG_WORKSPACE ? x->ws + (unsigned long long)v
                   : arg->kind == VITC_CUDA_ARG_WEIGHTS   ? d->weights + (unsigned long long)v
                                                          : (unsigned long long)v;
        }
        rt_cu_tensor_map maps[VITC_CUDA_MAX_TMAPS];
        void *params[1 + VITC_CUDA_MAX_TMAPS] = {a};
        for (int k = 0; k < l->ntmaps; k++) {
            vitc_status st = encode_tmap(c, l, i, a, batch, &maps[k], k);
            if (st != VITC_STATUS_OK)
                return st;
            params[1 + k] = &maps[k];
        }
        rt_cu_result r;
        if (x->pdl && launched && !profiled) { /* it may start while the kernel before it runs: it waits for it itself */
            rt_cu_launch_attribute at;
            memset(&at, 0, sizeof at);
            at.id = RT_CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
            at.value.programmatic_stream_serialization_allowed = 1;
            rt_cu_launch_config cfg = {(unsigned)g[0], (unsigned)g[1], (unsigned)g[2], l->block, 1, 1,
                                       launch_smem(d, l), x->stream, &at, 1};
            r = d->cu->LaunchKernelEx(&cfg, d->fns[l->function], params, NULL);
        } else {
            r = d->cu->LaunchKernel(d->fns[l->function], (unsigned)g[0], (unsigned)g[1], (unsigned)g[2], l->block, 1,
                                    1, launch_smem(d, l), x->stream, params, NULL);
        }
        launched++;
        if (r != RT_CUDA_SUCCESS)
            return rt_fail(VITC_STATUS_INTERNAL, "%s: launching kernel %s (launch %d) at batch %lld: %s", m->path,
                           p->functions[l->function], i, (long long)batch, rt_cuda_error_string(r));
        if (profiled) {
            CU_TRY(d->cu->EventRecord(x->pev[i], x->stream), "%s: an event on %s", m->path, d->name);
            x->ran[x->nran++] = i;
        }
    }
    return VITC_STATUS_OK;
}

/* The graph of this batch, captured on first use. */
static vitc_status graph_for(vitc_context *c, int64_t batch, CUgraphExec *out)
{
    struct rt_cuda_ctx *x = c->cuda;
    const rt_cuda_api *cu = c->model->cuda->cu;
    x->tick++;
    for (int i = 0; i < x->ngraphs; i++)
        if (x->graphs[i].batch == batch) {
            x->graphs[i].used = x->tick;
            *out = x->graphs[i].exec;
            return VITC_STATUS_OK;
        }
    CU_TRY(cu->StreamBeginCapture(x->stream, RT_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "%s: capturing batch %lld",
           c->model->path, (long long)batch);
    vitc_status st = enqueue(c, batch, 0);
    CUgraph graph = NULL;
    rt_cu_result r = cu->StreamEndCapture(x->stream, &graph);
    if (st != VITC_STATUS_OK) {
        if (graph)
            cu->GraphDestroy(graph);
        return st;
    }
    if (r != RT_CUDA_SUCCESS)
        return rt_append_cuda_error(r, "cuStreamEndCapture");
    CUgraphExec exec = NULL;
    r = cu->GraphInstantiateWithFlags(&exec, graph, 0);
    cu->GraphDestroy(graph);
    if (r != RT_CUDA_SUCCESS)
        return rt_fail(VITC_STATUS_INTERNAL, "%s: instantiating the CUDA graph of batch %lld: %s", c->model->path,
                       (long long)batch, rt_cuda_error_string(r));
    int slot = x->ngraphs;
    if (slot == RT_CUDA_MAX_GRAPHS) { /* replace the least recently used */
        slot = 0;
        for (int i = 1; i < x->ngraphs; i++)
            if (x->graphs[i].used < x->graphs[slot].used)
                slot = i;
        cu->GraphExecDestroy(x->graphs[slot].exec);
    } else {
        x->ngraphs++;
    }
    x->graphs[slot] = (rt_graph){.batch = batch, .exec = exec, .used = x->tick};
    *out = exec;
    return VITC_STATUS_OK;
}

/* Profiling: an event for every launch of the plan, made once. */
static vitc_status profile_events(vitc_context *c)
{
    const vitc_model *m = c->model;
    const struct rt_cuda_model *d = m->cuda;
    struct rt_cuda_ctx *x = c->cuda;
    int n = m->cuda_plan->nlaunches;
    if (x->pev)
        return VITC_STATUS_OK;
    int *ran = malloc(sizeof *ran * (size_t)(n + 1));
    CUevent *pev = calloc((size_t)n + 1, sizeof *pev);
    for (int i = 0; ran && pev && i < n; i++) {
        rt_cu_result r = d->cu->EventCreate(&pev[i], RT_CU_EVENT_DEFAULT);
        if (r != RT_CUDA_SUCCESS) { /* none kept: the next profiled run tries again */
            for (int k = 0; k < i; k++)
                d->cu->EventDestroy(pev[k]);
            free(ran), free(pev);
            return rt_fail(VITC_STATUS_INTERNAL, "%s: an event per launch on %s", m->path, d->name),
                   rt_append_cuda_error(r, "cuEventCreate");
        }
    }
    if (!ran || !pev) {
        free(ran), free(pev);
        return rt_fail(VITC_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    x->ran = ran, x->pev = pev;
    return VITC_STATUS_OK;
}

vitc_status rt_cuda_run(vitc_context *c, int64_t batch)
{
    const vitc_model *m = c->model;
    const vitc_abi_model *a = m->abi;
    const struct rt_cuda_model *d = m->cuda;
    const vitc_cuda_plan *p = m->cuda_plan;
    struct rt_cuda_ctx *x = c->cuda;
    const rt_cuda_api *cu = d->cu;
    if (!x)
        return rt_fail(VITC_STATUS_INVALID_ARGUMENT, "%s: the context has no device", m->path);
    CU_TRY(cu->CtxSetCurrent(d->ctx), "%s", m->path);
    for (int j = 0; j < a->ninputs; j++) {
        size_t bytes = (size_t)vitc_abi_numel_at(&a->inputs[j], batch) * rt_dtype_size(a->inputs[j].dtype);
        CUdeviceptr dst = x->ws + p->inputs[j].offset;
        if (bytes && x->device_io)
            CU_TRY(cu->MemcpyDtoDAsync(dst, (CUdeviceptr)(uintptr_t)c->in_ptrs[j], bytes, x->stream),
                   "%s: copying input '%s' on %s", m->path, a->inputs[j].name, d->name);
        else if (bytes)
            CU_TRY(cu->MemcpyHtoDAsync(dst, c->in_ptrs[j], bytes, x->stream), "%s: copying input '%s' to %s",
                   m->path, a->inputs[j].name, d->name);
    }
    vitc_status st;
    const int profiled = rt_profile_on(c);
    if (profiled && (st = profile_events(c)) != VITC_STATUS_OK)
        return st;
    CU_TRY(cu->EventRecord(x->ev[0], x->stream), "%s: an event on %s", m->path, d->name);
    x->nran = 0;
    if (profiled) {
        if ((st = enqueue(c, batch, 1)) != VITC_STATUS_OK)
            return st;
    } else if (x->use_graphs) {
        CUgraphExec exec = NULL;
        if ((st = graph_for(c, batch, &exec)) != VITC_STATUS_OK)
            return st;
        CU_TRY(cu->GraphLaunch(exec, x->stream), "%s: running batch %lld on %s", m->path, (long long)batch, d->name);
    } else if ((st = enqueue(c, batch, 0)) != VITC_STATUS_OK) {
        return st;
    }
    CU_TRY(cu->EventRecord(x->ev[1], x->stream), "%s: an event on %s", m->path, d->name);
    for (int j = 0; j < a->noutputs; j++) {
        size_t bytes = (size_t)vitc_abi_numel_at(&a->outputs[j], batch) * rt_dtype_size(a->outputs[j].dtype);
        CUdeviceptr src = (p->outputs[j].space == VITC_CUDA_SPACE_WEIGHTS ? d->weights : x->ws) + p->outputs[j].offset;
        if (bytes && x->device_io)
            CU_TRY(cu->MemcpyDtoDAsync((CUdeviceptr)(uintptr_t)c->out_ptrs[j], src, bytes, x->stream),
                   "%s: copying output '%s' on %s", m->path, a->outputs[j].name, d->name);
        else if (bytes)
            CU_TRY(cu->MemcpyDtoHAsync(c->out_ptrs[j], src, bytes, x->stream), "%s: copying output '%s' from %s",
                   m->path, a->outputs[j].name, d->name);
    }
    CU_TRY(cu->StreamSynchronize(x->stream), "%s: running batch %lld on %s", m->path, (long long)batch, d->name);
    float ms = 0;
    CU_TRY(cu->EventElapsedTime(&ms, x->ev[0], x->ev[1]), "%s: timing batch %lld on %s", m->path, (long long)batch,
           d->name);
    x->device_ms = ms;
    for (int k = 0; k < x->nran; k++) { /* each launch: from the event before it to its own */
        CU_TRY(cu->EventElapsedTime(&ms, k ? x->pev[x->ran[k - 1]] : x->ev[0], x->pev[x->ran[k]]),
               "%s: timing launch %d on %s", m->path, x->ran[k], d->name);
        rt_profile_add(c, x->ran[k], 1e-3 * ms);
    }
    return VITC_STATUS_OK;
}

VITC_API vitc_status vitc_run_device(vitc_context *c, const vitc_tensor *inputs, int ninputs, vitc_tensor *outputs,
                                     int noutputs)
{
    if (!c)
        return rt_fail(VITC_STATUS_INVALID_ARGUMENT, "vitc_run_device: context is NULL");
    if (!c->cuda)
        return rt_fail(VITC_STATUS_INVALID_ARGUMENT, "%s: vitc_run_device takes a CUDA model; this one is for the CPU",
                       c->model->path);
    c->cuda->device_io = 1;
    vitc_status st = vitc_run(c, inputs, ninputs, outputs, noutputs);
    c->cuda->device_io = 0;
    return st;
}

VITC_API vitc_status vitc_context_device_ms(const vitc_context *c, double *ms)
{
    if (!c || !ms)
        return rt_fail(VITC_STATUS_INVALID_ARGUMENT, "vitc_context_device_ms: %s is NULL", c ? "ms" : "context");
    if (!c->cuda || c->cuda->device_ms < 0)
        return rt_fail(VITC_STATUS_INVALID_ARGUMENT, "%s: no device time: %s", c->model->path,
                       c->cuda ? "the context has not run yet" : "a CPU model");
    *ms = c->cuda->device_ms;
    return VITC_STATUS_OK;
}

/* ---- public: the device, and what a CUDA model holds ---- */

VITC_API vitc_status vitc_cuda_device(char *name, size_t len, int *arch)
{
    const char *why;
    const rt_cuda_api *cu = rt_cuda_driver(&why);
    if (!cu)
        return rt_fail(VITC_STATUS_NO_DEVICE, "%s", why);
    int ordinal = (int)rt_knob(RT_KNOB_CUDA_DEVICE), major = 0, minor = 0;
    CUdevice dev;
    if (cu->DeviceGet(&dev, ordinal) != RT_CUDA_SUCCESS)
        return rt_fail(VITC_STATUS_NO_DEVICE, "no CUDA device %d (VITC_CUDA_DEVICE)", ordinal);
    if (name && len && cu->DeviceGetName(name, (int)len, dev) != RT_CUDA_SUCCESS)
        snprintf(name, len, "CUDA device %d", ordinal);
    cu->DeviceGetAttribute(&major, RT_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    cu->DeviceGetAttribute(&minor, RT_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
    if (arch)
        *arch = major * 10 + minor;
    return VITC_STATUS_OK;
}

/* The plan of a CUDA model for API function fn, out (bytes of it, what it
 * is called) zeroed first; NULL with the error set where m or out is NULL
 * or m is not a CUDA model. */
static const vitc_cuda_plan *plan_for(const vitc_model *m, void *out, size_t bytes, const char *fn,
                                      const char *what)
{
    if (!m || !out) {
        rt_fail(VITC_STATUS_INVALID_ARGUMENT, "%s: %s is NULL", fn, m ? what : "model");
        return NULL;
    }
    memset(out, 0, bytes);
    if (!m->cuda_plan)
        rt_fail(VITC_STATUS_INVALID_ARGUMENT, "%s: not a CUDA model", m->path);
    return m->cuda_plan;
}

VITC_API vitc_status vitc_model_cuda_details(const vitc_model *m, vitc_cuda_details *out)
{
    const vitc_cuda_plan *p = plan_for(m, out, sizeof *out, "vitc_model_cuda_details", "details");
    if (!p)
        return VITC_STATUS_INVALID_ARGUMENT;
    out->precision = p->precision;
    out->nimages = p->nimages < VITC_MAX_CUDA_IMAGES ? p->nimages : VITC_MAX_CUDA_IMAGES;
    for (int i = 0; i < out->nimages; i++) {
        const vitc_cuda_image *im = &p->images[i];
        snprintf(out->images[i].target, sizeof out->images[i].target, "%s_%d%s",
                 im->kind == VITC_CUDA_IMAGE_PTX ? "compute" : "sm", im->arch, im->arch_specific ? "a" : "");
        out->images[i].kind = im->kind == VITC_CUDA_IMAGE_PTX ? "ptx" : "cubin";
        out->images[i].bytes = im->bytes;
    }
    out->nfunctions = p->nfunctions;
    out->nlaunches = p->nlaunches;
    out->workspace_bytes = p->workspace_bytes;
    return VITC_STATUS_OK;
}

VITC_API vitc_status vitc_model_cuda_launch(const vitc_model *m, int i, vitc_cuda_launch_info *out)
{
    const vitc_cuda_plan *p = plan_for(m, out, sizeof *out, "vitc_model_cuda_launch", "info");
    if (!p)
        return VITC_STATUS_INVALID_ARGUMENT;
    if (i < 0 || i >= p->nlaunches)
        return rt_fail(VITC_STATUS_INVALID_ARGUMENT, "%s: no launch %d (it has %d)", m->path, i, p->nlaunches);
    const vitc_cuda_launch *l = &p->launches[i];
    out->function = l->function;
    out->min_batch = l->min_batch;
    out->max_batch = l->max_batch;
    out->block = l->block;
    out->shared_bytes = l->shared_bytes;
    out->shared_bytes_specific = l->shared_bytes_specific;
    return VITC_STATUS_OK;
}

const rt_executor rt_cuda_executor = {
    .target = "cuda",
    .one_thread = 1,
    .model_load = rt_cuda_model_load,
    .model_free = rt_cuda_model_free,
    .context_create = rt_cuda_context_create,
    .context_free = rt_cuda_context_free,
    .run = rt_cuda_run,
};
