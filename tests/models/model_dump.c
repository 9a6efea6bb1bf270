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
#include "graph/graph.h"
#include "hvp_dump.h"
#include "plugin/registry.h"
#include "train/inputs.h"
#include "util/log.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what)
{
    fprintf(stderr, "model_dump: %s: %s\n", what, bora_error_get());
    return 1;
}

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

typedef struct run {
    const bora_model_ops *mops;
    const bora_backend_ops *bops;
    bora_model *m;
    bora_backend *backend;
    g_store *store;
    bora_cfg *cfg;
} run;

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
        fail(path);
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
static int make_model(const bora_registry *reg, const char *dir, int64_t T, int64_t window, run *r)
{
    char path[4096];
    size_t len;
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *json = slurp(path, &len);
    if (!json)
        return fail(path);
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
        return fail("create");
    if (bora_cfg_check_unread(r->cfg)) /* a key the model did not read would be ignored */
        return fail(path);
    r->store = g_store_new(r->bops, r->backend, "cpu", 7);
    return 0;
}

static int load_weights(g_store *store, const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    bora_safetensors *st;
    if (bora_st_open(path, &st))
        return fail(path);
    for (size_t i = 0; i < store->n_slots; i++) {
        const g_slot *s = &store->slots[i];
        const bora_st_tensor *t = bora_st_find(st, s->name);
        if (!t || t->dtype != BORA_DTYPE_F32 || t->ndim != s->ndim ||
            memcmp(t->shape, s->dims, sizeof(int64_t) * (size_t)s->ndim)) {
            fprintf(stderr, "model_dump: %s: tensor %s is missing or not f32 of bora's shape\n",
                    path, s->name);
            return 1;
        }
        if (bora_st_read(st, t, store->param_ptr + s->offset, s->nbytes))
            return fail(path);
    }
    if (st->n_tensors != store->n_slots) {
        fprintf(stderr, "model_dump: %s has %zu tensors, the model %zu\n", path, st->n_tensors,
                store->n_slots);
        return 1;
    }
    bora_st_close(st);
    return 0;
}

static g_graph *build(run *r, int mode, int64_t B, bora_tensor **out)
{
    g_graph *g = g_graph_new(r->store, mode);
    g->batch = B;
    if (r->mops->build(r->m, &g->pub, mode, out)) {
        fail("build");
        return NULL;
    }
    if ((*out)->base != *out)
        *out = g->pub.api->contiguous(&g->pub, *out);
    g->output = *out;
    return g;
}

/* Prefill + decode against eval on ids (B, T): the largest difference of the logits. */
static int check_cache(const bora_registry *reg, const char *dir, int64_t window,
                       const int32_t *ids, int64_t B, int64_t T, int64_t V)
{
    run r = {0};
    int rc = make_model(reg, dir, T, window, &r);
    if (rc) {
        if (rc == 2)
            printf("model_dump: %s: --window: no window keys for its type (a window it has is in "
                   "its config.json, checked above); not checked again\n",
                   dir);
        return rc == 2 ? 0 : rc;
    }
    bora_tensor *lo_e, *lo_p, *lo_d;
    g_graph *eval = build(&r, BORA_MODE_EVAL, B, &lo_e),
            *prefill = build(&r, BORA_MODE_PREFILL, B, &lo_p),
            *decode = build(&r, BORA_MODE_DECODE, B, &lo_d);
    if (!eval || !prefill || !decode || g_finalize(eval) || g_finalize(prefill) ||
        g_finalize(decode) || g_store_materialize(r.store) || load_weights(r.store, dir))
        return fail("cache graphs");
    size_t nl = (size_t)(B * T * V);
    float *full = malloc(sizeof(float) * nl), *pre = malloc(sizeof(float) * nl),
          *one = malloc(sizeof(float) * (size_t)(B * V));
    int32_t *seg = calloc((size_t)(B * T), sizeof *seg), *win = calloc((size_t)(B * T), 4),
            *tok = malloc(sizeof(int32_t) * (size_t)B);
    if (g_set_input(eval, "input_ids", ids, sizeof(int32_t) * (size_t)(B * T)) ||
        g_set_input(eval, "segment_ids", seg, sizeof(int32_t) * (size_t)(B * T)) || g_run(eval) ||
        g_read(eval, lo_e, full, sizeof(float) * nl))
        return fail("eval");
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
            return fail("prefill");
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
                return fail("decode");
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
    g_store_free(r.store);
    r.mops->destroy(r.m);
    r.bops->destroy(r.backend);
    bora_cfg_free(r.cfg);
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
        return fail("plugins");
    bora_registry_load(reg);
    char path[4096];
    snprintf(path, sizeof path, "%s/inputs.safetensors", dir);
    bora_safetensors *in;
    if (bora_st_open(path, &in))
        return fail(path);
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
            return fail(path);
        for (size_t i = 0; w == 8 && i < cells; i++)
            dst[k][i] = (int32_t)wide[i];
    }
    bora_st_close(in);

    run r = {0};
    if (make_model(reg, dir, T, 0, &r))
        return 1;
    int64_t V = 0;
    bora_cfg_int(bora_cfg_root(r.cfg), "vocab_size", 0, &V);
    if (!cache_only) {
        bora_tensor *loss, *logits;
        g_graph *train = build(&r, BORA_MODE_TRAIN, B, &loss),
                *eval = build(&r, BORA_MODE_EVAL, B, &logits);
        g_graph *hess = hvp ? hvp_graph(r.mops, r.m, r.store, B) : NULL;
        if (hvp && !hess)
            return 1;
        if (!train || !eval || g_autodiff(train, loss) || g_finalize(train) || g_finalize(eval) ||
            g_store_materialize(r.store) || load_weights(r.store, dir))
            return fail("graphs");
        float loss_sum, *lg = malloc(sizeof(float) * cells * (size_t)V);
        if (g_set_input(train, "input_ids", ids, 4 * cells) ||
            g_set_input(train, "targets", targets, 4 * cells) ||
            g_set_input(train, "segment_ids", seg, 4 * cells) || g_run(train) ||
            g_read(train, loss, &loss_sum, sizeof loss_sum) ||
            g_set_input(eval, "input_ids", ids, 4 * cells) ||
            g_set_input(eval, "segment_ids", seg, 4 * cells) || g_run(eval) ||
            g_read(eval, logits, lg, sizeof(float) * cells * (size_t)V))
            return fail("run");
        g_store *store = r.store;
        size_t n = store->n_slots;
        bora_st_entry *outs = calloc(n + 2, sizeof *outs);
        char **gnames = calloc(n, sizeof *gnames);
        for (size_t i = 0; i < n; i++) {
            const g_slot *s = &store->slots[i];
            gnames[i] = malloc(strlen(s->name) + 6);
            sprintf(gnames[i], "grad.%s", s->name);
            outs[i + 2] =
                (bora_st_entry){gnames[i], s->dtype, s->ndim, s->dims, store->grad_ptr + s->offset};
        }
        int64_t lshape[3] = {B, T, V};
        outs[0] = (bora_st_entry){"logits", BORA_DTYPE_F32, 3, lshape, lg};
        outs[1] = (bora_st_entry){"loss_sum", BORA_DTYPE_F32, 0, NULL, &loss_sum};
        snprintf(path, sizeof path, "%s/outputs.safetensors", dir);
        if (bora_st_write(path, outs, n + 2, NULL, 0))
            return fail(path);
        if (hess &&
            (g_set_input(hess, "input_ids", ids, 4 * cells) ||
             g_set_input(hess, "targets", targets, 4 * cells) ||
             g_set_input(hess, "segment_ids", seg, 4 * cells) || hvp_run_and_write(hess, dir)))
            return fail("hvp");
        printf("model_dump: %s: %zu parameters, loss sum %.6f\n", dir, n, loss_sum);
        for (size_t i = 0; i < n; i++)
            free(gnames[i]);
        free(gnames);
        free(outs);
        free(lg);
        g_graph_free(train);
        g_graph_free(eval);
        g_graph_free(hess);
    }
    g_store_free(r.store);
    r.mops->destroy(r.m);
    r.bops->destroy(r.backend);
    bora_cfg_free(r.cfg);
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
