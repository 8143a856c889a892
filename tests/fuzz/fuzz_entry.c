/* fuzz_entry.c: libFuzzer's entry point for one harness, chosen at build time
 * (FZ_HARNESS names one of the fz_*_one functions of fuzz.h). */
#include "fuzz.h"

#ifndef FZ_HARNESS
#error "FZ_HARNESS must name a harness function"
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return FZ_HARNESS(data, size); }
