/* test_hostile.c: files from strangers, through the vitc command line.
 *
 * - every model the fuzzers found a bug with (tests/data/fuzz-regressions)
 *   is dumped as imported and as optimized, and compiled (`vitc MODEL -o
 *   OUT.so`): exit 0 or 2, never a signal, a sanitizer report or an
 *   internal error, and a refusal names the file;
 * - every model of the broken corpus (tests/data/broken), given to `vitc run`
 *   and to `vitc MODEL -o OUT.so`, exits 2
 *   and leaves its output directory empty;
 * - hostile .npy inputs (truncated, huge shapes, wrong order or type, extra
 *   bytes) and the .npy fuzz regressions are refused by `vitc run` with exit 2
 *   and a message naming the .npy file, writing nothing. */
#include "testutil.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Names of the files in dir (relative to the source root) ending in ext,
 * sorted; returns the count (names malloc'ed, free with free_names). */
static int list_files(const char *dir, const char *ext, char ***names)
{
    char path[4096];
    DIR *d = opendir(tu_path(path, sizeof path, dir));
    *names = NULL;
    if (!d)
        return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name), el = strlen(ext);
        if (len <= el || strcmp(e->d_name + len - el, ext) != 0)
            continue;
        char **nn = realloc(*names, (size_t)(n + 1) * sizeof **names);
        assert_non_null(nn);
        *names = nn;
        (*names)[n++] = strdup(e->d_name);
    }
    closedir(d);
    for (int i = 1; i < n; i++) /* insertion sort: a few dozen names */
        for (int j = i; j > 0 && strcmp((*names)[j - 1], (*names)[j]) > 0; j--) {
            char *t = (*names)[j];
            (*names)[j] = (*names)[j - 1];
            (*names)[j - 1] = t;
        }
    return n;
}

static void free_names(char **names, int n)
{
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* Number of entries in dir other than . and .. */
static int dir_entries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

static void test_fuzz_regressions_exit_0_or_2(void **state)
{
    char **names;
    int n = list_files("tests/data/fuzz-regressions", ".onnx", &names);
    if (n == 0) {
        print_message("no models in tests/data/fuzz-regressions: nothing recorded to replay\n");
        tu_skip();
    }
    int refused = 0, compiled = 0;
    char dir[256], so[300];
    assert_non_null(tu_tmpdir(dir, sizeof dir));
    snprintf(so, sizeof so, "%s/out.so", dir);
    for (int i = 0; i < n; i++) {
        char rel[2048], path[8192], *out, *err;
        snprintf(rel, sizeof rel, "tests/data/fuzz-regressions/%s", names[i]);
        tu_path(path, sizeof path, rel);
        for (int optimized = 0; optimized < 2; optimized++) {
            const char *args[] = {"dump", path, "--stage", optimized ? "optimized" : "imported", NULL};
            int rc = tu_run_vitc(args, &out, &err);
            if (rc != 0 && rc != 2)
                fail_msg("%s (%s): exit %d, expected 0 or 2; stderr: %s", names[i],
                         optimized ? "optimized" : "imported", rc, err);
            if (rc == 2 && !strstr(err, path))
                fail_msg("%s: the refusal does not name the file: %s", names[i], err);
            refused += rc == 2 && !optimized;
            free(out), free(err);
        }
        { /* what dump accepts, the compiler must compile or refuse cleanly */
            const char *cc[] = {path, "-o", so, NULL};
            int rc = tu_run_vitc(cc, &out, &err);
            if (rc != 0 && rc != 2)
                fail_msg("compile %s: exit %d, expected 0 or 2; stderr: %s", names[i], rc, err);
            compiled += rc == 0;
            free(out), free(err);
            remove(so);
        }
    }
    print_message("%d fuzz-regression models: %d refused by dump with exit 2, %d accepted, none crashed", n,
                  refused, n - refused);
    print_message("; %d compiled, %d refused by the compiler with exit 2\n", compiled, n - compiled);
    tu_rmtree(dir);
    free_names(names, n);
}

/* Runs `vitc run model --input input --output-dir dir`; fails unless it exits
 * with 2 and its stderr names the file at fault (bad) and says fragment (if given). */
static void expect_run_refused(const char *what, const char *model, const char *input, const char *dir,
                               const char *bad, const char *fragment)
{
    char *out, *err;
    const char *args[] = {"run", model, "--input", input, "--output-dir", dir, NULL};
    int rc = tu_run_vitc(args, &out, &err);
    if (rc != 2 || !strstr(err, bad) || (fragment && !strstr(err, fragment)))
        fail_msg("run %s: exit %d, expected 2 with the file named%s%s; stderr: %s", what, rc,
                 fragment ? " and " : "", fragment ? fragment : "", err);
    free(out), free(err);
}

static void test_broken_models_leave_no_output(void **state)
{
    char **names;
    int n = list_files("tests/data/broken", ".onnx", &names);
    assert_true(n >= 25);
    char input[4096], dir[256];
    tu_path(input, sizeof input, "tests/models/timm.b1.input.npy");
    assert_non_null(tu_tmpdir(dir, sizeof dir));
    for (int i = 0; i < n; i++) {
        char rel[2048], path[8192], so[512], *out, *err;
        snprintf(rel, sizeof rel, "tests/data/broken/%s", names[i]);
        tu_path(path, sizeof path, rel);
        expect_run_refused(names[i], path, input, dir, path, NULL);
        snprintf(so, sizeof so, "%s/out.so", dir);
        const char *cc[] = {path, "-o", so, NULL};
        int rc = tu_run_vitc(cc, &out, &err);
        if (rc != 2)
            fail_msg("compile %s: exit %d, expected 2; stderr: %s", names[i], rc, err);
        free(out), free(err);
        int left = dir_entries(dir);
        if (left != 0)
            fail_msg("%s: %d files left in the output directory", names[i], left);
    }
    print_message("%d broken models: `vitc run` and `vitc MODEL -o OUT.so` exit 2 and write nothing\n", n);
    tu_rmtree(dir);
    free_names(names, n);
}

/* A .npy file with the given header dict (padded as numpy does) and payload. */
static void write_npy(const char *path, int version, const char *dict, size_t hlen_override, size_t payload)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    size_t pre = version == 1 ? 10 : 12, len = strlen(dict) + 1;
    size_t pad = (64 - (pre + len) % 64) % 64, hlen = hlen_override ? hlen_override : len + pad;
    fwrite("\x93NUMPY", 1, 6, f);
    fputc(version, f), fputc(0, f);
    for (size_t i = 0; i < (version == 1 ? 2u : 4u); i++)
        fputc((int)((hlen >> (8 * i)) & 0xff), f);
    fputs(dict, f);
    for (size_t i = 0; i < pad; i++)
        fputc(' ', f);
    fputc('\n', f);
    for (size_t i = 0; i < payload; i++)
        fputc(0, f);
    fclose(f);
}

static void test_hostile_npy_inputs_exit_2(void **state)
{
    static const struct {
        const char *name, *dict, *fragment;
        int version;
        size_t hlen, payload;
    } cases[] = {
        {"huge-shape.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (1000, 1000, 1000), }",
         "data size does not match", 1, 0, 16},
        {"short-data.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 3, 32, 32), }",
         "data size does not match", 1, 0, 100},
        {"extra-data.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 3, 32, 32), }",
         "data size does not match", 1, 0, 3 * 32 * 32 * 4 + 1},
        {"fortran.npy", "{'descr': '<f4', 'fortran_order': True, 'shape': (1, 3, 32, 32), }", "not in C order", 1,
         0, 3 * 32 * 32 * 4},
        {"big-endian.npy", "{'descr': '>f4', 'fortran_order': False, 'shape': (1, 3, 32, 32), }",
         "is not supported", 1, 0, 3 * 32 * 32 * 4},
        {"rank-9.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 1, 1, 1), }",
         "rank above 8", 1, 0, 4},
        {"negative-dim.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (-1, 3), }", "malformed", 1, 0, 12},
        {"huge-header.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", "oversized .npy header", 2,
         0xffffffffu, 4},
        {"no-shape.npy", "{'descr': '<f4', 'fortran_order': False, }", "has no shape", 1, 0, 4},
    };
    char dir[256], outdir[300], model[4096];
    assert_non_null(tu_tmpdir(dir, sizeof dir));
    snprintf(outdir, sizeof outdir, "%s/out", dir);
    char mk[400];
    snprintf(mk, sizeof mk, "mkdir '%s'", outdir);
    assert_int_equal(system(mk), 0);
    tu_path(model, sizeof model, "tests/models/timm-ts17.onnx");
    int ncases = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < ncases; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, cases[i].name);
        write_npy(path, cases[i].version, cases[i].dict, cases[i].hlen, cases[i].payload);
        expect_run_refused(cases[i].name, model, path, outdir, path, cases[i].fragment);
    }
    char **names;
    int n = list_files("tests/data/fuzz-regressions", ".npy", &names);
    for (int i = 0; i < n; i++) {
        char rel[2048], path[8192];
        snprintf(rel, sizeof rel, "tests/data/fuzz-regressions/%s", names[i]);
        tu_path(path, sizeof path, rel);
        expect_run_refused(names[i], model, path, outdir, path, NULL);
    }
    assert_int_equal(dir_entries(outdir), 0);
    print_message("%d hostile .npy inputs and %d .npy fuzz regressions refused with exit 2\n", ncases, n);
    free_names(names, n);
    tu_rmtree(dir);
}

TU_MAIN(NULL, NULL, test_fuzz_regressions_exit_0_or_2, test_broken_models_leave_no_output,
        test_hostile_npy_inputs_exit_2)
