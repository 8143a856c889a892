/* interp.h: the reference interpreter.
 *
 * Plain, op-by-op loops over concrete tensors, accumulating reductions and
 * matmuls in double.  It is the ground truth that `vitc compare`, the fusion
 * tests and the backends are checked against, so it favours being obviously
 * right over being fast.  It runs any graph the IR can hold: imported ONNX ops
 * and, as passes add them, fused ops. */
#ifndef VITC_INTERP_H
#define VITC_INTERP_H

#include "ir/ir.h"

/* Called after each node with each of its outputs (value index and tensor).
 * The tensor is owned by the interpreter; copy it to keep it. */
typedef void (*ir_interp_observer)(void *ctx, const ir_graph *g, int node, int value,
                                   const ir_tensor *t);

/* Runs g.  inputs: one tensor per graph input, in g->inputs order; their shapes
 * must match the graph's with one batch size (checked).  outputs: g->noutputs
 * tensors, filled here and owned by the caller (ir_tensor_free).  observer may
 * be NULL.  Returns VITC_OK, or a status with a message through d that names
 * the node. */
int ir_interpret(const ir_graph *g, const ir_tensor *inputs, ir_tensor *outputs,
                 ir_interp_observer observer, void *ctx, vitc_diag *d);

/* 1 if the interpreter implements n (op and the attribute values it uses). */
int ir_interp_supports(const ir_graph *g, const ir_node *n);

/* Runs the single node n of g on concrete inputs (in[i] for n->inputs[i];
 * entries of omitted inputs are ignored), at the given batch (for attributes
 * and constants that depend on it).  Fills out[0 .. n->noutputs-1], owned by
 * the caller (ir_tensor_free) on success.  Constant folding uses it. */
int ir_interp_node(const ir_graph *g, const ir_node *n, const ir_tensor *in, ir_tensor *out, int64_t batch,
                   vitc_diag *d);

/* The compile-time evaluator's one way into the interpreter: runs n (an
 * imported op, never a fused one) like ir_interp_node at batch 1, saying
 * nothing.  VITC_OK with out filled, or a status: then the node stays in the
 * graph and its failure, if any, is reported where it runs. */
int ir_interp_eval(const ir_graph *g, const ir_node *n, const ir_tensor *in, ir_tensor *out);
/* The same for any op the interpreter runs, fused ones included (quant-lookup's
 * tables). */
int ir_interp_eval_any(const ir_graph *g, const ir_node *n, const ir_tensor *in, ir_tensor *out);

/* Resize (interp_resize.c): 1 if the interpreter implements n's mode and
 * attributes, else 0 with why (when not NULL) saying what it lacks; 1 if,
 * when its output has its input's shape at scale 1, n copies its input
 * (every coordinate mode maps each element onto itself but
 * tf_crop_and_resize and tf_half_pixel_for_nn). */
int ir_resize_supported(const ir_node *n, char *why, size_t len);
int ir_resize_copies_at_same_size(const ir_node *n);
/* The axes n resizes, normalised, in axes (every axis of an input of rank
 * `rank` when n has no `axes`); their count, or -1 with why. */
int ir_resize_axes(const ir_node *n, int rank, int *axes, char *why, size_t len);
/* The output sizes and scales of naxes resized axes of lengths in, asked
 * for as sizes: with keep_aspect_ratio_policy stretch, sizes and sizes / in;
 * with not_larger or not_smaller, one scale, the least or the largest of
 * sizes / in, and the sizes it gives, rounded half up.  0, or -1 with why. */
int ir_resize_keep_aspect(const ir_node *n, int naxes, const int64_t *in, const int64_t *sizes, int64_t *out,
                          double *scale, char *why, size_t len);

/* Pad and ScatterND (interp_nd.c), the one reading of their attributes for
 * the interpreter and the backends.  ir_pad_mode: Pad's mode as 'c'onstant,
 * 'r'eflect, 'e'dge or 'w'rap, 0 if unsupported.  ir_pad_source: where
 * coordinate j of an axis of n elements (j counted from the input's first
 * element, so negative in the padding before it) reads from under mode m;
 * -1 for the constant.  ir_scatter_nd_reduction: ScatterND's reduction as 0
 * (none), '+', '*', '>' (max) or '<' (min), '?' if unsupported. */
char ir_pad_mode(const ir_node *n);
int64_t ir_pad_source(int64_t j, int64_t n, char m);
char ir_scatter_nd_reduction(const ir_node *n);

#endif
