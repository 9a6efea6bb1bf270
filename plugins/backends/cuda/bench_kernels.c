/* plugins/backends/cuda/bench_kernels.c — the kernel sandbox: times kernels.cu's launchers alone
 * on GPT-2 small's shapes (8 × 512 tokens), the median of 10 runs by CUDA events, with the bytes
 * each must move at least (attention: its operands once). Not a test (timings never are): scripts/gpu-check runs it on request.
 *
 * usage: bench_cuda_kernels */
#include "cuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bora_tensor_desc desc(void *data, int dtype, int ndim, const int64_t *dims,
                             const int64_t *strides)
{
    bora_tensor_desc d;
    memset(&d, 0, sizeof d);
    d.data = data;
    d.dtype = dtype;
    d.ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        d.dims[i] = dims[i];
        d.strides[i] = strides[i];
    }
    return d;
}

/* A dense (row-major) tensor over device memory p. */
static bora_tensor_desc dense(void *p, int dtype, int ndim, const int64_t *dims)
{
    int64_t strides[BORA_MAX_DIMS], s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        strides[i] = s;
        s *= dims[i];
    }
    return desc(p, dtype, ndim, dims, strides);
}

static int by_value(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

static cudaStream_t stream;
static void *scratch;

/* Run fn 11 times (the first a warm-up), print the median and the rate of `bytes`. */
static void timed(const char *what, cudaError_t (*fn)(const bora_kernel_args *),
                  const bora_kernel_args *a, double bytes)
{
    float ms[10];
    cudaEvent_t t0, t1;
    cudaEventCreate(&t0);
    cudaEventCreate(&t1);
    for (int i = 0; i < 11; i++) {
        cudaEventRecord(t0, stream);
        cudaError_t err = fn(a);
        cudaEventRecord(t1, stream);
        cudaEventSynchronize(t1);
        if (err != cudaSuccess) {
            printf("%-44s %s\n", what, cudaGetErrorString(err));
            cudaGetLastError();
            cudaEventDestroy(t0);
            cudaEventDestroy(t1);
            return;
        }
        if (i)
            cudaEventElapsedTime(&ms[i - 1], t0, t1);
    }
    qsort(ms, 10, sizeof ms[0], by_value);
    printf("%-44s %9.3f ms %8.1f GB/s\n", what, ms[5], bytes / (ms[5] * 1e-3) / 1e9);
    cudaEventDestroy(t0);
    cudaEventDestroy(t1);
}

static cudaError_t run_elementwise(const bora_kernel_args *a)
{
    return cuk_elementwise(stream, a);
}
static cudaError_t run_reduce(const bora_kernel_args *a)
{
    return cuk_reduce(stream, a, scratch);
}
static cudaError_t run_lngrad(const bora_kernel_args *a)
{
    return cuk_layernorm_grad(stream, a, scratch);
}
static cudaError_t run_scatter(const bora_kernel_args *a)
{
    return cuk_scatter_add(stream, a);
}
static cudaError_t run_softmax(const bora_kernel_args *a)
{
    return cuk_softmax(stream, a);
}
static cudaError_t run_attention(const bora_kernel_args *a)
{
    return cuk_attention(stream, a, scratch);
}

int main(void)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    cudaStreamCreate(&stream);
    const int64_t V = 50257, D = 768, R = 4096, F = 3072;
    size_t big = (size_t)V * D * sizeof(float);
    void *x, *y, *o;
    if (cudaMalloc(&x, big) || cudaMalloc(&y, big) || cudaMalloc(&o, big) ||
        cudaMalloc(&scratch, 64u << 20)) {
        printf("out of device memory\n");
        return 1;
    }
    cudaMemset(x, 0, big);
    cudaMemset(y, 0, big);

    int64_t vd[2] = {V, D}, zero2[2] = {0, 0}, tr[2] = {1, V};
    bora_tensor_desc in[6], out[3];
    bora_kernel_args a = {sizeof a, BORA_OP_ADD, NULL, 2, 1, in, out, NULL, 0};

    in[0] = dense(x, BORA_DTYPE_F32, 2, vd);
    in[1] = dense(y, BORA_DTYPE_F32, 2, vd);
    out[0] = dense(o, BORA_DTYPE_F32, 2, vd);
    timed("add (50257, 768) dense", run_elementwise, &a, 3.0 * (double)big);
    in[1] = desc(y, BORA_DTYPE_F32, 2, vd, zero2);
    timed("add (50257, 768), a broadcast scalar", run_elementwise, &a, 2.0 * (double)big);
    in[1] = desc(y, BORA_DTYPE_F32, 2, vd, tr);
    timed("add (50257, 768), one operand transposed", run_elementwise, &a, 3.0 * (double)big);

    bora_opt_reduce red = {sizeof red, 1};
    a.op = BORA_OP_SUM;
    a.options = &red;
    a.n_inputs = 1;
    int64_t bsum[3] = {512, F, 8}, bsum_s[3] = {F, 1, 512 * F}, po[2] = {512, F};
    in[0] = desc(x, BORA_DTYPE_F32, 3, bsum, bsum_s);
    out[0] = dense(o, BORA_DTYPE_F32, 2, po);
    timed("sum over the batch: (512, 3072, 8) -> (512, 3072)", run_reduce, &a,
          4.0 * 9 * 512 * (double)F);
    int64_t rf[2] = {F, R}, rf_s[2] = {1, F}, f1[1] = {F};
    in[0] = desc(x, BORA_DTYPE_F32, 2, rf, rf_s);
    out[0] = dense(o, BORA_DTYPE_F32, 1, f1);
    timed("sum over rows: (3072, 4096 rows) -> (3072)", run_reduce, &a, 4.0 * (double)R * F);
    a.op = BORA_OP_SUM_SQUARES;
    int64_t all[1] = {V * D};
    red.n_reduced = 1;
    in[0] = dense(x, BORA_DTYPE_F32, 1, all);
    out[0] = desc(o, BORA_DTYPE_F32, 0, NULL, NULL);
    timed("sum_squares (50257 x 768) -> ()", run_reduce, &a, (double)big);

    bora_opt_norm norm = {sizeof norm, 0, 1e-5};
    a.op = BORA_OP_LAYERNORM_GRAD;
    a.options = &norm;
    a.n_inputs = 5;
    a.n_outputs = 3;
    int64_t rd[2] = {R, D}, d1[1] = {D}, r1[1] = {R};
    char *yb = y;
    in[0] = dense(x, BORA_DTYPE_F32, 2, rd);
    in[1] = dense(yb, BORA_DTYPE_F32, 1, d1);
    in[2] = dense(yb + 4096, BORA_DTYPE_F32, 1, r1);
    in[3] = dense(yb + 4 * 8192, BORA_DTYPE_F32, 1, r1);
    in[4] = dense(yb + 4 * 16384, BORA_DTYPE_F32, 2, rd);
    out[0] = dense(o, BORA_DTYPE_F32, 2, rd);
    out[1] = dense((char *)o + 4 * R * D, BORA_DTYPE_F32, 1, d1);
    out[2] = dense((char *)o + 4 * (R * D + D), BORA_DTYPE_F32, 1, d1);
    timed("layernorm_grad (4096, 768)", run_lngrad, &a, 4.0 * 3 * (double)R * D);

    a.op = BORA_OP_SCATTER_ADD;
    a.options = NULL;
    a.n_inputs = 2;
    a.n_outputs = 1;
    in[0] = dense(yb, BORA_DTYPE_I32, 1, r1); /* zeros: every row to id 0 */
    in[1] = dense(x, BORA_DTYPE_F32, 2, rd);
    out[0] = dense(o, BORA_DTYPE_F32, 2, vd);
    timed("scatter_add 4096 rows -> (50257, 768)", run_scatter, &a, (double)big + 4.0 * R * D);

    a.op = BORA_OP_SOFTMAX;
    a.n_inputs = 1;
    int64_t att[2] = {8 * 12 * 512, 512};
    in[0] = dense(x, BORA_DTYPE_F32, 2, att);
    out[0] = dense(o, BORA_DTYPE_F32, 2, att);
    timed("softmax (8 x 12 x 512, 512)", run_softmax, &a, 8.0 * 8 * 12 * 512 * 512);

    /* causal attention over GPT-2 small's heads: q, k, v, out, dout (8, 12, 512, 64) in x,
     * lse (8, 12, 512) in y, the gradients in o */
    bora_opt_attention ao = {sizeof ao, 1, 0.125, 0, 0, 0, 0, 0, 0.0};
    int64_t qd[4] = {8, 12, 512, 64}, ld[3] = {8, 12, 512}, qn = 8 * 12 * 512 * 64;
    float *xf = x, *of = o;
    for (int i = 0; i < 5; i++)
        in[i] = dense(xf + i * qn, BORA_DTYPE_F32, 4, qd);
    a.op = BORA_OP_ATTENTION;
    a.options = &ao;
    a.n_inputs = 3;
    a.n_outputs = 2;
    out[0] = in[3];
    out[1] = dense(y, BORA_DTYPE_F32, 3, ld);
    timed("attention (8, 12, 512, 64), causal", run_attention, &a, 4.0 * 4 * (double)qn);
    a.op = BORA_OP_ATTENTION_GRAD;
    a.n_inputs = 6;
    a.n_outputs = 3;
    in[5] = in[4];
    in[4] = dense(y, BORA_DTYPE_F32, 3, ld);
    for (int i = 0; i < 3; i++)
        out[i] = dense(of + i * qn, BORA_DTYPE_F32, 4, qd);
    timed("attention_grad (8, 12, 512, 64), causal", run_attention, &a, 4.0 * 8 * (double)qn);
    return 0;
}
