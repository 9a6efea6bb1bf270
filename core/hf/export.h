/* core/hf/export.h — a model's weights and configuration written as a Hugging Face folder, the
 * one transformers' from_pretrained, vLLM and llama.cpp's converter read: config.json,
 * generation_config.json, model.safetensors (or shards and model.safetensors.index.json) and the
 * tokenizer's files. The folder appears whole or not at all: everything is written to a hidden
 * sibling directory, fsynced, then renamed into place. */
#ifndef BORA_CORE_HF_EXPORT_H
#define BORA_CORE_HF_EXPORT_H

#include "../ckpt/safetensors.h"

#include <stddef.h>
#include <stdint.h>

/* As transformers' save_pretrained: max_shard_size="5GB". */
#define BORA_HF_DEFAULT_SHARD_BYTES 5000000000ull

typedef struct bora_hf_export {
    const char *out;          /* the folder to make */
    const char *checkpoint;   /* what is exported: out may not be or hold it (NULL: none) */
    const char *tokenizer;    /* the tokenizer to write beside the weights (NULL: none) */
    int tokenizer_required;   /* 1: an unreadable tokenizer is an error; 0: a warning */
    int32_t dtype;            /* BORA_DTYPE_F32, BF16 or F16 */
    uint64_t max_shard_bytes; /* a shard holds at most this much, but for a larger tensor alone */
    int force;                /* replace an existing out that an export wrote */
} bora_hf_export;

/* path without trailing slashes ("out/" is "out", "/" stays), in buf when it had any; a path
 * too long for buf is returned as it is. */
const char *bora_hf_trim_slashes(const char *path, char *buf, size_t cap);
/* "f32", "bf16" or "f16". */
bora_status bora_hf_parse_dtype(const char *text, int32_t *dtype);
/* A size as transformers reads max_shard_size: bytes ("1000000"), or a number with KB, MB, GB
 * (powers of 1000) or KiB, MiB, GiB (powers of 1024), case-insensitive; above 0. */
bora_status bora_hf_parse_size(const char *text, uint64_t *bytes);
/* Whether out may be written: refused when it is a file, when its parent directory is missing,
 * when it is or holds checkpoint or tokenizer (either may be NULL; compared resolved), or when it
 * is a non-empty directory and force is 0 or it is not a folder an export wrote (config.json and
 * *.safetensors, files only, no trainer.json). What an export killed part way left beside out
 * is cleaned first (its earlier folder put back when out is missing). */
bora_status bora_hf_check_out(const char *out, int force, const char *checkpoint,
                              const char *tokenizer);

/* Write the folder: hf_config (the model's config.json object, as its hf_config gives it) is
 * completed with torch_dtype, use_cache and the tokenizer's bos/eos ids; the tensors (f32 or
 * bf16, in the order given) are converted to o->dtype, rounding to nearest even, and a value that
 * would overflow it is refused naming the tensor. One line per file of weights goes to the log. */
bora_status bora_hf_write(const bora_hf_export *o, const char *hf_config,
                          const bora_st_entry *tensors, size_t n);

#endif
