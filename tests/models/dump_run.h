/* tests/models/dump_run.h — what the model dumps (model_dump.c, whisper_dump.c) share: a model
 * plugin and the CPU backend on one store, a case's weights read into it, and a graph of a mode
 * built on it. Messages start with the program's name, dump_prog. */
#ifndef BORA_TESTS_DUMP_RUN_H
#define BORA_TESTS_DUMP_RUN_H

#include "config/config.h"
#include "graph/graph.h"

#include <bora/model.h>

extern const char *dump_prog;

typedef struct dump_run {
    const bora_model_ops *mops;
    const bora_backend_ops *bops;
    bora_model *m;
    bora_backend *backend;
    g_store *store;
    bora_cfg *cfg;
} dump_run;

/* what failed and bora's last error on stderr; returns 1 */
int dump_fail(const char *what);
/* DIR/model.safetensors into the store's parameters: every slot there, f32 of its shape, and
 * nothing else */
int dump_load_weights(g_store *store, const char *dir);
/* mode's graph of batch B on r's store, its output made contiguous; with model non-NULL its
 * inputs checked against sdk/bora/model.h's contract (bora_inputs_check) */
g_graph *dump_build(dump_run *r, int mode, int64_t B, const char *model, bora_tensor **out);
/* DIR/outputs.safetensors: "logits" (B, T, V) f32, "loss_sum" and every parameter's gradient
 * as grad.NAME, for the reference's comparison */
int dump_write_outputs(const g_store *store, const char *dir, const float *logits, int64_t B,
                       int64_t T, int64_t V, float loss_sum);
void dump_close(dump_run *r);

#endif
