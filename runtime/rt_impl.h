/* rt_impl.h: the runtime's private structures, shared by its files (loader,
 * checks, thread pool, errors) and never seen by users of vitc/runtime.h. */
#ifndef VITC_RT_IMPL_H
#define VITC_RT_IMPL_H

#include "runtime/abi.h"
#include "vitc/runtime.h"

#include <stddef.h>
#include <stdint.h>

#define RT_HIDDEN __attribute__((visibility("hidden")))

typedef struct rt_elf_desc rt_elf_desc;

/* An executor: how the runtime runs the models of one target, picked once
 * when a model is opened (rt_executor_of), so that nothing else compares
 * target names.  A NULL slot does nothing. */
typedef struct rt_executor {
    const char *target; /* the descriptor's target */
    int one_thread;     /* its contexts run on one host thread (a GPU's stream) */
    /* At load, after the common checks: the target's own checks and state. */
    vitc_status (*model_load)(vitc_model *m);
    void (*model_free)(vitc_model *m);
    /* A new context's own state (workspace, threads, stream), or the status
     * with the reason recorded; context_free releases it, also half made. */
    vitc_status (*context_create)(vitc_context *c);
    void (*context_free)(vitc_context *c);
    /* Runs the checked call: c->in_ptrs and c->out_ptrs at this batch. */
    vitc_status (*run)(vitc_context *c, int64_t batch);
} rt_executor;

/* The executor of a descriptor's target; NULL when this runtime has none. */
RT_HIDDEN const rt_executor *rt_executor_of(const char *target);
/* The two executors: run.c's (the CPU code in the .so, on the thread pool)
 * and cuda_exec.c's (the plan's kernels on a GPU). */
RT_HIDDEN extern const rt_executor rt_cpu_executor, rt_cuda_executor;

struct vitc_model {
    void *handle;                 /* dlopen handle of the .so; NULL when read as data only */
    rt_elf_desc *elf;             /* the descriptor as read from the file (elf_desc.c) */
    int data_only;                /* vitc_model_read: described, never run */
    const vitc_abi_model *abi;    /* its descriptor, inside the .so */
    const void *weights;          /* 64-byte aligned: embedded, or weights_owned */
    void *weights_owned;          /* malloc'ed copy (external file, or realigned), else NULL */
    char *path;                   /* as given, for messages */
    const rt_executor *exec;      /* for its target (never NULL once checked) */
    const vitc_cuda_plan *cuda_plan; /* target "cuda": the checked plan, else NULL */
    struct rt_cuda_model *cuda;   /* its device state (cuda_exec.c), NULL for CPU models */
    /* The graphs it holds, one per input shape it was compiled for (--shapes):
     * variants[0] is abi; one where the descriptor lists none. */
    const vitc_abi_model *const *variants;
    int nvariants;
    uint64_t workspace_bytes;     /* the largest variant's */
};

#define RT_MAX_VARIANTS 64 /* input shapes a descriptor lists, at most */

typedef struct rt_pool rt_pool;

struct vitc_context {
    vitc_model *model;
    const vitc_abi_model *abi;    /* the variant the last vitc_run ran (model->abi before any) */
    void *workspace;              /* model->workspace_bytes, 64-byte aligned */
    rt_pool *pool;
    int nthreads;
    /* per descriptor entry, filled by each vitc_run (no allocation per run) */
    const vitc_tensor **in_slots, **out_slots;
    const void **in_ptrs;
    void **out_ptrs;
    struct rt_cuda_ctx *cuda;     /* CUDA models: stream, device workspace, graphs */
    struct rt_profile *profile;   /* per-part times while profiling (profile.c), else NULL */
};

/* ---- errors (error.c) ---- */
/* Records a formatted message as this thread's last error and returns s. */
RT_HIDDEN vitc_status rt_fail(vitc_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- thread pool (pool.c) ---- */
/* A pool of nthreads - 1 workers; the thread that calls rt_parallel_for is the
 * nth.  NULL when a thread or the memory could not be had (error recorded). */
RT_HIDDEN rt_pool *rt_pool_new(int nthreads);
RT_HIDDEN void rt_pool_free(rt_pool *p);
/* vitc_abi_parallel_for: fn over disjoint ranges covering [0, n), on every
 * thread of the pool; returns when all are done.  Called from inside a task
 * it runs the whole range on the calling thread. */
RT_HIDDEN void rt_parallel_for(void *pool, int64_t n, vitc_abi_task fn, void *arg);

/* ---- memory and checksums (loader.c) ---- */
/* 64-byte aligned allocation of at least n bytes (n may be 0); NULL when out of memory. */
RT_HIDDEN void *rt_aligned_alloc(uint64_t n);
/* FNV-1a, 64-bit, of n bytes. */
RT_HIDDEN uint64_t rt_fnv1a64(const void *data, uint64_t n);
/* Bytes per element of an ONNX dtype code; 0 if the runtime does not know it. */
RT_HIDDEN size_t rt_dtype_size(int32_t dtype);
RT_HIDDEN const char *rt_dtype_name(int32_t dtype);

/* ---- profiling (profile.c) ---- */
/* The profile parts a descriptor lists (0 where it lists none). */
RT_HIDDEN int rt_abi_nparts(const vitc_abi_model *a);
/* The batch the export fixed (the descriptor's fixed_batch), 0 where the
 * batch is symbolic or the descriptor ends before the field. */
RT_HIDDEN int64_t rt_abi_fixed_batch(const vitc_abi_model *a);
/* The variant c runs from now on: a profile of another variant's parts starts over. */
RT_HIDDEN void rt_profile_variant(vitc_context *c, const vitc_abi_model *a);
/* Fills call's profile hook when c is profiling, and starts the clock. */
RT_HIDDEN void rt_profile_begin(vitc_context *c, vitc_abi_call *call);
RT_HIDDEN void rt_profile_free(vitc_context *c);
/* Whether c is profiling (a CUDA model's run then times each launch). */
RT_HIDDEN int rt_profile_on(const vitc_context *c);
/* Charges part (a CUDA model's launch) one call of `seconds`. */
RT_HIDDEN void rt_profile_add(vitc_context *c, int part, double seconds);

/* ---- the descriptor read from the file, nothing of it run (elf_desc.c) ---- */
/* Maps the file read-only and copies its descriptor out, relocated; the
 * fields are not yet checked.  LOAD_FAILED or ABI_MISMATCH, with the
 * reason recorded, when the file is not an ELF shared library of this
 * machine or has no usable descriptor. */
RT_HIDDEN vitc_status rt_elf_desc_read(const char *path, rt_elf_desc **out);
RT_HIDDEN const vitc_abi_model *rt_elf_desc_model(const rt_elf_desc *d);
RT_HIDDEN void rt_elf_desc_free(rt_elf_desc *d);

/* cpu_check.c: how many of the "+feature" entries of an LLVM feature list
 * this CPU lacks (among those it knows to check), named in missing. */
int rt_cpu_missing_features(const char *list, char *missing, size_t n);
/* 1 when an LLVM feature list enables name (its last entry is "+name"). */
int rt_cpu_feature_enabled(const char *list, const char *name);
/* Asks the OS for the AMX tile registers when the feature list enables
 * amx-tile; 0 when done or not needed, else -1 with the reason in err. */
int rt_cpu_enable_amx(const char *list, char *err, size_t n);

#endif
