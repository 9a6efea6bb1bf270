/* core/graph/hvp.c — Hessian-vector products of a graph's loss, forward-over-reverse.
 *
 * H·v is the directional derivative of the gradient along v: JAX's jvp(grad). The reverse graph
 * is built first, as g_autodiff builds it (its gradients left as values, no buffer written);
 * then one forward pass over every node of the forward and the reverse graph, in creation order,
 * computes each value's tangent — its derivative along the parameters' tangent v, which the host
 * writes into the store's tangent block — from its inputs' tangents by one rule per op, linear in
 * the tangents and built from existing graph ops. The tangent of each parameter's gradient is
 * H·v; it is added into (or, under hvp_write, written to) the store's hvp block.
 *
 * Why forward-over-reverse: it needs one tangent per value and only the first derivatives of the
 * ops the gradient graph contains (an activation's ACT_GRAD needs the activation's second
 * derivative, the one place a second derivative appears); reverse-over-reverse would need the
 * reverse rule of every backward kernel. Fused kernels have no rules: a Hessian graph is built
 * with them off (build_ops.c, build_rope.c), so it holds their decompositions into primitives.
 *
 * A tangent is NULL where it is zero (a value that does not depend on the parameters: inputs,
 * masks, constants), so only the parameters' cone gets tangent nodes; values that do not reach
 * an hvp buffer are dropped by the planner like any unused node. Every rule builds a fixed set
 * of nodes, so the result is as deterministic as the gradient. */
#include "build.h"

#include <math.h>
#include <stdlib.h>

typedef struct tctx {
    g_graph *g;
    gval **tan; /* by primal value id: its tangent, or NULL for zero */
    size_t n_tan;
    gval **slot_tan; /* by store slot: the tangent leaf, once made */
} tctx;

static gval *tan_of(const tctx *c, const gval *v)
{
    return v && (size_t)v->id < c->n_tan ? c->tan[v->id] : NULL;
}

/* ---- small builders (NULL stands for zero where a rule allows it) ------------------------- */

static gval *add(g_graph *g, gval *a, gval *b)
{
    return !a ? b : !b ? a : g_binary(g, BORA_OP_ADD, a, b);
}
static gval *sub(g_graph *g, gval *a, gval *b)
{
    return g_binary(g, BORA_OP_SUB, a, b);
}
static gval *mul(g_graph *g, gval *a, gval *b)
{
    return a && b ? g_binary(g, BORA_OP_MUL, a, b) : NULL;
}
static gval *divide(g_graph *g, gval *a, gval *b)
{
    return g_binary(g, BORA_OP_DIV, a, b);
}
static gval *un(g_graph *g, int op, gval *x)
{
    return api_unary(&g->pub, op, x);
}
static gval *scale(g_graph *g, gval *x, double s)
{
    return x ? g->pub.api->scale(&g->pub, x, s) : NULL;
}
static gval *cst(g_graph *g, const gval *like, double v)
{
    return g_fill(g, like, v);
}

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

/* Tangent t laid out for a kernel that read x: x's axis order, and dense where x was (a kernel
 * that got a dense operand may expect one). */
static gval *like(g_graph *g, gval *t, const gval *x)
{
    t = t ? g_permute(g, t, x->ndim, x->names) : NULL;
    return t && dense(x) && !dense(t) ? g_contiguous(g, t) : t;
}

/* The tangent or, where it is zero, zeros shaped like x. */
static gval *or_zeros(g_graph *g, gval *t, const gval *x)
{
    return t ? t : cst(g, x, 0.0);
}

/* Node n again (same op and options) over other inputs: for ops linear in the inputs replaced. */
static gval *again(g_graph *g, const gnode *n, gval *const *ins)
{
    for (int k = 0; k < n->nin; k++)
        if (!ins[k])
            return NULL;
    const gval *y = n->out[0];
    gval *t = g_op1(g, n->op, n->nin, ins, y->dtype, y->ndim, y->dims, y->names);
    if (t)
        t->node->opt = n->opt;
    return t;
}

/* f''(x) of an activation (NULL: zero), for the tangent of its ACT_GRAD dy·f'(x). */
static gval *second_derivative(g_graph *g, int act, gval *x)
{
    switch (act) {
    case BORA_OP_RELU: return NULL;
    case BORA_OP_TANH: { /* -2 y (1 - y²) */
        gval *y = un(g, BORA_OP_TANH, x);
        return scale(g, mul(g, y, sub(g, cst(g, x, 1), mul(g, y, y))), -2);
    }
    case BORA_OP_SIGMOID: { /* s (1 - s) (1 - 2s) */
        gval *s = un(g, BORA_OP_SIGMOID, x);
        gval *d = mul(g, s, sub(g, cst(g, x, 1), s));
        return mul(g, d, sub(g, cst(g, x, 1), scale(g, s, 2)));
    }
    case BORA_OP_SILU: { /* x σ(x): s (1 - s) (2 + x (1 - 2s)) */
        gval *s = un(g, BORA_OP_SIGMOID, x);
        gval *d = mul(g, s, sub(g, cst(g, x, 1), s));
        return mul(g, d, add(g, cst(g, x, 2), mul(g, x, sub(g, cst(g, x, 1), scale(g, s, 2)))));
    }
    case BORA_OP_GELU_EXACT: { /* x Φ(x): φ(x) (2 - x²) */
        gval *x2 = mul(g, x, x);
        gval *phi = scale(g, un(g, BORA_OP_EXP, scale(g, x2, -0.5)), 1 / sqrt(2 * M_PI));
        return mul(g, phi, sub(g, cst(g, x, 2), x2));
    }
    case BORA_OP_GELU_TANH: {
        /* ½x(1 + T), T = tanh(u), u = c(x + a x³): with S = 1 - T², u' = c(1 + 3a x²) and
         * u'' = 6ac x, f'' = S (u' - x T u'² + ½ x u'') */
        const double c = sqrt(2 / M_PI), a = 0.044715;
        gval *x2 = mul(g, x, x);
        gval *t = un(g, BORA_OP_TANH, scale(g, add(g, x, scale(g, mul(g, x2, x), a)), c));
        gval *s = sub(g, cst(g, x, 1), mul(g, t, t));
        gval *u1 = scale(g, add(g, cst(g, x, 1), scale(g, x2, 3 * a)), c);
        gval *inner = sub(g, u1, mul(g, mul(g, x, t), mul(g, u1, u1)));
        return mul(g, s, add(g, inner, scale(g, x2, 3 * a * c)));
    }
    default:
        g_fail(g, "hvp: no second derivative for activation '%s'", g_op_name(act));
        return NULL;
    }
}

/* ---- the rules ---------------------------------------------------------------------------- */

/* A view's tangent: the same view of the source's tangent, replayed by name. */
static gval *view_tangent(g_graph *g, const gnode *n, gval *t)
{
    const gval *src = n->in[0], *out = n->out[0];
    bora_graph *gp = &g->pub;
    t = g_permute(g, t, src->ndim, src->names);
    if (!t)
        return NULL;
    switch (n->view) {
    case V_PERMUTE: return g_permute(g, t, out->ndim, out->names);
    case V_RENAME: return api_rename(gp, t, n->vname[0], n->vname[1]);
    case V_SLICE:
        return gp->api->slice(gp, t, n->vname[0], n->vstart,
                              out->dims[g_axis_index(out, n->vname[0])]);
    case V_BROADCAST: return api_broadcast(gp, t, (bora_axis){out->names[0], out->dims[0]});
    case V_SPLIT: {
        bora_axis parts[BORA_MAX_DIMS];
        for (int k = 0; k < n->vn; k++)
            parts[k] = (bora_axis){n->vname[k], out->dims[g_axis_index(out, n->vname[k])]};
        return api_split(gp, t, n->vparts[0].name, n->vn, parts);
    }
    case V_MERGE: {
        const char *axes[BORA_MAX_DIMS];
        for (int k = 0; k < n->vn; k++)
            axes[k] = n->vparts[k].name;
        return api_merge(gp, t, n->vn, axes, n->vname[0]);
    }
    default: g_fail(g, "internal: unknown view kind %d", n->view); return NULL;
    }
}

/* dy of op n (one output y) from its inputs' tangents t[k]: ∂y/∂in · t, NULL for zero. */
static gval *op_tangent(g_graph *g, const gnode *n, gval *const *t)
{
    gval *x = n->nin > 0 ? n->in[0] : NULL, *b = n->nin > 1 ? n->in[1] : NULL, *y = n->out[0];
    gval *tx = t[0], *tb = n->nin > 1 ? t[1] : NULL;
    switch (n->op) {
    /* linear: the op over the tangents */
    case BORA_OP_ADD: return add(g, tx, tb);
    case BORA_OP_SUB: return !tb ? tx : tx ? sub(g, tx, tb) : un(g, BORA_OP_NEG, tb);
    case BORA_OP_NEG: return un(g, BORA_OP_NEG, tx);
    case BORA_OP_SCALE: return scale(g, tx, n->opt.scalar.value);
    case BORA_OP_COPY: /* copies and casts */
    case BORA_OP_SUM:
    case BORA_OP_PAD: {
        gval *ins[1] = {like(g, tx, x)};
        return again(g, n, ins);
    }
    case BORA_OP_CONCAT: { /* an input without a tangent contributes zeros */
        gval *ins[G_MAX_IN];
        for (int k = 0; k < n->nin; k++)
            ins[k] = like(g, or_zeros(g, t[k], n->in[k]), n->in[k]);
        return again(g, n, ins);
    }
    case BORA_OP_GATHER: { /* rows of the table's tangent, by the same ids */
        gval *ins[2] = {like(g, tx, x), b};
        return again(g, n, ins);
    }
    case BORA_OP_SCATTER_ADD: { /* (ids, rows): the rows' tangents scattered alike */
        gval *ins[2] = {x, like(g, tb, b)};
        return again(g, n, ins);
    }
    case BORA_OP_WHERE: { /* the chosen side's tangent; the mask is piecewise constant */
        gval *ins[3] = {x, like(g, or_zeros(g, t[1], b), b),
                        like(g, or_zeros(g, t[2], n->in[2]), n->in[2])};
        return again(g, n, ins);
    }
    /* products: the product rule */
    case BORA_OP_MUL: return add(g, mul(g, tx, b), mul(g, x, tb));
    case BORA_OP_DIV: { /* (tx - y tb) / b */
        gval *num = !tb ? tx : tx ? sub(g, tx, mul(g, y, tb)) : un(g, BORA_OP_NEG, mul(g, y, tb));
        return divide(g, num, b);
    }
    case BORA_OP_MATMUL: { /* ta B + A tb */
        gval *ta = tx ? g_matmul3(g, g_permute(g, tx, 3, x->names), b) : NULL;
        gval *tbb = tb ? g_matmul3(g, x, g_permute(g, tb, 3, b->names)) : NULL;
        return add(g, ta, tbb);
    }
    case BORA_OP_GROUPED_MATMUL: { /* tx w + x tw, group by group (the sizes are integers) */
        gval *sz = n->in[2];
        gval *ta = tx ? g_grouped_matmul(g, like(g, tx, x), b, sz) : NULL;
        gval *tw = tb ? g_grouped_matmul(g, x, like(g, tb, b), sz) : NULL;
        return add(g, ta, tw);
    }
    case BORA_OP_GROUPED_MATMUL_GRAD: { /* tx_eᵀ dy_e + x_eᵀ tdy_e */
        gval *sz = n->in[2];
        gval *ta = tx ? g_grouped_matmul_grad(g, like(g, tx, x), b, sz, y) : NULL;
        gval *td = tb ? g_grouped_matmul_grad(g, x, like(g, tb, b), sz, y) : NULL;
        return add(g, ta, td);
    }
    /* elementwise: f'(x) t */
    case BORA_OP_EXP: return mul(g, tx, y);
    case BORA_OP_LOG: return divide(g, tx, x);
    case BORA_OP_SQRT: return scale(g, divide(g, tx, y), 0.5);
    case BORA_OP_RSQRT: return scale(g, mul(g, tx, mul(g, y, mul(g, y, y))), -0.5);
    case BORA_OP_SIN: return mul(g, tx, un(g, BORA_OP_COS, x));
    case BORA_OP_COS: return un(g, BORA_OP_NEG, mul(g, tx, un(g, BORA_OP_SIN, x)));
    case BORA_OP_ABS: return mul(g, tx, un(g, BORA_OP_SIGN, x));
    case BORA_OP_TANH:
    case BORA_OP_SIGMOID:
    case BORA_OP_RELU:
    case BORA_OP_SILU:
    case BORA_OP_GELU_TANH:
    case BORA_OP_GELU_EXACT: { /* f'(x) t is the activation's own backward kernel */
        gval *ins[2] = {x, like(g, tx, x)};
        gval *d = ins[1] ? g_op1(g, BORA_OP_ACT_GRAD, 2, ins, x->dtype, x->ndim, x->dims, x->names)
                         : NULL;
        if (d)
            d->node->opt.act = (bora_opt_act){sizeof(bora_opt_act), n->op};
        return d;
    }
    case BORA_OP_ACT_GRAD: {
        if (n->opt.act.op == BORA_OP_MAX) { /* (x, y, dy): the argmax mask is piecewise constant */
            gval *ins[3] = {x, b, like(g, t[2], n->in[2])};
            return again(g, n, ins);
        }
        /* dy f'(x): tdy f'(x) + dy f''(x) tx */
        gval *ins[2] = {x, like(g, tb, b)};
        gval *first = tb ? again(g, n, ins) : NULL;
        gval *second = tx ? mul(g, mul(g, b, second_derivative(g, n->opt.act.op, x)), tx) : NULL;
        return g->status ? NULL : add(g, first, second);
    }
    case BORA_OP_MAX: { /* the tangent at the maximum: Σ mask · t, the mask as the backward's */
        gval *ins[3] = {x, g_align_to(g, y, x), g_align_to(g, cst(g, y, 1), x)};
        gval *mask = ins[1] && ins[2]
                         ? g_op1(g, BORA_OP_ACT_GRAD, 3, ins, x->dtype, x->ndim, x->dims, x->names)
                         : NULL;
        if (!mask)
            return NULL;
        mask->node->opt.act = (bora_opt_act){sizeof(bora_opt_act), BORA_OP_MAX};
        gval *sum_in[1] = {like(g, mul(g, mask, tx), x)};
        gnode m = *n;
        m.op = BORA_OP_SUM;
        return again(g, &m, sum_in);
    }
    case BORA_OP_MINIMUM:
    case BORA_OP_MAXIMUM: { /* the chosen operand's tangent, a tie to a as the backward */
        gval *m = n->op == BORA_OP_MINIMUM ? g_binary(g, BORA_OP_LESS_EQUAL, x, b)
                                           : g_binary(g, BORA_OP_LESS_EQUAL, b, x);
        gval *zero = g->pub.api->full(&g->pub, y->dtype, 0, NULL, 0.0);
        return m && zero ? g_where(g, m, tx ? tx : zero, tb ? tb : zero) : NULL;
    }
    /* piecewise constant, or constant: no tangent */
    case BORA_OP_SIGN:
    case BORA_OP_LESS:
    case BORA_OP_LESS_EQUAL:
    case BORA_OP_EQUAL:
    case BORA_OP_NOT_EQUAL:
    case BORA_OP_FILL:
    case BORA_OP_IOTA:
    case BORA_OP_ONE_HOT:
    case BORA_OP_SAMPLE: /* tokens */
    case BORA_OP_TOP_K:  /* indices, routing order and group sizes */
    case BORA_OP_ARGSORT:
    case BORA_OP_BINCOUNT:
    case BORA_OP_ATTENTION_BIAS: return NULL;
    default:
        g_fail(g,
               "hvp: no tangent rule for op '%s' (a Hessian graph builds fused ops from "
               "primitives; this one has no decomposition)",
               g_op_name(n->op));
        return NULL;
    }
}

static void node_tangent(tctx *c, const gnode *n)
{
    g_graph *g = c->g;
    if (n->op == G_PARAM) {
        gval *p = n->out[0];
        if (p->storage != S_PARAM || !p->requires_grad)
            return;
        if (!c->slot_tan[p->slot])
            c->slot_tan[p->slot] = g_tangent_leaf(g, p->slot);
        c->tan[p->id] = c->slot_tan[p->slot];
        return;
    }
    if (n->op == G_INPUT || n->op == G_CONST || n->nout < 1)
        return;
    gval *t[G_MAX_IN];
    int any = 0;
    for (int k = 0; k < n->nin; k++)
        any |= (t[k] = tan_of(c, n->in[k])) != NULL;
    if (!any)
        return;
    if (n->op == G_VIEW) {
        c->tan[n->out[0]->id] = view_tangent(g, n, t[0]);
        return;
    }
    if (n->op >= BORA_OP_COUNT_ || n->nout != 1) {
        g_fail(g,
               "hvp: no tangent rule for op '%s' (a Hessian graph builds fused ops from "
               "primitives)",
               n->op < BORA_OP_COUNT_ ? g_op_name(n->op) : "host node");
        return;
    }
    gval *dy = op_tangent(g, n, t);
    /* kept in the output's axis order, the way later rules read it */
    c->tan[n->out[0]->id] = dy ? g_permute(g, dy, n->out[0]->ndim, n->out[0]->names) : NULL;
}

bora_status g_hvp(g_graph *g, gval *loss)
{
    if (g->status)
        return g->status;
    if (g->mode != BORA_MODE_HESSIAN)
        return g_fail(g, "hvp: the graph was made for mode %d, not BORA_MODE_HESSIAN", g->mode);
    if (g_store_need_hessian(g))
        return g->status;
    g_store *s = g->store;
    size_t n_forward = g->n_nodes;
    if (g_backward(g, loss))
        return g->status;
    if (!g->output)
        g->output = loss;
    /* Each parameter's gradient, summed over its leaves (a tied weight has two), made before the
     * tangent pass so that the pass reaches it. */
    gval **dparam = calloc(s->n_slots ? s->n_slots : 1, sizeof *dparam);
    tctx c = {g, NULL, 0, calloc(s->n_slots ? s->n_slots : 1, sizeof *c.slot_tan)};
    if (!dparam || !c.slot_tan) {
        free(dparam);
        free(c.slot_tan);
        return g_fail(g, "out of memory");
    }
    for (size_t i = 0; i < n_forward && !g->status; i++) {
        gnode *n = g->nodes[i];
        gval *p = n->out[0];
        if (n->op != G_PARAM || p->storage != S_PARAM || !p->grad)
            continue;
        gval *d = g_permute(g, p->grad, p->ndim, p->names);
        dparam[p->slot] = add(g, dparam[p->slot], d);
    }
    c.n_tan = g->n_vals;
    c.tan = calloc(c.n_tan ? c.n_tan : 1, sizeof *c.tan);
    if (!c.tan)
        g_fail(g, "out of memory");
    size_t n_nodes = g->n_nodes;
    for (size_t i = 0; i < n_nodes && !g->status; i++)
        node_tangent(&c, g->nodes[i]);
    /* H·v = each gradient's tangent, into the hvp block; a parameter whose gradient does not
     * depend on the parameters has a zero product (written as zeros under hvp_write). */
    for (size_t k = 0; k < s->n_slots && !g->status; k++) {
        if (!dparam[k])
            continue;
        const g_slot *p = &s->slots[k];
        gval *hv = tan_of(&c, dparam[k]);
        if (!hv && !g->hvp_write)
            continue;
        hv = hv ? g_permute(g, hv, p->ndim, p->names) : cst(g, dparam[k], 0.0);
        gnode *w = hv ? g_new_node(g, g->hvp_write ? G_ASSIGN : G_GRAD, 1, &hv) : NULL;
        gval *buf = w ? g_new_value(g, p->dtype, p->ndim, p->dims, p->names) : NULL;
        if (!buf)
            break;
        buf->storage = S_HVP;
        buf->slot = (int)k;
        buf->label = p->name;
        g_add_out(w, buf);
    }
    free(dparam);
    free(c.tan);
    free(c.slot_tan);
    return g->status;
}
