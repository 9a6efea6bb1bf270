/* core/train/trainer.c — the training loop (see trainer.h). */
#include "internal.h"

#include "../ckpt/checkpoint.h"
#include "../config/schema.h"
#include "../data/cache.h"
#include "../data/loader.h"
#include "../dist/dist.h"
#include "../eval/transcribe.h"
#include "../graph/graph.h"
#include "../hf/import.h"
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
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

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

int tr_interrupted(void)
{
    return atomic_load_explicit(&interrupted, memory_order_relaxed);
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

/* ---- building -------------------------------------------------------------------------------- */

/* A train graph's failure as the user meets it: the model's message, and where a tensor is too
 * large to address, the size keys behind it. */
static bora_status graph_error(trainer *t, bora_config *root, const char *msg)
{
    char keys[512];
    bora_size_keys(root, t->train, keys, sizeof keys);
    return bora_error_set(BORA_ERR_INVALID, "model %s: %s%s%s", t->model_entry->ops->name, msg,
                          keys[0] ? "; " : "", keys);
}

static void human_bytes(char *buf, size_t cap, double bytes)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    int u = 0;
    while (bytes >= 1024 && u < 6)
        bytes /= 1024, u++;
    snprintf(buf, cap, u ? "%.1f %s" : "%.0f %s", bytes, units[u]);
}

/* The memory to plan against: BORA_MEMORY_AVAILABLE (a size, e.g. 64GiB, for a machine whose
 * /proc/meminfo does not tell: a container's limit, a device's own memory), else MemAvailable.
 * 0 when neither is known; *from NULL when the variable is not a size. */
static uint64_t memory_available(const char **from)
{
    const char *env = getenv("BORA_MEMORY_AVAILABLE");
    uint64_t bytes = 0;
    *from = "BORA_MEMORY_AVAILABLE";
    if (env && *env) {
        if (!bora_parse_bytes(env, &bytes))
            return bytes;
        *from = NULL; /* refused by the caller */
        return 0;
    }
    *from = "MemAvailable";
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    unsigned long long kib = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1)
            break;
    if (f)
        fclose(f);
    return (uint64_t)kib * 1024;
}

/* Before anything large is allocated: what the run needs (parameters, their gradients, the
 * optimizer's state, the graphs' shared arena, and the rest: inputs, the step's token rows,
 * model state, bf16 copies), stated on one line and refused, naming the keys that drive it,
 * when more than the memory available. *rows: the step's token count. */
static bora_status state_memory(trainer *t, bora_config *root, size_t *rows)
{
    const g_store *s = t->store;
    size_t p = s->param_bytes, state, rows_bytes, other, total;
    /* a sharded optimizer's: this rank's share */
    int over =
        __builtin_mul_overflow(g_store_state_block(s), s->n_states ? s->n_states : 1, &state);
    over |= __builtin_mul_overflow((size_t)t->batch, (size_t)t->seq_len, rows);
    over |= __builtin_mul_overflow(*rows, 3 * sizeof(int32_t), &rows_bytes);
    /* an audio model's: the step's clips' features, held by the host */
    int mels = 0;
    int64_t frames = 0;
    size_t feat_bytes = 0;
    if (bora_inputs_features(t->train, &mels, &frames)) {
        over |= __builtin_mul_overflow((size_t)t->batch, (size_t)mels, &feat_bytes);
        over |= __builtin_mul_overflow(feat_bytes, (size_t)frames * sizeof(float), &feat_bytes);
    }
    /* with a second-order estimate: its tangent and hvp blocks, its graphs' inputs */
    size_t hess_bytes = 0;
    if (t->hess_built) {
        size_t est = t->hess.est ? g_input_bytes(t->hess.est) : 0;
        size_t fold = t->hess.fold ? g_input_bytes(t->hess.fold) : 0;
        over |= __builtin_add_overflow(p, p, &hess_bytes);
        over |= __builtin_add_overflow(hess_bytes, est, &hess_bytes);
        over |= __builtin_add_overflow(hess_bytes, fold, &hess_bytes);
    }
    size_t parts[] = {rows_bytes,
                      feat_bytes,
                      g_input_bytes(t->train),
                      t->apply.g ? g_input_bytes(t->apply.g) : 0,
                      t->eval ? bora_eval_input_bytes(t->eval) : 0,
                      s->mstate_bytes,
                      s->shadows ? p / 2 : 0,
                      hess_bytes};
    other = 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        over |= __builtin_add_overflow(other, parts[i], &other);
    over |= __builtin_add_overflow(p, p, &total) || __builtin_add_overflow(total, state, &total) ||
            __builtin_add_overflow(total, s->arena_bytes, &total) ||
            __builtin_add_overflow(total, other, &total);
    int64_t width = 0, layers = 0, vocab = 0;
    const char *wkey, *lkey;
    bora_model_shape(root, t->model_entry->ops->keys, &width, &layers, &wkey, &lkey);
    bora_cfg_int(bora_cfg_child(root, "model"), "vocab_size", 0, &vocab);
    char drivers[512];
    snprintf(drivers, sizeof drivers,
             "the arena grows with trainer.per_device_parallelism (the micro-batch, %lld "
             "sequences; train_batch_size %lld), model.seq_len (%lld), model.%s (%lld), "
             "model.%s (%lld) and model.vocab_size (%lld); the parameters, gradients and "
             "optimizer state with the last three",
             (long long)t->micro, (long long)t->batch, (long long)t->seq_len, wkey,
             (long long)width, lkey, (long long)layers, (long long)vocab);
    if (over)
        return bora_error_set(BORA_ERR_INVALID,
                              "memory: the run would need more than 2^64 bytes: %s; make them "
                              "smaller",
                              drivers);
    const char *from;
    uint64_t avail = memory_available(&from);
    if (!from)
        return bora_error_set(BORA_ERR_INVALID,
                              "BORA_MEMORY_AVAILABLE: '%s' is not a size; give one such as "
                              "64GiB or 512MB",
                              getenv("BORA_MEMORY_AVAILABLE"));
    char pb[32], sb[32], ab[32], ob[32], tb[32], mb[32];
    human_bytes(pb, sizeof pb, (double)p);
    human_bytes(sb, sizeof sb, (double)state);
    human_bytes(ab, sizeof ab, (double)s->arena_bytes);
    human_bytes(ob, sizeof ob, (double)other);
    human_bytes(tb, sizeof tb, (double)total);
    human_bytes(mb, sizeof mb, (double)avail);
    if (avail && total > avail)
        return bora_error_set(BORA_ERR_INVALID,
                              "memory: the run needs %s (%s parameters, %s gradients, %s "
                              "optimizer state, %s arena, %s inputs and the rest), more than the "
                              "%s available (%s): %s; make them smaller (more micro-batches of "
                              "fewer sequences keep the batch: trainer.per_device_parallelism)",
                              tb, pb, pb, sb, ab, ob, mb, from, drivers);
    printf("memory: %s parameters, %s gradients, %s optimizer state, %s arena, %s inputs and the "
           "rest (%s%s%s available)\n",
           pb, pb, sb, ab, ob, tb, avail ? " of " : "", avail ? mb : ", none stated as");
    return BORA_OK;
}

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
        if (tr_wer_build(t) != BORA_OK)
            return BORA_ERR_INVALID;
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
    /* Several processes: each micro-batch's gradient is written, then summed among them. */
    if (t->world > 1)
        t->train->grads_write = 1;
    bora_tensor *loss_sum = NULL;
    if (mops->build(t->model, &t->train->pub, BORA_MODE_TRAIN, &loss_sum) != BORA_OK)
        return graph_error(t, root, t->train->status ? t->train->error : bora_error_get());
    if (bora_inputs_check(t->train, BORA_MODE_TRAIN, t->model_entry->ops->name) != BORA_OK)
        return BORA_ERR_INVALID;
    /* The model returns the summed loss; one over the step's loss-token count makes every
     * micro-batch's gradient a share of the step's mean. */
    bora_graph *g = &t->train->pub;
    bora_tensor *scale = bora_input(g, "loss_scale", BORA_DTYPE_F32, 0, NULL);
    bora_tensor *loss = g->api->name(g, bora_mul(g, loss_sum, scale), "loss");
    if (bora_graph_status(g) != BORA_OK)
        return graph_error(t, root, t->train->error);
    t->train->output = loss;
    if (g_autodiff(t->train, loss) != BORA_OK)
        return graph_error(t, root, t->train->error);
    /* the model's metrics, when it declared any, join the loss in the output */
    if (tr_model_metrics_build(t->train, loss, &t->model_metrics) != BORA_OK)
        return graph_error(t, root, bora_error_get());
    if (g_finalize(t->train) != BORA_OK)
        return graph_error(t, root, t->train->error);
    if (bora_opt_groups_make(bora_cfg_child(root, "optimizer"), t->reg, t->opt_entry, t->opt,
                             t->sched.peak, t->store, &t->groups) != BORA_OK)
        return BORA_ERR_CONFIG;
    t->apply_built = 1; /* freed whatever the build's outcome */
    if (t->world > 1 && t->shard) {
        if (tr_zero_build(t) != BORA_OK)
            return BORA_ERR_INVALID;
    } else if (bora_apply_build_groups(t->store, t->groups.n, t->groups.apply, t->groups.group_of,
                                       t->max_grad_norm, &t->apply) != BORA_OK)
        return BORA_ERR_INVALID; /* the message names the optimizer or group */
    bora_hessian_spec hs;
    unsigned char *wants = calloc(t->apply.n_groups ? t->apply.n_groups : 1, 1);
    if (!wants)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    int want = bora_hessian_wanted(&t->apply, &hs, wants);
    bora_status hst = want < 0 ? BORA_ERR_INVALID : BORA_OK;
    if (want > 0 && t->world > 1) { /* as tr_dp_setup says, before a sharded graph is met */
        free(wants);
        return bora_error_set(BORA_ERR_UNSUPPORTED,
                              "optimizer %s: its second-order estimate is not split among "
                              "processes yet; train it on one process",
                              t->opt_entry->ops->name);
    }
    if (want > 0) {
        t->hess_built = 1; /* freed whatever the build's outcome */
        hst = bora_hessian_build(&t->hess, t->store, mops, t->model, t->micro, &t->apply,
                                 t->groups.group_of, wants, &hs);
    }
    free(wants);
    if (hst != BORA_OK)
        return bora_error_set(hst, "optimizer %s: %s", t->opt_entry->ops->name, bora_error_get());
    if (want > 0) {
        int64_t n_micro = t->batch / t->micro;
        int64_t used =
            hs.micro_batches > 0 && hs.micro_batches < n_micro ? hs.micro_batches : n_micro;
        printf("hessian: the %s estimate every %lld step%s, over %lld of the step's %lld "
               "micro-batch%s\n",
               hs.kind == BORA_HESSIAN_GNB ? "Gauss-Newton-Bartlett (B·ĝ⊙ĝ)" : "Hutchinson (z⊙Hz)",
               (long long)hs.interval, hs.interval == 1 ? "" : "s", (long long)used,
               (long long)n_micro, n_micro == 1 ? "" : "es");
    }
    if (t->has_val && bora_eval_new(t->store, mops, t->model, t->micro, &t->eval) != BORA_OK)
        return bora_error_set(BORA_ERR_INVALID, "model %s: %s", t->model_entry->ops->name,
                              bora_error_get());
    if (tr_wer_build(t) != BORA_OK) /* a speech model: eval/wer too */
        return BORA_ERR_INVALID;
    /* The shape the model wants its rows in. */
    for (size_t i = 0; i < t->train->n_inputs; i++) {
        const gval *v = t->train->inputs[i].value;
        if (v->label && !strcmp(v->label, "input_ids") && v->ndim == 2)
            t->seq_len = v->dims[1];
    }
    t->hess.seq_len = t->seq_len;
    if (t->seq_len < 2)
        return bora_error_set(BORA_ERR_INVALID,
                              "model %s: no (batch, position) input named input_ids",
                              t->model_entry->ops->name);
    size_t n; /* a whole step's rows */
    bora_status mst = state_memory(t, root, &n);
    if (mst != BORA_OK)
        return mst;
    if (g_store_materialize(t->store) != BORA_OK)
        return BORA_ERR_NOMEM;
    t->ids = malloc(n * sizeof(int32_t));
    t->targets = malloc(n * sizeof(int32_t));
    t->segs = malloc(n * sizeof(int32_t));
    if (!t->ids || !t->targets || !t->segs)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    return BORA_OK;
}

bora_status tr_build(trainer *t, bora_config *root)
{
    return build(t, root);
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
    tr_json_kv(f, "hostname", host, 1);
    fprintf(f, "\"pid\": %ld, ", (long)getpid());
    tr_json_kv(f, "cwd", cwd, 1);
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
    /* bora runs reads the sqlite tracker's database: a run that leaves it out is not there. */
    int has_sqlite = 0;
    for (size_t i = 0; i < t->n_trackers; i++)
        has_sqlite |= !strcmp(t->trackers[i].name, "sqlite");
    if (!has_sqlite)
        bora_log(BORA_LOG_WARN,
                 "tracker list has no sqlite: this run will not appear in bora runs");
    bora_status st = bora_tracklog_start(t->trackers, t->n_trackers, &t->log);
    if (st != BORA_OK)
        return st;
    bora_tracklog_hparams(t->log, t->config_json);
    char *env = environment_json(t);
    bora_tracklog_environment(t->log, env ? env : "{}");
    free(env);
    return BORA_OK;
}

/* "1h02m", "3m05s", "42s". */
void tr_duration_text(double s, char *buf, size_t cap)
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
void tr_end_live_line(trainer *t)
{
    if (t->line_open) {
        fputc('\n', stdout);
        t->line_open = 0;
    }
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
    tr_end_live_line(t);
    printf("eval at step %" PRId64 ": loss %.4f  bpb %.4f  (%lld sequences, %lld tokens, %.2f s)\n",
           step, r->loss, r->bpb, (long long)r->sequences, (long long)r->tokens, r->seconds);
    fflush(stdout);
    bora_metric m[] = {{"eval/loss", r->loss}, {"eval/bpb", r->bpb}};
    bora_tracklog_log(t->log, step, m, 2);
    if (!t->wer)
        return BORA_OK;
    bora_wer w = {0};
    double secs = 0;
    if ((st = tr_wer_run(t, &w, &secs)) != BORA_OK)
        return st;
    printf("eval at step %" PRId64 ": WER %.2f%%  (%lld edits over %lld reference words, %lld "
           "clips transcribed greedily, %.2f s)\n",
           step, 100.0 * bora_wer_rate(&w), (long long)w.edits, (long long)w.ref_words,
           (long long)w.pairs, secs);
    fflush(stdout);
    bora_metric wm = {"eval/wer", bora_wer_rate(&w)};
    bora_tracklog_log(t->log, step, &wm, 1);
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
    if (st == BORA_OK && t->feats) /* an audio model: the same rows' clips */
        st = bora_loader_features(t->loader, step - 1, t->batch, 0, t->batch, t->feats);
    t->wait_s = bora_now_s() - w0;
    if (st != BORA_OK)
        return st;
    float scale = count ? (float)(1.0 / (double)count) : 0.0f;
    double total = 0;
    tr_model_metrics_begin(&t->model_metrics);
    for (int64_t m = 0; m < n_micro; m++) {
        size_t at = (size_t)m * cells;
        st = g_set_input(t->train, "input_ids", t->ids + at, bytes);
        if (st == BORA_OK)
            st = g_set_input(t->train, "targets", t->targets + at, bytes);
        if (st == BORA_OK && bora_inputs_reads(t->train, "segment_ids")) /* optional */
            st = g_set_input(t->train, "segment_ids", t->segs + at, bytes);
        if (st == BORA_OK && t->feats)
            st = g_set_input(t->train, "input_features", t->feats + (size_t)m * rows * t->feat_row,
                             (size_t)rows * t->feat_row * sizeof(float));
        if (st == BORA_OK)
            st = g_set_input(t->train, "loss_scale", &scale, sizeof scale);
        if (st == BORA_OK)
            st = g_run(t->train);
        double part = 0;
        if (st == BORA_OK)
            st = tr_model_metrics_read(t->train, &t->model_metrics, &part);
        if (st != BORA_OK)
            return bora_error_set(st, "step %" PRId64 ": %s", step,
                                  t->train->status ? t->train->error : bora_error_get());
        total += part;
    }
    *loss = total;
    if (!isfinite(total) && t->crash_on_nan)
        return BORA_ERR_INVALID;
    t->n_step_metrics = 0;
    if (t->hess_built && bora_hessian_due(&t->hess, step)) {
        /* the estimate at the step's parameters, folded into the optimizer's state before its
         * update */
        st = bora_hessian_step(&t->hess, step, lr, t->ids, t->targets, t->segs, rows, n_micro,
                               t->step_metrics, &t->n_step_metrics);
        if (st != BORA_OK)
            return st;
    }
    size_t n_opt = 0;
    st = bora_apply_step(&t->apply, step, lr, norm, t->step_metrics + t->n_step_metrics, &n_opt);
    t->n_step_metrics += n_opt;
    if (st != BORA_OK)
        return bora_error_set(st, "step %" PRId64 ": %s", step, bora_error_get());
    if (!isfinite(*norm) && t->crash_on_nan)
        return BORA_ERR_INVALID;
    return BORA_OK;
}

/* The model's scalar metrics after the step line's figures, when there are at most three
 * (vectors and longer lists go to the trackers only). */
static void print_model_scalars(trainer *t)
{
    const tr_model_metrics *m = &t->model_metrics;
    if (!m->n_scalars || m->n_scalars > 3)
        return;
    for (size_t i = 0; i < m->n; i++)
        if (m->scalar[i])
            printf("  %s %.4g", m->out[i].name + strlen("train/"), m->out[i].value);
}

static int run_loop(trainer *t, int64_t start)
{
    int64_t tokens = t->batch * t->seq_len;
    double last_save = bora_now_s(), first = 0, last = 0, began = bora_now_s();
    int64_t last_step = start;
    int have_eval = 0;
    if (t->world == 1 && tr_interrupted()) { /* several processes agree in the step */
        printf("interrupted before step %" PRId64 "\n", start + 1);
        return 130;
    }
    for (int64_t step = start + 1; step <= t->steps; step++) {
        double lr = bora_schedule_lr(&t->sched, step), loss = 0, norm = 0, t0 = bora_now_s();
        bora_status st = t->world > 1 ? tr_dp_step(t, step, lr, &loss, &norm)
                                      : step_once(t, step, lr, &loss, &norm);
        if (st != BORA_OK)
            tr_end_live_line(t);
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
        tr_model_metrics_values(&t->model_metrics);
        if (step == start + 1)
            first = loss;
        last = loss;
        if (t->live) {
            /* One line redrawn in place: step/total, loss, tokens/s and the time left. */
            double per_step = (bora_now_s() - began) / (double)(step - start);
            char eta[32];
            tr_duration_text(per_step * (double)(t->steps - step), eta, sizeof eta);
            printf("\r\033[Kstep %" PRId64 "/%" PRId64
                   "  loss %.4f  lr %.2e  %.0f tokens/s  ETA %s",
                   step, t->steps, loss, lr, (double)tokens / dt, eta);
            t->line_open = 1;
        } else {
            printf("step %" PRId64 "/%" PRId64
                   "  loss %.4f  lr %.3e  grad_norm %.4f  tokens/s %.0f",
                   step, t->steps, loss, lr, norm, (double)tokens / dt);
            print_model_scalars(t);
            fputc('\n', stdout);
        }
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
        if (t->world > 1) { /* the time the gradients' collectives took, waits included */
            bora_metric comm = {"dist/comm_s", t->dp_comm_s};
            bora_tracklog_log(t->log, step, &comm, 1);
        }
        if (t->n_step_metrics)
            bora_tracklog_log(t->log, step, t->step_metrics, t->n_step_metrics);
        if (t->model_metrics.n)
            bora_tracklog_log(t->log, step, t->model_metrics.out, t->model_metrics.n);
        /* read once: a signal between the save decision and the exit would skip the save; with
         * several processes, the ranks agreed on it in the step */
        int stop = t->world > 1 ? t->dp_stop : tr_interrupted();
        int due = step == t->steps || tr_permanent(t, step) ||
                  bora_now_s() - last_save >= t->save_interval || stop;
        int eval_due = t->has_val && (step % t->steps_per_eval == 0 || step == t->steps);
        /* With several processes, rank 0's clock decides (before it evaluates, so that no rank
         * waits on it with a deadline meanwhile), and with a sharded optimizer every rank sends
         * it its share of the state */
        if (t->world > 1 &&
            ((st = bora_dist_broadcast(&due, sizeof due, 0, "whether to save")) != BORA_OK ||
             (t->zero && due && (st = tr_zero_gather(t)) != BORA_OK))) {
            tr_end_live_line(t);
            bora_log(BORA_LOG_ERROR, "checkpoint: %s", bora_error_get());
            return 1;
        }
        /* rank 0 alone evaluates, logs and saves */
        if (t->eval && !t->rank && eval_due) {
            if (run_eval(t, step, &t->last_eval) != BORA_OK) {
                tr_end_live_line(t);
                bora_log(BORA_LOG_ERROR, "%s", bora_error_get());
                return 1;
            }
            have_eval = 1;
        }
        if (due && !t->rank) {
            if ((st = tr_save(t, step)) != BORA_OK) {
                tr_end_live_line(t);
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
        /* the others wait for rank 0's evaluation and save however long they take; rank 0
         * waits for them with the deadline, so a rank that stopped is still named */
        if (t->world > 1 && (due || eval_due) &&
            (st = bora_dist_barrier("rank 0's evaluation and checkpoint",
                                    t->rank ? 0 : bora_dist_get()->timeout_s)) != BORA_OK) {
            tr_end_live_line(t);
            bora_log(BORA_LOG_ERROR, "%s", bora_error_get());
            return 1;
        }
        if (t->zero) {
            free(t->store->state_host);
            t->store->state_host = NULL;
        }
        if (stop) {
            tr_end_live_line(t);
            printf("interrupted at step %" PRId64 "; run again with --trainer.id=%s to go on\n",
                   step, t->run_id);
            return 130;
        }
    }
    tr_end_live_line(t);
    if (start < t->steps) {
        printf("trained %" PRId64 " steps: loss %.4f -> %.4f\n", t->steps - start, first, last);
        double secs = bora_now_s() - began;
        bora_metric summary[] = {{"train/final_loss", last},
                                 {"train/steps", (double)t->steps},
                                 {"train/tokens", (double)t->steps * (double)tokens},
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

/* PaLM's model FLOPs per token, 6N + 12 L d T (N trainable parameters: a frozen table, as
 * Whisper's sinusoidal positions, is added, never multiplied nor differentiated; L layers, d the
 * width, T the context; the attention term needs the model's layer count and width keys), and the
 * backend's peak for throughput/mfu. A mixture of experts (a model with Hugging Face's
 * num_local_experts E and num_experts_per_tok k keys) runs each token through k of its E
 * experts, so N is the active count: the parameters outside the experts (those whose names
 * hold ".experts.") and k/E of the experts'. */
static void model_flops(trainer *t, bora_config *root, size_t params)
{
    int64_t layers = 0, width = 0, E = 0, k = 0;
    const char *wkey, *lkey;
    bora_model_shape(root, t->model_entry->ops->keys, &width, &layers, &wkey, &lkey);
    bora_model_experts(root, t->model_entry->ops->keys, &E, &k);
    size_t experts = 0;
    for (size_t i = 0; E > 0 && k > 0 && k <= E && i < t->store->n_slots; i++)
        if (strstr(t->store->slots[i].name, ".experts."))
            experts += t->store->slots[i].nbytes / bora_dtype_size(t->store->slots[i].dtype);
    double active = (double)(params - experts) + (double)experts * (double)k / (double)(E ? E : 1);
    double attention = 12.0 * (double)layers * (double)width * (double)t->seq_len;
    t->flops_per_token = 6.0 * active + attention;
    if (experts)
        printf("model FLOPs: %.4g per token (6·N_active + 12·L·d·T: N_active = %.0f of N = %zu, "
               "the %zu expert parameters at model.num_experts_per_tok %lld of "
               "model.num_local_experts %lld; model.%s %lld, model.%s %lld)\n",
               t->flops_per_token, active, params, experts, (long long)k, (long long)E, lkey,
               (long long)layers, wkey, (long long)width);
    else
        printf("model FLOPs: %.4g per token (6N + 12·L·d·T: model.%s %lld, model.%s %lld)\n",
               t->flops_per_token, lkey, (long long)layers, wkey, (long long)width);
    char cpu[256];
    tr_cpu_model(cpu, sizeof cpu);
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

void tr_teardown(trainer *t)
{
    bora_tracklog_finish(t->log, BORA_RUN_FAILED); /* when the run never reached its finish */
    for (size_t i = 0; i < t->n_trackers; i++)
        t->trackers[i].ops->destroy(t->trackers[i].t);
    free(t->trackers);
    if (t->apply_built)
        bora_apply_free(&t->apply);
    if (t->hess_built)
        bora_hessian_free(&t->hess);
    if (t->be_entry)
        tr_dp_free(t);
    tr_zero_free(t);
    bora_eval_free(t->eval);
    bora_transcriber_free(t->wer);
    bora_loader_free(t->val);
    tr_model_metrics_free(&t->model_metrics);
    g_graph_free(t->train);
    g_store_free(t->store);
    bora_opt_groups_free(&t->groups);
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
    free(t->feats);
    free(t->keep);
    free(t->config_json);
    free(t->record_json);
    free(t->determinism_json);
}

int bora_train(bora_cfg *cfg, bora_registry *reg, const bora_train_opts *opts)
{
    const bora_dist *dist = bora_dist_get();
    trainer t = {.cfg = cfg,
                 .reg = reg,
                 .force = opts && opts->force,
                 .rank = dist->rank,
                 .world = dist->size};
    bora_config *root = bora_cfg_root(cfg);
    int rc = 1, lock_fd = -1, made_run_dir = 0, made_base = 0;
    sig_watch watch;
    sig_watch_start(&watch);
    if (!tr_configure(&t, root))
        goto out;
    /* several processes: rank 0's run id (made from the clock when trainer.id is not given) */
    if (t.world > 1 && t.run_id == t.id_buf &&
        (bora_dist_broadcast(t.id_buf, sizeof t.id_buf, 0, "the run id") != BORA_OK ||
         bora_dist_broadcast(t.run_dir, sizeof t.run_dir, 0, "the run id") != BORA_OK)) {
        bora_log(BORA_LOG_ERROR, "%s", bora_error_get());
        goto out;
    }
    /* One process per run, from before any work: a second one would delete the first's saves,
     * and an unwritable directory is better found now than at the first save. A directory this
     * process made (the run's, and base_path) goes again at the end if no checkpoint reached it.
     * With several processes, rank 0 holds it and alone writes there. */
    struct stat run_dir_stat;
    if (!t.rank) {
        made_run_dir = stat(t.run_dir, &run_dir_stat) != 0;
        made_base = stat(t.base_path, &run_dir_stat) != 0;
        if (bora_ckpt_lock(t.run_dir, &lock_fd) != BORA_OK) {
            bora_log(BORA_LOG_ERROR, "%s", bora_error_get());
            goto out;
        }
    }
    if (build(&t, root) != BORA_OK || (t.world > 1 && tr_dp_setup(&t) != BORA_OK) ||
        tr_dp_open_data(&t, root) != BORA_OK || tr_make_record(&t) != BORA_OK) {
        bora_log(BORA_LOG_ERROR, "%s", bora_error_get());
        goto out;
    }
    size_t values = 0, frozen = 0;
    for (size_t i = 0; i < t.store->n_slots; i++) {
        size_t n = t.store->slots[i].nbytes / bora_dtype_size(t.store->slots[i].dtype);
        values += n;
        frozen += t.store->slots[i].flags & BORA_PARAM_FROZEN ? n : 0;
    }
    char frozen_note[96] = "";
    if (frozen)
        snprintf(frozen_note, sizeof frozen_note, " (%zu of them frozen)", frozen);
    printf("model %s: %zu parameters%s in %zu tensors; optimizer %s; backend %s\n",
           t.model_entry->ops->name, values, frozen_note, t.store->n_slots, t.opt_entry->ops->name,
           t.be_entry->ops->name);
    if (t.groups.n > 1) {
        char who[1024];
        bora_opt_groups_summary(&t.groups, who, sizeof who);
        printf("optimizer: %s\n", who);
    }
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
    if (t.shard && t.world == 1)
        printf("trainer.shard_optimizer: one process, nothing to share: it keeps the whole "
               "optimizer state\n");
    if (t.eval)
        printf("eval every %lld steps and at the end on %lld validation sequences\n",
               (long long)t.steps_per_eval,
               (long long)(t.max_eval_batches > 0 &&
                                   t.max_eval_batches * t.batch < bora_loader_windows(t.val)
                               ? t.max_eval_batches * t.batch
                               : bora_loader_windows(t.val)));
    if (!t.rank)
        model_flops(&t, root, values - frozen);
    int64_t start = 0;
    /* a sharded optimizer: rank 0 reads the whole state into host memory, tr_dp_sync shares it */
    if ((t.zero && !t.rank && tr_zero_host_state(&t) != BORA_OK) ||
        (!t.rank && tr_restore(&t, &start) != BORA_OK) ||
        (t.world > 1 && tr_dp_sync(&t, &start) != BORA_OK)) {
        bora_log(BORA_LOG_ERROR, "%s", bora_error_get());
        goto out;
    }
    fflush(stdout);
    if (!t.rank && open_trackers(&t, root) != BORA_OK) {
        bora_log(BORA_LOG_ERROR, "%s", bora_error_get());
        goto out;
    }
    /* mpirun gives its processes a terminal of its own, whatever it writes to */
    t.live = isatty(STDOUT_FILENO) && !getenv("BORA_NO_PROGRESS") && t.world == 1;
    rc = run_loop(&t, start);
    bora_tracklog_finish(t.log, rc == 0     ? BORA_RUN_FINISHED
                                : rc == 130 ? BORA_RUN_KILLED
                                            : BORA_RUN_FAILED);
    t.log = NULL;
out:
    tr_teardown(&t);
    sig_watch_stop(&watch);
    bora_ckpt_unlock(t.run_dir, lock_fd, made_run_dir);
    if (made_base)
        rmdir(t.base_path); /* only when empty: no other run's directory went there */
    return rc;
}

static int evaluate(bora_cfg *cfg, bora_registry *reg, const char *checkpoint, const char *hf,
                    int json, int64_t max_clips)
{
    trainer t = {.cfg = cfg, .reg = reg, .eval_only = 1, .hf_dir = hf, .wer_clips = max_clips};
    bora_config *root = bora_cfg_root(cfg);
    int rc = 1;
    char dir[4200];
    int64_t *steps = NULL;
    size_t n = 0;
    if (!tr_configure(&t, root))
        goto out;
    if (!t.has_val) {
        bora_log(BORA_LOG_ERROR, "eval: the configuration has no validation set (give "
                                 "data.validation_urls: [files])");
        goto out;
    }
    /* A run directory means its latest checkpoint. */
    snprintf(dir, sizeof dir, "%s", hf ? hf : checkpoint);
    if (!hf && bora_ckpt_list(checkpoint, &steps, &n) == BORA_OK && n)
        snprintf(dir, sizeof dir, "%s/step-%" PRId64, checkpoint, steps[n - 1]);
    free(steps);
    if (build(&t, root) != BORA_OK || tr_open_data(&t, root) != BORA_OK) {
        bora_log(BORA_LOG_ERROR, "%s", bora_error_get());
        goto out;
    }
    if ((hf ? bora_hf_load_weights(t.store, hf, t.model_entry->ops->name, 1)
            : bora_ckpt_load_model(t.store, dir)) != BORA_OK) {
        bora_log(BORA_LOG_ERROR, "eval: %s", bora_error_get());
        goto out;
    }
    bora_eval_result r;
    int64_t seqs = t.max_eval_batches > 0 ? t.max_eval_batches * t.batch : -1;
    if (bora_eval_run(t.eval, t.val, t.tok, seqs, &r) != BORA_OK) {
        bora_log(BORA_LOG_ERROR, "%s", bora_error_get());
        goto out;
    }
    bora_wer w = {0};
    double wer_s = 0;
    if (t.wer && tr_wer_run(&t, &w, &wer_s) != BORA_OK) {
        bora_log(BORA_LOG_ERROR, "eval (word error rate): %s", bora_error_get());
        goto out;
    }
    if (json) {
        fputs("{\"checkpoint\": ", stdout);
        bora_json_string(stdout, dir);
        fputs(", \"eval/loss\": ", stdout);
        bora_json_number(stdout, r.loss);
        fputs(", \"eval/bpb\": ", stdout);
        bora_json_number(stdout, r.bpb);
        printf(", \"sequences\": %lld, \"tokens\": %lld, \"bytes\": %lld", (long long)r.sequences,
               (long long)r.tokens, (long long)r.bytes);
        if (t.wer) {
            fputs(", \"eval/wer\": ", stdout);
            bora_json_number(stdout, bora_wer_rate(&w));
            printf(", \"wer_clips\": %lld, \"wer_edits\": %lld, \"wer_words\": %lld",
                   (long long)w.pairs, (long long)w.edits, (long long)w.ref_words);
        }
        puts("}");
    } else {
        printf("eval of %s: loss %.4f  bpb %.4f  (%lld sequences, %lld tokens, %lld bytes, "
               "%.2f s)\n",
               dir, r.loss, r.bpb, (long long)r.sequences, (long long)r.tokens, (long long)r.bytes,
               r.seconds);
        if (t.wer)
            printf("eval of %s: WER %.2f%%  (%lld edits over %lld reference words, %lld clips "
                   "transcribed greedily, %.2f s)\n",
                   dir, 100.0 * bora_wer_rate(&w), (long long)w.edits, (long long)w.ref_words,
                   (long long)w.pairs, wer_s);
    }
    rc = 0;
out:
    tr_teardown(&t);
    return rc;
}

int bora_evaluate(bora_cfg *cfg, bora_registry *reg, const char *checkpoint, int json,
                  int64_t max_clips)
{
    return evaluate(cfg, reg, checkpoint, NULL, json, max_clips);
}

int bora_evaluate_hf(bora_cfg *cfg, bora_registry *reg, const char *hf_dir, int json,
                     int64_t max_clips)
{
    return evaluate(cfg, reg, NULL, hf_dir, json, max_clips);
}
