/* attn.h: the attention matcher that merge-qkv (qkv.c) and fuse-attention
 * (attention.c) share, private to passes/.
 *
 * attention = pv(Softmax(scores(Q * a, K * b) * s [+ bias]) * p, V) followed
 *   by the head merge, where scores is MatMul(Q, K^T) or an Einsum
 *   contracting the head size, pv is MatMul(P, V) or an Einsum contracting
 *   the keys, a, b, s, p are optional scalar factors (Mul or Div by
 *   constants) and bias an optional tensor added to the scaled scores, or
 *   several constant ones added around reshapes that split the images into
 *   (images, windows) and back: windowed attention's relative position bias
 *   and shift mask (Swin).
 *
 * Every operand is described in canonical order: Q as (batch..., i, d), K as
 * (batch..., j, d), V as (batch..., j, e) and the result O as
 * (batch..., i, e); perm[c] is the operand's dimension holding canonical
 * dimension c. */
#ifndef VITC_PASSES_ATTN_H
#define VITC_PASSES_ATTN_H

#include "ir/opview.h"
#include "passes/rewrite.h"

typedef struct {
    const ir_node *softmax, *scores, *pv;
    int q, k, v, o;     /* operand values (scalar factors stripped) and pv's output */
    int rank;           /* of every operand */
    int qperm[IR_MAX_RANK], kperm[IR_MAX_RANK], vperm[IR_MAX_RANK], operm[IR_MAX_RANK];
    int bias;           /* the tensor added to the scaled scores (an attention mask, a
                         * relative position table), or -1 */
    int nterms;         /* or, windowed: constants added to the scores ... */
    int terms[4];
    int term_split[4];  /* ... each to the scores (0) or to their split view [images, P, ...] (1) */
    int64_t period;     /* P, the windows per image of that split; 0 without one */
    double scale;       /* every factor before the softmax */
    double post_scale;  /* every factor after it */
    /* fake-quant points (with fq_ok): as Attention's (opview.h), and the
     * FakeQuant of the output, which the Attention replaces, or NULL */
    float fq[IR_ATTN_FQ_N][5];
    const ir_node *fq_out;
} attn_skel;

/* A rotary position embedding applied to Q or K (rope.c): r, along its
 * token axis t (its next to last) and its last axis of D elements, is
 *     x' * C + G(x') * S                      (every token rotated), or
 *     Concat_t(x[.., :start, :], x' * C + G(x') * S),  x' = x[.., start:, :],
 * where C and S are f32 constants that vary only along t, the last axis and
 * (tables per head) the axis before t, which must then be Q's and K's heads,
 * and G gathers x' along its last axis with signs: element d of G(x') is
 * sign[d] * x'[.., partner(d)], partner as in opview.h's pairings. */
enum { ATTN_ROPE_MAX_D = 512 };
typedef struct {
    int r;     /* the rotated tensor */
    int src;   /* x: what is rotated */
    int axis;  /* the token axis t of r */
    int64_t start, R, D; /* tokens start..start+R-1 rotated, D elements each */
    int64_t heads;       /* the tables' size along r's axis t - 1: 1, or one table per head */
    int head_dim, head_sub; /* with tables per head: that axis in Q's canonical view (attn_views) */
    int cos, sin;        /* C and S */
    ir_rope_pairing pairing;
    signed char sign[ATTN_ROPE_MAX_D];
} attn_rope;

/* 1 when r is such a rotation (*ro filled), 0 when it is not one, -1 when
 * it looks like one but is not (why says what). */
int attn_rope_of(const ir_graph *g, int r, attn_rope *ro, char *why, size_t nwhy);
/* 1 when a and b rotate alike (the same pairing, tokens and tables). */
int attn_rope_same(const ir_graph *g, const attn_rope *a, const attn_rope *b);
/* A new constant [2, R, D] (or [2, heads, R, D]): C, then S times the
 * signs (Attention's rope input); -1 when out of memory. */
int attn_rope_table(ir_graph *g, const attn_rope *ro, const char *name);

/* Matches the skeleton at a Softmax: 1 when it matched, 0 when the Softmax
 * is no attention candidate, -1 with the first failed condition in why.
 * fq_ok: FakeQuants (one scale and zero point each) on Q, K, the scores, the
 * probabilities and the output are taken as fake-quant points; otherwise
 * they are misses. */
int attn_skeleton(const ir_graph *g, const ir_node *softmax, attn_skel *s, int fq_ok, char *why, size_t nwhy);
/* The views of Q, K and V (traced through data movement, and through a
 * rotary embedding applied alike to Q and K, described in *rope; rope->r is
 * -1 without one), permuted into canonical order.  Scalar factors on Q or K
 * before the rotation are multiplied into *scale.  0, or -1 with the reason. */
int attn_views(const ir_graph *g, const attn_skel *s, view *q, view *k, view *v, attn_rope *rope, double *scale,
               char *why, size_t nwhy);

/* How Q, K and V sit in one packed projection qkv [B, N, 3*H*D], or, for
 * cross-attention, Q in its own [B, Nq, H*D] and K, V in one packed
 * [B, Nk, 2*H*D]. */
typedef struct {
    int root;                 /* the packed tensor (qkv, or kv) */
    int q_root;               /* cross-attention: the Q projection; -1 when Q is in root */
    int layout;               /* qkv_layout of ops.def */
    int64_t heads, head_size, tokens, kv_tokens; /* tokens: of the queries and the output */
    int nbatch_sub[IR_MAX_RANK]; /* for each canonical batch dim of Q: its sub-axes ... */
    int is_head[IR_MAX_RANK][VIEW_MAX_SUB]; /* ... each the image index (0) or the head (1) */
} attn_layout;

/* Checks that q, k, v read one packed tensor as heads (or q one tensor and
 * k, v another); 0, or -1 with the reason.  A batch sub-axis that holds the
 * images and the heads merged (one token per image: the heads folded into
 * the batch of a single query) is split into the two first, in the views. */
int attn_layout_of(const ir_graph *g, view *q, view *k, view *v, attn_layout *L, char *why,
                   size_t nwhy);

#endif
