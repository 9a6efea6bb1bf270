/* plugins/backends/cpu/attention.c — f32 attention in blocks of query rows: per (batch, head,
 * block), S = scale·Q Kᵀ and O = P V on oneDNN's sgemm, an exact softmax per row in between
 * (the row's max, exp with our own vectorised exp, the sum in double); only the keys some row of
 * the block can see are multiplied. The backward pass recomputes P from the saved log-sum-exp,
 * per (batch, kv head), and accumulates dK and dV over the group's query heads block after block
 * in a fixed order (grouped-query attention: query head h reads kv head h / G, by index). Every job is
 * one thread's from start to end, so the bits never depend on the thread count. The loops of
 * kernels_t.h stay the reference (and the path for layouts these do not take: head_dim must be
 * the dense inner axis of every operand). A soft cap (bora_opt_attention.softcap, c > 0) turns
 * each row of scores into c·tanh(S / c) before the masks, and the backward pass, recomputing
 * it, keeps S / c to multiply the scores' gradient by 1 - tanh². Under trainer.mp c=bf16 the
 * products may take bf16 operands on oneDNN's matmul primitive instead (below: "bf16
 * products"), whose jobs depend on the thread count, so that path keeps its bits run after run
 * but not across thread counts (bf16 makes no such promise, docs/design.md §8). */
#include "kernels_fast.h"

#include <dnnl.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* Query rows per block: S for a block is ATT_ROWS x keys floats, 64 KiB at 256 keys. */
#define ATT_ROWS 64

typedef struct att_shape {
    int64_t B, H, T, E, S, L;
    const int32_t *seg_q, *seg_k;
    int64_t sq_b, sq_t, sk_b, sk_s;
    int causal;
    float scale;
    int64_t G; /* query heads per kv head (grouped-query attention): h reads kv head h / G */
    int64_t W; /* the sliding window (0: none) */
    float cap, inv_cap; /* (ABI 1.12) the soft cap c and 1 / c (0: none) */
} att_shape;

static int inner_dense(const bora_tensor_desc *t)
{
    return t->ndim == 4 && (t->strides[3] == 1 || t->dims[3] == 1);
}

static int att_setup(const bora_kernel_args *a, int extra, att_shape *sh)
{
    const bora_opt_attention *opt = a->options;
    const bora_tensor_desc *q = &a->inputs[0], *k = &a->inputs[1];
    memset(sh, 0, sizeof *sh);
    sh->B = q->dims[0], sh->H = q->dims[1], sh->T = q->dims[2], sh->E = q->dims[3];
    sh->S = k->dims[2];
    sh->L = sh->S;
    sh->causal = opt->causal;
    sh->scale = (float)opt->scale;
    int64_t hkv = k->dims[1];
    if (hkv < 1 || sh->H % hkv)
        return 0;
    sh->G = sh->H / hkv;
    if (opt->struct_size >= offsetof(bora_opt_attention, sliding_window) + sizeof(int64_t))
        sh->W = opt->sliding_window;
    if (opt->struct_size >= offsetof(bora_opt_attention, softcap) + sizeof(double) &&
        opt->softcap > 0) {
        sh->cap = (float)opt->softcap, sh->inv_cap = (float)(1.0 / opt->softcap);
        if (!(sh->cap > 0) || !isfinite(sh->cap) || !isfinite(sh->inv_cap))
            return 0; /* a cap past f32's range: the loops, in double */
    }
    int at = extra;
    if (opt->segments) {
        const bora_tensor_desc *sq = &a->inputs[at], *sk = &a->inputs[at + 1];
        sh->seg_q = sq->data, sh->sq_b = sq->strides[0], sh->sq_t = sq->strides[1];
        sh->seg_k = sk->data, sh->sk_b = sk->strides[0], sh->sk_s = sk->strides[1];
        at += 2;
    }
    if (opt->key_length) {
        int64_t L = *(const int32_t *)a->inputs[at].data;
        sh->L = L < 0 ? 0 : L > sh->S ? sh->S : L;
    }
    return sh->E > 0 && sh->E <= 4096;
}

/* Keys rows [t0, t1) may see: [0, n). */
static int64_t att_keys(const att_shape *sh, int64_t t1)
{
    int64_t n = sh->L;
    if (sh->causal && sh->L - sh->T + t1 < n)
        n = sh->L - sh->T + t1;
    return n < 0 ? 0 : n;
}

/* A row of n scores capped: row = c·tanh(row / c), keeping row / c in x for the backward pass
 * (x NULL: not kept). Nothing without a cap. */
static void att_cap_row(const cpu_simd *simd, const att_shape *sh, float *row, float *x, int64_t n)
{
    if (sh->cap <= 0)
        return;
    float *y = x ? x : row;
    simd->arith_scalar(BORA_OP_MUL, y, row, sh->inv_cap, 0, n);
    simd->unary(BORA_OP_TANH, row, y, n);
    simd->arith_scalar(BORA_OP_MUL, row, row, sh->cap, 0, n);
}

/* -inf where query t may not see key s (s < n already holds). */
static void att_mask_row(const cpu_simd *simd, const att_shape *sh, int64_t bi, int64_t t,
                         float *row, int64_t n)
{
    if (sh->causal) {
        int64_t last = sh->L - sh->T + t; /* the last key visible */
        for (int64_t s = last + 1 < 0 ? 0 : last + 1; s < n; s++)
            row[s] = -INFINITY;
    }
    if (sh->W > 0) { /* the sliding window: keys s > i - W only, i = L - T + t */
        int64_t first = sh->L - sh->T + t - sh->W + 1;
        for (int64_t s = 0; s < n && s < first; s++)
            row[s] = -INFINITY;
    }
    if (sh->seg_q) {
        int32_t qs = sh->seg_q[bi * sh->sq_b + t * sh->sq_t];
        const int32_t *sk = sh->seg_k + bi * sh->sk_b;
        if (sh->sk_s == 1)
            simd->mask_segment(row, sk, qs, n);
        else
            for (int64_t s = 0; s < n; s++)
                if (sk[s * sh->sk_s] != qs)
                    row[s] = -INFINITY;
    }
}

static int sgemm(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                 int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    return dnnl_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) == dnnl_success ? 0 : 1;
}

/* ---- bf16 products (bora_opt_attention.product_dtype: trainer.mp c=bf16) ----
 *
 * Where the backend runs bf16 matmuls on oneDNN (matmul_bf16.c's rule), the five products take
 * bf16 operands and accumulate in f32: q, k, v and dO rounded once per job, the probabilities P
 * and their gradient dS rounded after the f32 softmax, each a batch over a job's kv heads in one
 * primitive per block (at 12 heads, 12 times fewer calls than a head at a time). A job is a batch
 * row's kv heads with their query heads, or an equal share of them where there are fewer rows
 * than threads; it runs on one thread, its primitives on that thread's stream. Grouped heads (G
 * query heads per kv head) become rows: the job's bf16 copy of q (and of dO) holds, block by
 * block, a kv head's G query heads' rows one head after the other, so one product over G·r rows
 * reads that kv head's K or V once (never copied per query head), P and dS come out in (query
 * head, row) order as with G = 1, and dV += Pᵀ dO and dK += scale·dSᵀ Q sum the group's heads
 * inside one product, in the order its fixed shape gives, block after block. O and dQ, whose
 * query heads are not one row stride apart, pass through a dense block when G > 1. The masks,
 * the softmax, the log-sum-exp and D = Σ dO·O are the f32 path's. Not with a runtime key length
 * (a decode step's key count changes every step, and a primitive is made per count: decoding
 * runs the f32 kernels). */

enum { P_QK, P_DOV, P_PV, P_PTDO, P_DSK, P_DSTQ, P_KINDS };

static int att_bf16_wanted(const bora_backend *bk, const bora_kernel_args *a)
{
    const bora_opt_attention *opt = a->options;
    return bk->bf16_onednn &&
           opt->struct_size >= offsetof(bora_opt_attention, product_dtype) + sizeof(int32_t) &&
           opt->product_dtype == BORA_DTYPE_BF16 && !opt->key_length;
}

/* Kv heads per job: the most that divide the kv heads equally, keep a block's f32 scores (G
 * query heads each) within ATT_BF16_CACHE bytes (measured on a 2-core EPYC, family 26, at 512
 * keys: 2 heads at a time took 270 ms a step for the backward pass, 12 at a time 287-316) and
 * give every thread a job. */
#define ATT_BF16_CACHE (256 << 10)

static int64_t att_kv_heads_per_job(const bora_backend *bk, const att_shape *sh)
{
    int64_t hkv = sh->H / sh->G;
    for (int64_t g = 1; g <= hkv; g++) {
        int64_t kb = hkv / g;
        if (hkv % g == 0 && sh->B * g >= bk->num_threads &&
            kb * sh->G * ATT_ROWS * sh->S * (int64_t)sizeof(float) <= ATT_BF16_CACHE)
            return kb;
    }
    return 1;
}

/* Row, column and head strides {head, row, column} of an output, in elements. */
static void att_out_strides(const bora_tensor_desc *t, int64_t s[3])
{
    s[0] = t->strides[1], s[1] = t->strides[2], s[2] = t->strides[3];
}

/* The key of product kind for a block of r query rows over n keys, kb kv heads. The job's bf16
 * copies are dense: q and dO (kb, G·T, E) in the grouped order (att_round_grouped), k and v (kb,
 * S, E); P and dS are dense (kb, G·r, n). out: the f32 result's strides (O, dV, dQ or dK), NULL
 * for a dense (kb, G·r, E) block. */
static cpu_mm_key att_key(int kind, const att_shape *sh, int64_t kb, int64_t r, int64_t n,
                          const int64_t *out)
{
    int64_t T = sh->T, S = sh->S, E = sh->E, G = sh->G, m = G * r;
    cpu_mm_key k;
    memset(&k, 0, sizeof k);
    k.batch = kb, k.alpha = 1.0f, k.flags = CPU_MM_THREADED;
    const int64_t rows_q[3] = {G * T * E, E, 1}, rows_k[3] = {S * E, E, 1},
                  cols_k[3] = {S * E, 1, E};
    const int64_t p[3] = {m * n, n, 1}, pt[3] = {m * n, 1, n}, block[3] = {m * E, E, 1};
    const int64_t *sa = p, *sb = rows_k, *sc = out ? out : block;
    switch (kind) {
    case P_QK:  /* S = scale · Q Kᵀ */
    case P_DOV: /* dP = dO Vᵀ */
        k.M = m, k.N = n, k.K = E, sa = rows_q, sb = cols_k, sc = p;
        k.alpha = kind == P_QK ? sh->scale : 1.0f;
        break;
    case P_PV:  /* O = P V */
    case P_DSK: /* dQ = scale · dS K */
        k.M = m, k.N = E, k.K = n;
        k.alpha = kind == P_DSK ? sh->scale : 1.0f;
        break;
    default: /* P_PTDO: dV += Pᵀ dO; P_DSTQ: dK += scale · dSᵀ Q, over the group's G·r rows */
        k.M = n, k.N = E, k.K = m, sa = pt, sb = rows_q;
        k.alpha = kind == P_DSTQ ? sh->scale : 1.0f;
        k.flags |= CPU_MM_ADD;
        break;
    }
    memcpy(k.sa, sa, sizeof k.sa);
    memcpy(k.sb, sb, sizeof k.sb);
    memcpy(k.sc, sc, sizeof k.sc);
    return k;
}

/* The rows and keys of block blk. */
static int64_t att_block(const att_shape *sh, int64_t blk, int64_t *rows)
{
    int64_t t0 = blk * ATT_ROWS;
    *rows = sh->T - t0 < ATT_ROWS ? sh->T - t0 : ATT_ROWS;
    return att_keys(sh, t0 + *rows);
}

/* The primitives of every block (blocks × P_KINDS, NULL where a kind is not used or a block
 * has no key), made now if new: 1, or 0 when oneDNN refuses one of them or memory runs out (the
 * f32 path runs instead). */
static int att_prims(bora_backend *bk, const bora_kernel_args *a, const att_shape *sh, int grad,
                     int building, const cpu_mm **mm)
{
    int64_t kb = att_kv_heads_per_job(bk, sh), blocks = (sh->T + ATT_ROWS - 1) / ATT_ROWS;
    int64_t out[P_KINDS][3] = {{0}};
    if (grad) {
        att_out_strides(&a->outputs[2], out[P_PTDO]);
        att_out_strides(&a->outputs[0], out[P_DSK]);
        att_out_strides(&a->outputs[1], out[P_DSTQ]);
    } else {
        att_out_strides(&a->outputs[0], out[P_PV]);
    }
    for (int64_t blk = 0; blk < blocks; blk++) {
        int64_t r, n = att_block(sh, blk, &r);
        for (int kind = 0; kind < P_KINDS; kind++) {
            const cpu_mm **m = &mm[blk * P_KINDS + kind];
            *m = NULL;
            int used = grad ? kind != P_PV : kind == P_QK || kind == P_PV;
            if (!used || n == 0)
                continue;
            /* O and dQ of grouped heads go through a dense block */
            int block = sh->G > 1 && (kind == P_PV || kind == P_DSK);
            cpu_mm_key key = att_key(kind, sh, kb, r, n, block ? NULL : out[kind]);
            if (!(*m = cpu_mm_get(bk, &key, building)))
                return 0;
        }
    }
    return 1;
}

/* att_prims into a new array: it, or NULL with *st -2 out of memory or -1 when oneDNN refuses one
 * of them (the f32 path runs). */
static const cpu_mm **att_prims_new(bora_backend *bk, const bora_kernel_args *a,
                                    const att_shape *sh, int grad, int building, int *st)
{
    int64_t blocks = (sh->T + ATT_ROWS - 1) / ATT_ROWS;
    const cpu_mm **mm = malloc(sizeof *mm * (size_t)(blocks * P_KINDS));
    *st = -2;
    if (mm && !att_prims(bk, a, sh, grad, building, mm)) {
        free(mm);
        mm = NULL;
        *st = -1;
    }
    return mm;
}

bora_status cpu_prepare_attention(bora_backend *bk, const bora_kernel_args *a)
{
    att_shape sh;
    int grad = a->op == BORA_OP_ATTENTION_GRAD, st;
    if (!att_bf16_wanted(bk, a) || a->inputs[0].dtype != BORA_DTYPE_F32 ||
        !att_setup(a, grad ? 6 : 3, &sh))
        return BORA_OK;
    const cpu_mm **mm = att_prims_new(bk, a, &sh, grad, 1, &st);
    if (!mm && st == -2)
        return bk->h->fail(bk->h, BORA_ERR_NOMEM, "out of memory making oneDNN's primitives");
    free(mm);
    return BORA_OK;
}

/* A primitive run's status as the kernels' codes: 0, 2 out of memory, 3 oneDNN failed. */
static int att_run_status(int st)
{
    return st == 0 ? 0 : st == BORA_ERR_NOMEM ? 2 : 3;
}

#define HEAD(t, bi, h) ((float *)(t)->data + (bi) * (t)->strides[0] + (h) * (t)->strides[1])

/* Round rows [0, rows) of heads [h0, h0 + hb) of batch row bi of t into dense bf16, a head
 * every len rows (hb × len × E). */
static void att_round(const cpu_simd *simd, uint16_t *y, const bora_tensor_desc *t, int64_t bi,
                      int64_t h0, int64_t hb, int64_t len, int64_t rows, int64_t E)
{
    for (int64_t h = 0; h < hb; h++)
        for (int64_t r = 0; r < rows; r++)
            simd->to_bf16(y + (h * len + r) * E, HEAD(t, bi, h0 + h) + r * t->strides[2], E);
}

/* Round the T rows of query heads [h0, h0 + kb·G) of batch row bi of t (q or dO) into dense
 * bf16 in the grouped order: the block of rows [t0, t0 + r) of kv head j starts at
 * (j·G·T + t0·G)·E and holds its G query heads' r rows one head after the other, so a block's
 * rows of a kv head's group are one matrix of G·r rows (G = 1: plain (head, row) order). */
static void att_round_grouped(const cpu_simd *simd, uint16_t *y, const bora_tensor_desc *t,
                              int64_t bi, int64_t h0, int64_t kb, const att_shape *sh)
{
    int64_t G = sh->G, T = sh->T, E = sh->E;
    for (int64_t t0 = 0; t0 < T; t0 += ATT_ROWS) {
        int64_t r = T - t0 < ATT_ROWS ? T - t0 : ATT_ROWS;
        for (int64_t h = 0; h < kb * G; h++)
            for (int64_t i = 0; i < r; i++)
                simd->to_bf16(y + ((h / G) * G * T + t0 * G + (h % G) * r + i) * E,
                              HEAD(t, bi, h0 + h) + (t0 + i) * t->strides[2], E);
    }
}

/* Rows [t0, t0 + r) of heads [h0, h0 + hb) of batch row bi of t from a dense (hb, r, E) block. */
static void att_scatter(const float *blk, const bora_tensor_desc *t, int64_t bi, int64_t h0,
                        int64_t hb, int64_t t0, int64_t r, int64_t E)
{
    for (int64_t h = 0; h < hb; h++)
        for (int64_t i = 0; i < r; i++)
            memcpy(HEAD(t, bi, h0 + h) + (t0 + i) * t->strides[2], blk + (h * r + i) * E,
                   sizeof(float) * (size_t)E);
}

/* The forward pass in bf16: 0, -1 not taken (the f32 path runs), -2 out of memory, -3 oneDNN
 * failed. */
static int attention_bf16(bora_backend *bk, const bora_kernel_args *a, const att_shape *sh)
{
    const bora_tensor_desc *q = &a->inputs[0], *k = &a->inputs[1], *v = &a->inputs[2];
    const bora_tensor_desc *o = &a->outputs[0], *l = &a->outputs[1];
    int64_t blocks = (sh->T + ATT_ROWS - 1) / ATT_ROWS, T = sh->T, S = sh->S, E = sh->E;
    int64_t G = sh->G, kb = att_kv_heads_per_job(bk, sh), hb = kb * G, keys = att_keys(sh, T);
    int st;
    const cpu_mm **mm = att_prims_new(bk, a, sh, 0, 0, &st);
    if (!mm)
        return st;
    const cpu_simd *simd = bk->simd;
    int failed = 0;
#pragma omp parallel
    {
        size_t pn = (size_t)(hb * ATT_ROWS * (S ? S : 1)), kn = (size_t)(kb * (S ? S : 1) * E);
        float *P = malloc(sizeof(float) * pn);
        float *Ob = G > 1 ? malloc(sizeof(float) * (size_t)(hb * ATT_ROWS * E)) : NULL;
        uint16_t *Pb = malloc(sizeof(uint16_t) * pn);
        uint16_t *Qb = malloc(sizeof(uint16_t) * (size_t)(hb * T * E));
        uint16_t *Kb = malloc(sizeof(uint16_t) * kn), *Vb = malloc(sizeof(uint16_t) * kn);
        cpu_mm_stream *stream = cpu_mm_stream_new(bk);
        int mine = !P || (G > 1 && !Ob) || !Pb || !Qb || !Kb || !Vb || !stream ? 2 : 0;
        if (mine) {
#pragma omp atomic write
            failed = mine;
        }
#pragma omp for schedule(static)
        for (int64_t job = 0; job < sh->B * (sh->H / hb); job++) {
            int64_t bi = job / (sh->H / hb), h0 = (job % (sh->H / hb)) * hb, hk0 = h0 / G;
            if (mine)
                continue;
            att_round_grouped(simd, Qb, q, bi, h0, kb, sh);
            att_round(simd, Kb, k, bi, hk0, kb, S, keys, E);
            att_round(simd, Vb, v, bi, hk0, kb, S, keys, E);
            for (int64_t blk = 0; blk < blocks && !mine; blk++) {
                int64_t t0 = blk * ATT_ROWS, r, n = att_block(sh, blk, &r);
                float *op = HEAD(o, bi, h0) + t0 * o->strides[2];
                if (n == 0) { /* no key visible: output 0 */
                    for (int64_t h = 0; h < hb; h++)
                        for (int64_t t = 0; t < r; t++) {
                            memset(op + h * o->strides[1] + t * o->strides[2], 0,
                                   sizeof(float) * (size_t)E);
                            HEAD(l, bi, h0 + h)[(t0 + t) * l->strides[2]] = -INFINITY;
                        }
                    continue;
                }
                mine = att_run_status(
                    cpu_mm_run(bk, stream, mm[blk * P_KINDS + P_QK], Qb + t0 * G * E, Kb, P));
                if (mine)
                    break;
                for (int64_t h = 0; h < hb; h++) {
                    float *lp = HEAD(l, bi, h0 + h);
                    for (int64_t t = 0; t < r; t++) {
                        float *row = P + (h * r + t) * n;
                        att_cap_row(simd, sh, row, NULL, n);
                        att_mask_row(simd, sh, bi, t0 + t, row, n);
                        float m = simd->max(row, n);
                        if (m == -INFINITY) {
                            memset(row, 0, sizeof(float) * (size_t)n);
                            lp[(t0 + t) * l->strides[2]] = -INFINITY;
                        } else {
                            double sum = simd->exp_sum(row, row, n, m);
                            simd->arith_scalar(BORA_OP_MUL, row, row, (float)(1.0 / sum), 0, n);
                            lp[(t0 + t) * l->strides[2]] = (float)((double)m + log(sum));
                        }
                        simd->to_bf16(Pb + (h * r + t) * n, row, n);
                    }
                }
                mine = att_run_status(
                    cpu_mm_run(bk, stream, mm[blk * P_KINDS + P_PV], Pb, Vb, G > 1 ? Ob : op));
                if (!mine && G > 1)
                    att_scatter(Ob, o, bi, h0, hb, t0, r, E);
            }
            if (mine) {
#pragma omp atomic write
                failed = mine;
            }
        }
        free(P);
        free(Ob);
        free(Pb);
        free(Qb);
        free(Kb);
        free(Vb);
        cpu_mm_stream_free(stream);
    }
    free(mm);
    return failed ? -failed : 0;
}

/* The backward pass in bf16 (as attention_bf16). */
static int attention_grad_bf16(bora_backend *bk, const bora_kernel_args *a, const att_shape *sh)
{
    const bora_tensor_desc *q = &a->inputs[0], *k = &a->inputs[1], *v = &a->inputs[2];
    const bora_tensor_desc *o = &a->inputs[3], *l = &a->inputs[4], *dout = &a->inputs[5];
    const bora_tensor_desc *dq = &a->outputs[0], *dk = &a->outputs[1], *dv = &a->outputs[2];
    int64_t blocks = (sh->T + ATT_ROWS - 1) / ATT_ROWS, T = sh->T, S = sh->S, E = sh->E;
    int64_t G = sh->G, kb = att_kv_heads_per_job(bk, sh), hb = kb * G, keys = att_keys(sh, T);
    int st;
    const cpu_mm **mm = att_prims_new(bk, a, sh, 1, 0, &st);
    if (!mm)
        return st;
    const cpu_simd *simd = bk->simd;
    int failed = 0;
#pragma omp parallel
    {
        size_t pn = (size_t)(hb * ATT_ROWS * (S ? S : 1)), kn = (size_t)(kb * (S ? S : 1) * E);
        float *P = malloc(sizeof(float) * pn), *dP = malloc(sizeof(float) * pn);
        float *X = sh->cap > 0 ? malloc(sizeof(float) * (size_t)(S ? S : 1)) : NULL;
        float *dQb = G > 1 ? malloc(sizeof(float) * (size_t)(hb * ATT_ROWS * E)) : NULL;
        uint16_t *Pb = malloc(sizeof(uint16_t) * pn), *dSb = malloc(sizeof(uint16_t) * pn);
        uint16_t *Qb = malloc(sizeof(uint16_t) * (size_t)(hb * T * E));
        uint16_t *dOb = malloc(sizeof(uint16_t) * (size_t)(hb * T * E));
        uint16_t *Kb = malloc(sizeof(uint16_t) * kn), *Vb = malloc(sizeof(uint16_t) * kn);
        cpu_mm_stream *stream = cpu_mm_stream_new(bk);
        int mine = !P || !dP || (sh->cap > 0 && !X) || (G > 1 && !dQb) || !Pb || !dSb || !Qb ||
                           !dOb || !Kb || !Vb || !stream
                       ? 2
                       : 0;
        if (mine) {
#pragma omp atomic write
            failed = mine;
        }
#pragma omp for schedule(static)
        for (int64_t job = 0; job < sh->B * (sh->H / hb); job++) {
            int64_t bi = job / (sh->H / hb), h0 = (job % (sh->H / hb)) * hb, hk0 = h0 / G;
            if (mine)
                continue;
            att_round_grouped(simd, Qb, q, bi, h0, kb, sh);
            att_round_grouped(simd, dOb, dout, bi, h0, kb, sh);
            att_round(simd, Kb, k, bi, hk0, kb, S, keys, E);
            att_round(simd, Vb, v, bi, hk0, kb, S, keys, E);
            for (int64_t j = 0; j < kb; j++) {
                for (int64_t s = 0; s < S; s++) {
                    memset(HEAD(dk, bi, hk0 + j) + s * dk->strides[2], 0,
                           sizeof(float) * (size_t)E);
                    memset(HEAD(dv, bi, hk0 + j) + s * dv->strides[2], 0,
                           sizeof(float) * (size_t)E);
                }
            }
            for (int64_t blk = 0; blk < blocks && !mine; blk++) {
                int64_t t0 = blk * ATT_ROWS, r, n = att_block(sh, blk, &r);
                float *dqp = HEAD(dq, bi, h0) + t0 * dq->strides[2];
                if (n == 0) {
                    for (int64_t h = 0; h < hb; h++)
                        for (int64_t t = 0; t < r; t++)
                            memset(dqp + h * dq->strides[1] + t * dq->strides[2], 0,
                                   sizeof(float) * (size_t)E);
                    continue;
                }
                const cpu_mm *const *m = mm + blk * P_KINDS;
                const uint16_t *qbl = Qb + t0 * G * E, *dobl = dOb + t0 * G * E;
                /* P = exp(scale·Q Kᵀ - lse), dP = dO Vᵀ, D = rowsum(dO ∘ O) */
                mine = att_run_status(cpu_mm_run(bk, stream, m[P_QK], qbl, Kb, P));
                if (!mine)
                    mine = att_run_status(cpu_mm_run(bk, stream, m[P_DOV], dobl, Vb, dP));
                if (mine)
                    break;
                for (int64_t h = 0; h < hb; h++) {
                    const float *lb = HEAD(l, bi, h0 + h), *db = HEAD(dout, bi, h0 + h),
                                *ob = HEAD(o, bi, h0 + h);
                    for (int64_t t = 0; t < r; t++) {
                        float *pr = P + (h * r + t) * n, *dpr = dP + (h * r + t) * n;
                        float lse = lb[(t0 + t) * l->strides[2]];
                        if (lse == -INFINITY) {
                            memset(pr, 0, sizeof(float) * (size_t)n);
                            memset(dpr, 0, sizeof(float) * (size_t)n);
                        } else {
                            att_cap_row(simd, sh, pr, X, n);
                            att_mask_row(simd, sh, bi, t0 + t, pr, n);
                            double d = simd->dot(db + (t0 + t) * dout->strides[2],
                                                 ob + (t0 + t) * o->strides[2], E);
                            simd->att_grad_row(pr, dpr, n, lse, (float)d);
                            if (sh->cap > 0) /* through the cap: · (1 - tanh²(S / c)) */
                                simd->act_grad(BORA_OP_TANH, dpr, X, dpr, n);
                        }
                        simd->to_bf16(Pb + (h * r + t) * n, pr, n);
                        simd->to_bf16(dSb + (h * r + t) * n, dpr, n);
                    }
                }
                /* dV += Pᵀ dO, dQ = scale·dS K, dK += scale·dSᵀ Q */
                mine =
                    att_run_status(cpu_mm_run(bk, stream, m[P_PTDO], Pb, dobl, HEAD(dv, bi, hk0)));
                if (!mine)
                    mine = att_run_status(
                        cpu_mm_run(bk, stream, m[P_DSK], dSb, Kb, G > 1 ? dQb : dqp));
                if (!mine && G > 1)
                    att_scatter(dQb, dq, bi, h0, hb, t0, r, E);
                if (!mine)
                    mine = att_run_status(
                        cpu_mm_run(bk, stream, m[P_DSTQ], dSb, qbl, HEAD(dk, bi, hk0)));
            }
            if (mine) {
#pragma omp atomic write
                failed = mine;
            }
        }
        free(P);
        free(dP);
        free(X);
        free(dQb);
        free(Pb);
        free(dSb);
        free(Qb);
        free(dOb);
        free(Kb);
        free(Vb);
        cpu_mm_stream_free(stream);
    }
    free(mm);
    return failed ? -failed : 0;
}

int fast_attention_f32(bora_backend *bk, const bora_kernel_args *a)
{
    const bora_tensor_desc *q = &a->inputs[0], *k = &a->inputs[1], *v = &a->inputs[2];
    const bora_tensor_desc *o = &a->outputs[0], *l = &a->outputs[1];
    att_shape sh;
    if (!att_setup(a, 3, &sh) || !inner_dense(q) || !inner_dense(k) || !inner_dense(v) ||
        !inner_dense(o))
        return -1;
    if (att_bf16_wanted(bk, a)) {
        int r = attention_bf16(bk, a, &sh);
        if (r != -1)
            return r;
    }
    int64_t blocks = (sh.T + ATT_ROWS - 1) / ATT_ROWS, S = sh.S, E = sh.E;
    const cpu_simd *simd = bk->simd;
    int failed = 0;
#pragma omp parallel
    {
        float *P = malloc(sizeof(float) * (size_t)(ATT_ROWS * (S ? S : 1)));
#pragma omp for schedule(static)
        for (int64_t job = 0; job < sh.B * sh.H * blocks; job++) {
            int64_t bi = job / (sh.H * blocks), h = (job / blocks) % sh.H;
            int64_t t0 = (job % blocks) * ATT_ROWS;
            int64_t rows = sh.T - t0 < ATT_ROWS ? sh.T - t0 : ATT_ROWS;
            const float *qp = (const float *)q->data + bi * q->strides[0] + h * q->strides[1] +
                              t0 * q->strides[2];
            int64_t hk = h / sh.G;
            const float *kp = (const float *)k->data + bi * k->strides[0] + hk * k->strides[1];
            const float *vp = (const float *)v->data + bi * v->strides[0] + hk * v->strides[1];
            float *op =
                (float *)o->data + bi * o->strides[0] + h * o->strides[1] + t0 * o->strides[2];
            float *lp = (float *)l->data + bi * l->strides[0] + h * l->strides[1];
            int64_t n = att_keys(&sh, t0 + rows);
            if (!P) {
#pragma omp atomic write
                failed = 2;
                continue;
            }
            if (n > 0 && sgemm('N', 'T', rows, n, E, sh.scale, qp, q->strides[2], kp, k->strides[2],
                               0.0f, P, n)) {
#pragma omp atomic write
                failed = 1;
                continue;
            }
            for (int64_t r = 0; r < rows; r++) {
                float *row = P + r * n;
                att_cap_row(simd, &sh, row, NULL, n);
                att_mask_row(simd, &sh, bi, t0 + r, row, n);
                float m = n ? simd->max(row, n) : -INFINITY;
                if (m == -INFINITY) { /* no key visible: output 0 */
                    memset(row, 0, sizeof(float) * (size_t)n);
                    lp[(t0 + r) * l->strides[2]] = -INFINITY;
                    continue;
                }
                double sum = simd->exp_sum(row, row, n, m);
                simd->arith_scalar(BORA_OP_MUL, row, row, (float)(1.0 / sum), 0, n);
                lp[(t0 + r) * l->strides[2]] = (float)((double)m + log(sum));
            }
            if (n > 0) {
                if (sgemm('N', 'N', rows, E, n, 1.0f, P, n, vp, v->strides[2], 0.0f, op,
                          o->strides[2])) {
#pragma omp atomic write
                    failed = 1;
                }
            } else {
                for (int64_t r = 0; r < rows; r++)
                    memset(op + r * o->strides[2], 0, sizeof(float) * (size_t)E);
            }
        }
        free(P);
    }
    return failed == 2 ? -2 : failed ? -3 : 0;
}

/* (q, k, v, out, lse, dout, [seg_q, seg_k], [key length]) -> dq, dk, dv. */
int fast_attention_grad_f32(bora_backend *bk, const bora_kernel_args *a)
{
    const bora_tensor_desc *q = &a->inputs[0], *k = &a->inputs[1], *v = &a->inputs[2];
    const bora_tensor_desc *o = &a->inputs[3], *l = &a->inputs[4], *dout = &a->inputs[5];
    const bora_tensor_desc *dq = &a->outputs[0], *dk = &a->outputs[1], *dv = &a->outputs[2];
    att_shape sh;
    if (!att_setup(a, 6, &sh))
        return -1;
    const bora_tensor_desc *all[] = {q, k, v, o, dout, dq, dk, dv};
    for (int i = 0; i < 8; i++)
        if (!inner_dense(all[i]))
            return -1;
    if (att_bf16_wanted(bk, a)) {
        int r = attention_grad_bf16(bk, a, &sh);
        if (r != -1)
            return r;
    }
    int64_t blocks = (sh.T + ATT_ROWS - 1) / ATT_ROWS, S = sh.S, E = sh.E;
    const cpu_simd *simd = bk->simd;
    int failed = 0;
#pragma omp parallel
    {
        size_t cap = (size_t)(ATT_ROWS * (S ? S : 1));
        float *P = malloc(sizeof(float) * cap), *dP = malloc(sizeof(float) * cap);
        float *X = sh.cap > 0 ? malloc(sizeof(float) * (size_t)(S ? S : 1)) : NULL;
#pragma omp for schedule(static)
        for (int64_t bh = 0; bh < sh.B * (sh.H / sh.G); bh++) {
            /* one job per (batch, kv head): its G query heads in order add into dK and dV */
            int64_t bi = bh / (sh.H / sh.G), hk = bh % (sh.H / sh.G);
#define BASE(t, h) ((float *)(t)->data + bi * (t)->strides[0] + (h) * (t)->strides[1])
            const float *kb = BASE(k, hk), *vb = BASE(v, hk);
            float *dkb = BASE(dk, hk), *dvb = BASE(dv, hk);
            int64_t ldq = q->strides[2], ldk = k->strides[2], ldv = v->strides[2];
            int64_t ldo = o->strides[2], ldd = dout->strides[2];
            int64_t lddq = dq->strides[2], lddk = dk->strides[2], lddv = dv->strides[2];
            if (!P || !dP || (sh.cap > 0 && !X)) {
#pragma omp atomic write
                failed = 2;
                continue;
            }
            for (int64_t s = 0; s < S; s++) {
                memset(dkb + s * lddk, 0, sizeof(float) * (size_t)E);
                memset(dvb + s * lddv, 0, sizeof(float) * (size_t)E);
            }
            int bad = 0;
            for (int64_t gi = 0; gi < sh.G * blocks && !bad; gi++) {
                int64_t h = hk * sh.G + gi / blocks, blk = gi % blocks;
                const float *qb = BASE(q, h), *ob = BASE(o, h), *db = BASE(dout, h),
                            *lb = BASE(l, h);
                float *dqb = BASE(dq, h);
                int64_t t0 = blk * ATT_ROWS, rows = sh.T - t0 < ATT_ROWS ? sh.T - t0 : ATT_ROWS;
                int64_t n = att_keys(&sh, t0 + rows);
                if (n == 0) {
                    for (int64_t r = 0; r < rows; r++)
                        memset(dqb + (t0 + r) * lddq, 0, sizeof(float) * (size_t)E);
                    continue;
                }
                /* P = exp(scale·Q Kᵀ - lse), dP = dO Vᵀ, D = rowsum(dO ∘ O) */
                bad |=
                    sgemm('N', 'T', rows, n, E, sh.scale, qb + t0 * ldq, ldq, kb, ldk, 0.0f, P, n);
                bad |= sgemm('N', 'T', rows, n, E, 1.0f, db + t0 * ldd, ldd, vb, ldv, 0.0f, dP, n);
                for (int64_t r = 0; r < rows; r++) {
                    float *pr = P + r * n, *dpr = dP + r * n;
                    float lse = lb[(t0 + r) * l->strides[2]];
                    if (lse == -INFINITY) {
                        memset(pr, 0, sizeof(float) * (size_t)n);
                        memset(dpr, 0, sizeof(float) * (size_t)n);
                        continue;
                    }
                    att_cap_row(simd, &sh, pr, X, n);
                    att_mask_row(simd, &sh, bi, t0 + r, pr, n);
                    const float *dor = db + (t0 + r) * ldd, *orow = ob + (t0 + r) * ldo;
                    double d = simd->dot(dor, orow, E);
                    /* P = exp(S - lse); dS = P (dP - D), each operation rounded as a plain loop
                     * would */
                    simd->att_grad_row(pr, dpr, n, lse, (float)d);
                    if (sh.cap > 0) /* through the cap: · (1 - tanh²(S / c)) */
                        simd->act_grad(BORA_OP_TANH, dpr, X, dpr, n);
                }
                /* dV += Pᵀ dO, dQ = scale·dS K, dK += scale·dSᵀ Q */
                bad |= sgemm('T', 'N', n, E, rows, 1.0f, P, n, db + t0 * ldd, ldd, 1.0f, dvb, lddv);
                bad |= sgemm('N', 'N', rows, E, n, sh.scale, dP, n, kb, ldk, 0.0f, dqb + t0 * lddq,
                             lddq);
                bad |= sgemm('T', 'N', n, E, rows, sh.scale, dP, n, qb + t0 * ldq, ldq, 1.0f, dkb,
                             lddk);
            }
#undef BASE
            if (bad) {
#pragma omp atomic write
                failed = 1;
            }
        }
        free(P);
        free(dP);
        free(X);
    }
    return failed == 2 ? -2 : failed ? -3 : 0;
}
