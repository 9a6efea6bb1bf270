/* core/data/cache.h — the token cache: the documents of a list of source files, tokenized once
 * and kept on disk, one shard per file.
 *
 * A shard (shard-NNNNN.bin) holds the file's documents as one flat token array (u16 when the
 * vocabulary fits, else u32; each document closed by the end-of-text id) plus the document
 * offsets and the file's record counts, and a checksum; it is written to a temporary name,
 * synced and renamed, so a shard that exists is complete. Its header also says what it is of:
 * the tokenizer's identity (its hash and vocabulary size), the source's content digest and the
 * tokens' digest. A shard of another tokenizer, or written by an
 * older bora without that identity, is tokenized again (a log line says why), so a cache never
 * gives another tokenizer's ids, even with meta.json gone; ids outside the vocabulary are
 * refused when a shard is loaded. ledger.json is written last, when
 * every shard is: shard, document and token counts, the tokenizer's hash and the sources. The
 * directory is data.cache_dir, by default ${XDG_CACHE_HOME:-~/.cache}/bora/tokens/<key>, where
 * the key hashes the tokenizer, the text field and every source's path, size and modification
 * time; meta.json records them, and a directory made for another tokenizer or other sources is
 * refused (or emptied and rebuilt when asked). A source whose time alone differs from meta.json's
 * is read again and its content digest compared with its shard's: the same content (a `touch`)
 * keeps the shard and meta.json takes the new time; other content is refused as other sources.
 * Without meta.json, every shard is checked so against its source before meta.json is written.
 *
 * Worker threads at idle priority build the missing shards while the cache is already in use:
 * readers see the longest prefix of finished shards in source order, so what they read never
 * depends on the workers' timing, and a shard's bytes depend only on its file and the tokenizer,
 * so any number of workers gives the same cache. One process builds a directory at a time (a
 * lock file); a build that was killed resumes keeping its finished shards. */
#ifndef BORA_CORE_CACHE_H
#define BORA_CORE_CACHE_H

#include "tokenizer.h"

#include <bora/plugin.h>
#include <stdint.h>

typedef struct bora_cache bora_cache;

typedef struct bora_cache_opts {
    const char *const *urls; /* patterns (source.h) */
    size_t n_urls;
    const char *text_key; /* the .jsonl field holding text */
    bora_tokenizer *tok;  /* borrowed; must outlive the cache */
    const char *dir;      /* NULL: the default under the user's cache directory */
    int workers;          /* threads building shards (0: one per core, at most 8) */
    int rebuild;          /* empty a directory made for other sources or another tokenizer */
    double max_bad_fraction;
    const char *what; /* the setting the sources came from, for messages */
    int txt_whole;    /* a .txt file is one document (else its blank-line-separated blocks) */
} bora_cache_opts;

/* Expand the sources, take or make the directory and start the workers for missing shards. */
bora_status bora_cache_open(const bora_cache_opts *o, bora_cache **out);
/* Stop the workers (a shard being built is abandoned) and unmap everything. */
void bora_cache_free(bora_cache *c);

/* Wait until the finished prefix holds at least `tokens` tokens or the cache is complete;
 * *ready gets the tokens of the finished prefix and *done whether it is complete. An error of
 * the build (a bad file, too many bad records) is returned here. */
bora_status bora_cache_wait(bora_cache *c, int64_t tokens, int64_t *ready, int *done);
/* Stop the workers and wake every waiter, which returns an error unless its tokens are ready:
 * for closing a cache another thread may be waiting on. */
void bora_cache_cancel(bora_cache *c);
/* Copy tokens [at, at + n) of the joined stream (they must be ready) as i32. */
void bora_cache_read(bora_cache *c, int64_t at, int64_t n, int32_t *dst);

/* Progress, for a display: shards finished (in any order) of all, documents and tokens in
 * them, source bytes they came from of all; non-blocking. */
typedef struct bora_cache_progress {
    size_t shards_done, shards;
    int64_t documents, tokens;
    uint64_t bytes_done, bytes;
    int done, failed;
} bora_cache_progress;
void bora_cache_progress_get(bora_cache *c, bora_cache_progress *p);

const char *bora_cache_dir(const bora_cache *c);
/* The key: the tokenizer, the text field and the sources (path, size, modification time). */
uint64_t bora_cache_key(const bora_cache *c);
int32_t bora_cache_eos(const bora_cache *c);
/* The digest of what the tokens are made of: the tokenizer's identity, the text field, how a
 * .txt file is read and each source's content in order (held by its shard; a source not yet
 * tokenized is read for it, and one that cannot be read is an error naming it). Not the
 * directory nor the sources' times. */
bora_status bora_cache_digest(bora_cache *c, uint64_t *digest);
/* Shards found finished when the cache was opened (reused, not tokenized again). */
size_t bora_cache_reused(const bora_cache *c);

#endif
