/* cmd_compile.c: `vitc compile MODEL.onnx -o MODEL.so [options]`, also
 * written without the word compile (`vitc MODEL.onnx -o MODEL.so`):
 * import, the pass pipeline, then the CPU backend (or, with --target cuda,
 * the CUDA backend; --emit cuda writes its program).  cli_compile is the same
 * compile for other commands (compare builds a temporary .so with it). */
#include "tools/cli.h"

#include "codegen/backend.h" /* and codegen/progress.h: now_s */
#include "passes/passes.h"

#include <dirent.h>
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
        return cli_error("-o %s is a directory; give the path of the .so to write", opt->output);
    if (same_file(model, opt->output))
        return cli_error("-o %s would overwrite the input model", opt->output);
    if (opt->external_weights) {
        char w[PATH_MAX + 16];
        snprintf(w, sizeof w, "%s.weights", opt->output);
        if (same_file(model, w))
            return cli_error("the weights file %s would overwrite the input model", w);
    }
    const char *slash = strrchr(opt->output, '/');
    if (slash && slash != opt->output) {
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - opt->output), opt->output);
        if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
            return cli_error("the output directory %s does not exist", dir);
    }
    return VITC_OK;
}

/* The warning for a model whose export fixed the batch: the .so runs that
 * batch only, and how to make it run others. */
static void warn_fixed_batch(const ir_graph *g, const char *model)
{
    char names[1024], hint[512], t[256];
    size_t k = 0;
    int n = 0;
    for (int i = 0; i < g->ninputs; i++) {
        const ir_value *v = &g->values[g->inputs[i]];
        if (v->rank < 1 || k >= sizeof names)
            continue;
        k += (size_t)snprintf(names + k, sizeof names - k, "%s'%.64s' (%s)", n ? ", " : "", v->name,
                              ir_value_type_str(v, t, sizeof t));
        n++;
    }
    vitc_diag d;
    vitc_diag_init(&d, model);
    vitc_warning(&d, NULL,
                 "the batch is fixed at %lld: the first dimension of graph input%s %s is a number, not symbolic, so "
                 "the .so runs batch %lld only (--batch does not change that); compile with --dynamic-batch to make it "
                 "symbolic, or %s",
                 (long long)g->fixed_batch, n == 1 ? "" : "s", names, (long long)g->fixed_batch,
                 cli_reexport_hint(g, hint, sizeof hint));
}

/* --calibrate DIR: every .npy file of DIR in name order, read; *n of them.  NULL
 * with the problem reported (exit 2) on a folder that cannot be read, has no
 * .npy file, or a file that is no .npy. */
static int name_order(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static ir_tensor *read_calibration(const char *dir, int *n, int *status)
{
    *n = 0;
    DIR *dp = opendir(dir);
    if (!dp) {
        fprintf(stderr, "vitc: --calibrate %s: %s\n", dir, strerror(errno));
        *status = VITC_BAD_INPUT;
        return NULL;
    }
    char **names = NULL;
    int count = 0, cap = 0;
    *status = VITC_OK;
    for (struct dirent *e; (e = readdir(dp));) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 4, ".npy") != 0)
            continue;
        if (count == cap) {
            char **more = realloc(names, sizeof *names * (size_t)(cap = cap ? 2 * cap : 16));
            if (!more)
                break;
            names = more;
        }
        if (!(names[count] = malloc(strlen(dir) + len + 2)))
            break;
        sprintf(names[count++], "%s/%s", dir, e->d_name);
    }
    closedir(dp);
    ir_tensor *t = count ? calloc((size_t)count, sizeof *t) : NULL;
    if (!count)
        fprintf(stderr, "vitc: --calibrate %s: no .npy file there (one input each: [C, H, W] or a batch [N, C, H, W])\n",
                dir);
    if (names)
        qsort(names, (size_t)count, sizeof *names, name_order);
    for (int i = 0; t && i < count; i++) {
        vitc_diag d;
        vitc_diag_init(&d, names[i]);
        if (ir_npy_read(names[i], &t[i], &d) != VITC_OK) {
            for (int j = 0; j < i; j++)
                ir_tensor_free(&t[j]);
            free(t);
            t = NULL;
        }
    }
    for (int i = 0; i < count; i++)
        free(names[i]);
    free(names);
    if (!t) {
        *status = VITC_BAD_INPUT;
        return NULL;
    }
    *n = count;
    return t;
}

/* The calibration samples as graph g's inputs: a file of the input's rank
 * less one is one image (a batch of 1 added); 0, or a status with the
 * problem reported. */
static int fit_calibration(const ir_graph *g, ir_tensor *t, int n, const char *dir)
{
    if (g->ninputs != 1) {
        fprintf(stderr, "vitc: --calibrate takes models of one input; this one has %d\n", g->ninputs);
        return VITC_BAD_INPUT;
    }
    int rank = g->values[g->inputs[0]].rank;
    for (int i = 0; i < n; i++) {
        if (t[i].rank == rank - 1 && rank <= IR_MAX_RANK) {
            memmove(t[i].dims + 1, t[i].dims, sizeof(int64_t) * (size_t)t[i].rank);
            t[i].dims[0] = 1;
            t[i].rank = rank;
        }
        if (t[i].rank != rank || t[i].dtype != IR_F32) {
            fprintf(stderr, "vitc: --calibrate %s: sample %d is %s of rank %d; the model's input takes f32 of rank %d "
                    "(or one image of rank %d)\n", dir, i, ir_dtype_name(t[i].dtype), t[i].rank, rank, rank - 1);
            return VITC_BAD_INPUT;
        }
    }
    return VITC_OK;
}

static int compile_model(const char *model, const cg_options *opt0, const char *dump_after, int dynamic_batch,
                         const cg_backend *be, const cli_shapes *sh, const char *calib_dir)
{
    cg_options opt = *opt0;
    if (!opt.source)
        opt.source = model;
    int st = check_output(model, &opt);
    if (st)
        return st;
    timer t = {.start = now_s(), .verbose = opt.verbose};
    t.last = opt.start_s = t.start;
    int nv = sh && sh->nvariants ? sh->nvariants : 1;
    vitc_diag d;
    vitc_diag_init(&d, model);
    cg_session *s = NULL;
    ir_graph *kept = NULL; /* a backend without end_graph reads its one graph up to cg_end */
    int ncalib = 0;
    ir_tensor *calib = calib_dir ? read_calibration(calib_dir, &ncalib, &st) : NULL;
    if (calib_dir && !calib)
        return st;
    st = cg_begin(be, &opt, nv, &d, &s);
    for (int v = 0; st == VITC_OK && v < nv; v++) {
        cli_load_opts lo = {.dynamic_batch = dynamic_batch, .shapes = sh && sh->nvariants ? sh->v[v] : NULL,
                            .nshapes = sh && sh->nvariants ? sh->ninputs : 0, .shapes_from_inputs = sh && sh->from_inputs};
        ir_graph *g = cli_load_model_with(model, &lo, &st);
        if (!g)
            break;
        if (v == 0 && g->fixed_batch && opt.verbose >= 0)
            warn_fixed_batch(g, model);
        char what[64];
        snprintf(what, sizeof what, "import (%d nodes)", g->nnodes);
        phase_done(&t, what);
        pass_dump pd = {.which = dump_after, .out = stdout};
        pass_options po = {.hook = dump_after ? pass_dump_hook : NULL, .hook_ctx = &pd, .calib = calib,
                           .ncalib = ncalib};
        po.int8 = cg_int8_mode(be, &opt, &po.int8_pairs);
        if (calib && (st = fit_calibration(g, calib, ncalib, calib_dir)) != VITC_OK) {
            ir_graph_free(g);
            break;
        }
        st = pass_run(g, &po, &d);
        snprintf(what, sizeof what, "passes (%d nodes left)", g->nnodes);
        if (st == VITC_OK)
            phase_done(&t, what);
        if (st == VITC_OK)
            st = cg_add(s, g);
        if (be->end_graph)
            ir_graph_free(g);
        else
            kept = g;
    }
    st = cg_end(s, st);
    ir_graph_free(kept);
    for (int i = 0; i < ncalib; i++)
        ir_tensor_free(&calib[i]);
    free(calib);
    return st;
}

int cli_compile(const char *model, const cg_options *opt, const cli_shapes *shapes)
{
    return compile_model(model, opt, NULL, 0, &cg_llvm_backend, shapes, NULL);
}

typedef struct {
    cg_options opt;
    const char *model, *target, *weights, *dump_after, *emit, *calibrate;
    cli_shapes shapes;
    long long batch;
    int dynamic_batch;
} compile_args;

enum { K_DUMP_AFTER = 256, K_SHAPES };

static const cli_option compile_options[] = {
    {"output", 'o', "FILE", "The shared library to write (required).", .store = CLI_STRING,
     .at = offsetof(compile_args, opt.output)},
    {"batch", 0, "N",
     "The largest batch the .so runs, from 1 to 1048576 (default 16); any batch from 1 to N runs.  A model whose "
     "export fixed the batch (the first dimension of its inputs a number) runs that batch only, with a warning.",
     .store = CLI_COUNT, .at = offsetof(compile_args, batch), .lo = 1, .hi = MAX_BATCH_LIMIT},
    {"dynamic-batch", 0, NULL,
     "Make the first dimension of every graph input the batch, for an export that fixed it; an error names the "
     "node where the graph still holds the exported batch as a number.",
     .store = CLI_FLAG, .at = offsetof(compile_args, dynamic_batch)},
    {"shapes", K_SHAPES, "[NAME=]S,...",
     "For a model exported with a dynamic image size (height and width symbolic): the input shapes to compile "
     "for, S the input's dimensions with the batch B (e.g. --shapes input=Bx3x224x224,Bx3x336x336,Bx3x448x224; "
     "NAME= and B may be left out).  The one .so runs each, at any batch up to --batch, and refuses other sizes, "
     "naming these.  Once per input for several, the i-th shapes going together.  CPU only.",
     .store = CLI_TAKE},
    {"opt-level", 'O', "LEVEL", "LLVM optimisation level 0-3 (default 3), also written -O0 .. -O3.",
     .store = CLI_TAKE},
    {"target", 0, "cpu|cuda", "Generate CPU code through LLVM (default) or CUDA kernels through NVRTC.",
     .store = CLI_CHOICE, .at = offsetof(compile_args, target)},
    {"cpu", 0, "NAME",
     "The CPU to generate code for (an LLVM CPU name such as znver3 or skylake-avx512); default: this host's.",
     .store = CLI_STRING, .at = offsetof(compile_args, opt.cpu)},
    {"features", 0, "+a,-b", "CPU features to add to or remove from the host's (or --cpu's), e.g. -avx512f.",
     .store = CLI_STRING, .at = offsetof(compile_args, opt.features)},
    {"weights", 0, "embedded|external",
     "Embed the weights in the .so (default) or write them to MODEL.so.weights beside it.", .store = CLI_CHOICE,
     .at = offsetof(compile_args, weights)},
    {"precision", 0, "bf16|fp16|tf32|fp32|int8",
     "The arithmetic.  --target cuda: default bf16 (16-bit activations, fp32 accumulation).  CPU: fp32 (default) or "
     "bf16, which runs the Linear layers in bf16 (weights and their inputs rounded to bf16, fp32 sums; everything "
     "else fp32) on AMX tiles, or with AVX512-BF16 where the CPU has no AMX; needs amx-bf16 or avx512bf16; or int8: "
     "every Linear in int8 (weights per output column, symmetric; inputs per row at run time; exact int32 sums; "
     "everything else fp32) with AMX-INT8, AVX512-VNNI or AVX-VNNI where the CPU has them, else with AVX2's or "
     "AVX512BW's VPMADDUBSW, each column's scale then chosen so that its 16-bit pair sums cannot saturate.  "
     "A quantized model's own int8 Linears (QDQ, or ONNX Runtime's dynamic MatMulInteger) run on the int8 kernels "
     "at any CPU precision.",
     .store = CLI_STRING, .at = offsetof(compile_args, opt.precision)},
    {"calibrate", 0, "DIR",
     "With --precision int8: quantize each Linear's input with one static range instead of each row's at run "
     "time, the range from the model run (by the reference interpreter) on every DIR/*.npy (an input of the model, "
     "or one image of it), the rarest 0.01% of values on each side left out.",
     .store = CLI_STRING, .at = offsetof(compile_args, calibrate)},
    {"emit", 0, "so|cuda", "--target cuda: write the generated CUDA program to -o instead of a .so, for reading.",
     .store = CLI_CHOICE, .at = offsetof(compile_args, emit)},
    {"dump-after", K_DUMP_AFTER, "PASS|all", "Print the IR to stdout after that pass (or after every pass).",
     .store = CLI_TAKE},
    {"verbose", 'v', NULL, "Print every phase with its time and the total (import to link) on stderr.",
     .store = CLI_TAKE},
    {"quiet", 'q', NULL,
     "Print nothing but errors (by default the phases are printed when stderr is a terminal, and a compile ends "
     "with one line saying what it wrote).",
     .store = CLI_TAKE},
    {0},
};

const cli_command cli_compile_command = {
    "compile",
    "vitc compile MODEL.onnx -o MODEL.so [--batch N] [--dynamic-batch] [--shapes [NAME=]S,...]\n"
    "                                    [-O0..-O3] [--target cpu|cuda] [--cpu NAME] [--features +a,-b]\n"
    "                                    [--weights embedded|external] [--precision P] [--calibrate DIR]\n"
    "                                    [--emit so|cuda] [--dump-after PASS|all] [--verbose|--quiet]\n"
    "vitc MODEL.onnx -o MODEL.so [options]",
    "Compile the model into a shared library that runs it for any batch from 1 to --batch: on the CPU\n"
    "(LLVM, -O3, the host's CPU unless --cpu/--features say otherwise) or, with --target cuda, on NVIDIA\n"
    "GPUs from sm_80 (kernels compiled by NVRTC for sm_80 and sm_90 plus PTX). An export that fixed the\n"
    "batch runs that batch only (a warning says so; --dynamic-batch makes it symbolic); one with a\n"
    "dynamic image size runs the sizes --shapes lists, all in the one .so. The .so appears only when the\n"
    "compile succeeds, and never overwrites the model. The word 'compile' may be left out where the\n"
    "model's name ends in .onnx or holds a '/' (a first word without them is a command, whatever files\n"
    "the directory holds).",
    compile_options,
    cmd_compile,
};

/* The model, -O, --dump-after, -v and -q (the last of them wins); cli_parse
 * stores the other options. */
static int take_compile(void *ctx, int key, const char *v)
{
    compile_args *a = ctx;
    switch (key) {
    case CLI_POSITIONAL:
        return cli_take_model(&cli_compile_command, &a->model, v);
    case 'O':
        if (strlen(v) != 1 || v[0] < '0' || v[0] > '3')
            return cli_usage_error("-O takes a level from 0 to 3 (-O0 .. -O3), not '%s'", v);
        a->opt.opt_level = v[0] - '0';
        return VITC_OK;
    case K_SHAPES:
        return cli_shapes_add(&a->shapes, v);
    case K_DUMP_AFTER:
        if (!pass_name_known(v))
            return cli_usage_error("--dump-after: '%s' is not a pass (try --dump-after=all)", v);
        a->dump_after = v;
        return VITC_OK;
    case 'v':
    case 'q':
        a->opt.verbose = key == 'v' ? 1 : -1;
        return VITC_OK;
    }
    return VITC_INTERNAL;
}

int cmd_compile(int argc, char **argv)
{
    compile_args a = {.opt = {.opt_level = 3}, .emit = "so", .batch = DEFAULT_MAX_BATCH};
    int st = cli_parse(&cli_compile_command, argc, argv, take_compile, &a);
    if (st != VITC_OK)
        return st == CLI_HELP_SHOWN ? VITC_OK : st;
    cg_options opt = a.opt;
    opt.max_batch = a.batch;
    opt.external_weights = a.weights && strcmp(a.weights, "external") == 0;
    cg_knobs knobs = cg_knobs_read(); /* the VITC_* environment variables (codegen/knobs.def) */
    opt.knobs = &knobs;
    const char *model = a.model, *target = a.target, *dump_after = a.dump_after, *emit = a.emit;
    if (!model)
        return cli_usage_error("no model given");
    if (strcmp(emit, "cuda") == 0) { /* the generated CUDA program, for reading */
        if (target && strcmp(target, "cuda") != 0)
            return cli_usage_error("--emit cuda writes the CUDA backend's program: it needs --target cuda");
        target = "cuda";
        opt.emit_source = 1;
    }
    /* the default stays cpu in every build, so that one command line means
     * the same everywhere; a vitc without LLVM says to pass --target cuda */
    const cg_backend *be = cg_backend_named(target ? target : "cpu");
    if (!be)
        return cli_usage_error("--target takes cpu or cuda, not '%s'", target);
    if ((st = cli_shapes_check(&a.shapes, "", 0)) != VITC_OK)
        return st;
    if (a.calibrate && !(opt.precision && strcmp(opt.precision, "int8") == 0 && be == &cg_llvm_backend))
        return cli_usage_error("--calibrate sets the ranges of --precision int8 on the CPU: give --precision int8");
    return compile_model(model, &opt, dump_after, a.dynamic_batch, be, a.shapes.nvariants ? &a.shapes : NULL,
                         a.calibrate);
}
