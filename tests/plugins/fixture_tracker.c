/* tests/plugins/fixture_tracker.c — a test fixture: registers tracker 'fixture', which counts
 * the calls it gets and logs the count when destroyed. With `sleep_ms` every call first sleeps
 * that long (a slow tracker); with `path` every call appends a line to that file: "hparams",
 * "environment", "log STEP NAME=VALUE...", "flush", "finish STATUS". */
#define _POSIX_C_SOURCE 200809L
#include <bora/tracker.h>

#include <stdio.h>
#include <time.h>

typedef struct fixture {
    const bora_host *h;
    long calls;
    int64_t sleep_ms;
    FILE *out;
} fixture;

static const bora_key fixture_keys[] = {
    {"sleep_ms", BORA_KEY_INT, 0, "0", "milliseconds every call sleeps first"},
    {"path", BORA_KEY_STRING, 0, "", "a file every call appends a line to"},
    {NULL, 0, 0, NULL, NULL},
};

static void slow(fixture *f)
{
    struct timespec ts = {(time_t)(f->sleep_ms / 1000), (long)(f->sleep_ms % 1000) * 1000000L};
    if (f->sleep_ms > 0)
        nanosleep(&ts, NULL);
}

static bora_status fixture_create(const bora_host *h, const bora_config *cfg, const char *run_id,
                                  bora_tracker **out)
{
    (void)run_id;
    int64_t sleep_ms = 0;
    const char *path = "";
    bora_status st = h->config_int(h, cfg, "sleep_ms", 0, &sleep_ms);
    if (st == BORA_OK)
        st = h->config_string(h, cfg, "path", "", &path);
    if (st != BORA_OK)
        return st;
    fixture *f = h->alloc(h, sizeof *f, 16);
    if (!f)
        return h->fail(h, BORA_ERR_NOMEM, "out of memory");
    f->h = h;
    f->calls = 0;
    f->sleep_ms = sleep_ms;
    f->out = *path ? fopen(path, "a") : NULL;
    if (*path && !f->out) {
        h->free(h, f);
        return h->fail(h, BORA_ERR_IO, "cannot open %s", path);
    }
    *out = (bora_tracker *)f;
    return BORA_OK;
}

static void line(fixture *f, const char *text)
{
    if (f->out) {
        fputs(text, f->out);
        fflush(f->out);
    }
}

static bora_status fixture_hparams(bora_tracker *t, const char *json)
{
    (void)json;
    slow((fixture *)t);
    line((fixture *)t, "hparams\n");
    return BORA_OK;
}

static bora_status fixture_environment(bora_tracker *t, const char *json)
{
    (void)json;
    slow((fixture *)t);
    line((fixture *)t, "environment\n");
    return BORA_OK;
}

static bora_status fixture_log(bora_tracker *t, int64_t step, const bora_metric *m, size_t n)
{
    fixture *f = (fixture *)t;
    slow(f);
    f->calls++;
    if (f->out) {
        fprintf(f->out, "log %lld", (long long)step);
        for (size_t i = 0; i < n; i++)
            fprintf(f->out, " %s=%.17g", m[i].name, m[i].value);
        fputc('\n', f->out);
        fflush(f->out);
    }
    return BORA_OK;
}

static bora_status fixture_finish(bora_tracker *t, int32_t status)
{
    fixture *f = (fixture *)t;
    slow(f);
    if (f->out) {
        fprintf(f->out, "finish %d\n", (int)status);
        fflush(f->out);
    }
    return BORA_OK;
}

static bora_status fixture_flush(bora_tracker *t)
{
    slow((fixture *)t);
    line((fixture *)t, "flush\n");
    return BORA_OK;
}

static void fixture_destroy(bora_tracker *t)
{
    fixture *f = (fixture *)t;
    BORA_INFO(f->h, "fixture tracker saw %ld log calls", f->calls);
    if (f->out)
        fclose(f->out);
    f->h->free(f->h, f);
}

static const bora_tracker_ops fixture_ops = {
    .hdr = {sizeof(bora_tracker_ops), BORA_KIND_TRACKER, "fixture", "test fixture", fixture_keys},
    .create = fixture_create,
    .log_hparams = fixture_hparams,
    .log = fixture_log,
    .finish = fixture_finish,
    .destroy = fixture_destroy,
    .log_environment = fixture_environment,
    .flush = fixture_flush,
};

static bora_status fixture_init(const bora_host *h)
{
    return h->add(h, &fixture_ops.hdr);
}

BORA_PLUGIN_DEFINE("fixture-tracker", "0.0.1", fixture_init, NULL)
