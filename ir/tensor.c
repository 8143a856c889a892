/* tensor.c: concrete tensors.  Owns allocation (size-checked), element access
 * in every dtype of dtypes.def (as double, or exactly as int64), the half-type
 * conversions (round to nearest even) and the error metric that `compare`
 * and the tests report. */
#include "ir/ir.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TENSOR_BYTES ((int64_t)4 << 30) /* 4 GiB: bigger is a malformed input */

int64_t ir_tensor_numel(const ir_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++)
        n *= t->dims[i];
    return n;
}

size_t ir_tensor_nbytes(const ir_tensor *t) { return (size_t)ir_tensor_numel(t) * ir_dtype_size(t->dtype); }

int ir_tensor_alloc(ir_tensor *t, ir_dtype dtype, int rank, const int64_t *dims)
{
    memset(t, 0, sizeof *t);
    if ((unsigned)dtype >= IR_DTYPE_COUNT || rank < 0 || rank > IR_MAX_RANK)
        return VITC_BAD_INPUT;
    int64_t n = 1;
    for (int i = 0; i < rank; i++) {
        if (dims[i] < 0 || ir_mul_ovf(n, dims[i], &n))
            return VITC_BAD_INPUT;
    }
    int64_t bytes;
    if (ir_mul_ovf(n, (int64_t)ir_dtype_size(dtype), &bytes) || bytes > MAX_TENSOR_BYTES)
        return VITC_BAD_INPUT;
    void *data = calloc(1, bytes ? (size_t)bytes : 1);
    if (!data)
        return VITC_INTERNAL;
    t->dtype = dtype;
    t->rank = rank;
    for (int i = 0; i < rank; i++)
        t->dims[i] = dims[i];
    t->data = data;
    return VITC_OK;
}

void ir_tensor_free(ir_tensor *t)
{
    if (!t)
        return;
    free(t->data);
    t->data = NULL;
}

/* ---- half types ---- */

/* Rounds v to the binary format with ebits exponent and mbits mantissa bits
 * (IEEE layout: sign, biased exponent, fraction), to nearest even, overflowing
 * to infinity.  Works straight from double, so there is no double rounding. */
static uint32_t encode_small_float(double v, int ebits, int mbits)
{
    uint32_t sign = signbit(v) ? 1u << (ebits + mbits) : 0;
    uint32_t emax = (1u << ebits) - 1; /* all-ones exponent: inf / NaN */
    int bias = (1 << (ebits - 1)) - 1;
    if (isnan(v))
        return sign | emax << mbits | 1u << (mbits - 1);
    double a = fabs(v);
    if (isinf(a))
        return sign | emax << mbits;
    if (a == 0)
        return sign;
    int e;
    frexp(a, &e); /* a in [2^(e-1), 2^e) */
    int E = e - 1;
    if (E < 1 - bias)
        E = 1 - bias; /* subnormal: the quantum stays 2^(1-bias-mbits) */
    /* a in units of the quantum 2^(E-mbits); exact, then rounded to an integer. */
    double m = rint(ldexp(a, mbits - E));
    if (m >= ldexp(1, mbits + 1)) { /* rounded up to the next binade */
        m = ldexp(m, -1);
        E++;
    }
    uint32_t mi = (uint32_t)m;
    if (mi < (1u << mbits)) /* subnormal */
        return sign | mi;
    int64_t biased = (int64_t)E + bias;
    if (biased >= (int64_t)emax)
        return sign | emax << mbits;
    return sign | (uint32_t)biased << mbits | (mi - (1u << mbits));
}

static uint16_t f64_to_f16(double v) { return (uint16_t)encode_small_float(v, 5, 10); }
static uint16_t f64_to_bf16(double v) { return (uint16_t)encode_small_float(v, 8, 7); }

float ir_f16_to_f32(uint16_t h)
{
    int sign = h >> 15, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    float v;
    if (exp == 0x1f)
        v = man ? NAN : INFINITY;
    else if (exp == 0)
        v = ldexpf((float)man, -24);
    else
        v = ldexpf((float)(man | 0x400), exp - 25);
    return sign ? -v : v;
}

uint16_t ir_f32_to_f16(float f) { return f64_to_f16(f); }

float ir_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* A float's top half is a bf16: rounding to nearest even is one add on its
 * bits (a carry into the exponent is the next binade, or infinity), and a
 * NaN becomes the quiet NaN of its sign.  The same bits as f64_to_bf16 for
 * every one of the 2^32 floats (checked), 4x faster: the compiler rounds every
 * weight of a model with --precision bf16 through it. */
uint16_t ir_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16 & 0x8000u) | 0x7fc0u);
    return (uint16_t)((u + 0x7fffu + (u >> 16 & 1)) >> 16);
}

/* ---- element access ---- */

/* Unaligned-safe loads and stores of element i. */
#define DEF_ACCESS(suffix, type)                                                        \
    static type ld_##suffix(const ir_tensor *t, int64_t i)                              \
    {                                                                                   \
        type x;                                                                         \
        memcpy(&x, (const char *)t->data + (size_t)i * sizeof x, sizeof x);             \
        return x;                                                                       \
    }                                                                                   \
    static void st_##suffix(ir_tensor *t, int64_t i, type x)                            \
    {                                                                                   \
        memcpy((char *)t->data + (size_t)i * sizeof x, &x, sizeof x);                   \
    }
DEF_ACCESS(f32, float)
DEF_ACCESS(f64, double)
DEF_ACCESS(u8, uint8_t)
DEF_ACCESS(i8, int8_t)
DEF_ACCESS(u16, uint16_t)
DEF_ACCESS(i16, int16_t)
DEF_ACCESS(u32, uint32_t)
DEF_ACCESS(i32, int32_t)
DEF_ACCESS(u64, uint64_t)
DEF_ACCESS(i64, int64_t)
#undef DEF_ACCESS

/* double -> int64 by truncation toward zero, saturating; NaN -> 0. */
static int64_t f64_to_i64(double v)
{
    if (isnan(v))
        return 0;
    if (v >= 9223372036854775808.0)
        return INT64_MAX;
    if (v < -9223372036854775808.0)
        return INT64_MIN;
    return (int64_t)v;
}

double ir_tensor_get(const ir_tensor *t, int64_t i)
{
    switch (t->dtype) {
    case IR_F32: return ld_f32(t, i);
    case IR_F64: return ld_f64(t, i);
    case IR_F16: return ir_f16_to_f32(ld_u16(t, i));
    case IR_BF16: return ir_bf16_to_f32(ld_u16(t, i));
    case IR_U64: return (double)ld_u64(t, i); /* its value, not get_i64's bits */
    case IR_U8:
    case IR_I8:
    case IR_U16:
    case IR_I16:
    case IR_U32:
    case IR_I32:
    case IR_I64:
    case IR_BOOL: return (double)ir_tensor_get_i64(t, i);
    case IR_DTYPE_COUNT: break;
    }
    return NAN;
}

void ir_tensor_set(ir_tensor *t, int64_t i, double v)
{
    switch (t->dtype) {
    case IR_F32: st_f32(t, i, v); return;
    case IR_F64: st_f64(t, i, v); return;
    case IR_F16: st_u16(t, i, f64_to_f16(v)); return;
    case IR_BF16: st_u16(t, i, f64_to_bf16(v)); return;
    case IR_BOOL: st_u8(t, i, v != 0); return;
    case IR_U64:
        if (v >= 9223372036854775808.0 && v < 18446744073709551616.0) {
            st_u64(t, i, v);
            return;
        }
        break;
    default:
        break;
    }
    /* Integers: truncate toward zero, then wrap to the width (as set_i64). */
    ir_tensor_set_i64(t, i, f64_to_i64(v));
}

int64_t ir_tensor_get_i64(const ir_tensor *t, int64_t i)
{
    switch (t->dtype) {
    case IR_U8: return ld_u8(t, i);
    case IR_I8: return ld_i8(t, i);
    case IR_U16: return ld_u16(t, i);
    case IR_I16: return ld_i16(t, i);
    case IR_U32: return ld_u32(t, i);
    case IR_I32: return ld_i32(t, i);
    case IR_U64: return (int64_t)ld_u64(t, i); /* two's complement bits */
    case IR_I64: return ld_i64(t, i);
    case IR_BOOL: return ld_u8(t, i) != 0;
    default: return f64_to_i64(ir_tensor_get(t, i));
    }
}

void ir_tensor_set_i64(ir_tensor *t, int64_t i, int64_t v)
{
    switch (t->dtype) {
    case IR_U8: st_u8(t, i, (uint64_t)v); return;
    case IR_I8: st_i8(t, i, (int8_t)(uint8_t)(uint64_t)v); return;
    case IR_U16: st_u16(t, i, (uint64_t)v); return;
    case IR_I16: st_i16(t, i, (int16_t)(uint16_t)(uint64_t)v); return;
    case IR_U32: st_u32(t, i, (uint64_t)v); return;
    case IR_I32: st_i32(t, i, (int32_t)(uint32_t)(uint64_t)v); return;
    case IR_U64: st_u64(t, i, (uint64_t)v); return;
    case IR_I64: st_i64(t, i, v); return;
    case IR_BOOL: st_u8(t, i, v != 0); return;
    default: ir_tensor_set(t, i, (double)v); return;
    }
}

double ir_rel_error(const ir_tensor *out, const ir_tensor *ref)
{
    int64_t n = ir_tensor_numel(ref);
    if (ir_tensor_numel(out) != n)
        return INFINITY;
    double maxdiff = 0, maxref = 0;
    for (int64_t i = 0; i < n; i++) {
        double a = ir_tensor_get(out, i), b = ir_tensor_get(ref, i);
        if (isnan(a) || isnan(b))
            return INFINITY;
        double diff = fabs(a - b);
        if (isnan(diff)) /* inf - inf */
            return INFINITY;
        if (diff > maxdiff)
            maxdiff = diff;
        if (fabs(b) > maxref)
            maxref = fabs(b);
    }
    return maxref == 0 ? maxdiff : maxdiff / maxref;
}
