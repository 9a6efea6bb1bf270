/* plugins/backends/cpu/cpu.h — what the CPU backend's files share. */
#ifndef BORA_CPU_H
#define BORA_CPU_H

#include "simd.h"

#include <bora/backend.h>

struct bora_backend {
    const bora_host *h;
    int num_threads;
    const cpu_simd *simd; /* the vectorised loops for this CPU */
};

/* Rows of t: the product of every axis but the last. */
static inline int64_t cpu_rows_of(const bora_tensor_desc *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim - 1; i++)
        n *= t->dims[i];
    return n;
}

bora_kernel_fn cpu_kernel(bora_backend *b, uint32_t op, const int32_t *dtypes, uint32_t n);

#endif
