/* core/ckpt/checkpoint.h — checkpoints of a run: {run_dir}/step-{N}/ holding model.safetensors
 * (every parameter under its Hugging Face name), optimizer.safetensors (state slot k of
 * parameter p as "<slot>.<p>") and trainer.json (what the loop needs to go on, and what the
 * bits depend on, and an xxh3-64 digest of every tensor of both files).
 *
 * A save writes a temporary directory, fsyncs every file and the directory, then renames it
 * into place: a directory named step-N is complete, and a killed save leaves only a temporary
 * directory, which the next start removes while holding the run's lock. */
#ifndef BORA_CORE_CHECKPOINT_H
#define BORA_CORE_CHECKPOINT_H

#include "../graph/graph.h"

/* The optimizer state's names, per parameter: slots[i] lists, NULL-terminated, the names of
 * parameter i's state blocks (block k of the store's state under slots[i][k]); parameters of
 * different optimizer groups may have different slots, or none (slots[i] NULL or empty). A
 * NULL table: no optimizer state. */
typedef const char *const *const *bora_ckpt_slots;

/* Save the store's parameters (and its optimizer state, named by slots) with trainer_json, a JSON object's text, as step-{step} in run_dir (made if
 * missing); trainer.json gets the object with "digests" added. The path of the new directory
 * goes to dir. A tensor holding a NaN or an infinity is refused, naming it, and nothing is
 * written (a load would refuse it). */
bora_status bora_ckpt_save(const g_store *s, bora_ckpt_slots slots, const char *run_dir,
                           int64_t step, const char *trainer_json, char *dir, size_t cap);

/* The steps of run_dir's complete checkpoints, ascending (malloc'ed; *n may be 0). A missing
 * run_dir has none. Reading only: leftovers of killed saves stay for bora_ckpt_clean. */
bora_status bora_ckpt_list(const char *run_dir, int64_t **steps, size_t *n);

/* Remove the leftovers of killed saves from run_dir (with a log line each). Only while holding
 * run_dir's lock: a temporary directory of a live save would go too. */
void bora_ckpt_clean(const char *run_dir);

/* Take run_dir for this process's life: made if missing, checked writable, and locked with
 * flock on run_dir/.lock, which then holds "pid P on host H". A second process is refused with a
 * message naming the first's pid and host. *fd gets the lock's descriptor (closing it, or
 * exiting, releases the lock). */
bora_status bora_ckpt_lock(const char *run_dir, int *fd);

/* Release the lock bora_ckpt_lock took (fd < 0: none). With made (this process made run_dir),
 * a run_dir that holds only .lock is removed too. */
void bora_ckpt_unlock(const char *run_dir, int fd, int made);

/* Remove run_dir/step-{step}. */
bora_status bora_ckpt_remove(const char *run_dir, int64_t step);

/* Loading is strict: the files hold every one of the store's tensors, with its dtype and
 * shape, and nothing else; each tensor's bytes, as read from the file and before they reach the
 * backend, must match the digest dir/trainer.json records for it and hold only finite values;
 * and trainer.json's step must be the one its step-N directory is named for. Anything else is
 * refused naming the file and tensor. A checkpoint saved before digests were recorded loads
 * with a warning. A checkpoint whose tensors do not fit the store (missing, extra, or of another
 * dtype or shape: the configuration differs) is refused with BORA_ERR_CONFIG; damage
 * (digests, non-finite values, step, unreadable files) with another status. */
/* Read parameters from dir/model.safetensors. */
bora_status bora_ckpt_load_model(g_store *s, const char *dir);
/* Read parameters and, with slots, optimizer state from dir/optimizer.safetensors. */
bora_status bora_ckpt_load(g_store *s, bora_ckpt_slots slots, const char *dir);
/* Check as bora_ckpt_load does, without changing the store. */
bora_status bora_ckpt_verify(g_store *s, bora_ckpt_slots slots, const char *dir);

/* A tensor's digest as trainer.json records it: "xxh3-64:" and 16 hex digits. */
#define BORA_CKPT_DIGEST_LEN 25
void bora_ckpt_digest(const void *data, size_t nbytes, char out[BORA_CKPT_DIGEST_LEN]);
/* Check a tensor's bytes as read from file: against want, its recorded digest (NULL: none), and
 * that a floating-point tensor holds only finite values; a failure names file and tensor. */
bora_status bora_ckpt_check_tensor(const char *file, const char *name, int32_t dtype,
                                   const void *data, size_t nbytes, const char *want);
/* dir/trainer.json's text (malloc'ed, NUL-terminated). */
bora_status bora_ckpt_read_trainer(const char *dir, char **json);
/* The resolved configuration dir/trainer.json records, loaded into cfg (a bora_cfg of
 * core/config/config.h); errors name the file. */
struct bora_cfg;
bora_status bora_ckpt_load_config(const char *dir, struct bora_cfg *cfg);

/* Make a directory and its parents. */
bora_status bora_mkdir_p(const char *path);

#endif
