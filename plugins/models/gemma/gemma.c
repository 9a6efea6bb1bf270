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

/* GemmaRMSNorm: x · rstd · (1 + w), w initialised to zeros, over axis (size n). */
static bora_tensor *rms(decoder_ctx *c, const gemma *m, const char *prefix, bora_tensor *x,
                        const char *axis, int64_t n)
{
    return decoder_rms(c, prefix, x, axis, n, m->d.rms_norm_eps, 1.0, bora_init_zeros());
}

/* A 0-d constant in x's dtype. */
static bora_tensor *like(decoder_ctx *c, bora_tensor *x, double v)
{
    return c->A->full(c->g, c->A->dtype(x), 0, NULL, v);
}

/* One layer's self-attention over h (batch, position, embed) -> (batch, position, embed). */
static bora_tensor *self_attention(decoder_ctx *c, const gemma *m, int64_t l, bora_tensor *h)
{
    bora_graph *g = c->g;
    int64_t hd = m->d.head_dim;
    char p[128], n[160];
    snprintf(p, sizeof p, "model.layers.%lld.self_attn", (long long)l);
    bora_tensor *q, *k, *v;
    decoder_qkv(c, &m->d, p, h, m->attention_bias, &q, &k, &v);
    if (m->kind == GEMMA3) { /* one Gemma RMSNorm over head_dim, shared by the heads */
        snprintf(n, sizeof n, "%s.q_norm", p);
        q = rms(c, m, n, q, "head_dim", hd);
        snprintf(n, sizeof n, "%s.k_norm", p);
        k = rms(c, m, n, k, "head_dim", hd);
    }
    /* Gemma 3's sliding layers rotate with their own base (rotary_emb_local) */
    const bora_rope_spec *rope = m->d.slides[l] ? &m->rope_local : &m->d.rope;
    q = decoder_rope(c, q, rope);
    k = bora_rename(g, decoder_rope(c, k, rope), "position", "key_position");
    v = bora_rename(g, v, "position", "key_position");
    bora_attention_opts ao = {.struct_size = sizeof ao,
                              .causal = 1,
                              .scale = 1.0 / sqrt(m->query_pre_attn_scalar),
                              .segment_ids = c->seg,
                              .key_length = c->mode == BORA_MODE_DECODE ? c->key_length : NULL,
                              .head_axis = "heads",
                              .kv_head_axis = "kv_heads",
                              .sliding_window = m->d.slides[l] ? m->d.sliding_window : 0,
                              .softcap = m->kind == GEMMA3 ? 0 : m->attn_logit_softcapping};
    return decoder_attend(c, &m->d, p, q, k, v, &ao, m->attention_bias);
}

/* Layer l on the residual stream x. Gemma 1 norms before each block (its post_attention_layernorm
 * is the MLP's input norm, as Llama's); Gemma 2 and 3 also norm each block's output. The MLP is
 * GeGLU: down_proj(gelu_tanh(gate_proj(h)) · up_proj(h)), no biases. */
static bora_tensor *layer(decoder_ctx *c, const gemma *m, int64_t l, bora_tensor *x)
{
    bora_graph *g = c->g;
    int64_t E = m->d.hidden_size;
    char n[128];
    snprintf(n, sizeof n, "model.layers.%lld.input_layernorm", (long long)l);
    bora_tensor *a = self_attention(c, m, l, rms(c, m, n, x, "embed", E));
    snprintf(n, sizeof n, "model.layers.%lld.post_attention_layernorm", (long long)l);
    if (m->kind == GEMMA) {
        x = bora_residual(g, bora_add(g, x, a));
        bora_tensor *f =
            decoder_gated_mlp(c, &m->d, l, rms(c, m, n, x, "embed", E), 0, BORA_OP_GELU_TANH);
        return bora_residual(g, bora_add(g, x, f));
    }
    x = bora_residual(g, bora_add(g, x, rms(c, m, n, a, "embed", E)));
    snprintf(n, sizeof n, "model.layers.%lld.pre_feedforward_layernorm", (long long)l);
    bora_tensor *f =
        decoder_gated_mlp(c, &m->d, l, rms(c, m, n, x, "embed", E), 0, BORA_OP_GELU_TANH);
    snprintf(n, sizeof n, "model.layers.%lld.post_feedforward_layernorm", (long long)l);
    return bora_residual(g, bora_add(g, x, rms(c, m, n, f, "embed", E)));
}

static bora_status gemma_build(bora_model *model, bora_graph *g, int32_t mode, bora_tensor **out)
{
    const gemma *m = (const gemma *)model;
    const bora_graph_api *A = g->api;
    bora_status st = decoder_check_build(&m->d, gemma_kind_name[m->kind], g, mode);
    if (st != BORA_OK)
        return st;
    decoder_ctx c;
    decoder_inputs(&c, &m->d, g, mode);
    bora_tensor *embed = decoder_embed_table(&c, &m->d);
    bora_tensor *x = A->embedding(g, embed, c.ids, "vocab"); /* (batch, position, embed) */
    /* × sqrt(hidden_size) rounded to the embeddings' dtype (Gemma, Gemma 2: a tensor of that
     * dtype); Gemma 3 keeps it as an f32 buffer cast to the weight's dtype: f32's rounding
     * first, whatever the dtype */
    double scale = sqrt((double)m->d.hidden_size);
    if (m->kind == GEMMA3)
        scale = (double)(float)scale;
    x = bora_residual(g, bora_mul(g, x, like(&c, x, scale)));
    for (int64_t l = 0; l < m->d.num_hidden_layers; l++) {
        if (m->d.gradient_checkpointing)
            x = A->checkpoint(g, x);
        x = layer(&c, m, l, x);
    }
    if (m->d.gradient_checkpointing)
        x = A->checkpoint(g, x);
    x = rms(&c, m, "model.norm", x, "embed", m->d.hidden_size);
    bora_tensor *logits = decoder_lm_head(&c, &m->d, x, embed); /* (batch, position, vocab) */
    if (m->final_logit_softcapping > 0) { /* logits / c, tanh, × c: transformers' order */
        double cap = m->final_logit_softcapping;
        logits = bora_div(g, logits, like(&c, logits, cap));
        logits = bora_mul(g, A->unary(g, BORA_OP_TANH, logits), like(&c, logits, cap));
    }
    return decoder_output(&c, logits, out);
}

#define GEMMA_OPS(var, kind, create_fn, what)                                             \
    static const bora_model_ops var = {                                                   \
        .hdr = {sizeof(bora_model_ops), BORA_KIND_MODEL, #kind, what, gemma_keys_##kind}, \
        .create = create_fn,                                                              \
        .build = gemma_build,                                                             \
        .destroy = decoder_model_free,                                                    \
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
