/* tests/fuzz/fuzz_records.c — libFuzzer target for the source record readers (records.h).
 *
 * The first byte picks the reader (even: .jsonl with the field "text", odd: .txt, as blocks or,
 * with bit 1 set, as one document) and the rest
 * is a file's bytes. Every document handed on must be well-formed UTF-8 lying inside a JSON
 * string's decoding or the input itself, every bad record must come with a message that names
 * the file and a line, and a .txt document never holds a blank line. Anything else aborts.
 * Build: cmake -DCMAKE_C_COMPILER=clang -DBORA_FUZZ=ON -DBORA_SANITIZE=address,undefined */
#include "data/records.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct seen {
    const char *data;
    size_t size;
    int txt, whole;
    size_t docs, bad, last_line;
} seen;

static bora_status on_doc(void *ctx, const char *path, size_t line, const char *text, size_t len)
{
    seen *s = ctx;
    size_t at;
    if (strcmp(path, "fuzz.in") != 0 || line == 0 || line < s->last_line)
        abort();
    if (!bora_utf8_valid((const unsigned char *)text, len, &at))
        abort();
    if (s->txt) {
        /* a slice of the input, not empty, with no blank line inside */
        if (text < s->data || text + len > s->data + s->size || len == 0)
            abort();
        for (size_t i = 0; !s->whole && i + 1 < len; i++)
            if (text[i] == '\n' && text[i + 1] == '\n')
                abort();
    }
    s->last_line = line;
    s->docs++;
    return BORA_OK;
}

static bora_status on_bad(void *ctx, const char *message)
{
    seen *s = ctx;
    if (strncmp(message, "fuzz.in:", 8) != 0)
        abort();
    s->bad++;
    return BORA_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    seen s = {(const char *)data + 1, size - 1, data[0] & 1, (data[0] & 2) != 0, 0, 0, 0};
    bora_record_fns f = {on_doc, on_bad, &s};
    bora_status st = s.txt ? bora_records_txt("fuzz.in", s.data, s.size, s.whole, &f)
                           : bora_records_jsonl("fuzz.in", s.data, s.size, "text", &f);
    if (st != BORA_OK)
        abort(); /* the callbacks never fail, so neither may the reader */
    return 0;
}
