/* core/data/source.h — where training text comes from: patterns expanded to files, and a
 * file's bytes with gzip or zstd compression undone (detected by content, not by name).
 *
 * A pattern is a path or an http(s):// URL with brace ranges (shard.{1..128}-of-128.jsonl.gz; {001..128} keeps the
 * zero padding), brace lists ({train,extra}.jsonl) and glob wildcards (* ? [..]). Every file
 * a pattern names must exist: a range or list member that matches nothing is an error, not a
 * silently shorter dataset. */
#ifndef BORA_CORE_SOURCE_H
#define BORA_CORE_SOURCE_H

#include <bora/plugin.h>
#include <stddef.h>
#include <stdint.h>

typedef struct bora_paths {
    char **v;
    size_t n, cap;
} bora_paths;

/* Append the files pattern names, in order (ranges in counting order, globs sorted). */
bora_status bora_source_expand(const char *pattern, bora_paths *out);
void bora_paths_free(bora_paths *p);

/* The whole content of path, decompressed when it is gzip (any number of members) or zstd
 * (any number of frames); a truncated or corrupt stream is an error naming the file. */
bora_status bora_source_read(const char *path, char **data, size_t *len);

/* http:// and https:// sources (http.c): brace ranges and lists expand, globs do not. */
int bora_source_is_url(const char *s);
/* A URL's size and modification time (a HEAD request; 0 for what the server does not say). */
bora_status bora_http_stat(const char *url, uint64_t *size, int64_t *mtime_ns);
/* A URL's bytes: a dropped or stalled connection is resumed with a Range request, with pauses
 * growing between tries (BORA_HTTP_TRIES, default 6); fewer bytes than the server announced is
 * an error, never a shorter file. */
bora_status bora_http_get(const char *url, char **data, size_t *len);

/* The name without a trailing .gz or .zst, for telling .jsonl from .txt. */
void bora_source_base_name(const char *path, char *buf, size_t cap);

#endif
