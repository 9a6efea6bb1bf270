/* core/data/loader.c — the loader over an in-memory token stream (see loader.h). */
#include "loader.h"

#include "../util/log.h"
#include "../util/str.h"

#include <glob.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct bora_loader {
    int32_t *tokens;
    int64_t n_tokens, seq_len, windows;
    int shuffle;
    uint64_t seed;
    int32_t eos;
    uint64_t hash;
};

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

typedef struct stream {
    bora_ids ids;
    bora_tokenizer *tok;
    int32_t eos;
    int64_t docs;
} stream;

/* Tokenize one document onto the stream and close it with the end-of-text token. */
static bora_status add_doc(stream *s, const char *path, size_t line, const char *text, size_t len)
{
    size_t before = s->ids.n;
    if (bora_tokenizer_encode(s->tok, text, len, 1, &s->ids) != BORA_OK)
        return bora_error_set(BORA_ERR_INVALID, "%s:%zu: %s", path, line, bora_error_get());
    if (s->ids.n == before && len == 0)
        return BORA_OK;
    if (s->ids.ids[s->ids.n - 1] != s->eos && bora_ids_push(&s->ids, s->eos) != BORA_OK)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    s->docs++;
    return BORA_OK;
}

static int blank_line(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r'))
        p++;
    return p == end;
}

/* One JSON object per line; blank lines are skipped. */
static bora_status read_jsonl(stream *s, const char *path, const char *data, size_t len,
                              const char *key)
{
    json_tokener *tk = json_tokener_new();
    if (!tk)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    bora_status st = BORA_OK;
    size_t line = 0;
    for (size_t at = 0; at < len && st == BORA_OK;) {
        const char *nl = memchr(data + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - data) : len;
        line++;
        size_t a = at, b = end;
        while (a < b && strchr(" \t\r", data[a]))
            a++;
        at = end + 1;
        if (a == b)
            continue;
        json_tokener_reset(tk);
        json_object *o = json_tokener_parse_ex(tk, data + a, (int)(b - a));
        enum json_tokener_error err = json_tokener_get_error(tk);
        json_object *text = NULL;
        if (!o || err != json_tokener_success) {
            st = bora_error_set(BORA_ERR_INVALID, "%s:%zu: invalid JSON (%s)", path, line,
                                err == json_tokener_continue ? "unexpected end of line"
                                                             : json_tokener_error_desc(err));
        } else if (!blank_line(data + a + json_tokener_get_parse_end(tk), data + b)) {
            st = bora_error_set(BORA_ERR_INVALID, "%s:%zu: text after the JSON object", path, line);
        } else if (!json_object_is_type(o, json_type_object) ||
                   !json_object_object_get_ex(o, key, &text)) {
            st = bora_error_set(BORA_ERR_INVALID, "%s:%zu: no \"%s\" field (data.text_key)", path,
                                line, key);
        } else if (!json_object_is_type(text, json_type_string)) {
            st = bora_error_set(BORA_ERR_INVALID, "%s:%zu: field \"%s\" is not a string", path,
                                line, key);
        } else {
            st = add_doc(s, path, line, json_object_get_string(text),
                         (size_t)json_object_get_string_len(text));
        }
        json_object_put(o);
    }
    json_tokener_free(tk);
    return st;
}

/* Documents are blocks of text separated by one or more blank lines. */
static bora_status read_txt(stream *s, const char *path, const char *data, size_t len)
{
    size_t line = 0, start = 0, start_line = 1;
    int in_doc = 0;
    for (size_t at = 0; at <= len;) {
        const char *nl = at < len ? memchr(data + at, '\n', len - at) : NULL;
        size_t end = nl ? (size_t)(nl - data) : len;
        line++;
        int blank = blank_line(data + at, data + end);
        if (!blank && !in_doc) {
            in_doc = 1;
            start = at;
            start_line = line;
        }
        if ((blank || end == len) && in_doc) {
            size_t doc_end = blank ? at : end;
            while (doc_end > start && (data[doc_end - 1] == '\n' || data[doc_end - 1] == '\r'))
                doc_end--;
            bora_status st = add_doc(s, path, start_line, data + start, doc_end - start);
            if (st != BORA_OK)
                return st;
            in_doc = 0;
        }
        if (end == len)
            break;
        at = end + 1;
    }
    return BORA_OK;
}

static const char *const eos_names[] = {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", NULL};

bora_status bora_loader_open(const bora_loader_opts *o, bora_loader **out)
{
    *out = NULL;
    if (o->seq_len < 2)
        return bora_error_set(BORA_ERR_INVALID, "data: seq_len %lld is too short",
                              (long long)o->seq_len);
    if (!o->n_urls)
        return bora_error_set(BORA_ERR_CONFIG, "data.train_urls: no training files given");
    stream s = {.tok = o->tok, .eos = -1};
    for (const char *const *n = eos_names; *n && s.eos < 0; n++)
        s.eos = bora_tokenizer_token_id(o->tok, *n);
    if (s.eos < 0)
        return bora_error_set(BORA_ERR_INVALID,
                              "data.tokenizer: no end-of-text token (one of <|endoftext|>, "
                              "<|end_of_text|>, </s>, <eos>) to put between documents");
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    bora_status st = BORA_OK;
    size_t files = 0, bytes = 0;
    for (size_t u = 0; u < o->n_urls && st == BORA_OK; u++) {
        glob_t g;
        int rc = glob(o->urls[u], 0, NULL, &g);
        if (rc == GLOB_NOMATCH) {
            st =
                bora_error_set(BORA_ERR_NOT_FOUND, "data.train_urls: %s: no such file", o->urls[u]);
            break;
        }
        if (rc != 0) {
            st = bora_error_set(BORA_ERR_IO, "data.train_urls: %s: cannot list", o->urls[u]);
            break;
        }
        for (size_t i = 0; i < g.gl_pathc && st == BORA_OK; i++) {
            const char *path = g.gl_pathv[i];
            int jsonl = ends_with(path, ".jsonl") || ends_with(path, ".json");
            if (!jsonl && !ends_with(path, ".txt")) {
                st = bora_error_set(BORA_ERR_UNSUPPORTED,
                                    "%s: unsupported file type (want .jsonl or .txt)", path);
                break;
            }
            char *data = NULL;
            size_t len = 0;
            if ((st = bora_read_file(path, SIZE_MAX, &data, &len)) != BORA_OK)
                break;
            st = jsonl ? read_jsonl(&s, path, data, len, o->text_key ? o->text_key : "text")
                       : read_txt(&s, path, data, len);
            free(data);
            files++;
            bytes += len;
        }
        globfree(&g);
    }
    if (st == BORA_OK && (int64_t)s.ids.n < o->seq_len + 1)
        st = bora_error_set(BORA_ERR_INVALID,
                            "data.train_urls: %zu tokens in all, not enough for one window of "
                            "seq_len %lld",
                            s.ids.n, (long long)o->seq_len);
    bora_loader *l = st == BORA_OK ? calloc(1, sizeof *l) : NULL;
    if (st == BORA_OK && !l)
        st = bora_error_set(BORA_ERR_NOMEM, "out of memory");
    if (st != BORA_OK) {
        bora_ids_free(&s.ids);
        return st;
    }
    l->tokens = s.ids.ids;
    l->n_tokens = (int64_t)s.ids.n;
    l->seq_len = o->seq_len;
    l->windows = (l->n_tokens - 1) / o->seq_len;
    l->eos = s.eos;
    l->shuffle = o->shuffle;
    l->seed = o->seed;
    uint64_t h = bora_fnv1a(BORA_FNV_SEED, l->tokens, (size_t)l->n_tokens * sizeof(int32_t));
    l->hash = bora_fnv1a(h, &o->seq_len, sizeof o->seq_len);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (o->progress)
        bora_log(BORA_LOG_INFO,
                 "data: %zu files, %.1f MB, %lld documents, %lld tokens, %lld windows of %lld "
                 "(%.1f s)",
                 files, (double)bytes / 1e6, (long long)s.docs, (long long)l->n_tokens,
                 (long long)l->windows, (long long)l->seq_len,
                 (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    *out = l;
    return BORA_OK;
}

void bora_loader_free(bora_loader *l)
{
    if (!l)
        return;
    free(l->tokens);
    free(l);
}

bora_status bora_loader_rows(const bora_loader *l, int64_t k, int64_t batch_size, int64_t row0,
                             int64_t n, int32_t *input_ids, int32_t *targets, int32_t *segment_ids,
                             int64_t *loss_tokens)
{
    if (k < 0 || row0 < 0 || n < 0 || row0 + n > batch_size)
        return bora_error_set(BORA_ERR_INVALID, "loader: rows %lld..%lld of a batch of %lld",
                              (long long)row0, (long long)(row0 + n), (long long)batch_size);
    int64_t L = l->seq_len, count = 0;
    for (int64_t r = 0; r < n; r++) {
        /* (k*B + row) mod W without overflow for any step count */
        uint64_t W = (uint64_t)l->windows;
        uint64_t w = ((uint64_t)k % W) * ((uint64_t)batch_size % W);
        w = (w % W + (uint64_t)(row0 + r)) % W;
        if (l->shuffle)
            w = bora_permute(l->seed, W, w);
        const int32_t *src = l->tokens + w * (uint64_t)L;
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

int64_t bora_loader_windows(const bora_loader *l)
{
    return l->windows;
}

int64_t bora_loader_tokens(const bora_loader *l)
{
    return l->n_tokens;
}

uint64_t bora_loader_hash(const bora_loader *l)
{
    return l->hash;
}

int32_t bora_loader_eos(const bora_loader *l)
{
    return l->eos;
}
