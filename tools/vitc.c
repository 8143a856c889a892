/* vitc.c: the command-line entry point.  Picks the subcommand by the first
 * word (a command's name, else the bare compile for a model's path or an
 * option) and hands the rest of the arguments to it; --help, --version,
 * `help env` (the VITC_* environment variables) and the error messages'
 * prefix and usage hint live here. */
#include "tools/cli.h"

#include "frontend/onnx.h"
#include "runtime/rt_knobs.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

const cli_command *const cli_commands[] = {
    &cli_compile_command, &cli_dump_command, &cli_run_command, &cli_compare_command, &cli_inspect_command,
    &cli_bench_command, NULL,
};

/* Writes text with every line indented by n spaces. */
static void put_indented(FILE *f, const char *text, int n)
{
    while (*text) {
        size_t len = strcspn(text, "\n");
        fprintf(f, "%*s%.*s\n", n, "", (int)len, text);
        text += len + (text[len] == '\n');
    }
}

/* Writes words indented by n spaces, in lines of at most about 100 columns. */
static void put_wrapped(FILE *f, const char *text, int n)
{
    int col = 0;
    while (*text) {
        size_t len = strcspn(text, " ");
        if (col && col + 1 + (int)len > 100) {
            fputc('\n', f);
            col = 0;
        }
        col += col ? fprintf(f, " %.*s", (int)len, text) : fprintf(f, "%*s%.*s", n, "", (int)len, text);
        text += len;
        text += strspn(text, " ");
    }
    fputc('\n', f);
}

static void put_knob(FILE *f, const vitc_knob *k, const char *shapes)
{
    fprintf(f, "  %-28s %s, default %s%s%s\n", k->name, vitc_knob_type_name(k->type), *k->def ? k->def : "unset",
            shapes ? "; changes the code of --target " : "", shapes ? shapes : "");
    put_wrapped(f, k->doc, 6);
}

/* `vitc help env`: the VITC_* environment variables, from the compiler's
 * table (codegen/knobs.def) and the runtime's (runtime/knobs.c). */
static void env_usage(FILE *f)
{
    fprintf(f, "Environment variables read when compiling (a .so records those that change its code and are set\n"
               "to other than their defaults; 'vitc inspect MODEL.so' shows them):\n");
    for (int i = 0; i < cg_nknobs; i++)
        put_knob(f, &cg_knob_table[i].k, cg_knob_table[i].shapes);
    fprintf(f, "\nRead by the runtime (libvitc_runtime) where a model loads or runs:\n");
    for (int i = 0; i < RT_NKNOBS; i++)
        put_knob(f, &rt_knob_table[i], NULL);
}

/* `vitc --help`: every command's synopsis and what it does. */
static void usage(FILE *f)
{
    fprintf(f, "usage: vitc <command> [options]\n\n"
               "vitc compiles Vision Transformers from ONNX.  Commands ('vitc COMMAND --help' lists a command's\n"
               "options; '--x=v' and '--x v' mean the same everywhere):\n\n");
    for (const cli_command *const *c = cli_commands; *c; c++) {
        put_indented(f, (*c)->synopsis, 2);
        put_indented(f, (*c)->about, 6);
        fputc('\n', f);
    }
    fprintf(f, "  vitc help env\n"
               "      List the VITC_* environment variables: their types, defaults and what each changes.\n\n"
               "  vitc --help | --version\n\n"
               "Exit codes: 0 success, 1 a check failed, 2 bad usage or bad input (unreadable or malformed\n"
               "model, unsupported op, shape mismatch), 3 internal error.  Errors start with 'vitc: ' and\n"
               "name the file and, where there is one, the ONNX node (name and op_type); a usage error (the\n"
               "command line itself wrong) ends with \"(run 'vitc COMMAND --help' for usage)\".\n");
}

/* The command being run ("run", "compile"; NULL before one is known), for
 * the hint after a usage error; shadow: a file in the current directory
 * named as that command, which the command line did not mean. */
static const char *current_command, *shadow;

static void put_error(const char *fmt, va_list ap)
{
    fflush(stdout); /* what was printed before the error comes before it */
    fputs("vitc: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

int cli_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    put_error(fmt, ap);
    va_end(ap);
    return VITC_BAD_INPUT;
}

int cli_usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    put_error(fmt, ap);
    va_end(ap);
    if (shadow)
        fprintf(stderr, "vitc: '%s' is the command %s here, not the file %s in this directory; to compile that "
                        "file: 'vitc compile %s -o MODEL.so'\n", shadow, shadow, shadow, shadow);
    if (current_command)
        fprintf(stderr, "(run 'vitc %s --help' for usage)\n", current_command);
    else
        fputs("(run 'vitc --help' for usage)\n", stderr);
    return VITC_BAD_INPUT;
}

/* 1 if the first word of a command line (not a command's name) starts the
 * bare compile, `vitc MODEL.onnx -o MODEL.so`: an option, or a model's path,
 * a name ending in .onnx or holding a '/' (`vitc ./run` compiles the file
 * run, `vitc run` is the command). */
static int bare_compile(const char *word)
{
    size_t n = strlen(word);
    return word[0] == '-' || strchr(word, '/') || (n > 5 && strcmp(word + n - 5, ".onnx") == 0);
}

int main(int argc, char **argv)
{
    vitc_diag_set_program("vitc"); /* one prefix on every error */
    if (argc < 2)
        return usage(stderr), VITC_BAD_INPUT;
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0)
        return usage(stdout), VITC_OK;
    if (strcmp(cmd, "help") == 0) { /* `vitc help run` = `vitc run --help` */
        if (argc > 2 && strcmp(argv[2], "env") == 0)
            return env_usage(stdout), VITC_OK;
        for (const cli_command *const *c = cli_commands; argc > 2 && *c; c++)
            if (strcmp((*c)->name, argv[2]) == 0)
                return cli_print_help(*c, stdout), VITC_OK;
        return usage(stdout), VITC_OK;
    }
    if (strcmp(cmd, "--version") == 0) {
        printf("vitc %s\nONNX: opsets %d-%d\n", VITC_VERSION, ONNX_MIN_OPSET, ONNX_MAX_OPSET);
        for (const cg_backend *const *be = cg_backends; *be; be++)
            printf("--target %s: %s\n", (*be)->name,
                   (*be)->unavailable ? (*be)->unavailable
                   : (*be)->describe  ? (*be)->describe()
                                      : "available");
        return VITC_OK;
    }
    struct stat sb;
    for (const cli_command *const *c = cli_commands; *c; c++)
        if (strcmp((*c)->name, cmd) == 0) {
            current_command = cmd;
            if (stat(cmd, &sb) == 0 && S_ISREG(sb.st_mode))
                shadow = cmd; /* said after a usage error, in case the file was meant */
            return (*c)->main(argc - 2, argv + 2);
        }
    /* The bare compile, `vitc MODEL.onnx -o MODEL.so`: decided by the word
     * alone, never by what the directory holds, so that a file or folder
     * named like a command cannot change what a command line means. */
    if (bare_compile(cmd)) {
        current_command = "compile";
        return cmd_compile(argc - 1, argv + 1);
    }
    const char *names[] = {"compile", "dump", "run", "compare", "inspect", "bench", "help"};
    const char *near = cli_nearest(cmd, names, 7);
    if (stat(cmd, &sb) == 0 && S_ISREG(sb.st_mode))
        return cli_usage_error("unknown command '%s'; to compile the file %s, run 'vitc compile %s -o MODEL.so' "
                               "(without 'compile', a model's name must end in .onnx or hold a '/')",
                               cmd, cmd, cmd);
    if (near)
        return cli_usage_error("unknown command '%s'; did you mean '%s'?", cmd, near);
    return cli_usage_error("unknown command '%s' (a model to compile ends in .onnx or holds a '/')", cmd);
}
