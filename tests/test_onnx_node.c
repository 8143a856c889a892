/* test_onnx_node.c: ONNX's own backend node tests (Debian's libonnx-testdata,
 * directory in env VITC_ONNX_NODE_TESTS) through the frontend, shape
 * inference and the reference interpreter.
 *
 * Each test is DIR/model.onnx with DIR/test_data_set_N/{input,output}_K.pb.
 * A model the importer rejects as unsupported (op, dtype, attribute, opset <
 * 13) or that the interpreter does not implement is skipped; if all of its ops
 * are in ops.def it is also listed by name with the reason.  Everything else
 * must import, infer shapes that match what the interpreter produces (every
 * node output), and match the expected outputs within ONNX's backend-test
 * tolerance |out - ref| <= 1e-7 + 1e-3 |ref| (NaN matching NaN, integers and
 * bools exactly).  One line per failure, then a summary line:
 *   ONNX node tests: R ran, P passed, F failed, S skipped (unsupported)
 * R must be ONNX_NODE_RAN (committed below) on the test data it was counted
 * on: a newly refused op fails the test.  On another release of the data
 * (another number of tests) the counts are not checked and ctest reports the
 * test skipped, saying so.
 *
 * Two adaptations keep the ops testable, and the summary counts them:
 * - vitc needs shapes at compile time, but many tests feed shapes, axes or
 *   split sizes as graph inputs.  When shape inference refuses a model, its
 *   integer inputs (then, failing that, all inputs) are baked in as constants
 *   holding the data set's values, as they are in an exported model.
 * - A test written for an opset below 13 whose ops all kept their semantics
 *   up to 13 (stable_ops) runs with its opset import raised to 13.
 * And three quirks of ONNX 1.12's data are allowed for: bfloat16 tensors
 * stored as uint16, bfloat16 references made by truncation (we round to
 * nearest even: one unit away from zero is accepted), and the tests in
 * broken_tests below. */
#include "testutil.h"

#include "frontend/onnx.h"
#include "ir/interp.h"
#include "onnx.pb-c.h" /* only to name the ops of a model the importer rejects */

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ATOL 1e-7
#define RTOL 1e-3

/* Tests skipped, with the reason: first those no correct implementation can
 * pass, then those vitc refuses by design. */
static const struct {
    const char *name, *why;
} broken_tests[] = {
    {"test_training_dropout", "its expected output is a random draw"},
    {"test_training_dropout_default", "its expected output is a random draw"},
    {"test_training_dropout_default_mask", "its expected output is a random draw"},
    {"test_training_dropout_mask", "its expected output is a random draw"},
    {"test_castlike_BFLOAT16_to_FLOAT", "the model declares input 'like' f32[3,4] but the data set gives f32[1]"},
    {"test_castlike_BFLOAT16_to_FLOAT_expanded", "the model declares input 'like' f32[3,4] but the data set gives f32[1]"},
    {"test_castlike_FLOAT_to_BFLOAT16", "the model declares input 'like' bf16[3,4] but the data set gives bf16[1]"},
    {"test_castlike_FLOAT_to_BFLOAT16_expanded", "the model declares input 'like' bf16[3,4] but the data set gives bf16[1]"},
    {"test_blackmanwindow_expanded", "the window's length is a float computed from an input, and Range needs its bounds at compile time"},
    {"test_blackmanwindow_symmetric_expanded", "the window's length is a float computed from an input, and Range needs its bounds at compile time"},
    {"test_hammingwindow_expanded", "the window's length is a float computed from an input, and Range needs its bounds at compile time"},
    {"test_hammingwindow_symmetric_expanded", "the window's length is a float computed from an input, and Range needs its bounds at compile time"},
    {"test_hannwindow_expanded", "the window's length is a float computed from an input, and Range needs its bounds at compile time"},
    {"test_hannwindow_symmetric_expanded", "the window's length is a float computed from an input, and Range needs its bounds at compile time"},
    {NULL, NULL},
};

typedef struct {
    int ran, passed, failed, skipped;
    int baked;    /* passed with inputs baked in as constants */
    int upgraded; /* passed with their opset raised to 13 */
    int op_ran[IR_OP_COUNT], op_passed[IR_OP_COUNT];
    char *opset_rejected; /* names of supported-op tests refused for their opset */
    size_t opset_len;
    FILE *opset_f;
} totals;

/* Ops whose semantics (as the interpreter implements them) are the same from
 * opset `since` to 13, so that a test written for an older opset still tests
 * them when its opset import is raised to 13 (Resize-10 read scales as its
 * second input; from 11 it has roi there, as at 13). */
static const struct {
    const char *op;
    int since;
} stable_ops[] = {{"Conv", 1},     {"ConstantOfShape", 1}, {"Einsum", 1},   {"Range", 1},
                  {"Not", 1},      {"And", 1},             {"Or", 1},       {"Pow", 1},
                  {"Constant", 1}, {"HardSigmoid", 1},     {"IsNaN", 1},    {"Resize", 11},
                  {"Cos", 7},      {"Sin", 7},             {"If", 1},
                  /* the quantized ops: opset 13 gave Q/DQ an axis for 1-D scales, which
                   * opset 10 did not take (its scales are scalars, read alike) */
                  {"QuantizeLinear", 10}, {"DequantizeLinear", 10}, {"DynamicQuantizeLinear", 11},
                  {"MatMulInteger", 10},  {"ConvInteger", 10},      {"QLinearMatMul", 10},
                  {"QLinearConv", 10},
                  /* and what DynamicQuantizeLinear's expanded tests (opset 11) are made of */
                  {"Round", 11},          {"ReduceMin", 11},        {"ReduceMax", 11},
                  {"Min", 8},             {"Max", 8},               {"Sub", 7},
                  {"Div", 7},             {"Clip", 11},             {"Cast", 9},
                  {"Identity", 1},
                  {NULL, 0}};

static int is_stable_op(const char *op, int opset)
{
    for (int i = 0; stable_ops[i].op; i++)
        if (strcmp(stable_ops[i].op, op) == 0)
            return opset >= stable_ops[i].since;
    return 0;
}

/* What the model file says, read straight from the protobuf (the importer may
 * have refused it). */
typedef struct {
    int64_t opset;
    int nops, all_in_table;
    int upgradable; /* opset < 13, and every op is one whose semantics did not change up to 13 */
    char ops[32][64]; /* distinct op_types */
    int op_ids[32];
} model_info;

static void read_model_info(const char *path, model_info *mi)
{
    memset(mi, 0, sizeof *mi);
    mi->opset = -1;
    FILE *f = fopen(path, "rb");
    if (!f)
        return;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)(len > 0 ? len : 1));
    size_t got = buf ? fread(buf, 1, (size_t)len, f) : 0;
    fclose(f);
    Onnx__ModelProto *m = got == (size_t)len ? onnx__model_proto__unpack(NULL, got, buf) : NULL;
    free(buf);
    if (!m)
        return;
    for (size_t i = 0; i < m->n_opset_import; i++)
        if (!m->opset_import[i]->domain || !*m->opset_import[i]->domain)
            mi->opset = m->opset_import[i]->version;
    mi->all_in_table = m->graph != NULL;
    mi->upgradable = m->graph != NULL && mi->opset >= 0 && mi->opset < ONNX_MIN_OPSET;
    for (size_t i = 0; m->graph && i < m->graph->n_node; i++) {
        const Onnx__NodeProto *np = m->graph->node[i];
        const char *op = np->op_type ? np->op_type : "";
        int id = np->domain && *np->domain ? -1 : ir_op_from_onnx(op), seen = 0;
        if (id < 0)
            mi->all_in_table = 0;
        if (id < 0 || !is_stable_op(op, mi->opset))
            mi->upgradable = 0;
        for (int k = 0; k < mi->nops; k++)
            seen |= strcmp(mi->ops[k], op) == 0;
        if (!seen && mi->nops < 32) {
            snprintf(mi->ops[mi->nops], sizeof mi->ops[0], "%s", op);
            mi->op_ids[mi->nops++] = id;
        }
    }
    onnx__model_proto__free_unpacked(m, NULL);
}

/* The first line of a diagnostic text, without the "FILE: " prefix. */
static const char *first_line(char *text, const char *file)
{
    if (!text)
        return "";
    char *nl = strchr(text, '\n');
    if (nl)
        *nl = 0;
    size_t n = strlen(file);
    if (strncmp(text, file, n) == 0 && text[n] == ':' && text[n + 1] == ' ')
        return text + n + 2;
    return text;
}

/* Checks every node output against what shape inference said about it. */
typedef struct {
    int64_t batch;
    char msg[512];
} shape_check;

static void observe(void *ctx, const ir_graph *g, int node, int value, const ir_tensor *t)
{
    shape_check *sc = ctx;
    const ir_value *v = &g->values[value];
    if (sc->msg[0])
        return;
    int ok = v->rank == t->rank && v->dtype == t->dtype;
    for (int i = 0; ok && i < t->rank; i++)
        ok = ir_dim_eval(v->dims[i], sc->batch) == t->dims[i];
    if (!ok) {
        char want[256], got[256];
        size_t off = (size_t)snprintf(got, sizeof got, "%s[", ir_dtype_name(t->dtype));
        for (int i = 0; i < t->rank && off < sizeof got; i++)
            off += (size_t)snprintf(got + off, sizeof got - off, "%s%lld", i ? "," : "", (long long)t->dims[i]);
        if (off < sizeof got)
            snprintf(got + off, sizeof got - off, "]");
        snprintf(sc->msg, sizeof sc->msg, "value '%s' of node %d (%s): shape inference says %s, the interpreter made %s",
                 v->name, node, g->nodes[node].op_type, ir_value_type_str(v, want, sizeof want), got);
    }
}

/* The batch the interpreter derives: the first k*B dimension of an input. */
static int64_t derive_batch(const ir_graph *g, const ir_tensor *in)
{
    for (int i = 0; i < g->ninputs; i++) {
        const ir_value *v = &g->values[g->inputs[i]];
        for (int j = 0; j < v->rank && j < in[i].rank; j++)
            if (v->dims[j].e == 1 && v->dims[j].k > 0 && in[i].dims[j] > 0)
                return in[i].dims[j] / v->dims[j].k;
    }
    return 1;
}

static int shapes_equal(const ir_tensor *a, const ir_tensor *b)
{
    if (a->rank != b->rank)
        return 0;
    for (int i = 0; i < a->rank; i++)
        if (a->dims[i] != b->dims[i])
            return 0;
    return 1;
}

static const char *dims_str(const ir_tensor *t, char *buf, size_t n)
{
    size_t off = (size_t)snprintf(buf, n, "%s[", ir_dtype_name(t->dtype));
    for (int i = 0; i < t->rank && off < n; i++)
        off += (size_t)snprintf(buf + off, n - off, "%s%lld", i ? "," : "", (long long)t->dims[i]);
    if (off < n)
        snprintf(buf + off, n - off, "]");
    return buf;
}

/* Compares one output; returns 0 when it matches, else writes why. */
static int compare_output(const ir_tensor *out, const ir_tensor *ref, char *why, size_t n)
{
    char a[160], b[160];
    if (out->dtype != ref->dtype || !shapes_equal(out, ref)) {
        snprintf(why, n, "got %s, expected %s", dims_str(out, a, sizeof a), dims_str(ref, b, sizeof b));
        return 1;
    }
    int64_t cnt = ir_tensor_numel(ref), bad = 0, first = -1;
    double maxdiff = 0;
    int fl = ir_dtype_is_float(ref->dtype);
    for (int64_t i = 0; i < cnt; i++) {
        int ok;
        if (fl) {
            double x = ir_tensor_get(out, i), y = ir_tensor_get(ref, i);
            double diff = fabs(x - y);
            ok = (isnan(x) && isnan(y)) || x == y || diff <= ATOL + RTOL * fabs(y);
            /* ONNX 1.12 made its bfloat16 references by truncation; vitc rounds
             * to nearest even, which may land one unit further from zero. */
            if (!ok && ref->dtype == IR_BF16) {
                uint16_t bx, by;
                memcpy(&bx, (const char *)out->data + 2 * i, 2);
                memcpy(&by, (const char *)ref->data + 2 * i, 2);
                ok = bx == by + 1 && (bx & 0x7f80) != 0x7f80;
            }
            if (!ok && !(diff <= maxdiff))
                maxdiff = diff;
        } else {
            ok = ir_tensor_get_i64(out, i) == ir_tensor_get_i64(ref, i);
        }
        if (!ok && bad++ == 0)
            first = i;
    }
    if (!bad)
        return 0;
    if (fl)
        snprintf(why, n, "%lld of %lld elements differ; element %lld is %.9g, expected %.9g (tolerance %.3g); "
                 "max |diff| %.6g", (long long)bad, (long long)cnt, (long long)first, ir_tensor_get(out, first),
                 ir_tensor_get(ref, first), ATOL + RTOL * fabs(ir_tensor_get(ref, first)), maxdiff);
    else
        snprintf(why, n, "%lld of %lld elements differ; element %lld is %lld, expected %lld", (long long)bad,
                 (long long)cnt, (long long)first, (long long)ir_tensor_get_i64(out, first),
                 (long long)ir_tensor_get_i64(ref, first));
    return 1;
}

static void note_ops(totals *t, const model_info *mi, int passed)
{
    for (int k = 0; k < mi->nops; k++) {
        int id = mi->op_ids[k];
        if (id < 0)
            continue;
        t->op_ran[id]++;
        t->op_passed[id] += passed;
    }
}

static void note_skip(totals *t, const char *name, const model_info *mi, const char *why)
{
    t->skipped++;
    if (!mi->all_in_table)
        return;
    if (mi->opset >= 0 && mi->opset < ONNX_MIN_OPSET && !mi->upgradable) {
        fprintf(t->opset_f, " %s(%lld)", name, (long long)mi->opset);
        return;
    }
    printf("SKIPPED %s (its ops are all in ops.def): %s\n", name, why);
}

static int note_fail(totals *t, const char *name, const model_info *mi, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int note_fail(totals *t, const char *name, const model_info *mi, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL %s: ", name);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    t->failed++;
    note_ops(t, mi, 0);
    return 1;
}

static int is_data_set(const struct dirent *e) { return strncmp(e->d_name, "test_data_set_", 14) == 0; }

/* ONNX 1.12's test data stores bfloat16 tensors as uint16 bit patterns. */
static void retag_bf16(ir_tensor *t, ir_dtype want)
{
    if (want == IR_BF16 && t->dtype == IR_U16)
        t->dtype = IR_BF16;
}

/* The graph input fed from file input_K.pb: file_of[i] = K (identity when
 * nothing was baked in). */
typedef struct {
    int norig;    /* input files the data set has (the model's inputs) */
    int *file_of; /* g->ninputs entries */
} input_map;

/* Shape inference needs compile-time shapes, but many node tests pass
 * shapes, axes, starts or split sizes as graph inputs.  Bakes graph inputs
 * (the integer ones, or all of them) into constants holding this data set's
 * values, as a user's exported model has them, so that the op can still be
 * tested.  Returns 0, 1 when a file does not read, 2 when there is nothing to
 * bake. */
static int bake_inputs(ir_graph *g, const char *dsdir, int all, input_map *map, vitc_diag *d)
{
    int k = 0, baked = 0;
    map->norig = g->ninputs;
    map->file_of = malloc(((size_t)g->ninputs + 1) * sizeof(int));
    for (int i = 0; i < g->ninputs; i++) {
        ir_value *v = &g->values[g->inputs[i]];
        if (!all && v->dtype != IR_I64 && v->dtype != IR_I32) {
            map->file_of[k] = i;
            g->inputs[k++] = g->inputs[i];
            continue;
        }
        char path[4600];
        ir_tensor t;
        snprintf(path, sizeof path, "%s/input_%d.pb", dsdir, i);
        if (onnx_read_tensor_file(path, &t, d))
            return 1;
        retag_bf16(&t, v->dtype);
        v->kind = IR_VAL_CONST;
        v->rank = t.rank;
        for (int j = 0; j < t.rank; j++)
            v->dims[j] = ir_dim_const(t.dims[j]);
        v->nbytes = ir_tensor_nbytes(&t);
        v->data = ir_alloc(g->arena, v->nbytes ? v->nbytes : 1);
        if (v->nbytes)
            memcpy(v->data, t.data, v->nbytes);
        ir_tensor_free(&t);
        baked++;
    }
    g->ninputs = k;
    return baked ? 0 : 2;
}

static ir_graph *import(const char *path, const char *name, int upgrade, FILE *mem, vitc_diag *d);

/* Imports the model again with inputs baked in (first the integer ones, then
 * all) until shape inference succeeds; NULL with the reasons added to why. */
static ir_graph *import_baked(const char *path, const char *name, int upgrade, const char *ds, input_map *map,
                              char *why, size_t nwhy)
{
    for (int all = 0; all < 2; all++) {
        char *text = NULL;
        size_t len = 0;
        FILE *mem = open_memstream(&text, &len);
        vitc_diag d;
        ir_graph *g = import(path, name, upgrade, mem, &d);
        int st = g ? bake_inputs(g, ds, all, map, &d) : 1;
        if (st == 0)
            st = ir_infer_shapes(g, &d);
        fflush(mem);
        if (st == 0) {
            fclose(mem);
            free(text);
            return g;
        }
        size_t used = strlen(why);
        if (st != 2 && used < nwhy)
            snprintf(why + used, nwhy - used, "; with %s inputs as constants: %s", all ? "all" : "the integer",
                     first_line(text, name));
        ir_graph_free(g);
        free(map->file_of);
        map->file_of = NULL;
        fclose(mem);
        free(text);
    }
    return NULL;
}

/* Runs one data set of a test; returns 0 when every output matches. */
static int run_data_set(totals *t, const char *name, const model_info *mi, ir_graph *g, const char *dsdir,
                        const input_map *map)
{
    char path[4600], why[1024];
    int nin = g->ninputs, nout = g->noutputs, bad = 0;
    ir_tensor *in = calloc((size_t)nin + 1, sizeof *in), *out = calloc((size_t)nout + 1, sizeof *out);
    ir_tensor *ref = calloc((size_t)nout + 1, sizeof *ref);
    char *dtext = NULL;
    size_t dlen = 0;
    FILE *mem = open_memstream(&dtext, &dlen);
    vitc_diag d;
    vitc_diag_init(&d, name);
    d.out = mem;
    for (int i = 0; i < nin && !bad; i++) {
        int file = map->file_of ? map->file_of[i] : i;
        snprintf(path, sizeof path, "%s/input_%d.pb", dsdir, file);
        if (onnx_read_tensor_file(path, &in[i], &d)) {
            fflush(mem);
            bad = note_fail(t, name, mi, "cannot read input %d: %s", file, first_line(dtext, name));
        }
        retag_bf16(&in[i], g->values[g->inputs[i]].dtype);
    }
    snprintf(path, sizeof path, "%s/input_%d.pb", dsdir, map->norig);
    if (!bad && access(path, F_OK) == 0)
        bad = note_fail(t, name, mi, "the data set has more inputs than the graph's %d", map->norig);
    for (int i = 0; i < nout && !bad; i++) {
        snprintf(path, sizeof path, "%s/output_%d.pb", dsdir, i);
        if (onnx_read_tensor_file(path, &ref[i], &d)) {
            fflush(mem);
            bad = note_fail(t, name, mi, "cannot read expected output %d: %s", i, first_line(dtext, name));
        }
    }
    shape_check sc = {.batch = bad ? 1 : derive_batch(g, in)};
    if (!bad && ir_interpret(g, in, out, observe, &sc, &d)) {
        fflush(mem);
        bad = note_fail(t, name, mi, "the interpreter failed: %s", first_line(dtext, name));
    }
    if (!bad && sc.msg[0])
        bad = note_fail(t, name, mi, "%s", sc.msg);
    for (int i = 0; i < nout && !bad; i++) {
        const ir_value *v = &g->values[g->outputs[i]];
        int ok = v->rank == out[i].rank;
        for (int j = 0; ok && j < v->rank; j++)
            ok = ir_dim_eval(v->dims[j], sc.batch) == out[i].dims[j];
        char want[256], got[256];
        retag_bf16(&ref[i], out[i].dtype);
        if (!ok)
            bad = note_fail(t, name, mi, "output %d '%s': shape inference says %s, the interpreter made %s", i, v->name,
                            ir_value_type_str(v, want, sizeof want), dims_str(&out[i], got, sizeof got));
        else if (compare_output(&out[i], &ref[i], why, sizeof why))
            bad = note_fail(t, name, mi, "output %d '%s': %s", i, v->name, why);
    }
    for (int i = 0; i < nin; i++)
        ir_tensor_free(&in[i]);
    for (int i = 0; i < nout; i++) {
        ir_tensor_free(&out[i]);
        ir_tensor_free(&ref[i]);
    }
    free(in);
    free(out);
    free(ref);
    fclose(mem);
    free(dtext);
    return bad;
}

/* Imports path with diagnostics into mem (a memstream).  With upgrade, the
 * model's default-domain opset import is raised to ONNX_MIN_OPSET first. */
static ir_graph *import(const char *path, const char *name, int upgrade, FILE *mem, vitc_diag *d)
{
    vitc_diag_init(d, name);
    d->out = mem;
    ir_graph *g = NULL;
    if (!upgrade) {
        g = onnx_import_file(path, d);
        fflush(mem);
        return g;
    }
    FILE *f = fopen(path, "rb");
    unsigned char *buf = NULL, *out = NULL;
    long len = -1;
    if (f && fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)len)) && fread(buf, 1, (size_t)len, f) == (size_t)len) {
        Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, (size_t)len, buf);
        if (m) {
            for (size_t i = 0; i < m->n_opset_import; i++) {
                Onnx__OperatorSetIdProto *o = m->opset_import[i];
                if ((!o->domain || !*o->domain) && o->version < ONNX_MIN_OPSET) {
                    o->version = ONNX_MIN_OPSET;
                    o->has_version = 1;
                }
            }
            size_t n = onnx__model_proto__get_packed_size(m);
            if ((out = malloc(n ? n : 1)))
                g = onnx_import_buffer(out, onnx__model_proto__pack(m, out), path, d);
            onnx__model_proto__free_unpacked(m, NULL);
        }
    }
    if (f)
        fclose(f);
    free(buf);
    free(out);
    if (!g && d->status == VITC_OK)
        vitc_error(d, VITC_INTERNAL, NULL, "could not rewrite the model's opset");
    fflush(mem);
    return g;
}

static void run_one(totals *t, const char *root, const char *name)
{
    char dir[4096], path[4200];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    model_info mi;
    read_model_info(path, &mi);
    for (int i = 0; broken_tests[i].name; i++)
        if (strcmp(broken_tests[i].name, name) == 0) {
            note_skip(t, name, &mi, broken_tests[i].why);
            return;
        }

    char *dtext = NULL, first[512];
    size_t dlen = 0;
    FILE *mem = open_memstream(&dtext, &dlen);
    vitc_diag d;
    struct dirent **sets = NULL;
    int nsets = 0, bad = 0, bake = 0;
    ir_graph *g = import(path, name, 0, mem, &d);
    int upgrade = 0;
    if (!g && d.status == VITC_BAD_INPUT && mi.upgradable) {
        /* Refused for its opset, but its ops are unchanged since: run it at 13. */
        rewind(mem);
        g = import(path, name, 1, mem, &d);
        upgrade = g != NULL;
    }
    if (!g && d.status == VITC_BAD_INPUT) {
        note_skip(t, name, &mi, first_line(dtext, name));
        goto done;
    }
    if (!g) {
        t->ran++;
        note_fail(t, name, &mi, "import failed with status %d: %s", d.status, first_line(dtext, name));
        goto done;
    }
    for (int i = 0; i < g->nnodes; i++) /* an If is replaced by its branch before the interpreter runs */
        if (g->nodes[i].op != IR_OP_IF && !ir_interp_supports(g, &g->nodes[i])) {
            char why[256];
            const ir_attr *eq = ir_attr_get(&g->nodes[i], IR_ATTR_EQUATION);
            snprintf(why, sizeof why, "the interpreter does not implement node %d (%s) with these attributes%s%s%s", i,
                     g->nodes[i].op_type, eq ? " (equation '" : "", eq && eq->s ? eq->s : "", eq ? "')" : "");
            note_skip(t, name, &mi, why);
            goto done;
        }
    t->ran++;
    if (ir_infer_shapes(g, &d)) {
        fflush(mem);
        snprintf(first, sizeof first, "%s", first_line(dtext, name));
        bake = 1;
    }
    nsets = scandir(dir, &sets, is_data_set, alphasort);
    if (nsets <= 0) {
        note_fail(t, name, &mi, "no test_data_set_* directory");
        goto done;
    }
    for (int i = 0; i < nsets && !bad; i++) {
        char ds[4400];
        snprintf(ds, sizeof ds, "%s/%s", dir, sets[i]->d_name);
        input_map map = {.norig = g->ninputs, .file_of = NULL};
        ir_graph *run = g;
        if (bake) {
            char why[2048];
            snprintf(why, sizeof why, "%s", first);
            if (!(run = import_baked(path, name, upgrade, ds, &map, why, sizeof why)))
                bad = note_fail(t, name, &mi, "shape inference failed: %s", why);
        }
        if (!bad)
            bad = run_data_set(t, name, &mi, run, ds, &map);
        if (run && run != g)
            ir_graph_free(run);
        free(map.file_of);
    }
    if (!bad) {
        t->passed++;
        t->baked += bake;
        t->upgraded += upgrade;
        note_ops(t, &mi, 1);
    }
done:
    for (int i = 0; i < nsets; i++)
        free(sets[i]);
    free(sets);
    ir_graph_free(g);
    fclose(mem);
    free(dtext);
}

static int is_test_dir(const struct dirent *e) { return strncmp(e->d_name, "test_", 5) == 0; }

/* The counts this suite gives on Debian's libonnx-testdata of ONNX_NODE_TESTS
 * tests, committed so that an op the importer or the interpreter stops
 * supporting fails here instead of turning into one more "skipped".  When a
 * change makes more tests run, raise ONNX_NODE_RAN to the count printed. */
#define ONNX_NODE_TESTS 932
#define ONNX_NODE_RAN 428

static void test_onnx_node_tests_pass(void **state)
{
    (void)state;
    const char *root = getenv("VITC_ONNX_NODE_TESTS");
    if (!root || !*root)
        root = "/usr/share/libonnx-testdata/data/node";
    struct dirent **names;
    int n = scandir(root, &names, is_test_dir, alphasort);
    if (n <= 0) {
        printf("no ONNX node tests in %s (install libonnx-testdata)\n", root);
        tu_skip();
    }
    totals t;
    memset(&t, 0, sizeof t);
    t.opset_f = open_memstream(&t.opset_rejected, &t.opset_len);
    for (int i = 0; i < n; i++) {
        run_one(&t, root, names[i]->d_name);
        free(names[i]);
    }
    free(names);
    fclose(t.opset_f);
    if (t.opset_len)
        printf("SKIPPED for opset < 13 (ops all in ops.def):%s\n", t.opset_rejected);
    free(t.opset_rejected);
    printf("per-op passed/ran (a test counts for each op in it):");
    for (int op = 0; op < IR_OP_COUNT; op++)
        if (t.op_ran[op])
            printf(" %s %d/%d", ir_op_name((ir_op)op), t.op_passed[op], t.op_ran[op]);
    printf("\n");
    printf("(%d of the passed tests ran with inputs baked in as constants, since shape inference needs shapes "
           "and axes at compile time)\n", t.baked);
    printf("(%d of the passed tests were written for opset < 13 and ran with their opset raised to 13: their ops "
           "did not change since)\n", t.upgraded);
    printf("ONNX node tests: %d ran, %d passed, %d failed, %d skipped (unsupported)\n", t.ran, t.passed, t.failed,
           t.skipped);
    fflush(stdout);
    if (t.failed)
        fail_msg("%d of %d ONNX node tests failed", t.failed, t.ran);
    if (n != ONNX_NODE_TESTS) {
        /* another release of the test data: its counts are not committed */
        printf("%s holds %d tests, not the %d whose counts are committed (%d ran): the ran count is not checked\n",
               root, n, ONNX_NODE_TESTS, ONNX_NODE_RAN);
        tu_skip();
    }
    if (t.ran != ONNX_NODE_RAN)
        fail_msg("%d ONNX node tests ran, %d expected (ONNX_NODE_RAN): %s", t.ran, ONNX_NODE_RAN,
                 t.ran < ONNX_NODE_RAN ? "a test that ran is now refused (the SKIPPED lines above name those whose ops are all in ops.def)"
                                       : "more run now: raise ONNX_NODE_RAN in tests/test_onnx_node.c");
    assert_int_equal(t.passed, ONNX_NODE_RAN);
    assert_int_equal(t.skipped, ONNX_NODE_TESTS - ONNX_NODE_RAN);
}

TU_MAIN(NULL, NULL, test_onnx_node_tests_pass)
