/* batchnorm.c: fold-batchnorm, inference BatchNormalization is an affine map
 * per channel, y = x * s + t with s = scale / sqrt(var + eps) and
 * t = B - mean * s, and goes where that is exact:
 *
 * 1. after a Linear whose output features are the channels (the feature head
 *    of face models: Linear -> BatchNorm1d on [B, C]): into W and bias;
 * 2. otherwise it becomes scale/shift, Mul(x, s) + t, over its channel axis
 *    (face_bn's BatchNorm1d over the 144 patches of [B, 144, 64] scales
 *    tokens, not features);
 * 3. a scale/shift whose result only feeds a Linear (through a flattening
 *    Reshape) and is constant along the rows it multiplies goes into that
 *    Linear's W and bias: (x * s + t) @ W + b = x @ (s W) + (t @ W + b). */
#include "passes/rewrite.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* s and t of a BatchNormalization, malloc'ed; C channels. */
static int affine_of(const ir_graph *g, const ir_node *n, double **s, double **t, int64_t *C)
{
    double *p[5] = {NULL};
    int64_t cnt[5] = {0};
    int ok = 1;
    for (int k = 1; k < 5 && ok; k++)
        ok = (p[k] = rw_const_f64(g, n->inputs[k], &cnt[k])) != NULL && cnt[k] == cnt[1];
    if (ok) {
        double eps = ir_attr_float(n, IR_ATTR_EPSILON, 1e-5f);
        *C = cnt[1];
        *s = p[1];
        *t = p[2];
        for (int64_t c = 0; c < *C; c++) {
            (*s)[c] = p[1][c] / sqrt(p[4][c] + eps);
            (*t)[c] = p[2][c] - p[3][c] * (*s)[c];
        }
        free(p[3]);
        free(p[4]);
        return 1;
    }
    for (int k = 1; k < 5; k++)
        free(p[k]);
    return 0;
}

static int f32_const(ir_graph *g, const char *name, const char *suffix, int rank, const int64_t *dims,
                     const double *v, int64_t n)
{
    float *f = malloc(sizeof(float) * (size_t)(n ? n : 1));
    if (!f)
        return -1;
    for (int64_t i = 0; i < n; i++)
        f[i] = (float)v[i];
    int r = rw_const_f32(g, name, suffix, rank, dims, f);
    free(f);
    return r;
}

/* Rewrites Linear node li (x -> W, b) to read x2 with W[k, :] *= s[k] (s may
 * be NULL) and W[:, n] *= sc[n], b = (b + t @ W) * sc + sh, all optional. */
static int refold_linear(ir_graph *g, int li, int node_at, int x2, const double *s_in, const double *t_in,
                         const double *s_out, const double *t_out)
{
    const ir_node *l = &g->nodes[li];
    const ir_value *wv = &g->values[l->inputs[1]];
    int64_t K = wv->dims[0].k, N = wv->dims[1].k, cnt, dims[2] = {K, N};
    double *w = rw_const_f64(g, l->inputs[1], &cnt), *b = calloc((size_t)N + 1, sizeof(double));
    int st = -1;
    if (!w || !b)
        goto out;
    if (ir_input(l, 2) >= 0) {
        double *b0 = rw_const_f64(g, l->inputs[2], &cnt);
        if (!b0)
            goto out;
        memcpy(b, b0, sizeof(double) * (size_t)N);
        free(b0);
    }
    for (int64_t k = 0; k < K; k++)
        for (int64_t j = 0; j < N; j++) {
            if (t_in)
                b[j] += t_in[k] * w[k * N + j];
            if (s_in)
                w[k * N + j] *= s_in[k];
        }
    for (int64_t j = 0; j < N; j++) {
        for (int64_t k = 0; s_out && k < K; k++)
            w[k * N + j] *= s_out[j];
        if (s_out)
            b[j] *= s_out[j];
        if (t_out)
            b[j] += t_out[j];
    }
    {
        const char *name = l->name;
        char op_type[128];
        snprintf(op_type, sizeof op_type, "%s%s%s", s_in ? "BatchNormalization+" : "", l->op_type,
                 s_out ? "+BatchNormalization" : "");
        int in[3] = {x2, f32_const(g, name, "/weight", 2, dims, w, K * N), f32_const(g, name, "/bias", 1, &N, b, N)};
        const ir_node *at = &g->nodes[node_at];
        int out = at->outputs[0];
        if (in[1] >= 0 && in[2] >= 0 && !rw_set_node(g, node_at, IR_OP_LINEAR, name, op_type, 3, in, 1, &out, 0, NULL))
            st = 0;
    }
out:
    free(w);
    free(b);
    return st;
}

static int is_plain_linear(const ir_graph *g, const ir_node *l)
{
    return l && l->op == IR_OP_LINEAR && ir_input(l, 3) < 0 && ir_attr_int(l, IR_ATTR_ACTIVATION, 0) == 0 &&
           rw_is_const(g, l->inputs[1]) && (ir_input(l, 2) < 0 || rw_is_const(g, l->inputs[2]));
}

/* batchnorm = BatchNormalization(x, scale, B, mean, var), inference mode, constant parameters */
static int fold_bn(ir_graph *g, int ni)
{
    const ir_node *n = &g->nodes[ni];
    int x = n->inputs[0];
    const ir_value *xv = &g->values[x];
    double *s, *t;
    int64_t C;
    if (ir_attr_int(n, IR_ATTR_TRAINING_MODE, 0) || xv->dtype != IR_F32 || xv->rank < 2)
        return 0;
    if (!affine_of(g, n, &s, &t, &C)) {
        rw_miss(g, n, "the BatchNormalization parameters are not constants");
        return 0;
    }
    const ir_node *l = rw_producer(g, x);
    int r = 0;
    if (xv->dims[1].e || xv->dims[1].k != C) {
        free(s);
        free(t);
        return 0; /* malformed: the interpreter reports it */
    }
    if (is_plain_linear(g, l) && xv->rank == 2 && rw_uses(g, x) == 1) { /* 1. into the Linear before */
        r = refold_linear(g, rw_index(g, l), ni, l->inputs[0], NULL, NULL, s, t) ? -1 : 1;
    } else { /* 2. scale/shift over the channel axis */
        int64_t dims[IR_MAX_RANK];
        dims[0] = C;
        for (int i = 1; i < xv->rank - 1; i++)
            dims[i] = 1;
        const char *name = n->name;
        int sv = f32_const(g, name, "/scale", xv->rank - 1, dims, s, C);
        int tv = f32_const(g, name, "/shift", xv->rank - 1, dims, t, C);
        int m = rw_new_value(g, name, "/scaled", IR_F32);
        int in[2] = {x, sv};
        r = -1;
        if (sv >= 0 && tv >= 0 && m >= 0 &&
            rw_add_node(g, IR_OP_MUL, g->nodes[ni].name, "BatchNormalization", 2, in, m, 0, NULL) >= 0) {
            int in2[2] = {m, tv}, out = g->nodes[ni].outputs[0];
            r = rw_set_node(g, ni, IR_OP_ADD, g->nodes[ni].name, "BatchNormalization", 2, in2, 1, &out, 0, NULL) ? -1
                                                                                                                   : 1;
        }
    }
    free(s);
    free(t);
    if (r > 0)
        rw_hit();
    return r;
}

/* Expands constant c (broadcasting over x's non-batch dims dims[1:]) into
 * P = prod(dims[1:]) doubles; NULL if c broadcasts over the batch too. */
static double *expand_nonbatch(const ir_graph *g, int c, const ir_value *x, int64_t *P)
{
    const ir_value *cv = &g->values[c];
    int r = x->rank;
    int64_t xd[IR_MAX_RANK], cd[IR_MAX_RANK], cnt;
    if (!rw_is_const(g, c) || cv->rank > r || (cv->rank == r && cv->dims[0].k != 1))
        return NULL;
    for (int i = 1; i < r; i++) {
        if (x->dims[i].e)
            return NULL;
        xd[i] = x->dims[i].k;
        int ci = i - (r - cv->rank);
        cd[i] = ci >= 0 ? cv->dims[ci].k : 1;
        if (cd[i] != 1 && cd[i] != xd[i])
            return NULL;
    }
    double *v = rw_const_f64(g, c, &cnt);
    if (!v)
        return NULL;
    *P = 1;
    for (int i = 1; i < r; i++)
        *P *= xd[i];
    double *out = malloc(sizeof(double) * (size_t)(*P ? *P : 1));
    if (out)
        for (int64_t p = 0; p < *P; p++) {
            int64_t rem = p, off = 0, stride = 1;
            for (int i = r - 1; i >= 1; i--) {
                int64_t idx = rem % xd[i];
                rem /= xd[i];
                if (cd[i] != 1)
                    off += idx * stride;
                stride *= cd[i];
            }
            out[p] = v[off];
        }
    free(v);
    return out;
}

/* prefold = Linear(Reshape?(Add(Mul(x, s), t)), W, b) with s, t constants over x's non-batch dims */
static int fold_into_next_linear(ir_graph *g, int li)
{
    const ir_node *l = &g->nodes[li];
    if (!is_plain_linear(g, l))
        return 0;
    int in = l->inputs[0];
    const ir_node *rs = rw_producer(g, in);
    if (rs && (rs->op == IR_OP_RESHAPE || rs->op == IR_OP_FLATTEN) && rw_uses(g, in) == 1)
        in = rs->inputs[0];
    else
        rs = NULL;
    const ir_node *add = rw_def(g, in, IR_OP_ADD), *mul = NULL;
    int sv = -1, tv = -1, x = -1;
    if (!add || rw_uses(g, in) != 1 || strcmp(add->op_type, "BatchNormalization") != 0)
        return 0; /* only what step 2 made: other affine maps are not ours to move */
    for (int k = 0; k < 2 && !mul; k++)
        if (rw_is_const(g, add->inputs[1 - k]) && (mul = rw_def(g, add->inputs[k], IR_OP_MUL))) {
            tv = add->inputs[1 - k];
            if (rw_uses(g, add->inputs[k]) != 1)
                mul = NULL;
        }
    for (int k = 0; mul && k < 2 && x < 0; k++)
        if (rw_is_const(g, mul->inputs[1 - k]) && !rw_is_const(g, mul->inputs[k])) {
            sv = mul->inputs[1 - k];
            x = mul->inputs[k];
        }
    if (x < 0)
        return 0;
    const ir_value *xv = &g->values[x], *lin = &g->values[l->inputs[0]];
    int64_t K = g->values[l->inputs[1]].dims[0].k, P = 0, P2 = 0;
    double *s = expand_nonbatch(g, sv, xv, &P), *t = s ? expand_nonbatch(g, tv, xv, &P2) : NULL;
    int r = 0;
    const char *why = NULL;
    if (!s || !t)
        why = "the scale/shift does not broadcast over the non-batch axes";
    else if (rs && !(lin->rank == 2 && ir_dim_eq(lin->dims[0], xv->dims[0]) && P == K))
        why = "the Reshape before the Linear does not flatten the non-batch axes";
    else if (!rs) {
        /* rows: all but the last axis; s and t must be the same on every row */
        for (int64_t p = 0; p < P && !why; p++)
            if (s[p] != s[p % K] || t[p] != t[p % K])
                why = "the scale/shift varies along the rows, not only along the Linear's input features";
    }
    if (why) {
        const ir_node *anchor = rw_producer(g, in);
        rw_miss(g, anchor, "%s; it stays an elementwise scale/shift", why);
    } else {
        int xin = x;
        if (rs) { /* the Reshape now flattens x itself */
            int ri = rw_index(g, rs), out = rs->outputs[0];
            if (rw_set_node(g, ri, rs->op, rs->name, rs->op_type, rs->ninputs, (int[2]){x, ir_input(rs, 1)}, 1, &out,
                            rs->nattrs, rs->attrs))
                r = -1;
            xin = out;
        }
        if (r == 0)
            r = refold_linear(g, li, li, xin, s, t, NULL, NULL) ? -1 : 1;
        if (r > 0)
            rw_hit();
    }
    free(s);
    free(t);
    return r;
}

int pass_fold_batchnorm(ir_graph *g, vitc_diag *d)
{
    int changed = 0;
    for (int i = 0; i < g->nnodes; i++) {
        if (g->nodes[i].op != IR_OP_BATCHNORM)
            continue;
        int r = fold_bn(g, i);
        if (r < 0)
            return vitc_error(d, VITC_INTERNAL, &g->nodes[i], "out of memory");
        changed |= r;
    }
    if (changed) {
        int st = rw_finish(g, d);
        if (st)
            return st;
    }
    int changed2 = 0;
    for (int i = 0; i < g->nnodes; i++) {
        if (g->nodes[i].op != IR_OP_LINEAR)
            continue;
        int r = fold_into_next_linear(g, i);
        if (r < 0)
            return vitc_error(d, VITC_INTERNAL, &g->nodes[i], "out of memory");
        changed2 |= r;
    }
    return changed2 ? rw_finish(g, d) : VITC_OK;
}
