/* core/data/audio_cache.h — the audio cache: the clips of a list of manifests, decoded to
 * log-mel features and their texts tokenized once, kept on disk, one shard per manifest.
 *
 * A manifest is a .jsonl file (plain, .gz or .zst) of one clip per line:
 *
 *     {"audio": "clips/0001.flac", "text": "The quick brown fox."}
 *
 * the clip a path relative to the manifest's directory (or its URL's), an absolute path or an
 * http(s) URL; anything libsndfile reads (WAV, FLAC, Ogg), any rate and channel count
 * (core/data/audio). A shard (shard-NNNNN.bin) holds, per clip in manifest order, its features
 * (n_mels x frames f32, exactly bora_mel_of_bytes' bits; the frames after the clip ends, all one
 * value, kept as that value) and its decoder tokens: the start sequence, the text's tokens,
 * <|endoftext|>. Its header says what it is of: the tokenizer's identity, the start sequence,
 * n_mels, frames and the longest token sequence allowed, the manifest's content digest, and per
 * clip its file's content digest (and size and time, to notice a changed clip). It is written to
 * a temporary name, synced and renamed, with a checksum a reader verifies: a corrupt shard is
 * refused with the reason (or made again with rebuild).
 *
 * A clip that cannot be an example — unreadable, not audio, empty, longer than the window,
 * holding a NaN or infinity, no audio or text field, text whose tokens exceed max_tokens — is
 * named with its manifest file and line and skipped; together with the bad records they may be
 * max_bad_fraction of all.
 *
 * The directory is data.cache_dir, by default ${XDG_CACHE_HOME:-~/.cache}/bora/audio/<key>, the
 * key a hash of all the above and every manifest's path, size and modification time; meta.json
 * records them, and a directory made for anything else is refused (or emptied and rebuilt when
 * asked). Worker threads at idle priority build the missing shards; a shard's bytes depend only
 * on its manifest, its clips and the identity, so any number of workers gives the same cache. One
 * process builds a directory at a time (a lock file); a killed build resumes keeping its finished
 * shards. Readers wait for the whole cache (bora_audio_cache_wait). */
#ifndef BORA_CORE_AUDIO_CACHE_H
#define BORA_CORE_AUDIO_CACHE_H

#include "cache.h"
#include "tokenizer.h"

#include <bora/plugin.h>
#include <stdint.h>

typedef struct bora_audio_cache bora_audio_cache;

typedef struct bora_audio_cache_opts {
    const char *const *urls; /* manifest patterns (source.h) */
    size_t n_urls;
    const char *audio_key, *text_key; /* the fields of a manifest line */
    bora_tokenizer *tok;              /* borrowed; must outlive the cache */
    const int32_t *prefix;            /* the start sequence (audio/prefix.h) */
    int n_prefix;
    int n_mels;         /* mel bins */
    int64_t frames;     /* feature frames: the window is frames * 160 samples */
    int64_t max_tokens; /* a clip's tokens (start + text + end) at most this */
    const char *dir;    /* NULL: the default under the user's cache directory */
    int workers;        /* threads building shards (0: one per core, at most 8) */
    int rebuild;        /* empty a directory made for anything else; remake corrupt shards */
    double max_bad_fraction;
    const char *what; /* the setting the manifests came from, for messages */
} bora_audio_cache_opts;

/* Expand the manifests, take or make the directory and start the workers for missing shards. */
bora_status bora_audio_cache_open(const bora_audio_cache_opts *o, bora_audio_cache **out);
/* Stop the workers (a shard being built is abandoned) and unmap everything. */
void bora_audio_cache_free(bora_audio_cache *c);
/* Wait until every shard is finished; an error of the build (a bad manifest, too many bad
 * clips) is returned here. */
bora_status bora_audio_cache_wait(bora_audio_cache *c);
/* After a successful wait: the clips, and clip i's features (n_mels * frames floats, row-major
 * (mel, frame)) and tokens (*n of them, at most max_tokens). */
int64_t bora_audio_cache_examples(const bora_audio_cache *c);
void bora_audio_cache_example(const bora_audio_cache *c, int64_t i, float *features,
                              int32_t *tokens, int64_t *n);
/* The features' shape: n_mels and frames. */
void bora_audio_cache_shape(const bora_audio_cache *c, int *n_mels, int64_t *frames);
/* Progress for a display, non-blocking: documents are clips, tokens their tokens. */
void bora_audio_cache_progress_get(bora_audio_cache *c, bora_cache_progress *p);
const char *bora_audio_cache_dir(const bora_audio_cache *c);
size_t bora_audio_cache_reused(const bora_audio_cache *c);
/* After a successful wait: the digest of what the examples are made of (the identity, each
 * manifest's content and each clip's), not of where the cache lives. */
uint64_t bora_audio_cache_digest(const bora_audio_cache *c);

#endif
