/* link.c: from object file to the .so the user asked for.  Everything is
 * built in a private directory next to the output (so nothing is written
 * outside where the user asked, and the final rename stays on one file
 * system); the object is linked by the system's C compiler driver ($CC or
 * cc, run with posix_spawnp, never through a shell) against libm only; the
 * external weights file, if any, and then the .so are renamed into place.
 * On any failure nothing is left at the output paths. */
#include "codegen/llvm/cg_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

uint64_t cg_fnv1a(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

void cg_weights_file_name(const char *output, char *buf, size_t n)
{
    const char *base = strrchr(output, '/');
    snprintf(buf, n, "%s.weights", base ? base + 1 : output);
}

/* The directory part of path ("." when it has none). */
static void dir_of(const char *path, char *buf, size_t n)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(buf, n, ".");
    else if (slash == path)
        snprintf(buf, n, "/");
    else
        snprintf(buf, n, "%.*s", (int)(slash - path), path);
}

int cg_tmpdir_create(cg_ctx *cg, char *dir, size_t n)
{
    char parent[PATH_MAX];
    dir_of(cg->opt->output, parent, sizeof parent);
    if ((size_t)snprintf(dir, n, "%s/.vitc-XXXXXX", parent) >= n)
        return cg_fail(cg, VITC_BAD_INPUT, -1, "the output path '%s' is too long", cg->opt->output);
    if (!mkdtemp(dir))
        return cg_fail(cg, VITC_BAD_INPUT, -1, "cannot create a temporary directory in '%s': %s", parent,
                       strerror(errno));
    return VITC_OK;
}

void cg_tmpdir_remove(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char p[PATH_MAX];
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 &&
                (size_t)snprintf(p, sizeof p, "%s/%s", dir, e->d_name) < sizeof p)
                unlink(p);
        closedir(d);
    }
    rmdir(dir);
}

/* Reads up to n-1 bytes of a file into buf (for the linker's messages). */
static void read_log(const char *path, char *buf, size_t n)
{
    buf[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    size_t r = fread(buf, 1, n - 1, f);
    buf[r] = 0;
    fclose(f);
    while (r > 0 && (buf[r - 1] == '\n' || buf[r - 1] == ' '))
        buf[--r] = 0;
}

/* Runs the C compiler driver to link obj into so.  $CC may hold a command
 * with arguments separated by spaces ("ccache gcc"). */
static int run_linker(cg_ctx *cg, const char *dir, const char *obj, const char *blob_obj, const char *so)
{
    const char *cc_env = getenv("CC");
    char cc[1024];
    snprintf(cc, sizeof cc, "%s", cc_env && *cc_env ? cc_env : "cc");
    char *argv[48];
    int argc = 0;
    for (char *tok = strtok(cc, " \t"); tok && argc < 32; tok = strtok(NULL, " \t"))
        argv[argc++] = tok;
    if (argc == 0)
        return cg_fail(cg, VITC_BAD_INPUT, -1, "$CC is empty");
    const char *tail[] = {"-shared", "-o", so, obj, "-lm", "-Wl,-z,noexecstack", "-Wl,-z,defs", NULL};
    for (int i = 0; tail[i]; i++)
        argv[argc++] = (char *)tail[i];
    if (blob_obj)
        argv[argc++] = (char *)blob_obj;
    argv[argc] = NULL;

    char log[PATH_MAX];
    snprintf(log, sizeof log, "%s/link.log", dir);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0)
        return cg_fail(cg, VITC_BAD_INPUT, -1, "cannot run the C compiler driver '%s' to link the model (set CC): %s",
                       argv[0], strerror(rc));
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return cg_fail(cg, VITC_INTERNAL, -1, "waiting for '%s': %s", argv[0], strerror(errno));
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return VITC_OK;
    char msg[4096];
    read_log(log, msg, sizeof msg);
    if (WIFSIGNALED(status))
        return cg_fail(cg, VITC_INTERNAL, -1, "linking with '%s' was killed by signal %d%s%s", argv[0],
                       WTERMSIG(status), *msg ? ":\n" : "", msg);
    return cg_fail(cg, VITC_INTERNAL, -1, "linking with '%s' failed (exit %d)%s%s", argv[0], WEXITSTATUS(status),
                   *msg ? ":\n" : "", msg);
}

static int write_file(cg_ctx *cg, const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return cg_fail(cg, VITC_BAD_INPUT, -1, "cannot write %s: %s", path, strerror(errno));
    size_t w = n ? fwrite(data, 1, n, f) : 0;
    int bad = w != n;
    if (fclose(f) != 0)
        bad = 1;
    if (bad)
        return cg_fail(cg, VITC_BAD_INPUT, -1, "writing %s failed: %s", path, strerror(errno));
    return VITC_OK;
}

int cg_link_install(cg_ctx *cg, const char *dir, const char *obj)
{
    char so[PATH_MAX], wtmp[PATH_MAX], wdst[PATH_MAX], parent[PATH_MAX], wname[PATH_MAX], wobj[PATH_MAX];
    snprintf(so, sizeof so, "%s/model.so", dir);
    snprintf(wobj, sizeof wobj, "%s/weights.o", dir);
    int st = cg->blob_object ? cg_write_blob_object(cg, wobj, CG_WEIGHTS_SYMBOL) : VITC_OK;
    if (st == VITC_OK)
        st = run_linker(cg, dir, obj, cg->blob_object ? wobj : NULL, so);
    if (st)
        return st;
    int have_weights = 0;
    if (cg->opt->external_weights) {
        dir_of(cg->opt->output, parent, sizeof parent);
        cg_weights_file_name(cg->opt->output, wname, sizeof wname);
        snprintf(wtmp, sizeof wtmp, "%s/model.weights", dir);
        if ((size_t)snprintf(wdst, sizeof wdst, "%s/%s", parent, wname) >= sizeof wdst)
            return cg_fail(cg, VITC_BAD_INPUT, -1, "the output path '%s' is too long", cg->opt->output);
        if ((st = write_file(cg, wtmp, cg->blob, cg->blob_len)))
            return st;
        if (rename(wtmp, wdst) != 0)
            return cg_fail(cg, VITC_BAD_INPUT, -1, "cannot write %s: %s", wdst, strerror(errno));
        have_weights = 1;
    }
    if (rename(so, cg->opt->output) != 0) {
        int e = errno;
        if (have_weights)
            unlink(wdst);
        return cg_fail(cg, VITC_BAD_INPUT, -1, "cannot write %s: %s", cg->opt->output, strerror(e));
    }
    return VITC_OK;
}
