/* plugins/trackers/jsonl — a tracker that appends one JSON object per call to a file.
 *
 * Lines: {"hparams": {...}}, {"step": N, "metrics": {...}}, {"summary": {...}},
 * {"artifact": {"path": ..., "name": ..., "type": ...}}, {"finish": "finished"}.
 * Every line is flushed as it is written, so a killed run keeps every metric it logged; numbers
 * are printed with 17 significant digits, so they read back to the same double. */
#define _POSIX_C_SOURCE 200809L
#include <bora/tracker.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct jsonl {
    const bora_host *h;
    FILE *out;
    char path[4096];
} jsonl;

static const bora_key jsonl_keys[] = {
    {"path", BORA_KEY_STRING, 0, "runs/{run_id}/metrics.jsonl",
     "file to append to; {run_id} is replaced by the run's id"},
    {NULL, 0, 0, NULL, NULL},
};

static void jsonl_string(FILE *out, const char *s)
{
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(out, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(out, "\\u%04x", *p);
        else
            fputc(*p, out);
    }
    fputc('"', out);
}

static void jsonl_number(FILE *out, double v)
{
    if (isfinite(v))
        fprintf(out, "%.17g", v);
    else
        fputs("null", out); /* JSON has no NaN or infinity */
}

static void jsonl_metrics(FILE *out, const bora_metric *m, size_t n)
{
    fputc('{', out);
    for (size_t i = 0; i < n; i++) {
        if (i)
            fputc(',', out);
        jsonl_string(out, m[i].name);
        fputc(':', out);
        jsonl_number(out, m[i].value);
    }
    fputc('}', out);
}

static bora_status jsonl_flush(jsonl *j)
{
    fputc('\n', j->out);
    if (fflush(j->out) != 0 || ferror(j->out))
        return j->h->fail(j->h, BORA_ERR_IO, "cannot write '%s': %s", j->path, strerror(errno));
    return BORA_OK;
}

/* Create every missing parent directory of path. */
static bora_status jsonl_mkdirs(const bora_host *h, const char *path)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
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

static bora_status jsonl_create(const bora_host *h, const bora_config *cfg, const char *run_id,
                                bora_tracker **out)
{
    const char *pattern;
    bora_status st = h->config_string(h, cfg, "path", jsonl_keys[0].default_value, &pattern);
    if (st != BORA_OK)
        return st;
    jsonl *j = h->alloc(h, sizeof *j, 16);
    if (!j)
        return h->fail(h, BORA_ERR_NOMEM, "out of memory");
    j->h = h;
    /* Expand {run_id}. */
    size_t w = 0;
    for (const char *p = pattern; *p && w + 1 < sizeof j->path;) {
        if (strncmp(p, "{run_id}", 8) == 0) {
            w += (size_t)snprintf(j->path + w, sizeof j->path - w, "%s", run_id ? run_id : "run");
            p += 8;
        } else {
            j->path[w++] = *p++;
        }
        if (w >= sizeof j->path) {
            h->free(h, j);
            return h->fail(h, BORA_ERR_CONFIG, "path is too long");
        }
    }
    j->path[w] = 0;
    st = jsonl_mkdirs(h, j->path);
    if (st == BORA_OK && !(j->out = fopen(j->path, "a")))
        st = h->fail(h, BORA_ERR_IO, "cannot open '%s': %s", j->path, strerror(errno));
    if (st != BORA_OK) {
        h->free(h, j);
        return st;
    }
    *out = (bora_tracker *)j;
    return BORA_OK;
}

static bora_status jsonl_log_hparams(bora_tracker *t, const char *config_json)
{
    jsonl *j = (jsonl *)t;
    fprintf(j->out, "{\"hparams\":%s}", config_json && *config_json ? config_json : "{}");
    return jsonl_flush(j);
}

static bora_status jsonl_log(bora_tracker *t, int64_t step, const bora_metric *m, size_t n)
{
    jsonl *j = (jsonl *)t;
    fprintf(j->out, "{\"step\":%lld,\"metrics\":", (long long)step);
    jsonl_metrics(j->out, m, n);
    fputc('}', j->out);
    return jsonl_flush(j);
}

static bora_status jsonl_log_summary(bora_tracker *t, const bora_metric *m, size_t n)
{
    jsonl *j = (jsonl *)t;
    fputs("{\"summary\":", j->out);
    jsonl_metrics(j->out, m, n);
    fputc('}', j->out);
    return jsonl_flush(j);
}

static bora_status jsonl_log_artifact(bora_tracker *t, const char *path, const char *name,
                                      const char *type)
{
    jsonl *j = (jsonl *)t;
    fputs("{\"artifact\":{\"path\":", j->out);
    jsonl_string(j->out, path);
    fputs(",\"name\":", j->out);
    jsonl_string(j->out, name);
    fputs(",\"type\":", j->out);
    jsonl_string(j->out, type);
    fputs("}}", j->out);
    return jsonl_flush(j);
}

static bora_status jsonl_finish(bora_tracker *t, int32_t status)
{
    jsonl *j = (jsonl *)t;
    const char *word = status == BORA_RUN_FINISHED ? "finished"
                       : status == BORA_RUN_KILLED ? "killed"
                                                   : "failed";
    fprintf(j->out, "{\"finish\":\"%s\"}", word);
    bora_status st = jsonl_flush(j);
    if (st == BORA_OK && fsync(fileno(j->out)) != 0)
        st = j->h->fail(j->h, BORA_ERR_IO, "cannot sync '%s': %s", j->path, strerror(errno));
    return st;
}

static void jsonl_destroy(bora_tracker *t)
{
    jsonl *j = (jsonl *)t;
    if (j->out)
        fclose(j->out);
    j->h->free(j->h, j);
}

static const bora_tracker_ops jsonl_ops = {
    .hdr = {sizeof(bora_tracker_ops), BORA_KIND_TRACKER, "jsonl", "metrics as JSON lines in a file",
            jsonl_keys},
    .create = jsonl_create,
    .log_hparams = jsonl_log_hparams,
    .log = jsonl_log,
    .log_summary = jsonl_log_summary,
    .log_artifact = jsonl_log_artifact,
    .finish = jsonl_finish,
    .destroy = jsonl_destroy,
};

static bora_status jsonl_init(const bora_host *h)
{
    return h->add(h, &jsonl_ops.hdr);
}

BORA_PLUGIN_DEFINE("jsonl", "0.1.0", jsonl_init, NULL)
