/* fuzz_npy.c: the tensor-file harness.  The bytes are put in an in-memory
 * file (memfd) and read through its /proc/self/fd path, as a user's .npy
 * would be: ir_npy_read, then ir_npy_write of what it read (to /dev/null),
 * then onnx_read_tensor_file on the same bytes (ONNX's TensorProto files). */
#include "fuzz.h"

#include "frontend/onnx.h"

#include <sys/mman.h>
#include <unistd.h>

static int memfd = -1;
static char memfd_path[64];

int fz_npy_one(const uint8_t *data, size_t size)
{
    if (memfd < 0) {
        memfd = memfd_create("vitc-fuzz-npy", MFD_CLOEXEC);
        if (memfd < 0)
            fz_die("memfd_create failed", NULL);
        snprintf(memfd_path, sizeof memfd_path, "/proc/self/fd/%d", memfd);
    }
    if (ftruncate(memfd, 0) != 0 || (size && pwrite(memfd, data, size, 0) != (ssize_t)size))
        fz_die("cannot fill the in-memory file", NULL);

    vitc_diag d;
    fz_diag(&d, memfd_path);
    ir_tensor t;
    int st = ir_npy_read(memfd_path, &t, &d);
    if (st == VITC_OK) {
        vitc_diag w;
        fz_diag(&w, "/dev/null");
        if (ir_npy_write("/dev/null", &t, &w) != VITC_OK)
            fz_die("a tensor read from .npy cannot be written back", &w);
        ir_tensor_free(&t);
    } else if (st != VITC_BAD_INPUT || d.nerrors == 0) {
        fz_die("the .npy reader failed without a bad-input message", &d);
    }

    fz_diag(&d, memfd_path);
    st = onnx_read_tensor_file(memfd_path, &t, &d);
    if (st == VITC_OK)
        ir_tensor_free(&t);
    else if (st != VITC_BAD_INPUT || d.nerrors == 0)
        fz_die("the TensorProto reader failed without a bad-input message", &d);
    return 0;
}
