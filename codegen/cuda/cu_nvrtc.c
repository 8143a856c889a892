/* cu_nvrtc.c: the generated program through NVRTC.
 *
 * One compile per target, in parallel: sm_80 and sm_90 CUBINs, and the PTX
 * of the sm_90 compile for the driver to JIT on later GPUs.  Options:
 * -lineinfo (profilers map SASS to source lines), C++17, and ptxas -v,
 * whose report gives every kernel's registers, stack frame and spill bytes
 * (cu_kernel.regs/stack/spill, shown by --verbose and `vitc inspect`, and
 * checked by the tests).
 *
 * With VITC_NVRTC_CACHE=DIR, the images and statistics of a program are
 * kept in DIR under a hash of the program text, the options and the NVRTC
 * version, so compiling the same model again skips NVRTC. */
#include "codegen/cuda/cu_impl.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const int cu_target_arch[CU_NTARGETS] = {80, 90};

const char *cu_stats_target(int t)
{
    static const char *const names[CU_NSTATS] = {"sm_80", "sm_90", "sm_90a"};
    return t >= 0 && t < CU_NSTATS ? names[t] : "?";
}

/* ---- NVRTC, loaded with dlopen ----
 * Nothing links libnvrtc: vitc runs on machines without the CUDA toolkit,
 * and only --target cuda needs it.  These are the few declarations of
 * nvrtc.h the backend uses (its C ABI is stable across CUDA 11-13), so the
 * backend builds without the toolkit too. */
typedef int nvrtcResult;
typedef struct _nvrtcProgram *nvrtcProgram;
enum { NVRTC_SUCCESS = 0, NVRTC_ERROR_OUT_OF_MEMORY = 1 };

#define NVRTC_FUNCTIONS(X)                                                                                          \
    X(nvrtcVersion, nvrtcResult, (int *, int *))                                                                    \
    X(nvrtcGetErrorString, const char *, (nvrtcResult))                                                             \
    X(nvrtcCreateProgram, nvrtcResult,                                                                              \
      (nvrtcProgram *, const char *, const char *, int, const char *const *, const char *const *))                  \
    X(nvrtcCompileProgram, nvrtcResult, (nvrtcProgram, int, const char *const *))                                   \
    X(nvrtcGetProgramLogSize, nvrtcResult, (nvrtcProgram, size_t *))                                                \
    X(nvrtcGetProgramLog, nvrtcResult, (nvrtcProgram, char *))                                                      \
    X(nvrtcGetCUBINSize, nvrtcResult, (nvrtcProgram, size_t *))                                                     \
    X(nvrtcGetCUBIN, nvrtcResult, (nvrtcProgram, char *))                                                           \
    X(nvrtcGetPTXSize, nvrtcResult, (nvrtcProgram, size_t *))                                                       \
    X(nvrtcGetPTX, nvrtcResult, (nvrtcProgram, char *))                                                             \
    X(nvrtcDestroyProgram, nvrtcResult, (nvrtcProgram *))

static struct {
#define X(name, ret, args) ret(*name) args;
    NVRTC_FUNCTIONS(X)
#undef X
    int loaded;
    char why[1024];
} nv;

static pthread_once_t nv_once = PTHREAD_ONCE_INIT;

static void nv_load(void)
{
    /* the unversioned name (a toolkit's or a distribution's -dev link),
     * the current and previous major versions, then the toolkit's lib64 */
    char home[PATH_MAX] = "", local[] = "/usr/local/cuda/lib64/libnvrtc.so";
    const char *ch = getenv("CUDA_HOME");
    if (ch && *ch)
        snprintf(home, sizeof home, "%s/lib64/libnvrtc.so", ch);
    const char *names[] = {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12", home, local};
    void *h = NULL;
    size_t k = (size_t)snprintf(nv.why, sizeof nv.why, "NVRTC (the CUDA toolkit's runtime compiler) was not found: "
                                                       "looked for");
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !h; i++) {
        if (!*names[i])
            continue;
        h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (k < sizeof nv.why)
            k += (size_t)snprintf(nv.why + k, sizeof nv.why - k, "%s %s", i ? "," : "", names[i]);
    }
    if (!h) {
        if (k < sizeof nv.why)
            snprintf(nv.why + k, sizeof nv.why - k, " (install the CUDA toolkit, or set CUDA_HOME)");
        return;
    }
#define X(name, ret, args)                                                                                          \
    if (!(*(void **)&nv.name = dlsym(h, #name))) {                                                                  \
        snprintf(nv.why, sizeof nv.why, "the NVRTC library found has no %s", #name);                                \
        return;                                                                                                     \
    }
    NVRTC_FUNCTIONS(X)
#undef X
    nv.loaded = 1;
}

int cu_nvrtc_load(const char **why)
{
    pthread_once(&nv_once, nv_load);
    *why = nv.why;
    return nv.loaded;
}

#define nvrtcVersion nv.nvrtcVersion
#define nvrtcGetErrorString nv.nvrtcGetErrorString
#define nvrtcCreateProgram nv.nvrtcCreateProgram
#define nvrtcCompileProgram nv.nvrtcCompileProgram
#define nvrtcGetProgramLogSize nv.nvrtcGetProgramLogSize
#define nvrtcGetProgramLog nv.nvrtcGetProgramLog
#define nvrtcGetCUBINSize nv.nvrtcGetCUBINSize
#define nvrtcGetCUBIN nv.nvrtcGetCUBIN
#define nvrtcGetPTXSize nv.nvrtcGetPTXSize
#define nvrtcGetPTX nv.nvrtcGetPTX
#define nvrtcDestroyProgram nv.nvrtcDestroyProgram

typedef struct {
    const char *program;
    int arch, specific, want_ptx; /* specific: the arch-specific target (sm_90a) */
    nvrtcResult rc;
    const char *failed_call;
    char *log, *cubin, *ptx;
    size_t cubin_bytes, ptx_bytes;
} job;

/* One output of a compiled program (its CUBIN or PTX) into *buf (malloc'ed) of *bytes. */
static nvrtcResult get_output(nvrtcProgram prog, nvrtcResult (*size)(nvrtcProgram, size_t *),
                              nvrtcResult (*get)(nvrtcProgram, char *), char **buf, size_t *bytes)
{
    nvrtcResult rc = size(prog, bytes);
    if (rc == NVRTC_SUCCESS && !(*buf = malloc(*bytes ? *bytes : 1)))
        rc = NVRTC_ERROR_OUT_OF_MEMORY;
    if (rc == NVRTC_SUCCESS)
        rc = get(prog, *buf);
    return rc;
}

static void *compile_one(void *p)
{
    job *j = p;
    char arch[64];
    snprintf(arch, sizeof arch, "--gpu-architecture=sm_%d%s", j->arch, j->specific ? "a" : "");
    const char *opts[] = {arch, "-lineinfo", "--std=c++17", "--ptxas-options=-v", "--diag-suppress=177,550"};
    nvrtcProgram prog;
    j->failed_call = "nvrtcCreateProgram";
    if ((j->rc = nvrtcCreateProgram(&prog, j->program, "vitc_model.cu", 0, NULL, NULL)) != NVRTC_SUCCESS)
        return NULL;
    j->failed_call = "nvrtcCompileProgram";
    nvrtcResult rc = nvrtcCompileProgram(prog, (int)(sizeof opts / sizeof opts[0]), opts);
    size_t ls = 0;
    if (nvrtcGetProgramLogSize(prog, &ls) == NVRTC_SUCCESS && ls > 0 && (j->log = malloc(ls + 1))) {
        if (nvrtcGetProgramLog(prog, j->log) != NVRTC_SUCCESS)
            j->log[0] = 0;
        j->log[ls] = 0;
    }
    j->rc = rc;
    if (rc == NVRTC_SUCCESS) {
        j->failed_call = "nvrtcGetCUBIN";
        rc = get_output(prog, nvrtcGetCUBINSize, nvrtcGetCUBIN, &j->cubin, &j->cubin_bytes);
        if (rc == NVRTC_SUCCESS && j->want_ptx) {
            j->failed_call = "nvrtcGetPTX";
            rc = get_output(prog, nvrtcGetPTXSize, nvrtcGetPTX, &j->ptx, &j->ptx_bytes);
        }
        j->rc = rc;
    }
    nvrtcDestroyProgram(&prog);
    return NULL;
}

const char *cu_nvrtc_version(void)
{
    static char buf[32];
    int major = 0, minor = 0;
    const char *why;
    if (!cu_nvrtc_load(&why) || nvrtcVersion(&major, &minor) != NVRTC_SUCCESS)
        return "?";
    snprintf(buf, sizeof buf, "%d.%d", major, minor);
    return buf;
}

/* Reads the ptxas report of one target into the kernels' statistics. */
static void parse_ptxas(cu_ctx *c, int target, const char *log)
{
    int cur = -1;
    for (const char *line = log; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        const char *q = strstr(line, "Compiling entry function '");
        if (q && (size_t)(q - line) < len) {
            q += strlen("Compiling entry function '");
            const char *e = strchr(q, '\'');
            cur = -1;
            for (int i = 0; e && i < c->nk; i++)
                if (strlen(c->k[i].name) == (size_t)(e - q) && strncmp(c->k[i].name, q, (size_t)(e - q)) == 0)
                    cur = i;
        } else if (cur >= 0) {
            char buf[512];
            snprintf(buf, sizeof buf, "%.*s", (int)(len < sizeof buf ? len : sizeof buf - 1), line);
            int a, b, d;
            const char *s;
            if ((s = strstr(buf, "bytes stack frame")) && sscanf(buf, "ptxas . %d bytes stack frame, %d bytes spill "
                                                                      "stores, %d bytes spill loads", &a, &b, &d) == 3) {
                c->k[cur].stack[target] = a;
                c->k[cur].spill[target] = b + d;
            } else if ((s = strstr(buf, "Used ")) && sscanf(s, "Used %d registers", &a) == 1) {
                c->k[cur].regs[target] = a;
            }
        }
        line = end ? end + 1 : NULL;
    }
}

void cu_images_free(cu_image *images, int n)
{
    for (int i = 0; i < n; i++)
        free(images[i].data);
}

/* ---- the on-disk cache ---- */

static int cache_path(const cu_ctx *c, const char *program, char *path, size_t n)
{
    const char *dir = c->knobs.nvrtc_cache;
    int wgmma = c->wgmma;
    if (!*dir)
        return 0;
    uint64_t h = vitc_fnv1a(VITC_FNV1A_INIT, program, strlen(program));
    const char *ver = cu_nvrtc_version();
    h = vitc_fnv1a(h, ver, strlen(ver));
    for (int t = 0; t < CU_NTARGETS; t++)
        h = vitc_fnv1a(h, &cu_target_arch[t], sizeof(int));
    h = vitc_fnv1a(h, "opts:lineinfo,c++17,v,1", 23);
    h = vitc_fnv1a(h, &wgmma, sizeof wgmma); /* an sm_90a image too */
    return (size_t)snprintf(path, n, "%s/%016llx.vkc", dir, (unsigned long long)h) < n;
}

static int cache_load(cu_ctx *c, const char *path, cu_image *images, int *nimages)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    char magic[4];
    int32_t ni = 0, nk = 0;
    int ok = fread(magic, 4, 1, f) == 1 && memcmp(magic, "VKC2", 4) == 0 && fread(&ni, 4, 1, f) == 1 &&
             fread(&nk, 4, 1, f) == 1 && ni > 0 && ni <= 8 && nk == c->nk;
    int n = 0;
    for (; ok && n < ni; n++) {
        int32_t h[3];
        uint64_t bytes;
        ok = fread(h, 4, 3, f) == 3 && fread(&bytes, 8, 1, f) == 1 && bytes > 0 && bytes < ((uint64_t)1 << 32);
        images[n] = (cu_image){.kind = h[0], .arch = h[1], .arch_specific = h[2]};
        if (ok && (images[n].data = malloc((size_t)bytes)) != NULL) {
            images[n].bytes = (size_t)bytes;
            ok = fread(images[n].data, 1, (size_t)bytes, f) == bytes;
        } else {
            ok = 0;
        }
    }
    for (int i = 0; ok && i < nk; i++) {
        int32_t s[3 * CU_NSTATS];
        ok = fread(s, 4, 3 * CU_NSTATS, f) == 3 * CU_NSTATS;
        for (int t = 0; ok && t < CU_NSTATS; t++) {
            c->k[i].regs[t] = s[3 * t];
            c->k[i].stack[t] = s[3 * t + 1];
            c->k[i].spill[t] = s[3 * t + 2];
        }
    }
    fclose(f);
    if (!ok) {
        cu_images_free(images, n);
        return 0;
    }
    *nimages = ni;
    return 1;
}

static void cache_store(const cu_ctx *c, const char *path, const cu_image *images, int n)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return; /* the cache is an optimisation: no error */
    int32_t ni = n, nk = c->nk;
    int ok = fwrite("VKC2", 4, 1, f) == 1 && fwrite(&ni, 4, 1, f) == 1 && fwrite(&nk, 4, 1, f) == 1;
    for (int i = 0; ok && i < n; i++) {
        int32_t h[3] = {images[i].kind, images[i].arch, images[i].arch_specific};
        uint64_t bytes = images[i].bytes;
        ok = fwrite(h, 4, 3, f) == 3 && fwrite(&bytes, 8, 1, f) == 1 &&
             fwrite(images[i].data, 1, images[i].bytes, f) == images[i].bytes;
    }
    for (int i = 0; ok && i < c->nk; i++)
        for (int t = 0; ok && t < CU_NSTATS; t++) {
            int32_t s[3] = {c->k[i].regs[t], c->k[i].stack[t], c->k[i].spill[t]};
            ok = fwrite(s, 4, 3, f) == 3;
        }
    if (fclose(f) != 0)
        ok = 0;
    if (!ok || rename(tmp, path) != 0)
        unlink(tmp);
}

/* ---- compiling ---- */

int cu_nvrtc_compile(cu_ctx *c, const char *program, cu_image *images, int *nimages)
{
    *nimages = 0;
    const char *why;
    if (!cu_nvrtc_load(&why))
        return cu_fail(c, VITC_BAD_INPUT, -1, "%s", why);
    /* the targets of cu_target_arch, and sm_90a after them when a kernel has
     * an arch-specific body (gemm_wg) */
    int nj = CU_NTARGETS + (c->wgmma ? 1 : 0);
    char cpath[4096];
    int cached = cache_path(c, program, cpath, sizeof cpath);
    if (cached && cache_load(c, cpath, images, nimages))
        return VITC_OK;
    job jobs[CU_NTARGETS + 1];
    pthread_t th[CU_NTARGETS + 1];
    int started[CU_NTARGETS + 1] = {0};
    memset(jobs, 0, sizeof jobs);
    for (int t = 0; t < nj; t++) {
        jobs[t].program = program;
        jobs[t].arch = t < CU_NTARGETS ? cu_target_arch[t] : 90;
        jobs[t].specific = t >= CU_NTARGETS;
        jobs[t].want_ptx = t == CU_NTARGETS - 1;
        started[t] = pthread_create(&th[t], NULL, compile_one, &jobs[t]) == 0;
        if (!started[t])
            compile_one(&jobs[t]);
    }
    for (int t = 0; t < nj; t++)
        if (started[t])
            pthread_join(th[t], NULL);
    int st = VITC_OK;
    for (int t = 0; t < nj; t++) {
        job *j = &jobs[t];
        if (j->rc != NVRTC_SUCCESS && st == VITC_OK) {
            /* the first lines of the log name the kernel and the line */
            char head[4096] = "";
            if (j->log)
                snprintf(head, sizeof head, "%s", j->log);
            st = cu_fail(c, VITC_INTERNAL, -1, "NVRTC %s for sm_%d%s: %s (%s)%s%s", cu_nvrtc_version(), j->arch,
                         j->specific ? "a" : "", nvrtcGetErrorString(j->rc), j->failed_call, *head ? ":\n" : "",
                         head);
        }
        if (j->log && j->rc == NVRTC_SUCCESS)
            parse_ptxas(c, t, j->log); /* t = CU_NTARGETS: sm_90a's slot */
    }
    int n = 0;
    for (int t = 0; st == VITC_OK && t < nj; t++) {
        images[n++] = (cu_image){VITC_CUDA_IMAGE_CUBIN, jobs[t].arch, jobs[t].specific, jobs[t].cubin,
                                 jobs[t].cubin_bytes};
        jobs[t].cubin = NULL;
    }
    for (int t = 0; st == VITC_OK && t < nj; t++)
        if (jobs[t].ptx) {
            images[n++] = (cu_image){VITC_CUDA_IMAGE_PTX, jobs[t].arch, 0, jobs[t].ptx, jobs[t].ptx_bytes};
            jobs[t].ptx = NULL;
        }
    for (int t = 0; t < nj; t++)
        free(jobs[t].log), free(jobs[t].cubin), free(jobs[t].ptx);
    if (st != VITC_OK) {
        cu_images_free(images, n);
        return st;
    }
    *nimages = n;
    if (cached)
        cache_store(c, cpath, images, n);
    return VITC_OK;
}
