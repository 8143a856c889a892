/* backend.c: libtriton_vitc.so, a Triton Inference Server backend that
 * serves models compiled by vitc.
 *
 *   repository   <repo>/<model>/config.pbtxt with backend: "vitc", and
 *                <repo>/<model>/<version>/model.so (default_model_filename
 *                names another file)
 *   model        the .so loaded once (vitc_model_load); its signature checked
 *                against the configuration, or the configuration completed
 *                from it where the server auto-completes (a config.pbtxt of
 *                backend: "vitc" alone works); a mismatch refuses the model
 *                with a message that names the field
 *   instance     a vitc_context per instance: parameters { key: "threads" }
 *                threads, by default the cores this process may run on
 *                shared among the model's instances
 *   execute      the requests of one call (several, from the dynamic
 *                batcher) checked one by one: a bad request gets its error
 *                response and the rest still run; those of the same input
 *                shape are gathered into one batch, run once, and the
 *                outputs scattered into their responses (a single request
 *                is run in place, on its own buffers); every request is
 *                released, whatever happened
 *
 * CPU models run in KIND_CPU instances.  CUDA models (vitc --target cuda)
 * run in KIND_GPU instances on the GPU the runtime uses (VITC_CUDA_DEVICE,
 * default 0), with inputs and outputs in host memory: written to work, but
 * not yet run on a machine with a GPU.
 *
 * Nothing of Triton is linked: the server defines the functions of
 * triton_api.h and the dynamic linker binds them when it loads this file. */
#include "triton/tjson.h"
#include "triton/triton_api.h"
#include "vitc/runtime.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define VT_MAX_SHAPES 64
#define VT_DEFAULT_FILE "model.so"

/* ---- errors and logging ---- */

static TRITONSERVER_Error *vt_error(TRITONSERVER_Error_Code code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static TRITONSERVER_Error *vt_error(TRITONSERVER_Error_Code code, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return TRITONSERVER_ErrorNew(code, msg);
}

static void vt_log(TRITONSERVER_LogLevel level, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void vt_log(TRITONSERVER_LogLevel level, int line, const char *fmt, ...)
{
    if (!TRITONSERVER_LogIsEnabled(level))
        return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    TRITONSERVER_Error *err = TRITONSERVER_LogMessage(level, "vitc_backend.c", line, msg);
    if (err)
        TRITONSERVER_ErrorDelete(err);
}
#define VT_INFO(...) vt_log(TRITONSERVER_LOG_INFO, __LINE__, __VA_ARGS__)
#define VT_WARN(...) vt_log(TRITONSERVER_LOG_WARN, __LINE__, __VA_ARGS__)
#define VT_ERROR(...) vt_log(TRITONSERVER_LOG_ERROR, __LINE__, __VA_ARGS__)
#define VT_VERBOSE(...) vt_log(TRITONSERVER_LOG_VERBOSE, __LINE__, __VA_ARGS__)

/* Logs and drops an error the caller cannot pass on. */
static void vt_drop(TRITONSERVER_Error *err, const char *what)
{
    if (err) {
        VT_ERROR("vitc: %s: %s", what, TRITONSERVER_ErrorMessage(err));
        TRITONSERVER_ErrorDelete(err);
    }
}

#define VT_TRY(call)                                                                                                   \
    do {                                                                                                               \
        TRITONSERVER_Error *vt_err_ = (call);                                                                         \
        if (vt_err_)                                                                                                   \
            return vt_err_;                                                                                            \
    } while (0)

/* The Triton error code of a runtime status: what the client did wrong is INVALID_ARG. */
static TRITONSERVER_Error_Code code_of(vitc_status st)
{
    switch (st) {
    case VITC_STATUS_INVALID_ARGUMENT:
    case VITC_STATUS_SHAPE_MISMATCH:
    case VITC_STATUS_DTYPE_MISMATCH:
    case VITC_STATUS_BATCH_OUT_OF_RANGE:
        return TRITONSERVER_ERROR_INVALID_ARG;
    case VITC_STATUS_OUT_OF_MEMORY:
    case VITC_STATUS_NO_DEVICE:
        return TRITONSERVER_ERROR_UNAVAILABLE;
    case VITC_STATUS_LOAD_FAILED:
    case VITC_STATUS_ABI_MISMATCH:
        return TRITONSERVER_ERROR_INVALID_ARG;
    default:
        return TRITONSERVER_ERROR_INTERNAL;
    }
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* the clock steady_clock reads on Linux, as the statistics ask */
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

/* ---- dtypes and shapes ---- */

static TRITONSERVER_DataType triton_dtype(int32_t dt)
{
    switch (dt) {
    case VITC_DTYPE_F32: return TRITONSERVER_TYPE_FP32;
    case VITC_DTYPE_I64: return TRITONSERVER_TYPE_INT64;
    default: return TRITONSERVER_TYPE_INVALID;
    }
}

static const char *config_dtype(TRITONSERVER_DataType t) /* as config.pbtxt writes it */
{
    switch (t) {
    case TRITONSERVER_TYPE_BOOL: return "TYPE_BOOL";
    case TRITONSERVER_TYPE_UINT8: return "TYPE_UINT8";
    case TRITONSERVER_TYPE_UINT16: return "TYPE_UINT16";
    case TRITONSERVER_TYPE_UINT32: return "TYPE_UINT32";
    case TRITONSERVER_TYPE_UINT64: return "TYPE_UINT64";
    case TRITONSERVER_TYPE_INT8: return "TYPE_INT8";
    case TRITONSERVER_TYPE_INT16: return "TYPE_INT16";
    case TRITONSERVER_TYPE_INT32: return "TYPE_INT32";
    case TRITONSERVER_TYPE_INT64: return "TYPE_INT64";
    case TRITONSERVER_TYPE_FP16: return "TYPE_FP16";
    case TRITONSERVER_TYPE_FP32: return "TYPE_FP32";
    case TRITONSERVER_TYPE_FP64: return "TYPE_FP64";
    case TRITONSERVER_TYPE_BYTES: return "TYPE_STRING";
    case TRITONSERVER_TYPE_BF16: return "TYPE_BF16";
    default: return "TYPE_INVALID";
    }
}

static const char *wire_dtype(TRITONSERVER_DataType t) /* as clients name it (KServe v2) */
{
    const char *c = config_dtype(t);
    if (t == TRITONSERVER_TYPE_BYTES)
        return "BYTES";
    return strncmp(c, "TYPE_", 5) == 0 ? c + 5 : c;
}

static size_t elem_size(int32_t dt)
{
    return dt == VITC_DTYPE_I64 ? 8 : 4;
}

static void fmt_dims(char *buf, size_t n, const int64_t *d, int rank)
{
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < rank && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? "," : "", (long long)d[i]);
    if (k < n)
        snprintf(buf + k, n - k, "]");
}

/* ---- the files the backend has loaded ----
 *
 * The dynamic linker hands back the library it already has for a path it
 * has opened before, so a model.so replaced at the same path (mv new.so
 * model.so, then a reload) while the old one is still loaded, as Triton keeps
 * it until the new one is ready, would be the old code again.  Such a file
 * is loaded through a symbolic link of another name, in a directory of its
 * own under $TMPDIR (with a link to its weights file beside it), which the
 * linker takes for a new library; the link stays while the file is loaded
 * (a later load of the same file goes through it too).  A file rewritten in
 * place (cp over it: the same inode, another size or time) is refused: the
 * old model's code is that file's pages, and the new one cannot be told
 * apart from it. */
typedef struct vt_file {
    char *dl_path;      /* the name the library was opened by */
    char *alias_dir;    /* the link's directory, NULL when opened by its own path */
    char *weights_name; /* the weights file linked beside it, or NULL */
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
    int refs;
    struct vt_file *next;
} vt_file;

static pthread_mutex_t files_lock = PTHREAD_MUTEX_INITIALIZER;
static vt_file *files;

static void remove_alias(const char *dir, const char *dl_path, const char *weights_name)
{
    if (dl_path)
        unlink(dl_path);
    if (weights_name) {
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", dir, weights_name);
        unlink(p);
    }
    rmdir(dir);
}

static void file_free(vt_file *f)
{
    if (f->alias_dir)
        remove_alias(f->alias_dir, f->dl_path, f->weights_name);
    free(f->dl_path);
    free(f->alias_dir);
    free(f->weights_name);
    free(f);
}

static void file_release(vt_file *f)
{
    if (!f)
        return;
    pthread_mutex_lock(&files_lock);
    if (--f->refs == 0) {
        for (vt_file **p = &files; *p; p = &(*p)->next)
            if (*p == f) {
                *p = f->next;
                break;
            }
        file_free(f);
    }
    pthread_mutex_unlock(&files_lock);
}

/* A link to real (and to its weights file) by another name: f's dl_path, alias_dir, weights_name. */
static int make_alias(vt_file *f, const char *real)
{
    const char *so_name = strrchr(real, '/') + 1;
    vitc_model *desc = NULL;
    vitc_model_details det;
    if (vitc_model_read(real, &desc) == VITC_STATUS_OK && vitc_model_get_details(desc, &det) == VITC_STATUS_OK &&
        det.weights_file && !(f->weights_name = dup_str(det.weights_file))) {
        vitc_model_free(desc);
        return -1;
    }
    vitc_model_free(desc);
    const char *tmp = getenv("TMPDIR");
    char dir[PATH_MAX], link[PATH_MAX], target[PATH_MAX];
    int n = snprintf(dir, sizeof dir, "%s/vitc-triton-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (n < 0 || (size_t)n >= sizeof dir || !mkdtemp(dir))
        return -1;
    f->alias_dir = dup_str(dir);
    n = snprintf(link, sizeof link, "%s/%s", dir, so_name);
    if (!f->alias_dir || n < 0 || (size_t)n >= sizeof link || !(f->dl_path = dup_str(link)) ||
        symlink(real, link) != 0)
        return -1;
    if (f->weights_name) {
        n = snprintf(target, sizeof target, "%.*s%s", (int)(so_name - real), real, f->weights_name);
        int n2 = snprintf(link, sizeof link, "%s/%s", dir, f->weights_name);
        if (n < 0 || (size_t)n >= sizeof target || n2 < 0 || (size_t)n2 >= sizeof link || symlink(target, link) != 0)
            return -1;
    }
    return 0;
}

/* Loads the model at path (vitc_model_load), through a link of another name
 * where the dynamic linker would otherwise return another file's library. */
static TRITONSERVER_Error *load_model_file(const char *path, vitc_model **out, vt_file **out_file)
{
    *out = NULL;
    *out_file = NULL;
    char real[PATH_MAX];
    struct stat st;
    if (!realpath(path, real) || stat(real, &st) != 0)
        return vt_error(TRITONSERVER_ERROR_NOT_FOUND, "vitc: cannot open the model file %s: %s", path,
                        strerror(errno));
    if (!S_ISREG(st.st_mode))
        return vt_error(TRITONSERVER_ERROR_INVALID_ARG, "vitc: %s is not a file", path);

    pthread_mutex_lock(&files_lock);
    vt_file *f = NULL;
    int name_taken = 0;
    for (vt_file *g = files; g; g = g->next) {
        if (g->dev == st.st_dev && g->ino == st.st_ino)
            f = g;
        else if (strcmp(g->dl_path, real) == 0)
            name_taken = 1;
    }
    TRITONSERVER_Error *err = NULL;
    int fresh = !f;
    if (f && (f->size != st.st_size || f->mtime.tv_sec != st.st_mtim.tv_sec ||
              f->mtime.tv_nsec != st.st_mtim.tv_nsec)) {
        err = vt_error(TRITONSERVER_ERROR_INVALID_ARG,
                       "vitc: %s was rewritten in place while a model loaded from it is still serving; replace the "
                       "file instead (write the new one beside it, then mv it over model.so), or put it in a new "
                       "version directory",
                       path);
        f = NULL;
    } else if (fresh) {
        if (!(f = calloc(1, sizeof *f))) {
            err = vt_error(TRITONSERVER_ERROR_INTERNAL, "vitc: out of memory");
        } else if (name_taken ? make_alias(f, real) != 0 : !(f->dl_path = dup_str(real))) {
            err = vt_error(TRITONSERVER_ERROR_INTERNAL,
                           "vitc: %s replaces a model file still loaded from that path; linking it under another "
                           "name to load it failed: %s", path, strerror(errno));
        } else {
            f->dev = st.st_dev;
            f->ino = st.st_ino;
            f->size = st.st_size;
            f->mtime = st.st_mtim;
        }
    }
    if (!err) {
        vitc_status s = vitc_model_load(f->dl_path, out);
        if (s != VITC_STATUS_OK)
            err = vt_error(code_of(s), "vitc: %s", vitc_last_error());
    }
    if (err) {
        if (fresh && f)
            file_free(f);
    } else {
        if (fresh) {
            f->next = files;
            files = f;
            if (f->alias_dir)
                VT_INFO("vitc: %s replaces a file still loaded from that path: loaded through %s", path, f->dl_path);
        }
        f->refs++;
        *out_file = f;
    }
    pthread_mutex_unlock(&files_lock);
    return err;
}

/* ---- the model ---- */

/* A tensor as the configuration has it: dims without the batch where
 * max_batch_size > 0, -1 where the model takes several sizes. */
typedef struct {
    const char *name; /* the model's */
    TRITONSERVER_DataType dtype;
    int rank;
    int64_t dims[VITC_MAX_RANK];
} vt_io;

typedef struct {
    char *name;
    uint64_t version;
    char *path;
    vitc_model *vm;
    vt_file *file;
    int cuda;
    int ninputs, noutputs, nshapes;
    vitc_tensor_info in[VT_MAX_SHAPES][VITC_MAX_RANK], out[VT_MAX_SHAPES][VITC_MAX_RANK];
    int64_t min_batch, max_batch;   /* the .so's */
    int batch_major;                /* every tensor's dim 0 is the batch (times 1), no other dim depends on it */
    int fixed_batch;                /* no dim depends on the batch: the export fixed it (min_batch == max_batch) */
    int64_t max_batch_size;         /* the configuration's */
    int threads;                    /* parameters threads, 0: the default */
    int instances;                  /* in all instance groups */
} vt_model;

/* The largest number of tensors is bounded by VITC_MAX_RANK below only to
 * size the arrays above: a model with more inputs or outputs is refused. */
#define VT_MAX_IO VITC_MAX_RANK

static void model_free(vt_model *m)
{
    if (!m)
        return;
    vitc_model_free(m->vm);
    file_release(m->file);
    free(m->name);
    free(m->path);
    free(m);
}

/* The configuration's view of tensor i (input or output) of the model:
 * batch-major models with max_batch_size > 0 drop dim 0 (the batch). */
static void config_io(const vt_model *m, int is_input, int i, int batched, vt_io *io)
{
    const vitc_tensor_info *t0 = is_input ? &m->in[0][i] : &m->out[0][i];
    io->name = t0->name;
    io->dtype = triton_dtype(t0->dtype);
    int skip = batched ? 1 : 0;
    io->rank = t0->rank - skip;
    for (int d = skip; d < t0->rank; d++) {
        int64_t v = t0->is_batch[d] ? (m->min_batch == m->max_batch ? t0->dims[d] * m->min_batch : -1) : t0->dims[d];
        for (int s = 1; s < m->nshapes && v != -1; s++) {
            const vitc_tensor_info *t = is_input ? &m->in[s][i] : &m->out[s][i];
            if (t->dims[d] != t0->dims[d])
                v = -1;
        }
        io->dims[d - skip] = v;
    }
}

/* Whether a configured dim (c) fits what the model takes at dim d of tensor i. */
static int dim_fits(const vt_model *m, int is_input, int i, int d, int64_t c)
{
    if (c == -1)
        return 1;
    for (int s = 0; s < m->nshapes; s++) {
        const vitc_tensor_info *t = is_input ? &m->in[s][i] : &m->out[s][i];
        if (t->is_batch[d]) {
            if (c % t->dims[d] == 0 && c / t->dims[d] >= m->min_batch && c / t->dims[d] <= m->max_batch)
                return 1;
        } else if (t->dims[d] == c) {
            return 1;
        }
    }
    return 0;
}

static TRITONSERVER_Error *read_signature(vt_model *m)
{
    m->ninputs = vitc_model_num_inputs(m->vm);
    m->noutputs = vitc_model_num_outputs(m->vm);
    m->nshapes = vitc_model_num_shapes(m->vm);
    m->min_batch = vitc_model_min_batch(m->vm);
    m->max_batch = vitc_model_max_batch(m->vm);
    if (m->ninputs < 1 || m->ninputs > VT_MAX_IO || m->noutputs < 1 || m->noutputs > VT_MAX_IO)
        return vt_error(TRITONSERVER_ERROR_UNSUPPORTED, "vitc: %s has %d inputs and %d outputs; the backend serves "
                        "models of 1 to %d of each", m->path, m->ninputs, m->noutputs, VT_MAX_IO);
    if (m->nshapes < 1 || m->nshapes > VT_MAX_SHAPES)
        return vt_error(TRITONSERVER_ERROR_UNSUPPORTED, "vitc: %s has %d input shapes; the backend serves up to %d",
                        m->path, m->nshapes, VT_MAX_SHAPES);
    for (int s = 0; s < m->nshapes; s++) {
        for (int i = 0; i < m->ninputs; i++)
            if (vitc_model_shape_input(m->vm, s, i, &m->in[s][i]) != VITC_STATUS_OK)
                return vt_error(TRITONSERVER_ERROR_INTERNAL, "vitc: %s", vitc_last_error());
        for (int i = 0; i < m->noutputs; i++)
            if (vitc_model_shape_output(m->vm, s, i, &m->out[s][i]) != VITC_STATUS_OK)
                return vt_error(TRITONSERVER_ERROR_INTERNAL, "vitc: %s", vitc_last_error());
    }
    for (int i = 0; i < m->ninputs + m->noutputs; i++) {
        const vitc_tensor_info *t = i < m->ninputs ? &m->in[0][i] : &m->out[0][i - m->ninputs];
        if (triton_dtype(t->dtype) == TRITONSERVER_TYPE_INVALID)
            return vt_error(TRITONSERVER_ERROR_UNSUPPORTED, "vitc: %s: tensor '%s' has dtype %d, which the backend "
                            "does not serve", m->path, t->name, t->dtype);
    }
    m->batch_major = 1;
    m->fixed_batch = 1;
    for (int s = 0; s < m->nshapes; s++)
        for (int i = 0; i < m->ninputs + m->noutputs; i++) {
            const vitc_tensor_info *t = i < m->ninputs ? &m->in[s][i] : &m->out[s][i - m->ninputs];
            if (t->rank < 1 || !t->is_batch[0] || t->dims[0] != 1)
                m->batch_major = 0;
            for (int d = 0; d < t->rank; d++) {
                if (t->is_batch[d])
                    m->fixed_batch = 0;
                if (d > 0 && t->is_batch[d])
                    m->batch_major = 0;
            }
        }
    if (m->fixed_batch)
        m->batch_major = 0;
    m->cuda = strcmp(vitc_model_target(m->vm), "cuda") == 0;
    return NULL;
}

static int has_scheduler(const tj_value *cfg)
{
    return tj_get(cfg, "dynamic_batching") || tj_get(cfg, "sequence_batching") ||
           tj_get(cfg, "ensemble_scheduling");
}

static const tj_value *find_io(const tj_value *list, const char *name)
{
    if (!list || list->type != TJ_ARRAY)
        return NULL;
    for (size_t k = 0; k < list->n; k++) {
        const char *n = tj_str(tj_get(&list->items[k], "name"));
        if (n && strcmp(n, name) == 0)
            return &list->items[k];
    }
    return NULL;
}

static void put_io(tj_buf *b, const vt_io *io)
{
    tj_puts(b, "{\"name\":");
    tj_put_string(b, io->name);
    tj_printf(b, ",\"data_type\":\"%s\",\"dims\":[", config_dtype(io->dtype));
    for (int d = 0; d < io->rank; d++)
        tj_printf(b, "%s%lld", d ? "," : "", (long long)io->dims[d]);
    tj_puts(b, "]}");
}

/* Writes the entries of one tensor list: those the configuration gives, as
 * written (the server replaces the whole list with this one; they are
 * checked against the model afterwards), then the model's tensors it lacks. */
static void put_ios(tj_buf *b, const vt_model *m, const tj_value *list, int is_input, int batched, int *changed)
{
    int n = is_input ? m->ninputs : m->noutputs, first = 1;
    for (size_t k = 0; list && list->type == TJ_ARRAY && k < list->n; k++) {
        tj_puts(b, first ? "" : ",");
        first = 0;
        tj_write(b, &list->items[k]);
    }
    for (int i = 0; i < n; i++) {
        vt_io io;
        config_io(m, is_input, i, batched, &io);
        if (find_io(list, io.name))
            continue;
        tj_puts(b, first ? "" : ",");
        first = 0;
        put_io(b, &io);
        *changed = 1;
    }
}

/* The configuration completed from the .so, for TRITONBACKEND_ModelSetConfig
 * (which takes max_batch_size, input, output and a scheduler from it):
 * max_batch_size the .so's largest batch where Triton may batch it (0 for a
 * model whose export fixed its batch), every tensor the configuration
 * lacks, and the dynamic batcher where the configuration names no
 * scheduler. */
static TRITONSERVER_Error *auto_complete(TRITONBACKEND_Model *tm, vt_model *m, const tj_value *cfg, int *changed)
{
    *changed = 0;
    int64_t mbs = 0;
    const tj_value *inputs = tj_get(cfg, "input");
    int given_inputs = inputs && inputs->type == TJ_ARRAY && inputs->n > 0;
    if (tj_int(tj_get(cfg, "max_batch_size"), &mbs) != 0)
        mbs = 0;
    int64_t new_mbs = mbs;
    /* max_batch_size 0 with tensors listed is a choice (no batching by Triton); without, it was left out */
    if (mbs == 0 && !given_inputs && m->batch_major)
        new_mbs = m->max_batch;
    int batched = new_mbs > 0;
    if (new_mbs != mbs)
        *changed = 1;
    tj_buf b = {0};
    tj_printf(&b, "{\"max_batch_size\":%lld,\"input\":[", (long long)new_mbs);
    put_ios(&b, m, inputs, 1, batched, changed);
    tj_puts(&b, "],\"output\":[");
    put_ios(&b, m, tj_get(cfg, "output"), 0, batched, changed);
    tj_puts(&b, "]");
    if (batched && !has_scheduler(cfg)) {
        tj_puts(&b, ",\"dynamic_batching\":{}");
        *changed = 1;
    }
    tj_puts(&b, "}");
    if (b.oom)
        return vt_error(TRITONSERVER_ERROR_INTERNAL, "vitc: out of memory");
    TRITONSERVER_Error *err = NULL;
    if (*changed) {
        TRITONSERVER_Message *msg = NULL;
        err = TRITONSERVER_MessageNewFromSerializedJson(&msg, b.p, b.n);
        if (!err)
            err = TRITONBACKEND_ModelSetConfig(tm, 1, msg);
        if (msg)
            vt_drop(TRITONSERVER_MessageDelete(msg), "deleting a message");
        if (!err)
            VT_VERBOSE("vitc: model '%s': configuration completed from %s: %s", m->name, m->path, b.p);
    }
    tj_buf_free(&b);
    return err;
}

/* The model's tensor of that name (-1: none). */
static int io_index(const vt_model *m, int is_input, const char *name)
{
    int n = is_input ? m->ninputs : m->noutputs;
    for (int j = 0; j < n && name; j++)
        if (strcmp((is_input ? m->in[0][j] : m->out[0][j]).name, name) == 0)
            return j;
    return -1;
}

/* A tensor the configuration lists that the model does not have: refused
 * before the configuration is completed, which would otherwise leave it out. */
static TRITONSERVER_Error *check_names(const vt_model *m, const tj_value *cfg, int is_input)
{
    const char *what = is_input ? "input" : "output";
    const tj_value *list = tj_get(cfg, what);
    int n = is_input ? m->ninputs : m->noutputs;
    for (size_t k = 0; list && list->type == TJ_ARRAY && k < list->n; k++) {
        const char *name = tj_str(tj_get(&list->items[k], "name"));
        if (io_index(m, is_input, name) >= 0)
            continue;
        char have[512] = "";
        size_t len = 0;
        for (int j = 0; j < n && len < sizeof have; j++)
            len += (size_t)snprintf(have + len, sizeof have - len, "%s'%s'", j ? ", " : "",
                                    (is_input ? m->in[0][j] : m->out[0][j]).name);
        return vt_error(TRITONSERVER_ERROR_INVALID_ARG,
                        "vitc: model '%s': config.pbtxt lists %s '%s', which %s does not have (its %ss: %s)", m->name,
                        what, name ? name : "(no name)", m->path, what, have);
    }
    return NULL;
}

/* Checks one input or output list of the configuration against the model. */
static TRITONSERVER_Error *check_ios(vt_model *m, const tj_value *cfg, int is_input, int batched)
{
    const char *what = is_input ? "input" : "output";
    const tj_value *list = tj_get(cfg, what);
    int n = is_input ? m->ninputs : m->noutputs;
    size_t count = list && list->type == TJ_ARRAY ? list->n : 0;
    VT_TRY(check_names(m, cfg, is_input));
    for (size_t k = 0; k < count; k++) {
        const tj_value *e = &list->items[k];
        const char *name = tj_str(tj_get(e, "name"));
        int i = io_index(m, is_input, name);
        vt_io io;
        config_io(m, is_input, i, batched, &io);
        const char *dt = tj_str(tj_get(e, "data_type"));
        if (!dt || strcmp(dt, config_dtype(io.dtype)) != 0)
            return vt_error(TRITONSERVER_ERROR_INVALID_ARG,
                            "vitc: model '%s': config.pbtxt gives %s '%s' data_type %s; the model takes %s",
                            m->name, what, name, dt ? dt : "(none)", config_dtype(io.dtype));
        const tj_value *shape = tj_get(e, "reshape") ? tj_get(tj_get(e, "reshape"), "shape") : NULL;
        if (shape)
            return vt_error(TRITONSERVER_ERROR_UNSUPPORTED,
                            "vitc: model '%s': %s '%s' has a reshape, which the vitc backend does not do; give dims "
                            "as the model has them", m->name, what, name);
        const tj_value *dims = tj_get(e, "dims");
        int64_t cd[VITC_MAX_RANK];
        int rank = dims && dims->type == TJ_ARRAY ? (int)dims->n : -1;
        int ok = rank == io.rank;
        for (int d = 0; ok && d < rank; d++)
            ok = tj_int(&dims->items[d], &cd[d]) == 0 && dim_fits(m, is_input, i, d + (batched ? 1 : 0), cd[d]);
        if (!ok) {
            char want[160], got[160] = "(none)";
            fmt_dims(want, sizeof want, io.dims, io.rank);
            if (rank >= 0 && rank <= VITC_MAX_RANK) {
                for (int d = 0; d < rank; d++)
                    if (tj_int(&dims->items[d], &cd[d]) != 0)
                        cd[d] = 0;
                fmt_dims(got, sizeof got, cd, rank);
            }
            return vt_error(TRITONSERVER_ERROR_INVALID_ARG,
                            "vitc: model '%s': config.pbtxt gives %s '%s' dims %s; the model has %s%s (-1: any size "
                            "the model takes)",
                            m->name, what, name, got, want,
                            batched ? " with max_batch_size > 0, which leaves out the batch"
                                    : " with max_batch_size 0, which includes the batch");
        }
    }
    if (is_input)
        for (int i = 0; i < n; i++)
            if (!find_io(list, m->in[0][i].name))
                return vt_error(TRITONSERVER_ERROR_INVALID_ARG,
                                "vitc: model '%s': config.pbtxt does not list input '%s', which the model takes",
                                m->name, m->in[0][i].name);
    if (!is_input && count == 0)
        return vt_error(TRITONSERVER_ERROR_INVALID_ARG, "vitc: model '%s': config.pbtxt lists no output", m->name);
    return NULL;
}

static int online_cpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static TRITONSERVER_Error *check_config(vt_model *m, const tj_value *cfg)
{
    int64_t mbs = 0;
    if (tj_int(tj_get(cfg, "max_batch_size"), &mbs) != 0)
        mbs = 0;
    m->max_batch_size = mbs;
    if (mbs < 0)
        return vt_error(TRITONSERVER_ERROR_INVALID_ARG, "vitc: model '%s': max_batch_size %lld", m->name,
                        (long long)mbs);
    if (mbs > 0 && m->fixed_batch)
        return vt_error(TRITONSERVER_ERROR_INVALID_ARG,
                        "vitc: model '%s': max_batch_size %lld, but %s runs batch %lld only (its ONNX export fixed "
                        "the batch): set max_batch_size: 0 and give dims with the batch, or recompile with "
                        "--dynamic-batch",
                        m->name, (long long)mbs, m->path, (long long)m->min_batch);
    if (mbs > 0 && !m->batch_major)
        return vt_error(TRITONSERVER_ERROR_INVALID_ARG,
                        "vitc: model '%s': max_batch_size %lld, but the batch of %s is not the first dimension of "
                        "every input and output alone; set max_batch_size: 0 and give dims with the batch",
                        m->name, (long long)mbs, m->path);
    if (mbs > m->max_batch)
        return vt_error(TRITONSERVER_ERROR_INVALID_ARG,
                        "vitc: model '%s': max_batch_size %lld, but %s runs batches up to %lld (vitc compile "
                        "--batch); lower max_batch_size or recompile with a larger --batch",
                        m->name, (long long)mbs, m->path, (long long)m->max_batch);
    VT_TRY(check_ios(m, cfg, 1, mbs > 0));
    VT_TRY(check_ios(m, cfg, 0, mbs > 0));

    /* instance groups: the kind the model's target runs on, and the count that shares the cores */
    m->instances = 0;
    const tj_value *groups = tj_get(cfg, "instance_group");
    for (size_t g = 0; groups && groups->type == TJ_ARRAY && g < groups->n; g++) {
        const tj_value *grp = &groups->items[g];
        const char *kind = tj_str(tj_get(grp, "kind"));
        const char *gname = tj_str(tj_get(grp, "name"));
        int64_t count = 1;
        if (tj_int(tj_get(grp, "count"), &count) != 0 || count < 1)
            count = 1;
        const char *want = m->cuda ? "KIND_GPU" : "KIND_CPU";
        if (kind && strcmp(kind, want) != 0 && strcmp(kind, "KIND_MODEL") != 0)
            return vt_error(TRITONSERVER_ERROR_INVALID_ARG,
                            "vitc: model '%s': instance group '%s' is %s, but %s is a %s model: give it "
                            "instance_group [ { kind: %s } ]",
                            m->name, gname ? gname : "", kind, m->path, m->cuda ? "CUDA" : "CPU", want);
        const tj_value *gpus = tj_get(grp, "gpus");
        if (m->cuda && gpus && gpus->type == TJ_ARRAY) {
            const char *env = getenv("VITC_CUDA_DEVICE");
            int64_t dev = env && *env ? strtoll(env, NULL, 10) : 0;
            for (size_t k = 0; k < gpus->n; k++) {
                int64_t id;
                if (tj_int(&gpus->items[k], &id) == 0 && id != dev)
                    return vt_error(TRITONSERVER_ERROR_INVALID_ARG,
                                    "vitc: model '%s': instance group '%s' asks for GPU %lld; vitc runs CUDA models "
                                    "on one GPU per process, %lld (VITC_CUDA_DEVICE): give the group gpus: [ %lld ]",
                                    m->name, gname ? gname : "", (long long)id, (long long)dev, (long long)dev);
            }
            count *= gpus->n > 0 ? (int64_t)gpus->n : 1;
        }
        m->instances += (int)count;
    }
    if (m->instances < 1)
        m->instances = 1;

    /* parameters { key: "threads" value: { string_value: "N" } } */
    m->threads = 0;
    const tj_value *params = tj_get(cfg, "parameters");
    for (size_t k = 0; params && params->type == TJ_OBJECT && k < params->n; k++) {
        const char *key = params->keys[k];
        const char *val = tj_str(tj_get(&params->items[k], "string_value"));
        if (strcmp(key, "threads") == 0) {
            char *end = NULL;
            long t = val ? strtol(val, &end, 10) : -1;
            if (!val || !*val || *end || t < 0 || t > 1024)
                return vt_error(TRITONSERVER_ERROR_INVALID_ARG,
                                "vitc: model '%s': parameter threads is '%s'; it takes a number of threads from 1 to "
                                "1024, or 0 for the default (the cores shared among the instances)",
                                m->name, val ? val : "");
            m->threads = (int)t;
        } else {
            VT_WARN("vitc: model '%s': parameter '%s' means nothing to the vitc backend (it reads 'threads')",
                    m->name, key);
        }
    }
    return NULL;
}

static TRITONSERVER_Error *get_config(TRITONBACKEND_Model *tm, tj_value **out)
{
    *out = NULL;
    TRITONSERVER_Message *msg = NULL;
    VT_TRY(TRITONBACKEND_ModelConfig(tm, 1, &msg));
    const char *text = NULL;
    size_t len = 0;
    TRITONSERVER_Error *err = TRITONSERVER_MessageSerializeToJson(msg, &text, &len);
    if (!err) {
        char why[160];
        *out = tj_parse(text, len, why, sizeof why);
        if (!*out)
            err = vt_error(TRITONSERVER_ERROR_INTERNAL, "vitc: the model configuration from the server: %s", why);
    }
    vt_drop(TRITONSERVER_MessageDelete(msg), "deleting a message");
    return err;
}

static TRITONSERVER_Error *model_init(TRITONBACKEND_Model *tm, vt_model *m)
{
    const char *name = NULL, *repo = NULL;
    TRITONBACKEND_ArtifactType art;
    VT_TRY(TRITONBACKEND_ModelName(tm, &name));
    VT_TRY(TRITONBACKEND_ModelVersion(tm, &m->version));
    VT_TRY(TRITONBACKEND_ModelRepository(tm, &art, &repo));
    if (!(m->name = dup_str(name)))
        return vt_error(TRITONSERVER_ERROR_INTERNAL, "vitc: out of memory");
    if (art != TRITONBACKEND_ARTIFACT_FILESYSTEM)
        return vt_error(TRITONSERVER_ERROR_UNSUPPORTED, "vitc: model '%s': the repository is not a local directory",
                        name);

    tj_value *cfg = NULL;
    VT_TRY(get_config(tm, &cfg));
    const char *file = tj_str(tj_get(cfg, "default_model_filename"));
    if (!file || !*file)
        file = VT_DEFAULT_FILE;
    size_t plen = strlen(repo) + strlen(file) + 32;
    if (!(m->path = malloc(plen))) {
        tj_free(cfg);
        return vt_error(TRITONSERVER_ERROR_INTERNAL, "vitc: out of memory");
    }
    snprintf(m->path, plen, "%s/%llu/%s", repo, (unsigned long long)m->version, file);

    TRITONSERVER_Error *err = load_model_file(m->path, &m->vm, &m->file);
    if (!err)
        err = read_signature(m);
    bool complete = false;
    if (!err)
        err = TRITONBACKEND_ModelAutoCompleteConfig(tm, &complete);
    if (!err && complete) {
        int changed = 0;
        err = check_names(m, cfg, 1);
        if (!err)
            err = check_names(m, cfg, 0);
        if (!err)
            err = auto_complete(tm, m, cfg, &changed);
        if (!err && changed) {
            tj_free(cfg);
            cfg = NULL;
            err = get_config(tm, &cfg);
        }
    }
    if (!err)
        err = check_config(m, cfg);
    tj_free(cfg);
    if (err)
        return err;
    char batches[64];
    if (m->min_batch == m->max_batch)
        snprintf(batches, sizeof batches, "batch %lld only", (long long)m->min_batch);
    else
        snprintf(batches, sizeof batches, "batches %lld-%lld", (long long)m->min_batch, (long long)m->max_batch);
    VT_INFO("vitc: model '%s' version %llu: %s (%s, %s, %s, %d input shape%s), max_batch_size %lld, %d instance%s",
            m->name, (unsigned long long)m->version, m->path, vitc_model_target(m->vm), vitc_model_precision(m->vm),
            batches, m->nshapes, m->nshapes == 1 ? "" : "s", (long long)m->max_batch_size, m->instances,
            m->instances == 1 ? "" : "s");
    return NULL;
}

/* ---- the backend's entry points ---- */

TRITONSERVER_Error *TRITONBACKEND_Initialize(TRITONBACKEND_Backend *backend)
{
    const char *name = "vitc";
    VT_TRY(TRITONBACKEND_BackendName(backend, &name));
    uint32_t major = 0, minor = 0;
    VT_TRY(TRITONBACKEND_ApiVersion(&major, &minor));
    if (major != VITC_TRITON_BACKEND_API_MAJOR || minor < VITC_TRITON_BACKEND_API_MINOR)
        return vt_error(TRITONSERVER_ERROR_UNSUPPORTED,
                        "vitc: this server's backend API is %u.%u; the vitc backend needs %d.x with x >= %d",
                        major, minor, VITC_TRITON_BACKEND_API_MAJOR, VITC_TRITON_BACKEND_API_MINOR);
    VT_INFO("vitc: backend '%s' (vitc %s, backend API %u.%u)", name, VITC_VERSION, major, minor);
    return NULL;
}

TRITONSERVER_Error *TRITONBACKEND_Finalize(TRITONBACKEND_Backend *backend)
{
    (void)backend;
    return NULL;
}

/* Without an instance_group in config.pbtxt, Triton makes one instance of
 * the kind its backend prefers: the CPU's (CUDA models name KIND_GPU). */
TRITONSERVER_Error *TRITONBACKEND_GetBackendAttribute(TRITONBACKEND_Backend *backend,
                                                      TRITONBACKEND_BackendAttribute *attributes)
{
    (void)backend;
    return TRITONBACKEND_BackendAttributeAddPreferredInstanceGroup(attributes, TRITONSERVER_INSTANCEGROUPKIND_CPU, 1,
                                                                   NULL, 0);
}

TRITONSERVER_Error *TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model *tm)
{
    vt_model *m = calloc(1, sizeof *m);
    if (!m)
        return vt_error(TRITONSERVER_ERROR_INTERNAL, "vitc: out of memory");
    TRITONSERVER_Error *err = model_init(tm, m);
    if (!err)
        err = TRITONBACKEND_ModelSetState(tm, m);
    if (err)
        model_free(m);
    return err;
}

TRITONSERVER_Error *TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model *tm)
{
    void *state = NULL;
    VT_TRY(TRITONBACKEND_ModelState(tm, &state));
    vt_model *m = state;
    if (m)
        VT_INFO("vitc: model '%s' version %llu unloaded", m->name, (unsigned long long)m->version);
    model_free(m);
    return NULL;
}

/* ---- instances ---- */

typedef struct {
    void *p;
    size_t cap;
} vt_stage;

typedef struct {
    vt_model *model;
    char *name;
    vitc_context *ctx;
    vt_stage in[VT_MAX_IO], out[VT_MAX_IO];
} vt_instance;

static void *stage(vt_stage *s, size_t bytes)
{
    if (bytes > s->cap) {
        void *p = NULL;
        size_t cap = bytes < 4096 ? 4096 : bytes;
        if (posix_memalign(&p, 64, cap) != 0)
            return NULL;
        free(s->p);
        s->p = p;
        s->cap = cap;
    }
    return s->p;
}

TRITONSERVER_Error *TRITONBACKEND_ModelInstanceInitialize(TRITONBACKEND_ModelInstance *ti)
{
    const char *name = NULL;
    TRITONBACKEND_Model *tm = NULL;
    TRITONSERVER_InstanceGroupKind kind;
    int32_t device = 0;
    void *state = NULL;
    VT_TRY(TRITONBACKEND_ModelInstanceName(ti, &name));
    VT_TRY(TRITONBACKEND_ModelInstanceKind(ti, &kind));
    VT_TRY(TRITONBACKEND_ModelInstanceDeviceId(ti, &device));
    VT_TRY(TRITONBACKEND_ModelInstanceModel(ti, &tm));
    VT_TRY(TRITONBACKEND_ModelState(tm, &state));
    vt_model *m = state;
    if (kind == TRITONSERVER_INSTANCEGROUPKIND_GPU && !m->cuda)
        return vt_error(TRITONSERVER_ERROR_INVALID_ARG,
                        "vitc: instance '%s' is KIND_GPU, but %s is a CPU model: give it instance_group [ { kind: "
                        "KIND_CPU } ]", name, m->path);
    if (kind == TRITONSERVER_INSTANCEGROUPKIND_CPU && m->cuda)
        return vt_error(TRITONSERVER_ERROR_INVALID_ARG,
                        "vitc: instance '%s' is KIND_CPU, but %s is a CUDA model: give it instance_group [ { kind: "
                        "KIND_GPU } ]", name, m->path);
    int threads = m->threads;
    if (m->cuda)
        threads = 1; /* a CUDA model runs on one host thread per context (its stream) */
    else if (threads == 0) {
        threads = online_cpus() / m->instances;
        if (threads < 1)
            threads = 1;
    }
    vt_instance *inst = calloc(1, sizeof *inst);
    if (!inst || !(inst->name = dup_str(name))) {
        free(inst);
        return vt_error(TRITONSERVER_ERROR_INTERNAL, "vitc: out of memory");
    }
    inst->model = m;
    vitc_status st = vitc_context_create(m->vm, threads, &inst->ctx);
    if (st != VITC_STATUS_OK) {
        TRITONSERVER_Error *err =
            vt_error(code_of(st), "vitc: instance '%s' of model '%s': %s", name, m->name, vitc_last_error());
        free(inst->name);
        free(inst);
        return err;
    }
    TRITONSERVER_Error *err = TRITONBACKEND_ModelInstanceSetState(ti, inst);
    if (err) {
        vitc_context_free(inst->ctx);
        free(inst->name);
        free(inst);
        return err;
    }
    if (m->cuda)
        VT_INFO("vitc: instance '%s' on GPU %d", name, device);
    else
        VT_INFO("vitc: instance '%s': %d thread%s", name, vitc_context_num_threads(inst->ctx),
                vitc_context_num_threads(inst->ctx) == 1 ? "" : "s");
    return NULL;
}

TRITONSERVER_Error *TRITONBACKEND_ModelInstanceFinalize(TRITONBACKEND_ModelInstance *ti)
{
    void *state = NULL;
    VT_TRY(TRITONBACKEND_ModelInstanceState(ti, &state));
    vt_instance *inst = state;
    if (!inst)
        return NULL;
    vitc_context_free(inst->ctx);
    for (int i = 0; i < VT_MAX_IO; i++) {
        free(inst->in[i].p);
        free(inst->out[i].p);
    }
    free(inst->name);
    free(inst);
    return NULL;
}

/* ---- execution ---- */

typedef struct {
    TRITONBACKEND_Request *req;
    TRITONBACKEND_Response *resp;
    TRITONSERVER_Error *err;     /* answered with this, when set */
    int done;                    /* answered and released */
    int64_t batch;
    int shape;                   /* the model's input shape it has */
    TRITONBACKEND_Input *in[VT_MAX_IO];
    uint32_t nbuf[VT_MAX_IO];
    void *out[VT_MAX_IO];        /* its output buffers (NULL: not asked for) */
    uint64_t compute_start, compute_end;
} vt_req;

/* The batch and shape a request's inputs have, checked against the model. */
static TRITONSERVER_Error *inspect_request(const vt_model *m, vt_req *r)
{
    uint32_t count = 0;
    VT_TRY(TRITONBACKEND_RequestInputCount(r->req, &count));
    const int64_t *shape[VT_MAX_IO];
    uint32_t rank[VT_MAX_IO];
    uint64_t bytes[VT_MAX_IO];
    for (int i = 0; i < m->ninputs; i++) {
        const char *iname = m->in[0][i].name;
        TRITONSERVER_Error *e = TRITONBACKEND_RequestInput(r->req, iname, &r->in[i]);
        if (e) {
            TRITONSERVER_ErrorDelete(e);
            return vt_error(TRITONSERVER_ERROR_INVALID_ARG, "vitc: model '%s': the request has no input '%s'",
                            m->name, iname);
        }
        TRITONSERVER_DataType dt;
        VT_TRY(TRITONBACKEND_InputProperties(r->in[i], NULL, &dt, &shape[i], &rank[i], &bytes[i], &r->nbuf[i]));
        TRITONSERVER_DataType want = triton_dtype(m->in[0][i].dtype);
        if (dt != want)
            return vt_error(TRITONSERVER_ERROR_INVALID_ARG,
                            "vitc: model '%s': input '%s' is %s; the model takes %s", m->name, iname,
                            wire_dtype(dt), wire_dtype(want));
    }
    if (count != (uint32_t)m->ninputs)
        return vt_error(TRITONSERVER_ERROR_INVALID_ARG, "vitc: model '%s': the request has %u inputs; the model takes %d",
                        m->name, count, m->ninputs);
    /* the batch: from the first dim of input 0 that depends on it; a fixed-batch model's own */
    int64_t b = m->min_batch;
    const vitc_tensor_info *t0 = &m->in[0][0];
    for (int d = 0; d < t0->rank && d < (int)rank[0]; d++)
        if (t0->is_batch[d]) {
            b = t0->dims[d] > 0 && shape[0][d] % t0->dims[d] == 0 ? shape[0][d] / t0->dims[d] : -1;
            break;
        }
    if (b < m->min_batch || b > m->max_batch) {
        char got[160];
        fmt_dims(got, sizeof got, shape[0], (int)rank[0]);
        if (m->min_batch == m->max_batch)
            return vt_error(TRITONSERVER_ERROR_INVALID_ARG,
                            "vitc: model '%s': input '%s' has shape %s; the model runs batch %lld only", m->name,
                            t0->name, got, (long long)m->min_batch);
        return vt_error(TRITONSERVER_ERROR_INVALID_ARG,
                        "vitc: model '%s': input '%s' has shape %s: batch %lld; the model runs batches %lld to %lld",
                        m->name, t0->name, got, (long long)b, (long long)m->min_batch, (long long)m->max_batch);
    }
    r->batch = b;
    r->shape = -1;
    for (int s = 0; s < m->nshapes && r->shape < 0; s++) {
        int fits = 1;
        for (int i = 0; i < m->ninputs && fits; i++) {
            const vitc_tensor_info *t = &m->in[s][i];
            fits = (int)rank[i] == t->rank;
            for (int d = 0; fits && d < t->rank; d++)
                fits = shape[i][d] == (t->is_batch[d] ? t->dims[d] * b : t->dims[d]);
        }
        if (fits)
            r->shape = s;
    }
    if (r->shape < 0) {
        /* name the first input that fits no shape, with what the model takes */
        for (int i = 0; i < m->ninputs; i++) {
            int any = 0;
            for (int s = 0; s < m->nshapes && !any; s++) {
                const vitc_tensor_info *t = &m->in[s][i];
                int fits = (int)rank[i] == t->rank;
                for (int d = 0; fits && d < t->rank; d++)
                    fits = shape[i][d] == (t->is_batch[d] ? t->dims[d] * b : t->dims[d]);
                any = fits;
            }
            if (any && i + 1 < m->ninputs)
                continue;
            char got[160], want[512];
            fmt_dims(got, sizeof got, shape[i], (int)rank[i]);
            size_t k = 0;
            for (int s = 0; s < m->nshapes && k < sizeof want; s++) {
                int64_t d[VITC_MAX_RANK];
                const vitc_tensor_info *t = &m->in[s][i];
                for (int j = 0; j < t->rank; j++)
                    d[j] = t->is_batch[j] ? t->dims[j] * b : t->dims[j];
                char one[160];
                fmt_dims(one, sizeof one, d, t->rank);
                k += (size_t)snprintf(want + k, sizeof want - k, "%s%s", s ? " or " : "", one);
            }
            return vt_error(TRITONSERVER_ERROR_INVALID_ARG,
                            "vitc: model '%s': input '%s' has shape %s; at batch %lld the model takes %s", m->name,
                            m->in[0][i].name, got, (long long)b, want);
        }
    }
    for (int i = 0; i < m->ninputs; i++) {
        const vitc_tensor_info *t = &m->in[r->shape][i];
        uint64_t want = elem_size(t->dtype);
        for (int d = 0; d < t->rank; d++)
            want *= (uint64_t)(t->is_batch[d] ? t->dims[d] * b : t->dims[d]);
        if (bytes[i] != want)
            return vt_error(TRITONSERVER_ERROR_INVALID_ARG,
                            "vitc: model '%s': input '%s' holds %llu bytes; its shape takes %llu", m->name, t->name,
                            (unsigned long long)bytes[i], (unsigned long long)want);
        /* its buffers: in host memory, and as many bytes as the shape takes */
        uint64_t sum = 0;
        for (uint32_t k = 0; k < r->nbuf[i]; k++) {
            const void *src = NULL;
            uint64_t nb = 0;
            TRITONSERVER_MemoryType mt = TRITONSERVER_MEMORY_CPU;
            int64_t mid = 0;
            VT_TRY(TRITONBACKEND_InputBuffer(r->in[i], k, &src, &nb, &mt, &mid));
            if (mt == TRITONSERVER_MEMORY_GPU)
                return vt_error(TRITONSERVER_ERROR_UNSUPPORTED, "vitc: model '%s': input '%s' is in GPU memory (CUDA "
                                "shared memory), which the vitc backend does not read", m->name, t->name);
            sum += nb;
        }
        if (sum != want)
            return vt_error(TRITONSERVER_ERROR_INVALID_ARG,
                            "vitc: model '%s': input '%s' holds %llu bytes; its shape takes %llu", m->name, t->name,
                            (unsigned long long)sum, (unsigned long long)want);
    }
    return NULL;
}

/* Bytes of output o (or input, is_input) at shape s for one batch element
 * of a batch-major model, or for the whole tensor at batch b otherwise. */
static uint64_t tensor_bytes(const vt_model *m, int is_input, int s, int i, int64_t b)
{
    const vitc_tensor_info *t = is_input ? &m->in[s][i] : &m->out[s][i];
    uint64_t n = elem_size(t->dtype);
    for (int d = 0; d < t->rank; d++)
        n *= (uint64_t)(t->is_batch[d] ? t->dims[d] * b : t->dims[d]);
    return n;
}

/* The response of r and its output buffers (those the request asks for). */
static TRITONSERVER_Error *make_response(const vt_model *m, vt_req *r)
{
    VT_TRY(TRITONBACKEND_ResponseNew(&r->resp, r->req));
    uint32_t count = 0;
    VT_TRY(TRITONBACKEND_RequestOutputCount(r->req, &count));
    for (uint32_t k = 0; k < count; k++) {
        const char *oname = NULL;
        VT_TRY(TRITONBACKEND_RequestOutputName(r->req, k, &oname));
        int o = -1;
        for (int j = 0; j < m->noutputs; j++)
            if (strcmp(m->out[0][j].name, oname) == 0)
                o = j;
        if (o < 0)
            return vt_error(TRITONSERVER_ERROR_INVALID_ARG, "vitc: model '%s': the request asks for output '%s', "
                            "which the model does not have", m->name, oname);
        if (r->out[o])
            continue;
        const vitc_tensor_info *t = &m->out[r->shape][o];
        int64_t dims[VITC_MAX_RANK];
        for (int d = 0; d < t->rank; d++)
            dims[d] = t->is_batch[d] ? t->dims[d] * r->batch : t->dims[d];
        TRITONBACKEND_Output *out = NULL;
        VT_TRY(TRITONBACKEND_ResponseOutput(r->resp, &out, oname, triton_dtype(t->dtype), dims, (uint32_t)t->rank));
        TRITONSERVER_MemoryType mt = TRITONSERVER_MEMORY_CPU;
        int64_t mid = 0;
        void *buf = NULL;
        VT_TRY(TRITONBACKEND_OutputBuffer(out, &buf, tensor_bytes(m, 0, r->shape, o, r->batch), &mt, &mid));
        if (mt == TRITONSERVER_MEMORY_GPU)
            return vt_error(TRITONSERVER_ERROR_UNSUPPORTED, "vitc: model '%s': output '%s' asked in GPU memory, "
                            "which the vitc backend does not write (use system memory)", m->name, oname);
        r->out[o] = buf;
    }
    return NULL;
}

/* Answers r (with r->err where set), reports its statistics and releases it. */
static void finish(TRITONBACKEND_ModelInstance *ti, vt_req *r, uint64_t exec_start)
{
    if (r->done)
        return;
    if (!r->resp && r->err) {
        TRITONSERVER_Error *e = TRITONBACKEND_ResponseNew(&r->resp, r->req);
        if (e) {
            vt_drop(e, "making an error response");
            r->resp = NULL;
        }
    }
    if (r->resp)
        vt_drop(TRITONBACKEND_ResponseSend(r->resp, TRITONSERVER_RESPONSE_COMPLETE_FINAL, r->err), "sending a response");
    uint64_t end = now_ns();
    vt_drop(TRITONBACKEND_ModelInstanceReportStatistics(ti, r->req, r->err == NULL, exec_start,
                                                        r->compute_start ? r->compute_start : exec_start,
                                                        r->compute_end ? r->compute_end : end, end),
            "reporting statistics");
    vt_drop(TRITONBACKEND_RequestRelease(r->req, TRITONSERVER_REQUEST_RELEASE_ALL), "releasing a request");
    if (r->err)
        TRITONSERVER_ErrorDelete(r->err);
    r->err = NULL;
    r->done = 1;
}

/* Copies input i of r (its buffers, checked by inspect_request) into dst. */
static TRITONSERVER_Error *gather_input(vt_req *r, int i, char *dst)
{
    for (uint32_t k = 0; k < r->nbuf[i]; k++) {
        const void *src = NULL;
        uint64_t n = 0;
        TRITONSERVER_MemoryType mt = TRITONSERVER_MEMORY_CPU;
        int64_t mid = 0;
        VT_TRY(TRITONBACKEND_InputBuffer(r->in[i], k, &src, &n, &mt, &mid));
        memcpy(dst, src, n);
        dst += n;
    }
    return NULL;
}

/* Runs reqs[0..n) (same shape; one batch, n > 1 only for a batch-major model) and answers them. */
static void run_group(TRITONBACKEND_ModelInstance *ti, vt_instance *inst, vt_req **reqs, int n, uint64_t exec_start)
{
    const vt_model *m = inst->model;
    int s = reqs[0]->shape;
    int64_t B = 0;
    for (int k = 0; k < n; k++)
        B += reqs[k]->batch;
    vitc_tensor in[VT_MAX_IO], out[VT_MAX_IO];
    TRITONSERVER_Error *err = NULL;

    /* inputs: a single buffer of a single request is used in place, else gathered */
    for (int i = 0; i < m->ninputs && !err; i++) {
        const vitc_tensor_info *t = &m->in[s][i];
        in[i] = (vitc_tensor){.name = NULL, .dtype = t->dtype, .rank = t->rank};
        for (int d = 0; d < t->rank; d++)
            in[i].dims[d] = t->is_batch[d] ? t->dims[d] * B : t->dims[d];
        if (n == 1 && reqs[0]->nbuf[i] == 1) {
            const void *src = NULL;
            uint64_t nb = 0;
            TRITONSERVER_MemoryType mt = TRITONSERVER_MEMORY_CPU;
            int64_t mid = 0;
            err = TRITONBACKEND_InputBuffer(reqs[0]->in[i], 0, &src, &nb, &mt, &mid);
            in[i].data = (void *)src; /* only read */
            continue;
        }
        char *dst = stage(&inst->in[i], tensor_bytes(m, 1, s, i, B));
        if (!dst) {
            err = vt_error(TRITONSERVER_ERROR_UNAVAILABLE, "vitc: out of memory");
            break;
        }
        in[i].data = dst;
        for (int k = 0; k < n && !err; k++) {
            err = gather_input(reqs[k], i, dst);
            dst += tensor_bytes(m, 1, s, i, reqs[k]->batch);
        }
    }
    /* outputs: written in place for a single request that asked for them, else staged and scattered */
    for (int o = 0; o < m->noutputs && !err; o++) {
        const vitc_tensor_info *t = &m->out[s][o];
        out[o] = (vitc_tensor){.name = NULL, .dtype = t->dtype, .rank = t->rank};
        for (int d = 0; d < t->rank; d++)
            out[o].dims[d] = t->is_batch[d] ? t->dims[d] * B : t->dims[d];
        if (n == 1 && reqs[0]->out[o]) {
            out[o].data = reqs[0]->out[o];
        } else if (!(out[o].data = stage(&inst->out[o], tensor_bytes(m, 0, s, o, B)))) {
            err = vt_error(TRITONSERVER_ERROR_UNAVAILABLE, "vitc: out of memory");
        }
    }
    uint64_t c0 = now_ns(), c1 = c0;
    if (!err) {
        vitc_status st = vitc_run(inst->ctx, in, m->ninputs, out, m->noutputs);
        c1 = now_ns();
        if (st != VITC_STATUS_OK)
            err = vt_error(code_of(st), "vitc: model '%s': %s", m->name, vitc_last_error());
    }
    for (int o = 0; o < m->noutputs && !err; o++) {
        if (n == 1 && reqs[0]->out[o])
            continue;
        const char *src = out[o].data;
        for (int k = 0; k < n; k++) {
            uint64_t bytes = tensor_bytes(m, 0, s, o, reqs[k]->batch);
            if (reqs[k]->out[o])
                memcpy(reqs[k]->out[o], src, bytes);
            src += bytes;
        }
    }
    if (!err)
        vt_drop(TRITONBACKEND_ModelInstanceReportBatchStatistics(ti, (uint64_t)B, exec_start, c0, c1, now_ns()),
                "reporting batch statistics");
    for (int k = 0; k < n; k++) {
        reqs[k]->compute_start = c0;
        reqs[k]->compute_end = c1;
        if (err && !reqs[k]->err)
            reqs[k]->err = TRITONSERVER_ErrorNew(TRITONSERVER_ErrorCode(err), TRITONSERVER_ErrorMessage(err));
        finish(ti, reqs[k], exec_start);
    }
    if (err) {
        VT_VERBOSE("vitc: %s", TRITONSERVER_ErrorMessage(err));
        TRITONSERVER_ErrorDelete(err);
    }
}

TRITONSERVER_Error *TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance *ti,
                                                       TRITONBACKEND_Request **requests, uint32_t request_count)
{
    uint64_t exec_start = now_ns();
    void *state = NULL;
    TRITONSERVER_Error *err = TRITONBACKEND_ModelInstanceState(ti, &state);
    vt_instance *inst = state;
    if (err || !inst) {
        /* the requests stay the server's: it answers them with this error */
        return err ? err : vt_error(TRITONSERVER_ERROR_INTERNAL, "vitc: an instance without state");
    }
    const vt_model *m = inst->model;
    vt_req *rs = calloc(request_count ? request_count : 1, sizeof *rs);
    vt_req **group = calloc(request_count ? request_count : 1, sizeof *group);
    if (!rs || !group) {
        free(rs);
        free(group);
        return vt_error(TRITONSERVER_ERROR_UNAVAILABLE, "vitc: out of memory");
    }
    /* from here on every request is answered and released here */
    for (uint32_t k = 0; k < request_count; k++) {
        vt_req *r = &rs[k];
        r->req = requests[k];
        r->err = inspect_request(m, r);
        if (!r->err)
            r->err = make_response(m, r);
        if (r->err) {
            VT_VERBOSE("vitc: %s", TRITONSERVER_ErrorMessage(r->err));
            finish(ti, r, exec_start);
        }
    }
    /* requests of one shape run together, up to the model's largest batch */
    for (uint32_t k = 0; k < request_count; k++) {
        if (rs[k].done)
            continue;
        int n = 0;
        int64_t total = 0;
        for (uint32_t j = k; j < request_count; j++) {
            vt_req *r = &rs[j];
            if (r->done || r->shape != rs[k].shape || (n > 0 && !(m->batch_major && m->max_batch_size > 0)) ||
                total + r->batch > m->max_batch)
                continue;
            group[n++] = r;
            total += r->batch;
        }
        run_group(ti, inst, group, n, exec_start);
    }
    free(group);
    free(rs);
    return NULL;
}
