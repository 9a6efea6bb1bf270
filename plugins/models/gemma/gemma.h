/* plugins/models/gemma/gemma.h — the Gemma family's configuration, shared by the reader
 * (config.c) and the forward graph (gemma.c). One plugin, three model types: gemma, gemma2 and
 * gemma3 (Gemma 3's text model, transformers' model_type gemma3_text), whose keys are Hugging
 * Face's GemmaConfig, Gemma2Config and Gemma3TextConfig keys. */
#ifndef BORA_MODEL_GEMMA_H
#define BORA_MODEL_GEMMA_H

#include <bora/model.h>

#include "decoder.h"

#include <stdint.h>

typedef enum gemma_kind { GEMMA, GEMMA2, GEMMA3, GEMMA_KINDS } gemma_kind;

#define GEMMA_MAX_LAYERS 4096

typedef struct gemma {
    const bora_host *h;
    gemma_kind kind;
    /* config.json's sizes */
    int64_t vocab_size, hidden_size, intermediate_size, num_hidden_layers;
    int64_t num_attention_heads, num_key_value_heads, head_dim, max_position_embeddings;
    /* bora's own: positions per training window (and in the KV cache) */
    int64_t seq_len;
    double initializer_range, rms_norm_eps;
    int tie_word_embeddings;
    int attention_bias;             /* biases on q_proj, k_proj, v_proj and o_proj */
    double query_pre_attn_scalar;   /* gemma2/3: the attention scale is its -½ power */
    double attn_logit_softcapping;  /* gemma2/3: c·tanh(score / c) (0: none) */
    double final_logit_softcapping; /* gemma2/3: c·tanh(logit / c) (0: none) */
    int64_t sliding_window;         /* the window's size where a layer slides (0: none) */
    int64_t sliding_window_pattern; /* gemma3: every pattern-th layer is global */
    uint8_t *slides;                /* per layer: 1 where the layer attends within the window */
    int layer_types_given;          /* config gave layer_types (written back as given) */
    bora_rope_spec rope;            /* rope_theta and rope_scaling (gemma3: global layers) */
    int rope_original_given;        /* rope_scaling gave original_max_position_embeddings */
    bora_rope_spec rope_local;      /* gemma3: rope_local_base_freq on the sliding layers */
    int gradient_checkpointing;
} gemma;

/* The create() of each type (config.c). */
bora_status gemma_create_kind(const bora_host *h, const bora_config *cfg, gemma_kind kind,
                              bora_model **out);
void gemma_destroy(bora_model *model);
/* config.json for the model (config.c). */
bora_status gemma_hf_config(bora_model *model, char *buf, size_t cap, size_t *len);
/* The configuration keys of each type (config.c). */
extern const bora_key gemma_keys_gemma[], gemma_keys_gemma2[], gemma_keys_gemma3[];
extern const bora_key *const gemma_keys[GEMMA_KINDS];
/* The config.json keys bora import reads, per type (config.c). */
extern const bora_hf_key gemma_hf_keys_gemma[], gemma_hf_keys_gemma2[], gemma_hf_keys_gemma3[];
/* "gemma", "gemma2", "gemma3": the type's name in bora. */
extern const char *const gemma_kind_name[GEMMA_KINDS];

#endif
