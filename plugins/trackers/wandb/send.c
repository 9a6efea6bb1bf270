/* plugins/trackers/wandb/send.c — the sender thread: uploads the spool with W&B's own protocol.
 *
 * What it sends is what W&B's clients send (recorded from the npm client @wandb/sdk 0.5.1 in
 * tests/data/wandb/npm-sdk-0.5.1.jsonl): a Viewer query when no entity is set (the API key's
 * default entity), the UpsertBucket mutation to create or resume the run, then POSTs to
 * /files/<entity>/<project>/<run>/file_stream of
 *   {"files": {"wandb-history.jsonl": {"offset": N, "content": [line, ...]},
 *              "wandb-summary.json": {"offset": 0, "content": [summary]}}}
 * and, when the run has ended and every line is acknowledged, {"complete": true,
 * "exitcode": E}. Each request carries Basic auth "api:<key>".
 *
 * Failures never reach training: a refused connection, a timeout, a 5xx, 408 or 429 is retried
 * after 1, 2, 4 ... 30 s (a Retry-After header is honoured), and meanwhile lines only pile up
 * in the spool. Other answers (401, 403, 404) cannot be mended by retrying: the sender stops,
 * keeping the spool for `bora wandb sync`. Posts are batched: at most one a second while the run
 * is live, up to 1,000 lines or 4 MiB each. */
#define _POSIX_C_SOURCE 200809L
#include "wandb.h"

#include <curl/curl.h>
#include <errno.h>
#include <json-c/json.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

enum { SENT_OK, SENT_RETRY, SENT_REFUSED };

/* An answer echoes the run's config, which can be large; past MAX_ANSWER it is cut, and a cut
 * answer that cannot be read is retried like any other failed request. */
enum { MAX_LINES = 1000, MAX_POST_BYTES = 4 << 20, MAX_ANSWER = 64 << 20 };

/* The documents W&B's clients send, character for character. */
static const char viewer_query[] =
    "\n    query Viewer {\n  viewer {\n    id\n    entity\n    flags\n    teams {\n      edges {\n"
    "        node {\n          name\n        }\n      }\n    }\n  }\n}\n    ";
static const char upsert_query[] =
    "\n    mutation UpsertBucket($id: String, $name: String, $project: String, $entity: String, "
    "$groupName: String, $description: String, $displayName: String, $notes: String, $commit: "
    "String, $config: JSONString, $host: String, $debug: Boolean, $program: String, $repo: "
    "String, $jobType: String, $state: String, $sweep: String, $tags: [String!], "
    "$summaryMetrics: JSONString) {\n  upsertBucket(\n    input: {id: $id, name: $name, "
    "groupName: $groupName, modelName: $project, entityName: $entity, description: "
    "$description, displayName: $displayName, notes: $notes, config: $config, commit: $commit, "
    "host: $host, debug: $debug, jobProgram: $program, jobRepo: $repo, jobType: $jobType, "
    "state: $state, sweep: $sweep, tags: $tags, summaryMetrics: $summaryMetrics}\n  ) {\n    "
    "bucket {\n      id\n      name\n      displayName\n      description\n      config\n      "
    "sweepName\n      project {\n        id\n        name\n        entity {\n          id\n     "
    "     name\n        }\n      }\n    }\n    inserted\n  }\n}\n    ";

typedef struct answer {
    char *body; /* NUL-terminated; grows as the answer arrives */
    size_t len, cap;
    double retry_after_s;
    wandb *w;
} answer;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
    answer *a = arg;
    size_t len = size * n;
    if (a->len + len + 1 > a->cap && a->len + len + 1 <= MAX_ANSWER) {
        size_t cap = a->cap ? a->cap : 4096;
        while (cap < a->len + len + 1)
            cap *= 2;
        char *body = realloc(a->body, cap);
        if (body)
            a->body = body, a->cap = cap;
    }
    size_t room = a->cap > a->len ? a->cap - 1 - a->len : 0;
    memcpy(a->body + a->len, p, len < room ? len : room);
    a->len += len < room ? len : room;
    a->body[a->len] = 0;
    return len;
}

static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
    answer *a = arg;
    size_t len = size * n;
    if (len > 12 && strncasecmp(p, "Retry-After:", 12) == 0) {
        double s = strtod(p + 12, NULL); /* seconds; an HTTP date reads as 0 and is ignored */
        if (s > 0 && s < 3600)
            a->retry_after_s = s;
    }
    return len;
}

/* Abort a transfer in flight when the tracker is told to stop. */
static int on_progress(void *arg, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
    (void)a, (void)b, (void)c, (void)d;
    answer *ans = arg;
    return __atomic_load_n(&ans->w->stop, __ATOMIC_RELAXED) ? 1 : 0;
}

/* Keep "what: detail" as the reason the spool is not uploaded yet. */
static void set_error(wandb *w, const char *what, const char *detail)
{
    pthread_mutex_lock(&w->mu);
    snprintf(w->last_error, sizeof w->last_error, "%.200s: %.300s", what, detail);
    pthread_mutex_unlock(&w->mu);
}

static void base64(const char *in, char *out, size_t cap)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t n = strlen(in), o = 0;
    for (size_t i = 0; i < n && o + 5 < cap; i += 3) {
        unsigned v = (unsigned char)in[i] << 16;
        if (i + 1 < n)
            v |= (unsigned char)in[i + 1] << 8;
        if (i + 2 < n)
            v |= (unsigned char)in[i + 2];
        out[o++] = tab[(v >> 18) & 63];
        out[o++] = tab[(v >> 12) & 63];
        out[o++] = i + 1 < n ? tab[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? tab[v & 63] : '=';
    }
    out[o] = 0;
}

/* POST body to base_url + path. */
static int post(wandb *w, CURL *c, const char *path, const char *body, answer *a)
{
    char url[2048], auth[600], cred[300];
    snprintf(url, sizeof url, "%s%s", w->base_url, path);
    snprintf(cred, sizeof cred, "api:%s", w->api_key);
    strcpy(auth, "Authorization: Basic ");
    base64(cred, auth + strlen(auth), sizeof auth - strlen(auth));
    struct curl_slist *hd = curl_slist_append(NULL, auth);
    hd = curl_slist_append(hd, "Content-Type: application/json");
    hd = curl_slist_append(hd, "Accept: application/json");
    a->len = 0;
    a->body[0] = 0;
    a->retry_after_s = 0;
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "bora-wandb/0.1.0");
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)(w->timeout_s * 1000));
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)(w->timeout_s * 1000));
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, a);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, a);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, a);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    CURLcode rc = curl_easy_perform(c);
    curl_slist_free_all(hd);
    if (rc != CURLE_OK) {
        set_error(w, url, curl_easy_strerror(rc));
        return SENT_RETRY;
    }
    long code = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    if (code >= 200 && code < 300)
        return SENT_OK;
    char detail[300];
    snprintf(detail, sizeof detail, "HTTP %ld %.200s", code, a->body);
    set_error(w, url, detail);
    return code == 408 || code == 429 || code >= 500 ? SENT_RETRY : SENT_REFUSED;
}

static char *to_text(json_object *o)
{
    const char *s =
        json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    return s ? strdup(s) : NULL;
}

static const char *json_str_at(json_object *o, const char *const *path)
{
    for (; *path && o; path++)
        if (!json_object_object_get_ex(o, *path, &o))
            return NULL;
    return o && json_object_is_type(o, json_type_string) ? json_object_get_string(o) : NULL;
}

/* Resolve the entity (a Viewer query when none is set), then UpsertBucket with run.json. */
static int upsert(wandb *w, CURL *c, answer *a)
{
    char path[4200];
    wandb_path(w, "run.json", path, sizeof path);
    json_object *run = json_object_from_file(path), *vars = NULL;
    if (!run || !json_object_object_get_ex(run, "variables", &vars)) {
        json_object_put(run);
        set_error(w, path, "cannot be read: it should hold the run's variables");
        return SENT_REFUSED;
    }
    json_object *ent = NULL;
    const char *entity =
        json_object_object_get_ex(vars, "entity", &ent) ? json_object_get_string(ent) : NULL;
    if (!entity || !*entity) {
        json_object *q = json_object_new_object();
        json_object_object_add(q, "query", json_object_new_string(viewer_query));
        json_object_object_add(q, "variables", json_object_new_object());
        json_object_object_add(q, "operationName", json_object_new_string("Viewer"));
        char *body = to_text(q);
        json_object_put(q);
        int st = body ? post(w, c, "/graphql", body, a) : SENT_RETRY;
        free(body);
        if (st != SENT_OK) {
            json_object_put(run);
            return st;
        }
        json_object *ans = json_tokener_parse(a->body);
        static const char *const at[] = {"data", "viewer", "entity", NULL};
        const char *e = json_str_at(ans, at);
        if (!e || !*e) {
            json_object_put(ans);
            json_object_put(run);
            set_error(w, "Viewer", "the server names no default entity: set entity");
            return SENT_REFUSED;
        }
        json_object_object_add(vars, "entity", json_object_new_string(e));
        json_object_put(ans);
    }
    json_object *q = json_object_new_object();
    json_object_object_add(q, "query", json_object_new_string(upsert_query));
    json_object_object_add(q, "variables", json_object_get(vars));
    json_object_object_add(q, "operationName", json_object_new_string("UpsertBucket"));
    char *body = to_text(q);
    json_object_put(q);
    json_object_put(run);
    int st = body ? post(w, c, "/graphql", body, a) : SENT_RETRY;
    free(body);
    if (st != SENT_OK)
        return st;
    json_object *ans = json_tokener_parse(a->body);
    static const char *const pe[] = {"data",   "upsertBucket", "bucket", "project",
                                     "entity", "name",         NULL};
    static const char *const pp[] = {"data", "upsertBucket", "bucket", "project", "name", NULL};
    static const char *const pn[] = {"data", "upsertBucket", "bucket", "name", NULL};
    const char *e = json_str_at(ans, pe), *p = json_str_at(ans, pp), *n = json_str_at(ans, pn);
    if (!e || !p || !n) { /* a 2xx that does not parse: cut, or a proxy's page; ask again */
        set_error(w, "UpsertBucket: the answer names no run", a->body);
        json_object_put(ans);
        return SENT_RETRY;
    }
    pthread_mutex_lock(&w->mu);
    snprintf(w->entity, sizeof w->entity, "%s", e);
    snprintf(w->project, sizeof w->project, "%s", p);
    snprintf(w->wandb_id, sizeof w->wandb_id, "%s", n);
    pthread_mutex_unlock(&w->mu);
    json_object_put(ans);
    return SENT_OK;
}

/* The file_stream path of the run, its names escaped for a URL. */
static void stream_path(wandb *w, CURL *c, char *buf, size_t cap)
{
    pthread_mutex_lock(&w->mu);
    char *e = curl_easy_escape(c, w->entity, 0), *p = curl_easy_escape(c, w->project, 0),
         *n = curl_easy_escape(c, w->wandb_id, 0);
    pthread_mutex_unlock(&w->mu);
    snprintf(buf, cap, "/files/%s/%s/%s/file_stream", e ? e : "", p ? p : "", n ? n : "");
    curl_free(e);
    curl_free(p);
    curl_free(n);
}

/* Post up to MAX_LINES history lines from *offset_bytes (line *offset), with the summary. */
static int post_lines(wandb *w, CURL *c, answer *a, FILE *in, int64_t first, int64_t n,
                      off_t *offset_bytes, int64_t *posted, const char *summary)
{
    *posted = 0;
    json_object *content = json_object_new_array();
    char *line = NULL;
    size_t cap = 0, bytes = 0;
    if (fseeko(in, *offset_bytes, SEEK_SET) != 0) {
        json_object_put(content);
        set_error(w, "cannot seek in history.jsonl", strerror(errno));
        return SENT_RETRY;
    }
    int64_t k = 0;
    for (; k < n && k < MAX_LINES && bytes < MAX_POST_BYTES; k++) {
        ssize_t len = getline(&line, &cap, in);
        if (len <= 0 || line[len - 1] != '\n')
            break; /* not yet on disk (the logging thread writes it under the lock) */
        line[len - 1] = 0;
        json_object_array_add(content, json_object_new_string(line));
        bytes += (size_t)len;
    }
    free(line);
    json_object *files = json_object_new_object();
    if (k > 0) {
        json_object *h = json_object_new_object();
        json_object_object_add(h, "offset", json_object_new_int64(first));
        json_object_object_add(h, "content", content);
        json_object_object_add(files, "wandb-history.jsonl", h);
    } else {
        json_object_put(content);
    }
    if (summary) {
        json_object *s = json_object_new_object(), *sc = json_object_new_array();
        json_object_array_add(sc, json_object_new_string(summary));
        json_object_object_add(s, "offset", json_object_new_int64(0));
        json_object_object_add(s, "content", sc);
        json_object_object_add(files, "wandb-summary.json", s);
    }
    json_object *doc = json_object_new_object();
    json_object_object_add(doc, "files", files);
    char *body = to_text(doc);
    json_object_put(doc);
    char path[2400];
    stream_path(w, c, path, sizeof path);
    int st = body ? post(w, c, path, body, a) : SENT_RETRY;
    free(body);
    if (st == SENT_OK) {
        *offset_bytes += (off_t)bytes;
        *posted = k;
    }
    return st;
}

static int post_complete(wandb *w, CURL *c, answer *a, int32_t exitcode)
{
    char body[128], path[2400];
    snprintf(body, sizeof body, "{\"complete\":true,\"exitcode\":%d}", (int)exitcode);
    stream_path(w, c, path, sizeof path);
    return post(w, c, path, body, a);
}

/* Wait on wake until the monotonic time until_s (or a signal); mu held. */
static void wait_until(wandb *w, double until_s)
{
    struct timespec now_rt;
    clock_gettime(CLOCK_REALTIME, &now_rt);
    double d = until_s - now_s();
    if (d <= 0)
        return;
    double t = (double)now_rt.tv_sec + (double)now_rt.tv_nsec * 1e-9 + d;
    struct timespec ts = {(time_t)t, (long)((t - floor(t)) * 1e9)};
    pthread_cond_timedwait(&w->wake, &w->mu, &ts);
}

void *wandb_sender_main(void *arg)
{
    wandb *w = arg;
    /* A server that closes the connection mid-request must not kill the run with SIGPIPE. */
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe, NULL);
    answer *a = calloc(1, sizeof *a);
    if (a && !(a->body = calloc(1, a->cap = 4096)))
        free(a), a = NULL;
    CURL *c = curl_easy_init();
    char path[4200];
    wandb_path(w, "history.jsonl", path, sizeof path);
    FILE *in = fopen(path, "r");
    if (!a || !c || !in) {
        pthread_mutex_lock(&w->mu);
        snprintf(w->last_error, sizeof w->last_error, "cannot start sending: %s",
                 !in ? strerror(errno) : "out of memory");
        w->gave_up = 1;
        pthread_cond_broadcast(&w->progress);
        pthread_mutex_unlock(&w->mu);
        if (a)
            free(a->body);
        free(a);
        if (c)
            curl_easy_cleanup(c);
        if (in)
            fclose(in);
        return NULL;
    }
    a->w = w;
    pthread_mutex_lock(&w->mu);
    off_t offset_bytes = w->sent_bytes;
    double delay_s = 0, retry_at = 0, last_post = 0;
    int upserted_once = 0;
    while (!w->stop) {
        int lines = w->spooled > w->sent;
        int dirty = wandb_summary_dirty(w);
        int need_upsert =
            w->upserted < w->upsert_gen || (!upserted_once && (lines || dirty || w->ended));
        int need_complete = w->ended && !w->completed && !lines && !dirty;
        if (w->gave_up || (!need_upsert && !lines && !dirty && !need_complete)) {
            pthread_cond_wait(&w->wake, &w->mu);
            continue;
        }
        double t = now_s();
        if (t < retry_at) {
            wait_until(w, retry_at);
            continue;
        }
        if (!need_upsert && !w->ended && t < last_post + 1.0) {
            wait_until(w, last_post + 1.0); /* batch a live run's steps: one post a second */
            continue;
        }
        int64_t first = w->sent, n = w->spooled - w->sent, posted = 0, gen = w->upsert_gen;
        int32_t exitcode = w->exitcode;
        char *summary = w->summary_text ? strdup(w->summary_text) : NULL;
        int summary_was_dirty = dirty;
        int64_t summary_gen = w->summary_gen;
        pthread_mutex_unlock(&w->mu);
        int st;
        if (need_upsert)
            st = upsert(w, c, a);
        else if (lines || summary_was_dirty)
            st = post_lines(w, c, a, in, first, n, &offset_bytes, &posted, summary);
        else
            st = post_complete(w, c, a, exitcode);
        free(summary);
        pthread_mutex_lock(&w->mu);
        last_post = now_s();
        if (st == SENT_OK) {
            delay_s = 0;
            w->last_error[0] = 0;
            if (need_upsert) {
                upserted_once = 1;
                w->upserted = gen;
            } else if (lines || summary_was_dirty) {
                w->sent += posted;
                if (posted == n) /* what was sent; a summary changed since is still due */
                    w->summary_acked = summary_gen;
            } else {
                w->completed = 1;
            }
            wandb_state_write(w, 0);
            pthread_cond_broadcast(&w->progress);
        } else if (st == SENT_RETRY) {
            delay_s = delay_s ? (delay_s * 2 < 30 ? delay_s * 2 : 30) : 1;
            if (a->retry_after_s > 0)
                delay_s = a->retry_after_s;
            retry_at = last_post + delay_s;
            pthread_cond_broadcast(&w->progress);
        } else {
            w->gave_up = 1;
            pthread_cond_broadcast(&w->progress);
        }
    }
    pthread_mutex_unlock(&w->mu);
    fclose(in);
    curl_easy_cleanup(c);
    free(a->body);
    free(a);
    return NULL;
}
