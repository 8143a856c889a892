/* test_cli.c: the vitc command line as a user meets it: --help, --version,
 * dump in its three forms on every fixture, and the corpus of broken and
 * hostile models, each of which must exit 2 with a message naming the file
 * (and the node where there is one), never crash; commands told apart by
 * their first word whatever the directory holds, and every error's "vitc: "
 * prefix and usage hint. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "codegen/knobs.h"
#include "runtime/rt_knobs.h"

static tu_fixture fixtures[64];
static int nfixtures;

static void test_help_and_version(void **state)
{
    char *out, *err;
    const char *help[] = {"--help", NULL};
    assert_int_equal(tu_run_vitc(help, &out, &err), 0);
    assert_non_null(strstr(out, "vitc dump MODEL.onnx"));
    assert_non_null(strstr(out, "Exit codes"));
    free(out), free(err);
    const char *ver[] = {"--version", NULL};
    assert_int_equal(tu_run_vitc(ver, &out, &err), 0);
    assert_true(strncmp(out, "vitc ", 5) == 0);
    assert_non_null(strstr(out, "\nONNX: opsets "));
    assert_non_null(strstr(out, "\n--target cpu: LLVM ")); /* what this vitc generates code with */
    assert_non_null(strstr(out, "\n--target cuda: "));
    free(out), free(err);
    const char *bad[] = {"dump", "--format", "png", "x.onnx", NULL};
    assert_int_equal(tu_run_vitc(bad, &out, &err), 2);
    assert_non_null(strstr(err, "--format must be"));
    free(out), free(err);
    const char *unknown[] = {"frobnicate", NULL};
    assert_int_equal(tu_run_vitc(unknown, &out, &err), 2);
    free(out), free(err);
}

/* --stats: "OpType count" lines, sorted by op type, adding up to the node
 * count that the text dump reports. */
static void test_dump_stats_every_fixture(void **state)
{
    assert_true(nfixtures >= 15);
    for (int i = 0; i < nfixtures; i++) {
        char path[8192], rel[4096], *out, *err;
        snprintf(rel, sizeof rel, "tests/models/%.95s", fixtures[i].model);
        tu_path(path, sizeof path, rel);
        const char *args[] = {"dump", path, "--stats", NULL};
        int rc = tu_run_vitc(args, &out, &err);
        if (rc != 0)
            fail_msg("%s: dump --stats exited %d: %s", fixtures[i].model, rc, err);
        char prev[64] = "", op[64];
        int count, total = 0, lines = 0;
        for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
            if (sscanf(line, "%63s %d", op, &count) != 2 || count <= 0)
                fail_msg("%s: bad stats line '%s'", fixtures[i].model, line);
            if (strcmp(prev, op) >= 0)
                fail_msg("%s: stats not sorted: '%s' after '%s'", fixtures[i].model, op, prev);
            strcpy(prev, op);
            total += count;
            lines++;
        }
        free(out), free(err);
        const char *text[] = {"dump", path, NULL};
        assert_int_equal(tu_run_vitc(text, &out, &err), 0);
        int nodes = -1;
        char *p = strstr(out, "  opset ");
        assert_non_null(p);
        assert_int_equal(sscanf(strstr(p, "opset "), "opset %*d %d nodes", &nodes), 1);
        if (nodes != total)
            fail_msg("%s: stats add up to %d nodes, text dump says %d", fixtures[i].model, total, nodes);
        assert_true(lines >= 5);
        free(out), free(err);
    }
}

/* The dot output is a graph Graphviz accepts. */
static void test_dump_dot_renders(void **state)
{
    if (system("command -v dot > /dev/null 2>&1") != 0)
        tu_skip(); /* Graphviz's `dot` is not installed (setup.sh installs it) */
    for (int i = 0; i < nfixtures; i++) {
        char path[8192], rel[4096], dir[256], dotfile[300], cmd[9000], *out, *err;
        snprintf(rel, sizeof rel, "tests/models/%.95s", fixtures[i].model);
        tu_path(path, sizeof path, rel);
        const char *args[] = {"dump", path, "--format", "dot", NULL};
        assert_int_equal(tu_run_vitc(args, &out, &err), 0);
        assert_non_null(tu_tmpdir(dir, sizeof dir));
        snprintf(dotfile, sizeof dotfile, "%s/g.dot", dir);
        FILE *f = fopen(dotfile, "w");
        fputs(out, f);
        fclose(f);
        snprintf(cmd, sizeof cmd, "dot -Tsvg '%s' -o '%s/g.svg' 2>'%s/err' && test -s '%s/g.svg'", dotfile, dir,
                 dir, dir);
        int rc = system(cmd);
        if (rc != 0)
            fail_msg("%s: Graphviz rejected the dot output (rc %d)", fixtures[i].model, rc);
        tu_rmtree(dir);
        free(out), free(err);
    }
}

/* Every file in tests/data/broken: exit 2, the file named, the expected fragment. */
static void test_broken_models_exit_2(void **state)
{
    char manifest[4096];
    FILE *f = fopen(tu_path(manifest, sizeof manifest, "tests/data/broken/EXPECT.tsv"), "r");
    assert_non_null(f);
    char line[1024];
    int n = 0;
    assert_non_null(fgets(line, sizeof line, f));
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *tab = strchr(line, '\t');
        assert_non_null(tab);
        *tab = 0;
        char rel[2048], path[8192], *out, *err;
        snprintf(rel, sizeof rel, "tests/data/broken/%s", line);
        tu_path(path, sizeof path, rel);
        const char *args[] = {"dump", path, NULL};
        int rc = tu_run_vitc(args, &out, &err);
        if (rc != 2)
            fail_msg("%s: exit %d, expected 2; stderr: %s", line, rc, err);
        if (!strstr(err, path))
            fail_msg("%s: the message does not name the file: %s", line, err);
        if (!strstr(err, tab + 1))
            fail_msg("%s: expected '%s' in: %s", line, tab + 1, err);
        for (const char *l = err; *l; l += strcspn(l, "\n") + (l[strcspn(l, "\n")] == '\n'))
            if (strncmp(l, "vitc: ", 6) != 0) /* one prefix, and no usage hint: the command line was right */
                fail_msg("%s: a line of the error does not start with 'vitc: ': %s", line, err);
        if (strcmp(line, "unsupported-ops.onnx") == 0 && !strstr(err, "Mish x1 (node 'mish0')"))
            fail_msg("every unsupported node must be listed at once: %s", err);
        if (strcmp(line, "unsupported-op-readers.onnx") == 0 && strstr(err, "is not a graph input"))
            fail_msg("the readers of an unsupported node's output must not be reported too: %s", err);
        if (strstr(err, "unsupported operator") && !strstr(err, ": next step: "))
            fail_msg("%s: the unsupported operators come with a next step: %s", line, err);
        if (strcmp(line, "unsupported-ops.onnx") == 0 && /* the graph printed all the same, marked */
            (!strstr(out, "a: f32[B,4] = Relu(x)  # ok0\n") ||
             !strstr(out, "b: ? = Mish(a)  # mish0  !! unsupported\n") ||
             !strstr(out, "y: f32[B,4] = HardSwish(b)  # hswish0  !! unsupported\n") ||
             !strstr(out, "  2 unsupported\n")))
            fail_msg("dump of a model with unsupported operators: the graph with them marked, not:\n%s", out);
        free(out), free(err);
        n++;
    }
    fclose(f);
    assert_true(n >= 25);
    print_message("%d broken models rejected with exit 2\n", n);
}

/* run on the reference interpreter writes NAME.npy and nothing elsewhere. */
static void test_run_writes_outputs(void **state)
{
    char model[4096], input[4096], dir[256], *out, *err;
    tu_path(model, sizeof model, "tests/models/timm-ts17.onnx");
    tu_path(input, sizeof input, "tests/models/timm.b3.input.npy");
    assert_non_null(tu_tmpdir(dir, sizeof dir));
    const char *args[] = {"run", model, "--input", input, "--output-dir", dir, NULL};
    int rc = tu_run_vitc(args, &out, &err);
    if (rc != 0)
        fail_msg("run exited %d: %s", rc, err);
    char path[1024];
    snprintf(path, sizeof path, "%s/output.npy", dir);
    vitc_diag d;
    vitc_diag_init(&d, path);
    ir_tensor got, ref;
    assert_int_equal(ir_npy_read(path, &got, &d), 0);
    tu_path(input, sizeof input, "tests/models/timm.b3.output.npy");
    assert_int_equal(ir_npy_read(input, &ref, &d), 0);
    double e = ir_rel_error(&got, &ref);
    if (!(e <= 1e-5))
        fail_msg("vitc run output differs from PyTorch by %g", e);
    ir_tensor_free(&got), ir_tensor_free(&ref);
    free(out), free(err);
    /* A wrong input shape is a clear error, exit 2. */
    tu_path(input, sizeof input, "tests/models/einops.b1.input.npy");
    tu_path(model, sizeof model, "tests/models/face_ln-ts17.onnx");
    const char *bad[] = {"run", model, "--input", input, "--output-dir", dir, NULL};
    rc = tu_run_vitc(bad, &out, &err);
    if (rc != 2 || !strstr(err, "expected"))
        fail_msg("wrong input shape: exit %d, stderr %s", rc, err);
    free(out), free(err);
    /* A missing --output-dir is made (with its parents) once there is
     * something to write, and only then. */
    char nested[300], parent[300];
    snprintf(parent, sizeof parent, "%s/made", dir);
    snprintf(nested, sizeof nested, "%s/made/here", dir);
    const char *failing[] = {"run", model, "--input", input, "--output-dir", nested, NULL};
    assert_int_equal(tu_run_vitc(failing, &out, &err), 2);
    free(out), free(err);
    struct stat sb;
    assert_int_not_equal(stat(parent, &sb), 0);
    tu_path(input, sizeof input, "tests/models/face_ln.b1.input.npy");
    const char *making[] = {"run", model, "--input", input, "--output-dir", nested, NULL};
    rc = tu_run_vitc(making, &out, &err);
    if (rc != 0)
        fail_msg("run into a missing directory: exit %d, stderr %s", rc, err);
    snprintf(path, sizeof path, "%s/output.npy", nested);
    assert_int_equal(stat(path, &sb), 0);
    free(out), free(err);
    /* A compiled model given where an ONNX file belongs is named as such. */
    snprintf(path, sizeof path, "%s/lib.so", dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fwrite("\177ELF\2\1\1\0\0\0\0\0\0\0\0\0", 1, 16, f);
    fclose(f);
    const char *dump[] = {"dump", path, NULL};
    rc = tu_run_vitc(dump, &out, &err);
    if (rc != 2 || !strstr(err, "shared library"))
        fail_msg("dump of a .so: exit %d, stderr %s", rc, err);
    free(out), free(err);
    tu_rmtree(dir);
}

/* rc, and stderr containing want (NULL: anything). */
static void expect_err(int rc, const char *const *args, const char *want)
{
    char *out, *err;
    int got = tu_run_vitc(args, &out, &err);
    if (got != rc || (want && !strstr(err, want)))
        fail_msg("vitc %s %s: exit %d (want %d), stderr '%s' (want '%s')", args[0], args[1] ? args[1] : "", got, rc,
                 err, want ? want : "");
    free(out), free(err);
}

/* One option grammar: every subcommand answers --help with its own usage and
 * exit 0; typos get the nearest name; an option of another subcommand is
 * named as such; a value to a flag, a missing value and an ambiguous
 * abbreviation are refused; --x=v and --x v mean the same. */
static void test_option_grammar(void **state)
{
    const char *cmds[][3] = {{"run", "vitc run MODEL.onnx|MODEL.so"}, {"dump", "vitc dump MODEL.onnx"},
                             {"compare", "vitc compare MODEL.onnx [MODEL.so]"}, {"inspect", "vitc inspect MODEL.so"},
                             {"x.onnx", "vitc MODEL.onnx -o MODEL.so"},
                             {"compile", "vitc compile MODEL.onnx -o MODEL.so"}, {"bench", "vitc bench MODEL.so"}};
    for (int i = 0; i < 7; i++) {
        char *out, *err;
        const char *h[] = {cmds[i][0], "--help", NULL};
        int rc = tu_run_vitc(h, &out, &err);
        if (rc != 0 || !strstr(out, cmds[i][1]) || !strstr(out, "options:\n") || !strstr(out, "--help"))
            fail_msg("vitc %s --help: exit %d, stdout '%s'", cmds[i][0], rc, out);
        free(out), free(err);
    }
    const char *typo_cmd[] = {"dupm", "m.onnx", NULL};
    expect_err(2, typo_cmd, "did you mean 'dump'?");
    const char *typo_opt[] = {"run", "m.so", "--repaet", "3", NULL};
    expect_err(2, typo_opt, "did you mean --repeat?");
    const char *typo_compile[] = {"m.onnx", "-o", "m.so", "--featrues", "+avx2", NULL};
    expect_err(2, typo_compile, "did you mean --features?");
    const char *foreign[] = {"run", "m.so", "--bisect", NULL};
    expect_err(2, foreign, "--bisect is an option of 'vitc compare', not of 'vitc run'");
    const char *foreign2[] = {"inspect", "m.so", "--threads", "2", NULL};
    expect_err(2, foreign2, "--threads is an option of");
    const char *flag_value[] = {"dump", "m.onnx", "--stats=yes", NULL};
    expect_err(2, flag_value, "--stats takes no value");
    const char *missing[] = {"compare", "m.onnx", "--seed", NULL};
    expect_err(2, missing, "--seed needs a value");
    const char *ambiguous[] = {"compare", "m.onnx", "--b", NULL};
    expect_err(2, ambiguous, "ambiguous");
    const char *bad_count[] = {"run", "m.so", "--threads=-1", NULL};
    expect_err(2, bad_count, "--threads takes a whole number from 0 to 1024, not '-1'");
    /* the same value spelled both ways reaches the command: both report the
     * model file (not the options) as what is wrong */
    const char *eq[] = {"dump", "/nonexistent/m.onnx", "--stage=optimized", NULL};
    const char *sp[] = {"dump", "--stage", "optimized", "/nonexistent/m.onnx", NULL};
    expect_err(2, eq, "/nonexistent/m.onnx");
    expect_err(2, sp, "/nonexistent/m.onnx");
    const char *badstage[] = {"dump", "m.onnx", "--stage", "final", NULL};
    expect_err(2, badstage, "--stage must be");
}

/* rc, stdout containing out_has (NULL: anything), and stderr exactly err_is. */
static void expect_exact(int rc, const char *const *args, const char *out_has, const char *err_is)
{
    char *out, *err;
    int got = tu_run_vitc(args, &out, &err);
    if (got != rc || (out_has && !strstr(out, out_has)) || strcmp(err, err_is) != 0)
        fail_msg("vitc %s %s: exit %d (want %d), stdout '%.300s' (want '%s'), stderr\n'%s'\nwant\n'%s'", args[0],
                 args[1] ? args[1] : "", got, rc, out, out_has ? out_has : "", err, err_is);
    free(out), free(err);
}

static void touch(const char *path)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
}

/* `vitc compile MODEL -o SO` and the bare `vitc MODEL.onnx -o SO`; the first
 * word is a command or a model by the word alone: in a directory holding
 * folders bench/ and docs/ and files named run, inspect and foo, `vitc docs
 * --help` is an unknown command (not the compile's help), `vitc bench
 * --help` is bench's and `vitc run --help` is run's,
 * and a file named like a command (or without .onnx) is compiled through
 * `vitc compile NAME` or `./NAME`, a usage error saying so otherwise. */
static void test_command_by_word(void **state)
{
    char dir[256], cwd[4096], model[4096], so[300];
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_non_null(tu_tmpdir(dir, sizeof dir));
    tu_path(model, sizeof model, "examples/vit-tiny.onnx");
    char cp[9000];
    snprintf(cp, sizeof cp, "cp '%s' '%s/inspect' && cp '%s' '%s/foo'", model, dir, model, dir);
    assert_int_equal(system(cp), 0);
    snprintf(cp, sizeof cp, "%s/bench", dir);
    assert_int_equal(mkdir(cp, 0755), 0);
    snprintf(cp, sizeof cp, "%s/docs", dir);
    assert_int_equal(mkdir(cp, 0755), 0);
    snprintf(cp, sizeof cp, "%s/run", dir);
    touch(cp);
    assert_int_equal(chdir(dir), 0);

    const char *docs[] = {"docs", "--help", NULL};
    expect_exact(2, docs, NULL,
                 "vitc: unknown command 'docs' (a model to compile ends in .onnx or holds a '/')\n"
                 "(run 'vitc --help' for usage)\n");
    const char *bench_help[] = {"bench", "--help", NULL};
    expect_exact(0, bench_help, "usage:\n  vitc bench MODEL.so", "");
    const char *run_help[] = {"run", "--help", NULL};
    expect_exact(0, run_help, "usage:\n  vitc run MODEL.onnx|MODEL.so --input", "");
    const char *foo[] = {"foo", "-o", "foo.so", NULL};
    expect_exact(2, foo, NULL,
                 "vitc: unknown command 'foo'; to compile the file foo, run 'vitc compile foo -o MODEL.so' "
                 "(without 'compile', a model's name must end in .onnx or hold a '/')\n"
                 "(run 'vitc --help' for usage)\n");
    const char *shadowed[] = {"inspect", "-o", "x.so", NULL};
    expect_exact(2, shadowed, NULL,
                 "vitc: inspect: unknown option '-o'\n"
                 "vitc: 'inspect' is the command inspect here, not the file inspect in this directory; to compile "
                 "that file: 'vitc compile inspect -o MODEL.so'\n"
                 "(run 'vitc inspect --help' for usage)\n");
    const char *typo[] = {"comple", "m.onnx", NULL};
    expect_exact(2, typo, NULL, "vitc: unknown command 'comple'; did you mean 'compile'?\n"
                                "(run 'vitc --help' for usage)\n");
    const char *c1[] = {"compile", "inspect", "-o", "a.so", "-O0", "-q", NULL};
    expect_exact(0, c1, NULL, "");
    const char *c2[] = {"./foo", "-o", "b.so", "-O0", "-q", NULL};
    expect_exact(0, c2, NULL, "");
    const char *c3[] = {"compile", "-q", "-O0", model, "-o", "c.so", NULL};
    expect_exact(0, c3, NULL, "");
    const char *c4[] = {model, "-o", "d.so", "-O0", "-q", NULL};
    expect_exact(0, c4, NULL, "");
    struct stat sb;
    const char *made[] = {"a.so", "b.so", "c.so", "d.so"};
    for (int i = 0; i < 4; i++)
        if (stat(made[i], &sb) != 0)
            fail_msg("%s was not written", made[i]);
    snprintf(so, sizeof so, "%s/a.so", dir);
    const char *insp[] = {"inspect", so, NULL};
    expect_exact(0, insp, "input", "");
    const char *no_model[] = {"compile", "-o", "e.so", NULL};
    expect_exact(2, no_model, NULL, "vitc: no model given\n(run 'vitc compile --help' for usage)\n");

    /* the help of the compile, under both names */
    char *h1, *h2, *e;
    const char *help1[] = {"compile", "--help", NULL}, *help2[] = {"help", "compile", NULL};
    assert_int_equal(tu_run_vitc(help1, &h1, &e), 0);
    free(e);
    assert_int_equal(tu_run_vitc(help2, &h2, &e), 0);
    free(e);
    assert_string_equal(h1, h2);
    if (!strstr(h1, "usage:\n  vitc compile MODEL.onnx -o MODEL.so [--batch N]") ||
        !strstr(h1, "\n  vitc MODEL.onnx -o MODEL.so [options]\n"))
        fail_msg("vitc compile --help:\n%s", h1);
    free(h1), free(h2);
    assert_int_equal(chdir(cwd), 0);
    tu_rmtree(dir);
}

/* Every error starts "vitc: "; the "(run 'vitc COMMAND --help' for usage)"
 * hint follows usage errors only (the command line itself wrong), naming the
 * command; an option of another command names both as they are typed. */
static void test_error_prefix_and_hint(void **state)
{
    char dir[256], model[4096], bad[4300], sub[300];
    assert_non_null(tu_tmpdir(dir, sizeof dir));
    tu_path(model, sizeof model, "examples/vit-tiny.onnx");
    const char *batch[] = {"run", "m.so", "--batch", "2", NULL};
    expect_exact(2, batch, NULL,
                 "vitc: run: --batch is an option of 'vitc compile', not of 'vitc run'\n"
                 "(run 'vitc run --help' for usage)\n");
    const char *threads[] = {"m.onnx", "--threads", "2", "-o", "m.so", NULL};
    expect_exact(2, threads, NULL,
                 "vitc: compile: --threads is an option of 'vitc run', not of 'vitc compile'\n"
                 "(run 'vitc compile --help' for usage)\n");
    const char *choice[] = {"compile", "m.onnx", "--target=gpu", "-o", "m.so", NULL};
    expect_exact(2, choice, NULL,
                 "vitc: compile: --target takes 'cpu' or 'cuda', not 'gpu'\n(run 'vitc compile --help' for usage)\n");
    /* not usage errors: a directory as -o, a file that is not there, a model
     * that does not parse, a compiled model that does not load */
    char want[4400];
    const char *outdir[] = {model, "-o", dir, NULL};
    snprintf(want, sizeof want, "vitc: -o %s is a directory; give the path of the .so to write\n", dir);
    expect_exact(2, outdir, NULL, want);
    snprintf(sub, sizeof sub, "%s/missing/m.so", dir);
    const char *nodir[] = {"compile", model, "-o", sub, NULL};
    snprintf(want, sizeof want, "vitc: the output directory %s/missing does not exist\n", dir);
    expect_exact(2, nodir, NULL, want);
    snprintf(bad, sizeof bad, "%s/missing.onnx", dir);
    const char *missing[] = {"dump", bad, NULL};
    snprintf(want, sizeof want, "vitc: %s: cannot open: No such file or directory\n", bad);
    expect_exact(2, missing, NULL, want);
    snprintf(bad, sizeof bad, "%s/junk.so", dir);
    touch(bad);
    const char *junk[] = {"inspect", bad, NULL};
    char *out, *err;
    assert_int_equal(tu_run_vitc(junk, &out, &err), 2);
    if (strncmp(err, "vitc: ", 6) != 0 || strstr(err, "--help") || strchr(err, '\n') != err + strlen(err) - 1)
        fail_msg("inspect of an empty file: one line starting 'vitc: ', no hint: '%s'", err);
    free(out), free(err);
    tu_rmtree(dir);
}

/* Writes a .npy file of descr and shape (zeros) to dir/name; returns its path. */
static char *write_npy(const char *dir, const char *name, const char *descr, const char *shape, size_t bytes)
{
    static char path[4][4096];
    static int next;
    char *p = path[next++ % 4], h[128];
    snprintf(p, 4096, "%s/%s", dir, name);
    int n = snprintf(h, sizeof h, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape);
    while ((10 + n + 1) % 64)
        h[n++] = ' ';
    h[n++] = '\n';
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    fputc(n & 0xff, f), fputc(n >> 8, f);
    fwrite(h, 1, (size_t)n, f);
    for (size_t i = 0; i < bytes; i++)
        fputc(0, f);
    fclose(f);
    return p;
}

/* Input files that are not what the model takes get a message naming the
 * file and what is wrong with it. */
static void test_input_file_messages(void **state)
{
    char dir[4096], model[4096], spec[4200];
    tu_tmpdir(dir, sizeof dir);
    tu_path(model, sizeof model, "examples/vit-tiny.onnx");
    const char *be = write_npy(dir, "be.npy", ">f4", "(1, 3, 32, 32)", 3 * 32 * 32 * 4);
    const char *a1[] = {"run", model, "--input", be, NULL};
    expect_err(2, a1, "npy element type '>f4' is not supported (big-endian");
    const char *f64 = write_npy(dir, "f64.npy", "<f8", "(1, 3, 32, 32)", 3 * 32 * 32 * 8);
    const char *a2[] = {"run", model, "--input", f64, NULL};
    expect_err(2, a2, "f64.npy: holds f64 values; input 'input' of");
    char npz[4200];
    snprintf(npz, sizeof npz, "%s/x.npz", dir);
    FILE *f = fopen(npz, "wb");
    assert_non_null(f);
    static const char zip[] = "PK\x03\x04 not really a zip";
    fwrite(zip, 1, sizeof zip - 1, f);
    fclose(f);
    const char *a3[] = {"run", model, "--input", npz, NULL};
    expect_err(2, a3, "is a .npz archive");
    const char *a4[] = {"run", model, "--input", dir, NULL};
    expect_err(2, a4, "is a directory");
    snprintf(spec, sizeof spec, "pixels=%s", f64);
    const char *a5[] = {"run", model, "--input", spec, NULL};
    expect_err(2, a5, "no input named 'pixels' (its input: input f32[B,3,32,32])");
    const char *a6[] = {"run", model, NULL};
    expect_err(2, a6, "0 --input given");
    tu_rmtree(dir);
}

/* README.md's usage block is `vitc --help`, byte for byte
 * (tools/update-readme-usage.sh rewrites it). */
static void test_readme_usage_is_help(void **state)
{
    char path[4096], *out, *err;
    const char *help[] = {"--help", NULL};
    assert_int_equal(tu_run_vitc(help, &out, &err), 0);
    size_t len;
    char *readme = tu_read_file(tu_path(path, sizeof path, "README.md"), &len);
    assert_non_null(readme);
    char *begin = strstr(readme, "<!-- vitc --help: begin");
    assert_non_null(begin);
    begin = strstr(begin, "```\n");
    assert_non_null(begin);
    begin += 4;
    char *end = strstr(begin, "```\n<!-- vitc --help: end");
    assert_non_null(end);
    *end = 0;
    if (strcmp(begin, out) != 0)
        fail_msg("README.md's usage block differs from `vitc --help`: run tools/update-readme-usage.sh");
    free(readme), free(out), free(err);
}

/* The line of `vitc help env` naming knob k says its default. */
static void expect_knob_listed(const char *out, const vitc_knob *k)
{
    char want[256];
    snprintf(want, sizeof want, "  %s ", k->name);
    const char *line = strstr(out, want);
    if (!line)
        fail_msg("vitc help env does not list %s:\n%s", k->name, out);
    snprintf(want, sizeof want, "default %s", *k->def ? k->def : "unset");
    const char *def = strstr(line, want);
    if (!def || def > line + strcspn(line, "\n"))
        fail_msg("vitc help env: %s's line does not say '%s': %.*s", k->name, want, (int)strcspn(line, "\n"), line);
}

/* `vitc help env` lists every knob of the compiler's table (codegen/knobs.def)
 * and of the runtime's (runtime/knobs.c) with its default.  A CPU model
 * records no knob (`vitc inspect`: "knobs: none"), a CUDA one set while it
 * was compiled included: it changes no CPU code. */
static void test_help_env_and_cpu_knobs(void **state)
{
    char *out, *err, model[4096], dir[256], so[512];
    const char *env[] = {"help", "env", NULL};
    assert_int_equal(tu_run_vitc(env, &out, &err), 0);
    for (int i = 0; i < cg_nknobs; i++)
        expect_knob_listed(out, &cg_knob_table[i].k);
    for (int i = 0; i < RT_NKNOBS; i++)
        expect_knob_listed(out, &rt_knob_table[i]);
    print_message("vitc help env: %d compiler and %d runtime knobs listed\n", cg_nknobs, (int)RT_NKNOBS);
    free(out), free(err);

    tu_path(model, sizeof model, "tests/models/face_ln-ts17.onnx");
    assert_non_null(tu_tmpdir(dir, sizeof dir));
    snprintf(so, sizeof so, "%s/cpu.so", dir);
    const char *build[] = {model, "--batch", "2", "-O0", "-o", so, NULL}, *insp[] = {"inspect", so, NULL};
    setenv("VITC_CUDA_SPLIT_K", "0", 1);
    int rc = tu_run_vitc(build, &out, &err);
    unsetenv("VITC_CUDA_SPLIT_K");
    if (rc != 0)
        fail_msg("vitc with VITC_CUDA_SPLIT_K=0 exited %d: %s", rc, err);
    free(out), free(err);
    assert_int_equal(tu_run_vitc(insp, &out, &err), 0);
    if (!strstr(out, "\nknobs:      none\n"))
        fail_msg("a CPU model compiled with VITC_CUDA_SPLIT_K=0: inspect does not say 'knobs:      none':\n%s", out);
    free(out), free(err);
    tu_rmtree(dir);
}

/* --precision on the CPU: fp32, bf16 or int8, and bf16 only for a CPU with AMX or
 * AVX512-BF16 (and AVX-512); a --cpu LLVM does not know, with the names it
 * is near; a refused compile writes nothing.  Runs on any x86-64 host (--cpu
 * names one). */
static void test_cpu_precision_refusals(void **state)
{
    (void)state;
    char model[4096], dir[256], so[512];
    tu_path(model, sizeof model, "tests/models/timm-ts17.onnx");
    assert_non_null(tu_tmpdir(dir, sizeof dir));
    snprintf(so, sizeof so, "%s/m.so", dir);
    const char *nobf16[] = {model, "--cpu", "znver3", "--precision", "bf16", "-o", so, NULL};
    expect_err(2, nobf16, "--precision bf16 on the CPU needs AMX (amx-tile, amx-bf16) or avx512bf16, with AVX-512");
    const char *noavx512[] = {model, "--features=-avx512f", "--precision", "bf16", "-o", so, NULL};
    expect_err(2, noavx512, "--precision bf16 on the CPU needs AMX");
    const char *tf32[] = {model, "--precision", "tf32", "-o", so, NULL};
    expect_err(2, tf32, "the CPU backend computes in fp32, bf16 or int8 (--precision fp32|bf16|int8), not 'tf32'");
    /* a misspelt --cpu: the processors LLVM knows that it is near */
    const char *prefix[] = {model, "--cpu", "znver", "-o", so, NULL};
    expect_err(2, prefix, "--cpu 'znver' is not a processor LLVM knows for");
    expect_err(2, prefix, "did you mean znver1, znver2");
    const char *typo[] = {model, "--cpu", "sapphirerapid", "-o", so, NULL};
    expect_err(2, typo, "did you mean sapphirerapids?");
    const char *far[] = {model, "--cpu", "qq", "-o", so, NULL};
    expect_err(2, far, "(for example x86-64-v3, x86-64-v4, skylake-avx512, znver4)");
    struct stat sb;
    assert_int_not_equal(stat(so, &sb), 0);
    tu_rmtree(dir);
}

/* The value of the last "key": NUMBER in a JSON text, NAN if absent. */
static double json_number(const char *text, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *p = text ? strstr(text, pat) : NULL, *q;
    while (p && (q = strstr(p + 1, pat))) /* the last: the output's, after the tolerance's */
        p = q;
    return p ? strtod(p + strlen(pat), NULL) : NAN;
}

/* --precision bf16, each fixture model, compiled with the extra arguments
 * given: `vitc compare` finds it within the bf16 bars (1e-2 of max|ref|,
 * cosine >= 0.9999) against the interpreter's fp32, and further from it
 * than the fp32 build (the Linear layers did run in bf16); inspect names
 * the precision and lists AMX only for the tiles (amx 1) and never for
 * fp32; the descriptor's list asks for what the kernels use. */
static void precision_bf16_models(const char *extra, int amx)
{
    char dir[256], model[4096], so[512], so32[512];
    assert_non_null(tu_tmpdir(dir, sizeof dir));
    int checked = 0;
    for (int i = 0; i < nfixtures; i++) {
        if (strcmp(fixtures[i].exporter, "ts17") != 0)
            continue;
        snprintf(so, sizeof so, "%s/%s.bf16.so", dir, fixtures[i].family);
        snprintf(so32, sizeof so32, "%s/%s.so", dir, fixtures[i].family);
        tu_path(model, sizeof model, "tests/models/");
        strncat(model, fixtures[i].model, sizeof model - strlen(model) - 1);
        char *out, *err;
        const char *c16[] = {model, "--precision", "bf16", "-q", "-o", so, extra ? extra : NULL, NULL};
        const char *c32[] = {model, "-q", "-o", so32, NULL};
        if (tu_run_vitc(c16, &out, &err) != 0)
            fail_msg("%s --precision bf16 %s: %s", fixtures[i].model, extra ? extra : "", err);
        free(out), free(err);
        if (tu_run_vitc(c32, &out, &err) != 0)
            fail_msg("%s: %s", fixtures[i].model, err);
        free(out), free(err);
        double e[2], cosine = NAN;
        for (int k = 0; k < 2; k++) {
            const char *cmp[] = {"compare", model, k ? so32 : so, "--json", NULL};
            int rc = tu_run_vitc(cmp, &out, &err);
            e[k] = json_number(out, "max_rel");
            if (!k) {
                cosine = json_number(out, "cosine");
                if (!strstr(out, "\"max_rel\": 0.01,") || !strstr(out, "\"min_cosine\": 0.9999"))
                    fail_msg("%s: compare did not take the bf16 tolerance: %s", fixtures[i].model, out);
            }
            if (rc != 0)
                fail_msg("compare %s %s: exit %d\n%s%s", fixtures[i].model, k ? so32 : so, rc, out, err);
            free(out), free(err);
        }
        printf("  %-22s bf16%s: max_rel %.2e cosine %.7f; fp32: max_rel %.2e\n", fixtures[i].model,
               amx ? " (AMX)" : " (AVX512-BF16)", e[0], cosine, e[1]);
        if (!(e[0] <= 1e-2 && cosine >= 0.9999 && e[0] > 10 * e[1]))
            fail_msg("%s: bf16 error %g (cosine %g) against fp32's %g", fixtures[i].model, e[0], cosine, e[1]);
        const char *i16[] = {"inspect", so, NULL}, *i32[] = {"inspect", so32, NULL};
        assert_int_equal(tu_run_vitc(i16, &out, &err), 0);
        assert_non_null(strstr(out, "precision bf16"));
        if (amx)
            assert_non_null(strstr(out, "amx-tile"));
        else
            assert_true(!strstr(out, "amx-tile") && strstr(out, "+avx512bf16"));
        free(out), free(err);
        assert_int_equal(tu_run_vitc(i32, &out, &err), 0);
        assert_non_null(strstr(out, "precision fp32"));
        assert_null(strstr(out, "amx-tile"));
        free(out), free(err);
        checked++;
    }
    assert_true(checked >= 4);
    tu_rmtree(dir);
}

/* --precision bf16 on an AMX host (the Linear layers on tiles); skipped,
 * saying why, elsewhere. */
static void test_precision_bf16_amx(void **state)
{
    if (tu_bf16_cpu(1))
        precision_bf16_models(NULL, 1);
}

/* --precision bf16 on a host with AVX512-BF16 (VDPBF16PS: where the host has
 * no AMX, and on an AMX host too with AMX taken away by --features); skipped,
 * saying why, elsewhere. */
static void test_precision_bf16_dot(void **state)
{
    if (tu_bf16_cpu(0))
        precision_bf16_models("--features=-amx-tile,-amx-bf16", 0);
}

static int setup(void **state)
{
    (void)state;
    nfixtures = tu_fixtures(fixtures, 64);
    return 0;
}

TU_MAIN(setup, NULL, test_help_and_version, test_dump_stats_every_fixture, test_dump_dot_renders,
        test_broken_models_exit_2, test_run_writes_outputs, test_option_grammar, test_command_by_word,
        test_error_prefix_and_hint, test_readme_usage_is_help,
        test_help_env_and_cpu_knobs, test_input_file_messages, test_cpu_precision_refusals, test_precision_bf16_amx,
        test_precision_bf16_dot)
