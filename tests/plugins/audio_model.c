/* tests/plugins/audio_model.c — a test fixture for audio datasets: model 'audio_probe', the
 * smallest model that reads input_features as an audio model does: each clip's features
 * averaged over its frames, projected to the token width and added to every position's token
 * embedding, then logits over the tied embedding. Its loss depends on the features, the tokens
 * and the targets, so a wrong clip, row order or padding changes it. */
#include <bora/model.h>

typedef struct audio_probe {
    int64_t vocab, mels, frames, positions, width;
} audio_probe;

static const bora_host *probe_host;

static bora_status probe_create(const bora_host *h, const bora_config *cfg, bora_model **out)
{
    audio_probe f = {0};
    bora_status st = h->config_int(h, cfg, "vocab_size", 0, &f.vocab);
    if (st == BORA_OK)
        st = h->config_int(h, cfg, "num_mel_bins", 80, &f.mels);
    if (st == BORA_OK)
        st = h->config_int(h, cfg, "frames", 3000, &f.frames);
    if (st == BORA_OK)
        st = h->config_int(h, cfg, "max_target_positions", 16, &f.positions);
    if (st == BORA_OK)
        st = h->config_int(h, cfg, "d_model", 8, &f.width);
    if (st != BORA_OK)
        return st;
    if (f.vocab < 1 || f.mels < 1 || f.frames < 1 || f.positions < 2 || f.width < 1)
        return h->fail(h, BORA_ERR_CONFIG, "audio_probe: every size must be positive");
    audio_probe *p = h->alloc(h, sizeof *p, 16);
    if (!p)
        return h->fail(h, BORA_ERR_NOMEM, "out of memory");
    *p = f;
    *out = (bora_model *)p;
    return BORA_OK;
}

static bora_status probe_build(bora_model *m, bora_graph *g, int32_t mode, bora_tensor **out)
{
    const audio_probe *f = (const audio_probe *)m;
    const bora_graph_api *A = g->api;
    if (mode != BORA_MODE_TRAIN)
        return probe_host->fail(probe_host, BORA_ERR_UNSUPPORTED,
                                "audio_probe has no graph for mode %d", mode);
    int64_t B = A->batch(g);
    bora_axis feat_axes[3] = {{"batch", B}, {"mel", f->mels}, {"frame", f->frames}};
    bora_axis io[2] = {{"batch", B}, {"position", f->positions}};
    bora_axis proj_axes[2] = {{"mel", f->mels}, {"embd", f->width}};
    bora_axis wte_axes[2] = {{"vocab", f->vocab}, {"embd", f->width}};
    bora_tensor *x = bora_input(g, "input_features", BORA_DTYPE_F32, 3, feat_axes);
    bora_tensor *ids = bora_input(g, "input_ids", BORA_DTYPE_I32, 2, io);
    bora_tensor *y = bora_input(g, "targets", BORA_DTYPE_I32, 2, io);
    bora_tensor *proj =
        bora_param(g, "audio.proj.weight", BORA_DTYPE_F32, 2, proj_axes, bora_init_normal(0.5), 0);
    bora_tensor *wte =
        bora_param(g, "embed_tokens.weight", BORA_DTYPE_F32, 2, wte_axes, bora_init_normal(0.5), 0);
    const char *frame = "frame", *mel = "mel", *embd = "embd";
    bora_tensor *pooled = A->reduce(g, 0, x, 1, &frame);                     /* (batch, mel) */
    bora_tensor *heard = A->dot(g, pooled, proj, 1, &mel, NULL);             /* (batch, embd) */
    bora_tensor *h = bora_add(g, A->embedding(g, wte, ids, "vocab"), heard); /* by name */
    bora_tensor *logits = A->dot(g, h, wte, 1, &embd, NULL); /* (batch, position, vocab) */
    *out = A->cross_entropy(g, logits, y, "vocab", NULL);
    return bora_graph_status(g);
}

static void probe_destroy(bora_model *m)
{
    probe_host->free(probe_host, m);
}

static const bora_key probe_keys[] = {
    {"vocab_size", BORA_KEY_INT, 0, "0", "token ids (bora train gives the tokenizer's)"},
    {"num_mel_bins", BORA_KEY_INT, 0, "80", "mel bins of input_features"},
    {"frames", BORA_KEY_INT, 0, "3000", "frames of input_features (frames·160 samples)"},
    {"max_target_positions", BORA_KEY_INT, 0, "16", "decoder positions"},
    {"d_model", BORA_KEY_INT, 0, "8", "the token embedding's width"},
    {NULL, 0, 0, NULL, NULL},
};

static const bora_model_ops probe_ops = {
    .hdr = BORA_COMPONENT_KEYS(bora_model_ops, BORA_KIND_MODEL, "audio_probe",
                               "a toy audio model for the audio dataset's tests", probe_keys),
    .create = probe_create,
    .build = probe_build,
    .destroy = probe_destroy,
};

static bora_status probe_init(const bora_host *h)
{
    probe_host = h;
    return h->add(h, &probe_ops.hdr);
}

BORA_PLUGIN_DEFINE("audio-probe-model", "0.0.1", probe_init, NULL)
