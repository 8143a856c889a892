/* cu_package.c: a CUDA model as a shared library.  The .so is data: the
 * launch plan, the code images and the weights, described by the same
 * exported descriptor as a CPU model (target "cuda", its cuda_plan set and a
 * run() that only answers VITC_STATUS_NO_DEVICE, for a runtime that would
 * call it).  No LLVM is involved: the images and the weights go into an ELF
 * object of their own (codegen/elf_obj.c), and the descriptor is C source
 * written here over the text of runtime/abi.h itself (embedded in vitc when
 * it is built, so the layouts agree by construction); the system's C
 * compiler driver compiles and links the two (codegen/package.c). */
#include "codegen/cuda/cu_impl.h"

#include "vitc/runtime.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern const char cg_abi_text[]; /* runtime/abi.h, embedded at build time */

static const char *const precision_name[4] = {"fp32", "tf32", "fp16", "bf16"};

/* s as a C string literal: quotes, backslashes, '?' (no trigraphs) and
 * bytes outside printable ASCII escaped in octal. */
static void c_string(cu_str *b, const char *s)
{
    cu_str_add(b, "\"");
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++)
        if (*p == '"' || *p == '\\' || *p == '?' || *p < 0x20 || *p > 0x7e)
            cu_str_add(b, "\\%03o", *p);
        else
            cu_str_add(b, "%c", *p);
    cu_str_add(b, "\"");
}

static void c_poly(cu_str *b, cg_poly p)
{
    cu_str_add(b, "{{%lldLL, %lldLL, %lldLL, %lldLL}}", (long long)p.c[0], (long long)p.c[1], (long long)p.c[2],
               (long long)p.c[3]);
}

/* The plan: images, functions, launches with their arguments, the graph's
 * inputs and outputs. */
static void write_plan(cu_ctx *c, cu_str *b, const cu_image *images, int nimages)
{
    for (int i = 0; i < nimages; i++)
        cu_str_add(b, "extern const unsigned char vitc_cuda_image%d[];\n", i);
    cu_str_add(b, "static const vitc_cuda_image images[] = {\n");
    for (int i = 0; i < nimages; i++)
        cu_str_add(b, "    {%d, %d, %d, %d, vitc_cuda_image%d, %zuu},\n", images[i].kind, images[i].arch,
                   images[i].arch_specific, images[i].arch >= 90 ? VITC_CUDA_IMAGE_PDL : 0, i, images[i].bytes);
    cu_str_add(b, "    {0}};\nstatic const char *const functions[] = {\n");
    for (int i = 0; i < c->nk; i++) {
        cu_str_add(b, "    ");
        c_string(b, c->k[i].name);
        cu_str_add(b, ",\n");
    }
    cu_str_add(b, "    0};\n");
    for (int i = 0; i < c->nl; i++) {
        const cu_launch *l = &c->l[i];
        cu_str_add(b, "static const vitc_cuda_arg args%d[] = {\n", i);
        for (int k = 0; k < l->nargs; k++) {
            cu_str_add(b, "    {%d, 0, ", l->args[k].kind);
            c_poly(b, l->args[k].v);
            cu_str_add(b, "},\n");
        }
        cu_str_add(b, "    {0}};\n");
        if (!l->ntmaps)
            continue;
        cu_str_add(b, "static const vitc_cuda_tmap tmaps%d[] = {\n", i);
        for (int k = 0; k < l->ntmaps; k++) {
            const cu_tmap *t = &l->tmaps[k];
            cu_str_add(b, "    {%d, %d, ", t->arg, t->elem);
            c_poly(b, t->rows);
            cu_str_add(b, ", %lldLL, %lldLL, %uu, %uu},\n", (long long)t->cols, (long long)t->row_bytes, t->box_rows,
                       t->box_cols);
        }
        cu_str_add(b, "};\n");
    }
    cu_str_add(b, "static const vitc_cuda_launch launches[] = {\n");
    for (int i = 0; i < c->nl; i++) {
        const cu_launch *l = &c->l[i];
        cu_str_add(b, "    {%d, %uu, %uu, %uu, {", l->func, l->block, l->smem, l->smem_specific);
        for (int k = 0; k < 3; k++) {
            c_poly(b, l->grid[k]);
            cu_str_add(b, k < 2 ? ", " : "}, {");
        }
        cu_str_add(b, "%lldLL, %lldLL, %lldLL}, %lldLL, %lldLL, %d, args%d, %d, 0, ", (long long)l->div[0],
                   (long long)l->div[1], (long long)l->div[2], (long long)l->min_batch, (long long)l->max_batch,
                   l->nargs, i, l->ntmaps);
        if (l->ntmaps)
            cu_str_add(b, "tmaps%d},\n", i);
        else
            cu_str_add(b, "0},\n");
    }
    cu_str_add(b, "    {0}};\n");
    for (int side = 0; side < 2; side++) {
        int n = side ? c->g->noutputs : c->g->ninputs;
        const vitc_cuda_io *io = side ? c->out_io : c->in_io;
        cu_str_add(b, "static const vitc_cuda_io %s_io[] = {\n", side ? "output" : "input");
        for (int i = 0; i < n; i++)
            cu_str_add(b, "    {%d, 0, %lluu},\n", io[i].space, (unsigned long long)io[i].offset);
        cu_str_add(b, "    {0}};\n");
    }
    cu_str_add(b, "static const vitc_cuda_plan plan = {%d, sizeof(vitc_cuda_plan), \"%s\", %d, %s, %d, %s, %d, %s, "
               "input_io, output_io, %lluu};\n",
               VITC_CUDA_PLAN_VERSION, precision_name[c->prec], nimages, nimages ? "images" : "0", c->nk,
               c->nk ? "functions" : "0", c->nl, c->nl ? "launches" : "0", (unsigned long long)c->ws_bytes);
}

/* The vitc_abi_tensor array for the graph's inputs or outputs. */
static void write_tensors(cu_ctx *c, cu_str *b, const char *name, const int *vals, int n)
{
    cu_str_add(b, "static const vitc_abi_tensor %s[] = {\n", name);
    for (int i = 0; i < n; i++) {
        const ir_value *v = &c->g->values[vals[i]];
        uint32_t mask = 0;
        cu_str_add(b, "    {");
        c_string(b, v->name);
        cu_str_add(b, ", %d, %d, {", ir_dtype_onnx_code(v->dtype), v->rank);
        for (int k = 0; k < VITC_ABI_MAX_RANK; k++) {
            cu_str_add(b, "%lldLL%s", (long long)(k < v->rank ? v->dims[k].k : 0), k + 1 < VITC_ABI_MAX_RANK ? ", " : "");
            if (k < v->rank && v->dims[k].e == 1)
                mask |= 1u << k;
        }
        cu_str_add(b, "}, %uu},\n", mask);
    }
    cu_str_add(b, "    {0}};\n");
}

/* "name label [sm_80: R regs, S spill; sm_90: ...; sm_90a: ...] (N launches)" for the descriptor's
 * kernel list (sm_90a where that image was compiled). */
static void write_kernel_names(cu_ctx *c, cu_str *b)
{
    cu_str_add(b, "static const char *const kernel_names[] = {\n");
    for (int i = 0; i < c->nk; i++) {
        const cu_kernel *k = &c->k[i];
        char label[768];
        size_t n = (size_t)snprintf(label, sizeof label, "%s %s [", k->name, k->label);
        for (int t = 0; t < CU_NSTATS && n < sizeof label; t++)
            if (t < CU_NTARGETS || k->regs[t] >= 0)
                n += (size_t)snprintf(label + n, sizeof label - n, "%s%s: %d regs, %d bytes spilled, %d bytes stack",
                                      t ? "; " : "", cu_stats_target(t), k->regs[t], k->spill[t], k->stack[t]);
        if (n < sizeof label)
            snprintf(label + n, sizeof label - n, "] (%d launch%s)", k->nlaunches, k->nlaunches == 1 ? "" : "es");
        cu_str_add(b, "    ");
        c_string(b, label);
        cu_str_add(b, ",\n");
    }
    cu_str_add(b, "    0};\n");
}

/* The whole descriptor source. */
static void write_descriptor(cu_ctx *c, cu_str *b, const cu_image *images, int nimages, int embedded)
{
    const ir_graph *g = c->g;
    const cg_options *opt = c->opt;
    char archs[128], wname[PATH_MAX];
    size_t k = 0;
    for (int t = 0; t < CU_NTARGETS; t++)
        k += (size_t)snprintf(archs + k, sizeof archs - k, "sm_%d,", cu_target_arch[t]);
    if (c->wgmma)
        k += (size_t)snprintf(archs + k, sizeof archs - k, "sm_90a,");
    snprintf(archs + k, sizeof archs - k, "compute_%d", cu_target_arch[CU_NTARGETS - 1]);
    cu_str_add(b, "/* The descriptor of a CUDA model, written by vitc %s. */\n%s\n", VITC_VERSION, cg_abi_text);
    write_plan(c, b, images, nimages);
    write_tensors(c, b, "inputs", g->inputs, g->ninputs);
    write_tensors(c, b, "outputs", g->outputs, g->noutputs);
    write_kernel_names(c, b);
    if (embedded)
        cu_str_add(b, "extern const unsigned char %s[];\n", CG_WEIGHTS_SYMBOL);
    cu_str_add(b, "static int32_t run(const vitc_abi_call *call)\n{\n    (void)call;\n    return %d;\n}\n\n",
               (int)VITC_STATUS_NO_DEVICE);
    cu_str_add(b, "__attribute__((visibility(\"default\"))) extern const vitc_abi_model %s;\n", VITC_ABI_SYMBOL);
    cu_str_add(b, "const vitc_abi_model %s = {\n    VITC_ABI_VERSION, sizeof(vitc_abi_model), ", VITC_ABI_SYMBOL);
    c_string(b, VITC_VERSION);
    cu_str_add(b, ", \"cuda\", ");
    c_string(b, cg_host_triple());
    cu_str_add(b, ", ");
    c_string(b, archs);
    cu_str_add(b, ", \"%s\", ", precision_name[c->prec]);
    c_string(b, cg_base_name(opt->source));
    cu_str_add(b, ",\n    %d, %d, inputs, outputs, %lldLL, %lluu,\n", g->ninputs, g->noutputs, (long long)c->max_batch,
               (unsigned long long)(c->ws_bytes ? c->ws_bytes : 64));
    cu_str_add(b, "    %s, %zuu, ", embedded ? CG_WEIGHTS_SYMBOL : "0", c->weights.len);
    if (opt->external_weights) {
        cg_weights_file_name(opt->output, wname, sizeof wname);
        c_string(b, wname);
    } else {
        cu_str_add(b, "0");
    }
    cu_str_add(b, ", 0x%016llxull,\n    run, %d, kernel_names, &plan, 0x%016llxull,\n    0, 0, 0, ",
               (unsigned long long)vitc_fnv1a(VITC_FNV1A_INIT, c->weights.data, c->weights.len), c->nk,
               (unsigned long long)g->source_hash);
    /* nparts, parts and precision left 0 (a CUDA model's precision is its plan's), then the knobs */
    char *knobs = cg_knobs_recorded(&c->knobs, "cuda");
    if (!knobs)
        b->oom = 1;
    c_string(b, knobs);
    free(knobs);
    cu_str_add(b, ", %lldLL};\n", (long long)g->fixed_batch);
}

static int write_text(cu_ctx *c, const char *path, const cu_str *b)
{
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(b->s, 1, b->len, f) == b->len;
    if (f && fclose(f) != 0)
        ok = 0;
    return ok ? VITC_OK : cu_fail(c, VITC_BAD_INPUT, -1, "cannot write %s", path);
}

int cu_package(cu_ctx *c, const cu_image *images, int nimages)
{
    if (cg_check_io(c->g, c->d))
        return c->d->status;
    int machine = cg_elf_machine(NULL);
    if (!machine)
        return cu_fail(c, VITC_BAD_INPUT, -1, "packaging a CUDA model needs an ELF host (Linux on x86-64 or AArch64)");
    int embedded = !c->opt->external_weights && c->weights.len > 0;
    cg_section items[2 * CU_NTARGETS + 1];
    char names[2 * CU_NTARGETS][32];
    int n = 0;
    for (int i = 0; i < nimages && n < 2 * CU_NTARGETS; i++) {
        snprintf(names[i], sizeof names[i], "vitc_cuda_image%d", i);
        /* PTX is NUL-terminated for the driver */
        size_t bytes = images[i].bytes;
        int nul = images[i].kind == VITC_CUDA_IMAGE_PTX && (bytes == 0 || ((const char *)images[i].data)[bytes - 1]);
        items[n++] = (cg_section){.symbol = names[i], .data = images[i].data, .bytes = bytes, .nul = nul};
    }
    if (embedded)
        items[n++] = (cg_section){
            .symbol = CG_WEIGHTS_SYMBOL, .data = c->weights.data, .bytes = c->weights.len, .late = 1};

    size_t late = cg_elf_late_bytes(items, n);
    cu_str src = {0};
    write_descriptor(c, &src, images, nimages, embedded);
    if (src.oom) {
        cu_str_free(&src);
        return cu_fail(c, VITC_INTERNAL, -1, "out of memory");
    }
    cg_package pk;
    char cpath[PATH_MAX], opath[PATH_MAX];
    int st = cg_package_begin(&pk, c->opt, c->d);
    if (st == VITC_OK && cg_package_path(&pk, "model.c", cpath, sizeof cpath) &&
        cg_package_path(&pk, "data.o", opath, sizeof opath)) {
        const char *inputs[2] = {cpath, opath};
        st = write_text(c, cpath, &src);
        if (st == VITC_OK)
            st = cg_write_elf_object(c->d, opath, machine, items, n, late && cg_package_reserves());
        if (st == VITC_OK)
            st = cg_package_link(&pk, inputs, 2, late);
        if (st == VITC_OK)
            st = cg_package_fill_late(&pk, items, n);
        if (st == VITC_OK)
            st = cg_package_install(&pk, &c->weights);
    }
    cg_package_end(&pk);
    cu_str_free(&src);
    return st ? st : c->d->status;
}
