/* plugins/models/mixtral — Mixtral (Jiang et al. 2024) as Hugging Face's MixtralForCausalLM:
 * Mistral's decoder (pre-RMSNorm layers, rotary positions, grouped-query attention with an
 * optional sliding window) whose MLP is a sparse mixture of experts: a router picks the top k of
 * E SwiGLU experts per token and sums their outputs with the renormalised router weights
 * (moe.c). Parameter names and layouts are the Hugging Face state dict's (nn.Linear weights
 * (out, in); block_sparse_moe.gate and block_sparse_moe.experts.E.w1/w2/w3), so
 * model.safetensors loads there unchanged.
 *
 *     h = x + o_proj(attention(rope(q_proj(rms(x))), rope(k_proj(rms(x))), v_proj(rms(x))))
 *     x' = h + block_sparse_moe(rms(h))
 *
 * Inputs, graphs and the KV cache are the Llama family's (plugins/models/common). Train returns
 * the summed cross-entropy and, with output_router_logits, the load-balancing loss: transformers
 * adds router_aux_loss_coef · aux to the mean cross-entropy, and the host divides the summed loss
 * by the step's count of targets (not -100), so the graph adds that count times
 * router_aux_loss_coef · aux, aux taken over all the micro-batch's tokens (no attention mask, as
 * transformers without one). With several micro-batches a step's loss has the token-weighted mean
 * of their aux terms. router_z_loss_coef (bora's own key) adds ST-MoE's router z-loss the same
 * way: that count times router_z_loss_coef · z. In training the graph declares aux, z and each
 * layer's expert load as metrics (bora_graph_metric), whatever goes into the loss. */
#include "mixtral.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>

/* An RMSNorm (MixtralRMSNorm: a weight of ones) over embed named prefix.weight. */
static bora_tensor *rms(decoder_ctx *c, const mixtral *m, const char *prefix, bora_tensor *x)
{
    return decoder_rms(c, prefix, x, "embed", m->d.hidden_size, m->d.rms_norm_eps, 0,
                       bora_init_ones());
}

/* One layer's self-attention (MistralAttention) over h (batch, position, embed). */
static bora_tensor *self_attention(decoder_ctx *c, const mixtral *m, int64_t l, bora_tensor *h)
{
    bora_graph *g = c->g;
    char p[128];
    snprintf(p, sizeof p, "model.layers.%lld.self_attn", (long long)l);
    bora_tensor *q, *k, *v;
    decoder_qkv(c, &m->d, p, h, 0, &q, &k, &v);
    q = decoder_rope(c, q, &m->d.rope);
    k = bora_rename(g, decoder_rope(c, k, &m->d.rope), "position", "key_position");
    v = bora_rename(g, v, "position", "key_position");
    bora_attention_opts ao = {.struct_size = sizeof ao,
                              .causal = 1,
                              .scale = 1.0 / sqrt((double)m->d.head_dim),
                              .segment_ids = c->seg,
                              .key_length = c->mode == BORA_MODE_DECODE ? c->key_length : NULL,
                              .head_axis = "heads",
                              .kv_head_axis = "kv_heads",
                              .sliding_window = m->d.slides[l] ? m->d.sliding_window : 0};
    return decoder_attend(c, &m->d, p, q, k, v, &ao, 0);
}

static bora_status mixtral_build(bora_model *model, bora_graph *g, int32_t mode, bora_tensor **out)
{
    const mixtral *m = (const mixtral *)model;
    const bora_graph_api *A = g->api;
    bora_status st = decoder_check_build(&m->d, "mixtral", g, mode);
    if (st != BORA_OK)
        return st;
    if (A->struct_size < offsetof(bora_graph_api, grouped_matmul) + sizeof(void *))
        return m->d.h->fail(m->d.h, BORA_ERR_UNSUPPORTED,
                            "mixtral needs a host with top_k, argsort, bincount and "
                            "grouped_matmul (ABI 1.13)");
    decoder_ctx c;
    decoder_inputs(&c, &m->d, g, mode);
    int train = mode == BORA_MODE_TRAIN;
    moe_balance bal = {NULL, NULL, NULL, 0};
    bora_tensor *embed = decoder_embed_table(&c, &m->d);
    /* (batch, position, embed): the residual stream */
    bora_tensor *x = bora_residual(g, A->embedding(g, embed, c.ids, "vocab"));
    for (int64_t l = 0; l < m->d.num_hidden_layers; l++) {
        if (m->d.gradient_checkpointing)
            x = A->checkpoint(g, x);
        char n[128];
        snprintf(n, sizeof n, "model.layers.%lld.input_layernorm", (long long)l);
        x = bora_residual(g, bora_add(g, x, self_attention(&c, m, l, rms(&c, m, n, x))));
        snprintf(n, sizeof n, "model.layers.%lld.post_attention_layernorm", (long long)l);
        bora_tensor *y = moe_block(&c, m, l, rms(&c, m, n, x), train ? &bal : NULL);
        x = bora_residual(g, bora_add(g, x, y));
    }
    if (m->d.gradient_checkpointing)
        x = A->checkpoint(g, x);
    x = rms(&c, m, "model.norm", x);
    bora_tensor *logits = decoder_lm_head(&c, &m->d, x, embed); /* (batch, position, vocab) */
    bora_tensor *per_target = NULL;
    if (train) { /* the routers' losses, logged whether or not the loss has them */
        bora_tensor *aux = bora_graph_metric(g, moe_balance_loss(&c, m, &bal), "aux_loss");
        bora_tensor *z = bora_graph_metric(g, moe_z_loss(&c, &bal), "router_z_loss");
        if (m->output_router_logits)
            per_target = A->scale(g, aux, m->router_aux_loss_coef);
        if (m->router_z_loss_coef != 0) {
            bora_tensor *zt = A->scale(g, z, m->router_z_loss_coef);
            per_target = per_target ? bora_add(g, per_target, zt) : zt;
        }
    }
    return decoder_output_plus(&c, logits, per_target, out);
}

static const bora_model_ops mixtral_ops = {
    .hdr = {sizeof(bora_model_ops), BORA_KIND_MODEL, "mixtral",
            "Mixtral as Hugging Face's MixtralForCausalLM (Mistral attention, sparse MoE of "
            "SwiGLU experts)",
            mixtral_keys},
    .create = mixtral_create,
    .build = mixtral_build,
    .destroy = decoder_model_free,
    .hf_config = mixtral_hf_config,
    .hf_keys = mixtral_hf_keys,
};

static bora_status mixtral_init(const bora_host *h)
{
    return h->add(h, &mixtral_ops.hdr);
}

BORA_PLUGIN_DEFINE("mixtral", "0.1.0", mixtral_init, NULL)
