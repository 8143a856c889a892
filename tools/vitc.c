/* vitc.c: the command-line entry point.  Parses the subcommand and hands the
 * rest of the arguments to it; --help and --version live here. */
#include "tools/cli.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char usage[] =
    "usage: vitc <command> [options]\n"
    "\n"
    "vitc compiles Vision Transformers from ONNX.  Commands:\n"
    "  vitc dump MODEL.onnx [--stage imported|optimized] [--format text|dot] [--stats]\n"
    "      Print the graph IR: one node per line with types and shapes in terms of the\n"
    "      batch B (text), a Graphviz graph (dot), or one 'OpType count' line per op\n"
    "      type, sorted by op type (--stats).  --stage imported (default) is the graph\n"
    "      as read, with shapes inferred; --stage optimized is after the passes.\n"
    "  vitc run MODEL.onnx --input [NAME=]FILE.npy ... [--output-dir DIR] [--repeat N]\n"
    "      Run the model with the reference interpreter (plain loops, double\n"
    "      accumulation) and write one NAME.npy per output into DIR (default '.').\n"
    "  vitc --help | --version\n"
    "\n"
    "Exit codes: 0 success, 1 a check failed, 2 bad usage or bad input (unreadable or\n"
    "malformed model, unsupported op, shape mismatch), 3 internal error.  Errors name\n"
    "the file and, where there is one, the ONNX node (name and op_type).\n";

int cli_usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("vitc: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs("\n(run 'vitc --help' for usage)\n", stderr);
    va_end(ap);
    return VITC_BAD_INPUT;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return fputs(usage, stderr), VITC_BAD_INPUT;
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0)
        return fputs(usage, stdout), VITC_OK;
    if (strcmp(cmd, "--version") == 0)
        return printf("vitc %s\n", VITC_VERSION), VITC_OK;
    if (strcmp(cmd, "dump") == 0)
        return cmd_dump(argc - 2, argv + 2);
    if (strcmp(cmd, "run") == 0)
        return cmd_run(argc - 2, argv + 2);
    return cli_usage_error("unknown command '%s'", cmd);
}
