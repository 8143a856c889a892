/* fuzz_common.c: plumbing the harnesses share: a /dev/null sink for the
 * printers and diagnostics, and a scratch model directory with external-data
 * files in it (a plain file, a short one and a symlink leading outside), so
 * that fuzzed external-data references reach real files and real escapes. */
#include "fuzz.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static FILE *devnull;
static char model_dir[256], model_path[300];

FILE *fz_devnull(void)
{
    if (!devnull && !(devnull = fopen("/dev/null", "w")))
        fz_die("cannot open /dev/null", NULL);
    return devnull;
}

/* Diagnostics go to one scratch file, emptied for each diag set up, so that
 * a finding can show the messages that led to it. */
static FILE *diag_log;

void fz_diag(vitc_diag *d, const char *file)
{
    vitc_diag_init(d, file);
    const char *v = getenv("VITC_FUZZ_VERBOSE");
    if (v && *v == '1') {
        d->out = stderr;
        return;
    }
    if (!diag_log && !(diag_log = tmpfile()))
        fz_die("cannot create the diagnostics scratch file", NULL);
    fflush(diag_log);
    if (ftruncate(fileno(diag_log), 0))
        fz_die("cannot empty the diagnostics scratch file", NULL);
    rewind(diag_log);
    d->out = diag_log;
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
    if (d && d->out == diag_log && diag_log) {
        char buf[4096];
        fflush(diag_log);
        rewind(diag_log);
        size_t n = fread(buf, 1, sizeof buf - 1, diag_log);
        buf[n] = 0;
        fprintf(stderr, "its diagnostics:\n%s\n", buf);
    }
    fflush(stderr);
    abort();
}

const char *fz_bytes_file(const uint8_t *data, size_t size)
{
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("vitc-fuzz-file", MFD_CLOEXEC);
        if (fd < 0)
            fz_die("memfd_create failed", NULL);
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) != 0 || (size && pwrite(fd, data, size, 0) != (ssize_t)size))
        fz_die("cannot fill the in-memory file", NULL);
    return path;
}
