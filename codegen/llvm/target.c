/* target.c: the target machine (host CPU and features unless --cpu and
 * --features say otherwise, position-independent code), what the kernel
 * generators learn about it (vector width, registers, FMA), the new pass
 * manager's -O pipeline, and the object file. */
#include "codegen/llvm/cg_impl.h"

#include <llvm-c/Analysis.h>
#include <llvm-c/Disassembler.h>
#include <llvm-c/Error.h>
#include <llvm-c/Transforms/PassBuilder.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* 1 if the comma-separated feature list enables feature f ("+avx2"). */
static int has_feature(const char *list, const char *f)
{
    size_t n = strlen(f);
    for (const char *p = list; p && *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n + 1 && p[0] == '+' && strncmp(p + 1, f, n) == 0)
            return 1;
        p = e ? e + 1 : NULL;
    }
    return 0;
}

/* x86 CPUs by the widest vectors they have, for a --cpu given without
 * --features (LLVM's C API does not expose a CPU's implied features).  A
 * wrong guess costs speed, not correctness: LLVM splits or widens vectors. */
static int x86_cpu_vec_floats(const char *cpu)
{
    static const char *const avx512[] = {"skylake-avx512", "cascadelake", "cooperlake", "cannonlake", "icelake-client",
                                         "icelake-server", "tigerlake", "sapphirerapids", "graniterapids", "emeraldrapids",
                                         "znver4", "znver5", "x86-64-v4", "rocketlake", NULL};
    static const char *const avx2[] = {"haswell", "broadwell", "skylake", "alderlake", "raptorlake", "meteorlake",
                                       "znver1", "znver2", "znver3", "x86-64-v3", "bdver4", "arrowlake", "lunarlake",
                                       "gracemont", NULL};
    for (int i = 0; avx512[i]; i++)
        if (strcmp(cpu, avx512[i]) == 0)
            return 16;
    for (int i = 0; avx2[i]; i++)
        if (strcmp(cpu, avx2[i]) == 0)
            return 8;
    return 4;
}

static void describe_target(cg_ctx *cg)
{
    cg_target *t = &cg->target;
    const char *f = cg->features;
    if (strncmp(cg->triple, "aarch64", 7) == 0 || strncmp(cg->triple, "arm64", 5) == 0) {
        *t = (cg_target){.vec_floats = 4, .nregs = 32, .has_fma = 1};
        return;
    }
    int vf = 4;
    if (f && *f)
        vf = has_feature(f, "avx512f") ? 16 : has_feature(f, "avx") ? 8 : 4;
    else
        vf = x86_cpu_vec_floats(cg->cpu);
    t->vec_floats = vf;
    t->nregs = vf == 16 ? 32 : 16;
    t->has_fma = f && *f ? has_feature(f, "fma") || vf == 16 : vf >= 8;
}

/* Checks a user's --cpu and --features against what LLVM knows for the
 * triple.  LLVM only warns about unknown names on stderr (and may abort
 * later, e.g. for a CPU without 64-bit mode), so the warnings of a trial
 * subtarget are captured and turned into a clear error. */
static int check_cpu_features(cg_ctx *cg)
{
    if (LLVMInitializeNativeDisassembler())
        return VITC_OK; /* cannot check: let LLVM decide */
    FILE *cap = tmpfile();
    if (!cap)
        return VITC_OK;
    fflush(stderr);
    int saved = dup(2);
    if (saved < 0 || dup2(fileno(cap), 2) < 0) {
        if (saved >= 0)
            close(saved);
        fclose(cap);
        return VITC_OK;
    }
    LLVMDisasmContextRef dc = LLVMCreateDisasmCPUFeatures(cg->triple, cg->cpu, cg->features, NULL, 0, NULL, NULL);
    if (dc)
        LLVMDisasmDispose(dc);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char text[2048];
    rewind(cap);
    size_t n = fread(text, 1, sizeof text - 1, cap);
    text[n] = 0;
    fclose(cap);
    if (strstr(text, "not a recognized processor"))
        return cg_fail(cg, VITC_BAD_INPUT, -1, "--cpu '%s' is not a processor LLVM knows for %s", cg->cpu, cg->triple);
    if (strstr(text, "not a recognized feature")) {
        char *nl = strchr(text, '\n');
        if (nl)
            *nl = 0;
        return cg_fail(cg, VITC_BAD_INPUT, -1, "--features '%s': %s", cg->features, text);
    }
    return VITC_OK;
}

int cg_target_create(cg_ctx *cg, LLVMTargetMachineRef *tm)
{
    *tm = NULL;
    if (LLVMInitializeNativeTarget() || LLVMInitializeNativeAsmPrinter())
        return cg_fail(cg, VITC_INTERNAL, -1, "LLVM has no code generator for this machine");
    char *triple = LLVMGetDefaultTargetTriple(), *err = NULL;
    LLVMTargetRef target;
    if (LLVMGetTargetFromTriple(triple, &target, &err)) {
        cg_fail(cg, VITC_INTERNAL, -1, "LLVM target for '%s': %s", triple, err ? err : "?");
        LLVMDisposeMessage(err);
        LLVMDisposeMessage(triple);
        return cg->d->status;
    }
    cg->triple = strdup(triple);
    LLVMDisposeMessage(triple);
    const cg_options *o = cg->opt;
    if (o->cpu) {
        cg->cpu = strdup(o->cpu);
    } else {
        char *h = LLVMGetHostCPUName();
        cg->cpu = strdup(h);
        LLVMDisposeMessage(h);
    }
    if (o->features) {
        cg->features = strdup(o->features);
    } else if (o->cpu) {
        cg->features = strdup(""); /* what the named CPU implies */
    } else {
        char *h = LLVMGetHostCPUFeatures();
        cg->features = strdup(h);
        LLVMDisposeMessage(h);
    }
    if (!cg->triple || !cg->cpu || !cg->features)
        return cg_fail(cg, VITC_INTERNAL, -1, "out of memory");
    if ((o->cpu || o->features) && check_cpu_features(cg))
        return cg->d->status;
    if (strncmp(cg->triple, "x86_64", 6) == 0 && !strstr(cg->features, "64bit")) {
        /* the triple asks for 64-bit code whatever the CPU tunes for */
        size_t len = strlen(cg->features) + 8;
        char *f = malloc(len);
        if (!f)
            return cg_fail(cg, VITC_INTERNAL, -1, "out of memory");
        snprintf(f, len, "%s%s+64bit", cg->features, *cg->features ? "," : "");
        free(cg->features);
        cg->features = f;
    }
    *tm = LLVMCreateTargetMachine(target, cg->triple, cg->cpu, cg->features, cg_codegen_level(cg), LLVMRelocPIC,
                                  LLVMCodeModelDefault);
    if (!*tm)
        return cg_fail(cg, VITC_BAD_INPUT, -1, "LLVM cannot make code for cpu '%s' with features '%s'", cg->cpu,
                       cg->features);
    describe_target(cg);
    return VITC_OK;
}

LLVMCodeGenOptLevel cg_codegen_level(const cg_ctx *cg)
{
    static const LLVMCodeGenOptLevel levels[4] = {LLVMCodeGenLevelNone, LLVMCodeGenLevelLess, LLVMCodeGenLevelDefault,
                                                  LLVMCodeGenLevelAggressive};
    int ol = cg->opt->opt_level;
    return levels[ol < 0 ? 0 : ol > 3 ? 3 : ol];
}

int cg_verify_module(cg_ctx *cg)
{
    char *msg = NULL;
    if (LLVMVerifyModule(cg->mod, LLVMReturnStatusAction, &msg)) {
        /* the first line is enough to find the emitter at fault */
        char *nl = msg ? strchr(msg, '\n') : NULL;
        if (nl)
            *nl = 0;
        cg_fail(cg, VITC_INTERNAL, -1, "the generated LLVM IR is invalid: %s", msg ? msg : "?");
    }
    LLVMDisposeMessage(msg);
    return cg->d->status;
}

int cg_run_pipeline(LLVMModuleRef mod, LLVMTargetMachineRef tm, int opt_level, char *err, size_t nerr)
{
    static const char *const pipelines[4] = {"default<O0>", "default<O1>", "default<O2>", "default<O3>"};
    int ol = opt_level < 0 ? 0 : opt_level > 3 ? 3 : opt_level;
    LLVMPassBuilderOptionsRef po = LLVMCreatePassBuilderOptions();
    LLVMPassBuilderOptionsSetLoopVectorization(po, ol >= 2);
    LLVMPassBuilderOptionsSetSLPVectorization(po, ol >= 2);
    LLVMPassBuilderOptionsSetLoopUnrolling(po, ol >= 2);
    LLVMErrorRef e = LLVMRunPasses(mod, pipelines[ol], tm, po);
    LLVMDisposePassBuilderOptions(po);
    if (!e)
        return 0;
    char *em = LLVMGetErrorMessage(e);
    snprintf(err, nerr, "LLVM's %s pipeline failed: %s", pipelines[ol], em);
    LLVMDisposeErrorMessage(em);
    return -1;
}

int cg_optimize(cg_ctx *cg, LLVMTargetMachineRef tm)
{
    char err[512];
    if (cg_verify_module(cg) == VITC_OK && cg_run_pipeline(cg->mod, tm, cg->opt->opt_level, err, sizeof err))
        cg_fail(cg, VITC_INTERNAL, -1, "%s", err);
    return cg->d->status;
}

int cg_emit_object(cg_ctx *cg, LLVMTargetMachineRef tm, const char *path)
{
    char *err = NULL;
    if (LLVMTargetMachineEmitToFile(tm, cg->mod, (char *)path, LLVMObjectFile, &err)) {
        cg_fail(cg, VITC_INTERNAL, -1, "writing the object file %s: %s", path, err ? err : "?");
        LLVMDisposeMessage(err);
    }
    return cg->d->status;
}
