/* core/graph/rope.c — rotary embedding tables on the host: the inverse frequencies and attention
 * factor of each rope_type as transformers' modeling_rope_utils computes them (there in f32,
 * here in double), and the cos/sin tables the graph reads, rounded to f32 once at the end. */
#include "rope.h"

#include "../util/log.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Positions are multiplied in double; beyond 2^53 they would no longer be exact. */
#define MAX_POSITION ((int64_t)1 << 53)
/* A rotary width no head comes near; it keeps dims/2 * positions products far from overflow. */
#define MAX_ROTARY_DIMS ((int64_t)1 << 20)

static const char *const kind_names[] = {"default", "linear", "dynamic", "llama3", "yarn"};
#define N_KINDS ((int)(sizeof kind_names / sizeof *kind_names))

const char *bora_rope_kind_name(bora_rope_kind kind)
{
    return (int)kind >= 0 && (int)kind < N_KINDS ? kind_names[kind] : "?";
}

int bora_rope_kind_parse(const char *name)
{
    for (int k = 0; name && k < N_KINDS; k++)
        if (!strcmp(name, kind_names[k]))
            return k;
    return -1;
}

static bora_status bad(const char *fmt, ...) BORA_PRINTF(1, 2);
static bora_status bad(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bora_status st = bora_error_setv(BORA_ERR_CONFIG, "rope spec", fmt, ap);
    va_end(ap);
    return st;
}

/* transformers' get_mscale: YaRN's attention temperature for a scale factor. */
static double yarn_mscale(double scale, double mscale)
{
    return scale <= 1.0 ? 1.0 : 0.1 * mscale * log(scale) + 1.0;
}

static double yarn_attention_factor(const bora_rope_spec *s)
{
    if (s->attention_factor != 0.0)
        return s->attention_factor;
    if (s->mscale != 0.0 && s->mscale_all_dim != 0.0)
        return yarn_mscale(s->factor, s->mscale) / yarn_mscale(s->factor, s->mscale_all_dim);
    return yarn_mscale(s->factor, 1.0);
}

static int positive(double x)
{
    return isfinite(x) && x > 0.0;
}

bora_status bora_rope_check(const bora_rope_spec *s)
{
    if (!s)
        return bad("no rope spec");
    if ((int)s->kind < 0 || (int)s->kind >= N_KINDS)
        return bad("kind (rope_scaling.rope_type) %d is unknown: use default, linear, dynamic, "
                   "llama3 or yarn",
                   (int)s->kind);
    const char *kind = kind_names[s->kind];
    if (!positive(s->theta))
        return bad("theta (rope_theta) is %g: it must be a positive number such as 10000",
                   s->theta);
    if (s->rotary_dims < 2 || s->rotary_dims % 2 || s->rotary_dims > MAX_ROTARY_DIMS)
        return bad("rotary_dims (head_dim * partial_rotary_factor) is %lld: it must be even and "
                   "between 2 and %lld; check head_dim and partial_rotary_factor",
                   (long long)s->rotary_dims, (long long)MAX_ROTARY_DIMS);
    if (s->kind == BORA_ROPE_DEFAULT)
        return BORA_OK;
    if (!positive(s->factor))
        return bad("factor (rope_scaling.factor) is %g for rope_type %s: it must be a positive "
                   "number (the context extension, e.g. 8)",
                   s->factor, kind);
    if (s->kind == BORA_ROPE_LINEAR)
        return BORA_OK;
    if (s->original_max_position_embeddings <= 0 ||
        s->original_max_position_embeddings > MAX_POSITION)
        return bad("original_max_position_embeddings (%s) is %lld for rope_type %s: it must be the "
                   "positive context length the model was trained at",
                   s->kind == BORA_ROPE_DYNAMIC ? "max_position_embeddings"
                                                : "rope_scaling.original_max_position_embeddings",
                   (long long)s->original_max_position_embeddings, kind);
    switch (s->kind) {
    case BORA_ROPE_DYNAMIC:
        /* The base's exponent is dims / (dims - 2). */
        if (s->rotary_dims < 4)
            return bad("rotary_dims (head_dim * partial_rotary_factor) is %lld: rope_type dynamic "
                       "needs at least 4",
                       (long long)s->rotary_dims);
        if (s->seq_len < 0 || s->seq_len > MAX_POSITION)
            return bad("seq_len (the current sequence length) is %lld for rope_type dynamic: it "
                       "must be 0 (none yet) or a length",
                       (long long)s->seq_len);
        return BORA_OK;
    case BORA_ROPE_LLAMA3:
        if (!positive(s->low_freq_factor))
            return bad("low_freq_factor (rope_scaling.low_freq_factor) is %g: it must be a "
                       "positive number (Llama 3.1 uses 1)",
                       s->low_freq_factor);
        if (!positive(s->high_freq_factor))
            return bad("high_freq_factor (rope_scaling.high_freq_factor) is %g: it must be a "
                       "positive number (Llama 3.1 uses 4)",
                       s->high_freq_factor);
        if (s->low_freq_factor >= s->high_freq_factor)
            return bad("low_freq_factor (rope_scaling.low_freq_factor, %g) must be less than "
                       "high_freq_factor (rope_scaling.high_freq_factor, %g)",
                       s->low_freq_factor, s->high_freq_factor);
        return BORA_OK;
    case BORA_ROPE_YARN: {
        /* find_correction_dim divides by log(theta) and takes log(original / beta). */
        if (s->theta == 1.0)
            return bad("theta (rope_theta) is 1: rope_type yarn needs a base other than 1");
        if (!isfinite(s->beta_fast) || s->beta_fast < 0)
            return bad("beta_fast (rope_scaling.beta_fast) is %g: it must be positive (or unset "
                       "for 32)",
                       s->beta_fast);
        if (!isfinite(s->beta_slow) || s->beta_slow < 0)
            return bad("beta_slow (rope_scaling.beta_slow) is %g: it must be positive (or unset "
                       "for 1)",
                       s->beta_slow);
        if (!isfinite(s->attention_factor) || s->attention_factor < 0)
            return bad("attention_factor (rope_scaling.attention_factor) is %g: it must be "
                       "positive (or unset to derive it from factor and mscale)",
                       s->attention_factor);
        if (!isfinite(s->mscale))
            return bad("mscale (rope_scaling.mscale) is %g: it must be a number", s->mscale);
        if (!isfinite(s->mscale_all_dim))
            return bad("mscale_all_dim (rope_scaling.mscale_all_dim) is %g: it must be a number",
                       s->mscale_all_dim);
        double af = yarn_attention_factor(s);
        if (!positive(af))
            return bad(
                "the attention factor from factor %g, mscale (rope_scaling.mscale) %g and "
                "mscale_all_dim (rope_scaling.mscale_all_dim) %g is %g: it must be positive; "
                "check those keys or set attention_factor",
                s->factor, s->mscale, s->mscale_all_dim, af);
        return BORA_OK;
    }
    default: return BORA_OK;
    }
}

/* _compute_default_rope_parameters: inv_freq[i] = 1 / base^(2i / dims). */
static void default_inv_freq(double base, int64_t dims, double *inv_freq)
{
    for (int64_t i = 0; i < dims / 2; i++)
        inv_freq[i] = 1.0 / pow(base, (double)(2 * i) / (double)dims);
}

/* _compute_llama3_parameters: wavelengths longer than original / low_freq_factor are
 * interpolated (divided by factor), shorter than original / high_freq_factor kept, and those
 * between blended by how many turns they make over the original context. */
static void llama3_inv_freq(const bora_rope_spec *s, double *inv_freq)
{
    double original = (double)s->original_max_position_embeddings;
    double low_freq_wavelen = original / s->low_freq_factor;
    double high_freq_wavelen = original / s->high_freq_factor;
    for (int64_t i = 0; i < s->rotary_dims / 2; i++) {
        double f = inv_freq[i];
        double wavelen = 2.0 * M_PI / f;
        if (wavelen > low_freq_wavelen) {
            inv_freq[i] = f / s->factor;
        } else if (wavelen >= high_freq_wavelen) {
            double smooth = (original / wavelen - s->low_freq_factor) /
                            (s->high_freq_factor - s->low_freq_factor);
            inv_freq[i] = (1.0 - smooth) * f / s->factor + smooth * f;
        }
    }
}

/* find_correction_dim: the dim whose wavelength turns num_rotations times over the original
 * context. */
static double yarn_correction_dim(double num_rotations, const bora_rope_spec *s)
{
    return (double)s->rotary_dims *
           log((double)s->original_max_position_embeddings / (num_rotations * 2.0 * M_PI)) /
           (2.0 * log(s->theta));
}

/* _compute_yarn_parameters: below the correction range extrapolate (keep the frequency), above
 * it interpolate (divide by factor), and ramp linearly between. */
static void yarn_inv_freq(const bora_rope_spec *s, double *inv_freq)
{
    int64_t dims = s->rotary_dims;
    double beta_fast = s->beta_fast != 0.0 ? s->beta_fast : 32.0;
    double beta_slow = s->beta_slow != 0.0 ? s->beta_slow : 1.0;
    double low = yarn_correction_dim(beta_fast, s);
    double high = yarn_correction_dim(beta_slow, s);
    if (s->truncate) {
        low = floor(low);
        high = ceil(high);
    }
    low = fmax(low, 0.0);
    high = fmin(high, (double)(dims - 1));
    if (low == high)
        high += 0.001; /* transformers' guard against a zero-width ramp */
    for (int64_t i = 0; i < dims / 2; i++) {
        double pos_freq = pow(s->theta, (double)(2 * i) / (double)dims);
        double extrapolation = 1.0 / pos_freq;
        double interpolation = 1.0 / (s->factor * pos_freq);
        double ramp = fmin(fmax(((double)i - low) / (high - low), 0.0), 1.0);
        double extrapolation_factor = 1.0 - ramp;
        inv_freq[i] =
            interpolation * (1.0 - extrapolation_factor) + extrapolation * extrapolation_factor;
    }
}

bora_status bora_rope_inv_freq(const bora_rope_spec *s, double *inv_freq, double *attention_factor)
{
    bora_status st = bora_rope_check(s);
    if (st)
        return st;
    double af = s->kind == BORA_ROPE_YARN ? yarn_attention_factor(s) : 1.0;
    if (attention_factor)
        *attention_factor = af;
    if (!inv_freq)
        return BORA_OK;
    int64_t dims = s->rotary_dims;
    switch (s->kind) {
    case BORA_ROPE_DEFAULT: default_inv_freq(s->theta, dims, inv_freq); break;
    case BORA_ROPE_LINEAR:
        default_inv_freq(s->theta, dims, inv_freq);
        for (int64_t i = 0; i < dims / 2; i++)
            inv_freq[i] /= s->factor;
        break;
    case BORA_ROPE_DYNAMIC: {
        /* _compute_dynamic_ntk_parameters: the sequence length counts only once it exceeds the
         * original context; then the base grows so the lowest frequency stretches to it. */
        double original = (double)s->original_max_position_embeddings;
        double seq =
            s->seq_len > s->original_max_position_embeddings ? (double)s->seq_len : original;
        double base = s->theta * pow(s->factor * seq / original - (s->factor - 1.0),
                                     (double)dims / (double)(dims - 2));
        default_inv_freq(base, dims, inv_freq);
        break;
    }
    case BORA_ROPE_LLAMA3:
        default_inv_freq(s->theta, dims, inv_freq);
        llama3_inv_freq(s, inv_freq);
        break;
    case BORA_ROPE_YARN: yarn_inv_freq(s, inv_freq); break;
    }
    return BORA_OK;
}

bora_status bora_rope_table_elems(const bora_rope_spec *s, int64_t positions,
                                  bora_rope_layout layout, size_t *elems)
{
    bora_status st = bora_rope_check(s);
    if (st)
        return st;
    if (layout != BORA_ROPE_COMPACT && layout != BORA_ROPE_ROTATE_HALF &&
        layout != BORA_ROPE_INTERLEAVED)
        return bad("layout %d is unknown: use compact, rotate-half or interleaved", (int)layout);
    if (positions < 0 || positions > MAX_POSITION)
        return bad("a table of %lld positions: the count must be between 0 and 2^53",
                   (long long)positions);
    uint64_t width = (uint64_t)(layout == BORA_ROPE_COMPACT ? s->rotary_dims / 2 : s->rotary_dims);
    /* Both operands are bounded, but the product may still pass what memory can hold. */
    if ((uint64_t)positions > (uint64_t)(SIZE_MAX / sizeof(double)) / width)
        return bad("a table of %lld positions x %llu values does not fit in memory: use fewer "
                   "positions (max_position_embeddings) or fewer rotary dims",
                   (long long)positions, (unsigned long long)width);
    *elems = (size_t)positions * (size_t)width;
    return BORA_OK;
}

static bora_status check_range(const bora_rope_spec *s, int64_t first, int64_t positions,
                               bora_rope_layout layout, size_t *elems)
{
    bora_status st = bora_rope_table_elems(s, positions, layout, elems);
    if (st)
        return st;
    if (first < 0 || first > MAX_POSITION - positions)
        return bad("a table from position %lld for %lld positions: positions must lie in "
                   "0 .. 2^53",
                   (long long)first, (long long)positions);
    return BORA_OK;
}

/* One row of the compact table: attention_factor * cos/sin(p * inv_freq[i]). */
static void table_row(const double *inv_freq, int64_t half, double af, int64_t p, double *c,
                      double *s)
{
    for (int64_t i = 0; i < half; i++) {
        double angle = (double)p * inv_freq[i];
        c[i] = af * cos(angle);
        s[i] = af * sin(angle);
    }
}

bora_status bora_rope_table(const bora_rope_spec *s, int64_t first, int64_t positions,
                            double *cos_out, double *sin_out)
{
    size_t elems;
    bora_status st = check_range(s, first, positions, BORA_ROPE_COMPACT, &elems);
    if (st)
        return st;
    int64_t half = s->rotary_dims / 2;
    double *inv_freq = malloc((size_t)half * sizeof *inv_freq);
    if (!inv_freq)
        return bora_error_set(BORA_ERR_NOMEM, "rope: out of memory for %lld frequencies",
                              (long long)half);
    double af;
    bora_rope_inv_freq(s, inv_freq, &af);
    for (int64_t p = 0; p < positions; p++)
        table_row(inv_freq, half, af, first + p, cos_out + p * half, sin_out + p * half);
    free(inv_freq);
    return BORA_OK;
}

bora_status bora_rope_table_f32(const bora_rope_spec *s, int64_t first, int64_t positions,
                                bora_rope_layout layout, float *cos_out, float *sin_out)
{
    size_t elems;
    bora_status st = check_range(s, first, positions, layout, &elems);
    if (st)
        return st;
    int64_t half = s->rotary_dims / 2, dims = s->rotary_dims;
    /* One row at a time in double, so the f32 table is the only full-size allocation. */
    double *buf = malloc((size_t)half * 3 * sizeof *buf);
    if (!buf)
        return bora_error_set(BORA_ERR_NOMEM, "rope: out of memory for %lld frequencies",
                              (long long)half);
    double *inv_freq = buf, *c = buf + half, *sn = buf + 2 * half;
    double af;
    bora_rope_inv_freq(s, inv_freq, &af);
    for (int64_t p = 0; p < positions; p++) {
        table_row(inv_freq, half, af, first + p, c, sn);
        int64_t width = layout == BORA_ROPE_COMPACT ? half : dims;
        float *co = cos_out + p * width, *so = sin_out + p * width;
        for (int64_t i = 0; i < half; i++) {
            float cf = (float)c[i], sf = (float)sn[i];
            switch (layout) {
            case BORA_ROPE_COMPACT:
                co[i] = cf;
                so[i] = sf;
                break;
            case BORA_ROPE_ROTATE_HALF: /* dim i pairs with dim i + half */
                co[i] = co[i + half] = cf;
                so[i] = so[i + half] = sf;
                break;
            case BORA_ROPE_INTERLEAVED: /* dim 2i pairs with dim 2i + 1 */
                co[2 * i] = co[2 * i + 1] = cf;
                so[2 * i] = so[2 * i + 1] = sf;
                break;
            }
        }
    }
    free(buf);
    return BORA_OK;
}
