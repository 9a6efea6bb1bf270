/* plugins/trackers/wandb — a tracker that sends the run to Weights & Biases (or any server that
 * speaks its API), through a spool on disk that training never waits for.
 *
 * The logging thread only appends to the spool (wandb.h says what it holds); a sender thread
 * (send.c) uploads it. A server that is down, slow or failing costs training nothing: lines
 * wait in the spool, finish() waits at most finish_timeout for them, and whatever is left is
 * uploaded later by `bora wandb sync RUN` (this tracker, created with sync: true). A run
 * resumed under the same id continues its spool: steps it already holds are not logged again,
 * so every step reaches the server exactly once.
 *
 * Keys and environment follow W&B's client and Levanter's WandbConfig: project, entity, name,
 * tags, group, notes, mode, resume, id; WANDB_API_KEY, WANDB_BASE_URL, WANDB_ENTITY,
 * WANDB_PROJECT and WANDB_MODE apply where the key is not given. */
#define _POSIX_C_SOURCE 200809L
#include "wandb.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

static const bora_key wandb_keys[] = {
    {"project", BORA_KEY_STRING, 0, "\"\"",
     "W&B project; empty: $WANDB_PROJECT, else \"uncategorized\""},
    {"entity", BORA_KEY_STRING, 0, "\"\"",
     "W&B user or team; empty: $WANDB_ENTITY, else the API key's default entity"},
    {"name", BORA_KEY_STRING, 0, "\"\"", "the run's display name; empty: the run id"},
    {"id", BORA_KEY_STRING, 0, "\"\"", "the W&B run id; empty: trainer.id"},
    {"tags", BORA_KEY_LIST, 0, "[]", "tags of the run (a list of strings)"},
    {"group", BORA_KEY_STRING, 0, "\"\"", "a group to put the run in"},
    {"notes", BORA_KEY_STRING, 0, "\"\"", "a description of the run"},
    {"mode", BORA_KEY_STRING, 0, "\"\"",
     "online, offline (spool only, for bora wandb sync) or disabled; empty: $WANDB_MODE, "
     "else online"},
    {"resume", BORA_KEY_STRING, 0, "allow",
     "allow (or auto): continue the run's spool if there is one; must: refuse to start without "
     "one; never: refuse to start with one"},
    {"dir", BORA_KEY_STRING, 0, "runs/{run_id}/wandb",
     "the spool directory; {run_id} is replaced by the run's id"},
    {"timeout", BORA_KEY_DURATION, 0, "30s", "how long one request may take before it is retried"},
    {"finish_timeout", BORA_KEY_DURATION, 0, "60s",
     "how long the end of a run waits for the spool to upload (at most 3s after SIGINT or "
     "SIGTERM); the rest is left for bora wandb sync"},
    {"sync", BORA_KEY_BOOL, 0, "false",
     "upload the spool a run left in dir and return (what bora wandb sync sets)"},
    {NULL, 0, 0, NULL, NULL},
};

enum { KILLED_WAIT_S = 3 };

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_start(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void wandb_path(const wandb *w, const char *name, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/%s", w->dir, name);
}

/* Write text to dir/name through a temporary file and a rename: a reader never sees half. */
static int write_atomic(const wandb *w, const char *name, const char *text, int durable)
{
    char path[4200], tmp[4300];
    wandb_path(w, name, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -1;
    int ok = fputs(text, f) >= 0 && fflush(f) == 0 && (!durable || fsync(fileno(f)) == 0);
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        remove(tmp);
        return -1;
    }
    return 0;
}

int wandb_state_write(wandb *w, int durable)
{
    char text[256];
    int n = snprintf(text, sizeof text, "sent %lld\nsummary %d\n", (long long)w->sent,
                     !wandb_summary_dirty(w));
    if (w->ended)
        n += snprintf(text + n, sizeof text - (size_t)n, "exitcode %d\ncomplete %d\n",
                      (int)w->exitcode, w->completed);
    return write_atomic(w, "state", text, durable);
}

static bora_status mkdirs(const bora_host *h, const char *path)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/", path);
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir(dir, 0777) != 0 && errno != EEXIST)
            return h->fail(h, BORA_ERR_IO, "cannot create directory '%s': %s", dir,
                           strerror(errno));
        *p = '/';
    }
    return BORA_OK;
}

static void json_number(FILE *out, double v)
{
    if (isfinite(v))
        fprintf(out, "%.17g", v);
    else
        fputs("null", out); /* JSON has no NaN or infinity */
}

static void json_string(FILE *out, const char *s)
{
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(out, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(out, "\\u%04x", *p);
        else
            fputc(*p, out);
    }
    fputc('"', out);
}

/* Set name's value (a later value for the same name replaces it, keeping its place). */
static int values_set(wandb_values *t, const char *name, double v)
{
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->names[i], name) == 0) {
            t->values[i] = v;
            return 0;
        }
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 16;
        char **names = realloc(t->names, cap * sizeof *names);
        if (!names)
            return -1;
        t->names = names;
        double *values = realloc(t->values, cap * sizeof *values);
        if (!values)
            return -1;
        t->values = values;
        t->cap = cap;
    }
    if (!(t->names[t->n] = strdup(name)))
        return -1;
    t->values[t->n++] = v;
    return 0;
}

static void values_clear(wandb_values *t)
{
    for (size_t i = 0; i < t->n; i++)
        free(t->names[i]);
    t->n = 0;
}

static void values_free(wandb_values *t)
{
    values_clear(t);
    free(t->names);
    free(t->values);
}

static int summary_set(wandb *w, const char *name, double v)
{
    return values_set(&w->sum, name, v);
}

/* The summary as one JSON object (malloc'd). */
static char *summary_json(const wandb *w)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return NULL;
    fputc('{', f);
    for (size_t i = 0; i < w->sum.n; i++) {
        if (i)
            fputc(',', f);
        json_string(f, w->sum.names[i]);
        fputc(':', f);
        json_number(f, w->sum.values[i]);
    }
    fputc('}', f);
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

/* Hand the current summary to the sender and keep it in summary.json. */
static void summary_publish(wandb *w, int write_file)
{
    char *text = summary_json(w);
    if (!text)
        return;
    if (write_file)
        write_atomic(w, "summary.json", text, 0);
    pthread_mutex_lock(&w->mu);
    free(w->summary_text);
    w->summary_text = text;
    w->summary_gen++;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->mu);
}

/* Find where line `sent` of history.jsonl starts, so the sender starts there without a scan. */
static bora_status sent_offset(wandb *w)
{
    char path[4200];
    wandb_path(w, "history.jsonl", path, sizeof path);
    FILE *f = w->sent > 0 ? fopen(path, "r") : NULL;
    if (!f)
        return BORA_OK;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    for (int64_t k = 0; k < w->sent && (len = getline(&line, &cap, f)) > 0; k++)
        w->sent_bytes += len;
    free(line);
    fclose(f);
    return BORA_OK;
}

/* Load a spool left by an earlier process: count its lines (cutting a torn last one, unless
 * syncing: the run may still be writing it), take the last step and runtime, the summary, and
 * what the server acknowledged. */
static bora_status spool_load(wandb *w)
{
    const bora_host *h = w->h;
    char path[4200];
    wandb_path(w, "history.jsonl", path, sizeof path);
    FILE *f = fopen(path, "r");
    if (!f)
        return errno == ENOENT
                   ? BORA_OK
                   : h->fail(h, BORA_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
    char *line = NULL, *last = NULL;
    size_t cap = 0;
    ssize_t len;
    off_t good = 0;
    while ((len = getline(&line, &cap, f)) > 0) {
        if (line[len - 1] != '\n')
            break;
        w->spooled++;
        good += len;
        free(last);
        last = strdup(line);
    }
    free(line);
    fclose(f);
    if (!w->sync && truncate(path, good) != 0) {
        free(last);
        return h->fail(h, BORA_ERR_IO, "cannot truncate '%s': %s", path, strerror(errno));
    }
    if (last) {
        json_object *o = json_tokener_parse(last), *v;
        if (!o) {
            free(last);
            return h->fail(h, BORA_ERR_INVALID,
                           "'%s': line %lld is not JSON: move the spool aside to start afresh",
                           path, (long long)w->spooled);
        }
        if (json_object_object_get_ex(o, "_step", &v))
            w->loaded_step = w->last_step = json_object_get_int64(v);
        if (json_object_object_get_ex(o, "_runtime", &v))
            w->runtime_base_s = json_object_get_double(v);
        json_object_put(o);
        free(last);
    }
    wandb_path(w, "summary.json", path, sizeof path);
    json_object *s = json_object_from_file(path);
    if (s && json_object_is_type(s, json_type_object)) {
        json_object_object_foreach(s, k, v) summary_set(w, k, json_object_get_double(v));
    }
    json_object_put(s);
    int summary_ok = 0;
    w->summary_gen = w->sum.n > 0;
    wandb_path(w, "state", path, sizeof path);
    if (!(f = fopen(path, "r")))
        return BORA_OK;
    char key[32];
    long long value;
    int lineno = 0, rc;
    while ((rc = fscanf(f, "%31s %lld", key, &value)) != EOF) {
        lineno++;
        if (rc != 2 || value < 0) {
            fclose(f);
            return h->fail(h, BORA_ERR_INVALID,
                           "'%s': line %d is not 'KEY NUMBER': remove the file to upload the "
                           "whole spool again (offsets make that safe)",
                           path, lineno);
        }
        if (strcmp(key, "sent") == 0)
            w->sent = value <= w->spooled ? value : w->spooled;
        else if (strcmp(key, "exitcode") == 0)
            w->exitcode = (int32_t)value, w->ended = 1;
        else if (strcmp(key, "complete") == 0)
            w->completed = value != 0;
        else if (strcmp(key, "summary") == 0)
            summary_ok = value != 0;
    }
    fclose(f);
    if (summary_ok)
        w->summary_acked = w->summary_gen;
    return sent_offset(w);
}

/* The UpsertBucket variables from the keys, as run.json (config filled by log_hparams). */
static bora_status write_run_json(wandb *w, const char *const *vals, json_object *tags,
                                  const char *config)
{
    static const char *const names[] = {"name",      "project", "entity", "displayName",
                                        "groupName", "notes",   NULL};
    json_object *vars = json_object_new_object(), *run = json_object_new_object();
    for (size_t i = 0; names[i]; i++)
        if (vals[i] && *vals[i])
            json_object_object_add(vars, names[i], json_object_new_string(vals[i]));
    if (tags && json_object_array_length(tags))
        json_object_object_add(vars, "tags", json_object_get(tags));
    if (config)
        json_object_object_add(vars, "config", json_object_new_string(config));
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) == 0 && *host)
        json_object_object_add(vars, "host", json_object_new_string(host));
    json_object_object_add(run, "base_url", json_object_new_string(w->base_url));
    json_object_object_add(run, "variables", vars);
    const char *text = json_object_to_json_string_ext(run, JSON_C_TO_STRING_PRETTY |
                                                               JSON_C_TO_STRING_NOSLASHESCAPE);
    int rc = write_atomic(w, "run.json", text, 1);
    json_object_put(run);
    return rc == 0 ? BORA_OK
                   : w->h->fail(w->h, BORA_ERR_IO, "cannot write '%s/run.json': %s", w->dir,
                                strerror(errno));
}

static void wandb_free(wandb *w)
{
    if (w->history)
        fclose(w->history);
    if (w->lock_fd >= 0)
        close(w->lock_fd);
    values_free(&w->sum);
    values_free(&w->row);
    free(w->summary_text);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->wake);
    pthread_cond_destroy(&w->progress);
    w->h->free(w->h, w);
}

/* Read a string key, falling back to an environment variable when empty. */
static bora_status key_or_env(const bora_host *h, const bora_config *cfg, const char *key,
                              const char *env, const char **out)
{
    bora_status st = h->config_string(h, cfg, key, "", out);
    if (st == BORA_OK && !**out && env && getenv(env))
        *out = getenv(env);
    return st;
}

static bora_status read_keys(wandb *w, const bora_config *cfg, const char **vals, json_object *tags,
                             const char **mode, const char **resume, const char **dir)
{
    const bora_host *h = w->h;
    bora_status st;
    const char *name, *id;
    if ((st = key_or_env(h, cfg, "project", "WANDB_PROJECT", &vals[1])) != BORA_OK ||
        (st = key_or_env(h, cfg, "entity", "WANDB_ENTITY", &vals[2])) != BORA_OK ||
        (st = h->config_string(h, cfg, "name", "", &name)) != BORA_OK ||
        (st = h->config_string(h, cfg, "id", "", &id)) != BORA_OK ||
        (st = h->config_string(h, cfg, "group", "", &vals[4])) != BORA_OK ||
        (st = h->config_string(h, cfg, "notes", "", &vals[5])) != BORA_OK ||
        (st = key_or_env(h, cfg, "mode", "WANDB_MODE", mode)) != BORA_OK ||
        (st = h->config_string(h, cfg, "resume", "allow", resume)) != BORA_OK ||
        (st = h->config_string(h, cfg, "dir", "runs/{run_id}/wandb", dir)) != BORA_OK ||
        (st = h->config_duration(h, cfg, "timeout", 30, &w->timeout_s)) != BORA_OK ||
        (st = h->config_duration(h, cfg, "finish_timeout", 60, &w->finish_timeout_s)) != BORA_OK ||
        (st = h->config_bool(h, cfg, "sync", 0, &w->sync)) != BORA_OK)
        return st;
    if (!*vals[1])
        vals[1] = "uncategorized";
    vals[0] = *id ? id : w->run_id;
    vals[3] = *name ? name : w->run_id;
    size_t n_tags = 0;
    if ((st = h->config_list_len(h, cfg, "tags", &n_tags)) != BORA_OK)
        return st;
    for (size_t i = 0; i < n_tags; i++) {
        const char *tag;
        if ((st = h->config_string(h, h->config_list_at(h, cfg, "tags", i), NULL, "", &tag)) !=
            BORA_OK)
            return st;
        json_object_array_add(tags, json_object_new_string(tag));
    }
    if (strcmp(*mode, "dryrun") == 0)
        *mode = "offline"; /* W&B's older word for it */
    if (!**mode)
        *mode = "online";
    if (strcmp(*mode, "online") != 0 && strcmp(*mode, "offline") != 0 &&
        strcmp(*mode, "disabled") != 0)
        return h->fail(h, BORA_ERR_CONFIG,
                       "mode: '%s' is not online, offline or disabled (from the key, or else "
                       "WANDB_MODE)",
                       *mode);
    if (strcmp(*resume, "auto") == 0)
        *resume = "allow";
    if (strcmp(*resume, "allow") != 0 && strcmp(*resume, "must") != 0 &&
        strcmp(*resume, "never") != 0)
        return h->fail(h, BORA_ERR_CONFIG, "resume: '%s' is not allow, auto, must or never",
                       *resume);
    if (!(w->timeout_s > 0) || !(w->finish_timeout_s >= 0))
        return h->fail(h, BORA_ERR_CONFIG, "timeout must be above 0 and finish_timeout at least 0");
    return BORA_OK;
}

static bora_status expand_dir(wandb *w, const char *pattern)
{
    size_t o = 0;
    for (const char *p = pattern; *p;) {
        const char *piece = p;
        size_t len = 1;
        if (strncmp(p, "{run_id}", 8) == 0)
            piece = w->run_id, len = strlen(w->run_id), p += 8;
        else
            p++;
        if (o + len + 1 >= sizeof w->dir)
            return w->h->fail(w->h, BORA_ERR_CONFIG, "dir: '%s' is too long", pattern);
        memcpy(w->dir + o, piece, len);
        o += len;
    }
    w->dir[o] = 0;
    return BORA_OK;
}

/* One writer per spool: two wandb trackers in one list (or two processes) writing the same dir
 * would interleave their lines and offsets. sync only reads, and takes no lock. */
static bora_status lock_dir(wandb *w)
{
    char path[4200];
    wandb_path(w, "lock", path, sizeof path);
    w->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (w->lock_fd < 0)
        return w->h->fail(w->h, BORA_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    if (flock(w->lock_fd, LOCK_EX | LOCK_NB) != 0)
        return w->h->fail(w->h, BORA_ERR_CONFIG,
                          "the spool '%s' is in use by another wandb tracker (the list names wandb "
                          "twice with one dir, or another run): give each its own dir",
                          w->dir);
    return BORA_OK;
}

static bora_status wandb_setup(wandb *w, const bora_config *cfg)
{
    const bora_host *h = w->h;
    const char *vals[6] = {0}, *mode, *resume, *dir;
    json_object *tags = json_object_new_array();
    bora_status st = read_keys(w, cfg, vals, tags, &mode, &resume, &dir);
    if (st == BORA_OK)
        st = expand_dir(w, dir);
    /* sync uploads what a run spooled whatever the mode says: asking for it is the intent */
    if (st != BORA_OK || (w->disabled = !w->sync && strcmp(mode, "disabled") == 0)) {
        json_object_put(tags);
        return st;
    }
    w->offline = strcmp(mode, "offline") == 0 && !w->sync;
    const char *base = getenv("WANDB_BASE_URL");
    snprintf(w->base_url, sizeof w->base_url, "%s", base && *base ? base : "https://api.wandb.ai");
    char path[4200];
    wandb_path(w, "run.json", path, sizeof path);
    if (w->sync) {
        json_object *run = json_object_from_file(path), *u;
        if (!run) {
            json_object_put(tags);
            return h->fail(h, BORA_ERR_INVALID,
                           "no W&B spool of run '%s' in '%s' (no readable run.json): give the "
                           "directory the run's tracker wrote to with --dir",
                           w->run_id, w->dir);
        }
        if (!(base && *base) && json_object_object_get_ex(run, "base_url", &u))
            snprintf(w->base_url, sizeof w->base_url, "%s", json_object_get_string(u));
        json_object_put(run);
    }
    size_t bl = strlen(w->base_url);
    while (bl > 0 && w->base_url[bl - 1] == '/')
        w->base_url[--bl] = 0;
    const char *key = getenv("WANDB_API_KEY");
    if (w->sync && !(key && *key)) {
        json_object_put(tags);
        return h->fail(h, BORA_ERR_CONFIG,
                       "WANDB_API_KEY is not set: set it to your API key (wandb.ai/authorize) "
                       "to upload '%s'",
                       w->dir);
    }
    if (!w->offline && !(key && *key)) {
        json_object_put(tags);
        return h->fail(h, BORA_ERR_CONFIG,
                       "WANDB_API_KEY is not set: set it to your API key (wandb.ai/authorize), "
                       "or set mode: offline (or WANDB_MODE=offline) to keep the run in '%s' "
                       "for `bora wandb sync` later",
                       w->dir);
    }
    snprintf(w->api_key, sizeof w->api_key, "%s", key ? key : "");
    if ((st = mkdirs(h, w->dir)) != BORA_OK || (!w->sync && (st = lock_dir(w)) != BORA_OK) ||
        (st = spool_load(w)) != BORA_OK) {
        json_object_put(tags);
        return st;
    }
    if (!w->sync && strcmp(resume, "never") == 0 && w->spooled > 0)
        st = h->fail(h, BORA_ERR_CONFIG,
                     "resume: never, but '%s' already holds %lld steps of run '%s': choose "
                     "another trainer.id, or move the directory aside",
                     w->dir, (long long)w->spooled, w->run_id);
    else if (!w->sync && strcmp(resume, "must") == 0 && w->spooled == 0)
        st = h->fail(h, BORA_ERR_CONFIG,
                     "resume: must, but '%s' holds no steps of run '%s' to resume", w->dir,
                     w->run_id);
    else if (!w->sync)
        st = write_run_json(w, vals, tags, NULL);
    json_object_put(tags);
    if (st != BORA_OK)
        return st;
    if (!w->sync) { /* a resumed run runs again until it finishes again */
        w->ended = 0;
        w->completed = 0;
    }
    w->upsert_gen = w->sync ? 1 : 0;
    w->summary_text = summary_json(w);
    wandb_path(w, "history.jsonl", path, sizeof path);
    if (!(w->history = fopen(path, "a")))
        return h->fail(h, BORA_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    setvbuf(w->history, NULL, _IONBF, 0); /* a line is written whole or cut back (row_write) */
    pthread_mutex_lock(&w->mu);
    wandb_state_write(w, 0);
    pthread_mutex_unlock(&w->mu);
    if (w->offline)
        return BORA_OK;
    pthread_once(&curl_once, curl_start);
    if (pthread_create(&w->sender, NULL, wandb_sender_main, w) != 0)
        return h->fail(h, BORA_ERR_IO, "cannot start the W&B sender thread");
    w->sender_running = 1;
    return BORA_OK;
}

static bora_status wandb_create(const bora_host *h, const bora_config *cfg, const char *run_id,
                                bora_tracker **out)
{
    wandb *w = h->alloc(h, sizeof *w, 16);
    if (!w)
        return h->fail(h, BORA_ERR_NOMEM, "out of memory");
    memset(w, 0, sizeof *w);
    w->h = h;
    w->last_step = w->loaded_step = w->row_step = -1;
    w->lock_fd = -1;
    w->started_s = wall_s();
    snprintf(w->run_id, sizeof w->run_id, "%s", run_id && *run_id ? run_id : "run");
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->wake, NULL);
    pthread_cond_init(&w->progress, NULL);
    bora_status st = wandb_setup(w, cfg);
    if (st != BORA_OK) {
        wandb_free(w);
        return st;
    }
    *out = (bora_tracker *)w;
    return BORA_OK;
}

/* W&B keeps a run's configuration as {"key": {"value": ...}} (its Python client's form). */
static bora_status wandb_log_hparams(bora_tracker *t, const char *config_json)
{
    wandb *w = (wandb *)t;
    if (w->disabled || w->sync)
        return BORA_OK;
    json_object *cfg = json_tokener_parse(config_json ? config_json : "{}");
    json_object *wrapped = json_object_new_object();
    if (cfg && json_object_is_type(cfg, json_type_object)) {
        json_object_object_foreach(cfg, k, v)
        {
            json_object *e = json_object_new_object();
            json_object_object_add(e, "value", json_object_get(v));
            json_object_object_add(wrapped, k, e);
        }
    }
    const char *text = json_object_to_json_string_ext(wrapped, JSON_C_TO_STRING_PLAIN |
                                                                   JSON_C_TO_STRING_NOSLASHESCAPE);
    char path[4200];
    wandb_path(w, "run.json", path, sizeof path);
    json_object *run = json_object_from_file(path), *vars;
    bora_status st = BORA_OK;
    if (run && json_object_object_get_ex(run, "variables", &vars)) {
        json_object_object_add(vars, "config", json_object_new_string(text));
        const char *all = json_object_to_json_string_ext(run, JSON_C_TO_STRING_PRETTY |
                                                                  JSON_C_TO_STRING_NOSLASHESCAPE);
        if (write_atomic(w, "run.json", all, 1) != 0)
            st = w->h->fail(w->h, BORA_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
    } else {
        st = w->h->fail(w->h, BORA_ERR_IO, "cannot read '%s'", path);
    }
    json_object_put(run);
    json_object_put(wrapped);
    json_object_put(cfg);
    pthread_mutex_lock(&w->mu);
    w->upsert_gen++;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->mu);
    return st;
}

/* Write the step being logged as one history line. The line is written whole or not at all:
 * on a failed write the file is cut back to where the line began, so one transient error
 * (a full disk) costs that step and not the rest of the run. */
static bora_status row_write(wandb *w)
{
    if (w->row_step < 0)
        return BORA_OK;
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (!m)
        return w->h->fail(w->h, BORA_ERR_NOMEM, "out of memory");
    fputc('{', m);
    for (size_t i = 0; i < w->row.n; i++) {
        json_string(m, w->row.names[i]);
        fputc(':', m);
        json_number(m, w->row.values[i]);
        fputc(',', m);
    }
    fprintf(m, "\"_step\":%lld,\"_runtime\":%.3f,\"_timestamp\":%.3f}\n", (long long)w->row_step,
            w->row_runtime_s, w->row_stamp_s);
    if (fclose(m) != 0) {
        free(text);
        return w->h->fail(w->h, BORA_ERR_NOMEM, "out of memory");
    }
    int64_t step = w->row_step;
    w->row_step = -1;
    /* Where the line begins: the file's size (it is appended to, and dir/lock makes this the
     * only writer); ftello is no use after a failed write, when stdio's idea of it is off. */
    FILE *f = w->history;
    struct stat sb;
    off_t at = fstat(fileno(f), &sb) == 0 ? sb.st_size : -1;
    if (at < 0 || fwrite(text, 1, len, f) != len || fflush(f) != 0) {
        int err = errno;
        clearerr(f);
        if (at >= 0 && ftruncate(fileno(f), at) != 0)
            err = errno;
        free(text);
        values_clear(&w->row);
        return w->h->fail(w->h, BORA_ERR_IO,
                          "cannot write step %lld to '%s/history.jsonl': %s; the spool keeps the "
                          "steps before it, later steps go on",
                          (long long)step, w->dir, strerror(err));
    }
    free(text);
    for (size_t i = 0; i < w->row.n; i++)
        summary_set(w, w->row.names[i], w->row.values[i]);
    summary_set(w, "_step", (double)step);
    summary_set(w, "_runtime", w->row_runtime_s);
    summary_set(w, "_timestamp", w->row_stamp_s);
    values_clear(&w->row);
    w->last_step = step;
    pthread_mutex_lock(&w->mu);
    w->spooled++;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->mu);
    summary_publish(w, 0);
    return BORA_OK;
}

static bora_status wandb_log(bora_tracker *t, int64_t step, const bora_metric *m, size_t n)
{
    wandb *w = (wandb *)t;
    if (w->disabled || w->sync)
        return BORA_OK;
    if (step <= w->loaded_step) {
        /* A resumed run logs again the steps between its checkpoint and where it was stopped;
         * the spool has them, and W&B keeps one line per step. */
        if (!w->skipped_reported++)
            BORA_INFO(w->h, "steps up to %lld are already in '%s'; not logging them again",
                      (long long)w->loaded_step, w->dir);
        return BORA_OK;
    }
    if (step != w->row_step && step <= (w->row_step > w->last_step ? w->row_step : w->last_step)) {
        BORA_INFO(w->h,
                  "step %lld arrived after step %lld was written; W&B keeps steps in order, "
                  "so it is not logged",
                  (long long)step, (long long)w->last_step);
        return BORA_OK;
    }
    bora_status st = BORA_OK;
    if (step != w->row_step) { /* a new step: the one before it is complete */
        st = row_write(w);
        w->row_step = step;
        w->row_runtime_s = w->runtime_base_s + (wall_s() - w->started_s);
        w->row_stamp_s = wall_s();
    }
    for (size_t i = 0; i < n; i++)
        if (values_set(&w->row, m[i].name, m[i].value) != 0)
            return w->h->fail(w->h, BORA_ERR_NOMEM, "out of memory");
    return st;
}

static bora_status wandb_log_summary(bora_tracker *t, const bora_metric *m, size_t n)
{
    wandb *w = (wandb *)t;
    if (w->disabled || w->sync)
        return BORA_OK;
    for (size_t i = 0; i < n; i++)
        if (summary_set(w, m[i].name, m[i].value) != 0)
            return w->h->fail(w->h, BORA_ERR_NOMEM, "out of memory");
    summary_publish(w, 1);
    return BORA_OK;
}

/* Make the spool durable: history, summary and what the server has acknowledged. */
static bora_status wandb_flush(bora_tracker *t)
{
    wandb *w = (wandb *)t;
    if (w->disabled || w->sync)
        return BORA_OK;
    bora_status st = row_write(w);
    if (st != BORA_OK)
        return st;
    if (fflush(w->history) != 0 || fsync(fileno(w->history)) != 0)
        return w->h->fail(w->h, BORA_ERR_IO, "cannot sync '%s/history.jsonl': %s", w->dir,
                          strerror(errno));
    char *text = summary_json(w);
    if (text)
        write_atomic(w, "summary.json", text, 1);
    free(text);
    pthread_mutex_lock(&w->mu);
    wandb_state_write(w, 1);
    pthread_mutex_unlock(&w->mu);
    return BORA_OK;
}

static void stop_sender(wandb *w)
{
    if (!w->sender_running)
        return;
    pthread_mutex_lock(&w->mu);
    __atomic_store_n(&w->stop, 1, __ATOMIC_RELAXED);
    pthread_cond_broadcast(&w->wake);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->sender, NULL);
    w->sender_running = 0;
}

/* Record how the run ended, then give the sender finish_timeout to upload the rest. */
static bora_status wandb_finish(bora_tracker *t, int32_t status)
{
    wandb *w = (wandb *)t;
    if (w->disabled)
        return BORA_OK;
    bora_status st = BORA_OK;
    if (!w->sync) {
        st = wandb_flush(t);
        pthread_mutex_lock(&w->mu);
        w->ended = 1;
        /* W&B's exit codes: 0 finished, 1 failed, 255 interrupted (as its Python client). */
        w->exitcode = status == BORA_RUN_FINISHED ? 0 : status == BORA_RUN_KILLED ? 255 : 1;
        wandb_state_write(w, 1);
        pthread_cond_signal(&w->wake);
        pthread_mutex_unlock(&w->mu);
    }
    if (w->offline) {
        BORA_INFO(w->h, "offline: %lld steps kept in '%s'; upload them with `bora wandb sync %s`",
                  (long long)w->spooled, w->dir, w->run_id);
        return st;
    }
    /* A run stopped by a signal is being asked to go away: wait a little, not finish_timeout;
     * what is left stays in the spool for bora wandb sync. */
    double wait_s = w->finish_timeout_s;
    if (status == BORA_RUN_KILLED && wait_s > KILLED_WAIT_S)
        wait_s = KILLED_WAIT_S;
    double deadline = wall_s() + wait_s;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        int done = w->sent == w->spooled && !wandb_summary_dirty(w) &&
                   w->upserted >= w->upsert_gen && (w->ended ? w->completed : w->upserted > 0);
        if (done || w->gave_up || wall_s() >= deadline)
            break;
        double t_end = deadline < wall_s() + 0.5 ? deadline : wall_s() + 0.5;
        struct timespec ts = {(time_t)t_end, (long)((t_end - floor(t_end)) * 1e9)};
        pthread_cond_timedwait(&w->progress, &w->mu, &ts);
    }
    int done = w->sent == w->spooled && !wandb_summary_dirty(w) &&
               (w->ended ? w->completed : w->upserted > 0);
    int64_t left = w->spooled - w->sent;
    char why[512];
    snprintf(why, sizeof why, "%s", w->last_error[0] ? w->last_error : "no answer yet");
    pthread_mutex_unlock(&w->mu);
    stop_sender(w);
    pthread_mutex_lock(&w->mu);
    wandb_state_write(w, 1);
    pthread_mutex_unlock(&w->mu);
    if (!done && st == BORA_OK && left)
        st = w->h->fail(w->h, BORA_ERR_IO,
                        "%lld of %lld steps not uploaded to W&B (%s); they are kept in '%s': "
                        "`bora wandb sync %s` uploads them",
                        (long long)left, (long long)w->spooled, why, w->dir, w->run_id);
    else if (!done && st == BORA_OK)
        st = w->h->fail(w->h, BORA_ERR_IO,
                        "every step is on W&B but not the run's end (%s); `bora wandb sync %s` "
                        "sends it from '%s'",
                        why, w->run_id, w->dir);
    return st;
}

static void wandb_destroy(bora_tracker *t)
{
    wandb *w = (wandb *)t;
    stop_sender(w);
    wandb_free(w);
}

static const bora_tracker_ops wandb_ops = {
    .hdr = {sizeof(bora_tracker_ops), BORA_KIND_TRACKER, "wandb",
            "Weights & Biases, through a spool that never slows training", wandb_keys},
    .create = wandb_create,
    .log_hparams = wandb_log_hparams,
    .log = wandb_log,
    .log_summary = wandb_log_summary,
    .finish = wandb_finish,
    .destroy = wandb_destroy,
    .flush = wandb_flush,
};

static bora_status wandb_init(const bora_host *h)
{
    return h->add(h, &wandb_ops.hdr);
}

BORA_PLUGIN_DEFINE("wandb", "0.1.0", wandb_init, NULL)
