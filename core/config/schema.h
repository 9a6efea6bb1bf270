/* core/config/schema.h — bora's own configuration sections and whole-configuration checks. */
#ifndef BORA_CORE_SCHEMA_H
#define BORA_CORE_SCHEMA_H

#include "../plugin/registry.h"
#include "config.h"

typedef struct bora_section {
    const char *name; /* "trainer", "trainer.checkpointer", "model" */
    const char *summary;
    const bora_key *keys;
    int kind; /* for component sections (model, optimizer): their bora_kind */
} bora_section;

/* Every section, ended by a NULL name. */
const bora_section *bora_sections(void);
const bora_section *bora_section_find(const char *name);

/* node is a component's map ({type: NAME, ...}): find NAME among the components of kind and
 * claim node for it (its label and declared keys). An unknown or unavailable type, a missing
 * type or a node that is not a map is a diagnostic. */
bora_status bora_config_select(bora_config *node, int kind, const bora_registry *reg,
                               const bora_entry **out);

/* Check a whole configuration: core sections against their schemas, components against the
 * keys their plugins declare (looked up in reg by type), named backends against what loaded,
 * then every key nothing read. With fill, missing keys get their defaults (for `config show`).
 * Every problem is a diagnostic on cfg. */
bora_status bora_config_check(bora_cfg *cfg, const bora_registry *reg, int fill);

#endif
