/* plugins/backends/cpu/kernels_fast.c — f32 kernels for the layouts a training step meets most:
 * dense elementwise operands, dense cross-entropy rows, sums over one collapsed axis. Each
 * returns -1 when the layout is not one it handles, and kernels.c falls back to the general
 * strided kernel. Partitions are fixed (whole rows, or chunks of a fixed size), so results never
 * depend on the thread count. */
#include "kernels_fast.h"

#include "elem.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Elements per parallel chunk of a dense elementwise op: a multiple of 16. */
#define FAST_CHUNK 16384

/* Whether t has exactly the dims and strides of the dense row-major tensor `like`. */
static int same_dense(const bora_tensor_desc *t, const bora_tensor_desc *like)
{
    if (t->ndim != like->ndim)
        return 0;
    int64_t stride = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->dims[i] != like->dims[i] || (t->dims[i] != 1 && t->strides[i] != stride))
            return 0;
        stride *= t->dims[i];
    }
    return 1;
}

static int64_t count_of(const bora_tensor_desc *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->dims[i];
    return n;
}

int fast_cast_f32(bora_backend *b, const bora_kernel_args *a)
{
    const bora_tensor_desc *o = &a->outputs[0], *x = &a->inputs[0];
    int to = o->dtype == BORA_DTYPE_BF16 && x->dtype == BORA_DTYPE_F32;
    int from = o->dtype == BORA_DTYPE_F32 && x->dtype == BORA_DTYPE_BF16;
    if ((!to && !from) || !same_dense(o, o) || !same_dense(x, o))
        return -1;
    int64_t n = count_of(o), chunks = (n + FAST_CHUNK - 1) / FAST_CHUNK;
    const cpu_simd *s = b->simd;
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < chunks; c++) {
        int64_t i = c * FAST_CHUNK, m = n - i < FAST_CHUNK ? n - i : FAST_CHUNK;
        if (to)
            s->to_bf16((uint16_t *)o->data + i, (const float *)x->data + i, m);
        else
            s->from_bf16((float *)o->data + i, (const uint16_t *)x->data + i, m);
    }
    return 0;
}

/* One dense span of an elementwise op; 0 when the op has no fast loop (n = 0 asks just that). */
static int span(const cpu_simd *s, int op, int act_op, float value, float *out, const float *x,
                const float *y, int64_t n)
{
    if (s->arith(op, NULL, NULL, NULL, 0, 0))
        return n == 0 || s->arith(op, out, x, y, value, n);
    if (elem_f32_has(op)) { /* ABI 1.9's ops: plain loops, the plain kernel's bits */
        for (int64_t i = 0; i < n; i++)
            out[i] = elem_f32(op, x[i], y ? y[i] : 0);
        return 1;
    }
    switch (op) {
    case BORA_OP_ACT_GRAD: return s->act_grad(act_op, out, x, y, n);
    default: return s->unary(op, out, x, n);
    }
}

int fast_elementwise_f32(bora_backend *b, const bora_kernel_args *a)
{
    const bora_tensor_desc *o = &a->outputs[0];
    int op = (int)a->op, nin = (int)a->n_inputs;
    if (nin > 2 || o->ndim == 0)
        return -1;
    int act_op = op == BORA_OP_ACT_GRAD ? ((const bora_opt_act *)a->options)->op : 0;
    if (!span(b->simd, op, act_op, 0, NULL, NULL, NULL, 0))
        return -1;
    float value = op == BORA_OP_FILL || op == BORA_OP_SCALE
                      ? (float)((const bora_opt_scalar *)a->options)->value
                      : 0;
    const float *x = nin > 0 ? a->inputs[0].data : NULL, *y = nin > 1 ? a->inputs[1].data : NULL;
    float *out = o->data;
    /* the whole tensor as one span: every operand dense with the output's layout */
    int dense = same_dense(o, o);
    for (int k = 0; k < nin && dense; k++)
        dense = same_dense(&a->inputs[k], o);
    if (dense) {
        int64_t n = count_of(o), chunks = (n + FAST_CHUNK - 1) / FAST_CHUNK;
#pragma omp parallel for schedule(static)
        for (int64_t c = 0; c < chunks; c++) {
            int64_t i0 = c * FAST_CHUNK, len = n - i0 < FAST_CHUNK ? n - i0 : FAST_CHUNK;
            span(b->simd, op, act_op, value, out + i0, x ? x + i0 : NULL, y ? y + i0 : NULL, len);
        }
        return 0;
    }
    /* row by row: every operand's last axis dense (a broadcast row included) */
    int last = o->ndim - 1;
    if (o->dims[last] > 1 && o->strides[last] != 1)
        return -1;
    for (int k = 0; k < nin; k++)
        if (a->inputs[k].dims[last] > 1 && a->inputs[k].strides[last] != 1)
            return -1;
    int64_t rows = cpu_rows_of(o), n = o->dims[last];
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        int64_t off[3] = {0, 0, 0}, rem = r;
        for (int i = last - 1; i >= 0; i--) {
            int64_t idx = rem % o->dims[i];
            rem /= o->dims[i];
            off[0] += idx * o->strides[i];
            for (int k = 0; k < nin; k++)
                off[k + 1] += idx * a->inputs[k].strides[i];
        }
        span(b->simd, op, act_op, value, out + off[0], x ? x + off[1] : NULL, y ? y + off[2] : NULL,
             n);
    }
    return 0;
}

/* Cross-entropy over dense rows of logits: the max, then the sum of exp(x - max) in 16 double
 * partial sums, lse = max + log(sum). One row: its lse (stored in f32) and its term of the loss;
 * 1 when the target is out of range. */
static int xent_row(const cpu_simd *s, const float *xr, int64_t V, int32_t tgt,
                    const bora_opt_xent *opt, float *lse_out, double *term)
{
    float m = s->max(xr, V);
    double lse = (double)m + log(s->sum_exp(xr, V, m));
    *lse_out = (float)lse;
    *term = 0;
    if (tgt == opt->ignore_index)
        return 0;
    if (tgt < 0 || tgt >= V)
        return 1;
    *term = lse - (double)xr[tgt] + opt->z_loss * lse * lse;
    return 0;
}

/* One row's gradient, dloss (softmax zf - onehot), from the row's lse as stored; g may be x. */
static void xent_grad_row(const cpu_simd *s, float *g, const float *xr, int64_t V, int32_t tgt,
                          const bora_opt_xent *opt, float lse, float dloss)
{
    if (tgt == opt->ignore_index || tgt < 0 || tgt >= V) {
        memset(g, 0, sizeof(float) * (size_t)V);
        return;
    }
    float zf = (float)(1.0 + 2.0 * opt->z_loss * (double)lse);
    s->xent_grad(g, xr, V, lse, dloss, zf, tgt);
}

/* The loss: the rows' terms added in order, the same sum whatever the threads. */
static float xent_total(const double *per_row, int64_t rows)
{
    double total = 0;
    for (int64_t r = 0; r < rows; r++)
        total += per_row[r];
    return (float)total;
}

int fast_xent_f32(bora_backend *b, const bora_kernel_args *a, int *bad_target)
{
    const bora_tensor_desc *x = &a->inputs[0], *t = &a->inputs[1];
    const bora_opt_xent *opt = a->options;
    int64_t rows = x->dims[0], V = x->dims[1];
    if (x->strides[1] != 1 && V > 1)
        return -1;
    double *per_row = malloc(sizeof(double) * (size_t)(rows ? rows : 1));
    if (!per_row)
        return -2;
    float *lse_out = a->outputs[1].data;
    int bad = 0;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = (const float *)x->data + r * x->strides[0];
        int32_t tgt = ((const int32_t *)t->data)[r * t->strides[0]];
        if (xent_row(b->simd, xr, V, tgt, opt, &lse_out[r], &per_row[r]))
#pragma omp atomic write
            bad = 1;
    }
    *(float *)a->outputs[0].data = xent_total(per_row, rows);
    free(per_row);
    *bad_target = bad;
    return 0;
}

int fast_xent_grad_f32(bora_backend *b, const bora_kernel_args *a)
{
    const bora_tensor_desc *x = &a->inputs[0], *t = &a->inputs[1], *o = &a->outputs[0];
    const float *lse = a->inputs[2].data;
    float dloss = *(const float *)a->inputs[3].data;
    int64_t rows = x->dims[0], V = x->dims[1];
    if ((x->strides[1] != 1 || o->strides[1] != 1) && V > 1)
        return -1;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++)
        xent_grad_row(b->simd, (float *)o->data + r * o->strides[0],
                      (const float *)x->data + r * x->strides[0], V,
                      ((const int32_t *)t->data)[r * t->strides[0]], a->options, lse[r], dloss);
    return 0;
}

/* Both at once, row by row while the row is in cache: its lse and loss term, then its gradient,
 * over the logits themselves when dlogits is their storage. The same bits as the two kernels. */
int fast_xent_fused_f32(bora_backend *b, const bora_kernel_args *a, int *bad_target)
{
    const bora_tensor_desc *x = &a->inputs[0], *t = &a->inputs[1], *o = &a->outputs[2];
    const bora_opt_xent *opt = a->options;
    float dloss = *(const float *)a->inputs[2].data;
    int64_t rows = x->dims[0], V = x->dims[1];
    int bf16 = o->dtype == BORA_DTYPE_BF16; /* each row's f32 gradient rounded on its way out */
    if ((x->strides[1] != 1 || o->strides[1] != 1) && V > 1)
        return -1;
    double *per_row = malloc(sizeof(double) * (size_t)(rows ? rows : 1));
    if (!per_row)
        return -2;
    float *lse_out = a->outputs[1].data;
    int bad = 0, failed = 0;
#pragma omp parallel
    {
        float *row = bf16 ? malloc(sizeof(float) * (size_t)(V ? V : 1)) : NULL;
        if (bf16 && !row)
#pragma omp atomic write
            failed = 1;
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            const float *xr = (const float *)x->data + r * x->strides[0];
            int32_t tgt = ((const int32_t *)t->data)[r * t->strides[0]];
            if (xent_row(b->simd, xr, V, tgt, opt, &lse_out[r], &per_row[r]))
#pragma omp atomic write
                bad = 1;
            if (!bf16) {
                xent_grad_row(b->simd, (float *)o->data + r * o->strides[0], xr, V, tgt, opt,
                              lse_out[r], dloss);
            } else if (row) {
                xent_grad_row(b->simd, row, xr, V, tgt, opt, lse_out[r], dloss);
                b->simd->to_bf16((uint16_t *)o->data + r * o->strides[0], row, V);
            }
        }
        free(row);
    }
    *(float *)a->outputs[0].data = xent_total(per_row, rows);
    free(per_row);
    *bad_target = bad;
    return failed ? -2 : 0;
}

/* Sum over the trailing axes when they collapse into one strided axis and the kept axes into
 * another. A dense row (stride 1) is summed in 16 partial sums; a strided one (a column sum, as
 * in a bias gradient) in order, 64 columns at a time so that each pass reads whole lines. With
 * squares, each element is squared first, on the dense paths only (-1 otherwise). */
static int sum_f32(bora_backend *b, const bora_kernel_args *a, int squares)
{
    const bora_tensor_desc *x = &a->inputs[0], *o = &a->outputs[0];
    int nr = ((const bora_opt_reduce *)a->options)->n_reduced, outer_nd = x->ndim - nr;
    /* collapse axes [lo, hi) of x into (n, stride); 0 when they do not collapse */
    int64_t n_out = 1, s_out = 0, n_red = 1, s_red = 0;
    for (int pass = 0; pass < 2; pass++) {
        int lo = pass ? outer_nd : 0, hi = pass ? x->ndim : outer_nd;
        int64_t n = 1, s = 0;
        for (int i = hi - 1; i >= lo; i--) {
            if (x->dims[i] == 1)
                continue;
            if (n == 1)
                s = x->strides[i];
            else if (x->strides[i] != s * n)
                return -1;
            n *= x->dims[i];
        }
        if (pass) {
            n_red = n;
            s_red = s;
        } else {
            n_out = n;
            s_out = s;
        }
    }
    /* the output: dense in the kept axes' order */
    int64_t stride = 1;
    for (int i = outer_nd - 1; i >= 0; i--) {
        if (o->dims[i] != 1 && o->strides[i] != stride)
            return -1;
        stride *= o->dims[i];
    }
    const float *xd = x->data;
    float *od = o->data;
    if (squares && n_red > 1 && s_red != 1)
        return -1;
    if (n_red == 1) { /* a sum of one: a copy */
        int64_t chunks = (n_out + FAST_CHUNK - 1) / FAST_CHUNK;
#pragma omp parallel for schedule(static)
        for (int64_t c = 0; c < chunks; c++)
            for (int64_t r = c * FAST_CHUNK; r < n_out && r < (c + 1) * FAST_CHUNK; r++)
                od[r] = squares ? xd[r * s_out] * xd[r * s_out] : xd[r * s_out];
        return 0;
    }
    double (*sum)(const float *, int64_t) = squares ? b->simd->sum_sq : b->simd->sum;
    if (s_red == 1 && n_out == 1 && n_red > 2 * FAST_CHUNK) {
        /* one long row: double partials over fixed chunks, added in order */
        int64_t chunks = (n_red + FAST_CHUNK - 1) / FAST_CHUNK;
        double *part = malloc(sizeof(double) * (size_t)chunks);
        if (!part)
            return -1;
#pragma omp parallel for schedule(static)
        for (int64_t c = 0; c < chunks; c++) {
            int64_t i0 = c * FAST_CHUNK, len = n_red - i0 < FAST_CHUNK ? n_red - i0 : FAST_CHUNK;
            part[c] = sum(xd + i0, len);
        }
        double total = 0;
        for (int64_t c = 0; c < chunks; c++)
            total += part[c];
        free(part);
        od[0] = (float)total;
        return 0;
    }
    if (s_red == 1) {
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < n_out; r++)
            od[r] = (float)sum(xd + r * s_out, n_red);
        return 0;
    }
    if (s_out != 1 && n_out > 1)
        return -1;
    enum { COLS = 64 };
    int64_t blocks = (n_out + COLS - 1) / COLS;
#pragma omp parallel for schedule(static)
    for (int64_t blk = 0; blk < blocks; blk++) {
        int64_t c0 = blk * COLS, nc = n_out - c0 < COLS ? n_out - c0 : COLS;
        double acc[COLS] = {0};
        b->simd->col_sums(acc, xd + c0, n_red, s_red, nc);
        for (int64_t c = 0; c < nc; c++)
            od[c0 + c] = (float)acc[c];
    }
    return 0;
}

int fast_sum_f32(bora_backend *b, const bora_kernel_args *a)
{
    return sum_f32(b, a, 0);
}

/* BORA_OP_SUM_SQUARES: the paths of SUM over a dense row, each element squared first (the same
 * bits as MUL then SUM, whose input would be dense); -1 for a layout that would take another. */
int fast_sum_squares_f32(bora_backend *b, const bora_kernel_args *a)
{
    return sum_f32(b, a, 1);
}

/* ---- fused elementwise groups (bora_fused) --------------------------------------------------- */

/* Elements per tile: a multiple of 16 (the loops' width), so every tile's vector tail falls
 * where the unfused kernel's does: at the end of a segment. */
#define FUSED_TILE 1024

static int fused_step_ok(const bora_kernel_args *a)
{
    int op = (int)a->op;
    if (op == BORA_OP_COPY) { /* f32, rounded to a bf16 output (ABI 1.5) or widened (1.6) */
        int xt = a->inputs[0].dtype, ot = a->outputs[0].dtype;
        return a->n_inputs == 1 && (xt == BORA_DTYPE_F32 || xt == BORA_DTYPE_BF16) &&
               (ot == BORA_DTYPE_F32 || (ot == BORA_DTYPE_BF16 && xt == BORA_DTYPE_F32));
    }
    int act_op = op == BORA_OP_ACT_GRAD ? ((const bora_opt_act *)a->options)->op : 0;
    return a->n_inputs <= 2 && a->n_outputs == 1 &&
           span(&cpu_simd_generic, op, act_op, 0, NULL, NULL, NULL, 0);
}

static int is_bcast(const bora_tensor_desc *t, int64_t count)
{
    if (count == 1)
        return 0;
    for (int i = 0; i < t->ndim; i++)
        if (t->dims[i] != 1 && t->strides[i] != 0)
            return 0;
    return 1;
}

/* The first job (tile of `tile` elements) of each segment, and the job count at [n_segments]:
 * every segment's tiles, in order. NULL when out of memory. */
static int64_t *tile_jobs(const bora_fused *f, int64_t tile)
{
    int64_t *first = malloc(sizeof(int64_t) * (f->n_segments + 1));
    if (!first)
        return NULL;
    first[0] = 0;
    for (uint32_t s = 0; s < f->n_segments; s++)
        first[s + 1] = first[s] + (f->count[s] + tile - 1) / tile;
    return first;
}

/* Asks for the memory operands of the tile [i0, i0 + len) of segment seg ahead of its steps:
 * the steps read their operands a tile at a time, stream after stream, too briefly for the
 * hardware prefetcher to follow. */
static void fused_prefetch(const bora_fused *f, uint32_t seg, int64_t i0, int64_t len)
{
    for (uint32_t st = 0; st < f->n_steps; st++) {
        const bora_kernel_args *a = &f->args[seg * f->n_steps + st];
        const int32_t *sc = &f->scratch[st * BORA_FUSED_OPERANDS];
        for (uint32_t k = 0; k <= a->n_inputs; k++) {
            const bora_tensor_desc *t = k < a->n_inputs ? &a->inputs[k] : &a->outputs[0];
            if (sc[k] >= 0 || is_bcast(t, f->count[seg]))
                continue;
            size_t size = bora_dtype_size(t->dtype);
            const char *p = (const char *)t->data + (size_t)i0 * size;
            for (size_t o = 0; o < (size_t)len * size; o += 64)
                __builtin_prefetch(p + o);
        }
    }
}

/* ---- AdamW's update as one pass ---------------------------------------------------------------
 * The adamw plugin writes its update from small ops; the fusion planner makes one group of
 * them per parameter group. A group whose steps are exactly that chain (AW below: ops, operands
 * and wiring) runs as simd->adamw, a vector at a time with nothing in scratch, the same
 * operations in the same order, so the same bits; any other runs step by step. */

/* An operand in the chain: >= 0 the output of that step, else one of these. */
enum {
    AW_G = -1,
    AW_M = -2,
    AW_V = -3,
    AW_P = -4,
    AW_CLIP = -5,
    AW_IBC = -6,
    AW_EPS = -7,
    AW_STEP = -8,
    AW_DECAY = -9,
    AW_NONE = -10
};
enum { AW_OUT_M = 1, AW_OUT_V, AW_OUT_P, AW_OUT_PB };

typedef struct aw_step {
    int op;
    int in[2];
    int out; /* AW_OUT_*: a copy into memory; 0: a scratch value */
} aw_step;

/* the steps both chains share: the moments and the update u (steps 0-12) */
/* clang-format off */
#define AW_MOMENTS                             \
    {BORA_OP_MUL, {AW_G, AW_CLIP}, 0},         \
    {BORA_OP_SCALE, {0, AW_NONE}, 0},          \
    {BORA_OP_SCALE, {AW_M, AW_NONE}, 0},       \
    {BORA_OP_ADD, {2, 1}, 0},                  \
    {BORA_OP_MUL, {0, 0}, 0},                  \
    {BORA_OP_SCALE, {4, AW_NONE}, 0},          \
    {BORA_OP_SCALE, {AW_V, AW_NONE}, 0},       \
    {BORA_OP_ADD, {6, 5}, 0},                  \
    {BORA_OP_SQRT, {7, AW_NONE}, 0},           \
    {BORA_OP_MUL, {8, AW_IBC}, 0},             \
    {BORA_OP_ADD, {9, AW_EPS}, 0},             \
    {BORA_OP_DIV, {3, 10}, 0},                 \
    {BORA_OP_MUL, {11, AW_STEP}, 0}
/* clang-format on */

static const aw_step aw_decay[] = {
    AW_MOMENTS,
    {BORA_OP_MUL, {AW_P, AW_DECAY}, 0},
    {BORA_OP_SUB, {AW_P, 13}, 0},
    {BORA_OP_SUB, {14, 12}, 0},
    {BORA_OP_COPY, {3, AW_NONE}, AW_OUT_M},
    {BORA_OP_COPY, {7, AW_NONE}, AW_OUT_V},
    {BORA_OP_COPY, {15, AW_NONE}, AW_OUT_P},
    {BORA_OP_COPY, {15, AW_NONE}, AW_OUT_PB},
};
static const aw_step aw_plain[] = {
    AW_MOMENTS,
    {BORA_OP_SUB, {AW_P, 12}, 0},
    {BORA_OP_COPY, {3, AW_NONE}, AW_OUT_M},
    {BORA_OP_COPY, {7, AW_NONE}, AW_OUT_V},
    {BORA_OP_COPY, {13, AW_NONE}, AW_OUT_P},
    {BORA_OP_COPY, {13, AW_NONE}, AW_OUT_PB},
};

/* Whether group f is the chain aw (n steps with the bf16 copy, n - 1 without): every segment's
 * steps, operands (memory, scalar or scratch) and wiring; a memory operand read twice must be
 * one array. */
static int aw_match(const bora_fused *f, const aw_step *aw, uint32_t n)
{
    uint32_t steps = f->n_steps;
    if ((steps != n && steps != n - 1) || f->n_segments == 0)
        return 0;
    int tile_of[64];
    for (int t = 0; t < 64; t++)
        tile_of[t] = -1;
    for (uint32_t st = 0; st < steps; st++) {
        const aw_step *w = &aw[st];
        const int32_t *sc = &f->scratch[st * BORA_FUSED_OPERANDS];
        uint32_t nin = w->in[1] == AW_NONE ? 1 : 2;
        for (uint32_t sg = 0; sg < f->n_segments; sg++) {
            const bora_kernel_args *a = &f->args[sg * steps + st];
            int want_out = w->out == AW_OUT_PB ? BORA_DTYPE_BF16 : BORA_DTYPE_F32;
            if ((int)a->op != w->op || a->n_inputs != nin || a->n_outputs != 1 ||
                a->outputs[0].dtype != want_out)
                return 0;
            for (uint32_t k = 0; k < nin; k++) {
                const bora_tensor_desc *t = &a->inputs[k];
                int ref = w->in[k], bcast = is_bcast(t, f->count[sg]);
                if (t->dtype != BORA_DTYPE_F32)
                    return 0;
                if (ref >= 0 ? sc[k] < 0 || sc[k] >= 64 || tile_of[sc[k]] != ref
                             : sc[k] >= 0 || bcast != (ref <= AW_CLIP))
                    return 0;
            }
            if (w->out ? sc[nin] >= 0 || is_bcast(&a->outputs[0], f->count[sg])
                       : sc[nin] < 0 || sc[nin] >= 64)
                return 0;
        }
        if (!w->out) /* sc[nin] in [0, 64), checked above */
            tile_of[sc[nin]] = (int)st;
    }
    for (uint32_t sg = 0; sg < f->n_segments; sg++) {
        const void *mem[4] = {NULL, NULL, NULL, NULL};
        for (uint32_t st = 0; st < steps; st++)
            for (int k = 0; k < 2; k++) {
                int ref = aw[st].in[k];
                if (ref < 0 && ref >= AW_P) {
                    const void *d = f->args[sg * steps + st].inputs[k].data;
                    if (mem[-ref - 1] && mem[-ref - 1] != d)
                        return 0;
                    mem[-ref - 1] = d;
                }
            }
    }
    return 1;
}

/* Segment sg's operands: memory, scalars and SCALE's values, from the steps that read them. */
static void aw_operands(const bora_fused *f, const aw_step *aw, uint32_t sg, cpu_adamw *w)
{
    memset(w, 0, sizeof *w);
    const bora_kernel_args *a = &f->args[sg * f->n_steps];
    float scale[4], *scale_at = scale;
    for (uint32_t st = 0; st < f->n_steps; st++) {
        const aw_step *s = &aw[st];
        if (s->op == BORA_OP_SCALE)
            *scale_at++ = (float)((const bora_opt_scalar *)a[st].options)->value;
        for (int k = 0; k < 2; k++) {
            const void *d = k < (int)a[st].n_inputs ? a[st].inputs[k].data : NULL;
            switch (s->in[k]) {
            case AW_G: w->g = d; break;
            case AW_M: w->m = d; break;
            case AW_V: w->v = d; break;
            case AW_P: w->p = d; break;
            case AW_CLIP: w->clip = *(const float *)d; break;
            case AW_IBC: w->inv_bc2 = *(const float *)d; break;
            case AW_EPS: w->eps = *(const float *)d; break;
            case AW_STEP: w->step = *(const float *)d; break;
            case AW_DECAY: w->decay = *(const float *)d, w->decay_on = 1; break;
            default: break;
            }
        }
        void *o = a[st].outputs[0].data;
        switch (s->out) {
        case AW_OUT_M: w->m_out = o; break;
        case AW_OUT_V: w->v_out = o; break;
        case AW_OUT_P: w->p_out = o; break;
        case AW_OUT_PB: w->pb = o; break;
        default: break;
        }
    }
    /* the chain's SCALE steps: a·(1 - b1), m·b1, (a a)·(1 - b2), v·b2 */
    w->one_b1 = scale[0], w->b1 = scale[1], w->one_b2 = scale[2], w->b2 = scale[3];
}

/* Elements per job of the AdamW pass. */
#define AW_TILE 4096

/* 1 when group f is AdamW's update, run here; 0 when it is not; -1 out of memory. */
static int run_adamw(bora_backend *b, const bora_fused *f)
{
    const uint32_t n_decay = sizeof aw_decay / sizeof *aw_decay,
                   n_plain = sizeof aw_plain / sizeof *aw_plain;
    int which = aw_match(f, aw_decay, n_decay) ? 1 : aw_match(f, aw_plain, n_plain) ? 2 : 0;
    if (!which)
        return 0;
    const aw_step *aw = which == 1 ? aw_decay : aw_plain;
    if (!(b->adamw_told & which)) {
        b->adamw_told |= which;
        b->h->log(b->h, BORA_LOG_DEBUG,
                  "a fused group of %u steps over %u segments runs as AdamW's one-pass update "
                  "(%s weight decay%s)",
                  f->n_steps, f->n_segments, which == 1 ? "with" : "without",
                  f->n_steps == (which == 1 ? n_decay : n_plain) ? ", bf16 copies written" : "");
    }
    uint32_t nseg = f->n_segments;
    int64_t *first = tile_jobs(f, AW_TILE);
    if (!first)
        return -1;
    const cpu_simd *simd = b->simd;
#pragma omp parallel
    {
        uint32_t seg = 0;
        cpu_adamw w;
        int have = -1;
#pragma omp for schedule(static)
        for (int64_t job = 0; job < first[nseg]; job++) {
            while (first[seg + 1] <= job)
                seg++;
            if (have != (int)seg) {
                aw_operands(f, aw, seg, &w);
                have = (int)seg;
            }
            int64_t i0 = (job - first[seg]) * AW_TILE;
            int64_t len = f->count[seg] - i0 < AW_TILE ? f->count[seg] - i0 : AW_TILE;
            simd->adamw(&w, i0, len);
        }
    }
    free(first);
    return 1;
}

bora_status cpu_run_fused(bora_backend *b, const bora_fused *f)
{
    uint32_t steps = f->n_steps, nseg = f->n_segments;
    for (uint32_t i = 0; i < steps * nseg; i++) {
        const bora_kernel_args *a = &f->args[i];
        const int32_t *sc = &f->scratch[(i % steps) * BORA_FUSED_OPERANDS];
        if (!fused_step_ok(a))
            return BORA_ERR_UNSUPPORTED;
        /* a bf16 output is written to memory from a dense (or scratch) input; a bf16 input is
         * read from dense memory */
        if (a->outputs[0].dtype == BORA_DTYPE_BF16 &&
            (sc[a->n_inputs] >= 0 || (sc[0] < 0 && is_bcast(&a->inputs[0], f->count[i / steps]))))
            return BORA_ERR_UNSUPPORTED;
        if (a->inputs[0].dtype == BORA_DTYPE_BF16 &&
            (sc[0] >= 0 || is_bcast(&a->inputs[0], f->count[i / steps])))
            return BORA_ERR_UNSUPPORTED;
    }
    int aw = run_adamw(b, f);
    if (aw)
        return aw > 0 ? BORA_OK : BORA_ERR_NOMEM;
    int64_t *first = tile_jobs(f, FUSED_TILE);
    if (!first)
        return BORA_ERR_NOMEM;
    int64_t jobs = first[nseg];
    int failed = 0;
#pragma omp parallel
    {
        /* the scratch tiles, then two for broadcast operands */
        float *tiles = malloc(sizeof(float) * FUSED_TILE * (f->n_scratch + 2));
        uint32_t seg = 0;
#pragma omp for schedule(static)
        for (int64_t job = 0; job < jobs; job++) {
            if (!tiles) {
#pragma omp atomic write
                failed = 1;
                continue;
            }
            while (first[seg + 1] <= job) /* jobs ascend within a thread */
                seg++;
            while (first[seg] > job)
                seg--;
            int64_t i0 = (job - first[seg]) * FUSED_TILE;
            int64_t len = f->count[seg] - i0 < FUSED_TILE ? f->count[seg] - i0 : FUSED_TILE;
            if (job + 1 < jobs) { /* the next tile, most likely this thread's */
                uint32_t ns = seg;
                while (first[ns + 1] <= job + 1) /* past empty segments */
                    ns++;
                int64_t n0 = (job + 1 - first[ns]) * FUSED_TILE;
                fused_prefetch(f, ns, n0,
                               f->count[ns] - n0 < FUSED_TILE ? f->count[ns] - n0 : FUSED_TILE);
            }
            for (uint32_t st = 0; st < steps; st++) {
                const bora_kernel_args *a = &f->args[seg * steps + st];
                const int32_t *sc = &f->scratch[st * BORA_FUSED_OPERANDS];
                const float *in[2] = {NULL, NULL};
                int op = (int)a->op;
                if (a->outputs[0].dtype == BORA_DTYPE_BF16) { /* checked above */
                    const float *x = sc[0] >= 0 ? tiles + (size_t)sc[0] * FUSED_TILE
                                                : (const float *)a->inputs[0].data + i0;
                    b->simd->to_bf16((uint16_t *)a->outputs[0].data + i0, x, len);
                    continue;
                }
                float *out = sc[a->n_inputs] >= 0 ? tiles + (size_t)sc[a->n_inputs] * FUSED_TILE
                                                  : (float *)a->outputs[0].data + i0;
                if (a->inputs[0].dtype == BORA_DTYPE_BF16) { /* checked above */
                    b->simd->from_bf16(out, (const uint16_t *)a->inputs[0].data + i0, len);
                    continue;
                }
                /* a binary op with one scalar operand (a learning rate, say) and one array: one
                 * loop over the array, no tile filled with the scalar */
                int sk = -1;
                if (a->n_inputs == 2 && b->simd->arith_scalar(op, NULL, NULL, 0, 0, 0))
                    for (int k = 0; k < 2 && sk < 0; k++)
                        if (sc[k] < 0 && is_bcast(&a->inputs[k], f->count[seg]))
                            sk = k;
                if (sk >= 0) {
                    int o = 1 - sk;
                    const bora_tensor_desc *t = &a->inputs[o];
                    if (sc[o] >= 0 || !is_bcast(t, f->count[seg])) {
                        const float *x = sc[o] >= 0 ? tiles + (size_t)sc[o] * FUSED_TILE
                                                    : (const float *)t->data + i0;
                        b->simd->arith_scalar(op, out, x, *(const float *)a->inputs[sk].data,
                                              sk == 0, len);
                        continue;
                    }
                }
                for (uint32_t k = 0; k < a->n_inputs; k++) {
                    const bora_tensor_desc *t = &a->inputs[k];
                    if (sc[k] >= 0) {
                        in[k] = tiles + (size_t)sc[k] * FUSED_TILE;
                    } else if (is_bcast(t, f->count[seg])) {
                        float *bt = tiles + (size_t)(f->n_scratch + k) * FUSED_TILE;
                        float v = *(const float *)t->data;
                        for (int64_t e = 0; e < len; e++)
                            bt[e] = v;
                        in[k] = bt;
                    } else {
                        in[k] = (const float *)t->data + i0;
                    }
                }
                if (op == BORA_OP_COPY) {
                    memmove(out, in[0], sizeof(float) * (size_t)len);
                    continue;
                }
                int act_op = op == BORA_OP_ACT_GRAD ? ((const bora_opt_act *)a->options)->op : 0;
                float value = op == BORA_OP_FILL || op == BORA_OP_SCALE
                                  ? (float)((const bora_opt_scalar *)a->options)->value
                                  : 0;
                span(b->simd, op, act_op, value, out, in[0], in[1], len);
            }
        }
        free(tiles);
    }
    free(first);
    return failed ? BORA_ERR_NOMEM : BORA_OK;
}

/* ---- scatter_add: the embedding's gradient --------------------------------------------------- */

/* Columns per job of scatter_add: each job adds every row, in order, into its columns. */
#define SCATTER_COLS 64

int fast_scatter_add_f32(bora_backend *b, const bora_kernel_args *a)
{
    (void)b;
    const bora_tensor_desc *ids = &a->inputs[0], *src = &a->inputs[1], *o = &a->outputs[0];
    const bora_tensor_desc *init = a->n_inputs > 2 ? &a->inputs[2] : NULL;
    int64_t rows = ids->dims[0], V = o->dims[0], D = o->dims[1];
    if ((D > 1 && (o->strides[1] != 1 || src->strides[1] != 1)) || (V > 1 && o->strides[0] != D))
        return -1;
    if (init && ((D > 1 && init->strides[1] != 1) || (V > 1 && init->strides[0] != D)))
        return -1;
    float *out = o->data;
    const float *s = src->data;
    const int32_t *id = ids->data;
    int64_t n = V * D, chunks = (n + FAST_CHUNK - 1) / FAST_CHUNK;
    if (!init || init->data != out) { /* zeros, or init's values copied (none when in place) */
#pragma omp parallel for schedule(static)
        for (int64_t c = 0; c < chunks; c++) {
            int64_t i0 = c * FAST_CHUNK, len = n - i0 < FAST_CHUNK ? n - i0 : FAST_CHUNK;
            if (init)
                memmove(out + i0, (const float *)init->data + i0, sizeof(float) * (size_t)len);
            else
                memset(out + i0, 0, sizeof(float) * (size_t)len);
        }
    }
    int64_t jobs = (D + SCATTER_COLS - 1) / SCATTER_COLS;
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < jobs; j++) {
        int64_t c0 = j * SCATTER_COLS, w = D - c0 < SCATTER_COLS ? D - c0 : SCATTER_COLS;
        for (int64_t r = 0; r < rows; r++) {
            int32_t v = id[r * ids->strides[0]];
            if (v < 0 || v >= V)
                continue;
            float *dst = out + v * D + c0;
            const float *row = s + r * src->strides[0] + c0;
            for (int64_t i = 0; i < w; i++)
                dst[i] += row[i];
        }
    }
    return 0;
}

/* ---- LayerNorm over dense rows --------------------------------------------------------------- */

/* Whether the last axis is dense and the leading axes collapse into one row axis, row r starting
 * at r ld. */
static int dense_rows(const bora_tensor_desc *t, int64_t *ld)
{
    int last = t->ndim - 1;
    if (t->ndim < 1 || (t->dims[last] > 1 && t->strides[last] != 1))
        return 0;
    /* the leading axes collapse into one row axis */
    int64_t step = -1, expect = -1;
    for (int i = last - 1; i >= 0; i--) {
        if (t->dims[i] == 1)
            continue;
        if (step < 0)
            step = t->strides[i], expect = step * t->dims[i];
        else if (t->strides[i] != expect)
            return 0;
        else
            expect *= t->dims[i];
    }
    *ld = step < 0 ? t->dims[last] : step;
    return *ld >= t->dims[last];
}

int fast_layernorm_f32(bora_backend *b, const bora_kernel_args *a)
{
    const bora_tensor_desc *x = &a->inputs[0], *gm = &a->inputs[1], *bt = &a->inputs[2];
    const bora_tensor_desc *y = &a->outputs[0];
    int64_t ldx, ldy, n = x->dims[x->ndim - 1], rows = cpu_rows_of(x);
    if (!dense_rows(x, &ldx) || !dense_rows(y, &ldy) ||
        (n > 1 && (gm->strides[0] != 1 || bt->strides[0] != 1)))
        return -1;
    double eps = ((const bora_opt_norm *)a->options)->eps;
    const float *xd = x->data, *gamma = gm->data, *beta = bt->data;
    float *yd = y->data, *mean = a->outputs[1].data, *rstd = a->outputs[2].data;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++)
        b->simd->ln_row(yd + r * ldy, xd + r * ldx, gamma, beta, n, eps, mean + r, rstd + r);
    return 0;
}

/* Columns per job of LayerNorm's parameter gradients. */
#define LN_COLS 64

int fast_layernorm_grad_f32(bora_backend *b, const bora_kernel_args *a)
{
    const bora_tensor_desc *x = &a->inputs[0], *gm = &a->inputs[1], *dyd = &a->inputs[4];
    const bora_tensor_desc *dx = &a->outputs[0], *dg = &a->outputs[1], *db = &a->outputs[2];
    int64_t ldx, lddy, lddx, n = x->dims[x->ndim - 1], rows = cpu_rows_of(x);
    if (!dense_rows(x, &ldx) || !dense_rows(dyd, &lddy) || !dense_rows(dx, &lddx) ||
        (n > 1 && (gm->strides[0] != 1 || dg->strides[0] != 1 || db->strides[0] != 1)))
        return -1;
    const float *xd = x->data, *dy = dyd->data, *gamma = gm->data;
    const float *mean = a->inputs[2].data, *rstd = a->inputs[3].data;
    float *dxd = dx->data, *dgd = dg->data, *dbd = db->data;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++)
        b->simd->ln_grad_row(dxd + r * lddx, xd + r * ldx, dy + r * lddy, gamma, n, (double)mean[r],
                             (double)rstd[r]);
    int64_t jobs = (n + LN_COLS - 1) / LN_COLS;
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < jobs; j++) {
        int64_t c0 = j * LN_COLS, w = n - c0 < LN_COLS ? n - c0 : LN_COLS;
        double sg[LN_COLS] = {0}, sb[LN_COLS] = {0};
        b->simd->ln_grad_cols(sg, sb, xd + c0, dy + c0, mean, rstd, rows, ldx, lddy, w);
        for (int64_t i = 0; i < w; i++) {
            dgd[c0 + i] = (float)sg[i];
            dbd[c0 + i] = (float)sb[i];
        }
    }
    return 0;
}

/* ---- RMSNorm over dense rows ------------------------------------------------------------------ */

/* (x, [weight]) -> y, rstd: a row per call of rms_row, rows split among the threads (a row is
 * one thread's, so the bits do not depend on the thread count). */
int fast_rms_norm_f32(bora_backend *b, const bora_kernel_args *a)
{
    const bora_opt_rms_norm *o = a->options;
    const bora_tensor_desc *x = &a->inputs[0], *wd = a->n_inputs > 1 ? &a->inputs[1] : NULL;
    const bora_tensor_desc *y = &a->outputs[0];
    int64_t ldx, ldy, n = x->dims[x->ndim - 1], rows = cpu_rows_of(x);
    if (!dense_rows(x, &ldx) || !dense_rows(y, &ldy) || (wd && n > 1 && wd->strides[0] != 1))
        return -1;
    const float *xd = x->data, *w = wd ? wd->data : NULL;
    float *yd = y->data, *rstd = a->outputs[1].data;
    double off = o->weight_offset, eps = o->eps;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++)
        b->simd->rms_row(yd + r * ldy, xd + r * ldx, w, off, n, eps, rstd + r);
    return 0;
}

/* (x, [weight], rstd, dy) -> dx, [dweight]: dx a row per call, dweight by fixed blocks of
 * columns, each walking the rows in order. */
int fast_rms_norm_grad_f32(bora_backend *b, const bora_kernel_args *a)
{
    const bora_opt_rms_norm *o = a->options;
    int nw = a->n_inputs == 4;
    const bora_tensor_desc *x = &a->inputs[0], *wd = nw ? &a->inputs[1] : NULL;
    const bora_tensor_desc *dyd = &a->inputs[2 + nw], *dx = &a->outputs[0];
    const bora_tensor_desc *dwd = nw ? &a->outputs[1] : NULL;
    int64_t ldx, lddy, lddx, n = x->dims[x->ndim - 1], rows = cpu_rows_of(x);
    if (!dense_rows(x, &ldx) || !dense_rows(dyd, &lddy) || !dense_rows(dx, &lddx) ||
        (nw && n > 1 && (wd->strides[0] != 1 || dwd->strides[0] != 1)))
        return -1;
    const float *xd = x->data, *dy = dyd->data, *w = nw ? wd->data : NULL;
    const float *rstd = a->inputs[1 + nw].data;
    float *dxd = dx->data;
    double off = o->weight_offset;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++)
        b->simd->rms_grad_row(dxd + r * lddx, xd + r * ldx, dy + r * lddy, w, off, n,
                              (double)rstd[r]);
    if (!nw)
        return 0;
    float *dwp = dwd->data;
    int64_t jobs = (n + LN_COLS - 1) / LN_COLS;
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < jobs; j++) {
        int64_t c0 = j * LN_COLS, cw = n - c0 < LN_COLS ? n - c0 : LN_COLS;
        double acc[LN_COLS] = {0};
        b->simd->rms_grad_cols(acc, xd + c0, dy + c0, rstd, rows, ldx, lddy, cw);
        for (int64_t i = 0; i < cw; i++)
            dwp[c0 + i] = (float)acc[i];
    }
    return 0;
}
