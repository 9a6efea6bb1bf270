/* core/train/apply.h — the apply graph: global gradient norm and clipping, the optimizer's
 * update of every parameter, and the gradients zeroed for the next step; run once per step. */
#ifndef BORA_CORE_APPLY_H
#define BORA_CORE_APPLY_H

#include "../graph/graph.h"
#include "metrics.h"

#include <bora/optimizer.h>

typedef struct bora_apply {
    g_graph *g;
    gval *grad_norm; /* 0-d f64: the global norm before clipping */
    const bora_optimizer_ops *ops;
    bora_optimizer *opt;
    size_t n_scalars;
    tr_metrics metrics; /* what the optimizer reported (bora_optimizer_ops.metrics) */
    tr_reporter reporter;
} bora_apply;

/* Build the apply graph over every parameter of the store (before it is materialized; sets the
 * store's number of state slots). max_grad_norm <= 0 turns clipping off. */
bora_status bora_apply_build(g_store *store, const bora_optimizer_ops *ops, bora_optimizer *opt,
                             double max_grad_norm, bora_apply *out);
/* One optimizer step (1-based) at learning rate lr; *grad_norm gets the norm before clipping,
 * metrics (room for TR_MAX_METRICS) the optimizer's metrics and *n_metrics their count. */
bora_status bora_apply_step(bora_apply *a, int64_t step, double lr, double *grad_norm,
                            bora_metric *metrics, size_t *n_metrics);
void bora_apply_free(bora_apply *a);

#endif
