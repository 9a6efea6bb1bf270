/* tests/data_pipeline/test_whisper_prefix.c — Whisper's tokenizer file and start sequence: the
 * committed tokenizer.json loads with every Whisper token as one id at the place Whisper's
 * layout puts it, and bora_whisper_prefix gives openai/whisper's sot_sequence for each
 * language/task/timestamps choice (ids written from Whisper's layout, not from our code).
 *
 * usage: test_whisper_prefix WHISPER_TOKENIZER_JSON GPT2_TOKENIZER */
#include "../test.h"
#include "data/audio/prefix.h"
#include "data/tokenizer.h"
#include "util/log.h"

#include <stdio.h>
#include <string.h>

/* Whisper's English-only layout (openai/whisper-tiny.en). */
enum {
    EOT = 50256,
    SOT = 50257,
    EN = 50258, /* languages 50258..50356 in Whisper's order */
    TRANSLATE = 50357,
    TRANSCRIBE = 50358,
    STARTOFLM = 50359,
    STARTOFPREV = 50360,
    NOCAPTIONS = 50361,
    NOTIMESTAMPS = 50362,
    TS0 = 50363, /* <|0.00|>; <|30.00|> is TS0 + 1500 */
    VOCAB = 51864,
};

/* text must encode to exactly the one id. */
static void one_id(bora_tokenizer *t, const char *text, int32_t id)
{
    bora_ids v = {0};
    bora_status st = bora_tokenizer_encode(t, text, strlen(text), 0, &v);
    CHECK(st == BORA_OK && v.n == 1 && v.ids[0] == id);
    if (st != BORA_OK || v.n != 1 || v.ids[0] != id)
        fprintf(stderr, "  %s: %zu ids, first %d, want %d\n", text, v.n, v.n ? v.ids[0] : -1, id);
    CHECK(bora_tokenizer_token_id(t, text) == id);
    bora_ids_free(&v);
}

static void prefix_is(bora_tokenizer *t, const char *lang, const char *task, int ts,
                      const int32_t *want, int nwant)
{
    int32_t ids[BORA_WHISPER_PREFIX_MAX];
    int n = -1;
    bora_status st = bora_whisper_prefix(t, lang, task, ts, ids, &n);
    int ok = st == BORA_OK && n == nwant;
    for (int i = 0; ok && i < n; i++)
        ok = ids[i] == want[i];
    CHECK(ok);
    if (!ok)
        fprintf(stderr, "  prefix(%s, %s, %d): status %d, %d ids [%d %d %d %d] %s\n",
                lang ? lang : "NULL", task ? task : "NULL", ts, st, n, ids[0], ids[1], ids[2],
                ids[3], st ? bora_error_get() : "");
}

static void prefix_refused(bora_tokenizer *t, const char *lang, const char *task,
                           const char *needle)
{
    int32_t ids[BORA_WHISPER_PREFIX_MAX];
    int n;
    bora_status st = bora_whisper_prefix(t, lang, task, 0, ids, &n);
    CHECK(st != BORA_OK && strstr(bora_error_get(), needle));
    if (st == BORA_OK || !strstr(bora_error_get(), needle))
        fprintf(stderr, "  want a refusal naming '%s', got %d: %s\n", needle, st,
                st ? bora_error_get() : "");
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: test_whisper_prefix WHISPER_TOKENIZER_JSON GPT2_TOKENIZER\n");
        return 2;
    }
    bora_tokenizer *t;
    if (bora_tokenizer_load(argv[1], &t) != BORA_OK) {
        fprintf(stderr, "%s\n", bora_error_get());
        return 1;
    }
    CHECK(bora_tokenizer_vocab_size(t) == VOCAB);

    /* Every added token is one id, where the layout says. */
    one_id(t, "<|endoftext|>", EOT);
    one_id(t, "<|startoftranscript|>", SOT);
    one_id(t, "<|en|>", EN);
    one_id(t, "<|zh|>", EN + 1);
    one_id(t, "<|de|>", EN + 2);
    one_id(t, "<|haw|>", EN + 93);
    one_id(t, "<|su|>", EN + 98);
    one_id(t, "<|translate|>", TRANSLATE);
    one_id(t, "<|transcribe|>", TRANSCRIBE);
    one_id(t, "<|startoflm|>", STARTOFLM);
    one_id(t, "<|startofprev|>", STARTOFPREV);
    one_id(t, "<|nocaptions|>", NOCAPTIONS);
    one_id(t, "<|notimestamps|>", NOTIMESTAMPS);
    for (int i = 0; i <= 1500; i++) {
        char stamp[16];
        snprintf(stamp, sizeof stamp, "<|%d.%02d|>", i / 50, i % 50 * 2);
        one_id(t, stamp, TS0 + i);
    }
    CHECK(bora_tokenizer_token_id(t, "<|yue|>") == -1); /* large-v3's 100th: not English-only */

    /* The start sequences (openai/whisper's sot_sequence; HF's prefix_tokens). */
    prefix_is(t, NULL, NULL, 0, (int32_t[]){SOT, NOTIMESTAMPS}, 2);
    prefix_is(t, NULL, "translate", 0, (int32_t[]){SOT, NOTIMESTAMPS}, 2);
    prefix_is(t, NULL, NULL, 1, (int32_t[]){SOT}, 1);
    prefix_is(t, "en", "transcribe", 0, (int32_t[]){SOT, EN, TRANSCRIBE, NOTIMESTAMPS}, 4);
    prefix_is(t, "english", NULL, 0, (int32_t[]){SOT, EN, TRANSCRIBE, NOTIMESTAMPS}, 4);
    prefix_is(t, "German", "translate", 1, (int32_t[]){SOT, EN + 2, TRANSLATE}, 3);
    prefix_is(t, "jw", "transcribe", 0, (int32_t[]){SOT, EN + 97, TRANSCRIBE, NOTIMESTAMPS}, 4);
    prefix_refused(t, "en", "summarize", "summarize");
    prefix_refused(t, "klingon", NULL, "klingon");
    prefix_refused(t, "yue", NULL, "<|yue|>"); /* a code Whisper knows, a token this one lacks */
    bora_tokenizer_free(t);

    /* GPT-2's tokenizer is not Whisper's. */
    if (bora_tokenizer_load(argv[2], &t) != BORA_OK) {
        fprintf(stderr, "%s\n", bora_error_get());
        return 1;
    }
    prefix_refused(t, NULL, NULL, "<|startoftranscript|>");
    bora_tokenizer_free(t);
    return test_summary("test_whisper_prefix");
}
