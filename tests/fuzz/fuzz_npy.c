/* fuzz_npy.c: the tensor-file harness.  The bytes are put in an in-memory
 * file (memfd) and read through its /proc/self/fd path, as a user's .npy
 * would be: ir_npy_read, then ir_npy_write of what it read (to /dev/null),
 * then onnx_read_tensor_file on the same bytes (ONNX's TensorProto files). */
#include "fuzz.h"

#include "frontend/onnx.h"

int fz_npy_one(const uint8_t *data, size_t size)
{
    const char *path = fz_bytes_file(data, size);

    vitc_diag d;
    fz_diag(&d, path);
    ir_tensor t;
    int st = ir_npy_read(path, &t, &d);
    if (st == VITC_OK) {
        vitc_diag w;
        fz_diag(&w, "/dev/null");
        if (ir_npy_write("/dev/null", &t, &w) != VITC_OK)
            fz_die("a tensor read from .npy cannot be written back", &w);
        ir_tensor_free(&t);
    } else if (st != VITC_BAD_INPUT || d.nerrors == 0) {
        fz_die("the .npy reader failed without a bad-input message", &d);
    }

    fz_diag(&d, path);
    st = onnx_read_tensor_file(path, &t, &d);
    if (st == VITC_OK)
        ir_tensor_free(&t);
    else if (st != VITC_BAD_INPUT || d.nerrors == 0)
        fz_die("the TensorProto reader failed without a bad-input message", &d);
    return 0;
}
