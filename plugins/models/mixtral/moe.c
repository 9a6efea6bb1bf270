/* plugins/models/mixtral/moe.c — Mixtral's sparse MoE block (MixtralSparseMoeBlock) on the
 * engine's routing ops (docs/design.md, "Mixture-of-experts routing"), and the load-balancing
 * loss of its routers (transformers' load_balancing_loss_func; Fedus et al. 2021, eqs. 4-6),
 * their z-loss (ST-MoE) and each layer's expert load, declared as metrics.
 *
 *     p = softmax(gate(x))                        (token, expert), f32
 *     w, e = top_k(p, k); w = w / sum(w)          (token, choice): renormalised weights
 *     y = sum_j w_j · w2_e_j(silu(w1_e_j x) · w3_e_j x)
 *
 * Every token's k rows are sorted by expert (argsort of the chosen experts, stable), each
 * expert's rows go through its own matrices in one grouped product (grouped_matmul, group sizes
 * from bincount), and the rows are put back in token order (a gather by the inverse
 * permutation) for the weighted sum. No token is dropped. The experts keep Hugging Face's names
 * and layouts, block_sparse_moe.experts.E.w{1,2,3}.weight (out, in), and are stacked in the
 * graph (expert, out, in) for the grouped products. */
#include "mixtral.h"

#include <stdio.h>

/* The experts' matrices w (prefix.experts.E.w.weight, each (out, in)) stacked along a new axis
 * expert: (expert, out, in). concat takes at most 8 tensors, so the stack grows 7 at a time. */
static bora_tensor *stack_experts(decoder_ctx *c, const mixtral *m, const char *prefix,
                                  const char *w, const char *out, int64_t out_size, const char *in,
                                  int64_t in_size)
{
    const bora_graph_api *A = c->A;
    bora_tensor *part[8], *stack = NULL;
    int n = 0;
    for (int64_t e = 0; e < m->num_local_experts; e++) {
        char name[200];
        snprintf(name, sizeof name, "%s.experts.%lld.%s.weight", prefix, (long long)e, w);
        bora_axis a[2] = {{out, out_size}, {in, in_size}};
        bora_tensor *t = decoder_param(c, name, 2, a, bora_init_normal(c->initializer_range), 0);
        part[n++] = A->broadcast(c->g, t, (bora_axis){"expert", 1});
        if (n == 8 || e == m->num_local_experts - 1) {
            part[0] = stack = A->concat(c->g, "expert", n, part);
            n = 1;
        }
    }
    return stack;
}

/* The token of each sorted row, i32 (row): row t·k + j is token t's j-th choice, so sorted row i
 * is token order[i] / k. The graph has no integer division; the rows' token indices, exact in
 * f64, are gathered by order instead. x's rows are then gathered once by token (row, embed),
 * where broadcasting x over the choices would copy it k-fold first (and its gradient sum the
 * copies back). */
static bora_tensor *row_tokens(decoder_ctx *c, bora_tensor *order, int64_t N, int64_t k)
{
    bora_graph *g = c->g;
    const bora_graph_api *A = c->A;
    const char *tc[2] = {"token", "choice"};
    bora_tensor *t = A->iota(g, (bora_axis){"token", N}, BORA_DTYPE_F64, 0, 1);
    t = A->permute(g, A->broadcast(g, t, (bora_axis){"choice", k}), 2, tc);
    bora_axis one[2] = {{"row", N * k}, {"one", 1}};
    t = A->split(g, A->merge(g, t, 2, tc, "row"), "row", 2, one); /* (row, one): t·k + j -> t */
    t = A->split(g, A->embedding(g, t, order, "row"), "one", 0, NULL);
    return A->cast(g, t, BORA_DTYPE_I32);
}

bora_tensor *moe_block(decoder_ctx *c, const mixtral *m, int64_t l, bora_tensor *h,
                       moe_balance *bal)
{
    bora_graph *g = c->g;
    const bora_graph_api *A = c->A;
    int64_t E = m->num_local_experts, k = m->num_experts_per_tok;
    int64_t D = m->d.hidden_size, F = m->d.intermediate_size;
    int64_t N = c->io[0].size * c->io[1].size; /* tokens */
    char p[128], n[160];
    snprintf(p, sizeof p, "model.layers.%lld.block_sparse_moe", (long long)l);
    const char *bpe[3] = {"batch", "position", "embed"}, *bp[2] = {"batch", "position"};
    bora_tensor *x = A->merge(g, A->permute(g, h, 3, bpe), 2, bp, "token"); /* (token, embed) */

    /* the router, in f32: softmax over the experts, the top k, their weights renormalised */
    snprintf(n, sizeof n, "%s.gate", p);
    bora_tensor *logits = decoder_linear(c, n, x, "embed", D, "expert", E, 0, 0);
    bora_tensor *probs = A->softmax(g, logits, "expert"); /* (token, expert) */
    bora_tensor *chosen = NULL;
    bora_tensor *weights = A->top_k(g, probs, "expert", k, "choice", &chosen); /* (token, choice) */
    const char *choice[1] = {"choice"}, *tc[2] = {"token", "choice"};
    bora_tensor *total = A->reduce(g, BORA_OP_SUM, weights, 1, choice); /* (token) */
    weights = bora_div(g, weights, A->broadcast(g, total, (bora_axis){"choice", k}));

    /* rows (token, choice) -> sorted by expert: row t·k + j is token t's j-th expert */
    bora_tensor *keys = chosen ? A->merge(g, chosen, 2, tc, "row") : NULL;
    bora_tensor *order = keys ? A->argsort(g, keys) : NULL;
    bora_tensor *sizes = keys ? A->bincount(g, keys, (bora_axis){"expert", E}) : NULL;
    bora_tensor *rows = order ? A->embedding(g, x, row_tokens(c, order, N, k), "token") : NULL;

    /* each expert's SwiGLU over its rows: w2(silu(w1 x) · w3 x) */
    bora_tensor *w1 = stack_experts(c, m, p, "w1", "mlp", F, "embed", D);
    bora_tensor *w3 = stack_experts(c, m, p, "w3", "mlp", F, "embed", D);
    bora_tensor *w2 = stack_experts(c, m, p, "w2", "embed", D, "mlp", F);
    bora_tensor *a = bora_unary(g, BORA_OP_SILU, A->grouped_matmul(g, rows, w1, sizes, "embed"));
    a = bora_mul(g, a, A->grouped_matmul(g, rows, w3, sizes, "embed")); /* (row, mlp) */
    bora_tensor *ys = A->grouped_matmul(g, a, w2, sizes, "mlp");        /* (row, embed) */

    /* back to token order (the inverse permutation), weighted, summed over the choices */
    ys = order ? A->embedding(g, ys, A->argsort(g, order), "row") : NULL;
    bora_axis tk[2] = {{"token", N}, {"choice", k}};
    ys = A->split(g, ys, "row", 2, tk);
    bora_tensor *y = A->reduce(g, BORA_OP_SUM, bora_mul(g, ys, weights), 1, choice);

    if (bal) { /* per expert: the rows it got (no gradient) and its probability summed */
        const char *token[1] = {"token"}, *expert[1] = {"expert"};
        bora_tensor *prob = A->reduce(g, BORA_OP_SUM, probs, 1, token);
        bora_tensor *routed = sizes ? A->cast(g, sizes, BORA_DTYPE_F32) : NULL;
        bal->prob = bal->prob ? bora_add(g, bal->prob, prob) : prob;
        bal->routed = bal->routed ? bora_add(g, bal->routed, routed) : routed;
        bal->rows += N;
        /* the layer's load: the fraction of its N·k (token, choice) rows each expert got */
        snprintf(n, sizeof n, "expert_load/layer%lld", (long long)l);
        bora_graph_metric(g, A->scale(g, routed, 1.0 / ((double)N * (double)k)), n);
        /* z: logsumexp of each token's router logits (its max taken out first), squared */
        bora_tensor *top = A->reduce(g, BORA_OP_MAX, logits, 1, expert); /* (token) */
        bora_tensor *shifted = bora_sub(g, logits, A->broadcast(g, top, (bora_axis){"expert", E}));
        bora_tensor *sum =
            A->reduce(g, BORA_OP_SUM, bora_unary(g, BORA_OP_EXP, shifted), 1, expert);
        bora_tensor *lse = bora_add(g, top, bora_unary(g, BORA_OP_LOG, sum));
        bora_tensor *z = A->reduce(g, BORA_OP_SUM, bora_mul(g, lse, lse), 1, token);
        bal->z = bal->z ? bora_add(g, bal->z, z) : z;
    }
    return A->split(g, y, "token", 2, c->io); /* (batch, position, embed) */
}

/* transformers concatenates the routers' logits of all layers into R = layers x tokens rows and
 * takes, per expert e, the fraction of the rows' k choices that went to e (summed over the
 * choices: routed_e / R) and the mean probability (prob_e / R):
 *     aux = E · sum_e (routed_e / R) · (prob_e / R)
 * The gradient reaches the routers through prob only (the choices are a one-hot). */
bora_tensor *moe_balance_loss(decoder_ctx *c, const mixtral *m, const moe_balance *bal)
{
    const char *expert[1] = {"expert"};
    bora_tensor *s =
        c->A->reduce(c->g, BORA_OP_SUM, bora_mul(c->g, bal->routed, bal->prob), 1, expert);
    double R = (double)bal->rows;
    return c->A->scale(c->g, s, (double)m->num_local_experts / (R * R));
}

/* ST-MoE's router z-loss (Zoph et al. 2022, eq. 5), as transformers' router_z_loss_func takes
 * it over the layers' router logits concatenated: the mean over the R = layers x tokens rows of
 * logsumexp(logits)², which keeps the logits small. */
bora_tensor *moe_z_loss(decoder_ctx *c, const moe_balance *bal)
{
    return c->A->scale(c->g, bal->z, 1.0 / (double)bal->rows);
}
