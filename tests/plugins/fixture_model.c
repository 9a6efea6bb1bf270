/* tests/plugins/fixture_model.c — a test fixture: model 'fixture', a table of three logits
 * looked up by token (input_ids -> classes) built through the graph API from a plugin, as real
 * models are, over the inputs bora fills: the train graph returns the summed cross-entropy
 * against targets, the eval graph the logits. */
#include <bora/model.h>

typedef struct fixture {
    int64_t width;
} fixture;

static const bora_host *fixture_host;

static bora_status fixture_create(const bora_host *h, const bora_config *cfg, bora_model **out)
{
    fixture f = {0};
    bora_status st = h->config_int(h, cfg, "width", 8, &f.width);
    if (st != BORA_OK)
        return st;
    if (f.width < 1)
        return h->fail(h, BORA_ERR_CONFIG, "width must be >= 1, not %lld", (long long)f.width);
    fixture *p = h->alloc(h, sizeof *p, 16);
    if (!p)
        return h->fail(h, BORA_ERR_NOMEM, "out of memory");
    *p = f;
    *out = (bora_model *)p;
    return BORA_OK;
}

static bora_status fixture_build(bora_model *m, bora_graph *g, int32_t mode, bora_tensor **out)
{
    const fixture *f = (const fixture *)m;
    const bora_graph_api *A = g->api;
    if (mode != BORA_MODE_TRAIN && mode != BORA_MODE_EVAL)
        return fixture_host->fail(fixture_host, BORA_ERR_UNSUPPORTED,
                                  "fixture has no graph for mode %d", mode);
    bora_axis io[2] = {{"batch", A->batch(g)}, {"position", 4}};
    bora_axis w_axes[2] = {{"feature", f->width}, {"class", 3}};
    bora_tensor *ids = bora_input(g, "input_ids", BORA_DTYPE_I32, 2, io);
    bora_tensor *w =
        bora_param(g, "classifier.weight", BORA_DTYPE_F32, 2, w_axes, bora_init_normal(0.5), 0);
    bora_tensor *b = bora_param(g, "classifier.bias", BORA_DTYPE_F32, 1, w_axes + 1,
                                bora_init_zeros(), BORA_PARAM_NO_DECAY);
    bora_tensor *logits = bora_add(g, A->embedding(g, w, ids, "feature"), b);
    if (mode == BORA_MODE_TRAIN) {
        bora_tensor *y = bora_input(g, "targets", BORA_DTYPE_I32, 2, io);
        logits = A->cross_entropy(g, logits, y, "class", NULL);
    }
    *out = logits;
    return bora_graph_status(g);
}

static void fixture_destroy(bora_model *m)
{
    fixture_host->free(fixture_host, m);
}

static const bora_key fixture_keys[] = {
    {"width", BORA_KEY_INT, 0, "8", "token ids it takes (0 .. width-1)"},
    {NULL, 0, 0, NULL, NULL},
};

static const bora_model_ops fixture_ops = {
    .hdr = BORA_COMPONENT_KEYS(bora_model_ops, BORA_KIND_MODEL, "fixture", "test fixture",
                               fixture_keys),
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
