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
    int64_t skip_windows;    /* the first windows are held out (bora_loader_carve) */
    int prefetch;            /* a thread fetches batch k + 1 while batch k trains */
    int txt_whole;           /* a .txt file is one document */
    /* data.type: audio (audio_cache.h): urls name manifests of clips, and a row is one clip:
     * input_ids its tokens (start sequence, text, <|endoftext|>) padded with <|endoftext|> to
     * seq_len, targets one later with -100 where a start-sequence token would be predicted and
     * on padding, segment_ids 0, and its features from bora_loader_features. */
    int audio;
    const char *audio_key;
    const int32_t *prefix; /* the start sequence, n_prefix ids */
    int n_prefix;
    int n_mels;
    int64_t frames;
} bora_loader_opts;

/* A mixture of datasets: row i of the joined batches (k * batch_size + r) falls in block
 * i / block; within a stage (from stage_step[s] on) every block holds exactly counts[d] rows of
 * part d — its weight's share of the block, rounded by largest remainder — at positions a keyed
 * permutation of the block chooses, so the proportions are exact in every block, and part d's
 * rows are read in its own order (its shuffle) one after the other across blocks and stages. */
typedef struct bora_mixture_opts {
    size_t n_stages;
    const int64_t *stage_step; /* the step each stage starts at: 0 first, increasing; each
                                  stage's first row a multiple of block */
    const double *weights;     /* n_stages x parts, not all 0 in a stage; normalised */
    int64_t block;             /* rows per block */
    int64_t batch_size;        /* rows per step, to place the stages */
    int prefetch;
} bora_mixture_opts;

bora_status bora_loader_open(const bora_loader_opts *o, bora_loader **out);
/* A mixture of the n parts (names for messages); each part's prefetch is ignored. */
bora_status bora_loader_open_mixture(const bora_loader_opts *parts, const char *const *names,
                                     size_t n, const bora_mixture_opts *m, bora_loader **out);
/* The rows per block of each part in a stage (n_parts values); returns the block, 0 if l is not
 * a mixture or has no such stage. */
int64_t bora_loader_mixture_counts(const bora_loader *l, size_t stage, int64_t *counts);
/* A validation loader over the first n windows of train's (unshuffled) stream, which train
 * opened with skip_windows = n; it shares train's cache and must be freed first. */
bora_status bora_loader_carve(bora_loader *train, int64_t n, bora_loader **out);
/* The options of the token cache a loader with these options reads (to build it alone). */
void bora_loader_cache_opts(const bora_loader_opts *o, bora_cache_opts *co);
/* The same of an audio loader's cache (audio_cache.h). */
struct bora_audio_cache_opts;
void bora_loader_audio_cache_opts(const bora_loader_opts *o, struct bora_audio_cache_opts *ao);
/* The tokenizer's end-of-text id (<|endoftext|>, <|end_of_text|>, </s> or <eos>), or -1. */
int32_t bora_eos_id(const bora_tokenizer *tok);
void bora_loader_free(bora_loader *l);

/* Rows [row0, row0 + n) of batch k (of batch_size rows), n * seq_len values each; *loss_tokens
 * gets how many targets are not -100. */
bora_status bora_loader_rows(bora_loader *l, int64_t k, int64_t batch_size, int64_t row0, int64_t n,
                             int32_t *input_ids, int32_t *targets, int32_t *segment_ids,
                             int64_t *loss_tokens);

/* An audio loader's features of rows [row0, row0 + n) of batch k (the rows bora_loader_rows
 * gives): n * n_mels * frames floats, each row (mel, frame) row-major. */
bora_status bora_loader_features(bora_loader *l, int64_t k, int64_t batch_size, int64_t row0,
                                 int64_t n, float *features);
/* Whether l is an audio loader, and its features' shape. */
int bora_loader_audio(const bora_loader *l, int *n_mels, int64_t *frames);

/* Windows and tokens in all (a mixture: of its parts; audio: clips and their tokens): these
 * wait for the whole cache (0 if it failed). With skip_windows, the windows rows read (the rest); a carved set's tokens are its
 * windows' (and the one after). */
int64_t bora_loader_windows(bora_loader *l);
int64_t bora_loader_tokens(bora_loader *l);
const char *bora_loader_cache_dir(const bora_loader *l);
/* What the batches are made of: the digest of the data's content (bora_cache_digest) with
 * seq_len, the mixture's blocks or the held-out windows, into *hash. Not where the cache lives
 * nor the sources' times. A source not yet tokenized is read for it: one that cannot be read
 * is an error naming it (and *hash is 0, never to be recorded). */
bora_status bora_loader_hash(const bora_loader *l, uint64_t *hash);
/* The keyed permutation of [0, n) the shuffled loader uses: a bijection for any n >= 1. */
uint64_t bora_permute(uint64_t seed, uint64_t n, uint64_t i);

/* The end-of-text id used between documents. */
int32_t bora_loader_eos(const bora_loader *l);

#endif
