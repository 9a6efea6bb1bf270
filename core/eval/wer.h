/* core/eval/wer.h — word error rate: text normalisation and word-level edit distance.
 *
 * Normalisation (bora_wer_normalize), in the spirit of the basic parts of Whisper's
 * EnglishTextNormalizer, kept small so that it can be stated exactly:
 *   1. Unicode: compatibility decomposition (NFKD), every mark (categories Mn, Mc, Me: accents)
 *      removed, case folding (lower case: "Straße" -> "strasse"), then canonical composition
 *      (utf8proc with COMPAT | COMPOSE | STRIPMARK | CASEFOLD): "Café" -> "cafe", "ﬁ" -> "fi".
 *   2. Apostrophes inside or around words are removed, so a contraction stays one word:
 *      U+0027 ', U+2018 ‘, U+2019 ’ and U+02BC ʼ ("don't" -> "dont", "Atlanta's" -> "atlantas").
 *   3. Every other code point that is not a letter (L*) or a number (N*) — punctuation,
 *      symbols, separators, controls — separates words ("well-known" -> "well known",
 *      "$5" -> "5", "(a)" -> "a").
 *   4. Words are joined by single spaces, with none at either end.
 * Unlike Whisper's English normaliser, it spells out no numbers and rewrites no spellings or
 * contractions, and it removes no bracketed text or filler words.
 *
 * The edit distance is Levenshtein's over words (substitutions, deletions and insertions all cost
 * one), in O(n·m) time and O(min(n, m)) memory. A corpus's WER is its total edits over its total
 * reference words (not the mean of the clips' rates). */
#ifndef BORA_CORE_WER_H
#define BORA_CORE_WER_H

#include <bora/plugin.h>

#include <stddef.h>
#include <stdint.h>

/* A corpus's running totals. */
typedef struct bora_wer {
    int64_t edits;     /* substitutions + deletions + insertions */
    int64_t ref_words; /* the reference's words, after normalisation */
    int64_t pairs;     /* reference/hypothesis pairs added */
} bora_wer;

/* text (len bytes of UTF-8) normalised as above into *out (malloc'ed, NUL-terminated; "" when
 * no word is left). Invalid UTF-8 is an error naming the byte offset. */
bora_status bora_wer_normalize(const char *text, size_t len, char **out);

/* The word-level edit distance between two normalised texts (words separated by single spaces),
 * and the reference's word count. */
bora_status bora_wer_edits(const char *ref, const char *hyp, int64_t *edits, int64_t *ref_words);

/* Normalise a reference and a hypothesis (NUL-terminated) and add their edits to w. */
bora_status bora_wer_add(bora_wer *w, const char *ref, const char *hyp);

/* w's corpus word error rate: edits / reference words (NaN when there are no reference words). */
double bora_wer_rate(const bora_wer *w);

#endif
