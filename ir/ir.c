/* ir.c: the graph's building blocks.  Owns the op/dtype/attribute tables, the
 * arena every graph allocates from, diagnostics, symbolic dimensions and the
 * functions that add values and nodes to a graph. */
#include "ir/ir.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- tables ---- */
const ir_op_info ir_op_table[IR_OP_COUNT] = {
#define OP(id, name, mi, ma, mo, mao, fam, fl) [IR_OP_##id] = {name, mi, ma, mo, mao, fam, fl},
#include "ir/ops.def"
#undef OP
};

const ir_ew_info ir_ew_table[IR_OP_COUNT] = {
#define EW(id, in, res, sm, f) [IR_OP_##id] = {1, in, res, sm},
#include "ir/elemwise.def"
#undef EW
};

ir_act ir_gelu_act(const ir_node *n)
{
    if (n->op == IR_OP_QUICK_GELU)
        return IR_ACT_QUICK_GELU;
    const ir_attr *a = ir_attr_get(n, IR_ATTR_APPROXIMATE);
    if (!a)
        return IR_ACT_GELU_ERF;
    if (a->kind != IR_AT_STRING)
        return IR_ACT_NONE;
    return strcmp(a->s, "none") == 0 ? IR_ACT_GELU_ERF : strcmp(a->s, "tanh") == 0 ? IR_ACT_GELU_TANH : IR_ACT_NONE;
}

uint64_t ir_str_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    while (*s)
        h = (h ^ (unsigned char)*s++) * 1099511628211ull;
    return h;
}

const char *ir_act_label(ir_act a)
{
    static const char *const labels[IR_ACT_COUNT] = {
        [IR_ACT_NONE] = "", [IR_ACT_GELU_ERF] = "+Gelu", [IR_ACT_GELU_TANH] = "+Gelu(tanh)",
        [IR_ACT_RELU] = "+Relu", [IR_ACT_RELU6] = "+ReLU6", [IR_ACT_QUICK_GELU] = "+QuickGelu", [IR_ACT_SILU] = "+SiLU",
    };
    return (unsigned)a < IR_ACT_COUNT && labels[a] ? labels[a] : "+?";
}

double ir_act_ref(double x, ir_act a)
{
    switch (a) {
    case IR_ACT_GELU_ERF: return 0.5 * x * (1 + erf(x / sqrt(2)));
    case IR_ACT_GELU_TANH: return 0.5 * x * (1 + tanh(sqrt(2 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
    case IR_ACT_RELU: return x > 0 ? x : 0;
    case IR_ACT_RELU6: return x < 0 ? 0 : x > 6 ? 6 : x;
    case IR_ACT_QUICK_GELU: return x / (1 + exp(-1.702 * x));
    case IR_ACT_SILU: return x / (1 + exp(-x));
    case IR_ACT_NONE: case IR_ACT_COUNT: return x;
    }
    return x;
}

const char *ir_op_name(ir_op op) { return (unsigned)op < IR_OP_COUNT ? ir_op_table[op].name : "?"; }

int ir_op_from_onnx(const char *op_type) { return ir_op_from_onnx_domain(NULL, op_type); }

int ir_op_from_onnx_domain(const char *domain, const char *op_type)
{
    int contrib = domain && *domain && strcmp(domain, "ai.onnx") != 0;
    if (contrib && strcmp(domain, "com.microsoft") != 0)
        return -1;
    for (int i = 0; i < IR_OP_COUNT; i++)
        if (!(ir_op_table[i].flags & OPF_FUSED) && ((ir_op_table[i].flags & OPF_CONTRIB) ? 1 : 0) == contrib &&
            strcmp(ir_op_table[i].name, op_type) == 0)
            return i;
    return -1;
}

static const struct {
    int code;
    size_t size;
    const char *name;
} dtype_table[IR_DTYPE_COUNT] = {
#define DT(id, code, size, name) [IR_##id] = {code, size, name},
#include "ir/dtypes.def"
#undef DT
};

const char *ir_dtype_name(ir_dtype t) { return (unsigned)t < IR_DTYPE_COUNT ? dtype_table[t].name : "?"; }
size_t ir_dtype_size(ir_dtype t) { return (unsigned)t < IR_DTYPE_COUNT ? dtype_table[t].size : 0; }
int ir_dtype_onnx_code(ir_dtype t) { return (unsigned)t < IR_DTYPE_COUNT ? dtype_table[t].code : 0; }

int ir_dtype_from_onnx(int code)
{
    for (int i = 0; i < IR_DTYPE_COUNT; i++)
        if (dtype_table[i].code == code)
            return i;
    return -1;
}

int ir_dtype_is_float(ir_dtype t) { return t == IR_F32 || t == IR_F16 || t == IR_F64 || t == IR_BF16; }

static const char *const attr_names[IR_ATTR_COUNT] = {
#define AT(id, name) [IR_ATTR_##id] = name,
#include "ir/attrs.def"
#undef AT
};

const char *ir_attr_name(ir_attr_id a) { return (unsigned)a < IR_ATTR_COUNT ? attr_names[a] : "?"; }

int ir_attr_from_onnx(const char *name)
{
    for (int i = 0; i < IR_ATTR_COUNT; i++)
        if (strcmp(attr_names[i], name) == 0)
            return i;
    return -1;
}

/* ---- arena: a chain of blocks; big requests get a block of their own ---- */
typedef struct block {
    struct block *next;
    size_t used, size;
    _Alignas(16) unsigned char mem[];
} block;

struct ir_arena {
    block *head;
    void **adopted; /* malloc'ed buffers freed with the arena */
    size_t nadopted, capadopted;
};

enum { ARENA_BLOCK = 1 << 16 };

ir_arena *ir_arena_new(void) { return calloc(1, sizeof(ir_arena)); }

void ir_arena_free(ir_arena *a)
{
    if (!a)
        return;
    for (block *b = a->head, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    for (size_t i = 0; i < a->nadopted; i++)
        free(a->adopted[i]);
    free(a->adopted);
    free(a);
}

int ir_arena_adopt(ir_arena *a, void *p)
{
    if (a->nadopted == a->capadopted) {
        size_t cap = a->capadopted ? 2 * a->capadopted : 64;
        void **n = realloc(a->adopted, cap * sizeof *n);
        if (!n)
            return -1;
        a->adopted = n;
        a->capadopted = cap;
    }
    a->adopted[a->nadopted++] = p;
    return 0;
}

static void *arena_take(ir_arena *a, size_t n, int zero);

void *ir_alloc(ir_arena *a, size_t n) { return arena_take(a, n, 1); }

/* ir_alloc without the zeroing, for memory about to be overwritten whole. */
void *ir_alloc_uninit(ir_arena *a, size_t n) { return arena_take(a, n, 0); }

static void *arena_take(ir_arena *a, size_t n, int zero)
{
    if (n > SIZE_MAX - 32)
        return NULL;
    n = (n + 15) & ~(size_t)15;
    block *b = a->head;
    if (!b || b->size - b->used < n) {
        size_t size = n > ARENA_BLOCK / 4 ? n : ARENA_BLOCK;
        block *nb = malloc(sizeof(block) + size);
        if (!nb)
            return NULL;
        nb->used = 0;
        nb->size = size;
        if (b && size == n) { /* a big one-off: keep the current block in front */
            nb->next = b->next;
            b->next = nb;
            nb->used = n;
            if (zero)
                memset(nb->mem, 0, n);
            return nb->mem;
        }
        nb->next = b;
        a->head = b = nb;
    }
    void *p = b->mem + b->used;
    b->used += n;
    if (zero)
        memset(p, 0, n);
    return p;
}

void *ir_alloc_array(ir_arena *a, size_t count, size_t size)
{
    if (size && count > SIZE_MAX / size)
        return NULL;
    return ir_alloc(a, count * size);
}

char *ir_strndup(ir_arena *a, const char *s, size_t n)
{
    char *p = ir_alloc(a, n + 1);
    if (p && n)
        memcpy(p, s, n);
    return p;
}

char *ir_strdup(ir_arena *a, const char *s) { return ir_strndup(a, s ? s : "", s ? strlen(s) : 0); }

/* ---- checked arithmetic ---- */
int ir_mul_ovf(int64_t a, int64_t b, int64_t *out)
{
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r))
        return 1;
    *out = r;
    return 0;
}

int ir_add_ovf(int64_t a, int64_t b, int64_t *out)
{
    int64_t r;
    if (__builtin_add_overflow(a, b, &r))
        return 1;
    *out = r;
    return 0;
}

/* ---- diagnostics ---- */
void vitc_diag_init(vitc_diag *d, const char *file)
{
    memset(d, 0, sizeof *d);
    d->file = file;
}

static const char *diag_program; /* vitc_diag_set_program */

void vitc_diag_set_program(const char *name) { diag_program = name; }

/* "PROGRAM: FILE: " (either left out when not set), or "vitc: " when neither is. */
static void diag_head(FILE *f, const vitc_diag *d)
{
    if (diag_program)
        fprintf(f, "%s: ", diag_program);
    if (d->file)
        fprintf(f, "%s: ", d->file);
    else if (!diag_program)
        fputs("vitc: ", f);
}

static void diag_emit(vitc_diag *d, int status, const char *name, const char *op_type,
                      const char *fmt, va_list ap)
{
    FILE *f = d->out ? d->out : stderr;
    fflush(stdout); /* what was printed before the error comes before it, piped into one file too */
    diag_head(f, d);
    if (op_type)
        fprintf(f, "node '%s' (%s): ", name && *name ? name : "<unnamed>", op_type);
    vfprintf(f, fmt, ap);
    fputc('\n', f);
    if (d->status == VITC_OK)
        d->status = status;
    d->nerrors++;
}

int vitc_verror(vitc_diag *d, int status, const ir_node *n, const char *fmt, va_list ap)
{
    diag_emit(d, status, n ? n->name : NULL, n ? n->op_type : NULL, fmt, ap);
    return status;
}

int vitc_error(vitc_diag *d, int status, const ir_node *n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vitc_verror(d, status, n, fmt, ap);
    va_end(ap);
    return status;
}

int vitc_error_at(vitc_diag *d, int status, const char *node_name, const char *op_type,
                  const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    diag_emit(d, status, node_name, op_type ? op_type : "", fmt, ap);
    va_end(ap);
    return status;
}

void vitc_warning(vitc_diag *d, const ir_node *n, const char *fmt, ...)
{
    FILE *f = d->out ? d->out : stderr;
    fflush(stdout);
    diag_head(f, d);
    if (n)
        fprintf(f, "node '%s' (%s): ", n->name && *n->name ? n->name : "<unnamed>", n->op_type);
    fputs("warning: ", f);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fputc('\n', f);
}

void vitc_note(vitc_diag *d, const char *fmt, ...)
{
    FILE *f = d->out ? d->out : stderr;
    fflush(stdout);
    diag_head(f, d);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fputc('\n', f);
}

/* ---- symbolic dimensions ---- */
int64_t ir_dim_eval(ir_dim d, int64_t batch)
{
    int64_t v = d.k;
    for (int i = 0; i < d.e; i++)
        if (ir_mul_ovf(v, batch, &v))
            return -1;
    return v;
}

char *ir_dim_str(ir_dim d, char *buf, size_t n)
{
    if (d.e == 0 || d.k == 0)
        snprintf(buf, n, "%lld", (long long)d.k);
    else if (d.k == 1)
        snprintf(buf, n, d.e == 1 ? "B" : "B^%d", d.e);
    else if (d.e == 1)
        snprintf(buf, n, "%lld*B", (long long)d.k);
    else
        snprintf(buf, n, "%lld*B^%d", (long long)d.k, d.e);
    return buf;
}

/* ---- graph ---- */
ir_graph *ir_graph_new(const char *path)
{
    ir_arena *a = ir_arena_new();
    if (!a)
        return NULL;
    ir_graph *g = ir_alloc(a, sizeof *g);
    if (!g) {
        ir_arena_free(a);
        return NULL;
    }
    g->arena = a;
    g->path = ir_strdup(a, path ? path : "");
    return g;
}

void ir_graph_free(ir_graph *g)
{
    if (g)
        ir_arena_free(g->arena);
}

/* Grows an arena array of elem-sized items to hold at least need of them. */
static int grow(ir_graph *g, void **arr, int *cap, int need, size_t elem)
{
    if (need <= *cap)
        return 0;
    int ncap = *cap ? *cap : 64;
    while (ncap < need) {
        if (ncap > (1 << 28))
            return -1;
        ncap *= 2;
    }
    void *n = ir_alloc_array(g->arena, (size_t)ncap, elem);
    if (!n)
        return -1;
    if (*arr)
        memcpy(n, *arr, (size_t)*cap * elem);
    *arr = n;
    *cap = ncap;
    return 0;
}

int ir_add_value(ir_graph *g, const char *name, ir_val_kind kind, ir_dtype dtype)
{
    if (grow(g, (void **)&g->values, &g->cap_values, g->nvalues + 1, sizeof(ir_value)))
        return -1;
    ir_value *v = &g->values[g->nvalues];
    memset(v, 0, sizeof *v);
    v->name = ir_strdup(g->arena, name);
    if (!v->name)
        return -1;
    v->kind = kind;
    v->dtype = dtype;
    v->rank = -1;
    v->producer = -1;
    return g->nvalues++;
}

int ir_add_const(ir_graph *g, const char *name, ir_dtype dtype, int rank, const int64_t *dims,
                 const void *data, size_t nbytes)
{
    if (rank < 0 || rank > IR_MAX_RANK)
        return -1;
    int id = ir_add_value(g, name, IR_VAL_CONST, dtype);
    if (id < 0)
        return -1;
    ir_value *v = &g->values[id];
    v->rank = rank;
    for (int i = 0; i < rank; i++)
        v->dims[i] = ir_dim_const(dims[i]);
    v->data = nbytes && data ? ir_alloc_uninit(g->arena, nbytes) : ir_alloc(g->arena, nbytes ? nbytes : 1);
    if (!v->data)
        return -1;
    if (nbytes && data)
        memcpy(v->data, data, nbytes);
    v->nbytes = nbytes;
    return id;
}

int ir_add_node(ir_graph *g, ir_op op, const char *name, const char *op_type, int ninputs,
                const int *inputs, int noutputs, const int *outputs, int nattrs, const ir_attr *attrs)
{
    if (grow(g, (void **)&g->nodes, &g->cap_nodes, g->nnodes + 1, sizeof(ir_node)))
        return -1;
    ir_node *n = &g->nodes[g->nnodes];
    memset(n, 0, sizeof *n);
    n->op = op;
    n->name = ir_strdup(g->arena, name);
    n->op_type = ir_strdup(g->arena, op_type ? op_type : ir_op_name(op));
    n->ninputs = ninputs;
    n->noutputs = noutputs;
    n->nattrs = nattrs;
    n->inputs = ir_alloc_array(g->arena, (size_t)ninputs + 1, sizeof(int));
    n->outputs = ir_alloc_array(g->arena, (size_t)noutputs + 1, sizeof(int));
    n->attrs = ir_alloc_array(g->arena, (size_t)nattrs + 1, sizeof(ir_attr));
    if (!n->name || !n->op_type || !n->inputs || !n->outputs || !n->attrs)
        return -1;
    if (ninputs)
        memcpy(n->inputs, inputs, (size_t)ninputs * sizeof(int));
    if (noutputs)
        memcpy(n->outputs, outputs, (size_t)noutputs * sizeof(int));
    if (nattrs)
        memcpy(n->attrs, attrs, (size_t)nattrs * sizeof(ir_attr));
    for (int i = 0; i < noutputs; i++)
        if (outputs[i] >= 0 && outputs[i] < g->nvalues)
            g->values[outputs[i]].producer = g->nnodes;
    return g->nnodes++;
}

int ir_find_value(const ir_graph *g, const char *name)
{
    for (int i = 0; i < g->nvalues; i++)
        if (strcmp(g->values[i].name, name) == 0)
            return i;
    return -1;
}

const ir_attr *ir_attr_get(const ir_node *n, ir_attr_id id)
{
    for (int i = 0; i < n->nattrs; i++)
        if (n->attrs[i].id == id)
            return &n->attrs[i];
    return NULL;
}

int64_t ir_attr_int(const ir_node *n, ir_attr_id id, int64_t dflt)
{
    const ir_attr *a = ir_attr_get(n, id);
    return a && a->kind == IR_AT_INT ? a->i : dflt;
}

float ir_attr_float(const ir_node *n, ir_attr_id id, float dflt)
{
    const ir_attr *a = ir_attr_get(n, id);
    return a && a->kind == IR_AT_FLOAT ? a->f : dflt;
}

int ir_input(const ir_node *n, int i) { return i < n->ninputs ? n->inputs[i] : -1; }

int ir_auto_pad_of(const ir_node *n)
{
    static const char *const names[] = {"NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"};
    const ir_attr *a = ir_attr_get(n, IR_ATTR_AUTO_PAD);
    if (!a)
        return IR_PAD_NOTSET;
    for (int i = 0; a->kind == IR_AT_STRING && a->s && i < 4; i++)
        if (strcmp(a->s, names[i]) == 0)
            return i;
    return -1;
}

const char *ir_conv_axis(int64_t in, int64_t k, int64_t s, int64_t d, ir_auto_pad pad, int64_t *pb, int64_t *pe,
                         int64_t *out)
{
    int64_t span, padded;
    if (s < 1 || d < 1 || k < 1 || in < 0)
        return "strides, dilations and kernel sizes must be positive";
    if (ir_mul_ovf(d, k - 1, &span) || ir_add_ovf(span, 1, &span))
        return "the dilated kernel's extent overflows";
    if (pad == IR_PAD_VALID) {
        *pb = *pe = 0;
    } else if (pad == IR_PAD_SAME_UPPER || pad == IR_PAD_SAME_LOWER) {
        /* as many outputs as ceil(in / s), the pads split evenly, the odd one at the end (UPPER) */
        int64_t o = in / s + (in % s != 0), total;
        if (ir_mul_ovf(o - 1, s, &total) || ir_add_ovf(total, span - in, &total))
            return "the padding SAME_* needs overflows";
        total = total < 0 ? 0 : total;
        *pb = pad == IR_PAD_SAME_LOWER ? total - total / 2 : total / 2;
        *pe = total - *pb;
    }
    if (*pb < 0 || *pe < 0)
        return "pads must be non-negative";
    if (ir_add_ovf(in, *pb, &padded) || ir_add_ovf(padded, *pe, &padded))
        return "the padded input's extent overflows";
    if (padded < span)
        return "the kernel is larger than the padded input";
    *out = (padded - span) / s + 1;
    return NULL;
}

int64_t ir_value_numel(const ir_value *v, int64_t batch)
{
    if (v->rank < 0)
        return -1;
    int64_t n = 1;
    for (int i = 0; i < v->rank; i++) {
        int64_t d = ir_dim_eval(v->dims[i], batch);
        if (d < 0 || ir_mul_ovf(n, d, &n))
            return -1;
    }
    return n;
}

int ir_value_is_static(const ir_value *v)
{
    for (int i = 0; i < v->rank; i++)
        if (v->dims[i].e != 0 && v->dims[i].k != 0)
            return 0;
    return v->rank >= 0;
}

char *ir_value_type_str(const ir_value *v, char *buf, size_t n)
{
    size_t off = (size_t)snprintf(buf, n, "%s[", ir_dtype_name(v->dtype));
    if (v->rank < 0 && off < n)
        off += (size_t)snprintf(buf + off, n - off, "?");
    for (int i = 0; i < v->rank && off < n; i++) {
        char d[48];
        off += (size_t)snprintf(buf + off, n - off, "%s%s", i ? "," : "", ir_dim_str(v->dims[i], d, sizeof d));
    }
    if (off < n)
        snprintf(buf + off, n - off, "]");
    return buf;
}
