/* emu_tmap.h: the tensor maps of the CUDA emulation (tests/cuda_emu.h).
 *
 * On a GPU a tensor map is the driver's opaque 128-byte CUtensorMap, which
 * cuTensorMapEncodeTiled writes and the copy engine reads.  In the emulation
 * whoever stands in for the driver (tu_emulate in testutil.c, the fake
 * driver's cuTensorMapEncodeTiled) writes these fields into the same 128
 * bytes, and the emulated cp.async.bulk.tensor reads them back: a 2-D tiled
 * map of a row-major matrix, boxes of box_cols x box_rows elements, zeros
 * for elements outside the matrix.  C and C++ alike. */
#ifndef VK_EMU_TMAP_H
#define VK_EMU_TMAP_H

#include <stdint.h>
#include <string.h>

#define VK_EMU_TMAP_MAGIC 0x70616d74756d6576ull /* "vemutmap" */

typedef struct {
    uint64_t magic;     /* VK_EMU_TMAP_MAGIC: encoded, not garbage */
    uint64_t addr;      /* element (0, 0) */
    uint64_t cols, rows; /* the matrix, elements */
    uint64_t row_bytes; /* between rows */
    uint32_t box_cols, box_rows;
    uint32_t elem_bytes;
    uint32_t swizzle; /* bytes of the swizzle span: 0 none, 32, 64 or 128 */
} vk_emu_tmap;

/* Writes the map into the 128 bytes at dst (zeros after the fields). */
static inline void vk_emu_tmap_encode(void *dst, uint64_t addr, uint64_t cols, uint64_t rows, uint64_t row_bytes,
                                      uint32_t box_cols, uint32_t box_rows, uint32_t elem_bytes, uint32_t swizzle)
{
    vk_emu_tmap m = {VK_EMU_TMAP_MAGIC, addr, cols, rows, row_bytes, box_cols, box_rows, elem_bytes, swizzle};
    memset(dst, 0, 128);
    memcpy(dst, &m, sizeof m);
}

#endif
