/* core/data/source.c — patterns to files, and files to bytes (see source.h). */
#include "source.h"

#include "../util/log.h"
#include "../util/str.h"

#include <ctype.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

enum { MAX_EXPANSIONS = 1 << 20 };

static bora_status push(bora_paths *p, const char *s)
{
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 16;
        char **v = realloc(p->v, cap * sizeof *v);
        if (!v)
            return bora_error_set(BORA_ERR_NOMEM, "out of memory");
        p->v = v;
        p->cap = cap;
    }
    if (!(p->v[p->n] = strdup(s)))
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    p->n++;
    return BORA_OK;
}

void bora_paths_free(bora_paths *p)
{
    for (size_t i = 0; i < p->n; i++)
        free(p->v[i]);
    free(p->v);
    memset(p, 0, sizeof *p);
}

/* "12" -> 12 with *width the digits written; 0 if s[0..len) is not a non-negative integer. */
static int parse_int(const char *s, size_t len, long long *v, int *width)
{
    if (!len || len > 18)
        return 0;
    for (size_t i = 0; i < len; i++)
        if (!isdigit((unsigned char)s[i]))
            return 0;
    *v = strtoll(s, NULL, 10);
    *width = s[0] == '0' && len > 1 ? (int)len : 0;
    return 1;
}

/* Expand the first top-level brace group of s (a range a..b or a comma list), recursively;
 * strings without braces go to out. */
static bora_status expand_braces(const char *s, bora_paths *out, const char *pattern)
{
    const char *open = strchr(s, '{');
    if (!open)
        return out->n >= MAX_EXPANSIONS ? bora_error_set(BORA_ERR_INVALID, "%s: more than %d files",
                                                         pattern, MAX_EXPANSIONS)
                                        : push(out, s);
    int depth = 0;
    const char *close = NULL;
    for (const char *p = open; *p && !close; p++) {
        if (*p == '{')
            depth++;
        else if (*p == '}' && --depth == 0)
            close = p;
    }
    if (!close)
        return bora_error_set(BORA_ERR_INVALID, "%s: a '{' without its '}'", pattern);
    size_t pre = (size_t)(open - s), inner = (size_t)(close - open - 1);
    const char *body = open + 1, *rest = close + 1;
    size_t cap = strlen(s) + 64;
    char *buf = malloc(cap + inner), *dots = NULL;
    if (!buf)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    bora_status st = BORA_OK;
    for (const char *p = body; p + 1 < close; p++)
        if (p[0] == '.' && p[1] == '.') {
            dots = (char *)p;
            break;
        }
    long long a, b;
    int wa, wb;
    if (dots && !memchr(body, ',', inner) && parse_int(body, (size_t)(dots - body), &a, &wa) &&
        parse_int(dots + 2, (size_t)(close - dots - 2), &b, &wb)) {
        int width = wa > wb ? wa : wb;
        if ((b >= a ? b - a : a - b) >= MAX_EXPANSIONS)
            st = bora_error_set(BORA_ERR_INVALID, "%s: the range {%lld..%lld} is too long", pattern,
                                a, b);
        for (long long v = a; st == BORA_OK; v += b >= a ? 1 : -1) {
            snprintf(buf, cap, "%.*s%0*lld%s", (int)pre, s, width, v, rest);
            st = expand_braces(buf, out, pattern);
            if (v == b)
                break;
        }
    } else {
        /* a comma list, split at top-level commas */
        const char *item = body;
        depth = 0;
        for (const char *p = body; p <= close && st == BORA_OK; p++) {
            if (*p == '{')
                depth++;
            else if (*p == '}' && p != close)
                depth--;
            else if ((*p == ',' && depth == 0) || p == close) {
                snprintf(buf, cap + inner, "%.*s%.*s%s", (int)pre, s, (int)(p - item), item, rest);
                st = expand_braces(buf, out, pattern);
                item = p + 1;
            }
        }
    }
    free(buf);
    return st;
}

bora_status bora_source_expand(const char *pattern, bora_paths *out)
{
    bora_paths names = {0};
    bora_status st = expand_braces(pattern, &names, pattern);
    for (size_t i = 0; i < names.n && st == BORA_OK; i++) {
        if (bora_source_is_url(names.v[i])) {
            st = push(out, names.v[i]);
            continue;
        }
        glob_t g;
        int rc = glob(names.v[i], 0, NULL, &g);
        if (rc == GLOB_NOMATCH)
            st = bora_error_set(BORA_ERR_NOT_FOUND, "%s: no such file%s", names.v[i],
                                names.n > 1 || strcmp(names.v[i], pattern) ? " (from a pattern)"
                                                                           : "");
        else if (rc != 0)
            st = bora_error_set(BORA_ERR_IO, "%s: cannot list", names.v[i]);
        for (size_t j = 0; rc == 0 && j < g.gl_pathc && st == BORA_OK; j++)
            st = push(out, g.gl_pathv[j]);
        if (rc == 0 || rc == GLOB_NOMATCH)
            globfree(&g);
    }
    bora_paths_free(&names);
    return st;
}

void bora_source_base_name(const char *path, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", path);
    size_t n = strlen(buf);
    if (n > 3 && !strcmp(buf + n - 3, ".gz"))
        buf[n - 3] = 0;
    else if (n > 4 && !strcmp(buf + n - 4, ".zst"))
        buf[n - 4] = 0;
}

/* Grow *out to hold at least need more bytes. */
static int reserve(char **out, size_t *cap, size_t len, size_t need)
{
    if (len + need <= *cap)
        return 1;
    size_t c = *cap ? *cap : 1 << 16;
    while (c < len + need)
        c *= 2;
    char *p = realloc(*out, c + 1);
    if (!p)
        return 0;
    *out = p;
    *cap = c;
    return 1;
}

static bora_status gunzip(const char *path, const unsigned char *in, size_t n, char **data,
                          size_t *len)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, 15 + 16) != Z_OK)
        return bora_error_set(BORA_ERR_NOMEM, "%s: cannot start gzip", path);
    char *out = NULL;
    size_t cap = 0, used = 0;
    bora_status st = BORA_OK;
    z.next_in = (unsigned char *)in;
    z.avail_in = (uInt)(n < UINT32_MAX ? n : UINT32_MAX);
    size_t fed = z.avail_in;
    for (;;) {
        if (!reserve(&out, &cap, used, 1 << 20)) {
            st = bora_error_set(BORA_ERR_NOMEM, "%s: out of memory", path);
            break;
        }
        z.next_out = (unsigned char *)out + used;
        z.avail_out = (uInt)(cap - used);
        int rc = inflate(&z, Z_NO_FLUSH);
        used = cap - z.avail_out;
        if (z.avail_in == 0 && fed < n) { /* inputs past 4 GiB come in pieces */
            size_t more = n - fed < UINT32_MAX ? n - fed : UINT32_MAX;
            z.next_in = (unsigned char *)in + fed;
            z.avail_in = (uInt)more;
            fed += more;
        }
        if (rc == Z_STREAM_END) {
            if (z.avail_in == 0 && fed == n)
                break;
            /* another member follows */
            if (z.avail_in >= 2 && z.next_in[0] == 0x1f && z.next_in[1] == 0x8b) {
                inflateReset(&z);
                continue;
            }
            st = bora_error_set(BORA_ERR_INVALID, "%s: data after the gzip stream", path);
            break;
        }
        if (rc == Z_BUF_ERROR && z.avail_in == 0) {
            st = bora_error_set(BORA_ERR_INVALID,
                                "%s: the gzip stream is truncated (%zu bytes decompressed)", path,
                                used);
            break;
        }
        if (rc != Z_OK && rc != Z_BUF_ERROR) {
            st = bora_error_set(BORA_ERR_INVALID, "%s: corrupt gzip data (%s)", path,
                                z.msg ? z.msg : "inflate failed");
            break;
        }
    }
    inflateEnd(&z);
    if (st != BORA_OK) {
        free(out);
        return st;
    }
    out[used] = 0;
    *data = out;
    *len = used;
    return BORA_OK;
}

static bora_status unzstd(const char *path, const unsigned char *in, size_t n, char **data,
                          size_t *len)
{
    ZSTD_DStream *ds = ZSTD_createDStream();
    if (!ds)
        return bora_error_set(BORA_ERR_NOMEM, "%s: cannot start zstd", path);
    ZSTD_initDStream(ds);
    char *out = NULL;
    size_t cap = 0, used = 0, left = 1;
    bora_status st = BORA_OK;
    ZSTD_inBuffer ib = {in, n, 0};
    for (;;) {
        if (!reserve(&out, &cap, used, 1 << 20)) {
            st = bora_error_set(BORA_ERR_NOMEM, "%s: out of memory", path);
            break;
        }
        ZSTD_outBuffer ob = {out + used, cap - used, 0};
        left = ZSTD_decompressStream(ds, &ob, &ib);
        used += ob.pos;
        if (ZSTD_isError(left)) {
            st = bora_error_set(BORA_ERR_INVALID, "%s: corrupt zstd data (%s)", path,
                                ZSTD_getErrorName(left));
            break;
        }
        if (ib.pos == ib.size && ob.pos < ob.size) { /* all read, all written out */
            if (left != 0)
                st = bora_error_set(BORA_ERR_INVALID,
                                    "%s: the zstd stream is truncated (%zu bytes decompressed)",
                                    path, used);
            break;
        }
    }
    ZSTD_freeDStream(ds);
    if (st != BORA_OK) {
        free(out);
        return st;
    }
    if (!out && !(out = malloc(1))) /* an empty stream */
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    out[used] = 0;
    *data = out;
    *len = used;
    return BORA_OK;
}

bora_status bora_source_read(const char *path, char **data, size_t *len)
{
    char *raw = NULL;
    size_t n = 0;
    bora_status st = bora_source_is_url(path) ? bora_http_get(path, &raw, &n)
                                              : bora_read_file(path, SIZE_MAX, &raw, &n);
    if (st != BORA_OK)
        return st;
    const unsigned char *u = (const unsigned char *)raw;
    if (n >= 2 && u[0] == 0x1f && u[1] == 0x8b)
        st = gunzip(path, u, n, data, len);
    else if (n >= 4 && u[0] == 0x28 && u[1] == 0xb5 && u[2] == 0x2f && u[3] == 0xfd)
        st = unzstd(path, u, n, data, len);
    else {
        *data = raw;
        *len = n;
        return BORA_OK;
    }
    free(raw);
    return st;
}
