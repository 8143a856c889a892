/* onnx_impl.h: what the frontend's files share; nothing outside frontend/
 * includes this (it pulls in the generated protobuf-c header). */
#ifndef VITC_ONNX_IMPL_H
#define VITC_ONNX_IMPL_H

#include "frontend/onnx.h"
#include "onnx.pb-c.h"

typedef struct {
    ir_dtype dtype;
    int rank;
    int64_t dims[IR_MAX_RANK];
    int64_t numel;
    size_t nbytes;
} onnx_tensor_info;

/* Checks a TensorProto's type and dims (no negatives, no overflow, bounded
 * size) and fills info.  what names the tensor in messages. */
int onnx_tensor_shape(const Onnx__TensorProto *t, onnx_tensor_info *info, const char *what, vitc_diag *d);
/* Decodes its payload (raw, typed or external) into out (info->nbytes bytes).
 * model_dir anchors external data; NULL refuses it.  With out NULL it only
 * checks that the payload is there and matches the shape: callers do that
 * before allocating, so that a tiny file declaring a huge tensor costs
 * nothing. */
int onnx_tensor_data(const Onnx__TensorProto *t, const onnx_tensor_info *info, const char *model_dir,
                     void *out, const char *what, vitc_diag *d);
/* Deepest nesting of protobuf messages accepted (protobuf's own default is
 * 100; real models nest a few levels, a few more with subgraphs). */
#define ONNX_MAX_NESTING 64
/* Refuses bytes whose messages (read with desc, e.g. &onnx__model_proto__descriptor)
 * nest deeper than ONNX_MAX_NESTING: protobuf-c's unpacker would recurse
 * that deep and overflow the stack.  Call it before any *__unpack. */
int onnx_check_nesting(const void *buf, size_t len, const ProtobufCMessageDescriptor *desc, vitc_diag *d);

/* Reads a whole regular file of at most max bytes. */
int onnx_read_file(const char *path, size_t max, unsigned char **buf, size_t *len, vitc_diag *d);
/* The same, the file mapped read-only instead of copied (a model of
 * hundreds of MB is then read once, by the parser); onnx_unmap_file ends it. */
int onnx_map_file(const char *path, size_t max, const unsigned char **buf, size_t *len, vitc_diag *d);
void onnx_unmap_file(const unsigned char *buf, size_t len);

#endif
