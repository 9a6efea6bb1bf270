/* plugins/backends/cpu/simd_t.h — the CPU backend's vectorised f32 loops, written once on GCC's
 * vector types and compiled once per instruction set (simd_avx512.c, simd_avx2.c,
 * simd_generic.c); cpu.c picks a table at start-up from what the CPU supports.
 *
 * Bits do not depend on the instruction set where the CPU has FMA: per-element functions work on
 * the register's width (each lane alone), a tail is computed on a padded copy by the same code,
 * and sums keep 16 partial sums whatever the width, added in a fixed order at the end.
 * exp and tanh are our own (range reduction and a polynomial, within 2 ulp of the true value),
 * and erf for GELU_EXACT (fitted polynomials, within 2e-7 of the true value);
 * the generic build, without FMA, rounds the polynomial differently, which is why the choice is
 * part of the backend's description. */
#include "simd.h"

#include <math.h>
#include <string.h>
#if defined(__AVX__)
#include <immintrin.h>
#endif

/* The instruction set's own register width (SIMD_BYTES, set by the including file): per-element
 * functions are written on it, since a wider generic vector than the target has is lowered by GCC
 * partly to scalar code. They compute each lane alone, so the width does not change their bits. */
#ifndef SIMD_BYTES
#define SIMD_BYTES 16
#endif
typedef float vf __attribute__((vector_size(SIMD_BYTES)));
typedef int32_t vi __attribute__((vector_size(SIMD_BYTES)));
#define NL ((int)(SIMD_BYTES / sizeof(float)))
/* The double-precision partial sums, in vectors of the native width: DL lanes each. */
typedef double vd __attribute__((vector_size(SIMD_BYTES)));
typedef float vhf __attribute__((vector_size(SIMD_BYTES / 2))); /* DL floats */
#define DL ((int)(SIMD_BYTES / sizeof(double)))

/* Sums keep 16 partial sums whatever the width. */
#define LANES 16

/* Every lane v. Written as a scalar-vector operation (v - 0 is v, -0 and NaN included) so that
 * it compiles to one broadcast: a lane-by-lane fill can be rebuilt, lane by lane, inside loops. */
static inline vf splat(float v)
{
    return v - (vf){0};
}

static inline vi splati(int32_t v)
{
    return v + (vi){0};
}

static inline vf loadv(const float *p)
{
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void storev(float *p, vf v)
{
    memcpy(p, &v, sizeof v);
}

static inline vf vsel(vi mask, vf a, vf b)
{
    return (vf)((mask & (vi)a) | (~mask & (vi)b));
}

/* a > b ? a : b and a < b ? a : b per lane (b where either is NaN): MAXPS and MINPS exactly,
 * named where the instruction set has them (GCC writes a compare and a blend otherwise). */
static inline vf vmax(vf a, vf b)
{
#if SIMD_BYTES == 64 && defined(__AVX512F__)
    return (vf)_mm512_max_ps((__m512)a, (__m512)b);
#elif SIMD_BYTES == 32 && defined(__AVX__)
    return (vf)_mm256_max_ps((__m256)a, (__m256)b);
#else
    return vsel(a > b, a, b);
#endif
}

static inline vf vmin(vf a, vf b)
{
#if SIMD_BYTES == 64 && defined(__AVX512F__)
    return (vf)_mm512_min_ps((__m512)a, (__m512)b);
#elif SIMD_BYTES == 32 && defined(__AVX__)
    return (vf)_mm256_min_ps((__m256)a, (__m256)b);
#else
    return vsel(a < b, a, b);
#endif
}

/* exp(x): x = n ln2 + r, |r| <= ln2/2, exp(r) by a degree-6 polynomial, 2^n into the exponent.
 * Below -87.33 the result is 0 (no subnormals), above 88.72 it is +inf; NaN stays NaN. */
static inline __attribute__((always_inline)) vf vexp(vf x)
{
    const vf shifter = splat(12582912.0f); /* 1.5 * 2^23: adding it rounds to an integer */
    vf xc = vmax(splat(-87.33654f), x);
    xc = vmin(xc, splat(88.72284f));
    vf t = xc * splat(1.44269504088896341f) + shifter;
    vf n = t - shifter;
    vf r = xc - n * splat(0.693359375f);
    r = r - n * splat(-2.12194440e-4f);
    vf p = splat(1.9875691500e-4f);
    p = p * r + splat(1.3981999507e-3f);
    p = p * r + splat(8.3334519073e-3f);
    p = p * r + splat(4.1665795894e-2f);
    p = p * r + splat(1.6666665459e-1f);
    p = p * r + splat(5.0000001201e-1f);
    p = p * (r * r) + r + splat(1.0f);
    /* 2^n as 2^h 2^(n-h), h = n/2: both factors normal for every n from -126 to 128 */
    vi ni = __builtin_convertvector(n, vi), h = ni >> 1;
    vf y = p * (vf)((h + 127) << 23) * (vf)((ni - h + 127) << 23);
    y = vsel(x < splat(-87.33654f), splat(0.0f), y);
    y = vsel(x > splat(88.72284f), splat(INFINITY), y);
    return vsel(x != x, x, y);
}

/* tanh(x) = sign(x) (1 - 2 / (exp(2|x|) + 1)) from |x| = 0.625 up; below it, where that
 * subtraction would lose digits, an odd minimax polynomial (Cephes' tanhf coefficients). */
static inline __attribute__((always_inline)) vf vtanh(vf x)
{
    vi sign = (vi)x & (vi)splat(-0.0f);
    vf ax = (vf)((vi)x & ~(vi)splat(-0.0f));
    vf big = splat(1.0f) - splat(2.0f) / (vexp(ax + ax) + splat(1.0f));
    vf z = ax * ax;
    vf small = splat(-5.70498872745e-3f) * z + splat(2.06390887954e-2f);
    small = small * z + splat(-5.37397155531e-2f);
    small = small * z + splat(1.33314422036e-1f);
    small = small * z + splat(-3.33332819422e-1f);
    small = small * (z * ax) + ax;
    vf y = vsel(ax < splat(0.625f), small, big);
    y = (vf)((vi)y | sign);
    return vsel(x != x, x, y);
}

static inline __attribute__((always_inline)) vf vgelu_tanh(vf x)
{
    vf u = splat(0.7978845608028654f) * (x + splat(0.044715f) * x * x * x);
    return splat(0.5f) * x * (splat(1.0f) + vtanh(u));
}

/* erf(x): x P(x²) below |x| = 1.25; from there 1 - exp(-x²) Q(1/x) / x, |x| taken as 9 above 9
 * (erf is 1 in f32 from 3.92). P and Q are least-squares fits, over Chebyshev nodes, to
 * erf(√z)/√z for z in [0, 1.5625] and to erfc(x) x exp(x²) for 1/x in [0.25, 0.8], rounded to
 * f32: the f32 evaluation is within 2e-7 of erf relative, 1.5e-7 absolute. Odd; NaN stays NaN. */
static inline __attribute__((always_inline)) vf verf(vf x)
{
    vi sign = (vi)x & (vi)splat(-0.0f);
    vf ax = (vf)((vi)x & ~(vi)splat(-0.0f));
    vf z = ax * ax;
    vf p = splat(-7.560546237e-06f);
    p = p * z + splat(1.038698465e-04f);
    p = p * z + splat(-8.338062908e-04f);
    p = p * z + splat(5.208852235e-03f);
    p = p * z + splat(-2.686015517e-02f);
    p = p * z + splat(1.128367260e-01f);
    p = p * z + splat(-3.761262894e-01f);
    p = p * z + splat(1.128379107e+00f);
    vf small = ax * p;
    vf a = vmin(ax, splat(9.0f)), t = splat(1.0f) / a;
    vf q = splat(-9.274019301e-02f);
    q = q * t + splat(3.809389472e-01f);
    q = q * t + splat(-6.153585315e-01f);
    q = q * t + splat(4.062046707e-01f);
    q = q * t + splat(9.553688765e-02f);
    q = q * t + splat(-3.163079619e-01f);
    q = q * t + splat(5.358382594e-03f);
    q = q * t + splat(5.638615489e-01f);
    vf big = splat(1.0f) - vexp(-(a * a)) * q * t;
    vf y = vsel(ax < splat(1.25f), small, big);
    y = (vf)((vi)y | sign);
    return vsel(x != x, x, y);
}

/* GELU with the normal CDF, 0.5 x (1 + erf(x / √2)) */
static inline __attribute__((always_inline)) vf vgelu_exact(vf x)
{
    return splat(0.5f) * x * (splat(1.0f) + verf(x * splat(0.7071067811865476f)));
}

static inline __attribute__((always_inline)) vf vsigmoid(vf x)
{
    return splat(1.0f) / (splat(1.0f) + vexp(-x));
}

static inline __attribute__((always_inline)) vf vact_grad(int op, vf x, vf dy)
{
    switch (op) {
    case BORA_OP_TANH: {
        vf t = vtanh(x);
        return dy * (splat(1.0f) - t * t);
    }
    case BORA_OP_SIGMOID: {
        vf s = vsigmoid(x);
        return dy * s * (splat(1.0f) - s);
    }
    case BORA_OP_RELU: return vsel(x > splat(0.0f), dy, splat(0.0f));
    case BORA_OP_SILU: {
        vf s = vsigmoid(x);
        return dy * s * (splat(1.0f) + x * (splat(1.0f) - s));
    }
    case BORA_OP_GELU_TANH: {
        vf c = splat(0.7978845608028654f), a = splat(0.044715f);
        vf u = c * (x + a * x * x * x), t = vtanh(u);
        vf du = c * (splat(1.0f) + splat(3.0f) * a * x * x);
        return dy *
               (splat(0.5f) * (splat(1.0f) + t) + splat(0.5f) * x * (splat(1.0f) - t * t) * du);
    }
    case BORA_OP_GELU_EXACT: { /* Φ(x) + x φ(x) */
        vf cdf = splat(0.5f) * (splat(1.0f) + verf(x * splat(0.7071067811865476f)));
        vf pdf = vexp(splat(-0.5f) * x * x) * splat(0.3989422804014327f);
        return dy * (cdf + x * pdf);
    }
    default: return splat(0.0f);
    }
}

/* Loads of the tail (fewer than NL values) padded with `pad`. */
static inline vf load_tail(const float *p, int64_t n, float pad)
{
    float buf[NL];
    for (int i = 0; i < NL; i++)
        buf[i] = i < n ? p[i] : pad;
    return loadv(buf);
}

static inline void store_tail(float *p, vf v, int64_t n)
{
    float buf[NL];
    storev(buf, v);
    memcpy(p, buf, sizeof(float) * (size_t)n);
}

/* The loops are written once per op so that each one's body is a straight line. */
#define EACH_UNARY(OP, F)                                               \
    case OP:                                                            \
        for (; i + NL <= n; i += NL)                                    \
            storev(y + i, F(loadv(x + i)));                             \
        if (i < n)                                                      \
            store_tail(y + i, F(load_tail(x + i, n - i, 0.0f)), n - i); \
        return 1

static inline vf vneg(vf x)
{
    return -x;
}

static inline vf vrelu(vf x)
{
    return vsel(x > splat(0.0f), x, splat(0.0f));
}

static inline vf vsilu(vf x)
{
    return x * vsigmoid(x);
}

static int SIMD_FN(unary)(int op, float *y, const float *x, int64_t n)
{
    int64_t i = 0;
    switch (op) {
        EACH_UNARY(BORA_OP_NEG, vneg);
        EACH_UNARY(BORA_OP_EXP, vexp);
        EACH_UNARY(BORA_OP_TANH, vtanh);
        EACH_UNARY(BORA_OP_SIGMOID, vsigmoid);
        EACH_UNARY(BORA_OP_RELU, vrelu);
        EACH_UNARY(BORA_OP_SILU, vsilu);
        EACH_UNARY(BORA_OP_GELU_TANH, vgelu_tanh);
        EACH_UNARY(BORA_OP_GELU_EXACT, vgelu_exact);
    default: return 0;
    }
}

#define EACH_GRAD(OP)                                                                         \
    case OP:                                                                                  \
        for (; i + NL <= n; i += NL)                                                          \
            storev(y + i, vact_grad(OP, loadv(x + i), loadv(dy + i)));                        \
        if (i < n)                                                                            \
            store_tail(                                                                       \
                y + i,                                                                        \
                vact_grad(OP, load_tail(x + i, n - i, 0.0f), load_tail(dy + i, n - i, 0.0f)), \
                n - i);                                                                       \
        return 1

static int SIMD_FN(act_grad)(int op, float *y, const float *x, const float *dy, int64_t n)
{
    int64_t i = 0;
    switch (op) {
        EACH_GRAD(BORA_OP_TANH);
        EACH_GRAD(BORA_OP_SIGMOID);
        EACH_GRAD(BORA_OP_RELU);
        EACH_GRAD(BORA_OP_SILU);
        EACH_GRAD(BORA_OP_GELU_TANH);
        EACH_GRAD(BORA_OP_GELU_EXACT);
    default: return 0;
    }
}

static float SIMD_FN(max)(const float *x, int64_t n)
{
    vf m = splat(-INFINITY);
    int64_t i = 0;
    for (; i + NL <= n; i += NL)
        m = vmax(m, loadv(x + i));
    if (i < n)
        m = vmax(m, load_tail(x + i, n - i, -INFINITY));
    float r = -INFINITY;
    for (int k = 0; k < NL; k++)
        r = m[k] > r ? m[k] : r;
    return r;
}

/* 16 partial sums in double, lane k holding elements k, k+16, ...; added in order at the end.
 * They are LANES / DL vectors of the native width, so the compiler keeps them in registers (a
 * 16-double vector type on a narrower machine went through the stack on every addition). */
typedef struct sums16 {
    vd v[LANES / DL];
} sums16;

static inline __attribute__((always_inline)) double finish16(const sums16 *a)
{
    double s = 0;
    for (int k = 0; k < LANES / DL; k++)
        for (int j = 0; j < DL; j++)
            s += a->v[k][j];
    return s;
}

/* DL floats to doubles, exactly. GCC 12 lowers the generic conversion of 4 floats through the
 * stack in halves, so AVX's own instruction is named where there is one. */
static inline __attribute__((always_inline)) vd widen_half(vhf h)
{
#if SIMD_BYTES == 64 && defined(__AVX512F__)
    return (vd)_mm512_cvtps_pd((__m256)h);
#elif SIMD_BYTES == 32 && defined(__AVX__)
    return (vd)_mm256_cvtps_pd((__m128)h);
#else
    return __builtin_convertvector(h, vd);
#endif
}

/* v's lanes as two halves of DL floats. */
static inline __attribute__((always_inline)) void halves(vf v, vhf *lo, vhf *hi)
{
#if SIMD_BYTES == 64
    *lo = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7);
    *hi = __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
#elif SIMD_BYTES == 32
    *lo = __builtin_shufflevector(v, v, 0, 1, 2, 3);
    *hi = __builtin_shufflevector(v, v, 4, 5, 6, 7);
#else
    *lo = __builtin_shufflevector(v, v, 0, 1);
    *hi = __builtin_shufflevector(v, v, 2, 3);
#endif
}

/* Adds the NL values of v to the partial sums' lanes from k on (k a multiple of NL). */
static inline __attribute__((always_inline)) void acc_vf(sums16 *a, int k, vf v)
{
    vhf lo, hi;
    halves(v, &lo, &hi);
    a->v[k / DL] += widen_half(lo);
    a->v[k / DL + 1] += widen_half(hi);
}

/* The sum of x (with square, of fl(x·x): MUL's bits) in 16 double lanes. Inlined into both
 * callers, so the test of square goes at compile time. */
static inline __attribute__((always_inline)) double sum16(const float *x, int64_t n, int square)
{
    sums16 acc = {{{0}}};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES) {
#pragma GCC unroll 16
        for (int k = 0; k < LANES; k += NL) {
            vf v = loadv(x + i + k);
            acc_vf(&acc, k, square ? v * v : v);
        }
    }
    for (int k = 0; k < LANES && i + k < n; k += NL) {
        vf v = load_tail(x + i + k, n - i - k < NL ? n - i - k : NL, 0.0f);
        acc_vf(&acc, k, square ? v * v : v);
    }
    return finish16(&acc);
}

static double SIMD_FN(sum)(const float *x, int64_t n)
{
    return sum16(x, n, 0);
}

/* Σ x·x in sum's order, each square rounded to f32 first (MUL's bits, then SUM's). */
static double SIMD_FN(sum_sq)(const float *x, int64_t n)
{
    return sum16(x, n, 1);
}

/* Σ x·y, each product exact in double, in sum's 16 lanes and order. */
static double SIMD_FN(dot)(const float *x, const float *y, int64_t n)
{
    sums16 acc = {{{0}}};
    for (int64_t i = 0; i < n; i += NL) {
        int64_t have = n - i < NL ? n - i : NL;
        vf a = have == NL ? loadv(x + i) : load_tail(x + i, have, 0.0f);
        vf b = have == NL ? loadv(y + i) : load_tail(y + i, have, 0.0f);
        vhf alo, ahi, blo, bhi;
        halves(a, &alo, &ahi);
        halves(b, &blo, &bhi);
        int k = (int)(i % LANES);
        acc.v[k / DL] += widen_half(alo) * widen_half(blo);
        acc.v[k / DL + 1] += widen_half(ahi) * widen_half(bhi);
    }
    return finish16(&acc);
}

/* The sum of exp(x - shift) in 16 double lanes; with y, each exp is also stored there (y may be
 * x). Inlined into both callers, so the test of y goes at compile time. */
static inline __attribute__((always_inline)) double exp_sum16(float *y, const float *x, int64_t n,
                                                              float shift)
{
    sums16 acc = {{{0}}};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES) {
#pragma GCC unroll 16
        for (int k = 0; k < LANES; k += NL) {
            vf e = vexp(loadv(x + i + k) - splat(shift));
            if (y)
                storev(y + i + k, e);
            acc_vf(&acc, k, e);
        }
    }
    for (int k = 0; k < LANES && i + k < n; k += NL) {
        int64_t have = n - i - k < NL ? n - i - k : NL;
        vf e = vexp(load_tail(x + i + k, have, -INFINITY) - splat(shift));
        if (y)
            store_tail(y + i + k, e, have);
        acc_vf(&acc, k, e);
    }
    return finish16(&acc);
}

static double SIMD_FN(sum_exp)(const float *x, int64_t n, float shift)
{
    return exp_sum16(NULL, x, n, shift);
}

/* y = exp(x - shift), returning their sum in sum_exp's order: one pass for a softmax's
 * numerators and denominator. */
static double SIMD_FN(exp_sum)(float *y, const float *x, int64_t n, float shift)
{
    return exp_sum16(y, x, n, shift);
}

/* p = exp(p - lse), then ds = p (ds - d): the bits of SUB and EXP, then of SUB and MUL. */
static void SIMD_FN(att_grad_row)(float *p, float *ds, int64_t n, float lse, float d)
{
    int64_t i = 0;
    for (; i + NL <= n; i += NL) {
        vf e = vexp(loadv(p + i) - splat(lse));
        storev(p + i, e);
        storev(ds + i, e * (loadv(ds + i) - splat(d)));
    }
    if (i < n) {
        vf e = vexp(load_tail(p + i, n - i, 0.0f) - splat(lse));
        store_tail(p + i, e, n - i);
        store_tail(ds + i, e * (load_tail(ds + i, n - i, 0.0f) - splat(d)), n - i);
    }
}

/* g = scale (exp(x - shift) zf - [i == target]), the gradient of a cross-entropy row; g may be
 * x itself (the target's logit is read before the row is overwritten). */
static void SIMD_FN(xent_grad)(float *g, const float *x, int64_t n, float shift, float scale,
                               float zf, int64_t target)
{
    float xt = target >= 0 && target < n ? x[target] : 0.0f;
    int64_t i = 0;
    for (; i + NL <= n; i += NL)
        storev(g + i, splat(scale) * (vexp(loadv(x + i) - splat(shift)) * splat(zf)));
    if (i < n)
        store_tail(g + i,
                   splat(scale) * (vexp(load_tail(x + i, n - i, 0.0f) - splat(shift)) * splat(zf)),
                   n - i);
    if (target >= 0 && target < n) {
        /* the same two roundings as the vector lanes: scale (e zf - 1) */
        float e[NL];
        storev(e, vexp(splat(xt - shift)) * splat(zf) - splat(1.0f));
        g[target] = scale * e[0];
    }
}

/* Arithmetic: every result correctly rounded (one IEEE operation per element), so the bits are
 * those of plain C loops whatever the width; these are such loops, left to the vectoriser
 * (-ftree-vectorize). */
static int SIMD_FN(arith)(int op, float *y, const float *x, const float *z, float value, int64_t n)
{
    switch (op) {
    case BORA_OP_ADD:
    case BORA_OP_SUB:
    case BORA_OP_MUL:
    case BORA_OP_DIV:
    case BORA_OP_SCALE:
    case BORA_OP_FILL:
    case BORA_OP_SQRT:
    case BORA_OP_RSQRT:
        if (!y)
            return 1;
        break;
    default: return 0;
    }
    switch (op) {
    case BORA_OP_FILL:
        for (int64_t i = 0; i < n; i++)
            y[i] = value;
        break;
    case BORA_OP_SCALE:
        for (int64_t i = 0; i < n; i++)
            y[i] = x[i] * value;
        break;
    case BORA_OP_SQRT:
        for (int64_t i = 0; i < n; i++)
            y[i] = __builtin_sqrtf(x[i]);
        break;
    case BORA_OP_RSQRT:
        for (int64_t i = 0; i < n; i++)
            y[i] = 1.0f / __builtin_sqrtf(x[i]);
        break;
    case BORA_OP_ADD:
        for (int64_t i = 0; i < n; i++)
            y[i] = x[i] + z[i];
        break;
    case BORA_OP_SUB:
        for (int64_t i = 0; i < n; i++)
            y[i] = x[i] - z[i];
        break;
    case BORA_OP_MUL:
        for (int64_t i = 0; i < n; i++)
            y[i] = x[i] * z[i];
        break;
    default:
        for (int64_t i = 0; i < n; i++)
            y[i] = x[i] / z[i];
        break;
    }
    return 1;
}

static int SIMD_FN(arith_scalar)(int op, float *y, const float *x, float s, int s_first, int64_t n)
{
    switch (op) {
    case BORA_OP_ADD:
        for (int64_t i = 0; i < n; i++)
            y[i] = x[i] + s;
        return 1;
    case BORA_OP_MUL:
        for (int64_t i = 0; i < n; i++)
            y[i] = x[i] * s;
        return 1;
    case BORA_OP_SUB:
        if (s_first)
            for (int64_t i = 0; i < n; i++)
                y[i] = s - x[i];
        else
            for (int64_t i = 0; i < n; i++)
                y[i] = x[i] - s;
        return 1;
    case BORA_OP_DIV:
        if (s_first)
            for (int64_t i = 0; i < n; i++)
                y[i] = s / x[i];
        else
            for (int64_t i = 0; i < n; i++)
                y[i] = x[i] / s;
        return 1;
    default: return 0;
    }
}

static void SIMD_FN(col_sums)(double *restrict acc, const float *x, int64_t rows, int64_t ld,
                              int64_t w)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < w; c++)
            acc[c] += (double)x[r * ld + c];
}

/* ---- LayerNorm rows: sums over a row in 16 double lanes (element i in lane i % 16), the lanes
 * added in order, as sum16 keeps them. ---- */

static double lanes_total(const double *acc)
{
    double s = 0;
    for (int k = 0; k < LANES; k++)
        s += acc[k];
    return s;
}

/* DL floats from p, widened. */
static inline __attribute__((always_inline)) vd load_wide(const float *p)
{
    vhf h;
    memcpy(&h, p, sizeof h);
    return widen_half(h);
}

static inline vd splatd(double v)
{
    vd r;
    for (int k = 0; k < DL; k++)
        r[k] = v;
    return r;
}

static void SIMD_FN(ln_row)(float *y, const float *x, const float *gamma, const float *beta,
                            int64_t n, double eps, float *mean, float *rstd)
{
    sums16 s = {{{0}}};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
#pragma GCC unroll 8
        for (int k = 0; k < LANES / DL; k++)
            s.v[k] += load_wide(x + i + k * DL);
    double acc[LANES];
    memcpy(acc, &s, sizeof acc);
    for (int k = 0; i + k < n; k++)
        acc[k] += (double)x[i + k];
    double m = lanes_total(acc) / (double)n;
    sums16 q = {{{0}}};
    vd mv = splatd(m);
    for (i = 0; i + LANES <= n; i += LANES)
#pragma GCC unroll 8
        for (int k = 0; k < LANES / DL; k++) {
            vd d = load_wide(x + i + k * DL) - mv;
            q.v[k] += d * d;
        }
    double var[LANES];
    memcpy(var, &q, sizeof var);
    for (int k = 0; i + k < n; k++) {
        double d = (double)x[i + k] - m;
        var[k] += d * d;
    }
    double rs = 1.0 / __builtin_sqrt(lanes_total(var) / (double)n + eps);
    for (i = 0; i < n; i++)
        y[i] = (float)(((double)x[i] - m) * rs * (double)gamma[i] + (double)beta[i]);
    *mean = (float)m;
    *rstd = (float)rs;
}

static void SIMD_FN(ln_grad_row)(float *dx, const float *x, const float *dy, const float *gamma,
                                 int64_t n, double mean, double rstd)
{
    sums16 s1v = {{{0}}}, s2v = {{{0}}};
    vd mv = splatd(mean), rv = splatd(rstd);
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
#pragma GCC unroll 8
        for (int k = 0; k < LANES / DL; k++) {
            vd xhat = (load_wide(x + i + k * DL) - mv) * rv;
            vd g = load_wide(dy + i + k * DL) * load_wide(gamma + i + k * DL);
            s1v.v[k] += g;
            s2v.v[k] += g * xhat;
        }
    double a1[LANES], a2[LANES];
    memcpy(a1, &s1v, sizeof a1);
    memcpy(a2, &s2v, sizeof a2);
    for (int k = 0; i + k < n; k++) {
        double xhat = ((double)x[i + k] - mean) * rstd;
        double g = (double)dy[i + k] * (double)gamma[i + k];
        a1[k] += g;
        a2[k] += g * xhat;
    }
    double s1 = lanes_total(a1) / (double)n, s2 = lanes_total(a2) / (double)n;
    for (i = 0; i < n; i++) {
        double xhat = ((double)x[i] - mean) * rstd;
        double g = (double)dy[i] * (double)gamma[i];
        dx[i] = (float)(rstd * (g - s1 - xhat * s2));
    }
}

static void SIMD_FN(ln_grad_cols)(double *restrict dg, double *restrict db, const float *x,
                                  const float *dy, const float *mean, const float *rstd,
                                  int64_t rows, int64_t ld_x, int64_t ld_dy, int64_t w)
{
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * ld_x, *dr = dy + r * ld_dy;
        double m = (double)mean[r], rs = (double)rstd[r];
        for (int64_t i = 0; i < w; i++) {
            double xhat = ((double)xr[i] - m) * rs;
            dg[i] += (double)dr[i] * xhat;
            db[i] += (double)dr[i];
        }
    }
}

/* ---- RMSNorm rows: Σ x² in ln_row's 16 double lanes, each square exact in double (a float's
 * square fits a double's mantissa), so the statistic is as wide as the reference loops' and only
 * the order of the additions differs. The scale is weight + off (no weight: 1). ---- */

static void SIMD_FN(rms_row)(float *y, const float *x, const float *w, double off, int64_t n,
                             double eps, float *rstd)
{
    sums16 s = {{{0}}};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
#pragma GCC unroll 8
        for (int k = 0; k < LANES / DL; k++) {
            vd v = load_wide(x + i + k * DL);
            s.v[k] += v * v;
        }
    double acc[LANES];
    memcpy(acc, &s, sizeof acc);
    for (int k = 0; i + k < n; k++)
        acc[k] += (double)x[i + k] * (double)x[i + k];
    double rs = 1.0 / __builtin_sqrt(lanes_total(acc) / (double)n + eps);
    if (w)
        for (i = 0; i < n; i++)
            y[i] = (float)((double)x[i] * rs * ((double)w[i] + off));
    else
        for (i = 0; i < n; i++)
            y[i] = (float)((double)x[i] * rs);
    *rstd = (float)rs;
}

/* dx = rstd (g - x̂ mean(g x̂)), g = dy (weight + off), x̂ = x rstd, the mean in 16 lanes. */
static void SIMD_FN(rms_grad_row)(float *dx, const float *x, const float *dy, const float *w,
                                  double off, int64_t n, double rstd)
{
    sums16 sv = {{{0}}};
    vd rv = splatd(rstd), ov = splatd(off);
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
#pragma GCC unroll 8
        for (int k = 0; k < LANES / DL; k++) {
            vd g = load_wide(dy + i + k * DL);
            if (w)
                g = g * (load_wide(w + i + k * DL) + ov);
            sv.v[k] += g * (load_wide(x + i + k * DL) * rv);
        }
    double a[LANES];
    memcpy(a, &sv, sizeof a);
    for (int k = 0; i + k < n; k++) {
        double g = (double)dy[i + k] * (w ? (double)w[i + k] + off : 1.0);
        a[k] += g * ((double)x[i + k] * rstd);
    }
    double s = lanes_total(a) / (double)n;
    if (w)
        for (i = 0; i < n; i++) {
            double g = (double)dy[i] * ((double)w[i] + off);
            dx[i] = (float)(rstd * (g - (double)x[i] * rstd * s));
        }
    else
        for (i = 0; i < n; i++)
            dx[i] = (float)(rstd * ((double)dy[i] - (double)x[i] * rstd * s));
}

static void SIMD_FN(rms_grad_cols)(double *restrict dw, const float *x, const float *dy,
                                   const float *rstd, int64_t rows, int64_t ld_x, int64_t ld_dy,
                                   int64_t w)
{
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * ld_x, *dr = dy + r * ld_dy;
        double rs = (double)rstd[r];
        for (int64_t i = 0; i < w; i++)
            dw[i] += (double)dr[i] * ((double)xr[i] * rs);
    }
}

/* bfloat16 <-> f32: round to nearest even; a NaN stays a (quiet) NaN. Integer lanes only, so
 * every instruction set gives the same bits. */
static void SIMD_FN(to_bf16)(uint16_t *restrict y, const float *restrict x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
        y[i] = (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : r);
    }
}

static void SIMD_FN(from_bf16)(float *restrict y, const uint16_t *restrict x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)x[i] << 16;
        memcpy(&y[i], &u, sizeof u);
    }
}

static void SIMD_FN(mask_segment)(float *restrict row, const int32_t *restrict seg, int32_t id,
                                  int64_t n)
{
    for (int64_t s = 0; s < n; s++)
        row[s] = seg[s] != id ? -INFINITY : row[s];
}

/* x, opaque to the compiler: a product passed through it is rounded before the sum it feeds
 * (-ffp-contract=fast would make the two one FMA, and change the bits). */
static inline vf rounded(vf x)
{
#ifdef __AVX512F__
    __asm__("" : "+v"(x));
#else
    __asm__("" : "+x"(x));
#endif
    return x;
}

static inline vf vsqrt(vf x)
{
#if SIMD_BYTES == 64 && defined(__AVX512F__)
    return (vf)_mm512_sqrt_ps((__m512)x);
#elif SIMD_BYTES == 32 && defined(__AVX__)
    return (vf)_mm256_sqrt_ps((__m256)x);
#else
    vf r;
    for (int k = 0; k < NL; k++)
        r[k] = __builtin_sqrtf(x[k]);
    return r;
#endif
}

/* AdamW's update (cpu_adamw), a vector at a time; the bf16 copies from p' as written, a block
 * at a time while it is in cache. The tail runs on padded vectors, stored in part. */
static void SIMD_FN(adamw)(const cpu_adamw *w, int64_t i0, int64_t n)
{
    enum { BLOCK = 512 };
    for (int64_t b0 = i0; b0 < i0 + n; b0 += BLOCK) {
        int64_t b1 = b0 + BLOCK < i0 + n ? b0 + BLOCK : i0 + n;
        for (int64_t i = b0; i < b1; i += NL) {
            int64_t have = b1 - i < NL ? b1 - i : NL;
            vf g = have == NL ? loadv(w->g + i) : load_tail(w->g + i, have, 0.0f);
            vf m = have == NL ? loadv(w->m + i) : load_tail(w->m + i, have, 0.0f);
            vf v = have == NL ? loadv(w->v + i) : load_tail(w->v + i, have, 0.0f);
            vf p = have == NL ? loadv(w->p + i) : load_tail(w->p + i, have, 0.0f);
            vf a = g * splat(w->clip);
            vf m2 = rounded(m * splat(w->b1)) + rounded(a * splat(w->one_b1));
            vf v2 = rounded(v * splat(w->b2)) + rounded(rounded(a * a) * splat(w->one_b2));
            vf den = rounded(vsqrt(v2) * splat(w->inv_bc2)) + splat(w->eps);
            vf u = (m2 / den) * splat(w->step);
            vf p2 = (w->decay_on ? p - rounded(p * splat(w->decay)) : p) - rounded(u);
            if (have == NL) {
                storev(w->m_out + i, m2);
                storev(w->v_out + i, v2);
                storev(w->p_out + i, p2);
            } else {
                store_tail(w->m_out + i, m2, have);
                store_tail(w->v_out + i, v2, have);
                store_tail(w->p_out + i, p2, have);
            }
        }
        if (w->pb)
            SIMD_FN(to_bf16)(w->pb + b0, w->p_out + b0, b1 - b0);
    }
}

const cpu_simd SIMD_TABLE = {
    .isa = SIMD_ISA,
    .unary = SIMD_FN(unary),
    .act_grad = SIMD_FN(act_grad),
    .max = SIMD_FN(max),
    .sum = SIMD_FN(sum),
    .sum_sq = SIMD_FN(sum_sq),
    .sum_exp = SIMD_FN(sum_exp),
    .exp_sum = SIMD_FN(exp_sum),
    .att_grad_row = SIMD_FN(att_grad_row),
    .xent_grad = SIMD_FN(xent_grad),
    .arith = SIMD_FN(arith),
    .arith_scalar = SIMD_FN(arith_scalar),
    .col_sums = SIMD_FN(col_sums),
    .ln_row = SIMD_FN(ln_row),
    .ln_grad_row = SIMD_FN(ln_grad_row),
    .ln_grad_cols = SIMD_FN(ln_grad_cols),
    .rms_row = SIMD_FN(rms_row),
    .rms_grad_row = SIMD_FN(rms_grad_row),
    .rms_grad_cols = SIMD_FN(rms_grad_cols),
    .to_bf16 = SIMD_FN(to_bf16),
    .from_bf16 = SIMD_FN(from_bf16),
    .mask_segment = SIMD_FN(mask_segment),
    .adamw = SIMD_FN(adamw),
    .dot = SIMD_FN(dot),
};
