/* plugins/models/whisper/config.c — Whisper's keys, one to one with Hugging Face's
 * WhisperConfig (defaults of openai/whisper-tiny), their checks, the config.json bora export
 * writes and the table bora import reads one with. */
#include "whisper.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

const bora_key whisper_keys[] = {
    K_INT("vocab_size", "51865",
          "tokens in the vocabulary (bora train and bora graph set it to the tokenizer's unless "
          "given; whisper-tiny.en has 51864)"),
    K_INT("num_mel_bins", "80", "mel bins of the input features (large-v3: 128)"),
    K_INT("d_model", "384", "width of the encoder's and the decoder's residual streams"),
    K_INT("encoder_layers", "4", "encoder blocks"),
    K_INT("encoder_attention_heads", "6", "the encoder's attention heads (d_model divides by it)"),
    K_INT("encoder_ffn_dim", "1536", "width of the encoder's MLP"),
    K_INT("decoder_layers", "4", "decoder blocks"),
    K_INT("decoder_attention_heads", "6",
          "the decoder's attention heads, self- and cross-attention (d_model divides by it)"),
    K_INT("decoder_ffn_dim", "1536", "width of the decoder's MLP"),
    K_INT("max_source_positions", "1500",
          "encoder positions (the sinusoidal table); the input has twice as many frames "
          "(3000: 30 s of 10 ms frames)"),
    K_INT("max_target_positions", "448",
          "decoder positions (the learned table): every decoder window has this many tokens"),
    {"activation_function", BORA_KEY_STRING, 0, "gelu",
     "MLP activation: gelu (exact, erf), gelu_new or gelu_pytorch_tanh (tanh), relu, silu"},
    K_FLOAT("init_std", "0.02",
            "standard deviation of the initial linear, convolution and embedding weights"),
    K_BOOL("scale_embedding", "false", "multiply the token embeddings by sqrt(d_model)"),
    K_BOOL("gradient_checkpointing", "false",
           "recompute each block in the backward pass instead of keeping its activations"),
    {NULL, 0, 0, NULL, NULL},
};

/* The integer keys, in table order, and where they go. */
static int64_t *int_key(whisper *m, size_t i)
{
    int64_t *at[] = {&m->vocab_size,
                     &m->num_mel_bins,
                     &m->d_model,
                     &m->encoder_layers,
                     &m->encoder_attention_heads,
                     &m->encoder_ffn_dim,
                     &m->decoder_layers,
                     &m->decoder_attention_heads,
                     &m->decoder_ffn_dim,
                     &m->max_source_positions,
                     &m->max_target_positions};
    return i < sizeof at / sizeof at[0] ? at[i] : NULL;
}

static bora_status read_activation(const bora_host *h, const char *act, int *op)
{
    if (!strcmp(act, "gelu"))
        *op = BORA_OP_GELU_EXACT;
    else if (!strcmp(act, "gelu_new") || !strcmp(act, "gelu_pytorch_tanh"))
        *op = BORA_OP_GELU_TANH;
    else if (!strcmp(act, "relu"))
        *op = BORA_OP_RELU;
    else if (!strcmp(act, "silu") || !strcmp(act, "swish"))
        *op = BORA_OP_SILU;
    else
        return h->fail(h, BORA_ERR_CONFIG,
                       "model.activation_function: '%s' is not one of gelu (Whisper's), gelu_new, "
                       "gelu_pytorch_tanh, relu, silu",
                       act);
    return BORA_OK;
}

/* The sizes' products the graphs form (the widest layer, the vocabulary's table, the input's
 * frames) stay far inside int64; heads divide d_model; the sinusoids need an even width. */
static bora_status check(const bora_host *h, const whisper *m)
{
    const int64_t limit = (int64_t)1 << 40;
    for (size_t i = 0; int_key((whisper *)m, i); i++)
        if (*int_key((whisper *)m, i) < 1 || *int_key((whisper *)m, i) > limit)
            return h->fail(h, BORA_ERR_CONFIG,
                           "model.%s must be at least 1 and at most 2^40, not %lld",
                           whisper_keys[i].name, (long long)*int_key((whisper *)m, i));
    const struct {
        const char *key;
        int64_t heads;
    } heads[] = {{"encoder_attention_heads", m->encoder_attention_heads},
                 {"decoder_attention_heads", m->decoder_attention_heads}};
    for (size_t i = 0; i < 2; i++)
        if (m->d_model % heads[i].heads)
            return h->fail(h, BORA_ERR_CONFIG,
                           "model.d_model %lld does not divide into model.%s (%lld) heads",
                           (long long)m->d_model, heads[i].key, (long long)heads[i].heads);
    if (m->d_model % 2 || m->d_model < 4)
        return h->fail(h, BORA_ERR_CONFIG,
                       "model.d_model: %lld; the encoder's sinusoidal positions need an even "
                       "width of at least 4",
                       (long long)m->d_model);
    const struct {
        const char *what;
        int64_t a, b;
    } products[] = {
        {"model.vocab_size x model.d_model", m->vocab_size, m->d_model},
        {"model.encoder_ffn_dim x model.d_model", m->encoder_ffn_dim, m->d_model},
        {"model.decoder_ffn_dim x model.d_model", m->decoder_ffn_dim, m->d_model},
        {"model.num_mel_bins x model.d_model x 3", m->num_mel_bins * 3, m->d_model},
        {"model.max_source_positions x model.d_model x 2", m->max_source_positions * 2, m->d_model},
        {"model.max_target_positions x model.d_model", m->max_target_positions, m->d_model},
    };
    for (size_t i = 0; i < sizeof products / sizeof products[0]; i++) {
        int64_t p;
        if (__builtin_mul_overflow(products[i].a, products[i].b, &p) || p > limit)
            return h->fail(h, BORA_ERR_CONFIG, "%s (%lld x %lld) is too large: keep it within 2^40",
                           products[i].what, (long long)products[i].a, (long long)products[i].b);
    }
    if (m->encoder_layers > DECODER_MAX_LAYERS || m->decoder_layers > DECODER_MAX_LAYERS)
        return h->fail(h, BORA_ERR_CONFIG,
                       "model.encoder_layers (%lld) and model.decoder_layers (%lld) must be at "
                       "most %d",
                       (long long)m->encoder_layers, (long long)m->decoder_layers,
                       DECODER_MAX_LAYERS);
    /* "!(x >= 0)" refuses NaN too */
    if (!(m->init_std >= 0 && isfinite(m->init_std)))
        return h->fail(h, BORA_ERR_CONFIG,
                       "model.init_std: %g is not a standard deviation; give 0 or more (Whisper "
                       "uses 0.02)",
                       m->init_std);
    return BORA_OK;
}

bora_status whisper_create(const bora_host *h, const bora_config *cfg, bora_model **out)
{
    whisper *m = h->alloc(h, sizeof *m, 16);
    if (!m)
        return h->fail(h, BORA_ERR_NOMEM, "out of memory");
    memset(m, 0, sizeof *m);
    m->h = h;
    bora_status st = BORA_OK;
    for (size_t i = 0; int_key(m, i) && st == BORA_OK; i++)
        st = h->config_int(h, cfg, whisper_keys[i].name,
                           decoder_key_int(whisper_keys, whisper_keys[i].name), int_key(m, i));
    const char *act = "gelu";
    if (st == BORA_OK)
        st = h->config_string(h, cfg, "activation_function", "gelu", &act);
    if (st == BORA_OK)
        st = read_activation(h, act, &m->activation);
    if (st == BORA_OK)
        st = h->config_float(h, cfg, "init_std", 0.02, &m->init_std);
    if (st == BORA_OK)
        st = h->config_bool(h, cfg, "scale_embedding", 0, &m->scale_embedding);
    if (st == BORA_OK)
        st = h->config_bool(h, cfg, "gradient_checkpointing", 0, &m->gradient_checkpointing);
    if (st == BORA_OK)
        st = check(h, m);
    if (st != BORA_OK) {
        h->free(h, m);
        return st;
    }
    *out = (bora_model *)m;
    return BORA_OK;
}

void whisper_destroy(bora_model *model)
{
    whisper *m = (whisper *)model;
    m->h->free(m->h, m);
}

/* Hugging Face's config.json for WhisperForConditionalGeneration: the sizes, and the switches
 * bora's Whisper has fixed (no dropout, the head tied, encoder-decoder). Token ids (start,
 * padding, suppression) belong to the tokenizer and generation_config.json, not written. */
bora_status whisper_hf_config(bora_model *model, char *buf, size_t cap, size_t *len)
{
    const whisper *m = (const whisper *)model;
    const char *act = m->activation == BORA_OP_GELU_EXACT  ? "gelu"
                      : m->activation == BORA_OP_GELU_TANH ? "gelu_new"
                      : m->activation == BORA_OP_RELU      ? "relu"
                                                           : "silu";
    decoder_json b = {buf, cap, 0};
    decoder_put(&b,
                "{\"architectures\": [\"WhisperForConditionalGeneration\"], \"model_type\": "
                "\"whisper\", \"vocab_size\": %lld, \"num_mel_bins\": %lld, \"d_model\": %lld, "
                "\"encoder_layers\": %lld, \"encoder_attention_heads\": %lld, "
                "\"encoder_ffn_dim\": %lld, \"decoder_layers\": %lld, "
                "\"decoder_attention_heads\": %lld, \"decoder_ffn_dim\": %lld, "
                "\"num_hidden_layers\": %lld, \"max_source_positions\": %lld, "
                "\"max_target_positions\": %lld, \"activation_function\": \"%s\", "
                "\"init_std\": %.17g, \"scale_embedding\": %s, \"dropout\": 0.0, "
                "\"attention_dropout\": 0.0, \"activation_dropout\": 0.0, "
                "\"encoder_layerdrop\": 0.0, \"decoder_layerdrop\": 0.0, "
                "\"is_encoder_decoder\": true, \"tie_word_embeddings\": true, "
                "\"apply_spec_augment\": false, \"use_cache\": true, \"torch_dtype\": "
                "\"float32\"}",
                (long long)m->vocab_size, (long long)m->num_mel_bins, (long long)m->d_model,
                (long long)m->encoder_layers, (long long)m->encoder_attention_heads,
                (long long)m->encoder_ffn_dim, (long long)m->decoder_layers,
                (long long)m->decoder_attention_heads, (long long)m->decoder_ffn_dim,
                (long long)m->encoder_layers, (long long)m->max_source_positions,
                (long long)m->max_target_positions, act, m->init_std,
                m->scale_embedding ? "true" : "false");
    *len = b.len;
    return BORA_OK;
}

/* How bora import reads a WhisperConfig config.json: every key transformers writes for one
 * (openai/whisper-tiny's among them). Published Whisper checkpoints have no dropout; bora trains
 * without it and without SpecAugment, so other values are accepted with a note. */
#define W_NOTE(k, v, why)                      \
    {                                          \
        k, BORA_HF_NOTE, 0, NULL, NULL, v, why \
    }
#define W_EXPECT(k, v, why)                      \
    {                                            \
        k, BORA_HF_EXPECT, 0, NULL, NULL, v, why \
    }
const bora_hf_key whisper_hf_keys[] = {
    HF_COPY("vocab_size"),
    HF_COPY("num_mel_bins"),
    HF_COPY("d_model"),
    HF_COPY("encoder_layers"),
    HF_COPY("encoder_attention_heads"),
    HF_COPY("encoder_ffn_dim"),
    HF_COPY("decoder_layers"),
    HF_COPY("decoder_attention_heads"),
    HF_COPY("decoder_ffn_dim"),
    HF_COPY("max_source_positions"),
    HF_COPY("max_target_positions"),
    HF_COPY("activation_function"),
    HF_COPY("init_std"),
    HF_COPY("scale_embedding"),
    /* transformers sets it to encoder_layers itself: nothing of its own */
    HF_META("num_hidden_layers"),
    W_NOTE("dropout", "0", "bora trains Whisper without dropout"),
    W_NOTE("attention_dropout", "0", "bora trains Whisper without dropout"),
    W_NOTE("activation_dropout", "0", "bora trains Whisper without dropout"),
    W_NOTE("encoder_layerdrop", "0", "bora trains Whisper without LayerDrop"),
    W_NOTE("decoder_layerdrop", "0", "bora trains Whisper without LayerDrop"),
    W_NOTE("apply_spec_augment", "false",
           "bora trains Whisper without SpecAugment (the mask_* keys are not used)"),
    W_EXPECT("is_encoder_decoder", "true", "bora's Whisper is an encoder-decoder"),
    W_EXPECT("tie_word_embeddings", "true",
             "bora's Whisper ties proj_out to model.decoder.embed_tokens.weight"),
    W_EXPECT("use_weighted_layer_sum", "false",
             "a weighted sum of the encoder's layers is WhisperForAudioClassification's, not "
             "this model's"),
    /* SpecAugment's masks (used only with apply_spec_augment), the audio classifier's
     * projection, the alignment heads' filter, token ids and generation settings: they do not
     * change this model's outputs */
    HF_META("mask_time_prob"),
    HF_META("mask_time_length"),
    HF_META("mask_time_min_masks"),
    HF_META("mask_feature_prob"),
    HF_META("mask_feature_length"),
    HF_META("mask_feature_min_masks"),
    HF_META("classifier_proj_size"),
    HF_META("median_filter_width"),
    HF_META("decoder_start_token_id"),
    HF_META("suppress_tokens"),
    HF_META("begin_suppress_tokens"),
    HF_META("forced_decoder_ids"),
    HF_META("max_length"),
    HF_METADATA,
    HF_END,
};
