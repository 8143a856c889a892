/* moves.h: the data ops that index by coordinates, Pad, Tile, GatherND and
 * ScatterND, planned once for every backend as a short list of strided
 * moves (moves.c).  Each move walks `dims` and, at every point, addresses
 * one element of its destination and one of its source as base + sum idx[i]
 * * strides[i] (elements of the value's row-major storage, polynomials in
 * the batch), then stores the source, a zero, or the destination combined
 * with the source.  The moves run in order (a later one may read what an
 * earlier one wrote); within one move no element is written twice and none
 * is read after it is written, so its points may run in any order.
 *
 *   Pad      constant: the border filled (from the constant_value input seen
 *            with strides 0, or zeros), the input (cropped by negative pads)
 *            copied into the window of the output it lands in; edge, reflect,
 *            wrap: the input copied in, then, axis after axis, the border
 *            copied from the output itself, one move per run of positions
 *            whose sources are evenly spaced (edge: stride 0; reflect: -1)
 *   Tile     one copy: each repeated axis of the output seen as [repeats,
 *            size], the input with stride 0 along the repeats
 *   GatherND constant indices: each index tuple a row of the output copied
 *            from the slice of the data it selects, one move per run of
 *            tuples whose slices are evenly spaced
 *   ScatterND constant indices: the data copied, then each run of update
 *            rows stored into (or, with a reduction, combined with) the slices
 *            their tuples select, in the order of the tuples
 *
 * Indices computed at run time, pads or repeats not known at compile time,
 * and a batch-sized axis padded or indexed where that depends on the batch
 * are refused, saying why. */
#ifndef VITC_CG_MOVES_H
#define VITC_CG_MOVES_H

#include "codegen/poly.h"
#include "ir/ir.h"

#include <stddef.h>

typedef enum {
    CG_MOVE_COPY, /* dst = src */
    CG_MOVE_ZERO, /* dst = 0 (no source) */
    CG_MOVE_ADD,  /* dst = dst + src, and so on: ScatterND's reductions */
    CG_MOVE_MUL,
    CG_MOVE_MAX, /* src > dst ? src : dst */
    CG_MOVE_MIN  /* src < dst ? src : dst */
} cg_move_op;

typedef struct {
    int value; /* the graph value whose storage it addresses; -1 for a ZERO's source */
    cg_poly base;
    cg_poly strides[IR_MAX_RANK];
} cg_move_side;

typedef struct {
    cg_move_op op;
    int rank;
    cg_poly dims[IR_MAX_RANK];
    cg_move_side dst, src;
} cg_move;

typedef struct {
    cg_move *m;
    int n, cap;
} cg_moves;

/* The most moves one node may take (each is a kernel launch). */
#define CG_MOVES_MAX 1024

/* 1 for the ops planned here. */
int cg_moves_op(ir_op op);
/* Plans node n of g (an op of cg_moves_op): 1 with *mv filled (free it
 * with cg_moves_free; it may hold no move, for an empty output), or 0 with
 * why saying why not and *mv empty. */
int cg_moves_plan(const ir_graph *g, const ir_node *n, cg_moves *mv, char *why, size_t len);
void cg_moves_free(cg_moves *mv);
/* 1 if some move of mv combines (a ScatterND reduction). */
int cg_moves_combine(const cg_moves *mv);
/* The backend's supports() for n (an op of cg_moves_op): 1 if it plans,
 * and, where a move combines, the output's dtype is one of the backend's
 * reduce_ok[nreduce]; else 0 with why (the backend titled title). */
int cg_moves_supported(const ir_graph *g, const ir_node *n, const ir_dtype *reduce_ok, int nreduce, const char *title,
                       char *why, size_t len);

#endif
