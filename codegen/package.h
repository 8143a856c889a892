/* package.h: what every backend's .so is made of, whatever made its code.
 *
 *   the weights blob   constants, each 64-byte aligned, in one growable buffer
 *   elf_obj.c          read-only bytes (weights, code images) as an ELF
 *                      relocatable object defining one hidden symbol each;
 *                      the weights, left a hole there, are written into
 *                      the linked .so
 *   package.c          a private directory beside the output, the link by the
 *                      system's C compiler driver (cc -shared), and the atomic
 *                      install of the .so and its external weights file
 *
 * The checksum of the weights is runtime/abi.h's vitc_fnv1a.  Nothing here
 * needs LLVM: the CUDA backend packages its .so with these alone. */
#ifndef VITC_CG_PACKAGE_H
#define VITC_CG_PACKAGE_H

#include "codegen/backend.h"

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

/* ---- the weights blob ---- */
typedef struct {
    unsigned char *data;
    size_t len, cap;
} cg_blob;

/* Reserves n zeroed bytes at the next 64-byte boundary; *p points at them
 * until the next reserve.  Returns their offset, or -1 when out of memory. */
int64_t cg_blob_reserve(cg_blob *b, size_t n, void **p);
/* Appends n bytes (64-byte aligned); the offset or -1. */
int64_t cg_blob_add(cg_blob *b, const void *data, size_t n);
void cg_blob_free(cg_blob *b);

/* ---- read-only data as an ELF object (elf_obj.c) ---- */
#define CG_WEIGHTS_SYMBOL "vitc_weights_blob"

typedef struct {
    const char *symbol; /* hidden, 64-byte aligned */
    const void *data;
    size_t bytes;
    int nul;  /* a zero byte follows (a C string's terminator) */
    int late; /* not written into the object (a hole): cg_elf_fill_late writes it into the linked file */
} cg_section;

/* The ELF machine of a target triple (NULL: the host vitc runs on), or 0
 * when its objects are not ELF or the writer does not know the machine. */
int cg_elf_machine(const char *triple);
/* The triple of the host vitc runs on, as LLVM spells it ("x86_64-pc-linux-gnu"). */
const char *cg_host_triple(void);
/* Writes a relocatable object with read-only sections holding every item,
 * each at a 64-byte boundary under its own hidden symbol: .vitc.const the
 * items written, .vitc.late the late ones after 64 bytes of its own, as a
 * hole, or with reserved, not at all (the link's script reserves
 * cg_elf_late_bytes after them; cg_package_link). */
int cg_write_elf_object(vitc_diag *d, const char *path, int machine, const cg_section *items, int n, int reserved);
/* The bytes the late items take after .vitc.late's own. */
size_t cg_elf_late_bytes(const cg_section *items, int n);
/* Writes the late items of the object cg_write_elf_object made of the same
 * items into path, the file it was linked into, where its section landed. */
int cg_elf_fill_late(vitc_diag *d, const char *path, const cg_section *items, int n);

/* ---- the .so (package.c) ---- */
typedef struct {
    const cg_options *opt;
    vitc_diag *d;
    char dir[PATH_MAX]; /* private, next to the output; "" when not made */
} cg_package;

/* Makes the private directory next to opt->output.  Returns status. */
int cg_package_begin(cg_package *p, const cg_options *opt, vitc_diag *d);
/* dir/name into buf; 0 if it does not fit (reported). */
int cg_package_path(cg_package *p, const char *name, char *buf, size_t n);
/* The C compiler driver that links: $CC when set, else cc, told to use lld
 * when ld.lld is on $PATH. */
const char *cg_package_linker(void);
/* 1 when the linker takes a script that reserves the late bytes of an
 * object (cg_write_elf_object's reserved): lld, vitc's own choice.  lld then
 * leaves them a hole in its output instead of copying zeros there. */
int cg_package_reserves(void);
/* Links the inputs (objects, or C sources compiled on the way) into
 * dir/model.so with cg_package_linker(): -shared -fPIC, against libm only,
 * every symbol resolved.  late: the bytes of late items (cg_elf_late_bytes),
 * reserved after the inputs' .vitc.late sections in the read-only segment
 * when cg_package_reserves(); with any, no build id.  Returns status, the
 * driver's messages in the error. */
int cg_package_link(cg_package *p, const char *const *inputs, int n, size_t late);
/* Writes the late items of the weights object into dir/model.so after the
 * link (cg_elf_fill_late).  Returns status. */
int cg_package_fill_late(cg_package *p, const cg_section *items, int n);
/* Writes the external weights file when opt->external_weights (weights:
 * the blob), then renames it and dir/model.so into place.  Nothing is left
 * at the output paths on failure. */
int cg_package_install(cg_package *p, const cg_blob *weights);
/* Removes the private directory and what is left in it. */
void cg_package_end(cg_package *p);
/* The name of the external weights file for an output path (no directory). */
void cg_weights_file_name(const char *output, char *buf, size_t n);
/* Checks what the descriptor can say of the graph's inputs and outputs:
 * rank, element types the runtime carries, batch dimensions k*B only. */
int cg_check_io(const ir_graph *g, vitc_diag *d);
/* The output's file name without its directory (for the descriptor's source). */
const char *cg_base_name(const char *path);

#endif
