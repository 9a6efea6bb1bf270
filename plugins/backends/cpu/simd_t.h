/* plugins/backends/cpu/simd_t.h — the CPU backend's vectorised f32 loops, written once on GCC's
 * 16-lane vector type and compiled once per instruction set (simd_avx512.c, simd_avx2.c,
 * simd_generic.c); cpu.c picks a table at start-up from what the CPU supports.
 *
 * Bits do not depend on the instruction set where the CPU has FMA: every loop works on 16 lanes
 * whatever the register width (AVX2 runs each as two halves), a tail is computed on a padded
 * copy by the same code, and sums keep 16 partial sums, added in a fixed order at the end.
 * exp and tanh are our own (range reduction and a polynomial, within 2 ulp of the true value);
 * the generic build, without FMA, rounds the polynomial differently, which is why the choice is
 * part of the backend's description. */
#include "simd.h"

#include <math.h>
#include <string.h>

typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));
typedef double v8d __attribute__((vector_size(64)));

#define LANES 16

static inline v16f splat(float v)
{
    return (v16f){v, v, v, v, v, v, v, v, v, v, v, v, v, v, v, v};
}

static inline v16f load16(const float *p)
{
    v16f v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void store16(float *p, v16f v)
{
    memcpy(p, &v, sizeof v);
}

static inline v16f vsel(v16i mask, v16f a, v16f b)
{
    return (v16f)((mask & (v16i)a) | (~mask & (v16i)b));
}

static inline v16f vmax(v16f a, v16f b)
{
    return vsel(a > b, a, b);
}

/* exp(x): x = n ln2 + r, |r| <= ln2/2, exp(r) by a degree-6 polynomial, 2^n into the exponent.
 * Below -87.33 the result is 0 (no subnormals), above 88.72 it is +inf; NaN stays NaN. */
static inline v16f vexp(v16f x)
{
    const v16f shifter = splat(12582912.0f); /* 1.5 * 2^23: adding it rounds to an integer */
    v16f xc = vmax(splat(-87.33654f), x);
    xc = vsel(xc < splat(88.72284f), xc, splat(88.72284f));
    v16f t = xc * splat(1.44269504088896341f) + shifter;
    v16f n = t - shifter;
    v16f r = xc - n * splat(0.693359375f);
    r = r - n * splat(-2.12194440e-4f);
    v16f p = splat(1.9875691500e-4f);
    p = p * r + splat(1.3981999507e-3f);
    p = p * r + splat(8.3334519073e-3f);
    p = p * r + splat(4.1665795894e-2f);
    p = p * r + splat(1.6666665459e-1f);
    p = p * r + splat(5.0000001201e-1f);
    p = p * (r * r) + r + splat(1.0f);
    /* 2^n as 2^h 2^(n-h), h = n/2: both factors normal for every n from -126 to 128 */
    v16i ni = __builtin_convertvector(n, v16i), h = ni >> 1;
    v16f y = p * (v16f)((h + 127) << 23) * (v16f)((ni - h + 127) << 23);
    y = vsel(x < splat(-87.33654f), splat(0.0f), y);
    y = vsel(x > splat(88.72284f), splat(INFINITY), y);
    return vsel(x != x, x, y);
}

/* tanh(x) = sign(x) (1 - 2 / (exp(2|x|) + 1)) from |x| = 0.625 up; below it, where that
 * subtraction would lose digits, an odd minimax polynomial (Cephes' tanhf coefficients). */
static inline v16f vtanh(v16f x)
{
    v16i sign = (v16i)x & (v16i)splat(-0.0f);
    v16f ax = (v16f)((v16i)x & ~(v16i)splat(-0.0f));
    v16f big = splat(1.0f) - splat(2.0f) / (vexp(ax + ax) + splat(1.0f));
    v16f z = ax * ax;
    v16f small = splat(-5.70498872745e-3f) * z + splat(2.06390887954e-2f);
    small = small * z + splat(-5.37397155531e-2f);
    small = small * z + splat(1.33314422036e-1f);
    small = small * z + splat(-3.33332819422e-1f);
    small = small * (z * ax) + ax;
    v16f y = vsel(ax < splat(0.625f), small, big);
    y = (v16f)((v16i)y | sign);
    return vsel(x != x, x, y);
}

static inline v16f vgelu_tanh(v16f x)
{
    v16f u = splat(0.7978845608028654f) * (x + splat(0.044715f) * x * x * x);
    return splat(0.5f) * x * (splat(1.0f) + vtanh(u));
}

static inline v16f vsigmoid(v16f x)
{
    return splat(1.0f) / (splat(1.0f) + vexp(-x));
}

static inline v16f vunary(int op, v16f x)
{
    switch (op) {
    case BORA_OP_NEG: return -x;
    case BORA_OP_EXP: return vexp(x);
    case BORA_OP_TANH: return vtanh(x);
    case BORA_OP_SIGMOID: return vsigmoid(x);
    case BORA_OP_RELU: return vsel(x > splat(0.0f), x, splat(0.0f));
    case BORA_OP_SILU: return x * vsigmoid(x);
    case BORA_OP_GELU_TANH: return vgelu_tanh(x);
    default: return x;
    }
}

static inline v16f vact_grad(int op, v16f x, v16f dy)
{
    switch (op) {
    case BORA_OP_TANH: {
        v16f t = vtanh(x);
        return dy * (splat(1.0f) - t * t);
    }
    case BORA_OP_SIGMOID: {
        v16f s = vsigmoid(x);
        return dy * s * (splat(1.0f) - s);
    }
    case BORA_OP_RELU: return vsel(x > splat(0.0f), dy, splat(0.0f));
    case BORA_OP_SILU: {
        v16f s = vsigmoid(x);
        return dy * s * (splat(1.0f) + x * (splat(1.0f) - s));
    }
    case BORA_OP_GELU_TANH: {
        v16f c = splat(0.7978845608028654f), a = splat(0.044715f);
        v16f u = c * (x + a * x * x * x), t = vtanh(u);
        v16f du = c * (splat(1.0f) + splat(3.0f) * a * x * x);
        return dy *
               (splat(0.5f) * (splat(1.0f) + t) + splat(0.5f) * x * (splat(1.0f) - t * t) * du);
    }
    default: return splat(0.0f);
    }
}

/* Loads of the tail (fewer than 16 values) padded with `pad`. */
static inline v16f load_tail(const float *p, int64_t n, float pad)
{
    float buf[LANES];
    for (int i = 0; i < LANES; i++)
        buf[i] = i < n ? p[i] : pad;
    return load16(buf);
}

static inline void store_tail(float *p, v16f v, int64_t n)
{
    float buf[LANES];
    store16(buf, v);
    memcpy(p, buf, sizeof(float) * (size_t)n);
}

static int SIMD_FN(unary)(int op, float *y, const float *x, int64_t n)
{
    switch (op) {
    case BORA_OP_NEG:
    case BORA_OP_EXP:
    case BORA_OP_TANH:
    case BORA_OP_SIGMOID:
    case BORA_OP_RELU:
    case BORA_OP_SILU:
    case BORA_OP_GELU_TANH: break;
    default: return 0;
    }
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        store16(y + i, vunary(op, load16(x + i)));
    if (i < n)
        store_tail(y + i, vunary(op, load_tail(x + i, n - i, 0.0f)), n - i);
    return 1;
}

static int SIMD_FN(act_grad)(int op, float *y, const float *x, const float *dy, int64_t n)
{
    switch (op) {
    case BORA_OP_TANH:
    case BORA_OP_SIGMOID:
    case BORA_OP_RELU:
    case BORA_OP_SILU:
    case BORA_OP_GELU_TANH: break;
    default: return 0;
    }
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        store16(y + i, vact_grad(op, load16(x + i), load16(dy + i)));
    if (i < n)
        store_tail(y + i,
                   vact_grad(op, load_tail(x + i, n - i, 0.0f), load_tail(dy + i, n - i, 0.0f)),
                   n - i);
    return 1;
}

static float SIMD_FN(max)(const float *x, int64_t n)
{
    v16f m = splat(-INFINITY);
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        m = vmax(m, load16(x + i));
    if (i < n)
        m = vmax(m, load_tail(x + i, n - i, -INFINITY));
    float r = -INFINITY;
    for (int k = 0; k < LANES; k++)
        r = m[k] > r ? m[k] : r;
    return r;
}

/* 16 partial sums in double, lane k holding elements k, k+16, ...; added in order at the end. */
static double finish16(v8d lo, v8d hi)
{
    double s = 0;
    for (int k = 0; k < 8; k++)
        s += lo[k];
    for (int k = 0; k < 8; k++)
        s += hi[k];
    return s;
}

static inline void acc16(v8d *lo, v8d *hi, v16f v)
{
    typedef float v8f __attribute__((vector_size(32)));
    v8f a = {v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]};
    v8f b = {v[8], v[9], v[10], v[11], v[12], v[13], v[14], v[15]};
    *lo += __builtin_convertvector(a, v8d);
    *hi += __builtin_convertvector(b, v8d);
}

static double SIMD_FN(sum)(const float *x, int64_t n)
{
    v8d lo = {0}, hi = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        acc16(&lo, &hi, load16(x + i));
    if (i < n)
        acc16(&lo, &hi, load_tail(x + i, n - i, 0.0f));
    return finish16(lo, hi);
}

static double SIMD_FN(sum_exp)(const float *x, int64_t n, float shift)
{
    v8d lo = {0}, hi = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        acc16(&lo, &hi, vexp(load16(x + i) - splat(shift)));
    if (i < n)
        acc16(&lo, &hi, vexp(load_tail(x + i, n - i, -INFINITY) - splat(shift)));
    return finish16(lo, hi);
}

/* g = scale (exp(x - shift) zf - [i == target]), the gradient of a cross-entropy row. */
static inline v16f xent_grad16(v16f x, int64_t i, float shift, float scale, float zf,
                               int64_t target)
{
    const v16i iota = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    v16i hit = iota == (v16i){0} + (int32_t)(target - i);
    v16f one = vsel(hit, splat(1.0f), splat(0.0f));
    return splat(scale) * (vexp(x - splat(shift)) * splat(zf) - one);
}

static void SIMD_FN(xent_grad)(float *g, const float *x, int64_t n, float shift, float scale,
                               float zf, int64_t target)
{
    int64_t i = 0;
    if (target < 0 || target >= n)
        target = -LANES; /* matches no lane */
    for (; i + LANES <= n; i += LANES)
        store16(g + i, xent_grad16(load16(x + i), i, shift, scale, zf,
                                   target - i >= 0 && target - i < LANES ? target : -LANES));
    if (i < n)
        store_tail(g + i,
                   xent_grad16(load_tail(x + i, n - i, 0.0f), i, shift, scale, zf,
                               target - i >= 0 && target - i < LANES ? target : -LANES),
                   n - i);
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

const cpu_simd SIMD_TABLE = {
    .isa = SIMD_ISA,
    .unary = SIMD_FN(unary),
    .act_grad = SIMD_FN(act_grad),
    .max = SIMD_FN(max),
    .sum = SIMD_FN(sum),
    .sum_exp = SIMD_FN(sum_exp),
    .xent_grad = SIMD_FN(xent_grad),
    .arith = SIMD_FN(arith),
};
