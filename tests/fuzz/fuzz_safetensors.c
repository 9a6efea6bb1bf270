/* tests/fuzz/fuzz_safetensors.c — libFuzzer target for the safetensors reader: the input is a
 * whole file; when it is accepted, every tensor is read back. */
#include "ckpt/safetensors.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    bora_safetensors *st;
    if (bora_st_open_memory("fuzz.safetensors", data, size, &st) != BORA_OK)
        return 0;
    for (size_t i = 0; i < st->n_tensors; i++) {
        size_t n = (size_t)(st->tensors[i].end - st->tensors[i].begin);
        void *buf = malloc(n ? n : 1);
        if (buf)
            bora_st_read(st, &st->tensors[i], buf, n);
        free(buf);
    }
    bora_st_close(st);
    return 0;
}
