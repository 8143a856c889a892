/* fuzz_common.c: plumbing the harnesses share: a /dev/null sink for the
 * printers and diagnostics, and a scratch model directory with external-data
 * files in it (a plain file, a short one and a symlink leading outside), so
 * that fuzzed external-data references reach real files and real escapes. */
#include "fuzz.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static FILE *devnull;
static char model_dir[256], model_path[300];

FILE *fz_devnull(void)
{
    if (!devnull && !(devnull = fopen("/dev/null", "w")))
        fz_die("cannot open /dev/null", NULL);
    return devnull;
}

void fz_diag(vitc_diag *d, const char *file)
{
    vitc_diag_init(d, file);
    const char *v = getenv("VITC_FUZZ_VERBOSE");
    d->out = v && *v == '1' ? stderr : fz_devnull();
}

static void remove_model_dir(void)
{
    static const char *const names[] = {"weights.bin", "small.bin", "link.bin", NULL};
    char p[400];
    for (int i = 0; names[i]; i++) {
        snprintf(p, sizeof p, "%s/%s", model_dir, names[i]);
        unlink(p);
    }
    rmdir(model_dir);
}

static int write_file(const char *dir, const char *name, size_t n)
{
    char p[400];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (!f)
        return -1;
    for (size_t i = 0; i < n; i++)
        fputc((int)(i * 37 % 251), f);
    return fclose(f);
}

const char *fz_model_path(void)
{
    if (model_path[0])
        return model_path;
    const char *tmp = getenv("TMPDIR");
    snprintf(model_dir, sizeof model_dir, "%s/vitc-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(model_dir))
        fz_die("cannot create the scratch model directory", NULL);
    atexit(remove_model_dir);
    char link[400];
    snprintf(link, sizeof link, "%s/link.bin", model_dir);
    if (write_file(model_dir, "weights.bin", 1 << 16) || write_file(model_dir, "small.bin", 12) ||
        symlink("/etc/hostname", link))
        fz_die("cannot fill the scratch model directory", NULL);
    snprintf(model_path, sizeof model_path, "%s/model.onnx", model_dir);
    return model_path;
}

void fz_die(const char *what, const vitc_diag *d)
{
    fprintf(stderr, "FUZZ FINDING: %s (status %d, %d errors)\n", what, d ? d->status : -1, d ? d->nerrors : 0);
    fflush(stderr);
    abort();
}
