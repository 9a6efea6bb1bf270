/* core/graph/build_conv.c — a 1-d convolution (ABI 1.15; Whisper's audio stem): the builder,
 * which checks the axes and sizes and brings x to (batch, in, length) and w to (out, in, kernel),
 * the three kernel nodes (the convolution and its gradients for x and w, each a bilinear map of
 * its two operands, so autodiff.c differentiates each with the other two), and the decomposition
 * into primitives for backends without the kernels (and for Hessian graphs, whose tangent rules
 * cover primitives only). */
#include "build.h"

#include <string.h>

/* (L + 2p - K) / s + 1, or 0 when the padded length is shorter than the kernel. The caller
 * checked 0 <= p <= 2^60 and s >= 1, and L, K < 2^60 as axes of tensors that fit, so nothing
 * overflows. */
static int64_t out_length(int64_t L, int64_t K, int64_t p, int64_t s)
{
    int64_t span = L + 2 * p - K;
    return span < 0 ? 0 : span / s + 1;
}

/* The kernels read any strides of x; w and dy as matrices need one of their last two axes
 * unit-stride and w's (in, kernel) mergeable. */
static gval *matrix_ok(g_graph *g, gval *v)
{
    if (!v)
        return NULL;
    int dense = v->strides[2] == 1 && (v->dims[1] == 1 || v->strides[1] == v->dims[2]);
    return dense ? v : g_contiguous(g, v);
}

/* x is read by im2col at any strides (conv and the weight gradient); dy of the input gradient
 * and w are matrices to the products. */
static gval *conv_node(g_graph *g, int op, gval *a, gval *b, int64_t stride, int64_t padding,
                       int ndim, const int64_t *dims, const char *const *names)
{
    /* laid out first, then rounded: the bf16 copy's gradient goes to its f32 source unrounded */
    if (op == BORA_OP_CONV1D_GRAD_INPUT)
        a = matrix_ok(g, a);
    if (op != BORA_OP_CONV1D_GRAD_WEIGHT)
        b = matrix_ok(g, b);
    a = g_lowp(g, a);
    b = g_lowp(g, b);
    if (!a || !b)
        return NULL;
    gval *ins[2] = {a, b};
    int out = a->dtype == BORA_DTYPE_BF16 ? BORA_DTYPE_F32 : a->dtype;
    gval *y = g_op1(g, op, 2, ins, out, ndim, dims, names);
    if (y)
        y->node->opt.conv = (bora_opt_conv1d){sizeof(bora_opt_conv1d), (int32_t)stride, padding};
    return y;
}

gval *g_conv1d(g_graph *g, gval *x, gval *w, int64_t stride, int64_t padding)
{
    int64_t dims[3] = {x->dims[0], w->dims[0], out_length(x->dims[2], w->dims[2], padding, stride)};
    const char *names[3] = {x->names[0], w->names[0], x->names[2]};
    return conv_node(g, BORA_OP_CONV1D, x, w, stride, padding, 3, dims, names);
}

gval *g_conv1d_grad_input(g_graph *g, gval *dy, gval *w, int64_t stride, int64_t padding,
                          const gval *x)
{
    return conv_node(g, BORA_OP_CONV1D_GRAD_INPUT, dy, w, stride, padding, 3, x->dims, x->names);
}

gval *g_conv1d_grad_weight(g_graph *g, gval *x, gval *dy, int64_t stride, int64_t padding,
                           const gval *w)
{
    return conv_node(g, BORA_OP_CONV1D_GRAD_WEIGHT, x, dy, stride, padding, 3, w->dims, w->names);
}

/* ---- the decomposition -------------------------------------------------------------------- */

/* x (batch, in, length) padded with zeros to J·s + K - 1 positions (p before), split by the
 * stride, and for each tap k the positions j·s + k (j < J): a dot with w's tap k over the input
 * channels; the taps summed in order. */
static gval *conv_decomposed(g_graph *g, gval *x, gval *w, int64_t s, int64_t p)
{
    bora_graph *gp = &g->pub;
    const char *len = x->names[2], *in = x->names[1], *ker = w->names[2];
    int64_t L = x->dims[2], K = w->dims[2], J = out_length(L, K, p, s);
    int64_t padded = J * s + K - 1; /* >= L + 2p: the taps of the last window end inside it */
    if (padded != L) {
        int64_t dims[3] = {x->dims[0], x->dims[1], padded};
        gval *xi = x;
        x = g_op1(g, BORA_OP_PAD, 1, &xi, x->dtype, 3, dims, x->names);
        if (!x)
            return NULL;
        x->node->opt.pad = (bora_opt_pad){sizeof(bora_opt_pad), 2, p};
    }
    gval *sum = NULL;
    for (int64_t k = 0; k < K && !g->status; k++) {
        /* positions k, k + s, ..: J·s of them from k, split (J, s), the first of each s */
        gval *xk = gp->api->slice(gp, x, len, k, J * s);
        bora_axis parts[2] = {{len, J}, {ker, s}};
        xk = xk ? api_split(gp, xk, len, 2, parts) : NULL;
        xk = xk ? gp->api->slice(gp, xk, ker, 0, 1) : NULL;
        /* dense, in x's dtype and in the order the product reads them ((batch, length) by
         * (in, kernel), and (in, kernel) by out): dot would copy the strided windows anyway,
         * and under c=bf16 a copy of the rounded operand would take its gradient in bf16 */
        const char *xo[4] = {x->names[0], len, in, ker}, *wo[3] = {in, ker, w->names[0]};
        xk = xk ? g_contiguous(g, g_permute(g, xk, 4, xo)) : NULL;
        gval *wk = gp->api->slice(gp, w, ker, k, 1);
        wk = wk ? g_contiguous(g, g_permute(g, wk, 3, wo)) : NULL;
        const char *contract[2] = {in, ker};
        gval *t = xk && wk ? api_dot(gp, xk, wk, 2, contract, NULL) : NULL;
        sum = !t ? NULL : sum ? api_binary(gp, BORA_OP_ADD, sum, t) : t;
    }
    if (!sum)
        return NULL;
    const char *order[3] = {x->names[0], w->names[0], len};
    return g_permute(g, sum, 3, order);
}

/* ---- the builder -------------------------------------------------------------------------- */

bora_tensor *api_conv1d(bora_graph *gp, bora_tensor *x, bora_tensor *w,
                        const bora_conv1d_opts *opts)
{
    g_graph *g = (g_graph *)gp;
    NEED(g, x, w, opts);
    if (opts->struct_size < sizeof(bora_conv1d_opts) || !opts->length_axis || !opts->in_axis ||
        !opts->kernel_axis) {
        g_fail(g, "conv1d: the options need struct_size and length_axis, in_axis and "
                  "kernel_axis named");
        return NULL;
    }
    const char *len = g_intern(opts->length_axis), *in = g_intern(opts->in_axis),
               *ker = g_intern(opts->kernel_axis);
    char dx[256], dw[256];
    g_describe(x, dx, sizeof dx);
    g_describe(w, dw, sizeof dw);
    int64_t s = opts->stride ? opts->stride : 1, p = opts->padding;
    if (s < 1 || p < 0 || p > ((int64_t)1 << 60)) {
        g_fail(g,
               "conv1d of x %s: stride %lld must be at least 1 (0 means 1) and padding %lld "
               "within 0..2^60",
               dx, (long long)opts->stride, (long long)p);
        return NULL;
    }
    int xl = g_axis_index(x, len), xi = g_axis_index(x, in);
    if (xl < 0 || xi < 0 || len == in) {
        g_fail(g,
               "conv1d: x %s needs the length axis '%s' and the input-channel axis '%s' (two "
               "different names)",
               dx, len, in);
        return NULL;
    }
    int wi = g_axis_index(w, in), wk = g_axis_index(w, ker);
    if (w->ndim != 3 || wi < 0 || wk < 0 || in == ker) {
        g_fail(g,
               "conv1d: w %s needs exactly three axes: the input channels '%s', the kernel "
               "'%s' and the output channels",
               dw, in, ker);
        return NULL;
    }
    const char *out = w->names[3 - wi - wk];
    if (g_axis_index(x, out) >= 0 || g_axis_index(x, ker) >= 0) {
        g_fail(g,
               "conv1d: x %s already has an axis named like w %s's output axis '%s' or kernel "
               "axis '%s'; rename one",
               dx, dw, out, ker);
        return NULL;
    }
    if (x->dims[xi] != w->dims[wi]) {
        g_fail(g, "conv1d: input channels '%s' are %lld in x %s but %lld in w %s", in,
               (long long)x->dims[xi], dx, (long long)w->dims[wi], dw);
        return NULL;
    }
    if (x->dtype != w->dtype || (x->dtype != BORA_DTYPE_F32 && x->dtype != BORA_DTYPE_F64)) {
        g_fail(g, "conv1d: x %s and w %s need one dtype, f32 or f64", dx, dw);
        return NULL;
    }
    int64_t L = x->dims[xl], K = w->dims[wk], J = out_length(L, K, p, s);
    if (J < 1) {
        g_fail(g,
               "conv1d: the kernel '%s' of w %s (%lld) is longer than the length '%s' of x %s "
               "with padding %lld at both ends (%lld)",
               ker, dw, (long long)K, len, dx, (long long)p, (long long)(L + 2 * p));
        return NULL;
    }
    /* the result's shape, x's axes with in replaced by out, checked before anything is built */
    int64_t rd[BORA_MAX_DIMS];
    const char *rn[BORA_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) {
        rd[i] = i == xi ? w->dims[3 - wi - wk] : i == xl ? J : x->dims[i];
        rn[i] = i == xi ? out : x->names[i];
    }
    int64_t pd[BORA_MAX_DIMS]; /* x padded for the decomposition: J·s + K - 1 >= L + 2p */
    memcpy(pd, x->dims, sizeof pd);
    pd[xl] = J * s + K - 1;
    /* and one batch row's windows (in, kernel, J), which a backend's kernel may lay out */
    int64_t wd[3] = {x->dims[xi], K, J};
    const char *wn[3] = {in, ker, len};
    if (g_size_check(g, "conv1d's result", NULL, x->dtype, x->ndim, rd, rn, NULL) ||
        g_size_check(g, "conv1d's padded x", NULL, x->dtype, x->ndim, pd, x->names, NULL) ||
        g_size_check(g, "conv1d's windows", NULL, x->dtype, 3, wd, wn, NULL))
        return NULL;
    /* x as (batch, in, length) with its other axes merged into one batch axis (size 1 if none) */
    const char *batch[BORA_MAX_DIMS], *o[BORA_MAX_DIMS];
    bora_axis parts[BORA_MAX_DIMS];
    int nb = 0;
    for (int i = 0; i < x->ndim; i++)
        if (i != xl && i != xi) {
            parts[nb] = (bora_axis){x->names[i], x->dims[i]};
            o[nb] = batch[nb] = x->names[i];
            nb++;
        }
    o[nb] = in;
    o[nb + 1] = len;
    gval *x3 = g_permute(g, x, nb + 2, o);
    const char *bname = nb == 1 ? batch[0] : "__conv_batch";
    if (x3 && nb == 0)
        x3 = api_broadcast(gp, x3, (bora_axis){bname, 1});
    else if (x3 && nb > 1)
        x3 = api_merge(gp, x3, nb, batch, bname);
    const char *wo[3] = {out, in, ker};
    gval *w3 = g_permute(g, w, 3, wo);
    if (!x3 || !w3)
        return NULL;
    int32_t types[3] = {x->dtype, x->dtype, x->dtype};
    if (g->compute == BORA_DTYPE_BF16 && x->dtype == BORA_DTYPE_F32)
        types[0] = types[1] = BORA_DTYPE_BF16;
    gval *y3;
    /* the kernels only of a backend built for 1.15 or later that has all three; else primitives */
    if (g->store->abi_minor >= 15 && g->mode != BORA_MODE_HESSIAN &&
        g->store->ops->kernel(g->store->backend, BORA_OP_CONV1D, types, 3) &&
        g->store->ops->kernel(g->store->backend, BORA_OP_CONV1D_GRAD_INPUT, types, 3) &&
        g->store->ops->kernel(g->store->backend, BORA_OP_CONV1D_GRAD_WEIGHT, types, 3))
        y3 = g_conv1d(g, x3, w3, s, p);
    else
        y3 = conv_decomposed(g, x3, w3, s, p);
    if (!y3)
        return NULL;
    /* back to x's axes, in its order, with out where in was */
    gval *y = y3;
    if (nb == 0)
        y = api_split(gp, y, bname, 0, NULL);
    else if (nb > 1)
        y = api_split(gp, y, bname, nb, parts);
    return y ? g_permute(g, y, x->ndim, rn) : NULL;
}
