/* tests/backend/test_attention_bf16.c — attention's products in bf16 under trainer.mp c=bf16 on
 * the CPU backend (bora_opt_attention.product_dtype), forward and backward, in shapes that cross
 * the 64-row blocks, with a causal mask, documents, a batch of one (the heads split between the
 * threads), head widths past and short of whole registers, q read strided, a sliding
 * window (ABI 1.9) across the blocks, grouped-query heads (2 and 3 query heads per kv head, with
 * and without the window and documents), a few queries over more keys (the last positions) and
 * soft-capped scores (c·tanh(s / c) before the masks, ABI 1.12):
 *   - the output and the gradients of q, k and v equal a double-precision attention whose
 *     products take their operands rounded to bf16 (q, k, v and the output's gradient, the
 *     probabilities and their gradient) and accumulate exactly, within f32's rounding of the
 *     softmax; and they miss the same attention without that rounding by several times more,
 *     so the rounding happened;
 *   - a second run gives the same bits;
 *   - with the model's upcast (bora_attention_opts.upcast) the graph computes in bf16 yet
 *     attention gives the bits of the f32 graph;
 *   - decoding over a grouped cache one position at a time (a runtime key length, which the bf16
 *     products do not take) gives under c=bf16 the f32 graph's bits.
 * The bf16 products run where oneDNN has a bf16 matmul (BORA_CPU_BF16_MATMUL=onednn is set);
 * on a CPU without one the test says so and checks only that c=bf16 gives f32's bits there.
 *
 * usage: test_attention_bf16 PLUGIN_DIR */
#include "../graph/rig.h"
#include "../test.h"

#include <math.h>

static const char *plugin_dir;

#define AX(n, s) ((bora_axis){(n), (s)})

typedef struct acase {
    const char *name;
    int64_t B, H, T, E;
    int causal, segments, q_strided;
    int64_t window; /* the sliding window (ABI 1.9; 0: none) */
    int64_t Hk;     /* kv heads (grouped-query attention, ABI 1.9; 0: H, k and v on q's axis) */
    int64_t S;      /* keys (0: T); the queries are the last T positions */
    double softcap; /* the soft cap c (ABI 1.12; 0: none) */
} acase;

static const acase cases[] = {
    {"causal 2x3x150x64, documents", 2, 3, 150, 64, 1, 1, 0, 0, 0, 0, 0},
    {"batch of one, 4 heads split among threads, 130x32", 1, 4, 130, 32, 1, 0, 0, 0, 0, 0, 0},
    {"not causal, head width 20, 70 rows", 2, 2, 70, 20, 0, 0, 0, 0, 0, 0, 0},
    {"q strided, head width 24, 100 rows", 2, 2, 100, 24, 1, 0, 1, 0, 0, 0, 0},
    {"causal, window 50 across the blocks, 2x2x150x32", 2, 2, 150, 32, 1, 0, 0, 50, 0, 0, 0},
    {"grouped 4 over 2 kv heads, causal 2x4x150x64, documents", 2, 4, 150, 64, 1, 1, 0, 0, 2, 0, 0},
    {"grouped 6 over 2 kv heads, window 50, 2x6x140x32", 2, 6, 140, 32, 1, 0, 0, 50, 2, 0, 0},
    {"grouped 3 over 1, batch of one, not causal, q strided", 1, 3, 70, 20, 0, 0, 1, 0, 1, 0, 0},
    {"grouped 6 over 3, window 40, documents, 2x6x130x24", 2, 6, 130, 24, 1, 1, 0, 40, 3, 0, 0},
    {"grouped 4 over 2, 3 queries over 150 keys, window 50", 2, 4, 3, 32, 1, 0, 0, 50, 2, 150, 0},
    {"soft cap 1, causal 2x3x150x64, documents", 2, 3, 150, 64, 1, 1, 0, 0, 0, 0, 1.0},
    {"soft cap 0.8, grouped 6 over 2, window 50, 2x6x140x32", 2, 6, 140, 32, 1, 0, 0, 50, 2, 0,
     0.8},
    {"soft cap 2, grouped 4 over 2, 3 queries over 150 keys", 2, 4, 3, 32, 1, 0, 0, 0, 2, 150, 2.0},
};

static int64_t kv_heads(const acase *c)
{
    return c->Hk ? c->Hk : c->H;
}

static int64_t keys_of(const acase *c)
{
    return c->S ? c->S : c->T;
}

static int32_t seg_of(int64_t b, int64_t t)
{
    return (int32_t)((t + 7 * b) / 37); /* documents of 37 positions, shifted per row */
}

static double bf(double x)
{
    float f = (float)x;
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&f, &u, sizeof f);
    return f;
}

static double weight_of(int64_t i)
{
    return (double)(float)(sin(1.0 + (double)i * 0.37) + 0.2);
}

/* out = attention(q, k, v); loss = Σ out · w (so the output's gradient is w). */
static bora_tensor *build(bora_graph *g, const acase *c, int upcast, bora_tensor **out)
{
    const bora_graph_api *A = g->api;
    bora_axis qa[4] = {AX("batch", c->B), AX("heads", c->H), AX("position", c->T),
                       AX("head_dim", c->E)};
    if (c->q_strided)
        qa[1] = AX("position", c->T), qa[2] = AX("heads", c->H);
    bora_axis ka[4] = {AX("batch", c->B), AX(c->Hk ? "kv_heads" : "heads", kv_heads(c)),
                       AX("key_position", keys_of(c)), AX("head_dim", c->E)};
    bora_tensor *q = bora_param(g, "q", BORA_DTYPE_F32, 4, qa, bora_init_normal(1.0), 0);
    bora_tensor *k = bora_param(g, "k", BORA_DTYPE_F32, 4, ka, bora_init_normal(1.0), 0);
    bora_tensor *v = bora_param(g, "v", BORA_DTYPE_F32, 4, ka, bora_init_normal(1.0), 0);
    bora_attention_opts o = {.struct_size = sizeof o,
                             .causal = c->causal,
                             .upcast = upcast,
                             .sliding_window = c->window,
                             .softcap = c->softcap};
    if (c->Hk)
        o.head_axis = "heads", o.kv_head_axis = "kv_heads";
    if (c->segments) {
        bora_axis sa[2] = {AX("batch", c->B), AX("position", c->T)};
        o.segment_ids = bora_input(g, "seg", BORA_DTYPE_I32, 2, sa);
    }
    *out = A->attention(g, q, k, v, &o);
    if (!*out)
        return NULL;
    /* (batch, heads, position, head_dim) whatever q's order */
    const char *order[4] = {"batch", "heads", "position", "head_dim"};
    *out = A->contiguous(g, A->permute(g, *out, 4, order));
    bora_axis ax[4];
    for (int i = 0; i < 4; i++)
        ax[i] = A->axis(*out, i);
    bora_tensor *w = bora_input(g, "w", BORA_DTYPE_F32, 4, ax);
    bora_tensor *loss = A->reduce(g, BORA_OP_SUM, bora_mul(g, *out, w), 4, order);
    return loss && loss->base != loss ? A->contiguous(g, loss) : loss;
}

/* One run's values, all (batch, heads, position, head_dim) dense. */
typedef struct result {
    float *q, *k, *v;    /* the parameters */
    float *o;            /* the output */
    float *dq, *dk, *dv; /* the gradients */
} result;

static void result_free(result *r)
{
    float *all[] = {r->q, r->k, r->v, r->o, r->dq, r->dk, r->dv};
    for (int i = 0; i < 7; i++)
        free(all[i]);
}

/* The param's values (or gradient) in (batch, heads, position, head_dim) order: q's (H heads, T
 * rows; strided: stored (batch, position, heads, head_dim)), or k's and v's (kv: Hk heads, S
 * rows). */
static float *grab(const acase *c, const float *p, int strided, int kv)
{
    int64_t B = c->B, H = kv ? kv_heads(c) : c->H, T = kv ? keys_of(c) : c->T, E = c->E;
    float *x = malloc(sizeof(float) * (size_t)(B * H * T * E));
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < T; t++)
                for (int64_t e = 0; e < E; e++) {
                    int64_t at =
                        strided ? ((b * T + t) * H + h) * E + e : ((b * H + h) * T + t) * E + e;
                    x[((b * H + h) * T + t) * E + e] = p[at];
                }
    return x;
}

/* Build and run the case (twice: the second run's bits must equal the first's). */
static int run_case(const acase *c, int compute, int upcast, result *res)
{
    rig r;
    rig_open(&r, plugin_dir, 2, 5);
    g_store_mixed(r.store, compute, 0, BORA_ABI_MINOR);
    g_graph *ge = g_graph_new(r.store, BORA_MODE_EVAL), *g = g_graph_new(r.store, BORA_MODE_TRAIN);
    bora_tensor *out = NULL, *eout = NULL, *loss = build(&g->pub, c, upcast, &out);
    build(&ge->pub, c, upcast, &eout);
    g->output = loss;
    ge->output = eout;
    int ok = loss && eout && g_autodiff(g, loss) == BORA_OK && g_finalize(g) == BORA_OK &&
             g_finalize(ge) == BORA_OK && g_store_materialize(r.store) == BORA_OK;
    if (!ok) {
        fprintf(stderr, "%s: build failed: %s%s\n", c->name, g->error, ge->error);
        test_failures++;
        g_graph_free(g);
        g_graph_free(ge);
        rig_close(&r);
        return 0;
    }
    int64_t n = c->B * c->H * c->T * c->E;
    float *w = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        w[i] = (float)weight_of(i);
    g_set_input(g, "w", w, sizeof(float) * (size_t)n);
    g_set_input(ge, "w", w, sizeof(float) * (size_t)n);
    free(w);
    if (c->segments) {
        int32_t *seg = malloc(sizeof(int32_t) * (size_t)(c->B * c->T));
        for (int64_t b = 0; b < c->B; b++)
            for (int64_t t = 0; t < c->T; t++)
                seg[b * c->T + t] = seg_of(b, t);
        g_set_input(g, "seg", seg, sizeof(int32_t) * (size_t)(c->B * c->T));
        g_set_input(ge, "seg", seg, sizeof(int32_t) * (size_t)(c->B * c->T));
        free(seg);
    }
    memset(res, 0, sizeof *res);
    res->o = malloc(sizeof(float) * (size_t)n);
    float *again = malloc(sizeof(float) * (size_t)n);
    CHECK(g_run(ge) == BORA_OK && g_read(ge, eout, res->o, sizeof(float) * (size_t)n) == BORA_OK);
    CHECK(g_run(ge) == BORA_OK && g_read(ge, eout, again, sizeof(float) * (size_t)n) == BORA_OK);
    if (memcmp(res->o, again, sizeof(float) * (size_t)n)) {
        fprintf(stderr, "%s: a second run gave other output bits\n", c->name);
        test_failures++;
    }
    free(again);
    const char *names[3] = {"q", "k", "v"};
    float **grads[3] = {&res->dq, &res->dk, &res->dv}, **params[3] = {&res->q, &res->k, &res->v};
    CHECK(g_store_zero_grads(r.store) == BORA_OK && g_run(g) == BORA_OK);
    for (int i = 0; i < 3; i++) {
        *params[i] = grab(c, rig_param(&r, names[i]), i == 0 && c->q_strided, i > 0);
        *grads[i] = grab(c, rig_grad(&r, names[i]), i == 0 && c->q_strided, i > 0);
    }
    CHECK(g_store_zero_grads(r.store) == BORA_OK && g_run(g) == BORA_OK);
    for (int i = 0; i < 3; i++) {
        float *d = grab(c, rig_grad(&r, names[i]), i == 0 && c->q_strided, i > 0);
        int64_t len = i ? c->B * kv_heads(c) * keys_of(c) * c->E : n;
        if (memcmp(d, *grads[i], sizeof(float) * (size_t)len)) {
            fprintf(stderr, "%s: a second run gave other bits for d%s\n", c->name, names[i]);
            test_failures++;
        }
        free(d);
    }
    g_graph_free(g);
    g_graph_free(ge);
    rig_close(&r);
    return 1;
}

/* Attention in double over the run's parameters; rounded: the products' operands rounded to
 * bf16 as the backend rounds them. Query head h reads kv head h / (H / Hk); the queries are the
 * last T of the S positions. Writes o, dq (B, H, T, E) and dk, dv (B, Hk, S, E), dense. */
static void reference(const acase *c, const result *in, int rounded, double *o, double *dq,
                      double *dk, double *dv)
{
    int64_t T = c->T, E = c->E, S = keys_of(c), Hk = kv_heads(c), G = c->H / Hk;
    double scale = 1.0 / sqrt((double)E);
    double (*rd)(double) = rounded ? bf : NULL;
#define R(x) (rd ? rd(x) : (x))
    double *p = malloc(sizeof(double) * (size_t)(T * S)),
           *ds = malloc(sizeof(double) * (size_t)(T * S)),
           *slope = malloc(sizeof(double) * (size_t)(T * S));
    memset(dk, 0, sizeof(double) * (size_t)(c->B * Hk * S * E));
    memset(dv, 0, sizeof(double) * (size_t)(c->B * Hk * S * E));
    for (int64_t bh = 0; bh < c->B * c->H; bh++) {
        int64_t b = bh / c->H, base = bh * T * E, kbase = (b * Hk + bh % c->H / G) * S * E;
        const float *q = in->q + base, *k = in->k + kbase, *v = in->v + kbase;
        for (int64_t t = 0; t < T; t++) {
            int64_t i = S - T + t; /* the query's position */
            double m = -INFINITY;
            for (int64_t s = 0; s < S; s++) {
                int visible = (!c->causal || s <= i) &&
                              (!c->segments || seg_of(b, s) == seg_of(b, t)) &&
                              (!c->window || s > i - c->window);
                double acc = 0;
                for (int64_t e = 0; e < E; e++)
                    acc += R(q[t * E + e]) * R(k[s * E + e]);
                acc *= scale;
                if (c->softcap) { /* tanh(s / c)·c, then the masks; its slope for the backward */
                    double u = tanh(acc / c->softcap);
                    acc = u * c->softcap;
                    slope[t * S + s] = 1 - u * u;
                }
                p[t * S + s] = visible ? acc : -INFINITY;
                m = fmax(m, p[t * S + s]);
            }
            double sum = 0;
            for (int64_t s = 0; s < S; s++)
                sum += p[t * S + s] = m == -INFINITY ? 0 : exp(p[t * S + s] - m);
            for (int64_t s = 0; s < S; s++)
                p[t * S + s] = sum > 0 ? p[t * S + s] / sum : 0;
            for (int64_t e = 0; e < E; e++) {
                double acc = 0;
                for (int64_t s = 0; s < S; s++)
                    acc += R(p[t * S + s]) * R(v[s * E + e]);
                o[base + t * E + e] = acc;
            }
        }
        /* dO = w; D = Σ dO · O; dS = P (dP - D), times the cap's slope 1 - tanh² */
        for (int64_t t = 0; t < T; t++) {
            double d = 0;
            for (int64_t e = 0; e < E; e++)
                d += weight_of(base + t * E + e) * o[base + t * E + e];
            for (int64_t s = 0; s < S; s++) {
                double dp = 0;
                for (int64_t e = 0; e < E; e++)
                    dp += R(weight_of(base + t * E + e)) * R(v[s * E + e]);
                ds[t * S + s] = p[t * S + s] * (dp - d) * (c->softcap ? slope[t * S + s] : 1);
            }
        }
        for (int64_t t = 0; t < T; t++)
            for (int64_t e = 0; e < E; e++) {
                double acc = 0;
                for (int64_t s = 0; s < S; s++)
                    acc += R(ds[t * S + s]) * R(k[s * E + e]);
                dq[base + t * E + e] = scale * acc;
            }
        /* dK and dV: summed over the kv head's query heads */
        for (int64_t s = 0; s < S; s++)
            for (int64_t e = 0; e < E; e++) {
                double ak = 0, av = 0;
                for (int64_t t = 0; t < T; t++) {
                    ak += R(ds[t * S + s]) * R(q[t * E + e]);
                    av += R(p[t * S + s]) * R(weight_of(base + t * E + e));
                }
                dk[kbase + s * E + e] += scale * ak;
                dv[kbase + s * E + e] += av;
            }
    }
#undef R
    free(p);
    free(ds);
    free(slope);
}

/* The largest and the mean difference, relative to the largest magnitude of want. */
static void rel_err(const float *got, const double *want, int64_t n, double *worst, double *mean)
{
    double big = 0, sum = 0;
    *worst = 0;
    for (int64_t i = 0; i < n; i++)
        big = fmax(big, fabs(want[i]));
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(got[i] - want[i]);
        if (!(d <= *worst))
            *worst = d;
        sum += d;
    }
    *worst = big > 0 ? *worst / big : INFINITY;
    *mean = big > 0 && n ? sum / (double)n / big : INFINITY;
}

/* Decoding over a grouped cache (6 query heads over 2 kv heads) with a window, one position at a
 * time (T = 1, a runtime key length): the outputs of every step under compute (into out, DEC_Q
 * floats a step). */
enum { DEC_B = 2, DEC_H = 6, DEC_HK = 2, DEC_S = 20, DEC_E = 32, DEC_W = 8 };
enum { DEC_Q = DEC_B * DEC_H * DEC_E, DEC_K = DEC_B * DEC_HK * DEC_S * DEC_E };

static int run_decode(int compute, float *out)
{
    rig r;
    rig_open(&r, plugin_dir, 2, 5);
    g_store_mixed(r.store, compute, 0, BORA_ABI_MINOR);
    g_graph *g = g_graph_new(r.store, BORA_MODE_EVAL);
    bora_graph *gp = &g->pub;
    bora_axis qa[4] = {AX("batch", DEC_B), AX("heads", DEC_H), AX("position", 1),
                       AX("head_dim", DEC_E)};
    bora_axis ka[4] = {AX("batch", DEC_B), AX("kv_heads", DEC_HK), AX("key_position", DEC_S),
                       AX("head_dim", DEC_E)};
    bora_attention_opts o = {.struct_size = sizeof o,
                             .causal = 1,
                             .head_axis = "heads",
                             .kv_head_axis = "kv_heads",
                             .sliding_window = DEC_W,
                             .key_length = gp->api->extent(gp, "klen", DEC_S)};
    bora_tensor *q = bora_input(gp, "q", BORA_DTYPE_F32, 4, qa);
    bora_tensor *k = bora_input(gp, "k", BORA_DTYPE_F32, 4, ka);
    bora_tensor *v = bora_input(gp, "v", BORA_DTYPE_F32, 4, ka);
    bora_tensor *y = gp->api->attention(gp, q, k, v, &o);
    g->output = y ? gp->api->contiguous(gp, y) : NULL;
    int ok = g->output && g_finalize(g) == BORA_OK && g_store_materialize(r.store) == BORA_OK;
    static float qv[DEC_Q], kv[DEC_K], vv[DEC_K];
    for (int i = 0; i < DEC_K; i++)
        kv[i] = (float)cos(0.53 * i), vv[i] = (float)sin(0.71 * i + 1.3);
    ok = ok && g_set_input(g, "k", kv, sizeof kv) == BORA_OK &&
         g_set_input(g, "v", vv, sizeof vv) == BORA_OK;
    for (int32_t L = 1; ok && L <= DEC_S; L++) {
        for (int i = 0; i < DEC_Q; i++)
            qv[i] = (float)sin(0.37 * (i + L * DEC_Q) + 0.1);
        ok = g_set_input(g, "q", qv, sizeof qv) == BORA_OK &&
             g_set_input(g, "klen", &L, sizeof L) == BORA_OK && g_run(g) == BORA_OK &&
             g_read(g, g->output, out + (L - 1) * DEC_Q, sizeof(float) * DEC_Q) == BORA_OK;
    }
    if (!ok) {
        fprintf(stderr, "grouped decode: %s %s\n", g->error, bora_error_get());
        test_failures++;
    }
    g_graph_free(g);
    rig_close(&r);
    return ok;
}

static void check_decode(void)
{
    static float lowp[DEC_S * DEC_Q], f32[DEC_S * DEC_Q];
    if (!run_decode(BORA_DTYPE_BF16, lowp) || !run_decode(BORA_DTYPE_F32, f32))
        return;
    if (memcmp(lowp, f32, sizeof lowp)) {
        fprintf(stderr, "grouped decode, window %d: c=bf16 does not give the f32 graph's bits\n",
                DEC_W);
        test_failures++;
    } else {
        printf("%-52s f32's bits\n", "grouped decode 6 over 2, window 8, 20 steps");
    }
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PLUGIN_DIR\n", argv[0]);
        return 2;
    }
    plugin_dir = argv[1];
    bora_log_set_level(BORA_LOG_WARN);
    setenv("BORA_CPU_BF16_MATMUL", "onednn", 1);
    rig probe;
    int onednn = rig_try_open(&probe, plugin_dir, 2, 5) == BORA_OK;
    if (onednn)
        rig_close(&probe);
    else {
        unsetenv("BORA_CPU_BF16_MATMUL");
        printf("oneDNN has no bf16 matmul on this CPU: checking only that c=bf16 keeps f32's "
               "attention here\n");
    }
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const acase *c = &cases[i];
        int before = test_failures;
        int64_t n = c->B * c->H * c->T * c->E;
        int64_t nk = c->B * kv_heads(c) * keys_of(c) * c->E;
        size_t bytes = sizeof(float) * (size_t)n, kbytes = sizeof(float) * (size_t)nk;
        result lowp, up, f32;
        if (!run_case(c, BORA_DTYPE_BF16, 0, &lowp) || !run_case(c, BORA_DTYPE_BF16, 1, &up) ||
            !run_case(c, BORA_DTYPE_F32, 0, &f32))
            continue;
        /* upcast: the f32 graph's bits */
        if (memcmp(up.o, f32.o, bytes) || memcmp(up.dq, f32.dq, bytes) ||
            memcmp(up.dk, f32.dk, kbytes) || memcmp(up.dv, f32.dv, kbytes)) {
            fprintf(stderr, "%s: upcast under c=bf16 does not give the f32 graph's bits\n",
                    c->name);
            test_failures++;
        }
        if (!onednn) {
            if (memcmp(lowp.o, f32.o, bytes) || memcmp(lowp.dq, f32.dq, bytes) ||
                memcmp(lowp.dk, f32.dk, kbytes) || memcmp(lowp.dv, f32.dv, kbytes)) {
                fprintf(stderr, "%s: without oneDNN's bf16 matmul, c=bf16 changed attention\n",
                        c->name);
                test_failures++;
            }
            goto next;
        }
        double *want[2][4];
        for (int rnd = 0; rnd < 2; rnd++) {
            for (int j = 0; j < 4; j++)
                want[rnd][j] = malloc(sizeof(double) * (size_t)(j < 2 ? n : nk));
            reference(c, &lowp, rnd, want[rnd][0], want[rnd][1], want[rnd][2], want[rnd][3]);
        }
        const float *got[4] = {lowp.o, lowp.dq, lowp.dk, lowp.dv};
        const char *what[4] = {"output", "dq", "dk", "dv"};
        for (int j = 0; j < 4; j++) {
            double wr, mr, wu, mu;
            rel_err(got[j], want[1][j], j < 2 ? n : nk, &wr, &mr);
            rel_err(got[j], want[0][j], j < 2 ? n : nk, &wu, &mu);
            /* The f32 softmax and accumulation stay far below bf16's rounding step (2^-8) on
             * average; a probability or its gradient computed in f32 can round to the other
             * neighbour now and then (a few elements in 10^4, each off by one step of its own
             * magnitude), so the worst element only bounds the gross. */
            if (!(mr <= 1e-5) || !(wr <= 2e-3) || !(mu >= 10 * mr)) {
                fprintf(stderr,
                        "%s, %s: from the rounded products %.3g on average (at most 1e-5), %.3g "
                        "at worst (at most 2e-3); from the unrounded ones %.3g on average (at "
                        "least 10 times more)\n",
                        c->name, what[j], mr, wr, mu);
                test_failures++;
            } else {
                printf("  %s: from rounded products %.2g on average, %.2g at worst; from "
                       "unrounded %.2g on average\n",
                       what[j], mr, wr, mu);
            }
        }
        for (int rnd = 0; rnd < 2; rnd++)
            for (int j = 0; j < 4; j++)
                free(want[rnd][j]);
    next:
        if (test_failures == before)
            printf("%-52s %s\n", c->name,
                   onednn ? "bf16 products as rounded in double; upcast gives f32's bits"
                          : "f32's bits");
        result_free(&lowp);
        result_free(&up);
        result_free(&f32);
    }
    check_decode();
    if (test_failures)
        fprintf(stderr, "test_attention_bf16: %d failure(s)\n", test_failures);
    return test_failures ? 1 : 0;
}
