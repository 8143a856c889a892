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
 *    Linear's W and bias: (x * s + t) @ W + b = x @ (s W) + (t @ W + b);
 *    and a per-feature Mul after a Linear (layer scale) into its W and b. */
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
 * be NULL) and W[:, n] *= sc[n], b = (b + t @ W) * sc + sh, all optional;
 * what_out names what sc/sh came from in the op_type. */
static int refold_linear(ir_graph *g, int li, int node_at, int x2, const double *s_in, const double *t_in,
                         const double *s_out, const double *t_out, const char *what_out)
{
    const ir_node *l = &g->nodes[li];
    ir_linear v;
    char why[96];
    if (!ir_linear_of(l, &v, why, sizeof why))
        return -1;
    const ir_value *wv = &g->values[v.w];
    int64_t K = wv->dims[0].k, N = wv->dims[1].k, cnt, dims[2] = {K, N};
    /* W stays in floats: each element is scaled in double and rounded once, as
     * it would be through a double copy, in half the memory (a face ViT's head
     * is 73728 x 512); the bias sums in double. */
    float *w = malloc(sizeof(float) * (size_t)(K * N > 0 ? K * N : 1));
    double *b = calloc((size_t)N + 1, sizeof(double));
    int st = -1;
    if (!w || !b)
        goto out;
    if (wv->dtype == IR_F32 && wv->nbytes == sizeof(float) * (size_t)(K * N)) {
        memcpy(w, wv->data, wv->nbytes);
    } else {
        double *wd = rw_const_f64(g, v.w, &cnt);
        if (!wd || cnt != K * N) {
            free(wd);
            goto out;
        }
        for (int64_t i = 0; i < K * N; i++)
            w[i] = (float)wd[i];
        free(wd);
    }
    if (v.bias >= 0) {
        double *b0 = rw_const_f64(g, v.bias, &cnt);
        if (!b0)
            goto out;
        memcpy(b, b0, sizeof(double) * (size_t)N);
        free(b0);
    }
    /* one pass over W in memory order */
    for (int64_t k = 0; k < K; k++) {
        float *wk = w + k * N;
        for (int64_t j = 0; t_in && j < N; j++)
            b[j] += t_in[k] * (double)wk[j];
        for (int64_t j = 0; (s_in || s_out) && j < N; j++)
            wk[j] = (float)((double)wk[j] * (s_in ? s_in[k] : 1.0) * (s_out ? s_out[j] : 1.0));
    }
    for (int64_t j = 0; j < N; j++) {
        if (s_out)
            b[j] *= s_out[j];
        if (t_out)
            b[j] += t_out[j];
    }
    {
        const char *name = l->name;
        char op_type[128];
        snprintf(op_type, sizeof op_type, "%s%s%s%s", s_in ? "BatchNormalization+" : "", l->op_type,
                 s_out ? "+" : "", s_out ? what_out : "");
        ir_linear f = ir_linear_make(x2, rw_const_f32(g, name, "/weight", 2, dims, w), g->nodes[node_at].outputs[0]);
        f.bias = f32_const(g, name, "/bias", 1, &N, b, N);
        ir_node_spec spec;
        ir_linear_spec(&f, &spec);
        if (f.w >= 0 && f.bias >= 0 && !rw_set_spec(g, node_at, name, op_type, &spec))
            st = 0;
    }
out:
    free(w);
    free(b);
    return st;
}

/* A Linear without activation, gate or residual, of constant W and bias. */
static int is_plain_linear(const ir_graph *g, const ir_node *l)
{
    ir_linear v;
    char why[96];
    return l && ir_linear_of(l, &v, why, sizeof why) && v.residual < 0 && v.gate < 0 && v.act == IR_ACT_NONE &&
           rw_is_const(g, v.w) && (v.bias < 0 || rw_is_const(g, v.bias));
}

typedef struct {
    const ir_node *linear; /* the Linear before it that takes the BatchNorm (1.), or NULL (2.) */
} bn_match;

#define MISS(...) return (snprintf(why, nwhy, __VA_ARGS__), -1)

/* batchnorm = BatchNormalization(x, scale, B, mean, var), inference mode, constant parameters */
static int match_bn(const ir_graph *g, const ir_node *n, void *mv, char *why, size_t nwhy)
{
    bn_match *m = mv;
    int x = n->inputs[0];
    const ir_value *xv = &g->values[x];
    double *s, *t;
    int64_t C;
    if (ir_attr_int(n, IR_ATTR_TRAINING_MODE, 0) || xv->dtype != IR_F32 || xv->rank < 2)
        return 0;
    if (!affine_of(g, n, &s, &t, &C))
        MISS("the BatchNormalization parameters are not constants");
    free(s);
    free(t);
    if (xv->dims[1].e || xv->dims[1].k != C)
        return 0; /* malformed: the interpreter reports it */
    const ir_node *l = rw_producer(g, x);
    m->linear = is_plain_linear(g, l) && xv->rank == 2 && rw_uses(g, x) == 1 ? l : NULL;
    return 1;
}

static int rewrite_bn(ir_graph *g, int ni, const void *mv)
{
    const bn_match *m = mv;
    const ir_node *n = &g->nodes[ni];
    const ir_value *xv = &g->values[n->inputs[0]];
    double *s, *t;
    int64_t C;
    if (!affine_of(g, n, &s, &t, &C))
        return -1;
    int r = -1, x = n->inputs[0], rank = xv->rank;
    if (m->linear) { /* 1. into the Linear before */
        r = refold_linear(g, rw_index(g, m->linear), ni, m->linear->inputs[IR_LINEAR_X], NULL, NULL, s, t,
                          "BatchNormalization");
    } else { /* 2. scale/shift over the channel axis */
        int64_t dims[IR_MAX_RANK];
        dims[0] = C;
        for (int i = 1; i < rank - 1; i++)
            dims[i] = 1;
        const char *name = n->name;
        int sv = f32_const(g, name, "/scale", rank - 1, dims, s, C);
        int tv = f32_const(g, name, "/shift", rank - 1, dims, t, C);
        int mul = rw_new_value(g, name, "/scaled", IR_F32);
        int in[2] = {x, sv}, in2[2] = {mul, tv}, out = g->nodes[ni].outputs[0];
        if (sv >= 0 && tv >= 0 && mul >= 0 && rw_add_node(g, IR_OP_MUL, name, "BatchNormalization", 2, in, mul, 0, NULL) >= 0)
            r = rw_set_node(g, ni, IR_OP_ADD, name, "BatchNormalization", 2, in2, 1, &out, 0, NULL);
    }
    free(s);
    free(t);
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

typedef struct {
    int x, s, t;       /* the scale/shift: x * s + t */
    const ir_node *rs; /* the flattening Reshape before the Linear, or NULL */
    const ir_node *linear;
} prefold_match;

/* prefold = Linear(Reshape?(Add(Mul(x, s), t)), W, b) with s, t constants
 * over x's non-batch dims, anchored at the Add that step 2 made */
static int match_prefold(const ir_graph *g, const ir_node *add, void *mv, char *why, size_t nwhy)
{
    prefold_match *m = mv;
    if (strcmp(add->op_type, "BatchNormalization") != 0 || !pat_affine(g, add->outputs[0], &m->x, &m->s, &m->t))
        return 0; /* only what step 2 made: other affine maps are not ours to move */
    const ir_node *u = rw_only_user(g, add->outputs[0]);
    if (u && (u->op == IR_OP_RESHAPE || u->op == IR_OP_FLATTEN)) {
        m->rs = u;
        u = rw_only_user(g, u->outputs[0]);
    }
    if (!is_plain_linear(g, u) || u->inputs[IR_LINEAR_X] != (m->rs ? m->rs : add)->outputs[0])
        return 0;
    m->linear = u;
    const ir_value *xv = &g->values[m->x], *lin = &g->values[u->inputs[IR_LINEAR_X]];
    int64_t K = g->values[u->inputs[IR_LINEAR_W]].dims[0].k, P = 0, P2 = 0;
    double *s = expand_nonbatch(g, m->s, xv, &P), *t = s ? expand_nonbatch(g, m->t, xv, &P2) : NULL;
    const char *miss = NULL;
    if (!s || !t)
        miss = "the scale/shift does not broadcast over the non-batch axes";
    else if (m->rs && !(lin->rank == 2 && ir_dim_eq(lin->dims[0], xv->dims[0]) && P == K))
        miss = "the Reshape before the Linear does not flatten the non-batch axes";
    else if (!m->rs) {
        /* rows: all but the last axis; s and t must be the same on every row */
        for (int64_t p = 0; p < P && !miss; p++)
            if (s[p] != s[p % K] || t[p] != t[p % K])
                miss = "the scale/shift varies along the rows, not only along the Linear's input features";
    }
    free(s);
    free(t);
    if (miss)
        MISS("%s; it stays an elementwise scale/shift", miss);
    return 1;
}

#undef MISS

static int rewrite_prefold(ir_graph *g, int ni, const void *mv)
{
    const prefold_match *m = mv;
    const ir_value *xv = &g->values[m->x];
    int64_t P = 0, P2 = 0;
    double *s = expand_nonbatch(g, m->s, xv, &P), *t = s ? expand_nonbatch(g, m->t, xv, &P2) : NULL;
    int xin = m->x, r = s && t ? 0 : -1, li = rw_index(g, m->linear);
    (void)ni;
    if (!r && m->rs) { /* the Reshape now flattens x itself */
        const ir_node *rs = m->rs;
        int out = rs->outputs[0];
        r = rw_set_node(g, rw_index(g, rs), rs->op, rs->name, rs->op_type, rs->ninputs, (int[2]){m->x, ir_input(rs, 1)},
                        1, &out, rs->nattrs, rs->attrs);
        xin = out;
    }
    if (!r)
        r = refold_linear(g, li, li, xin, s, t, NULL, NULL, NULL);
    free(s);
    free(t);
    return r;
}

typedef struct {
    int linear; /* node index */
    int scale;  /* the constant of N values */
} layer_scale_match;

#define MISS(...) return (snprintf(why, nwhy, __VA_ARGS__), -1)

/* layer_scale = Mul(Linear(x, W, b), s), s a constant of the Linear's N
 * output features (broadcast over the rows): DINOv2's and CaiT's layer scale
 * before the residual Add, folded into W and b like step 1's BatchNorm. */
static int match_layer_scale(const ir_graph *g, const ir_node *n, void *mv, char *why, size_t nwhy)
{
    layer_scale_match *m = mv;
    for (int k = 0; k < 2; k++) {
        const ir_node *l = rw_producer(g, n->inputs[k]);
        int s = n->inputs[1 - k];
        ir_linear v;
        if (!l || !ir_linear_of(l, &v, why, nwhy) || !rw_is_const(g, s))
            continue;
        const ir_value *sv = &g->values[s], *lo = &g->values[n->inputs[k]], *y = &g->values[n->outputs[0]];
        int64_t N = g->values[v.w].dims[1].k, cnt = 1;
        for (int i = 0; i < sv->rank; i++)
            cnt *= sv->dims[i].k;
        if (sv->rank < 1 || sv->rank > lo->rank || sv->dims[sv->rank - 1].k != N || cnt != N ||
            y->rank != lo->rank || sv->dtype != IR_F32)
            MISS("the Mul after the Linear is not by one value per output feature");
        if (!is_plain_linear(g, l))
            MISS("the Linear before the per-feature Mul already has an activation or a residual");
        if (rw_uses(g, n->inputs[k]) != 1)
            MISS("the Linear's output has other readers than the per-feature Mul");
        m->linear = rw_index(g, l);
        m->scale = s;
        return 1;
    }
    return 0;
}

#undef MISS

static int rewrite_layer_scale(ir_graph *g, int ni, const void *mv)
{
    const layer_scale_match *m = mv;
    int64_t cnt;
    double *s = rw_const_f64(g, m->scale, &cnt);
    int r = s ? refold_linear(g, m->linear, ni, g->nodes[m->linear].inputs[IR_LINEAR_X], NULL, NULL, s, NULL, "Mul") : -1;
    free(s);
    return r;
}

/* Step 3 runs once every BatchNorm has been through steps 1 and 2. */
static const rw_rule bn_rules[] = {
    {.name = "batchnorm", .anchor = IR_OP_BATCHNORM, .size = sizeof(bn_match), .match = match_bn,
     .rewrite = rewrite_bn},
};
static const rw_rule prefold_rules[] = {
    {.name = "scale-shift-into-linear", .anchor = IR_OP_ADD, .size = sizeof(prefold_match), .match = match_prefold,
     .rewrite = rewrite_prefold},
    {.name = "layer-scale-into-linear", .anchor = IR_OP_MUL, .size = sizeof(layer_scale_match),
     .match = match_layer_scale, .rewrite = rewrite_layer_scale},
};

int pass_fold_batchnorm(ir_graph *g, vitc_diag *d)
{
    int st = RW_APPLY(g, bn_rules, d);
    return st ? st : RW_APPLY(g, prefold_rules, d);
}
