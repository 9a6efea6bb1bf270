/* core/train/metrics.h — optimizer metrics (bora_optimizer_ops.metrics): what an optimizer's
 * updates report through bora_param_update.report, summed in f64 inside the graph that runs them
 * in its fixed order (the apply graph's: group by group, the decay-masked parameters first), and
 * read back with that graph's output. */
#ifndef BORA_CORE_TRAIN_METRICS_H
#define BORA_CORE_TRAIN_METRICS_H

#include "../graph/graph.h"

#include <bora/optimizer.h>
#include <bora/tracker.h>

#define TR_MAX_METRICS 16

typedef struct tr_metrics {
    struct {
        const char *name;
        int32_t reduce;  /* a bora_metric_reduce */
        gval *sum;       /* 0-d f64 running sum of the reports */
        double elements; /* of the parameters reported (BORA_METRIC_MEAN) */
    } m[TR_MAX_METRICS];
    size_t n;
    /* A sharded apply graph keeps every report apart instead (each 1): the host sums them with
     * the other ranks' in the order one process's graph would (core/train/zero.c). */
    int each;
    struct tr_report {
        gval *value;     /* 0-d f64 */
        int64_t key;     /* its place in one process's order of reports */
        int32_t group;   /* the optimizer group whose metric it is, */
        int32_t metric;  /* and its index in that optimizer's metrics */
        double elements; /* of the parameter reported */
    } * reports;
    size_t n_reports, cap_reports;
} tr_metrics;

/* What bora_param_update.host_private points at while one optimizer's update is built. */
typedef struct tr_reporter {
    tr_metrics *metrics;
    const bora_optimizer_ops *ops;
    int64_t elements; /* of the parameter being updated */
    int64_t key;      /* a sharded graph's: where this update's reports go in one process's order */
    int32_t group;
} tr_reporter;

/* bora_param_update.report. */
bora_status tr_metrics_report(bora_graph *g, const bora_param_update *u, int32_t metric,
                              bora_tensor *value);
void tr_metrics_free(tr_metrics *m);
/* The n 1-d tensors of parts joined along axis (parts is overwritten). */
gval *tr_concat(bora_graph *gp, const char *axis, size_t n, gval **parts);
/* The graph's output: first (0-d f64, or NULL) followed by each metric's sum (with each: every
 * report, in the order made), as one 1-d f64 vector; first itself when nothing was reported. */
gval *tr_metrics_output(g_graph *g, tr_metrics *m, gval *first);
/* The metrics' values from the vector's sums (after first, if there was one): n of them. */
size_t tr_metrics_values(const tr_metrics *m, const double *sums, bora_metric *out);

#endif
