/* plugins/models/whisper — Whisper (Radford et al. 2022) as Hugging Face's
 * WhisperForConditionalGeneration: an audio encoder over log-mel frames and a text decoder that
 * attends to it. Parameter names and layouts are the Hugging Face state dict's (nn.Linear
 * weights (out, in), nn.Conv1d weights (out, in, kernel)), so model.safetensors loads there.
 *
 *   encoder: x = gelu(conv1(mel)) (kernel 3, padding 1); x = gelu(conv2(x)) (kernel 3, stride 2,
 *            padding 1): frame 2S -> source S; x += sinusoids (frozen); pre-LN blocks of
 *            bidirectional self-attention and an MLP; a final LayerNorm.
 *   decoder: x = embed_tokens(ids) + embed_positions (learned); pre-LN blocks of causal
 *            self-attention, cross-attention over the encoder's S outputs and an MLP; a final
 *            LayerNorm; logits through embed_tokens (proj_out is tied to it).
 * Attention: q, v and out projections with biases, k without; scores scaled by 1/sqrt(head_dim).
 *
 * Inputs: input_features (batch, mel, frame) f32 with frame = 2·max_source_positions, and
 * input_ids (batch, position) i32 with position = max_target_positions (targets too, in train).
 * train returns the summed cross-entropy, eval the logits. prefill runs the encoder and a
 * decoder window from position 0, writing each decoder layer's self-attention cache (batch,
 * key_position, heads, head_dim) and its cross-attention keys and values (batch, key_source,
 * heads, head_dim), computed once from the encoder's output, into model state; decode runs one
 * token at the runtime extent `position` over both, with no input_features. */
#include "whisper.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* One build: the graph, the mode and the decode extents. */
typedef struct ctx {
    bora_graph *g;
    const bora_graph_api *A;
    const whisper *m;
    int32_t mode;
    bora_tensor *pos, *key_length; /* decode: the new token's position, position + 1 */
} ctx;

static bora_tensor *param(ctx *c, const char *name, int n, const bora_axis *axes, bora_init init,
                          uint32_t flags)
{
    return bora_param(c->g, name, BORA_DTYPE_F32, n, axes, init, flags);
}

/* nn.LayerNorm over embed, prefix.{weight,bias}. */
static bora_tensor *layernorm(ctx *c, const char *prefix, bora_tensor *x)
{
    char w[160], b[160];
    snprintf(w, sizeof w, "%s.weight", prefix);
    snprintf(b, sizeof b, "%s.bias", prefix);
    bora_axis e = {"embed", c->m->d_model};
    return c->A->layernorm(c->g, x, param(c, w, 1, &e, bora_init_ones(), BORA_PARAM_NO_DECAY),
                           param(c, b, 1, &e, bora_init_zeros(), BORA_PARAM_NO_DECAY), "embed",
                           WHISPER_LAYER_NORM_EPS);
}

/* nn.Linear: x (..., in) -> (..., out), prefix.weight (out, in), prefix.bias if bias, an
 * activation (or 0) fused in the product. */
static bora_tensor *linear(ctx *c, const char *prefix, bora_tensor *x, const char *in,
                           int64_t in_size, const char *out, int64_t out_size, int bias,
                           int activation)
{
    char w[160], b[160];
    snprintf(w, sizeof w, "%s.weight", prefix);
    snprintf(b, sizeof b, "%s.bias", prefix);
    bora_axis wa[2] = {{out, out_size}, {in, in_size}};
    bora_tensor *W = param(c, w, 2, wa, bora_init_normal(c->m->init_std), 0);
    bora_tensor *B = bias ? param(c, b, 1, wa, bora_init_zeros(), BORA_PARAM_NO_DECAY) : NULL;
    const char *k[] = {in};
    bora_dot_opts o = {sizeof o, activation, B};
    return c->A->dot(c->g, x, W, 1, k, &o);
}

/* prefix.{q,k,v}_proj of h (..., len, embed) split into heads: (..., len, heads, head_dim). */
static bora_tensor *project(ctx *c, const char *prefix, const char *which, bora_tensor *h,
                            int64_t heads, int bias)
{
    char p[192];
    snprintf(p, sizeof p, "%s.%s", prefix, which);
    int64_t E = c->m->d_model;
    bora_axis parts[2] = {{"heads", heads}, {"head_dim", E / heads}};
    return c->A->split(c->g, linear(c, p, h, "embed", E, "attn", E, bias, 0), "attn", 2, parts);
}

/* Attention of q over k and v with ao, heads merged and prefix.out_proj applied:
 * (..., len, embed). */
static bora_tensor *attend(ctx *c, const char *prefix, bora_tensor *q, bora_tensor *k,
                           bora_tensor *v, int64_t heads, bora_attention_opts *ao)
{
    int64_t E = c->m->d_model;
    ao->scale = 1.0 / sqrt((double)(E / heads));
    bora_tensor *att = c->A->attention(c->g, q, k, v, ao);
    const char *merged[] = {"heads", "head_dim"};
    att = c->A->merge(c->g, att, 2, merged, "attn");
    char p[192];
    snprintf(p, sizeof p, "%s.out_proj", prefix);
    return bora_rename(c->g, linear(c, p, att, "attn", E, "embed_out", E, 1, 0), "embed_out",
                       "embed");
}

/* The MLP of a block: fc2(act(fc1(h))). */
static bora_tensor *mlp(ctx *c, const char *prefix, bora_tensor *h, int64_t ffn)
{
    char p[192];
    int64_t E = c->m->d_model;
    snprintf(p, sizeof p, "%s.fc1", prefix);
    h = linear(c, p, h, "embed", E, "ffn", ffn, 1, c->m->activation);
    snprintf(p, sizeof p, "%s.fc2", prefix);
    return bora_rename(c->g, linear(c, p, h, "ffn", ffn, "embed_out", E, 1, 0), "embed_out",
                       "embed");
}

/* nn.Conv1d prefix (weight (out, in, kernel 3), bias (out)) over x's frame axis, then GELU
 * (exact: WhisperEncoder calls nn.functional.gelu whatever activation_function says). */
static bora_tensor *conv_gelu(ctx *c, const char *prefix, bora_tensor *x, const char *in,
                              int64_t in_size, int32_t stride)
{
    char w[160], b[160];
    snprintf(w, sizeof w, "%s.weight", prefix);
    snprintf(b, sizeof b, "%s.bias", prefix);
    int64_t E = c->m->d_model;
    bora_axis wa[3] = {{"embed_out", E}, {in, in_size}, {"kernel", 3}};
    bora_axis ba = {"embed", E};
    bora_tensor *W = param(c, w, 3, wa, bora_init_normal(c->m->init_std), 0);
    bora_tensor *B = param(c, b, 1, &ba, bora_init_zeros(), BORA_PARAM_NO_DECAY);
    bora_conv1d_opts o = {.struct_size = sizeof o,
                          .stride = stride,
                          .padding = 1,
                          .length_axis = "frame",
                          .in_axis = in,
                          .kernel_axis = "kernel"};
    bora_tensor *y = bora_rename(c->g, bora_conv1d(c->g, x, W, &o), "embed_out", "embed");
    return bora_unary(c->g, BORA_OP_GELU_EXACT, bora_add(c->g, y, B));
}

/* The encoder over input_features: (batch, source, embed). */
static bora_tensor *encoder(ctx *c)
{
    const whisper *m = c->m;
    bora_graph *g = c->g;
    const bora_graph_api *A = c->A;
    int64_t E = m->d_model, S = m->max_source_positions, H = m->encoder_attention_heads;
    bora_axis fa[3] = {{"batch", A->batch(g)}, {"mel", m->num_mel_bins}, {"frame", 2 * S}};
    bora_tensor *mel = bora_input(g, "input_features", BORA_DTYPE_F32, 3, fa);
    bora_tensor *x = conv_gelu(c, "model.encoder.conv1", mel, "mel", m->num_mel_bins, 1);
    x = conv_gelu(c, "model.encoder.conv2", x, "embed", E, 2); /* (batch, embed, frame S) */
    const char *order[] = {"batch", "frame", "embed"};
    x = bora_rename(g, A->permute(g, x, 3, order), "frame", "source");
    bora_axis pa[2] = {{"source", S}, {"embed", E}};
    bora_tensor *positions = param(c, "model.encoder.embed_positions.weight", 2, pa,
                                   bora_init_sinusoids(), BORA_PARAM_NO_DECAY | BORA_PARAM_FROZEN);
    x = bora_residual(g, bora_add(g, x, positions));
    for (int64_t l = 0; l < m->encoder_layers; l++) {
        if (m->gradient_checkpointing)
            x = A->checkpoint(g, x);
        char p[128], n[160];
        snprintf(p, sizeof p, "model.encoder.layers.%lld", (long long)l);
        snprintf(n, sizeof n, "%s.self_attn_layer_norm", p);
        bora_tensor *h = layernorm(c, n, x);
        snprintf(n, sizeof n, "%s.self_attn", p);
        bora_tensor *q = project(c, n, "q_proj", h, H, 1);
        bora_tensor *k = bora_rename(g, project(c, n, "k_proj", h, H, 0), "source", "key_source");
        bora_tensor *v = bora_rename(g, project(c, n, "v_proj", h, H, 1), "source", "key_source");
        bora_attention_opts ao = {.struct_size = sizeof ao,
                                  .causal = 0,
                                  .query_axis = "source",
                                  .key_axis = "key_source"};
        x = bora_residual(g, bora_add(g, x, attend(c, n, q, k, v, H, &ao)));
        snprintf(n, sizeof n, "%s.final_layer_norm", p);
        x = bora_residual(g, bora_add(g, x, mlp(c, p, layernorm(c, n, x), m->encoder_ffn_dim)));
    }
    if (m->gradient_checkpointing)
        x = A->checkpoint(g, x);
    return layernorm(c, "model.encoder.layer_norm", x);
}

/* Cache or cross-attention state prefix.name of (batch, len_axis, heads, head_dim). */
static bora_tensor *state(ctx *c, const char *prefix, const char *name, const char *len_axis,
                          int64_t len, int64_t heads)
{
    char n[192];
    snprintf(n, sizeof n, "%s.%s", prefix, name);
    bora_axis ca[4] = {{"batch", c->A->batch(c->g)},
                       {len_axis, len},
                       {"heads", heads},
                       {"head_dim", c->m->d_model / heads}};
    return c->A->state(c->g, n, BORA_DTYPE_F32, 4, ca);
}

/* One decoder layer's causal self-attention over h (batch, position, embed), through the KV
 * cache in prefill and decode. */
static bora_tensor *self_attention(ctx *c, const char *prefix, bora_tensor *h)
{
    bora_graph *g = c->g;
    const bora_graph_api *A = c->A;
    int64_t H = c->m->decoder_attention_heads, T = c->m->max_target_positions;
    bora_tensor *q = project(c, prefix, "q_proj", h, H, 1);
    bora_tensor *k =
        bora_rename(g, project(c, prefix, "k_proj", h, H, 0), "position", "key_position");
    bora_tensor *v =
        bora_rename(g, project(c, prefix, "v_proj", h, H, 1), "position", "key_position");
    if (c->mode == BORA_MODE_PREFILL || c->mode == BORA_MODE_DECODE) {
        k = A->write_slice(g, state(c, prefix, "key_cache", "key_position", T, H), k,
                           "key_position", c->pos);
        v = A->write_slice(g, state(c, prefix, "value_cache", "key_position", T, H), v,
                           "key_position", c->pos);
    }
    bora_attention_opts ao = {.struct_size = sizeof ao, .causal = 1, .key_length = c->key_length};
    return attend(c, prefix, q, k, v, H, &ao);
}

/* One decoder layer's cross-attention of h (batch, position, embed) over the encoder's output
 * enc (batch, source, embed). Prefill writes the keys and values into model state, which decode
 * (enc NULL) reads. */
static bora_tensor *cross_attention(ctx *c, const char *prefix, bora_tensor *h, bora_tensor *enc)
{
    bora_graph *g = c->g;
    const bora_graph_api *A = c->A;
    int64_t H = c->m->decoder_attention_heads, S = c->m->max_source_positions;
    bora_tensor *q = project(c, prefix, "q_proj", h, H, 1), *k = NULL, *v = NULL;
    if (enc) {
        k = bora_rename(g, project(c, prefix, "k_proj", enc, H, 0), "source", "key_source");
        v = bora_rename(g, project(c, prefix, "v_proj", enc, H, 1), "source", "key_source");
    }
    if (c->mode == BORA_MODE_PREFILL) {
        k = A->write_slice(g, state(c, prefix, "key_cache", "key_source", S, H), k, "key_source",
                           NULL);
        v = A->write_slice(g, state(c, prefix, "value_cache", "key_source", S, H), v, "key_source",
                           NULL);
    } else if (c->mode == BORA_MODE_DECODE) { /* what prefill wrote */
        k = state(c, prefix, "key_cache", "key_source", S, H);
        v = state(c, prefix, "value_cache", "key_source", S, H);
    }
    bora_attention_opts ao = {
        .struct_size = sizeof ao, .causal = 0, .query_axis = "position", .key_axis = "key_source"};
    return attend(c, prefix, q, k, v, H, &ao);
}

static bora_status whisper_build(bora_model *model, bora_graph *g, int32_t mode, bora_tensor **out)
{
    const whisper *m = (const whisper *)model;
    const bora_graph_api *A = g->api;
    if (mode != BORA_MODE_TRAIN && mode != BORA_MODE_EVAL && mode != BORA_MODE_PREFILL &&
        mode != BORA_MODE_DECODE)
        return m->h->fail(m->h, BORA_ERR_UNSUPPORTED, "whisper has no graph for mode %d", mode);
    /* conv1d and the frozen sinusoids came with ABI 1.15 */
    if (A->struct_size < offsetof(bora_graph_api, conv1d) + sizeof A->conv1d)
        return m->h->fail(m->h, BORA_ERR_UNSUPPORTED,
                          "model whisper needs a host of ABI 1.15 or later (conv1d, frozen "
                          "parameters); this one is older");
    ctx c = {g, A, m, mode, NULL, NULL};
    int64_t E = m->d_model, T = m->max_target_positions, V = m->vocab_size;
    bora_tensor *enc = mode == BORA_MODE_DECODE ? NULL : encoder(&c);
    /* Decode: the new token's position p and the keys attended, p + 1; every other mode runs
     * the whole window from position 0. */
    if (mode == BORA_MODE_DECODE) {
        c.pos = A->extent(g, "position", T - 1);
        c.key_length = A->extent(g, "key_length", T);
    }
    bora_axis io[2] = {{"batch", A->batch(g)}, {"position", mode == BORA_MODE_DECODE ? 1 : T}};
    bora_tensor *ids = bora_input(g, "input_ids", BORA_DTYPE_I32, 2, io);
    bora_axis ta[2] = {{"vocab", V}, {"embed", E}}, pa[2] = {{"position", T}, {"embed", E}};
    bora_tensor *embed =
        param(&c, "model.decoder.embed_tokens.weight", 2, ta, bora_init_normal(m->init_std), 0);
    bora_tensor *positions =
        param(&c, "model.decoder.embed_positions.weight", 2, pa, bora_init_normal(m->init_std), 0);
    if (mode == BORA_MODE_DECODE)
        positions = A->embedding(g, positions, c.pos, "position"); /* (embed) */
    bora_tensor *tokens = A->embedding(g, embed, ids, "vocab");
    if (m->scale_embedding)
        tokens = A->scale(g, tokens, sqrt((double)E));
    bora_tensor *x = bora_residual(g, bora_add(g, tokens, positions));
    for (int64_t l = 0; l < m->decoder_layers; l++) {
        if (m->gradient_checkpointing)
            x = A->checkpoint(g, x);
        char p[128], n[160];
        snprintf(p, sizeof p, "model.decoder.layers.%lld", (long long)l);
        snprintf(n, sizeof n, "%s.self_attn_layer_norm", p);
        bora_tensor *h = layernorm(&c, n, x);
        snprintf(n, sizeof n, "%s.self_attn", p);
        x = bora_residual(g, bora_add(g, x, self_attention(&c, n, h)));
        snprintf(n, sizeof n, "%s.encoder_attn_layer_norm", p);
        h = layernorm(&c, n, x);
        snprintf(n, sizeof n, "%s.encoder_attn", p);
        x = bora_residual(g, bora_add(g, x, cross_attention(&c, n, h, enc)));
        snprintf(n, sizeof n, "%s.final_layer_norm", p);
        x = bora_residual(g, bora_add(g, x, mlp(&c, p, layernorm(&c, n, x), m->decoder_ffn_dim)));
    }
    if (m->gradient_checkpointing)
        x = A->checkpoint(g, x);
    x = layernorm(&c, "model.decoder.layer_norm", x);
    const char *e[] = {"embed"};
    bora_tensor *logits =
        bora_dot(g, x, embed, 1, e); /* proj_out, tied: (batch, position, vocab) */
    if (mode != BORA_MODE_TRAIN) {
        *out = A->name(g, logits, "logits");
        return bora_graph_status(g);
    }
    bora_tensor *targets = bora_input(g, "targets", BORA_DTYPE_I32, 2, io);
    *out = A->name(g, A->cross_entropy(g, logits, targets, "vocab", NULL), "loss_sum");
    return bora_graph_status(g);
}

static const bora_model_ops whisper_ops = {
    .hdr = {sizeof(bora_model_ops), BORA_KIND_MODEL, "whisper",
            "Whisper as Hugging Face's WhisperForConditionalGeneration (speech to text)",
            whisper_keys},
    .create = whisper_create,
    .build = whisper_build,
    .destroy = whisper_destroy,
    .hf_config = whisper_hf_config,
    .hf_keys = whisper_hf_keys,
};

static bora_status whisper_init(const bora_host *h)
{
    return h->add(h, &whisper_ops.hdr);
}

BORA_PLUGIN_DEFINE("whisper", "0.1.0", whisper_init, NULL)
