/* core/plugin/host.c — the functions behind bora_host: registration, messages, memory and
 * configuration access.
 * A component created with cfg == NULL (no section in the configuration) reads every key's
 * default. */
#include "host.h"

#include "../config/schema.h"
#include "../util/log.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static bora_plugin_file *file_of(const bora_host *h)
{
    return (bora_plugin_file *)h->ctx;
}
static const char *name_of(const bora_host *h)
{
    const bora_plugin_file *f = file_of(h);
    return f && f->name ? f->name : "plugin";
}

static bora_status host_add(const bora_host *h, const bora_component *ops)
{
    return bora_registry_add_component(file_of(h), ops);
}

static void host_log(const bora_host *h, int32_t level, const char *fmt, ...) BORA_PRINTF(3, 4);
static void host_log(const bora_host *h, int32_t level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bora_logv(level, name_of(h), fmt, ap);
    va_end(ap);
}

static bora_status host_fail(const bora_host *h, bora_status code, const char *fmt, ...)
    BORA_PRINTF(3, 4);
static bora_status host_fail(const bora_host *h, bora_status code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bora_status st = bora_error_setv(code, name_of(h), fmt, ap);
    va_end(ap);
    return st;
}

static void *host_alloc(const bora_host *h, size_t size, size_t align)
{
    (void)h;
    if (align < sizeof(void *))
        align = sizeof(void *);
    if (align & (align - 1))
        return NULL;
    void *p = NULL;
    if (posix_memalign(&p, align, size ? size : 1) != 0)
        return NULL;
    memset(p, 0, size ? size : 1);
    return p;
}

static void host_free(const bora_host *h, void *p)
{
    (void)h;
    free(p);
}

/* ---- configuration: the host getters read the configuration tree (core/config) ------------ */

/* Nodes are handed to plugins as const; reading marks them, which is the host's business. */
#define NODE(n) ((bora_config *)(uintptr_t)(n))

static const bora_config *cfg_child(const bora_host *h, const bora_config *node, const char *key)
{
    (void)h;
    return bora_cfg_child(NODE(node), key);
}
static bora_status cfg_int(const bora_host *h, const bora_config *node, const char *key,
                           int64_t def, int64_t *out)
{
    (void)h;
    return bora_cfg_int(NODE(node), key, def, out);
}
static bora_status cfg_float(const bora_host *h, const bora_config *node, const char *key,
                             double def, double *out)
{
    (void)h;
    return bora_cfg_float(NODE(node), key, def, out);
}
static bora_status cfg_bool(const bora_host *h, const bora_config *node, const char *key, int def,
                            int *out)
{
    (void)h;
    return bora_cfg_bool(NODE(node), key, def, out);
}
static bora_status cfg_string(const bora_host *h, const bora_config *node, const char *key,
                              const char *def, const char **out)
{
    (void)h;
    return bora_cfg_string(NODE(node), key, def, out);
}
static bora_status cfg_duration(const bora_host *h, const bora_config *node, const char *key,
                                double def, double *out)
{
    (void)h;
    return bora_cfg_duration(NODE(node), key, def, out);
}
static bora_status cfg_bytes(const bora_host *h, const bora_config *node, const char *key,
                             uint64_t def, uint64_t *out)
{
    (void)h;
    return bora_cfg_bytes(NODE(node), key, def, out);
}
static bora_status cfg_list_len(const bora_host *h, const bora_config *node, const char *key,
                                size_t *out)
{
    (void)h;
    return bora_cfg_list_len(NODE(node), key, out);
}
static const bora_config *cfg_list_at(const bora_host *h, const bora_config *node, const char *key,
                                      size_t index)
{
    (void)h;
    bora_config *list = key ? bora_cfg_child(NODE(node), key) : NODE(node);
    return bora_cfg_at(list, index);
}
static bora_status cfg_component(const bora_host *h, const bora_config *node, const char *key,
                                 int32_t kind, size_t index, size_t *count,
                                 const bora_component **ops, const bora_config **sub)
{
    bora_config *v = key ? bora_cfg_child(NODE(node), key) : NODE(node);
    *count = 0;
    *ops = NULL;
    *sub = NULL;
    if (!v || v->kind == BORA_NODE_NULL)
        return BORA_OK;
    if (v->kind != BORA_NODE_MAP && v->kind != BORA_NODE_LIST) {
        char path[256];
        bora_cfg_path(v, path, sizeof path);
        return bora_cfg_error(v->cfg, v, "%s: expected {type: NAME, ...} or a list of them", path);
    }
    *count = v->kind == BORA_NODE_MAP ? 1 : v->n;
    if (index >= *count)
        return BORA_OK;
    bora_config *item = v->kind == BORA_NODE_MAP ? v : bora_cfg_at(v, index);
    const bora_entry *e;
    bora_status st = bora_config_select(item, kind, file_of(h)->reg, &e);
    if (st != BORA_OK)
        return st;
    *ops = e->ops;
    *sub = item;
    return BORA_OK;
}
#undef NODE

void bora_host_init_for_plugin(bora_host *h, bora_plugin_file *f)
{
    *h = (bora_host){
        .struct_size = sizeof(bora_host),
        .abi_major = BORA_ABI_MAJOR,
        .abi_minor = BORA_ABI_MINOR,
        .ctx = f,
        .add = host_add,
        .log = host_log,
        .fail = host_fail,
        .alloc = host_alloc,
        .free = host_free,
        .config_child = cfg_child,
        .config_int = cfg_int,
        .config_float = cfg_float,
        .config_bool = cfg_bool,
        .config_string = cfg_string,
        .config_duration = cfg_duration,
        .config_bytes = cfg_bytes,
        .config_list_len = cfg_list_len,
        .config_list_at = cfg_list_at,
        .config_component = cfg_component,
    };
}
