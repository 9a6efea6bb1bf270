/* plugins/backends/cpu/cpu.h — what the CPU backend's files share. */
#ifndef BORA_CPU_H
#define BORA_CPU_H

#include "simd.h"

#include <bora/backend.h>

typedef struct cpu_onednn cpu_onednn; /* oneDNN's engine, stream and kept primitives */

struct bora_backend {
    const bora_host *h;
    int num_threads;
    const cpu_simd *simd; /* the vectorised loops for this CPU */
    cpu_onednn *dnnl;
    int bf16_onednn;    /* bf16 matmuls on oneDNN's primitive, else widened for sgemm */
    char bf16_impl[64]; /* oneDNN's implementation, or "widened to sgemm" */
    char bf16_why[96];  /* what the rule in matmul_bf16.c saw */
    int bf16_told;      /* the widening has been reported */
    int adamw_told;     /* AdamW's one-pass update reported: 1 with decay, 2 without */
    void *scratch;      /* cpu_scratch's buffer, kept between kernels */
    size_t scratch_bytes;
};

/* A buffer of at least bytes for one kernel's use until the next call (kernels run one at a
 * time), kept and grown as needed; NULL out of memory. */
static inline void *cpu_scratch(bora_backend *b, size_t bytes)
{
    if (bytes > b->scratch_bytes) {
        void *p = b->h->alloc(b->h, bytes, 64);
        if (!p)
            return NULL;
        if (b->scratch)
            b->h->free(b->h, b->scratch);
        b->scratch = p;
        b->scratch_bytes = bytes;
    }
    return b->scratch;
}

/* Rows of t: the product of every axis but the last. */
static inline int64_t cpu_rows_of(const bora_tensor_desc *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim - 1; i++)
        n *= t->dims[i];
    return n;
}

/* rope.c: BORA_OP_ROPE over (x, cos, sin, [offset i32]) -> y. */
bora_status cpu_rope_f32(bora_backend *b, const bora_kernel_args *a);
bora_status cpu_rope_f64(bora_backend *b, const bora_kernel_args *a);

/* sample.c: BORA_OP_SAMPLE over (logits (R, V), counter i64 (2)) -> tokens i32 (R). */
bora_status cpu_sample_f32(bora_backend *b, const bora_kernel_args *a);
bora_status cpu_sample_f64(bora_backend *b, const bora_kernel_args *a);

/* moe.c: BORA_OP_TOP_K, ARGSORT, BINCOUNT, GROUPED_MATMUL and GROUPED_MATMUL_GRAD over these
 * dtypes (inputs, then outputs), or NULL. */
bora_kernel_fn cpu_moe_kernel(uint32_t op, const int32_t *dt, uint32_t n);
/* conv1d.c: BORA_OP_CONV1D and its two gradients over these dtypes (inputs, then outputs), or
 * NULL. */
bora_kernel_fn cpu_conv1d_kernel(uint32_t op, const int32_t *dt, uint32_t n);
/* kernels.c: C = A B over (1, M, K) x (1, K, N) descs on MATMUL's path for A's dtype (f32, f64,
 * or bf16 operands widened for sgemm into an f32 C), with the same blocks whatever the threads. */
bora_status cpu_matmul_one(bora_backend *bk, const bora_tensor_desc *A, const bora_tensor_desc *B,
                           const bora_tensor_desc *C);

/* matmul_bf16.c: the rule for bf16 matmuls and oneDNN's engine (create), its teardown, and a
 * bf16 product on oneDNN's primitive (0 done, 1 not taken: widen, negative: an error). */
bora_status cpu_bf16_setup(bora_backend *b);
void cpu_bf16_teardown(bora_backend *b);
int cpu_matmul_bf16_onednn(bora_backend *b, const bora_kernel_args *a);
/* A bf16 × bf16 -> f32 product for oneDNN's matmul primitive, C = alpha · A B (+ C with
 * CPU_MM_ADD, + a bias row of N f32 with CPU_MM_BIAS): batch products of M × K by K × N (batch 0:
 * one, 2-d), each operand's strides {batch, row, column} in elements (sa[0], sb[0], sc[0] unused
 * when batch is 0). CPU_MM_THREADED: run from several threads at once, each on its own
 * cpu_mm_stream (which holds the scratchpad). Keys are compared as bytes (the struct has no
 * padding). */
enum { CPU_MM_ADD = 1, CPU_MM_THREADED = 2, CPU_MM_BIAS = 4 };
typedef struct cpu_mm_key {
    int64_t batch, M, N, K;
    int64_t sa[3], sb[3], sc[3];
    float alpha;
    int32_t flags;
} cpu_mm_key;
_Static_assert(sizeof(cpu_mm_key) == 13 * sizeof(int64_t) + 8, "cpu_mm_key has padding");
typedef struct cpu_mm cpu_mm;               /* a kept primitive */
typedef struct cpu_mm_stream cpu_mm_stream; /* a oneDNN stream, one per thread that runs them */
/* The kept primitive for key, made now if new (logged, with building saying when); NULL where
 * bf16 matmuls are widened, oneDNN has no fast implementation, or out of memory. Not thread
 * safe: make every key before threads look them up. */
const cpu_mm *cpu_mm_get(bora_backend *b, const cpu_mm_key *key, int building);
cpu_mm_stream *cpu_mm_stream_new(bora_backend *b);
void cpu_mm_stream_free(cpu_mm_stream *s);
/* Run m over a (bf16), b (bf16) and c (f32) on the calling thread's stream: 0, or a status. */
int cpu_mm_run(bora_backend *b, cpu_mm_stream *s, const cpu_mm *m, const void *a, const void *bm,
               float *c);
/* bora_backend_ops.prepare: a bf16 product's oneDNN primitive made at build time. */
bora_status cpu_prepare(bora_backend *b, const bora_kernel_args *a);

bora_kernel_fn cpu_kernel(bora_backend *b, uint32_t op, const int32_t *dtypes, uint32_t n);

#endif
