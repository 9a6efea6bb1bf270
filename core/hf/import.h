/* core/hf/import.h — reading a Hugging Face folder (config.json, model.safetensors or shards
 * with model.safetensors.index.json, tokenizer.json): the model section its config.json
 * describes, through the model's table of config.json keys (bora_model_ops.hf_keys), and its
 * weights into a store's parameters. Used by bora import, bora eval --hf, bora generate --hf and
 * trainer.initialize_from_hf. */
#ifndef BORA_CORE_HF_IMPORT_H
#define BORA_CORE_HF_IMPORT_H

#include "../config/config.h"
#include "../graph/graph.h"
#include "../plugin/registry.h"

/* The model section hf_dir/config.json describes, as JSON text {"type": ..., "key": value, ...}
 * (malloc'ed). A key no rule of the model's table covers, a value a rule refuses, an unknown
 * model_type, or a model without a table is refused naming the file and key. Notes (a dropout
 * bora does not apply) are printed. */
bora_status bora_hf_model_section(const bora_registry *reg, const char *hf_dir, char **json);

/* Put the folder's model into cfg: its model section merged into model: (a key the
 * configuration gives must have the folder's value; each that differs is reported at its
 * position), and data.tokenizer set to the folder when it holds a tokenizer (tokenizer.json or
 * tokenizer.json.gz, or GPT-2's vocab.json + merges.txt or encoder.json + vocab.bpe) and the
 * configuration names none. Problems are cfg's diagnostics; BORA_ERR_CONFIG when any. */
bora_status bora_hf_apply_config(bora_cfg *cfg, const bora_registry *reg, const char *hf_dir);

/* Copy the folder's weights into the store's parameters (materialized): model.safetensors, or
 * the shards model.safetensors.index.json lists, one at a time and memory-mapped, F32, BF16 or
 * F16 converted to each parameter's F32. Every parameter must be there once with its shape, and
 * nothing else (transformers' non-parameter buffers aside); anything else is refused naming the
 * file and tensor. Prints a line per shard unless quiet. */
bora_status bora_hf_load_weights(g_store *s, const char *hf_dir, const char *model, int quiet);

#endif
