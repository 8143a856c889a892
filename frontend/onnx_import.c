/* onnx_import.c: ModelProto -> ir_graph.
 *
 * Walks the model once: opset imports, initializers, graph inputs (the first
 * dimension may be symbolic: the batch), then nodes in order.  Constant nodes
 * become constant values.  Each node's op_type is looked up in the op table
 * once; every unsupported node, attribute or reference is reported (all of
 * them, not just the first) before the import fails, the unsupported
 * operators in one error grouped by op type.  The import records the batch
 * an export fixed (no input's first dimension symbolic), and can go on
 * without the unsupported nodes for `vitc dump` (onnx_import_opts). */
#include "frontend/onnx_impl.h"
#include "runtime/abi.h" /* vitc_model_hash */

#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* ---- name -> value index, open addressing over the arena ---- */
typedef struct {
    const char **keys;
    int *vals;
    size_t cap, count;
    ir_arena *arena; /* where it grows */
} name_map;

static int map_init(name_map *m, ir_arena *a, size_t expect)
{
    m->cap = 64;
    while (m->cap < expect * 2 + 16)
        m->cap *= 2;
    m->count = 0;
    m->arena = a;
    m->keys = ir_alloc_array(a, m->cap, sizeof(char *));
    m->vals = ir_alloc_array(a, m->cap, sizeof(int));
    return m->keys && m->vals ? 0 : -1;
}

static int map_get(const name_map *m, const char *k)
{
    for (size_t i = ir_str_hash(k) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (!m->keys[i])
            return -1;
        if (strcmp(m->keys[i], k) == 0)
            return m->vals[i];
    }
}

/* Inserts k (stored by pointer: it must outlive the map); the table doubles
 * when half full, so that it never fills up (a full open-addressing table
 * would make lookups loop forever).  -1 when out of memory (k not stored). */
static int map_put(name_map *m, const char *k, int v)
{
    if (2 * (m->count + 1) > m->cap) {
        name_map big = {.cap = 2 * m->cap, .arena = m->arena};
        big.keys = ir_alloc_array(m->arena, big.cap, sizeof(char *));
        big.vals = ir_alloc_array(m->arena, big.cap, sizeof(int));
        if (!big.keys || !big.vals)
            return -1;
        for (size_t j = 0; j < m->cap; j++)
            if (m->keys[j])
                map_put(&big, m->keys[j], m->vals[j]);
        *m = big;
    }
    size_t i = ir_str_hash(k) & (m->cap - 1);
    while (m->keys[i] && strcmp(m->keys[i], k) != 0)
        i = (i + 1) & (m->cap - 1);
    if (!m->keys[i])
        m->count++;
    m->keys[i] = k;
    m->vals[i] = v;
    return 0;
}

typedef struct {
    ir_graph *g;
    vitc_diag *d;
    name_map names;
    const char *model_dir; /* for external data; NULL refuses it */
    const Onnx__GraphProto *gp;
    int keep_unsupported;  /* onnx_import_opts */
    const onnx_import_opts *opts;
    int unnamed_shape_taken; /* an input got the shape given without a name */
    onnx_unsupported *unsupported; /* every unsupported node, in model order (malloc'ed) */
    int nunsupported, cap_unsupported;
    const char *batch_param; /* the name of the inputs' symbolic first dimension, if any */
    name_map declared;       /* value_info and graph output names -> their ValueInfoProto (made on first use) */
    const Onnx__ValueInfoProto **declared_vi;
    struct branch_scope *scope; /* the If branch being read; NULL: the main graph */
} importer;

/* An If branch being read: its names, nodes and locals (ir.h: ir_branch),
 * in arrays that grow as it is read.  Names resolve in it first, then in the
 * scopes around it; a name of an enclosing scope that is not a constant
 * becomes a capture of every branch in between. */
typedef struct branch_scope {
    struct branch_scope *parent; /* NULL: the main graph */
    int depth;                   /* 1 for a branch of an If of the main graph */
    name_map names;              /* name -> a constant's value index, or IR_BRANCH_REF(local) */
    ir_node *nodes;
    int nnodes, cap_nodes;
    const char **local_names;
    int *capture; /* per local: its capture index, or -1 */
    int nlocals, cap_locals;
    int *capture_src; /* per capture: its reference in the parent scope */
    int ncaptures, cap_captures;
    const Onnx__NodeProto *unsupported; /* the first node (here or deeper) whose operator vitc does not take */
    const char *unsupported_domain;
} branch_scope;

enum { IF_MAX_DEPTH = 8,        /* Ifs nested in branches of Ifs, at most */
       IF_MAX_CAPTURES = 4096 }; /* values of the enclosing graph one If reads */

static int scope_define(importer *im, branch_scope *s, const char *name, int id, const char *node,
                        const char *op_type);

/* Adds a constant value from a TensorProto.  Its raw_data, in the layout
 * the IR keeps (little-endian, as the host), becomes the value's data
 * without a copy: the unpacked message gives it up (from 4 KiB on; smaller
 * ones are copied into the arena's blocks rather than kept as a buffer each). */
static int import_tensor(importer *im, Onnx__TensorProto *t, const char *name, const char *what)
{
    onnx_tensor_info info;
    if (onnx_tensor_shape(t, &info, what, im->d) ||
        onnx_tensor_data(t, &info, im->model_dir, NULL, what, im->d)) /* before allocating */
        return -1;
    int id = ir_add_const(im->g, name, info.dtype, info.rank, info.dims, NULL, 0);
    if (id < 0)
        goto oom;
    ir_value *v = &im->g->values[id];
    int external = t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    if (!external && t->has_raw_data && t->raw_data.data && info.nbytes >= 4096 &&
        ir_arena_adopt(im->g->arena, t->raw_data.data) == 0) {
        v->data = t->raw_data.data;
        v->nbytes = info.nbytes;
        t->raw_data.data = NULL; /* the arena frees it now, not protobuf-c */
        t->raw_data.len = 0;
        return id;
    }
    v->data = ir_alloc(im->g->arena, info.nbytes ? info.nbytes : 1);
    if (!v->data)
        goto oom;
    v->nbytes = info.nbytes;
    if (onnx_tensor_data(t, &info, im->model_dir, v->data, what, im->d))
        return -1;
    return id;
oom:
    vitc_error(im->d, VITC_INTERNAL, NULL, "%s: out of memory", what);
    return -1;
}

/* Defines a graph-level name, refusing duplicates. */
static int define(importer *im, const char *name, int id, const char *node, const char *op_type)
{
    if (map_get(&im->names, name) >= 0) {
        if (op_type)
            vitc_error_at(im->d, VITC_BAD_INPUT, node, op_type, "output '%s' is already defined earlier", name);
        else
            vitc_error(im->d, VITC_BAD_INPUT, NULL, "tensor name '%s' is defined twice", name);
        return -1;
    }
    map_put(&im->names, im->g->values[id].name, id);
    return 0;
}

/* 1 if the input's dimensions after the first include a symbolic one. */
static int has_open_dims(const Onnx__TypeProto__Tensor *tt)
{
    for (size_t i = 1; tt->shape && i < tt->shape->n_dim; i++)
        if (tt->shape->dim[i]->value_case != ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE)
            return 1;
    return 0;
}

/* The shape given for input name (onnx_import_opts.shapes): by name, or the
 * one given without a name where this input is the first with symbolic
 * dimensions beyond the batch.  NULL: none. */
static const onnx_input_shape *input_shape(importer *im, const Onnx__TypeProto__Tensor *tt, const char *name)
{
    const onnx_import_opts *o = im->opts;
    for (int k = 0; o && k < o->nshapes; k++)
        if (o->shapes[k].name && strcmp(o->shapes[k].name, name) == 0)
            return &o->shapes[k];
    if (!has_open_dims(tt))
        return NULL;
    for (int k = 0; o && k < o->nshapes && !im->unnamed_shape_taken; k++)
        if (!o->shapes[k].name) {
            im->unnamed_shape_taken = 1; /* by the first input with such dimensions */
            return &o->shapes[k];
        }
    return NULL;
}

/* "NAME=Bx3x224x224,Bx3x448x448": symbolic dimensions beyond the batch 224,
 * then 448, for messages. */
static const char *shape_example(const Onnx__TypeProto__Tensor *tt, const char *name, char *buf, size_t n)
{
    size_t k = (size_t)snprintf(buf, n, "%.64s=", name);
    for (int size = 224; size <= 448 && k < n; size += 224) {
        k += (size_t)snprintf(buf + k, n - k, "%sB", size > 224 ? "," : "");
        for (size_t i = 1; i < tt->shape->n_dim && k < n; i++) {
            const Onnx__TensorShapeProto__Dimension *dim = tt->shape->dim[i];
            if (dim->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE)
                k += (size_t)snprintf(buf + k, n - k, "x%lld", (long long)dim->dim_value);
            else
                k += (size_t)snprintf(buf + k, n - k, "x%d", size);
        }
    }
    return buf;
}

/* Every shape given (onnx_import_opts.shapes) names a graph input, where
 * it names one (before the inputs are read: a misspelt name is the error to
 * report, not the input it left without a shape). */
static int check_shape_names(importer *im)
{
    const onnx_import_opts *o = im->opts;
    int bad = 0;
    for (int k = 0; o && k < o->nshapes; k++) {
        const char *name = o->shapes[k].name;
        int found = 0;
        for (size_t i = 0; name && i < im->gp->n_input; i++)
            found |= im->gp->input[i]->name && strcmp(im->gp->input[i]->name, name) == 0;
        if (name && !found && !o->shapes_from_inputs)
            bad++, vitc_error(im->d, VITC_BAD_INPUT, NULL,
                              "a shape is given for input '%s', which the graph does not have", name);
    }
    return bad;
}

/* A shape given without a name sized an input. */
static void check_shapes_used(importer *im)
{
    const onnx_import_opts *o = im->opts;
    for (int k = 0; o && k < o->nshapes; k++) {
        if (!o->shapes[k].name && !im->unnamed_shape_taken && !o->shapes_from_inputs)
            vitc_error(im->d, VITC_BAD_INPUT, NULL,
                       "a shape is given, but no graph input has a symbolic dimension other than the batch: the model "
                       "takes one size (export it with dynamic height and width to compile it for several)");
    }
}

/* Graph input: element type and shape; dim 0 may be symbolic (the batch),
 * others where a shape for them is given (onnx_import_opts.shapes). */
static int import_input(importer *im, const Onnx__ValueInfoProto *vi)
{
    const char *name = vi->name ? vi->name : "";
    const Onnx__TypeProto *tp = vi->type;
    if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type)
        return vitc_error(im->d, VITC_BAD_INPUT, NULL, "graph input '%s' is not a tensor", name);
    const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
    int dt = tt->has_elem_type ? ir_dtype_from_onnx(tt->elem_type) : -1;
    if (dt < 0)
        return vitc_error(im->d, VITC_BAD_INPUT, NULL, "graph input '%s' has an unsupported element type %d", name,
                          (int)tt->elem_type);
    if (!tt->shape)
        return vitc_error(im->d, VITC_BAD_INPUT, NULL, "graph input '%s' has no shape", name);
    if (tt->shape->n_dim > IR_MAX_RANK)
        return vitc_error(im->d, VITC_BAD_INPUT, NULL, "graph input '%s' has rank %zu, more than %d", name,
                          tt->shape->n_dim, IR_MAX_RANK);
    int id = ir_add_value(im->g, name, IR_VAL_INPUT, (ir_dtype)dt);
    if (id < 0)
        return vitc_error(im->d, VITC_INTERNAL, NULL, "out of memory");
    ir_value *v = &im->g->values[id];
    v->rank = (int)tt->shape->n_dim;
    const onnx_input_shape *given = input_shape(im, tt, name);
    if (given && given->rank != v->rank && im->opts->shapes_from_inputs)
        given = NULL; /* the file's rank is reported with the file */
    if (given && given->rank != v->rank)
        return vitc_error(im->d, VITC_BAD_INPUT, NULL, "graph input '%s' has rank %d; the shape given for it has %d "
                          "dimensions", name, v->rank, given->rank);
    for (int i = 0; i < v->rank; i++) {
        const Onnx__TensorShapeProto__Dimension *dim = tt->shape->dim[i];
        int known = dim->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
        if (known && dim->dim_value >= 0 && dim->dim_value <= ((int64_t)1 << 31)) {
            v->dims[i] = ir_dim_const(dim->dim_value);
            if (given && i > 0 && given->dims[i] != dim->dim_value && !im->opts->shapes_from_inputs)
                return vitc_error(im->d, VITC_BAD_INPUT, NULL, "graph input '%s': dimension %d is %lld in the model; "
                                  "the shape given for it says %lld", name, i, (long long)dim->dim_value,
                                  (long long)given->dims[i]);
        } else if (given && i > 0) {
            if (given->dims[i] < 1 || given->dims[i] > ((int64_t)1 << 31))
                return vitc_error(im->d, VITC_BAD_INPUT, NULL, "graph input '%s': dimension %d given as %lld", name, i,
                                  (long long)given->dims[i]);
            v->dims[i] = ir_dim_const(given->dims[i]);
        } else if (known) {
            return vitc_error(im->d, VITC_BAD_INPUT, NULL, "graph input '%s': dimension %d is %lld", name, i,
                              (long long)dim->dim_value);
        } else if (i == 0) {
            v->dims[i] = ir_dim_batch(1); /* symbolic or unset: the batch */
            if (!im->batch_param && dim->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM &&
                dim->dim_param && *dim->dim_param)
                im->batch_param = dim->dim_param;
        } else {
            char shape[160];
            return vitc_error(im->d, VITC_BAD_INPUT, NULL,
                              "graph input '%s': dimension %d is symbolic ('%s'): the batch (the first dimension) is "
                              "the only one a .so leaves open; give the sizes to compile for, e.g. --shapes %s (one .so "
                              "runs each)", name, i,
                              dim->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM ? dim->dim_param
                                                                                                      : "?",
                              shape_example(tt, name, shape, sizeof shape));
        }
    }
    if (define(im, v->name, id, NULL, NULL))
        return VITC_BAD_INPUT;
    im->g->inputs[im->g->ninputs++] = id;
    return VITC_OK;
}

/* A graph input that names an initializer (ONNX's old-style default value)
 * must declare the initializer's type and shape, where it declares them. */
static void check_input_init(importer *im, const Onnx__ValueInfoProto *vi, const ir_value *init)
{
    const Onnx__TypeProto *tp = vi->type;
    if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type)
        return;
    const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
    int same = !tt->has_elem_type || ir_dtype_from_onnx(tt->elem_type) == (int)init->dtype;
    if (tt->shape && same) {
        same = tt->shape->n_dim == (size_t)init->rank;
        for (int i = 0; same && i < init->rank; i++) {
            const Onnx__TensorShapeProto__Dimension *dim = tt->shape->dim[i];
            same = dim->value_case != ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE ||
                   dim->dim_value == init->dims[i].k;
        }
    }
    if (!same) {
        char t[256];
        vitc_error(im->d, VITC_BAD_INPUT, NULL,
                   "graph input '%s' does not match the initializer of that name (%s): type or shape differ",
                   init->name, ir_value_type_str(init, t, sizeof t));
    }
}

/* Converts one attribute; returns 0, or -1 after reporting. */
static int import_attr(importer *im, const Onnx__NodeProto *np, const Onnx__AttributeProto *ap, ir_attr *out)
{
    const char *node = np->name ? np->name : "", *op = np->op_type;
    int id = ir_attr_from_onnx(ap->name ? ap->name : "");
    if (id < 0 || id >= IR_ATTR_ACTIVATION) { /* unknown, or one only fused ops carry */
        vitc_error_at(im->d, VITC_BAD_INPUT, node, op, "unsupported attribute '%s'", ap->name ? ap->name : "");
        return -1;
    }
    memset(out, 0, sizeof *out);
    out->id = (ir_attr_id)id;
    out->tensor = -1;
    ir_arena *a = im->g->arena;
    switch (ap->type) {
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT:
        out->kind = IR_AT_INT;
        out->i = ap->i;
        return 0;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT:
        out->kind = IR_AT_FLOAT;
        out->f = ap->f;
        return 0;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS:
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS: {
        int ints = ap->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
        size_t n = ints ? ap->n_ints : ap->n_floats, size = ints ? sizeof(int64_t) : sizeof(float);
        if (n > 4096)
            break;
        void *v = ir_alloc_array(a, n + 1, size);
        if (!v)
            goto oom;
        if (n) /* the array is NULL when there are none */
            memcpy(v, ints ? (const void *)ap->ints : (const void *)ap->floats, n * size);
        out->kind = ints ? IR_AT_INTS : IR_AT_FLOATS;
        out->n = (int)n;
        if (ints)
            out->ints = v;
        else
            out->floats = v;
        return 0;
    }
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING:
        if (ap->s.len > 4096)
            break;
        out->kind = IR_AT_STRING;
        out->n = (int)ap->s.len;
        out->s = ir_strndup(a, ap->s.len ? (const char *)ap->s.data : "", ap->s.len);
        if (!out->s)
            goto oom;
        if (strlen(out->s) != ap->s.len)
            break;
        return 0;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR: {
        if (!ap->t)
            break;
        char what[256];
        snprintf(what, sizeof what, "node '%s' (%s): attribute '%s'", node, op, ap->name);
        out->kind = IR_AT_TENSOR;
        out->tensor = import_tensor(im, ap->t, ap->name, what);
        return out->tensor < 0 ? -1 : 0;
    }
    default:
        break;
    }
    vitc_error_at(im->d, VITC_BAD_INPUT, node, op, "attribute '%s' has an unsupported type or size", ap->name);
    return -1;
oom:
    vitc_error(im->d, VITC_INTERNAL, NULL, "out of memory");
    return -1;
}

/* The kind ONNX gives each attribute vitc reads. */
static ir_attr_kind attr_kind(ir_attr_id id)
{
    switch (id) {
    case IR_ATTR_ALPHA: case IR_ATTR_BETA: case IR_ATTR_EPSILON: case IR_ATTR_MOMENTUM:
    case IR_ATTR_VALUE_FLOAT: case IR_ATTR_RATIO: case IR_ATTR_CUBIC_COEFF_A: case IR_ATTR_EXTRAPOLATION_VALUE:
        return IR_AT_FLOAT;
    case IR_ATTR_AXES: case IR_ATTR_DILATIONS: case IR_ATTR_KERNEL_SHAPE: case IR_ATTR_PADS: case IR_ATTR_PERM:
    case IR_ATTR_SPLIT: case IR_ATTR_STRIDES: case IR_ATTR_VALUE_INTS:
        return IR_AT_INTS;
    case IR_ATTR_VALUE_FLOATS: return IR_AT_FLOATS;
    case IR_ATTR_APPROXIMATE: case IR_ATTR_AUTO_PAD: case IR_ATTR_EQUATION: case IR_ATTR_MODE:
    case IR_ATTR_COORD_MODE: case IR_ATTR_NEAREST_MODE: case IR_ATTR_KEEP_ASPECT_RATIO_POLICY: case IR_ATTR_REDUCTION:
        return IR_AT_STRING;
    case IR_ATTR_VALUE: return IR_AT_TENSOR;
    default: return IR_AT_INT;
    }
}

/* Refuses an attribute of the wrong kind or one given twice: either would
 * otherwise be silently replaced by its default. */
static int check_attr(importer *im, const Onnx__NodeProto *np, const ir_attr *attrs, int nattrs, const ir_attr *a)
{
    static const char *const kinds[] = {"an int", "a float", "ints", "floats", "a string", "a tensor"};
    const char *node = np->name ? np->name : "";
    if (a->kind != attr_kind(a->id)) {
        vitc_error_at(im->d, VITC_BAD_INPUT, node, np->op_type, "attribute '%s' must be %s, not %s",
                      ir_attr_name(a->id), kinds[attr_kind(a->id)], kinds[a->kind]);
        return -1;
    }
    for (int i = 0; i < nattrs; i++)
        if (attrs[i].id == a->id) {
            vitc_error_at(im->d, VITC_BAD_INPUT, node, np->op_type, "attribute '%s' is given twice",
                          ir_attr_name(a->id));
            return -1;
        }
    return 0;
}

/* Constant node -> constant value named by its output. */
static int import_constant(importer *im, const Onnx__NodeProto *np, const ir_attr *attrs, int nattrs)
{
    const char *node = np->name ? np->name : "";
    if (np->n_output != 1 || nattrs != 1 || !np->output[0] || !*np->output[0]) {
        vitc_error_at(im->d, VITC_BAD_INPUT, node, np->op_type, "a Constant needs one output and one value attribute");
        return -1;
    }
    const char *name = np->output[0];
    const ir_attr *at = &attrs[0];
    int id = -1;
    int64_t n = at->n;
    switch (at->id) {
    case IR_ATTR_VALUE:
        if (at->kind != IR_AT_TENSOR)
            break;
        /* Rename the attribute's constant after the output. */
        id = at->tensor;
        im->g->values[id].name = ir_strdup(im->g->arena, name);
        break;
    case IR_ATTR_VALUE_FLOAT: id = ir_add_const(im->g, name, IR_F32, 0, NULL, &at->f, sizeof(float)); break;
    case IR_ATTR_VALUE_INT: id = ir_add_const(im->g, name, IR_I64, 0, NULL, &at->i, sizeof(int64_t)); break;
    case IR_ATTR_VALUE_FLOATS:
        id = ir_add_const(im->g, name, IR_F32, 1, &n, at->floats, (size_t)n * sizeof(float));
        break;
    case IR_ATTR_VALUE_INTS:
        id = ir_add_const(im->g, name, IR_I64, 1, &n, at->ints, (size_t)n * sizeof(int64_t));
        break;
    default: break;
    }
    if (id < 0) {
        vitc_error_at(im->d, VITC_BAD_INPUT, node, np->op_type, "unsupported Constant attribute '%s'",
                      ir_attr_name(at->id));
        return -1;
    }
    if (im->scope)
        return scope_define(im, im->scope, im->g->values[id].name, id, node, np->op_type) ? -1 : 0;
    return define(im, im->g->values[id].name, id, node, np->op_type);
}

/* "2", "1 to 3" or "1 or more". */
static const char *arity_str(char *buf, size_t n, int lo, int hi)
{
    if (hi == VAR)
        snprintf(buf, n, "%d or more", lo);
    else if (lo == hi)
        snprintf(buf, n, "%d", lo);
    else
        snprintf(buf, n, "%d to %d", lo, hi);
    return buf;
}

/* One node: op lookup, arity, attributes, input references, outputs. */
/* In the names map: an output of a node that was refused (its error
 * reported), so that nodes reading it are skipped without an error of their
 * own: one unsupported op gives one message, not one per reader. */
enum { FROM_REFUSED_NODE = -2 };

static void refuse_outputs(importer *im, const Onnx__NodeProto *np)
{
    for (size_t i = 0; i < np->n_output && i < 1024; i++)
        if (np->output[i] && *np->output[i] && map_get(&im->names, np->output[i]) == -1)
            map_put(&im->names, np->output[i], FROM_REFUSED_NODE);
}

static int import_node_checked(importer *im, const Onnx__NodeProto *np);

/* The type the model declares for a tensor (its value_info, or the graph
 * output of that name) into v: the element type, and the shape where every
 * dimension is a number or the inputs' symbolic batch; v is left alone
 * where the model declares nothing usable. */
static void declared_type(importer *im, const char *name, ir_value *v)
{
    const Onnx__GraphProto *gp = im->gp;
    if (!im->declared_vi) {
        size_t n = gp->n_value_info + gp->n_output;
        im->declared_vi = ir_alloc_array(im->g->arena, n + 1, sizeof *im->declared_vi);
        if (!im->declared_vi || map_init(&im->declared, im->g->arena, n)) {
            im->declared_vi = NULL;
            return;
        }
        int k = 0;
        for (size_t i = 0; i < n; i++) { /* the first declaration of a name wins */
            const Onnx__ValueInfoProto *vi =
                i < gp->n_value_info ? gp->value_info[i] : gp->output[i - gp->n_value_info];
            if (vi->name && map_get(&im->declared, vi->name) < 0) {
                im->declared_vi[k] = vi;
                map_put(&im->declared, vi->name, k++);
            }
        }
    }
    int at = map_get(&im->declared, name);
    const Onnx__ValueInfoProto *vi = at >= 0 ? im->declared_vi[at] : NULL;
    const Onnx__TypeProto *tp = vi ? vi->type : NULL;
    if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type)
        return;
    const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
    int dt = tt->has_elem_type ? ir_dtype_from_onnx(tt->elem_type) : -1;
    if (dt >= 0)
        v->dtype = (ir_dtype)dt;
    if (!tt->shape || tt->shape->n_dim > IR_MAX_RANK)
        return;
    ir_dim dims[IR_MAX_RANK];
    for (size_t i = 0; i < tt->shape->n_dim; i++) {
        const Onnx__TensorShapeProto__Dimension *dim = tt->shape->dim[i];
        if (dim->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE && dim->dim_value >= 0 &&
            dim->dim_value <= ((int64_t)1 << 31))
            dims[i] = ir_dim_const(dim->dim_value);
        else if (dim->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM && im->batch_param &&
                 dim->dim_param && strcmp(dim->dim_param, im->batch_param) == 0)
            dims[i] = ir_dim_batch(1);
        else
            return;
    }
    v->rank = (int)tt->shape->n_dim;
    memcpy(v->dims, dims, sizeof(ir_dim) * (size_t)v->rank);
}

/* Records a node whose operator (or domain) vitc does not take: np, or an
 * If np whose branch holds `as`, the node named.  Returns 1 (refused: its
 * readers are skipped) unless the import keeps going without such nodes,
 * where np's outputs become values of their declared type and 0 is
 * returned. */
static int unsupported_as(importer *im, const Onnx__NodeProto *np, const Onnx__NodeProto *as, const char *domain)
{
    ir_arena *a = im->g->arena;
    if (im->nunsupported == im->cap_unsupported) {
        int cap = im->cap_unsupported ? 2 * im->cap_unsupported : 16;
        onnx_unsupported *p = realloc(im->unsupported, sizeof *p * (size_t)cap);
        if (!p)
            return vitc_error(im->d, VITC_INTERNAL, NULL, "out of memory"), 1;
        im->unsupported = p;
        im->cap_unsupported = cap;
    }
    onnx_unsupported *u = &im->unsupported[im->nunsupported];
    memset(u, 0, sizeof *u);
    u->name = ir_strdup(a, as->name ? as->name : "");
    u->op_type = ir_strdup(a, as->op_type ? as->op_type : "");
    u->domain = domain ? ir_strdup(a, domain) : NULL;
    u->before = im->g->nnodes;
    if (!u->name || !u->op_type || (domain && !u->domain))
        return vitc_error(im->d, VITC_INTERNAL, NULL, "out of memory"), 1;
    im->nunsupported++;
    if (!im->keep_unsupported)
        return 1;
    if (np->n_input > 1024 || np->n_output > 1024) {
        vitc_error_at(im->d, VITC_BAD_INPUT, u->name, u->op_type, "has %zu inputs and %zu outputs", np->n_input,
                      np->n_output);
        return 1;
    }
    const char **ins = ir_alloc_array(a, np->n_input + 1, sizeof(char *));
    int *outs = ir_alloc_array(a, np->n_output + 1, sizeof(int));
    if (!ins || !outs)
        return vitc_error(im->d, VITC_INTERNAL, NULL, "out of memory"), 1;
    for (size_t i = 0; i < np->n_input; i++)
        if (!(ins[i] = ir_strdup(a, np->input[i] ? np->input[i] : "")))
            return vitc_error(im->d, VITC_INTERNAL, NULL, "out of memory"), 1;
    for (size_t i = 0; i < np->n_output; i++) {
        const char *out = np->output[i];
        outs[i] = -1;
        if (!out || !*out)
            continue;
        if (map_get(&im->names, out) != -1) {
            vitc_error_at(im->d, VITC_BAD_INPUT, u->name, u->op_type, "output '%s' is already defined earlier", out);
            return 1;
        }
        int id = ir_add_value(im->g, out, IR_VAL_INPUT, IR_F32);
        if (id < 0)
            return vitc_error(im->d, VITC_INTERNAL, NULL, "out of memory"), 1;
        declared_type(im, out, &im->g->values[id]);
        map_put(&im->names, im->g->values[id].name, id);
        outs[i] = id;
    }
    u->ninputs = (int)np->n_input;
    u->noutputs = (int)np->n_output;
    u->inputs = ins;
    u->outputs = outs;
    return 0;
}

static int unsupported(importer *im, const Onnx__NodeProto *np, const char *domain)
{
    return unsupported_as(im, np, np, domain);
}

/* ---- If: its branches, read into ir_branch (ir.h) ---- */

/* Grows a malloc'ed array of elem-sized items to hold need of them; -1
 * when out of memory. */
static int grow_array(void **arr, int *cap, int need, size_t elem)
{
    if (need <= *cap)
        return 0;
    if (need > (1 << 24))
        return -1;
    int ncap = *cap ? *cap : 16;
    while (ncap < need)
        ncap *= 2;
    void *p = realloc(*arr, (size_t)ncap * elem);
    if (!p)
        return -1;
    *arr = p;
    *cap = ncap;
    return 0;
}

static void scope_free(branch_scope *s)
{
    free(s->nodes);
    free(s->local_names);
    free(s->capture);
    free(s->capture_src);
}

/* 1 if name is defined in scope s, a scope around it or the main graph. */
static int defined_around(const importer *im, const branch_scope *s, const char *name)
{
    for (; s; s = s->parent)
        if (map_get(&s->names, name) != -1)
            return 1;
    return map_get(&im->names, name) != -1;
}

/* A new local of s named name (capture: its capture index, or -1 for a
 * node's output): its index, or -1 when out of memory (reported). */
static int scope_new_local(importer *im, branch_scope *s, const char *name, int capture)
{
    int cap = s->cap_locals, cap2 = s->cap_locals;
    const char *dup = ir_strdup(im->g->arena, name);
    if (!dup || grow_array((void **)&s->local_names, &cap, s->nlocals + 1, sizeof(char *)) ||
        grow_array((void **)&s->capture, &cap2, s->nlocals + 1, sizeof(int)) ||
        map_put(&s->names, dup, IR_BRANCH_REF(s->nlocals))) {
        vitc_error(im->d, VITC_INTERNAL, NULL, "out of memory");
        return -1;
    }
    s->cap_locals = cap < cap2 ? cap : cap2;
    s->local_names[s->nlocals] = dup;
    s->capture[s->nlocals] = capture;
    return s->nlocals++;
}

/* Resolves name from scope s outwards (s NULL: the main graph) into *ref: a
 * value index in the main graph; in a branch a constant's value index or a
 * local's reference (a name of a scope around it becomes a capture of s,
 * and of every scope in between).  0, or 1 when no scope defines it, 2 when
 * it is an output of a refused node, 3 after reporting an error. */
static int lookup(importer *im, branch_scope *s, const char *name, int *ref)
{
    if (!s) {
        int v = map_get(&im->names, name);
        if (v == FROM_REFUSED_NODE)
            return 2;
        if (v < 0)
            return 1;
        *ref = v;
        return 0;
    }
    int v = map_get(&s->names, name), outer;
    if (v != -1) {
        *ref = v;
        return 0;
    }
    int st = lookup(im, s->parent, name, &outer);
    if (st)
        return st;
    if (outer >= 0 && im->g->values[outer].kind == IR_VAL_CONST) { /* read where it is: no dependence to keep */
        *ref = outer;
        return 0;
    }
    if (s->ncaptures >= IF_MAX_CAPTURES) {
        vitc_error(im->d, VITC_BAD_INPUT, NULL, "an If's branch reads more than %d values of the graph around it",
                   IF_MAX_CAPTURES);
        return 3;
    }
    if (grow_array((void **)&s->capture_src, &s->cap_captures, s->ncaptures + 1, sizeof(int))) {
        vitc_error(im->d, VITC_INTERNAL, NULL, "out of memory");
        return 3;
    }
    int j = scope_new_local(im, s, name, s->ncaptures);
    if (j < 0)
        return 3;
    s->capture_src[s->ncaptures++] = outer;
    *ref = IR_BRANCH_REF(j);
    return 0;
}

/* Defines name as constant value id in branch scope s; 0, or 1 after reporting. */
static int scope_define(importer *im, branch_scope *s, const char *name, int id, const char *node,
                        const char *op_type)
{
    if (defined_around(im, s, name)) {
        vitc_error_at(im->d, VITC_BAD_INPUT, node, op_type, "'%s' is already defined in the branch or around it", name);
        return 1;
    }
    if (map_put(&s->names, im->g->values[id].name, id)) {
        vitc_error(im->d, VITC_INTERNAL, NULL, "out of memory");
        return 1;
    }
    return 0;
}

/* Appends a node to branch scope s, as ir_add_node does to a graph; -1 when out of memory. */
static int scope_add_node(importer *im, branch_scope *s, ir_op op, const char *name, const char *op_type, int nin,
                          const int *in, int nout, const int *out, int nattrs, const ir_attr *attrs)
{
    ir_arena *a = im->g->arena;
    if (grow_array((void **)&s->nodes, &s->cap_nodes, s->nnodes + 1, sizeof(ir_node)))
        return -1;
    ir_node *n = &s->nodes[s->nnodes];
    memset(n, 0, sizeof *n);
    n->op = op;
    n->name = ir_strdup(a, name);
    n->op_type = ir_strdup(a, op_type);
    n->ninputs = nin;
    n->noutputs = nout;
    n->nattrs = nattrs;
    n->inputs = ir_alloc_array(a, (size_t)nin + 1, sizeof(int));
    n->outputs = ir_alloc_array(a, (size_t)nout + 1, sizeof(int));
    n->attrs = ir_alloc_array(a, (size_t)nattrs + 1, sizeof(ir_attr));
    if (!n->name || !n->op_type || !n->inputs || !n->outputs || !n->attrs)
        return -1;
    if (nin)
        memcpy(n->inputs, in, (size_t)nin * sizeof(int));
    if (nout)
        memcpy(n->outputs, out, (size_t)nout * sizeof(int));
    if (nattrs)
        memcpy(n->attrs, attrs, (size_t)nattrs * sizeof(ir_attr));
    s->nnodes++;
    return 0;
}

/* A node of a branch whose operator vitc does not take: the If around it is
 * refused, reported with this node (the first such of its branches). */
static int scope_unsupported(importer *im, const Onnx__NodeProto *np, const char *domain)
{
    if (!im->scope->unsupported) {
        im->scope->unsupported = np;
        im->scope->unsupported_domain = domain;
    }
    return 1;
}

/* Defines output `name` of a node in the current scope into *out (a value
 * index; in a branch a local's reference): 0, or 1 after reporting. */
static int define_output(importer *im, const char *node, const char *op_type, const char *name, int *out)
{
    branch_scope *s = im->scope;
    if (s ? defined_around(im, s, name) : map_get(&im->names, name) >= 0) {
        vitc_error_at(im->d, VITC_BAD_INPUT, node, op_type, "output '%s' is already defined earlier", name);
        return 1;
    }
    if (s) {
        int j = scope_new_local(im, s, name, -1);
        *out = IR_BRANCH_REF(j);
        return j < 0;
    }
    int id = ir_add_value(im->g, name, IR_VAL_NODE, IR_F32);
    if (id < 0 || map_put(&im->names, im->g->values[id].name, id)) {
        vitc_error(im->d, VITC_INTERNAL, NULL, "out of memory");
        return 1;
    }
    *out = id;
    return 0;
}

/* Reads branch `which` (graph bg) of If np into b, in scope s (freed by the
 * caller).  0, or 1 when refused: an error reported, or a node whose
 * operator vitc does not take (s->unsupported). */
static int import_branch(importer *im, const Onnx__NodeProto *np, const char *which, const Onnx__GraphProto *bg,
                         branch_scope *s, ir_branch *b)
{
    const char *node = np->name ? np->name : "", *op_type = np->op_type;
    vitc_diag *d = im->d;
    s->parent = im->scope;
    s->depth = im->scope ? im->scope->depth + 1 : 1;
    if (bg->n_input || bg->n_sparse_initializer || bg->n_output != np->n_output) {
        vitc_error_at(d, VITC_BAD_INPUT, node, op_type,
                      "its %s has %zu inputs, %zu sparse initializers and %zu outputs; an If's branches take no "
                      "inputs and give one output per output of the If (%zu)", which, bg->n_input,
                      bg->n_sparse_initializer, bg->n_output, np->n_output);
        return 1;
    }
    if (map_init(&s->names, im->g->arena, bg->n_initializer + bg->n_node)) {
        vitc_error(d, VITC_INTERNAL, NULL, "out of memory");
        return 1;
    }
    for (size_t i = 0; i < bg->n_initializer; i++) {
        Onnx__TensorProto *t = bg->initializer[i];
        const char *name = t->name ? t->name : "";
        char what[600];
        snprintf(what, sizeof what, "node '%.256s' (If): %s: initializer '%.256s'", node, which, name);
        if (!*name) {
            vitc_error_at(d, VITC_BAD_INPUT, node, op_type, "an initializer of its %s has no name", which);
            return 1;
        }
        int id = import_tensor(im, t, name, what);
        if (id < 0 || scope_define(im, s, im->g->values[id].name, id, node, op_type))
            return 1;
    }
    int refused = 0;
    im->scope = s;
    for (size_t i = 0; i < bg->n_node && !refused; i++)
        refused = import_node_checked(im, bg->node[i]);
    im->scope = s->parent;
    if (refused)
        return 1;
    ir_arena *a = im->g->arena;
    b->noutputs = (int)bg->n_output;
    b->outputs = ir_alloc_array(a, bg->n_output + 1, sizeof(int));
    b->nodes = ir_alloc_array(a, (size_t)s->nnodes + 1, sizeof(ir_node));
    b->local_names = ir_alloc_array(a, (size_t)s->nlocals + 1, sizeof(char *));
    b->capture = ir_alloc_array(a, (size_t)s->nlocals + 1, sizeof(int));
    if (!b->outputs || !b->nodes || !b->local_names || !b->capture) {
        vitc_error(d, VITC_INTERNAL, NULL, "out of memory");
        return 1;
    }
    for (size_t k = 0; k < bg->n_output; k++) {
        const char *name = bg->output[k]->name ? bg->output[k]->name : "";
        int st = *name ? lookup(im, s, name, &b->outputs[k]) : 1;
        if (st == 1)
            vitc_error_at(d, VITC_BAD_INPUT, node, op_type,
                          "output %zu of its %s, '%s', is neither computed in it nor a value of the graph around it",
                          k, which, name);
        if (st)
            return 1;
    }
    if (s->nnodes)
        memcpy(b->nodes, s->nodes, sizeof(ir_node) * (size_t)s->nnodes);
    if (s->nlocals) {
        memcpy(b->local_names, s->local_names, sizeof(char *) * (size_t)s->nlocals);
        memcpy(b->capture, s->capture, sizeof(int) * (size_t)s->nlocals);
    }
    b->nnodes = s->nnodes;
    b->nlocals = s->nlocals;
    b->ncaptures = s->ncaptures;
    return 0;
}

/* If: both branches read (into the graph's branches), the node made with
 * the condition and every value of the scope around it the branches read
 * as its inputs.  0, or 1 when refused. */
static int import_if(importer *im, const Onnx__NodeProto *np)
{
    static const char *const which[2] = {"then_branch", "else_branch"};
    const char *node = np->name ? np->name : "", *op_type = np->op_type;
    vitc_diag *d = im->d;
    int before = d->nerrors;
    const Onnx__GraphProto *bg[2] = {NULL, NULL};
    if (np->n_input != 1)
        vitc_error_at(d, VITC_BAD_INPUT, node, op_type, "has %zu inputs; an If reads one, its condition", np->n_input);
    if (im->scope && im->scope->depth >= IF_MAX_DEPTH)
        vitc_error_at(d, VITC_BAD_INPUT, node, op_type, "is nested in the branches of %d Ifs; vitc reads %d at most",
                      im->scope->depth, IF_MAX_DEPTH);
    for (size_t i = 0; i < np->n_attribute; i++) {
        const Onnx__AttributeProto *ap = np->attribute[i];
        const char *an = ap->name ? ap->name : "";
        int k = strcmp(an, which[0]) == 0 ? 0 : strcmp(an, which[1]) == 0 ? 1 : -1;
        if (k < 0)
            vitc_error_at(d, VITC_BAD_INPUT, node, op_type, "unsupported attribute '%s'", an);
        else if (ap->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH || !ap->g)
            vitc_error_at(d, VITC_BAD_INPUT, node, op_type, "attribute '%s' must be a graph", an);
        else if (bg[k])
            vitc_error_at(d, VITC_BAD_INPUT, node, op_type, "attribute '%s' is given twice", an);
        else
            bg[k] = ap->g;
    }
    if (d->nerrors == before && (!bg[0] || !bg[1]))
        vitc_error_at(d, VITC_BAD_INPUT, node, op_type, "needs both branches, then_branch and else_branch");
    if (d->nerrors != before)
        return 1;
    const char *cond = np->input[0] ? np->input[0] : "";
    int c = -1, st = *cond ? lookup(im, im->scope, cond, &c) : 1;
    if (st == 1)
        vitc_error_at(d, VITC_BAD_INPUT, node, op_type,
                      "its condition '%s' is not a graph input, an initializer or the output of an earlier node", cond);
    if (st)
        return 1;
    branch_scope s[2];
    ir_branch b[2];
    memset(s, 0, sizeof s);
    memset(b, 0, sizeof b);
    int refused = import_branch(im, np, which[0], bg[0], &s[0], &b[0]) ||
                  import_branch(im, np, which[1], bg[1], &s[1], &b[1]);
    const Onnx__NodeProto *u = s[0].unsupported ? s[0].unsupported : s[1].unsupported;
    const char *udomain = s[0].unsupported ? s[0].unsupported_domain : s[1].unsupported_domain;
    int ncap = s[0].ncaptures + s[1].ncaptures;
    int *in = refused ? NULL : malloc(sizeof(int) * ((size_t)ncap + 1));
    if (!refused && in) {
        in[0] = c;
        for (int k = 0; k < s[0].ncaptures; k++)
            in[1 + k] = s[0].capture_src[k];
        for (int k = 0; k < s[1].ncaptures; k++)
            in[1 + s[0].ncaptures + k] = s[1].capture_src[k];
    }
    scope_free(&s[0]);
    scope_free(&s[1]);
    if (refused) {
        if (!u || d->nerrors != before)
            return 1; /* an error says why */
        if (im->scope)
            return scope_unsupported(im, u, udomain);
        return unsupported_as(im, np, u, udomain);
    }
    b[0].capture_base = 0;
    b[1].capture_base = b[0].ncaptures;
    int ti = in ? ir_add_branch(im->g, &b[0]) : -1, ei = ti >= 0 ? ir_add_branch(im->g, &b[1]) : -1;
    ir_attr attrs[2] = {{.id = IR_ATTR_THEN_BRANCH, .kind = IR_AT_INT, .i = ti, .tensor = -1},
                        {.id = IR_ATTR_ELSE_BRANCH, .kind = IR_AT_INT, .i = ei, .tensor = -1}};
    int outputs[1024];
    for (size_t i = 0; ei >= 0 && i < np->n_output && d->nerrors == before; i++) {
        outputs[i] = -1;
        if (np->output[i] && *np->output[i])
            define_output(im, node, op_type, np->output[i], &outputs[i]);
    }
    if (ei < 0)
        vitc_error(d, VITC_INTERNAL, NULL, "out of memory");
    else if (d->nerrors == before &&
             (im->scope ? scope_add_node(im, im->scope, IR_OP_IF, node, op_type, 1 + ncap, in, (int)np->n_output,
                                         outputs, 2, attrs)
                        : ir_add_node(im->g, IR_OP_IF, node, op_type, 1 + ncap, in, (int)np->n_output, outputs, 2,
                                      attrs)) < 0)
        vitc_error(d, VITC_INTERNAL, NULL, "out of memory");
    free(in);
    return d->nerrors != before;
}

static void import_node(importer *im, const Onnx__NodeProto *np)
{
    if (import_node_checked(im, np))
        refuse_outputs(im, np);
}

/* 0 when the node was added (or was a Constant), 1 when it was refused. */
static int import_node_checked(importer *im, const Onnx__NodeProto *np)
{
    const char *node = np->name ? np->name : "", *op_type = np->op_type ? np->op_type : "";
    vitc_diag *d = im->d;
    int before = d->nerrors;
    /* the default domain, and of com.microsoft the ops of ONNX Runtime's QOperator format (OPF_CONTRIB) */
    const char *domain = np->domain && *np->domain && strcmp(np->domain, "ai.onnx") != 0 ? np->domain : NULL;
    int op = ir_op_from_onnx_domain(domain, op_type);
    if (op < 0)
        return im->scope ? scope_unsupported(im, np, domain) : unsupported(im, np, domain);
    const ir_op_info *info = &ir_op_table[op];
    if ((int)np->n_input < info->min_in || (info->max_in != VAR && (int)np->n_input > info->max_in) ||
        (int)np->n_output < info->min_out || (info->max_out != VAR && (int)np->n_output > info->max_out) ||
        np->n_input > 1024 || np->n_output > 1024 || np->n_attribute > 64) {
        char in[32], out[32];
        vitc_error_at(d, VITC_BAD_INPUT, node, op_type, "has %zu inputs and %zu outputs; %s takes %s inputs and %s outputs",
                      np->n_input, np->n_output, info->name, arity_str(in, sizeof in, info->min_in, info->max_in),
                      arity_str(out, sizeof out, info->min_out, info->max_out));
        return 1;
    }
    if (op == IR_OP_IF)
        return import_if(im, np);
    ir_attr attrs[64];
    int nattrs = 0;
    for (size_t i = 0; i < np->n_attribute; i++) {
        const Onnx__AttributeProto *ap = np->attribute[i];
        if (ap->ref_attr_name && *ap->ref_attr_name) {
            vitc_error_at(d, VITC_BAD_INPUT, node, op_type, "attribute references (function bodies) are not supported");
            continue;
        }
        if (import_attr(im, np, ap, &attrs[nattrs]) == 0 && check_attr(im, np, attrs, nattrs, &attrs[nattrs]) == 0)
            nattrs++;
    }
    if (d->nerrors != before)
        return 1;
    if (op == IR_OP_CONSTANT) {
        import_constant(im, np, attrs, nattrs);
        return d->nerrors != before;
    }
    int inputs[1024], outputs[1024], refused_input = 0;
    for (size_t i = 0; i < np->n_input; i++) {
        const char *in = np->input[i];
        if (!in || !*in) {
            inputs[i] = -1;
            if ((int)i < info->min_in) /* only optional inputs may be left out */
                vitc_error_at(d, VITC_BAD_INPUT, node, op_type, "input %zu is required but its name is empty", i);
            continue;
        }
        int st = lookup(im, im->scope, in, &inputs[i]);
        if (st == 2)
            refused_input = 1;
        else if (st == 1)
            vitc_error_at(d, VITC_BAD_INPUT, node, op_type,
                          "input '%s' is not a graph input, an initializer or the output of an earlier node", in);
    }
    if (refused_input)
        return 1; /* that node's error says why */
    for (size_t i = 0; i < np->n_output; i++) {
        const char *out = np->output[i];
        outputs[i] = -1;
        if ((!out || !*out) && (int)i < info->min_out)
            vitc_error_at(d, VITC_BAD_INPUT, node, op_type, "output %zu is required but its name is empty", i);
        if (!out || !*out)
            continue;
        if (define_output(im, node, op_type, out, &outputs[i]) && d->status == VITC_INTERNAL)
            return 1;
    }
    if (d->nerrors != before)
        return 1;
    if ((im->scope ? scope_add_node(im, im->scope, (ir_op)op, node, op_type, (int)np->n_input, inputs,
                                    (int)np->n_output, outputs, nattrs, attrs)
                   : ir_add_node(im->g, (ir_op)op, node, op_type, (int)np->n_input, inputs, (int)np->n_output,
                                 outputs, nattrs, attrs)) < 0) {
        vitc_error(d, VITC_INTERNAL, NULL, "out of memory");
        return 1;
    }
    return 0;
}

static int import_opsets(importer *im, const Onnx__ModelProto *m)
{
    int64_t opset = -1;
    for (size_t i = 0; i < m->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *o = m->opset_import[i];
        if (!o->domain || !*o->domain || strcmp(o->domain, "ai.onnx") == 0)
            opset = o->version;
    }
    if (opset < 0)
        return vitc_error(im->d, VITC_BAD_INPUT, NULL, "the model imports no default-domain (ai.onnx) opset");
    if (opset < ONNX_MIN_OPSET || opset > ONNX_MAX_OPSET)
        return vitc_error(im->d, VITC_BAD_INPUT, NULL, "opset %lld is not supported (vitc reads opsets %d to %d)",
                          (long long)opset, ONNX_MIN_OPSET, ONNX_MAX_OPSET);
    im->g->opset = opset;
    return VITC_OK;
}

/* The batch the export fixed: the first dimension of the first input that
 * has one, where no input's first dimension is symbolic; else 0. */
static int64_t fixed_batch(const ir_graph *g)
{
    int64_t fixed = 0;
    for (int i = 0; i < g->ninputs; i++) {
        const ir_value *v = &g->values[g->inputs[i]];
        if (v->rank < 1)
            continue;
        if (v->dims[0].e != 0)
            return 0;
        if (!fixed)
            fixed = v->dims[0].k;
    }
    return fixed > 0 ? fixed : 0;
}

/* "ScatterND", "FusedThing (domain 'com.example')" or "(empty op_type)". */
static void op_label(const onnx_unsupported *u, char *buf, size_t n)
{
    if (u->domain)
        snprintf(buf, n, "%s (domain '%s')", *u->op_type ? u->op_type : "(empty op_type)", u->domain);
    else
        snprintf(buf, n, "%s", *u->op_type ? u->op_type : "(empty op_type)");
}

static int same_op(const onnx_unsupported *a, const onnx_unsupported *b)
{
    return strcmp(a->op_type, b->op_type) == 0 &&
           (a->domain && b->domain ? strcmp(a->domain, b->domain) == 0 : !a->domain && !b->domain);
}

void onnx_report_unsupported(const onnx_unsupported *u, int n, const char *next_step, vitc_diag *d)
{
    if (n <= 0)
        return;
    char msg[4096], label[512];
    size_t k = 0;
    int groups = 0, left = 0;
    for (int i = 0; i < n; i++) {
        int first = 1, count = 0;
        for (int j = 0; j < n && first; j++)
            first = j >= i || !same_op(&u[j], &u[i]);
        if (!first)
            continue;
        for (int j = i; j < n; j++)
            count += same_op(&u[j], &u[i]);
        if (k > sizeof msg - 600) { /* the rest only counted: the message stays one readable line */
            left++;
            continue;
        }
        op_label(&u[i], label, sizeof label);
        k += (size_t)snprintf(msg + k, sizeof msg - k, "%s%s x%d (%snode '%.256s')", groups ? ", " : "", label, count,
                              count > 1 ? "first: " : "", *u[i].name ? u[i].name : "<unnamed>");
        groups++;
    }
    if (left)
        snprintf(msg + k, sizeof msg - k, ", and %d more operator%s", left, left == 1 ? "" : "s");
    vitc_error(d, VITC_BAD_INPUT, NULL, "unsupported operator%s: %s", groups + left > 1 || n > 1 ? "s" : "", msg);
    int microsoft = 0;
    for (int i = 0; i < n && !microsoft; i++)
        microsoft = u[i].domain && strcmp(u[i].domain, "com.microsoft") == 0;
    if (microsoft) { /* what vitc takes of that domain: the table's OPF_CONTRIB ops */
        char ops[512];
        size_t m = 0;
        int count = 0, total = 0;
        for (int i = 0; i < IR_OP_COUNT; i++)
            total += ir_op_has((ir_op)i, OPF_CONTRIB);
        for (int i = 0; i < IR_OP_COUNT && m < sizeof ops - 64; i++) {
            if (!ir_op_has((ir_op)i, OPF_CONTRIB))
                continue;
            const char *sep = count == 0 ? "" : count == total - 1 ? " and " : ", ";
            m += (size_t)snprintf(ops + m, sizeof ops - m, "%s%s", sep, ir_op_name((ir_op)i));
            count++;
        }
        vitc_note(d, "of ONNX Runtime's domain com.microsoft vitc imports only the ops of its QOperator format (%s); "
                     "its other contrib ops, such as those its graph optimizations write (FusedMatMul, Gelu, "
                     "SkipLayerNormalization), are not supported: give vitc the model as exported, before them",
                  ops);
    }
    if (next_step)
        vitc_note(d, "next step: %s", next_step);
    else
        vitc_note(d, "next step: `vitc dump %s` prints the graph with %s marked '!! unsupported', with what %s "
                     "and what reads %s",
                  d->file ? d->file : "MODEL.onnx", n > 1 ? "these nodes" : "this node",
                  n > 1 ? "they read" : "it reads", n > 1 ? "them" : "it");
}

static ir_graph *import_model(const Onnx__ModelProto *m, const char *path, const char *model_dir,
                              onnx_import_opts *opts, vitc_diag *d)
{
    if (!m->graph) {
        vitc_error(d, VITC_BAD_INPUT, NULL, "the model has no graph");
        return NULL;
    }
    const Onnx__GraphProto *gp = m->graph;
    ir_graph *g = ir_graph_new(path);
    if (!g) {
        vitc_error(d, VITC_INTERNAL, NULL, "out of memory");
        return NULL;
    }
    importer im = {.g = g, .d = d, .model_dir = model_dir, .gp = gp,
                   .keep_unsupported = opts && opts->keep_unsupported, .opts = opts};
    /* Every name the map can receive: it never fills up (a full open-addressing
     * table would make lookups loop forever). */
    size_t expect = gp->n_initializer + gp->n_input + gp->n_node;
    for (size_t i = 0; i < gp->n_node; i++)
        expect += gp->node[i]->n_output;
    g->inputs = ir_alloc_array(g->arena, gp->n_input + 1, sizeof(int));
    g->outputs = ir_alloc_array(g->arena, gp->n_output + 1, sizeof(int));
    if (map_init(&im.names, g->arena, expect) || !g->inputs || !g->outputs) {
        vitc_error(d, VITC_INTERNAL, NULL, "out of memory");
        goto fail;
    }
    if (import_opsets(&im, m))
        goto fail;
    if (gp->n_sparse_initializer)
        vitc_error(d, VITC_BAD_INPUT, NULL, "sparse initializers are not supported");
    for (size_t i = 0; i < gp->n_initializer; i++) {
        Onnx__TensorProto *t = gp->initializer[i];
        const char *name = t->name ? t->name : "";
        char what[300];
        snprintf(what, sizeof what, "initializer '%.256s'", name);
        if (!*name) {
            vitc_error(d, VITC_BAD_INPUT, NULL, "an initializer has no name");
            continue;
        }
        int id = import_tensor(&im, t, name, what);
        if (id >= 0)
            define(&im, g->values[id].name, id, NULL, NULL);
    }
    int bad_shape_names = check_shape_names(&im);
    for (size_t i = 0; i < gp->n_input && !bad_shape_names; i++) {
        const char *name = gp->input[i]->name ? gp->input[i]->name : "";
        if (map_get(&im.names, name) >= 0 && g->values[map_get(&im.names, name)].kind == IR_VAL_CONST) {
            /* an initializer listed as an input (old-style default) */
            check_input_init(&im, gp->input[i], &g->values[map_get(&im.names, name)]);
            continue;
        }
        import_input(&im, gp->input[i]);
    }
    if (!d->status)
        check_shapes_used(&im);
    if (d->status)
        goto fail;
    g->fixed_batch = fixed_batch(g);
    for (size_t i = 0; i < gp->n_node; i++)
        import_node(&im, gp->node[i]);
    if (!im.keep_unsupported)
        onnx_report_unsupported(im.unsupported, im.nunsupported, NULL, d);
    else if (im.nunsupported && !d->status) {
        onnx_unsupported *u = ir_alloc_array(g->arena, (size_t)im.nunsupported, sizeof *u);
        if (!u) {
            vitc_error(d, VITC_INTERNAL, NULL, "out of memory");
            goto fail;
        }
        memcpy(u, im.unsupported, sizeof *u * (size_t)im.nunsupported);
        opts->unsupported = u;
        opts->nunsupported = im.nunsupported;
    }
    for (size_t i = 0; i < gp->n_output; i++) {
        const char *name = gp->output[i]->name ? gp->output[i]->name : "";
        int id = map_get(&im.names, name);
        if (id < 0 && !d->status)
            vitc_error(d, VITC_BAD_INPUT, NULL, "graph output '%s' is not produced by any node", name);
        g->outputs[g->noutputs++] = id;
    }
    if (gp->n_output == 0)
        vitc_error(d, VITC_BAD_INPUT, NULL, "the graph has no outputs");
    if (d->status)
        goto fail;
    free(im.unsupported);
    return g;
fail:
    free(im.unsupported);
    if (opts) {
        opts->unsupported = NULL;
        opts->nunsupported = 0;
    }
    ir_graph_free(g);
    return NULL;
}

static ir_graph *import_buffer(const void *buf, size_t len, const char *path, onnx_import_opts *opts, vitc_diag *d)
{
    if (len >= 4 && memcmp(buf, "\177ELF", 4) == 0) {
        vitc_error(d, VITC_BAD_INPUT, NULL,
                   "not an ONNX model but a shared library (a compiled model? `vitc inspect` and `vitc run` take those)");
        return NULL;
    }
    if (onnx_check_nesting(buf, len, &onnx__model_proto__descriptor, d))
        return NULL;
    Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, len, buf);
    if (!m) {
        vitc_error(d, VITC_BAD_INPUT, NULL, "not a valid ONNX model (the protobuf does not parse)");
        return NULL;
    }
    char dir[PATH_MAX];
    const char *model_dir = NULL;
    if (path && strlen(path) < sizeof dir) {
        strcpy(dir, path);
        model_dir = dirname(dir);
    }
    ir_graph *g = import_model(m, path, model_dir, opts, d);
    onnx__model_proto__free_unpacked(m, NULL);
    return g;
}

ir_graph *onnx_import_buffer(const void *buf, size_t len, const char *path, vitc_diag *d)
{
    return import_buffer(buf, len, path, NULL, d);
}

ir_graph *onnx_import_file(const char *path, vitc_diag *d) { return onnx_import_file_opts(path, NULL, d); }

ir_graph *onnx_import_file_opts(const char *path, onnx_import_opts *opts, vitc_diag *d)
{
    if (opts) {
        opts->unsupported = NULL;
        opts->nunsupported = 0;
    }
    if (!d->file)
        d->file = path;
    const unsigned char *buf;
    size_t len;
    if (onnx_map_file(path, (size_t)INT32_MAX, &buf, &len, d))
        return NULL;
    ir_graph *g = import_buffer(buf, len, path, opts, d);
    if (g)
        g->source_hash = vitc_model_hash(buf, len);
    onnx_unmap_file(buf, len);
    return g;
}
