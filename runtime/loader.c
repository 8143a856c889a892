/* loader.c: opening a compiled model.  Reads its descriptor
 * (VITC_ABI_SYMBOL) from the file as data and checks the ABI version, the
 * size, the sanity of every field and the CPU features it needs before any
 * of the file's code can run; then dlopens the .so, checks the descriptor it
 * exports the same way, and brings the weights into 64-byte aligned memory:
 * embedded ones copied into huge pages (or used in place), external ones read
 * from the file beside the .so and checked against their size and FNV-1a
 * checksum. */
#include "runtime/rt_impl.h"
#include "runtime/rt_knobs.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define RT_MAX_TENSORS 4096 /* inputs or outputs a sane descriptor has */

/* Buffers of 2 MiB and more (the weights, a context's workspace) are
 * 2 MiB-aligned and the kernel is asked to back them with transparent huge
 * pages: the GEMMs stream weights and activations of several MiB per layer,
 * and with 4 KiB pages each 4 KiB is a TLB miss (ViT-B/16 on 2 threads ran
 * 5% faster on huge pages, batch 1 and 8).  Where THP is off the advice does
 * nothing.  VITC_HUGE_PAGES=0 keeps to plain pages and embedded weights in
 * place. */
#define RT_HUGE_PAGE ((uint64_t)2 << 20)

static int huge_pages_wanted(void) { return rt_knob(RT_KNOB_HUGE_PAGES) != 0; }

void *rt_aligned_alloc(uint64_t n)
{
    uint64_t align = n >= RT_HUGE_PAGE && huge_pages_wanted() ? RT_HUGE_PAGE : 64;
    uint64_t rounded = (n + align - 1) & ~(align - 1);
    if (rounded < n || rounded > SIZE_MAX)
        return NULL;
    void *p = NULL;
    if (posix_memalign(&p, (size_t)align, rounded ? (size_t)rounded : 64) != 0)
        return NULL;
#ifdef MADV_HUGEPAGE
    if (align == RT_HUGE_PAGE)
        (void)madvise(p, (size_t)rounded, MADV_HUGEPAGE); /* a hint: plain pages where it fails */
#endif
    return p;
}

uint64_t rt_fnv1a64(const void *data, uint64_t n) { return vitc_fnv1a(VITC_FNV1A_INIT, data, (size_t)n); }

size_t rt_dtype_size(int32_t dtype)
{
    switch (dtype) {
    case 1: return 4;  /* float32 */
    case 2: return 1;  /* uint8 */
    case 3: return 1;  /* int8 */
    case 6: return 4;  /* int32 */
    case 7: return 8;  /* int64 */
    case 9: return 1;  /* bool */
    case 10: return 2; /* float16 */
    case 11: return 8; /* double */
    case 16: return 2; /* bfloat16 */
    }
    return 0;
}

const char *rt_dtype_name(int32_t dtype)
{
    switch (dtype) {
    case 1: return "float32";
    case 2: return "uint8";
    case 3: return "int8";
    case 6: return "int32";
    case 7: return "int64";
    case 9: return "bool";
    case 10: return "float16";
    case 11: return "float64";
    case 16: return "bfloat16";
    }
    return "unknown";
}

/* A descriptor's tensor list is usable: names, known dtypes, ranks and
 * non-negative dims, batch bits only on existing dims.  Returns 0 if so. */
static int check_tensors(const char *path, const char *what, const vitc_abi_tensor *t, int32_t n)
{
    if (n < 0 || n > RT_MAX_TENSORS || (n > 0 && !t))
        return rt_fail(VITC_STATUS_LOAD_FAILED, "%s: malformed model descriptor: %d %s", path, n, what);
    for (int32_t i = 0; i < n; i++) {
        if (!t[i].name || t[i].rank < 0 || t[i].rank > VITC_ABI_MAX_RANK || !rt_dtype_size(t[i].dtype) ||
            (t[i].batch_mask >> t[i].rank) != 0)
            return rt_fail(VITC_STATUS_LOAD_FAILED, "%s: malformed model descriptor: %s %d", path, what, i);
        for (int k = 0; k < t[i].rank; k++)
            if (t[i].dims[k] < 0)
                return rt_fail(VITC_STATUS_LOAD_FAILED, "%s: malformed model descriptor: %s '%s' has dim %lld",
                               path, what, t[i].name, (long long)t[i].dims[k]);
    }
    return 0;
}

static vitc_status check_descriptor(const vitc_abi_model *abi, const char *path, int check_cpu);

/* 1 if two descriptors' tensor lists agree in all but the dimensions that
 * are not the batch's. */
static int same_signature(const vitc_abi_tensor *a, const vitc_abi_tensor *b, int32_t n)
{
    for (int32_t i = 0; i < n; i++) {
        if (strcmp(a[i].name, b[i].name) != 0 || a[i].dtype != b[i].dtype || a[i].rank != b[i].rank ||
            a[i].batch_mask != b[i].batch_mask)
            return 0;
        for (int k = 0; k < a[i].rank; k++)
            if (((a[i].batch_mask >> k) & 1) && a[i].dims[k] != b[i].dims[k])
                return 0;
    }
    return 1;
}

/* The variants (one per input shape) the checked descriptor m->abi lists,
 * each checked as a descriptor and against the first: the same target,
 * batch range and inputs and outputs but for their dimensions. */
static vitc_status check_variants(vitc_model *m, const char *path)
{
    const vitc_abi_model *a = m->abi;
    int n = a->size >= offsetof(vitc_abi_model, variants) + sizeof(void *) ? a->nvariants : 0;
    m->variants = &m->abi;
    m->nvariants = 1;
    m->workspace_bytes = a->workspace_bytes;
    if (n == 0 || n == 1)
        return VITC_STATUS_OK;
    if (n < 0 || n > RT_MAX_VARIANTS || !a->variants || a->variants[0] != a || strcmp(a->target, "cpu") != 0)
        return rt_fail(VITC_STATUS_LOAD_FAILED, "%s: malformed model descriptor: %d variants", path, n);
    for (int i = 1; i < n; i++) {
        const vitc_abi_model *v = a->variants[i];
        if (!v)
            return rt_fail(VITC_STATUS_LOAD_FAILED, "%s: malformed model descriptor: variant %d is missing", path, i);
        vitc_status st = check_descriptor(v, path, 0);
        if (st != VITC_STATUS_OK)
            return st;
        if (strcmp(v->target, a->target) != 0 || v->max_batch != a->max_batch || v->ninputs != a->ninputs ||
            v->noutputs != a->noutputs || !same_signature(v->inputs, a->inputs, a->ninputs) ||
            !same_signature(v->outputs, a->outputs, a->noutputs) || rt_abi_fixed_batch(v) != rt_abi_fixed_batch(a) ||
            v->weights_bytes != a->weights_bytes)
            return rt_fail(VITC_STATUS_LOAD_FAILED,
                           "%s: malformed model descriptor: variant %d does not have the first one's inputs, "
                           "outputs, batch range and weights", path, i);
        if (v->workspace_bytes > m->workspace_bytes)
            m->workspace_bytes = v->workspace_bytes;
    }
    m->variants = a->variants;
    m->nvariants = n;
    return VITC_STATUS_OK;
}

/* A descriptor's fields are usable: version, size, target, counts,
 * tensors, weights; with check_cpu, this machine has the CPU features it
 * was compiled for.  VITC_STATUS_OK, or the status after recording why. */
static vitc_status check_descriptor(const vitc_abi_model *abi, const char *path, int check_cpu)
{
    if (abi->abi_version != VITC_ABI_VERSION || abi->size < VITC_ABI_MODEL_BASE_SIZE ||
        abi->size > sizeof(vitc_abi_model))
        return rt_fail(VITC_STATUS_ABI_MISMATCH,
                       "%s: model ABI version %u (descriptor of %u bytes); this runtime reads version %d (%zu to %zu bytes)",
                       path, abi->abi_version, abi->size, VITC_ABI_VERSION, (size_t)VITC_ABI_MODEL_BASE_SIZE,
                       sizeof(vitc_abi_model));
    if (!rt_executor_of(abi->target))
        return rt_fail(VITC_STATUS_ABI_MISMATCH, "%s: unknown target '%s'", path, abi->target ? abi->target : "(null)");
    if (!abi->run || abi->max_batch < 1 || (abi->nkernels > 0 && !abi->kernel_names) || abi->nkernels < 0)
        return rt_fail(VITC_STATUS_LOAD_FAILED, "%s: malformed model descriptor (run, max_batch or kernel list)", path);
    if (abi->size >= offsetof(vitc_abi_model, fixed_batch) + sizeof abi->fixed_batch && abi->fixed_batch < 0)
        return rt_fail(VITC_STATUS_LOAD_FAILED, "%s: malformed model descriptor (fixed_batch %lld)", path,
                       (long long)abi->fixed_batch);
    for (int32_t i = 0; i < abi->nkernels; i++)
        if (!abi->kernel_names[i])
            return rt_fail(VITC_STATUS_LOAD_FAILED, "%s: malformed model descriptor: kernel name %d is NULL", path, i);
    if (check_tensors(path, "inputs", abi->inputs, abi->ninputs) ||
        check_tensors(path, "outputs", abi->outputs, abi->noutputs))
        return VITC_STATUS_LOAD_FAILED;
    if (!abi->weights_file && abi->weights_bytes > 0 && !abi->weights)
        return rt_fail(VITC_STATUS_LOAD_FAILED, "%s: malformed model descriptor: %llu bytes of weights but none embedded",
                       path, (unsigned long long)abi->weights_bytes);
    int nparts = rt_abi_nparts(abi);
    for (int i = 0; i < nparts; i++)
        if (!abi->parts[i].kernels || !abi->parts[i].op || !abi->parts[i].source)
            return rt_fail(VITC_STATUS_LOAD_FAILED, "%s: malformed model descriptor: profile part %d", path, i);
    char missing[512];
    if (check_cpu && strcmp(abi->target, "cpu") == 0 && abi->features &&
        rt_cpu_missing_features(abi->features, missing, sizeof missing) > 0)
        return rt_fail(VITC_STATUS_LOAD_FAILED,
                       "%s: compiled for CPU features this machine lacks: %s (cpu '%s'); compile it again without "
                       "--cpu/--features to target this machine",
                       path, missing, abi->cpu ? abi->cpu : "?");
    if (check_cpu && strcmp(abi->target, "cpu") == 0 && abi->features &&
        rt_cpu_enable_amx(abi->features, missing, sizeof missing))
        return rt_fail(VITC_STATUS_LOAD_FAILED, "%s: compiled with --precision bf16 or int8 for AMX, but %s", path, missing);
    return VITC_STATUS_OK;
}

/* Reads the external weights file named by the descriptor, from the .so's
 * directory, into m->weights_owned, checking size and checksum. */
static vitc_status load_external_weights(vitc_model *m)
{
    const vitc_abi_model *abi = m->abi;
    const char *name = abi->weights_file;
    if (!*name || strchr(name, '/') || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return rt_fail(VITC_STATUS_LOAD_FAILED, "%s: weights file '%s' is not a plain file name", m->path, name);
    const char *slash = strrchr(m->path, '/');
    size_t dirlen = slash ? (size_t)(slash - m->path) + 1 : 0;
    size_t plen = dirlen + strlen(name) + 1;
    char *wpath = malloc(plen);
    if (!wpath)
        return rt_fail(VITC_STATUS_OUT_OF_MEMORY, "out of memory");
    memcpy(wpath, m->path, dirlen);
    strcpy(wpath + dirlen, name);

    vitc_status st = VITC_STATUS_OK;
    FILE *f = fopen(wpath, "rb");
    struct stat sb;
    if (!f) {
        st = rt_fail(VITC_STATUS_LOAD_FAILED, "%s: cannot open its weights file %s: %s", m->path, wpath,
                     strerror(errno));
    } else if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = rt_fail(VITC_STATUS_LOAD_FAILED, "%s: weights file %s is not a regular file", m->path, wpath);
    } else if ((uint64_t)sb.st_size != abi->weights_bytes) {
        st = rt_fail(VITC_STATUS_LOAD_FAILED, "%s: weights file %s has %lld bytes; the model expects %llu", m->path,
                     wpath, (long long)sb.st_size, (unsigned long long)abi->weights_bytes);
    } else if (!(m->weights_owned = rt_aligned_alloc(abi->weights_bytes))) {
        st = rt_fail(VITC_STATUS_OUT_OF_MEMORY, "%s: out of memory for %llu bytes of weights", m->path,
                     (unsigned long long)abi->weights_bytes);
    } else if (abi->weights_bytes && fread(m->weights_owned, 1, (size_t)abi->weights_bytes, f) != abi->weights_bytes) {
        st = rt_fail(VITC_STATUS_LOAD_FAILED, "%s: short read of weights file %s", m->path, wpath);
    } else {
        uint64_t h = rt_fnv1a64(m->weights_owned, abi->weights_bytes);
        if (h != abi->weights_fnv1a)
            st = rt_fail(VITC_STATUS_LOAD_FAILED,
                         "%s: weights file %s does not belong to this model (FNV-1a %016llx, expected %016llx)",
                         m->path, wpath, (unsigned long long)h, (unsigned long long)abi->weights_fnv1a);
    }
    if (f)
        fclose(f);
    free(wpath);
    if (st == VITC_STATUS_OK)
        m->weights = m->weights_owned;
    return st;
}

/* Embedded weights of a CPU model are copied into huge pages (see
 * rt_aligned_alloc) and the pages of the mapped file they came from are
 * dropped; where that is not wanted, or not possible, or for a CUDA model
 * (its weights go to the GPU), they are used in place when 64-byte aligned,
 * else copied. */
static vitc_status place_embedded_weights(vitc_model *m)
{
    const vitc_abi_model *abi = m->abi;
    int aligned = ((uintptr_t)abi->weights & 63) == 0;
    int huge = abi->weights_bytes >= RT_HUGE_PAGE && strcmp(abi->target, "cpu") == 0 && huge_pages_wanted();
    if (aligned && !huge) {
        m->weights = abi->weights;
        return VITC_STATUS_OK;
    }
    if (!(m->weights_owned = rt_aligned_alloc(abi->weights_bytes))) {
        if (aligned) { /* no room for a copy: the mapped file is as good, only slower */
            m->weights = abi->weights;
            return VITC_STATUS_OK;
        }
        return rt_fail(VITC_STATUS_OUT_OF_MEMORY, "%s: out of memory for %llu bytes of weights", m->path,
                       (unsigned long long)abi->weights_bytes);
    }
    m->weights = m->weights_owned;
    /* The copy is what runs: the file's pages are dropped behind it, 16 MiB
     * at a time (read again from the file should anything touch them), so
     * the weights are not held twice even while loading. */
    const char *src = abi->weights;
    long page = sysconf(_SC_PAGESIZE);
    for (uint64_t off = 0, step = (uint64_t)16 << 20; off < abi->weights_bytes; off += step) {
        uint64_t len = abi->weights_bytes - off < step ? abi->weights_bytes - off : step;
        memcpy((char *)m->weights_owned + off, src + off, (size_t)len);
#ifdef MADV_DONTNEED
        if (page > 1) { /* whole pages of weights only */
            uintptr_t mask = ~((uintptr_t)page - 1);
            uintptr_t lo = ((uintptr_t)src + off + (uintptr_t)page - 1) & mask;
            uintptr_t hi = ((uintptr_t)src + off + len) & mask;
            if (hi > lo)
                (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
        }
#endif
    }
    return VITC_STATUS_OK;
}

/* Opens the model at path: its descriptor read from the file as data and
 * checked (elf_desc.c; nothing of the file runs), then, unless data_only,
 * the file dlopen'ed and its weights placed. */
static vitc_status open_model(const char *fn, const char *path, int data_only, vitc_model **out)
{
    if (out)
        *out = NULL;
    if (!path || !out)
        return rt_fail(VITC_STATUS_INVALID_ARGUMENT, "%s: %s is NULL", fn, path ? "out" : "path");
    vitc_model *m = calloc(1, sizeof *m);
    size_t len = strlen(path);
    if (m)
        m->path = malloc(len + 1);
    if (!m || !m->path) {
        vitc_model_free(m);
        return rt_fail(VITC_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    memcpy(m->path, path, len + 1);
    m->data_only = data_only;
    vitc_status st = rt_elf_desc_read(path, &m->elf);
    if (st == VITC_STATUS_OK)
        st = check_descriptor(m->abi = rt_elf_desc_model(m->elf), path, !data_only);
    if (st == VITC_STATUS_OK)
        st = check_variants(m, path);
    if (st == VITC_STATUS_OK && !data_only) {
        /* dlopen searches the library path for a name without '/': say "./". */
        char *dlpath = malloc(len + 3);
        if (!dlpath) {
            vitc_model_free(m);
            return rt_fail(VITC_STATUS_OUT_OF_MEMORY, "out of memory");
        }
        snprintf(dlpath, len + 3, "%s%s", strchr(path, '/') ? "" : "./", path);
        dlerror();
        m->handle = dlopen(dlpath, RTLD_NOW | RTLD_LOCAL);
        free(dlpath);
        if (!m->handle) {
            const char *why = dlerror();
            st = rt_fail(VITC_STATUS_LOAD_FAILED, "%s: cannot load: %s", path, why ? why : "dlopen failed");
        } else if (!(m->abi = dlsym(m->handle, VITC_ABI_SYMBOL))) {
            st = rt_fail(VITC_STATUS_LOAD_FAILED, "%s: its descriptor %s is not visible once loaded", path,
                         VITC_ABI_SYMBOL);
        } else {
            st = check_descriptor(m->abi, path, 1);
            if (st == VITC_STATUS_OK)
                st = check_variants(m, path);
            rt_elf_desc_free(m->elf); /* the loaded descriptor is the one used from here on */
            m->elf = NULL;
        }
        if (st == VITC_STATUS_OK)
            st = m->abi->weights_file ? load_external_weights(m) : place_embedded_weights(m);
    }
    if (st == VITC_STATUS_OK && (m->exec = rt_executor_of(m->abi->target))->model_load)
        st = m->exec->model_load(m);
    if (st != VITC_STATUS_OK) {
        vitc_model_free(m);
        return st;
    }
    *out = m;
    return VITC_STATUS_OK;
}

VITC_API vitc_status vitc_model_load(const char *path, vitc_model **out)
{
    return open_model("vitc_model_load", path, 0, out);
}

VITC_API vitc_status vitc_model_read(const char *path, vitc_model **out)
{
    return open_model("vitc_model_read", path, 1, out);
}

VITC_API void vitc_model_free(vitc_model *m)
{
    if (!m)
        return;
    if (m->exec && m->exec->model_free)
        m->exec->model_free(m);
    free(m->weights_owned);
    if (m->handle)
        dlclose(m->handle);
    rt_elf_desc_free(m->elf);
    free(m->path);
    free(m);
}
