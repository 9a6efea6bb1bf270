/* tests/models/gpt2_dump.c — runs the gpt2 plugin on a fixed small batch and writes what an
 * independent implementation needs to check it: OUT/model.safetensors (the initialised
 * parameters, Hugging Face names), OUT/inputs.safetensors (ids, targets) and
 * OUT/outputs.safetensors (logits from the eval graph, the summed loss, and every parameter's
 * gradient as grad.<name>, from the train graph). With --hvp, also OUT/hvp.safetensors: a
 * tangent v per parameter and the Hessian-vector product H·v of the summed loss (hvp_dump.h).
 *
 * usage: gpt2_dump PLUGIN_DIR OUT_DIR [--hvp] */
#include "ckpt/safetensors.h"
#include "config/config.h"
#include "graph/graph.h"
#include "hvp_dump.h"
#include "plugin/registry.h"
#include "util/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define B 2
#define T 16
#define V 50

static int fail(const char *what)
{
    fprintf(stderr, "gpt2_dump: %s: %s\n", what, bora_error_get());
    return 1;
}

int main(int argc, char **argv)
{
    int hvp = argc == 4 && !strcmp(argv[3], "--hvp");
    if (argc != 3 && !hvp) {
        fprintf(stderr, "usage: gpt2_dump PLUGIN_DIR OUT_DIR [--hvp]\n");
        return 2;
    }
    bora_registry *reg = bora_registry_new();
    if (bora_registry_add_dir(reg, argv[1], 1))
        return fail("plugins");
    bora_registry_load(reg);
    const bora_entry *me = bora_registry_find(reg, BORA_KIND_MODEL, "gpt2");
    const bora_entry *be = bora_registry_find(reg, BORA_KIND_BACKEND, "cpu");
    if (!me || !be)
        return fail("plugins");
    const bora_model_ops *mops = (const bora_model_ops *)me->ops;
    const bora_backend_ops *bops = (const bora_backend_ops *)be->ops;
    bora_cfg *cfg = bora_cfg_new();
    const char *yaml = "seq_len: 16\nhidden_dim: 32\nnum_layers: 2\nnum_heads: 4\n"
                       "vocab_size: 50\ninitializer_range: 0.2\n";
    bora_cfg_load_string(cfg, "gpt2.yaml", yaml, strlen(yaml));
    bora_model *m;
    bora_backend *backend;
    if (mops->create(&me->file->host, bora_cfg_root(cfg), &m) ||
        bops->create(&be->file->host, NULL, &backend))
        return fail("create");
    g_store *store = g_store_new(bops, backend, "cpu", 7);
    g_graph *train = g_graph_new(store, BORA_MODE_TRAIN),
            *eval = g_graph_new(store, BORA_MODE_EVAL);
    train->batch = eval->batch = B;
    bora_tensor *loss, *logits;
    if (mops->build(m, &train->pub, BORA_MODE_TRAIN, &loss) ||
        mops->build(m, &eval->pub, BORA_MODE_EVAL, &logits))
        return fail("build");
    if (logits->base != logits)
        logits = eval->pub.api->contiguous(&eval->pub, logits);
    train->output = loss;
    eval->output = logits;
    g_graph *hess = hvp ? hvp_graph(mops, m, store, B) : NULL;
    if (hvp && !hess)
        return 1;
    if (g_autodiff(train, loss) || g_finalize(train) || g_finalize(eval) ||
        g_store_materialize(store))
        return fail(train->status ? train->error : eval->error);
    int32_t ids[B * T], targets[B * T], seg[B * T] = {0};
    uint32_t x = 1;
    for (int i = 0; i < B * T; i++) {
        x = x * 1103515245u + 12345u;
        ids[i] = (int32_t)((x >> 16) % V);
    }
    for (int i = 0; i < B * T; i++)
        targets[i] = (i % T == T - 1) ? -100 : ids[i + 1];
    const char *in_names[] = {"input_ids", "targets", "segment_ids"};
    const int32_t *in_data[] = {ids, targets, seg};
    for (int i = 0; i < 3; i++)
        if (g_set_input(train, in_names[i], in_data[i], sizeof ids) ||
            (hess && g_set_input(hess, in_names[i], in_data[i], sizeof ids)))
            return fail(in_names[i]);
    /* Graphs share one arena: read each graph's output before the next one runs. */
    float loss_sum, *lg = malloc(sizeof(float) * B * T * V);
    if (g_set_input(eval, "input_ids", ids, sizeof ids) ||
        g_set_input(eval, "segment_ids", seg, sizeof seg) || g_run(train) ||
        g_read(train, loss, &loss_sum, sizeof loss_sum) || g_run(eval) ||
        g_read(eval, logits, lg, sizeof(float) * B * T * V))
        return fail("run");

    char path[4096];
    size_t n = store->n_slots;
    bora_st_entry *params = calloc(n, sizeof *params), *outs = calloc(n + 2, sizeof *outs);
    char **gnames = calloc(n, sizeof *gnames);
    for (size_t i = 0; i < n; i++) {
        const g_slot *s = &store->slots[i];
        params[i] =
            (bora_st_entry){s->name, s->dtype, s->ndim, s->dims, store->param_ptr + s->offset};
        gnames[i] = malloc(strlen(s->name) + 6);
        sprintf(gnames[i], "grad.%s", s->name);
        outs[i + 2] =
            (bora_st_entry){gnames[i], s->dtype, s->ndim, s->dims, store->grad_ptr + s->offset};
    }
    int64_t lshape[3] = {B, T, V}, ishape[2] = {B, T};
    outs[0] = (bora_st_entry){"logits", BORA_DTYPE_F32, 3, lshape, lg};
    outs[1] = (bora_st_entry){"loss_sum", BORA_DTYPE_F32, 0, NULL, &loss_sum};
    bora_st_entry ins[2] = {{"input_ids", BORA_DTYPE_I32, 2, ishape, ids},
                            {"targets", BORA_DTYPE_I32, 2, ishape, targets}};
    snprintf(path, sizeof path, "%s/model.safetensors", argv[2]);
    if (bora_st_write(path, params, n, NULL, 0))
        return fail(path);
    snprintf(path, sizeof path, "%s/inputs.safetensors", argv[2]);
    if (bora_st_write(path, ins, 2, NULL, 0))
        return fail(path);
    snprintf(path, sizeof path, "%s/outputs.safetensors", argv[2]);
    if (bora_st_write(path, outs, n + 2, NULL, 0))
        return fail(path);
    char cfgbuf[2048];
    size_t cl;
    if (mops->hf_config(m, cfgbuf, sizeof cfgbuf, &cl))
        return fail("hf_config");
    snprintf(path, sizeof path, "%s/config.json", argv[2]);
    FILE *f = fopen(path, "w");
    fwrite(cfgbuf, 1, cl, f);
    fclose(f);
    if (hess && hvp_run_and_write(hess, argv[2]))
        return 1;
    printf("gpt2_dump: %zu parameters, loss sum %.6f\n", n, loss_sum);
    for (size_t i = 0; i < n; i++)
        free(gnames[i]);
    free(gnames);
    free(params);
    free(outs);
    free(lg);
    g_graph_free(train);
    g_graph_free(eval);
    g_graph_free(hess);
    g_store_free(store);
    mops->destroy(m);
    bops->destroy(backend);
    bora_cfg_free(cfg);
    bora_registry_free(reg);
    return 0;
}
