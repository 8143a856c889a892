/* interp_impl.h: what the reference interpreter's files share.  interp.c is
 * the driver (input checks, value lifetimes, dispatch) and owns the helpers
 * below; interp_elem.c, interp_data.c, interp_nd.c and interp_math.c hold the
 * op kernels.
 * Nothing outside ir/interp*.c includes this. */
#ifndef VITC_INTERP_IMPL_H
#define VITC_INTERP_IMPL_H

#include "ir/interp.h"

/* One node being run.  in[i] is NULL for an omitted (or absent) optional
 * input; out[] starts zeroed and a kernel allocates every output it makes
 * (at least those with n->outputs[i] >= 0; the driver frees the others). */
typedef struct {
    const ir_graph *g;
    const ir_node *n;
    vitc_diag *d;
    int64_t batch;
    const ir_tensor *const *in;
    int nin;
    ir_tensor *out;
} ik_ctx;

/* Each returns VITC_OK or a status after reporting through c->d on c->n. */
typedef int (*ik_kernel)(ik_ctx *c);

/* ---- helpers (interp.c) ---- */
int ik_fail(ik_ctx *c, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Optional input i, or NULL. */
const ir_tensor *ik_in(const ik_ctx *c, int i);
/* Allocates t, reporting a too-big shape (VITC_BAD_INPUT) or out of memory. */
int ik_alloc(ik_ctx *c, ir_tensor *t, ir_dtype dt, int rank, const int64_t *dims);
/* A fresh tensor with t's dtype and shape and a copy of its data. */
int ik_copy(ik_ctx *c, ir_tensor *dst, const ir_tensor *src);
/* Every element as double / as int64 in a malloc'ed array (NULL after reporting). */
double *ik_load_f64(ik_ctx *c, const ir_tensor *t);
int64_t *ik_load_i64(ik_ctx *c, const ir_tensor *t);
/* Normalises axis in [-rank, rank) (or [-rank, rank] with inclusive_end). */
int ik_axis(ik_ctx *c, int64_t axis, int rank, int inclusive_end, int *out);
/* Reads a 0-D or 1-D integer tensor of at most max elements into vals. */
int ik_int_list(ik_ctx *c, const ir_tensor *t, const char *what, int64_t *vals, int max, int *n);
/* "f32[2,3,4]" */
const char *ik_type_str(const ir_tensor *t, char *buf, size_t n);
/* "[2,3,4]" of a dims array */
const char *ik_dims_str(int rank, const int64_t *dims, char *buf, size_t n);
/* Fails unless every given tensor has the dtype of the first. */
int ik_same_dtype(ik_ctx *c, int n, const ir_tensor *const *ts);
/* Numpy broadcast of n shapes into (rank, dims). */
int ik_broadcast(ik_ctx *c, int n, const int *ranks, const int64_t (*dims)[IR_MAX_RANK], int *rank,
                 int64_t *out_dims);
int ik_broadcast_tensors(ik_ctx *c, int n, const ir_tensor *const *ts, int *rank, int64_t *dims);
/* Row-major strides of a shape. */
void ik_strides(int rank, const int64_t *dims, int64_t *strides);
/* Strides of a tensor of shape (trank, tdims) read as the broadcast shape
 * (rank, dims) it broadcasts to: 0 along broadcast dimensions. */
void ik_bcast_strides(int trank, const int64_t *tdims, int rank, const int64_t *dims, int64_t *strides);

/* An odometer over a shape that keeps one flat offset per operand. */
enum { IK_MAX_OPERANDS = 8 };
typedef struct {
    int rank, n;
    int64_t dims[IR_MAX_RANK], idx[IR_MAX_RANK];
    int64_t strides[IK_MAX_OPERANDS][IR_MAX_RANK];
    int64_t off[IK_MAX_OPERANDS];
} ik_iter;
void ik_iter_init(ik_iter *it, int rank, const int64_t *dims);
/* Adds an operand with the given strides (its offset starts at base). */
void ik_iter_add(ik_iter *it, const int64_t *strides, int64_t base);
/* Moves to the next index in row-major order (wrapping to zero at the end). */
void ik_iter_next(ik_iter *it);

/* ---- kernels ---- */
/* interp_elem.c: elementwise */
/* every op with a formula in elemwise.def */
int ik_elem(ik_ctx *c);
int ik_where(ik_ctx *c);
int ik_clip(ik_ctx *c);
int ik_cast(ik_ctx *c);
/* interp_data.c: data movement and shape ops */
int ik_identity(ik_ctx *c);
int ik_dropout(ik_ctx *c);
int ik_reshape(ik_ctx *c);
int ik_flatten(ik_ctx *c);
int ik_squeeze(ik_ctx *c);
int ik_unsqueeze(ik_ctx *c);
int ik_transpose(ik_ctx *c);
int ik_concat(ik_ctx *c);
int ik_split(ik_ctx *c);
int ik_slice(ik_ctx *c);
int ik_gather(ik_ctx *c);
int ik_expand(ik_ctx *c);
int ik_resize(ik_ctx *c);
int ik_shape(ik_ctx *c);
int ik_size(ik_ctx *c);
int ik_constant_of_shape(ik_ctx *c);
int ik_range(ik_ctx *c);
/* interp_nd.c: indexing by coordinates */
int ik_tile(ik_ctx *c);
int ik_pad(ik_ctx *c);
int ik_gather_nd(ik_ctx *c);
int ik_scatter_nd(ik_ctx *c);
/* interp_math.c: contractions and normalisations */
int ik_matmul(ik_ctx *c);
int ik_gemm(ik_ctx *c);
int ik_conv(ik_ctx *c);
int ik_reduce(ik_ctx *c);
int ik_softmax(ik_ctx *c);
int ik_layernorm(ik_ctx *c);
int ik_batchnorm(ik_ctx *c);
/* shared with interp_quant.c: numpy MatMul of A and B (one dtype: floats
 * summed in double, integers exactly) into res, allocated with A's dtype;
 * Conv's geometry (1-D as 2-D of height 1), checked, and the convolution
 * itself in double (b: the bias per output channel, or NULL; y in NCHW). */
int ik_matmul_of(ik_ctx *c, const ir_tensor *A, const ir_tensor *B, ir_tensor *res);
typedef struct {
    int64_t Nb, C, M, Cg, group;
    int64_t in[2], k[2], str[2], dil[2], pb[2], pe[2], out[2];
    int rank;
    int64_t dims[4]; /* the output's */
} ik_conv_geom;
int ik_conv_geom_of(ik_ctx *c, const ir_tensor *X, const ir_tensor *W, ik_conv_geom *g);
void ik_conv_f64(const ik_conv_geom *g, const double *x, const double *w, const double *b, double *y);
/* interp_quant.c: quantized ONNX */
int ik_quantize(ik_ctx *c);
int ik_dequantize(ik_ctx *c);
int ik_dynamic_quantize(ik_ctx *c);
int ik_dynamic_fake_quant(ik_ctx *c);
int ik_quant_lookup(ik_ctx *c);
int ik_linear_int8(ik_ctx *c);
int ik_matmul_integer(ik_ctx *c);
int ik_conv_integer(ik_ctx *c);
int ik_qlinear_matmul(ik_ctx *c);
int ik_qlinear_conv(ik_ctx *c);
/* interp_qop.c: ONNX Runtime's QOperator ops (com.microsoft) */
int ik_qlinear_binary(ik_ctx *c); /* QLinearAdd, QLinearMul */
int ik_qlinear_softmax(ik_ctx *c);
int ik_qlinear_concat(ik_ctx *c);
int ik_qgemm(ik_ctx *c);
/* interp_einsum.c */
int ik_einsum(ik_ctx *c);
/* interp_fused.c: ops that passes create */
int ik_linear(ik_ctx *c);
int ik_attention(ik_ctx *c);
#endif
