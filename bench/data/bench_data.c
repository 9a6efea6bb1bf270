/* bench/data/bench_data.c — the data pipeline's speed.
 *
 *   bench_data cache TOKENIZER DIR WORKERS FILE...   build a token cache of the files in DIR
 *                                                   (emptied first) with WORKERS threads
 *   bench_data load TOKENIZER DIR SEQ_LEN BATCH N DUMP
 *                                                   N shuffled batches from the finished cache
 *                                                   in DIR; DUMP gets the token stream (u16 or
 *                                                   u32, as the cache) for a peer to read
 * Each prints one line of key=value pairs. */
#include "data/cache.h"
#include "data/loader.h"
#include "util/log.h"
#include "util/str.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cache_mode(bora_tokenizer *tok, const char *dir, int workers, char **files, int n)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        return 1;
    bora_cache_opts o = {
        (const char *const *)files, (size_t)n, "text", tok, dir, workers, 0, 0, "bench", 0};
    double t0 = bora_now_s();
    bora_cache *c;
    int64_t ready = 0;
    int done = 0;
    if (bora_cache_open(&o, &c) != BORA_OK ||
        bora_cache_wait(c, INT64_MAX, &ready, &done) != BORA_OK) {
        fprintf(stderr, "bench_data: %s\n", bora_error_get());
        return 1;
    }
    double s = bora_now_s() - t0;
    bora_cache_progress p;
    bora_cache_progress_get(c, &p);
    printf("workers=%d files=%zu bytes=%llu tokens=%lld seconds=%.3f tokens_per_s=%.0f\n", workers,
           p.shards, (unsigned long long)p.bytes, (long long)ready, s, (double)ready / s);
    bora_cache_free(c);
    return 0;
}

static int load_mode(bora_tokenizer *tok, const char *dir, int64_t L, int64_t B, int64_t N,
                     const char *dump, char **files, int n)
{
    bora_loader_opts o = {.urls = (const char *const *)files,
                          .n_urls = (size_t)n,
                          .text_key = "text",
                          .tok = tok,
                          .seq_len = L,
                          .seed = 1,
                          .shuffle = 1,
                          .cache_dir = dir,
                          .prefetch = 0};
    bora_loader *l;
    if (bora_loader_open(&o, &l) != BORA_OK) {
        fprintf(stderr, "bench_data: %s\n", bora_error_get());
        return 1;
    }
    size_t cells = (size_t)(B * L);
    int32_t *ids = malloc(cells * 4), *tg = malloc(cells * 4), *sg = malloc(cells * 4);
    int64_t count = 0, sum = 0;
    double t0 = bora_now_s();
    for (int64_t k = 0; k < N; k++) {
        if (bora_loader_rows(l, k, B, 0, B, ids, tg, sg, &count) != BORA_OK) {
            fprintf(stderr, "bench_data: %s\n", bora_error_get());
            return 1;
        }
        sum += ids[k % (int64_t)cells];
    }
    double s = bora_now_s() - t0;
    printf("seq_len=%lld batch=%lld batches=%lld tokens=%lld seconds=%.3f tokens_per_s=%.0f "
           "check=%lld\n",
           (long long)L, (long long)B, (long long)N, (long long)(N * B * L), s,
           (double)(N * B * L) / s, (long long)sum);
    /* the stream, for the peer */
    int64_t total = bora_loader_tokens(l);
    bora_loader_free(l); /* its cache's lock, before the cache is opened again */
    FILE *f = fopen(dump, "wb");
    bora_cache_opts co;
    bora_loader_cache_opts(&o, &co);
    bora_cache *c;
    int64_t ready = 0;
    int done = 0;
    if (!f || bora_cache_open(&co, &c) != BORA_OK ||
        bora_cache_wait(c, INT64_MAX, &ready, &done) != BORA_OK)
        return 1;
    int32_t buf[65536];
    uint16_t half[65536];
    for (int64_t at = 0; at < total; at += 65536) {
        int64_t m = total - at < 65536 ? total - at : 65536;
        bora_cache_read(c, at, m, buf);
        for (int64_t i = 0; i < m; i++)
            half[i] = (uint16_t)buf[i];
        fwrite(half, 2, (size_t)m, f);
    }
    fclose(f);
    bora_cache_free(c);
    free(ids), free(tg), free(sg);
    return 0;
}

int main(int argc, char **argv)
{
    bora_tokenizer *tok;
    if (argc < 5 || bora_tokenizer_load(argv[2], &tok) != BORA_OK) {
        fprintf(stderr,
                "usage: bench_data cache TOKENIZER DIR WORKERS FILE...\n"
                "       bench_data load TOKENIZER DIR SEQ_LEN BATCH N DUMP FILE...\n%s\n",
                argc >= 5 ? bora_error_get() : "");
        return 2;
    }
    bora_log_set_level(BORA_LOG_WARN);
    int rc = !strcmp(argv[1], "cache") ? cache_mode(tok, argv[3], atoi(argv[4]), argv + 5, argc - 5)
             : !strcmp(argv[1], "load") && argc > 8
                 ? load_mode(tok, argv[3], atoll(argv[4]), atoll(argv[5]), atoll(argv[6]), argv[7],
                             argv + 8, argc - 8)
                 : 2;
    bora_tokenizer_free(tok);
    return rc;
}
