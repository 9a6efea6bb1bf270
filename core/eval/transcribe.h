/* core/eval/transcribe.h — greedy transcription of a clip by a Whisper-style model: its
 * log-mel features and a start sequence in, the decoder's most likely tokens out.
 *
 * With the model's KV cache (its prefill and decode graphs, sdk/bora/model.h): the prefill
 * graph runs once over input_features and the start sequence, from position 0 (padded to the
 * window, key_length saying how many positions hold tokens), which writes the decoder's cache
 * and every layer's cross-attention keys and values; each further token then costs one decode
 * step at the next free position. Without a cache (no_cache, or a model without those graphs)
 * the eval graph runs the features and every token so far for each new token. Both compute the
 * same logits, so they choose the same tokens.
 *
 * Greedy: the next token is the logits' argmax (the lowest id among equal logits), until
 * <|endoftext|>, max_tokens new tokens, or the window (max_target_positions) is full. Nothing is
 * suppressed or rescored. One clip at a time (graphs of batch 1).
 *
 *     bora_transcriber *tr;
 *     bora_transcriber_new(store, mops, model, "whisper", 0, &tr);   // before materialising
 *     ... materialise the store, load the weights ...
 *     bora_transcriber_ready(tr);
 *     bora_transcribe(tr, features, prefix, n_prefix, eot, 448, &ids);  // ids: new tokens */
#ifndef BORA_CORE_TRANSCRIBE_H
#define BORA_CORE_TRANSCRIBE_H

#include "../data/tokenizer.h"
#include "../graph/graph.h"
#include "wer.h"

#include <bora/model.h>

typedef struct bora_transcriber bora_transcriber;

/* Build the graphs on store (before it is materialised). A model whose graphs read no
 * input_features is refused (it is not a speech model). */
bora_status bora_transcriber_new(g_store *store, const bora_model_ops *mops, bora_model *model,
                                 const char *model_name, int no_cache, bora_transcriber **out);
/* Once the store is materialised and holds the weights: check the graphs' outputs. */
bora_status bora_transcriber_ready(bora_transcriber *t);
void bora_transcriber_free(bora_transcriber *t);

/* The features the graphs take, (mel, frame) row-major, and the decoder's window. */
int bora_transcriber_mels(const bora_transcriber *t);
int64_t bora_transcriber_frames(const bora_transcriber *t);
int64_t bora_transcriber_positions(const bora_transcriber *t);
int bora_transcriber_cached(const bora_transcriber *t);

/* Transcribe one clip's features (mels × frames floats) from the start sequence prefix
 * (n_prefix ids): out receives the new tokens, without the prefix or <|endoftext|> (eot). */
bora_status bora_transcribe(bora_transcriber *t, const float *features, const int32_t *prefix,
                            int n_prefix, int32_t eot, int64_t max_tokens, bora_ids *out);

/* A transcript's text: ids decoded with tok, leaving out special tokens and every id from eot
 * on (Whisper's special and timestamp tokens all follow <|endoftext|>). *text is malloc'ed. */
bora_status bora_transcript_text(const bora_tokenizer *tok, const int32_t *ids, size_t n,
                                 int32_t eot, char **text);

#endif

/* The corpus word error rate of greedy transcripts (eval/wer.h): clips 0..n-1, each given by
 * get (its features, mels × frames floats, and its reference text, malloc'ed). A clip that get
 * or the model fails on ends the run with that error. Done clips print a progress line to
 * stderr every progress_every clips (0: none). */
typedef bora_status (*bora_clip_fn)(void *ctx, int64_t i, float *features, char **reference);

bora_status bora_transcribe_wer(bora_transcriber *t, const bora_tokenizer *tok,
                                const int32_t *prefix, int n_prefix, int32_t eot, int64_t n,
                                bora_clip_fn get, void *ctx, int64_t progress_every, bora_wer *w);
