/* core/config/schema.c — the sections bora itself reads (trainer, data), their documented keys,
 * and checking a whole configuration: core sections by their schemas, components (model,
 * optimizer, trackers) by the keys their plugins declare. */
#include "schema.h"

#include "../util/log.h"
#include "internal.h"

#include <math.h>
#include <string.h>

static const bora_key checkpointer_keys[] = {
    {"base_path", BORA_KEY_STRING, 0, "checkpoints",
     "where checkpoints go, as {base_path}/{run_id}/step-{N}"},
    {"save_interval", BORA_KEY_DURATION, 0, "15m",
     "how often a temporary checkpoint is written; each replaces the previous one"},
    {"keep", BORA_KEY_LIST, 0, "[]",
     "permanent checkpoints, as a list of {every: N, until: M} (until optional)"},
    {NULL, 0, 0, NULL, NULL},
};

static const bora_key trainer_keys[] = {
    {"num_train_steps", BORA_KEY_INT, 0, "10000", "optimizer steps to train for"},
    {"train_batch_size", BORA_KEY_INT, 0, "512", "sequences per optimizer step (the global batch)"},
    {"per_device_parallelism", BORA_KEY_INT, 0, "-1",
     "sequences per micro-step; -1 runs the whole batch at once, less accumulates gradients"},
    {"seed", BORA_KEY_INT, 0, "0",
     "seed of every random choice: initialisation, data order, sampling"},
    {"num_threads", BORA_KEY_INT, 0, "0", "CPU threads; 0 uses every core"},
    {"backend", BORA_KEY_STRING, 0, "auto",
     "compute backend by name (cpu, cuda), or auto for the best one available"},
    {"id", BORA_KEY_STRING, 0, "\"\"",
     "run id; empty makes a new one, an existing one resumes that run"},
    {"load_checkpoint", BORA_KEY_STRING, 0, "\"\"",
     "a checkpoint directory to start from instead of initialising"},
    {"initialize_from_hf", BORA_KEY_STRING, 0, "\"\"",
     "a Hugging Face folder to start a new run from: its weights, its config.json as model: (a "
     "model: key given must agree) and its tokenizer unless data.tokenizer names one"},
    {"mp", BORA_KEY_STRING, 0, "p=f32,c=f32",
     "mixed precision: p (parameters, gradients, optimizer state: f32), c (matmul operands: "
     "f32 or bf16, products accumulated in f32), r (the residual stream in memory: f32 or bf16, "
     "read back as f32, its gradient f32), e.g. p=f32,c=bf16,r=bf16"},
    {"crash_on_nan", BORA_KEY_BOOL, 0, "true",
     "stop at a non-finite loss, naming the step and keeping the last checkpoint; with false "
     "the run goes on until its next save, which refuses a NaN or an infinity and stops it"},
    {"shard_optimizer", BORA_KEY_BOOL, 0, "false",
     "with several processes (mpirun, srun): each keeps and updates only its share of the "
     "optimizer state (whole parameters, ZeRO-1), then the parameters are gathered; the same "
     "bits as without; one process has nothing to share"},
    {"steps_per_eval", BORA_KEY_INT, 0, "1000",
     "optimizer steps between evaluations on data.validation_urls (and one at the last step)"},
    {"max_eval_batches", BORA_KEY_INT, 0, "-1",
     "batches of train_batch_size sequences per evaluation; -1 for the whole validation set"},
    {"eval_wer_clips", BORA_KEY_INT, 0, "100",
     "a speech model (data.type audio): validation clips transcribed greedily at each "
     "evaluation for eval/wer, the word error rate; -1: all of them; 0: none (the loss alone)"},
    {"tracker", BORA_KEY_COMPONENT, 0, "[{type: sqlite}]",
     "experiment trackers: one {type: NAME, ...} or a list of them; a name alone is short for "
     "{type: NAME} ([sqlite, tensorboard]); a list without sqlite keeps the run out of bora runs"},
    {"checkpointer", BORA_KEY_MAP, 0, "{}", "the checkpoint policy (see trainer.checkpointer)"},
    {NULL, 0, 0, NULL, NULL},
};

static const bora_key data_keys[] = {
    {"train_urls", BORA_KEY_LIST, 0, "[]",
     "training text: .jsonl or .txt files, plain, .gz or .zst; globs and brace ranges "
     "(shard.{1..128}.jsonl.gz) expand, and each must match"},
    {"validation_urls", BORA_KEY_LIST, 0, "[]",
     "validation text, in the same forms: evaluated every trainer.steps_per_eval steps and by "
     "bora eval"},
    {"tokenizer", BORA_KEY_STRING, 0, "\"\"",
     "a tokenizer.json, or a folder holding one (or vocab.json and merges.txt)"},
    {"text_key", BORA_KEY_STRING, 0, "text", "the field of each .jsonl record that holds text"},
    {"txt_documents", BORA_KEY_STRING, 0, "blocks",
     "what a .txt file holds: blocks (documents separated by blank lines) or file (the whole "
     "file is one document)"},
    {"type", BORA_KEY_STRING, 0, "text",
     "text (documents cut into seq_len windows) or audio: train_urls and validation_urls name "
     ".jsonl manifests of {\"audio\": CLIP, \"text\": TEXT} lines, one clip a row, for an "
     "audio model (one that reads input_features, such as whisper); CLIP a path relative to the "
     "manifest, an absolute path or an http(s) URL, in any format libsndfile reads"},
    {"audio_key", BORA_KEY_STRING, 0, "audio",
     "data.type audio: the manifest field naming a line's clip (text_key names its text)"},
    {"language", BORA_KEY_STRING, 0, "\"\"",
     "data.type audio: the clips' language, a Whisper code (en, de) or name (german), put in "
     "the start sequence with data.task; empty: none (an English-only model's "
     "<|startoftranscript|><|notimestamps|>)"},
    {"task", BORA_KEY_STRING, 0, "transcribe",
     "data.type audio: transcribe or translate, in the start sequence after data.language"},
    {"shuffle", BORA_KEY_STRING, 0, "false",
     "false: the seq_len windows in file order; true: all of them permuted, keyed by "
     "trainer.seed (waits for the whole token cache); N: permuted within eras of N windows "
     "(starts as soon as the first era is tokenized)"},
    {"max_bad_fraction", BORA_KEY_FLOAT, 0, "0",
     "bad records (invalid JSON or UTF-8, no text field; audio: also a clip that is unreadable, "
     "empty, longer than the model's window or not finite, or text longer than its decoder) "
     "allowed as a fraction of all; each is reported with its file and line and skipped. 0: "
     "any is an error"},
    {"cache_dir", BORA_KEY_STRING, 0, "\"\"",
     "the token cache's directory; empty: ${XDG_CACHE_HOME:-~/.cache}/bora/tokens/KEY, KEY a "
     "hash of the tokenizer, text_key and the sources' paths, sizes and modification times "
     "(audio: .../bora/audio/KEY, with the start sequence, audio_key and the model's n_mels, "
     "frames and decoder positions). Where it lives changes no bits: a resume ignores it"},
    {"cache_workers", BORA_KEY_INT, 0, "0",
     "threads tokenizing files into the cache, at idle priority (0: one per core, at most 8); "
     "the cache is the same for any number (a resume ignores it)"},
    {"cache_rebuild", BORA_KEY_BOOL, 0, "false",
     "make again what differs instead of refusing it: a cache_dir made for another tokenizer, "
     "text_key or list of sources is emptied and tokenized again; a source whose content "
     "changed, and a corrupt shard, are tokenized again alone; shards whose source's content "
     "is the same are kept (delete the cache_dir to tokenize everything again). A shard of "
     "another tokenizer or an older bora is tokenized again either way. A resume ignores it: "
     "checkpoints compare the data's content"},
    {"validation_windows", BORA_KEY_INT, 0, "0",
     "with no validation_urls: hold out this many seq_len windows from the start of "
     "train_urls (before any shuffling) as the validation set; training reads the rest"},
    {"configs", BORA_KEY_MAP, 0, "{}",
     "datasets to mix, instead of train_urls: {NAME: {train_urls, validation_urls, text_key}}, "
     "each with its own token cache (cache_dir/NAME when cache_dir is set); their "
     "validation_urls together are the validation set"},
    {"train_weights", BORA_KEY_MAP, 0, "{}",
     "how configs mix: {NAME: weight, ...} (normalised; a missing name is 0), or stages "
     "[[STEP, {NAME: weight}], ...] from step 0 on; every block of mixture_block_size rows "
     "holds each dataset's exact share"},
    {"mixture_block_size", BORA_KEY_INT, 0, "2048",
     "rows per mixture block; a stage must start at a step whose first row is a multiple"},
    {NULL, 0, 0, NULL, NULL},
};

/* The keys of one dataset in data.configs. */
static const bora_key source_keys[] = {
    {"train_urls", BORA_KEY_LIST, 0, "[]", "training text, as data.train_urls"},
    {"validation_urls", BORA_KEY_LIST, 0, "[]", "validation text, as data.validation_urls"},
    {"text_key", BORA_KEY_STRING, 0, "null", "the .jsonl field holding text (data.text_key)"},
    {NULL, 0, 0, NULL, NULL},
};

static const bora_key model_keys[] = {
    {"type", BORA_KEY_STRING, 0, NULL, "the model architecture: a model plugin's name"},
    {NULL, 0, 0, NULL, NULL},
};

/* Keys every optimizer has: the loop reads them (the learning-rate schedule and clipping). */
static const bora_key optimizer_keys[] = {
    {"type", BORA_KEY_STRING, 0, NULL, "the optimizer: an optimizer plugin's name"},
    {"learning_rate", BORA_KEY_FLOAT, 0, "6e-4", "peak learning rate (the schedule scales it)"},
    {"lr_schedule", BORA_KEY_STRING, 0, "cosine",
     "after warmup: constant, cosine, linear, inv_sqrt or wsd (warmup-stable-decay)"},
    {"warmup", BORA_KEY_FLOAT, 0, "0.01",
     "warmup from 0 to the peak: a fraction of num_train_steps if below 1, else steps"},
    {"decay", BORA_KEY_FLOAT, 0, "null",
     "steps (or fraction if below 1) of the final decay; earlier steps stay at the peak. "
     "null decays over everything after warmup (wsd: the last 0.2)"},
    {"min_lr_ratio", BORA_KEY_FLOAT, 0, "0.1", "the rate decay ends at, as a fraction of the peak"},
    {"max_grad_norm", BORA_KEY_FLOAT, 0, "1.0",
     "clip the global gradient norm to this (0 or more); 0 turns clipping off"},
    {"groups", BORA_KEY_LIST, 0, "[]",
     "parameter groups, each {match, ndim, no_decay, type, learning_rate, keys of its type}: the "
     "first a parameter matches updates it, the others go to this optimizer (docs/optimizers.md)"},
    {NULL, 0, 0, NULL, NULL},
};

static const bora_section sections[] = {
    {"model", "the model architecture, selected by type (bora config keys model NAME)", model_keys,
     BORA_KIND_MODEL},
    {"optimizer", "the optimizer, selected by type (bora config keys optimizer NAME)",
     optimizer_keys, BORA_KIND_OPTIMIZER},
    {"trainer", "the training loop: steps, batch, seed, backend, trackers, checkpoints",
     trainer_keys, 0},
    {"trainer.checkpointer", "when checkpoints are written and which are kept", checkpointer_keys,
     0},
    {"data", "training and validation text and its tokenizer", data_keys, 0},
    {NULL, NULL, NULL, 0},
};

const bora_section *bora_sections(void)
{
    return sections;
}

const bora_section *bora_section_find(const char *name)
{
    for (const bora_section *s = sections; s->name; s++)
        if (!strcmp(s->name, name))
            return s;
    return NULL;
}

/* ---- checking --------------------------------------------------------------------------- */

/* The keys a component's map may hold: those bora reads from every component of its kind (the
 * optimizer's schedule keys, without `type`), then its plugin's (less any a core key repeats).
 * Allocated with the configuration; the plugin's array when there are none. */
static const bora_key *component_keys(bora_config *node, int kind, const bora_entry *e)
{
    const bora_key *core = NULL;
    for (const bora_section *s = sections; s->name; s++)
        if (s->kind == kind)
            core = s->keys;
    size_t n_core = 0, n_plugin = 0;
    for (const bora_key *k = core; k && k->name; k++)
        n_core += strcmp(k->name, "type") != 0;
    for (const bora_key *k = e->ops->keys; k && k->name; k++)
        n_plugin++;
    if (!n_core)
        return e->ops->keys;
    bora_key *all = cfg_alloc(node->cfg, (n_core + n_plugin + 1) * sizeof *all);
    if (!all)
        return e->ops->keys;
    size_t n = 0;
    for (const bora_key *k = core; k->name; k++)
        if (strcmp(k->name, "type") != 0)
            all[n++] = *k;
    for (const bora_key *k = e->ops->keys; k && k->name; k++) {
        int dup = 0;
        for (size_t i = 0; i < n_core && !dup; i++)
            dup = !strcmp(all[i].name, k->name);
        if (!dup)
            all[n++] = *k;
    }
    return all;
}

bora_status bora_config_select(bora_config *node, int kind, const bora_registry *reg,
                               const bora_entry **out)
{
    bora_cfg *cfg = node->cfg;
    char path[256];
    bora_cfg_path(node, path, sizeof path);
    *out = NULL;
    if (node->kind != BORA_NODE_MAP)
        return bora_cfg_error(cfg, node, "%s: expected a mapping with a type, e.g. {type: NAME}",
                              path);
    const char *type = NULL;
    if (bora_cfg_string(node, "type", NULL, &type) != BORA_OK)
        return BORA_ERR_CONFIG;
    bora_config *type_node = bora_cfg_child(node, "type");
    if (type && !*type) {
        /* `type: ""` or --model.type= : the fault is that value, wherever it was written. */
        bora_cfg_claim(node, path, NULL);
        cfg_mark_read(node);
        bora_registry_find(reg, kind, "");
        const char *avail = strstr(bora_error_get(), "available: ");
        return bora_cfg_error(cfg, type_node, "%s.type: is empty; name the %s to use%s%s%s", path,
                              bora_kind_name(kind), avail ? " (" : "", avail ? avail : "",
                              avail ? ")" : "");
    }
    if (!type) {
        bora_cfg_claim(node, path, NULL);
        cfg_mark_read(node); /* its keys cannot be judged without the component */
        return bora_cfg_error(cfg, bora_cfg_key_node(node),
                              "missing required key 'type' in %s (which %s to use)", path,
                              bora_kind_name(kind));
    }
    const bora_entry *e = bora_registry_find(reg, kind, type);
    if (!e) {
        bora_cfg_claim(node, path, NULL);
        cfg_mark_read(node);
        return bora_cfg_error(cfg, bora_cfg_child(node, "type"), "%s.type: %s", path,
                              bora_error_get());
    }
    char label[320];
    snprintf(label, sizeof label, "%s (%s)", path, type);
    bora_cfg_claim(node, label, component_keys(node, kind, e));
    *out = e;
    return BORA_OK;
}

/* A map selected by `type:` among the components of a kind: check its keys. */
static bora_status check_component(bora_config *node, int kind, const bora_registry *reg, int fill)
{
    const bora_entry *e;
    bora_status st = bora_config_select(node, kind, reg, &e);
    if (st != BORA_OK)
        return st;
    st = bora_cfg_check_declared(node, node->schema);
    if (fill && bora_cfg_fill_defaults(node, node->schema) != BORA_OK)
        st = BORA_ERR_CONFIG;
    return st;
}

/* ---- optimizer groups (docs/optimizers.md) ---------------------------------------------- */

/* The optimizer keys a group may not set: the schedule and clipping are the run's. */
static const char *const run_wide_keys[] = {"lr_schedule",   "warmup", "decay", "min_lr_ratio",
                                            "max_grad_norm", "groups", NULL};

/* One key of a group, against the selectors, learning_rate and its optimizer's keys. */
static bora_status check_group_key(bora_config *item, size_t at, const char *path,
                                   const bora_entry *e)
{
    bora_cfg *cfg = item->cfg;
    const char *key = item->keys[at];
    bora_config *v = item->values[at];
    if (!strcmp(key, "type"))
        return BORA_OK;
    if (!strcmp(key, "match")) {
        int ok = v->kind == BORA_NODE_SCALAR && v->text && *v->text;
        for (size_t i = 0; v->kind == BORA_NODE_LIST && i < v->n; i++)
            ok = (i == 0 || ok) && v->values[i]->kind == BORA_NODE_SCALAR && v->values[i]->text &&
                 *v->values[i]->text;
        if (!ok)
            return bora_cfg_error(cfg, v,
                                  "%s.match: expected a glob or a list of globs on parameter "
                                  "names, such as [\"model.embed_tokens.*\", \"lm_head.*\"]",
                                  path);
        return BORA_OK;
    }
    if (!strcmp(key, "ndim")) {
        int64_t n = 0;
        if (bora_cfg_int(item, "ndim", 0, &n) != BORA_OK)
            return BORA_ERR_CONFIG;
        return n >= 0 ? BORA_OK
                      : bora_cfg_error(cfg, v, "%s.ndim: %lld is not a number of axes (0 or more)",
                                       path, (long long)n);
    }
    if (!strcmp(key, "no_decay")) {
        int b;
        return bora_cfg_bool(item, "no_decay", 0, &b);
    }
    if (!strcmp(key, "learning_rate")) {
        double lr = 0;
        if (bora_cfg_float(item, "learning_rate", 0, &lr) != BORA_OK)
            return BORA_ERR_CONFIG;
        return lr >= 0 && isfinite(lr)
                   ? BORA_OK
                   : bora_cfg_error(cfg, v, "%s.learning_rate: %g is not a rate (0 or more)", path,
                                    lr);
    }
    for (const char *const *k = run_wide_keys; *k; k++)
        if (!strcmp(key, *k))
            return bora_cfg_error(cfg, item->key_nodes[at],
                                  "%s.%s: the learning-rate schedule and clipping are the run's; "
                                  "set %s once, under optimizer",
                                  path, key, key);
    for (const bora_key *k = e->ops->keys; k && k->name; k++)
        if (!strcmp(k->name, key)) {
            bora_key one[2] = {*k, {NULL, 0, 0, NULL, NULL}};
            return bora_cfg_check_declared(item, one);
        }
    char known[512];
    size_t w = (size_t)snprintf(known, sizeof known, "match, ndim, no_decay, type, learning_rate");
    for (const bora_key *k = e->ops->keys; k && k->name && w < sizeof known; k++)
        w += (size_t)snprintf(known + w, sizeof known - w, ", %s", k->name);
    return bora_cfg_error(cfg, item->key_nodes[at],
                          "%s.%s: unknown key; a group of optimizer %s takes %s", path, key,
                          e->ops->name, known);
}

/* optimizer.groups: each a mapping with at least one selector, a known type (the base's when
 * not given) and keys its optimizer declares. */
static bora_status check_groups(bora_config *opt, const bora_registry *reg, const bora_entry *base)
{
    bora_config *groups = bora_cfg_child(opt, "groups");
    if (!groups || groups->kind == BORA_NODE_NULL)
        return BORA_OK;
    bora_cfg *cfg = opt->cfg;
    if (groups->kind != BORA_NODE_LIST)
        return bora_cfg_error(cfg, groups,
                              "optimizer.groups: expected a list of groups such as "
                              "[{ndim: 1, type: adamw}]");
    bora_status result = BORA_OK;
    for (size_t i = 0; i < groups->n; i++) {
        bora_config *item = groups->values[i];
        char path[64];
        snprintf(path, sizeof path, "optimizer.groups[%zu]", i);
        if (item->kind != BORA_NODE_MAP) {
            result = bora_cfg_error(cfg, item,
                                    "%s: expected a mapping such as {ndim: 1, type: adamw}", path);
            continue;
        }
        const char *type = base->ops->name;
        const bora_entry *e = base;
        if (bora_cfg_string(item, "type", base->ops->name, &type) != BORA_OK)
            result = BORA_ERR_CONFIG;
        else if (!(e = bora_registry_find(reg, BORA_KIND_OPTIMIZER, type))) {
            result = bora_cfg_error(cfg, bora_cfg_child(item, "type"), "%s.type: %s", path,
                                    bora_error_get());
            continue;
        }
        int selectors = 0;
        for (size_t k = 0; k < item->n; k++) {
            selectors += !strcmp(item->keys[k], "match") || !strcmp(item->keys[k], "ndim") ||
                         !strcmp(item->keys[k], "no_decay");
            if (check_group_key(item, k, path, e) != BORA_OK)
                result = BORA_ERR_CONFIG;
        }
        if (!selectors)
            result = bora_cfg_error(cfg, item,
                                    "%s: no selector; say which parameters the group takes with "
                                    "match (globs on names), ndim or no_decay",
                                    path);
    }
    return result;
}

/* A name alone is short for {type: NAME} (`tracker: [sqlite, jsonl]`): the scalar becomes that
 * mapping in place, its type at the name's position, so messages point at what was written. */
static bora_status name_to_component(bora_config *node)
{
    if (node->kind != BORA_NODE_SCALAR)
        return BORA_OK;
    bora_config *kn = cfg_node(node->cfg, BORA_NODE_SCALAR, node->origin, node->line, node->col);
    bora_config *vn = cfg_node(node->cfg, BORA_NODE_SCALAR, node->origin, node->line, node->col);
    if (!kn || !vn)
        return BORA_ERR_NOMEM;
    kn->text = "type";
    kn->text_len = 4;
    vn->text = node->text;
    vn->text_len = node->text_len;
    vn->quoted = node->quoted;
    node->kind = BORA_NODE_MAP;
    node->text = NULL;
    node->text_len = 0;
    node->quoted = 0;
    return cfg_map_put(node, "type", kn, vn) ? BORA_ERR_NOMEM : BORA_OK;
}

/* One component or a list of them (trainer.tracker), each a mapping or a name. */
static bora_status check_components(bora_config *node, int kind, const bora_registry *reg, int fill)
{
    if (node->kind == BORA_NODE_NULL)
        return BORA_OK;
    if (node->kind != BORA_NODE_LIST) {
        if (name_to_component(node) != BORA_OK)
            return BORA_ERR_NOMEM;
        return check_component(node, kind, reg, fill);
    }
    bora_status result = BORA_OK;
    for (size_t i = 0; i < node->n; i++) {
        bora_config *item = bora_cfg_at(node, i);
        if (name_to_component(item) != BORA_OK)
            return BORA_ERR_NOMEM;
        if (check_component(item, kind, reg, fill) != BORA_OK)
            result = BORA_ERR_CONFIG;
    }
    return result;
}

/* Put an empty map, marked read, at map[key] (replacing a null there); NULL when out of memory. */
static bora_config *empty_map_at(bora_config *map, const char *key)
{
    bora_config *m = cfg_node(map->cfg, BORA_NODE_MAP, "default", 0, 0);
    bora_config *kn = cfg_node(map->cfg, BORA_NODE_SCALAR, "default", 0, 0);
    if (!m || !kn)
        return NULL;
    kn->text = key;
    kn->text_len = strlen(key);
    kn->read = m->read = 1;
    long at = cfg_map_find(map, key);
    if (at >= 0) {
        map->values[at] = m;
        m->parent = map;
        m->key = map->keys[at];
        return m;
    }
    return cfg_map_put(map, key, kn, m) ? NULL : m;
}

static bora_status check_core_section(bora_config *root, const bora_section *s,
                                      const bora_registry *reg, int fill)
{
    bora_status result = BORA_OK;
    bora_config *node = bora_cfg_child(root, s->name);
    if (!node && !fill)
        return BORA_OK;
    if (!node || node->kind == BORA_NODE_NULL) {
        /* An absent section still shows its defaults. */
        if (!(node = empty_map_at(root, s->name)))
            return BORA_ERR_NOMEM;
    }
    if (node->kind != BORA_NODE_MAP)
        return bora_cfg_error(root->cfg, node, "%s: expected a mapping of keys, got a %s", s->name,
                              node->kind == BORA_NODE_LIST ? "list" : "single value");
    bora_cfg_claim(node, s->name, s->keys);
    /* Keys with schemas of their own are claimed first, so the generic pass leaves them be. */
    for (const bora_key *k = s->keys; k->name; k++) {
        char sub[128];
        snprintf(sub, sizeof sub, "%s.%s", s->name, k->name);
        const bora_section *ss = bora_section_find(sub);
        bora_config *v = bora_cfg_child(node, k->name);
        if (ss) {
            if ((!v || v->kind == BORA_NODE_NULL) && fill && !(v = empty_map_at(node, k->name)))
                return BORA_ERR_NOMEM;
            if (v && v->kind == BORA_NODE_MAP) {
                bora_cfg_claim(v, sub, ss->keys);
                if (bora_cfg_check_declared(v, ss->keys) != BORA_OK)
                    result = BORA_ERR_CONFIG;
                if (fill && bora_cfg_fill_defaults(v, ss->keys) != BORA_OK)
                    result = BORA_ERR_CONFIG;
            } else if (v && v->kind != BORA_NODE_NULL) {
                result = bora_cfg_error(root->cfg, v, "%s: expected a mapping of keys", sub);
            }
        } else if (k->type == BORA_KEY_COMPONENT && v) {
            if (check_components(v, BORA_KIND_TRACKER, reg, fill) != BORA_OK)
                result = BORA_ERR_CONFIG;
        }
    }
    for (const bora_key *k = s->keys; k->name; k++) {
        if (k->type == BORA_KEY_MAP || k->type == BORA_KEY_COMPONENT)
            continue; /* handled above */
        bora_key one[2] = {*k, {NULL, 0, 0, NULL, NULL}};
        if (bora_cfg_check_declared(node, one) != BORA_OK)
            result = BORA_ERR_CONFIG;
    }
    if (fill && bora_cfg_fill_defaults(node, s->keys) != BORA_OK)
        result = BORA_ERR_CONFIG;
    /* Defaults that are components (the tracker list) are checked like given ones. */
    if (fill) {
        for (const bora_key *k = s->keys; k->name; k++) {
            bora_config *v = bora_cfg_child(node, k->name);
            if (k->type == BORA_KEY_COMPONENT && v && !strcmp(v->origin, "default") &&
                check_components(v, BORA_KIND_TRACKER, reg, fill) != BORA_OK)
                result = BORA_ERR_CONFIG;
        }
    }
    /* data.configs: each dataset's keys are checked like a section's; train_weights belongs to
     * the loader, which names what is wrong in it. */
    bora_config *configs = !strcmp(s->name, "data") ? bora_cfg_child(node, "configs") : NULL;
    if (configs && configs->kind == BORA_NODE_MAP) {
        configs->read = 1;
        for (size_t i = 0; i < configs->n; i++) {
            bora_config *one = configs->values[i];
            char label[256];
            snprintf(label, sizeof label, "data.configs.%s", configs->keys[i]);
            configs->key_nodes[i]->read = 1;
            if (one->kind != BORA_NODE_MAP) {
                result = bora_cfg_error(
                    root->cfg, one, "%s: expected a mapping such as {train_urls: [...]}", label);
                continue;
            }
            bora_cfg_claim(one, label, source_keys);
            if (bora_cfg_check_declared(one, source_keys) != BORA_OK)
                result = BORA_ERR_CONFIG;
        }
    } else if (configs && configs->kind != BORA_NODE_NULL)
        result = bora_cfg_error(root->cfg, configs,
                                "data.configs: expected a mapping of dataset names, such as "
                                "{web: {train_urls: [...]}, code: {train_urls: [...]}}");
    bora_config *weights = !strcmp(s->name, "data") ? bora_cfg_child(node, "train_weights") : NULL;
    if (weights)
        cfg_mark_read(weights);
    /* trainer.backend names a backend: one that is missing or failed to load is an error now. */
    if (!strcmp(s->name, "trainer")) {
        const char *backend = NULL;
        if (bora_cfg_string(node, "backend", "auto", &backend) == BORA_OK && backend &&
            strcmp(backend, "auto") != 0 && !bora_registry_find(reg, BORA_KIND_BACKEND, backend))
            result = bora_cfg_error(root->cfg, bora_cfg_child(node, "backend"),
                                    "trainer.backend: %s", bora_error_get());
    }
    return result;
}

bora_status bora_config_check(bora_cfg *cfg, const bora_registry *reg, int fill)
{
    bora_config *root = bora_cfg_root(cfg);
    bora_status result = BORA_OK;
    for (const bora_section *s = sections; s->name; s++) {
        if (strchr(s->name, '.'))
            continue; /* nested sections are checked inside their parents */
        if (s->kind) {
            bora_config *node = bora_cfg_child(root, s->name);
            if (node && check_component(node, s->kind, reg, fill) != BORA_OK)
                result = BORA_ERR_CONFIG;
            const char *type = NULL;
            const bora_entry *e = NULL;
            if (node && s->kind == BORA_KIND_OPTIMIZER && node->kind == BORA_NODE_MAP &&
                bora_cfg_string(node, "type", NULL, &type) == BORA_OK && type &&
                (e = bora_registry_find(reg, BORA_KIND_OPTIMIZER, type)) &&
                check_groups(node, reg, e) != BORA_OK)
                result = BORA_ERR_CONFIG;
        } else if (check_core_section(root, s, reg, fill) != BORA_OK) {
            result = BORA_ERR_CONFIG;
        }
    }
    if (bora_cfg_check_unread(cfg) != BORA_OK)
        result = BORA_ERR_CONFIG;
    return result;
}
