/* memplan.h: planning of activation memory.
 *
 * A backend decides which values need a buffer of their own in the workspace
 * (node outputs that are not graph outputs and not views of another value),
 * which values are views that share another's storage, where each node's work
 * actually runs (an element-wise node folded into a later one runs there), and
 * how much private scratch each node needs.  pass_memplan then gives every
 * buffer a byte offset in one workspace so that buffers alive at the same time
 * never overlap.  Sizes are taken at the largest batch; because every size
 * grows with the batch, the same offsets are valid for every smaller batch. */
#ifndef VITC_MEMPLAN_H
#define VITC_MEMPLAN_H

#include "ir/ir.h"

#define PASS_MEMPLAN_ALIGN 64

typedef struct {
    int64_t max_batch;
    const unsigned char *in_workspace; /* per value: 1 if it needs its own buffer */
    const int *alias_of;     /* per value: -1, or the value whose storage it shares (NULL: none) */
    const int *runs_at;      /* per node: the node whose code does its work (NULL: itself) */
    const int64_t *scratch;  /* per node: scratch bytes at max_batch, live only while it runs (NULL: none) */
    const int *row_pad;      /* per value: elements between the end of one row (its last dimension) and the
                                start of the next, for a value stored with rows further apart (NULL: none) */
    const int *reuse;        /* per value: -1, or a value whose buffer it may take over, computed in place: it
                                does when that buffer is as large and its last reader is the node that computes
                                this value (NULL: none) */
} pass_memplan_req;

typedef struct {
    int64_t *offset;         /* per value: byte offset of its buffer, -1 if it has none
                                (a view's entry is its root's offset) */
    int64_t *scratch_offset; /* per node: byte offset of its scratch, -1 if none */
    uint64_t total;          /* bytes of workspace needed (a multiple of PASS_MEMPLAN_ALIGN) */
    uint64_t unplanned;      /* the sum of every buffer: what it would take without reuse */
    int nbuffers;
} pass_memplan_result;

/* Plans g's workspace.  Lifetimes run, in node order, from the node that
 * computes a buffer to the last node that reads it or any view of it; graph
 * outputs stay alive to the end.  Placement is first-fit by decreasing size.
 * A value given a reuse takes over that buffer where the rule above allows,
 * and the buffer then lives on to the value's own last reader.
 * Arrays in out are malloc'ed (pass_memplan_free).  Returns a status,
 * reporting through d (a size that overflows is VITC_BAD_INPUT). */
int pass_memplan(const ir_graph *g, const pass_memplan_req *req, pass_memplan_result *out, vitc_diag *d);
void pass_memplan_free(pass_memplan_result *r);

#endif
