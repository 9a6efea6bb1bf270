/* core/data/records.h — the documents in a source file's bytes.
 *
 * .jsonl: one JSON object per line, the document in a string field (data.text_key); blank lines
 * are skipped. .txt: blocks of text separated by one or more blank lines, each a document, or
 * (whole) the file, less trailing line ends, as one document (none if it is blank). A
 * record that cannot be a document (invalid JSON, text after the object, no such field, a field
 * that is not a string, invalid UTF-8) goes to bad() with a message naming the file and line;
 * every other record goes to doc(), as valid UTF-8. A callback's error stops the reading and is
 * returned. */
#ifndef BORA_CORE_RECORDS_H
#define BORA_CORE_RECORDS_H

#include <bora/plugin.h>
#include <stddef.h>

typedef struct bora_record_fns {
    bora_status (*doc)(void *ctx, const char *path, size_t line, const char *text, size_t len);
    bora_status (*bad)(void *ctx, const char *message);
    void *ctx;
} bora_record_fns;

bora_status bora_records_jsonl(const char *path, const char *data, size_t len, const char *key,
                               const bora_record_fns *f);
bora_status bora_records_txt(const char *path, const char *data, size_t len, int whole,
                             const bora_record_fns *f);

/* Whether p[0..n) is well-formed UTF-8 (no overlong forms, surrogates or values past
 * U+10FFFF); if not, *at gets the offset of the first bad sequence. */
int bora_utf8_valid(const unsigned char *p, size_t n, size_t *at);

#endif
