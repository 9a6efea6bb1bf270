/* plugins/backends/cpu/conv1d.c — a 1-d convolution and its gradients (ABI 1.15; sdk/bora/graph.h
 * states each contract) as im2col and the backend's matmul path: the windows of x laid out as
 * a matrix (in·kernel, J) per batch row, multiplied by w seen as (out, in·kernel) on sgemm in
 * blocks that depend on the shape alone (f64 naive, bf16 widened for sgemm, accumulating in f32).
 * The input gradient is wᵀ·dy per batch row folded back onto x's positions (col2im, each
 * position's taps added in kernel order); the weight gradient one product of dy (out, B·J) by the
 * windows (B·J, in·kernel). Batch rows go in chunks whose size depends on the shape alone, so a
 * result is the same bits at any thread count. */
#include "cpu.h"

#include <bora/graph.h>

#include <string.h>

/* At most this many bytes of windows at a time (batch rows per chunk: at least one). */
#define CONV_CHUNK_BYTES ((int64_t)64 << 20)

typedef struct conv_shape {
    int64_t B, C, L, O, K, J, s, p;
} conv_shape;

/* Batch rows per chunk for windows of `row` elements of `elem` bytes per batch row. */
static int64_t chunk_rows(const conv_shape *c, int64_t row, size_t elem)
{
    int64_t n = CONV_CHUNK_BYTES / (row * (int64_t)elem);
    return n < 1 ? 1 : n > c->B ? c->B : n;
}

/* x's element (b, c, i) as raw bits of size elem, or zero outside 0 <= i < L. */
#define COPY_TAPS(TYPE)                                                                    \
    static void taps_##TYPE(TYPE *dst, int64_t step, const bora_tensor_desc *x, int64_t b, \
                            int64_t ch, int64_t k, const conv_shape *c)                    \
    {                                                                                      \
        const TYPE *row = (const TYPE *)x->data + b * x->strides[0] + ch * x->strides[1];  \
        int64_t xs = x->strides[2];                                                        \
        for (int64_t j = 0; j < c->J; j++) {                                               \
            int64_t i = j * c->s + k - c->p;                                               \
            dst[j * step] = i >= 0 && i < c->L ? row[i * xs] : (TYPE)0;                    \
        }                                                                                  \
    }
COPY_TAPS(uint16_t)
COPY_TAPS(float)
COPY_TAPS(double)
#undef COPY_TAPS

/* Window element (c·K + k, j) of batch row b, for every j: J values at dst, step apart. */
static void taps(void *dst, int64_t step, const bora_tensor_desc *x, int64_t b, int64_t ch,
                 int64_t k, const conv_shape *c)
{
    switch (bora_dtype_size(x->dtype)) {
    case 2: taps_uint16_t(dst, step, x, b, ch, k, c); break;
    case 4: taps_float(dst, step, x, b, ch, k, c); break;
    default: taps_double(dst, step, x, b, ch, k, c); break;
    }
}

static conv_shape shape_of(const bora_kernel_args *a, const bora_tensor_desc *x,
                           const bora_tensor_desc *w, int64_t J)
{
    const bora_opt_conv1d *o = a->options;
    return (conv_shape){x->dims[0], x->dims[1], x->dims[2], w->dims[0],
                        w->dims[2], J,          o->stride,  o->padding};
}

/* w (O, C, K) as the matrix (O, C·K) with unit column stride, or 0 when its (C, K) do not
 * merge so. */
static int weight_matrix(const bora_tensor_desc *w, int64_t *s_row)
{
    int64_t C = w->dims[1], K = w->dims[2];
    *s_row = w->strides[0];
    if (K > 1)
        return w->strides[2] == 1 && (C == 1 || w->strides[1] == K);
    return C == 1 || w->strides[1] == 1;
}

static bora_status no_memory(bora_backend *b)
{
    return b->h->fail(b->h, BORA_ERR_NOMEM, "conv1d: out of memory for the windows' scratch");
}

static bora_status bad_layout(bora_backend *b, const char *what)
{
    return b->h->fail(b->h, BORA_ERR_INVALID, "conv1d: %s is not laid out as the host promises",
                      what);
}

/* x (B, C, L), w (O, C, K) -> y (B, O, J): per chunk of batch rows, the windows (n, C·K, J),
 * then y = w (O, C·K) · windows, one product per batch row. */
static bora_status conv1d(bora_backend *bk, const bora_kernel_args *a)
{
    const bora_tensor_desc *x = &a->inputs[0], *w = &a->inputs[1], *y = &a->outputs[0];
    conv_shape c = shape_of(a, x, w, y->dims[2]);
    int64_t ws, CK = c.C * c.K;
    if (!weight_matrix(w, &ws))
        return bad_layout(bk, "w");
    size_t e = bora_dtype_size(x->dtype);
    int64_t nc = chunk_rows(&c, CK * c.J, e);
    char *col = cpu_scratch(bk, (size_t)(nc * CK * c.J) * e);
    if (!col)
        return no_memory(bk);
    for (int64_t b0 = 0; b0 < c.B; b0 += nc) {
        int64_t n = c.B - b0 < nc ? c.B - b0 : nc;
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < n * c.C; r++)
            for (int64_t k = 0; k < c.K; k++)
                taps(col + (size_t)(((r / c.C) * CK + (r % c.C) * c.K + k) * c.J) * e, 1, x,
                     b0 + r / c.C, r % c.C, k, &c);
        bora_tensor_desc A = {w->data, w->dtype, 3, {n, c.O, CK}, {0, ws, 1}};
        bora_tensor_desc Bm = {col, x->dtype, 3, {n, CK, c.J}, {CK * c.J, c.J, 1}};
        bora_tensor_desc C = *y;
        C.dims[0] = n;
        C.data = (char *)y->data + (size_t)(b0 * y->strides[0]) * bora_dtype_size(y->dtype);
        bora_status st = cpu_matmul_one(bk, &A, &Bm, &C);
        if (st != BORA_OK)
            return st;
    }
    return BORA_OK;
}

/* (dy (B, O, J), w (O, C, K)) -> dx (B, C, L): per chunk, the windows' gradient wᵀ·dy
 * (n, C·K, J) in dx's dtype, each folded back onto x's positions: dx[b, c, j·s + k - p] gets
 * window (c·K + k, j), the taps of a position added in order k = 0, 1, .. */
static bora_status conv1d_grad_input(bora_backend *bk, const bora_kernel_args *a)
{
    const bora_tensor_desc *dy = &a->inputs[0], *w = &a->inputs[1], *dx = &a->outputs[0];
    conv_shape c = shape_of(a, dx, w, dy->dims[2]);
    int64_t ws, CK = c.C * c.K;
    if (!weight_matrix(w, &ws))
        return bad_layout(bk, "w");
    int f64 = dx->dtype == BORA_DTYPE_F64;
    size_t e = bora_dtype_size(dx->dtype);
    int64_t nc = chunk_rows(&c, CK * c.J, e);
    char *col = cpu_scratch(bk, (size_t)(nc * CK * c.J) * e);
    if (!col)
        return no_memory(bk);
    for (int64_t b0 = 0; b0 < c.B; b0 += nc) {
        int64_t n = c.B - b0 < nc ? c.B - b0 : nc;
        bora_tensor_desc A = {w->data, w->dtype, 3, {n, CK, c.O}, {0, 1, ws}};
        bora_tensor_desc Bm = *dy;
        Bm.dims[0] = n;
        Bm.data = (char *)dy->data + (size_t)(b0 * dy->strides[0]) * bora_dtype_size(dy->dtype);
        bora_tensor_desc C = {col, dx->dtype, 3, {n, CK, c.J}, {CK * c.J, c.J, 1}};
        bora_status st = cpu_matmul_one(bk, &A, &Bm, &C);
        if (st != BORA_OK)
            return st;
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < n * c.C; r++) {
            int64_t bi = r / c.C, ch = r % c.C, xs = dx->strides[2];
            int64_t at = (b0 + bi) * dx->strides[0] + ch * dx->strides[1];
            const char *win = col + (size_t)((bi * CK + ch * c.K) * c.J) * e;
            for (int64_t i = 0; i < c.L; i++) {
                if (f64)
                    ((double *)dx->data)[at + i * xs] = 0;
                else
                    ((float *)dx->data)[at + i * xs] = 0;
            }
            for (int64_t k = 0; k < c.K; k++)
                for (int64_t j = 0; j < c.J; j++) {
                    int64_t i = j * c.s + k - c.p;
                    if (i < 0 || i >= c.L)
                        continue;
                    if (f64)
                        ((double *)dx->data)[at + i * xs] += ((const double *)win)[k * c.J + j];
                    else
                        ((float *)dx->data)[at + i * xs] += ((const float *)win)[k * c.J + j];
                }
        }
    }
    return BORA_OK;
}

/* (x (B, C, L), dy (B, O, J)) -> dw (O, C, K) = Σ over chunks of dy (O, n·J) · windows (n·J,
 * C·K): the first chunk written, the others added in order. */
static bora_status conv1d_grad_weight(bora_backend *bk, const bora_kernel_args *a)
{
    const bora_tensor_desc *x = &a->inputs[0], *dy = &a->inputs[1], *dw = &a->outputs[0];
    conv_shape c = shape_of(a, x, dw, dy->dims[2]);
    int64_t ws, CK = c.C * c.K;
    if (!weight_matrix(dw, &ws))
        return bad_layout(bk, "dw");
    size_t e = bora_dtype_size(x->dtype), eo = bora_dtype_size(dw->dtype);
    int64_t nc = chunk_rows(&c, (CK + c.O) * c.J, e);
    size_t col_bytes = ((size_t)(nc * c.J * CK) * e + 63) / 64 * 64;
    size_t dyt_bytes = ((size_t)(c.O * nc * c.J) * e + 63) / 64 * 64;
    size_t tmp_bytes = nc < c.B ? (size_t)(c.O * CK) * eo : 0;
    char *col = cpu_scratch(bk, col_bytes + dyt_bytes + tmp_bytes);
    if (!col)
        return no_memory(bk);
    char *dyt = col + col_bytes, *tmp = dyt + dyt_bytes;
    for (int64_t b0 = 0; b0 < c.B; b0 += nc) {
        int64_t n = c.B - b0 < nc ? c.B - b0 : nc;
        /* windows (n·J, C·K): row b·J + j holds window j of batch row b */
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < n * c.C; r++)
            for (int64_t k = 0; k < c.K; k++)
                taps(col + (size_t)((r / c.C) * c.J * CK + (r % c.C) * c.K + k) * e, CK, x,
                     b0 + r / c.C, r % c.C, k, &c);
                /* dy as (O, n·J) */
#pragma omp parallel for schedule(static)
        for (int64_t o = 0; o < c.O; o++)
            for (int64_t bi = 0; bi < n; bi++) {
                const char *src = (const char *)dy->data +
                                  (size_t)((b0 + bi) * dy->strides[0] + o * dy->strides[1]) * e;
                char *d = dyt + (size_t)((o * n + bi) * c.J) * e;
                if (dy->strides[2] == 1) {
                    memcpy(d, src, (size_t)c.J * e);
                    continue;
                }
                for (int64_t j = 0; j < c.J; j++)
                    memcpy(d + (size_t)j * e, src + (size_t)(j * dy->strides[2]) * e, e);
            }
        bora_tensor_desc A = {dyt, dy->dtype, 3, {1, c.O, n * c.J}, {0, n * c.J, 1}};
        bora_tensor_desc Bm = {col, x->dtype, 3, {1, n * c.J, CK}, {0, CK, 1}};
        bora_tensor_desc C = {
            b0 ? tmp : dw->data, dw->dtype, 3, {1, c.O, CK}, {0, b0 ? CK : ws, 1}};
        bora_status st = cpu_matmul_one(bk, &A, &Bm, &C);
        if (st != BORA_OK)
            return st;
        if (!b0)
            continue;
#pragma omp parallel for schedule(static)
        for (int64_t o = 0; o < c.O; o++)
            for (int64_t i = 0; i < CK; i++) {
                if (eo == 8)
                    ((double *)dw->data)[o * ws + i] += ((const double *)tmp)[o * CK + i];
                else
                    ((float *)dw->data)[o * ws + i] += ((const float *)tmp)[o * CK + i];
            }
    }
    return BORA_OK;
}

bora_kernel_fn cpu_conv1d_kernel(uint32_t op, const int32_t *dt, uint32_t n)
{
    /* two operands of one dtype, the result in that dtype (bf16 operands: f32) */
    if (n != 3 || dt[0] != dt[1])
        return NULL;
    int ok = dt[0] == BORA_DTYPE_F32 || dt[0] == BORA_DTYPE_F64 ? dt[2] == dt[0]
             : dt[0] == BORA_DTYPE_BF16                         ? dt[2] == BORA_DTYPE_F32
                                                                : 0;
    if (!ok)
        return NULL;
    switch (op) {
    case BORA_OP_CONV1D: return conv1d;
    case BORA_OP_CONV1D_GRAD_INPUT: return conv1d_grad_input;
    case BORA_OP_CONV1D_GRAD_WEIGHT: return conv1d_grad_weight;
    default: return NULL;
    }
}
