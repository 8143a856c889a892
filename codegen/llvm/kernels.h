/* kernels.h: generators of the compute-heavy CPU kernels, in LLVM IR built
 * through the C API.  The LLVM backend (llvm_backend.c and friends) calls
 * these for Linear/MatMul/Conv-as-GEMM and Attention nodes; everything else
 * (element-wise, normalisation, data movement) it generates itself.
 *
 * Every generated kernel is a "driver" function that splits its work into
 * tasks and hands them to the runtime's parallel_for:
 *     void name(const ARGS *args, void *pool, vitc_abi_parallel_for pf, int32_t nthreads)
 * so the caller only fills an ARGS struct (layout below, plain C structs that
 * the caller builds in LLVM IR with the same field order) and calls it. */
#ifndef VITC_CG_KERNELS_H
#define VITC_CG_KERNELS_H

#include <llvm-c/Core.h>
#include <stddef.h>
#include <stdint.h>

/* What the target offers: chosen by the backend from --cpu/--features. */
typedef struct {
    int vec_floats; /* floats per SIMD register: 4 (SSE), 8 (AVX2), 16 (AVX-512) */
    int nregs;      /* SIMD registers: 16 (AVX2), 32 (AVX-512) */
    int has_fma;
    int64_t l1_bytes; /* L1 data cache per core, for prefetching (0: unknown) */
    int64_t l2_bytes; /* L2 cache per core, for blocking (0: unknown, taken as 512 KiB) */
    int amx_bf16;     /* --precision bf16: Linear layers on AMX tiles in bf16 (gemm_amx.c) */
    int bf16_dot;     /* --precision bf16 without AMX: the same on AVX512-BF16 (VDPBF16PS, gemm_amx.c) */
    int vnni;         /* VPDPBUSD on these vectors: avx512vnni with 16 floats; avxvnni, or avx512vnni and
                       * avx512vl, with 8 (any precision) */
    int madd16;       /* VPMADDWD on these vectors: avx512bw with 16 floats, avx2 with 8 (any precision) */
    int amx_int8;     /* --precision int8 with amx-tile, amx-int8 and AVX-512: int8 GEMMs on AMX tiles (TDPBUSD) */
} cg_target;

/* Whether the Linear layers run in bf16 (--precision bf16), on either path. */
static inline int cg_target_bf16(const cg_target *t) { return t->amx_bf16 || t->bf16_dot; }
/* Whether cg_gemm_i8_emit takes the target at all: 8- or 16-float vectors
 * with VPDPBUSD or at least VPMADDWD on them (every AVX2 and AVX-512 CPU
 * but Xeon Phi); AMX-INT8 is used where amx_int8 says so. */
static inline int cg_target_int8_ok(const cg_target *t)
{
    return (t->vec_floats == 8 || t->vec_floats == 16) && (t->vnni || t->madd16);
}

/* The target for an LLVM feature string ("+avx2,+fma,-avx512f,..."): 16
 * floats and 32 registers with +avx512f, 8 and 16 with +avx, else 4 and 16
 * (SSE); has_fma with +fma or +avx512f; this machine's L1 and L2. */
cg_target cg_target_from_features(const char *features);
/* This machine's L1 data and L2 cache per core in bytes (sysconf), 0 when
 * unknown. */
int64_t cg_host_l1_bytes(void);
int64_t cg_host_l2_bytes(void);

/* ---- GEMM with packed constant weights and a fused epilogue ----
 * C[m, n] = act(sum_k A[m, k] * W[k, n] + bias[n]) + R[m, n], for m < M, or
 * with gate: act(...) * R[m, n] (R a gated MLP's other projection).
 * K and N are compile-time constants (the weight's shape); M is known only at
 * run time (a multiple of the batch).  activation as in ops.def's Linear. */
typedef struct {
    int64_t K, N;
    int64_t lda, ldc, ldr; /* row strides, in floats, of A, C and R; ldr 0: R is one row [N] for every row */
    int has_bias, has_residual, activation;
    int gate;              /* R (has_residual) multiplies instead of adding */
} cg_gemm_desc;

typedef struct {            /* ARGS of a GEMM driver */
    const float *A;
    const float *W;         /* packed by cg_gemm_pack */
    const float *bias;      /* NULL if !has_bias */
    const float *R;         /* NULL if !has_residual; may equal C (in place) */
    float *C;               /* must not overlap A */
    int64_t M;
} cg_gemm_args;

/* Bytes of the packed form of a K x N weight (64-byte multiple). */
size_t cg_gemm_packed_bytes(const cg_gemm_desc *d, const cg_target *t);
/* Packs W (K x N, row-major) into out (cg_gemm_packed_bytes bytes). */
void cg_gemm_pack(const cg_gemm_desc *d, const cg_target *t, const float *W, float *out);
/* Emits the driver function `name` into mod; returns it, or NULL for a
 * description it cannot take (K or N < 1, a stride below its row, an
 * activation outside 0..4, vec_floats not 4/8/16).  The work behind a
 * driver (task function, micro-kernels) is internal to mod and named after
 * the description ("vitc.gemm.*", "vitc.uk.*"), so equal layers share it:
 * only the few-instruction driver is emitted again.  Likewise for the
 * batched GEMM and attention below.  M <= 0 at run time does nothing. */
LLVMValueRef cg_gemm_emit(LLVMModuleRef mod, const char *name, const cg_gemm_desc *d, const cg_target *t);

/* ---- the same GEMM in bf16 on AMX tiles, or with VDPBF16PS (gemm_amx.c;
 * needs t->amx_bf16 or t->bf16_dot, AMX taken when both are set) ----
 * Same description, arguments and driver signature; W packed by
 * cg_gemm_amx_pack (bf16).  A and W are rounded to bf16, the products summed
 * in fp32.  cg_gemm_amx_fits: 0 for a K too long for the kernel's A buffer
 * (K > 4096 with a residual after an activation: K in one block), which
 * keeps the fp32 kernel. */
int cg_gemm_amx_fits(const cg_gemm_desc *d);
size_t cg_gemm_amx_packed_bytes(const cg_gemm_desc *d, const cg_target *t);
void cg_gemm_amx_pack(const cg_gemm_desc *d, const cg_target *t, const float *W, void *out);
LLVMValueRef cg_gemm_amx_emit(LLVMModuleRef mod, const char *name, const cg_gemm_desc *d, const cg_target *t);

/* ---- the same GEMM on int8 operands (gemm_i8.c; targets of
 * cg_target_int8_ok) ----
 *     C[m, n] = act(sa[m] * sw[n] * (sum_k A[m, k] * W[k, n] - za[m] * colsum[n]) + bias[n]) (+|*) R[m, n]
 * A is uint8 (row stride g.lda in bytes) with scale sa and zero point za,
 * one for the tensor or (a_per_row) one per row; W is int8 with one scale
 * sw[n] per column, colsum[n] the sum of its column.  The sums are exact in
 * int32; za * colsum is subtracted from them in int32.  K at most 65000
 * (the sums' range).  Epilogue fields as in cg_gemm_desc.  The sums on AMX
 * tiles (TDPBUSD) with t->amx_int8 and K up to 32768, else VPDPBUSD with
 * t->vnni, else (t->madd16) VPMADDUBSW and VPMADDWD with maddubs (the
 * pairs of W it cannot take fixed up after), else VPMADDWD alone; each
 * packs W its own way, so pack and emit take the same target and
 * description.  The packed W must be 64-byte aligned; A, C,
 * R and the scales need no alignment, A no padding.  The AMX path's tasks
 * keep their rows of A (at most 1 MiB) and their int32 sums (at most
 * 64 KiB) on their threads' stacks; it needs the tile registers granted to
 * the process (the runtime asks for them for a model whose features list
 * amx-tile).  With fake-quant points (fq, scale 0: absent) the epilogue is
 *     C = FQ1(FQ0(sa sw sum') + bias) (+|*) R
 * each as vm_fake_quant computes it; with an epilogue function f,
 *     C = f(...) of the above. */
typedef struct {
    cg_gemm_desc g;
    int a_per_row;
    int maddubs; /* without VNNI: VPMADDUBSW (set where cg_gemm_i8_maddubs_pays), else VPMADDWD alone */
    float fq[2][5]; /* LinearInt8's output fake-quant points (opview.h), no activation with them */
    char epilogue[48]; /* "" or the name of a function <vf x float> f(<vf x float>) in the module (an
                        * element-wise group, cg_elem_epilogue) applied last, to what is stored */
} cg_gemm_i8_desc;

typedef struct {            /* ARGS of an int8 GEMM driver */
    const uint8_t *A;
    const void *W;          /* packed by cg_gemm_i8_pack */
    const float *bias;      /* NULL if !has_bias */
    const float *R;         /* NULL if !has_residual; may equal C (in place) */
    float *C;
    const float *a_scale;   /* [M] with a_per_row, else [1] */
    const int32_t *a_zero;  /* likewise, each in 0..255 */
    int64_t M;
} cg_gemm_i8_args;

/* Bytes of the packed W (64-byte multiple); 0 for a description the kernel
 * does not take (as cg_gemm_i8_emit).  W (K x N int8, row-major) is read
 * for the VPMADDUBSW path's fixes only (0 there without it). */
size_t cg_gemm_i8_packed_bytes(const cg_gemm_i8_desc *d, const cg_target *t, const int8_t *W);
/* Whether every pair of W's k (2i, 2i + 1; W is K x N int8, row-major, a
 * zero past K) in each column has positive entries summing to at most 128
 * and negative ones to at least -128: then a0 w0 + a1 w1 lies in int16 for
 * all a in 0..255.  Entries in -64..64 always do. */
int cg_gemm_i8_pairs_fit(const int8_t *W, int64_t K, int64_t N);
/* The VPMADDUBSW path's fixes of W on t: for each panel of columns, the
 * pairs of k where some column's pair does not fit; -1 where d and t take
 * another path. */
int64_t cg_gemm_i8_fixes(const cg_gemm_i8_desc *d, const cg_target *t, const int8_t *W);
/* Whether the VPMADDUBSW path, with its fixes, is worth taking for W on t
 * (a target with t->madd16 and without VNNI or AMX): 0 elsewhere. */
int cg_gemm_i8_maddubs_pays(const cg_gemm_i8_desc *d, const cg_target *t, const int8_t *W);
/* Packs W (K x N int8, row-major), its column sums and w_scale [N] into
 * out (cg_gemm_i8_packed_bytes(d, t, W) bytes); -1 (nothing written) for a
 * description the kernel does not take. */
int cg_gemm_i8_pack(const cg_gemm_i8_desc *d, const cg_target *t, const int8_t *W, const float *w_scale, void *out);
/* The path's name ("amx", "vnni", "maddubs", "wide"); NULL for a
 * description the kernel does not take. */
const char *cg_gemm_i8_path(const cg_gemm_i8_desc *d, const cg_target *t);
/* NULL for K or N < 1, K > 65000, a stride below its row, an activation
 * outside ir_act, a target cg_target_int8_ok refuses, or an LLVM without
 * the path's instructions. */
LLVMValueRef cg_gemm_i8_emit(LLVMModuleRef mod, const char *name, const cg_gemm_i8_desc *d, const cg_target *t);

/* ---- batched GEMM between activations (MatMul of two computed tensors) ----
 * For each batch index b < batch (batch = batch_static * B at run time):
 *     C_b[M, N] = A_b[M, K] @ op(B_b)[K, N],  op = transpose if trans_b.
 * Element (i, j) of A_b is A[b * a_batch_stride + i * lda + j]; likewise for
 * B and C.  Everything is static except the run-time batch count. */
typedef struct {
    int64_t M, N, K;
    int64_t lda, ldb, ldc;
    int64_t a_batch_stride, b_batch_stride, c_batch_stride;
    int trans_b;
    float alpha;            /* C = alpha * (A @ op(B)) */
} cg_bgemm_desc;

typedef struct {            /* ARGS of a batched-GEMM driver */
    const float *A, *B;
    float *C;
    int64_t batch;
} cg_bgemm_args;

/* NULL unless every size >= 1, lda >= K, ldc >= N, ldb >= (trans_b ? K : N),
 * batch strides >= 0 (0: one matrix for every batch index). */
LLVMValueRef cg_bgemm_emit(LLVMModuleRef mod, const char *name, const cg_bgemm_desc *d, const cg_target *t);

/* ---- fused attention (ops.def Attention) ----
 * qkv [B, N, 3*H*D] as in qkv_layout; out [B, N, H*D]; with has_bias, bias
 * element (image b, head h, row i, key j) at b*bias_b + h*bias_h + i*bias_i + j
 * (a stride 0 broadcasts) is added to the scaled scores.  Cross-attention
 * (q_tokens > 0): Q is read from q [B, q_tokens, H*D], qkv is kv
 * [B, N, 2*H*D] holding K and V, out is [B, q_tokens, H*D].  With
 * rope_pairing (ir_rope_pairing, self-attention only), Q and K of tokens
 * rope_start .. rope_start + rope_rows - 1 are rotated by the table rope
 * [2, rope_rows, D] first, or [2, H, rope_rows, D] with rope_per_head
 * (opview.h).  fq: the fake-quant points as Attention's (opview.h; scale 0:
 * absent; with the scores' point, scale > 0 and no bias). */
typedef struct {
    int64_t tokens, heads, head_size;
    int qkv_layout;
    float scale, post_scale;
    float fq[7][5];
    int has_bias;
    int64_t bias_b, bias_h, bias_i;
    int64_t bias_period;    /* > 0: image b reads the bias at (b % bias_period) * bias_b (windows) */
    int64_t q_tokens;
    int rope_pairing, rope_per_head;
    int64_t rope_start, rope_rows;
} cg_attention_desc;

typedef struct {            /* ARGS of an attention driver */
    const float *qkv;
    float *out;
    const float *bias;      /* read only with has_bias */
    const float *q;         /* read only with q_tokens */
    const float *rope;      /* read only with rope_pairing */
    int64_t batch;
} cg_attention_args;

/* Each task keeps Q, K^T and V of one head in buffers on its thread's
 * stack: about (3 N D + 24 N) floats (170 KiB for N 197, D 64).  NULL when
 * that would exceed 2 MiB (N above ~2400 at D 64), or for sizes < 1, a
 * layout other than 0/1. */
LLVMValueRef cg_attention_emit(LLVMModuleRef mod, const char *name, const cg_attention_desc *d,
                               const cg_target *t);

/* ---- the activations of an int8 Linear quantized to u8 rows (quant_rows.c) ----
 * q[m, k] = clamp(roundeven(x[m, k] / sa) + za, 0, 255) for m < M, with sa
 * and za written to sa[m] and za[m] for every row: given (static), from the
 * row's range (per row), or from the whole tensor's, which takes two calls:
 * CG_QR_STATS writes each row's range (st[2m], st[2m + 1]) and CG_QR_TENSOR
 * reduces them and quantizes; CG_QR_STATIC reads them from st[0] (the
 * scale) and st[1] (the zero point, a whole number in 0..255).  A range holds 0; sa = range / 255 (1 for an
 * empty one), za = roundeven(clamp(-lo / sa, 0, 255)). */
typedef enum { CG_QR_STATS, CG_QR_ROW, CG_QR_TENSOR, CG_QR_STATIC } cg_quant_rows_mode;

typedef struct {
    int64_t K;
    int64_t lda, ldq; /* row strides of x (floats) and q (bytes) */
    cg_quant_rows_mode mode;
} cg_quant_rows_desc;

typedef struct {            /* ARGS of a row quantizer's driver */
    const float *x;
    uint8_t *q;
    float *sa;              /* [M] */
    int32_t *za;            /* [M] */
    float *st;              /* [2 M]: the rows' ranges (CG_QR_STATS, CG_QR_TENSOR); CG_QR_STATIC: {scale, zero} */
    int64_t M;
} cg_quant_rows_args;

/* NULL for K < 1 or a stride below its row. */
LLVMValueRef cg_quant_rows_emit(LLVMModuleRef mod, const char *name, const cg_quant_rows_desc *d,
                                const cg_target *t);

#endif
