/* core/train/hessian.h — the second-order estimates an optimizer asks for
 * (bora_optimizer_ops.hessian): on an estimate step, after the step's micro-batches and before
 * the apply graph, the estimate graph runs over the step's first micro-batches, adding into the
 * store's hvp block, and the fold graph turns that into each parameter's estimate and hands it to
 * the optimizer's build_hessian_update (docs/optimizers.md, "Second-order estimates"):
 *   Hutchinson: the estimate graph is a Hessian graph (g_hvp) along z, standard normal from
 *     Philox keyed by (seed, parameter name, step, element), written into the tangent block by
 *     the host; the estimate is z ⊙ (H z);
 *   Gauss-Newton-Bartlett: the estimate graph is a train graph whose cross-entropy reads labels
 *     drawn from the model's own softmax (BORA_OP_SAMPLE, keyed by (seed, step, row)) and whose
 *     gradient goes into the hvp block (grads_to_hvp); the estimate is B · ĝ ⊙ ĝ, B the count of
 *     loss tokens it read. */
#ifndef BORA_CORE_TRAIN_HESSIAN_H
#define BORA_CORE_TRAIN_HESSIAN_H

#include "../graph/graph.h"
#include "apply.h"
#include "metrics.h"

#include <bora/model.h>
#include <bora/optimizer.h>

typedef struct bora_hessian {
    bora_hessian_spec spec;
    g_store *store;
    g_graph *est, *fold;
    const bora_apply *apply; /* the optimizer groups, their step inputs' names */
    unsigned char *wants;    /* per group: it asked for the estimate */
    tr_metrics metrics;
    tr_reporter reporter;
    int64_t seq_len;
    float *z;      /* one parameter's tangent, on the host */
    size_t z_cap;  /* its elements */
    double tokens; /* loss tokens the last estimate read */
} bora_hessian;

/* What the apply graph's optimizers ask for: 1 with *spec filled and wants[k] set for each group
 * that asked (room for a->n_groups), 0 when none does, -1 (error set) for a wish that cannot be
 * honoured (groups asking for different estimates among them). */
int bora_hessian_wanted(const bora_apply *a, bora_hessian_spec *spec, unsigned char *wants);
/* Build the estimate and fold graphs (before the store is materialized; asks the store for its
 * tangent and hvp blocks). micro: sequences per micro-batch; group_of: each parameter's group
 * (NULL: group 0); wants as bora_hessian_wanted filled it (copied). */
bora_status bora_hessian_build(bora_hessian *h, g_store *store, const bora_model_ops *mops,
                               bora_model *model, int64_t micro, const bora_apply *a,
                               const size_t *group_of, const unsigned char *wants,
                               const bora_hessian_spec *spec);
/* Whether step (1-based) is an estimate step. */
int bora_hessian_due(const bora_hessian *h, int64_t step);
/* The estimate at step: over the first micro-batches of the step's rows (n_micro of micro rows of
 * seq_len tokens each), then folded into the optimizers' state at learning rate lr (each group
 * at its share). The metrics the fold reported go to out (at most TR_MAX_METRICS + 1), their
 * count to *n_out. */
bora_status bora_hessian_step(bora_hessian *h, int64_t step, double lr, const int32_t *ids,
                              const int32_t *targets, const int32_t *segs, int64_t micro,
                              int64_t n_micro, bora_metric *out, size_t *n_out);
void bora_hessian_free(bora_hessian *h);

#endif
