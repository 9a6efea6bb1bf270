/* plugins/models/llama — the Llama family (Touvron et al. 2023; Mistral, Qwen2, Qwen3) as Hugging
 * Face's LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM and Qwen3ForCausalLM: pre-RMSNorm
 * decoder layers, rotary positions, grouped-query attention, a SwiGLU MLP, a final RMSNorm and
 * an LM head (tied to the token embedding or its own). Parameter names and layouts are the
 * Hugging Face state dict's (nn.Linear weights (out, in)), so model.safetensors loads there
 * unchanged.
 *
 *     h = x + o_proj(attention(rope(q_proj(rms(x))), rope(k_proj(rms(x))), v_proj(rms(x))))
 *     x' = h + down_proj(silu(gate_proj(rms(h))) · up_proj(rms(h)))
 *
 * The types differ only in switches read by config.c: Mistral's sliding window, Qwen2's q/k/v
 * biases, Qwen3's RMSNorm over each head of q and k before RoPE, Llama's optional biases.
 *
 * Inputs, graphs and the KV cache are GPT-2's (plugins/models/gpt2): train returns the summed
 * cross-entropy, eval the logits; prefill runs a window from position 0 and fills each layer's
 * cache (batch, key_position, kv_heads, head_dim) with keys after RoPE, decode runs one token at
 * the runtime extent `position`. A layer that slides within a window W shorter than seq_len
 * keeps only W cache rows, as a ring: position p lives in row p mod W. */
#include "llama.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

static bora_status llama_create(const bora_host *h, const bora_config *cfg, bora_model **out)
{
    return llama_create_kind(h, cfg, LLAMA, out);
}
static bora_status mistral_create(const bora_host *h, const bora_config *cfg, bora_model **out)
{
    return llama_create_kind(h, cfg, MISTRAL, out);
}
static bora_status qwen2_create(const bora_host *h, const bora_config *cfg, bora_model **out)
{
    return llama_create_kind(h, cfg, QWEN2, out);
}
static bora_status qwen3_create(const bora_host *h, const bora_config *cfg, bora_model **out)
{
    return llama_create_kind(h, cfg, QWEN3, out);
}

/* What one build needs besides the model. */
typedef struct ctx {
    bora_graph *g;
    const bora_graph_api *A;
    const llama *m;
    int32_t mode;
    int cached;
    bora_tensor *seg;        /* segment ids (train, eval, prefill) */
    bora_tensor *pos;        /* decode: the new token's position */
    bora_tensor *key_length; /* decode: position + 1; prefill: the tokens the window holds */
} ctx;

static bora_tensor *param(ctx *c, const char *name, int n, const bora_axis *axes, bora_init init,
                          uint32_t flags)
{
    return bora_param(c->g, name, BORA_DTYPE_F32, n, axes, init, flags);
}

/* An RMSNorm weight over axis (size n) named prefix.weight, applied to x. */
static bora_tensor *rms(ctx *c, const char *prefix, bora_tensor *x, const char *axis, int64_t n)
{
    char w[160];
    snprintf(w, sizeof w, "%s.weight", prefix);
    bora_axis a = {axis, n};
    bora_tensor *weight = param(c, w, 1, &a, bora_init_ones(), BORA_PARAM_NO_DECAY);
    return c->A->rms_norm(c->g, x, weight, axis, c->m->rms_norm_eps, 0);
}

/* nn.Linear: x (..., in) -> (..., out), weight (out, in), an optional bias, an optional fused
 * activation. */
static bora_tensor *linear(ctx *c, const char *prefix, bora_tensor *x, const char *in,
                           int64_t in_size, const char *out, int64_t out_size, int bias,
                           int activation)
{
    char w[160], b[160];
    snprintf(w, sizeof w, "%s.weight", prefix);
    snprintf(b, sizeof b, "%s.bias", prefix);
    bora_axis wa[2] = {{out, out_size}, {in, in_size}};
    bora_tensor *W = param(c, w, 2, wa, bora_init_normal(c->m->initializer_range), 0);
    bora_tensor *B = bias ? param(c, b, 1, wa, bora_init_zeros(), BORA_PARAM_NO_DECAY) : NULL;
    const char *k[] = {in};
    bora_dot_opts o = {sizeof o, activation, B};
    return c->A->dot(c->g, x, W, 1, k, &o);
}

static bora_tensor *rope(ctx *c, bora_tensor *x)
{
    bora_rope_opts o = {.struct_size = sizeof o,
                        .layout = BORA_ROPE_ROTATE_HALF,
                        .position_axis = "position",
                        .head_dim_axis = "head_dim",
                        .spec = &c->m->rope,
                        .offset = 0,
                        .position = c->pos};
    return c->A->rope(c->g, x, &o);
}

/* A 0-d f32 constant. */
static bora_tensor *scalar(ctx *c, double v)
{
    return c->A->full(c->g, BORA_DTYPE_F32, 0, NULL, v);
}

/* The cache rows of a sliding layer (a ring of W rows, row p mod W) after prefill: for each row,
 * the newest position p < key_length with p mod W = row, taken chunk by chunk from k (the
 * window's keys, (batch, key_position T, ...)); rows no position reached keep ring's. */
static bora_tensor *ring_fill(ctx *c, bora_tensor *ring, bora_tensor *k, int64_t T, int64_t W)
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

/* Keys or values of layer l into its cache (model state `name`); returns what attention reads:
 * the whole cache for a full layer, the cache for a ring in decode, k itself in a ring's prefill
 * (which attends within the window over the window's own keys). */
static bora_tensor *cache(ctx *c, const char *name, bora_tensor *k, int64_t rows, int ring)
{
    const bora_graph_api *A = c->A;
    const llama *m = c->m;
    bora_axis ca[4] = {{"batch", A->batch(c->g)},
                       {"key_position", rows},
                       {"kv_heads", m->num_key_value_heads},
                       {"head_dim", m->head_dim}};
    bora_tensor *state = A->state(c->g, name, BORA_DTYPE_F32, 4, ca);
    if (!ring)
        return A->write_slice(c->g, state, k, "key_position", c->pos);
    if (c->mode == BORA_MODE_PREFILL) {
        bora_tensor *zero = A->full(c->g, BORA_DTYPE_F32, 4, ca, 0.0);
        A->write_slice(c->g, state, ring_fill(c, zero, k, m->seq_len, rows), "key_position", NULL);
        return k;
    }
    /* decode: row = p - W·floor((p + ½) / W), exact in f32 for every position below 2^23 */
    bora_tensor *p = A->cast(c->g, c->pos, BORA_DTYPE_F32);
    bora_tensor *turns = bora_div(c->g, bora_add(c->g, p, scalar(c, 0.5)), scalar(c, (double)rows));
    turns = A->cast(c->g, A->cast(c->g, turns, BORA_DTYPE_I32), BORA_DTYPE_F32);
    bora_tensor *row = bora_sub(c->g, p, bora_mul(c->g, turns, scalar(c, (double)rows)));
    return A->write_slice(c->g, state, k, "key_position", A->cast(c->g, row, BORA_DTYPE_I32));
}

/* One layer's self-attention over h (batch, position, embed) -> (batch, position, embed). */
static bora_tensor *self_attention(ctx *c, int64_t l, bora_tensor *h)
{
    const bora_graph_api *A = c->A;
    const llama *m = c->m;
    bora_graph *g = c->g;
    int64_t E = m->hidden_size, H = m->num_attention_heads, KV = m->num_key_value_heads,
            hd = m->head_dim;
    char p[128], n[160];
    snprintf(p, sizeof p, "model.layers.%lld.self_attn", (long long)l);
    /* K and V keep their own head axis (kv_heads), which GQA reads per group of query heads */
    const char *qo[3] = {"q_proj", "k_proj", "v_proj"};
    const char *ho[3] = {"heads", "kv_heads", "kv_heads"};
    int64_t hn[3] = {H, KV, KV};
    bora_tensor *t[3];
    for (int i = 0; i < 3; i++) {
        snprintf(n, sizeof n, "%s.%s", p, qo[i]);
        t[i] = linear(c, n, h, "embed", E, "proj", hn[i] * hd, m->qkv_bias, 0);
        bora_axis parts[2] = {{ho[i], hn[i]}, {"head_dim", hd}};
        t[i] = A->split(g, t[i], "proj", 2, parts); /* (batch, position, heads, head_dim) */
    }
    bora_tensor *q = t[0], *k = t[1], *v = t[2];
    if (m->qk_norm) { /* Qwen3: one RMSNorm over head_dim, shared by the heads */
        snprintf(n, sizeof n, "%s.q_norm", p);
        q = rms(c, n, q, "head_dim", hd);
        snprintf(n, sizeof n, "%s.k_norm", p);
        k = rms(c, n, k, "head_dim", hd);
    }
    q = rope(c, q);
    k = bora_rename(g, rope(c, k), "position", "key_position");
    v = bora_rename(g, v, "position", "key_position");
    int64_t W = m->slides[l] ? m->sliding_window : 0;
    int ring = W && W < m->seq_len && c->cached;
    bora_attention_opts ao = {.struct_size = sizeof ao,
                              .causal = 1,
                              .scale = 1.0 / sqrt((double)hd),
                              .segment_ids = c->seg,
                              .key_length = c->mode == BORA_MODE_DECODE ? c->key_length : NULL,
                              .head_axis = "heads",
                              .kv_head_axis = "kv_heads",
                              .sliding_window = W};
    if (c->cached) {
        int64_t rows = ring ? W : m->seq_len;
        snprintf(n, sizeof n, "%s.key_cache", p);
        k = cache(c, n, k, rows, ring);
        snprintf(n, sizeof n, "%s.value_cache", p);
        v = cache(c, n, v, rows, ring);
        if (ring && c->mode == BORA_MODE_DECODE) {
            /* every filled row is inside the window: the first min(p + 1, W) rows, any order */
            bora_tensor *len =
                bora_minimum(g, bora_add(g, A->cast(g, c->pos, BORA_DTYPE_F32), scalar(c, 1.0)),
                             scalar(c, (double)W));
            ao.causal = 0;
            ao.sliding_window = 0;
            ao.key_length = A->cast(g, len, BORA_DTYPE_I32);
        }
    }
    bora_tensor *att = A->attention(g, q, k, v, &ao);
    const char *merge[] = {"heads", "head_dim"};
    att = A->merge(g, att, 2, merge, "attn");
    snprintf(n, sizeof n, "%s.o_proj", p);
    att = linear(c, n, att, "attn", H * hd, "embed_out", E, m->o_bias, 0);
    return bora_rename(g, att, "embed_out", "embed");
}

/* SwiGLU: down_proj(silu(gate_proj(h)) · up_proj(h)). */
static bora_tensor *mlp(ctx *c, int64_t l, bora_tensor *h)
{
    const llama *m = c->m;
    int64_t E = m->hidden_size, F = m->intermediate_size;
    char n[160];
    snprintf(n, sizeof n, "model.layers.%lld.mlp.gate_proj", (long long)l);
    bora_tensor *gate = linear(c, n, h, "embed", E, "mlp", F, m->mlp_bias, BORA_OP_SILU);
    snprintf(n, sizeof n, "model.layers.%lld.mlp.up_proj", (long long)l);
    bora_tensor *up = linear(c, n, h, "embed", E, "mlp", F, m->mlp_bias, 0);
    snprintf(n, sizeof n, "model.layers.%lld.mlp.down_proj", (long long)l);
    bora_tensor *y =
        linear(c, n, bora_mul(c->g, gate, up), "mlp", F, "embed_out", E, m->mlp_bias, 0);
    return bora_rename(c->g, y, "embed_out", "embed");
}

static bora_status llama_build(bora_model *model, bora_graph *g, int32_t mode, bora_tensor **out)
{
    const llama *m = (const llama *)model;
    const bora_graph_api *A = g->api;
    const char *type = llama_kind_name[m->kind];
    if (mode != BORA_MODE_TRAIN && mode != BORA_MODE_EVAL && mode != BORA_MODE_PREFILL &&
        mode != BORA_MODE_DECODE)
        return m->h->fail(m->h, BORA_ERR_UNSUPPORTED, "%s has no graph for mode %d", type, mode);
    if (A->struct_size < offsetof(bora_graph_api, rope) + sizeof(void *))
        return m->h->fail(m->h, BORA_ERR_UNSUPPORTED,
                          "%s needs a host with rms_norm and rope (ABI 1.9)", type);
    ctx c = {g, A, m, mode, mode == BORA_MODE_PREFILL || mode == BORA_MODE_DECODE, 0, 0, 0};
    int64_t E = m->hidden_size, V = m->vocab_size;
    int64_t T = mode == BORA_MODE_DECODE ? 1 : m->seq_len;
    bora_axis io[2] = {{"batch", A->batch(g)}, {"position", T}};
    bora_tensor *ids = bora_input(g, "input_ids", BORA_DTYPE_I32, 2, io);
    if (mode != BORA_MODE_DECODE)
        c.seg = bora_input(g, "segment_ids", BORA_DTYPE_I32, 2, io);
    if (mode == BORA_MODE_DECODE) {
        c.pos = A->extent(g, "position", m->seq_len - 1);
        c.key_length = A->extent(g, "key_length", m->seq_len);
    }
    int ring = 0;
    for (int64_t l = 0; l < m->num_hidden_layers; l++)
        ring |= m->slides[l] && m->sliding_window < m->seq_len;
    if (mode == BORA_MODE_PREFILL && ring) /* which of the window's rows hold tokens */
        c.key_length = A->extent(g, "key_length", m->seq_len);
    bora_axis emb_a[2] = {{"vocab", V}, {"embed", E}};
    bora_tensor *embed =
        param(&c, "model.embed_tokens.weight", 2, emb_a, bora_init_normal(m->initializer_range), 0);
    /* (batch, position, embed): the residual stream */
    bora_tensor *x = bora_residual(g, A->embedding(g, embed, ids, "vocab"));
    for (int64_t l = 0; l < m->num_hidden_layers; l++) {
        if (m->gradient_checkpointing)
            x = A->checkpoint(g, x);
        char n[128];
        snprintf(n, sizeof n, "model.layers.%lld.input_layernorm", (long long)l);
        x = bora_residual(g, bora_add(g, x, self_attention(&c, l, rms(&c, n, x, "embed", E))));
        snprintf(n, sizeof n, "model.layers.%lld.post_attention_layernorm", (long long)l);
        x = bora_residual(g, bora_add(g, x, mlp(&c, l, rms(&c, n, x, "embed", E))));
    }
    if (m->gradient_checkpointing)
        x = A->checkpoint(g, x);
    x = rms(&c, "model.norm", x, "embed", E);
    bora_tensor *head = embed;
    if (!m->tie_word_embeddings)
        head = param(&c, "lm_head.weight", 2, emb_a, bora_init_normal(m->initializer_range), 0);
    const char *e[] = {"embed"};
    bora_tensor *logits = bora_dot(g, x, head, 1, e); /* (batch, position, vocab) */
    if (mode != BORA_MODE_TRAIN) {
        *out = A->name(g, logits, "logits");
        return bora_graph_status(g);
    }
    bora_tensor *targets = bora_input(g, "targets", BORA_DTYPE_I32, 2, io);
    *out = A->name(g, A->cross_entropy(g, logits, targets, "vocab", NULL), "loss_sum");
    return bora_graph_status(g);
}

#define LLAMA_OPS(var, kind, create_fn, what)                                             \
    static const bora_model_ops var = {                                                   \
        .hdr = {sizeof(bora_model_ops), BORA_KIND_MODEL, #kind, what, llama_keys_##kind}, \
        .create = create_fn,                                                              \
        .build = llama_build,                                                             \
        .destroy = llama_destroy,                                                         \
        .hf_config = llama_hf_config,                                                     \
        .hf_keys = llama_hf_keys_##kind,                                                  \
    }

LLAMA_OPS(llama_ops, llama, llama_create,
          "Llama 1/2/3 as Hugging Face's LlamaForCausalLM (RMSNorm, RoPE, GQA, SwiGLU)");
LLAMA_OPS(mistral_ops, mistral, mistral_create,
          "Mistral as Hugging Face's MistralForCausalLM (Llama with a sliding window)");
LLAMA_OPS(qwen2_ops, qwen2, qwen2_create,
          "Qwen2 as Hugging Face's Qwen2ForCausalLM (Llama with q/k/v biases)");
LLAMA_OPS(qwen3_ops, qwen3, qwen3_create,
          "Qwen3 as Hugging Face's Qwen3ForCausalLM (Llama with RMSNorm on q and k per head)");

static bora_status llama_init(const bora_host *h)
{
    bora_status st = h->add(h, &llama_ops.hdr);
    if (st == BORA_OK)
        st = h->add(h, &mistral_ops.hdr);
    if (st == BORA_OK)
        st = h->add(h, &qwen2_ops.hdr);
    if (st == BORA_OK)
        st = h->add(h, &qwen3_ops.hdr);
    return st;
}

BORA_PLUGIN_DEFINE("llama", "0.1.0", llama_init, NULL)
