/* plugins/models/llama/llama.h — the Llama family's configuration, shared by the reader
 * (config.c) and the forward graph (llama.c). One plugin, four model types: llama, mistral,
 * qwen2 and qwen3, whose keys are Hugging Face's config.json keys for that model_type. */
#ifndef BORA_MODEL_LLAMA_H
#define BORA_MODEL_LLAMA_H

#include <bora/model.h>

#include "decoder.h"

#include <stdint.h>

/* The four types: what differs between them is which keys exist, their defaults, and the
 * handful of structural switches below. */
typedef enum llama_kind { LLAMA, MISTRAL, QWEN2, QWEN3, LLAMA_KINDS } llama_kind;

#define LLAMA_MAX_LAYERS 4096

typedef struct llama {
    const bora_host *h;
    llama_kind kind;
    /* config.json's sizes */
    int64_t vocab_size, hidden_size, intermediate_size, num_hidden_layers;
    int64_t num_attention_heads, num_key_value_heads, head_dim, max_position_embeddings;
    /* bora's own: positions per training window (and in the KV cache) */
    int64_t seq_len;
    double initializer_range, rms_norm_eps;
    int tie_word_embeddings;
    /* biases: q/k/v projections, the attention output projection, the MLP's three */
    int qkv_bias, o_bias, mlp_bias;
    int qk_norm;            /* qwen3: RMSNorm over each head's head_dim on q and k, before RoPE */
    int64_t sliding_window; /* the window's size where a layer slides (0: no window) */
    uint8_t *slides;        /* per layer: 1 where the layer attends within the window */
    bora_rope_spec rope;    /* rope_theta and rope_scaling */
    /* whether rope_scaling gave original_max_position_embeddings (else it is a fallback, which
     * config.json must not state: transformers <= 4.55 would derive yarn's factor from it) */
    int rope_original_given;
    int gradient_checkpointing;
} llama;

/* The create() of each type (config.c). */
bora_status llama_create_kind(const bora_host *h, const bora_config *cfg, llama_kind kind,
                              bora_model **out);
void llama_destroy(bora_model *model);
/* config.json for the model (config.c). */
bora_status llama_hf_config(bora_model *model, char *buf, size_t cap, size_t *len);
/* The configuration keys of each type (config.c). */
extern const bora_key llama_keys_llama[], llama_keys_mistral[], llama_keys_qwen2[],
    llama_keys_qwen3[];
extern const bora_key *const llama_keys[LLAMA_KINDS];
/* The config.json keys bora import reads, per type (config.c). */
extern const bora_hf_key llama_hf_keys_llama[], llama_hf_keys_mistral[], llama_hf_keys_qwen2[],
    llama_hf_keys_qwen3[];
/* "llama", "mistral", ...: the type's name, its model_type in Hugging Face. */
extern const char *const llama_kind_name[LLAMA_KINDS];

#endif
