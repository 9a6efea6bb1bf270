/* core/train/apply.c — the apply graph (docs/design.md §5): the global gradient norm from f64
 * partials summed in parameter order, the clipping factor kept on the device
 * (max / max(norm, max), written with relu), each parameter's update by its optimizer group's
 * instance (docs/optimizers.md), and the gradients zeroed for the next step. Sharded
 * (trainer.shard_optimizer, zero.c): the same over the parameters this rank owns, the squared
 * norms in a graph of their own and the whole model's sum an input, each metric report apart. */
#include "apply.h"

#include "../util/log.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t count_names(const char *const *names)
{
    size_t n = 0;
    while (names && names[n])
        n++;
    return n;
}

bora_status bora_apply_build(g_store *store, const bora_optimizer_ops *ops, bora_optimizer *opt,
                             double max_grad_norm, bora_apply *out)
{
    bora_apply_group one = {ops, opt, 1.0};
    return bora_apply_build_groups(store, 1, &one, NULL, max_grad_norm, out);
}

/* Each group's scalar inputs: group 0's under the optimizer's names, group k's as "gK/name". */
static bora_status name_scalars(bora_apply *out)
{
    for (size_t k = 0; k < out->n_groups; k++) {
        const bora_optimizer_ops *ops = out->groups[k].ops;
        size_t n = count_names(ops->scalars);
        out->n_scalars[k] = n;
        if (n > 16 || count_names(ops->slots) > 8)
            return bora_error_set(BORA_ERR_INVALID,
                                  "optimizer '%s' asks for too many scalars or state slots",
                                  ops->hdr.name);
        if (!(out->scalar_names[k] = calloc(n + 1, sizeof *out->scalar_names[k])))
            return bora_error_set(BORA_ERR_NOMEM, "out of memory");
        for (size_t i = 0; i < n; i++) {
            size_t len = strlen(ops->scalars[i]) + 32;
            if (!(out->scalar_names[k][i] = malloc(len)))
                return bora_error_set(BORA_ERR_NOMEM, "out of memory");
            if (k)
                snprintf(out->scalar_names[k][i], len, "g%zu/%s", k, ops->scalars[i]);
            else
                snprintf(out->scalar_names[k][i], len, "%s", ops->scalars[i]);
        }
    }
    return BORA_OK;
}

/* A sharded graph's squared gradient norms of its parameters, one f64 vector in parameter order
 * (NULL when the rank owns no trainable parameter). */
static gval *norm_parts(g_graph *ng, gval **parts, size_t n)
{
    if (!n)
        return NULL;
    bora_graph *gp = &ng->pub;
    bora_axis one = {"param", 1};
    for (size_t i = 0; i < n; i++)
        parts[i] = gp->api->broadcast(gp, parts[i], one);
    gval *out = tr_concat(gp, "param", n, parts);
    return out ? gp->api->contiguous(gp, out) : NULL;
}

static bora_status build(g_store *store, size_t n_groups, const bora_apply_group *groups,
                         const size_t *group_of, double max_grad_norm, const unsigned char *owned,
                         bora_apply *out)
{
    memset(out, 0, sizeof *out);
    out->owned = owned;
    out->metrics.each = owned != NULL;
    size_t n = store->n_slots, n_slots = 0;
    out->n_groups = n_groups;
    out->groups = calloc(n_groups ? n_groups : 1, sizeof *out->groups);
    out->n_scalars = calloc(n_groups ? n_groups : 1, sizeof *out->n_scalars);
    out->scalar_names = calloc(n_groups ? n_groups : 1, sizeof *out->scalar_names);
    out->slots = calloc(n ? n : 1, sizeof *out->slots);
    if (!out->groups || !out->n_scalars || !out->scalar_names || !out->slots) {
        bora_apply_free(out);
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    }
    if (n_groups)
        memcpy(out->groups, groups, n_groups * sizeof *groups);
    out->ops = groups[0].ops;
    out->opt = groups[0].opt;
    bora_status named = name_scalars(out);
    if (named != BORA_OK) {
        bora_apply_free(out);
        return named;
    }
    for (size_t i = 0; i < n; i++) {
        size_t k = group_of ? group_of[i] : 0;
        size_t m = count_names(groups[k].ops->slots);
        /* a frozen parameter has no optimizer state (nor any in a checkpoint) */
        out->slots[i] = store->slots[i].flags & BORA_PARAM_FROZEN ? NULL : groups[k].ops->slots;
        n_slots = m > n_slots ? m : n_slots;
    }
    store->n_states = n_slots;
    g_graph *g = g_graph_new(store, BORA_MODE_APPLY);
    if (!g) {
        bora_apply_free(out);
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    }
    bora_graph *gp = &g->pub;
    const bora_graph_api *A = gp->api;
    out->g = g;
    /* sharded: the owned parameters' squared norms in a graph of their own, run first; the sum
     * over the whole model comes back as an input */
    g_graph *ng = owned ? g_graph_new(store, BORA_MODE_APPLY) : NULL;
    if (owned && !ng)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    out->norm_g = ng;
    gval **scalars = calloc(n_groups * 16 + 1, sizeof *scalars);
    if (!scalars)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    for (size_t k = 0; k < n_groups; k++)
        for (size_t i = 0; i < out->n_scalars[k]; i++)
            scalars[16 * k + i] = A->input(gp, out->scalar_names[k][i], BORA_DTYPE_F32, 0, NULL);

    /* Every trainable parameter and its gradient (a frozen one has neither update nor
     * gradient); the squared norm in f64, in parameter order. */
    gval **params = calloc(n ? n : 1, sizeof *params), **grads = calloc(n ? n : 1, sizeof *grads);
    gval **sqs = calloc(n ? n : 1, sizeof *sqs);
    if (!params || !grads || !sqs) {
        free(params);
        free(grads);
        free(sqs);
        free(scalars);
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    }
    gval *total = NULL;
    for (size_t i = 0; i < n && !g->status; i++) {
        const g_slot *s = &store->slots[i];
        if ((s->flags & BORA_PARAM_FROZEN) || (owned && !owned[i]))
            continue;
        bora_axis axes[BORA_MAX_DIMS];
        for (int d = 0; d < s->ndim; d++)
            axes[d] = (bora_axis){s->names[d], s->dims[d]};
        params[i] = A->param(gp, s->name, s->dtype, s->ndim, axes, s->init, s->flags);
        grads[i] = g_grad_leaf(g, (long)i);
        if (!grads[i])
            break;
        /* g·g in the gradient's dtype (a fused pass), each parameter's sum accumulated in
         * double partials by the backend's reduction, the running total in f64 */
        g_graph *sg = ng ? ng : g;
        bora_graph *sp = &sg->pub;
        gval *gr = ng ? g_grad_leaf(ng, (long)i) : grads[i];
        gval *sq = gr ? A->reduce(sp, BORA_OP_SUM, bora_mul(sp, gr, gr), s->ndim, s->names) : NULL;
        sq = sq && sq->dtype != BORA_DTYPE_F64 ? A->cast(sp, sq, BORA_DTYPE_F64) : sq;
        if (ng)
            sqs[out->n_owned++] = sq;
        else
            total = total ? bora_add(gp, total, sq) : sq;
    }
    if (ng && !g->status) /* the sum in parameter order, made by the host from every rank's */
        total = A->input(gp, "grad_norm_sq", BORA_DTYPE_F64, 0, NULL);
    if (ng && !ng->status) {
        ng->output = norm_parts(ng, sqs, out->n_owned);
        if (ng->output && !ng->status)
            g_finalize(ng);
        if (ng->status)
            g_fail(g, "%s", ng->error);
    }
    free(sqs);
    gval *norm = total ? A->unary(gp, BORA_OP_SQRT, total) : NULL;
    gval *scale = NULL;
    if (norm && max_grad_norm > 0) {
        /* max / (max + relu(norm - max)) = min(1, max / norm), with primitives only */
        gval *maxv = g_fill(g, norm, max_grad_norm);
        gval *den = bora_add(gp, maxv, A->unary(gp, BORA_OP_RELU, bora_sub(gp, norm, maxv)));
        scale = bora_div(gp, maxv, den);
    }
    /* the factor cast once per dtype: each parameter's update is then the same chain of
     * elementwise ops, run together as one multi-tensor pass */
    gval *scale_as[BORA_DTYPE_U8 + 1] = {0};
    gval **seen = calloc(n ? n : 1, sizeof *seen); /* each parameter's gradient as updated */
    if (!seen)
        g_fail(g, "out of memory");
    for (size_t j = 0; j < 2 * n * n_groups && !g->status; j++) {
        /* group by group, the parameters with weight decay first, then the others: each run
         * the same chain of ops */
        size_t k = j / (2 * n), i = j % n;
        int first = j % (2 * n) < n;
        const g_slot *s = &store->slots[i];
        if ((group_of ? group_of[i] : 0) != k || (!(s->flags & BORA_PARAM_NO_DECAY)) != first ||
            (s->flags & BORA_PARAM_FROZEN) || (owned && !owned[i]))
            continue;
        const bora_optimizer_ops *ops = groups[k].ops;
        gval *gr = grads[i];
        if (scale)
            gr = bora_mul(gp, gr,
                          scale_as[s->dtype] ? scale_as[s->dtype]
                                             : (scale_as[s->dtype] = A->cast(gp, scale, s->dtype)));
        gval *state[8];
        for (size_t b = 0; b < count_names(ops->slots); b++)
            state[b] = g_state_leaf(g, (long)i, (int)b);
        int64_t elements = 1;
        for (int d = 0; d < s->ndim; d++)
            elements *= s->dims[d];
        out->reporter = (tr_reporter){&out->metrics, ops, elements, (int64_t)j, (int32_t)k};
        seen[i] = gr;
        bora_param_update u = {sizeof u,
                               !(s->flags & BORA_PARAM_NO_DECAY),
                               s->name,
                               params[i],
                               gr,
                               state,
                               scalars + 16 * k,
                               tr_metrics_report,
                               &out->reporter,
                               s->flags};
        if (ops->build_update(groups[k].opt, gp, &u) != BORA_OK) {
            if (!g->status && k)
                g_fail(g, "optimizer.groups[%zu] (%s): %s", k - 1, ops->hdr.name, bora_error_get());
            else if (!g->status)
                g_fail(g, "optimizer '%s': %s", ops->hdr.name, bora_error_get());
            break;
        }
    }
    /* Metrics reported after every update (bora_optimizer_ops.build_metrics), in parameter
     * order: their sums then follow the updates rather than splitting them. */
    for (size_t i = 0; i < n && !g->status; i++) {
        size_t k = group_of ? group_of[i] : 0;
        const bora_optimizer_ops *ops = groups[k].ops;
        if (!ops->build_metrics || !seen[i])
            continue;
        const g_slot *s = &store->slots[i];
        int64_t elements = 1;
        for (int d = 0; d < s->ndim; d++)
            elements *= s->dims[d];
        gval *state[8];
        for (size_t b = 0; b < count_names(ops->slots); b++)
            state[b] = g_state_leaf(g, (long)i, (int)b);
        out->reporter = (tr_reporter){&out->metrics, ops, elements, (int64_t)(2 * n * n_groups + i),
                                      (int32_t)k};
        bora_param_update u = {sizeof u,         !(s->flags & BORA_PARAM_NO_DECAY),
                               s->name,          params[i],
                               seen[i],          state,
                               scalars + 16 * k, tr_metrics_report,
                               &out->reporter,   s->flags};
        if (ops->build_metrics(groups[k].opt, gp, &u) != BORA_OK) {
            if (!g->status && k)
                g_fail(g, "optimizer.groups[%zu] (%s): %s", k - 1, ops->hdr.name, bora_error_get());
            else if (!g->status)
                g_fail(g, "optimizer '%s': %s", ops->hdr.name, bora_error_get());
            break;
        }
    }
    free(seen);
    /* The gradients start from zero again for the next step's micro-batches, unless every
     * train graph writes them (one micro-batch a step: the next run overwrites them all). */
    int zero = !store->grad_writers || store->grad_adders;
    for (size_t i = 0; i < n && zero && !g->status; i++)
        if (grads[i])
            A->assign(gp, grads[i], g_fill(g, grads[i], 0.0));
    free(params);
    free(grads);
    free(scalars);
    if (norm && norm->base != norm)
        norm = A->contiguous(gp, norm);
    out->grad_norm = norm;
    /* the optimizers' metrics, if they reported any, after the norm in one f64 vector */
    g->output = norm ? tr_metrics_output(g, &out->metrics, norm) : NULL;
    if (g->output && g->output->base != g->output)
        g->output = A->contiguous(gp, g->output);
    if (!norm && !g->status)
        g_fail(g, "the model has no trainable parameters");
    return g->status ? g->status : g_finalize(g);
}

bora_status bora_apply_build_groups(g_store *store, size_t n_groups, const bora_apply_group *groups,
                                    const size_t *group_of, double max_grad_norm, bora_apply *out)
{
    return build(store, n_groups, groups, group_of, max_grad_norm, NULL, out);
}

bora_status bora_apply_build_sharded(g_store *store, size_t n_groups,
                                     const bora_apply_group *groups, const size_t *group_of,
                                     double max_grad_norm, const unsigned char *owned,
                                     bora_apply *out)
{
    return build(store, n_groups, groups, group_of, max_grad_norm, owned, out);
}

/* Each group's scalars of this step into the graph's inputs. */
static bora_status set_scalars(bora_apply *a, int64_t step, double lr)
{
    for (size_t k = 0; k < a->n_groups; k++) {
        const bora_apply_group *gr = &a->groups[k];
        double values[16];
        if (gr->ops->step_scalars &&
            gr->ops->step_scalars(gr->opt, step, lr * gr->lr_scale, values) != BORA_OK) {
            char why[1024];
            snprintf(why, sizeof why, "%s", bora_error_get());
            if (k)
                return bora_error_set(BORA_ERR_INVALID,
                                      "optimizer.groups[%zu] (%s), step %" PRId64 ": %s", k - 1,
                                      gr->ops->hdr.name, step, why);
            return bora_error_set(BORA_ERR_INVALID, "optimizer '%s', step %" PRId64 ": %s",
                                  gr->ops->hdr.name, step, why);
        }
        for (size_t i = 0; i < a->n_scalars[k]; i++) {
            float v = (float)values[i];
            bora_status st = g_set_input(a->g, a->scalar_names[k][i], &v, sizeof v);
            if (st != BORA_OK)
                return st;
        }
    }
    return BORA_OK;
}

bora_status bora_apply_step(bora_apply *a, int64_t step, double lr, double *grad_norm,
                            bora_metric *metrics, size_t *n_metrics)
{
    *n_metrics = 0;
    bora_status st = set_scalars(a, step, lr);
    if (st == BORA_OK)
        st = g_run(a->g);
    double sums[TR_MAX_METRICS + 1];
    size_t n = 1 + a->metrics.n;
    if (st == BORA_OK)
        st = g_read(a->g, a->g->output, sums, n * sizeof(double));
    if (st == BORA_OK) {
        *grad_norm = sums[0];
        *n_metrics = tr_metrics_values(&a->metrics, sums + 1, metrics);
    }
    return st;
}

bora_status bora_apply_norm_parts(bora_apply *a, double *sq)
{
    if (!a->norm_g || !a->n_owned) /* a rank owning only frozen parameters, or none */
        return BORA_OK;
    bora_status st = g_run(a->norm_g);
    return st == BORA_OK ? g_read(a->norm_g, a->norm_g->output, sq, a->n_owned * sizeof *sq) : st;
}

bora_status bora_apply_step_sharded(bora_apply *a, int64_t step, double lr, double norm_sq,
                                    double *out)
{
    bora_status st = set_scalars(a, step, lr);
    if (st == BORA_OK)
        st = g_set_input(a->g, "grad_norm_sq", &norm_sq, sizeof norm_sq);
    if (st == BORA_OK)
        st = g_run(a->g);
    if (st == BORA_OK)
        st = g_read(a->g, a->g->output, out, (1 + a->metrics.n_reports) * sizeof *out);
    return st;
}

void bora_apply_free(bora_apply *a)
{
    g_graph_free(a->g);
    g_graph_free(a->norm_g);
    tr_metrics_free(&a->metrics);
    for (size_t k = 0; a->scalar_names && k < a->n_groups; k++) {
        for (size_t i = 0; a->scalar_names[k] && a->scalar_names[k][i]; i++)
            free(a->scalar_names[k][i]);
        free(a->scalar_names[k]);
    }
    free(a->scalar_names);
    free(a->n_scalars);
    free(a->groups);
    free(a->slots);
    memset(a, 0, sizeof *a);
}
