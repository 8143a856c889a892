/* fuzz.h: what the fuzz harnesses share.
 *
 * Each harness is one function over a byte buffer, fz_*_one(data, size).  The
 * same function is called by libFuzzer (fuzz_entry.c, in the VITC_FUZZ build)
 * and by fuzz_replay (replay.c, in every test build), which runs it over the
 * files in tests/data/fuzz-regressions and tests/data/broken so that every
 * finding stays fixed in the ordinary and the sanitizer builds.
 *
 * Beyond the sanitizers, a harness aborts (a finding) when vitc answers a
 * hostile input with VITC_INTERNAL: a bad model must be VITC_BAD_INPUT. */
#ifndef VITC_FUZZ_H
#define VITC_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ir/ir.h"

/* Import, verify, shape inference, the pass pipeline and the printers. */
int fz_model_one(const uint8_t *data, size_t size);
/* The same, then the reference interpreter on seeded inputs before and after
 * the passes (results must agree), for graphs under the size bound below. */
int fz_interp_one(const uint8_t *data, size_t size);
/* The .npy reader (and writer, on what it read) and the TensorProto reader. */
int fz_npy_one(const uint8_t *data, size_t size);
/* A compiled model read as data (vitc_model_read), then every answer about it. */
int fz_so_one(const uint8_t *data, size_t size);

/* The interpreter harness skips graphs whose tensors at batch 2 add up to more
 * than this many elements, or whose nodes do more than FZ_MAX_WORK
 * multiply-adds: a harness bound, so that each run takes milliseconds. */
#define FZ_MAX_ELEMENTS 4000000
#define FZ_MAX_WORK 20000000

/* Imports and infers shapes, checking the invariants later stages trust;
 * NULL (after checking the refusal was a proper bad-input error) when the
 * model is refused.  fz_passes runs the pipeline; returns its status. */
ir_graph *fz_load(const uint8_t *data, size_t size, vitc_diag *d);
int fz_passes(ir_graph *g, vitc_diag *d);

/* Shared plumbing (fuzz_common.c). */
FILE *fz_devnull(void);
/* A directory holding external-data files the fuzzed models may name
 * (weights.bin, small.bin, link.bin -> outside); model_path is a model file
 * name inside it, so that locations resolve there. */
const char *fz_model_path(void);
/* Reports a finding: prints what and aborts. */
void fz_die(const char *what, const vitc_diag *d) __attribute__((noreturn));
/* The bytes as a file (one in-memory file, refilled on each call): its
 * /proc/self/fd path, read as a user's file would be. */
const char *fz_bytes_file(const uint8_t *data, size_t size);
/* A diagnostics sink writing to /dev/null (VITC_FUZZ_VERBOSE=1: stderr). */
void fz_diag(vitc_diag *d, const char *file);

#endif
