/* bench/kernels/onednn_conv1d.c — oneDNN 2.6's own convolution primitives (the v2 C API) on
 * Whisper-tiny's audio stem, the alternative to the CPU backend's im2col + sgemm conv1d that
 * bench_kernels times: batch 4 of 3000 frames, conv1 80 -> 384 channels (K 3, pad 1), conv2
 * 384 -> 384 (K 3, stride 2, pad 1), f32, forward, backward data and backward weights, over the
 * plain layouts bora's tensors have (ncw, oiw) and over the layouts oneDNN picks (format "any",
 * the reorders to and from them not counted). Prints the median and the least of RUNS after a
 * warm-up, in ms.
 *
 * usage: OMP_NUM_THREADS=2 onednn_conv1d [RUNS]   (default 15 runs; oneDNN runs on OpenMP's
 * threads, which read OMP_NUM_THREADS when the library loads) */
#include <oneapi/dnnl/dnnl.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CHECK(call)                                                             \
    do {                                                                        \
        dnnl_status_t s_ = (call);                                              \
        if (s_ != dnnl_success) {                                               \
            fprintf(stderr, "onednn_conv1d: %s failed (%d)\n", #call, (int)s_); \
            exit(1);                                                            \
        }                                                                       \
    } while (0)

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return 1e3 * (double)t.tv_sec + 1e-6 * (double)t.tv_nsec;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static dnnl_memory_t memory_for(dnnl_engine_t eng, const dnnl_memory_desc_t *md)
{
    dnnl_memory_t m;
    CHECK(dnnl_memory_create(&m, md, eng, DNNL_MEMORY_ALLOCATE));
    void *p;
    CHECK(dnnl_memory_get_data_handle(m, &p));
    size_t n = dnnl_memory_desc_get_size(md) / sizeof(float);
    for (size_t i = 0; i < n; i++)
        ((float *)p)[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    return m;
}

/* Time primitive pd (made from op desc d) with its src, weights and dst arguments. */
static void run(dnnl_engine_t eng, dnnl_stream_t st, const_dnnl_primitive_desc_t pd, int runs,
                const char *what)
{
    dnnl_primitive_t p;
    CHECK(dnnl_primitive_create(&p, pd));
    static const dnnl_query_t q[3] = {dnnl_query_src_md, dnnl_query_weights_md, dnnl_query_dst_md};
    static const dnnl_query_t qd[3] = {dnnl_query_diff_src_md, dnnl_query_diff_weights_md,
                                       dnnl_query_diff_dst_md};
    static const int arg[3] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST};
    static const int argd[3] = {DNNL_ARG_DIFF_SRC, DNNL_ARG_DIFF_WEIGHTS, DNNL_ARG_DIFF_DST};
    dnnl_exec_arg_t args[4];
    dnnl_memory_t mem[4];
    int n = 0;
    for (int i = 0; i < 3; i++) {
        const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, q[i], 0);
        int a = arg[i];
        if (!md || md->ndims == 0) {
            md = dnnl_primitive_desc_query_md(pd, qd[i], 0);
            a = argd[i];
        }
        mem[n] = memory_for(eng, md);
        args[n] = (dnnl_exec_arg_t){a, mem[n]};
        n++;
    }
    const dnnl_memory_desc_t *sp = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    if (sp && dnnl_memory_desc_get_size(sp)) {
        mem[n] = memory_for(eng, sp);
        args[n] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, mem[n]};
        n++;
    }
    double *t = calloc((size_t)runs, sizeof *t);
    for (int i = -1; i < runs; i++) {
        double a = now_ms();
        CHECK(dnnl_primitive_execute(p, st, n, args));
        CHECK(dnnl_stream_wait(st));
        if (i >= 0)
            t[i] = now_ms() - a;
    }
    qsort(t, (size_t)runs, sizeof *t, by_value);
    const char *impl = NULL;
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    printf("  %-16s %8.2f ms (least %.2f)  [%s]\n", what, t[runs / 2], t[0], impl ? impl : "?");
    free(t);
    for (int i = 0; i < n; i++)
        dnnl_memory_destroy(mem[i]);
    dnnl_primitive_destroy(p);
}

static void bench(dnnl_engine_t eng, dnnl_stream_t st, int64_t C, int64_t stride, int any, int runs)
{
    enum { B = 4, O = 384, L = 3000, K = 3 };
    int64_t J = (L + 2 - K) / stride + 1;
    dnnl_dims_t xd = {B, C, L}, wd = {O, C, K}, yd = {B, O, J};
    dnnl_dims_t strides = {stride}, pad = {1};
    dnnl_memory_desc_t x, w, y;
    CHECK(dnnl_memory_desc_init_by_tag(&x, 3, xd, dnnl_f32, any ? dnnl_format_tag_any : dnnl_ncw));
    CHECK(dnnl_memory_desc_init_by_tag(&w, 3, wd, dnnl_f32, any ? dnnl_format_tag_any : dnnl_oiw));
    CHECK(dnnl_memory_desc_init_by_tag(&y, 3, yd, dnnl_f32, any ? dnnl_format_tag_any : dnnl_ncw));
    printf("conv1d f32 %dx%lldx%d -> %d, K %d stride %lld, %s layouts:\n", B, (long long)C, L, O, K,
           (long long)stride, any ? "oneDNN's" : "plain (ncw, oiw)");
    dnnl_convolution_desc_t fd, bdd, bwd;
    CHECK(dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct,
                                             &x, &w, NULL, &y, strides, pad, pad));
    dnnl_primitive_desc_t fpd, bdpd, bwpd;
    CHECK(dnnl_primitive_desc_create(&fpd, &fd, NULL, eng, NULL));
    run(eng, st, fpd, runs, "forward");
    CHECK(dnnl_convolution_backward_data_desc_init(&bdd, dnnl_convolution_direct, &x, &w, &y,
                                                   strides, pad, pad));
    CHECK(dnnl_primitive_desc_create(&bdpd, &bdd, NULL, eng, fpd));
    run(eng, st, bdpd, runs, "backward data");
    CHECK(dnnl_convolution_backward_weights_desc_init(&bwd, dnnl_convolution_direct, &x, &w, NULL,
                                                      &y, strides, pad, pad));
    CHECK(dnnl_primitive_desc_create(&bwpd, &bwd, NULL, eng, fpd));
    run(eng, st, bwpd, runs, "backward weights");
    dnnl_primitive_desc_destroy(fpd);
    dnnl_primitive_desc_destroy(bdpd);
    dnnl_primitive_desc_destroy(bwpd);
}

int main(int argc, char **argv)
{
    int runs = argc > 1 ? atoi(argv[1]) : 15;
    if (runs < 1) {
        fprintf(stderr, "usage: OMP_NUM_THREADS=N onednn_conv1d [RUNS]\n");
        return 2;
    }
    dnnl_engine_t eng;
    dnnl_stream_t st;
    CHECK(dnnl_engine_create(&eng, dnnl_cpu, 0));
    CHECK(dnnl_stream_create(&st, eng, dnnl_stream_default_flags));
    for (int any = 0; any < 2; any++) {
        bench(eng, st, 80, 1, any, runs);
        bench(eng, st, 384, 2, any, runs);
    }
    dnnl_stream_destroy(st);
    dnnl_engine_destroy(eng);
    return 0;
}
