/* tests/fuzz/fuzz_safetensors.c — libFuzzer target for the safetensors reader and the checks a
 * checkpoint load makes: the input is a whole file; when it is accepted, every tensor is read
 * back and checked as a load checks it — against its own digest (which must pass exactly when
 * the tensor passes with no digest: only a non-finite value may fail it), against a digest the
 * input gives as metadata "digest" (any text), and against a digest with one digit changed
 * (which must fail). */
#include "ckpt/checkpoint.h"
#include "ckpt/safetensors.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    bora_safetensors *st;
    if (bora_st_open_memory("fuzz.safetensors", data, size, &st) != BORA_OK)
        return 0;
    const char *given = bora_st_meta(st, "digest");
    for (size_t i = 0; i < st->n_tensors; i++) {
        const bora_st_tensor *t = &st->tensors[i];
        size_t n = (size_t)(t->end - t->begin);
        void *buf = malloc(n ? n : 1);
        if (buf && bora_st_read(st, t, buf, n) == BORA_OK) {
            char own[BORA_CKPT_DIGEST_LEN];
            bora_ckpt_digest(buf, n, own);
            bora_status plain = bora_ckpt_check_tensor(st->path, t->name, t->dtype, buf, n, NULL);
            if (bora_ckpt_check_tensor(st->path, t->name, t->dtype, buf, n, own) != plain)
                abort(); /* a tensor's own digest must match it */
            own[BORA_CKPT_DIGEST_LEN - 2] = own[BORA_CKPT_DIGEST_LEN - 2] == '0' ? '1' : '0';
            if (bora_ckpt_check_tensor(st->path, t->name, t->dtype, buf, n, own) == BORA_OK)
                abort(); /* another digest must not */
            if (given)
                bora_ckpt_check_tensor(st->path, t->name, t->dtype, buf, n, given);
        }
        free(buf);
    }
    bora_st_close(st);
    return 0;
}
