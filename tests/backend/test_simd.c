/* tests/backend/test_simd.c — the CPU backend's vectorised f32 loops (plugins/backends/cpu/
 * simd_t.h) against double-precision references: exp and tanh within 2 ulp over their whole
 * range and exact at the special values; the activations (GELU with erf among them), their
 * gradients, sums and the
 * cross-entropy gradient within stated tolerances; the arithmetic loops (an array or a scalar as
 * either operand) bitwise equal to one C operation per element; the bfloat16 conversions
 * (nearest, ties to even, NaN kept, overflow to infinity) against a reference that picks the
 * nearer of the two neighbours in double; and the AVX-512 and AVX2 builds bitwise equal
 * to each other on every function (skipped, saying so, on a CPU without both). */
#include "../test.h"
#include "simd.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Distance in units in the last place between two finite floats of the same sign region. */
static int64_t ulps(float a, float b)
{
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    if (ia < 0)
        ia = INT32_MIN - ia;
    if (ib < 0)
        ib = INT32_MIN - ib;
    return llabs((long long)ia - (long long)ib);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float uniform(float lo, float hi)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return lo + (hi - lo) * (float)((double)(rng_state >> 11) / 9007199254740992.0);
}

/* The table's unary op on one value (through a 1-long array: the tail path). */
static float one(const cpu_simd *s, int op, float x)
{
    float y = NAN;
    s->unary(op, &y, &x, 1);
    return y;
}

static void check_exp_tanh(const cpu_simd *s)
{
    enum { N = 1 << 20 };
    float *x = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * N);
    /* exp over its finite range, evenly */
    for (int i = 0; i < N; i++)
        x[i] = -87.3f + (88.7f + 87.3f) * (float)i / (float)(N - 1);
    CHECK(s->unary(BORA_OP_EXP, y, x, N));
    int64_t worst = 0;
    for (int i = 0; i < N; i++) {
        int64_t u = ulps(y[i], (float)exp((double)x[i]));
        if (u > worst)
            worst = u;
    }
    printf("%s exp: worst %lld ulp over [-87.3, 88.7]\n", s->isa, (long long)worst);
    CHECK(worst <= 2);
    /* tanh over [-10, 10], densely near 0 as well */
    for (int i = 0; i < N; i++)
        x[i] = i % 2 ? -10.0f + 20.0f * (float)i / (float)(N - 1) : uniform(-1.0f, 1.0f);
    CHECK(s->unary(BORA_OP_TANH, y, x, N));
    worst = 0;
    for (int i = 0; i < N; i++) {
        int64_t u = ulps(y[i], (float)tanh((double)x[i]));
        if (u > worst)
            worst = u;
    }
    printf("%s tanh: worst %lld ulp over [-10, 10]\n", s->isa, (long long)worst);
    CHECK(worst <= 2);
    /* special values */
    CHECK(one(s, BORA_OP_EXP, 0.0f) == 1.0f);
    CHECK(one(s, BORA_OP_EXP, -INFINITY) == 0.0f);
    CHECK(one(s, BORA_OP_EXP, -100.0f) == 0.0f);
    CHECK(isinf(one(s, BORA_OP_EXP, INFINITY)) && one(s, BORA_OP_EXP, INFINITY) > 0);
    CHECK(isinf(one(s, BORA_OP_EXP, 100.0f)));
    CHECK(isnan(one(s, BORA_OP_EXP, NAN)));
    CHECK(one(s, BORA_OP_TANH, 0.0f) == 0.0f && !signbit(one(s, BORA_OP_TANH, 0.0f)));
    CHECK(signbit(one(s, BORA_OP_TANH, -0.0f)));
    CHECK(one(s, BORA_OP_TANH, 30.0f) == 1.0f && one(s, BORA_OP_TANH, -INFINITY) == -1.0f);
    CHECK(isnan(one(s, BORA_OP_TANH, NAN)));
    CHECK(one(s, BORA_OP_TANH, 1e-30f) == 1e-30f);
    free(x);
    free(y);
}

static double ref_unary(int op, double x)
{
    switch (op) {
    case BORA_OP_NEG: return -x;
    case BORA_OP_EXP: return exp(x);
    case BORA_OP_TANH: return tanh(x);
    case BORA_OP_SIGMOID: return 1 / (1 + exp(-x));
    case BORA_OP_RELU: return x > 0 ? x : 0;
    case BORA_OP_SILU: return x / (1 + exp(-x));
    case BORA_OP_GELU_EXACT: return 0.5 * x * (1 + erf(x / sqrt(2.0)));
    default: /* GELU_TANH */
        return 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    }
}

static double ref_grad(int op, double x, double dy)
{
    double h = 1e-6; /* central difference of the reference in double: error ~1e-12 */
    return dy * (ref_unary(op, x + h) - ref_unary(op, x - h)) / (2 * h);
}

static void check_activations(const cpu_simd *s)
{
    static const int ops[] = {BORA_OP_NEG,  BORA_OP_EXP,  BORA_OP_TANH,      BORA_OP_SIGMOID,
                              BORA_OP_RELU, BORA_OP_SILU, BORA_OP_GELU_TANH, BORA_OP_GELU_EXACT};
    enum { N = 4099 }; /* not a multiple of 16: the tail is checked too */
    float x[N], y[N], dy[N], g[N];
    for (int i = 0; i < N; i++) {
        x[i] = uniform(-8.0f, 8.0f);
        dy[i] = uniform(-2.0f, 2.0f);
    }
    x[0] = 0.3f; /* RELU's gradient at a kink is never sampled: keep x away from 0 */
    for (size_t k = 0; k < sizeof ops / sizeof *ops; k++) {
        int op = ops[k];
        CHECK(s->unary(op, y, x, N));
        /* value within 2e-6 relative, or 3e-7 absolute where the f32 formula itself cancels
         * (1 + tanh(u) for GELU far below 0); gradients within 1e-5 relative, or
         * 3e-7 |dy| (1 + x²) absolute (1 - t² near t = 1, times GELU's x du/dx) */
        double worst = 0, worst_g = 0;
        int has_grad = op != BORA_OP_NEG && op != BORA_OP_EXP;
        if (has_grad)
            CHECK(s->act_grad(op, g, x, dy, N));
        for (int i = 0; i < N; i++) {
            double r = ref_unary(op, x[i]);
            worst = fmax(worst, fabs(y[i] - r) / (2e-6 * fabs(r) + 3e-7));
            if (has_grad && fabs(x[i]) > 1e-3) {
                double rg = ref_grad(op, x[i], dy[i]);
                worst_g = fmax(worst_g, fabs(g[i] - rg) / (1e-5 * fabs(rg) +
                                                           3e-7 * fabs(dy[i]) * (1 + x[i] * x[i])));
            }
        }
        printf("%s op %d: worst error %.2f of the tolerance, gradient %.2f\n", s->isa, op, worst,
               worst_g);
        CHECK(worst <= 1);
        CHECK(worst_g <= 1);
    }
    /* ops without a vector loop say so */
    CHECK(!s->unary(BORA_OP_LOG, y, x, 1));
    CHECK(!s->act_grad(BORA_OP_EXP, g, x, dy, 1));
    /* GELU with erf at its special values: 0, x far above 0, 0 far below, NaN */
    CHECK(one(s, BORA_OP_GELU_EXACT, 0.0f) == 0.0f);
    CHECK(one(s, BORA_OP_GELU_EXACT, 20.0f) == 20.0f && one(s, BORA_OP_GELU_EXACT, 1e30f) == 1e30f);
    CHECK(one(s, BORA_OP_GELU_EXACT, -20.0f) == 0.0f);
    CHECK(isnan(one(s, BORA_OP_GELU_EXACT, NAN)));
    CHECK(s->unary(BORA_OP_TANH, NULL, NULL, 0) && !s->unary(BORA_OP_LOG, NULL, NULL, 0));
    CHECK(s->act_grad(BORA_OP_SILU, NULL, NULL, NULL, 0));
}

static void check_rows(const cpu_simd *s)
{
    enum { V = 50257 };
    float *x = malloc(sizeof(float) * V), *g = malloc(sizeof(float) * V);
    for (int i = 0; i < V; i++)
        x[i] = uniform(-6.0f, 6.0f);
    x[1234] = 9.5f;
    double m = -INFINITY, sum = 0, sum_e = 0;
    for (int i = 0; i < V; i++) {
        m = fmax(m, x[i]);
        sum += x[i];
    }
    for (int i = 0; i < V; i++)
        sum_e += exp(x[i] - m);
    CHECK(s->max(x, V) == 9.5f);
    CHECK(s->max(x, 3) == fmaxf(x[0], fmaxf(x[1], x[2])));
    CHECK(fabs(s->sum(x, V) - sum) < 1e-9 * V);
    CHECK(fabs(s->sum_exp(x, V, (float)m) - sum_e) < 4e-7 * sum_e);
    /* the cross-entropy gradient: scale (softmax * zf - onehot) */
    double lse = m + log(sum_e);
    float scale = 0.25f, zf = 1.01f;
    s->xent_grad(g, x, V, (float)lse, scale, zf, 77);
    double worst = 0;
    for (int i = 0; i < V; i++) {
        double r = scale * (exp(x[i] - lse) * zf - (i == 77));
        worst = fmax(worst, fabs(g[i] - r) / (fabs(r) + 1e-12));
    }
    printf("%s cross-entropy gradient: worst relative error %.2e\n", s->isa, worst);
    CHECK(worst < 1e-5);
    s->xent_grad(g, x, 5, (float)lse, scale, zf, V); /* a target past the row: none */
    for (int i = 0; i < 5; i++)
        CHECK(fabsf(g[i] - (float)(scale * exp(x[i] - lse) * zf)) < 1e-6f);
    /* exp_sum: SUB then EXP's bits, in place or not, and sum_exp's sum, at every tail length */
    float *y = malloc(sizeof(float) * V);
    int exp_sum_differs = 0;
    for (int64_t n = 1; n <= V; n = n < 40 ? n + 1 : n * 3 + 1) {
        float shift = (float)m;
        double got = s->exp_sum(y, x, n, shift);
        exp_sum_differs |= memcmp(&got, &(double){s->sum_exp(x, n, shift)}, sizeof got) != 0;
        s->arith_scalar(BORA_OP_SUB, g, x, shift, 0, n);
        s->unary(BORA_OP_EXP, g, g, n);
        exp_sum_differs |= memcmp(y, g, sizeof(float) * (size_t)n) != 0;
        memcpy(g, x, sizeof(float) * (size_t)n);
        got = s->exp_sum(g, g, n, shift);
        exp_sum_differs |= memcmp(y, g, sizeof(float) * (size_t)n) != 0;
    }
    printf("%s exp_sum: %s\n", s->isa,
           exp_sum_differs ? "DIFFERENT from SUB, EXP and sum_exp" : "SUB, EXP and sum_exp's bits");
    CHECK(!exp_sum_differs);
    /* att_grad_row: SUB, EXP on p, then SUB, MUL on ds, at every tail length */
    float *p = malloc(sizeof(float) * V), *ds = malloc(sizeof(float) * V);
    float *rp = malloc(sizeof(float) * V), *rds = malloc(sizeof(float) * V);
    int att_differs = 0;
    for (int64_t n = 1; n <= V; n = n < 40 ? n + 1 : n * 3 + 1) {
        float shift = (float)m + 0.75f, d = 0.3125f;
        for (int64_t i = 0; i < n; i++)
            ds[i] = uniform(-1.0f, 1.0f);
        memcpy(p, x, sizeof(float) * (size_t)n);
        memcpy(rds, ds, sizeof(float) * (size_t)n);
        s->arith_scalar(BORA_OP_SUB, rp, x, shift, 0, n);
        s->unary(BORA_OP_EXP, rp, rp, n);
        s->arith_scalar(BORA_OP_SUB, rds, rds, d, 0, n);
        s->arith(BORA_OP_MUL, rds, rp, rds, 0, n);
        s->att_grad_row(p, ds, n, shift, d);
        att_differs |= memcmp(p, rp, sizeof(float) * (size_t)n) != 0 ||
                       memcmp(ds, rds, sizeof(float) * (size_t)n) != 0;
    }
    printf("%s att_grad_row: %s\n", s->isa,
           att_differs ? "DIFFERENT from SUB, EXP, SUB, MUL" : "SUB, EXP, SUB and MUL's bits");
    CHECK(!att_differs);
    free(p);
    free(ds);
    free(rp);
    free(rds);
    /* sum_sq: MUL (x, x) then sum, bit for bit, at every tail length */
    int sum_sq_differs = 0;
    for (int64_t n = 1; n <= V; n = n < 40 ? n + 1 : n * 3 + 1) {
        s->arith(BORA_OP_MUL, g, x, x, 0, n);
        double got = s->sum_sq(x, n), want = s->sum(g, n);
        sum_sq_differs |= memcmp(&got, &want, sizeof got) != 0;
    }
    printf("%s sum_sq: %s\n", s->isa,
           sum_sq_differs ? "DIFFERENT from MUL then sum" : "MUL then sum's bits");
    CHECK(!sum_sq_differs);
    free(y);
    free(x);
    free(g);
}

/* rms_row and rms_grad_row against RMSNorm in double at every tail length (and long rows), with
 * and without a weight: within an f32 rounding of the double result; rms_grad_cols against
 * its sums in double. */
static void check_rms(const cpu_simd *s)
{
    enum { N = 3001 };
    float *x = malloc(sizeof(float) * N), *dy = malloc(sizeof(float) * N);
    float *w = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * N);
    for (int i = 0; i < N; i++)
        x[i] = uniform(-3.0f, 3.0f), dy[i] = uniform(-1.0f, 1.0f), w[i] = uniform(0.5f, 1.5f);
    double worst = 0;
    for (int64_t n = 1; n <= N; n = n < 40 ? n + 1 : n * 3 + 1) {
        for (int weighted = 0; weighted < 2; weighted++) {
            double ss = 0, off = weighted ? 1.0 : 0.0, eps = 1e-6;
            for (int64_t i = 0; i < n; i++)
                ss += (double)x[i] * x[i];
            double rs = 1.0 / sqrt(ss / (double)n + eps), d = 0;
            float rstd;
            s->rms_row(y, x, weighted ? w : NULL, off, n, eps, &rstd);
            worst = fmax(worst, fabs(rstd - rs) / rs);
            for (int64_t i = 0; i < n; i++) {
                double sc = weighted ? w[i] + off : 1.0, want = x[i] * rs * sc;
                worst = fmax(worst, fabs(y[i] - want) / (fabs(want) + 1e-30));
                d += dy[i] * sc * (x[i] * rs);
            }
            d /= (double)n;
            s->rms_grad_row(y, x, dy, weighted ? w : NULL, off, n, rs);
            for (int64_t i = 0; i < n; i++) {
                double sc = weighted ? w[i] + off : 1.0;
                double want = rs * (dy[i] * sc - x[i] * rs * d);
                worst = fmax(worst, fabs(y[i] - want) / (fabs(want) + 1e-6));
            }
        }
    }
    /* dw over 7 rows of 37 columns, the rows 40 apart */
    float rstds[7];
    double dw[37] = {0};
    for (int r = 0; r < 7; r++)
        rstds[r] = 0.5f + 0.125f * (float)r;
    s->rms_grad_cols(dw, x, dy, rstds, 7, 40, 40, 37);
    for (int i = 0; i < 37; i++) {
        double want = 0;
        for (int r = 0; r < 7; r++)
            want += (double)dy[r * 40 + i] * ((double)x[r * 40 + i] * rstds[r]);
        worst = fmax(worst, fabs(dw[i] - want) / (fabs(want) + 1e-6));
    }
    printf("%s rms_row, rms_grad_row, rms_grad_cols: worst relative error %.2e\n", s->isa, worst);
    CHECK(worst < 1.2e-7);
    free(x);
    free(dy);
    free(w);
    free(y);
}

/* arith and arith_scalar: one correctly rounded operation per element, whatever the length. */
static void check_arith(const cpu_simd *s)
{
    enum { N = 3001 };
    float *x = malloc(sizeof(float) * N), *z = malloc(sizeof(float) * N);
    float *y = malloc(sizeof(float) * N), *w = malloc(sizeof(float) * N);
    float *fill = malloc(sizeof(float) * N);
    for (int i = 0; i < N; i++) {
        x[i] = uniform(-3.0f, 3.0f);
        z[i] = uniform(0.1f, 2.0f) * (i % 3 ? 1.0f : -1.0f);
    }
    x[5] = 0.0f, x[6] = -0.0f, z[7] = 0.0f, x[8] = INFINITY;
    static const int ops[] = {BORA_OP_ADD, BORA_OP_SUB, BORA_OP_MUL, BORA_OP_DIV};
    const float sc = 0.3f;
    int bad = 0;
    for (size_t k = 0; k < sizeof ops / sizeof *ops; k++) {
        int op = ops[k];
        for (int64_t n = 1; n <= N; n += n < 40 ? 1 : 997) {
            CHECK(s->arith(op, y, x, z, 0, n));
            for (int64_t i = 0; i < n; i++) {
                float r = op == BORA_OP_ADD   ? x[i] + z[i]
                          : op == BORA_OP_SUB ? x[i] - z[i]
                          : op == BORA_OP_MUL ? x[i] * z[i]
                                              : x[i] / z[i];
                bad |= memcmp(&r, &y[i], 4) != 0;
            }
            for (int first = 0; first < 2; first++) { /* the scalar as the second, then first */
                for (int64_t i = 0; i < n; i++)
                    fill[i] = sc;
                CHECK(s->arith(op, y, first ? fill : x, first ? x : fill, 0, n));
                CHECK(s->arith_scalar(op, w, x, sc, first, n));
                bad |= memcmp(y, w, sizeof(float) * (size_t)n) != 0;
            }
        }
    }
    CHECK(!s->arith_scalar(BORA_OP_EXP, NULL, NULL, 0, 0, 0));
    printf("%s arithmetic: %s\n", s->isa,
           bad ? "DIFFERENT from one C operation per element"
               : "the bits of one C operation per element");
    CHECK(!bad);
    free(x);
    free(z);
    free(y);
    free(w);
    free(fill);
}

/* Two tables give the same bits on the same inputs. */
static void check_same_bits(const cpu_simd *a, const cpu_simd *b)
{
    enum { N = 50257 };
    float *x = malloc(sizeof(float) * N), *dy = malloc(sizeof(float) * N);
    float *ya = malloc(sizeof(float) * N), *yb = malloc(sizeof(float) * N);
    for (int i = 0; i < N; i++) {
        x[i] = uniform(-20.0f, 20.0f);
        dy[i] = uniform(-1.0f, 1.0f);
    }
    /* the special values and GELU's branch point (erf's at 1.25, x = ±1.25·√2) among them */
    static const float special[] = {0.0f,   -0.0f,     INFINITY,   -INFINITY,
                                    NAN,    1e-40f,    -1e-40f,    1e30f,
                                    -1e30f, 1.767767f, -1.767767f, 1.7677670f + 1e-6f};
    memcpy(x, special, sizeof special);
    static const int ops[] = {BORA_OP_EXP,  BORA_OP_TANH,      BORA_OP_SIGMOID,
                              BORA_OP_SILU, BORA_OP_GELU_TANH, BORA_OP_GELU_EXACT};
    /* every length to 40 (each tail size, whole vectors around it), then a few long rows */
    static const int64_t long_rows[] = {121, 364, 1093, 3280, 9841, 29524, N};
    int64_t lengths[40 + sizeof long_rows / sizeof *long_rows];
    size_t n_lengths = 0;
    for (int64_t n = 1; n <= 40; n++)
        lengths[n_lengths++] = n;
    for (size_t i = 0; i < sizeof long_rows / sizeof *long_rows; i++)
        lengths[n_lengths++] = long_rows[i];
    int differ = 0;
    for (size_t k = 0; k < sizeof ops / sizeof *ops; k++) {
        for (size_t li = 0; li < n_lengths; li++) {
            int64_t n = lengths[li];
            a->unary(ops[k], ya, x, n);
            b->unary(ops[k], yb, x, n);
            differ |= memcmp(ya, yb, sizeof(float) * (size_t)n) != 0;
            a->act_grad(ops[k] == BORA_OP_EXP ? BORA_OP_TANH : ops[k], ya, x, dy, n);
            b->act_grad(ops[k] == BORA_OP_EXP ? BORA_OP_TANH : ops[k], yb, x, dy, n);
            differ |= memcmp(ya, yb, sizeof(float) * (size_t)n) != 0;
            double sa = a->sum_exp(x, n, 20.0f), sb = b->sum_exp(x, n, 20.0f);
            differ |= memcmp(&sa, &sb, sizeof sa) != 0;
            sa = a->exp_sum(ya, x, n, 20.0f);
            sb = b->exp_sum(yb, x, n, 20.0f);
            differ |= memcmp(&sa, &sb, sizeof sa) != 0 || memcmp(ya, yb, sizeof(float) * (size_t)n);
            sa = a->sum(x, n);
            sb = b->sum(x, n);
            differ |= memcmp(&sa, &sb, sizeof sa) != 0;
            a->xent_grad(ya, x, n, 21.0f, 0.5f, 1.0f, n / 2);
            b->xent_grad(yb, x, n, 21.0f, 0.5f, 1.0f, n / 2);
            differ |= memcmp(ya, yb, sizeof(float) * (size_t)n) != 0;
            float *pa = ya, *pb = yb, *da = ya + n, *db = yb + n;
            if (2 * n <= N) {
                memcpy(pa, x, sizeof(float) * (size_t)n);
                memcpy(pb, x, sizeof(float) * (size_t)n);
                memcpy(da, dy, sizeof(float) * (size_t)n);
                memcpy(db, dy, sizeof(float) * (size_t)n);
                a->att_grad_row(pa, da, n, 3.0f, 0.25f);
                b->att_grad_row(pb, db, n, 3.0f, 0.25f);
                differ |= memcmp(ya, yb, sizeof(float) * (size_t)(2 * n)) != 0;
            }
        }
    }
    printf("%s and %s: %s\n", a->isa, b->isa, differ ? "DIFFERENT bits" : "the same bits");
    CHECK(!differ);
    free(x);
    free(dy);
    free(ya);
    free(yb);
}

static uint32_t next_u32(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 32);
}

/* The bf16 nearest to x, ties to the even one, by comparing the two neighbours in double. */
static uint16_t ref_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if (isnan(x))
        return 0; /* checked apart */
    uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;
    float flo, fhi;
    memcpy(&flo, &lo, sizeof flo);
    memcpy(&fhi, &hi, sizeof fhi);
    if ((lo & 0x7fffffffu) == 0x7f800000u) /* x is ±infinity */
        return (uint16_t)(lo >> 16);
    /* the next one up in magnitude; past the largest finite it is infinity (2^128) */
    double dlo = fabs((double)x - (double)flo);
    double dhi = (hi & 0x7fffffffu) == 0x7f800000u ? fabs(fabs((double)x) - ldexp(1.0, 128))
                                                   : fabs((double)x - (double)fhi);
    if (dlo < dhi || (dlo == dhi && !((lo >> 16) & 1u)))
        return (uint16_t)(lo >> 16);
    return (uint16_t)(hi >> 16);
}

static void check_bf16(const cpu_simd *s)
{
    enum { N = 1 << 20 };
    float *x = malloc(sizeof(float) * N), *back = malloc(sizeof(float) * N);
    uint16_t *y = malloc(sizeof(uint16_t) * N);
    const uint32_t special[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                                0xffc00001u, 0x7f800001u, 0x7f7fffffu, 0x7f7f8000u, 0x7f7f7fffu,
                                0x3f808000u, 0x3f818000u, 0x3f808001u, 0x00008000u, 0x00018000u,
                                0x00000001u, 0x807fffffu, 0x3f800000u};
    int ns = (int)(sizeof special / sizeof *special);
    for (int i = 0; i < N; i++) {
        uint32_t u = i < ns ? special[i] : next_u32();
        if (i >= ns && i % 4 == 0) /* a tie or a near-tie: the low half 0x8000 give or take */
            u = (u & 0xffff0000u) | (0x7fffu + (uint32_t)(i % 3));
        memcpy(&x[i], &u, sizeof u);
    }
    s->to_bf16(y, x, N - 3); /* a length no width divides */
    s->to_bf16(y + N - 3, x + N - 3, 3);
    s->from_bf16(back, y, N);
    int bad = 0;
    for (int i = 0; i < N && bad < 5; i++) {
        uint32_t u, b;
        memcpy(&u, &x[i], sizeof u);
        memcpy(&b, &back[i], sizeof b);
        int ok = isnan(x[i])
                     ? (y[i] & 0x7f80u) == 0x7f80u && (y[i] & 0x7fu) && (y[i] >> 15) == (u >> 31)
                     : y[i] == ref_bf16(x[i]);
        ok &= b == (uint32_t)y[i] << 16; /* widening is exact */
        if (!ok) {
            fprintf(stderr, "%s: bf16 of %08x: %04x, want %04x\n", s->isa, u, y[i], ref_bf16(x[i]));
            bad++;
        }
    }
    if (bad)
        test_failures++;
    free(x);
    free(back);
    free(y);
}

/* Keys of other segments become -inf, the rest keep their bits, at lengths no width divides. */
static void check_mask_segment(const cpu_simd *s)
{
    enum { N = 301 };
    float row[N], want[N];
    int32_t seg[N];
    for (int n = 0; n <= N; n += 43) {
        for (int i = 0; i < N; i++) {
            seg[i] = (i / 7) % 3 + (i == 100 ? 5 : 0);
            row[i] = want[i] = (float)i - 150.5f;
            if (i < n && seg[i] != 1)
                want[i] = -INFINITY;
        }
        s->mask_segment(row, seg, 1, n);
        int bad = 0;
        for (int i = 0; i < N; i++)
            bad += memcmp(&row[i], &want[i], sizeof(float)) != 0;
        if (bad) {
            fprintf(stderr, "%s: mask_segment over %d keys: %d wrong\n", s->isa, n, bad);
            test_failures++;
        }
    }
}

/* AdamW's update against the same operations one at a time in plain C, bit for bit: with and
 * without decay and the bf16 copy, in place and not, from an offset, at lengths no width
 * divides. */
static void check_adamw(const cpu_simd *s)
{
    enum { N = 1000 };
    float g[N], m[N], v[N], p[N], mo[N], vo[N], po[N];
    uint16_t pb[N];
    for (int variant = 0; variant < 4; variant++) {
        for (int i = 0; i < N; i++) {
            g[i] = (float)sin(0.7 * i) * 3e-2f, m[i] = (float)cos(0.3 * i) * 1e-2f;
            v[i] = (float)(1e-4 * (1 + sin(0.11 * i))), p[i] = (float)sin(1.3 * i + 0.2);
        }
        if (variant == 3)
            v[5] = 0, g[5] = 0, g[7] = -INFINITY;
        int in_place = variant & 1;
        cpu_adamw w = {.g = g,
                       .m = m,
                       .v = v,
                       .p = p,
                       .m_out = in_place ? m : mo,
                       .v_out = in_place ? v : vo,
                       .p_out = in_place ? p : po,
                       .pb = variant >= 2 ? pb : NULL,
                       .clip = 0.73f,
                       .b1 = 0.9f,
                       .one_b1 = 0.1f,
                       .b2 = 0.95f,
                       .one_b2 = 0.05f,
                       .inv_bc2 = 1.37f,
                       .eps = 1e-8f,
                       .step = -3e-4f,
                       .decay = 3e-5f,
                       .decay_on = variant != 1};
        float rm[N], rv[N], rp[N];
        for (int i = 0; i < N; i++) { /* the reference, one rounding per operation */
            volatile float a = g[i] * w.clip, t1 = m[i] * w.b1, t2 = a * w.one_b1;
            volatile float m2 = t1 + t2, aa = a * a, t3 = v[i] * w.b2, t4 = aa * w.one_b2;
            volatile float v2 = t3 + t4, sq = sqrtf(v2), h = sq * w.inv_bc2, den = h + w.eps;
            volatile float q = m2 / den, u = q * w.step, pd = p[i] * w.decay;
            volatile float p1 = w.decay_on ? p[i] - pd : p[i];
            rm[i] = m2, rv[i] = v2, rp[i] = p1 - u;
        }
        s->adamw(&w, 3, N - 3 - 2); /* elements [3, N - 2) */
        s->adamw(&w, 0, 3);
        s->adamw(&w, N - 2, 2);
        uint16_t rb[N]; /* the copies: the new parameters' rounding (check_bf16 checks it) */
        s->to_bf16(rb, rp, N);
        int bad = 0;
        for (int i = 0; i < N; i++) {
            bad += memcmp(&w.m_out[i], &rm[i], 4) != 0 || memcmp(&w.v_out[i], &rv[i], 4) != 0 ||
                   memcmp(&w.p_out[i], &rp[i], 4) != 0;
            if (w.pb)
                bad += pb[i] != rb[i];
        }
        if (bad) {
            fprintf(stderr, "%s: adamw, variant %d: %d values differ\n", s->isa, variant, bad);
            test_failures++;
        }
    }
}

/* dot: the exact products summed in sum's order (element i in lane i % 16, the lanes added in
 * order), at lengths no width divides. */
static void check_dot(const cpu_simd *s)
{
    enum { N = 203 };
    float x[N], y[N];
    for (int i = 0; i < N; i++)
        x[i] = (float)sin(0.91 * i) * 1e3f, y[i] = (float)cos(0.37 * i + 0.1) * 1e-3f;
    for (int n = 0; n <= N; n += 29) {
        double lane[16] = {0}, want = 0;
        for (int i = 0; i < n; i++)
            lane[i % 16] += (double)x[i] * (double)y[i];
        for (int k = 0; k < 16; k++)
            want += lane[k];
        double got = s->dot(x, y, n);
        if (memcmp(&got, &want, sizeof got) != 0) {
            fprintf(stderr, "%s: dot over %d: %.17g, want %.17g\n", s->isa, n, got, want);
            test_failures++;
        }
    }
}

int main(void)
{
    __builtin_cpu_init();
    int avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                 __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    const cpu_simd *tables[3];
    int n = 0;
    if (avx512)
        tables[n++] = &cpu_simd_avx512;
    if (avx2)
        tables[n++] = &cpu_simd_avx2;
    tables[n++] = &cpu_simd_generic;
    for (int i = 0; i < n; i++) {
        check_exp_tanh(tables[i]);
        check_activations(tables[i]);
        check_rows(tables[i]);
        check_arith(tables[i]);
        check_bf16(tables[i]);
        check_mask_segment(tables[i]);
        check_adamw(tables[i]);
        check_dot(tables[i]);
        check_rms(tables[i]);
    }
    const char *forced = getenv("BORA_CPU_ISA");
    if (forced && *forced) /* BORA_CPU_ISA names the one chosen */
        CHECK(strcmp(cpu_simd_get()->isa, forced) == 0);
    else /* the best one is chosen */
        CHECK(strcmp(cpu_simd_get()->isa, tables[0]->isa) == 0);
    if (avx512 && avx2)
        check_same_bits(&cpu_simd_avx512, &cpu_simd_avx2);
    else
        printf("skipped: the AVX-512 and AVX2 builds are compared only on a CPU with both\n");
    return test_summary("test_simd");
}
