/* cu_launch.c: see cu_launch.h. */
#include "codegen/cuda/cu_launch.h"

cu_launch *cu_launch_flat(cu_ctx *c, const char *kind, const char *label, cu_str *t, int node, unsigned threads,
                          cg_poly n, int batch_slot)
{
    int f = cu_add_kernel(c, kind, label, t);
    cu_str_free(t);
    cu_launch *l = cu_launch_new(c, f, node, threads, 0);
    if (!l)
        return NULL;
    l->grid[0] = n;
    l->div[0] = threads;
    cu_arg_int(c, l, batch_slot, cg_poly_dim(ir_dim_batch(1)));
    return l;
}
