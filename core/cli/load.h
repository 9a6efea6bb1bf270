/* core/cli/load.h — a trained model made ready to run, as bora generate and bora transcribe
 * load one: the configuration from a checkpoint's trainer.json (or a Hugging Face folder's
 * config.json), its tokenizer, the backend and model plugins it names and a store for the
 * graphs; then, once the caller has built its graphs, the weights.
 *
 *     bora_loaded L;
 *     if (bora_load_model(cli, "generate", checkpoint, hf, tokenizer, &L) != BORA_OK) ...
 *     ... build graphs on L.store ...
 *     if (bora_load_weights(&L, "generate") != BORA_OK) ...
 *     bora_loaded_free(&L);
 * Failures are reported (prefixed with the command's name) before they return. */
#ifndef BORA_CORE_CLI_LOAD_H
#define BORA_CORE_CLI_LOAD_H

#include "../config/schema.h"
#include "../data/tokenizer.h"
#include "../graph/graph.h"
#include "cli.h"

#include <bora/backend.h>
#include <bora/model.h>

typedef struct bora_loaded {
    bora_registry *reg;
    bora_cfg *cfg;
    const bora_entry *model_entry, *backend_entry;
    const bora_model_ops *mops;
    const bora_backend_ops *bops;
    bora_model *model;
    bora_backend *be;
    g_store *store;
    bora_tokenizer *tok;
    const char *model_name;
    const char *checkpoint, *hf; /* where the weights come from: one of them */
} bora_loaded;

/* Everything up to the graphs: tokenizer (tokenizer, or the run's data.tokenizer when NULL). */
bora_status bora_load_model(const bora_cli *cli, const char *cmd, const char *checkpoint,
                            const char *hf, const char *tokenizer, bora_loaded *L);
/* Materialise the store (its graphs built) and read the weights into it. */
bora_status bora_load_weights(bora_loaded *L, const char *cmd);
void bora_loaded_free(bora_loaded *L);

#endif
