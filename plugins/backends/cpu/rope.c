/* plugins/backends/cpu/rope.c — BORA_OP_ROPE: rotary position embeddings over any strides, f32
 * and f64. Each product is rounded to the element type and then the two are added, never
 * contracted into one fused multiply-add (this file is built with -ffp-contract=off): the bits are
 * those of the host's decomposition, MUL (x, cos), NEG, MUL (rot, sin), ADD. */
#include "cpu.h"

#include <bora/graph.h>

/* The element offset of x's row at index idx (every axis but the head dim). */
static int64_t row_offset(const bora_tensor_desc *t, const int64_t *idx, int skip)
{
    int64_t off = 0;
    for (int i = 0; i < t->ndim; i++)
        if (i != skip)
            off += idx[i] * t->strides[i];
    return off;
}

/* Steps idx to the next row (odometer over every axis but skip); 0 past the last. */
static int next_row(const bora_tensor_desc *t, int64_t *idx, int skip)
{
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (i == skip)
            continue;
        if (++idx[i] < t->dims[i])
            return 1;
        idx[i] = 0;
    }
    return 0;
}

#define ROPE_KERNEL(T, NAME)                                                                       \
    bora_status NAME(bora_backend *b, const bora_kernel_args *a)                                   \
    {                                                                                              \
        const bora_opt_rope *o = a->options;                                                       \
        const bora_tensor_desc *x = &a->inputs[0], *y = &a->outputs[0];                            \
        const bora_tensor_desc *tc = &a->inputs[1], *ts = &a->inputs[2];                           \
        int pa = o->position_axis, da = o->dim_axis;                                               \
        int64_t D = o->rotary_dims, H = x->dims[da], half = D / 2;                                 \
        int64_t P = tc->dims[0];                                                                   \
        int64_t base = o->offset;                                                                  \
        if (a->n_inputs > 3)                                                                       \
            base += *(const int32_t *)a->inputs[3].data;                                           \
        for (int i = 0; i < x->ndim; i++)                                                          \
            if (x->dims[i] == 0)                                                                   \
                return BORA_OK;                                                                    \
        if (base < 0 || base + x->dims[pa] > P)                                                    \
            return b->h->fail(b->h, BORA_ERR_INVALID,                                              \
                              "rope: positions %lld..%lld are past the table's %lld",              \
                              (long long)base, (long long)(base + x->dims[pa] - 1), (long long)P); \
        const T *xp = x->data, *cp = tc->data, *sp = ts->data;                                     \
        T *yp = y->data;                                                                           \
        T sign = o->inverse ? (T)-1 : (T)1;                                                        \
        int64_t sx = x->strides[da], sy = y->strides[da];                                          \
        int64_t idx[BORA_MAX_DIMS] = {0};                                                          \
        do {                                                                                       \
            const T *xr = xp + row_offset(x, idx, da);                                             \
            T *yr = yp + row_offset(y, idx, da);                                                   \
            int64_t p = base + idx[pa];                                                            \
            const T *c = cp + p * tc->strides[0], *s = sp + p * ts->strides[0];                    \
            for (int64_t d = 0; d < D; d++) {                                                      \
                /* the dim d pairs with, and the sign it enters rot(x) with */                     \
                int64_t e;                                                                         \
                T r;                                                                               \
                if (o->layout == BORA_ROPE_INTERLEAVED)                                            \
                    e = d ^ 1, r = d & 1 ? xr[e * sx] : -xr[e * sx];                               \
                else                                                                               \
                    e = d < half ? d + half : d - half, r = d < half ? -xr[e * sx] : xr[e * sx];   \
                T u = xr[d * sx] * c[d * tc->strides[1]];                                          \
                T v = r * (sign * s[d * ts->strides[1]]);                                          \
                yr[d * sy] = u + v;                                                                \
            }                                                                                      \
            for (int64_t d = D; d < H; d++)                                                        \
                yr[d * sy] = xr[d * sx];                                                           \
        } while (next_row(x, idx, da));                                                            \
        return BORA_OK;                                                                            \
    }

ROPE_KERNEL(float, cpu_rope_f32)
ROPE_KERNEL(double, cpu_rope_f64)
