/* core/train/inputs.h — the inputs the host fills in a model's graphs, per mode, and the check
 * that a model's graph reads only those (and every one it must), made when the graph is built
 * so that a misspelt or forgotten input is refused before the first step rather than trained
 * on as zeros. sdk/bora/model.h states the same contract for plugin authors. */
#ifndef BORA_CORE_INPUTS_H
#define BORA_CORE_INPUTS_H

#include "../graph/graph.h"

/* Check the inputs of g, built for mode (a bora_mode) by model (its name, which starts the
 * message; NULL leaves it out). BORA_OK, or an error naming the input and listing the ones the
 * host fills in that mode. */
bora_status bora_inputs_check(const g_graph *g, int mode, const char *model);

/* Whether g reads the input named name (the host fills optional inputs only where read). */
int bora_inputs_reads(const g_graph *g, const char *name);

/* Whether g reads input_features, and its mel and frame sizes. */
int bora_inputs_features(const g_graph *g, int *n_mels, int64_t *frames);

#endif
