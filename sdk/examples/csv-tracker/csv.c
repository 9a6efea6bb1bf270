/* csv.c — an example bora plugin: a tracker that writes metrics to a CSV file.
 *
 * Built outside the bora repository against the installed SDK (see CMakeLists.txt and
 * README.md). The file has one row per value, "step,metric,value", so steps that log different
 * metrics still make a valid table; summaries are written with step "summary". */
#define _POSIX_C_SOURCE 200809L
#include <bora/tracker.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef struct csv {
    const bora_host *h;
    FILE *out;
    char path[4096];
} csv;

static const bora_key csv_keys[] = {
    {"path", BORA_KEY_STRING, 0, "metrics.csv", "the CSV file to write (replaced if it exists)"},
    {NULL, 0, 0, NULL, NULL},
};

static bora_status csv_create(const bora_host *h, const bora_config *cfg, const char *run_id,
                              bora_tracker **out)
{
    (void)run_id;
    const char *path;
    bora_status st = h->config_string(h, cfg, "path", csv_keys[0].default_value, &path);
    if (st != BORA_OK)
        return st;
    csv *c = h->alloc(h, sizeof *c, 16);
    if (!c)
        return h->fail(h, BORA_ERR_NOMEM, "out of memory");
    c->h = h;
    snprintf(c->path, sizeof c->path, "%s", path);
    c->out = fopen(c->path, "w");
    if (!c->out) {
        st = h->fail(h, BORA_ERR_IO, "cannot open '%s': %s", c->path, strerror(errno));
        h->free(h, c);
        return st;
    }
    fputs("step,metric,value\n", c->out);
    *out = (bora_tracker *)c;
    return BORA_OK;
}

/* Write one row per metric; a name with a comma or quote is quoted as CSV requires. */
static bora_status csv_rows(csv *c, const char *step, const bora_metric *m, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        fprintf(c->out, "%s,", step);
        if (strpbrk(m[i].name, ",\"\n")) {
            fputc('"', c->out);
            for (const char *p = m[i].name; *p; p++) {
                if (*p == '"')
                    fputc('"', c->out);
                fputc(*p, c->out);
            }
            fputc('"', c->out);
        } else {
            fputs(m[i].name, c->out);
        }
        fprintf(c->out, ",%.17g\n", m[i].value);
    }
    if (fflush(c->out) != 0)
        return c->h->fail(c->h, BORA_ERR_IO, "cannot write '%s': %s", c->path, strerror(errno));
    return BORA_OK;
}

static bora_status csv_log(bora_tracker *t, int64_t step, const bora_metric *m, size_t n)
{
    char s[32];
    snprintf(s, sizeof s, "%lld", (long long)step);
    return csv_rows((csv *)t, s, m, n);
}

static bora_status csv_log_summary(bora_tracker *t, const bora_metric *m, size_t n)
{
    return csv_rows((csv *)t, "summary", m, n);
}

static bora_status csv_finish(bora_tracker *t, int32_t status)
{
    (void)status;
    csv *c = (csv *)t;
    if (fflush(c->out) != 0 || fsync(fileno(c->out)) != 0)
        return c->h->fail(c->h, BORA_ERR_IO, "cannot sync '%s': %s", c->path, strerror(errno));
    return BORA_OK;
}

static void csv_destroy(bora_tracker *t)
{
    csv *c = (csv *)t;
    fclose(c->out);
    c->h->free(c->h, c);
}

static const bora_tracker_ops csv_ops = {
    .hdr = {sizeof(bora_tracker_ops), BORA_KIND_TRACKER, "csv", "metrics as rows of a CSV file",
            csv_keys},
    .create = csv_create,
    .log = csv_log,
    .log_summary = csv_log_summary,
    .finish = csv_finish,
    .destroy = csv_destroy,
};

static bora_status csv_init(const bora_host *h)
{
    return h->add(h, &csv_ops.hdr);
}

BORA_PLUGIN_DEFINE("csv", "1.0.0", csv_init, NULL)
