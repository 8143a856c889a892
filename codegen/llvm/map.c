/* map.c: strided views of stored tensors and the loop nest of every
 * element-by-element kernel (element-wise groups, transposes, slices,
 * concatenation, broadcasting copies, im2col).
 *
 * A map is an iteration space (dims, polynomials in the batch) and operands
 * that each address their elements as base + sum idx[i] * stride[i].  Before
 * emitting, dimensions of size 1 are dropped and neighbouring dimensions that
 * every operand walks contiguously are merged, so that a row-major add of two
 * [B,197,768] tensors becomes one loop over 151296*B elements.  The innermost
 * dimension becomes a counted loop with compile-time bounds (split into
 * chunks when long) that LLVM vectorises; the outer dimensions, flattened,
 * are the units of work handed to parallel_for. */
#include "codegen/llvm/cg_impl.h"

#include <string.h>

#define CG_CHUNK 4096 /* elements of the inner loop per unit of parallel work */

cg_view cg_view_of(cg_ctx *cg, int v)
{
    cg_view r;
    memset(&r, 0, sizeof r);
    const ir_value *val = &cg->g->values[v];
    r.value = v;
    r.scratch_node = r.out_slot = -1;
    r.dtype = val->dtype;
    r.rank = val->rank;
    for (int i = 0; i < val->rank; i++)
        r.dims[i] = cg_poly_dim(val->dims[i]);
    cg_poly_strides(val, r.strides);
    r.base = cg_poly_k(0);
    return r;
}

cg_view cg_view_out_slot(cg_ctx *cg, int k)
{
    cg_view r = cg_view_of(cg, cg->g->outputs[k]);
    r.value = -1;
    r.out_slot = k;
    return r;
}

cg_view cg_view_scratch(int node, int64_t byte_off, ir_dtype dt, int rank, const cg_poly *dims)
{
    cg_view r;
    memset(&r, 0, sizeof r);
    r.value = r.out_slot = -1;
    r.scratch_node = node;
    r.byte_off = byte_off;
    r.dtype = dt;
    r.rank = rank;
    cg_poly p = cg_poly_k(1);
    for (int i = rank - 1; i >= 0; i--) {
        r.dims[i] = dims[i];
        r.strides[i] = p;
        p = cg_poly_mul(p, dims[i]);
    }
    r.base = cg_poly_k(0);
    return r;
}

static int is_one(cg_poly p)
{
    int64_t k;
    return cg_poly_is_const(p, &k) && k == 1;
}

cg_view cg_view_broadcast(const cg_view *v, int rank, const cg_poly *dims)
{
    cg_view r = *v;
    r.rank = rank;
    for (int i = 0; i < rank; i++) {
        int j = i - (rank - v->rank);
        r.dims[i] = dims[i];
        if (j < 0 || (is_one(v->dims[j]) && !is_one(dims[i])))
            r.strides[i] = cg_poly_k(0);
        else
            r.strides[i] = v->strides[j];
    }
    return r;
}

LLVMValueRef cg_view_ptr(cg_ctx *cg, LLVMBuilderRef b, LLVMValueRef call, const cg_view *v)
{
    if (v->value >= 0)
        return cg_value_ptr(cg, b, call, v->value);
    if (v->scratch_node >= 0)
        return cg_scratch_ptr(cg, b, call, v->scratch_node, v->byte_off);
    return cg_out_slot_ptr(cg, b, call, v->out_slot);
}

/* Drops size-1 dimensions and merges neighbours every operand walks
 * contiguously; splits a batch-sized innermost dimension k*B^e into [B^e, k]
 * so that the inner loop has a compile-time trip count. */
static void collapse(cg_map *m)
{
    int r = 0;
    for (int i = 0; i < m->rank; i++) {
        if (is_one(m->dims[i]))
            continue;
        int merge = r > 0;
        for (int k = 0; merge && k < m->nops; k++)
            merge = cg_poly_eq(m->op[k].strides[r - 1], cg_poly_mul(m->op[k].strides[i], m->dims[i]));
        if (merge) {
            m->dims[r - 1] = cg_poly_mul(m->dims[r - 1], m->dims[i]);
            for (int k = 0; k < m->nops; k++)
                m->op[k].strides[r - 1] = m->op[k].strides[i];
            continue;
        }
        m->dims[r] = m->dims[i];
        for (int k = 0; k < m->nops; k++)
            m->op[k].strides[r] = m->op[k].strides[i];
        r++;
    }
    if (r == 0) {
        m->dims[0] = cg_poly_k(1);
        for (int k = 0; k < m->nops; k++)
            m->op[k].strides[0] = cg_poly_k(0);
        r = 1;
    }
    int64_t inner;
    if (!cg_poly_is_const(m->dims[r - 1], &inner) && r < IR_MAX_RANK) {
        cg_poly d = m->dims[r - 1];
        int e = 0, terms = 0;
        for (int i = 0; i <= CG_POLY_DEG; i++)
            if (d.c[i]) {
                e = i;
                terms++;
            }
        if (terms == 1) { /* c * B^e: [B^e, c] */
            cg_poly be = cg_poly_k(0);
            be.c[e] = 1;
            int64_t c = d.c[e];
            m->dims[r - 1] = be;
            m->dims[r] = cg_poly_k(c);
            for (int k = 0; k < m->nops; k++) {
                m->op[k].strides[r] = m->op[k].strides[r - 1];
                m->op[k].strides[r - 1] = cg_poly_scale(m->op[k].strides[r - 1], c);
            }
            r++;
        }
    }
    m->rank = r;
    for (int k = 0; k < m->nops; k++)
        m->op[k].rank = r;
}

static LLVMValueRef copy_body(cg_ctx *cg, const cg_map *m, LLVMBuilderRef b, LLVMValueRef *ptrs)
{
    return LLVMBuildLoad2(b, cg_raw_type(cg, m->op[1].dtype), ptrs[1], "");
}

int cg_emit_map(cg_ctx *cg, const cg_map *m0, int node)
{
    cg_map m = *m0;
    if (m.nops < 1 || m.nops > CG_MAP_MAX_OPS || m.rank > IR_MAX_RANK)
        return cg_fail(cg, VITC_INTERNAL, node, "a loop nest with %d operands of rank %d", m.nops, m.rank);
    collapse(&m);
    int bad = 0;
    for (int i = 0; i < m.rank; i++)
        bad |= m.dims[i].bad;
    for (int k = 0; k < m.nops; k++) {
        bad |= m.op[k].base.bad;
        for (int i = 0; i < m.rank; i++)
            bad |= m.op[k].strides[i].bad;
    }
    if (bad)
        return cg_fail(cg, VITC_BAD_INPUT, node, "its sizes overflow or grow faster than B^%d", CG_POLY_DEG);
    cg_map_body body = m.body ? m.body : copy_body;
    LLVMTypeRef et[CG_MAP_MAX_OPS];
    for (int k = 0; k < m.nops; k++) {
        et[k] = m.body && !m.raw ? cg_mem_type(cg, m.op[k].dtype) : cg_raw_type(cg, m.op[k].dtype);
        if (!et[k])
            return cg_fail(cg, VITC_BAD_INPUT, node, "the CPU backend does not compute on %s tensors",
                           ir_dtype_name(m.op[k].dtype));
    }

    int r = m.rank;
    int64_t inner = 1, nchunks = 1, chunk;
    /* static after collapse() unless a sum of powers of B (then one row per task) */
    if (cg_poly_is_const(m.dims[r - 1], &inner) && inner > CG_CHUNK)
        nchunks = (inner + CG_CHUNK - 1) / CG_CHUNK;
    chunk = (inner + nchunks - 1) / nchunks;
    chunk = (chunk + 15) / 16 * 16;

    /* base pointers (with each operand's offset) are computed in run() */
    LLVMValueRef ptrs0[CG_MAP_MAX_OPS];
    for (int k = 0; k < m.nops; k++) {
        LLVMValueRef p = cg_view_ptr(cg, cg->rb, cg->run_call, &m.op[k]);
        ptrs0[k] = cg_gep(cg, cg->rb, et[k], p, cg_poly_value(cg, cg->rb, cg->run_batch, m.op[k].base));
    }
    cg_poly rows = cg_poly_k(nchunks);
    for (int i = 0; i < r - 1; i++)
        rows = cg_poly_mul(rows, m.dims[i]);
    cg_poly work = cg_poly_k(m.cost > 0 ? m.cost : 1);
    for (int i = 0; i < r; i++)
        work = cg_poly_mul(work, m.dims[i]);

    char key[1024] = "";
    if (m.body ? m.sig != NULL : 1) {
        cg_key_add(key, sizeof key, "map|%s|%d|", m.body ? m.sig : "copy", r);
        for (int i = 0; i < r; i++)
            cg_key_poly(key, sizeof key, m.dims[i]);
        for (int k = 0; k < m.nops; k++) {
            cg_key_add(key, sizeof key, "|%d:", (int)m.op[k].dtype);
            for (int i = 0; i < r; i++)
                cg_key_poly(key, sizeof key, m.op[k].strides[i]);
        }
    }
    LLVMValueRef fn = cg_kernel_find(cg, key, m.label);
    if (fn) {
        cg_launch(cg, fn, ptrs0, m.nops, rows, work);
        return cg->d->status;
    }

    fn = cg_kernel_begin(cg, m.label, m.nops);
    LLVMBuilderRef b = cg->b;
    LLVMValueRef batch = cg->fn_batch;
    LLVMValueRef dims[IR_MAX_RANK], base[CG_MAP_MAX_OPS], strides[CG_MAP_MAX_OPS][IR_MAX_RANK];
    for (int i = 0; i < r; i++)
        dims[i] = cg_poly_value(cg, b, batch, m.dims[i]);
    for (int k = 0; k < m.nops; k++) {
        base[k] = cg->fn_ptr[k];
        for (int i = 0; i < r; i++)
            strides[k][i] = cg_poly_value(cg, b, batch, m.op[k].strides[i]);
    }
    cg_loop lt;
    cg_loop_begin(cg, b, &lt, LLVMGetParam(fn, 1), LLVMGetParam(fn, 2));
    LLVMValueRef row = lt.iv, jlo = cg_i64(cg, 0), jhi = dims[r - 1];
    if (nchunks > 1) {
        row = LLVMBuildSDiv(b, lt.iv, cg_i64(cg, nchunks), "row");
        LLVMValueRef ch = LLVMBuildSRem(b, lt.iv, cg_i64(cg, nchunks), "chunk");
        jlo = LLVMBuildMul(b, ch, cg_i64(cg, chunk), "");
        LLVMValueRef hi = LLVMBuildAdd(b, jlo, cg_i64(cg, chunk), "");
        jhi = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSLT, hi, dims[r - 1], ""), hi, dims[r - 1], "");
    }
    LLVMValueRef off[CG_MAP_MAX_OPS];
    for (int k = 0; k < m.nops; k++)
        off[k] = cg_i64(cg, 0);
    LLVMValueRef rem = row;
    for (int i = r - 2; i >= 0; i--) {
        LLVMValueRef idx = rem;
        if (i > 0) {
            LLVMValueRef q = LLVMBuildUDiv(b, rem, dims[i], "");
            idx = LLVMBuildSub(b, rem, LLVMBuildMul(b, q, dims[i], ""), "");
            rem = q;
        }
        for (int k = 0; k < m.nops; k++)
            off[k] = LLVMBuildAdd(b, off[k], LLVMBuildMul(b, idx, strides[k][i], ""), "");
    }
    LLVMValueRef rowp[CG_MAP_MAX_OPS], ptrs[CG_MAP_MAX_OPS];
    for (int k = 0; k < m.nops; k++)
        rowp[k] = cg_gep(cg, b, et[k], base[k], off[k]);
    cg_loop lj;
    cg_loop_begin(cg, b, &lj, jlo, jhi);
    for (int k = 0; k < m.nops; k++)
        ptrs[k] = cg_gep(cg, b, et[k], rowp[k], LLVMBuildMul(b, lj.iv, strides[k][r - 1], ""));
    LLVMValueRef v = body(cg, &m, b, ptrs);
    if (v)
        LLVMBuildStore(b, v, ptrs[0]);
    cg_loop_end(cg, b, &lj);
    cg_loop_end(cg, b, &lt);
    cg_kernel_end(cg, key);
    cg_launch(cg, fn, ptrs0, m.nops, rows, work);
    return cg->d->status;
}
