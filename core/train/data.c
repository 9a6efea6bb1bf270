/* core/train/data.c — the run's loaders, and `bora cache` (see internal.h). */
#include "internal.h"

#include "../ckpt/checkpoint.h"
#include "../config/schema.h"
#include "../data/audio/prefix.h"
#include "../data/audio_cache.h"
#include "../data/cache.h"
#include "../data/loader.h"
#include "../graph/graph.h"
#include "../util/log.h"
#include "../util/str.h"
#include "apply.h"
#include "bora_version.h"
#include "eval.h"
#include "inputs.h"
#include "peak.h"
#include "schedule.h"
#include "tracklog.h"

#include <errno.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Strings the loader options point to. */
typedef struct data_names {
    char what[160], dir[4200];
    int32_t prefix[BORA_WHISPER_PREFIX_MAX];
} data_names;

/* Whether the model's graph reads input_features (an audio model), and their shape; -1 when no
 * graph is built (bora cache). */
static int model_features(const trainer *t, int *n_mels, int64_t *frames)
{
    if (t->train)
        return bora_inputs_features(t->train, n_mels, frames);
    return t->eval ? bora_eval_features(t->eval, n_mels, frames) : -1;
}

/* data.type: audio fits an audio model, text a text model: *audio says which, and the opts get
 * an audio dataset's start sequence and features' shape. */
static bora_status audio_opts(trainer *t, bora_config *data, bora_loader_opts *o, data_names *names)
{
    const char *type = "text", *language = "", *task = "transcribe", *audio_key = "audio";
    bora_cfg_string(data, "type", "text", &type);
    bora_cfg_string(data, "language", "", &language);
    bora_cfg_string(data, "task", "transcribe", &task);
    bora_cfg_string(data, "audio_key", "audio", &audio_key);
    if (strcmp(type, "text") && strcmp(type, "audio"))
        return bora_error_set(BORA_ERR_CONFIG, "data.type: '%s' is neither text nor audio", type);
    int audio = !strcmp(type, "audio"), n_mels = 0;
    int64_t frames = 0;
    int reads = model_features(t, &n_mels, &frames);
    const char *model = t->model_entry ? t->model_entry->ops->name : "?";
    if (audio && reads == 0)
        return bora_error_set(BORA_ERR_CONFIG,
                              "data.type: audio, but model %s (model.type) reads no "
                              "input_features: clips are for an audio model such as whisper; "
                              "for a text model set data.type: text",
                              model);
    if (!audio && reads == 1)
        return bora_error_set(BORA_ERR_CONFIG,
                              "model %s (model.type) reads input_features, audio, but data.type "
                              "is text: give it clips (data.type: audio, with .jsonl manifests "
                              "in data.train_urls)",
                              model);
    if (!audio)
        return BORA_OK;
    int n = 0;
    if (bora_whisper_prefix(t->tok, *language ? language : NULL, task, 0, names->prefix, &n) !=
        BORA_OK)
        return bora_error_set(BORA_ERR_CONFIG, "data.language/data.task: %s", bora_error_get());
    o->audio = 1;
    o->audio_key = audio_key;
    o->prefix = names->prefix;
    o->n_prefix = n;
    o->n_mels = n_mels;
    o->frames = frames;
    return BORA_OK;
}

/* Append the patterns of node[key] (a list, or one string) to l[0..*n) (grown). */
static bora_status add_urls(bora_config *node, const char *key, const char ***l, size_t *n)
{
    bora_config *urls = bora_cfg_child(node, key);
    size_t more = !urls                                                         ? 0
                  : urls->kind == BORA_NODE_LIST                                ? urls->n
                  : urls->kind == BORA_NODE_SCALAR && urls->text && *urls->text ? 1
                                                                                : 0;
    const char **grown = realloc(*l, (*n + more + 1) * sizeof **l);
    if (!grown)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    *l = grown;
    if (urls && urls->kind == BORA_NODE_SCALAR) {
        urls->read = 1;
        if (more)
            grown[(*n)++] = urls->text;
        return BORA_OK;
    }
    for (size_t i = 0; i < more; i++) {
        bora_config *u = bora_cfg_at(urls, i);
        grown[(*n)++] = u->kind == BORA_NODE_SCALAR ? u->text : "";
    }
    return BORA_OK;
}

/* The datasets of data.configs, or 0 when there are none. */
static size_t n_configs(bora_config *root)
{
    bora_config *c = bora_cfg_child(bora_cfg_child(root, "data"), "configs");
    return c && c->kind == BORA_NODE_MAP ? c->n : 0;
}

/* The loader options for the `key` list (train_urls or validation_urls) of data, or of
 * data.configs[part] (part >= 0); validation of a mixture with no data.validation_urls of its
 * own reads every dataset's validation_urls. *list (to free) holds the patterns. An explicit
 * data.cache_dir holds the training cache (of a dataset in a mixture: its subdirectory NAME),
 * and validation's in the subdirectory "validation". */
static bora_status data_opts(trainer *t, bora_config *root, const char *key, long part,
                             bora_loader_opts *o, const char ***list, data_names *names)
{
    bora_config *data = bora_cfg_child(root, "data");
    bora_config *configs = bora_cfg_child(data, "configs");
    int train = !strcmp(key, "train_urls");
    *list = NULL;
    if (!t->tok)
        return bora_error_set(BORA_ERR_CONFIG,
                              "data.tokenizer: give the tokenizer to train with (a "
                              "tokenizer.json, or a folder with one)");
    const char **l = NULL, *text_key = "text";
    size_t n = 0;
    bora_cfg_string(data, "text_key", "text", &text_key);
    bora_config *src = part >= 0 ? configs->values[part] : data;
    bora_status st = add_urls(src, key, &l, &n);
    if (st == BORA_OK && part < 0 && !train && !n && n_configs(root))
        for (size_t i = 0; i < configs->n && st == BORA_OK; i++)
            st = add_urls(configs->values[i], key, &l, &n);
    if (st != BORA_OK) {
        free(l);
        return st;
    }
    if (part >= 0) {
        const char *own = NULL;
        bora_cfg_string(src, "text_key", NULL, &own);
        if (own && *own)
            text_key = own;
    }
    const char *shuffle_s = "false", *cache_dir = "", *txt_docs = "blocks";
    bora_cfg_string(data, "txt_documents", "blocks", &txt_docs);
    if (strcmp(txt_docs, "blocks") && strcmp(txt_docs, "file")) {
        free(l);
        return bora_error_set(BORA_ERR_CONFIG,
                              "data.txt_documents: '%s' is neither blocks nor file", txt_docs);
    }
    int64_t shuffle = 0, workers = 0;
    int rebuild = 0;
    double max_bad = 0;
    bora_cfg_string(data, "shuffle", "false", &shuffle_s);
    bora_cfg_string(data, "cache_dir", "", &cache_dir);
    bora_cfg_int(data, "cache_workers", 0, &workers);
    bora_cfg_bool(data, "cache_rebuild", 0, &rebuild);
    bora_cfg_float(data, "max_bad_fraction", 0, &max_bad);
    if (!strcmp(shuffle_s, "true"))
        shuffle = 1;
    else if (strcmp(shuffle_s, "false") && (bora_parse_int(shuffle_s, &shuffle) || shuffle < 1)) {
        free(l);
        return bora_error_set(BORA_ERR_CONFIG,
                              "data.shuffle: '%s' is not false, true or an era length (a "
                              "number of windows, at least 1)",
                              shuffle_s);
    }
    const char *name = part >= 0 ? configs->keys[part] : NULL;
    if (name)
        snprintf(names->what, sizeof names->what, "data.configs.%s.%s", name, key);
    else
        snprintf(names->what, sizeof names->what, "data.%s", key);
    snprintf(names->dir, sizeof names->dir, "%s%s%s%s", cache_dir, name ? "/" : "",
             name ? name : "", *cache_dir && !train ? "/validation" : "");
    *o = (bora_loader_opts){.urls = l,
                            .n_urls = n,
                            .text_key = text_key,
                            .tok = t->tok,
                            .seq_len = t->seq_len,
                            .seed = (uint64_t)t->seed,
                            .shuffle = train ? shuffle : 0,
                            .progress = 1,
                            .max_bad_fraction = max_bad,
                            .what = names->what,
                            .cache_dir = *cache_dir ? names->dir : NULL,
                            .workers = (int)(t->cache_workers ? t->cache_workers : workers),
                            .rebuild = t->cache_rebuild || rebuild,
                            .skip_windows = train ? t->held_out : 0,
                            .prefetch = train && !t->eval_only,
                            .txt_whole = !strcmp(txt_docs, "file")};
    st = audio_opts(t, data, o, names);
    if (st != BORA_OK) {
        free(l);
        return st;
    }
    *list = l;
    return BORA_OK;
}

/* A loader over data.{key} (train_urls or validation_urls). */
static bora_status open_loader(trainer *t, bora_config *root, const char *key, bora_loader **out)
{
    bora_loader_opts o;
    const char **list;
    data_names names;
    bora_status st = data_opts(t, root, key, -1, &o, &list, &names);
    if (st == BORA_OK)
        st = bora_loader_open(&o, out);
    free(list);
    return st;
}

/* The weights of data.train_weights: one stage ({NAME: w}) or a list of [STEP, {NAME: w}]. */
static bora_status mixture_weights(bora_config *data, bora_config *configs, int64_t **steps,
                                   double **weights, size_t *n_stages)
{
    bora_config *tw = bora_cfg_child(data, "train_weights");
    size_t n = configs->n, S = !tw                          ? 0
                               : tw->kind == BORA_NODE_MAP  ? (tw->n > 0)
                               : tw->kind == BORA_NODE_LIST ? tw->n
                                                            : 0;
    if (!S)
        return bora_error_set(BORA_ERR_CONFIG,
                              "data.train_weights: give the datasets' weights, {NAME: weight} or "
                              "[[STEP, {NAME: weight}], ...], for data.configs");
    *steps = calloc(S, sizeof **steps);
    *weights = calloc(S * n, sizeof **weights);
    *n_stages = S;
    if (!*steps || !*weights)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    for (size_t s = 0; s < S; s++) {
        bora_config *map = tw;
        if (tw->kind == BORA_NODE_LIST) {
            bora_config *e = bora_cfg_at(tw, s), *at = e ? bora_cfg_at(e, 0) : NULL;
            map = e ? bora_cfg_at(e, 1) : NULL;
            if (!e || e->kind != BORA_NODE_LIST || e->n != 2 || at->kind != BORA_NODE_SCALAR ||
                bora_parse_int(at->text, &(*steps)[s]) || !map || map->kind != BORA_NODE_MAP)
                return bora_error_set(BORA_ERR_CONFIG,
                                      "data.train_weights: stage %zu is not [STEP, {NAME: weight}]",
                                      s + 1);
        }
        for (size_t i = 0; i < map->n; i++) {
            size_t d = 0;
            while (d < n && strcmp(configs->keys[d], map->keys[i]))
                d++;
            bora_config *v = map->values[i];
            double w = 0;
            if (d == n)
                return bora_error_set(BORA_ERR_CONFIG,
                                      "data.train_weights: '%s' is not a dataset of data.configs",
                                      map->keys[i]);
            if (v->kind != BORA_NODE_SCALAR || bora_parse_float(v->text, &w))
                return bora_error_set(BORA_ERR_CONFIG,
                                      "data.train_weights: the weight of '%s' is not a number",
                                      map->keys[i]);
            (*weights)[s * n + d] = w;
        }
    }
    return BORA_OK;
}

/* The training loader of a mixture (data.configs with data.train_weights). */
static bora_status open_mixture(trainer *t, bora_config *root)
{
    bora_config *data = bora_cfg_child(root, "data");
    bora_config *configs = bora_cfg_child(data, "configs"),
                *tu = bora_cfg_child(data, "train_urls");
    if (tu && ((tu->kind == BORA_NODE_LIST && tu->n) || tu->kind == BORA_NODE_SCALAR))
        return bora_error_set(BORA_ERR_CONFIG,
                              "data: give train_urls or configs (a mixture), not both");
    size_t n = configs->n;
    bora_loader_opts *parts = calloc(n, sizeof *parts);
    const char ***lists = calloc(n, sizeof *lists);
    const char **names = calloc(n, sizeof *names);
    data_names *dn = calloc(n, sizeof *dn);
    int64_t *steps = NULL, block = 2048;
    double *weights = NULL;
    size_t n_stages = 0;
    bora_status st =
        parts && lists && names && dn ? BORA_OK : bora_error_set(BORA_ERR_NOMEM, "out of memory");
    for (size_t d = 0; d < n && st == BORA_OK; d++) {
        names[d] = configs->keys[d];
        st = data_opts(t, root, "train_urls", (long)d, &parts[d], &lists[d], &dn[d]);
        if (st == BORA_OK && !parts[d].n_urls)
            st = bora_error_set(BORA_ERR_CONFIG, "data.configs.%s: no train_urls", names[d]);
    }
    bora_cfg_int(data, "mixture_block_size", 2048, &block);
    if (st == BORA_OK)
        st = mixture_weights(data, configs, &steps, &weights, &n_stages);
    if (st == BORA_OK) {
        bora_mixture_opts m = {n_stages, steps, weights, block, t->batch, !t->eval_only};
        st = bora_loader_open_mixture(parts, names, n, &m, &t->loader);
    }
    if (st == BORA_OK) {
        int64_t *c = calloc(n, sizeof *c);
        for (size_t s = 0; c && s < n_stages; s++) {
            bora_loader_mixture_counts(t->loader, s, c);
            printf("data: mixture from step %lld, per block of %lld rows:", (long long)steps[s],
                   (long long)block);
            for (size_t d = 0; d < n; d++)
                printf(" %s %lld%s", names[d], (long long)c[d], d + 1 < n ? "," : "\n");
        }
        free(c);
    }
    for (size_t d = 0; lists && d < n; d++)
        free(lists[d]);
    free(parts), free(lists), free(names), free(dn), free(steps), free(weights);
    return st;
}

/* The step's features buffer for an audio model, and what an audio run cannot do. */
static bora_status audio_checks(trainer *t)
{
    int n_mels;
    int64_t frames;
    if (!t->loader || !bora_loader_audio(t->loader, &n_mels, &frames))
        return BORA_OK;
    if (t->hess_built)
        return bora_error_set(BORA_ERR_CONFIG,
                              "optimizer %s: its Hessian estimate does not give an audio model "
                              "its input_features; train it with another optimizer",
                              t->opt_entry->ops->name);
    size_t cells;
    if (__builtin_mul_overflow((size_t)n_mels, (size_t)frames, &t->feat_row) ||
        __builtin_mul_overflow(t->feat_row, (size_t)t->batch, &cells) ||
        !(t->feats = malloc(cells * sizeof(float))))
        return bora_error_set(BORA_ERR_NOMEM,
                              "out of memory for a step's features (trainer.train_batch_size "
                              "%lld clips of %d x %lld)",
                              (long long)t->batch, n_mels, (long long)frames);
    return BORA_OK;
}

bora_status tr_open_data(trainer *t, bora_config *root)
{
    bora_status st = BORA_OK;
    int carve = t->held_out > 0;
    const char *type = "text";
    bora_cfg_string(bora_cfg_child(root, "data"), "type", "text", &type);
    if (!strcmp(type, "audio") && n_configs(root))
        return bora_error_set(BORA_ERR_CONFIG,
                              "data.configs: a mixture of audio datasets is not supported; give "
                              "data.train_urls");
    if (!t->eval_only || carve)
        st = n_configs(root) ? open_mixture(t, root)
                             : open_loader(t, root, "train_urls", &t->loader);
    if (st == BORA_OK && t->eval)
        st = carve ? bora_loader_carve(t->loader, t->held_out, &t->val)
                   : open_loader(t, root, "validation_urls", &t->val);
    if (st == BORA_OK)
        st = audio_checks(t);
    return st == BORA_OK ? BORA_OK : BORA_ERR_INVALID;
}

/* ---- bora cache ---------------------------------------------------------------------------- */

/* 1234567 -> "1.23M" */
static const char *si(double v, char *buf, size_t cap)
{
    const char *unit = "";
    if (v >= 1e9)
        v /= 1e9, unit = "G";
    else if (v >= 1e6)
        v /= 1e6, unit = "M";
    else if (v >= 1e3)
        v /= 1e3, unit = "k";
    snprintf(buf, cap, *unit ? "%.3g%s" : "%.0f%s", v, unit);
    return buf;
}

/* Build one manifest list's audio cache, showing progress; 0 when it is complete. */
static int audio_cache_one(const bora_loader_opts *lo, const data_names *names, int live)
{
    bora_audio_cache_opts ao;
    bora_audio_cache *c = NULL;
    bora_loader_audio_cache_opts(lo, &ao);
    bora_status st = bora_audio_cache_open(&ao, &c);
    if (st != BORA_OK) {
        bora_log(BORA_LOG_ERROR, "%s", bora_error_get());
        return 0;
    }
    double t0 = bora_now_s(), last_print = t0;
    bora_cache_progress p;
    for (;;) {
        bora_audio_cache_progress_get(c, &p);
        double now = bora_now_s();
        if (p.done || p.failed)
            break;
        if (live || now - last_print >= 10) {
            printf("%scache %s: %zu/%zu manifests, %lld clips%s", live ? "\r\033[K" : "",
                   names->what, p.shards_done, p.shards, (long long)p.documents, live ? "" : "\n");
            fflush(stdout);
            last_print = now;
        }
        struct timespec ts = {0, 200 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (live)
        printf("\r\033[K");
    st = bora_audio_cache_wait(c);
    if (st == BORA_OK) {
        bora_audio_cache_progress_get(c, &p);
        printf("cache %s: %zu manifests, %lld clips, %lld tokens in %s (%zu made now, %zu "
               "reused; %.1f s)\n",
               names->what, p.shards, (long long)bora_audio_cache_examples(c), (long long)p.tokens,
               bora_audio_cache_dir(c), p.shards - bora_audio_cache_reused(c),
               bora_audio_cache_reused(c), bora_now_s() - t0);
    } else {
        bora_log(BORA_LOG_ERROR, "%s", bora_error_get());
    }
    fflush(stdout);
    bora_audio_cache_free(c);
    return st == BORA_OK;
}

/* Build one source list's cache, showing progress; 0 when it is complete. */
static int cache_one(trainer *t, bora_config *root, const char *key, long part, int live)
{
    bora_loader_opts lo;
    const char **list;
    data_names names;
    bora_cache *c = NULL;
    bora_status st = data_opts(t, root, key, part, &lo, &list, &names);
    if (st == BORA_OK && lo.audio) {
        int ok = audio_cache_one(&lo, &names, live);
        free(list);
        return ok;
    }
    if (st == BORA_OK) {
        bora_cache_opts co;
        bora_loader_cache_opts(&lo, &co);
        st = bora_cache_open(&co, &c);
    }
    free(list);
    if (st != BORA_OK) {
        bora_log(BORA_LOG_ERROR, "%s", bora_error_get());
        return 0;
    }
    double t0 = bora_now_s(), last_print = t0;
    bora_cache_progress p0, p;
    bora_cache_progress_get(c, &p0);
    for (;;) {
        bora_cache_progress_get(c, &p);
        double now = bora_now_s(), dt = now - t0;
        if (p.done || p.failed)
            break;
        if (live || now - last_print >= 10) {
            char tok[32], rate[32], eta[32] = "?";
            double new_bytes = (double)(p.bytes_done - p0.bytes_done);
            if (new_bytes > 0)
                tr_duration_text(dt * (double)(p.bytes - p.bytes_done) / new_bytes, eta,
                                 sizeof eta);
            printf("%scache %s: %zu/%zu files, %lld documents, %s tokens, %s tokens/s, ETA %s%s",
                   live ? "\r\033[K" : "", names.what, p.shards_done, p.shards,
                   (long long)p.documents, si((double)p.tokens, tok, sizeof tok),
                   si(dt > 0 ? (double)(p.tokens - p0.tokens) / dt : 0, rate, sizeof rate), eta,
                   live ? "" : "\n");
            fflush(stdout);
            last_print = now;
        }
        struct timespec ts = {0, 200 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (live)
        printf("\r\033[K");
    int64_t ready = 0;
    int done = 0;
    st = bora_cache_wait(c, INT64_MAX, &ready, &done);
    if (st == BORA_OK) {
        char tok[32];
        bora_cache_progress_get(c, &p);
        printf("cache %s: %zu files, %.1f MB, %lld documents, %s tokens in %s (%zu tokenized "
               "now, %zu reused; %.1f s)\n",
               names.what, p.shards, (double)p.bytes / 1e6, (long long)p.documents,
               si((double)ready, tok, sizeof tok), bora_cache_dir(c),
               p.shards - bora_cache_reused(c), bora_cache_reused(c), bora_now_s() - t0);
    } else {
        bora_log(BORA_LOG_ERROR, "%s", bora_error_get());
    }
    fflush(stdout);
    bora_cache_free(c);
    return st == BORA_OK;
}

int bora_cache_build(bora_cfg *cfg, bora_registry *reg, int64_t workers, int rebuild)
{
    trainer t = {
        .cfg = cfg, .reg = reg, .eval_only = 1, .cache_workers = workers, .cache_rebuild = rebuild};
    bora_config *root = bora_cfg_root(cfg);
    int rc = 1;
    if (!tr_configure(&t, root))
        goto out;
    /* An audio dataset's features are the model's shape: its graph says which. */
    const char *type = "text";
    bora_cfg_string(bora_cfg_child(root, "data"), "type", "text", &type);
    if (!strcmp(type, "audio") && tr_build(&t, root) != BORA_OK) {
        bora_log(BORA_LOG_ERROR, "%s", bora_error_get());
        goto out;
    }
    int live = isatty(STDOUT_FILENO) && !getenv("BORA_NO_PROGRESS");
    size_t parts = n_configs(root);
    if (!parts && !cache_one(&t, root, "train_urls", -1, live))
        goto out;
    for (size_t d = 0; d < parts; d++)
        if (!cache_one(&t, root, "train_urls", (long)d, live))
            goto out;
    if (t.has_val_urls && !cache_one(&t, root, "validation_urls", -1, live))
        goto out;
    rc = 0;
out:
    tr_teardown(&t);
    return rc;
}
