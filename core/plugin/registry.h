/* core/plugin/registry.h — plugin discovery, loading, version checks and the component registry.
 *
 * The registry scans a search path for bora-*.so files, checks each descriptor's ABI before
 * running any plugin code, calls init() with a host table of the plugin's own, and keeps every
 * component a plugin adds, copied into a zeroed table of the host's size for its kind. Files it
 * cannot use are kept too, with a one-line reason, so commands can report them.
 */
#ifndef BORA_CORE_REGISTRY_H
#define BORA_CORE_REGISTRY_H

#include <bora/backend.h>
#include <bora/model.h>
#include <bora/optimizer.h>
#include <bora/tracker.h>
#include <stddef.h>

typedef enum bora_file_state {
    BORA_FILE_LOADED = 1,      /* loaded; its components are registered */
    BORA_FILE_UNAVAILABLE = 2, /* dlopen failed (e.g. a missing library): skipped quietly,
                                  fatal only when a configuration names one of its components */
    BORA_FILE_REFUSED = 3      /* not a usable plugin: no entry, ABI mismatch, failed init */
} bora_file_state;

typedef struct bora_registry bora_registry;

typedef struct bora_plugin_file {
    char *path;
    int state;    /* a bora_file_state */
    char *reason; /* why it is unavailable or refused (one line), else NULL */
    char *name;   /* the plugin's name from its descriptor, or NULL before it is read */
    char *version;
    uint32_t abi_major, abi_minor;
    bora_plugin desc; /* the descriptor, copied into a zeroed host-sized struct */
    bora_host host;   /* this plugin's own host table (ctx points back here) */
    bora_registry *reg;
    int in_init;          /* add() is only valid while init() runs */
    size_t n_components;  /* how many it registered */
    size_t n_add_refused; /* how many of its add() calls were refused */
} bora_plugin_file;

typedef struct bora_entry {
    int kind;                  /* a bora_kind */
    const bora_component *ops; /* host-sized copy; cast to the kind's ops type */
    bora_plugin_file *file;    /* the plugin it came from */
} bora_entry;

/* A refused component (duplicate, oversized table, missing member), with its reason. */
typedef struct bora_refusal {
    char *path;
    char *reason;
} bora_refusal;

struct bora_registry {
    char **dirs;
    size_t n_dirs;
    bora_plugin_file **files;
    size_t n_files;
    bora_entry *entries;
    size_t n_entries;
    bora_refusal *refusals; /* refused files and refused components, in load order */
    size_t n_refusals;
};

bora_registry *bora_registry_new(void);
void bora_registry_free(bora_registry *reg);

/* Append a directory to the search path. must_exist: a missing directory is an error (for
 * --plugin-dir), otherwise it is skipped. */
bora_status bora_registry_add_dir(bora_registry *reg, const char *dir, int must_exist);
/* Append the entries of a colon-separated list (BORA_PLUGIN_PATH); empty entries are ignored. */
bora_status bora_registry_add_path_list(bora_registry *reg, const char *list);
/* The plugin directory that belongs to this executable (DIR_OF_EXE/<relative plugin dir>). */
bora_status bora_default_plugin_dir(char *buf, size_t cap);

/* Load every bora-*.so of every directory, in search-path order and name order within a
 * directory; a file name seen in an earlier directory shadows later ones. Refusals are logged
 * as warnings, unavailable files at debug level. Returns BORA_OK even when files are refused. */
bora_status bora_registry_load(bora_registry *reg);

/* host->add() for plugin file f (see host.h). */
bora_status bora_registry_add_component(bora_plugin_file *f, const bora_component *ops);

/* The component (kind, name), or NULL with an error message saying why: unknown (listing the
 * available names), or provided by a file that could not be loaded (with the reason). */
const bora_entry *bora_registry_find(const bora_registry *reg, int kind, const char *name);
/* The backend a configuration names, or for "auto" the one whose probe() scores highest; NULL
 * with the error set when there is none. */
const bora_entry *bora_registry_pick_backend(const bora_registry *reg, const char *name);

/* Host-side names of kinds ("model", "optimizer", "backend", "tracker"). */
const char *bora_kind_name(int kind);
int bora_kind_parse(const char *s); /* 0 when unknown */
/* The host's size of the ops table of a kind, 0 when unknown. */
size_t bora_kind_ops_size(int kind);

#endif
