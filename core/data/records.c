/* core/data/records.c — the documents of a source file's bytes (records.h). */
#include "records.h"

#include "../util/log.h"

#include <json-c/json.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static bora_status bad(const bora_record_fns *f, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static bora_status bad(const bora_record_fns *f, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return f->bad(f->ctx, msg);
}

int bora_utf8_valid(const unsigned char *p, size_t n, size_t *at)
{
    for (size_t i = 0; i < n;) {
        unsigned c = p[i];
        size_t k = c < 0x80             ? 0
                   : (c & 0xe0) == 0xc0 ? 1
                   : (c & 0xf0) == 0xe0 ? 2
                   : (c & 0xf8) == 0xf0 ? 3
                                        : 9;
        if (k == 9 || i + k >= n) {
            *at = i;
            return 0;
        }
        unsigned v = k == 0 ? c : k == 1 ? c & 0x1f : k == 2 ? c & 0x0f : c & 0x07;
        for (size_t j = 1; j <= k; j++) {
            if ((p[i + j] & 0xc0) != 0x80) {
                *at = i;
                return 0;
            }
            v = v << 6 | (p[i + j] & 0x3f);
        }
        if ((k == 1 && v < 0x80) || (k == 2 && (v < 0x800 || (v >= 0xd800 && v <= 0xdfff))) ||
            (k == 3 && (v < 0x10000 || v > 0x10ffff))) {
            *at = i;
            return 0;
        }
        i += k + 1;
    }
    return 1;
}

static int blank_line(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r'))
        p++;
    return p == end;
}

bora_status bora_records_jsonl(const char *path, const char *data, size_t len, const char *key,
                               const bora_record_fns *f)
{
    json_tokener *tk = json_tokener_new();
    if (!tk)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    bora_status st = BORA_OK;
    size_t line = 0;
    for (size_t at = 0; at < len && st == BORA_OK;) {
        const char *nl = memchr(data + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - data) : len;
        line++;
        size_t a = at, b = end;
        while (a < b && strchr(" \t\r", data[a]))
            a++;
        at = end + 1;
        if (a == b)
            continue;
        if (b - a > INT_MAX) {
            st = bad(f, "%s:%zu: a line of %zu bytes", path, line, b - a);
            continue;
        }
        json_tokener_reset(tk);
        json_object *o = json_tokener_parse_ex(tk, data + a, (int)(b - a));
        enum json_tokener_error err = json_tokener_get_error(tk);
        json_object *text = NULL;
        size_t bad_at = 0;
        if (!o || err != json_tokener_success) {
            st = bad(f, "%s:%zu: invalid JSON (%s)", path, line,
                     err == json_tokener_continue ? "unexpected end of line"
                                                  : json_tokener_error_desc(err));
        } else if (!blank_line(data + a + json_tokener_get_parse_end(tk), data + b)) {
            st = bad(f, "%s:%zu: text after the JSON object", path, line);
        } else if (!json_object_is_type(o, json_type_object) ||
                   !json_object_object_get_ex(o, key, &text)) {
            st = bad(f, "%s:%zu: no \"%s\" field (data.text_key)", path, line, key);
        } else if (!json_object_is_type(text, json_type_string)) {
            st = bad(f, "%s:%zu: field \"%s\" is not a string", path, line, key);
        } else if (!bora_utf8_valid((const unsigned char *)json_object_get_string(text),
                                    (size_t)json_object_get_string_len(text), &bad_at)) {
            st = bad(f, "%s:%zu: invalid UTF-8 in \"%s\" at byte %zu", path, line, key, bad_at);
        } else {
            st = f->doc(f->ctx, path, line, json_object_get_string(text),
                        (size_t)json_object_get_string_len(text));
        }
        json_object_put(o);
    }
    json_tokener_free(tk);
    return st;
}

bora_status bora_records_txt(const char *path, const char *data, size_t len, int whole,
                             const bora_record_fns *f)
{
    if (whole) {
        size_t end = len, bad_at = 0;
        while (end > 0 && (data[end - 1] == '\n' || data[end - 1] == '\r'))
            end--;
        size_t a = 0;
        while (a < end && strchr(" \t\r\n", data[a]))
            a++;
        if (a == end)
            return BORA_OK;
        if (!bora_utf8_valid((const unsigned char *)data, end, &bad_at)) {
            size_t bad_line = 1;
            for (size_t i = 0; i < bad_at; i++)
                bad_line += data[i] == '\n';
            return bad(f, "%s:%zu: invalid UTF-8 (the file is one document)", path, bad_line);
        }
        return f->doc(f->ctx, path, 1, data, end);
    }
    size_t line = 0, start = 0, start_line = 1;
    int in_doc = 0;
    for (size_t at = 0; at <= len;) {
        const char *nl = at < len ? memchr(data + at, '\n', len - at) : NULL;
        size_t end = nl ? (size_t)(nl - data) : len;
        line++;
        int blank = blank_line(data + at, data + end);
        if (!blank && !in_doc) {
            in_doc = 1;
            start = at;
            start_line = line;
        }
        if ((blank || end == len) && in_doc) {
            size_t doc_end = blank ? at : end;
            while (doc_end > start && (data[doc_end - 1] == '\n' || data[doc_end - 1] == '\r'))
                doc_end--;
            size_t bad_at = 0;
            bora_status st;
            if (!bora_utf8_valid((const unsigned char *)data + start, doc_end - start, &bad_at)) {
                size_t bad_line = start_line;
                for (size_t i = start; i < start + bad_at; i++)
                    bad_line += data[i] == '\n';
                st = bad(f, "%s:%zu: invalid UTF-8 (a block of text from line %zu)", path, bad_line,
                         start_line);
            } else {
                st = f->doc(f->ctx, path, start_line, data + start, doc_end - start);
            }
            if (st != BORA_OK)
                return st;
            in_doc = 0;
        }
        if (end == len)
            break;
        at = end + 1;
    }
    return BORA_OK;
}
