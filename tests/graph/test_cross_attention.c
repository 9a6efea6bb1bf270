/* tests/graph/test_cross_attention.c — attention with T queries over S keys, T != S (a decoder's
 * cross-attention over an encoder's output, T > S and T < S), on the CPU backend.
 *
 * With --dump it prints, for each case (T > S and T < S without a mask; T < S causal, with a
 * sliding window, with a key length; grouped kv heads) in f64, f32 and f32 with bf16 products
 * (trainer.mp c=bf16), on the fused kernels and on the decomposition a backend without them
 * gets: q, k, v, the upstream gradient u, and what the C computed for the output and the
 * gradients of Σ out·u to q, k and v. check_cross_attention.sh hands that to
 * cross_attention_reference.py, which recomputes them with the softmax written out in PyTorch
 * float64 and autograd.
 *
 * Without it: the same bits at 1 and 2 threads (f32, and bf16 products), and causal or
 * sliding-window attention with more queries than keys refused with its message.
 *
 * usage: test_cross_attention PLUGIN_DIR [--dump] */
#include "../test.h"
#include "rig.h"

#include <math.h>

static const char *plugin_dir;

#define AX(n, s) ((bora_axis){(n), (s)})

typedef struct att_case {
    const char *name;
    int64_t B, H, Hkv, T, S, E;
    int causal;
    int64_t window, key_length; /* key_length 0: none */
} att_case;

static const att_case cases[] = {
    {"t_gt_s", 2, 2, 0, 7, 3, 4, 0, 0, 0},
    {"t_lt_s", 2, 2, 0, 3, 9, 4, 0, 0, 0},
    {"t_lt_s_causal", 1, 2, 0, 3, 8, 4, 1, 0, 0},
    {"t_lt_s_window", 1, 2, 0, 4, 9, 3, 1, 3, 0},
    {"t_lt_s_key_length", 2, 1, 0, 3, 8, 4, 0, 0, 5},
    {"t_gt_s_gqa", 1, 4, 2, 6, 4, 3, 0, 0, 0},
    {"t_gt_s_long", 1, 1, 0, 130, 70, 8, 0, 0, 0}, /* past one block of 64 query rows */
};
#define N_CASES (sizeof cases / sizeof cases[0])

static bora_kernel_fn (*backend_kernel)(bora_backend *, uint32_t, const int32_t *, uint32_t);
static bora_backend_ops unfused_ops;

static bora_kernel_fn without_attention(bora_backend *b, uint32_t op, const int32_t *dt, uint32_t n)
{
    if (op == BORA_OP_ATTENTION || op == BORA_OP_ATTENTION_GRAD)
        return NULL;
    return backend_kernel(b, op, dt, n);
}

typedef struct att_run {
    int64_t nq, nk, no;
    double *v[8]; /* q, k, v, u, out, dq, dk, dv */
} att_run;

static void run_free(att_run *o)
{
    for (int i = 0; i < 8; i++)
        free(o->v[i]);
}

static double *widen(const void *p, int dtype, int64_t n)
{
    double *d = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++)
        d[i] = dtype == BORA_DTYPE_F64 ? ((const double *)p)[i] : ((const float *)p)[i];
    return d;
}

/* Case c: q (batch, head, position, head_dim), k and v (batch, head or kv_head, key_position,
 * head_dim) parameters, loss Σ out·u; decomposed: the backend seen without its attention
 * kernels; mixed: trainer.mp c=bf16 (the kernels' products in bf16). 0, or -1 (reported). */
static int run_case(const att_case *c, int dtype, int mixed, int decomposed, int threads,
                    att_run *o)
{
    memset(o, 0, sizeof *o);
    rig r;
    rig_open(&r, plugin_dir, threads, 21);
    if (mixed)
        g_store_mixed(r.store, BORA_DTYPE_BF16, 0, BORA_ABI_MINOR);
    if (decomposed) {
        unfused_ops = *r.ops;
        backend_kernel = r.ops->kernel;
        unfused_ops.kernel = without_attention;
        r.store->ops = &unfused_ops;
    }
    g_graph *g = g_graph_new(r.store, BORA_MODE_TRAIN);
    bora_graph *gp = &g->pub;
    const char *kvh = c->Hkv ? "kv_head" : "head";
    int64_t hk = c->Hkv ? c->Hkv : c->H;
    bora_axis qa[4] = {AX("batch", c->B), AX("head", c->H), AX("position", c->T),
                       AX("head_dim", c->E)};
    bora_axis ka[4] = {AX("batch", c->B), AX(kvh, hk), AX("key_position", c->S),
                       AX("head_dim", c->E)};
    bora_tensor *q = bora_param(gp, "q", dtype, 4, qa, bora_init_normal(1.0), 0);
    bora_tensor *k = bora_param(gp, "k", dtype, 4, ka, bora_init_normal(1.0), 0);
    bora_tensor *v = bora_param(gp, "v", dtype, 4, ka, bora_init_normal(1.0), 0);
    bora_attention_opts ao = {.struct_size = sizeof ao,
                              .causal = c->causal,
                              .query_axis = "position",
                              .key_axis = "key_position",
                              .head_axis = c->Hkv ? "head" : NULL,
                              .kv_head_axis = c->Hkv ? "kv_head" : NULL,
                              .sliding_window = c->window};
    if (c->key_length)
        ao.key_length = gp->api->extent(gp, "klen", c->S);
    bora_tensor *out = gp->api->attention(gp, q, k, v, &ao);
    bora_tensor *u = bora_input(gp, "u", dtype, 4, qa);
    const char *names[4] = {"batch", "head", "position", "head_dim"};
    gval *loss = out ? gp->api->reduce(gp, BORA_OP_SUM, bora_mul(gp, out, u), 4, names) : NULL;
    out = out ? gp->api->contiguous(gp, out) : NULL;
    o->nq = c->B * c->H * c->T * c->E, o->nk = c->B * hk * c->S * c->E, o->no = o->nq;
    size_t e = bora_dtype_size(dtype);
    char *uv = malloc(e * (size_t)o->nq), *buf = malloc(e * (size_t)(o->nq + o->nk));
    for (int64_t i = 0; i < o->nq; i++) {
        double x = sin(0.41 * (double)i + 0.3) * 1.2;
        if (dtype == BORA_DTYPE_F64)
            ((double *)uv)[i] = x;
        else
            ((float *)uv)[i] = (float)x;
    }
    int32_t klen = (int32_t)c->key_length;
    int ok = loss && !g_autodiff(g, loss) && (g->output = out, !g_finalize(g)) &&
             !g_store_materialize(r.store) && !g_set_input(g, "u", uv, e * (size_t)o->nq) &&
             (!c->key_length || !g_set_input(g, "klen", &klen, sizeof klen)) && !g_run(g);
    if (ok) {
        static const char *const params[3] = {"q", "k", "v"};
        for (int p = 0; p < 3; p++) {
            int64_t n = p ? o->nk : o->nq;
            rig_copy(&r, 0, params[p], 0, buf, e * (size_t)n, 1);
            o->v[p] = widen(buf, dtype, n);
            rig_copy(&r, 1, params[p], 0, buf, e * (size_t)n, 1);
            o->v[5 + p] = widen(buf, dtype, n);
        }
        o->v[3] = widen(uv, dtype, o->nq);
        g_read(g, out, buf, e * (size_t)o->nq);
        o->v[4] = widen(buf, dtype, o->nq);
        int fused = g->op_runs[BORA_OP_ATTENTION] > 0 && g->op_runs[BORA_OP_ATTENTION_GRAD] > 0;
        if (fused == decomposed) {
            fprintf(stderr, "%s: the attention kernels %s\n", c->name,
                    decomposed ? "ran without being offered" : "did not run");
            test_failures++;
        }
    } else {
        fprintf(stderr, "%s: graph failed: %s %s\n", c->name, g->error, bora_error_get());
        test_failures++;
    }
    free(uv);
    free(buf);
    g_graph_free(g);
    rig_close(&r);
    return ok ? 0 : -1;
}

static void print_values(const char *what, const double *v, int64_t n)
{
    printf("%s", what);
    for (int64_t i = 0; i < n; i++)
        printf(" %.17g", v[i]);
    printf("\n");
}

static void dump(void)
{
    static const struct {
        const char *name;
        int dtype, mixed;
    } kinds[3] = {
        {"f64", BORA_DTYPE_F64, 0}, {"f32", BORA_DTYPE_F32, 0}, {"bf16", BORA_DTYPE_F32, 1}};
    static const char *const what[8] = {"q", "k", "v", "u", "out", "dq", "dk", "dv"};
    for (size_t i = 0; i < N_CASES; i++)
        for (int kd = 0; kd < 3; kd++)
            for (int dec = 0; dec < 2; dec++) {
                const att_case *c = &cases[i];
                att_run o;
                if (run_case(c, kinds[kd].dtype, kinds[kd].mixed, dec, 2, &o))
                    continue;
                printf("case %s %s %s B %lld H %lld Hkv %lld T %lld S %lld E %lld causal %d "
                       "window %lld key_length %lld\n",
                       c->name, kinds[kd].name, dec ? "decomposed" : "kernel", (long long)c->B,
                       (long long)c->H, (long long)(c->Hkv ? c->Hkv : c->H), (long long)c->T,
                       (long long)c->S, (long long)c->E, c->causal, (long long)c->window,
                       (long long)c->key_length);
                for (int p = 0; p < 8; p++)
                    print_values(what[p], o.v[p],
                                 p == 1 || p == 2 || p == 6 || p == 7 ? o.nk : o.nq);
                run_free(&o);
            }
}

/* 1 and 2 threads: the same bits for out, dq, dk, dv. */
static void check_threads(void)
{
    for (size_t i = 0; i < N_CASES; i++)
        for (int mixed = 0; mixed < 2; mixed++) {
            att_run a, b;
            if (run_case(&cases[i], BORA_DTYPE_F32, mixed, 0, 1, &a))
                continue;
            if (run_case(&cases[i], BORA_DTYPE_F32, mixed, 0, 2, &b) == 0) {
                for (int p = 4; p < 8; p++) {
                    int64_t n = p >= 6 ? a.nk : a.nq;
                    if (memcmp(a.v[p], b.v[p], sizeof(double) * (size_t)n)) {
                        fprintf(stderr, "%s%s: value %d differs between 1 and 2 threads\n",
                                cases[i].name, mixed ? " (bf16 products)" : "", p);
                        test_failures++;
                    }
                }
                run_free(&b);
            }
            run_free(&a);
        }
}

/* Causal or windowed attention with more queries than keys is refused, naming both axes. */
static void check_refusals(void)
{
    for (int kind = 0; kind < 2; kind++) {
        rig r;
        rig_open(&r, plugin_dir, 1, 1);
        g_graph *g = g_graph_new(r.store, BORA_MODE_EVAL);
        bora_graph *gp = &g->pub;
        bora_axis qa[3] = {AX("head", 2), AX("position", 6), AX("head_dim", 4)};
        bora_axis ka[3] = {AX("head", 2), AX("key_position", 4), AX("head_dim", 4)};
        bora_tensor *q = bora_input(gp, "q", BORA_DTYPE_F32, 3, qa);
        bora_tensor *k = bora_input(gp, "k", BORA_DTYPE_F32, 3, ka);
        bora_attention_opts o = {.struct_size = sizeof o,
                                 .causal = kind == 0,
                                 .key_axis = "key_position",
                                 .sliding_window = kind == 1 ? 2 : 0};
        CHECK(gp->api->attention(gp, q, k, k, &o) == NULL);
        CHECK_CONTAINS(g->error, kind == 0 ? "attention: causal needs the 6 queries along "
                                             "'position'"
                                           : "attention: sliding_window needs the 6 queries");
        CHECK_CONTAINS(g->error, "the 4 keys along 'key_position'");
        g_graph_free(g);
        rig_close(&r);
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_cross_attention PLUGIN_DIR [--dump]\n");
        return 2;
    }
    plugin_dir = argv[1];
    if (argc > 2 && !strcmp(argv[2], "--dump")) {
        dump();
        return test_failures ? 1 : 0;
    }
    check_threads();
    check_refusals();
    return test_summary("test_cross_attention");
}
