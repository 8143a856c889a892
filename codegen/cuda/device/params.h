/* params.h: the one argument of every generated CUDA kernel, a struct per
 * kernel family, declared once for both sides of the launch: the emitters
 * (codegen/cuda/cu_*.c) set a launch's argument slots by field (CU_FIELD,
 * cu_impl.h), and the build embeds this file ahead of the device library,
 * whose kernels take the struct by value (VK_KERNEL, prelude.cuh).
 *
 * Valid C11 and CUDA C++.  Every field is 8 bytes, a device pointer or a
 * long long, so that field k is argument slot k of the launch
 * (vitc_cuda_launch.args in runtime/abi.h) on the host and on the device; a
 * field the launch does not set is 0 (NULL).  Pointers to elements whose
 * type depends on the storage (float, h16, b16, ...) are void: the kernel
 * text or the device function casts them to its types. */
#ifndef VK_PARAMS_H
#define VK_PARAMS_H

/* A launch's argument slots (VITC_CUDA_MAX_ARGS): every struct fits in them. */
#define VK_PARAM_SLOTS 16

#ifdef __cplusplus
#define VK_PARAMS_ASSERT(cond, what) static_assert(cond, what)
#else
#define VK_PARAMS_ASSERT(cond, what) _Static_assert(cond, what)
#endif
/* T is n fields of 8 bytes, at most VK_PARAM_SLOTS. */
#define VK_PARAMS_SIZE(T, n)                                                                                           \
    VK_PARAMS_ASSERT(sizeof(T) == (n) * 8 && (n) <= VK_PARAM_SLOTS, #T " is " #n " fields of 8 bytes")

/* Strided copies and Gather (generated text, cu_data.c): dst[i] from src;
 * Gather reads its indices from index. */
typedef struct {
    long long batch;   /* B */
    const void *src;
    void *dst;
    const void *index; /* Gather's index tensor */
} vk_copy_params;
VK_PARAMS_SIZE(vk_copy_params, 4);

/* Element-wise ops (generated text, cu_elem.c): y from the operands x[0..n-1]. */
#define VK_EW_MAX_IN 12
typedef struct {
    long long batch; /* B */
    void *y;
    const void *x[VK_EW_MAX_IN];
} vk_ew_params;
VK_PARAMS_SIZE(vk_ew_params, 2 + VK_EW_MAX_IN);

/* ReduceMean/Sum/Max (generated text, cu_norm.c). */
typedef struct {
    long long batch; /* B */
    const void *x;
    void *y;
} vk_reduce_params;
VK_PARAMS_SIZE(vk_reduce_params, 3);

/* Row normalisation (norm.cuh: layernorm, layernorm_big): rows of cols
 * elements; scale and bias per element of a row, NULL when absent (the
 * STATS form, which writes each row's (mean, 1 / std) to y, takes neither). */
typedef struct {
    const void *x;
    const void *scale;
    const void *bias;
    void *y;
    long long rows;
    long long cols; /* the kernels that take C at run time */
} vk_norm_params;
VK_PARAMS_SIZE(vk_norm_params, 6);

/* Softmax (norm.cuh: softmax_rows) along an axis of cols elements, as
 * rows = outer * inner rows. */
typedef struct {
    const void *x;
    void *y;
    long long rows;
    long long cols;
    long long inner;
} vk_softmax_params;
VK_PARAMS_SIZE(vk_softmax_params, 5);

/* GEMM with a constant weight (gemm.cuh): out = act(a wt^T + bias) + res over
 * m rows; the blocks of a split-K GEMM write their fp32 sums to partial, and
 * the last of a tile's blocks to finish (counted in counters[tile]) adds
 * them before the same epilogue; a stream-K gemm_pp alike, with two partial
 * tiles a block and four counters a tile. */
typedef struct {
    const void *a;      /* A [M, K] */
    const void *wt;     /* Wt [Np, Kp], packed at compile time */
    const float *bias;  /* [N], NULL when absent */
    const void *res;    /* R, NULL when absent */
    void *out;          /* C */
    long long m;        /* M */
    float *partial;     /* split K: [splits, M, N]; stream-K: [blocks, 2, 128 * 128] */
    unsigned *counters; /* split K: a tile's blocks done, one counter a tile (stream-K: 4), zero between GEMMs */
    const float *ln;    /* a norm folded in (gemm_store2): [M] (mean, 1 / std) of A's rows, else NULL */
    const float *lnsum; /* with ln: [N] the sums of Wt's columns */
} vk_gemm_params;
VK_PARAMS_SIZE(vk_gemm_params, 10);

/* Attention (attention.cuh). */
typedef struct {
    const void *qkv;   /* [B, N, NP*H*D] */
    void *y;           /* [B, Nq, H*D] */
    const void *bias;  /* NULL when absent */
    const void *q;     /* cross-attention's queries [B, Nq, H*D] (NP 2), else NULL */
    const float *rope; /* the rotary table [2, (H,) R, D] (self-attention), NULL when absent */
} vk_attention_params;
VK_PARAMS_SIZE(vk_attention_params, 5);

/* MatMul and Gemm between computed tensors (misc.cuh: bmm_tile, generated
 * batch loop): y = alpha a b + beta c. */
typedef struct {
    long long batch; /* B */
    const void *a;
    const void *b;
    const void *c;   /* Gemm's C, NULL when absent */
    void *y;
} vk_bmm_params;
VK_PARAMS_SIZE(vk_bmm_params, 5);

/* Conv (misc.cuh: conv2d). */
typedef struct {
    long long batch; /* B */
    const void *x;
    const void *w;
    const void *bias; /* NULL when absent */
    void *y;
} vk_conv_params;
VK_PARAMS_SIZE(vk_conv_params, 5);

#endif
