/* bench/tokenize/bench_tokenize.c — tokens per second of bora's tokenizer over the lines of a
 * text file, with N threads each encoding its share of the lines (the tokenizer is shared).
 * Prints one line: threads, lines, tokens, seconds, tokens/s.
 *
 * usage: bench_tokenize TOKENIZER TEXT_FILE THREADS [REPEATS] */
#include "data/tokenizer.h"
#include "util/log.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct job {
    bora_tokenizer *t;
    char **lines;
    size_t *lens;
    size_t first, last;
    int repeats;
    long tokens;
    int failed;
} job;

static void *work(void *arg)
{
    job *j = arg;
    bora_ids ids = {0};
    for (int r = 0; r < j->repeats; r++)
        for (size_t i = j->first; i < j->last; i++) {
            ids.n = 0;
            if (bora_tokenizer_encode(j->t, j->lines[i], j->lens[i], 0, &ids) != BORA_OK)
                j->failed = 1;
            j->tokens += (long)ids.n;
        }
    bora_ids_free(&ids);
    return NULL;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: bench_tokenize TOKENIZER TEXT_FILE THREADS [REPEATS]\n");
        return 2;
    }
    int threads = atoi(argv[3]), repeats = argc > 4 ? atoi(argv[4]) : 1;
    bora_tokenizer *t;
    if (bora_tokenizer_load(argv[1], &t) != BORA_OK) {
        fprintf(stderr, "%s\n", bora_error_get());
        return 1;
    }
    FILE *f = fopen(argv[2], "r");
    if (!f) {
        perror(argv[2]);
        return 1;
    }
    size_t n = 0, cap = 1024;
    char **lines = malloc(cap * sizeof *lines);
    size_t *lens = malloc(cap * sizeof *lens);
    char *line = NULL;
    size_t lcap = 0;
    ssize_t got;
    while ((got = getline(&line, &lcap, f)) > 0) {
        if (line[got - 1] == '\n')
            line[--got] = 0;
        if (!got)
            continue;
        if (n == cap) {
            cap *= 2;
            lines = realloc(lines, cap * sizeof *lines);
            lens = realloc(lens, cap * sizeof *lens);
        }
        lines[n] = strdup(line);
        lens[n++] = (size_t)got;
    }
    fclose(f);
    job jobs[64];
    pthread_t tid[64];
    if (threads < 1 || threads > 64)
        return 2;
    double t0 = now();
    for (int i = 0; i < threads; i++) {
        jobs[i] = (job){t,
                        lines,
                        lens,
                        n * (size_t)i / (size_t)threads,
                        n * (size_t)(i + 1) / (size_t)threads,
                        repeats,
                        0,
                        0};
        pthread_create(&tid[i], NULL, work, &jobs[i]);
    }
    long tokens = 0;
    int failed = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(tid[i], NULL);
        tokens += jobs[i].tokens;
        failed |= jobs[i].failed;
    }
    double secs = now() - t0;
    printf("bora threads=%d lines=%zu tokens=%ld seconds=%.3f tokens_per_s=%.0f\n", threads,
           n * (size_t)repeats, tokens, secs, (double)tokens / secs);
    bora_tokenizer_free(t);
    return failed;
}
