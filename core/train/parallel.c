/* core/train/parallel.c — data parallel steps over the process group (core/dist), with the
 * bits of one process.
 *
 * One process accumulates a step's M micro-batches into the gradient buffer in order:
 * G = ((0 + g_0) + g_1) + ... + g_{M-1}, each g_m the micro-batch's whole gradient (autodiff adds
 * it with one add per element, G_GRAD). With N ranks, rank r computes micro-batches r, r + N,
 * r + 2N, ...: in round j the N ranks compute g_{jN} .. g_{jN+N-1} at once, each written fresh
 * (the train graph writes its gradients), and the backend's reduce-scatter adds the N of them
 * to the owner's slice of the running sum in rank order, which is micro-batch order. After the
 * last round an all-gather gives every rank the whole sum, the same additions in the same order
 * as one process's, so every rank's apply graph makes the same update as one process would.
 * The step's loss-token count, an integer, is summed exactly before any micro-batch runs; each
 * micro-batch's loss and metrics are gathered and summed in micro-batch order, as one process
 * sums them. Each rank reads only its micro-batches' rows: batch k stays a function of
 * (seed, k), so no data moves. */
#include "internal.h"

#include "../dist/dist.h"
#include "../util/log.h"
#include "../util/str.h"
#include "inputs.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

bora_status tr_dp_setup(trainer *t)
{
    const bora_backend_ops *bops = (const bora_backend_ops *)t->be_entry->ops;
    int64_t n_micro = t->batch / t->micro;
    if (n_micro % t->world)
        return bora_error_set(
            BORA_ERR_CONFIG,
            "trainer.train_batch_size (%lld) is %lld micro-batches of "
            "trainer.per_device_parallelism (%lld), which %d processes cannot share evenly; make "
            "the micro-batches a multiple of the process count",
            (long long)t->batch, (long long)n_micro, (long long)t->micro, t->world);
    if (t->be_entry->file->abi_minor < 16 || !bops->group_join || !bops->reduce_scatter ||
        !bops->all_gather || !bops->broadcast)
        return bora_error_set(BORA_ERR_UNSUPPORTED,
                              "backend %s has no collectives (ABI 1.16's group_join, "
                              "reduce_scatter, all_gather): it trains on one process only",
                              t->be_entry->ops->name);
    if (t->hess_built)
        return bora_error_set(BORA_ERR_UNSUPPORTED,
                              "optimizer %s: its second-order estimate is not split among "
                              "processes yet; train it on one process",
                              t->opt_entry->ops->name);
    const g_store *s = t->store;
    for (size_t i = 0; i < s->n_slots; i++)
        if (s->slots[i].dtype != BORA_DTYPE_F32)
            return bora_error_set(BORA_ERR_UNSUPPORTED,
                                  "parameter %s is not f32: gradients are summed among processes "
                                  "in f32 only",
                                  s->slots[i].name);
    if (bops->group_join(t->be, bora_dist_group()) != BORA_OK)
        return bora_error_set(BORA_ERR_UNSUPPORTED, "backend %s: %s", t->be_entry->ops->name,
                              bora_error_get());
    if (t->zero && tr_zero_setup(t) != BORA_OK)
        return BORA_ERR_IO;
    t->dp_count = s->param_bytes / sizeof(float);
    size_t slice = t->dp_count / (size_t)t->world + (t->dp_count % (size_t)t->world != 0);
    size_t values = 1 + t->model_metrics.n, rows;
    if (bops->buffer_alloc(t->be, slice * sizeof(float), 64, &t->dp_acc) != BORA_OK)
        return bora_error_set(BORA_ERR_NOMEM, "the gradients' slice: %s", bora_error_get());
    if (__builtin_mul_overflow((size_t)n_micro, values, &rows))
        return bora_error_set(BORA_ERR_INVALID, "too many micro-batches");
    t->dp_zero = calloc(slice ? slice : 1, sizeof(float));
    t->dp_rows = calloc(rows, sizeof(double));
    if (!t->dp_zero || !t->dp_rows)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    printf("data parallel: %d processes (rank %d here), %lld micro-batch%s of %lld each a step, "
           "gradients summed in micro-batch order\n",
           t->world, t->rank, (long long)(n_micro / t->world), n_micro / t->world == 1 ? "" : "es",
           (long long)t->micro);
    return BORA_OK;
}

bora_status tr_dp_open_data(trainer *t, bora_config *root)
{
    if (t->world == 1)
        return tr_open_data(t, root);
    /* Rank 0 builds the token caches whole while the others wait (no deadline: a large corpus
     * takes what it takes; a rank 0 that dies ends the group through the launcher), then they
     * open what it built and find every shard done (cache.h: one builder per directory). */
    const char *what = "rank 0 building the token cache";
    if (t->rank && bora_dist_barrier(what, 0) != BORA_OK)
        return BORA_ERR_IO;
    bora_status st = tr_open_data(t, root);
    if (st != BORA_OK || t->rank)
        return st;
    if ((t->loader && !bora_loader_windows(t->loader)) || (t->val && !bora_loader_windows(t->val)))
        return bora_error_set(BORA_ERR_IO, "the token cache was not built: %s", bora_error_get());
    return bora_dist_barrier(what, 0);
}

bora_status tr_dp_sync(trainer *t, int64_t *start)
{
    const bora_backend_ops *bops = (const bora_backend_ops *)t->be_entry->ops;
    g_store *s = t->store;
    bora_status st = bora_dist_broadcast(start, sizeof *start, 0, "the step to start from");
    size_t params = s->param_bytes / sizeof(float);
    if (st == BORA_OK)
        st = bops->broadcast(t->be, s->param_ptr, params, BORA_DTYPE_F32, 0);
    if (st == BORA_OK && t->zero) /* each rank its share of rank 0's */
        st = tr_zero_scatter(t);
    else if (st == BORA_OK && s->n_states)
        st = bops->broadcast(t->be, s->state_ptr, params * s->n_states, BORA_DTYPE_F32, 0);
    if (st != BORA_OK)
        return bora_error_set(st, "taking rank 0's parameters: %s", bora_error_get());
    if (t->rank)
        g_store_params_changed(s); /* the bf16 copies follow */
    return BORA_OK;
}

/* Rows and the loss-token count of this rank's micro-batches, then the step's count (every
 * rank's, summed exactly) and whether any rank was interrupted. */
static bora_status read_rows(trainer *t, int64_t step, int64_t per, size_t cells, int stop,
                             int64_t *count)
{
    int64_t mine[2] = {0, stop};
    double w0 = bora_now_s();
    for (int64_t j = 0; j < per; j++) {
        int64_t m = j * t->world + t->rank, c = 0;
        size_t at = (size_t)j * cells;
        bora_status st = bora_loader_rows(t->loader, step - 1, t->batch, m * t->micro, t->micro,
                                          t->ids + at, t->targets + at, t->segs + at, &c);
        if (st == BORA_OK && t->feats) /* an audio model: the same rows' clips */
            st = bora_loader_features(t->loader, step - 1, t->batch, m * t->micro, t->micro,
                                      t->feats + (size_t)j * (size_t)t->micro * t->feat_row);
        if (st != BORA_OK)
            return st;
        mine[0] += c;
    }
    t->wait_s = bora_now_s() - w0;
    int64_t *all = calloc((size_t)t->world * 2, sizeof *all);
    if (!all)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    bora_status st = bora_dist_allgather(mine, all, sizeof mine, "the step's loss-token count");
    *count = 0;
    t->dp_stop = 0;
    for (int q = 0; q < t->world && st == BORA_OK; q++) {
        *count += all[2 * q];
        t->dp_stop |= all[2 * q + 1] != 0;
    }
    free(all);
    return st;
}

bora_status tr_dp_step(trainer *t, int64_t step, double lr, double *loss, double *norm)
{
    const bora_backend_ops *bops = (const bora_backend_ops *)t->be_entry->ops;
    g_store *s = t->store;
    int64_t n_micro = t->batch / t->micro, per = n_micro / t->world, count = 0;
    size_t cells = (size_t)(t->micro * t->seq_len), bytes = cells * sizeof(int32_t);
    size_t values = 1 + t->model_metrics.n;
    size_t slice = t->dp_count / (size_t)t->world + (t->dp_count % (size_t)t->world != 0);
    void *acc = bops->buffer_ptr(t->be, t->dp_acc);
    bora_status st = read_rows(t, step, per, cells, tr_interrupted(), &count);
    if (st == BORA_OK)
        st = bops->copy_in(t->be, t->dp_acc, 0, t->dp_zero, slice * sizeof(float));
    if (st != BORA_OK)
        return bora_error_set(st, "step %" PRId64 ": %s", step, bora_error_get());
    float scale = count ? (float)(1.0 / (double)count) : 0.0f;
    double *mine = t->dp_rows + (size_t)t->rank * (size_t)per * values;
    tr_model_metrics_begin(&t->model_metrics);
    t->dp_comm_s = 0;
    for (int64_t j = 0; j < per; j++) {
        size_t at = (size_t)j * cells;
        st = g_set_input(t->train, "input_ids", t->ids + at, bytes);
        if (st == BORA_OK)
            st = g_set_input(t->train, "targets", t->targets + at, bytes);
        if (st == BORA_OK && bora_inputs_reads(t->train, "segment_ids"))
            st = g_set_input(t->train, "segment_ids", t->segs + at, bytes);
        if (st == BORA_OK && t->feats)
            st = g_set_input(t->train, "input_features",
                             t->feats + (size_t)j * (size_t)t->micro * t->feat_row,
                             (size_t)t->micro * t->feat_row * sizeof(float));
        if (st == BORA_OK)
            st = g_set_input(t->train, "loss_scale", &scale, sizeof scale);
        if (st == BORA_OK)
            st = g_run(t->train);
        double *row = mine + (size_t)j * values;
        if (st == BORA_OK)
            st = tr_model_metrics_read(t->train, &t->model_metrics, &row[0]);
        if (st != BORA_OK)
            return bora_error_set(st, "step %" PRId64 ": %s", step,
                                  t->train->status ? t->train->error : bora_error_get());
        if (t->model_metrics.n)
            memcpy(row + 1, t->model_metrics.read + 1, t->model_metrics.n * sizeof(double));
        /* round j: micro-batches jN .. jN + N - 1 added to the running sum in rank order */
        double c0 = bora_now_s();
        st = bops->reduce_scatter(t->be, s->grad_ptr, acc, t->dp_count, BORA_DTYPE_F32,
                                  BORA_REDUCE_SUM);
        t->dp_comm_s += bora_now_s() - c0;
        if (st != BORA_OK)
            return bora_error_set(st, "step %" PRId64 ": %s", step, bora_error_get());
    }
    double c0 = bora_now_s();
    st = bops->all_gather(t->be, acc, s->grad_ptr, t->dp_count, BORA_DTYPE_F32);
    t->dp_comm_s += bora_now_s() - c0;
    if (st == BORA_OK)
        st = bora_dist_allgather(mine, t->dp_rows, (size_t)per * values * sizeof(double),
                                 "the step's losses");
    if (st != BORA_OK)
        return bora_error_set(st, "step %" PRId64 ": %s", step, bora_error_get());
    /* micro-batch m = jN + q is rank q's j-th */
    double total = 0;
    tr_model_metrics_begin(&t->model_metrics);
    for (int64_t m = 0; m < n_micro; m++) {
        const double *row =
            t->dp_rows + ((size_t)(m % t->world) * (size_t)per + (size_t)(m / t->world)) * values;
        total += row[0];
        if (t->model_metrics.n)
            tr_model_metrics_add(&t->model_metrics, row + 1);
    }
    *loss = total;
    if (!isfinite(total) && t->crash_on_nan)
        return BORA_ERR_INVALID;
    t->n_step_metrics = 0;
    size_t n_opt = 0;
    if (t->zero) /* a sharded optimizer: zero.c */
        st = tr_zero_apply(t, step, lr, norm);
    else {
        st = bora_apply_step(&t->apply, step, lr, norm, t->step_metrics, &n_opt);
        t->n_step_metrics = n_opt;
    }
    if (st != BORA_OK)
        return bora_error_set(st, "step %" PRId64 ": %s", step, bora_error_get());
    if (!isfinite(*norm) && t->crash_on_nan)
        return BORA_ERR_INVALID;
    return BORA_OK;
}

void tr_dp_free(trainer *t)
{
    if (t->dp_acc)
        ((const bora_backend_ops *)t->be_entry->ops)->buffer_free(t->be, t->dp_acc);
    t->dp_acc = NULL;
    free(t->dp_zero);
    free(t->dp_rows);
}
