/* plugins/models/llama/config.c — the Llama family's keys, read and checked. Each type's keys
 * and defaults are Hugging Face's LlamaConfig, MistralConfig, Qwen2Config and Qwen3Config, so a
 * config.json's values copy into model: unchanged (and llama_hf_config writes them back).
 * Beyond those: seq_len (positions per training window and in the KV cache) and
 * gradient_checkpointing. */
#include "llama.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const llama_kind_name[LLAMA_KINDS] = {"llama", "mistral", "qwen2", "qwen3"};

/* The keys every type has; the defaults differ, so each type's table is written out. */
#define D_VOCAB \
    "tokens in the vocabulary (bora train and bora graph set it to the tokenizer's unless given)"
#define D_HIDDEN "width of the residual stream"
#define D_FF "width of the SwiGLU MLP (gate_proj, up_proj)"
#define D_LAYERS "decoder layers"
#define D_HEADS "query heads"
#define D_KV "key/value heads (grouped-query attention; must divide num_attention_heads)"
#define D_HEAD_DIM "width of each head"
#define D_MAXPOS "the context the model was made for (dynamic rope scaling grows past it)"
#define D_SEQ "positions per training window and in the KV cache (not a config.json key)"
#define D_INIT "standard deviation of the initial linear and embedding weights"
#define D_EPS "added to the mean square in RMSNorm (above 0)"
#define D_TIE "the LM head is the token embedding (no lm_head.weight)"
#define D_THETA "RoPE's base"
#define D_SCALING "RoPE scaling: {rope_type: linear|dynamic|llama3|yarn, factor, ...} or null"
#define D_ACT "MLP activation (silu: SwiGLU)"
#define D_CKPT "recompute each layer in the backward pass instead of keeping its activations"
#define D_WINDOW_Q "the window's size on the layers that slide"
#define D_USE_WIN "layers from max_window_layers on attend within sliding_window"
#define D_MAXWIN "the first layer that slides when use_sliding_window is true"
#define D_LTYPES "per layer full_attention or sliding_attention (wins over the two keys above)"

#define COMMON_HEAD(vocab, ff, kv, maxpos)                                                       \
    K_INT("seq_len", "2048", D_SEQ), K_INT("vocab_size", vocab, D_VOCAB),                        \
        K_INT("hidden_size", "4096", D_HIDDEN), K_INT("intermediate_size", ff, D_FF),            \
        K_INT("num_hidden_layers", "32", D_LAYERS), K_INT("num_attention_heads", "32", D_HEADS), \
        K_INT("num_key_value_heads", kv, D_KV), K_INT("max_position_embeddings", maxpos, D_MAXPOS)
#define COMMON_TAIL                                                                               \
    {"hidden_act", BORA_KEY_STRING, 0, "silu", D_ACT},                                            \
        K_FLOAT("initializer_range", "0.02", D_INIT), K_FLOAT("rms_norm_eps", "1e-6", D_EPS),     \
        K_BOOL("tie_word_embeddings", "false", D_TIE), K_FLOAT("rope_theta", "10000.0", D_THETA), \
        {"rope_scaling", BORA_KEY_MAP, 0, "null", D_SCALING},                                     \
        K_FLOAT("attention_dropout", "0.0", "attention dropout (only 0 is supported)"),           \
        K_BOOL("gradient_checkpointing", "false", D_CKPT)

const bora_key llama_keys_llama[] = {
    COMMON_HEAD("32000", "11008", "null", "2048"),
    K_INT("head_dim", "null", D_HEAD_DIM " (null: hidden_size / num_attention_heads)"),
    COMMON_TAIL,
    K_BOOL("attention_bias", "false", "biases on q_proj, k_proj, v_proj and o_proj"),
    K_BOOL("mlp_bias", "false", "biases on gate_proj, up_proj and down_proj"),
    {NULL, 0, 0, NULL, NULL},
};

const bora_key llama_keys_mistral[] = {
    COMMON_HEAD("32000", "14336", "8", "131072"),
    K_INT("head_dim", "null", D_HEAD_DIM " (null: hidden_size / num_attention_heads)"),
    COMMON_TAIL,
    K_INT("sliding_window", "4096",
          "each position attends to this many most recent positions, itself included (null: all)"),
    {NULL, 0, 0, NULL, NULL},
};

const bora_key llama_keys_qwen2[] = {
    COMMON_HEAD("151936", "22016", "32", "32768"),
    COMMON_TAIL,
    K_BOOL("use_sliding_window", "false", D_USE_WIN),
    K_INT("sliding_window", "4096", D_WINDOW_Q),
    K_INT("max_window_layers", "28", D_MAXWIN),
    {"layer_types", BORA_KEY_LIST, 0, "null", D_LTYPES},
    {NULL, 0, 0, NULL, NULL},
};

const bora_key llama_keys_qwen3[] = {
    COMMON_HEAD("151936", "22016", "32", "32768"),
    K_INT("head_dim", "128", D_HEAD_DIM " (independent of hidden_size)"),
    COMMON_TAIL,
    K_BOOL("attention_bias", "false", "biases on q_proj, k_proj, v_proj and o_proj"),
    K_BOOL("use_sliding_window", "false", D_USE_WIN),
    K_INT("sliding_window", "4096", D_WINDOW_Q),
    K_INT("max_window_layers", "28", D_MAXWIN),
    {"layer_types", BORA_KEY_LIST, 0, "null", D_LTYPES},
    {NULL, 0, 0, NULL, NULL},
};

/* How bora import reads each type's config.json: every key of the type's table copies
 * unchanged (the names are Hugging Face's), and the metadata transformers writes is ignored. */
#define HF_COMMON                                                                                  \
    HF_COPY("vocab_size"), HF_COPY("hidden_size"), HF_COPY("intermediate_size"),                   \
        HF_COPY("num_hidden_layers"), HF_COPY("num_attention_heads"),                              \
        HF_COPY("num_key_value_heads"), HF_COPY("max_position_embeddings"), HF_COPY("hidden_act"), \
        HF_COPY("initializer_range"), HF_COPY("rms_norm_eps"), HF_COPY("tie_word_embeddings"),     \
        HF_COPY("rope_theta"), HF_COPY("rope_scaling"), HF_COPY("attention_dropout"),              \
        {"partial_rotary_factor",                                                                  \
         BORA_HF_EXPECT,                                                                           \
         0,                                                                                        \
         NULL,                                                                                     \
         NULL,                                                                                     \
         "1",                                                                                      \
         "the four types rotate the whole head"},                                                  \
        {"pretraining_tp",                                                                         \
         BORA_HF_EXPECT,                                                                           \
         0,                                                                                        \
         NULL,                                                                                     \
         NULL,                                                                                     \
         "1",                                                                                      \
         "bora computes each projection whole (transformers' own default)"},                       \
        HF_METADATA

const bora_hf_key llama_hf_keys_llama[] = {
    HF_COMMON, HF_COPY("head_dim"), HF_COPY("attention_bias"), HF_COPY("mlp_bias"), HF_END,
};
const bora_hf_key llama_hf_keys_mistral[] = {
    HF_COMMON,
    HF_COPY("head_dim"),
    HF_COPY("sliding_window"),
    HF_END,
};
const bora_hf_key llama_hf_keys_qwen2[] = {
    HF_COMMON,
    /* Qwen2-VL's multimodal RoPE; text-only Qwen2.5 files say false */
    {"use_mrope", BORA_HF_EXPECT, 0, NULL, NULL, "false",
     "bora's qwen2 rotates by one position per token (Qwen2-VL's multimodal RoPE is not "
     "supported)"},
    HF_COPY("use_sliding_window"),
    HF_COPY("sliding_window"),
    HF_COPY("max_window_layers"),
    HF_COPY("layer_types"),
    HF_END,
};
const bora_hf_key llama_hf_keys_qwen3[] = {
    HF_COMMON,
    HF_COPY("head_dim"),
    HF_COPY("attention_bias"),
    HF_COPY("use_sliding_window"),
    HF_COPY("sliding_window"),
    HF_COPY("max_window_layers"),
    HF_COPY("layer_types"),
    HF_END,
};

const bora_key *const llama_keys[LLAMA_KINDS] = {llama_keys_llama, llama_keys_mistral,
                                                 llama_keys_qwen2, llama_keys_qwen3};

/* Which layers slide: Mistral all of them (when sliding_window is not null); Qwen2/3 those
 * from max_window_layers on when use_sliding_window, or as layer_types says. */
static bora_status read_window(const bora_host *h, const bora_config *cfg, llama *m)
{
    int64_t L = m->d.num_hidden_layers;
    bora_status st = decoder_read_window_size(h, cfg, llama_keys[m->kind], &m->d);
    if (st != BORA_OK)
        return st;
    if (m->kind == LLAMA) {
        m->d.sliding_window = 0;
        return BORA_OK;
    }
    int use = m->kind == MISTRAL;
    int64_t first = 0;
    if (m->kind != MISTRAL &&
        ((st = h->config_bool(h, cfg, "use_sliding_window", 0, &use)) != BORA_OK ||
         (st = h->config_int(h, cfg, "max_window_layers", 28, &first)) != BORA_OK))
        return st;
    /* Qwen2Config: sliding_window is None unless use_sliding_window, so without it no layer
     * slides, whatever layer_types says */
    if (!use)
        m->d.sliding_window = 0;
    for (int64_t l = 0; l < L; l++)
        m->d.slides[l] = m->d.sliding_window > 0 && l >= first;
    size_t n = 0;
    if (m->kind != MISTRAL &&
        (st = decoder_read_layer_types(h, cfg, L, m->d.slides, &n)) != BORA_OK)
        return st;
    for (size_t i = 0; i < n; i++)
        m->d.slides[i] = m->d.sliding_window > 0 && m->d.slides[i];
    int any = 0;
    for (int64_t l = 0; l < L; l++)
        any |= m->d.slides[l];
    if (!any)
        m->d.sliding_window = 0;
    return BORA_OK;
}

static bora_status read_config(const bora_host *h, const bora_config *cfg, void *model, int type)
{
    llama *m = model;
    llama_kind kind = m->kind = (llama_kind)type;
    bora_status st = decoder_read_dims(h, cfg, llama_keys[kind], llama_kind_name[kind], &m->d);
    if (st != BORA_OK)
        return st;
    const char *act = "silu";
    if ((st = h->config_string(h, cfg, "hidden_act", "silu", &act)) != BORA_OK)
        return st;
    if (strcmp(act, "silu") && strcmp(act, "swish"))
        return h->fail(h, BORA_ERR_CONFIG,
                       "model.hidden_act: '%s' is not supported; the Llama family's MLP is "
                       "SwiGLU (silu)",
                       act);
    /* biases: Llama's two keys; Qwen2 has q/k/v biases always; Qwen3 attention_bias */
    int attention_bias = 0, mlp_bias = 0;
    if (decoder_has_key(llama_keys[kind], "attention_bias") &&
        (st = h->config_bool(h, cfg, "attention_bias", 0, &attention_bias)) != BORA_OK)
        return st;
    if (decoder_has_key(llama_keys[kind], "mlp_bias") &&
        (st = h->config_bool(h, cfg, "mlp_bias", 0, &mlp_bias)))
        return st;
    m->qkv_bias = kind == QWEN2 || attention_bias;
    m->o_bias = attention_bias;
    m->mlp_bias = mlp_bias;
    m->qk_norm = kind == QWEN3;
    return read_window(h, cfg, m);
}

bora_status llama_create_kind(const bora_host *h, const bora_config *cfg, llama_kind kind,
                              bora_model **out)
{
    return decoder_model_create(h, cfg, sizeof(llama), kind, read_config, out);
}

/* ---- config.json ------------------------------------------------------------------------------ */

bora_status llama_hf_config(bora_model *model, char *buf, size_t cap, size_t *len)
{
    const llama *m = (const llama *)model;
    static const char *const arch[] = {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM",
                                       "Qwen3ForCausalLM"};
    decoder_json b = {buf, cap, 0};
    int64_t first = 0, before = 0; /* the last run of sliding layers; sliding layers before it */
    decoder_put(
        &b,
        "{\"architectures\": [\"%s\"], \"model_type\": \"%s\", \"vocab_size\": %lld, "
        "\"hidden_size\": %lld, \"intermediate_size\": %lld, \"num_hidden_layers\": %lld, "
        "\"num_attention_heads\": %lld, \"num_key_value_heads\": %lld, "
        "\"hidden_act\": \"silu\", \"max_position_embeddings\": %lld, "
        "\"initializer_range\": %.17g, \"rms_norm_eps\": %.17g, \"tie_word_embeddings\": %s, "
        "\"rope_theta\": %.17g, ",
        arch[m->kind], llama_kind_name[m->kind], (long long)m->d.vocab_size,
        (long long)m->d.hidden_size, (long long)m->d.intermediate_size,
        (long long)m->d.num_hidden_layers, (long long)m->d.num_attention_heads,
        (long long)m->d.num_key_value_heads, (long long)m->d.max_position_embeddings,
        m->d.initializer_range, m->d.rms_norm_eps, m->d.tie_word_embeddings ? "true" : "false",
        m->d.rope.theta);
    if (m->kind != QWEN2) /* Qwen2Config has no head_dim: hidden_size / heads */
        decoder_put(&b, "\"head_dim\": %lld, ", (long long)m->d.head_dim);
    decoder_put_rope_scaling(&b, &m->d.rope, m->d.rope_original_given);
    decoder_put(&b, ", \"attention_dropout\": 0.0");
    if (m->kind == LLAMA || m->kind == QWEN3)
        decoder_put(&b, ", \"attention_bias\": %s", m->o_bias ? "true" : "false");
    if (m->kind == LLAMA)
        decoder_put(&b, ", \"mlp_bias\": %s", m->mlp_bias ? "true" : "false");
    if (m->kind == MISTRAL) {
        if (m->d.sliding_window)
            decoder_put(&b, ", \"sliding_window\": %lld", (long long)m->d.sliding_window);
        else
            decoder_put(&b, ", \"sliding_window\": null");
    }
    if (m->kind == QWEN2 || m->kind == QWEN3) {
        int any = 0;
        for (int64_t l = 0; l < m->d.num_hidden_layers; l++)
            any |= m->d.slides[l];
        decoder_put(&b, ", \"use_sliding_window\": %s, \"sliding_window\": %lld",
                    any ? "true" : "false",
                    (long long)(m->d.sliding_window ? m->d.sliding_window : 4096));
        decoder_put(&b, ", \"layer_types\": [");
        for (int64_t l = 0; l < m->d.num_hidden_layers; l++)
            decoder_put(&b, "%s\"%s\"", l ? ", " : "",
                        m->d.slides[l] ? "sliding_attention" : "full_attention");
        /* the first sliding layer, for readers that predate layer_types (all of them from
         * there on slide, as the keys that made them say) */
        first = m->d.num_hidden_layers;
        while (first > 0 && m->d.slides[first - 1])
            first--;
        for (int64_t l = 0; l < first; l++)
            before += m->d.slides[l];
        decoder_put(&b, "], \"max_window_layers\": %lld", (long long)first);
    }
    decoder_put(&b, "}");
    /* with cap too small, *len is the size needed (sdk/bora/model.h) */
    *len = b.len;
    if (before && b.len < cap) /* once, on the call whose buffer holds it all */
        m->d.h->log(
            m->d.h, BORA_LOG_WARN,
            "%s: %lld sliding layer(s) come before the last run of sliding layers, which "
            "starts at layer %lld: config.json's layer_types says which layers slide "
            "(transformers' Qwen2/Qwen3 configs read it since 4.53), but readers older than "
            "layer_types slide only the layers from max_window_layers (%lld) on",
            llama_kind_name[m->kind], (long long)before, (long long)first, (long long)first);
    return BORA_OK;
}
