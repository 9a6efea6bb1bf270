/* tests/eval/test_wer.c — the word error rate's normalisation and edit distance.
 *
 * Without arguments: cases worked by hand. With --pairs FILE (lines "reference<TAB>hypothesis"):
 * one line per pair, "normalised reference<TAB>normalised hypothesis<TAB>edits<TAB>reference
 * words", then "corpus<TAB>edits<TAB>words", for wer_reference.py to check against its own
 * normalisation and Levenshtein distance. */
#include "../test.h"

#include "eval/wer.h"

#include <math.h>

static void check_norm(const char *in, const char *want)
{
    char *got = NULL;
    CHECK(bora_wer_normalize(in, strlen(in), &got) == BORA_OK);
    if (got && strcmp(got, want)) {
        fprintf(stderr, "normalize(\"%s\") = \"%s\", want \"%s\"\n", in, got, want);
        test_failures++;
    }
    free(got);
}

static void check_edits(const char *ref, const char *hyp, int64_t want_edits, int64_t want_words)
{
    int64_t e = -1, w = -1;
    CHECK(bora_wer_edits(ref, hyp, &e, &w) == BORA_OK);
    if (e != want_edits || w != want_words) {
        fprintf(stderr, "edits(\"%s\", \"%s\") = %lld over %lld words, want %lld over %lld\n", ref,
                hyp, (long long)e, (long long)w, (long long)want_edits, (long long)want_words);
        test_failures++;
    }
}

static int by_hand(void)
{
    check_norm("Hello, World!", "hello world");
    check_norm("  The   quick\tbrown\nfox.  ", "the quick brown fox");
    check_norm("Don't stop; Atlanta's best", "dont stop atlantas best");
    check_norm("It\xe2\x80\x99s \xe2\x80\x98quoted\xe2\x80\x99", "its quoted");
    check_norm("well-known \xe2\x80\x94 (really) $5 100%", "well known really 5 100");
    check_norm("Caf\xc3\xa9 na\xc3\xafve \xc3\x85ngstr\xc3\xb6m", "cafe naive angstrom");
    check_norm("Stra\xc3\x9f"
               "e \xef\xac\x81ne",
               "strasse fine");                                /* ß, the ligature ﬁ */
    check_norm("\xef\xbc\xa1\xef\xbc\xa2\xef\xbc\xa3", "abc"); /* full-width ABC */
    check_norm("`` no evidence '' that", "no evidence that");  /* Brown's quotes */
    check_norm("", "");
    check_norm("?!... --", "");
    char *bad = NULL;
    CHECK(bora_wer_normalize("ok \xff here", 9, &bad) == BORA_ERR_INVALID);
    CHECK(bad == NULL);

    check_edits("a b c", "a b c", 0, 3);
    check_edits("a b c", "a x c", 1, 3);   /* a substitution */
    check_edits("a b c", "a c", 1, 3);     /* a deletion */
    check_edits("a b c", "a b b c", 1, 3); /* an insertion */
    check_edits("a b c", "", 3, 3);        /* everything deleted */
    check_edits("", "a b", 2, 0);          /* everything inserted */
    check_edits("", "", 0, 0);
    check_edits("kitten sat on mat", "sitting on the mat", 3, 4);
    check_edits("the cat", "cat the", 2, 2); /* no transpositions: two edits */
    check_edits("ab", "a b", 2, 1);          /* words, not letters */

    bora_wer w = {0};
    CHECK(bora_wer_add(&w, "The cat sat.", "the cat sat") == BORA_OK);
    CHECK(bora_wer_add(&w, "On the mat", "on a mat today") == BORA_OK);
    CHECK(w.edits == 2 && w.ref_words == 6 && w.pairs == 2);
    CHECK(fabs(bora_wer_rate(&w) - 2.0 / 6.0) < 1e-15);
    bora_wer none = {0};
    CHECK(isnan(bora_wer_rate(&none)));
    return test_failures ? 1 : 0;
}

static int pairs(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        return 1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    bora_wer corpus = {0};
    while ((len = getline(&line, &cap, f)) > 0) {
        if (line[len - 1] == '\n')
            line[--len] = '\0';
        char *tab = strchr(line, '\t');
        if (!tab) {
            fprintf(stderr, "%s: a line without a tab\n", path);
            return 1;
        }
        *tab = '\0';
        char *nr = NULL, *nh = NULL;
        int64_t e = 0, w = 0;
        if (bora_wer_normalize(line, strlen(line), &nr) != BORA_OK ||
            bora_wer_normalize(tab + 1, strlen(tab + 1), &nh) != BORA_OK ||
            bora_wer_edits(nr, nh, &e, &w) != BORA_OK || bora_wer_add(&corpus, line, tab + 1)) {
            fprintf(stderr, "%s: a pair failed\n", path);
            return 1;
        }
        printf("%s\t%s\t%lld\t%lld\n", nr, nh, (long long)e, (long long)w);
        free(nr);
        free(nh);
    }
    printf("corpus\t%lld\t%lld\n", (long long)corpus.edits, (long long)corpus.ref_words);
    free(line);
    fclose(f);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--pairs"))
        return pairs(argv[2]);
    return by_hand();
}
