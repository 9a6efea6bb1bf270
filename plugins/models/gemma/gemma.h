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

typedef struct gemma {
    decoder_dims d; /* sizes, norms, windows and RoPE (plugins/models/common); d.rope is the
                       global layers' (rope_theta, rope_scaling) */
    gemma_kind kind;
    int attention_bias;             /* biases on q_proj, k_proj, v_proj and o_proj */
    double query_pre_attn_scalar;   /* the attention scale is its -½ power (gemma: head_dim) */
    double attn_logit_softcapping;  /* gemma2/3: c·tanh(score / c) (0: none) */
    double final_logit_softcapping; /* gemma2/3: c·tanh(logit / c) (0: none) */
    int64_t sliding_window_pattern; /* gemma3: every pattern-th layer is global */
    bora_rope_spec rope_local;      /* gemma3: rope_local_base_freq on the sliding layers */
} gemma;

/* The create() of each type (config.c). */
bora_status gemma_create_kind(const bora_host *h, const bora_config *cfg, gemma_kind kind,
                              bora_model **out);
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
