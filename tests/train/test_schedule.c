/* tests/train/test_schedule.c — every learning-rate schedule at chosen steps, against values
 * worked out by hand from the formulas in core/train/schedule.c (peak 1e-3, min_lr_ratio 0.1,
 * 100 steps, 10 of warmup unless stated), and the refusals. */
#include "../test.h"
#include "train/schedule.h"
#include "util/log.h"

#include <math.h>

static void at(const char *name, double warmup, double decay, int decay_given, const int64_t *steps,
               const double *want, int n)
{
    bora_schedule s;
    if (bora_schedule_init(&s, name, 1e-3, warmup, decay, decay_given, 0.1, 100) != BORA_OK) {
        fprintf(stderr, "%s: %s\n", name, bora_error_get());
        test_failures++;
        return;
    }
    for (int i = 0; i < n; i++) {
        double got = bora_schedule_lr(&s, steps[i]);
        if (fabs(got - want[i]) > 1e-15) {
            fprintf(stderr, "%s step %lld: lr %.17g, want %.17g\n", name, (long long)steps[i], got,
                    want[i]);
            test_failures++;
        }
    }
}

static void refused(const char *name, double warmup, double decay, int decay_given,
                    const char *message)
{
    bora_schedule s;
    CHECK(bora_schedule_init(&s, name, 1e-3, warmup, decay, decay_given, 0.1, 100) ==
          BORA_ERR_CONFIG);
    CHECK_CONTAINS(bora_error_get(), message);
}

int main(void)
{
    const double pi = 3.14159265358979323846;
    int64_t s1[] = {1, 5, 10, 11, 50, 100};
    double constant[] = {1e-4, 5e-4, 1e-3, 1e-3, 1e-3, 1e-3};
    at("constant", 10, 0, 0, s1, constant, 6);

    /* cosine and linear decay over the 90 steps after warmup */
    int64_t s2[] = {5, 10, 11, 55, 100};
    double cosine[] = {5e-4, 1e-3, 1e-4 + 9e-4 * 0.5 * (1 + cos(pi / 90)), 5.5e-4, 1e-4};
    at("cosine", 10, 0, 0, s2, cosine, 5);
    double linear[] = {5e-4, 1e-3, 1e-3 - 9e-4 / 90, 5.5e-4, 1e-4};
    at("linear", 10, 0, 0, s2, linear, 5);

    /* a fraction of the run: warmup 0.05 of 100 is 5 steps */
    int64_t s3[] = {1, 5, 6};
    double frac[] = {2e-4, 1e-3, 1e-4 + 9e-4 * 0.5 * (1 + cos(pi / 95))};
    at("cosine", 0.05, 0, 0, s3, frac, 3);

    /* decay 0.5: stable to step 50, then cosine over 50 steps */
    int64_t s4[] = {30, 50, 75, 100};
    double cos_decay[] = {1e-3, 1e-3, 5.5e-4, 1e-4};
    at("cosine", 10, 0.5, 1, s4, cos_decay, 4);

    /* warmup-stable-decay: the last fifth decays linearly by default, or as decay says */
    int64_t s5[] = {10, 80, 90, 100};
    double wsd[] = {1e-3, 1e-3, 5.5e-4, 1e-4};
    at("wsd", 10, 0, 0, s5, wsd, 4);
    int64_t s6[] = {60, 80, 100};
    double wsd40[] = {1e-3, 5.5e-4, 1e-4};
    at("wsd", 10, 40, 1, s6, wsd40, 3);

    /* inverse square root from the end of warmup, floored at min_lr_ratio */
    int64_t s7[] = {10, 20, 100};
    double inv[] = {1e-3, 1e-3 * sqrt(0.5), 1e-3 * sqrt(0.1)};
    at("inv_sqrt", 10, 0, 0, s7, inv, 3);
    bora_schedule s;
    CHECK(bora_schedule_init(&s, "inv_sqrt", 1e-3, 1, 0, 0, 0.5, 100) == BORA_OK);
    CHECK(fabs(bora_schedule_lr(&s, 100) - 5e-4) < 1e-18); /* sqrt(1/100) < 0.5: the floor */

    /* no warmup: the first step is at the peak */
    int64_t s8[] = {1};
    double nowarm[] = {1e-3};
    at("constant", 0, 0, 0, s8, nowarm, 1);

    refused("cosin", 10, 0, 0,
            "optimizer.lr_schedule: unknown schedule 'cosin' (constant, "
            "cosine, linear, inv_sqrt or wsd)");
    refused("cosine", 200, 0, 0, "optimizer.warmup: 200 steps of warmup exceed num_train_steps");
    refused("cosine", 10, 95, 1, "optimizer.decay: 95 steps of decay and 10 of warmup exceed");
    refused("cosine", -1, 0, 0, "optimizer.warmup: -1 is neither a fraction nor a step count");
    CHECK(bora_schedule_init(&s, "cosine", 1e-3, 10, 0, 0, 1.5, 100) == BORA_ERR_CONFIG);
    CHECK_CONTAINS(bora_error_get(), "optimizer.min_lr_ratio: 1.5 is not in [0, 1]");
    return test_summary("test_schedule");
}
