/* core/util/str.h — small string and path helpers. */
#ifndef BORA_CORE_STR_H
#define BORA_CORE_STR_H

#include <bora/plugin.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

char *bora_strdup(const char *s); /* NULL for NULL or out of memory */
char *bora_strndup(const char *s, size_t n);
char *bora_path_join(const char *dir, const char *name); /* "dir/name", malloc'ed */
int bora_same_file(const char *a, const char *b);        /* same inode (both exist) */
size_t bora_edit_distance(const char *a, const char *b); /* Levenshtein, capped at 64 chars */
void bora_json_string(FILE *out, const char *s);         /* s as a quoted JSON string */
/* v exactly (%.17g), or null when it is not finite: JSON has no NaN or infinity. */
void bora_json_number(FILE *out, double v);

#define BORA_FNV_SEED 1469598103934665603ull
/* FNV-1a, 64-bit, continuing from h (start with BORA_FNV_SEED). */
uint64_t bora_fnv1a(uint64_t h, const void *data, size_t n);
/* A regular file's bytes, NUL-terminated (malloc'ed); refused above max_bytes. The error names
 * the file. */
bora_status bora_read_file(const char *path, size_t max_bytes, char **data, size_t *len);
/* The FNV-1a hash of a file's bytes; -1 when it cannot be read. */
int bora_hash_file(const char *path, uint64_t *out);
/* Seconds on the monotonic clock, for durations. */
double bora_now_s(void);

#endif
