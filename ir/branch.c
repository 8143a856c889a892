/* branch.c: the branches of If nodes.  The importer reads both branches of
 * an If into the graph's branches (ir.h: ir_branch); shape inference, once
 * it knows the condition, replaces the If by the nodes of the branch it
 * picks (ir_inline_if), so that nothing after it sees an If, and the branch
 * not taken is never inferred (it may be invalid for these shapes).  The
 * nodes are appended, and shape inference links them in the If's place: an
 * If costs the size of its branch, not of the graph. */
#include "ir/ir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ir_add_branch(ir_graph *g, const ir_branch *b)
{
    if (g->nbranches == g->cap_branches) {
        int cap = g->cap_branches ? 2 * g->cap_branches : 8;
        if (cap > (1 << 20))
            return -1;
        ir_branch *nb = ir_alloc_array(g->arena, (size_t)cap, sizeof *nb);
        if (!nb)
            return -1;
        if (g->nbranches)
            memcpy(nb, g->branches, sizeof *nb * (size_t)g->nbranches);
        g->branches = nb;
        g->cap_branches = cap;
    }
    g->branches[g->nbranches] = *b;
    return g->nbranches++;
}

/* ---- the graph's value names, kept across inlinings (open addressing in
 * the arena; it doubles when half full) ---- */
typedef struct ir_name_set {
    const char **slots;
    size_t cap, count;
    int seen;       /* values [0, seen) are in it */
    long suffix;    /* the last number a taken name was given */
} name_set;

/* 1 if s holds name; else inserts it (by pointer) when insert is set. */
static int set_has(name_set *s, const char *name, int insert)
{
    size_t i = ir_str_hash(name) & (s->cap - 1);
    for (; s->slots[i]; i = (i + 1) & (s->cap - 1))
        if (strcmp(s->slots[i], name) == 0)
            return 1;
    if (insert) {
        s->slots[i] = name;
        s->count++;
    }
    return 0;
}

/* Room for `more` names in s, from g's arena; -1 when out of memory. */
static int set_reserve(ir_graph *g, name_set *s, size_t more)
{
    if (2 * (s->count + more) + 16 <= s->cap)
        return 0;
    size_t cap = s->cap ? s->cap : 64;
    while (cap < 2 * (s->count + more) + 16)
        cap *= 2;
    name_set big = {ir_alloc_array(g->arena, cap, sizeof(char *)), cap, 0, s->seen, s->suffix};
    if (!big.slots)
        return -1;
    for (size_t i = 0; i < s->cap; i++)
        if (s->slots[i])
            set_has(&big, s->slots[i], 1);
    *s = big;
    return 0;
}

/* g's value names, with room for `more`: the names of the values added
 * since the last call joined to them.  NULL when out of memory. */
static name_set *value_names(ir_graph *g, size_t more)
{
    name_set *s = g->value_names;
    if (!s && !(s = g->value_names = ir_alloc(g->arena, sizeof *s)))
        return NULL;
    if (set_reserve(g, s, (size_t)(g->nvalues - s->seen) + more))
        return NULL;
    for (; s->seen < g->nvalues; s->seen++)
        set_has(s, g->values[s->seen].name, 1);
    return s;
}

/* A value for a local of a branch: named as the model names it, or with
 * _N appended where that name is taken (N counts up over the graph's
 * inlinings, so that finding a free name stays cheap); -1 when out of memory. */
static int new_local_value(ir_graph *g, name_set *names, const char *base)
{
    size_t len = strlen(base) + 24;
    char *name = malloc(len);
    if (!name)
        return -1;
    snprintf(name, len, "%s", base);
    while (set_has(names, name, 0))
        snprintf(name, len, "%s_%ld", base, ++names->suffix);
    int id = ir_add_value(g, name, IR_VAL_NODE, IR_F32);
    free(name);
    if (id >= 0) {
        set_has(names, g->values[id].name, 1);
        names->seen = g->nvalues;
    }
    return id;
}

/* Reference r of branch b as a value of g (val: the values of b's locals);
 * -2 when r is no reference b can hold. */
static int resolve(const ir_graph *g, const ir_branch *b, const int *val, int r)
{
    if (r == -1)
        return -1;
    if (r >= 0)
        return r < g->nvalues ? r : -2;
    int j = IR_BRANCH_LOCAL(r);
    return j < b->nlocals ? val[j] : -2;
}

int ir_inline_if(ir_graph *g, int i, int take_then, int *first, vitc_diag *d)
{
    ir_node n = g->nodes[i]; /* a copy: appending moves the node array */
    const char *which = take_then ? "then_branch" : "else_branch";
    int bi = (int)ir_attr_int(&n, take_then ? IR_ATTR_THEN_BRANCH : IR_ATTR_ELSE_BRANCH, -1);
    *first = g->nnodes;
    if (n.op != IR_OP_IF || bi < 0 || bi >= g->nbranches)
        return vitc_error(d, VITC_INTERNAL, &g->nodes[i], "is not an If with a %s", which);
    ir_branch b = g->branches[bi];
    if (b.noutputs != n.noutputs || b.capture_base < 0 || b.ncaptures < 0 ||
        (int64_t)1 + b.capture_base + b.ncaptures > n.ninputs || b.nnodes < 0 || b.nlocals < 0)
        return vitc_error(d, VITC_INTERNAL, &g->nodes[i], "its %s does not fit the node", which);
    if ((int64_t)g->nnodes + b.nnodes + n.noutputs > (1 << 28))
        return vitc_error(d, VITC_BAD_INPUT, &g->nodes[i], "its %s makes the graph too big", which);
    int *val = malloc(sizeof(int) * ((size_t)b.nlocals + 1)), *io = NULL;
    name_set *names = value_names(g, (size_t)b.nlocals);
    int st = VITC_OK, maxio = 2;
    for (int m = 0; m < b.nnodes; m++)
        maxio = b.nodes[m].ninputs + b.nodes[m].noutputs > maxio ? b.nodes[m].ninputs + b.nodes[m].noutputs : maxio;
    io = malloc(sizeof(int) * (size_t)maxio);
    if (!val || !names || !io) {
        st = vitc_error(d, VITC_INTERNAL, NULL, "out of memory");
        goto out;
    }
    for (int j = 0; j < b.nlocals; j++) {
        int k = b.capture[j];
        if (k >= b.ncaptures) {
            st = vitc_error(d, VITC_INTERNAL, &g->nodes[i], "its %s reads capture %d of %d", which, k, b.ncaptures);
            goto out;
        }
        val[j] = k >= 0 ? n.inputs[1 + b.capture_base + k]
                        : new_local_value(g, names, b.local_names[j] ? b.local_names[j] : "if_value");
        if (k < 0 && val[j] < 0) {
            st = vitc_error(d, VITC_INTERNAL, NULL, "out of memory");
            goto out;
        }
    }
    for (int m = 0; m < b.nnodes && st == VITC_OK; m++) {
        const ir_node *bn = &b.nodes[m];
        int *in = io, *out = io + bn->ninputs;
        for (int k = 0; k < bn->ninputs && st == VITC_OK; k++)
            if ((in[k] = resolve(g, &b, val, bn->inputs[k])) == -2)
                st = vitc_error(d, VITC_INTERNAL, bn, "input %d is no value of its branch", k);
        for (int k = 0; k < bn->noutputs && st == VITC_OK; k++) {
            int r = bn->outputs[k];
            int ok = r == -1 || (r <= -2 && IR_BRANCH_LOCAL(r) < b.nlocals && b.capture[IR_BRANCH_LOCAL(r)] < 0);
            out[k] = ok ? resolve(g, &b, val, r) : -1;
            if (!ok)
                st = vitc_error(d, VITC_INTERNAL, bn, "output %d is no local of its branch", k);
        }
        if (st == VITC_OK && ir_add_node(g, bn->op, bn->name, bn->op_type, bn->ninputs, in, bn->noutputs, out,
                                         bn->nattrs, bn->attrs) < 0)
            st = vitc_error(d, VITC_INTERNAL, NULL, "out of memory");
    }
    for (int k = 0; k < n.noutputs && st == VITC_OK; k++) { /* what the If gives: the branch's outputs */
        if (n.outputs[k] < 0)
            continue;
        int src = resolve(g, &b, val, b.outputs[k]);
        if (src < 0)
            st = vitc_error(d, VITC_INTERNAL, NULL, "output %d of the %s of If '%s' is no value", k, which, n.name);
        else if (ir_add_node(g, IR_OP_IDENTITY, n.name, n.op_type, 1, &src, 1, &n.outputs[k], 0, NULL) < 0)
            st = vitc_error(d, VITC_INTERNAL, NULL, "out of memory");
    }
out:
    free(val);
    free(io);
    return st;
}
