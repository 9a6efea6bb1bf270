/* tests/models/hvp_dump.h — the Hessian-vector product half of the model dump tools (--hvp):
 * a BORA_MODE_HESSIAN graph of the model's summed loss (the host asks the model for its train
 * graph: build() with BORA_MODE_TRAIN), a tangent v per parameter drawn from Philox (normal,
 * keyed by "tangent.NAME"), and OUT/hvp.safetensors holding tangent.NAME and hvp.NAME (H·v) for
 * the PyTorch reference's double backward to check. */
#ifndef BORA_TEST_HVP_DUMP_H
#define BORA_TEST_HVP_DUMP_H

#include "ckpt/safetensors.h"
#include "graph/graph.h"
#include "util/log.h"

#include <bora/model.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The Hessian graph over the model's train forward, its loss made the output; NULL on failure
 * (message on stderr). Call before g_store_materialize. */
static g_graph *hvp_graph(const bora_model_ops *mops, bora_model *m, g_store *store, int64_t batch)
{
    g_store_hessian(store);
    g_graph *h = g_graph_new(store, BORA_MODE_HESSIAN);
    bora_tensor *loss = NULL;
    h->batch = batch;
    if (mops->build(m, &h->pub, BORA_MODE_TRAIN, &loss) || g_hvp(h, loss) || g_finalize(h)) {
        fprintf(stderr, "hvp graph: %s %s\n", h->error, bora_error_get());
        g_graph_free(h);
        return NULL;
    }
    return h;
}

/* Write the tangents, run h (its inputs set by the caller) and write dir/hvp.safetensors. */
static int hvp_run_and_write(g_graph *h, const char *dir)
{
    g_store *s = h->store;
    size_t n = s->n_slots;
    bora_st_entry *e = calloc(2 * n, sizeof *e);
    char **names = calloc(2 * n, sizeof *names);
    float **data = calloc(2 * n, sizeof *data);
    int rc = !e || !names || !data;
    for (size_t k = 0; k < n && !rc; k++) {
        const g_slot *p = &s->slots[k];
        size_t cnt = p->nbytes / bora_dtype_size(p->dtype);
        names[2 * k] = malloc(strlen(p->name) + 9);
        names[2 * k + 1] = malloc(strlen(p->name) + 5);
        data[2 * k] = malloc(sizeof(float) * cnt);
        data[2 * k + 1] = malloc(sizeof(float) * cnt);
        if (!names[2 * k] || !names[2 * k + 1] || !data[2 * k] || !data[2 * k + 1]) {
            rc = 1;
            break;
        }
        sprintf(names[2 * k], "tangent.%s", p->name);
        sprintf(names[2 * k + 1], "hvp.%s", p->name);
        for (size_t i = 0; i < cnt; i++)
            data[2 * k][i] =
                (float)g_init_value(s->seed, names[2 * k], bora_init_normal(1.0), (uint64_t)i);
        rc = g_store_write_tangent(s, (long)k, data[2 * k], cnt) != BORA_OK;
        e[2 * k] = (bora_st_entry){names[2 * k], BORA_DTYPE_F32, p->ndim, p->dims, data[2 * k]};
        e[2 * k + 1] =
            (bora_st_entry){names[2 * k + 1], BORA_DTYPE_F32, p->ndim, p->dims, data[2 * k + 1]};
    }
    if (!rc)
        rc = g_store_zero_hvp(s) || g_run(h);
    for (size_t k = 0; k < n && !rc; k++) {
        const g_slot *p = &s->slots[k];
        rc = g_store_read_hvp(s, (long)k, data[2 * k + 1], p->nbytes / bora_dtype_size(p->dtype));
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/hvp.safetensors", dir);
    if (!rc)
        rc = bora_st_write(path, e, 2 * n, NULL, 0) != BORA_OK;
    if (rc)
        fprintf(stderr, "hvp: %s\n", bora_error_get());
    for (size_t k = 0; names && data && k < 2 * n; k++) {
        free(names[k]);
        free(data[k]);
    }
    free(names);
    free(data);
    free(e);
    return rc;
}

#endif
