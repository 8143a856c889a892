/* fuzz_interp.c: the interpreter harness.  A model that imports and gets
 * its shapes is run by the reference interpreter on seeded inputs at batch 2,
 * then the passes run and it is interpreted again.  Both runs must agree
 * (integers exactly, floats within FZ_REL_TOL: fusions reorder float
 * arithmetic; runs whose float values leave [-1e15, 1e15] are not compared,
 * nor ill-conditioned ones: where moving every float input by FZ_NUDGE of
 * itself moves an output beyond FZ_REL_TOL, a fusion's different rounding of
 * an intermediate may rightly do as much, as a LayerNorm over nearly equal
 * values of a fuzzed graph once did),
 * and every tensor the interpreter makes must have the dtype and the shape
 * that shape inference gave its value, evaluated at the batch.  A
 * graph bigger than FZ_MAX_ELEMENTS / FZ_MAX_WORK at batch 2 is skipped: that
 * bound belongs to the harness, never to vitc. */
#include "fuzz.h"

#include "ir/interp.h"
#include "passes/passes.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define FZ_BATCH 2
#define FZ_REL_TOL 1e-4 /* the accuracy DESIGN.md asks of fp32 code */
#define FZ_EXTREME 1e15
#define FZ_NUDGE 1e-6 /* relative: ~17 f32 roundings; a graph that amplifies it 100x is not compared */

/* a * b, saturating at INT64_MAX; negative operands count as "too big". */
static int64_t sat_mul(int64_t a, int64_t b)
{
    int64_t r;
    if (a < 0 || b < 0 || ir_mul_ovf(a, b, &r))
        return INT64_MAX;
    return r;
}

static int64_t sat_add(int64_t a, int64_t b)
{
    int64_t r;
    if (a < 0 || b < 0 || ir_add_ovf(a, b, &r))
        return INT64_MAX;
    return r;
}

static int64_t numel(const ir_graph *g, int v)
{
    if (v < 0)
        return 0;
    int64_t n = ir_value_numel(&g->values[v], FZ_BATCH);
    return n < 0 ? INT64_MAX : n;
}

/* 1 if running g at batch 2 stays within the harness bound. */
static int small_enough(const ir_graph *g)
{
    int64_t elements = 0, work = 0;
    for (int v = 0; v < g->nvalues; v++)
        if (g->values[v].rank >= 0)
            elements = sat_add(elements, numel(g, v));
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *n = &g->nodes[i];
        int64_t in = 0, out = 0, prod = 1;
        for (int k = 0; k < n->ninputs; k++) {
            in = sat_add(in, numel(g, n->inputs[k]));
            prod = sat_mul(prod, sat_add(numel(g, n->inputs[k]), 1));
        }
        for (int k = 0; k < n->noutputs; k++)
            out = sat_add(out, numel(g, n->outputs[k]));
        int64_t w = sat_add(in, out);
        const ir_value *a = n->ninputs > 0 && n->inputs[0] >= 0 ? &g->values[n->inputs[0]] : NULL;
        const ir_value *b = n->ninputs > 1 && n->inputs[1] >= 0 ? &g->values[n->inputs[1]] : NULL;
        switch (n->op) {
        case IR_OP_MATMUL: case IR_OP_GEMM: /* output x the inner dimension (at most a's largest) */
        case IR_OP_CONV: {                   /* output x a filter's size */
            int64_t k = 0;
            for (int j = 0; a && j < a->rank; j++)
                k = k > ir_dim_eval(a->dims[j], FZ_BATCH) ? k : ir_dim_eval(a->dims[j], FZ_BATCH);
            if (n->op == IR_OP_CONV)
                k = b && b->rank > 0 && b->dims[0].k > 0 ? numel(g, n->inputs[1]) / b->dims[0].k : INT64_MAX;
            w = sat_add(w, sat_mul(out, k < 0 ? INT64_MAX : k));
            break;
        }
        case IR_OP_EINSUM: /* bounded by the product of the operand sizes */
            w = sat_add(w, prod);
            break;
        default:
            break;
        }
        work = sat_add(work, w);
    }
    return elements <= FZ_MAX_ELEMENTS && work <= FZ_MAX_WORK;
}

static uint64_t next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Seeded inputs: floats in [-2, 2], integers in [0, 3] (valid small indices). */
static int make_inputs(const ir_graph *g, ir_tensor *ts, uint64_t seed)
{
    for (int i = 0; i < g->ninputs; i++) {
        const ir_value *v = &g->values[g->inputs[i]];
        int64_t dims[IR_MAX_RANK];
        for (int j = 0; j < v->rank; j++)
            dims[j] = ir_dim_eval(v->dims[j], FZ_BATCH);
        if (ir_tensor_alloc(&ts[i], v->dtype, v->rank, dims) != VITC_OK)
            return -1;
        int64_t n = ir_tensor_numel(&ts[i]);
        for (int64_t e = 0; e < n; e++) {
            uint64_t r = next(&seed);
            if (ir_dtype_is_float(v->dtype))
                ir_tensor_set(&ts[i], e, (double)(r % 4001) / 1000.0 - 2.0);
            else
                ir_tensor_set_i64(&ts[i], e, (int64_t)(r % 4));
        }
    }
    return 0;
}

static void free_all(ir_tensor *ts, int n)
{
    for (int i = 0; i < n; i++)
        ir_tensor_free(&ts[i]);
    free(ts);
}

/* The batch the interpreter will find: FZ_BATCH if an input has a k*B
 * dimension with k > 0, else 1. */
static int64_t run_batch(const ir_graph *g)
{
    for (int i = 0; i < g->ninputs; i++) {
        const ir_value *v = &g->values[g->inputs[i]];
        for (int j = 0; j < v->rank; j++)
            if (v->dims[j].e == 1 && v->dims[j].k > 0)
                return FZ_BATCH;
    }
    return 1;
}

typedef struct {
    int64_t batch;
    int extreme; /* some float tensor held a non-finite value or one over FZ_EXTREME */
} run_ctx;

/* Observer: each computed tensor against its value's inferred type; notes
 * float values so large that an f32 square overflows, or not finite: there
 * a fused and an unfused graph may rightly differ (e.g. LayerNorm's variance
 * in one op against Pow(x, 2) in f32). */
static void check_inferred(void *ctx, const ir_graph *g, int node, int value, const ir_tensor *t)
{
    const ir_value *v = &g->values[value];
    run_ctx *rc = ctx;
    int64_t batch = rc->batch;
    int64_t n = ir_dtype_is_float(t->dtype) && !rc->extreme ? ir_tensor_numel(t) : 0;
    for (int64_t i = 0; i < n; i++) {
        double x = ir_tensor_get(t, i);
        if (!(fabs(x) <= FZ_EXTREME)) {
            rc->extreme = 1;
            break;
        }
    }
    int ok = t->dtype == v->dtype && t->rank == v->rank;
    for (int j = 0; ok && j < v->rank; j++)
        ok = ir_dim_eval(v->dims[j], batch) == t->dims[j];
    if (!ok) {
        char want[256];
        fprintf(stderr, "node %d (%s) value '%s': inferred %s, computed %s of rank %d\n", node,
                ir_op_name(g->nodes[node].op), v->name, ir_value_type_str(v, want, sizeof want),
                ir_dtype_name(t->dtype), t->rank);
        fz_die("the interpreter computed a tensor whose type or shape differs from the inferred one", NULL);
    }
}

/* Runs g; returns its outputs (NULL when the run was refused).  *extreme
 * (may be NULL) is set when some float tensor went beyond FZ_EXTREME. */
static ir_tensor *run(const ir_graph *g, const ir_tensor *inputs, vitc_diag *d, int *extreme)
{
    ir_tensor *outs = calloc((size_t)g->noutputs + 1, sizeof *outs);
    if (!outs)
        fz_die("out of memory in the harness", NULL);
    run_ctx rc = {.batch = run_batch(g)};
    int st = ir_interpret(g, inputs, outs, check_inferred, &rc, d);
    if (extreme)
        *extreme |= rc.extreme;
    if (st == VITC_INTERNAL)
        fz_die("the interpreter failed with an internal error", d);
    if (st != VITC_OK) {
        free(outs);
        return NULL;
    }
    return outs;
}

/* Copies of inputs with every float value moved by FZ_NUDGE of itself, up
 * or down by a seeded sign; NULL when out of memory. */
static ir_tensor *nudged(const ir_graph *g, const ir_tensor *inputs, uint64_t seed)
{
    ir_tensor *ts = calloc((size_t)g->ninputs + 1, sizeof *ts);
    for (int i = 0; ts && i < g->ninputs; i++) {
        const ir_tensor *t = &inputs[i];
        if (ir_tensor_alloc(&ts[i], t->dtype, t->rank, t->dims) != VITC_OK) {
            free_all(ts, i);
            return NULL;
        }
        memcpy(ts[i].data, t->data, ir_tensor_nbytes(t));
        int64_t n = ir_dtype_is_float(t->dtype) ? ir_tensor_numel(t) : 0;
        for (int64_t e = 0; e < n; e++)
            ir_tensor_set(&ts[i], e, ir_tensor_get(t, e) * (next(&seed) & 1 ? 1 + FZ_NUDGE : 1 - FZ_NUDGE));
    }
    return ts;
}

/* Same dtype and shape; integers equal, floats within FZ_REL_TOL of the
 * largest finite |ref| (fusions reorder float arithmetic), NaN and infinities
 * where ref has them. */
static int compare_tensor(const ir_tensor *t, const ir_tensor *ref, int report)
{
    if (t->dtype != ref->dtype || t->rank != ref->rank ||
        memcmp(t->dims, ref->dims, (size_t)t->rank * sizeof *t->dims))
        return 0;
    size_t nb = ir_tensor_nbytes(t);
    if (nb == 0 || memcmp(t->data, ref->data, nb) == 0)
        return 1;
    if (!ir_dtype_is_float(t->dtype))
        return 0;
    int64_t n = ir_tensor_numel(t);
    double scale = 0;
    for (int64_t i = 0; i < n; i++) {
        double r = fabs(ir_tensor_get(ref, i));
        if (isfinite(r) && r > scale)
            scale = r;
    }
    for (int64_t i = 0; i < n; i++) {
        double a = ir_tensor_get(t, i), r = ir_tensor_get(ref, i);
        if (isnan(r) ? !isnan(a) : isinf(r) ? a != r : !(fabs(a - r) <= FZ_REL_TOL * scale)) {
            if (report)
                fprintf(stderr, "element %lld: %.9g after the passes, %.9g before (largest |value| %g)\n",
                        (long long)i, a, r, scale);
            return 0;
        }
    }
    return 1;
}

static int same_tensor(const ir_tensor *t, const ir_tensor *ref) { return compare_tensor(t, ref, 1); }
static int same_tensor_quiet(const ir_tensor *t, const ir_tensor *ref) { return compare_tensor(t, ref, 0); }

/* After a disagreement: which pass it starts at (the graph is interpreted
 * after each pass of a fresh copy and compared with the results before). */
typedef struct {
    const ir_tensor *inputs, *before;
    const char *culprit;
} bisect_ctx;

static void bisect_hook(void *ctx, const char *pass, const ir_graph *g)
{
    bisect_ctx *b = ctx;
    if (b->culprit)
        return;
    vitc_diag d;
    fz_diag(&d, "bisect");
    ir_tensor *outs = run(g, b->inputs, &d, NULL);
    for (int k = 0; outs && k < g->noutputs && !b->culprit; k++)
        if (!same_tensor(&outs[k], &b->before[k]))
            b->culprit = pass;
    if (outs)
        free_all(outs, g->noutputs);
}

static void bisect(const uint8_t *data, size_t size, const ir_tensor *inputs, const ir_tensor *before)
{
    vitc_diag d;
    ir_graph *g = fz_load(data, size, &d);
    bisect_ctx b = {.inputs = inputs, .before = before};
    if (g && pass_run_pipeline(g, bisect_hook, &b, &d) == VITC_OK)
        fprintf(stderr, "the results part after pass '%s'\n", b.culprit ? b.culprit : "(none: not reproduced)");
    ir_graph_free(g);
}

int fz_interp_one(const uint8_t *data, size_t size)
{
    vitc_diag d;
    ir_graph *g = fz_load(data, size, &d);
    if (!g)
        return 0;
    if (!small_enough(g)) {
        if (d.out == stderr)
            fprintf(stderr, "not interpreted: over the harness's size bound\n");
        ir_graph_free(g);
        return 0;
    }
    uint64_t seed = 0x9e3779b97f4a7c15ull ^ size;
    for (size_t i = 0; i < size && i < 64; i++)
        seed = seed * 31 + data[i];
    seed |= 1;
    ir_tensor *inputs = calloc((size_t)g->ninputs + 1, sizeof *inputs);
    if (!inputs)
        fz_die("out of memory in the harness", NULL);
    if (make_inputs(g, inputs, seed) == 0) {
        int nout = g->noutputs, extreme = 0, ill = 0;
        ir_tensor *before = run(g, inputs, &d, &extreme);
        ir_tensor *moved = before && !extreme ? nudged(g, inputs, seed) : NULL, *near = NULL;
        if (moved && (near = run(g, moved, &d, &extreme)) != NULL)
            for (int k = 0; k < nout && !ill; k++)
                ill = !same_tensor_quiet(&near[k], &before[k]);
        if (near)
            free_all(near, nout);
        if (moved)
            free_all(moved, g->ninputs);
        if (fz_passes(g, &d) == VITC_OK) {
            ir_tensor *after = run(g, inputs, &d, &extreme);
            for (int k = 0; before && after && !extreme && !ill && k < nout; k++)
                if (!same_tensor(&after[k], &before[k]) &&
                    fprintf(stderr, "output %d ('%s')\n", k, g->values[g->outputs[k]].name) > 0 &&
                    (bisect(data, size, inputs, before), 1))
                    fz_die("the interpreter's results differ before and after the passes", &d);
            if (d.out == stderr) /* VITC_FUZZ_VERBOSE */
                fprintf(stderr, "interpreted: before the passes %s, after %s\n", before ? "ran" : "refused",
                        !after      ? "refused"
                        : extreme   ? "ran (values beyond 1e15: not compared)"
                        : ill       ? "ran (ill-conditioned: inputs moved by 1e-6 move the outputs beyond the "
                                      "tolerance; not compared)"
                                    : "ran (same results)");
            if (after)
                free_all(after, nout);
        }
        if (before)
            free_all(before, nout);
    }
    free_all(inputs, g->ninputs);
    ir_graph_free(g);
    return 0;
}
