/* memplan.c: activation memory planning by liveness (see memplan.h).
 *
 * Buffers are intervals in time (node indices) with a size; two buffers whose
 * intervals intersect must not share bytes.  Placing the biggest first, each
 * buffer goes at the lowest aligned offset that fits between the buffers
 * already placed that are alive at the same time.  This is the classic greedy
 * for the offline dynamic storage allocation problem; on transformer graphs,
 * where the same few shapes repeat layer after layer, it lands at or near the
 * peak of live memory.  The same greedy with the largest size x lifetime
 * first is tried too, and the smaller of the two plans kept. */
#include "passes/memplan.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t size, start, end, offset;
    int id; /* value index, or -(node + 1) for a node's scratch */
} buf;

static int by_size_desc(const void *pa, const void *pb)
{
    const buf *a = pa, *b = pb;
    if (a->size != b->size)
        return a->size > b->size ? -1 : 1;
    if (a->start != b->start)
        return a->start < b->start ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

/* The largest size x lifetime (in nodes) first. */
static int by_area(const void *pa, const void *pb)
{
    const buf *a = pa, *b = pb;
    double x = (double)a->size * (double)(a->end - a->start + 1), y = (double)b->size * (double)(b->end - b->start + 1);
    if (x != y)
        return x > y ? -1 : 1;
    return by_size_desc(pa, pb);
}

static int by_offset(const void *pa, const void *pb)
{
    const buf *a = *(const buf *const *)pa, *b = *(const buf *const *)pb;
    return a->offset < b->offset ? -1 : a->offset > b->offset;
}

static int64_t align_up(int64_t x) { return (x + PASS_MEMPLAN_ALIGN - 1) / PASS_MEMPLAN_ALIGN * PASS_MEMPLAN_ALIGN; }

/* The value whose storage v shares, following chains of views. */
static int root_of(const pass_memplan_req *r, int nv, int v)
{
    for (int hops = 0; r->alias_of && v >= 0 && v < nv && r->alias_of[v] >= 0 && hops < nv; hops++)
        v = r->alias_of[v];
    return v;
}

/* Bytes of v at the largest batch with pad elements after each row of its
 * last dimension, rounded up to the alignment; -1 on overflow. */
static int64_t value_bytes(const ir_value *v, int64_t batch, int pad)
{
    int64_t n = ir_value_numel(v, batch), bytes;
    if (n >= 0 && pad > 0 && v->rank >= 1) {
        int64_t last = ir_dim_eval(v->dims[v->rank - 1], batch);
        if (last > 0 && ir_mul_ovf(n / last, last + pad, &n))
            return -1;
    }
    if (n < 0 || ir_mul_ovf(n, (int64_t)ir_dtype_size(v->dtype), &bytes) || bytes > INT64_MAX / 2)
        return -1;
    return align_up(bytes);
}

/* First-fit: the lowest offset where b fits between the placed buffers that
 * are alive with it (live[], sorted by offset). */
static int64_t first_fit(const buf *b, buf **live, int nlive)
{
    int64_t off = 0;
    for (int i = 0; i < nlive; i++) {
        if (live[i]->offset >= off + b->size)
            break;
        int64_t end = live[i]->offset + live[i]->size;
        if (end > off)
            off = end;
    }
    return off;
}

/* Places bufs[0..nb) in their order, each first-fit among the buffers
 * placed before it that are alive with it; returns the bytes spanned. */
static uint64_t place(buf *bufs, int nb, buf **live)
{
    uint64_t total = 0;
    for (int i = 0; i < nb; i++) {
        int nlive = 0;
        for (int j = 0; j < i; j++)
            if (bufs[j].start <= bufs[i].end && bufs[i].start <= bufs[j].end)
                live[nlive++] = &bufs[j];
        qsort(live, (size_t)nlive, sizeof *live, by_offset);
        bufs[i].offset = first_fit(&bufs[i], live, nlive);
        uint64_t end = (uint64_t)bufs[i].offset + (uint64_t)bufs[i].size;
        total = end > total ? end : total;
    }
    return total;
}

/* Values computed in place (req->reuse), in order of their start: value v
 * takes over the buffer of u = reuse[v] (through views: u's root) when that
 * buffer is as large as v's and its last reader is v's producer, and the
 * buffer then lives to v's end.  A chain (x1 -> x2 -> x3, the residual stream
 * of a transformer) ends up in x1's buffer.  Returns the buffers left; owner[v]
 * is the value whose buffer v took over.  The buffers left are compacted, so
 * slot[] no longer indexes them afterwards. */
static int take_over(const pass_memplan_req *req, int nv, buf *bufs, int nb, int *slot, int *owner)
{
    if (!req->reuse)
        return nb;
    int *order = malloc(sizeof(int) * ((size_t)nb + 1)), n = 0;
    if (!order)
        return nb; /* no reuse: a correct plan all the same */
    for (int i = 0; i < nb; i++)
        if (bufs[i].id >= 0 && req->reuse[bufs[i].id] >= 0)
            order[n++] = i;
    for (int a = 1; a < n; a++) /* by start (insertion: few of them) */
        for (int b = a; b > 0 && bufs[order[b]].start < bufs[order[b - 1]].start; b--) {
            int t = order[b];
            order[b] = order[b - 1];
            order[b - 1] = t;
        }
    for (int j = 0; j < n; j++) {
        buf *v = &bufs[order[j]];
        int u = root_of(req, nv, req->reuse[v->id]);
        int su = u >= 0 && u < nv && u != v->id ? slot[u] : -1;
        if (su < 0 || bufs[su].size != v->size || bufs[su].end != v->start)
            continue;
        bufs[su].end = v->end > bufs[su].end ? v->end : bufs[su].end;
        owner[v->id] = bufs[su].id;
        slot[v->id] = su;
        v->size = -1; /* dropped below */
    }
    free(order);
    int kept = 0;
    for (int i = 0; i < nb; i++)
        if (bufs[i].size >= 0)
            bufs[kept++] = bufs[i];
    return kept;
}

int pass_memplan(const ir_graph *g, const pass_memplan_req *req, pass_memplan_result *out, vitc_diag *d)
{
    memset(out, 0, sizeof *out);
    int nv = g->nvalues, nn = g->nnodes;
    out->offset = malloc(sizeof(int64_t) * ((size_t)nv + 1));
    out->scratch_offset = malloc(sizeof(int64_t) * ((size_t)nn + 1));
    buf *bufs = malloc(sizeof(buf) * ((size_t)nv + (size_t)nn + 1));
    buf *saved = malloc(sizeof(buf) * ((size_t)nv + (size_t)nn + 1));
    buf **live = malloc(sizeof(buf *) * ((size_t)nv + (size_t)nn + 1));
    int *slot = malloc(sizeof(int) * ((size_t)nv + 1)); /* value -> its entry in bufs */
    int *owner = malloc(sizeof(int) * ((size_t)nv + 1)); /* value -> the value whose buffer it took over, or -1 */
    if (!out->offset || !out->scratch_offset || !bufs || !saved || !live || !slot || !owner) {
        free(bufs), free(saved), free(live), free(slot), free(owner);
        pass_memplan_free(out);
        return vitc_error(d, VITC_INTERNAL, NULL, "out of memory planning the workspace");
    }
    int nb = 0, st = VITC_OK;
    for (int v = 0; v < nv; v++) {
        out->offset[v] = -1;
        slot[v] = -1;
        owner[v] = -1;
        if (!req->in_workspace[v] || root_of(req, nv, v) != v)
            continue;
        const ir_value *val = &g->values[v];
        int64_t size = value_bytes(val, req->max_batch, req->row_pad ? req->row_pad[v] : 0);
        if (size < 0) {
            st = vitc_error(d, VITC_BAD_INPUT, val->producer >= 0 ? &g->nodes[val->producer] : NULL,
                            "the size of '%s' at batch %lld overflows", val->name, (long long)req->max_batch);
            break;
        }
        int p = val->producer >= 0 && val->producer < nn ? val->producer : 0;
        int64_t t = req->runs_at ? req->runs_at[p] : p;
        bufs[nb] = (buf){.size = size, .start = t, .end = t, .offset = 0, .id = v};
        slot[v] = nb++;
    }
    /* Lifetimes: extend each buffer to its last reader, through views. */
    for (int i = 0; i < nn && st == VITC_OK; i++) {
        const ir_node *n = &g->nodes[i];
        int64_t t = req->runs_at ? req->runs_at[i] : i;
        for (int k = 0; k < n->ninputs; k++) {
            int r = root_of(req, nv, n->inputs[k]);
            if (r >= 0 && r < nv && slot[r] >= 0 && bufs[slot[r]].end < t)
                bufs[slot[r]].end = t;
        }
    }
    for (int k = 0; k < g->noutputs; k++) {
        int r = root_of(req, nv, g->outputs[k]);
        if (r >= 0 && r < nv && slot[r] >= 0)
            bufs[slot[r]].end = nn;
    }
    if (st == VITC_OK)
        nb = take_over(req, nv, bufs, nb, slot, owner);
    for (int i = 0; i < nn; i++) {
        out->scratch_offset[i] = -1;
        if (req->scratch && req->scratch[i] > 0) {
            if (req->scratch[i] > INT64_MAX / 4) {
                st = vitc_error(d, VITC_BAD_INPUT, &g->nodes[i], "its scratch memory size overflows");
                break;
            }
            bufs[nb++] = (buf){.size = align_up(req->scratch[i]), .start = i, .end = i, .id = -(i + 1)};
        }
    }
    if (st != VITC_OK) {
        free(bufs), free(saved), free(live), free(slot), free(owner);
        pass_memplan_free(out);
        return st;
    }

    /* Two orders, the smaller workspace kept: biggest first is near the peak
     * of live memory on most graphs, but a size that differs by a little
     * from its neighbours' can cost it a whole buffer (ViT-B's fc1 output
     * with padded rows, 0.5% larger than a qkv and a 768-wide tensor
     * together: 67.8 MB at batch 16 where the peak of live memory is 58.3);
     * size x lifetime first lands at 58.3 there (and by start time, 68.0). */
    uint64_t total = UINT64_MAX, sum = 0;
    int (*const orders[2])(const void *, const void *) = {by_area, by_size_desc};
    for (int o = 0; o < 2; o++) {
        qsort(bufs, (size_t)nb, sizeof *bufs, orders[o]);
        uint64_t t = place(bufs, nb, live);
        if (t > total) /* a tie keeps the later: biggest first */
            continue;
        total = t;
        for (int i = 0; i < nb; i++)
            saved[i] = bufs[i];
    }
    for (int i = 0; i < nb; i++) {
        bufs[i] = saved[i];
        sum += (uint64_t)bufs[i].size;
    }
    for (int i = 0; i < nb; i++) {
        if (bufs[i].id >= 0)
            out->offset[bufs[i].id] = bufs[i].offset;
        else
            out->scratch_offset[-bufs[i].id - 1] = bufs[i].offset;
    }
    for (int v = 0; v < nv; v++) /* a value computed in place reports the buffer it took over */
        if (owner[v] >= 0)
            out->offset[v] = out->offset[owner[v]];
    for (int v = 0; v < nv; v++) { /* views report their root's buffer */
        int r = root_of(req, nv, v);
        if (r != v && r >= 0 && r < nv)
            out->offset[v] = out->offset[r];
    }
    out->total = total;
    out->unplanned = sum;
    out->nbuffers = nb;
    free(bufs), free(saved), free(live), free(slot), free(owner);
    return VITC_OK;
}

void pass_memplan_free(pass_memplan_result *r)
{
    free(r->offset);
    free(r->scratch_offset);
    r->offset = r->scratch_offset = NULL;
}
