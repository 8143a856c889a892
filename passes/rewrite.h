/* rewrite.h: what the passes share, private to passes/.
 *
 * - Reading the graph: producers, consumers, constants and their values.
 * - Changing it: a fused node overwrites the root node of its pattern in
 *   place (so it keeps the root's output value, and with it the graph
 *   output's name); new nodes are appended and rw_finish() puts the graph
 *   back in order (dead nodes removed, topological order, shapes inferred).
 * - Rules (apply.c): a pattern pass is a list of rules {anchor op, match,
 *   rewrite} that rw_apply() runs to a fixed point, keeping the explain
 *   record and cleaning up; pattern.c is the arithmetic vocabulary rules
 *   match with (operand order, grouping of products, Div as Mul).
 * - Views (view.c): the index map of a chain of data-movement ops
 *   (Reshape, Transpose, Squeeze, Unsqueeze, Flatten, Slice, Split, Gather
 *   of a constant index) back to the tensor it reads, as strided sub-axes.
 * - Explanations (explain.c): rw_miss / rw_hit, recorded by the driver in the
 *   collector of the pipeline run, if any. */
#ifndef VITC_PASSES_REWRITE_H
#define VITC_PASSES_REWRITE_H

#include "ir/opview.h"
#include "passes/passes.h"

/* ---- reading the graph ---- */

/* The node producing value v, or NULL for inputs, constants and -1. */
const ir_node *rw_producer(const ir_graph *g, int v);
/* The producer of v if it is an op; NULL otherwise. */
const ir_node *rw_def(const ir_graph *g, int v, ir_op op);
/* Node index of a node pointer into g->nodes. */
int rw_index(const ir_graph *g, const ir_node *n);
/* How many times v is read: node inputs plus graph outputs. */
int rw_uses(const ir_graph *g, int v);
int rw_is_graph_output(const ir_graph *g, int v);
/* The node reading v when v has exactly one use and it is a node; else NULL. */
const ir_node *rw_only_user(const ir_graph *g, int v);
/* Up to max nodes reading v (each once); returns the count of such nodes. */
int rw_users(const ir_graph *g, int v, const ir_node **users, int max);
/* The fold pass's parts (fold.c): repl maps each of the first nv values to
 * the constant made for it (-1: none yet; fold_repl_new gives it, or NULL
 * after reporting); fold_known_inputs makes node i read constants where it
 * read a tensor whose values shape inference knows (symval). */
int *fold_repl_new(const ir_graph *g, vitc_diag *d);
int fold_known_inputs(ir_graph *g, int i, int *repl, int nv);
/* 1 if v is a constant whose values do not depend on the batch. */
int rw_is_const(const ir_graph *g, int v);
/* The value of a constant with exactly one element (any number dtype). */
int rw_scalar(const ir_graph *g, int v, double *out);
/* The scale, zero point, qmin and qmax of FakeQuant node n in p; 0 when its
 * scale or zero point is not one constant number (per axis). */
int rw_fake_quant_params(const ir_graph *g, const ir_node *n, double p[4]);
/* The same as a fake-quant point {mul, scale, zero, qmin, qmax} (opview.h)
 * in f; 0 also when the scale is not positive. */
int rw_fake_quant_point(const ir_graph *g, const ir_node *n, double mul, float f[5]);
/* 1 and *out when every element of v is the same number (bool: 0 or 1) for
 * any batch: a constant so filled, or one seen through views, Expand,
 * Transpose, a Where whose condition is such a splat, and Casts. */
int rw_splat(const ir_graph *g, int v, double *out);
/* Every element of a plain constant as double, malloc'ed; NULL if v is not one. */
double *rw_const_f64(const ir_graph *g, int v, int64_t *count);
/* Constant v broadcast to the static shape dims (rank of them), numpy's
 * way (right-aligned; v's dimensions 1 or dims', any extra leading ones 1):
 * a malloc'd array of their product, or NULL when v is no such constant. */
double *rw_const_broadcast(const ir_graph *g, int v, int rank, const int64_t *dims);
/* The int64 or int32 constant of input i of n (rank 0 or 1, at most max
 * values) into vals: its count, or -1 when it is no such constant. */
int rw_const_ints(const ir_graph *g, const ir_node *n, int i, int64_t *vals, int max);
/* For a binary node with one scalar-constant input and one computed one:
 * the computed input and the constant; 0 otherwise (also for n == NULL). */
int rw_scalar_operand(const ir_graph *g, const ir_node *n, int *other, double *c);
/* The other input of a binary node n, given one of them; -1 if neither. */
int rw_other_input(const ir_node *n, int v);
/* Number of elements of a value whose shape is static; -1 otherwise. */
int64_t rw_numel(const ir_value *v);
/* The static dims of a value into dims; 0 if some dimension depends on the batch. */
int rw_static_dims(const ir_value *v, int64_t *dims);
/* Normalised axis, or -1 when out of range. */
int rw_axis(int64_t axis, int rank);
/* |a - b| <= tol * |b| */
int rw_close(double a, double b, double tol);

/* ---- changing the graph ---- */

/* Makes every node input reading `from` read `to`.  Refuses (returns 0, and
 * changes nothing) when `from` is a graph output; 1 otherwise. */
int rw_replace_uses(ir_graph *g, int from, int to);
/* Overwrites node ni with a new op, inputs, outputs and attributes (copied
 * into the arena).  Values it no longer produces lose their producer. */
int rw_set_node(ir_graph *g, int ni, ir_op op, const char *name, const char *op_type, int nin, const int *in,
                int nout, const int *out, int nattrs, const ir_attr *attrs);
/* rw_set_node with a fused op's node (ir/opview.h's ir_*_spec). */
int rw_set_spec(ir_graph *g, int ni, const char *name, const char *op_type, const ir_node_spec *s);
/* Appends a node with one output; returns the node index or -1. */
int rw_add_node(ir_graph *g, ir_op op, const char *name, const char *op_type, int nin, const int *in, int out,
                int nattrs, const ir_attr *attrs);
/* Appends op(in...) -> a new value of dtype dt named base + suffix (made
 * unique), the node named after it; the value, or -1 out of memory. */
int rw_append(ir_graph *g, ir_op op, const char *base, const char *suffix, ir_dtype dt, int nin, const int *in,
              int nattrs, const ir_attr *at, const char *op_type);
/* A new node-produced value named base + suffix (made unique); -1 when out of memory. */
int rw_new_value(ir_graph *g, const char *base, const char *suffix, ir_dtype dt);
/* New constants; -1 when out of memory. */
int rw_const_f32(ir_graph *g, const char *base, const char *suffix, int rank, const int64_t *dims,
                 const float *data);
int rw_const_i64(ir_graph *g, const char *base, const char *suffix, int n, const int64_t *vals);
/* A constant of any dtype: nbytes of data, shaped rank, dims. */
int rw_const_raw(ir_graph *g, const char *base, const char *suffix, ir_dtype dt, int rank, const int64_t *dims,
                 const void *data, size_t nbytes);
/* 1 if rw_shape_const can write dims: no 0 (Reshape would copy the input's
 * dimension) and at most one dimension that depends on the batch. */
int rw_shape_expressible(int rank, const ir_dim *dims);
/* A Reshape target for dims: -1 stands for the one dimension that depends on
 * the batch; -1 (no value) if dims are not rw_shape_expressible. */
int rw_shape_const(ir_graph *g, const char *base, int rank, const ir_dim *dims);
/* Appends Reshape(x) -> a new value (or into `out` when out >= 0); returns the value or -1. */
int rw_reshape(ir_graph *g, int x, int rank, const ir_dim *dims, const char *name, int out);
/* Appends Transpose(x, perm) -> a new value (or `out`); returns the value or -1. */
int rw_transpose(ir_graph *g, int x, int rank, const int64_t *perm, const char *name, int out);
/* Removes nodes no output needs, restores topological order and producers,
 * and infers shapes again.  Every pass that rewrites calls it before returning. */
int rw_finish(ir_graph *g, vitc_diag *d);
/* The name a fused node gets: the longest common "/"-prefix of the names of
 * the first and last node of the pattern (torch's module path), else last's. */
const char *rw_fused_name(ir_graph *g, const ir_node *first, const ir_node *last);

/* Attribute constructors. */
ir_attr rw_attr_int(ir_attr_id id, int64_t v);
ir_attr rw_attr_float(ir_attr_id id, float v);
ir_attr rw_attr_ints(ir_graph *g, ir_attr_id id, int n, const int64_t *v);

/* ---- rules and the driver (apply.c) ----
 * A pass that rewrites patterns is a list of rules run by rw_apply().  A
 * rule starts at an anchor node; its match function reads the graph and
 * binds what the rewrite needs into the rule's own match struct (`size`
 * bytes, zeroed by the driver), or says why not.  The driver owns the rest:
 * the walk over the nodes, the fixed point, the --explain-fusion record and
 * the cleanup (rw_finish) after every rewrite. */
typedef struct {
    const char *name; /* what the rule recognises */
    ir_op anchor;     /* the op a candidate starts at; RW_ANY_OP: every node */
    size_t size;      /* of the rule's match struct */
    int canonical;    /* 1: a canonicalisation, not counted as a fusion */
    /* 1: matched, the bindings in m; 0: n is no candidate; -1: a near miss,
     * the first condition that failed in why (what --explain-fusion prints). */
    int (*match)(const ir_graph *g, const ir_node *n, void *m, char *why, size_t nwhy);
    /* Rewrites a match found at node ni: 0, or -1 when out of memory. */
    int (*rewrite)(ir_graph *g, int ni, const void *m);
} rw_rule;
#define RW_ANY_OP IR_OP_COUNT

/* Walks the nodes in order; at each, tries the rules whose anchor it is, in
 * order.  When one matches, the driver rewrites, counts a fusion, cleans up
 * (rw_finish) and walks again from the start, until no rule matches.  Near
 * misses are recorded on their anchor node.  Returns a status. */
int rw_apply(ir_graph *g, const rw_rule *rules, int nrules, vitc_diag *d);
#define RW_APPLY(g, rules, d) rw_apply((g), (rules), (int)(sizeof(rules) / sizeof((rules)[0])), (d))

/* ---- patterns (pattern.c): the arithmetic vocabulary of the matchers ----
 * Each reads the producer of a value and answers whether it has a shape,
 * binding its operands.  Add and Mul match their operands in either order;
 * a Div by a constant c is matched as a Mul by 1 / c.  A "scalar" is a
 * constant with one element; "computed" is anything else. */

/* v = op(a, other) or op(other, a) for a commutative op; the node, with *other. */
const ir_node *pat_with(const ir_graph *g, int v, ir_op op, int a, int *other);
/* v = x * c | c * x | x / c (then *c is 1 / the divisor), c a scalar, x computed. */
const ir_node *pat_scaled(const ir_graph *g, int v, int *x, double *c);
/* v = x + c | c + x, c a scalar, x computed. */
const ir_node *pat_plus(const ir_graph *g, int v, int *x, double *c);
/* v = x * x | Pow(x, 2); the node, with *x. */
const ir_node *pat_square(const ir_graph *g, int v, int *x);
/* v = x * x * x | Pow(x, 3), intermediate products read once; the node, with *x. */
const ir_node *pat_cube(const ir_graph *g, int v, int *x);
/* v is a scalar constant within a relative tol of want. */
int pat_const_near(const ir_graph *g, int v, double want, double tol);
/* v = num / den | num * Reciprocal(den) | Reciprocal(den) * num, the
 * Reciprocal read once; the node, with *num and *den. */
const ir_node *pat_divide(const ir_graph *g, int v, int *num, int *den);
/* v = x * s + t, the Mul and the Add in either operand order, s and t
 * constants of any shape, x computed, the product read once; the Add. */
const ir_node *pat_affine(const ir_graph *g, int v, int *x, int *s, int *t);
/* A product as its factors: the computed factors of the Mul tree at node n
 * (descending through Muls and Divs by scalars whose result is read once)
 * into f (up to max; returns their count, or -1 when there are more), the
 * scalar factors multiplied into *coef. */
int pat_factors(const ir_graph *g, const ir_node *n, int *f, int max, double *coef);
/* The smallest product, climbing from v through the Muls and Divs by
 * scalars that read it once, whose computed factors are exactly a and b and
 * whose scalar factor is within a relative 1e-6 of want: its root node.
 * NULL otherwise, with *why: PAT_NOT_MULTIPLIED (v is not multiplied),
 * PAT_OTHER_FACTOR (the climb met a factor other than a and b) or
 * PAT_OTHER_SCALAR (a times b was found, but scaled by *coef). */
enum { PAT_NOT_MULTIPLIED, PAT_OTHER_FACTOR, PAT_OTHER_SCALAR };
const ir_node *pat_product_of(const ir_graph *g, int v, int a, int b, double want, double *coef, int *why);

/* ---- explanations ---- */

/* A candidate anchored at n did not fuse, for the reason given.  Also usable
 * with n == NULL for graph-level notes (ignored then). */
void rw_miss(const ir_graph *g, const ir_node *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A candidate fused. */
void rw_hit(void);
/* Set by the pipeline around each pass (explain.c). */
void rw_explain_begin(pass_explain *e, const char *pass);
void rw_explain_end(const ir_graph *g);
/* After the last pass: every op a fusion exists for (Softmax, Sigmoid, Pow,
 * Sqrt, Reciprocal, MatMul, Erf) still outside a fused op, recorded with
 * the candidate that did not fuse at it or up to 6 nodes above or below it
 * (only up, or only down), or with none (no rule took it). */
void rw_explain_leftovers(pass_explain *e, const ir_graph *g);

/* ---- views ---- */

enum { VIEW_MAX_SUB = 8 };
typedef struct {
    ir_dim size;
    ir_dim stride; /* in elements of the root tensor */
} view_sub;

/* Dimension i of the viewed tensor enumerates its sub-axes sub[i][0..nsub[i])
 * in row-major order (a dimension of size 1 has none).  Element (i0, i1, ..)
 * is root element base + sum over sub-axes of index * stride.  Sizes and
 * strides are k * B^e like every dimension of the IR. */
typedef struct {
    int root; /* value index of the tensor read */
    int64_t base;
    int rank;
    int nsub[IR_MAX_RANK];
    view_sub sub[IR_MAX_RANK][VIEW_MAX_SUB];
} view;

/* The identity view of value v. */
int view_identity(const ir_graph *g, int v, view *out, char *why, size_t nwhy);
/* Walks from v up through data-movement ops while their input is not
 * `stop` (-1: walk as far as possible), and returns v's view of the value
 * where it stopped.  0 on success; otherwise the reason in why. */
int view_trace(const ir_graph *g, int v, int stop, view *out, char *why, size_t nwhy);
/* The same walk from v up to `stop`, whose own view is *start (of a tensor
 * shaped like stop): v's view of start's root. */
int view_trace_over(const ir_graph *g, int v, int stop, const view *start, view *out, char *why, size_t nwhy);
/* 1 if n is a data-movement op that view_trace walks through. */
int view_is_movement(const ir_graph *g, const ir_node *n);
/* Merges adjacent sub-axes that are contiguous and drops those of size 1. */
void view_normalize(view *w);
/* The size of dimension i (product of its sub-axes). */
ir_dim view_dim(const view *w, int i);
/* 1 if a and b have the same sub-axes (whatever their roots and bases). */
int view_same_subs(const view *a, const view *b);
/* 1 if w is exactly the identity view of its root. */
int view_is_identity(const ir_graph *g, const view *w);
/* 1 if w reads all of its root's elements in row-major order (a Reshape of it). */
int view_is_reshape(const ir_graph *g, const view *w);
/* 1 if w reads every element of its root exactly once (a permutation). */
int view_is_permutation(const ir_graph *g, const view *w);
/* Appends the nodes (Reshape, Transpose, Reshape) that compute w from its
 * root, the last one producing value `out`.  Only permutations can be
 * emitted; returns 0 on success. */
int view_emit(ir_graph *g, const view *w, int out, const char *name);
/* 1 if view_emit can emit w over a root of the given shape (which need not
 * exist yet): a match checks this so that its rewrite cannot fail. */
int view_can_emit(const view *w, int root_rank, const ir_dim *root_dims);
/* Applies data-movement node n, whose input 0 has view `in`, for its output
 * number k; 0 on success. */
int view_apply(const ir_graph *g, const ir_node *n, int k, const view *in, view *out, char *why, size_t nwhy);

#endif
