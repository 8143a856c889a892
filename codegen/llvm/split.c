/* split.c: LLVM's -O pipeline and code generation on several threads.
 *
 * The module is cut into parts along its call graph: every function other
 * than run() belongs to the part of the functions it calls and is called by
 * (a kernel's driver with its micro-kernels and helpers), so that each part
 * holds whole kernels and inlining sees what it would see in one module.
 * Parts are balanced by instruction count; part 0 holds run() and every
 * variable that is written or seen from outside the .so.  The module is
 * written once as bitcode; each thread reads it into a context of its own,
 * turns what other parts define into declarations (hidden symbols, so the
 * link joins them and nothing new is exported), optimises it with its own
 * target machine and writes its object.  A function's code is the same
 * whatever the number of parts: only where it lives changes. */
#include "codegen/llvm/cg_impl.h"

#include <llvm-c/BitReader.h>
#include <llvm-c/BitWriter.h>
#include <llvm-c/Transforms/PassBuilder.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { MAX_PARTS = 8, MIN_INSTS_PER_PART = 1500 };

typedef struct {
    LLVMValueRef fn;
    int root;  /* union-find parent */
    long size; /* instructions */
    int part;
} fn_info;

typedef struct split_job split_job;
struct split_job {
    const cg_ctx *cg;
    const char *bitcode;
    size_t bitcode_len;
    char **part_of_name; /* function names, sorted as fns */
    const fn_info *fns;
    int nfns, part;
    const char *path;
    int st;
    char err[512];
};

static int find(fn_info *f, int i)
{
    while (f[i].root != i)
        i = f[i].root = f[f[i].root].root;
    return i;
}

static long count_insts(LLVMValueRef fn)
{
    long n = 0;
    for (LLVMBasicBlockRef b = LLVMGetFirstBasicBlock(fn); b; b = LLVMGetNextBasicBlock(b))
        for (LLVMValueRef i = LLVMGetFirstInstruction(b); i; i = LLVMGetNextInstruction(i))
            n++;
    return n;
}

static int index_of(const fn_info *f, int n, LLVMValueRef fn)
{
    for (int i = 0; i < n; i++)
        if (f[i].fn == fn)
            return i;
    return -1;
}

/* Joins every defined function with the defined functions it names (calls
 * or takes the address of), run() excepted. */
static void join_calls(const cg_ctx *cg, fn_info *f, int n)
{
    for (int a = 0; a < n; a++) {
        if (cg_is_run(cg, f[a].fn))
            continue;
        for (LLVMBasicBlockRef b = LLVMGetFirstBasicBlock(f[a].fn); b; b = LLVMGetNextBasicBlock(b))
            for (LLVMValueRef i = LLVMGetFirstInstruction(b); i; i = LLVMGetNextInstruction(i))
                for (int k = 0; k < LLVMGetNumOperands(i); k++) {
                    LLVMValueRef o = LLVMGetOperand(i, k);
                    int c = o && LLVMIsAFunction(o) && !LLVMIsDeclaration(o) && !cg_is_run(cg, o) ? index_of(f, n, o) : -1;
                    if (c >= 0)
                        f[find(f, a)].root = find(f, c);
                }
    }
}

/* Greedy: the largest group first, into the lightest part.  Returns the
 * number of parts used. */
static int assign_parts(const cg_ctx *cg, fn_info *f, int n, int nparts)
{
    long load[MAX_PARTS] = {0}, *group = calloc((size_t)n, sizeof(long));
    int *order = malloc(sizeof(int) * (size_t)n), ngroups = 0;
    if (!group || !order) {
        free(group), free(order);
        return 1;
    }
    for (int i = 0; i < n; i++)
        group[find(f, i)] += f[i].size;
    for (int i = 0; i < n; i++)
        if (find(f, i) == i && !cg_is_run(cg, f[i].fn))
            order[ngroups++] = i;
    for (int a = 1; a < ngroups; a++) /* by size, largest first (insertion sort: a few hundred groups) */
        for (int b = a; b > 0 && group[order[b]] > group[order[b - 1]]; b--) {
            int t = order[b];
            order[b] = order[b - 1], order[b - 1] = t;
        }
    int used = 1;
    for (int i = 0; i < n; i++) /* every graph's run() */
        if (cg_is_run(cg, f[i].fn))
            load[0] += group[find(f, i)], f[find(f, i)].part = 0;
    for (int g = 0; g < ngroups; g++) {
        int best = 0;
        for (int p = 1; p < nparts; p++)
            if (load[p] < load[best])
                best = p;
        load[best] += group[order[g]];
        f[order[g]].part = best;
        used = best + 1 > used ? best + 1 : used;
    }
    for (int i = 0; i < n; i++)
        f[i].part = f[find(f, i)].part;
    free(group), free(order);
    return used;
}

/* A function's body out of this module: it becomes a declaration. */
static void drop_body(LLVMValueRef fn)
{
    for (LLVMBasicBlockRef b = LLVMGetFirstBasicBlock(fn); b; b = LLVMGetNextBasicBlock(b))
        for (LLVMValueRef i = LLVMGetFirstInstruction(b); i; i = LLVMGetNextInstruction(i))
            if (LLVMGetTypeKind(LLVMTypeOf(i)) != LLVMVoidTypeKind)
                LLVMReplaceAllUsesWith(i, LLVMGetPoison(LLVMTypeOf(i)));
    for (LLVMBasicBlockRef b = LLVMGetFirstBasicBlock(fn); b; b = LLVMGetNextBasicBlock(b))
        for (LLVMValueRef i = LLVMGetFirstInstruction(b), next; i; i = next) {
            next = LLVMGetNextInstruction(i);
            LLVMInstructionEraseFromParent(i);
        }
    for (LLVMBasicBlockRef b = LLVMGetFirstBasicBlock(fn), next; b; b = next) {
        next = LLVMGetNextBasicBlock(b);
        LLVMDeleteBasicBlock(b);
    }
    LLVMSetLinkage(fn, LLVMExternalLinkage);
    LLVMSetVisibility(fn, LLVMHiddenVisibility);
}

static int part_of(const split_job *j, const char *name)
{
    for (int i = 0; i < j->nfns; i++)
        if (strcmp(j->part_of_name[i], name) == 0)
            return j->fns[i].part;
    return -1;
}

static void *run_part(void *arg)
{
    split_job *j = arg;
    const cg_ctx *cg = j->cg;
    LLVMContextRef ctx = LLVMContextCreate();
    LLVMMemoryBufferRef buf = LLVMCreateMemoryBufferWithMemoryRangeCopy(j->bitcode, j->bitcode_len, "vitc");
    LLVMModuleRef mod = NULL;
    int bad = !ctx || !buf || LLVMParseBitcodeInContext2(ctx, buf, &mod);
    if (buf) /* the parse copies what it needs: the buffer stays the caller's */
        LLVMDisposeMemoryBuffer(buf);
    if (bad) {
        snprintf(j->err, sizeof j->err, "part %d: cannot read back the module's bitcode", j->part);
        j->st = VITC_INTERNAL;
    } else {
        for (LLVMValueRef f = LLVMGetFirstFunction(mod); f; f = LLVMGetNextFunction(f)) {
            size_t len;
            const char *name = LLVMGetValueName2(f, &len);
            if (!LLVMIsDeclaration(f) && part_of(j, name) != j->part)
                drop_body(f);
        }
        if (j->part != 0) /* what the .so exports is defined in part 0 (visibility kept: the link takes the narrowest) */
            for (LLVMValueRef g = LLVMGetFirstGlobal(mod); g; g = LLVMGetNextGlobal(g))
                if (!LLVMIsDeclaration(g) && LLVMGetLinkage(g) == LLVMExternalLinkage)
                    LLVMSetInitializer(g, NULL);
        char *msg = NULL;
        LLVMTargetRef target;
        LLVMTargetMachineRef tm = NULL;
        if (LLVMGetTargetFromTriple(cg->triple, &target, &msg) == 0)
            tm = LLVMCreateTargetMachine(target, cg->triple, cg->cpu, cg->features, cg_codegen_level(cg), LLVMRelocPIC,
                                         LLVMCodeModelDefault);
        LLVMDisposeMessage(msg);
        msg = NULL;
        if (!tm) {
            snprintf(j->err, sizeof j->err, "part %d: no target machine", j->part);
            j->st = VITC_INTERNAL;
        } else if (cg_run_pipeline(mod, tm, cg->opt->opt_level, j->err, sizeof j->err)) {
            j->st = VITC_INTERNAL;
        } else if (LLVMTargetMachineEmitToFile(tm, mod, (char *)j->path, LLVMObjectFile, &msg)) {
            snprintf(j->err, sizeof j->err, "writing the object file %s: %s", j->path, msg ? msg : "?");
            j->st = VITC_INTERNAL;
        }
        LLVMDisposeMessage(msg);
        if (tm)
            LLVMDisposeTargetMachine(tm);
    }
    if (mod)
        LLVMDisposeModule(mod);
    if (ctx)
        LLVMContextDispose(ctx);
    return NULL;
}

int cg_split_parts(const cg_ctx *cg)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    long total = 0;
    for (LLVMValueRef f = LLVMGetFirstFunction(cg->mod); f; f = LLVMGetNextFunction(f))
        total += count_insts(f);
    long by_size = total / MIN_INSTS_PER_PART;
    long n = ncpu < by_size ? ncpu : by_size;
    return n < 1 ? 1 : n > MAX_PARTS ? MAX_PARTS : (int)n;
}

/* What a run() names in another part is reached through a hidden symbol. */
static void externalize_from_run(const fn_info *f, int n, LLVMValueRef run)
{
    for (LLVMBasicBlockRef b = LLVMGetFirstBasicBlock(run); b; b = LLVMGetNextBasicBlock(b))
        for (LLVMValueRef i = LLVMGetFirstInstruction(b); i; i = LLVMGetNextInstruction(i))
            for (int k = 0; k < LLVMGetNumOperands(i); k++) {
                LLVMValueRef o = LLVMGetOperand(i, k);
                int c = o && LLVMIsAFunction(o) && !LLVMIsDeclaration(o) ? index_of(f, n, o) : -1;
                if (c >= 0 && f[c].part != 0 && LLVMGetLinkage(o) != LLVMExternalLinkage) {
                    LLVMSetLinkage(o, LLVMExternalLinkage);
                    LLVMSetVisibility(o, LLVMHiddenVisibility);
                }
            }
}

int cg_optimize_split(cg_ctx *cg, LLVMTargetMachineRef tm, char paths[][PATH_MAX], int *nparts)
{
    int want = *nparts;
    *nparts = 1;
    if (cg_verify_module(cg) != VITC_OK)
        return cg->d->status;
    int nfns = 0;
    for (LLVMValueRef f = LLVMGetFirstFunction(cg->mod); f; f = LLVMGetNextFunction(f))
        nfns += !LLVMIsDeclaration(f);
    fn_info *fns = calloc((size_t)nfns + 1, sizeof *fns);
    char **names = calloc((size_t)nfns + 1, sizeof *names);
    if (!fns || !names) {
        free(fns), free(names);
        return cg_fail(cg, VITC_INTERNAL, -1, "out of memory");
    }
    int k = 0;
    for (LLVMValueRef f = LLVMGetFirstFunction(cg->mod); f; f = LLVMGetNextFunction(f))
        if (!LLVMIsDeclaration(f)) {
            size_t len;
            fns[k] = (fn_info){.fn = f, .root = k, .size = count_insts(f)};
            names[k++] = (char *)LLVMGetValueName2(f, &len);
        }
    join_calls(cg, fns, nfns);
    int n = want > 1 && cg->nvariants_done > 0 ? assign_parts(cg, fns, nfns, want) : 1;
    LLVMMemoryBufferRef bc = NULL;
    if (n > 1) {
        for (int v = 0; v < cg->nvariants_done; v++)
            externalize_from_run(fns, nfns, cg->variants[v].run_fn);
        if (!(bc = LLVMWriteBitcodeToMemoryBuffer(cg->mod)))
            n = 1; /* then in one piece, as without threads */
    }
    if (n == 1) {
        free(fns), free(names);
        if (cg_optimize(cg, tm) == VITC_OK)
            cg_emit_object(cg, tm, paths[0]);
        return cg->d->status;
    }
    split_job jobs[MAX_PARTS];
    pthread_t th[MAX_PARTS];
    int started[MAX_PARTS] = {0};
    for (int p = 0; p < n; p++) {
        jobs[p] = (split_job){.cg = cg, .bitcode = LLVMGetBufferStart(bc), .bitcode_len = LLVMGetBufferSize(bc),
                              .part_of_name = names, .fns = fns, .nfns = nfns, .part = p, .path = paths[p]};
        started[p] = p > 0 && pthread_create(&th[p], NULL, run_part, &jobs[p]) == 0;
    }
    for (int p = 0; p < n; p++)
        if (!started[p]) /* part 0 here, and any part without a thread of its own */
            run_part(&jobs[p]);
    for (int p = 0; p < n; p++) {
        if (started[p])
            pthread_join(th[p], NULL);
        if (jobs[p].st != VITC_OK)
            cg_fail(cg, jobs[p].st, -1, "%s", jobs[p].err);
    }
    LLVMDisposeMemoryBuffer(bc);
    free(fns), free(names);
    *nparts = n;
    return cg->d->status;
}
