/* core/train/apply.h — the apply graph: global gradient norm and clipping, the optimizer's
 * update of every parameter, and the gradients zeroed for the next step; run once per step. */
#ifndef BORA_CORE_APPLY_H
#define BORA_CORE_APPLY_H

#include "../graph/graph.h"
#include "metrics.h"

#include <bora/optimizer.h>

/* One optimizer instance of the apply graph: the base optimizer, or a group's (optimizer.groups,
 * docs/optimizers.md). */
typedef struct bora_apply_group {
    const bora_optimizer_ops *ops;
    bora_optimizer *opt;
    double lr_scale; /* its learning rate over the schedule's (1 for the base) */
} bora_apply_group;

typedef struct bora_apply {
    g_graph *g;
    gval *grad_norm;               /* 0-d f64: the global norm before clipping */
    const bora_optimizer_ops *ops; /* group 0's */
    bora_optimizer *opt;
    size_t n_groups;
    bora_apply_group *groups;
    size_t *n_scalars;         /* per group */
    char ***scalar_names;      /* per group: its inputs' names ("lr"; a group k >= 1: "g1/lr") */
    const char *const **slots; /* per parameter: its group's slot names (for checkpoints) */
    tr_metrics metrics;        /* what the optimizers reported (bora_optimizer_ops.metrics) */
    tr_reporter reporter;
    /* Sharded (trainer.shard_optimizer, core/train/zero.c): the graph updates the parameters
     * with owned[i] set only, and takes the whole model's squared gradient norm as its input
     * "grad_norm_sq"; norm_g gives the owned trainable parameters' squared norms, n_owned of
     * them in parameter order, and the metrics keep every report apart (tr_metrics.each). */
    const unsigned char *owned;
    g_graph *norm_g;
    size_t n_owned;
} bora_apply;

/* Build the apply graph over every parameter of the store (before it is materialized; sets the
 * store's number of state slots, the most any group has). Parameter i is updated by group
 * group_of[i] (NULL: every parameter by group 0), with the parameters of one group in one run of
 * updates. max_grad_norm <= 0 turns clipping off. */
bora_status bora_apply_build_groups(g_store *store, size_t n_groups, const bora_apply_group *groups,
                                    const size_t *group_of, double max_grad_norm, bora_apply *out);
/* The same over the parameters with owned[i] set (owned outlives the graph). */
bora_status bora_apply_build_sharded(g_store *store, size_t n_groups,
                                     const bora_apply_group *groups, const size_t *group_of,
                                     double max_grad_norm, const unsigned char *owned,
                                     bora_apply *out);
/* One optimizer for every parameter. */
bora_status bora_apply_build(g_store *store, const bora_optimizer_ops *ops, bora_optimizer *opt,
                             double max_grad_norm, bora_apply *out);
/* One optimizer step (1-based) at learning rate lr (each group at lr times its lr_scale);
 * *grad_norm gets the norm before clipping, metrics (room for TR_MAX_METRICS) the optimizers'
 * metrics and *n_metrics their count. */
bora_status bora_apply_step(bora_apply *a, int64_t step, double lr, double *grad_norm,
                            bora_metric *metrics, size_t *n_metrics);
/* Sharded: the owned parameters' squared gradient norms (n_owned values, f64, each as one
 * process's apply graph sums it), then the step given the whole model's sum of them, norm_sq:
 * out gets the norm (out[0]) and every metric report (metrics.n_reports). */
bora_status bora_apply_norm_parts(bora_apply *a, double *sq);
bora_status bora_apply_step_sharded(bora_apply *a, int64_t step, double lr, double norm_sq,
                                    double *out);
void bora_apply_free(bora_apply *a);

#endif
