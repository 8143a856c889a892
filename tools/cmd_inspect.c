/* cmd_inspect.c: `vitc inspect MODEL.so`, what a compiled model says about
 * itself: the ONNX file it came from, the vitc and ABI that made it, its
 * target, inputs and outputs with the batch B, the batch limit, the memory a
 * context takes, its weights (embedded or in a file beside it) and kernels;
 * for a CUDA model also its precision and the GPU targets it carries code for. */
#include "tools/cli.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static void print_tensors(const vitc_model *m, int outputs)
{
    int n = outputs ? vitc_model_num_outputs(m) : vitc_model_num_inputs(m);
    printf("%s (%d):\n", outputs ? "outputs" : "inputs", n);
    for (int i = 0; i < n; i++) {
        vitc_tensor_info info;
        if (outputs)
            vitc_model_output(m, i, &info);
        else
            vitc_model_input(m, i, &info);
        char t[256];
        printf("  %-24s %s\n", info.name, cli_tensor_info_str(&info, t, sizeof t));
    }
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

/* The runtime lists a kernel once per launch ("FUNCTION WHAT NODE"): each
 * compiled kernel once, with its first launch and how many there are. */
static void print_kernels(int n, const char *const *names)
{
    int distinct = 0;
    for (int i = 0; i < n; i++) {
        const char *a = names[i] ? names[i] : "(unnamed)";
        size_t fn = strcspn(a, " ");
        int first = 1;
        for (int j = 0; j < i && first; j++)
            first = !(names[j] && strncmp(names[j], a, fn) == 0 && (names[j][fn] == ' ' || !names[j][fn]));
        distinct += first;
    }
    printf("kernels (%d compiled, %d launches):\n", distinct, n);
    for (int i = 0; i < n; i++) {
        const char *a = names[i] ? names[i] : "(unnamed)";
        size_t fn = strcspn(a, " ");
        int first = 1, launches = 0;
        for (int j = 0; j < n; j++) {
            int same = names[j] && strncmp(names[j], a, fn) == 0 && (names[j][fn] == ' ' || !names[j][fn]);
            first &= !(same && j < i);
            launches += same;
        }
        if (first)
            printf(launches > 1 ? "  %s  (%d launches)\n" : "  %s\n", a, launches);
    }
}

int cmd_inspect(int argc, char **argv)
{
    const char *path = NULL;
    for (int i = 0; i < argc; i++) {
        if (argv[i][0] == '-')
            return cli_usage_error("inspect: unknown option '%s'", argv[i]);
        if (path)
            return cli_usage_error("inspect: more than one model given");
        path = argv[i];
    }
    if (!path)
        return cli_usage_error("inspect: no model given");
    if (cli_is_onnx(path))
        return cli_usage_error("inspect: '%s' is an ONNX model; inspect reads compiled models "
                               "(use 'vitc dump' for ONNX)", path);
    vitc_model *m;
    int status = cli_rt_load(path, &m);
    if (status)
        return status;
    vitc_model_details d;
    vitc_model_get_details(m, &d);
    struct stat sb;
    long long file_bytes = stat(path, &sb) == 0 ? (long long)sb.st_size : -1;

    printf("model:      %s (%lld bytes)\n", path, file_bytes);
    printf("source:     %s\n", d.source);
    printf("compiled:   vitc %s, model ABI %d\n", d.compiler_version, d.abi_version);
    printf("target:     %s, triple %s, cpu %s\n", d.target, d.triple, d.cpu);
    print_features(d.features);
    vitc_cuda_details cd;
    if (strcmp(d.target, "cuda") == 0 && vitc_model_cuda_details(m, &cd) == VITC_STATUS_OK) {
        printf("cuda:       precision %s; %d kernels, %d launches per run, replayed as one CUDA graph per batch size\n",
               cd.precision, cd.nfunctions, cd.nlaunches);
        printf("gpu code:  ");
        for (int i = 0; i < cd.nimages; i++)
            printf("%s %s (%s, %llu bytes)", i ? "," : "", cd.images[i].target, cd.images[i].kind,
                   (unsigned long long)cd.images[i].bytes);
        printf("\n");
    }
    printf("batch:      1 to %lld\n", (long long)d.max_batch);
    print_tensors(m, 0);
    print_tensors(m, 1);
    printf("workspace:  %llu bytes %sper context (activations, planned for batch %lld)\n",
           (unsigned long long)d.workspace_bytes, strcmp(d.target, "cuda") == 0 ? "of device memory " : "",
           (long long)d.max_batch);
    if (d.weights_file)
        printf("weights:    %llu bytes in external file %s (FNV-1a %016llx)\n", (unsigned long long)d.weights_bytes,
               d.weights_file, (unsigned long long)d.weights_fnv1a);
    else
        printf("weights:    %llu bytes, embedded\n", (unsigned long long)d.weights_bytes);
    print_kernels(d.nkernels, d.kernel_names);
    vitc_model_free(m);
    return VITC_OK;
}
