/* interp_resize.c: Resize (opsets 13 to 18 without antialias, axes or a
 * kept aspect ratio), as ONNX's reference implementation computes it.
 *
 * Each output coordinate x along an axis is mapped to an input coordinate
 * x_ori by the coordinate transformation mode; the input elements around
 * x_ori are weighted by the mode's coefficients (nearest: one of two, linear:
 * two, cubic: four, with Keys' parameter cubic_coeff_a) and indices outside
 * the input read its edge (or, with exclude_outside, get weight 0 and the
 * others are renormalised).  Weights of a product of axes are the product of
 * each axis's weights, so the kernel resizes one axis at a time, the last
 * axis first as the reference's recursion does, in double.  An axis whose
 * every output element reads its own input element is skipped.
 *
 * Constant folding runs it at compile time: a position table interpolated to
 * another image size (HF Dinov2) becomes a constant. */
#include "ir/interp_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef enum { RZ_NEAREST, RZ_LINEAR, RZ_CUBIC } rz_mode;
typedef enum {
    RZ_HALF_PIXEL,
    RZ_PYTORCH_HALF_PIXEL,
    RZ_ALIGN_CORNERS,
    RZ_ASYMMETRIC,
    RZ_TF_HALF_PIXEL_FOR_NN,
    RZ_TF_CROP_AND_RESIZE
} rz_coord;
typedef enum { RZ_ROUND_PREFER_FLOOR, RZ_ROUND_PREFER_CEIL, RZ_FLOOR, RZ_CEIL } rz_round;

static const char *const mode_names[] = {"nearest", "linear", "cubic", NULL};
static const char *const coord_names[] = {"half_pixel",          "pytorch_half_pixel", "align_corners", "asymmetric",
                                          "tf_half_pixel_for_nn", "tf_crop_and_resize", NULL};
static const char *const round_names[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil", NULL};

/* The index in names of n's string attribute id (dflt when absent), -1 when unknown. */
static int pick(const ir_node *n, ir_attr_id id, const char *const *names, int dflt)
{
    const ir_attr *a = ir_attr_get(n, id);
    if (!a)
        return dflt;
    if (a->kind != IR_AT_STRING)
        return -1;
    for (int i = 0; names[i]; i++)
        if (strcmp(names[i], a->s) == 0)
            return i;
    return -1;
}

typedef struct {
    rz_mode mode;
    rz_coord coord;
    rz_round round;
    double a;         /* cubic_coeff_a */
    int exclude;      /* exclude_outside */
    double extrapolate; /* extrapolation_value (tf_crop_and_resize) */
} rz_attrs;

/* 0 and the attributes, or -1 when n uses something this kernel lacks. */
static int read_attrs(const ir_node *n, rz_attrs *r)
{
    const ir_attr *k = ir_attr_get(n, IR_ATTR_KEEP_ASPECT_RATIO_POLICY);
    int m = pick(n, IR_ATTR_MODE, mode_names, RZ_NEAREST);
    int c = pick(n, IR_ATTR_COORD_MODE, coord_names, RZ_HALF_PIXEL);
    int rd = pick(n, IR_ATTR_NEAREST_MODE, round_names, RZ_ROUND_PREFER_FLOOR);
    if (m < 0 || c < 0 || rd < 0 || ir_attr_int(n, IR_ATTR_ANTIALIAS, 0) != 0 || ir_attr_get(n, IR_ATTR_AXES) ||
        (k && !(k->kind == IR_AT_STRING && strcmp(k->s, "stretch") == 0)))
        return -1;
    *r = (rz_attrs){.mode = (rz_mode)m,
                    .coord = (rz_coord)c,
                    .round = (rz_round)rd,
                    .a = ir_attr_float(n, IR_ATTR_CUBIC_COEFF_A, -0.75f),
                    .exclude = ir_attr_int(n, IR_ATTR_EXCLUDE_OUTSIDE, 0) != 0,
                    .extrapolate = ir_attr_float(n, IR_ATTR_EXTRAPOLATION_VALUE, 0.0f)};
    return 0;
}

int ir_resize_supported(const ir_node *n)
{
    rz_attrs r;
    return read_attrs(n, &r) == 0;
}

int ir_resize_copies_at_same_size(const ir_node *n)
{
    rz_attrs r;
    return read_attrs(n, &r) == 0 && r.coord != RZ_TF_CROP_AND_RESIZE && r.coord != RZ_TF_HALF_PIXEL_FOR_NN;
}

enum { TAPS = 4 };

/* One axis: output element j reads taps idx[j][t] with weights w[j][t]
 * (ntaps of them), or is the extrapolation value where out[j] is set. */
typedef struct {
    int ntaps;
    int64_t (*idx)[TAPS];
    double (*w)[TAPS];
    unsigned char *out;
} rz_axis;

static void coeffs(const rz_attrs *r, double ratio, double *w)
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
    } else if (r->mode == RZ_LINEAR) {
        w[0] = 1 - ratio, w[1] = ratio;
    } else { /* Keys' cubic convolution at distances 1 + ratio, ratio, 1 - ratio, 2 - ratio */
        double A = r->a, s = ratio, t = 1 - ratio;
        w[0] = ((A * (s + 1) - 5 * A) * (s + 1) + 8 * A) * (s + 1) - 4 * A;
        w[1] = ((A + 2) * s - (A + 3)) * s * s + 1;
        w[2] = ((A + 2) * t - (A + 3)) * t * t + 1;
        w[3] = ((A * (t + 1) - 5 * A) * (t + 1) + 8 * A) * (t + 1) - 4 * A;
    }
}

/* Fills ax for an axis of length in resized to out; scale as ONNX's
 * reference has it (out / in from sizes, else the given scale), roi the
 * axis's (start, end).  1 when the axis is a plain copy. */
static int plan_axis(const rz_attrs *r, int64_t in, int64_t out, double scale, const double *roi, rz_axis *ax)
{
    double ow = scale * (double)in; /* the reference's output_width */
    int copy = in == out;
    ax->ntaps = r->mode == RZ_CUBIC ? 4 : 2;
    for (int64_t j = 0; j < out; j++) {
        double x = (double)j, xo = 0;
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
        }
        /* the ratio is in (0, 1]: an integer x_ori is the right-hand tap */
        double base = floor(xo), ratio = xo - base;
        if (ratio == 0)
            base -= 1, ratio = 1;
        double w[TAPS] = {0}, sum = 0;
        coeffs(r, ratio, w);
        int64_t first = (int64_t)base - (ax->ntaps == 4 ? 1 : 0);
        for (int t = 0; t < ax->ntaps; t++) {
            int64_t i = first + t;
            if (r->exclude && (i < 0 || i >= in))
                w[t] = 0;
            sum += w[t];
            ax->idx[j][t] = i < 0 ? 0 : i >= in ? in - 1 : i;
        }
        for (int t = 0; t < ax->ntaps; t++) {
            ax->w[j][t] = r->exclude && sum != 0 ? w[t] / sum : w[t];
            if (ax->w[j][t] != 0 && !(ax->w[j][t] == 1 && ax->idx[j][t] == j))
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
    for (int i = 0; i < axis; i++)
        outer *= dims[i];
    for (int i = axis + 1; i < rank; i++)
        inner *= dims[i];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < out; j++) {
            double *d = dst + (o * out + j) * inner;
            if (ax->out[j]) {
                for (int64_t k = 0; k < inner; k++)
                    d[k] = r->extrapolate;
                continue;
            }
            for (int64_t k = 0; k < inner; k++) {
                double acc = 0;
                for (int t = 0; t < ax->ntaps; t++)
                    acc += ax->w[j][t] * src[(o * in + ax->idx[j][t]) * inner + k];
                d[k] = acc;
            }
        }
    dims[axis] = out;
}

/* The output size and scale of each axis, from sizes or scales; roi as
 * (start, end) pairs, all (0, 1) when it is not given. */
static int sizes_of(ik_ctx *c, const rz_attrs *r, int64_t *out, double *scale, double (*roi)[2])
{
    const ir_tensor *x = c->in[0], *rt = ik_in(c, 1), *st = ik_in(c, 2), *zt = ik_in(c, 3);
    int rank = x->rank, n = 0, err;
    for (int i = 0; i < rank; i++)
        roi[i][0] = 0, roi[i][1] = 1;
    if (r->coord == RZ_TF_CROP_AND_RESIZE && rt && ir_tensor_numel(rt) > 0) {
        if (ir_tensor_numel(rt) != 2 * rank)
            return ik_fail(c, VITC_BAD_INPUT, "roi has %lld entries for an input of rank %d",
                           (long long)ir_tensor_numel(rt), rank);
        for (int i = 0; i < rank; i++)
            roi[i][0] = ir_tensor_get(rt, i), roi[i][1] = ir_tensor_get(rt, rank + i);
    }
    if (zt && ir_tensor_numel(zt) > 0) {
        if ((err = ik_int_list(c, zt, "sizes", out, IR_MAX_RANK, &n)))
            return err;
        if (n != rank)
            return ik_fail(c, VITC_BAD_INPUT, "sizes has %d entries for an input of rank %d", n, rank);
        for (int i = 0; i < rank; i++) {
            if (out[i] < 0)
                return ik_fail(c, VITC_BAD_INPUT, "sizes[%d] is %lld", i, (long long)out[i]);
            scale[i] = x->dims[i] ? (double)out[i] / (double)x->dims[i] : 1;
        }
        return VITC_OK;
    }
    if (!st || ir_tensor_numel(st) != rank)
        return ik_fail(c, VITC_BAD_INPUT, "neither sizes nor scales with one entry per input dimension is given");
    for (int i = 0; i < rank; i++) {
        scale[i] = ir_tensor_get(st, i);
        double o = floor(scale[i] * (double)x->dims[i]);
        if (!(scale[i] > 0) || !(o < 1e15))
            return ik_fail(c, VITC_BAD_INPUT, "scale %g of dimension %d", scale[i], i);
        out[i] = (int64_t)o;
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

int ik_resize(ik_ctx *c)
{
    const ir_tensor *x = c->in[0];
    rz_attrs r;
    if (read_attrs(c->n, &r))
        return ik_fail(c, VITC_BAD_INPUT, "this Resize mode or attribute is not supported");
    int rank = x->rank, st;
    int64_t out[IR_MAX_RANK], dims[IR_MAX_RANK];
    double scale[IR_MAX_RANK], roi[IR_MAX_RANK][2];
    if ((st = sizes_of(c, &r, out, scale, roi)) || (st = check_empty(c, out)) || (st = ik_alloc(c, &c->out[0], x->dtype, rank, out)))
        return st;
    int64_t nin = ir_tensor_numel(x), cap = nin, maxlen = 1;
    memcpy(dims, x->dims, sizeof dims);
    for (int a = 0; a < rank; a++) { /* the largest intermediate, resizing from the last axis */
        int64_t m = 1;
        for (int i = 0; i < rank; i++)
            m *= i < a ? x->dims[i] : out[i];
        cap = m > cap ? m : cap;
        maxlen = out[a] > maxlen ? out[a] : maxlen;
    }
    double *buf[2] = {ik_load_f64(c, x), malloc(sizeof(double) * (size_t)(cap + 1))};
    rz_axis ax = {.idx = malloc(sizeof *ax.idx * (size_t)maxlen),
                  .w = malloc(sizeof *ax.w * (size_t)maxlen),
                  .out = malloc((size_t)maxlen)};
    double *cur = buf[0], *next = buf[1];
    if (!buf[0] || !buf[1] || !ax.idx || !ax.w || !ax.out) {
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
        if (dims[a] == 0 || out[a] == 0 ||
            plan_axis(&r, dims[a], out[a], scale[a], roi[a], &ax)) {
            dims[a] = out[a]; /* a copy, or nothing to read or write */
            continue;
        }
        run_axis(&r, &ax, cur, next, rank, dims, a, out[a]);
        double *t = cur;
        cur = next, next = t;
    }
    for (int64_t i = 0, n = ir_tensor_numel(&c->out[0]); i < n; i++)
        ir_tensor_set(&c->out[0], i, cur[i]);
done:
    free(buf[0]);
    free(buf[1]);
    free(ax.idx);
    free(ax.w);
    free(ax.out);
    return st;
}
