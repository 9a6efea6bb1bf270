/* core/config/config.h — the configuration tree: YAML with source positions, includes,
 * command-line overrides, typed getters, declared keys and the unread-key check.
 *
 * A configuration is one tree of nodes (maps, lists, scalars), each remembering the file, line
 * and column it came from (or the command-line override that set it). Reads go through typed
 * getters that mark what they touch; problems are collected as diagnostics, so every error in
 * a file is reported at once, each naming its position and, for unknown keys, the closest key
 * that would have been understood. */
#ifndef BORA_CORE_CONFIG_H
#define BORA_CORE_CONFIG_H

#include <bora/plugin.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum bora_node_kind {
    BORA_NODE_NULL = 0, /* an empty value: `key:` or `~` */
    BORA_NODE_SCALAR = 1,
    BORA_NODE_MAP = 2,
    BORA_NODE_LIST = 3
} bora_node_kind;

typedef struct bora_cfg bora_cfg; /* one configuration: its tree, arena and diagnostics */

/* A node. Plugins see it as the opaque bora_config. */
struct bora_config {
    bora_cfg *cfg;
    struct bora_config *parent; /* NULL for the root */
    const char *key;            /* this node's key in a parent map, or NULL */
    size_t index;               /* this node's index in a parent list */
    int kind;                   /* a bora_node_kind */
    const char *text;           /* scalar text (NUL-terminated), NULL otherwise */
    size_t text_len;            /* scalar length in bytes */
    int quoted;                 /* a quoted scalar is always a string */
    const char *origin;         /* file name, or the command-line override that set it */
    uint32_t line, col;         /* 1-based; 0 when the origin has no lines */
    size_t n;                   /* children of a map or list */
    size_t cap;
    const char **keys;              /* map keys (n of them) */
    struct bora_config **key_nodes; /* the key scalars, for their positions */
    struct bora_config **values;
    int read;               /* a getter touched it */
    int complained;         /* a type error about it was reported already */
    const char *label;      /* what reads it, for messages: "model (gpt2)", "trainer" */
    const bora_key *schema; /* declared keys of the component reading it, if any */
    const char **asked;     /* keys requested from this map, present or not (for suggestions) */
    size_t n_asked, cap_asked;
};

/* ---- loading ---------------------------------------------------------------------------- */

bora_cfg *bora_cfg_new(void);
void bora_cfg_free(bora_cfg *cfg);

/* Parse a YAML file and merge it into the configuration (maps merge key by key, anything else
 * replaces). `!include other.yaml` on a value loads that file there, relative to the including
 * file. Errors become diagnostics; returns BORA_ERR_CONFIG when there were any. */
bora_status bora_cfg_load_file(bora_cfg *cfg, const char *path);
/* The same for YAML text held in memory (name is used in messages). */
bora_status bora_cfg_load_string(bora_cfg *cfg, const char *name, const char *text, size_t len);

/* Apply one override: key is the dotted path without the leading "--" (trainer.num_train_steps)
 * and value is YAML flow text ("100", "[a.jsonl, b.jsonl]", "{type: sqlite}"). */
bora_status bora_cfg_override(bora_cfg *cfg, const char *key, const char *value);

/* Split a command line into config files and overrides and apply them in order:
 * CONFIG.yaml (a first positional), --config FILE (repeatable), --a.b=v and --a.b v.
 * Arguments it does not understand are errors; an option without a dot ("--forse") is an
 * unknown option, with the closest of options (the command's own, NULL-terminated; may be
 * NULL) suggested. */
bora_status bora_cfg_parse_args(bora_cfg *cfg, int argc, char **argv, const char *const *options);

/* The entry of known (NULL-terminated) within edit distance 2 of arg's name (the part before
 * any '='), the closest first; NULL when none is. */
const char *bora_cfg_closest_option(const char *arg, const char *const *known);

/* The root map (never NULL once loaded; an empty map before). */
struct bora_config *bora_cfg_root(bora_cfg *cfg);

/* ---- reading ---------------------------------------------------------------------------- */

/* Child of a map, marked read and remembered as asked; NULL when absent (or node is NULL). */
struct bora_config *bora_cfg_child(struct bora_config *node, const char *key);
/* Element i of a list. */
struct bora_config *bora_cfg_at(struct bora_config *node, size_t i);

/* Typed reads of node's key (or of node itself when key is NULL). A missing key yields def;
 * a wrong type adds a diagnostic ("expected an integer, got 'twelve'") and returns
 * BORA_ERR_CONFIG, leaving *out = def. */
bora_status bora_cfg_int(struct bora_config *node, const char *key, int64_t def, int64_t *out);
bora_status bora_cfg_float(struct bora_config *node, const char *key, double def, double *out);
bora_status bora_cfg_bool(struct bora_config *node, const char *key, int def, int *out);
bora_status bora_cfg_string(struct bora_config *node, const char *key, const char *def,
                            const char **out);
bora_status bora_cfg_duration(struct bora_config *node, const char *key, double def_s,
                              double *out_s);
bora_status bora_cfg_bytes(struct bora_config *node, const char *key, uint64_t def, uint64_t *out);
bora_status bora_cfg_list_len(struct bora_config *node, const char *key, size_t *out);

/* Parse scalar text as each type (no node involved); 0 on success. An integer may be written
 * 12, -3, 1_000, 0x40, or with a point or exponent when whole (2.0, 1e6, 1.5e3, 4e18); it fails
 * with BORA_PARSE_RANGE beyond int64 and BORA_PARSE_NOT_WHOLE for 1.5 or 1e-3. */
enum { BORA_PARSE_SYNTAX = -1, BORA_PARSE_RANGE = -2, BORA_PARSE_NOT_WHOLE = -3 };
int bora_parse_int(const char *s, int64_t *out);
int bora_parse_float(const char *s, double *out);
int bora_parse_bool(const char *s, int *out);
int bora_parse_duration(const char *s, double *out_s);
int bora_parse_bytes(const char *s, uint64_t *out);

/* A new map holding base's keys less those named in drop (NULL-terminated; may be NULL) and
 * those filled in as defaults, with over's keys (less drop) replacing or following them: an
 * optimizer group's configuration over the optimizer's. Its values are shallow copies that keep
 * the file, line and column they were written at, but every key's path is over's: a base key
 * copied in reads optimizer.groups[k].<key>. NULL when out of memory. */
struct bora_config *bora_cfg_overlay(struct bora_config *base, struct bora_config *over,
                                     const char *const *drop);

/* ---- declared keys and checks ----------------------------------------------------------- */

/* Attach a component's label and declared keys to its subtree. */
void bora_cfg_claim(struct bora_config *node, const char *label, const bora_key *schema);

/* Read every declared key of node with its declared type (so wrong types are reported and the
 * keys count as read), and report missing required keys. */
bora_status bora_cfg_check_declared(struct bora_config *node, const bora_key *schema);

/* Report every key under root that nothing read, with the closest known key. */
bora_status bora_cfg_check_unread(bora_cfg *cfg);

/* Fill in each declared key missing from node with its default (for `bora config show`). */
bora_status bora_cfg_fill_defaults(struct bora_config *node, const bora_key *schema);

/* ---- diagnostics ------------------------------------------------------------------------ */

/* Add a diagnostic at node's position (or the configuration as a whole when node is NULL). */
bora_status bora_cfg_error(bora_cfg *cfg, const struct bora_config *node, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
size_t bora_cfg_error_count(const bora_cfg *cfg);
/* Print every diagnostic, one per line, in order of file, line and column. */
void bora_cfg_print_errors(const bora_cfg *cfg, FILE *out);
/* The first diagnostic's text (for a one-line error), or NULL. */
const char *bora_cfg_first_error(const bora_cfg *cfg);

/* Where a missing key of map node is best reported: the key that names node ("model:"), or node
 * itself at the top or on a command line. */
const struct bora_config *bora_cfg_key_node(const struct bora_config *node);

/* The dotted path of node from the root ("trainer.checkpointer.keep[0].every"). */
void bora_cfg_path(const struct bora_config *node, char *buf, size_t cap);

/* Write node as YAML (block style, keys in order). */
void bora_cfg_write_yaml(const struct bora_config *node, FILE *out);
/* Write node as JSON (scalars typed as YAML 1.2 core schema would read them). */
void bora_cfg_write_json(const struct bora_config *node, FILE *out);

#endif
