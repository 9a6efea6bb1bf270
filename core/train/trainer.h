/* core/train/trainer.h — `bora train`: the training loop.
 *
 * Builds the model's train graph (micro-batch rows per run, the summed loss scaled by one over
 * the step's loss-token count, so accumulated micro-batches equal one big batch) and the apply
 * graph (clipping and the optimizer), reads batches from the loader, follows the learning-rate
 * schedule, prints a line per step, logs to the trackers, and checkpoints by the checkpointer's
 * policy. Starting a run id that has checkpoints resumes from the latest, bit for bit. */
#ifndef BORA_CORE_TRAINER_H
#define BORA_CORE_TRAINER_H

#include "../config/config.h"
#include "../plugin/registry.h"

#include <stddef.h>
#include <stdint.h>

typedef struct bora_train_opts {
    int force; /* resume even where the checkpoint's record differs from this run */
} bora_train_opts;

/* Train as cfg (parsed, unchecked) says. Returns the process exit status: 0 when the run
 * finished, 1 on an error (printed), 130 when interrupted (after saving a checkpoint). */
int bora_train(bora_cfg *cfg, bora_registry *reg, const bora_train_opts *opts);

typedef struct bora_tokenizer bora_tokenizer;

/* Where the model's vocabulary size comes from (bora_model_vocab). */
enum bora_vocab_source {
    BORA_VOCAB_NONE,      /* the model has no vocab_size key */
    BORA_VOCAB_DEFAULT,   /* the key's default: no data.tokenizer */
    BORA_VOCAB_TOKENIZER, /* data.tokenizer's vocabulary, model.vocab_size left out */
    BORA_VOCAB_GIVEN      /* model.vocab_size, as the configuration sets it */
};

/* Give the model the tokenizer's vocabulary size unless the configuration sets one, as bora
 * train and bora graph both do: loads data.tokenizer into *tok (NULL without one; the caller
 * frees it), sets model.vocab_size in cfg to its size where the model declares that key and the
 * configuration leaves it out, and reports a given size smaller than the tokenizer's as a
 * configuration error. *source (a bora_vocab_source) and *vocab_size say what the model gets.
 * Call before checking the configuration. */
bora_status bora_model_vocab(bora_cfg *cfg, const bora_registry *reg, bora_tokenizer **tok,
                             int *source, int64_t *vocab_size);

/* trainer.mp ("p=f32,c=bf16,r=bf16": comma-separated key=dtype, keys p, c, r, each once). */
typedef struct bora_mp {
    int compute;  /* c: matmul operands' dtype (BORA_DTYPE_F32 or BORA_DTYPE_BF16) */
    int residual; /* r: the residual stream's dtype in memory */
} bora_mp;

/* 0 with *out filled, or -1 with the reason in err. */
int bora_mp_parse(const char *mp, bora_mp *out, char *err, size_t cap);

/* When graph g failed on a tensor too large to address (g_size_check): the configuration's size
 * keys behind it, as "model.vocab_size (4611686018427387904): make it smaller", into buf; else
 * "". */
struct g_graph;
void bora_size_keys(bora_config *root, const struct g_graph *g, char *buf, size_t cap);
/* The model's width and layer count from its configuration, or the defaults its keys (the
 * model's declared keys, may be NULL) give, under GPT-2's key names (hidden_dim, num_layers) or
 * Hugging Face's (hidden_size, num_hidden_layers), or Whisper's decoder (d_model, decoder_layers);
 * 0 when it has none of them. *width_key and
 * *layers_key receive the names used. */
void bora_model_shape(bora_config *root, const bora_key *keys, int64_t *width, int64_t *layers,
                      const char **width_key, const char **layers_key);

/* A mixture of experts' sizes from the model's configuration or its keys' defaults, under
 * Hugging Face's names: *experts (num_local_experts, E) and *per_token (num_experts_per_tok, k);
 * 0 where the model has no such key. */
void bora_model_experts(bora_config *root, const bora_key *keys, int64_t *experts,
                        int64_t *per_token);

/* `bora eval`: the loss and bits per byte of a checkpoint's model (a step directory, or a run
 * directory for its latest) on cfg's validation set, printed as a line (or JSON); for an audio
 * model also the word error rate of greedy transcripts of the first max_clips validation clips
 * (-1: all of them; 0: none). Returns the process exit status. */
int bora_evaluate(bora_cfg *cfg, bora_registry *reg, const char *checkpoint, int json,
                  int64_t max_clips);
/* The same for a Hugging Face folder's model (bora eval --hf): its config.json as model: and
 * its tokenizer unless data.tokenizer names one. */
int bora_evaluate_hf(bora_cfg *cfg, bora_registry *reg, const char *hf_dir, int json,
                     int64_t max_clips);

/* `bora cache`: build the token caches of data.train_urls (and validation_urls) with progress;
 * workers > 0 and rebuild override data.cache_workers and data.cache_rebuild. */
int bora_cache_build(bora_cfg *cfg, bora_registry *reg, int64_t workers, int rebuild);

#endif
