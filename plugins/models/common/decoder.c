/* plugins/models/common/decoder.c — the graph helpers the decoder plugins share: inputs and
 * outputs per mode, nn.Linear and RMSNorm in Hugging Face's names, RoPE, and the KV cache with
 * the ring a sliding layer keeps (decoder.h). */
#include "decoder.h"

#include <stddef.h>
#include <stdio.h>

bora_status decoder_check_build(const decoder_dims *d, const char *type, bora_graph *g,
                                int32_t mode)
{
    const bora_host *h = d->h;
    if (mode != BORA_MODE_TRAIN && mode != BORA_MODE_EVAL && mode != BORA_MODE_PREFILL &&
        mode != BORA_MODE_DECODE)
        return h->fail(h, BORA_ERR_UNSUPPORTED, "%s has no graph for mode %d", type, mode);
    if (g->api->struct_size < offsetof(bora_graph_api, rope) + sizeof(void *))
        return h->fail(h, BORA_ERR_UNSUPPORTED, "%s needs a host with rms_norm and rope (ABI 1.9)",
                       type);
    return BORA_OK;
}

void decoder_inputs(decoder_ctx *c, const decoder_dims *d, bora_graph *g, int32_t mode)
{
    const bora_graph_api *A = g->api;
    int64_t seq_len = d->seq_len;
    int any_ring = 0;
    for (int64_t l = 0; l < d->num_hidden_layers; l++)
        any_ring |= d->slides[l] && d->sliding_window && d->sliding_window < seq_len;
    *c = (decoder_ctx){.g = g,
                       .A = A,
                       .mode = mode,
                       .cached = mode == BORA_MODE_PREFILL || mode == BORA_MODE_DECODE,
                       .seq_len = seq_len,
                       .initializer_range = d->initializer_range};
    int64_t T = mode == BORA_MODE_DECODE ? 1 : seq_len;
    c->io[0] = (bora_axis){"batch", A->batch(g)};
    c->io[1] = (bora_axis){"position", T};
    c->ids = bora_input(g, "input_ids", BORA_DTYPE_I32, 2, c->io);
    if (mode != BORA_MODE_DECODE)
        c->seg = bora_input(g, "segment_ids", BORA_DTYPE_I32, 2, c->io);
    if (mode == BORA_MODE_DECODE) {
        c->pos = A->extent(g, "position", seq_len - 1);
        c->key_length = A->extent(g, "key_length", seq_len);
    }
    if (mode == BORA_MODE_PREFILL && any_ring) /* which of the window's rows hold tokens */
        c->key_length = A->extent(g, "key_length", seq_len);
}

bora_tensor *decoder_embed_table(decoder_ctx *c, const decoder_dims *d)
{
    bora_axis a[2] = {{"vocab", d->vocab_size}, {"embed", d->hidden_size}};
    return decoder_param(c, "model.embed_tokens.weight", 2, a,
                         bora_init_normal(d->initializer_range), 0);
}

bora_tensor *decoder_lm_head(decoder_ctx *c, const decoder_dims *d, bora_tensor *x,
                             bora_tensor *embed)
{
    bora_axis a[2] = {{"vocab", d->vocab_size}, {"embed", d->hidden_size}};
    bora_tensor *head = embed;
    if (!d->tie_word_embeddings)
        head = decoder_param(c, "lm_head.weight", 2, a, bora_init_normal(d->initializer_range), 0);
    const char *e[] = {"embed"};
    return bora_dot(c->g, x, head, 1, e);
}

void decoder_qkv(decoder_ctx *c, const decoder_dims *d, const char *prefix, bora_tensor *h,
                 int bias, bora_tensor **q, bora_tensor **k, bora_tensor **v)
{
    /* K and V keep their own head axis (kv_heads), which GQA reads per group of query heads */
    const char *proj[3] = {"q_proj", "k_proj", "v_proj"};
    const char *heads[3] = {"heads", "kv_heads", "kv_heads"};
    int64_t n_heads[3] = {d->num_attention_heads, d->num_key_value_heads, d->num_key_value_heads};
    bora_tensor **out[3] = {q, k, v};
    char n[200];
    for (int i = 0; i < 3; i++) {
        snprintf(n, sizeof n, "%s.%s", prefix, proj[i]);
        bora_tensor *t = decoder_linear(c, n, h, "embed", d->hidden_size, "proj",
                                        n_heads[i] * d->head_dim, bias, 0);
        bora_axis parts[2] = {{heads[i], n_heads[i]}, {"head_dim", d->head_dim}};
        *out[i] = c->A->split(c->g, t, "proj", 2, parts); /* (batch, position, heads, head_dim) */
    }
}

bora_tensor *decoder_attend(decoder_ctx *c, const decoder_dims *d, const char *prefix,
                            bora_tensor *q, bora_tensor *k, bora_tensor *v, bora_attention_opts *ao,
                            int o_bias)
{
    const bora_graph_api *A = c->A;
    int64_t H = d->num_attention_heads, hd = d->head_dim;
    decoder_kv_cache(c, prefix, &k, &v, d->num_key_value_heads, hd, ao->sliding_window, ao);
    bora_tensor *att = A->attention(c->g, q, k, v, ao);
    const char *merge[] = {"heads", "head_dim"};
    att = A->merge(c->g, att, 2, merge, "attn");
    char n[200];
    snprintf(n, sizeof n, "%s.o_proj", prefix);
    att = decoder_linear(c, n, att, "attn", H * hd, "embed_out", d->hidden_size, o_bias, 0);
    return bora_rename(c->g, att, "embed_out", "embed");
}

bora_tensor *decoder_gated_mlp(decoder_ctx *c, const decoder_dims *d, int64_t l, bora_tensor *h,
                               int bias, int activation)
{
    int64_t E = d->hidden_size, F = d->intermediate_size;
    char n[160];
    snprintf(n, sizeof n, "model.layers.%lld.mlp.gate_proj", (long long)l);
    bora_tensor *gate = decoder_linear(c, n, h, "embed", E, "mlp", F, bias, activation);
    snprintf(n, sizeof n, "model.layers.%lld.mlp.up_proj", (long long)l);
    bora_tensor *up = decoder_linear(c, n, h, "embed", E, "mlp", F, bias, 0);
    snprintf(n, sizeof n, "model.layers.%lld.mlp.down_proj", (long long)l);
    bora_tensor *y =
        decoder_linear(c, n, bora_mul(c->g, gate, up), "mlp", F, "embed_out", E, bias, 0);
    return bora_rename(c->g, y, "embed_out", "embed");
}

bora_status decoder_output(decoder_ctx *c, bora_tensor *logits, bora_tensor **out)
{
    return decoder_output_plus(c, logits, NULL, out);
}

bora_status decoder_output_plus(decoder_ctx *c, bora_tensor *logits, bora_tensor *per_target,
                                bora_tensor **out)
{
    bora_graph *g = c->g;
    const bora_graph_api *A = c->A;
    if (c->mode != BORA_MODE_TRAIN) {
        *out = A->name(g, logits, "logits");
        return bora_graph_status(g);
    }
    bora_tensor *targets = bora_input(g, "targets", BORA_DTYPE_I32, 2, c->io);
    bora_tensor *loss = A->cross_entropy(g, logits, targets, "vocab", NULL);
    if (per_target) { /* the targets cross_entropy counts: those not -100 */
        bora_tensor *t = A->cast(g, targets, BORA_DTYPE_F32);
        bora_tensor *counted = bora_not_equal(g, t, bora_scalar_like(g, t, -100.0));
        const char *io[2] = {"batch", "position"};
        counted = A->reduce(g, BORA_OP_SUM, counted, 2, io);
        loss = bora_add(g, loss, bora_mul(g, counted, per_target));
    }
    *out = A->name(g, loss, "loss_sum");
    return bora_graph_status(g);
}

bora_tensor *decoder_param(decoder_ctx *c, const char *name, int n, const bora_axis *axes,
                           bora_init init, uint32_t flags)
{
    return bora_param(c->g, name, BORA_DTYPE_F32, n, axes, init, flags);
}

bora_tensor *decoder_scalar(decoder_ctx *c, double v)
{
    return c->A->full(c->g, BORA_DTYPE_F32, 0, NULL, v);
}

bora_tensor *decoder_rms(decoder_ctx *c, const char *prefix, bora_tensor *x, const char *axis,
                         int64_t n, double eps, double weight_offset, bora_init init)
{
    char w[160];
    snprintf(w, sizeof w, "%s.weight", prefix);
    bora_axis a = {axis, n};
    bora_tensor *weight = decoder_param(c, w, 1, &a, init, BORA_PARAM_NO_DECAY);
    return c->A->rms_norm(c->g, x, weight, axis, eps, weight_offset);
}

bora_tensor *decoder_linear(decoder_ctx *c, const char *prefix, bora_tensor *x, const char *in,
                            int64_t in_size, const char *out, int64_t out_size, int bias,
                            int activation)
{
    char w[160], b[160];
    snprintf(w, sizeof w, "%s.weight", prefix);
    snprintf(b, sizeof b, "%s.bias", prefix);
    bora_axis wa[2] = {{out, out_size}, {in, in_size}};
    bora_tensor *W = decoder_param(c, w, 2, wa, bora_init_normal(c->initializer_range), 0);
    bora_tensor *B =
        bias ? decoder_param(c, b, 1, wa, bora_init_zeros(), BORA_PARAM_NO_DECAY) : NULL;
    const char *k[] = {in};
    bora_dot_opts o = {sizeof o, activation, B};
    return c->A->dot(c->g, x, W, 1, k, &o);
}

bora_tensor *decoder_rope(decoder_ctx *c, bora_tensor *x, const bora_rope_spec *spec)
{
    bora_rope_opts o = {.struct_size = sizeof o,
                        .layout = BORA_ROPE_ROTATE_HALF,
                        .position_axis = "position",
                        .head_dim_axis = "head_dim",
                        .spec = spec,
                        .offset = 0,
                        .position = c->pos};
    return c->A->rope(c->g, x, &o);
}

/* The cache rows of a sliding layer (a ring of W rows, row p mod W) after prefill: for each row,
 * the newest position p < key_length with p mod W = row, taken chunk by chunk from k (the
 * window's keys, (batch, key_position T, ...)); rows no position reached keep ring's. */
static bora_tensor *ring_fill(decoder_ctx *c, bora_tensor *ring, bora_tensor *k, int64_t T,
                              int64_t W)
{
    const bora_graph_api *A = c->A;
    bora_tensor *n = A->cast(c->g, c->key_length, BORA_DTYPE_F32);
    for (int64_t start = 0; start < T; start += W) {
        int64_t len = T - start < W ? T - start : W;
        bora_axis rows = {"key_position", len};
        bora_tensor *p = A->iota(c->g, rows, BORA_DTYPE_F32, (double)start, 1.0);
        bora_tensor *valid = bora_less(c->g, p, n); /* (key_position) 0/1 */
        bora_tensor *head = A->slice(c->g, ring, "key_position", 0, len);
        head = bora_where(c->g, valid, A->slice(c->g, k, "key_position", start, len), head);
        if (len < W) {
            bora_tensor *parts[2] = {head, A->slice(c->g, ring, "key_position", len, W - len)};
            ring = A->concat(c->g, "key_position", 2, parts);
        } else
            ring = head;
    }
    return ring;
}

/* Keys or values into their cache (model state `name`); returns what attention reads: the whole
 * cache for a full layer, the cache for a ring in decode, k itself in a ring's prefill (which
 * attends within the window over the window's own keys). */
static bora_tensor *cache(decoder_ctx *c, const char *name, bora_tensor *k, int64_t rows, int ring,
                          int64_t kv_heads, int64_t head_dim)
{
    const bora_graph_api *A = c->A;
    bora_axis ca[4] = {{"batch", A->batch(c->g)},
                       {"key_position", rows},
                       {"kv_heads", kv_heads},
                       {"head_dim", head_dim}};
    bora_tensor *state = A->state(c->g, name, BORA_DTYPE_F32, 4, ca);
    if (!ring)
        return A->write_slice(c->g, state, k, "key_position", c->pos);
    if (c->mode == BORA_MODE_PREFILL) {
        bora_tensor *zero = A->full(c->g, BORA_DTYPE_F32, 4, ca, 0.0);
        A->write_slice(c->g, state, ring_fill(c, zero, k, c->seq_len, rows), "key_position", NULL);
        return k;
    }
    /* decode: row = p - W·floor((p + ½) / W), exact in f32 for every position below 2^23 */
    bora_tensor *p = A->cast(c->g, c->pos, BORA_DTYPE_F32);
    bora_tensor *turns =
        bora_div(c->g, bora_add(c->g, p, decoder_scalar(c, 0.5)), decoder_scalar(c, (double)rows));
    turns = A->cast(c->g, A->cast(c->g, turns, BORA_DTYPE_I32), BORA_DTYPE_F32);
    bora_tensor *row = bora_sub(c->g, p, bora_mul(c->g, turns, decoder_scalar(c, (double)rows)));
    return A->write_slice(c->g, state, k, "key_position", A->cast(c->g, row, BORA_DTYPE_I32));
}

void decoder_kv_cache(decoder_ctx *c, const char *prefix, bora_tensor **k, bora_tensor **v,
                      int64_t kv_heads, int64_t head_dim, int64_t W, bora_attention_opts *ao)
{
    if (!c->cached)
        return;
    bora_graph *g = c->g;
    int ring = W && W < c->seq_len;
    int64_t rows = ring ? W : c->seq_len;
    char n[200];
    snprintf(n, sizeof n, "%s.key_cache", prefix);
    *k = cache(c, n, *k, rows, ring, kv_heads, head_dim);
    snprintf(n, sizeof n, "%s.value_cache", prefix);
    *v = cache(c, n, *v, rows, ring, kv_heads, head_dim);
    if (ring && c->mode == BORA_MODE_DECODE) {
        /* every filled row is inside the window: the first min(p + 1, W) rows, any order */
        bora_tensor *len = bora_minimum(
            g, bora_add(g, c->A->cast(g, c->pos, BORA_DTYPE_F32), decoder_scalar(c, 1.0)),
            decoder_scalar(c, (double)W));
        ao->causal = 0;
        ao->sliding_window = 0;
        ao->key_length = c->A->cast(g, len, BORA_DTYPE_I32);
    }
}
