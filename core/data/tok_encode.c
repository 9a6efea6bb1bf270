/* core/data/tok_encode.c — text to ids, as Hugging Face's tokenizers does it: split out added
 * tokens (leftmost, longest), normalize each remaining piece, pre-tokenize it into words, run
 * BPE on each word (merges in rank order, byte fallback, fused unknowns), and wrap the result in
 * the post-processor's template. */
#include "tok_internal.h"

#include "../util/log.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ---- normalizers ------------------------------------------------------------------------- */

/* Every match of re (or of the literal) in s, as [start, end) byte offsets. */
typedef struct span {
    size_t a, b;
} span;

typedef struct spans {
    span *v;
    size_t n, cap;
} spans;

static int spans_push(spans *s, size_t a, size_t b)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        span *p = realloc(s->v, cap * sizeof *p);
        if (!p)
            return -1;
        s->v = p;
        s->cap = cap;
    }
    s->v[s->n++] = (span){a, b};
    return 0;
}

static bora_status find_all(pcre2_code *re, const char *literal, const char *s, size_t len,
                            spans *out)
{
    if (literal) {
        size_t ll = strlen(literal);
        for (size_t i = 0; ll && i + ll <= len;) {
            if (!memcmp(s + i, literal, ll)) {
                if (spans_push(out, i, i + ll))
                    return BORA_ERR_NOMEM;
                i += ll;
            } else {
                i++;
            }
        }
        return BORA_OK;
    }
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    if (!md)
        return BORA_ERR_NOMEM;
    size_t at = 0;
    while (at <= len) {
        /* The subject's UTF-8 is checked once: checking at every match would cost its whole
         * length each time. */
        int rc = pcre2_match(re, (PCRE2_SPTR)s, len, at, at ? PCRE2_NO_UTF_CHECK : 0, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0) {
            pcre2_match_data_free(md);
            return bora_error_set(BORA_ERR_INVALID, "regex match failed (%d)", rc);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t a = ov[0], b = ov[1];
        if (b > a && spans_push(out, a, b)) {
            pcre2_match_data_free(md);
            return BORA_ERR_NOMEM;
        }
        if (b > a) {
            at = b;
        } else { /* an empty match: step one character */
            uint32_t cp;
            int l = tok_utf8_len((const unsigned char *)s + a, len - a, &cp);
            at = a + (l ? (size_t)l : 1);
        }
    }
    pcre2_match_data_free(md);
    return BORA_OK;
}

static bora_status apply_utf8proc(int kind, const char *s, size_t len, tok_buf *out)
{
    utf8proc_option_t opt = UTF8PROC_STABLE;
    switch (kind) {
    case TN_NFC: opt |= UTF8PROC_COMPOSE; break;
    case TN_NFD: opt |= UTF8PROC_DECOMPOSE; break;
    case TN_NFKC: opt |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case TN_NFKD: opt |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
    default: opt |= UTF8PROC_CASEFOLD; break;
    }
    utf8proc_uint8_t *res = NULL;
    utf8proc_ssize_t n =
        utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, &res, opt);
    if (n < 0)
        return bora_error_set(BORA_ERR_INVALID, "normalizer: %s", utf8proc_errmsg(n));
    int rc = tok_buf_put(out, (const char *)res, (size_t)n);
    free(res);
    return rc ? BORA_ERR_NOMEM : BORA_OK;
}

static bora_status lowercase(const char *s, size_t len, tok_buf *out)
{
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        int l = tok_utf8_len((const unsigned char *)s + i, len - i, &cp);
        if (!l)
            return bora_error_set(BORA_ERR_INVALID, "invalid UTF-8");
        char enc[4];
        size_t el = tok_utf8_put((uint32_t)utf8proc_tolower((utf8proc_int32_t)cp), enc);
        if (tok_buf_put(out, enc, el))
            return BORA_ERR_NOMEM;
        i += (size_t)l;
    }
    return BORA_OK;
}

bora_status tok_normalize(const tok_norm *n, const char *s, size_t len, char **out, size_t *out_len)
{
    tok_buf b = {0};
    bora_status st = BORA_OK;
    switch (n->kind) {
    case TN_SEQUENCE: {
        char *cur = malloc(len + 1);
        if (!cur)
            return BORA_ERR_NOMEM;
        memcpy(cur, s, len);
        cur[len] = 0;
        size_t cl = len;
        for (int i = 0; i < n->n && st == BORA_OK; i++) {
            char *next;
            size_t nl;
            st = tok_normalize(&n->items[i], cur, cl, &next, &nl);
            if (st == BORA_OK) {
                free(cur);
                cur = next;
                cl = nl;
            }
        }
        if (st != BORA_OK) {
            free(cur);
            return st;
        }
        *out = cur;
        *out_len = cl;
        return BORA_OK;
    }
    case TN_PREPEND:
        if (len && tok_buf_put(&b, n->a, strlen(n->a)))
            st = BORA_ERR_NOMEM;
        if (tok_buf_put(&b, s, len))
            st = BORA_ERR_NOMEM;
        break;
    case TN_REPLACE: {
        spans m = {0};
        st = find_all(n->re, n->a, s, len, &m);
        size_t at = 0;
        for (size_t i = 0; st == BORA_OK && i < m.n; i++) {
            if (tok_buf_put(&b, s + at, m.v[i].a - at) || tok_buf_put(&b, n->b, strlen(n->b)))
                st = BORA_ERR_NOMEM;
            at = m.v[i].b;
        }
        if (st == BORA_OK && tok_buf_put(&b, s + at, len - at))
            st = BORA_ERR_NOMEM;
        free(m.v);
        break;
    }
    case TN_LOWERCASE: st = lowercase(s, len, &b); break;
    case TN_STRIP: {
        size_t a = 0, e = len;
        while (n->left && a < e && (s[a] == ' ' || s[a] == '\t' || s[a] == '\n' || s[a] == '\r'))
            a++;
        while (n->right && e > a &&
               (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\n' || s[e - 1] == '\r'))
            e--;
        if (tok_buf_put(&b, s + a, e - a))
            st = BORA_ERR_NOMEM;
        break;
    }
    default: st = apply_utf8proc(n->kind, s, len, &b); break;
    }
    if (st != BORA_OK) {
        free(b.s);
        return st;
    }
    if (!b.s && tok_buf_put(&b, "", 0))
        return BORA_ERR_NOMEM;
    *out = b.s;
    *out_len = b.n;
    return BORA_OK;
}

/* ---- pre-tokenizers ---------------------------------------------------------------------- */

/* Split s at the matches of a pattern, keeping the pieces as behavior says. With invert, the
 * matches are the content and what lies between them the delimiters. */
static bora_status split(const tok_pre *p, const char *s, size_t len, tok_pieces *out)
{
    spans m = {0};
    bora_status st = find_all(p->re, p->literal, s, len, &m);
    if (st != BORA_OK) {
        free(m.v);
        return st;
    }
    /* Segments in order: the gap before match i, then match i; a delimiter flag on each. */
    size_t cur = 0, run = 0; /* start of the piece being built; start of a delimiter run */
    int in_run = 0;
#define EMIT(a_, b_)                                                    \
    do {                                                                \
        if ((b_) > (a_) && tok_pieces_push(out, s + (a_), (b_) - (a_))) \
            st = BORA_ERR_NOMEM;                                        \
    } while (0)
    size_t at = 0;
    for (size_t i = 0; i <= m.n && st == BORA_OK; i++) {
        span seg[2] = {{at, i < m.n ? m.v[i].a : len},
                       {i < m.n ? m.v[i].a : len, i < m.n ? m.v[i].b : len}};
        for (int k = 0; k < (i < m.n ? 2 : 1) && st == BORA_OK; k++) {
            size_t a = seg[k].a, b = seg[k].b;
            int delim = (k == 1) != p->invert;
            if (b == a)
                continue;
            switch (p->behavior) {
            case TB_ISOLATED: EMIT(a, b); break;
            case TB_REMOVED:
                if (!delim)
                    EMIT(a, b);
                break;
            case TB_MERGED_PREVIOUS:
                if (delim) {
                    EMIT(cur, b);
                    cur = b;
                }
                break;
            case TB_MERGED_NEXT:
                if (delim) {
                    EMIT(cur, a);
                    cur = a;
                }
                break;
            default: /* contiguous: a run of delimiters is one piece */
                if (delim && !in_run) {
                    run = a;
                    in_run = 1;
                } else if (!delim) {
                    if (in_run)
                        EMIT(run, a);
                    in_run = 0;
                    EMIT(a, b);
                }
                break;
            }
        }
        at = i < m.n ? m.v[i].b : len;
    }
    if (st == BORA_OK && (p->behavior == TB_MERGED_PREVIOUS || p->behavior == TB_MERGED_NEXT))
        EMIT(cur, len);
    if (st == BORA_OK && p->behavior == TB_CONTIGUOUS && in_run)
        EMIT(run, len);
#undef EMIT
    free(m.v);
    return st;
}

/* Bytes to GPT-2's byte-level characters. */
static bora_status byte_level(const char *s, size_t len, tok_pieces *out)
{
    char *buf = malloc(len * 2 + 1);
    if (!buf)
        return BORA_ERR_NOMEM;
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        n += tok_utf8_put(tok_byte_char[(unsigned char)s[i]], buf + n);
    int rc = tok_pieces_push(out, buf, n);
    free(buf);
    return rc ? BORA_ERR_NOMEM : BORA_OK;
}

bora_status tok_pretokenize(const tok_pre *p, tok_pieces *in, tok_pieces *out)
{
    bora_status st = BORA_OK;
    if (p->kind == TP_SEQUENCE) {
        tok_pieces cur = *in, next = {0};
        memset(in, 0, sizeof *in);
        for (int i = 0; i < p->n && st == BORA_OK; i++) {
            st = tok_pretokenize(&p->items[i], &cur, &next);
            tok_pieces_free(&cur);
            cur = next;
            memset(&next, 0, sizeof next);
        }
        *out = cur;
        return st;
    }
    for (size_t k = 0; k < in->n && st == BORA_OK; k++) {
        const char *s = in->p[k].s;
        size_t len = in->p[k].len;
        switch (p->kind) {
        case TP_SPLIT: st = split(p, s, len, out); break;
        case TP_BYTELEVEL: {
            char *pref = NULL;
            if (p->add_prefix_space && k == 0 && len && s[0] != ' ') {
                pref = malloc(len + 2);
                if (!pref)
                    return BORA_ERR_NOMEM;
                pref[0] = ' ';
                memcpy(pref + 1, s, len);
                s = pref;
                len++;
            }
            if (p->use_regex) {
                tok_pieces words = {0};
                st = split(p, s, len, &words);
                for (size_t w = 0; w < words.n && st == BORA_OK; w++)
                    st = byte_level(words.p[w].s, words.p[w].len, out);
                tok_pieces_free(&words);
            } else {
                st = byte_level(s, len, out);
            }
            free(pref);
            break;
        }
        case TP_METASPACE: {
            tok_buf b = {0};
            if (p->prepend == 1 || (p->prepend == 2 && k == 0))
                if (len && strncmp(s, p->replacement, strlen(p->replacement)))
                    tok_buf_put(&b, p->replacement, strlen(p->replacement));
            for (size_t i = 0; i < len; i++)
                if (s[i] == ' ')
                    tok_buf_put(&b, p->replacement, strlen(p->replacement));
                else
                    tok_buf_put(&b, s + i, 1);
            if (tok_pieces_push(out, b.s ? b.s : "", b.n))
                st = BORA_ERR_NOMEM;
            free(b.s);
            break;
        }
        default: st = bora_error_set(BORA_ERR_INTERNAL, "unknown pre-tokenizer %d", p->kind);
        }
    }
    return st;
}

/* ---- BPE --------------------------------------------------------------------------------- */

typedef struct sym {
    int32_t id;
    int32_t prev, next; /* -1 at the ends */
    int alive;
} sym;

typedef struct cand {
    uint32_t rank;
    int32_t pos;    /* the left symbol */
    int32_t merged; /* the id the pair makes */
    int32_t right;  /* the right symbol's id when queued, to spot stale entries */
} cand;

/* A binary min-heap on (rank, pos). */
static int cand_less(const cand *a, const cand *b)
{
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(cand *h, size_t *n, cand c)
{
    size_t i = (*n)++;
    h[i] = c;
    while (i && cand_less(&h[i], &h[(i - 1) / 2])) {
        cand t = h[i];
        h[i] = h[(i - 1) / 2];
        h[(i - 1) / 2] = t;
        i = (i - 1) / 2;
    }
}

static cand heap_pop(cand *h, size_t *n)
{
    cand top = h[0];
    h[0] = h[--*n];
    for (size_t i = 0;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < *n && cand_less(&h[l], &h[m]))
            m = l;
        if (r < *n && cand_less(&h[r], &h[m]))
            m = r;
        if (m == i)
            break;
        cand t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
    return top;
}

static void queue_pair(const bora_tokenizer *t, const sym *s, int32_t pos, cand *h, size_t *n)
{
    int32_t nx = s[pos].next;
    if (nx < 0)
        return;
    uint64_t v;
    uint64_t key = ((uint64_t)(uint32_t)s[pos].id << 32 | (uint32_t)s[nx].id) + 1;
    if (tok_u64map_get(&t->merges, key, &v))
        heap_push(h, n, (cand){(uint32_t)(v >> 32), pos, (int32_t)(uint32_t)v, s[nx].id});
}

bora_status tok_bpe(const bora_tokenizer *t, const char *s, size_t len, bora_ids *out)
{
    if (!len)
        return BORA_OK;
    if (t->ignore_merges) {
        int32_t whole = tok_strmap_get(&t->vocab, s, (uint32_t)len);
        if (whole >= 0)
            return bora_ids_push(out, whole);
    }
    sym *syms = malloc(sizeof(sym) * (len + 1) * 4);
    cand *heap = malloc(sizeof(cand) * (len + 1) * 8);
    if (!syms || !heap) {
        free(syms);
        free(heap);
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    }
    /* One symbol per character; byte fallback for characters outside the vocabulary. */
    int32_t n = 0;
    bora_status st = BORA_OK;
    for (size_t i = 0; i < len && st == BORA_OK;) {
        uint32_t cp;
        int l = tok_utf8_len((const unsigned char *)s + i, len - i, &cp);
        if (!l) {
            st = bora_error_set(BORA_ERR_INVALID, "invalid UTF-8 at byte %zu", i);
            break;
        }
        int32_t id = tok_strmap_get(&t->vocab, s + i, (uint32_t)l);
        if (id >= 0) {
            syms[n++] = (sym){id, -1, -1, 1};
        } else if (t->byte_fallback) {
            int all = 1;
            for (int k = 0; k < l; k++)
                all &= t->byte_ids[(unsigned char)s[i + k]] >= 0;
            for (int k = 0; k < l && all; k++)
                syms[n++] = (sym){t->byte_ids[(unsigned char)s[i + k]], -1, -1, 1};
            if (!all)
                goto unknown;
        } else {
        unknown:
            if (t->unk_id < 0) {
                st = bora_error_set(BORA_ERR_INVALID,
                                    "character U+%04X is not in the vocabulary, which has no "
                                    "unknown token",
                                    cp);
                break;
            }
            if (!(t->fuse_unk && n > 0 && syms[n - 1].id == t->unk_id))
                syms[n++] = (sym){t->unk_id, -1, -1, 1};
        }
        i += (size_t)l;
    }
    for (int32_t i = 0; i < n; i++) {
        syms[i].prev = i - 1;
        syms[i].next = i + 1 < n ? i + 1 : -1;
    }
    size_t hn = 0;
    for (int32_t i = 0; st == BORA_OK && i + 1 < n; i++)
        queue_pair(t, syms, i, heap, &hn);
    while (st == BORA_OK && hn) {
        cand c = heap_pop(heap, &hn);
        sym *a = &syms[c.pos];
        if (!a->alive || a->next < 0 || syms[a->next].id != c.right)
            continue; /* stale: a neighbour changed since this pair was queued */
        uint64_t v;
        uint64_t key = ((uint64_t)(uint32_t)a->id << 32 | (uint32_t)c.right) + 1;
        if (!tok_u64map_get(&t->merges, key, &v) || (int32_t)(uint32_t)v != c.merged)
            continue;
        int32_t b = a->next;
        a->id = c.merged;
        a->next = syms[b].next;
        syms[b].alive = 0;
        if (a->next >= 0)
            syms[a->next].prev = c.pos;
        if (a->prev >= 0)
            queue_pair(t, syms, a->prev, heap, &hn);
        queue_pair(t, syms, c.pos, heap, &hn);
    }
    for (int32_t i = 0; st == BORA_OK && i >= 0 && i < n; i = syms[i].next)
        st = bora_ids_push(out, syms[i].id);
    free(syms);
    free(heap);
    return st;
}

/* ---- the whole pipeline ------------------------------------------------------------------ */

/* Normalize, pre-tokenize and BPE one stretch of text without added tokens. */
static bora_status encode_plain(bora_tokenizer *t, const char *s, size_t len, bora_ids *out)
{
    char *norm = NULL;
    size_t nlen = len;
    bora_status st = BORA_OK;
    if (t->norm)
        st = tok_normalize(t->norm, s, len, &norm, &nlen);
    if (st != BORA_OK)
        return st;
    const char *text = norm ? norm : s;
    tok_pieces in = {0}, words = {0};
    if (tok_pieces_push(&in, text, nlen)) {
        free(norm);
        return BORA_ERR_NOMEM;
    }
    if (t->pre) {
        st = tok_pretokenize(t->pre, &in, &words);
        tok_pieces_free(&in);
    } else {
        words = in;
    }
    for (size_t i = 0; i < words.n && st == BORA_OK; i++)
        st = tok_bpe(t, words.p[i].s, words.p[i].len, out);
    tok_pieces_free(&words);
    free(norm);
    return st;
}

bora_status bora_tokenizer_encode(bora_tokenizer *t, const char *text, size_t len, int add_special,
                                  bora_ids *out)
{
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        int l = tok_utf8_len((const unsigned char *)text + i, len - i, &cp);
        if (!l)
            return bora_error_set(BORA_ERR_INVALID, "invalid UTF-8 at byte %zu", i);
        i += (size_t)l;
    }
    bora_status st = BORA_OK;
    for (size_t i = 0; add_special && i < t->n_prefix && st == BORA_OK; i++)
        st = bora_ids_push(out, t->prefix_ids[i]);
    /* Added tokens first: at each position, the longest one that starts there. */
    size_t start = 0;
    for (size_t i = 0; i < len && st == BORA_OK;) {
        unsigned char b = (unsigned char)text[i];
        const tok_added *hit = NULL;
        for (uint32_t k = t->added_first[b]; k < t->added_first[b + 1]; k++) {
            const tok_added *a = &t->added[k];
            if (a->len <= len - i && !memcmp(text + i, a->content, a->len)) {
                hit = a;
                break;
            }
        }
        if (!hit) {
            i++;
            continue;
        }
        if (i > start)
            st = encode_plain(t, text + start, i - start, out);
        if (st == BORA_OK)
            st = bora_ids_push(out, hit->id);
        i += hit->len;
        start = i;
    }
    if (st == BORA_OK && start < len)
        st = encode_plain(t, text + start, len - start, out);
    for (size_t i = 0; add_special && i < t->n_suffix && st == BORA_OK; i++)
        st = bora_ids_push(out, t->suffix_ids[i]);
    return st;
}
