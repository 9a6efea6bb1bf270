/* core/train/metrics.c — optimizer metrics: reports summed in f64 in the graph's fixed order, read
 * back with the graph's output, and reduced on the host (a norm's square root, a mean's division). */
#include "metrics.h"

#include "../util/log.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

bora_status tr_metrics_report(bora_graph *g, const bora_param_update *u, int32_t metric,
                              bora_tensor *value)
{
    const tr_reporter *r = u ? u->host_private : NULL;
    if (!r || !value)
        return bora_graph_status(g) != BORA_OK
                   ? bora_graph_status(g)
                   : bora_error_set(BORA_ERR_INVALID, "a metric report without a value");
    int32_t n_defs = 0;
    while (r->ops->metrics && r->ops->metrics[n_defs].name)
        n_defs++;
    if (metric < 0 || metric >= n_defs)
        return bora_error_set(BORA_ERR_INVALID,
                              "optimizer '%s' reports metric %d of the %d it declares",
                              r->ops->hdr.name, (int)metric, (int)n_defs);
    const bora_optimizer_metric *d = &r->ops->metrics[metric];
    if (d->reduce < BORA_METRIC_SUM || d->reduce > BORA_METRIC_MEAN)
        return bora_error_set(BORA_ERR_INVALID, "optimizer '%s': metric '%s' has no reduction %d",
                              r->ops->hdr.name, d->name, (int)d->reduce);
    if (g->api->ndim(value) != 0)
        return bora_error_set(BORA_ERR_INVALID,
                              "optimizer '%s': metric '%s' reports a tensor of %d axes, not a "
                              "0-d value",
                              r->ops->hdr.name, d->name, (int)g->api->ndim(value));
    tr_metrics *m = r->metrics;
    if (m->each) {
        if (m->n_reports == m->cap_reports) {
            size_t cap = m->cap_reports ? 2 * m->cap_reports : 64;
            struct tr_report *grown = realloc(m->reports, cap * sizeof *grown);
            if (!grown)
                return bora_error_set(BORA_ERR_NOMEM, "out of memory");
            m->reports = grown, m->cap_reports = cap;
        }
        bora_tensor *v =
            g->api->dtype(value) == BORA_DTYPE_F64 ? value : g->api->cast(g, value, BORA_DTYPE_F64);
        /* an update's reports are one rank's, in the order made (the index after the key) */
        m->reports[m->n_reports] =
            (struct tr_report){v, r->key, r->group, metric, (double)r->elements};
        m->n_reports++;
        return bora_graph_status(g);
    }
    size_t i = 0;
    while (i < m->n && strcmp(m->m[i].name, d->name) != 0)
        i++;
    if (i == m->n) {
        if (m->n == TR_MAX_METRICS)
            return bora_error_set(BORA_ERR_INVALID, "more than %d optimizer metrics",
                                  TR_MAX_METRICS);
        m->m[i].name = d->name;
        m->m[i].reduce = d->reduce;
        m->m[i].sum = NULL;
        m->m[i].elements = 0;
        m->n++;
    } else if (m->m[i].reduce != d->reduce) {
        return bora_error_set(BORA_ERR_INVALID,
                              "optimizer metric '%s' is reported with two different reductions",
                              d->name);
    }
    bora_tensor *v =
        g->api->dtype(value) == BORA_DTYPE_F64 ? value : g->api->cast(g, value, BORA_DTYPE_F64);
    m->m[i].sum = m->m[i].sum ? bora_add(g, m->m[i].sum, v) : v;
    m->m[i].elements += (double)r->elements;
    return bora_graph_status(g);
}

void tr_metrics_free(tr_metrics *m)
{
    free(m->reports);
    m->reports = NULL;
    m->n_reports = m->cap_reports = 0;
}

gval *tr_concat(bora_graph *gp, const char *axis, size_t n, gval **parts)
{
    /* concat takes at most 8 at a time: runs of 8 joined, then the runs, and so on */
    while (n > 1) {
        size_t m = 0;
        for (size_t at = 0; at < n; at += 8) {
            size_t k = n - at < 8 ? n - at : 8;
            parts[m++] = k == 1 ? parts[at] : gp->api->concat(gp, axis, (int32_t)k, parts + at);
        }
        n = m;
    }
    return n ? parts[0] : NULL;
}

/* first and every report, as one 1-d f64 vector */
static gval *each_output(g_graph *g, tr_metrics *m, gval *first)
{
    bora_graph *gp = &g->pub;
    size_t n = m->n_reports + (first != NULL);
    bora_tensor **parts = calloc(n ? n : 1, sizeof *parts);
    if (!parts) {
        g_fail(g, "out of memory");
        return NULL;
    }
    size_t k = 0;
    bora_axis one = {"metric", 1};
    if (first)
        parts[k++] = gp->api->broadcast(gp, first, one);
    for (size_t i = 0; i < m->n_reports; i++)
        parts[k++] = gp->api->broadcast(gp, m->reports[i].value, one);
    gval *out = tr_concat(gp, "metric", n, parts);
    free(parts);
    return out ? gp->api->contiguous(gp, out) : NULL;
}

gval *tr_metrics_output(g_graph *g, tr_metrics *m, gval *first)
{
    if (m && m->each)
        return m->n_reports || !first ? each_output(g, m, first) : first;
    if (!m || m->n == 0)
        return first;
    bora_graph *gp = &g->pub;
    bora_tensor *parts[TR_MAX_METRICS + 1];
    int32_t n = 0;
    bora_axis one = {"metric", 1};
    if (first)
        parts[n++] = gp->api->broadcast(gp, first, one);
    for (size_t i = 0; i < m->n; i++)
        parts[n++] = gp->api->broadcast(gp, m->m[i].sum, one);
    gval *out = tr_concat(gp, "metric", (size_t)n, parts);
    return out ? gp->api->contiguous(gp, out) : NULL;
}

size_t tr_metrics_values(const tr_metrics *m, const double *sums, bora_metric *out)
{
    for (size_t i = 0; i < m->n; i++) {
        double v = sums[i];
        if (m->m[i].reduce == BORA_METRIC_NORM)
            v = sqrt(v);
        else if (m->m[i].reduce == BORA_METRIC_MEAN)
            v = m->m[i].elements > 0 ? v / m->m[i].elements : 0.0;
        out[i] = (bora_metric){m->m[i].name, v};
    }
    return m->n;
}
