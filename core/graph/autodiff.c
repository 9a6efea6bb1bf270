/* core/graph/autodiff.c — reverse-mode differentiation of a built graph.
 *
 * Nodes are visited in reverse creation order; each rule adds graph nodes that compute its
 * inputs' gradients from its outputs' (views invert themselves: a slice pads, a broadcast sums,
 * a merge splits). Contributions to one value are summed in the order they arrive, which is
 * fixed by the graph, so results are deterministic. Each parameter's total gradient is added
 * into its persistent gradient buffer, so tied weights and micro-batches accumulate. */
#include "graph.h"

#include "../util/log.h"

#include <stdlib.h>
#include <string.h>

/* The PAD or CONCAT node (op) whose output v is, or NULL. */
static gnode *made_by(gval *v, int op)
{
    return v && v->node && v->node->op == op && v->node->out[0] == v ? v->node : NULL;
}

/* Appends x to parts, or x's own parts when x is a concat along axis ax. */
static int add_parts(gval *x, int ax, gval **parts, int n)
{
    gnode *c = made_by(x, BORA_OP_CONCAT);
    if (!c || c->opt.pad.axis != ax)
        return n < G_MAX_IN ? (parts[n] = x, n + 1) : G_MAX_IN + 1;
    for (int i = 0; i < c->nin; i++)
        n = add_parts(c->in[i], ax, parts, n);
    return n;
}

/* pad(a) + pad(b) over adjacent ranges of one axis (the gradients of a tensor's slices: q, k and
 * v of one projection) as one pad of concat(a, b), or the concat alone once it fills the axis:
 * no zeros written and added. The sum had one term per element besides zeros, so the values are
 * the same (a zero's sign aside). NULL when the two are not such pads. */
static gval *join_pads(g_graph *g, gval *have, gval *dv)
{
    gnode *p = made_by(have, BORA_OP_PAD), *q = made_by(dv, BORA_OP_PAD);
    if (!p || !q || p->opt.pad.axis != q->opt.pad.axis || have->dtype != dv->dtype ||
        have->ndim != dv->ndim)
        return NULL;
    for (int i = 0; i < have->ndim; i++)
        if (have->dims[i] != dv->dims[i] || have->names[i] != dv->names[i])
            return NULL;
    int ax = p->opt.pad.axis;
    gval *a = p->in[0], *b = q->in[0];
    int64_t sa = p->opt.pad.start, sb = q->opt.pad.start, start;
    gval *parts[G_MAX_IN + 1];
    int n;
    if (sa + a->dims[ax] == sb)
        start = sa, n = add_parts(b, ax, parts, add_parts(a, ax, parts, 0));
    else if (sb + b->dims[ax] == sa)
        start = sb, n = add_parts(a, ax, parts, add_parts(b, ax, parts, 0));
    else
        return NULL;
    if (n > G_MAX_IN)
        return NULL;
    gval *c = g->pub.api->concat(&g->pub, have->names[ax], n, parts);
    if (!c || c->dims[ax] == have->dims[ax])
        return c;
    return g_pad(g, c, have, ax, start);
}

/* Add dv to v's gradient (aligned by name). */
static void acc(g_graph *g, gval *v, gval *dv)
{
    if (!v || !dv || !v->requires_grad || g->status)
        return;
    /* Mixed precision's bf16 copy, and views of it: the gradient stays f32, and the copy's own
     * goes to its source. */
    while (v->mp_cast)
        v = v->mp_src ? v->mp_src : v->node->in[0];
    if (dv->dtype != v->dtype && !(v->base && v->base->mp_cast))
        dv = g->pub.api->cast(&g->pub, dv, v->dtype);
    if (!v->grad) {
        v->grad = g_permute(g, dv, v->ndim, v->names);
    } else {
        gval *joined = join_pads(g, v->grad, dv);
        v->grad = joined ? joined : g_binary(g, BORA_OP_ADD, v->grad, dv);
    }
}

static gval *in_order(g_graph *g, gval *dv, const gval *like)
{
    return dv ? g_permute(g, dv, like->ndim, like->names) : NULL;
}

/* The value whose storage parameter p's gradient d can be computed straight into, or NULL: d's
 * base, a whole dense arena value made by a kernel, of p's dtype, whose elements d takes in
 * their own order with p's shape (d itself, or a reshape of it such as a product's output
 * without its batch axis). */
static gval *writes_in_place(const gval *p, gval *d)
{
    gval *b = d->base;
    if (b->storage != S_ARENA || !b->node || d->offset != 0 || d->dtype != p->dtype ||
        d->ndim != p->ndim || g_numel(b) != g_numel(p))
        return NULL;
    int64_t stride = 1;
    for (int i = d->ndim - 1; i >= 0; i--) {
        if (d->dims[i] != p->dims[i] || (d->dims[i] > 1 && d->strides[i] != stride))
            return NULL;
        stride *= d->dims[i];
    }
    return b;
}

static gval *neg(g_graph *g, gval *x)
{
    return g->pub.api->unary(&g->pub, BORA_OP_NEG, x);
}
static gval *mul(g_graph *g, gval *a, gval *b)
{
    return g_binary(g, BORA_OP_MUL, a, b);
}
static gval *divide(g_graph *g, gval *a, gval *b)
{
    return g_binary(g, BORA_OP_DIV, a, b);
}
static gval *sub(g_graph *g, gval *a, gval *b)
{
    return g_binary(g, BORA_OP_SUB, a, b);
}
static gval *scale(g_graph *g, gval *x, double s)
{
    return g->pub.api->scale(&g->pub, x, s);
}

/* A node with nout fresh outputs shaped like the given values. */
static gnode *multi(g_graph *g, int op, int nin, gval *const *in, int nout, const gval *const *like)
{
    gnode *n = g_new_node(g, op, nin, in);
    for (int i = 0; n && i < nout; i++) {
        gval *v = g_new_value(g, like[i]->dtype, like[i]->ndim, like[i]->dims, like[i]->names);
        if (!v)
            return NULL;
        g_add_out(n, v);
        v->label = g_op_name(op);
    }
    return n;
}

/* matmul3(p, q) with p and/or q first seen with their last two axes swapped. */
static gval *matmul_t(g_graph *g, gval *p, gval *q, int tp, int tq)
{
    if (!p || !q)
        return NULL;
    if (tp) {
        const char *t[3] = {p->names[0], p->names[2], p->names[1]};
        p = g_permute(g, p, 3, t);
    }
    if (tq) {
        const char *t[3] = {q->names[0], q->names[2], q->names[1]};
        q = g_permute(g, q, 3, t);
    }
    return p && q ? g_matmul3(g, p, q) : NULL;
}

static void view_backward(g_graph *g, gnode *n)
{
    gval *src = n->in[0], *out = n->out[0], *dv = in_order(g, out->grad, out);
    if (!dv || !src->requires_grad)
        return;
    const bora_graph_api *A = g->pub.api;
    switch (n->view) {
    case V_PERMUTE: acc(g, src, dv); break;
    case V_RENAME: acc(g, src, A->rename(&g->pub, dv, n->vname[1], n->vname[0])); break;
    case V_SLICE: acc(g, src, g_pad(g, dv, src, g_axis_index(src, n->vname[0]), n->vstart)); break;
    case V_BROADCAST: acc(g, src, g_reduce_sum_to(g, dv, src)); break;
    case V_SPLIT:
        if (n->vn == 0) /* a size-1 axis was dropped: put it back */
            acc(g, src, A->broadcast(&g->pub, dv, n->vparts[0]));
        else
            acc(g, src, A->merge(&g->pub, dv, n->vn, n->vname, n->vparts[0].name));
        break;
    case V_MERGE: acc(g, src, A->split(&g->pub, dv, n->vname[0], n->vn, n->vparts)); break;
    default: g_fail(g, "internal: unknown view kind %d", n->view);
    }
}

static void op_backward(g_graph *g, gnode *n)
{
    gval *y = n->out[0], *dy = y->grad;
    gval *x = n->nin > 0 ? n->in[0] : NULL, *b = n->nin > 1 ? n->in[1] : NULL;
    const bora_graph_api *A = g->pub.api;
    int any = 0;
    for (int i = 0; i < n->nin; i++)
        any |= n->in[i]->requires_grad;
    if (!any || n->op == BORA_OP_SAMPLE) /* a drawn token is a constant to the gradient */
        return;
    if (!dy && n->op != BORA_OP_LAYERNORM)
        return;
    switch (n->op) {
    case BORA_OP_ADD:
        acc(g, x, dy);
        acc(g, b, dy);
        break;
    case BORA_OP_SUB:
        acc(g, x, dy);
        if (b->requires_grad)
            acc(g, b, neg(g, dy));
        break;
    case BORA_OP_MUL:
        if (x->requires_grad)
            acc(g, x, mul(g, dy, b));
        if (b->requires_grad)
            acc(g, b, mul(g, dy, x));
        break;
    case BORA_OP_DIV:
        if (x->requires_grad)
            acc(g, x, divide(g, dy, b));
        if (b->requires_grad)
            acc(g, b, neg(g, divide(g, mul(g, dy, y), b)));
        break;
    case BORA_OP_NEG: acc(g, x, neg(g, dy)); break;
    case BORA_OP_EXP: acc(g, x, mul(g, dy, y)); break;
    case BORA_OP_LOG: acc(g, x, divide(g, dy, x)); break;
    case BORA_OP_SQRT: acc(g, x, divide(g, scale(g, dy, 0.5), y)); break;
    case BORA_OP_RSQRT: acc(g, x, scale(g, mul(g, dy, mul(g, y, mul(g, y, y))), -0.5)); break;
    case BORA_OP_TANH:
    case BORA_OP_SIGMOID:
    case BORA_OP_RELU:
    case BORA_OP_SILU:
    case BORA_OP_GELU_TANH:
    case BORA_OP_GELU_EXACT: {
        gval *ins[2] = {x, in_order(g, dy, x)};
        gval *dx = ins[1] ? g_op1(g, BORA_OP_ACT_GRAD, 2, ins, x->dtype, x->ndim, x->dims, x->names)
                          : NULL;
        if (dx)
            dx->node->opt.act = (bora_opt_act){sizeof(bora_opt_act), n->op};
        acc(g, x, dx);
        break;
    }
    case BORA_OP_SCALE: acc(g, x, scale(g, dy, n->opt.scalar.value)); break;
    case BORA_OP_COPY: acc(g, x, dy); break;
    case BORA_OP_SUM: acc(g, x, g_align_to(g, dy, x)); break;
    case BORA_OP_MAX: {
        gval *ins[3] = {x, g_align_to(g, y, x), g_align_to(g, dy, x)};
        gval *dx = ins[1] && ins[2]
                       ? g_op1(g, BORA_OP_ACT_GRAD, 3, ins, x->dtype, x->ndim, x->dims, x->names)
                       : NULL;
        if (dx)
            dx->node->opt.act = (bora_opt_act){sizeof(bora_opt_act), BORA_OP_MAX};
        acc(g, x, dx);
        break;
    }
    case BORA_OP_MATMUL: {
        /* C = A B over (batch, m, k) x (batch, k, n): dA = dC Bᵀ, dB = Aᵀ dC. An operand whose
         * storage is transposed (a view of a (n, k) weight, say) gets its gradient computed
         * transposed, dBᵀ = dCᵀ A, so that it lands in the weight's own order. Under mixed
         * precision dC is rounded once, for both products. */
        dy = g_lowp(g, in_order(g, dy, y));
        if (x->requires_grad)
            acc(g, x,
                x->strides[1] == 1 && x->dims[1] > 1 && x->dims[2] > 1
                    ? in_order(g, matmul_t(g, b, dy, 0, 1), x)
                    : matmul_t(g, dy, b, 0, 1));
        if (b->requires_grad)
            acc(g, b,
                b->strides[1] == 1 && b->dims[1] > 1 && b->dims[2] > 1
                    ? in_order(g, matmul_t(g, dy, x, 1, 0), b)
                    : matmul_t(g, x, dy, 1, 0));
        break;
    }
    case BORA_OP_LAYERNORM: {
        if (!dy)
            return;
        gval *ins[5] = {x, b, n->out[1], n->out[2], in_order(g, dy, y)};
        const gval *like[3] = {x, b, n->in[2]};
        gnode *gn = ins[4] ? multi(g, BORA_OP_LAYERNORM_GRAD, 5, ins, 3, like) : NULL;
        if (!gn)
            return;
        gn->opt.norm = n->opt.norm;
        acc(g, x, gn->out[0]);
        acc(g, b, gn->out[1]);
        acc(g, n->in[2], gn->out[2]);
        break;
    }
    case BORA_OP_RMS_NORM: {
        /* (x, [weight], rstd, dy) -> dx, [dweight]: rstd is the forward's second output */
        int nw = n->nin == 2;
        gval *ins[4] = {x, nw ? b : n->out[1], nw ? n->out[1] : in_order(g, dy, y),
                        nw ? in_order(g, dy, y) : NULL};
        const gval *like[2] = {x, b};
        gnode *gn = ins[2 + nw] ? multi(g, BORA_OP_RMS_NORM_GRAD, 3 + nw, ins, 1 + nw, like) : NULL;
        if (!gn)
            return;
        gn->opt.rms = n->opt.rms;
        acc(g, x, gn->out[0]);
        if (nw)
            acc(g, b, gn->out[1]);
        break;
    }
    case BORA_OP_SOFTMAX: {
        /* dx = y (dy - Σ dy·y) over the last axis */
        dy = in_order(g, dy, y);
        const char *last = y->names[y->ndim - 1];
        gval *t = g_reduce_last(g, BORA_OP_SUM, mul(g, dy, y), 1, &last);
        acc(g, x, t ? mul(g, y, sub(g, dy, g_align_to(g, t, y))) : NULL);
        break;
    }
    case BORA_OP_LOG_SOFTMAX: {
        /* dx = dy - exp(y) Σ dy */
        dy = in_order(g, dy, y);
        const char *last = y->names[y->ndim - 1];
        gval *t = g_reduce_last(g, BORA_OP_SUM, dy, 1, &last);
        gval *e = A->unary(&g->pub, BORA_OP_EXP, y);
        acc(g, x, t && e ? sub(g, dy, mul(g, e, g_align_to(g, t, y))) : NULL);
        break;
    }
    case BORA_OP_XENT: {
        gval *ins[4] = {x, b, n->out[1], dy};
        gval *dl = g_op1(g, BORA_OP_XENT_GRAD, 4, ins, x->dtype, x->ndim, x->dims, x->names);
        if (dl)
            dl->node->opt.xent = n->opt.xent;
        acc(g, x, dl);
        break;
    }
    case BORA_OP_GATHER: {
        gval *ins[2] = {b, in_order(g, dy, y)};
        acc(g, x,
            ins[1] ? g_op1(g, BORA_OP_SCATTER_ADD, 2, ins, x->dtype, x->ndim, x->dims, x->names)
                   : NULL);
        break;
    }
    case BORA_OP_ATTENTION: {
        gval *ins[G_MAX_IN] = {n->in[0], n->in[1], n->in[2], y, n->out[1], in_order(g, dy, y)};
        int nin = 6;
        for (int k = 3; k < n->nin; k++) /* segment ids, key length */
            ins[nin++] = n->in[k];
        const gval *like[3] = {n->in[0], n->in[1], n->in[2]};
        gnode *gn = ins[5] ? multi(g, BORA_OP_ATTENTION_GRAD, nin, ins, 3, like) : NULL;
        if (!gn)
            return;
        gn->opt.attn = n->opt.attn;
        for (int i = 0; i < 3; i++)
            acc(g, n->in[i], gn->out[i]);
        break;
    }
    case BORA_OP_PAD: {
        dy = in_order(g, dy, y);
        int ax = n->opt.pad.axis;
        acc(g, x, A->slice(&g->pub, dy, y->names[ax], n->opt.pad.start, x->dims[ax]));
        break;
    }
    case BORA_OP_CONCAT: {
        dy = in_order(g, dy, y);
        int ax = n->opt.pad.axis;
        int64_t at = 0;
        for (int i = 0; i < n->nin; i++) {
            acc(g, n->in[i], A->slice(&g->pub, dy, y->names[ax], at, n->in[i]->dims[ax]));
            at += n->in[i]->dims[ax];
        }
        break;
    }
    case BORA_OP_FILL: break;
    case BORA_OP_SIN: acc(g, x, mul(g, dy, A->unary(&g->pub, BORA_OP_COS, x))); break;
    case BORA_OP_COS: acc(g, x, neg(g, mul(g, dy, A->unary(&g->pub, BORA_OP_SIN, x)))); break;
    case BORA_OP_ABS: acc(g, x, mul(g, dy, A->unary(&g->pub, BORA_OP_SIGN, x))); break;
    case BORA_OP_SIGN: break; /* zero almost everywhere: nothing to add */
    case BORA_OP_MINIMUM:
    case BORA_OP_MAXIMUM: {
        /* to a where it was chosen (a tie included), to b elsewhere: where a is NaN the
         * gradient goes to b */
        gval *m = n->op == BORA_OP_MINIMUM ? g_binary(g, BORA_OP_LESS_EQUAL, x, b)
                                           : g_binary(g, BORA_OP_LESS_EQUAL, b, x);
        gval *zero = A->full(&g->pub, dy->dtype, 0, NULL, 0.0);
        if (!m || !zero)
            return;
        if (x->requires_grad)
            acc(g, x, g_where(g, m, dy, zero));
        if (b->requires_grad)
            acc(g, b, g_where(g, m, zero, dy));
        break;
    }
    case BORA_OP_WHERE: { /* to the chosen side; the mask has no gradient */
        gval *m = n->in[0], *a = n->in[1], *c = n->in[2];
        gval *zero = A->full(&g->pub, dy->dtype, 0, NULL, 0.0);
        if (!zero)
            return;
        if (a->requires_grad)
            acc(g, a, g_where(g, m, dy, zero));
        if (c->requires_grad)
            acc(g, c, g_where(g, m, zero, dy));
        break;
    }
    case BORA_OP_LESS: /* masks and ramps: no gradient */
    case BORA_OP_LESS_EQUAL:
    case BORA_OP_EQUAL:
    case BORA_OP_NOT_EQUAL:
    case BORA_OP_IOTA: break;
    case BORA_OP_ROPE: { /* the rotation transposed: the same op with the sine negated */
        gval *ins[4] = {in_order(g, dy, y), n->in[1], n->in[2], n->nin > 3 ? n->in[3] : NULL};
        gval *dx = ins[0]
                       ? g_op1(g, BORA_OP_ROPE, n->nin, ins, x->dtype, x->ndim, x->dims, x->names)
                       : NULL;
        if (!dx)
            return;
        dx->node->opt.rope = n->opt.rope;
        dx->node->opt.rope.inverse = !n->opt.rope.inverse;
        acc(g, x, dx);
        break;
    }
    case BORA_OP_TOP_K: /* integers: no gradient (top_k's values are a gather of x) */
    case BORA_OP_ARGSORT:
    case BORA_OP_BINCOUNT: break;
    case BORA_OP_GROUPED_MATMUL: {
        /* y_e = x_e w_e per group of rows: dx_e = dy_e w_eᵀ (the same op, w read transposed),
         * dw_e = x_eᵀ dy_e; the sizes have no gradient. Under mixed precision dy is rounded
         * once, for both. */
        gval *sizes = n->in[2];
        dy = g_lowp(g, in_order(g, dy, y));
        if (x->requires_grad) {
            const char *t[3] = {b->names[0], b->names[2], b->names[1]};
            acc(g, x, dy ? g_grouped_matmul(g, dy, g_permute(g, b, 3, t), sizes) : NULL);
        }
        if (b->requires_grad)
            acc(g, b, dy ? g_grouped_matmul_grad(g, x, dy, sizes, b) : NULL);
        break;
    }
    case BORA_OP_GROUPED_MATMUL_GRAD: {
        /* dw_e = x_eᵀ g_e (g the incoming dy): with G = dw's gradient, x gets g_e G_eᵀ and g
         * gets x_e G_e, both grouped products */
        gval *sizes = n->in[2];
        dy = g_lowp(g, in_order(g, dy, y));
        if (x->requires_grad) {
            const char *t[3] = {y->names[0], y->names[2], y->names[1]};
            acc(g, x, dy ? g_grouped_matmul(g, b, g_permute(g, dy, 3, t), sizes) : NULL);
        }
        if (b->requires_grad)
            acc(g, b, dy ? g_grouped_matmul(g, x, dy, sizes) : NULL);
        break;
    }
    case BORA_OP_CONV1D: {
        /* y = conv(x, w): dx is the transposed convolution of dy by w, dw the correlation of x
         * with dy; under mixed precision dy is rounded once, for both */
        int64_t s = n->opt.conv.stride, p = n->opt.conv.padding;
        dy = g_lowp(g, in_order(g, dy, y));
        if (x->requires_grad)
            acc(g, x, dy ? g_conv1d_grad_input(g, dy, b, s, p, x) : NULL);
        if (b->requires_grad)
            acc(g, b, dy ? g_conv1d_grad_weight(g, x, dy, s, p, b) : NULL);
        break;
    }
    case BORA_OP_CONV1D_GRAD_INPUT: {
        /* dx = convT(d, w), bilinear: with G = dx's gradient, d gets conv(G, w) and w gets the
         * weight gradient of G with d */
        int64_t s = n->opt.conv.stride, p = n->opt.conv.padding;
        dy = g_lowp(g, in_order(g, dy, y));
        if (x->requires_grad)
            acc(g, x, dy ? g_conv1d(g, dy, b, s, p) : NULL);
        if (b->requires_grad)
            acc(g, b, dy ? g_conv1d_grad_weight(g, dy, x, s, p, b) : NULL);
        break;
    }
    case BORA_OP_CONV1D_GRAD_WEIGHT: {
        /* dw = corr(x, d): with G = dw's gradient, x gets convT(d, G) and d gets conv(x, G) */
        int64_t s = n->opt.conv.stride, p = n->opt.conv.padding;
        dy = g_lowp(g, in_order(g, dy, y));
        if (x->requires_grad)
            acc(g, x, dy ? g_conv1d_grad_input(g, b, dy, s, p, x) : NULL);
        if (b->requires_grad)
            acc(g, b, dy ? g_conv1d(g, x, dy, s, p) : NULL);
        break;
    }
    default: g_fail(g, "no gradient rule for op '%s'", g_op_name(n->op));
    }
}

static void node_backward(g_graph *g, gnode *n)
{
    if (n->op == G_VIEW)
        view_backward(g, n);
    else if (n->op != G_PARAM && n->op != G_INPUT && n->op != G_CONST)
        op_backward(g, n);
}

/* Recompute forward nodes (lo, hi] just before their backward: clone them (same ops, options
 * and inputs, so the same bits), move the gradients that reached the originals' outputs onto
 * the clones, and differentiate the clones. The originals' activations then die with the
 * forward pass. */
static void recompute_segment(g_graph *g, size_t lo, size_t hi)
{
    size_t n_vals = g->n_vals;
    gval **map = calloc(n_vals, sizeof *map);
    if (!map) {
        g_fail(g, "out of memory");
        return;
    }
    size_t first_clone = g->n_nodes;
    for (size_t i = lo + 1; i <= hi && !g->status; i++) {
        gnode *n = g->nodes[i];
        if (n->op == G_PARAM || n->op == G_INPUT || n->op == G_CONST)
            continue;
        gval *ins[G_MAX_IN];
        for (int k = 0; k < n->nin; k++)
            ins[k] =
                (size_t)n->in[k]->id < n_vals && map[n->in[k]->id] ? map[n->in[k]->id] : n->in[k];
        if (n->op == G_VIEW) {
            gval *src = ins[0], *orig = n->out[0];
            gval *v = g_view_like(g, src, n->view, orig);
            if (!v)
                break;
            gnode *c = v->node;
            v->label = orig->label;
            v->mp_cast = orig->mp_cast;
            if (orig->mp_src)
                v->mp_src = (size_t)orig->mp_src->id < n_vals && map[orig->mp_src->id]
                                ? map[orig->mp_src->id]
                                : orig->mp_src;
            memcpy(c->vname, n->vname, sizeof c->vname);
            memcpy(c->vparts, n->vparts, sizeof c->vparts);
            c->vn = n->vn;
            c->vstart = n->vstart;
            map[orig->id] = v;
            continue;
        }
        gnode *c = g_new_node(g, n->op, n->nin, ins);
        if (!c)
            break;
        c->opt = n->opt;
        c->recompute = 1;
        for (int o = 0; o < n->nout; o++) {
            gval *orig = n->out[o];
            gval *v = g_new_value(g, orig->dtype, orig->ndim, orig->dims, orig->names);
            if (!v)
                break;
            g_add_out(c, v);
            v->requires_grad = orig->requires_grad;
            v->mp_cast = orig->mp_cast;
            v->label = orig->label;
            map[orig->id] = v;
        }
    }
    size_t last_clone = g->n_nodes;
    for (size_t i = 0; i < n_vals; i++)
        if (map[i] && g->vals[i]->grad) {
            map[i]->grad = g->vals[i]->grad;
            g->vals[i]->grad = NULL;
        }
    free(map);
    for (size_t i = last_clone; i-- > first_clone && !g->status;)
        node_backward(g, g->nodes[i]);
}

bora_status g_backward(g_graph *g, gval *loss)
{
    if (g->status)
        return g->status;
    if (loss->ndim != 0) {
        char d[256];
        g_describe(loss, d, sizeof d);
        return g_fail(g, "the loss %s must be a 0-d tensor (a sum or mean)", d);
    }
    if (!loss->requires_grad)
        return g_fail(g, "the loss does not depend on any parameter");
    loss->grad = g_fill(g, loss, 1.0);
    size_t n_forward = g->n_nodes;
    size_t seg = g->recompute ? g->n_checkpoints : 0; /* segments between checkpoints */
    for (size_t i = n_forward; i-- > 0 && !g->status;) {
        /* The last node of a recomputed segment (checkpoint k-1, checkpoint k]. */
        if (seg >= 2 && (size_t)g->checkpoints[seg - 1] == i) {
            size_t lo = (size_t)g->checkpoints[seg - 2];
            recompute_segment(g, lo, i);
            seg--;
            i = lo + 1; /* the loop continues at the boundary node itself */
            continue;
        }
        node_backward(g, g->nodes[i]);
    }
    return g->status;
}

bora_status g_autodiff(g_graph *g, gval *loss)
{
    size_t n_forward = g->n_nodes;
    if (g_backward(g, loss))
        return g->status;
    /* Where the gradients go: the gradient block, or the hvp block (grads_to_hvp). */
    int block = g->grads_to_hvp ? S_HVP : S_GRAD;
    if (block == S_HVP && g_store_need_hessian(g))
        return g->status;
    /* Each parameter's total into its persistent buffer: grad += dparam; or, where the graph
     * writes the gradients (grads_write), grad = dparam: the value's own node writes it into the
     * buffer where it can (a whole dense value made by a kernel, not yet anyone's gradient),
     * else a copy does. */
    for (size_t i = 0; i < n_forward && !g->status; i++) {
        gnode *n = g->nodes[i];
        if (n->op != G_PARAM || !n->out[0]->grad)
            continue;
        gval *p = n->out[0];
        gval *d = in_order(g, p->grad, p);
        gval *into = d && g->grads_write ? writes_in_place(p, d) : NULL;
        if (into) {
            into->storage = block;
            into->slot = p->slot;
            continue;
        }
        gnode *acc_node = d ? g_new_node(g, g->grads_write ? G_ASSIGN : G_GRAD, 1, &d) : NULL;
        gval *buf = acc_node ? g_new_value(g, p->dtype, p->ndim, p->dims, p->names) : NULL;
        if (!buf)
            break;
        buf->storage = block;
        buf->slot = p->slot;
        buf->label = p->label;
        g_add_out(acc_node, buf);
    }
    if (block == S_HVP)
        return g->status;
    if (g->grads_write)
        g->store->grad_writers++;
    else
        g->store->grad_adders++;
    return g->status;
}
