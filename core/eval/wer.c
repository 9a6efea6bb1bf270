/* core/eval/wer.c — word error rate (see wer.h). */
#include "wer.h"

#include "../util/log.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

static int is_apostrophe(utf8proc_int32_t c)
{
    return c == 0x27 || c == 0x2018 || c == 0x2019 || c == 0x2BC;
}

static int is_word_char(utf8proc_int32_t c)
{
    switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO: return 1;
    default: return 0;
    }
}

bora_status bora_wer_normalize(const char *text, size_t len, char **out)
{
    *out = NULL;
    utf8proc_ssize_t bad = 0; /* where the text stops being UTF-8, for the message */
    for (utf8proc_int32_t c; bad < (utf8proc_ssize_t)len;) {
        utf8proc_ssize_t n =
            utf8proc_iterate((const utf8proc_uint8_t *)text + bad, (utf8proc_ssize_t)len - bad, &c);
        if (n < 0)
            return bora_error_set(BORA_ERR_INVALID, "text: invalid UTF-8 at byte %lld",
                                  (long long)bad);
        bad += n;
    }
    utf8proc_uint8_t *folded = NULL;
    utf8proc_ssize_t n =
        utf8proc_map((const utf8proc_uint8_t *)text, (utf8proc_ssize_t)len, &folded,
                     UTF8PROC_STABLE | UTF8PROC_COMPAT | UTF8PROC_COMPOSE | UTF8PROC_STRIPMARK |
                         UTF8PROC_CASEFOLD);
    if (n < 0)
        return bora_error_set(n == UTF8PROC_ERROR_NOMEM ? BORA_ERR_NOMEM : BORA_ERR_INVALID,
                              "text: %s", utf8proc_errmsg(n));
    /* The words are never longer than the folded text: kept code points are copied as they
     * are, and at most one space goes where one or more were dropped. */
    char *words = malloc((size_t)n + 1);
    if (!words) {
        free(folded);
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    }
    size_t w = 0;
    int gap = 0; /* a separator seen since the last word character */
    for (utf8proc_ssize_t at = 0; at < n;) {
        utf8proc_int32_t c;
        utf8proc_ssize_t step = utf8proc_iterate(folded + at, n - at, &c);
        if (step <= 0)
            break; /* utf8proc_map's output is valid UTF-8 */
        if (is_word_char(c)) {
            if (gap && w > 0)
                words[w++] = ' ';
            gap = 0;
            memcpy(words + w, folded + at, (size_t)step);
            w += (size_t)step;
        } else if (!is_apostrophe(c)) {
            gap = 1;
        }
        at += step;
    }
    words[w] = '\0';
    free(folded);
    *out = words;
    return BORA_OK;
}

typedef struct word {
    const char *s;
    size_t len;
} word;

/* Split a normalised text at its single spaces: *n words into *out (malloc'ed; NULL when none). */
static bora_status split_words(const char *text, word **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    size_t count = 0;
    for (const char *p = text; *p;) {
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        count++;
        while (*p && *p != ' ')
            p++;
    }
    if (!count)
        return BORA_OK;
    if (count > SIZE_MAX / sizeof(word) || !(*out = malloc(count * sizeof(word))))
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    size_t i = 0;
    for (const char *p = text; *p;) {
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        const char *start = p;
        while (*p && *p != ' ')
            p++;
        (*out)[i++] = (word){start, (size_t)(p - start)};
    }
    *n = count;
    return BORA_OK;
}

static int same_word(word a, word b)
{
    return a.len == b.len && !memcmp(a.s, b.s, a.len);
}

bora_status bora_wer_edits(const char *ref, const char *hyp, int64_t *edits, int64_t *ref_words)
{
    *edits = 0;
    *ref_words = 0;
    word *r = NULL, *h = NULL;
    size_t nr = 0, nh = 0;
    bora_status st = split_words(ref, &r, &nr);
    if (st == BORA_OK)
        st = split_words(hyp, &h, &nh);
    if (st != BORA_OK) {
        free(r);
        free(h);
        return st;
    }
    /* The distance is symmetric under swapping the texts (a deletion one way is an insertion the
     * other), so the shorter text indexes the one row kept: O(min(nr, nh)) memory. */
    word *rows = nr <= nh ? h : r, *cols = nr <= nh ? r : h;
    size_t n_rows = nr <= nh ? nh : nr, n_cols = nr <= nh ? nr : nh;
    int64_t *d = NULL;
    if (n_cols + 1 > SIZE_MAX / sizeof *d || !(d = malloc((n_cols + 1) * sizeof *d))) {
        free(r);
        free(h);
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    }
    /* d[j]: the distance between the first i row words and the first j column words */
    for (size_t j = 0; j <= n_cols; j++)
        d[j] = (int64_t)j;
    for (size_t i = 1; i <= n_rows; i++) {
        int64_t diag = d[0]; /* d[i-1][j-1] */
        d[0] = (int64_t)i;
        for (size_t j = 1; j <= n_cols; j++) {
            int64_t up = d[j]; /* d[i-1][j] */
            int64_t best = diag + !same_word(rows[i - 1], cols[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (d[j - 1] + 1 < best)
                best = d[j - 1] + 1;
            diag = up;
            d[j] = best;
        }
    }
    *edits = d[n_cols];
    *ref_words = (int64_t)nr;
    free(d);
    free(r);
    free(h);
    return BORA_OK;
}

bora_status bora_wer_add(bora_wer *w, const char *ref, const char *hyp)
{
    char *nr = NULL, *nh = NULL;
    int64_t edits = 0, words = 0;
    bora_status st = bora_wer_normalize(ref, strlen(ref), &nr);
    if (st == BORA_OK)
        st = bora_wer_normalize(hyp, strlen(hyp), &nh);
    if (st == BORA_OK)
        st = bora_wer_edits(nr, nh, &edits, &words);
    free(nr);
    free(nh);
    if (st != BORA_OK)
        return st;
    w->edits += edits;
    w->ref_words += words;
    w->pairs++;
    return BORA_OK;
}

double bora_wer_rate(const bora_wer *w)
{
    return w->ref_words > 0 ? (double)w->edits / (double)w->ref_words : NAN;
}
