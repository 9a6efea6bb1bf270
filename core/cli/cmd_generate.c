/* core/cli/cmd_generate.c — `bora generate --checkpoint DIR --prompt TEXT [...]`: text sampled
 * from a checkpoint's model. The configuration comes from the checkpoint's trainer.json (with
 * --hf DIR instead, from a Hugging Face folder's config.json, and the weights from its
 * safetensors).
 *
 * With the model's KV cache (its prefill and decode graphs): the prompt runs once as a whole
 * window from position 0, filling the cache, and each new token then costs one position (decode
 * at the next free place). Once the context is full, the window slides: every further token runs
 * the whole window of the last seq_len tokens again, as the learned positions shift. Without a
 * cache (--no-cache, or a model with no such graphs) the eval graph runs the whole window for
 * every token. Both give the logits of the same computation, so the same tokens.
 *
 * Sampling: temperature (0: the most likely token), top-k, top-p, from a seeded generator, so the
 * same seed gives the same text. */
#include "../data/loader.h"
#include "../eval/logits.h"
#include "../train/inputs.h"
#include "../util/log.h"
#include "../util/str.h"
#include "load.h"

#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gen_opts {
    const char *checkpoint, *hf, *prompt, *tokenizer;
    int64_t max_tokens, top_k, seed;
    double temperature, top_p;
    int print_ids, no_cache;
} gen_opts;

/* splitmix64: a small, well-mixed generator; uniform doubles in [0, 1). */
static double uniform(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) / 9007199254740992.0;
}

typedef struct cand {
    double logit;
    int32_t id;
} cand;

static int by_logit(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->logit != y->logit)
        return x->logit < y->logit ? 1 : -1;
    return x->id - y->id; /* ties in id order: a total order, so sorting is deterministic */
}

/* The next token from one row of logits. */
static int32_t sample(const float *logits, int64_t vocab, const gen_opts *o, uint64_t *rng, cand *c)
{
    /* The n best candidates in by_logit's order: the whole vocabulary sorted only when every
     * token is a candidate; one (greedy) or top_k kept by insertion in one pass. */
    int64_t n = o->temperature <= 0 ? 1 : o->top_k > 0 && o->top_k < vocab ? o->top_k : vocab;
    if (n == vocab) {
        for (int64_t i = 0; i < vocab; i++)
            c[i] = (cand){(double)logits[i], (int32_t)i};
        qsort(c, (size_t)vocab, sizeof *c, by_logit);
    } else {
        int64_t kept = 0;
        for (int64_t i = 0; i < vocab; i++) {
            cand x = {(double)logits[i], (int32_t)i};
            if (kept == n && by_logit(&x, &c[n - 1]) >= 0)
                continue;
            int64_t j = kept < n ? kept++ : n - 1; /* the last one drops out */
            for (; j > 0 && by_logit(&x, &c[j - 1]) < 0; j--)
                c[j] = c[j - 1];
            c[j] = x;
        }
    }
    if (o->temperature <= 0)
        return c[0].id;
    double total = 0;
    for (int64_t i = 0; i < n; i++) {
        c[i].logit = exp((c[i].logit - c[0].logit) / o->temperature); /* now a weight */
        total += c[i].logit;
    }
    if (o->top_p < 1) { /* the smallest prefix whose probability reaches top_p */
        double acc = 0;
        for (int64_t i = 0; i < n; i++) {
            acc += c[i].logit / total;
            if (acc >= o->top_p) {
                n = i + 1;
                break;
            }
        }
        total = 0;
        for (int64_t i = 0; i < n; i++)
            total += c[i].logit;
    }
    double u = uniform(rng) * total, acc = 0;
    for (int64_t i = 0; i < n; i++) {
        acc += c[i].logit;
        if (u < acc)
            return c[i].id;
    }
    return c[n - 1].id;
}

static int parse_opts(const bora_cli *cli, gen_opts *o)
{
    *o = (gen_opts){NULL, NULL, NULL, NULL, 64, 40, 0, 0.8, 1.0, 0, 0};
    for (int i = 0; i < cli->argc; i++) {
        const char *a = cli->argv[i], *v = i + 1 < cli->argc ? cli->argv[i + 1] : NULL;
        char *end = NULL;
#define VALUE()                                                        \
    do {                                                               \
        if (!v) {                                                      \
            bora_log(BORA_LOG_ERROR, "generate: %s needs a value", a); \
            return 2;                                                  \
        }                                                              \
        i++;                                                           \
    } while (0)
#define NUMBER(field, conv, lo, hi)                                                          \
    do {                                                                                     \
        VALUE();                                                                             \
        o->field = conv;                                                                     \
        if (!*v || *end || !(o->field >= (lo) && o->field <= (hi))) {                        \
            bora_log(BORA_LOG_ERROR, "generate: %s: '%s' is not a number in [%g, %g]", a, v, \
                     (double)(lo), (double)(hi));                                            \
            return 2;                                                                        \
        }                                                                                    \
    } while (0)
        if (!strcmp(a, "--checkpoint")) {
            VALUE();
            o->checkpoint = v;
        } else if (!strcmp(a, "--hf")) {
            VALUE();
            o->hf = v;
        } else if (!strcmp(a, "--prompt")) {
            VALUE();
            o->prompt = v;
        } else if (!strcmp(a, "--tokenizer")) {
            VALUE();
            o->tokenizer = v;
        } else if (!strcmp(a, "--ids")) {
            o->print_ids = 1;
        } else if (!strcmp(a, "--no-cache")) {
            o->no_cache = 1;
        } else if (!strcmp(a, "--max-tokens"))
            NUMBER(max_tokens, strtoll(v, &end, 10), 1, 1000000);
        else if (!strcmp(a, "--top-k"))
            NUMBER(top_k, strtoll(v, &end, 10), 0, 1e9);
        else if (!strcmp(a, "--seed"))
            NUMBER(seed, strtoll(v, &end, 10), 0, 9.2e18);
        else if (!strcmp(a, "--temperature"))
            NUMBER(temperature, strtod(v, &end), 0, 100);
        else if (!strcmp(a, "--top-p"))
            NUMBER(top_p, strtod(v, &end), 1e-9, 1);
        else {
            bora_log(BORA_LOG_ERROR, "generate: unknown option '%s' (bora help generate)", a);
            return 2;
        }
#undef VALUE
#undef NUMBER
    }
    if (!o->checkpoint == !o->hf || !o->prompt) {
        bora_log(BORA_LOG_ERROR,
                 "generate: give --checkpoint DIR and --prompt TEXT (--hf DIR, a Hugging Face "
                 "folder, in place of --checkpoint)");
        return 2;
    }
    return 0;
}

int bora_cmd_generate(const bora_cli *cli)
{
    gen_opts o;
    int rc = parse_opts(cli, &o);
    if (rc)
        return rc;
    rc = 1;
    bora_loaded L;
    /* with the KV cache: prefill and decode; without (--no-cache, or a model that has no
     * cached graphs): the eval graph over the last seq_len tokens for every token */
    bora_logits prefill = {0}, decode = {0}, eval = {0};
    bora_ids ids = {0};
    float *row = NULL;
    cand *cands = NULL;
    char *text = NULL;
    int32_t *window = NULL, *segs = NULL;
    if (bora_load_model(cli, "generate", o.checkpoint, o.hf, o.tokenizer, &L) != BORA_OK)
        goto out;
    bora_tokenizer *tok = L.tok;
    const char *model_name = L.model_name;
    int cached = 0;
    if (!o.no_cache) {
        bora_status st =
            bora_logits_build(L.store, L.mops, L.model, model_name, BORA_MODE_PREFILL, &prefill);
        if (st == BORA_OK)
            st = bora_logits_build(L.store, L.mops, L.model, model_name, BORA_MODE_DECODE, &decode);
        if (st == BORA_OK)
            cached = 1;
        else if (st == BORA_ERR_UNSUPPORTED)
            bora_log(BORA_LOG_INFO,
                     "generate: model %s has no KV cache (%s); each token runs "
                     "the whole window",
                     model_name, bora_error_get());
        else {
            bora_log(BORA_LOG_ERROR, "generate: model %s: %s", model_name, bora_error_get());
            goto out;
        }
    }
    if (!cached &&
        bora_logits_build(L.store, L.mops, L.model, model_name, BORA_MODE_EVAL, &eval) != BORA_OK) {
        bora_log(BORA_LOG_ERROR, "generate: model %s: %s", model_name, bora_error_get());
        goto out;
    }
    if (bora_load_weights(&L, "generate") != BORA_OK)
        goto out;
    if (cached ? bora_logits_layout(&prefill, model_name) != BORA_OK ||
                     bora_logits_layout(&decode, model_name) != BORA_OK
               : bora_logits_layout(&eval, model_name) != BORA_OK) {
        bora_log(BORA_LOG_ERROR, "generate: %s", bora_error_get());
        goto out;
    }
    bora_logits *full = cached ? &prefill : &eval; /* the graph that runs a whole window */
    int64_t T = full->T, V = full->V;
    if (cached && (decode.T != 1 || decode.V != V)) {
        bora_log(BORA_LOG_ERROR,
                 "generate: model %s's decode graph gives %lld positions of %lld "
                 "logits, not 1 of %lld",
                 model_name, (long long)decode.T, (long long)decode.V, (long long)V);
        goto out;
    }
    int32_t eos = bora_eos_id(tok);
    if (bora_tokenizer_encode(tok, o.prompt, strlen(o.prompt), 0, &ids) != BORA_OK) {
        bora_log(BORA_LOG_ERROR, "generate: the prompt: %s", bora_error_get());
        goto out;
    }
    if (ids.n == 0 && (eos < 0 || bora_ids_push(&ids, eos) != BORA_OK)) {
        bora_log(BORA_LOG_ERROR, "generate: give a prompt that is not empty");
        goto out;
    }
    size_t prompt_n = ids.n;
    cands = malloc(sizeof *cands * (size_t)V);
    row = malloc(sizeof(float) * (size_t)V);
    window = calloc((size_t)T, sizeof *window);
    segs = calloc((size_t)T, sizeof *segs);
    if (!cands || !window || !segs || !row) {
        bora_log(BORA_LOG_ERROR, "out of memory");
        goto out;
    }
    uint64_t rng = (uint64_t)o.seed;
    size_t printed = 0; /* bytes of the decoded text printed so far: the prompt's first */
    if (bora_tokenizer_decode(tok, ids.ids, ids.n, &text, &printed) == BORA_OK) {
        fwrite(text, 1, printed, stdout);
        fflush(stdout);
    }
    double t0 = bora_now_s();
    int64_t made = 0, windows = 0, steps = 0;
    int64_t filled = 0; /* positions of the cache that hold the current window's keys */
    for (; made < o.max_tokens; made++) {
        bora_status st;
        if (cached && filled > 0 && filled < T) {
            /* one position: the last token at the next free place of the cache */
            int32_t tok_id = ids.ids[ids.n - 1], p = (int32_t)filled, len = p + 1;
            st = g_set_input(decode.g, "input_ids", &tok_id, sizeof tok_id);
            if (st == BORA_OK && bora_inputs_reads(decode.g, "position"))
                st = g_set_input(decode.g, "position", &p, sizeof p);
            if (st == BORA_OK && bora_inputs_reads(decode.g, "key_length"))
                st = g_set_input(decode.g, "key_length", &len, sizeof len);
            if (st == BORA_OK)
                st = bora_logits_run_row(&decode, 0, row);
            filled++;
            steps++;
        } else {
            /* the whole window of the last T tokens, from position 0: the prompt, or every
             * token once the context is full (learned positions shift by one) */
            size_t n = ids.n < (size_t)T ? ids.n : (size_t)T, first = ids.n - n;
            memset(window, 0, sizeof(int32_t) * (size_t)T);
            memcpy(window, ids.ids + first, n * sizeof *window);
            st = g_set_input(full->g, "input_ids", window, sizeof(int32_t) * (size_t)T);
            if (st == BORA_OK && bora_inputs_reads(full->g, "segment_ids")) /* one document */
                st = g_set_input(full->g, "segment_ids", segs, sizeof(int32_t) * (size_t)T);
            int32_t held = (int32_t)n; /* prefill: the window's positions that hold tokens */
            if (st == BORA_OK && cached && bora_inputs_reads(full->g, "key_length"))
                st = g_set_input(full->g, "key_length", &held, sizeof held);
            if (st == BORA_OK)
                st = bora_logits_run_row(full, (int64_t)n - 1, row);
            filled = (int64_t)n;
            windows++;
        }
        if (st != BORA_OK) {
            bora_log(BORA_LOG_ERROR, "generate: %s", bora_error_get());
            goto out;
        }
        int32_t next = sample(row, V, &o, &rng, cands);
        if (next == eos)
            break;
        if (next >= (int32_t)bora_tokenizer_vocab_size(tok) || bora_ids_push(&ids, next) != BORA_OK)
            break;
        /* print what the new token adds to the decoded text */
        size_t len = 0;
        free(text);
        text = NULL;
        if (bora_tokenizer_decode(tok, ids.ids, ids.n, &text, &len) == BORA_OK && len > printed &&
            !(((unsigned char)text[len - 1]) >= 0x80)) {
            fwrite(text + printed, 1, len - printed, stdout);
            fflush(stdout);
            printed = len;
        }
    }
    free(text);
    text = NULL;
    size_t len = 0;
    if (bora_tokenizer_decode(tok, ids.ids, ids.n, &text, &len) == BORA_OK && len > printed)
        fwrite(text + printed, 1, len - printed, stdout);
    double dt = bora_now_s() - t0;
    printf("\n");
    fflush(stdout);
    if (o.print_ids) {
        fputs("ids: [", stderr);
        for (size_t i = 0; i < ids.n; i++)
            fprintf(stderr, "%s%d", i ? ", " : "", ids.ids[i]);
        fputs("]\n", stderr);
    }
    fprintf(stderr,
            "generate: %lld tokens after a %zu-token prompt in %.2f s (%.1f tokens/s); %s: "
            "%lld whole windows of %lld, %lld one-position steps\n",
            (long long)made, prompt_n, dt, dt > 0 ? (double)made / dt : 0.0,
            cached ? "KV cache" : "no KV cache", (long long)windows, (long long)T,
            (long long)steps);
    rc = 0;
out:
    free(text);
    free(row);
    free(cands);
    free(window);
    free(segs);
    bora_ids_free(&ids);
    bora_logits_free(&prefill);
    bora_logits_free(&decode);
    bora_logits_free(&eval);
    bora_loaded_free(&L);
    return rc;
}
