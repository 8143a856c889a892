/* elf_obj.c: read-only bytes as an ELF relocatable object of their own.
 *
 * A ViT-B carries 330 MB of weights.  Handing them to a compiler as one
 * constant array costs a copy, and seconds in the assembly printer; the
 * bytes need no compiling.  On ELF hosts and targets they are written here
 * as a relocatable object with 64-byte-aligned read-only sections and one
 * hidden symbol per item (the weights, a CUDA model's code images), which
 * the code that uses them declares and the linker joins to it.  Other
 * object formats keep the weights inside the LLVM module.
 *
 * Items are written into .vitc.const; an item marked late (the weights) is
 * not: it goes in .vitc.late, after 64 bytes of that section's own, as a
 * hole of its size (a sparse file, nothing on disk) that any linker copies
 * like other bytes, or, with vitc's lld, not at all: a linker script
 * (package.c) reserves its room, which lld leaves unwritten.  Either way
 * cg_elf_fill_late then writes the bytes once, into the linked file, where
 * the section landed: no 346 MB object written beside LLVM's work, no
 * linker copy of it. */
#include "codegen/package.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The ELF machine for a target triple, or 0 if this writer does not know it. */
int cg_elf_machine(const char *triple)
{
    if (!triple)
        triple = cg_host_triple();
    if (!strstr(triple, "linux") && !strstr(triple, "elf"))
        return 0;
    if (strncmp(triple, "x86_64", 6) == 0)
        return EM_X86_64;
    if (strncmp(triple, "aarch64", 7) == 0)
        return EM_AARCH64;
    return 0;
}

const char *cg_host_triple(void)
{
#if defined(__x86_64__) && defined(__linux__)
    return "x86_64-pc-linux-gnu";
#elif defined(__aarch64__) && defined(__linux__)
    return "aarch64-unknown-linux-gnu";
#else
    return "unknown-unknown-unknown";
#endif
}

static size_t align64(size_t x) { return (x + 63) & ~(size_t)63; }

static const unsigned char zeros[64];

enum { SEC_NULL, SEC_CONST, SEC_LATE, SEC_NOTE, SEC_SYMTAB, SEC_STRTAB, SEC_SHSTRTAB, NSEC };
#define CONST_NAME ".vitc.const"
#define LATE_NAME ".vitc.late"
/* .vitc.late starts with this many zero bytes of its own: an input section
 * the linker sees even when the late bytes are reserved by a script */
enum { ANCHOR = 64 };

/* The offsets (64-byte aligned) of the items that are late (or not) in
 * their section, and the section's size. */
static size_t layout(const cg_section *items, int n, int late, size_t *off)
{
    size_t at = late ? ANCHOR : 0;
    for (int i = 0; i < n; i++) {
        if (!items[i].late != !late)
            continue;
        at = align64(at);
        if (off)
            off[i] = at;
        at += items[i].bytes + (items[i].nul != 0);
    }
    return at;
}

/* Writes one section's items at the file's position (64-aligned), holes for
 * late ones; pos counts from the section's start. */
static int write_items(FILE *f, const cg_section *items, int n, int late, size_t pos, size_t end)
{
    int ok = 1;
    for (int i = 0; ok && i < n; i++) {
        if (!items[i].late != !late)
            continue;
        size_t pad = align64(pos) - pos, nul = items[i].nul != 0;
        ok = fwrite(zeros, 1, pad, f) == pad;
        if (ok && late) /* a hole: cg_elf_fill_late writes these bytes into the linked file */
            ok = fseeko(f, (off_t)items[i].bytes, SEEK_CUR) == 0;
        else if (ok && items[i].bytes)
            ok = fwrite(items[i].data, 1, items[i].bytes, f) == items[i].bytes;
        ok = ok && fwrite(zeros, 1, nul, f) == nul;
        pos += pad + items[i].bytes + nul;
    }
    return ok && fwrite(zeros, 1, end - pos, f) == end - pos;
}

int cg_write_elf_object(vitc_diag *d, const char *path, int machine, const cg_section *items, int n, int reserved)
{
    static const char shstr[] = "\0" CONST_NAME "\0" LATE_NAME "\0.note.GNU-stack\0.symtab\0.strtab\0.shstrtab";
    enum { N_CONST = 1, N_LATE = N_CONST + sizeof CONST_NAME, N_NOTE = N_LATE + sizeof LATE_NAME,
           N_SYMTAB = N_NOTE + 16, N_STRTAB = N_SYMTAB + 8, N_SHSTRTAB = N_STRTAB + 8 };
    size_t *off = calloc((size_t)n + 1, sizeof *off);
    size_t const_len = layout(items, n, 0, off), late_len = layout(items, n, 1, off);
    /* reserved: the linker script adds the late bytes after the anchor; the
     * symbols point past the section's end, where they will be */
    size_t late_file = reserved ? ANCHOR : late_len;
    size_t strtab_len = 1;
    for (int i = 0; i < n; i++)
        strtab_len += strlen(items[i].symbol) + 1;
    char *strtab = calloc(1, strtab_len);
    Elf64_Sym *syms = calloc((size_t)n + 3, sizeof *syms);
    if (!strtab || !syms || !off) {
        free(strtab), free(syms), free(off);
        return vitc_error(d, VITC_INTERNAL, NULL, "out of memory");
    }
    syms[1].st_info = syms[2].st_info = ELF64_ST_INFO(STB_LOCAL, STT_SECTION);
    syms[1].st_shndx = SEC_CONST;
    syms[2].st_shndx = SEC_LATE;
    size_t sp = 1;
    for (int i = 0; i < n; i++) {
        Elf64_Sym *y = &syms[i + 3];
        y->st_name = (Elf64_Word)sp;
        y->st_info = ELF64_ST_INFO(STB_GLOBAL, STT_OBJECT);
        y->st_other = STV_HIDDEN;
        y->st_shndx = items[i].late ? SEC_LATE : SEC_CONST;
        y->st_value = off[i];
        y->st_size = items[i].bytes + (items[i].nul != 0);
        memcpy(strtab + sp, items[i].symbol, strlen(items[i].symbol) + 1);
        sp += strlen(items[i].symbol) + 1;
    }
    free(off);
    size_t syms_bytes = ((size_t)n + 3) * sizeof *syms;

    /* layout: header | const (64-aligned) | late | symtab | strtab | shstrtab | section headers */
    uint64_t off_const = 64, off_late = align64(off_const + const_len);
    uint64_t off_sym = (off_late + late_file + 7) & ~(uint64_t)7;
    uint64_t off_str = off_sym + syms_bytes, off_shstr = off_str + strtab_len;
    uint64_t off_sh = (off_shstr + sizeof shstr + 7) & ~(uint64_t)7;

    Elf64_Ehdr eh;
    memset(&eh, 0, sizeof eh);
    memcpy(eh.e_ident, ELFMAG, SELFMAG);
    eh.e_ident[EI_CLASS] = ELFCLASS64;
    eh.e_ident[EI_DATA] = ELFDATA2LSB;
    eh.e_ident[EI_VERSION] = EV_CURRENT;
    eh.e_ident[EI_OSABI] = ELFOSABI_NONE;
    eh.e_type = ET_REL;
    eh.e_machine = (Elf64_Half)machine;
    eh.e_version = EV_CURRENT;
    eh.e_shoff = off_sh;
    eh.e_ehsize = sizeof eh;
    eh.e_shentsize = sizeof(Elf64_Shdr);
    eh.e_shnum = NSEC;
    eh.e_shstrndx = SEC_SHSTRTAB;

    Elf64_Shdr sh[NSEC];
    memset(sh, 0, sizeof sh);
    sh[SEC_CONST] = (Elf64_Shdr){.sh_name = N_CONST, .sh_type = SHT_PROGBITS, .sh_flags = SHF_ALLOC,
                                 .sh_offset = off_const, .sh_size = const_len, .sh_addralign = 64};
    sh[SEC_LATE] = (Elf64_Shdr){.sh_name = N_LATE, .sh_type = SHT_PROGBITS, .sh_flags = SHF_ALLOC,
                                .sh_offset = off_late, .sh_size = late_file, .sh_addralign = 64};
    sh[SEC_NOTE] = (Elf64_Shdr){.sh_name = N_NOTE, .sh_type = SHT_PROGBITS, .sh_offset = off_const,
                                .sh_addralign = 1};
    sh[SEC_SYMTAB] = (Elf64_Shdr){.sh_name = N_SYMTAB, .sh_type = SHT_SYMTAB, .sh_offset = off_sym,
                                  .sh_size = syms_bytes, .sh_link = SEC_STRTAB, .sh_info = 3, .sh_addralign = 8,
                                  .sh_entsize = sizeof(Elf64_Sym)};
    sh[SEC_STRTAB] = (Elf64_Shdr){.sh_name = N_STRTAB, .sh_type = SHT_STRTAB, .sh_offset = off_str,
                                  .sh_size = strtab_len, .sh_addralign = 1};
    sh[SEC_SHSTRTAB] = (Elf64_Shdr){.sh_name = N_SHSTRTAB, .sh_type = SHT_STRTAB, .sh_offset = off_shstr,
                                    .sh_size = sizeof shstr, .sh_addralign = 1};

    FILE *f = fopen(path, "wb");
    if (!f) {
        free(strtab), free(syms);
        return vitc_error(d, VITC_BAD_INPUT, NULL, "cannot write %s: %s", path, strerror(errno));
    }
    int ok = fwrite(&eh, sizeof eh, 1, f) == 1;
    ok = ok && write_items(f, items, n, 0, 0, off_late - off_const);
    ok = ok && fwrite(zeros, 1, ANCHOR, f) == ANCHOR;
    if (!reserved)
        ok = ok && write_items(f, items, n, 1, ANCHOR, late_len);
    ok = ok && fwrite(zeros, 1, off_sym - off_late - late_file, f) == off_sym - off_late - late_file;
    ok = ok && fwrite(syms, syms_bytes, 1, f) == 1;
    ok = ok && fwrite(strtab, 1, strtab_len, f) == strtab_len;
    ok = ok && fwrite(shstr, 1, sizeof shstr, f) == sizeof shstr;
    ok = ok && fwrite(zeros, 1, off_sh - off_shstr - sizeof shstr, f) == off_sh - off_shstr - sizeof shstr;
    ok = ok && fwrite(sh, sizeof sh, 1, f) == 1;
    if (fclose(f) != 0)
        ok = 0;
    free(strtab), free(syms);
    if (!ok)
        return vitc_error(d, VITC_BAD_INPUT, NULL, "writing %s failed: %s", path, strerror(errno));
    return VITC_OK;
}

size_t cg_elf_late_bytes(const cg_section *items, int n) { return layout(items, n, 1, NULL) - ANCHOR; }

/* pread/pwrite all n bytes at off, through short transfers and EINTR. */
static int full_io(int fd, void *buf, size_t n, off_t off, int writing)
{
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t r = writing ? pwrite(fd, p, n, off) : pread(fd, p, n, off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r, n -= (size_t)r, off += r;
    }
    return 0;
}

int cg_elf_fill_late(vitc_diag *d, const char *path, const cg_section *items, int n)
{
    int any = 0;
    for (int i = 0; i < n; i++)
        any |= items[i].late && items[i].bytes > 0;
    if (!any)
        return VITC_OK;
    size_t *off = malloc((size_t)n * sizeof *off);
    Elf64_Shdr *sh = NULL;
    char *names = NULL;
    const char *why = NULL;
    int fd = off ? open(path, O_RDWR | O_CLOEXEC) : -1;
    if (!off)
        why = "out of memory";
    else if (fd < 0)
        why = strerror(errno);
    size_t size = off ? layout(items, n, 1, off) : 0;
    struct stat st;
    Elf64_Ehdr eh;
    if (!why && (fstat(fd, &st) != 0 || full_io(fd, &eh, sizeof eh, 0, 0) != 0 ||
                 memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
                 eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shnum == 0 || eh.e_shstrndx >= eh.e_shnum ||
                 eh.e_shoff > (uint64_t)st.st_size ||
                 (uint64_t)eh.e_shnum * sizeof(Elf64_Shdr) > (uint64_t)st.st_size - eh.e_shoff))
        why = "not a 64-bit ELF file with section headers";
    if (!why && (!(sh = malloc((size_t)eh.e_shnum * sizeof *sh)) ||
                 full_io(fd, sh, (size_t)eh.e_shnum * sizeof *sh, (off_t)eh.e_shoff, 0) != 0))
        why = "cannot read its section headers";
    const Elf64_Shdr *names_sh = why ? NULL : &sh[eh.e_shstrndx];
    if (!why && (names_sh->sh_offset > (uint64_t)st.st_size || names_sh->sh_size > (uint64_t)st.st_size - names_sh->sh_offset ||
                 names_sh->sh_size > ((size_t)1 << 24) || !(names = calloc(1, names_sh->sh_size + 1)) ||
                 full_io(fd, names, names_sh->sh_size, (off_t)names_sh->sh_offset, 0) != 0))
        why = "cannot read its section names";
    const Elf64_Shdr *data = NULL;
    for (int i = 0; !why && i < eh.e_shnum; i++)
        if (sh[i].sh_name < names_sh->sh_size && strcmp(names + sh[i].sh_name, LATE_NAME) == 0)
            data = &sh[i];
    /* the linker keeps one input section of a name alone in its output section of that name */
    if (!why && (!data || data->sh_type != SHT_PROGBITS || data->sh_size != size ||
                 data->sh_offset > (uint64_t)st.st_size || size > (uint64_t)st.st_size - data->sh_offset))
        why = "it has no " LATE_NAME " section of the size written";
    for (int i = 0; !why && i < n; i++)
        if (items[i].late && items[i].bytes &&
            full_io(fd, (void *)items[i].data, items[i].bytes, (off_t)(data->sh_offset + off[i]), 1) != 0)
            why = strerror(errno ? errno : EIO);
    if (fd >= 0 && close(fd) != 0 && !why)
        why = strerror(errno);
    free(off), free(sh), free(names);
    if (why)
        return vitc_error(d, VITC_INTERNAL, NULL, "writing the weights into the linked %s: %s", path, why);
    return VITC_OK;
}
