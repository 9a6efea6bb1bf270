/* tests/plugins/fixture_model.c — a test fixture: model 'fixture', a softmax regression
 * (features -> classes) built through the graph API from a plugin, as real models are: the
 * train graph returns the mean cross-entropy, the eval graph the logits. */
#include <bora/model.h>

typedef struct fixture {
    int64_t width;
} fixture;

static const bora_host *fixture_host;

static bora_status fixture_create(const bora_host *h, const bora_config *cfg, bora_model **out)
{
    int64_t width;
    bora_status st = h->config_int(h, cfg, "width", 8, &width);
    if (st != BORA_OK)
        return st;
    if (width < 1)
        return h->fail(h, BORA_ERR_CONFIG, "width must be >= 1, not %lld", (long long)width);
    fixture *f = h->alloc(h, sizeof *f, 16);
    if (!f)
        return h->fail(h, BORA_ERR_NOMEM, "out of memory");
    f->width = width;
    *out = (bora_model *)f;
    return BORA_OK;
}

static bora_status fixture_build(bora_model *m, bora_graph *g, int32_t mode, bora_tensor **out)
{
    const fixture *f = (const fixture *)m;
    if (mode != BORA_MODE_TRAIN && mode != BORA_MODE_EVAL)
        return fixture_host->fail(fixture_host, BORA_ERR_UNSUPPORTED,
                                  "fixture has no graph for mode %d", mode);
    bora_axis x_axes[2] = {{"batch", 4}, {"feature", f->width}};
    bora_axis w_axes[2] = {{"feature", f->width}, {"class", 3}};
    bora_tensor *x = bora_input(g, "features", BORA_DTYPE_F32, 2, x_axes);
    bora_tensor *w =
        bora_param(g, "classifier.weight", BORA_DTYPE_F32, 2, w_axes, bora_init_normal(0.5), 0);
    bora_tensor *b = bora_param(g, "classifier.bias", BORA_DTYPE_F32, 1, w_axes + 1,
                                bora_init_zeros(), BORA_PARAM_NO_DECAY);
    const char *k[] = {"feature"};
    bora_tensor *logits = bora_add(g, bora_dot(g, x, w, 1, k), b);
    if (mode == BORA_MODE_TRAIN) {
        bora_tensor *labels = bora_input(g, "labels", BORA_DTYPE_I32, 1, x_axes);
        logits = g->api->scale(g, g->api->cross_entropy(g, logits, labels, "class", NULL), 0.25);
    }
    *out = logits;
    return bora_graph_status(g);
}

static void fixture_destroy(bora_model *m)
{
    fixture_host->free(fixture_host, m);
}

static const bora_key fixture_keys[] = {
    {"width", BORA_KEY_INT, 0, "8", "number of input features"},
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
