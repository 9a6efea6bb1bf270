/* core/eval/logits.c — one sequence's logits from a model's graph (see logits.h). */
#include "logits.h"

#include "../train/inputs.h"
#include "../util/log.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

bora_status bora_logits_build(g_store *store, const bora_model_ops *mops, bora_model *model,
                              const char *model_name, int mode, bora_logits *o)
{
    memset(o, 0, sizeof *o);
    o->g = g_graph_new(store, mode);
    if (!o->g)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    bora_tensor *t = NULL;
    bora_status st = mops->build(model, &o->g->pub, mode, &t);
    if (st != BORA_OK)
        return st;
    if (bora_inputs_check(o->g, mode, model_name) != BORA_OK)
        return BORA_ERR_INVALID;
    o->g->output = t;
    return g_finalize(o->g) == BORA_OK ? BORA_OK : bora_error_set(o->g->status, "%s", o->g->error);
}

bora_status bora_logits_layout(bora_logits *o, const char *model_name)
{
    const gval *lv = o->g->output;
    int64_t elems = 1;
    o->lv = lv;
    o->lb = lv->base;
    for (int i = 0; i < lv->ndim; i++) {
        elems *= lv->dims[i];
        if (!strcmp(lv->names[i], "position"))
            o->T = lv->dims[i], o->sT = lv->strides[i];
        if (!strcmp(lv->names[i], "vocab"))
            o->V = lv->dims[i], o->sV = lv->strides[i];
    }
    if (o->T < 1 || o->V < 1 || elems != o->T * o->V || lv->dtype != BORA_DTYPE_F32)
        return bora_error_set(BORA_ERR_INVALID,
                              "model %s's graph for mode %d gives no f32 (position, vocab) logits",
                              model_name, o->g->mode);
    o->base_elems = 1;
    for (int i = 0; i < o->lb->ndim; i++) {
        if (o->lb->dims[i] > 0 && o->base_elems > INT64_MAX / 4 / o->lb->dims[i])
            return bora_error_set(BORA_ERR_INVALID, "model %s's logits are too large to read",
                                  model_name);
        o->base_elems *= o->lb->dims[i];
    }
    free(o->all); /* laid out again (a trainer's every evaluation) */
    o->all = NULL;
    if (o->sV != 1 && !(o->all = malloc(sizeof(float) * (size_t)o->base_elems)))
        return bora_error_set(BORA_ERR_NOMEM, "out of memory (%lld logits)",
                              (long long)o->base_elems);
    return BORA_OK;
}

bora_status bora_logits_run_all(bora_logits *o)
{
    if (!o->all && !(o->all = malloc(sizeof(float) * (size_t)o->base_elems)))
        return bora_error_set(BORA_ERR_NOMEM, "out of memory (%lld logits)",
                              (long long)o->base_elems);
    if (g_run(o->g) != BORA_OK)
        return bora_error_set(BORA_ERR_DEVICE, "%s", o->g->error);
    return g_read(o->g, o->lb, o->all, sizeof(float) * (size_t)o->base_elems);
}

bora_status bora_logits_run_row(bora_logits *o, int64_t t, float *row)
{
    if (g_run(o->g) != BORA_OK)
        return BORA_ERR_DEVICE;
    size_t at = (size_t)(o->lv->offset + t * o->sT);
    if (o->sV == 1) /* the row alone */
        return g_read_part(o->g, o->lb, sizeof(float) * at, row, sizeof(float) * (size_t)o->V);
    bora_status st = g_read(o->g, o->lb, o->all, sizeof(float) * (size_t)o->base_elems);
    for (int64_t v = 0; st == BORA_OK && v < o->V; v++)
        row[v] = o->all[(int64_t)at + v * o->sV];
    return st;
}

void bora_logits_free(bora_logits *o)
{
    free(o->all);
    g_graph_free(o->g);
    memset(o, 0, sizeof *o);
}
