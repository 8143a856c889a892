/* cli.h: what the vitc subcommands share. */
#ifndef VITC_CLI_H
#define VITC_CLI_H

#include "ir/ir.h"

/* Each subcommand takes argc/argv after its name and returns an exit code:
 * 0 success, 1 a check failed, 2 bad usage or input, 3 internal error. */
int cmd_dump(int argc, char **argv);
int cmd_run(int argc, char **argv);
/* `vitc compile MODEL.onnx -o MODEL.so ...`, or the bare `vitc MODEL.onnx -o
 * MODEL.so ...` (argv after the word compile, or from the model or the first
 * option on). */
int cmd_compile(int argc, char **argv);

/* ---- compiling (cmd_compile.c) ---- */
#include "codegen/backend.h"
#include "frontend/onnx.h" /* onnx_unsupported, onnx_input_shape */
/* ---- the option grammar (cli_opts.c) ---- */
#include <stddef.h> /* offsetof, for cli_option.at */
#include <stdio.h>

/* What cli_parse does with an option's value by itself, into the command's
 * ctx; the other options (CLI_TAKE) and the positional arguments go to its
 * take(). */
typedef enum {
    CLI_TAKE,   /* handed to take() with the option's key */
    CLI_STRING, /* the value, into a const char * */
    CLI_FLAG,   /* 1, into an int */
    CLI_COUNT,  /* a whole number from lo to hi (else cli_parse_count's message), into a long long */
    CLI_CHOICE, /* one of the '|'-separated words of arg ("cpu|cuda"), into a const char * */
} cli_store;

/* One option of a subcommand.  key is what cli_parse hands to take(): a
 * letter that is also the short option (-o), or a code from 256 up for a
 * long-only one; 0 for a long-only option that cli_parse stores itself. */
typedef struct {
    const char *name; /* the long name, without "--" */
    int key;
    const char *arg;  /* the value's name in the help ("N"); NULL: a flag */
    const char *help; /* one sentence */
    cli_store store;
    size_t at;        /* where a stored value goes: offsetof(the type of ctx, member) */
    long long lo, hi; /* CLI_COUNT's range */
} cli_option;

typedef struct {
    const char *name;     /* "run", "compile" */
    const char *synopsis; /* "vitc run MODEL ..." */
    const char *about;    /* what it does, a paragraph */
    const cli_option *options; /* ends with a NULL name */
    int (*main)(int argc, char **argv); /* argv after the command's name */
} cli_command;

/* Every subcommand, NULL-terminated (vitc.c). */
extern const cli_command *const cli_commands[];
extern const cli_command cli_compile_command, cli_dump_command, cli_run_command, cli_compare_command,
    cli_inspect_command, cli_bench_command;

enum {
    CLI_POSITIONAL = 0,   /* take()'s key for a positional argument */
    CLI_HELP_SHOWN = -1   /* cli_parse printed the help: exit 0 */
};
/* Called for each CLI_TAKE option (value NULL for a flag) and positional
 * argument, in order; returns a status (VITC_OK to go on). */
typedef int (*cli_take)(void *ctx, int key, const char *value);
/* Parses a subcommand's arguments (argv after its name) with getopt_long,
 * storing the values of the options that say where into ctx.  Returns
 * VITC_OK, CLI_HELP_SHOWN, take()'s status, or VITC_BAD_INPUT after printing
 * what was wrong. */
int cli_parse(const cli_command *cmd, int argc, char **argv, cli_take take, void *ctx);
/* A positional argument v as the command's one model (*model), refusing a
 * second: "[CMD: ]more than one model given ('A' and 'B')". */
int cli_take_model(const cli_command *cmd, const char **model, const char *v);
void cli_print_help(const cli_command *cmd, FILE *f);
/* A whole number in [lo, hi] for --option, or a usage error. */
int cli_parse_count(const cli_command *cmd, const char *option, const char *value, long long lo, long long hi,
                    long long *out);
/* The candidate within a few edits of word (a likely typo), else NULL. */
const char *cli_nearest(const char *word, const char *const *candidates, int n);

/* ---- --json output (json.c): a writer, two-space indented ---- */
#define JSON_MAX_DEPTH 16
typedef struct {
    FILE *f;
    int depth;
    int count[JSON_MAX_DEPTH]; /* values written at each level */
} json_w;
/* key is the member's name inside an object, NULL inside an array or at the top. */
void json_object(json_w *w, const char *key);
void json_end_object(json_w *w);
void json_array(json_w *w, const char *key);
void json_end_array(json_w *w);
void json_str(json_w *w, const char *key, const char *v); /* NULL: null */
void json_num(json_w *w, const char *key, double v);      /* not finite: null */
void json_int(json_w *w, const char *key, long long v);
void json_bool(json_w *w, const char *key, int v);

/* A usage error (the command line itself is wrong: an unknown command or
 * option, a missing or bad value, options that do not go together): prints
 * "vitc: message" to stderr, then "(run 'vitc COMMAND --help' for usage)";
 * returns VITC_BAD_INPUT. */
int cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Any other error of the input (a file, a directory, the model): "vitc:
 * message" alone; returns VITC_BAD_INPUT. */
int cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Imports an ONNX model and infers its shapes; NULL after reporting. *status
 * gets the exit code. */
ir_graph *cli_load_model(const char *path, int *status);

typedef struct {
    /* --dynamic-batch: every graph input's first dimension becomes the batch
     * B; a node that still fixes the batch (a shape constant holding the
     * export's number) is an error naming it. */
    int dynamic_batch;
    /* `vitc dump` of a model with unsupported operators: the graph without
     * them (onnx_import_opts.keep_unsupported), shapes inferred as far as
     * they can be; they are listed in unsupported and not reported. */
    int keep_unsupported;
    const onnx_unsupported *unsupported; /* out */
    int nunsupported;
    int infer_status; /* out, with unsupported nodes: where shape inference failed for another reason than
                       * them (the error printed), its status; the graph is returned all the same */
    /* --shapes: sizes for the symbolic dimensions beyond the batch (onnx_import_opts.shapes) */
    const onnx_input_shape *shapes;
    int nshapes;
    int shapes_from_inputs; /* they are the --input files' (onnx_import_opts.shapes_from_inputs) */
} cli_load_opts;
/* --shapes, once per input with symbolic dimensions beyond the batch:
 * [NAME=]S[,S...], each S the input's dimensions, the batch written B or left
 * out (Bx3x224x224 or 3x224x224).  Input k's i-th shape goes with the other
 * inputs' i-th: shape i of the .so.  Several options each name their input. */
#define CLI_MAX_SHAPES 16
#define CLI_MAX_SHAPE_INPUTS 8
typedef struct {
    int nvariants;  /* shapes per input (0: no --shapes) */
    int ninputs;    /* --shapes options */
    onnx_input_shape v[CLI_MAX_SHAPES][CLI_MAX_SHAPE_INPUTS];
    char names[CLI_MAX_SHAPE_INPUTS][256];
    int from_inputs; /* the shapes of a run's input files (onnx_import_opts.shapes_from_inputs) */
} cli_shapes;
/* Adds one --shapes option; a usage error saying what is wrong. */
int cli_shapes_add(cli_shapes *s, const char *arg);
/* After the options: the counts agree, several options name their inputs,
 * and with one_only, one shape each (a command that runs one). */
int cli_shapes_check(cli_shapes *s, const char *command, int one_only);
/* The shapes of the --input [NAME=]FILE.npy files into s (one variant,
 * from_inputs), for a model whose inputs have symbolic dimensions beyond
 * the batch: named where the spec names its input, else the first unnamed
 * one only.  Returns status (a file that cannot be read is reported). */
int cli_input_shapes(char **specs, int nspecs, cli_shapes *s);
/* Compiles model (import, passes, CPU backend) into opt->output, refusing an
 * output that is a directory or the model itself; opt->source defaults to
 * model; shapes (NULL: none) size a dynamic image size, one variant.  Errors
 * are printed; returns an exit code. */
int cli_compile(const char *model, const cg_options *opt, const cli_shapes *shapes);
/* cli_load_model with options (o may be NULL). */
ir_graph *cli_load_model_with(const char *path, cli_load_opts *o, int *status);
/* What to tell the user of a model whose export fixed the batch: how to
 * export it with a dynamic one (the graph's inputs named). */
const char *cli_reexport_hint(const ir_graph *g, char *buf, size_t n);

/* --input [NAME=]FILE.npy arguments, matched to the graph's inputs by name or,
 * without names, by position.  Fills inputs[g->ninputs]; returns a status. */
int cli_load_inputs(const ir_graph *g, char **specs, int nspecs, ir_tensor *inputs);
/* An input as the model declares it, for matching and messages. */
typedef struct {
    const char *name, *type; /* type: "f32[B,3,224,224]" */
    int dtype;               /* ir_dtype, or -1: not checked */
} cli_input_sig;
/* The same for n inputs known by their signature (shared by the interpreter
 * and runtime paths): a file whose dtype is not the input's is refused, and
 * a wrong count or name lists the model's inputs. */
int cli_read_inputs(const char *path, const cli_input_sig *sig, int n, char **specs, int nspecs, ir_tensor *inputs);

/* ---- compiled models through the runtime API (cli_rt.c) ---- */
#include "vitc/runtime.h"

int cmd_inspect(int argc, char **argv);
int cmd_compare(int argc, char **argv);
int cmd_bench(int argc, char **argv); /* cmd_bench.c */

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
/* Tensors in --json, one schema in inspect, run and compare: {"name",
 * "dtype": "float32", "shape": ["B", 3, 224, 224]}, the shape a list of
 * numbers where the batch is known, with "B" (or "2*B") where it is symbolic.
 * The dtype's name as numpy spells it ("float32", "int64", "bfloat16") for an
 * ir_dtype; NULL for none. */
const char *cli_dtype_json_name(int dtype);
/* A model input/output as that object (an element of an array). */
void cli_tensor_info_json(json_w *w, const vitc_tensor_info *t);
/* A tensor's "name", "dtype" and "shape" members, into the object open in w. */
void cli_tensor_json_members(json_w *w, const char *name, const ir_tensor *t);
/* t's dims as the array member key: [2, 1000]. */
void cli_json_shape(json_w *w, const char *key, const ir_tensor *t);
/* --input [NAME=]FILE.npy matched to the model's inputs (as cli_load_inputs):
 * fills inputs[vitc_model_num_inputs(m)] in the model's order. */
int cli_rt_load_inputs(const vitc_model *m, const char *path, char **specs, int nspecs, ir_tensor *inputs);
/* The batch that inputs (in the model's order) imply; -1 if none fits. */
int64_t cli_rt_batch_of(const vitc_model *m, const ir_tensor *inputs);
/* Allocates the model's outputs at a batch, of the input shape the inputs
 * (in the model's order) have where it was compiled for several. */
int cli_rt_alloc_outputs(const vitc_model *m, int64_t batch, const ir_tensor *inputs, ir_tensor *outputs);
/* t as vitc_run takes it (no name: matched by position; the data shared). */
void cli_rt_tensor(const ir_tensor *t, vitc_tensor *v);
/* vitc_run on ir_tensors in the model's order; the error printed; returns an exit code. */
int cli_rt_run(vitc_context *c, const vitc_model *m, const ir_tensor *inputs, ir_tensor *outputs);

#endif
