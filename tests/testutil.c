/* testutil.c: paths, fixtures, subprocesses for the tests. */
#include "testutil.h"

#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

const char *tu_source_dir(void)
{
    const char *s = getenv("VITC_SOURCE_DIR");
    return s && *s ? s : VITC_SOURCE_DIR_DEFAULT;
}

char *tu_path(char *buf, size_t n, const char *rel)
{
    snprintf(buf, n, "%s/%s", tu_source_dir(), rel);
    return buf;
}

int tu_fixtures(tu_fixture *out, int max)
{
    char path[4096];
    FILE *f = fopen(tu_path(path, sizeof path, "tests/models/fixtures.tsv"), "r");
    if (!f)
        return 0;
    char line[1024];
    int n = 0;
    if (!fgets(line, sizeof line, f)) { /* header */
        fclose(f);
        return 0;
    }
    while (n < max && fgets(line, sizeof line, f)) {
        tu_fixture *x = &out[n];
        memset(x, 0, sizeof *x);
        if (sscanf(line, "%95s %31s %15s %d %d %d %d %d %d %d", x->model, x->family, x->exporter, &x->opset,
                   &x->depth, &x->heads, &x->width, &x->tokens, &x->image, &x->has_batchnorm) >= 9)
            n++;
    }
    fclose(f);
    return n;
}

static char *slurp(FILE *f)
{
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)(len > 0 ? len : 0) + 1);
    size_t r = len > 0 ? fread(s, 1, (size_t)len, f) : 0;
    s[r] = 0;
    return s;
}

int tu_run_vitc(const char *const *args, char **out, char **err)
{
    const char *bin = getenv("VITC_BIN");
    if (!bin)
        bin = "vitc";
    const char *argv[64];
    int n = 0;
    argv[n++] = bin;
    for (; args[n - 1] && n < 63; n++)
        argv[n] = args[n - 1];
    argv[n] = NULL;
    FILE *fo = tmpfile(), *fe = tmpfile();
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fileno(fo), 1);
    posix_spawn_file_actions_adddup2(&fa, fileno(fe), 2);
    pid_t pid;
    int rc = -1;
    if (posix_spawnp(&pid, bin, &fa, NULL, (char *const *)argv, environ) == 0) {
        int st;
        if (waitpid(pid, &st, 0) == pid && WIFEXITED(st))
            rc = WEXITSTATUS(st);
        else if (WIFSIGNALED(st))
            fprintf(stderr, "vitc died with signal %d\n", WTERMSIG(st));
    }
    posix_spawn_file_actions_destroy(&fa);
    char *so = slurp(fo), *se = slurp(fe);
    fclose(fo);
    fclose(fe);
    if (out)
        *out = so;
    else
        free(so);
    if (err)
        *err = se;
    else
        free(se);
    return rc;
}

char *tu_tmpdir(char *buf, size_t n)
{
    snprintf(buf, n, "%s/vitc-test-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    return mkdtemp(buf);
}

void tu_rmtree(const char *dir)
{
    if (!dir || strncmp(dir, "/tmp/vitc-test-", 15) != 0)
        return;
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}
