/* core/train/inputs.c — the model input contract (see inputs.h and sdk/bora/model.h). */
#include "inputs.h"

#include "../util/log.h"

#include <stdio.h>
#include <string.h>

enum { TOKENS, EXTENT, FEATURES }; /* what an input holds */

#define M(mode) (1u << (mode))

/* Every input the host fills: in which modes, in which it is required, and what it holds. */
static const struct rule {
    const char *name;
    unsigned filled, required;
    int kind;
} rules[] = {
    {"input_ids",
     M(BORA_MODE_TRAIN) | M(BORA_MODE_EVAL) | M(BORA_MODE_PREFILL) | M(BORA_MODE_DECODE),
     M(BORA_MODE_TRAIN) | M(BORA_MODE_EVAL) | M(BORA_MODE_PREFILL) | M(BORA_MODE_DECODE), TOKENS},
    {"targets", M(BORA_MODE_TRAIN), M(BORA_MODE_TRAIN), TOKENS},
    {"segment_ids", M(BORA_MODE_TRAIN) | M(BORA_MODE_EVAL) | M(BORA_MODE_PREFILL), 0, TOKENS},
    {"input_features", M(BORA_MODE_TRAIN) | M(BORA_MODE_EVAL) | M(BORA_MODE_PREFILL), 0, FEATURES},
    {"position", M(BORA_MODE_DECODE), 0, EXTENT},
    {"key_length", M(BORA_MODE_PREFILL) | M(BORA_MODE_DECODE), 0, EXTENT},
};
#define N_RULES (sizeof rules / sizeof rules[0])

static const char *mode_name(int mode)
{
    switch (mode) {
    case BORA_MODE_TRAIN: return "train";
    case BORA_MODE_EVAL: return "eval";
    case BORA_MODE_PREFILL: return "prefill";
    case BORA_MODE_DECODE: return "decode";
    default: return "this";
    }
}

/* "input_ids, targets, segment_ids": the inputs filled in mode. */
static void filled_list(int mode, char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = 0;
    for (size_t i = 0; i < N_RULES; i++)
        if (rules[i].filled & M(mode)) {
            int n = snprintf(buf + len, cap - len, "%s%s", len ? ", " : "", rules[i].name);
            if (n < 0 || (size_t)n >= cap - len)
                return;
            len += (size_t)n;
        }
}

static const gval *find(const g_graph *g, const char *name)
{
    for (size_t i = 0; i < g->n_inputs; i++)
        if (!strcmp(g->inputs[i].value->label, name))
            return g->inputs[i].value;
    return NULL;
}

int bora_inputs_reads(const g_graph *g, const char *name)
{
    return find(g, name) != NULL;
}

int bora_inputs_features(const g_graph *g, int *n_mels, int64_t *frames)
{
    const gval *v = find(g, "input_features");
    if (!v || v->ndim != 3)
        return 0;
    *n_mels = (int)v->dims[1];
    *frames = v->dims[2];
    return 1;
}

/* The shape the host writes: tokens (batch, position) i32 with the batch the host asked for
 * (a decode graph one position), every token input as long as input_ids; audio features
 * (batch, mel, frame) f32, the axes so named; an extent (a bounded i32 scalar, from
 * graph_api.extent). */
static bora_status check_shape(const g_graph *g, int mode, const char *pre, const struct rule *r,
                               const gval *v, const gval *ids)
{
    const char *m = mode_name(mode);
    switch (r->kind) {
    case TOKENS:
        if (v->dtype != BORA_DTYPE_I32 || v->ndim != 2)
            return bora_error_set(BORA_ERR_INVALID,
                                  "%sthe %s graph's input '%s' is not (batch, position) "
                                  "i32, as bora fills it (see sdk/bora/model.h)",
                                  pre, m, r->name);
        if (v->dims[0] != g->batch)
            return bora_error_set(BORA_ERR_INVALID,
                                  "%sthe %s graph's input '%s' has %lld rows, not the "
                                  "batch of %lld that bora fills (size it with graph_api.batch)",
                                  pre, m, r->name, (long long)v->dims[0], (long long)g->batch);
        if (mode == BORA_MODE_DECODE && v->dims[1] != 1)
            return bora_error_set(BORA_ERR_INVALID,
                                  "%sthe decode graph's input '%s' has %lld positions; "
                                  "bora fills one",
                                  pre, r->name, (long long)v->dims[1]);
        if (ids && v != ids && v->dims[1] != ids->dims[1])
            return bora_error_set(BORA_ERR_INVALID,
                                  "%sthe %s graph's input '%s' has %lld positions, "
                                  "input_ids %lld: bora fills both from the same rows",
                                  pre, m, r->name, (long long)v->dims[1], (long long)ids->dims[1]);
        return BORA_OK;
    case FEATURES:
        if (v->dtype != BORA_DTYPE_F32 || v->ndim != 3 || strcmp(v->names[0], "batch") ||
            strcmp(v->names[1], "mel") || strcmp(v->names[2], "frame"))
            return bora_error_set(BORA_ERR_INVALID,
                                  "%sthe %s graph's input '%s' is not (batch, mel, frame) f32 "
                                  "with its axes so named, as bora fills it (see "
                                  "sdk/bora/model.h)",
                                  pre, m, r->name);
        if (v->dims[0] != g->batch)
            return bora_error_set(BORA_ERR_INVALID,
                                  "%sthe %s graph's input '%s' has %lld rows, not the "
                                  "batch of %lld that bora fills (size it with graph_api.batch)",
                                  pre, m, r->name, (long long)v->dims[0], (long long)g->batch);
        return BORA_OK;
    default:
        if (v->dtype != BORA_DTYPE_I32 || v->ndim != 0)
            return bora_error_set(BORA_ERR_INVALID,
                                  "%sthe %s graph's input '%s' is not an extent "
                                  "(declare it with graph_api.extent)",
                                  pre, m, r->name);
        return BORA_OK;
    }
}

bora_status bora_inputs_check(const g_graph *g, int mode, const char *model)
{
    char list[160];
    filled_list(mode, list, sizeof list);
    const char *m = mode_name(mode);
    char pre[128] = "";
    if (model)
        snprintf(pre, sizeof pre, "model %s: ", model);
    for (size_t i = 0; i < g->n_inputs; i++) {
        const char *name = g->inputs[i].value->label;
        size_t k = 0;
        while (k < N_RULES && (strcmp(rules[k].name, name) || !(rules[k].filled & M(mode))))
            k++;
        if (k == N_RULES && g->sample_labels && !strcmp(name, "sample_counter"))
            continue; /* the host's own, made by cross_entropy for Sophia-G's labels */
        if (k == N_RULES && mode == BORA_MODE_TRAIN && !strcmp(name, "loss_scale"))
            return bora_error_set(BORA_ERR_INVALID,
                                  "%sthe train graph reads input 'loss_scale', which is the "
                                  "host's own: a model returns the summed loss and bora scales "
                                  "it (see sdk/bora/model.h)",
                                  pre);
        if (k == N_RULES)
            return bora_error_set(BORA_ERR_INVALID,
                                  "%sthe %s graph reads input '%s', which bora does not "
                                  "fill (it fills %s in %s mode): a misspelt name, or a value "
                                  "to make a parameter or state instead",
                                  pre, m, name, list, m);
    }
    const gval *ids = find(g, "input_ids");
    for (size_t k = 0; k < N_RULES; k++) {
        if (!(rules[k].filled & M(mode)))
            continue;
        const gval *v = find(g, rules[k].name);
        if (!v && (rules[k].required & M(mode)))
            return bora_error_set(BORA_ERR_INVALID,
                                  "%sthe %s graph does not read input '%s', which every "
                                  "%s graph needs: declare it with bora_input (see "
                                  "sdk/bora/model.h)",
                                  pre, m, rules[k].name, m);
        if (v && check_shape(g, mode, pre, &rules[k], v, ids) != BORA_OK)
            return BORA_ERR_INVALID;
    }
    return BORA_OK;
}
