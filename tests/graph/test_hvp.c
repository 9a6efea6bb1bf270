/* tests/graph/test_hvp.c — Hessian-vector products (g_hvp) of every op, in f64 on the CPU
 * backend, against central finite differences of gradients.
 *
 * Each case builds out = op(parameters) and the loss L = Σ w·out + Σ u·out² (w, u fixed inputs:
 * the square makes the second derivative of every op's chain matter, linear ops included).
 * A BORA_MODE_HESSIAN graph computes H·v for a fixed direction v; an ordinary train graph
 * (fused kernels on, so the gradient is computed independently of the Hessian graph's
 * decompositions) gives ∇L(θ ± εv), and (∇L(θ+εv) − ∇L(θ−εv)) / 2ε must match H·v within
 * 1e-6 relative plus 1e-8 absolute (ε = 1e-5). The products must add up over runs (micro-
 * batches), write under hvp_write, and leave the gradient buffers alone.
 *
 * Then: grads_to_hvp puts a train graph's gradients into the hvp buffers; misuse fails with a
 * message (a graph of another mode, an op without a tangent rule, a store without the buffers,
 * a tangent of the wrong size); and, at the end, every op id is either in some case's Hessian
 * graph or named here as a fused op a Hessian graph decomposes, so an op added without a case
 * fails.
 *
 * usage: test_hvp PLUGIN_DIR */
#include "../test.h"
#include "rig.h"

#include <math.h>

static const char *plugin_dir;
static uint64_t ops_seen[BORA_OP_COUNT_];

#define AX(n, s) ((bora_axis){(n), (s)})

static bora_tensor *P(bora_graph *g, const char *name, int n, const bora_axis *axes)
{
    return bora_param(g, name, BORA_DTYPE_F64, n, axes, bora_init_normal(1.0), 0);
}

/* ---- the cases ---------------------------------------------------------------------------- */

static const int32_t ids6[6] = {3, 0, 5, 3, 1, 2};        /* (batch=2, position=3) */
static const int32_t targets6[6] = {4, 0, -100, 2, 1, 3}; /* one ignored position */
static const int32_t seg8[8] = {0, 0, 1, 1, 0, 1, 1, 1};  /* (batch=2, position=4) */

typedef struct hcase {
    const char *name;
    bora_tensor *(*build)(bora_graph *g, int variant);
    int variants;
} hcase;

static const int unary_ops[] = {BORA_OP_NEG,   BORA_OP_EXP,       BORA_OP_LOG,        BORA_OP_SQRT,
                                BORA_OP_RSQRT, BORA_OP_TANH,      BORA_OP_SIGMOID,    BORA_OP_RELU,
                                BORA_OP_SILU,  BORA_OP_GELU_TANH, BORA_OP_GELU_EXACT, BORA_OP_SIN,
                                BORA_OP_COS,   BORA_OP_ABS,       BORA_OP_SIGN};

/* op(a), through exp(a) for the ops that need a positive argument; each variant after the
 * first 15 puts the op after a product, so its argument's tangent mixes two parameters. */
static bora_tensor *b_unary(bora_graph *g, int v)
{
    bora_axis ax[2] = {AX("x", 3), AX("y", 4)};
    bora_tensor *a = P(g, "a", 2, ax);
    int op = unary_ops[v % 15];
    if (v >= 15)
        a = bora_mul(g, a, P(g, "b", 1, ax + 1));
    if (op == BORA_OP_LOG || op == BORA_OP_SQRT || op == BORA_OP_RSQRT)
        a = bora_unary(g, BORA_OP_EXP, a);
    return bora_unary(g, op, a);
}

/* a (x, y) op b (y), broadcast by name, both orders; division by exp(b). */
static bora_tensor *b_binary(bora_graph *g, int v)
{
    static const int ops[] = {BORA_OP_ADD, BORA_OP_SUB, BORA_OP_MUL, BORA_OP_DIV};
    bora_axis ax[2] = {AX("x", 3), AX("y", 4)};
    bora_tensor *a = P(g, "a", 2, ax), *b = P(g, "b", 1, ax + 1);
    int op = ops[v % 4];
    if (op == BORA_OP_DIV)
        b = bora_unary(g, BORA_OP_EXP, b);
    return v >= 4 ? g->api->binary(g, op, b, a) : g->api->binary(g, op, a, b);
}

/* ABI 1.9's elementwise family: min, max, masks, where, clamp, ramps, constants. */
static bora_tensor *b_elem(bora_graph *g, int v)
{
    const bora_graph_api *A = g->api;
    bora_axis ax[2] = {AX("x", 3), AX("y", 4)};
    bora_tensor *a = P(g, "a", 2, ax), *b = P(g, "b", 1, ax + 1);
    switch (v) {
    case 0: return bora_minimum(g, a, b);
    case 1: return bora_maximum(g, b, a);
    case 2: return bora_mul(g, bora_less(g, a, b), a);
    case 3: return bora_mul(g, bora_greater_equal(g, a, b), a);
    case 4: return bora_mul(g, bora_equal(g, a, bora_maximum(g, a, b)), bora_mul(g, a, b));
    case 5: return bora_mul(g, bora_not_equal(g, a, bora_maximum(g, a, b)), a);
    case 6: return bora_where(g, bora_less(g, a, b), a, bora_unary(g, BORA_OP_EXP, b));
    case 7:
        return bora_where(g, bora_greater(g, b, bora_scalar_like(g, b, 0)), a,
                          A->full(g, BORA_DTYPE_F64, 0, NULL, 0.25));
    case 8: return bora_clamp(g, bora_mul(g, a, b), -0.5, 0.5);
    case 9: return bora_mul(g, a, A->iota(g, AX("y", 4), BORA_DTYPE_F64, 0.5, -0.25));
    default: return bora_add(g, a, A->full(g, BORA_DTYPE_F64, 2, ax, 2.0));
    }
}

/* scale, sum over y, mean over x, max over y, Σ a·a. */
static bora_tensor *b_reduce(bora_graph *g, int v)
{
    bora_axis ax[3] = {AX("x", 3), AX("y", 4), AX("z", 2)};
    bora_tensor *a = P(g, "a", 3, ax);
    const char *y[] = {"y"}, *x[] = {"x"}, *yz[] = {"y", "z"};
    switch (v) {
    case 0: return g->api->scale(g, a, -1.75);
    case 1: return g->api->reduce(g, BORA_OP_SUM, a, 1, y);
    case 2: return g->api->reduce(g, 0, a, 1, x);
    case 3: return g->api->reduce(g, BORA_OP_MAX, a, 1, y);
    default: return g->api->reduce(g, BORA_OP_SUM, bora_mul(g, a, a), 2, yz);
    }
}

/* a (batch, m, k) · b (k, n); with a shared batch axis; with bias and GELU; b given (n, k). */
static bora_tensor *b_dot(bora_graph *g, int v)
{
    bora_axis aa[3] = {AX("batch", 2), AX("m", 3), AX("k", 4)};
    bora_axis ba[3] = {AX("batch", 2), AX("k", 4), AX("n", 5)};
    bora_tensor *a = P(g, "a", 3, aa);
    bora_tensor *b = v == 1 ? P(g, "b", 3, ba) : P(g, "b", 2, ba + 1);
    const char *k[] = {"k"};
    if (v == 2) {
        bora_dot_opts o = {sizeof o, BORA_OP_GELU_TANH, P(g, "c", 1, ba + 2)};
        return g->api->dot(g, a, b, 1, k, &o);
    }
    if (v == 3) {
        const char *nk[] = {"n", "k"};
        return bora_dot(g, a, g->api->contiguous(g, g->api->permute(g, b, 2, nk)), 1, k);
    }
    return bora_dot(g, a, b, 1, k);
}

/* layernorm over d of a (d, r); rms_norm with a weight, without, Gemma's offset 1. */
static bora_tensor *b_norm(bora_graph *g, int v)
{
    bora_axis ax[2] = {AX("d", 5), AX("r", 3)};
    bora_tensor *x = P(g, "a", 2, ax);
    if (v == 0)
        return g->api->layernorm(g, x, P(g, "b", 1, ax), P(g, "c", 1, ax), "d", 1e-5);
    return g->api->rms_norm(g, x, v == 2 ? NULL : P(g, "b", 1, ax), "d", 1e-5, v == 3 ? 1.0 : 0.0);
}

/* softmax, log-softmax over y of a (y, x). */
static bora_tensor *b_softmax(bora_graph *g, int v)
{
    bora_axis ax[2] = {AX("y", 5), AX("x", 3)};
    bora_tensor *a = P(g, "a", 2, ax);
    return v ? g->api->log_softmax(g, a, "y") : g->api->softmax(g, a, "y");
}

/* cross-entropy of logits (vocab, batch, position), one target ignored; odd: with a z-loss;
 * 2: at labels drawn from the logits' own softmax (Sophia-G's loss: the draw has no tangent, and
 * the finite differences' ±ε moves no label across a boundary of its inverse CDF here). */
static bora_tensor *b_xent(bora_graph *g, int v)
{
    bora_axis ax[3] = {AX("vocab", 5), AX("batch", 2), AX("position", 3)};
    bora_tensor *l = P(g, "a", 3, ax);
    bora_tensor *t = bora_input(g, "targets", BORA_DTYPE_I32, 2, ax + 1);
    if (v == 2) {
        bora_axis two = {"counter", 2};
        bora_tensor *counter = bora_input(g, "counter", BORA_DTYPE_I64, 1, &two);
        t = g->api->sample(g, l, "vocab", counter, 7, 1);
    }
    bora_xent_opts o = {sizeof o, -100, v & 1 ? 0.01 : 0.0};
    return g->api->cross_entropy(g, l, t, "vocab", &o);
}

/* embedding: table (embed, vocab) by ids (batch, position), through tanh. */
static bora_tensor *b_embedding(bora_graph *g, int v)
{
    (void)v;
    bora_axis ax[2] = {AX("embed", 4), AX("vocab", 6)};
    bora_axis ia[2] = {AX("batch", 2), AX("position", 3)};
    bora_tensor *ids = bora_input(g, "ids", BORA_DTYPE_I32, 2, ia);
    return bora_unary(g, BORA_OP_TANH, g->api->embedding(g, P(g, "a", 2, ax), ids, "vocab"));
}

/* attention: causal; with segment ids; not causal; grouped heads with a window of 2; then soft-
 * capped scores (c·tanh(s / c)): causal, c = 0.8; grouped heads, window 2 and segment ids, c = 1.5
 * (the Hessian graph's decomposition against the fused kernels' gradients); then cross-attention,
 * not causal: 4 queries over 3 keys, and over 6. */
static bora_tensor *b_attention(bora_graph *g, int v)
{
    if (v >= 6) {
        bora_axis qa[3] = {AX("heads", 2), AX("position", 4), AX("head_dim", 3)};
        bora_axis ka[3] = {AX("heads", 2), AX("key_position", v == 6 ? 3 : 6), AX("head_dim", 3)};
        bora_attention_opts o = {.struct_size = sizeof o};
        return g->api->attention(g, P(g, "a", 3, qa), P(g, "b", 3, ka), P(g, "c", 3, ka), &o);
    }
    int gqa = v == 3 || v == 5;
    bora_axis qa[4] = {AX("batch", 2), AX("heads", gqa ? 4 : 2), AX("position", 4),
                       AX("head_dim", 3)};
    bora_axis ka[4] = {AX("batch", 2), AX(gqa ? "kv_heads" : "heads", 2), AX("key_position", 4),
                       AX("head_dim", 3)};
    bora_tensor *q = P(g, "a", 4, qa), *k = P(g, "b", 4, ka), *vv = P(g, "c", 4, ka);
    bora_attention_opts o = {.struct_size = sizeof o, .causal = v != 2};
    if (v >= 4)
        o.softcap = v == 4 ? 0.8 : 1.5;
    if (v == 1 || v == 5) {
        bora_axis sa[2] = {AX("batch", 2), AX("position", 4)};
        o.segment_ids = bora_input(g, "seg", BORA_DTYPE_I32, 2, sa);
    }
    if (gqa) {
        o.head_axis = "heads";
        o.kv_head_axis = "kv_heads";
        o.sliding_window = 2;
    }
    return g->api->attention(g, q, k, vv, &o);
}

/* rope over a (batch, position, heads, head_dim): rotate-half over every dim; interleaved over
 * 4 of 6 dims from position 2. */
static bora_tensor *b_rope(bora_graph *g, int v)
{
    bora_axis ax[4] = {AX("batch", 2), AX("position", 3), AX("heads", 2),
                       AX("head_dim", v ? 6 : 8)};
    bora_tensor *x = P(g, "a", 4, ax);
    bora_rope_spec s = bora_rope_spec_default();
    s.theta = 100;
    s.rotary_dims = v ? 4 : 8;
    bora_rope_opts o = {.struct_size = sizeof o,
                        .layout = v ? BORA_ROPE_INTERLEAVED : BORA_ROPE_ROTATE_HALF,
                        .spec = &s,
                        .offset = v ? 2 : 0};
    return g->api->rope(g, x, &o);
}

/* views and layout: slice/split/rename/merge; concat; broadcast and permute; slices tiling an
 * axis (their gradients joined into one concat); overlapping slices; a product of views. */
static bora_tensor *b_layout(bora_graph *g, int v)
{
    bora_axis ax[2] = {AX("x", 4), AX("y", 6)};
    bora_axis bx[2] = {AX("x", 2), AX("y", 6)};
    bora_tensor *a = P(g, "a", 2, ax);
    const bora_graph_api *A = g->api;
    switch (v) {
    case 0: {
        bora_axis parts[2] = {AX("p", 2), AX("q", 2)};
        bora_tensor *t = A->split(g, A->slice(g, a, "y", 1, 4), "y", 2, parts);
        t = bora_rename(g, t, "x", "w");
        const char *wp[] = {"w", "p"};
        return A->contiguous(g, A->merge(g, t, 2, wp, "wp"));
    }
    case 1: {
        bora_tensor *xs[2] = {a, bora_unary(g, BORA_OP_TANH, P(g, "b", 2, bx))};
        return A->concat(g, "x", 2, xs);
    }
    case 2: {
        const char *order[] = {"y", "z", "x"};
        return A->contiguous(g, A->permute(g, A->broadcast(g, a, AX("z", 2)), 3, order));
    }
    case 3: {
        bora_tensor *s1 = A->slice(g, a, "y", 0, 2), *s2 = A->slice(g, a, "y", 2, 2);
        bora_tensor *s3 = A->slice(g, a, "y", 4, 2);
        return bora_add(g, bora_add(g, A->scale(g, A->unary(g, BORA_OP_TANH, s3), 3.0), s1),
                        A->scale(g, s2, 2.0));
    }
    case 4: {
        bora_tensor *s1 = A->slice(g, a, "y", 0, 2), *s2 = A->slice(g, a, "y", 1, 2);
        return bora_add(g, bora_mul(g, s1, s2), A->slice(g, a, "y", 4, 2));
    }
    default: { /* a permuted operand times the original: views on both sides of a product */
        const char *yx[] = {"y", "x"};
        return bora_mul(g, A->contiguous(g, A->permute(g, a, 2, yx)), a);
    }
    }
}

/* a chain through three checkpoints: the backward recomputes the segments between them. */
static bora_tensor *b_checkpointed(bora_graph *g, int v)
{
    (void)v;
    bora_axis ax[3] = {AX("x", 3), AX("y", 4), AX("z", 5)};
    const char *y[] = {"y"};
    bora_tensor *h = g->api->checkpoint(g, bora_unary(g, BORA_OP_TANH, P(g, "a", 2, ax)));
    h = bora_unary(g, BORA_OP_TANH, bora_dot(g, h, P(g, "b", 2, ax + 1), 1, y));
    h = g->api->checkpoint(g, h);
    h = bora_unary(g, BORA_OP_SILU, bora_mul(g, h, P(g, "c", 1, ax + 2)));
    h = g->api->checkpoint(g, h);
    return bora_unary(g, BORA_OP_GELU_EXACT, bora_mul(g, h, h));
}

/* conv1d: Whisper's first convolution in small (K 3, pad 1) and a stride of 2 with padding 2
 * over two batch axes around the length (the Hessian graph's decomposition: pads, slices, dots
 * against the kernels' gradients). */
static bora_tensor *b_conv1d(bora_graph *g, int v)
{
    if (v == 0) {
        bora_axis xa[3] = {AX("batch", 2), AX("mel", 3), AX("frame", 6)};
        bora_axis wa[3] = {AX("embed", 2), AX("mel", 3), AX("kernel", 3)};
        bora_conv1d_opts o = {sizeof o, 1, 1, "frame", "mel", "kernel"};
        return bora_conv1d(g, P(g, "x", 3, xa), P(g, "w", 3, wa), &o);
    }
    bora_axis xa[4] = {AX("a", 2), AX("frame", 7), AX("b", 2), AX("chan", 2)};
    bora_axis wa[3] = {AX("kernel", 2), AX("out", 3), AX("chan", 2)};
    bora_conv1d_opts o = {sizeof o, 2, 2, "frame", "chan", "kernel"};
    return bora_conv1d(g, P(g, "x", 4, xa), P(g, "w", 3, wa), &o);
}

/* a mixture of experts: 0, grouped_matmul alone (an empty group, a row past the sizes' sum);
 * 1, a routed layer (softmax, top 2 of 3 experts, the rows sorted by expert with argsort and
 * counted with bincount, gathered, multiplied per expert, put back and weighted). */
static const int32_t sizes4[4] = {2, 0, 3, 1}; /* 6 of 7 rows */

static bora_tensor *b_moe(bora_graph *g, int v)
{
    const bora_graph_api *A = g->api;
    if (v == 0) {
        bora_axis xa[2] = {AX("row", 7), AX("embed", 3)};
        bora_axis wa[3] = {AX("expert", 4), AX("embed", 3), AX("mlp", 2)};
        bora_tensor *s = bora_input(g, "sizes", BORA_DTYPE_I32, 1, wa);
        return A->grouped_matmul(g, P(g, "x", 2, xa), P(g, "w", 3, wa), s, "embed");
    }
    bora_axis xa[2] = {AX("token", 4), AX("embed", 3)}, la[2] = {AX("token", 4), AX("expert", 3)};
    bora_axis wa[3] = {AX("expert", 3), AX("embed", 3), AX("mlp", 2)};
    bora_tensor *x = P(g, "x", 2, xa), *idx = NULL;
    bora_tensor *weights =
        A->top_k(g, A->softmax(g, P(g, "router", 2, la), "expert"), "expert", 2, "choice", &idx);
    const char *tc[2] = {"token", "choice"}, *tce[3] = {"token", "choice", "embed"};
    bora_tensor *keys = idx ? A->merge(g, idx, 2, tc, "row") : NULL;
    bora_tensor *order = keys ? A->argsort(g, keys) : NULL;
    bora_tensor *sizes = keys ? A->bincount(g, keys, wa[0]) : NULL;
    bora_tensor *rep =
        A->merge(g, A->permute(g, A->broadcast(g, x, AX("choice", 2)), 3, tce), 2, tc, "row");
    bora_tensor *ys =
        A->grouped_matmul(g, A->embedding(g, rep, order, "row"), P(g, "w", 3, wa), sizes, "embed");
    bora_tensor *back = A->embedding(g, ys, A->argsort(g, order), "row");
    bora_axis parts[2] = {AX("token", 4), AX("choice", 2)};
    const char *choice[1] = {"choice"};
    return A->reduce(g, BORA_OP_SUM, bora_mul(g, A->split(g, back, "row", 2, parts), weights), 1,
                     choice);
}

static const hcase cases[] = {
    {"unary", b_unary, 30},
    {"binary", b_binary, 8},
    {"elementwise", b_elem, 11},
    {"reduce", b_reduce, 5},
    {"dot", b_dot, 4},
    {"norms", b_norm, 4},
    {"softmax", b_softmax, 2},
    {"cross_entropy", b_xent, 3},
    {"embedding", b_embedding, 1},
    {"attention", b_attention, 8},
    {"rope", b_rope, 2},
    {"layout", b_layout, 6},
    {"checkpointed", b_checkpointed, 1},
    {"moe", b_moe, 2},
    {"conv1d", b_conv1d, 2},
};

/* ---- running ------------------------------------------------------------------------------ */

static void fill_int_inputs(g_graph *g)
{
    g_set_input(g, "targets", targets6, sizeof targets6);
    g_set_input(g, "ids", ids6, sizeof ids6);
    g_set_input(g, "seg", seg8, sizeof seg8);
    g_set_input(g, "sizes", sizes4, sizeof sizes4);
    static const int64_t counter[2] = {3, 12};
    g_set_input(g, "counter", counter, sizeof counter);
}

/* The case's output and the loss Σ w·out + Σ u·out² over it, in graph g; NULL on failure. */
static gval *case_loss(g_graph *g, const hcase *c, int v, int64_t *n_out)
{
    bora_graph *gp = &g->pub;
    bora_tensor *out = c->build(gp, v);
    if (!out)
        return NULL;
    bora_axis ax[BORA_MAX_DIMS];
    const char *names[BORA_MAX_DIMS];
    *n_out = 1;
    for (int i = 0; i < out->ndim; i++) {
        ax[i] = gp->api->axis(out, i), names[i] = ax[i].name;
        *n_out *= ax[i].size;
    }
    bora_tensor *w = bora_input(gp, "__w", out->dtype, out->ndim, ax);
    bora_tensor *u = bora_input(gp, "__u", out->dtype, out->ndim, ax);
    bora_tensor *terms =
        bora_add(gp, bora_mul(gp, out, w), bora_mul(gp, bora_mul(gp, out, out), u));
    bora_tensor *loss =
        out->ndim ? gp->api->reduce(gp, BORA_OP_SUM, terms, out->ndim, names) : terms;
    if (loss && loss->base != loss)
        loss = gp->api->contiguous(gp, loss);
    g->output = loss;
    return loss;
}

static void set_weights(g_graph *g, int64_t n, int dtype)
{
    double *w = malloc(sizeof(double) * (size_t)n), *u = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        w[i] = sin(1.0 + (double)i * 0.7) + 0.3;
        u[i] = 0.25 * cos(0.4 + (double)i * 1.3);
    }
    if (dtype == BORA_DTYPE_F32) /* in place: each float below the double it came from */
        for (int64_t i = 0; i < n; i++) {
            ((float *)w)[i] = (float)w[i];
            ((float *)u)[i] = (float)u[i];
        }
    g_set_input(g, "__w", w, bora_dtype_size(dtype) * (size_t)n);
    g_set_input(g, "__u", u, bora_dtype_size(dtype) * (size_t)n);
    free(w);
    free(u);
}

/* The direction: fixed values per parameter element. */
static double direction(size_t slot, size_t i)
{
    return sin(0.3 + 1.7 * (double)slot + 0.9 * (double)i);
}

static void check_case(const hcase *c, int v)
{
    rig r;
    rig_open(&r, plugin_dir, 2, 11);
    g_store *s = r.store;
    g_store_hessian(s);
    g_graph *h = g_graph_new(s, BORA_MODE_HESSIAN), *t = g_graph_new(s, BORA_MODE_TRAIN);
    int64_t n_out = 0;
    gval *hl = case_loss(h, c, v, &n_out), *tl = case_loss(t, c, v, &n_out);
    if (!hl || g_hvp(h, hl) || g_finalize(h) || !tl || g_autodiff(t, tl) || g_finalize(t) ||
        g_store_materialize(s)) {
        fprintf(stderr, "%s/%d: graphs failed: %s%s\n", c->name, v, h->error, t->error);
        test_failures++;
        goto done;
    }
    for (size_t i = 0; i < h->n_nodes; i++)
        if (h->nodes[i]->op < BORA_OP_COUNT_)
            ops_seen[h->nodes[i]->op]++;
    fill_int_inputs(h);
    fill_int_inputs(t);
    set_weights(h, n_out, BORA_DTYPE_F64);
    set_weights(t, n_out, BORA_DTYPE_F64);
    size_t bytes = s->param_bytes;
    double *theta = malloc(bytes), *vdir = calloc(1, bytes), *hv = malloc(bytes),
           *again = malloc(bytes), *gp = malloc(bytes), *gm = malloc(bytes);
    memcpy(theta, s->param_ptr, bytes);
    for (size_t k = 0; k < s->n_slots; k++) {
        const g_slot *p = &s->slots[k];
        double *d = vdir + p->offset / sizeof(double);
        for (size_t i = 0; i < p->nbytes / sizeof(double); i++)
            d[i] = direction(k, i);
        CHECK(g_store_write(s, S_TANGENT, (long)k, d, p->nbytes) == BORA_OK);
    }
    /* H·v, then again: the products add up; the gradients stay zero */
    CHECK(g_run(h) == BORA_OK);
    memcpy(hv, s->hvp_ptr, bytes);
    CHECK(g_run(h) == BORA_OK);
    memcpy(again, s->hvp_ptr, bytes);
    for (size_t i = 0; i < bytes / sizeof(double); i++)
        if (again[i] != 2 * hv[i] || ((double *)s->grad_ptr)[i] != 0) {
            fprintf(stderr, "%s/%d: a second run did not add H·v, or touched a gradient\n", c->name,
                    v);
            test_failures++;
            break;
        }
    /* (∇L(θ+εv) − ∇L(θ−εv)) / 2ε */
    const double eps = 1e-5;
    for (int sign = 1; sign >= -1; sign -= 2) {
        double *pp = (double *)s->param_ptr;
        for (size_t i = 0; i < bytes / sizeof(double); i++)
            pp[i] = theta[i] + sign * eps * vdir[i];
        g_store_zero_grads(s);
        CHECK(g_run(t) == BORA_OK);
        memcpy(sign > 0 ? gp : gm, s->grad_ptr, bytes);
    }
    memcpy(s->param_ptr, theta, bytes);
    for (size_t k = 0; k < s->n_slots; k++) {
        const g_slot *p = &s->slots[k];
        size_t o = p->offset / sizeof(double);
        for (size_t i = 0; i < p->nbytes / sizeof(double); i++) {
            double fd = (gp[o + i] - gm[o + i]) / (2 * eps), got = hv[o + i];
            double tol = 1e-6 * fmax(fabs(fd), fabs(got)) + 1e-8;
            if (!(fabs(fd - got) <= tol)) {
                fprintf(stderr,
                        "%s/%d: (H v)[%s][%zu]: hvp %.12g, finite differences of gradients "
                        "%.12g\n",
                        c->name, v, p->name, i, got, fd);
                test_failures++;
                break;
            }
        }
    }
    free(theta);
    free(vdir);
    free(hv);
    free(again);
    free(gp);
    free(gm);
done:
    g_graph_free(h);
    g_graph_free(t);
    rig_close(&r);
}

/* H·v of case c/v in a fresh store on num_threads threads (mixed: under trainer.mp c=bf16,
 * r=bf16, with the parameters f32): the hvp block's bytes (malloc'd, *bytes), or NULL. With
 * no_bf16, fails when the Hessian graph holds a bf16 value. */
static char *hvp_bytes(const hcase *c, int v, int num_threads, int mixed, size_t *bytes)
{
    rig r;
    rig_open(&r, plugin_dir, num_threads, 13);
    if (mixed)
        g_store_mixed(r.store, BORA_DTYPE_BF16, BORA_DTYPE_BF16, BORA_ABI_MINOR);
    g_graph *h = g_graph_new(r.store, BORA_MODE_HESSIAN);
    int64_t n_out = 0;
    gval *loss = case_loss(h, c, v, &n_out);
    char *out = NULL;
    if (!loss || g_hvp(h, loss) || g_finalize(h) || g_store_materialize(r.store)) {
        fprintf(stderr, "%s/%d on %d threads%s: %s\n", c->name, v, num_threads,
                mixed ? " (mixed)" : "", h->error);
        test_failures++;
        goto done;
    }
    for (size_t i = 0; i < h->n_vals; i++)
        if (h->vals[i]->dtype == BORA_DTYPE_BF16) {
            fprintf(stderr, "%s/%d: the Hessian graph holds bf16 value '%s'\n", c->name, v,
                    h->vals[i]->label ? h->vals[i]->label : "?");
            test_failures++;
            break;
        }
    fill_int_inputs(h);
    set_weights(h, n_out, loss->dtype);
    for (size_t k = 0; k < r.store->n_slots; k++) {
        const g_slot *p = &r.store->slots[k];
        size_t n = p->nbytes / bora_dtype_size(p->dtype);
        float *d = malloc(sizeof(float) * n);
        for (size_t i = 0; i < n; i++)
            d[i] = (float)direction(k, i);
        CHECK(g_store_write_tangent(r.store, (long)k, d, n) == BORA_OK);
        free(d);
    }
    CHECK(g_run(h) == BORA_OK);
    *bytes = r.store->param_bytes;
    out = malloc(*bytes);
    memcpy(out, r.store->hvp_ptr, *bytes);
done:
    g_graph_free(h);
    rig_close(&r);
    return out;
}

/* f32 models (a dot with GELU, a residual stream, attention) for the two checks below. */
static bora_tensor *b_f32_block(bora_graph *g, int v)
{
    bora_axis qa[4] = {AX("batch", 2), AX("heads", 2), AX("position", 4), AX("head_dim", 3)};
    bora_axis ka[4] = {AX("batch", 2), AX("heads", 2), AX("key_position", 4), AX("head_dim", 3)};
    bora_axis wa[2] = {AX("head_dim", 3), AX("mlp", 5)};
    const char *hd[] = {"head_dim"};
    bora_init init = bora_init_normal(1.0);
    bora_tensor *q = bora_param(g, "q", BORA_DTYPE_F32, 4, qa, init, 0);
    bora_tensor *k = bora_param(g, "k", BORA_DTYPE_F32, 4, ka, init, 0);
    bora_tensor *vv = bora_param(g, "v", BORA_DTYPE_F32, 4, ka, init, 0);
    bora_attention_opts o = {.struct_size = sizeof o, .causal = 1};
    bora_tensor *x = bora_residual(g, g->api->attention(g, q, k, vv, &o));
    if (v)
        return x;
    bora_tensor *w = bora_param(g, "w", BORA_DTYPE_F32, 2, wa, init, 0);
    bora_dot_opts d = {sizeof d, BORA_OP_GELU_TANH, NULL};
    return g->api->dot(g, x, w, 1, hd, &d);
}

/* The same bits on 1 and 3 threads (f64 cases and an f32 one); under trainer.mp c=bf16 the
 * Hessian graph computes in f32: no bf16 value, the bits of the f32 store's. */
static void check_threads_and_mixed(void)
{
    static const hcase f32_block = {"f32 block", b_f32_block, 2};
    const hcase *which[] = {&cases[4], &cases[9], &cases[12], &f32_block};
    for (size_t i = 0; i < sizeof which / sizeof which[0]; i++) {
        size_t n1 = 0, n3 = 0;
        char *one = hvp_bytes(which[i], which[i]->variants - 1, 1, 0, &n1);
        char *three = hvp_bytes(which[i], which[i]->variants - 1, 3, 0, &n3);
        if (one && three && (n1 != n3 || memcmp(one, three, n1))) {
            fprintf(stderr, "%s: H·v differs between 1 and 3 threads\n", which[i]->name);
            test_failures++;
        }
        free(one);
        free(three);
    }
    for (int v = 0; v < 2; v++) {
        size_t n32 = 0, nmp = 0;
        char *f32 = hvp_bytes(&f32_block, v, 2, 0, &n32),
             *mp = hvp_bytes(&f32_block, v, 2, 1, &nmp);
        if (f32 && mp && (n32 != nmp || memcmp(f32, mp, n32))) {
            fprintf(stderr, "f32 block/%d: H·v under c=bf16 differs from the f32 store's\n", v);
            test_failures++;
        }
        free(f32);
        free(mp);
    }
}

/* hvp_write: one run writes H·v (no zeroing needed; zeros where the gradient is constant); the
 * f32 read-back and write helpers. */
static void check_write_and_f32(void)
{
    rig r;
    rig_open(&r, plugin_dir, 1, 3);
    g_store *s = r.store;
    g_graph *h = g_graph_new(s, BORA_MODE_HESSIAN);
    h->hvp_write = 1;
    bora_graph *gp = &h->pub;
    /* the model is asked for its train graph: it never sees BORA_MODE_HESSIAN (model.h) */
    CHECK(gp->api->mode(gp) == BORA_MODE_TRAIN && h->mode == BORA_MODE_HESSIAN);
    bora_axis ax[1] = {AX("x", 3)};
    bora_tensor *a = bora_param(gp, "a", BORA_DTYPE_F32, 1, ax, bora_init_normal(1.0), 0);
    const char *x[] = {"x"};
    bora_tensor *lin = bora_param(gp, "lin", BORA_DTYPE_F32, 1, ax, bora_init_normal(1.0), 0);
    /* L = Σ a³ / 3 + Σ lin: H = diag(2a) for a (H·v = 2 a v), zero for lin */
    bora_tensor *loss = gp->api->scale(
        gp, gp->api->reduce(gp, BORA_OP_SUM, bora_mul(gp, bora_mul(gp, a, a), a), 1, x), 1.0 / 3);
    loss = bora_add(gp, loss, gp->api->reduce(gp, BORA_OP_SUM, lin, 1, x));
    CHECK(g_hvp(h, loss) == BORA_OK && g_finalize(h) == BORA_OK);
    CHECK(g_store_materialize(s) == BORA_OK);
    float v[3] = {1, -2, 0.5f}, got[3], *pa = rig_param(&r, "a");
    CHECK(g_store_write_tangent(s, 0, v, 3) == BORA_OK);
    CHECK(g_store_write_tangent(s, 1, v, 3) == BORA_OK);
    CHECK(g_store_write(s, S_HVP, 1, v, sizeof v) == BORA_OK); /* written over with zeros */
    for (int run = 0; run < 2; run++) {
        CHECK(g_run(h) == BORA_OK && g_store_read_hvp(s, 0, got, 3) == BORA_OK);
        for (int i = 0; i < 3; i++)
            CHECK(fabsf(got[i] - 2 * pa[i] * v[i]) <= 1e-6f * (1 + fabsf(got[i])));
        CHECK(g_store_read_hvp(s, 1, got, 3) == BORA_OK);
        CHECK(got[0] == 0 && got[1] == 0 && got[2] == 0);
    }
    float loss_val = 0;
    CHECK(g_read(h, h->output, &loss_val, sizeof loss_val) == BORA_OK);
    float *pl = rig_param(&r, "lin");
    CHECK(fabsf(loss_val -
                (pa[0] * pa[0] * pa[0] + pa[1] * pa[1] * pa[1] + pa[2] * pa[2] * pa[2]) / 3 -
                pl[0] - pl[1] - pl[2]) < 1e-5f);
    CHECK(g_store_write_tangent(s, 0, v, 2) != BORA_OK);
    CHECK_CONTAINS(bora_error_get(), "'a' has 3 elements, 2 given");
    CHECK(g_store_read(s, S_HVP, 0, got, 8) != BORA_OK);
    CHECK_CONTAINS(bora_error_get(), "cannot read the hvp of 'a': 8 bytes given, it has 12");
    CHECK(g_store_zero_hvp(s) == BORA_OK && g_store_read_hvp(s, 0, got, 3) == BORA_OK);
    CHECK(got[0] == 0 && got[1] == 0 && got[2] == 0);
    g_graph_free(h);
    rig_close(&r);
}

/* grads_to_hvp: a train graph's gradients land in the hvp buffers, the gradient buffers keep
 * another graph's. */
static void check_grads_to_hvp(void)
{
    rig r;
    rig_open(&r, plugin_dir, 1, 5);
    g_store *s = r.store;
    g_graph *g1 = g_graph_new(s, BORA_MODE_TRAIN), *g2 = g_graph_new(s, BORA_MODE_TRAIN);
    g2->grads_to_hvp = 1;
    g2->grads_write = 1;
    bora_axis ax[1] = {AX("x", 4)};
    const char *x[] = {"x"};
    gval *loss[2];
    g_graph *gs[2] = {g1, g2};
    for (int k = 0; k < 2; k++) { /* L1 = Σ a², L2 = Σ exp(a) */
        bora_graph *gp = &gs[k]->pub;
        bora_tensor *a = bora_param(gp, "a", BORA_DTYPE_F64, 1, ax, bora_init_normal(1.0), 0);
        bora_tensor *e = k ? bora_unary(gp, BORA_OP_EXP, a) : bora_mul(gp, a, a);
        loss[k] = gp->api->reduce(gp, BORA_OP_SUM, e, 1, x);
        gs[k]->output = loss[k];
        CHECK(g_autodiff(gs[k], loss[k]) == BORA_OK && g_finalize(gs[k]) == BORA_OK);
    }
    CHECK(s->hessian); /* asked for by the graph */
    /* an apply graph reading the tangent and hvp leaves: state 0 = hvp + 2·tangent */
    g_graph *ap = g_graph_new(s, BORA_MODE_APPLY);
    ap->output = g_tangent_leaf(ap, 0);
    gval *sum = bora_add(&ap->pub, g_hvp_leaf(ap, 0), ap->pub.api->scale(&ap->pub, ap->output, 2));
    CHECK(sum && ap->pub.api->assign(&ap->pub, g_state_leaf(ap, 0, 0), sum) == BORA_OK);
    if (g_finalize(ap) != BORA_OK) {
        fprintf(stderr, "apply graph: %s\n", ap->error);
        test_failures++;
    }
    s->n_states = 1;
    CHECK(g_store_materialize(s) == BORA_OK);
    CHECK(g_run(g1) == BORA_OK && g_run(g2) == BORA_OK && g_run(g2) == BORA_OK);
    double tangent[4] = {1, 2, 3, 4}, state[4];
    CHECK(g_store_write(s, S_TANGENT, 0, tangent, sizeof tangent) == BORA_OK);
    CHECK(g_run(ap) == BORA_OK);
    memcpy(state, s->state_ptr + s->slots[0].offset, sizeof state);
    double *a = rig_param(&r, "a"), grad[4], hvp[4];
    CHECK(g_store_read(s, S_GRAD, 0, grad, sizeof grad) == BORA_OK);
    CHECK(g_store_read(s, S_HVP, 0, hvp, sizeof hvp) == BORA_OK);
    for (int i = 0; i < 4; i++) {
        CHECK(grad[i] == 2 * a[i]);
        CHECK(fabs(hvp[i] - exp(a[i])) <= 1e-15 * exp(a[i])); /* written, not added twice */
        CHECK(state[i] == hvp[i] + 2 * tangent[i]);
    }
    g_graph_free(ap);
    g_graph_free(g1);
    g_graph_free(g2);
    rig_close(&r);
}

/* Misuse fails with a message naming what is wrong. */
static void check_misuse(void)
{
    rig r;
    rig_open(&r, plugin_dir, 1, 5);
    bora_axis ax[1] = {AX("x", 4)};
    const char *x[] = {"x"};
    /* a train graph */
    g_graph *g = g_graph_new(r.store, BORA_MODE_TRAIN);
    bora_tensor *a = P(&g->pub, "a", 1, ax);
    bora_tensor *l = g->pub.api->reduce(&g->pub, BORA_OP_SUM, bora_mul(&g->pub, a, a), 1, x);
    CHECK(g_hvp(g, l) != BORA_OK);
    CHECK_CONTAINS(g->error, "hvp: the graph was made for mode 1, not BORA_MODE_HESSIAN");
    g_graph_free(g);
    /* an op without a tangent rule: rope as a kernel (a Hessian graph's builder never makes it) */
    g = g_graph_new(r.store, BORA_MODE_HESSIAN);
    a = P(&g->pub, "a", 1, ax);
    gval *ins[3] = {a, a, a};
    gval *y = g_op1(g, BORA_OP_ROPE, 3, ins, a->dtype, a->ndim, a->dims, a->names);
    l = g->pub.api->reduce(&g->pub, BORA_OP_SUM, bora_mul(&g->pub, y, y), 1, x);
    CHECK(g_hvp(g, l) != BORA_OK);
    CHECK_CONTAINS(g->error, "hvp: no tangent rule for op 'rope'");
    g_graph_free(g);
    rig_close(&r);
    /* the store materialized without the buffers */
    rig_open(&r, plugin_dir, 1, 5);
    g = g_graph_new(r.store, BORA_MODE_EVAL);
    g->output = g->pub.api->contiguous(&g->pub, P(&g->pub, "a", 1, ax));
    CHECK(g_finalize(g) == BORA_OK && g_store_materialize(r.store) == BORA_OK);
    CHECK(g_store_zero_hvp(r.store) != BORA_OK);
    CHECK_CONTAINS(bora_error_get(), "g_store_hessian before materializing");
    double d[4] = {0};
    CHECK(g_store_write(r.store, S_TANGENT, 0, d, sizeof d) != BORA_OK);
    CHECK_CONTAINS(bora_error_get(), "cannot write the tangent of 'a'");
    g_graph_free(g);
    g = g_graph_new(r.store, BORA_MODE_HESSIAN);
    a = P(&g->pub, "a", 1, ax);
    l = g->pub.api->reduce(&g->pub, BORA_OP_SUM, bora_mul(&g->pub, a, a), 1, x);
    CHECK(g_hvp(g, l) != BORA_OK);
    CHECK_CONTAINS(g->error, "materialized without Hessian-vector product buffers");
    g_graph_free(g);
    rig_close(&r);
}

/* Sophia-G's sampled labels (sample_labels): a row whose logits are not finite draws no token
 * and is ignored, as an ignored target is, rather than failing the cross-entropy; a vocabulary
 * the f32 selection cannot hold exactly (above 2^24) is refused when the graph is built. */
static void check_sampled_labels(void)
{
    rig r;
    rig_open(&r, plugin_dir, 1, 9);
    g_store *s = r.store;
    g_graph *g = g_graph_new(s, BORA_MODE_TRAIN);
    g->sample_labels = 1;
    g->grads_write = 1;
    bora_graph *gp = &g->pub;
    bora_axis ax[2] = {AX("row", 3), AX("vocab", 4)};
    bora_tensor *lg = bora_param(gp, "logits", BORA_DTYPE_F32, 2, ax, bora_init_normal(1.0), 0);
    bora_tensor *t = bora_input(gp, "targets", BORA_DTYPE_I32, 1, ax);
    g->output = gp->api->cross_entropy(gp, lg, t, "vocab", NULL);
    CHECK(g->output && g_autodiff(g, g->output) == BORA_OK && g_finalize(g) == BORA_OK);
    CHECK(g_store_materialize(s) == BORA_OK);
    float *p = rig_param(&r, "logits"), loss = 0, grad[12];
    p[4 + 2] = NAN; /* row 1 */
    int32_t targets[3] = {1, 2, -100};
    int64_t counter[2] = {1, 0};
    CHECK(g_set_input(g, "targets", targets, sizeof targets) == BORA_OK);
    CHECK(g_set_input(g, "sample_counter", counter, sizeof counter) == BORA_OK);
    if (g_run(g) != BORA_OK) {
        fprintf(stderr, "sampled labels, a row of NaN logits: %s\n",
                g->status ? g->error : bora_error_get());
        test_failures++;
    }
    CHECK(g_read(g, g->output, &loss, sizeof loss) == BORA_OK);
    CHECK(g_store_read(s, S_GRAD, 0, grad, sizeof grad) == BORA_OK);
    /* row 0 alone counts: -log softmax of a drawn label, and a gradient only there */
    CHECK(isfinite(loss) && loss > 0);
    for (int i = 4; i < 12; i++)
        CHECK(grad[i] == 0);
    g_graph_free(g);
    rig_close(&r);

    rig_open(&r, plugin_dir, 1, 9);
    g = g_graph_new(r.store, BORA_MODE_TRAIN);
    g->sample_labels = 1;
    gp = &g->pub;
    bora_axis big[2] = {AX("row", 1), AX("vocab", (1 << 24) + 1)};
    bora_tensor *bl = bora_input(gp, "logits", BORA_DTYPE_F32, 2, big);
    t = bora_input(gp, "targets", BORA_DTYPE_I32, 1, big);
    CHECK(gp->api->cross_entropy(gp, bl, t, "vocab", NULL) == NULL);
    CHECK_CONTAINS(g->error, "exact up to 2^24 classes, not the 16777217 of axis 'vocab'");
    g_graph_free(g);
    rig_close(&r);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_hvp PLUGIN_DIR\n");
        return 2;
    }
    plugin_dir = argv[1];
    int n_checks = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int v = 0; v < cases[i].variants; v++, n_checks++)
            check_case(&cases[i], v);
    check_threads_and_mixed();
    check_write_and_f32();
    check_grads_to_hvp();
    check_sampled_labels();
    check_misuse();
    /* Every op is in some case's Hessian graph, or is a fused op a Hessian graph builds from
     * primitives (it must then never appear in one), or is never differentiated. */
    static const int fused[] = {BORA_OP_LAYERNORM,
                                BORA_OP_LAYERNORM_GRAD,
                                BORA_OP_SOFTMAX,
                                BORA_OP_LOG_SOFTMAX,
                                BORA_OP_XENT,
                                BORA_OP_XENT_GRAD,
                                BORA_OP_XENT_FUSED,
                                BORA_OP_ATTENTION,
                                BORA_OP_ATTENTION_GRAD,
                                BORA_OP_RMS_NORM,
                                BORA_OP_RMS_NORM_GRAD,
                                BORA_OP_ROPE,
                                BORA_OP_SUM_SQUARES,
                                BORA_OP_WRITE_SLICE,
                                BORA_OP_CONV1D,
                                BORA_OP_CONV1D_GRAD_INPUT,
                                BORA_OP_CONV1D_GRAD_WEIGHT};
    for (int op = 1; op < BORA_OP_COUNT_; op++) {
        int is_fused = 0;
        for (size_t k = 0; k < sizeof fused / sizeof fused[0]; k++)
            is_fused |= fused[k] == op;
        if (is_fused && ops_seen[op]) {
            fprintf(stderr, "op '%s' (%d) is in a Hessian graph, which should decompose it\n",
                    g_op_name(op), op);
            test_failures++;
        } else if (!is_fused && !ops_seen[op]) {
            fprintf(stderr, "op '%s' (%d) has no Hessian-vector product case in test_hvp\n",
                    g_op_name(op), op);
            test_failures++;
        }
    }
    printf("test_hvp: %d Hessian-vector products against finite differences\n", n_checks);
    return test_summary("test_hvp");
}
