/* replay.c: runs the fuzz harnesses over files, without libFuzzer, so that
 * every finding in tests/data/fuzz-regressions stays fixed in the ordinary
 * and the sanitizer builds (ctest fuzz_replay).
 *
 *   fuzz_replay FILE|DIR...
 *
 * .onnx files go through the model and interpreter harnesses, .npy and .pb
 * files through the tensor-file harness, .so files through the compiled-model
 * reader; a directory is read one level deep.
 * A finding aborts (the harness prints it), so any exit but 0 is a failure. */
#include "fuzz.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    unsigned char *b = malloc(cap);
    for (size_t r; b && (r = fread(b + n, 1, cap - n, f)) > 0;) {
        n += r;
        if (n == cap) {
            unsigned char *nb = realloc(b, cap *= 2);
            if (!nb)
                free(b);
            b = nb;
        }
    }
    fclose(f);
    *len = n;
    return b;
}

/* Returns 1 if the file was run, 0 if skipped, -1 on a read error. */
static int replay_file(const char *path)
{
    int model = ends_with(path, ".onnx"), tensor = ends_with(path, ".npy") || ends_with(path, ".pb");
    int so = ends_with(path, ".so");
    if (!model && !tensor && !so)
        return 0;
    size_t len;
    unsigned char *buf = slurp(path, &len);
    if (!buf) {
        fprintf(stderr, "fuzz_replay: cannot read %s\n", path);
        return -1;
    }
    fprintf(stderr, "replay %s (%zu bytes)\n", path, len);
    if (model) {
        fz_model_one(buf, len);
        fz_interp_one(buf, len);
    } else if (so) {
        fz_so_one(buf, len);
    } else {
        fz_npy_one(buf, len);
    }
    free(buf);
    return 1;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv)
{
    int files = 0, errors = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "fuzz_replay: cannot stat %s\n", argv[i]);
            errors++;
            continue;
        }
        if (!S_ISDIR(st.st_mode)) {
            int r = replay_file(argv[i]);
            files += r > 0, errors += r < 0;
            continue;
        }
        DIR *dir = opendir(argv[i]);
        if (!dir) {
            errors++;
            continue;
        }
        char **names = NULL;
        size_t n = 0;
        for (struct dirent *e; (e = readdir(dir));) {
            char **nn = realloc(names, (n + 1) * sizeof *names);
            if (!nn)
                break;
            names = nn;
            size_t sz = strlen(argv[i]) + strlen(e->d_name) + 2;
            if (!(names[n] = malloc(sz)))
                break;
            snprintf(names[n++], sz, "%s/%s", argv[i], e->d_name);
        }
        closedir(dir);
        qsort(names, n, sizeof *names, cmp_str);
        for (size_t k = 0; k < n; k++) {
            int r = replay_file(names[k]);
            files += r > 0, errors += r < 0;
            free(names[k]);
        }
        free(names);
    }
    printf("fuzz_replay: %d files replayed through the harnesses, %d unreadable, no findings\n", files, errors);
    return errors ? 1 : 0;
}
