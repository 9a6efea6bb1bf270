/* core/data/loader.c — the loader over the token cache (see loader.h). */
#include "loader.h"

#include "../util/log.h"
#include "../util/str.h"
#include "audio_cache.h"
#include "cache.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct bora_loader {
    /* one source (parts == NULL) */
    bora_cache *cache;
    bora_audio_cache *audio; /* or clips (data.type: audio): a window is a clip */
    int32_t n_prefix;
    int owns_cache;
    int64_t seq_len;
    int64_t shuffle; /* 0, 1 (all windows) or an era length */
    uint64_t seed;
    int32_t eos;
    uint64_t hash;
    int64_t skip;  /* windows [0, skip) are held out (validation): rows read the rest */
    int64_t limit; /* > 0: only windows [0, limit) (the held-out set itself) */
    /* once the windows are known (the cache complete, or holding `limit` windows) */
    int done;
    int64_t windows, all_tokens; /* usable windows; tokens in the cache (or limit) */

    /* a mixture: rows come from parts, in blocks of `block` rows with fixed counts per stage */
    bora_loader **parts;
    size_t n_parts, n_stages;
    int64_t block;
    int64_t *stage_row; /* the first row of each stage (a multiple of block) */
    int64_t *counts;    /* rows of each part per block, n_stages x n_parts */
    int64_t *base;      /* rows each part gave before the stage, n_stages x n_parts */

    /* one batch fetched ahead by a thread, and one fetch at a time either way */
    pthread_mutex_t fetch_mu;
    int prefetch;
    pthread_t thread;
    pthread_mutex_t pf_mu;
    pthread_cond_t pf_cv;
    int pf_stop, pf_state; /* IDLE, WANTED, READY or FAILED */
    int64_t pf_k, pf_batch;
    size_t pf_cap; /* rows the buffers hold */
    int32_t *pf_ids, *pf_targets, *pf_segs;
    int64_t *pf_counts; /* loss tokens per row */
};

enum { PF_IDLE, PF_WANTED, PF_READY, PF_FAILED };

static bora_status start_prefetch(bora_loader *l);

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
    if (l->done || l->audio)
        return BORA_OK;
    int64_t ready = 0, L = l->seq_len;
    int done = 0;
    bora_status st =
        bora_cache_wait(l->cache, l->limit > 0 ? l->limit * L + 1 : INT64_MAX, &ready, &done);
    if (st != BORA_OK)
        return st;
    if (ready < L + 1)
        return bora_error_set(BORA_ERR_INVALID,
                              "data: %lld tokens in all, not enough for one window of seq_len %lld",
                              (long long)ready, (long long)L);
    int64_t all = (ready - 1) / L;
    if (l->limit > 0) {
        l->windows = all < l->limit ? all : l->limit;
    } else {
        if (all <= l->skip)
            return bora_error_set(BORA_ERR_INVALID,
                                  "data.validation_windows: %lld windows held out of %lld in all "
                                  "leave none to train on",
                                  (long long)l->skip, (long long)all);
        l->windows = all - l->skip;
    }
    l->all_tokens = l->limit > 0 ? l->windows * L + 1 : ready;
    l->done = 1;
    return BORA_OK;
}

void bora_loader_cache_opts(const bora_loader_opts *o, bora_cache_opts *co)
{
    *co = (bora_cache_opts){o->urls,    o->n_urls,  o->text_key,         o->tok,  o->cache_dir,
                            o->workers, o->rebuild, o->max_bad_fraction, o->what, o->txt_whole};
}

void bora_loader_audio_cache_opts(const bora_loader_opts *o, bora_audio_cache_opts *ao)
{
    *ao = (bora_audio_cache_opts){.urls = o->urls,
                                  .n_urls = o->n_urls,
                                  .audio_key = o->audio_key,
                                  .text_key = o->text_key,
                                  .tok = o->tok,
                                  .prefix = o->prefix,
                                  .n_prefix = o->n_prefix,
                                  .n_mels = o->n_mels,
                                  .frames = o->frames,
                                  .max_tokens = o->seq_len,
                                  .dir = o->cache_dir,
                                  .workers = o->workers,
                                  .rebuild = o->rebuild,
                                  .max_bad_fraction = o->max_bad_fraction,
                                  .what = o->what};
}

/* A loader over an audio cache: every clip is there before the first row is read. */
static bora_status open_audio(const bora_loader_opts *o, bora_loader **out)
{
    bora_audio_cache_opts ao;
    bora_loader_audio_cache_opts(o, &ao);
    bora_loader *l = calloc(1, sizeof *l);
    if (!l)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&l->fetch_mu, NULL);
    bora_status st = bora_audio_cache_open(&ao, &l->audio);
    if (st == BORA_OK)
        st = bora_audio_cache_wait(l->audio);
    if (st != BORA_OK) {
        bora_loader_free(l);
        return st;
    }
    l->seq_len = o->seq_len;
    l->shuffle = o->shuffle < 0 ? 0 : o->shuffle;
    l->seed = o->seed;
    l->eos = bora_eos_id(o->tok);
    l->n_prefix = o->n_prefix;
    l->hash = bora_fnv1a(BORA_FNV_SEED, "audio", 5);
    l->hash = bora_fnv1a(l->hash, &o->seq_len, sizeof o->seq_len);
    l->windows = bora_audio_cache_examples(l->audio);
    bora_cache_progress p;
    bora_audio_cache_progress_get(l->audio, &p);
    l->all_tokens = p.tokens;
    l->done = 1;
    if (o->progress)
        bora_log(BORA_LOG_INFO, "data: %s: %lld clips, %lld tokens (%zu of %zu manifests reused)",
                 o->what ? o->what : "data", (long long)l->windows, (long long)p.tokens,
                 bora_audio_cache_reused(l->audio), p.shards);
    *out = l;
    return BORA_OK;
}

bora_status bora_loader_open(const bora_loader_opts *o, bora_loader **out)
{
    *out = NULL;
    if (o->audio && o->seq_len >= 2)
        return open_audio(o, out);
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
    l->owns_cache = 1;
    pthread_mutex_init(&l->fetch_mu, NULL);
    l->seq_len = o->seq_len;
    l->skip = o->skip_windows > 0 ? o->skip_windows : 0;
    l->shuffle = o->shuffle < 0 ? 0 : o->shuffle;
    l->seed = o->seed;
    l->eos = bora_cache_eos(l->cache);
    l->hash = bora_fnv1a(BORA_FNV_SEED, &o->seq_len, sizeof o->seq_len);
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
    if (st == BORA_OK && o->prefetch)
        st = start_prefetch(l);
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
                     (long long)l->all_tokens, (long long)(l->windows + l->skip),
                     (long long)l->seq_len,
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

/* Wake whatever waits on l's caches (the prefetch thread, for a batch past the data so far). */
static void cancel(bora_loader *l)
{
    if (l->cache)
        bora_cache_cancel(l->cache);
    /* (an audio loader has no build to wait for: it waited for its whole cache) */
    for (size_t i = 0; i < l->n_parts; i++)
        cancel(l->parts[i]);
}

void bora_loader_free(bora_loader *l)
{
    if (!l)
        return;
    if (l->prefetch) {
        cancel(l);
        pthread_mutex_lock(&l->pf_mu);
        l->pf_stop = 1;
        pthread_cond_broadcast(&l->pf_cv);
        pthread_mutex_unlock(&l->pf_mu);
        pthread_join(l->thread, NULL);
        pthread_mutex_destroy(&l->pf_mu);
        pthread_cond_destroy(&l->pf_cv);
    }
    free(l->pf_ids);
    free(l->pf_targets);
    free(l->pf_segs);
    free(l->pf_counts);
    for (size_t i = 0; i < l->n_parts; i++)
        bora_loader_free(l->parts[i]);
    free(l->parts);
    free(l->stage_row);
    free(l->counts);
    free(l->base);
    if (l->owns_cache)
        bora_cache_free(l->cache);
    bora_audio_cache_free(l->audio);
    pthread_mutex_destroy(&l->fetch_mu);
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
        uint64_t last = (uint64_t)l->skip + (E ? (i / E + 1) * E - 1 : i);
        int64_t ready = 0;
        int done = 0;
        bora_status st = bora_cache_wait(l->cache, (int64_t)((last + 1) * L + 1), &ready, &done);
        if (st != BORA_OK)
            return st;
        if (done && (st = finish(l)) != BORA_OK)
            return st;
        if (!l->done) {
            *w = (uint64_t)l->skip +
                 (E ? (i / E) * E + bora_permute(era_key(l->seed, i / E), E, i % E) : i);
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
    *w += (uint64_t)l->skip;
    return BORA_OK;
}

/* Clip w as a row: its tokens, then <|endoftext|> as padding; each position predicts the next
 * token, except a start-sequence token (given, not learnt) and past the clip's last token. */
static void fill_clip(bora_loader *l, uint64_t w, int32_t *src, int32_t *in, int32_t *tg,
                      int32_t *sg, int64_t *count)
{
    int64_t L = l->seq_len, n = 0, len = 0;
    bora_audio_cache_example(l->audio, (int64_t)w, NULL, src, &len);
    for (int64_t t = 0; t < L; t++) {
        in[t] = t < len ? src[t] : l->eos;
        sg[t] = 0;
        tg[t] = t + 1 < len && t + 1 >= l->n_prefix ? src[t + 1] : -100;
        n += tg[t] >= 0;
    }
    *count = n;
}

/* Row i of a one-source loader: window_of(i), packed. */
static bora_status fill_row(bora_loader *l, uint64_t i, int32_t *src, int32_t *in, int32_t *tg,
                            int32_t *sg, int64_t *count)
{
    uint64_t w;
    bora_status st = window_of(l, i, &w);
    if (st != BORA_OK)
        return st;
    if (l->audio) {
        fill_clip(l, w, src, in, tg, sg, count);
        return BORA_OK;
    }
    int64_t L = l->seq_len, n = 0;
    bora_cache_read(l->cache, (int64_t)(w * (uint64_t)L), L + 1, src);
    int32_t seg = 0;
    for (int64_t t = 0; t < L; t++) {
        in[t] = src[t];
        sg[t] = seg;
        if (src[t] == l->eos) {
            tg[t] = -100;
            seg++;
        } else {
            tg[t] = src[t + 1];
            n++;
        }
    }
    *count = n;
    return BORA_OK;
}

static uint64_t block_key(uint64_t seed, uint64_t block)
{
    return bora_fnv1a(seed ^ 0x6d6978ull /* "mix" */, &block, sizeof block);
}

/* Which part row i of a mixture comes from, and that part's row index. */
static void locate(const bora_loader *l, uint64_t i, size_t *part, uint64_t *j)
{
    size_t s = l->n_stages - 1, n = l->n_parts;
    while (s > 0 && (uint64_t)l->stage_row[s] > i)
        s--;
    uint64_t S = (uint64_t)l->block, off = i - (uint64_t)l->stage_row[s], b = off / S;
    uint64_t p = bora_permute(block_key(l->seed, (uint64_t)l->stage_row[s] / S + b), S, off % S);
    uint64_t start = 0;
    for (size_t d = 0; d < n; d++) {
        uint64_t c = (uint64_t)l->counts[s * n + d];
        if (p < start + c) {
            *part = d;
            *j = (uint64_t)l->base[s * n + d] + b * c + (p - start);
            return;
        }
        start += c;
    }
    *part = 0, *j = 0; /* not reached: the counts add up to the block */
}

static int64_t loader_seq_len(const bora_loader *l)
{
    return l->parts ? l->parts[0]->seq_len : l->seq_len;
}

/* Rows [row0, row0 + n) of batch k, computed here; counts[r] gets row r's loss tokens. */
static bora_status fetch(bora_loader *l, int64_t k, int64_t batch_size, int64_t row0, int64_t n,
                         int32_t *input_ids, int32_t *targets, int32_t *segment_ids,
                         int64_t *counts)
{
    int64_t L = loader_seq_len(l);
    int32_t *src = malloc(sizeof(int32_t) * (size_t)(L + 1));
    if (!src)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    bora_status st = BORA_OK;
    pthread_mutex_lock(&l->fetch_mu);
    for (int64_t r = 0; r < n && st == BORA_OK; r++) {
        uint64_t i = (uint64_t)k * (uint64_t)batch_size + (uint64_t)(row0 + r), j = i;
        size_t d = 0;
        bora_loader *from = l;
        if (l->parts) {
            locate(l, i, &d, &j);
            from = l->parts[d];
        }
        st = fill_row(from, j, src, input_ids + r * L, targets + r * L, segment_ids + r * L,
                      &counts[r]);
    }
    pthread_mutex_unlock(&l->fetch_mu);
    free(src);
    return st;
}

static void *prefetcher(void *arg)
{
    bora_loader *l = arg;
    int64_t L = loader_seq_len(l);
    pthread_mutex_lock(&l->pf_mu);
    for (;;) {
        while (!l->pf_stop && l->pf_state != PF_WANTED)
            pthread_cond_wait(&l->pf_cv, &l->pf_mu);
        if (l->pf_stop)
            break;
        int64_t k = l->pf_k, B = l->pf_batch;
        pthread_mutex_unlock(&l->pf_mu);
        /* the buffers are this thread's while the state is WANTED */
        bora_status st = BORA_OK;
        if ((size_t)B > l->pf_cap) {
            size_t cells = (size_t)(B * L);
            free(l->pf_ids), free(l->pf_targets), free(l->pf_segs), free(l->pf_counts);
            l->pf_ids = malloc(cells * sizeof(int32_t));
            l->pf_targets = malloc(cells * sizeof(int32_t));
            l->pf_segs = malloc(cells * sizeof(int32_t));
            l->pf_counts = malloc((size_t)B * sizeof(int64_t));
            l->pf_cap = l->pf_ids && l->pf_targets && l->pf_segs && l->pf_counts ? (size_t)B : 0;
        }
        if (!l->pf_cap)
            st = BORA_ERR_NOMEM;
        else
            st = fetch(l, k, B, 0, B, l->pf_ids, l->pf_targets, l->pf_segs, l->pf_counts);
        pthread_mutex_lock(&l->pf_mu);
        if (l->pf_k == k && l->pf_batch == B && l->pf_state == PF_WANTED) {
            l->pf_state = st == BORA_OK ? PF_READY : PF_FAILED;
            pthread_cond_broadcast(&l->pf_cv);
        }
    }
    pthread_mutex_unlock(&l->pf_mu);
    return NULL;
}

static bora_status start_prefetch(bora_loader *l)
{
    pthread_mutex_init(&l->pf_mu, NULL);
    pthread_cond_init(&l->pf_cv, NULL);
    if (pthread_create(&l->thread, NULL, prefetcher, l) != 0) {
        pthread_mutex_destroy(&l->pf_mu);
        pthread_cond_destroy(&l->pf_cv);
        return bora_error_set(BORA_ERR_IO, "data: cannot start the prefetch thread");
    }
    l->prefetch = 1;
    return BORA_OK;
}

bora_status bora_loader_rows(bora_loader *l, int64_t k, int64_t batch_size, int64_t row0, int64_t n,
                             int32_t *input_ids, int32_t *targets, int32_t *segment_ids,
                             int64_t *loss_tokens)
{
    if (k < 0 || row0 < 0 || n < 0 || row0 + n > batch_size)
        return bora_error_set(BORA_ERR_INVALID, "loader: rows %lld..%lld of a batch of %lld",
                              (long long)row0, (long long)(row0 + n), (long long)batch_size);
    int64_t L = loader_seq_len(l), *counts = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    if (!counts)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    bora_status st = BORA_OK;
    int served = 0;
    if (l->prefetch) {
        /* the batch fetched ahead, when it is this one (a failure is fetched again here, so
         * that its message is this thread's) */
        pthread_mutex_lock(&l->pf_mu);
        if (l->pf_k == k && l->pf_batch == batch_size && l->pf_state != PF_IDLE) {
            while (l->pf_state == PF_WANTED)
                pthread_cond_wait(&l->pf_cv, &l->pf_mu);
            if (l->pf_state == PF_READY) {
                size_t at = (size_t)(row0 * L), cells = (size_t)(n * L);
                memcpy(input_ids, l->pf_ids + at, cells * sizeof(int32_t));
                memcpy(targets, l->pf_targets + at, cells * sizeof(int32_t));
                memcpy(segment_ids, l->pf_segs + at, cells * sizeof(int32_t));
                memcpy(counts, l->pf_counts + row0, (size_t)n * sizeof(int64_t));
                served = 1;
            }
        }
        pthread_mutex_unlock(&l->pf_mu);
    }
    if (!served)
        st = fetch(l, k, batch_size, row0, n, input_ids, targets, segment_ids, counts);
    if (st == BORA_OK && l->prefetch && row0 + n == batch_size) {
        pthread_mutex_lock(&l->pf_mu); /* the next batch, while this one trains */
        l->pf_k = k + 1;
        l->pf_batch = batch_size;
        l->pf_state = PF_WANTED;
        pthread_cond_broadcast(&l->pf_cv);
        pthread_mutex_unlock(&l->pf_mu);
    }
    int64_t total = 0;
    for (int64_t r = 0; r < n && st == BORA_OK; r++)
        total += counts[r];
    free(counts);
    *loss_tokens = total;
    return st;
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

bora_status bora_loader_features(bora_loader *l, int64_t k, int64_t batch_size, int64_t row0,
                                 int64_t n, float *features)
{
    int n_mels;
    int64_t frames;
    if (!bora_loader_audio(l, &n_mels, &frames))
        return bora_error_set(BORA_ERR_INVALID, "data: audio features asked of a text dataset");
    if (k < 0 || row0 < 0 || n < 0 || row0 + n > batch_size)
        return bora_error_set(BORA_ERR_INVALID, "loader: rows %lld..%lld of a batch of %lld",
                              (long long)row0, (long long)(row0 + n), (long long)batch_size);
    size_t per = (size_t)n_mels * (size_t)frames;
    for (int64_t r = 0; r < n; r++) {
        uint64_t w, i = (uint64_t)k * (uint64_t)batch_size + (uint64_t)(row0 + r);
        int64_t len;
        bora_status st = window_of(l, i, &w);
        if (st != BORA_OK)
            return st;
        bora_audio_cache_example(l->audio, (int64_t)w, features + (size_t)r * per, NULL, &len);
    }
    return BORA_OK;
}

int bora_loader_audio(const bora_loader *l, int *n_mels, int64_t *frames)
{
    if (!l->audio)
        return 0;
    bora_audio_cache_shape(l->audio, n_mels, frames);
    return 1;
}

int64_t bora_loader_windows(bora_loader *l)
{
    if (l->parts) {
        int64_t w = 0;
        for (size_t i = 0; i < l->n_parts; i++)
            w += bora_loader_windows(l->parts[i]);
        return w;
    }
    return finish(l) == BORA_OK ? l->windows : 0;
}

int64_t bora_loader_tokens(bora_loader *l)
{
    if (l->parts) {
        int64_t n = 0;
        for (size_t i = 0; i < l->n_parts; i++)
            n += bora_loader_tokens(l->parts[i]);
        return n;
    }
    return finish(l) == BORA_OK ? l->all_tokens : 0;
}

const char *bora_loader_cache_dir(const bora_loader *l)
{
    return l->parts   ? bora_loader_cache_dir(l->parts[0])
           : l->audio ? bora_audio_cache_dir(l->audio)
                      : bora_cache_dir(l->cache);
}

bora_status bora_loader_hash(const bora_loader *l, uint64_t *hash)
{
    uint64_t h = l->hash, digest = 0;
    *hash = 0;
    bora_status st;
    if (l->cache && (st = bora_cache_digest(l->cache, &digest)) != BORA_OK)
        return st;
    if (l->audio)
        digest = bora_audio_cache_digest(l->audio);
    for (size_t d = 0; d < l->n_parts; d++) {
        uint64_t ph;
        if ((st = bora_loader_hash(l->parts[d], &ph)) != BORA_OK)
            return st;
        h = bora_fnv1a(h, &ph, sizeof ph);
    }
    *hash = bora_fnv1a(h, &digest, sizeof digest);
    return BORA_OK;
}

int32_t bora_loader_eos(const bora_loader *l)
{
    return l->parts ? bora_loader_eos(l->parts[0]) : l->eos;
}

bora_status bora_loader_carve(bora_loader *train, int64_t n, bora_loader **out)
{
    *out = NULL;
    if (train->parts || n < 1)
        return bora_error_set(BORA_ERR_INVALID,
                              "data.validation_windows: holds out windows of one dataset (not a "
                              "mixture), at least 1");
    if (train->audio)
        return bora_error_set(BORA_ERR_INVALID,
                              "data.validation_windows: holds out text windows; give an audio "
                              "dataset (data.type: audio) its data.validation_urls");
    bora_loader *v = calloc(1, sizeof *v);
    if (!v)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&v->fetch_mu, NULL);
    v->cache = train->cache; /* borrowed */
    v->seq_len = train->seq_len;
    v->seed = train->seed;
    v->eos = train->eos;
    v->limit = n;
    v->hash = bora_fnv1a(train->hash, &n, sizeof n);
    bora_status st = finish(v);
    if (st == BORA_OK && v->windows < n)
        st = bora_error_set(BORA_ERR_INVALID,
                            "data.validation_windows: %lld asked, but the training data has "
                            "only %lld windows of %lld",
                            (long long)n, (long long)v->windows, (long long)v->seq_len);
    if (st != BORA_OK) {
        bora_loader_free(v);
        return st;
    }
    *out = v;
    return BORA_OK;
}

bora_status bora_loader_open_mixture(const bora_loader_opts *parts, const char *const *names,
                                     size_t n, const bora_mixture_opts *m, bora_loader **out)
{
    *out = NULL;
    size_t S_n = m->n_stages;
    if (n < 1 || S_n < 1 || m->block < 1 || m->batch_size < 1)
        return bora_error_set(BORA_ERR_CONFIG, "data.configs: nothing to mix");
    for (size_t s = 0; s < S_n; s++) {
        int64_t step = m->stage_step[s];
        if ((s == 0 && step != 0) || (s > 0 && step <= m->stage_step[s - 1]))
            return bora_error_set(BORA_ERR_CONFIG,
                                  "data.train_weights: stages start at step 0 and in increasing "
                                  "order (stage %zu starts at step %lld)",
                                  s + 1, (long long)step);
        if ((step * m->batch_size) % m->block)
            return bora_error_set(BORA_ERR_CONFIG,
                                  "data.train_weights: the stage at step %lld starts at row %lld, "
                                  "not a multiple of data.mixture_block_size %lld (choose a step "
                                  "that is)",
                                  (long long)step, (long long)(step * m->batch_size),
                                  (long long)m->block);
        double sum = 0;
        for (size_t d = 0; d < n; d++) {
            double w = m->weights[s * n + d];
            if (!(w >= 0) || w > 1e300)
                return bora_error_set(BORA_ERR_CONFIG,
                                      "data.train_weights: weight %g for %s is not a number of "
                                      "0 or more",
                                      w, names[d]);
            sum += w;
        }
        if (!(sum > 0))
            return bora_error_set(BORA_ERR_CONFIG,
                                  "data.train_weights: the weights at step %lld are all 0",
                                  (long long)step);
    }
    bora_loader *l = calloc(1, sizeof *l);
    if (!l)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&l->fetch_mu, NULL);
    l->parts = calloc(n, sizeof *l->parts);
    l->stage_row = calloc(S_n, sizeof *l->stage_row);
    l->counts = calloc(S_n * n, sizeof *l->counts);
    l->base = calloc(S_n * n, sizeof *l->base);
    bora_status st = l->parts && l->stage_row && l->counts && l->base
                         ? BORA_OK
                         : bora_error_set(BORA_ERR_NOMEM, "out of memory");
    l->n_parts = n;
    l->n_stages = S_n;
    l->block = m->block;
    l->seed = parts[0].seed;
    uint64_t h = BORA_FNV_SEED;
    for (size_t d = 0; d < n && st == BORA_OK; d++) {
        bora_loader_opts o = parts[d];
        o.prefetch = 0;
        st = bora_loader_open(&o, &l->parts[d]);
    }
    for (size_t s = 0; s < S_n && st == BORA_OK; s++) {
        /* exact rows per block: floor of each share, the rest to the largest remainders (the
         * first part on a tie) */
        int64_t S = m->block, given = 0, *c = l->counts + s * n;
        double sum = 0, *frac = calloc(n, sizeof *frac);
        if (!frac) {
            st = bora_error_set(BORA_ERR_NOMEM, "out of memory");
            break;
        }
        for (size_t d = 0; d < n; d++)
            sum += m->weights[s * n + d];
        for (size_t d = 0; d < n; d++) {
            double q = m->weights[s * n + d] / sum * (double)S;
            c[d] = (int64_t)q;
            frac[d] = q - (double)c[d];
            given += c[d];
        }
        for (; given < S; given++) {
            size_t best = 0;
            for (size_t d = 1; d < n; d++)
                if (frac[d] > frac[best])
                    best = d;
            c[best]++;
            frac[best] = -1;
        }
        free(frac);
        l->stage_row[s] = m->stage_step[s] * m->batch_size;
        for (size_t d = 0; d < n; d++)
            l->base[s * n + d] =
                s == 0 ? 0
                       : l->base[(s - 1) * n + d] + (l->stage_row[s] - l->stage_row[s - 1]) / S *
                                                        l->counts[(s - 1) * n + d];
        h = bora_fnv1a(h, c, n * sizeof *c);
        h = bora_fnv1a(h, &l->stage_row[s], sizeof l->stage_row[s]);
    }
    l->hash = bora_fnv1a(h, &m->block, sizeof m->block);
    if (st == BORA_OK && m->prefetch)
        st = start_prefetch(l);
    if (st != BORA_OK) {
        bora_loader_free(l);
        return st;
    }
    *out = l;
    return BORA_OK;
}

int64_t bora_loader_mixture_counts(const bora_loader *l, size_t stage, int64_t *counts)
{
    if (!l->parts || stage >= l->n_stages)
        return 0;
    memcpy(counts, l->counts + stage * l->n_parts, l->n_parts * sizeof *counts);
    return l->block;
}
