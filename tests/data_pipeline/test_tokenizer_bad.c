/* tests/data_pipeline/test_tokenizer_bad.c — malformed and unsupported tokenizer files: each
 * refused with a message naming what is wrong, none crashing; and text that cannot be encoded.
 *
 * usage: test_tokenizer_bad */
#include "../test.h"
#include "data/tokenizer.h"
#include "util/log.h"

#include <unistd.h>

static int cases;

/* A small valid byte-level tokenizer.json, with %s slots to break it. */
static const char *good_model =
    "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2, \"Ġ\": 3}, "
    "\"merges\": [\"a b\"]}";

static void refused(const char *what, const char *json, const char *expect)
{
    bora_tokenizer *t = NULL;
    bora_status st = bora_tokenizer_load_json("bad.json", json, strlen(json), &t);
    cases++;
    if (st == BORA_OK) {
        fprintf(stderr, "%s: loaded without an error\n", what);
        test_failures++;
        bora_tokenizer_free(t);
        return;
    }
    if (!strstr(bora_error_get(), expect)) {
        fprintf(stderr, "%s: expected \"%s\" in \"%s\"\n", what, expect, bora_error_get());
        test_failures++;
    }
}

static void refused_file(const char *what, const char *name, const void *data, size_t n,
                         const char *expect)
{
    char dir[] = "/tmp/bora-tok-bad-XXXXXX", path[256];
    if (!mkdtemp(dir))
        return;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    fwrite(data, 1, n, f);
    fclose(f);
    bora_tokenizer *t = NULL;
    cases++;
    if (bora_tokenizer_load(path, &t) == BORA_OK) {
        fprintf(stderr, "%s: loaded without an error\n", what);
        test_failures++;
        bora_tokenizer_free(t);
    } else if (!strstr(bora_error_get(), expect)) {
        fprintf(stderr, "%s: expected \"%s\" in \"%s\"\n", what, expect, bora_error_get());
        test_failures++;
    }
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    char buf[2048];
    refused("empty", "", "bad.json: not valid JSON (empty file");
    refused("truncated", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\"",
            "bad.json: not valid JSON (");
    refused("not an object", "[1, 2, 3]", "the top level is not an object");
    refused("no model", "{\"normalizer\": null}", "bad.json: no model");
    refused("unigram", "{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}",
            "model type 'Unigram' is not supported (bora reads BPE)");
    refused("no vocab", "{\"model\": {\"type\": \"BPE\", \"merges\": []}}",
            "model.vocab is missing or not an object");
    refused("string id",
            "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": \"0\"}, \"merges\": []}}",
            "model.vocab['a'] is not an integer id");
    refused("duplicate id",
            "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 0}, \"merges\": []}}",
            "id 0 is given to both 'a' and 'b'");
    refused("gap in ids",
            "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 2}, \"merges\": []}}",
            "no token has id 1");
    refused(
        "merge of an unknown token",
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a c\"]}}",
        "merge 0 ('a' 'c') uses a token that is not in the vocabulary");
    refused(
        "merge result missing",
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b\"]}}",
        "merge 0 makes 'ab', which is not in the vocabulary");
    refused("malformed merge",
            "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"abc\"]}}",
            "merge 0 'abc' is not two tokens separated by a space");
    snprintf(buf, sizeof buf, "{%s, \"pre_tokenizer\": {\"type\": \"Digits\"}}", good_model);
    refused("unsupported pre-tokenizer", buf, "pre-tokenizer type 'Digits' is not supported");
    snprintf(buf, sizeof buf, "{%s, \"normalizer\": {\"type\": \"Precompiled\"}}", good_model);
    refused("unsupported normalizer", buf, "normalizer type 'Precompiled' is not supported");
    snprintf(buf, sizeof buf,
             "{%s, \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, "
             "\"behavior\": \"Isolated\"}}",
             good_model);
    refused("bad regex", buf, "regex '(' does not compile at offset 1");
    snprintf(buf, sizeof buf,
             "{%s, \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"String\": \" \"}, "
             "\"behavior\": \"Sideways\"}}",
             good_model);
    refused("bad split behavior", buf, "pre-tokenizer Split has behavior 'Sideways'");
    snprintf(buf, sizeof buf, "{%s, \"post_processor\": {\"type\": \"RobertaProcessing\"}}",
             good_model);
    refused("unsupported post-processor", buf, "post_processor type 'RobertaProcessing'");
    snprintf(buf, sizeof buf, "{%s, \"decoder\": {\"type\": \"WordPiece\"}}", good_model);
    refused("unsupported decoder", buf, "decoder type 'WordPiece' is not supported");
    snprintf(buf, sizeof buf,
             "{%s, \"added_tokens\": [{\"id\": 2, \"content\": \"<s>\", \"special\": true}]}",
             good_model);
    refused("added token clashing with the vocabulary", buf,
            "id 2 is given to both 'ab' and '<s>'");
    snprintf(buf, sizeof buf,
             "{%s, \"added_tokens\": [{\"id\": 4, \"content\": \"<s>\", \"lstrip\": true}]}",
             good_model);
    refused("lstrip added token", buf, "uses lstrip, rstrip or single_word");
    snprintf(buf, sizeof buf,
             "{%s, \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": "
             "[{\"SpecialToken\": {\"id\": \"<s>\"}}, {\"Sequence\": {\"id\": \"A\"}}], "
             "\"special_tokens\": {}}}",
             good_model);
    refused("template without ids", buf, "TemplateProcessing refers to special token '<s>'");
    refused(
        "dropout",
        "{\"model\": {\"type\": \"BPE\", \"dropout\": 0.1, \"vocab\": {\"a\": 0}, \"merges\": []}}",
        "BPE dropout is not supported");

    /* Files: a corrupt gzip, binary garbage, a missing file, an empty folder. */
    static const unsigned char gz[] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 0xde, 0xad, 0xbe, 0xef};
    refused_file("corrupt gzip", "tokenizer.json.gz", gz, sizeof gz, "tokenizer.json.gz");
    unsigned char junk[512];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (unsigned char)(i * 131 + 7);
    refused_file("binary garbage", "tokenizer.json", junk, sizeof junk, "not valid JSON");
    bora_tokenizer *t = NULL;
    CHECK(bora_tokenizer_load("/nonexistent/tokenizer.json", &t) == BORA_ERR_NOT_FOUND);
    CHECK_CONTAINS(bora_error_get(), "tokenizer '/nonexistent/tokenizer.json': No such file");
    char dir[] = "/tmp/bora-tok-empty-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    CHECK(bora_tokenizer_load(dir, &t) == BORA_ERR_NOT_FOUND);
    CHECK_CONTAINS(bora_error_get(), "has no tokenizer.json, encoder.json + vocab.bpe");
    rmdir(dir);
    cases += 2;

    /* A valid tokenizer: invalid UTF-8 input and unknown characters are errors, not crashes. */
    snprintf(buf, sizeof buf, "{%s}", good_model);
    CHECK(bora_tokenizer_load_json("ok.json", buf, strlen(buf), &t) == BORA_OK);
    bora_ids ids = {0};
    CHECK(bora_tokenizer_encode(t, "ab", 2, 0, &ids) == BORA_OK && ids.n == 1 && ids.ids[0] == 2);
    ids.n = 0;
    CHECK(bora_tokenizer_encode(t, "a\xff", 2, 0, &ids) == BORA_ERR_INVALID);
    CHECK_CONTAINS(bora_error_get(), "invalid UTF-8 at byte 1");
    CHECK(bora_tokenizer_encode(t, "abc", 3, 0, &ids) == BORA_ERR_INVALID);
    CHECK_CONTAINS(bora_error_get(), "character U+0063 is not in the vocabulary");
    int32_t bad_id = 99;
    char *text;
    size_t len;
    CHECK(bora_tokenizer_decode(t, &bad_id, 1, &text, &len) == BORA_ERR_INVALID);
    CHECK_CONTAINS(bora_error_get(), "id 99 is not in the vocabulary (0..3)");
    bora_ids_free(&ids);
    bora_tokenizer_free(t);

    printf("test_tokenizer_bad: %d malformed or unsupported tokenizers refused\n", cases);
    CHECK(cases >= 10);
    return test_summary("test_tokenizer_bad");
}
