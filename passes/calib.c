/* calib.c: activation ranges from calibration inputs (--calibrate), for
 * int8-linear's static quantization.
 *
 * The reference interpreter runs the graph as it stands on each input; an
 * observer adds every element of the values asked for to a histogram of
 * magnitudes (each sign apart, 16 bins an octave, from 2^-40 up), with the
 * exact extremes.  A value's range then leaves out the rarest 0.01% of its
 * elements on each side (a percentile: plain min/max ranges let a few
 * outliers of a ViT's activations take the 256 steps), widened to hold 0 and
 * kept within the extremes seen. */
#include "passes/rewrite.h"

#include "ir/interp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { OCT_LO = -40, OCTAVES = 100, SUB = 16, NBINS = OCTAVES * SUB };
#define CALIB_TAIL 1e-4 /* the share of elements left out on each side */

typedef struct {
    double count; /* elements seen, zeros included */
    double neg[NBINS], pos[NBINS];
    float lo, hi; /* the extremes */
} histogram;

typedef struct {
    int *slot; /* per value of the graph: its histogram, or -1 */
    histogram *h;
} observer_ctx;

/* The bin of a magnitude a > 0: its octave and sixteenth of it. */
static int bin_of(float a)
{
    int e;
    double m = frexp(a, &e); /* a = m 2^e, m in [0.5, 1) */
    int b = (e - OCT_LO) * SUB + (int)((m - 0.5) * 2 * SUB);
    return b < 0 ? 0 : b >= NBINS ? NBINS - 1 : b;
}

/* The upper edge of bin b. */
static double bin_top(int b) { return ldexp(0.5 + (double)(b % SUB + 1) / (2 * SUB), b / SUB + OCT_LO); }

static void observe(void *ctx, const ir_graph *g, int node, int value, const ir_tensor *t)
{
    (void)g, (void)node;
    observer_ctx *o = ctx;
    if (value < 0 || value >= g->nvalues || o->slot[value] < 0 || t->dtype != IR_F32)
        return;
    histogram *h = &o->h[o->slot[value]];
    const float *x = t->data;
    int64_t n = ir_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        if (!isfinite(v))
            continue;
        h->count++;
        h->lo = v < h->lo ? v : h->lo;
        h->hi = v > h->hi ? v : h->hi;
        if (v > 0)
            h->pos[bin_of(v)]++;
        else if (v < 0)
            h->neg[bin_of(-v)]++;
    }
}

/* The top of the smallest magnitude past which at most `keep_out` elements of bins lie. */
static double tail_edge(const double *bins, double keep_out)
{
    double above = 0;
    for (int b = NBINS - 1; b >= 0; b--) {
        if (above + bins[b] > keep_out)
            return bin_top(b);
        above += bins[b];
    }
    return 0;
}

int pass_calib_ranges(const ir_graph *g, const ir_tensor *inputs, int ninputs, const int *values, int nvalues,
                      float (*range)[2], vitc_diag *d)
{
    observer_ctx o = {.slot = malloc(sizeof(int) * (size_t)(g->nvalues + 1)),
                      .h = calloc((size_t)(nvalues ? nvalues : 1), sizeof(histogram))};
    ir_tensor *outs = calloc((size_t)(g->noutputs + 1), sizeof *outs);
    if (!o.slot || !o.h || !outs) {
        free(o.slot), free(o.h), free(outs);
        return vitc_error(d, VITC_INTERNAL, NULL, "out of memory for the calibration");
    }
    for (int v = 0; v < g->nvalues; v++)
        o.slot[v] = -1;
    for (int i = 0; i < nvalues; i++) /* a value read by several Linears: one histogram */
        if (o.slot[values[i]] < 0)
            o.slot[values[i]] = i;
    int st = VITC_OK;
    for (int k = 0; k < ninputs && st == VITC_OK; k++) {
        st = ir_interpret(g, &inputs[k * g->ninputs], outs, observe, &o, d);
        if (st != VITC_OK)
            vitc_error(d, st, NULL, "the calibration's sample %d (in file name order) does not run through the model",
                       k + 1);
        for (int j = 0; st == VITC_OK && j < g->noutputs; j++)
            ir_tensor_free(&outs[j]);
    }
    for (int i = 0; st == VITC_OK && i < nvalues; i++) {
        const histogram *h = &o.h[o.slot[values[i]]];
        double out = floor(CALIB_TAIL * h->count);
        double hi = fmin(tail_edge(h->pos, out), h->hi), lo = fmax(-tail_edge(h->neg, out), h->lo);
        range[i][0] = (float)fmin(lo, 0);
        range[i][1] = (float)fmax(hi, 0);
    }
    free(o.slot), free(o.h), free(outs);
    return st;
}
