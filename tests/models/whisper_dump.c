/* tests/models/whisper_dump.c — runs the whisper plugin on a case tests/models/whisper_torch.py
 * wrote (--write-case): CASE/config.json (WhisperConfig's keys, read as bora's model config),
 * CASE/model.safetensors (Hugging Face's names) and CASE/inputs.safetensors (input_features,
 * input_ids, targets). It writes what bora computes into CASE/outputs.safetensors — the eval
 * graph's logits, the train graph's summed loss and every parameter's gradient as grad.NAME
 * (the frozen encoder positions' too, which must stay zero) — for the reference to compare.
 * Every graph must read only the inputs sdk/bora/model.h lists for its mode (bora_inputs_check).
 *
 * Then it checks the caches against the eval graph on the same weights: a prefill of the first
 * n tokens (the rest of the window padding), which also writes each decoder layer's
 * cross-attention keys and values, and a decode step per following position (no
 * input_features) must give the eval logits of the whole window at each position (within
 * 1e-4), for n = 1, 5 and T - 2.
 *
 * With --sinusoids OUT it instead writes a whisper-tiny-sized (1500, 384) table of bora's
 * BORA_INIT_SINUSOIDS initial values to OUT as "sinusoids", for whisper_torch.py --sinusoids.
 *
 * usage: whisper_dump PLUGIN_DIR CASE
 *        whisper_dump PLUGIN_DIR --sinusoids OUT */
#include "ckpt/safetensors.h"
#include "config/config.h"
#include "dump_run.h"
#include "graph/graph.h"
#include "plugin/registry.h"
#include "train/inputs.h"
#include "util/log.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *dump_prog = "whisper_dump";

static int open_run(const bora_registry *reg, const char *dir, dump_run *r)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    r->cfg = bora_cfg_new();
    if (bora_cfg_load_file(r->cfg, path))
        return dump_fail(path);
    const char *type = NULL;
    bora_cfg_string(bora_cfg_root(r->cfg), "model_type", NULL, &type);
    const bora_entry *me = bora_registry_find(reg, BORA_KIND_MODEL, "whisper");
    const bora_entry *be = bora_registry_find(reg, BORA_KIND_BACKEND, "cpu");
    if (!me || !be || !type || strcmp(type, "whisper")) {
        fprintf(stderr,
                "whisper_dump: %s: want model_type whisper, and the whisper and cpu "
                "plugins in the plugin folder\n",
                path);
        return 1;
    }
    r->mops = (const bora_model_ops *)me->ops;
    r->bops = (const bora_backend_ops *)be->ops;
    if (r->mops->create(&me->file->host, bora_cfg_root(r->cfg), &r->m) ||
        r->bops->create(&be->file->host, NULL, &r->backend))
        return dump_fail("create");
    if (bora_cfg_check_unread(r->cfg))
        return dump_fail(path);
    r->store = g_store_new(r->bops, r->backend, "cpu", 7);
    return 0;
}

/* The case's inputs: input_features (B, M, F) f32, input_ids and targets (B, T) as i32. */
typedef struct inputs {
    int64_t B, M, F, T;
    float *feats;
    int32_t *ids, *targets;
} inputs;

static int read_inputs(const char *dir, inputs *in)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/inputs.safetensors", dir);
    bora_safetensors *st;
    if (bora_st_open(path, &st))
        return dump_fail(path);
    const bora_st_tensor *tf = bora_st_find(st, "input_features"),
                         *ti = bora_st_find(st, "input_ids"), *tt = bora_st_find(st, "targets");
    if (!tf || !ti || !tt || tf->ndim != 3 || tf->dtype != BORA_DTYPE_F32 || ti->ndim != 2 ||
        ti->dtype != BORA_DTYPE_I32 || tt->dtype != BORA_DTYPE_I32 ||
        tf->shape[0] != ti->shape[0]) {
        fprintf(stderr,
                "whisper_dump: %s: want input_features (batch, mel, frame) f32 and "
                "input_ids, targets (batch, position) i32\n",
                path);
        return 1;
    }
    in->B = tf->shape[0], in->M = tf->shape[1], in->F = tf->shape[2], in->T = ti->shape[1];
    size_t nf = (size_t)(in->B * in->M * in->F), ni = (size_t)(in->B * in->T);
    in->feats = malloc(4 * nf);
    in->ids = malloc(4 * ni);
    in->targets = malloc(4 * ni);
    if (bora_st_read(st, tf, in->feats, 4 * nf) || bora_st_read(st, ti, in->ids, 4 * ni) ||
        bora_st_read(st, tt, in->targets, 4 * ni))
        return dump_fail(path);
    bora_st_close(st);
    return 0;
}

/* Prefill + decode against eval: the largest difference of the logits. */
static int check_cache(const bora_registry *reg, const char *dir, const inputs *in, int64_t V)
{
    dump_run r = {0};
    if (open_run(reg, dir, &r))
        return 1;
    int64_t B = in->B, T = in->T;
    bora_tensor *lo_e, *lo_p, *lo_d;
    g_graph *eval = dump_build(&r, BORA_MODE_EVAL, B, "whisper", &lo_e),
            *prefill = dump_build(&r, BORA_MODE_PREFILL, B, "whisper", &lo_p),
            *decode = dump_build(&r, BORA_MODE_DECODE, B, "whisper", &lo_d);
    if (!eval || !prefill || !decode || g_finalize(eval) || g_finalize(prefill) ||
        g_finalize(decode) || g_store_materialize(r.store) || dump_load_weights(r.store, dir))
        return dump_fail("cache graphs");
    size_t nl = (size_t)(B * T * V), nf = sizeof(float) * (size_t)(B * in->M * in->F);
    float *full = malloc(sizeof(float) * nl), *pre = malloc(sizeof(float) * nl),
          *one = malloc(sizeof(float) * (size_t)(B * V));
    int32_t *win = calloc((size_t)(B * T), 4), *tok = malloc(sizeof(int32_t) * (size_t)B);
    if (g_set_input(eval, "input_features", in->feats, nf) ||
        g_set_input(eval, "input_ids", in->ids, sizeof(int32_t) * (size_t)(B * T)) || g_run(eval) ||
        g_read(eval, lo_e, full, sizeof(float) * nl))
        return dump_fail("eval");
    int64_t starts[3] = {1, 5, T - 2};
    double worst = 0;
    for (int s = 0; s < 3; s++) {
        int64_t n = starts[s];
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = 0; t < T; t++)
                win[b * T + t] = t < n ? in->ids[b * T + t] : 0;
        if (g_set_input(prefill, "input_features", in->feats, nf) ||
            g_set_input(prefill, "input_ids", win, sizeof(int32_t) * (size_t)(B * T)) ||
            g_run(prefill) || g_read(prefill, lo_p, pre, sizeof(float) * nl))
            return dump_fail("prefill");
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = 0; t < n; t++)
                for (int64_t v = 0; v < V; v++)
                    worst = fmax(worst, fabs(pre[(b * T + t) * V + v] - full[(b * T + t) * V + v]));
        for (int64_t t = n; t < T; t++) {
            int32_t p = (int32_t)t, len = p + 1;
            for (int64_t b = 0; b < B; b++)
                tok[b] = in->ids[b * T + t];
            if (g_set_input(decode, "input_ids", tok, sizeof(int32_t) * (size_t)B) ||
                g_set_input(decode, "position", &p, sizeof p) ||
                g_set_input(decode, "key_length", &len, sizeof len) || g_run(decode) ||
                g_read(decode, lo_d, one, sizeof(float) * (size_t)(B * V)))
                return dump_fail("decode");
            for (int64_t b = 0; b < B; b++)
                for (int64_t v = 0; v < V; v++)
                    worst = fmax(worst, fabs(one[b * V + v] - full[(b * T + t) * V + v]));
        }
    }
    printf("whisper_dump: %s: caches (prefill of 1, 5, %lld tokens, then decode) against the "
           "whole window: largest logit difference %.3g\n",
           dir, (long long)(T - 2), worst);
    free(full);
    free(pre);
    free(one);
    free(win);
    free(tok);
    g_graph_free(eval);
    g_graph_free(prefill);
    g_graph_free(decode);
    dump_close(&r);
    if (!(worst < 1e-4)) {
        fprintf(stderr,
                "whisper_dump: FAIL: the cached logits differ from the window's by %.3g "
                "(allowed 1e-4)\n",
                worst);
        return 1;
    }
    return 0;
}

/* A (1500, 384) parameter of BORA_INIT_SINUSOIDS, materialised and written to out. */
static int write_sinusoids(const bora_registry *reg, const char *out)
{
    const bora_entry *be = bora_registry_find(reg, BORA_KIND_BACKEND, "cpu");
    const bora_backend_ops *bops = be ? (const bora_backend_ops *)be->ops : NULL;
    bora_backend *backend;
    if (!bops || bops->create(&be->file->host, NULL, &backend))
        return dump_fail("cpu backend");
    g_store *store = g_store_new(bops, backend, "cpu", 7);
    g_graph *g = g_graph_new(store, BORA_MODE_EVAL);
    bora_axis ax[2] = {{"source", 1500}, {"embed", 384}};
    if (!bora_param(&g->pub, "sinusoids", BORA_DTYPE_F32, 2, ax, bora_init_sinusoids(),
                    BORA_PARAM_FROZEN) ||
        g_store_materialize(store))
        return dump_fail("sinusoids");
    int64_t dims[2] = {1500, 384};
    bora_st_entry e = {"sinusoids", BORA_DTYPE_F32, 2, dims, store->param_ptr};
    if (bora_st_write(out, &e, 1, NULL, 0))
        return dump_fail(out);
    g_graph_free(g);
    g_store_free(store);
    bops->destroy(backend);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 3 && !(argc == 4 && !strcmp(argv[2], "--sinusoids"))) {
        fprintf(stderr, "usage: whisper_dump PLUGIN_DIR CASE | PLUGIN_DIR --sinusoids OUT\n");
        return 2;
    }
    bora_registry *reg = bora_registry_new();
    if (bora_registry_add_dir(reg, argv[1], 1))
        return dump_fail("plugins");
    bora_registry_load(reg);
    if (argc == 4) {
        int rc = write_sinusoids(reg, argv[3]);
        bora_registry_free(reg);
        return rc;
    }
    const char *dir = argv[2];
    inputs in = {0};
    if (read_inputs(dir, &in))
        return 1;
    dump_run r = {0};
    if (open_run(reg, dir, &r))
        return 1;
    int64_t B = in.B, T = in.T, V = 0;
    bora_cfg_int(bora_cfg_root(r.cfg), "vocab_size", 0, &V);
    size_t cells = (size_t)(B * T), nf = sizeof(float) * (size_t)(B * in.M * in.F);
    bora_tensor *loss, *logits;
    g_graph *train = dump_build(&r, BORA_MODE_TRAIN, B, "whisper", &loss),
            *eval = dump_build(&r, BORA_MODE_EVAL, B, "whisper", &logits);
    if (!train || !eval || g_autodiff(train, loss) || g_finalize(train) || g_finalize(eval) ||
        g_store_materialize(r.store) || dump_load_weights(r.store, dir))
        return dump_fail("graphs");
    float loss_sum, *lg = malloc(sizeof(float) * cells * (size_t)V);
    if (g_set_input(train, "input_features", in.feats, nf) ||
        g_set_input(train, "input_ids", in.ids, 4 * cells) ||
        g_set_input(train, "targets", in.targets, 4 * cells) || g_run(train) ||
        g_read(train, loss, &loss_sum, sizeof loss_sum) ||
        g_set_input(eval, "input_features", in.feats, nf) ||
        g_set_input(eval, "input_ids", in.ids, 4 * cells) || g_run(eval) ||
        g_read(eval, logits, lg, sizeof(float) * cells * (size_t)V))
        return dump_fail("run");
    if (dump_write_outputs(r.store, dir, lg, B, T, V, loss_sum))
        return 1;
    printf("whisper_dump: %s: %zu parameters, loss sum %.6f\n", dir, r.store->n_slots, loss_sum);
    free(lg);
    g_graph_free(train);
    g_graph_free(eval);
    dump_close(&r);
    int rc = check_cache(reg, dir, &in, V);
    free(in.feats);
    free(in.ids);
    free(in.targets);
    bora_registry_free(reg);
    return rc;
}
