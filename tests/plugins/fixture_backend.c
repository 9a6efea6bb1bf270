/* tests/plugins/fixture_backend.c — a test fixture: registers backend 'fixture', host memory
 * buffers and no kernels, and probes at 0 so `backend: auto` never picks it. */
#include <bora/backend.h>

#include <string.h>

static const bora_host *fixture_host;

static int32_t fixture_probe(const bora_host *h)
{
    (void)h;
    return 0;
}

static bora_status fixture_create(const bora_host *h, const bora_config *cfg, bora_backend **out)
{
    (void)cfg;
    *out = h->alloc(h, 16, 16);
    return *out ? BORA_OK : h->fail(h, BORA_ERR_NOMEM, "out of memory");
}

static void fixture_destroy(bora_backend *b)
{
    fixture_host->free(fixture_host, b);
}

static bora_status fixture_alloc(bora_backend *b, size_t size, size_t align, bora_buffer **out)
{
    (void)b;
    *out = fixture_host->alloc(fixture_host, size, align);
    return *out ? BORA_OK : fixture_host->fail(fixture_host, BORA_ERR_NOMEM, "out of memory");
}

static void fixture_free(bora_backend *b, bora_buffer *buf)
{
    (void)b;
    fixture_host->free(fixture_host, buf);
}

static bora_status fixture_copy_in(bora_backend *b, bora_buffer *dst, size_t offset,
                                   const void *src, size_t size)
{
    (void)b;
    memcpy((char *)dst + offset, src, size);
    return BORA_OK;
}

static bora_status fixture_copy_out(bora_backend *b, void *dst, bora_buffer *src, size_t offset,
                                    size_t size)
{
    (void)b;
    memcpy(dst, (const char *)src + offset, size);
    return BORA_OK;
}

static bora_kernel_fn fixture_kernel(bora_backend *b, uint32_t op, const int32_t *dtypes,
                                     uint32_t n)
{
    (void)b;
    (void)op;
    (void)dtypes;
    (void)n;
    return NULL;
}

static const bora_backend_ops fixture_ops = {
    .hdr = BORA_COMPONENT(bora_backend_ops, BORA_KIND_BACKEND, "fixture", "test fixture"),
    .probe = fixture_probe,
    .create = fixture_create,
    .destroy = fixture_destroy,
    .buffer_alloc = fixture_alloc,
    .buffer_free = fixture_free,
    .copy_in = fixture_copy_in,
    .copy_out = fixture_copy_out,
    .kernel = fixture_kernel,
};

static bora_status fixture_init(const bora_host *h)
{
    fixture_host = h;
    return h->add(h, &fixture_ops.hdr);
}

BORA_PLUGIN_DEFINE("fixture-backend", "0.0.1", fixture_init, NULL)
