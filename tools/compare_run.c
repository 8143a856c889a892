/* compare_run.c: the compiled side of `vitc compare`: a temporary directory
 * for the .so files compare builds itself, compiling a graph with the same
 * passes and backend as `vitc MODEL.onnx -o MODEL.so`, and running a .so on
 * the reference's inputs. */
#include "tools/compare.h"

#include "passes/passes.h"

#include <dirent.h>
#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

int64_t cmp_batch_of(const ir_graph *g, const ir_tensor *inputs)
{
    for (int i = 0; i < g->ninputs; i++) {
        const ir_value *v = &g->values[g->inputs[i]];
        for (int k = 0; k < v->rank && k < inputs[i].rank; k++)
            if (v->dims[k].e == 1 && v->dims[k].k > 0)
                return inputs[i].dims[k] / v->dims[k].k;
    }
    return 1;
}

int cmp_temp_path(cmp_opts *o, const char *name, char *path, size_t n)
{
    if (!o->tmpdir[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(o->tmpdir, sizeof o->tmpdir, "%s/vitc-compare-XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(o->tmpdir)) {
            fprintf(stderr, "vitc: cannot make a temporary directory %s\n", o->tmpdir);
            o->tmpdir[0] = 0;
            return VITC_INTERNAL;
        }
    }
    snprintf(path, n, "%s/%s", o->tmpdir, name);
    return VITC_OK;
}

/* Removes the files in dir and its subdirectories (one level: what compare
 * makes), then dir. */
static void remove_tree(const char *path, int depth)
{
    DIR *dir = opendir(path);
    struct dirent *e;
    while (dir && (e = readdir(dir))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char p[1024];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", path, e->d_name);
        if (depth < 1 && lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
            remove_tree(p, depth + 1);
        else
            unlink(p);
    }
    if (dir)
        closedir(dir);
    rmdir(path);
}

void cmp_temp_cleanup(cmp_opts *o)
{
    if (!o->tmpdir[0])
        return;
    remove_tree(o->tmpdir, 0);
    o->tmpdir[0] = 0;
}

int cmp_compile_graph(const cmp_opts *o, ir_graph *g, const char *path, int64_t max_batch)
{
    vitc_diag d;
    vitc_diag_init(&d, o->onnx);
    cg_options opt = {.output = path, .source = o->onnx, .max_batch = max_batch, .opt_level = 3, .verbose = -1};
    if (o->precision[0])
        opt.precision = o->precision;
    pass_options po = {0};
    po.int8 = cg_int8_mode(o->backend, &opt, &po.int8_pairs);
    int st = pass_run(g, &po, &d);
    if (st != VITC_OK)
        return st;
    return cg_compile(o->backend, g, &opt, &d);
}

int cmp_run_so(const cmp_opts *o, vitc_model *m, const ir_graph *g, const ir_tensor *inputs, ir_tensor *outs)
{
    int nin = vitc_model_num_inputs(m), nout = vitc_model_num_outputs(m);
    ir_tensor *in = calloc((size_t)nin + 1, sizeof *in);
    vitc_context *c = NULL;
    int status = in ? VITC_OK : VITC_INTERNAL;
    for (int i = 0; status == VITC_OK && i < nin; i++) { /* by name, else by position */
        vitc_tensor_info info;
        vitc_model_input(m, i, &info);
        int k = 0;
        while (k < g->ninputs && strcmp(g->values[g->inputs[k]].name, info.name) != 0)
            k++;
        if (k == g->ninputs && nin == g->ninputs)
            k = i;
        if (k == g->ninputs) {
            fprintf(stderr, "vitc: %s: input '%s' is not an input of %s\n", o->so ? o->so : "the compiled model",
                    info.name, o->onnx);
            status = VITC_BAD_INPUT;
        } else {
            in[i] = inputs[k]; /* borrowed */
        }
    }
    int64_t batch = status == VITC_OK ? cli_rt_batch_of(m, in) : 1, max = vitc_model_max_batch(m);
    if (status == VITC_OK) /* out of range: the run reports it (inputs are checked first) */
        status = cli_rt_alloc_outputs(m, batch < 1 ? 1 : batch > max ? max : batch, in, outs);
    if (status == VITC_OK) {
        vitc_status vs = vitc_context_create(m, (int)o->nthreads, &c);
        status = vs == VITC_STATUS_OK ? cli_rt_run(c, m, in, outs) : cli_rt_fail(vs);
    }
    if (status != VITC_OK)
        for (int i = 0; i < nout; i++)
            ir_tensor_free(&outs[i]);
    vitc_context_free(c);
    free(in);
    return status;
}

/* The program --reference onnxruntime runs: MODEL DIR PLAIN NIN
 * INPUT_NAMES... OUTPUT_NAMES...; inputs are DIR/in<i>.npy, outputs go to
 * DIR/out<i>.npy and the ONNX Runtime version to DIR/version.  PLAIN 1:
 * graph optimizations off (ORT_DISABLE_ALL), each node run as ONNX defines
 * it.  Exit 3: not importable. */
static const char ort_program[] =
    "import sys\n"
    "try:\n"
    "    import numpy as np, onnxruntime as ort\n"
    "except Exception as e:\n"
    "    sys.stderr.write('vitc: --reference onnxruntime: %s cannot import onnxruntime: %s (set VITC_PYTHON to a '\n"
    "                     'python with onnxruntime and numpy)\\n' % (sys.executable, e))\n"
    "    sys.exit(3)\n"
    "model, d, plain, nin = sys.argv[1], sys.argv[2], sys.argv[3] == '1', int(sys.argv[4])\n"
    "names, outs = sys.argv[5:5 + nin], sys.argv[5 + nin:]\n"
    "so = ort.SessionOptions()\n"
    "so.log_severity_level = 3\n"
    "if plain:\n"
    "    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL\n"
    "s = ort.InferenceSession(model, so, providers=['CPUExecutionProvider'])\n"
    "feed = {n: np.load('%s/in%d.npy' % (d, i)) for i, n in enumerate(names)}\n"
    "for i, r in enumerate(s.run(outs, feed)):\n"
    "    np.save('%s/out%d.npy' % (d, i), np.ascontiguousarray(r))\n"
    "open(d + '/version', 'w').write(ort.__version__)\n";

/* DIR/<stem><i>.npy, a file the ONNX Runtime program reads or writes, into
 * path; d set to name it. */
static const char *ort_file(char *path, size_t n, const char *dir, const char *stem, int i, vitc_diag *d)
{
    snprintf(path, n, "%s/%s%d.npy", dir, stem, i);
    vitc_diag_init(d, path);
    return path;
}

/* 1 if g holds quantized ONNX: ONNX Runtime's optimizer fuses its
 * QuantizeLinear/DequantizeLinear pairs into int8 kernels that round
 * otherwise than those ops, so the reference runs it unoptimized. */
static int quantized(const ir_graph *g)
{
    for (int i = 0; i < g->nnodes; i++)
        if (ir_op_family_of(g->nodes[i].op) == IR_FAM_QUANT || g->nodes[i].op == IR_OP_FAKE_QUANT)
            return 1;
    return 0;
}

int cmp_reference_ort(cmp_opts *o, const ir_graph *g, const ir_tensor *inputs, ir_tensor *ref, char *version,
                      size_t vlen)
{
    char dir[512], path[600];
    int st = cmp_temp_path(o, "ort", dir, sizeof dir);
    if (st)
        return st;
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, "vitc: cannot make %s: %s\n", dir, strerror(errno));
        return VITC_INTERNAL;
    }
    vitc_diag d;
    for (int i = 0; i < g->ninputs; i++)
        if ((st = ir_npy_write(ort_file(path, sizeof path, dir, "in", i, &d), &inputs[i], &d)) != VITC_OK)
            return st;
    const char *py = cg_knobs_read().python;
    int n = 0, argc = 7 + g->ninputs + g->noutputs, plain = quantized(g);
    char nin[16];
    snprintf(nin, sizeof nin, "%d", g->ninputs);
    char **argv = calloc((size_t)argc + 1, sizeof *argv);
    if (!argv)
        return VITC_INTERNAL;
    argv[n++] = (char *)py;
    argv[n++] = (char *)"-c";
    argv[n++] = (char *)ort_program;
    argv[n++] = (char *)o->onnx;
    argv[n++] = dir;
    argv[n++] = (char *)(plain ? "1" : "0");
    argv[n++] = nin;
    for (int i = 0; i < g->ninputs; i++)
        argv[n++] = (char *)g->values[g->inputs[i]].name;
    for (int i = 0; i < g->noutputs; i++)
        argv[n++] = (char *)g->values[g->outputs[i]].name;
    fflush(stdout);
    pid_t pid;
    int rc = posix_spawnp(&pid, py, NULL, NULL, argv, environ), ws = 0;
    free(argv);
    if (rc != 0) {
        fprintf(stderr, "vitc: --reference onnxruntime: cannot run %s: %s (set VITC_PYTHON to a python with "
                        "onnxruntime and numpy)\n", py, strerror(rc));
        return VITC_BAD_INPUT;
    }
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
        if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 3)
            fprintf(stderr, "vitc: --reference onnxruntime: ONNX Runtime failed on %s (%s exited %d)\n", o->onnx,
                    py, WIFEXITED(ws) ? WEXITSTATUS(ws) : -1);
        return VITC_BAD_INPUT;
    }
    for (int i = 0; i < g->noutputs; i++)
        if ((st = ir_npy_read(ort_file(path, sizeof path, dir, "out", i, &d), &ref[i], &d)) != VITC_OK)
            return st;
    snprintf(path, sizeof path, "%s/version", dir);
    FILE *f = fopen(path, "r");
    version[0] = 0;
    if (f) {
        if (!fgets(version, (int)vlen, f))
            version[0] = 0;
        if (plain) /* the model is quantized: say how the reference ran it */
            snprintf(version + strlen(version), vlen - strlen(version), " (graph optimizations off)");
        fclose(f);
    }
    return VITC_OK;
}
