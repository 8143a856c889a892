/* kern_jit.c: an in-process ORC LLJIT for the host CPU (see kern_jit.h), and
 * cg_target_from_features (kernels.h). */
#include "codegen/llvm/kern_jit.h"

#include <llvm-c/Analysis.h>
#include <llvm-c/Error.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Orc.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct cg_jit {
    LLVMOrcLLJITRef jit;
    LLVMOrcThreadSafeContextRef tsc;
    LLVMTargetMachineRef tm; /* for the IR passes and the data layout */
    char *triple, *cpu, *features;
    cg_target target;
};

/* Whether the comma-separated LLVM feature list enables feature f: its last
 * entry for f ("+f" or "-f") wins, as in LLVM. */
static int has_feature(const char *list, const char *f)
{
    size_t n = strlen(f);
    int on = 0;
    for (const char *p = list; p && *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n + 1 && (p[0] == '+' || p[0] == '-') && !strncmp(p + 1, f, n))
            on = p[0] == '+';
        p = end ? end + 1 : NULL;
    }
    return on;
}

cg_target cg_target_from_features(const char *features)
{
    cg_target t = {.vec_floats = 4, .nregs = 16, .has_fma = 0};
    if (has_feature(features, "avx512f"))
        t.vec_floats = 16, t.nregs = 32;
    else if (has_feature(features, "avx"))
        t.vec_floats = 8;
    t.has_fma = has_feature(features, "fma") || has_feature(features, "avx512f");
    t.l1_bytes = cg_host_l1_bytes(); /* the JIT runs its code here */
    t.l2_bytes = cg_host_l2_bytes();
    return t;
}

/* sysconf(name) as bytes, 0 when unknown or where the name does not exist. */
static int64_t sysconf_bytes(int name)
{
    long n = name >= 0 ? sysconf(name) : -1;
    return n > 0 ? n : 0;
}

#ifndef _SC_LEVEL1_DCACHE_SIZE
#define _SC_LEVEL1_DCACHE_SIZE -1
#endif
#ifndef _SC_LEVEL2_CACHE_SIZE
#define _SC_LEVEL2_CACHE_SIZE -1
#endif

int64_t cg_host_l1_bytes(void) { return sysconf_bytes(_SC_LEVEL1_DCACHE_SIZE); }
int64_t cg_host_l2_bytes(void) { return sysconf_bytes(_SC_LEVEL2_CACHE_SIZE); }

static void set_err(char *err, size_t errlen, const char *what, LLVMErrorRef e)
{
    char *msg = e ? LLVMGetErrorMessage(e) : NULL;
    if (err && errlen)
        snprintf(err, errlen, "%s%s%s", what, msg ? ": " : "", msg ? msg : "");
    if (msg)
        LLVMDisposeErrorMessage(msg);
}

static LLVMTargetMachineRef host_tm(const cg_jit *j, char *err, size_t errlen)
{
    LLVMTargetRef target;
    char *msg = NULL;
    if (LLVMGetTargetFromTriple(j->triple, &target, &msg)) {
        snprintf(err, errlen, "no LLVM target for %s: %s", j->triple, msg ? msg : "");
        LLVMDisposeMessage(msg);
        return NULL;
    }
    LLVMTargetMachineRef tm = LLVMCreateTargetMachine(target, j->triple, j->cpu, j->features,
                                                      LLVMCodeGenLevelAggressive, LLVMRelocPIC,
                                                      LLVMCodeModelJITDefault);
    if (!tm)
        snprintf(err, errlen, "cannot create a target machine for %s (%s)", j->triple, j->cpu);
    return tm;
}

cg_jit *cg_jit_new(char *err, size_t errlen) { return cg_jit_new_with(NULL, err, errlen); }

cg_jit *cg_jit_new_with(const char *features, char *err, size_t errlen)
{
    if (LLVMInitializeNativeTarget() || LLVMInitializeNativeAsmPrinter()) {
        snprintf(err, errlen, "LLVM has no native target for this host");
        return NULL;
    }
    cg_jit *j = calloc(1, sizeof *j);
    if (!j) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    j->triple = LLVMGetDefaultTargetTriple();
    j->cpu = LLVMGetHostCPUName();
    j->features = LLVMGetHostCPUFeatures();
    if (features && *features) { /* the host's, as features changes them */
        size_t len = strlen(j->features) + strlen(features) + 2;
        char *w = malloc(len);
        if (!w) {
            snprintf(err, errlen, "out of memory");
            cg_jit_free(j);
            return NULL;
        }
        snprintf(w, len, "%s,%s", j->features, features);
        LLVMDisposeMessage(j->features);
        j->features = LLVMCreateMessage(w);
        free(w);
    }
    j->target = cg_target_from_features(j->features);
    j->tm = host_tm(j, err, errlen);
    LLVMTargetMachineRef jtm = j->tm ? host_tm(j, err, errlen) : NULL;
    if (!jtm) {
        cg_jit_free(j);
        return NULL;
    }
    LLVMOrcLLJITBuilderRef builder = LLVMOrcCreateLLJITBuilder();
    LLVMOrcLLJITBuilderSetJITTargetMachineBuilder(builder, LLVMOrcJITTargetMachineBuilderCreateFromTargetMachine(jtm));
    LLVMErrorRef e = LLVMOrcCreateLLJIT(&j->jit, builder);
    if (e) {
        set_err(err, errlen, "cannot create the JIT", e);
        j->jit = NULL;
        cg_jit_free(j);
        return NULL;
    }
    /* resolve libc/libm symbols the code generator may introduce (memset) */
    LLVMOrcDefinitionGeneratorRef gen;
    e = LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(&gen, LLVMOrcLLJITGetGlobalPrefix(j->jit), NULL, NULL);
    if (e) {
        set_err(err, errlen, "cannot search the process for symbols", e);
        cg_jit_free(j);
        return NULL;
    }
    LLVMOrcJITDylibAddGenerator(LLVMOrcLLJITGetMainJITDylib(j->jit), gen);
    j->tsc = LLVMOrcCreateNewThreadSafeContext();
    return j;
}

void cg_jit_free(cg_jit *j)
{
    if (!j)
        return;
    if (j->jit) {
        LLVMErrorRef e = LLVMOrcDisposeLLJIT(j->jit);
        if (e)
            LLVMConsumeError(e);
    }
    if (j->tsc)
        LLVMOrcDisposeThreadSafeContext(j->tsc);
    if (j->tm)
        LLVMDisposeTargetMachine(j->tm);
    LLVMDisposeMessage(j->triple);
    LLVMDisposeMessage(j->cpu);
    LLVMDisposeMessage(j->features);
    free(j);
}

LLVMModuleRef cg_jit_module(cg_jit *j, const char *name)
{
    LLVMModuleRef m = LLVMModuleCreateWithNameInContext(name, LLVMOrcThreadSafeContextGetContext(j->tsc));
    LLVMSetTarget(m, j->triple);
    LLVMTargetDataRef td = LLVMCreateTargetDataLayout(j->tm);
    LLVMSetModuleDataLayout(m, td);
    LLVMDisposeTargetData(td);
    return m;
}

cg_target cg_jit_target(const cg_jit *j) { return j->target; }
const char *cg_jit_cpu(const cg_jit *j) { return j->cpu; }

int cg_jit_add(cg_jit *j, LLVMModuleRef mod, const char *passes, char *err, size_t errlen)
{
    char *msg = NULL;
    if (LLVMVerifyModule(mod, LLVMReturnStatusAction, &msg)) {
        snprintf(err, errlen, "invalid module: %.2000s", msg ? msg : "");
        LLVMDisposeMessage(msg);
        LLVMDisposeModule(mod);
        return -1;
    }
    LLVMDisposeMessage(msg);
    if (passes) {
        LLVMPassBuilderOptionsRef opts = LLVMCreatePassBuilderOptions();
        LLVMErrorRef e = LLVMRunPasses(mod, passes, j->tm, opts);
        LLVMDisposePassBuilderOptions(opts);
        if (e) {
            set_err(err, errlen, "optimisation failed", e);
            LLVMDisposeModule(mod);
            return -1;
        }
    }
    LLVMOrcThreadSafeModuleRef tsm = LLVMOrcCreateNewThreadSafeModule(mod, j->tsc);
    LLVMErrorRef e = LLVMOrcLLJITAddLLVMIRModule(j->jit, LLVMOrcLLJITGetMainJITDylib(j->jit), tsm);
    if (e) {
        set_err(err, errlen, "cannot add the module to the JIT", e);
        return -1;
    }
    return 0;
}

void *cg_jit_lookup(cg_jit *j, const char *name)
{
    LLVMOrcExecutorAddress addr = 0;
    LLVMErrorRef e = LLVMOrcLLJITLookup(j->jit, &addr, name);
    if (e) {
        LLVMConsumeError(e);
        return NULL;
    }
    return (void *)(uintptr_t)addr;
}
