/* cu_elem.c: element-wise ops (OPF_ELEMWISE in ops.def) and inference
 * BatchNormalization on the GPU: one thread per output element (grid-stride),
 * operands read under numpy broadcasting through per-operand strides (zero
 * where an operand broadcasts), arithmetic in fp32 whatever the storage. */
#include "codegen/cuda/cu_impl.h"
#include "codegen/cuda/cu_launch.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { EW_THREADS = 256, EW_MAX_OPS = VK_EW_MAX_IN }; /* operands: vk_ew_params.x */

static int out_type_ok(ir_dtype t) { return t == IR_F32 || t == IR_F16 || t == IR_BF16 || t == IR_BOOL || t == IR_U8; }

int cu_elem_supports(const ir_graph *g, const ir_node *n, char *why, size_t len)
{
    int out = n->outputs[0];
    if (out < 0)
        return 1;
    const ir_value *y = &g->values[out];
    if (!out_type_ok(y->dtype)) {
        snprintf(why, len, "%s producing %s: element-wise ops compute in fp32 on the GPU and give float or bool",
                 ir_op_name(n->op), ir_dtype_name(y->dtype));
        return 0;
    }
    if (n->ninputs > EW_MAX_OPS) {
        snprintf(why, len, "%s with %d inputs (at most %d)", ir_op_name(n->op), n->ninputs, EW_MAX_OPS);
        return 0;
    }
    for (int k = 0; k < n->ninputs; k++) {
        int v = n->inputs[k];
        if (v >= 0 && !cu_ctype(g->values[v].dtype)) {
            snprintf(why, len, "input '%s' of type %s", g->values[v].name, ir_dtype_name(g->values[v].dtype));
            return 0;
        }
    }
    if (n->op == IR_OP_BATCHNORM) {
        const ir_value *x = &g->values[n->inputs[0]];
        if (x->rank < 2 || x->dims[1].e != 0) {
            snprintf(why, len, "BatchNormalization needs a static channel axis 1");
            return 0;
        }
        for (int k = 1; k < 5; k++)
            if (ir_value_numel(&g->values[n->inputs[k]], 1) != x->dims[1].k) {
                snprintf(why, len, "BatchNormalization parameter %d is not one value per channel", k);
                return 0;
            }
        if (n->noutputs > 1)
            for (int k = 1; k < n->noutputs; k++)
                if (n->outputs[k] >= 0) {
                    snprintf(why, len, "training-mode BatchNormalization (running statistics outputs)");
                    return 0;
                }
        return 1;
    }
    if (n->op == IR_OP_QUANT_LOOKUP) {
        snprintf(why, len, "QuantLookup (int8 models' tables) runs on the CPU only");
        return 0;
    }
    if (n->op == IR_OP_GELU && ir_gelu_act(n) == IR_ACT_NONE) {
        snprintf(why, len, "Gelu's approximate attribute is neither 'none' nor 'tanh'");
        return 0;
    }
    return 1;
}

/* ---- the formulas of elemwise.def as fp32 CUDA C ----
 * Each word prints its piece after the pieces of its operands in one buffer
 * and returns it; the expression reads the operands as v0, v1, v2 (floats). */
typedef struct {
    const ir_node *n;
    char buf[4096];
    size_t len;
    int over; /* the buffer was too small */
} cs_env;

static const char *cs(cs_env *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static const char *cs(cs_env *e, const char *fmt, ...)
{
    char *p = e->buf + e->len;
    size_t room = sizeof e->buf - e->len;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(p, room, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= room) {
        e->over = 1;
        return "0.0f";
    }
    e->len += (size_t)k + 1;
    return p;
}

static const char *cs_k(cs_env *e, double c)
{
    char lit[48];
    return cs(e, "%s", cu_float_lit((float)c, lit, sizeof lit));
}

/* The device's names of ir_act (prelude.cuh's enum, from the same rows of ir/act.def). */
static const char *const act_names[IR_ACT_COUNT] = {
#define ACT_NAME(name) [IR_ACT_##name] = "IR_ACT_" #name,
    IR_ACT_ROWS(ACT_NAME)
#undef ACT_NAME
};

static const char *cs_mod(cs_env *e, const char *a, const char *b)
{
    if (ir_attr_int(e->n, IR_ATTR_FMOD, 0))
        return cs(e, "fmodf(%s, %s)", a, b);
    return cs(e, "(%s - floorf(%s / %s) * %s)", a, a, b, b);
}

#define X0 x[0]
#define X1 x[1]
#define X2 x[2]
#define K(c) cs_k(e, c)
#define ATTR(id, d) cs_k(e, ir_attr_float(e->n, IR_ATTR_##id, (float)(d)))
#define ADD(a, b) cs(e, "(%s + %s)", a, b)
#define SUB(a, b) cs(e, "(%s - %s)", a, b)
#define MUL(a, b) cs(e, "(%s * %s)", a, b)
#define DIV(a, b) cs(e, "(%s / %s)", a, b)
#define MOD(a, b) cs_mod(e, a, b)
#define POW(a, b) cs(e, "powf(%s, %s)", a, b)
#define NEG(a) cs(e, "(-%s)", a)
#define ABS(a) cs(e, "fabsf(%s)", a)
#define EXP(a) cs(e, "expf(%s)", a)
#define LOG(a) cs(e, "logf(%s)", a)
#define ERF(a) cs(e, "erff(%s)", a)
#define TANH(a) cs(e, "tanhf(%s)", a)
#define COS(a) cs(e, "cosf(%s)", a)
#define SIN(a) cs(e, "sinf(%s)", a)
#define SQRT(a) cs(e, "sqrtf(%s)", a)
#define ROUND(a) cs(e, "rintf(%s)", a)
#define F32(a) (a)
#define GELU(a) cs(e, "vk_act<%s>(%s)", act_names[ir_gelu_act(e->n)], a)
#define MAX(a, b) cs(e, "fmaxf(%s, %s)", a, b)
#define MIN(a, b) cs(e, "fminf(%s, %s)", a, b)
#define LT(a, b) cs(e, "(float)(%s < %s)", a, b)
#define GT(a, b) cs(e, "(float)(%s > %s)", a, b)
#define LE(a, b) cs(e, "(float)(%s <= %s)", a, b)
#define GE(a, b) cs(e, "(float)(%s >= %s)", a, b)
#define EQ(a, b) cs(e, "(float)(%s == %s)", a, b)
#define AND(a, b) cs(e, "(float)(%s != 0.0f && %s != 0.0f)", a, b)
#define OR(a, b) cs(e, "(float)(%s != 0.0f || %s != 0.0f)", a, b)
#define NOT(a) cs(e, "(float)(%s == 0.0f)", a)
#define SELECT(c, a, b) cs(e, "(%s != 0.0f ? %s : %s)", c, a, b)
#define EW(id, in, res, same, F) \
    static const char *f_##id(cs_env *e, const char *const *x) { (void)x; return F; }
#include "ir/elemwise.def"
#undef EW
#include "ir/elemwise_end.h"

static const char *(*const formulas[IR_OP_COUNT])(cs_env *e, const char *const *x) = {
#define EW(id, in, res, same, F) [IR_OP_##id] = f_##id,
#include "ir/elemwise.def"
#undef EW
};

/* The fp32 expression of node n over v0, v1, ...; NULL if it has none. */
static const char *expr(cs_env *e, const ir_node *n)
{
    static const char *const v[] = {"v0", "v1", "v2"};
    e->n = n;
    if (formulas[n->op] && ir_op_table[n->op].max_in == VAR) { /* fold over the inputs */
        const char *x[2] = {"v0", NULL};
        for (int i = 1; i < n->ninputs; i++) {
            x[1] = cs(e, "v%d", i);
            x[0] = formulas[n->op](e, x);
        }
        return x[0];
    }
    if (formulas[n->op])
        return n->ninputs <= 3 ? formulas[n->op](e, v) : NULL;
    if (n->op == IR_OP_CAST || n->op == IR_OP_CAST_LIKE || n->op == IR_OP_IDENTITY)
        return "v0";
    if (n->op == IR_OP_CLIP) {
        int lo = ir_input(n, 1), hi = ir_input(n, 2);
        return cs(e, "%s%sv0%s%s", hi >= 0 ? "fminf(" : "", lo >= 0 ? "fmaxf(" : "", lo >= 0 ? ", v1)" : "",
                  hi >= 0 ? ", v2)" : "");
    }
    if (n->op == IR_OP_BATCHNORM)
        return cs(e, "(v0 - v3) * (v1 / sqrtf(v4 + %s)) + v2", cs_k(e, ir_attr_float(n, IR_ATTR_EPSILON, 1e-5f)));
    return NULL;
}

int cu_emit_elem(cu_ctx *c, int node)
{
    const ir_graph *g = c->g;
    const ir_node *n = &g->nodes[node];
    int out = n->outputs[0];
    if (out < 0 || (c->off[cu_root(c, out)] < 0))
        return VITC_OK; /* nobody reads it */
    const ir_value *y = &g->values[out];
    cs_env *env = calloc(1, sizeof *env);
    if (!env)
        return cu_fail(c, VITC_INTERNAL, node, "out of memory");
    const char *ex = expr(env, n);
    if (!ex || env->over) {
        free(env);
        return cu_fail(c, VITC_INTERNAL, node, "no element-wise expression for %s", ir_op_name(n->op));
    }
    char e[sizeof env->buf];
    snprintf(e, sizeof e, "%s", ex);
    free(env);
    int rank = y->rank, nops = 0, opv[EW_MAX_OPS], opslot[EW_MAX_OPS];
    cg_poly dims[IR_MAX_RANK], st[EW_MAX_OPS][IR_MAX_RANK];
    for (int i = 0; i < rank; i++)
        dims[i] = cg_poly_dim(y->dims[i]);
    for (int k = 0; k < n->ninputs; k++) {
        int v = n->inputs[k];
        opslot[k] = -1;
        if (v < 0)
            continue;
        const ir_value *x = &g->values[v];
        cg_poly xs[IR_MAX_RANK];
        cg_poly_strides(x, xs);
        for (int i = 0; i < rank; i++) {
            if (n->op == IR_OP_BATCHNORM && k > 0) { /* per channel: axis 1 */
                st[nops][i] = cg_poly_k(i == 1 ? 1 : 0);
                continue;
            }
            int j = i - (rank - x->rank);
            int bcast = j < 0 || (x->dims[j].k == 1 && x->dims[j].e == 0 && !(y->dims[i].k == 1 && y->dims[i].e == 0));
            st[nops][i] = bcast ? cg_poly_k(0) : xs[j];
        }
        opslot[k] = nops;
        opv[nops++] = v;
    }
    /* merge dims contiguous for every operand (the output is row-major) */
    cg_poly ys[IR_MAX_RANK];
    cg_poly_strides(y, ys);
    int r = 0;
    cg_poly md[IR_MAX_RANK], ms[EW_MAX_OPS][IR_MAX_RANK], mys[IR_MAX_RANK];
    for (int i = 0; i < rank; i++) {
        int64_t one;
        if (cg_poly_is_const(dims[i], &one) && one == 1)
            continue;
        int merge = r > 0;
        for (int k = 0; merge && k < nops; k++)
            merge = cg_poly_eq(ms[k][r - 1], cg_poly_mul(st[k][i], dims[i]));
        if (merge) {
            md[r - 1] = cg_poly_mul(md[r - 1], dims[i]);
            for (int k = 0; k < nops; k++)
                ms[k][r - 1] = st[k][i];
            mys[r - 1] = ys[i];
            continue;
        }
        md[r] = dims[i];
        mys[r] = ys[i];
        for (int k = 0; k < nops; k++)
            ms[k][r] = st[k][i];
        r++;
    }
    cg_poly total = cg_poly_numel(y);
    char pe[160];
    cu_str t = {0};
    cu_str_add(&t, "VK_KERNEL(@, %d, vk_ew_params)\n{\n    const vk_i64 B = p.batch;\n    (void)B;\n", EW_THREADS);
    for (int k = 0; k < nops; k++) {
        const char *ct = cu_ctype(cu_sdt(c, opv[k]));
        cu_str_add(&t, "    const %s *x%d = (const %s *)p.x[%d];\n", ct, k, ct, k);
    }
    const char *ty = cu_ctype(cu_sdt(c, out));
    cu_str_add(&t, "    %s *y = (%s *)p.y;\n", ty, ty);
    cu_str_add(&t, "    const vk_i64 n = %s;\n", cu_poly_expr(total, pe, sizeof pe));
    cu_str_add(&t, "    for (vk_i64 i = (vk_i64)blockIdx.x * %d + threadIdx.x; i < n; i += (vk_i64)gridDim.x * %d) {\n",
               EW_THREADS, EW_THREADS);
    /* an operand laid out like the output reads at i */
    int direct[EW_MAX_OPS], any = 0;
    for (int k = 0; k < nops; k++) {
        direct[k] = 1;
        for (int i = 0; i < r; i++)
            direct[k] &= cg_poly_eq(ms[k][i], mys[i]);
        any |= !direct[k];
        if (!direct[k])
            cu_str_add(&t, "        vk_i64 o%d = 0;\n", k);
    }
    if (any) {
        cu_str_add(&t, "        vk_i64 q = i, c;\n");
        for (int i = r - 1; i >= 0; i--) {
            if (i > 0)
                cu_str_add(&t, "        c = q %% %s;\n        q /= %s;\n", cu_poly_expr(md[i], pe, sizeof pe),
                           cu_poly_expr(md[i], pe, sizeof pe));
            else
                cu_str_add(&t, "        c = q;\n");
            for (int k = 0; k < nops; k++) {
                int64_t z;
                if (!direct[k] && !(cg_poly_is_const(ms[k][i], &z) && z == 0))
                    cu_str_add(&t, "        o%d += c * %s;\n", k, cu_poly_expr(ms[k][i], pe, sizeof pe));
            }
        }
    }
    for (int k = 0; k < n->ninputs; k++) {
        if (opslot[k] < 0) {
            cu_str_add(&t, "        const float v%d = 0.0f;\n", k);
            continue;
        }
        int o = opslot[k];
        if (direct[o])
            cu_str_add(&t, "        const float v%d = vk_get(x%d + i);\n", k, o);
        else
            cu_str_add(&t, "        const float v%d = vk_get(x%d + o%d);\n", k, o, o);
    }
    cu_str_add(&t, "        vk_put(y + i, %s);\n    }\n}\n", e);
    char label[64];
    snprintf(label, sizeof label, "%s", ir_op_name(n->op));
    cu_launch *l = cu_launch_flat(c, "ew", label, &t, node, EW_THREADS, total, CU_FIELD(vk_ew_params, batch));
    if (!l)
        return c->d->status;
    for (int k = 0; k < nops; k++)
        cu_arg_value(c, l, CU_FIELD(vk_ew_params, x) + k, opv[k]);
    cu_arg_value(c, l, CU_FIELD(vk_ew_params, y), out);
    return c->d->status;
}
