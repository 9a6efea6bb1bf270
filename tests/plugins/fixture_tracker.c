/* tests/plugins/fixture_tracker.c — a test fixture: registers tracker 'fixture', which counts
 * the calls it gets and logs the count when destroyed. */
#include <bora/tracker.h>

typedef struct fixture {
    const bora_host *h;
    long calls;
} fixture;

static bora_status fixture_create(const bora_host *h, const bora_config *cfg, const char *run_id,
                                  bora_tracker **out)
{
    (void)cfg;
    (void)run_id;
    fixture *f = h->alloc(h, sizeof *f, 16);
    if (!f)
        return h->fail(h, BORA_ERR_NOMEM, "out of memory");
    f->h = h;
    *out = (bora_tracker *)f;
    return BORA_OK;
}

static bora_status fixture_log(bora_tracker *t, int64_t step, const bora_metric *m, size_t n)
{
    (void)step;
    (void)m;
    (void)n;
    ((fixture *)t)->calls++;
    return BORA_OK;
}

static void fixture_destroy(bora_tracker *t)
{
    fixture *f = (fixture *)t;
    BORA_INFO(f->h, "fixture tracker saw %ld log calls", f->calls);
    f->h->free(f->h, f);
}

static const bora_tracker_ops fixture_ops = {
    .hdr = BORA_COMPONENT(bora_tracker_ops, BORA_KIND_TRACKER, "fixture", "test fixture"),
    .create = fixture_create,
    .log = fixture_log,
    .destroy = fixture_destroy,
};

static bora_status fixture_init(const bora_host *h)
{
    return h->add(h, &fixture_ops.hdr);
}

BORA_PLUGIN_DEFINE("fixture-tracker", "0.0.1", fixture_init, NULL)
