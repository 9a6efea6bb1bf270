/* core/data/cache.c — the token cache (see cache.h): sources read and tokenized into shards by
 * worker threads, the finished prefix mapped for the loader. */
#include "cache.h"

#include "../util/log.h"
#include "../util/str.h"
#include "cache_dir.h"
#include "loader.h"
#include "records.h"
#include "source.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define SHARD_MAGIC "BORATOK1"
/* Version 2 added what the shard is of: the tokenizer's identity, its source's content digest
 * and its tokens' digest (not the source's path or time: a URL and a local copy of one file give
 * the same bytes). */
enum { SHARD_VERSION = 2, HEADER_BYTES = 96, BAD_SHOWN = 5, MAX_WORKERS = 8 };
/* Positive codes, never a user's error: a worker told to stop; a shard to make again. */
enum { CANCELLED = 1, STALE = 2 };

typedef struct shard {
    char *path; /* the source file */
    uint64_t size;
    int64_t mtime_ns;
    int jsonl;
    int done;
    void *map;
    size_t map_len;
    const unsigned char *tokens; /* in the map */
    int64_t n_tokens, n_docs, records, bad;
    char first_bad[256];
    int64_t start; /* offset in the joined stream (shards in the finished prefix) */
    uint64_t source_digest, token_digest;
    int recheck; /* read the source again to check its shard: 1, its time changed; 2, no meta */
} shard;

struct bora_cache {
    char dir[4096];
    bora_tokenizer *tok;
    const char *text_key, *what;
    int txt_whole; /* a .txt file is one document */
    int32_t eos;
    int width; /* bytes per token in the shards */
    uint64_t key, tok_hash, vocab;
    uint64_t digest;  /* of the shards' tokens in order, once complete (in the ledger) */
    int rebuild;      /* data.cache_rebuild */
    int meta_pending; /* meta.json to write once the shards are checked (new times, or none) */
    double max_bad;
    shard *shards;
    size_t n, prefix, done_count, reused, next;
    int64_t prefix_tokens, prefix_records, prefix_bad, docs_done, tokens_done;
    uint64_t bytes_done, bytes_total;
    int complete, cancelled;
    bora_status error;
    char message[1024];
    atomic_int stop, named;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t *threads;
    int n_threads;
    int lock_fd;
};

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

/* ---- reading and tokenizing one file ------------------------------------------------------- */

typedef struct stream {
    bora_cache *c;
    bora_ids ids;
    uint64_t *offsets; /* document starts, then the end */
    size_t n_offsets, cap_offsets;
    int64_t records, bad;
    char first_bad[256];
} stream;

static bora_status bad_record(void *ctx, const char *msg)
{
    stream *s = ctx;
    if (!s->bad)
        snprintf(s->first_bad, sizeof s->first_bad, "%s", msg);
    s->bad++;
    s->records++;
    int named = atomic_fetch_add(&s->c->named, 1);
    if (named < BAD_SHOWN)
        bora_log(BORA_LOG_WARN, "data: bad record: %s", msg);
    else if (named == BAD_SHOWN)
        bora_log(BORA_LOG_WARN, "data: more bad records; counting them");
    return BORA_OK;
}

/* Tokenize one document onto the stream and close it with the end-of-text token. */
static bora_status add_doc(void *ctx, const char *path, size_t line, const char *text, size_t len)
{
    stream *s = ctx;
    s->records++;
    if (atomic_load(&s->c->stop))
        return CANCELLED;
    size_t before = s->ids.n;
    if (bora_tokenizer_encode(s->c->tok, text, len, 1, &s->ids) != BORA_OK)
        return bora_error_set(BORA_ERR_INVALID, "%s:%zu: %s", path, line, bora_error_get());
    if (s->ids.n == before && len == 0)
        return BORA_OK;
    if (s->ids.ids[s->ids.n - 1] != s->c->eos && bora_ids_push(&s->ids, s->c->eos) != BORA_OK)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    if (s->n_offsets + 1 >= s->cap_offsets) {
        size_t cap = s->cap_offsets ? 2 * s->cap_offsets : 256;
        uint64_t *o = realloc(s->offsets, cap * sizeof *o);
        if (!o)
            return bora_error_set(BORA_ERR_NOMEM, "out of memory");
        s->offsets = o;
        s->cap_offsets = cap;
    }
    s->offsets[s->n_offsets++] = before;
    return BORA_OK;
}

/* ---- shard files --------------------------------------------------------------------------- */

typedef struct header {
    char magic[8];
    uint32_t version, width;
    uint64_t n_tokens, n_docs, records, bad, checksum;
    uint32_t msg_len, reserved;
    uint64_t tokenizer, vocab;            /* the tokenizer's identity */
    uint64_t source_digest, token_digest; /* of the source's content; of the tokens */
} header;

/* The checksum: the four fields above, then the body. */
static uint64_t shard_checksum(const header *h, const void *body, size_t n)
{
    return bora_fnv1a(bora_fnv1a(BORA_FNV_SEED, &h->tokenizer, 4 * sizeof(uint64_t)), body, n);
}
_Static_assert(sizeof(header) == HEADER_BYTES, "shard header");

static void shard_name(const bora_cache *c, size_t i, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/shard-%05zu.bin", c->dir, i);
}

static size_t pad8(size_t n)
{
    return (n + 7) & ~(size_t)7;
}

/* Write shard i from a tokenized stream: a temporary file, synced, renamed. */
static bora_status write_shard(bora_cache *c, size_t i, const stream *s, uint64_t source_digest)
{
    size_t tok_bytes = s->ids.n * (size_t)c->width, off_bytes = (s->n_offsets + 1) * 8;
    size_t msg = strlen(s->first_bad);
    size_t body = pad8(tok_bytes) + off_bytes + msg;
    unsigned char *buf = calloc(1, HEADER_BYTES + body);
    if (!buf)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    unsigned char *p = buf + HEADER_BYTES;
    for (size_t k = 0; k < s->ids.n; k++) {
        uint32_t v = (uint32_t)s->ids.ids[k];
        if (c->width == 2) {
            uint16_t w = (uint16_t)v;
            memcpy(p + 2 * k, &w, 2);
        } else {
            memcpy(p + 4 * k, &v, 4);
        }
    }
    uint64_t *offs = (uint64_t *)(p + pad8(tok_bytes));
    if (s->n_offsets)
        memcpy(offs, s->offsets, s->n_offsets * 8);
    offs[s->n_offsets] = s->ids.n;
    memcpy(p + pad8(tok_bytes) + off_bytes, s->first_bad, msg);
    header h = {.version = SHARD_VERSION,
                .width = (uint32_t)c->width,
                .n_tokens = s->ids.n,
                .n_docs = s->n_offsets,
                .records = (uint64_t)s->records,
                .bad = (uint64_t)s->bad,
                .msg_len = (uint32_t)msg,
                .tokenizer = c->tok_hash,
                .vocab = c->vocab,
                .source_digest = source_digest,
                .token_digest = bora_fnv1a(BORA_FNV_SEED, p, tok_bytes)};
    memcpy(h.magic, SHARD_MAGIC, 8);
    h.checksum = shard_checksum(&h, p, body);
    memcpy(buf, &h, sizeof h);
    char path[4200], tmp[4300];
    shard_name(c, i, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    bora_status st = BORA_OK;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        st = bora_error_set(BORA_ERR_IO, "%s: %s", tmp, strerror(errno));
    for (size_t done = 0, total = HEADER_BYTES + body; st == BORA_OK && done < total;) {
        ssize_t w = write(fd, buf + done, total - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            st = bora_error_set(BORA_ERR_IO, "%s: %s", tmp, strerror(errno));
        else
            done += (size_t)w;
    }
    if (st == BORA_OK && fsync(fd) != 0)
        st = bora_error_set(BORA_ERR_IO, "%s: %s", tmp, strerror(errno));
    if (fd >= 0 && close(fd) != 0 && st == BORA_OK)
        st = bora_error_set(BORA_ERR_IO, "%s: %s", tmp, strerror(errno));
    if (st == BORA_OK && rename(tmp, path) != 0)
        st = bora_error_set(BORA_ERR_IO, "%s: %s", path, strerror(errno));
    if (st != BORA_OK)
        unlink(tmp);
    free(buf);
    return st;
}

/* Map and check shard file i into sh: magic, version, the tokenizer, width, size, checksum and
 * the ids' range. A shard of another format version or another tokenizer is STALE (the reason
 * in why_stale): a cache entry to make again, not an error. */
static bora_status load_shard(const bora_cache *c, size_t i, shard *sh, char *why_stale, size_t cap)
{
    char path[4200], range[160];
    shard_name(c, i, path, sizeof path);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return bora_error_set(BORA_ERR_IO, "%s: %s", path, strerror(errno));
    struct stat stt;
    const char *why = NULL;
    void *map = MAP_FAILED;
    header h;
    uint32_t version = 0;
    if (fstat(fd, &stt) != 0 || stt.st_size < 16)
        why = "shorter than its header";
    else if ((map = mmap(NULL, (size_t)stt.st_size, PROT_READ, MAP_PRIVATE, fd, 0)) == MAP_FAILED)
        why = strerror(errno);
    close(fd);
    if (!why) {
        size_t size = (size_t)stt.st_size;
        memcpy(&version, (const char *)map + 8, sizeof version);
        if (memcmp(map, SHARD_MAGIC, 8))
            why = "not a bora token shard";
        else if (version != SHARD_VERSION) {
            snprintf(why_stale, cap,
                     "was written by %s bora (shard format %u, this one %d, which records the "
                     "tokenizer)",
                     version < SHARD_VERSION ? "an older" : "another", version, SHARD_VERSION);
            munmap(map, size);
            return STALE;
        } else if (size < HEADER_BYTES)
            why = "shorter than its header";
    }
    if (!why) {
        size_t size = (size_t)stt.st_size;
        memcpy(&h, map, sizeof h);
        if (h.tokenizer != c->tok_hash || h.vocab != c->vocab) {
            snprintf(why_stale, cap,
                     "was tokenized by another tokenizer (%016llx with %llu ids; this one "
                     "%016llx with %llu)",
                     (unsigned long long)h.tokenizer, (unsigned long long)h.vocab,
                     (unsigned long long)c->tok_hash, (unsigned long long)c->vocab);
            munmap(map, size);
            return STALE;
        }
        if (h.width != (uint32_t)c->width)
            why = "another token width";
        else if (h.n_tokens > size || h.n_docs > size || h.msg_len > 255 ||
                 HEADER_BYTES + pad8(h.n_tokens * h.width) + (h.n_docs + 1) * 8 + h.msg_len != size)
            why = "its size does not match its header (truncated?)";
        else if (shard_checksum(&h, (const char *)map + HEADER_BYTES, size - HEADER_BYTES) !=
                 h.checksum)
            why = "its checksum does not match (corrupt)";
        /* Ids the model has no row for never reach it, whatever wrote the file. */
        const unsigned char *tok = (const unsigned char *)map + HEADER_BYTES;
        for (uint64_t k = 0; !why && k < h.n_tokens; k++) {
            uint32_t v;
            if (h.width == 2) {
                uint16_t w;
                memcpy(&w, tok + 2 * k, 2);
                v = w;
            } else {
                memcpy(&v, tok + 4 * k, 4);
            }
            if (v >= c->vocab) {
                snprintf(range, sizeof range,
                         "token %llu is id %u, outside the tokenizer's %llu ids",
                         (unsigned long long)k, v, (unsigned long long)c->vocab);
                why = range;
            }
        }
    }
    if (why) {
        if (map != MAP_FAILED)
            munmap(map, (size_t)stt.st_size);
        return bora_error_set(BORA_ERR_INVALID,
                              "cache shard %s (of %s): %s; delete it or set "
                              "data.cache_rebuild: true",
                              path, c->shards[i].path, why);
    }
    sh->map = map;
    sh->map_len = (size_t)stt.st_size;
    sh->tokens = (const unsigned char *)map + HEADER_BYTES;
    sh->n_tokens = (int64_t)h.n_tokens;
    sh->n_docs = (int64_t)h.n_docs;
    sh->records = (int64_t)h.records;
    sh->bad = (int64_t)h.bad;
    sh->source_digest = h.source_digest;
    sh->token_digest = h.token_digest;
    memcpy(sh->first_bad,
           (const char *)map + HEADER_BYTES + pad8(h.n_tokens * h.width) + (h.n_docs + 1) * 8,
           h.msg_len);
    sh->first_bad[h.msg_len] = 0;
    sh->done = 1;
    return BORA_OK;
}

/* Read and tokenize source i, write its shard and load it. */
static bora_status build_shard(bora_cache *c, size_t i, shard *out)
{
    const shard *src = &c->shards[i];
    char *data = NULL;
    size_t len = 0;
    bora_status st = bora_source_read(src->path, &data, &len);
    if (st != BORA_OK)
        return st;
    uint64_t digest = bora_fnv1a(BORA_FNV_SEED, data, len);
    stream s = {.c = c};
    bora_record_fns fns = {add_doc, bad_record, &s};
    st = src->jsonl ? bora_records_jsonl(src->path, data, len, c->text_key, &fns)
                    : bora_records_txt(src->path, data, len, c->txt_whole, &fns);
    free(data);
    if (st == BORA_OK)
        st = write_shard(c, i, &s, digest);
    bora_ids_free(&s.ids);
    free(s.offsets);
    char stale[256];
    if (st == BORA_OK && (st = load_shard(c, i, out, stale, sizeof stale)) == STALE)
        st = bora_error_set(BORA_ERR_INTERNAL, "cache shard %zu %s", i, stale);
    return st;
}

/* ---- the ledger and the prefix -------------------------------------------------------------- */

static json_object *sources_json(const bora_cache *c)
{
    json_object *a = json_object_new_array();
    for (size_t i = 0; i < c->n; i++) {
        json_object *s = json_object_new_object();
        json_object_object_add(s, "path", json_object_new_string(c->shards[i].path));
        json_object_object_add(s, "size", json_object_new_int64((int64_t)c->shards[i].size));
        json_object_object_add(s, "mtime_ns", json_object_new_int64(c->shards[i].mtime_ns));
        json_object_array_add(a, s);
    }
    return a;
}

/* What the cache is of, as meta.json holds it: the key, the tokenizer, the text field and the
 * sources. The ledger begins the same way. */
static json_object *identity_json(const bora_cache *c)
{
    json_object *o = json_object_new_object();
    char hex[32];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)c->key);
    json_object_object_add(o, "key", json_object_new_string(hex));
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)c->tok_hash);
    json_object_object_add(o, "tokenizer", json_object_new_string(hex));
    json_object_object_add(o, "text_key", json_object_new_string(c->text_key));
    if (c->txt_whole)
        json_object_object_add(o, "txt_documents", json_object_new_string("file"));
    json_object_object_add(o, "sources", sources_json(c));
    return o;
}

static bora_status write_ledger(bora_cache *c)
{
    json_object *o = identity_json(c);
    json_object_object_add(o, "token_bytes", json_object_new_int(c->width));
    json_object *shards = json_object_new_array();
    int64_t docs = 0;
    for (size_t i = 0; i < c->n; i++) {
        const shard *sh = &c->shards[i];
        json_object *s = json_object_new_object();
        char name[32];
        snprintf(name, sizeof name, "shard-%05zu.bin", i);
        json_object_object_add(s, "shard", json_object_new_string(name));
        json_object_object_add(s, "source", json_object_new_string(sh->path));
        json_object_object_add(s, "documents", json_object_new_int64(sh->n_docs));
        json_object_object_add(s, "tokens", json_object_new_int64(sh->n_tokens));
        json_object_object_add(s, "bad_records", json_object_new_int64(sh->bad));
        snprintf(name, sizeof name, "%016llx", (unsigned long long)sh->token_digest);
        json_object_object_add(s, "token_digest", json_object_new_string(name));
        json_object_array_add(shards, s);
        docs += sh->n_docs;
    }
    json_object_object_add(o, "shards", shards);
    json_object_object_add(o, "documents", json_object_new_int64(docs));
    json_object_object_add(o, "tokens", json_object_new_int64(c->prefix_tokens));
    char hex[32];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)c->digest);
    json_object_object_add(o, "token_digest", json_object_new_string(hex));
    bora_status st = bora_cache_dir_write_json(c->dir, "ledger.json", o);
    json_object_put(o);
    return st;
}

/* With c->mu held: extend the finished prefix; at the end, check the bad records, write the
 * ledger and let other processes in. */
static void advance(bora_cache *c)
{
    while (c->prefix < c->n && c->shards[c->prefix].done) {
        shard *sh = &c->shards[c->prefix++];
        sh->start = c->prefix_tokens;
        c->prefix_tokens += sh->n_tokens;
        c->prefix_records += sh->records;
        c->prefix_bad += sh->bad;
    }
    if (c->prefix < c->n || c->complete)
        return;
    c->complete = 1;
    if (c->prefix_bad) {
        const char *first = "";
        for (size_t i = 0; i < c->n && !*first; i++)
            first = c->shards[i].first_bad;
        double frac = (double)c->prefix_bad / (double)c->prefix_records;
        if (frac > c->max_bad) {
            c->error =
                bora_error_set(BORA_ERR_INVALID,
                               "%s: %lld of %lld records are bad (%.3g%%; the first: %s); "
                               "data.max_bad_fraction (%g) allows %.3g%%",
                               c->what, (long long)c->prefix_bad, (long long)c->prefix_records,
                               100.0 * frac, first, c->max_bad, 100.0 * c->max_bad);
            snprintf(c->message, sizeof c->message, "%s", bora_error_get());
        } else {
            bora_log(BORA_LOG_WARN,
                     "data: skipped %lld bad records of %lld (%.3g%%, within "
                     "data.max_bad_fraction %g; the first: %s)",
                     (long long)c->prefix_bad, (long long)c->prefix_records, 100.0 * frac,
                     c->max_bad, first);
        }
    }
    char ledger[4200];
    snprintf(ledger, sizeof ledger, "%s/ledger.json", c->dir);
    for (size_t i = 0; i < c->n; i++)
        c->digest = bora_fnv1a(c->digest, &c->shards[i].token_digest, sizeof(uint64_t));
    if (!c->error && (c->reused < c->n || c->meta_pending || access(ledger, F_OK) != 0) &&
        write_ledger(c) != BORA_OK) {
        c->error = BORA_ERR_IO;
        snprintf(c->message, sizeof c->message, "%s", bora_error_get());
    }
    if (c->lock_fd >= 0) {
        close(c->lock_fd); /* releases the lock */
        c->lock_fd = -1;
    }
}

static void *worker(void *arg)
{
    bora_cache *c = arg;
    bora_cache_builder_idle();
    for (;;) {
        pthread_mutex_lock(&c->mu);
        while (c->next < c->n && c->shards[c->next].done)
            c->next++;
        if (atomic_load(&c->stop) || c->error || c->next >= c->n) {
            pthread_mutex_unlock(&c->mu);
            return NULL;
        }
        size_t i = c->next++;
        pthread_mutex_unlock(&c->mu);
        shard built = c->shards[i];
        bora_status st = build_shard(c, i, &built);
        pthread_mutex_lock(&c->mu);
        if (st == BORA_OK) {
            c->shards[i] = built;
            c->done_count++;
            c->bytes_done += built.size;
            c->docs_done += built.n_docs;
            c->tokens_done += built.n_tokens;
            advance(c);
        } else if (st != CANCELLED && !c->error) {
            c->error = st;
            snprintf(c->message, sizeof c->message, "%s", bora_error_get());
        }
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
        if (st != BORA_OK)
            return NULL;
    }
}

/* ---- opening ------------------------------------------------------------------------------- */

/* meta.json: what the directory was made for. Another tokenizer, text_key or list of sources is
 * refused (or the directory emptied when rebuild is set). The same list with new modification
 * times (with rebuild, or sizes) is not: the shards of those sources are checked against their
 * content when they are reused (recheck; with rebuild, one whose content changed is made
 * again, and only it), and meta.json written then. */
static bora_status check_meta(bora_cache *c, int rebuild)
{
    char path[4200], hex[32];
    snprintf(path, sizeof path, "%s/meta.json", c->dir);
    json_object *m = json_object_from_file(path);
    if (m) {
        json_object *k = NULL, *t = NULL, *srcs = NULL, *tk = NULL, *td = NULL;
        json_object_object_get_ex(m, "key", &k);
        json_object_object_get_ex(m, "text_key", &tk);
        json_object_object_get_ex(m, "txt_documents", &td);
        json_object_object_get_ex(m, "tokenizer", &t);
        json_object_object_get_ex(m, "sources", &srcs);
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)c->key);
        int same = k && !strcmp(json_object_get_string(k), hex);
        char why[1024] = "";
        if (!same) {
            snprintf(hex, sizeof hex, "%016llx", (unsigned long long)c->tok_hash);
            if (!t || strcmp(json_object_get_string(t), hex))
                snprintf(why, sizeof why, "another tokenizer (hash %s, this one %s)",
                         t ? json_object_get_string(t) : "?", hex);
            else {
                size_t n = srcs ? json_object_array_length(srcs) : 0;
                snprintf(why, sizeof why, "other sources (%zu files; these are %zu)", n, c->n);
                int times_only = n == c->n && tk &&
                                 !strcmp(json_object_get_string(tk), c->text_key) &&
                                 !td == !c->txt_whole;
                for (size_t i = 0; i < n && i < c->n; i++) {
                    json_object *p = NULL, *sz = NULL, *mt = NULL,
                                *s = json_object_array_get_idx(srcs, i);
                    json_object_object_get_ex(s, "path", &p);
                    json_object_object_get_ex(s, "size", &sz);
                    json_object_object_get_ex(s, "mtime_ns", &mt);
                    if (!p || strcmp(json_object_get_string(p), c->shards[i].path) || !sz ||
                        json_object_get_int64(sz) != (int64_t)c->shards[i].size || !mt ||
                        json_object_get_int64(mt) != c->shards[i].mtime_ns) {
                        /* its time alone (or, to rebuild, its size): checked when reused */
                        if (p && !strcmp(json_object_get_string(p), c->shards[i].path) && sz &&
                            (rebuild || json_object_get_int64(sz) == (int64_t)c->shards[i].size)) {
                            c->shards[i].recheck = 1;
                            continue;
                        }
                        times_only = 0;
                        if (!p || strcmp(json_object_get_string(p), c->shards[i].path))
                            snprintf(why, sizeof why, "other sources (file %zu was %s, now %s)",
                                     i + 1, p ? json_object_get_string(p) : "?", c->shards[i].path);
                        else
                            snprintf(why, sizeof why,
                                     "other sources (file %zu, %s, has changed since: %lld "
                                     "bytes then, %llu now%s)",
                                     i + 1, c->shards[i].path,
                                     sz ? (long long)json_object_get_int64(sz) : -1LL,
                                     (unsigned long long)c->shards[i].size,
                                     sz && json_object_get_int64(sz) == (int64_t)c->shards[i].size
                                         ? ", modified since"
                                         : "");
                        break;
                    }
                }
                /* New times alone say nothing of the content: each such shard is checked
                 * against its source when reused, with or without rebuild (which makes again
                 * only the shards whose source's content changed). */
                if (times_only) {
                    c->meta_pending = 1;
                    same = 1;
                }
            }
        }
        json_object_put(m);
        if (same)
            return BORA_OK;
        if (!rebuild)
            return bora_error_set(BORA_ERR_INVALID,
                                  "data.cache_dir %s was built for %s; set data.cache_rebuild: "
                                  "true to rebuild it, or choose another directory",
                                  c->dir, why);
        bora_log(BORA_LOG_INFO, "data: rebuilding the cache in %s%s%s", c->dir,
                 *why ? ", built for " : "", why);
        bora_cache_dir_clean(c->dir, 1);
        for (size_t i = 0; i < c->n; i++)
            c->shards[i].recheck = 0;
    } else {
        /* Nothing says what the shards were made of: each is checked against its source, and
         * meta.json written once they are. */
        for (size_t i = 0; i < c->n; i++)
            c->shards[i].recheck = 2;
        c->meta_pending = 1;
        return BORA_OK;
    }
    json_object *o = identity_json(c);
    bora_status st = bora_cache_dir_write_json(c->dir, "meta.json", o);
    json_object_put(o);
    return st;
}

/* Take finished shard i if it holds this tokenizer's ids of its source's content (*taken says
 * whether it was). A shard of another tokenizer or format is deleted to be made again, as a
 * cache entry is; one whose source has a new modification time, or in a directory without
 * meta.json, is checked by reading the source again and comparing its content's digest. */
static bora_status reuse_shard(bora_cache *c, size_t i, int *taken)
{
    char path[4200], stale[256];
    shard_name(c, i, path, sizeof path);
    *taken = 0;
    if (access(path, F_OK) != 0)
        return BORA_OK;
    shard *sh = &c->shards[i];
    bora_status st = load_shard(c, i, sh, stale, sizeof stale);
    if (st == STALE) {
        bora_log(BORA_LOG_INFO, "data: cache shard %s (of %s) %s; tokenizing it again", path,
                 sh->path, stale);
        unlink(path);
        return BORA_OK;
    }
    if (st != BORA_OK && c->rebuild) { /* a damaged shard: made again, as asked */
        char why[1024], *advice;
        snprintf(why, sizeof why, "%s", bora_error_get());
        if ((advice = strstr(why, "; delete it or set")))
            *advice = 0;
        bora_log(BORA_LOG_INFO, "data: %s; tokenizing it again (data.cache_rebuild)", why);
        unlink(path);
        return BORA_OK;
    }
    if (st != BORA_OK)
        return st;
    if (sh->recheck) {
        char *data = NULL;
        size_t len = 0;
        uint64_t digest = 0;
        st = bora_source_read(sh->path, &data, &len);
        if (st == BORA_OK)
            digest = bora_fnv1a(BORA_FNV_SEED, data, len);
        free(data);
        if (st == BORA_OK && digest != sh->source_digest && c->rebuild) {
            bora_log(BORA_LOG_INFO,
                     "data: %s has changed since its shard %s was made; "
                     "tokenizing it again",
                     sh->path, path);
            munmap(sh->map, sh->map_len);
            sh->map = NULL;
            sh->done = 0;
            unlink(path);
            return BORA_OK;
        }
        if (st == BORA_OK && digest != sh->source_digest)
            st = bora_error_set(BORA_ERR_INVALID,
                                "data.cache_dir %s was built for other sources (file %zu, %s, "
                                "has changed since: its content differs); set "
                                "data.cache_rebuild: true to rebuild it, or choose another "
                                "directory",
                                c->dir, i + 1, sh->path);
        if (st != BORA_OK) {
            munmap(sh->map, sh->map_len);
            sh->map = NULL;
            sh->done = 0;
            return st;
        }
        bora_log(BORA_LOG_INFO,
                 "data: %s %s; read again, its content is the same, so its "
                 "tokens are kept",
                 sh->path,
                 sh->recheck == 1 ? "has a new modification time"
                                  : "has a shard but no meta.json says of what");
    }
    *taken = 1;
    return BORA_OK;
}

bora_status bora_cache_open(const bora_cache_opts *o, bora_cache **out)
{
    *out = NULL;
    bora_cache *c = calloc(1, sizeof *c);
    if (!c)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    c->lock_fd = -1;
    c->tok = o->tok;
    c->text_key = o->text_key ? o->text_key : "text";
    c->txt_whole = o->txt_whole;
    c->what = o->what ? o->what : "data.train_urls";
    c->max_bad = o->max_bad_fraction;
    c->eos = bora_eos_id(o->tok);
    c->width = bora_tokenizer_vocab_size(o->tok) <= 65536 ? 2 : 4;
    c->tok_hash = bora_tokenizer_hash(o->tok);
    c->vocab = bora_tokenizer_vocab_size(o->tok);
    c->rebuild = o->rebuild;
    c->digest = bora_fnv1a(BORA_FNV_SEED, "bora-tokens-1", 13);
    bora_status st = BORA_OK;
    if (c->eos < 0)
        st = bora_error_set(BORA_ERR_INVALID,
                            "data.tokenizer: no end-of-text token (one of <|endoftext|>, "
                            "<|end_of_text|>, </s>, <eos>) to put between documents");
    if (st == BORA_OK && !o->n_urls)
        st = bora_error_set(BORA_ERR_CONFIG, "%s: no files given", c->what);
    /* The sources, in order, and the key over them. */
    bora_paths files = {0};
    for (size_t u = 0; u < o->n_urls && st == BORA_OK; u++)
        if ((st = bora_source_expand(o->urls[u], &files)) != BORA_OK)
            st = bora_error_set(st, "%s: %s", c->what, bora_error_get());
    if (st == BORA_OK && !(c->shards = calloc(files.n ? files.n : 1, sizeof *c->shards)))
        st = bora_error_set(BORA_ERR_NOMEM, "out of memory");
    uint64_t key = bora_fnv1a(BORA_FNV_SEED, "bora-token-cache-1", 18);
    key = bora_fnv1a(key, &c->tok_hash, sizeof c->tok_hash);
    key = bora_fnv1a(key, c->text_key, strlen(c->text_key) + 1);
    if (c->txt_whole)
        key = bora_fnv1a(key, "txt_documents: file", 19);
    for (size_t i = 0; i < files.n && st == BORA_OK; i++) {
        shard *sh = &c->shards[c->n++];
        char real[PATH_MAX], base[4096];
        int url = bora_source_is_url(files.v[i]);
        sh->path = bora_strdup(!url && realpath(files.v[i], real) ? real : files.v[i]);
        struct stat stt;
        if (!sh->path) {
            st = bora_error_set(BORA_ERR_NOMEM, "out of memory");
            break;
        }
        if (url) {
            if ((st = bora_http_stat(sh->path, &sh->size, &sh->mtime_ns)) != BORA_OK)
                break;
        } else if (stat(sh->path, &stt) != 0) {
            st = bora_error_set(BORA_ERR_IO, "%s: %s", files.v[i], strerror(errno));
            break;
        } else {
            sh->size = (uint64_t)stt.st_size;
            sh->mtime_ns = (int64_t)stt.st_mtim.tv_sec * 1000000000 + stt.st_mtim.tv_nsec;
        }
        bora_source_base_name(sh->path, base, sizeof base);
        sh->jsonl = ends_with(base, ".jsonl") || ends_with(base, ".json");
        if (!sh->jsonl && !ends_with(base, ".txt"))
            st = bora_error_set(BORA_ERR_UNSUPPORTED,
                                "%s: unsupported file type (want .jsonl or .txt, optionally "
                                "compressed: .jsonl.gz, .txt.zst)",
                                sh->path);
        c->bytes_total += sh->size;
        key = bora_fnv1a(key, sh->path, strlen(sh->path) + 1);
        key = bora_fnv1a(key, &sh->size, sizeof sh->size);
        key = bora_fnv1a(key, &sh->mtime_ns, sizeof sh->mtime_ns);
    }
    bora_paths_free(&files);
    c->key = key;
    if (st == BORA_OK)
        st = bora_cache_dir_make(o->dir, "tokens", key, c->dir, sizeof c->dir);
    /* One builder per directory: wait for another process that holds it. */
    if (st == BORA_OK) {
        st = bora_cache_dir_lock(c->dir, &c->lock_fd);
    }
    if (st == BORA_OK)
        st = check_meta(c, o->rebuild);
    if (st == BORA_OK)
        bora_cache_dir_clean(c->dir, 0);
    /* Finished shards are reused. */
    for (size_t i = 0; i < c->n && st == BORA_OK; i++) {
        int taken = 0;
        if ((st = reuse_shard(c, i, &taken)) != BORA_OK || !taken)
            continue;
        c->reused++;
        c->done_count++;
        c->bytes_done += c->shards[i].size;
        c->docs_done += c->shards[i].n_docs;
        c->tokens_done += c->shards[i].n_tokens;
    }
    if (st == BORA_OK && c->meta_pending) {
        json_object *id = identity_json(c);
        st = bora_cache_dir_write_json(c->dir, "meta.json", id);
        json_object_put(id);
    }
    if (st == BORA_OK) {
        pthread_mutex_lock(&c->mu);
        advance(c);
        st = c->error;
        pthread_mutex_unlock(&c->mu);
    }
    if (st == BORA_OK && !c->complete) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        int n = o->workers > 0 ? o->workers : (int)(cores > 0 ? cores : 1);
        if (n > MAX_WORKERS && o->workers <= 0)
            n = MAX_WORKERS;
        if ((size_t)n > c->n - c->done_count)
            n = (int)(c->n - c->done_count);
        c->threads = calloc((size_t)n, sizeof *c->threads);
        if (!c->threads)
            st = bora_error_set(BORA_ERR_NOMEM, "out of memory");
        bora_log(BORA_LOG_INFO, "data: tokenizing %zu of %zu files into %s with %d worker%s",
                 c->n - c->done_count, c->n, c->dir, n, n == 1 ? "" : "s");
        for (int i = 0; i < n && st == BORA_OK; i++) {
            if (pthread_create(&c->threads[i], NULL, worker, c) != 0)
                st = bora_error_set(BORA_ERR_INTERNAL, "cannot start a cache worker");
            else
                c->n_threads++;
        }
    }
    if (st != BORA_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", bora_error_get());
        bora_cache_free(c);
        return bora_error_set(st, "%s", msg);
    }
    *out = c;
    return BORA_OK;
}

void bora_cache_free(bora_cache *c)
{
    if (!c)
        return;
    atomic_store(&c->stop, 1);
    for (int i = 0; i < c->n_threads; i++)
        pthread_join(c->threads[i], NULL);
    free(c->threads);
    for (size_t i = 0; i < c->n; i++) {
        if (c->shards[i].map)
            munmap(c->shards[i].map, c->shards[i].map_len);
        free(c->shards[i].path);
    }
    free(c->shards);
    if (c->lock_fd >= 0)
        close(c->lock_fd);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
}

/* ---- reading ------------------------------------------------------------------------------- */

void bora_cache_cancel(bora_cache *c)
{
    pthread_mutex_lock(&c->mu);
    c->cancelled = 1;
    atomic_store(&c->stop, 1);
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

bora_status bora_cache_wait(bora_cache *c, int64_t tokens, int64_t *ready, int *done)
{
    pthread_mutex_lock(&c->mu);
    while (!c->error && !c->complete && !c->cancelled && c->prefix_tokens < tokens)
        pthread_cond_wait(&c->cv, &c->mu);
    bora_status st = c->error;
    if (st)
        bora_error_set(st, "%s", c->message);
    else if (c->cancelled && !c->complete && c->prefix_tokens < tokens)
        st = bora_error_set(BORA_ERR_IO, "data: the token cache is being closed");
    *ready = c->prefix_tokens;
    *done = c->complete;
    pthread_mutex_unlock(&c->mu);
    return st;
}

void bora_cache_read(bora_cache *c, int64_t at, int64_t n, int32_t *dst)
{
    pthread_mutex_lock(&c->mu);
    size_t prefix = c->prefix;
    pthread_mutex_unlock(&c->mu);
    /* the last shard of the prefix starting at or before `at` */
    size_t lo = 0, hi = prefix;
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (c->shards[mid].start <= at)
            lo = mid;
        else
            hi = mid;
    }
    for (size_t i = lo; n > 0 && i < prefix; i++) {
        const shard *sh = &c->shards[i];
        if (at >= sh->start + sh->n_tokens)
            continue;
        int64_t from = at - sh->start, k = sh->n_tokens - from < n ? sh->n_tokens - from : n;
        if (c->width == 2) {
            const uint16_t *p = (const uint16_t *)sh->tokens + from;
            for (int64_t j = 0; j < k; j++)
                dst[j] = p[j];
        } else {
            memcpy(dst, (const int32_t *)sh->tokens + from, (size_t)k * sizeof *dst);
        }
        dst += k;
        at += k;
        n -= k;
    }
}

void bora_cache_progress_get(bora_cache *c, bora_cache_progress *p)
{
    pthread_mutex_lock(&c->mu);
    *p = (bora_cache_progress){c->done_count, c->n,           c->docs_done, c->tokens_done,
                               c->bytes_done, c->bytes_total, c->complete,  c->error != 0};
    pthread_mutex_unlock(&c->mu);
}

const char *bora_cache_dir(const bora_cache *c)
{
    return c->dir;
}

uint64_t bora_cache_key(const bora_cache *c)
{
    return c->key;
}

int32_t bora_cache_eos(const bora_cache *c)
{
    return c->eos;
}

bora_status bora_cache_digest(bora_cache *c, uint64_t *digest)
{
    /* The tokens are a function of these: the tokenizer, how records are read, and each
     * source's content, whose digest a finished shard holds (checked against its source's size
     * and time when it was taken). A source still being tokenized is read here rather than
     * waited for: a resume needs the digest before its first step. (A new run asks for it at
     * its first save, when most shards are done.) */
    uint64_t h = bora_fnv1a(BORA_FNV_SEED, "bora-data-1", 11);
    h = bora_fnv1a(h, &c->tok_hash, sizeof c->tok_hash);
    h = bora_fnv1a(h, &c->vocab, sizeof c->vocab);
    h = bora_fnv1a(h, c->text_key, strlen(c->text_key) + 1);
    h = bora_fnv1a(h, &c->txt_whole, sizeof c->txt_whole);
    size_t unread = 0;
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->n; i++)
        unread += !c->shards[i].done;
    pthread_mutex_unlock(&c->mu);
    if (unread)
        bora_log(BORA_LOG_INFO,
                 "data: reading %zu file%s not yet tokenized for the digest of the data's "
                 "content (the checkpoints record it)",
                 unread, unread == 1 ? "" : "s");
    *digest = 0;
    for (size_t i = 0; i < c->n; i++) {
        /* A worker assigns the whole shard when it finishes it: what is read of it here is
         * copied under the lock (the path string itself lives until bora_cache_free). */
        pthread_mutex_lock(&c->mu);
        int done = c->shards[i].done;
        uint64_t d = c->shards[i].source_digest;
        const char *path = c->shards[i].path;
        pthread_mutex_unlock(&c->mu);
        if (!done) {
            char *data = NULL;
            size_t len = 0;
            bora_status st = bora_source_read(path, &data, &len);
            if (st != BORA_OK)
                return st; /* its message names the source */
            d = bora_fnv1a(BORA_FNV_SEED, data, len);
            free(data);
        }
        h = bora_fnv1a(h, &d, sizeof d);
    }
    *digest = h;
    return BORA_OK;
}

size_t bora_cache_reused(const bora_cache *c)
{
    return c->reused;
}
