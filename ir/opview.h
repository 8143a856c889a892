/* opview.h: the contracts of the structured ops: Linear and Attention
 * (which only passes create) and the normalisations.
 *
 * Each has one typed view: its operands by name, its attributes decoded and
 * checked, and what follows from them.  The passes build a node from a
 * filled view (ir_*_spec), and shape inference, the interpreter and both
 * backends read the view (ir_*_of) instead of the node's input slots and
 * attributes.  A new operand or attribute is added here, to the view, its
 * decoder and its spec, and nowhere else. */
#ifndef VITC_IR_OPVIEW_H
#define VITC_IR_OPVIEW_H

#include "ir/ir.h"

/* The operands of a Linear, in the order the node holds them; a LinearInt8
 * holds its weight scales where a Linear holds the gate. */
enum { IR_LINEAR_X, IR_LINEAR_W, IR_LINEAR_BIAS, IR_LINEAR_RESIDUAL, IR_LINEAR_GATE, IR_LINEAR_NIN };
enum { IR_LINEAR_W_SCALE = IR_LINEAR_GATE };

/* How a LinearInt8 quantizes its input x to u8 (ops.def): with a_scale and
 * a_zero given, dynamically over the whole tensor (DynamicQuantizeLinear's
 * way), or the same per row. */
typedef enum { IR_AQ_STATIC = 0, IR_AQ_TENSOR = 1, IR_AQ_ROW = 2, IR_AQ_COUNT } ir_aquant;

/* y[..., N] = act(x[..., K] @ w[K, N] + bias[N]) * gate + residual, the
 * residual broadcasting to y's shape, the gate (a gated MLP's other
 * projection) of y's shape. */
typedef struct {
    int x, w;     /* value indices */
    int bias;     /* [N], or -1 */
    int residual; /* broadcasts to y, or -1 */
    int gate;     /* y's shape, or -1 */
    int y;        /* the output */
    ir_act act;   /* the activation before the residual */
    /* LinearInt8 (int8 set): W is i8, w_scale [N] its column scales, x
     * quantized to u8 as aq says (a_scale, a_zero for IR_AQ_STATIC) */
    int int8;
    int w_scale;  /* or -1 */
    ir_aquant aq;
    float a_scale;
    int a_zero;
    /* LinearInt8's output fake-quant points (ops.def): {mul, scale, zero,
     * qmin, qmax} on the product and after the bias; scale 0 absent */
    float fq[2][5];
} ir_linear;

/* The operands of an Attention, in the order the node holds them. */
enum { IR_ATTN_QKV, IR_ATTN_BIAS, IR_ATTN_Q, IR_ATTN_ROPE, IR_ATTN_NIN };

/* How q, k and v share the last axis of the packed input: element
 * (part, head h, d) at part*H*D + h*D + d, or (h*D + d)*parts + part. */
typedef enum { IR_QKV_PARTS_HEADS = 0, IR_QKV_HEADS_PARTS = 1 } ir_qkv_layout;

/* Which element of a head each element is rotated with (rotary position
 * embeddings): none, the element half a head away (d + D/2 mod D), or the
 * other of its pair (d xor 1). */
typedef enum { IR_ROPE_NONE = 0, IR_ROPE_HALVES = 1, IR_ROPE_INTERLEAVED = 2 } ir_rope_pairing;

/* The element d of a head of D is rotated with. */
static inline int64_t ir_rope_partner(ir_rope_pairing p, int64_t D, int64_t d)
{
    return p == IR_ROPE_INTERLEAVED ? d ^ 1 : (d + D / 2) % D;
}

/* Where an Attention may fake-quantize (ops.def): Q, K and V as read, the
 * scores (twice: the product, then what a factor made of it), the
 * probabilities, the output. */
typedef enum {
    IR_ATTN_FQ_Q, IR_ATTN_FQ_K, IR_ATTN_FQ_V, IR_ATTN_FQ_S, IR_ATTN_FQ_S2, IR_ATTN_FQ_P, IR_ATTN_FQ_O, IR_ATTN_FQ_N
} ir_attn_fq_point;

/* FakeQuant of x * fq[0] with fq = {mul, scale, zero, qmin, qmax}, as
 * ops.def's FakeQuant computes it in f32 (x * mul rounded to f32 first); x
 * itself where the point is absent (scale 0). */
double ir_fake_quant_point(const float fq[5], double x);
/* 1 if any of the n points fq[0..n-1] is present (scale not 0). */
static inline int ir_fake_quant_any(const float (*fq)[5], int n)
{
    for (int p = 0; p < n; p++)
        if (fq[p][1] != 0)
            return 1;
    return 0;
}
/* The code that point computes of x: clamp(round(x * mul / scale) + zero,
 * qmin, qmax) (x * mul and the quotient each rounded to f32), a NaN giving
 * qmin; the point's value is (code - zero) * scale rounded to f32. */
double ir_fake_quant_code(const float fq[5], double x);

/* out[b, n, h*D + d] = sum_m P[b,h,n,m] V[b,h,m,d] with
 * P = softmax_m(scale * Q[b,h,n,:] . K[b,h,m,:] + bias[b,h,n,m]) * post_scale.
 * Self-attention reads Q, K and V out of qkv [B, N, 3*H*D]; cross-attention
 * reads Q out of q [B, Nq, H*D] and K, V out of qkv [B, Nk, 2*H*D].  With a
 * rotary table (self-attention only), Q and K of tokens n in [rope_start,
 * rope_start + R) are first rotated: x[d] becomes
 *     x[d] * rope[0, t, d] + x[ir_rope_partner(d)] * rope[1, t, d],
 * t = n - rope_start (the sign of the rotation is in rope[1]); a table
 * [2, H, R, D] holds one [R, D] per head h: rope[0, h, t, d] and rope[1, h, t, d]. */
typedef struct {
    int qkv;  /* q, k and v packed by layout; k and v alone where q >= 0 */
    int bias; /* f32 [1|B|P, 1|H, 1|Nq, Nk] added to the scaled scores, or -1; P: the images
               * are P windows of each of B (B x P in all), image i reading bias[i % P] */
    int q;    /* cross-attention's queries [B, Nq, H*D], or -1 */
    int rope; /* f32 [2, R, D] or [2, H, R, D], a constant, or -1 */
    int y;    /* [B, Nq, H*D] */
    int64_t heads, head_size;
    ir_qkv_layout layout;
    float scale, post_scale;
    int parts; /* 3 (q, k, v in qkv) or 2 (k, v; q apart) */
    ir_rope_pairing rope_pairing; /* IR_ROPE_NONE without a table */
    int64_t rope_start;           /* the first token rotated */
    /* fake-quant points (a quantized model's Q/DQ pairs inside attention):
     * fq[p] = {mul, scale, zero, qmin, qmax} for p in ir_attn_fq_point, the
     * point absent where its scale is 0 (see ops.def) */
    float fq[IR_ATTN_FQ_N][5];
} ir_attention;

/* n's view in *v: 1 when n is that op and its attributes are valid; 0 when it
 * is another op (why: empty) or an attribute is out of range (why says which). */
int ir_linear_of(const ir_node *n, ir_linear *v, char *why, size_t len);
int ir_attention_of(const ir_node *n, ir_attention *v, char *why, size_t len);
/* The same for code that runs only on nodes of that op: VITC_OK, or
 * VITC_BAD_INPUT with the reason reported through d against n. */
int ir_linear_get(const ir_node *n, ir_linear *v, vitc_diag *d);
int ir_attention_get(const ir_node *n, ir_attention *v, vitc_diag *d);

/* The element strides of the bias over (image, head, query row), 0 along each
 * dimension it broadcasts over, for nk keys (its last, contiguous axis); all 0
 * without a bias.  The bias's dimensions must be static but for the batch. */
void ir_attention_bias_strides(const ir_graph *g, const ir_attention *a, int64_t nk, int64_t s[3]);
/* P when the bias holds one row per window of P (image i reads row i % P),
 * 0 otherwise (one row, or one per image). */
int64_t ir_attention_bias_period(const ir_graph *g, const ir_attention *a);

/* The operands and outputs of a normalisation, in the order the node holds them. */
enum { IR_NORM_X, IR_NORM_SCALE, IR_NORM_BIAS, IR_NORM_NIN };
enum { IR_NORM_Y, IR_NORM_MEAN, IR_NORM_INV_STD };

/* LayerNormalization: y = (x - mean) / sqrt(var + eps) * scale + bias over
 * the axes from axis on, with mean and 1 / sqrt(var + eps) as optional
 * outputs (of type stash).  RMSNormalization (centered 0): the same without
 * the mean, y = x / sqrt(mean(x^2) + eps) * scale, with no bias and no
 * statistics outputs. */
typedef struct {
    int x, scale;
    int bias;          /* or -1 */
    int y;
    int mean, inv_std; /* optional outputs, or -1 */
    int64_t axis;      /* as written: below 0 counts from the end (ir_norm_axis) */
    float eps;
    ir_dtype stash; /* the type of mean and inv_std */
    int centered;   /* 1: x - mean is normalised (LayerNorm); 0: x itself (RMSNorm) */
} ir_norm;

int ir_norm_of(const ir_node *n, ir_norm *v, char *why, size_t len);
int ir_norm_get(const ir_node *n, ir_norm *v, vitc_diag *d);
/* The first normalised axis of an x of rank rank; -1 when out of range. */
int ir_norm_axis(const ir_norm *v, int rank);

/* A node as the passes make it: op, operands and attributes. */
typedef struct {
    ir_op op;
    int nin;
    int in[5];
    int out;
    int nattrs;
    ir_attr attrs[8];
} ir_node_spec;
_Static_assert(IR_LINEAR_NIN <= 5 && IR_ATTN_NIN <= 5 && IR_NORM_NIN <= 5, "ir_node_spec.in holds every view's operands");

/* The node that computes the view (its x/w/.../y fields set): trailing
 * omitted operands dropped; a Linear's activation written when it has one,
 * the other views' attributes always. */
void ir_linear_spec(const ir_linear *v, ir_node_spec *s);
void ir_attention_spec(const ir_attention *v, ir_node_spec *s);
void ir_norm_spec(const ir_norm *v, ir_node_spec *s);

/* A view with no optional operands, no activation and unit scales: a start
 * for the builders. */
ir_linear ir_linear_make(int x, int w, int y);
ir_attention ir_attention_make(int qkv, int y, int64_t heads, int64_t head_size);
ir_norm ir_norm_make(int x, int scale, int y, int64_t axis, float eps, int centered);

#endif
