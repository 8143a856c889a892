/* cmd_compare.c: `vitc compare MODEL.onnx [MODEL.so]`, the compiled model
 * against the reference interpreter on the imported graph, on the same inputs
 * (given as .npy files, or seeded random ones of the right shapes).  Without
 * MODEL.so the model is compiled into a temporary one, as `vitc MODEL.onnx -o`
 * would.  Prints per output the max abs error, max rel error
 * (max|out-ref|/max|ref|), cosine and PASS/FAIL, and exits 1 when an output
 * is beyond tolerance.  --bisect says where outputs part (compare_bisect.c). */
#include "tools/compare.h"

#include "ir/interp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_double(const char *s, double *out)
{
    char *end;
    *out = strtod(s, &end);
    return *s && !*end && isfinite(*out) && *out >= 0;
}

static int parse_args(int argc, char **argv, cmp_opts *o)
{
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end;
        if (strcmp(a, "--input") == 0 && v) {
            if (o->nspecs == CMP_MAX_INPUTS)
                return cli_usage_error("compare: too many --input options");
            o->specs[o->nspecs++] = argv[++i];
        } else if (strcmp(a, "--rtol") == 0 && v) {
            if (!parse_double(argv[++i], &o->tol.rtol))
                return cli_usage_error("compare: --rtol takes a number >= 0, not '%s'", v);
            o->rtol_given = 1;
        } else if (strcmp(a, "--atol") == 0 && v) {
            if (!parse_double(argv[++i], &o->tol.atol))
                return cli_usage_error("compare: --atol takes a number >= 0, not '%s'", v);
            o->atol_given = 1;
        } else if (strcmp(a, "--batch") == 0 && v) {
            o->batch = strtoll(argv[++i], &end, 10);
            if (*end || o->batch < 1 || o->batch > 65536)
                return cli_usage_error("compare: --batch takes a count from 1 to 65536");
        } else if (strcmp(a, "--seed") == 0 && v) {
            o->seed = strtoull(argv[++i], &end, 10);
            if (*end || !*v || *v == '-')
                return cli_usage_error("compare: --seed takes a number");
        } else if (strcmp(a, "--threads") == 0 && v) {
            long n = strtol(argv[++i], &end, 10);
            if (*end || n < 0 || n > 1024)
                return cli_usage_error("compare: --threads takes a count from 0 (one per core) to 1024");
            o->nthreads = (int)n;
        } else if (strcmp(a, "--bisect") == 0) {
            o->bisect = 1;
        } else if (a[0] == '-') {
            return cli_usage_error("compare: unknown option or missing value '%s'", a);
        } else if (!o->onnx) {
            o->onnx = a;
        } else if (!o->so) {
            o->so = a;
        } else {
            return cli_usage_error("compare: more than two models given");
        }
    }
    if (!o->onnx)
        return cli_usage_error("compare: no model given");
    if (!cli_is_onnx(o->onnx))
        return cli_usage_error("compare: '%s' is not an .onnx model (usage: vitc compare MODEL.onnx [MODEL.so])",
                               o->onnx);
    if (o->so && cli_is_onnx(o->so))
        return cli_usage_error("compare: the second model '%s' must be a compiled .so", o->so);
    if (o->nspecs && o->batch)
        return cli_usage_error("compare: --batch is for random inputs; the --input files fix the batch");
    return VITC_OK;
}

/* Seeded random inputs for every graph input, at a batch. */
static int random_inputs(const ir_graph *g, int64_t batch, uint64_t seed, ir_tensor *inputs)
{
    for (int i = 0; i < g->ninputs; i++) {
        const ir_value *v = &g->values[g->inputs[i]];
        int64_t dims[IR_MAX_RANK];
        for (int k = 0; k < v->rank; k++)
            if ((dims[k] = ir_dim_eval(v->dims[k], batch)) < 0)
                return cli_usage_error("%s: input '%s' has no size at batch %lld", g->path, v->name,
                                       (long long)batch);
        int st = ir_tensor_alloc(&inputs[i], v->dtype, v->rank, dims);
        if (st != VITC_OK) {
            fprintf(stderr, "vitc: %s: cannot allocate input '%s' at batch %lld\n", g->path, v->name,
                    (long long)batch);
            return st;
        }
        cmp_random_fill(&inputs[i], seed + (uint64_t)i);
    }
    return VITC_OK;
}

static int depends_on_batch(const ir_graph *g)
{
    for (int i = 0; i < g->ninputs; i++)
        if (!ir_value_is_static(&g->values[g->inputs[i]]))
            return 1;
    return 0;
}

static char *shape_str(const ir_tensor *t, char *buf, size_t n)
{
    ir_value v = {.dtype = t->dtype, .rank = t->rank};
    for (int k = 0; k < t->rank; k++)
        v.dims[k] = ir_dim_const(t->dims[k]);
    return ir_value_type_str(&v, buf, n);
}

/* Runs the .so; compiled[i] gets its output for graph output i (by name, else position). */
static int run_compiled(cmp_opts *o, vitc_model *m, const ir_graph *g, const ir_tensor *inputs, ir_tensor *compiled)
{
    int nin = vitc_model_num_inputs(m), nout = vitc_model_num_outputs(m);
    if (nin != g->ninputs || nout != g->noutputs) {
        fprintf(stderr, "vitc: %s has %d inputs and %d outputs; %s has %d and %d\n", o->so, nin, nout, o->onnx,
                g->ninputs, g->noutputs);
        return VITC_BAD_INPUT;
    }
    ir_tensor *out = calloc((size_t)nout + 1, sizeof *out);
    if (!out)
        return VITC_INTERNAL;
    int status = cmp_run_so(o, m, g, inputs, out);
    for (int i = 0; status == VITC_OK && i < nout; i++) {
        vitc_tensor_info info;
        vitc_model_output(m, i, &info);
        int k = 0;
        while (k < g->noutputs && strcmp(g->values[g->outputs[k]].name, info.name) != 0)
            k++;
        compiled[k < g->noutputs ? k : i] = out[i]; /* moved */
    }
    free(out);
    return status;
}

/* Prints the table; returns the index of the first output beyond tolerance, or -1. */
static int report(const cmp_opts *o, const ir_graph *g, const ir_tensor *compiled, const ir_tensor *ref)
{
    printf("%-20s %-20s %-10s %-10s %-12s %-16s %s\n", "output", "shape", "max_abs", "max_rel", "cosine", "worst at",
           "result");
    int first_bad = -1;
    cmp_metrics bad = {0};
    for (int i = 0; i < g->noutputs; i++) {
        cmp_metrics m;
        cmp_measure(&compiled[i], &ref[i], &m);
        int ok = cmp_passes(&m, &o->tol);
        char shape[128], at[96] = "-";
        if (m.worst >= 0)
            cmp_index_str(&ref[i], m.worst, at, sizeof at);
        printf("%-20s %-20s %-10.3g %-10.3g %-12.9f %-16s %s\n", g->values[g->outputs[i]].name,
               shape_str(&ref[i], shape, sizeof shape), m.max_abs, m.max_rel, m.cosine, at, ok ? "PASS" : "FAIL");
        if (m.shape_mismatch)
            printf("  the compiled output is %s\n", shape_str(&compiled[i], shape, sizeof shape));
        else if (m.nonfinite)
            printf("  %lld element%s NaN or infinite on one side only\n", (long long)m.nonfinite,
                   m.nonfinite == 1 ? " is" : "s are");
        if (!ok && first_bad < 0) {
            first_bad = i;
            bad = m;
        }
    }
    if (first_bad < 0)
        return -1;
    const char *name = g->values[g->outputs[first_bad]].name;
    if (g->noutputs > 1)
        printf("first output beyond tolerance: %s\n", name);
    if (bad.worst >= 0 && !bad.shape_mismatch) {
        char at[96];
        printf("worst element of %s: %s = %.9g, reference %.9g\n", name,
               cmp_index_str(&ref[first_bad], bad.worst, at, sizeof at),
               ir_tensor_get(&compiled[first_bad], bad.worst), ir_tensor_get(&ref[first_bad], bad.worst));
    }
    return first_bad;
}

/* Compiles o->onnx into a temporary .so with the compile command's own
 * function, for batches up to max_batch; o->so names it after. */
static int compile_temp(cmp_opts *o, int64_t max_batch, char *so, size_t n)
{
    int st = cmp_temp_path(o, "model.so", so, n);
    if (st)
        return st;
    cg_options opt = {.output = so, .max_batch = max_batch, .opt_level = 3};
    printf("compiling %s for batches 1 to %lld\n", o->onnx, (long long)max_batch);
    fflush(stdout);
    if ((st = cli_compile(o->onnx, &opt)) == VITC_OK)
        o->so = so;
    return st;
}

int cmd_compare(int argc, char **argv)
{
    cmp_opts o = {.tol = {.rtol = 1e-4, .atol = 0}};
    int status = parse_args(argc, argv, &o);
    if (status)
        return status;
    vitc_model *m = NULL;
    ir_graph *g = NULL;
    ir_tensor *inputs = NULL, *ref = NULL, *compiled = NULL;
    char temp_so[512];
    if (o.so && (status = cli_rt_load(o.so, &m)) != VITC_OK)
        goto done;
    if (!(g = cli_load_model(o.onnx, &status)))
        goto done;
    inputs = calloc((size_t)g->ninputs + 1, sizeof *inputs);
    ref = calloc((size_t)g->noutputs + 1, sizeof *ref);
    compiled = calloc((size_t)g->noutputs + 1, sizeof *compiled);
    if (!inputs || !ref || !compiled) {
        status = VITC_INTERNAL;
        goto done;
    }
    int64_t batch = o.batch;
    if (o.nspecs) {
        status = cli_load_inputs(g, o.specs, o.nspecs, inputs);
        batch = cmp_batch_of(g, inputs);
        if (status == VITC_OK)
            printf("inputs: %d file%s given, batch %lld\n", o.nspecs, o.nspecs == 1 ? "" : "s", (long long)batch);
    } else {
        if (!batch) /* 2 exercises the batch dimension, where the model allows it */
            batch = depends_on_batch(g) && (!m || vitc_model_max_batch(m) >= 2) ? 2 : 1;
        status = random_inputs(g, batch, o.seed, inputs);
        if (status == VITC_OK)
            printf("inputs: seeded random normal (seed %llu), batch %lld\n", (unsigned long long)o.seed,
                   (long long)batch);
    }
    if (status)
        goto done;
    if (!m && ((status = compile_temp(&o, batch < 1 ? 1 : batch, temp_so, sizeof temp_so)) != VITC_OK ||
               (status = cli_rt_load(o.so, &m)) != VITC_OK))
        goto done;
    if (strcmp(vitc_model_target(m), "cuda") == 0) { /* fp16/bf16 on the GPU: DESIGN.md's tolerance */
        if (!o.rtol_given)
            o.tol.rtol = 1e-2;
        o.tol.min_cosine = 0.9999;
    }
    vitc_diag d;
    vitc_diag_init(&d, o.onnx);
    if ((status = ir_interpret(g, inputs, ref, NULL, NULL, &d)) != VITC_OK)
        goto done;
    printf("tolerance: max|out - ref| <= %g + %g * max|ref|", o.tol.atol, o.tol.rtol);
    if (o.tol.min_cosine > 0)
        printf(", cosine >= %g", o.tol.min_cosine);
    printf("\nreference: interpreter on %s; compiled: %s\n", o.onnx, o.so);
    if ((status = run_compiled(&o, m, g, inputs, compiled)) != VITC_OK)
        goto done;
    int failing = report(&o, g, compiled, ref);
    status = failing < 0 ? VITC_OK : VITC_CHECK_FAILED;
    if (o.bisect) {
        int st = failing >= 0 ? cmp_bisect_nodes(g, &o, inputs, failing) : VITC_OK;
        if (st == VITC_OK)
            st = cmp_bisect_passes(g, &o, inputs, ref); /* last: the passes change g */
        if (st != VITC_OK)
            status = st;
    }
done:
    for (int i = 0; g && inputs && i < g->ninputs; i++)
        ir_tensor_free(&inputs[i]);
    for (int i = 0; g && ref && i < g->noutputs; i++)
        ir_tensor_free(&ref[i]);
    for (int i = 0; g && compiled && i < g->noutputs; i++)
        ir_tensor_free(&compiled[i]);
    free(inputs);
    free(ref);
    free(compiled);
    ir_graph_free(g);
    vitc_model_free(m);
    cmp_temp_cleanup(&o);
    return status;
}
