/* core/data/loader.c — the loader over the token cache (see loader.h). */
#include "loader.h"

#include "../util/log.h"
#include "../util/str.h"
#include "cache.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct bora_loader {
    bora_cache *cache;
    int64_t seq_len;
    int64_t shuffle; /* 0, 1 (all windows) or an era length */
    uint64_t seed;
    int32_t eos;
    uint64_t hash;
    /* once the cache is complete */
    int done;
    int64_t n_tokens, windows;
};

static const char *const eos_names[] = {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", NULL};

int32_t bora_eos_id(const bora_tokenizer *tok)
{
    int32_t eos = -1;
    for (const char *const *n = eos_names; *n && eos < 0; n++)
        eos = bora_tokenizer_token_id(tok, *n);
    return eos;
}

/* Wait for the cache to be complete and note its size. */
static bora_status finish(bora_loader *l)
{
    if (l->done)
        return BORA_OK;
    int64_t ready = 0;
    int done = 0;
    bora_status st = bora_cache_wait(l->cache, INT64_MAX, &ready, &done);
    if (st != BORA_OK)
        return st;
    if (ready < l->seq_len + 1)
        return bora_error_set(BORA_ERR_INVALID,
                              "data: %lld tokens in all, not enough for one window of seq_len %lld",
                              (long long)ready, (long long)l->seq_len);
    l->n_tokens = ready;
    l->windows = (ready - 1) / l->seq_len;
    l->done = 1;
    return BORA_OK;
}

void bora_loader_cache_opts(const bora_loader_opts *o, bora_cache_opts *co)
{
    *co = (bora_cache_opts){o->urls,    o->n_urls,  o->text_key,         o->tok, o->cache_dir,
                            o->workers, o->rebuild, o->max_bad_fraction, o->what};
}

bora_status bora_loader_open(const bora_loader_opts *o, bora_loader **out)
{
    *out = NULL;
    if (o->seq_len < 2)
        return bora_error_set(BORA_ERR_INVALID, "data: seq_len %lld is too short",
                              (long long)o->seq_len);
    double t0 = bora_now_s();
    bora_cache_opts co;
    bora_loader_cache_opts(o, &co);
    bora_loader *l = calloc(1, sizeof *l);
    if (!l)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    bora_status st = bora_cache_open(&co, &l->cache);
    if (st != BORA_OK) {
        free(l);
        return st;
    }
    l->seq_len = o->seq_len;
    l->shuffle = o->shuffle < 0 ? 0 : o->shuffle;
    l->seed = o->seed;
    l->eos = bora_cache_eos(l->cache);
    uint64_t key = bora_cache_key(l->cache);
    l->hash =
        bora_fnv1a(bora_fnv1a(BORA_FNV_SEED, &key, sizeof key), &o->seq_len, sizeof o->seq_len);
    /* The first window, at least; all of them for a full permutation. */
    int64_t ready = 0;
    int done = 0;
    st = bora_cache_wait(l->cache, l->seq_len + 1, &ready, &done);
    if (st == BORA_OK && !done && l->shuffle == 1) {
        bora_log(BORA_LOG_INFO, "data: shuffle: true permutes every window, so it waits for the "
                                "whole cache (an era length, shuffle: N, starts sooner)");
        st = finish(l);
    } else if (st == BORA_OK && done) {
        st = finish(l);
    }
    if (st != BORA_OK) {
        bora_loader_free(l);
        return st;
    }
    if (o->progress) {
        bora_cache_progress p;
        bora_cache_progress_get(l->cache, &p);
        if (p.done)
            bora_log(BORA_LOG_INFO,
                     "data: %zu files, %.1f MB, %lld documents, %lld tokens, %lld windows of "
                     "%lld (%s %s, %.1f s)",
                     p.shards, (double)p.bytes / 1e6, (long long)p.documents,
                     (long long)l->n_tokens, (long long)l->windows, (long long)l->seq_len,
                     bora_cache_reused(l->cache) == p.shards ? "cached in" : "tokenized into",
                     bora_cache_dir(l->cache), bora_now_s() - t0);
        else
            bora_log(BORA_LOG_INFO,
                     "data: %zu of %zu files tokenized so far (%lld tokens); the rest follow "
                     "while training runs (%s)",
                     p.shards_done, p.shards, (long long)ready, bora_cache_dir(l->cache));
    }
    *out = l;
    return BORA_OK;
}

void bora_loader_free(bora_loader *l)
{
    if (!l)
        return;
    bora_cache_free(l->cache);
    free(l);
}

static uint64_t era_key(uint64_t seed, uint64_t era)
{
    return bora_fnv1a(seed, &era, sizeof era);
}

/* The window row i (k*B + r) reads: the identity, a permutation of all windows, or of each era;
 * i past the last window wraps. Waits for the windows the answer depends on. */
static bora_status window_of(bora_loader *l, uint64_t i, uint64_t *w)
{
    uint64_t L = (uint64_t)l->seq_len, E = l->shuffle > 1 ? (uint64_t)l->shuffle : 0;
    if (!l->done) {
        /* i < W is known once the finished prefix holds window i (or its era); otherwise the
         * cache must be complete to know W */
        uint64_t last = E ? (i / E + 1) * E - 1 : i;
        int64_t ready = 0;
        int done = 0;
        bora_status st = bora_cache_wait(l->cache, (int64_t)((last + 1) * L + 1), &ready, &done);
        if (st != BORA_OK)
            return st;
        if (done && (st = finish(l)) != BORA_OK)
            return st;
        if (!l->done) {
            *w = E ? (i / E) * E + bora_permute(era_key(l->seed, i / E), E, i % E) : i;
            return BORA_OK;
        }
    }
    uint64_t W = (uint64_t)l->windows;
    i %= W;
    if (l->shuffle == 1)
        *w = bora_permute(l->seed, W, i);
    else if (E) {
        uint64_t e = i / E, n = W - e * E < E ? W - e * E : E;
        *w = e * E + bora_permute(era_key(l->seed, e), n, i % E);
    } else
        *w = i;
    return BORA_OK;
}

bora_status bora_loader_rows(bora_loader *l, int64_t k, int64_t batch_size, int64_t row0, int64_t n,
                             int32_t *input_ids, int32_t *targets, int32_t *segment_ids,
                             int64_t *loss_tokens)
{
    if (k < 0 || row0 < 0 || n < 0 || row0 + n > batch_size)
        return bora_error_set(BORA_ERR_INVALID, "loader: rows %lld..%lld of a batch of %lld",
                              (long long)row0, (long long)(row0 + n), (long long)batch_size);
    int64_t L = l->seq_len, count = 0;
    int32_t *src = malloc(sizeof(int32_t) * (size_t)(L + 1));
    if (!src)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    for (int64_t r = 0; r < n; r++) {
        uint64_t i = (uint64_t)k * (uint64_t)batch_size + (uint64_t)(row0 + r), w;
        bora_status st = window_of(l, i, &w);
        if (st != BORA_OK) {
            free(src);
            return st;
        }
        bora_cache_read(l->cache, (int64_t)(w * (uint64_t)L), L + 1, src);
        int32_t *in = input_ids + r * L, *tg = targets + r * L, *sg = segment_ids + r * L;
        int32_t seg = 0;
        for (int64_t t = 0; t < L; t++) {
            in[t] = src[t];
            sg[t] = seg;
            if (src[t] == l->eos) {
                tg[t] = -100;
                seg++;
            } else {
                tg[t] = src[t + 1];
                count++;
            }
        }
    }
    free(src);
    *loss_tokens = count;
    return BORA_OK;
}

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Four Feistel rounds over 2h bits (2^2h >= n), walking the cycle until the value is below n:
 * a bijection of [0, n), as each round is one and cycle-walking keeps it one. */
uint64_t bora_permute(uint64_t seed, uint64_t n, uint64_t i)
{
    if (n <= 1)
        return 0;
    int bits = 64 - __builtin_clzll(n - 1);
    int h = (bits + 1) / 2;
    uint64_t mask = (1ull << h) - 1, keys[4], state = seed ^ 0x6c6f61646572ull; /* "loader" */
    for (int r = 0; r < 4; r++)
        keys[r] = splitmix64(&state);
    uint64_t x = i;
    do {
        uint64_t left = x >> h, right = x & mask;
        for (int r = 0; r < 4; r++) {
            uint64_t f = right ^ keys[r];
            f = splitmix64(&f) & mask;
            uint64_t next = left ^ f;
            left = right;
            right = next;
        }
        x = (left << h) | right;
    } while (x >= n);
    return x;
}

int64_t bora_loader_windows(bora_loader *l)
{
    return finish(l) == BORA_OK ? l->windows : 0;
}

int64_t bora_loader_tokens(bora_loader *l)
{
    return finish(l) == BORA_OK ? l->n_tokens : 0;
}

const char *bora_loader_cache_dir(const bora_loader *l)
{
    return bora_cache_dir(l->cache);
}

uint64_t bora_loader_hash(const bora_loader *l)
{
    return l->hash;
}

int32_t bora_loader_eos(const bora_loader *l)
{
    return l->eos;
}
