/* fuzz_so.c: the compiled-model reader, as `vitc inspect` meets a file.  The
 * bytes are put in an in-memory file (memfd) and read through its
 * /proc/self/fd path with vitc_model_read, which parses the ELF as data and
 * never runs it; a file it accepts then answers every question of the API
 * (signature, details, kernel names, CUDA details), and a context for it is
 * refused.  A refusal must carry a message and a load or ABI status. */
#include "fuzz.h"

#include <vitc/runtime.h>

#include <string.h>

static volatile size_t sink; /* keeps the reads below from being optimised away */

static void touch(const char *s)
{
    if (s)
        sink += strlen(s);
}

int fz_so_one(const uint8_t *data, size_t size)
{
    const char *path = fz_bytes_file(data, size);

    vitc_model *m = NULL;
    vitc_status st = vitc_model_read(path, &m);
    if (st != VITC_STATUS_OK) {
        if (m || !*vitc_last_error() ||
            (st != VITC_STATUS_LOAD_FAILED && st != VITC_STATUS_ABI_MISMATCH && st != VITC_STATUS_OUT_OF_MEMORY))
            fz_die("vitc_model_read refused a file without a load or ABI status and a message", NULL);
        return 0;
    }
    vitc_model_details d;
    if (vitc_model_get_details(m, &d) != VITC_STATUS_OK)
        fz_die("a model read as data gives no details", NULL);
    touch(d.compiler_version), touch(d.target), touch(d.triple), touch(d.cpu), touch(d.features);
    touch(d.source), touch(d.weights_file), touch(vitc_model_knobs(m));
    for (int i = 0; i < d.nkernels; i++)
        touch(d.kernel_names[i]);
    for (int o = 0; o < 2; o++) {
        int n = o ? vitc_model_num_outputs(m) : vitc_model_num_inputs(m);
        for (int i = 0; i < n; i++) {
            vitc_tensor_info t;
            if ((o ? vitc_model_output : vitc_model_input)(m, i, &t) != VITC_STATUS_OK)
                fz_die("a listed input or output has no info", NULL);
            touch(t.name);
        }
    }
    vitc_cuda_details cd;
    if (strcmp(d.target, "cuda") == 0 && vitc_model_cuda_details(m, &cd) == VITC_STATUS_OK) {
        touch(cd.precision);
        for (int i = 0; i < cd.nimages; i++)
            touch(cd.images[i].kind);
    }
    vitc_context *c = NULL;
    if (vitc_context_create(m, 1, &c) != VITC_STATUS_INVALID_ARGUMENT || c)
        fz_die("a model read as data got a context", NULL);
    vitc_model_free(m);
    return 0;
}
