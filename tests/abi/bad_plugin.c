/* tests/abi/bad_plugin.c — plugins the loader must refuse, one per build: the CMake file
 * compiles this source once per case with -DCASE_<NAME>. Each case breaks one rule, so some
 * cases leave functions unused (built with -Wno-unused). */
#include <bora/tracker.h>

static bora_status bad_create(const bora_host *h, const bora_config *cfg, const char *run_id,
                              bora_tracker **out)
{
    (void)cfg;
    (void)run_id;
    *out = h->alloc(h, 16, 16);
    return BORA_OK;
}
static bora_status bad_log(bora_tracker *t, int64_t step, const bora_metric *m, size_t n)
{
    (void)t;
    (void)step;
    (void)m;
    (void)n;
    return BORA_OK;
}
static void bad_destroy(bora_tracker *t)
{
    (void)t;
}

#if defined(CASE_OVERSIZED)
/* A table from a "future" SDK: the known members plus two the host has never heard of. */
typedef struct future_ops {
    bora_tracker_ops base;
    void (*future_a)(void);
    void (*future_b)(void);
} future_ops;
static const future_ops bad_ops = {
    .base = {.hdr = BORA_COMPONENT(future_ops, BORA_KIND_TRACKER, "oversized", "too big"),
             .create = bad_create,
             .log = bad_log,
             .destroy = bad_destroy},
};
#define BAD_HDR (&bad_ops.base.hdr)
#else
static const bora_tracker_ops bad_ops = {
#if defined(CASE_DUP_A) || defined(CASE_DUP_B)
    .hdr = BORA_COMPONENT(bora_tracker_ops, BORA_KIND_TRACKER, "dup", "registered twice"),
#else
    .hdr = BORA_COMPONENT(bora_tracker_ops, BORA_KIND_TRACKER, "bad", "a refused fixture"),
#endif
    .create = bad_create,
#if !defined(CASE_MISSING_MEMBER)
    .log = bad_log,
#endif
    .destroy = bad_destroy,
};
#define BAD_HDR (&bad_ops.hdr)
#endif

#if defined(CASE_UNDEFINED_SYMBOL)
/* Linked without -z defs: dlopen(RTLD_NOW) fails as it would for a missing CUDA library. */
extern int bora_fixture_symbol_nobody_defines(void);
#endif

static bora_status bad_init(const bora_host *h)
{
#if defined(CASE_UNDEFINED_SYMBOL)
    if (bora_fixture_symbol_nobody_defines())
        return BORA_OK;
#endif
#if defined(CASE_INIT_FAILS)
    return h->fail(h, BORA_ERR_DEVICE, "no device here (fixture)");
#else
    return h->add(h, BAD_HDR);
#endif
}

#if defined(CASE_NO_ENTRY)
/* Exports a function, but not bora_plugin_entry. */
BORA_EXPORT int not_a_bora_plugin(void);
BORA_EXPORT int not_a_bora_plugin(void)
{
    return 42;
}
#else
BORA_EXPORT const bora_plugin *bora_plugin_entry(void);
BORA_EXPORT const bora_plugin *bora_plugin_entry(void)
{
    static const bora_plugin desc = {
#if defined(CASE_WRONG_MAJOR)
        .abi_major = BORA_ABI_MAJOR + 2,
#else
        .abi_major = BORA_ABI_MAJOR,
#endif
#if defined(CASE_NEWER_MINOR)
        .abi_minor = BORA_ABI_MINOR + 3,
#else
        .abi_minor = BORA_ABI_MINOR,
#endif
        .struct_size = sizeof(bora_plugin),
        .name = FIXTURE_NAME,
        .version = "0.0.1",
        .init = bad_init,
    };
    return &desc;
}
#endif
