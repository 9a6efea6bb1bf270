/* core/plugin/host.c — the functions behind bora_host: registration, messages, memory and
 * configuration access.
 *
 * Configuration: in this version the host has no configuration tree yet, so every component
 * is created with cfg == NULL, which means "no keys given": each getter returns its default.
 * A non-NULL node cannot be produced by this host and is reported as an internal error. */
#include "host.h"

#include "../util/log.h"

#include <stdarg.h>
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

/* ---- configuration -------------------------------------------------------------------- */

static bora_status no_tree(const bora_host *h, const char *key)
{
    return host_fail(h, BORA_ERR_INTERNAL, "configuration node for '%s' was not made by this host",
                     key ? key : ".");
}

static const bora_config *cfg_child(const bora_host *h, const bora_config *node, const char *key)
{
    if (node)
        no_tree(h, key);
    return NULL;
}

#define SCALAR_GETTER(fn, T)                                                                   \
    static bora_status fn(const bora_host *h, const bora_config *node, const char *key, T def, \
                          T *out)                                                              \
    {                                                                                          \
        if (node)                                                                              \
            return no_tree(h, key);                                                            \
        *out = def;                                                                            \
        return BORA_OK;                                                                        \
    }
SCALAR_GETTER(cfg_int, int64_t)
SCALAR_GETTER(cfg_float, double)
SCALAR_GETTER(cfg_bool, int)
SCALAR_GETTER(cfg_string, const char *)
SCALAR_GETTER(cfg_duration, double)
SCALAR_GETTER(cfg_bytes, uint64_t)
#undef SCALAR_GETTER

static bora_status cfg_list_len(const bora_host *h, const bora_config *node, const char *key,
                                size_t *out)
{
    if (node)
        return no_tree(h, key);
    *out = 0;
    return BORA_OK;
}

static const bora_config *cfg_list_at(const bora_host *h, const bora_config *node, const char *key,
                                      size_t index)
{
    (void)index;
    if (node)
        no_tree(h, key);
    return NULL;
}

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
    };
}
