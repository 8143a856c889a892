/* explain.c: the record behind --explain-fusion.
 *
 * The rewrite driver (apply.c) calls rw_hit() when a rule fused and
 * rw_miss() with the first condition that failed when a candidate did not
 * (what the rule's match function said).  The pipeline makes one
 * collector active around each pass; without one both calls do nothing.  A
 * candidate is kept once per (pass, anchor node) with its latest reason, and
 * dropped when its anchor node has left the graph (a later rewrite fused it
 * after all).  The active collector is per thread, so pipelines may run
 * in several threads at once. */
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

struct pass_explain {
    miss *miss;
    int nmiss, cap;
    const char *pass[MAX_PASSES]; /* passes in the order they ran, with their fused counts */
    int fused[MAX_PASSES];
    int npass;
};

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
}
