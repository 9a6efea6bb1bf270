/* plugins/models/gpt2 — GPT-2 (Radford et al. 2019), as Hugging Face's GPT2LMHeadModel:
 * learned positions, pre-LayerNorm blocks, causal multi-head attention, a GELU MLP, and the LM
 * head tied to the token embedding. Parameter names and layouts are the Hugging Face state
 * dict's (Conv1D weights stored (in, out)), so model.safetensors loads there unchanged.
 *
 * Inputs: input_ids and targets (batch, position) i32 (targets -100 where nothing is
 * predicted) and segment_ids (batch, position) i32 (attention stays inside a document). The
 * train graph returns the summed cross-entropy; the host divides by the step's target count;
 * eval returns the logits.
 *
 * Generation keeps a KV cache per layer (model state, (batch, key_position, heads, head_dim)):
 * prefill runs a whole window from position 0, writing every position's keys and values, and
 * returns its logits; decode runs one new token at the runtime extent `position`, writes its
 * keys and values there and attends over the first `key_length` (position + 1) cached ones. */
#include <bora/model.h>

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

typedef struct gpt2 {
    const bora_host *h;
    int64_t seq_len, hidden_dim, num_layers, num_heads, mlp_scale, vocab_size;
    double initializer_range, layer_norm_epsilon;
    int activation;
    int use_bias, scale_attn_by_inverse_layer_idx, upcast_attn, gradient_checkpointing;
} gpt2;

static const bora_key gpt2_keys[] = {
    {"seq_len", BORA_KEY_INT, 0, "1024", "positions per sequence (the learned position table)"},
    {"hidden_dim", BORA_KEY_INT, 0, "768", "width of the residual stream"},
    {"num_layers", BORA_KEY_INT, 0, "12", "transformer blocks"},
    {"num_heads", BORA_KEY_INT, 0, "12", "attention heads (hidden_dim must divide by it)"},
    {"mlp_scale", BORA_KEY_INT, 0, "4", "MLP width as a multiple of hidden_dim"},
    {"vocab_size", BORA_KEY_INT, 0, "50257",
     "tokens in the vocabulary (bora train and bora graph set it to the tokenizer's unless given)"},
    {"initializer_range", BORA_KEY_FLOAT, 0, "0.02",
     "standard deviation of initial weights (0 or more)"},
    {"layer_norm_epsilon", BORA_KEY_FLOAT, 0, "1e-5",
     "added to the variance in LayerNorm (above 0)"},
    {"activation_function", BORA_KEY_STRING, 0, "gelu_new",
     "MLP activation: gelu_new (tanh), gelu (exact), relu or silu"},
    {"use_bias", BORA_KEY_BOOL, 0, "true", "biases in the linear layers"},
    {"scale_attn_by_inverse_layer_idx", BORA_KEY_BOOL, 0, "false",
     "also divide attention scores by the layer index + 1 (Mistral's stability option)"},
    {"upcast_attn", BORA_KEY_BOOL, 0, "false",
     "keep attention's products in f32 under trainer.mp c=bf16 (Mistral's stability option)"},
    {"gradient_checkpointing", BORA_KEY_BOOL, 0, "false",
     "recompute each block in the backward pass instead of keeping its activations"},
    {NULL, 0, 0, NULL, NULL},
};

static bora_status gpt2_create(const bora_host *h, const bora_config *cfg, bora_model **out)
{
    gpt2 *m = h->alloc(h, sizeof *m, 16);
    if (!m)
        return h->fail(h, BORA_ERR_NOMEM, "out of memory");
    m->h = h;
    const char *act = "gelu_new";
    int64_t *ints[] = {&m->seq_len,   &m->hidden_dim, &m->num_layers,
                       &m->num_heads, &m->mlp_scale,  &m->vocab_size};
    static const int64_t defaults[] = {1024, 768, 12, 12, 4, 50257};
    bora_status st = BORA_OK;
    for (int i = 0; i < 6 && st == BORA_OK; i++)
        st = h->config_int(h, cfg, gpt2_keys[i].name, defaults[i], ints[i]);
    if (st == BORA_OK)
        st = h->config_float(h, cfg, "initializer_range", 0.02, &m->initializer_range);
    if (st == BORA_OK)
        st = h->config_float(h, cfg, "layer_norm_epsilon", 1e-5, &m->layer_norm_epsilon);
    if (st == BORA_OK)
        st = h->config_string(h, cfg, "activation_function", "gelu_new", &act);
    if (st == BORA_OK)
        st = h->config_bool(h, cfg, "use_bias", 1, &m->use_bias);
    if (st == BORA_OK)
        st = h->config_bool(h, cfg, "scale_attn_by_inverse_layer_idx", 0,
                            &m->scale_attn_by_inverse_layer_idx);
    if (st == BORA_OK)
        st = h->config_bool(h, cfg, "upcast_attn", 0, &m->upcast_attn);
    if (st == BORA_OK)
        st = h->config_bool(h, cfg, "gradient_checkpointing", 0, &m->gradient_checkpointing);
    if (st == BORA_OK) {
        if (!strcmp(act, "gelu_new") || !strcmp(act, "gelu_pytorch_tanh"))
            m->activation = BORA_OP_GELU_TANH;
        else if (!strcmp(act, "gelu"))
            m->activation = BORA_OP_GELU_EXACT;
        else if (!strcmp(act, "relu"))
            m->activation = BORA_OP_RELU;
        else if (!strcmp(act, "silu") || !strcmp(act, "swish"))
            m->activation = BORA_OP_SILU;
        else
            st = h->fail(h, BORA_ERR_CONFIG,
                         "activation_function '%s' is not one of gelu_new, gelu, relu, silu", act);
    }
    for (int i = 0; i < 6 && st == BORA_OK; i++)
        if (*ints[i] < 1)
            st = h->fail(h, BORA_ERR_CONFIG, "%s must be at least 1, not %lld", gpt2_keys[i].name,
                         (long long)*ints[i]);
    /* Written "!(x >= 0)" so that NaN is refused too. */
    if (st == BORA_OK && !(m->initializer_range >= 0 && isfinite(m->initializer_range)))
        st = h->fail(h, BORA_ERR_CONFIG,
                     "model.initializer_range: %g is not a standard deviation; give 0 or more "
                     "(GPT-2 uses 0.02)",
                     m->initializer_range);
    if (st == BORA_OK && !(m->layer_norm_epsilon > 0 && isfinite(m->layer_norm_epsilon)))
        st = h->fail(h, BORA_ERR_CONFIG,
                     "model.layer_norm_epsilon: %g would let LayerNorm divide by zero; give a "
                     "number above 0 (GPT-2 uses 1e-5)",
                     m->layer_norm_epsilon);
    /* the widths the blocks compute from hidden_dim (qkv, the MLP), checked here: a wrapped
     * product would reach the graph as a nonsense size */
    int64_t wide;
    if (st == BORA_OK &&
        (__builtin_mul_overflow(m->hidden_dim, 3 > m->mlp_scale ? 3 : m->mlp_scale, &wide) ||
         wide > ((int64_t)1 << 62)))
        st = h->fail(h, BORA_ERR_CONFIG,
                     "hidden_dim %lld with mlp_scale %lld is too large: the widest layer "
                     "(max(3, mlp_scale) x hidden_dim) must stay within 2^62",
                     (long long)m->hidden_dim, (long long)m->mlp_scale);
    if (st == BORA_OK && m->hidden_dim % m->num_heads)
        st = h->fail(h, BORA_ERR_CONFIG, "hidden_dim %lld does not divide into %lld heads",
                     (long long)m->hidden_dim, (long long)m->num_heads);
    if (st != BORA_OK) {
        h->free(h, m);
        return st;
    }
    *out = (bora_model *)m;
    return BORA_OK;
}

static void gpt2_destroy(bora_model *model)
{
    gpt2 *m = (gpt2 *)model;
    m->h->free(m->h, m);
}

/* One parameter with a Hugging Face name built from a format. */
static bora_tensor *param(bora_graph *g, const char *name, int n, const bora_axis *axes,
                          bora_init init, uint32_t flags)
{
    return bora_param(g, name, BORA_DTYPE_F32, n, axes, init, flags);
}

/* LayerNorm over embed with prefix.{weight,bias}. */
static bora_tensor *layernorm(bora_graph *g, const gpt2 *m, const char *prefix, bora_tensor *x)
{
    char w[128], b[128];
    snprintf(w, sizeof w, "%s.weight", prefix);
    snprintf(b, sizeof b, "%s.bias", prefix);
    bora_axis e = {"embed", m->hidden_dim};
    return g->api->layernorm(g, x, param(g, w, 1, &e, bora_init_ones(), BORA_PARAM_NO_DECAY),
                             param(g, b, 1, &e, bora_init_zeros(), BORA_PARAM_NO_DECAY), "embed",
                             m->layer_norm_epsilon);
}

/* A Conv1D: x (..., in) -> (..., out), weight (in, out) (flagged so: fan_in first), optional
 * bias and activation. */
static bora_tensor *conv1d(bora_graph *g, const gpt2 *m, const char *prefix, bora_tensor *x,
                           const char *in, int64_t in_size, const char *out, int64_t out_size,
                           double std, int activation)
{
    char w[128], b[128];
    snprintf(w, sizeof w, "%s.weight", prefix);
    snprintf(b, sizeof b, "%s.bias", prefix);
    bora_axis wa[2] = {{in, in_size}, {out, out_size}};
    bora_tensor *W = param(g, w, 2, wa, bora_init_normal(std), BORA_PARAM_IN_OUT);
    bora_tensor *B =
        m->use_bias ? param(g, b, 1, wa + 1, bora_init_zeros(), BORA_PARAM_NO_DECAY) : NULL;
    const char *k[] = {in};
    bora_dot_opts o = {sizeof o, activation, B};
    return g->api->dot(g, x, W, 1, k, &o);
}

static bora_status gpt2_build(bora_model *model, bora_graph *g, int32_t mode, bora_tensor **out)
{
    const gpt2 *m = (const gpt2 *)model;
    const bora_graph_api *A = g->api;
    if (mode != BORA_MODE_TRAIN && mode != BORA_MODE_EVAL && mode != BORA_MODE_PREFILL &&
        mode != BORA_MODE_DECODE)
        return m->h->fail(m->h, BORA_ERR_UNSUPPORTED, "gpt2 has no graph for mode %d", mode);
    int cached = mode == BORA_MODE_PREFILL || mode == BORA_MODE_DECODE;
    if (cached && A->struct_size < offsetof(bora_graph_api, write_slice) + sizeof(void *))
        return m->h->fail(m->h, BORA_ERR_UNSUPPORTED, "the host has no model state (ABI < 1.2)");
    int64_t E = m->hidden_dim, H = m->num_heads, hd = E / H, L = m->num_layers;
    double std = m->initializer_range, proj_std = std / sqrt(2.0 * (double)L);
    /* Decode feeds one position; every other mode a whole window. */
    int64_t T = mode == BORA_MODE_DECODE ? 1 : m->seq_len;
    bora_axis io[2] = {{"batch", A->batch(g)}, {"position", T}};
    bora_tensor *ids = bora_input(g, "input_ids", BORA_DTYPE_I32, 2, io);
    bora_tensor *seg = cached ? NULL : bora_input(g, "segment_ids", BORA_DTYPE_I32, 2, io);
    bora_axis wte_a[2] = {{"vocab", m->vocab_size}, {"embed", E}};
    bora_axis wpe_a[2] = {{"position", m->seq_len}, {"embed", E}};
    bora_tensor *wte =
        param(g, "transformer.wte.weight", 2, wte_a, bora_init_normal(std), BORA_PARAM_NO_DECAY);
    bora_tensor *wpe =
        param(g, "transformer.wpe.weight", 2, wpe_a, bora_init_normal(std), BORA_PARAM_NO_DECAY);
    /* Decode: the new token's position p (where its keys and values go in the cache) and the
     * keys attended, p + 1. Prefill fills the cache from position 0. */
    bora_tensor *pos = NULL, *key_length = NULL, *pos_emb = wpe;
    if (mode == BORA_MODE_DECODE) {
        pos = A->extent(g, "position", m->seq_len - 1);
        key_length = A->extent(g, "key_length", m->seq_len);
        pos_emb = A->embedding(g, wpe, pos, "position"); /* (embed) */
    }
    /* (batch, position, embed): the residual stream (bf16 in memory under trainer.mp r=bf16) */
    bora_tensor *x = bora_residual(g, bora_add(g, A->embedding(g, wte, ids, "vocab"), pos_emb));
    for (int64_t l = 0; l < L; l++) {
        if (m->gradient_checkpointing)
            x = A->checkpoint(g, x);
        char p[96];
        snprintf(p, sizeof p, "transformer.h.%lld.ln_1", (long long)l);
        bora_tensor *h = layernorm(g, m, p, x);
        snprintf(p, sizeof p, "transformer.h.%lld.attn.c_attn", (long long)l);
        bora_tensor *qkv = conv1d(g, m, p, h, "embed", E, "qkv", 3 * E, std, 0);
        bora_axis parts[3] = {{"three", 3}, {"heads", H}, {"head_dim", hd}};
        qkv = A->split(g, qkv, "qkv", 3, parts); /* (batch, position, three, heads, head_dim) */
        bora_tensor *q = A->split(g, A->slice(g, qkv, "three", 0, 1), "three", 0, NULL);
        bora_tensor *k = A->split(g, A->slice(g, qkv, "three", 1, 1), "three", 0, NULL);
        bora_tensor *v = A->split(g, A->slice(g, qkv, "three", 2, 1), "three", 0, NULL);
        k = bora_rename(g, k, "position", "key_position");
        v = bora_rename(g, v, "position", "key_position");
        if (cached) { /* the KV cache: (batch, key_position, heads, head_dim) per layer */
            bora_axis ca[4] = {{"batch", A->batch(g)},
                               {"key_position", m->seq_len},
                               {"heads", H},
                               {"head_dim", hd}};
            char kn[96], vn[96];
            snprintf(kn, sizeof kn, "transformer.h.%lld.attn.key_cache", (long long)l);
            snprintf(vn, sizeof vn, "transformer.h.%lld.attn.value_cache", (long long)l);
            k = A->write_slice(g, A->state(g, kn, BORA_DTYPE_F32, 4, ca), k, "key_position", pos);
            v = A->write_slice(g, A->state(g, vn, BORA_DTYPE_F32, 4, ca), v, "key_position", pos);
        }
        double scale = 1.0 / sqrt((double)hd);
        if (m->scale_attn_by_inverse_layer_idx)
            scale /= (double)(l + 1);
        bora_attention_opts ao = {.struct_size = sizeof ao,
                                  .causal = 1,
                                  .scale = scale,
                                  .segment_ids = seg,
                                  .key_length = key_length,
                                  .upcast = m->upcast_attn};
        bora_tensor *att = A->attention(g, q, k, v, &ao);
        const char *heads[] = {"heads", "head_dim"};
        att = A->merge(g, att, 2, heads, "embed_in");
        snprintf(p, sizeof p, "transformer.h.%lld.attn.c_proj", (long long)l);
        att = conv1d(g, m, p, att, "embed_in", E, "embed_out", E, proj_std, 0);
        x = bora_residual(g, bora_add(g, x, bora_rename(g, att, "embed_out", "embed")));
        snprintf(p, sizeof p, "transformer.h.%lld.ln_2", (long long)l);
        h = layernorm(g, m, p, x);
        snprintf(p, sizeof p, "transformer.h.%lld.mlp.c_fc", (long long)l);
        h = conv1d(g, m, p, h, "embed", E, "mlp", m->mlp_scale * E, std, m->activation);
        snprintf(p, sizeof p, "transformer.h.%lld.mlp.c_proj", (long long)l);
        h = conv1d(g, m, p, h, "mlp", m->mlp_scale * E, "embed_out", E, proj_std, 0);
        x = bora_residual(g, bora_add(g, x, bora_rename(g, h, "embed_out", "embed")));
    }
    if (m->gradient_checkpointing)
        x = A->checkpoint(g, x);
    x = layernorm(g, m, "transformer.ln_f", x);
    const char *e[] = {"embed"};
    bora_tensor *logits = bora_dot(g, x, wte, 1, e); /* tied head: (batch, position, vocab) */
    if (mode != BORA_MODE_TRAIN) {
        *out = A->name(g, logits, "logits");
        return bora_graph_status(g);
    }
    bora_tensor *targets = bora_input(g, "targets", BORA_DTYPE_I32, 2, io);
    *out = A->name(g, A->cross_entropy(g, logits, targets, "vocab", NULL), "loss_sum");
    return bora_graph_status(g);
}

/* Hugging Face's config.json for this model. */
static bora_status gpt2_hf_config(bora_model *model, char *buf, size_t cap, size_t *len)
{
    const gpt2 *m = (const gpt2 *)model;
    if (!m->use_bias)
        return m->h->fail(m->h, BORA_ERR_UNSUPPORTED,
                          "model.use_bias is false, but Hugging Face's GPT2LMHeadModel always has "
                          "biases (it would fill the missing ones with random values): only a "
                          "GPT-2 trained with use_bias: true can be exported");
    const char *act = m->activation == BORA_OP_GELU_TANH    ? "gelu_new"
                      : m->activation == BORA_OP_GELU_EXACT ? "gelu"
                      : m->activation == BORA_OP_RELU       ? "relu"
                                                            : "silu";
    int n = snprintf(buf, cap,
                     "{\"architectures\": [\"GPT2LMHeadModel\"], \"model_type\": \"gpt2\", "
                     "\"vocab_size\": %lld, \"n_positions\": %lld, \"n_embd\": %lld, "
                     "\"n_layer\": %lld, \"n_head\": %lld, \"n_inner\": %lld, "
                     "\"activation_function\": \"%s\", \"layer_norm_epsilon\": %.17g, "
                     "\"initializer_range\": %.17g, \"scale_attn_by_inverse_layer_idx\": %s, "
                     "\"reorder_and_upcast_attn\": %s, \"tie_word_embeddings\": true}",
                     (long long)m->vocab_size, (long long)m->seq_len, (long long)m->hidden_dim,
                     (long long)m->num_layers, (long long)m->num_heads,
                     (long long)(m->mlp_scale * m->hidden_dim), act, m->layer_norm_epsilon,
                     m->initializer_range, m->scale_attn_by_inverse_layer_idx ? "true" : "false",
                     m->upcast_attn ? "true" : "false");
    if (n < 0)
        return m->h->fail(m->h, BORA_ERR_INTERNAL, "cannot format config.json");
    *len = (size_t)n;
    return BORA_OK;
}

/* How bora import reads a GPT2LMHeadModel config.json (every key transformers' GPT2Config
 * writes). Published GPT-2s have dropouts of 0.1; bora trains without dropout, so they are
 * accepted with a note. */
#define GPT2_META(k)                                 \
    {                                                \
        k, BORA_HF_IGNORE, 0, NULL, NULL, NULL, NULL \
    }
#define GPT2_DROPOUT(k)                                                          \
    {                                                                            \
        k, BORA_HF_NOTE, 0, NULL, NULL, "0", "bora trains GPT-2 without dropout" \
    }
static const bora_hf_key gpt2_hf_keys[] = {
    {"vocab_size", BORA_HF_COPY, 0, NULL, NULL, NULL, NULL},
    {"n_positions", BORA_HF_COPY, 0, "seq_len", NULL, NULL, NULL},
    {"n_embd", BORA_HF_COPY, 0, "hidden_dim", NULL, NULL, NULL},
    {"n_layer", BORA_HF_COPY, 0, "num_layers", NULL, NULL, NULL},
    {"n_head", BORA_HF_COPY, 0, "num_heads", NULL, NULL, NULL},
    {"n_inner", BORA_HF_RATIO, 0, "mlp_scale", "n_embd", "4", NULL},
    {"activation_function", BORA_HF_COPY, 0, NULL, NULL, NULL, NULL},
    {"layer_norm_epsilon", BORA_HF_COPY, 0, NULL, NULL, NULL, NULL},
    {"initializer_range", BORA_HF_COPY, 0, NULL, NULL, NULL, NULL},
    {"scale_attn_by_inverse_layer_idx", BORA_HF_COPY, 0, NULL, NULL, NULL, NULL},
    {"reorder_and_upcast_attn", BORA_HF_COPY, 0, "upcast_attn", NULL, NULL, NULL},
    {"n_ctx", BORA_HF_IGNORE, 0, NULL, NULL, NULL, NULL}, /* an old alias of n_positions */
    {"scale_attn_weights", BORA_HF_EXPECT, 0, NULL, NULL, "true",
     "bora's GPT-2 always divides attention scores by the square root of the head width"},
    {"tie_word_embeddings", BORA_HF_EXPECT, 0, NULL, NULL, "true",
     "bora's GPT-2 ties its head to transformer.wte.weight"},
    {"add_cross_attention", BORA_HF_EXPECT, 0, NULL, NULL, "false",
     "bora's GPT-2 is a decoder without cross-attention"},
    {"n_special", BORA_HF_EXPECT, 0, NULL, NULL, "0",
     "bora's GPT-2 has no embeddings of extra special tokens beside vocab_size"},
    GPT2_META("predict_special_tokens"), /* read only by GPT2DoubleHeadsModel */
    GPT2_DROPOUT("attn_pdrop"),
    GPT2_DROPOUT("embd_pdrop"),
    GPT2_DROPOUT("resid_pdrop"),
    GPT2_DROPOUT("summary_first_dropout"),
    /* the heads of GPT2DoubleHeadsModel and generation settings: not this model */
    GPT2_META("summary_type"),
    GPT2_META("summary_use_proj"),
    GPT2_META("summary_activation"),
    GPT2_META("summary_proj_to_labels"),
    GPT2_META("task_specific_params"),
    GPT2_META("architectures"),
    GPT2_META("model_type"),
    GPT2_META("torch_dtype"),
    GPT2_META("dtype"),
    GPT2_META("transformers_version"),
    GPT2_META("bos_token_id"),
    GPT2_META("eos_token_id"),
    GPT2_META("pad_token_id"),
    GPT2_META("use_cache"),
    GPT2_META("_name_or_path"),
    {NULL, 0, 0, NULL, NULL, NULL, NULL},
};

static const bora_model_ops gpt2_ops = {
    .hdr = {sizeof(bora_model_ops), BORA_KIND_MODEL, "gpt2",
            "GPT-2 as Hugging Face's GPT2LMHeadModel", gpt2_keys},
    .create = gpt2_create,
    .build = gpt2_build,
    .destroy = gpt2_destroy,
    .hf_config = gpt2_hf_config,
    .hf_keys = gpt2_hf_keys,
};

static bora_status gpt2_init(const bora_host *h)
{
    return h->add(h, &gpt2_ops.hdr);
}

BORA_PLUGIN_DEFINE("gpt2", "0.1.0", gpt2_init, NULL)
