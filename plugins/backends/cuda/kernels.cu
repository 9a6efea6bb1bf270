/* plugins/backends/cuda/kernels.cu — the CUDA backend's kernels, written once over the element
 * type T (float or double) and launched by the C side through cuda.h's launchers.
 *
 * Every kernel takes strided tensors (bora_tensor_desc passed by value). Determinism: no atomics;
 * every sum has one order fixed by the shape alone (a block of CU_THREADS threads owns an
 * output, each thread sums a fixed stride of the elements in double, then a fixed tree adds the
 * threads' partials), so the bits never depend on timing. Sums accumulate in double, as the CPU
 * backend's plain kernels do. */
#include "common.cuh"
#include "cuda.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* gridDim.x's limit: a kernel with a block per row or output checks its count against it */
#define CU_MAX_BLOCKS 0x7fffffff

/* ---- indexing ------------------------------------------------------------------------------ */

/* The offset (in elements) of flat row-major index e over dims, with t's strides. */
__device__ __forceinline__ int64_t offset_of(const bora_tensor_desc &t, const int64_t *dims, int nd,
                                             int64_t e)
{
    int64_t off = 0;
    for (int i = nd - 1; i >= 0; i--) {
        int64_t d = dims[i];
        off += (e % d) * t.strides[i];
        e /= d;
    }
    return off;
}

/* Offset of row r (all axes but the last) of t. */
__device__ __forceinline__ int64_t row_offset(const bora_tensor_desc &t, int64_t r)
{
    int64_t off = 0;
    for (int i = t.ndim - 2; i >= 0; i--) {
        off += (r % t.dims[i]) * t.strides[i];
        r /= t.dims[i];
    }
    return off;
}

static int64_t numel(const bora_tensor_desc *t)
{
    return bora_tensor_desc_numel(t);
}

static int64_t rows_of(const bora_tensor_desc *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim - 1; i++)
        n *= t->dims[i];
    return n;
}

/* Blocks for a grid-stride loop over n elements. */
/* t's strides are the row-major strides of shape's dims (t is an operand aligned to shape, an
 * output): then element e of shape sits at offset e of t. */
static int dense_over(const bora_tensor_desc *t, const bora_tensor_desc *shape)
{
    int64_t s = 1;
    for (int i = shape->ndim - 1; i >= 0; i--) {
        if (shape->dims[i] != 1 && t->strides[i] != s)
            return 0;
        s *= shape->dims[i];
    }
    return 1;
}


/* ---- block reductions: a fixed tree over CU_THREADS partials ------------------------------- */


/* ---- element types -------------------------------------------------------------------------- */

/* bfloat16: the top half of an f32, rounded to nearest even (NaN stays NaN). */
__device__ __forceinline__ float bf16_to_f32(uint16_t h)
{
    return __uint_as_float((uint32_t)h << 16);
}

__device__ __forceinline__ uint16_t f32_to_bf16(float f)
{
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

__device__ __forceinline__ double load_any(const void *p, int dtype, int64_t i)
{
    switch (dtype) {
    case BORA_DTYPE_BF16: return bf16_to_f32(((const uint16_t *)p)[i]);
    case BORA_DTYPE_F32: return ((const float *)p)[i];
    case BORA_DTYPE_F64: return ((const double *)p)[i];
    case BORA_DTYPE_I32: return ((const int32_t *)p)[i];
    default: return (double)((const int64_t *)p)[i];
    }
}

__device__ __forceinline__ void store_any(void *p, int dtype, int64_t i, double v)
{
    switch (dtype) {
    case BORA_DTYPE_BF16: ((uint16_t *)p)[i] = f32_to_bf16((float)v); break;
    case BORA_DTYPE_F32: ((float *)p)[i] = (float)v; break;
    case BORA_DTYPE_F64: ((double *)p)[i] = v; break;
    case BORA_DTYPE_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case BORA_DTYPE_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    default: ((int64_t *)p)[i] = (int64_t)v; break;
    }
}

/* ---- copy, fill, iota ------------------------------------------------------------------------ */

/* Same-dtype copies move the bits (an i64 or a NaN payload survives); casts go through double,
 * which holds every f32, bf16 and i32 exactly. */
__global__ void k_copy(bora_tensor_desc o, bora_tensor_desc x, int64_t n, int size)
{
    GRID_LOOP(e, n)
    {
        int64_t oo = offset_of(o, o.dims, o.ndim, e), xo = offset_of(x, o.dims, o.ndim, e);
        if (o.dtype == x.dtype) {
            if (size == 8)
                ((uint64_t *)o.data)[oo] = ((const uint64_t *)x.data)[xo];
            else if (size == 4)
                ((uint32_t *)o.data)[oo] = ((const uint32_t *)x.data)[xo];
            else
                ((uint16_t *)o.data)[oo] = ((const uint16_t *)x.data)[xo];
        } else {
            store_any(o.data, o.dtype, oo, load_any(x.data, x.dtype, xo));
        }
    }
}

extern "C" cudaError_t cuk_copy(cudaStream_t s, const bora_kernel_args *a)
{
    const bora_tensor_desc *o = &a->outputs[0], *x = &a->inputs[0];
    int64_t n = numel(o);
    if (n == 0)
        return cudaSuccess;
    if (o->dtype == x->dtype && dense_over(o, o) && dense_over(x, o)) {
        if (o->data == x->data)
            return cudaSuccess;
        return cudaMemcpyAsync(o->data, x->data, (size_t)n * bora_dtype_size(o->dtype),
                               cudaMemcpyDeviceToDevice, s);
    }
    k_copy<<<grid_for(n), CU_THREADS, 0, s>>>(*o, *x, n, (int)bora_dtype_size(o->dtype));
    return cudaGetLastError();
}

__global__ void k_fill(bora_tensor_desc o, int64_t n, double v)
{
    GRID_LOOP(e, n)
    {
        store_any(o.data, o.dtype, offset_of(o, o.dims, o.ndim, e), v);
    }
}

extern "C" cudaError_t cuk_fill(cudaStream_t s, const bora_kernel_args *a)
{
    const bora_tensor_desc *o = &a->outputs[0];
    int64_t n = numel(o);
    if (n == 0)
        return cudaSuccess;
    k_fill<<<grid_for(n), CU_THREADS, 0, s>>>(*o, n, ((const bora_opt_scalar *)a->options)->value);
    return cudaGetLastError();
}

__global__ void k_iota(bora_tensor_desc o, double start, double step)
{
    GRID_LOOP(i, o.dims[0])
    {
        store_any(o.data, o.dtype, i * o.strides[0], start + step * (double)i);
    }
}

extern "C" cudaError_t cuk_iota(cudaStream_t s, const bora_kernel_args *a)
{
    const bora_tensor_desc *o = &a->outputs[0];
    const bora_opt_iota *opt = (const bora_opt_iota *)a->options;
    if (o->dims[0] == 0)
        return cudaSuccess;
    k_iota<<<grid_for(o->dims[0]), CU_THREADS, 0, s>>>(*o, opt->start, opt->step);
    return cudaGetLastError();
}

/* ---- elementwise ----------------------------------------------------------------------------- */

__device__ __forceinline__ float d_exp(float x)
{
    return expf(x);
}
__device__ __forceinline__ double d_exp(double x)
{
    return exp(x);
}
__device__ __forceinline__ float d_log(float x)
{
    return logf(x);
}
__device__ __forceinline__ double d_log(double x)
{
    return log(x);
}
__device__ __forceinline__ float d_sqrt(float x)
{
    return sqrtf(x);
}
__device__ __forceinline__ double d_sqrt(double x)
{
    return sqrt(x);
}
__device__ __forceinline__ float d_tanh(float x)
{
    return tanhf(x);
}
__device__ __forceinline__ double d_tanh(double x)
{
    return tanh(x);
}
__device__ __forceinline__ float d_erf(float x)
{
    return erff(x);
}
__device__ __forceinline__ double d_erf(double x)
{
    return erf(x);
}
__device__ __forceinline__ float d_sin(float x)
{
    return sinf(x);
}
__device__ __forceinline__ double d_sin(double x)
{
    return sin(x);
}
__device__ __forceinline__ float d_cos(float x)
{
    return cosf(x);
}
__device__ __forceinline__ double d_cos(double x)
{
    return cos(x);
}
__device__ __forceinline__ float d_abs(float x)
{
    return fabsf(x);
}
__device__ __forceinline__ double d_abs(double x)
{
    return fabs(x);
}

/* The formulas are the CPU backend's (kernels_t.h, elem.h), in T. */
template <typename T> __device__ T act(int op, T x)
{
    switch (op) {
    case BORA_OP_NEG: return -x;
    case BORA_OP_EXP: return d_exp(x);
    case BORA_OP_LOG: return d_log(x);
    case BORA_OP_SQRT: return d_sqrt(x);
    case BORA_OP_RSQRT: return (T)1 / d_sqrt(x);
    case BORA_OP_TANH: return d_tanh(x);
    case BORA_OP_SIGMOID: return (T)1 / ((T)1 + d_exp(-x));
    case BORA_OP_RELU: return x > 0 ? x : (T)0;
    case BORA_OP_SILU: return x / ((T)1 + d_exp(-x));
    case BORA_OP_GELU_TANH: {
        T c = (T)0.7978845608028654; /* sqrt(2/pi) */
        return (T)0.5 * x * ((T)1 + d_tanh(c * (x + (T)0.044715 * x * x * x)));
    }
    case BORA_OP_GELU_EXACT: return (T)0.5 * x * ((T)1 + d_erf(x * (T)0.7071067811865476));
    case BORA_OP_SIN: return d_sin(x);
    case BORA_OP_COS: return d_cos(x);
    case BORA_OP_ABS: return d_abs(x);
    case BORA_OP_SIGN: return x > 0 ? (T)1 : x < 0 ? (T)-1 : x;
    default: return x;
    }
}

/* d act(x) / dx, times dy. */
template <typename T> __device__ T act_grad(int op, T x, T dy)
{
    switch (op) {
    case BORA_OP_TANH: {
        T t = d_tanh(x);
        return dy * ((T)1 - t * t);
    }
    case BORA_OP_SIGMOID: {
        T s = (T)1 / ((T)1 + d_exp(-x));
        return dy * s * ((T)1 - s);
    }
    case BORA_OP_RELU: return x > 0 ? dy : (T)0;
    case BORA_OP_SILU: {
        T s = (T)1 / ((T)1 + d_exp(-x));
        return dy * s * ((T)1 + x * ((T)1 - s));
    }
    case BORA_OP_GELU_TANH: {
        T c = (T)0.7978845608028654, a = (T)0.044715;
        T u = c * (x + a * x * x * x), t = d_tanh(u);
        T du = c * ((T)1 + (T)3 * a * x * x);
        return dy * ((T)0.5 * ((T)1 + t) + (T)0.5 * x * ((T)1 - t * t) * du);
    }
    case BORA_OP_GELU_EXACT: {
        T cdf = (T)0.5 * ((T)1 + d_erf(x * (T)0.7071067811865476));
        T pdf = d_exp((T)-0.5 * x * x) * (T)0.3989422804014327;
        return dy * (cdf + x * pdf);
    }
    default: return 0;
    }
}

template <typename T> __device__ __forceinline__ T elem(int op, int act_op, T value, T x, T y, T z)
{
    switch (op) {
    case BORA_OP_FILL: return value;
    case BORA_OP_ADD: return x + y;
    case BORA_OP_SUB: return x - y;
    case BORA_OP_MUL: return x * y;
    case BORA_OP_DIV: return x / y;
    case BORA_OP_SCALE: return x * value;
    case BORA_OP_MINIMUM: return y < x || y != y ? y : x;
    case BORA_OP_MAXIMUM: return y > x || y != y ? y : x;
    case BORA_OP_LESS: return x < y ? (T)1 : (T)0;
    case BORA_OP_LESS_EQUAL: return x <= y ? (T)1 : (T)0;
    case BORA_OP_EQUAL: return x == y ? (T)1 : (T)0;
    case BORA_OP_NOT_EQUAL: return x != y ? (T)1 : (T)0;
    case BORA_OP_WHERE: return x != 0 ? y : z;
    case BORA_OP_ACT_GRAD:
        return act_op == BORA_OP_MAX ? (x == y ? z : (T)0) : act_grad<T>(act_op, x, y);
    default: return act<T>(op, x);
    }
}

/* The op is a template constant: each kernel holds its own formula alone (one kernel for every op,
 * switching per element, ran at a fiftieth of the memory's speed). */

/* Every operand's element e at offset e, or (a broadcast scalar, flagged in `scalar`: bit k for
 * input k) at 0. */
template <typename T, int OP>
__global__ void k_elem_dense(int act_op, T value, int nin, int scalar, T *o, const T *x, const T *y,
                             const T *z, int64_t n)
{
    GRID_LOOP(e, n)
    {
        T xv = nin > 0 ? x[scalar & 1 ? 0 : e] : (T)0;
        T yv = nin > 1 ? y[scalar & 2 ? 0 : e] : (T)0;
        T zv = nin > 2 ? z[scalar & 4 ? 0 : e] : (T)0;
        o[e] = elem<T>(OP, act_op, value, xv, yv, zv);
    }
}

/* Any strides: the output's index split once into coordinates, each operand's offset summed from
 * them (0 along a broadcast axis); I is int where every offset fits, int64_t elsewhere. */
template <typename I> struct elem_index {
    int nd;
    I dims[BORA_MAX_DIMS];
    I strides[4][BORA_MAX_DIMS]; /* the output, then the inputs */
};

template <typename T, int OP, typename I>
__global__ void k_elem_strided(int act_op, T value, int nin, elem_index<I> ix, T *o, const T *x,
                               const T *y, const T *z, int64_t n)
{
    GRID_LOOP(e64, n)
    {
        I e = (I)e64, off[4] = {0, 0, 0, 0};
        for (int i = ix.nd - 1; i >= 0; i--) {
            I c = e % ix.dims[i];
            e /= ix.dims[i];
            for (int k = 0; k < 4; k++)
                off[k] += c * ix.strides[k][i];
        }
        T xv = nin > 0 ? x[off[1]] : (T)0;
        T yv = nin > 1 ? y[off[2]] : (T)0;
        T zv = nin > 2 ? z[off[3]] : (T)0;
        o[off[0]] = elem<T>(OP, act_op, value, xv, yv, zv);
    }
}

/* The strided kernel's index for o and the inputs; 1 when every offset fits in an int. */
template <typename I>
static int elem_index_of(const bora_tensor_desc *o, const bora_tensor_desc *in, int nin,
                         elem_index<I> *ix)
{
    memset(ix, 0, sizeof *ix);
    ix->nd = o->ndim;
    int fits = 1;
    for (int k = 0; k < 4; k++) {
        const bora_tensor_desc *t = k == 0 ? o : k <= nin ? &in[k - 1] : NULL;
        int64_t reach = 0;
        for (int i = 0; t && i < o->ndim; i++) {
            int64_t st = o->dims[i] == 1 ? 0 : t->strides[i];
            ix->strides[k][i] = (I)st;
            reach += (st < 0 ? -st : st) * (o->dims[i] - 1);
        }
        fits &= reach < 0x7fffffff;
    }
    for (int i = 0; i < o->ndim; i++)
        ix->dims[i] = (I)o->dims[i];
    return fits;
}

/* 1 for a broadcast scalar over shape (stride 0 along every axis longer than 1). */
static int scalar_over(const bora_tensor_desc *t, const bora_tensor_desc *shape)
{
    for (int i = 0; i < shape->ndim; i++)
        if (shape->dims[i] != 1 && t->strides[i] != 0)
            return 0;
    return 1;
}

template <typename T, int OP>
static void elem_launch(cudaStream_t s, const bora_kernel_args *a, int act_op, T value, int64_t n)
{
    const bora_tensor_desc *o = &a->outputs[0];
    int nin = (int)a->n_inputs, scalar = 0, all_dense = dense_over(o, o);
    bora_tensor_desc in[3];
    memset(in, 0, sizeof in);
    for (int k = 0; k < nin && k < 3; k++) {
        in[k] = a->inputs[k];
        if (scalar_over(&in[k], o) && n > 1)
            scalar |= 1 << k;
        else if (!dense_over(&in[k], o))
            all_dense = 0;
    }
    if (all_dense)
        k_elem_dense<T, OP><<<grid_for(n), CU_THREADS, 0, s>>>(
            act_op, value, nin, scalar, (T *)o->data, (const T *)in[0].data, (const T *)in[1].data,
            (const T *)in[2].data, n);
    else {
        elem_index<int> ix32;
        elem_index<int64_t> ix64;
        const T *xp = (const T *)in[0].data, *yp = (const T *)in[1].data,
                *zp = (const T *)in[2].data;
        if (n < 0x7fffffff && elem_index_of(o, in, nin, &ix32)) {
            k_elem_strided<T, OP, int><<<grid_for(n), CU_THREADS, 0, s>>>(
                act_op, value, nin, ix32, (T *)o->data, xp, yp, zp, n);
        } else {
            elem_index_of(o, in, nin, &ix64);
            k_elem_strided<T, OP, int64_t><<<grid_for(n), CU_THREADS, 0, s>>>(
                act_op, value, nin, ix64, (T *)o->data, xp, yp, zp, n);
        }
    }
}

// clang-format off
#define ELEM_OPS(X)                                                                               \
    X(BORA_OP_FILL) X(BORA_OP_ADD) X(BORA_OP_SUB) X(BORA_OP_MUL) X(BORA_OP_DIV) X(BORA_OP_NEG)     \
    X(BORA_OP_EXP) X(BORA_OP_LOG) X(BORA_OP_SQRT) X(BORA_OP_RSQRT) X(BORA_OP_TANH)               \
    X(BORA_OP_SIGMOID) X(BORA_OP_RELU) X(BORA_OP_SILU) X(BORA_OP_GELU_TANH)                       \
    X(BORA_OP_GELU_EXACT) X(BORA_OP_SCALE) X(BORA_OP_ACT_GRAD) X(BORA_OP_SIN) X(BORA_OP_COS)      \
    X(BORA_OP_ABS) X(BORA_OP_SIGN) X(BORA_OP_MINIMUM) X(BORA_OP_MAXIMUM) X(BORA_OP_LESS)         \
    X(BORA_OP_LESS_EQUAL) X(BORA_OP_EQUAL) X(BORA_OP_NOT_EQUAL) X(BORA_OP_WHERE)
// clang-format on

template <typename T> static cudaError_t elementwise(cudaStream_t s, const bora_kernel_args *a)
{
    int64_t n = numel(&a->outputs[0]);
    if (n == 0)
        return cudaSuccess;
    int op = (int)a->op;
    int act_op = op == BORA_OP_ACT_GRAD ? ((const bora_opt_act *)a->options)->op : 0;
    T value = op == BORA_OP_FILL || op == BORA_OP_SCALE
                  ? (T)((const bora_opt_scalar *)a->options)->value
                  : (T)0;
    switch (op) {
#define ELEM_CASE(o) \
    case o: elem_launch<T, o>(s, a, act_op, value, n); break;
        ELEM_OPS(ELEM_CASE)
#undef ELEM_CASE
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_elementwise(cudaStream_t s, const bora_kernel_args *a)
{
    return a->outputs[0].dtype == BORA_DTYPE_F64 ? elementwise<double>(s, a)
                                                 : elementwise<float>(s, a);
}

/* ---- reductions -------------------------------------------------------------------------------- */

/* out (outer...) = Σ (or max) over the input's trailing n_red elements; with squares, each square
 * rounded to T before the sum (the bits of MUL then SUM). How the work is split depends on the
 * shape alone (reduce_plan), so a shape always sums in the same order:
 *   RED_THREAD  one thread per output, its elements in order (many outputs, short sums: the
 *               batch axis of a bias gradient);
 *   RED_BLOCK   one block per output, a fixed stride per thread and a fixed tree;
 *   RED_SPLIT   few outputs over long sums (a gradient norm): each output's elements cut into
 *               `parts` equal runs, a block per run into a double partial, then a block per
 *               output adds its partials by the same tree. */
enum { RED_THREAD = 1, RED_BLOCK = 2, RED_SPLIT = 3 };

typedef struct reduce_shape {
    int outer_nd;
    int inner_dense; /* the reduced elements of an output are one unit-stride run */
    int is_max, squares;
    int64_t n_out, n_red, parts, run;
} reduce_shape;

/* Offset of reduced element j of the output at xo. */
__device__ __forceinline__ int64_t reduced_at(const bora_tensor_desc &x, const reduce_shape &rs,
                                              int64_t xo, int64_t j)
{
    if (rs.inner_dense)
        return xo + j;
    for (int i = x.ndim - 1; i >= rs.outer_nd; i--) {
        xo += (j % x.dims[i]) * x.strides[i];
        j /= x.dims[i];
    }
    return xo;
}

/* Offsets of output r in x and in o. */
__device__ __forceinline__ void outer_at(const bora_tensor_desc &x, const bora_tensor_desc &o,
                                         const reduce_shape &rs, int64_t r, int64_t *xo,
                                         int64_t *oo)
{
    *xo = 0;
    *oo = 0;
    for (int i = rs.outer_nd - 1; i >= 0; i--) {
        int64_t idx = r % x.dims[i];
        r /= x.dims[i];
        *xo += idx * x.strides[i];
        *oo += idx * o.strides[i];
    }
}

template <typename T>
__device__ __forceinline__ double reduce_term(const bora_tensor_desc &x, const reduce_shape &rs,
                                              int64_t at)
{
    T t = ((const T *)x.data)[at];
    return rs.squares ? (double)(T)(t * t) : (double)t;
}

__device__ __forceinline__ double reduce_step(int is_max, double acc, double v)
{
    return is_max ? (v > acc ? v : acc) : acc + v;
}

template <typename T>
__global__ void k_reduce_thread(bora_tensor_desc x, bora_tensor_desc o, reduce_shape rs)
{
    GRID_LOOP(r, rs.n_out)
    {
        int64_t xo, oo;
        outer_at(x, o, rs, r, &xo, &oo);
        double acc = rs.is_max ? -INFINITY : 0.0;
        for (int64_t j = 0; j < rs.n_red; j++)
            acc = reduce_step(rs.is_max, acc, reduce_term<T>(x, rs, reduced_at(x, rs, xo, j)));
        ((T *)o.data)[oo] = (T)acc;
    }
}

/* RED_BLOCK (partial NULL: the block's output is the result) and RED_SPLIT's first stage (block
 * b: output b / parts, run b % parts, into partial[b]). */
template <typename T>
__global__ void k_reduce_block(bora_tensor_desc x, bora_tensor_desc o, reduce_shape rs,
                               double *partial)
{
    __shared__ double sh[CU_THREADS];
    int64_t r = partial ? blockIdx.x / rs.parts : blockIdx.x;
    int64_t j0 = partial ? (blockIdx.x % rs.parts) * rs.run : 0;
    int64_t j1 = partial ? (j0 + rs.run < rs.n_red ? j0 + rs.run : rs.n_red) : rs.n_red;
    int64_t xo, oo;
    outer_at(x, o, rs, r, &xo, &oo);
    double acc = rs.is_max ? -INFINITY : 0.0;
    for (int64_t j = j0 + threadIdx.x; j < j1; j += CU_THREADS)
        acc = reduce_step(rs.is_max, acc, reduce_term<T>(x, rs, reduced_at(x, rs, xo, j)));
    acc = rs.is_max ? block_max(acc, sh) : block_sum(acc, sh);
    if (threadIdx.x == 0) {
        if (partial)
            partial[blockIdx.x] = acc;
        else
            ((T *)o.data)[oo] = (T)acc;
    }
}

/* RED_SPLIT's second stage: block r adds (or takes the max of) output r's partials. */
template <typename T>
__global__ void k_reduce_partials(bora_tensor_desc x, bora_tensor_desc o, reduce_shape rs,
                                  const double *partial)
{
    __shared__ double sh[CU_THREADS];
    int64_t r = blockIdx.x, xo, oo;
    outer_at(x, o, rs, r, &xo, &oo);
    double acc = rs.is_max ? -INFINITY : 0.0;
    for (int64_t p = threadIdx.x; p < rs.parts; p += CU_THREADS)
        acc = reduce_step(rs.is_max, acc, partial[r * rs.parts + p]);
    acc = rs.is_max ? block_max(acc, sh) : block_sum(acc, sh);
    if (threadIdx.x == 0)
        ((T *)o.data)[oo] = (T)acc;
}

/* The split for a's shape: RED_THREAD, RED_BLOCK or RED_SPLIT, and rs filled. */
static int reduce_plan(const bora_kernel_args *a, reduce_shape *rs)
{
    const bora_tensor_desc *x = &a->inputs[0];
    memset(rs, 0, sizeof *rs);
    rs->outer_nd = x->ndim - ((const bora_opt_reduce *)a->options)->n_reduced;
    rs->is_max = a->op == BORA_OP_MAX;
    rs->squares = a->op == BORA_OP_SUM_SQUARES;
    rs->n_out = 1;
    rs->n_red = 1;
    for (int i = 0; i < rs->outer_nd; i++)
        rs->n_out *= x->dims[i];
    int64_t stride = 1;
    rs->inner_dense = 1;
    for (int i = x->ndim - 1; i >= rs->outer_nd; i--) {
        rs->n_red *= x->dims[i];
        if (x->dims[i] != 1 && x->strides[i] != stride)
            rs->inner_dense = 0;
        stride *= x->dims[i];
    }
    if (rs->n_red <= 64 || (rs->n_out >= 16384 && rs->n_red <= 4096))
        return RED_THREAD;
    if (rs->n_out >= 512 || rs->n_red < 65536)
        return RED_BLOCK;
    rs->parts = (rs->n_red + 32767) / 32768; /* runs of 32768 elements, at most 4096 of them */
    if (rs->parts > 4096)
        rs->parts = 4096;
    rs->run = (rs->n_red + rs->parts - 1) / rs->parts;
    return RED_SPLIT;
}

extern "C" size_t cuk_reduce_scratch(const bora_kernel_args *a)
{
    reduce_shape rs;
    return reduce_plan(a, &rs) == RED_SPLIT ? sizeof(double) * (size_t)(rs.n_out * rs.parts) : 0;
}

template <typename T>
static cudaError_t reduce(cudaStream_t s, const bora_kernel_args *a, double *scratch)
{
    const bora_tensor_desc *x = &a->inputs[0], *o = &a->outputs[0];
    reduce_shape rs;
    int plan = reduce_plan(a, &rs);
    if (rs.n_out == 0)
        return cudaSuccess;
    if (rs.n_out * (rs.parts ? rs.parts : 1) > CU_MAX_BLOCKS)
        return cudaErrorInvalidConfiguration;
    if (plan == RED_THREAD) {
        k_reduce_thread<T><<<grid_for(rs.n_out), CU_THREADS, 0, s>>>(*x, *o, rs);
    } else if (plan == RED_BLOCK) {
        k_reduce_block<T><<<(unsigned)rs.n_out, CU_THREADS, 0, s>>>(*x, *o, rs, NULL);
    } else {
        k_reduce_block<T>
            <<<(unsigned)(rs.n_out * rs.parts), CU_THREADS, 0, s>>>(*x, *o, rs, scratch);
        k_reduce_partials<T><<<(unsigned)rs.n_out, CU_THREADS, 0, s>>>(*x, *o, rs, scratch);
    }
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_reduce(cudaStream_t s, const bora_kernel_args *a, double *scratch)
{
    return a->inputs[0].dtype == BORA_DTYPE_F64 ? reduce<double>(s, a, scratch)
                                                : reduce<float>(s, a, scratch);
}

/* ---- rows: softmax, layernorm ------------------------------------------------------------------ */

template <typename T> __global__ void k_softmax(bora_tensor_desc x, bora_tensor_desc o, int log_)
{
    __shared__ double sh[CU_THREADS];
    int64_t r = blockIdx.x, n = x.dims[x.ndim - 1];
    int64_t sx = x.strides[x.ndim - 1], so = o.strides[o.ndim - 1];
    const T *xr = (const T *)x.data + row_offset(x, r);
    T *orow = (T *)o.data + row_offset(o, r);
    double m = -INFINITY, sum = 0;
    for (int64_t i = threadIdx.x; i < n; i += CU_THREADS)
        m = (double)xr[i * sx] > m ? (double)xr[i * sx] : m;
    m = block_max(m, sh);
    for (int64_t i = threadIdx.x; i < n; i += CU_THREADS)
        sum += exp((double)xr[i * sx] - m);
    double lse = m + log(block_sum(sum, sh));
    for (int64_t i = threadIdx.x; i < n; i += CU_THREADS)
        orow[i * so] = log_ ? (T)((double)xr[i * sx] - lse) : (T)exp((double)xr[i * sx] - lse);
}

extern "C" cudaError_t cuk_softmax(cudaStream_t s, const bora_kernel_args *a)
{
    const bora_tensor_desc *x = &a->inputs[0], *o = &a->outputs[0];
    int64_t rows = rows_of(x);
    if (rows == 0 || x->dims[x->ndim - 1] == 0)
        return cudaSuccess;
    if (rows > CU_MAX_BLOCKS) /* a block per row */
        return cudaErrorInvalidConfiguration;
    int log_ = a->op == BORA_OP_LOG_SOFTMAX;
    if (x->dtype == BORA_DTYPE_F64)
        k_softmax<double><<<(unsigned)rows, CU_THREADS, 0, s>>>(*x, *o, log_);
    else
        k_softmax<float><<<(unsigned)rows, CU_THREADS, 0, s>>>(*x, *o, log_);
    return cudaGetLastError();
}

template <typename T>
__global__ void k_layernorm(bora_tensor_desc x, bora_tensor_desc gm, bora_tensor_desc bt,
                            bora_tensor_desc y, T *mu, T *rs, double eps)
{
    __shared__ double sh[CU_THREADS];
    int64_t r = blockIdx.x, n = x.dims[x.ndim - 1];
    int64_t sx = x.strides[x.ndim - 1], sy = y.strides[y.ndim - 1];
    const T *xr = (const T *)x.data + row_offset(x, r);
    const T *gamma = (const T *)gm.data, *beta = (const T *)bt.data;
    T *yr = (T *)y.data + row_offset(y, r);
    double mean = 0, var = 0;
    for (int64_t i = threadIdx.x; i < n; i += CU_THREADS)
        mean += (double)xr[i * sx];
    mean = block_sum(mean, sh) / (double)n;
    for (int64_t i = threadIdx.x; i < n; i += CU_THREADS) {
        double d = (double)xr[i * sx] - mean;
        var += d * d;
    }
    var = block_sum(var, sh) / (double)n;
    double rstd = 1.0 / sqrt(var + eps);
    for (int64_t i = threadIdx.x; i < n; i += CU_THREADS)
        yr[i * sy] = (T)(((double)xr[i * sx] - mean) * rstd * (double)gamma[i * gm.strides[0]] +
                         (double)beta[i * bt.strides[0]]);
    if (threadIdx.x == 0) { /* mean and rstd are fresh, dense values */
        mu[r] = (T)mean;
        rs[r] = (T)rstd;
    }
}

extern "C" cudaError_t cuk_layernorm(cudaStream_t s, const bora_kernel_args *a)
{
    const bora_tensor_desc *x = &a->inputs[0];
    int64_t rows = rows_of(x);
    double eps = ((const bora_opt_norm *)a->options)->eps;
    if (rows == 0)
        return cudaSuccess;
    if (rows > CU_MAX_BLOCKS) /* a block per row */
        return cudaErrorInvalidConfiguration;
    if (x->dtype == BORA_DTYPE_F64)
        k_layernorm<double><<<(unsigned)rows, CU_THREADS, 0, s>>>(
            *x, a->inputs[1], a->inputs[2], a->outputs[0], (double *)a->outputs[1].data,
            (double *)a->outputs[2].data, eps);
    else
        k_layernorm<float><<<(unsigned)rows, CU_THREADS, 0, s>>>(
            *x, a->inputs[1], a->inputs[2], a->outputs[0], (float *)a->outputs[1].data,
            (float *)a->outputs[2].data, eps);
    return cudaGetLastError();
}

/* dx per row: rstd · (g - mean(g) - x̂ · mean(g · x̂)) with g = dy · gamma. */
template <typename T>
__global__ void k_layernorm_dx(bora_tensor_desc x, bora_tensor_desc gm, const T *mean,
                               const T *rstd, bora_tensor_desc dy, bora_tensor_desc dx)
{
    __shared__ double sh[CU_THREADS];
    int64_t r = blockIdx.x, n = x.dims[x.ndim - 1];
    int64_t sx = x.strides[x.ndim - 1], sdy = dy.strides[dy.ndim - 1];
    int64_t sdx = dx.strides[dx.ndim - 1], sg = gm.strides[0];
    const T *xr = (const T *)x.data + row_offset(x, r), *gamma = (const T *)gm.data;
    const T *dyr = (const T *)dy.data + row_offset(dy, r);
    T *dxr = (T *)dx.data + row_offset(dx, r);
    double m = (double)mean[r], rs = (double)rstd[r], s1 = 0, s2 = 0;
    for (int64_t i = threadIdx.x; i < n; i += CU_THREADS) {
        double xhat = ((double)xr[i * sx] - m) * rs;
        double g = (double)dyr[i * sdy] * (double)gamma[i * sg];
        s1 += g;
        s2 += g * xhat;
    }
    s1 = block_sum(s1, sh) / (double)n;
    s2 = block_sum(s2, sh) / (double)n;
    for (int64_t i = threadIdx.x; i < n; i += CU_THREADS) {
        double xhat = ((double)xr[i * sx] - m) * rs;
        double g = (double)dyr[i * sdy] * (double)gamma[i * sg];
        dxr[i * sdx] = (T)(rs * (g - s1 - xhat * s2));
    }
}

/* dgamma, dbeta: the rows cut into runs of LN_RUN; thread (run, column) sums its run's rows in
 * order into partial sums (gp, bp), then one thread per column adds its runs in order. */
#define LN_RUN 64

static int64_t ln_runs(const bora_kernel_args *a)
{
    int64_t rows = rows_of(&a->inputs[0]);
    return rows > 0 ? (rows + LN_RUN - 1) / LN_RUN : 1;
}

extern "C" size_t cuk_layernorm_grad_scratch(const bora_kernel_args *a)
{
    const bora_tensor_desc *x = &a->inputs[0];
    return 2 * sizeof(double) * (size_t)(ln_runs(a) * x->dims[x->ndim - 1]);
}

template <typename T>
__global__ void k_layernorm_dgb_runs(bora_tensor_desc x, const T *mean, const T *rstd,
                                     bora_tensor_desc dy, int64_t rows, int64_t runs, double *gp,
                                     double *bp)
{
    int64_t n = x.dims[x.ndim - 1];
    int64_t sx = x.strides[x.ndim - 1], sdy = dy.strides[dy.ndim - 1];
    GRID_LOOP(e, runs * n)
    {
        int64_t run = e / n, i = e % n, r1 = (run + 1) * LN_RUN < rows ? (run + 1) * LN_RUN : rows;
        double sg = 0, sb = 0;
        for (int64_t r = run * LN_RUN; r < r1; r++) {
            const T *xr = (const T *)x.data + row_offset(x, r);
            const T *dyr = (const T *)dy.data + row_offset(dy, r);
            double xhat = ((double)xr[i * sx] - (double)mean[r]) * (double)rstd[r];
            sg += (double)dyr[i * sdy] * xhat;
            sb += (double)dyr[i * sdy];
        }
        gp[e] = sg;
        bp[e] = sb;
    }
}

template <typename T>
__global__ void k_layernorm_dgb_sum(const double *gp, const double *bp, int64_t runs, int64_t n,
                                    bora_tensor_desc dg, bora_tensor_desc db)
{
    GRID_LOOP(i, n)
    {
        double sg = 0, sb = 0;
        for (int64_t run = 0; run < runs; run++) {
            sg += gp[run * n + i];
            sb += bp[run * n + i];
        }
        ((T *)dg.data)[i * dg.strides[0]] = (T)sg;
        ((T *)db.data)[i * db.strides[0]] = (T)sb;
    }
}

template <typename T>
static cudaError_t layernorm_grad(cudaStream_t s, const bora_kernel_args *a, double *scratch)
{
    const bora_tensor_desc *x = &a->inputs[0];
    int64_t rows = rows_of(x), n = x->dims[x->ndim - 1], runs = ln_runs(a);
    const T *mean = (const T *)a->inputs[2].data, *rstd = (const T *)a->inputs[3].data;
    if (rows > CU_MAX_BLOCKS) /* a block per row */
        return cudaErrorInvalidConfiguration;
    if (rows > 0)
        k_layernorm_dx<T><<<(unsigned)rows, CU_THREADS, 0, s>>>(*x, a->inputs[1], mean, rstd,
                                                                a->inputs[4], a->outputs[0]);
    if (n > 0) {
        double *gp = scratch, *bp = scratch + runs * n;
        k_layernorm_dgb_runs<T><<<grid_for(runs * n), CU_THREADS, 0, s>>>(
            *x, mean, rstd, a->inputs[4], rows, runs, gp, bp);
        k_layernorm_dgb_sum<T>
            <<<grid_for(n), CU_THREADS, 0, s>>>(gp, bp, runs, n, a->outputs[1], a->outputs[2]);
    }
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_layernorm_grad(cudaStream_t s, const bora_kernel_args *a,
                                          double *scratch)
{
    return a->inputs[0].dtype == BORA_DTYPE_F64 ? layernorm_grad<double>(s, a, scratch)
                                                : layernorm_grad<float>(s, a, scratch);
}

/* ---- cross-entropy --------------------------------------------------------------------------- */

/* Per row: lse, and the row's loss lse - x[target] + z·lse² (0 for an ignored target) into
 * per_row; a target out of range counts nothing and sets flag. */
template <typename T>
__global__ void k_xent_rows(bora_tensor_desc x, bora_tensor_desc t, T *lse_out, double *per_row,
                            int ignore_index, double z_loss, int *flag)
{
    __shared__ double sh[CU_THREADS];
    int64_t r = blockIdx.x, V = x.dims[1], sx = x.strides[1];
    const T *xr = (const T *)x.data + r * x.strides[0];
    int32_t tgt = ((const int32_t *)t.data)[r * t.strides[0]];
    double m = -INFINITY, sum = 0;
    for (int64_t i = threadIdx.x; i < V; i += CU_THREADS)
        m = (double)xr[i * sx] > m ? (double)xr[i * sx] : m;
    m = block_max(m, sh);
    for (int64_t i = threadIdx.x; i < V; i += CU_THREADS)
        sum += exp((double)xr[i * sx] - m);
    double lse = m + log(block_sum(sum, sh));
    if (threadIdx.x != 0)
        return;
    lse_out[r] = (T)lse;
    if (tgt == ignore_index) {
        per_row[r] = 0;
    } else if (tgt < 0 || tgt >= V) {
        per_row[r] = 0;
        *flag = 1;
    } else {
        per_row[r] = lse - (double)xr[tgt * sx] + z_loss * lse * lse;
    }
}

/* The rows' losses summed by one block in a fixed order. */
template <typename T> __global__ void k_sum_rows(const double *per_row, int64_t rows, T *out)
{
    __shared__ double sh[CU_THREADS];
    double acc = 0;
    for (int64_t r = threadIdx.x; r < rows; r += CU_THREADS)
        acc += per_row[r];
    acc = block_sum(acc, sh);
    if (threadIdx.x == 0)
        *out = (T)acc;
}

template <typename T>
static cudaError_t xent(cudaStream_t s, const bora_kernel_args *a, double *per_row, int *flag)
{
    const bora_tensor_desc *x = &a->inputs[0];
    const bora_opt_xent *opt = (const bora_opt_xent *)a->options;
    int64_t rows = x->dims[0];
    if (rows > CU_MAX_BLOCKS) /* a block per row */
        return cudaErrorInvalidConfiguration;
    if (rows > 0)
        k_xent_rows<T><<<(unsigned)rows, CU_THREADS, 0, s>>>(*x, a->inputs[1],
                                                             (T *)a->outputs[1].data, per_row,
                                                             opt->ignore_index, opt->z_loss, flag);
    k_sum_rows<T><<<1, CU_THREADS, 0, s>>>(per_row, rows, (T *)a->outputs[0].data);
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_xent(cudaStream_t s, const bora_kernel_args *a, double *per_row,
                                int *flag)
{
    return a->inputs[0].dtype == BORA_DTYPE_F64 ? xent<double>(s, a, per_row, flag)
                                                : xent<float>(s, a, per_row, flag);
}

template <typename T>
__global__ void k_xent_grad(bora_tensor_desc x, bora_tensor_desc t, const T *lse, const T *dloss_p,
                            bora_tensor_desc o, int ignore_index, double z_loss, int64_t n)
{
    int64_t V = x.dims[1];
    double dloss = (double)*dloss_p;
    GRID_LOOP(e, n)
    {
        int64_t r = e / V, i = e % V;
        int32_t tgt = ((const int32_t *)t.data)[r * t.strides[0]];
        int skip = tgt == ignore_index || tgt < 0 || tgt >= V;
        double l = (double)lse[r], zf = 1.0 + 2.0 * z_loss * l;
        double p = exp((double)((const T *)x.data)[r * x.strides[0] + i * x.strides[1]] - l);
        double g = skip ? 0.0 : dloss * (p * zf - (i == tgt ? 1.0 : 0.0));
        ((T *)o.data)[r * o.strides[0] + i * o.strides[1]] = (T)g;
    }
}

template <typename T> static cudaError_t xent_grad(cudaStream_t s, const bora_kernel_args *a)
{
    const bora_tensor_desc *x = &a->inputs[0];
    const bora_opt_xent *opt = (const bora_opt_xent *)a->options;
    int64_t n = x->dims[0] * x->dims[1];
    if (n == 0)
        return cudaSuccess;
    k_xent_grad<T><<<grid_for(n), CU_THREADS, 0, s>>>(
        *x, a->inputs[1], (const T *)a->inputs[2].data, (const T *)a->inputs[3].data, a->outputs[0],
        opt->ignore_index, opt->z_loss, n);
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_xent_grad(cudaStream_t s, const bora_kernel_args *a)
{
    return a->inputs[0].dtype == BORA_DTYPE_F64 ? xent_grad<double>(s, a) : xent_grad<float>(s, a);
}

/* ---- embedding ------------------------------------------------------------------------------- */

template <typename T>
__global__ void k_gather(bora_tensor_desc tb, bora_tensor_desc ids, bora_tensor_desc o, int64_t n,
                         int *flag)
{
    int64_t D = tb.dims[1], V = tb.dims[0];
    GRID_LOOP(e, n)
    {
        int64_t r = e / D, i = e % D;
        int32_t id = ((const int32_t *)ids.data)[r * ids.strides[0]];
        if (id < 0 || id >= V) {
            *flag = 1;
            continue;
        }
        ((T *)o.data)[r * o.strides[0] + i * o.strides[1]] =
            ((const T *)tb.data)[id * tb.strides[0] + i * tb.strides[1]];
    }
}

extern "C" cudaError_t cuk_gather(cudaStream_t s, const bora_kernel_args *a, int *flag)
{
    const bora_tensor_desc *tb = &a->inputs[0], *ids = &a->inputs[1], *o = &a->outputs[0];
    int64_t n = ids->dims[0] * tb->dims[1];
    if (n == 0)
        return cudaSuccess;
    if (tb->dtype == BORA_DTYPE_F64)
        k_gather<double><<<grid_for(n), CU_THREADS, 0, s>>>(*tb, *ids, *o, n, flag);
    else
        k_gather<float><<<grid_for(n), CU_THREADS, 0, s>>>(*tb, *ids, *o, n, flag);
    return cudaGetLastError();
}

/* out (V, D) = init or zeros, then each column's rows added in row order by one thread: every
 * element's sum has the order of the rows, whatever the ids (no atomics). */
template <typename T>
__global__ void k_scatter_init(bora_tensor_desc o, bora_tensor_desc init, int has_init, int64_t n)
{
    int64_t D = o.dims[1];
    GRID_LOOP(e, n)
    {
        int64_t v = e / D, i = e % D;
        ((T *)o.data)[v * o.strides[0] + i * o.strides[1]] =
            has_init ? ((const T *)init.data)[v * init.strides[0] + i * init.strides[1]] : (T)0;
    }
}

template <typename T>
__global__ void k_scatter_cols(bora_tensor_desc ids, bora_tensor_desc src, bora_tensor_desc o)
{
    int64_t rows = ids.dims[0], V = o.dims[0], D = o.dims[1];
    GRID_LOOP(i, D)
    {
        for (int64_t r = 0; r < rows; r++) {
            int32_t id = ((const int32_t *)ids.data)[r * ids.strides[0]];
            if (id < 0 || id >= V)
                continue;
            ((T *)o.data)[id * o.strides[0] + i * o.strides[1]] +=
                ((const T *)src.data)[r * src.strides[0] + i * src.strides[1]];
        }
    }
}

template <typename T> static cudaError_t scatter_add(cudaStream_t s, const bora_kernel_args *a)
{
    const bora_tensor_desc *o = &a->outputs[0];
    int has_init = a->n_inputs > 2;
    bora_tensor_desc init = has_init ? a->inputs[2] : *o;
    int64_t n = o->dims[0] * o->dims[1];
    if (n == 0)
        return cudaSuccess;
    k_scatter_init<T><<<grid_for(n), CU_THREADS, 0, s>>>(*o, init, has_init, n);
    k_scatter_cols<T><<<grid_for(o->dims[1]), CU_THREADS, 0, s>>>(a->inputs[0], a->inputs[1], *o);
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_scatter_add(cudaStream_t s, const bora_kernel_args *a)
{
    return a->outputs[0].dtype == BORA_DTYPE_F64 ? scatter_add<double>(s, a)
                                                 : scatter_add<float>(s, a);
}

/* ---- the decompositions' helpers ------------------------------------------------------------- */

template <typename T> __global__ void k_one_hot(bora_tensor_desc ids, bora_tensor_desc o, int64_t n)
{
    int64_t V = o.dims[1];
    GRID_LOOP(e, n)
    {
        int64_t r = e / V, v = e % V;
        int32_t id = ((const int32_t *)ids.data)[r * ids.strides[0]];
        ((T *)o.data)[r * o.strides[0] + v * o.strides[1]] = v == id ? (T)1 : (T)0;
    }
}

extern "C" cudaError_t cuk_one_hot(cudaStream_t s, const bora_kernel_args *a)
{
    const bora_tensor_desc *o = &a->outputs[0];
    int64_t n = o->dims[0] * o->dims[1];
    if (n == 0)
        return cudaSuccess;
    if (o->dtype == BORA_DTYPE_F64)
        k_one_hot<double><<<grid_for(n), CU_THREADS, 0, s>>>(a->inputs[0], *o, n);
    else
        k_one_hot<float><<<grid_for(n), CU_THREADS, 0, s>>>(a->inputs[0], *o, n);
    return cudaGetLastError();
}

/* (B, T, S): 0 where query t may see key s, -inf elsewhere (the CPU kernel's rule: key length,
 * causality at position L - T + t, the sliding window, segments). */
template <typename T>
__global__ void k_attention_bias(bora_tensor_desc o, bora_tensor_desc sq, bora_tensor_desc sk,
                                 const int32_t *klen, int causal, int segments, int64_t W,
                                 int64_t n)
{
    int64_t Tq = o.dims[1], S = o.dims[2], L = S;
    if (klen) {
        L = *klen;
        L = L < 0 ? 0 : L > S ? S : L;
    }
    GRID_LOOP(e, n)
    {
        int64_t bi = e / (Tq * S), t = (e / S) % Tq, s = e % S;
        int ok = s < L && (!causal || s <= L - Tq + t) && (W <= 0 || s > L - Tq + t - W);
        if (ok && segments)
            ok = ((const int32_t *)sq.data)[bi * sq.strides[0] + t * sq.strides[1]] ==
                 ((const int32_t *)sk.data)[bi * sk.strides[0] + s * sk.strides[1]];
        ((T *)o.data)[bi * o.strides[0] + t * o.strides[1] + s * o.strides[2]] =
            ok ? (T)0 : (T)-INFINITY;
    }
}

extern "C" cudaError_t cuk_attention_bias(cudaStream_t s, const bora_kernel_args *a)
{
    const bora_opt_attention *opt = (const bora_opt_attention *)a->options;
    const bora_tensor_desc *o = &a->outputs[0];
    int64_t n = o->dims[0] * o->dims[1] * o->dims[2];
    if (n == 0)
        return cudaSuccess;
    bora_tensor_desc none;
    memset(&none, 0, sizeof none);
    bora_tensor_desc sq = opt->segments ? a->inputs[0] : none;
    bora_tensor_desc sk = opt->segments ? a->inputs[1] : none;
    const int32_t *klen =
        opt->key_length ? (const int32_t *)a->inputs[opt->segments ? 2 : 0].data : NULL;
    int64_t W = opt->struct_size >= offsetof(bora_opt_attention, sliding_window) + sizeof(int64_t)
                    ? opt->sliding_window
                    : 0;
    if (o->dtype == BORA_DTYPE_F64)
        k_attention_bias<double>
            <<<grid_for(n), CU_THREADS, 0, s>>>(*o, sq, sk, klen, opt->causal, opt->segments, W, n);
    else
        k_attention_bias<float>
            <<<grid_for(n), CU_THREADS, 0, s>>>(*o, sq, sk, klen, opt->causal, opt->segments, W, n);
    return cudaGetLastError();
}

/* ---- layout: pad, concat, write_slice ----------------------------------------------------------- */

/* dst's region from start along axis (src's extent there) = src, element by element (the same
 * dtype: the bits move). start_dev: the start is a device i32, checked against dst's extent
 * (flag set and nothing written when the slice does not fit). */
__global__ void k_place(bora_tensor_desc dst, bora_tensor_desc src, int axis, int64_t start,
                        const int32_t *start_dev, int *flag, int64_t n, int size)
{
    if (start_dev) {
        start = *start_dev;
        if (start < 0 || start > dst.dims[axis] - src.dims[axis]) {
            if (blockIdx.x == 0 && threadIdx.x == 0)
                *flag = 1;
            return;
        }
    }
    GRID_LOOP(e, n)
    {
        int64_t so = offset_of(src, src.dims, src.ndim, e);
        int64_t d = offset_of(dst, src.dims, src.ndim, e) + start * dst.strides[axis];
        if (size == 8)
            ((uint64_t *)dst.data)[d] = ((const uint64_t *)src.data)[so];
        else if (size == 4)
            ((uint32_t *)dst.data)[d] = ((const uint32_t *)src.data)[so];
        else
            ((uint16_t *)dst.data)[d] = ((const uint16_t *)src.data)[so];
    }
}

static cudaError_t place(cudaStream_t s, const bora_tensor_desc *dst, const bora_tensor_desc *src,
                         int axis, int64_t start, const int32_t *start_dev, int *flag)
{
    int64_t n = numel(src);
    if (n == 0)
        return cudaSuccess;
    k_place<<<grid_for(n), CU_THREADS, 0, s>>>(*dst, *src, axis, start, start_dev, flag, n,
                                               (int)bora_dtype_size(dst->dtype));
    return cudaGetLastError();
}

extern "C" cudaError_t cuk_pad(cudaStream_t s, const bora_kernel_args *a)
{
    const bora_opt_pad *p = (const bora_opt_pad *)a->options;
    const bora_tensor_desc *o = &a->outputs[0];
    int64_t n = numel(o);
    if (n == 0)
        return cudaSuccess;
    k_fill<<<grid_for(n), CU_THREADS, 0, s>>>(*o, n, 0.0);
    return place(s, o, &a->inputs[0], p->axis, p->start, NULL, NULL);
}

extern "C" cudaError_t cuk_concat(cudaStream_t s, const bora_kernel_args *a)
{
    const bora_opt_pad *p = (const bora_opt_pad *)a->options;
    int64_t at = 0;
    for (uint32_t i = 0; i < a->n_inputs; i++) {
        cudaError_t err = place(s, &a->outputs[0], &a->inputs[i], p->axis, at, NULL, NULL);
        if (err != cudaSuccess)
            return err;
        at += a->inputs[i].dims[p->axis];
    }
    return cudaSuccess;
}

extern "C" cudaError_t cuk_write_slice(cudaStream_t s, const bora_kernel_args *a, int *flag)
{
    const bora_opt_pad *p = (const bora_opt_pad *)a->options;
    const bora_tensor_desc *v = &a->inputs[1], *d = &a->outputs[0];
    if (a->n_inputs > 2)
        return place(s, d, v, p->axis, 0, (const int32_t *)a->inputs[2].data, flag);
    return place(s, d, v, p->axis, 0, NULL, NULL);
}

/* ---- matmul for the layouts cuBLASLt does not take --------------------------------------------- */

/* C (B,M,N) = A (B,M,K) B (B,K,N): one thread per element, a double accumulator. TA is the
 * operands' type (float, double, or uint16_t for bf16), TC the result's. */
template <typename TA> __device__ __forceinline__ double widen(TA v)
{
    return (double)v;
}
template <> __device__ __forceinline__ double widen<uint16_t>(uint16_t v)
{
    return (double)bf16_to_f32(v);
}

template <typename TA, typename TC>
__global__ void k_matmul_naive(bora_tensor_desc A, bora_tensor_desc B, bora_tensor_desc C,
                               int64_t n)
{
    int64_t M = C.dims[1], N = C.dims[2], K = A.dims[2];
    GRID_LOOP(e, n)
    {
        int64_t bi = e / (M * N), m = (e / N) % M, j = e % N;
        const TA *ar = (const TA *)A.data + bi * A.strides[0] + m * A.strides[1];
        const TA *bc = (const TA *)B.data + bi * B.strides[0] + j * B.strides[2];
        double acc = 0;
        for (int64_t k = 0; k < K; k++)
            acc += widen<TA>(ar[k * A.strides[2]]) * widen<TA>(bc[k * B.strides[1]]);
        ((TC *)C.data)[bi * C.strides[0] + m * C.strides[1] + j * C.strides[2]] = (TC)acc;
    }
}

extern "C" cudaError_t cuk_matmul_naive(cudaStream_t s, const bora_kernel_args *a)
{
    const bora_tensor_desc *A = &a->inputs[0], *B = &a->inputs[1], *C = &a->outputs[0];
    int64_t n = C->dims[0] * C->dims[1] * C->dims[2];
    if (n == 0)
        return cudaSuccess;
    if (A->dtype == BORA_DTYPE_F64)
        k_matmul_naive<double, double><<<grid_for(n), CU_THREADS, 0, s>>>(*A, *B, *C, n);
    else if (A->dtype == BORA_DTYPE_BF16)
        k_matmul_naive<uint16_t, float><<<grid_for(n), CU_THREADS, 0, s>>>(*A, *B, *C, n);
    else
        k_matmul_naive<float, float><<<grid_for(n), CU_THREADS, 0, s>>>(*A, *B, *C, n);
    return cudaGetLastError();
}
