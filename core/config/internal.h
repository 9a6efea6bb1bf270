/* core/config/internal.h — what the configuration's source files share. */
#ifndef BORA_CORE_CONFIG_INTERNAL_H
#define BORA_CORE_CONFIG_INTERNAL_H

#include "config.h"

#include <bora/host.h>

typedef struct bora_config bora_config;

/* Limits that keep hostile input from exhausting the stack or memory. */
#define BORA_CFG_MAX_DEPTH 64         /* nesting of maps and lists */
#define BORA_CFG_MAX_NODES 1000000    /* nodes per configuration (alias expansion) */
#define BORA_CFG_MAX_FILE (16u << 20) /* bytes per configuration file */
#define BORA_CFG_MAX_INCLUDES 16      /* include depth */

typedef struct cfg_diag {
    const char *origin;
    uint32_t line, col;
    size_t seq;
    char *text;
} cfg_diag;

struct bora_cfg {
    struct chunk *chunks;
    bora_config *root;
    size_t n_nodes;
    cfg_diag *diags;
    size_t n_diags, cap_diags;
    const char *including[BORA_CFG_MAX_INCLUDES]; /* real paths of the files being loaded */
    size_t n_including;
};

void *cfg_alloc(bora_cfg *cfg, size_t size); /* zeroed; NULL when out of memory */
char *cfg_strdup(bora_cfg *cfg, const char *s);
char *cfg_strndup(bora_cfg *cfg, const char *s, size_t n);
bora_config *cfg_node(bora_cfg *cfg, int kind, const char *origin, uint32_t line, uint32_t col);
int cfg_map_put(bora_config *map, const char *key, bora_config *key_node, bora_config *value);
int cfg_list_push(bora_config *list, bora_config *value);
long cfg_map_find(const bora_config *map, const char *key);
bora_status cfg_error_at(bora_cfg *cfg, const char *origin, uint32_t line, uint32_t col,
                         const char *fmt, ...) BORA_PRINTF(5, 6);

/* Merge src into dst (both maps): maps merge key by key, anything else replaces. */
bora_status cfg_merge(bora_config *dst, bora_config *src);

/* Parse YAML text as one value in cfg's arena (an empty text is a null node); NULL with a
 * diagnostic when it is not valid YAML. */
bora_config *cfg_parse_value(bora_cfg *cfg, const char *origin, const char *text, size_t len);

/* Mark node and everything under it as read. */
void cfg_mark_read(bora_config *node);

#endif
