/* core/data/tok_load.c — reading tokenizers: tokenizer.json (json-c, gzip through zlib) and
 * GPT-2's encoder.json + vocab.bpe; the lookup tables; decoding; per-token byte lengths. */
#include "tok_internal.h"

#include "../util/log.h"
#include "../util/str.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

/* ---- hash tables ------------------------------------------------------------------------- */

static uint64_t hash_bytes(const char *s, size_t n, uint64_t h)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static int strmap_grow(tok_strmap *m)
{
    size_t cap = m->cap ? m->cap * 2 : 1024;
    tok_strmap n = {calloc(cap, sizeof(char *)), calloc(cap, sizeof(uint32_t)),
                    calloc(cap, sizeof(int32_t)), cap, 0};
    if (!n.keys || !n.lens || !n.vals) {
        free(n.keys);
        free(n.lens);
        free(n.vals);
        return -1;
    }
    for (size_t i = 0; i < m->cap; i++)
        if (m->keys[i])
            tok_strmap_put(&n, m->keys[i], m->lens[i], m->vals[i]);
    tok_strmap_free(m);
    *m = n;
    return 0;
}

int tok_strmap_put(tok_strmap *m, const char *key, uint32_t len, int32_t val)
{
    if ((m->n + 1) * 2 > m->cap && strmap_grow(m))
        return -1;
    size_t i = hash_bytes(key, len, 1469598103934665603ull) & (m->cap - 1);
    while (m->keys[i]) {
        if (m->lens[i] == len && !memcmp(m->keys[i], key, len)) {
            m->vals[i] = val;
            return 0;
        }
        i = (i + 1) & (m->cap - 1);
    }
    m->keys[i] = key;
    m->lens[i] = len;
    m->vals[i] = val;
    m->n++;
    return 0;
}

int32_t tok_strmap_get(const tok_strmap *m, const char *key, uint32_t len)
{
    if (!m->cap)
        return -1;
    size_t i = hash_bytes(key, len, 1469598103934665603ull) & (m->cap - 1);
    while (m->keys[i]) {
        if (m->lens[i] == len && !memcmp(m->keys[i], key, len))
            return m->vals[i];
        i = (i + 1) & (m->cap - 1);
    }
    return -1;
}

void tok_strmap_free(tok_strmap *m)
{
    free(m->keys);
    free(m->lens);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

static size_t mix64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (size_t)k;
}

int tok_u64map_put(tok_u64map *m, uint64_t key, uint64_t val)
{
    if ((m->n + 1) * 2 > m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 1024;
        tok_u64map n = {calloc(cap, sizeof(uint64_t)), calloc(cap, sizeof(uint64_t)), cap, 0};
        if (!n.keys || !n.vals) {
            free(n.keys);
            free(n.vals);
            return -1;
        }
        for (size_t i = 0; i < m->cap; i++)
            if (m->keys[i])
                tok_u64map_put(&n, m->keys[i], m->vals[i]);
        tok_u64map_free(m);
        *m = n;
    }
    size_t i = mix64(key) & (m->cap - 1);
    while (m->keys[i] && m->keys[i] != key)
        i = (i + 1) & (m->cap - 1);
    if (!m->keys[i])
        m->n++;
    m->keys[i] = key;
    m->vals[i] = val;
    return 0;
}

int tok_u64map_get(const tok_u64map *m, uint64_t key, uint64_t *val)
{
    if (!m->cap)
        return 0;
    size_t i = mix64(key) & (m->cap - 1);
    while (m->keys[i]) {
        if (m->keys[i] == key) {
            *val = m->vals[i];
            return 1;
        }
        i = (i + 1) & (m->cap - 1);
    }
    return 0;
}

void tok_u64map_free(tok_u64map *m)
{
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

/* ---- small helpers ----------------------------------------------------------------------- */

bora_status bora_ids_push(bora_ids *v, int32_t id)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        int32_t *p = realloc(v->ids, cap * sizeof *p);
        if (!p)
            return bora_error_set(BORA_ERR_NOMEM, "out of memory");
        v->ids = p;
        v->cap = cap;
    }
    v->ids[v->n++] = id;
    return BORA_OK;
}

void bora_ids_free(bora_ids *v)
{
    free(v->ids);
    memset(v, 0, sizeof *v);
}

int tok_pieces_push(tok_pieces *v, const char *s, size_t len)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 16;
        tok_piece *p = realloc(v->p, cap * sizeof *p);
        if (!p)
            return -1;
        v->p = p;
        v->cap = cap;
    }
    char *copy = bora_strndup(s, len);
    if (!copy)
        return -1;
    v->p[v->n++] = (tok_piece){copy, len};
    return 0;
}

void tok_pieces_free(tok_pieces *v)
{
    for (size_t i = 0; i < v->n; i++)
        free(v->p[i].s);
    free(v->p);
    memset(v, 0, sizeof *v);
}

int tok_utf8_len(const unsigned char *s, size_t left, uint32_t *cp)
{
    if (!left)
        return 0;
    unsigned c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    int n = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 0;
    if (!n || (size_t)n > left)
        return 0;
    uint32_t v = c & (0x7F >> n);
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if ((n == 3 && (v < 0x800 || (v >= 0xD800 && v <= 0xDFFF))) ||
        (n == 4 && (v < 0x10000 || v > 0x10FFFF)))
        return 0;
    *cp = v;
    return n;
}

size_t tok_utf8_put(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* GPT-2's bytes_to_unicode: printable bytes stand for themselves, the rest for 256 + n. */
uint32_t tok_byte_char[256];
static int16_t char_byte[324];

void tok_byte_table_init(void)
{
    if (tok_byte_char['!'])
        return;
    uint32_t next = 256;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        tok_byte_char[b] = printable ? (uint32_t)b : next++;
    }
    for (int i = 0; i < 324; i++)
        char_byte[i] = -1;
    for (int b = 0; b < 256; b++)
        char_byte[tok_byte_char[b]] = (int16_t)b;
}

int tok_char_byte(uint32_t cp)
{
    return cp < 324 ? char_byte[cp] : -1;
}

/* ---- errors ------------------------------------------------------------------------------ */

static bora_status bad(const char *name, const char *fmt, ...) BORA_PRINTF(2, 3);
static bora_status bad(const char *name, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return bora_error_set(BORA_ERR_INVALID, "%s: %s", name, msg);
}

/* ---- reading files ----------------------------------------------------------------------- */

/* The whole file, gunzipped if it is gzip (zlib reads plain files as they are). */
static char *slurp(const char *path, size_t *len)
{
    gzFile f = gzopen(path, "rb");
    if (!f) {
        bora_error_set(BORA_ERR_IO, "%s: %s", path, strerror(errno ? errno : ENOENT));
        return NULL;
    }
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap + 1);
    for (;;) {
        if (!buf)
            break;
        if (n == cap) {
            if (cap >= (size_t)1 << 31) {
                free(buf);
                gzclose(f);
                bora_error_set(BORA_ERR_INVALID, "%s: larger than 2 GiB", path);
                return NULL;
            }
            char *g = realloc(buf, cap * 2 + 1);
            if (!g) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = g;
            cap *= 2;
        }
        int got = gzread(f, buf + n, (unsigned)(cap - n > (1u << 30) ? (1u << 30) : cap - n));
        if (got < 0) {
            int zerr;
            const char *msg = gzerror(f, &zerr);
            size_t plen = strlen(path); /* zlib's message starts with the path again */
            if (!strncmp(msg, path, plen) && !strncmp(msg + plen, ": ", 2))
                msg += plen + 2;
            bora_error_set(BORA_ERR_INVALID, "%s: corrupt gzip stream (%s)", path, msg);
            free(buf);
            gzclose(f);
            return NULL;
        }
        if (got == 0)
            break;
        n += (size_t)got;
    }
    /* zlib ends a stream cut short like a whole one, leaving Z_BUF_ERROR behind; the partial
     * text would otherwise be reported as bad JSON. */
    int zerr = Z_OK;
    if (buf)
        gzerror(f, &zerr);
    if (zerr == Z_BUF_ERROR) {
        bora_error_set(BORA_ERR_INVALID,
                       "%s: truncated gzip stream (it ends after %zu bytes of text); the file is "
                       "incomplete: copy or download it again",
                       path, n);
        free(buf);
        gzclose(f);
        return NULL;
    }
    gzclose(f);
    if (!buf) {
        bora_error_set(BORA_ERR_NOMEM, "%s: out of memory", path);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

/* ---- vocabulary -------------------------------------------------------------------------- */

static bora_tokenizer *tok_new(void)
{
    tok_byte_table_init();
    bora_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->unk_id = -1;
    for (int i = 0; i < 256; i++)
        t->byte_ids[i] = -1;
    return t;
}

/* Make room for ids below n. */
static int grow_tokens(bora_tokenizer *t, size_t n)
{
    if (n <= t->vocab_size)
        return 0;
    if (n > t->tokens_cap) { /* geometric: vocabularies arrive in id order */
        size_t cap = t->tokens_cap ? t->tokens_cap : 1024;
        while (cap < n)
            cap *= 2;
        char **tok = realloc(t->tokens, cap * sizeof *tok);
        if (tok)
            t->tokens = tok;
        uint8_t *sp = realloc(t->is_special, cap);
        if (sp)
            t->is_special = sp;
        if (!tok || !sp)
            return -1;
        t->tokens_cap = cap;
    }
    for (size_t i = t->vocab_size; i < n; i++) {
        t->tokens[i] = NULL;
        t->is_special[i] = 0;
    }
    t->vocab_size = n;
    return 0;
}

static bora_status set_token(bora_tokenizer *t, const char *name, int64_t id, const char *s,
                             size_t len)
{
    if (id < 0 || id > 16777216)
        return bad(name, "token '%.40s' has id %lld, outside 0..2^24", s, (long long)id);
    if (grow_tokens(t, (size_t)id + 1))
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    if (t->tokens[id]) {
        if (strlen(t->tokens[id]) == len && !memcmp(t->tokens[id], s, len))
            return BORA_OK;
        return bad(name, "id %lld is given to both '%.40s' and '%.40s'", (long long)id,
                   t->tokens[id], s);
    }
    t->tokens[id] = bora_strndup(s, len);
    if (!t->tokens[id] || tok_strmap_put(&t->vocab, t->tokens[id], (uint32_t)len, (int32_t)id))
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    return BORA_OK;
}

static bora_status add_merge(bora_tokenizer *t, const char *name, const char *a, size_t la,
                             const char *b, size_t lb, uint32_t rank)
{
    int32_t ia = tok_strmap_get(&t->vocab, a, (uint32_t)la);
    int32_t ib = tok_strmap_get(&t->vocab, b, (uint32_t)lb);
    if (ia < 0 || ib < 0)
        return bad(name, "merge %u ('%.*s' '%.*s') uses a token that is not in the vocabulary",
                   rank, (int)la, a, (int)lb, b);
    char buf[1024];
    if (la + lb >= sizeof buf)
        return bad(name, "merge %u is too long", rank);
    memcpy(buf, a, la);
    memcpy(buf + la, b, lb);
    int32_t im = tok_strmap_get(&t->vocab, buf, (uint32_t)(la + lb));
    if (im < 0)
        return bad(name, "merge %u makes '%.*s', which is not in the vocabulary", rank,
                   (int)(la + lb), buf);
    uint64_t key = ((uint64_t)(uint32_t)ia << 32 | (uint32_t)ib) + 1; /* +1: key 0 is empty */
    uint64_t old;
    if (tok_u64map_get(&t->merges, key, &old))
        return BORA_OK; /* a repeated merge keeps its first (lowest) rank */
    if (tok_u64map_put(&t->merges, key, (uint64_t)rank << 32 | (uint32_t)im))
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    return BORA_OK;
}

/* ---- json helpers ------------------------------------------------------------------------ */

static json_object *get(json_object *o, const char *key)
{
    json_object *v = NULL;
    if (o && json_object_is_type(o, json_type_object) && json_object_object_get_ex(o, key, &v) &&
        !json_object_is_type(v, json_type_null))
        return v;
    return NULL;
}

static const char *get_str(json_object *o, const char *key)
{
    json_object *v = get(o, key);
    return v && json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

static int get_bool(json_object *o, const char *key, int def)
{
    json_object *v = get(o, key);
    return v && json_object_is_type(v, json_type_boolean) ? json_object_get_boolean(v) : def;
}

static const char *type_of(json_object *o)
{
    return get_str(o, "type");
}

static pcre2_code *compile_regex(const char *name, const char *pattern)
{
    int err;
    PCRE2_SIZE at;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP, &err, &at, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        bad(name, "regex '%.80s' does not compile at offset %zu: %s", pattern, (size_t)at,
            (const char *)msg);
        return NULL;
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* faster when available; correct either way */
    return re;
}

/* A pattern object: {"String": s} or {"Regex": r}. */
static bora_status pattern_of(const char *name, const char *what, json_object *o, char **literal,
                              pcre2_code **re)
{
    const char *s = get_str(o, "String"), *r = get_str(o, "Regex");
    if (s) {
        *literal = bora_strdup(s);
        return *literal ? BORA_OK : bora_error_set(BORA_ERR_NOMEM, "out of memory");
    }
    if (r) {
        *re = compile_regex(name, r);
        return *re ? BORA_OK : BORA_ERR_INVALID;
    }
    return bad(name, "%s has no String or Regex pattern", what);
}

/* ---- normalizers, pre-tokenizers, decoders ----------------------------------------------- */

static void norm_free(tok_norm *n)
{
    if (!n)
        return;
    for (int i = 0; i < n->n; i++)
        norm_free(&n->items[i]);
    if (n->kind == TN_SEQUENCE)
        free(n->items);
    free(n->a);
    free(n->b);
    if (n->re)
        pcre2_code_free(n->re);
}

static bora_status parse_norm(const char *name, json_object *o, tok_norm *n, int depth)
{
    memset(n, 0, sizeof *n);
    const char *type = type_of(o);
    if (!type)
        return bad(name, "a normalizer has no type");
    if (depth > 8)
        return bad(name, "normalizers nested too deeply");
    if (!strcmp(type, "Sequence")) {
        json_object *list = get(o, "normalizers");
        if (!list || !json_object_is_type(list, json_type_array))
            return bad(name, "normalizer Sequence has no normalizers list");
        n->kind = TN_SEQUENCE;
        n->n = (int)json_object_array_length(list);
        n->items = calloc((size_t)n->n + 1, sizeof *n->items);
        if (!n->items)
            return bora_error_set(BORA_ERR_NOMEM, "out of memory");
        for (int i = 0; i < n->n; i++) {
            bora_status st = parse_norm(name, json_object_array_get_idx(list, (size_t)i),
                                        &n->items[i], depth + 1);
            if (st != BORA_OK)
                return st;
        }
        return BORA_OK;
    }
    if (!strcmp(type, "Prepend")) {
        const char *p = get_str(o, "prepend");
        if (!p)
            return bad(name, "normalizer Prepend has no prepend text");
        n->kind = TN_PREPEND;
        n->a = bora_strdup(p);
        return BORA_OK;
    }
    if (!strcmp(type, "Replace")) {
        const char *c = get_str(o, "content");
        if (!c)
            return bad(name, "normalizer Replace has no content");
        n->kind = TN_REPLACE;
        n->b = bora_strdup(c);
        return pattern_of(name, "normalizer Replace", get(o, "pattern"), &n->a, &n->re);
    }
    static const struct {
        const char *name;
        int kind;
    } simple[] = {{"NFC", TN_NFC},
                  {"NFD", TN_NFD},
                  {"NFKC", TN_NFKC},
                  {"NFKD", TN_NFKD},
                  {"Lowercase", TN_LOWERCASE}};
    for (size_t i = 0; i < sizeof simple / sizeof simple[0]; i++)
        if (!strcmp(type, simple[i].name)) {
            n->kind = simple[i].kind;
            return BORA_OK;
        }
    if (!strcmp(type, "Strip")) {
        n->kind = TN_STRIP;
        n->left = get_bool(o, "left", 1);
        n->right = get_bool(o, "right", 1);
        return BORA_OK;
    }
    return bad(name,
               "normalizer type '%s' is not supported (bora reads Sequence, Prepend, "
               "Replace, NFC, NFD, NFKC, NFKD, Lowercase, Strip)",
               type);
}

static void pre_free(tok_pre *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->n; i++)
        pre_free(&p->items[i]);
    if (p->kind == TP_SEQUENCE)
        free(p->items);
    free(p->literal);
    free(p->replacement);
    if (p->re)
        pcre2_code_free(p->re);
}

/* GPT-2's pre-tokenization pattern, which ByteLevel(use_regex) applies. */
static const char gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static bora_status parse_pre(const char *name, json_object *o, tok_pre *p, int depth)
{
    memset(p, 0, sizeof *p);
    const char *type = type_of(o);
    if (!type)
        return bad(name, "a pre-tokenizer has no type");
    if (depth > 8)
        return bad(name, "pre-tokenizers nested too deeply");
    if (!strcmp(type, "Sequence")) {
        json_object *list = get(o, "pretokenizers");
        if (!list || !json_object_is_type(list, json_type_array))
            return bad(name, "pre-tokenizer Sequence has no pretokenizers list");
        p->kind = TP_SEQUENCE;
        p->n = (int)json_object_array_length(list);
        p->items = calloc((size_t)p->n + 1, sizeof *p->items);
        if (!p->items)
            return bora_error_set(BORA_ERR_NOMEM, "out of memory");
        for (int i = 0; i < p->n; i++) {
            bora_status st = parse_pre(name, json_object_array_get_idx(list, (size_t)i),
                                       &p->items[i], depth + 1);
            if (st != BORA_OK)
                return st;
        }
        return BORA_OK;
    }
    if (!strcmp(type, "ByteLevel")) {
        p->kind = TP_BYTELEVEL;
        p->add_prefix_space = get_bool(o, "add_prefix_space", 1);
        p->use_regex = get_bool(o, "use_regex", 1);
        if (p->use_regex && !(p->re = compile_regex(name, gpt2_pattern)))
            return BORA_ERR_INVALID;
        p->behavior = TB_ISOLATED;
        return BORA_OK;
    }
    if (!strcmp(type, "Split")) {
        p->kind = TP_SPLIT;
        const char *b = get_str(o, "behavior");
        static const struct {
            const char *name;
            int v;
        } behaviors[] = {{"Removed", TB_REMOVED},
                         {"Isolated", TB_ISOLATED},
                         {"MergedWithPrevious", TB_MERGED_PREVIOUS},
                         {"MergedWithNext", TB_MERGED_NEXT},
                         {"Contiguous", TB_CONTIGUOUS}};
        for (size_t i = 0; b && i < sizeof behaviors / sizeof behaviors[0]; i++)
            if (!strcmp(b, behaviors[i].name))
                p->behavior = behaviors[i].v;
        if (!p->behavior)
            return bad(name,
                       "pre-tokenizer Split has behavior '%s'; expected Removed, Isolated, "
                       "MergedWithPrevious, MergedWithNext or Contiguous",
                       b ? b : "(none)");
        p->invert = get_bool(o, "invert", 0);
        return pattern_of(name, "pre-tokenizer Split", get(o, "pattern"), &p->literal, &p->re);
    }
    if (!strcmp(type, "Metaspace")) {
        p->kind = TP_METASPACE;
        const char *r = get_str(o, "replacement");
        const char *scheme = get_str(o, "prepend_scheme");
        p->replacement = bora_strdup(r ? r : "\xe2\x96\x81");
        p->prepend = scheme ? (!strcmp(scheme, "never")   ? 0
                               : !strcmp(scheme, "first") ? 2
                                                          : 1)
                            : get_bool(o, "add_prefix_space", 1);
        if (get_bool(o, "split", 1))
            return bad(name, "pre-tokenizer Metaspace with split: true is not supported");
        return BORA_OK;
    }
    return bad(name,
               "pre-tokenizer type '%s' is not supported (bora reads Sequence, ByteLevel, "
               "Split, Metaspace with split false)",
               type);
}

static bora_status parse_dec_one(const char *name, json_object *o, tok_dec *d)
{
    const char *type = type_of(o);
    memset(d, 0, sizeof *d);
    if (!type)
        return bad(name, "a decoder has no type");
    if (!strcmp(type, "ByteLevel")) {
        d->kind = TD_BYTELEVEL;
    } else if (!strcmp(type, "ByteFallback")) {
        d->kind = TD_BYTEFALLBACK;
    } else if (!strcmp(type, "Fuse")) {
        d->kind = TD_FUSE;
    } else if (!strcmp(type, "Replace")) {
        d->kind = TD_REPLACE;
        const char *c = get_str(o, "content"), *s = get_str(get(o, "pattern"), "String");
        if (!c || !s)
            return bad(name, "decoder Replace needs a String pattern and a content");
        d->a = bora_strdup(s);
        d->b = bora_strdup(c);
    } else if (!strcmp(type, "Strip")) {
        d->kind = TD_STRIP;
        const char *c = get_str(o, "content");
        json_object *st = get(o, "start"), *sp = get(o, "stop");
        d->a = bora_strdup(c ? c : " ");
        d->start = st ? json_object_get_int(st) : 0;
        d->stop = sp ? json_object_get_int(sp) : 0;
    } else if (!strcmp(type, "Metaspace")) {
        d->kind = TD_METASPACE;
        const char *r = get_str(o, "replacement");
        d->a = bora_strdup(r ? r : "\xe2\x96\x81");
        d->start = 1;
    } else {
        return bad(name,
                   "decoder type '%s' is not supported (bora reads ByteLevel, Replace, "
                   "ByteFallback, Fuse, Strip, Metaspace and a Sequence of them)",
                   type);
    }
    return BORA_OK;
}

static bora_status parse_dec(const char *name, json_object *o, bora_tokenizer *t)
{
    const char *type = type_of(o);
    json_object *list = type && !strcmp(type, "Sequence") ? get(o, "decoders") : NULL;
    size_t n = list ? json_object_array_length(list) : 1;
    t->dec = calloc(n ? n : 1, sizeof *t->dec);
    if (!t->dec)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        bora_status st =
            parse_dec_one(name, list ? json_object_array_get_idx(list, i) : o, &t->dec[i]);
        t->n_dec = (int)i + 1;
        if (st != BORA_OK)
            return st;
    }
    return BORA_OK;
}

/* ---- added tokens and the template -------------------------------------------------------- */

static int added_cmp(const void *a, const void *b)
{
    const tok_added *x = a, *y = b;
    unsigned char fx = (unsigned char)x->content[0], fy = (unsigned char)y->content[0];
    if (fx != fy)
        return fx < fy ? -1 : 1;
    if (x->len != y->len)
        return x->len > y->len ? -1 : 1; /* longest first: leftmost-longest matching */
    return x->id < y->id ? -1 : x->id > y->id;
}

static bora_status index_added(bora_tokenizer *t)
{
    qsort(t->added, t->n_added, sizeof *t->added, added_cmp);
    size_t k = 0;
    for (int b = 0; b <= 256; b++) {
        while (k < t->n_added && (unsigned char)t->added[k].content[0] < b)
            k++;
        t->added_first[b] = (uint32_t)k;
    }
    return BORA_OK;
}

static bora_status parse_added(const char *name, json_object *list, bora_tokenizer *t)
{
    size_t n = json_object_array_length(list);
    t->added = calloc(n ? n : 1, sizeof *t->added);
    if (!t->added)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_object *a = json_object_array_get_idx(list, i);
        const char *content = get_str(a, "content");
        json_object *idj = get(a, "id");
        if (!content || !*content || !idj || !json_object_is_type(idj, json_type_int))
            return bad(name, "added token %zu needs a content and an integer id", i);
        if (get_bool(a, "lstrip", 0) || get_bool(a, "rstrip", 0) || get_bool(a, "single_word", 0))
            return bad(name,
                       "added token '%.40s' uses lstrip, rstrip or single_word, which bora "
                       "does not support",
                       content);
        int64_t id = json_object_get_int64(idj);
        bora_status st = set_token(t, name, id, content, strlen(content));
        if (st != BORA_OK)
            return st;
        int special = get_bool(a, "special", 0);
        t->is_special[id] = (uint8_t)special;
        t->added[t->n_added++] =
            (tok_added){t->tokens[id], (uint32_t)strlen(content), (int32_t)id, special};
    }
    return index_added(t);
}

static bora_status parse_post(const char *name, json_object *o, bora_tokenizer *t)
{
    const char *type = type_of(o);
    if (!type)
        return bad(name, "the post_processor has no type");
    if (!strcmp(type, "ByteLevel"))
        return BORA_OK; /* it only moves offsets */
    if (strcmp(type, "TemplateProcessing"))
        return bad(name,
                   "post_processor type '%s' is not supported (bora reads "
                   "TemplateProcessing and ByteLevel)",
                   type);
    json_object *single = get(o, "single"), *specials = get(o, "special_tokens");
    if (!single || !json_object_is_type(single, json_type_array))
        return bad(name, "TemplateProcessing has no single template");
    size_t n = json_object_array_length(single);
    t->prefix_ids = calloc(n + 1, sizeof(int32_t));
    t->suffix_ids = calloc(n + 1, sizeof(int32_t));
    if (!t->prefix_ids || !t->suffix_ids)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    int seen_sequence = 0;
    for (size_t i = 0; i < n; i++) {
        json_object *item = json_object_array_get_idx(single, i), *sp = get(item, "SpecialToken");
        if (get(item, "Sequence")) {
            if (seen_sequence++)
                return bad(name, "TemplateProcessing single template names the text twice");
            continue;
        }
        const char *key = sp ? get_str(sp, "id") : NULL;
        json_object *entry = key ? get(specials, key) : NULL, *ids = get(entry, "ids");
        if (!ids || !json_object_is_type(ids, json_type_array))
            return bad(name, "TemplateProcessing refers to special token '%s' without ids",
                       key ? key : "?");
        for (size_t k = 0; k < json_object_array_length(ids); k++) {
            int64_t id = json_object_get_int64(json_object_array_get_idx(ids, k));
            if (id < 0 || (size_t)id >= t->vocab_size || !t->tokens[id])
                return bad(name, "TemplateProcessing uses id %lld, which is not a token",
                           (long long)id);
            int32_t *dst = seen_sequence ? t->suffix_ids : t->prefix_ids;
            size_t *cnt = seen_sequence ? &t->n_suffix : &t->n_prefix;
            if (*cnt >= n)
                return bad(name, "TemplateProcessing template is too long");
            dst[(*cnt)++] = (int32_t)id;
        }
    }
    if (!seen_sequence)
        return bad(name, "TemplateProcessing single template has no $A");
    return BORA_OK;
}

/* ---- the model -------------------------------------------------------------------------- */

static bora_status parse_model(const char *name, json_object *model, bora_tokenizer *t)
{
    const char *type = type_of(model);
    if (!model)
        return bad(name, "no model");
    if (type && strcmp(type, "BPE"))
        return bad(name, "model type '%s' is not supported (bora reads BPE)", type);
    json_object *vocab = get(model, "vocab"), *merges = get(model, "merges");
    if (!vocab || !json_object_is_type(vocab, json_type_object))
        return bad(name, "model.vocab is missing or not an object");
    if (!merges || !json_object_is_type(merges, json_type_array))
        return bad(name, "model.merges is missing or not a list");
    const char *cont = get_str(model, "continuing_subword_prefix");
    const char *suffix = get_str(model, "end_of_word_suffix");
    json_object *dropout = get(model, "dropout");
    if ((cont && *cont) || (suffix && *suffix))
        return bad(name, "BPE with continuing_subword_prefix or end_of_word_suffix is not "
                         "supported");
    if (dropout && json_object_get_double(dropout) != 0.0)
        return bad(name, "BPE dropout is not supported (it makes ids random)");
    size_t n = 0;
    json_object_object_foreach(vocab, key, val)
    {
        if (!json_object_is_type(val, json_type_int))
            return bad(name, "model.vocab['%.40s'] is not an integer id", key);
        bora_status st = set_token(t, name, json_object_get_int64(val), key, strlen(key));
        if (st != BORA_OK)
            return st;
        n++;
    }
    if (!n)
        return bad(name, "model.vocab is empty");
    size_t n_merges = json_object_array_length(merges);
    for (size_t i = 0; i < n_merges; i++) {
        json_object *m = json_object_array_get_idx(merges, i);
        const char *a, *b;
        size_t la, lb;
        if (json_object_is_type(m, json_type_string)) {
            a = json_object_get_string(m);
            const char *sp = strchr(a, ' ');
            if (!sp || sp == a || !sp[1] || strchr(sp + 1, ' '))
                return bad(name, "merge %zu '%.60s' is not two tokens separated by a space", i, a);
            la = (size_t)(sp - a);
            b = sp + 1;
            lb = strlen(b);
        } else if (json_object_is_type(m, json_type_array) && json_object_array_length(m) == 2 &&
                   json_object_is_type(json_object_array_get_idx(m, 0), json_type_string) &&
                   json_object_is_type(json_object_array_get_idx(m, 1), json_type_string)) {
            a = json_object_get_string(json_object_array_get_idx(m, 0));
            b = json_object_get_string(json_object_array_get_idx(m, 1));
            la = strlen(a);
            lb = strlen(b);
        } else {
            return bad(name, "merge %zu is neither \"a b\" nor [\"a\", \"b\"]", i);
        }
        bora_status st = add_merge(t, name, a, la, b, lb, (uint32_t)i);
        if (st != BORA_OK)
            return st;
    }
    t->byte_fallback = get_bool(model, "byte_fallback", 0);
    t->fuse_unk = get_bool(model, "fuse_unk", 0);
    t->ignore_merges = get_bool(model, "ignore_merges", 0);
    const char *unk = get_str(model, "unk_token");
    if (unk) {
        t->unk_id = tok_strmap_get(&t->vocab, unk, (uint32_t)strlen(unk));
        if (t->unk_id < 0)
            return bad(name, "model.unk_token '%.40s' is not in the vocabulary", unk);
    }
    if (t->byte_fallback)
        for (int b = 0; b < 256; b++) {
            char tok[8];
            snprintf(tok, sizeof tok, "<0x%02X>", b);
            t->byte_ids[b] = tok_strmap_get(&t->vocab, tok, 6);
        }
    return BORA_OK;
}

static bora_status decode_raw(const bora_tokenizer *t, const int32_t *ids, size_t n, tok_buf *out);
static void tok_buf_free(tok_buf *b);

/* Per-token decoded byte lengths: each token alone through the decoder, less Strip. */
static bora_status token_lengths(bora_tokenizer *t)
{
    t->token_bytes = calloc(t->vocab_size ? t->vocab_size : 1, sizeof *t->token_bytes);
    if (!t->token_bytes)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    for (size_t id = 0; id < t->vocab_size; id++) {
        if (!t->tokens[id] || t->is_special[id])
            continue;
        /* The token's own bytes: a byte-level token may hold part of a character, and a
         * metaspace counts as the space it decodes to (Strip, which drops the one a normalizer
         * prepends to a text, is left out: that byte is counted once per text). */
        int32_t one = (int32_t)id;
        tok_buf raw = {0};
        bora_status st = decode_raw(t, &one, 1, &raw);
        if (st != BORA_OK)
            return st;
        t->token_bytes[id] = (uint32_t)raw.n;
        tok_buf_free(&raw);
    }
    return BORA_OK;
}

static bora_status finish(const char *name, bora_tokenizer *t, uint64_t hash)
{
    for (size_t i = 0; i < t->vocab_size; i++)
        if (!t->tokens[i])
            return bad(name, "no token has id %zu (ids must run 0..%zu without gaps)", i,
                       t->vocab_size - 1);
    t->hash = hash;
    return token_lengths(t);
}

bora_status bora_tokenizer_load_json(const char *name, const char *text, size_t len,
                                     bora_tokenizer **out)
{
    *out = NULL;
    json_tokener *jt = json_tokener_new_ex(64);
    if (!jt)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    json_object *root = len ? json_tokener_parse_ex(jt, text, (int)len) : NULL;
    enum json_tokener_error jerr = json_tokener_get_error(jt);
    size_t at = json_tokener_get_parse_end(jt);
    json_tokener_free(jt);
    if (!root || jerr != json_tokener_success) {
        json_object_put(root);
        return bad(name, "not valid JSON (%s at byte %zu)",
                   len ? json_tokener_error_desc(
                             jerr == json_tokener_success ? json_tokener_continue : jerr)
                       : "empty file",
                   at);
    }
    if (len > INT32_MAX) {
        json_object_put(root);
        return bad(name, "larger than 2 GiB");
    }
    bora_tokenizer *t = tok_new();
    bora_status st = t ? BORA_OK : bora_error_set(BORA_ERR_NOMEM, "out of memory");
    if (st == BORA_OK && !json_object_is_type(root, json_type_object))
        st = bad(name, "not a tokenizer.json (the top level is not an object)");
    if (st == BORA_OK)
        st = parse_model(name, get(root, "model"), t);
    json_object *added = get(root, "added_tokens");
    if (st == BORA_OK && added && !json_object_is_type(added, json_type_array))
        st = bad(name, "added_tokens is not a list");
    if (st == BORA_OK && added)
        st = parse_added(name, added, t);
    if (st == BORA_OK && get(root, "normalizer")) {
        t->norm = calloc(1, sizeof *t->norm);
        st = t->norm ? parse_norm(name, get(root, "normalizer"), t->norm, 0) : BORA_ERR_NOMEM;
    }
    if (st == BORA_OK && get(root, "pre_tokenizer")) {
        t->pre = calloc(1, sizeof *t->pre);
        st = t->pre ? parse_pre(name, get(root, "pre_tokenizer"), t->pre, 0) : BORA_ERR_NOMEM;
    }
    if (st == BORA_OK && get(root, "post_processor"))
        st = parse_post(name, get(root, "post_processor"), t);
    if (st == BORA_OK && get(root, "decoder"))
        st = parse_dec(name, get(root, "decoder"), t);
    if (st == BORA_OK)
        st = finish(name, t, hash_bytes(text, len, 1469598103934665603ull));
    json_object_put(root);
    if (st != BORA_OK) {
        bora_tokenizer_free(t);
        return st;
    }
    *out = t;
    return BORA_OK;
}

/* GPT-2's own files: encoder.json (token -> id) and vocab.bpe ("#version" then "a b" lines). */
static bora_status load_gpt2_pair(const char *encoder_path, const char *merges_path,
                                  bora_tokenizer **out)
{
    size_t elen, mlen;
    char *enc = slurp(encoder_path, &elen);
    char *mer = enc ? slurp(merges_path, &mlen) : NULL;
    if (!mer) {
        free(enc);
        return BORA_ERR_IO;
    }
    json_object *vocab = json_tokener_parse(enc);
    bora_tokenizer *t = tok_new();
    bora_status st = BORA_OK;
    if (!vocab || !json_object_is_type(vocab, json_type_object))
        st = bad(encoder_path, "not a JSON object of token -> id");
    size_t n = 0;
    if (st == BORA_OK) {
        json_object_object_foreach(vocab, key, val)
        {
            if (!json_object_is_type(val, json_type_int)) {
                st = bad(encoder_path, "'%.40s' has no integer id", key);
                break;
            }
            st = set_token(t, encoder_path, json_object_get_int64(val), key, strlen(key));
            if (st != BORA_OK)
                break;
            n++;
        }
    }
    if (st == BORA_OK && !n)
        st = bad(encoder_path, "the vocabulary is empty");
    uint32_t rank = 0;
    for (char *line = mer, *next; st == BORA_OK && line && *line; line = next) {
        next = strchr(line, '\n');
        size_t ll = next ? (size_t)(next - line) : strlen(line);
        if (next)
            next++;
        if (ll && line[ll - 1] == '\r')
            ll--;
        if (!ll || (rank == 0 && line[0] == '#'))
            continue;
        const char *sp = memchr(line, ' ', ll);
        if (!sp || sp == line || sp + 1 == line + ll ||
            memchr(sp + 1, ' ', (size_t)(line + ll - sp - 1)))
            st = bad(merges_path, "line '%.*s' is not two tokens separated by a space",
                     (int)(ll > 60 ? 60 : ll), line);
        else
            st = add_merge(t, merges_path, line, (size_t)(sp - line), sp + 1,
                           (size_t)(line + ll - sp - 1), rank++);
    }
    if (st == BORA_OK) { /* GPT-2's pipeline: byte level, and <|endoftext|> as a special token */
        t->pre = calloc(1, sizeof *t->pre);
        t->dec = calloc(1, sizeof *t->dec);
        if (!t->pre || !t->dec)
            st = bora_error_set(BORA_ERR_NOMEM, "out of memory");
    }
    if (st == BORA_OK) {
        t->pre->kind = TP_BYTELEVEL;
        t->pre->use_regex = 1;
        t->pre->behavior = TB_ISOLATED;
        t->pre->re = compile_regex(encoder_path, gpt2_pattern);
        t->dec[0].kind = TD_BYTELEVEL;
        t->n_dec = 1;
        int32_t eot = tok_strmap_get(&t->vocab, "<|endoftext|>", 13);
        t->added = calloc(1, sizeof *t->added);
        if (eot >= 0 && t->added) {
            t->added[0] = (tok_added){t->tokens[eot], 13, eot, 1};
            t->n_added = 1;
            t->is_special[eot] = 1;
        }
        index_added(t);
        st = finish(encoder_path, t,
                    hash_bytes(mer, mlen, hash_bytes(enc, elen, 1469598103934665603ull)));
    }
    json_object_put(vocab);
    free(enc);
    free(mer);
    if (st != BORA_OK) {
        bora_tokenizer_free(t);
        return st;
    }
    *out = t;
    return BORA_OK;
}

static int exists(const char *dir, const char *name, char *out, size_t cap)
{
    struct stat st;
    snprintf(out, cap, "%s/%s", dir, name);
    return stat(out, &st) == 0 && S_ISREG(st.st_mode);
}

bora_status bora_tokenizer_load(const char *path, bora_tokenizer **out)
{
    *out = NULL;
    struct stat st;
    if (stat(path, &st) != 0)
        return bora_error_set(BORA_ERR_NOT_FOUND, "tokenizer '%s': %s", path, strerror(errno));
    char a[4096], b[4096];
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (S_ISDIR(st.st_mode)) {
        if (exists(path, "tokenizer.json", a, sizeof a) ||
            exists(path, "tokenizer.json.gz", a, sizeof a))
            return bora_tokenizer_load(a, out);
        if (exists(path, "encoder.json", a, sizeof a) && exists(path, "vocab.bpe", b, sizeof b))
            return load_gpt2_pair(a, b, out);
        if (exists(path, "vocab.json", a, sizeof a) && exists(path, "merges.txt", b, sizeof b))
            return load_gpt2_pair(a, b, out);
        return bora_error_set(BORA_ERR_NOT_FOUND,
                              "tokenizer folder '%s' has no tokenizer.json, encoder.json + "
                              "vocab.bpe, or vocab.json + merges.txt",
                              path);
    }
    if (!strcmp(base, "encoder.json") || !strcmp(base, "vocab.json")) {
        snprintf(a, sizeof a, "%.*s%s", (int)(base - path), path,
                 strcmp(base, "encoder.json") ? "merges.txt" : "vocab.bpe");
        return load_gpt2_pair(path, a, out);
    }
    size_t len;
    char *text = slurp(path, &len);
    if (!text)
        return BORA_ERR_IO; /* slurp said why */
    bora_status s = bora_tokenizer_load_json(path, text, len, out);
    free(text);
    return s;
}

void bora_tokenizer_free(bora_tokenizer *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->vocab_size; i++)
        free(t->tokens[i]);
    free(t->tokens);
    free(t->token_bytes);
    free(t->is_special);
    tok_strmap_free(&t->vocab);
    tok_u64map_free(&t->merges);
    if (t->norm)
        norm_free(t->norm);
    free(t->norm);
    if (t->pre)
        pre_free(t->pre);
    free(t->pre);
    for (int i = 0; i < t->n_dec; i++) {
        free(t->dec[i].a);
        free(t->dec[i].b);
    }
    free(t->dec);
    free(t->added);
    free(t->prefix_ids);
    free(t->suffix_ids);
    free(t);
}

/* ---- decoding ---------------------------------------------------------------------------- */

static void tok_buf_free(tok_buf *b)
{
    free(b->s);
}

int tok_buf_put(tok_buf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->n + n + 1) * 2 + 16;
        char *p = realloc(b->s, cap);
        if (!p)
            return -1;
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
    return 0;
}

/* One token's text through the per-token decoder steps (ByteLevel, Replace, ByteFallback,
 * Metaspace); Fuse and Strip act on the whole. */
static void decode_token(const bora_tokenizer *t, int32_t id, tok_buf *out, int first)
{
    const char *s = t->tokens[id];
    size_t n = strlen(s);
    if (t->is_special[id] || !t->n_dec) {
        tok_buf_put(out, s, n);
        return;
    }
    tok_buf cur = {0};
    tok_buf_put(&cur, s, n);
    for (int k = 0; k < t->n_dec; k++) {
        const tok_dec *d = &t->dec[k];
        tok_buf next = {0};
        if (d->kind == TD_BYTELEVEL) {
            for (size_t i = 0; i < cur.n;) {
                uint32_t cp;
                int l = tok_utf8_len((const unsigned char *)cur.s + i, cur.n - i, &cp);
                int byte = l ? tok_char_byte(cp) : -1;
                if (byte >= 0) {
                    char c = (char)byte;
                    tok_buf_put(&next, &c, 1);
                } else {
                    tok_buf_put(&next, cur.s + i, l ? (size_t)l : 1);
                }
                i += l ? (size_t)l : 1;
            }
        } else if (d->kind == TD_REPLACE || d->kind == TD_METASPACE) {
            const char *pat = d->a, *rep = d->kind == TD_REPLACE ? d->b : " ";
            size_t pl = strlen(pat);
            for (size_t i = 0; i < cur.n;) {
                if (pl && i + pl <= cur.n && !memcmp(cur.s + i, pat, pl)) {
                    if (!(d->kind == TD_METASPACE && first && i == 0))
                        tok_buf_put(&next, rep, strlen(rep));
                    i += pl;
                } else {
                    tok_buf_put(&next, cur.s + i, 1);
                    i++;
                }
            }
        } else if (d->kind == TD_BYTEFALLBACK) {
            unsigned v;
            if (cur.n == 6 && sscanf(cur.s, "<0x%2X>", &v) == 1 && cur.s[5] == '>') {
                char c = (char)v;
                tok_buf_put(&next, &c, 1);
            } else {
                tok_buf_put(&next, cur.s, cur.n);
            }
        } else {
            tok_buf_put(&next, cur.s, cur.n);
        }
        free(cur.s);
        cur = next;
        if (!cur.s)
            tok_buf_put(&cur, "", 0);
    }
    tok_buf_put(out, cur.s, cur.n);
    free(cur.s);
}

/* The bytes ids stand for, before any repair of partial UTF-8 characters. */
static bora_status decode_raw(const bora_tokenizer *t, const int32_t *ids, size_t n, tok_buf *out)
{
    tok_buf_put(out, "", 0);
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || (size_t)ids[i] >= t->vocab_size) {
            free(out->s);
            return bora_error_set(BORA_ERR_INVALID, "id %d is not in the vocabulary (0..%zu)",
                                  ids[i], t->vocab_size - 1);
        }
        decode_token(t, ids[i], out, i == 0);
    }
    return BORA_OK;
}

bora_status bora_tokenizer_decode(const bora_tokenizer *t, const int32_t *ids, size_t n,
                                  char **text, size_t *len)
{
    tok_buf out = {0};
    bora_status st = decode_raw(t, ids, n, &out);
    if (st != BORA_OK)
        return st;
    /* Bytes that do not form UTF-8 (a partial character) become U+FFFD, as Hugging Face does. */
    tok_buf clean = {0};
    tok_buf_put(&clean, "", 0);
    for (size_t i = 0; i < out.n;) {
        uint32_t cp;
        int l = tok_utf8_len((const unsigned char *)out.s + i, out.n - i, &cp);
        if (l)
            tok_buf_put(&clean, out.s + i, (size_t)l);
        else
            tok_buf_put(&clean, "\xef\xbf\xbd", 3);
        i += l ? (size_t)l : 1;
    }
    free(out.s);
    /* Strip: up to start copies of content from the front, stop from the back. */
    for (int k = 0; k < t->n_dec; k++) {
        const tok_dec *d = &t->dec[k];
        if (d->kind != TD_STRIP)
            continue;
        size_t cl = strlen(d->a), front = 0;
        for (int s = 0; s < d->start && clean.n - front >= cl && !memcmp(clean.s + front, d->a, cl);
             s++)
            front += cl;
        memmove(clean.s, clean.s + front, clean.n - front + 1);
        clean.n -= front;
        for (int s = 0; s < d->stop && clean.n >= cl && !memcmp(clean.s + clean.n - cl, d->a, cl);
             s++)
            clean.s[clean.n -= cl] = 0;
    }
    *text = clean.s;
    *len = clean.n;
    return BORA_OK;
}

size_t bora_tokenizer_vocab_size(const bora_tokenizer *t)
{
    return t->vocab_size;
}

uint32_t bora_tokenizer_token_bytes(const bora_tokenizer *t, int32_t id)
{
    return id >= 0 && (size_t)id < t->vocab_size ? t->token_bytes[id] : 0;
}

int32_t bora_tokenizer_token_id(const bora_tokenizer *t, const char *token)
{
    return tok_strmap_get(&t->vocab, token, (uint32_t)strlen(token));
}

uint64_t bora_tokenizer_hash(const bora_tokenizer *t)
{
    return t->hash;
}
