/* onnx.h: the ONNX frontend.
 *
 * Reads an ONNX ModelProto (protobuf-c code generated at build time from the
 * system's onnx.proto) into an ir_graph: opset imports, initializers (raw and
 * typed fields, external data kept inside the model's directory), attributes,
 * graph inputs and outputs with a symbolic batch dimension.  ONNX op_type
 * strings become ir_op here, once.  Nothing past this layer sees protobuf. */
#ifndef VITC_ONNX_H
#define VITC_ONNX_H

#include "ir/ir.h"

/* Oldest and newest default-domain opsets accepted. */
#define ONNX_MIN_OPSET 13
#define ONNX_MAX_OPSET 23

/* Loads the model at path.  On success returns the graph (shapes not yet
 * inferred) and leaves d->status VITC_OK.  On failure returns NULL with every
 * problem found reported through d (status VITC_BAD_INPUT for a bad or
 * unsupported model, VITC_INTERNAL when out of memory). */
ir_graph *onnx_import_file(const char *path, vitc_diag *d);
/* The same from bytes already in memory; path names them in messages and
 * anchors external data (NULL: external data is refused). */
ir_graph *onnx_import_buffer(const void *buf, size_t len, const char *path, vitc_diag *d);

/* A node whose operator vitc does not take (its op_type, or its domain).
 * The import lists them all, grouped by op type (onnx_report_unsupported);
 * with keep_unsupported it goes on without them, for `vitc dump`.  An If
 * whose branch holds such a node is one: named as that node, with the If's
 * inputs and outputs. */
typedef struct {
    const char *name, *op_type;
    const char *domain;        /* NULL: the default domain */
    int before;                /* the index of the graph's node it came before (g->nnodes: after the last) */
    int ninputs, noutputs;
    const char *const *inputs; /* the tensors it reads, by name ("" for one left out) */
    const int *outputs;        /* keep_unsupported: its outputs as values (-1 where unnamed), of the type
                                * the model declares for them (value_info) where it does, else of unknown
                                * shape (rank -1); otherwise NULL */
} onnx_unsupported;

/* Sizes for the symbolic dimensions of a graph input other than the first
 * (the batch), for a model exported with a dynamic image size: the input
 * named name (NULL: the one input that has such dimensions) is imported with
 * dims[1 .. rank-1] (dims[0] is not read: the batch stays symbolic).  Its
 * dimensions that are numbers must equal the ones given. */
typedef struct {
    const char *name;
    int rank;
    int64_t dims[IR_MAX_RANK];
} onnx_input_shape;

typedef struct {
    /* Input shapes for the symbolic dimensions that are not the batch (an
     * input with such dimensions and no shape here is refused, saying how to
     * give one). */
    const onnx_input_shape *shapes;
    int nshapes;
    /* The shapes are the files a run was given, not what the user asked to
     * compile: one that sizes no symbolic dimension is not an error, nor one
     * whose number differs from the model's (the run reports the file). */
    int shapes_from_inputs;
    /* Import the rest of the graph when some operators are unsupported:
     * those nodes are left out of the graph and listed in unsupported, their
     * outputs becoming values produced by no node (kind IR_VAL_INPUT, not
     * among the graph's inputs), and they are not reported: the caller
     * prints what it can, then calls onnx_report_unsupported.  Such a graph
     * is for printing only. */
    int keep_unsupported;
    /* Out: with keep_unsupported, the unsupported nodes in model order (in
     * the graph's arena); otherwise 0 and NULL. */
    const onnx_unsupported *unsupported;
    int nunsupported;
} onnx_import_opts;

/* onnx_import_file with options (opts may be NULL). */
ir_graph *onnx_import_file_opts(const char *path, onnx_import_opts *opts, vitc_diag *d);
/* Reports unsupported nodes as one error, grouped by op type in the order
 * they first appear: "unsupported operators: Loop x20 (first: node
 * '/x/Loop'), CumSum x1 (node '/y/CumSum')", then one line saying what to
 * do next (next_step, or by default how `vitc dump` shows them). */
void onnx_report_unsupported(const onnx_unsupported *u, int n, const char *next_step, vitc_diag *d);

/* Reads a serialized TensorProto file (ONNX's test data format) into t. */
int onnx_read_tensor_file(const char *path, ir_tensor *t, vitc_diag *d);

#endif
