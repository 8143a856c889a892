/* cli.h: what the vitc subcommands share. */
#ifndef VITC_CLI_H
#define VITC_CLI_H

#include "ir/ir.h"

/* Each subcommand takes argc/argv after its name and returns an exit code:
 * 0 success, 1 a check failed, 2 bad usage or input, 3 internal error. */
int cmd_dump(int argc, char **argv);
int cmd_run(int argc, char **argv);

/* Prints "vitc: message" to stderr and returns VITC_BAD_INPUT. */
int cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Imports an ONNX model and infers its shapes; NULL after reporting. *status
 * gets the exit code. */
ir_graph *cli_load_model(const char *path, int *status);

/* --input [NAME=]FILE.npy arguments, matched to the graph's inputs by name or,
 * without names, by position.  Fills inputs[g->ninputs]; returns a status. */
int cli_load_inputs(const ir_graph *g, char **specs, int nspecs, ir_tensor *inputs);

#endif
