/* plugins/backends/cpu/kernels.c — the CPU backend's kernel table: plain C with OpenMP over a
 * fixed static partition, f32 and f64 (the f64 path is the reference for gradient checks), and
 * f32 matmuls on oneDNN's sgemm in fixed blocks of rows. */
#include "cpu.h"
#include "elem.h"
#include "kernels_fast.h"

#include <dnnl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Iteration over a tensor's rows (all axes but the last) with several operands' offsets. */
typedef struct walk {
    int nd, nops;
    int64_t dims[BORA_MAX_DIMS];
    int64_t strides[5][BORA_MAX_DIMS];
    int64_t rows, inner;
    int64_t inner_stride[5];
} walk;

static void walk_init(walk *w, const bora_tensor_desc *out, const bora_tensor_desc *ins, int nin)
{
    memset(w, 0, sizeof *w);
    w->nd = out->ndim;
    w->nops = 1 + nin;
    w->rows = 1;
    w->inner = out->ndim ? out->dims[out->ndim - 1] : 1;
    for (int i = 0; i < out->ndim; i++) {
        w->dims[i] = out->dims[i];
        w->strides[0][i] = out->strides[i];
        for (int k = 0; k < nin; k++)
            w->strides[k + 1][i] = ins[k].strides[i];
        if (i < out->ndim - 1)
            w->rows *= out->dims[i];
    }
    for (int k = 0; k < w->nops; k++)
        w->inner_stride[k] = out->ndim ? w->strides[k][out->ndim - 1] : 0;
}

static void walk_row(const walk *w, int64_t r, int64_t off[5])
{
    for (int k = 0; k < w->nops; k++)
        off[k] = 0;
    for (int i = w->nd - 2; i >= 0; i--) {
        int64_t idx = r % w->dims[i];
        r /= w->dims[i];
        for (int k = 0; k < w->nops; k++)
            off[k] += idx * w->strides[k][i];
    }
}

#define T float
#define SUFFIX f32
#define EXP expf
#define LOG logf
#define SQRT sqrtf
#define TANH tanhf
#define ERF erff
#include "kernels_t.h"
#undef T
#undef SUFFIX
#undef EXP
#undef LOG
#undef SQRT
#undef TANH
#undef ERF

#define T double
#define SUFFIX f64
#define EXP exp
#define LOG log
#define SQRT sqrt
#define TANH tanh
#define ERF erf
#include "kernels_t.h"
#undef T
#undef SUFFIX
#undef EXP
#undef LOG
#undef SQRT
#undef TANH
#undef ERF

/* ---- copy and cast --------------------------------------------------------------------------- */

/* bfloat16: the top half of an f32, rounded to nearest even (NaN stays NaN). */
static float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint16_t f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static double load(const void *p, int dtype, int64_t i)
{
    switch (dtype) {
    case BORA_DTYPE_BF16: return bf16_to_f32(((const uint16_t *)p)[i]);
    case BORA_DTYPE_F32: return ((const float *)p)[i];
    case BORA_DTYPE_F64: return ((const double *)p)[i];
    case BORA_DTYPE_I32: return ((const int32_t *)p)[i];
    default: return ((const int64_t *)p)[i];
    }
}

static void store(void *p, int dtype, int64_t i, double v)
{
    switch (dtype) {
    case BORA_DTYPE_BF16: ((uint16_t *)p)[i] = f32_to_bf16((float)v); break;
    case BORA_DTYPE_F32: ((float *)p)[i] = (float)v; break;
    case BORA_DTYPE_F64: ((double *)p)[i] = v; break;
    case BORA_DTYPE_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    default: ((int64_t *)p)[i] = (int64_t)v; break;
    }
}

static bora_status cpu_copy(bora_backend *b, const bora_kernel_args *a)
{
    if (fast_cast_f32(b, a) == 0)
        return BORA_OK;
    const bora_tensor_desc *o = &a->outputs[0], *x = &a->inputs[0];
    walk w;
    walk_init(&w, o, x, 1);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < w.rows; r++) {
        int64_t off[5];
        walk_row(&w, r, off);
        if (w.inner_stride[0] == 1 && w.inner_stride[1] == 1) { /* a dense run (may alias) */
            size_t size = bora_dtype_size(o->dtype);
            char *dst = (char *)o->data + (size_t)off[0] * size;
            if (o->dtype == x->dtype) {
                memmove(dst, (const char *)x->data + (size_t)off[1] * size, size * (size_t)w.inner);
                continue;
            }
            if (x->dtype == BORA_DTYPE_F32 && o->dtype == BORA_DTYPE_BF16) {
                b->simd->to_bf16((uint16_t *)dst, (const float *)x->data + off[1], w.inner);
                continue;
            }
            if (x->dtype == BORA_DTYPE_BF16 && o->dtype == BORA_DTYPE_F32) {
                b->simd->from_bf16((float *)dst, (const uint16_t *)x->data + off[1], w.inner);
                continue;
            }
        }
        for (int64_t i = 0; i < w.inner; i++)
            store(o->data, o->dtype, off[0] + i * w.inner_stride[0],
                  load(x->data, x->dtype, off[1] + i * w.inner_stride[1]));
    }
    return BORA_OK;
}

/* ---- f32 matmul on oneDNN -------------------------------------------------------------------- */

/* Each sgemm call computes one block of C with the whole K. The blocks depend on the shape
 * alone: the rows split into ceil(M/512) equal parts, the columns into ceil(N/4096) equal parts
 * (multiples of 64), so the partition (and every product's summation order) is the same whatever
 * the thread count, and blocks of one matmul are of one size, so a static schedule balances them.
 * The calls run inside an OpenMP loop, where oneDNN itself runs single-threaded. Measured on the
 * LM head's shapes (2 threads, AVX-512): 32-row blocks ran at 87-190 GFLOP/s, these at 200-225;
 * a 768-row product split 512 + 256 left one of two threads idle a third of the time. */
#define CPU_MATMUL_ROWS 512
#define CPU_MATMUL_COLS 4096

/* n split into ceil(n/most) parts of equal size, rounded up to a multiple of `align`. */
static int64_t block_size(int64_t n, int64_t most, int64_t align)
{
    if (n <= 0)
        return 1;
    int64_t parts = (n + most - 1) / most;
    int64_t size = (n + parts - 1) / parts;
    size = (size + align - 1) / align * align;
    return size < n ? size : n;
}

/* One operand (rows, cols) with strides: its sgemm transpose flag and leading dimension. */
static int gemm_layout(int64_t rows, int64_t cols, int64_t s_row, int64_t s_col, char *trans,
                       int64_t *ld)
{
    if (s_col == 1 || cols == 1) {
        *trans = 'N';
        *ld = rows == 1 ? (cols > 1 ? cols : 1) : s_row;
        return *ld >= cols;
    }
    if (s_row == 1 || rows == 1) {
        *trans = 'T';
        *ld = cols == 1 ? (rows > 1 ? rows : 1) : s_col;
        return *ld >= rows;
    }
    return 0;
}

static bora_status matmul_f32(bora_backend *bk, const bora_kernel_args *a)
{
    const bora_tensor_desc *A = &a->inputs[0], *B = &a->inputs[1], *C = &a->outputs[0];
    int64_t nb = C->dims[0], M = C->dims[1], N = C->dims[2], Kd = A->dims[2];
    char ta, tb, tc;
    int64_t lda, ldb, ldc;
    int64_t a_sr = A->strides[1];
    if (!gemm_layout(M, Kd, A->strides[1], A->strides[2], &ta, &lda) ||
        !gemm_layout(Kd, N, B->strides[1], B->strides[2], &tb, &ldb) ||
        !gemm_layout(M, N, C->strides[1], C->strides[2], &tc, &ldc) || tc != 'N' || Kd == 0)
        return matmul_naive_f32(bk, a);
    int64_t rsize = block_size(M, CPU_MATMUL_ROWS, 8), csize = block_size(N, CPU_MATMUL_COLS, 64);
    int64_t rblocks = (M + rsize - 1) / rsize, cblocks = (N + csize - 1) / csize;
    int failed = 0;
#pragma omp parallel for schedule(static)
    for (int64_t job = 0; job < nb * rblocks * cblocks; job++) {
        int64_t bi = job / (rblocks * cblocks), rc = job % (rblocks * cblocks);
        int64_t m0 = (rc / cblocks) * rsize, n0 = (rc % cblocks) * csize;
        int64_t rows = M - m0 < rsize ? M - m0 : rsize;
        int64_t cols = N - n0 < csize ? N - n0 : csize;
        const float *ap = (const float *)A->data + bi * A->strides[0] + m0 * a_sr;
        const float *bp = (const float *)B->data + bi * B->strides[0] + n0 * B->strides[2];
        float *cp = (float *)C->data + bi * C->strides[0] + m0 * C->strides[1] + n0 * C->strides[2];
        if (dnnl_sgemm(ta, tb, rows, cols, Kd, 1.0f, ap, lda, bp, ldb, 0.0f, cp, ldc) !=
            dnnl_success)
#pragma omp atomic write
            failed = 1;
    }
    return failed ? BORA_ERR_DEVICE : BORA_OK;
}

/* ---- bf16 operands, f32 result --------------------------------------------------------------- */

/* Where oneDNN's bf16 matmul does not run or is slower than sgemm (the rule in matmul_bf16.c),
 * each block of the operands is widened to f32 (exactly: a bf16 is the top half of an f32) and
 * multiplied on sgemm; a product of two bf16 values is exact in f32, so this is a bf16 matmul
 * accumulating in f32. The blocks:
 * rows as the f32 path, columns by at most 1024, K in panels of at most 1024 added in order
 * (beta 1), so a thread's scratch stays near 6 MB and every sum's order depends on the shape
 * alone. */
#define CPU_BF16_COLS 1024
#define CPU_BF16_K 1024

/* dst (outer, inner) dense = src's element (o, i) at o s_outer + i s_inner, widened. */
static void widen(const cpu_simd *s, float *dst, const uint16_t *src, int64_t outer, int64_t inner,
                  int64_t s_outer, int64_t s_inner)
{
    for (int64_t o = 0; o < outer; o++) {
        const uint16_t *row = src + o * s_outer;
        float *d = dst + o * inner;
        if (s_inner == 1 || inner == 1) {
            s->from_bf16(d, row, inner);
        } else {
            for (int64_t i = 0; i < inner; i++)
                d[i] = bf16_to_f32(row[i * s_inner]);
        }
    }
}

/* Any strides: a double sum per element, for layouts sgemm cannot take. */
static bora_status matmul_bf16_naive(const bora_kernel_args *a)
{
    const bora_tensor_desc *A = &a->inputs[0], *B = &a->inputs[1], *C = &a->outputs[0];
    int64_t nb = C->dims[0], M = C->dims[1], N = C->dims[2], Kd = A->dims[2];
#pragma omp parallel for schedule(static)
    for (int64_t bm = 0; bm < nb * M; bm++) {
        int64_t bi = bm / M, m = bm % M;
        const uint16_t *ar = (const uint16_t *)A->data + bi * A->strides[0] + m * A->strides[1];
        const uint16_t *bb = (const uint16_t *)B->data + bi * B->strides[0];
        float *cr = (float *)C->data + bi * C->strides[0] + m * C->strides[1];
        for (int64_t n = 0; n < N; n++) {
            double acc = 0;
            for (int64_t k = 0; k < Kd; k++)
                acc += (double)bf16_to_f32(ar[k * A->strides[2]]) *
                       (double)bf16_to_f32(bb[k * B->strides[1] + n * B->strides[2]]);
            cr[n * C->strides[2]] = (float)acc;
        }
    }
    return BORA_OK;
}

static bora_status matmul_bf16_widened(bora_backend *bk, const bora_kernel_args *a)
{
    const bora_tensor_desc *A = &a->inputs[0], *B = &a->inputs[1], *C = &a->outputs[0];
    int64_t nb = C->dims[0], M = C->dims[1], N = C->dims[2], Kd = A->dims[2];
    char ta, tb, tc;
    int64_t lda, ldb, ldc;
    if (!gemm_layout(M, Kd, A->strides[1], A->strides[2], &ta, &lda) ||
        !gemm_layout(Kd, N, B->strides[1], B->strides[2], &tb, &ldb) ||
        !gemm_layout(M, N, C->strides[1], C->strides[2], &tc, &ldc) || tc != 'N' || Kd == 0)
        return matmul_bf16_naive(a);
    int64_t rsize = block_size(M, CPU_MATMUL_ROWS, 8), csize = block_size(N, CPU_BF16_COLS, 64);
    int64_t ksize = block_size(Kd, CPU_BF16_K, 64);
    int64_t rblocks = (M + rsize - 1) / rsize, cblocks = (N + csize - 1) / csize;
    const cpu_simd *s = bk->simd;
    int failed = 0;
#pragma omp parallel
    {
        float *as = malloc(sizeof(float) * (size_t)(rsize * ksize));
        float *bs = malloc(sizeof(float) * (size_t)(ksize * csize));
        if (!as || !bs)
#pragma omp atomic write
            failed = 2;
#pragma omp for schedule(static)
        for (int64_t job = 0; job < nb * rblocks * cblocks; job++) {
            if (!as || !bs)
                continue;
            int64_t bi = job / (rblocks * cblocks), rc = job % (rblocks * cblocks);
            int64_t m0 = (rc / cblocks) * rsize, n0 = (rc % cblocks) * csize;
            int64_t rows = M - m0 < rsize ? M - m0 : rsize;
            int64_t cols = N - n0 < csize ? N - n0 : csize;
            float *cp =
                (float *)C->data + bi * C->strides[0] + m0 * C->strides[1] + n0 * C->strides[2];
            for (int64_t k0 = 0; k0 < Kd; k0 += ksize) {
                int64_t kp = Kd - k0 < ksize ? Kd - k0 : ksize;
                const uint16_t *ap = (const uint16_t *)A->data + bi * A->strides[0] +
                                     m0 * A->strides[1] + k0 * A->strides[2];
                const uint16_t *bp = (const uint16_t *)B->data + bi * B->strides[0] +
                                     k0 * B->strides[1] + n0 * B->strides[2];
                /* the blocks keep their operand's orientation: (rows, kp) or (kp, rows) */
                if (ta == 'N')
                    widen(s, as, ap, rows, kp, A->strides[1], A->strides[2]);
                else
                    widen(s, as, ap, kp, rows, A->strides[2], A->strides[1]);
                if (tb == 'N')
                    widen(s, bs, bp, kp, cols, B->strides[1], B->strides[2]);
                else
                    widen(s, bs, bp, cols, kp, B->strides[2], B->strides[1]);
                if (dnnl_sgemm(ta, tb, rows, cols, kp, 1.0f, as, ta == 'N' ? kp : rows, bs,
                               tb == 'N' ? cols : kp, k0 ? 1.0f : 0.0f, cp, ldc) != dnnl_success)
#pragma omp atomic write
                    failed = 1;
            }
        }
        free(as);
        free(bs);
    }
    return failed == 2 ? BORA_ERR_NOMEM : failed ? BORA_ERR_DEVICE : BORA_OK;
}

static bora_status matmul_bf16(bora_backend *bk, const bora_kernel_args *a)
{
    int taken = cpu_matmul_bf16_onednn(bk, a);
    return taken <= 0 ? taken : matmul_bf16_widened(bk, a);
}

/* One product on MATMUL's path for its dtype (grouped products, moe.c); bf16 operands always
 * widened for sgemm, since oneDNN's primitives are made per shape and a group's rows change from
 * run to run. */
bora_status cpu_matmul_one(bora_backend *bk, const bora_tensor_desc *A, const bora_tensor_desc *B,
                           const bora_tensor_desc *C)
{
    bora_tensor_desc in[2] = {*A, *B};
    bora_kernel_args a = {sizeof a, BORA_OP_MATMUL, NULL, 2, 1, in, C, NULL, 0};
    if (A->dtype == BORA_DTYPE_F64)
        return matmul_naive_f64(bk, &a);
    return A->dtype == BORA_DTYPE_BF16 ? matmul_bf16_widened(bk, &a) : matmul_f32(bk, &a);
}

/* A bf16 product plus a bias row (ABI 1.8: the third input, N f32 at unit stride, stride 0
 * elsewhere): on oneDNN's primitive with the bias in its epilogue, each finished sum plus the
 * bias; where the primitive does not take it (the transposed route, a refused shape), the product
 * as without a bias, then the bias added: the same bits either way, those of MATMUL then ADD. */
static bora_status matmul_bf16_bias(bora_backend *bk, const bora_kernel_args *a)
{
    const bora_tensor_desc *C = &a->outputs[0], *bias = &a->inputs[2];
    int64_t N = C->dims[2], rows = C->dims[0] * C->dims[1];
    int row = bias->ndim >= 1 && bias->dims[bias->ndim - 1] == N &&
              (N <= 1 || bias->strides[bias->ndim - 1] == 1);
    for (int i = 0; row && i < bias->ndim - 1; i++)
        row = bias->dims[i] <= 1 || bias->strides[i] == 0;
    if (!row)
        return bk->h->fail(bk->h, BORA_ERR_INVALID,
                           "matmul: the bias must be one row of %lld values (unit stride, stride 0 "
                           "along its other axes)",
                           (long long)N);
    int taken = cpu_matmul_bf16_onednn(bk, a);
    if (taken <= 0)
        return taken;
    bora_kernel_args product = *a;
    product.n_inputs = 2;
    bora_status st = matmul_bf16(bk, &product);
    if (st != BORA_OK)
        return st;
    const float *bv = bias->data;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        int64_t bi = r / C->dims[1], m = r % C->dims[1];
        float *c = (float *)C->data + bi * C->strides[0] + m * C->strides[1];
        for (int64_t n = 0; n < N; n++)
            c[n * C->strides[2]] += bv[n];
    }
    return BORA_OK;
}

/* ---- integer and bf16 constants and ramps (ABI 1.9's full and iota) --------------------------- */

static bora_status fill_any(bora_backend *b, const bora_kernel_args *a)
{
    (void)b;
    const bora_tensor_desc *o = &a->outputs[0];
    double v = ((const bora_opt_scalar *)a->options)->value;
    int64_t n = bora_tensor_desc_numel(o);
    for (int64_t e = 0; e < n; e++) { /* every element once, at its strided offset */
        int64_t off = 0, rem = e;
        for (int i = o->ndim - 1; i >= 0; i--) {
            off += (rem % o->dims[i]) * o->strides[i];
            rem /= o->dims[i];
        }
        if (o->dtype == BORA_DTYPE_U8)
            ((uint8_t *)o->data)[off] = (uint8_t)v;
        else
            store(o->data, o->dtype, off, v);
    }
    return BORA_OK;
}

static bora_status iota_i32(bora_backend *b, const bora_kernel_args *a)
{
    (void)b;
    const bora_tensor_desc *o = &a->outputs[0];
    const bora_opt_iota *opt = a->options;
    for (int64_t i = 0; i < o->dims[0]; i++) /* the host checked every value fits */
        ((int32_t *)o->data)[i * o->strides[0]] = (int32_t)(opt->start + opt->step * (double)i);
    return BORA_OK;
}

/* ---- f32: the dense fast paths first -------------------------------------------------------- */

static bora_status elementwise_any_f32(bora_backend *b, const bora_kernel_args *a)
{
    return fast_elementwise_f32(b, a) == 0 ? BORA_OK : elementwise_f32(b, a);
}

static bora_status reduce_any_f32(bora_backend *b, const bora_kernel_args *a)
{
    return a->op == BORA_OP_SUM && fast_sum_f32(b, a) == 0 ? BORA_OK : reduce_f32(b, a);
}

/* Only the dense layouts the host hands it (the MUL it stands for would have been dense). */
static bora_status sum_squares_f32(bora_backend *b, const bora_kernel_args *a)
{
    return fast_sum_squares_f32(b, a) == 0 ? BORA_OK : BORA_ERR_UNSUPPORTED;
}

static bora_status scatter_add_any_f32(bora_backend *b, const bora_kernel_args *a)
{
    return fast_scatter_add_f32(b, a) == 0 ? BORA_OK : scatter_add_f32(b, a);
}

static bora_status layernorm_any_f32(bora_backend *b, const bora_kernel_args *a)
{
    return fast_layernorm_f32(b, a) == 0 ? BORA_OK : layernorm_f32(b, a);
}

static bora_status layernorm_grad_any_f32(bora_backend *b, const bora_kernel_args *a)
{
    return fast_layernorm_grad_f32(b, a) == 0 ? BORA_OK : layernorm_grad_f32(b, a);
}

static bora_status rms_norm_any_f32(bora_backend *b, const bora_kernel_args *a)
{
    return fast_rms_norm_f32(b, a) == 0 ? BORA_OK : rms_norm_f32(b, a);
}

static bora_status rms_norm_grad_any_f32(bora_backend *b, const bora_kernel_args *a)
{
    return fast_rms_norm_grad_f32(b, a) == 0 ? BORA_OK : rms_norm_grad_f32(b, a);
}

/* An op whose first input is bf16, as the f32 kernel k over that input widened (exactly) into
 * the backend's scratch buffer: the bits of a COPY to f32 and then the op, with no f32 copy in
 * the graph's memory. Under trainer.mp r=bf16, LayerNorm, RMSNorm and their gradients read the
 * residual stream this way. */
static bora_status with_widened_x(bora_backend *b, const bora_kernel_args *a, bora_kernel_fn k)
{
    const bora_tensor_desc *x = &a->inputs[0];
    if (a->n_inputs > 8)
        return BORA_ERR_UNSUPPORTED;
    bora_tensor_desc in[8];
    memcpy(in, a->inputs, sizeof *in * a->n_inputs);
    in[0].dtype = BORA_DTYPE_F32;
    int64_t stride = 1;
    for (int i = x->ndim - 1; i >= 0; i--) {
        in[0].strides[i] = stride;
        stride *= x->dims[i];
    }
    in[0].data = cpu_scratch(b, sizeof(float) * (size_t)stride);
    if (!in[0].data)
        return BORA_ERR_NOMEM;
    bora_kernel_args widen = {sizeof widen, BORA_OP_COPY, NULL, 1, 1, x, &in[0], NULL, 0};
    bora_status st = cpu_copy(b, &widen);
    if (st != BORA_OK)
        return st;
    bora_kernel_args on_f32 = *a;
    on_f32.inputs = in;
    return k(b, &on_f32);
}

static bora_status layernorm_bf16x(bora_backend *b, const bora_kernel_args *a)
{
    return with_widened_x(b, a, layernorm_any_f32);
}

static bora_status layernorm_grad_bf16x(bora_backend *b, const bora_kernel_args *a)
{
    return with_widened_x(b, a, layernorm_grad_any_f32);
}

static bora_status rms_norm_bf16x(bora_backend *b, const bora_kernel_args *a)
{
    return with_widened_x(b, a, rms_norm_any_f32);
}

static bora_status rms_norm_grad_bf16x(bora_backend *b, const bora_kernel_args *a)
{
    return with_widened_x(b, a, rms_norm_grad_any_f32);
}

/* A cross-entropy fast path's answer as a status: done (refused when a target was out of
 * range), out of memory, or not its layout (-1), when the general kernel runs. */
static bora_status xent_status(bora_backend *b, const bora_kernel_args *a, int r, int bad,
                               bora_kernel_fn general)
{
    if (r == -2)
        return BORA_ERR_NOMEM;
    if (r == 0)
        return bad ? BORA_ERR_INVALID : BORA_OK;
    return general(b, a);
}

static bora_status xent_any_f32(bora_backend *b, const bora_kernel_args *a)
{
    int bad = 0, r = fast_xent_f32(b, a, &bad);
    return xent_status(b, a, r, bad, xent_f32);
}

static bora_status xent_grad_any_f32(bora_backend *b, const bora_kernel_args *a)
{
    return fast_xent_grad_f32(b, a) == 0 ? BORA_OK : xent_grad_f32(b, a);
}

static bora_status xent_fused_any_f32(bora_backend *b, const bora_kernel_args *a)
{
    int bad = 0, r = fast_xent_fused_f32(b, a, &bad);
    return xent_status(b, a, r, bad, xent_fused_f32);
}

/* The same with the gradient written in bf16 (trainer.mp c=bf16, where it feeds the head's bf16
 * products): dense rows only. */
static bora_status xent_fused_bf16_grad(bora_backend *b, const bora_kernel_args *a)
{
    int bad = 0, r = fast_xent_fused_f32(b, a, &bad);
    if (r == -1)
        return b->h->fail(b->h, BORA_ERR_UNSUPPORTED,
                          "cross-entropy with a bf16 gradient: the logits and the gradient must "
                          "be dense rows");
    return xent_status(b, a, r, bad, NULL);
}

static bora_status attention_any_f32(bora_backend *b, const bora_kernel_args *a)
{
    int r = a->op == BORA_OP_ATTENTION ? fast_attention_f32(b, a) : fast_attention_grad_f32(b, a);
    if (r == -1)
        return a->op == BORA_OP_ATTENTION ? attention_f32(b, a) : attention_grad_f32(b, a);
    return r == 0 ? BORA_OK : r == -2 ? BORA_ERR_NOMEM : BORA_ERR_DEVICE;
}

/* ---- the table ------------------------------------------------------------------------------- */

bora_kernel_fn cpu_kernel(bora_backend *b, uint32_t op, const int32_t *dt, uint32_t n)
{
    if (n == 0)
        return NULL;
    if (op == BORA_OP_COPY) {
        for (uint32_t i = 0; i < n; i++)
            if (dt[i] != BORA_DTYPE_F32 && dt[i] != BORA_DTYPE_F64 && dt[i] != BORA_DTYPE_I32 &&
                dt[i] != BORA_DTYPE_I64 && dt[i] != BORA_DTYPE_BF16)
                return NULL;
        return cpu_copy;
    }
    /* Ops whose inputs are all integers: the float type is the output's. */
    if (op == BORA_OP_ONE_HOT || op == BORA_OP_ATTENTION_BIAS) {
        for (uint32_t i = 0; i + 1 < n; i++)
            if (dt[i] != BORA_DTYPE_I32)
                return NULL;
        if (dt[n - 1] == BORA_DTYPE_F32)
            return op == BORA_OP_ONE_HOT ? one_hot_f32 : attention_bias_f32;
        if (dt[n - 1] == BORA_DTYPE_F64)
            return op == BORA_OP_ONE_HOT ? one_hot_f64 : attention_bias_f64;
        return NULL;
    }
    /* bf16 operands, an f32 result: mixed precision's matmuls; with an f32 bias (ABI 1.8) where
     * oneDNN's primitive runs them and can add it (nowhere else would the kernel save a pass) */
    if (op == BORA_OP_MATMUL && n == 4 && dt[0] == BORA_DTYPE_BF16 && dt[1] == BORA_DTYPE_BF16)
        return dt[2] == BORA_DTYPE_F32 && dt[3] == BORA_DTYPE_F32 && b->bf16_onednn
                   ? matmul_bf16_bias
                   : NULL;
    if (op == BORA_OP_MATMUL && n == 3 && dt[0] == BORA_DTYPE_BF16 && dt[1] == BORA_DTYPE_BF16) {
        if (dt[2] != BORA_DTYPE_F32)
            return NULL;
        if (!b->bf16_onednn && !b->bf16_told++)
            BORA_WARN(b->h,
                      "bf16 matmuls: operands widened to f32 for sgemm (%s): bf16's results at "
                      "f32's speed",
                      b->bf16_why);
        return matmul_bf16;
    }
    /* cross-entropy fused with its gradient written in bf16: logits, targets (i32), dloss ->
     * loss, lse, dlogits (bf16) */
    if (op == BORA_OP_XENT_FUSED && n == 6 && dt[5] == BORA_DTYPE_BF16) {
        for (uint32_t i = 0; i < 5; i++)
            if (dt[i] != (i == 1 ? BORA_DTYPE_I32 : BORA_DTYPE_F32))
                return NULL;
        return xent_fused_bf16_grad;
    }
    /* LayerNorm and its gradient over a bf16 x (the residual stream under r=bf16), the rest f32 */
    if ((op == BORA_OP_LAYERNORM || op == BORA_OP_LAYERNORM_GRAD) && n > 1 &&
        dt[0] == BORA_DTYPE_BF16) {
        for (uint32_t i = 1; i < n; i++)
            if (dt[i] != BORA_DTYPE_F32)
                return NULL;
        return op == BORA_OP_LAYERNORM ? layernorm_bf16x : layernorm_grad_bf16x;
    }
    /* RMSNorm and its gradient over a bf16 x alike (with or without a weight) */
    if ((op == BORA_OP_RMS_NORM && (n == 3 || n == 4)) ||
        (op == BORA_OP_RMS_NORM_GRAD && (n == 4 || n == 6))) {
        if (dt[0] == BORA_DTYPE_BF16) {
            for (uint32_t i = 1; i < n; i++)
                if (dt[i] != BORA_DTYPE_F32)
                    return NULL;
            return op == BORA_OP_RMS_NORM ? rms_norm_bf16x : rms_norm_grad_bf16x;
        }
    }
    /* constants of the other dtypes, and ramps (no inputs: the dtype is the output's) */
    if (op == BORA_OP_FILL && n == 1 &&
        (dt[0] == BORA_DTYPE_I32 || dt[0] == BORA_DTYPE_I64 || dt[0] == BORA_DTYPE_BF16 ||
         dt[0] == BORA_DTYPE_U8))
        return fill_any;
    if (op == BORA_OP_IOTA)
        return n != 1                    ? NULL
               : dt[0] == BORA_DTYPE_F32 ? iota_f32
               : dt[0] == BORA_DTYPE_F64 ? iota_f64
               : dt[0] == BORA_DTYPE_I32 ? iota_i32
                                         : NULL;
    /* tokens drawn from logits: logits, counter (i64) -> tokens (i32) */
    if (op == BORA_OP_SAMPLE)
        return n != 3 || dt[1] != BORA_DTYPE_I64 || dt[2] != BORA_DTYPE_I32 ? NULL
               : dt[0] == BORA_DTYPE_F32                                    ? cpu_sample_f32
               : dt[0] == BORA_DTYPE_F64                                    ? cpu_sample_f64
                                                                            : NULL;
    /* mixture-of-experts routing and grouped products (moe.c) */
    if (op >= BORA_OP_TOP_K && op <= BORA_OP_GROUPED_MATMUL_GRAD)
        return cpu_moe_kernel(op, dt, n);
    /* a 1-d convolution and its gradients (conv1d.c) */
    if (op >= BORA_OP_CONV1D && op <= BORA_OP_CONV1D_GRAD_WEIGHT)
        return cpu_conv1d_kernel(op, dt, n);
    int32_t ft = dt[0];
    if (op == BORA_OP_SCATTER_ADD)
        ft = dt[1];
    if (ft != BORA_DTYPE_F32 && ft != BORA_DTYPE_F64)
        return NULL;
    int f64 = ft == BORA_DTYPE_F64;
    /* Integer operands where an op takes them; every other operand is the float type. */
    for (uint32_t i = 0; i < n; i++) {
        int int_ok = (op == BORA_OP_XENT || op == BORA_OP_XENT_GRAD || op == BORA_OP_XENT_FUSED ||
                      op == BORA_OP_GATHER) &&
                     i == 1;
        int_ok |= op == BORA_OP_SCATTER_ADD && i == 0;
        /* attention: 3 (grad: 6) float inputs, then i32 segment ids and key length, then
         * 2 (grad: 3) float outputs */
        int_ok |= op == BORA_OP_ATTENTION && i >= 3 && i < n - 2;
        int_ok |= op == BORA_OP_ATTENTION_GRAD && i >= 6 && i < n - 3;
        int_ok |= op == BORA_OP_WRITE_SLICE && n == 4 && i == 2; /* dst, value, start -> dst */
        int_ok |= op == BORA_OP_ROPE && n == 5 && i == 3;        /* x, cos, sin, offset -> y */
        if (int_ok ? dt[i] != BORA_DTYPE_I32 : dt[i] != ft)
            return NULL;
    }
#define PICK(name) return f64 ? name##_f64 : name##_f32
    switch (op) {
    case BORA_OP_FILL:
    case BORA_OP_ADD:
    case BORA_OP_SUB:
    case BORA_OP_MUL:
    case BORA_OP_DIV:
    case BORA_OP_NEG:
    case BORA_OP_EXP:
    case BORA_OP_LOG:
    case BORA_OP_SQRT:
    case BORA_OP_RSQRT:
    case BORA_OP_TANH:
    case BORA_OP_SIGMOID:
    case BORA_OP_RELU:
    case BORA_OP_SILU:
    case BORA_OP_GELU_TANH:
    case BORA_OP_GELU_EXACT:
    case BORA_OP_SCALE:
    case BORA_OP_ACT_GRAD:
    case BORA_OP_SIN:
    case BORA_OP_COS:
    case BORA_OP_ABS:
    case BORA_OP_SIGN:
    case BORA_OP_MINIMUM:
    case BORA_OP_MAXIMUM:
    case BORA_OP_LESS:
    case BORA_OP_LESS_EQUAL:
    case BORA_OP_EQUAL:
    case BORA_OP_NOT_EQUAL:
    case BORA_OP_WHERE: return f64 ? elementwise_f64 : elementwise_any_f32;
    case BORA_OP_SUM:
    case BORA_OP_MAX: return f64 ? reduce_f64 : reduce_any_f32;
    case BORA_OP_SUM_SQUARES: return f64 || n != 2 ? NULL : sum_squares_f32;
    case BORA_OP_MATMUL: /* (a bias only on the bf16 path above) */
        if (n != 3)
            return NULL;
        return f64 ? matmul_naive_f64 : matmul_f32;
    case BORA_OP_LAYERNORM: return f64 ? layernorm_f64 : layernorm_any_f32;
    case BORA_OP_LAYERNORM_GRAD: return f64 ? layernorm_grad_f64 : layernorm_grad_any_f32;
    case BORA_OP_RMS_NORM: /* (x, [weight]) -> y, rstd */
        if (n != 3 && n != 4)
            return NULL;
        return f64 ? rms_norm_f64 : rms_norm_any_f32;
    case BORA_OP_RMS_NORM_GRAD: /* (x, [weight], rstd, dy) -> dx, [dweight] */
        if (n != 4 && n != 6)
            return NULL;
        return f64 ? rms_norm_grad_f64 : rms_norm_grad_any_f32;
    case BORA_OP_SOFTMAX:
    case BORA_OP_LOG_SOFTMAX: PICK(softmax);
    case BORA_OP_XENT: return f64 ? xent_f64 : xent_any_f32;
    case BORA_OP_XENT_GRAD: return f64 ? xent_grad_f64 : xent_grad_any_f32;
    case BORA_OP_XENT_FUSED:
        if (n != 6) /* logits, targets, dloss -> loss, lse, dlogits */
            return NULL;
        return f64 ? xent_fused_f64 : xent_fused_any_f32;
    case BORA_OP_GATHER: PICK(gather);
    case BORA_OP_SCATTER_ADD: return f64 ? scatter_add_f64 : scatter_add_any_f32;
    case BORA_OP_ATTENTION:
    case BORA_OP_ATTENTION_GRAD:
        if (f64)
            return op == BORA_OP_ATTENTION ? attention_f64 : attention_grad_f64;
        return getenv("BORA_CPU_REFERENCE_ATTENTION")
                   ? (op == BORA_OP_ATTENTION ? attention_f32 : attention_grad_f32)
                   : attention_any_f32;
    case BORA_OP_PAD: PICK(pad);
    case BORA_OP_CONCAT: PICK(concat);
    case BORA_OP_WRITE_SLICE: PICK(write_slice);
    case BORA_OP_ROPE: return n == 4 || n == 5 ? (f64 ? cpu_rope_f64 : cpu_rope_f32) : NULL;
    default: return NULL;
    }
#undef PICK
}
