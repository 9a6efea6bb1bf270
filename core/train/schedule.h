/* core/train/schedule.h — the learning rate at each step: linear warmup from zero, then a
 * constant, cosine, linear, inverse-square-root or warmup-stable-decay shape down to
 * min_lr_ratio of the peak. */
#ifndef BORA_CORE_SCHEDULE_H
#define BORA_CORE_SCHEDULE_H

#include <bora/plugin.h>
#include <stdint.h>

enum { BORA_LR_CONSTANT, BORA_LR_COSINE, BORA_LR_LINEAR, BORA_LR_INV_SQRT, BORA_LR_WSD };

typedef struct bora_schedule {
    int kind;
    double peak, min_lr_ratio;
    int64_t total;  /* num_train_steps */
    int64_t warmup; /* steps */
    int64_t decay;  /* steps of the final decay (the stable phase is what lies between) */
} bora_schedule;

/* From the optimizer section's keys; warmup and decay below 1 are fractions of total steps. A
 * bad value is an error naming the key. */
bora_status bora_schedule_init(bora_schedule *s, const char *name, double peak, double warmup,
                               double decay, int decay_given, double min_lr_ratio, int64_t total);
/* The rate for optimizer step `step` (1-based: the first update is step 1). */
double bora_schedule_lr(const bora_schedule *s, int64_t step);

#endif
