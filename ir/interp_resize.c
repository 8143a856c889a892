/* interp_resize.c: Resize (opsets 13 to 19), as ONNX's reference
 * implementation computes it, with every attribute: antialias, axes,
 * keep_aspect_ratio_policy and half_pixel_symmetric included.
 *
 * Each output coordinate x along an axis is mapped to an input coordinate
 * x_ori by the coordinate transformation mode; the input elements around
 * x_ori are weighted by the mode's coefficients (nearest: one of two, linear:
 * two, cubic: four, with Keys' parameter cubic_coeff_a) and indices outside
 * the input read its edge (or, with exclude_outside, get weight 0 and the
 * others are renormalised).  With antialias, linear and cubic stretch their
 * filter by 1 / scale where an axis shrinks: 2 - 2 (floor(-w / scale) + 1)
 * taps (w = 1 linear, 2 cubic) weighted by the filter at scale times their
 * distance from x_ori, then divided by their sum (RZ_MAX_TAPS at most); where
 * an axis grows the taps and weights are the plain ones.  Weights of a
 * product of axes are the product of each axis's weights, so the kernel
 * resizes one axis at a time, the last axis first, in double.  An axis whose
 * every output element reads its own input element is skipped, as are the
 * axes that `axes` leaves out.
 *
 * Constant folding runs it at compile time: a position table interpolated to
 * another image size (HF Dinov2, timm's dynamic_img_size) becomes a
 * constant. */
#include "ir/interp_impl.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { RZ_NEAREST, RZ_LINEAR, RZ_CUBIC } rz_mode;
typedef enum {
    RZ_HALF_PIXEL,
    RZ_PYTORCH_HALF_PIXEL,
    RZ_ALIGN_CORNERS,
    RZ_ASYMMETRIC,
    RZ_TF_HALF_PIXEL_FOR_NN,
    RZ_TF_CROP_AND_RESIZE,
    RZ_HALF_PIXEL_SYMMETRIC
} rz_coord;
typedef enum { RZ_ROUND_PREFER_FLOOR, RZ_ROUND_PREFER_CEIL, RZ_FLOOR, RZ_CEIL } rz_round;
typedef enum { RZ_STRETCH, RZ_NOT_LARGER, RZ_NOT_SMALLER } rz_keep;

static const char *const mode_names[] = {"nearest", "linear", "cubic", NULL};
static const char *const coord_names[] = {"half_pixel",          "pytorch_half_pixel", "align_corners",
                                          "asymmetric",          "tf_half_pixel_for_nn", "tf_crop_and_resize",
                                          "half_pixel_symmetric", NULL};
static const char *const round_names[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil", NULL};
static const char *const keep_names[] = {"stretch", "not_larger", "not_smaller", NULL};

/* The most taps an output element reads along one axis: antialias on an
 * axis shrunk more than about 2000 times (linear) or 1000 times (cubic) is
 * refused rather than given a table that size per output element. */
enum { RZ_MAX_TAPS = 4096 };

static void say(char *why, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(char *why, size_t len, const char *fmt, ...)
{
    if (!why || !len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, len, fmt, ap);
    va_end(ap);
}

/* The index in names of n's string attribute id (dflt when absent), -1 with
 * why when it is none of them. */
static int pick(const ir_node *n, ir_attr_id id, const char *const *names, int dflt, char *why, size_t len)
{
    const ir_attr *a = ir_attr_get(n, id);
    if (!a)
        return dflt;
    for (int i = 0; a->kind == IR_AT_STRING && names[i]; i++)
        if (strcmp(names[i], a->s) == 0)
            return i;
    say(why, len, "%s '%s' is not one ONNX defines", ir_attr_name(id),
        a->kind == IR_AT_STRING ? a->s : "(not a string)");
    return -1;
}

typedef struct {
    rz_mode mode;
    rz_coord coord;
    rz_round round;
    rz_keep keep;
    double a;         /* cubic_coeff_a */
    int exclude;      /* exclude_outside */
    int antialias;
    double extrapolate; /* extrapolation_value (tf_crop_and_resize) */
} rz_attrs;

/* 0 and the attributes, or -1 with why when n uses something this kernel lacks. */
static int read_attrs(const ir_node *n, rz_attrs *r, char *why, size_t len)
{
    int m = pick(n, IR_ATTR_MODE, mode_names, RZ_NEAREST, why, len);
    int c = m < 0 ? -1 : pick(n, IR_ATTR_COORD_MODE, coord_names, RZ_HALF_PIXEL, why, len);
    int rd = c < 0 ? -1 : pick(n, IR_ATTR_NEAREST_MODE, round_names, RZ_ROUND_PREFER_FLOOR, why, len);
    int k = rd < 0 ? -1 : pick(n, IR_ATTR_KEEP_ASPECT_RATIO_POLICY, keep_names, RZ_STRETCH, why, len);
    if (k < 0)
        return -1;
    *r = (rz_attrs){.mode = (rz_mode)m,
                    .coord = (rz_coord)c,
                    .round = (rz_round)rd,
                    .keep = (rz_keep)k,
                    .a = ir_attr_float(n, IR_ATTR_CUBIC_COEFF_A, -0.75f),
                    .exclude = ir_attr_int(n, IR_ATTR_EXCLUDE_OUTSIDE, 0) != 0,
                    .antialias = ir_attr_int(n, IR_ATTR_ANTIALIAS, 0) != 0,
                    .extrapolate = ir_attr_float(n, IR_ATTR_EXTRAPOLATION_VALUE, 0.0f)};
    if (r->antialias && r->mode == RZ_NEAREST) {
        say(why, len, "antialias applies to modes linear and cubic, not nearest (ONNX's reference refuses it too)");
        return -1;
    }
    return 0;
}

int ir_resize_supported(const ir_node *n, char *why, size_t len)
{
    rz_attrs r;
    return read_attrs(n, &r, why, len) == 0;
}

int ir_resize_copies_at_same_size(const ir_node *n)
{
    rz_attrs r;
    return read_attrs(n, &r, NULL, 0) == 0 && r.coord != RZ_TF_CROP_AND_RESIZE && r.coord != RZ_TF_HALF_PIXEL_FOR_NN;
}

int ir_resize_axes(const ir_node *n, int rank, int *axes, char *why, size_t len)
{
    const ir_attr *a = ir_attr_get(n, IR_ATTR_AXES);
    if (!a) {
        for (int i = 0; i < rank; i++)
            axes[i] = i;
        return rank;
    }
    if (a->kind != IR_AT_INTS || a->n > rank) {
        say(why, len, "axes must list at most %d axes of the input", rank);
        return -1;
    }
    for (int i = 0; i < a->n; i++) {
        int64_t ax = a->ints[i] < 0 ? a->ints[i] + rank : a->ints[i];
        if (ax < 0 || ax >= rank) {
            say(why, len, "axes[%d] is %lld, outside an input of rank %d", i, (long long)a->ints[i], rank);
            return -1;
        }
        for (int j = 0; j < i; j++)
            if (axes[j] == ax) {
                say(why, len, "axes names axis %lld twice", (long long)ax);
                return -1;
            }
        axes[i] = (int)ax;
    }
    return a->n;
}

int ir_resize_keep_aspect(const ir_node *n, int naxes, const int64_t *in, const int64_t *sizes, int64_t *out,
                          double *scale, char *why, size_t len)
{
    int k = pick(n, IR_ATTR_KEEP_ASPECT_RATIO_POLICY, keep_names, RZ_STRETCH, why, len);
    if (k < 0)
        return -1;
    double one = 0;
    for (int i = 0; i < naxes; i++) {
        if (sizes[i] < 0) {
            say(why, len, "sizes[%d] is %lld", i, (long long)sizes[i]);
            return -1;
        }
        scale[i] = in[i] ? (double)sizes[i] / (double)in[i] : 1;
        out[i] = sizes[i];
        if (i == 0 || (k == RZ_NOT_LARGER && scale[i] < one) || (k == RZ_NOT_SMALLER && scale[i] > one))
            one = scale[i];
    }
    for (int i = 0; k != RZ_STRETCH && i < naxes; i++) {
        double o = floor(one * (double)in[i] + 0.5); /* rounded half up, as the reference does */
        if (!(o < 1e15)) {
            say(why, len, "keep_aspect_ratio_policy %s makes axis %d %g long", keep_names[k], i, o);
            return -1;
        }
        scale[i] = one;
        out[i] = (int64_t)o;
    }
    return 0;
}

/* One axis: output element j reads the ntaps taps idx[j * ntaps + t] with
 * weights w[j * ntaps + t], or is the extrapolation value where out[j] is set. */
typedef struct {
    int ntaps;
    int64_t *idx;
    double *w;
    unsigned char *out;
} rz_axis;

/* Keys' cubic convolution kernel at distance x >= 0. */
static double keys(double A, double x)
{
    if (x <= 1)
        return ((A + 2) * x - (A + 3)) * x * x + 1;
    if (x < 2)
        return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
    return 0;
}

/* The taps of an axis resized by scale: 2 for nearest and linear, 4 for
 * cubic; with antialias, on an axis that shrinks, about the filter's width
 * over scale, counted as ONNX's reference counts them. */
static double count_taps(const rz_attrs *r, double scale)
{
    if (!r->antialias || !(scale < 1))
        return r->mode == RZ_CUBIC ? 4 : 2;
    double start = floor((r->mode == RZ_CUBIC ? -2 : -1) / scale) + 1;
    return 2 - 2 * start;
}

/* The weights w[0..ntaps) of taps first .. first + ntaps - 1, first being
 * floor(x_ori) - ntaps / 2 + 1 when ratio, x_ori - floor(x_ori), is in (0, 1),
 * one less when x_ori is an integer and ratio 1. */
static void coeffs(const rz_attrs *r, int ntaps, double scale, double ratio, double *w)
{
    if (r->mode == RZ_NEAREST) {
        int right = ratio == 1;
        if (ratio != 1)
            switch (r->round) {
            case RZ_ROUND_PREFER_FLOOR: right = ratio > 0.5; break;
            case RZ_ROUND_PREFER_CEIL: right = ratio >= 0.5; break;
            case RZ_FLOOR: right = 0; break;
            case RZ_CEIL: right = 1; break;
            }
        w[0] = !right, w[1] = right;
    } else if (!r->antialias) {
        if (r->mode == RZ_LINEAR) {
            w[0] = 1 - ratio, w[1] = ratio;
        } else { /* Keys' cubic convolution at distances 1 + ratio, ratio, 1 - ratio, 2 - ratio */
            double A = r->a, s = ratio, t = 1 - ratio;
            w[0] = ((A * (s + 1) - 5 * A) * (s + 1) + 8 * A) * (s + 1) - 4 * A;
            w[1] = ((A + 2) * s - (A + 3)) * s * s + 1;
            w[2] = ((A + 2) * t - (A + 3)) * t * t + 1;
            w[3] = ((A * (t + 1) - 5 * A) * (t + 1) + 8 * A) * (t + 1) - 4 * A;
        }
    } else { /* the filter stretched by 1 / scale where the axis shrinks, normalised */
        double s = scale < 1 ? scale : 1, sum = 0;
        int start = 1 - ntaps / 2;
        for (int t = 0; t < ntaps; t++) {
            double x = fabs(s * ((double)(start + t) - ratio));
            w[t] = r->mode == RZ_LINEAR ? (x < 1 ? 1 - x : 0) : keys(r->a, x);
            sum += w[t];
        }
        for (int t = 0; t < ntaps; t++)
            w[t] /= sum;
    }
}

/* Fills ax (its ntaps set, its arrays of out * ntaps entries) for an axis of
 * length in resized to out; scale as ONNX's reference has it (out / in from
 * sizes, else the given scale), roi the axis's (start, end).  1 when the axis
 * is a plain copy. */
static int plan_axis(const rz_attrs *r, int64_t in, int64_t out, double scale, const double *roi, rz_axis *ax)
{
    double ow = scale * (double)in; /* the reference's output_width */
    int copy = in == out, n = ax->ntaps;
    for (int64_t j = 0; j < out; j++) {
        double x = (double)j, xo = 0;
        int64_t *idx = ax->idx + j * n;
        double *w = ax->w + j * n;
        ax->out[j] = 0;
        switch (r->coord) {
        case RZ_HALF_PIXEL: xo = (x + 0.5) / scale - 0.5; break;
        case RZ_PYTORCH_HALF_PIXEL: xo = ow == 1 ? -0.5 : (x + 0.5) / scale - 0.5; break;
        case RZ_ALIGN_CORNERS: xo = ow == 1 ? 0 : x * (double)(in - 1) / (ow - 1); break;
        case RZ_ASYMMETRIC: xo = x / scale; break;
        case RZ_TF_HALF_PIXEL_FOR_NN: xo = (x + 0.5) / scale; break;
        case RZ_TF_CROP_AND_RESIZE:
            xo = ow == 1 ? (roi[1] - roi[0]) * (double)(in - 1) / 2 : x * (roi[1] - roi[0]) * (double)(in - 1) / (ow - 1);
            xo += roi[0] * (double)(in - 1);
            ax->out[j] = xo < 0 || xo > (double)(in - 1);
            break;
        case RZ_HALF_PIXEL_SYMMETRIC: /* the input's centre onto the output's, out / ow apart where out was floored */
            xo = (double)in / 2 * (1 - (double)out / ow) + (x + 0.5) / scale - 0.5;
            break;
        }
        /* the ratio is in (0, 1]: an integer x_ori is the right-hand tap of the middle two */
        double base = floor(xo), ratio = xo - base, sum = 0;
        if (ratio == 0)
            base -= 1, ratio = 1;
        coeffs(r, n, scale, ratio, w);
        int64_t first = (int64_t)base - n / 2 + 1;
        for (int t = 0; t < n; t++) {
            int64_t i = first + t;
            if (r->exclude && (i < 0 || i >= in))
                w[t] = 0;
            sum += w[t];
            idx[t] = i < 0 ? 0 : i >= in ? in - 1 : i;
        }
        for (int t = 0; t < n; t++) {
            if (r->exclude && sum != 0)
                w[t] /= sum;
            if (w[t] != 0 && !(w[t] == 1 && idx[t] == j))
                copy = 0;
        }
        copy &= !ax->out[j];
    }
    return copy;
}

/* dst = src resized along axis (src's dims in dims, updated to out). */
static void run_axis(const rz_attrs *r, const rz_axis *ax, const double *src, double *dst, int rank,
                     int64_t *dims, int axis, int64_t out)
{
    int64_t outer = 1, inner = 1, in = dims[axis];
    int n = ax->ntaps;
    for (int i = 0; i < axis; i++)
        outer *= dims[i];
    for (int i = axis + 1; i < rank; i++)
        inner *= dims[i];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < out; j++) {
            double *d = dst + (o * out + j) * inner;
            const int64_t *idx = ax->idx + j * n;
            const double *w = ax->w + j * n;
            if (ax->out[j]) {
                for (int64_t k = 0; k < inner; k++)
                    d[k] = r->extrapolate;
                continue;
            }
            for (int64_t k = 0; k < inner; k++) {
                double acc = 0;
                for (int t = 0; t < n; t++)
                    acc += w[t] * src[(o * in + idx[t]) * inner + k];
                d[k] = acc;
            }
        }
    dims[axis] = out;
}

/* The output size and scale of each axis, from sizes or scales (one entry
 * per axis of `axes`, the others kept); roi as (start, end) pairs, (0, 1)
 * where it is not given. */
static int sizes_of(ik_ctx *c, const rz_attrs *r, const int *axes, int na, int64_t *out, double *scale,
                    double (*roi)[2])
{
    const ir_tensor *x = c->in[0], *rt = ik_in(c, 1), *st = ik_in(c, 2), *zt = ik_in(c, 3);
    int rank = x->rank, n = 0, err;
    for (int i = 0; i < rank; i++)
        roi[i][0] = 0, roi[i][1] = 1, out[i] = x->dims[i], scale[i] = 1;
    if (r->coord == RZ_TF_CROP_AND_RESIZE && rt && ir_tensor_numel(rt) > 0) {
        if (ir_tensor_numel(rt) != 2 * na)
            return ik_fail(c, VITC_BAD_INPUT, "roi has %lld entries for %d resized axes",
                           (long long)ir_tensor_numel(rt), na);
        for (int i = 0; i < na; i++)
            roi[axes[i]][0] = ir_tensor_get(rt, i), roi[axes[i]][1] = ir_tensor_get(rt, na + i);
    }
    if (zt && ir_tensor_numel(zt) > 0) {
        int64_t sizes[IR_MAX_RANK], in[IR_MAX_RANK] = {0}, o[IR_MAX_RANK];
        double s[IR_MAX_RANK];
        char why[200];
        if ((err = ik_int_list(c, zt, "sizes", sizes, IR_MAX_RANK, &n)))
            return err;
        if (n != na)
            return ik_fail(c, VITC_BAD_INPUT, "sizes has %d entries for %d resized axes", n, na);
        for (int i = 0; i < na; i++)
            in[i] = x->dims[axes[i]];
        if (ir_resize_keep_aspect(c->n, na, in, sizes, o, s, why, sizeof why))
            return ik_fail(c, VITC_BAD_INPUT, "%s", why);
        for (int i = 0; i < na; i++)
            out[axes[i]] = o[i], scale[axes[i]] = s[i];
        return VITC_OK;
    }
    if (!st || ir_tensor_numel(st) != na)
        return ik_fail(c, VITC_BAD_INPUT, "neither sizes nor scales with one entry per resized axis (%d) is given", na);
    for (int i = 0; i < na; i++) {
        int a = axes[i];
        scale[a] = ir_tensor_get(st, i);
        double o = floor(scale[a] * (double)x->dims[a]);
        if (!(scale[a] > 0) || !(o < 1e15))
            return ik_fail(c, VITC_BAD_INPUT, "scale %g of dimension %d", scale[a], a);
        out[a] = (int64_t)o;
    }
    return VITC_OK;
}

static int check_empty(ik_ctx *c, const int64_t *out)
{
    for (int i = 0; i < c->in[0]->rank; i++)
        if (c->in[0]->dims[i] == 0 && out[i] > 0)
            return ik_fail(c, VITC_BAD_INPUT, "dimension %d is empty and cannot be resized to %lld", i,
                           (long long)out[i]);
    return VITC_OK;
}

/* Resizes axis a of cur into next, dims[a] becoming out; *copy set when the
 * axis is a plain copy and next was not written.  VITC_OK or a status. */
static int resize_axis(ik_ctx *c, const rz_attrs *r, int64_t *dims, int a, int64_t out, double scale,
                       const double *roi, const double *cur, double *next, int *copy)
{
    double taps = count_taps(r, scale);
    if (!(taps <= RZ_MAX_TAPS))
        return ik_fail(c, VITC_BAD_INPUT,
                       "antialias shrinks axis %d to %g of its length: its filter would read %.0f input elements per "
                       "output element, more than %d",
                       a, scale, taps, RZ_MAX_TAPS);
    int n = (int)taps;
    rz_axis ax = {.ntaps = n,
                  .idx = malloc(sizeof *ax.idx * (size_t)out * (size_t)n),
                  .w = malloc(sizeof *ax.w * (size_t)out * (size_t)n),
                  .out = malloc((size_t)out)};
    int st = VITC_OK;
    if (!ax.idx || !ax.w || !ax.out)
        st = ik_fail(c, VITC_INTERNAL, "out of memory");
    else if ((*copy = plan_axis(r, dims[a], out, scale, roi, &ax)))
        dims[a] = out;
    else
        run_axis(r, &ax, cur, next, c->in[0]->rank, dims, a, out);
    free(ax.idx);
    free(ax.w);
    free(ax.out);
    return st;
}

int ik_resize(ik_ctx *c)
{
    const ir_tensor *x = c->in[0];
    rz_attrs r;
    char why[200];
    if (read_attrs(c->n, &r, why, sizeof why))
        return ik_fail(c, VITC_BAD_INPUT, "%s", why);
    int rank = x->rank, st, axes[IR_MAX_RANK], resized[IR_MAX_RANK] = {0};
    int na = ir_resize_axes(c->n, rank, axes, why, sizeof why);
    if (na < 0)
        return ik_fail(c, VITC_BAD_INPUT, "%s", why);
    for (int i = 0; i < na; i++)
        resized[axes[i]] = 1;
    int64_t out[IR_MAX_RANK], dims[IR_MAX_RANK];
    double scale[IR_MAX_RANK], roi[IR_MAX_RANK][2];
    if ((st = sizes_of(c, &r, axes, na, out, scale, roi)) || (st = check_empty(c, out)) ||
        (st = ik_alloc(c, &c->out[0], x->dtype, rank, out)))
        return st;
    int64_t nin = ir_tensor_numel(x), cap = nin;
    memcpy(dims, x->dims, sizeof dims);
    for (int a = 0; a < rank; a++) { /* the largest intermediate, resizing from the last axis */
        int64_t m = 1;
        for (int i = 0; i < rank; i++)
            if (ir_mul_ovf(m, i < a ? x->dims[i] : out[i], &m) || m > ((int64_t)4 << 30) / (int64_t)sizeof(double))
                return ik_fail(c, VITC_BAD_INPUT, "resizing axis %d before the others makes an intermediate of over "
                                                  "4 GiB", a);
        cap = m > cap ? m : cap;
    }
    double *buf[2] = {ik_load_f64(c, x), malloc(sizeof(double) * (size_t)(cap + 1))};
    double *cur = buf[0], *next = buf[1];
    if (!buf[0] || !buf[1]) {
        st = buf[0] ? ik_fail(c, VITC_INTERNAL, "out of memory") : VITC_INTERNAL;
        goto done;
    }
    if (cap > nin) { /* the first buffer must hold every intermediate too */
        double *grown = realloc(buf[0], sizeof(double) * (size_t)(cap + 1));
        if (!grown) {
            st = ik_fail(c, VITC_INTERNAL, "out of memory");
            goto done;
        }
        cur = buf[0] = grown;
    }
    for (int a = rank - 1; a >= 0; a--) {
        if (!resized[a] || dims[a] == 0 || out[a] == 0) {
            dims[a] = out[a]; /* left alone, or nothing to read or write */
            continue;
        }
        int copy = 0;
        if ((st = resize_axis(c, &r, dims, a, out[a], scale[a], roi[a], cur, next, &copy)))
            goto done;
        if (!copy) {
            double *t = cur;
            cur = next, next = t;
        }
    }
    for (int64_t i = 0, n = ir_tensor_numel(&c->out[0]); i < n; i++)
        ir_tensor_set(&c->out[0], i, cur[i]);
done:
    free(buf[0]);
    free(buf[1]);
    return st;
}
