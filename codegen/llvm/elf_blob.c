/* elf_blob.c: the embedded weights as an ELF relocatable object of their own.
 *
 * A ViT-B carries 330 MB of weights.  Handing them to LLVM as one constant
 * array costs a copy, and seconds in the assembly printer; the bytes need no
 * compiling.  On ELF targets they are written here, in one pass, as a
 * relocatable object with a single 64-byte-aligned read-only section and one
 * hidden symbol, which the module declares and the linker joins to it.  Other
 * object formats keep the weights inside the LLVM module. */
#include "codegen/llvm/cg_impl.h"

#include <elf.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

/* The ELF machine for a target triple, or 0 if this writer does not know it. */
static int elf_machine(const char *triple)
{
    if (!strstr(triple, "linux") && !strstr(triple, "elf"))
        return 0;
    if (strncmp(triple, "x86_64", 6) == 0)
        return EM_X86_64;
    if (strncmp(triple, "aarch64", 7) == 0)
        return EM_AARCH64;
    return 0;
}

int cg_blob_object_supported(const cg_ctx *cg) { return elf_machine(cg->triple) != 0; }

enum { SEC_NULL, SEC_DATA, SEC_NOTE, SEC_SYMTAB, SEC_STRTAB, SEC_SHSTRTAB, NSEC };

int cg_write_blob_object(cg_ctx *cg, const char *path, const char *symbol)
{
    static const char shstr[] = "\0.rodata.vitc_weights\0.note.GNU-stack\0.symtab\0.strtab\0.shstrtab";
    enum { N_DATA = 1, N_NOTE = 22, N_SYMTAB = 38, N_STRTAB = 46, N_SHSTRTAB = 54 };
    char strtab[256];
    size_t symlen = strlen(symbol);
    if (symlen + 2 > sizeof strtab)
        return cg_fail(cg, VITC_INTERNAL, -1, "weights symbol name too long");
    strtab[0] = 0;
    memcpy(strtab + 1, symbol, symlen + 1);
    size_t strtab_len = symlen + 2;

    Elf64_Sym syms[3];
    memset(syms, 0, sizeof syms);
    syms[1].st_info = ELF64_ST_INFO(STB_LOCAL, STT_SECTION);
    syms[1].st_shndx = SEC_DATA;
    syms[2].st_name = 1;
    syms[2].st_info = ELF64_ST_INFO(STB_GLOBAL, STT_OBJECT);
    syms[2].st_other = STV_HIDDEN;
    syms[2].st_shndx = SEC_DATA;
    syms[2].st_size = cg->blob_len;

    /* layout: header | data (64-aligned) | symtab | strtab | shstrtab | section headers */
    uint64_t off_data = 64, off_sym = (off_data + cg->blob_len + 7) & ~(uint64_t)7;
    uint64_t off_str = off_sym + sizeof syms, off_shstr = off_str + strtab_len;
    uint64_t off_sh = (off_shstr + sizeof shstr + 7) & ~(uint64_t)7;

    Elf64_Ehdr eh;
    memset(&eh, 0, sizeof eh);
    memcpy(eh.e_ident, ELFMAG, SELFMAG);
    eh.e_ident[EI_CLASS] = ELFCLASS64;
    eh.e_ident[EI_DATA] = ELFDATA2LSB;
    eh.e_ident[EI_VERSION] = EV_CURRENT;
    eh.e_ident[EI_OSABI] = ELFOSABI_NONE;
    eh.e_type = ET_REL;
    eh.e_machine = (Elf64_Half)elf_machine(cg->triple);
    eh.e_version = EV_CURRENT;
    eh.e_shoff = off_sh;
    eh.e_ehsize = sizeof eh;
    eh.e_shentsize = sizeof(Elf64_Shdr);
    eh.e_shnum = NSEC;
    eh.e_shstrndx = SEC_SHSTRTAB;

    Elf64_Shdr sh[NSEC];
    memset(sh, 0, sizeof sh);
    sh[SEC_DATA] = (Elf64_Shdr){.sh_name = N_DATA, .sh_type = SHT_PROGBITS, .sh_flags = SHF_ALLOC,
                                .sh_offset = off_data, .sh_size = cg->blob_len, .sh_addralign = 64};
    sh[SEC_NOTE] = (Elf64_Shdr){.sh_name = N_NOTE, .sh_type = SHT_PROGBITS, .sh_offset = off_data,
                                .sh_addralign = 1};
    sh[SEC_SYMTAB] = (Elf64_Shdr){.sh_name = N_SYMTAB, .sh_type = SHT_SYMTAB, .sh_offset = off_sym,
                                  .sh_size = sizeof syms, .sh_link = SEC_STRTAB, .sh_info = 2, .sh_addralign = 8,
                                  .sh_entsize = sizeof(Elf64_Sym)};
    sh[SEC_STRTAB] = (Elf64_Shdr){.sh_name = N_STRTAB, .sh_type = SHT_STRTAB, .sh_offset = off_str,
                                  .sh_size = strtab_len, .sh_addralign = 1};
    sh[SEC_SHSTRTAB] = (Elf64_Shdr){.sh_name = N_SHSTRTAB, .sh_type = SHT_STRTAB, .sh_offset = off_shstr,
                                    .sh_size = sizeof shstr, .sh_addralign = 1};

    FILE *f = fopen(path, "wb");
    if (!f)
        return cg_fail(cg, VITC_BAD_INPUT, -1, "cannot write %s: %s", path, strerror(errno));
    static const unsigned char zeros[64];
    int ok = fwrite(&eh, sizeof eh, 1, f) == 1;
    ok = ok && (cg->blob_len == 0 || fwrite(cg->blob, 1, cg->blob_len, f) == cg->blob_len);
    ok = ok && fwrite(zeros, 1, off_sym - off_data - cg->blob_len, f) == off_sym - off_data - cg->blob_len;
    ok = ok && fwrite(syms, sizeof syms, 1, f) == 1;
    ok = ok && fwrite(strtab, 1, strtab_len, f) == strtab_len;
    ok = ok && fwrite(shstr, 1, sizeof shstr, f) == sizeof shstr;
    ok = ok && fwrite(zeros, 1, off_sh - off_shstr - sizeof shstr, f) == off_sh - off_shstr - sizeof shstr;
    ok = ok && fwrite(sh, sizeof sh, 1, f) == 1;
    if (fclose(f) != 0)
        ok = 0;
    if (!ok)
        return cg_fail(cg, VITC_BAD_INPUT, -1, "writing %s failed: %s", path, strerror(errno));
    return VITC_OK;
}
