/* test_triton_backend.c: the Triton backend (libtriton_vitc.so, env
 * VITC_TRITON_BACKEND) driven by a server made here: this program defines
 * the TRITONSERVER_* and TRITONBACKEND_* functions the backend calls (it is
 * linked with its symbols exported, so the backend, opened with dlopen,
 * binds them), with requests, inputs, responses and statistics it can look
 * into.  It needs no Triton, and runs in the sanitizer build, where the
 * real server cannot load the backend (test_triton is that test).
 *
 *   - the backend API version checked; the preferred instance group is KIND_CPU
 *   - a configuration completed from the .so (max_batch_size, tensors,
 *     dynamic batching), or checked against it: each mismatch refused with
 *     its message
 *   - execution: several requests run as one batch (an input in two
 *     buffers), outputs against the model run directly through the runtime;
 *     a call above the largest batch split; bad requests (dtype, missing
 *     input, byte size, GPU memory, an unknown output, a batch above the
 *     limit, a response that cannot be made, an output buffer in GPU memory)
 *     each answered with its error while the good ones run; every request
 *     released once, with its statistics
 *   - a model whose export fixed its batch
 *   - a model.so renamed over while the old one is loaded serves the new
 *     model; one rewritten in place is refused
 *   - a CUDA model: refused in KIND_CPU and on another GPU than the
 *     runtime's; run where a GPU is usable, else its instance refused with
 *     the runtime's reason */
#include "testutil.h"

#include "triton/triton_api.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <time.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <vitc/runtime.h>

/* ---- the server's objects ---- */

struct TRITONSERVER_Error {
    TRITONSERVER_Error_Code code;
    char *msg;
};
struct TRITONSERVER_Message {
    char *json;
};
struct TRITONBACKEND_Backend {
    int unused;
};
struct TRITONBACKEND_BackendAttribute {
    TRITONSERVER_InstanceGroupKind kinds[4];
    int n;
};
struct TRITONBACKEND_Model {
    const char *name;
    uint64_t version;
    const char *repo;
    char *base; /* the configuration but for what the backend may set */
    char *io;   /* max_batch_size, input, output (and dynamic_batching): what TRITONBACKEND_ModelSetConfig replaces */
    bool autocomplete;
    int set_config_calls;
    void *state;
};
struct TRITONBACKEND_ModelInstance {
    const char *name;
    TRITONSERVER_InstanceGroupKind kind;
    int32_t device;
    TRITONBACKEND_Model *model;
    void *state;
    int batches[16], nbatches;
};
struct TRITONBACKEND_Input {
    const char *name;
    TRITONSERVER_DataType dtype;
    int64_t shape[VITC_MAX_RANK];
    uint32_t rank;
    const void *buf[2];
    uint64_t size[2];
    uint32_t nbuf;
    TRITONSERVER_MemoryType mem;
};
struct TRITONBACKEND_Output {
    struct TRITONBACKEND_Request *req;
    char name[64];
    TRITONSERVER_DataType dtype;
    int64_t shape[VITC_MAX_RANK];
    uint32_t rank;
    void *buf;
    uint64_t bytes;
};
struct TRITONBACKEND_Response {
    TRITONBACKEND_Output out[4];
    int nout;
};
struct TRITONBACKEND_Request {
    struct TRITONBACKEND_Input in[4];
    int nin;
    const char *outs[4];
    int nouts;
    int fail_response_new, gpu_output; /* what the server does wrong for this request */
    struct TRITONBACKEND_Response resp;
    int responses, sent, released, stats, stats_ok;
    TRITONSERVER_Error_Code err_code;
    char err[1024];
};

static uint32_t api_major = 1, api_minor = 19;
static char last_log[4096];
static int log_count;

/* ---- the API the backend calls ---- */

TRITONSERVER_Error *TRITONSERVER_ErrorNew(TRITONSERVER_Error_Code code, const char *msg)
{
    TRITONSERVER_Error *e = calloc(1, sizeof *e);
    e->code = code;
    e->msg = strdup(msg ? msg : "");
    return e;
}
void TRITONSERVER_ErrorDelete(TRITONSERVER_Error *e)
{
    if (e) {
        free(e->msg);
        free(e);
    }
}
TRITONSERVER_Error_Code TRITONSERVER_ErrorCode(TRITONSERVER_Error *e)
{
    return e->code;
}
const char *TRITONSERVER_ErrorMessage(TRITONSERVER_Error *e)
{
    return e->msg;
}
TRITONSERVER_Error *TRITONSERVER_MessageNewFromSerializedJson(TRITONSERVER_Message **m, const char *base, size_t n)
{
    *m = calloc(1, sizeof **m);
    (*m)->json = strndup(base, n);
    return NULL;
}
TRITONSERVER_Error *TRITONSERVER_MessageDelete(TRITONSERVER_Message *m)
{
    free(m->json);
    free(m);
    return NULL;
}
TRITONSERVER_Error *TRITONSERVER_MessageSerializeToJson(TRITONSERVER_Message *m, const char **base, size_t *n)
{
    *base = m->json;
    *n = strlen(m->json);
    return NULL;
}
bool TRITONSERVER_LogIsEnabled(TRITONSERVER_LogLevel level)
{
    (void)level;
    return true;
}
TRITONSERVER_Error *TRITONSERVER_LogMessage(TRITONSERVER_LogLevel level, const char *file, int line, const char *msg)
{
    (void)level, (void)file, (void)line;
    snprintf(last_log, sizeof last_log, "%s", msg);
    log_count++;
    if (getenv("VITC_TEST_VERBOSE"))
        printf("  [backend] %s\n", msg);
    return NULL;
}

TRITONSERVER_Error *TRITONBACKEND_ApiVersion(uint32_t *major, uint32_t *minor)
{
    *major = api_major;
    *minor = api_minor;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_BackendName(TRITONBACKEND_Backend *b, const char **name)
{
    (void)b;
    *name = "vitc";
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_BackendAttributeAddPreferredInstanceGroup(TRITONBACKEND_BackendAttribute *a,
                                                                            TRITONSERVER_InstanceGroupKind kind,
                                                                            uint64_t count, const uint64_t *ids,
                                                                            uint64_t nids)
{
    (void)count, (void)ids, (void)nids;
    if (a->n < 4)
        a->kinds[a->n++] = kind;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ModelName(TRITONBACKEND_Model *m, const char **name)
{
    *name = m->name;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ModelVersion(TRITONBACKEND_Model *m, uint64_t *version)
{
    *version = m->version;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ModelRepository(TRITONBACKEND_Model *m, TRITONBACKEND_ArtifactType *type,
                                                  const char **location)
{
    *type = TRITONBACKEND_ARTIFACT_FILESYSTEM;
    *location = m->repo;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ModelConfig(TRITONBACKEND_Model *m, uint32_t version, TRITONSERVER_Message **out)
{
    assert_int_equal(version, 1);
    size_t n = strlen(m->base) + strlen(m->io) + 8;
    char *text = malloc(n);
    snprintf(text, n, "{%s,%s}", m->base, m->io);
    TRITONSERVER_Error *e = TRITONSERVER_MessageNewFromSerializedJson(out, text, strlen(text));
    free(text);
    return e;
}
TRITONSERVER_Error *TRITONBACKEND_ModelAutoCompleteConfig(TRITONBACKEND_Model *m, bool *ac)
{
    *ac = m->autocomplete;
    return NULL;
}
/* As the server: the fields it takes replace the model's (the message is one object, written without the braces). */
TRITONSERVER_Error *TRITONBACKEND_ModelSetConfig(TRITONBACKEND_Model *m, uint32_t version, TRITONSERVER_Message *msg)
{
    assert_int_equal(version, 1);
    m->set_config_calls++;
    size_t n = strlen(msg->json);
    assert_true(n >= 2 && msg->json[0] == '{' && msg->json[n - 1] == '}');
    free(m->io);
    m->io = strndup(msg->json + 1, n - 2);
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ModelState(TRITONBACKEND_Model *m, void **state)
{
    *state = m->state;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ModelSetState(TRITONBACKEND_Model *m, void *state)
{
    m->state = state;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceName(TRITONBACKEND_ModelInstance *i, const char **name)
{
    *name = i->name;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceKind(TRITONBACKEND_ModelInstance *i, TRITONSERVER_InstanceGroupKind *k)
{
    *k = i->kind;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceDeviceId(TRITONBACKEND_ModelInstance *i, int32_t *device)
{
    *device = i->device;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceModel(TRITONBACKEND_ModelInstance *i, TRITONBACKEND_Model **m)
{
    *m = i->model;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceState(TRITONBACKEND_ModelInstance *i, void **state)
{
    *state = i->state;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceSetState(TRITONBACKEND_ModelInstance *i, void *state)
{
    i->state = state;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceReportStatistics(TRITONBACKEND_ModelInstance *i,
                                                                TRITONBACKEND_Request *r, bool success, uint64_t t0,
                                                                uint64_t t1, uint64_t t2, uint64_t t3)
{
    (void)i;
    assert_int_equal(r->released, 0); /* before the request is released */
    if (success)
        assert_true(t0 > 0 && t0 <= t1 && t1 <= t2 && t2 <= t3);
    r->stats++;
    r->stats_ok += success;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceReportBatchStatistics(TRITONBACKEND_ModelInstance *i, uint64_t batch,
                                                                     uint64_t t0, uint64_t t1, uint64_t t2,
                                                                     uint64_t t3)
{
    assert_true(t0 > 0 && t0 <= t1 && t1 <= t2 && t2 <= t3);
    if (i->nbatches < 16)
        i->batches[i->nbatches++] = (int)batch;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_RequestId(TRITONBACKEND_Request *r, const char **id)
{
    (void)r;
    *id = "";
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_RequestInputCount(TRITONBACKEND_Request *r, uint32_t *n)
{
    assert_int_equal(r->released, 0);
    *n = (uint32_t)r->nin;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_RequestInput(TRITONBACKEND_Request *r, const char *name, TRITONBACKEND_Input **in)
{
    for (int k = 0; k < r->nin; k++)
        if (strcmp(r->in[k].name, name) == 0) {
            *in = &r->in[k];
            return NULL;
        }
    return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INVALID_ARG, "no such input");
}
TRITONSERVER_Error *TRITONBACKEND_RequestInputByIndex(TRITONBACKEND_Request *r, uint32_t k, TRITONBACKEND_Input **in)
{
    *in = &r->in[k];
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_RequestOutputCount(TRITONBACKEND_Request *r, uint32_t *n)
{
    *n = (uint32_t)r->nouts;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_RequestOutputName(TRITONBACKEND_Request *r, uint32_t k, const char **name)
{
    *name = r->outs[k];
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_RequestRelease(TRITONBACKEND_Request *r, uint32_t flags)
{
    assert_int_equal(flags, TRITONSERVER_REQUEST_RELEASE_ALL);
    r->released++;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_InputProperties(TRITONBACKEND_Input *in, const char **name,
                                                  TRITONSERVER_DataType *dtype, const int64_t **shape,
                                                  uint32_t *rank, uint64_t *bytes, uint32_t *nbuf)
{
    if (name)
        *name = in->name;
    if (dtype)
        *dtype = in->dtype;
    if (shape)
        *shape = in->shape;
    if (rank)
        *rank = in->rank;
    if (bytes)
        *bytes = in->size[0] + (in->nbuf > 1 ? in->size[1] : 0);
    if (nbuf)
        *nbuf = in->nbuf;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_InputBuffer(TRITONBACKEND_Input *in, uint32_t k, const void **buf, uint64_t *n,
                                              TRITONSERVER_MemoryType *mem, int64_t *mem_id)
{
    assert_true(k < in->nbuf);
    *buf = in->buf[k];
    *n = in->size[k];
    *mem = in->mem;
    *mem_id = 0;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ResponseNew(TRITONBACKEND_Response **resp, TRITONBACKEND_Request *r)
{
    assert_int_equal(r->released, 0);
    if (r->fail_response_new)
        return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, "the server could not make a response");
    r->responses++;
    *resp = &r->resp;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ResponseDelete(TRITONBACKEND_Response *resp)
{
    (void)resp;
    fail_msg("the backend deletes a response instead of sending it");
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ResponseOutput(TRITONBACKEND_Response *resp, TRITONBACKEND_Output **out,
                                                 const char *name, TRITONSERVER_DataType dtype,
                                                 const int64_t *shape, uint32_t rank)
{
    assert_true(resp->nout < 4);
    TRITONBACKEND_Output *o = &resp->out[resp->nout++];
    o->req = (TRITONBACKEND_Request *)((char *)resp - offsetof(TRITONBACKEND_Request, resp));
    snprintf(o->name, sizeof o->name, "%s", name);
    o->dtype = dtype;
    o->rank = rank;
    memcpy(o->shape, shape, rank * sizeof *shape);
    *out = o;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_OutputBuffer(TRITONBACKEND_Output *o, void **buf, uint64_t bytes,
                                               TRITONSERVER_MemoryType *mem, int64_t *mem_id)
{
    o->buf = malloc(bytes ? bytes : 1);
    memset(o->buf, 0xff, bytes); /* NaN floats: what the backend leaves unwritten shows */
    o->bytes = bytes;
    *buf = o->buf;
    *mem = o->req->gpu_output ? TRITONSERVER_MEMORY_GPU : TRITONSERVER_MEMORY_CPU; /* as for CUDA shared memory */
    *mem_id = 0;
    return NULL;
}
TRITONSERVER_Error *TRITONBACKEND_ResponseSend(TRITONBACKEND_Response *resp, uint32_t flags, TRITONSERVER_Error *err)
{
    TRITONBACKEND_Request *r = (TRITONBACKEND_Request *)((char *)resp - offsetof(TRITONBACKEND_Request, resp));
    assert_int_equal(flags, TRITONSERVER_RESPONSE_COMPLETE_FINAL);
    assert_int_equal(r->released, 0);
    r->sent++;
    if (err) {
        r->err_code = err->code;
        snprintf(r->err, sizeof r->err, "%s", err->msg);
    }
    return NULL;
}

/* ---- the backend ---- */

typedef TRITONSERVER_Error *(*fn_backend)(TRITONBACKEND_Backend *);
typedef TRITONSERVER_Error *(*fn_attr)(TRITONBACKEND_Backend *, TRITONBACKEND_BackendAttribute *);
typedef TRITONSERVER_Error *(*fn_model)(TRITONBACKEND_Model *);
typedef TRITONSERVER_Error *(*fn_instance)(TRITONBACKEND_ModelInstance *);
typedef TRITONSERVER_Error *(*fn_execute)(TRITONBACKEND_ModelInstance *, TRITONBACKEND_Request **, uint32_t);

static struct {
    void *lib;
    fn_backend init, fini;
    fn_attr attr;
    fn_model model_init, model_fini;
    fn_instance inst_init, inst_fini;
    fn_execute execute;
    char dir[4096];
    char timm[4200], tv[4200], fixed[4200], cuda[4200];
    int have_cuda;
} B;

static int setup(void **state)
{
    const char *path = getenv("VITC_TRITON_BACKEND");
    if (!path || !*path) {
        printf("test_triton_backend: VITC_TRITON_BACKEND is not set (a build without the backend, -DVITC_TRITON=OFF)\n");
        return 0;
    }
    B.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!B.lib) {
        printf("cannot load %s: %s\n", path, dlerror());
        return -1;
    }
    B.init = (fn_backend)dlsym(B.lib, "TRITONBACKEND_Initialize");
    B.fini = (fn_backend)dlsym(B.lib, "TRITONBACKEND_Finalize");
    B.attr = (fn_attr)dlsym(B.lib, "TRITONBACKEND_GetBackendAttribute");
    B.model_init = (fn_model)dlsym(B.lib, "TRITONBACKEND_ModelInitialize");
    B.model_fini = (fn_model)dlsym(B.lib, "TRITONBACKEND_ModelFinalize");
    B.inst_init = (fn_instance)dlsym(B.lib, "TRITONBACKEND_ModelInstanceInitialize");
    B.inst_fini = (fn_instance)dlsym(B.lib, "TRITONBACKEND_ModelInstanceFinalize");
    B.execute = (fn_execute)dlsym(B.lib, "TRITONBACKEND_ModelInstanceExecute");
    if (!B.init || !B.fini || !B.attr || !B.model_init || !B.model_fini || !B.inst_init || !B.inst_fini || !B.execute) {
        printf("%s lacks an entry point\n", path);
        return -1;
    }
    if (!tu_tmpdir(B.dir, sizeof B.dir))
        return -1;
    char src[4096], onnx[4096];
    struct {
        const char *onnx;
        char *out;
        const char *target;
    } compiles[] = {{"tests/models/timm-ts17.onnx", B.timm, "cpu"},
                    {"tests/models/torchvision-ts17.onnx", B.tv, "cpu"},
                    {"tests/data/fixed-batch-1.onnx", B.fixed, "cpu"},
                    {"tests/models/timm-ts17.onnx", B.cuda, "cuda"}};
    for (size_t k = 0; k < sizeof compiles / sizeof compiles[0]; k++) {
        snprintf(compiles[k].out, 4200, "%s/m%zu.so", B.dir, k);
        tu_path(onnx, sizeof onnx, compiles[k].onnx);
        snprintf(src, sizeof src, "--target=%s", compiles[k].target);
        const char *args[] = {onnx, "-o", compiles[k].out, "--batch", "8", src, "--quiet", NULL};
        char *out = NULL, *err = NULL;
        int rc = tu_run_vitc(args, &out, &err);
        if (rc != 0 && k < 3) {
            printf("vitc %s failed (%d): %s\n", onnx, rc, err ? err : "");
            return -1;
        }
        if (k == 3) {
            B.have_cuda = rc == 0;
            if (rc != 0)
                printf("no CUDA model (vitc --target cuda exited %d: %s)\n", rc, err ? err : "");
        }
        free(out);
        free(err);
    }
    *state = B.dir;
    return 0;
}

static int teardown(void **state)
{
    if (B.lib)
        dlclose(B.lib);
    return B.dir[0] ? tu_teardown_tmpdir(state) : 0;
}

#define NEED_BACKEND()                                                                                                 \
    do {                                                                                                               \
        if (!B.lib)                                                                                                    \
            tu_skip();                                                                                                 \
    } while (0)

/* Drops an error the backend returned, giving its message (NULL: success). */
static char *take(TRITONSERVER_Error *e, TRITONSERVER_Error_Code *code)
{
    if (!e)
        return NULL;
    if (code)
        *code = e->code;
    char *m = strdup(e->msg);
    TRITONSERVER_ErrorDelete(e);
    return m;
}

static void expect_ok(TRITONSERVER_Error *e, const char *what)
{
    char *m = take(e, NULL);
    if (m)
        fail_msg("%s: %s", what, m);
}

static void expect_error(TRITONSERVER_Error *e, const char *want, const char *what)
{
    char *m = take(e, NULL);
    if (!m)
        fail_msg("%s: no error (wanted one with \"%s\")", what, want);
    if (!strstr(m, want))
        fail_msg("%s: \"%s\" lacks \"%s\"", what, m, want);
    printf("  %s: %s\n", what, m);
    free(m);
}

/* A repository REPO/NAME/VERSION/model.so holding a copy of so (a link where link is set). */
static const char *repo_with(const char *name, uint64_t version, const char *so)
{
    static char repo[4200];
    char p[4400];
    snprintf(repo, sizeof repo, "%s/repo/%s", B.dir, name);
    snprintf(p, sizeof p, "%s/repo", B.dir);
    mkdir(p, 0755);
    mkdir(repo, 0755);
    snprintf(p, sizeof p, "%s/%llu", repo, (unsigned long long)version);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/%llu/model.so", repo, (unsigned long long)version);
    char tmp[4500];
    snprintf(tmp, sizeof tmp, "%s.tmp", p);
    size_t n = 0;
    char *data = tu_read_file(so, &n);
    assert_non_null(data);
    FILE *f = fopen(tmp, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
    free(data);
    assert_int_equal(rename(tmp, p), 0); /* a new file, as mv does */
    return repo;
}

static TRITONBACKEND_Model model_of(const char *name, const char *repo, const char *base, const char *io, bool ac)
{
    TRITONBACKEND_Model m = {.name = name, .version = 1, .repo = repo, .autocomplete = ac};
    m.base = strdup(base);
    m.io = strdup(io);
    return m;
}

static void model_drop(TRITONBACKEND_Model *m)
{
    if (m->state)
        expect_ok(B.model_fini(m), "TRITONBACKEND_ModelFinalize");
    free(m->base);
    free(m->io);
}

#define CPU_GROUP "\"instance_group\":[{\"name\":\"g\",\"kind\":\"KIND_CPU\",\"count\":1,\"gpus\":[]}]"
#define BASE(name) "\"name\":\"" name "\",\"backend\":\"vitc\",\"default_model_filename\":\"\",\"parameters\":{}," CPU_GROUP
#define TIMM_IO                                                                                                        \
    "\"max_batch_size\":8,\"input\":[{\"name\":\"input\",\"data_type\":\"TYPE_FP32\",\"dims\":[3,32,32]}],"          \
    "\"output\":[{\"name\":\"output\",\"data_type\":\"TYPE_FP32\",\"dims\":[10]}],\"dynamic_batching\":{}"
#define EMPTY_IO "\"max_batch_size\":0,\"input\":[],\"output\":[]"

static void test_api_version(void **state)
{
    (void)state;
    NEED_BACKEND();
    TRITONBACKEND_Backend be = {0};
    api_major = 1, api_minor = 19;
    expect_ok(B.init(&be), "TRITONBACKEND_Initialize on API 1.19");
    assert_non_null(strstr(last_log, "backend API 1.19"));
    api_minor = 9;
    expect_error(B.init(&be), "needs 1.x with x >= 10", "API 1.9");
    api_major = 2, api_minor = 0;
    expect_error(B.init(&be), "this server's backend API is 2.0", "API 2.0");
    api_major = 1, api_minor = 19;
    TRITONBACKEND_BackendAttribute attr = {0};
    expect_ok(B.attr(&be, &attr), "TRITONBACKEND_GetBackendAttribute");
    assert_int_equal(attr.n, 1);
    assert_int_equal(attr.kinds[0], TRITONSERVER_INSTANCEGROUPKIND_CPU);
    expect_ok(B.fini(&be), "TRITONBACKEND_Finalize");
}

static void test_config_completed(void **state)
{
    (void)state;
    NEED_BACKEND();
    const char *repo = repo_with("ac", 1, B.timm);
    TRITONBACKEND_Model m = model_of("ac", repo, BASE("ac"), EMPTY_IO, true);
    expect_ok(B.model_init(&m), "a config of backend \"vitc\" alone, completed");
    assert_int_equal(m.set_config_calls, 1);
    printf("  completed: %s\n", m.io);
    assert_non_null(strstr(m.io, "\"max_batch_size\":8"));
    assert_non_null(strstr(m.io, "{\"name\":\"input\",\"data_type\":\"TYPE_FP32\",\"dims\":[3,32,32]}"));
    assert_non_null(strstr(m.io, "{\"name\":\"output\",\"data_type\":\"TYPE_FP32\",\"dims\":[10]}"));
    assert_non_null(strstr(m.io, "\"dynamic_batching\":{}"));
    model_drop(&m);

    /* a full config: nothing to change */
    m = model_of("full", repo, BASE("full"), TIMM_IO, true);
    expect_ok(B.model_init(&m), "a full config");
    assert_int_equal(m.set_config_calls, 0);
    model_drop(&m);

    /* a given input kept as written, the missing output added */
    m = model_of("part", repo, BASE("part"),
                 "\"max_batch_size\":4,\"input\":[{\"name\":\"input\",\"data_type\":\"TYPE_FP32\",\"dims\":[3,-1,32]}],"
                 "\"output\":[]",
                 true);
    expect_ok(B.model_init(&m), "a config with the input alone");
    assert_non_null(strstr(m.io, "\"max_batch_size\":4"));
    assert_non_null(strstr(m.io, "\"dims\":[3,-1,32]"));
    assert_non_null(strstr(m.io, "\"dims\":[10]"));
    model_drop(&m);

    /* the fixed-batch export: max_batch_size 0, dims with the batch, no batcher */
    repo = repo_with("fixed", 1, B.fixed);
    m = model_of("fixed", repo, BASE("fixed"), EMPTY_IO, true);
    expect_ok(B.model_init(&m), "a fixed-batch model, completed");
    printf("  completed: %s\n", m.io);
    assert_non_null(strstr(m.io, "\"max_batch_size\":0"));
    assert_non_null(strstr(m.io, "\"dims\":[1,4,6]"));
    assert_null(strstr(m.io, "dynamic_batching"));
    model_drop(&m);

    /* without auto-completion the empty config is refused */
    repo = repo_with("strict", 1, B.timm);
    m = model_of("strict", repo, BASE("strict"), EMPTY_IO, false);
    expect_error(B.model_init(&m), "config.pbtxt does not list input 'input', which the model takes", "strict, empty");
    model_drop(&m);
}

static void test_config_refused(void **state)
{
    (void)state;
    NEED_BACKEND();
    const char *repo = repo_with("bad", 1, B.timm);
    static const struct {
        const char *base, *io, *want;
        bool ac;
    } cases[] = {
        {BASE("bad"),
         "\"max_batch_size\":8,\"input\":[{\"name\":\"input\",\"data_type\":\"TYPE_FP32\",\"dims\":[3,32,31]}],"
         "\"output\":[]",
         "gives input 'input' dims [3,32,31]; the model has [3,32,32]", true},
        {BASE("bad"),
         "\"max_batch_size\":0,\"input\":[{\"name\":\"input\",\"data_type\":\"TYPE_FP32\",\"dims\":[3,32,32]}],"
         "\"output\":[]",
         "the model has [-1,3,32,32] with max_batch_size 0, which includes the batch", true},
        {BASE("bad"),
         "\"max_batch_size\":8,\"input\":[{\"name\":\"input\",\"data_type\":\"TYPE_INT64\",\"dims\":[3,32,32]}],"
         "\"output\":[]",
         "gives input 'input' data_type TYPE_INT64; the model takes TYPE_FP32", true},
        {BASE("bad"),
         "\"max_batch_size\":8,\"input\":[{\"name\":\"pixels\",\"data_type\":\"TYPE_FP32\",\"dims\":[3,32,32]}],"
         "\"output\":[]",
         "lists input 'pixels', which", true},
        {BASE("bad"),
         "\"max_batch_size\":8,\"input\":[{\"name\":\"input\",\"data_type\":\"TYPE_FP32\",\"dims\":[3,32,32]}],"
         "\"output\":[{\"name\":\"probs\",\"data_type\":\"TYPE_FP32\",\"dims\":[10]}]",
         "lists output 'probs', which", false},
        {BASE("bad"), "\"max_batch_size\":16,\"input\":[],\"output\":[]", "runs batches up to 8", true},
        {BASE("bad"), "\"max_batch_size\":-1,\"input\":[],\"output\":[]", "max_batch_size -1", true},
        {BASE("bad"),
         "\"max_batch_size\":8,\"input\":[{\"name\":\"input\",\"data_type\":\"TYPE_FP32\",\"dims\":[3,32,32]}],"
         "\"output\":[{\"name\":\"output\",\"data_type\":\"TYPE_FP32\",\"dims\":[10],"
         "\"reshape\":{\"shape\":[2,5]}}]",
         "has a reshape", true},
        {"\"name\":\"bad\",\"backend\":\"vitc\",\"parameters\":{\"threads\":{\"string_value\":\"lots\"}}," CPU_GROUP,
         EMPTY_IO, "parameter threads is 'lots'", true},
        {"\"name\":\"bad\",\"backend\":\"vitc\",\"parameters\":{},"
         "\"instance_group\":[{\"name\":\"g\",\"kind\":\"KIND_GPU\",\"count\":1,\"gpus\":[0]}]",
         EMPTY_IO, "instance group 'g' is KIND_GPU, but", true},
        {"\"name\":\"bad\",\"backend\":\"vitc\",\"default_model_filename\":\"nothere.so\",\"parameters\":{}," CPU_GROUP,
         EMPTY_IO, "cannot open the model file", true},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        TRITONBACKEND_Model m = model_of("bad", repo, cases[k].base, cases[k].io, cases[k].ac);
        char what[64];
        snprintf(what, sizeof what, "refused config %zu", k);
        expect_error(B.model_init(&m), cases[k].want, what);
        assert_null(m.state);
        model_drop(&m);
    }
    /* not a vitc model */
    char notso[4400];
    snprintf(notso, sizeof notso, "%s/notvitc.so", B.dir);
    FILE *f = fopen(notso, "w");
    fputs("not a model\n", f);
    fclose(f);
    repo = repo_with("notvitc", 1, notso);
    TRITONBACKEND_Model m = model_of("notvitc", repo, BASE("notvitc"), EMPTY_IO, true);
    expect_error(B.model_init(&m), "not an ELF file", "not a vitc model");
    model_drop(&m);
    /* a fixed-batch model cannot be batched by Triton */
    repo = repo_with("fixedbad", 1, B.fixed);
    m = model_of("fixedbad", repo, BASE("fixedbad"), "\"max_batch_size\":4,\"input\":[],\"output\":[]", true);
    expect_error(B.model_init(&m), "runs batch 1 only", "fixed batch with max_batch_size 4");
    model_drop(&m);
}

/* ---- execution ---- */

static float *random_input(int64_t batch)
{
    float *x = malloc((size_t)batch * 3 * 32 * 32 * sizeof *x);
    for (int64_t k = 0; k < batch * 3 * 32 * 32; k++)
        x[k] = tu_rnd();
    return x;
}

/* A request of batch b for the timm model: its input (in two buffers where split), asking for "output". */
static void timm_request(TRITONBACKEND_Request *r, const float *x, int64_t b, int split)
{
    memset(r, 0, sizeof *r);
    struct TRITONBACKEND_Input *in = &r->in[0];
    in->name = "input";
    in->dtype = TRITONSERVER_TYPE_FP32;
    in->rank = 4;
    in->shape[0] = b, in->shape[1] = 3, in->shape[2] = 32, in->shape[3] = 32;
    uint64_t bytes = (uint64_t)b * 3 * 32 * 32 * 4;
    in->buf[0] = x;
    in->size[0] = split ? bytes / 3 : bytes;
    in->nbuf = split ? 2 : 1;
    if (split) {
        in->buf[1] = (const char *)x + bytes / 3;
        in->size[1] = bytes - bytes / 3;
    }
    in->mem = TRITONSERVER_MEMORY_CPU;
    r->nin = 1;
    r->outs[0] = "output";
    r->nouts = 1;
}

static void request_free(TRITONBACKEND_Request *r)
{
    for (int k = 0; k < r->resp.nout; k++)
        free(r->resp.out[k].buf);
}

/* The reference: so run directly at batch b through this program's runtime. */
static void reference(const char *so, const float *x, int64_t b, float *y)
{
    vitc_model *vm = NULL;
    vitc_context *c = NULL;
    assert_int_equal(vitc_model_load(so, &vm), VITC_STATUS_OK);
    assert_int_equal(vitc_context_create(vm, 1, &c), VITC_STATUS_OK);
    vitc_tensor in = {.dtype = VITC_DTYPE_F32, .rank = 4, .dims = {b, 3, 32, 32}, .data = (void *)x};
    vitc_tensor out = {.dtype = VITC_DTYPE_F32, .rank = 2, .dims = {b, 10}, .data = y};
    assert_int_equal(vitc_run(c, &in, 1, &out, 1), VITC_STATUS_OK);
    vitc_context_free(c);
    vitc_model_free(vm);
}

/* The response of r: sent once, no error, output [b,10] within bar of so's output at batch b. */
static void expect_answer(const TRITONBACKEND_Request *r, const char *so, const float *x, int64_t b, double bar,
                          const char *what)
{
    if (r->err[0])
        fail_msg("%s: answered with an error: %s", what, r->err);
    assert_int_equal(r->sent, 1);
    assert_int_equal(r->released, 1);
    assert_int_equal(r->stats, 1);
    assert_int_equal(r->stats_ok, 1);
    assert_int_equal(r->resp.nout, 1);
    const TRITONBACKEND_Output *o = &r->resp.out[0];
    assert_string_equal(o->name, "output");
    assert_int_equal(o->dtype, TRITONSERVER_TYPE_FP32);
    assert_int_equal(o->rank, 2);
    assert_int_equal(o->shape[0], b);
    assert_int_equal(o->shape[1], 10);
    assert_int_equal(o->bytes, (uint64_t)b * 10 * 4);
    float *ref = malloc((size_t)b * 10 * sizeof *ref);
    reference(so, x, b, ref);
    const float *y = o->buf;
    double worst = 0, top = 0;
    for (int64_t k = 0; k < b * 10; k++) {
        if (!isfinite(y[k]))
            fail_msg("%s: output %lld is %f", what, (long long)k, (double)y[k]);
        worst = fmax(worst, fabs((double)y[k] - ref[k]));
        top = fmax(top, fabs((double)ref[k]));
    }
    free(ref);
    printf("  %s: max rel diff %.1e\n", what, worst / top);
    if (worst > bar * top)
        fail_msg("%s: %.3g beyond %.1e of max |ref| %.3g", what, worst, bar, top);
}

/* The error r was answered with: released once, statistics of a failure. */
static void expect_refused(const TRITONBACKEND_Request *r, TRITONSERVER_Error_Code code, const char *want,
                           const char *what)
{
    assert_int_equal(r->released, 1);
    assert_int_equal(r->stats, 1);
    assert_int_equal(r->stats_ok, 0);
    if (!r->fail_response_new) {
        assert_int_equal(r->sent, 1);
        if (!strstr(r->err, want))
            fail_msg("%s: error \"%s\" lacks \"%s\"", what, r->err, want);
        assert_int_equal(r->err_code, code);
        printf("  %s: %s\n", what, r->err);
    } else {
        assert_int_equal(r->sent, 0);
    }
}

static void load_instance(TRITONBACKEND_Model *m, TRITONBACKEND_ModelInstance *inst, const char *repo)
{
    *m = model_of("timm", repo, "\"name\":\"timm\",\"backend\":\"vitc\",\"parameters\":{\"threads\":"
                                "{\"string_value\":\"1\"}}," CPU_GROUP,
                  TIMM_IO, false);
    expect_ok(B.model_init(m), "the timm model");
    *inst = (TRITONBACKEND_ModelInstance){.name = "timm_0", .kind = TRITONSERVER_INSTANCEGROUPKIND_CPU, .model = m};
    expect_ok(B.inst_init(inst), "its instance");
    assert_non_null(strstr(last_log, "1 thread"));
}

static void unload_instance(TRITONBACKEND_Model *m, TRITONBACKEND_ModelInstance *inst)
{
    expect_ok(B.inst_fini(inst), "TRITONBACKEND_ModelInstanceFinalize");
    model_drop(m);
}

static void test_execute_batches(void **state)
{
    (void)state;
    NEED_BACKEND();
    tu_seed(11);
    TRITONBACKEND_Model m;
    TRITONBACKEND_ModelInstance inst;
    load_instance(&m, &inst, repo_with("timm", 1, B.timm));
    /* batches 1, 2 (in two buffers) and 1: one run of 4 */
    int64_t bs[3] = {1, 2, 1};
    float *x[3];
    TRITONBACKEND_Request rq[3];
    TRITONBACKEND_Request *ptr[3];
    for (int k = 0; k < 3; k++) {
        x[k] = random_input(bs[k]);
        timm_request(&rq[k], x[k], bs[k], k == 1);
        ptr[k] = &rq[k];
    }
    expect_ok(B.execute(&inst, ptr, 3), "TRITONBACKEND_ModelInstanceExecute");
    assert_int_equal(inst.nbatches, 1);
    assert_int_equal(inst.batches[0], 4);
    for (int k = 0; k < 3; k++) {
        char what[64];
        snprintf(what, sizeof what, "request %d of 3 (batch %lld), run in one batch of 4", k, (long long)bs[k]);
        expect_answer(&rq[k], B.timm, x[k], bs[k], 1e-5, what);
        request_free(&rq[k]);
    }
    /* one request alone: run in place, the same bits as the runtime at its batch */
    timm_request(&rq[0], x[1], 2, 0);
    inst.nbatches = 0;
    expect_ok(B.execute(&inst, ptr, 1), "one request");
    expect_answer(&rq[0], B.timm, x[1], 2, 0, "a request of batch 2 alone");
    request_free(&rq[0]);

    /* three of batch 4 with max_batch_size 8: runs of 8 and 4 */
    float *x4[3];
    inst.nbatches = 0;
    for (int k = 0; k < 3; k++) {
        x4[k] = random_input(4);
        timm_request(&rq[k], x4[k], 4, 0);
    }
    expect_ok(B.execute(&inst, ptr, 3), "three requests of batch 4");
    assert_int_equal(inst.nbatches, 2);
    assert_int_equal(inst.batches[0], 8);
    assert_int_equal(inst.batches[1], 4);
    for (int k = 0; k < 3; k++) {
        expect_answer(&rq[k], B.timm, x4[k], 4, 1e-5, "a request of batch 4 of three, in runs of 8 and 4");
        request_free(&rq[k]);
        free(x4[k]);
        free(x[k]);
    }
    unload_instance(&m, &inst);
}

static void test_execute_bad_requests(void **state)
{
    (void)state;
    NEED_BACKEND();
    tu_seed(12);
    TRITONBACKEND_Model m;
    TRITONBACKEND_ModelInstance inst;
    load_instance(&m, &inst, repo_with("timm", 1, B.timm));
    enum { N = 11 };
    TRITONBACKEND_Request rq[N];
    TRITONBACKEND_Request *ptr[N];
    float *x = random_input(9), *x2 = random_input(2);
    double *xd = calloc(3 * 32 * 32, sizeof *xd);
    for (int k = 0; k < N; k++) {
        timm_request(&rq[k], x, 1, 0);
        ptr[k] = &rq[k];
    }
    timm_request(&rq[5], x2, 2, 1);                       /* good, batch 2, two buffers */
    rq[1].in[0].dtype = TRITONSERVER_TYPE_FP64;           /* another dtype */
    rq[1].in[0].buf[0] = xd, rq[1].in[0].size[0] = 3 * 32 * 32 * 8;
    rq[2].nin = 0;                                        /* no input */
    rq[3].in[0].size[0] -= 4;                             /* fewer bytes than the shape */
    rq[4].in[0].mem = TRITONSERVER_MEMORY_GPU;            /* CUDA shared memory */
    rq[6].outs[0] = "nope";                               /* an output the model lacks */
    rq[7].fail_response_new = 1;                          /* the server cannot make its response */
    rq[8].in[0].shape[2] = 31;                            /* another image size */
    rq[8].in[0].size[0] = 3 * 31 * 32 * 4;
    timm_request(&rq[9], x, 9, 0);                        /* above the largest batch */
    rq[10].gpu_output = 1;                                /* its output buffer in GPU memory */
    expect_ok(B.execute(&inst, ptr, N), "eleven requests, nine of them bad");
    expect_answer(&rq[0], B.timm, x, 1, 1e-5, "good request 0 among bad ones");
    expect_answer(&rq[5], B.timm, x2, 2, 1e-5, "good request 5 among bad ones");
    assert_int_equal(inst.nbatches, 1);
    assert_int_equal(inst.batches[0], 3);
    expect_refused(&rq[1], TRITONSERVER_ERROR_INVALID_ARG, "input 'input' is FP64; the model takes FP32", "FP64");
    expect_refused(&rq[2], TRITONSERVER_ERROR_INVALID_ARG, "the request has no input 'input'", "no input");
    expect_refused(&rq[3], TRITONSERVER_ERROR_INVALID_ARG, "holds 12284 bytes; its shape takes 12288", "bytes");
    expect_refused(&rq[4], TRITONSERVER_ERROR_UNSUPPORTED, "is in GPU memory", "GPU memory");
    expect_refused(&rq[6], TRITONSERVER_ERROR_INVALID_ARG, "asks for output 'nope'", "unknown output");
    expect_refused(&rq[7], TRITONSERVER_ERROR_INTERNAL, "", "no response");
    expect_refused(&rq[8], TRITONSERVER_ERROR_INVALID_ARG,
                   "input 'input' has shape [1,3,31,32]; at batch 1 the model takes [1,3,32,32]", "image size");
    expect_refused(&rq[9], TRITONSERVER_ERROR_INVALID_ARG, "batch 9; the model runs batches 1 to 8", "batch 9");
    expect_refused(&rq[10], TRITONSERVER_ERROR_UNSUPPORTED, "output 'output' asked in GPU memory", "GPU output");
    for (int k = 0; k < N; k++)
        request_free(&rq[k]);
    free(x);
    free(x2);
    free(xd);
    unload_instance(&m, &inst);
}

/* A model.so renamed over while the old one is loaded: the new one is what
 * runs; rewritten in place: refused. */
static void test_reload(void **state)
{
    (void)state;
    NEED_BACKEND();
    tu_seed(13);
    float *x = random_input(1);
    TRITONBACKEND_Model m1, m2, m3;
    TRITONBACKEND_ModelInstance i1, i2, i3;
    const char *repo = repo_with("swap", 1, B.timm);
    load_instance(&m1, &i1, repo);
    TRITONBACKEND_Request rq;
    TRITONBACKEND_Request *ptr = &rq;
    timm_request(&rq, x, 1, 0);
    expect_ok(B.execute(&i1, &ptr, 1), "version 1");
    expect_answer(&rq, B.timm, x, 1, 0, "timm's model.so");
    request_free(&rq);

    repo_with("swap", 1, B.tv); /* renamed over */
    load_instance(&m2, &i2, repo);
    timm_request(&rq, x, 1, 0);
    expect_ok(B.execute(&i2, &ptr, 1), "version 1 again");
    expect_answer(&rq, B.tv, x, 1, 0, "torchvision's model.so renamed over timm's, loaded while timm's is");
    request_free(&rq);
    timm_request(&rq, x, 1, 0);
    expect_ok(B.execute(&i1, &ptr, 1), "the old one");
    expect_answer(&rq, B.timm, x, 1, 0, "the old model still timm's");
    request_free(&rq);
    unload_instance(&m1, &i1);

    /* the same file again (unchanged): shared */
    load_instance(&m3, &i3, repo);
    timm_request(&rq, x, 1, 0);
    expect_ok(B.execute(&i3, &ptr, 1), "the same file loaded twice");
    expect_answer(&rq, B.tv, x, 1, 0, "the same file loaded twice");
    request_free(&rq);
    unload_instance(&m3, &i3);

    /* rewritten in place */
    char p[4400];
    snprintf(p, sizeof p, "%s/1/model.so", repo);
    size_t n = 0;
    char *data = tu_read_file(p, &n);
    FILE *f = fopen(p, "r+b");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
    free(data);
    struct timespec ts[2] = {{0, UTIME_NOW}, {time(NULL) + 5, 0}};
    assert_int_equal(utimensat(AT_FDCWD, p, ts, 0), 0);
    TRITONBACKEND_Model m4 = model_of("swap", repo, BASE("swap"), TIMM_IO, false);
    expect_error(B.model_init(&m4), "was rewritten in place while a model loaded from it is still serving",
                 "rewritten in place");
    model_drop(&m4);
    unload_instance(&m2, &i2);
    /* with nothing loaded from it, the file loads again */
    load_instance(&m1, &i1, repo);
    unload_instance(&m1, &i1);
    free(x);
}

static void test_cuda_model(void **state)
{
    (void)state;
    NEED_BACKEND();
    if (!B.have_cuda) { /* where vitc has no CUDA backend: the rest of this test stands */
        printf("  not run: no CUDA model could be compiled here\n");
        return;
    }
    const char *repo = repo_with("cuda", 1, B.cuda);
    TRITONBACKEND_Model m = model_of("cuda", repo, BASE("cuda"), EMPTY_IO, true);
    expect_error(B.model_init(&m), "is a CUDA model: give it instance_group [ { kind: KIND_GPU } ]", "CUDA in KIND_CPU");
    model_drop(&m);
    m = model_of("cuda", repo,
                 "\"name\":\"cuda\",\"backend\":\"vitc\",\"parameters\":{},"
                 "\"instance_group\":[{\"name\":\"g\",\"kind\":\"KIND_GPU\",\"count\":1,\"gpus\":[1]}]",
                 EMPTY_IO, true);
    expect_error(B.model_init(&m), "asks for GPU 1; vitc runs CUDA models on one GPU per process, 0", "GPU 1");
    model_drop(&m);
    m = model_of("cuda", repo,
                 "\"name\":\"cuda\",\"backend\":\"vitc\",\"parameters\":{},"
                 "\"instance_group\":[{\"name\":\"g\",\"kind\":\"KIND_GPU\",\"count\":1,\"gpus\":[0]}]",
                 EMPTY_IO, true);
    expect_ok(B.model_init(&m), "a CUDA model in KIND_GPU on GPU 0");
    TRITONBACKEND_ModelInstance inst = {.name = "g_0", .kind = TRITONSERVER_INSTANCEGROUPKIND_GPU, .model = &m};
    TRITONSERVER_Error_Code code = TRITONSERVER_ERROR_UNKNOWN;
    char *why = take(B.inst_init(&inst), &code);
    if (why) {
        /* no GPU here: the runtime's reason, as the server's UNAVAILABLE */
        printf("  a CUDA instance without a usable GPU: %s\n", why);
        assert_int_equal(code, TRITONSERVER_ERROR_UNAVAILABLE);
        free(why);
    } else {
        tu_seed(14);
        float *x = random_input(3);
        TRITONBACKEND_Request rq[2];
        TRITONBACKEND_Request *ptr[2] = {&rq[0], &rq[1]};
        timm_request(&rq[0], x, 1, 0);
        timm_request(&rq[1], x + 3 * 32 * 32, 2, 1);
        expect_ok(B.execute(&inst, ptr, 2), "a CUDA model");
        expect_answer(&rq[0], B.timm, x, 1, TU_BAR_HALF, "CUDA (bf16) request 0 against the CPU model");
        expect_answer(&rq[1], B.timm, x + 3 * 32 * 32, 2, TU_BAR_HALF, "CUDA (bf16) request 1 against the CPU model");
        request_free(&rq[0]);
        request_free(&rq[1]);
        free(x);
        expect_ok(B.inst_fini(&inst), "the CUDA instance");
    }
    model_drop(&m);
}

TU_MAIN(setup, teardown, test_api_version, test_config_completed, test_config_refused, test_execute_batches,
        test_execute_bad_requests, test_reload, test_cuda_model)
