/* apply.c: rw_apply, the one loop that applies rewrite rules (rewrite.h).
 *
 * Every pattern pass is a list of rules; this file owns what they share:
 * the walk over the nodes, the fixed point, the --explain-fusion record (a
 * fusion counted, a near miss on its anchor) and the cleanup after each
 * rewrite, so that every match sees a graph in topological order with its
 * shapes inferred and no dead nodes.  After a rewrite the walk goes on from
 * where it was (what the cleanup moved before that point waits for the next
 * walk), and walks repeat until one fires nothing. */
#include "passes/rewrite.h"

#include <stdlib.h>

enum { MAX_REWRITES = 10000 }; /* a rule set that keeps firing stops here */

/* Tries the rules anchored at node i in order: 1 when one rewrote the graph,
 * 0 when none matched, or a negative status. */
static int apply_at(ir_graph *g, int i, const rw_rule *rules, int nrules, vitc_diag *d)
{
    for (int r = 0; r < nrules; r++) {
        const rw_rule *rule = &rules[r];
        if (rule->anchor != RW_ANY_OP && rule->anchor != g->nodes[i].op)
            continue;
        void *m = calloc(1, rule->size ? rule->size : 1);
        if (!m)
            return -vitc_error(d, VITC_INTERNAL, &g->nodes[i], "out of memory");
        char why[512] = "";
        int hit = rule->match(g, &g->nodes[i], m, why, sizeof why);
        if (hit < 0)
            rw_miss(g, &g->nodes[i], "%s", why);
        if (hit > 0 && rule->rewrite(g, i, m)) {
            free(m);
            return -vitc_error(d, VITC_INTERNAL, &g->nodes[i], "out of memory while rewriting (%s)", rule->name);
        }
        free(m);
        if (hit > 0) {
            if (!rule->canonical)
                rw_hit();
            return 1;
        }
    }
    return 0;
}

int rw_apply(ir_graph *g, const rw_rule *rules, int nrules, vitc_diag *d)
{
    int fired = 1, done = 0;
    while (fired) { /* walks until one from the start fires nothing */
        fired = 0;
        for (int i = 0; i < g->nnodes && done < MAX_REWRITES; i++) {
            int r = apply_at(g, i, rules, nrules, d);
            if (r < 0)
                return -r;
            if (r == 0)
                continue;
            int st = rw_finish(g, d);
            if (st)
                return st;
            fired = 1;
            done++;
            i--; /* the walk goes on where the rewrite was; the next walk sees what it skipped */
        }
    }
    return VITC_OK;
}
