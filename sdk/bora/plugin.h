/* bora/plugin.h — the plugin descriptor, ABI versions, status codes and component kinds.
 *
 * Every bora plugin is a shared object named bora-<kind>-<name>.so that exports exactly one
 * symbol, bora_plugin_entry, returning a static descriptor. The host checks the ABI version
 * before it runs any plugin code, then calls init(), which registers one or more components
 * through host->add(). A worked example, a complete tracker plugin:
 *
 *     #include <bora/tracker.h>
 *
 *     static const bora_host *g_host;
 *
 *     static bora_status hello_create(const bora_host *h, const bora_config *cfg,
 *                                     const char *run_id, bora_tracker **out)
 *     {
 *         (void)cfg;
 *         (void)run_id;
 *         *out = h->alloc(h, 1, 16);          // a real tracker keeps its state here
 *         return *out ? BORA_OK : h->fail(h, BORA_ERR_NOMEM, "out of memory");
 *     }
 *     static bora_status hello_log(bora_tracker *t, int64_t step, const bora_metric *m, size_t n)
 *     {
 *         (void)t; (void)step; (void)m; (void)n;
 *         return BORA_OK;
 *     }
 *     static void hello_destroy(bora_tracker *t) { g_host->free(g_host, t); }
 *
 *     static const bora_tracker_ops hello_ops = {
 *         .hdr = BORA_COMPONENT(bora_tracker_ops, BORA_KIND_TRACKER, "hello",
 *                               "a tracker that says nothing"),
 *         .create = hello_create,
 *         .log = hello_log,
 *         .destroy = hello_destroy,
 *     };
 *     static bora_status hello_init(const bora_host *h)
 *     {
 *         g_host = h;
 *         return h->add(h, &hello_ops.hdr);
 *     }
 *     BORA_PLUGIN_DEFINE("hello", "1.0.0", hello_init, NULL)
 *
 * Rules the host enforces (docs/design.md §2):
 *   - abi_major must equal the host's; abi_minor must be <= the host's.
 *   - every ops table starts with a bora_component header whose struct_size is the size of the
 *     whole table as the plugin was compiled; the host copies that many bytes into a zeroed
 *     table, so members a plugin predates read as NULL. A table larger than the host knows is
 *     refused. Members are only ever appended.
 *   - init() only registers: no device, file or network work.
 *   - plugins never call exit() or abort() on a runtime error: they return a bora_status,
 *     usually through host->fail(), which keeps the message.
 */
#ifndef BORA_PLUGIN_H
#define BORA_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI version this header describes (1.0: the first stable one, since GPT-2 trains end to
 * end; 1.1 appends bora_tracker_ops.log_environment and flush; 1.2 appends bora_graph_api.state
 * and write_slice, and the op BORA_OP_WRITE_SLICE; 1.3 appends bora_backend_ops.run_fused; 1.4
 * appends the op BORA_OP_XENT_FUSED; 1.5 lets a fused group's COPY step write bf16, which the
 * host passes only to backends built for 1.5 or later, and appends BORA_OP_SUM_SQUARES; 1.6
 * appends bora_graph_api.residual and bora_backend_ops.prepare, and lets a fused group's COPY
 * step read bf16, which the host passes only to backends built for 1.6 or later; 1.7 appends
 * bora_opt_attention.product_dtype and bora_attention_opts.upcast, and lets BORA_OP_SCATTER_ADD
 * take a third input, its initial values: the host sets the one and passes the other only to
 * backends built for 1.7 or later; 1.8 lets BORA_OP_MATMUL take a third input, a bias added to
 * each row of the result, which the host passes only to backends built for 1.8 or later; 1.9
 * appends the ops BORA_OP_SIN to BORA_OP_IOTA (sin, cos, abs, sign, minimum, maximum, the
 * comparisons, where, iota), BORA_OP_RMS_NORM with its gradient and BORA_OP_ROPE (rotary
 * embeddings, with bora_opt_rope), which the host asks only of backends built for 1.9 or later,
 * bora_graph_api.full, iota, where, rms_norm and rope, the structs bora_rope_spec and
 * bora_rope_opts, and appends bora_attention_opts.head_axis, kv_head_axis and sliding_window
 * (grouped-query attention and Mistral's sliding window) and bora_opt_attention.sliding_window,
 * which the host sets only for backends built for 1.9 or later; 1.10 appends
 * bora_model_ops.hf_keys, the config.json keys bora import reads, with bora_hf_key and
 * bora_hf_rule; 1.11 appends the op BORA_OP_SAMPLE (a token per row drawn from softmax(logits)
 * with Philox, bora_opt_sample), which the host asks only of backends built for 1.11 or later,
 * bora_graph_api.sample, and bora_optimizer_ops.hessian, build_hessian_update, metrics and
 * build_metrics with bora_param_update.report: second-order estimates and per-step metrics for
 * optimizers; and bora_param_update.flags with BORA_PARAM_IN_OUT, a matrix's storage order; 1.12 appends bora_attention_opts.softcap and
 * bora_opt_attention.softcap, attention scores soft-capped by c·tanh(s / c), which the host sets
 * only for backends built for 1.12 or later; 1.13 appends the ops BORA_OP_TOP_K, BORA_OP_ARGSORT,
 * BORA_OP_BINCOUNT, BORA_OP_GROUPED_MATMUL and BORA_OP_GROUPED_MATMUL_GRAD (a mixture of
 * experts' routing and per-expert products, with bora_opt_top_k), which the host asks only of
 * backends built for 1.13 or later, and bora_graph_api.top_k, argsort, bincount and
 * grouped_matmul; 1.14 appends bora_graph_api.metric, a model's own values logged with each
 * train step; 1.15 appends the ops BORA_OP_CONV1D, BORA_OP_CONV1D_GRAD_INPUT and
 * BORA_OP_CONV1D_GRAD_WEIGHT (a 1-d convolution and its gradients, with bora_opt_conv1d), which
 * the host asks only of backends built for 1.15 or later and otherwise builds from primitives,
 * and bora_graph_api.conv1d with bora_conv1d_opts). A minor
 * bump only appends optional members; a major bump breaks. */
#define BORA_ABI_MAJOR 1
#define BORA_ABI_MINOR 15

/* Status codes: 0 is success, every error is negative. */
typedef int32_t bora_status;
enum bora_status_code {
    BORA_OK = 0,
    BORA_ERR_INVALID = -1,     /* a bad argument or malformed input */
    BORA_ERR_NOMEM = -2,       /* an allocation failed */
    BORA_ERR_IO = -3,          /* a file, socket or device transfer failed */
    BORA_ERR_UNSUPPORTED = -4, /* the request is valid but this component cannot do it */
    BORA_ERR_NOT_FOUND = -5,   /* a named thing (key, file, component) does not exist */
    BORA_ERR_CONFIG = -6,      /* the configuration is wrong; the message names the key */
    BORA_ERR_VERSION = -7,     /* an ABI or format version mismatch */
    BORA_ERR_DEVICE = -8,      /* the compute device failed */
    BORA_ERR_INTERNAL = -9     /* a broken invariant: a bug, reported rather than aborted */
};

/* What a component is. The value is stored in every ops table header. */
typedef enum bora_kind {
    BORA_KIND_MODEL = 1,
    BORA_KIND_OPTIMIZER = 2,
    BORA_KIND_BACKEND = 3,
    BORA_KIND_TRACKER = 4
} bora_kind;

typedef struct bora_host bora_host;
typedef struct bora_config bora_config; /* an opaque node of the configuration tree */

/* The type of a declared configuration key (see bora_key). */
typedef enum bora_key_type {
    BORA_KEY_INT = 1,
    BORA_KEY_FLOAT = 2,
    BORA_KEY_BOOL = 3,
    BORA_KEY_STRING = 4,
    BORA_KEY_DURATION = 5, /* "90s", "15m", "2h"; read as seconds */
    BORA_KEY_BYTES = 6,    /* "512MB", "4GiB"; read as bytes */
    BORA_KEY_LIST = 7,
    BORA_KEY_MAP = 8,
    BORA_KEY_COMPONENT = 9 /* a map (or list of maps) selected by its "type:" key */
} bora_key_type;

/* One documented configuration key of a component. A component lists its keys in an array
 * ended by an entry whose name is NULL. default_value is the YAML text of the default, or NULL
 * when the key is required. */
typedef struct bora_key {
    const char *name;
    int32_t type; /* a bora_key_type */
    int32_t reserved;
    const char *default_value;
    const char *doc; /* one line */
} bora_key;

/* The header every ops table starts with. */
typedef struct bora_component {
    uint32_t struct_size; /* sizeof the whole ops table, as the plugin was compiled */
    uint32_t kind;        /* a bora_kind */
    const char *name;     /* the name YAML selects it by: model.type: <name> */
    const char *summary;  /* one line for `bora plugins` (optional) */
    const bora_key *keys; /* declared configuration keys, NULL-name terminated (optional) */
} bora_component;

/* Fill a component header: BORA_COMPONENT(bora_model_ops, BORA_KIND_MODEL, "gpt2", "...") for
 * a component without configuration keys, BORA_COMPONENT_KEYS(..., keys) for one with them (a
 * bora_key array). Each sets every member once, so `.hdr = BORA_COMPONENT_KEYS(...)` compiles
 * cleanly under -Woverride-init, where `.hdr = BORA_COMPONENT(...), .hdr.keys = k` would not. */
#define BORA_COMPONENT(ops_type, kind_, name_, summary_) \
    BORA_COMPONENT_KEYS(ops_type, kind_, name_, summary_, NULL)
#define BORA_COMPONENT_KEYS(ops_type, kind_, name_, summary_, keys_)                 \
    {                                                                                \
        .struct_size = (uint32_t)sizeof(ops_type), .kind = (kind_), .name = (name_), \
        .summary = (summary_), .keys = (keys_)                                       \
    }

/* The descriptor bora_plugin_entry() returns. */
typedef struct bora_plugin {
    uint32_t abi_major;   /* BORA_ABI_MAJOR the plugin was built with */
    uint32_t abi_minor;   /* BORA_ABI_MINOR the plugin was built with */
    uint32_t struct_size; /* sizeof(bora_plugin) as the plugin was compiled */
    uint32_t reserved;
    const char *name;                           /* the plugin's name, used to prefix its messages */
    const char *version;                        /* the plugin's own version, e.g. "1.2.0" */
    bora_status (*init)(const bora_host *host); /* registers components; the host table outlives
                                                   the plugin */
    void (*fini)(void);                         /* (optional) called once at host exit */
} bora_plugin;

/* The one symbol a plugin exports. */
#define BORA_PLUGIN_ENTRY_SYMBOL "bora_plugin_entry"
typedef const bora_plugin *(*bora_plugin_entry_fn)(void);

#if defined(__GNUC__) || defined(__clang__)
#define BORA_EXPORT __attribute__((visibility("default")))
#else
#define BORA_EXPORT
#endif

/* Define the descriptor and the entry symbol. Use once per plugin, at file scope. */
#define BORA_PLUGIN_DEFINE(name_, version_, init_, fini_)   \
    BORA_EXPORT const bora_plugin *bora_plugin_entry(void); \
    BORA_EXPORT const bora_plugin *bora_plugin_entry(void)  \
    {                                                       \
        static const bora_plugin desc = {                   \
            .abi_major = BORA_ABI_MAJOR,                    \
            .abi_minor = BORA_ABI_MINOR,                    \
            .struct_size = (uint32_t)sizeof(bora_plugin),   \
            .name = (name_),                                \
            .version = (version_),                          \
            .init = (init_),                                \
            .fini = (fini_),                                \
        };                                                  \
        return &desc;                                       \
    }

#ifdef __cplusplus
}
#endif
#endif /* BORA_PLUGIN_H */
