/* onnx_tensor.c: decoding ONNX TensorProto payloads.
 *
 * A TensorProto carries its elements in raw_data (little-endian bytes), in one
 * of the typed repeated fields (float_data, int32_data, ...) or in an external
 * file.  This file turns any of them into a plain byte buffer of the IR's dtype,
 * checking every dimension and byte count before trusting it.  External data
 * must resolve to a regular file inside the model's directory. */
#include "frontend/onnx_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Largest single tensor accepted: 4 GiB (a ViT-B is ~350 MB in all). */
#define ONNX_MAX_TENSOR_BYTES ((int64_t)1 << 32)

int onnx_tensor_shape(const Onnx__TensorProto *t, onnx_tensor_info *info, const char *what,
                      vitc_diag *d)
{
    memset(info, 0, sizeof *info);
    if (!t->has_data_type)
        return vitc_error(d, VITC_BAD_INPUT, NULL, "%s: tensor has no data_type", what);
    int dt = ir_dtype_from_onnx(t->data_type);
    if (dt < 0)
        return vitc_error(d, VITC_BAD_INPUT, NULL, "%s: unsupported element type %d", what,
                          (int)t->data_type);
    if (t->n_dims > IR_MAX_RANK)
        return vitc_error(d, VITC_BAD_INPUT, NULL, "%s: rank %zu exceeds the supported %d", what,
                          t->n_dims, IR_MAX_RANK);
    int64_t numel = 1;
    for (size_t i = 0; i < t->n_dims; i++) {
        if (t->dims[i] < 0)
            return vitc_error(d, VITC_BAD_INPUT, NULL, "%s: dimension %zu is negative (%lld)", what,
                              i, (long long)t->dims[i]);
        if (ir_mul_ovf(numel, t->dims[i], &numel) || numel > ONNX_MAX_TENSOR_BYTES)
            return vitc_error(d, VITC_BAD_INPUT, NULL, "%s: element count overflows", what);
        info->dims[i] = t->dims[i];
    }
    int64_t nbytes;
    if (ir_mul_ovf(numel, (int64_t)ir_dtype_size((ir_dtype)dt), &nbytes) || nbytes > ONNX_MAX_TENSOR_BYTES)
        return vitc_error(d, VITC_BAD_INPUT, NULL, "%s: %lld elements is more than vitc accepts in one tensor",
                          what, (long long)numel);
    info->dtype = (ir_dtype)dt;
    info->rank = (int)t->n_dims;
    info->numel = numel;
    info->nbytes = (size_t)nbytes;
    return VITC_OK;
}

/* 1 if a path has a ".." component. */
static int has_dotdot(const char *p)
{
    for (const char *s = p; *s;) {
        size_t n = strcspn(s, "/");
        if (n == 2 && s[0] == '.' && s[1] == '.')
            return 1;
        s += n;
        while (*s == '/')
            s++;
    }
    return 0;
}

/* Reads [offset, offset+len) of an external data file that must lie inside dir. */
static int read_external(const Onnx__TensorProto *t, const char *model_dir, void *out, size_t nbytes,
                         const char *what, vitc_diag *d)
{
    const char *location = NULL;
    int64_t offset = 0, length = -1;
    for (size_t i = 0; i < t->n_external_data; i++) {
        const Onnx__StringStringEntryProto *e = t->external_data[i];
        if (!e->key || !e->value)
            continue;
        char *end = NULL;
        if (strcmp(e->key, "location") == 0) {
            location = e->value;
        } else if (strcmp(e->key, "offset") == 0 || strcmp(e->key, "length") == 0) {
            errno = 0;
            long long v = strtoll(e->value, &end, 10);
            if (errno || end == e->value || *end || v < 0)
                return vitc_error(d, VITC_BAD_INPUT, NULL, "%s: external data %s '%s' is not a valid size",
                                  what, e->key, e->value);
            if (e->key[0] == 'o')
                offset = v;
            else
                length = v;
        }
    }
    if (!model_dir)
        return vitc_error(d, VITC_BAD_INPUT, NULL, "%s: external data is not allowed here", what);
    if (!location || !*location)
        return vitc_error(d, VITC_BAD_INPUT, NULL, "%s: external data has no location", what);
    if (location[0] == '/' || has_dotdot(location) || strchr(location, '\\'))
        return vitc_error(d, VITC_BAD_INPUT, NULL,
                          "%s: external data location '%s' must be a relative path inside the model's directory",
                          what, location);
    if (length >= 0 && (uint64_t)length != nbytes)
        return vitc_error(d, VITC_BAD_INPUT, NULL, "%s: external data length %lld does not match the %zu bytes its shape needs",
                          what, (long long)length, nbytes);

    char path[PATH_MAX], real[PATH_MAX], realdir[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", model_dir, location) >= (int)sizeof path)
        return vitc_error(d, VITC_BAD_INPUT, NULL, "%s: external data path is too long", what);
    if (!realpath(model_dir, realdir))
        return vitc_error(d, VITC_BAD_INPUT, NULL, "%s: cannot resolve the model's directory: %s", what, strerror(errno));
    if (!realpath(path, real))
        return vitc_error(d, VITC_BAD_INPUT, NULL, "%s: cannot open external data '%s': %s", what, location,
                          strerror(errno));
    size_t dl = strlen(realdir);
    if (strncmp(real, realdir, dl) != 0 || (real[dl] != '/' && !(dl == 1 && realdir[0] == '/')))
        return vitc_error(d, VITC_BAD_INPUT, NULL, "%s: external data '%s' resolves outside the model's directory",
                          what, location);
    int fd = open(real, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return vitc_error(d, VITC_BAD_INPUT, NULL, "%s: cannot open external data '%s': %s", what, location,
                          strerror(errno));
    struct stat st;
    int status = VITC_OK;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        status = vitc_error(d, VITC_BAD_INPUT, NULL, "%s: external data '%s' is not a regular file", what, location);
    } else if (offset > st.st_size || (uint64_t)(st.st_size - offset) < nbytes) {
        status = vitc_error(d, VITC_BAD_INPUT, NULL,
                            "%s: external data '%s' is %lld bytes; offset %lld + %zu bytes lies outside it", what,
                            location, (long long)st.st_size, (long long)offset, nbytes);
    } else if (out) { /* out NULL: the checks only */
        size_t done = 0;
        while (done < nbytes) {
            ssize_t r = pread(fd, (char *)out + done, nbytes - done, (off_t)(offset + (int64_t)done));
            if (r <= 0) {
                status = vitc_error(d, VITC_BAD_INPUT, NULL, "%s: reading external data '%s' failed", what, location);
                break;
            }
            done += (size_t)r;
        }
    }
    close(fd);
    return status;
}

/* Copies n typed elements from src into out as dtype dt. */
static void copy_typed(ir_dtype dt, void *out, size_t n, const int32_t *i32, const int64_t *i64,
                       const float *f32, const double *f64, const uint64_t *u64)
{
    for (size_t i = 0; i < n; i++) {
        switch (dt) {
        case IR_F32: ((float *)out)[i] = f32[i]; break;
        case IR_F64: ((double *)out)[i] = f64[i]; break;
        case IR_I64: ((int64_t *)out)[i] = i64[i]; break;
        case IR_I32: ((int32_t *)out)[i] = i32[i]; break;
        case IR_I16: ((int16_t *)out)[i] = (int16_t)i32[i]; break;
        case IR_U16: case IR_F16: case IR_BF16: ((uint16_t *)out)[i] = (uint16_t)i32[i]; break;
        case IR_I8: ((int8_t *)out)[i] = (int8_t)i32[i]; break;
        case IR_U8: ((uint8_t *)out)[i] = (uint8_t)i32[i]; break;
        case IR_BOOL: ((uint8_t *)out)[i] = i32[i] != 0; break;
        case IR_U32: ((uint32_t *)out)[i] = (uint32_t)u64[i]; break;
        case IR_U64: ((uint64_t *)out)[i] = u64[i]; break;
        default: break;
        }
    }
}

int onnx_tensor_data(const Onnx__TensorProto *t, const onnx_tensor_info *info, const char *model_dir,
                     void *out, const char *what, vitc_diag *d)
{
    size_t n = (size_t)info->numel;
    if (t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL)
        return read_external(t, model_dir, out, info->nbytes, what, d);
    if (t->has_raw_data) {
        if (t->raw_data.len != info->nbytes)
            return vitc_error(d, VITC_BAD_INPUT, NULL, "%s: raw_data has %zu bytes but its shape needs %zu",
                              what, t->raw_data.len, info->nbytes);
        if (info->nbytes && out)
            memcpy(out, t->raw_data.data, info->nbytes);
        return VITC_OK;
    }
    size_t have;
    const char *field;
    switch (info->dtype) {
    case IR_F32: have = t->n_float_data; field = "float_data"; break;
    case IR_F64: have = t->n_double_data; field = "double_data"; break;
    case IR_I64: have = t->n_int64_data; field = "int64_data"; break;
    case IR_U32: case IR_U64: have = t->n_uint64_data; field = "uint64_data"; break;
    default: have = t->n_int32_data; field = "int32_data"; break;
    }
    if (have != n)
        return vitc_error(d, VITC_BAD_INPUT, NULL, "%s: %s has %zu elements but its shape needs %zu", what, field,
                          have, n);
    if (out)
        copy_typed(info->dtype, out, n, t->int32_data, t->int64_data, t->float_data, t->double_data,
                   t->uint64_data);
    return VITC_OK;
}

/* Opens a regular file of at most max bytes: its descriptor, size in *size. */
static int open_bounded(const char *path, size_t max, int *fd_out, size_t *size, vitc_diag *d)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return vitc_error(d, VITC_BAD_INPUT, NULL, "cannot open: %s", strerror(errno));
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        close(fd);
        return vitc_error(d, VITC_BAD_INPUT, NULL, "not a regular file");
    }
    if ((uint64_t)st.st_size > max) {
        close(fd);
        return vitc_error(d, VITC_BAD_INPUT, NULL, "file is %lld bytes, more than the %zu a protobuf message may hold",
                          (long long)st.st_size, max);
    }
    *fd_out = fd;
    *size = (size_t)st.st_size;
    return VITC_OK;
}

/* Reads a whole file into memory, refusing anything over max bytes. */
int onnx_read_file(const char *path, size_t max, unsigned char **buf, size_t *len, vitc_diag *d)
{
    *buf = NULL;
    *len = 0;
    int fd, st;
    size_t size;
    if ((st = open_bounded(path, max, &fd, &size, d)) != VITC_OK)
        return st;
    unsigned char *b = malloc(size ? size : 1);
    if (!b) {
        close(fd);
        return vitc_error(d, VITC_INTERNAL, NULL, "out of memory reading %zu bytes", size);
    }
    size_t done = 0;
    while (done < size) {
        ssize_t r = read(fd, b + done, size - done);
        if (r <= 0) {
            free(b);
            close(fd);
            return vitc_error(d, VITC_BAD_INPUT, NULL, "read failed: %s", r < 0 ? strerror(errno) : "short file");
        }
        done += (size_t)r;
    }
    close(fd);
    *buf = b;
    *len = size;
    return VITC_OK;
}

int onnx_map_file(const char *path, size_t max, const unsigned char **buf, size_t *len, vitc_diag *d)
{
    static const unsigned char empty[1];
    *buf = NULL;
    *len = 0;
    int fd, st;
    size_t size;
    if ((st = open_bounded(path, max, &fd, &size, d)) != VITC_OK)
        return st;
    void *p = size ? mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0) : (void *)empty;
    int err = errno;
    close(fd);
    if (p == MAP_FAILED)
        return vitc_error(d, VITC_BAD_INPUT, NULL, "cannot map %zu bytes: %s", size, strerror(err));
    if (size)
        madvise(p, size, MADV_SEQUENTIAL);
    *buf = p;
    *len = size;
    return VITC_OK;
}

void onnx_unmap_file(const unsigned char *buf, size_t len)
{
    if (buf && len)
        munmap((void *)buf, len);
}

int onnx_read_tensor_file(const char *path, ir_tensor *out, vitc_diag *d)
{
    memset(out, 0, sizeof *out);
    vitc_diag local = *d;
    local.file = path;
    unsigned char *buf;
    size_t len;
    int st = onnx_read_file(path, (size_t)INT32_MAX, &buf, &len, &local);
    if (st == VITC_OK && (st = onnx_check_nesting(buf, len, &onnx__tensor_proto__descriptor, &local)))
        free(buf);
    if (st == VITC_OK) {
        Onnx__TensorProto *t = onnx__tensor_proto__unpack(NULL, len, buf);
        free(buf);
        if (!t) {
            st = vitc_error(&local, VITC_BAD_INPUT, NULL, "not a valid serialized TensorProto");
        } else {
            onnx_tensor_info info;
            st = onnx_tensor_shape(t, &info, "tensor", &local);
            if (st == VITC_OK) /* the payload is there before its memory is */
                st = onnx_tensor_data(t, &info, NULL, NULL, "tensor", &local);
            if (st == VITC_OK)
                st = ir_tensor_alloc(out, info.dtype, info.rank, info.dims);
            if (st == VITC_OK)
                st = onnx_tensor_data(t, &info, NULL, out->data, "tensor", &local);
            if (st != VITC_OK)
                ir_tensor_free(out);
            onnx__tensor_proto__free_unpacked(t, NULL);
        }
    }
    d->status = d->status ? d->status : local.status;
    d->nerrors = local.nerrors;
    return st;
}
