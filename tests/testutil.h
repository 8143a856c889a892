/* testutil.h: what the cmocka tests share: paths, the fixture manifest,
 * running the vitc CLI and capturing its output, a builder for small
 * hand-made graphs, and running a graph through the interpreter, a compiled
 * CPU .so and (built with CUDA) the CUDA emulation. */
#ifndef VITC_TESTUTIL_H
#define VITC_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "ir/ir.h"

/* ---- skipping: ctest reports a program that skipped a case as skipped ---- */

/* The exit status ctest reads as "skipped" (SKIP_RETURN_CODE in tests/CMakeLists.txt). */
#define TU_SKIP_RC 77
extern int tu_skipped;
/* Skips the running case and remembers it. */
#define tu_skip()          \
    do {                   \
        tu_skipped++;      \
        skip();            \
    } while (0)
/* cmocka_run_group_tests, exiting with the failures, else TU_SKIP_RC if a case was skipped, else 0. */
#define tu_run_group(tests, setup, teardown) tu_exit_status(cmocka_run_group_tests(tests, setup, teardown))
int tu_exit_status(int failures);

/* The --precision bf16 paths on the CPU: amx, the Linear layers on AMX tiles,
 * else on AVX512-BF16 (VDPBF16PS).  1 if this CPU has what the path needs
 * (with amx, the tile registers granted to this process, as the loader asks
 * for them); else 0, having printed why and skipped the running case. */
int tu_bf16_cpu(int amx);

/* The main() of a test program: its cases, test functions named as written,
 * run as one group with setup and teardown (either may be NULL); with env
 * VITC_TEST_FILTER set, only the cases whose names match one of its
 * comma-separated glob patterns (e.g. test_ops_emulated when debugging,
 * "test_zoo_*,test_narrow_*"); with VITC_TEST_SKIP_FILTER, not those that
 * match one of its patterns.  Exits as tu_run_group. */
#define TU_MAIN(setup, teardown, ...)                                                                    \
    int main(void)                                                                                       \
    {                                                                                                    \
        static const CMUnitTestFunction tu_cases[] = {__VA_ARGS__};                                      \
        return tu_main(#__VA_ARGS__, tu_cases, sizeof tu_cases / sizeof *tu_cases, setup, teardown);     \
    }
/* names: the cases' names separated by commas. */
int tu_main(const char *names, const CMUnitTestFunction *cases, size_t n, CMFixtureFunction setup,
            CMFixtureFunction teardown);

/* 1 in an AddressSanitizer build, where tests may take a lighter path. */
#if defined(__SANITIZE_ADDRESS__)
#define TU_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TU_SANITIZED 1
#endif
#endif
#ifndef TU_SANITIZED
#define TU_SANITIZED 0
#endif

/* Source tree root (env VITC_SOURCE_DIR, else "."). */
const char *tu_source_dir(void);
/* Joins the source root with a relative path into a static-free buffer. */
char *tu_path(char *buf, size_t n, const char *rel);

typedef struct {
    char model[96];    /* file name inside tests/models */
    char family[32];
    char exporter[16]; /* ts13, ts17, dynamo */
    int opset, depth, heads, width, tokens, image, has_batchnorm;
} tu_fixture;

/* Reads tests/models/fixtures.tsv; returns the count (0 if missing). */
int tu_fixtures(tu_fixture *out, int max);

/* The model at rel (relative to the source root) imported, verified and with
 * shapes inferred, else the test fails naming it. */
ir_graph *tu_load_model(const char *rel);
/* The fixture's model, tests/models/<model>, as tu_load_model. */
ir_graph *tu_load_fixture(const tu_fixture *fx);
/* An .npy file (an absolute path, or relative to the source root) into t, else the test fails. */
void tu_read_npy(const char *path, ir_tensor *t);
/* The fixture's inputs at batch 1 and 3 (tests/models/<family>.b1|b3.input.npy)
 * into in[], and the interpreter's outputs of g for them into ref[]. */
void tu_fixture_reference(const tu_fixture *fx, const ir_graph *g, ir_tensor in[2], ir_tensor ref[2]);
/* The fixture's model path into model, its inputs and the interpreter's
 * references (tu_load_fixture, then tu_fixture_reference; the graph freed). */
void tu_fixture_case(const tu_fixture *fx, char *model, size_t n, ir_tensor in[2], ir_tensor ref[2]);

/* The bars of the CUDA runs, relative error max |out - ref| / max |ref|
 * against an fp32 reference, per precision; the project states them here
 * once (README and bench/kit/gpu_check.py point here):
 *   fp32 1e-4;
 *   tf32 2e-3 with cosine >= 0.9999: 10-bit mantissa products; measured worst
 *        1.32e-3 on the emulated fixtures (test_cuda_emu, batch 1 and 3) and
 *        1.37e-3 on an H100 at batch 256 (bench/results-gpu.md);
 *   fp16, bf16 1e-2 with cosine >= 0.9999. */
#define TU_BAR_FP32 1e-4
#define TU_BAR_TF32 2e-3
#define TU_BAR_HALF 1e-2
#define TU_BAR_COSINE 0.9999
/* The error bar of precision pi of fp32, tf32, fp16, bf16 (the order of the CUDA tests). */
double tu_precision_bar(int pi);
/* Whether relative errors e[b] and cosines cos[b] of both batches b meet the
 * bars of precision pi (fp32, tf32, fp16, bf16); raises worst[pi] to the errors. */
int tu_precision_ok(int pi, const double e[2], const double cos[2], double worst[4]);
/* Prints the worst errors of each precision, then fails if failures > 0. */
void tu_precision_report(const double worst[4], int failures);

/* The NVRTC cache that build directories share ($TMPDIR/vitc-cuda-test-cache-<uid>,
 * made if missing), set as VITC_NVRTC_CACHE unless that is set; returns its path. */
const char *tu_nvrtc_cache(void);

/* Runs the vitc binary (env VITC_BIN) with args (NULL-terminated, without
 * argv[0]); captures stdout and stderr into malloc'ed strings (free them).
 * Returns the exit code, or -1 if it could not run or was killed. */
int tu_run_vitc(const char *const *args, char **out, char **err);

/* The whole file, NUL-terminated (free it); NULL if unreadable. */
char *tu_read_file(const char *path, size_t *len);

/* A fresh temporary directory (mkdtemp); removed by tu_rmtree. */
char *tu_tmpdir(char *buf, size_t n);
void tu_rmtree(const char *dir);
/* A cmocka group teardown for a group setup that left its tu_tmpdir in *state:
 * removes it, or names it and keeps it when VITC_KEEP_TMP is set (for debugging). */
int tu_teardown_tmpdir(void **state);

/* ---- random numbers: one seeded LCG, so each test file's numbers repeat ---- */

void tu_seed(uint64_t seed);
float tu_rnd(void); /* uniform in [-1, 1) */

/* ---- building graphs ----
 *   ir_graph *g = tu_graph_new("test.onnx", 18);
 *   int x = tu_input(g, "x", IR_F32, 3, TU_DIMS(-1, 5, 6));   (-k: k times the batch)
 *   int w = tu_const_f32(g, "w", 2, TU_DIMS(6, 4), NULL);     (NULL: tu_rnd() values)
 *   tu_output(g, tu_node(g, IR_OP_MATMUL, NULL, IR_F32, 2, TU_IN(x, w), 0, NULL));
 * Every helper asserts success. */

#define TU_IN(...) (int[]){__VA_ARGS__}
#define TU_AT(...) (ir_attr[]){__VA_ARGS__}
#define TU_DIMS(...) (int64_t[]){__VA_ARGS__}

/* An empty graph read from file (for messages) at opset; room for TU_MAX_IO inputs and outputs. */
#define TU_MAX_IO 256
ir_graph *tu_graph_new(const char *file, int64_t opset);
/* A graph input; dims[i] < 0 means -dims[i] times the batch. */
int tu_input(ir_graph *g, const char *name, ir_dtype dt, int rank, const int64_t *dims);
/* A float constant: vals, or tu_rnd() values when vals is NULL. */
int tu_const_f32(ir_graph *g, const char *name, int rank, const int64_t *dims, const float *vals);
/* A float constant of tu_rnd() * amp values. */
int tu_const_rand(ir_graph *g, const char *name, int rank, const int64_t *dims, float amp);
int tu_const_i64(ir_graph *g, const char *name, int rank, const int64_t *dims, const int64_t *vals);
/* A 1-D int64 constant of n values (shapes, axes, starts). */
int tu_const_ints(ir_graph *g, const char *name, int n, const int64_t *vals);
int tu_scalar(ir_graph *g, const char *name, float x);
/* A value a node will produce. */
int tu_value(ir_graph *g, const char *name, ir_dtype dt);
/* y = op(in...) with one fresh output of dtype dt, returned.  name NULL: the
 * node and y are both called n<node index>; else y is called NAME:0. */
int tu_node(ir_graph *g, ir_op op, const char *name, ir_dtype dt, int nin, const int *in, int nattrs,
            const ir_attr *attrs);
/* A node with given outputs; returns its index. */
int tu_node_out(ir_graph *g, ir_op op, const char *name, int nin, const int *in, int nout, const int *out,
                int nattrs, const ir_attr *attrs);
void tu_output(ir_graph *g, int v);
ir_attr tu_int(ir_attr_id id, int64_t i);
ir_attr tu_float(ir_attr_id id, float f);
ir_attr tu_str(ir_attr_id id, const char *s);
ir_attr tu_ints(ir_graph *g, ir_attr_id id, int n, const int64_t *v);
ir_attr tu_floats(ir_graph *g, ir_attr_id id, int n, const float *v);
/* parts[i] = Gather(x, i) along axis 0 for i < n (torch's unbind as
 * exported), node i named prefix + i. */
void tu_unbind(ir_graph *g, int x, int n, const char *prefix, int *parts);
/* Shapes inferred and the graph verified, else the test fails naming what. */
void tu_check_graph(ir_graph *g, const char *what);
/* The nodes of op in g. */
int tu_count_op(const ir_graph *g, ir_op op);

/* ---- graphs every backend runs (the callers may add nodes) ---- */

/* Conv: direct (groups, pads, strides, dilations) on x [B,4,9,7] and 1-D on x1 [B,3,10]. */
ir_graph *tu_graph_conv(void);
/* On x [B,5,6] (the input): ReduceSum over axis 1 without keepdims, ReduceMax
 * over axes {0,2} given as an input, ReduceMean over all, Softmax over axis 1. */
ir_graph *tu_graph_reduce(void);
/* Element-wise float ops on x [B,3,4] and y [4] (the inputs), broadcasting:
 * Sigmoid, Tanh of Exp, Reciprocal of -Log(|x| + 1), Max, Min of three, Pow,
 * Sqrt, fmod, Clip, tanh-Gelu of Relu, Erf of a Div. */
ir_graph *tu_graph_elementwise(void);
/* Data movement on x [B,4,6]: Transpose, Slice with a negative step, Gather
 * (indices {3,0,2} and {3,0,-2} on axis 1, a scalar -1 on axis 2), Concat on
 * the last and the batch axis, Split, Expand of a constant; a Reshape view, the
 * input and the constant are outputs too. */
ir_graph *tu_graph_data(void);
/* Matrix products on a [B,2,3,4] (the first input): MatMul with a B shared by
 * every batch, batched, and with a constant weight (packed); Gemm with transB,
 * alpha and beta. */
ir_graph *tu_graph_matmul(void);
/* BatchNormalization, Linear with residual and GELU, without bias and with
 * RELU6, with K = 6 (unaligned rows); Attention in both layouts, with a post
 * scale, and over 70 tokens (partial query and key blocks), with a bias, and
 * cross-attention with a broadcast bias. */
ir_graph *tu_graph_fused(void);

/* ---- running graphs ---- */

/* A float tensor of tu_rnd() values (vals NULL) or vals. */
ir_tensor tu_f32_tensor(int rank, const int64_t *dims, const float *vals);
/* Random inputs of g at a batch: floats 2 tu_rnd(), integers floor(20 tu_rnd()). */
void tu_random_inputs(const ir_graph *g, int64_t batch, ir_tensor *in);
/* The interpreter; diagnostics into *msg (free it; NULL: dropped).  Returns the status. */
int tu_interpret(const ir_graph *g, const ir_tensor *in, ir_tensor *out, char **msg);
/* The interpreter, failing the test with its message if it fails. */
void tu_interpret_ok(const ir_graph *g, const ir_tensor *in, ir_tensor *out);
/* max |a - b| / max |b| for floats; 0 or 1 (any element differs) for integers and bools. */
double tu_error(const ir_tensor *a, const ir_tensor *b);
double tu_cosine(const ir_tensor *a, const ir_tensor *b);
/* Compiles g with the LLVM backend into so; diagnostics into *msg if given.  Returns the status. */
int tu_compile_cpu(ir_graph *g, const char *so, int opt_level, int64_t max_batch, char **msg);
/* The same for the named CPU (LLVM's name, "haswell"; NULL: the host's) and its features. */
int tu_compile_cpu_as(ir_graph *g, const char *so, int opt_level, int64_t max_batch, const char *cpu, char **msg);
/* Sets (on) or unsets (!on) the environment variables of the n "NAME=VALUE" assignments in kv,
 * stopping at the first NULL: the VITC_* knobs a test compiles with. */
void tu_set_knobs(const char *const *kv, int n, int on);
/* Runs a compiled .so through the runtime at the batch of its inputs; allocates the outputs. */
void tu_run_so(const char *so, const ir_tensor *in, int nin, ir_tensor *out, int nout, int64_t batch);

#ifdef VITC_HAVE_CUDA
/* ---- the CUDA emulation (tests/cuda_emu.h) ---- */

/* The cache of NVRTC images and emulation libraries (one per version of
 * cuda_emu.h), shared by build directories; sets VITC_NVRTC_CACHE.  0 on success. */
int tu_emu_init(void);
const char *tu_emu_cache_dir(void);
const char *tu_emu_dir(void);
/* Builds the program cu (from --emit cuda) into a host library, cached by program id. */
void tu_emu_build(const char *cu, char *so, size_t n);
/* The same with the kernels' sm_90a bodies (wgmma, TMA, mbarrier) where sm90a is set. */
void tu_emu_build_as(const char *cu, int sm90a, char *so, size_t n);
/* Runs the launch plan of model_so at a batch on the emulation library emu_so, as the
 * runtime would (on an sm_90a library as with the sm_90a image); allocates the outputs;
 * *nlaunches gets the launches run. */
void tu_emulate(const char *model_so, const char *emu_so, int64_t batch, const ir_tensor *in, int nin,
                ir_tensor *out, int nout, int *nlaunches);
/* The same, returning -1 with the reason in err (no outputs) where a launch fails. */
int tu_emulate_try(const char *model_so, const char *emu_so, int64_t batch, const ir_tensor *in, int nin,
                   ir_tensor *out, int nout, int *nlaunches, char *err, size_t errlen);
#endif

#endif
