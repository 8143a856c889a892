/* explain.c: the record behind --explain-fusion.
 *
 * The rewrite driver (apply.c) calls rw_hit() when a rule fused and
 * rw_miss() with the first condition that failed when a candidate did not
 * (what the rule's match function said).  The pipeline makes one
 * collector active around each pass; without one both calls do nothing.  A
 * candidate is kept once per (pass, anchor node) with its latest reason, and
 * dropped when its anchor node has left the graph (a later rewrite fused it
 * after all).  The active collector is per thread, so pipelines may run
 * in several threads at once.  After the last pass, rw_explain_leftovers
 * records every op a fusion exists for that is still outside a fused op,
 * with the candidate at it or nearest above or below it that did not fuse. */
#include "passes/rewrite.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *pass;
    ir_op op;
    char *node, *op_type, *reason;
} miss;

enum { MAX_PASSES = 64 };

/* An op a fusion takes (LEFT_OPS) still outside a fused op after the
 * passes, with what explains it. */
typedef struct {
    char *node, *op_type, *why;
} leftover;

struct pass_explain {
    miss *miss;
    int nmiss, cap;
    const char *pass[MAX_PASSES]; /* passes in the order they ran, with their fused counts */
    int fused[MAX_PASSES];
    int npass;
    leftover *left;
    int nleft, left_done; /* left_done: rw_explain_leftovers ran (the pipeline finished) */
};

/* The ops a fusion exists for, which a fully fused ViT has none of outside
 * its fused ops. */
static const ir_op LEFT_OPS[] = {IR_OP_SOFTMAX, IR_OP_SIGMOID, IR_OP_POW,    IR_OP_SQRT,
                                 IR_OP_RECIPROCAL, IR_OP_MATMUL, IR_OP_ERF};
enum { LEFT_NOTE_DEPTH = 6 }; /* how far above or below a leftover a candidate that did not fuse explains it */

static _Thread_local pass_explain *active; /* one pipeline run per thread at a time */
static _Thread_local int active_pass = -1;

pass_explain *pass_explain_new(void) { return calloc(1, sizeof(pass_explain)); }

static void miss_free(miss *m)
{
    free(m->node);
    free(m->op_type);
    free(m->reason);
}

void pass_explain_free(pass_explain *e)
{
    if (!e)
        return;
    for (int i = 0; i < e->nmiss; i++)
        miss_free(&e->miss[i]);
    free(e->miss);
    for (int i = 0; i < e->nleft; i++) {
        free(e->left[i].node);
        free(e->left[i].op_type);
        free(e->left[i].why);
    }
    free(e->left);
    free(e);
}

int pass_explain_misses(const pass_explain *e) { return e ? e->nmiss : 0; }

void rw_explain_begin(pass_explain *e, const char *pass)
{
    active = e;
    active_pass = -1;
    if (!e)
        return;
    for (int i = 0; i < e->npass; i++)
        if (strcmp(e->pass[i], pass) == 0)
            active_pass = i;
    if (active_pass < 0 && e->npass < MAX_PASSES) {
        active_pass = e->npass++;
        e->pass[active_pass] = pass;
        e->fused[active_pass] = 0;
    }
}

static int node_present(const ir_graph *g, const miss *m)
{
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *n = &g->nodes[i];
        if (n->op == m->op && strcmp(n->name, m->node) == 0 && strcmp(n->op_type, m->op_type) == 0)
            return 1;
    }
    return 0;
}

void rw_explain_end(const ir_graph *g)
{
    pass_explain *e = active;
    active = NULL;
    active_pass = -1;
    if (!e)
        return;
    int w = 0;
    for (int i = 0; i < e->nmiss; i++) {
        if (node_present(g, &e->miss[i]))
            e->miss[w++] = e->miss[i];
        else
            miss_free(&e->miss[i]);
    }
    e->nmiss = w;
}

void rw_hit(void)
{
    if (active && active_pass >= 0)
        active->fused[active_pass]++;
}

void rw_miss(const ir_graph *g, const ir_node *n, const char *fmt, ...)
{
    (void)g;
    pass_explain *e = active;
    if (!e || !n || active_pass < 0)
        return;
    char reason[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    const char *pass = e->pass[active_pass];
    miss *m = NULL;
    for (int i = 0; i < e->nmiss && !m; i++)
        if (e->miss[i].pass == pass && e->miss[i].op == n->op && strcmp(e->miss[i].node, n->name) == 0 &&
            strcmp(e->miss[i].op_type, n->op_type) == 0)
            m = &e->miss[i];
    if (m) {
        char *r = strdup(reason);
        if (r) {
            free(m->reason);
            m->reason = r;
        }
        return;
    }
    if (e->nmiss == e->cap) {
        int cap = e->cap ? 2 * e->cap : 16;
        miss *p = realloc(e->miss, sizeof(miss) * (size_t)cap);
        if (!p)
            return; /* the record is best effort; the compilation goes on */
        e->miss = p;
        e->cap = cap;
    }
    m = &e->miss[e->nmiss];
    m->pass = pass;
    m->op = n->op;
    m->node = strdup(n->name);
    m->op_type = strdup(n->op_type);
    m->reason = strdup(reason);
    if (!m->node || !m->op_type || !m->reason) {
        miss_free(m);
        return;
    }
    e->nmiss++;
}

static int is_left_op(ir_op op)
{
    for (size_t i = 0; i < sizeof LEFT_OPS / sizeof LEFT_OPS[0]; i++)
        if (LEFT_OPS[i] == op)
            return 1;
    return 0;
}

/* The graph's node a miss was recorded at, or -1. */
static int miss_node(const ir_graph *g, const miss *m)
{
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *n = &g->nodes[i];
        if (n->op == m->op && strcmp(n->name, m->node) == 0 && strcmp(n->op_type, m->op_type) == 0)
            return i;
    }
    return -1;
}

/* The nearest node with a miss from `at`, walking only up (what it reads,
 * and what that reads, ...) or only down (what reads it, ...), at most
 * LEFT_NOTE_DEPTH nodes; -1 if none.  *dist gets the distance.  seen, queue:
 * g->nnodes ints each; reader, nreader: the readers of each value. */
static int nearest_miss(const ir_graph *g, const int *at_miss, int at, int down, int *seen, int *queue,
                        const int *const *reader, const int *nreader, int *dist)
{
    for (int i = 0; i < g->nnodes; i++)
        seen[i] = -1;
    int head = 0, tail = 0;
    seen[at] = 0;
    queue[tail++] = at;
    while (head < tail) {
        int i = queue[head++];
        if (i != at && at_miss[i] >= 0) {
            *dist = seen[i];
            return i;
        }
        if (seen[i] == LEFT_NOTE_DEPTH)
            continue;
        const ir_node *nd = &g->nodes[i];
        if (!down) {
            for (int k = 0; k < nd->ninputs; k++) {
                int v = nd->inputs[k], p = v >= 0 ? g->values[v].producer : -1;
                if (p >= 0 && seen[p] < 0) {
                    seen[p] = seen[i] + 1;
                    queue[tail++] = p;
                }
            }
            continue;
        }
        for (int k = 0; k < nd->noutputs; k++) {
            int v = nd->outputs[k];
            for (int r = 0; v >= 0 && r < nreader[v]; r++)
                if (seen[reader[v][r]] < 0) {
                    seen[reader[v][r]] = seen[i] + 1;
                    queue[tail++] = reader[v][r];
                }
        }
    }
    return -1;
}

/* What explains leftover node `at`: a candidate that did not fuse at it,
 * else the nearest one within LEFT_NOTE_DEPTH nodes above it (a norm's
 * anchor above its Pow and Sqrt) or below it (a Softmax below the scores'
 * MatMul), else nothing a rule took. */
static void explain_leftover(const pass_explain *e, const ir_graph *g, const int *at_miss, int at, int *seen,
                             int *queue, const int *const *reader, const int *nreader, char *why, size_t n)
{
    if (at_miss[at] >= 0) {
        const miss *m = &e->miss[at_miss[at]];
        snprintf(why, n, "%s did not fuse it: %s", m->pass, m->reason);
        return;
    }
    int up_dist = 0, down_dist = 0;
    int up = nearest_miss(g, at_miss, at, 0, seen, queue, reader, nreader, &up_dist);
    int down = nearest_miss(g, at_miss, at, 1, seen, queue, reader, nreader, &down_dist);
    int below = up >= 0 && (down < 0 || up_dist <= down_dist); /* the leftover below the candidate */
    int i = below ? up : down, dist = below ? up_dist : down_dist;
    if (i < 0) {
        snprintf(why, n, "no fusion took it as a candidate");
        return;
    }
    const miss *m = &e->miss[at_miss[i]];
    snprintf(why, n, "%d node%s %s node '%s' (%s), which %s did not fuse: %s", dist, dist == 1 ? "" : "s",
             below ? "below" : "above", m->node, m->op_type, m->pass, m->reason);
}

void rw_explain_leftovers(pass_explain *e, const ir_graph *g)
{
    if (!e)
        return;
    for (int i = 0; i < e->nleft; i++) { /* a record of an earlier run replaced */
        free(e->left[i].node);
        free(e->left[i].op_type);
        free(e->left[i].why);
    }
    e->nleft = 0;
    e->left_done = 1;
    int nn = g->nnodes, nv = g->nvalues;
    int *at_miss = malloc(sizeof(int) * ((size_t)nn + 1)), *dist = malloc(sizeof(int) * ((size_t)nn + 1)),
        *queue = malloc(sizeof(int) * ((size_t)nn + 1)), *nreader = calloc((size_t)nv + 1, sizeof(int)),
        **reader = calloc((size_t)nv + 1, sizeof(int *));
    if (!at_miss || !dist || !queue || !nreader || !reader)
        goto done; /* best effort, as the record is */
    for (int i = 0; i < nn; i++)
        at_miss[i] = -1;
    for (int i = 0; i < e->nmiss; i++) {
        int k = miss_node(g, &e->miss[i]);
        if (k >= 0 && at_miss[k] < 0)
            at_miss[k] = i;
    }
    for (int i = 0; i < nn; i++)
        for (int k = 0; k < g->nodes[i].ninputs; k++)
            if (g->nodes[i].inputs[k] >= 0)
                nreader[g->nodes[i].inputs[k]]++;
    for (int v = 0; v < nv; v++)
        if (nreader[v] && !(reader[v] = malloc(sizeof(int) * (size_t)nreader[v])))
            goto done;
    memset(nreader, 0, sizeof(int) * (size_t)nv);
    for (int i = 0; i < nn; i++)
        for (int k = 0; k < g->nodes[i].ninputs; k++) {
            int v = g->nodes[i].inputs[k];
            if (v >= 0 && (k == 0 || g->nodes[i].inputs[k - 1] != v))
                reader[v][nreader[v]++] = i;
        }
    for (int i = 0; i < nn; i++) {
        const ir_node *n = &g->nodes[i];
        if (!is_left_op(n->op))
            continue;
        leftover *l = realloc(e->left, sizeof *l * ((size_t)e->nleft + 1));
        if (!l)
            break;
        e->left = l;
        char why[768];
        explain_leftover(e, g, at_miss, i, dist, queue, (const int *const *)reader, nreader, why, sizeof why);
        l = &e->left[e->nleft];
        l->node = strdup(n->name);
        l->op_type = strdup(n->op_type);
        l->why = strdup(why);
        if (!l->node || !l->op_type || !l->why) {
            free(l->node);
            free(l->op_type);
            free(l->why);
            break;
        }
        e->nleft++;
    }
done:
    for (int v = 0; reader && v < nv; v++)
        free(reader[v]);
    free(reader);
    free(nreader);
    free(queue);
    free(dist);
    free(at_miss);
}

void pass_explain_print(const pass_explain *e, FILE *f)
{
    if (!e)
        return;
    for (int i = 0; i < e->npass; i++)
        if (e->fused[i])
            fprintf(f, "%s: %d fused\n", e->pass[i], e->fused[i]);
    fprintf(f, "%d candidate%s did not fuse%s\n", e->nmiss, e->nmiss == 1 ? "" : "s", e->nmiss ? ":" : "");
    for (int p = 0; p < e->npass; p++)
        for (int i = 0; i < e->nmiss; i++)
            if (e->miss[i].pass == e->pass[p])
                fprintf(f, "%s: node '%s' (%s): %s\n", e->miss[i].pass, e->miss[i].node, e->miss[i].op_type,
                        e->miss[i].reason);
    if (!e->left_done)
        return;
    fprintf(f, "%d op%s left outside fused ops (Softmax, Sigmoid, Pow, Sqrt, Reciprocal, MatMul, Erf)%s\n", e->nleft,
            e->nleft == 1 ? "" : "s", e->nleft ? ":" : "");
    for (int i = 0; i < e->nleft; i++)
        fprintf(f, "left over: node '%s' (%s): %s\n", e->left[i].node, e->left[i].op_type, e->left[i].why);
}
