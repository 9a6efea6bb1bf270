/* core/train/model_metrics.h — a model's own metrics (bora_graph_api.metric, ABI 1.14): the
 * values a train graph declared, read back with its loss after every micro-batch, averaged over
 * the step's micro-batches in their order (in double, so the figures do not depend on threads)
 * and logged as train/<name> (a vector's elements as train/<name>/<i>). */
#ifndef BORA_CORE_TRAIN_MODEL_METRICS_H
#define BORA_CORE_TRAIN_MODEL_METRICS_H

#include "../graph/graph.h"

#include <bora/tracker.h>

typedef struct tr_model_metrics {
    size_t n;         /* values: every metric's elements, in the order they were declared */
    char **names;     /* train/<name> or train/<name>/<i>, per value */
    int *scalar;      /* whether the value is a 0-d metric's (printed on the step line) */
    size_t n_scalars; /* how many are */
    double *read;     /* one micro-batch's output: the loss, then the values */
    double *sums;     /* the step's sums so far */
    int64_t parts;    /* micro-batches summed this step */
    bora_metric *out; /* the step's means, for the trackers */
} tr_model_metrics;

/* After g's autodiff from loss (0-d): when the model declared metrics, g's output becomes one
 * 1-d f64 vector, the loss widened (exactly) followed by each metric's elements, and m is set
 * up to read it; otherwise the output stays loss and m->n is 0. */
bora_status tr_model_metrics_build(g_graph *g, gval *loss, tr_model_metrics *m);
/* Start a step: no micro-batch summed yet. */
void tr_model_metrics_begin(tr_model_metrics *m);
/* Read g's output after a micro-batch: *loss gets the micro-batch's loss (as the float the
 * graph computed), and the values are added to the step's sums. */
bora_status tr_model_metrics_read(g_graph *g, tr_model_metrics *m, double *loss);
/* Add one micro-batch's values (m->n of them, as m->read holds them after the loss) to the
 * step's sums: a data parallel step adds every rank's micro-batches in their order. */
void tr_model_metrics_add(tr_model_metrics *m, const double *values);
/* The step's means (sum / micro-batches), named, in m->out; how many there are. */
size_t tr_model_metrics_values(tr_model_metrics *m);
void tr_model_metrics_free(tr_model_metrics *m);

#endif
