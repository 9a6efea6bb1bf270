/* plugins/models/gemma/config.c — the Gemma family's keys, read and checked. Each type's keys
 * and defaults are Hugging Face's GemmaConfig, Gemma2Config and Gemma3TextConfig, so a
 * config.json's values copy into model: unchanged (and gemma_hf_config writes them back).
 * Beyond those: seq_len (positions per training window and in the KV cache) and
 * gradient_checkpointing. */
#include "gemma.h"

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

const char *const gemma_kind_name[GEMMA_KINDS] = {"gemma", "gemma2", "gemma3"};

#define D_VOCAB \
    "tokens in the vocabulary (bora train and bora graph set it to the tokenizer's unless given)"
#define D_ACT                                                                                     \
    "MLP activation: gelu_pytorch_tanh, down_proj(gelu_tanh(gate_proj(x)) · up_proj(x)) (gelu, " \
    "which transformers computes with erf, is refused)"
#define D_SCALING "RoPE scaling: {rope_type: linear|dynamic|llama3|yarn, factor, ...} or null"
#define D_QPAS "the attention scale is query_pre_attn_scalar^-½"
#define D_WINDOW "the window's size on the sliding layers: position i sees keys i - W < j <= i"
#define D_LTYPES "per layer full_attention or sliding_attention (null: the type's pattern)"

#define HEAD(vocab, hidden, ff, layers, heads, kv, maxpos)                                   \
    K_INT("seq_len", "2048",                                                                 \
          "positions per training window and in the KV cache (not a config.json key)"),      \
        K_INT("vocab_size", vocab, D_VOCAB),                                                 \
        K_INT("hidden_size", hidden, "width of the residual stream"),                        \
        K_INT("intermediate_size", ff, "width of the gated MLP (gate_proj, up_proj)"),       \
        K_INT("num_hidden_layers", layers, "decoder layers"),                                \
        K_INT("num_attention_heads", heads, "query heads"),                                  \
        K_INT("num_key_value_heads", kv,                                                     \
              "key/value heads (grouped-query attention; must divide num_attention_heads)"), \
        K_INT("head_dim", "256", "width of each head (independent of hidden_size)"),         \
        K_INT("max_position_embeddings", maxpos,                                             \
              "the context the model was made for (dynamic rope scaling grows past it)")
#define TAIL(theta)                                                                       \
    K_FLOAT("initializer_range", "0.02",                                                  \
            "standard deviation of the initial linear and embedding weights"),            \
        K_FLOAT("rms_norm_eps", "1e-6", "added to the mean square in RMSNorm (above 0)"), \
        K_BOOL("tie_word_embeddings", "true",                                             \
               "the LM head is the token embedding (false: "                              \
               "lm_head.weight)"),                                                        \
        K_FLOAT("rope_theta", theta, "RoPE's base"),                                      \
        {"rope_scaling", BORA_KEY_MAP, 0, "null", D_SCALING},                             \
        K_BOOL("attention_bias", "false", "biases on q_proj, k_proj, v_proj and o_proj"), \
        K_FLOAT("attention_dropout", "0.0", "attention dropout (only 0 is supported)"),   \
        K_BOOL("gradient_checkpointing", "false",                                         \
               "recompute each layer in the backward pass instead of keeping its activations")

/* Gemma 2's keys, which Gemma 3 has too (the caps' defaults differ) */
#define GEMMA23(pattern, final_cap, attn_cap)                                                      \
    K_FLOAT("query_pre_attn_scalar", "256", D_QPAS), K_INT("sliding_window", "4096", D_WINDOW),    \
        {"layer_types", BORA_KEY_LIST, 0, "null", D_LTYPES pattern},                               \
        K_FLOAT("final_logit_softcapping", final_cap, "logits = c·tanh(logits / c) (null: none)"), \
        K_FLOAT("attn_logit_softcapping", attn_cap,                                                \
                "attention scores = c·tanh(scores / c) before the masks (null: none)")

const bora_key gemma_keys_gemma[] = {
    HEAD("256000", "3072", "24576", "28", "16", "16", "8192"),
    {"hidden_act", BORA_KEY_STRING, 0, "gelu_pytorch_tanh", D_ACT},
    TAIL("10000.0"),
    {NULL, 0, 0, NULL, NULL},
};

const bora_key gemma_keys_gemma2[] = {
    HEAD("256000", "2304", "9216", "26", "8", "4", "8192"),
    {"hidden_activation", BORA_KEY_STRING, 0, "gelu_pytorch_tanh", D_ACT},
    TAIL("10000.0"),
    GEMMA23(" (gemma2: layers 0, 2, 4, ... slide)", "30.0", "50.0"),
    {NULL, 0, 0, NULL, NULL},
};

const bora_key gemma_keys_gemma3[] = {
    HEAD("262208", "2304", "9216", "26", "8", "4", "131072"),
    {"hidden_activation", BORA_KEY_STRING, 0, "gelu_pytorch_tanh", D_ACT},
    TAIL("1000000.0"),
    GEMMA23(" (gemma3: sliding_window_pattern's)", "null", "null"),
    K_INT("sliding_window_pattern", "6",
          "without layer_types, layer i is global where (i + 1) % pattern == 0, else it slides"),
    K_FLOAT("rope_local_base_freq", "10000.0", "RoPE's base on the sliding layers (no scaling)"),
    K_BOOL("use_bidirectional_attention", "false",
           "EmbeddingGemma's bidirectional attention (only false is supported)"),
    {NULL, 0, 0, NULL, NULL},
};

const bora_key *const gemma_keys[GEMMA_KINDS] = {gemma_keys_gemma, gemma_keys_gemma2,
                                                 gemma_keys_gemma3};

/* How bora import reads each type's config.json: every key of the type's table copies unchanged
 * (the names are Hugging Face's); the metadata transformers writes is ignored. */
#define HF_COMMON                                                                                \
    HF_COPY("vocab_size"), HF_COPY("hidden_size"), HF_COPY("intermediate_size"),                 \
        HF_COPY("num_hidden_layers"), HF_COPY("num_attention_heads"),                            \
        HF_COPY("num_key_value_heads"), HF_COPY("head_dim"), HF_COPY("max_position_embeddings"), \
        HF_COPY("initializer_range"), HF_COPY("rms_norm_eps"), HF_COPY("tie_word_embeddings"),   \
        HF_COPY("rope_theta"), HF_COPY("rope_scaling"), HF_COPY("attention_bias"),               \
        HF_COPY("attention_dropout"), HF_METADATA
/* Gemma 2 and 3 read hidden_activation; their config.json files carry hidden_act too */
#define HF_ACT_UNUSED                                                                          \
    {                                                                                          \
        "hidden_act", BORA_HF_NOTE, 0, NULL, NULL, "\"gelu_pytorch_tanh\"",                    \
            "transformers' Gemma 2 and Gemma 3 read hidden_activation; hidden_act is not used" \
    }

const bora_hf_key gemma_hf_keys_gemma[] = {
    HF_COMMON,
    HF_COPY("hidden_act"),
    {"hidden_activation", BORA_HF_NOTE, 0, NULL, NULL, "null",
     "transformers' GemmaMLP reads hidden_act since 4.48 (hidden_activation is not used)"},
    HF_END,
};
const bora_hf_key gemma_hf_keys_gemma2[] = {
    HF_COMMON,
    HF_COPY("hidden_activation"),
    HF_ACT_UNUSED,
    HF_COPY("query_pre_attn_scalar"),
    HF_COPY("sliding_window"),
    HF_COPY("layer_types"),
    HF_COPY("final_logit_softcapping"),
    HF_COPY("attn_logit_softcapping"),
    HF_META("cache_implementation"),
    HF_END,
};
const bora_hf_key gemma_hf_keys_gemma3[] = {
    HF_COMMON,
    HF_COPY("hidden_activation"),
    HF_ACT_UNUSED,
    HF_COPY("query_pre_attn_scalar"),
    HF_COPY("sliding_window"),
    HF_COPY("layer_types"),
    HF_COPY("sliding_window_pattern"),
    /* written by transformers beside sliding_window_pattern, from which alone it builds
     * layer_types */
    HF_META("_sliding_window_pattern"),
    HF_COPY("rope_local_base_freq"),
    HF_COPY("final_logit_softcapping"),
    HF_COPY("attn_logit_softcapping"),
    HF_COPY("use_bidirectional_attention"),
    HF_META("cache_implementation"),
    /* a Gemma3ForConditionalGeneration folder: its config.json nests the text model */
    {"text_config", BORA_HF_EXPECT, 0, NULL, NULL, "null",
     "that is a multimodal Gemma 3 (model_type gemma3, Gemma3ForConditionalGeneration); bora's "
     "gemma3 is the text model alone: import a folder whose config.json is the text model's "
     "(model_type gemma3_text, Gemma3ForCausalLM)"},
    {"vision_config", BORA_HF_EXPECT, 0, NULL, NULL, "null",
     "bora's gemma3 is the text model alone (Gemma3ForCausalLM, model_type gemma3_text)"},
    HF_END,
};

/* A soft-cap: the table's default where absent, none (0) where null, else above 0. */
static bora_status read_cap(const bora_host *h, const bora_config *cfg, gemma_kind kind,
                            const char *key, double *out)
{
    double def = decoder_key_float(gemma_keys[kind], key); /* a null default reads as 0 */
    if (!h->config_child(h, cfg, key)) {
        *out = isnan(def) ? 0 : def;
        return BORA_OK;
    }
    bora_status st = h->config_float(h, cfg, key, NAN, out); /* null: NaN */
    if (st != BORA_OK)
        return st;
    if (isnan(*out)) {
        *out = 0;
        return BORA_OK;
    }
    /* 0 is not "none" (transformers would divide by it), and c and 1/c must be normal f32 */
    if (!(*out >= FLT_MIN && *out <= FLT_MAX))
        return h->fail(h, BORA_ERR_CONFIG,
                       "model.%s: %g; give a cap above 0 (%g to %g), or null for none", key, *out,
                       (double)FLT_MIN, (double)FLT_MAX);
    return BORA_OK;
}

/* The activation: only the tanh form of GELU, which every Gemma was trained with. */
static bora_status read_activation(const bora_host *h, const bora_config *cfg, gemma_kind kind)
{
    const char *key = kind == GEMMA ? "hidden_act" : "hidden_activation";
    const char *act = NULL;
    bora_status st = h->config_string(h, cfg, key, "gelu_pytorch_tanh", &act);
    if (st != BORA_OK)
        return st;
    if (!strcmp(act, "gelu_pytorch_tanh"))
        return BORA_OK;
    if (!strcmp(act, "gelu"))
        return h->fail(h, BORA_ERR_CONFIG,
                       "model.%s: 'gelu' is the exact (erf) GELU in transformers, which Gemma was "
                       "not trained with (Gemma 1.0's config.json says gelu; transformers >= "
                       "4.48 computes erf for it); give gelu_pytorch_tanh",
                       key);
    return h->fail(h, BORA_ERR_CONFIG,
                   "model.%s: '%s' is not supported; Gemma's MLP is GeGLU with "
                   "gelu_pytorch_tanh",
                   key, act);
}

/* Which layers slide: gemma none; gemma2 every other (0, 2, ...); gemma3 all but every
 * sliding_window_pattern-th; layer_types wins where given. */
static bora_status read_window(const bora_host *h, const bora_config *cfg, gemma *m)
{
    int64_t L = m->d.num_hidden_layers;
    if (m->kind == GEMMA)
        return BORA_OK;
    bora_status st = decoder_read_window_size(h, cfg, gemma_keys[m->kind], &m->d);
    if (st != BORA_OK)
        return st;
    int64_t pattern = 2; /* Gemma2Config: "sliding_attention" if (i + 1) % 2 */
    if (m->kind == GEMMA3) {
        if ((st = h->config_int(h, cfg, "sliding_window_pattern", 6, &pattern)) != BORA_OK)
            return st;
        if (pattern < 1)
            return h->fail(h, BORA_ERR_CONFIG,
                           "model.sliding_window_pattern: %lld; give 1 or more (1: no layer "
                           "slides)",
                           (long long)pattern);
        m->sliding_window_pattern = pattern;
    }
    for (int64_t l = 0; l < L; l++)
        m->d.slides[l] = (l + 1) % pattern != 0;
    size_t n = 0;
    return decoder_read_layer_types(h, cfg, L, m->d.slides, &n);
}

static bora_status read_config(const bora_host *h, const bora_config *cfg, void *model, int type)
{
    gemma *m = model;
    gemma_kind kind = m->kind = (gemma_kind)type;
    bora_status st = decoder_read_dims(h, cfg, gemma_keys[kind], gemma_kind_name[kind], &m->d);
    if (st != BORA_OK || (st = read_activation(h, cfg, kind)) != BORA_OK ||
        (st = h->config_bool(h, cfg, "attention_bias", 0, &m->attention_bias)) != BORA_OK)
        return st;
    /* Gemma 1 scales by head_dim^-½; Gemma 2 and 3 by query_pre_attn_scalar^-½ */
    m->query_pre_attn_scalar = (double)m->d.head_dim;
    if (kind != GEMMA) {
        if ((st = h->config_float(h, cfg, "query_pre_attn_scalar", 256,
                                  &m->query_pre_attn_scalar)) != BORA_OK ||
            (st = read_cap(h, cfg, kind, "final_logit_softcapping", &m->final_logit_softcapping)) !=
                BORA_OK ||
            (st = read_cap(h, cfg, kind, "attn_logit_softcapping", &m->attn_logit_softcapping)) !=
                BORA_OK)
            return st;
        /* Gemma3Attention keeps the key but never passes it to attention: read, written back on
         * export, not applied, as transformers computes */
        if (kind == GEMMA3 && m->attn_logit_softcapping > 0)
            h->log(h, BORA_LOG_WARN,
                   "model.attn_logit_softcapping: %g is not applied: transformers' Gemma 3 "
                   "attention never soft-caps its scores (gemma2 does)",
                   m->attn_logit_softcapping);
        if (!(m->query_pre_attn_scalar > 0 && isfinite(m->query_pre_attn_scalar)))
            return h->fail(h, BORA_ERR_CONFIG,
                           "model.query_pre_attn_scalar: %g; give a number above 0 (the scale "
                           "is its -½ power)",
                           m->query_pre_attn_scalar);
    }
    m->rope_local = m->d.rope;
    if (kind == GEMMA3) {
        int bidirectional = 0;
        if ((st = h->config_bool(h, cfg, "use_bidirectional_attention", 0, &bidirectional)))
            return st;
        if (bidirectional)
            return h->fail(h, BORA_ERR_CONFIG,
                           "model.use_bidirectional_attention: true (EmbeddingGemma's encoder) "
                           "is not supported; bora's gemma3 is the causal language model "
                           "(give false)");
        /* the sliding layers' rotary_emb_local: default RoPE with its own base */
        m->rope_local = bora_rope_spec_default();
        m->rope_local.rotary_dims = m->d.head_dim;
        if ((st = h->config_float(h, cfg, "rope_local_base_freq", 10000.0, &m->rope_local.theta)) !=
            BORA_OK)
            return st;
        if (!(m->rope_local.theta > 0 && isfinite(m->rope_local.theta)))
            return h->fail(h, BORA_ERR_CONFIG,
                           "model.rope_local_base_freq: %g is not a positive number",
                           m->rope_local.theta);
    }
    return read_window(h, cfg, m);
}

bora_status gemma_create_kind(const bora_host *h, const bora_config *cfg, gemma_kind kind,
                              bora_model **out)
{
    return decoder_model_create(h, cfg, sizeof(gemma), kind, read_config, out);
}

/* ---- config.json ------------------------------------------------------------------------------ */

/* A soft-cap's value, or null. */
static void put_cap(decoder_json *b, const char *key, double c)
{
    if (c > 0)
        decoder_put(b, ", \"%s\": %.17g", key, c);
    else
        decoder_put(b, ", \"%s\": null", key);
}

bora_status gemma_hf_config(bora_model *model, char *buf, size_t cap, size_t *len)
{
    const gemma *m = (const gemma *)model;
    static const char *const arch[] = {"GemmaForCausalLM", "Gemma2ForCausalLM",
                                       "Gemma3ForCausalLM"};
    static const char *const model_type[] = {"gemma", "gemma2", "gemma3_text"};
    decoder_json b = {buf, cap, 0};
    decoder_put(&b,
                "{\"architectures\": [\"%s\"], \"model_type\": \"%s\", \"vocab_size\": %lld, "
                "\"hidden_size\": %lld, \"intermediate_size\": %lld, \"num_hidden_layers\": %lld, "
                "\"num_attention_heads\": %lld, \"num_key_value_heads\": %lld, "
                "\"head_dim\": %lld, \"%s\": \"gelu_pytorch_tanh\", "
                "\"max_position_embeddings\": %lld, \"initializer_range\": %.17g, "
                "\"rms_norm_eps\": %.17g, \"tie_word_embeddings\": %s, \"rope_theta\": %.17g, ",
                arch[m->kind], model_type[m->kind], (long long)m->d.vocab_size,
                (long long)m->d.hidden_size, (long long)m->d.intermediate_size,
                (long long)m->d.num_hidden_layers, (long long)m->d.num_attention_heads,
                (long long)m->d.num_key_value_heads, (long long)m->d.head_dim,
                m->kind == GEMMA ? "hidden_act" : "hidden_activation",
                (long long)m->d.max_position_embeddings, m->d.initializer_range, m->d.rms_norm_eps,
                m->d.tie_word_embeddings ? "true" : "false", m->d.rope.theta);
    decoder_put_rope_scaling(&b, &m->d.rope, m->d.rope_original_given);
    decoder_put(&b, ", \"attention_bias\": %s, \"attention_dropout\": 0.0",
                m->attention_bias ? "true" : "false");
    if (m->kind != GEMMA) {
        decoder_put(&b, ", \"query_pre_attn_scalar\": %.17g", m->query_pre_attn_scalar);
        if (m->d.sliding_window)
            decoder_put(&b, ", \"sliding_window\": %lld", (long long)m->d.sliding_window);
        else
            decoder_put(&b, ", \"sliding_window\": null");
        put_cap(&b, "final_logit_softcapping", m->final_logit_softcapping);
        put_cap(&b, "attn_logit_softcapping", m->attn_logit_softcapping);
        /* transformers before layer_types (4.53) read the pattern; later ones the list */
        decoder_put(&b, ", \"layer_types\": [");
        for (int64_t l = 0; l < m->d.num_hidden_layers; l++)
            decoder_put(&b, "%s\"%s\"", l ? ", " : "",
                        m->d.slides[l] ? "sliding_attention" : "full_attention");
        decoder_put(&b, "]");
    }
    if (m->kind == GEMMA3)
        decoder_put(&b,
                    ", \"rope_local_base_freq\": %.17g, \"sliding_window_pattern\": %lld, "
                    "\"use_bidirectional_attention\": false",
                    m->rope_local.theta, (long long)m->sliding_window_pattern);
    decoder_put(&b, "}");
    /* with cap too small, *len is the size needed (sdk/bora/model.h) */
    *len = b.len;
    return BORA_OK;
}
