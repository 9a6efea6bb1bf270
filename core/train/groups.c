/* core/train/groups.c — optimizer parameter groups (see groups.h). The configuration's checks
 * (core/config/schema.c) have already read every key of every group, so what is read here is
 * known to be well formed. */
#include "groups.h"

#include "../util/log.h"

#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether every selector of group item holds for parameter s. */
static int group_takes(bora_config *item, const g_slot *s)
{
    bora_config *match = bora_cfg_child(item, "match");
    if (match && match->kind == BORA_NODE_SCALAR && fnmatch(match->text, s->name, 0) != 0)
        return 0;
    if (match && match->kind == BORA_NODE_LIST) {
        int any = 0;
        for (size_t i = 0; i < match->n && !any; i++)
            any = fnmatch(match->values[i]->text, s->name, 0) == 0;
        if (!any)
            return 0;
    }
    int64_t ndim = -1;
    int no_decay = -1;
    bora_cfg_int(item, "ndim", -1, &ndim);
    bora_cfg_bool(item, "no_decay", -1, &no_decay);
    if (ndim >= 0 && ndim != s->ndim)
        return 0;
    if (no_decay >= 0 && no_decay != !!(s->flags & BORA_PARAM_NO_DECAY))
        return 0;
    return 1;
}

bora_status bora_opt_groups_make(bora_config *opt, const bora_registry *reg, const bora_entry *base,
                                 bora_optimizer *base_opt, double learning_rate,
                                 const g_store *store, bora_opt_groups *out)
{
    memset(out, 0, sizeof *out);
    bora_config *list = bora_cfg_child(opt, "groups");
    size_t n = 1 + (list && list->kind == BORA_NODE_LIST ? list->n : 0);
    out->g = calloc(n, sizeof *out->g);
    out->apply = calloc(n, sizeof *out->apply);
    out->group_of = calloc(store->n_slots ? store->n_slots : 1, sizeof *out->group_of);
    if (!out->g || !out->apply || !out->group_of) {
        bora_opt_groups_free(out);
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    }
    out->n = n;
    out->g[0] = (bora_opt_group){base, base_opt, NULL, learning_rate, 0, 0};
    static const char *const drop[] = {"groups", "match", "ndim", "no_decay", NULL};
    for (size_t k = 1; k < n; k++) {
        bora_opt_group *gr = &out->g[k];
        gr->node = list->values[k - 1];
        const char *type = base->ops->name;
        bora_cfg_string(gr->node, "type", base->ops->name, &type);
        gr->entry = bora_registry_find(reg, BORA_KIND_OPTIMIZER, type);
        bora_cfg_float(gr->node, "learning_rate", learning_rate, &gr->learning_rate);
        bora_config *merged = bora_cfg_overlay(opt, gr->node, drop);
        if (!gr->entry || !merged) {
            bora_opt_groups_free(out);
            return gr->entry ? bora_error_set(BORA_ERR_NOMEM, "out of memory")
                             : bora_error_set(BORA_ERR_CONFIG, "optimizer.groups[%zu].type: %s",
                                              k - 1, bora_error_get());
        }
        if (learning_rate == 0 && gr->learning_rate != 0) {
            bora_opt_groups_free(out);
            return bora_error_set(BORA_ERR_CONFIG,
                                  "optimizer.groups[%zu].learning_rate: a group's rate scales "
                                  "the schedule of optimizer.learning_rate, which is 0; give "
                                  "optimizer.learning_rate a rate",
                                  k - 1);
        }
        const bora_optimizer_ops *ops = (const bora_optimizer_ops *)gr->entry->ops;
        if (ops->create(&gr->entry->file->host, merged, &gr->opt) != BORA_OK) {
            char why[1024];
            snprintf(why, sizeof why, "%s", bora_error_get());
            gr->opt = NULL;
            bora_opt_groups_free(out);
            return bora_error_set(BORA_ERR_CONFIG, "optimizer.groups[%zu]: %s", k - 1, why);
        }
    }
    for (size_t i = 0; i < store->n_slots; i++) {
        const g_slot *s = &store->slots[i];
        size_t k = 1;
        while (k < n && !group_takes(out->g[k].node, s))
            k++;
        k = k < n ? k : 0;
        out->group_of[i] = k;
        out->g[k].n_params++;
        out->g[k].n_values += s->nbytes / bora_dtype_size(s->dtype);
    }
    for (size_t k = 0; k < n; k++) {
        out->apply[k] = (bora_apply_group){
            (const bora_optimizer_ops *)out->g[k].entry->ops, out->g[k].opt,
            k && learning_rate != 0 ? out->g[k].learning_rate / learning_rate : 1.0};
        if (k && !out->g[k].n_params)
            bora_log(BORA_LOG_WARN,
                     "optimizer.groups[%zu] matches no parameter: every parameter it selects "
                     "went to an earlier group, or none has such a name, ndim or no_decay",
                     k - 1);
    }
    return BORA_OK;
}

/* A count of values as 7.1M, 350K or 12. */
static void count_text(uint64_t n, char *buf, size_t cap)
{
    if (n >= 1000000)
        snprintf(buf, cap, "%.1fM", (double)n / 1e6);
    else if (n >= 1000)
        snprintf(buf, cap, "%.1fK", (double)n / 1e3);
    else
        snprintf(buf, cap, "%llu", (unsigned long long)n);
}

void bora_opt_groups_summary(const bora_opt_groups *gs, char *buf, size_t cap)
{
    size_t w = 0;
    buf[0] = 0;
    for (size_t k = 0; k < gs->n && w < cap; k++) {
        char values[32], label[48] = "";
        count_text(gs->g[k].n_values, values, sizeof values);
        if (k)
            snprintf(label, sizeof label, " (groups[%zu])", k - 1);
        w += (size_t)snprintf(buf + w, cap - w, "%s%s%s for %zu%s (%s)", k ? ", " : "",
                              gs->g[k].entry->ops->name, label, gs->g[k].n_params,
                              k ? "" : " parameters", values);
    }
}

void bora_opt_groups_free(bora_opt_groups *gs)
{
    for (size_t k = 1; gs->g && k < gs->n; k++)
        if (gs->g[k].opt)
            ((const bora_optimizer_ops *)gs->g[k].entry->ops)->destroy(gs->g[k].opt);
    free(gs->g);
    free(gs->apply);
    free(gs->group_of);
    memset(gs, 0, sizeof *gs);
}
