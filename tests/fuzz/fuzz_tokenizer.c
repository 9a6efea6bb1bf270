/* tests/fuzz/fuzz_tokenizer.c — libFuzzer target for the tokenizer: the loader and the encoder.
 *
 * An even first byte loads the rest as a tokenizer.json and, when it loads, encodes and decodes
 * a fixed text with it; an odd first byte encodes the rest as text with two built-in tokenizers
 * (byte-level BPE, and SentencePiece-style BPE with byte fallback, a normalizer, a Split
 * pre-tokenizer, added tokens and a template), then decodes the ids. */
#include "data/tok_internal.h"

#include "util/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bora_tokenizer *byte_level, *sentencepiece;

static char *json_escape_token(const char *s, char *out)
{
    char *o = out;
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            *o++ = '\\';
        *o++ = *s;
    }
    *o = 0;
    return out;
}

static void build(void)
{
    tok_byte_table_init();
    size_t cap = 1 << 16, n = 0;
    char *j = malloc(cap), tok[16], esc[32];
    /* byte level: the 256 byte characters and a few merges */
    n += (size_t)snprintf(j + n, cap - n, "{\"model\":{\"type\":\"BPE\",\"vocab\":{");
    for (int b = 0; b < 256; b++) {
        tok[tok_utf8_put(tok_byte_char[b], tok)] = 0;
        n += (size_t)snprintf(j + n, cap - n, "%s\"%s\":%d", b ? "," : "",
                              json_escape_token(tok, esc), b);
    }
    n +=
        (size_t)snprintf(j + n, cap - n,
                         ",\"th\":256,\"the\":257,\"\\u0120the\":258,\"\\u0120t\":259},"
                         "\"merges\":[\"t h\",\"th e\",\"\\u0120 t\"],"
                         "\"ignore_merges\":true},"
                         "\"added_tokens\":[{\"id\":260,\"content\":\"<|eot|>\",\"special\":true}],"
                         "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":true,"
                         "\"use_regex\":true},\"decoder\":{\"type\":\"ByteLevel\"}}");
    if (bora_tokenizer_load_json("byte-level", j, n, &byte_level) != BORA_OK) {
        fprintf(stderr, "%s\n", bora_error_get());
        abort();
    }
    /* SentencePiece style */
    n = 0;
    n += (size_t)snprintf(j + n, cap - n,
                          "{\"model\":{\"type\":\"BPE\",\"byte_fallback\":true,"
                          "\"fuse_unk\":true,\"unk_token\":\"<unk>\",\"vocab\":{"
                          "\"<unk>\":0,\"<s>\":1");
    for (int b = 0; b < 256; b++)
        n += (size_t)snprintf(j + n, cap - n, ",\"<0x%02X>\":%d", b, 2 + b);
    n += (size_t)snprintf(j + n, cap - n,
                          ",\"\\u2581\":258,\"a\":259,\"b\":260,\"\\u2581a\":261,\"ab\":262},"
                          "\"merges\":[[\"\\u2581\",\"a\"],[\"a\",\"b\"]]},"
                          "\"added_tokens\":[{\"id\":1,\"content\":\"<s>\",\"special\":true}],"
                          "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":["
                          "{\"type\":\"NFKC\"},{\"type\":\"Prepend\",\"prepend\":\"\\u2581\"},"
                          "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":"
                          "\"\\u2581\"}]},"
                          "\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":"
                          "\"\\\\p{N}+\"},\"behavior\":\"MergedWithNext\"},"
                          "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":["
                          "{\"SpecialToken\":{\"id\":\"<s>\"}},{\"Sequence\":{\"id\":\"A\"}}],"
                          "\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[1]}}},"
                          "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\","
                          "\"pattern\":{\"String\":\"\\u2581\"},\"content\":\" \"},"
                          "{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},{\"type\":\"Strip\","
                          "\"content\":\" \",\"start\":1,\"stop\":0}]}}");
    if (bora_tokenizer_load_json("sentencepiece", j, n, &sentencepiece) != BORA_OK) {
        fprintf(stderr, "%s\n", bora_error_get());
        abort();
    }
    free(j);
}

static void roundtrip(bora_tokenizer *t, const char *text, size_t len)
{
    bora_ids ids = {0};
    for (int special = 0; special < 2; special++) {
        ids.n = 0;
        if (bora_tokenizer_encode(t, text, len, special, &ids) == BORA_OK) {
            char *back;
            size_t blen;
            if (bora_tokenizer_decode(t, ids.ids, ids.n, &back, &blen) == BORA_OK)
                free(back);
        }
    }
    bora_ids_free(&ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 1 << 16)
        return 0;
    if (!byte_level)
        build();
    const char *rest = (const char *)data + 1;
    if ((data[0] & 1) == 0) {
        bora_tokenizer *t;
        if (bora_tokenizer_load_json("fuzz.json", rest, size - 1, &t) == BORA_OK) {
            roundtrip(t, "Hello the world 123 <|eot|>", 27);
            bora_tokenizer_free(t);
        }
        return 0;
    }
    roundtrip(byte_level, rest, size - 1);
    roundtrip(sentencepiece, rest, size - 1);
    return 0;
}
