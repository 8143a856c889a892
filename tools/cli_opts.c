/* cli_opts.c: the one option grammar of every vitc subcommand.  Each command
 * describes its options in a cli_command table; cli_parse reads them with
 * glibc's getopt_long (so `--x=v` and `--x v` mean the same everywhere, and
 * options may come before or after the positional arguments), answers
 * --help/-h with that command's help, stores the values of the options whose
 * row says where (a string, a flag, a count in its range, one of its choices)
 * and hands the others to the command, and turns every mistake into one
 * message: a missing value, a value given to a flag, an ambiguous
 * abbreviation, an unknown option with the nearest known one suggested, or an
 * option that belongs to another subcommand. */
#include "tools/cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_OPTIONS 48

static int nopts(const cli_command *cmd)
{
    int n = 0;
    while (cmd->options && cmd->options[n].name)
        n++;
    return n;
}

/* Edit distance of a and b, a swap of neighbours counting as one edit (at
 * most 63 bytes of each considered). */
static int distance(const char *a, const char *b)
{
    int la = (int)strnlen(a, 63), lb = (int)strnlen(b, 63), d[64][64];
    for (int i = 0; i <= la; i++)
        d[i][0] = i;
    for (int j = 0; j <= lb; j++)
        d[0][j] = j;
    for (int i = 1; i <= la; i++)
        for (int j = 1; j <= lb; j++) {
            int best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < best)
                best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best)
                best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[la][lb];
}

const char *cli_nearest(const char *word, const char *const *candidates, int n)
{
    const char *best = NULL;
    int bd = 1 << 30, len = (int)strlen(word);
    for (int i = 0; i < n; i++) {
        int d = distance(word, candidates[i]);
        if (d < bd) {
            bd = d;
            best = candidates[i];
        }
    }
    /* close enough to be a typo: a third of the word, at least one edit */
    return best && bd <= (len > 5 ? len / 3 : 1) + (len > 8) ? best : NULL;
}

/* The option text a user wrote at argv[at], without dashes and "=value". */
static void option_word(const char *arg, char *out, size_t n)
{
    while (*arg == '-')
        arg++;
    snprintf(out, n, "%.*s", (int)strcspn(arg, "="), arg);
}

static int unknown_option(const cli_command *cmd, const char *arg)
{
    char word[64];
    option_word(arg, word, sizeof word);
    const char *label = cmd->name;
    int n = nopts(cmd), exact = -1, prefixed = 0;
    for (int i = 0; i < n; i++) {
        if (strcmp(cmd->options[i].name, word) == 0)
            exact = i;
        else if (*word && strncmp(cmd->options[i].name, word, strlen(word)) == 0)
            prefixed++;
    }
    if (exact >= 0 && strchr(arg, '=') && !cmd->options[exact].arg)
        return cli_usage_error("%s: --%s takes no value", label, word);
    if (exact < 0 && prefixed > 1 && arg[1] == '-')
        return cli_usage_error("%s: '%s' is ambiguous (an abbreviation of %d options)", label, arg, prefixed);
    /* an option of another subcommand */
    for (const cli_command *const *c = cli_commands; *c; c++) {
        if (*c == cmd)
            continue;
        for (const cli_option *o = (*c)->options; o && o->name; o++)
            if (*word && strcmp(o->name, word) == 0)
                return cli_usage_error("%s: --%s is an option of 'vitc %s', not of 'vitc %s'", label, word, (*c)->name,
                                       cmd->name);
    }
    const char *names[MAX_OPTIONS + 1];
    for (int i = 0; i < n && i < MAX_OPTIONS; i++)
        names[i] = cmd->options[i].name;
    names[n < MAX_OPTIONS ? n : MAX_OPTIONS] = "help";
    const char *near = cli_nearest(word, names, (n < MAX_OPTIONS ? n : MAX_OPTIONS) + 1);
    if (near)
        return cli_usage_error("%s: unknown option '%s'; did you mean --%s?", label, arg, near);
    return cli_usage_error("%s: unknown option '%s' ('vitc %s --help' lists its options)", label, arg, cmd->name);
}

void cli_print_help(const cli_command *cmd, FILE *f)
{
    fprintf(f, "usage:\n  ");
    for (const char *p = cmd->synopsis; *p; p++) /* each line indented by two */
        fprintf(f, *p == '\n' ? "\n  " : "%c", *p);
    fprintf(f, "\n\n%s\n", cmd->about);
    int n = nopts(cmd);
    if (n)
        fprintf(f, "\noptions:\n");
    for (int i = 0; i < n; i++) {
        const cli_option *o = &cmd->options[i];
        char head[64];
        int k = o->key > 0 && o->key < 256 ? snprintf(head, sizeof head, "-%c, ", o->key)
                                            : snprintf(head, sizeof head, "    ");
        snprintf(head + k, sizeof head - (size_t)k, "--%s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
        /* the help text, wrapped under its own column */
        fprintf(f, "  %-26s", head);
        int col = 28;
        if (strlen(head) > 24) {
            fprintf(f, "\n%28s", "");
        }
        for (const char *h = o->help; *h;) {
            size_t w = strcspn(h, " ");
            if (col > 28 && col + 1 + (int)w > 100) {
                fprintf(f, "\n%28s", "");
                col = 28;
            } else if (col > 28) {
                fputc(' ', f);
                col++;
            }
            fprintf(f, "%.*s", (int)w, h);
            col += (int)w;
            h += w;
            while (*h == ' ')
                h++;
        }
        fputc('\n', f);
    }
    fprintf(f, "  -h, --help                Show this help.\n");
}

/* "'a' or 'b'", "'a', 'b' or 'c'": the words of a CLI_CHOICE's arg. */
static void choice_words(const char *arg, char *out, size_t n)
{
    size_t k = 0;
    out[0] = 0;
    for (const char *w = arg; *w && k < n;) {
        size_t len = strcspn(w, "|");
        const char *sep = w == arg ? "" : w[len] ? ", " : " or ";
        k += (size_t)snprintf(out + k, n - k, "%s'%.*s'", sep, (int)len, w);
        w += len + (w[len] == '|');
    }
}

/* Stores the value v of a CLI_STRING, CLI_FLAG, CLI_COUNT or CLI_CHOICE
 * option where it says, into ctx; a count out of range or a word not among the
 * choices is a usage error. */
static int store_value(const cli_command *cmd, const cli_option *o, const char *v, void *ctx)
{
    char *at = (char *)ctx + o->at;
    switch (o->store) {
    case CLI_STRING:
        *(const char **)at = v;
        return VITC_OK;
    case CLI_FLAG:
        *(int *)at = 1;
        return VITC_OK;
    case CLI_COUNT:
        return cli_parse_count(cmd, o->name, v, o->lo, o->hi, (long long *)at);
    case CLI_CHOICE:
        for (const char *w = o->arg; *w;) {
            size_t len = strcspn(w, "|");
            if (strlen(v) == len && strncmp(w, v, len) == 0) {
                *(const char **)at = v;
                return VITC_OK;
            }
            w += len + (w[len] == '|');
        }
        char words[256];
        choice_words(o->arg, words, sizeof words);
        return cli_usage_error("%s: --%s takes %s, not '%s'", cmd->name, o->name, words, v);
    case CLI_TAKE:
        break;
    }
    return VITC_INTERNAL;
}

/* The option getopt_long returned: a long one by its index (a stored one's
 * key is 0), a short one by its key. */
static const cli_option *option_of(const cli_command *cmd, int c, int longi)
{
    if (longi >= 0)
        return &cmd->options[longi];
    for (const cli_option *o = cmd->options; o && o->name; o++)
        if (o->key == c)
            return o;
    return NULL;
}

int cli_take_model(const cli_command *cmd, const char **model, const char *v)
{
    if (*model)
        return cli_usage_error("%s: more than one model given ('%s' and '%s')", cmd->name, *model, v);
    *model = v;
    return VITC_OK;
}

int cli_parse(const cli_command *cmd, int argc, char **argv, cli_take take, void *ctx)
{
    int n = nopts(cmd);
    if (n > MAX_OPTIONS)
        return VITC_INTERNAL;
    struct option longs[MAX_OPTIONS + 2];
    char shorts[2 * MAX_OPTIONS + 8] = "-:h"; /* '-': positionals in order; ':': report a missing value */
    size_t ns = strlen(shorts);
    for (int i = 0; i < n; i++) {
        const cli_option *o = &cmd->options[i];
        longs[i] = (struct option){o->name, o->arg ? required_argument : no_argument, NULL, o->key};
        if (o->key > 0 && o->key < 256) {
            shorts[ns++] = (char)o->key;
            if (o->arg)
                shorts[ns++] = ':';
        }
    }
    shorts[ns] = 0;
    longs[n] = (struct option){"help", no_argument, NULL, 'h'};
    longs[n + 1] = (struct option){0, 0, 0, 0};

    /* getopt_long wants argv[0] to be the program and may permute the rest:
     * it works on a copy. */
    char **av = calloc((size_t)argc + 2, sizeof *av);
    if (!av)
        return VITC_INTERNAL;
    av[0] = (char *)"vitc";
    memcpy(av + 1, argv, sizeof *av * (size_t)argc);
    int status = VITC_OK;
    opterr = 0;
    optind = 0; /* start afresh (glibc) */
    for (;;) {
        int longi = -1;
        int c = getopt_long(argc + 1, av, shorts, longs, &longi);
        if (c == -1)
            break;
        const char *at = av[optind - 1 > 0 ? optind - 1 : 1];
        if (c == 'h') {
            cli_print_help(cmd, stdout);
            status = CLI_HELP_SHOWN;
        } else if (c == 1) {
            status = take(ctx, CLI_POSITIONAL, optarg);
        } else if (c == ':') {
            char word[64];
            option_word(at, word, sizeof word);
            status = cli_usage_error("%s: %s%s needs a value", cmd->name, at[1] == '-' ? "--" : "-", word);
        } else if (c == '?') {
            status = optopt && !(at[0] == '-' && at[1] == '-') ? cli_usage_error("%s: unknown option '-%c'",
                                                                                 cmd->name, optopt)
                                                               : unknown_option(cmd, at);
        } else {
            const cli_option *o = option_of(cmd, c, longi);
            status = !o ? VITC_INTERNAL
                     : o->store == CLI_TAKE ? take(ctx, c, optarg)
                                            : store_value(cmd, o, optarg, ctx);
        }
        if (status != VITC_OK)
            break;
    }
    /* after "--", the rest are positionals */
    for (int i = optind; status == VITC_OK && i < argc + 1; i++)
        status = take(ctx, CLI_POSITIONAL, av[i]);
    free(av);
    return status;
}

int cli_parse_count(const cli_command *cmd, const char *option, const char *value, long long lo, long long hi,
                    long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(value, &end, 10);
    if (!*value || *end || errno || v < lo || v > hi)
        return cli_usage_error("%s: --%s takes a whole number from %lld to %lld, not '%s'", cmd->name, option,
                               lo, hi, value);
    *out = v;
    return VITC_OK;
}
