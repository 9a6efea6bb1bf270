/* core/ckpt/safetensors.c — reading and writing safetensors files, strictly. */
#include "safetensors.h"

#include "../util/log.h"
#include "../util/str.h"

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const struct {
    const char *name;
    int32_t dtype;
    unsigned size;
} dtypes[] = {
    {"F64", BORA_DTYPE_F64, 8},   {"F32", BORA_DTYPE_F32, 4}, {"F16", BORA_DTYPE_F16, 2},
    {"BF16", BORA_DTYPE_BF16, 2}, {"I64", BORA_DTYPE_I64, 8}, {"I32", BORA_DTYPE_I32, 4},
    {"U8", BORA_DTYPE_U8, 1},     {"I8", BORA_DTYPE_U8, 1},   {"BOOL", BORA_DTYPE_U8, 1},
};

const char *bora_st_dtype_name(int32_t dtype)
{
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (dtypes[i].dtype == dtype)
            return dtypes[i].name;
    return NULL;
}

static bora_status bad(const char *name, const char *fmt, ...) BORA_PRINTF(2, 3);
static bora_status bad(const char *name, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return bora_error_set(BORA_ERR_INVALID, "%s: not a valid safetensors file: %s", name, msg);
}

/* Top-level keys of a JSON object text, counted without parsing values (json-c keeps only the
 * last of duplicate keys, so duplicates are found by comparing counts). */
static long count_top_keys(const char *s, size_t len)
{
    long keys = 0;
    int depth = 0, in_str = 0, expect_key = 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = 0;
            continue;
        }
        if (c == '"') {
            if (depth == 1 && expect_key)
                keys++, expect_key = 0;
            in_str = 1;
        } else if (c == '{' || c == '[') {
            depth++;
            if (depth == 1)
                expect_key = 1;
        } else if (c == '}' || c == ']') {
            depth--;
        } else if (c == ',' && depth == 1) {
            expect_key = 1;
        }
    }
    return keys;
}

typedef struct range {
    uint64_t begin, end;
    size_t index;
} range;

static int by_begin(const void *a, const void *b)
{
    const range *x = a, *y = b; /* empty tensors first where ranges start together */
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static bora_status parse_header(bora_safetensors *st, const char *hdr, size_t hlen)
{
    const char *name = st->path;
    json_tokener *jt = json_tokener_new_ex(16);
    if (!jt)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    json_tokener_set_flags(jt, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
    /* The header may be padded with spaces after the object. */
    size_t used = hlen;
    while (used && hdr[used - 1] == ' ')
        used--;
    json_object *root = used ? json_tokener_parse_ex(jt, hdr, (int)used) : NULL;
    enum json_tokener_error err = json_tokener_get_error(jt);
    size_t end = json_tokener_get_parse_end(jt);
    json_tokener_free(jt);
    if (!root || err != json_tokener_success || end != used) {
        json_object_put(root);
        return bad(name, "the header is not JSON (%s)",
                   err != json_tokener_success ? json_tokener_error_desc(err)
                                               : "text after the object");
    }
    if (!json_object_is_type(root, json_type_object)) {
        json_object_put(root);
        return bad(name, "the header is not a JSON object");
    }
    if (count_top_keys(hdr, used) != json_object_object_length(root)) {
        json_object_put(root);
        return bad(name, "the header names a tensor twice");
    }
    size_t n = (size_t)json_object_object_length(root);
    st->tensors = calloc(n ? n : 1, sizeof *st->tensors);
    range *ranges = calloc(n ? n : 1, sizeof *ranges);
    bora_status result = BORA_OK;
    if (!st->tensors || !ranges)
        result = bora_error_set(BORA_ERR_NOMEM, "out of memory");
    json_object_object_foreach(root, key, val)
    {
        if (result != BORA_OK)
            break;
        if (!strcmp(key, "__metadata__")) {
            if (!json_object_is_type(val, json_type_object)) {
                result = bad(name, "__metadata__ is not an object");
                break;
            }
            size_t m = (size_t)json_object_object_length(val);
            free(st->meta_keys);
            free(st->meta_values);
            st->meta_keys = calloc(m + 1, sizeof(char *));
            st->meta_values = calloc(m + 1, sizeof(char *));
            if (!st->meta_keys || !st->meta_values) {
                result = bora_error_set(BORA_ERR_NOMEM, "out of memory");
                break;
            }
            json_object_object_foreach(val, mk, mv)
            {
                if (!json_object_is_type(mv, json_type_string)) {
                    result = bad(name, "metadata '%.60s' is not a string", mk);
                    break;
                }
                st->meta_keys[st->n_meta] = bora_strdup(mk);
                st->meta_values[st->n_meta++] = bora_strdup(json_object_get_string(mv));
            }
            continue;
        }
        json_object *dt, *shape, *offs;
        if (!json_object_is_type(val, json_type_object) ||
            !json_object_object_get_ex(val, "dtype", &dt) ||
            !json_object_object_get_ex(val, "shape", &shape) ||
            !json_object_object_get_ex(val, "data_offsets", &offs) ||
            json_object_object_length(val) != 3) {
            result = bad(name, "tensor '%.60s' needs exactly dtype, shape and data_offsets", key);
            break;
        }
        bora_st_tensor *t = &st->tensors[st->n_tensors];
        const char *dts =
            json_object_is_type(dt, json_type_string) ? json_object_get_string(dt) : "";
        unsigned esize = 0;
        for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
            if (!strcmp(dts, dtypes[i].name)) {
                t->dtype = dtypes[i].dtype;
                esize = dtypes[i].size;
            }
        if (!esize) {
            result =
                bad(name, "tensor '%.60s' has dtype '%.20s', which bora does not read", key, dts);
            break;
        }
        snprintf(t->st_dtype, sizeof t->st_dtype, "%s", dts);
        if (!json_object_is_type(shape, json_type_array) ||
            json_object_array_length(shape) > BORA_ST_MAX_DIMS) {
            result = bad(name, "tensor '%.60s' has a shape that is not a list of at most %d sizes",
                         key, BORA_ST_MAX_DIMS);
            break;
        }
        t->ndim = (int32_t)json_object_array_length(shape);
        uint64_t numel = 1;
        for (int32_t i = 0; i < t->ndim && result == BORA_OK; i++) {
            json_object *d = json_object_array_get_idx(shape, (size_t)i);
            int64_t v = json_object_is_type(d, json_type_int) ? json_object_get_int64(d) : -1;
            if (v < 0 || (v && numel > UINT64_MAX / 16 / (uint64_t)v))
                result = bad(name, "tensor '%.60s' has a bad size in its shape", key);
            t->shape[i] = v;
            numel *= (uint64_t)(v < 0 ? 0 : v);
        }
        if (result != BORA_OK)
            break;
        if (!json_object_is_type(offs, json_type_array) || json_object_array_length(offs) != 2 ||
            !json_object_is_type(json_object_array_get_idx(offs, 0), json_type_int) ||
            !json_object_is_type(json_object_array_get_idx(offs, 1), json_type_int)) {
            result = bad(name, "tensor '%.60s' has data_offsets that are not [begin, end]", key);
            break;
        }
        int64_t b = json_object_get_int64(json_object_array_get_idx(offs, 0));
        int64_t e = json_object_get_int64(json_object_array_get_idx(offs, 1));
        if (b < 0 || e < b || (uint64_t)(e - b) != numel * esize) {
            result = bad(name,
                         "tensor '%.60s' has data_offsets [%lld, %lld], but its shape and "
                         "dtype take %llu bytes",
                         key, (long long)b, (long long)e, (unsigned long long)(numel * esize));
            break;
        }
        t->begin = (uint64_t)b;
        t->end = (uint64_t)e;
        t->name = bora_strdup(key);
        ranges[st->n_tensors] = (range){t->begin, t->end, st->n_tensors};
        st->n_tensors++;
    }
    json_object_put(root);
    /* The ranges tile the data: sorted, each starts where the previous ended. */
    if (result == BORA_OK) {
        qsort(ranges, st->n_tensors, sizeof *ranges, by_begin);
        uint64_t at = 0;
        for (size_t i = 0; i < st->n_tensors && result == BORA_OK; i++) {
            const bora_st_tensor *t = &st->tensors[ranges[i].index];
            if (ranges[i].begin != at)
                result = bad(name, "tensor '%.60s' starts at byte %llu of the data, but %s at %llu",
                             t->name, (unsigned long long)ranges[i].begin,
                             ranges[i].begin > at ? "the bytes before it end" : "another ends",
                             (unsigned long long)at);
            at = ranges[i].end;
        }
        if (result == BORA_OK && at != st->data_len)
            result = bad(name, "the tensors cover %llu bytes of data, but the file holds %llu",
                         (unsigned long long)at, (unsigned long long)st->data_len);
    }
    free(ranges);
    return result;
}

static bora_status check_lengths(bora_safetensors *st, const unsigned char *head8, uint64_t size,
                                 uint64_t *hlen)
{
    if (size < 8)
        return bad(st->path, "%llu bytes is shorter than the 8-byte header length",
                   (unsigned long long)size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | head8[i];
    if (n == 0 || n > BORA_ST_MAX_HEADER || n > size - 8)
        return bad(st->path, "the header length %llu does not fit a %llu-byte file (at most %u)",
                   (unsigned long long)n, (unsigned long long)size, BORA_ST_MAX_HEADER);
    *hlen = n;
    st->data_start = 8 + n;
    st->data_len = size - 8 - n;
    return BORA_OK;
}

bora_status bora_st_open_memory(const char *name, const void *data, size_t len,
                                bora_safetensors **out)
{
    *out = NULL;
    bora_safetensors *st = calloc(1, sizeof *st);
    if (!st)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    st->fd = -1;
    st->memory = data;
    st->path = bora_strdup(name);
    uint64_t hlen = 0;
    bora_status s = check_lengths(st, data, len, &hlen);
    if (s == BORA_OK)
        s = parse_header(st, (const char *)data + 8, (size_t)hlen);
    if (s != BORA_OK) {
        bora_st_close(st);
        return s;
    }
    *out = st;
    return BORA_OK;
}

bora_status bora_st_open(const char *path, bora_safetensors **out)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return bora_error_set(errno == ENOENT ? BORA_ERR_NOT_FOUND : BORA_ERR_IO, "%s: %s", path,
                              strerror(errno));
    struct stat sb;
    bora_safetensors *st = calloc(1, sizeof *st);
    if (!st) {
        close(fd);
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    }
    st->fd = fd;
    st->path = bora_strdup(path);
    unsigned char head8[8];
    uint64_t hlen = 0;
    bora_status s = BORA_OK;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))
        s = bora_error_set(BORA_ERR_IO, "%s: not a regular file", path);
    ssize_t got = s == BORA_OK ? pread(fd, head8, 8, 0) : -1;
    if (s == BORA_OK)
        s = check_lengths(st, head8,
                          got == 8 ? (uint64_t)sb.st_size : (uint64_t)(got < 0 ? 0 : got), &hlen);
    char *hdr = s == BORA_OK ? malloc(hlen) : NULL;
    if (s == BORA_OK && (!hdr || pread(fd, hdr, hlen, 8) != (ssize_t)hlen))
        s = bora_error_set(BORA_ERR_IO, "%s: cannot read the header", path);
    if (s == BORA_OK)
        s = parse_header(st, hdr, (size_t)hlen);
    free(hdr);
    if (s != BORA_OK) {
        bora_st_close(st);
        return s;
    }
    *out = st;
    return BORA_OK;
}

void bora_st_close(bora_safetensors *st)
{
    if (!st)
        return;
    if (st->fd >= 0)
        close(st->fd);
    for (size_t i = 0; i < st->n_tensors; i++)
        free(st->tensors[i].name);
    for (size_t i = 0; i < st->n_meta; i++) {
        free(st->meta_keys[i]);
        free(st->meta_values[i]);
    }
    free(st->tensors);
    free(st->meta_keys);
    free(st->meta_values);
    free(st->path);
    free(st);
}

const bora_st_tensor *bora_st_find(const bora_safetensors *st, const char *name)
{
    for (size_t i = 0; i < st->n_tensors; i++)
        if (!strcmp(st->tensors[i].name, name))
            return &st->tensors[i];
    return NULL;
}

const char *bora_st_meta(const bora_safetensors *st, const char *key)
{
    for (size_t i = 0; i < st->n_meta; i++)
        if (!strcmp(st->meta_keys[i], key))
            return st->meta_values[i];
    return NULL;
}

bora_status bora_st_read(const bora_safetensors *st, const bora_st_tensor *t, void *dst,
                         size_t nbytes)
{
    if (nbytes != t->end - t->begin)
        return bora_error_set(BORA_ERR_INVALID, "%s: tensor '%s' is %llu bytes, not %zu", st->path,
                              t->name, (unsigned long long)(t->end - t->begin), nbytes);
    if (st->memory) {
        memcpy(dst, st->memory + st->data_start + t->begin, nbytes);
        return BORA_OK;
    }
    size_t done = 0;
    while (done < nbytes) {
        ssize_t got = pread(st->fd, (char *)dst + done, nbytes - done,
                            (off_t)(st->data_start + t->begin + done));
        if (got <= 0)
            return bora_error_set(BORA_ERR_IO, "%s: cannot read tensor '%s': %s", st->path, t->name,
                                  got < 0 ? strerror(errno) : "file shrank");
        done += (size_t)got;
    }
    return BORA_OK;
}

static int write_all(int fd, const void *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p = (const char *)p + w;
        n -= (size_t)w;
    }
    return 0;
}

bora_status bora_st_write(const char *path, const bora_st_entry *entries, size_t n,
                          const char *const *meta_kv, size_t n_meta)
{
    /* The header: metadata first, then each tensor with its range, in the order given. */
    json_object *root = json_object_new_object(), *meta = json_object_new_object();
    json_object_object_add(meta, "format", json_object_new_string("pt"));
    for (size_t i = 0; i < n_meta; i++)
        json_object_object_add(meta, meta_kv[2 * i], json_object_new_string(meta_kv[2 * i + 1]));
    json_object_object_add(root, "__metadata__", meta);
    uint64_t at = 0;
    for (size_t i = 0; i < n; i++) {
        const char *dn = bora_st_dtype_name(entries[i].dtype);
        if (!dn) {
            json_object_put(root);
            return bora_error_set(BORA_ERR_INVALID,
                                  "%s: tensor '%s' has a dtype safetensors "
                                  "cannot hold",
                                  path, entries[i].name);
        }
        uint64_t bytes = bora_dtype_size(entries[i].dtype);
        json_object *shape = json_object_new_array(), *offs = json_object_new_array(),
                    *t = json_object_new_object();
        for (int32_t d = 0; d < entries[i].ndim; d++) {
            json_object_array_add(shape, json_object_new_int64(entries[i].shape[d]));
            bytes *= (uint64_t)entries[i].shape[d];
        }
        json_object_array_add(offs, json_object_new_int64((int64_t)at));
        json_object_array_add(offs, json_object_new_int64((int64_t)(at + bytes)));
        json_object_object_add(t, "dtype", json_object_new_string(dn));
        json_object_object_add(t, "shape", shape);
        json_object_object_add(t, "data_offsets", offs);
        json_object_object_add(root, entries[i].name, t);
        at += bytes;
    }
    const char *text = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN);
    size_t tl = strlen(text), padded = (tl + 7) & ~(size_t)7; /* data 8-byte aligned */
    char *hdr = malloc(padded + 8);
    if (!hdr) {
        json_object_put(root);
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < 8; i++)
        hdr[i] = (char)((uint64_t)padded >> (8 * i));
    memcpy(hdr + 8, text, tl);
    memset(hdr + 8 + tl, ' ', padded - tl);
    json_object_put(root);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    bora_status st = BORA_OK;
    if (fd < 0)
        st = bora_error_set(BORA_ERR_IO, "%s: %s", path, strerror(errno));
    else if (write_all(fd, hdr, padded + 8))
        st = bora_error_set(BORA_ERR_IO, "%s: %s", path, strerror(errno));
    for (size_t i = 0; i < n && st == BORA_OK; i++) {
        uint64_t bytes = bora_dtype_size(entries[i].dtype);
        for (int32_t d = 0; d < entries[i].ndim; d++)
            bytes *= (uint64_t)entries[i].shape[d];
        if (write_all(fd, entries[i].data, (size_t)bytes))
            st = bora_error_set(BORA_ERR_IO, "%s: %s", path, strerror(errno));
    }
    if (st == BORA_OK && fsync(fd) != 0)
        st = bora_error_set(BORA_ERR_IO, "%s: cannot sync: %s", path, strerror(errno));
    if (fd >= 0 && close(fd) != 0 && st == BORA_OK)
        st = bora_error_set(BORA_ERR_IO, "%s: %s", path, strerror(errno));
    free(hdr);
    return st;
}
