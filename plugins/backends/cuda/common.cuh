/* plugins/backends/cuda/common.cuh — what the kernel files share: the block size, the
 * grid-stride loop and its grid, and the block reductions (a fixed tree over CU_THREADS partials,
 * so a sum's order depends on the block size alone). */
#ifndef BORA_CUDA_COMMON_CUH
#define BORA_CUDA_COMMON_CUH

#include <stdint.h>

#define CU_THREADS 256 /* threads per block everywhere (the trees below assume a power of two) */

#define GRID_LOOP(i, n)                                                       \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
         i += (int64_t)blockDim.x * gridDim.x)

/* Blocks for a grid-stride loop over n elements (at most 2^20). */
static inline unsigned grid_for(int64_t n)
{
    int64_t g = (n + CU_THREADS - 1) / CU_THREADS;
    return (unsigned)(g < 1 ? 1 : g > (1 << 20) ? (1 << 20) : g);
}

/* The sum and the max of one double per thread of a CU_THREADS block, sh CU_THREADS doubles of
 * shared memory; every thread gets the result. */
static __device__ __forceinline__ double block_sum(double v, double *sh)
{
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = CU_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s)
            sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();
    return r;
}

static __device__ __forceinline__ double block_max(double v, double *sh)
{
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = CU_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s)
            sh[threadIdx.x] =
                sh[threadIdx.x + s] > sh[threadIdx.x] ? sh[threadIdx.x + s] : sh[threadIdx.x];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();
    return r;
}

#endif
