/* toy_model.c: a small model written by hand against runtime/abi.h, for
 * testing the runtime without the compiler: loading, the descriptor checks,
 * argument checks, external weights, the workspace and the thread pool.
 *
 *   inputs:  x f32[B,4], shift f32[4]
 *   outputs: y f32[B,4] = scale * x + bias + shift  (scale, bias: the weights)
 *            argmax i64[B] = index of the largest y in each row
 *
 * It computes in two parallel_for passes through the workspace, the first
 * accumulating (+=) into zeroed memory, so a range run twice or skipped
 * changes the result.  Variants, chosen with -D when CMake builds it:
 *   TOY_EXTERNAL        weights in "toy_model_ext.weights" beside the .so
 *   TOY_UNALIGNED       embedded weights at an address that is not 64-byte aligned
 *   TOY_BIG             3 MiB of embedded weights (scale, bias, zeros, a last
 *                       float of 7) and as much workspace: run() returns 10
 *                       unless both are 2 MiB aligned and the weights are a
 *                       copy (VITC_HUGE_PAGES unset) or its own (=0), 11
 *                       unless the last float arrived, 12 unless its own
 *                       storage still reads as written
 *   TOY_ABI_VERSION=n   a descriptor claiming another ABI version
 *   TOY_SYMBOL=name     export the descriptor under another name
 *   TOY_NO_DESCRIPTOR   an ordinary shared library, no descriptor at all
 *   TOY_SINGLE_OUTPUT   y only (no argmax): the compiled twin of toy_y.onnx
 *   TOY_CONSTRUCTOR     code that runs when the file is opened as a library:
 *                       it writes the file $VITC_TOY_CTOR_FILE names, so a
 *                       test can tell whether the file was ever loaded
 *   TOY_FOREIGN_CPU     compiled for CPU features no machine has together
 *                       (Intel's AMX tiles and AMD's SSE4a), with the constructor */
#include "runtime/abi.h"

#include <stdlib.h>
#include <string.h>

#define TOY_MAX_BATCH 8
#define TOY_COLS 4

#ifndef TOY_ABI_VERSION
#define TOY_ABI_VERSION VITC_ABI_VERSION
#endif
#ifndef TOY_SYMBOL
#define TOY_SYMBOL vitc_model_v1
#endif

#ifdef TOY_FOREIGN_CPU
#define TOY_CONSTRUCTOR
#define TOY_FEATURES "+sse2,+amx-tile,+sse4a"
#endif
#ifndef TOY_FEATURES
#define TOY_FEATURES ""
#endif

#ifdef TOY_CONSTRUCTOR
#include <stdio.h>
#include <stdlib.h>

__attribute__((constructor)) static void toy_constructor(void)
{
    const char *path = getenv("VITC_TOY_CTOR_FILE");
    FILE *f = path ? fopen(path, "w") : NULL;
    if (f) {
        fputs("the model's constructor ran\n", f);
        fclose(f);
    }
}
#endif

#ifndef TOY_NO_DESCRIPTOR

/* scale[4], bias[4]; FNV-1a 64 of these 32 bytes is 0x4d05ad38320c76b2.  The
 * external variant's file holds the same bytes (the test writes it). */
#if defined(TOY_EXTERNAL)
#elif defined(TOY_UNALIGNED)
static const float toy_storage[9] __attribute__((aligned(64))) = {0, 2, -1, 0.5f, 3, 1, 0, -2, 0.25f};
#define TOY_WEIGHTS ((const void *)&toy_storage[1])
#elif defined(TOY_BIG)
#define TOY_BIG_FLOATS (3 << 18) /* 3 MiB */
static const float toy_storage[TOY_BIG_FLOATS] __attribute__((aligned(64))) = {
    2, -1, 0.5f, 3, 1, 0, -2, 0.25f, [TOY_BIG_FLOATS - 1] = 7};
#define TOY_WEIGHTS ((const void *)toy_storage)
#else
static const float toy_storage[8] __attribute__((aligned(64))) = {2, -1, 0.5f, 3, 1, 0, -2, 0.25f};
#define TOY_WEIGHTS ((const void *)toy_storage)
#endif

typedef struct {
    const vitc_abi_call *call;
    const float *x, *shift, *w;
    float *ws, *y;
    long long *argmax;
} toy_job;

/* Pass 1, over elements: ws[i] += scale[col] * x[i]. */
static void scale_task(void *arg, int64_t begin, int64_t end)
{
    toy_job *j = arg;
    for (int64_t i = begin; i < end; i++)
        j->ws[i] += j->w[i % TOY_COLS] * j->x[i];
}

/* Pass 2, over rows: y = ws + bias + shift, and the row's argmax. */
static void finish_task(void *arg, int64_t begin, int64_t end)
{
    toy_job *j = arg;
    for (int64_t r = begin; r < end; r++) {
        int64_t best = 0;
        for (int c = 0; c < TOY_COLS; c++) {
            float v = j->ws[r * TOY_COLS + c] + j->w[TOY_COLS + c] + j->shift[c];
            j->y[r * TOY_COLS + c] = v;
            if (v > j->y[r * TOY_COLS + best])
                best = c;
        }
        if (j->argmax)
            j->argmax[r] = best;
    }
}

static int32_t toy_run(const vitc_abi_call *call)
{
    if (call->batch < 1 || call->batch > TOY_MAX_BATCH || ((uintptr_t)call->workspace & 63) ||
        ((uintptr_t)call->weights & 63) || call->nthreads < 1)
        return 9; /* the runtime broke its side of the contract */
#ifdef TOY_BIG
    const char *huge = getenv("VITC_HUGE_PAGES");
    int in_place = huge && strcmp(huge, "0") == 0;
    const uintptr_t huge_page = (uintptr_t)2 << 20;
    if (in_place ? call->weights != (const void *)toy_storage
                 : call->weights == (const void *)toy_storage || ((uintptr_t)call->weights & (huge_page - 1)) ||
                       ((uintptr_t)call->workspace & (huge_page - 1)))
        return 10;
    if (((const float *)call->weights)[TOY_BIG_FLOATS - 1] != 7)
        return 11;
    if (toy_storage[TOY_BIG_FLOATS - 1] != 7 || toy_storage[0] != 2)
        return 12;
#endif
    toy_job j = {
        .call = call,
        .x = call->inputs[0],
        .shift = call->inputs[1],
        .w = call->weights,
        .ws = call->workspace,
        .y = call->outputs[0],
#ifndef TOY_SINGLE_OUTPUT
        .argmax = call->outputs[1],
#endif
    };
    memset(j.ws, 0, sizeof(float) * (size_t)call->batch * TOY_COLS);
    call->parallel_for(call->pool, call->batch * TOY_COLS, scale_task, &j);
    call->parallel_for(call->pool, call->batch, finish_task, &j);
    return 0;
}

static const vitc_abi_tensor toy_inputs[] = {
    {.name = "x", .dtype = 1, .rank = 2, .dims = {1, TOY_COLS}, .batch_mask = 1},
    {.name = "shift", .dtype = 1, .rank = 1, .dims = {TOY_COLS}, .batch_mask = 0},
};
static const vitc_abi_tensor toy_outputs[] = {
    {.name = "y", .dtype = 1, .rank = 2, .dims = {1, TOY_COLS}, .batch_mask = 1},
    {.name = "argmax", .dtype = 7, .rank = 1, .dims = {1}, .batch_mask = 1},
};
static const char *const toy_kernels[] = {"toy_scale", "toy_finish"};

__attribute__((visibility("default"))) const vitc_abi_model TOY_SYMBOL = {
    .abi_version = TOY_ABI_VERSION,
    .size = sizeof(vitc_abi_model),
    .vitc_version = "toy-1",
    .target = "cpu",
    .triple = "x86_64-pc-linux-gnu",
    .cpu = "generic",
    .features = TOY_FEATURES,
    .source = "toy_model.c",
    .ninputs = 2,
#ifdef TOY_SINGLE_OUTPUT
    .noutputs = 1,
#else
    .noutputs = 2,
#endif
    .inputs = toy_inputs,
    .outputs = toy_outputs,
    .max_batch = TOY_MAX_BATCH,
#ifdef TOY_BIG
    .workspace_bytes = (uint64_t)3 << 20,
#else
    .workspace_bytes = sizeof(float) * TOY_MAX_BATCH * TOY_COLS,
#endif
#ifdef TOY_EXTERNAL
    .weights = NULL,
    .weights_file = "toy_model_ext.weights",
#else
    .weights = TOY_WEIGHTS,
    .weights_file = NULL,
#endif
#ifdef TOY_BIG
    .weights_bytes = sizeof toy_storage,
#else
    .weights_bytes = sizeof(float) * 2 * TOY_COLS,
#endif
    .weights_fnv1a = 0x4d05ad38320c76b2ull,
    .run = toy_run,
    .nkernels = 2,
    .kernel_names = toy_kernels,
};

#else

/* A shared library like any other: loading it as a model must fail cleanly. */
__attribute__((visibility("default"))) int toy_not_a_model(int x)
{
    return x + 1;
}

#endif
