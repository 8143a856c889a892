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
    int on = 0;
    for (const char *p = list; p && *p;) { /* the last entry for f wins, as in LLVM */
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n + 1 && (p[0] == '+' || p[0] == '-') && strncmp(p + 1, f, n) == 0)
            on = p[0] == '+';
        p = e ? e + 1 : NULL;
    }
    return on;
}

/* The features of runtime/cpu_features.def that the target machine's CPU
 * has, as "+a,+b,...".  LLVM's C API cannot list what a CPU name implies,
 * but its inliner takes a function that needs feature F into a caller
 * compiled for that CPU only if the CPU has F: one small module of empty
 * callees, one per feature, asks about all of them at once.  NULL if out of
 * memory. */
static const char *const probed[] = {
#define CPU_FEATURE(name, leaf, sub, reg, bit, os) name,
#include "runtime/cpu_features.def"
#undef CPU_FEATURE
};
enum { N_PROBED = sizeof probed / sizeof probed[0] };

static char *cpu_implied_features(const cg_ctx *cg, LLVMTargetMachineRef tm)
{
    const char *const *names = probed;
    enum { N = N_PROBED };
    LLVMContextRef ctx = LLVMContextCreate();
    LLVMModuleRef mod = LLVMModuleCreateWithNameInContext("cpu-probe", ctx);
    LLVMSetTarget(mod, cg->triple);
    LLVMTypeRef vt = LLVMFunctionType(LLVMVoidTypeInContext(ctx), NULL, 0, 0);
    LLVMValueRef caller = LLVMAddFunction(mod, "probe", vt), callee[N];
    LLVMBuilderRef b = LLVMCreateBuilderInContext(ctx);
    size_t flen = strlen(cg->features) + 64;
    char *feat = malloc(flen);
    for (int i = 0; feat && i < N; i++) {
        char name[32];
        snprintf(name, sizeof name, "needs%d", i);
        /* a function's own features replace the machine's: keep those, add F */
        snprintf(feat, flen, "%s%s+%s", cg->features, *cg->features ? "," : "", names[i]);
        callee[i] = LLVMAddFunction(mod, name, vt);
        LLVMSetLinkage(callee[i], LLVMInternalLinkage);
        LLVMAddAttributeAtIndex(callee[i], LLVMAttributeFunctionIndex,
                                LLVMCreateStringAttribute(ctx, "target-features", 15, feat, (unsigned)strlen(feat)));
        LLVMPositionBuilderAtEnd(b, LLVMAppendBasicBlockInContext(ctx, callee[i], "entry"));
        LLVMBuildRetVoid(b);
    }
    LLVMPositionBuilderAtEnd(b, LLVMAppendBasicBlockInContext(ctx, caller, "entry"));
    for (int i = 0; feat && i < N; i++)
        LLVMBuildCall2(b, vt, callee[i], NULL, 0, "");
    LLVMBuildRetVoid(b);
    LLVMDisposeBuilder(b);
    char *out = NULL;
    LLVMPassBuilderOptionsRef po = LLVMCreatePassBuilderOptions();
    LLVMErrorRef e = feat ? LLVMRunPasses(mod, "cgscc(inline)", tm, po) : NULL;
    LLVMDisposePassBuilderOptions(po);
    if (e) {
        LLVMConsumeError(e);
    } else if (feat && (out = calloc(1, N * 24 + 1))) {
        int kept[N];
        memset(kept, 0, sizeof kept);
        for (LLVMValueRef i = LLVMGetFirstInstruction(LLVMGetEntryBasicBlock(caller)); i; i = LLVMGetNextInstruction(i))
            for (int k = 0; LLVMIsACallInst(i) && k < N; k++)
                kept[k] |= LLVMGetCalledValue(i) == callee[k];
        for (int k = 0; k < N; k++)
            if (!kept[k]) /* inlined: the CPU has it */
                snprintf(out + strlen(out), N * 24 + 1 - strlen(out), "%s+%s", *out ? "," : "", names[k]);
    }
    free(feat);
    LLVMDisposeModule(mod);
    LLVMContextDispose(ctx);
    return out;
}

/* Removes, in place, the entries of a comma-separated feature list for
 * which drop(entry, length) says so. */
static void drop_features(char *list, int (*drop)(const char *entry, size_t len))
{
    char *w = list;
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (!drop(p, len)) {
            if (w != list)
                *w++ = ',';
            memmove(w, p, len);
            w += len;
        }
        p += len + (e ? 1 : 0);
    }
    *w = 0;
}

static int is_amx(const char *entry, size_t len) { return len > 5 && strncmp(entry, "+amx-", 5) == 0; }

/* An entry ("+f" or "-f") for a feature of runtime/cpu_features.def, which
 * cpu_implied_features spells out for the target machine as it is. */
static int is_probed(const char *entry, size_t len)
{
    for (int i = 0; len > 1 && i < N_PROBED; i++)
        if (strlen(probed[i]) == len - 1 && strncmp(entry + 1, probed[i], len - 1) == 0)
            return 1;
    return 0;
}

static void describe_target(cg_ctx *cg)
{
    cg_target *t = &cg->target;
    const char *f = cg->features;
    if (strncmp(cg->triple, "aarch64", 7) == 0 || strncmp(cg->triple, "arm64", 5) == 0) {
        *t = (cg_target){.vec_floats = 4, .nregs = 32, .has_fma = 1};
        return;
    }
    int vf = has_feature(f, "avx512f") ? 16 : has_feature(f, "avx") ? 8 : 4;
    t->vec_floats = vf;
    t->nregs = vf == 16 ? 32 : 16;
    t->has_fma = has_feature(f, "fma") || vf == 16;
    /* the int8 GEMM's dot products on the vectors the kernels use, whatever --precision says */
    int vnni512 = has_feature(f, "avx512vnni");
    t->vnni = vf == 16 ? vnni512 : vf == 8 && (has_feature(f, "avxvnni") || (vnni512 && has_feature(f, "avx512vl")));
    t->madd16 = vf == 16 ? has_feature(f, "avx512bw") : vf == 8 && has_feature(f, "avx2");
    t->l1_bytes = cg->opt->cpu ? 0 : cg_host_l1_bytes(); /* a CPU by name: its caches are not known here */
    t->l2_bytes = cg->opt->cpu ? 0 : cg_host_l2_bytes();
}

/* What LLVM prints on stderr while making a trial subtarget for cpu and
 * features (a disassembler: nothing else of a target machine), into text
 * (at most n - 1 bytes, NUL-terminated).  0, or -1 when it could not be had. */
static int llvm_says(const char *triple, const char *cpu, const char *features, char *text, size_t n)
{
    if (LLVMInitializeNativeDisassembler())
        return -1;
    FILE *cap = tmpfile();
    if (!cap)
        return -1;
    fflush(stderr);
    int saved = dup(2);
    if (saved < 0 || dup2(fileno(cap), 2) < 0) {
        if (saved >= 0)
            close(saved);
        fclose(cap);
        return -1;
    }
    LLVMDisasmContextRef dc = LLVMCreateDisasmCPUFeatures(triple, cpu, features, NULL, 0, NULL, NULL);
    if (dc)
        LLVMDisasmDispose(dc);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(cap);
    size_t got = fread(text, 1, n - 1, cap);
    text[got] = 0;
    fclose(cap);
    return 0;
}

/* Levenshtein distance of a and b (short names), capped at 9. */
static int edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63)
        return 9;
    int row[64];
    for (size_t j = 0; j <= lb; j++)
        row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            best = up + 1 < best ? up + 1 : best;
            best = row[j - 1] + 1 < best ? row[j - 1] + 1 : best;
            diag = up;
            row[j] = best;
        }
    }
    return row[lb] < 9 ? row[lb] : 9;
}

/* "; did you mean a, b or c?" for an unknown --cpu: the processors LLVM
 * lists for the triple (cpu "help") that start with what was given, else
 * those a few edits from it; "" when none is near. */
static void cpu_suggestions(const char *triple, const char *given, char *out, size_t n)
{
    static char list[65536];
    out[0] = 0;
    if (llvm_says(triple, "help", "", list, sizeof list) != 0)
        return;
    const char *names[8];
    int len[8], k = 0;
    for (int pass = 0; pass < 2 && k == 0; pass++)
        for (const char *line = strstr(list, "Available CPUs"); line && k < 8; line = strchr(line + 1, '\n')) {
            if (strncmp(line + 1, "Available features", 18) == 0)
                break; /* the CPUs are listed first */
            const char *p = line + 1;
            while (*p == ' ')
                p++;
            int l = (int)strcspn(p, " \n"), pad = l;
            while (p[pad] == ' ')
                pad++;
            if (l == 0 || l > 60 || pad == l || strncmp(p + pad, "- ", 2) != 0)
                continue;
            char name[64];
            snprintf(name, sizeof name, "%.*s", l, p);
            int room = (int)strlen(given) / 4; /* edits allowed: a quarter of the name, one at least, two at most */
            room = room < 1 ? 1 : room > 2 ? 2 : room;
            int near = pass == 0 ? strncmp(name, given, strlen(given)) == 0 && *given : edit_distance(name, given) <= room;
            if (near)
                names[k] = p, len[k++] = l;
        }
    size_t w = 0;
    for (int i = 0; i < k && w < n; i++)
        w += (size_t)snprintf(out + w, n - w, "%s%.*s", i == 0 ? "; did you mean " : i == k - 1 ? " or " : ", ",
                              len[i], names[i]);
    if (k && w < n)
        snprintf(out + w, n - w, "?");
}

/* Checks a user's --cpu and --features against what LLVM knows for the
 * triple.  LLVM only warns about unknown names on stderr (and may abort
 * later, e.g. for a CPU without 64-bit mode), so the warnings of a trial
 * subtarget are captured and turned into a clear error. */
static int check_cpu_features(cg_ctx *cg)
{
    char text[2048];
    if (llvm_says(cg->triple, cg->cpu, cg->features, text, sizeof text) != 0)
        return VITC_OK; /* cannot check: let LLVM decide */
    if (strstr(text, "not a recognized processor")) {
        char hint[512];
        cpu_suggestions(cg->triple, cg->cpu, hint, sizeof hint);
        return cg_fail(cg, VITC_BAD_INPUT, -1, "--cpu '%s' is not a processor LLVM knows for %s%s", cg->cpu,
                       cg->triple, hint[0] ? hint : " (for example x86-64-v3, x86-64-v4, skylake-avx512, znver4)");
    }
    if (strstr(text, "not a recognized feature")) {
        char *nl = strchr(text, '\n'), *ign;
        if (nl)
            *nl = 0;
        if ((ign = strstr(text, " (ignoring feature)"))) /* LLVM's words; vitc refuses it */
            *ign = 0;
        return cg_fail(cg, VITC_BAD_INPUT, -1, "--features '%s': %s", cg->opt->features ? cg->opt->features : "",
                       text);
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
    if (o->features && !o->cpu) { /* this machine's features, as the user changes them */
        char *h = LLVMGetHostCPUFeatures();
        size_t len = strlen(h) + strlen(o->features) + 2;
        cg->features = malloc(len);
        if (cg->features)
            snprintf(cg->features, len, "%s%s%s", h, *h ? "," : "", o->features);
        LLVMDisposeMessage(h);
    } else if (o->features) {
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
    if ((o->cpu || o->features) && strncmp(cg->triple, "x86_64", 6) == 0) {
        /* a CPU by name, or features changed: what they imply, spelt out for
         * the descriptor (the loader checks the host for them) and for
         * describe_target.  The probe's answer replaces the list's own
         * entries for those features: "+avx512bw,...,-avx512f" (this host's
         * list with AVX-512 taken away) enables avx512bw by its words, but
         * LLVM drops it with avx512f, and a loader reading the words would
         * refuse the model on an AVX2 host. */
        char *implied = cpu_implied_features(cg, *tm);
        drop_features(cg->features, is_probed);
        size_t len = implied ? strlen(implied) + strlen(cg->features) + 2 : 0;
        char *f = implied ? malloc(len) : NULL;
        if (!f) {
            free(implied);
            return cg_fail(cg, VITC_INTERNAL, -1, "out of memory");
        }
        snprintf(f, len, "%s%s%s", implied, *implied ? "," : "", cg->features);
        free(implied);
        free(cg->features);
        cg->features = f;
    }
    describe_target(cg);
    /* --precision: fp32 (the default); bf16 Linear layers on AMX tiles, else
     * with AVX512-BF16's dot products; or int8 ones (gemm_i8.c) on AMX-INT8
     * tiles, else with VPDPBUSD, else with VPMADDWD */
    const char *prec = o->precision ? o->precision : "fp32";
    int bf16 = strcmp(prec, "bf16") == 0, int8 = strcmp(prec, "int8") == 0;
    if (!bf16 && !int8 && strcmp(prec, "fp32") != 0)
        return cg_fail(cg, VITC_BAD_INPUT, -1,
                       "the CPU backend computes in fp32, bf16 or int8 (--precision fp32|bf16|int8), not '%s'", prec);
    int avx512 = cg->target.vec_floats == 16;
    if (bf16 && avx512 && has_feature(cg->features, "amx-tile") && has_feature(cg->features, "amx-bf16"))
        cg->target.amx_bf16 = 1;
    else if (bf16 && avx512 && has_feature(cg->features, "avx512bf16"))
        cg->target.bf16_dot = 1;
    else if (bf16)
        return cg_fail(cg, VITC_BAD_INPUT, -1,
                       "--precision bf16 on the CPU needs AMX (amx-tile, amx-bf16) or avx512bf16, with AVX-512, "
                       "which cpu '%s' with these features lacks; leave --precision out for fp32",
                       cg->cpu);
    if (int8 && !cg_target_int8_ok(&cg->target))
        return cg_fail(cg, VITC_BAD_INPUT, -1,
                       "--precision int8 on the CPU needs AVX2, or AVX-512 with avx512bw or avx512vnni, which cpu "
                       "'%s' with these features lacks; leave --precision out for fp32",
                       cg->cpu);
    /* int8 Linears: every one with --precision int8, a quantized model's own at any precision */
    int int8_layers = int8;
    for (int i = 0; cg->g && !int8_layers && i < cg->g->nnodes; i++)
        int8_layers = cg->g->nodes[i].op == IR_OP_LINEAR_INT8;
    if (int8_layers && avx512 && has_feature(cg->features, "amx-tile") && has_feature(cg->features, "amx-int8"))
        cg->target.amx_int8 = 1;
    if (!cg->target.amx_bf16 && !cg->target.amx_int8) {
        /* code without tile instructions: the descriptor's list (which the
         * loader checks, and which asks it for the tile registers) leaves
         * AMX out, and the .so runs on AVX-512 hosts without AMX too */
        drop_features(cg->features, is_amx);
    }
    return VITC_OK;
}

int cg_target_of_options(const cg_options *o, cg_target *t)
{
    cg_ctx *cg = calloc(1, sizeof *cg);
    FILE *quiet = fopen("/dev/null", "w"); /* the compile itself reports what is wrong with o */
    vitc_diag d = {.out = quiet};
    LLVMTargetMachineRef tm = NULL;
    int st = cg && quiet ? (cg->opt = o, cg->d = &d, cg_target_create(cg, &tm)) : VITC_INTERNAL;
    if (st == VITC_OK)
        *t = cg->target;
    if (tm)
        LLVMDisposeTargetMachine(tm);
    if (cg)
        free(cg->triple), free(cg->cpu), free(cg->features);
    free(cg);
    if (quiet)
        fclose(quiet);
    return st == VITC_OK ? 0 : -1;
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
