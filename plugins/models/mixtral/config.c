/* plugins/models/mixtral/config.c — Mixtral's keys, read and checked. The keys and defaults are
 * Hugging Face's MixtralConfig, so a config.json's values copy into model: unchanged (and
 * mixtral_hf_config writes them back). Beyond those: seq_len (positions per training window and
 * in the KV cache), gradient_checkpointing and router_z_loss_coef (export leaves it out, with a
 * warning). */
#include "mixtral.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

const bora_key mixtral_keys[] = {
    K_INT("seq_len", "2048",
          "positions per training window and in the KV cache (not a "
          "config.json key)"),
    K_INT("vocab_size", "32000",
          "tokens in the vocabulary (bora train and bora graph set it to the tokenizer's unless "
          "given)"),
    K_INT("hidden_size", "4096", "width of the residual stream"),
    K_INT("intermediate_size", "14336", "width of each expert's SwiGLU MLP (w1, w3)"),
    K_INT("num_hidden_layers", "32", "decoder layers"),
    K_INT("num_attention_heads", "32", "query heads"),
    K_INT("num_key_value_heads", "8",
          "key/value heads (grouped-query attention; must divide num_attention_heads; null: "
          "num_attention_heads)"),
    K_INT("head_dim", "null", "width of each head (null: hidden_size / num_attention_heads)"),
    {"hidden_act", BORA_KEY_STRING, 0, "silu", "the experts' activation (silu: SwiGLU)"},
    K_INT("max_position_embeddings", "131072",
          "the context the model was made for (dynamic rope scaling grows past it)"),
    K_FLOAT("initializer_range", "0.02",
            "standard deviation of the initial linear and embedding weights"),
    K_FLOAT("rms_norm_eps", "1e-5", "added to the mean square in RMSNorm (above 0)"),
    K_BOOL("tie_word_embeddings", "false",
           "the LM head is the token embedding (no lm_head.weight)"),
    K_FLOAT("rope_theta", "1000000.0", "RoPE's base"),
    {"rope_scaling", BORA_KEY_MAP, 0, "null",
     "RoPE scaling: {rope_type: linear|dynamic|llama3|yarn, factor, ...} or null"},
    K_INT("sliding_window", "null",
          "each position attends to this many most recent positions, itself included (null: "
          "all)"),
    K_FLOAT("attention_dropout", "0.0", "attention dropout (only 0 is supported)"),
    K_INT("num_local_experts", "8", "experts in each layer's sparse MoE block"),
    K_INT("num_experts_per_tok", "2",
          "experts each token is routed to (the router's top k, 1 to num_local_experts)"),
    K_BOOL("output_router_logits", "false",
           "train: add the load-balancing loss, router_aux_loss_coef times transformers' "
           "load_balancing_loss_func, to the mean loss"),
    K_FLOAT("router_aux_loss_coef", "0.001", "the load-balancing loss's weight"),
    K_FLOAT("router_z_loss_coef", "0.0",
            "train: add ST-MoE's router z-loss times this to the mean loss (0: off; not a "
            "config.json key: export leaves it out, with a warning)"),
    K_FLOAT("router_jitter_noise", "0.0",
            "multiplicative noise on the router's input in training (only 0 is supported)"),
    K_BOOL("gradient_checkpointing", "false",
           "recompute each layer in the backward pass instead of keeping its activations"),
    {NULL, 0, 0, NULL, NULL},
};

/* bora import: every key copies unchanged (the names are Hugging Face's); the metadata
 * transformers writes is ignored. */
const bora_hf_key mixtral_hf_keys[] = {
    HF_COPY("vocab_size"),
    HF_COPY("hidden_size"),
    HF_COPY("intermediate_size"),
    HF_COPY("num_hidden_layers"),
    HF_COPY("num_attention_heads"),
    HF_COPY("num_key_value_heads"),
    HF_COPY("head_dim"),
    HF_COPY("hidden_act"),
    HF_COPY("max_position_embeddings"),
    HF_COPY("initializer_range"),
    HF_COPY("rms_norm_eps"),
    HF_COPY("tie_word_embeddings"),
    HF_COPY("rope_theta"),
    HF_COPY("rope_scaling"),
    HF_COPY("sliding_window"),
    HF_COPY("attention_dropout"),
    HF_COPY("num_local_experts"),
    HF_COPY("num_experts_per_tok"),
    HF_COPY("output_router_logits"),
    HF_COPY("router_aux_loss_coef"),
    HF_COPY("router_jitter_noise"),
    HF_METADATA,
    HF_END,
};

/* The experts' weights, experts x 3 x hidden x intermediate, must stay below 2^62. */
static int experts_fit(int64_t E, int64_t hidden, int64_t ff)
{
    const int64_t cap = (int64_t)1 << 62;
    return E <= cap / 3 && hidden <= cap / (3 * E) && ff <= cap / (3 * E * hidden);
}

static bora_status read_config(const bora_host *h, const bora_config *cfg, void *model, int kind)
{
    (void)kind;
    mixtral *m = model;
    bora_status st = decoder_read_dims(h, cfg, mixtral_keys, "mixtral", &m->d);
    if (st != BORA_OK)
        return st;
    const char *act = "silu";
    if ((st = h->config_string(h, cfg, "hidden_act", "silu", &act)) != BORA_OK)
        return st;
    if (strcmp(act, "silu") && strcmp(act, "swish"))
        return h->fail(h, BORA_ERR_CONFIG,
                       "model.hidden_act: '%s' is not supported; Mixtral's experts are SwiGLU "
                       "(silu)",
                       act);
    double jitter = 0;
    if ((st = h->config_int(h, cfg, "num_local_experts", 8, &m->num_local_experts)) ||
        (st = h->config_int(h, cfg, "num_experts_per_tok", 2, &m->num_experts_per_tok)) ||
        (st = h->config_bool(h, cfg, "output_router_logits", 0, &m->output_router_logits)) ||
        (st = h->config_float(h, cfg, "router_aux_loss_coef", 0.001, &m->router_aux_loss_coef)) ||
        (st = h->config_float(h, cfg, "router_z_loss_coef", 0.0, &m->router_z_loss_coef)) ||
        (st = h->config_float(h, cfg, "router_jitter_noise", 0.0, &jitter)))
        return st;
    int64_t E = m->num_local_experts, k = m->num_experts_per_tok;
    /* the routing keys (token x k + choice) and the top-k's elements are i32 */
    if (E < 1 || E > INT32_MAX)
        return h->fail(h, BORA_ERR_CONFIG,
                       "model.num_local_experts: %lld; give at least 1 expert (below 2^31)",
                       (long long)E);
    if (k < 1 || k > E)
        return h->fail(h, BORA_ERR_CONFIG,
                       "model.num_experts_per_tok: %lld; give 1 to num_local_experts (%lld)",
                       (long long)k, (long long)E);
    if (!experts_fit(E, m->d.hidden_size, m->d.intermediate_size))
        return h->fail(h, BORA_ERR_CONFIG,
                       "model.num_local_experts %lld x 3 x hidden_size %lld x intermediate_size "
                       "%lld passes 2^62",
                       (long long)E, (long long)m->d.hidden_size,
                       (long long)m->d.intermediate_size);
    if (!isfinite(m->router_aux_loss_coef))
        return h->fail(h, BORA_ERR_CONFIG, "model.router_aux_loss_coef: %g is not a number",
                       m->router_aux_loss_coef);
    if (!isfinite(m->router_z_loss_coef) || m->router_z_loss_coef < 0)
        return h->fail(h, BORA_ERR_CONFIG,
                       "model.router_z_loss_coef: %g; give 0 (off) or a positive weight",
                       m->router_z_loss_coef);
    if (jitter != 0)
        return h->fail(h, BORA_ERR_CONFIG,
                       "model.router_jitter_noise: %g; bora routes without jitter (give 0)",
                       jitter);
    /* Mistral's window: every layer slides when sliding_window is not null */
    if ((st = decoder_read_window_size(h, cfg, mixtral_keys, &m->d)) != BORA_OK)
        return st;
    for (int64_t l = 0; l < m->d.num_hidden_layers; l++)
        m->d.slides[l] = m->d.sliding_window > 0;
    return BORA_OK;
}

bora_status mixtral_create(const bora_host *h, const bora_config *cfg, bora_model **out)
{
    return decoder_model_create(h, cfg, sizeof(mixtral), 0, read_config, out);
}

/* ---- config.json ------------------------------------------------------------------------------ */

bora_status mixtral_hf_config(bora_model *model, char *buf, size_t cap, size_t *len)
{
    const mixtral *m = (const mixtral *)model;
    decoder_json b = {buf, cap, 0};
    /* bora's own training key: the weights export unchanged (inference has no z-loss), but
     * transformers would fine-tune them without it */
    if (m->router_z_loss_coef != 0 && cap > 0)
        m->d.h->log(m->d.h, BORA_LOG_WARN,
                    "model.router_z_loss_coef %g is not written to config.json: Hugging Face's "
                    "MixtralConfig has no router z-loss, so transformers trains the exported "
                    "model without it (its outputs are the same)",
                    m->router_z_loss_coef);
    decoder_put(&b,
                "{\"architectures\": [\"MixtralForCausalLM\"], \"model_type\": \"mixtral\", "
                "\"vocab_size\": %lld, \"hidden_size\": %lld, \"intermediate_size\": %lld, "
                "\"num_hidden_layers\": %lld, \"num_attention_heads\": %lld, "
                "\"num_key_value_heads\": %lld, \"head_dim\": %lld, \"hidden_act\": \"silu\", "
                "\"max_position_embeddings\": %lld, \"initializer_range\": %.17g, "
                "\"rms_norm_eps\": %.17g, \"tie_word_embeddings\": %s, \"rope_theta\": %.17g, ",
                (long long)m->d.vocab_size, (long long)m->d.hidden_size,
                (long long)m->d.intermediate_size, (long long)m->d.num_hidden_layers,
                (long long)m->d.num_attention_heads, (long long)m->d.num_key_value_heads,
                (long long)m->d.head_dim, (long long)m->d.max_position_embeddings,
                m->d.initializer_range, m->d.rms_norm_eps,
                m->d.tie_word_embeddings ? "true" : "false", m->d.rope.theta);
    decoder_put_rope_scaling(&b, &m->d.rope, m->d.rope_original_given);
    if (m->d.sliding_window)
        decoder_put(&b, ", \"sliding_window\": %lld", (long long)m->d.sliding_window);
    else
        decoder_put(&b, ", \"sliding_window\": null");
    decoder_put(&b,
                ", \"attention_dropout\": 0.0, \"num_local_experts\": %lld, "
                "\"num_experts_per_tok\": %lld, \"output_router_logits\": %s, "
                "\"router_aux_loss_coef\": %.17g, \"router_jitter_noise\": 0.0}",
                (long long)m->num_local_experts, (long long)m->num_experts_per_tok,
                m->output_router_logits ? "true" : "false", m->router_aux_loss_coef);
    /* with cap too small, *len is the size needed (sdk/bora/model.h) */
    *len = b.len;
    return BORA_OK;
}
