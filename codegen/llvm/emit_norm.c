/* emit_norm.c: kernels that reduce along an axis: Softmax (max-subtracted),
 * LayerNormalization (two-pass mean and variance), and ReduceMean / ReduceSum
 * / ReduceMax over any set of axes.  Each unit of parallel work is one row
 * (one output element for reductions); sums are f32 with reassociation
 * allowed so that LLVM vectorises them. */
#include "codegen/llvm/cg_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int norm_axis(int64_t a, int rank, int *out)
{
    if (a < -rank || a >= rank)
        return 0;
    *out = (int)(a < 0 ? a + rank : a);
    return 1;
}

/* Axes of a Reduce node: from input 1 or the attribute; *all when none. */
static int reduce_axes(const ir_graph *g, const ir_node *n, int *red, int *noop, char *why, size_t len)
{
    const ir_value *x = &g->values[n->inputs[0]];
    int64_t axes[IR_MAX_RANK];
    int na = 0;
    memset(red, 0, sizeof(int) * IR_MAX_RANK);
    *noop = 0;
    if (ir_input(n, 1) >= 0) {
        const ir_value *a = &g->values[n->inputs[1]];
        if (!ir_value_is_plain_const(g, n->inputs[1]) || a->dtype != IR_I64 || a->nbytes / 8 > IR_MAX_RANK) {
            snprintf(why, len, "%s needs constant int64 axes", ir_op_name(n->op));
            return 0;
        }
        na = (int)(a->nbytes / 8);
        memcpy(axes, a->data, a->nbytes);
    } else {
        const ir_attr *a = ir_attr_get(n, IR_ATTR_AXES);
        if (a && a->kind == IR_AT_INTS && a->n <= IR_MAX_RANK) {
            na = a->n;
            memcpy(axes, a->ints, sizeof(int64_t) * (size_t)na);
        }
    }
    if (na == 0) {
        if (ir_attr_int(n, IR_ATTR_NOOP_WITH_EMPTY_AXES, 0)) {
            *noop = 1;
            return 1;
        }
        for (int i = 0; i < x->rank; i++)
            red[i] = 1;
        return 1;
    }
    for (int i = 0; i < na; i++) {
        int a;
        if (!norm_axis(axes[i], x->rank, &a)) {
            snprintf(why, len, "axis %lld is out of range", (long long)axes[i]);
            return 0;
        }
        red[a] = 1;
    }
    return 1;
}

int cg_norm_supports(const ir_graph *g, const ir_node *n, char *why, size_t len)
{
    const ir_value *x = &g->values[n->inputs[0]];
    if (x->dtype != IR_F32) {
        snprintf(why, len, "%s of %s tensors is not supported on the CPU", ir_op_name(n->op), ir_dtype_name(x->dtype));
        return 0;
    }
    int a;
    switch (n->op) {
    case IR_OP_SOFTMAX:
        if (!norm_axis(ir_attr_int(n, IR_ATTR_AXIS, -1), x->rank ? x->rank : 1, &a)) {
            snprintf(why, len, "axis is out of range");
            return 0;
        }
        return 1;
    case IR_OP_LAYERNORM:
    case IR_OP_RMS_NORM: {
        ir_norm v;
        if (!ir_norm_of(n, &v, why, len))
            return 0;
        if ((a = ir_norm_axis(&v, x->rank)) < 0) {
            snprintf(why, len, "axis is out of range");
            return 0;
        }
        int64_t N = 1;
        for (int i = a; i < x->rank; i++) {
            if (x->dims[i].e != 0) {
                snprintf(why, len, "normalising over a batch-sized axis is not supported");
                return 0;
            }
            N *= x->dims[i].k;
        }
        const int params[2] = {v.scale, v.bias}, stats[2] = {v.mean, v.inv_std};
        for (int k = 0; k < 2; k++) {
            if (params[k] < 0)
                continue;
            const ir_value *p = &g->values[params[k]];
            int ok = p->dtype == IR_F32 && p->rank <= x->rank - a;
            for (int i = 0; ok && i < p->rank; i++)
                ok = p->dims[i].e == 0 && (p->dims[i].k == 1 || p->dims[i].k == x->dims[x->rank - p->rank + i].k);
            if (ok && p->kind != IR_VAL_CONST)
                ok = ir_value_numel(p, 1) == N;
            if (ok && p->kind == IR_VAL_CONST)
                ok = ir_value_is_plain_const(g, params[k]);
            if (!ok) {
                snprintf(why, len, "%s's %s must be f32 and broadcast to the normalised shape", ir_op_name(n->op),
                         k == 0 ? "scale" : "bias");
                return 0;
            }
        }
        for (int k = 0; k < 2; k++)
            if (stats[k] >= 0 && g->values[stats[k]].dtype != IR_F32) {
                snprintf(why, len, "LayerNormalization's statistics must be f32 (stash_type 1)");
                return 0;
            }
        return 1;
    }
    default: {
        int red[IR_MAX_RANK], noop;
        return reduce_axes(g, n, red, &noop, why, len);
    }
    }
}

/* ---- Softmax ---- */

static int emit_softmax(cg_ctx *cg, int node)
{
    const ir_node *n = &cg->g->nodes[node];
    const ir_value *x = &cg->g->values[n->inputs[0]];
    int axis = 0;
    norm_axis(ir_attr_int(n, IR_ATTR_AXIS, -1), x->rank ? x->rank : 1, &axis);
    cg_poly outer = cg_poly_k(1), len = cg_poly_k(1), inner = cg_poly_k(1);
    for (int i = 0; i < x->rank; i++) {
        cg_poly d = cg_poly_dim(x->dims[i]);
        if (i < axis)
            outer = cg_poly_mul(outer, d);
        else if (i == axis)
            len = d;
        else
            inner = cg_poly_mul(inner, d);
    }
    char label[200], key[256] = "softmax|";
    snprintf(label, sizeof label, "Softmax %s", n->name);
    cg_key_poly(key, sizeof key, len);
    cg_key_poly(key, sizeof key, inner);
    cg_poly rows = cg_poly_mul(outer, inner), work = cg_poly_mul(cg_poly_mul(rows, len), cg_poly_k(30));
    LLVMValueRef ptrs[2] = {cg_value_ptr(cg, cg->rb, cg->run_call, n->inputs[0]),
                            cg_value_ptr(cg, cg->rb, cg->run_call, n->outputs[0])};
    LLVMValueRef fn = cg_kernel_find(cg, key, label);
    if (fn) {
        cg_launch(cg, fn, ptrs, 2, rows, work);
        return cg->d->status;
    }
    fn = cg_kernel_begin(cg, label, 2);
    LLVMBuilderRef b = cg->b;
    LLVMTypeRef f = cg->t_f32;
    LLVMValueRef vin = cg->fn_ptr[0], vout = cg->fn_ptr[1];
    LLVMValueRef L = cg_poly_value(cg, b, cg->fn_batch, len), I = cg_poly_value(cg, b, cg->fn_batch, inner);
    LLVMValueRef mx = cg_alloca(cg, f, "max"), sum = cg_alloca(cg, f, "sum");
    cg_loop lt, lj;
    cg_loop_begin(cg, b, &lt, LLVMGetParam(fn, 1), LLVMGetParam(fn, 2));
    LLVMValueRef o = LLVMBuildSDiv(b, lt.iv, I, ""), i = LLVMBuildSRem(b, lt.iv, I, "");
    LLVMValueRef base = LLVMBuildAdd(b, LLVMBuildMul(b, LLVMBuildMul(b, o, L, ""), I, ""), i, "");
    LLVMValueRef pin = cg_gep(cg, b, f, vin, base), pout = cg_gep(cg, b, f, vout, base);
    LLVMBuildStore(b, LLVMConstReal(f, -__builtin_inf()), mx);
    cg_loop_begin(cg, b, &lj, cg_i64(cg, 0), L);
    {
        LLVMValueRef v = LLVMBuildLoad2(b, f, cg_gep(cg, b, f, pin, LLVMBuildMul(b, lj.iv, I, "")), "");
        LLVMValueRef args[2] = {LLVMBuildLoad2(b, f, mx, ""), v};
        LLVMBuildStore(b, cg_intrinsic(cg, b, "llvm.maximum", f, args, 2), mx);
    }
    cg_loop_end(cg, b, &lj);
    LLVMValueRef m = LLVMBuildLoad2(b, f, mx, "");
    LLVMBuildStore(b, LLVMConstReal(f, 0), sum);
    cg_loop_begin(cg, b, &lj, cg_i64(cg, 0), L);
    {
        LLVMValueRef off = LLVMBuildMul(b, lj.iv, I, "");
        LLVMValueRef v = LLVMBuildLoad2(b, f, cg_gep(cg, b, f, pin, off), "");
        LLVMValueRef d = LLVMBuildFSub(b, v, m, "");
        LLVMValueRef e = cg_exp_f32(cg, b, d);
        LLVMBuildStore(b, e, cg_gep(cg, b, f, pout, off));
        LLVMBuildStore(b, cg_fadd_reassoc(b, LLVMBuildLoad2(b, f, sum, ""), e), sum);
    }
    cg_loop_end(cg, b, &lj);
    LLVMValueRef rs = LLVMBuildFDiv(b, LLVMConstReal(f, 1), LLVMBuildLoad2(b, f, sum, ""), "");
    cg_loop_begin(cg, b, &lj, cg_i64(cg, 0), L);
    {
        LLVMValueRef p = cg_gep(cg, b, f, pout, LLVMBuildMul(b, lj.iv, I, ""));
        LLVMBuildStore(b, LLVMBuildFMul(b, LLVMBuildLoad2(b, f, p, ""), rs, ""), p);
    }
    cg_loop_end(cg, b, &lj);
    cg_loop_end(cg, b, &lt);
    cg_kernel_end(cg, key);
    cg_launch(cg, fn, ptrs, 2, rows, work);
    return cg->d->status;
}

/* ---- LayerNormalization ---- */

/* A LayerNorm parameter (scale or bias) as a pointer to N floats: a constant
 * broadcast at compile time into the weights blob, or an activation of
 * exactly N elements.  Returns the blob offset, or -1 for an activation. */
static int64_t ln_param(cg_ctx *cg, int node, int v, int64_t N, const ir_value *x, int axis)
{
    const ir_value *p = &cg->g->values[v];
    if (p->kind != IR_VAL_CONST)
        return -1;
    float *buf;
    int64_t off = cg_weights_reserve(cg, sizeof(float) * (size_t)N, (void **)&buf);
    if (off < 0) {
        cg_fail(cg, VITC_INTERNAL, node, "out of memory for the weights");
        return -2;
    }
    const float *src = p->data;
    int nr = x->rank - axis;
    int64_t pd[IR_MAX_RANK], ps[IR_MAX_RANK], s = 1;
    for (int i = nr - 1; i >= 0; i--) { /* p's dims right-aligned to the normalised dims */
        int j = i - (nr - p->rank);
        pd[i] = j >= 0 ? p->dims[j].k : 1;
        ps[i] = pd[i] == 1 ? 0 : s;
        s *= pd[i];
    }
    for (int64_t e = 0; e < N; e++) {
        int64_t rem = e, o = 0;
        for (int i = nr - 1; i >= 0; i--) {
            int64_t d = x->dims[axis + i].k;
            o += (rem % d) * ps[i];
            rem /= d;
        }
        buf[e] = src[o];
    }
    return cg_weights_share(cg, off, sizeof(float) * (size_t)N);
}

static int emit_normalization(cg_ctx *cg, int node)
{
    const ir_node *n = &cg->g->nodes[node];
    ir_norm v;
    if (ir_norm_get(n, &v, cg->d))
        return cg->d->status;
    const ir_value *x = &cg->g->values[v.x];
    int axis = ir_norm_axis(&v, x->rank);
    if (axis < 0)
        axis = x->rank - 1;
    int64_t N = 1;
    cg_poly outer = cg_poly_k(1);
    for (int i = 0; i < x->rank; i++) {
        if (i < axis)
            outer = cg_poly_mul(outer, cg_poly_dim(x->dims[i]));
        else
            N *= x->dims[i].k;
    }
    float eps = v.eps;
    int vs = v.scale, vb = v.bias;
    int64_t os = ln_param(cg, node, vs, N, x, axis), ob = vb >= 0 ? ln_param(cg, node, vb, N, x, axis) : -1;
    if (os == -2 || ob == -2)
        return cg->d->status;
    int vmean = v.mean, vinv = v.inv_std;
    if (vmean >= 0 && cg->loc[vmean].kind == CG_LOC_NONE)
        vmean = -1;
    if (vinv >= 0 && cg->loc[vinv].kind == CG_LOC_NONE)
        vinv = -1;

    char label[200], key[256] = "";
    snprintf(label, sizeof label, "%s %s", ir_op_name(n->op), n->name);
    cg_key_add(key, sizeof key, "%s|%lld|%a|%d%d%d", v.centered ? "layernorm" : "rmsnorm", (long long)N, (double)eps,
               vb >= 0, vmean >= 0, vinv >= 0);
    LLVMBuilderRef rb = cg->rb;
    LLVMValueRef null = LLVMConstNull(cg->t_ptr);
    LLVMValueRef ptrs[6] = {
        cg_value_ptr(cg, rb, cg->run_call, v.x),
        cg_value_ptr(cg, rb, cg->run_call, v.y),
        os >= 0 ? cg_weights_ptr(cg, rb, cg->run_call, os) : cg_value_ptr(cg, rb, cg->run_call, vs),
        vb < 0 ? null : ob >= 0 ? cg_weights_ptr(cg, rb, cg->run_call, ob) : cg_value_ptr(cg, rb, cg->run_call, vb),
        vmean >= 0 ? cg_value_ptr(cg, rb, cg->run_call, vmean) : null,
        vinv >= 0 ? cg_value_ptr(cg, rb, cg->run_call, vinv) : null,
    };
    LLVMValueRef fn = cg_kernel_find(cg, key, label);
    if (fn) {
        cg_launch(cg, fn, ptrs, 6, outer, cg_poly_scale(outer, 8 * N));
        return cg->d->status;
    }
    fn = cg_kernel_begin(cg, label, 6);
    LLVMBuilderRef b = cg->b;
    LLVMTypeRef f = cg->t_f32;
    LLVMValueRef vin = cg->fn_ptr[0], vout = cg->fn_ptr[1], ps = cg->fn_ptr[2];
    LLVMValueRef pb = vb >= 0 ? cg->fn_ptr[3] : NULL, pm = vmean >= 0 ? cg->fn_ptr[4] : NULL;
    LLVMValueRef pi = vinv >= 0 ? cg->fn_ptr[5] : NULL;
    LLVMValueRef NN = cg_i64(cg, N), acc = cg_alloca(cg, f, "acc");
    LLVMValueRef rN = LLVMConstReal(f, 1.0 / (double)N);
    cg_loop lt, lj;
    cg_loop_begin(cg, b, &lt, LLVMGetParam(fn, 1), LLVMGetParam(fn, 2));
    LLVMValueRef base = LLVMBuildMul(b, lt.iv, NN, "");
    LLVMValueRef px = cg_gep(cg, b, f, vin, base), py = cg_gep(cg, b, f, vout, base);
    LLVMValueRef mean = LLVMConstReal(f, 0); /* RMSNorm: x itself */
    if (v.centered) {
        LLVMBuildStore(b, LLVMConstReal(f, 0), acc);
        cg_loop_begin(cg, b, &lj, cg_i64(cg, 0), NN);
        LLVMBuildStore(b, cg_fadd_reassoc(b, LLVMBuildLoad2(b, f, acc, ""),
                                          LLVMBuildLoad2(b, f, cg_gep(cg, b, f, px, lj.iv), "")), acc);
        cg_loop_end(cg, b, &lj);
        mean = LLVMBuildFMul(b, LLVMBuildLoad2(b, f, acc, ""), rN, "mean");
    }
    LLVMBuildStore(b, LLVMConstReal(f, 0), acc);
    cg_loop_begin(cg, b, &lj, cg_i64(cg, 0), NN);
    {
        LLVMValueRef dv = LLVMBuildFSub(b, LLVMBuildLoad2(b, f, cg_gep(cg, b, f, px, lj.iv), ""), mean, "");
        LLVMBuildStore(b, cg_fadd_reassoc(b, LLVMBuildLoad2(b, f, acc, ""), LLVMBuildFMul(b, dv, dv, "")), acc);
    }
    cg_loop_end(cg, b, &lj);
    LLVMValueRef var = LLVMBuildFMul(b, LLVMBuildLoad2(b, f, acc, ""), rN, "var");
    LLVMValueRef sd = LLVMBuildFAdd(b, var, LLVMConstReal(f, eps), "");
    sd = cg_intrinsic(cg, b, "llvm.sqrt", f, &sd, 1);
    LLVMValueRef inv = LLVMBuildFDiv(b, LLVMConstReal(f, 1), sd, "inv");
    if (pm)
        LLVMBuildStore(b, mean, cg_gep(cg, b, f, pm, lt.iv));
    if (pi)
        LLVMBuildStore(b, inv, cg_gep(cg, b, f, pi, lt.iv));
    cg_loop_begin(cg, b, &lj, cg_i64(cg, 0), NN);
    {
        LLVMValueRef dv = LLVMBuildFSub(b, LLVMBuildLoad2(b, f, cg_gep(cg, b, f, px, lj.iv), ""), mean, "");
        LLVMValueRef y = LLVMBuildFMul(b, LLVMBuildFMul(b, dv, inv, ""),
                                       LLVMBuildLoad2(b, f, cg_gep(cg, b, f, ps, lj.iv), ""), "");
        if (pb)
            y = LLVMBuildFAdd(b, y, LLVMBuildLoad2(b, f, cg_gep(cg, b, f, pb, lj.iv), ""), "");
        LLVMBuildStore(b, y, cg_gep(cg, b, f, py, lj.iv));
    }
    cg_loop_end(cg, b, &lj);
    cg_loop_end(cg, b, &lt);
    cg_kernel_end(cg, key);
    cg_launch(cg, fn, ptrs, 6, outer, cg_poly_scale(outer, 8 * N));
    return cg->d->status;
}

/* ---- ReduceMean / ReduceSum / ReduceMax ---- */

static int emit_reduce(cg_ctx *cg, int node)
{
    const ir_node *n = &cg->g->nodes[node];
    const ir_value *x = &cg->g->values[n->inputs[0]];
    int red[IR_MAX_RANK], noop;
    char why[200];
    if (!reduce_axes(cg->g, n, red, &noop, why, sizeof why))
        return cg_fail(cg, VITC_BAD_INPUT, node, "%s", why);
    if (noop) {
        cg_view d = cg_view_of(cg, n->outputs[0]);
        return cg_emit_copy(cg, n->inputs[0], &d, node);
    }
    cg_view xv = cg_view_of(cg, n->inputs[0]);
    int nk = 0, nr = 0;
    cg_poly kd[IR_MAX_RANK], rd[IR_MAX_RANK], ks[IR_MAX_RANK], rs[IR_MAX_RANK];
    cg_poly kept = cg_poly_k(1), count = cg_poly_k(1);
    for (int i = 0; i < x->rank; i++) {
        if (red[i]) {
            rd[nr] = xv.dims[i];
            rs[nr++] = xv.strides[i];
            count = cg_poly_mul(count, xv.dims[i]);
        } else {
            kd[nk] = xv.dims[i];
            ks[nk++] = xv.strides[i];
            kept = cg_poly_mul(kept, xv.dims[i]);
        }
    }
    char label[200], key[1024] = "";
    snprintf(label, sizeof label, "%s %s", ir_op_name(n->op), n->name);
    cg_key_add(key, sizeof key, "reduce|%d|%d|", (int)n->op, nk);
    for (int i = 0; i < nk; i++)
        cg_key_poly(key, sizeof key, kd[i]), cg_key_poly(key, sizeof key, ks[i]);
    cg_key_add(key, sizeof key, "|%d|", nr);
    for (int i = 0; i < nr; i++)
        cg_key_poly(key, sizeof key, rd[i]), cg_key_poly(key, sizeof key, rs[i]);
    LLVMValueRef ptrs[2] = {cg_value_ptr(cg, cg->rb, cg->run_call, n->inputs[0]),
                            cg_value_ptr(cg, cg->rb, cg->run_call, n->outputs[0])};
    LLVMValueRef fn = cg_kernel_find(cg, key, label);
    if (fn) {
        cg_launch(cg, fn, ptrs, 2, kept, cg_poly_mul(kept, count));
        return cg->d->status;
    }
    fn = cg_kernel_begin(cg, label, 2);
    LLVMBuilderRef b = cg->b;
    LLVMTypeRef f = cg->t_f32;
    LLVMValueRef vin = cg->fn_ptr[0], vout = cg->fn_ptr[1];
    LLVMValueRef acc = cg_alloca(cg, f, "acc");
    int is_max = n->op == IR_OP_REDUCE_MAX, is_min = n->op == IR_OP_REDUCE_MIN;
    cg_loop lt;
    cg_loop_begin(cg, b, &lt, LLVMGetParam(fn, 1), LLVMGetParam(fn, 2));
    LLVMValueRef rem = lt.iv, off = cg_i64(cg, 0);
    for (int i = nk - 1; i >= 0; i--) {
        LLVMValueRef d = cg_poly_value(cg, b, cg->fn_batch, kd[i]), idx = rem;
        if (i > 0) {
            LLVMValueRef q = LLVMBuildUDiv(b, rem, d, "");
            idx = LLVMBuildSub(b, rem, LLVMBuildMul(b, q, d, ""), "");
            rem = q;
        }
        off = LLVMBuildAdd(b, off, LLVMBuildMul(b, idx, cg_poly_value(cg, b, cg->fn_batch, ks[i]), ""), "");
    }
    LLVMBuildStore(b, LLVMConstReal(f, is_max ? -__builtin_inf() : is_min ? __builtin_inf() : 0), acc);
    cg_loop loops[IR_MAX_RANK];
    LLVMValueRef p = cg_gep(cg, b, f, vin, off);
    for (int i = 0; i < nr; i++) {
        cg_loop_begin(cg, b, &loops[i], cg_i64(cg, 0), cg_poly_value(cg, b, cg->fn_batch, rd[i]));
        p = cg_gep(cg, b, f, p, LLVMBuildMul(b, loops[i].iv, cg_poly_value(cg, b, cg->fn_batch, rs[i]), ""));
    }
    LLVMValueRef v = LLVMBuildLoad2(b, f, p, ""), a = LLVMBuildLoad2(b, f, acc, "");
    if (is_max || is_min) {
        LLVMValueRef args[2] = {a, v};
        LLVMBuildStore(b, cg_intrinsic(cg, b, is_max ? "llvm.maximum" : "llvm.minimum", f, args, 2), acc);
    } else {
        LLVMBuildStore(b, cg_fadd_reassoc(b, a, v), acc);
    }
    for (int i = nr - 1; i >= 0; i--)
        cg_loop_end(cg, b, &loops[i]);
    LLVMValueRef r = LLVMBuildLoad2(b, f, acc, "");
    if (n->op == IR_OP_REDUCE_MEAN)
        r = LLVMBuildFDiv(b, r, LLVMBuildSIToFP(b, cg_poly_value(cg, b, cg->fn_batch, count), f, ""), "");
    LLVMBuildStore(b, r, cg_gep(cg, b, f, vout, lt.iv));
    cg_loop_end(cg, b, &lt);
    cg_kernel_end(cg, key);
    cg_launch(cg, fn, ptrs, 2, kept, cg_poly_mul(kept, count));
    return cg->d->status;
}

int cg_emit_norm(cg_ctx *cg, int node)
{
    switch (cg->g->nodes[node].op) {
    case IR_OP_SOFTMAX: return emit_softmax(cg, node);
    case IR_OP_LAYERNORM:
    case IR_OP_RMS_NORM: return emit_normalization(cg, node);
    default: return emit_reduce(cg, node);
    }
}
