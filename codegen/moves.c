/* moves.c: Pad, Tile, GatherND and ScatterND as lists of strided moves
 * (moves.h says what each becomes).  Only shapes and compile-time numbers
 * are read here: the backends turn each move into their strided copy. */
#include "codegen/moves.h"

#include "ir/interp.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cg_moves_op(ir_op op)
{
    return op == IR_OP_PAD || op == IR_OP_TILE || op == IR_OP_GATHER_ND || op == IR_OP_SCATTER_ND;
}

void cg_moves_free(cg_moves *mv)
{
    free(mv->m);
    memset(mv, 0, sizeof *mv);
}

int cg_moves_combine(const cg_moves *mv)
{
    for (int i = 0; i < mv->n; i++)
        if (mv->m[i].op != CG_MOVE_COPY && mv->m[i].op != CG_MOVE_ZERO)
            return 1;
    return 0;
}

int cg_moves_supported(const ir_graph *g, const ir_node *n, const ir_dtype *reduce_ok, int nreduce, const char *title,
                       char *why, size_t len)
{
    cg_moves mv;
    if (!cg_moves_plan(g, n, &mv, why, len))
        return 0;
    int combine = cg_moves_combine(&mv);
    cg_moves_free(&mv);
    ir_dtype t = g->values[n->outputs[0]].dtype;
    for (int i = 0; combine && i < nreduce; i++)
        if (reduce_ok[i] == t)
            return 1;
    if (combine)
        snprintf(why, len, "ScatterND with a reduction on %s tensors is not supported by the %s backend",
                 ir_dtype_name(t), title);
    return !combine;
}

/* Planning state: the node, its moves, and the reason it failed. */
typedef struct {
    const ir_graph *g;
    const ir_node *n;
    cg_moves *mv;
    char *why;
    size_t len;
} plan;

static int refuse(plan *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int refuse(plan *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->why, p->len, fmt, ap);
    va_end(ap);
    return 0;
}

/* A new move (zeroed, src.value -1); NULL when there are too many. */
static cg_move *add(plan *p, cg_move_op op, int rank)
{
    cg_moves *mv = p->mv;
    if (mv->n >= CG_MOVES_MAX)
        return refuse(p, "%s would take more than %d separate copies", ir_op_name(p->n->op), CG_MOVES_MAX), NULL;
    if (mv->n == mv->cap) {
        int cap = mv->cap ? 2 * mv->cap : 8;
        cg_move *m = realloc(mv->m, sizeof *m * (size_t)cap);
        if (!m)
            return refuse(p, "out of memory"), NULL;
        mv->m = m;
        mv->cap = cap;
    }
    cg_move *m = &mv->m[mv->n++];
    memset(m, 0, sizeof *m);
    m->op = op;
    m->rank = rank;
    m->dst.value = m->src.value = -1;
    m->dst.base = m->src.base = cg_poly_k(0);
    for (int i = 0; i < IR_MAX_RANK; i++)
        m->dims[i] = m->dst.strides[i] = m->src.strides[i] = cg_poly_k(0);
    return m;
}

static int is_static(ir_dim d) { return d.e == 0 || d.k == 0; }

static int poly_is_zero(cg_poly a)
{
    int64_t k;
    return cg_poly_is_const(a, &k) && k == 0;
}

static cg_poly poly_sub(cg_poly a, cg_poly b) { return cg_poly_add(a, cg_poly_scale(b, -1)); }

/* The integers value v holds at compile time (a plain constant, or shape
 * arithmetic free of the batch), at most max of them; 0 if not known. */
static int known_ints(const ir_graph *g, int v, int64_t *out, int max, int *n)
{
    if (v < 0)
        return 0;
    const ir_value *x = &g->values[v];
    if (x->symval) {
        if (x->nsymval > max)
            return 0;
        for (int i = 0; i < x->nsymval; i++) {
            if (!is_static(x->symval[i]))
                return 0;
            out[i] = x->symval[i].e == 0 ? x->symval[i].k : 0;
        }
        *n = x->nsymval;
        return 1;
    }
    if (!ir_value_is_plain_const(g, v) || (x->dtype != IR_I64 && x->dtype != IR_I32) || x->rank > 1)
        return 0;
    size_t es = ir_dtype_size(x->dtype);
    if (x->nbytes / es > (size_t)max)
        return 0;
    *n = (int)(x->nbytes / es);
    for (int i = 0; i < *n; i++) {
        if (x->dtype == IR_I64) {
            memcpy(&out[i], (const char *)x->data + 8 * i, 8);
        } else {
            int32_t y;
            memcpy(&y, (const char *)x->data + 4 * i, 4);
            out[i] = y;
        }
    }
    return 1;
}

/* ---- Pad ---- */

/* The most a non-constant mode pads one side of an axis by: its border is
 * walked position by position at compile time. */
#define PAD_WALK_MAX (1 << 20)

static const char *mode_name(char m)
{
    return m == 'c' ? "constant" : m == 'r' ? "reflect" : m == 'e' ? "edge" : "wrap";
}

/* Output coordinate that output coordinate q of axis a reads in a
 * non-constant mode: the source's position in the input, shifted by the
 * pad before it (begin). */
static int64_t pad_from(int64_t q, int64_t begin, int64_t size, char m)
{
    return ir_pad_source(q - begin, size, m) + begin;
}

static int plan_pad(plan *p)
{
    const ir_graph *g = p->g;
    const ir_node *n = p->n;
    int xv = n->inputs[0], yv = n->outputs[0];
    const ir_value *x = &g->values[xv], *y = &g->values[yv];
    int r = x->rank;
    char m = ir_pad_mode(n);
    if (!m)
        return refuse(p, "Pad's mode is not one of constant, reflect, edge, wrap");
    int64_t pads[2 * IR_MAX_RANK], axes[IR_MAX_RANK], b[IR_MAX_RANK] = {0}, e[IR_MAX_RANK] = {0};
    int np, na = r;
    if (!known_ints(g, n->inputs[1], pads, 2 * IR_MAX_RANK, &np))
        return refuse(p, "Pad needs its pads known at compile time");
    if (ir_input(n, 3) >= 0) {
        if (!known_ints(g, n->inputs[3], axes, IR_MAX_RANK, &na))
            return refuse(p, "Pad needs its axes known at compile time");
    } else {
        for (int i = 0; i < r; i++)
            axes[i] = i;
    }
    if (np != 2 * na || y->rank != r)
        return refuse(p, "Pad has %d pads for %d axes", np, na);
    for (int i = 0; i < na; i++) {
        int64_t a = axes[i] < 0 ? axes[i] + r : axes[i];
        if (a < 0 || a >= r)
            return refuse(p, "Pad axis %lld is out of range", (long long)axes[i]);
        b[a] = pads[i];
        e[a] = pads[i + na];
    }
    /* per axis: the input's kept range [lo, lo + cnt) lands at pos in the output */
    int64_t lo[IR_MAX_RANK], pos[IR_MAX_RANK], cnt[IR_MAX_RANK], size[IR_MAX_RANK];
    cg_poly kept[IR_MAX_RANK], full[IR_MAX_RANK], xs[IR_MAX_RANK], ys[IR_MAX_RANK];
    int empty = 0;
    cg_poly_strides(x, xs);
    cg_poly_strides(y, ys);
    for (int a = 0; a < r; a++) {
        full[a] = cg_poly_dim(y->dims[a]);
        lo[a] = pos[a] = 0;
        if (!is_static(x->dims[a])) {
            if (b[a] || e[a])
                return refuse(p, "Pad of axis %d, which is batch-sized, is not supported", a);
            kept[a] = full[a];
            cnt[a] = size[a] = -1;
            continue;
        }
        size[a] = x->dims[a].e == 0 ? x->dims[a].k : 0;
        lo[a] = b[a] < 0 ? -b[a] : 0;
        pos[a] = b[a] > 0 ? b[a] : 0;
        cnt[a] = size[a] - lo[a] - (e[a] < 0 ? -e[a] : 0);
        if (cnt[a] <= 0)
            cnt[a] = 0, empty = 1;
        if (!is_static(y->dims[a]) || (y->dims[a].e == 0 ? y->dims[a].k : 0) != size[a] + b[a] + e[a])
            return refuse(p, "Pad's output axis %d does not have the size its pads give", a);
        kept[a] = cg_poly_k(cnt[a]);
    }
    if (cg_poly_numel(y).bad)
        return refuse(p, "Pad's output is too large");
    if (empty) { /* every element is padding */
        if (m != 'c')
            return refuse(p, "Pad in mode '%s' crops an axis to nothing", mode_name(m));
        int cv = ir_input(n, 2);
        cg_move *mo = add(p, cv >= 0 ? CG_MOVE_COPY : CG_MOVE_ZERO, r);
        if (!mo)
            return 0;
        memcpy(mo->dims, full, sizeof full);
        mo->dst.value = yv;
        memcpy(mo->dst.strides, ys, sizeof ys);
        mo->src.value = cv;
        return 1;
    }
    if (m != 'c') /* the border's sources must survive the crop */
        for (int a = 0; a < r; a++) {
            if (cnt[a] < 0)
                continue;
            if (b[a] > PAD_WALK_MAX || e[a] > PAD_WALK_MAX)
                return refuse(p, "Pad in mode '%s' by more than %d on axis %d is not supported", mode_name(m),
                              PAD_WALK_MAX, a);
            int64_t yd = pos[a] + cnt[a] + (e[a] > 0 ? e[a] : 0);
            for (int64_t q = 0; q < yd; q++) {
                if (q == pos[a])
                    q = pos[a] + cnt[a]; /* the interior */
                if (q >= yd)
                    break;
                int64_t s = pad_from(q, b[a], size[a], m);
                if (s < pos[a] || s >= pos[a] + cnt[a])
                    return refuse(p, "Pad in mode '%s' reads, on axis %d, elements its negative pads crop away",
                                  mode_name(m), a);
            }
        }
    /* the input, cropped, into its window of the output */
    cg_move *mo = add(p, CG_MOVE_COPY, r);
    if (!mo)
        return 0;
    mo->dst.value = yv;
    mo->src.value = xv;
    for (int a = 0; a < r; a++) {
        mo->dims[a] = kept[a];
        mo->dst.strides[a] = ys[a];
        mo->src.strides[a] = xs[a];
        mo->dst.base = cg_poly_add(mo->dst.base, cg_poly_scale(ys[a], pos[a]));
        mo->src.base = cg_poly_add(mo->src.base, cg_poly_scale(xs[a], lo[a]));
    }
    for (int a = 0; a < r; a++) {
        if (cnt[a] < 0)
            continue;
        int64_t before = pos[a], after = e[a] > 0 ? e[a] : 0, yd = pos[a] + cnt[a] + after;
        for (int side = 0; side < 2; side++) {
            int64_t from = side ? pos[a] + cnt[a] : 0, to = side ? yd : before;
            if (m == 'c') {
                if (from >= to)
                    continue;
                /* axes before a: the interior (their borders are filled by their own moves); after a: all */
                int cv = ir_input(n, 2);
                cg_move *f = add(p, cv >= 0 ? CG_MOVE_COPY : CG_MOVE_ZERO, r);
                if (!f)
                    return 0;
                f->dst.value = yv;
                f->src.value = cv;
                for (int i = 0; i < r; i++) {
                    f->dims[i] = i < a ? kept[i] : i == a ? cg_poly_k(to - from) : full[i];
                    f->dst.strides[i] = ys[i];
                    if (i < a)
                        f->dst.base = cg_poly_add(f->dst.base, cg_poly_scale(ys[i], pos[i]));
                }
                f->dst.base = cg_poly_add(f->dst.base, cg_poly_scale(ys[a], from));
                continue;
            }
            /* from the output itself: axes before a are whole by now, axes after a only their interior */
            for (int64_t q = from; q < to;) {
                int64_t s0 = pad_from(q, b[a], size[a], m), len = 1, step = 0;
                if (q + 1 < to) {
                    step = pad_from(q + 1, b[a], size[a], m) - s0;
                    while (q + len < to && pad_from(q + len, b[a], size[a], m) == s0 + len * step)
                        len++;
                }
                cg_move *c = add(p, CG_MOVE_COPY, r);
                if (!c)
                    return 0;
                c->dst.value = c->src.value = yv;
                for (int i = 0; i < r; i++) {
                    c->dims[i] = i < a ? full[i] : i == a ? cg_poly_k(len) : kept[i];
                    c->dst.strides[i] = c->src.strides[i] = ys[i];
                    if (i > a) {
                        c->dst.base = cg_poly_add(c->dst.base, cg_poly_scale(ys[i], pos[i]));
                        c->src.base = cg_poly_add(c->src.base, cg_poly_scale(ys[i], pos[i]));
                    }
                }
                c->src.strides[a] = cg_poly_scale(ys[a], step);
                c->dst.base = cg_poly_add(c->dst.base, cg_poly_scale(ys[a], q));
                c->src.base = cg_poly_add(c->src.base, cg_poly_scale(ys[a], s0));
                q += len;
            }
        }
    }
    return 1;
}

/* ---- Tile ---- */

typedef struct {
    cg_poly dim, dst, src; /* extent, output stride, input stride (0 along repeats) */
} tile_dim;

/* One copy over d[0..nd), or, past IR_MAX_RANK dims, one per repeat of the
 * first repeat dim (src stride 0) whose count is a number. */
static int tile_moves(plan *p, const tile_dim *d, int nd, cg_poly base)
{
    const ir_node *n = p->n;
    if (nd > IR_MAX_RANK) {
        for (int i = 0; i < nd; i++) {
            int64_t k;
            if (!poly_is_zero(d[i].src) || !cg_poly_is_const(d[i].dim, &k))
                continue;
            tile_dim rest[2 * IR_MAX_RANK];
            memcpy(rest, d, sizeof *d * (size_t)i);
            memcpy(rest + i, d + i + 1, sizeof *d * (size_t)(nd - i - 1));
            for (int64_t j = 0; j < k; j++)
                if (!tile_moves(p, rest, nd - 1, cg_poly_add(base, cg_poly_scale(d[i].dst, j))))
                    return 0;
            return 1;
        }
        return refuse(p, "Tile of this many axes with repeats that depend on the batch is not supported");
    }
    cg_move *m = add(p, CG_MOVE_COPY, nd);
    if (!m)
        return 0;
    m->dst.value = n->outputs[0];
    m->src.value = n->inputs[0];
    m->dst.base = base;
    for (int i = 0; i < nd; i++) {
        m->dims[i] = d[i].dim;
        m->dst.strides[i] = d[i].dst;
        m->src.strides[i] = d[i].src;
    }
    if (nd == 0) { /* a scalar */
        m->rank = 1;
        m->dims[0] = cg_poly_k(1);
    }
    return 1;
}

static int plan_tile(plan *p)
{
    const ir_graph *g = p->g;
    const ir_value *x = &g->values[p->n->inputs[0]], *y = &g->values[p->n->outputs[0]];
    if (y->rank != x->rank)
        return refuse(p, "Tile's output has another rank than its input");
    cg_poly xs[IR_MAX_RANK], ys[IR_MAX_RANK];
    cg_poly_strides(x, xs);
    cg_poly_strides(y, ys);
    tile_dim d[2 * IR_MAX_RANK];
    int nd = 0;
    for (int a = 0; a < x->rank; a++)
        if (y->dims[a].k == 0)
            return 1; /* nothing to copy */
    for (int a = 0; a < x->rank; a++) {
        ir_dim X = x->dims[a], Y = y->dims[a];
        /* the repeats, from the shapes: Y = repeats * X, a number or a power of the batch times one */
        if (Y.e < X.e || Y.k % X.k != 0 || Y.e - X.e > CG_POLY_DEG)
            return refuse(p, "Tile's output axis %d is not a whole number of copies of the input's", a);
        cg_poly rep = cg_poly_k(0), xd = cg_poly_dim(X);
        rep.c[Y.e - X.e] = Y.k / X.k;
        int64_t k;
        int one_rep = cg_poly_is_const(rep, &k) && k == 1, one_x = X.e == 0 && X.k == 1;
        if (one_rep && one_x)
            continue;
        if (one_rep || one_x) {
            d[nd++] = (tile_dim){cg_poly_dim(Y), ys[a], one_x ? cg_poly_k(0) : xs[a]};
            continue;
        }
        d[nd++] = (tile_dim){rep, cg_poly_mul(xd, ys[a]), cg_poly_k(0)};
        d[nd++] = (tile_dim){xd, ys[a], xs[a]};
    }
    return tile_moves(p, d, nd, cg_poly_k(0));
}

/* ---- GatherND and ScatterND ---- */

/* The element offset in data of the slice each index tuple selects (batch_dims
 * b), *count tuples (malloc'ed into *off), and the slice's size *inner. */
static int nd_offsets(plan *p, int data, int bdims, cg_poly **off, int64_t *count, cg_poly *inner)
{
    const ir_graph *g = p->g;
    const char *op = ir_op_name(p->n->op);
    int iv = p->n->inputs[1];
    const ir_value *x = &g->values[data], *idx = &g->values[iv];
    if (!ir_value_is_plain_const(g, iv))
        return refuse(p, "%s needs constant indices (indices computed at run time are not supported)", op);
    if ((idx->dtype != IR_I64 && idx->dtype != IR_I32) || idx->rank < 1)
        return refuse(p, "%s's indices must be int64 or int32 of rank 1 or more", op);
    int64_t m = idx->dims[idx->rank - 1].k;
    if (bdims < 0 || bdims >= x->rank || bdims >= idx->rank || m < 1 || m > x->rank - bdims)
        return refuse(p, "%s's indices do not fit its data", op);
    int64_t batches = 1, total = ir_value_numel(idx, 1);
    for (int i = 0; i < bdims; i++) {
        if (!is_static(x->dims[i]) || x->dims[i].k != idx->dims[i].k)
            return refuse(p, "%s's batch dimension %d differs between data and indices", op, i);
        batches *= x->dims[i].e == 0 ? x->dims[i].k : 0;
    }
    if (total < 0 || total / m > 65536)
        return refuse(p, "%s with more than 65536 index tuples is not supported", op);
    int64_t tuples = total / m, per = batches ? tuples / batches : 0;
    cg_poly xs[IR_MAX_RANK];
    cg_poly_strides(x, xs);
    *inner = cg_poly_k(1);
    for (int i = bdims + (int)m; i < x->rank; i++)
        *inner = cg_poly_mul(*inner, cg_poly_dim(x->dims[i]));
    *off = malloc(sizeof **off * (size_t)(tuples ? tuples : 1));
    if (!*off)
        return refuse(p, "out of memory");
    size_t es = ir_dtype_size(idx->dtype);
    for (int64_t j = 0; j < tuples; j++) {
        cg_poly o = cg_poly_k(0);
        for (int64_t i = bdims - 1, rem = per ? j / per : 0; i >= 0; i--) { /* the batch block's position */
            int64_t d = x->dims[i].k;
            o = cg_poly_add(o, cg_poly_scale(xs[i], rem % d));
            rem /= d;
        }
        for (int64_t k = 0; k < m; k++) {
            int a = bdims + (int)k;
            int64_t v;
            if (es == 8) {
                memcpy(&v, (const char *)idx->data + 8 * (j * m + k), 8);
            } else {
                int32_t w;
                memcpy(&w, (const char *)idx->data + 4 * (j * m + k), 4);
                v = w;
            }
            ir_dim d = x->dims[a];
            if (is_static(d)) {
                int64_t size = d.e == 0 ? d.k : 0;
                if (v < -size || v >= size) {
                    free(*off);
                    return refuse(p, "%s index %lld is out of range for axis %d of size %lld", op, (long long)v, a,
                                  (long long)size);
                }
                v = v < 0 ? v + size : v;
            } else if (v < 0 || v >= d.k) { /* in range at every batch: 0 .. k-1 of k*B^e */
                free(*off);
                return refuse(p, "%s index %lld on axis %d, which is batch-sized, is not in range at every batch "
                                 "(only 0 to %lld are)", op, (long long)v, a, (long long)(d.k - 1));
            }
            o = cg_poly_add(o, cg_poly_scale(xs[a], v));
        }
        (*off)[j] = o;
    }
    *count = tuples;
    return 1;
}

/* The tuples in runs whose offsets are evenly spaced (a nonzero step when
 * they are written: a run never writes one element twice): one move each
 * between the rows (row j of `rows_v` at j * inner) and the slices of
 * `slices_v` at off[j]. */
static int nd_runs(plan *p, const cg_poly *off, int64_t count, cg_poly inner, int rows_v, int slices_v,
                   int scatter, cg_move_op op)
{
    for (int64_t j = 0; j < count;) {
        int64_t len = 1;
        cg_poly step = cg_poly_k(0);
        if (j + 1 < count) {
            step = poly_sub(off[j + 1], off[j]);
            if (!(scatter && poly_is_zero(step)))
                while (j + len < count && cg_poly_eq(poly_sub(off[j + len], off[j + len - 1]), step))
                    len++;
        }
        if (len == 1)
            step = cg_poly_k(0);
        cg_move *m = add(p, op, 2);
        if (!m)
            return 0;
        cg_move_side *rows = scatter ? &m->src : &m->dst, *slices = scatter ? &m->dst : &m->src;
        m->dims[0] = cg_poly_k(len);
        m->dims[1] = inner;
        rows->value = rows_v;
        rows->base = cg_poly_scale(inner, j);
        rows->strides[0] = inner;
        rows->strides[1] = cg_poly_k(1);
        slices->value = slices_v;
        slices->base = off[j];
        slices->strides[0] = step;
        slices->strides[1] = cg_poly_k(1);
        j += len;
    }
    return 1;
}

static int plan_gather_nd(plan *p)
{
    const ir_node *n = p->n;
    int64_t b = ir_attr_int(n, IR_ATTR_BATCH_DIMS, 0);
    cg_poly *off, inner;
    int64_t count;
    if (b < 0 || b >= IR_MAX_RANK)
        return refuse(p, "GatherND's batch_dims %lld is out of range", (long long)b);
    if (!nd_offsets(p, n->inputs[0], (int)b, &off, &count, &inner))
        return 0;
    int ok = inner.bad ? refuse(p, "GatherND's rows are too large") : poly_is_zero(inner) ? 1
             : nd_runs(p, off, count, inner, n->outputs[0], n->inputs[0], 0, CG_MOVE_COPY);
    free(off);
    return ok;
}

static int plan_scatter_nd(plan *p)
{
    const ir_graph *g = p->g;
    const ir_node *n = p->n;
    char red = ir_scatter_nd_reduction(n);
    if (red == '?')
        return refuse(p, "ScatterND's reduction is not one of none, add, mul, max, min");
    cg_move_op op = red == '+' ? CG_MOVE_ADD : red == '*' ? CG_MOVE_MUL : red == '>' ? CG_MOVE_MAX
                    : red == '<' ? CG_MOVE_MIN : CG_MOVE_COPY;
    int xv = n->inputs[0], yv = n->outputs[0];
    cg_poly *off, inner;
    int64_t count;
    if (!nd_offsets(p, xv, 0, &off, &count, &inner))
        return 0;
    cg_poly total = cg_poly_numel(&g->values[yv]);
    int ok = 1;
    if (inner.bad || total.bad)
        ok = refuse(p, "ScatterND's data is too large");
    cg_move *m = ok ? add(p, CG_MOVE_COPY, 1) : NULL; /* the data, then the updates over it */
    if (ok && m) {
        m->dims[0] = total;
        m->dst.value = yv;
        m->src.value = xv;
        m->dst.strides[0] = m->src.strides[0] = cg_poly_k(1);
    }
    ok = ok && m && (poly_is_zero(inner) || nd_runs(p, off, count, inner, n->inputs[2], yv, 1, op));
    free(off);
    return ok;
}

int cg_moves_plan(const ir_graph *g, const ir_node *n, cg_moves *mv, char *why, size_t len)
{
    memset(mv, 0, sizeof *mv);
    plan p = {g, n, mv, why, len};
    int ok = 0;
    if (n->ninputs < 1 || n->noutputs < 1 || n->inputs[0] < 0 || n->outputs[0] < 0 ||
        g->values[n->inputs[0]].rank < 0 || g->values[n->outputs[0]].rank < 0)
        ok = refuse(&p, "%s has no inferred shapes", ir_op_name(n->op));
    else if (n->op == IR_OP_PAD)
        ok = plan_pad(&p);
    else if (n->op == IR_OP_TILE)
        ok = plan_tile(&p);
    else if (n->op == IR_OP_GATHER_ND)
        ok = plan_gather_nd(&p);
    else if (n->op == IR_OP_SCATTER_ND)
        ok = plan_scatter_nd(&p);
    else
        ok = refuse(&p, "%s is not planned as moves", ir_op_name(n->op));
    for (int i = 0; ok && i < mv->n; i++) {
        cg_move *m = &mv->m[i];
        int bad = m->dst.base.bad || m->src.base.bad;
        for (int k = 0; k < m->rank; k++)
            bad |= m->dims[k].bad || m->dst.strides[k].bad || m->src.strides[k].bad;
        if (bad)
            ok = refuse(&p, "%s's sizes overflow or grow faster than B^%d", ir_op_name(n->op), CG_POLY_DEG);
    }
    if (!ok)
        cg_moves_free(mv);
    return ok;
}
