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

typedef struct llama {
    decoder_dims d; /* sizes, norms, windows and RoPE (plugins/models/common) */
    llama_kind kind;
    /* biases: q/k/v projections, the attention output projection, the MLP's three */
    int qkv_bias, o_bias, mlp_bias;
    int qk_norm; /* qwen3: RMSNorm over each head's head_dim on q and k, before RoPE */
} llama;

/* The create() of each type (config.c). */
bora_status llama_create_kind(const bora_host *h, const bora_config *cfg, llama_kind kind,
                              bora_model **out);
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
