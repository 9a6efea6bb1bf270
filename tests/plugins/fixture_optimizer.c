/* tests/plugins/fixture_optimizer.c — a test fixture: registers optimizer 'fixture'. */
#include <bora/optimizer.h>

static const bora_host *fixture_host;

static bora_status fixture_create(const bora_host *h, const bora_config *cfg, bora_optimizer **out)
{
    (void)cfg;
    *out = h->alloc(h, 16, 16);
    return *out ? BORA_OK : h->fail(h, BORA_ERR_NOMEM, "out of memory");
}

static bora_status fixture_update(bora_optimizer *o, bora_graph *g, const bora_param_update *u)
{
    (void)o;
    (void)g;
    return fixture_host->fail(fixture_host, BORA_ERR_UNSUPPORTED, "fixture updates nothing (%s)",
                              u->name);
}

static void fixture_destroy(bora_optimizer *o)
{
    fixture_host->free(fixture_host, o);
}

static const char *const fixture_slots[] = {"m", NULL};
static const char *const fixture_scalars[] = {"lr", NULL};

static bora_status fixture_step_scalars(bora_optimizer *o, int64_t step, double lr, double *v)
{
    (void)o;
    (void)step;
    v[0] = lr;
    return BORA_OK;
}

static const bora_optimizer_ops fixture_ops = {
    .hdr = BORA_COMPONENT(bora_optimizer_ops, BORA_KIND_OPTIMIZER, "fixture", "test fixture"),
    .create = fixture_create,
    .slots = fixture_slots,
    .scalars = fixture_scalars,
    .step_scalars = fixture_step_scalars,
    .build_update = fixture_update,
    .destroy = fixture_destroy,
};

static bora_status fixture_init(const bora_host *h)
{
    fixture_host = h;
    return h->add(h, &fixture_ops.hdr);
}

BORA_PLUGIN_DEFINE("fixture-optimizer", "0.0.1", fixture_init, NULL)
