/* elf_obj.c: read-only bytes as an ELF relocatable object of their own.
 *
 * A ViT-B carries 330 MB of weights.  Handing them to a compiler as one
 * constant array costs a copy, and seconds in the assembly printer; the
 * bytes need no compiling.  On ELF hosts and targets they are written here,
 * in one pass, as a relocatable object with a single 64-byte-aligned
 * read-only section and one hidden symbol per item (the weights, a CUDA
 * model's code images), which the code that uses them declares and the
 * linker joins to it.  Other object formats keep the weights inside the
 * LLVM module. */
#include "codegen/package.h"

#include <elf.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

enum { SEC_NULL, SEC_DATA, SEC_NOTE, SEC_SYMTAB, SEC_STRTAB, SEC_SHSTRTAB, NSEC };

static size_t align64(size_t x) { return (x + 63) & ~(size_t)63; }

int cg_write_elf_object(vitc_diag *d, const char *path, int machine, const cg_section *items, int n)
{
    static const char shstr[] = "\0.rodata.vitc\0.note.GNU-stack\0.symtab\0.strtab\0.shstrtab";
    enum { N_DATA = 1, N_NOTE = 14, N_SYMTAB = 30, N_STRTAB = 38, N_SHSTRTAB = 46 };
    size_t strtab_len = 1, data_len = 0;
    for (int i = 0; i < n; i++) {
        strtab_len += strlen(items[i].symbol) + 1;
        data_len = align64(data_len) + items[i].bytes + (items[i].nul != 0);
    }
    char *strtab = calloc(1, strtab_len);
    Elf64_Sym *syms = calloc((size_t)n + 2, sizeof *syms);
    if (!strtab || !syms) {
        free(strtab), free(syms);
        return vitc_error(d, VITC_INTERNAL, NULL, "out of memory");
    }
    syms[1].st_info = ELF64_ST_INFO(STB_LOCAL, STT_SECTION);
    syms[1].st_shndx = SEC_DATA;
    size_t sp = 1, at = 0;
    for (int i = 0; i < n; i++) {
        Elf64_Sym *y = &syms[i + 2];
        at = align64(at);
        y->st_name = (Elf64_Word)sp;
        y->st_info = ELF64_ST_INFO(STB_GLOBAL, STT_OBJECT);
        y->st_other = STV_HIDDEN;
        y->st_shndx = SEC_DATA;
        y->st_value = at;
        y->st_size = items[i].bytes + (items[i].nul != 0);
        memcpy(strtab + sp, items[i].symbol, strlen(items[i].symbol) + 1);
        sp += strlen(items[i].symbol) + 1;
        at += items[i].bytes + (items[i].nul != 0);
    }
    size_t syms_bytes = ((size_t)n + 2) * sizeof *syms;

    /* layout: header | data (64-aligned) | symtab | strtab | shstrtab | section headers */
    uint64_t off_data = 64, off_sym = (off_data + data_len + 7) & ~(uint64_t)7;
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
    sh[SEC_DATA] = (Elf64_Shdr){.sh_name = N_DATA, .sh_type = SHT_PROGBITS, .sh_flags = SHF_ALLOC,
                                .sh_offset = off_data, .sh_size = data_len, .sh_addralign = 64};
    sh[SEC_NOTE] = (Elf64_Shdr){.sh_name = N_NOTE, .sh_type = SHT_PROGBITS, .sh_offset = off_data,
                                .sh_addralign = 1};
    sh[SEC_SYMTAB] = (Elf64_Shdr){.sh_name = N_SYMTAB, .sh_type = SHT_SYMTAB, .sh_offset = off_sym,
                                  .sh_size = syms_bytes, .sh_link = SEC_STRTAB, .sh_info = 2, .sh_addralign = 8,
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
    static const unsigned char zeros[64];
    int ok = fwrite(&eh, sizeof eh, 1, f) == 1;
    size_t pos = 0;
    for (int i = 0; ok && i < n; i++) {
        size_t pad = align64(pos) - pos;
        size_t nul = items[i].nul != 0;
        ok = fwrite(zeros, 1, pad, f) == pad &&
             (items[i].bytes == 0 || fwrite(items[i].data, 1, items[i].bytes, f) == items[i].bytes) &&
             fwrite(zeros, 1, nul, f) == nul;
        pos += pad + items[i].bytes + nul;
    }
    ok = ok && fwrite(zeros, 1, off_sym - off_data - data_len, f) == off_sym - off_data - data_len;
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
