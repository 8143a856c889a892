/* cli_rt.c: what `vitc run`, `vitc compare` and `vitc inspect` share about
 * compiled models: loading one through the runtime API with the CLI's exit
 * codes, matching .npy inputs to its inputs, and running it into ir_tensors. */
#include "tools/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_rt_exit_code(vitc_status s)
{
    switch (s) {
    case VITC_STATUS_OK:
        return VITC_OK;
    case VITC_STATUS_OUT_OF_MEMORY:
    case VITC_STATUS_INTERNAL:
        return VITC_INTERNAL;
    default:
        return VITC_BAD_INPUT;
    }
}

int cli_rt_fail(vitc_status s)
{
    fprintf(stderr, "vitc: %s\n", vitc_last_error());
    return cli_rt_exit_code(s);
}

int cli_is_onnx(const char *path)
{
    size_t n = strlen(path);
    return n >= 5 && strcmp(path + n - 5, ".onnx") == 0;
}

int cli_rt_load(const char *path, vitc_model **m)
{
    vitc_status st = vitc_model_load(path, m);
    return st == VITC_STATUS_OK ? VITC_OK : cli_rt_fail(st);
}

char *cli_tensor_info_str(const vitc_tensor_info *t, char *buf, size_t n)
{
    int dt = ir_dtype_from_onnx(t->dtype);
    size_t k = (size_t)snprintf(buf, n, "%s[", dt >= 0 ? ir_dtype_name((ir_dtype)dt) : "?");
    for (int i = 0; i < t->rank && k < n; i++) {
        const char *sep = i ? "," : "";
        if (t->is_batch[i] && t->dims[i] == 1)
            k += (size_t)snprintf(buf + k, n - k, "%sB", sep);
        else
            k += (size_t)snprintf(buf + k, n - k, "%s%lld%s", sep, (long long)t->dims[i], t->is_batch[i] ? "*B" : "");
    }
    if (k < n)
        snprintf(buf + k, n - k, "]");
    return buf;
}

const char *cli_dtype_json_name(int dtype)
{
    switch (dtype) {
    case IR_F32: return "float32";
    case IR_F16: return "float16";
    case IR_BF16: return "bfloat16";
    case IR_F64: return "float64";
    case IR_I8: return "int8";
    case IR_I16: return "int16";
    case IR_I32: return "int32";
    case IR_I64: return "int64";
    case IR_U8: return "uint8";
    case IR_U16: return "uint16";
    case IR_U32: return "uint32";
    case IR_U64: return "uint64";
    case IR_BOOL: return "bool";
    default: return NULL;
    }
}

void cli_json_shape(json_w *w, const char *key, const ir_tensor *t)
{
    json_array(w, key);
    for (int i = 0; i < t->rank; i++)
        json_int(w, NULL, t->dims[i]);
    json_end_array(w);
}

void cli_tensor_json_members(json_w *w, const char *name, const ir_tensor *t)
{
    json_str(w, "name", name);
    json_str(w, "dtype", cli_dtype_json_name(t->dtype));
    cli_json_shape(w, "shape", t);
}

void cli_tensor_info_json(json_w *w, const vitc_tensor_info *t)
{
    json_object(w, NULL);
    json_str(w, "name", t->name);
    json_str(w, "dtype", cli_dtype_json_name(ir_dtype_from_onnx(t->dtype)));
    json_array(w, "shape");
    for (int i = 0; i < t->rank; i++) {
        char b[32];
        if (!t->is_batch[i]) {
            json_int(w, NULL, t->dims[i]);
            continue;
        }
        if (t->dims[i] == 1)
            snprintf(b, sizeof b, "B");
        else
            snprintf(b, sizeof b, "%lld*B", (long long)t->dims[i]);
        json_str(w, NULL, b);
    }
    json_end_array(w);
    json_end_object(w);
}

int cli_rt_load_inputs(const vitc_model *m, const char *path, char **specs, int nspecs, ir_tensor *inputs)
{
    cli_input_sig sig[64];
    char types[64][128];
    int nin = vitc_model_num_inputs(m);
    if (nin > 64)
        return cli_error("%s: more than 64 inputs", path);
    for (int k = 0; k < nin; k++) {
        vitc_tensor_info info;
        vitc_model_input(m, k, &info);
        sig[k] = (cli_input_sig){info.name, cli_tensor_info_str(&info, types[k], sizeof types[k]),
                                 ir_dtype_from_onnx(info.dtype)};
    }
    return cli_read_inputs(path, sig, nin, specs, nspecs, inputs);
}

int64_t cli_rt_batch_of(const vitc_model *m, const ir_tensor *inputs)
{
    for (int i = 0; i < vitc_model_num_inputs(m); i++) {
        vitc_tensor_info info;
        vitc_model_input(m, i, &info);
        for (int k = 0; k < info.rank && k < inputs[i].rank; k++)
            if (info.is_batch[k] && info.dims[k] > 0)
                return inputs[i].dims[k] % info.dims[k] ? -1 : inputs[i].dims[k] / info.dims[k];
    }
    return 1;
}

/* The input shape of m (vitc_model_num_shapes) whose inputs have the
 * dimensions of these but for the batch; 0 where none has (the run then
 * refuses them). */
static int shape_of(const vitc_model *m, const ir_tensor *inputs)
{
    for (int s = 1; s < vitc_model_num_shapes(m); s++) {
        int fits = 1;
        for (int i = 0; fits && i < vitc_model_num_inputs(m); i++) {
            vitc_tensor_info info;
            vitc_model_shape_input(m, s, i, &info);
            fits = info.rank == inputs[i].rank;
            for (int k = 0; fits && k < info.rank; k++)
                fits = info.is_batch[k] || info.dims[k] == inputs[i].dims[k];
        }
        if (fits)
            return s;
    }
    return 0;
}

int cli_rt_alloc_outputs(const vitc_model *m, int64_t batch, const ir_tensor *inputs, ir_tensor *outputs)
{
    int s = shape_of(m, inputs);
    for (int i = 0; i < vitc_model_num_outputs(m); i++) {
        vitc_tensor_info info;
        vitc_model_shape_output(m, s, i, &info);
        int dt = ir_dtype_from_onnx(info.dtype);
        if (dt < 0) {
            fprintf(stderr, "vitc: output '%s' has dtype %d, which the tools cannot hold\n", info.name, info.dtype);
            return VITC_BAD_INPUT;
        }
        int64_t dims[IR_MAX_RANK];
        for (int k = 0; k < info.rank; k++)
            dims[k] = info.dims[k] * (info.is_batch[k] ? batch : 1);
        int st = ir_tensor_alloc(&outputs[i], (ir_dtype)dt, info.rank, dims);
        if (st != VITC_OK) {
            fprintf(stderr, "vitc: cannot allocate output '%s'\n", info.name);
            return st;
        }
    }
    return VITC_OK;
}

void cli_rt_tensor(const ir_tensor *t, vitc_tensor *v)
{
    memset(v, 0, sizeof *v);
    v->dtype = ir_dtype_onnx_code(t->dtype);
    v->rank = t->rank;
    for (int k = 0; k < t->rank && k < VITC_MAX_RANK; k++)
        v->dims[k] = t->dims[k];
    v->data = t->data;
}

int cli_rt_run(vitc_context *c, const vitc_model *m, const ir_tensor *inputs, ir_tensor *outputs)
{
    int nin = vitc_model_num_inputs(m), nout = vitc_model_num_outputs(m);
    vitc_tensor *vin = calloc((size_t)nin + 1, sizeof *vin), *vout = calloc((size_t)nout + 1, sizeof *vout);
    if (!vin || !vout) {
        free(vin);
        free(vout);
        fprintf(stderr, "vitc: out of memory\n");
        return VITC_INTERNAL;
    }
    for (int i = 0; i < nin; i++)
        cli_rt_tensor(&inputs[i], &vin[i]);
    for (int i = 0; i < nout; i++)
        cli_rt_tensor(&outputs[i], &vout[i]);
    vitc_status st = vitc_run(c, vin, nin, vout, nout);
    free(vin);
    free(vout);
    return st == VITC_STATUS_OK ? VITC_OK : cli_rt_fail(st);
}
