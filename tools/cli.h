/* cli.h: what the vitc subcommands share. */
#ifndef VITC_CLI_H
#define VITC_CLI_H

#include "ir/ir.h"

/* Each subcommand takes argc/argv after its name and returns an exit code:
 * 0 success, 1 a check failed, 2 bad usage or input, 3 internal error. */
int cmd_dump(int argc, char **argv);
int cmd_run(int argc, char **argv);
/* The default command: `vitc MODEL.onnx -o MODEL.so ...` (argv from the model
 * or the first option on). */
int cmd_compile(int argc, char **argv);

/* ---- compiling (cmd_compile.c) ---- */
#include "codegen/backend.h"
/* Compiles model (import, passes, CPU backend) into opt->output, refusing an
 * output that is a directory or the model itself; opt->source defaults to
 * model.  Errors are printed; returns an exit code. */
int cli_compile(const char *model, const cg_options *opt);

/* Prints "vitc: message" to stderr and returns VITC_BAD_INPUT. */
int cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Imports an ONNX model and infers its shapes; NULL after reporting. *status
 * gets the exit code. */
ir_graph *cli_load_model(const char *path, int *status);

/* --input [NAME=]FILE.npy arguments, matched to the graph's inputs by name or,
 * without names, by position.  Fills inputs[g->ninputs]; returns a status. */
int cli_load_inputs(const ir_graph *g, char **specs, int nspecs, ir_tensor *inputs);
/* The same for n inputs known by name (shared by the interpreter and runtime paths). */
int cli_read_inputs(const char *path, const char *const *names, int n, char **specs, int nspecs,
                    ir_tensor *inputs);

/* ---- compiled models through the runtime API (cli_rt.c) ---- */
#include "vitc/runtime.h"

int cmd_inspect(int argc, char **argv);
int cmd_compare(int argc, char **argv);

/* 1 if path names an ONNX model (by its extension), else it is taken as a compiled .so. */
int cli_is_onnx(const char *path);
/* The exit code for a runtime status (0, 2 for bad input, 3 internal). */
int cli_rt_exit_code(vitc_status s);
/* Prints "vitc: " and the runtime's last error; returns the exit code for s. */
int cli_rt_fail(vitc_status s);
/* vitc_model_load with the error printed; returns an exit code. */
int cli_rt_load(const char *path, vitc_model **m);
/* A model input/output's type as "f32[B,3,224,224]" into buf. */
char *cli_tensor_info_str(const vitc_tensor_info *t, char *buf, size_t n);
/* --input [NAME=]FILE.npy matched to the model's inputs (as cli_load_inputs):
 * fills inputs[vitc_model_num_inputs(m)] in the model's order. */
int cli_rt_load_inputs(const vitc_model *m, const char *path, char **specs, int nspecs, ir_tensor *inputs);
/* The batch that inputs (in the model's order) imply; -1 if none fits. */
int64_t cli_rt_batch_of(const vitc_model *m, const ir_tensor *inputs);
/* Allocates the model's outputs at a batch. */
int cli_rt_alloc_outputs(const vitc_model *m, int64_t batch, ir_tensor *outputs);
/* vitc_run on ir_tensors in the model's order; the error printed; returns an exit code. */
int cli_rt_run(vitc_context *c, const vitc_model *m, const ir_tensor *inputs, ir_tensor *outputs);

#endif
