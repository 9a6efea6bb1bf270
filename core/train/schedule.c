/* core/train/schedule.c — learning-rate schedules.
 *
 * Step s (1-based) of T: during warmup (s <= W) the rate is peak * s / W, so the first update
 * is already nonzero and step W reaches the peak. After it the rate holds at the peak until the
 * decay phase, the last D steps (D = T - W unless decay is given), where with t = s - (T - D)
 * running from 1 to D and f = t / D:
 *   constant  peak
 *   cosine    min + (peak - min) * (1 + cos(pi f)) / 2
 *   linear    peak - (peak - min) * f
 *   wsd       linear over the last D steps (D defaults to a fifth of the run)
 *   inv_sqrt  max(min, peak * sqrt(V / (V + s - W))) with V = max(W, 1) (decay does not
 *             apply)
 * with min = min_lr_ratio * peak. */
#include "schedule.h"

#include "../util/log.h"

#include <math.h>
#include <string.h>

static int64_t steps_of(double v, int64_t total)
{
    if (v > 0 && v < 1)
        return (int64_t)llround(v * (double)total);
    return (int64_t)llround(v);
}

bora_status bora_schedule_init(bora_schedule *s, const char *name, double peak, double warmup,
                               double decay, int decay_given, double min_lr_ratio, int64_t total)
{
    static const char *const names[] = {"constant", "cosine", "linear", "inv_sqrt", "wsd"};
    memset(s, 0, sizeof *s);
    s->kind = -1;
    for (int i = 0; i < 5; i++)
        if (name && !strcmp(name, names[i]))
            s->kind = i;
    if (s->kind < 0)
        return bora_error_set(BORA_ERR_CONFIG,
                              "optimizer.lr_schedule: unknown schedule '%s' (constant, cosine, "
                              "linear, inv_sqrt or wsd)",
                              name ? name : "");
    if (!(peak >= 0) || !isfinite(peak))
        return bora_error_set(BORA_ERR_CONFIG,
                              "optimizer.learning_rate: %g is not a non-negative number", peak);
    if (!(min_lr_ratio >= 0 && min_lr_ratio <= 1))
        return bora_error_set(BORA_ERR_CONFIG, "optimizer.min_lr_ratio: %g is not in [0, 1]",
                              min_lr_ratio);
    if (!(warmup >= 0) || !isfinite(warmup))
        return bora_error_set(
            BORA_ERR_CONFIG, "optimizer.warmup: %g is neither a fraction nor a step count", warmup);
    if (decay_given && (!(decay >= 0) || !isfinite(decay)))
        return bora_error_set(BORA_ERR_CONFIG,
                              "optimizer.decay: %g is neither a fraction nor a step count", decay);
    s->peak = peak;
    s->min_lr_ratio = min_lr_ratio;
    s->total = total;
    s->warmup = steps_of(warmup, total);
    if (s->warmup > total)
        return bora_error_set(BORA_ERR_CONFIG,
                              "optimizer.warmup: %lld steps of warmup exceed num_train_steps "
                              "(%lld)",
                              (long long)s->warmup, (long long)total);
    if (decay_given)
        s->decay = steps_of(decay, total);
    else if (s->kind == BORA_LR_WSD)
        s->decay = steps_of(0.2, total);
    else
        s->decay = total - s->warmup;
    if (s->warmup + s->decay > total)
        return bora_error_set(BORA_ERR_CONFIG,
                              "optimizer.decay: %lld steps of decay and %lld of warmup exceed "
                              "num_train_steps (%lld)",
                              (long long)s->decay, (long long)s->warmup, (long long)total);
    return BORA_OK;
}

double bora_schedule_lr(const bora_schedule *s, int64_t step)
{
    double peak = s->peak, min = s->min_lr_ratio * peak;
    if (step <= s->warmup)
        return peak * (double)step / (double)s->warmup;
    if (s->kind == BORA_LR_CONSTANT)
        return peak;
    if (s->kind == BORA_LR_INV_SQRT) {
        double w = s->warmup > 0 ? (double)s->warmup : 1.0;
        double lr = peak * sqrt(w / (w + (double)(step - s->warmup)));
        return lr > min ? lr : min;
    }
    int64_t start = s->total - s->decay; /* the last stable step */
    if (step <= start || s->decay <= 0)
        return peak;
    double f = (double)(step - start) / (double)s->decay;
    if (f > 1)
        f = 1;
    if (s->kind == BORA_LR_COSINE)
        return min + (peak - min) * 0.5 * (1.0 + cos(M_PI * f));
    return peak - (peak - min) * f; /* linear, wsd */
}
