/* testutil.h: what the cmocka tests share: paths, the fixture manifest,
 * running the vitc CLI and capturing its output. */
#ifndef VITC_TESTUTIL_H
#define VITC_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "ir/ir.h"

/* Source tree root (env VITC_SOURCE_DIR, else "."). */
const char *tu_source_dir(void);
/* Joins the source root with a relative path into a static-free buffer. */
char *tu_path(char *buf, size_t n, const char *rel);

typedef struct {
    char model[96];    /* file name inside tests/models */
    char family[32];
    char exporter[16]; /* ts13, ts17, dynamo */
    int opset, depth, heads, width, tokens, image, has_batchnorm;
} tu_fixture;

/* Reads tests/models/fixtures.tsv; returns the count (0 if missing). */
int tu_fixtures(tu_fixture *out, int max);

/* Runs the vitc binary (env VITC_BIN) with args (NULL-terminated, without
 * argv[0]); captures stdout and stderr into malloc'ed strings (free them).
 * Returns the exit code, or -1 if it could not run or was killed. */
int tu_run_vitc(const char *const *args, char **out, char **err);

/* A fresh temporary directory (mkdtemp); removed by tu_rmtree. */
char *tu_tmpdir(char *buf, size_t n);
void tu_rmtree(const char *dir);

#endif
