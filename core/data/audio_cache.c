/* core/data/audio_cache.c — the audio cache (see audio_cache.h): manifests read, their clips
 * decoded to features and their texts tokenized into shards by worker threads. */
#include "audio_cache.h"

#include "../util/log.h"
#include "../util/str.h"
#include "audio/audio.h"
#include "cache_dir.h"
#include "loader.h"
#include "records.h"
#include "source.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
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

#define SHARD_MAGIC "BORAAUD1"
enum { SHARD_VERSION = 1, HEADER_BYTES = 128, ENTRY_BYTES = 56, BAD_SHOWN = 20, MAX_WORKERS = 8 };
/* Positive codes, never a user's error: a worker told to stop; a shard to make again. */
enum { CANCELLED = 1, STALE = 2 };

typedef struct header {
    char magic[8];
    uint32_t version, n_mels;
    uint64_t frames, n_examples, records, bad, n_tokens, n_floats;
    uint64_t checksum;
    uint32_t msg_len, reserved;
    uint64_t identity;        /* tokenizer, start sequence, n_mels, frames, max_tokens, fields */
    uint64_t source_digest;   /* of the manifest's bytes */
    uint64_t examples_digest; /* of the clips' digests and the tokens */
    uint64_t unused[3];
} header;
_Static_assert(sizeof(header) == HEADER_BYTES, "audio shard header");

/* One clip of a shard. Its features are n_mels rows of used_frames floats at feature_at; the
 * frames after those (silence past the clip's end) are all `fill`. */
typedef struct entry {
    uint64_t token_at, feature_at;
    uint32_t n_tokens, used_frames;
    float fill;
    uint32_t line;   /* in the manifest */
    uint64_t digest; /* of the clip file's bytes */
    uint64_t size;   /* the clip file's size and time, to notice a change (0 for a URL) */
    int64_t mtime_ns;
} entry;
_Static_assert(sizeof(entry) == ENTRY_BYTES, "audio shard entry");

typedef struct shard {
    char *path; /* the manifest */
    uint64_t size;
    int64_t mtime_ns;
    int done;
    void *map;
    size_t map_len;
    const entry *entries; /* in the map */
    const int32_t *tokens;
    const float *floats;
    int64_t n_examples, n_tokens, records, bad;
    uint64_t source_digest, examples_digest;
    char first_bad[256];
    int64_t start; /* its first clip's index in the whole cache (once complete) */
} shard;

struct bora_audio_cache {
    char dir[4096];
    bora_tokenizer *tok;
    const char *audio_key, *text_key, *what;
    int32_t prefix[8], eot;
    int n_prefix, n_mels;
    int64_t frames, max_tokens;
    uint64_t identity, key, vocab;
    bora_mel *mel;
    int rebuild;
    double max_bad;
    shard *shards;
    size_t n, done_count, reused, next;
    int64_t examples, records, bad, docs_done, tokens_done;
    uint64_t bytes_done, bytes_total;
    int complete;
    bora_status error;
    char message[1024];
    atomic_int stop, named;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t *threads;
    int n_threads;
    int lock_fd;
};

static size_t pad8(size_t n)
{
    return (n + 7) & ~(size_t)7;
}

static void shard_name(const bora_audio_cache *c, size_t i, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/shard-%05zu.bin", c->dir, i);
}

/* ---- a manifest's lines ------------------------------------------------------------------- */

/* The clip a manifest line names: a URL or absolute path as it is, else relative to the
 * manifest's directory (its URL's, for a manifest fetched over http). malloc'ed. */
static char *clip_path(const char *manifest, const char *clip)
{
    if (clip[0] == '/' || bora_source_is_url(clip))
        return bora_strdup(clip);
    const char *slash = strrchr(manifest, '/');
    size_t dir = slash ? (size_t)(slash - manifest) : 0;
    size_t n = dir + 1 + strlen(clip) + 1;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%.*s%s%s", (int)dir, manifest, slash ? "/" : "", clip);
    return p;
}

typedef struct line_fields {
    size_t line;
    const char *audio, *text; /* in the parsed object, or NULL with why set */
    size_t text_len;
    char why[256];
} line_fields;

/* Call fn for each nonblank line of a manifest with its fields, or why it has none. */
typedef bora_status (*line_fn)(void *ctx, const line_fields *f);

static bora_status each_line(const bora_audio_cache *c, const char *path, const char *data,
                             size_t len, line_fn fn, void *ctx)
{
    json_tokener *tk = json_tokener_new();
    if (!tk)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    bora_status st = BORA_OK;
    size_t line = 0;
    for (size_t at = 0; at < len && st == BORA_OK;) {
        const char *nl = memchr(data + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - data) : len, a = at, b = end;
        line++;
        at = end + 1;
        while (a < b && data[a] && strchr(" \t\r", data[a]))
            a++;
        while (b > a && data[b - 1] && strchr(" \t\r", data[b - 1]))
            b--;
        if (a == b)
            continue;
        line_fields f = {.line = line};
        json_object *o = NULL, *audio = NULL, *text = NULL;
        size_t bad_at = 0;
        if (b - a > INT_MAX) {
            snprintf(f.why, sizeof f.why, "a line of %zu bytes", b - a);
        } else {
            json_tokener_reset(tk);
            o = json_tokener_parse_ex(tk, data + a, (int)(b - a));
            enum json_tokener_error err = json_tokener_get_error(tk);
            if (!o || err != json_tokener_success)
                snprintf(f.why, sizeof f.why, "invalid JSON (%s)",
                         err == json_tokener_continue ? "unexpected end of line"
                                                      : json_tokener_error_desc(err));
            else if (a + json_tokener_get_parse_end(tk) != b)
                snprintf(f.why, sizeof f.why, "text after the JSON object");
            else if (!json_object_is_type(o, json_type_object) ||
                     !json_object_object_get_ex(o, c->audio_key, &audio) ||
                     !json_object_is_type(audio, json_type_string) ||
                     !json_object_get_string_len(audio))
                snprintf(f.why, sizeof f.why, "no \"%s\" field naming a clip (data.audio_key)",
                         c->audio_key);
            else if (!json_object_object_get_ex(o, c->text_key, &text) ||
                     !json_object_is_type(text, json_type_string))
                snprintf(f.why, sizeof f.why, "no \"%s\" string field (data.text_key)",
                         c->text_key);
            else if (!bora_utf8_valid((const unsigned char *)json_object_get_string(text),
                                      (size_t)json_object_get_string_len(text), &bad_at))
                snprintf(f.why, sizeof f.why, "invalid UTF-8 in \"%s\" at byte %zu", c->text_key,
                         bad_at);
            else {
                f.audio = json_object_get_string(audio);
                f.text = json_object_get_string(text);
                f.text_len = (size_t)json_object_get_string_len(text);
            }
        }
        st = fn(ctx, &f);
        json_object_put(o);
    }
    json_tokener_free(tk);
    (void)path;
    return st;
}

/* ---- building one shard ------------------------------------------------------------------- */

typedef struct builder {
    bora_audio_cache *c;
    const char *manifest;
    entry *entries;
    size_t n_entries, cap_entries;
    bora_ids tokens;
    float *floats;
    size_t n_floats, cap_floats;
    float *feat; /* one clip's (n_mels, frames) */
    int64_t records, bad;
    char first_bad[256];
} builder;

static bora_status bad_clip(builder *b, size_t line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static bora_status bad_clip(builder *b, size_t line, const char *fmt, ...)
{
    char why[512], msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    snprintf(msg, sizeof msg, "%s:%zu: %s", b->manifest, line, why);
    if (!b->bad) { /* kept in the shard, cut to its 255 bytes */
        size_t n = strnlen(msg, sizeof b->first_bad - 1);
        memcpy(b->first_bad, msg, n);
        b->first_bad[n] = 0;
    }
    b->bad++;
    int named = atomic_fetch_add(&b->c->named, 1);
    if (named < BAD_SHOWN)
        bora_log(BORA_LOG_WARN, "data: bad clip: %s; skipped", msg);
    else if (named == BAD_SHOWN)
        bora_log(BORA_LOG_WARN, "data: more bad clips; counting them");
    return BORA_OK;
}

static bora_status grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return BORA_OK;
    size_t n = *cap ? *cap : 64;
    while (n < need)
        n *= 2;
    void *q = n <= SIZE_MAX / elem ? realloc(*p, n * elem) : NULL;
    if (!q)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory building the audio cache");
    *p = q;
    *cap = n;
    return BORA_OK;
}

/* One manifest line: the clip decoded to features, the text to tokens, appended. */
static bora_status add_clip(void *ctx, const line_fields *f)
{
    builder *b = ctx;
    bora_audio_cache *c = b->c;
    b->records++;
    if (atomic_load(&c->stop))
        return CANCELLED;
    if (!f->audio)
        return bad_clip(b, f->line, "%s", f->why);
    /* The text first: it is cheap, and a clip with no room for its text need not be read. */
    size_t before = b->tokens.n;
    bora_status st = BORA_OK;
    for (int i = 0; i < c->n_prefix && st == BORA_OK; i++)
        st = bora_ids_push(&b->tokens, c->prefix[i]);
    if (st == BORA_OK &&
        bora_tokenizer_encode(c->tok, f->text, f->text_len, 0, &b->tokens) != BORA_OK) {
        b->tokens.n = before;
        return bad_clip(b, f->line, "its text: %s", bora_error_get());
    }
    if (st == BORA_OK)
        st = bora_ids_push(&b->tokens, c->eot);
    if (st != BORA_OK)
        return st;
    int64_t n_tokens = (int64_t)(b->tokens.n - before);
    if (n_tokens > c->max_tokens) {
        b->tokens.n = before;
        return bad_clip(b, f->line,
                        "its text is %lld tokens with the start sequence and <|endoftext|>; the "
                        "decoder takes %lld (the model's max_target_positions)",
                        (long long)n_tokens, (long long)c->max_tokens);
    }
    char *path = clip_path(b->manifest, f->audio);
    if (!path)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    entry e = {.token_at = before, .n_tokens = (uint32_t)n_tokens, .line = (uint32_t)f->line};
    struct stat stt;
    if (!bora_source_is_url(path) && stat(path, &stt) == 0) {
        e.size = (uint64_t)stt.st_size;
        e.mtime_ns = (int64_t)stt.st_mtim.tv_sec * 1000000000 + stt.st_mtim.tv_nsec;
    }
    char *bytes = NULL;
    size_t len = 0;
    st = bora_source_read(path, &bytes, &len);
    if (st == BORA_OK) {
        e.digest = bora_fnv1a(BORA_FNV_SEED, bytes, len);
        st = bora_mel_of_bytes(c->mel, bytes, len, path, b->feat, NULL);
    }
    free(bytes);
    free(path);
    if (st == BORA_ERR_NOMEM)
        return st;
    if (st != BORA_OK) {
        b->tokens.n = before;
        return bad_clip(b, f->line, "%s", bora_error_get());
    }
    /* The frames past the clip's end hold one value (silence, floored at the clip's loudest
     * bin - 8): kept as that value, not once per frame. */
    size_t M = (size_t)c->n_mels, T = (size_t)c->frames, used = T;
    e.fill = b->feat[T - 1];
    for (; used > 0; used--) {
        size_t m = 0;
        while (m < M && !memcmp(&b->feat[m * T + used - 1], &e.fill, sizeof e.fill))
            m++;
        if (m < M)
            break;
    }
    e.used_frames = (uint32_t)used;
    e.feature_at = b->n_floats;
    if ((st = grow((void **)&b->floats, &b->cap_floats, b->n_floats + M * used, sizeof(float))) !=
            BORA_OK ||
        (st = grow((void **)&b->entries, &b->cap_entries, b->n_entries + 1, sizeof(entry))) !=
            BORA_OK)
        return st;
    for (size_t m = 0; m < M; m++)
        memcpy(b->floats + b->n_floats + m * used, b->feat + m * T, used * sizeof(float));
    b->n_floats += M * used;
    b->entries[b->n_entries++] = e;
    return BORA_OK;
}

/* The checksum: the three identity fields, then the body. */
static uint64_t shard_checksum(const header *h, const void *body, size_t n)
{
    return bora_fnv1a(bora_fnv1a(BORA_FNV_SEED, &h->identity, 3 * sizeof(uint64_t)), body, n);
}

/* What the clips are: their files' digests and token counts, and the tokens. */
static uint64_t examples_digest(const entry *e, size_t n, const int32_t *tokens, size_t n_tokens)
{
    uint64_t h = BORA_FNV_SEED;
    for (size_t i = 0; i < n; i++) {
        h = bora_fnv1a(h, &e[i].digest, sizeof e[i].digest);
        h = bora_fnv1a(h, &e[i].n_tokens, sizeof e[i].n_tokens);
    }
    return bora_fnv1a(h, tokens, n_tokens * sizeof *tokens);
}

/* Write shard i: a temporary file, synced, renamed. */
static bora_status write_shard(bora_audio_cache *c, size_t i, const builder *b,
                               uint64_t source_digest)
{
    size_t e_bytes = b->n_entries * ENTRY_BYTES, t_bytes = pad8(b->tokens.n * 4),
           f_bytes = pad8(b->n_floats * 4), msg = strlen(b->first_bad);
    size_t body = e_bytes + t_bytes + f_bytes + msg;
    unsigned char *buf = calloc(1, HEADER_BYTES + body);
    if (!buf)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    unsigned char *p = buf + HEADER_BYTES;
    if (e_bytes)
        memcpy(p, b->entries, e_bytes);
    if (b->tokens.n)
        memcpy(p + e_bytes, b->tokens.ids, b->tokens.n * 4);
    if (b->n_floats)
        memcpy(p + e_bytes + t_bytes, b->floats, b->n_floats * 4);
    memcpy(p + e_bytes + t_bytes + f_bytes, b->first_bad, msg);
    header h = {.version = SHARD_VERSION,
                .n_mels = (uint32_t)c->n_mels,
                .frames = (uint64_t)c->frames,
                .n_examples = b->n_entries,
                .records = (uint64_t)b->records,
                .bad = (uint64_t)b->bad,
                .n_tokens = b->tokens.n,
                .n_floats = b->n_floats,
                .msg_len = (uint32_t)msg,
                .identity = c->identity,
                .source_digest = source_digest,
                .examples_digest =
                    examples_digest(b->entries, b->n_entries, b->tokens.ids, b->tokens.n)};
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

/* Map and check shard file i into sh: magic, version, identity, size, checksum, every entry's
 * ranges and every token's id. Another format or identity is STALE (why_stale says which). */
static bora_status load_shard(const bora_audio_cache *c, size_t i, shard *sh, char *why_stale,
                              size_t cap)
{
    char path[4200], detail[200];
    shard_name(c, i, path, sizeof path);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return bora_error_set(BORA_ERR_IO, "%s: %s", path, strerror(errno));
    struct stat stt = {0};
    const char *why = NULL;
    void *map = MAP_FAILED;
    header h;
    if (fstat(fd, &stt) != 0 || stt.st_size < HEADER_BYTES)
        why = "shorter than its header";
    else if ((map = mmap(NULL, (size_t)stt.st_size, PROT_READ, MAP_PRIVATE, fd, 0)) == MAP_FAILED)
        why = strerror(errno);
    close(fd);
    size_t size = (size_t)stt.st_size;
    if (!why) {
        memcpy(&h, map, sizeof h);
        if (memcmp(h.magic, SHARD_MAGIC, 8))
            why = "not a bora audio shard";
        else if (h.version != SHARD_VERSION || h.identity != c->identity) {
            if (h.version != SHARD_VERSION)
                snprintf(why_stale, cap,
                         "was written by another bora (audio shard format %u, this one %d)",
                         h.version, SHARD_VERSION);
            else
                snprintf(why_stale, cap,
                         "was made for another tokenizer, start sequence, n_mels, frames, "
                         "max_target_positions, audio_key or text_key");
            munmap(map, size);
            return STALE;
        }
    }
    if (!why) {
        uint64_t M = h.n_mels, T = h.frames, n = h.n_examples;
        if (M != (uint64_t)c->n_mels || T != (uint64_t)c->frames || h.bad > h.records ||
            n > h.records)
            why = "its header's sizes are not the cache's (corrupt)";
        else if (n > size || h.n_tokens > size || h.n_floats > size || h.msg_len > 255 ||
                 HEADER_BYTES + n * ENTRY_BYTES + pad8(h.n_tokens * 4) + pad8(h.n_floats * 4) +
                         h.msg_len !=
                     size)
            why = "its size does not match its header (truncated?)";
        else if (shard_checksum(&h, (const char *)map + HEADER_BYTES, size - HEADER_BYTES) !=
                 h.checksum)
            why = "its checksum does not match (corrupt)";
        const entry *e = (const entry *)((const char *)map + HEADER_BYTES);
        const int32_t *tok = (const int32_t *)(e + n);
        for (uint64_t k = 0; !why && k < n; k++)
            if (e[k].token_at > h.n_tokens || e[k].n_tokens > h.n_tokens - e[k].token_at ||
                e[k].used_frames > T || e[k].feature_at > h.n_floats ||
                M * e[k].used_frames > h.n_floats - e[k].feature_at ||
                (int64_t)e[k].n_tokens > c->max_tokens) {
                snprintf(detail, sizeof detail, "clip %llu's entry is out of range",
                         (unsigned long long)k);
                why = detail;
            }
        for (uint64_t k = 0; !why && k < h.n_tokens; k++)
            if (tok[k] < 0 || (uint64_t)tok[k] >= c->vocab) {
                snprintf(detail, sizeof detail,
                         "token %llu is id %d, outside the tokenizer's %llu ids",
                         (unsigned long long)k, tok[k], (unsigned long long)c->vocab);
                why = detail;
            }
    }
    if (why) {
        if (map != MAP_FAILED)
            munmap(map, size);
        return bora_error_set(BORA_ERR_INVALID,
                              "audio cache shard %s (of %s): %s; delete it or set "
                              "data.cache_rebuild: true",
                              path, c->shards[i].path, why);
    }
    const char *body = (const char *)map + HEADER_BYTES;
    sh->map = map;
    sh->map_len = size;
    sh->entries = (const entry *)body;
    sh->tokens = (const int32_t *)(body + h.n_examples * ENTRY_BYTES);
    sh->floats = (const float *)(body + h.n_examples * ENTRY_BYTES + pad8(h.n_tokens * 4));
    sh->n_examples = (int64_t)h.n_examples;
    sh->n_tokens = (int64_t)h.n_tokens;
    sh->records = (int64_t)h.records;
    sh->bad = (int64_t)h.bad;
    sh->source_digest = h.source_digest;
    sh->examples_digest = h.examples_digest;
    memcpy(sh->first_bad, (const char *)map + size - h.msg_len, h.msg_len);
    sh->first_bad[h.msg_len] = 0;
    sh->done = 1;
    return BORA_OK;
}

/* Read manifest i, decode and tokenize its clips, write its shard and load it. */
static bora_status build_shard(bora_audio_cache *c, size_t i, shard *out)
{
    const shard *src = &c->shards[i];
    char *data = NULL;
    size_t len = 0;
    bora_status st = bora_source_read(src->path, &data, &len);
    if (st != BORA_OK)
        return st;
    builder b = {.c = c, .manifest = src->path};
    b.feat = malloc((size_t)c->n_mels * (size_t)c->frames * sizeof *b.feat);
    if (!b.feat)
        st = bora_error_set(BORA_ERR_NOMEM, "out of memory");
    if (st == BORA_OK)
        st = each_line(c, src->path, data, len, add_clip, &b);
    if (st == BORA_OK)
        st = write_shard(c, i, &b, bora_fnv1a(BORA_FNV_SEED, data, len));
    free(data);
    free(b.feat);
    free(b.entries);
    free(b.floats);
    bora_ids_free(&b.tokens);
    char stale[256];
    if (st == BORA_OK && (st = load_shard(c, i, out, stale, sizeof stale)) == STALE)
        st = bora_error_set(BORA_ERR_INTERNAL, "audio cache shard %zu %s", i, stale);
    return st;
}

/* ---- reusing a finished shard ------------------------------------------------------------- */

typedef struct recheck {
    const bora_audio_cache *c;
    const shard *sh;
    int64_t k; /* the entry to match next */
    char changed[600];
} recheck;

/* A reused shard's clips must be the files they were made of: a clip whose size or time
 * differs from its entry's is read again and its content compared. */
static bora_status recheck_line(void *ctx, const line_fields *f)
{
    recheck *r = ctx;
    if (r->changed[0] || r->k >= r->sh->n_examples || r->sh->entries[r->k].line != f->line)
        return BORA_OK;
    const entry *e = &r->sh->entries[r->k++];
    if (!f->audio)
        return BORA_OK;
    char *path = clip_path(r->sh->path, f->audio);
    if (!path)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    struct stat stt;
    int same = bora_source_is_url(path) ||
               (stat(path, &stt) == 0 && (uint64_t)stt.st_size == e->size &&
                (int64_t)stt.st_mtim.tv_sec * 1000000000 + stt.st_mtim.tv_nsec == e->mtime_ns);
    if (!same) {
        char *bytes = NULL;
        size_t len = 0;
        same = bora_source_read(path, &bytes, &len) == BORA_OK &&
               bora_fnv1a(BORA_FNV_SEED, bytes, len) == e->digest;
        free(bytes);
        if (!same)
            snprintf(r->changed, sizeof r->changed, "%s:%zu: clip %s has changed since",
                     r->sh->path, f->line, path);
    }
    free(path);
    return BORA_OK;
}

/* Take finished shard i if it is of this identity, its manifest's content and its clips'
 * (*taken says whether it was). Another format or identity is made again; another content is
 * refused, or made again with rebuild, as is a corrupt shard. */
static bora_status reuse_shard(bora_audio_cache *c, size_t i, int *taken)
{
    char path[4200], stale[256];
    shard_name(c, i, path, sizeof path);
    *taken = 0;
    if (access(path, F_OK) != 0)
        return BORA_OK;
    shard *sh = &c->shards[i];
    bora_status st = load_shard(c, i, sh, stale, sizeof stale);
    if (st == STALE) {
        bora_log(BORA_LOG_INFO, "data: audio cache shard %s (of %s) %s; making it again", path,
                 sh->path, stale);
        unlink(path);
        return BORA_OK;
    }
    if (st != BORA_OK && c->rebuild) { /* a damaged shard: made again, as asked */
        char why[1024], *advice;
        snprintf(why, sizeof why, "%s", bora_error_get());
        if ((advice = strstr(why, "; delete it or set")))
            *advice = 0;
        bora_log(BORA_LOG_INFO, "data: %s; making it again (data.cache_rebuild)", why);
        unlink(path);
        return BORA_OK;
    }
    if (st != BORA_OK)
        return st;
    char *data = NULL;
    size_t len = 0;
    recheck r = {.c = c, .sh = sh};
    st = bora_source_read(sh->path, &data, &len);
    if (st == BORA_OK && bora_fnv1a(BORA_FNV_SEED, data, len) != sh->source_digest)
        snprintf(r.changed, sizeof r.changed, "manifest %s has changed since", sh->path);
    else if (st == BORA_OK)
        st = each_line(c, sh->path, data, len, recheck_line, &r);
    free(data);
    if (st == BORA_OK && r.changed[0] && c->rebuild) {
        bora_log(BORA_LOG_INFO, "data: %s its shard %s was made; making it again", r.changed, path);
        st = STALE;
    } else if (st == BORA_OK && r.changed[0]) {
        st = bora_error_set(BORA_ERR_INVALID,
                            "data.cache_dir %s: %s its shard was made (its content differs); "
                            "set data.cache_rebuild: true to make it again",
                            c->dir, r.changed);
    }
    if (st != BORA_OK) {
        munmap(sh->map, sh->map_len);
        sh->map = NULL;
        sh->done = 0;
        if (st == STALE)
            unlink(path);
        return st == STALE ? BORA_OK : st;
    }
    *taken = 1;
    return BORA_OK;
}

/* ---- meta.json, the ledger and the workers ------------------------------------------------ */

static void add_hex(json_object *o, const char *key, uint64_t v)
{
    char hex[32];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)v);
    json_object_object_add(o, key, json_object_new_string(hex));
}

/* What the directory is of (meta.json, and the start of ledger.json). */
static json_object *identity_json(const bora_audio_cache *c)
{
    json_object *o = json_object_new_object(), *a = json_object_new_array(),
                *pre = json_object_new_array();
    add_hex(o, "key", c->key);
    add_hex(o, "identity", c->identity);
    for (int i = 0; i < c->n_prefix; i++)
        json_object_array_add(pre, json_object_new_int(c->prefix[i]));
    json_object_object_add(o, "start_sequence", pre);
    json_object_object_add(o, "n_mels", json_object_new_int(c->n_mels));
    json_object_object_add(o, "frames", json_object_new_int64(c->frames));
    json_object_object_add(o, "max_tokens", json_object_new_int64(c->max_tokens));
    json_object_object_add(o, "audio_key", json_object_new_string(c->audio_key));
    json_object_object_add(o, "text_key", json_object_new_string(c->text_key));
    for (size_t i = 0; i < c->n; i++) {
        json_object *s = json_object_new_object();
        json_object_object_add(s, "path", json_object_new_string(c->shards[i].path));
        json_object_object_add(s, "size", json_object_new_int64((int64_t)c->shards[i].size));
        json_object_object_add(s, "mtime_ns", json_object_new_int64(c->shards[i].mtime_ns));
        json_object_array_add(a, s);
    }
    json_object_object_add(o, "manifests", a);
    return o;
}

static bora_status write_ledger(bora_audio_cache *c)
{
    json_object *o = identity_json(c), *a = json_object_new_array();
    for (size_t i = 0; i < c->n; i++) {
        const shard *sh = &c->shards[i];
        json_object *s = json_object_new_object();
        char name[32];
        snprintf(name, sizeof name, "shard-%05zu.bin", i);
        json_object_object_add(s, "shard", json_object_new_string(name));
        json_object_object_add(s, "manifest", json_object_new_string(sh->path));
        json_object_object_add(s, "clips", json_object_new_int64(sh->n_examples));
        json_object_object_add(s, "tokens", json_object_new_int64(sh->n_tokens));
        json_object_object_add(s, "bad_records", json_object_new_int64(sh->bad));
        add_hex(s, "examples_digest", sh->examples_digest);
        json_object_array_add(a, s);
    }
    json_object_object_add(o, "shards", a);
    json_object_object_add(o, "clips", json_object_new_int64(c->examples));
    add_hex(o, "digest", bora_audio_cache_digest(c));
    bora_status st = bora_cache_dir_write_json(c->dir, "ledger.json", o);
    json_object_put(o);
    return st;
}

/* With c->mu held, once every shard is done: number the clips, check the bad ones, write the
 * ledger and let other processes in. */
static void complete(bora_audio_cache *c)
{
    if (c->complete || c->done_count < c->n)
        return;
    c->complete = 1;
    const char *first = "";
    for (size_t i = 0; i < c->n; i++) {
        shard *sh = &c->shards[i];
        sh->start = c->examples;
        c->examples += sh->n_examples;
        c->records += sh->records;
        c->bad += sh->bad;
        if (!*first)
            first = sh->first_bad;
    }
    if (c->bad) {
        double frac = (double)c->bad / (double)c->records;
        if (frac > c->max_bad) {
            c->error = bora_error_set(BORA_ERR_INVALID,
                                      "%s: %lld of %lld clips are bad (%.3g%%; the first: %s); "
                                      "data.max_bad_fraction (%g) allows %.3g%%",
                                      c->what, (long long)c->bad, (long long)c->records,
                                      100.0 * frac, first, c->max_bad, 100.0 * c->max_bad);
            snprintf(c->message, sizeof c->message, "%s", bora_error_get());
        } else {
            bora_log(BORA_LOG_WARN,
                     "data: skipped %lld bad clips of %lld (%.3g%%, within "
                     "data.max_bad_fraction %g; the first: %s)",
                     (long long)c->bad, (long long)c->records, 100.0 * frac, c->max_bad, first);
        }
    }
    if (!c->error && !c->examples) {
        c->error = bora_error_set(BORA_ERR_INVALID, "%s: no clips", c->what);
        snprintf(c->message, sizeof c->message, "%s", bora_error_get());
    }
    char ledger[4200];
    snprintf(ledger, sizeof ledger, "%s/ledger.json", c->dir);
    if (!c->error && (c->reused < c->n || access(ledger, F_OK) != 0) &&
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
    bora_audio_cache *c = arg;
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
            c->docs_done += built.n_examples;
            c->tokens_done += built.n_tokens;
            complete(c);
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

/* ---- opening ------------------------------------------------------------------------------ */

/* meta.json: a directory made for another key is refused, or emptied with rebuild. */
static bora_status check_meta(bora_audio_cache *c)
{
    char path[4200], hex[32];
    snprintf(path, sizeof path, "%s/meta.json", c->dir);
    json_object *m = json_object_from_file(path), *k = NULL, *id = NULL;
    if (m) {
        json_object_object_get_ex(m, "key", &k);
        json_object_object_get_ex(m, "identity", &id);
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)c->key);
        int same = k && !strcmp(json_object_get_string(k), hex);
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)c->identity);
        int same_id = id && !strcmp(json_object_get_string(id), hex);
        json_object_put(m);
        if (same)
            return BORA_OK;
        const char *why = same_id ? "other manifests (or the same ones, modified since)"
                                  : "another tokenizer, start sequence, n_mels, frames, "
                                    "max_target_positions, audio_key or text_key";
        if (!c->rebuild)
            return bora_error_set(BORA_ERR_INVALID,
                                  "data.cache_dir %s was built for %s; set data.cache_rebuild: "
                                  "true to rebuild it, or choose another directory",
                                  c->dir, why);
        bora_log(BORA_LOG_INFO, "data: rebuilding the audio cache in %s, built for %s", c->dir,
                 why);
        bora_cache_dir_clean(c->dir, 1);
    }
    json_object *o = identity_json(c);
    bora_status st = bora_cache_dir_write_json(c->dir, "meta.json", o);
    json_object_put(o);
    return st;
}

/* The identity: everything besides the files that decides the shards' bytes. */
static uint64_t identity_of(const bora_audio_cache *c)
{
    uint64_t h = bora_fnv1a(BORA_FNV_SEED, "bora-audio-1", 12), tok = bora_tokenizer_hash(c->tok);
    int64_t dims[3] = {c->n_mels, c->frames, c->max_tokens};
    h = bora_fnv1a(h, &tok, sizeof tok);
    h = bora_fnv1a(h, &c->vocab, sizeof c->vocab);
    h = bora_fnv1a(h, &c->eot, sizeof c->eot);
    h = bora_fnv1a(h, &c->n_prefix, sizeof c->n_prefix);
    h = bora_fnv1a(h, c->prefix, (size_t)c->n_prefix * sizeof *c->prefix);
    h = bora_fnv1a(h, dims, sizeof dims);
    h = bora_fnv1a(h, c->audio_key, strlen(c->audio_key) + 1);
    return bora_fnv1a(h, c->text_key, strlen(c->text_key) + 1);
}

/* The manifests, in order, with their sizes and times, and the key over them. */
static bora_status list_manifests(bora_audio_cache *c, const bora_audio_cache_opts *o)
{
    bora_paths files = {0};
    bora_status st = BORA_OK;
    for (size_t u = 0; u < o->n_urls && st == BORA_OK; u++)
        if ((st = bora_source_expand(o->urls[u], &files)) != BORA_OK)
            st = bora_error_set(st, "%s: %s", c->what, bora_error_get());
    if (st == BORA_OK && !(c->shards = calloc(files.n ? files.n : 1, sizeof *c->shards)))
        st = bora_error_set(BORA_ERR_NOMEM, "out of memory");
    c->key = bora_fnv1a(BORA_FNV_SEED, "bora-audio-cache-1", 18);
    c->key = bora_fnv1a(c->key, &c->identity, sizeof c->identity);
    for (size_t i = 0; i < files.n && st == BORA_OK; i++) {
        shard *sh = &c->shards[c->n++];
        char real[PATH_MAX], base[4096];
        int url = bora_source_is_url(files.v[i]);
        struct stat stt;
        sh->path = bora_strdup(!url && realpath(files.v[i], real) ? real : files.v[i]);
        if (!sh->path)
            st = bora_error_set(BORA_ERR_NOMEM, "out of memory");
        else if (url)
            st = bora_http_stat(sh->path, &sh->size, &sh->mtime_ns);
        else if (stat(sh->path, &stt) != 0)
            st = bora_error_set(BORA_ERR_IO, "%s: %s", files.v[i], strerror(errno));
        else {
            sh->size = (uint64_t)stt.st_size;
            sh->mtime_ns = (int64_t)stt.st_mtim.tv_sec * 1000000000 + stt.st_mtim.tv_nsec;
        }
        if (st != BORA_OK)
            break;
        bora_source_base_name(sh->path, base, sizeof base);
        size_t n = strlen(base);
        if (n < 6 || strcmp(base + n - 6, ".jsonl"))
            st = bora_error_set(BORA_ERR_UNSUPPORTED,
                                "%s: %s is not a .jsonl manifest of {\"%s\": CLIP, \"%s\": TEXT} "
                                "lines (data.type: audio; optionally .gz or .zst)",
                                c->what, sh->path, c->audio_key, c->text_key);
        c->bytes_total += sh->size;
        c->key = bora_fnv1a(c->key, sh->path, strlen(sh->path) + 1);
        c->key = bora_fnv1a(c->key, &sh->size, sizeof sh->size);
        c->key = bora_fnv1a(c->key, &sh->mtime_ns, sizeof sh->mtime_ns);
    }
    if (st == BORA_OK && !files.n)
        st = bora_error_set(BORA_ERR_CONFIG, "%s: no manifests given", c->what);
    bora_paths_free(&files);
    return st;
}

bora_status bora_audio_cache_open(const bora_audio_cache_opts *o, bora_audio_cache **out)
{
    *out = NULL;
    bora_audio_cache *c = calloc(1, sizeof *c);
    if (!c)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    c->lock_fd = -1;
    c->tok = o->tok;
    c->audio_key = o->audio_key ? o->audio_key : "audio";
    c->text_key = o->text_key ? o->text_key : "text";
    c->what = o->what ? o->what : "data.train_urls";
    c->max_bad = o->max_bad_fraction;
    c->rebuild = o->rebuild;
    c->vocab = bora_tokenizer_vocab_size(o->tok);
    c->eot = bora_eos_id(o->tok);
    c->n_mels = o->n_mels;
    c->frames = o->frames;
    c->max_tokens = o->max_tokens;
    c->n_prefix = o->n_prefix;
    bora_status st = BORA_OK;
    if (o->n_prefix < 0 || o->n_prefix > 8)
        st = bora_error_set(BORA_ERR_INVALID, "audio cache: a start sequence of %d tokens",
                            o->n_prefix);
    else if (o->n_prefix)
        memcpy(c->prefix, o->prefix, (size_t)o->n_prefix * sizeof *c->prefix);
    if (st == BORA_OK && c->eot < 0)
        st = bora_error_set(BORA_ERR_INVALID,
                            "data.tokenizer: no <|endoftext|> token to end a clip's text with");
    if (st == BORA_OK && c->max_tokens < o->n_prefix + 1)
        st = bora_error_set(BORA_ERR_INVALID,
                            "audio cache: %lld decoder positions cannot hold the start sequence "
                            "and <|endoftext|>",
                            (long long)c->max_tokens);
    if (st == BORA_OK) {
        bora_mel_opts mo = bora_mel_defaults();
        mo.n_mels = o->n_mels;
        mo.n_samples = o->frames * 160;
        st = bora_mel_create(&mo, &c->mel);
        if (st == BORA_OK && bora_mel_frames(c->mel) != o->frames)
            st = bora_error_set(BORA_ERR_INVALID, "audio cache: %lld frames is not a window",
                                (long long)o->frames);
    }
    c->identity = identity_of(c);
    if (st == BORA_OK)
        st = list_manifests(c, o);
    if (st == BORA_OK)
        st = bora_cache_dir_make(o->dir, "audio", c->key, c->dir, sizeof c->dir);
    /* One builder per directory: wait for another process that holds it. */
    if (st == BORA_OK) {
        st = bora_cache_dir_lock(c->dir, &c->lock_fd);
    }
    if (st == BORA_OK)
        st = check_meta(c);
    if (st == BORA_OK)
        bora_cache_dir_clean(c->dir, 0);
    for (size_t i = 0; i < c->n && st == BORA_OK; i++) {
        int taken = 0;
        if ((st = reuse_shard(c, i, &taken)) != BORA_OK || !taken)
            continue;
        c->reused++;
        c->done_count++;
        c->bytes_done += c->shards[i].size;
        c->docs_done += c->shards[i].n_examples;
        c->tokens_done += c->shards[i].n_tokens;
    }
    if (st == BORA_OK) {
        pthread_mutex_lock(&c->mu);
        complete(c);
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
        bora_log(BORA_LOG_INFO,
                 "data: decoding the clips of %zu of %zu manifests into %s with %d "
                 "worker%s",
                 c->n - c->done_count, c->n, c->dir, n, n == 1 ? "" : "s");
        for (int i = 0; i < n && st == BORA_OK; i++) {
            if (pthread_create(&c->threads[i], NULL, worker, c) != 0)
                st = bora_error_set(BORA_ERR_INTERNAL, "cannot start an audio cache worker");
            else
                c->n_threads++;
        }
    }
    if (st != BORA_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", bora_error_get());
        bora_audio_cache_free(c);
        return bora_error_set(st, "%s", msg);
    }
    *out = c;
    return BORA_OK;
}

void bora_audio_cache_free(bora_audio_cache *c)
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
    bora_mel_free(c->mel);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
}

/* ---- reading ------------------------------------------------------------------------------ */

bora_status bora_audio_cache_wait(bora_audio_cache *c)
{
    pthread_mutex_lock(&c->mu);
    while (!c->error && !c->complete)
        pthread_cond_wait(&c->cv, &c->mu);
    bora_status st = c->error;
    if (st)
        bora_error_set(st, "%s", c->message);
    pthread_mutex_unlock(&c->mu);
    return st;
}

int64_t bora_audio_cache_examples(const bora_audio_cache *c)
{
    return c->complete && !c->error ? c->examples : 0;
}

void bora_audio_cache_example(const bora_audio_cache *c, int64_t i, float *features,
                              int32_t *tokens, int64_t *n)
{
    size_t lo = 0, hi = c->n; /* the last shard starting at or before i */
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (c->shards[mid].start <= i)
            lo = mid;
        else
            hi = mid;
    }
    while (lo + 1 < c->n && c->shards[lo].start + c->shards[lo].n_examples <= i)
        lo++; /* past shards with no clips */
    const shard *sh = &c->shards[lo];
    const entry *e = &sh->entries[i - sh->start];
    size_t M = (size_t)c->n_mels, T = (size_t)c->frames, used = e->used_frames;
    for (size_t m = 0; features && m < M; m++) {
        memcpy(features + m * T, sh->floats + e->feature_at + m * used, used * sizeof(float));
        for (size_t t = used; t < T; t++)
            features[m * T + t] = e->fill;
    }
    if (tokens)
        memcpy(tokens, sh->tokens + e->token_at, e->n_tokens * sizeof *tokens);
    *n = e->n_tokens;
}

void bora_audio_cache_progress_get(bora_audio_cache *c, bora_cache_progress *p)
{
    pthread_mutex_lock(&c->mu);
    *p = (bora_cache_progress){c->done_count, c->n,           c->docs_done, c->tokens_done,
                               c->bytes_done, c->bytes_total, c->complete,  c->error != 0};
    pthread_mutex_unlock(&c->mu);
}

void bora_audio_cache_shape(const bora_audio_cache *c, int *n_mels, int64_t *frames)
{
    *n_mels = c->n_mels;
    *frames = c->frames;
}

const char *bora_audio_cache_dir(const bora_audio_cache *c)
{
    return c->dir;
}

size_t bora_audio_cache_reused(const bora_audio_cache *c)
{
    return c->reused;
}

uint64_t bora_audio_cache_digest(const bora_audio_cache *c)
{
    uint64_t h = bora_fnv1a(BORA_FNV_SEED, "bora-audio-data-1", 17);
    h = bora_fnv1a(h, &c->identity, sizeof c->identity);
    for (size_t i = 0; i < c->n; i++) {
        h = bora_fnv1a(h, &c->shards[i].source_digest, sizeof(uint64_t));
        h = bora_fnv1a(h, &c->shards[i].examples_digest, sizeof(uint64_t));
    }
    return h;
}
