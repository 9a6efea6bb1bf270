/* bora/host.h — the host table: the only way a plugin reaches the host.
 *
 * Plugins link nothing from the host (they are linked with -z defs); logging, errors, memory,
 * registration and configuration all come through this table, which the host hands to init()
 * and to every create(). Each plugin gets its own copy, so messages are prefixed with the
 * plugin's name. A worked example, reading a model's configuration in create():
 *
 *     #include <bora/model.h>
 *
 *     typedef struct toy { int64_t layers; double eps; } toy;
 *
 *     static bora_status toy_create(const bora_host *h, const bora_config *cfg, bora_model **out)
 *     {
 *         int64_t layers;
 *         double eps;
 *         bora_status st = h->config_int(h, cfg, "num_layers", 12, &layers);
 *         if (st == BORA_OK)
 *             st = h->config_float(h, cfg, "layer_norm_epsilon", 1e-5, &eps);
 *         if (st != BORA_OK)
 *             return st;                       // the host already holds a message naming the key
 *         if (layers < 1)
 *             return h->fail(h, BORA_ERR_CONFIG, "num_layers must be >= 1, got %lld",
 *                            (long long)layers);
 *         toy *t = h->alloc(h, sizeof *t, 64);  // zeroed, 64-byte aligned
 *         if (!t)
 *             return h->fail(h, BORA_ERR_NOMEM, "out of memory");
 *         BORA_INFO(h, "toy model with %lld layers", (long long)layers);
 *         t->layers = layers;
 *         t->eps = eps;
 *         *out = (bora_model *)t;
 *         return BORA_OK;
 *     }
 *
 * Strings passed to the host are borrowed for the call; strings the host returns (config
 * strings) live as long as the configuration, i.e. the whole run.
 */
#ifndef BORA_HOST_H
#define BORA_HOST_H

#include <bora/plugin.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define BORA_PRINTF(fmt_index, first_arg) __attribute__((format(printf, fmt_index, first_arg)))
#else
#define BORA_PRINTF(fmt_index, first_arg)
#endif

typedef enum bora_log_level {
    BORA_LOG_ERROR = 0,
    BORA_LOG_WARN = 1,
    BORA_LOG_INFO = 2,
    BORA_LOG_DEBUG = 3
} bora_log_level;

struct bora_host {
    uint32_t struct_size; /* sizeof(bora_host) as the host was compiled */
    uint32_t abi_major;   /* the host's BORA_ABI_MAJOR */
    uint32_t abi_minor;   /* the host's BORA_ABI_MINOR */
    uint32_t reserved;
    void *ctx; /* host-private; plugins must not touch it */

    /* Register a component: ops points at a static table that starts with bora_component.
     * Only valid during init(). Returns an error (with the reason logged) when the table is
     * refused: unknown kind, too large, a required member missing, or a duplicate name. */
    bora_status (*add)(const bora_host *h, const bora_component *ops);

    /* Log a message, prefixed with the plugin's name; shown when level <= the run's level. */
    void (*log)(const bora_host *h, int32_t level, const char *fmt, ...) BORA_PRINTF(3, 4);

    /* Record an error message for the failing call and return code (which must be negative),
     * so `return h->fail(h, BORA_ERR_IO, "cannot open '%s'", path);` reports and fails at once. */
    bora_status (*fail)(const bora_host *h, bora_status code, const char *fmt, ...)
        BORA_PRINTF(3, 4);

    /* Zeroed memory aligned to align (a power of two, at least sizeof(void *)); NULL when out of
     * memory. Freed with free(). */
    void *(*alloc)(const bora_host *h, size_t size, size_t align);
    void (*free)(const bora_host *h, void *ptr);

    /* Configuration. node is the component's subtree as handed to create(); key is a direct
     * child of it, or NULL for node itself (a list element). A missing key yields the default;
     * a present key of the wrong type is an error naming file, line and column. Each read
     * marks the key as used: after components are created, an unread key is an error. */
    const bora_config *(*config_child)(const bora_host *h, const bora_config *node,
                                       const char *key);
    bora_status (*config_int)(const bora_host *h, const bora_config *node, const char *key,
                              int64_t def, int64_t *out);
    bora_status (*config_float)(const bora_host *h, const bora_config *node, const char *key,
                                double def, double *out);
    bora_status (*config_bool)(const bora_host *h, const bora_config *node, const char *key,
                               int def, int *out);
    bora_status (*config_string)(const bora_host *h, const bora_config *node, const char *key,
                                 const char *def, const char **out);
    bora_status (*config_duration)(const bora_host *h, const bora_config *node, const char *key,
                                   double def_s, double *out_s);
    bora_status (*config_bytes)(const bora_host *h, const bora_config *node, const char *key,
                                uint64_t def, uint64_t *out);
    /* Number of elements of a list (0 when absent), and element i as a node. */
    bora_status (*config_list_len)(const bora_host *h, const bora_config *node, const char *key,
                                   size_t *out);
    const bora_config *(*config_list_at)(const bora_host *h, const bora_config *node,
                                         const char *key, size_t index);
    /* A component chosen by `type:` under key: one map ({type: NAME, ...}) or a list of them.
     * *count receives how many there are; for index < count, *ops the component of kind
     * (a bora_kind) that entry names and *sub its subtree to create() it with. An unknown
     * type is an error naming the position and the closest name. */
    bora_status (*config_component)(const bora_host *h, const bora_config *node, const char *key,
                                    int32_t kind, size_t index, size_t *count,
                                    const bora_component **ops, const bora_config **sub);
};

#define BORA_ERROR(h, ...) (h)->log((h), BORA_LOG_ERROR, __VA_ARGS__)
#define BORA_WARN(h, ...) (h)->log((h), BORA_LOG_WARN, __VA_ARGS__)
#define BORA_INFO(h, ...) (h)->log((h), BORA_LOG_INFO, __VA_ARGS__)
#define BORA_DEBUG(h, ...) (h)->log((h), BORA_LOG_DEBUG, __VA_ARGS__)

#ifdef __cplusplus
}
#endif
#endif /* BORA_HOST_H */
