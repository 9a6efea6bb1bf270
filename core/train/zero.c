/* core/train/zero.c — trainer.shard_optimizer: ZeRO-1 over the process group, with the bits of
 * one process.
 *
 * Shards are whole parameters, so every optimizer plugin builds its update unchanged (Muon's
 * orthogonalisation needs a whole matrix): parameter i goes to the rank whose equal share of the
 * parameters' bytes, ceil(P / N) of them, holds its middle byte, which gives each rank a run of
 * consecutive parameters, [b_r, b_r+1) of the parameter block. A rank keeps the optimizer state
 * of its run only (g_store.state_sharded) and its apply graph updates only those parameters.
 *
 * The gradients are summed as for plain data parallel (parallel.c); the global norm for clipping
 * is one process's: its apply graph sums each parameter's squared norm in f64 and adds those in
 * parameter order, so each rank computes its parameters' squared norms (the same reduction), the
 * ranks exchange them, and every rank adds all of them in parameter order on the host (IEEE f64
 * adds, as the graph's) and hands the sum to its apply graph, which takes the square root and the
 * clipping factor as one process's does. The optimizers' metrics (optim/...) are summed the same
 * way: each report stays apart in the sharded graph, and the host adds every rank's in the order
 * one process's graph makes them (tr_metrics.each). After the update each rank broadcasts its
 * run of parameters (the backend's broadcast, rank by rank), so every rank has the whole model.
 *
 * Checkpoints hold the whole state once, as without sharding: rank 0 gathers every rank's share
 * into host memory (g_store.state_host) and writes it; at a resume rank 0 reads it there and
 * sends each rank its share. So a checkpoint does not say how it was made, and a run resumes at
 * any rank count, sharded or not. */
#include "internal.h"

#include "../dist/dist.h"
#include "../util/log.h"
#include "../util/str.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void human(char *buf, size_t cap, double bytes)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int u = 0;
    while (bytes >= 1024 && u < 5)
        bytes /= 1024, u++;
    snprintf(buf, cap, u ? "%.1f %s" : "%.0f %s", bytes, units[u]);
}

bora_status tr_zero_build(trainer *t)
{
    g_store *s = t->store;
    size_t n = s->n_slots, world = (size_t)t->world, P = s->param_bytes;
    t->zero_owned = calloc(n ? n : 1, 1);
    t->zero_owner = calloc(n ? n : 1, sizeof *t->zero_owner);
    t->zero_local = calloc(n ? n : 1, sizeof *t->zero_local);
    t->zero_bounds = calloc(world + 1, sizeof *t->zero_bounds);
    t->zero_nsq = calloc(world, sizeof *t->zero_nsq);
    if (!t->zero_owned || !t->zero_owner || !t->zero_local || !t->zero_bounds || !t->zero_nsq)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    size_t share = P / world + (P % world != 0), trainable = 0;
    for (size_t i = 0; i < n; i++) {
        const g_slot *sl = &s->slots[i];
        if (i && sl->offset < s->slots[i - 1].offset + s->slots[i - 1].nbytes)
            return bora_error_set(BORA_ERR_INVALID,
                                  "trainer.shard_optimizer: parameter %s is not laid out after %s",
                                  sl->name, s->slots[i - 1].name);
        size_t mid = sl->offset + sl->nbytes / 2, r = share ? mid / share : 0;
        int q = (int)(r < world ? r : world - 1);
        t->zero_owner[i] = q;
        t->zero_owned[i] = q == t->rank;
        if (!(sl->flags & BORA_PARAM_FROZEN)) {
            t->zero_local[i] = t->zero_nsq[q]++;
            trainable++;
        }
    }
    if (!trainable)
        return bora_error_set(BORA_ERR_INVALID, "the model has no trainable parameters");
    /* rank r's run starts at its first parameter (the next rank's start when it has none) */
    t->zero_bounds[world] = P;
    for (size_t r = world; r-- > 1;) {
        t->zero_bounds[r] = t->zero_bounds[r + 1];
        for (size_t i = n; i-- > 0;)
            if ((size_t)t->zero_owner[i] >= r)
                t->zero_bounds[r] = s->slots[i].offset;
    }
    t->zero_max_sq = 0;
    for (size_t r = 0; r < world; r++)
        t->zero_max_sq = t->zero_nsq[r] > t->zero_max_sq ? t->zero_nsq[r] : t->zero_max_sq;
    s->state_sharded = 1;
    s->state_lo = t->zero_bounds[t->rank];
    s->state_span = t->zero_bounds[t->rank + 1] - t->zero_bounds[t->rank];
    t->zero = 1;
    return bora_apply_build_sharded(s, t->groups.n, t->groups.apply, t->groups.group_of,
                                    t->max_grad_norm, t->zero_owned, &t->apply);
}

static int report_order(const void *pa, const void *pb)
{
    const int64_t *a = pa, *b = pb; /* key, then where it was gathered (rank, index) */
    return a[0] != b[0] ? (a[0] < b[0] ? -1 : 1) : (a[1] > b[1]) - (a[1] < b[1]);
}

bora_status tr_zero_setup(trainer *t)
{
    const bora_apply *a = &t->apply;
    size_t world = (size_t)t->world, mine = a->metrics.n_reports;
    int64_t *counts = calloc(world, sizeof *counts);
    if (!counts)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    int64_t own = (int64_t)mine;
    bora_status st =
        bora_dist_allgather(&own, counts, sizeof own, "the optimizer's metric reports");
    size_t max_rep = 0, total = 0;
    for (size_t r = 0; r < world && st == BORA_OK; r++) {
        max_rep = (size_t)counts[r] > max_rep ? (size_t)counts[r] : max_rep;
        total += (size_t)counts[r];
    }
    /* every report's key, group, metric and elements, rank by rank */
    double *desc = calloc(world * (max_rep ? max_rep : 1) * 4, sizeof *desc);
    double *send = desc ? desc + (size_t)t->rank * max_rep * 4 : NULL;
    t->zero_reports = calloc(total ? total : 1, sizeof *t->zero_reports);
    t->zero_order = calloc(2 * (total ? total : 1), sizeof *t->zero_order);
    t->zero_buf = calloc(world * (t->zero_max_sq + max_rep) + 1 + mine, sizeof *t->zero_buf);
    if (st == BORA_OK && (!desc || !t->zero_reports || !t->zero_order || !t->zero_buf))
        st = bora_error_set(BORA_ERR_NOMEM, "out of memory");
    for (size_t k = 0; k < mine && st == BORA_OK; k++) {
        const struct tr_report *rp = &a->metrics.reports[k];
        send[4 * k] = (double)rp->key, send[4 * k + 1] = rp->group;
        send[4 * k + 2] = rp->metric, send[4 * k + 3] = rp->elements;
    }
    if (st == BORA_OK && max_rep)
        st = bora_dist_allgather(send, desc, max_rep * 4 * sizeof *desc,
                                 "the optimizer's metric reports");
    size_t at = 0;
    for (size_t r = 0; r < world && st == BORA_OK; r++)
        for (size_t k = 0; k < (size_t)counts[r]; k++, at++) {
            const double *d = desc + (r * max_rep + k) * 4;
            t->zero_order[2 * at] = (int64_t)d[0];
            t->zero_order[2 * at + 1] = (int64_t)(r * max_rep + k);
        }
    if (st == BORA_OK)
        qsort(t->zero_order, total, 2 * sizeof *t->zero_order, report_order);
    for (size_t k = 0; k < total && st == BORA_OK; k++) {
        const double *d = desc + (size_t)t->zero_order[2 * k + 1] * 4;
        t->zero_reports[k] =
            (struct tr_report){NULL, (int64_t)d[0], (int32_t)d[1], (int32_t)d[2], d[3]};
    }
    t->zero_total_reports = total;
    t->zero_max_rep = max_rep;
    free(desc);
    free(counts);
    if (st != BORA_OK)
        return st;
    /* what one process's graph refuses when built, refused here from every rank's reports
     * (every rank sees them all, so every rank refuses) */
    const char *names[TR_MAX_METRICS];
    int32_t reduce[TR_MAX_METRICS];
    size_t n_names = 0;
    for (size_t k = 0; k < total; k++) {
        const struct tr_report *rp = &t->zero_reports[k];
        const bora_optimizer_metric *d = &a->groups[rp->group].ops->metrics[rp->metric];
        size_t i = 0;
        while (i < n_names && strcmp(names[i], d->name) != 0)
            i++;
        if (i == n_names) {
            if (n_names == TR_MAX_METRICS)
                return bora_error_set(BORA_ERR_INVALID, "more than %d optimizer metrics",
                                      TR_MAX_METRICS);
            names[n_names] = d->name, reduce[n_names++] = d->reduce;
        } else if (reduce[i] != d->reduce)
            return bora_error_set(BORA_ERR_INVALID,
                                  "optimizer metric '%s' is reported with two different "
                                  "reductions",
                                  d->name);
    }
    /* the memory it saves: each rank's optimizer state, against every rank's whole copy */
    const g_store *s = t->store;
    if (!t->rank) {
        char line[1024], b[32];
        size_t len = 0;
        for (size_t r = 0; r < world && len < sizeof line - 64; r++) {
            human(b, sizeof b,
                  (double)(t->zero_bounds[r + 1] - t->zero_bounds[r]) * (double)s->n_states);
            len += (size_t)snprintf(line + len, sizeof line - len, "%s%s", r ? ", " : "", b);
        }
        human(b, sizeof b, (double)s->param_bytes * (double)s->n_states);
        printf("zero: optimizer state sharded over %d ranks: %s (rank by rank; %s each "
               "unsharded); parameters gathered after every step\n",
               t->world, line, b);
    }
    return BORA_OK;
}

/* The optimizers' metrics from every rank's reports, summed as one process's graph sums them. */
static size_t combine_metrics(trainer *t, const double *values, bora_metric *out)
{
    struct {
        const char *name;
        int32_t reduce;
        double sum, elements;
    } m[TR_MAX_METRICS];
    size_t n = 0;
    for (size_t k = 0; k < t->zero_total_reports; k++) {
        const struct tr_report *rp = &t->zero_reports[k];
        const bora_optimizer_metric *d = &t->apply.groups[rp->group].ops->metrics[rp->metric];
        double v = values[t->zero_order[2 * k + 1]];
        size_t i = 0;
        while (i < n && strcmp(m[i].name, d->name) != 0)
            i++;
        if (i == n) {
            if (n == TR_MAX_METRICS)
                continue; /* refused by tr_zero_setup */
            m[n].name = d->name, m[n].reduce = d->reduce, m[n].sum = v, m[n].elements = 0;
            n++;
        } else
            m[i].sum += v;
        m[i].elements += rp->elements;
    }
    for (size_t i = 0; i < n; i++) {
        double v = m[i].sum;
        if (m[i].reduce == BORA_METRIC_NORM)
            v = sqrt(v);
        else if (m[i].reduce == BORA_METRIC_MEAN)
            v = m[i].elements > 0 ? v / m[i].elements : 0.0;
        out[i] = (bora_metric){m[i].name, v};
    }
    return n;
}

bora_status tr_zero_apply(trainer *t, int64_t step, double lr, double *norm)
{
    const bora_backend_ops *bops = (const bora_backend_ops *)t->be_entry->ops;
    g_store *s = t->store;
    size_t world = (size_t)t->world, max_sq = t->zero_max_sq, max_rep = t->zero_max_rep;
    double *sq = t->zero_buf, *reps = sq + world * max_sq, *out = reps + world * max_rep;
    bora_status st = bora_apply_norm_parts(&t->apply, sq + (size_t)t->rank * max_sq);
    if (st == BORA_OK)
        st = bora_dist_allgather(sq + (size_t)t->rank * max_sq, sq, max_sq * sizeof *sq,
                                 "the gradient norm's parts");
    /* the squared norm as one process's graph adds it: parameter by parameter, in order */
    double total = 0;
    int first = 1;
    for (size_t i = 0; i < s->n_slots && st == BORA_OK; i++)
        if (!(s->slots[i].flags & BORA_PARAM_FROZEN)) {
            double v = sq[(size_t)t->zero_owner[i] * max_sq + t->zero_local[i]];
            total = first ? v : total + v;
            first = 0;
        }
    if (st == BORA_OK)
        st = bora_apply_step_sharded(&t->apply, step, lr, total, out);
    if (st != BORA_OK)
        return st;
    *norm = out[0];
    if (max_rep) {
        memcpy(reps + (size_t)t->rank * max_rep, out + 1,
               t->apply.metrics.n_reports * sizeof *reps);
        st = bora_dist_allgather(reps + (size_t)t->rank * max_rep, reps, max_rep * sizeof *reps,
                                 "the optimizer's metrics");
        if (st != BORA_OK)
            return st;
    }
    t->n_step_metrics = combine_metrics(t, reps, t->step_metrics);
    /* every rank's updated parameters to every rank, rank by rank */
    double c0 = bora_now_s();
    for (size_t r = 0; r < world && st == BORA_OK; r++) {
        size_t lo = t->zero_bounds[r], bytes = t->zero_bounds[r + 1] - lo;
        if (bytes)
            st = bops->broadcast(t->be, s->param_ptr + lo, bytes / sizeof(float), BORA_DTYPE_F32,
                                 (int32_t)r);
    }
    t->dp_comm_s += bora_now_s() - c0;
    if (st == BORA_OK && s->shadows)
        g_store_params_changed(s); /* the others' bf16 copies follow */
    return st;
}

/* This rank's share of the state (every block's run), copied to the host. */
static bora_status share_out(trainer *t, char **out, size_t *bytes)
{
    g_store *s = t->store;
    *bytes = s->state_span * s->n_states;
    *out = malloc(*bytes ? *bytes : 1);
    if (!*out)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory for the optimizer state");
    return *bytes ? s->ops->copy_out(s->backend, *out, s->states, 0, *bytes) : BORA_OK;
}

/* Rank q's share into (or out of) the whole state on the host, block by block. */
static void place(trainer *t, int q, char *share, int into_host)
{
    g_store *s = t->store;
    size_t lo = t->zero_bounds[q], span = t->zero_bounds[q + 1] - lo;
    for (size_t b = 0; b < s->n_states; b++) {
        char *host = s->state_host + b * s->param_bytes + lo;
        if (into_host)
            memcpy(host, share + b * span, span);
        else
            memcpy(share + b * span, host, span);
    }
}

bora_status tr_zero_host_state(trainer *t)
{
    g_store *s = t->store;
    size_t bytes;
    if (__builtin_mul_overflow(s->param_bytes, s->n_states, &bytes))
        return bora_error_set(BORA_ERR_NOMEM, "the optimizer state is too large");
    free(s->state_host);
    s->state_host = calloc(bytes ? bytes : 1, 1);
    return s->state_host ? BORA_OK
                         : bora_error_set(BORA_ERR_NOMEM,
                                          "out of memory for the whole optimizer state (rank 0 "
                                          "gathers it for a checkpoint)");
}

bora_status tr_zero_gather(trainer *t)
{
    g_store *s = t->store;
    char *share = NULL;
    size_t bytes;
    bora_status st = s->n_states ? share_out(t, &share, &bytes) : BORA_OK;
    if (!s->n_states)
        return BORA_OK;
    if (st == BORA_OK && t->rank)
        st = bora_dist_send(share, bytes, 0, "the optimizer state for a checkpoint");
    if (st == BORA_OK && !t->rank && (st = tr_zero_host_state(t)) == BORA_OK) {
        place(t, 0, share, 1);
        for (int q = 1; q < t->world && st == BORA_OK; q++) {
            size_t len = (t->zero_bounds[q + 1] - t->zero_bounds[q]) * s->n_states;
            char *theirs = malloc(len ? len : 1);
            st = theirs ? bora_dist_recv(theirs, len, q, "the optimizer state for a checkpoint")
                        : bora_error_set(BORA_ERR_NOMEM, "out of memory");
            if (st == BORA_OK)
                place(t, q, theirs, 1);
            free(theirs);
        }
    }
    free(share);
    return st;
}

bora_status tr_zero_scatter(trainer *t)
{
    g_store *s = t->store;
    if (!s->n_states)
        return BORA_OK;
    size_t mine = s->state_span * s->n_states;
    char *share = malloc(mine ? mine : 1);
    bora_status st = share ? BORA_OK : bora_error_set(BORA_ERR_NOMEM, "out of memory");
    if (st == BORA_OK && !t->rank) {
        for (int q = 1; q < t->world && st == BORA_OK; q++) {
            size_t len = (t->zero_bounds[q + 1] - t->zero_bounds[q]) * s->n_states;
            char *theirs = malloc(len ? len : 1);
            if (!theirs) {
                st = bora_error_set(BORA_ERR_NOMEM, "out of memory");
                break;
            }
            place(t, q, theirs, 0);
            st = bora_dist_send(theirs, len, q, "the optimizer state at a resume");
            free(theirs);
        }
        if (st == BORA_OK)
            place(t, 0, share, 0);
    } else if (st == BORA_OK)
        st = bora_dist_recv(share, mine, 0, "the optimizer state at a resume");
    if (st == BORA_OK && mine)
        st = s->ops->copy_in(s->backend, s->states, 0, share, mine);
    free(share);
    free(s->state_host);
    s->state_host = NULL;
    return st;
}

void tr_zero_free(trainer *t)
{
    if (t->store) {
        free(t->store->state_host);
        t->store->state_host = NULL;
    }
    free(t->zero_owned);
    free(t->zero_owner);
    free(t->zero_local);
    free(t->zero_bounds);
    free(t->zero_nsq);
    free(t->zero_buf);
    free(t->zero_reports);
    free(t->zero_order);
}
