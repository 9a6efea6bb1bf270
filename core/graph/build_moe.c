/* core/graph/build_moe.c — the ops a mixture-of-experts layer routes its tokens with (ABI 1.13):
 * top_k over router scores, argsort and bincount of the chosen experts (the order that groups
 * rows by expert, and each group's size), and grouped_matmul, each group of rows times its own
 * expert's matrix with sizes known only at run time. The permutation itself is applied with
 * embedding (a gather, whose gradient is a scatter-add), so only the products carry gradients of
 * their own; the integer ops have none. */
#include "build.h"

#include <string.h>

/* ---- top_k -------------------------------------------------------------------------------- */

/* Whether v is dense row-major in its own axes' order (size-1 axes aside). */
static int dense(const gval *v)
{
    int64_t stride = 1;
    for (int i = v->ndim - 1; i >= 0; i--) {
        if (v->dims[i] > 1 && v->strides[i] != stride)
            return 0;
        stride *= v->dims[i];
    }
    return 1;
}

/* TOP_K over x2 (rows, D), dense: i32 (rows, k_axis), with each row's offset r·D or not. */
static gval *top_k_node(g_graph *g, gval *x2, int64_t k, const char *k_axis, int row_offsets)
{
    gval *ins[1] = {x2};
    int64_t dims[2] = {x2->dims[0], k};
    const char *names[2] = {x2->names[0], k_axis};
    gval *idx = g_op1(g, BORA_OP_TOP_K, 1, ins, BORA_DTYPE_I32, 2, dims, names);
    if (!idx)
        return NULL;
    idx->requires_grad = 0;
    idx->node->opt.top_k = (bora_opt_top_k){sizeof(bora_opt_top_k), row_offsets, k};
    return idx;
}

/* t (__rows, k_axis) back in x's axes: __rows split into the others, k_axis where axis was. */
static gval *unmerge(g_graph *g, gval *t, const gval *x, int ai, const char *k_axis)
{
    bora_graph *gp = &g->pub;
    bora_axis others[BORA_MAX_DIMS];
    const char *order[BORA_MAX_DIMS];
    int n_others = 0;
    for (int i = 0; i < x->ndim; i++) {
        if (i != ai)
            others[n_others++] = (bora_axis){x->names[i], x->dims[i]};
        order[i] = i == ai ? k_axis : x->names[i];
    }
    t = t ? api_split(gp, t, "__rows", n_others, others) : NULL;
    return t ? g_permute(g, t, x->ndim, order) : NULL;
}

bora_tensor *api_top_k(bora_graph *gp, bora_tensor *x, const char *axis, int64_t k,
                       const char *k_axis, bora_tensor **indices)
{
    g_graph *g = (g_graph *)gp;
    if (indices)
        *indices = NULL;
    NEED(g, x, axis, k_axis);
    char dx[256];
    g_describe(x, dx, sizeof dx);
    int ai = g_axis_index(x, axis);
    if (ai < 0) {
        g_fail(g, "top_k: x %s has no axis '%s'", dx, axis);
        return NULL;
    }
    if (x->dtype != BORA_DTYPE_F32 && x->dtype != BORA_DTYPE_F64) {
        g_fail(g, "top_k: x %s must be f32 or f64 (cast a bf16 or f16 x first)", dx);
        return NULL;
    }
    if (k < 1 || k > x->dims[ai]) {
        g_fail(g, "top_k: k is %lld; it must be within [1, %lld], the size of '%s' in x %s",
               (long long)k, (long long)x->dims[ai], axis, dx);
        return NULL;
    }
    if (!*k_axis || g_axis_index(x, k_axis) >= 0) {
        g_fail(g, "top_k: the new axis '%s' must be a name x %s does not have", k_axis, dx);
        return NULL;
    }
    if (g_numel(x) > INT32_MAX) {
        g_fail(g, "top_k: x %s has 2^31 elements or more, past what its i32 indices address", dx);
        return NULL;
    }
    /* (rows, D), dense: the other axes in their order, merged, then axis */
    const char *order[BORA_MAX_DIMS];
    int n_others = 0;
    for (int i = 0; i < x->ndim; i++)
        if (i != ai)
            order[n_others++] = x->names[i];
    order[n_others] = x->names[ai];
    gval *xp = g_permute(g, x, x->ndim, order);
    gval *x2 = NULL;
    if (xp && n_others > 0)
        x2 = api_merge(gp, xp, n_others, order, "__rows");
    else if (xp)
        x2 = api_broadcast(gp, xp, (bora_axis){"__rows", 1});
    x2 = x2 && !dense(x2) ? g_contiguous(g, x2) : x2;
    if (!x2)
        return NULL;
    int64_t R = x2->dims[0], D = x2->dims[1];
    /* the values: x's entries at the flat positions r·D + index, gathered from x as a table of
     * R·D one-element rows, so that their gradient is the gather's scatter-add */
    gval *flat = top_k_node(g, x2, k, k_axis, 1);
    const char *both[2] = {x2->names[0], x2->names[1]};
    gval *table = flat ? api_merge(gp, x2, 2, both, "__pos") : NULL;
    bora_axis parts[2] = {{"__pos", R * D}, {"__one", 1}};
    table = table ? api_split(gp, table, "__pos", 2, parts) : NULL;
    gval *values = table ? api_embedding(gp, table, flat, "__pos") : NULL;
    values = values ? api_split(gp, values, "__one", 0, NULL) : NULL;
    values = unmerge(g, values, x, ai, k_axis);
    if (values && indices) {
        *indices = unmerge(g, top_k_node(g, x2, k, k_axis, 0), x, ai, k_axis);
        if (!*indices)
            return NULL;
    }
    return values;
}

/* ---- routing: argsort and bincount -------------------------------------------------------- */

/* keys must be 1-d i32 with fewer than 2^31 entries; else the graph fails naming the op. */
static int check_keys(g_graph *g, const char *op, const gval *keys)
{
    char dk[256];
    g_describe(keys, dk, sizeof dk);
    if (keys->dtype != BORA_DTYPE_I32 || keys->ndim != 1) {
        g_fail(g, "%s: keys %s must be a 1-d i32 tensor (merge the axes first)", op, dk);
        return -1;
    }
    if (keys->dims[0] > INT32_MAX) {
        g_fail(g, "%s: keys %s have 2^31 entries or more, past what an i32 index names", op, dk);
        return -1;
    }
    return 0;
}

bora_tensor *api_argsort(bora_graph *gp, bora_tensor *keys)
{
    g_graph *g = (g_graph *)gp;
    NEED(g, keys);
    if (check_keys(g, "argsort", keys))
        return NULL;
    gval *ins[1] = {keys};
    gval *p = g_op1(g, BORA_OP_ARGSORT, 1, ins, BORA_DTYPE_I32, 1, keys->dims, keys->names);
    if (p)
        p->requires_grad = 0;
    return p;
}

bora_tensor *api_bincount(bora_graph *gp, bora_tensor *keys, bora_axis bins)
{
    g_graph *g = (g_graph *)gp;
    NEED(g, keys, bins.name);
    if (check_keys(g, "bincount", keys))
        return NULL;
    if (!*bins.name || bins.size < 1 || bins.size > INT32_MAX) {
        g_fail(g, "bincount: the bins axis '%s' needs a name and a size in [1, 2^31), not %lld",
               bins.name, (long long)bins.size);
        return NULL;
    }
    gval *ins[1] = {keys};
    gval *c = g_op1(g, BORA_OP_BINCOUNT, 1, ins, BORA_DTYPE_I32, 1, &bins.size, &bins.name);
    if (c)
        c->requires_grad = 0;
    return c;
}

/* ---- grouped_matmul ----------------------------------------------------------------------- */

/* An operand a kernel can read: one of its last two axes unit-stride (else copied dense). */
static gval *strided_ok(g_graph *g, gval *v)
{
    int n = v->ndim;
    return v->strides[n - 1] == 1 || v->strides[n - 2] == 1 ? v : g_contiguous(g, v);
}

gval *g_grouped_matmul(g_graph *g, gval *x, gval *w, gval *sizes)
{
    x = g_lowp(g, x);
    w = g_lowp(g, w);
    x = x ? strided_ok(g, x) : NULL;
    w = w ? strided_ok(g, w) : NULL;
    if (!x || !w)
        return NULL;
    gval *ins[3] = {x, w, sizes};
    int64_t dims[2] = {x->dims[0], w->dims[2]};
    const char *names[2] = {x->names[0], w->names[2]};
    int out = x->dtype == BORA_DTYPE_BF16 ? BORA_DTYPE_F32 : x->dtype;
    return g_op1(g, BORA_OP_GROUPED_MATMUL, 3, ins, out, 2, dims, names);
}

gval *g_grouped_matmul_grad(g_graph *g, gval *x, gval *dy, gval *sizes, const gval *w)
{
    x = g_lowp(g, x);
    dy = g_lowp(g, dy);
    x = x ? strided_ok(g, x) : NULL;
    dy = dy ? strided_ok(g, dy) : NULL;
    if (!x || !dy)
        return NULL;
    gval *ins[3] = {x, dy, sizes};
    int out = x->dtype == BORA_DTYPE_BF16 ? BORA_DTYPE_F32 : x->dtype;
    return g_op1(g, BORA_OP_GROUPED_MATMUL_GRAD, 3, ins, out, 3, w->dims, w->names);
}

bora_tensor *api_grouped_matmul(bora_graph *gp, bora_tensor *x, bora_tensor *w,
                                bora_tensor *group_sizes, const char *contract)
{
    g_graph *g = (g_graph *)gp;
    NEED(g, x, w, group_sizes, contract);
    char dx[256], dw[256], ds[256];
    g_describe(x, dx, sizeof dx);
    g_describe(w, dw, sizeof dw);
    g_describe(group_sizes, ds, sizeof ds);
    if (x->ndim != 2 || w->ndim != 3) {
        g_fail(g,
               "grouped_matmul: x %s must have 2 axes (rows, '%s') and w %s 3 (group, '%s', "
               "out); merge the others first",
               dx, contract, dw, contract);
        return NULL;
    }
    if (group_sizes->dtype != BORA_DTYPE_I32 || group_sizes->ndim != 1) {
        g_fail(g, "grouped_matmul: group_sizes %s must be a 1-d i32 tensor along w's group axis",
               ds);
        return NULL;
    }
    const char *group = group_sizes->names[0];
    int xk = g_axis_index(x, contract), wk = g_axis_index(w, contract), wg = g_axis_index(w, group);
    if (xk < 0 || wk < 0) {
        g_fail(g, "grouped_matmul: cannot contract '%s': %s lacks it", contract, xk < 0 ? dx : dw);
        return NULL;
    }
    if (x->dims[xk] != w->dims[wk]) {
        g_fail(g, "grouped_matmul: '%s' is %lld in x %s but %lld in w %s", contract,
               (long long)x->dims[xk], dx, (long long)w->dims[wk], dw);
        return NULL;
    }
    if (wg < 0 || wg == wk || w->dims[wg] != group_sizes->dims[0]) {
        g_fail(g, "grouped_matmul: w %s needs the group axis '%s' of group_sizes %s, of its size",
               dw, group, ds);
        return NULL;
    }
    const char *rows = x->names[1 - xk], *out = w->names[3 - wk - wg];
    if (g_axis_index(w, rows) >= 0 || !strcmp(rows, group)) {
        g_fail(g, "grouped_matmul: x's row axis '%s' %s is also an axis of w %s or group_sizes",
               rows, dx, dw);
        return NULL;
    }
    if (x->dtype != w->dtype || (x->dtype != BORA_DTYPE_F32 && x->dtype != BORA_DTYPE_F64)) {
        g_fail(g, "grouped_matmul: x %s and w %s need one dtype, f32 or f64", dx, dw);
        return NULL;
    }
    if (x->dims[1 - xk] > INT32_MAX) {
        g_fail(g, "grouped_matmul: x %s has 2^31 rows or more, past what i32 sizes count", dx);
        return NULL;
    }
    const char *xo[2] = {rows, contract}, *wo[3] = {group, contract, out};
    gval *xp = g_permute(g, x, 2, xo), *wp = g_permute(g, w, 3, wo);
    return xp && wp ? g_grouped_matmul(g, xp, wp, group_sizes) : NULL;
}
