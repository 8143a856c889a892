/* test_fixtures.c: the seed ViT family (tests/models) through import, shape
 * inference and the reference interpreter, against PyTorch's outputs, at
 * batch 1 and 3, within 1e-5 (max |out - ref| / max |ref|).  The same after
 * the pass pipeline, which must also have folded away every Shape chain. */
#include "testutil.h"

#include "frontend/onnx.h"
#include "ir/interp.h"
#include "passes/passes.h"

#include <stdio.h>
#include <string.h>

#define TOL 1e-5

static tu_fixture fixtures[64];
static int nfixtures;

/* Runs g on the fixture's batch-b input; returns max rel error vs PyTorch. */
static double run_batch(const tu_fixture *fx, ir_graph *g, int b)
{
    char rel[256], path[4096];
    vitc_diag d;
    ir_tensor in, ref, out = {0};
    snprintf(rel, sizeof rel, "tests/models/%s.b%d.input.npy", fx->family, b);
    vitc_diag_init(&d, rel);
    assert_int_equal(ir_npy_read(tu_path(path, sizeof path, rel), &in, &d), 0);
    snprintf(rel, sizeof rel, "tests/models/%s.b%d.output.npy", fx->family, b);
    assert_int_equal(ir_npy_read(tu_path(path, sizeof path, rel), &ref, &d), 0);
    assert_int_equal(g->ninputs, 1);
    assert_int_equal(g->noutputs, 1);
    vitc_diag_init(&d, fx->model);
    int st = ir_interpret(g, &in, &out, NULL, NULL, &d);
    if (st)
        fail_msg("%s batch %d: interpreter failed with status %d", fx->model, b, st);
    /* The inferred output shape, evaluated at this batch, is the actual one. */
    const ir_value *ov = &g->values[g->outputs[0]];
    assert_int_equal(ov->rank, out.rank);
    for (int i = 0; i < out.rank; i++)
        if (ir_dim_eval(ov->dims[i], b) != out.dims[i])
            fail_msg("%s batch %d: output dim %d inferred %lld, actual %lld", fx->model, b, i,
                     (long long)ir_dim_eval(ov->dims[i], b), (long long)out.dims[i]);
    assert_int_equal(out.rank, ref.rank);
    for (int i = 0; i < out.rank; i++)
        assert_int_equal(out.dims[i], ref.dims[i]);
    double e = ir_rel_error(&out, &ref);
    ir_tensor_free(&in), ir_tensor_free(&ref), ir_tensor_free(&out);
    return e;
}

static void test_interpreter_matches_pytorch(void **state)
{
    assert_true(nfixtures >= 15);
    double worst = 0;
    print_message("%-24s %12s %12s %12s %12s\n", "fixture", "b1 imported", "b3 imported", "b1 optimized",
                  "b3 optimized");
    for (int i = 0; i < nfixtures; i++) {
        const tu_fixture *fx = &fixtures[i];
        ir_graph *g = tu_load_fixture(fx);
        assert_int_equal(g->opset, fx->opset);
        double e1 = run_batch(fx, g, 1), e3 = run_batch(fx, g, 3);
        vitc_diag d;
        vitc_diag_init(&d, fx->model);
        if (pass_run_pipeline(g, NULL, NULL, &d))
            fail_msg("%s: pass pipeline failed (status %d)", fx->model, d.status);
        for (int k = 0; k < g->nnodes; k++)
            if (g->nodes[k].op == IR_OP_SHAPE)
                fail_msg("%s: a Shape node ('%s') survived shape folding", fx->model, g->nodes[k].name);
        double o1 = run_batch(fx, g, 1), o3 = run_batch(fx, g, 3);
        print_message("%-24s %12.3g %12.3g %12.3g %12.3g\n", fx->model, e1, e3, o1, o3);
        double m = e1 > e3 ? e1 : e3;
        m = m > o1 ? m : o1;
        m = m > o3 ? m : o3;
        if (!(m <= TOL))
            fail_msg("%s: error %g exceeds %g", fx->model, m, TOL);
        worst = m > worst ? m : worst;
        ir_graph_free(g);
    }
    print_message("worst error over %d fixtures: %.3g (tolerance %g)\n", nfixtures, worst, TOL);
}

/* Shapes are static in terms of the batch: every value has a rank, and only
 * dimensions that derive from the input's batch mention B. */
static void test_shapes_static_in_batch(void **state)
{
    for (int i = 0; i < nfixtures; i++) {
        ir_graph *g = tu_load_fixture(&fixtures[i]);
        for (int v = 0; v < g->nvalues; v++) {
            const ir_value *x = &g->values[v];
            if (x->kind == IR_VAL_NODE && x->producer >= 0 && x->rank < 0)
                fail_msg("%s: value '%s' has no shape", fixtures[i].model, x->name);
            for (int k = 0; k < x->rank; k++)
                if (x->dims[k].e > 1)
                    fail_msg("%s: value '%s' has a dimension in B^%d", fixtures[i].model, x->name, x->dims[k].e);
        }
        const ir_value *in = &g->values[g->inputs[0]];
        assert_int_equal(in->dims[0].e, 1);
        assert_int_equal(in->dims[2].k, fixtures[i].image);
        ir_graph_free(g);
    }
}

static int setup(void **state)
{
    (void)state;
    nfixtures = tu_fixtures(fixtures, 64);
    return 0;
}

TU_MAIN(setup, NULL, test_interpreter_matches_pytorch, test_shapes_static_in_batch)
