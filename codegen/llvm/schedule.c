/* schedule.c: decides, before any code is made, what each node becomes and
 * where each value lives.
 *
 *  - Reshape, Flatten, Squeeze, Unsqueeze, Identity, inference Dropout and
 *    Casts to the same type are views: their output shares the input's bytes.
 *  - An element-wise node whose only reader is an element-wise node of the
 *    same output shape is folded into that reader's kernel: chains such as the
 *    erf GELU (Div, Erf, Add, Mul, Mul) become one loop and their
 *    intermediates never touch memory.
 *  - An element-wise group whose only input, other than one-element
 *    constants, is the output of an int8 Linear that nothing else reads runs
 *    in that GEMM's epilogue on its registers (epilogue_groups): a QDQ
 *    export's GELU between fc1 and fc2, a QuantLookup after quant-lookup,
 *    never stores fc1's output.
 *  - BatchNormalization (inference) becomes x * scale + shift with the two
 *    per-channel vectors computed here, and is then just element-wise.
 *  - Graph inputs are read from the caller's arrays, graph outputs written
 *    straight into the caller's buffers, constants live in the weights blob,
 *    and everything else gets a workspace offset from passes/memplan.c.
 *  - A value that only GEMMs write and read (a ViT's fc1 output, fc2's A),
 *    whose rows would lie a multiple of 2 KiB apart, is stored with rows one
 *    cache line further apart (pad_gemm_rows).
 *  - A Linear with a residual is computed in place, in its residual's buffer,
 *    where nothing reads the residual later (residual_in_place). */
#include "codegen/llvm/cg_impl.h"

#include "passes/memplan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_GROUP_NODES = 32, MAX_GROUP_LEAVES = 24 };

int cg_is_map_op(ir_op op) { return ir_op_family_of(op) == IR_FAM_MAP; }

int cg_root(const cg_ctx *cg, int v)
{
    for (int hops = 0; v >= 0 && cg->alias_of[v] >= 0 && hops < cg->g->nvalues; hops++)
        v = cg->alias_of[v];
    return v;
}

/* Per-channel scale and shift of an inference BatchNormalization, shaped
 * [C, 1, ...] so that they broadcast against x [N, C, ...]. */
static int fold_batchnorm(cg_ctx *cg, int node)
{
    ir_graph *g = cg->g;
    ir_node n = g->nodes[node]; /* copy: adding values moves g->values */
    const ir_value *x = &g->values[n.inputs[0]];
    int64_t C = x->dims[1].k, dims[IR_MAX_RANK];
    int rank = x->rank - 1;
    dims[0] = C;
    for (int i = 1; i < rank; i++)
        dims[i] = 1;
    float *scale = malloc(sizeof(float) * (size_t)C), *shift = malloc(sizeof(float) * (size_t)C);
    if (!scale || !shift) {
        free(scale), free(shift);
        return cg_fail(cg, VITC_INTERNAL, node, "out of memory");
    }
    double eps = ir_attr_float(&n, IR_ATTR_EPSILON, 1e-5f);
    const float *p[5];
    for (int k = 1; k < 5; k++)
        p[k] = g->values[n.inputs[k]].data;
    for (int64_t c = 0; c < C; c++) {
        double inv = 1 / sqrt((double)p[4][c] + eps), s = (double)p[1][c] * inv;
        scale[c] = (float)s;
        shift[c] = (float)((double)p[2][c] - (double)p[3][c] * s);
    }
    char name[64];
    snprintf(name, sizeof name, "bn%d.scale", node);
    int vs = ir_add_const(g, name, IR_F32, rank, dims, scale, sizeof(float) * (size_t)C);
    snprintf(name, sizeof name, "bn%d.shift", node);
    int vb = vs < 0 ? -1 : ir_add_const(g, name, IR_F32, rank, dims, shift, sizeof(float) * (size_t)C);
    free(scale), free(shift);
    if (vb < 0)
        return cg_fail(cg, VITC_INTERNAL, node, "out of memory");
    cg->bn_scale[node] = vs;
    cg->bn_shift[node] = vb;
    return VITC_OK;
}

/* Folds element-wise producers into their single element-wise reader,
 * walking backwards so that a reader's group is known before its producers. */
static void fuse_elementwise(cg_ctx *cg, const int *reader)
{
    ir_graph *g = cg->g;
    int *size = calloc((size_t)g->nnodes + 1, sizeof *size), *leaves = calloc((size_t)g->nnodes + 1, sizeof *leaves);
    if (!size || !leaves) {
        free(size), free(leaves);
        return; /* no fusion: still correct */
    }
    for (int i = g->nnodes - 1; i >= 0; i--) {
        ir_node *n = &g->nodes[i];
        if (cg->kind[i] != CG_NODE_KERNEL || !cg_is_map_op(n->op))
            continue;
        int root = cg->group[i];
        if (root == i) {
            size[i] = 1;
            leaves[i] = n->ninputs;
        }
        int out = n->outputs[0];
        if (n->noutputs != 1 || out < 0 || cg->plan.nuses[out] != 1 || reader[out] < 0)
            continue;
        int c = reader[out];
        int r = cg->group[c];
        if (cg->kind[c] == CG_NODE_ALIAS || !cg_is_map_op(g->nodes[c].op))
            continue;
        if (!ir_same_shape(&g->values[out], &g->values[g->nodes[c].outputs[0]]))
            continue;
        if (size[r] + 1 > MAX_GROUP_NODES || leaves[r] - 1 + n->ninputs > MAX_GROUP_LEAVES)
            continue;
        if (n->op == IR_OP_BATCHNORM && leaves[r] + 2 > MAX_GROUP_LEAVES)
            continue;
        cg->kind[i] = CG_NODE_FUSED;
        cg->group[i] = r;
        size[r]++;
        leaves[r] += n->ninputs - 1;
    }
    free(size), free(leaves);
}

/* The int8 Linear an element-wise group root could run in the epilogue of,
 * else -1: every member computes on f32 vectors (cg_elem_vector_ok), reads
 * one-element constants, values of the group, and one value y of the same
 * shape as the group's output that an int8 Linear without a residual
 * writes, and the group's members are all of y's readers (y is no graph
 * output).  With a residual the output would take over the residual's
 * buffer (residual_in_place), a case not taken.  A group with a division or
 * a transcendental function stays a loop of its own: in the epilogue it is
 * slower than apart (a QDQ export's decomposed GELU in fc1's epilogue, ViT-B/16
 * at batch 8: 7.7 ms a block against 2.7 + 3.3 ms; one row of two vectors at
 * a time exposes its long dependency chain).  quant-lookup makes that GELU a
 * table, which the epilogue takes. */
static int epilogue_host(const cg_ctx *cg, int root)
{
    const ir_graph *g = cg->g;
    int y = -1, reads = 0;
    for (int i = 0; i <= root; i++) {
        if (i != root && !(cg->kind[i] == CG_NODE_FUSED && cg->group[i] == root))
            continue;
        const ir_node *n = &g->nodes[i];
        if (!cg_elem_vector_ok(g, n) || ir_op_has(n->op, OPF_TRANSCENDENTAL) || n->op == IR_OP_DIV)
            return -1;
        for (int k = 0; k < n->ninputs; k++) {
            int v = n->inputs[k], p = v >= 0 ? g->values[v].producer : -1;
            if (v < 0 || (ir_value_is_plain_const(g, v) && g->values[v].nbytes == sizeof(float)) ||
                (n->op == IR_OP_QUANT_LOOKUP && k == 3)) /* the lookup's table: a constant of the module */
                continue;
            if (p >= 0 && p < root && cg->kind[p] == CG_NODE_FUSED && cg->group[p] == root)
                continue;
            if (y >= 0 && v != y)
                return -1;
            y = v;
            reads++;
        }
    }
    int L = y >= 0 ? g->values[y].producer : -1;
    ir_linear lv;
    if (L < 0 || reads != cg->plan.nuses[y] || cg->kind[L] != CG_NODE_KERNEL || !cg_linear_of(g, &g->nodes[L], &lv) ||
        !lv.int8 || lv.y != y || lv.residual >= 0 || lv.gate >= 0 || cg->epilogue[L] >= 0 ||
        !ir_same_shape(&g->values[y], &g->values[g->nodes[root].outputs[0]]))
        return -1;
    return L;
}

/* Moves each group epilogue_host finds into its Linear: the root becomes a
 * member computed at the Linear (group[root] = the Linear, so the memory
 * plan starts the group's output there). */
static void epilogue_groups(cg_ctx *cg)
{
    const ir_graph *g = cg->g;
    for (int r = 0; r < g->nnodes; r++) {
        if (cg->kind[r] != CG_NODE_KERNEL || cg->group[r] != r || !cg_is_map_op(g->nodes[r].op))
            continue;
        int L = epilogue_host(cg, r);
        if (L < 0)
            continue;
        cg->epilogue[L] = r;
        cg->kind[r] = CG_NODE_FUSED;
        cg->group[r] = L;
    }
}

/* The GEMM's micro-kernel reads one element of each of MR (12) rows of A per
 * step: rows a multiple of 4 KiB apart fall in one set of the L1 (64 sets of
 * 64-byte lines on x86 cores, 4 KiB a turn), a multiple of 2 KiB in two,
 * which then hold fewer of them than the kernel walks through.  A value
 * written and read by GEMMs alone (no view of it, not a graph output, read
 * only as A) whose rows are that far apart gets PAD_FLOATS more elements per
 * row.  `gemm_bench --cold`, 2 threads, the "fc2 lda+16" rows against fc2,
 * medians of four or five runs: ViT-B's fc2 (A rows 12 KiB apart) 68% -> 74%
 * of peak at batch 1, ViT-S's (6 KiB) 75% -> 81% at batch 8 (the same at
 * batch 1); ViT-Ti's (3 KiB, four sets) within the noise, so left dense. */
enum { PAD_FLOATS = 16, PAD_PERIOD = 2048 };

static void pad_gemm_rows(cg_ctx *cg, const unsigned char *in_ws)
{
    ir_graph *g = cg->g;
    int nv = g->nvalues;
    for (int v = 0; v < nv; v++) {
        const ir_value *val = &g->values[v];
        int p = val->producer;
        ir_linear lv;
        if (!in_ws[v] || val->dtype != IR_F32 || val->rank < 2 || p < 0 || p >= g->nnodes ||
            cg->kind[p] != CG_NODE_KERNEL || !cg_linear_of(g, &g->nodes[p], &lv) || lv.y != v)
            continue;
        ir_dim last = val->dims[val->rank - 1];
        if (last.e != 0 || last.k < 1 || last.k * (int64_t)sizeof(float) % PAD_PERIOD != 0)
            continue;
        cg->row_pad[v] = PAD_FLOATS;
    }
    /* every read of a candidate must be a GEMM's A */
    for (int v = 0; v < nv; v++)
        if (cg->alias_of[v] >= 0)
            cg->row_pad[cg->alias_of[v]] = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *n = &g->nodes[i];
        ir_linear lv;
        int gemm = cg->kind[i] == CG_NODE_KERNEL && cg_linear_of(g, n, &lv);
        for (int k = 0; k < n->ninputs; k++)
            if (n->inputs[k] >= 0 && (!gemm || k != IR_LINEAR_X))
                cg->row_pad[n->inputs[k]] = 0;
    }
    for (int k = 0; k < g->noutputs; k++)
        cg->row_pad[g->outputs[k]] = 0;
    for (int v = 0; v < nv; v++)
        cg->npadded += cg->row_pad[v] > 0;
}

/* Proposes, for each Linear with a residual R (a ViT's proj and fc2: x + f(x)),
 * that its output take over R's buffer (pass_memplan's reuse; the memplan
 * checks that no later node reads R).  The GEMM reads each tile of R before
 * it writes that tile of C, so C may be R (gemm.c, gemm_amx.c), when both
 * have one layout and R is not also the GEMM's A.  Else C is a buffer of its
 * own, and the GEMM reads R and writes C, two streams far from cache, which
 * is slower (bench/design-notes.md, "Residual in place"); in place, the
 * workspace also holds fewer buffers. */
static void residual_in_place(cg_ctx *cg, const unsigned char *in_ws, int *reuse)
{
    const ir_graph *g = cg->g;
    for (int v = 0; v < g->nvalues; v++)
        reuse[v] = -1;
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *n = &g->nodes[i];
        ir_linear lv;
        if (cg->kind[i] != CG_NODE_KERNEL || !cg_linear_of(g, n, &lv))
            continue;
        int vr = lv.residual, vc = lv.y;
        if (vr < 0 || vc < 0 || !in_ws[vc] || cg->row_pad[vc])
            continue;
        int rr = cg_root(cg, vr);
        const ir_value *R = &g->values[vr], *C = &g->values[vc];
        if (rr < 0 || !in_ws[rr] || cg->row_pad[rr] || R->dtype != C->dtype || !ir_same_shape(R, C))
            continue;
        int shared = 0;
        for (int k = 0; k < n->ninputs; k++)
            shared = shared || (k != IR_LINEAR_RESIDUAL && n->inputs[k] >= 0 && cg_root(cg, n->inputs[k]) == rr);
        if (!shared)
            reuse[vc] = rr;
    }
}

int cg_schedule(cg_ctx *cg)
{
    ir_graph *g = cg->g;
    int nn = g->nnodes;
    cg->kind = calloc((size_t)nn + 1, sizeof *cg->kind);
    cg->group = malloc(sizeof(int) * ((size_t)nn + 1));
    cg->scratch = calloc((size_t)nn + 1, sizeof *cg->scratch);
    cg->scratch_off = calloc((size_t)nn + 1, sizeof *cg->scratch_off);
    cg->bn_scale = malloc(sizeof(int) * ((size_t)nn + 1));
    cg->bn_shift = malloc(sizeof(int) * ((size_t)nn + 1));
    cg->epilogue = malloc(sizeof(int) * ((size_t)nn + 1));
    if (!cg->kind || !cg->group || !cg->scratch || !cg->scratch_off || !cg->bn_scale || !cg->bn_shift ||
        !cg->epilogue)
        return cg_fail(cg, VITC_INTERNAL, -1, "out of memory");
    for (int i = 0; i < nn; i++) {
        cg->group[i] = i;
        cg->epilogue[i] = -1;
        cg->bn_scale[i] = cg->bn_shift[i] = -1;
        cg->kind[i] = CG_NODE_KERNEL;
    }
    /* New constants first: per-value arrays are sized after them. */
    for (int i = 0; i < nn; i++)
        if (g->nodes[i].op == IR_OP_BATCHNORM && fold_batchnorm(cg, i) != VITC_OK)
            return cg->d->status;

    int nv = g->nvalues;
    if (cg_plan_build((cg_ctx_head *)cg, NULL) != VITC_OK)
        return cg->d->status;
    cg->alias_of = malloc(sizeof(int) * ((size_t)nv + 1));
    cg->loc = calloc((size_t)nv + 1, sizeof *cg->loc);
    cg->row_pad = calloc((size_t)nv + 1, sizeof *cg->row_pad);
    unsigned char *in_ws = calloc((size_t)nv + 1, 1);
    int *is_output = calloc((size_t)nv + 1, sizeof(int));
    int *reuse = malloc(sizeof(int) * ((size_t)nv + 1));
    if (!cg->alias_of || !cg->loc || !cg->row_pad || !in_ws || !is_output || !reuse) {
        free(in_ws), free(is_output), free(reuse);
        return cg_fail(cg, VITC_INTERNAL, -1, "out of memory");
    }
    for (int v = 0; v < nv; v++) {
        cg->alias_of[v] = -1;
        cg->loc[v].offset = -1;
    }
    for (int k = 0; k < g->noutputs; k++)
        is_output[g->outputs[k]] = 1;

    /* a view that is a graph output is a copy into the caller's buffer */
    for (int i = 0; i < nn; i++) {
        ir_node *n = &g->nodes[i];
        if (n->noutputs >= 1 && n->outputs[0] >= 0 && cg->plan.view_of[n->outputs[0]] >= 0 &&
            !is_output[n->outputs[0]]) {
            cg->kind[i] = CG_NODE_ALIAS;
            cg->alias_of[n->outputs[0]] = n->inputs[0];
        }
    }
    fuse_elementwise(cg, cg->plan.reader);
    epilogue_groups(cg);

    /* Where values live. */
    for (int k = 0; k < g->ninputs; k++)
        cg->loc[g->inputs[k]] = (cg_loc){CG_LOC_INPUT, k, -1};
    for (int v = 0; v < nv; v++)
        if (g->values[v].kind == IR_VAL_CONST)
            cg->loc[v] = (cg_loc){CG_LOC_WEIGHTS, -1, -1};
    for (int k = 0; k < g->noutputs; k++) {
        int v = g->outputs[k];
        if (g->values[v].kind == IR_VAL_NODE && cg->loc[v].kind == CG_LOC_NONE)
            cg->loc[v] = (cg_loc){CG_LOC_OUTPUT, k, -1};
    }
    for (int i = 0; i < nn; i++) {
        ir_node *n = &g->nodes[i];
        if (cg->kind[i] != CG_NODE_KERNEL)
            continue;
        for (int k = 0; k < n->noutputs; k++) {
            int v = n->outputs[k];
            if (k == 0 && cg->epilogue[i] >= 0) /* the Linear stores its epilogue group's output, not its own */
                v = g->nodes[cg->epilogue[i]].outputs[0];
            if (v < 0 || cg->loc[v].kind != CG_LOC_NONE || (k > 0 && cg->plan.nuses[v] == 0))
                continue;
            cg->loc[v] = (cg_loc){CG_LOC_WORKSPACE, -1, -1};
            in_ws[v] = 1;
        }
        cg->scratch[i] = cg_matmul_scratch(g, n, cg->max_batch);
    }

    pad_gemm_rows(cg, in_ws);
    residual_in_place(cg, in_ws, reuse);
    pass_memplan_req req = {.max_batch = cg->max_batch, .in_workspace = in_ws, .alias_of = cg->alias_of,
                            .runs_at = cg->group, .scratch = cg->scratch, .row_pad = cg->row_pad, .reuse = reuse};
    pass_memplan_result plan;
    int st = pass_memplan(g, &req, &plan, cg->d);
    if (st == VITC_OK) {
        for (int v = 0; v < nv; v++)
            if (in_ws[v])
                cg->loc[v].offset = plan.offset[v];
        for (int i = 0; i < nn; i++)
            cg->scratch_off[i] = plan.scratch_offset[i];
        cg->workspace_bytes = plan.total;
        cg->workspace_unplanned = plan.unplanned;
        pass_memplan_free(&plan);
    }
    for (int i = 0; i < nn; i++)
        cg->plan.skip[i] = cg->kind[i] != CG_NODE_KERNEL;
    free(in_ws), free(is_output), free(reuse);
    return st;
}

void cg_schedule_free(cg_ctx *cg)
{
    free(cg->kind), free(cg->group), free(cg->scratch), free(cg->scratch_off);
    free(cg->bn_scale), free(cg->bn_shift), free(cg->epilogue);
    free(cg->alias_of), free(cg->loc), free(cg->row_pad);
    cg->kind = NULL;
    cg->group = cg->bn_scale = cg->bn_shift = cg->epilogue = cg->alias_of = cg->row_pad = NULL;
    cg->scratch = cg->scratch_off = NULL;
    cg->loc = NULL;
}
