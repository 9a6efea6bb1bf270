/* core/graph/build_elem.c — the builders of ABI 1.9's elementwise family that do not fit
 * bora_graph_api.unary and binary: constants of any shape and dtype (BORA_OP_FILL), ramps along
 * a named axis (BORA_OP_IOTA) and where (BORA_OP_WHERE), with the checks that keep a bad call a
 * build error that names the tensors. */
#include "build.h"

#include <math.h>

bora_tensor *api_full(bora_graph *gp, int32_t dtype, int32_t ndim, const bora_axis *axes,
                      double value)
{
    g_graph *g = (g_graph *)gp;
    if (g->status)
        return NULL;
    if (ndim > 0 && !axes) {
        g_fail(g, "full: %d axes but no axes given", ndim);
        return NULL;
    }
    if (g_check_axes(g, "full", "constant", ndim, axes))
        return NULL;
    if (!bora_dtype_size(dtype)) {
        g_fail(g, "full: unknown dtype %d", dtype);
        return NULL;
    }
    /* an integer constant must be exactly what was asked for, never a silent truncation */
    int integer = dtype == BORA_DTYPE_I32 || dtype == BORA_DTYPE_I64 || dtype == BORA_DTYPE_U8;
    double lo = dtype == BORA_DTYPE_I32 ? -2147483648.0 : dtype == BORA_DTYPE_U8 ? 0 : -0x1p63;
    double hi = dtype == BORA_DTYPE_I32 ? 2147483647.0 : dtype == BORA_DTYPE_U8 ? 255 : 0x1p63;
    if (integer && !(value == floor(value) && value >= lo && value <= hi &&
                     (dtype != BORA_DTYPE_I64 || value < hi))) {
        g_fail(g, "full: %.17g is not a value of an integer dtype %d (%.0f..%.0f); round it first",
               value, dtype, lo, dtype == BORA_DTYPE_I64 ? hi - 1 : hi);
        return NULL;
    }
    int64_t dims[BORA_MAX_DIMS];
    const char *names[BORA_MAX_DIMS];
    for (int i = 0; i < ndim; i++)
        dims[i] = axes[i].size, names[i] = g_intern(axes[i].name);
    gval *v = g_op1(g, BORA_OP_FILL, 0, NULL, dtype, ndim, dims, names);
    if (v)
        v->node->opt.scalar = (bora_opt_scalar){sizeof(bora_opt_scalar), 0, value};
    return v;
}

bora_tensor *api_iota(bora_graph *gp, bora_axis axis, int32_t dtype, double start, double step)
{
    g_graph *g = (g_graph *)gp;
    if (g->status)
        return NULL;
    if (g_check_axes(g, "iota", axis.name ? axis.name : "(no name)", 1, &axis))
        return NULL;
    if (dtype != BORA_DTYPE_F32 && dtype != BORA_DTYPE_F64 && dtype != BORA_DTYPE_I32) {
        g_fail(g, "iota along '%s': dtype %d; a ramp is f32, f64 or i32", axis.name, dtype);
        return NULL;
    }
    if (!isfinite(start) || !isfinite(step)) {
        g_fail(g, "iota along '%s': start %g and step %g must be finite", axis.name, start, step);
        return NULL;
    }
    if (dtype == BORA_DTYPE_I32) {
        /* every value exact: integer start and step, both ends within i32 (a ramp is monotone,
         * so its ends bound it; the product is exact in double below 2^53) */
        double last = start + step * (double)(axis.size - 1);
        if (start != floor(start) || step != floor(step) || fabs(step) > 0x1p31 ||
            axis.size > ((int64_t)1 << 31) || fmin(start, last) < -2147483648.0 ||
            fmax(start, last) > 2147483647.0) {
            g_fail(g,
                   "iota along '%s' (%lld): an i32 ramp needs integer start and step and every "
                   "value within i32; start %.17g step %.17g reach %.17g",
                   axis.name, (long long)axis.size, start, step, last);
            return NULL;
        }
    }
    int64_t dims[1] = {axis.size};
    const char *names[1] = {g_intern(axis.name)};
    gval *v = g_op1(g, BORA_OP_IOTA, 0, NULL, dtype, 1, dims, names);
    if (v)
        v->node->opt.iota = (bora_opt_iota){sizeof(bora_opt_iota), 0, start, step};
    return v;
}

/* Whether every axis of a is in b. */
static int axes_within(const gval *a, const gval *b)
{
    for (int i = 0; i < a->ndim; i++)
        if (g_axis_index(b, a->names[i]) < 0)
            return 0;
    return 1;
}

gval *g_where(g_graph *g, gval *mask, gval *a, gval *b)
{
    gval *ops[3] = {mask, a, b};
    static const char *const what[3] = {"the mask", "a", "b"};
    char d0[256], d1[256];
    for (int k = 1; k < 3; k++)
        if (ops[k]->dtype != ops[0]->dtype) {
            g_describe(ops[0], d0, sizeof d0);
            g_describe(ops[k], d1, sizeof d1);
            g_fail(g, "where: %s %s and %s %s have different dtypes; cast one", what[0], d0,
                   what[k], d1);
            return NULL;
        }
    for (int p = 0; p < 3; p++)
        for (int q = p + 1; q < 3; q++)
            for (int i = 0; i < ops[p]->ndim; i++) {
                int j = g_axis_index(ops[q], ops[p]->names[i]);
                if (j >= 0 && ops[q]->dims[j] != ops[p]->dims[i]) {
                    g_describe(ops[p], d0, sizeof d0);
                    g_describe(ops[q], d1, sizeof d1);
                    g_fail(g, "where: axis '%s' is %lld in %s %s but %lld in %s %s",
                           ops[p]->names[i], (long long)ops[p]->dims[i], what[p], d0,
                           (long long)ops[q]->dims[j], what[q], d1);
                    return NULL;
                }
            }
    /* the operand holding every other's axes gives the result's shape and order (a first) */
    const gval *big = NULL;
    for (int k = 0; k < 3 && !big; k++) {
        int p = k == 2 ? 0 : k + 1; /* a, b, then the mask */
        if (axes_within(ops[0], ops[p]) && axes_within(ops[1], ops[p]) &&
            axes_within(ops[2], ops[p]))
            big = ops[p];
    }
    if (!big) {
        g_describe(a, d0, sizeof d0);
        g_describe(b, d1, sizeof d1);
        char dm[256];
        g_describe(mask, dm, sizeof dm);
        g_fail(g,
               "where: none of the mask %s, a %s and b %s has every axis of the others; "
               "broadcast one explicitly",
               dm, d0, d1);
        return NULL;
    }
    gval *ins[3];
    for (int k = 0; k < 3; k++)
        if (!(ins[k] = g_align_to(g, ops[k], big)))
            return NULL;
    return g_op1(g, BORA_OP_WHERE, 3, ins, big->dtype, big->ndim, big->dims, big->names);
}

bora_tensor *api_where(bora_graph *gp, bora_tensor *mask, bora_tensor *a, bora_tensor *b)
{
    g_graph *g = (g_graph *)gp;
    NEED(g, mask, a, b);
    if (!g_is_float(a->dtype)) {
        char d[256];
        g_describe(a, d, sizeof d);
        g_fail(g, "where: %s is not a floating-point tensor (a mask is 0/1 in a's dtype)", d);
        return NULL;
    }
    return g_where(g, mask, a, b);
}
