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

/* Reads a serialized TensorProto file (ONNX's test data format) into t. */
int onnx_read_tensor_file(const char *path, ir_tensor *t, vitc_diag *d);

#endif
