/* core/data/tok_internal.h — the tokenizer's parts: vocabulary and merge tables, normalizers,
 * pre-tokenizers, added tokens, the post-processor's template and the decoder steps. */
#ifndef BORA_CORE_TOK_INTERNAL_H
#define BORA_CORE_TOK_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer.h"

#include <pcre2.h>

/* ---- tables ------------------------------------------------------------------------------ */

/* String -> id, open addressing; the strings are the tokenizer's own (not copied). */
typedef struct tok_strmap {
    const char **keys;
    uint32_t *lens;
    int32_t *vals;
    size_t cap, n;
} tok_strmap;

/* 64-bit key -> 64-bit value, open addressing; key 0 is never used (ids start the pair). */
typedef struct tok_u64map {
    uint64_t *keys, *vals;
    size_t cap, n;
} tok_u64map;

int tok_strmap_put(tok_strmap *m, const char *key, uint32_t len, int32_t val);
int32_t tok_strmap_get(const tok_strmap *m, const char *key, uint32_t len); /* -1 if absent */
void tok_strmap_free(tok_strmap *m);
int tok_u64map_put(tok_u64map *m, uint64_t key, uint64_t val);
int tok_u64map_get(const tok_u64map *m, uint64_t key, uint64_t *val); /* 1 if present */
void tok_u64map_free(tok_u64map *m);

/* ---- pipeline parts ---------------------------------------------------------------------- */

enum {
    TN_SEQUENCE = 1,
    TN_PREPEND,
    TN_REPLACE,
    TN_NFC,
    TN_NFD,
    TN_NFKC,
    TN_NFKD,
    TN_LOWERCASE,
    TN_STRIP
};

typedef struct tok_norm {
    int kind;
    char *a, *b;     /* prepend text; replace pattern (literal) and content */
    pcre2_code *re;  /* replace pattern (regex) */
    int left, right; /* strip */
    struct tok_norm *items;
    int n;
} tok_norm;

enum { TP_SEQUENCE = 1, TP_BYTELEVEL, TP_SPLIT, TP_METASPACE, TP_WHITESPACE_SPLIT };
enum { TB_REMOVED = 1, TB_ISOLATED, TB_MERGED_PREVIOUS, TB_MERGED_NEXT, TB_CONTIGUOUS };

typedef struct tok_pre {
    int kind;
    int add_prefix_space, use_regex; /* byte level */
    pcre2_code *re;                  /* split (regex), byte level (GPT-2 regex) */
    char *literal;                   /* split (string pattern) */
    int behavior, invert;            /* split */
    char *replacement;               /* metaspace */
    int prepend;                     /* metaspace: 0 never, 1 always, 2 first */
    struct tok_pre *items;
    int n;
} tok_pre;

enum { TD_BYTELEVEL = 1, TD_REPLACE, TD_BYTEFALLBACK, TD_FUSE, TD_STRIP, TD_METASPACE };

typedef struct tok_dec {
    int kind;
    char *a, *b; /* replace: pattern and content; strip: content; metaspace: replacement */
    int start, stop;
} tok_dec;

typedef struct tok_added {
    char *content;
    uint32_t len;
    int32_t id;
    int special;
} tok_added;

/* One piece of text on its way through the pipeline. */
typedef struct tok_piece {
    char *s;
    size_t len;
} tok_piece;

typedef struct tok_pieces {
    tok_piece *p;
    size_t n, cap;
} tok_pieces;

struct bora_tokenizer {
    char **tokens; /* id -> token text (the vocabulary's form: byte-level chars, ▁, <0x41>) */
    uint32_t *token_bytes;
    uint8_t *is_special;
    size_t vocab_size, tokens_cap;
    tok_strmap vocab;
    tok_u64map merges; /* (left << 32 | right) -> (rank << 32 | merged id) */
    int byte_fallback, fuse_unk, ignore_merges;
    int32_t unk_id;
    int32_t byte_ids[256]; /* <0xXX> tokens, -1 when absent */
    tok_norm *norm;
    tok_pre *pre;
    tok_dec *dec;
    int n_dec;
    tok_added *added; /* sorted by first byte, then longest first */
    size_t n_added;
    uint32_t added_first[257]; /* added[added_first[b] .. added_first[b+1]) start with byte b */
    int32_t *prefix_ids, *suffix_ids; /* the template's special tokens around the text */
    size_t n_prefix, n_suffix;
    uint64_t hash;
};

/* The GPT-2 byte <-> character table: byte b is the code point byte_char[b]. */
extern uint32_t tok_byte_char[256];
void tok_byte_table_init(void);
/* The byte a byte-level character stands for, or -1. */
int tok_char_byte(uint32_t cp);

/* A growable, NUL-terminated byte buffer. */
typedef struct tok_buf {
    char *s;
    size_t n, cap;
} tok_buf;

/* Append n bytes; -1 when out of memory. */
int tok_buf_put(tok_buf *b, const char *s, size_t n);

/* Append one piece (copying len bytes). */
int tok_pieces_push(tok_pieces *v, const char *s, size_t len);
void tok_pieces_free(tok_pieces *v);

/* UTF-8: the length of the character at s (1..4), or 0 when it is not valid UTF-8. */
int tok_utf8_len(const unsigned char *s, size_t left, uint32_t *cp);
size_t tok_utf8_put(uint32_t cp, char *out);

/* The encoding pipeline (tok_encode.c). */
bora_status tok_normalize(const tok_norm *n, const char *s, size_t len, char **out,
                          size_t *out_len);
bora_status tok_pretokenize(const tok_pre *p, tok_pieces *in, tok_pieces *out);
bora_status tok_bpe(const bora_tokenizer *t, const char *s, size_t len, bora_ids *out);

#endif
