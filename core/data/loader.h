/* core/data/loader.h — training batches from text: documents read from data.train_urls,
 * tokenized, joined with an end-of-text token between them and cut into seq_len windows.
 *
 * Window w holds tokens [w*L, (w+1)*L) of the joined stream as inputs and the tokens one later
 * as targets; a target whose input ends a document is -100 (nothing to predict: attention does
 * not cross documents), and segment ids number the documents inside a window from 0. Row r of
 * batch k is window (k*B + r) mod W — or, shuffled, that index through a keyed permutation of
 * [0, W) (a Feistel network seeded by the run's seed) — so any batch is computed directly from
 * (seed, k): it never depends on which batches came before. */
#ifndef BORA_CORE_LOADER_H
#define BORA_CORE_LOADER_H

#include "tokenizer.h"

#include <bora/plugin.h>
#include <stdint.h>

typedef struct bora_loader bora_loader;

typedef struct bora_loader_opts {
    const char *const *urls; /* files or glob patterns: .jsonl (one JSON object per line) or .txt
                                (documents separated by blank lines) */
    size_t n_urls;
    const char *text_key; /* the .jsonl field holding text */
    bora_tokenizer *tok;  /* borrowed */
    int64_t seq_len;
    uint64_t seed;
    int shuffle;  /* permute the windows (keyed by seed) */
    int progress; /* log what was read */
} bora_loader_opts;

bora_status bora_loader_open(const bora_loader_opts *o, bora_loader **out);
void bora_loader_free(bora_loader *l);

/* Rows [row0, row0 + n) of batch k (of batch_size rows), n * seq_len values each; *loss_tokens
 * gets how many targets are not -100. */
bora_status bora_loader_rows(const bora_loader *l, int64_t k, int64_t batch_size, int64_t row0,
                             int64_t n, int32_t *input_ids, int32_t *targets, int32_t *segment_ids,
                             int64_t *loss_tokens);

int64_t bora_loader_windows(const bora_loader *l);
int64_t bora_loader_tokens(const bora_loader *l);
/* A hash of the token stream (with seq_len): two loaders agree iff they give the same batches. */
uint64_t bora_loader_hash(const bora_loader *l);
/* The keyed permutation of [0, n) the shuffled loader uses: a bijection for any n >= 1. */
uint64_t bora_permute(uint64_t seed, uint64_t n, uint64_t i);

/* The end-of-text id used between documents. */
int32_t bora_loader_eos(const bora_loader *l);

#endif
