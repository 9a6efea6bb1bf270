/* core/config/check.c — declared keys: reading them with their types, filling in defaults,
 * and after everything is created, reporting every key that nothing read. */
#include "internal.h"

#include "../util/str.h"

#include <string.h>

const bora_config *bora_cfg_key_node(const bora_config *node)
{
    long i = node->parent && node->key ? cfg_map_find(node->parent, node->key) : -1;
    if (i >= 0 && node->parent->key_nodes[i]->line)
        return node->parent->key_nodes[i];
    return node;
}

void bora_cfg_claim(bora_config *node, const char *label, const bora_key *schema)
{
    if (!node)
        return;
    node->label = label ? cfg_strdup(node->cfg, label) : NULL;
    node->schema = schema;
}

bora_status bora_cfg_check_declared(bora_config *node, const bora_key *schema)
{
    bora_status result = BORA_OK;
    if (!node || !schema)
        return BORA_OK;
    for (const bora_key *k = schema; k->name; k++) {
        bora_status st = BORA_OK;
        int64_t i;
        double d;
        int b;
        const char *s;
        uint64_t u;
        size_t n;
        bora_config *v;
        switch (k->type) {
        case BORA_KEY_INT: st = bora_cfg_int(node, k->name, 0, &i); break;
        case BORA_KEY_FLOAT: st = bora_cfg_float(node, k->name, 0, &d); break;
        case BORA_KEY_BOOL: st = bora_cfg_bool(node, k->name, 0, &b); break;
        case BORA_KEY_STRING: st = bora_cfg_string(node, k->name, NULL, &s); break;
        case BORA_KEY_DURATION: st = bora_cfg_duration(node, k->name, 0, &d); break;
        case BORA_KEY_BYTES: st = bora_cfg_bytes(node, k->name, 0, &u); break;
        case BORA_KEY_LIST:
            st = bora_cfg_list_len(node, k->name, &n);
            /* The items belong to whoever reads the list; with no sub-schema, all of it. */
            if (st == BORA_OK && (v = bora_cfg_child(node, k->name)))
                cfg_mark_read(v);
            break;
        case BORA_KEY_MAP:
            v = bora_cfg_child(node, k->name);
            if (v && v->kind != BORA_NODE_MAP && v->kind != BORA_NODE_NULL)
                st = bora_cfg_error(node->cfg, v, "%s: expected a mapping of keys", k->name);
            else if (v)
                cfg_mark_read(v);
            break;
        default: /* components are checked by whoever knows the registry */
            bora_cfg_child(node, k->name);
            break;
        }
        if (st != BORA_OK)
            result = st;
        if (!k->default_value && cfg_map_find(node, k->name) < 0) {
            char path[512];
            bora_cfg_path(node, path, sizeof path);
            result = bora_cfg_error(node->cfg, bora_cfg_key_node(node),
                                    "missing required key '%s' in %s", k->name,
                                    node->label ? node->label : path);
        }
    }
    return result;
}

/* The known key closest to key, among what was asked of map and what its schema declares. */
static const char *closest(const bora_config *map, const char *key, const char *const *extra)
{
    const char *best = NULL;
    size_t best_d = (size_t)-1, limit = strlen(key) <= 3 ? 1 : strlen(key) <= 6 ? 2 : 3;
    for (size_t i = 0; i < map->n_asked; i++) {
        size_t d = bora_edit_distance(key, map->asked[i]);
        if (d < best_d && strcmp(key, map->asked[i]) != 0)
            best_d = d, best = map->asked[i];
    }
    for (const bora_key *k = map->schema; k && k->name; k++) {
        size_t d = bora_edit_distance(key, k->name);
        if (d < best_d && strcmp(key, k->name) != 0)
            best_d = d, best = k->name;
    }
    for (const char *const *e = extra; e && *e; e++) {
        size_t d = bora_edit_distance(key, *e);
        if (d < best_d && strcmp(key, *e) != 0)
            best_d = d, best = *e;
    }
    return best_d <= limit ? best : NULL;
}

/* How messages name a map: its component ("model (gpt2)") or its path ("trainer.checkpointer"). */
static const char *label_of(const bora_config *map, char *buf, size_t cap)
{
    if (map->label)
        return map->label;
    bora_cfg_path(map, buf, cap);
    return buf;
}

static bora_status check_unread(bora_config *node, const char *const *sections)
{
    bora_status result = BORA_OK;
    if (node->kind == BORA_NODE_MAP) {
        for (size_t i = 0; i < node->n; i++) {
            bora_config *k = node->key_nodes[i];
            if (!k->read) {
                char buf[512];
                int top = !node->parent && !node->label; /* the root of a whole configuration */
                const char *near = closest(node, node->keys[i], top ? sections : NULL);
                const char *where = label_of(node, buf, sizeof buf);
                if (top)
                    result = bora_cfg_error(node->cfg, k, "unknown section '%s'%s%s%s",
                                            node->keys[i], near ? "; did you mean '" : "",
                                            near ? near : "", near ? "'?" : "");
                else
                    result = bora_cfg_error(node->cfg, k, "unknown key '%s' in %s%s%s%s",
                                            node->keys[i], where, near ? "; did you mean '" : "",
                                            near ? near : "", near ? "'?" : "");
                continue;
            }
            if (check_unread(node->values[i], sections) != BORA_OK)
                result = BORA_ERR_CONFIG;
        }
    } else if (node->kind == BORA_NODE_LIST) {
        for (size_t i = 0; i < node->n; i++)
            if (check_unread(node->values[i], sections) != BORA_OK)
                result = BORA_ERR_CONFIG;
    }
    return result;
}

bora_status bora_cfg_check_unread(bora_cfg *cfg)
{
    static const char *const sections[] = {"model", "optimizer", "trainer", "data", NULL};
    return check_unread(cfg->root, sections);
}

/* Reorder map's keys as the schema lists them (others keep their order, after), so a shown
 * configuration reads like the documentation. A component's type comes first. */
static void order_by_schema(bora_config *map, const bora_key *schema)
{
    static const bora_key type_first = {"type", BORA_KEY_STRING, 0, NULL, NULL};
    size_t w = 0;
    for (const bora_key *k = &type_first; k->name; k = k == &type_first ? schema : k + 1) {
        long at = cfg_map_find(map, k->name);
        if (at < 0 || (size_t)at < w)
            continue;
        /* Rotate entry `at` down to position w. */
        const char *key = map->keys[at];
        bora_config *kn = map->key_nodes[at], *v = map->values[at];
        for (size_t i = (size_t)at; i > w; i--) {
            map->keys[i] = map->keys[i - 1];
            map->key_nodes[i] = map->key_nodes[i - 1];
            map->values[i] = map->values[i - 1];
        }
        map->keys[w] = key;
        map->key_nodes[w] = kn;
        map->values[w] = v;
        w++;
    }
}

bora_status bora_cfg_fill_defaults(bora_config *node, const bora_key *schema)
{
    if (!node || node->kind != BORA_NODE_MAP || !schema)
        return BORA_OK;
    bora_status result = BORA_OK;
    for (const bora_key *k = schema; k->name; k++) {
        if (!k->default_value || cfg_map_find(node, k->name) >= 0)
            continue;
        /* The default is YAML text too, so lists and maps come out as such. */
        bora_config *v =
            cfg_parse_value(node->cfg, "default", k->default_value, strlen(k->default_value));
        bora_config *kn = cfg_node(node->cfg, BORA_NODE_SCALAR, "default", 0, 0);
        if (!v || !kn) {
            result = BORA_ERR_CONFIG;
            continue;
        }
        kn->text = k->name;
        kn->text_len = strlen(k->name);
        cfg_mark_read(v);
        kn->read = 1;
        if (cfg_map_put(node, k->name, kn, v))
            return BORA_ERR_NOMEM;
    }
    order_by_schema(node, schema);
    return result;
}
