/* tests/plugins/fixture_model.c — a test fixture, not a model: registers model 'fixture' so the
 * loader has one component of this kind to find. It builds nothing. */
#include <bora/model.h>

static bora_status fixture_create(const bora_host *h, const bora_config *cfg, bora_model **out)
{
    int64_t width;
    bora_status st = h->config_int(h, cfg, "width", 8, &width);
    if (st != BORA_OK)
        return st;
    *out = h->alloc(h, 16, 16);
    return *out ? BORA_OK : h->fail(h, BORA_ERR_NOMEM, "out of memory");
}

static const bora_host *fixture_host;

static bora_status fixture_build(bora_model *m, bora_graph *g, int32_t mode, bora_tensor **out)
{
    (void)m;
    (void)g;
    (void)out;
    return fixture_host->fail(fixture_host, BORA_ERR_UNSUPPORTED,
                              "fixture builds no graph (mode %d)", mode);
}

static void fixture_destroy(bora_model *m)
{
    fixture_host->free(fixture_host, m);
}

static const bora_key fixture_keys[] = {
    {"width", BORA_KEY_INT, 0, "8", "an example key"},
    {NULL, 0, 0, NULL, NULL},
};

static const bora_model_ops fixture_ops = {
    .hdr = {sizeof(bora_model_ops), BORA_KIND_MODEL, "fixture", "test fixture", fixture_keys},
    .create = fixture_create,
    .build = fixture_build,
    .destroy = fixture_destroy,
};

static bora_status fixture_init(const bora_host *h)
{
    fixture_host = h;
    return h->add(h, &fixture_ops.hdr);
}

BORA_PLUGIN_DEFINE("fixture-model", "0.0.1", fixture_init, NULL)
