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

/* An RMSNorm (LlamaRMSNorm: a weight of ones) over axis (size n) named prefix.weight. */
static bora_tensor *rms(decoder_ctx *c, const llama *m, const char *prefix, bora_tensor *x,
                        const char *axis, int64_t n)
{
    return decoder_rms(c, prefix, x, axis, n, m->d.rms_norm_eps, 0, bora_init_ones());
}

/* One layer's self-attention over h (batch, position, embed) -> (batch, position, embed). */
static bora_tensor *self_attention(decoder_ctx *c, const llama *m, int64_t l, bora_tensor *h)
{
    bora_graph *g = c->g;
    int64_t hd = m->d.head_dim;
    char p[128], n[160];
    snprintf(p, sizeof p, "model.layers.%lld.self_attn", (long long)l);
    bora_tensor *q, *k, *v;
    decoder_qkv(c, &m->d, p, h, m->qkv_bias, &q, &k, &v);
    if (m->qk_norm) { /* Qwen3: one RMSNorm over head_dim, shared by the heads */
        snprintf(n, sizeof n, "%s.q_norm", p);
        q = rms(c, m, n, q, "head_dim", hd);
        snprintf(n, sizeof n, "%s.k_norm", p);
        k = rms(c, m, n, k, "head_dim", hd);
    }
    q = decoder_rope(c, q, &m->d.rope);
    k = bora_rename(g, decoder_rope(c, k, &m->d.rope), "position", "key_position");
    v = bora_rename(g, v, "position", "key_position");
    bora_attention_opts ao = {.struct_size = sizeof ao,
                              .causal = 1,
                              .scale = 1.0 / sqrt((double)hd),
                              .segment_ids = c->seg,
                              .key_length = c->mode == BORA_MODE_DECODE ? c->key_length : NULL,
                              .head_axis = "heads",
                              .kv_head_axis = "kv_heads",
                              .sliding_window = m->d.slides[l] ? m->d.sliding_window : 0};
    return decoder_attend(c, &m->d, p, q, k, v, &ao, m->o_bias);
}

static bora_status llama_build(bora_model *model, bora_graph *g, int32_t mode, bora_tensor **out)
{
    const llama *m = (const llama *)model;
    const bora_graph_api *A = g->api;
    bora_status st = decoder_check_build(&m->d, llama_kind_name[m->kind], g, mode);
    if (st != BORA_OK)
        return st;
    decoder_ctx c;
    decoder_inputs(&c, &m->d, g, mode);
    int64_t E = m->d.hidden_size;
    bora_tensor *embed = decoder_embed_table(&c, &m->d);
    /* (batch, position, embed): the residual stream */
    bora_tensor *x = bora_residual(g, A->embedding(g, embed, c.ids, "vocab"));
    for (int64_t l = 0; l < m->d.num_hidden_layers; l++) {
        if (m->d.gradient_checkpointing)
            x = A->checkpoint(g, x);
        char n[128];
        snprintf(n, sizeof n, "model.layers.%lld.input_layernorm", (long long)l);
        x = bora_residual(g,
                          bora_add(g, x, self_attention(&c, m, l, rms(&c, m, n, x, "embed", E))));
        snprintf(n, sizeof n, "model.layers.%lld.post_attention_layernorm", (long long)l);
        /* SwiGLU: down_proj(silu(gate_proj(h)) · up_proj(h)) */
        bora_tensor *y = decoder_gated_mlp(&c, &m->d, l, rms(&c, m, n, x, "embed", E), m->mlp_bias,
                                           BORA_OP_SILU);
        x = bora_residual(g, bora_add(g, x, y));
    }
    if (m->d.gradient_checkpointing)
        x = A->checkpoint(g, x);
    x = rms(&c, m, "model.norm", x, "embed", E);
    bora_tensor *logits = decoder_lm_head(&c, &m->d, x, embed); /* (batch, position, vocab) */
    return decoder_output(&c, logits, out);
}

#define LLAMA_OPS(var, kind, create_fn, what)                                             \
    static const bora_model_ops var = {                                                   \
        .hdr = {sizeof(bora_model_ops), BORA_KIND_MODEL, #kind, what, llama_keys_##kind}, \
        .create = create_fn,                                                              \
        .build = llama_build,                                                             \
        .destroy = decoder_model_free,                                                    \
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
