/* cmd_inspect.c: `vitc inspect MODEL.so`, what a compiled model says about
 * itself: the ONNX file it came from, the vitc and ABI that made it, its
 * target, inputs and outputs with the batch B, the batch limit, the memory a
 * context takes, its weights (embedded or in a file beside it) and kernels;
 * for a CUDA model also its precision and the GPU targets it carries code for;
 * the VITC_* environment variables that changed its code when it was
 * compiled (codegen/knobs.def).
 * The file is read as data (vitc_model_read), never loaded: inspecting a
 * file runs none of its code. */
#include "tools/cli.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static int num_tensors(const vitc_model *m, int outputs)
{
    return outputs ? vitc_model_num_outputs(m) : vitc_model_num_inputs(m);
}

/* Output (outputs 1) or input i of m's input shape s (0: the first, or only). */
static vitc_tensor_info shape_info(const vitc_model *m, int s, int outputs, int i)
{
    vitc_tensor_info info;
    if (outputs)
        vitc_model_shape_output(m, s, i, &info);
    else
        vitc_model_shape_input(m, s, i, &info);
    return info;
}

static vitc_tensor_info tensor_info(const vitc_model *m, int outputs, int i) { return shape_info(m, 0, outputs, i); }

/* 1 if an input or output of m has a dimension in terms of the batch. */
static int any_batch_dim(const vitc_model *m)
{
    for (int out = 0; out < 2; out++)
        for (int i = 0; i < num_tensors(m, out); i++) {
            vitc_tensor_info info = tensor_info(m, out, i);
            for (int k = 0; k < info.rank && k < VITC_MAX_RANK; k++)
                if (info.is_batch[k])
                    return 1;
        }
    return 0;
}

static void print_tensors(const vitc_model *m, int outputs)
{
    int n = num_tensors(m, outputs), ns = vitc_model_num_shapes(m);
    printf("%s (%d):\n", outputs ? "outputs" : "inputs", n);
    for (int i = 0; i < n; i++) {
        char t[256];
        for (int s = 0; s < ns; s++) {
            vitc_tensor_info info = shape_info(m, s, outputs, i);
            printf("  %-24s %s\n", s ? "" : info.name, cli_tensor_info_str(&info, t, sizeof t));
        }
    }
}

/* A model compiled for several input shapes (--shapes): says so. */
static void print_shapes(const vitc_model *m)
{
    int ns = vitc_model_num_shapes(m);
    if (ns > 1)
        printf("shapes:     %d (compiled with --shapes: one graph per input shape, each listed below; a run takes "
               "the one its inputs fit)\n", ns);
}

/* The enabled target features ("+avx2,+fma,..."), wrapped to lines of about
 * 100 columns; disabled ones are only counted. */
static void print_features(const char *f)
{
    enum { WIDTH = 100, INDENT = 12 };
    int on = 0, off = 0, col = INDENT;
    printf("features:   ");
    while (*f) {
        size_t n = strcspn(f, ",");
        if (*f == '-') {
            off++;
        } else {
            if (on && col + 1 + (int)n > WIDTH) {
                printf(",\n%*s", INDENT, "");
                col = INDENT;
            } else if (on) {
                col += printf(",");
            }
            col += printf("%.*s", (int)n, f);
            on++;
        }
        f += n + (f[n] == ',');
    }
    printf(on ? "" : "(none)");
    printf(off ? " (%d disabled)\n" : "\n", off);
}

/* "343.0 MB (342992768 bytes)", "12.3 kB (12345 bytes)" or "128 bytes". */
static const char *size_str(uint64_t b, char *buf, size_t n)
{
    if (b >= 1000000)
        snprintf(buf, n, "%.1f MB (%llu bytes)", (double)b / 1e6, (unsigned long long)b);
    else if (b >= 1000)
        snprintf(buf, n, "%.1f kB (%llu bytes)", (double)b / 1e3, (unsigned long long)b);
    else
        snprintf(buf, n, "%llu bytes", (unsigned long long)b);
    return buf;
}

/* 1 if an LLVM feature list ("+avx2,-avx512f,...") enables name: its last
 * entry for it is "+name". */
static int feature_on(const char *f, const char *name)
{
    int on = 0;
    size_t len = strlen(name);
    while (f && *f) {
        size_t n = strcspn(f, ",");
        if (n == len + 1 && strncmp(f + 1, name, len) == 0)
            on = *f == '+';
        f += n + (f[n] == ',');
    }
    return on;
}

/* What a CPU model's code is made of, from its features: the vector level
 * ("AVX-512") and the dot-product and matrix units it may use. */
static const char *isa_of(const char *f, char *buf, size_t n)
{
    const char *level = feature_on(f, "avx512f") ? "AVX-512 (16 floats a vector)"
                        : feature_on(f, "avx2")  ? "AVX2 (8 floats a vector)"
                        : feature_on(f, "avx")   ? "AVX (8 floats a vector)"
                        : feature_on(f, "neon")  ? "NEON (4 floats a vector)"
                                                 : "SSE (4 floats a vector)";
    static const struct {
        const char *feature, *label;
    } extra[] = {{"fma", "FMA"}, {"avx512bf16", "AVX512-BF16"}, {"avx512vnni", "AVX512-VNNI"},
                 {"avxvnni", "AVX-VNNI"}, {"amx-bf16", "AMX-BF16"}, {"amx-int8", "AMX-INT8"}};
    size_t k = (size_t)snprintf(buf, n, "%s", level);
    for (size_t i = 0; i < sizeof extra / sizeof extra[0] && k < n; i++)
        if (feature_on(f, extra[i].feature))
            k += (size_t)snprintf(buf + k, n - k, ", %s", extra[i].label);
    return buf;
}

/* 1 if launch names a and b ("FUNCTION WHAT NODE") run the same function. */
static int same_function(const char *a, const char *b)
{
    size_t fn = strcspn(a, " ");
    return b && strncmp(b, a, fn) == 0 && (b[fn] == ' ' || !b[fn]);
}

/* How many launches of names[i]'s function there are; 0 if an earlier
 * launch already ran it. */
static int launches_of(int n, const char *const *names, int i)
{
    const char *a = names[i] ? names[i] : "(unnamed)";
    int launches = 0;
    for (int j = 0; j < n; j++) {
        if (same_function(a, names[j]) && j < i)
            return 0;
        launches += same_function(a, names[j]) || j == i;
    }
    return launches;
}

static void json_kernels(json_w *w, int n, const char *const *names)
{
    json_array(w, "kernels");
    for (int i = 0; i < n; i++) {
        int launches = launches_of(n, names, i);
        if (!launches)
            continue;
        const char *a = names[i] ? names[i] : "(unnamed)";
        size_t fn = strcspn(a, " ");
        char f[256];
        snprintf(f, sizeof f, "%.*s", (int)fn, a);
        json_object(w, NULL);
        json_str(w, "function", f);
        json_str(w, "first_launch", a[fn] ? a + fn + 1 : "");
        json_int(w, "launches", launches);
        json_end_object(w);
    }
    json_end_array(w);
}

static void json_features(json_w *w, const char *f)
{
    json_array(w, "features");
    while (*f) {
        size_t n = strcspn(f, ",");
        char one[128];
        if (*f != '-' && n < sizeof one) {
            int plus = *f == '+';
            snprintf(one, sizeof one, "%.*s", (int)n - plus, f + plus);
            json_str(w, NULL, one);
        }
        f += n + (f[n] == ',');
    }
    json_end_array(w);
}

/* "knobs": the VITC_* variables the model records as having changed its
 * code (vitc_model_knobs' "NAME=VALUE ..."), as an object; null when the
 * model does not say. */
static void json_knobs(json_w *w, const char *knobs)
{
    if (!knobs) {
        json_str(w, "knobs", NULL);
        return;
    }
    json_object(w, "knobs");
    while (*knobs) {
        size_t n = strcspn(knobs, " "), eq = strcspn(knobs, "=");
        char name[128], value[1024];
        if (eq < n && eq < sizeof name && n - eq - 1 < sizeof value) {
            snprintf(name, sizeof name, "%.*s", (int)eq, knobs);
            snprintf(value, sizeof value, "%.*s", (int)(n - eq - 1), knobs + eq + 1);
            json_str(w, name, value);
        }
        knobs += n + (knobs[n] == ' ');
    }
    json_end_object(w);
}

static void inspect_json(const char *path, long long file_bytes, const vitc_model *m, const vitc_model_details *d)
{
    json_w w = {.f = stdout};
    json_object(&w, NULL);
    json_str(&w, "model", path);
    json_int(&w, "file_bytes", file_bytes);
    json_str(&w, "source", d->source);
    json_str(&w, "vitc_version", d->compiler_version);
    json_int(&w, "abi_version", d->abi_version);
    json_str(&w, "target", d->target);
    json_str(&w, "triple", d->triple);
    json_str(&w, "cpu", d->cpu);
    json_features(&w, d->features);
    char isa[256];
    json_str(&w, "isa", strcmp(d->target, "cpu") == 0 ? isa_of(d->features, isa, sizeof isa) : NULL);
    json_str(&w, "precision", vitc_model_precision(m));
    json_knobs(&w, vitc_model_knobs(m));
    vitc_cuda_details cd;
    if (vitc_model_cuda_details(m, &cd) == VITC_STATUS_OK) {
        json_object(&w, "cuda");
        json_str(&w, "precision", cd.precision);
        json_int(&w, "functions", cd.nfunctions);
        json_int(&w, "launches", cd.nlaunches);
        json_array(&w, "images");
        for (int i = 0; i < cd.nimages; i++) {
            json_object(&w, NULL);
            json_str(&w, "target", cd.images[i].target);
            json_str(&w, "kind", cd.images[i].kind);
            json_int(&w, "bytes", (long long)cd.images[i].bytes);
            json_end_object(&w);
        }
        json_end_array(&w);
        /* the plan, launch by launch: which kernel runs each layer at which batches */
        json_array(&w, "plan");
        vitc_cuda_launch_info li;
        for (int i = 0; i < cd.nlaunches && vitc_model_cuda_launch(m, i, &li) == VITC_STATUS_OK; i++) {
            json_object(&w, NULL);
            json_str(&w, "kernel", li.function >= 0 && li.function < d->nkernels ? d->kernel_names[li.function] : NULL);
            json_int(&w, "min_batch", li.min_batch);
            json_int(&w, "max_batch", li.max_batch);
            json_int(&w, "block", li.block);
            json_int(&w, "shared_bytes", li.shared_bytes);
            json_int(&w, "shared_bytes_sm90a", li.shared_bytes_specific ? li.shared_bytes_specific : li.shared_bytes);
            json_end_object(&w);
        }
        json_end_array(&w);
        json_end_object(&w);
    }
    json_int(&w, "min_batch", vitc_model_min_batch(m));
    json_int(&w, "max_batch", d->max_batch);
    for (int out = 0; out < 2; out++) {
        json_array(&w, out ? "outputs" : "inputs");
        for (int i = 0; i < num_tensors(m, out); i++) {
            vitc_tensor_info info = tensor_info(m, out, i);
            cli_tensor_info_json(&w, &info);
        }
        json_end_array(&w);
    }
    /* every input shape compiled, the first being inputs and outputs above */
    json_array(&w, "shapes");
    for (int s = 0; s < vitc_model_num_shapes(m); s++) {
        json_object(&w, NULL);
        for (int out = 0; out < 2; out++) {
            json_array(&w, out ? "outputs" : "inputs");
            for (int i = 0; i < num_tensors(m, out); i++) {
                vitc_tensor_info info = shape_info(m, s, out, i);
                cli_tensor_info_json(&w, &info);
            }
            json_end_array(&w);
        }
        json_end_object(&w);
    }
    json_end_array(&w);
    json_int(&w, "workspace_bytes", (long long)d->workspace_bytes);
    json_object(&w, "weights");
    json_int(&w, "bytes", (long long)d->weights_bytes);
    json_bool(&w, "embedded", !d->weights_file);
    json_str(&w, "file", d->weights_file);
    char h[24];
    snprintf(h, sizeof h, "%016llx", (unsigned long long)d->weights_fnv1a);
    json_str(&w, "fnv1a", d->weights_fnv1a ? h : NULL); /* null: not recorded (embedded) */
    json_end_object(&w);
    json_kernels(&w, d->nkernels, d->kernel_names);
    json_end_object(&w);
}

/* The runtime lists a kernel once per launch ("FUNCTION WHAT NODE"): each
 * compiled kernel once, with its first launch and how many there are. */
static void print_kernels(int n, const char *const *names)
{
    int distinct = 0;
    for (int i = 0; i < n; i++)
        distinct += launches_of(n, names, i) > 0;
    printf("kernels (%d compiled, %d launches):\n", distinct, n);
    for (int i = 0; i < n; i++) {
        int launches = launches_of(n, names, i);
        if (launches)
            printf(launches > 1 ? "  %s  (%d launches)\n" : "  %s\n", names[i] ? names[i] : "(unnamed)", launches);
    }
}

typedef struct {
    const char *path;
    int json;
} inspect_args;

static const cli_option inspect_options[] = {
    {"json", 0, NULL, "Print it as one JSON object instead.", .store = CLI_FLAG, .at = offsetof(inspect_args, json)},
    {0},
};

const cli_command cli_inspect_command = {
    "inspect",
    "vitc inspect MODEL.so [--json]",
    "Print what a compiled model holds: the ONNX file it came from, the vitc that compiled it, its target\n"
    "and CPU features, the VITC_* knobs that changed its code, inputs and outputs with the batch B, the\n"
    "batches it runs, the workspace and weights sizes, and its kernels.",
    inspect_options,
    cmd_inspect,
};

/* The model; cli_parse stores --json. */
static int take_inspect(void *ctx, int key, const char *v)
{
    inspect_args *a = ctx;
    if (a->path)
        return cli_usage_error("inspect: more than one model given");
    a->path = v;
    return VITC_OK;
}

int cmd_inspect(int argc, char **argv)
{
    inspect_args a = {0};
    int st = cli_parse(&cli_inspect_command, argc, argv, take_inspect, &a);
    if (st != VITC_OK)
        return st == CLI_HELP_SHOWN ? VITC_OK : st;
    const char *path = a.path;
    if (!path)
        return cli_usage_error("inspect: no model given");
    if (cli_is_onnx(path))
        return cli_usage_error("inspect: '%s' is an ONNX model; inspect reads compiled models "
                               "(use 'vitc dump' for ONNX)", path);
    vitc_model *m; /* read as data: nothing of the file runs, however it was made */
    vitc_status rs = vitc_model_read(path, &m);
    if (rs != VITC_STATUS_OK)
        return cli_rt_fail(rs);
    vitc_model_details d;
    vitc_model_get_details(m, &d);
    struct stat sb;
    long long file_bytes = stat(path, &sb) == 0 ? (long long)sb.st_size : -1;
    if (a.json) {
        inspect_json(path, file_bytes, m, &d);
        vitc_model_free(m);
        return fflush(stdout) == 0 ? VITC_OK : VITC_INTERNAL;
    }

    printf("model:      %s (%lld bytes)\n", path, file_bytes);
    printf("source:     %s\n", d.source);
    printf("compiled:   vitc %s, model ABI %d\n", d.compiler_version, d.abi_version);
    printf("target:     %s, triple %s, cpu %s, precision %s\n", d.target, d.triple, d.cpu, vitc_model_precision(m));
    char isa[256];
    if (strcmp(d.target, "cpu") == 0)
        printf("isa:        %s\n", isa_of(d.features, isa, sizeof isa));
    print_features(d.features);
    vitc_cuda_details cd;
    int device = vitc_model_cuda_details(m, &cd) == VITC_STATUS_OK;
    if (device) {
        printf("cuda:       precision %s; %d kernels, %d launches per run, replayed as one CUDA graph per batch size\n",
               cd.precision, cd.nfunctions, cd.nlaunches);
        printf("gpu code:  ");
        for (int i = 0; i < cd.nimages; i++)
            printf("%s %s (%s, %llu bytes)", i ? "," : "", cd.images[i].target, cd.images[i].kind,
                   (unsigned long long)cd.images[i].bytes);
        printf("\n");
    }
    const char *knobs = vitc_model_knobs(m);
    printf("knobs:      %s\n", !knobs ? "(not recorded)" : *knobs ? knobs : "none");
    int64_t min_batch = vitc_model_min_batch(m);
    if (min_batch == d.max_batch && !any_batch_dim(m)) /* the export fixed it */
        printf("batch:      %lld only (its ONNX export fixed the batch; compile with --dynamic-batch to run "
               "others)\n", (long long)d.max_batch);
    else
        printf("batch:      1 to %lld\n", (long long)d.max_batch);
    print_shapes(m);
    print_tensors(m, 0);
    print_tensors(m, 1);
    char size[96];
    printf("workspace:  %s %sper context (activations, planned for batch %lld%s)\n",
           size_str(d.workspace_bytes, size, sizeof size), device ? "of device memory " : "", (long long)d.max_batch,
           vitc_model_num_shapes(m) > 1 ? ", the largest shape's" : "");
    if (d.weights_file)
        printf("weights:    %s in external file %s (FNV-1a %016llx)\n", size_str(d.weights_bytes, size, sizeof size),
               d.weights_file, (unsigned long long)d.weights_fnv1a);
    else
        printf("weights:    %s, embedded\n", size_str(d.weights_bytes, size, sizeof size));
    print_kernels(d.nkernels, d.kernel_names);
    vitc_model_free(m);
    return VITC_OK;
}
