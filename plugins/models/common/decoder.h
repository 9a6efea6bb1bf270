/* plugins/models/common/decoder.h — what the decoder-only model plugins (llama, gemma) share:
 * the layer helpers in Hugging Face's names and layouts (nn.Linear, RMSNorm), the inputs and
 * outputs of each mode, the KV cache with its ring for sliding layers, and RoPE's config.json
 * keys (rope_theta, rope_scaling) read into a bora_rope_spec and written back. A static library
 * linked into each plugin (plugins/models/common/CMakeLists.txt); it sees only the SDK. */
#ifndef BORA_MODELS_DECODER_H
#define BORA_MODELS_DECODER_H

#include <bora/model.h>

#include <stddef.h>
#include <stdint.h>

/* What every decoder model has, read from the keys both families share: a model's struct
 * starts with it (decoder_model_new), so the helpers below take the model as a decoder_dims. */
typedef struct decoder_dims {
    const bora_host *h;
    /* config.json's sizes */
    int64_t vocab_size, hidden_size, intermediate_size, num_hidden_layers;
    int64_t num_attention_heads, num_key_value_heads, head_dim, max_position_embeddings;
    /* bora's own: positions per training window (and in the KV cache) */
    int64_t seq_len;
    double initializer_range, rms_norm_eps;
    int tie_word_embeddings;
    int gradient_checkpointing;
    int64_t sliding_window; /* the window's size where a layer slides (0: no window) */
    uint8_t *slides;        /* per layer: 1 where the layer attends within the window */
    bora_rope_spec rope;    /* rope_theta and rope_scaling */
    /* whether rope_scaling gave original_max_position_embeddings (else it is a fallback, which
     * config.json must not state: transformers <= 4.55 would derive yarn's factor from it) */
    int rope_original_given;
} decoder_dims;

#define DECODER_MAX_LAYERS 4096

/* A zeroed model of size bytes (a struct that starts with decoder_dims) with its slides[], or
 * NULL with the host's error set; decoder_model_free frees both. */
void *decoder_model_new(const bora_host *h, size_t size);
void decoder_model_free(bora_model *model);
/* A model's create(): decoder_model_new, then read (the type's reader, given the type's kind)
 * fills it; on an error it is freed and read's status returned. */
typedef bora_status (*decoder_read_fn)(const bora_host *h, const bora_config *cfg, void *model,
                                       int kind);
bora_status decoder_model_create(const bora_host *h, const bora_config *cfg, size_t size, int kind,
                                 decoder_read_fn read, bora_model **out);
/* The shared keys into d, with the defaults of the type's table keys: the sizes (head_dim null
 * or absent from the table: hidden_size / num_attention_heads; num_key_value_heads null:
 * num_attention_heads), initializer_range, rms_norm_eps, attention_dropout (only 0),
 * tie_word_embeddings, gradient_checkpointing, and rope_theta / rope_scaling over the whole
 * head. Errors name model.<key>; type names the type in them. */
bora_status decoder_read_dims(const bora_host *h, const bora_config *cfg, const bora_key *keys,
                              const char *type, decoder_dims *d);

/* One build: the graph, its mode and the inputs every layer reads. */
typedef struct decoder_ctx {
    bora_graph *g;
    const bora_graph_api *A;
    int32_t mode;
    int cached;               /* prefill or decode: the layers keep a KV cache */
    int64_t seq_len;          /* positions per window and in a full layer's cache */
    double initializer_range; /* the normal init of linear and embedding weights */
    bora_tensor *ids;         /* input_ids (batch, position) */
    bora_tensor *seg;         /* segment ids (train, eval, prefill) */
    bora_tensor *pos;         /* decode: the new token's position */
    bora_tensor *key_length;  /* decode: position + 1; prefill: the tokens the window holds */
    bora_axis io[2];          /* (batch, position) of the inputs */
} decoder_ctx;

/* Refuses a mode without a graph and a host without rms_norm and rope (ABI 1.9). */
bora_status decoder_check_build(const decoder_dims *d, const char *type, bora_graph *g,
                                int32_t mode);
/* Declares the inputs of mode (input_ids, segment_ids, and the extents a cache reads: prefill
 * reads key_length where some layer keeps a ring) into c. */
void decoder_inputs(decoder_ctx *c, const decoder_dims *d, bora_graph *g, int32_t mode);
/* model.embed_tokens.weight (vocab, embed). */
bora_tensor *decoder_embed_table(decoder_ctx *c, const decoder_dims *d);
/* The LM head over the final hidden states x: the embedding when tied, else lm_head.weight;
 * (batch, position, vocab). */
bora_tensor *decoder_lm_head(decoder_ctx *c, const decoder_dims *d, bora_tensor *x,
                             bora_tensor *embed);
/* q_proj, k_proj and v_proj of prefix (model.layers.N.self_attn) over h (batch, position,
 * embed), split into heads: q (..., heads, head_dim), k and v (..., kv_heads, head_dim). */
void decoder_qkv(decoder_ctx *c, const decoder_dims *d, const char *prefix, bora_tensor *h,
                 int bias, bora_tensor **q, bora_tensor **k, bora_tensor **v);
/* Attention of q over k and v (after RoPE; k and v on key_position) with ao, through the KV
 * cache in prefill and decode (the window ao->sliding_window), heads merged and o_proj applied:
 * (batch, position, embed). */
bora_tensor *decoder_attend(decoder_ctx *c, const decoder_dims *d, const char *prefix,
                            bora_tensor *q, bora_tensor *k, bora_tensor *v, bora_attention_opts *ao,
                            int o_bias);
/* The gated MLP of layer l: down_proj(act(gate_proj(h)) · up_proj(h)), act fused in gate's dot
 * (BORA_OP_SILU: SwiGLU; BORA_OP_GELU_TANH: GeGLU). */
bora_tensor *decoder_gated_mlp(decoder_ctx *c, const decoder_dims *d, int64_t l, bora_tensor *h,
                               int bias, int activation);
/* The mode's result from the logits (batch, position, vocab): the summed cross-entropy against
 * targets in train, else the logits themselves. */
bora_status decoder_output(decoder_ctx *c, bora_tensor *logits, bora_tensor **out);
/* decoder_output, where train adds per_target (0-d f32, or NULL) once per counted target (not
 * -100) to the summed cross-entropy: a term the host's mean over the targets makes per_target
 * itself (Mixtral's load-balancing loss). */
bora_status decoder_output_plus(decoder_ctx *c, bora_tensor *logits, bora_tensor *per_target,
                                bora_tensor **out);

/* An f32 parameter. */
bora_tensor *decoder_param(decoder_ctx *c, const char *name, int n, const bora_axis *axes,
                           bora_init init, uint32_t flags);
/* A 0-d f32 constant. */
bora_tensor *decoder_scalar(decoder_ctx *c, double v);
/* An RMSNorm weight over axis (size n) named prefix.weight, initialised to init, applied to x as
 * x · rstd · (weight + weight_offset) (Llama: ones and 0; Gemma: zeros and 1). */
bora_tensor *decoder_rms(decoder_ctx *c, const char *prefix, bora_tensor *x, const char *axis,
                         int64_t n, double eps, double weight_offset, bora_init init);
/* nn.Linear: x (..., in) -> (..., out), weight prefix.weight (out, in), an optional bias
 * prefix.bias, an optional activation fused in the dot (BORA_OP_SILU, BORA_OP_GELU_TANH). */
bora_tensor *decoder_linear(decoder_ctx *c, const char *prefix, bora_tensor *x, const char *in,
                            int64_t in_size, const char *out, int64_t out_size, int bias,
                            int activation);
/* RoPE (rotate-half, Hugging Face's layout) over x's position and head_dim axes. */
bora_tensor *decoder_rope(decoder_ctx *c, bora_tensor *x, const bora_rope_spec *spec);

/* The KV cache of one attention layer (model states prefix.key_cache and prefix.value_cache,
 * (batch, key_position, kv_heads, head_dim)): writes k and v (after RoPE, key_position axis)
 * into it and replaces them with what attention reads, adjusting ao. A layer that slides within
 * W (> 0) shorter than seq_len keeps only W rows, as a ring: position p lives in row p mod W;
 * prefill then attends over the window's own keys, and decode over the filled rows in any order
 * (every one of them is inside the window). Nothing happens outside prefill and decode. */
void decoder_kv_cache(decoder_ctx *c, const char *prefix, bora_tensor **k, bora_tensor **v,
                      int64_t kv_heads, int64_t head_dim, int64_t W, bora_attention_opts *ao);

/* ---- keys ------------------------------------------------------------------------------------ */

/* Entries of a type's bora_key table (the name, its default as text, what it means) and of its
 * bora_hf_key table: a config.json key copied unchanged, metadata ignored, the table's end. */
#define K_INT(n, d, doc)           \
    {                              \
        n, BORA_KEY_INT, 0, d, doc \
    }
#define K_FLOAT(n, d, doc)           \
    {                                \
        n, BORA_KEY_FLOAT, 0, d, doc \
    }
#define K_BOOL(n, d, doc)           \
    {                               \
        n, BORA_KEY_BOOL, 0, d, doc \
    }
#define HF_COPY(k)                                 \
    {                                              \
        k, BORA_HF_COPY, 0, NULL, NULL, NULL, NULL \
    }
#define HF_META(k)                                   \
    {                                                \
        k, BORA_HF_IGNORE, 0, NULL, NULL, NULL, NULL \
    }
#define HF_END                             \
    {                                      \
        NULL, 0, 0, NULL, NULL, NULL, NULL \
    }
/* The metadata transformers writes into every config.json, which does not change the model */
#define HF_METADATA                                                                            \
    HF_META("architectures"), HF_META("model_type"), HF_META("torch_dtype"), HF_META("dtype"), \
        HF_META("transformers_version"), HF_META("bos_token_id"), HF_META("eos_token_id"),     \
        HF_META("pad_token_id"), HF_META("use_cache"), HF_META("_name_or_path")

/* Whether the table has key; its default as an integer (0 where null) or a float. */
int decoder_has_key(const bora_key *keys, const char *key);
int64_t decoder_key_int(const bora_key *keys, const char *key);
int decoder_key_bool(const bora_key *keys, const char *key);
double decoder_key_float(const bora_key *keys, const char *key);
/* An integer key with the table's default, whose null (or absence, where the table says null)
 * means fallback. */
bora_status decoder_read_int(const bora_host *h, const bora_config *cfg, const bora_key *keys,
                             const char *key, int64_t fallback, int64_t *out);
/* sliding_window (the table's default; null: 0, no window) into d, refusing a negative one. */
bora_status decoder_read_window_size(const bora_host *h, const bora_config *cfg,
                                     const bora_key *keys, decoder_dims *d);
/* layer_types (a list of full_attention / sliding_attention, num_hidden_layers L long) into
 * slides[] (1: sliding); *n is 0 where the key is absent or null (slides[] untouched). */
bora_status decoder_read_layer_types(const bora_host *h, const bora_config *cfg, int64_t L,
                                     uint8_t *slides, size_t *n);
/* Refuses sizes whose products (heads x head_dim, vocab x hidden, hidden x 2·intermediate) pass
 * 2^62. */
bora_status decoder_check_sizes(const bora_host *h, int64_t heads, int64_t head_dim,
                                int64_t vocab_size, int64_t hidden_size, int64_t intermediate_size);

/* ---- RoPE's keys ------------------------------------------------------------------------------ */

/* rope_theta (default theta_default) and rope_scaling into *s; errors name model.<key>.
 * max_position_embeddings supplies transformers' fallbacks (dynamic, yarn); *original_given
 * says whether rope_scaling gave original_max_position_embeddings. */
bora_status decoder_read_rope(const bora_host *h, const bora_config *cfg, double theta_default,
                              int64_t max_position_embeddings, bora_rope_spec *s,
                              int *original_given);

/* A JSON text written into a caller's buffer; len counts what did not fit too. */
typedef struct decoder_json {
    char *p;
    size_t cap, len;
} decoder_json;
void decoder_put(decoder_json *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "rope_scaling": {...} or null, as decoder_read_rope reads it back. */
void decoder_put_rope_scaling(decoder_json *b, const bora_rope_spec *s, int original_given);

#endif
