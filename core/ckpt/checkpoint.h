/* core/ckpt/checkpoint.h — checkpoints of a run: {run_dir}/step-{N}/ holding model.safetensors
 * (every parameter under its Hugging Face name), optimizer.safetensors (state slot k of
 * parameter p as "<slot>.<p>") and trainer.json (what the loop needs to go on, and what the
 * bits depend on).
 *
 * A save writes a temporary directory, fsyncs every file and the directory, then renames it
 * into place: a directory named step-N is complete, and a killed save leaves only a temporary
 * directory, which the next start removes. */
#ifndef BORA_CORE_CHECKPOINT_H
#define BORA_CORE_CHECKPOINT_H

#include "../graph/graph.h"

/* Save the store's parameters (and its optimizer state, named by slots, NULL-terminated; NULL
 * for none) with trainer_json as step-{step} in run_dir (made if missing). The path of the new
 * directory goes to dir. */
bora_status bora_ckpt_save(const g_store *s, const char *const *slots, const char *run_dir,
                           int64_t step, const char *trainer_json, char *dir, size_t cap);

/* The steps of run_dir's complete checkpoints, ascending (malloc'ed; *n may be 0). Leftovers of
 * killed saves are removed (with a log line). A missing run_dir has none. */
bora_status bora_ckpt_list(const char *run_dir, int64_t **steps, size_t *n);

/* Remove run_dir/step-{step}. */
bora_status bora_ckpt_remove(const char *run_dir, int64_t step);

/* Read parameters from dir/model.safetensors: every one of the store's, with its dtype and
 * shape, and nothing else; a mismatch is refused naming the tensor. */
bora_status bora_ckpt_load_model(g_store *s, const char *dir);
/* Read optimizer state from dir/optimizer.safetensors, as strictly. */
bora_status bora_ckpt_load_optimizer(g_store *s, const char *const *slots, const char *dir);
/* dir/trainer.json's text (malloc'ed, NUL-terminated). */
bora_status bora_ckpt_read_trainer(const char *dir, char **json);

/* Make a directory and its parents. */
bora_status bora_mkdir_p(const char *path);

#endif
