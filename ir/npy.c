/* npy.c: reading and writing numpy .npy files, the tensor format ML users
 * already have.  The header is parsed defensively: a file from a stranger
 * gets a clear error, never a read past its end or an unbounded allocation. */
#include "ir/ir.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const struct {
    const char *descr;
    ir_dtype dtype;
} npy_types[] = {
    {"<f4", IR_F32}, {"<f8", IR_F64}, {"<f2", IR_F16}, {"<i8", IR_I64}, {"<i4", IR_I32}, {"<i2", IR_I16},
    {"|i1", IR_I8},  {"|u1", IR_U8},  {"|b1", IR_BOOL}, {"<u2", IR_U16}, {"<u4", IR_U32}, {"<u8", IR_U64},
};

/* Finds 'key': in the header dict and returns a pointer just past the colon. */
static const char *dict_value(const char *h, const char *key)
{
    char pat[32];
    snprintf(pat, sizeof pat, "'%s'", key);
    const char *p = strstr(h, pat);
    if (!p)
        return NULL;
    p += strlen(pat);
    while (*p == ' ')
        p++;
    if (*p != ':')
        return NULL;
    p++;
    while (*p == ' ')
        p++;
    return p;
}

static int parse_header(const char *h, ir_tensor *t, vitc_diag *d)
{
    const char *p = dict_value(h, "descr");
    if (!p || *p != '\'')
        return vitc_error(d, VITC_BAD_INPUT, NULL, "npy header has no descr");
    int dt = -1;
    for (size_t i = 0; i < sizeof npy_types / sizeof npy_types[0]; i++) {
        size_t n = strlen(npy_types[i].descr);
        if (strncmp(p + 1, npy_types[i].descr, n) == 0 && p[1 + n] == '\'')
            dt = (int)npy_types[i].dtype;
    }
    if (dt < 0) {
        size_t n = p[0] == '\'' ? strcspn(p + 1, "'") : 0;
        const char *why = n && p[1] == '>' ? "big-endian; save it little-endian, e.g. x.astype('<f4')"
                          : n && p[2] == 'O' ? "an array of Python objects, not numbers"
                                              : "little-endian numbers and bool only";
        return vitc_error(d, VITC_BAD_INPUT, NULL, "npy element type '%.*s' is not supported (%s)",
                          (int)(n < 16 ? n : 16), p + 1, why);
    }
    p = dict_value(h, "fortran_order");
    if (!p || strncmp(p, "False", 5) != 0)
        return vitc_error(d, VITC_BAD_INPUT, NULL, "npy array is not in C order");
    p = dict_value(h, "shape");
    if (!p || *p != '(')
        return vitc_error(d, VITC_BAD_INPUT, NULL, "npy header has no shape");
    p++;
    t->rank = 0;
    for (;;) {
        while (*p == ' ' || *p == ',')
            p++;
        if (*p == ')')
            break;
        if (*p < '0' || *p > '9' || t->rank >= IR_MAX_RANK)
            return vitc_error(d, VITC_BAD_INPUT, NULL, "npy shape is malformed or has rank above %d", IR_MAX_RANK);
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (errno || v < 0)
            return vitc_error(d, VITC_BAD_INPUT, NULL, "npy shape has a bad dimension");
        t->dims[t->rank++] = v;
        p = end;
    }
    t->dtype = (ir_dtype)dt;
    return VITC_OK;
}

int ir_npy_read(const char *path, ir_tensor *t, vitc_diag *d)
{
    memset(t, 0, sizeof *t);
    vitc_diag local = *d;
    local.file = path;
    int st = VITC_BAD_INPUT;
    char *header = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        st = vitc_error(&local, VITC_BAD_INPUT, NULL, "cannot open: %s", strerror(errno));
        goto out;
    }
    unsigned char pre[12];
    size_t got = fread(pre, 1, 10, f);
    if (got == 0 && ferror(f) && errno == EISDIR) {
        vitc_error(&local, VITC_BAD_INPUT, NULL, "is a directory; give a .npy file");
        goto out;
    }
    if (got >= 4 && memcmp(pre, "PK\x03\x04", 4) == 0) {
        vitc_error(&local, VITC_BAD_INPUT, NULL, "is a .npz archive (several arrays); give one .npy file per "
                                                 "input (numpy.save)");
        goto out;
    }
    if (got != 10 || memcmp(pre, "\x93NUMPY", 6) != 0 || pre[6] < 1 || pre[6] > 3) {
        vitc_error(&local, VITC_BAD_INPUT, NULL, "not a .npy file (bad magic or version)");
        goto out;
    }
    size_t hlen = pre[8] | (size_t)pre[9] << 8;
    if (pre[6] >= 2) {
        if (fread(pre + 10, 1, 2, f) != 2) {
            vitc_error(&local, VITC_BAD_INPUT, NULL, "truncated .npy header");
            goto out;
        }
        hlen |= (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
    }
    if (hlen > 65536 || !(header = malloc(hlen + 1)) || fread(header, 1, hlen, f) != hlen) {
        vitc_error(&local, VITC_BAD_INPUT, NULL, "truncated or oversized .npy header");
        goto out;
    }
    header[hlen] = 0;
    if (parse_header(header, t, &local))
        goto out;
    ir_tensor shape = *t;
    /* A regular file must hold the data before its memory is allocated. */
    struct stat sb;
    long pos = ftell(f);
    int64_t need = (int64_t)ir_dtype_size(shape.dtype);
    for (int i = 0; i < shape.rank && need >= 0; i++)
        if (ir_mul_ovf(need, shape.dims[i], &need))
            need = -1;
    if (pos >= 0 && fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode) && need != (int64_t)sb.st_size - pos) {
        vitc_error(&local, VITC_BAD_INPUT, NULL, "data size does not match the header's shape");
        goto out;
    }
    if ((st = ir_tensor_alloc(t, shape.dtype, shape.rank, shape.dims)) != VITC_OK) {
        vitc_error(&local, st, NULL, "array of this shape is too large");
        goto out;
    }
    size_t nbytes = ir_tensor_nbytes(t);
    if (fread(t->data, 1, nbytes, f) != nbytes || fgetc(f) != EOF) {
        st = vitc_error(&local, VITC_BAD_INPUT, NULL, "data size does not match the header's shape");
        ir_tensor_free(t);
        goto out;
    }
    st = VITC_OK;
out:
    free(header);
    if (f)
        fclose(f);
    if (!d->status)
        d->status = local.status;
    d->nerrors = local.nerrors;
    return st;
}

int ir_npy_write(const char *path, const ir_tensor *t, vitc_diag *d)
{
    const char *descr = NULL;
    for (size_t i = 0; i < sizeof npy_types / sizeof npy_types[0]; i++)
        if (npy_types[i].dtype == t->dtype)
            descr = npy_types[i].descr;
    if (!descr)
        return vitc_error(d, VITC_BAD_INPUT, NULL, "%s: %s tensors cannot be written as .npy", path,
                          ir_dtype_name(t->dtype));
    char h[512];
    int n = snprintf(h, sizeof h, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (int i = 0; i < t->rank; i++)
        n += snprintf(h + n, sizeof h - (size_t)n, "%lld,%s", (long long)t->dims[i],
                      i + 1 < t->rank ? " " : "");
    n += snprintf(h + n, sizeof h - (size_t)n, "), }");
    /* Pad with spaces so that magic + header is a multiple of 64, ending in \n. */
    int total = 10 + n + 1;
    int pad = (64 - total % 64) % 64;
    memset(h + n, ' ', (size_t)pad);
    n += pad;
    h[n++] = '\n';
    FILE *f = fopen(path, "wb");
    if (!f)
        return vitc_error(d, VITC_BAD_INPUT, NULL, "%s: cannot write: %s", path, strerror(errno));
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(n & 0xff), (unsigned char)(n >> 8)};
    size_t nbytes = ir_tensor_nbytes(t);
    int ok = fwrite(pre, 1, 10, f) == 10 && fwrite(h, 1, (size_t)n, f) == (size_t)n &&
             fwrite(t->data, 1, nbytes, f) == nbytes;
    ok &= fclose(f) == 0;
    if (!ok)
        return vitc_error(d, VITC_BAD_INPUT, NULL, "%s: write failed", path);
    return VITC_OK;
}
