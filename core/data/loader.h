/* core/data/loader.h — training batches from text: documents from data.train_urls, tokenized
 * into the token cache (cache.h), joined with an end-of-text token between them and cut into
 * seq_len windows.
 *
 * Window w holds tokens [w*L, (w+1)*L) of the joined stream as inputs and the tokens one later
 * as targets; a target whose input ends a document is -100 (nothing to predict: attention does
 * not cross documents), and segment ids number the documents inside a window from 0. Row r of
 * batch k is window i = (k*B + r) mod W — or, shuffled, i through a keyed permutation of [0, W)
 * (a Feistel network seeded by the run's seed), or with an era length E through a permutation
 * of its era [E*(i/E), E*(i/E+1)) keyed by (seed, era) — so any batch is computed directly from
 * (seed, k): it never depends on which batches came before.
 *
 * While the cache is still being built, a row waits only for the windows it reads (its era's,
 * with eras); a full permutation and anything past the last window wait for the whole cache, as
 * W decides them. So the batches are the same whenever the workers finish. */
#ifndef BORA_CORE_LOADER_H
#define BORA_CORE_LOADER_H

#include "cache.h"
#include "tokenizer.h"

#include <bora/plugin.h>
#include <stdint.h>

typedef struct bora_loader bora_loader;

typedef struct bora_loader_opts {
    const char *const *urls; /* files or patterns (see source.h): .jsonl (one JSON object per
                                line) or .txt (documents separated by blank lines), plain, gzip
                                or zstd (detected by content) */
    size_t n_urls;
    const char *text_key; /* the .jsonl field holding text */
    bora_tokenizer *tok;  /* borrowed */
    int64_t seq_len;
    uint64_t seed;
    int64_t shuffle;         /* 0: in order; 1: permute all windows; E > 1: within eras of E */
    int progress;            /* log what was read */
    double max_bad_fraction; /* bad records (invalid JSON or UTF-8, no text field) allowed, as
                                a fraction of all; each is named or counted, then skipped */
    const char *what;        /* the setting the files came from, for messages */
    const char *cache_dir;   /* NULL: the default (cache.h) */
    int workers;             /* cache workers (0: one per core) */
    int rebuild;             /* rebuild a cache made for other sources or another tokenizer */
} bora_loader_opts;

bora_status bora_loader_open(const bora_loader_opts *o, bora_loader **out);
/* The options of the token cache a loader with these options reads (to build it alone). */
void bora_loader_cache_opts(const bora_loader_opts *o, bora_cache_opts *co);
/* The tokenizer's end-of-text id (<|endoftext|>, <|end_of_text|>, </s> or <eos>), or -1. */
int32_t bora_eos_id(const bora_tokenizer *tok);
void bora_loader_free(bora_loader *l);

/* Rows [row0, row0 + n) of batch k (of batch_size rows), n * seq_len values each; *loss_tokens
 * gets how many targets are not -100. */
bora_status bora_loader_rows(bora_loader *l, int64_t k, int64_t batch_size, int64_t row0, int64_t n,
                             int32_t *input_ids, int32_t *targets, int32_t *segment_ids,
                             int64_t *loss_tokens);

/* Windows and tokens in all: these wait for the whole cache (0 if it failed). */
int64_t bora_loader_windows(bora_loader *l);
int64_t bora_loader_tokens(bora_loader *l);
const char *bora_loader_cache_dir(const bora_loader *l);
/* The cache key (tokenizer, text field, sources) with seq_len: known before the cache is. */
uint64_t bora_loader_hash(const bora_loader *l);
/* The keyed permutation of [0, n) the shuffled loader uses: a bijection for any n >= 1. */
uint64_t bora_permute(uint64_t seed, uint64_t n, uint64_t i);

/* The end-of-text id used between documents. */
int32_t bora_loader_eos(const bora_loader *l);

#endif
