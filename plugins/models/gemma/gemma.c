/* plugins/models/gemma — the Gemma family (Gemma Team 2024, 2024b, 2025) as Hugging Face's
 * GemmaForCausalLM, Gemma2ForCausalLM and Gemma3ForCausalLM: token embeddings scaled by
 * sqrt(hidden_size), pre-RMSNorm decoder layers whose norms scale by (1 + w), rotary positions,
 * grouped-query attention, a GeGLU MLP (tanh GELU), a final norm and an LM head tied to the
 * embedding (or its own). Parameter names and layouts are the Hugging Face state dict's.
 *
 *   gemma:   h = x + o_proj(attention(rms(x)));  x' = h + mlp(rms(h))
 *   gemma2:  h = x + rms(o_proj(attention(rms(x))));  x' = h + rms(mlp(rms(h)))  (sandwich
 *            norms), scores scaled by query_pre_attn_scalar^-½ and soft-capped, every other
 *            layer sliding within a window, logits soft-capped: c·tanh(logits / c)
 *   gemma3:  gemma2 with q_norm/k_norm (RMSNorm over head_dim before RoPE), the caps off by
 *            default, five sliding layers per global one, and RoPE's base rope_local_base_freq
 *            on the sliding layers (rope_theta and rope_scaling on the global ones)
 *
 * Inputs, graphs and the KV cache are Llama's (plugins/models/common): a sliding layer whose
 * window is shorter than seq_len keeps only the window's rows, as a ring. */
#include "gemma.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>

static bora_status gemma_create(const bora_host *h, const bora_config *cfg, bora_model **out)
{
    return gemma_create_kind(h, cfg, GEMMA, out);
}
static bora_status gemma2_create(const bora_host *h, const bora_config *cfg, bora_model **out)
{
    return gemma_create_kind(h, cfg, GEMMA2, out);
}
static bora_status gemma3_create(const bora_host *h, const bora_config *cfg, bora_model **out)
{
    return gemma_create_kind(h, cfg, GEMMA3, out);
}

typedef struct ctx {
    decoder_ctx d;
    const gemma *m;
} ctx;

/* GemmaRMSNorm: x · rstd · (1 + w), w initialised to zeros, over axis (size n). */
static bora_tensor *rms(ctx *c, const char *prefix, bora_tensor *x, const char *axis, int64_t n)
{
    return decoder_rms(&c->d, prefix, x, axis, n, c->m->rms_norm_eps, 1.0, bora_init_zeros());
}

/* A 0-d constant in x's dtype. */
static bora_tensor *like(ctx *c, bora_tensor *x, double v)
{
    return c->d.A->full(c->d.g, c->d.A->dtype(x), 0, NULL, v);
}

/* One layer's self-attention over h (batch, position, embed) -> (batch, position, embed). */
static bora_tensor *self_attention(ctx *c, int64_t l, bora_tensor *h)
{
    const bora_graph_api *A = c->d.A;
    const gemma *m = c->m;
    bora_graph *g = c->d.g;
    int64_t E = m->hidden_size, H = m->num_attention_heads, KV = m->num_key_value_heads,
            hd = m->head_dim;
    char p[128], n[160];
    snprintf(p, sizeof p, "model.layers.%lld.self_attn", (long long)l);
    const char *qo[3] = {"q_proj", "k_proj", "v_proj"};
    const char *ho[3] = {"heads", "kv_heads", "kv_heads"};
    int64_t hn[3] = {H, KV, KV};
    bora_tensor *t[3];
    for (int i = 0; i < 3; i++) {
        snprintf(n, sizeof n, "%s.%s", p, qo[i]);
        t[i] = decoder_linear(&c->d, n, h, "embed", E, "proj", hn[i] * hd, m->attention_bias, 0);
        bora_axis parts[2] = {{ho[i], hn[i]}, {"head_dim", hd}};
        t[i] = A->split(g, t[i], "proj", 2, parts); /* (batch, position, heads, head_dim) */
    }
    bora_tensor *q = t[0], *k = t[1], *v = t[2];
    if (m->kind == GEMMA3) { /* one Gemma RMSNorm over head_dim, shared by the heads */
        snprintf(n, sizeof n, "%s.q_norm", p);
        q = rms(c, n, q, "head_dim", hd);
        snprintf(n, sizeof n, "%s.k_norm", p);
        k = rms(c, n, k, "head_dim", hd);
    }
    /* Gemma 3's sliding layers rotate with their own base (rotary_emb_local) */
    const bora_rope_spec *rope = m->slides[l] ? &m->rope_local : &m->rope;
    q = decoder_rope(&c->d, q, rope);
    k = bora_rename(g, decoder_rope(&c->d, k, rope), "position", "key_position");
    v = bora_rename(g, v, "position", "key_position");
    int64_t W = m->slides[l] ? m->sliding_window : 0;
    bora_attention_opts ao = {.struct_size = sizeof ao,
                              .causal = 1,
                              .scale = 1.0 / sqrt(m->query_pre_attn_scalar),
                              .segment_ids = c->d.seg,
                              .key_length = c->d.mode == BORA_MODE_DECODE ? c->d.key_length : NULL,
                              .head_axis = "heads",
                              .kv_head_axis = "kv_heads",
                              .sliding_window = W,
                              .softcap = m->attn_logit_softcapping};
    decoder_kv_cache(&c->d, p, &k, &v, KV, hd, W, &ao);
    bora_tensor *att = A->attention(g, q, k, v, &ao);
    const char *merge[] = {"heads", "head_dim"};
    att = A->merge(g, att, 2, merge, "attn");
    snprintf(n, sizeof n, "%s.o_proj", p);
    att = decoder_linear(&c->d, n, att, "attn", H * hd, "embed_out", E, m->attention_bias, 0);
    return bora_rename(g, att, "embed_out", "embed");
}

/* GeGLU: down_proj(gelu_tanh(gate_proj(h)) · up_proj(h)), no biases. */
static bora_tensor *mlp(ctx *c, int64_t l, bora_tensor *h)
{
    const gemma *m = c->m;
    int64_t E = m->hidden_size, F = m->intermediate_size;
    char n[160];
    snprintf(n, sizeof n, "model.layers.%lld.mlp.gate_proj", (long long)l);
    bora_tensor *gate = decoder_linear(&c->d, n, h, "embed", E, "mlp", F, 0, BORA_OP_GELU_TANH);
    snprintf(n, sizeof n, "model.layers.%lld.mlp.up_proj", (long long)l);
    bora_tensor *up = decoder_linear(&c->d, n, h, "embed", E, "mlp", F, 0, 0);
    snprintf(n, sizeof n, "model.layers.%lld.mlp.down_proj", (long long)l);
    bora_tensor *y =
        decoder_linear(&c->d, n, bora_mul(c->d.g, gate, up), "mlp", F, "embed_out", E, 0, 0);
    return bora_rename(c->d.g, y, "embed_out", "embed");
}

/* Layer l on the residual stream x. Gemma 1 norms before each block (its post_attention_layernorm
 * is the MLP's input norm, as Llama's); Gemma 2 and 3 also norm each block's output. */
static bora_tensor *layer(ctx *c, int64_t l, bora_tensor *x)
{
    bora_graph *g = c->d.g;
    int64_t E = c->m->hidden_size;
    char n[128];
    snprintf(n, sizeof n, "model.layers.%lld.input_layernorm", (long long)l);
    bora_tensor *a = self_attention(c, l, rms(c, n, x, "embed", E));
    if (c->m->kind == GEMMA) {
        x = bora_residual(g, bora_add(g, x, a));
        snprintf(n, sizeof n, "model.layers.%lld.post_attention_layernorm", (long long)l);
        return bora_residual(g, bora_add(g, x, mlp(c, l, rms(c, n, x, "embed", E))));
    }
    snprintf(n, sizeof n, "model.layers.%lld.post_attention_layernorm", (long long)l);
    x = bora_residual(g, bora_add(g, x, rms(c, n, a, "embed", E)));
    snprintf(n, sizeof n, "model.layers.%lld.pre_feedforward_layernorm", (long long)l);
    bora_tensor *f = mlp(c, l, rms(c, n, x, "embed", E));
    snprintf(n, sizeof n, "model.layers.%lld.post_feedforward_layernorm", (long long)l);
    return bora_residual(g, bora_add(g, x, rms(c, n, f, "embed", E)));
}

static bora_status gemma_build(bora_model *model, bora_graph *g, int32_t mode, bora_tensor **out)
{
    const gemma *m = (const gemma *)model;
    const bora_graph_api *A = g->api;
    const char *type = gemma_kind_name[m->kind];
    if (mode != BORA_MODE_TRAIN && mode != BORA_MODE_EVAL && mode != BORA_MODE_PREFILL &&
        mode != BORA_MODE_DECODE)
        return m->h->fail(m->h, BORA_ERR_UNSUPPORTED, "%s has no graph for mode %d", type, mode);
    if (A->struct_size < offsetof(bora_graph_api, rope) + sizeof(void *))
        return m->h->fail(m->h, BORA_ERR_UNSUPPORTED,
                          "%s needs a host with rms_norm and rope (ABI 1.9)", type);
    int ring = 0;
    for (int64_t l = 0; l < m->num_hidden_layers; l++)
        ring |= m->slides[l] && m->sliding_window && m->sliding_window < m->seq_len;
    ctx c = {.m = m};
    decoder_inputs(&c.d, g, mode, m->seq_len, ring, m->initializer_range);
    int64_t E = m->hidden_size, V = m->vocab_size;
    bora_axis emb_a[2] = {{"vocab", V}, {"embed", E}};
    bora_tensor *embed = decoder_param(&c.d, "model.embed_tokens.weight", 2, emb_a,
                                       bora_init_normal(m->initializer_range), 0);
    bora_tensor *x = A->embedding(g, embed, c.d.ids, "vocab"); /* (batch, position, embed) */
    /* × sqrt(hidden_size) rounded to the embeddings' dtype (Gemma, Gemma 2: a tensor of that
     * dtype); Gemma 3 keeps it as an f32 buffer cast to the weight's dtype: f32's rounding
     * first, whatever the dtype */
    double scale = sqrt((double)E);
    if (m->kind == GEMMA3)
        scale = (double)(float)scale;
    x = bora_residual(g, bora_mul(g, x, like(&c, x, scale)));
    for (int64_t l = 0; l < m->num_hidden_layers; l++) {
        if (m->gradient_checkpointing)
            x = A->checkpoint(g, x);
        x = layer(&c, l, x);
    }
    if (m->gradient_checkpointing)
        x = A->checkpoint(g, x);
    x = rms(&c, "model.norm", x, "embed", E);
    bora_tensor *head = embed;
    if (!m->tie_word_embeddings)
        head = decoder_param(&c.d, "lm_head.weight", 2, emb_a,
                             bora_init_normal(m->initializer_range), 0);
    const char *e[] = {"embed"};
    bora_tensor *logits = bora_dot(g, x, head, 1, e); /* (batch, position, vocab) */
    if (m->final_logit_softcapping > 0) { /* logits / c, tanh, × c: transformers' order */
        double cap = m->final_logit_softcapping;
        logits = bora_div(g, logits, like(&c, logits, cap));
        logits = bora_mul(g, A->unary(g, BORA_OP_TANH, logits), like(&c, logits, cap));
    }
    return decoder_output(&c.d, logits, out);
}

#define GEMMA_OPS(var, kind, create_fn, what)                                             \
    static const bora_model_ops var = {                                                   \
        .hdr = {sizeof(bora_model_ops), BORA_KIND_MODEL, #kind, what, gemma_keys_##kind}, \
        .create = create_fn,                                                              \
        .build = gemma_build,                                                             \
        .destroy = gemma_destroy,                                                         \
        .hf_config = gemma_hf_config,                                                     \
        .hf_keys = gemma_hf_keys_##kind,                                                  \
    }

GEMMA_OPS(gemma_ops, gemma, gemma_create,
          "Gemma as Hugging Face's GemmaForCausalLM (scaled embeddings, (1 + w) RMSNorm, GeGLU)");
GEMMA_OPS(gemma2_ops, gemma2, gemma2_create,
          "Gemma 2 as Hugging Face's Gemma2ForCausalLM (sandwich norms, soft-caps, alternating "
          "sliding windows)");
GEMMA_OPS(gemma3_ops, gemma3, gemma3_create,
          "Gemma 3's text model as Hugging Face's Gemma3ForCausalLM (gemma3_text: q/k norms, "
          "5 sliding layers per global one, a local RoPE base)");

static bora_status gemma_init(const bora_host *h)
{
    bora_status st = h->add(h, &gemma_ops.hdr);
    if (st == BORA_OK)
        st = h->add(h, &gemma2_ops.hdr);
    if (st == BORA_OK)
        st = h->add(h, &gemma3_ops.hdr);
    return st;
}

BORA_PLUGIN_DEFINE("gemma", "0.1.0", gemma_init, NULL)
