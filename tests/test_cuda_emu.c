/* test_cuda_emu.c: every fixture through the CUDA backend in every
 * precision, run without a GPU: the generated program (--emit cuda) is
 * compiled by the host C++ compiler against tests/cuda_emu.h, which gives
 * the device library's hardware layer (tensor-core MMA fragments, ldmatrix,
 * cp.async, shuffles, rounding) a CPU implementation that follows the PTX
 * ISA, and the launch plan of the compiled .so is executed launch by launch
 * as the runtime would: same grids, same arguments, same workspace offsets.
 * Outputs are checked against the reference interpreter (fp32, double
 * accumulation) at batch 1 and 3 with the bars of the GPU tests:
 * max |out - ref| / max |ref| within 1e-4 for fp32, within 1e-2 with cosine
 * >= 0.9999 for tf32, fp16 and bf16.
 *
 * What this cannot show: speed, and anything where the hardware departs
 * from the ISA document (that is test_cuda_gpu.c's job on a GPU). */
#include "testutil.h"

#include "codegen/backend.h"
#include "frontend/onnx.h"
#include "ir/interp.h"
#include "runtime/abi.h"

#include <dlfcn.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#ifdef VITC_HAVE_CUDA

/* Under AddressSanitizer every vitc this test starts is instrumented and
 * several times slower; the three exporters of a family give the same
 * program, so there one of them (ts17) stands for its family. */
#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

static tu_fixture fixtures[64];
static int nfixtures;
static char tmpdir[4096], cachedir[4096], emudir[8300];

static const char *const precisions[4] = {"fp32", "tf32", "fp16", "bf16"};

typedef int (*emu_launch_fn)(void *fn, const unsigned *grid, const unsigned *block, unsigned long long smem,
                             const void *args, char *err, unsigned long errlen);

static char *slurp(const char *path, size_t *len)
{
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s)
        s[n] = 0;
    fclose(f);
    *len = (size_t)n;
    return s;
}

/* Compiles the program at cu into the host library emu-<program id>.so of
 * the cache directory (where the fake driver looks for it); kept across runs. */
static void build_emulation(const char *cu, char *so, size_t n)
{
    size_t len;
    char *text = slurp(cu, &len);
    assert_non_null(text);
    const char *id = strstr(text, "\"vitc-program:");
    if (!id)
        fail_msg("%s has no program id", cu);
    snprintf(so, n, "%.8000s/emu-%.16s.so", emudir, id + strlen("\"vitc-program:"));
    free(text);
    struct stat sb;
    if (stat(so, &sb) == 0)
        return;
    char tmp[8300], inc[4096], cmd[32768];
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", so, (long)getpid());
    const char *cxx = getenv("CXX");
    snprintf(cmd, sizeof cmd, "%s -std=c++17 -O1 -w -shared -fPIC -DVITC_EMU -I'%s' -x c++ '%s' -o '%s' 2>&1",
             cxx && *cxx ? cxx : "c++", tu_path(inc, sizeof inc, "tests"), cu, tmp);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char out[8192];
    size_t r = fread(out, 1, sizeof out - 1, p);
    out[r] = 0;
    int rc = pclose(p);
    if (rc != 0)
        fail_msg("host compile of %s failed (%d):\n%s", cu, rc, out);
    assert_int_equal(rename(tmp, so), 0);
}

/* Device memory of the emulation: n bytes ending at an inaccessible page. */
typedef struct {
    void *map;
    size_t span;
    unsigned char *p;
} guarded;

static void guarded_alloc(guarded *g, size_t n)
{
    size_t page = 4096, body = (n + 255) / 256 * 256;
    g->span = (body + page - 1) / page * page + page;
    g->map = mmap(NULL, g->span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(g->map != MAP_FAILED);
    assert_int_equal(mprotect((char *)g->map + g->span - page, page, PROT_NONE), 0);
    g->p = (unsigned char *)g->map + g->span - page - body;
    memset(g->map, 0x7f, g->span - page); /* stale memory is garbage */
}

static int64_t poly_at(const vitc_cuda_poly *p, int64_t b)
{
    return p->c[0] + b * (p->c[1] + b * (p->c[2] + b * p->c[3]));
}

static int64_t numel_at(const vitc_abi_tensor *t, int64_t b)
{
    int64_t n = 1;
    for (int k = 0; k < t->rank; k++)
        n *= ((t->batch_mask >> k) & 1) ? t->dims[k] * b : t->dims[k];
    return n;
}

/* Runs the plan of the model .so on the emulation, as the runtime would:
 * inputs copied in at their offsets, every launch of this batch in order,
 * outputs (allocated here, as the descriptor says) copied back. */
static void emulate(const char *model_so, const char *emu_so, int64_t batch, const ir_tensor *in, int nin,
                    ir_tensor *out, int nout, int *nlaunches)
{
    void *mh = dlopen(model_so, RTLD_NOW | RTLD_LOCAL), *eh = dlopen(emu_so, RTLD_NOW | RTLD_LOCAL);
    if (!mh || !eh)
        fail_msg("dlopen: %s", dlerror());
    const vitc_abi_model *a = dlsym(mh, VITC_ABI_SYMBOL);
    emu_launch_fn launch = (emu_launch_fn)dlsym(eh, "vk_emu_launch");
    assert_non_null(a);
    assert_non_null(launch);
    const vitc_cuda_plan *p = a->cuda_plan;
    assert_non_null(p);
    assert_int_equal(a->ninputs, nin);
    assert_int_equal(a->noutputs, nout);
    guarded ws, w;
    guarded_alloc(&ws, (size_t)p->workspace_bytes);
    guarded_alloc(&w, (size_t)a->weights_bytes);
    memcpy(w.p, a->weights, (size_t)a->weights_bytes);
    for (int j = 0; j < nin; j++) {
        assert_int_equal(numel_at(&a->inputs[j], batch), ir_tensor_numel(&in[j]));
        assert_int_equal(a->inputs[j].dtype, ir_dtype_onnx_code(in[j].dtype));
        memcpy(ws.p + p->inputs[j].offset, in[j].data, ir_tensor_nbytes(&in[j]));
    }
    *nlaunches = 0;
    for (int i = 0; i < p->nlaunches; i++) {
        const vitc_cuda_launch *l = &p->launches[i];
        if (batch < l->min_batch || batch > l->max_batch)
            continue;
        unsigned grid[3], block[3] = {l->block, 1, 1};
        int empty = 0;
        for (int k = 0; k < 3; k++) {
            int64_t n = poly_at(&l->grid[k], batch);
            grid[k] = n <= 0 ? 0 : (unsigned)((n + l->grid_div[k] - 1) / l->grid_div[k]);
            empty |= grid[k] == 0;
        }
        if (empty)
            continue;
        unsigned long long args[VITC_CUDA_MAX_ARGS] = {0};
        for (int k = 0; k < l->nargs; k++) {
            int64_t v = poly_at(&l->args[k].value, batch);
            args[k] = l->args[k].kind == VITC_CUDA_ARG_WORKSPACE ? (unsigned long long)(uintptr_t)(ws.p + v)
                      : l->args[k].kind == VITC_CUDA_ARG_WEIGHTS ? (unsigned long long)(uintptr_t)(w.p + v)
                                                                 : (unsigned long long)v;
        }
        const char *name = p->functions[l->function];
        void *fn = dlsym(eh, name);
        if (!fn)
            fail_msg("%s: no kernel %s in the emulation", model_so, name);
        char err[2048];
        if (launch(fn, grid, block, l->shared_bytes, args, err, sizeof err) != 0)
            fail_msg("%s batch %lld: launch %d (%s, grid %u x %u x %u, block %u, %u bytes shared): %s", model_so,
                     (long long)batch, i, name, grid[0], grid[1], grid[2], l->block, l->shared_bytes, err);
        ++*nlaunches;
    }
    for (int j = 0; j < nout; j++) {
        const vitc_abi_tensor *t = &a->outputs[j];
        int64_t dims[VITC_ABI_MAX_RANK];
        for (int k = 0; k < t->rank; k++)
            dims[k] = ((t->batch_mask >> k) & 1) ? t->dims[k] * batch : t->dims[k];
        int dt = ir_dtype_from_onnx(t->dtype);
        assert_true(dt >= 0);
        assert_int_equal(ir_tensor_alloc(&out[j], (ir_dtype)dt, t->rank, dims), 0);
        const unsigned char *src = (p->outputs[j].space == VITC_CUDA_SPACE_WEIGHTS ? w.p : ws.p) + p->outputs[j].offset;
        memcpy(out[j].data, src, ir_tensor_nbytes(&out[j]));
    }
    munmap(ws.map, ws.span);
    munmap(w.map, w.span);
    dlclose(eh);
    dlclose(mh);
}

static double cosine(const ir_tensor *a, const ir_tensor *b)
{
    double ab = 0, aa = 0, bb = 0;
    for (int64_t i = 0; i < ir_tensor_numel(a); i++) {
        double x = ir_tensor_get(a, i), y = ir_tensor_get(b, i);
        ab += x * y, aa += x * x, bb += y * y;
    }
    return aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : (aa == bb ? 1.0 : 0.0);
}

static void run_vitc(const char *const *args, const char *what)
{
    char *out, *err;
    int rc = tu_run_vitc(args, &out, &err);
    if (rc != 0)
        fail_msg("%s: vitc exited %d:\n%s%s", what, rc, out, err);
    free(out), free(err);
}

static void test_fixtures_emulated(void **state)
{
    (void)state;
    assert_true(nfixtures >= 15);
    print_message("%-24s %-5s %11s %11s %9s %9s %8s\n", "fixture", "prec", "b1 rel err", "b3 rel err", "b1 cos",
                  "b3 cos", "launches");
    int failures = 0;
    double worst[4] = {0};
    if (SANITIZED)
        print_message("(sanitizer build: one exporter per family, ts17)\n");
    for (int i = 0; i < nfixtures; i++) {
        const tu_fixture *fx = &fixtures[i];
        if (SANITIZED && strcmp(fx->exporter, "ts17") != 0)
            continue;
        char model[4096], rel[1024];
        snprintf(rel, sizeof rel, "tests/models/%.95s", fx->model);
        tu_path(model, sizeof model, rel);
        vitc_diag d;
        vitc_diag_init(&d, model);
        ir_graph *g = onnx_import_file(model, &d);
        assert_non_null(g);
        assert_int_equal(ir_infer_shapes(g, &d), 0);
        ir_tensor in[2], ref[2];
        for (int b = 0; b < 2; b++) {
            char p[4096];
            snprintf(rel, sizeof rel, "tests/models/%.31s.b%d.input.npy", fx->family, b ? 3 : 1);
            assert_int_equal(ir_npy_read(tu_path(p, sizeof p, rel), &in[b], &d), 0);
            memset(&ref[b], 0, sizeof ref[b]);
            assert_int_equal(ir_interpret(g, &in[b], &ref[b], NULL, NULL, &d), 0);
        }
        ir_graph_free(g);
        for (int pi = 0; pi < 4; pi++) {
            char so[8300], cu[8300], emu[8300];
            snprintf(so, sizeof so, "%.4000s/%.95s.%s.so", tmpdir, fx->model, precisions[pi]);
            snprintf(cu, sizeof cu, "%.4000s/%.95s.%s.cu", tmpdir, fx->model, precisions[pi]);
            /* default options: test_cuda_gpu compiles the same programs, and on the
             * fake driver runs them on the emulation libraries built here */
            const char *a1[] = {model, "--target", "cuda", "--precision", precisions[pi], "-o", so, NULL};
            const char *a2[] = {model, "--emit", "cuda", "--precision", precisions[pi], "-o", cu, NULL};
            run_vitc(a1, so);
            run_vitc(a2, cu);
            build_emulation(cu, emu, sizeof emu);
            double e[2], c[2];
            int nl = 0;
            for (int b = 0; b < 2; b++) {
                ir_tensor out;
                emulate(so, emu, b ? 3 : 1, &in[b], 1, &out, 1, &nl);
                assert_int_equal(out.rank, ref[b].rank);
                for (int k = 0; k < out.rank; k++)
                    assert_int_equal(out.dims[k], ref[b].dims[k]);
                e[b] = ir_rel_error(&out, &ref[b]);
                c[b] = cosine(&out, &ref[b]);
                ir_tensor_free(&out);
            }
            double tol = pi == 0 ? 1e-4 : 1e-2, ctol = pi == 0 ? 0 : 0.9999;
            int ok = e[0] <= tol && e[1] <= tol && c[0] >= ctol && c[1] >= ctol;
            failures += !ok;
            for (int b = 0; b < 2; b++)
                worst[pi] = e[b] > worst[pi] ? e[b] : worst[pi];
            print_message("%-24s %-5s %11.3g %11.3g %9.6f %9.6f %8d %s\n", fx->model, precisions[pi], e[0], e[1], c[0],
                          c[1], nl, ok ? "ok" : "FAIL");
            unlink(so);
            unlink(cu);
        }
        for (int b = 0; b < 2; b++)
            ir_tensor_free(&in[b]), ir_tensor_free(&ref[b]);
    }
    print_message("worst rel err: fp32 %.3g (bar 1e-4), tf32 %.3g, fp16 %.3g, bf16 %.3g (bar 1e-2, cosine >= 0.9999)\n",
                  worst[0], worst[1], worst[2], worst[3]);
    if (failures)
        fail_msg("%d fixture/precision pairs beyond the bars", failures);
}

/* ---- hand-built graphs: the ops the fixtures do not reach ---- */

static ir_graph *new_graph(void)
{
    ir_graph *g = ir_graph_new("handmade.onnx");
    assert_non_null(g);
    g->opset = 18;
    g->inputs = ir_alloc_array(g->arena, 16, sizeof(int));
    g->outputs = ir_alloc_array(g->arena, 32, sizeof(int));
    return g;
}

/* A graph input; dims[i] < 0 means -dims[i] times the batch. */
static int input(ir_graph *g, const char *name, int rank, const int64_t *dims)
{
    int v = ir_add_value(g, name, IR_VAL_INPUT, IR_F32);
    g->values[v].rank = rank;
    for (int i = 0; i < rank; i++)
        g->values[v].dims[i] = dims[i] < 0 ? ir_dim_batch(-dims[i]) : ir_dim_const(dims[i]);
    g->inputs[g->ninputs++] = v;
    return v;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float rnd(void) /* uniform in [-1, 1) */
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng >> 11) / (double)(1ull << 53) * 2 - 1);
}

static int fconst(ir_graph *g, const char *name, int rank, const int64_t *dims, const float *vals)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= dims[i];
    float *buf = malloc(sizeof(float) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++)
        buf[i] = vals ? vals[i] : rnd();
    int v = ir_add_const(g, name, IR_F32, rank, dims, buf, sizeof(float) * (size_t)n);
    free(buf);
    return v;
}

static int iconst(ir_graph *g, const char *name, int rank, const int64_t *dims, const int64_t *vals)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= dims[i];
    return ir_add_const(g, name, IR_I64, rank, dims, vals, sizeof(int64_t) * (size_t)n);
}

static int scalar(ir_graph *g, const char *name, float x) { return fconst(g, name, 0, NULL, &x); }

static ir_attr aint(ir_attr_id id, int64_t i) { return (ir_attr){.id = id, .kind = IR_AT_INT, .i = i, .tensor = -1}; }
static ir_attr aflt(ir_attr_id id, float f) { return (ir_attr){.id = id, .kind = IR_AT_FLOAT, .f = f, .tensor = -1}; }
static ir_attr astr(ir_attr_id id, const char *str)
{
    return (ir_attr){.id = id, .kind = IR_AT_STRING, .s = str, .n = (int)strlen(str), .tensor = -1};
}
static ir_attr aints(ir_graph *g, ir_attr_id id, int n, const int64_t *v)
{
    int64_t *p = ir_alloc_array(g->arena, (size_t)n, sizeof *p);
    memcpy(p, v, sizeof *p * (size_t)n);
    return (ir_attr){.id = id, .kind = IR_AT_INTS, .n = n, .ints = p, .tensor = -1};
}

/* y = op(inputs...) of type dt; returns y. */
static int node(ir_graph *g, ir_op op, ir_dtype dt, int nin, const int *in, int nattrs, const ir_attr *attrs)
{
    char name[32];
    snprintf(name, sizeof name, "n%d", g->nnodes);
    int y = ir_add_value(g, name, IR_VAL_NODE, dt);
    assert_true(ir_add_node(g, op, name, ir_op_name(op), nin, in, 1, &y, nattrs, attrs) >= 0);
    return y;
}

#define IN(...) (int[]){__VA_ARGS__}
#define AT(...) (ir_attr[]){__VA_ARGS__}
#define DIMS(...) (int64_t[]){__VA_ARGS__}

static void mark(ir_graph *g, int v) { g->outputs[g->noutputs++] = v; }

/* Compiles g with the CUDA backend in each precision of mask (bit i:
 * precisions[i]) and runs it on the emulation at batch 1 and 3 against the
 * interpreter: fp32 within 1e-4, the others within 1e-2 with cosine >=
 * 0.9999; bool outputs exactly. */
static void check_graph(const char *what, ir_graph *g, unsigned mask)
{
    vitc_diag d;
    vitc_diag_init(&d, what);
    if (ir_verify(g, &d) || ir_infer_shapes(g, &d))
        fail_msg("%s: the hand-built graph is malformed (status %d)", what, d.status);
    enum { MAXIO = 32 };
    ir_tensor in[2][MAXIO], ref[2][MAXIO];
    memset(ref, 0, sizeof ref);
    for (int b = 0; b < 2; b++) {
        for (int i = 0; i < g->ninputs; i++) {
            const ir_value *v = &g->values[g->inputs[i]];
            int64_t dims[IR_MAX_RANK];
            for (int k = 0; k < v->rank; k++)
                dims[k] = ir_dim_eval(v->dims[k], b ? 3 : 1);
            assert_int_equal(ir_tensor_alloc(&in[b][i], IR_F32, v->rank, dims), 0);
            for (int64_t k = 0; k < ir_tensor_numel(&in[b][i]); k++)
                ir_tensor_set(&in[b][i], k, 2 * rnd());
        }
        if (ir_interpret(g, in[b], ref[b], NULL, NULL, &d))
            fail_msg("%s: the interpreter failed", what);
    }
    for (int pi = 0; pi < 4; pi++) {
        if (!((mask >> pi) & 1) || (getenv("VITC_ONLY") && !strstr(what, getenv("VITC_ONLY"))))
            continue;
        char so[8300], cu[8300], emu[8300];
        snprintf(so, sizeof so, "%s/%s.%s.so", tmpdir, what, precisions[pi]);
        snprintf(cu, sizeof cu, "%s/%s.%s.cu", tmpdir, what, precisions[pi]);
        cg_options opt = {.output = so, .source = what, .max_batch = 3, .opt_level = 2, .precision = precisions[pi]};
        if (cg_cuda_backend.compile(g, &opt, &d) != VITC_OK)
            fail_msg("%s (%s): the CUDA backend failed (status %d)", what, precisions[pi], d.status);
        opt.output = cu;
        opt.emit_source = 1;
        if (cg_cuda_backend.compile(g, &opt, &d) != VITC_OK)
            fail_msg("%s (%s): --emit cuda failed", what, precisions[pi]);
        build_emulation(cu, emu, sizeof emu);
        char line[2048];
        size_t ll = (size_t)snprintf(line, sizeof line, "%-12s %-5s", what, precisions[pi]);
        double tol = pi == 0 ? 1e-4 : 1e-2;
        for (int b = 0; b < 2; b++) {
            ir_tensor out[MAXIO];
            int nl;
            emulate(so, emu, b ? 3 : 1, in[b], g->ninputs, out, g->noutputs, &nl);
            for (int o = 0; o < g->noutputs; o++) {
                const char *name = g->values[g->outputs[o]].name;
                if (out[o].dtype == IR_BOOL) {
                    int64_t bad = 0;
                    for (int64_t k = 0; k < ir_tensor_numel(&out[o]); k++)
                        bad += ir_tensor_get(&out[o], k) != ir_tensor_get(&ref[b][o], k);
                    if (bad)
                        fail_msg("%s (%s) batch %d: %lld of '%s' wrong", what, precisions[pi], b ? 3 : 1,
                                 (long long)bad, name);
                    ir_tensor_free(&out[o]);
                    continue;
                }
                double e = ir_rel_error(&out[o], &ref[b][o]), c = cosine(&out[o], &ref[b][o]);
                if (ll < sizeof line)
                    ll += (size_t)snprintf(line + ll, sizeof line - ll, " %s:%.2g", name, e);
                if (!(e <= tol) || (pi > 0 && c < 0.9999))
                    fail_msg("%s (%s) batch %d: '%s' error %g, cosine %.6f", what, precisions[pi], b ? 3 : 1, name, e,
                             c);
                ir_tensor_free(&out[o]);
            }
        }
        print_message("%s\n", line);
        if (!getenv("VITC_KEEP_TMP"))
            unlink(so), unlink(cu);
    }
    for (int b = 0; b < 2; b++) {
        for (int i = 0; i < g->ninputs; i++)
            ir_tensor_free(&in[b][i]);
        for (int o = 0; o < g->noutputs; o++)
            ir_tensor_free(&ref[b][o]);
    }
    ir_graph_free(g);
}

enum { FP32 = 1, TF32 = 2, FP16 = 4, BF16 = 8, ALL = 15 };

static void test_ops_emulated(void **state)
{
    (void)state;
    ir_graph *g = new_graph(); /* convolutions: direct (groups, pads, strides, dilations), 1-D, patchify */
    int x = input(g, "x", 4, DIMS(-1, 4, 9, 7));
    int w = fconst(g, "w", 4, DIMS(6, 2, 3, 3), NULL), b = fconst(g, "b", 1, DIMS(6), NULL);
    mark(g, node(g, IR_OP_CONV, IR_F32, 3, IN(x, w, b), 4,
                AT(aint(IR_ATTR_GROUP, 2), aints(g, IR_ATTR_PADS, 4, DIMS(1, 0, 1, 2)),
                   aints(g, IR_ATTR_STRIDES, 2, DIMS(2, 1)), aints(g, IR_ATTR_DILATIONS, 2, DIMS(1, 2)))));
    int x1 = input(g, "x1", 3, DIMS(-1, 3, 10));
    int w1 = fconst(g, "w1", 3, DIMS(4, 3, 3), NULL);
    mark(g, node(g, IR_OP_CONV, IR_F32, 2, IN(x1, w1), 1, AT(aints(g, IR_ATTR_PADS, 2, DIMS(1, 1)))));
    check_graph("conv", g, FP32 | FP16);

    g = new_graph(); /* reductions, Softmax over a middle axis, LayerNorm over two axes and over 1100 */
    x = input(g, "x", 3, DIMS(-1, 5, 6));
    mark(g, node(g, IR_OP_REDUCE_SUM, IR_F32, 1, IN(x), 2,
                AT(aints(g, IR_ATTR_AXES, 1, DIMS(1)), aint(IR_ATTR_KEEPDIMS, 0))));
    int ax = iconst(g, "axes", 1, DIMS(2), DIMS(0, 2));
    mark(g, node(g, IR_OP_REDUCE_MAX, IR_F32, 2, IN(x, ax), 0, NULL));
    mark(g, node(g, IR_OP_REDUCE_MEAN, IR_F32, 1, IN(x), 0, NULL));
    mark(g, node(g, IR_OP_SOFTMAX, IR_F32, 1, IN(x), 1, AT(aint(IR_ATTR_AXIS, 1))));
    int sc = fconst(g, "s", 2, DIMS(5, 6), NULL), bb = fconst(g, "bb", 2, DIMS(5, 6), NULL);
    mark(g, node(g, IR_OP_LAYERNORM, IR_F32, 3, IN(x, sc, bb), 2, AT(aint(IR_ATTR_AXIS, 1), aflt(IR_ATTR_EPSILON, 1e-3f))));
    int xl = input(g, "xl", 3, DIMS(-1, 2, 1100));
    int sl = fconst(g, "sl", 1, DIMS(1100), NULL);
    mark(g, node(g, IR_OP_LAYERNORM, IR_F32, 2, IN(xl, sl), 0, NULL));
    check_graph("reduce-norm", g, FP32 | FP16);

    g = new_graph(); /* element-wise, broadcasting */
    x = input(g, "x", 3, DIMS(-1, 3, 4));
    int y = input(g, "y", 1, DIMS(4));
    int one = scalar(g, "one", 1), three = scalar(g, "three", 3), half = scalar(g, "half", 0.5f);
    int axb = node(g, IR_OP_ABS, IR_F32, 1, IN(x), 0, NULL);
    mark(g, node(g, IR_OP_SIGMOID, IR_F32, 1, IN(x), 0, NULL));
    mark(g, node(g, IR_OP_TANH, IR_F32, 1, IN(node(g, IR_OP_EXP, IR_F32, 1, IN(x), 0, NULL)), 0, NULL));
    int lg = node(g, IR_OP_LOG, IR_F32, 1, IN(node(g, IR_OP_ADD, IR_F32, 2, IN(axb, one), 0, NULL)), 0, NULL);
    mark(g, node(g, IR_OP_RECIPROCAL, IR_F32, 1, IN(node(g, IR_OP_NEG, IR_F32, 1, IN(lg), 0, NULL)), 0, NULL));
    mark(g, node(g, IR_OP_MAX, IR_F32, 2, IN(x, y), 0, NULL));
    mark(g, node(g, IR_OP_MIN, IR_F32, 3, IN(x, y, half), 0, NULL));
    mark(g, node(g, IR_OP_POW, IR_F32, 2, IN(x, three), 0, NULL));
    mark(g, node(g, IR_OP_SQRT, IR_F32, 1, IN(axb), 0, NULL));
    mark(g, node(g, IR_OP_MOD, IR_F32, 2, IN(x, half), 1, AT(aint(IR_ATTR_FMOD, 1))));
    int lo = scalar(g, "lo", -0.5f), hi = scalar(g, "hi", 0.7f);
    mark(g, node(g, IR_OP_CLIP, IR_F32, 3, IN(x, lo, hi), 0, NULL));
    mark(g, node(g, IR_OP_GELU, IR_F32, 1, IN(node(g, IR_OP_RELU, IR_F32, 1, IN(x), 0, NULL)), 1,
                AT(astr(IR_ATTR_APPROXIMATE, "tanh"))));
    mark(g, node(g, IR_OP_ERF, IR_F32, 1, IN(node(g, IR_OP_DIV, IR_F32, 2, IN(x, y), 0, NULL)), 0, NULL));
    int zero = scalar(g, "zero", 0);
    int c = node(g, IR_OP_GREATER, IR_BOOL, 2, IN(x, zero), 0, NULL);
    mark(g, node(g, IR_OP_WHERE, IR_F32, 3, IN(c, x, node(g, IR_OP_NEG, IR_F32, 1, IN(x), 0, NULL)), 0, NULL));
    int lt = node(g, IR_OP_LESS, IR_BOOL, 2, IN(x, y), 0, NULL);
    mark(g, node(g, IR_OP_AND, IR_BOOL, 2, IN(c, node(g, IR_OP_NOT, IR_BOOL, 1, IN(lt), 0, NULL)), 0, NULL));
    mark(g, node(g, IR_OP_CAST, IR_F32, 1, IN(node(g, IR_OP_OR, IR_BOOL, 2, IN(c, lt), 0, NULL)), 1,
                AT(aint(IR_ATTR_TO, 1))));
    check_graph("elementwise", g, FP32);

    g = new_graph(); /* data movement */
    x = input(g, "x", 3, DIMS(-1, 4, 6));
    mark(g, node(g, IR_OP_TRANSPOSE, IR_F32, 1, IN(x), 1, AT(aints(g, IR_ATTR_PERM, 3, DIMS(2, 0, 1)))));
    int st = iconst(g, "st", 1, DIMS(1), DIMS(5)), en = iconst(g, "en", 1, DIMS(1), DIMS(0));
    int axs = iconst(g, "axs", 1, DIMS(1), DIMS(2)), stp = iconst(g, "stp", 1, DIMS(1), DIMS(-2));
    int slc = node(g, IR_OP_SLICE, IR_F32, 5, IN(x, st, en, axs, stp), 0, NULL);
    mark(g, slc);
    int idx = iconst(g, "idx", 1, DIMS(3), DIMS(3, 0, -2)), last = iconst(g, "last", 0, NULL, DIMS(-1));
    mark(g, node(g, IR_OP_GATHER, IR_F32, 2, IN(x, idx), 1, AT(aint(IR_ATTR_AXIS, 1))));
    mark(g, node(g, IR_OP_GATHER, IR_F32, 2, IN(x, last), 1, AT(aint(IR_ATTR_AXIS, 2))));
    mark(g, node(g, IR_OP_CONCAT, IR_F32, 2, IN(x, slc), 1, AT(aint(IR_ATTR_AXIS, 2))));
    mark(g, node(g, IR_OP_CONCAT, IR_F32, 2, IN(x, x), 1, AT(aint(IR_ATTR_AXIS, 0))));
    int parts[2] = {ir_add_value(g, "p0", IR_VAL_NODE, IR_F32), ir_add_value(g, "p1", IR_VAL_NODE, IR_F32)};
    int sizes = iconst(g, "sizes", 1, DIMS(2), DIMS(1, 3));
    assert_true(ir_add_node(g, IR_OP_SPLIT, "split", "Split", 2, IN(x, sizes), 2, parts, 1,
                            AT(aint(IR_ATTR_AXIS, 1))) >= 0);
    mark(g, parts[1]);
    int t = fconst(g, "t", 3, DIMS(1, 1, 6), NULL), shp = iconst(g, "shp", 1, DIMS(3), DIMS(2, 4, 6));
    mark(g, node(g, IR_OP_EXPAND, IR_F32, 2, IN(t, shp), 0, NULL));
    int rs = iconst(g, "rs", 1, DIMS(2), DIMS(0, 24));
    mark(g, node(g, IR_OP_RESHAPE, IR_F32, 2, IN(x, rs), 0, NULL)); /* a view that is an output */
    mark(g, x);                                                      /* an input that is an output */
    mark(g, t);                                                      /* a constant that is an output */
    check_graph("data", g, FP32 | FP16);

    g = new_graph(); /* matrix products: broadcast, batched, Gemm both ways, constant weights */
    int a = input(g, "a", 4, DIMS(-1, 2, 3, 4));
    int wv = input(g, "wv", 2, DIMS(4, 5));
    mark(g, node(g, IR_OP_MATMUL, IR_F32, 2, IN(a, wv), 0, NULL));
    int v = input(g, "v", 4, DIMS(-1, 2, 4, 3));
    mark(g, node(g, IR_OP_MATMUL, IR_F32, 2, IN(a, v), 0, NULL));
    x = input(g, "x", 2, DIMS(-1, 4));
    int wb = fconst(g, "wb", 2, DIMS(5, 4), NULL), cb = fconst(g, "cb", 1, DIMS(5), NULL);
    mark(g, node(g, IR_OP_GEMM, IR_F32, 3, IN(x, wb, cb), 3,
                AT(aint(IR_ATTR_TRANS_B, 1), aflt(IR_ATTR_ALPHA, 0.5f), aflt(IR_ATTR_BETA, 2.0f))));
    int xt = input(g, "xt", 2, DIMS(6, 3)), bt = input(g, "bt", 2, DIMS(6, 5)), yt = input(g, "yt", 2, DIMS(3, 1));
    mark(g, node(g, IR_OP_GEMM, IR_F32, 3, IN(xt, bt, yt), 2, AT(aint(IR_ATTR_TRANS_A, 1), aflt(IR_ATTR_BETA, -1.0f))));
    int wc = fconst(g, "wc", 2, DIMS(4, 7), NULL);
    mark(g, node(g, IR_OP_MATMUL, IR_F32, 2, IN(a, wc), 0, NULL));
    check_graph("matmul", g, FP32 | FP16);

    g = new_graph(); /* BatchNormalization, the fused ops in both attention layouts and kernels */
    x = input(g, "x", 4, DIMS(-1, 3, 4, 5));
    float var[3] = {0.5f, 1.5f, 2.0f};
    int s = fconst(g, "s", 1, DIMS(3), NULL), bn_b = fconst(g, "bn_b", 1, DIMS(3), NULL);
    int m = fconst(g, "m", 1, DIMS(3), NULL), vv = fconst(g, "vv", 1, DIMS(3), var);
    mark(g, node(g, IR_OP_BATCHNORM, IR_F32, 5, IN(x, s, bn_b, m, vv), 1, AT(aflt(IR_ATTR_EPSILON, 1e-3f))));
    int h = input(g, "h", 3, DIMS(-1, 5, 8)), r = input(g, "r", 3, DIMS(-1, 5, 6));
    int wl = fconst(g, "wl", 2, DIMS(8, 6), NULL), bias = fconst(g, "bias", 1, DIMS(6), NULL);
    mark(g, node(g, IR_OP_LINEAR, IR_F32, 4, IN(h, wl, bias, r), 1, AT(aint(IR_ATTR_ACTIVATION, 1))));
    mark(g, node(g, IR_OP_LINEAR, IR_F32, 2, IN(h, wl), 1, AT(aint(IR_ATTR_ACTIVATION, 4))));
    int h6 = input(g, "h6", 3, DIMS(-1, 5, 6)), w6 = fconst(g, "w6", 2, DIMS(6, 3), NULL);
    mark(g, node(g, IR_OP_LINEAR, IR_F32, 2, IN(h6, w6), 1, AT(aint(IR_ATTR_ACTIVATION, 3)))); /* K = 6: unaligned rows */
    int qkv = input(g, "qkv", 3, DIMS(-1, 5, 24));
    mark(g, node(g, IR_OP_ATTENTION, IR_F32, 1, IN(qkv), 5,
                AT(aint(IR_ATTR_HEADS, 2), aint(IR_ATTR_HEAD_SIZE, 4), aint(IR_ATTR_QKV_LAYOUT, 1),
                   aflt(IR_ATTR_SCALE, 0.5f), aflt(IR_ATTR_POST_SCALE, 0.25f))));
    int qkv16 = input(g, "qkv16", 3, DIMS(-1, 70, 96)); /* 70 tokens: partial query and key blocks */
    mark(g, node(g, IR_OP_ATTENTION, IR_F32, 1, IN(qkv16), 3,
                AT(aint(IR_ATTR_HEADS, 2), aint(IR_ATTR_HEAD_SIZE, 16), aflt(IR_ATTR_SCALE, 0.25f))));
    mark(g, node(g, IR_OP_ATTENTION, IR_F32, 1, IN(qkv16), 4,
                AT(aint(IR_ATTR_HEADS, 2), aint(IR_ATTR_HEAD_SIZE, 16), aint(IR_ATTR_QKV_LAYOUT, 1),
                   aflt(IR_ATTR_SCALE, 0.25f))));
    check_graph("bn-fused", g, ALL);
}

/* ---- the runtime on a fake driver ---- */

/* Builds tests/fake_libcuda.c as cachedir/fakecuda/libcuda.so.1 (once). */
static void build_fake_driver(char *dir, size_t n)
{
    snprintf(dir, n, "%s/fakecuda", cachedir);
    mkdir(dir, 0755);
    char so[8300], src[4096], cmd[32768], tmp[8400];
    snprintf(so, sizeof so, "%.8000s/libcuda.so.1", dir);
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", so, (long)getpid());
    tu_path(src, sizeof src, "tests/fake_libcuda.c");
    const char *cc = getenv("CC");
    snprintf(cmd, sizeof cmd, "%s -std=c11 -O1 -shared -fPIC '%s' -o '%s' -ldl 2>&1 && mv '%s' '%s'",
             cc && *cc ? cc : "cc", src, tmp, tmp, so);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char out[8192];
    size_t r = fread(out, 1, sizeof out - 1, p);
    out[r] = 0;
    if (pclose(p) != 0)
        fail_msg("building the fake driver failed:\n%s", out);
}

static int count_lines(const char *path, const char *prefix)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strncmp(line, prefix, strlen(prefix)) == 0;
    fclose(f);
    return n;
}

/* Runs vitc with args; returns its exit code, stdout+stderr into text. */
static int vitc_text(const char *const *args, char *text, size_t n)
{
    char *out, *err;
    int rc = tu_run_vitc(args, &out, &err);
    snprintf(text, n, "%s%s", out ? out : "", err ? err : "");
    free(out), free(err);
    return rc;
}

/* The runtime's CUDA executor end to end (driver loading, image choice by
 * architecture, graphs captured once and replayed, the shared memory opt-in,
 * copies in and out) on tests/fake_libcuda.c, whose kernels run on the
 * emulation; then test_cuda_gpu, the GPU test itself, on the same. */
static void test_runtime_on_fake_driver(void **state)
{
    (void)state;
    char fake[8300], trace[8300], text[65536];
    build_fake_driver(fake, sizeof fake);
    const char *old = getenv("LD_LIBRARY_PATH");
    char ld[16384];
    snprintf(ld, sizeof ld, "%s%s%s", fake, old && *old ? ":" : "", old && *old ? old : "");
    char *saved = old ? strdup(old) : NULL;
    setenv("LD_LIBRARY_PATH", ld, 1);
    setenv("VITC_FAKE_CUDA_EMU_DIR", emudir, 1);
    snprintf(trace, sizeof trace, "%s/trace", tmpdir);
    setenv("VITC_FAKE_CUDA_TRACE", trace, 1);

    /* 1. the image for each architecture, the graph captured once */
    char model[4096], so[8300], cu[8300], emu[8300], in[4096], outdir[8300];
    tu_path(model, sizeof model, "tests/models/timm-ts17.onnx");
    tu_path(in, sizeof in, "tests/models/timm.b3.input.npy");
    snprintf(so, sizeof so, "%s/timm.so", tmpdir);
    snprintf(cu, sizeof cu, "%s/timm.cu", tmpdir);
    snprintf(outdir, sizeof outdir, "%s/out", tmpdir);
    mkdir(outdir, 0755);
    const char *c1[] = {model, "--target", "cuda", "-o", so, NULL};
    const char *c2[] = {model, "--emit", "cuda", "-o", cu, NULL};
    run_vitc(c1, so);
    run_vitc(c2, cu);
    build_emulation(cu, emu, sizeof emu);
    static const struct {
        const char *arch, *want;
    } archs[] = {{"90", "load cubin sm_90"}, {"86", "load cubin sm_80"}, {"89", "load cubin sm_80"},
                 {"100", "load ptx"}, {"75", NULL}};
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++) {
        unlink(trace);
        setenv("VITC_FAKE_CUDA_ARCH", archs[i].arch, 1);
        const char *run[] = {"run", so, "--input", in, "--output-dir", outdir, "--repeat", "3", NULL};
        int rc = vitc_text(run, text, sizeof text);
        print_message("fake sm_%s: vitc run exit %d, %d image(s) loaded as '%s', %d graph(s) captured, %d replays\n",
                      archs[i].arch, rc, count_lines(trace, "load"), archs[i].want ? archs[i].want : "-",
                      count_lines(trace, "instantiate"), count_lines(trace, "graph launch"));
        if (!archs[i].want) { /* sm_75: no code for it, said clearly */
            assert_int_equal(rc, 2);
            if (!strstr(text, "has code for sm_80, sm_90, compute_90"))
                fail_msg("sm_75: %s", text);
            continue;
        }
        if (rc != 0)
            fail_msg("fake sm_%s: vitc run exited %d:\n%s", archs[i].arch, rc, text);
        assert_int_equal(count_lines(trace, archs[i].want), 1);
        assert_int_equal(count_lines(trace, "instantiate"), 1);
        assert_int_equal(count_lines(trace, "graph launch"), 3);
    }
    unsetenv("VITC_FAKE_CUDA_ARCH");

    /* 2. a batch where the 128x128 GEMM tile takes over: more than 48 KiB of
     * shared memory, which the runtime must opt into */
    tu_path(model, sizeof model, "tests/models/face_ln-ts17.onnx");
    snprintf(so, sizeof so, "%s/face.so", tmpdir);
    snprintf(cu, sizeof cu, "%s/face.cu", tmpdir);
    const char *c3[] = {model, "--target", "cuda", "--batch", "128", "-o", so, NULL};
    const char *c4[] = {model, "--emit", "cuda", "--batch", "128", "-o", cu, NULL};
    run_vitc(c3, so);
    run_vitc(c4, cu);
    build_emulation(cu, emu, sizeof emu);
    size_t len;
    char *prog = slurp(cu, &len);
    assert_non_null(prog);
    int large = strstr(prog, "vk::gemm_tc<h16, 128, 128") != NULL;
    free(prog);
    if (!large)
        fail_msg("face_ln at batch 128 has no 128x128 GEMM tile to test the shared memory opt-in with");
    const char *cmp[] = {"compare", model, so, "--batch", "120", NULL};
    int rc = vitc_text(cmp, text, sizeof text);
    print_message("fake sm_90: vitc compare face_ln-ts17 at batch 120 (128x128 tiles, 61440 bytes of shared "
                  "memory): exit %d\n%s",
                  rc, text);
    assert_int_equal(rc, 0);

    /* 3. the GPU test, on the fake device (not under a sanitizer: it repeats
     * the fixtures' emulation above through the slower instrumented tools) */
    char self[4096], cmd[16384];
    if (SANITIZED) {
        print_message("test_cuda_gpu on the fake driver: not run in the sanitizer build (run in the normal one)\n");
        goto restore;
    }
    ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
    assert_true(k > 0);
    self[k] = 0;
    snprintf(cmd, sizeof cmd, "'%s/test_cuda_gpu' 2>&1", dirname(self));
    unlink(trace);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t r = fread(text, 1, sizeof text - 1, p);
    text[r] = 0;
    rc = pclose(p);
    print_message("test_cuda_gpu on the fake driver: exit status %d\n%s", rc, text);
    if (rc != 0 || !strstr(text, "device: fake CUDA device") || !strstr(text, "[  PASSED  ] 2 test(s)"))
        fail_msg("test_cuda_gpu failed on the fake driver");

restore:
    if (saved) {
        setenv("LD_LIBRARY_PATH", saved, 1);
        free(saved);
    } else {
        unsetenv("LD_LIBRARY_PATH");
    }
    unsetenv("VITC_FAKE_CUDA_EMU_DIR");
    unsetenv("VITC_FAKE_CUDA_TRACE");
}

static int setup(void **state)
{
    (void)state;
    nfixtures = tu_fixtures(fixtures, 64);
    if (!tu_tmpdir(tmpdir, sizeof tmpdir))
        return -1;
    /* one cache for every build directory (the sanitizer build compiles the
     * same programs): NVRTC images and emulation libraries, keyed by program */
    const char *t = getenv("TMPDIR");
    snprintf(cachedir, sizeof cachedir, "%s/vitc-cuda-test-cache-%ld", t && *t ? t : "/tmp", (long)getuid());
    mkdir(cachedir, 0755);
    setenv("VITC_NVRTC_CACHE", cachedir, 0);
    /* emulation libraries depend on the emulation too: a directory per version of it */
    char hdr[4096];
    size_t len;
    char *text = slurp(tu_path(hdr, sizeof hdr, "tests/cuda_emu.h"), &len);
    if (!text)
        return -1;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)text[i];
        h *= 0x100000001b3ull;
    }
    free(text);
    snprintf(emudir, sizeof emudir, "%s/emu-%016llx", cachedir, (unsigned long long)h);
    mkdir(emudir, 0755);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (getenv("VITC_KEEP_TMP")) /* for debugging: the programs and models stay */
        print_message("kept %s\n", tmpdir);
    else
        tu_rmtree(tmpdir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixtures_emulated),
        cmocka_unit_test(test_ops_emulated),
        cmocka_unit_test(test_runtime_on_fake_driver),
    };
    if (getenv("VITC_TEST_FILTER")) /* e.g. test_ops_emulated, when debugging */
        cmocka_set_test_filter(getenv("VITC_TEST_FILTER"));
    return cmocka_run_group_tests(tests, setup, teardown);
}

#else

static void test_cuda_backend_not_built(void **state)
{
    (void)state;
    skip(); /* this vitc was configured without the CUDA backend (no NVRTC): nothing to emulate */
}

int main(void)
{
    print_message("skipped: the CUDA backend is not built (configure with the CUDA toolkit, -DVITC_CUDA=ON)\n");
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_cuda_backend_not_built)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#endif
