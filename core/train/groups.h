/* core/train/groups.h — optimizer parameter groups (optimizer.groups, docs/optimizers.md): an
 * optimizer instance per group, made from the group's keys over the optimizer's, and the group
 * each parameter goes to (the first whose selectors all hold; the base optimizer otherwise). */
#ifndef BORA_CORE_GROUPS_H
#define BORA_CORE_GROUPS_H

#include "../config/config.h"
#include "../graph/graph.h"
#include "../plugin/registry.h"
#include "apply.h"

typedef struct bora_opt_group {
    const bora_entry *entry; /* its optimizer plugin */
    bora_optimizer *opt;     /* group 0's belongs to the caller */
    bora_config *node;       /* optimizer.groups[k - 1]; NULL for group 0 */
    double learning_rate;    /* its peak rate */
    size_t n_params;         /* parameters it updates */
    uint64_t n_values;       /* and their elements */
} bora_opt_group;

typedef struct bora_opt_groups {
    size_t n;                /* 1 + the number of optimizer.groups */
    bora_opt_group *g;       /* g[0] the base optimizer, g[k] optimizer.groups[k - 1] */
    bora_apply_group *apply; /* the same, as the apply graph takes them */
    size_t *group_of;        /* per parameter of the store */
} bora_opt_groups;

/* Make the groups of the optimizer section opt (checked by bora_config_check) over the store's
 * parameters: base is the optimizer's plugin and base_opt its instance, learning_rate its peak.
 * A group that matches no parameter is a warning. */
bora_status bora_opt_groups_make(bora_config *opt, const bora_registry *reg, const bora_entry *base,
                                 bora_optimizer *base_opt, double learning_rate,
                                 const g_store *store, bora_opt_groups *out);
/* Who updates what, for the log: "muon for 24 parameters (7.1M), adamw (groups[0]) for 10
 * (3.2M)". */
void bora_opt_groups_summary(const bora_opt_groups *gs, char *buf, size_t cap);
/* Destroy the groups' instances (not group 0's) and free the rest. */
void bora_opt_groups_free(bora_opt_groups *gs);

#endif
