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

enum { K_MAX_REL = 256, K_RTOL, K_ATOL, K_SHAPES };

static const cli_option compare_options[] = {
    {"input", 'i', "[NAME=]FILE.npy",
     "An input, by name or in the model's input order; without any, seeded random normal inputs.",
     .store = CLI_TAKE},
    {"max-rel", K_MAX_REL, "R",
     "The norm-wise check: max|out - ref| <= R * max|ref| (default 1e-4; for CUDA models by precision: tf32 1e-3, "
     "bf16 and fp16 1e-2 and cosine >= 0.9999; likewise for CPU models compiled with --precision bf16; CPU models "
     "compiled with --precision int8: 1e-1 and cosine >= 0.999).",
     .store = CLI_TAKE},
    {"rtol", K_RTOL, "R",
     "Element-wise check as numpy's allclose: |out - ref| <= atol + rtol * |ref| for every element (rtol default "
     "1e-5 once --atol is given); replaces the norm-wise check unless --max-rel is given too.",
     .store = CLI_TAKE},
    {"atol", K_ATOL, "A", "The element-wise check's absolute term (default 1e-8 once --rtol is given).",
     .store = CLI_TAKE},
    {"reference", 0, "interpreter|onnxruntime|ort",
     "What to compare against: vitc's reference interpreter (default) or ONNX Runtime ('ort' for short) through "
     "Python ($VITC_PYTHON, else python3, which must import onnxruntime and numpy).",
     .store = CLI_CHOICE, .at = offsetof(cmp_opts, reference)},
    {"bisect", 0, NULL,
     "For a failing model, name the first tensor where it parts from the reference (cuts of the graph compiled for "
     "the model's target and precision) and the first pass after which the interpreted graph moves.",
     .store = CLI_FLAG, .at = offsetof(cmp_opts, bisect)},
    {"shapes", K_SHAPES, "[NAME=]S",
     "For a model exported with a dynamic image size and random inputs: the input shape to compare at (e.g. "
     "Bx3x336x336; once per input for several).  With --input files, their shapes.",
     .store = CLI_TAKE},
    {"batch", 0, "N", "The batch of the random inputs (default 2 where the model has a batch).", .store = CLI_COUNT,
     .at = offsetof(cmp_opts, batch), .lo = 1, .hi = 65536},
    {"seed", 0, "S", "The seed of the random inputs (default 0).", .store = CLI_COUNT,
     .at = offsetof(cmp_opts, seed), .lo = 0, .hi = INT64_MAX},
    {"threads", 0, "N", "Threads for the compiled model (default 0: one per core).", .store = CLI_COUNT,
     .at = offsetof(cmp_opts, nthreads), .lo = 0, .hi = 1024},
    {"json", 0, NULL, "Print the result as one JSON object instead of the table.", .store = CLI_FLAG,
     .at = offsetof(cmp_opts, json)},
    {0},
};

const cli_command cli_compare_command = {
    "compare",
    "vitc compare MODEL.onnx [MODEL.so] [--input [NAME=]FILE.npy ...] [--max-rel R]\n"
    "                        [--rtol R] [--atol A] [--reference interpreter|onnxruntime] [--bisect]\n"
    "                        [--shapes [NAME=]S] [--batch N] [--seed S] [--threads N] [--json]",
    "Run the compiled model (without MODEL.so, one compiled into a temporary file) and a reference on the\n"
    "same inputs, and print per output the max abs error, max rel error (max|out-ref|/max|ref|), cosine\n"
    "and PASS/FAIL; exit 1 when an output is beyond tolerance. A MODEL.so compiled from another model is\n"
    "refused.",
    compare_options,
    cmd_compare,
};

/* A tolerance: a number >= 0 into *out, remembering that it was given. */
static int take_tolerance(const char *option, const char *v, double *out, int *given)
{
    char *end;
    *out = strtod(v, &end);
    if (!*v || *end || !isfinite(*out) || *out < 0)
        return cli_usage_error("compare: --%s takes a number >= 0, not '%s'", option, v);
    *given = 1;
    return VITC_OK;
}

/* The models, the --input files and the tolerances; cli_parse stores the
 * other options. */
static int take_compare(void *ctx, int key, const char *v)
{
    cmp_opts *o = ctx;
    switch (key) {
    case CLI_POSITIONAL:
        if (!o->onnx)
            o->onnx = v;
        else if (!o->so)
            o->so = v;
        else
            return cli_usage_error("compare: more than two models given");
        return VITC_OK;
    case 'i':
        if (o->nspecs == CMP_MAX_INPUTS)
            return cli_usage_error("compare: too many --input options");
        o->specs[o->nspecs++] = (char *)v;
        return VITC_OK;
    case K_MAX_REL:
        return take_tolerance("max-rel", v, &o->tol.max_rel, &o->max_rel_given);
    case K_RTOL:
        return take_tolerance("rtol", v, &o->tol.rtol, &o->rtol_given);
    case K_ATOL:
        return take_tolerance("atol", v, &o->tol.atol, &o->atol_given);
    case K_SHAPES:
        return cli_shapes_add(&o->shapes, v);
    }
    return VITC_INTERNAL;
}

static int parse_args(int argc, char **argv, cmp_opts *o)
{
    int st = cli_parse(&cli_compare_command, argc, argv, take_compare, o);
    if (st != VITC_OK)
        return st;
    if (!o->onnx)
        return cli_usage_error("compare: no model given");
    if (!cli_is_onnx(o->onnx))
        return cli_usage_error("compare: '%s' is not an .onnx model (usage: vitc compare MODEL.onnx [MODEL.so])",
                               o->onnx);
    if (o->so && cli_is_onnx(o->so))
        return cli_usage_error("compare: the second model '%s' must be a compiled .so", o->so);
    if (o->nspecs && o->batch)
        return cli_usage_error("compare: --batch is for random inputs; the --input files fix the batch");
    if (o->json && o->bisect)
        return cli_usage_error("compare: --bisect prints a report of its own; it does not combine with --json");
    if (o->reference && strcmp(o->reference, "ort") == 0)
        o->reference = "onnxruntime";
    if (o->shapes.nvariants && o->nspecs)
        return cli_usage_error("compare: --shapes is for random inputs; the --input files give the shapes");
    if ((st = cli_shapes_check(&o->shapes, "compare: ", 1)) != VITC_OK)
        return st;
    if (o->nspecs && (st = cli_input_shapes(o->specs, o->nspecs, &o->shapes)) != VITC_OK)
        return st;
    o->tol.elementwise = o->rtol_given || o->atol_given;
    if (o->tol.elementwise && !o->rtol_given)
        o->tol.rtol = 1e-5; /* numpy's defaults */
    if (o->tol.elementwise && !o->atol_given)
        o->tol.atol = 1e-8;
    if (o->tol.elementwise && !o->max_rel_given)
        o->tol.max_rel = INFINITY;
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
                return cli_error("%s: input '%s' has no size at batch %lld", g->path, v->name, (long long)batch);
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

/* The result as JSON; returns the index of the first output beyond tolerance, or -1. */
static int report_json(const cmp_opts *o, const ir_graph *g, const ir_tensor *compiled, const ir_tensor *ref,
                       int64_t batch, const char *ref_what)
{
    json_w w = {.f = stdout};
    json_object(&w, NULL);
    json_str(&w, "model", o->onnx);
    json_str(&w, "compiled", o->so);
    json_str(&w, "reference", ref_what);
    json_object(&w, "inputs");
    json_int(&w, "batch", batch);
    if (o->nspecs) {
        json_array(&w, "files");
        for (int i = 0; i < o->nspecs; i++)
            json_str(&w, NULL, o->specs[i]);
        json_end_array(&w);
    } else {
        json_int(&w, "seed", o->seed);
    }
    json_end_object(&w);
    json_object(&w, "tolerance");
    json_num(&w, "max_rel", o->tol.max_rel);
    if (o->tol.elementwise) {
        json_num(&w, "rtol", o->tol.rtol);
        json_num(&w, "atol", o->tol.atol);
    }
    if (o->tol.min_cosine > 0)
        json_num(&w, "min_cosine", o->tol.min_cosine);
    json_end_object(&w);
    json_array(&w, "outputs");
    int first_bad = -1;
    for (int i = 0; i < g->noutputs; i++) {
        cmp_metrics m;
        cmp_measure(&compiled[i], &ref[i], &o->tol, &m);
        int ok = cmp_passes(&m, &o->tol);
        char at[96];
        json_object(&w, NULL);
        cli_tensor_json_members(&w, g->values[g->outputs[i]].name, &ref[i]);
        if (m.shape_mismatch)
            cli_json_shape(&w, "compiled_shape", &compiled[i]);
        json_num(&w, "max_abs", m.max_abs);
        json_num(&w, "max_rel", m.max_rel);
        json_num(&w, "cosine", m.cosine);
        json_str(&w, "worst_at", m.worst >= 0 ? cmp_index_str(&ref[i], m.worst, at, sizeof at) : NULL);
        json_int(&w, "nonfinite", m.nonfinite);
        if (o->tol.elementwise)
            json_int(&w, "beyond_elementwise", m.beyond);
        json_int(&w, "elements", m.count);
        json_bool(&w, "pass", ok);
        json_end_object(&w);
        if (!ok && first_bad < 0)
            first_bad = i;
    }
    json_end_array(&w);
    json_bool(&w, "pass", first_bad < 0);
    json_end_object(&w);
    return first_bad;
}

/* Prints the table; returns the index of the first output beyond tolerance, or -1. */
/* Nodes of g that round a computed tensor to an integer grid. */
static int rounding_nodes(const ir_graph *g)
{
    int count = 0;
    for (int i = 0; i < g->nnodes; i++) {
        ir_op op = g->nodes[i].op;
        count += op == IR_OP_QUANTIZE_LINEAR || op == IR_OP_DYNAMIC_QUANTIZE_LINEAR || op == IR_OP_QLINEAR_ADD ||
                 op == IR_OP_QLINEAR_CONCAT || op == IR_OP_QLINEAR_CONV || op == IR_OP_QLINEAR_MATMUL ||
                 op == IR_OP_QLINEAR_MUL || op == IR_OP_QLINEAR_SOFTMAX;
    }
    return count;
}

static int report(const cmp_opts *o, const ir_graph *g, const ir_tensor *compiled, const ir_tensor *ref)
{
    printf("%-20s %-20s %-10s %-10s %-12s %-16s %s\n", "output", "shape", "max_abs", "max_rel", "cosine", "worst at",
           "result");
    int first_bad = -1;
    cmp_metrics bad = {0};
    for (int i = 0; i < g->noutputs; i++) {
        cmp_metrics m;
        cmp_measure(&compiled[i], &ref[i], &o->tol, &m);
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
        else if (o->tol.elementwise && m.beyond)
            printf("  %lld of %lld elements beyond the element-wise tolerance\n", (long long)m.beyond,
                   (long long)m.count);
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
    int rounds = rounding_nodes(g);
    if (rounds)
        printf("note: %s rounds computed tensors to integer steps (%d QuantizeLinear, DynamicQuantizeLinear or "
               "QLinear nodes):\n  a value on the boundary between two steps rounds either way with the order of "
               "the sums before it,\n  a whole step apart, so such a model can miss a tight bar without being "
               "wrong; --max-rel,\n  --rtol and --atol set the bar, --bisect shows where the outputs part\n",
               o->onnx, rounds);
    return first_bad;
}

/* Compiles o->onnx into a temporary .so with the compile command's own
 * function, for batches up to max_batch; o->so names it after. */
static int compile_temp(cmp_opts *o, int64_t max_batch, char *so, size_t n)
{
    int st = cmp_temp_path(o, "model.so", so, n);
    if (st)
        return st;
    cg_options opt = {.output = so, .max_batch = max_batch, .opt_level = 3, .verbose = -1}; /* compare says what it compiles */
    FILE *info = o->json ? stderr : stdout;
    fprintf(info, "compiling %s for batches 1 to %lld\n", o->onnx, (long long)max_batch);
    fflush(info);
    if ((st = cli_compile(o->onnx, &opt, o->shapes.nvariants ? &o->shapes : NULL)) == VITC_OK)
        o->so = so;
    return st;
}

ir_graph *cmp_load_model(const cmp_opts *o, int *status)
{
    cli_load_opts lo = {.shapes = o->shapes.v[0], .nshapes = o->shapes.nvariants ? o->shapes.ninputs : 0,
                        .shapes_from_inputs = o->shapes.from_inputs};
    return cli_load_model_with(o->onnx, &lo, status);
}

int cmd_compare(int argc, char **argv)
{
    cmp_opts o = {.tol = {.max_rel = 1e-4}};
    int status = parse_args(argc, argv, &o);
    if (status)
        return status == CLI_HELP_SHOWN ? VITC_OK : status;
    FILE *info = o.json ? stderr : stdout; /* what is not the result */
    vitc_model *m = NULL;
    ir_graph *g = NULL;
    ir_tensor *inputs = NULL, *ref = NULL, *compiled = NULL;
    char temp_so[512];
    if (o.so && (status = cli_rt_load(o.so, &m)) != VITC_OK)
        goto done;
    if (!(g = cmp_load_model(&o, &status)))
        goto done;
    if (m) { /* the .so must come from this very file (its bytes' hash, recorded at compile time) */
        vitc_model_details md;
        vitc_model_get_details(m, &md);
        if (md.source_hash && md.source_hash != g->source_hash) {
            fflush(stdout);
            fprintf(stderr, "vitc: compare: %s was compiled from a different model than %s (it records %s with "
                            "hash %016llx; this file's is %016llx)\n", o.so, o.onnx, md.source,
                    (unsigned long long)md.source_hash, (unsigned long long)g->source_hash);
            status = VITC_BAD_INPUT;
            goto done;
        }
        if (!md.source_hash)
            fprintf(info, "note: %s records no model hash (an older vitc made it); not checked against %s\n", o.so,
                    o.onnx);
    }
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
            fprintf(info, "inputs: %d file%s given, batch %lld\n", o.nspecs, o.nspecs == 1 ? "" : "s",
                    (long long)batch);
    } else {
        if (!batch) /* 2 exercises the batch dimension, where the model allows it */
            batch = depends_on_batch(g) && (!m || vitc_model_max_batch(m) >= 2) ? 2 : 1;
        status = random_inputs(g, batch, (uint64_t)o.seed, inputs);
        if (status == VITC_OK)
            fprintf(info, "inputs: seeded random normal (seed %llu), batch %lld\n", (unsigned long long)o.seed,
                    (long long)batch);
    }
    if (status)
        goto done;
    if (!m && ((status = compile_temp(&o, batch < 1 ? 1 : batch, temp_so, sizeof temp_so)) != VITC_OK ||
               (status = cli_rt_load(o.so, &m)) != VITC_OK))
        goto done;
    /* the model's arithmetic: DESIGN.md's tolerance by precision; --bisect compiles its cuts alike */
    const char *prec = vitc_model_precision(m);
    if (!(o.backend = cg_backend_named(vitc_model_target(m)))) {
        fprintf(stderr, "vitc: compare: %s is a model for target '%s', which this vitc does not know\n", o.so,
                vitc_model_target(m));
        status = VITC_BAD_INPUT;
        goto done;
    }
    if (o.backend != &cg_llvm_backend || strcmp(prec, "fp32") != 0) {
        snprintf(o.precision, sizeof o.precision, "%s", prec);
        int half = strcmp(prec, "bf16") == 0 || strcmp(prec, "fp16") == 0, int8 = strcmp(prec, "int8") == 0;
        if (!o.max_rel_given && !o.tol.elementwise)
            o.tol.max_rel = int8 ? 1e-1 : half ? 1e-2 : strcmp(prec, "tf32") == 0 ? 1e-3 : 1e-4;
        if (half || int8)
            o.tol.min_cosine = int8 ? 0.999 : 0.9999;
    }
    char ref_what[96] = "interpreter";
    if (o.reference && strcmp(o.reference, "onnxruntime") == 0) {
        char version[64];
        if ((status = cmp_reference_ort(&o, g, inputs, ref, version, sizeof version)) != VITC_OK)
            goto done;
        snprintf(ref_what, sizeof ref_what, "onnxruntime %s", version);
    } else {
        vitc_diag d;
        vitc_diag_init(&d, o.onnx);
        if ((status = ir_interpret(g, inputs, ref, NULL, NULL, &d)) != VITC_OK)
            goto done;
    }
    fprintf(info, "tolerance:");
    if (o.tol.max_rel < INFINITY)
        fprintf(info, " max|out - ref| <= %g * max|ref|%s", o.tol.max_rel, o.tol.elementwise ? ";" : "");
    if (o.tol.elementwise)
        fprintf(info, " |out - ref| <= %g + %g * |ref| element-wise", o.tol.atol, o.tol.rtol);
    if (o.tol.min_cosine > 0)
        fprintf(info, ", cosine >= %g", o.tol.min_cosine);
    fprintf(info, "\nreference: %s on %s; compiled: %s\n", ref_what, o.onnx, o.so);
    if ((status = run_compiled(&o, m, g, inputs, compiled)) != VITC_OK)
        goto done;
    int failing = o.json ? report_json(&o, g, compiled, ref, batch, ref_what) : report(&o, g, compiled, ref);
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
