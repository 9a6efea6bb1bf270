/* core/util/str.h — small string and path helpers. */
#ifndef BORA_CORE_STR_H
#define BORA_CORE_STR_H

#include <stddef.h>
#include <stdio.h>

char *bora_strdup(const char *s); /* NULL for NULL or out of memory */
char *bora_strndup(const char *s, size_t n);
char *bora_path_join(const char *dir, const char *name); /* "dir/name", malloc'ed */
int bora_same_file(const char *a, const char *b);        /* same inode (both exist) */
size_t bora_edit_distance(const char *a, const char *b); /* Levenshtein, capped at 64 chars */
void bora_json_string(FILE *out, const char *s);         /* s as a quoted JSON string */

#endif
