/* core/train/eval.h — loss and bits per byte on a validation set.
 *
 * The model's train-mode forward (its summed cross-entropy) built as a graph of its own over
 * the same parameters, with no backward: every validation window is run once, in order, in
 * pieces of the graph's batch rows (a last short piece is padded with rows that predict
 * nothing). The loss is the mean over every predicted token; bits per byte divide the summed
 * loss, in bits, by the UTF-8 bytes the predicted tokens stand for. */
#ifndef BORA_CORE_EVAL_H
#define BORA_CORE_EVAL_H

#include "../data/loader.h"
#include "../graph/graph.h"

#include <bora/model.h>

typedef struct bora_eval bora_eval;

typedef struct bora_eval_result {
    double loss;       /* nats per predicted token */
    double bpb;        /* bits per byte of the predicted tokens' text */
    int64_t tokens;    /* predicted tokens */
    int64_t bytes;     /* their bytes */
    int64_t sequences; /* windows run */
    double seconds;
} bora_eval_result;

/* Build the eval graph of rows sequences per run over store's parameters. Call before the
 * store is materialised (the graphs of a store share its arena). */
bora_status bora_eval_new(g_store *store, const bora_model_ops *mops, bora_model *model,
                          int64_t rows, bora_eval **out);
void bora_eval_free(bora_eval *e);
/* Whether the graph reads input_features (an audio model), and their mel and frame sizes. */
int bora_eval_features(const bora_eval *e, int *n_mels, int64_t *frames);
/* The positions of the graph's input_ids. */
int64_t bora_eval_seq_len(const bora_eval *e);
/* The bytes of its graph's inputs and its rows of tokens (for the run's memory statement). */
size_t bora_eval_input_bytes(const bora_eval *e);

/* Evaluate on val's windows (an audio model: its clips, with their features): all of them, or
 * the first max_sequences when that is > 0. */
bora_status bora_eval_run(bora_eval *e, bora_loader *val, const bora_tokenizer *tok,
                          int64_t max_sequences, bora_eval_result *r);

#endif
