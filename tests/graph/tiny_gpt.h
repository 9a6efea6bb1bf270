/* tests/graph/tiny_gpt.h — a small GPT-2 (pre-LayerNorm blocks, learned positions, causal
 * attention, GELU MLP, tied LM head) written with the public graph API, as a model plugin
 * would; the graph tests differentiate, plan and run it. */
#ifndef BORA_TEST_TINY_GPT_H
#define BORA_TEST_TINY_GPT_H

#include <bora/graph.h>
#include <stdio.h>

typedef struct tiny_gpt {
    int64_t vocab, embed, heads, layers, batch, seq, mlp;
    int dtype;
} tiny_gpt;

#define TG_AX(n, s) ((bora_axis){(n), (s)})

static inline bora_tensor *tg_param(bora_graph *g, const tiny_gpt *m, const char *name, int n,
                                    const bora_axis *ax, bora_init init)
{
    return bora_param(g, name, m->dtype, n, ax, init, 0);
}

/* (batch, position, embed) -> the same, through layernorm with parameters prefix.{weight,bias} */
static inline bora_tensor *tg_ln(bora_graph *g, const tiny_gpt *m, const char *prefix,
                                 bora_tensor *x)
{
    char w[128], b[128];
    snprintf(w, sizeof w, "%s.weight", prefix);
    snprintf(b, sizeof b, "%s.bias", prefix);
    bora_axis e = TG_AX("embed", m->embed);
    return g->api->layernorm(g, x, tg_param(g, m, w, 1, &e, bora_init_ones()),
                             tg_param(g, m, b, 1, &e, bora_init_zeros()), "embed", 1e-5);
}

/* x (.., in) -> (.., out renamed to `as`): a Conv1D as in Hugging Face GPT-2 (weight (in, out)) */
static inline bora_tensor *tg_linear(bora_graph *g, const tiny_gpt *m, const char *prefix,
                                     bora_tensor *x, const char *in, int64_t in_size,
                                     const char *out, int64_t out_size, int act)
{
    char w[128], b[128];
    snprintf(w, sizeof w, "%s.weight", prefix);
    snprintf(b, sizeof b, "%s.bias", prefix);
    bora_axis wa[2] = {TG_AX(in, in_size), TG_AX(out, out_size)};
    bora_tensor *W = tg_param(g, m, w, 2, wa, bora_init_normal(0.2));
    bora_tensor *B = tg_param(g, m, b, 1, wa + 1, bora_init_normal(0.1));
    const char *k[] = {in};
    bora_dot_opts o = {sizeof o, act, B};
    return g->api->dot(g, x, W, 1, k, &o);
}

/* The loss (train: masked sum / count of targets) or the logits (eval). */
static inline bora_tensor *tiny_gpt_build(bora_graph *g, const tiny_gpt *m, int mode)
{
    const bora_graph_api *A = g->api;
    int64_t hd = m->embed / m->heads;
    bora_axis io[2] = {TG_AX("batch", m->batch), TG_AX("position", m->seq)};
    bora_tensor *ids = bora_input(g, "ids", BORA_DTYPE_I32, 2, io);
    bora_axis wte_a[2] = {TG_AX("vocab", m->vocab), TG_AX("embed", m->embed)};
    bora_axis wpe_a[2] = {TG_AX("position", m->seq), TG_AX("embed", m->embed)};
    bora_tensor *wte = tg_param(g, m, "transformer.wte.weight", 2, wte_a, bora_init_normal(0.3));
    bora_tensor *wpe = tg_param(g, m, "transformer.wpe.weight", 2, wpe_a, bora_init_normal(0.1));
    bora_tensor *x = bora_add(g, A->embedding(g, wte, ids, "vocab"), wpe);
    for (int l = 0; l < m->layers; l++) {
        x = A->checkpoint(g, x); /* block boundaries, for recomputation */
        char p[64];
        snprintf(p, sizeof p, "transformer.h.%d.ln_1", l);
        bora_tensor *h = tg_ln(g, m, p, x);
        snprintf(p, sizeof p, "transformer.h.%d.attn.c_attn", l);
        bora_tensor *qkv = tg_linear(g, m, p, h, "embed", m->embed, "qkv", 3 * m->embed, 0);
        bora_axis parts[3] = {TG_AX("three", 3), TG_AX("heads", m->heads), TG_AX("head_dim", hd)};
        qkv = A->split(g, qkv, "qkv", 3, parts);
        bora_tensor *qkv_t[3];
        for (int i = 0; i < 3; i++)
            qkv_t[i] = A->split(g, A->slice(g, qkv, "three", i, 1), "three", 0, NULL);
        bora_tensor *k = bora_rename(g, qkv_t[1], "position", "key_position");
        bora_tensor *v = bora_rename(g, qkv_t[2], "position", "key_position");
        bora_attention_opts ao = {.struct_size = sizeof ao, .causal = 1};
        bora_tensor *att = A->attention(g, qkv_t[0], k, v, &ao);
        const char *hh[] = {"heads", "head_dim"};
        att = A->merge(g, att, 2, hh, "embed_in");
        snprintf(p, sizeof p, "transformer.h.%d.attn.c_proj", l);
        att = tg_linear(g, m, p, att, "embed_in", m->embed, "embed_out", m->embed, 0);
        x = bora_add(g, x, bora_rename(g, att, "embed_out", "embed"));
        snprintf(p, sizeof p, "transformer.h.%d.ln_2", l);
        h = tg_ln(g, m, p, x);
        snprintf(p, sizeof p, "transformer.h.%d.mlp.c_fc", l);
        h = tg_linear(g, m, p, h, "embed", m->embed, "mlp", m->mlp, BORA_OP_GELU_TANH);
        snprintf(p, sizeof p, "transformer.h.%d.mlp.c_proj", l);
        h = tg_linear(g, m, p, h, "mlp", m->mlp, "embed_out", m->embed, 0);
        x = bora_add(g, x, bora_rename(g, h, "embed_out", "embed"));
    }
    x = A->checkpoint(g, x);
    x = tg_ln(g, m, "transformer.ln_f", x);
    const char *e[] = {"embed"};
    bora_tensor *logits = bora_dot(g, x, wte, 1, e); /* tied head: (batch, position, vocab) */
    if (mode != BORA_MODE_TRAIN)
        return logits;
    bora_tensor *targets = bora_input(g, "targets", BORA_DTYPE_I32, 2, io);
    bora_tensor *sum = A->cross_entropy(g, logits, targets, "vocab", NULL);
    return A->scale(g, sum, 1.0 / (double)(m->batch * m->seq));
}

#endif
