/* plugins/models/mixtral/mixtral.h — Mixtral's configuration, shared by the reader (config.c),
 * the sparse MoE block (moe.c) and the forward graph (mixtral.c). The keys are Hugging Face's
 * MixtralConfig, model_type mixtral. */
#ifndef BORA_MODEL_MIXTRAL_H
#define BORA_MODEL_MIXTRAL_H

#include <bora/model.h>

#include "decoder.h"

#include <stdint.h>

typedef struct mixtral {
    decoder_dims d;              /* sizes, norms, the window and RoPE (plugins/models/common) */
    int64_t num_local_experts;   /* E: the experts of each layer */
    int64_t num_experts_per_tok; /* k: the experts each token goes through */
    int output_router_logits;    /* train: add the load-balancing loss */
    double router_aux_loss_coef; /* its weight in the loss */
    double router_z_loss_coef;   /* the router z-loss's weight (0: not in the loss) */
} mixtral;

/* The running sums of the routers' losses over the layers: per expert, the rows routed to it
 * (f32, no gradient) and the router probabilities summed over tokens; the squared logsumexp of
 * the router logits summed over tokens (0-d); and how many token rows (tokens x layers) went
 * in. */
typedef struct moe_balance {
    bora_tensor *routed, *prob, *z;
    int64_t rows;
} moe_balance;

/* The sparse MoE block of layer l over h (batch, position, embed) -> (batch, position, embed);
 * with bal not NULL its routing is added into *bal and the layer's expert load is declared as
 * the metric expert_load/layer<l> (moe.c). */
bora_tensor *moe_block(decoder_ctx *c, const mixtral *m, int64_t l, bora_tensor *h,
                       moe_balance *bal);
/* The load-balancing loss of the layers summed in bal (transformers' load_balancing_loss_func
 * with no attention mask), a 0-d f32 (moe.c). */
bora_tensor *moe_balance_loss(decoder_ctx *c, const mixtral *m, const moe_balance *bal);
/* The router z-loss of the layers summed in bal (ST-MoE's, as transformers' router_z_loss_func
 * over the layers' logits concatenated), a 0-d f32 (moe.c). */
bora_tensor *moe_z_loss(decoder_ctx *c, const moe_balance *bal);

/* create() (config.c). */
bora_status mixtral_create(const bora_host *h, const bora_config *cfg, bora_model **out);
/* config.json for the model (config.c). */
bora_status mixtral_hf_config(bora_model *model, char *buf, size_t cap, size_t *len);
/* The configuration keys and the config.json keys bora import reads (config.c). */
extern const bora_key mixtral_keys[];
extern const bora_hf_key mixtral_hf_keys[];

#endif
