/* core/ckpt/safetensors.h — the safetensors format, strictly: an 8-byte little-endian header
 * length, a JSON header naming each tensor's dtype, shape and [begin, end) byte range, then the
 * data. A file is refused, with the reason, unless the header is a JSON object with string
 * metadata, every dtype is known, every byte range matches its shape, and the ranges tile the
 * data exactly (no gaps, no overlaps, nothing after the last). */
#ifndef BORA_CORE_SAFETENSORS_H
#define BORA_CORE_SAFETENSORS_H

#include <bora/graph.h>
#include <stddef.h>
#include <stdint.h>

#define BORA_ST_MAX_DIMS 8
#define BORA_ST_MAX_HEADER (100u << 20) /* as Hugging Face's reader */

typedef struct bora_st_tensor {
    char *name;
    int32_t dtype; /* a bora_dtype; BOOL, I8, I16 and U8 read as U8-sized data */
    char st_dtype[12];
    int32_t ndim;
    int64_t shape[BORA_ST_MAX_DIMS];
    uint64_t begin, end; /* byte range within the data */
} bora_st_tensor;

typedef struct bora_safetensors {
    char *path;
    int fd;              /* -1 for a file parsed from memory */
    const char *memory;  /* the whole file, when parsed from memory */
    uint64_t data_start; /* file offset of the data */
    uint64_t data_len;
    bora_st_tensor *tensors; /* in header order */
    size_t n_tensors;
    char **meta_keys, **meta_values;
    size_t n_meta;
} bora_safetensors;

/* Open and check a file; tensors are read on demand. */
bora_status bora_st_open(const char *path, bora_safetensors **out);
/* Check a whole file held in memory (name is used in messages). */
bora_status bora_st_open_memory(const char *name, const void *data, size_t len,
                                bora_safetensors **out);
void bora_st_close(bora_safetensors *st);

const bora_st_tensor *bora_st_find(const bora_safetensors *st, const char *name);
/* Copy a tensor's bytes into dst, which holds exactly its size. */
bora_status bora_st_read(const bora_safetensors *st, const bora_st_tensor *t, void *dst,
                         size_t nbytes);
/* A metadata value, or NULL. */
const char *bora_st_meta(const bora_safetensors *st, const char *key);

/* One tensor to write. */
typedef struct bora_st_entry {
    const char *name;
    int32_t dtype;
    int32_t ndim;
    const int64_t *shape;
    const void *data;
} bora_st_entry;

/* Write entries in order, with metadata {"format": "pt"} plus the given pairs. The file is
 * written and fsynced at path; atomic replacement is the caller's (write to a temporary
 * directory, then rename). */
bora_status bora_st_write(const char *path, const bora_st_entry *entries, size_t n,
                          const char *const *meta_kv, size_t n_meta);

/* "F32" and friends. */
const char *bora_st_dtype_name(int32_t dtype);

#endif
