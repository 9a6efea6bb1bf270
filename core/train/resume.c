/* core/train/resume.c — what a checkpoint records, saving one, and resuming from one (see
 * internal.h). */
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

/* ---- what a checkpoint records ------------------------------------------------------------- */

void tr_cpu_model(char *buf, size_t cap)
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

void tr_json_kv(FILE *f, const char *key, const char *value, int comma)
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

bora_status tr_make_record(trainer *t)
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
    tr_json_kv(f, "host", buf, 1);
    tr_cpu_model(buf, sizeof buf);
    tr_json_kv(f, "cpu", buf, 1);
    cpu_isa(buf, sizeof buf);
    tr_json_kv(f, "isa", buf, 1);
    snprintf(buf, sizeof buf, "%s: %s", t->be_entry->ops->name, backend);
    tr_json_kv(f, "backend", buf, 1);
    plugin_line(buf, sizeof buf, t->be_entry);
    tr_json_kv(f, "backend_plugin", buf, 1);
    plugin_line(buf, sizeof buf, t->model_entry);
    tr_json_kv(f, "model_plugin", buf, 1);
    plugin_line(buf, sizeof buf, t->opt_entry);
    tr_json_kv(f, "optimizer_plugin", buf, t->groups.n > 1);
    if (t->groups.n > 1) {
        /* which parameters each group took: a change of the model's names or of the groups'
         * selectors shows here */
        fputs("\"optimizer_groups\": [", f);
        for (size_t k = 1; k < t->groups.n; k++) {
            char line[1400];
            plugin_line(buf, sizeof buf, t->groups.g[k].entry);
            snprintf(line, sizeof line, "groups[%zu]: %s for %zu parameters (%s)", k - 1,
                     t->groups.g[k].entry->ops->name, t->groups.g[k].n_params, buf);
            bora_json_string(f, line);
            fputs(k + 1 < t->groups.n ? ", " : "", f);
        }
        fputs("]", f);
    }
    fputs("}", f);
    if (fclose(f) != 0 || !text) {
        free(text);
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    }
    t->record_json = text;
    /* The resolved configuration, as JSON. */
    text = NULL;
    f = open_memstream(&text, &len);
    if (!f)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    bora_cfg_write_json(bora_cfg_root(t->cfg), f);
    if (fclose(f) != 0 || !text) {
        free(text);
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    }
    t->config_json = text;
    return BORA_OK;
}

/* The record with the digest of the data's content: made when first needed (the first save, or
 * a resume's comparison), not at start, since a source not yet tokenized is read in full for
 * it (for a URL, a second download) and training starts before the cache is complete. By a
 * fresh run's first save most shards hold their source's digest. A source that cannot be read
 * stops the run: a wrong digest in a checkpoint would refuse every resume from it. */
static bora_status make_data_record(trainer *t)
{
    if (t->determinism_json)
        return BORA_OK;
    uint64_t hash;
    bora_status st = bora_loader_hash(t->loader, &hash);
    if (st != BORA_OK)
        return bora_error_set(st,
                              "data: cannot take the digest of the data's content that a "
                              "checkpoint records: %s; make the source readable and run again "
                              "(a resume goes on from the last checkpoint)",
                              bora_error_get());
    char *text = NULL, buf[128];
    size_t len = 0, n = strlen(t->record_json);
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    fwrite(t->record_json, 1, n - 1, f); /* without its closing brace */
    fputs(", ", f);
    snprintf(buf, sizeof buf, "fnv:%016" PRIx64 " (the data's content)", hash);
    tr_json_kv(f, "data", buf, 0);
    fputs("}", f);
    if (fclose(f) != 0 || !text) {
        free(text);
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    }
    t->determinism_json = text;
    return BORA_OK;
}

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
    fprintf(f, ",\n  \"permanent\": %s", tr_permanent(t, step) ? "true" : "false");
    /* Initialisation and data order are counter-based functions of (seed, name, index) and
     * (seed, batch): the seed and the step are the whole random state. */
    fprintf(f,
            ",\n  \"rng\": {\"generator\": \"philox4x32-10\", \"seed\": %" PRId64
            ", \"next_batch\": %" PRId64 "},\n",
            t->seed, step);
    fprintf(f, "  \"determinism\": %s,\n  \"config\": %s\n}\n", t->determinism_json,
            t->config_json);
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

/* Configuration keys that change nothing a step computes: who logs, where checkpoints go, how
 * many clips an evaluation transcribes, and how the token cache is kept (where, by how many
 * threads, whether rebuilt: the data record holds the digest of its content). */
static int ignorable(const char *path)
{
    if (!strncmp(path, "config.", 7))
        path += 7;
    static const char *const keys[] = {
        "trainer.tracker",         "trainer.checkpointer", "trainer.id",
        "trainer.load_checkpoint", "trainer.crash_on_nan", "trainer.shard_optimizer",
        "trainer.eval_wer_clips",  "data.cache_dir",       "trainer.initialize_from_hf",
        "data.cache_workers",      "data.cache_rebuild",   NULL};
    for (const char *const *k = keys; *k; k++) {
        size_t n = strlen(*k);
        if (!strncmp(path, *k, n) && (path[n] == 0 || path[n] == '.' || path[n] == '['))
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
    if (json_object_is_type(a, json_type_array) && json_object_is_type(b, json_type_array) &&
        json_object_array_length(a) == json_object_array_length(b)) {
        /* item by item: a changed key of optimizer.groups[1] is named as such */
        for (size_t i = 0; i < json_object_array_length(a); i++) {
            char sub[512];
            snprintf(sub, sizeof sub, "%s[%zu]", path, i);
            diff_json(json_object_array_get_idx(a, i), json_object_array_get_idx(b, i), sub, out,
                      n);
        }
        return;
    }
    if (json_object_equal(a, b) || ignorable(path))
        return;
    /* a key newer than the checkpoint, at a value that changes nothing (optimizer.groups: []) */
    if (!a && b &&
        (json_object_is_type(b, json_type_null) ||
         (json_object_is_type(b, json_type_array) && !json_object_array_length(b))))
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

/* Compare a checkpoint's record and configuration with this run's, reading only its
 * trainer.json. *differs is set when the refusal is a configuration that differs (no earlier
 * checkpoint of the run would do better), not an unreadable record. */
static bora_status check_resume(trainer *t, const char *dir, int64_t *step, int *differs)
{
    *differs = 0;
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
    json_object *now_rec = json_tokener_parse(t->determinism_json);
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
        *differs = !t->force;
        bora_log(t->force ? BORA_LOG_WARN : BORA_LOG_ERROR,
                 "%s was made by a run that differs from this one, so the result would not be "
                 "the same bits:%s",
                 dir, report ? report : "");
        st = t->force ? BORA_OK
                      : bora_error_set(BORA_ERR_INVALID,
                                       "not resuming; pass --force to resume anyway, despite "
                                       "these differences (every tensor must keep its shape), "
                                       "or give another trainer.id to start afresh");
    }
    free(report);
    json_object_put(now_rec);
    json_object_put(now_conf);
    json_object_put(saved);
    return st;
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

bora_status tr_save(trainer *t, int64_t step)
{
    char dir[4200];
    /* Every metric up to this step is made durable first: a run resumed from this checkpoint
     * will not log these steps again. */
    double t0 = bora_now_s();
    size_t queued = bora_tracklog_flush(t->log);
    tr_end_live_line(t);
    if (bora_now_s() - t0 > 1.0)
        printf("checkpoint: waited %.1f s for the trackers to take %zu queued calls\n",
               bora_now_s() - t0, queued);
    fflush(stdout);
    bora_status st = make_data_record(t);
    if (st != BORA_OK)
        return st;
    char *json = trainer_json(t, step);
    if (!json)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    t0 = bora_now_s();
    printf("checkpoint: saving step %" PRId64 " to %s/step-%" PRId64 "\n", step, t->run_dir, step);
    fflush(stdout);
    st = bora_ckpt_save(t->store, t->apply.slots, t->run_dir, step, json, dir, sizeof dir);
    free(json);
    if (st != BORA_OK) {
        /* The previous checkpoints stay: none is removed before a save succeeds. */
        char why[1024];
        snprintf(why, sizeof why, "%s", bora_error_get());
        int64_t *steps, last = -1;
        size_t n;
        if (bora_ckpt_list(t->run_dir, &steps, &n) == BORA_OK) {
            if (n)
                last = steps[n - 1];
            free(steps);
        }
        if (last < 0)
            return bora_error_set(st, "step %" PRId64 " not saved: %s; run %s has no checkpoint",
                                  step, why, t->run_id);
        return bora_error_set(
            st, "step %" PRId64 " not saved: %s; the last checkpoint, %s/step-%" PRId64 ", is kept",
            step, why, t->run_dir, last);
    }
    printf("checkpoint: saved %s (%.2f s)%s\n", dir, bora_now_s() - t0,
           tr_permanent(t, step) ? "" : " (temporary: the next save replaces it)");
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

/* Move a checkpoint that fails its checks aside, under a name that is not a step's, for a look;
 * aside gets the new name. */
static bora_status set_aside(const char *dir, char *aside, size_t cap)
{
    for (int k = 1; k < 100; k++) {
        snprintf(aside, cap, k == 1 ? "%s.damaged" : "%s.damaged-%d", dir, k);
        if (access(aside, F_OK) != 0 && rename(dir, aside) == 0)
            return BORA_OK;
    }
    return bora_error_set(BORA_ERR_IO, "cannot move %s aside: %s", dir, strerror(errno));
}

/* Resume from the run's latest checkpoint, or start from load_checkpoint, or from scratch.
 * *start gets the last step already done. The record is compared first (trainer.json only): a
 * configuration that differs is refused, listing the differences, unless --force. Then the
 * tensors are loaded: a checkpoint that does not fit the model (a shape that differs) is
 * refused; one that is damaged (digests, non-finite values, step, unreadable files) is refused
 * naming the newest earlier checkpoint that passes its checks, and --force resumes from that one,
 * setting every newer one aside as step-N.damaged (they all failed), so that the next start
 * does not meet them again. */
bora_status tr_restore(trainer *t, int64_t *start)
{
    *start = 0;
    bora_ckpt_clean(t->run_dir); /* this process holds the run's lock */
    int64_t *steps;
    size_t n;
    bora_status st = bora_ckpt_list(t->run_dir, &steps, &n);
    if (st != BORA_OK)
        return st;
    if (n) {
        char dir[4200];
        int64_t step = 0;
        int differs = 0;
        snprintf(dir, sizeof dir, "%s/step-%" PRId64, t->run_dir, steps[n - 1]);
        if ((st = make_data_record(t)) != BORA_OK) {
            free(steps);
            return st;
        }
        st = check_resume(t, dir, &step, &differs);
        if (st == BORA_OK)
            st = bora_ckpt_load(t->store, t->apply.slots, dir);
        if (st != BORA_OK && differs) {
            free(steps);
            return st; /* the differences are listed; an earlier checkpoint would differ too */
        }
        if (st == BORA_ERR_CONFIG) {
            char why[1024];
            snprintf(why, sizeof why, "%s", bora_error_get());
            /* the model fits, so the optimizer's state slots are what changed */
            if (bora_ckpt_verify(t->store, NULL, dir) == BORA_OK) {
                free(steps);
                return bora_error_set(
                    st,
                    "cannot resume from %s: %s: the optimizer state does not fit "
                    "optimizer.groups (a parameter's optimizer, and with it its state, changed); "
                    "restore the groups it was saved with, or give another trainer.id to start "
                    "afresh%s",
                    dir, why,
                    t->force ? " (--force resumes past changed group keys only while every "
                               "parameter keeps its optimizer's state)"
                             : "");
            }
            bora_error_set(st, "%s", why);
            free(steps);
            return bora_error_set(st,
                                  "cannot resume from %s: %s: the checkpoint does not fit this "
                                  "configuration's model%s; give another trainer.id to start "
                                  "afresh",
                                  dir, bora_error_get(),
                                  t->force ? " (--force resumes despite configuration "
                                             "differences only while every tensor keeps its shape)"
                                           : "");
        }
        if (st != BORA_OK) {
            char why[1024], good[4200] = "";
            size_t g = n - 1; /* the index of the one to resume from */
            snprintf(why, sizeof why, "%s", bora_error_get());
            for (size_t i = n - 1; i-- > 0 && !*good;) {
                snprintf(good, sizeof good, "%s/step-%" PRId64, t->run_dir, steps[i]);
                if (bora_ckpt_verify(t->store, t->apply.slots, good) != BORA_OK)
                    *good = 0;
                else
                    g = i;
            }
            size_t bad = n - 1 - g;
            if (!*good || !t->force) {
                free(steps);
                if (!*good)
                    return bora_error_set(st,
                                          "cannot resume from %s: %s (and no earlier "
                                          "checkpoint of run %s passes its checks)",
                                          dir, why, t->run_id);
                return bora_error_set(st,
                                      "cannot resume from %s: %s; pass --force to resume from "
                                      "%s instead (it sets the %zu newer checkpoint%s that fail "
                                      "their checks aside as step-N.damaged)",
                                      dir, why, good, bad, bad == 1 ? "" : "s");
            }
            for (size_t j = n; j-- > g + 1;) {
                char failed[4200], aside[4300];
                snprintf(failed, sizeof failed, "%s/step-%" PRId64, t->run_dir, steps[j]);
                bora_status moved = set_aside(failed, aside, sizeof aside);
                if (moved != BORA_OK) {
                    free(steps);
                    return moved;
                }
                if (j == n - 1)
                    bora_log(BORA_LOG_WARN,
                             "not resuming from %s: %s; --force: resuming from %s (%s kept)",
                             failed, why, good, aside);
                else
                    bora_log(BORA_LOG_WARN,
                             "%s fails its checks too; --force: kept as %s, out of the way", failed,
                             aside);
            }
            snprintf(dir, sizeof dir, "%s", good);
            if ((st = check_resume(t, dir, &step, &differs)) == BORA_OK &&
                (st = bora_ckpt_load(t->store, t->apply.slots, dir)) != BORA_OK)
                st = bora_error_set(st, "cannot resume from %s: %s", dir, bora_error_get());
            if (st != BORA_OK) {
                free(steps);
                return st;
            }
        }
        free(steps);
        *start = step;
        printf("resuming run %s from %s (step %" PRId64 " of %" PRId64 ")\n", t->run_id, dir, step,
               t->steps);
        return BORA_OK;
    }
    free(steps);
    if (t->hf_dir) {
        if ((st = bora_hf_load_weights(t->store, t->hf_dir, t->model_entry->ops->name, 0)) !=
            BORA_OK)
            return bora_error_set(st, "trainer.initialize_from_hf: %s", bora_error_get());
        printf("starting run %s from the Hugging Face weights in %s\n", t->run_id, t->hf_dir);
        return BORA_OK;
    }
    if (*t->load_checkpoint) {
        if ((st = bora_ckpt_load_model(t->store, t->load_checkpoint)) != BORA_OK)
            return bora_error_set(st, "trainer.load_checkpoint: %s", bora_error_get());
        printf("starting run %s from the weights in %s\n", t->run_id, t->load_checkpoint);
        return BORA_OK;
    }
    printf("starting run %s (checkpoints in %s)\n", t->run_id, t->run_dir);
    return BORA_OK;
}
