/* core/config/yaml.c — YAML into a configuration tree (libyaml's event parser), with source
 * positions, `!include`, merging of several files, and command-line overrides. */
#include "internal.h"

#include "../util/str.h"
#include "schema.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <yaml.h>

typedef struct anchor {
    const char *name;
    bora_config *node;
} anchor;

typedef struct parse_ctx {
    bora_cfg *cfg;
    yaml_parser_t parser;
    const char *origin; /* the file name shown in messages */
    const char *dir;    /* directory that includes are relative to */
    const char *text;   /* the whole input, for hints about the failing character */
    size_t len;
    int positions; /* 0 for text from a command line: its lines and columns mean nothing */
    anchor *anchors;
    size_t n_anchors, cap_anchors;
    int failed;
} parse_ctx;

static bora_config *parse_value(parse_ctx *c, yaml_event_t *ev, int depth);

/* Report libyaml's error with its position, adding a hint for the common mistakes. */
static void parser_error(parse_ctx *c)
{
    yaml_parser_t *p = &c->parser;
    const char *problem = p->problem ? p->problem : "invalid YAML";
    uint32_t line = c->positions ? (uint32_t)p->problem_mark.line + 1 : 0;
    uint32_t col = c->positions ? (uint32_t)p->problem_mark.column + 1 : 0;
    const char *hint = "";
    size_t at = p->problem_mark.index;
    if (at < c->len && c->text[at] == '\t')
        hint = "; a tab is not allowed for indentation in YAML: indent with spaces";
    if (p->error == YAML_READER_ERROR) {
        cfg_error_at(c->cfg, c->origin, 0, 0, "not a UTF-8 text file: %s at byte %zu", problem,
                     p->problem_offset);
    } else if (p->context) {
        cfg_error_at(c->cfg, c->origin, line, col, "%s %s%s", p->context, problem, hint);
    } else {
        cfg_error_at(c->cfg, c->origin, line, col, "%s%s", problem, hint);
    }
    c->failed = 1;
}

static int next_event(parse_ctx *c, yaml_event_t *ev)
{
    if (c->failed)
        return 0;
    if (!yaml_parser_parse(&c->parser, ev)) {
        parser_error(c);
        return 0;
    }
    return 1;
}

static uint32_t line_of(const yaml_event_t *ev)
{
    return (uint32_t)ev->start_mark.line + 1;
}
static uint32_t col_of(const yaml_event_t *ev)
{
    return (uint32_t)ev->start_mark.column + 1;
}

static bora_config *fail_oom(parse_ctx *c)
{
    if (!c->failed)
        cfg_error_at(c->cfg, c->origin, 0, 0,
                     c->cfg->n_nodes >= BORA_CFG_MAX_NODES
                         ? "more than %d nodes (an alias expanded too many times?)"
                         : "out of memory after %d nodes",
                     (int)c->cfg->n_nodes);
    c->failed = 1;
    return NULL;
}

static void remember_anchor(parse_ctx *c, const yaml_char_t *name, bora_config *node)
{
    if (!name || !node)
        return;
    if (c->n_anchors == c->cap_anchors) {
        size_t cap = c->cap_anchors ? c->cap_anchors * 2 : 8;
        anchor *a = cfg_alloc(c->cfg, cap * sizeof *a);
        if (!a)
            return;
        if (c->n_anchors)
            memcpy(a, c->anchors, c->n_anchors * sizeof *a);
        c->anchors = a;
        c->cap_anchors = cap;
    }
    c->anchors[c->n_anchors++] = (anchor){cfg_strdup(c->cfg, (const char *)name), node};
}

/* An alias is a copy of its anchor's subtree, positioned where the alias stands. */
static bora_config *copy_tree(parse_ctx *c, const bora_config *src, uint32_t line, uint32_t col)
{
    bora_config *n = cfg_node(c->cfg, src->kind, c->origin, line, col);
    if (!n)
        return fail_oom(c);
    n->text = src->text;
    n->text_len = src->text_len;
    n->quoted = src->quoted;
    for (size_t i = 0; i < src->n; i++) {
        bora_config *v = copy_tree(c, src->values[i], line, col);
        if (!v)
            return NULL;
        if (src->kind == BORA_NODE_MAP) {
            if (cfg_map_put(n, src->keys[i], src->key_nodes[i], v))
                return fail_oom(c);
        } else if (cfg_list_push(n, v)) {
            return fail_oom(c);
        }
    }
    return n;
}

static bora_config *include_file(parse_ctx *c, const char *name, uint32_t line, uint32_t col);

static bora_config *parse_scalar(parse_ctx *c, yaml_event_t *ev)
{
    const char *tag = (const char *)ev->data.scalar.tag;
    const char *text = (const char *)ev->data.scalar.value;
    size_t len = ev->data.scalar.length;
    if (tag && strcmp(tag, "!include") == 0)
        return include_file(c, text, line_of(ev), col_of(ev));
    int plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
    int is_null = plain && (len == 0 || !strcmp(text, "~") || !strcmp(text, "null") ||
                            !strcmp(text, "Null") || !strcmp(text, "NULL"));
    bora_config *n = cfg_node(c->cfg, is_null ? BORA_NODE_NULL : BORA_NODE_SCALAR, c->origin,
                              line_of(ev), col_of(ev));
    if (!n)
        return fail_oom(c);
    if (!is_null) {
        n->text = cfg_strndup(c->cfg, text, len);
        n->text_len = len;
        n->quoted = !plain;
        if (!n->text)
            return fail_oom(c);
    }
    if (tag && strncmp(tag, "tag:yaml.org,2002:", 18) != 0) {
        cfg_error_at(c->cfg, c->origin, n->line, n->col,
                     "unknown tag '%s' (bora understands only !include)", tag);
    }
    return n;
}

static bora_config *parse_list(parse_ctx *c, yaml_event_t *start, int depth)
{
    bora_config *n = cfg_node(c->cfg, BORA_NODE_LIST, c->origin, line_of(start), col_of(start));
    if (!n)
        return fail_oom(c);
    for (;;) {
        yaml_event_t ev;
        if (!next_event(c, &ev))
            return NULL;
        if (ev.type == YAML_SEQUENCE_END_EVENT) {
            yaml_event_delete(&ev);
            return n;
        }
        bora_config *v = parse_value(c, &ev, depth + 1);
        yaml_event_delete(&ev);
        if (!v)
            return NULL;
        if (cfg_list_push(n, v))
            return fail_oom(c);
    }
}

static bora_config *parse_map(parse_ctx *c, yaml_event_t *start, int depth)
{
    bora_config *n = cfg_node(c->cfg, BORA_NODE_MAP, c->origin, line_of(start), col_of(start));
    if (!n)
        return fail_oom(c);
    for (;;) {
        yaml_event_t kev;
        if (!next_event(c, &kev))
            return NULL;
        if (kev.type == YAML_MAPPING_END_EVENT) {
            yaml_event_delete(&kev);
            return n;
        }
        bora_config *key = NULL;
        if (kev.type == YAML_SCALAR_EVENT && !kev.data.scalar.tag) {
            key = cfg_node(c->cfg, BORA_NODE_SCALAR, c->origin, line_of(&kev), col_of(&kev));
            if (key) {
                key->text = cfg_strndup(c->cfg, (const char *)kev.data.scalar.value,
                                        kev.data.scalar.length);
                key->text_len = kev.data.scalar.length;
            }
            if (!key || !key->text) {
                yaml_event_delete(&kev);
                return fail_oom(c);
            }
            yaml_event_delete(&kev);
        } else {
            /* A list or map used as a key: parse it to keep going, then refuse it. */
            uint32_t l = line_of(&kev), col = col_of(&kev);
            bora_config *junk = parse_value(c, &kev, depth + 1);
            yaml_event_delete(&kev);
            if (!junk)
                return NULL;
            cfg_error_at(c->cfg, c->origin, l, col, "a key must be a plain name");
        }
        yaml_event_t vev;
        if (!next_event(c, &vev))
            return NULL;
        bora_config *v = parse_value(c, &vev, depth + 1);
        yaml_event_delete(&vev);
        if (!v)
            return NULL;
        if (!key)
            continue;
        if (strlen(key->text) != key->text_len) {
            cfg_error_at(c->cfg, c->origin, key->line, key->col, "a key contains a NUL byte");
            continue;
        }
        long dup = cfg_map_find(n, key->text);
        if (dup >= 0) {
            const bora_config *first = n->key_nodes[dup];
            cfg_error_at(c->cfg, c->origin, key->line, key->col,
                         "duplicate key '%s' (first given at line %u)", key->text, first->line);
            continue;
        }
        if (cfg_map_put(n, key->text, key, v))
            return fail_oom(c);
    }
}

static bora_config *parse_value(parse_ctx *c, yaml_event_t *ev, int depth)
{
    if (depth > BORA_CFG_MAX_DEPTH) {
        cfg_error_at(c->cfg, c->origin, line_of(ev), col_of(ev), "nested more than %d levels deep",
                     BORA_CFG_MAX_DEPTH);
        c->failed = 1;
        return NULL;
    }
    bora_config *n = NULL;
    switch (ev->type) {
    case YAML_SCALAR_EVENT:
        n = parse_scalar(c, ev);
        if (n)
            remember_anchor(c, ev->data.scalar.anchor, n);
        return n;
    case YAML_SEQUENCE_START_EVENT:
        n = parse_list(c, ev, depth);
        if (n)
            remember_anchor(c, ev->data.sequence_start.anchor, n);
        return n;
    case YAML_MAPPING_START_EVENT:
        n = parse_map(c, ev, depth);
        if (n)
            remember_anchor(c, ev->data.mapping_start.anchor, n);
        return n;
    case YAML_ALIAS_EVENT:
        for (size_t i = c->n_anchors; i-- > 0;)
            if (strcmp(c->anchors[i].name, (const char *)ev->data.alias.anchor) == 0)
                return copy_tree(c, c->anchors[i].node, line_of(ev), col_of(ev));
        cfg_error_at(c->cfg, c->origin, line_of(ev), col_of(ev), "unknown alias '*%s'",
                     (const char *)ev->data.alias.anchor);
        c->failed = 1;
        return NULL;
    default:
        cfg_error_at(c->cfg, c->origin, line_of(ev), col_of(ev), "unexpected YAML event");
        c->failed = 1;
        return NULL;
    }
}

/* Parse one document; an input with no document at all yields NULL without an error. */
static bora_config *parse_text(bora_cfg *cfg, const char *origin, const char *dir, const char *text,
                               size_t len, int positions, int *empty)
{
    parse_ctx c = {
        .cfg = cfg, .origin = origin, .dir = dir, .text = text, .len = len, .positions = positions};
    *empty = 0;
    const char *nul = memchr(text, 0, len);
    if (nul) {
        uint32_t line = 1;
        for (const char *p = text; p < nul; p++)
            line += *p == '\n';
        cfg_error_at(cfg, origin, positions ? line : 0, 0,
                     "a NUL byte at offset %zu; is this a text file?", (size_t)(nul - text));
        return NULL;
    }
    if (!yaml_parser_initialize(&c.parser)) {
        cfg_error_at(cfg, origin, 0, 0, "out of memory");
        return NULL;
    }
    yaml_parser_set_input_string(&c.parser, (const unsigned char *)text, len);
    bora_config *root = NULL;
    yaml_event_t ev;
    int docs = 0;
    while (next_event(&c, &ev)) {
        yaml_event_type_t type = ev.type;
        if (type == YAML_STREAM_END_EVENT) {
            yaml_event_delete(&ev);
            break;
        }
        if (type == YAML_DOCUMENT_START_EVENT) {
            if (++docs > 1) {
                cfg_error_at(cfg, origin, line_of(&ev), col_of(&ev),
                             "a second YAML document ('---'); put everything in one");
                yaml_event_delete(&ev);
                c.failed = 1;
                break;
            }
        } else if (type != YAML_STREAM_START_EVENT && type != YAML_DOCUMENT_END_EVENT) {
            root = parse_value(&c, &ev, 0);
        }
        yaml_event_delete(&ev);
        if (c.failed)
            break;
    }
    yaml_parser_delete(&c.parser);
    if (c.failed)
        return NULL;
    *empty = docs == 0 || !root;
    return root;
}

static char *read_file(const char *path, size_t *len, char *why, size_t why_cap)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(why, why_cap, "%s", strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n == cap) {
            if (cap >= BORA_CFG_MAX_FILE) {
                snprintf(why, why_cap, "larger than %u MiB; is this a configuration file?",
                         BORA_CFG_MAX_FILE >> 20);
                free(buf);
                fclose(f);
                return NULL;
            }
            char *g = realloc(buf, cap * 2);
            if (!g)
                break;
            buf = g;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    int err = ferror(f);
    fclose(f);
    if (!buf || err) {
        snprintf(why, why_cap, "%s", buf ? "read error" : "out of memory");
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

static char *dir_of(bora_cfg *cfg, const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? cfg_strndup(cfg, path, (size_t)(slash - path) + (slash == path))
                 : cfg_strdup(cfg, ".");
}

/* Load a file as a tree. from_* is where it was named (an include), or NULL for the top. */
static bora_config *load_tree(bora_cfg *cfg, const char *path, const char *shown,
                              const char *from_origin, uint32_t from_line, uint32_t from_col,
                              int *empty)
{
    char real[PATH_MAX];
    *empty = 0;
    if (!realpath(path, real)) {
        if (from_origin)
            cfg_error_at(cfg, from_origin, from_line, from_col, "cannot include '%s': %s", shown,
                         strerror(errno));
        else
            cfg_error_at(cfg, path, 0, 0, "cannot read: %s", strerror(errno));
        return NULL;
    }
    struct stat st;
    if (stat(real, &st) != 0 || !S_ISREG(st.st_mode)) {
        /* A directory, a device or a pipe (/dev/stdin) is never a configuration. */
        if (from_origin)
            cfg_error_at(cfg, from_origin, from_line, from_col,
                         "cannot include '%s': not a regular file", shown);
        else
            cfg_error_at(cfg, path, 0, 0, "cannot read: not a regular file");
        return NULL;
    }
    for (size_t i = 0; i < cfg->n_including; i++) {
        if (strcmp(cfg->including[i], real) == 0) {
            char chain[2048] = "";
            size_t w = 0;
            for (size_t j = i; j < cfg->n_including && w < sizeof chain; j++)
                w += (size_t)snprintf(chain + w, sizeof chain - w, "%s -> ", cfg->including[j]);
            cfg_error_at(cfg, from_origin, from_line, from_col, "include cycle: %s%s", chain, real);
            return NULL;
        }
    }
    if (cfg->n_including >= BORA_CFG_MAX_INCLUDES) {
        cfg_error_at(cfg, from_origin, from_line, from_col, "includes nested more than %d deep",
                     BORA_CFG_MAX_INCLUDES);
        return NULL;
    }
    char why[256];
    size_t len = 0;
    char *text = read_file(path, &len, why, sizeof why);
    const char *origin = cfg_strdup(cfg, path);
    if (!text) {
        if (from_origin)
            cfg_error_at(cfg, from_origin, from_line, from_col, "cannot include '%s': %s", shown,
                         why);
        else
            cfg_error_at(cfg, origin, 0, 0, "cannot read: %s", why);
        return NULL;
    }
    cfg->including[cfg->n_including++] = cfg_strdup(cfg, real);
    bora_config *root = parse_text(cfg, origin, dir_of(cfg, path), text, len, 1, empty);
    cfg->n_including--;
    free(text);
    return root;
}

static bora_config *include_file(parse_ctx *c, const char *name, uint32_t line, uint32_t col)
{
    if (!*name) {
        cfg_error_at(c->cfg, c->origin, line, col, "!include needs a file name");
        return cfg_node(c->cfg, BORA_NODE_NULL, c->origin, line, col);
    }
    char *path = name[0] == '/' ? bora_strdup(name) : bora_path_join(c->dir, name);
    if (!path)
        return fail_oom(c);
    int empty;
    bora_config *n = load_tree(c->cfg, path, name, c->origin, line, col, &empty);
    free(path);
    /* A failed include is reported; parsing of the including file goes on around it. */
    if (!n)
        n = cfg_node(c->cfg, BORA_NODE_NULL, c->origin, line, col);
    return n ? n : fail_oom(c);
}

/* ---- merging ---------------------------------------------------------------------------- */

bora_status cfg_merge(bora_config *dst, bora_config *src)
{
    for (size_t i = 0; i < src->n; i++) {
        long at = cfg_map_find(dst, src->keys[i]);
        bora_config *v = src->values[i];
        if (at < 0) {
            if (cfg_map_put(dst, src->keys[i], src->key_nodes[i], v))
                return BORA_ERR_NOMEM;
        } else if (dst->values[at]->kind == BORA_NODE_MAP && v->kind == BORA_NODE_MAP) {
            bora_status st = cfg_merge(dst->values[at], v);
            if (st != BORA_OK)
                return st;
        } else {
            dst->values[at] = v;
            dst->key_nodes[at] = src->key_nodes[i];
            v->parent = dst;
            v->key = dst->keys[at];
        }
    }
    return BORA_OK;
}

static bora_status merge_root(bora_cfg *cfg, bora_config *tree, int empty, const char *origin)
{
    if (!tree) {
        if (empty)
            return cfg_error_at(cfg, origin, 0, 0,
                                "the file is empty; a configuration is a mapping of sections "
                                "(model:, optimizer:, trainer:, data:)");
        return BORA_ERR_CONFIG;
    }
    if (tree->kind != BORA_NODE_MAP)
        return bora_cfg_error(cfg, tree,
                              "a configuration is a mapping of sections (model:, trainer:, ...), "
                              "not a %s",
                              tree->kind == BORA_NODE_LIST ? "list" : "single value");
    return cfg_merge(cfg->root, tree) == BORA_OK ? BORA_OK : BORA_ERR_NOMEM;
}

bora_status bora_cfg_load_file(bora_cfg *cfg, const char *path)
{
    size_t before = cfg->n_diags;
    int empty;
    bora_config *tree = load_tree(cfg, path, path, NULL, 0, 0, &empty);
    bora_status st = merge_root(cfg, tree, empty, path);
    return st == BORA_OK && cfg->n_diags == before ? BORA_OK : BORA_ERR_CONFIG;
}

bora_status bora_cfg_load_string(bora_cfg *cfg, const char *name, const char *text, size_t len)
{
    size_t before = cfg->n_diags;
    int empty;
    const char *origin = cfg_strdup(cfg, name);
    bora_config *tree = parse_text(cfg, origin, ".", text, len, 1, &empty);
    bora_status st = merge_root(cfg, tree, empty, origin);
    return st == BORA_OK && cfg->n_diags == before ? BORA_OK : BORA_ERR_CONFIG;
}

/* ---- overrides -------------------------------------------------------------------------- */

static int is_index(const char *s, size_t *out)
{
    if (!*s)
        return 0;
    size_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || v > 100000000)
            return 0;
        v = v * 10 + (size_t)(*s - '0');
    }
    *out = v;
    return 1;
}

bora_config *cfg_parse_value(bora_cfg *cfg, const char *origin, const char *text, size_t len)
{
    int empty;
    size_t before = cfg->n_diags;
    bora_config *v = parse_text(cfg, origin, ".", text, len, 0, &empty);
    if (!v && cfg->n_diags == before)
        v = cfg_node(cfg, BORA_NODE_NULL, origin, 0, 0);
    return v;
}

static void clear_positions(bora_config *n)
{
    n->line = n->col = 0;
    for (size_t i = 0; i < n->n; i++) {
        clear_positions(n->values[i]);
        if (n->kind == BORA_NODE_MAP)
            n->key_nodes[i]->line = n->key_nodes[i]->col = 0;
    }
}

bora_status bora_cfg_override(bora_cfg *cfg, const char *key, const char *value)
{
    char label[512];
    snprintf(label, sizeof label, "command-line override --%s", key);
    const char *origin = cfg_strdup(cfg, label);
    if (!origin)
        return BORA_ERR_NOMEM;
    size_t klen = strlen(key);
    if (klen == 0 || key[0] == '.' || key[klen - 1] == '.' || strstr(key, ".."))
        return cfg_error_at(cfg, origin, 0, 0, "'%s' is not a key path; write --section.key=value",
                            key);
    if (!strchr(key, '.'))
        return cfg_error_at(cfg, origin, 0, 0,
                            "'%s' is a whole section; override one key, e.g. --%s.KEY=value", key,
                            key);

    /* The value is YAML: 100, true, [a, b], {type: sqlite}, or plain text. */
    bora_config *v = cfg_parse_value(cfg, origin, value, strlen(value));
    if (!v)
        return BORA_ERR_CONFIG;
    if (v->kind == BORA_NODE_NULL && !*value) {
        v->kind = BORA_NODE_SCALAR; /* --data.cache_dir= is the empty string */
        v->text = "";
        v->quoted = 1;
    }
    /* Positions inside the value mean nothing on a command line. */
    clear_positions(v);

    bora_config *node = cfg->root;
    char *path = bora_strdup(key);
    if (!path)
        return BORA_ERR_NOMEM;
    bora_status st = BORA_OK;
    char *save = NULL;
    char *seg = strtok_r(path, ".", &save);
    while (seg) {
        char *next = strtok_r(NULL, ".", &save);
        size_t idx;
        if (node->kind == BORA_NODE_LIST) {
            if (!is_index(seg, &idx) || idx >= node->n) {
                st = cfg_error_at(cfg, origin, 0, 0,
                                  "'%s' is not an index of the list it names (it has %zu items)",
                                  seg, node->n);
                break;
            }
            if (!next) {
                node->values[idx] = v;
                v->parent = node;
                v->index = idx;
                break;
            }
            node = node->values[idx];
        } else if (node->kind == BORA_NODE_MAP) {
            long at = cfg_map_find(node, seg);
            const char *k = at >= 0 ? node->keys[at] : cfg_strdup(cfg, seg);
            bora_config *kn = cfg_node(cfg, BORA_NODE_SCALAR, origin, 0, 0);
            if (!k || !kn) {
                st = BORA_ERR_NOMEM;
                break;
            }
            kn->text = k;
            kn->text_len = strlen(k);
            if (!next) {
                if (at >= 0 && node->values[at]->kind == BORA_NODE_MAP &&
                    v->kind == BORA_NODE_MAP) {
                    st = cfg_merge(node->values[at], v);
                } else if (at >= 0) {
                    node->values[at] = v;
                    node->key_nodes[at] = kn;
                    v->parent = node;
                    v->key = k;
                } else if (cfg_map_put(node, k, kn, v)) {
                    st = BORA_ERR_NOMEM;
                }
                break;
            }
            if (at < 0 || node->values[at]->kind == BORA_NODE_NULL) {
                bora_config *m = cfg_node(cfg, BORA_NODE_MAP, origin, 0, 0);
                if (!m) {
                    st = BORA_ERR_NOMEM;
                    break;
                }
                if (at < 0) {
                    if (cfg_map_put(node, k, kn, m)) {
                        st = BORA_ERR_NOMEM;
                        break;
                    }
                } else {
                    node->values[at] = m;
                    m->parent = node;
                    m->key = k;
                }
                node = m;
            } else {
                node = node->values[at];
            }
        } else {
            char where[256];
            bora_cfg_path(node, where, sizeof where);
            st = node->line
                     ? cfg_error_at(cfg, origin, 0, 0,
                                    "cannot set a key inside '%s': it is a single value "
                                    "(set at %s:%u:%u)",
                                    where, node->origin, node->line, node->col)
                     : cfg_error_at(cfg, origin, 0, 0,
                                    "cannot set a key inside '%s': it is a single value", where);
            break;
        }
        seg = next;
    }
    free(path);
    return st;
}

/* `--trainer=...` names a whole section: bora_cfg_override explains how to override in it. */
static int is_section(const char *arg)
{
    char name[64];
    size_t len = strcspn(arg, "=");
    if (len >= sizeof name)
        return 0;
    memcpy(name, arg, len);
    name[len] = 0;
    return bora_section_find(name) != NULL;
}

const char *bora_cfg_closest_option(const char *arg, const char *const *known)
{
    size_t len = strcspn(arg, "="), best_d = 3;
    const char *best = NULL;
    char name[128];
    if (len >= sizeof name)
        return NULL;
    memcpy(name, arg, len);
    name[len] = 0;
    for (; known && *known; known++) {
        size_t d = bora_edit_distance(name, *known);
        if (d < best_d) {
            best_d = d;
            best = *known;
        }
    }
    return best;
}

/* An option the command does not take (--frobnicate, --forse): every override names a key
 * inside a section, so a name without a dot that is not a section cannot be one. */
static bora_status unknown_option(bora_cfg *cfg, const char *a, const char *const *options)
{
    static const char *const own[] = {"--config", NULL};
    const char *near = bora_cfg_closest_option(a, options);
    if (!near)
        near = bora_cfg_closest_option(a, own);
    int len = (int)strcspn(a, "=");
    if (near && (int)strlen(near) == len && !strncmp(a, near, (size_t)len))
        return cfg_error_at(cfg, "command line", 0, 0, "%s takes no value (give it as %s alone)",
                            near, near);
    if (near)
        return cfg_error_at(cfg, "command line", 0, 0, "unknown option '%.*s'; did you mean '%s'?",
                            len, a, near);
    return cfg_error_at(cfg, "command line", 0, 0,
                        "unknown option '%.*s' (an override names a key: --section.key=value)", len,
                        a);
}

bora_status bora_cfg_parse_args(bora_cfg *cfg, int argc, char **argv, const char *const *options)
{
    bora_status st = BORA_OK;
    int files = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--config") == 0 || strncmp(a, "--config=", 9) == 0) {
            const char *path = a[8] == '=' ? a + 9 : (i + 1 < argc ? argv[++i] : NULL);
            if (!path || !*path) {
                st = cfg_error_at(cfg, "command line", 0, 0, "--config needs a file");
                continue;
            }
            if (bora_cfg_load_file(cfg, path) != BORA_OK)
                st = BORA_ERR_CONFIG;
            files++;
        } else if (strncmp(a, "--", 2) == 0 && a[2] && !memchr(a, '.', strcspn(a, "=")) &&
                   !is_section(a + 2)) {
            st = unknown_option(cfg, a, options);
        } else if (strncmp(a, "--", 2) == 0 && a[2]) {
            const char *eq = strchr(a, '=');
            char *key = eq ? bora_strndup(a + 2, (size_t)(eq - a - 2)) : bora_strdup(a + 2);
            if (!key)
                return BORA_ERR_NOMEM;
            const char *value = eq ? eq + 1 : NULL;
            if (!value) {
                if (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0)
                    value = argv[++i];
                else {
                    st =
                        cfg_error_at(cfg, "command line", 0, 0,
                                     "--%s needs a value: --%s=VALUE or --%s VALUE", key, key, key);
                    free(key);
                    continue;
                }
            }
            if (bora_cfg_override(cfg, key, value) != BORA_OK)
                st = BORA_ERR_CONFIG;
            free(key);
        } else if (a[0] != '-' && files == 0) {
            if (bora_cfg_load_file(cfg, a) != BORA_OK)
                st = BORA_ERR_CONFIG;
            files++;
        } else {
            st = cfg_error_at(cfg, "command line", 0, 0,
                              "unexpected argument '%s' (a configuration file comes first; more "
                              "files with --config FILE, overrides as --section.key=value)",
                              a);
        }
    }
    return st;
}
