/* core/train/settings.c — the configuration keys a run reads (see internal.h). */
#include "internal.h"

#include "../ckpt/checkpoint.h"
#include "../config/schema.h"
#include "../data/cache.h"
#include "../data/loader.h"
#include "../graph/graph.h"
#include "../hf/import.h"
#include "../util/log.h"
#include "../util/str.h"
#include "apply.h"
#include "bora_version.h"
#include "eval.h"
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

/* ---- settings ------------------------------------------------------------------------------ */

bora_status bora_model_vocab(bora_cfg *cfg, const bora_registry *reg, bora_tokenizer **tok,
                             int *source, int64_t *vocab_size)
{
    bora_config *root = bora_cfg_root(cfg);
    bora_config *mnode = bora_cfg_child(root, "model"), *data = bora_cfg_child(root, "data");
    const char *type = NULL, *tok_path = NULL;
    *tok = NULL;
    *source = BORA_VOCAB_NONE;
    *vocab_size = 0;
    if (!mnode || mnode->kind != BORA_NODE_MAP)
        return BORA_OK; /* the check reports it */
    if (bora_cfg_string(mnode, "type", NULL, &type) != BORA_OK || !type)
        return BORA_OK;
    const bora_entry *e = bora_registry_find(reg, BORA_KIND_MODEL, type);
    const bora_key *key = NULL;
    for (const bora_key *k = e ? e->ops->keys : NULL; k && k->name; k++)
        if (!strcmp(k->name, "vocab_size"))
            key = k;
    bora_config *given = bora_cfg_child(mnode, "vocab_size");
    int has_given = given && given->kind != BORA_NODE_NULL;
    /* The size given, read without a diagnostic: the configuration check reports a bad one. */
    int readable = has_given && given->kind == BORA_NODE_SCALAR && given->text &&
                   bora_parse_int(given->text, vocab_size) == 0;
    if (!readable)
        *vocab_size = 0;
    if (key) { /* what the model reads when nothing else sets it */
        *source = has_given ? BORA_VOCAB_GIVEN : BORA_VOCAB_DEFAULT;
        if (!has_given && key->default_value)
            bora_parse_int(key->default_value, vocab_size);
    }
    if (!data || data->kind != BORA_NODE_MAP ||
        bora_cfg_string(data, "tokenizer", "", &tok_path) != BORA_OK || !tok_path || !*tok_path)
        return BORA_OK;
    if (bora_tokenizer_load(tok_path, tok) != BORA_OK)
        return bora_error_set(BORA_ERR_INVALID, "data.tokenizer: %s", bora_error_get());
    size_t vocab = bora_tokenizer_vocab_size(*tok);
    if (!key)
        return BORA_OK;
    if (!has_given) {
        char v[32];
        snprintf(v, sizeof v, "%zu", vocab);
        *source = BORA_VOCAB_TOKENIZER;
        *vocab_size = (int64_t)vocab;
        return bora_cfg_override(cfg, "model.vocab_size", v);
    }
    if (readable && *vocab_size < (int64_t)vocab)
        bora_cfg_error(cfg, given,
                       "model.vocab_size: %lld is smaller than the tokenizer's vocabulary (%zu)",
                       (long long)*vocab_size, vocab);
    return BORA_OK;
}

static bora_status read_keep(trainer *t, bora_config *cp)
{
    bora_config *keep = bora_cfg_child(cp, "keep");
    if (!keep || keep->kind == BORA_NODE_NULL)
        return BORA_OK;
    if (keep->kind != BORA_NODE_LIST)
        return bora_cfg_error(t->cfg, keep,
                              "trainer.checkpointer.keep: expected a list of {every: N, until: M}");
    t->keep = calloc(keep->n ? keep->n : 1, sizeof *t->keep);
    if (!t->keep)
        return BORA_ERR_NOMEM;
    for (size_t i = 0; i < keep->n; i++) {
        bora_config *r = bora_cfg_at(keep, i);
        if (r->kind != BORA_NODE_MAP) {
            bora_cfg_error(t->cfg, r, "trainer.checkpointer.keep: expected {every: N, until: M}");
            continue;
        }
        int64_t every = 0, until = -1;
        bora_cfg_int(r, "every", 0, &every);
        bora_cfg_int(r, "until", -1, &until);
        for (size_t k = 0; k < r->n; k++)
            if (strcmp(r->keys[k], "every") && strcmp(r->keys[k], "until"))
                bora_cfg_error(t->cfg, r->values[k],
                               "trainer.checkpointer.keep: unknown key '%s' (every, until)",
                               r->keys[k]);
        if (every < 1)
            bora_cfg_error(t->cfg, r, "trainer.checkpointer.keep: 'every' must be 1 or more");
        t->keep[t->n_keep++] = (keep_rule){every, until};
    }
    return BORA_OK;
}

int tr_permanent(const trainer *t, int64_t step)
{
    if (step == t->steps)
        return 1;
    for (size_t i = 0; i < t->n_keep; i++)
        if (step % t->keep[i].every == 0 && (t->keep[i].until < 0 || step <= t->keep[i].until))
            return 1;
    return 0;
}

/* Whether a urls value names anything (a non-empty list, or a string). */
static int has_urls(const bora_config *u)
{
    return u && ((u->kind == BORA_NODE_LIST && u->n > 0) ||
                 (u->kind == BORA_NODE_SCALAR && u->text && *u->text));
}

int bora_mp_parse(const char *mp, bora_mp *out, char *err, size_t cap)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", mp);
    int seen[3] = {0, 0, 0};
    const char *keys = "pcr";
    out->compute = out->residual = BORA_DTYPE_F32;
    for (char *save = NULL, *part = strtok_r(buf, ",", &save); part;
         part = strtok_r(NULL, ",", &save)) {
        while (*part == ' ')
            part++;
        const char *k = part[0] && part[1] == '=' ? strchr(keys, part[0]) : NULL;
        if (!k) {
            snprintf(err, cap,
                     "trainer.mp: '%s' is not key=dtype with key p (parameters), c (compute) or "
                     "r (residual stream), as in p=f32,c=bf16",
                     part);
            return -1;
        }
        int ki = (int)(k - keys);
        const char *v = part + 2;
        int bf16 = !strcmp(v, "bf16"), f32 = !strcmp(v, "f32");
        if (seen[ki]++)
            snprintf(err, cap, "trainer.mp: '%c' is given twice in '%s'", keys[ki], mp);
        else if (!bf16 && !f32)
            snprintf(err, cap, "trainer.mp: %c=%s: the dtype is f32 or bf16", keys[ki], v);
        else if (ki == 0 && !f32)
            snprintf(err, cap,
                     "trainer.mp: p=%s: parameters, their gradients and the optimizer's state are "
                     "kept in f32 (p=f32)",
                     v);
        else {
            int dtype = bf16 ? BORA_DTYPE_BF16 : BORA_DTYPE_F32;
            if (ki == 1)
                out->compute = dtype;
            else if (ki == 2)
                out->residual = dtype;
            continue;
        }
        return -1;
    }
    return 0;
}

static bora_status read_settings(trainer *t, bora_config *root)
{
    bora_cfg *cfg = t->cfg;
    bora_config *tr = bora_cfg_child(root, "trainer"), *cp = bora_cfg_child(tr, "checkpointer");
    bora_config *op = bora_cfg_child(root, "optimizer");
    bora_cfg_int(tr, "num_train_steps", 10000, &t->steps);
    bora_cfg_int(tr, "train_batch_size", 512, &t->batch);
    bora_cfg_int(tr, "per_device_parallelism", -1, &t->micro);
    bora_cfg_int(tr, "seed", 0, &t->seed);
    bora_cfg_bool(tr, "crash_on_nan", 1, &t->crash_on_nan);
    bora_cfg_bool(tr, "shard_optimizer", 0, &t->shard);
    bora_cfg_int(tr, "steps_per_eval", 1000, &t->steps_per_eval);
    bora_cfg_int(tr, "max_eval_batches", -1, &t->max_eval_batches);
    int64_t wer_clips = 100;
    bora_cfg_int(tr, "eval_wer_clips", 100, &wer_clips);
    if (wer_clips < -1)
        bora_cfg_error(cfg, bora_cfg_child(tr, "eval_wer_clips"),
                       "trainer.eval_wer_clips: %lld is not a number of clips (-1: all, 0: none)",
                       (long long)wer_clips);
    if (!t->eval_only) /* bora eval takes --max-clips instead */
        t->wer_clips = wer_clips;
    /* a validation set: data.validation_urls, a mixture's datasets' ones, or windows held out
     * of train_urls */
    bora_config *data = bora_cfg_child(root, "data"), *cs = bora_cfg_child(data, "configs");
    t->has_val_urls = has_urls(bora_cfg_child(data, "validation_urls"));
    for (size_t i = 0; cs && cs->kind == BORA_NODE_MAP && i < cs->n; i++)
        t->has_val_urls |= cs->values[i]->kind == BORA_NODE_MAP &&
                           has_urls(bora_cfg_child(cs->values[i], "validation_urls"));
    bora_cfg_int(data, "validation_windows", 0, &t->held_out);
    if (t->has_val_urls || t->held_out < 0)
        t->held_out = 0;
    t->has_val = t->has_val_urls || t->held_out > 0;
    if (t->steps_per_eval < 1)
        bora_cfg_error(cfg, bora_cfg_child(tr, "steps_per_eval"),
                       "trainer.steps_per_eval: must be 1 or more");
    bora_cfg_string(tr, "id", "", &t->run_id);
    bora_cfg_string(tr, "load_checkpoint", "", &t->load_checkpoint);
    const char *mp = "p=f32,c=f32";
    bora_cfg_string(tr, "mp", "p=f32,c=f32", &mp);
    char mp_err[256];
    if (bora_mp_parse(mp, &t->mp, mp_err, sizeof mp_err))
        bora_cfg_error(cfg, bora_cfg_child(tr, "mp"), "%s", mp_err);
    bora_cfg_string(cp, "base_path", "checkpoints", &t->base_path);
    bora_cfg_duration(cp, "save_interval", 900, &t->save_interval);
    read_keep(t, cp);
    if (t->steps < 1)
        bora_cfg_error(cfg, bora_cfg_child(tr, "num_train_steps"),
                       "trainer.num_train_steps: must be 1 or more");
    if (t->batch < 1)
        bora_cfg_error(cfg, bora_cfg_child(tr, "train_batch_size"),
                       "trainer.train_batch_size: must be 1 or more");
    if (t->micro == -1 || t->micro > t->batch)
        t->micro = t->batch;
    if (t->micro < 1 || t->batch % t->micro)
        bora_cfg_error(cfg, bora_cfg_child(tr, "per_device_parallelism"),
                       "trainer.per_device_parallelism: %lld does not divide train_batch_size "
                       "(%lld)",
                       (long long)t->micro, (long long)t->batch);
    int64_t eval_seqs;
    if (t->batch >= 1 && t->max_eval_batches > 0 &&
        __builtin_mul_overflow(t->max_eval_batches, t->batch, &eval_seqs))
        bora_cfg_error(cfg, bora_cfg_child(tr, "max_eval_batches"),
                       "trainer.max_eval_batches: %lld batches of %lld sequences is past any "
                       "count; -1 evaluates the whole validation set",
                       (long long)t->max_eval_batches, (long long)t->batch);
    double lr, warmup, decay = 0, min_ratio;
    const char *schedule;
    bora_cfg_float(op, "learning_rate", 6e-4, &lr);
    bora_cfg_string(op, "lr_schedule", "cosine", &schedule);
    bora_cfg_float(op, "warmup", 0.01, &warmup);
    bora_config *dn = bora_cfg_child(op, "decay");
    int decay_given = dn && dn->kind != BORA_NODE_NULL;
    bora_cfg_float(op, "decay", 0, &decay);
    bora_cfg_float(op, "min_lr_ratio", 0.1, &min_ratio);
    if (bora_cfg_float(op, "max_grad_norm", 1.0, &t->max_grad_norm) == BORA_OK &&
        !(t->max_grad_norm >= 0))
        bora_cfg_error(cfg, bora_cfg_child(op, "max_grad_norm"),
                       "optimizer.max_grad_norm: %g is not allowed; clipping takes a norm above 0, "
                       "or 0 to turn it off",
                       t->max_grad_norm);
    if (bora_cfg_error_count(cfg))
        return BORA_ERR_CONFIG;
    if (bora_schedule_init(&t->sched, schedule, lr, warmup, decay, decay_given, min_ratio,
                           t->steps) != BORA_OK)
        return bora_cfg_error(cfg, op, "%s", bora_error_get());
    if (!*t->run_id) {
        /* A new id: the time it started and the process, e.g. 20261122-181530-4f2a. */
        time_t now = time(NULL);
        struct tm tm;
        gmtime_r(&now, &tm);
        char stamp[32];
        strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
        snprintf(t->id_buf, sizeof t->id_buf, "%s-%04x", stamp,
                 (unsigned)((uint32_t)getpid() * 2654435761u >> 16) & 0xffff);
        t->run_id = t->id_buf;
    } else if (strchr(t->run_id, '/') || !strcmp(t->run_id, ".") || !strcmp(t->run_id, "..")) {
        return bora_cfg_error(cfg, bora_cfg_child(tr, "id"),
                              "trainer.id: '%s' is not a valid run id (no '/', not . or ..)",
                              t->run_id);
    }
    if (snprintf(t->run_dir, sizeof t->run_dir, "%s/%s", t->base_path, t->run_id) >=
        (int)sizeof t->run_dir)
        return bora_cfg_error(cfg, cp, "trainer.checkpointer.base_path: too long");
    return BORA_OK;
}

/* Check the configuration and read the settings; 0 when something was reported. */
int tr_configure(trainer *t, bora_config *root)
{
    bora_cfg *cfg = t->cfg;
    int vocab_source;
    int64_t vocab;
    /* A Hugging Face folder supplies the model section (and the tokenizer) before anything
     * reads them: bora eval --hf, or a new run's trainer.initialize_from_hf. */
    if (!t->hf_dir) {
        const char *hf = "";
        bora_cfg_string(bora_cfg_child(root, "trainer"), "initialize_from_hf", "", &hf);
        t->hf_dir = *hf ? hf : NULL;
    }
    if (t->hf_dir && bora_hf_apply_config(cfg, t->reg, t->hf_dir) != BORA_OK) {
        bora_cfg_print_errors(cfg, stderr);
        return 0;
    }
    if (bora_model_vocab(cfg, t->reg, &t->tok, &vocab_source, &vocab) != BORA_OK) {
        bora_log(BORA_LOG_ERROR, "%s", bora_error_get());
        return 0;
    }
    bora_config_check(cfg, t->reg, 1);
    bora_config *mnode = bora_cfg_child(root, "model"), *onode = bora_cfg_child(root, "optimizer");
    if (!bora_cfg_error_count(cfg) && (!mnode || mnode->kind == BORA_NODE_NULL))
        bora_cfg_error(cfg, NULL, "the configuration has no model section (model: {type: ...})");
    if (!bora_cfg_error_count(cfg) && !t->eval_only && (!onode || onode->kind == BORA_NODE_NULL))
        bora_cfg_error(cfg, NULL,
                       "the configuration has no optimizer section (optimizer: {type: adamw})");
    if (!bora_cfg_error_count(cfg) &&
        (bora_config_select(mnode, BORA_KIND_MODEL, t->reg, &t->model_entry) != BORA_OK ||
         (!t->eval_only &&
          bora_config_select(onode, BORA_KIND_OPTIMIZER, t->reg, &t->opt_entry) != BORA_OK)))
        bora_cfg_error(cfg, NULL, "%s", bora_error_get());
    if (!bora_cfg_error_count(cfg))
        read_settings(t, root);
    if (!bora_cfg_error_count(cfg) && t->hf_dir && !t->eval_only && *t->load_checkpoint)
        bora_cfg_error(cfg, bora_cfg_child(bora_cfg_child(root, "trainer"), "initialize_from_hf"),
                       "trainer.initialize_from_hf: a run starts from one set of weights; give "
                       "it or trainer.load_checkpoint, not both");
    if (bora_cfg_error_count(cfg)) {
        bora_cfg_print_errors(cfg, stderr);
        return 0;
    }
    return 1;
}

/* ---- sizes ---------------------------------------------------------------------------------- */

/* The keys that set a model's and a run's sizes (plugins/models/gpt2/README.md,
 * plugins/models/llama/README.md). */
static const char *const size_keys[][2] = {
    {"model", "vocab_size"},
    {"model", "hidden_dim"},
    {"model", "seq_len"},
    {"model", "num_layers"},
    {"model", "num_heads"},
    {"model", "mlp_scale"},
    {"model", "hidden_size"}, /* the Llama family's (Hugging Face's) names */
    {"model", "intermediate_size"},
    {"model", "num_hidden_layers"},
    {"model", "num_attention_heads"},
    {"model", "head_dim"},
    {"trainer", "train_batch_size"},
    {"trainer", "per_device_parallelism"},
};

void bora_size_keys(bora_config *root, const struct g_graph *g, char *buf, size_t cap)
{
    buf[0] = 0;
    if (!g || !g->too_large)
        return;
    /* The culprits: the tensor's largest sizes, as many as pass 2^62 bytes on their own. */
    int64_t big[BORA_MAX_DIMS];
    int nbig = 0;
    double bytes = g->too_large_elem;
    int used[BORA_MAX_DIMS] = {0};
    while (bytes <= 0x1p62 && nbig < g->too_large_ndim) {
        int at = -1;
        for (int i = 0; i < g->too_large_ndim; i++)
            if (!used[i] && (at < 0 || g->too_large_dims[i] > g->too_large_dims[at]))
                at = i;
        used[at] = 1;
        big[nbig++] = g->too_large_dims[at];
        bytes *= (double)g->too_large_dims[at];
    }
    /* the keys set to one of them; else the largest size key */
    size_t w = 0, n = 0, largest = 0;
    int64_t largest_v = 0;
    for (size_t k = 0; k < sizeof size_keys / sizeof size_keys[0]; k++) {
        int64_t v = 0;
        bora_config *sec = bora_cfg_child(root, size_keys[k][0]);
        if (!bora_cfg_child(sec, size_keys[k][1]) ||
            bora_cfg_int(sec, size_keys[k][1], 0, &v) != BORA_OK || v <= 1)
            continue;
        if (v > largest_v)
            largest_v = v, largest = k;
        int hit = 0;
        for (int i = 0; i < nbig; i++)
            hit |= big[i] == v;
        if (hit && w < cap)
            w += (size_t)snprintf(buf + w, cap - w, "%s%s.%s (%lld)", n++ ? ", " : "",
                                  size_keys[k][0], size_keys[k][1], (long long)v);
    }
    if (!n && largest_v > 1 && w < cap)
        w += (size_t)snprintf(buf + w, cap - w, "%s.%s (%lld)", size_keys[largest][0],
                              size_keys[largest][1], (long long)largest_v);
    if (w && w < cap)
        snprintf(buf + w, cap - w, ": make %s smaller", n > 1 ? "them" : "it");
}

/* The key's value, or the default the model declares for it; 0 when it has no such key. */
static int64_t model_int(bora_config *m, const bora_key *keys, const char *name)
{
    int64_t v = 0;
    for (const bora_key *k = keys; k && k->name; k++)
        if (!strcmp(k->name, name) && k->default_value)
            bora_parse_int(k->default_value, &v);
    bora_cfg_int(m, name, v, &v);
    return v;
}

static int has_key(const bora_key *keys, const char *name)
{
    for (const bora_key *k = keys; k && k->name; k++)
        if (!strcmp(k->name, name))
            return 1;
    return 0;
}

void bora_model_shape(bora_config *root, const bora_key *keys, int64_t *width, int64_t *layers,
                      const char **width_key, const char **layers_key)
{
    bora_config *m = bora_cfg_child(root, "model");
    int hf = has_key(keys, "hidden_size") || bora_cfg_child(m, "hidden_size");
    *width_key = hf ? "hidden_size" : "hidden_dim";
    *layers_key = has_key(keys, "num_hidden_layers") || bora_cfg_child(m, "num_hidden_layers")
                      ? "num_hidden_layers"
                      : "num_layers";
    if (has_key(keys, "d_model") && has_key(keys, "decoder_layers")) /* Whisper's decoder */
        *width_key = "d_model", *layers_key = "decoder_layers";
    *width = model_int(m, keys, *width_key);
    *layers = model_int(m, keys, *layers_key);
}

void bora_model_experts(bora_config *root, const bora_key *keys, int64_t *experts,
                        int64_t *per_token)
{
    bora_config *m = bora_cfg_child(root, "model");
    *experts = model_int(m, keys, "num_local_experts");
    *per_token = model_int(m, keys, "num_experts_per_tok");
}
