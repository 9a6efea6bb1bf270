/* plugins/backends/cuda/moe.cu — a mixture of experts' ops (ABI 1.13) and SAMPLE (ABI 1.11) on
 * the GPU; sdk/bora/graph.h states each contract, plugins/backends/cpu/{moe,sample}.c are the
 * CPU's versions. What runs where:
 *   top_k     a warp per row, k rounds: each round takes the best entry after the previous pick
 *             in the op's total order (larger first, NaN above numbers, ties to the lower
 *             index), so no entry is marked and any k <= D works;
 *   argsort   CUB's device radix sort of (key, index) pairs over all 32 bits: stable, so its
 *             result is the one permutation the contract names;
 *   bincount  integer atomics (a sum of ones is the same in any order); the first key outside
 *             the bins is found with atomicMin and named, as the CPU names it;
 *   grouped_matmul(_grad)  the E sizes read back to the host, then one matmul per non-empty group
 *             through matmul.c (cuBLASLt, the algorithm fixed per shape): the bits depend on the
 *             sizes alone;
 *   sample    a warp per row: its max over the lanes, then its weights summed in order v = 0 ..
 *             V-1 (32 at a time, added one by one from the lanes), as the contract fixes; the
 *             uniform is sdk/bora/philox.h's, so a token is the CPU's token.
 * Every launcher here checks its own grid and fails naming the op and shape. */
#include "common.cuh"
#include "cuda.h"

#include <bora/graph.h>
#include <bora/philox.h>

#include <cub/device/device_radix_sort.cuh>

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define MOE_THREADS CU_THREADS
#define MOE_WARPS (MOE_THREADS / 32) /* rows per block for the warp-per-row kernels */
#define FULL_MASK 0xffffffffu

/* Blocks for a warp per row over R rows; 0 past gridDim.x's limit. */
static unsigned grid_for_rows(int64_t R)
{
    int64_t g = (R + MOE_WARPS - 1) / MOE_WARPS;
    return g > INT_MAX ? 0u : (unsigned)(g < 1 ? 1 : g);
}

/* Under BORA_PROFILE each kernel is waited for (the host's per-node times are the GPU's). */
static bora_status finish(bora_backend *b, bora_status st, const char *what)
{
    if (st == BORA_OK && b->sync_each)
        st = cuda_check(b, cudaStreamSynchronize(b->stream), what);
    return st;
}

/* Element i (an offset in elements) of an f32 or f64 tensor, widened. */
__device__ __forceinline__ double load_f(const bora_tensor_desc &x, int64_t i)
{
    return x.dtype == BORA_DTYPE_F64 ? ((const double *)x.data)[i]
                                     : (double)((const float *)x.data)[i];
}

/* ---- top_k -------------------------------------------------------------------------------- */

/* Whether entry (a, ia) comes before (b, ib) in top_k's order: NaN above every number, then the
 * larger, then (equal values, NaN with NaN, -0 with +0) the lower index. A strict total order
 * over a row's entries. */
__device__ __forceinline__ bool ranks_first(double a, int64_t ia, double b, int64_t ib)
{
    bool an = isnan(a), bn = isnan(b);
    if (an != bn)
        return an;
    if (!an && a != b)
        return a > b;
    return ia < ib;
}

/* x (R, D) -> y (R, k) i32: warp w of a block owns row blockIdx.x·MOE_WARPS + w; round m takes
 * the first entry in the order among those after round m-1's pick. */
__global__ void k_top_k(bora_tensor_desc x, bora_tensor_desc y, int64_t R, int64_t D, int64_t k,
                        int row_offsets)
{
    int lane = (int)(threadIdx.x & 31);
    int64_t r = (int64_t)blockIdx.x * MOE_WARPS + (threadIdx.x >> 5);
    if (r >= R) /* the whole warp leaves: r is the warp's */
        return;
    int64_t xo = r * x.strides[0], xs = x.strides[1];
    double pv = 0; /* the previous pick (pi < 0: none yet) */
    int64_t pi = -1;
    for (int64_t m = 0; m < k; m++) {
        double bv = 0; /* this lane's best after the previous pick (bi < 0: none) */
        int64_t bi = -1;
        for (int64_t j = lane; j < D; j += 32) {
            double v = load_f(x, xo + j * xs);
            if (pi >= 0 && !ranks_first(pv, pi, v, j))
                continue;
            if (bi < 0 || ranks_first(v, j, bv, bi))
                bv = v, bi = j;
        }
        /* the lanes' best by a butterfly: every lane ends with the warp's best, as the order is
         * total */
        for (int off = 16; off > 0; off >>= 1) {
            double ov = __shfl_xor_sync(FULL_MASK, bv, off);
            long long oi = __shfl_xor_sync(FULL_MASK, (long long)bi, off);
            if (oi >= 0 && (bi < 0 || ranks_first(ov, oi, bv, bi)))
                bv = ov, bi = oi;
        }
        pv = bv, pi = bi; /* m < k <= D: some entry is left, so bi >= 0 */
        if (lane == 0)
            ((int32_t *)y.data)[r * y.strides[0] + m * y.strides[1]] =
                (int32_t)(bi + (row_offsets ? r * D : 0));
    }
}

static bora_status moe_top_k(bora_backend *b, const bora_kernel_args *a)
{
    const bora_opt_top_k *o = (const bora_opt_top_k *)a->options;
    const bora_tensor_desc *x = &a->inputs[0], *y = &a->outputs[0];
    int64_t R = x->dims[0], D = x->dims[1], k = o->k;
    if (R == 0)
        return BORA_OK;
    if (k < 1 || k > D || D > INT32_MAX || (o->row_offsets && R > INT32_MAX / D))
        return b->h->fail(b->h, BORA_ERR_INVALID,
                          "top_k: k %lld of rows of %lld (%lld rows): k must be in [1, %lld] and "
                          "the indices below 2^31",
                          (long long)k, (long long)D, (long long)R, (long long)D);
    unsigned grid = grid_for_rows(R);
    if (!grid)
        return b->h->fail(b->h, BORA_ERR_INVALID, "top_k: %lld rows are past the GPU's grid",
                          (long long)R);
    k_top_k<<<grid, MOE_THREADS, 0, b->stream>>>(*x, *y, R, D, k, o->row_offsets);
    return finish(b, cuda_check(b, cudaGetLastError(), "top_k"), "top_k");
}

/* ---- argsort ------------------------------------------------------------------------------ */

/* keys (N) strided -> dense keys and the indices 0 .. N-1, CUB's inputs. */
__global__ void k_argsort_in(bora_tensor_desc x, int64_t N, int32_t *keys, int32_t *idx)
{
    GRID_LOOP(i, N)
    {
        keys[i] = ((const int32_t *)x.data)[i * x.strides[0]];
        idx[i] = (int32_t)i;
    }
}

/* dense v (N) -> y (N) strided. */
__global__ void k_put_i32(bora_tensor_desc y, int64_t N, const int32_t *v)
{
    GRID_LOOP(i, N)
    {
        ((int32_t *)y.data)[i * y.strides[0]] = v[i];
    }
}

static size_t align256(size_t n)
{
    return (n + 255) & ~(size_t)255;
}

static bora_status moe_argsort(bora_backend *b, const bora_kernel_args *a)
{
    const bora_tensor_desc *x = &a->inputs[0], *y = &a->outputs[0];
    int64_t N = x->dims[0];
    if (N == 0)
        return BORA_OK;
    if (N > INT32_MAX)
        return b->h->fail(b->h, BORA_ERR_INVALID,
                          "argsort: %lld keys; the indices are i32, so at most 2^31-1",
                          (long long)N);
    /* scratch: keys in and out, indices in and out, then CUB's temporary storage */
    size_t temp = 0, arr = align256(sizeof(int32_t) * (size_t)N);
    cudaError_t err = cub::DeviceRadixSort::SortPairs(NULL, temp, (const int32_t *)NULL,
                                                      (int32_t *)NULL, (const int32_t *)NULL,
                                                      (int32_t *)NULL, (int)N, 0, 32, b->stream);
    if (err != cudaSuccess)
        return cuda_check(b, err, "argsort (CUB's storage query)");
    char *s = (char *)cuda_scratch(b, 4 * arr + temp);
    if (!s)
        return BORA_ERR_NOMEM;
    int32_t *keys_in = (int32_t *)s, *keys_out = (int32_t *)(s + arr);
    int32_t *idx_in = (int32_t *)(s + 2 * arr), *idx_out = (int32_t *)(s + 3 * arr);
    /* a dense output takes the sorted indices directly */
    int dense = y->strides[0] == 1;
    if (dense)
        idx_out = (int32_t *)y->data;
    k_argsort_in<<<grid_for(N), MOE_THREADS, 0, b->stream>>>(*x, N, keys_in, idx_in);
    err = cudaGetLastError();
    if (err == cudaSuccess)
        err = cub::DeviceRadixSort::SortPairs(s + 4 * arr, temp, keys_in, keys_out, idx_in, idx_out,
                                              (int)N, 0, 32, b->stream);
    if (err == cudaSuccess && !dense) {
        k_put_i32<<<grid_for(N), MOE_THREADS, 0, b->stream>>>(*y, N, idx_out);
        err = cudaGetLastError();
    }
    return finish(b, cuda_check(b, err, "argsort"), "argsort");
}

/* ---- bincount ----------------------------------------------------------------------------- */

__global__ void k_zero_i32(bora_tensor_desc y, int64_t n)
{
    GRID_LOOP(i, n)
    {
        ((int32_t *)y.data)[i * y.strides[0]] = 0;
    }
}

/* counts (E) += 1 per key; the lowest position of a key outside [0, E) into first_bad. */
__global__ void k_bincount(bora_tensor_desc x, int64_t N, bora_tensor_desc y, int64_t E,
                           unsigned *first_bad)
{
    GRID_LOOP(i, N)
    {
        int32_t key = ((const int32_t *)x.data)[i * x.strides[0]];
        if (key < 0 || key >= E)
            atomicMin(first_bad, (unsigned)i);
        else
            atomicAdd((int32_t *)y.data + key * y.strides[0], 1);
    }
}

static bora_status moe_bincount(bora_backend *b, const bora_kernel_args *a)
{
    const bora_tensor_desc *x = &a->inputs[0], *y = &a->outputs[0];
    int64_t N = x->dims[0], E = y->dims[0];
    if (N >= (int64_t)UINT_MAX)
        return b->h->fail(b->h, BORA_ERR_INVALID, "bincount: %lld keys; at most 2^32-2",
                          (long long)N);
    unsigned *first_bad = (unsigned *)b->flag, bad = UINT_MAX;
    cudaError_t err = cudaMemsetAsync(first_bad, 0xff, sizeof(unsigned), b->stream);
    if (err == cudaSuccess && E > 0) {
        k_zero_i32<<<grid_for(E), MOE_THREADS, 0, b->stream>>>(*y, E);
        err = cudaGetLastError();
    }
    if (err == cudaSuccess && N > 0) {
        k_bincount<<<grid_for(N), MOE_THREADS, 0, b->stream>>>(*x, N, *y, E, first_bad);
        err = cudaGetLastError();
    }
    if (err == cudaSuccess)
        err = cudaMemcpyAsync(&bad, first_bad, sizeof bad, cudaMemcpyDeviceToHost, b->stream);
    if (err == cudaSuccess)
        err = cudaStreamSynchronize(b->stream);
    bora_status st = cuda_check(b, err, "bincount");
    if (st != BORA_OK || bad == UINT_MAX)
        return st;
    int32_t key = 0;
    const int32_t *at = (const int32_t *)x->data + (int64_t)bad * x->strides[0];
    st = cuda_check(b, cudaMemcpy(&key, at, sizeof key, cudaMemcpyDeviceToHost),
                    "bincount (reading the key outside the bins)");
    if (st != BORA_OK)
        return st;
    return b->h->fail(b->h, BORA_ERR_INVALID,
                      "bincount: key %d at %lld is outside [0, %lld), the bins", key,
                      (long long)bad, (long long)E);
}

/* ---- grouped products --------------------------------------------------------------------- */

/* The E group sizes (device, i32, strided), read to the host and checked against R rows as the
 * CPU checks them: into *out (freed by the caller with h->free), or the failure. */
static bora_status read_sizes(bora_backend *b, const char *op, const bora_tensor_desc *s, int64_t R,
                              int32_t **out)
{
    int64_t E = s->dims[0];
    int32_t *sz = (int32_t *)b->h->alloc(b->h, sizeof(int32_t) * (size_t)(E > 0 ? E : 1), 16);
    if (!sz)
        return b->h->fail(b->h, BORA_ERR_NOMEM, "%s: out of memory for %lld group sizes", op,
                          (long long)E);
    /* dense sizes in one copy, strided ones in a 2-d copy, one size broadcast (stride 0) once */
    int64_t ss = E > 1 ? s->strides[0] : 1;
    if (ss < 0) {
        b->h->free(b->h, sz);
        return b->h->fail(b->h, BORA_ERR_UNSUPPORTED, "%s: group sizes with a negative stride",
                          op);
    }
    cudaError_t err = cudaSuccess;
    if (E > 0 && ss == 1)
        err = cudaMemcpyAsync(sz, s->data, sizeof(int32_t) * (size_t)E, cudaMemcpyDeviceToHost,
                              b->stream);
    else if (E > 0 && ss > 1)
        err = cudaMemcpy2DAsync(sz, sizeof(int32_t), s->data, sizeof(int32_t) * (size_t)ss,
                                sizeof(int32_t), (size_t)E, cudaMemcpyDeviceToHost, b->stream);
    else if (E > 0)
        err = cudaMemcpyAsync(sz, s->data, sizeof(int32_t), cudaMemcpyDeviceToHost, b->stream);
    if (err == cudaSuccess)
        err = cudaStreamSynchronize(b->stream);
    char what[64];
    snprintf(what, sizeof what, "%s (reading the group sizes)", op);
    bora_status st = cuda_check(b, err, what);
    for (int64_t e = 1; e < E && ss < 1; e++)
        sz[e] = sz[0];
    int64_t sum = 0;
    for (int64_t e = 0; e < E && st == BORA_OK; e++) {
        int32_t n = sz[e];
        if (n < 0 || (sum += n) > R)
            st = b->h->fail(b->h, BORA_ERR_INVALID, "%s: group %lld's size %d %s the %lld rows", op,
                            (long long)e, n,
                            n < 0 ? "is negative; sizes count" : "takes the sizes' sum past",
                            (long long)R);
    }
    if (st != BORA_OK) {
        b->h->free(b->h, sz);
        return st;
    }
    *out = sz;
    return BORA_OK;
}

/* Rows [r0, r0 + n) of a 2-d desc as a (1, n, cols) 3-d one, or transposed as (1, cols, n). */
static bora_tensor_desc rows_of(const bora_tensor_desc *t, int64_t r0, int64_t n, int transposed)
{
    bora_tensor_desc d = *t;
    d.data = (char *)t->data + (size_t)(r0 * t->strides[0]) * bora_dtype_size(t->dtype);
    d.ndim = 3;
    d.dims[0] = 1, d.strides[0] = 0;
    d.dims[1 + transposed] = n, d.strides[1 + transposed] = t->strides[0];
    d.dims[2 - transposed] = t->dims[1], d.strides[2 - transposed] = t->strides[1];
    return d;
}

/* Matrix e of a 3-d desc as (1, rows, cols). */
static bora_tensor_desc matrix_of(const bora_tensor_desc *t, int64_t e)
{
    bora_tensor_desc d = *t;
    d.data = (char *)t->data + (size_t)(e * t->strides[0]) * bora_dtype_size(t->dtype);
    d.dims[0] = 1, d.strides[0] = 0;
    return d;
}

/* C = A B, (1, M, K) x (1, K, N) -> (1, M, N), on matmul.c's path (cuBLASLt or its plain
 * kernel). */
static bora_status product(bora_backend *b, bora_tensor_desc A, bora_tensor_desc B,
                           bora_tensor_desc C)
{
    bora_tensor_desc in[2] = {A, B};
    bora_kernel_args ka;
    memset(&ka, 0, sizeof ka);
    ka.struct_size = sizeof ka;
    ka.op = BORA_OP_MATMUL;
    ka.n_inputs = 2;
    ka.n_outputs = 1;
    ka.inputs = in;
    ka.outputs = &C;
    return cuda_matmul(b, &ka);
}

/* Zeros over t (any strides), on kernels.cu's fill. */
static bora_status zeros(bora_backend *b, bora_tensor_desc t, const char *what)
{
    bora_opt_scalar z;
    memset(&z, 0, sizeof z);
    z.struct_size = sizeof z;
    bora_kernel_args ka;
    memset(&ka, 0, sizeof ka);
    ka.struct_size = sizeof ka;
    ka.op = BORA_OP_FILL;
    ka.options = &z;
    ka.n_outputs = 1;
    ka.outputs = &t;
    return cuda_check(b, cuk_fill(b->stream, &ka), what);
}

/* y = x w_e per group of rows (x (R, K), w (E, K, N), sizes (E)); rows past the sum are zero. */
static bora_status moe_grouped_matmul(bora_backend *b, const bora_kernel_args *a)
{
    const bora_tensor_desc *x = &a->inputs[0], *w = &a->inputs[1], *s = &a->inputs[2];
    const bora_tensor_desc *y = &a->outputs[0];
    int64_t R = x->dims[0], r0 = 0;
    int32_t *sz = NULL;
    bora_status st = read_sizes(b, "grouped_matmul", s, R, &sz);
    for (int64_t e = 0; e < s->dims[0] && st == BORA_OK; e++) {
        int64_t n = sz[e];
        if (n == 0)
            continue;
        st = product(b, rows_of(x, r0, n, 0), matrix_of(w, e), rows_of(y, r0, n, 0));
        r0 += n;
    }
    if (st == BORA_OK && r0 < R) {
        bora_tensor_desc rest = *y;
        rest.data = (char *)y->data + (size_t)(r0 * y->strides[0]) * bora_dtype_size(y->dtype);
        rest.dims[0] = R - r0;
        st = zeros(b, rest, "grouped_matmul (the rows past the sizes' sum)");
    }
    if (sz)
        b->h->free(b->h, sz);
    return finish(b, st, "grouped_matmul");
}

/* dw_e = x_eᵀ dy_e per group (x (R, K), dy (R, N), sizes (E)) -> (E, K, N), zero for an empty
 * group; rows past the sum count nothing. */
static bora_status moe_grouped_matmul_grad(bora_backend *b, const bora_kernel_args *a)
{
    const bora_tensor_desc *x = &a->inputs[0], *dy = &a->inputs[1], *s = &a->inputs[2];
    const bora_tensor_desc *dw = &a->outputs[0];
    int64_t r0 = 0;
    int32_t *sz = NULL;
    bora_status st = read_sizes(b, "grouped_matmul_grad", s, x->dims[0], &sz);
    for (int64_t e = 0; e < s->dims[0] && st == BORA_OK; e++) {
        int64_t n = sz[e];
        if (n == 0) {
            st = zeros(b, matrix_of(dw, e), "grouped_matmul_grad (an empty group's gradient)");
            continue;
        }
        st = product(b, rows_of(x, r0, n, 1), rows_of(dy, r0, n, 0), matrix_of(dw, e));
        r0 += n;
    }
    if (sz)
        b->h->free(b->h, sz);
    return finish(b, st, "grouped_matmul_grad");
}

/* ---- sample ------------------------------------------------------------------------------- */

/* logits x (R, V) -> tokens y (R) i32: warp w of a block owns row blockIdx.x·MOE_WARPS + w. Every
 * lane holds the same running sums (each adds the same lanes' weights in the same order), so
 * every branch on them is the warp's. */
__global__ void k_sample(bora_tensor_desc x, bora_tensor_desc y, int64_t R, int64_t V,
                         uint64_t seed, uint32_t stream, uint32_t step, int64_t first)
{
    int lane = (int)(threadIdx.x & 31);
    int64_t r = (int64_t)blockIdx.x * MOE_WARPS + (threadIdx.x >> 5);
    if (r >= R)
        return;
    int64_t xo = r * x.strides[0], xs = x.strides[1];
    /* the row's max, and whether any logit is not finite */
    double top = -INFINITY;
    int bad = 0;
    for (int64_t j = lane; j < V; j += 32) {
        double l = load_f(x, xo + j * xs);
        if (!isfinite(l))
            bad = 1;
        else
            top = l > top ? l : top;
    }
    bad = __any_sync(FULL_MASK, bad);
    for (int off = 16; off > 0; off >>= 1) {
        double o = __shfl_xor_sync(FULL_MASK, top, off);
        top = o > top ? o : top;
    }
    int32_t token = -1;
    if (!bad && V > 0) {
        /* total = w_0 + .. + w_(V-1), in that order */
        double total = 0;
        for (int64_t j0 = 0; j0 < V; j0 += 32) {
            int64_t j = j0 + lane;
            double w = j < V ? exp(load_f(x, xo + j * xs) - top) : 0;
            int n = V - j0 < 32 ? (int)(V - j0) : 32;
            for (int l = 0; l < n; l++)
                total += __shfl_sync(FULL_MASK, w, l);
        }
        if (total > 0) {
            /* Philox's counter words: the row's index in the step (low, high), stream, step */
            uint64_t row = (uint64_t)(first + r);
            double u =
                bora_philox_uniform(seed, (uint32_t)row, (uint32_t)(row >> 32), stream, step);
            double target = u * total, sum = 0;
            int32_t last = -1; /* the last positive weight, should rounding leave no sum past */
            for (int64_t j0 = 0; j0 < V && token < 0; j0 += 32) {
                int64_t j = j0 + lane;
                double w = j < V ? exp(load_f(x, xo + j * xs) - top) : 0;
                int n = V - j0 < 32 ? (int)(V - j0) : 32;
                for (int l = 0; l < n; l++) {
                    double wl = __shfl_sync(FULL_MASK, w, l);
                    sum += wl;
                    if (sum > target) {
                        token = (int32_t)(j0 + l);
                        break;
                    }
                    if (wl > 0)
                        last = (int32_t)(j0 + l);
                }
            }
            if (token < 0)
                token = last;
        }
    }
    if (lane == 0)
        ((int32_t *)y.data)[r * y.strides[0]] = token;
}

static bora_status moe_sample(bora_backend *b, const bora_kernel_args *a)
{
    const bora_opt_sample *o = (const bora_opt_sample *)a->options;
    const bora_tensor_desc *x = &a->inputs[0], *c = &a->inputs[1], *y = &a->outputs[0];
    int64_t R = x->dims[0], V = x->dims[1];
    int64_t cp[2] = {0, 0};
    const int64_t *cd = (const int64_t *)c->data;
    cudaError_t err =
        cudaMemcpyAsync(&cp[0], cd, sizeof(int64_t), cudaMemcpyDeviceToHost, b->stream);
    if (err == cudaSuccess)
        err = cudaMemcpyAsync(&cp[1], cd + c->strides[0], sizeof(int64_t), cudaMemcpyDeviceToHost,
                              b->stream);
    if (err == cudaSuccess)
        err = cudaStreamSynchronize(b->stream);
    bora_status st = cuda_check(b, err, "sample (reading the counter)");
    if (st != BORA_OK)
        return st;
    int64_t step = cp[0], first = cp[1];
    if (step < 0 || step > (int64_t)UINT32_MAX || first < 0 || first > INT64_MAX - R)
        return b->h->fail(b->h, BORA_ERR_INVALID,
                          "sample: counter (step %lld, first row %lld) is outside 0..2^32-1 "
                          "and 0..2^63-1 less the %lld rows",
                          (long long)step, (long long)first, (long long)R);
    if (R == 0)
        return BORA_OK;
    unsigned grid = grid_for_rows(R);
    if (!grid)
        return b->h->fail(b->h, BORA_ERR_INVALID, "sample: %lld rows are past the GPU's grid",
                          (long long)R);
    k_sample<<<grid, MOE_THREADS, 0, b->stream>>>(*x, *y, R, V, o->seed, (uint32_t)o->stream,
                                                  (uint32_t)step, first);
    return finish(b, cuda_check(b, cudaGetLastError(), "sample"), "sample");
}

/* ---- the table ---------------------------------------------------------------------------- */

extern "C" bora_kernel_fn cuda_moe_kernel(uint32_t op, const int32_t *dt, uint32_t n)
{
    switch (op) {
    case BORA_OP_TOP_K:
        if (n != 2 || dt[1] != BORA_DTYPE_I32)
            return NULL;
        return dt[0] == BORA_DTYPE_F32 || dt[0] == BORA_DTYPE_F64 ? moe_top_k : NULL;
    case BORA_OP_ARGSORT:
        return n == 2 && dt[0] == BORA_DTYPE_I32 && dt[1] == BORA_DTYPE_I32 ? moe_argsort : NULL;
    case BORA_OP_BINCOUNT:
        return n == 2 && dt[0] == BORA_DTYPE_I32 && dt[1] == BORA_DTYPE_I32 ? moe_bincount : NULL;
    case BORA_OP_GROUPED_MATMUL:
    case BORA_OP_GROUPED_MATMUL_GRAD: {
        /* two operands of one dtype, i32 sizes, the result in that dtype (bf16 operands: f32) */
        if (n != 4 || dt[2] != BORA_DTYPE_I32 || dt[0] != dt[1])
            return NULL;
        int ok = (dt[0] == BORA_DTYPE_F32 || dt[0] == BORA_DTYPE_F64) ? dt[3] == dt[0]
                 : dt[0] == BORA_DTYPE_BF16                           ? dt[3] == BORA_DTYPE_F32
                                                                      : 0;
        if (!ok)
            return NULL;
        return op == BORA_OP_GROUPED_MATMUL ? moe_grouped_matmul : moe_grouped_matmul_grad;
    }
    case BORA_OP_SAMPLE:
        if (n != 3 || dt[1] != BORA_DTYPE_I64 || dt[2] != BORA_DTYPE_I32)
            return NULL;
        return dt[0] == BORA_DTYPE_F32 || dt[0] == BORA_DTYPE_F64 ? moe_sample : NULL;
    default: return NULL;
    }
}
