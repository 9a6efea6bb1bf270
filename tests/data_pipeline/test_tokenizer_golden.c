/* tests/data_pipeline/test_tokenizer_golden.c — a tokenizer against ids made by Hugging Face's
 * own tokenizer: each line of GOLDEN is {"text", "ids", "ids_with_special"}; every line must
 * match exactly, with and without special tokens, and decoding must give the text back.
 *
 * usage: test_tokenizer_golden TOKENIZER GOLDEN.jsonl */
#include "../test.h"
#include "data/tokenizer.h"
#include "util/log.h"

#include <json-c/json.h>

static int same(const bora_ids *got, json_object *want)
{
    size_t n = json_object_array_length(want);
    if (n != got->n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (json_object_get_int(json_object_array_get_idx(want, i)) != got->ids[i])
            return 0;
    return 1;
}

static void show(const char *what, const char *text, const bora_ids *got, json_object *want)
{
    fprintf(stderr, "%s mismatch for %s\n  got:  [", what,
            json_object_to_json_string(json_object_new_string(text)));
    for (size_t i = 0; i < got->n && i < 40; i++)
        fprintf(stderr, i ? ",%d" : "%d", got->ids[i]);
    fprintf(stderr, "]\n  want: %.400s\n", json_object_to_json_string(want));
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: test_tokenizer_golden TOKENIZER GOLDEN.jsonl\n");
        return 2;
    }
    bora_tokenizer *t;
    if (bora_tokenizer_load(argv[1], &t) != BORA_OK) {
        fprintf(stderr, "%s\n", bora_error_get());
        return 1;
    }
    FILE *f = fopen(argv[2], "r");
    if (!f) {
        perror(argv[2]);
        return 1;
    }
    char *line = NULL;
    size_t cap = 0;
    long lines = 0, bad = 0, tokens = 0, bad_decode = 0, bad_bytes = 0;
    bora_ids ids = {0};
    while (getline(&line, &cap, f) > 0) {
        json_object *o = json_tokener_parse(line), *text_j, *want, *want_sp;
        if (!o || !json_object_object_get_ex(o, "text", &text_j) ||
            !json_object_object_get_ex(o, "ids", &want) ||
            !json_object_object_get_ex(o, "ids_with_special", &want_sp)) {
            fprintf(stderr, "%s:%ld: not a golden line\n", argv[2], lines + 1);
            return 1;
        }
        const char *text = json_object_get_string(text_j);
        size_t len = (size_t)json_object_get_string_len(text_j);
        lines++;
        ids.n = 0;
        if (bora_tokenizer_encode(t, text, len, 0, &ids) != BORA_OK || !same(&ids, want)) {
            if (bad++ < 5)
                show("ids", text, &ids, want);
        }
        tokens += (long)ids.n;
        /* Decoding gives the text back, except where the tokenizer itself cannot: a literal
         * metaspace (SentencePiece reads "▁" as a space) or text around special tokens (whose
         * neighbours the normalizer prefixes again). */
        int invertible = !strstr(text, "\xe2\x96\x81");
        for (size_t i = 0; i < ids.n; i++)
            invertible &= bora_tokenizer_token_bytes(t, ids.ids[i]) > 0;
        char *back;
        size_t blen;
        if (invertible && bora_tokenizer_decode(t, ids.ids, ids.n, &back, &blen) == BORA_OK) {
            if (blen != len || memcmp(back, text, len)) {
                if (bad_decode++ < 3)
                    fprintf(stderr, "decode mismatch: '%s' -> '%s'\n", text, back);
            }
            /* Per-token byte lengths add up to the text's (what bits-per-byte divides by). */
            size_t bytes = 0;
            for (size_t i = 0; i < ids.n; i++)
                bytes += bora_tokenizer_token_bytes(t, ids.ids[i]);
            /* (a metaspace a normalizer prepends counts one byte more per text) */
            if (bytes != len && bytes != len + 1 && bad_bytes++ < 3)
                fprintf(stderr, "token bytes add up to %zu, not %zu, for '%s'\n", bytes, len, text);
            free(back);
        }
        ids.n = 0;
        if (bora_tokenizer_encode(t, text, len, 1, &ids) != BORA_OK || !same(&ids, want_sp)) {
            if (bad++ < 5)
                show("ids_with_special", text, &ids, want_sp);
        }
        json_object_put(o);
    }
    fclose(f);
    free(line);
    bora_ids_free(&ids);
    bora_tokenizer_free(t);
    printf("test_tokenizer_golden: %s: %ld lines, %ld tokens, %ld mismatches, %ld decode "
           "differences\n",
           argv[1], lines, tokens, bad, bad_decode);
    test_failures += bad > 0 || lines == 0;
    test_failures += bad_decode > 0;
    test_failures += bad_bytes > 0;
    return test_summary("test_tokenizer_golden");
}
