/* plugins/models/llama — the Llama family (Touvron et al. 2023; Mistral, Qwen2, Qwen3) as Hugging
 * Face's LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM and Qwen3ForCausalLM: pre-RMSNorm
 * decoder layers, rotary positions, grouped-query attention, a SwiGLU MLP, a final RMSNorm and
 * an LM head (tied to the token embedding or its own). Parameter names and layouts are the
 * Hugging Face state dict's (nn.Linear weights (out, in)), so model.safetensors loads there
 * unchanged.
 *
 *     h = x + o_proj(attention(rope(q_proj(rms(x))), rope(k_proj(rms(x))), v_proj(rms(x))))
 *     x' = h + down_proj(silu(gate_proj(rms(h))) · up_proj(rms(h)))
 *
 * The types differ only in switches read by config.c: Mistral's sliding window, Qwen2's q/k/v
 * biases, Qwen3's RMSNorm over each head of q and k before RoPE, Llama's optional biases.
 *
 * Inputs, graphs and the KV cache are GPT-2's (plugins/models/gpt2): train returns the summed
 * cross-entropy, eval the logits; prefill runs a window from position 0 and fills each layer's
 * cache (batch, key_position, kv_heads, head_dim) with keys after RoPE, decode runs one token at
 * the runtime extent `position`. A layer that slides within a window W shorter than seq_len
 * keeps only W cache rows, as a ring: position p lives in row p mod W. */
#include "llama.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

static bora_status llama_create(const bora_host *h, const bora_config *cfg, bora_model **out)
{
    return llama_create_kind(h, cfg, LLAMA, out);
}
static bora_status mistral_create(const bora_host *h, const bora_config *cfg, bora_model **out)
{
    return llama_create_kind(h, cfg, MISTRAL, out);
}
static bora_status qwen2_create(const bora_host *h, const bora_config *cfg, bora_model **out)
{
    return llama_create_kind(h, cfg, QWEN2, out);
}
static bora_status qwen3_create(const bora_host *h, const bora_config *cfg, bora_model **out)
{
    return llama_create_kind(h, cfg, QWEN3, out);
}

/* What one build needs besides the model. */
typedef struct ctx {
    decoder_ctx d;
    const llama *m;
} ctx;

/* An RMSNorm (LlamaRMSNorm: a weight of ones) over axis (size n) named prefix.weight. */
static bora_tensor *rms(ctx *c, const char *prefix, bora_tensor *x, const char *axis, int64_t n)
{
    return decoder_rms(&c->d, prefix, x, axis, n, c->m->rms_norm_eps, 0, bora_init_ones());
}

/* One layer's self-attention over h (batch, position, embed) -> (batch, position, embed). */
static bora_tensor *self_attention(ctx *c, int64_t l, bora_tensor *h)
{
    const bora_graph_api *A = c->d.A;
    const llama *m = c->m;
    bora_graph *g = c->d.g;
    int64_t E = m->hidden_size, H = m->num_attention_heads, KV = m->num_key_value_heads,
            hd = m->head_dim;
    char p[128], n[160];
    snprintf(p, sizeof p, "model.layers.%lld.self_attn", (long long)l);
    /* K and V keep their own head axis (kv_heads), which GQA reads per group of query heads */
    const char *qo[3] = {"q_proj", "k_proj", "v_proj"};
    const char *ho[3] = {"heads", "kv_heads", "kv_heads"};
    int64_t hn[3] = {H, KV, KV};
    bora_tensor *t[3];
    for (int i = 0; i < 3; i++) {
        snprintf(n, sizeof n, "%s.%s", p, qo[i]);
        t[i] = decoder_linear(&c->d, n, h, "embed", E, "proj", hn[i] * hd, m->qkv_bias, 0);
        bora_axis parts[2] = {{ho[i], hn[i]}, {"head_dim", hd}};
        t[i] = A->split(g, t[i], "proj", 2, parts); /* (batch, position, heads, head_dim) */
    }
    bora_tensor *q = t[0], *k = t[1], *v = t[2];
    if (m->qk_norm) { /* Qwen3: one RMSNorm over head_dim, shared by the heads */
        snprintf(n, sizeof n, "%s.q_norm", p);
        q = rms(c, n, q, "head_dim", hd);
        snprintf(n, sizeof n, "%s.k_norm", p);
        k = rms(c, n, k, "head_dim", hd);
    }
    q = decoder_rope(&c->d, q, &m->rope);
    k = bora_rename(g, decoder_rope(&c->d, k, &m->rope), "position", "key_position");
    v = bora_rename(g, v, "position", "key_position");
    int64_t W = m->slides[l] ? m->sliding_window : 0;
    bora_attention_opts ao = {.struct_size = sizeof ao,
                              .causal = 1,
                              .scale = 1.0 / sqrt((double)hd),
                              .segment_ids = c->d.seg,
                              .key_length = c->d.mode == BORA_MODE_DECODE ? c->d.key_length : NULL,
                              .head_axis = "heads",
                              .kv_head_axis = "kv_heads",
                              .sliding_window = W};
    decoder_kv_cache(&c->d, p, &k, &v, KV, hd, W, &ao);
    bora_tensor *att = A->attention(g, q, k, v, &ao);
    const char *merge[] = {"heads", "head_dim"};
    att = A->merge(g, att, 2, merge, "attn");
    snprintf(n, sizeof n, "%s.o_proj", p);
    att = decoder_linear(&c->d, n, att, "attn", H * hd, "embed_out", E, m->o_bias, 0);
    return bora_rename(g, att, "embed_out", "embed");
}

/* SwiGLU: down_proj(silu(gate_proj(h)) · up_proj(h)). */
static bora_tensor *mlp(ctx *c, int64_t l, bora_tensor *h)
{
    const llama *m = c->m;
    int64_t E = m->hidden_size, F = m->intermediate_size;
    char n[160];
    snprintf(n, sizeof n, "model.layers.%lld.mlp.gate_proj", (long long)l);
    bora_tensor *gate =
        decoder_linear(&c->d, n, h, "embed", E, "mlp", F, m->mlp_bias, BORA_OP_SILU);
    snprintf(n, sizeof n, "model.layers.%lld.mlp.up_proj", (long long)l);
    bora_tensor *up = decoder_linear(&c->d, n, h, "embed", E, "mlp", F, m->mlp_bias, 0);
    snprintf(n, sizeof n, "model.layers.%lld.mlp.down_proj", (long long)l);
    bora_tensor *y = decoder_linear(&c->d, n, bora_mul(c->d.g, gate, up), "mlp", F, "embed_out", E,
                                    m->mlp_bias, 0);
    return bora_rename(c->d.g, y, "embed_out", "embed");
}

static bora_status llama_build(bora_model *model, bora_graph *g, int32_t mode, bora_tensor **out)
{
    const llama *m = (const llama *)model;
    const bora_graph_api *A = g->api;
    const char *type = llama_kind_name[m->kind];
    if (mode != BORA_MODE_TRAIN && mode != BORA_MODE_EVAL && mode != BORA_MODE_PREFILL &&
        mode != BORA_MODE_DECODE)
        return m->h->fail(m->h, BORA_ERR_UNSUPPORTED, "%s has no graph for mode %d", type, mode);
    if (A->struct_size < offsetof(bora_graph_api, rope) + sizeof(void *))
        return m->h->fail(m->h, BORA_ERR_UNSUPPORTED,
                          "%s needs a host with rms_norm and rope (ABI 1.9)", type);
    int ring = 0;
    for (int64_t l = 0; l < m->num_hidden_layers; l++)
        ring |= m->slides[l] && m->sliding_window < m->seq_len;
    ctx c = {.m = m};
    decoder_inputs(&c.d, g, mode, m->seq_len, ring, m->initializer_range);
    int64_t E = m->hidden_size, V = m->vocab_size;
    bora_axis emb_a[2] = {{"vocab", V}, {"embed", E}};
    bora_tensor *embed = decoder_param(&c.d, "model.embed_tokens.weight", 2, emb_a,
                                       bora_init_normal(m->initializer_range), 0);
    /* (batch, position, embed): the residual stream */
    bora_tensor *x = bora_residual(g, A->embedding(g, embed, c.d.ids, "vocab"));
    for (int64_t l = 0; l < m->num_hidden_layers; l++) {
        if (m->gradient_checkpointing)
            x = A->checkpoint(g, x);
        char n[128];
        snprintf(n, sizeof n, "model.layers.%lld.input_layernorm", (long long)l);
        x = bora_residual(g, bora_add(g, x, self_attention(&c, l, rms(&c, n, x, "embed", E))));
        snprintf(n, sizeof n, "model.layers.%lld.post_attention_layernorm", (long long)l);
        x = bora_residual(g, bora_add(g, x, mlp(&c, l, rms(&c, n, x, "embed", E))));
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
    return decoder_output(&c.d, logits, out);
}

#define LLAMA_OPS(var, kind, create_fn, what)                                             \
    static const bora_model_ops var = {                                                   \
        .hdr = {sizeof(bora_model_ops), BORA_KIND_MODEL, #kind, what, llama_keys_##kind}, \
        .create = create_fn,                                                              \
        .build = llama_build,                                                             \
        .destroy = llama_destroy,                                                         \
        .hf_config = llama_hf_config,                                                     \
        .hf_keys = llama_hf_keys_##kind,                                                  \
    }

LLAMA_OPS(llama_ops, llama, llama_create,
          "Llama 1/2/3 as Hugging Face's LlamaForCausalLM (RMSNorm, RoPE, GQA, SwiGLU)");
LLAMA_OPS(mistral_ops, mistral, mistral_create,
          "Mistral as Hugging Face's MistralForCausalLM (Llama with a sliding window)");
LLAMA_OPS(qwen2_ops, qwen2, qwen2_create,
          "Qwen2 as Hugging Face's Qwen2ForCausalLM (Llama with q/k/v biases)");
LLAMA_OPS(qwen3_ops, qwen3, qwen3_create,
          "Qwen3 as Hugging Face's Qwen3ForCausalLM (Llama with RMSNorm on q and k per head)");

static bora_status llama_init(const bora_host *h)
{
    bora_status st = h->add(h, &llama_ops.hdr);
    if (st == BORA_OK)
        st = h->add(h, &mistral_ops.hdr);
    if (st == BORA_OK)
        st = h->add(h, &qwen2_ops.hdr);
    if (st == BORA_OK)
        st = h->add(h, &qwen3_ops.hdr);
    return st;
}

BORA_PLUGIN_DEFINE("llama", "0.1.0", llama_init, NULL)
