/* bench/kernels/bench_kernels.c — the CPU backend's time in single kernels, as a graph runs
 * them (BORA_PROFILE's per-node clock): attention forward and backward on a Llama-like shape
 * (batch 4, 256 positions, 12 query heads over 4 kv heads, head_dim 64, causal) under
 * trainer.mp c=bf16, RMSNorm forward and backward in f32 at 2048 rows of 1024 and of 768, and
 * Whisper-tiny's two convolutions (f32, forward and both gradients).
 * Prints the median and the least over the runs after a warm-up, in ms per call (the least is
 * the steadier figure where other work shares the cores). Not a test: timings belong on
 * a quiet machine.
 *
 * usage: bench_kernels PLUGIN_DIR [THREADS [RUNS]]   (default 2 threads, 15 runs) */
#include "../../tests/graph/rig.h"

#include <math.h>

#define AX(n, s) ((bora_axis){(n), (s)})

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Run g runs times after one warm-up; the median ms per run of the nodes of op (summed), and the
 * least in *least. */
static double node_ms(g_graph *g, uint32_t op, int runs, double *least)
{
    double *t = calloc((size_t)runs, sizeof *t), before = 0;
    for (int i = -1; i < runs; i++) {
        if (g_run(g) != BORA_OK) {
            fprintf(stderr, "bench_kernels: run failed: %s\n", bora_error_get());
            exit(1);
        }
        double sum = 0;
        for (size_t j = 0; j < g->n_nodes; j++)
            if (g->nodes[j]->op == (int)op)
                sum += g->prof_s[j];
        if (i >= 0)
            t[i] = 1e3 * (sum - before);
        before = sum;
    }
    qsort(t, (size_t)runs, sizeof *t, by_value);
    double m = t[runs / 2];
    *least = t[0];
    free(t);
    return m;
}

/* A sum of out · w (w an input), so that the output's gradient is a plain tensor. */
static bora_tensor *loss_of(bora_graph *gp, bora_tensor *out, int nd, const char **names)
{
    const bora_graph_api *A = gp->api;
    bora_axis ax[4];
    for (int i = 0; i < nd; i++)
        ax[i] = A->axis(out, i);
    bora_tensor *w = bora_input(gp, "w", BORA_DTYPE_F32, nd, ax);
    bora_tensor *loss = A->reduce(gp, BORA_OP_SUM, bora_mul(gp, out, w), nd, names);
    return loss && loss->base != loss ? A->contiguous(gp, loss) : loss;
}

static void fill_w(g_graph *g, int64_t n)
{
    float *w = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        w[i] = (float)sin(0.37 * (double)i);
    g_set_input(g, "w", w, sizeof(float) * (size_t)n);
    free(w);
}

static void bench_attention(const char *dir, int threads, int runs)
{
    enum { B = 4, H = 12, HKV = 4, T = 256, E = 64 };
    rig r;
    rig_open(&r, dir, threads, 1);
    g_store_mixed(r.store, BORA_DTYPE_BF16, 0, BORA_ABI_MINOR);
    g_graph *g = g_graph_new(r.store, BORA_MODE_TRAIN);
    bora_graph *gp = &g->pub;
    bora_axis qa[4] = {AX("batch", B), AX("heads", H), AX("position", T), AX("head_dim", E)};
    bora_axis ka[4] = {AX("batch", B), AX("kv_heads", HKV), AX("key_position", T),
                       AX("head_dim", E)};
    bora_tensor *q = bora_param(gp, "q", BORA_DTYPE_F32, 4, qa, bora_init_normal(1.0), 0);
    bora_tensor *k = bora_param(gp, "k", BORA_DTYPE_F32, 4, ka, bora_init_normal(1.0), 0);
    bora_tensor *v = bora_param(gp, "v", BORA_DTYPE_F32, 4, ka, bora_init_normal(1.0), 0);
    bora_attention_opts o = {
        .struct_size = sizeof o, .causal = 1, .head_axis = "heads", .kv_head_axis = "kv_heads"};
    const char *names[4] = {"batch", "heads", "position", "head_dim"};
    bora_tensor *loss = loss_of(gp, gp->api->attention(gp, q, k, v, &o), 4, names);
    g->output = loss;
    if (!loss || g_autodiff(g, loss) != BORA_OK || g_finalize(g) != BORA_OK ||
        g_store_materialize(r.store) != BORA_OK) {
        fprintf(stderr, "bench_kernels: attention: %s\n", g->error);
        exit(1);
    }
    fill_w(g, (int64_t)B * H * T * E);
    double fl, bl, f = node_ms(g, BORA_OP_ATTENTION, runs, &fl);
    double b = node_ms(g, BORA_OP_ATTENTION_GRAD, runs, &bl);
    printf("attention c=bf16 %dx%d (kv %d) x%d x%d causal, %d threads: forward %.2f ms, "
           "backward %.2f ms; least %.2f and %.2f\n",
           B, H, HKV, T, E, threads, f, b, fl, bl);
    g_graph_free(g);
    rig_close(&r);
}

static void bench_rms_norm(const char *dir, int threads, int runs, int64_t R, int64_t D)
{
    rig r;
    rig_open(&r, dir, threads, 1);
    g_graph *g = g_graph_new(r.store, BORA_MODE_TRAIN);
    bora_graph *gp = &g->pub;
    bora_axis xa[2] = {AX("r", R), AX("d", D)}, wa[1] = {AX("d", D)};
    bora_tensor *x = bora_param(gp, "x", BORA_DTYPE_F32, 2, xa, bora_init_normal(1.0), 0);
    bora_tensor *w = bora_param(gp, "g", BORA_DTYPE_F32, 1, wa, bora_init_normal(1.0), 0);
    const char *names[2] = {"r", "d"};
    bora_tensor *loss = loss_of(gp, gp->api->rms_norm(gp, x, w, "d", 1e-6, 0), 2, names);
    g->output = loss;
    if (!loss || g_autodiff(g, loss) != BORA_OK || g_finalize(g) != BORA_OK ||
        g_store_materialize(r.store) != BORA_OK) {
        fprintf(stderr, "bench_kernels: rms_norm: %s\n", g->error);
        exit(1);
    }
    fill_w(g, R * D);
    double fl, bl, f = node_ms(g, BORA_OP_RMS_NORM, runs, &fl);
    double b = node_ms(g, BORA_OP_RMS_NORM_GRAD, runs, &bl);
    printf("rms_norm f32 %lldx%lld, %d threads: forward %.2f ms, backward %.2f ms; least %.2f and "
           "%.2f\n",
           (long long)R, (long long)D, threads, f, b, fl, bl);
    g_graph_free(g);
    rig_close(&r);
}

/* GELU with erf (Whisper's activation) in f32 on Whisper-tiny's MLP at batch 4 of 30 s: 4 x 1500
 * frames x 1536, forward and its gradient (ACT_GRAD, unfused so that its node has a clock). */
static void bench_gelu(const char *dir, int threads, int runs)
{
    enum { R = 4 * 1500, D = 1536 };
    const char *was = getenv("BORA_NO_FUSION");
    char *kept = was ? strdup(was) : NULL;
    setenv("BORA_NO_FUSION", "1", 1);
    rig r;
    rig_open(&r, dir, threads, 1);
    g_graph *g = g_graph_new(r.store, BORA_MODE_TRAIN);
    bora_graph *gp = &g->pub;
    bora_axis xa[2] = {AX("r", R), AX("d", D)};
    bora_tensor *x = bora_param(gp, "x", BORA_DTYPE_F32, 2, xa, bora_init_normal(1.0), 0);
    const char *names[2] = {"r", "d"};
    bora_tensor *loss = loss_of(gp, bora_unary(gp, BORA_OP_GELU_EXACT, x), 2, names);
    g->output = loss;
    if (!loss || g_autodiff(g, loss) != BORA_OK || g_finalize(g) != BORA_OK ||
        g_store_materialize(r.store) != BORA_OK) {
        fprintf(stderr, "bench_kernels: gelu: %s\n", g->error);
        exit(1);
    }
    fill_w(g, (int64_t)R * D);
    double fl, bl, f = node_ms(g, BORA_OP_GELU_EXACT, runs, &fl);
    double b = node_ms(g, BORA_OP_ACT_GRAD, runs, &bl);
    printf("gelu (erf) f32 %dx%d, %d threads: forward %.2f ms, backward %.2f ms; least %.2f and "
           "%.2f\n",
           R, D, threads, f, b, fl, bl);
    g_graph_free(g);
    rig_close(&r);
    if (kept)
        setenv("BORA_NO_FUSION", kept, 1);
    else
        unsetenv("BORA_NO_FUSION");
    free(kept);
}

/* Whisper-tiny's audio stem in f32, batch 4 of 30 s: conv1 80 -> 384 channels over 3000 frames
 * (K 3, pad 1), conv2 384 -> 384 (K 3, stride 2, pad 1); forward, and the input and weight
 * gradients. bench/kernels/torch_conv1d.py times PyTorch's conv1d on the same shapes. */
static void bench_conv1d(const char *dir, int threads, int runs, int64_t C, int stride)
{
    enum { B = 4, O = 384, L = 3000, K = 3 };
    rig r;
    rig_open(&r, dir, threads, 1);
    g_graph *g = g_graph_new(r.store, BORA_MODE_TRAIN);
    bora_graph *gp = &g->pub;
    bora_axis xa[3] = {AX("batch", B), AX("in", C), AX("frame", L)};
    bora_axis wa[3] = {AX("out", O), AX("in", C), AX("kernel", K)};
    bora_tensor *x = bora_param(gp, "x", BORA_DTYPE_F32, 3, xa, bora_init_normal(1.0), 0);
    bora_tensor *w = bora_param(gp, "cw", BORA_DTYPE_F32, 3, wa, bora_init_normal(0.05), 0);
    bora_conv1d_opts o = {sizeof o, stride, 1, "frame", "in", "kernel"};
    const char *names[3] = {"batch", "out", "frame"};
    bora_tensor *loss = loss_of(gp, bora_conv1d(gp, x, w, &o), 3, names);
    g->output = loss;
    if (!loss || g_autodiff(g, loss) != BORA_OK || g_finalize(g) != BORA_OK ||
        g_store_materialize(r.store) != BORA_OK) {
        fprintf(stderr, "bench_kernels: conv1d: %s\n", g->error);
        exit(1);
    }
    fill_w(g, (int64_t)B * O * ((L + 2 - K) / stride + 1));
    double fl, il, wl, f = node_ms(g, BORA_OP_CONV1D, runs, &fl);
    double i = node_ms(g, BORA_OP_CONV1D_GRAD_INPUT, runs, &il);
    double wt = node_ms(g, BORA_OP_CONV1D_GRAD_WEIGHT, runs, &wl);
    printf("conv1d f32 %dx%lldx%d -> %d, K %d stride %d, %d threads: forward %.2f ms, input "
           "gradient %.2f ms, weight gradient %.2f ms; least %.2f, %.2f and %.2f\n",
           B, (long long)C, L, O, K, stride, threads, f, i, wt, fl, il, wl);
    g_graph_free(g);
    rig_close(&r);
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 4) {
        fprintf(stderr, "usage: %s PLUGIN_DIR [THREADS [RUNS]]\n", argv[0]);
        return 2;
    }
    int threads = argc > 2 ? atoi(argv[2]) : 2, runs = argc > 3 ? atoi(argv[3]) : 15;
    if (threads < 1 || runs < 1) {
        fprintf(stderr, "bench_kernels: THREADS and RUNS must be positive\n");
        return 2;
    }
    setenv("BORA_PROFILE", "1", 1);
    bora_log_set_level(BORA_LOG_WARN);
    bench_attention(argv[1], threads, runs);
    bench_rms_norm(argv[1], threads, runs, 2048, 1024);
    bench_rms_norm(argv[1], threads, runs, 2048, 768);
    bench_gelu(argv[1], threads, runs);
    bench_conv1d(argv[1], threads, runs, 80, 1);
    bench_conv1d(argv[1], threads, runs, 384, 2);
    return 0;
}
