/* plugins/backends/cpu/moe.c — a mixture of experts' ops (ABI 1.13; sdk/bora/graph.h states each
 * contract): top_k's indices per row, the stable argsort and the bincount of routing keys, and
 * grouped products, each group of rows times its own matrix on MATMUL's path (sgemm in blocks that
 * depend on the shape alone, f64 naive, bf16 widened for sgemm). Rows of top_k run in parallel,
 * one thread per row; the sorts and counts are sequential; the groups' row blocks of a grouped
 * product run in parallel; every product's summation order depends on the group sizes alone, so
 * the results are the same bits at any thread count. */
#include "cpu.h"

#include <bora/graph.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- top_k -------------------------------------------------------------------------------- */

/* Whether a ranks before b, a's index being the higher: strictly larger, NaN above numbers (a
 * tie, NaN with NaN or -0 with +0, goes to b, the lower index). */
static int ranks_before(double a, double b)
{
    return isnan(a) ? !isnan(b) : a > b;
}

/* Element j of row r of x (f32 or f64), widened. */
static double at_xy(const bora_tensor_desc *x, int64_t r, int64_t j)
{
    int64_t i = r * x->strides[0] + j * x->strides[1];
    return x->dtype == BORA_DTYPE_F64 ? ((const double *)x->data)[i]
                                      : (double)((const float *)x->data)[i];
}

/* Each row's k largest of D, largest first, by insertion into the row's k indices (O(D·k)). */
static bora_status top_k(bora_backend *b, const bora_kernel_args *a)
{
    (void)b;
    const bora_opt_top_k *o = a->options;
    const bora_tensor_desc *x = &a->inputs[0], *y = &a->outputs[0];
    int64_t R = x->dims[0], D = x->dims[1], k = o->k, ys = y->strides[1];
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < R; r++) {
        int32_t *yr = (int32_t *)y->data + r * y->strides[0];
        int64_t n = 0; /* indices held so far, best first */
        for (int64_t j = 0; j < D; j++) {
            double v = at_xy(x, r, j);
            int64_t at = n;
            while (at > 0 && ranks_before(v, at_xy(x, r, yr[(at - 1) * ys])))
                at--;
            if (at >= k)
                continue;
            for (int64_t m = n < k ? n : k - 1; m > at; m--)
                yr[m * ys] = yr[(m - 1) * ys];
            yr[at * ys] = (int32_t)j;
            n += n < k;
        }
        if (o->row_offsets)
            for (int64_t m = 0; m < k; m++)
                yr[m * ys] += (int32_t)(r * D);
    }
    return BORA_OK;
}

/* ---- argsort and bincount ----------------------------------------------------------------- */

/* The stable ascending order of N keys: a bottom-up merge sort of indices (equal keys keep their
 * order, since a merge takes from the left run first). */
static bora_status argsort_i32(bora_backend *b, const bora_kernel_args *a)
{
    const bora_tensor_desc *x = &a->inputs[0], *y = &a->outputs[0];
    int64_t N = x->dims[0], xs = x->strides[0];
    const int32_t *keys = x->data;
    int32_t *buf = cpu_scratch(b, sizeof(int32_t) * (size_t)(2 * N + 1));
    if (!buf)
        return b->h->fail(b->h, BORA_ERR_NOMEM, "argsort: no scratch for %lld keys", (long long)N);
    int32_t *src = buf, *dst = buf + N;
    for (int64_t i = 0; i < N; i++)
        src[i] = (int32_t)i;
    for (int64_t width = 1; width < N; width *= 2) {
        for (int64_t lo = 0; lo < N; lo += 2 * width) {
            int64_t mid = lo + width < N ? lo + width : N,
                    hi = lo + 2 * width < N ? lo + 2 * width : N;
            int64_t i = lo, j = mid, o = lo;
            while (i < mid && j < hi)
                dst[o++] = keys[src[j] * xs] < keys[src[i] * xs] ? src[j++] : src[i++];
            while (i < mid)
                dst[o++] = src[i++];
            while (j < hi)
                dst[o++] = src[j++];
        }
        int32_t *t = src;
        src = dst;
        dst = t;
    }
    int32_t *out = y->data;
    for (int64_t i = 0; i < N; i++)
        out[i * y->strides[0]] = src[i];
    return BORA_OK;
}

static bora_status bincount_i32(bora_backend *b, const bora_kernel_args *a)
{
    const bora_tensor_desc *x = &a->inputs[0], *y = &a->outputs[0];
    int64_t N = x->dims[0], E = y->dims[0];
    const int32_t *keys = x->data;
    int32_t *counts = y->data;
    for (int64_t e = 0; e < E; e++)
        counts[e * y->strides[0]] = 0;
    for (int64_t i = 0; i < N; i++) {
        int32_t k = keys[i * x->strides[0]];
        if (k < 0 || k >= E)
            return b->h->fail(b->h, BORA_ERR_INVALID,
                              "bincount: key %d at %lld is outside [0, %lld), the bins", k,
                              (long long)i, (long long)E);
        counts[k * y->strides[0]]++;
    }
    return BORA_OK;
}

/* ---- grouped products --------------------------------------------------------------------- */

/* The E sizes of a grouped product, checked against its R rows: 0, or the failure. */
static bora_status group_sizes(bora_backend *b, const char *op, const bora_tensor_desc *s,
                               int64_t R)
{
    const int32_t *sp = s->data;
    int64_t sum = 0;
    for (int64_t e = 0; e < s->dims[0]; e++) {
        int32_t n = sp[e * s->strides[0]];
        if (n < 0 || (sum += n) > R)
            return b->h->fail(b->h, BORA_ERR_INVALID, "%s: group %lld's size %d %s the %lld rows",
                              op, (long long)e, n,
                              n < 0 ? "is negative; sizes count" : "takes the sizes' sum past",
                              (long long)R);
    }
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

/* Zeros over rows [r0, R) of a 2-d desc. */
static void zero_rows(const bora_tensor_desc *t, int64_t r0, int64_t R)
{
    size_t es = bora_dtype_size(t->dtype);
    for (int64_t r = r0; r < R; r++)
        for (int64_t c = 0; c < t->dims[1]; c++)
            memset((char *)t->data + (size_t)(r * t->strides[0] + c * t->strides[1]) * es, 0, es);
}

/* Rows per block of a group's product: MATMUL's own row blocks (kernels.c: the rows in
 * ceil(n/512) equal parts, multiples of 8), so a block's product is the call the group's whole
 * product would have made for those rows, with the same bits. */
#define GROUP_BLOCK_ROWS 512

static int64_t group_block(int64_t n)
{
    if (n <= 0)
        return 1;
    int64_t parts = (n + GROUP_BLOCK_ROWS - 1) / GROUP_BLOCK_ROWS;
    int64_t size = ((n + parts - 1) / parts + 7) / 8 * 8;
    return size < n ? size : n;
}

/* y = x w_e per group of rows (x (R, K), w (E, K, N), sizes (E)); rows past the sum are zero.
 * A group of a few hundred rows is one block, which MATMUL's own loop would give one thread; so
 * the blocks of all groups are one parallel loop instead, each block's product run
 * single-threaded inside it (blocks are independent: the bits do not depend on which thread
 * runs one, or on how many there are). */
static bora_status grouped_matmul(bora_backend *b, const bora_kernel_args *a)
{
    const bora_tensor_desc *x = &a->inputs[0], *w = &a->inputs[1], *s = &a->inputs[2];
    const bora_tensor_desc *y = &a->outputs[0];
    int64_t R = x->dims[0], E = s->dims[0], jobs = 0, r0 = 0;
    bora_status st = group_sizes(b, "grouped_matmul", s, R);
    if (st != BORA_OK)
        return st;
    const int32_t *sp = s->data;
    for (int64_t e = 0; e < E; e++) {
        int64_t n = sp[e * s->strides[0]];
        jobs += (n + group_block(n) - 1) / group_block(n);
    }
    int64_t(*job)[3] = malloc(sizeof *job * (size_t)(jobs ? jobs : 1)); /* (group, row, rows) */
    if (!job)
        return b->h->fail(b->h, BORA_ERR_NOMEM, "grouped_matmul: no memory for %lld blocks",
                          (long long)jobs);
    jobs = 0;
    for (int64_t e = 0; e < E; e++) {
        int64_t n = sp[e * s->strides[0]], size = group_block(n);
        for (int64_t m = 0; m < n; m += size) {
            job[jobs][0] = e, job[jobs][1] = r0 + m, job[jobs][2] = n - m < size ? n - m : size;
            jobs++;
        }
        r0 += n;
    }
    int failed = BORA_OK;
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t j = 0; j < jobs; j++) {
        bora_tensor_desc A = rows_of(x, job[j][1], job[j][2], 0), B = matrix_of(w, job[j][0]);
        bora_tensor_desc C = rows_of(y, job[j][1], job[j][2], 0);
        bora_status one = cpu_matmul_one(b, &A, &B, &C);
        if (one != BORA_OK)
#pragma omp atomic write
            failed = one;
    }
    free(job);
    if (failed == BORA_OK)
        zero_rows(y, r0, R);
    return failed;
}

/* dw_e = x_eᵀ dy_e per group (x (R, K), dy (R, N), sizes (E)) -> (E, K, N), zero for an empty
 * group; rows past the sum count nothing. */
static bora_status grouped_matmul_grad(bora_backend *b, const bora_kernel_args *a)
{
    const bora_tensor_desc *x = &a->inputs[0], *dy = &a->inputs[1], *s = &a->inputs[2];
    const bora_tensor_desc *dw = &a->outputs[0];
    int64_t r0 = 0;
    bora_status st = group_sizes(b, "grouped_matmul_grad", s, x->dims[0]);
    for (int64_t e = 0; e < s->dims[0] && st == BORA_OK; e++) {
        int64_t n = ((const int32_t *)s->data)[e * s->strides[0]];
        bora_tensor_desc C = matrix_of(dw, e);
        if (n == 0) {
            bora_tensor_desc z = C;
            z.ndim = 2, z.dims[0] = C.dims[1], z.dims[1] = C.dims[2];
            z.strides[0] = C.strides[1], z.strides[1] = C.strides[2];
            zero_rows(&z, 0, z.dims[0]);
            continue;
        }
        bora_tensor_desc A = rows_of(x, r0, n, 1), B = rows_of(dy, r0, n, 0);
        st = cpu_matmul_one(b, &A, &B, &C);
        r0 += n;
    }
    return st;
}

bora_kernel_fn cpu_moe_kernel(uint32_t op, const int32_t *dt, uint32_t n)
{
    switch (op) {
    case BORA_OP_TOP_K:
        if (n != 2 || dt[1] != BORA_DTYPE_I32)
            return NULL;
        return dt[0] == BORA_DTYPE_F32 || dt[0] == BORA_DTYPE_F64 ? top_k : NULL;
    case BORA_OP_ARGSORT:
        return n == 2 && dt[0] == BORA_DTYPE_I32 && dt[1] == BORA_DTYPE_I32 ? argsort_i32 : NULL;
    case BORA_OP_BINCOUNT:
        return n == 2 && dt[0] == BORA_DTYPE_I32 && dt[1] == BORA_DTYPE_I32 ? bincount_i32 : NULL;
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
        return op == BORA_OP_GROUPED_MATMUL ? grouped_matmul : grouped_matmul_grad;
    }
    default: return NULL;
    }
}
