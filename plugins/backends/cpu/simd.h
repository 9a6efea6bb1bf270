/* plugins/backends/cpu/simd.h — the table of vectorised f32 loops (simd_t.h), one per
 * instruction set, and the choice among them. All arrays are dense. */
#ifndef BORA_CPU_SIMD_H
#define BORA_CPU_SIMD_H

#include <bora/backend.h>
#include <stdint.h>

/* One span of AdamW's update as the adamw plugin writes it (the fused group kernels_fast.c
 * recognises), each operation rounded alone, in its order:
 *   a = g clip; m' = m b1 + a (1 - b1); v' = v b2 + (a a)(1 - b2);
 *   u = m' / (sqrt(v') inv_bc2 + eps) step; p' = (p - p decay) - u   (decay: p' = p - u without);
 * m', v', p' written (each may be its input), and p' rounded to bf16 where pb is set. */
typedef struct cpu_adamw {
    const float *g, *m, *v, *p;
    float *m_out, *v_out, *p_out;
    uint16_t *pb;
    float clip, b1, one_b1, b2, one_b2, inv_bc2, eps, step, decay;
    int decay_on;
} cpu_adamw;

typedef struct cpu_simd {
    const char *isa; /* "avx512", "avx2" or "generic" */
    /* y = op(x) for NEG, EXP, TANH, SIGMOID, RELU, SILU, GELU_TANH, GELU_EXACT; 0 for any other
     * op (with n = 0, a question that touches no memory) */
    int (*unary)(int op, float *y, const float *x, int64_t n);
    /* y = d op(x)/dx * dy for TANH, SIGMOID, RELU, SILU, GELU_TANH, GELU_EXACT; 0 for any other
     * op (n = 0 asks) */
    int (*act_grad)(int op, float *y, const float *x, const float *dy, int64_t n);
    float (*max)(const float *x, int64_t n);
    double (*sum)(const float *x, int64_t n);
    double (*sum_sq)(const float *x, int64_t n);               /* Σ fl(x·x), in sum's order */
    double (*sum_exp)(const float *x, int64_t n, float shift); /* sum of exp(x - shift) */
    /* y = exp(x - shift) (the bits of SUB then EXP; y may be x), returning sum_exp's sum */
    double (*exp_sum)(float *y, const float *x, int64_t n, float shift);
    /* p = exp(p - lse) and ds = p (ds - d), each operation rounded alone (SUB, EXP; SUB, MUL):
     * one pass over a row of attention's backward */
    void (*att_grad_row)(float *p, float *ds, int64_t n, float lse, float d);
    /* g = scale (exp(x - shift) zf - [i == target]) */
    void (*xent_grad)(float *g, const float *x, int64_t n, float shift, float scale, float zf,
                      int64_t target);
    /* y = x op z for ADD, SUB, MUL, DIV; y = op(x) for SCALE (x·value), SQRT, RSQRT (z unused);
     * y = value for FILL (x, z unused). Correctly rounded: the same bits as plain C loops. 0 for
     * any other op (y = NULL asks). */
    int (*arith)(int op, float *y, const float *x, const float *z, float value, int64_t n);
    /* y = x op s (s_first: s op x) for ADD, SUB, MUL, DIV with one operand a scalar s: the same
     * bits as arith over a filled array. 0 for any other op. */
    int (*arith_scalar)(int op, float *y, const float *x, float s, int s_first, int64_t n);
    /* acc[c] += Σ_r x[r ld + c] for c < w, rows in order (a column sum, exactly as a plain loop) */
    void (*col_sums)(double *acc, const float *x, int64_t rows, int64_t ld, int64_t w);
    /* LayerNorm of one row: y = (x - mean) rstd gamma + beta, mean and rstd (from the variance
     * plus eps) in double from 16 partial sums; writes the row's mean and rstd. */
    void (*ln_row)(float *y, const float *x, const float *gamma, const float *beta, int64_t n,
                   double eps, float *mean, float *rstd);
    /* Its gradient for one row: dx = rstd (g - Σg/n - xhat Σ(g xhat)/n), g = dy gamma. */
    void (*ln_grad_row)(float *dx, const float *x, const float *dy, const float *gamma, int64_t n,
                        double mean, double rstd);
    /* dgamma += Σ_r dy xhat, dbeta += Σ_r dy over `rows` rows (in order) of w columns; row r
     * of x and dy starts at r ld_x and r ld_dy. */
    void (*ln_grad_cols)(double *dg, double *db, const float *x, const float *dy, const float *mean,
                         const float *rstd, int64_t rows, int64_t ld_x, int64_t ld_dy, int64_t w);
    /* RMSNorm of one row: y = x rstd (w + off) (w NULL: x rstd), rstd = 1 / sqrt(Σx²/n + eps)
     * with Σx² in double from 16 partial sums (each square exact); writes the row's rstd. */
    void (*rms_row)(float *y, const float *x, const float *w, double off, int64_t n, double eps,
                    float *rstd);
    /* Its gradient for one row: dx = rstd (g - x̂ Σ(g x̂)/n), g = dy (w + off), x̂ = x rstd. */
    void (*rms_grad_row)(float *dx, const float *x, const float *dy, const float *w, double off,
                         int64_t n, double rstd);
    /* dw += Σ_r dy x̂ over `rows` rows (in order) of w columns; row r of x and dy starts at
     * r ld_x and r ld_dy. */
    void (*rms_grad_cols)(double *dw, const float *x, const float *dy, const float *rstd,
                          int64_t rows, int64_t ld_x, int64_t ld_dy, int64_t w);
    /* row[s] = -inf where seg[s] != id, s < n: the keys of other segments, hidden */
    void (*mask_segment)(float *row, const int32_t *seg, int32_t id, int64_t n);
    /* bfloat16 conversions: y = x rounded to nearest even (NaN stays NaN), and back (exact). */
    void (*to_bf16)(uint16_t *y, const float *x, int64_t n);
    void (*from_bf16)(float *y, const uint16_t *x, int64_t n);
    /* AdamW's update of elements [i0, i0 + n) of w's arrays */
    void (*adamw)(const cpu_adamw *w, int64_t i0, int64_t n);
    /* Σ x·y, each product exact in double, summed in sum's lanes and order */
    double (*dot)(const float *x, const float *y, int64_t n);
} cpu_simd;

extern const cpu_simd cpu_simd_avx512, cpu_simd_avx2, cpu_simd_generic;

/* The best table this CPU runs, or the one BORA_CPU_ISA names (avx512, avx2, generic) when the
 * CPU has it; chosen once. */
const cpu_simd *cpu_simd_get(void);

#endif
