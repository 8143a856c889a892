/* fake_libcuda.c: a CUDA driver for tests on machines without a GPU.
 *
 * Built by test_cuda_emu as libcuda.so.1 and found by the runtime's dlopen
 * through LD_LIBRARY_PATH, it lets the runtime's CUDA executor
 * (runtime/cuda_exec.c) run for real: driver loading, image choice, kernel
 * lookup, the shared memory opt-in, device memory, stream capture into
 * graphs and their replay, copies in and out, error paths.  Kernels run on
 * the CPU emulation (tests/cuda_emu.h): a loaded image names its program
 * ("vitc-program:<hash>", see codegen/cuda/cu_plan.c) and the emulation
 * library compiled from that program is VITC_FAKE_CUDA_EMU_DIR/emu-<hash>.so,
 * or for the sm_90a image (it holds "vitc-image:sm_90a") emu-<hash>-sm90a.so,
 * whose kernels take their sm_90a bodies; tensor maps are encoded as the
 * emulation reads them (tests/emu_tmap.h) and passed on to the kernels that
 * take them.
 *
 * It checks what the hardware would refuse: calls before cuInit or without
 * a current context, a launch asking for more than 48 KiB of dynamic shared
 * memory without cuFuncSetAttribute, grids past CUDA's limits, copies while
 * a stream is being captured, freeing unknown pointers, and a launch on a
 * non-blocking stream while a cuMemcpyHtoD from pageable memory may still be
 * landing (nothing has synchronised the context since).  The device is an
 * sm_<VITC_FAKE_CUDA_ARCH> (default 90) with 132 SMs and 227 KiB of shared
 * memory per block.  VITC_FAKE_CUDA_TRACE=FILE appends one line per module
 * load, graph instantiation and launch of a graph, for tests to count. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "emu_tmap.h"

#define API __attribute__((visibility("default")))

enum {
    OK = 0,
    E_INVALID_VALUE = 1,
    E_OUT_OF_MEMORY = 2,
    E_NOT_INITIALIZED = 3,
    E_NO_DEVICE = 100,
    E_INVALID_DEVICE = 101,
    E_INVALID_IMAGE = 200,
    E_INVALID_CONTEXT = 201,
    E_NOT_FOUND = 500,
    E_LAUNCH_FAILED = 719,
    E_STREAM_CAPTURE_UNSUPPORTED = 900,
    E_ILLEGAL_STATE = 401
};

typedef int (*emu_launch_fn)(void *fn, const unsigned *grid, const unsigned *block, unsigned long long smem,
                             const void *args, char *err, unsigned long errlen);

typedef struct module module;

typedef struct {
    void *fn;
    module *mod;
    unsigned grid[3], block[3], smem;
    unsigned long long args[16];
    int nmaps;
    unsigned char maps[2][128]; /* copied at the launch, as the driver copies parameters */
    int programmatic;           /* launched as a programmatic dependent launch (cuLaunchKernelEx) */
} launch_rec;

typedef struct {
    launch_rec *l;
    int n, cap;
} graph;

struct module {
    void *emu;
    emu_launch_fn launch;
    void (*set_tmaps)(const void *maps, int n);
    void *functions[256]; /* freed with the module */
    int nfunctions;
};

typedef struct {
    module *mod;
    void *fn;
    int max_smem;
    int ntmaps; /* tensor maps it takes after its argument slots */
} function;

typedef struct {
    graph *capture; /* non-NULL while capturing */
} stream;

static int initialized, current;
static int upload_in_flight; /* a cuMemcpyHtoD not yet followed by cuCtxSynchronize */

static void trace(const char *fmt, ...)
{
    const char *path = getenv("VITC_FAKE_CUDA_TRACE");
    if (!path || !*path)
        return;
    FILE *f = fopen(path, "a");
    if (!f)
        return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fputc('\n', f);
    fclose(f);
}

static int arch(void)
{
    const char *e = getenv("VITC_FAKE_CUDA_ARCH");
    return e && *e ? atoi(e) : 90;
}

#define NEED_INIT()                                                                                                \
    do {                                                                                                           \
        if (!initialized)                                                                                          \
            return E_NOT_INITIALIZED;                                                                              \
    } while (0)
#define NEED_CTX()                                                                                                 \
    do {                                                                                                           \
        NEED_INIT();                                                                                               \
        if (!current)                                                                                              \
            return E_INVALID_CONTEXT;                                                                              \
    } while (0)

API int cuInit(unsigned flags)
{
    if (flags != 0)
        return E_INVALID_VALUE;
    initialized = 1;
    return OK;
}
API int cuDriverGetVersion(int *v)
{
    *v = 13000;
    return OK;
}
API int cuDeviceGetCount(int *n)
{
    NEED_INIT();
    *n = 1;
    return OK;
}
API int cuDeviceGet(int *dev, int ordinal)
{
    NEED_INIT();
    if (ordinal != 0)
        return E_INVALID_DEVICE;
    *dev = 0;
    return OK;
}
API int cuDeviceGetAttribute(int *v, int attr, int dev)
{
    NEED_INIT();
    if (dev != 0)
        return E_INVALID_DEVICE;
    switch (attr) {
    case 16: *v = 132; return OK;               /* multiprocessors */
    case 75: *v = arch() / 10; return OK;       /* compute capability major */
    case 76: *v = arch() % 10; return OK;       /* minor */
    case 97: *v = 227 * 1024; return OK;        /* shared memory per block, opt-in */
    }
    return E_INVALID_VALUE;
}
API int cuDeviceGetName(char *name, int len, int dev)
{
    NEED_INIT();
    snprintf(name, (size_t)len, "fake CUDA device sm_%d (CPU emulation)", arch());
    (void)dev;
    return OK;
}
API int cuDevicePrimaryCtxRetain(void **ctx, int dev)
{
    NEED_INIT();
    *ctx = (void *)(uintptr_t)(0x1000 + dev);
    return OK;
}
API int cuDevicePrimaryCtxRelease_v2(int dev)
{
    NEED_INIT();
    (void)dev;
    return OK;
}
API int cuCtxSetCurrent(void *ctx)
{
    NEED_INIT();
    current = ctx != NULL;
    return OK;
}

/* Where the bytes of tag start in the n bytes at p (followed by at least
 * `after` more bytes), or NULL. */
static const unsigned char *find_tag(const unsigned char *p, size_t n, const char *tag, size_t after)
{
    size_t tl = strlen(tag);
    for (size_t i = 0; i + tl + after <= n; i++)
        if (p[i] == (unsigned char)tag[0] && memcmp(p + i, tag, tl) == 0)
            return p + i;
    return NULL;
}

/* "vitc-program:<16 hex>" inside the image names its emulation library. */
API int cuModuleLoadDataEx(module **out, const void *image, unsigned nopts, int *opts, void **vals)
{
    NEED_CTX();
    (void)nopts, (void)opts, (void)vals;
    const unsigned char *p = image;
    int is_elf = memcmp(p, "\x7f" "ELF", 4) == 0;
    /* a CUBIN is an ELF file; PTX is text: find its end */
    size_t n = 0;
    if (is_elf) {
        uint64_t shoff;
        uint16_t shentsize, shnum;
        memcpy(&shoff, p + 0x28, 8);
        memcpy(&shentsize, p + 0x3a, 2);
        memcpy(&shnum, p + 0x3c, 2);
        n = (size_t)(shoff + (uint64_t)shentsize * shnum);
    } else {
        n = strlen((const char *)p);
    }
    const char *tag = "vitc-program:";
    size_t tl = strlen(tag);
    const unsigned char *hit = find_tag(p, n, tag, 16);
    char decoded[64] = "";
    if (hit)
        hit += tl;
    if (!hit && !is_elf) { /* PTX spells the string as byte values: vk_program_id[30] = {118, 105, ...} */
        const char *q = strstr((const char *)p, "vk_program_id[");
        q = q ? strchr(q, '{') : NULL;
        size_t k = 0;
        while (q && k + 1 < sizeof decoded && *q && *q != '}') {
            q++;
            char *end;
            long v = strtol(q, &end, 10);
            if (end == q)
                break;
            decoded[k++] = (char)v;
            q = end;
        }
        decoded[k] = 0;
        if (strncmp(decoded, tag, tl) == 0 && strlen(decoded) >= tl + 16)
            hit = (const unsigned char *)decoded + tl;
    }
    if (!hit) {
        trace("load %s without a program id", is_elf ? "cubin" : "ptx");
        return E_INVALID_IMAGE;
    }
    int sm90a = is_elf && find_tag(p, n, "vitc-image:sm_90a", 0);
    int sm = 0;
    if (is_elf) { /* a CUBIN's ELF flags carry its SM; SASS runs on that major, same or later minor */
        uint32_t flags;
        memcpy(&flags, p + 0x30, 4);
        sm = (int)((flags >> 8) & 0xff);
        if (sm / 10 != arch() / 10 || sm > arch()) {
            trace("load cubin sm_%d refused on sm_%d", sm, arch());
            return 209; /* CUDA_ERROR_NO_BINARY_FOR_GPU */
        }
    }
    char path[4096];
    const char *dir = getenv("VITC_FAKE_CUDA_EMU_DIR");
    snprintf(path, sizeof path, "%s/emu-%.16s%s.so", dir ? dir : ".", (const char *)hit, sm90a ? "-sm90a" : "");
    module *m = calloc(1, sizeof *m);
    if (!m)
        return E_OUT_OF_MEMORY;
    m->emu = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!m->emu) {
        fprintf(stderr, "fake libcuda: %s\n", dlerror());
        free(m);
        return E_INVALID_IMAGE;
    }
    m->launch = (emu_launch_fn)dlsym(m->emu, "vk_emu_launch");
    *(void **)&m->set_tmaps = dlsym(m->emu, "vk_emu_set_tmaps");
    if (is_elf)
        trace("load cubin sm_%d%s %.16s", sm, sm90a ? "a" : "", (const char *)hit);
    else
        trace("load ptx %.16s", (const char *)hit);
    *out = m;
    return OK;
}
API int cuModuleUnload(module *m)
{
    NEED_CTX();
    if (!m)
        return E_INVALID_VALUE;
    dlclose(m->emu);
    for (int i = 0; i < m->nfunctions; i++)
        free(m->functions[i]);
    free(m);
    return OK;
}
API int cuModuleGetFunction(function **out, module *m, const char *name)
{
    NEED_CTX();
    void *fn = dlsym(m->emu, name);
    if (!fn)
        return E_NOT_FOUND;
    if (m->nfunctions == (int)(sizeof m->functions / sizeof m->functions[0]))
        return E_OUT_OF_MEMORY;
    function *f = calloc(1, sizeof *f);
    if (!f)
        return E_OUT_OF_MEMORY;
    f->mod = m;
    f->fn = fn;
    f->max_smem = 48 * 1024;
    char sym[512];
    snprintf(sym, sizeof sym, "%.400s_vk_tmaps", name);
    const int *nt = dlsym(m->emu, sym);
    f->ntmaps = nt ? *nt : 0;
    m->functions[m->nfunctions++] = f;
    *out = f;
    return OK;
}
API int cuFuncSetAttribute(function *f, int attr, int value)
{
    NEED_CTX();
    if (attr != 8 || value < 0 || value > 227 * 1024)
        return E_INVALID_VALUE;
    f->max_smem = value;
    return OK;
}

/* ---- memory ---- */
#define MAX_ALLOCS 4096
static void *allocs[MAX_ALLOCS];
static size_t alloc_bytes[MAX_ALLOCS];

API int cuMemAlloc_v2(unsigned long long *p, size_t bytes)
{
    NEED_CTX();
    if (bytes == 0)
        return E_INVALID_VALUE;
    void *m = NULL;
    if (posix_memalign(&m, 256, bytes) != 0)
        return E_OUT_OF_MEMORY;
    memset(m, 0x5a, bytes); /* device memory starts as garbage */
    for (int i = 0; i < MAX_ALLOCS; i++)
        if (!allocs[i]) {
            allocs[i] = m;
            alloc_bytes[i] = bytes;
            *p = (unsigned long long)(uintptr_t)m;
            return OK;
        }
    free(m);
    return E_OUT_OF_MEMORY;
}
API int cuMemFree_v2(unsigned long long p)
{
    NEED_CTX();
    for (int i = 0; i < MAX_ALLOCS; i++)
        if (allocs[i] && (uintptr_t)allocs[i] == p) {
            free(allocs[i]);
            allocs[i] = NULL;
            return OK;
        }
    return E_INVALID_VALUE;
}
/* A 2-D tiled tensor map as the runtime asks for it (gemm_tma's: 2-byte
 * elements, the 128-byte swizzle, boxes of 128-byte rows), checked as the
 * driver would, and the matrix inside one allocation; encoded as the
 * emulation's bulk tensor copies read it (emu_tmap.h). */
API int cuTensorMapEncodeTiled(void *map, int dtype, unsigned rank, void *addr, const unsigned long long *dims,
                               const unsigned long long *strides, const unsigned *box, const unsigned *es,
                               int interleave, int swizzle, int l2, int oob)
{
    NEED_CTX();
    uintptr_t a = (uintptr_t)addr;
    if (!map || (uintptr_t)map % 64 || (dtype != 6 && dtype != 9) || rank != 2 || a % 16 || !dims || !strides ||
        !box || !es || dims[0] < 1 || dims[1] < 1 || dims[0] > (1ull << 32) || dims[1] > (1ull << 32) ||
        strides[0] % 16 || strides[0] < 2 * dims[0] || box[0] * 2 != 128 || box[1] < 1 || box[1] > 256 ||
        es[0] != 1 || es[1] != 1 || interleave != 0 || swizzle != 3 || l2 < 0 || l2 > 3 || oob != 0)
        return E_INVALID_VALUE;
    int inside = 0;
    for (int i = 0; i < MAX_ALLOCS && !inside; i++) {
        uintptr_t b = (uintptr_t)allocs[i];
        inside = allocs[i] && a >= b && a - b < alloc_bytes[i] &&
                 (dims[1] - 1) * strides[0] + 2 * dims[0] <= alloc_bytes[i] - (a - b);
    }
    if (!inside) {
        fprintf(stderr, "fake libcuda: a tensor map of %llu x %llu elements at %p reaches outside its allocation\n",
                dims[1], dims[0], addr);
        return E_INVALID_VALUE;
    }
    vk_emu_tmap_encode(map, (uint64_t)a, dims[0], dims[1], strides[0], box[0], box[1], 2, 128);
    return OK;
}

API int cuMemcpyHtoD_v2(unsigned long long dst, const void *src, size_t n)
{
    NEED_CTX();
    memcpy((void *)(uintptr_t)dst, src, n);
    upload_in_flight = 1; /* from pageable memory it may return before the DMA lands */
    return OK;
}
API int cuMemcpyDtoDAsync_v2(unsigned long long dst, unsigned long long src, size_t n, stream *s)
{
    NEED_CTX();
    (void)s; /* captured or not, it runs now: the emulation has one timeline */
    memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
    return OK;
}
API int cuMemsetD8_v2(unsigned long long dst, unsigned char v, size_t n)
{
    NEED_CTX();
    memset((void *)(uintptr_t)dst, v, n);
    return OK;
}
API int cuCtxSynchronize(void)
{
    NEED_CTX();
    upload_in_flight = 0;
    return OK;
}
API int cuMemcpyHtoDAsync_v2(unsigned long long dst, const void *src, size_t n, stream *s)
{
    NEED_CTX();
    if (s && s->capture)
        return E_STREAM_CAPTURE_UNSUPPORTED;
    memcpy((void *)(uintptr_t)dst, src, n);
    return OK;
}
API int cuMemcpyDtoHAsync_v2(void *dst, unsigned long long src, size_t n, stream *s)
{
    NEED_CTX();
    if (s && s->capture)
        return E_STREAM_CAPTURE_UNSUPPORTED;
    memcpy(dst, (const void *)(uintptr_t)src, n);
    return OK;
}

/* ---- streams, launches, graphs ---- */
API int cuStreamCreate(stream **s, unsigned flags)
{
    NEED_CTX();
    (void)flags;
    *s = calloc(1, sizeof **s);
    return *s ? OK : E_OUT_OF_MEMORY;
}
API int cuStreamDestroy_v2(stream *s)
{
    NEED_CTX();
    free(s);
    return OK;
}
API int cuStreamSynchronize(stream *s)
{
    NEED_CTX();
    return s && s->capture ? E_STREAM_CAPTURE_UNSUPPORTED : OK;
}

static int run_launch(const launch_rec *l)
{
    char err[2048];
    if (!l->mod->set_tmaps)
        return E_INVALID_IMAGE;
    l->mod->set_tmaps(l->maps, l->nmaps);
    if (l->mod->launch(l->fn, l->grid, l->block, l->smem, l->args, err, sizeof err) != 0) {
        fprintf(stderr, "fake libcuda: kernel failed: %s\n", err);
        return E_LAUNCH_FAILED;
    }
    return OK;
}

static int launch(function *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                  unsigned smem, stream *s, void **params, void **extra, int programmatic);

API int cuLaunchKernel(function *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                       unsigned smem, stream *s, void **params, void **extra)
{
    NEED_CTX();
    return launch(f, gx, gy, gz, bx, by, bz, smem, s, params, extra, 0);
}

/* cuda.h's CUlaunchConfig and CUlaunchAttribute (an id, padding, a 64-byte value). */
typedef struct {
    unsigned id;
    char pad[4];
    union {
        char pad[64];
        int value;
    } v;
} launch_attr;
typedef struct {
    unsigned gx, gy, gz, bx, by, bz, smem;
    stream *s;
    launch_attr *attrs;
    unsigned nattrs;
} launch_config;

/* cuLaunchKernelEx with no attribute but programmatic stream serialization
 * (6), which only sm_90 and later take; the emulation runs launches one
 * after another, so the kernel's own griddepcontrol.wait has nothing to wait
 * for, and the launch is only counted (the trace's "programmatic"). */
API int cuLaunchKernelEx(const launch_config *c, function *f, void **params, void **extra)
{
    NEED_CTX();
    if (!c || (c->nattrs && !c->attrs))
        return E_INVALID_VALUE;
    int programmatic = 0;
    for (unsigned i = 0; i < c->nattrs; i++) {
        if (c->attrs[i].id != 6 || arch() < 90)
            return E_INVALID_VALUE;
        programmatic = c->attrs[i].v.value != 0;
    }
    return launch(f, c->gx, c->gy, c->gz, c->bx, c->by, c->bz, c->smem, c->s, params, extra, programmatic);
}

static int launch(function *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                  unsigned smem, stream *s, void **params, void **extra, int programmatic)
{
    if (extra || !params || !params[0] || gx < 1 || gy < 1 || gz < 1 || gy > 65535 || gz > 65535 || bx * by * bz > 1024 ||
        bx * by * bz < 1)
        return E_INVALID_VALUE;
    if ((int)smem > f->max_smem)
        return E_INVALID_VALUE; /* as the hardware: more than allowed without the opt-in */
    if (upload_in_flight) {
        fprintf(stderr, "fake libcuda: a launch while a pageable cuMemcpyHtoD may still be landing (no cuCtxSynchronize)\n");
        return E_ILLEGAL_STATE;
    }
    launch_rec l = {.fn = f->fn, .mod = f->mod, .grid = {gx, gy, gz}, .block = {bx, by, bz}, .smem = smem,
                    .programmatic = programmatic};
    memcpy(l.args, params[0], sizeof l.args);
    for (int k = 0; k < f->ntmaps && k < 2; k++) {
        if (!params[1 + k])
            return E_INVALID_VALUE;
        memcpy(l.maps[k], params[1 + k], 128);
        l.nmaps = k + 1;
    }
    if (s && s->capture) {
        graph *g = s->capture;
        if (g->n == g->cap) {
            int cap = g->cap ? 2 * g->cap : 64;
            launch_rec *nl = realloc(g->l, sizeof *nl * (size_t)cap);
            if (!nl)
                return E_OUT_OF_MEMORY;
            g->l = nl;
            g->cap = cap;
        }
        g->l[g->n++] = l;
        return OK;
    }
    return run_launch(&l);
}
API int cuStreamBeginCapture_v2(stream *s, int mode)
{
    NEED_CTX();
    if (!s || s->capture || mode < 0 || mode > 2)
        return E_ILLEGAL_STATE;
    s->capture = calloc(1, sizeof(graph));
    return s->capture ? OK : E_OUT_OF_MEMORY;
}
API int cuStreamEndCapture(stream *s, graph **out)
{
    NEED_CTX();
    if (!s || !s->capture)
        return E_ILLEGAL_STATE;
    *out = s->capture;
    s->capture = NULL;
    return OK;
}
API int cuGraphInstantiateWithFlags(graph **exec, graph *g, unsigned long long flags)
{
    NEED_CTX();
    if (flags)
        return E_INVALID_VALUE;
    graph *e = calloc(1, sizeof *e);
    if (!e || (g->n && !(e->l = malloc(sizeof *e->l * (size_t)g->n)))) {
        free(e);
        return E_OUT_OF_MEMORY;
    }
    if (g->n)
        memcpy(e->l, g->l, sizeof *e->l * (size_t)g->n);
    e->n = e->cap = g->n;
    int programmatic = 0;
    for (int i = 0; i < g->n; i++)
        programmatic += g->l[i].programmatic;
    trace("instantiate %d launches, %d programmatic", g->n, programmatic);
    *exec = e;
    return OK;
}
API int cuGraphLaunch(graph *e, stream *s)
{
    NEED_CTX();
    if (s && s->capture)
        return E_ILLEGAL_STATE;
    trace("graph launch %d", e->n);
    for (int i = 0; i < e->n; i++) {
        int r = run_launch(&e->l[i]);
        if (r)
            return r;
    }
    return OK;
}
API int cuGraphExecDestroy(graph *e)
{
    free(e->l);
    free(e);
    return OK;
}
API int cuGraphDestroy(graph *g)
{
    free(g->l);
    free(g);
    return OK;
}
/* ---- events: host clock readings (the emulation runs every launch at once) ---- */
typedef struct {
    double ms;
    int recorded;
} event;

API int cuEventCreate(event **e, unsigned flags)
{
    NEED_CTX();
    (void)flags;
    *e = calloc(1, sizeof **e);
    return *e ? OK : E_OUT_OF_MEMORY;
}
API int cuEventRecord(event *e, stream *s)
{
    NEED_CTX();
    (void)s;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    e->ms = (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
    e->recorded = 1;
    return OK;
}
API int cuEventSynchronize(event *e)
{
    NEED_CTX();
    return e->recorded ? OK : E_INVALID_VALUE;
}
API int cuEventElapsedTime(float *ms, event *a, event *b)
{
    NEED_CTX();
    if (!a->recorded || !b->recorded)
        return E_INVALID_VALUE;
    *ms = (float)(b->ms - a->ms);
    return OK;
}
API int cuEventDestroy_v2(event *e)
{
    free(e);
    return OK;
}

/* NVRTC dlopens libcuda and asks for this internal table: say it is not
 * supported, and it compiles without the driver's help. */
API int cuGetExportTable(const void **table, const void *uuid)
{
    (void)uuid;
    if (table)
        *table = NULL;
    return 801; /* CUDA_ERROR_NOT_SUPPORTED */
}

API int cuGetErrorString(int err, const char **s)
{
    switch (err) {
    case OK: *s = "no error"; return OK;
    case E_INVALID_VALUE: *s = "invalid argument"; return OK;
    case E_OUT_OF_MEMORY: *s = "out of memory"; return OK;
    case E_NOT_INITIALIZED: *s = "initialization error"; return OK;
    case E_INVALID_IMAGE: *s = "device kernel image is invalid"; return OK;
    case E_INVALID_CONTEXT: *s = "invalid device context"; return OK;
    case E_NOT_FOUND: *s = "named symbol not found"; return OK;
    case E_LAUNCH_FAILED: *s = "unspecified launch failure"; return OK;
    case E_STREAM_CAPTURE_UNSUPPORTED: *s = "operation not permitted when stream is capturing"; return OK;
    }
    *s = "unknown error";
    return E_INVALID_VALUE;
}
