/* package.c: from objects to the .so the user asked for, for every backend.
 * Everything is built in a private directory next to the output (so nothing
 * is written outside where the user asked, and the final rename stays on one
 * file system); the objects are linked by the system's C compiler driver ($CC
 * or cc, run with posix_spawnp, never through a shell) against libm only; the
 * external weights file, if any, and then the .so are renamed into place.
 * On any failure nothing is left at the output paths.  The weights blob the
 * backends fill lives here too. */
#include "codegen/package.h"

#include "runtime/abi.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* ---- the weights blob ---- */

int64_t cg_blob_reserve(cg_blob *b, size_t n, void **p)
{
    size_t off = (b->len + 63) & ~(size_t)63, need = off + n;
    if (need < off)
        return -1;
    if (need > b->cap) {
        size_t cap = b->cap ? b->cap : 1 << 16;
        while (cap < need)
            cap = cap > SIZE_MAX / 2 ? need : cap * 2;
        unsigned char *nb = realloc(b->data, cap);
        if (!nb)
            return -1;
        b->data = nb;
        b->cap = cap;
    }
    memset(b->data + b->len, 0, need - b->len);
    b->len = need;
    *p = b->data + off;
    return (int64_t)off;
}

int64_t cg_blob_add(cg_blob *b, const void *data, size_t n)
{
    void *p;
    int64_t off = cg_blob_reserve(b, n, &p);
    if (off >= 0 && n)
        memcpy(p, data, n);
    return off;
}

void cg_blob_free(cg_blob *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

/* ---- the .so ---- */

static int fail(cg_package *p, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(cg_package *p, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vitc_verror(p->d, status, NULL, fmt, ap);
    va_end(ap);
    return status;
}

int cg_check_io(const ir_graph *g, vitc_diag *d)
{
    for (int k = 0; k < g->ninputs + g->noutputs; k++) {
        const ir_value *v = &g->values[k < g->ninputs ? g->inputs[k] : g->outputs[k - g->ninputs]];
        if (v->rank > VITC_ABI_MAX_RANK)
            return vitc_error(d, VITC_BAD_INPUT, NULL, "'%s' has rank %d; compiled models take at most %d",
                              v->name, v->rank, VITC_ABI_MAX_RANK);
        /* the element types the runtime's API carries (include/vitc/runtime.h) */
        static const ir_dtype io_types[] = {IR_F32, IR_F64, IR_F16, IR_BF16, IR_I64, IR_I32, IR_I8, IR_U8, IR_BOOL};
        int ok = 0;
        for (size_t t = 0; t < sizeof io_types / sizeof io_types[0]; t++)
            ok |= v->dtype == io_types[t];
        if (!ok)
            return vitc_error(d, VITC_BAD_INPUT, NULL,
                              "%s '%s' is %s; compiled models take and give f32, f64, f16, bf16, i64, i32, i8, u8 "
                              "or bool tensors", k < g->ninputs ? "input" : "output", v->name,
                              ir_dtype_name(v->dtype));
        for (int i = 0; i < v->rank; i++)
            if (v->dims[i].e > 1)
                return vitc_error(d, VITC_BAD_INPUT, NULL,
                                  "'%s' has a dimension in a power of the batch; compiled models allow k*B only",
                                  v->name);
    }
    return VITC_OK;
}

const char *cg_base_name(const char *path)
{
    const char *s = path ? strrchr(path, '/') : NULL;
    return s ? s + 1 : path ? path : "";
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

int cg_package_begin(cg_package *p, const cg_options *opt, vitc_diag *d)
{
    char parent[PATH_MAX];
    p->opt = opt;
    p->d = d;
    p->dir[0] = 0;
    dir_of(opt->output, parent, sizeof parent);
    if ((size_t)snprintf(p->dir, sizeof p->dir, "%s/.vitc-XXXXXX", parent) >= sizeof p->dir) {
        p->dir[0] = 0;
        return fail(p, VITC_BAD_INPUT, "the output path '%s' is too long", opt->output);
    }
    if (!mkdtemp(p->dir)) {
        p->dir[0] = 0;
        return fail(p, VITC_BAD_INPUT, "cannot write -o %s: no file can be created in '%s' (%s)", opt->output, parent,
                    strerror(errno));
    }
    return VITC_OK;
}

int cg_package_path(cg_package *p, const char *name, char *buf, size_t n)
{
    if ((size_t)snprintf(buf, n, "%s/%s", p->dir, name) < n)
        return 1;
    fail(p, VITC_BAD_INPUT, "the output path '%s' is too long", p->opt->output);
    return 0;
}

void cg_package_end(cg_package *p)
{
    if (!p->dir[0])
        return;
    DIR *d = opendir(p->dir);
    if (d) {
        struct dirent *e;
        char path[PATH_MAX];
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 &&
                (size_t)snprintf(path, sizeof path, "%s/%s", p->dir, e->d_name) < sizeof path)
                unlink(path);
        closedir(d);
    }
    rmdir(p->dir);
    p->dir[0] = 0;
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

/* Runs the C compiler driver.  $CC may hold a command with arguments
 * separated by spaces ("ccache gcc"). */
/* 1 if an executable named name is on $PATH. */
static int on_path(const char *name)
{
    const char *path = getenv("PATH");
    char buf[PATH_MAX];
    while (path && *path) {
        const char *end = strchr(path, ':');
        size_t len = end ? (size_t)(end - path) : strlen(path);
        if (len > 0 && (size_t)snprintf(buf, sizeof buf, "%.*s/%s", (int)len, path, name) < sizeof buf &&
            access(buf, X_OK) == 0)
            return 1;
        path = end ? end + 1 : NULL;
    }
    return 0;
}

const char *cg_package_linker(void)
{
    const char *cc_env = getenv("CC");
    if (cc_env && *cc_env)
        return cc_env;
    /* lld writes a model with hundreds of MB of weights several times faster
     * than the BFD linker (it maps its output); cc's own linker otherwise. */
    return on_path("ld.lld") ? "cc -fuse-ld=lld" : "cc";
}

int cg_package_reserves(void)
{
    const char *cc_env = getenv("CC");
    return !(cc_env && *cc_env) && on_path("ld.lld");
}

/* The script that makes room for the late bytes: after the .vitc.late
 * sections (their 64 bytes), after .bss, the end of the image, in a
 * read-only segment of its own (the section is SHF_ALLOC only).  Not between
 * the code and its constants, data and unwind tables: with weights over 2 GB
 * (ViT-H/14's 2.5 GB) their PC-relative references would not reach across
 * the hole.  lld does not write a region no input section covers: it stays
 * a hole until it is filled. */
static int write_reserve_script(cg_package *p, const char *path, size_t reserve)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return fail(p, VITC_BAD_INPUT, "cannot write %s: %s", path, strerror(errno));
    fprintf(f,
            "/* vitc: room for the weights, written into the linked file after the link */\n"
            "SECTIONS\n{\n  .vitc.late : ALIGN(64)\n  {\n    *(.vitc.late)\n    . += %zu;\n  }\n}\n"
            "INSERT AFTER .bss;\n",
            reserve);
    if (fclose(f) != 0)
        return fail(p, VITC_BAD_INPUT, "writing %s failed: %s", path, strerror(errno));
    return VITC_OK;
}

int cg_package_link(cg_package *p, const char *const *inputs, int n, size_t late)
{
    size_t reserve = late && cg_package_reserves() ? late : 0;
    char cc[1024], so[PATH_MAX], log[PATH_MAX], script[PATH_MAX], script_arg[PATH_MAX + 8];
    if (!cg_package_path(p, "model.so", so, sizeof so) || !cg_package_path(p, "link.log", log, sizeof log) ||
        !cg_package_path(p, "reserve.ld", script, sizeof script))
        return p->d->status;
    if (reserve) {
        int st = write_reserve_script(p, script, reserve);
        if (st)
            return st;
        snprintf(script_arg, sizeof script_arg, "-Wl,-T,%s", script);
    }
    snprintf(cc, sizeof cc, "%s", cg_package_linker());
    enum { MAX_INPUTS = 8 };
    char *argv[32 + 10 + MAX_INPUTS + 1];
    int argc = 0;
    for (char *tok = strtok(cc, " \t"); tok && argc < 32; tok = strtok(NULL, " \t"))
        argv[argc++] = tok;
    if (argc == 0)
        return fail(p, VITC_BAD_INPUT, "$CC is empty");
    if (n > MAX_INPUTS)
        return fail(p, VITC_INTERNAL, "%d files to link (at most %d)", n, MAX_INPUTS);
    const char *head[] = {"-shared", "-fPIC", "-o", so, NULL};
    for (int i = 0; head[i]; i++)
        argv[argc++] = (char *)head[i];
    for (int i = 0; i < n; i++)
        argv[argc++] = (char *)inputs[i];
    if (reserve)
        argv[argc++] = script_arg;
    /* a build id would hash the zeros where the late bytes go, not them,
     * and make the linker read all of them (0.2-0.8 s for a ViT-B's hole) */
    if (late)
        argv[argc++] = "-Wl,--build-id=none";
    const char *tail[] = {"-lm", "-Wl,-z,noexecstack", "-Wl,-z,defs", NULL};
    for (int i = 0; tail[i]; i++)
        argv[argc++] = (char *)tail[i];
    argv[argc] = NULL;

    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0)
        return fail(p, VITC_BAD_INPUT, "cannot run the C compiler driver '%s' to link the model (set CC): %s",
                    argv[0], strerror(rc));
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return fail(p, VITC_INTERNAL, "waiting for '%s': %s", argv[0], strerror(errno));
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return VITC_OK;
    char msg[4096];
    read_log(log, msg, sizeof msg);
    if (WIFSIGNALED(status))
        return fail(p, VITC_INTERNAL, "linking with '%s' was killed by signal %d%s%s", argv[0], WTERMSIG(status),
                    *msg ? ":\n" : "", msg);
    return fail(p, VITC_INTERNAL, "linking with '%s' failed (exit %d)%s%s", argv[0], WEXITSTATUS(status),
                *msg ? ":\n" : "", msg);
}

int cg_package_fill_late(cg_package *p, const cg_section *items, int n)
{
    char so[PATH_MAX];
    if (!cg_package_path(p, "model.so", so, sizeof so))
        return p->d->status;
    return cg_elf_fill_late(p->d, so, items, n);
}

static int write_file(cg_package *p, const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return fail(p, VITC_BAD_INPUT, "cannot write %s: %s", path, strerror(errno));
    size_t w = n ? fwrite(data, 1, n, f) : 0;
    int bad = w != n;
    if (fclose(f) != 0)
        bad = 1;
    if (bad)
        return fail(p, VITC_BAD_INPUT, "writing %s failed: %s", path, strerror(errno));
    return VITC_OK;
}

int cg_package_install(cg_package *p, const cg_blob *weights)
{
    char so[PATH_MAX], wtmp[PATH_MAX], wdst[PATH_MAX], parent[PATH_MAX], wname[PATH_MAX];
    const char *output = p->opt->output;
    if (!cg_package_path(p, "model.so", so, sizeof so) || !cg_package_path(p, "model.weights", wtmp, sizeof wtmp))
        return p->d->status;
    int have_weights = 0;
    if (p->opt->external_weights) {
        dir_of(output, parent, sizeof parent);
        cg_weights_file_name(output, wname, sizeof wname);
        if ((size_t)snprintf(wdst, sizeof wdst, "%s/%s", parent, wname) >= sizeof wdst)
            return fail(p, VITC_BAD_INPUT, "the output path '%s' is too long", output);
        int st = write_file(p, wtmp, weights ? weights->data : NULL, weights ? weights->len : 0);
        if (st)
            return st;
        if (rename(wtmp, wdst) != 0)
            return fail(p, VITC_BAD_INPUT, "cannot write %s: %s", wdst, strerror(errno));
        have_weights = 1;
    }
    if (rename(so, output) != 0) {
        int e = errno;
        if (have_weights)
            unlink(wdst);
        return fail(p, VITC_BAD_INPUT, "cannot write %s: %s", output, strerror(e));
    }
    return VITC_OK;
}
