/* core/data/cache_dir.h — what the token cache (cache.c) and the audio cache (audio_cache.c)
 * share about the directory they build their shards in: where it is by default, one builder at
 * a time, files replaced atomically, leftovers removed, and the builder threads' priority. */
#ifndef BORA_CORE_CACHE_DIR_H
#define BORA_CORE_CACHE_DIR_H

#include <bora/plugin.h>

#include <json-c/json.h>
#include <stddef.h>
#include <stdint.h>

/* dir when given (data.cache_dir), else $XDG_CACHE_HOME/bora/KIND/KEY, or ~/.cache/bora/KIND/KEY
 * (KEY in 16 hex digits), written to out; every missing directory of it made. */
bora_status bora_cache_dir_make(const char *dir, const char *kind, uint64_t key, char *out,
                                size_t cap);
/* Take dir/lock, waiting (and saying so) while another process builds there; *fd holds it
 * until closed. On a file system without locks it warns and goes on (shards are written whole
 * and renamed, so two builders repeat work but corrupt nothing). */
bora_status bora_cache_dir_lock(const char *dir, int *fd);
/* Remove dir's temporary files (NAME.tmp.PID), and with all its shards, ledger and meta too. */
void bora_cache_dir_clean(const char *dir, int all);
/* dir/name holds o as pretty JSON, written beside it, synced and renamed over it. */
bora_status bora_cache_dir_write_json(const char *dir, const char *name, json_object *o);
/* The calling builder thread runs at idle priority: the training step's threads come first. */
void bora_cache_builder_idle(void);

#endif
