/* onnx_wire.c: a pre-parse of protobuf bytes that bounds how deep messages
 * nest, before protobuf-c sees them.
 *
 * protobuf-c's unpacker recurses once per nested message and has no depth
 * limit, and ONNX's schema is recursive (a node's attribute holds a graph of
 * nodes with attributes holding graphs..., a TypeProto holds TypeProtos), so a
 * few hundred kilobytes of nested length-delimited fields overflow the stack.
 * This walks the wire format with the message descriptors that protobuf-c
 * generated (so only fields that really are messages are descended into),
 * iteratively over fields and recursively over messages up to the bound.
 * Bytes that are malformed in any other way are left to protobuf-c to refuse. */
#include "frontend/onnx_impl.h"

/* Reads a varint at *i; 0 if it runs past the end or over 10 bytes. */
static int read_varint(const uint8_t *p, size_t len, size_t *i, uint64_t *out)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 70 && *i < len; shift += 7) {
        uint8_t b = p[(*i)++];
        v |= (uint64_t)(b & 0x7f) << (shift < 64 ? shift : 0);
        if (!(b & 0x80)) {
            *out = v;
            return 1;
        }
    }
    return 0;
}

/* 1 if the message in p[0, len) nests deeper than depth_left more levels;
 * 0 otherwise (including when it is malformed). */
static int too_deep(const uint8_t *p, size_t len, const ProtobufCMessageDescriptor *desc, int depth_left)
{
    if (depth_left < 0)
        return 1;
    size_t i = 0;
    while (i < len) {
        uint64_t key, v;
        if (!read_varint(p, len, &i, &key))
            return 0;
        switch (key & 7) {
        case 0: /* varint */
            if (!read_varint(p, len, &i, &v))
                return 0;
            break;
        case 1: /* 64-bit */
            if (len - i < 8)
                return 0;
            i += 8;
            break;
        case 5: /* 32-bit */
            if (len - i < 4)
                return 0;
            i += 4;
            break;
        case 2: { /* length-delimited: bytes, string, packed scalars or a message */
            if (!read_varint(p, len, &i, &v) || v > len - i)
                return 0;
            uint64_t num = key >> 3;
            const ProtobufCFieldDescriptor *f =
                num <= UINT32_MAX ? protobuf_c_message_descriptor_get_field(desc, (unsigned)num) : NULL;
            if (f && f->type == PROTOBUF_C_TYPE_MESSAGE && too_deep(p + i, (size_t)v, f->descriptor, depth_left - 1))
                return 1;
            i += (size_t)v;
            break;
        }
        default: /* groups (3, 4) and invalid wire types: protobuf-c refuses them */
            return 0;
        }
    }
    return 0;
}

int onnx_check_nesting(const void *buf, size_t len, const ProtobufCMessageDescriptor *desc, vitc_diag *d)
{
    if (too_deep(buf, len, desc, ONNX_MAX_NESTING))
        return vitc_error(d, VITC_BAD_INPUT, NULL,
                          "not a model vitc reads: its protobuf messages nest more than %d deep", ONNX_MAX_NESTING);
    return VITC_OK;
}
