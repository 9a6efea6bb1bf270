/* plugins/models/whisper/whisper.h — the Whisper model's configuration (config.c reads it from
 * Hugging Face's WhisperConfig keys) shared with its graphs (whisper.c). */
#ifndef BORA_MODELS_WHISPER_H
#define BORA_MODELS_WHISPER_H

#include "../common/decoder.h"

#include <bora/model.h>

#include <stdint.h>

typedef struct whisper {
    const bora_host *h;
    /* WhisperConfig's sizes */
    int64_t vocab_size, num_mel_bins, d_model;
    int64_t encoder_layers, encoder_attention_heads, encoder_ffn_dim;
    int64_t decoder_layers, decoder_attention_heads, decoder_ffn_dim;
    int64_t max_source_positions, max_target_positions;
    double init_std;
    int activation;      /* a bora_op: BORA_OP_GELU_EXACT for "gelu" */
    int scale_embedding; /* the token embeddings times sqrt(d_model) */
    int gradient_checkpointing;
} whisper;

/* WhisperConfig has no key for it: every nn.LayerNorm of the model keeps PyTorch's default. */
#define WHISPER_LAYER_NORM_EPS 1e-5

extern const bora_key whisper_keys[];
extern const bora_hf_key whisper_hf_keys[];
bora_status whisper_create(const bora_host *h, const bora_config *cfg, bora_model **out);
void whisper_destroy(bora_model *model);
bora_status whisper_hf_config(bora_model *model, char *buf, size_t cap, size_t *len);

#endif
