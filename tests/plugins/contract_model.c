/* tests/plugins/contract_model.c — a test fixture for the model contract (sdk/bora/model.h):
 * model 'contract', a bigram language model (a table of logits looked up by token) over the
 * inputs bora fills, whose keys let a test misspell an input or leave one out as a plugin author
 * might. Kept in a plugin directory of its own, away from the other fixtures. */
#include <bora/model.h>

#include <string.h>

typedef struct contract {
    int64_t width, classes, seq_len;
    const char *ids_input, *segment_dtype;
    int targets, segments;
} contract;

static const bora_host *contract_host;

static bora_status contract_create(const bora_host *h, const bora_config *cfg, bora_model **out)
{
    contract f = {0};
    bora_status st = h->config_int(h, cfg, "width", 64, &f.width);
    if (st == BORA_OK)
        st = h->config_int(h, cfg, "classes", 64, &f.classes);
    if (st == BORA_OK)
        st = h->config_int(h, cfg, "seq_len", 8, &f.seq_len);
    if (st == BORA_OK)
        st = h->config_string(h, cfg, "ids_input", "input_ids", &f.ids_input);
    if (st == BORA_OK)
        st = h->config_bool(h, cfg, "targets", 1, &f.targets);
    if (st == BORA_OK)
        st = h->config_bool(h, cfg, "segment_ids", 1, &f.segments);
    if (st == BORA_OK)
        st = h->config_string(h, cfg, "segment_dtype", "i32", &f.segment_dtype);
    if (st != BORA_OK)
        return st;
    if (f.width < 1)
        return h->fail(h, BORA_ERR_CONFIG, "width must be >= 1, not %lld", (long long)f.width);
    if (f.classes < 1 || f.seq_len < 1)
        return h->fail(h, BORA_ERR_CONFIG, "classes and seq_len must be >= 1");
    contract *p = h->alloc(h, sizeof *p, 16);
    if (!p)
        return h->fail(h, BORA_ERR_NOMEM, "out of memory");
    *p = f;
    *out = (bora_model *)p;
    return BORA_OK;
}

static bora_status contract_build(bora_model *m, bora_graph *g, int32_t mode, bora_tensor **out)
{
    const contract *f = (const contract *)m;
    const bora_graph_api *A = g->api;
    if (mode != BORA_MODE_TRAIN && mode != BORA_MODE_EVAL)
        return contract_host->fail(contract_host, BORA_ERR_UNSUPPORTED,
                                   "contract has no graph for mode %d", mode);
    bora_axis io[2] = {{"batch", A->batch(g)}, {"position", f->seq_len}};
    bora_axis w_axes[2] = {{"feature", f->width}, {"class", f->classes}};
    bora_tensor *ids = bora_input(g, f->ids_input, BORA_DTYPE_I32, 2, io);
    if (f->segments) /* read, as attention would; a lookup needs nothing of it */
        bora_input(g, "segment_ids",
                   strcmp(f->segment_dtype, "f32") ? BORA_DTYPE_I32 : BORA_DTYPE_F32, 2, io);
    bora_tensor *w =
        bora_param(g, "classifier.weight", BORA_DTYPE_F32, 2, w_axes, bora_init_normal(0.5), 0);
    bora_tensor *b = bora_param(g, "classifier.bias", BORA_DTYPE_F32, 1, w_axes + 1,
                                bora_init_zeros(), BORA_PARAM_NO_DECAY);
    bora_tensor *logits = bora_add(g, A->embedding(g, w, ids, "feature"), b);
    if (mode == BORA_MODE_TRAIN) {
        /* Without targets it predicts its own input: it trains, and learns nothing. */
        bora_tensor *y = f->targets ? bora_input(g, "targets", BORA_DTYPE_I32, 2, io) : ids;
        logits = A->cross_entropy(g, logits, y, "class", NULL);
    }
    *out = logits;
    return bora_graph_status(g);
}

static void contract_destroy(bora_model *m)
{
    contract_host->free(contract_host, m);
}

static const bora_key contract_keys[] = {
    {"width", BORA_KEY_INT, 0, "64", "token ids it takes (0 .. width-1)"},
    {"classes", BORA_KEY_INT, 0, "64", "logits per position"},
    {"seq_len", BORA_KEY_INT, 0, "8", "positions per sequence"},
    {"ids_input", BORA_KEY_STRING, 0, "input_ids", "the name of the token input it reads"},
    {"targets", BORA_KEY_BOOL, 0, "true", "read the targets input in the train graph"},
    {"segment_ids", BORA_KEY_BOOL, 0, "true", "read the segment_ids input"},
    {"segment_dtype", BORA_KEY_STRING, 0, "i32",
     "the dtype it declares segment_ids with (f32: wrong)"},
    {NULL, 0, 0, NULL, NULL},
};

static const bora_model_ops contract_ops = {
    .hdr = BORA_COMPONENT_KEYS(bora_model_ops, BORA_KIND_MODEL, "contract",
                               "a bigram model for the model contract's tests", contract_keys),
    .create = contract_create,
    .build = contract_build,
    .destroy = contract_destroy,
};

static bora_status contract_init(const bora_host *h)
{
    contract_host = h;
    return h->add(h, &contract_ops.hdr);
}

BORA_PLUGIN_DEFINE("contract-model", "0.0.1", contract_init, NULL)
