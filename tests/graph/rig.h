/* tests/graph/rig.h — a graph, its store and the CPU backend, for the graph tests: load the
 * backend plugin, build with the public API, finalize, run, read back. */
#ifndef BORA_TEST_RIG_H
#define BORA_TEST_RIG_H

#include "config/config.h"
#include "graph/graph.h"
#include "plugin/registry.h"
#include "util/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct rig {
    bora_registry *reg;
    const bora_backend_ops *ops;
    bora_backend *be;
    g_store *store;
    bora_cfg *cfg;
} rig;

/* Load backend (cpu, cuda) from plugin_dir with num_threads (0: all cores; the CPU backend's
 * key): BORA_OK, or the backend's refusal (its message in bora_error_get()). Exits when the
 * plugin cannot be found. */
static inline bora_status rig_try_open_on(rig *r, const char *plugin_dir, const char *backend,
                                          int num_threads, uint64_t seed)
{
    memset(r, 0, sizeof *r);
    r->reg = bora_registry_new();
    if (bora_registry_add_dir(r->reg, plugin_dir, 1) != BORA_OK) {
        fprintf(stderr, "rig: %s\n", bora_error_get());
        exit(1);
    }
    bora_registry_load(r->reg);
    const bora_entry *e = bora_registry_find(r->reg, BORA_KIND_BACKEND, backend);
    if (!e) {
        fprintf(stderr, "rig: %s\n", bora_error_get());
        exit(1);
    }
    r->ops = (const bora_backend_ops *)e->ops;
    char yaml[64];
    snprintf(yaml, sizeof yaml, "num_threads: %d\n", num_threads);
    r->cfg = bora_cfg_new();
    bora_cfg_load_string(r->cfg, "rig.yaml", yaml, strlen(yaml));
    bora_status st = r->ops->create(&e->file->host, bora_cfg_root(r->cfg), &r->be);
    if (st != BORA_OK) {
        bora_cfg_free(r->cfg);
        bora_registry_free(r->reg);
        return st;
    }
    r->store = g_store_new(r->ops, r->be, backend, seed);
    return BORA_OK;
}

/* The CPU backend. */
static inline bora_status rig_try_open(rig *r, const char *plugin_dir, int num_threads,
                                       uint64_t seed)
{
    return rig_try_open_on(r, plugin_dir, "cpu", num_threads, seed);
}

/* rig_try_open, exiting on failure. */
static inline void rig_open(rig *r, const char *plugin_dir, int num_threads, uint64_t seed)
{
    if (rig_try_open(r, plugin_dir, num_threads, seed) != BORA_OK) {
        fprintf(stderr, "rig: %s\n", bora_error_get());
        exit(1);
    }
}

static inline void rig_close(rig *r)
{
    g_store_free(r->store);
    r->ops->destroy(r->be);
    bora_cfg_free(r->cfg);
    bora_registry_free(r->reg);
}

/* The adamw plugin's ops, and an optimizer made with its defaults. Exits on failure. */
static inline const bora_optimizer_ops *rig_adamw(rig *r, bora_optimizer **opt)
{
    const bora_entry *e = bora_registry_find(r->reg, BORA_KIND_OPTIMIZER, "adamw");
    const bora_optimizer_ops *ops = e ? (const bora_optimizer_ops *)e->ops : NULL;
    if (!ops || ops->create(&e->file->host, NULL, opt) != BORA_OK) {
        fprintf(stderr, "rig: adamw: %s\n", bora_error_get());
        exit(1);
    }
    return ops;
}

/* Pointer to a parameter's data by name: host memory on the CPU backend only (a device address
 * elsewhere; rig_copy works on any backend). */
static inline void *rig_param(rig *r, const char *name)
{
    long i = g_store_find(r->store, name);
    return i < 0 ? NULL : r->store->param_ptr + r->store->slots[i].offset;
}

static inline void *rig_grad(rig *r, const char *name)
{
    long i = g_store_find(r->store, name);
    return i < 0 ? NULL : r->store->grad_ptr + r->store->slots[i].offset;
}

/* Copy a parameter's (grad: its gradient's) bytes [at, at + n) out to dst (out) or in from dst
 * (!out), on any backend; BORA_OK or the backend's error. */
static inline bora_status rig_copy(rig *r, int grad, const char *name, size_t at, void *dst,
                                   size_t n, int out)
{
    long i = g_store_find(r->store, name);
    if (i < 0)
        return BORA_ERR_NOT_FOUND;
    bora_buffer *buf = grad ? r->store->grads : r->store->params;
    size_t off = r->store->slots[i].offset + at;
    return out ? r->ops->copy_out(r->be, dst, buf, off, n)
               : r->ops->copy_in(r->be, buf, off, dst, n);
}

#endif
