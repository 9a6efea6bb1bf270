/* core/eval/logits.h — a graph whose output is one sequence's logits, (batch 1, position, vocab)
 * f32, and reading one position's row of them or all of them: what bora generate, greedy
 * transcription and viz-logprobs share to run a model's eval, prefill and decode graphs. */
#ifndef BORA_CORE_LOGITS_H
#define BORA_CORE_LOGITS_H

#include "../graph/graph.h"

#include <bora/model.h>

typedef struct bora_logits {
    g_graph *g;
    const gval *lv, *lb; /* the logits and their base */
    int64_t T, V, sT, sV, base_elems;
    float *all; /* the whole base, when a row's entries are not adjacent */
} bora_logits;

/* Build and finalise mode's graph of batch 1 on store (before it is materialised), its inputs
 * checked against the model contract (model names the model in messages). A model without the
 * mode returns BORA_ERR_UNSUPPORTED. */
bora_status bora_logits_build(g_store *store, const bora_model_ops *mops, bora_model *model,
                              const char *model_name, int mode, bora_logits *o);
/* After the store is materialised: check the output is f32 (position, vocab) logits and make
 * room to read them. */
bora_status bora_logits_layout(bora_logits *o, const char *model_name);
/* Run the graph (its inputs set) and read the logits at position t into row (V floats). */
bora_status bora_logits_run_row(bora_logits *o, int64_t t, float *row);
/* Run the graph (its inputs set) and read all its logits; then bora_logits_at reads any. */
bora_status bora_logits_run_all(bora_logits *o);
static inline float bora_logits_at(const bora_logits *o, int64_t t, int64_t v)
{
    return o->all[o->lv->offset + t * o->sT + v * o->sV];
}
void bora_logits_free(bora_logits *o);

#endif
