/* plugins/backends/cuda/attention.cu — BORA_OP_ATTENTION and BORA_OP_ATTENTION_GRAD in the
 * flash-attention style, over T = float or double (the gradient checks run f64).
 *
 * Forward: a block per (batch, head, ATT_ROWS query rows), a warp per ATT_ROWS_PER_WARP rows.
 * Keys and values stream through shared memory ATT_TILE at a time; a lane scores one key of the
 * tile against each of its warp's rows (q·k from shared memory), and the row keeps a running max
 * m, a running sum l and its output accumulator (dims lane, lane + 32, ... in registers),
 * rescaled by exp(m_old - m_new) when the max grows: the online softmax. Out = acc / l and
 * lse = m + log(l); a row that sees no key gets out 0 and lse -inf, as on the CPU.
 *
 * Backward, deterministic (no atomics): D = Σ dO·O per row (a warp per row), then dQ a block per
 * (batch, head, query rows) streaming key tiles as the forward does, and dK, dV a block per
 * (batch, kv head, ATT_ROWS keys) streaming query tiles of each of the group's query heads in
 * head order (grouped-query attention: query head h reads kv head h / G). Both recompute
 * P = exp(score - lse) and dS = P·(dO·v - D), times 1 - tanh² under a soft cap.
 *
 * Scores: s = scale·q·k, then c·tanh(s / c) with a soft cap c, then the masks (key length L,
 * causal at position L - T + t, the sliding window, segment ids): the CPU kernels' rule. */
#include "cuda.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define ATT_WARPS 4
#define ATT_ROWS_PER_WARP 2
#define ATT_ROWS (ATT_WARPS * ATT_ROWS_PER_WARP) /* query rows (dK, dV: keys) per block */
#define ATT_TILE 32                              /* keys (dK, dV: queries) per tile: a lane each */
#define ATT_THREADS (ATT_WARPS * 32)
#define ATT_FULL 0xffffffffu
/* shared memory a block may have without opting in */
#define ATT_SMEM_DEFAULT (48 << 10)

/* A 4-d operand (batch, head, position, head_dim): its data and strides in elements. */
struct att_t4 {
    void *p;
    int64_t s[4];
};

struct att_args {
    att_t4 q, k, v, o, dout, dq, dk, dv; /* o: the forward's output (an input of the gradient) */
    void *lse;
    int64_t ls[3]; /* lse (B, H, T) strides */
    const int32_t *seg_q, *seg_k, *klen;
    int64_t sq[2], sk[2]; /* segment ids' strides (batch, position) */
    void *dsum;           /* D (B, H, T), dense: the gradient's Σ dO·O per row */
    int64_t H, G, T, S, E, W;
    int causal;
    double scale, cap;
};

static att_t4 att_t4_of(const bora_tensor_desc *d)
{
    att_t4 t;
    t.p = d->data;
    for (int i = 0; i < 4; i++)
        t.s[i] = d->strides[i];
    return t;
}

__device__ __forceinline__ float att_exp(float x)
{
    return expf(x);
}
__device__ __forceinline__ double att_exp(double x)
{
    return exp(x);
}
__device__ __forceinline__ float att_log(float x)
{
    return logf(x);
}
__device__ __forceinline__ double att_log(double x)
{
    return log(x);
}
__device__ __forceinline__ float att_tanh(float x)
{
    return tanhf(x);
}
__device__ __forceinline__ double att_tanh(double x)
{
    return tanh(x);
}

/* Butterfly reductions: every lane ends with the same value (each step adds the same two
 * numbers on both lanes of a pair), in an order fixed by the lane numbers. */
template <typename T> __device__ __forceinline__ T att_warp_sum(T v)
{
    for (int m = 16; m > 0; m >>= 1)
        v += __shfl_xor_sync(ATT_FULL, v, m);
    return v;
}

template <typename T> __device__ __forceinline__ T att_warp_max(T v)
{
    for (int m = 16; m > 0; m >>= 1) {
        T o = __shfl_xor_sync(ATT_FULL, v, m);
        v = o > v ? o : v;
    }
    return v;
}

/* The key length L within 0..S (S without a runtime one). */
__device__ __forceinline__ int64_t att_key_length(const att_args &a)
{
    if (!a.klen)
        return a.S;
    int64_t L = *a.klen;
    return L < 0 ? 0 : L > a.S ? a.S : L;
}

/* Whether query t (segment id segq) of batch row bi sees key s. */
__device__ __forceinline__ bool att_allowed(const att_args &a, int64_t L, int64_t bi, int64_t t,
                                            int64_t s, int32_t segq)
{
    int64_t p = L - a.T + t; /* the query's position */
    if (s >= L || (a.causal && s > p) || (a.W > 0 && s <= p - a.W))
        return false;
    return !a.seg_k || a.seg_k[bi * a.sk[0] + s * a.sk[1]] == segq;
}

__device__ __forceinline__ int32_t att_seg_q(const att_args &a, int64_t bi, int64_t t)
{
    return a.seg_q ? a.seg_q[bi * a.sq[0] + t * a.sq[1]] : 0;
}

/* The score of a dot product: scale·dot, soft-capped; u = tanh(scale·dot / c) (0 uncapped). */
template <typename T> __device__ __forceinline__ T att_score(const att_args &a, T dot, T *u)
{
    T x = dot * (T)a.scale;
    if (a.cap > 0) {
        *u = att_tanh(x / (T)a.cap);
        return (T)a.cap * *u;
    }
    *u = 0;
    return x;
}

/* Σ over e < E of x[e]·y[e] (both in shared memory). */
template <typename T> __device__ __forceinline__ T att_dot(const T *x, const T *y, int64_t E)
{
    T d = 0;
    for (int64_t e = 0; e < E; e++)
        d += x[e] * y[e];
    return d;
}

/* rows [r0, r0 + n) of head (bi, h) of x into shared rows of width ld (zeros past n). */
template <typename T>
__device__ __forceinline__ void att_load_rows(T *dst, int64_t ld, const att_t4 &x, int64_t bi,
                                              int64_t h, int64_t r0, int64_t n, int64_t rows,
                                              int64_t E)
{
    const T *base = (const T *)x.p + bi * x.s[0] + h * x.s[1];
    for (int64_t i = threadIdx.x; i < rows * E; i += blockDim.x) {
        int64_t r = i / E, e = i % E;
        dst[r * ld + e] = r < n ? base[(r0 + r) * x.s[2] + e * x.s[3]] : (T)0;
    }
}

/* ---- forward ------------------------------------------------------------------------------- */

/* Shared memory: keys (ATT_TILE, E + 1: a lane reads a row, the pad spreads the banks), values
 * (ATT_TILE, E: a lane reads a column) and the block's queries (ATT_ROWS, E). NE = dims per lane,
 * E <= 32·NE. */
template <typename T, int NE> __global__ void __launch_bounds__(ATT_THREADS) k_att_fwd(att_args a)
{
    extern __shared__ __align__(16) unsigned char att_smem[];
    const int R = ATT_ROWS_PER_WARP;
    int64_t E = a.E, tiles = (a.T + ATT_ROWS - 1) / ATT_ROWS;
    T *ks = (T *)att_smem, *vs = ks + ATT_TILE * (E + 1), *qs = vs + ATT_TILE * E;
    int64_t blk = blockIdx.x, tile = blk % tiles, bh = blk / tiles;
    int64_t bi = bh / a.H, h = bh % a.H, hk = h / a.G, t0 = tile * ATT_ROWS;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int64_t L = att_key_length(a), nrows = a.T - t0 < ATT_ROWS ? a.T - t0 : ATT_ROWS;
    att_load_rows(qs, E, a.q, bi, h, t0, nrows, ATT_ROWS, E);

    T m[R], l[R], acc[R][NE];
    int32_t segq[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        int64_t t = t0 + warp * R + r;
        m[r] = -INFINITY, l[r] = 0;
        segq[r] = t < a.T ? att_seg_q(a, bi, t) : 0;
#pragma unroll
        for (int j = 0; j < NE; j++)
            acc[r][j] = 0;
    }
    /* the keys some row of the block may see: [kbeg, kend) */
    int64_t kend = L, kbeg = 0;
    if (a.causal && L - a.T + t0 + nrows < kend)
        kend = L - a.T + t0 + nrows;
    if (a.W > 0 && L - a.T + t0 - a.W + 1 > kbeg)
        kbeg = L - a.T + t0 - a.W + 1;
    __syncthreads();
    for (int64_t k0 = kbeg; k0 < kend; k0 += ATT_TILE) {
        int64_t nk = kend - k0 < ATT_TILE ? kend - k0 : ATT_TILE;
        att_load_rows(ks, E + 1, a.k, bi, hk, k0, nk, ATT_TILE, E);
        att_load_rows(vs, E, a.v, bi, hk, k0, nk, ATT_TILE, E);
        __syncthreads();
#pragma unroll
        for (int r = 0; r < R; r++) {
            int64_t row = warp * R + r, t = t0 + row;
            if (t >= a.T) /* the same for the whole warp */
                continue;
            T sc = -INFINITY, u;
            if (lane < nk && att_allowed(a, L, bi, t, k0 + lane, segq[r]))
                sc = att_score(a, att_dot(qs + row * E, ks + lane * (E + 1), E), &u);
            T mn = att_warp_max(sc);
            mn = m[r] > mn ? m[r] : mn;
            if (mn == -INFINITY) /* nothing seen yet: the same for the whole warp */
                continue;
            T alpha = att_exp(m[r] - mn); /* 0 from m = -inf */
            T p = sc == -INFINITY ? (T)0 : att_exp(sc - mn);
            l[r] = l[r] * alpha + att_warp_sum(p);
#pragma unroll
            for (int j = 0; j < NE; j++)
                acc[r][j] *= alpha;
            for (int kk = 0; kk < nk; kk++) {
                T pk = __shfl_sync(ATT_FULL, p, kk);
#pragma unroll
                for (int j = 0; j < NE; j++)
                    if (lane + 32 * j < E)
                        acc[r][j] += pk * vs[kk * E + lane + 32 * j];
            }
            m[r] = mn;
        }
        __syncthreads();
    }
    T *O = (T *)a.o.p + bi * a.o.s[0] + h * a.o.s[1];
#pragma unroll
    for (int r = 0; r < R; r++) {
        int64_t t = t0 + warp * R + r;
        if (t >= a.T)
            continue;
        int none = !(l[r] > 0); /* no key visible: output 0, lse -inf */
        T inv = none ? (T)0 : (T)1 / l[r];
#pragma unroll
        for (int j = 0; j < NE; j++)
            if (lane + 32 * j < E)
                O[t * a.o.s[2] + (lane + 32 * j) * a.o.s[3]] = none ? (T)0 : acc[r][j] * inv;
        if (lane == 0)
            ((T *)a.lse)[bi * a.ls[0] + h * a.ls[1] + t * a.ls[2]] =
                none ? (T)-INFINITY : m[r] + att_log(l[r]);
    }
}

/* ---- backward ------------------------------------------------------------------------------ */

/* D[b, h, t] = Σ_e dO·O: a warp per row, into dense (B, H, T). */
template <typename T> __global__ void k_att_dsum(att_args a, int64_t rows)
{
    int64_t row = (int64_t)blockIdx.x * ATT_WARPS + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows) /* the same for the whole warp */
        return;
    int64_t t = row % a.T, bh = row / a.T, bi = bh / a.H, h = bh % a.H;
    const T *dO = (const T *)a.dout.p + bi * a.dout.s[0] + h * a.dout.s[1] + t * a.dout.s[2];
    const T *O = (const T *)a.o.p + bi * a.o.s[0] + h * a.o.s[1] + t * a.o.s[2];
    T d = 0;
    for (int64_t e = lane; e < a.E; e += 32)
        d += dO[e * a.dout.s[3]] * O[e * a.o.s[3]];
    d = att_warp_sum(d);
    if (lane == 0)
        ((T *)a.dsum)[row] = d;
}

/* P and dS of a (query, key) pair: dS = P·(dO·v - D)·(1 - tanh²); 0 where not seen. */
template <typename T>
__device__ __forceinline__ void att_p_ds(const att_args &a, const T *q, const T *k, const T *dO,
                                         const T *v, T lse, T D, T *p, T *ds)
{
    T u, sc = att_score(a, att_dot(q, k, a.E), &u);
    *p = att_exp(sc - lse);
    *ds = *p * (att_dot(dO, v, a.E) - D) * (a.cap > 0 ? (T)1 - u * u : (T)1);
}

/* dQ: a block per (batch, head, ATT_ROWS query rows). Shared memory: keys and values (ATT_TILE,
 * E + 1) each, the block's q and dO rows (ATT_ROWS, E) each. */
template <typename T, int NE> __global__ void __launch_bounds__(ATT_THREADS) k_att_dq(att_args a)
{
    extern __shared__ __align__(16) unsigned char att_smem[];
    const int R = ATT_ROWS_PER_WARP;
    int64_t E = a.E, tiles = (a.T + ATT_ROWS - 1) / ATT_ROWS;
    T *ks = (T *)att_smem, *vs = ks + ATT_TILE * (E + 1), *qs = vs + ATT_TILE * (E + 1);
    T *dos = qs + ATT_ROWS * E;
    int64_t blk = blockIdx.x, tile = blk % tiles, bh = blk / tiles;
    int64_t bi = bh / a.H, h = bh % a.H, hk = h / a.G, t0 = tile * ATT_ROWS;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int64_t L = att_key_length(a), nrows = a.T - t0 < ATT_ROWS ? a.T - t0 : ATT_ROWS;
    att_load_rows(qs, E, a.q, bi, h, t0, nrows, ATT_ROWS, E);
    att_load_rows(dos, E, a.dout, bi, h, t0, nrows, ATT_ROWS, E);

    T lse[R], D[R], acc[R][NE];
    int32_t segq[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        int64_t t = t0 + warp * R + r;
        lse[r] = -INFINITY, D[r] = 0, segq[r] = 0;
        if (t < a.T) {
            lse[r] = ((const T *)a.lse)[bi * a.ls[0] + h * a.ls[1] + t * a.ls[2]];
            D[r] = ((const T *)a.dsum)[bh * a.T + t];
            segq[r] = att_seg_q(a, bi, t);
        }
#pragma unroll
        for (int j = 0; j < NE; j++)
            acc[r][j] = 0;
    }
    int64_t kend = L, kbeg = 0;
    if (a.causal && L - a.T + t0 + nrows < kend)
        kend = L - a.T + t0 + nrows;
    if (a.W > 0 && L - a.T + t0 - a.W + 1 > kbeg)
        kbeg = L - a.T + t0 - a.W + 1;
    __syncthreads();
    for (int64_t k0 = kbeg; k0 < kend; k0 += ATT_TILE) {
        int64_t nk = kend - k0 < ATT_TILE ? kend - k0 : ATT_TILE;
        att_load_rows(ks, E + 1, a.k, bi, hk, k0, nk, ATT_TILE, E);
        att_load_rows(vs, E + 1, a.v, bi, hk, k0, nk, ATT_TILE, E);
        __syncthreads();
#pragma unroll
        for (int r = 0; r < R; r++) {
            int64_t row = warp * R + r, t = t0 + row;
            if (t >= a.T || lse[r] == -INFINITY) /* the same for the whole warp */
                continue;
            T p = 0, ds = 0;
            if (lane < nk && att_allowed(a, L, bi, t, k0 + lane, segq[r]))
                att_p_ds(a, qs + row * E, ks + lane * (E + 1), dos + row * E, vs + lane * (E + 1),
                         lse[r], D[r], &p, &ds);
            for (int kk = 0; kk < nk; kk++) {
                T dsk = __shfl_sync(ATT_FULL, ds, kk);
#pragma unroll
                for (int j = 0; j < NE; j++)
                    if (lane + 32 * j < E)
                        acc[r][j] += dsk * ks[kk * (E + 1) + lane + 32 * j];
            }
        }
        __syncthreads();
    }
    T *dQ = (T *)a.dq.p + bi * a.dq.s[0] + h * a.dq.s[1];
#pragma unroll
    for (int r = 0; r < R; r++) {
        int64_t t = t0 + warp * R + r;
        if (t >= a.T)
            continue;
#pragma unroll
        for (int j = 0; j < NE; j++)
            if (lane + 32 * j < E)
                dQ[t * a.dq.s[2] + (lane + 32 * j) * a.dq.s[3]] = acc[r][j] * (T)a.scale;
    }
}

/* dK, dV: a block per (batch, kv head, ATT_ROWS keys), a warp per ATT_ROWS_PER_WARP keys; the
 * group's query heads in order, each one's query tiles in order. Shared memory: q and dO tiles
 * (ATT_TILE, E + 1) each, the block's k and v rows (ATT_ROWS, E) each, the tile's lse and D
 * (ATT_TILE each) and its segment ids (ATT_TILE int32). */
template <typename T, int NE> __global__ void __launch_bounds__(ATT_THREADS) k_att_dkv(att_args a)
{
    extern __shared__ __align__(16) unsigned char att_smem[];
    const int R = ATT_ROWS_PER_WARP;
    int64_t E = a.E, Hk = a.H / a.G, tiles = (a.S + ATT_ROWS - 1) / ATT_ROWS;
    T *qs = (T *)att_smem, *dos = qs + ATT_TILE * (E + 1), *kr = dos + ATT_TILE * (E + 1);
    T *vr = kr + ATT_ROWS * E, *lses = vr + ATT_ROWS * E, *Ds = lses + ATT_TILE;
    int32_t *segs = (int32_t *)(Ds + ATT_TILE);
    int64_t blk = blockIdx.x, tile = blk % tiles, bhk = blk / tiles;
    int64_t bi = bhk / Hk, hk = bhk % Hk, s0 = tile * ATT_ROWS;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int64_t L = att_key_length(a), nkeys = a.S - s0 < ATT_ROWS ? a.S - s0 : ATT_ROWS;
    att_load_rows(kr, E, a.k, bi, hk, s0, nkeys, ATT_ROWS, E);
    att_load_rows(vr, E, a.v, bi, hk, s0, nkeys, ATT_ROWS, E);

    T ak[R][NE], av[R][NE];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int j = 0; j < NE; j++)
            ak[r][j] = 0, av[r][j] = 0;
    /* the queries that may see some key of the block: [tbeg, tend) (t sees s only if
     * s <= L - T + t under causality, s > L - T + t - W under the window, s < L) */
    int64_t tbeg = 0, tend = s0 < L ? a.T : 0, slast = s0 + nkeys - 1;
    if (a.causal && s0 - (L - a.T) > tbeg)
        tbeg = s0 - (L - a.T);
    if (a.W > 0 && slast - (L - a.T) + a.W < tend)
        tend = slast - (L - a.T) + a.W;
    __syncthreads();
    for (int64_t h = hk * a.G; h < hk * a.G + a.G; h++) {
        for (int64_t q0 = tbeg; q0 < tend; q0 += ATT_TILE) {
            int64_t nq = tend - q0 < ATT_TILE ? tend - q0 : ATT_TILE;
            att_load_rows(qs, E + 1, a.q, bi, h, q0, nq, ATT_TILE, E);
            att_load_rows(dos, E + 1, a.dout, bi, h, q0, nq, ATT_TILE, E);
            if (threadIdx.x < ATT_TILE) {
                int64_t t = q0 + threadIdx.x;
                int in = (int64_t)threadIdx.x < nq;
                lses[threadIdx.x] =
                    in ? ((const T *)a.lse)[bi * a.ls[0] + h * a.ls[1] + t * a.ls[2]]
                       : (T)-INFINITY;
                Ds[threadIdx.x] = in ? ((const T *)a.dsum)[(bi * a.H + h) * a.T + t] : (T)0;
                segs[threadIdx.x] = in ? att_seg_q(a, bi, t) : 0;
            }
            __syncthreads();
#pragma unroll
            for (int r = 0; r < R; r++) {
                int64_t row = warp * R + r, s = s0 + row;
                if (s >= a.S) /* the same for the whole warp */
                    continue;
                T p = 0, ds = 0;
                if (lane < nq && lses[lane] != -INFINITY &&
                    att_allowed(a, L, bi, q0 + lane, s, segs[lane]))
                    att_p_ds(a, qs + lane * (E + 1), kr + row * E, dos + lane * (E + 1),
                             vr + row * E, lses[lane], Ds[lane], &p, &ds);
                for (int kk = 0; kk < nq; kk++) {
                    T pk = __shfl_sync(ATT_FULL, p, kk), dsk = __shfl_sync(ATT_FULL, ds, kk);
#pragma unroll
                    for (int j = 0; j < NE; j++)
                        if (lane + 32 * j < E) {
                            av[r][j] += pk * dos[kk * (E + 1) + lane + 32 * j];
                            ak[r][j] += dsk * qs[kk * (E + 1) + lane + 32 * j];
                        }
                }
            }
            __syncthreads();
        }
    }
    T *dK = (T *)a.dk.p + bi * a.dk.s[0] + hk * a.dk.s[1];
    T *dV = (T *)a.dv.p + bi * a.dv.s[0] + hk * a.dv.s[1];
#pragma unroll
    for (int r = 0; r < R; r++) {
        int64_t s = s0 + warp * R + r;
        if (s >= a.S)
            continue;
#pragma unroll
        for (int j = 0; j < NE; j++)
            if (lane + 32 * j < E) {
                int64_t e = lane + 32 * j;
                dK[s * a.dk.s[2] + e * a.dk.s[3]] = ak[r][j] * (T)a.scale;
                dV[s * a.dv.s[2] + e * a.dv.s[3]] = av[r][j];
            }
    }
}

/* ---- launchers ----------------------------------------------------------------------------- */

/* The arguments of either op (grad: the gradient's operand order). */
static void att_args_of(const bora_kernel_args *ka, int grad, att_args *a)
{
    const bora_opt_attention *opt = (const bora_opt_attention *)ka->options;
    const bora_tensor_desc *q = &ka->inputs[0], *k = &ka->inputs[1];
    memset(a, 0, sizeof *a);
    a->q = att_t4_of(q);
    a->k = att_t4_of(k);
    a->v = att_t4_of(&ka->inputs[2]);
    const bora_tensor_desc *lse = grad ? &ka->inputs[4] : &ka->outputs[1];
    a->o = att_t4_of(grad ? &ka->inputs[3] : &ka->outputs[0]);
    a->lse = lse->data;
    for (int i = 0; i < 3; i++)
        a->ls[i] = lse->strides[i];
    if (grad) {
        a->dout = att_t4_of(&ka->inputs[5]);
        a->dq = att_t4_of(&ka->outputs[0]);
        a->dk = att_t4_of(&ka->outputs[1]);
        a->dv = att_t4_of(&ka->outputs[2]);
    }
    int at = grad ? 6 : 3;
    if (opt->segments) {
        const bora_tensor_desc *sq = &ka->inputs[at], *sk = &ka->inputs[at + 1];
        a->seg_q = (const int32_t *)sq->data, a->sq[0] = sq->strides[0], a->sq[1] = sq->strides[1];
        a->seg_k = (const int32_t *)sk->data, a->sk[0] = sk->strides[0], a->sk[1] = sk->strides[1];
        at += 2;
    }
    if (opt->key_length)
        a->klen = (const int32_t *)ka->inputs[at].data;
    a->H = q->dims[1], a->T = q->dims[2], a->E = q->dims[3], a->S = k->dims[2];
    a->G = k->dims[1] > 0 ? q->dims[1] / k->dims[1] : 1;
    a->causal = opt->causal;
    a->scale = opt->scale;
    if (opt->struct_size >= offsetof(bora_opt_attention, sliding_window) + sizeof(int64_t))
        a->W = opt->sliding_window;
    if (opt->struct_size >= offsetof(bora_opt_attention, softcap) + sizeof(double) &&
        opt->softcap > 0)
        a->cap = opt->softcap;
}

/* Shared memory of each kernel, in bytes. */
static size_t att_smem_fwd(int64_t E, size_t el)
{
    return el * (size_t)(ATT_TILE * (E + 1) + ATT_TILE * E + ATT_ROWS * E);
}
static size_t att_smem_dq(int64_t E, size_t el)
{
    return el * (size_t)(2 * ATT_TILE * (E + 1) + 2 * ATT_ROWS * E);
}
static size_t att_smem_dkv(int64_t E, size_t el)
{
    return el * (size_t)(2 * ATT_TILE * (E + 1) + 2 * ATT_ROWS * E + 2 * ATT_TILE) +
           sizeof(int32_t) * ATT_TILE;
}

/* Launches fn over blocks with bytes of shared memory, opting in past the default 48 KiB. */
template <typename F>
static cudaError_t att_launch(cudaStream_t s, F fn, int64_t blocks, size_t bytes, att_args a)
{
    if (blocks <= 0)
        return cudaSuccess;
    if (blocks > 0x7fffffff)
        return cudaErrorInvalidConfiguration;
    if (bytes > ATT_SMEM_DEFAULT) {
        cudaError_t err =
            cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
        if (err != cudaSuccess)
            return err;
    }
    fn<<<(unsigned)blocks, ATT_THREADS, bytes, s>>>(a);
    return cudaGetLastError();
}

extern "C" int64_t cuk_attention_max_head_dim(void)
{
    return 256;
}

extern "C" size_t cuk_attention_smem(const bora_kernel_args *ka)
{
    int64_t E = ka->inputs[0].dims[3];
    size_t el = ka->inputs[0].dtype == BORA_DTYPE_F64 ? sizeof(double) : sizeof(float);
    if (ka->op == BORA_OP_ATTENTION)
        return att_smem_fwd(E, el);
    size_t dq = att_smem_dq(E, el), dkv = att_smem_dkv(E, el);
    return dq > dkv ? dq : dkv;
}

/* The forward (grad 0) or the three gradient kernels (grad 1) for B batch rows; dsum: B·H·T
 * elements of scratch for D. */
template <typename T, int NE>
static cudaError_t att_run(cudaStream_t s, const att_args &a, int64_t B, int grad)
{
    int64_t Hk = a.H / a.G, qtiles = (a.T + ATT_ROWS - 1) / ATT_ROWS;
    int64_t ktiles = (a.S + ATT_ROWS - 1) / ATT_ROWS;
    if (!grad)
        return att_launch(s, k_att_fwd<T, NE>, B * a.H * qtiles, att_smem_fwd(a.E, sizeof(T)), a);
    int64_t rows = B * a.H * a.T;
    if (rows > 0) {
        int64_t blocks = (rows + ATT_WARPS - 1) / ATT_WARPS;
        if (blocks > 0x7fffffff)
            return cudaErrorInvalidConfiguration;
        k_att_dsum<T><<<(unsigned)blocks, ATT_THREADS, 0, s>>>(a, rows);
    }
    cudaError_t err =
        att_launch(s, k_att_dq<T, NE>, B * a.H * qtiles, att_smem_dq(a.E, sizeof(T)), a);
    if (err == cudaSuccess)
        err = att_launch(s, k_att_dkv<T, NE>, B * Hk * ktiles, att_smem_dkv(a.E, sizeof(T)), a);
    return err;
}

template <typename T>
static cudaError_t att_pick(cudaStream_t s, const att_args &a, int64_t B, int grad)
{
    if (a.E <= 32)
        return att_run<T, 1>(s, a, B, grad);
    if (a.E <= 64)
        return att_run<T, 2>(s, a, B, grad);
    if (a.E <= 128)
        return att_run<T, 4>(s, a, B, grad);
    if (a.E <= 256)
        return att_run<T, 8>(s, a, B, grad);
    return cudaErrorInvalidValue; /* cuda.c refuses it first, naming the shape */
}

extern "C" size_t cuk_attention_grad_scratch(const bora_kernel_args *ka)
{
    const bora_tensor_desc *q = &ka->inputs[0];
    size_t el = q->dtype == BORA_DTYPE_F64 ? sizeof(double) : sizeof(float);
    return el * (size_t)(q->dims[0] * q->dims[1] * q->dims[2]);
}

extern "C" cudaError_t cuk_attention(cudaStream_t s, const bora_kernel_args *ka, void *dsum)
{
    int grad = ka->op == BORA_OP_ATTENTION_GRAD;
    att_args a;
    att_args_of(ka, grad, &a);
    a.dsum = dsum;
    int64_t B = ka->inputs[0].dims[0];
    return ka->inputs[0].dtype == BORA_DTYPE_F64 ? att_pick<double>(s, a, B, grad)
                                                 : att_pick<float>(s, a, B, grad);
}
