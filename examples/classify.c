/* classify.c: classifies an image with a ViT compiled by vitc, using nothing
 * but the runtime API (vitc/runtime.h) and stb_image for the image file.
 *
 *   vitc model.onnx -o model.so
 *   classify model.so photo.jpg [--top K] [--threads N] [--dump-input FILE.npy]
 *
 * The image (PNG, JPEG, BMP, ... anything stb_image reads) is converted to
 * RGB, resized to the model's input size, scaled to [0, 1] and normalised
 * with the ImageNet mean and standard deviation, laid out as [1, 3, H, W].
 * The model's first output is taken as class scores [1, classes]; the top K
 * classes are printed with their score and softmax probability.
 * --dump-input writes the tensor the model saw, for `vitc run`. */
#include <vitc/runtime.h>

#include <stb_image.h>
#include <stb_image_resize.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const float mean[3] = {0.485f, 0.456f, 0.406f}, stddev[3] = {0.229f, 0.224f, 0.225f};

static int usage(void)
{
    fprintf(stderr, "usage: classify MODEL.so IMAGE [--top K] [--threads N] [--dump-input FILE.npy]\n");
    return 2;
}

/* Writes a float32 C-order tensor as a .npy file (format version 1.0). */
static int write_npy(const char *path, const float *data, const int64_t *dims, int rank)
{
    char shape[128] = "", header[256];
    size_t n = 1, k = 0;
    for (int i = 0; i < rank; i++) {
        k += (size_t)snprintf(shape + k, sizeof shape - k, "%lld,%s", (long long)dims[i], i + 1 < rank ? " " : "");
        n *= (size_t)dims[i];
    }
    int len = snprintf(header, sizeof header, "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }", shape);
    int total = 10 + len + 1, pad = (64 - total % 64) % 64; /* header padded to 64 bytes, ending in '\n' */
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    unsigned char magic[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0, 0};
    magic[8] = (unsigned char)((len + pad + 1) & 0xff);
    magic[9] = (unsigned char)((len + pad + 1) >> 8);
    int ok = fwrite(magic, 1, 10, f) == 10 && fwrite(header, 1, (size_t)len, f) == (size_t)len;
    for (int i = 0; ok && i < pad; i++)
        ok = fputc(' ', f) != EOF;
    ok = ok && fputc('\n', f) != EOF && fwrite(data, sizeof(float), n, f) == n; /* little-endian hosts */
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* The image as a normalised [1, 3, h, w] tensor; NULL after a message. */
static float *load_image(const char *path, int w, int h)
{
    int iw, ih, channels;
    unsigned char *pixels = stbi_load(path, &iw, &ih, &channels, 3);
    if (!pixels) {
        fprintf(stderr, "classify: %s: %s\n", path, stbi_failure_reason());
        return NULL;
    }
    size_t n = (size_t)iw * (size_t)ih * 3, m = (size_t)w * (size_t)h * 3;
    float *rgb = malloc(n * sizeof *rgb), *resized = malloc(m * sizeof *resized), *chw = malloc(m * sizeof *chw);
    int ok = 0;
    if (!rgb || !resized || !chw) {
        fprintf(stderr, "classify: out of memory\n");
        goto done;
    }
    for (size_t i = 0; i < n; i++)
        rgb[i] = pixels[i] / 255.0f;
    if (!stbir_resize_float(rgb, iw, ih, 0, resized, w, h, 0, 3)) {
        fprintf(stderr, "classify: %s: cannot resize %dx%d to %dx%d\n", path, iw, ih, w, h);
        goto done;
    }
    for (int c = 0; c < 3; c++) /* HWC -> CHW, normalised */
        for (size_t p = 0; p < (size_t)w * (size_t)h; p++)
            chw[(size_t)c * w * h + p] = (resized[p * 3 + c] - mean[c]) / stddev[c];
    printf("image: %s, %dx%d, resized to %dx%d\n", path, iw, ih, w, h);
    ok = 1;
done: /* ok says whether chw is the result */
    stbi_image_free(pixels);
    free(rgb);
    free(resized);
    if (!ok)
        free(chw);
    return ok ? chw : NULL;
}

int main(int argc, char **argv)
{
    const char *model_path = NULL, *image_path = NULL, *dump = NULL;
    int top = 5, nthreads = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--top") == 0 && i + 1 < argc)
            top = atoi(argv[++i]);
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            nthreads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--dump-input") == 0 && i + 1 < argc)
            dump = argv[++i];
        else if (argv[i][0] == '-')
            return usage();
        else if (!model_path)
            model_path = argv[i];
        else if (!image_path)
            image_path = argv[i];
        else
            return usage();
    }
    if (!model_path || !image_path || top < 1)
        return usage();

    vitc_model *model = NULL;
    vitc_context *ctx = NULL;
    float *pixels = NULL, *scores = NULL;
    int rc = 1;
    vitc_tensor_info in, out;
    if (vitc_model_load(model_path, &model) != VITC_STATUS_OK) {
        fprintf(stderr, "classify: %s\n", vitc_last_error());
        return 1;
    }
    /* What an image classifier looks like: one image input [B, 3, H, W], scores [B, classes]. */
    if (vitc_model_num_inputs(model) != 1 || vitc_model_input(model, 0, &in) != VITC_STATUS_OK || in.rank != 4 ||
        in.dtype != VITC_DTYPE_F32 || in.dims[1] != 3 || vitc_model_output(model, 0, &out) != VITC_STATUS_OK ||
        out.rank != 2 || out.dtype != VITC_DTYPE_F32) {
        fprintf(stderr, "classify: %s is not an image classifier (one f32 input [B,3,H,W], f32 scores [B,N])\n",
                model_path);
        goto done;
    }
    int h = (int)in.dims[2], w = (int)in.dims[3];
    int64_t classes = out.dims[1];
    if (!(pixels = load_image(image_path, w, h)))
        goto done;
    int64_t in_dims[4] = {1, 3, h, w};
    if (dump && write_npy(dump, pixels, in_dims, 4) != 0) {
        fprintf(stderr, "classify: cannot write %s\n", dump);
        goto done;
    }
    /* Every further output gets a buffer too; only the first is read. */
    int nout = vitc_model_num_outputs(model);
    vitc_tensor outputs[16];
    void *extra[16] = {0};
    if (nout > 16) {
        fprintf(stderr, "classify: %d outputs; at most 16 handled\n", nout);
        goto done;
    }
    for (int i = 0; i < nout; i++) {
        vitc_tensor_info info;
        vitc_model_output(model, i, &info);
        size_t n = info.dtype == VITC_DTYPE_I64 ? 8 : 4;
        outputs[i] = (vitc_tensor){.dtype = info.dtype, .rank = info.rank};
        for (int k = 0; k < info.rank; k++) {
            outputs[i].dims[k] = info.dims[k]; /* batch 1: dims as declared */
            n *= (size_t)info.dims[k];
        }
        outputs[i].data = extra[i] = malloc(n ? n : 1);
    }
    scores = outputs[0].data;
    vitc_tensor input = {.dtype = VITC_DTYPE_F32, .rank = 4, .dims = {1, 3, h, w}, .data = pixels};
    if (vitc_context_create(model, nthreads, &ctx) != VITC_STATUS_OK ||
        vitc_run(ctx, &input, 1, outputs, nout) != VITC_STATUS_OK) {
        fprintf(stderr, "classify: %s\n", vitc_last_error());
        goto free_outputs;
    }

    /* Softmax for probabilities; the top K by selection over class indices. */
    double maxv = scores[0], sum = 0;
    for (int64_t i = 1; i < classes; i++)
        maxv = scores[i] > maxv ? scores[i] : maxv;
    for (int64_t i = 0; i < classes; i++)
        sum += exp(scores[i] - maxv);
    if (top > classes)
        top = (int)classes;
    int64_t *order = malloc((size_t)classes * sizeof *order);
    if (!order) {
        fprintf(stderr, "classify: out of memory\n");
        goto free_outputs;
    }
    for (int64_t i = 0; i < classes; i++)
        order[i] = i;
    printf("top %d of %lld classes:\n", top, (long long)classes);
    for (int r = 0; r < top; r++) {
        int64_t best = r;
        for (int64_t i = r + 1; i < classes; i++)
            if (scores[order[i]] > scores[order[best]])
                best = i;
        int64_t c = order[best];
        order[best] = order[r];
        order[r] = c;
        printf("  %d. class %-6lld score %10.6f  p %.4f\n", r + 1, (long long)c, scores[c], exp(scores[c] - maxv) / sum);
    }
    free(order);
    rc = 0;
free_outputs:
    for (int i = 0; i < nout; i++)
        free(extra[i]);
done:
    vitc_context_free(ctx);
    vitc_model_free(model);
    free(pixels);
    return rc;
}
