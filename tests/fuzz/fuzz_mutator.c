/* fuzz_mutator.c: a structure-aware mutator for ONNX models.
 *
 * Byte flips rarely get a protobuf past parsing with anything interesting
 * changed.  This mutator parses the input as a ModelProto (protobuf-c), makes
 * one to three edits of the kind a broken or hostile exporter produces, and
 * serializes it again: dims and element types of graph inputs and tensors,
 * truncated payloads, node inputs and outputs rewired to other names (cycles,
 * duplicates, dangling references), small constants (scalars, indices, axes,
 * shapes) fed to inputs, op_type swapped, inputs added or dropped,
 * attribute values, types and names changed, nodes deleted, duplicated,
 * swapped or added, opset versions.  One call in five (or any input that does
 * not parse) falls back to libFuzzer's byte mutator.  Every edit keeps the
 * message freeable by protobuf-c: replaced strings and arrays are malloc'ed
 * and the old ones freed. */
#include "fuzz.h"

#include "frontend/onnx_impl.h"

#include <stdlib.h>
#include <string.h>

size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed);

typedef struct {
    uint64_t s;
} rng;

static uint32_t rnd(rng *r, uint32_t n)
{
    r->s = r->s * 6364136223846793005ull + 1442695040888963407ull;
    return n ? (uint32_t)((r->s >> 33) % n) : 0;
}

static const int64_t interesting[] = {
    0, 1, -1, 2, 3, -2, 4, 7, 8, 9, 16, 64, 197, 255, 256, 1024, 65535, INT32_MAX, (int64_t)INT32_MAX + 1,
    INT32_MIN, (int64_t)1 << 32, (int64_t)1 << 40, (int64_t)1 << 62, INT64_MAX, INT64_MIN, INT64_MIN + 1,
};
#define NINTERESTING (sizeof interesting / sizeof interesting[0])

static int64_t some_int(rng *r, int64_t old)
{
    switch (rnd(r, 4)) {
    case 0: return (int64_t)((uint64_t)old + rnd(r, 5) - 2); /* wraps, no overflow */
    case 1: return (int64_t)rnd(r, 10) - 2;
    default: return interesting[rnd(r, NINTERESTING)];
    }
}

static float some_float(rng *r)
{
    static const float f[] = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 1e-12f, 1e30f, -1e30f, 3.0f, 1e-5f,
                              __builtin_inff(), -__builtin_inff(), __builtin_nanf("")};
    return f[rnd(r, sizeof f / sizeof f[0])];
}

static char *dup_str(const char *s)
{
    char *d = strdup(s ? s : "");
    if (!d)
        abort();
    return d;
}

static void *grow(void *p, size_t count, size_t size)
{
    void *q = realloc(p, (count ? count : 1) * size);
    if (!q)
        abort();
    return q;
}

static void set_str(char **field, const char *s)
{
    char *d = dup_str(s);
    free(*field);
    *field = d;
}

/* ---- names defined in the graph: the pool rewired references draw from ---- */
typedef struct {
    const char *names[512];
    int n;
} pool;

static void pool_add(pool *p, const char *s)
{
    if (s && *s && p->n < 512)
        p->names[p->n++] = s;
}

static void pool_fill(pool *p, const Onnx__GraphProto *g)
{
    p->n = 0;
    for (size_t i = 0; i < g->n_input; i++)
        pool_add(p, g->input[i]->name);
    for (size_t i = 0; i < g->n_initializer; i++)
        pool_add(p, g->initializer[i]->name);
    for (size_t i = 0; i < g->n_node; i++)
        for (size_t k = 0; k < g->node[i]->n_output; k++)
            pool_add(p, g->node[i]->output[k]);
}

static const char *some_name(rng *r, const pool *p)
{
    uint32_t k = rnd(r, 10);
    if (k == 0 || p->n == 0)
        return k & 1 ? "" : "fz_nowhere";
    return p->names[rnd(r, (uint32_t)p->n)];
}

/* ---- tensors (initializers and tensor attributes) ---- */
static Onnx__TensorProto *some_tensor(rng *r, Onnx__GraphProto *g)
{
    Onnx__TensorProto *cand[256];
    int n = 0;
    for (size_t i = 0; i < g->n_initializer && n < 256; i++)
        cand[n++] = g->initializer[i];
    for (size_t i = 0; i < g->n_node; i++)
        for (size_t k = 0; k < g->node[i]->n_attribute && n < 256; k++)
            if (g->node[i]->attribute[k]->t)
                cand[n++] = g->node[i]->attribute[k]->t;
    return n ? cand[rnd(r, (uint32_t)n)] : NULL;
}

static void mutate_tensor(rng *r, Onnx__TensorProto *t)
{
    switch (rnd(r, 6)) {
    case 0: /* one dimension */
        if (t->n_dims)
            t->dims[rnd(r, (uint32_t)t->n_dims)] = some_int(r, t->dims[0]);
        break;
    case 1: /* rank */
        if (t->n_dims && rnd(r, 2)) {
            t->n_dims--;
        } else if (t->n_dims < 12) {
            t->dims = grow(t->dims, t->n_dims + 1, sizeof *t->dims);
            t->dims[t->n_dims++] = rnd(r, 3) ? 1 : some_int(r, 1);
        }
        break;
    case 2: /* element type */
        t->has_data_type = rnd(r, 8) != 0;
        t->data_type = (int32_t)rnd(r, 3) ? (int32_t)rnd(r, 18) : (int32_t)some_int(r, 1);
        break;
    case 3: /* truncated or emptied payload */
        if (t->has_raw_data && t->raw_data.len)
            t->raw_data.len = rnd(r, (uint32_t)t->raw_data.len);
        else if (t->n_int64_data)
            t->n_int64_data = rnd(r, (uint32_t)t->n_int64_data);
        else if (t->n_float_data)
            t->n_float_data = rnd(r, (uint32_t)t->n_float_data);
        break;
    case 4: /* an int64 payload value (shape arithmetic, indices, axes) */
        if (t->has_raw_data && t->raw_data.len >= 8 && t->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__INT64) {
            int64_t v = some_int(r, 0);
            memcpy(t->raw_data.data + 8 * rnd(r, (uint32_t)(t->raw_data.len / 8)), &v, 8);
        } else if (t->n_int64_data) {
            t->int64_data[rnd(r, (uint32_t)t->n_int64_data)] = some_int(r, 0);
        } else if (t->has_raw_data && t->raw_data.len >= 4) {
            float f = some_float(r);
            memcpy(t->raw_data.data + 4 * rnd(r, (uint32_t)(t->raw_data.len / 4)), &f, 4);
        }
        break;
    default: /* external data */
        if (!t->n_external_data) {
            static const char *const locs[] = {"weights.bin", "small.bin", "link.bin", "../weights.bin",
                                               "/etc/passwd", "nope.bin", ".", ""};
            static const char *const offs[] = {"0", "8", "65532", "65536", "-1", "9223372036854775807",
                                               "99999999999999999999", "x"};
            t->external_data = grow(t->external_data, 2, sizeof *t->external_data);
            for (int k = 0; k < 2; k++) {
                Onnx__StringStringEntryProto *e = malloc(sizeof *e);
                if (!e)
                    abort();
                onnx__string_string_entry_proto__init(e);
                e->key = dup_str(k ? "offset" : "location");
                e->value = dup_str(k ? offs[rnd(r, 8)] : locs[rnd(r, 8)]);
                t->external_data[k] = e;
            }
            t->n_external_data = 2;
            t->has_data_location = 1;
            t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
        } else {
            t->has_data_location = !t->has_data_location;
        }
        break;
    }
}

/* ---- graph inputs ---- */
static void mutate_input(rng *r, Onnx__GraphProto *g)
{
    if (!g->n_input)
        return;
    Onnx__ValueInfoProto *vi = g->input[rnd(r, (uint32_t)g->n_input)];
    Onnx__TypeProto *tp = vi->type;
    if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type)
        return;
    Onnx__TypeProto__Tensor *tt = tp->tensor_type;
    if (rnd(r, 4) == 0) {
        tt->elem_type = (int32_t)rnd(r, 18);
        return;
    }
    Onnx__TensorShapeProto *sh = tt->shape;
    if (!sh)
        return;
    if (rnd(r, 4) == 0) { /* rank */
        if (sh->n_dim && rnd(r, 2)) {
            protobuf_c_message_free_unpacked(&sh->dim[--sh->n_dim]->base, NULL);
        } else if (sh->n_dim < 12) {
            Onnx__TensorShapeProto__Dimension *d = malloc(sizeof *d);
            if (!d)
                abort();
            onnx__tensor_shape_proto__dimension__init(d);
            d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            d->dim_value = rnd(r, 2) ? 1 : some_int(r, 1);
            sh->dim = grow(sh->dim, sh->n_dim + 1, sizeof *sh->dim);
            sh->dim[sh->n_dim++] = d;
        }
        return;
    }
    if (!sh->n_dim)
        return;
    Onnx__TensorShapeProto__Dimension *d = sh->dim[rnd(r, (uint32_t)sh->n_dim)];
    if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM)
        free(d->dim_param);
    if (rnd(r, 4) == 0) {
        d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
        d->dim_param = dup_str(rnd(r, 2) ? "B" : "N");
    } else {
        int64_t old = d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE ? d->dim_value : 1;
        d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
        d->dim_value = some_int(r, old);
    }
}

/* ---- attributes ---- */
static void mutate_attr(rng *r, Onnx__AttributeProto *a)
{
    switch (rnd(r, 5)) {
    case 0:
        a->i = some_int(r, a->i);
        a->has_i = 1;
        break;
    case 1:
        a->f = some_float(r);
        a->has_f = 1;
        break;
    case 2: /* one element of ints, or their count */
        if (a->n_ints && rnd(r, 3)) {
            a->ints[rnd(r, (uint32_t)a->n_ints)] = some_int(r, a->ints[0]);
        } else if (a->n_ints && rnd(r, 2)) {
            a->n_ints--;
        } else if (a->n_ints < 16) {
            a->ints = grow(a->ints, a->n_ints + 1, sizeof *a->ints);
            a->ints[a->n_ints++] = some_int(r, 0);
        }
        break;
    case 3: { /* the declared type */
        static const Onnx__AttributeProto__AttributeType types[] = {
            ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT,
            ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS,
            ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR,
            ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__UNDEFINED};
        a->type = types[rnd(r, sizeof types / sizeof types[0])];
        a->has_type = 1;
        break;
    }
    default: /* the name: another attribute the IR knows */
        set_str(&a->name, ir_attr_name((ir_attr_id)rnd(r, IR_ATTR_COUNT)));
        break;
    }
}

static Onnx__AttributeProto *new_attr(rng *r)
{
    Onnx__AttributeProto *a = malloc(sizeof *a);
    if (!a)
        abort();
    onnx__attribute_proto__init(a);
    a->name = dup_str(ir_attr_name((ir_attr_id)rnd(r, IR_ATTR_COUNT)));
    a->has_type = 1;
    if (rnd(r, 2)) {
        a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
        a->has_i = 1;
        a->i = some_int(r, 0);
    } else {
        a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
        a->n_ints = 1 + rnd(r, 4);
        a->ints = grow(NULL, a->n_ints, sizeof *a->ints);
        for (size_t i = 0; i < a->n_ints; i++)
            a->ints[i] = some_int(r, (int64_t)i);
    }
    return a;
}

/* ---- nodes ---- */
static const char *some_op(rng *r)
{
    for (;;) {
        int op = (int)rnd(r, IR_OP_COUNT);
        if (!(ir_op_table[op].flags & OPF_FUSED))
            return ir_op_table[op].name;
    }
}

static Onnx__NodeProto *copy_node(const Onnx__NodeProto *n)
{
    size_t len = onnx__node_proto__get_packed_size(n);
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf)
        abort();
    onnx__node_proto__pack(n, buf);
    Onnx__NodeProto *c = onnx__node_proto__unpack(NULL, len, buf);
    free(buf);
    return c;
}

static void insert_node(Onnx__GraphProto *g, Onnx__NodeProto *n, size_t at)
{
    g->node = grow(g->node, g->n_node + 1, sizeof *g->node);
    memmove(g->node + at + 1, g->node + at, (g->n_node - at) * sizeof *g->node);
    g->node[at] = n;
    g->n_node++;
}

static void mutate_node(rng *r, Onnx__GraphProto *g, const pool *p)
{
    if (!g->n_node)
        return;
    size_t idx = rnd(r, (uint32_t)g->n_node);
    Onnx__NodeProto *n = g->node[idx];
    switch (rnd(r, 10)) {
    case 0: /* rewire an input */
        if (n->n_input)
            set_str(&n->input[rnd(r, (uint32_t)n->n_input)], some_name(r, p));
        break;
    case 1: /* rename an output: duplicates, shadowing, or a fresh name */
        if (n->n_output)
            set_str(&n->output[rnd(r, (uint32_t)n->n_output)], rnd(r, 3) ? some_name(r, p) : "fz_fresh");
        break;
    case 2:
        set_str(&n->op_type, some_op(r));
        break;
    case 3: /* one input more or fewer */
        if (n->n_input && rnd(r, 2)) {
            free(n->input[--n->n_input]);
        } else if (n->n_input < 8) {
            n->input = grow(n->input, n->n_input + 1, sizeof *n->input);
            n->input[n->n_input++] = dup_str(some_name(r, p));
        }
        break;
    case 4: /* an output more or fewer */
        if (n->n_output > 1 && rnd(r, 2)) {
            free(n->output[--n->n_output]);
        } else if (n->n_output < 4) {
            n->output = grow(n->output, n->n_output + 1, sizeof *n->output);
            n->output[n->n_output++] = dup_str(rnd(r, 2) ? "fz_extra" : "");
        }
        break;
    case 5: /* an attribute */
        if (n->n_attribute && rnd(r, 3)) {
            mutate_attr(r, n->attribute[rnd(r, (uint32_t)n->n_attribute)]);
        } else if (n->n_attribute && rnd(r, 2)) {
            protobuf_c_message_free_unpacked(&n->attribute[--n->n_attribute]->base, NULL);
        } else if (n->n_attribute < 8) {
            n->attribute = grow(n->attribute, n->n_attribute + 1, sizeof *n->attribute);
            n->attribute[n->n_attribute++] = new_attr(r);
        }
        break;
    case 6: /* delete */
        protobuf_c_message_free_unpacked(&n->base, NULL);
        memmove(g->node + idx, g->node + idx + 1, (g->n_node - idx - 1) * sizeof *g->node);
        g->n_node--;
        break;
    case 7: { /* duplicate somewhere */
        Onnx__NodeProto *c = copy_node(n);
        if (c)
            insert_node(g, c, rnd(r, (uint32_t)g->n_node + 1));
        break;
    }
    case 8: { /* swap with another node */
        size_t j = rnd(r, (uint32_t)g->n_node);
        g->node[idx] = g->node[j];
        g->node[j] = n;
        break;
    }
    default: { /* a new node of some op, fed from defined names */
        Onnx__NodeProto *m = malloc(sizeof *m);
        if (!m)
            abort();
        onnx__node_proto__init(m);
        m->op_type = dup_str(some_op(r));
        m->name = dup_str("fz_node");
        m->n_input = 1 + rnd(r, 3);
        m->input = grow(NULL, m->n_input, sizeof *m->input);
        for (size_t i = 0; i < m->n_input; i++)
            m->input[i] = dup_str(some_name(r, p));
        m->n_output = 1;
        m->output = grow(NULL, 1, sizeof *m->output);
        m->output[0] = dup_str(rnd(r, 2) && g->n_output && g->output[0]->name ? g->output[0]->name : "fz_new");
        if (rnd(r, 2)) {
            m->n_attribute = 1;
            m->attribute = grow(NULL, 1, sizeof *m->attribute);
            m->attribute[0] = new_attr(r);
        }
        insert_node(g, m, rnd(r, (uint32_t)g->n_node + 1));
        break;
    }
    }
}

/* A new small initializer (a scalar or a short vector, int64 or float, with
 * interesting values: indices, axes, shapes, steps), fed to some node input. */
static void add_small_const(rng *r, Onnx__GraphProto *g)
{
    if (!g->n_node)
        return;
    char name[32];
    snprintf(name, sizeof name, "fz_k%u", rnd(r, 1000));
    Onnx__TensorProto *t = malloc(sizeof *t);
    if (!t)
        abort();
    onnx__tensor_proto__init(t);
    t->name = dup_str(name);
    t->has_data_type = 1;
    size_t n = rnd(r, 2) ? 1 + rnd(r, 4) : 1;
    if (rnd(r, 2)) { /* a vector, else a scalar */
        t->n_dims = 1;
        t->dims = grow(NULL, 1, sizeof *t->dims);
        t->dims[0] = (int64_t)n;
    }
    if (rnd(r, 3)) {
        t->data_type = ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
        t->n_int64_data = n;
        t->int64_data = grow(NULL, n, sizeof *t->int64_data);
        for (size_t i = 0; i < n; i++)
            t->int64_data[i] = rnd(r, 2) ? (int64_t)rnd(r, 6) - 2 : some_int(r, 0);
    } else {
        t->data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
        t->n_float_data = n;
        t->float_data = grow(NULL, n, sizeof *t->float_data);
        for (size_t i = 0; i < n; i++)
            t->float_data[i] = rnd(r, 2) ? (float)rnd(r, 5) : some_float(r);
    }
    g->initializer = grow(g->initializer, g->n_initializer + 1, sizeof *g->initializer);
    g->initializer[g->n_initializer++] = t;
    Onnx__NodeProto *nd = g->node[rnd(r, (uint32_t)g->n_node)];
    if (nd->n_input && rnd(r, 4)) {
        set_str(&nd->input[rnd(r, (uint32_t)nd->n_input)], name);
    } else if (nd->n_input < 8) {
        nd->input = grow(nd->input, nd->n_input + 1, sizeof *nd->input);
        nd->input[nd->n_input++] = dup_str(name);
    }
}

static void mutate_model(rng *r, Onnx__ModelProto *m)
{
    Onnx__GraphProto *g = m->graph;
    pool p;
    switch (rnd(r, 14)) {
    case 0:
        if (m->n_opset_import) {
            Onnx__OperatorSetIdProto *o = m->opset_import[rnd(r, (uint32_t)m->n_opset_import)];
            o->version = rnd(r, 3) ? 11 + rnd(r, 15) : some_int(r, o->version);
            o->has_version = 1;
        }
        break;
    case 1: case 2:
        mutate_input(r, g);
        break;
    case 3: case 4: {
        Onnx__TensorProto *t = some_tensor(r, g);
        if (t)
            mutate_tensor(r, t);
        break;
    }
    case 6: case 7:
        add_small_const(r, g);
        break;
    case 5: /* a graph output renamed to another defined name */
        pool_fill(&p, g);
        if (g->n_output)
            set_str(&g->output[rnd(r, (uint32_t)g->n_output)]->name, some_name(r, &p));
        break;
    default:
        pool_fill(&p, g);
        mutate_node(r, g, &p);
        break;
    }
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed)
{
    rng r = {seed * 0x9e3779b97f4a7c15ull + 1};
    vitc_diag d;
    fz_diag(&d, "mutator");
    /* protobuf-c's unpacker recurses per nested message: deep inputs get bytes mutations only */
    if (rnd(&r, 5) == 0 || onnx_check_nesting(data, size, &onnx__model_proto__descriptor, &d) != VITC_OK)
        return LLVMFuzzerMutate(data, size, max_size);
    Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, size, data);
    if (!m || !m->graph) {
        if (m)
            onnx__model_proto__free_unpacked(m, NULL);
        return LLVMFuzzerMutate(data, size, max_size);
    }
    int edits = 1 + (int)rnd(&r, 3);
    for (int i = 0; i < edits; i++)
        mutate_model(&r, m);
    size_t len = onnx__model_proto__get_packed_size(m);
    if (len > max_size) {
        onnx__model_proto__free_unpacked(m, NULL);
        return LLVMFuzzerMutate(data, size, max_size);
    }
    onnx__model_proto__pack(m, data);
    onnx__model_proto__free_unpacked(m, NULL);
    return len;
}
