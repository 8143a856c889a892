/* abi.h: the contract between a compiled model (.so) and the runtime that
 * loads it.  A model .so exports one symbol, VITC_ABI_SYMBOL, a const
 * vitc_abi_model; the runtime dlopens the file, checks abi_version and size,
 * and calls run() with the buffers it planned.  Bump VITC_ABI_VERSION (and the
 * symbol's suffix) on any change to these structs. */
#ifndef VITC_ABI_H
#define VITC_ABI_H

#include <stddef.h>
#include <stdint.h>

#define VITC_ABI_VERSION 1
#define VITC_ABI_SYMBOL "vitc_model_v1"
#define VITC_ABI_MAX_RANK 8

/* FNV-1a 64: the checksum of the weights (weights_fnv1a), and the one hash
 * the compiler uses to name what it caches.  Start from VITC_FNV1A_INIT; a
 * result can be passed back as h to hash more bytes after the first. */
#define VITC_FNV1A_INIT 0xcbf29ce484222325ull
static inline uint64_t vitc_fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *s = (const unsigned char *)p;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* The hash of an ONNX file a model records (source_fnv1a) and `vitc compare`
 * checks: FNV-1a's step over 64-bit little-endian words (then the bytes left
 * over), eight times faster than over bytes on a model of hundreds of MB. */
static inline uint64_t vitc_model_hash(const void *p, size_t n)
{
    const unsigned char *s = (const unsigned char *)p;
    uint64_t h = VITC_FNV1A_INIT;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w = 0;
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        __builtin_memcpy(&w, s + i, 8); /* the same word, one load */
#else
        for (int k = 7; k >= 0; k--)
            w = w << 8 | s[i + (size_t)k];
#endif
        h ^= w;
        h *= 0x100000001b3ull;
    }
    return vitc_fnv1a(h, s + i, n - i);
}

/* One input or output.  Dimension i is dims[i], times the batch when bit i of
 * batch_mask is set. */
typedef struct {
    const char *name;
    int32_t dtype; /* ONNX TensorProto.DataType code: 1 = float32 */
    int32_t rank;
    int64_t dims[VITC_ABI_MAX_RANK];
    uint32_t batch_mask;
} vitc_abi_tensor;

/* The number of elements of t at batch b. */
static inline int64_t vitc_abi_numel_at(const vitc_abi_tensor *t, int64_t b)
{
    int64_t n = 1;
    for (int k = 0; k < t->rank; k++)
        n *= ((t->batch_mask >> k) & 1) ? t->dims[k] * b : t->dims[k];
    return n;
}

/* Work split: fn(arg, begin, end) over disjoint ranges covering [0, n). */
typedef void (*vitc_abi_task)(void *arg, int64_t begin, int64_t end);
/* Runs fn over [0, n) on the pool's threads (the caller's included) and
 * returns when every range is done.  Provided by the runtime. */
typedef void (*vitc_abi_parallel_for)(void *pool, int64_t n, vitc_abi_task fn, void *arg);

typedef struct {
    int64_t batch;               /* 1 .. max_batch, checked by the runtime */
    const void *const *inputs;   /* in descriptor order, shapes checked */
    void *const *outputs;        /* in descriptor order, caller-owned */
    void *workspace;             /* workspace_bytes, 64-byte aligned, per context */
    const void *weights;         /* the weights blob, 64-byte aligned */
    void *pool;
    vitc_abi_parallel_for parallel_for;
    int32_t nthreads;            /* threads in the pool, the caller's included */
    /* Profiling: when profile is not NULL, run() calls profile(profile_arg, i)
     * right after the code of part i (vitc_abi_model.profile) is done. */
    void (*profile)(void *profile_arg, int32_t part);
    void *profile_arg;
} vitc_abi_call;

/* A part of run() that a profile times: the code of one IR node. */
typedef struct {
    const char *kernels;         /* the compiled functions it runs, comma-separated */
    const char *op;              /* the IR op ("Linear", "Attention", ...) */
    const char *source;          /* the ONNX node(s) it came from: "NAME (OP_TYPES)" */
} vitc_abi_part;

typedef struct vitc_abi_model {
    uint32_t abi_version;        /* VITC_ABI_VERSION */
    uint32_t size;               /* sizeof(vitc_abi_model) */
    const char *vitc_version;    /* version of the vitc that compiled it */
    const char *target;          /* "cpu" or "cuda" */
    const char *triple, *cpu, *features;
    const char *source;          /* the ONNX file's name (no directory) */
    int32_t ninputs, noutputs;
    const vitc_abi_tensor *inputs, *outputs;
    int64_t max_batch;
    uint64_t workspace_bytes;    /* activation memory at max_batch; valid for any batch */
    const void *weights;         /* embedded weights, or NULL when external: in the file's read-only
                                  * data, for the loader may copy them and drop those pages
                                  * (MADV_DONTNEED: read again from the file if touched) */
    uint64_t weights_bytes;
    const char *weights_file;    /* external weights: a file name beside the .so, else NULL */
    uint64_t weights_fnv1a;      /* FNV-1a 64 of the weights, checked for external files; 0 when embedded */
    int32_t (*run)(const vitc_abi_call *call); /* 0 on success */
    int32_t nkernels;            /* for `vitc inspect` */
    const char *const *kernel_names;
    /* Fields added after the first release of ABI version 1: a descriptor
     * whose size ends before one of them is read as having it NULL. */
    const struct vitc_cuda_plan *cuda_plan; /* target "cuda": how to run it; NULL for "cpu" */
    uint64_t source_hash;        /* vitc_model_hash of the ONNX file compiled; 0: unknown */
    int32_t nparts;              /* profile marks run() makes: 0 where it makes none */
    const vitc_abi_part *parts;
    const char *precision;       /* a CPU model's arithmetic: "fp32" or "bf16"; NULL where not said (a CUDA
                                  * model's is in its plan; in older CPU descriptors bf16 went with amx-tile
                                  * in features, which only those builds listed) */
    const char *knobs;           /* the compiler's VITC_* environment variables that changed this code, set to
                                  * other than their defaults (codegen/knobs.def), as "NAME=VALUE" separated by
                                  * spaces; "" when none, NULL where not said */
    int64_t fixed_batch;         /* the batch the ONNX export fixed (no input's first dimension symbolic, the
                                  * first one's this number): the model runs that batch only, its inputs and
                                  * outputs written with it (max_batch is then 1: no shape depends on a batch);
                                  * 0 where the batch is symbolic, or where not said */
    int32_t nvariants;           /* the input shapes the model was compiled for (--shapes): 0 or 1 where it
                                  * takes one; then variants[0] is this descriptor and variants[i] one like it
                                  * (same inputs and outputs by name, dtype and rank, max_batch and target) for
                                  * other non-batch dimensions, with its own run(), workspace_bytes and parts;
                                  * every variant reads the one weights blob.  A runtime that predates the field
                                  * runs variant 0 */
    const struct vitc_abi_model *const *variants;
} vitc_abi_model;

/* Bytes of the descriptor as first released: the runtime accepts any size
 * from here up to sizeof(vitc_abi_model). */
#define VITC_ABI_MODEL_BASE_SIZE (offsetof(vitc_abi_model, cuda_plan))

/* ---- CUDA models ----
 * A CUDA model's run() only reports VITC_STATUS_NO_DEVICE: the runtime
 * executes the plan itself (runtime/cuda_exec.c).  It loads the code image
 * that fits the device, uploads the weights blob once, gives each context
 * one device workspace of workspace_bytes, and per batch captures the
 * launches, in order, into a CUDA graph that it replays.  Graph inputs are
 * copied from the caller's arrays to the workspace and outputs back, as the
 * descriptor's dtypes, at the offsets in inputs[] and outputs[].
 *
 * Sizes that depend on the batch B are polynomials c[0] + c[1] B + c[2] B^2
 * + c[3] B^3.  Every kernel takes one by-value argument, a struct of 8-byte
 * fields (codegen/cuda/device/params.h) passed from VITC_CUDA_MAX_ARGS
 * slots filled from the launch's args in order; unused slots are zero. */
#define VITC_CUDA_PLAN_VERSION 2
#define VITC_CUDA_MAX_ARGS 16

typedef struct {
    int64_t c[4];
} vitc_cuda_poly;

/* p's value at batch b. */
static inline int64_t vitc_cuda_poly_at(const vitc_cuda_poly *p, int64_t b)
{
    return p->c[0] + b * (p->c[1] + b * (p->c[2] + b * p->c[3]));
}

enum {
    VITC_CUDA_ARG_WORKSPACE = 1, /* device pointer: workspace + value (bytes) */
    VITC_CUDA_ARG_WEIGHTS = 2,   /* device pointer: weights + value (bytes) */
    VITC_CUDA_ARG_INT = 3        /* the integer value */
};

typedef struct {
    int32_t kind;
    int32_t reserved;
    vitc_cuda_poly value;        /* evaluated at the batch */
} vitc_cuda_arg;

/* A tensor map of a row-major matrix of 2-byte elements that a launch's
 * kernel takes by value after its argument slots (gemm_tma of the device
 * library, on sm_90a): the runtime encodes it per batch (the driver's
 * cuTensorMapEncodeTiled) with a box of box_cols x box_rows elements, the
 * 128-byte swizzle and zeros past the edges.  Where the arch-specific image
 * is not the one loaded, the kernel ignores its maps and gets zeros. */
enum { VITC_CUDA_TMAP_F16 = 1, VITC_CUDA_TMAP_BF16 = 2 };
#define VITC_CUDA_MAX_TMAPS 2

typedef struct {
    int32_t arg;                 /* the launch argument (a device pointer) where row 0 starts */
    int32_t elem;                /* VITC_CUDA_TMAP_* */
    vitc_cuda_poly rows;         /* evaluated at the batch */
    int64_t cols;                /* elements a row */
    int64_t row_bytes;           /* between rows: a multiple of 16 */
    uint32_t box_rows, box_cols; /* box_cols * 2 = 128 bytes: the swizzle's row */
} vitc_cuda_tmap;

typedef struct {
    int32_t function;            /* index into the plan's functions */
    uint32_t block;              /* threads per block (x only) */
    uint32_t shared_bytes;       /* dynamic shared memory */
    uint32_t shared_bytes_specific; /* the same when an arch-specific image runs (sm_90a's wgmma
                                     * GEMM); 0: shared_bytes (plans before it wrote 0 here) */
    vitc_cuda_poly grid[3];      /* blocks along x, y, z: ceil(grid[i](B) / grid_div[i]) */
    int64_t grid_div[3];
    int64_t min_batch, max_batch; /* the launch belongs to batches in this range */
    int32_t nargs;
    const vitc_cuda_arg *args;
    int32_t ntmaps;              /* 0, or VITC_CUDA_MAX_TMAPS: the kernel takes that many maps */
    int32_t reserved;
    const vitc_cuda_tmap *tmaps;
} vitc_cuda_launch;

enum { VITC_CUDA_IMAGE_CUBIN = 1, VITC_CUDA_IMAGE_PTX = 2 };

/* An image's flags: VITC_CUDA_IMAGE_PDL, every kernel waits for the grids
 * before it (griddepcontrol.wait) before it touches memory, so that it may
 * be launched as a programmatic dependent launch (sm_90 and later; plans
 * before it wrote 0). */
enum { VITC_CUDA_IMAGE_PDL = 1 };

typedef struct {
    int32_t kind;                /* VITC_CUDA_IMAGE_* */
    int32_t arch;                /* 80, 90, ...: sm_XX for a CUBIN, compute_XX for PTX */
    int32_t arch_specific;       /* 1: sm_XXa, runs on that exact architecture only */
    int32_t flags;               /* VITC_CUDA_IMAGE_PDL */
    const void *data;            /* PTX is NUL-terminated */
    uint64_t bytes;
} vitc_cuda_image;

enum { VITC_CUDA_SPACE_WORKSPACE = 1, VITC_CUDA_SPACE_WEIGHTS = 2 };

typedef struct {
    int32_t space;               /* VITC_CUDA_SPACE_* */
    int32_t reserved;
    uint64_t offset;             /* bytes */
} vitc_cuda_io;

typedef struct vitc_cuda_plan {
    uint32_t version;            /* VITC_CUDA_PLAN_VERSION */
    uint32_t size;               /* sizeof(vitc_cuda_plan) */
    const char *precision;       /* "fp32", "tf32", "fp16" or "bf16" */
    int32_t nimages;
    const vitc_cuda_image *images;
    int32_t nfunctions;
    const char *const *functions; /* kernel entry names, in every image */
    int32_t nlaunches;
    const vitc_cuda_launch *launches;
    const vitc_cuda_io *inputs;  /* per descriptor input: where the host array goes */
    const vitc_cuda_io *outputs; /* per descriptor output: where it is read back from */
    uint64_t workspace_bytes;    /* device memory per context, valid for every batch */
} vitc_cuda_plan;

#endif
