/* tests/models/model_dump.c — runs a model plugin on a case a PyTorch reference wrote
 * (tests/models/llama_torch.py or gemma_torch.py --write-case): CASE/config.json (its model_type
 * picks the bora type: the name itself, or bora's name for it from MODEL_TYPES), CASE/
 * model.safetensors (the weights, Hugging Face names) and CASE/inputs.safetensors (input_ids,
 * targets, optional segment_ids). It writes what bora computes from them into
 * CASE/outputs.safetensors — the eval graph's logits, the train graph's summed loss and every
 * parameter's gradient as grad.NAME — for the reference's comparison mode to read.
 *
 * Then it checks the KV cache against the eval graph on the same weights: a prefill of the first
 * n tokens (the rest of the window padding) and a decode step per following position must give
 * the eval logits of the whole window at each position (within 1e-4), for n = 1, 5 and T - 2.
 * Windows the case's config.json gives (Mistral, Gemma 2 and 3) are in that check already; with
 * --window W it is run again with the keys WINDOW_KEYS lists for the type turning windows of W
 * on (Qwen2/3: use_sliding_window on layers >= 1), so the check covers caches that keep only W
 * rows; a type without such keys skips that second check.
 *
 * With --hvp it also writes CASE/hvp.safetensors: a tangent v per parameter and the
 * Hessian-vector product H·v of the summed loss (hvp_dump.h), for the reference's --hvp;
 * the KV cache is not checked then.
 *
 * usage: model_dump PLUGIN_DIR CASE [--window W] [--cache-only | --hvp] */
#include "ckpt/safetensors.h"
#include "config/config.h"
#include "dump_run.h"
#include "graph/graph.h"
#include "hvp_dump.h"
#include "plugin/registry.h"
#include "train/inputs.h"
#include "util/log.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *dump_prog = "model_dump";

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (!s || fread(s, 1, (size_t)n, f) != (size_t)n) {
        fclose(f);
        free(s);
        return NULL;
    }
    fclose(f);
    s[n] = 0;
    *len = (size_t)n;
    return s;
}

/* Hugging Face model_type names that differ from the bora type of the same model. */
static const struct {
    const char *hf, *bora;
} MODEL_TYPES[] = {
    {"gemma3_text", "gemma3"},
};

/* The config.json keys (in front of the case's own) that turn sliding windows on, for the types
 * whose cases leave them off: window_key: W, then the other keys as they are. */
typedef struct window_keys {
    const char *type, *window_key, *others;
} window_keys;
static const window_keys WINDOW_KEYS[] = {
    {"qwen2", "sliding_window", "\"use_sliding_window\": true, \"max_window_layers\": 1, "},
    {"qwen3", "sliding_window", "\"use_sliding_window\": true, \"max_window_layers\": 1, "},
};

/* config.json as bora's config (it is YAML too) with seq_len T and, when keys is not NULL, its
 * keys for a window of W in front of the case's own. */
static bora_cfg *load_config(const char *path, const char *json, int64_t T, const window_keys *keys,
                             int64_t window)
{
    const char *open_brace = strchr(json, '{');
    size_t cap = strlen(json) + 512;
    char *text = malloc(cap);
    if (!open_brace || !text) {
        free(text);
        fprintf(stderr, "model_dump: %s: not a JSON object\n", path);
        return NULL;
    }
    int n = snprintf(text, cap, "{\"seq_len\": %lld, ", (long long)T);
    if (keys)
        n += snprintf(text + n, cap - (size_t)n, "\"%s\": %lld, %s", keys->window_key,
                      (long long)window, keys->others);
    snprintf(text + n, cap - (size_t)n, "%s", open_brace + 1);
    bora_cfg *cfg = bora_cfg_new();
    if (bora_cfg_load_string(cfg, path, text, strlen(text))) {
        dump_fail(path);
        bora_cfg_free(cfg);
        cfg = NULL;
    }
    free(text);
    return cfg;
}

/* The bora type of cfg's model_type (a string in cfg), NULL without one. */
static const char *model_type(bora_cfg *cfg)
{
    const char *type = NULL;
    if (cfg)
        bora_cfg_string(bora_cfg_root(cfg), "model_type", NULL, &type);
    for (size_t i = 0; type && i < sizeof MODEL_TYPES / sizeof *MODEL_TYPES; i++)
        if (!strcmp(type, MODEL_TYPES[i].hf))
            type = MODEL_TYPES[i].bora;
    return type;
}

/* The model of config.json with seq_len T and, with window > 0, the type's WINDOW_KEYS; 2 when
 * the type has none. */
static int make_model(const bora_registry *reg, const char *dir, int64_t T, int64_t window,
                      dump_run *r)
{
    char path[4096];
    size_t len;
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *json = slurp(path, &len);
    if (!json)
        return dump_fail(path);
    r->cfg = load_config(path, json, T, NULL, 0);
    const char *type = model_type(r->cfg);
    const window_keys *keys = NULL;
    for (size_t i = 0; type && i < sizeof WINDOW_KEYS / sizeof *WINDOW_KEYS; i++)
        if (!strcmp(type, WINDOW_KEYS[i].type))
            keys = &WINDOW_KEYS[i];
    if (r->cfg && window > 0) {
        if (!keys) {
            free(json);
            bora_cfg_free(r->cfg);
            r->cfg = NULL;
            return 2; /* no window keys for this type */
        }
        bora_cfg_free(r->cfg);
        r->cfg = load_config(path, json, T, keys, window);
        type = model_type(r->cfg);
    }
    free(json);
    if (!r->cfg)
        return 1;
    const bora_entry *me = type ? bora_registry_find(reg, BORA_KIND_MODEL, type) : NULL;
    const bora_entry *be = bora_registry_find(reg, BORA_KIND_BACKEND, "cpu");
    if (!me || !be) {
        fprintf(stderr,
                "model_dump: %s: no model plugin of model_type %s, or no cpu backend, in "
                "the plugin folder\n",
                path, type ? type : "(none)");
        return 1;
    }
    r->mops = (const bora_model_ops *)me->ops;
    r->bops = (const bora_backend_ops *)be->ops;
    if (r->mops->create(&me->file->host, bora_cfg_root(r->cfg), &r->m) ||
        r->bops->create(&be->file->host, NULL, &r->backend))
        return dump_fail("create");
    if (bora_cfg_check_unread(r->cfg)) /* a key the model did not read would be ignored */
        return dump_fail(path);
    r->store = g_store_new(r->bops, r->backend, "cpu", 7);
    return 0;
}

/* Prefill + decode against eval on ids (B, T): the largest difference of the logits. */
static int check_cache(const bora_registry *reg, const char *dir, int64_t window,
                       const int32_t *ids, int64_t B, int64_t T, int64_t V)
{
    dump_run r = {0};
    int rc = make_model(reg, dir, T, window, &r);
    if (rc) {
        if (rc == 2)
            printf("model_dump: %s: --window: no window keys for its type (a window it has is in "
                   "its config.json, checked above); not checked again\n",
                   dir);
        return rc == 2 ? 0 : rc;
    }
    bora_tensor *lo_e, *lo_p, *lo_d;
    g_graph *eval = dump_build(&r, BORA_MODE_EVAL, B, NULL, &lo_e),
            *prefill = dump_build(&r, BORA_MODE_PREFILL, B, NULL, &lo_p),
            *decode = dump_build(&r, BORA_MODE_DECODE, B, NULL, &lo_d);
    if (!eval || !prefill || !decode || g_finalize(eval) || g_finalize(prefill) ||
        g_finalize(decode) || g_store_materialize(r.store) || dump_load_weights(r.store, dir))
        return dump_fail("cache graphs");
    size_t nl = (size_t)(B * T * V);
    float *full = malloc(sizeof(float) * nl), *pre = malloc(sizeof(float) * nl),
          *one = malloc(sizeof(float) * (size_t)(B * V));
    int32_t *seg = calloc((size_t)(B * T), sizeof *seg), *win = calloc((size_t)(B * T), 4),
            *tok = malloc(sizeof(int32_t) * (size_t)B);
    if (g_set_input(eval, "input_ids", ids, sizeof(int32_t) * (size_t)(B * T)) ||
        g_set_input(eval, "segment_ids", seg, sizeof(int32_t) * (size_t)(B * T)) || g_run(eval) ||
        g_read(eval, lo_e, full, sizeof(float) * nl))
        return dump_fail("eval");
    int64_t starts[3] = {1, 5, T - 2};
    double worst = 0;
    for (int s = 0; s < 3; s++) {
        int64_t n = starts[s];
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = 0; t < T; t++)
                win[b * T + t] = t < n ? ids[b * T + t] : 0;
        int32_t held = (int32_t)n;
        if (g_set_input(prefill, "input_ids", win, sizeof(int32_t) * (size_t)(B * T)) ||
            g_set_input(prefill, "segment_ids", seg, sizeof(int32_t) * (size_t)(B * T)) ||
            (bora_inputs_reads(prefill, "key_length") &&
             g_set_input(prefill, "key_length", &held, sizeof held)) ||
            g_run(prefill) || g_read(prefill, lo_p, pre, sizeof(float) * nl))
            return dump_fail("prefill");
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = 0; t < n; t++)
                for (int64_t v = 0; v < V; v++) {
                    double d = fabs(pre[(b * T + t) * V + v] - full[(b * T + t) * V + v]);
                    worst = d > worst ? d : worst;
                }
        for (int64_t t = n; t < T; t++) {
            int32_t p = (int32_t)t, len = p + 1;
            for (int64_t b = 0; b < B; b++)
                tok[b] = ids[b * T + t];
            if (g_set_input(decode, "input_ids", tok, sizeof(int32_t) * (size_t)B) ||
                g_set_input(decode, "position", &p, sizeof p) ||
                g_set_input(decode, "key_length", &len, sizeof len) || g_run(decode) ||
                g_read(decode, lo_d, one, sizeof(float) * (size_t)(B * V)))
                return dump_fail("decode");
            for (int64_t b = 0; b < B; b++)
                for (int64_t v = 0; v < V; v++) {
                    double d = fabs(one[b * V + v] - full[(b * T + t) * V + v]);
                    worst = d > worst ? d : worst;
                }
        }
    }
    printf("model_dump: %s%s: KV cache (prefill of 1, 5, %lld tokens, then decode) against the "
           "whole window: largest logit difference %.3g\n",
           dir, window ? " with sliding windows" : "", (long long)(T - 2), worst);
    free(full);
    free(pre);
    free(one);
    free(seg);
    free(win);
    free(tok);
    g_graph_free(eval);
    g_graph_free(prefill);
    g_graph_free(decode);
    dump_close(&r);
    if (!(worst < 1e-4)) {
        fprintf(stderr,
                "model_dump: FAIL: the KV cache's logits differ from the window's by "
                "%.3g (allowed 1e-4)\n",
                worst);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: model_dump PLUGIN_DIR CASE [--window W] [--cache-only | --hvp]\n");
        return 2;
    }
    const char *dir = argv[2];
    int64_t window = 0;
    int cache_only = 0, hvp = 0;
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "--window") && i + 1 < argc)
            window = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--cache-only"))
            cache_only = 1;
        else if (!strcmp(argv[i], "--hvp"))
            hvp = 1;
        else {
            fprintf(stderr, "model_dump: unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    bora_registry *reg = bora_registry_new();
    if (bora_registry_add_dir(reg, argv[1], 1))
        return dump_fail("plugins");
    bora_registry_load(reg);
    char path[4096];
    snprintf(path, sizeof path, "%s/inputs.safetensors", dir);
    bora_safetensors *in;
    if (bora_st_open(path, &in))
        return dump_fail(path);
    const bora_st_tensor *ti = bora_st_find(in, "input_ids"), *tt = bora_st_find(in, "targets"),
                         *ts = bora_st_find(in, "segment_ids");
    if (!ti || !tt || ti->ndim != 2 || ti->dtype != tt->dtype ||
        (ti->dtype != BORA_DTYPE_I64 && ti->dtype != BORA_DTYPE_I32)) {
        fprintf(stderr, "model_dump: %s: want input_ids and targets (batch, position)\n", path);
        return 1;
    }
    int64_t B = ti->shape[0], T = ti->shape[1];
    size_t cells = (size_t)(B * T);
    int32_t *ids = malloc(4 * cells), *targets = malloc(4 * cells), *seg = calloc(cells, 4);
    int64_t *wide = malloc(8 * cells);
    const bora_st_tensor *src[3] = {ti, tt, ts};
    int32_t *dst[3] = {ids, targets, seg};
    for (int k = 0; k < 3; k++) {
        if (!src[k])
            continue;
        int w = src[k]->dtype == BORA_DTYPE_I64 ? 8 : 4;
        if (bora_st_read(in, src[k], w == 8 ? (void *)wide : (void *)dst[k], w * cells))
            return dump_fail(path);
        for (size_t i = 0; w == 8 && i < cells; i++)
            dst[k][i] = (int32_t)wide[i];
    }
    bora_st_close(in);

    dump_run r = {0};
    if (make_model(reg, dir, T, 0, &r))
        return 1;
    int64_t V = 0;
    bora_cfg_int(bora_cfg_root(r.cfg), "vocab_size", 0, &V);
    if (!cache_only) {
        bora_tensor *loss, *logits;
        g_graph *train = dump_build(&r, BORA_MODE_TRAIN, B, NULL, &loss),
                *eval = dump_build(&r, BORA_MODE_EVAL, B, NULL, &logits);
        g_graph *hess = hvp ? hvp_graph(r.mops, r.m, r.store, B) : NULL;
        if (hvp && !hess)
            return 1;
        if (!train || !eval || g_autodiff(train, loss) || g_finalize(train) || g_finalize(eval) ||
            g_store_materialize(r.store) || dump_load_weights(r.store, dir))
            return dump_fail("graphs");
        float loss_sum, *lg = malloc(sizeof(float) * cells * (size_t)V);
        if (g_set_input(train, "input_ids", ids, 4 * cells) ||
            g_set_input(train, "targets", targets, 4 * cells) ||
            g_set_input(train, "segment_ids", seg, 4 * cells) || g_run(train) ||
            g_read(train, loss, &loss_sum, sizeof loss_sum) ||
            g_set_input(eval, "input_ids", ids, 4 * cells) ||
            g_set_input(eval, "segment_ids", seg, 4 * cells) || g_run(eval) ||
            g_read(eval, logits, lg, sizeof(float) * cells * (size_t)V))
            return dump_fail("run");
        if (dump_write_outputs(r.store, dir, lg, B, T, V, loss_sum))
            return 1;
        if (hess &&
            (g_set_input(hess, "input_ids", ids, 4 * cells) ||
             g_set_input(hess, "targets", targets, 4 * cells) ||
             g_set_input(hess, "segment_ids", seg, 4 * cells) || hvp_run_and_write(hess, dir)))
            return dump_fail("hvp");
        printf("model_dump: %s: %zu parameters, loss sum %.6f\n", dir, r.store->n_slots, loss_sum);
        free(lg);
        g_graph_free(train);
        g_graph_free(eval);
        g_graph_free(hess);
    }
    dump_close(&r);
    int rc = hvp ? 0 : check_cache(reg, dir, 0, ids, B, T, V);
    if (!rc && window > 0)
        rc = check_cache(reg, dir, window, ids, B, T, V);
    free(ids);
    free(targets);
    free(seg);
    free(wide);
    bora_registry_free(reg);
    return rc;
}
