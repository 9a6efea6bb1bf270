/* core/train/hessian.c — second-order estimates for optimizers (hessian.h): the estimate graph,
 * the fold graph, Hutchinson's z from Philox, and the step that runs them. */
#include "hessian.h"

#include "../util/log.h"
#include "inputs.h"

#include <bora/philox.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Philox's stream for Hutchinson's z, apart from parameter initialisation's. */
#define Z_STREAM 0x487574636869ull /* "Hutchi" */

/* One optimizer's wish: 1 with *spec filled, 0 for none, -1 (error set) for a bad one. */
static int wanted(const bora_optimizer_ops *ops, bora_optimizer *opt, bora_hessian_spec *spec)
{
    memset(spec, 0, sizeof *spec);
    spec->struct_size = sizeof *spec;
    if (!ops->hessian)
        return 0;
    if (ops->hessian(opt, spec) != BORA_OK)
        return -1;
    if (spec->kind == BORA_HESSIAN_NONE)
        return 0;
    if (spec->kind != BORA_HESSIAN_HUTCHINSON && spec->kind != BORA_HESSIAN_GNB) {
        bora_error_set(BORA_ERR_INVALID, "optimizer '%s' asks for Hessian estimate kind %d",
                       ops->hdr.name, (int)spec->kind);
        return -1;
    }
    if (!ops->build_hessian_update || spec->interval < 1 || spec->micro_batches < 0) {
        bora_error_set(BORA_ERR_INVALID, "optimizer '%s' asks for a Hessian estimate with %s",
                       ops->hdr.name,
                       !ops->build_hessian_update ? "no build_hessian_update"
                       : spec->interval < 1       ? "an interval below 1"
                                                  : "a negative micro-batch count");
        return -1;
    }
    return 1;
}

/* Group k as the configuration names it: the base optimizer (k 0) or optimizer.groups[k - 1]. */
static void group_name(char *out, size_t cap, size_t k)
{
    if (k)
        snprintf(out, cap, "optimizer.groups[%zu]", k - 1);
    else
        snprintf(out, cap, "the base optimizer");
}

int bora_hessian_wanted(const bora_apply *a, bora_hessian_spec *spec, unsigned char *wants)
{
    int any = 0;
    size_t first = 0;
    for (size_t k = 0; k < a->n_groups; k++) {
        bora_hessian_spec sk;
        int w = wanted(a->groups[k].ops, a->groups[k].opt, &sk);
        if (w < 0)
            return -1;
        wants[k] = (unsigned char)w;
        if (!w)
            continue;
        if (!any) {
            *spec = sk;
            first = k;
            any = 1;
        } else if (sk.kind != spec->kind || sk.interval != spec->interval ||
                   sk.micro_batches != spec->micro_batches) {
            char a_name[48], b_name[48];
            group_name(a_name, sizeof a_name, first);
            group_name(b_name, sizeof b_name, k);
            bora_error_set(BORA_ERR_CONFIG,
                           "%s and %s ask for different Hessian estimates (kind, "
                           "update_interval or hessian_micro_batches): one estimate serves "
                           "every group",
                           a_name, b_name);
            return -1;
        }
    }
    return any;
}

/* The estimate's graph: the model's loss, then H·z (Hutchinson) or the gradient at sampled
 * labels into the hvp block (GNB). */
static bora_status build_estimate(bora_hessian *h, const bora_model_ops *mops, bora_model *model,
                                  int64_t micro)
{
    int gnb = h->spec.kind == BORA_HESSIAN_GNB;
    g_graph *g = g_graph_new(h->store, gnb ? BORA_MODE_TRAIN : BORA_MODE_HESSIAN);
    if (!g)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    h->est = g;
    g->batch = micro;
    g->grads_to_hvp = gnb;
    g->sample_labels = gnb;
    bora_graph *gp = &g->pub;
    bora_tensor *loss_sum = NULL;
    if (mops->build(model, gp, BORA_MODE_TRAIN, &loss_sum) != BORA_OK)
        return bora_error_set(BORA_ERR_INVALID, "the Hessian estimate's graph: %s",
                              g->status ? g->error : bora_error_get());
    if (bora_inputs_check(g, BORA_MODE_TRAIN, mops->hdr.name) != BORA_OK)
        return BORA_ERR_INVALID;
    bora_tensor *scale = bora_input(gp, "loss_scale", BORA_DTYPE_F32, 0, NULL);
    bora_tensor *loss = gp->api->name(gp, bora_mul(gp, loss_sum, scale), "loss");
    if (bora_graph_status(gp) != BORA_OK)
        return bora_error_set(BORA_ERR_INVALID, "the Hessian estimate's graph: %s", g->error);
    g->output = loss;
    bora_status st = gnb ? g_autodiff(g, loss) : g_hvp(g, loss);
    if (st == BORA_OK)
        st = g_finalize(g);
    return st == BORA_OK ? BORA_OK
                         : bora_error_set(st, "the Hessian estimate's graph: %s", g->error);
}

/* The fold: each parameter's estimate from the hvp (and tangent) blocks, handed to its group's
 * build_hessian_update where that group asked for it; the estimate's norm (over those
 * parameters) is the graph's output. */
static bora_status build_fold(bora_hessian *h, const size_t *group_of)
{
    g_store *store = h->store;
    const bora_apply *a = h->apply;
    g_graph *g = g_graph_new(store, BORA_MODE_APPLY);
    if (!g)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    h->fold = g;
    bora_graph *gp = &g->pub;
    const bora_graph_api *A = gp->api;
    gval **scalars = calloc(a->n_groups * 16 + 1, sizeof *scalars);
    if (!scalars)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    for (size_t k = 0; k < a->n_groups; k++)
        for (size_t i = 0; h->wants[k] && i < a->n_scalars[k]; i++)
            scalars[16 * k + i] = A->input(gp, a->scalar_names[k][i], BORA_DTYPE_F32, 0, NULL);
    int gnb = h->spec.kind == BORA_HESSIAN_GNB;
    gval *tokens = gnb ? A->input(gp, "hessian_tokens", BORA_DTYPE_F32, 0, NULL) : NULL;
    gval *total = NULL;
    for (size_t i = 0; i < store->n_slots && !g->status; i++) {
        size_t k = group_of ? group_of[i] : 0;
        const g_slot *s = &store->slots[i];
        if (!h->wants[k] || (s->flags & BORA_PARAM_FROZEN)) /* a frozen one has no estimate */
            continue;
        const bora_optimizer_ops *ops = a->groups[k].ops;
        bora_axis axes[BORA_MAX_DIMS];
        int64_t elements = 1;
        for (int d = 0; d < s->ndim; d++) {
            axes[d] = (bora_axis){s->names[d], s->dims[d]};
            elements *= s->dims[d];
        }
        gval *param = A->param(gp, s->name, s->dtype, s->ndim, axes, s->init, s->flags);
        gval *hv = g_hvp_leaf(g, (long)i);
        gval *est;
        if (gnb) /* B · ĝ ⊙ ĝ */
            est = bora_mul(gp, bora_mul(gp, hv, hv), A->cast(gp, tokens, s->dtype));
        else /* z ⊙ (H z) */
            est = bora_mul(gp, g_tangent_leaf(g, (long)i), hv);
        gval *sq = A->reduce(gp, BORA_OP_SUM, bora_mul(gp, est, est), s->ndim, s->names);
        sq = sq && sq->dtype != BORA_DTYPE_F64 ? A->cast(gp, sq, BORA_DTYPE_F64) : sq;
        total = total ? bora_add(gp, total, sq) : sq;
        if (!param || !est || !sq)
            break;
        gval *state[8];
        size_t n_slots = 0;
        while (ops->slots && ops->slots[n_slots] && n_slots < 8)
            n_slots++;
        for (size_t b = 0; b < n_slots; b++)
            state[b] = g_state_leaf(g, (long)i, (int)b);
        h->reporter = (tr_reporter){&h->metrics, ops, elements, 0, 0};
        bora_param_update u = {sizeof u,
                               !(s->flags & BORA_PARAM_NO_DECAY),
                               s->name,
                               param,
                               est,
                               state,
                               scalars + 16 * k,
                               tr_metrics_report,
                               &h->reporter,
                               s->flags};
        if (ops->build_hessian_update(a->groups[k].opt, gp, &u) != BORA_OK) {
            if (!g->status && k)
                g_fail(g, "optimizer.groups[%zu] (%s): %s", k - 1, ops->hdr.name, bora_error_get());
            else if (!g->status)
                g_fail(g, "optimizer '%s': %s", ops->hdr.name, bora_error_get());
            break;
        }
    }
    free(scalars);
    if (!total && !g->status)
        g_fail(g, "no parameter takes the Hessian estimate");
    gval *norm = total ? A->unary(gp, BORA_OP_SQRT, total) : NULL;
    g->output = norm ? tr_metrics_output(g, &h->metrics, norm) : NULL;
    if (g->output && g->output->base != g->output)
        g->output = A->contiguous(gp, g->output);
    bora_status st = g->status ? g->status : g_finalize(g);
    return st == BORA_OK ? BORA_OK
                         : bora_error_set(st, "the Hessian estimate's fold: %s", g->error);
}

bora_status bora_hessian_build(bora_hessian *h, g_store *store, const bora_model_ops *mops,
                               bora_model *model, int64_t micro, const bora_apply *a,
                               const size_t *group_of, const unsigned char *wants,
                               const bora_hessian_spec *spec)
{
    memset(h, 0, sizeof *h);
    h->spec = *spec;
    h->store = store;
    h->apply = a;
    h->wants = malloc(a->n_groups ? a->n_groups : 1);
    if (!h->wants)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    memcpy(h->wants, wants, a->n_groups);
    g_store_hessian(store);
    bora_status st = build_estimate(h, mops, model, micro);
    if (st == BORA_OK)
        st = build_fold(h, group_of);
    return st;
}

int bora_hessian_due(const bora_hessian *h, int64_t step)
{
    return h && h->est && step >= 1 && (step - 1) % h->spec.interval == 0;
}

/* A standard normal for element i of a parameter at step: Box-Muller over the two 53-bit
 * uniforms of one Philox block keyed by (seed, name) with counter (i, step). */
static float z_at(const uint32_t key[2], uint64_t i, int64_t step)
{
    uint32_t ctr[4] = {(uint32_t)i, (uint32_t)(i >> 32), (uint32_t)step,
                       (uint32_t)((uint64_t)step >> 32)};
    bora_philox4x32(ctr, key);
    double u1 = (double)(((uint64_t)(ctr[0] >> 5) << 26) | (ctr[1] >> 6)) * 0x1p-53;
    double u2 = (double)(((uint64_t)(ctr[2] >> 5) << 26) | (ctr[3] >> 6)) * 0x1p-53;
    return (float)(sqrt(-2.0 * log1p(-u1)) * cos(2.0 * M_PI * u2));
}

/* Every parameter's z at step into the tangent block. */
static bora_status write_z(bora_hessian *h, int64_t step)
{
    g_store *store = h->store;
    for (size_t i = 0; i < store->n_slots; i++) {
        const g_slot *s = &store->slots[i];
        size_t n = 1;
        for (int d = 0; d < s->ndim; d++)
            n *= (size_t)s->dims[d];
        if (n > h->z_cap) {
            float *z = realloc(h->z, n * sizeof *z);
            if (!z)
                return bora_error_set(BORA_ERR_NOMEM, "out of memory for Hutchinson's z");
            h->z = z;
            h->z_cap = n;
        }
        uint32_t key[2];
        g_philox_key(store->seed + Z_STREAM, s->name, key);
        for (size_t e = 0; e < n; e++)
            h->z[e] = z_at(key, e, step);
        bora_status st = g_store_write_tangent(store, (long)i, h->z, n);
        if (st != BORA_OK)
            return st;
    }
    return BORA_OK;
}

bora_status bora_hessian_step(bora_hessian *h, int64_t step, double lr, const int32_t *ids,
                              const int32_t *targets, const int32_t *segs, int64_t micro,
                              int64_t n_micro, bora_metric *out, size_t *n_out)
{
    *n_out = 0;
    int64_t n_est = h->spec.micro_batches > 0 && h->spec.micro_batches < n_micro
                        ? h->spec.micro_batches
                        : n_micro;
    size_t cells = (size_t)micro * (size_t)h->seq_len, bytes = cells * sizeof(int32_t);
    int64_t count = 0;
    for (size_t i = 0; i < (size_t)n_est * cells; i++)
        count += targets[i] != -100;
    h->tokens = (double)count;
    float scale = count ? (float)(1.0 / (double)count) : 0.0f;
    bora_status st = g_store_zero_hvp(h->store);
    if (st == BORA_OK && h->spec.kind == BORA_HESSIAN_HUTCHINSON)
        st = write_z(h, step);
    g_graph *g = h->est;
    for (int64_t m = 0; m < n_est && st == BORA_OK; m++) {
        size_t at = (size_t)m * cells;
        st = g_set_input(g, "input_ids", ids + at, bytes);
        if (st == BORA_OK)
            st = g_set_input(g, "targets", targets + at, bytes);
        if (st == BORA_OK && bora_inputs_reads(g, "segment_ids"))
            st = g_set_input(g, "segment_ids", segs + at, bytes);
        if (st == BORA_OK)
            st = g_set_input(g, "loss_scale", &scale, sizeof scale);
        if (st == BORA_OK && h->spec.kind == BORA_HESSIAN_GNB) {
            int64_t counter[2] = {step, (int64_t)at};
            st = g_set_input(g, "sample_counter", counter, sizeof counter);
        }
        if (st == BORA_OK)
            st = g_run(g);
    }
    if (st != BORA_OK)
        return bora_error_set(st, "step %lld: the Hessian estimate: %s", (long long)step,
                              g->status ? g->error : bora_error_get());
    g = h->fold;
    const bora_apply *a = h->apply;
    for (size_t k = 0; k < a->n_groups && st == BORA_OK; k++) {
        double values[16];
        if (!h->wants[k])
            continue;
        const bora_apply_group *gr = &a->groups[k];
        if (gr->ops->step_scalars &&
            gr->ops->step_scalars(gr->opt, step, lr * gr->lr_scale, values) != BORA_OK) {
            char name[48];
            group_name(name, sizeof name, k);
            return bora_error_set(BORA_ERR_INVALID, "step %lld: %s (%s): %s", (long long)step, name,
                                  gr->ops->hdr.name, bora_error_get());
        }
        for (size_t i = 0; i < a->n_scalars[k] && st == BORA_OK; i++) {
            float v = (float)values[i];
            st = g_set_input(g, a->scalar_names[k][i], &v, sizeof v);
        }
    }
    if (st == BORA_OK && h->spec.kind == BORA_HESSIAN_GNB) {
        float b = (float)count;
        st = g_set_input(g, "hessian_tokens", &b, sizeof b);
    }
    if (st == BORA_OK)
        st = g_run(g);
    double sums[TR_MAX_METRICS + 1];
    size_t n = 1 + h->metrics.n;
    if (st == BORA_OK)
        st = g_read(g, g->output, sums, n * sizeof(double));
    if (st != BORA_OK)
        return bora_error_set(st, "step %lld: the Hessian estimate's fold: %s", (long long)step,
                              g->status ? g->error : bora_error_get());
    out[0] = (bora_metric){"optim/hessian_estimate_norm", sums[0]};
    *n_out = 1 + tr_metrics_values(&h->metrics, sums + 1, out + 1);
    return BORA_OK;
}

void bora_hessian_free(bora_hessian *h)
{
    if (!h)
        return;
    g_graph_free(h->est);
    g_graph_free(h->fold);
    free(h->z);
    free(h->wants);
    memset(h, 0, sizeof *h);
}
