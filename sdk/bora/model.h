/* bora/model.h — model architectures.
 *
 * A model plugin describes only the forward computation. create() reads the model's
 * configuration subtree; build() is called once per mode and declares parameters (with their
 * Hugging Face names and init rules) and inputs, and returns the loss (train) or the logits
 * (eval, prefill, decode). The host differentiates, plans memory and runs it
 * (docs/design.md §3).
 *
 * The inputs the host fills, by name. A graph is checked when it is built: one that reads an
 * input not listed for its mode (a misspelt name would otherwise read zeros for the whole
 * run), or lacks a required one, is refused with a message naming it. "position" below is the
 * graph's sequence length, the model's own choice (bora train cuts its rows to it); "batch" is
 * graph_api.batch(g).
 *
 *   input_ids    (batch, position) i32   token ids; every mode (decode: one position). Required.
 *   targets      (batch, position) i32   train: the token to predict at each position, -100
 *                                        where nothing is predicted (padding, a document's
 *                                        last token). Required in train.
 *   segment_ids  (batch, position) i32   train, eval, prefill: which document of the row each
 *                                        position is in (0, 1, ...), for attention that stays
 *                                        inside a document. Optional: filled only where read.
 *   input_features (batch, mel, frame) f32  train, eval, prefill: an audio model's log-mel
 *                                        features, one clip per row (Whisper's: mel the
 *                                        model's num_mel_bins, frame 3000 for 30 s of 16 kHz
 *                                        audio, frame·160 samples), the axes named exactly
 *                                        so. Optional: filled only where read, and only from
 *                                        an audio dataset (data.type: audio), whose rows then
 *                                        give input_ids/targets as the decoder's tokens:
 *                                        start sequence + text + <|endoftext|>, padded with
 *                                        <|endoftext|>; targets one later, -100 where a
 *                                        start-sequence token would be predicted and on
 *                                        padding.
 *   loss_scale   () f32                  train: declared by the host after build() (one over
 *                                        the step's target count); a model does not read it.
 *   position     extent, i32             decode: where the new token goes (0 .. its maximum).
 *   key_length   extent, i32             decode: positions of the KV cache to attend (position
 *                                        + 1); prefill (ABI 1.9 hosts): the window's positions
 *                                        that hold the prompt's tokens (the rest is padding), for
 *                                        a cache that keeps fewer rows than the window. Both
 *                                        optional: declared with graph_api.extent.
 *
 * What each mode returns (*out):
 *   BORA_MODE_TRAIN    the cross-entropy summed over the targets that are not -100, a scalar;
 *                      the host scales it by loss_scale, so micro-batches add up to the step's
 *                      mean. The same graph gives the validation loss (bora eval).
 *   BORA_MODE_EVAL     the logits, (batch, position, vocab) f32 (bora generate without a cache).
 *   BORA_MODE_PREFILL  the logits of a whole window from position 0, writing the KV cache
 *                      (model state, graph_api.state) for every position.
 *   BORA_MODE_DECODE   the logits of one position, (batch, 1, vocab): its keys and values
 *                      written into the cache at `position`, attending over `key_length`.
 * build() is not called with BORA_MODE_HESSIAN: for Hessian-vector products the host asks for
 * the train graph (BORA_MODE_TRAIN) and differentiates it twice.
 * A model returns BORA_ERR_UNSUPPORTED for a mode it does not offer (bora generate then runs
 * the eval graph over the whole window for each token). A model with a vocab_size key gets
 * the tokenizer's size from bora train and bora graph unless the configuration sets it.
 *
 * bora import (ABI 1.10) reads a Hugging Face config.json through the model's hf_keys: one
 * entry per config.json key the model understands, saying what becomes of its value. A key in no
 * entry is refused by name, so nothing in a published configuration is silently dropped. GPT-2's
 * table, in part:
 *
 *     static const bora_hf_key gpt2_hf[] = {
 *         {"n_embd", BORA_HF_COPY, 0, "hidden_dim", NULL, NULL, NULL},
 *         {"n_inner", BORA_HF_RATIO, 0, "mlp_scale", "n_embd", "4", NULL}, // null: 4
 *         {"attn_pdrop", BORA_HF_NOTE, 0, NULL, NULL, "0", "bora trains without dropout"},
 *         {"scale_attn_weights", BORA_HF_EXPECT, 0, NULL, NULL, "true", NULL},
 *         {"architectures", BORA_HF_IGNORE, 0, NULL, NULL, NULL, NULL},
 *         {NULL, 0, 0, NULL, NULL, NULL, NULL},
 *     };
 *
 * A worked example, a complete model plugin: a bigram model (a table of next-token logits):
 *
 *     #include <bora/model.h>
 *
 *     typedef struct toy { const bora_host *h; int64_t vocab, seq_len; } toy;
 *
 *     static bora_status toy_create(const bora_host *h, const bora_config *cfg, bora_model **out)
 *     {
 *         toy *t = h->alloc(h, sizeof *t, 16);
 *         if (!t)
 *             return h->fail(h, BORA_ERR_NOMEM, "out of memory");
 *         t->h = h;
 *         bora_status st = h->config_int(h, cfg, "vocab_size", 50257, &t->vocab);
 *         if (st == BORA_OK)
 *             st = h->config_int(h, cfg, "seq_len", 128, &t->seq_len);
 *         if (st != BORA_OK) {
 *             h->free(h, t);
 *             return st;
 *         }
 *         *out = (bora_model *)t;
 *         return BORA_OK;
 *     }
 *     static bora_status toy_build(bora_model *m, bora_graph *g, int32_t mode, bora_tensor **out)
 *     {
 *         const toy *t = (const toy *)m;
 *         const bora_graph_api *A = g->api;
 *         if (mode != BORA_MODE_TRAIN && mode != BORA_MODE_EVAL)
 *             return t->h->fail(t->h, BORA_ERR_UNSUPPORTED, "toy has no graph for mode %d", mode);
 *         bora_axis io[] = {{"batch", A->batch(g)}, {"position", t->seq_len}};
 *         bora_axis table[] = {{"token", t->vocab}, {"vocab", t->vocab}};
 *         bora_tensor *ids = bora_input(g, "input_ids", BORA_DTYPE_I32, 2, io);
 *         bora_tensor *w = bora_param(g, "bigram.weight", BORA_DTYPE_F32, 2, table,
 *                                     bora_init_normal(0.02), BORA_PARAM_NO_DECAY);
 *         bora_tensor *logits = A->embedding(g, w, ids, "token"); // (batch, position, vocab)
 *         if (mode == BORA_MODE_EVAL)
 *             *out = A->name(g, logits, "logits");
 *         else
 *             *out = A->cross_entropy(g, logits,
 *                                     bora_input(g, "targets", BORA_DTYPE_I32, 2, io), "vocab",
 *                                     NULL);
 *         return bora_graph_status(g); // the first failed builder's message, if any
 *     }
 *     static void toy_destroy(bora_model *m)
 *     {
 *         toy *t = (toy *)m;
 *         t->h->free(t->h, t);
 *     }
 *     static const bora_key toy_keys[] = {
 *         {"vocab_size", BORA_KEY_INT, 0, "50257", "tokens in the vocabulary"},
 *         {"seq_len", BORA_KEY_INT, 0, "128", "positions per sequence"},
 *         {NULL, 0, 0, NULL, NULL},
 *     };
 *     static const bora_model_ops toy_ops = {
 *         .hdr = BORA_COMPONENT_KEYS(bora_model_ops, BORA_KIND_MODEL, "toy", "a bigram model",
 *                                    toy_keys),
 *         .create = toy_create,
 *         .build = toy_build,
 *         .destroy = toy_destroy,
 *     };
 *     static bora_status toy_init(const bora_host *h)
 *     {
 *         return h->add(h, &toy_ops.hdr);
 *     }
 *     BORA_PLUGIN_DEFINE("toy", "1.0.0", toy_init, NULL)
 */
#ifndef BORA_MODEL_H
#define BORA_MODEL_H

#include <bora/graph.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bora_model bora_model; /* a model instance; owned by its plugin */

/* What bora import does with one config.json key (bora_hf_key.rule). */
typedef enum bora_hf_rule {
    BORA_HF_COPY = 1,   /* the value (any JSON: a number, a list, a map copied whole) becomes
                           model.<key>; a null becomes `value`'s text when there is one */
    BORA_HF_RATIO = 2,  /* model.<key> = the value / the config.json key named by `of`, a whole
                           number; null: `value`'s text */
    BORA_HF_EXPECT = 3, /* must equal `value` (JSON text; null in config.json passes); anything
                           else is refused, with `doc` as the reason */
    BORA_HF_NOTE = 4,   /* accepted; a value other than `value` prints `doc` as a note */
    BORA_HF_IGNORE = 5  /* metadata that does not change the model (architectures, torch_dtype) */
} bora_hf_rule;

/* One config.json key a model reads; a model's table ends with an entry whose hf_name is NULL. */
typedef struct bora_hf_key {
    const char *hf_name; /* the key in config.json */
    int32_t rule;        /* a bora_hf_rule */
    int32_t reserved;
    const char *key;   /* COPY, RATIO: the model's key (NULL: hf_name) */
    const char *of;    /* RATIO: the config.json key divided by */
    const char *value; /* COPY, RATIO: the value for null; EXPECT, NOTE: the value expected */
    const char *doc;   /* EXPECT, NOTE: why, for the message (optional) */
} bora_hf_key;

typedef struct bora_model_ops {
    bora_component hdr;

    /* Read the model's configuration subtree (model: in YAML). No device work. */
    bora_status (*create)(const bora_host *h, const bora_config *cfg, bora_model **out);
    /* Build the graph for mode (a bora_mode) over the inputs listed above; *out is the summed
     * loss (train) or the logits (eval, prefill, decode). Return BORA_ERR_UNSUPPORTED for a
     * mode the model does not offer. A train graph may declare metrics for bora train to log
     * beside the loss (bora_graph_metric in graph.h, ABI 1.14). */
    bora_status (*build)(bora_model *m, bora_graph *g, int32_t mode, bora_tensor **out);
    void (*destroy)(bora_model *m);

    /* (optional) Write the Hugging Face config.json for export into buf (NUL-terminated);
     * *len receives the length needed, so a call with cap 0 asks for the size. */
    bora_status (*hf_config)(bora_model *m, char *buf, size_t cap, size_t *len);

    /* (optional, ABI 1.10) The config.json keys bora import reads and how (see bora_hf_key);
     * a model without them cannot be imported. */
    const bora_hf_key *hf_keys;
} bora_model_ops;

#ifdef __cplusplus
}
#endif
#endif /* BORA_MODEL_H */
