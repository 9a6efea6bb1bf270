/* tests/eval/test_transcript_text.c — a transcript's text leaves out Whisper's special tokens
 * (marked special in tokenizer.json) and its timestamp tokens (added tokens not marked special,
 * all after <|endoftext|>), and keeps every text token.
 * usage: test_transcript_text WHISPER_TOKENIZER_JSON */
#include "../test.h"

#include "data/tokenizer.h"
#include "eval/transcribe.h"

int main(int argc, char **argv)
{
    bora_tokenizer *tok = NULL;
    if (argc != 2 || bora_tokenizer_load(argv[1], &tok) != BORA_OK) {
        fprintf(stderr, "usage: test_transcript_text WHISPER_TOKENIZER_JSON\n");
        return 2;
    }
    int32_t eot = bora_tokenizer_token_id(tok, "<|endoftext|>");
    int32_t sot = bora_tokenizer_token_id(tok, "<|startoftranscript|>");
    int32_t nots = bora_tokenizer_token_id(tok, "<|notimestamps|>");
    int32_t stamp = bora_tokenizer_token_id(tok, "<|1.00|>");
    CHECK(eot == 50256 && sot == 50257 && nots == 50362 && stamp > nots);
    const char *text = " The jury said, \"well-known\" 3.5%";
    bora_ids words = {0}, ids = {0};
    CHECK(bora_tokenizer_encode(tok, text, strlen(text), 0, &words) == BORA_OK);
    int32_t head[] = {sot, nots, stamp};
    for (size_t i = 0; i < 3; i++)
        bora_ids_push(&ids, head[i]);
    for (size_t i = 0; i < words.n; i++) {
        bora_ids_push(&ids, words.ids[i]);
        if (i == 2)
            bora_ids_push(&ids, stamp + 5); /* a timestamp inside the text */
    }
    bora_ids_push(&ids, eot);
    char *got = NULL;
    CHECK(bora_transcript_text(tok, ids.ids, ids.n, eot, &got) == BORA_OK);
    if (!got || strcmp(got, text)) {
        fprintf(stderr, "transcript text: got '%s', want '%s'\n", got ? got : "(none)", text);
        test_failures++;
    }
    free(got);
    CHECK(bora_transcript_text(tok, ids.ids, 0, eot, &got) == BORA_OK && got && !*got);
    free(got);
    bora_ids_free(&words);
    bora_ids_free(&ids);
    bora_tokenizer_free(tok);
    if (!test_failures)
        printf("transcript text: specials and timestamps left out\n");
    return test_failures ? 1 : 0;
}
