/* elf_desc.c: a model's descriptor read from its file as data, without
 * loading it.  dlopen runs a library's constructors, so a file that is not
 * trusted (or a model built for a CPU this one is not) must be understood
 * before it is opened: this reads the ELF headers, finds the descriptor
 * symbol among the dynamic symbols, and copies the descriptor and everything
 * it points to out of the mapped file, applying the relocations the dynamic
 * linker would have applied to its pointers.  Every offset, size and count
 * read from the file is checked against the file before it is used; the
 * file is mapped read-only and nothing in it is executed.
 *
 * What comes out is a vitc_abi_model whose pointers point into the mapping
 * (strings, code images: read-only data the linker does not relocate) or
 * into copies owned by the rt_elf_desc (arrays whose entries hold pointers). */
#include "runtime/rt_impl.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define ELF_MAX_STRING (1u << 20) /* longest string a descriptor may point to */
#define ELF_MAX_COPY (1u << 26)   /* bytes of descriptor arrays copied, in all */
#define ELF_MAX_RELOCS (1u << 22) /* pointer relocations kept (a model has a few per kernel) */

typedef struct {
    uint64_t offset, value; /* where the pointer is (a virtual address), what it holds */
} elf_reloc;

struct rt_elf_desc {
    const unsigned char *map; /* the whole file */
    size_t size;
    const Elf64_Phdr *load[16];
    int nload;
    elf_reloc *relocs; /* sorted by offset */
    size_t nrelocs;
    void **owned; /* copies made, freed with the descriptor */
    size_t nowned, capowned, copied;
    vitc_abi_model abi;
    uint64_t desc_va; /* where abi is in the file */
    char why[256]; /* first problem found */
};

static int bad(rt_elf_desc *d, const char *fmt, const char *what)
{
    if (!d->why[0])
        snprintf(d->why, sizeof d->why, fmt, what);
    return -1;
}

/* The file bytes behind [va, va + n) when they lie in one loaded segment's
 * file image; NULL otherwise. */
static const unsigned char *at(const rt_elf_desc *d, uint64_t va, uint64_t n)
{
    for (int i = 0; i < d->nload; i++) {
        const Elf64_Phdr *p = d->load[i];
        if (va >= p->p_vaddr && va - p->p_vaddr <= p->p_filesz && n <= p->p_filesz - (va - p->p_vaddr))
            return d->map + p->p_offset + (va - p->p_vaddr);
    }
    return NULL;
}

/* The file bytes of [off, off + n); NULL when outside the file. */
static const unsigned char *file_at(const rt_elf_desc *d, uint64_t off, uint64_t n)
{
    return off <= d->size && n <= d->size - off ? d->map + off : NULL;
}

/* A table of 8-byte aligned entries at [off, off + n) of the file. */
static const unsigned char *table_at(const rt_elf_desc *d, uint64_t off, uint64_t n)
{
    return off % 8 == 0 ? file_at(d, off, n) : NULL;
}

static int reloc_cmp(const void *a, const void *b)
{
    const elf_reloc *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* The pointer-sized value at va as the dynamic linker leaves it: a relocated
 * address (relative to a load base of 0), or the file's own bytes.  Sets
 * *ok to 0 when va is not in the file. */
static uint64_t word_at(const rt_elf_desc *d, uint64_t va, int *ok)
{
    size_t lo = 0, hi = d->nrelocs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (d->relocs[mid].offset < va)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < d->nrelocs && d->relocs[lo].offset == va)
        return d->relocs[lo].value;
    const unsigned char *p = at(d, va, 8);
    if (!p) {
        *ok = 0;
        return 0;
    }
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* Machine-specific relocation kinds that set a pointer. */
typedef enum { RK_OTHER, RK_RELATIVE, RK_ABSOLUTE } reloc_kind;

static reloc_kind kind_of(int machine, uint32_t type)
{
    switch (machine) {
    case EM_X86_64:
        return type == R_X86_64_RELATIVE ? RK_RELATIVE
               : type == R_X86_64_64 || type == R_X86_64_GLOB_DAT ? RK_ABSOLUTE : RK_OTHER;
    case EM_AARCH64:
        return type == R_AARCH64_RELATIVE ? RK_RELATIVE
               : type == R_AARCH64_ABS64 || type == R_AARCH64_GLOB_DAT ? RK_ABSOLUTE : RK_OTHER;
    }
    return RK_OTHER;
}

static int push_reloc(rt_elf_desc *d, size_t *cap, uint64_t offset, uint64_t value)
{
    if (d->nrelocs >= ELF_MAX_RELOCS)
        return bad(d, "%s", "more relocations than a vitc model has");
    if (d->nrelocs == *cap) {
        size_t n = *cap ? *cap * 2 : 256;
        elf_reloc *r = n < (SIZE_MAX / sizeof *r) ? realloc(d->relocs, n * sizeof *r) : NULL;
        if (!r)
            return bad(d, "%s", "out of memory");
        d->relocs = r;
        *cap = n;
    }
    d->relocs[d->nrelocs++] = (elf_reloc){offset, value};
    return 0;
}

/* Collects the pointer relocations of every SHT_RELA and SHT_RELR section. */
static int read_relocs(rt_elf_desc *d, const Elf64_Ehdr *eh, const Elf64_Shdr *sh)
{
    size_t cap = 0;
    for (int s = 0; s < eh->e_shnum; s++) {
        if (sh[s].sh_type == SHT_RELA) {
            if (sh[s].sh_entsize != sizeof(Elf64_Rela) || sh[s].sh_link >= eh->e_shnum)
                return bad(d, "%s", "malformed relocation section");
            const Elf64_Shdr *symsec = &sh[sh[s].sh_link];
            const Elf64_Rela *r = (const void *)table_at(d, sh[s].sh_offset, sh[s].sh_size);
            const Elf64_Sym *syms = (const void *)table_at(d, symsec->sh_offset, symsec->sh_size);
            uint64_t nsyms = symsec->sh_size / sizeof(Elf64_Sym);
            if (!r || (!syms && nsyms))
                return bad(d, "%s", "relocation section outside the file");
            for (uint64_t i = 0; i < sh[s].sh_size / sizeof *r; i++) {
                reloc_kind k = kind_of(eh->e_machine, (uint32_t)ELF64_R_TYPE(r[i].r_info));
                uint64_t sym = ELF64_R_SYM(r[i].r_info), base = 0;
                if (k == RK_OTHER)
                    continue;
                if (k == RK_ABSOLUTE) { /* S + A, where S is defined here; 0 where it comes from elsewhere */
                    if (sym >= nsyms)
                        return bad(d, "%s", "relocation names a symbol that does not exist");
                    if (syms[sym].st_shndx == SHN_UNDEF)
                        continue;
                    base = syms[sym].st_value;
                }
                if (push_reloc(d, &cap, r[i].r_offset, base + (uint64_t)r[i].r_addend))
                    return -1;
            }
        } else if (sh[s].sh_type == SHT_RELR) {
            /* Packed relative relocations: an even entry is the address of
             * one, an odd one a bitmap of the 63 words after the last
             * address; the addend is the word in the file. */
            const uint64_t *e = (const void *)table_at(d, sh[s].sh_offset, sh[s].sh_size);
            if (!e || sh[s].sh_entsize != 8)
                return bad(d, "%s", "malformed packed relocation section");
            uint64_t next = 0;
            for (uint64_t i = 0; i < sh[s].sh_size / 8; i++) {
                uint64_t bits = e[i] & 1 ? e[i] >> 1 : 1, base = e[i] & 1 ? next : e[i];
                for (uint64_t b = 0; bits; b++, bits >>= 1) {
                    if (!(bits & 1))
                        continue;
                    const unsigned char *p = at(d, base + b * 8, 8);
                    uint64_t v;
                    if (!p)
                        return bad(d, "%s", "packed relocation outside the file");
                    memcpy(&v, p, 8);
                    if (push_reloc(d, &cap, base + b * 8, v))
                        return -1;
                }
                next = e[i] & 1 ? next + 63 * 8 : e[i] + 8;
            }
        }
    }
    if (d->nrelocs)
        qsort(d->relocs, d->nrelocs, sizeof *d->relocs, reloc_cmp);
    return 0;
}

/* The descriptor symbol's address: VITC_ABI_SYMBOL, or another ABI
 * version's symbol (its version in *other). 0 when there is none. */
static uint64_t find_symbol(rt_elf_desc *d, const Elf64_Ehdr *eh, const Elf64_Shdr *sh, uint64_t *size, int *other)
{
    for (int s = 0; s < eh->e_shnum; s++) {
        if (sh[s].sh_type != SHT_DYNSYM || sh[s].sh_link >= eh->e_shnum)
            continue;
        const Elf64_Shdr *strsec = &sh[sh[s].sh_link];
        const Elf64_Sym *syms = (const void *)table_at(d, sh[s].sh_offset, sh[s].sh_size);
        const char *strs = (const void *)file_at(d, strsec->sh_offset, strsec->sh_size);
        if (!syms || !strs)
            return bad(d, "%s", "dynamic symbol table outside the file"), 0;
        for (uint64_t i = 0; i < sh[s].sh_size / sizeof *syms; i++) {
            uint64_t name = syms[i].st_name;
            if (syms[i].st_shndx == SHN_UNDEF || name >= strsec->sh_size)
                continue;
            const char *n = strs + name;
            size_t room = strsec->sh_size - name;
            if (!memchr(n, 0, room))
                continue;
            if (strcmp(n, VITC_ABI_SYMBOL) == 0) {
                *size = syms[i].st_size;
                return syms[i].st_value;
            }
            int v;
            char tail;
            if (sscanf(n, "vitc_model_v%d%c", &v, &tail) == 1 && v >= 0 && v < 64)
                *other = v;
        }
    }
    return 0;
}

/* Memory owned by d, freed with it. */
static void *own(rt_elf_desc *d, size_t n)
{
    if (n > ELF_MAX_COPY - d->copied)
        return bad(d, "%s", "descriptor arrays too large"), NULL;
    if (d->nowned == d->capowned) {
        size_t c = d->capowned ? d->capowned * 2 : 16;
        void **o = realloc(d->owned, c * sizeof *o);
        if (!o)
            return bad(d, "%s", "out of memory"), NULL;
        d->owned = o;
        d->capowned = c;
    }
    void *p = calloc(1, n ? n : 1);
    if (!p)
        return bad(d, "%s", "out of memory"), NULL;
    d->copied += n;
    d->owned[d->nowned++] = p;
    return p;
}

/* The NUL-terminated string at va, in the mapping; NULL for a null pointer
 * (and, with an error recorded, for one outside the file or unterminated). */
static const char *string_at(rt_elf_desc *d, uint64_t va, const char *what)
{
    if (!va)
        return NULL;
    for (int i = 0; i < d->nload; i++) {
        const Elf64_Phdr *p = d->load[i];
        if (va >= p->p_vaddr && va - p->p_vaddr < p->p_filesz) {
            const char *s = (const char *)d->map + p->p_offset + (va - p->p_vaddr);
            size_t room = p->p_filesz - (va - p->p_vaddr);
            if (memchr(s, 0, room < ELF_MAX_STRING ? room : ELF_MAX_STRING))
                return s;
        }
    }
    bad(d, "the %s string is outside the file or unterminated", what);
    return NULL;
}

/* A copy of n entries of size bytes at va, each with its pointer fields at
 * offsets ptrs[0..nptrs) relocated and rewritten by fix (which turns the
 * pointee's address into a host pointer; NULL stays NULL). */
typedef const void *(*elf_fix)(rt_elf_desc *d, uint64_t va, void *entry);

static void *copy_array(rt_elf_desc *d, uint64_t va, int64_t n, size_t size, const size_t *ptrs, const elf_fix *fix,
                        int nptrs, const char *what)
{
    if (!va || n <= 0)
        return NULL;
    if ((uint64_t)n > ELF_MAX_COPY / size)
        return bad(d, "the %s list is too long", what), NULL;
    const unsigned char *src = at(d, va, (uint64_t)n * size);
    if (!src)
        return bad(d, "the %s list is outside the file", what), NULL;
    unsigned char *dst = own(d, (size_t)n * size);
    if (!dst)
        return NULL;
    memcpy(dst, src, (size_t)n * size);
    for (int64_t i = 0; i < n; i++)
        for (int k = 0; k < nptrs; k++) {
            int ok = 1;
            uint64_t target = word_at(d, va + (uint64_t)i * size + ptrs[k], &ok);
            const void *host = target ? fix[k](d, target, dst + (size_t)i * size) : NULL;
            if (!ok || (target && !host))
                return bad(d, "a pointer of the %s list is outside the file", what), NULL;
            memcpy(dst + (size_t)i * size + ptrs[k], &host, sizeof host);
        }
    return dst;
}

static const void *fix_string(rt_elf_desc *d, uint64_t va, void *entry)
{
    (void)entry;
    return string_at(d, va, "descriptor");
}

/* A pointer the runtime never follows for a model read as data (run, the
 * embedded weights): any non-NULL address that lies in the file. */
static const void *fix_opaque(rt_elf_desc *d, uint64_t va, void *entry)
{
    (void)entry;
    return at(d, va, 1);
}

static const void *fix_image_data(rt_elf_desc *d, uint64_t va, void *entry)
{
    const vitc_cuda_image *im = entry;
    return at(d, va, im->bytes);
}

static const void *fix_launch_args(rt_elf_desc *d, uint64_t va, void *entry)
{
    const vitc_cuda_launch *l = entry;
    if (l->nargs < 0 || l->nargs > VITC_CUDA_MAX_ARGS)
        return bad(d, "%s", "a CUDA launch with a bad argument count"), NULL;
    return copy_array(d, va, l->nargs, sizeof(vitc_cuda_arg), NULL, NULL, 0, "CUDA launch argument");
}

static const void *fix_launch_tmaps(rt_elf_desc *d, uint64_t va, void *entry)
{
    const vitc_cuda_launch *l = entry;
    if (l->ntmaps < 0 || l->ntmaps > VITC_CUDA_MAX_TMAPS)
        return bad(d, "%s", "a CUDA launch with a bad tensor map count"), NULL;
    return copy_array(d, va, l->ntmaps, sizeof(vitc_cuda_tmap), NULL, NULL, 0, "CUDA tensor map");
}

static const char *const *string_list(rt_elf_desc *d, uint64_t va, int64_t n, const char *what)
{
    static const size_t off0[] = {0};
    static const elf_fix fs[] = {fix_string};
    return copy_array(d, va, n, sizeof(char *), off0, fs, 1, what);
}

#define FIELD_VA(base, type, field) ((base) + offsetof(type, field))

/* The CUDA plan at va, copied with everything it points to. */
static const void *fix_cuda_plan(rt_elf_desc *d, uint64_t va, void *entry)
{
    const vitc_abi_model *a = entry;
    const unsigned char *src = at(d, va, sizeof(vitc_cuda_plan));
    vitc_cuda_plan *p = src ? own(d, sizeof *p) : NULL;
    if (!p)
        return bad(d, "%s", "the CUDA plan is outside the file"), NULL;
    memcpy(p, src, sizeof *p);
    int ok = 1;
#define PTR(field) word_at(d, FIELD_VA(va, vitc_cuda_plan, field), &ok)
    uint64_t precision = PTR(precision), images = PTR(images), functions = PTR(functions), launches = PTR(launches),
             inputs = PTR(inputs), outputs = PTR(outputs);
#undef PTR
    if (!ok)
        return bad(d, "%s", "the CUDA plan is outside the file"), NULL;
    if (p->version != VITC_CUDA_PLAN_VERSION || p->size != sizeof *p) {
        /* laid out otherwise: the version alone is read, and the load reports it */
        p->precision = NULL, p->images = NULL, p->functions = NULL, p->launches = NULL;
        p->inputs = p->outputs = NULL;
        return p;
    }
    static const size_t image_ptrs[] = {offsetof(vitc_cuda_image, data)};
    static const elf_fix image_fix[] = {fix_image_data};
    static const size_t launch_ptrs[] = {offsetof(vitc_cuda_launch, args), offsetof(vitc_cuda_launch, tmaps)};
    static const elf_fix launch_fix[] = {fix_launch_args, fix_launch_tmaps};
    p->precision = string_at(d, precision, "CUDA precision");
    p->images = copy_array(d, images, p->nimages, sizeof(vitc_cuda_image), image_ptrs, image_fix, 1, "code image");
    p->functions = string_list(d, functions, p->nfunctions, "kernel function");
    p->launches = copy_array(d, launches, p->nlaunches, sizeof(vitc_cuda_launch), launch_ptrs, launch_fix, 2,
                             "CUDA launch");
    p->inputs = copy_array(d, inputs, a->ninputs, sizeof(vitc_cuda_io), NULL, NULL, 0, "CUDA input");
    p->outputs = copy_array(d, outputs, a->noutputs, sizeof(vitc_cuda_io), NULL, NULL, 0, "CUDA output");
    return d->why[0] ? NULL : p;
}

static int copy_descriptor(rt_elf_desc *d, uint64_t va, uint64_t symsize, vitc_abi_model *a);

/* An entry of the variants list: the exported descriptor itself, or a copy
 * of another (whose own variants are not read: only the first lists them). */
static const void *fix_variant(rt_elf_desc *d, uint64_t va, void *entry)
{
    (void)entry;
    if (va == d->desc_va)
        return &d->abi;
    vitc_abi_model *v = own(d, sizeof *v);
    if (!v || copy_descriptor(d, va, 0, v))
        return NULL;
    v->nvariants = 0;
    v->variants = NULL;
    return v;
}

/* Copies the descriptor at va (size bytes as the symbol says, 0: unknown)
 * into a. */
static int copy_descriptor(rt_elf_desc *d, uint64_t va, uint64_t symsize, vitc_abi_model *a)
{
    const unsigned char *src = at(d, va, 8);
    if (!src)
        return bad(d, "%s", "its descriptor is outside the file");
    uint32_t size;
    memcpy(&size, src + offsetof(vitc_abi_model, size), sizeof size);
    /* A size the runtime does not read is reported by the descriptor check;
     * copy what is there of the fields this runtime knows. */
    uint64_t n = size < sizeof *a ? size : sizeof *a;
    if (n < VITC_ABI_MODEL_BASE_SIZE)
        n = offsetof(vitc_abi_model, size) + sizeof size;
    if (symsize && symsize < n)
        n = symsize;
    if (!(src = at(d, va, n)))
        return bad(d, "%s", "its descriptor is outside the file");
    memcpy(a, src, n);
    /* No pointer of the file's is kept: each is NULL until read as it is relocated. */
    a->vitc_version = a->target = a->triple = a->cpu = a->features = a->source = a->weights_file = NULL;
    a->inputs = a->outputs = NULL;
    a->weights = NULL;
    a->run = NULL;
    a->kernel_names = NULL;
    a->cuda_plan = NULL;
    a->parts = NULL;
    a->precision = NULL;
    a->knobs = NULL;
    a->variants = NULL;
    if (n < VITC_ABI_MODEL_BASE_SIZE) {
        if (a->size >= VITC_ABI_MODEL_BASE_SIZE)
            return bad(d, "%s", "its descriptor symbol is smaller than the descriptor");
        return 0; /* the check reports the size */
    }
    int ok = 1;
    static const size_t tensor_ptrs[] = {offsetof(vitc_abi_tensor, name)};
    static const elf_fix tensor_fix[] = {fix_string};
#define PTR(field) word_at(d, FIELD_VA(va, vitc_abi_model, field), &ok)
    a->vitc_version = string_at(d, PTR(vitc_version), "vitc version");
    a->target = string_at(d, PTR(target), "target");
    a->triple = string_at(d, PTR(triple), "triple");
    a->cpu = string_at(d, PTR(cpu), "cpu");
    a->features = string_at(d, PTR(features), "features");
    a->source = string_at(d, PTR(source), "source");
    a->weights_file = string_at(d, PTR(weights_file), "weights file");
    if (a->ninputs < 0 || a->noutputs < 0 || a->nkernels < 0)
        return 0; /* the descriptor check names the bad count */
    a->inputs = copy_array(d, PTR(inputs), a->ninputs, sizeof(vitc_abi_tensor), tensor_ptrs, tensor_fix, 1, "input");
    a->outputs =
        copy_array(d, PTR(outputs), a->noutputs, sizeof(vitc_abi_tensor), tensor_ptrs, tensor_fix, 1, "output");
    a->kernel_names = string_list(d, PTR(kernel_names), a->nkernels, "kernel name");
    uint64_t run = PTR(run), weights = PTR(weights);
    a->run = run ? (int32_t(*)(const vitc_abi_call *))(uintptr_t)fix_opaque(d, run, NULL) : NULL;
    a->weights = weights ? fix_opaque(d, weights, NULL) : NULL;
    if ((run && !a->run) || (weights && !a->weights))
        bad(d, "%s", "its run function or weights point outside the file");
    if (n >= offsetof(vitc_abi_model, cuda_plan) + sizeof(void *)) {
        uint64_t plan = PTR(cuda_plan);
        a->cuda_plan = plan ? fix_cuda_plan(d, plan, a) : NULL;
    }
    if (n >= offsetof(vitc_abi_model, parts) + sizeof(void *)) {
        static const size_t part_ptrs[] = {offsetof(vitc_abi_part, kernels), offsetof(vitc_abi_part, op),
                                           offsetof(vitc_abi_part, source)};
        static const elf_fix part_fix[] = {fix_string, fix_string, fix_string};
        a->parts = copy_array(d, PTR(parts), a->nparts, sizeof(vitc_abi_part), part_ptrs, part_fix, 3, "profile part");
    }
    if (n >= offsetof(vitc_abi_model, precision) + sizeof(void *))
        a->precision = string_at(d, PTR(precision), "precision");
    if (n >= offsetof(vitc_abi_model, knobs) + sizeof(void *))
        a->knobs = string_at(d, PTR(knobs), "knobs");
    if (n >= offsetof(vitc_abi_model, variants) + sizeof(void *) && a == &d->abi && a->nvariants > 1) {
        static const size_t variant_ptrs[] = {0};
        static const elf_fix variant_fix[] = {fix_variant};
        if (a->nvariants > RT_MAX_VARIANTS)
            return bad(d, "%s", "its descriptor lists too many variants");
        a->variants = copy_array(d, PTR(variants), a->nvariants, sizeof(void *), variant_ptrs, variant_fix, 1,
                                 "variant");
    }
#undef PTR
    if (!ok)
        return bad(d, "%s", "its descriptor is outside the file");
    return d->why[0] ? -1 : 0;
}

static int parse(rt_elf_desc *d, int *other_abi)
{
    const Elf64_Ehdr *eh = (const void *)file_at(d, 0, sizeof(Elf64_Ehdr));
    if (!eh || memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0)
        return bad(d, "%s", "not an ELF file");
    if (eh->e_ident[EI_CLASS] != ELFCLASS64 || eh->e_ident[EI_DATA] != ELFDATA2LSB)
        return bad(d, "%s", "not a 64-bit little-endian ELF file");
#if defined(__x86_64__)
    const int host = EM_X86_64;
#elif defined(__aarch64__)
    const int host = EM_AARCH64;
#else
    const int host = -1;
#endif
    if (eh->e_machine != host)
        return bad(d, "%s", "built for another machine architecture than this one");
    if (eh->e_type != ET_DYN)
        return bad(d, "%s", "not a shared library");
    if (eh->e_phentsize != sizeof(Elf64_Phdr) || eh->e_shentsize != sizeof(Elf64_Shdr))
        return bad(d, "%s", "malformed ELF header");
    const Elf64_Phdr *ph = (const void *)table_at(d, eh->e_phoff, (uint64_t)eh->e_phnum * sizeof *ph);
    const Elf64_Shdr *sh = (const void *)table_at(d, eh->e_shoff, (uint64_t)eh->e_shnum * sizeof *sh);
    if (!ph || !sh || !eh->e_shnum)
        return bad(d, "%s", "its program or section headers are missing or outside the file");
    for (int i = 0; i < eh->e_phnum; i++) {
        if (ph[i].p_type != PT_LOAD)
            continue;
        if (d->nload == (int)(sizeof d->load / sizeof d->load[0]) || !file_at(d, ph[i].p_offset, ph[i].p_filesz))
            return bad(d, "%s", "malformed program headers");
        d->load[d->nload++] = &ph[i];
    }
    if (read_relocs(d, eh, sh))
        return -1;
    uint64_t symsize = 0;
    uint64_t va = find_symbol(d, eh, sh, &symsize, other_abi);
    if (d->why[0])
        return -1;
    if (!va)
        return 1;
    d->desc_va = va;
    return copy_descriptor(d, va, symsize, &d->abi);
}

void rt_elf_desc_free(rt_elf_desc *d)
{
    if (!d)
        return;
    for (size_t i = 0; i < d->nowned; i++)
        free(d->owned[i]);
    free(d->owned);
    free(d->relocs);
    if (d->map)
        munmap((void *)d->map, d->size);
    free(d);
}

vitc_status rt_elf_desc_read(const char *path, rt_elf_desc **out)
{
    *out = NULL;
    /* O_NONBLOCK: a FIFO given as a model is refused below, not waited on */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return rt_fail(VITC_STATUS_LOAD_FAILED, "%s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return rt_fail(VITC_STATUS_LOAD_FAILED, "%s: not a regular file", path);
    }
    rt_elf_desc *d = calloc(1, sizeof *d);
    if (!d) {
        close(fd);
        return rt_fail(VITC_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    d->size = (size_t)sb.st_size;
    void *map = d->size ? mmap(NULL, d->size, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
    close(fd);
    if (map == MAP_FAILED) {
        int empty = d->size == 0;
        rt_elf_desc_free(d);
        return rt_fail(VITC_STATUS_LOAD_FAILED, "%s: %s", path,
                       empty ? "not a vitc model: the file is empty" : "cannot be mapped into memory");
    }
    d->map = map;
    int other_abi = -1;
    int r = parse(d, &other_abi);
    vitc_status st = VITC_STATUS_OK;
    if (r < 0)
        st = rt_fail(VITC_STATUS_LOAD_FAILED, "%s: not a loadable vitc model: %s", path, d->why);
    else if (r > 0 && other_abi >= 0 && other_abi != VITC_ABI_VERSION)
        st = rt_fail(VITC_STATUS_ABI_MISMATCH,
                     "%s: compiled for vitc model ABI %d; this runtime reads ABI %d (recompile the model)", path,
                     other_abi, VITC_ABI_VERSION);
    else if (r > 0)
        st = rt_fail(VITC_STATUS_LOAD_FAILED, "%s: not a vitc model (no symbol %s)", path, VITC_ABI_SYMBOL);
    if (st != VITC_STATUS_OK) {
        rt_elf_desc_free(d);
        return st;
    }
    *out = d;
    return VITC_STATUS_OK;
}

const vitc_abi_model *rt_elf_desc_model(const rt_elf_desc *d)
{
    return &d->abi;
}
