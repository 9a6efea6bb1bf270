/* bora/model.h — model architectures.
 *
 * A model plugin describes only the forward computation. create() reads the model's
 * configuration subtree; build() is called once per mode and declares parameters (with their
 * Hugging Face names and init rules) and returns the loss (train) or the logits (eval, decode).
 * The host differentiates, plans memory and runs it. A worked example of the shape of a model
 * plugin (the op builders come with the graph API):
 *
 *     typedef struct toy { int64_t hidden_dim; } toy;
 *
 *     static bora_status toy_create(const bora_host *h, const bora_config *cfg, bora_model **out)
 *     {
 *         toy *t = h->alloc(h, sizeof *t, 16);
 *         if (!t)
 *             return h->fail(h, BORA_ERR_NOMEM, "out of memory");
 *         bora_status st = h->config_int(h, cfg, "hidden_dim", 128, &t->hidden_dim);
 *         if (st != BORA_OK) { h->free(h, t); return st; }
 *         *out = (bora_model *)t;
 *         return BORA_OK;
 *     }
 *     static bora_status toy_build(bora_model *m, bora_graph *g, int32_t mode, bora_tensor **out)
 *     {
 *         ... declare parameters, compose ops, *out = loss or logits ...
 *     }
 *     static const bora_key toy_keys[] = {
 *         {"hidden_dim", BORA_KEY_INT, 0, "128", "width of the residual stream"},
 *         {NULL, 0, 0, NULL, NULL},
 *     };
 *     static const bora_model_ops toy_ops = {
 *         .hdr = {sizeof(bora_model_ops), BORA_KIND_MODEL, "toy", "a toy model", toy_keys},
 *         .create = toy_create, .build = toy_build, .destroy = toy_destroy,
 *     };
 */
#ifndef BORA_MODEL_H
#define BORA_MODEL_H

#include <bora/graph.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bora_model bora_model; /* a model instance; owned by its plugin */

typedef struct bora_model_ops {
    bora_component hdr;

    /* Read the model's configuration subtree (model: in YAML). No device work. */
    bora_status (*create)(const bora_host *h, const bora_config *cfg, bora_model **out);
    /* Build the graph for mode (a bora_mode); *out is the loss (train) or logits (eval,
     * prefill, decode). Return BORA_ERR_UNSUPPORTED for a mode the model does not offer. */
    bora_status (*build)(bora_model *m, bora_graph *g, int32_t mode, bora_tensor **out);
    void (*destroy)(bora_model *m);

    /* (optional) Write the Hugging Face config.json for export into buf (NUL-terminated);
     * *len receives the length needed, so a call with cap 0 asks for the size. */
    bora_status (*hf_config)(bora_model *m, char *buf, size_t cap, size_t *len);
} bora_model_ops;

#ifdef __cplusplus
}
#endif
#endif /* BORA_MODEL_H */
