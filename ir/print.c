/* print.c: the IR as a person reads it (text, one node per line), as Graphviz
 * dot, and as op counts.  Text form:
 *
 *   input  input: f32[B,3,32,32]
 *   const  conv.weight: f32[64,3,8,8]
 *   conv_out: f32[B,64,4,4] = Conv(input, conv.weight, conv.bias) strides=[8,8]  # /conv/Conv
 *   output output
 */
#include "ir/ir.h"

#include <stdlib.h>
#include <string.h>

/* Small constants are printed with their values. */
#define PRINT_VALUES_MAX 8

static void print_attr(const ir_graph *g, const ir_attr *a, FILE *f)
{
    fprintf(f, " %s=", ir_attr_name(a->id));
    switch (a->kind) {
    case IR_AT_INT: fprintf(f, "%lld", (long long)a->i); break;
    case IR_AT_FLOAT: fprintf(f, "%g", (double)a->f); break;
    case IR_AT_STRING: fprintf(f, "\"%s\"", a->s); break;
    case IR_AT_TENSOR: {
        char t[256];
        fprintf(f, "%s", ir_value_type_str(&g->values[a->tensor], t, sizeof t));
        break;
    }
    case IR_AT_INTS: case IR_AT_FLOATS:
        fputc('[', f);
        for (int i = 0; i < a->n; i++) {
            if (a->kind == IR_AT_INTS)
                fprintf(f, "%s%lld", i ? "," : "", (long long)a->ints[i]);
            else
                fprintf(f, "%s%g", i ? "," : "", (double)a->floats[i]);
        }
        fputc(']', f);
        break;
    }
}

/* Values of a small constant, e.g. " = [1, 197, 768]". */
static void print_small_const(const ir_value *v, FILE *f)
{
    if (v->kind != IR_VAL_CONST || !v->data || v->rank > 1)
        return;
    if (v->symval) {
        char b[48];
        fputs(v->rank == 1 ? " = [" : " = ", f);
        for (int i = 0; i < v->nsymval; i++)
            fprintf(f, "%s%s", i ? ", " : "", ir_dim_str(v->symval[i], b, sizeof b));
        if (v->rank == 1)
            fputc(']', f);
        return;
    }
    size_t es = ir_dtype_size(v->dtype);
    size_t n = es ? v->nbytes / es : 0;
    if (n == 0 || n > PRINT_VALUES_MAX)
        return;
    ir_tensor t = {.dtype = v->dtype, .rank = 1, .dims = {(int64_t)n}, .data = v->data};
    fputs(" = ", f);
    if (v->rank == 1)
        fputc('[', f);
    for (size_t i = 0; i < n; i++) {
        if (ir_dtype_is_float(v->dtype))
            fprintf(f, "%s%g", i ? ", " : "", ir_tensor_get(&t, (int64_t)i));
        else
            fprintf(f, "%s%lld", i ? ", " : "", (long long)ir_tensor_get_i64(&t, (int64_t)i));
    }
    if (v->rank == 1)
        fputc(']', f);
}

/* Marks the constants some node (or a tensor attribute) uses. */
static unsigned char *used_values(const ir_graph *g)
{
    unsigned char *used = calloc((size_t)g->nvalues + 1, 1);
    if (!used)
        return NULL;
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *n = &g->nodes[i];
        for (int k = 0; k < n->ninputs; k++)
            if (n->inputs[k] >= 0)
                used[n->inputs[k]] = 1;
    }
    for (int i = 0; i < g->noutputs; i++)
        if (g->outputs[i] >= 0)
            used[g->outputs[i]] = 1;
    return used;
}

void ir_print_text(const ir_graph *g, FILE *f) { ir_print_text_with(g, f, NULL); }

void ir_print_text_with(const ir_graph *g, FILE *f, const ir_print_extra *x)
{
    char t[256];
    int nconst = 0;
    unsigned char *used = used_values(g);
    for (int i = 0; i < g->nvalues; i++)
        nconst += g->values[i].kind == IR_VAL_CONST && (!used || used[i]);
    fprintf(f, "graph %s  opset %lld  %d nodes  %d constants%s%s\n", g->path, (long long)g->opset, g->nnodes, nconst,
            x && x->note ? "  " : "", x && x->note ? x->note : "");
    for (int i = 0; i < g->ninputs; i++) {
        const ir_value *v = &g->values[g->inputs[i]];
        fprintf(f, "input  %s: %s\n", v->name, ir_value_type_str(v, t, sizeof t));
    }
    for (int i = 0; i < g->nvalues; i++) {
        const ir_value *v = &g->values[i];
        if (v->kind != IR_VAL_CONST || (used && !used[i]))
            continue;
        fprintf(f, "const  %s: %s", v->name, ir_value_type_str(v, t, sizeof t));
        print_small_const(v, f);
        fputc('\n', f);
    }
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *n = &g->nodes[i];
        if (x && x->before)
            x->before(x->ctx, i, f);
        for (int k = 0; k < n->noutputs; k++) {
            if (k)
                fputs(", ", f);
            if (n->outputs[k] < 0) {
                fputs("_", f);
                continue;
            }
            const ir_value *v = &g->values[n->outputs[k]];
            fprintf(f, "%s: %s", v->name, ir_value_type_str(v, t, sizeof t));
        }
        fprintf(f, " = %s(", ir_op_name(n->op));
        for (int k = 0; k < n->ninputs; k++)
            fprintf(f, "%s%s", k ? ", " : "", n->inputs[k] >= 0 ? g->values[n->inputs[k]].name : "_");
        fputc(')', f);
        for (int k = 0; k < n->nattrs; k++)
            print_attr(g, &n->attrs[k], f);
        if (strcmp(n->op_type, ir_op_name(n->op)) != 0)
            fprintf(f, "  # %s (%s)", *n->name ? n->name : "<unnamed>", n->op_type);
        else if (*n->name)
            fprintf(f, "  # %s", n->name);
        fputc('\n', f);
    }
    if (x && x->before)
        x->before(x->ctx, g->nnodes, f);
    for (int i = 0; i < g->noutputs; i++)
        fprintf(f, "output %s\n", g->outputs[i] >= 0 ? g->values[g->outputs[i]].name : "?");
    free(used);
}

/* Writes s as the inside of a dot string literal. */
static void dot_escape(const char *s, FILE *f)
{
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fputc('\\', f);
        if ((unsigned char)*s >= 0x20)
            fputc(*s, f);
    }
}

/* Nodes are boxes labelled with the op, their weights and their ONNX name;
 * edges carry the tensor's type.  Constants appear inside the node that uses
 * them rather than as nodes of their own, to keep a ViT's picture readable. */
void ir_print_dot(const ir_graph *g, FILE *f) { ir_print_dot_with(g, f, NULL); }

void ir_print_dot_with(const ir_graph *g, FILE *f, const ir_print_extra *x)
{
    char t[256];
    fputs("digraph vitc {\n  rankdir=TB;\n  node [shape=box, fontname=\"monospace\", fontsize=10];\n"
          "  edge [fontname=\"monospace\", fontsize=9];\n", f);
    for (int i = 0; i < g->ninputs; i++) {
        const ir_value *v = &g->values[g->inputs[i]];
        fprintf(f, "  v%d [shape=ellipse, label=\"", g->inputs[i]);
        dot_escape(v->name, f);
        fprintf(f, "\\n%s\"];\n", ir_value_type_str(v, t, sizeof t));
    }
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *n = &g->nodes[i];
        fprintf(f, "  n%d [label=\"%s", i, ir_op_name(n->op));
        for (int k = 0; k < n->ninputs; k++) {
            int v = n->inputs[k];
            if (v >= 0 && g->values[v].kind == IR_VAL_CONST) {
                fputs("\\n", f);
                dot_escape(g->values[v].name, f);
                fprintf(f, ": %s", ir_value_type_str(&g->values[v], t, sizeof t));
            }
        }
        if (*n->name) {
            fputs("\\n# ", f);
            dot_escape(n->name, f);
        }
        fputs("\"];\n", f);
        for (int k = 0; k < n->ninputs; k++) {
            int v = n->inputs[k];
            if (v < 0 || g->values[v].kind == IR_VAL_CONST)
                continue;
            int p = g->values[v].producer;
            fprintf(f, "  %s%d -> n%d [label=\"%s\"];\n", p >= 0 ? "n" : "v", p >= 0 ? p : v, i,
                    ir_value_type_str(&g->values[v], t, sizeof t));
        }
    }
    for (int i = 0; i < g->noutputs; i++) {
        int v = g->outputs[i];
        if (v < 0)
            continue;
        fprintf(f, "  out%d [shape=ellipse, label=\"", i);
        dot_escape(g->values[v].name, f);
        fputs("\"];\n", f);
        int p = g->values[v].producer;
        fprintf(f, "  %s%d -> out%d [label=\"%s\"];\n", p >= 0 ? "n" : "v", p >= 0 ? p : v, i,
                ir_value_type_str(&g->values[v], t, sizeof t));
    }
    if (x && x->before)
        x->before(x->ctx, g->nnodes, f);
    fputs("}\n", f);
}

static int cmp_op_name(const void *a, const void *b)
{
    return strcmp(ir_op_name(*(const ir_op *)a), ir_op_name(*(const ir_op *)b));
}

void ir_print_stats(const ir_graph *g, FILE *f)
{
    int count[IR_OP_COUNT] = {0};
    ir_op order[IR_OP_COUNT];
    for (int i = 0; i < g->nnodes; i++)
        count[g->nodes[i].op]++;
    for (int i = 0; i < IR_OP_COUNT; i++)
        order[i] = (ir_op)i;
    qsort(order, IR_OP_COUNT, sizeof order[0], cmp_op_name);
    for (int i = 0; i < IR_OP_COUNT; i++)
        if (count[order[i]])
            fprintf(f, "%s %d\n", ir_op_name(order[i]), count[order[i]]);
}
