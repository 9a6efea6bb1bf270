/* tests/models/dump_run.c — see dump_run.h. */
#include "dump_run.h"

#include "ckpt/safetensors.h"
#include "train/inputs.h"
#include "util/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int dump_fail(const char *what)
{
    fprintf(stderr, "%s: %s: %s\n", dump_prog, what, bora_error_get());
    return 1;
}

int dump_load_weights(g_store *store, const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    bora_safetensors *st;
    if (bora_st_open(path, &st))
        return dump_fail(path);
    for (size_t i = 0; i < store->n_slots; i++) {
        const g_slot *s = &store->slots[i];
        const bora_st_tensor *t = bora_st_find(st, s->name);
        if (!t || t->dtype != BORA_DTYPE_F32 || t->ndim != s->ndim ||
            memcmp(t->shape, s->dims, sizeof(int64_t) * (size_t)s->ndim)) {
            fprintf(stderr, "%s: %s: tensor %s is missing or not f32 of bora's shape\n", dump_prog,
                    path, s->name);
            bora_st_close(st);
            return 1;
        }
        if (bora_st_read(st, t, store->param_ptr + s->offset, s->nbytes)) {
            bora_st_close(st);
            return dump_fail(path);
        }
    }
    if (st->n_tensors != store->n_slots) {
        fprintf(stderr, "%s: %s has %zu tensors, the model %zu\n", dump_prog, path, st->n_tensors,
                store->n_slots);
        bora_st_close(st);
        return 1;
    }
    bora_st_close(st);
    return 0;
}

g_graph *dump_build(dump_run *r, int mode, int64_t B, const char *model, bora_tensor **out)
{
    g_graph *g = g_graph_new(r->store, mode);
    if (!g) {
        fprintf(stderr, "%s: out of memory\n", dump_prog);
        return NULL;
    }
    g->batch = B;
    if (r->mops->build(r->m, &g->pub, mode, out)) {
        dump_fail("build");
        return NULL;
    }
    if (model && bora_inputs_check(g, mode, model) != BORA_OK) {
        dump_fail("inputs");
        return NULL;
    }
    if ((*out)->base != *out)
        *out = g->pub.api->contiguous(&g->pub, *out);
    g->output = *out;
    return g;
}

int dump_write_outputs(const g_store *store, const char *dir, const float *logits, int64_t B,
                       int64_t T, int64_t V, float loss_sum)
{
    size_t n = store->n_slots;
    bora_st_entry *outs = calloc(n + 2, sizeof *outs);
    char **gnames = calloc(n ? n : 1, sizeof *gnames);
    int rc = !outs || !gnames;
    for (size_t i = 0; !rc && i < n; i++) {
        const g_slot *s = &store->slots[i];
        if (!(gnames[i] = malloc(strlen(s->name) + 6))) {
            rc = 1;
            break;
        }
        sprintf(gnames[i], "grad.%s", s->name);
        outs[i + 2] =
            (bora_st_entry){gnames[i], s->dtype, s->ndim, s->dims, store->grad_ptr + s->offset};
    }
    int64_t lshape[3] = {B, T, V};
    char path[4096];
    snprintf(path, sizeof path, "%s/outputs.safetensors", dir);
    if (rc)
        fprintf(stderr, "%s: out of memory\n", dump_prog);
    else {
        outs[0] = (bora_st_entry){"logits", BORA_DTYPE_F32, 3, lshape, logits};
        outs[1] = (bora_st_entry){"loss_sum", BORA_DTYPE_F32, 0, NULL, &loss_sum};
        if (bora_st_write(path, outs, n + 2, NULL, 0))
            rc = dump_fail(path);
    }
    for (size_t i = 0; gnames && i < n; i++)
        free(gnames[i]);
    free(gnames);
    free(outs);
    return rc;
}

void dump_close(dump_run *r)
{
    g_store_free(r->store);
    if (r->m)
        r->mops->destroy(r->m);
    if (r->backend)
        r->bops->destroy(r->backend);
    bora_cfg_free(r->cfg);
}
