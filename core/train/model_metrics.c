/* core/train/model_metrics.c — a model's own metrics: the train graph's output widened to carry
 * them beside the loss, and their per-step means (see model_metrics.h). */
#include "model_metrics.h"

#include "../util/log.h"
#include "../util/str.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* v (0-d or 1-d, a float dtype) as f64 along an axis named "metric". */
static gval *as_part(bora_graph *gp, gval *v)
{
    const bora_graph_api *A = gp->api;
    if (A->dtype(v) != BORA_DTYPE_F64)
        v = A->cast(gp, v, BORA_DTYPE_F64);
    if (A->ndim(v) == 0)
        return A->broadcast(gp, v, (bora_axis){"metric", 1});
    bora_axis a = A->axis(v, 0);
    return strcmp(a.name, "metric") ? A->rename(gp, v, a.name, "metric") : v;
}

bora_status tr_model_metrics_build(g_graph *g, gval *loss, tr_model_metrics *m)
{
    memset(m, 0, sizeof *m);
    g->output = loss;
    if (!g->n_metrics)
        return BORA_OK;
    size_t n = 0;
    for (size_t i = 0; i < g->n_metrics; i++)
        n += (size_t)g_numel(g->metrics[i].value);
    m->names = calloc(n, sizeof *m->names);
    m->scalar = calloc(n, sizeof *m->scalar);
    m->read = calloc(n + 1, sizeof *m->read);
    m->sums = calloc(n, sizeof *m->sums);
    m->out = calloc(n, sizeof *m->out);
    if (!m->names || !m->scalar || !m->read || !m->sums || !m->out)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < g->n_metrics; i++) {
        const g_metric *d = &g->metrics[i];
        int64_t k = d->value->ndim ? g_numel(d->value) : 0;
        for (int64_t e = 0; e < (k ? k : 1); e++) {
            char name[160];
            if (k)
                snprintf(name, sizeof name, "train/%s/%lld", d->name, (long long)e);
            else
                snprintf(name, sizeof name, "train/%s", d->name);
            if (!(m->names[m->n] = bora_strdup(name)))
                return bora_error_set(BORA_ERR_NOMEM, "out of memory");
            m->scalar[m->n] = !k;
            m->n_scalars += !k;
            m->n++;
        }
    }
    /* concat takes G_MAX_IN tensors: the vector grows by G_MAX_IN - 1 parts at a time */
    bora_graph *gp = &g->pub;
    gval *part[G_MAX_IN];
    int np = 0;
    part[np++] = as_part(gp, loss);
    for (size_t i = 0; i < g->n_metrics; i++) {
        part[np++] = as_part(gp, g->metrics[i].value);
        if (np == G_MAX_IN || i + 1 == g->n_metrics) {
            part[0] = gp->api->concat(gp, "metric", np, part);
            np = 1;
        }
    }
    gval *out = part[0] && part[0]->base != part[0] ? gp->api->contiguous(gp, part[0]) : part[0];
    if (!out || bora_graph_status(gp) != BORA_OK)
        return bora_error_set(BORA_ERR_INVALID, "the model's metrics: %s", g->error);
    g->output = out;
    return BORA_OK;
}

void tr_model_metrics_begin(tr_model_metrics *m)
{
    for (size_t i = 0; i < m->n; i++)
        m->sums[i] = 0;
    m->parts = 0;
}

bora_status tr_model_metrics_read(g_graph *g, tr_model_metrics *m, double *loss)
{
    if (!m->n) {
        float part = 0;
        bora_status st = g_read(g, g->output, &part, sizeof part);
        *loss = part;
        return st;
    }
    bora_status st = g_read(g, g->output, m->read, (m->n + 1) * sizeof(double));
    if (st != BORA_OK)
        return st;
    *loss = m->read[0];
    for (size_t i = 0; i < m->n; i++)
        m->sums[i] += m->read[i + 1];
    m->parts++;
    return BORA_OK;
}

void tr_model_metrics_add(tr_model_metrics *m, const double *values)
{
    for (size_t i = 0; i < m->n; i++)
        m->sums[i] += values[i];
    m->parts++;
}

size_t tr_model_metrics_values(tr_model_metrics *m)
{
    for (size_t i = 0; i < m->n; i++)
        m->out[i] = (bora_metric){m->names[i], m->parts ? m->sums[i] / (double)m->parts : 0.0};
    return m->n;
}

void tr_model_metrics_free(tr_model_metrics *m)
{
    for (size_t i = 0; m->names && i < m->n; i++)
        free(m->names[i]);
    free(m->names);
    free(m->scalar);
    free(m->read);
    free(m->sums);
    free(m->out);
    memset(m, 0, sizeof *m);
}
