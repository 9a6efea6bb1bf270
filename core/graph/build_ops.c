/* core/graph/build_ops.c — the graph builder's compound ops behind bora_graph_api: dot products
 * (with mixed-precision operands), the decompositions of fused ops for backends without their
 * kernel, normalisation, softmax, losses, embedding, attention, concatenation, and the leaves
 * over the store's storage (gradients, optimizer state) with assign, state and checkpoints. */
#include "build.h"

#include "../util/log.h"
#include "../util/str.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
/* ---- dot --------------------------------------------------------------------------------- */

/* Merge the named axes of t (moved into this order first) into one axis called into; an empty
 * group becomes a size-1 axis. */
static gval *group(g_graph *g, gval *t, int n, const char *const *names, const char *into)
{
    if (n == 0)
        return api_broadcast(&g->pub, t, (bora_axis){into, 1});
    return api_merge(&g->pub, t, n, names, into);
}

/* t's axes as (first group, second group, third group), each merged into one axis. */
static gval *as3(g_graph *g, gval *t, const char **grp[3], const int n[3], const char *names[3])
{
    const char *order[BORA_MAX_DIMS];
    int k = 0;
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < n[i]; j++)
            order[k++] = grp[i][j];
    t = g_permute(g, t, k, order);
    /* Merge the last group first so earlier axes keep their positions. */
    for (int i = 2; i >= 0 && t; i--) {
        if (n[i] == 0) {
            /* An empty group: a size-1 axis in its place (broadcast puts it first; move it). */
            t = api_broadcast(&g->pub, t, (bora_axis){names[i], 1});
            if (!t)
                return NULL;
            const char *o[BORA_MAX_DIMS];
            int m = 0, pos = 0;
            for (int q = 0; q < i; q++)
                pos += n[q];
            for (int q = 1; q <= t->ndim - 1; q++) {
                if (m == pos)
                    o[m++] = names[i];
                o[m++] = t->names[q];
            }
            if (m == pos)
                o[m++] = names[i];
            t = g_permute(g, t, m, o);
        } else {
            t = group(g, t, n[i], grp[i], names[i]);
        }
    }
    return t;
}

/* "bf16.NAME": a parameter's bf16 copy in messages (interned). */
static const char *shadow_label(const g_slot *p)
{
    char label[256];
    snprintf(label, sizeof label, "bf16.%s", p->name);
    return g_intern(label);
}

/* A parameter, or a view of one, as the store's bf16 copy of it (the shadow leaf, or the same
 * view of it): no cast in the graph. Its gradient goes to v. */
static gval *shadow_of(g_graph *g, gval *v)
{
    gval *p = v->base;
    if (!p->lowp) {
        const g_slot *s = &g->store->slots[p->slot];
        bora_axis axes[BORA_MAX_DIMS];
        for (int i = 0; i < s->ndim; i++)
            axes[i] = (bora_axis){s->names[i], s->dims[i]};
        gval *sh = g_leaf(g, G_PARAM, shadow_label(s), BORA_DTYPE_BF16, s->ndim, axes);
        if (!sh)
            return NULL;
        sh->storage = S_SHADOW;
        sh->slot = p->slot;
        sh->requires_grad = 1;
        sh->mp_cast = 1;
        sh->mp_src = p;
        p->lowp = sh;
        g->reads_shadows = 1;
    }
    if (v == p)
        return p->lowp;
    gval *w = g_view_like(g, p->lowp, V_RENAME, v);
    if (!w)
        return NULL;
    w->label = p->lowp->label;
    w->mp_cast = 1;
    w->mp_src = v;
    return w;
}

/* Mixed precision (docs/design.md §3.4): an f32 matmul operand in a graph computing in bf16 is
 * rounded to bf16 once (a weight used twice, or a gradient feeding both products, shares one copy);
 * the product accumulates and is returned in f32. The copy's gradient goes straight to the f32
 * source (autodiff's acc), not rounded on the way. */
gval *g_lowp(g_graph *g, gval *v)
{
    if (!v || g->compute != BORA_DTYPE_BF16 || v->dtype != BORA_DTYPE_F32)
        return v;
    /* (a bf16 residual stream's widening has its bf16 value as lowp already) */
    if (!v->lowp && v->base->storage == S_PARAM && g->store->shadows)
        v->lowp = shadow_of(g, v);
    if (!v->lowp) {
        v->lowp = g_copy_as(g, v, BORA_DTYPE_BF16);
        if (v->lowp)
            v->lowp->mp_cast = 1;
    }
    return v->lowp;
}

static gval *matmul_strided(g_graph *g, gval *a, gval *b)
{
    a = g_lowp(g, a);
    b = g_lowp(g, b);
    /* The CPU kernel (and BLAS) need one of each operand's last two axes unit-stride. */
    if (a->strides[2] != 1 && a->strides[1] != 1)
        a = g_contiguous(g, a);
    if (b && b->strides[2] != 1 && b->strides[1] != 1)
        b = g_contiguous(g, b);
    if (!a || !b)
        return NULL;
    int64_t dims[3] = {a->dims[0], a->dims[1], b->dims[2]};
    const char *names[3] = {a->names[0], a->names[1], b->names[2]};
    gval *ins[2] = {a, b};
    int out =
        g->compute == BORA_DTYPE_BF16 && a->dtype == BORA_DTYPE_BF16 ? BORA_DTYPE_F32 : a->dtype;
    return g_op1(g, BORA_OP_MATMUL, 2, ins, out, 3, dims, names);
}

gval *g_matmul3(g_graph *g, gval *a, gval *b)
{
    return matmul_strided(g, a, b);
}

bora_tensor *api_dot(bora_graph *gp, bora_tensor *a, bora_tensor *b, int32_t n_contract,
                     const char *const *contract, const bora_dot_opts *opts)
{
    g_graph *g = (g_graph *)gp;
    NEED(g, a, b);
    char da[256], db[256];
    g_describe(a, da, sizeof da);
    g_describe(b, db, sizeof db);
    if (a->dtype != b->dtype || !g_is_float(a->dtype)) {
        g_fail(g, "dot: %s and %s need the same floating-point dtype", da, db);
        return NULL;
    }
    if (n_contract < 1) {
        g_fail(g, "dot: %s and %s: name at least one axis to contract", da, db);
        return NULL;
    }
    const char *batch[BORA_MAX_DIMS], *fa[BORA_MAX_DIMS], *fb[BORA_MAX_DIMS], *k[BORA_MAX_DIMS];
    int nb = 0, nfa = 0, nfb = 0, nk = 0;
    int64_t out_dims[BORA_MAX_DIMS * 2];
    const char *out_names[BORA_MAX_DIMS * 2];
    for (int i = 0; i < n_contract; i++) {
        int ia = g_axis_index(a, contract[i]), ib = g_axis_index(b, contract[i]);
        if (ia < 0 || ib < 0) {
            g_fail(g, "dot: cannot contract '%s': %s %s it", contract[i], ia < 0 ? da : db,
                   "lacks");
            return NULL;
        }
        if (a->dims[ia] != b->dims[ib]) {
            g_fail(g, "dot: '%s' is %lld in %s but %lld in %s", contract[i], (long long)a->dims[ia],
                   da, (long long)b->dims[ib], db);
            return NULL;
        }
        k[nk++] = a->names[ia];
    }
    for (int i = 0; i < a->ndim; i++) {
        int contracted = 0;
        for (int j = 0; j < nk; j++)
            contracted |= a->names[i] == k[j];
        if (contracted)
            continue;
        int ib = g_axis_index(b, a->names[i]);
        if (ib >= 0) {
            if (a->dims[i] != b->dims[ib]) {
                g_fail(g, "dot: batch axis '%s' is %lld in %s but %lld in %s", a->names[i],
                       (long long)a->dims[i], da, (long long)b->dims[ib], db);
                return NULL;
            }
            batch[nb++] = a->names[i];
        } else {
            fa[nfa++] = a->names[i];
        }
    }
    for (int i = 0; i < b->ndim; i++)
        if (g_axis_index(a, b->names[i]) < 0)
            fb[nfb++] = b->names[i];
    int n_out = nb + nfa + nfb;
    if (n_out > BORA_MAX_DIMS) {
        g_fail(g, "dot: the result of %s and %s would have %d axes; at most %d", da, db, n_out,
               BORA_MAX_DIMS);
        return NULL;
    }
    for (int i = 0; i < nb; i++)
        out_names[i] = batch[i], out_dims[i] = a->dims[g_axis_index(a, batch[i])];
    for (int i = 0; i < nfa; i++)
        out_names[nb + i] = fa[i], out_dims[nb + i] = a->dims[g_axis_index(a, fa[i])];
    for (int i = 0; i < nfb; i++)
        out_names[nb + nfa + i] = fb[i], out_dims[nb + nfa + i] = b->dims[g_axis_index(b, fb[i])];

    /* (batch, free a, contracted) x (batch, contracted, free b), each group merged. */
    const char *ga[3][BORA_MAX_DIMS], *gb[3][BORA_MAX_DIMS];
    memcpy(ga[0], batch, sizeof(char *) * (size_t)nb);
    memcpy(ga[1], fa, sizeof(char *) * (size_t)nfa);
    memcpy(ga[2], k, sizeof(char *) * (size_t)nk);
    memcpy(gb[0], batch, sizeof(char *) * (size_t)nb);
    memcpy(gb[1], k, sizeof(char *) * (size_t)nk);
    memcpy(gb[2], fb, sizeof(char *) * (size_t)nfb);
    /* under mixed precision, cast before the views below: a weight's copy is made once, in its
     * own layout, however the product sees it */
    a = g_lowp(g, a);
    b = g_lowp(g, b);
    if (!a || !b)
        return NULL;
    const char **pa[3] = {ga[0], ga[1], ga[2]}, **pb[3] = {gb[0], gb[1], gb[2]};
    int na[3] = {nb, nfa, nk}, nbb[3] = {nb, nk, nfb};
    const char *in_a[3] = {"__batch", "__m", "__k"}, *in_b[3] = {"__batch", "__k", "__n"};
    gval *a3 = as3(g, a, pa, na, in_a), *b3 = a3 ? as3(g, b, pb, nbb, in_b) : NULL;
    gval *c = b3 ? matmul_strided(g, a3, b3) : NULL;
    if (!c)
        return NULL;
    /* Split (B, M, N) back into the named axes. */
    bora_axis parts[BORA_MAX_DIMS];
    for (int i = 0; i < nfb; i++)
        parts[i] = (bora_axis){out_names[nb + nfa + i], out_dims[nb + nfa + i]};
    c = api_split(gp, c, "__n", nfb, parts);
    for (int i = 0; c && i < nfa; i++)
        parts[i] = (bora_axis){out_names[nb + i], out_dims[nb + i]};
    c = c ? api_split(gp, c, "__m", nfa, parts) : NULL;
    for (int i = 0; c && i < nb; i++)
        parts[i] = (bora_axis){out_names[i], out_dims[i]};
    c = c ? api_split(gp, c, "__batch", nb, parts) : NULL;
    if (!c)
        return NULL;
    /* The fused epilogue, as its decomposition: + bias, then the activation. */
    if (opts && opts->bias)
        c = api_binary(gp, BORA_OP_ADD, c, opts->bias);
    if (c && opts && opts->activation)
        c = api_unary(gp, opts->activation, c);
    return c;
}

/* ---- decompositions: fused ops as primitives, for backends without the fused kernel ---------- */

/* Whether the builder may emit op, a fused kernel, rather than its decomposition. A Hessian
 * graph never does: its forward-over-reverse pass (hvp.c) has tangent rules for primitives only. */
static int backend_has(g_graph *g, int op, int n, const int32_t *dtypes)
{
    if (g->mode == BORA_MODE_HESSIAN)
        return 0;
    return g->store->ops->kernel(g->store->backend, (uint32_t)op, dtypes, (uint32_t)n) != NULL;
}

/* Reduce x over one axis with op (SUM or MAX), seen again with x's axes (broadcast back). */
static gval *reduce_back(g_graph *g, int op, gval *x, const char *axis)
{
    gval *r = g_reduce_last(g, op, x, 1, &axis);
    return r ? g_align_to(g, r, x) : NULL;
}

static gval *layernorm_decomposed(g_graph *g, gval *x, gval *gamma, gval *beta, const char *axis,
                                  double eps)
{
    double inv_n = 1.0 / (double)x->dims[g_axis_index(x, axis)];
    gval *mean = reduce_back(g, BORA_OP_SUM, x, axis);
    mean = mean ? g_api.scale(&g->pub, mean, inv_n) : NULL;
    gval *xc = mean ? g_binary(g, BORA_OP_SUB, x, mean) : NULL;
    gval *var = xc ? reduce_back(g, BORA_OP_SUM, g_binary(g, BORA_OP_MUL, xc, xc), axis) : NULL;
    var = var ? g_api.scale(&g->pub, var, inv_n) : NULL;
    gval *eps_t = var ? g_fill(g, var, eps) : NULL;
    gval *rstd =
        eps_t ? g_api.unary(&g->pub, BORA_OP_RSQRT, g_binary(g, BORA_OP_ADD, var, eps_t)) : NULL;
    gval *y = rstd ? g_binary(g, BORA_OP_MUL, xc, rstd) : NULL;
    y = y ? g_binary(g, BORA_OP_MUL, y, g_align_to(g, gamma, x)) : NULL;
    return y ? g_binary(g, BORA_OP_ADD, y, g_align_to(g, beta, x)) : NULL;
}

/* x · rsqrt(mean(x²) + eps) · (weight + offset), the fused op's formula in primitives. */
static gval *rms_norm_decomposed(g_graph *g, gval *x, gval *weight, const char *axis, double eps,
                                 double offset)
{
    double inv_n = 1.0 / (double)x->dims[g_axis_index(x, axis)];
    gval *ms = reduce_back(g, BORA_OP_SUM, g_binary(g, BORA_OP_MUL, x, x), axis);
    ms = ms ? g_api.scale(&g->pub, ms, inv_n) : NULL;
    gval *eps_t = ms ? g_fill(g, ms, eps) : NULL;
    gval *rstd =
        eps_t ? g_api.unary(&g->pub, BORA_OP_RSQRT, g_binary(g, BORA_OP_ADD, ms, eps_t)) : NULL;
    gval *y = rstd ? g_binary(g, BORA_OP_MUL, x, rstd) : NULL;
    if (!y || !weight)
        return y;
    gval *w = weight;
    if (offset != 0) {
        gval *off = g_fill(g, weight, offset);
        w = off ? g_binary(g, BORA_OP_ADD, weight, off) : NULL;
    }
    return w ? g_binary(g, BORA_OP_MUL, y, g_align_to(g, w, x)) : NULL;
}

static gval *softmax_decomposed(g_graph *g, int op, gval *x, const char *axis)
{
    gval *m = reduce_back(g, BORA_OP_MAX, x, axis);
    gval *shifted = m ? g_binary(g, BORA_OP_SUB, x, m) : NULL;
    gval *e = shifted ? g_api.unary(&g->pub, BORA_OP_EXP, shifted) : NULL;
    gval *s = e ? reduce_back(g, BORA_OP_SUM, e, axis) : NULL;
    if (!s)
        return NULL;
    if (op == BORA_OP_SOFTMAX)
        return g_binary(g, BORA_OP_DIV, e, s);
    return g_binary(g, BORA_OP_SUB, shifted, g_api.unary(&g->pub, BORA_OP_LOG, s));
}

/* Sophia-G's labels (g->sample_labels): a token per row drawn from the model's own softmax
 * (BORA_OP_SAMPLE, keyed by the graph's sample_counter input: the step and the first row), the
 * rows whose target is ignored left ignored, and so are the rows the sample op could not draw
 * from (-1: a non-finite logit). The selection goes through f32, exact for ids up to 2^24, so a
 * larger vocabulary is refused. */
static gval *sampled_labels(g_graph *g, gval *l2, gval *t1, int32_t ignore_index)
{
    bora_graph *gp = &g->pub;
    if (l2->dims[1] > ((int64_t)1 << 24)) {
        g_fail(g,
               "cross_entropy: sampled labels go through f32, exact up to 2^24 classes, not "
               "the %lld of axis '%s'",
               (long long)l2->dims[1], l2->names[1]);
        return NULL;
    }
    if (!g->sample_counter) {
        bora_axis two = {"counter", 2};
        g->sample_counter = g_api.input(gp, "sample_counter", BORA_DTYPE_I64, 1, &two);
    }
    if (!g_api.sample) {
        g_fail(g, "cross_entropy: sampled labels need the sample op");
        return NULL;
    }
    gval *drawn =
        g_api.sample(gp, l2, l2->names[1], g->sample_counter, g->store->seed, G_STREAM_LABELS);
    gval *tf = drawn ? g_api.cast(gp, t1, BORA_DTYPE_F32) : NULL;
    gval *df = tf ? g_api.cast(gp, drawn, BORA_DTYPE_F32) : NULL;
    gval *ig = df ? g_api.full(gp, BORA_DTYPE_F32, 0, NULL, (double)ignore_index) : NULL;
    gval *zero = ig ? g_api.full(gp, BORA_DTYPE_F32, 0, NULL, 0.0) : NULL;
    gval *failed = zero ? g_binary(g, BORA_OP_LESS, df, zero) : NULL;
    gval *df_ok = failed ? g_where(g, failed, ig, df) : NULL;
    gval *keep = df_ok ? g_binary(g, BORA_OP_EQUAL, tf, ig) : NULL;
    gval *sel = keep ? g_where(g, keep, tf, df_ok) : NULL;
    return sel ? g_api.cast(gp, sel, BORA_DTYPE_I32) : NULL;
}

/* Σ over rows of -log softmax(logits)[target] (+ z·lse²), from (R, V) logits and (R) targets:
 * the targets' one-hot rows pick the log-probabilities, and an ignored target (outside the
 * vocabulary) has a zero row, so it counts nothing. */
static gval *xent_decomposed(g_graph *g, gval *l2, gval *t1, double z_loss)
{
    const char *vocab = l2->names[1];
    gval *onehot = g_op1(g, BORA_OP_ONE_HOT, 1, &t1, l2->dtype, 2, l2->dims, l2->names);
    gval *lsm = onehot ? g_api.log_softmax(&g->pub, l2, vocab) : NULL;
    gval *picked = lsm ? g_binary(g, BORA_OP_MUL, lsm, onehot) : NULL;
    gval *loss =
        picked ? g_api.scale(&g->pub, g_reduce_last(g, BORA_OP_SUM, picked, 2, l2->names), -1.0)
               : NULL;
    if (!loss || z_loss == 0)
        return loss;
    /* lse = logits - log-probabilities, read at any one class */
    gval *lse = g_binary(g, BORA_OP_SUB, g_api.slice(&g->pub, l2, vocab, 0, 1),
                         g_api.slice(&g->pub, lsm, vocab, 0, 1));
    lse = lse ? g_reduce_last(g, BORA_OP_SUM, lse, 1, &vocab) : NULL;
    gval *mask = lse ? g_reduce_last(g, BORA_OP_SUM, onehot, 1, &vocab) : NULL;
    gval *z = mask ? g_binary(g, BORA_OP_MUL, mask, g_binary(g, BORA_OP_MUL, lse, lse)) : NULL;
    z = z ? g_api.scale(&g->pub, g_reduce_last(g, BORA_OP_SUM, z, 1, z->names), z_loss) : NULL;
    return z ? g_binary(g, BORA_OP_ADD, loss, z) : NULL;
}

/* ---- normalisation, softmax, losses ------------------------------------------------------- */

/* x with axis moved last; the other axes keep their order. */
static gval *axis_last(g_graph *g, gval *x, const char *axis)
{
    const char *order[BORA_MAX_DIMS];
    int k = 0;
    for (int i = 0; i < x->ndim; i++)
        if (strcmp(x->names[i], axis))
            order[k++] = x->names[i];
    order[k++] = g_intern(axis);
    return g_permute(g, x, k, order);
}

bora_tensor *api_layernorm(bora_graph *gp, bora_tensor *x, bora_tensor *gamma, bora_tensor *beta,
                           const char *axis, double eps)
{
    g_graph *g = (g_graph *)gp;
    NEED(g, x, gamma, beta, axis);
    char dx[256], dg[256];
    int i = g_axis_index(x, axis);
    g_describe(x, dx, sizeof dx);
    if (i < 0) {
        g_fail(g, "layernorm: %s has no axis '%s'", dx, axis);
        return NULL;
    }
    const gval *wb[2] = {gamma, beta};
    for (int k = 0; k < 2; k++)
        if (wb[k]->ndim != 1 || wb[k]->names[0] != x->names[i] || wb[k]->dims[0] != x->dims[i] ||
            wb[k]->dtype != x->dtype) {
            g_describe(wb[k], dg, sizeof dg);
            g_fail(g, "layernorm: %s must have exactly the axis '%s' of %s, and its dtype", dg,
                   axis, dx);
            return NULL;
        }
    int32_t fused_types[8];
    for (int k = 0; k < 8; k++)
        fused_types[k] = x->dtype;
    if (!backend_has(g, BORA_OP_LAYERNORM, 6, fused_types) ||
        !backend_has(g, BORA_OP_LAYERNORM_GRAD, 8, fused_types))
        return layernorm_decomposed(g, x, gamma, beta, g_intern(axis), eps);
    gval *xl = axis_last(g, x, axis);
    gval *ins[3] = {xl, gamma, beta};
    gval *y =
        xl ? g_op1(g, BORA_OP_LAYERNORM, 3, ins, x->dtype, xl->ndim, xl->dims, xl->names) : NULL;
    if (!y)
        return NULL;
    gnode *n = y->node;
    n->opt.norm = (bora_opt_norm){sizeof(bora_opt_norm), 0, eps};
    /* mean and rstd per row, kept for the backward pass. */
    gval *mean = g_new_value(g, x->dtype, xl->ndim - 1, xl->dims, xl->names);
    gval *rstd = g_new_value(g, x->dtype, xl->ndim - 1, xl->dims, xl->names);
    if (!mean || !rstd)
        return NULL;
    g_add_out(n, mean);
    g_add_out(n, rstd);
    mean->requires_grad = rstd->requires_grad = 0;
    return g_permute(g, y, x->ndim, x->names);
}

bora_tensor *api_rms_norm(bora_graph *gp, bora_tensor *x, bora_tensor *weight, const char *axis,
                          double eps, double weight_offset)
{
    g_graph *g = (g_graph *)gp;
    NEED(g, x, axis);
    char dx[256], dw[256];
    int i = g_axis_index(x, axis);
    g_describe(x, dx, sizeof dx);
    if (i < 0) {
        g_fail(g, "rms_norm: %s has no axis '%s'", dx, axis);
        return NULL;
    }
    if (!g_is_float(x->dtype)) {
        g_fail(g, "rms_norm: %s is not a floating-point tensor", dx);
        return NULL;
    }
    if (!(eps >= 0) || !isfinite(eps) || !isfinite(weight_offset)) {
        g_fail(g, "rms_norm of %s: eps %g and weight_offset %g must be finite, eps not negative",
               dx, eps, weight_offset);
        return NULL;
    }
    if (weight && (weight->ndim != 1 || weight->names[0] != x->names[i] ||
                   weight->dims[0] != x->dims[i] || weight->dtype != x->dtype)) {
        g_describe(weight, dw, sizeof dw);
        g_fail(g, "rms_norm: %s must have exactly the axis '%s' of %s, and its dtype", dw, axis,
               dx);
        return NULL;
    }
    int nw = weight != NULL;
    int32_t types[6];
    for (int k = 0; k < 6; k++)
        types[k] = x->dtype;
    /* a backend built before ABI 1.9 is never asked for the op: primitives instead */
    if (!g->store->elem_ops || !backend_has(g, BORA_OP_RMS_NORM, 3 + nw, types) ||
        !backend_has(g, BORA_OP_RMS_NORM_GRAD, 4 + 2 * nw, types))
        return rms_norm_decomposed(g, x, weight, g_intern(axis), eps, weight_offset);
    gval *xl = axis_last(g, x, axis);
    gval *ins[2] = {xl, weight};
    gval *y = xl ? g_op1(g, BORA_OP_RMS_NORM, 1 + nw, ins, x->dtype, xl->ndim, xl->dims, xl->names)
                 : NULL;
    if (!y)
        return NULL;
    gnode *n = y->node;
    n->opt.rms = (bora_opt_rms_norm){sizeof(bora_opt_rms_norm), 0, eps, weight_offset};
    /* rstd per row, kept for the backward pass */
    gval *rstd = g_new_value(g, x->dtype, xl->ndim - 1, xl->dims, xl->names);
    if (!rstd)
        return NULL;
    g_add_out(n, rstd);
    rstd->requires_grad = 0;
    return g_permute(g, y, x->ndim, x->names);
}

static gval *softmax_like(g_graph *g, int op, gval *x, const char *axis)
{
    char d[256];
    if (g_axis_index(x, axis) < 0) {
        g_describe(x, d, sizeof d);
        g_fail(g, "%s: %s has no axis '%s'", g_op_name(op), d, axis);
        return NULL;
    }
    int32_t types[2] = {x->dtype, x->dtype};
    if (!backend_has(g, op, 2, types))
        return softmax_decomposed(g, op, x, g_intern(axis));
    gval *xl = axis_last(g, x, axis);
    gval *y = xl ? g_op1(g, op, 1, &xl, x->dtype, xl->ndim, xl->dims, xl->names) : NULL;
    return y ? g_permute(g, y, x->ndim, x->names) : NULL;
}

bora_tensor *api_softmax(bora_graph *gp, bora_tensor *x, const char *axis)
{
    g_graph *g = (g_graph *)gp;
    NEED(g, x, axis);
    return softmax_like(g, BORA_OP_SOFTMAX, x, axis);
}

bora_tensor *api_log_softmax(bora_graph *gp, bora_tensor *x, const char *axis)
{
    g_graph *g = (g_graph *)gp;
    NEED(g, x, axis);
    return softmax_like(g, BORA_OP_LOG_SOFTMAX, x, axis);
}

/* All of t's axes (in order) merged into one called into. */
static gval *flatten(g_graph *g, gval *t, const char *into)
{
    if (t->ndim == 0)
        return api_broadcast(&g->pub, t, (bora_axis){into, 1});
    return api_merge(&g->pub, t, t->ndim, t->names, into);
}

bora_tensor *api_cross_entropy(bora_graph *gp, bora_tensor *logits, bora_tensor *targets,
                               const char *vocab_axis, const bora_xent_opts *opts)
{
    g_graph *g = (g_graph *)gp;
    NEED(g, logits, targets, vocab_axis);
    char dl[256], dt[256];
    g_describe(logits, dl, sizeof dl);
    g_describe(targets, dt, sizeof dt);
    int vi = g_axis_index(logits, vocab_axis);
    if (vi < 0) {
        g_fail(g, "cross_entropy: %s has no axis '%s'", dl, vocab_axis);
        return NULL;
    }
    if (targets->dtype != BORA_DTYPE_I32) {
        g_fail(g, "cross_entropy: targets %s must be i32 token ids", dt);
        return NULL;
    }
    int ok = targets->ndim == logits->ndim - 1;
    for (int i = 0; ok && i < targets->ndim; i++) {
        int j = g_axis_index(logits, targets->names[i]);
        ok = j >= 0 && j != vi && logits->dims[j] == targets->dims[i];
    }
    if (!ok) {
        g_fail(g, "cross_entropy: targets %s must have the axes of logits %s except '%s'", dt, dl,
               vocab_axis);
        return NULL;
    }
    /* logits as (rows in targets' order, vocab), both flattened to rows. */
    const char *order[BORA_MAX_DIMS];
    for (int i = 0; i < targets->ndim; i++)
        order[i] = targets->names[i];
    order[targets->ndim] = logits->names[vi];
    gval *lp = g_permute(g, logits, logits->ndim, order);
    gval *l2 = NULL, *t1 = NULL;
    if (lp && targets->ndim > 0)
        l2 = api_merge(gp, lp, targets->ndim, order, "__rows");
    else if (lp)
        l2 = api_broadcast(gp, lp, (bora_axis){"__rows", 1});
    t1 = l2 ? flatten(g, targets, "__rows") : NULL;
    if (t1 && g->sample_labels)
        t1 = sampled_labels(g, l2, t1, opts ? opts->ignore_index : -100);
    if (!t1)
        return NULL;
    int32_t xt[5] = {logits->dtype, BORA_DTYPE_I32, logits->dtype, logits->dtype, logits->dtype};
    if (!backend_has(g, BORA_OP_XENT, 4, xt) || !backend_has(g, BORA_OP_XENT_GRAD, 5, xt))
        return xent_decomposed(g, l2, t1, opts ? opts->z_loss : 0.0);
    gval *ins[2] = {l2, t1};
    gval *loss = g_op1(g, BORA_OP_XENT, 2, ins, logits->dtype, 0, NULL, NULL);
    if (!loss)
        return NULL;
    gnode *n = loss->node;
    n->opt.xent = (bora_opt_xent){sizeof(bora_opt_xent), opts ? opts->ignore_index : -100,
                                  opts ? opts->z_loss : 0.0};
    gval *lse = g_new_value(g, logits->dtype, 1, l2->dims, l2->names);
    if (!lse)
        return NULL;
    g_add_out(n, lse);
    lse->requires_grad = 0;
    return loss;
}

bora_tensor *api_embedding(bora_graph *gp, bora_tensor *table, bora_tensor *ids,
                           const char *vocab_axis)
{
    g_graph *g = (g_graph *)gp;
    NEED(g, table, ids, vocab_axis);
    char dt[256], di[256];
    g_describe(table, dt, sizeof dt);
    g_describe(ids, di, sizeof di);
    int vi = g_axis_index(table, vocab_axis);
    if (vi < 0 || ids->dtype != BORA_DTYPE_I32 || table->ndim < 2) {
        g_fail(g, "embedding: needs a table with axis '%s' and more, and i32 ids; got %s and %s",
               vocab_axis, dt, di);
        return NULL;
    }
    int n_out = ids->ndim + table->ndim - 1;
    for (int i = 0; i < table->ndim; i++)
        if (i != vi && g_axis_index(ids, table->names[i]) >= 0) {
            g_fail(g, "embedding: axis '%s' is in both %s and %s", table->names[i], dt, di);
            return NULL;
        }
    if (n_out > BORA_MAX_DIMS) {
        g_fail(g, "embedding: %s by %s would have %d axes", dt, di, n_out);
        return NULL;
    }
    const char *order[BORA_MAX_DIMS];
    int k = 0;
    order[k++] = table->names[vi];
    for (int i = 0; i < table->ndim; i++)
        if (i != vi)
            order[k++] = table->names[i];
    gval *tp = g_permute(g, table, table->ndim, order);
    gval *t2 = tp ? api_merge(gp, tp, table->ndim - 1, order + 1, "__dim") : NULL;
    gval *i1 = t2 ? flatten(g, ids, "__rows") : NULL;
    if (!i1)
        return NULL;
    gval *ins[2] = {t2, i1};
    int64_t dims[2] = {i1->dims[0], t2->dims[1]};
    const char *names[2] = {"__rows", "__dim"};
    gval *out = g_op1(g, BORA_OP_GATHER, 2, ins, table->dtype, 2, dims, names);
    bora_axis parts[BORA_MAX_DIMS];
    for (int i = 1; i < k; i++)
        parts[i - 1] = (bora_axis){order[i], tp->dims[i]};
    out = out ? api_split(gp, out, "__dim", k - 1, parts) : NULL;
    for (int i = 0; i < ids->ndim; i++)
        parts[i] = (bora_axis){ids->names[i], ids->dims[i]};
    return out ? api_split(gp, out, "__rows", ids->ndim, parts) : NULL;
}

/* softmax(cap(q·kᵀ·scale) + bias) v on (B, H, T, E) views, bias 0 or -inf from the masks and
 * cap(s) = c·tanh(s / c) where opt->softcap is c > 0 (else s). With
 * grouped-query attention k and v have H_kv heads: q's heads are split, as a view, into
 * (H_kv, g) so that each kv head meets its g query heads in one batched product, and the
 * products' gradients sum dK and dV over the group; K and V are never repeated. */
static gval *attention_decomposed(g_graph *g, gval *const four[3], gval *const *extra, int n_extra,
                                  const bora_opt_attention *opt)
{
    gval *q = four[0], *k = four[1], *v = four[2];
    const char *ha = q->names[3], *ka = k->names[2], *hn = q->names[1];
    int64_t H = q->dims[1], Hkv = k->dims[1];
    if (Hkv != H) {
        bora_axis parts[2] = {{hn, Hkv}, {"__g", H / Hkv}};
        q = api_split(&g->pub, q, hn, 2, parts); /* (B, H_kv, g, T, E) */
        if (!q)
            return NULL;
    }
    gval *scores = g_api.dot(&g->pub, q, k, 1, &ha, NULL); /* (B, H, T, S) */
    scores = scores ? g_api.scale(&g->pub, scores, opt->scale) : NULL;
    if (scores && opt->softcap > 0) { /* capped before the masks, as the fused kernel does */
        scores = g_api.scale(&g->pub, scores, 1.0 / opt->softcap);
        scores = scores ? api_unary(&g->pub, BORA_OP_TANH, scores) : NULL;
        scores = scores ? g_api.scale(&g->pub, scores, opt->softcap) : NULL;
    }
    if (!scores)
        return NULL;
    int64_t dims[3] = {q->dims[0], four[0]->dims[2], k->dims[2]};
    const char *names[3] = {q->names[0], four[0]->names[2], ka};
    gval *bias = g_op1(g, BORA_OP_ATTENTION_BIAS, n_extra, extra, q->dtype, 3, dims, names);
    if (!bias)
        return NULL;
    bias->node->opt.attn = *opt;
    bias->node->opt.attn.softcap = 0; /* the masks alone */
    /* A row that sees no key would be 0/0 in the softmax; the fused kernels give it output 0.
     * seen = max over keys of exp(bias) is 1 where a row sees a key, else 0; log(exp(bias) +
     * 1 - seen) is the bias itself on a row that sees one (log 1 = 0, log 0 = -inf, exactly)
     * and 0 on one that sees none, whose finite softmax is then multiplied by seen = 0: output
     * and gradients 0 there, the bits of every other row unchanged. */
    gval *seen = NULL; /* (B, T); none where no mask is set and every row sees every key */
    if (opt->causal || opt->sliding_window || n_extra) {
        gval *open = api_unary(&g->pub, BORA_OP_EXP, bias); /* (B, T, S): 1 where seen, else 0 */
        seen = open ? g_reduce_last(g, BORA_OP_MAX, open, 1, &ka) : NULL;
        gval *one = seen ? g_fill(g, seen, 1.0) : NULL;
        gval *unseen = one ? g_binary(g, BORA_OP_SUB, one, seen) : NULL;
        bias = unseen ? g_binary(g, BORA_OP_ADD, open, g_align_to(g, unseen, open)) : NULL;
        bias = bias ? api_unary(&g->pub, BORA_OP_LOG, bias) : NULL;
    }
    gval *p = bias ? g_binary(g, BORA_OP_ADD, scores, g_align_to(g, bias, scores)) : NULL;
    p = p ? g_api.softmax(&g->pub, p, ka) : NULL;
    gval *o = p ? g_api.dot(&g->pub, p, v, 1, &ka, NULL) : NULL; /* (B, H, T, E) */
    if (o && seen)
        o = g_binary(g, BORA_OP_MUL, o, g_align_to(g, seen, o));
    if (o && Hkv != H) {
        const char *o5[5] = {q->names[0], hn, "__g", four[0]->names[2], ha};
        const char *hg[2] = {hn, "__g"};
        o = g_permute(g, o, 5, o5);
        o = o ? api_merge(&g->pub, o, 2, hg, hn) : NULL;
    }
    return o ? g_permute(g, o, 4, four[0]->names) : NULL;
}

bora_tensor *api_attention(bora_graph *gp, bora_tensor *q, bora_tensor *k, bora_tensor *v,
                           const bora_attention_opts *opts)
{
    g_graph *g = (g_graph *)gp;
    NEED(g, q, k, v);
    const char *qa = g_intern(opts && opts->query_axis ? opts->query_axis : "position");
    const char *ka = g_intern(opts && opts->key_axis ? opts->key_axis : "key_position");
    const char *ha = g_intern(opts && opts->head_dim_axis ? opts->head_dim_axis : "head_dim");
    int v9 = opts && opts->struct_size >= offsetof(bora_attention_opts, sliding_window) +
                                              sizeof(opts->sliding_window);
    /* Grouped-query attention: k and v carry kv_head_axis where q has head_axis. */
    const char *qh = NULL, *kvh = NULL;
    if (v9 && opts->kv_head_axis) {
        qh = g_intern(opts->head_axis ? opts->head_axis : "head");
        kvh = g_intern(opts->kv_head_axis);
    }
    int64_t window = v9 ? opts->sliding_window : 0;
    int v12 =
        opts && opts->struct_size >= offsetof(bora_attention_opts, softcap) + sizeof(opts->softcap);
    double softcap = v12 ? opts->softcap : 0.0;
    if (!isfinite(softcap) || softcap < 0) {
        g_fail(g, "attention: softcap is %g: it must be 0 (none) or a positive finite cap",
               softcap);
        return NULL;
    }
    char dq[256], dk[256], dv[256];
    g_describe(q, dq, sizeof dq);
    g_describe(k, dk, sizeof dk);
    g_describe(v, dv, sizeof dv);
    if (g_axis_index(q, qa) < 0 || g_axis_index(q, ha) < 0 || g_axis_index(k, ka) < 0 ||
        g_axis_index(k, ha) < 0 || g_axis_index(v, ka) < 0 || g_axis_index(v, ha) < 0) {
        g_fail(g, "attention: q %s needs '%s' and '%s'; k %s and v %s need '%s' and '%s'", dq, qa,
               ha, dk, dv, ka, ha);
        return NULL;
    }
    if (q->dtype != k->dtype || q->dtype != v->dtype || !g_is_float(q->dtype)) {
        g_fail(g, "attention: q %s, k %s and v %s need one floating-point dtype", dq, dk, dv);
        return NULL;
    }
    if (window < 0) {
        g_fail(g,
               "attention: sliding_window is %lld: it must be 0 (none) or a positive number "
               "of keys",
               (long long)window);
        return NULL;
    }
    int64_t H = 1, Hkv = 1;
    if (kvh) {
        int iq = g_axis_index(q, qh), ik = g_axis_index(k, kvh), iv = g_axis_index(v, kvh);
        if (iq < 0 || ik < 0 || iv < 0 || kvh == qh || g_axis_index(k, qh) >= 0 ||
            g_axis_index(v, qh) >= 0 || g_axis_index(q, kvh) >= 0) {
            g_fail(g,
                   "attention: grouped-query attention needs q %s with head axis '%s' and k %s "
                   "and v %s with kv head axis '%s' in its place (two different names)",
                   dq, qh, dk, dv, kvh);
            return NULL;
        }
        H = q->dims[iq], Hkv = k->dims[ik];
        if (Hkv < 1 || v->dims[iv] != Hkv || H % Hkv != 0) {
            g_fail(g,
                   "attention: kv heads '%s' of k %s and v %s must be one count dividing the "
                   "%lld query heads '%s' of q %s",
                   kvh, dk, dv, (long long)H, qh, dq);
            return NULL;
        }
    }
    /* Batch axes: the rest of q's, which k and v must have with the same sizes. */
    const char *batch[BORA_MAX_DIMS];
    int nb = 0;
    for (int i = 0; i < q->ndim; i++)
        if (q->names[i] != qa && q->names[i] != ha)
            batch[nb++] = q->names[i];
    const gval *kv[2] = {k, v};
    for (int t = 0; t < 2; t++) {
        if (kv[t]->ndim != nb + 2) {
            g_fail(g, "attention: %s must have the batch axes of q %s, the key axis and '%s'",
                   t ? dv : dk, dq, ha);
            return NULL;
        }
        for (int i = 0; i < nb; i++) {
            if (batch[i] == qh)
                continue; /* checked above: kv_head_axis stands for it */
            int j = g_axis_index(kv[t], batch[i]);
            if (j < 0 || kv[t]->dims[j] != q->dims[g_axis_index(q, batch[i])]) {
                g_fail(g, "attention: axis '%s' of q %s differs in %s", batch[i], dq, t ? dv : dk);
                return NULL;
            }
        }
    }
    if (k->dims[g_axis_index(k, ha)] != q->dims[g_axis_index(q, ha)] ||
        v->dims[g_axis_index(v, ha)] != q->dims[g_axis_index(q, ha)] ||
        k->dims[g_axis_index(k, ka)] != v->dims[g_axis_index(v, ka)]) {
        g_fail(g, "attention: head_dim and key lengths of q %s, k %s and v %s disagree", dq, dk,
               dv);
        return NULL;
    }
    /* Cross-attention (T queries over S keys of another sequence) is causal 0 without a window.
     * The causal mask and the window place the queries at the last T of the L <= S key
     * positions, so with T > S the first queries would sit before any key. */
    int64_t T = q->dims[g_axis_index(q, qa)], S = k->dims[g_axis_index(k, ka)];
    if (T > S && ((opts && opts->causal) || window)) {
        g_fail(g,
               "attention: %s needs the %lld queries along '%s' of q %s to be at most the %lld "
               "keys along '%s' of k %s (the queries are the last positions of the keys); "
               "attention over a shorter sequence (cross-attention) is causal 0 without a window",
               opts->causal ? "causal" : "sliding_window", (long long)T, qa, dq, (long long)S, ka,
               dk);
        return NULL;
    }
    gval *seg = opts ? opts->segment_ids : NULL;
    gval *klen = opts && opts->struct_size >=
                             offsetof(bora_attention_opts, key_length) + sizeof(opts->key_length)
                     ? opts->key_length
                     : NULL;
    if (klen && (klen->ndim != 0 || klen->dtype != BORA_DTYPE_I32)) {
        char dl[256];
        g_describe(klen, dl, sizeof dl);
        g_fail(g, "attention: key_length %s must be a 0-d i32 extent", dl);
        return NULL;
    }
    /* Group batch axes: B = those the segment ids have (the documents' batch), H = the rest. */
    const char *gb[BORA_MAX_DIMS], *gh[BORA_MAX_DIMS];
    int nbb = 0, nh = 0;
    if (seg) {
        char ds[256];
        g_describe(seg, ds, sizeof ds);
        if (seg->dtype != BORA_DTYPE_I32 || g_axis_index(seg, qa) < 0) {
            g_fail(g, "attention: segment ids %s must be i32 with axis '%s'", ds, qa);
            return NULL;
        }
        for (int i = 0; i < seg->ndim; i++) {
            if (seg->names[i] == qa)
                continue;
            int j = g_axis_index(q, seg->names[i]);
            if (j < 0 || q->dims[j] != seg->dims[i] || seg->names[i] == qh) {
                g_fail(g, "attention: segment ids %s have axis '%s' that q %s lacks", ds,
                       seg->names[i], dq);
                return NULL;
            }
        }
        if (seg->dims[g_axis_index(seg, qa)] != q->dims[g_axis_index(q, qa)] ||
            k->dims[g_axis_index(k, ka)] != q->dims[g_axis_index(q, qa)]) {
            g_fail(g, "attention: with segment ids, queries and keys must have the same length");
            return NULL;
        }
    }
    for (int i = 0; i < nb; i++) {
        if (seg && g_axis_index(seg, batch[i]) >= 0)
            gb[nbb++] = batch[i];
        else if (batch[i] != qh)
            gh[nh++] = batch[i];
    }
    /* q's head axis goes last in H, so that q's grouped index (r·H + h) over kv's (r·H_kv + j)
     * is exactly the group's: kv index = q index / (H / H_kv). */
    if (qh)
        gh[nh++] = qh;
    /* (B, H, T, E) views of q, k, v. */
    const char *pos[3] = {qa, ka, ka};
    gval *src[3] = {q, k, v}, *four[3];
    for (int t = 0; t < 3; t++) {
        const char *o[BORA_MAX_DIMS];
        int m = 0;
        for (int i = 0; i < nbb; i++)
            o[m++] = gb[i];
        const char *ght[BORA_MAX_DIMS];
        for (int i = 0; i < nh; i++)
            o[m++] = ght[i] = t && gh[i] == qh ? kvh : gh[i];
        o[m++] = pos[t];
        o[m++] = ha;
        gval *x = g_permute(g, src[t], m, o);
        x = x ? group(g, x, nh, ght, "__h") : NULL;
        if (x && nh == 0) { /* group put __h first: move it after the B axes */
            const char *o2[BORA_MAX_DIMS];
            int p = 0;
            for (int i = 0; i < nbb; i++)
                o2[p++] = gb[i];
            o2[p++] = "__h";
            o2[p++] = pos[t];
            o2[p++] = ha;
            x = g_permute(g, x, p, o2);
        }
        x = x ? group(g, x, nbb, gb, "__b") : NULL;
        if (x && (x->strides[3] != 1))
            x = g_contiguous(g, x);
        if (!x)
            return NULL;
        four[t] = x;
    }
    gval *ins[6] = {four[0], four[1], four[2], NULL, NULL, NULL};
    int nin = 3;
    if (seg) {
        const char *o[BORA_MAX_DIMS];
        int m = 0;
        for (int i = 0; i < nbb; i++)
            o[m++] = gb[i];
        o[m++] = qa;
        gval *s = g_permute(g, seg, m, o);
        s = s ? group(g, s, nbb, gb, "__b") : NULL;
        if (s && s->strides[1] != 1)
            s = g_contiguous(g, s);
        gval *sk = s ? api_rename(gp, s, qa, "__kseg") : NULL;
        if (!sk)
            return NULL;
        ins[3] = s;
        ins[4] = sk;
        nin = 5;
    }
    if (klen)
        ins[nin++] = klen;
    double scale = opts && opts->scale ? opts->scale : 1.0 / sqrt((double)four[0]->dims[3]);
    int upcast =
        opts && opts->struct_size >= offsetof(bora_attention_opts, upcast) + sizeof(opts->upcast)
            ? opts->upcast
            : 0;
    bora_opt_attention aopt = {sizeof(bora_opt_attention),
                               opts ? opts->causal : 0,
                               scale,
                               seg != NULL,
                               klen != NULL,
                               0,
                               0,
                               window,
                               softcap};
    if (window && !g->store->elem_ops) {
        g_fail(g,
               "attention: sliding_window needs a backend built for ABI 1.9 or later (this one "
               "is built for 1.%u)",
               (unsigned)g->store->abi_minor);
        return NULL;
    }
    if (g->compute == BORA_DTYPE_BF16 && g->store->attention_bf16 && !upcast &&
        q->dtype == BORA_DTYPE_F32)
        aopt.product_dtype = BORA_DTYPE_BF16;
    int32_t at[11];
    for (int i = 0; i < 11; i++)
        at[i] = i < 3 || i >= nin ? q->dtype : BORA_DTYPE_I32;
    int32_t gt[11];
    for (int i = 0; i < 11; i++)
        gt[i] = i < 6 || i >= nin + 3 ? q->dtype : BORA_DTYPE_I32;
    gval *o4;
    /* Grouped heads (k and v with fewer heads than q) and the window go to the fused kernel
     * only of a backend built for 1.9 or later, the soft cap only of one built for 1.12 or
     * later; an older one gets the decomposition. */
    if (((H == Hkv && !window) || g->store->elem_ops) && (!softcap || g->store->attn_softcap) &&
        backend_has(g, BORA_OP_ATTENTION, nin + 2, at) &&
        backend_has(g, BORA_OP_ATTENTION_GRAD, nin + 6, gt)) {
        o4 = g_op1(g, BORA_OP_ATTENTION, nin, ins, q->dtype, 4, four[0]->dims, four[0]->names);
        if (!o4)
            return NULL;
        o4->node->opt.attn = aopt;
        gval *lse = g_new_value(g, q->dtype, 3, four[0]->dims, four[0]->names);
        if (!lse)
            return NULL;
        g_add_out(o4->node, lse);
        lse->requires_grad = 0;
    } else {
        /* (its products, matmuls, follow the graph's compute dtype whatever upcast says) */
        o4 = attention_decomposed(g, four, ins + 3, nin - 3, &aopt);
        if (!o4)
            return NULL;
    }
    /* Back to q's axes and order. */
    bora_axis parts[BORA_MAX_DIMS];
    for (int i = 0; i < nh; i++)
        parts[i] = (bora_axis){gh[i], q->dims[g_axis_index(q, gh[i])]};
    gval *out = api_split(gp, o4, "__h", nh, parts);
    for (int i = 0; out && i < nbb; i++)
        parts[i] = (bora_axis){gb[i], q->dims[g_axis_index(q, gb[i])]};
    out = out ? api_split(gp, out, "__b", nbb, parts) : NULL;
    return out ? g_permute(g, out, q->ndim, q->names) : NULL;
}

bora_tensor *api_concat(bora_graph *gp, const char *axis, int32_t n, bora_tensor *const *xs)
{
    g_graph *g = (g_graph *)gp;
    NEED(g, axis, xs);
    if (n < 1 || n > G_MAX_IN) {
        g_fail(g, "concat: 1 to %d tensors, not %d", G_MAX_IN, n);
        return NULL;
    }
    gval *ins[G_MAX_IN];
    int64_t total = 0;
    char d0[256], di[256];
    for (int i = 0; i < n; i++) {
        if (!xs[i]) {
            g_fail(g, "concat: tensor %d is NULL", i);
            return NULL;
        }
        ins[i] = i ? g_permute(g, xs[i], xs[0]->ndim, xs[0]->names) : xs[0];
        g_describe(xs[0], d0, sizeof d0);
        g_describe(xs[i], di, sizeof di);
        int ax = ins[i] ? g_axis_index(ins[i], axis) : -1;
        if (ax < 0 || ins[i]->dtype != xs[0]->dtype) {
            g_fail(g, "concat: %s and %s need the same axes (with '%s') and dtype", d0, di, axis);
            return NULL;
        }
        for (int j = 0; j < ins[i]->ndim; j++)
            if (j != ax && ins[i]->dims[j] != xs[0]->dims[j]) {
                g_fail(g, "concat: %s and %s differ along '%s'", d0, di, ins[i]->names[j]);
                return NULL;
            }
        total += ins[i]->dims[ax];
    }
    int ax = g_axis_index(xs[0], axis);
    int64_t dims[BORA_MAX_DIMS];
    memcpy(dims, xs[0]->dims, sizeof dims);
    dims[ax] = total;
    gval *v = g_op1(g, BORA_OP_CONCAT, n, ins, xs[0]->dtype, xs[0]->ndim, dims, xs[0]->names);
    if (v)
        v->node->opt.pad = (bora_opt_pad){sizeof(bora_opt_pad), ax, 0};
    return v;
}

/* A leaf over the store's storage (gradients, optimizer state) shaped like parameter slot. */
static gval *store_leaf(g_graph *g, long slot, int storage, int state, const char *prefix)
{
    const g_slot *p = &g->store->slots[slot];
    bora_axis axes[BORA_MAX_DIMS];
    for (int i = 0; i < p->ndim; i++)
        axes[i] = (bora_axis){p->names[i], p->dims[i]};
    char label[256];
    snprintf(label, sizeof label, "%s.%s", prefix, p->name);
    gval *v = g_leaf(g, G_PARAM, label, p->dtype, p->ndim, axes); /* no kernel, like a parameter */
    if (v) {
        v->storage = storage;
        v->slot = (int)slot;
        v->state = state;
        if (storage == S_PARAM)
            g->store->slots[slot].declared_in = g->serial;
    }
    return v;
}

gval *g_grad_leaf(g_graph *g, long slot)
{
    return store_leaf(g, slot, S_GRAD, 0, "grad");
}

gval *g_tangent_leaf(g_graph *g, long slot)
{
    if (g_store_need_hessian(g))
        return NULL;
    return store_leaf(g, slot, S_TANGENT, 0, "tangent");
}

gval *g_hvp_leaf(g_graph *g, long slot)
{
    if (g_store_need_hessian(g))
        return NULL;
    return store_leaf(g, slot, S_HVP, 0, "hvp");
}

gval *g_param_leaf(g_graph *g, long slot)
{
    return store_leaf(g, slot, S_PARAM, 0, "param");
}

/* The node writes the bf16 rounding of value, which has the parameter's axes in its order. */
bora_status g_assign_shadow(g_graph *g, long slot, gval *value)
{
    const g_slot *p = &g->store->slots[slot];
    gnode *n = g_new_node(g, G_ASSIGN, 1, &value);
    gval *out = n ? g_new_value(g, BORA_DTYPE_BF16, p->ndim, p->dims, p->names) : NULL;
    if (!out)
        return g->status;
    g_add_out(n, out);
    out->label = shadow_label(p);
    out->storage = S_SHADOW;
    out->slot = (int)slot;
    out->requires_grad = 0;
    return BORA_OK;
}

gval *g_state_leaf(g_graph *g, long slot, int k)
{
    char prefix[32];
    snprintf(prefix, sizeof prefix, "state%d", k);
    return store_leaf(g, slot, S_STATE, k, prefix);
}

bora_status api_assign(bora_graph *gp, bora_tensor *dst, bora_tensor *value)
{
    g_graph *g = (g_graph *)gp;
    if (g->status)
        return g->status;
    if (!dst || !value)
        return g_fail(g, "assign: an argument is NULL");
    char dd[256], dv[256];
    g_describe(dst, dd, sizeof dd);
    g_describe(value, dv, sizeof dv);
    if (g->mode != BORA_MODE_APPLY)
        return g_fail(g, "assign: only apply graphs write parameters (to %s)", dd);
    if (dst->base != dst ||
        (dst->storage != S_PARAM && dst->storage != S_STATE && dst->storage != S_GRAD))
        return g_fail(g, "assign: %s is not a parameter, gradient or optimizer state", dd);
    if (value->ndim != dst->ndim)
        return g_fail(g, "assign: %s does not have the axes of %s", dv, dd);
    gval *v = g_permute(g, value, dst->ndim, dst->names);
    if (!v)
        return g->status;
    for (int i = 0; i < dst->ndim; i++)
        if (v->dims[i] != dst->dims[i])
            return g_fail(g, "assign: %s does not have the shape of %s", dv, dd);
    gnode *n = g_new_node(g, G_ASSIGN, 1, &v);
    gval *out = n ? g_new_value(g, dst->dtype, dst->ndim, dst->dims, dst->names) : NULL;
    if (!out)
        return g->status;
    g_add_out(n, out);
    out->storage = dst->storage;
    out->slot = dst->slot;
    out->state = dst->state;
    out->label = dst->label;
    out->requires_grad = 0;
    /* under c=bf16 the parameter's bf16 copy is written in the same pass */
    if (dst->storage == S_PARAM && dst->dtype == BORA_DTYPE_F32 && g->store->shadows)
        return g_assign_shadow(g, dst->slot, v);
    return BORA_OK;
}

bora_tensor *api_extent(bora_graph *gp, const char *name, int64_t max)
{
    g_graph *g = (g_graph *)gp;
    NEED(g, name);
    if (max < 0 || max > INT32_MAX) {
        g_fail(g, "extent '%s': maximum %lld is outside 0..2^31-1", name, (long long)max);
        return NULL;
    }
    gval *v = api_input(gp, name, BORA_DTYPE_I32, 0, NULL);
    if (v)
        v->extent_max = max;
    return v;
}

bora_tensor *api_state(bora_graph *gp, const char *name, int32_t dtype, int32_t ndim,
                       const bora_axis *axes)
{
    g_graph *g = (g_graph *)gp;
    if (g->status)
        return NULL;
    if (!name || !*name) {
        g_fail(g, "model state needs a name");
        return NULL;
    }
    if (g_check_axes(g, "model state", name, ndim, axes))
        return NULL;
    if (!bora_dtype_size(dtype)) {
        g_fail(g, "model state '%s': unknown dtype %d", name, dtype);
        return NULL;
    }
    size_t nbytes = 0;
    if (g_axes_size(g, "model state", name, dtype, ndim, axes, &nbytes))
        return NULL;
    g_store *s = g->store;
    long at = -1;
    for (size_t i = 0; i < s->n_mstates; i++)
        if (!strcmp(s->mstates[i].name, name))
            at = (long)i;
    if (at >= 0) {
        const g_mstate *m = &s->mstates[at];
        int same = m->dtype == dtype && m->ndim == ndim;
        for (int i = 0; same && i < ndim; i++)
            same = m->dims[i] == axes[i].size && !strcmp(m->names[i], axes[i].name);
        if (!same) {
            g_fail(g, "model state '%s' is declared again with another shape or dtype", name);
            return NULL;
        }
        for (size_t i = 0; i < g->n_vals; i++)
            if (g->vals[i]->storage == S_MODEL && g->vals[i]->slot == at && g->vals[i]->node &&
                g->vals[i]->node->op == G_PARAM) {
                g_fail(g, "model state '%s' is declared twice in one graph", name);
                return NULL;
            }
    } else {
        if (s->mstate) {
            g_fail(g, "model state '%s' is new after the store was allocated", name);
            return NULL;
        }
        if (s->mstate_bytes + ((nbytes + 63) & ~(size_t)63) > (size_t)G_MAX_BYTES) {
            g_fail(g, "model state '%s': the model state would take more than 2^62 bytes", name);
            return NULL;
        }
        g_mstate *ms = g_grow(s->mstates, &s->cap_mstates, s->n_mstates, sizeof *ms);
        if (!ms) {
            g_fail(g, "out of memory");
            return NULL;
        }
        s->mstates = ms;
        g_mstate *m = &s->mstates[s->n_mstates];
        memset(m, 0, sizeof *m);
        m->name = bora_strdup(name);
        m->dtype = dtype;
        m->ndim = ndim;
        for (int i = 0; i < ndim; i++) {
            m->dims[i] = axes[i].size;
            m->names[i] = g_intern(axes[i].name);
        }
        m->offset = s->mstate_bytes;
        m->nbytes = nbytes;
        s->mstate_bytes += (m->nbytes + 63) & ~(size_t)63;
        at = (long)s->n_mstates++;
    }
    gval *v = g_leaf(g, G_PARAM, name, dtype, ndim, axes); /* no kernel, like a parameter */
    if (v) {
        v->storage = S_MODEL;
        v->slot = (int)at;
    }
    return v;
}

bora_tensor *api_write_slice(bora_graph *gp, bora_tensor *dst, bora_tensor *value, const char *axis,
                             bora_tensor *start)
{
    g_graph *g = (g_graph *)gp;
    NEED(g, dst, value, axis);
    char dd[256], dv[256];
    g_describe(dst, dd, sizeof dd);
    g_describe(value, dv, sizeof dv);
    if (g->mode == BORA_MODE_TRAIN || g->mode == BORA_MODE_HESSIAN) {
        g_fail(g, "write_slice: model state %s is not written in a graph that is differentiated",
               dd);
        return NULL;
    }
    if (dst->base != dst || dst->storage != S_MODEL) {
        g_fail(g, "write_slice: %s is not model state (bora_graph_api.state)", dd);
        return NULL;
    }
    int ax = g_axis_index(dst, axis);
    if (ax < 0 || value->ndim != dst->ndim || value->dtype != dst->dtype) {
        g_fail(g, "write_slice: %s must have the axes and dtype of %s, which must have '%s'", dv,
               dd, axis);
        return NULL;
    }
    gval *v = g_permute(g, value, dst->ndim, dst->names);
    if (!v)
        return NULL;
    for (int i = 0; i < dst->ndim; i++)
        if (i == ax ? v->dims[i] > dst->dims[i] : v->dims[i] != dst->dims[i]) {
            g_fail(g, "write_slice: %s does not fit in %s along '%s'", dv, dd, axis);
            return NULL;
        }
    if (start && (start->ndim != 0 || start->dtype != BORA_DTYPE_I32)) {
        char ds[256];
        g_describe(start, ds, sizeof ds);
        g_fail(g, "write_slice: start %s must be a 0-d i32 extent or input", ds);
        return NULL;
    }
    gval *ins[3] = {dst, v, start};
    gnode *n = g_new_node(g, BORA_OP_WRITE_SLICE, start ? 3 : 2, ins);
    gval *out = n ? g_new_value(g, dst->dtype, dst->ndim, dst->dims, dst->names) : NULL;
    if (!out)
        return NULL;
    g_add_out(n, out);
    n->opt.pad = (bora_opt_pad){sizeof(bora_opt_pad), ax, 0};
    out->storage = S_MODEL;
    out->slot = dst->slot;
    out->label = dst->label;
    out->requires_grad = 0;
    return out;
}

bora_tensor *api_checkpoint(bora_graph *gp, bora_tensor *x)
{
    g_graph *g = (g_graph *)gp;
    NEED(g, x);
    int id = x->base->node ? x->base->node->id : -1;
    if (x->node && x->node->id > id)
        id = x->node->id;
    if (g->n_checkpoints && g->checkpoints[g->n_checkpoints - 1] >= id)
        return x; /* already a boundary, or one at a later node */
    int *c = g_grow(g->checkpoints, &g->cap_checkpoints, g->n_checkpoints, sizeof *c);
    if (!c) {
        g_fail(g, "out of memory");
        return NULL;
    }
    g->checkpoints = c;
    g->checkpoints[g->n_checkpoints++] = id;
    return x;
}
