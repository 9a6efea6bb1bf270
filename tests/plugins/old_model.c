/* tests/plugins/old_model.c — a test fixture: model 'oldabi' as a plugin built for ABI 1.9
 * declares it, before bora_model_ops.hf_keys: its descriptor says minor 9 and its ops table is
 * the 1.9 size. The host must still load it (members it predates read as NULL), and bora import
 * must refuse it for having no table of config.json keys. */
#include <bora/model.h>

#include <stddef.h>

static const bora_host *old_host;

static bora_status old_create(const bora_host *h, const bora_config *cfg, bora_model **out)
{
    (void)cfg;
    *out = h->alloc(h, 16, 16);
    return *out ? BORA_OK : h->fail(h, BORA_ERR_NOMEM, "out of memory");
}

static bora_status old_build(bora_model *m, bora_graph *g, int32_t mode, bora_tensor **out)
{
    (void)m;
    (void)g;
    (void)out;
    return old_host->fail(old_host, BORA_ERR_UNSUPPORTED, "oldabi has no graph for mode %d", mode);
}

static void old_destroy(bora_model *m)
{
    old_host->free(old_host, m);
}

static const bora_model_ops old_ops = {
    .hdr = {.struct_size = (uint32_t)offsetof(bora_model_ops, hf_keys), /* the 1.9 table */
            .kind = BORA_KIND_MODEL,
            .name = "oldabi",
            .summary = "a model built for ABI 1.9",
            .keys = NULL},
    .create = old_create,
    .build = old_build,
    .destroy = old_destroy,
};

static bora_status old_init(const bora_host *h)
{
    old_host = h;
    return h->add(h, &old_ops.hdr);
}

BORA_EXPORT const bora_plugin *bora_plugin_entry(void);
BORA_EXPORT const bora_plugin *bora_plugin_entry(void)
{
    static const bora_plugin desc = {
        .abi_major = 1,
        .abi_minor = 9,
        .struct_size = (uint32_t)sizeof(bora_plugin),
        .name = "oldabi-model",
        .version = "0.0.1",
        .init = old_init,
        .fini = NULL,
    };
    return &desc;
}
