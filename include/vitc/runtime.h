/* vitc/runtime.h: loading and running a model compiled by vitc.
 *
 *   vitc_model *m;  vitc_context *c;
 *   if (vitc_model_load("vit.so", &m)) { fprintf(stderr, "%s\n", vitc_last_error()); ... }
 *   vitc_context_create(m, 0, &c);            // 0 threads: all cores
 *   vitc_tensor in = {.dtype = VITC_DTYPE_F32, .rank = 4, .dims = {8, 3, 224, 224}, .data = pixels};
 *   vitc_tensor out = {.dtype = VITC_DTYPE_F32, .rank = 2, .dims = {8, 1000}, .data = logits};
 *   vitc_run(c, &in, 1, &out, 1);
 *
 * Every function returns a status; on failure vitc_last_error() (per thread)
 * says what was wrong.  Nothing here aborts on bad arguments.  A model may be
 * run from several contexts on several threads at once; one context is used
 * by one thread at a time. */
#ifndef VITC_RUNTIME_H
#define VITC_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define VITC_API __attribute__((visibility("default")))
#else
#define VITC_API
#endif

typedef enum {
    VITC_STATUS_OK = 0,
    VITC_STATUS_INVALID_ARGUMENT, /* NULL pointer, bad count, unknown name */
    VITC_STATUS_LOAD_FAILED,      /* file missing, not a vitc model, external weights bad */
    VITC_STATUS_ABI_MISMATCH,     /* compiled by an incompatible vitc */
    VITC_STATUS_SHAPE_MISMATCH,   /* a tensor's rank or dims differ from the model's */
    VITC_STATUS_DTYPE_MISMATCH,
    VITC_STATUS_BATCH_OUT_OF_RANGE, /* batch < 1 or above the compiled limit, or not the one an export fixed */
    VITC_STATUS_OUT_OF_MEMORY,
    VITC_STATUS_NO_DEVICE,        /* a CUDA model where no GPU or driver is usable */
    VITC_STATUS_INTERNAL
} vitc_status;

typedef enum { VITC_DTYPE_F32 = 1, VITC_DTYPE_I64 = 7 } vitc_dtype; /* ONNX codes */

#define VITC_MAX_RANK 8

typedef struct {
    const char *name;     /* NULL: matched by position */
    int32_t dtype;        /* vitc_dtype */
    int32_t rank;
    int64_t dims[VITC_MAX_RANK];
    void *data;           /* inputs are only read */
} vitc_tensor;

/* A model's input or output: dims[i] times the batch where is_batch[i]. */
typedef struct {
    const char *name;
    int32_t dtype, rank;
    int64_t dims[VITC_MAX_RANK];
    uint8_t is_batch[VITC_MAX_RANK];
} vitc_tensor_info;

typedef struct vitc_model vitc_model;
typedef struct vitc_context vitc_context;

/* Loads a model to run it.  Its descriptor is read from the file and
 * checked (ABI, fields, the CPU features it was compiled for against this
 * machine's) before the file is opened as a library, so a model this
 * machine cannot run is refused before any of its code runs.  A CPU model's
 * weights (2 MiB and more) are copied into memory backed by transparent huge
 * pages, as is each context's workspace: about 5% faster on ViT-B/16.
 * VITC_HUGE_PAGES=0 in the environment uses the weights in place in the
 * mapped file instead (shared between processes that load the same file). */
VITC_API vitc_status vitc_model_load(const char *path, vitc_model **out);
/* Reads what a model says about itself without loading it: the file is
 * parsed as ELF data and never opened as a library, so nothing in it runs
 * (safe on a file you do not trust).  Everything below answers as for a
 * loaded model, except that vitc_context_create refuses it. */
VITC_API vitc_status vitc_model_read(const char *path, vitc_model **out);
VITC_API void vitc_model_free(vitc_model *m);
VITC_API int vitc_model_num_inputs(const vitc_model *m);
VITC_API int vitc_model_num_outputs(const vitc_model *m);
VITC_API vitc_status vitc_model_input(const vitc_model *m, int i, vitc_tensor_info *info);
VITC_API vitc_status vitc_model_output(const vitc_model *m, int i, vitc_tensor_info *info);
/* The input shapes a model was compiled for (vitc compile --shapes): 1 for
 * a model of one shape, whose inputs and outputs vitc_model_input/output
 * give.  A model of several runs each: vitc_run takes the one whose inputs
 * have the dimensions given (but for the batch), and refuses other sizes.
 * vitc_model_input/output describe shape 0; these describe shape s, from 0
 * to vitc_model_num_shapes(m) - 1 (the same names, dtypes and ranks). */
VITC_API int vitc_model_num_shapes(const vitc_model *m);
VITC_API vitc_status vitc_model_shape_input(const vitc_model *m, int s, int i, vitc_tensor_info *info);
VITC_API vitc_status vitc_model_shape_output(const vitc_model *m, int s, int i, vitc_tensor_info *info);
/* The batches a model runs: 1 to its --batch, or, for a model whose ONNX
 * export fixed the batch (the first dimension of its inputs a number, not
 * symbolic), that batch only: min and max are then both that number, and
 * its inputs and outputs (vitc_model_input) are written with it, no
 * dimension marked is_batch.  -1 for NULL. */
VITC_API int64_t vitc_model_max_batch(const vitc_model *m);
VITC_API int64_t vitc_model_min_batch(const vitc_model *m);
VITC_API const char *vitc_model_target(const vitc_model *m);   /* "cpu" or "cuda" */
VITC_API const char *vitc_model_compiler_version(const vitc_model *m);
/* The arithmetic it was compiled for: a CUDA model's --precision; a CPU
 * model's "fp32", or "bf16" (--precision bf16: Linear layers on AMX tiles). */
VITC_API const char *vitc_model_precision(const vitc_model *m);
/* The compiler's VITC_* environment variables that changed the model's code
 * (set to other than their defaults when it was compiled), as "NAME=VALUE"
 * separated by spaces: "" when none, NULL when the model does not say (one
 * compiled before vitc recorded them). */
VITC_API const char *vitc_model_knobs(const vitc_model *m);

/* Everything else the model's descriptor says, for tools such as `vitc inspect`.
 * Strings belong to the model (valid until vitc_model_free); "" when unset. */
typedef struct {
    int abi_version;
    const char *compiler_version;
    const char *target;           /* "cpu" or "cuda" */
    const char *triple, *cpu, *features;
    const char *source;           /* the ONNX file it was compiled from */
    int64_t max_batch;            /* vitc_model_max_batch */
    uint64_t workspace_bytes;     /* per context */
    uint64_t weights_bytes;
    const char *weights_file;     /* external weights beside the .so, NULL when embedded */
    uint64_t weights_fnv1a;       /* external weights' checksum (0 for embedded weights of CPU models) */
    int nkernels;
    const char *const *kernel_names;
    uint64_t source_hash;         /* hash of the ONNX file's bytes (runtime/abi.h vitc_model_hash); 0: unknown */
} vitc_model_details;

VITC_API vitc_status vitc_model_get_details(const vitc_model *m, vitc_model_details *out);

/* What a CUDA model carries besides the above (INVALID_ARGUMENT for a CPU
 * model): its precision, one code image per GPU target ("sm_80", "sm_90"
 * CUBINs run on those architectures, "compute_90" PTX is compiled by the
 * driver for later ones), its kernels and launches, device memory per context. */
#define VITC_MAX_CUDA_IMAGES 8
typedef struct {
    const char *precision;        /* "fp32", "tf32", "fp16" or "bf16" */
    int nimages;
    struct {
        char target[16];          /* "sm_80", "sm_90a", "compute_90" */
        const char *kind;         /* "cubin" or "ptx" */
        uint64_t bytes;
    } images[VITC_MAX_CUDA_IMAGES];
    int nfunctions, nlaunches;
    uint64_t workspace_bytes;     /* device memory per context */
} vitc_cuda_details;

VITC_API vitc_status vitc_model_cuda_details(const vitc_model *m, vitc_cuda_details *out);

/* Launch i (0 <= i < nlaunches) of a CUDA model's plan, in the order a run
 * enqueues them: its kernel (kernel_names[function] of vitc_model_details),
 * the batches it runs at (a layer's kernel can change with the batch: a GEMM
 * tile, a split of K), threads a block and dynamic shared memory, and that
 * of the arch-specific image (sm_90a) where it differs (else 0). */
typedef struct {
    int function;
    int64_t min_batch, max_batch;
    uint32_t block, shared_bytes, shared_bytes_specific;
} vitc_cuda_launch_info;

VITC_API vitc_status vitc_model_cuda_launch(const vitc_model *m, int i, vitc_cuda_launch_info *out);

/* The CUDA device CUDA models run on (VITC_CUDA_DEVICE, default 0): its
 * name and architecture (major * 10 + minor, 90 for an H100).  NO_DEVICE,
 * with the reason in vitc_last_error(), where the driver (libcuda, loaded at
 * run time) or a device is missing.  name or arch may be NULL. */
VITC_API vitc_status vitc_cuda_device(char *name, size_t len, int *arch);

/* nthreads 0: one per online core, or VITC_NUM_THREADS when that is set to
 * 1..1024.  The calling thread is one of them: nthreads - 1 workers start
 * here, sleep when idle and stop in vitc_context_free.  Each context owns its
 * workspace (the model's planned activation memory).  Free every context of a
 * model before the model. */
VITC_API vitc_status vitc_context_create(vitc_model *m, int nthreads, vitc_context **out);
VITC_API void vitc_context_free(vitc_context *c);
/* Threads the context runs on, the caller's included (-1 for NULL). */
VITC_API int vitc_context_num_threads(const vitc_context *c);

/* Runs the model.  The batch is read from the inputs; every input and output
 * is checked against the model (count, names if given, dtype, rank, dims,
 * one batch size from 1 to the compiled limit) before anything runs. */
VITC_API vitc_status vitc_run(vitc_context *c, const vitc_tensor *inputs, int ninputs, vitc_tensor *outputs,
                     int noutputs);

/* vitc_run for a CUDA model on tensors already in the GPU's memory: every
 * data pointer is a device address (a CUdeviceptr cast to void *, e.g. a
 * torch tensor's data_ptr()) on the context's device, in the current CUDA
 * context's address space.  Inputs are copied device to device into the
 * context's workspace, outputs back out, on the context's own non-blocking
 * stream, which does not wait for other streams: work that writes the inputs
 * must be complete (synchronise it) before the call.  Returns when the
 * outputs are written.  The same checks as vitc_run; INVALID_ARGUMENT for a
 * CPU model. */
VITC_API vitc_status vitc_run_device(vitc_context *c, const vitc_tensor *inputs, int ninputs, vitc_tensor *outputs,
                                     int noutputs);

/* The GPU time of the context's last successful run, in milliseconds:
 * CUDA events on its stream around the model's kernels (the input and
 * output copies excluded).  INVALID_ARGUMENT for a CPU model or before the
 * first run. */
VITC_API vitc_status vitc_context_device_ms(const vitc_context *c, double *ms);

/* Profiling: time per part of a run, a part being the code of one node of
 * the compiled graph (one or more kernels) for a CPU model, one launch of
 * its plan for a CUDA model.  Turning it on clears the counts; every later
 * vitc_run adds each part's time and a call (a CPU part's wall time; a CUDA
 * launch's GPU time from CUDA events, the kernels launched one by one,
 * without the graph, while profiling is on); turning it off keeps the
 * counts.  INVALID_ARGUMENT for a CPU model without profile marks (one
 * compiled before vitc made them): the message says so. */
VITC_API vitc_status vitc_context_set_profiling(vitc_context *c, int on);
typedef struct {
    const char *kernels;   /* the compiled functions the part runs, comma-separated */
    const char *op;        /* the op of the compiled graph ("Linear", "Attention", ...); CUDA: the
                            * kernel label's first word ("gemm", "attention", "layernorm", ...) */
    const char *source;    /* the ONNX node(s) it came from: "NAME (OP_TYPES)"; CUDA: the kernel's
                            * label and the batches the launch runs at */
    int64_t calls;         /* runs that went through it since profiling was turned on */
    double seconds;        /* wall time in it, summed over those calls */
} vitc_profile_part;
/* The parts of the model's runs, in run order (-1 with an error where the
 * model has none); part i's counts so far. */
VITC_API int vitc_context_profile_parts(const vitc_context *c);
VITC_API vitc_status vitc_context_profile_part(const vitc_context *c, int i, vitc_profile_part *out);

VITC_API const char *vitc_status_string(vitc_status s);
/* The message of this thread's last failed call ("" if none). */
VITC_API const char *vitc_last_error(void);

#ifdef __cplusplus
}
#endif
#endif
