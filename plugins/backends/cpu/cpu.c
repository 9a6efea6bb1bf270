/* plugins/backends/cpu — the CPU backend: host memory, kernels in plain C with OpenMP (a fixed
 * static partition, no floating-point reduction clauses) and f32 matmuls on oneDNN 2.6. */
#define _POSIX_C_SOURCE 200809L
#include "cpu.h"
#include "kernels_fast.h"

#include <dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef _OPENMP /* a compiler that ignores the directives would run every kernel on one thread */
#error "the CPU backend needs OpenMP code generation (clang: -fopenmp=libomp)"
#endif

static const bora_key cpu_keys[] = {
    {"num_threads", BORA_KEY_INT, 0, "0", "OpenMP threads; 0 uses every core"},
    {NULL, 0, 0, NULL, NULL},
};

static int32_t cpu_probe(const bora_host *h)
{
    (void)h;
    return 10; /* always runs; accelerators score higher */
}

static bora_status cpu_create(const bora_host *h, const bora_config *cfg, bora_backend **out)
{
    int64_t threads;
    bora_status st = h->config_int(h, cfg, "num_threads", 0, &threads);
    if (st != BORA_OK)
        return st;
    if (threads < 0 || threads > 4096)
        return h->fail(h, BORA_ERR_CONFIG, "num_threads must be 0 (all cores) to 4096, not %lld",
                       (long long)threads);
    bora_backend *b = h->alloc(h, sizeof *b, 64);
    if (!b)
        return h->fail(h, BORA_ERR_NOMEM, "out of memory");
    memset(b, 0, sizeof *b);
    b->h = h;
    b->size = 1;
    b->timeout_s = 600;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    b->num_threads = threads ? (int)threads : (int)(cores > 0 ? cores : 1);
    b->simd = cpu_simd_get();
    /* One OpenMP runtime, a fixed number of threads: the partition never changes mid-run. */
    omp_set_dynamic(0);
    omp_set_num_threads(b->num_threads);
    st = cpu_bf16_setup(b);
    if (st != BORA_OK) {
        cpu_bf16_teardown(b);
        h->free(h, b);
        return st;
    }
    *out = b;
    return BORA_OK;
}

static void cpu_destroy(bora_backend *b)
{
    cpu_bf16_teardown(b);
    if (b->scratch)
        b->h->free(b->h, b->scratch);
    b->h->free(b->h, b);
}

static bora_status cpu_alloc(bora_backend *b, size_t size, size_t align, bora_buffer **out)
{
    *out = b->h->alloc(b->h, size ? size : 1, align < 64 ? 64 : align);
    return *out ? BORA_OK : b->h->fail(b->h, BORA_ERR_NOMEM, "cannot allocate %zu bytes", size);
}

static void cpu_free(bora_backend *b, bora_buffer *buf)
{
    b->h->free(b->h, buf);
}

static void *cpu_ptr(bora_backend *b, bora_buffer *buf)
{
    (void)b;
    return buf;
}

static bora_status cpu_copy_in(bora_backend *b, bora_buffer *dst, size_t offset, const void *src,
                               size_t size)
{
    (void)b;
    memcpy((char *)dst + offset, src, size);
    return BORA_OK;
}

static bora_status cpu_copy_out(bora_backend *b, void *dst, bora_buffer *src, size_t offset,
                                size_t size)
{
    (void)b;
    memcpy(dst, (const char *)src + offset, size);
    return BORA_OK;
}

/* What the bits depend on: the thread count fixes every partition, our loops' instruction set
 * (FMA or not) their rounding, oneDNN's version and the instruction set it dispatches to fix
 * the matmuls' summation order, and the bf16 matmuls' path theirs. */
static void cpu_describe(bora_backend *b, char *buf, size_t cap)
{
    const dnnl_version_t *v = dnnl_version();
    snprintf(buf, cap, "%d thread%s, %s loops, oneDNN %d.%d.%d (%s), bf16 matmul: %s",
             b->num_threads, b->num_threads == 1 ? "" : "s", b->simd->isa, v->major, v->minor,
             v->patch, v->hash ? v->hash : "", b->bf16_impl);
}

static const bora_backend_ops cpu_ops = {
    .hdr = {sizeof(bora_backend_ops), BORA_KIND_BACKEND, "cpu",
            "CPU: C kernels with OpenMP, f32 matmuls on oneDNN", cpu_keys},
    .probe = cpu_probe,
    .create = cpu_create,
    .destroy = cpu_destroy,
    .buffer_alloc = cpu_alloc,
    .buffer_free = cpu_free,
    .buffer_ptr = cpu_ptr,
    .copy_in = cpu_copy_in,
    .copy_out = cpu_copy_out,
    .kernel = cpu_kernel,
    .all_reduce = cpu_all_reduce,
    .broadcast = cpu_broadcast,
    .describe = cpu_describe,
    .run_fused = cpu_run_fused,
    .prepare = cpu_prepare,
    .group_join = cpu_group_join,
    .reduce_scatter = cpu_reduce_scatter,
    .all_gather = cpu_all_gather,
};

static bora_status cpu_init(const bora_host *h)
{
    return h->add(h, &cpu_ops.hdr);
}

BORA_PLUGIN_DEFINE("cpu", "0.1.0", cpu_init, NULL)
