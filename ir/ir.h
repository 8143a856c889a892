/* ir.h: vitc's graph IR.
 *
 * A graph is a list of nodes in topological order over a table of values
 * (tensors).  Every value has an element type and a shape whose dimensions are
 * static except for a symbolic batch: each dimension is k * B^e (e is 0 for a
 * plain number, 1 for "k times the batch").  Nodes are small fixed-size structs:
 * an op from ops.def, inputs and outputs by value index, inline attributes and
 * their provenance (the ONNX node's name and op_type).
 *
 * All memory of a graph lives in one arena, released with ir_graph_free(). */
#ifndef VITC_IR_H
#define VITC_IR_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define IR_MAX_RANK 8
#define VAR 0x7fff /* variadic arity in ops.def */

/* ---- status codes, shared by every layer and the CLI's exit codes ---- */
enum { VITC_OK = 0, VITC_CHECK_FAILED = 1, VITC_BAD_INPUT = 2, VITC_INTERNAL = 3 };

/* ---- op, dtype and attribute tables (X-macros) ---- */
enum {
    OPF_ELEMWISE = 1 << 0,
    OPF_FUSED = 1 << 1,
    OPF_VIEW = 1 << 2,
    OPF_MOVEMENT = 1 << 3,
    OPF_FLOAT_ONLY = 1 << 4,
    OPF_TRANSCENDENTAL = 1 << 5,
    OPF_CONTRIB = 1 << 6,
};

/* What kind of code computes an op (the family column of ops.def). */
typedef enum {
    IR_FAM_VIEW,
    IR_FAM_DATA,
    IR_FAM_MAP,
    IR_FAM_NORM,
    IR_FAM_MATMUL,
    IR_FAM_ATTENTION,
    IR_FAM_QUANT,
    IR_FAM_SHAPE
} ir_op_family;

typedef enum {
#define OP(id, name, mi, ma, mo, mao, fam, fl) IR_OP_##id,
#include "ir/ops.def"
#undef OP
    IR_OP_COUNT
} ir_op;

typedef struct {
    const char *name; /* ONNX op_type, or the printed name of a fused op */
    int16_t min_in, max_in, min_out, max_out;
    ir_op_family family;
    unsigned flags;
} ir_op_info;

extern const ir_op_info ir_op_table[IR_OP_COUNT];
const char *ir_op_name(ir_op op);
static inline ir_op_family ir_op_family_of(ir_op op) { return ir_op_table[op].family; }
/* 1 if op's row in ops.def has every flag of f. */
static inline int ir_op_has(ir_op op, unsigned f) { return (ir_op_table[op].flags & f) == f; }

/* The activation a Linear applies (its `activation` attribute), and what the
 * interpreter, the kernels and the CUDA source compute for it: the rows of
 * act.def, numbered from 0. */
#include "ir/act.def"
typedef enum {
#define IR_ACT_ENUM(name) IR_ACT_##name,
    IR_ACT_ROWS(IR_ACT_ENUM)
#undef IR_ACT_ENUM
    IR_ACT_COUNT
} ir_act;
/* The activation a Gelu node computes (its `approximate` attribute: "none"
 * gives IR_ACT_GELU_ERF, "tanh" IR_ACT_GELU_TANH); IR_ACT_NONE when the
 * attribute names another form, which no backend supports.  The one place
 * that reads the attribute's string.  A QuickGelu node: IR_ACT_QUICK_GELU. */
struct ir_node;
ir_act ir_gelu_act(const struct ir_node *n);
/* The reference value of activation a at x, in double (the interpreter's
 * Linear and Gelu both use it). */
double ir_act_ref(double x, ir_act a);
/* What an activation adds to a fused op's type and a kernel's label:
 * "+Gelu", "+SiLU", ...; "" for none. */
const char *ir_act_label(ir_act a);
/* FNV-1a of a C string: the hash of the name tables (the importer's, the
 * branch inliner's). */
uint64_t ir_str_hash(const char *s);

/* ---- element-wise formulas (elemwise.def) ---- */
typedef enum { IR_EW_FLOAT, IR_EW_NUM, IR_EW_BOOL, IR_EW_ALL } ir_ew_inputs;
typedef enum { IR_EW_SAME, IR_EW_PRED, IR_EW_LIKE1 } ir_ew_result;
typedef struct {
    unsigned char has;    /* the op has a row in elemwise.def */
    unsigned char inputs; /* ir_ew_inputs */
    unsigned char result; /* ir_ew_result */
    unsigned char same;   /* every input has input 0's type */
} ir_ew_info;
extern const ir_ew_info ir_ew_table[IR_OP_COUNT];
/* The op's row in elemwise.def, or NULL when it has no formula. */
static inline const ir_ew_info *ir_ew(ir_op op) { return ir_ew_table[op].has ? &ir_ew_table[op] : NULL; }
/* How many rows elemwise.def has: tables that list every op without a
 * formula assert IR_OP_COUNT - IR_EW_COUNT, so a new formula op needs no entry. */
enum {
#define EW(id, in, res, same, f) IR_EW_ROW_##id,
#include "ir/elemwise.def"
#undef EW
    IR_EW_COUNT
};

/* The op for an ONNX op_type in the default domain; -1 if unsupported. */
int ir_op_from_onnx(const char *op_type);
/* The op for an op_type of a domain: the default one (NULL, "" or
 * "ai.onnx") as ir_op_from_onnx, "com.microsoft" its ops of ops.def
 * (OPF_CONTRIB); -1 for anything else. */
int ir_op_from_onnx_domain(const char *domain, const char *op_type);

typedef enum {
#define DT(id, code, size, name) IR_##id,
#include "ir/dtypes.def"
#undef DT
    IR_DTYPE_COUNT
} ir_dtype;

const char *ir_dtype_name(ir_dtype t);
size_t ir_dtype_size(ir_dtype t);
int ir_dtype_onnx_code(ir_dtype t);
/* The dtype for an ONNX TensorProto.DataType code; -1 if unsupported. */
int ir_dtype_from_onnx(int code);
int ir_dtype_is_float(ir_dtype t);

typedef enum {
#define AT(id, name) IR_ATTR_##id,
#include "ir/attrs.def"
#undef AT
    IR_ATTR_COUNT
} ir_attr_id;

const char *ir_attr_name(ir_attr_id a);
int ir_attr_from_onnx(const char *name); /* -1 if unknown */

/* ---- arena: one per graph, freed in one call ---- */
typedef struct ir_arena ir_arena;
ir_arena *ir_arena_new(void);
void ir_arena_free(ir_arena *a);
/* Zeroed memory; NULL only when the system is out of memory or n overflows. */
void *ir_alloc(ir_arena *a, size_t n);          /* zeroed */
void *ir_alloc_uninit(ir_arena *a, size_t n);   /* not zeroed: for memory written whole at once */
/* Takes a malloc'ed buffer into the arena: freed with it.  -1 (not taken)
 * when out of memory. */
int ir_arena_adopt(ir_arena *a, void *p);
void *ir_alloc_array(ir_arena *a, size_t count, size_t size);
char *ir_strdup(ir_arena *a, const char *s);
char *ir_strndup(ir_arena *a, const char *s, size_t n);

/* ---- overflow-checked size arithmetic ---- */
/* Each returns 0 on success and 1 on overflow (out unchanged then). */
int ir_mul_ovf(int64_t a, int64_t b, int64_t *out);
int ir_add_ovf(int64_t a, int64_t b, int64_t *out);

/* ---- diagnostics ---- */
/* Errors go to `out` as "FILE: node 'NAME' (OpType): message" lines (after
 * "PROGRAM: " where vitc_diag_set_program named one); the
 * first non-OK status is kept.  Several errors can be reported before a
 * caller gives up, so that every unsupported node is listed at once. */
typedef struct {
    FILE *out;        /* NULL: stderr */
    const char *file; /* model path, for messages */
    int status;       /* first error status, VITC_OK if none */
    int nerrors;
} vitc_diag;

struct ir_node;
void vitc_diag_init(vitc_diag *d, const char *file);
/* Every diagnostic line starts with "NAME: " from now on (the vitc CLI sets
 * "vitc", so that all its errors carry one prefix); NULL: none (the default). */
void vitc_diag_set_program(const char *name);
int vitc_error(vitc_diag *d, int status, const struct ir_node *n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int vitc_verror(vitc_diag *d, int status, const struct ir_node *n, const char *fmt, va_list ap);
/* Error for a node known only by its ONNX name and op_type (during import). */
int vitc_error_at(vitc_diag *d, int status, const char *node_name, const char *op_type,
                  const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* "FILE: warning: message" (with the node where n is given): said, but
 * neither an error nor a change of status. */
void vitc_warning(vitc_diag *d, const struct ir_node *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* "FILE: message", a line that goes with an error (what to do next): not
 * counted as one. */
void vitc_note(vitc_diag *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- symbolic dimensions: k * B^e ---- */
typedef struct {
    int64_t k;
    int32_t e;
} ir_dim;

static inline ir_dim ir_dim_const(int64_t k) { ir_dim d = {k, 0}; return d; }
static inline ir_dim ir_dim_batch(int64_t k) { ir_dim d = {k, 1}; return d; }
static inline int ir_dim_eq(ir_dim a, ir_dim b) { return a.k == b.k && (a.e == b.e || a.k == 0); }
/* The dimension's value at a concrete batch; -1 on overflow. */
int64_t ir_dim_eval(ir_dim d, int64_t batch);
/* Formats "197", "B", "197*B" or "3*B^2" into buf; returns buf. */
char *ir_dim_str(ir_dim d, char *buf, size_t n);

/* ---- values (tensors of the graph) ---- */
typedef enum {
    IR_VAL_NODE = 0, /* produced by a node */
    IR_VAL_INPUT,    /* graph input */
    IR_VAL_CONST     /* initializer or folded constant: data holds the payload */
} ir_val_kind;

typedef struct ir_value {
    const char *name;
    ir_val_kind kind;
    ir_dtype dtype;
    int rank; /* -1: not yet inferred */
    ir_dim dims[IR_MAX_RANK];
    int producer;     /* node index, -1 for inputs and constants */
    void *data;       /* IR_VAL_CONST: little-endian payload of nbytes */
    size_t nbytes;
    ir_dim *symval;   /* small integer tensors whose values are known at compile
                         time in terms of the batch (shape arithmetic); nsymval
                         entries, NULL when unknown */
    int nsymval;
    double *kval;     /* small float tensors computed at compile time from known
                         numbers (shape arithmetic written in floats); nkval
                         entries, NULL when unknown.  Shape inference's own. */
    int nkval;
} ir_value;

/* 1 if a and b have one known rank and equal dimensions (ir_dim_eq). */
static inline int ir_same_shape(const ir_value *a, const ir_value *b)
{
    if (a->rank != b->rank || a->rank < 0)
        return 0;
    for (int i = 0; i < a->rank; i++)
        if (!ir_dim_eq(a->dims[i], b->dims[i]))
            return 0;
    return 1;
}

/* ---- attributes ---- */
typedef enum { IR_AT_INT, IR_AT_FLOAT, IR_AT_INTS, IR_AT_FLOATS, IR_AT_STRING, IR_AT_TENSOR } ir_attr_kind;

typedef struct {
    ir_attr_id id;
    ir_attr_kind kind;
    int64_t i;
    float f;
    int n;          /* ints/floats count; string length */
    int64_t *ints;
    float *floats;
    const char *s;  /* NUL-terminated */
    int tensor;     /* IR_AT_TENSOR: index of an IR_VAL_CONST value */
} ir_attr;

/* ---- nodes ---- */
typedef struct ir_node {
    ir_op op;
    int ninputs, noutputs;
    int *inputs;  /* value indices; -1 for an omitted optional input */
    int *outputs; /* value indices; -1 for an omitted optional output */
    int nattrs;
    ir_attr *attrs;
    const char *name;    /* provenance: ONNX node name ("" if none) */
    const char *op_type; /* provenance: ONNX op_type, or the pass that made it */
} ir_node;

/* ---- If branches ----
 * A branch of an If (its then_branch or else_branch), kept from import until
 * shape inference knows the condition and inlines the branch it picks
 * (ir_inline_if); the other is never inferred.  Its nodes are ir_nodes whose
 * inputs and outputs are references: v >= 0 a value of the graph (a constant
 * the branch defines), -1 an omitted one, v <= -2 the branch's local
 * IR_BRANCH_LOCAL(v).  A local is the output of one of its nodes, or a
 * capture: a value of the enclosing scope the branch reads by name, capture
 * k being input 1 + capture_base + k of its If.  A node of a branch may be
 * an If itself, whose inputs are then references of this branch. */
#define IR_BRANCH_REF(local) (-2 - (local))
#define IR_BRANCH_LOCAL(ref) (-2 - (ref))
typedef struct {
    ir_node *nodes;
    int nnodes;
    const char **local_names; /* the names the model gives the locals */
    int *capture;             /* per local: its capture index, or -1 (a node's output) */
    int nlocals;
    int ncaptures, capture_base;
    int *outputs; /* references, one per output of the If */
    int noutputs;
} ir_branch;

/* ---- graph ---- */
typedef struct ir_graph {
    ir_arena *arena;
    const char *path; /* model file, for messages */
    int64_t opset;    /* default-domain opset */
    uint64_t source_hash; /* vitc_model_hash of the ONNX file's bytes; 0: not read from a file */
    ir_value *values;
    int nvalues, cap_values;
    ir_node *nodes;
    int nnodes, cap_nodes;
    int *inputs;  /* graph inputs (non-initializer), value indices */
    int ninputs;
    int *outputs; /* graph outputs, value indices */
    int noutputs;
    int64_t fixed_batch; /* the batch the export fixed: no graph input has a symbolic first dimension
                            and the first one's is this number (the importer's reading); 0 where the
                            batch is symbolic, or where no input has a dimension */
    ir_branch *branches; /* the branches of If nodes not inlined yet (their then_branch, else_branch) */
    int nbranches, cap_branches;
    struct ir_name_set *value_names; /* the value names ir_inline_if has seen (ir/branch.c), or NULL */
} ir_graph;

ir_graph *ir_graph_new(const char *path);
void ir_graph_free(ir_graph *g);
/* Adds a value and returns its index, or -1 when out of memory. */
int ir_add_value(ir_graph *g, const char *name, ir_val_kind kind, ir_dtype dtype);
/* Adds a node; inputs/outputs/attrs are copied into the arena.  Returns its index or -1. */
int ir_add_node(ir_graph *g, ir_op op, const char *name, const char *op_type, int ninputs,
                const int *inputs, int noutputs, const int *outputs, int nattrs, const ir_attr *attrs);
/* Adds a constant value with a copy of data; returns its index or -1. */
int ir_add_const(ir_graph *g, const char *name, ir_dtype dtype, int rank, const int64_t *dims,
                 const void *data, size_t nbytes);
/* Adds a copy of branch b (its arrays are kept, not copied); returns its index or -1. */
int ir_add_branch(ir_graph *g, const ir_branch *b);
/* Appends, after the graph's last node, the nodes of If node i's
 * then_branch (take_then) or else_branch, their outputs named uniquely, and
 * an Identity per output of the If: they compute what node i computes, which
 * the caller removes (ir_infer_shapes_from puts them in its place).  *first:
 * the index of the first node appended.  Reports a malformed If through d;
 * returns a status. */
int ir_inline_if(ir_graph *g, int i, int take_then, int *first, vitc_diag *d);
/* Index of the value named name, or -1 (linear search; for tools and tests). */
int ir_find_value(const ir_graph *g, const char *name);

const ir_attr *ir_attr_get(const ir_node *n, ir_attr_id id);
int64_t ir_attr_int(const ir_node *n, ir_attr_id id, int64_t dflt);
float ir_attr_float(const ir_node *n, ir_attr_id id, float dflt);
/* Optional input i of n: its value index, or -1 when absent or omitted. */
int ir_input(const ir_node *n, int i);

/* Conv's auto_pad: the node's attribute (NOTSET when absent), or -1 when it names none of these. */
typedef enum { IR_PAD_NOTSET, IR_PAD_VALID, IR_PAD_SAME_UPPER, IR_PAD_SAME_LOWER } ir_auto_pad;
int ir_auto_pad_of(const ir_node *n);
/* One spatial axis of a convolution, the one place its size is computed: input extent in, kernel k,
 * stride s, dilation d; *pb and *pe hold the attribute's pads on entry and the pads applied on return
 * (0 for VALID, the SAME_* split). Sets *out and returns NULL, or returns why the geometry is invalid: a
 * stride, dilation or kernel below 1, a negative pad, a kernel past the padded input, or a size past
 * int64 (attributes come from the file, so any of them can be huge). */
const char *ir_conv_axis(int64_t in, int64_t k, int64_t s, int64_t d, ir_auto_pad pad, int64_t *pb, int64_t *pe,
                         int64_t *out);

/* Element count of a value at a concrete batch; -1 on overflow or unknown rank. */
int64_t ir_value_numel(const ir_value *v, int64_t batch);
/* 1 if the value's shape does not depend on the batch. */
int ir_value_is_static(const ir_value *v);

/* ---- concrete tensors (interpreter, .npy files, test data) ---- */
typedef struct {
    ir_dtype dtype;
    int rank;
    int64_t dims[IR_MAX_RANK];
    void *data; /* malloc'ed, owned by the tensor */
} ir_tensor;

int64_t ir_tensor_numel(const ir_tensor *t);
size_t ir_tensor_nbytes(const ir_tensor *t);
/* Allocates zeroed data for the given shape; returns 0 or VITC_BAD_INPUT on
 * overflow / absurd size, VITC_INTERNAL when out of memory. */
int ir_tensor_alloc(ir_tensor *t, ir_dtype dtype, int rank, const int64_t *dims);
void ir_tensor_free(ir_tensor *t);
/* Element i as a double / written from a double (any dtype). */
double ir_tensor_get(const ir_tensor *t, int64_t i);
void ir_tensor_set(ir_tensor *t, int64_t i, double v);
/* Element i of an integer or bool tensor as int64 (exact). */
int64_t ir_tensor_get_i64(const ir_tensor *t, int64_t i);
void ir_tensor_set_i64(ir_tensor *t, int64_t i, int64_t v);
/* Raw-element conversions for half types. */
float ir_f16_to_f32(uint16_t h);
uint16_t ir_f32_to_f16(float f);
float ir_bf16_to_f32(uint16_t h);
uint16_t ir_f32_to_bf16(float f);

/* .npy files (numpy's format, version 1-3, little-endian, C order). */
int ir_npy_read(const char *path, ir_tensor *t, vitc_diag *d);
int ir_npy_write(const char *path, const ir_tensor *t, vitc_diag *d);

/* max |a - b| / max |b| over two tensors of equal shape (any float dtype). */
double ir_rel_error(const ir_tensor *out, const ir_tensor *ref);

/* ---- graph-level passes that belong to the IR ---- */
/* Checks structural invariants (indices in range, topological order, arity,
 * one producer per value, ranks inferred).  Reports through d; returns status. */
int ir_verify(const ir_graph *g, vitc_diag *d);
/* Infers dtype and shape of every node output, in terms of the batch, and the
 * compile-time values of shape arithmetic (symval).  Returns status. */
int ir_infer_shapes(ir_graph *g, vitc_diag *d);
/* The same from node start on (the nodes before it inferred already).  An If
 * whose condition is then known is replaced by the branch it picks
 * (ir_inline_if): nodes and values are added, and the node array is put
 * back in order (the Ifs gone) when it returns, whatever the status. */
int ir_infer_shapes_from(ir_graph *g, int start, vitc_diag *d);

/* Printers. */
void ir_print_text(const ir_graph *g, FILE *f);
void ir_print_dot(const ir_graph *g, FILE *f);
/* What a caller adds to a printed graph (`vitc dump` the nodes it could not
 * import): note after the text form's header line; before(ctx, i, f) in
 * the text form just before node i's line and with i == g->nnodes after the
 * last node (before the outputs), in the dot form once before the closing
 * brace with i == g->nnodes.  Either may be NULL. */
typedef struct {
    const char *note;
    void (*before)(void *ctx, int node, FILE *f);
    void *ctx;
} ir_print_extra;
void ir_print_text_with(const ir_graph *g, FILE *f, const ir_print_extra *x);
void ir_print_dot_with(const ir_graph *g, FILE *f, const ir_print_extra *x);
void ir_print_stats(const ir_graph *g, FILE *f);
/* One value's type as "f32[B,197,768]" into buf. */
char *ir_value_type_str(const ir_value *v, char *buf, size_t n);

/* ---- values (ir/value.c) ---- */
/* 1 if v is a constant with a known shape whose values do not depend on the
 * batch (no symval element in terms of B). */
int ir_value_is_plain_const(const ir_graph *g, int v);
/* 1 if Dropout node n runs in inference mode: its training_mode input is
 * absent or a plain constant that is not true. */
int ir_dropout_is_inference(const ir_graph *g, const ir_node *n);

#endif
