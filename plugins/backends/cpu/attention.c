/* plugins/backends/cpu/attention.c — f32 attention in blocks of query rows: per (batch, head,
 * block), S = scale·Q Kᵀ and O = P V on oneDNN's sgemm, an exact softmax per row in between
 * (the row's max, exp with our own vectorised exp, the sum in double); only the keys some row of
 * the block can see are multiplied. The backward pass recomputes P from the saved log-sum-exp,
 * per (batch, head), and accumulates dK and dV block after block in a fixed order. Every job is
 * one thread's from start to end, so the bits never depend on the thread count. The loops of
 * kernels_t.h stay the reference (and the path for layouts these do not take: head_dim must be
 * the dense inner axis of every operand). */
#include "kernels_fast.h"

#include <dnnl.h>
#include <math.h>
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

/* -inf where query t may not see key s (s < n already holds). */
static void att_mask_row(const cpu_simd *simd, const att_shape *sh, int64_t bi, int64_t t,
                         float *row, int64_t n)
{
    if (sh->causal) {
        int64_t last = sh->L - sh->T + t; /* the last key visible */
        for (int64_t s = last + 1 < 0 ? 0 : last + 1; s < n; s++)
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

int fast_attention_f32(bora_backend *bk, const bora_kernel_args *a)
{
    const bora_tensor_desc *q = &a->inputs[0], *k = &a->inputs[1], *v = &a->inputs[2];
    const bora_tensor_desc *o = &a->outputs[0], *l = &a->outputs[1];
    att_shape sh;
    if (!att_setup(a, 3, &sh) || !inner_dense(q) || !inner_dense(k) || !inner_dense(v) ||
        !inner_dense(o))
        return -1;
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
            const float *kp = (const float *)k->data + bi * k->strides[0] + h * k->strides[1];
            const float *vp = (const float *)v->data + bi * v->strides[0] + h * v->strides[1];
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
    int64_t blocks = (sh.T + ATT_ROWS - 1) / ATT_ROWS, S = sh.S, E = sh.E;
    const cpu_simd *simd = bk->simd;
    int failed = 0;
#pragma omp parallel
    {
        size_t cap = (size_t)(ATT_ROWS * (S ? S : 1));
        float *P = malloc(sizeof(float) * cap), *dP = malloc(sizeof(float) * cap);
#pragma omp for schedule(static)
        for (int64_t bh = 0; bh < sh.B * sh.H; bh++) {
            int64_t bi = bh / sh.H, h = bh % sh.H;
#define BASE(t) ((float *)(t)->data + bi * (t)->strides[0] + h * (t)->strides[1])
            const float *qb = BASE(q), *kb = BASE(k), *vb = BASE(v), *ob = BASE(o),
                        *db = BASE(dout), *lb = BASE(l);
            float *dqb = BASE(dq), *dkb = BASE(dk), *dvb = BASE(dv);
#undef BASE
            int64_t ldq = q->strides[2], ldk = k->strides[2], ldv = v->strides[2];
            int64_t ldo = o->strides[2], ldd = dout->strides[2];
            int64_t lddq = dq->strides[2], lddk = dk->strides[2], lddv = dv->strides[2];
            if (!P || !dP) {
#pragma omp atomic write
                failed = 2;
                continue;
            }
            for (int64_t s = 0; s < S; s++) {
                memset(dkb + s * lddk, 0, sizeof(float) * (size_t)E);
                memset(dvb + s * lddv, 0, sizeof(float) * (size_t)E);
            }
            int bad = 0;
            for (int64_t blk = 0; blk < blocks && !bad; blk++) {
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
                    att_mask_row(simd, &sh, bi, t0 + r, pr, n);
                    const float *dor = db + (t0 + r) * ldd, *orow = ob + (t0 + r) * ldo;
                    double d = simd->dot(dor, orow, E);
                    /* P = exp(S - lse); dS = P (dP - D), each operation rounded as a plain loop
                     * would */
                    simd->att_grad_row(pr, dpr, n, lse, (float)d);
                }
                /* dV += Pᵀ dO, dQ = scale·dS K, dK += scale·dSᵀ Q */
                bad |= sgemm('T', 'N', n, E, rows, 1.0f, P, n, db + t0 * ldd, ldd, 1.0f, dvb, lddv);
                bad |= sgemm('N', 'N', rows, E, n, sh.scale, dP, n, kb, ldk, 0.0f, dqb + t0 * lddq,
                             lddq);
                bad |= sgemm('T', 'N', n, E, rows, sh.scale, dP, n, qb + t0 * ldq, ldq, 1.0f, dkb,
                             lddk);
            }
            if (bad) {
#pragma omp atomic write
                failed = 1;
            }
        }
        free(P);
        free(dP);
    }
    return failed == 2 ? -2 : failed ? -3 : 0;
}
