/* core/train/trainer.c — the training loop (see trainer.h). */
#include "trainer.h"

#include "../ckpt/checkpoint.h"
#include "../config/schema.h"
#include "../data/cache.h"
#include "../data/loader.h"
#include "../graph/graph.h"
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

typedef struct keep_rule {
    int64_t every, until; /* until < 0: forever */
} keep_rule;

typedef struct trainer {
    bora_cfg *cfg;
    bora_registry *reg;
    /* settings */
    int64_t steps, batch, micro, seed;
    int crash_on_nan;
    bora_mp mp; /* trainer.mp: the compute and residual stream dtypes */
    const char *run_id, *base_path, *load_checkpoint;
    char run_dir[4096], id_buf[64];
    double save_interval, max_grad_norm;
    keep_rule *keep;
    size_t n_keep;
    bora_schedule sched;
    /* components */
    const bora_entry *be_entry, *model_entry, *opt_entry;
    bora_backend *be;
    bora_model *model;
    bora_optimizer *opt;
    g_store *store;
    g_graph *train;
    bora_eval *eval; /* when there is a validation set */
    bora_apply apply;
    int apply_built;
    bora_tokenizer *tok;
    bora_loader *loader, *val;
    int64_t steps_per_eval, max_eval_batches;
    int has_val, has_val_urls, eval_only;
    int64_t held_out;       /* data.validation_windows, when there are no validation_urls */
    double wait_s;          /* the last step's wait for its batch */
    double flops_per_token; /* 6N + 12 L d T */
    double peak_gflops;     /* the backend's measured peak, 0 if unknown */
    bora_eval_result last_eval;
    int live, line_open; /* stdout is a terminal: one progress line redrawn in place */
    bora_tracklog_entry *trackers;
    size_t n_trackers;
    bora_tracklog *log;
    /* one step's rows */
    int64_t seq_len;
    int32_t *ids, *targets, *segs;
    /* what a checkpoint records */
    char *config_json, *record_json;
    int force;
    int64_t cache_workers; /* bora cache --workers */
    int cache_rebuild;     /* bora cache --rebuild */
} trainer;

/* Ctrl-C and SIGTERM. They are blocked in every thread but one that waits for them: a handler
 * running on a compute thread could land while oneDNN's JIT gemm has its stack pointer on the
 * heap, and its frame would corrupt the heap. */
static atomic_int interrupted; /* set by the waiter thread, read by the loop */

typedef struct sig_watch {
    pthread_t thread;
    sigset_t set, old;
    int running;
} sig_watch;

static void *watch_signals(void *arg)
{
    sig_watch *w = arg;
    for (;;) {
        int sig = 0;
        if (sigwait(&w->set, &sig) != 0)
            continue;
        if (sig == SIGUSR1)
            return NULL; /* the run is over */
        atomic_store_explicit(&interrupted, 1, memory_order_relaxed);
    }
}

/* Block the signals in this thread (and so in every thread made after) and start the waiter. */
static void sig_watch_start(sig_watch *w)
{
    atomic_store_explicit(&interrupted, 0, memory_order_relaxed);
    sigemptyset(&w->set);
    sigaddset(&w->set, SIGINT);
    sigaddset(&w->set, SIGTERM);
    sigaddset(&w->set, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &w->set, &w->old);
    w->running = pthread_create(&w->thread, NULL, watch_signals, w) == 0;
}

static void sig_watch_stop(sig_watch *w)
{
    if (w->running) {
        pthread_kill(w->thread, SIGUSR1);
        pthread_join(w->thread, NULL);
    }
    /* A SIGINT or SIGTERM that came after the waiter left is still pending: take it here, or
     * the unblock below kills the process (status 143 where the run ended with 130). */
    sigset_t late;
    sigemptyset(&late);
    sigaddset(&late, SIGINT);
    sigaddset(&late, SIGTERM);
    const struct timespec zero = {0, 0};
    while (sigtimedwait(&late, NULL, &zero) > 0)
        ;
    pthread_sigmask(SIG_SETMASK, &w->old, NULL);
}

/* ---- settings ------------------------------------------------------------------------------ */

/* Give the model the tokenizer's vocabulary size unless the configuration sets one. */
static bora_status vocab_from_tokenizer(trainer *t, bora_config *root)
{
    bora_config *mnode = bora_cfg_child(root, "model"), *data = bora_cfg_child(root, "data");
    const char *type = NULL, *tok_path = NULL;
    if (!mnode || mnode->kind != BORA_NODE_MAP || !data || data->kind != BORA_NODE_MAP)
        return BORA_OK; /* the check reports it */
    if (bora_cfg_string(mnode, "type", NULL, &type) != BORA_OK || !type ||
        bora_cfg_string(data, "tokenizer", "", &tok_path) != BORA_OK || !tok_path || !*tok_path)
        return BORA_OK;
    if (bora_tokenizer_load(tok_path, &t->tok) != BORA_OK)
        return bora_error_set(BORA_ERR_INVALID, "data.tokenizer: %s", bora_error_get());
    const bora_entry *e = bora_registry_find(t->reg, BORA_KIND_MODEL, type);
    int declares = 0;
    for (const bora_key *k = e ? e->ops->keys : NULL; k && k->name; k++)
        declares |= !strcmp(k->name, "vocab_size");
    size_t vocab = bora_tokenizer_vocab_size(t->tok);
    if (!declares)
        return BORA_OK;
    bora_config *given = bora_cfg_child(mnode, "vocab_size");
    if (!given || given->kind == BORA_NODE_NULL) {
        char v[32];
        snprintf(v, sizeof v, "%zu", vocab);
        return bora_cfg_override(t->cfg, "model.vocab_size", v);
    }
    int64_t n;
    if (bora_cfg_int(mnode, "vocab_size", 0, &n) == BORA_OK && n < (int64_t)vocab)
        bora_cfg_error(t->cfg, given,
                       "model.vocab_size: %lld is smaller than the tokenizer's vocabulary (%zu)",
                       (long long)n, vocab);
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

static int permanent(const trainer *t, int64_t step)
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
    bora_cfg_int(tr, "steps_per_eval", 1000, &t->steps_per_eval);
    bora_cfg_int(tr, "max_eval_batches", -1, &t->max_eval_batches);
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
    double lr, warmup, decay = 0, min_ratio;
    const char *schedule;
    bora_cfg_float(op, "learning_rate", 6e-4, &lr);
    bora_cfg_string(op, "lr_schedule", "cosine", &schedule);
    bora_cfg_float(op, "warmup", 0.01, &warmup);
    bora_config *dn = bora_cfg_child(op, "decay");
    int decay_given = dn && dn->kind != BORA_NODE_NULL;
    bora_cfg_float(op, "decay", 0, &decay);
    bora_cfg_float(op, "min_lr_ratio", 0.1, &min_ratio);
    bora_cfg_float(op, "max_grad_norm", 1.0, &t->max_grad_norm);
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

/* ---- what a checkpoint records ------------------------------------------------------------- */

static void cpu_model(char *buf, size_t cap)
{
    snprintf(buf, cap, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        if (!strncmp(line, "model name", 10)) {
            char *v = strchr(line, ':');
            if (v) {
                v += 1 + (v[1] == ' ');
                v[strcspn(v, "\n")] = 0;
                snprintf(buf, cap, "%s", v);
            }
            break;
        }
    }
    if (f)
        fclose(f);
}

static void cpu_isa(char *buf, size_t cap)
{
    buf[0] = 0;
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    size_t at = 0;
#define ISA(name)                                 \
    if (__builtin_cpu_supports(name) && at < cap) \
        at += (size_t)snprintf(buf + at, cap - at, "%s%s", at ? " " : "", name);
    ISA("sse4.2")
    ISA("avx")
    ISA("avx2") ISA("fma") ISA("avx512f") ISA("avx512bw") ISA("avx512vl") ISA("avx512bf16")
#undef ISA
#else
    snprintf(buf, cap, "%s", "unknown");
#endif
}

static void json_kv(FILE *f, const char *key, const char *value, int comma)
{
    bora_json_string(f, key);
    fputs(": ", f);
    bora_json_string(f, value);
    if (comma)
        fputs(", ", f);
}

/* One component's plugin: "name version fnv:HASH". */
static void plugin_line(char *buf, size_t cap, const bora_entry *e)
{
    uint64_t h = 0;
    if (bora_hash_file(e->file->path, &h) != 0)
        h = 0;
    snprintf(buf, cap, "%s %s fnv:%016" PRIx64, e->file->name ? e->file->name : "?",
             e->file->version ? e->file->version : "?", h);
}

static bora_status make_record(trainer *t)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    char buf[1024], backend[512] = "";
    uint64_t host_hash = 0;
    if (bora_hash_file("/proc/self/exe", &host_hash) != 0)
        host_hash = 0;
    const bora_backend_ops *bops = (const bora_backend_ops *)t->be_entry->ops;
    if (bops->describe)
        bops->describe(t->be, backend, sizeof backend);
    fputs("{", f);
    snprintf(buf, sizeof buf, "bora %s (%s) fnv:%016" PRIx64, BORA_VERSION, BORA_GIT_COMMIT,
             host_hash);
    json_kv(f, "host", buf, 1);
    cpu_model(buf, sizeof buf);
    json_kv(f, "cpu", buf, 1);
    cpu_isa(buf, sizeof buf);
    json_kv(f, "isa", buf, 1);
    snprintf(buf, sizeof buf, "%s: %s", t->be_entry->ops->name, backend);
    json_kv(f, "backend", buf, 1);
    plugin_line(buf, sizeof buf, t->be_entry);
    json_kv(f, "backend_plugin", buf, 1);
    plugin_line(buf, sizeof buf, t->model_entry);
    json_kv(f, "model_plugin", buf, 1);
    plugin_line(buf, sizeof buf, t->opt_entry);
    json_kv(f, "optimizer_plugin", buf, 1);
    snprintf(buf, sizeof buf, "fnv:%016" PRIx64 " (the token cache in %s)",
             bora_loader_hash(t->loader), bora_loader_cache_dir(t->loader));
    json_kv(f, "data", buf, 0);
    fputs("}", f);
    if (fclose(f) != 0 || !text)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    t->record_json = text;
    /* The resolved configuration, as JSON. */
    text = NULL;
    f = open_memstream(&text, &len);
    if (!f)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    bora_cfg_write_json(bora_cfg_root(t->cfg), f);
    if (fclose(f) != 0 || !text)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    t->config_json = text;
    return BORA_OK;
}

static int permanent(const trainer *t, int64_t step);

static char *trainer_json(const trainer *t, int64_t step)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return NULL;
    fprintf(f, "{\n  \"format\": \"bora-checkpoint-1\",\n  \"step\": %" PRId64 ",\n  \"run_id\": ",
            step);
    bora_json_string(f, t->run_id);
    /* Temporary checkpoints are removed by the next save; permanent ones stay, whatever a later
     * policy says. */
    fprintf(f, ",\n  \"permanent\": %s", permanent(t, step) ? "true" : "false");
    /* Initialisation and data order are counter-based functions of (seed, name, index) and
     * (seed, batch): the seed and the step are the whole random state. */
    fprintf(f,
            ",\n  \"rng\": {\"generator\": \"philox4x32-10\", \"seed\": %" PRId64
            ", \"next_batch\": %" PRId64 "},\n",
            t->seed, step);
    fprintf(f, "  \"determinism\": %s,\n  \"config\": %s\n}\n", t->record_json, t->config_json);
    if (fclose(f) != 0)
        return NULL;
    return text;
}

/* Configuration keys that change nothing a step computes: who logs and where checkpoints go. */
static int ignorable(const char *path)
{
    if (!strncmp(path, "config.", 7))
        path += 7;
    static const char *const keys[] = {"trainer.tracker", "trainer.checkpointer", "trainer.id",
                                       "trainer.load_checkpoint", NULL};
    for (const char *const *k = keys; *k; k++) {
        size_t n = strlen(*k);
        if (!strncmp(path, *k, n) && (path[n] == 0 || path[n] == '.'))
            return 1;
    }
    return 0;
}

/* Append the paths where a and b differ (objects key by key; anything else whole). */
static void diff_json(json_object *a, json_object *b, const char *path, FILE *out, int *n)
{
    if (json_object_is_type(a, json_type_object) && json_object_is_type(b, json_type_object)) {
        json_object_object_foreach(a, key, va)
        {
            char sub[512];
            snprintf(sub, sizeof sub, "%s%s%s", path, *path ? "." : "", key);
            json_object *vb = NULL;
            json_object_object_get_ex(b, key, &vb);
            diff_json(va, vb, sub, out, n);
        }
        json_object_object_foreach(b, key2, vb2)
        {
            (void)vb2;
            if (!json_object_object_get_ex(a, key2, NULL)) {
                char sub[512];
                snprintf(sub, sizeof sub, "%s%s%s", path, *path ? "." : "", key2);
                diff_json(NULL, vb2, sub, out, n);
            }
        }
        return;
    }
    if (json_object_equal(a, b) || ignorable(path))
        return;
    if (++*n <= 8)
        fprintf(out, "\n  %s: %s then, %s now", path,
                a ? json_object_to_json_string_ext(a, JSON_C_TO_STRING_PLAIN |
                                                          JSON_C_TO_STRING_NOSLASHESCAPE)
                  : "absent",
                b ? json_object_to_json_string_ext(b, JSON_C_TO_STRING_PLAIN |
                                                          JSON_C_TO_STRING_NOSLASHESCAPE)
                  : "absent");
}

/* Compare a checkpoint's record and configuration with this run's. */
static bora_status check_resume(trainer *t, const char *dir, int64_t *step)
{
    char *text;
    bora_status st = bora_ckpt_read_trainer(dir, &text);
    if (st != BORA_OK)
        return st;
    json_object *saved = json_tokener_parse(text);
    free(text);
    json_object *rec = NULL, *conf = NULL, *jstep = NULL;
    if (!saved || !json_object_object_get_ex(saved, "step", &jstep) ||
        !json_object_is_type(jstep, json_type_int) ||
        !json_object_object_get_ex(saved, "determinism", &rec) ||
        !json_object_object_get_ex(saved, "config", &conf)) {
        json_object_put(saved);
        return bora_error_set(BORA_ERR_INVALID,
                              "%s/trainer.json: not a bora checkpoint record (step, determinism "
                              "and config expected)",
                              dir);
    }
    *step = json_object_get_int64(jstep);
    json_object *now_rec = json_tokener_parse(t->record_json);
    json_object *now_conf = json_tokener_parse(t->config_json);
    char *report = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&report, &len);
    int n = 0;
    if (out) {
        diff_json(rec, now_rec, "", out, &n);
        diff_json(conf, now_conf, "config", out, &n);
        if (n > 8)
            fprintf(out, "\n  (and %d more)", n - 8);
        fclose(out);
    }
    if (n) {
        bora_log(t->force ? BORA_LOG_WARN : BORA_LOG_ERROR,
                 "%s was made by a run that differs from this one, so the result would not be "
                 "the same bits:%s",
                 dir, report ? report : "");
        st = t->force ? BORA_OK
                      : bora_error_set(BORA_ERR_INVALID,
                                       "not resuming; pass --force to resume anyway, or "
                                       "give another trainer.id to start afresh");
    }
    free(report);
    json_object_put(now_rec);
    json_object_put(now_conf);
    json_object_put(saved);
    return st;
}

/* ---- building -------------------------------------------------------------------------------- */

static bora_status build(trainer *t, bora_config *root)
{
    bora_config *tr = bora_cfg_child(root, "trainer");
    const char *backend = "auto";
    bora_cfg_string(tr, "backend", "auto", &backend);
    if (!(t->be_entry = bora_registry_pick_backend(t->reg, backend)))
        return BORA_ERR_NOT_FOUND;
    const bora_backend_ops *bops = (const bora_backend_ops *)t->be_entry->ops;
    const bora_model_ops *mops = (const bora_model_ops *)t->model_entry->ops;
    const bora_optimizer_ops *oops =
        t->opt_entry ? (const bora_optimizer_ops *)t->opt_entry->ops : NULL;
    /* The backend reads its keys (num_threads) from the trainer section. */
    if (bops->create(&t->be_entry->file->host, tr, &t->be) != BORA_OK)
        return bora_error_set(BORA_ERR_INVALID, "backend %s: %s", t->be_entry->ops->name,
                              bora_error_get());
    if (mops->create(&t->model_entry->file->host, bora_cfg_child(root, "model"), &t->model) !=
        BORA_OK)
        return bora_error_set(BORA_ERR_INVALID, "model %s: %s", t->model_entry->ops->name,
                              bora_error_get());
    if (!t->eval_only && oops->create(&t->opt_entry->file->host, bora_cfg_child(root, "optimizer"),
                                      &t->opt) != BORA_OK)
        return bora_error_set(BORA_ERR_INVALID, "optimizer %s: %s", t->opt_entry->ops->name,
                              bora_error_get());
    t->store = g_store_new(bops, t->be, t->be_entry->ops->name, (uint64_t)t->seed);
    if (!t->store)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    g_store_mixed(t->store, t->mp.compute, t->mp.residual, t->be_entry->file->abi_minor);
    if (t->eval_only) {
        if (bora_eval_new(t->store, mops, t->model, t->micro, &t->eval) != BORA_OK)
            return bora_error_set(BORA_ERR_INVALID, "model %s: %s", t->model_entry->ops->name,
                                  bora_error_get());
        t->seq_len = bora_eval_seq_len(t->eval);
        if (g_store_materialize(t->store) != BORA_OK)
            return BORA_ERR_NOMEM;
        return BORA_OK;
    }
    t->train = g_graph_new(t->store, BORA_MODE_TRAIN);
    if (!t->train)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    t->train->batch = t->micro;
    /* One micro-batch a step: the train graph writes the gradients (no adds into buffers that
     * the apply graph would zero again). */
    t->train->grads_write = t->batch == t->micro;
    bora_tensor *loss_sum = NULL;
    if (mops->build(t->model, &t->train->pub, BORA_MODE_TRAIN, &loss_sum) != BORA_OK)
        return bora_error_set(BORA_ERR_INVALID, "model %s: %s", t->model_entry->ops->name,
                              t->train->status ? t->train->error : bora_error_get());
    /* The model returns the summed loss; one over the step's loss-token count makes every
     * micro-batch's gradient a share of the step's mean. */
    bora_graph *g = &t->train->pub;
    bora_tensor *scale = bora_input(g, "loss_scale", BORA_DTYPE_F32, 0, NULL);
    bora_tensor *loss = g->api->name(g, bora_mul(g, loss_sum, scale), "loss");
    if (bora_graph_status(g) != BORA_OK)
        return bora_error_set(BORA_ERR_INVALID, "model %s: %s", t->model_entry->ops->name,
                              t->train->error);
    t->train->output = loss;
    if (g_autodiff(t->train, loss) != BORA_OK || g_finalize(t->train) != BORA_OK)
        return bora_error_set(BORA_ERR_INVALID, "model %s: %s", t->model_entry->ops->name,
                              t->train->error);
    if (bora_apply_build(t->store, oops, t->opt, t->max_grad_norm, &t->apply) != BORA_OK)
        return bora_error_set(BORA_ERR_INVALID, "optimizer %s: %s", t->opt_entry->ops->name,
                              bora_error_get());
    t->apply_built = 1;
    if (t->has_val && bora_eval_new(t->store, mops, t->model, t->micro, &t->eval) != BORA_OK)
        return bora_error_set(BORA_ERR_INVALID, "model %s: %s", t->model_entry->ops->name,
                              bora_error_get());
    if (g_store_materialize(t->store) != BORA_OK)
        return BORA_ERR_NOMEM;
    /* The shape the model wants its rows in. */
    for (size_t i = 0; i < t->train->n_inputs; i++) {
        const gval *v = t->train->inputs[i].value;
        if (v->label && !strcmp(v->label, "input_ids") && v->ndim == 2)
            t->seq_len = v->dims[1];
    }
    if (t->seq_len < 2)
        return bora_error_set(BORA_ERR_INVALID,
                              "model %s: no (batch, position) input named input_ids",
                              t->model_entry->ops->name);
    size_t n = (size_t)(t->batch * t->seq_len); /* a whole step's rows */
    t->ids = malloc(n * sizeof(int32_t));
    t->targets = malloc(n * sizeof(int32_t));
    t->segs = malloc(n * sizeof(int32_t));
    if (!t->ids || !t->targets || !t->segs)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    return BORA_OK;
}

/* Strings the loader options point to. */
typedef struct data_names {
    char what[160], dir[4200];
} data_names;

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

static bora_status open_data(trainer *t, bora_config *root)
{
    bora_status st = BORA_OK;
    int carve = t->held_out > 0;
    if (!t->eval_only || carve)
        st = n_configs(root) ? open_mixture(t, root)
                             : open_loader(t, root, "train_urls", &t->loader);
    if (st == BORA_OK && t->eval)
        st = carve ? bora_loader_carve(t->loader, t->held_out, &t->val)
                   : open_loader(t, root, "validation_urls", &t->val);
    return st == BORA_OK ? BORA_OK : BORA_ERR_INVALID;
}

/* The git commit of the working directory, if it is a repository: {"commit", "dirty"} or null. */
static void git_state(FILE *f)
{
    char commit[64] = "";
    FILE *p = popen("git rev-parse HEAD 2>/dev/null", "r");
    if (p) {
        if (!fgets(commit, sizeof commit, p))
            commit[0] = 0;
        pclose(p);
    }
    commit[strcspn(commit, "\n")] = 0;
    if (strlen(commit) != 40) {
        fputs("null", f);
        return;
    }
    int dirty = 0;
    p = popen("git status --porcelain --untracked-files=no 2>/dev/null", "r");
    if (p) {
        dirty = fgetc(p) != EOF;
        pclose(p);
    }
    fprintf(f, "{\"commit\": \"%s\", \"dirty\": %s}", commit, dirty ? "true" : "false");
}

static char *environment_json(const trainer *t)
{
    char *text = NULL, host[256] = "", cwd[4096] = "";
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return NULL;
    if (gethostname(host, sizeof host - 1) != 0)
        host[0] = 0;
    if (!getcwd(cwd, sizeof cwd))
        cwd[0] = 0;
    fprintf(f, "{\"record\": %s, ", t->record_json);
    json_kv(f, "hostname", host, 1);
    fprintf(f, "\"pid\": %ld, ", (long)getpid());
    json_kv(f, "cwd", cwd, 1);
    fputs("\"git\": ", f);
    git_state(f);
    fputs("}", f);
    if (fclose(f) != 0)
        return NULL;
    return text;
}

static bora_status open_trackers(trainer *t, bora_config *root)
{
    bora_config *list = bora_cfg_child(bora_cfg_child(root, "trainer"), "tracker");
    size_t n = !list || list->kind == BORA_NODE_NULL ? 0
               : list->kind == BORA_NODE_LIST        ? list->n
                                                     : 1;
    t->trackers = calloc(n ? n : 1, sizeof *t->trackers);
    if (!t->trackers)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        bora_config *node = list->kind == BORA_NODE_LIST ? bora_cfg_at(list, i) : list;
        const bora_entry *e;
        if (bora_config_select(node, BORA_KIND_TRACKER, t->reg, &e) != BORA_OK)
            return bora_error_set(BORA_ERR_CONFIG, "%s", bora_cfg_first_error(t->cfg));
        bora_tracklog_entry *tk = &t->trackers[t->n_trackers];
        tk->ops = (const bora_tracker_ops *)e->ops;
        tk->name = e->ops->name;
        if (tk->ops->create(&e->file->host, node, t->run_id, &tk->t) != BORA_OK)
            return bora_error_set(BORA_ERR_INVALID, "tracker %s: %s", tk->name, bora_error_get());
        t->n_trackers++;
    }
    bora_status st = bora_tracklog_start(t->trackers, t->n_trackers, &t->log);
    if (st != BORA_OK)
        return st;
    bora_tracklog_hparams(t->log, t->config_json);
    char *env = environment_json(t);
    bora_tracklog_environment(t->log, env ? env : "{}");
    free(env);
    return BORA_OK;
}

/* ---- checkpoints ----------------------------------------------------------------------------- */

/* Whether a saved checkpoint was temporary, as its trainer.json says. */
static int temporary(const trainer *t, int64_t step)
{
    char dir[4200], *text;
    snprintf(dir, sizeof dir, "%s/step-%" PRId64, t->run_dir, step);
    if (bora_ckpt_read_trainer(dir, &text) != BORA_OK)
        return 0;
    json_object *o = json_tokener_parse(text), *p = NULL;
    int temp = o && json_object_object_get_ex(o, "permanent", &p) &&
               json_object_is_type(p, json_type_boolean) && !json_object_get_boolean(p);
    json_object_put(o);
    free(text);
    return temp;
}

/* "1h02m", "3m05s", "42s". */
static void duration_text(double s, char *buf, size_t cap)
{
    long v = s > 0 && s < 1e9 ? (long)(s + 0.5) : 0;
    if (v >= 3600)
        snprintf(buf, cap, "%ldh%02ldm", v / 3600, v / 60 % 60);
    else if (v >= 60)
        snprintf(buf, cap, "%ldm%02lds", v / 60, v % 60);
    else
        snprintf(buf, cap, "%lds", v);
}

/* Close the live progress line before other output. */
static void end_live_line(trainer *t)
{
    if (t->line_open) {
        fputc('\n', stdout);
        t->line_open = 0;
    }
}

static bora_status save(trainer *t, int64_t step)
{
    char *json = trainer_json(t, step);
    if (!json)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    const bora_optimizer_ops *oops = (const bora_optimizer_ops *)t->opt_entry->ops;
    char dir[4200];
    /* Every metric up to this step is made durable first: a run resumed from this checkpoint
     * will not log these steps again. */
    double t0 = bora_now_s();
    size_t queued = bora_tracklog_flush(t->log);
    end_live_line(t);
    if (bora_now_s() - t0 > 1.0)
        printf("checkpoint: waited %.1f s for the trackers to take %zu queued calls\n",
               bora_now_s() - t0, queued);
    t0 = bora_now_s();
    printf("checkpoint: saving step %" PRId64 " to %s/step-%" PRId64 "\n", step, t->run_dir, step);
    fflush(stdout);
    bora_status st = bora_ckpt_save(t->store, oops->slots, t->run_dir, step, json, dir, sizeof dir);
    free(json);
    if (st != BORA_OK)
        return st;
    printf("checkpoint: saved %s (%.2f s)%s\n", dir, bora_now_s() - t0,
           permanent(t, step) ? "" : " (temporary: the next save replaces it)");
    fflush(stdout);
    /* Temporary checkpoints before this one go. */
    int64_t *steps;
    size_t n;
    if (bora_ckpt_list(t->run_dir, &steps, &n) == BORA_OK) {
        for (size_t i = 0; i < n; i++)
            if (steps[i] < step && temporary(t, steps[i]))
                bora_ckpt_remove(t->run_dir, steps[i]);
        free(steps);
    }
    return BORA_OK;
}

/* Resume from the run's latest checkpoint, or start from load_checkpoint, or from scratch.
 * *start gets the last step already done. */
static bora_status restore(trainer *t, int64_t *start)
{
    *start = 0;
    int64_t *steps;
    size_t n;
    bora_status st = bora_ckpt_list(t->run_dir, &steps, &n);
    if (st != BORA_OK)
        return st;
    const bora_optimizer_ops *oops = (const bora_optimizer_ops *)t->opt_entry->ops;
    if (n) {
        char dir[4200];
        snprintf(dir, sizeof dir, "%s/step-%" PRId64, t->run_dir, steps[n - 1]);
        free(steps);
        int64_t step = 0;
        if ((st = check_resume(t, dir, &step)) != BORA_OK)
            return st;
        if ((st = bora_ckpt_load_model(t->store, dir)) != BORA_OK ||
            (st = bora_ckpt_load_optimizer(t->store, oops->slots, dir)) != BORA_OK)
            return bora_error_set(st, "cannot resume from %s: %s", dir, bora_error_get());
        *start = step;
        printf("resuming run %s from %s (step %" PRId64 " of %" PRId64 ")\n", t->run_id, dir, step,
               t->steps);
        return BORA_OK;
    }
    free(steps);
    if (*t->load_checkpoint) {
        if ((st = bora_ckpt_load_model(t->store, t->load_checkpoint)) != BORA_OK)
            return bora_error_set(st, "trainer.load_checkpoint: %s", bora_error_get());
        printf("starting run %s from the weights in %s\n", t->run_id, t->load_checkpoint);
        return BORA_OK;
    }
    printf("starting run %s (checkpoints in %s)\n", t->run_id, t->run_dir);
    return BORA_OK;
}

/* ---- the loop -------------------------------------------------------------------------------- */

/* Evaluate on the validation set (trainer.max_eval_batches batches of train_batch_size), print
 * it and log eval/loss and eval/bpb at step. */
static bora_status run_eval(trainer *t, int64_t step, bora_eval_result *r)
{
    int64_t seqs = t->max_eval_batches > 0 ? t->max_eval_batches * t->batch : -1;
    bora_status st = bora_eval_run(t->eval, t->val, t->tok, seqs, r);
    if (st != BORA_OK)
        return st;
    end_live_line(t);
    printf("eval at step %" PRId64 ": loss %.4f  bpb %.4f  (%lld sequences, %lld tokens, %.2f s)\n",
           step, r->loss, r->bpb, (long long)r->sequences, (long long)r->tokens, r->seconds);
    fflush(stdout);
    bora_metric m[] = {{"eval/loss", r->loss}, {"eval/bpb", r->bpb}};
    bora_tracklog_log(t->log, step, m, 2);
    return BORA_OK;
}

/* One optimizer step: the micro-batches, then the apply graph. */
static bora_status step_once(trainer *t, int64_t step, double lr, double *loss, double *norm)
{
    int64_t rows = t->micro, n_micro = t->batch / t->micro, count;
    size_t cells = (size_t)(rows * t->seq_len), bytes = cells * sizeof(int32_t);
    /* The whole step's rows at once: the loss-token count must be known before the first
     * micro-batch runs, as every micro-batch divides by it. */
    double w0 = bora_now_s();
    bora_status st = bora_loader_rows(t->loader, step - 1, t->batch, 0, t->batch, t->ids,
                                      t->targets, t->segs, &count);
    t->wait_s = bora_now_s() - w0;
    if (st != BORA_OK)
        return st;
    float scale = count ? (float)(1.0 / (double)count) : 0.0f;
    double total = 0;
    for (int64_t m = 0; m < n_micro; m++) {
        size_t at = (size_t)m * cells;
        st = g_set_input(t->train, "input_ids", t->ids + at, bytes);
        if (st == BORA_OK)
            st = g_set_input(t->train, "targets", t->targets + at, bytes);
        if (st == BORA_OK)
            st = g_set_input(t->train, "segment_ids", t->segs + at, bytes);
        if (st == BORA_OK)
            st = g_set_input(t->train, "loss_scale", &scale, sizeof scale);
        if (st == BORA_OK)
            st = g_run(t->train);
        float part = 0;
        if (st == BORA_OK)
            st = g_read(t->train, t->train->output, &part, sizeof part);
        if (st != BORA_OK)
            return bora_error_set(st, "step %" PRId64 ": %s", step,
                                  t->train->status ? t->train->error : bora_error_get());
        total += part;
    }
    *loss = total;
    if (!isfinite(total) && t->crash_on_nan)
        return BORA_ERR_INVALID;
    st = bora_apply_step(&t->apply, step, lr, norm);
    if (st != BORA_OK)
        return bora_error_set(st, "step %" PRId64 ": %s", step, bora_error_get());
    if (!isfinite(*norm) && t->crash_on_nan)
        return BORA_ERR_INVALID;
    return BORA_OK;
}

static int run_loop(trainer *t, int64_t start)
{
    int64_t tokens = t->batch * t->seq_len;
    double last_save = bora_now_s(), first = 0, last = 0, began = bora_now_s();
    int64_t last_step = start;
    int have_eval = 0;
    if (atomic_load_explicit(&interrupted, memory_order_relaxed)) {
        printf("interrupted before step %" PRId64 "\n", start + 1);
        return 130;
    }
    for (int64_t step = start + 1; step <= t->steps; step++) {
        double lr = bora_schedule_lr(&t->sched, step), loss = 0, norm = 0, t0 = bora_now_s();
        bora_status st = step_once(t, step, lr, &loss, &norm);
        if (st != BORA_OK)
            end_live_line(t);
        if (st == BORA_ERR_INVALID && (!isfinite(loss) || !isfinite(norm))) {
            char kept[4200] = "no checkpoint was saved yet";
            if (last_step > 0 || start > 0)
                snprintf(kept, sizeof kept, "the last checkpoint, %s/step-%" PRId64 ", is kept",
                         t->run_dir, last_step);
            bora_log(BORA_LOG_ERROR,
                     "step %" PRId64 ": the %s is %s; stopping (trainer.crash_on_nan); %s", step,
                     isfinite(loss) ? "gradient norm" : "loss",
                     isfinite(loss) ? (isnan(norm) ? "nan" : "infinite")
                                    : (isnan(loss) ? "nan" : "infinite"),
                     kept);
            return 1;
        }
        if (st != BORA_OK) {
            bora_log(BORA_LOG_ERROR, "%s", bora_error_get());
            return 1;
        }
        double dt = bora_now_s() - t0;
        if (step == start + 1)
            first = loss;
        last = loss;
        if (t->live) {
            /* One line redrawn in place: step/total, loss, tokens/s and the time left. */
            double per_step = (bora_now_s() - began) / (double)(step - start);
            char eta[32];
            duration_text(per_step * (double)(t->steps - step), eta, sizeof eta);
            printf("\r\033[Kstep %" PRId64 "/%" PRId64
                   "  loss %.4f  lr %.2e  %.0f tokens/s  ETA %s",
                   step, t->steps, loss, lr, (double)tokens / dt, eta);
            t->line_open = 1;
        } else
            printf("step %" PRId64 "/%" PRId64
                   "  loss %.4f  lr %.3e  grad_norm %.4f  tokens/s %.0f\n",
                   step, t->steps, loss, lr, norm, (double)tokens / dt);
        fflush(stdout);
        bora_metric m[] = {{"train/loss", loss},
                           {"optim/learning_rate", lr},
                           {"optim/grad_norm", norm},
                           {"throughput/tokens_per_second", (double)tokens / dt},
                           {"throughput/step_seconds", dt},
                           {"data/wait_s", t->wait_s},
                           {"throughput/mfu", 0}};
        size_t n_m = sizeof m / sizeof m[0];
        if (t->peak_gflops > 0)
            m[n_m - 1].value = t->flops_per_token * (double)tokens / dt / (t->peak_gflops * 1e9);
        else
            n_m--;
        bora_tracklog_log(t->log, step, m, n_m);
        if (t->eval && (step % t->steps_per_eval == 0 || step == t->steps)) {
            if (run_eval(t, step, &t->last_eval) != BORA_OK) {
                end_live_line(t);
                bora_log(BORA_LOG_ERROR, "%s", bora_error_get());
                return 1;
            }
            have_eval = 1;
        }
        /* read once: a signal between the save decision and the exit would skip the save */
        int stop = atomic_load_explicit(&interrupted, memory_order_relaxed);
        int due = step == t->steps || permanent(t, step) ||
                  bora_now_s() - last_save >= t->save_interval || stop;
        if (due) {
            if ((st = save(t, step)) != BORA_OK) {
                end_live_line(t);
                bora_log(BORA_LOG_ERROR, "checkpoint: %s", bora_error_get());
                return 1;
            }
            last_save = bora_now_s();
            last_step = step;
            char dir[4200], name[64];
            snprintf(dir, sizeof dir, "%s/step-%" PRId64, t->run_dir, step);
            snprintf(name, sizeof name, "step-%" PRId64, step);
            bora_tracklog_artifact(t->log, dir, name, "checkpoint");
        }
        if (stop) {
            end_live_line(t);
            printf("interrupted at step %" PRId64 "; run again with --trainer.id=%s to go on\n",
                   step, t->run_id);
            return 130;
        }
    }
    end_live_line(t);
    if (start < t->steps) {
        printf("trained %" PRId64 " steps: loss %.4f -> %.4f\n", t->steps - start, first, last);
        double secs = bora_now_s() - began;
        bora_metric summary[] = {{"train/final_loss", last},
                                 {"train/steps", (double)t->steps},
                                 {"train/tokens", (double)(t->steps * tokens)},
                                 {"throughput/seconds_this_session", secs},
                                 {"throughput/tokens_per_second_mean",
                                  secs > 0 ? (double)((t->steps - start) * tokens) / secs : 0},
                                 {"eval/loss", t->last_eval.loss},
                                 {"eval/bpb", t->last_eval.bpb}};
        size_t n_sum = sizeof summary / sizeof summary[0] - (have_eval ? 0 : 2);
        bora_tracklog_summary(t->log, summary, n_sum);
    } else
        printf("run %s already finished (%" PRId64 " steps)\n", t->run_id, t->steps);
    return 0;
}

/* PaLM's model FLOPs per token, 6N + 12 L d T (N parameters, L layers, d the width, T the
 * context; the attention term needs the model's num_layers and hidden_dim keys), and the
 * backend's peak for throughput/mfu. */
static void model_flops(trainer *t, bora_config *root, size_t params)
{
    bora_config *m = bora_cfg_child(root, "model");
    int64_t layers = 0, width = 0;
    bora_cfg_int(m, "num_layers", 0, &layers);
    bora_cfg_int(m, "hidden_dim", 0, &width);
    t->flops_per_token =
        6.0 * (double)params + 12.0 * (double)layers * (double)width * (double)t->seq_len;
    char cpu[256];
    cpu_model(cpu, sizeof cpu);
    int measured = 0;
    int bf16 = t->mp.compute == BORA_DTYPE_BF16;
    t->peak_gflops =
        bora_peak_gflops((const bora_backend_ops *)t->be_entry->ops, t->be, t->be_entry->ops->name,
                         cpu, bf16 ? BORA_DTYPE_BF16 : BORA_DTYPE_F32, &measured);
    if (measured)
        printf("peak: %.1f GFLOP/s %s on this machine's backend (measured once, kept for "
               "throughput/mfu)\n",
               t->peak_gflops, bf16 ? "bf16" : "f32");
}

static void teardown(trainer *t)
{
    bora_tracklog_finish(t->log, BORA_RUN_FAILED); /* when the run never reached its finish */
    for (size_t i = 0; i < t->n_trackers; i++)
        t->trackers[i].ops->destroy(t->trackers[i].t);
    free(t->trackers);
    if (t->apply_built)
        bora_apply_free(&t->apply);
    bora_eval_free(t->eval);
    bora_loader_free(t->val);
    g_graph_free(t->train);
    g_store_free(t->store);
    if (t->opt)
        ((const bora_optimizer_ops *)t->opt_entry->ops)->destroy(t->opt);
    if (t->model)
        ((const bora_model_ops *)t->model_entry->ops)->destroy(t->model);
    if (t->be)
        ((const bora_backend_ops *)t->be_entry->ops)->destroy(t->be);
    bora_loader_free(t->loader);
    bora_tokenizer_free(t->tok);
    free(t->ids);
    free(t->targets);
    free(t->segs);
    free(t->keep);
    free(t->config_json);
    free(t->record_json);
}

/* Check the configuration and read the settings; 0 when something was reported. */
static int configure(trainer *t, bora_config *root)
{
    bora_cfg *cfg = t->cfg;
    if (vocab_from_tokenizer(t, root) != BORA_OK) {
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
    if (bora_cfg_error_count(cfg)) {
        bora_cfg_print_errors(cfg, stderr);
        return 0;
    }
    return 1;
}

int bora_train(bora_cfg *cfg, bora_registry *reg, const bora_train_opts *opts)
{
    trainer t = {.cfg = cfg, .reg = reg, .force = opts && opts->force};
    bora_config *root = bora_cfg_root(cfg);
    int rc = 1;
    sig_watch watch;
    sig_watch_start(&watch);
    if (!configure(&t, root))
        goto out;
    if (build(&t, root) != BORA_OK || open_data(&t, root) != BORA_OK ||
        make_record(&t) != BORA_OK) {
        bora_log(BORA_LOG_ERROR, "%s", bora_error_get());
        goto out;
    }
    size_t values = 0;
    for (size_t i = 0; i < t.store->n_slots; i++)
        values += t.store->slots[i].nbytes / bora_dtype_size(t.store->slots[i].dtype);
    printf("model %s: %zu parameters in %zu tensors; optimizer %s; backend %s\n",
           t.model_entry->ops->name, values, t.store->n_slots, t.opt_entry->ops->name,
           t.be_entry->ops->name);
    if (t.mp.compute == BORA_DTYPE_BF16) {
        char desc[512] = "";
        const bora_backend_ops *bops = (const bora_backend_ops *)t.be_entry->ops;
        if (bops->describe)
            bops->describe(t.be, desc, sizeof desc);
        printf("trainer.mp c=bf16: matmul operands rounded to bf16, products summed in f32 "
               "(%s: %s)\n",
               t.be_entry->ops->name, desc);
    }
    if (t.mp.residual == BORA_DTYPE_BF16 && t.train->residuals)
        printf("trainer.mp r=bf16: the residual stream kept in bf16 (%d values of it per "
               "micro-batch), read back as f32\n",
               t.train->residuals);
    else if (t.mp.residual == BORA_DTYPE_BF16)
        bora_log(BORA_LOG_WARN,
                 "trainer.mp r=bf16: model %s does not mark its residual stream "
                 "(bora_residual), so it stays f32",
                 t.model_entry->ops->name);
    printf("batch %lld x %lld tokens (%lld micro-batch%s of %lld), %lld steps\n",
           (long long)t.batch, (long long)t.seq_len, (long long)(t.batch / t.micro),
           t.batch / t.micro == 1 ? "" : "es", (long long)t.micro, (long long)t.steps);
    if (t.eval)
        printf("eval every %lld steps and at the end on %lld validation sequences\n",
               (long long)t.steps_per_eval,
               (long long)(t.max_eval_batches > 0 &&
                                   t.max_eval_batches * t.batch < bora_loader_windows(t.val)
                               ? t.max_eval_batches * t.batch
                               : bora_loader_windows(t.val)));
    model_flops(&t, root, values);
    int64_t start;
    if (restore(&t, &start) != BORA_OK) {
        bora_log(BORA_LOG_ERROR, "%s", bora_error_get());
        goto out;
    }
    fflush(stdout);
    if (open_trackers(&t, root) != BORA_OK) {
        bora_log(BORA_LOG_ERROR, "%s", bora_error_get());
        goto out;
    }
    t.live = isatty(STDOUT_FILENO) && !getenv("BORA_NO_PROGRESS");
    rc = run_loop(&t, start);
    bora_tracklog_finish(t.log, rc == 0     ? BORA_RUN_FINISHED
                                : rc == 130 ? BORA_RUN_KILLED
                                            : BORA_RUN_FAILED);
    t.log = NULL;
out:
    teardown(&t);
    sig_watch_stop(&watch);
    return rc;
}

int bora_evaluate(bora_cfg *cfg, bora_registry *reg, const char *checkpoint, int json)
{
    trainer t = {.cfg = cfg, .reg = reg, .eval_only = 1};
    bora_config *root = bora_cfg_root(cfg);
    int rc = 1;
    char dir[4200];
    int64_t *steps = NULL;
    size_t n = 0;
    if (!configure(&t, root))
        goto out;
    if (!t.has_val) {
        bora_log(BORA_LOG_ERROR, "eval: the configuration has no validation set (give "
                                 "data.validation_urls: [files])");
        goto out;
    }
    /* A run directory means its latest checkpoint. */
    snprintf(dir, sizeof dir, "%s", checkpoint);
    if (bora_ckpt_list(checkpoint, &steps, &n) == BORA_OK && n)
        snprintf(dir, sizeof dir, "%s/step-%" PRId64, checkpoint, steps[n - 1]);
    free(steps);
    if (build(&t, root) != BORA_OK || open_data(&t, root) != BORA_OK) {
        bora_log(BORA_LOG_ERROR, "%s", bora_error_get());
        goto out;
    }
    if (bora_ckpt_load_model(t.store, dir) != BORA_OK) {
        bora_log(BORA_LOG_ERROR, "eval: %s", bora_error_get());
        goto out;
    }
    bora_eval_result r;
    int64_t seqs = t.max_eval_batches > 0 ? t.max_eval_batches * t.batch : -1;
    if (bora_eval_run(t.eval, t.val, t.tok, seqs, &r) != BORA_OK) {
        bora_log(BORA_LOG_ERROR, "%s", bora_error_get());
        goto out;
    }
    if (json)
        printf("{\"checkpoint\": \"%s\", \"eval/loss\": %.17g, \"eval/bpb\": %.17g, "
               "\"sequences\": %lld, \"tokens\": %lld, \"bytes\": %lld}\n",
               dir, r.loss, r.bpb, (long long)r.sequences, (long long)r.tokens, (long long)r.bytes);
    else
        printf("eval of %s: loss %.4f  bpb %.4f  (%lld sequences, %lld tokens, %lld bytes, "
               "%.2f s)\n",
               dir, r.loss, r.bpb, (long long)r.sequences, (long long)r.tokens, (long long)r.bytes,
               r.seconds);
    rc = 0;
out:
    teardown(&t);
    return rc;
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

/* Build one source list's cache, showing progress; 0 when it is complete. */
static int cache_one(trainer *t, bora_config *root, const char *key, long part, int live)
{
    bora_loader_opts lo;
    const char **list;
    data_names names;
    bora_cache *c = NULL;
    bora_status st = data_opts(t, root, key, part, &lo, &list, &names);
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
                duration_text(dt * (double)(p.bytes - p.bytes_done) / new_bytes, eta, sizeof eta);
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
    if (!configure(&t, root))
        goto out;
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
    teardown(&t);
    return rc;
}
