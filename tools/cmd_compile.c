/* cmd_compile.c: `vitc MODEL.onnx -o MODEL.so [options]`, the default command:
 * import, the pass pipeline, then the CPU backend (or, with --target cuda,
 * the CUDA backend; --emit cuda writes its program).  cli_compile is the same
 * compile for other commands (compare builds a temporary .so with it). */
#include "tools/cli.h"

#include "codegen/backend.h" /* and codegen/progress.h: now_s */
#include "passes/passes.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define MAX_BATCH_LIMIT (1 << 20)
#define DEFAULT_MAX_BATCH 16

/* 1 if output names the same file as input, existing or not yet. */
static int same_file(const char *input, const char *output)
{
    char in[PATH_MAX], out[PATH_MAX], dir[PATH_MAX];
    if (!realpath(input, in))
        return 0;
    if (realpath(output, out))
        return strcmp(in, out) == 0;
    const char *slash = strrchr(output, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else
        snprintf(dir, sizeof dir, "%.*s", slash == output ? 1 : (int)(slash - output), output);
    char rdir[PATH_MAX];
    if (!realpath(dir, rdir))
        return 0;
    if ((size_t)snprintf(out, sizeof out, "%s/%s", rdir, slash ? slash + 1 : output) >= sizeof out)
        return 0;
    return strcmp(in, out) == 0;
}

/* Refuses outputs that would overwrite the model or are not a writable file path. */
static int check_output(const char *model, const cg_options *opt)
{
    struct stat st;
    if (!opt->output || !*opt->output)
        return cli_usage_error("no output given (-o MODEL.so)");
    size_t n = strlen(opt->output);
    if (opt->output[n - 1] == '/' || (stat(opt->output, &st) == 0 && S_ISDIR(st.st_mode)))
        return cli_usage_error("-o %s is a directory; give the path of the .so to write", opt->output);
    if (same_file(model, opt->output))
        return cli_usage_error("-o %s would overwrite the input model", opt->output);
    if (opt->external_weights) {
        char w[PATH_MAX + 16];
        snprintf(w, sizeof w, "%s.weights", opt->output);
        if (same_file(model, w))
            return cli_usage_error("the weights file %s would overwrite the input model", w);
    }
    const char *slash = strrchr(opt->output, '/');
    if (slash && slash != opt->output) {
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - opt->output), opt->output);
        if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
            return cli_usage_error("the output directory %s does not exist", dir);
    }
    return VITC_OK;
}

static int compile_model(const char *model, const cg_options *opt0, const char *dump_after, const cg_backend *be)
{
    cg_options opt = *opt0;
    if (!opt.source)
        opt.source = model;
    int st = check_output(model, &opt);
    if (st)
        return st;
    timer t = {.start = now_s(), .verbose = opt.verbose};
    t.last = opt.start_s = t.start;
    ir_graph *g = cli_load_model(model, &st);
    if (!g)
        return st;
    char what[64];
    snprintf(what, sizeof what, "import (%d nodes)", g->nnodes);
    phase_done(&t, what);
    vitc_diag d;
    vitc_diag_init(&d, model);
    pass_dump pd = {.which = dump_after, .out = stdout};
    st = pass_run_pipeline(g, dump_after ? pass_dump_hook : NULL, &pd, &d);
    snprintf(what, sizeof what, "passes (%d nodes left)", g->nnodes);
    if (st == VITC_OK)
        phase_done(&t, what);
    if (st == VITC_OK)
        st = cg_compile(be, g, &opt, &d);
    ir_graph_free(g);
    return st;
}

int cli_compile(const char *model, const cg_options *opt) { return compile_model(model, opt, NULL, &cg_llvm_backend); }

/* The value of "--name=value" or "--name value" at argv[*i]; NULL if argv[*i]
 * is not that option.  A missing value sets *missing. */
static const char *opt_value(int argc, char **argv, int *i, const char *name, int *missing)
{
    size_t n = strlen(name);
    if (strncmp(argv[*i], name, n) != 0)
        return NULL;
    if (argv[*i][n] == '=')
        return argv[*i] + n + 1;
    if (argv[*i][n] != 0)
        return NULL;
    if (*i + 1 >= argc) {
        *missing = 1;
        return NULL;
    }
    return argv[++*i];
}

int cmd_compile(int argc, char **argv)
{
    cg_options opt = {.max_batch = DEFAULT_MAX_BATCH, .opt_level = 3};
    const char *model = NULL, *target = NULL, *dump_after = NULL, *emit = "so", *v;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        int missing = 0;
        if ((v = opt_value(argc, argv, &i, "-o", &missing))) {
            opt.output = v;
        } else if ((v = opt_value(argc, argv, &i, "--target", &missing))) {
            target = v;
        } else if ((v = opt_value(argc, argv, &i, "--batch", &missing))) {
            char *end;
            errno = 0;
            long long b = strtoll(v, &end, 10);
            if (*end || errno || b < 1 || b > MAX_BATCH_LIMIT)
                return cli_usage_error("--batch takes the largest batch size, from 1 to %d", MAX_BATCH_LIMIT);
            opt.max_batch = b;
        } else if (strlen(a) == 3 && a[0] == '-' && a[1] == 'O' && a[2] >= '0' && a[2] <= '3') {
            opt.opt_level = a[2] - '0';
        } else if ((v = opt_value(argc, argv, &i, "--cpu", &missing))) {
            opt.cpu = v;
        } else if ((v = opt_value(argc, argv, &i, "--features", &missing))) {
            opt.features = v;
        } else if ((v = opt_value(argc, argv, &i, "--weights", &missing))) {
            if (strcmp(v, "embedded") != 0 && strcmp(v, "external") != 0)
                return cli_usage_error("--weights takes 'embedded' or 'external', not '%s'", v);
            opt.external_weights = strcmp(v, "external") == 0;
        } else if ((v = opt_value(argc, argv, &i, "--precision", &missing))) {
            opt.precision = v;
        } else if ((v = opt_value(argc, argv, &i, "--emit", &missing))) {
            if (strcmp(v, "so") != 0 && strcmp(v, "cuda") != 0)
                return cli_usage_error("--emit takes 'so' or 'cuda', not '%s'", v);
            emit = v;
        } else if ((v = opt_value(argc, argv, &i, "--dump-after", &missing))) {
            if (!pass_name_known(v))
                return cli_usage_error("--dump-after: '%s' is not a pass (try --dump-after=all)", v);
            dump_after = v;
        } else if (strcmp(a, "--verbose") == 0 || strcmp(a, "-v") == 0) {
            opt.verbose = 1;
        } else if (missing) {
            return cli_usage_error("%s needs a value", a);
        } else if (a[0] == '-') {
            return cli_usage_error("unknown option '%s'", a);
        } else if (model) {
            return cli_usage_error("more than one model given ('%s' and '%s')", model, a);
        } else {
            model = a;
        }
    }
    if (!model)
        return cli_usage_error("no model given");
    if (strcmp(emit, "cuda") == 0) { /* the generated CUDA program, for reading */
        if (target && strcmp(target, "cuda") != 0)
            return cli_usage_error("--emit cuda writes the CUDA backend's program: it needs --target cuda");
        target = "cuda";
        opt.emit_source = 1;
    }
    if (!target)
        target = "cpu";
    if (strcmp(target, "cpu") != 0 && strcmp(target, "cuda") != 0)
        return cli_usage_error("--target takes 'cpu' or 'cuda', not '%s'", target);
    if (opt.precision && strcmp(target, "cuda") != 0)
        return cli_usage_error("--precision applies to --target cuda (the CPU backend computes in fp32)");
    /* the default stays cpu in every build, so that one command line means
     * the same everywhere; a vitc without LLVM says to pass --target cuda */
    return compile_model(model, &opt, dump_after, strcmp(target, "cuda") == 0 ? &cg_cuda_backend : &cg_llvm_backend);
}
