/* compare_run.c: the compiled side of `vitc compare`: a temporary directory
 * for the .so files compare builds itself, compiling a graph with the same
 * passes and backend as `vitc MODEL.onnx -o MODEL.so`, and running a .so on
 * the reference's inputs. */
#include "tools/compare.h"

#include "passes/passes.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

void cmp_temp_cleanup(cmp_opts *o)
{
    if (!o->tmpdir[0])
        return;
    DIR *dir = opendir(o->tmpdir);
    struct dirent *e;
    while (dir && (e = readdir(dir))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", o->tmpdir, e->d_name);
        unlink(path);
    }
    if (dir)
        closedir(dir);
    rmdir(o->tmpdir);
    o->tmpdir[0] = 0;
}

int cmp_compile_graph(const cmp_opts *o, ir_graph *g, const char *path, int64_t max_batch)
{
    vitc_diag d;
    vitc_diag_init(&d, o->onnx);
    int st = pass_run_pipeline(g, NULL, NULL, &d);
    if (st != VITC_OK)
        return st;
    cg_options opt = {.output = path, .source = o->onnx, .max_batch = max_batch, .opt_level = 3};
    return cg_compile(&cg_llvm_backend, g, &opt, &d);
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
        status = cli_rt_alloc_outputs(m, batch < 1 ? 1 : batch > max ? max : batch, outs);
    if (status == VITC_OK) {
        vitc_status vs = vitc_context_create(m, o->nthreads, &c);
        status = vs == VITC_STATUS_OK ? cli_rt_run(c, m, in, outs) : cli_rt_fail(vs);
    }
    if (status != VITC_OK)
        for (int i = 0; i < nout; i++)
            ir_tensor_free(&outs[i]);
    vitc_context_free(c);
    free(in);
    return status;
}
