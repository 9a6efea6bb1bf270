/* plugins/backends/cuda/rows.cu — the modern decoder's row kernels: BORA_OP_RMS_NORM and its
 * gradient, BORA_OP_ROPE, and BORA_OP_XENT_FUSED (the loss and its gradient in one pass), over
 * T = float or double, with the CPU kernels' formulas (plugins/backends/cpu/kernels_t.h, rope.c).
 *
 * Determinism as in kernels.cu: no atomics; a block of ROW_THREADS threads owns a row, each
 * thread sums a fixed stride of it in double, and a fixed tree adds the threads' partials. */
#include "common.cuh"
#include "cuda.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#define ROW_THREADS CU_THREADS
#define ROW_RUN 64      /* rows per run of the weight gradient's column sums */

static int64_t row_count(const bora_tensor_desc *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim - 1; i++)
        n *= t->dims[i];
    return n;
}

/* Offset of row r (all axes but the last) of t. */
__device__ __forceinline__ int64_t row_at(const bora_tensor_desc &t, int64_t r)
{
    int64_t off = 0;
    for (int i = t.ndim - 2; i >= 0; i--) {
        off += (r % t.dims[i]) * t.strides[i];
        r /= t.dims[i];
    }
    return off;
}

/* ---- RMSNorm ------------------------------------------------------------------------------- */

/* y = x · rstd · (w + off) (no weight: x · rstd), rstd = 1 / sqrt(mean(x²) + eps), in double. */
template <typename T>
__global__ void k_rms_norm(bora_tensor_desc x, const T *w, int64_t sw, double off,
                           bora_tensor_desc y, T *rs, double eps)
{
    __shared__ double sh[ROW_THREADS];
    int64_t r = blockIdx.x, n = x.dims[x.ndim - 1];
    int64_t sx = x.strides[x.ndim - 1], sy = y.strides[y.ndim - 1];
    const T *xr = (const T *)x.data + row_at(x, r);
    T *yr = (T *)y.data + row_at(y, r);
    double ss = 0;
    for (int64_t i = threadIdx.x; i < n; i += ROW_THREADS)
        ss += (double)xr[i * sx] * (double)xr[i * sx];
    double rstd = 1.0 / sqrt(block_sum(ss, sh) / (double)n + eps);
    for (int64_t i = threadIdx.x; i < n; i += ROW_THREADS)
        yr[i * sy] = (T)((double)xr[i * sx] * rstd * (w ? (double)w[i * sw] + off : 1.0));
    if (threadIdx.x == 0)
        rs[r] = (T)rstd; /* rstd is a fresh, dense value */
}

extern "C" cudaError_t cuk_rms_norm(cudaStream_t s, const bora_kernel_args *a)
{
    const bora_opt_rms_norm *o = (const bora_opt_rms_norm *)a->options;
    const bora_tensor_desc *x = &a->inputs[0], *w = a->n_inputs > 1 ? &a->inputs[1] : NULL;
    int64_t rows = row_count(x);
    if (rows == 0)
        return cudaSuccess;
    if (rows > 0x7fffffff) /* a block per row */
        return cudaErrorInvalidConfiguration;
    int64_t sw = w ? w->strides[0] : 0;
    if (x->dtype == BORA_DTYPE_F64)
        k_rms_norm<double><<<(unsigned)rows, ROW_THREADS, 0, s>>>(
            *x, w ? (const double *)w->data : NULL, sw, o->weight_offset, a->outputs[0],
            (double *)a->outputs[1].data, o->eps);
    else
        k_rms_norm<float><<<(unsigned)rows, ROW_THREADS, 0, s>>>(
            *x, w ? (const float *)w->data : NULL, sw, o->weight_offset, a->outputs[0],
            (float *)a->outputs[1].data, o->eps);
    return cudaGetLastError();
}

/* dx per row: with g = dy · (w + off) and x̂ = x · rstd, dx = rstd · (g - x̂ · mean(g · x̂)). */
template <typename T>
__global__ void k_rms_norm_dx(bora_tensor_desc x, const T *w, int64_t sw, double off, const T *rstd,
                              bora_tensor_desc dy, bora_tensor_desc dx)
{
    __shared__ double sh[ROW_THREADS];
    int64_t r = blockIdx.x, n = x.dims[x.ndim - 1];
    int64_t sx = x.strides[x.ndim - 1], sdy = dy.strides[dy.ndim - 1];
    int64_t sdx = dx.strides[dx.ndim - 1];
    const T *xr = (const T *)x.data + row_at(x, r), *dyr = (const T *)dy.data + row_at(dy, r);
    T *dxr = (T *)dx.data + row_at(dx, r);
    double rs = (double)rstd[r], acc = 0;
    for (int64_t i = threadIdx.x; i < n; i += ROW_THREADS)
        acc +=
            (double)dyr[i * sdy] * (w ? (double)w[i * sw] + off : 1.0) * ((double)xr[i * sx] * rs);
    double m = block_sum(acc, sh) / (double)n;
    for (int64_t i = threadIdx.x; i < n; i += ROW_THREADS) {
        double g = (double)dyr[i * sdy] * (w ? (double)w[i * sw] + off : 1.0);
        dxr[i * sdx] = (T)(rs * (g - (double)xr[i * sx] * rs * m));
    }
}

/* dweight: thread (run, column) sums its run's rows of dy · x̂ in order into wp, then one thread
 * per column adds its runs in order. */
template <typename T>
__global__ void k_rms_norm_dw_runs(bora_tensor_desc x, const T *rstd, bora_tensor_desc dy,
                                   int64_t rows, int64_t runs, double *wp)
{
    int64_t n = x.dims[x.ndim - 1];
    int64_t sx = x.strides[x.ndim - 1], sdy = dy.strides[dy.ndim - 1];
    GRID_LOOP(e, runs * n)
    {
        int64_t run = e / n, i = e % n;
        int64_t r1 = (run + 1) * ROW_RUN < rows ? (run + 1) * ROW_RUN : rows;
        double acc = 0;
        for (int64_t r = run * ROW_RUN; r < r1; r++) {
            const T *xr = (const T *)x.data + row_at(x, r);
            const T *dyr = (const T *)dy.data + row_at(dy, r);
            acc += (double)dyr[i * sdy] * ((double)xr[i * sx] * (double)rstd[r]);
        }
        wp[e] = acc;
    }
}

template <typename T>
__global__ void k_rms_norm_dw_sum(const double *wp, int64_t runs, int64_t n, bora_tensor_desc dw)
{
    GRID_LOOP(i, n)
    {
        double acc = 0;
        for (int64_t run = 0; run < runs; run++)
            acc += wp[run * n + i];
        ((T *)dw.data)[i * dw.strides[0]] = (T)acc;
    }
}

static int64_t rms_runs(const bora_kernel_args *a)
{
    int64_t rows = row_count(&a->inputs[0]);
    return rows > 0 ? (rows + ROW_RUN - 1) / ROW_RUN : 1;
}

extern "C" size_t cuk_rms_norm_grad_scratch(const bora_kernel_args *a)
{
    const bora_tensor_desc *x = &a->inputs[0];
    if (a->n_inputs != 4) /* no weight, no column sums */
        return 0;
    return sizeof(double) * (size_t)(rms_runs(a) * x->dims[x->ndim - 1]);
}

template <typename T>
static cudaError_t rms_norm_grad(cudaStream_t s, const bora_kernel_args *a, double *scratch)
{
    const bora_opt_rms_norm *o = (const bora_opt_rms_norm *)a->options;
    int nw = a->n_inputs == 4;
    const bora_tensor_desc *x = &a->inputs[0], *dy = &a->inputs[2 + nw];
    const T *w = nw ? (const T *)a->inputs[1].data : NULL;
    const T *rstd = (const T *)a->inputs[1 + nw].data;
    int64_t sw = nw ? a->inputs[1].strides[0] : 0;
    int64_t rows = row_count(x), n = x->dims[x->ndim - 1], runs = rms_runs(a);
    if (rows > 0x7fffffff) /* a block per row */
        return cudaErrorInvalidConfiguration;
    if (rows > 0)
        k_rms_norm_dx<T><<<(unsigned)rows, ROW_THREADS, 0, s>>>(*x, w, sw, o->weight_offset, rstd,
                                                                *dy, a->outputs[0]);
    if (nw && n > 0) {
        k_rms_norm_dw_runs<T>
            <<<grid_for(runs * n), ROW_THREADS, 0, s>>>(*x, rstd, *dy, rows, runs, scratch);
        k_rms_norm_dw_sum<T><<<grid_for(n), ROW_THREADS, 0, s>>>(scratch, runs, n, a->outputs[1]);
    }
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_rms_norm_grad(cudaStream_t s, const bora_kernel_args *a, double *scratch)
{
    return a->inputs[0].dtype == BORA_DTYPE_F64 ? rms_norm_grad<double>(s, a, scratch)
                                                : rms_norm_grad<float>(s, a, scratch);
}

/* ---- RoPE ---------------------------------------------------------------------------------- */

/* Each product rounded, then the sum, never a fused multiply-add: the bits of the host's
 * decomposition (MUL, NEG, MUL, ADD), as the CPU kernel gives them. */
__device__ __forceinline__ float rope_mul(float a, float b)
{
    return __fmul_rn(a, b);
}
__device__ __forceinline__ double rope_mul(double a, double b)
{
    return __dmul_rn(a, b);
}
__device__ __forceinline__ float rope_add(float a, float b)
{
    return __fadd_rn(a, b);
}
__device__ __forceinline__ double rope_add(double a, double b)
{
    return __dadd_rn(a, b);
}

/* An element of y per thread: dim d of the head-dim axis at position base + index along the
 * position axis; d < D rotated with its pair (rotate-half: d ± D/2; interleaved: d ^ 1), the rest
 * copied. A position outside the table's P rows sets flag. */
template <typename T>
__global__ void k_rope(bora_tensor_desc x, bora_tensor_desc tc, bora_tensor_desc ts,
                       bora_tensor_desc y, int pa, int da, int64_t D, int interleaved, T sign,
                       int64_t offset, const int32_t *runtime, int *flag, int64_t n)
{
    int64_t base = offset + (runtime ? (int64_t)*runtime : 0), P = tc.dims[0], half = D / 2;
    GRID_LOOP(e, n)
    {
        int64_t ox = 0, oy = 0, pos = 0, d = 0, rest = e;
        for (int i = x.ndim - 1; i >= 0; i--) {
            int64_t k = rest % x.dims[i];
            rest /= x.dims[i];
            ox += k * x.strides[i];
            oy += k * y.strides[i];
            if (i == pa)
                pos = k;
            if (i == da)
                d = k;
        }
        const T *xd = (const T *)x.data + ox - d * x.strides[da]; /* the row's dim 0 */
        T *yp = (T *)y.data + oy;
        if (d >= D) {
            *yp = xd[d * x.strides[da]];
            continue;
        }
        int64_t p = base + pos;
        if (p < 0 || p >= P) {
            *flag = 1;
            continue;
        }
        int64_t pr;
        T r;
        if (interleaved)
            pr = d ^ 1, r = d & 1 ? xd[pr * x.strides[da]] : -xd[pr * x.strides[da]];
        else
            pr = d < half ? d + half : d - half,
            r = d < half ? -xd[pr * x.strides[da]] : xd[pr * x.strides[da]];
        T c = ((const T *)tc.data)[p * tc.strides[0] + d * tc.strides[1]];
        T sn = ((const T *)ts.data)[p * ts.strides[0] + d * ts.strides[1]];
        *yp = rope_add(rope_mul(xd[d * x.strides[da]], c), rope_mul(r, sign * sn));
    }
}

extern "C" cudaError_t cuk_rope(cudaStream_t s, const bora_kernel_args *a, int *flag)
{
    const bora_opt_rope *o = (const bora_opt_rope *)a->options;
    const bora_tensor_desc *x = &a->inputs[0];
    int64_t n = bora_tensor_desc_numel(x);
    if (n == 0)
        return cudaSuccess;
    const int32_t *rt = a->n_inputs > 3 ? (const int32_t *)a->inputs[3].data : NULL;
    int il = o->layout == BORA_ROPE_INTERLEAVED;
    if (x->dtype == BORA_DTYPE_F64)
        k_rope<double><<<grid_for(n), ROW_THREADS, 0, s>>>(
            *x, a->inputs[1], a->inputs[2], a->outputs[0], o->position_axis, o->dim_axis,
            o->rotary_dims, il, o->inverse ? -1.0 : 1.0, o->offset, rt, flag, n);
    else
        k_rope<float><<<grid_for(n), ROW_THREADS, 0, s>>>(
            *x, a->inputs[1], a->inputs[2], a->outputs[0], o->position_axis, o->dim_axis,
            o->rotary_dims, il, o->inverse ? -1.0f : 1.0f, o->offset, rt, flag, n);
    return cudaGetLastError();
}

/* ---- the fused cross-entropy --------------------------------------------------------------- */

__device__ __forceinline__ void xf_store(float *p, double v)
{
    *p = (float)v;
}
__device__ __forceinline__ void xf_store(double *p, double v)
{
    *p = v;
}
/* bf16: the f32 value rounded to nearest even (NaN stays NaN) */
__device__ __forceinline__ void xf_store(uint16_t *p, double v)
{
    uint32_t u = __float_as_uint((float)v);
    *p = (u & 0x7fffffffu) > 0x7f800000u ? (uint16_t)((u >> 16) | 0x40)
                                         : (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* A block per row: lse (in double, stored as T), the row's loss lse - x[target] + z·lse² into
 * per_row (0 for an ignored target; a target out of range counts nothing and sets flag), then
 * the gradient dloss · (exp(x - lse)·(1 + 2z·lse) - [i = target]) with the stored lse, as
 * XENT_GRAD computes it (0 for an ignored or bad target). The gradient may be the logits' own
 * storage: every read of the row is done before the first write (the reductions end with a
 * barrier, and each thread writes only the elements it read last). */
template <typename T, typename GT>
__global__ void k_xent_fused(bora_tensor_desc x, bora_tensor_desc t, const T *dloss_p, T *lse_out,
                             double *per_row, bora_tensor_desc g, int ignore_index, double z_loss,
                             int *flag)
{
    __shared__ double sh[ROW_THREADS];
    int64_t r = blockIdx.x, V = x.dims[1], sx = x.strides[1], sg = g.strides[1];
    const T *xr = (const T *)x.data + r * x.strides[0];
    GT *gr = (GT *)g.data + r * g.strides[0];
    int32_t tgt = ((const int32_t *)t.data)[r * t.strides[0]];
    int skip = tgt == ignore_index || tgt < 0 || tgt >= V;
    double xt = !skip && threadIdx.x == 0 ? (double)xr[tgt * sx] : 0.0;
    double m = -INFINITY, sum = 0;
    for (int64_t i = threadIdx.x; i < V; i += ROW_THREADS)
        m = (double)xr[i * sx] > m ? (double)xr[i * sx] : m;
    m = block_max(m, sh);
    for (int64_t i = threadIdx.x; i < V; i += ROW_THREADS)
        sum += exp((double)xr[i * sx] - m);
    double lse = m + log(block_sum(sum, sh));
    if (threadIdx.x == 0) {
        lse_out[r] = (T)lse;
        if (tgt == ignore_index) {
            per_row[r] = 0;
        } else if (tgt < 0 || tgt >= V) {
            per_row[r] = 0;
            *flag = 1;
        } else {
            per_row[r] = lse - xt + z_loss * lse * lse;
        }
    }
    double l = (double)(T)lse, zf = 1.0 + 2.0 * z_loss * l, dloss = (double)*dloss_p;
    for (int64_t i = threadIdx.x; i < V; i += ROW_THREADS) {
        double p = exp((double)xr[i * sx] - l);
        xf_store(gr + i * sg, skip ? 0.0 : dloss * (p * zf - (i == tgt ? 1.0 : 0.0)));
    }
}

/* The rows' losses summed by one block in a fixed order. */
template <typename T> __global__ void k_xent_fused_sum(const double *per_row, int64_t rows, T *out)
{
    __shared__ double sh[ROW_THREADS];
    double acc = 0;
    for (int64_t r = threadIdx.x; r < rows; r += ROW_THREADS)
        acc += per_row[r];
    acc = block_sum(acc, sh);
    if (threadIdx.x == 0)
        *out = (T)acc;
}

template <typename T, typename GT>
static cudaError_t xent_fused(cudaStream_t s, const bora_kernel_args *a, double *per_row, int *flag)
{
    const bora_tensor_desc *x = &a->inputs[0];
    const bora_opt_xent *opt = (const bora_opt_xent *)a->options;
    int64_t rows = x->dims[0];
    if (rows > 0x7fffffff) /* a block per row */
        return cudaErrorInvalidConfiguration;
    if (rows > 0)
        k_xent_fused<T, GT><<<(unsigned)rows, ROW_THREADS, 0, s>>>(
            *x, a->inputs[1], (const T *)a->inputs[2].data, (T *)a->outputs[1].data, per_row,
            a->outputs[2], opt->ignore_index, opt->z_loss, flag);
    k_xent_fused_sum<T><<<1, ROW_THREADS, 0, s>>>(per_row, rows, (T *)a->outputs[0].data);
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_xent_fused(cudaStream_t s, const bora_kernel_args *a, double *per_row,
                                      int *flag)
{
    if (a->inputs[0].dtype == BORA_DTYPE_F64)
        return xent_fused<double, double>(s, a, per_row, flag);
    if (a->outputs[2].dtype == BORA_DTYPE_BF16)
        return xent_fused<float, uint16_t>(s, a, per_row, flag);
    return xent_fused<float, float>(s, a, per_row, flag);
}
