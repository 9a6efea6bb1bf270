/* plugins/backends/cpu/sample.c — BORA_OP_SAMPLE: a token per row of logits (R, V), f32 or f64,
 * drawn from softmax(logits) by inverting its cumulative distribution at a Philox uniform
 * (sdk/bora/graph.h states the contract). Rows are split among the OpenMP threads; each row is
 * read in order and summed in f64 by one thread, and its uniform depends only on its own counter,
 * so the tokens are the same at any thread count and under any split of the batch. */
#include "cpu.h"

#include <bora/graph.h>
#include <bora/philox.h>

#include <math.h>

/* The token of one row (n logits x[0], x[stride], ..) at uniform u: the first v whose cumulative
 * weight exceeds u · total, the weights exp(x[v] - max x) in f64; -1 for a non-finite logit. */
#define DRAW_ROW(T, NAME)                                                                    \
    static int32_t NAME(const T *x, int64_t stride, int64_t n, double u)                     \
    {                                                                                        \
        double top = -INFINITY;                                                              \
        for (int64_t v = 0; v < n; v++) {                                                    \
            double l = (double)x[v * stride];                                                \
            if (!isfinite(l))                                                                \
                return -1;                                                                   \
            top = l > top ? l : top;                                                         \
        }                                                                                    \
        double total = 0;                                                                    \
        for (int64_t v = 0; v < n; v++)                                                      \
            total += exp((double)x[v * stride] - top);                                       \
        if (!(total > 0))                                                                    \
            return -1;                                                                       \
        double target = u * total, sum = 0;                                                  \
        int32_t last = -1; /* the last positive weight, should rounding leave no sum past */ \
        for (int64_t v = 0; v < n; v++) {                                                    \
            double w = exp((double)x[v * stride] - top);                                     \
            sum += w;                                                                        \
            if (sum > target)                                                                \
                return (int32_t)v;                                                           \
            if (w > 0)                                                                       \
                last = (int32_t)v;                                                           \
        }                                                                                    \
        return last;                                                                         \
    }

DRAW_ROW(float, draw_row_f32)
DRAW_ROW(double, draw_row_f64)

static bora_status sample_rows(bora_backend *b, const bora_kernel_args *a, int f64)
{
    const bora_opt_sample *o = a->options;
    const bora_tensor_desc *x = &a->inputs[0], *c = &a->inputs[1], *y = &a->outputs[0];
    int64_t R = x->dims[0], V = x->dims[1];
    const int64_t *cp = c->data;
    int64_t step = cp[0], first = cp[c->strides[0]];
    if (step < 0 || step > (int64_t)UINT32_MAX || first < 0 || first > INT64_MAX - R)
        return b->h->fail(b->h, BORA_ERR_INVALID,
                          "sample: counter (step %lld, first row %lld) is outside 0..2^32-1 "
                          "and 0..2^63-1 less the %lld rows",
                          (long long)step, (long long)first, (long long)R);
    int32_t *yp = y->data;
    uint32_t stream = (uint32_t)o->stream;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < R; r++) {
        /* Philox's counter words: the row's index in the step (low, high), stream, step */
        uint64_t row = (uint64_t)(first + r);
        double u = bora_philox_uniform(o->seed, (uint32_t)row, (uint32_t)(row >> 32), stream,
                                       (uint32_t)step);
        yp[r * y->strides[0]] =
            f64 ? draw_row_f64((const double *)x->data + r * x->strides[0], x->strides[1], V, u)
                : draw_row_f32((const float *)x->data + r * x->strides[0], x->strides[1], V, u);
    }
    return BORA_OK;
}

bora_status cpu_sample_f32(bora_backend *b, const bora_kernel_args *a)
{
    return sample_rows(b, a, 0);
}

bora_status cpu_sample_f64(bora_backend *b, const bora_kernel_args *a)
{
    return sample_rows(b, a, 1);
}
