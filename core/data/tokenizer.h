/* core/data/tokenizer.h — Hugging Face tokenizers in C, exact to the id.
 *
 * Reads a tokenizer.json (optionally gzip-compressed), a folder holding one, or GPT-2's
 * original encoder.json + vocab.bpe (or vocab.json + merges.txt) pair. Supported: the BPE model
 * (byte-level as GPT-2 and Llama 3, including ignore_merges; SentencePiece-style with byte
 * fallback and fused unknowns as Mistral and Gemma), the normalizers, pre-tokenizers, added
 * tokens, post-processor template and decoders those files use. Anything else is refused with
 * a message naming what is unsupported. */
#ifndef BORA_CORE_TOKENIZER_H
#define BORA_CORE_TOKENIZER_H

#include <bora/plugin.h>
#include <stddef.h>
#include <stdint.h>

typedef struct bora_tokenizer bora_tokenizer;

/* A growable array of token ids. */
typedef struct bora_ids {
    int32_t *ids;
    size_t n, cap;
} bora_ids;

bora_status bora_ids_push(bora_ids *v, int32_t id);
void bora_ids_free(bora_ids *v);

/* Load from a path: tokenizer.json[.gz], a folder with tokenizer.json[.gz], encoder.json or
 * vocab.json (with vocab.bpe / merges.txt beside it). The error names the file and the fault. */
bora_status bora_tokenizer_load(const char *path, bora_tokenizer **out);
/* The same from tokenizer.json text held in memory (name is used in messages). */
bora_status bora_tokenizer_load_json(const char *name, const char *json, size_t len,
                                     bora_tokenizer **out);
void bora_tokenizer_free(bora_tokenizer *t);

/* Append the ids of UTF-8 text to out. With add_special, the post-processor's template adds its
 * special tokens (a BOS); added tokens in the text are recognised either way, as Hugging Face
 * does. Invalid UTF-8 is an error. */
bora_status bora_tokenizer_encode(bora_tokenizer *t, const char *text, size_t len, int add_special,
                                  bora_ids *out);

/* Text of ids, through the tokenizer's decoder (malloc'ed, NUL-terminated, *len bytes). */
bora_status bora_tokenizer_decode(const bora_tokenizer *t, const int32_t *ids, size_t n,
                                  char **text, size_t *len);

/* Ids are 0..vocab_size-1 (added tokens included). */
size_t bora_tokenizer_vocab_size(const bora_tokenizer *t);
/* How many UTF-8 bytes token id stands for in decoded text (for bits-per-byte), 0 for special
 * tokens and unknown ids. */
uint32_t bora_tokenizer_token_bytes(const bora_tokenizer *t, int32_t id);
/* The id of a token's text, or -1. */
int32_t bora_tokenizer_token_id(const bora_tokenizer *t, const char *token);
/* A stable hash of everything that decides the ids (for cache ledgers). */
uint64_t bora_tokenizer_hash(const bora_tokenizer *t);

#endif
