/* tests/graph/test_moe_ops.c — the mixture-of-experts ops (ABI 1.13) on a backend, against
 * plain loops written here: top_k (ties, NaN, -0 and +0, k equal to the axis, an axis not last,
 * a 1-d x), argsort and bincount of routing keys and the permutation's round trip through
 * embedding, grouped_matmul in f64 and f32 (empty groups, one group taking every row, rows past
 * the sizes' sum, sizes changing between runs of one graph, transposed operands) and under
 * trainer.mp c=bf16 (forward and gradients, against the bf16 sums); gradients of grouped_matmul
 * and of a whole routed layer (softmax, top_k, the gathers and scatter-adds, the grouped
 * product, the weighted sum) against central differences in f64; 1 and 2 threads giving the
 * same bits in f32; bad sizes and bad builds refused with their messages; sizes a GPU splits
 * among many blocks (top_k over 300 entries, argsort and bincount of 200,000 keys, a grouped
 * product of 650 rows against plain loops).
 *
 * With a backend named (cuda) every case runs on it instead (parameters and gradients are read
 * and written through the backend's copies); exits 77 (skipped) when the backend reports no
 * usable device here (no GPU).
 *
 * usage: test_moe_ops PLUGIN_DIR [BACKEND] */
#include "../test.h"
#include "rig.h"

#include <math.h>

static const char *plugin_dir;
static const char *backend_name = "cpu";

/* The rig on the backend under test (num_threads: the CPU backend's key); exits on failure. */
static void open_rig(rig *r, int num_threads, uint64_t seed)
{
    if (rig_try_open_on(r, plugin_dir, backend_name, num_threads, seed) != BORA_OK) {
        fprintf(stderr, "rig: %s\n", bora_error_get());
        exit(1);
    }
}

/* A parameter's values (grad: its gradient's), n bytes copied out of the backend into dst. */
static void copy_out(rig *r, int grad, const char *name, void *dst, size_t n)
{
    if (rig_copy(r, grad, name, 0, dst, n, 1) != BORA_OK) {
        fprintf(stderr, "copy of %s%s failed: %s\n", grad ? "d " : "", name, bora_error_get());
        test_failures++;
        memset(dst, 0, n);
    }
}

#define AX(n, s) ((bora_axis){(n), (s)})

/* g's output: v, copied dense if a view. */
static gval *output(g_graph *g, gval *v)
{
    if (v && v->base != v)
        v = g->pub.api->contiguous(&g->pub, v);
    return g->output = v;
}

/* ---- top_k -------------------------------------------------------------------------------- */

/* Whether a ranks before b, b's index being the lower: strictly larger, NaN above numbers. */
static int beats(double a, double b)
{
    if (isnan(a))
        return !isnan(b);
    return !isnan(b) && a > b;
}

/* The reference: k picks, each the first (lowest-index) unpicked entry nothing beats. */
static void top_k_ref(const double *col, int64_t stride, int D, int k, int32_t *idx)
{
    char picked[64] = {0};
    for (int m = 0; m < k; m++) {
        int best = -1;
        for (int j = 0; j < D; j++)
            if (!picked[j] && (best < 0 || beats(col[j * stride], col[best * stride])))
                best = j;
        picked[best] = 1;
        idx[m] = best;
    }
}

/* x (expert=6, token=5), top_k along expert (not the last axis): values and indices
 * (choice=k, token) against top_k_ref, for f32 and f64 and k = 1, 3, 6. */
static void check_top_k(void)
{
    enum { D = 6, T = 5 };
    const double nan = NAN, inf = INFINITY;
    /* columns: ties, NaNs, signed zeros, infinities, all equal */
    const double x[D][T] = {{1, nan, 0.0, -inf, 2}, {3, 1, -0.0, 5, 2},    {1, nan, 0.0, inf, 2},
                            {3, 2, -1, -inf, 2},    {0.5, nan, 0.0, 5, 2}, {3, -7, -0.0, 1, 2}};
    for (int dt = 0; dt < 2; dt++) {
        int dtype = dt ? BORA_DTYPE_F64 : BORA_DTYPE_F32;
        static const int ks[3] = {1, 3, 6};
        for (int ki = 0; ki < 3; ki++) {
            int k = ks[ki];
            for (int want_idx = 0; want_idx < 2; want_idx++) {
                rig r;
                open_rig(&r, 2, 1);
                g_graph *g = g_graph_new(r.store, BORA_MODE_EVAL);
                bora_graph *gp = &g->pub;
                bora_axis ax[2] = {AX("expert", D), AX("token", T)};
                bora_tensor *xi = bora_input(gp, "x", dtype, 2, ax), *idx = NULL;
                bora_tensor *v = gp->api->top_k(gp, xi, "expert", k, "choice", &idx);
                CHECK(v && idx && gp->api->ndim(v) == 2 &&
                      !strcmp(gp->api->axis(v, 0).name, "choice") &&
                      gp->api->axis(v, 0).size == k &&
                      !strcmp(gp->api->axis(idx, 1).name, "token"));
                output(g, want_idx ? idx : v);
                char data[D * T * 8];
                for (int i = 0; i < D * T; i++)
                    if (dt)
                        ((double *)data)[i] = x[i / T][i % T];
                    else
                        ((float *)data)[i] = (float)x[i / T][i % T];
                union {
                    double f64[D * T];
                    float f32[D * T];
                    int32_t i32[D * T];
                } got;
                size_t esz = want_idx ? 4 : bora_dtype_size(dtype);
                if (g_finalize(g) || g_store_materialize(r.store) ||
                    g_set_input(g, "x", data, (size_t)D * T * bora_dtype_size(dtype)) || g_run(g) ||
                    g_read(g, g->output, &got, (size_t)k * T * esz)) {
                    fprintf(stderr, "top_k: graph failed: %s %s\n", g->error, bora_error_get());
                    test_failures++;
                } else {
                    for (int t = 0; t < T; t++) {
                        int32_t ref[D];
                        top_k_ref(&x[0][t], T, D, k, ref);
                        for (int m = 0; m < k; m++) {
                            double want = x[ref[m]][t];
                            double have = want_idx ? got.i32[m * T + t]
                                          : dt     ? got.f64[m * T + t]
                                                   : got.f32[m * T + t];
                            int same = want_idx ? have == ref[m]
                                                : (isnan(want) ? isnan(have)
                                                               : have == want && signbit(have) ==
                                                                                     signbit(want));
                            if (!same) {
                                fprintf(stderr,
                                        "top_k (%s, k=%d): token %d choice %d: %s %g, want %g\n",
                                        dt ? "f64" : "f32", k, t, m, want_idx ? "index" : "value",
                                        have, want_idx ? (double)ref[m] : want);
                                test_failures++;
                            }
                        }
                    }
                }
                g_graph_free(g);
                rig_close(&r);
            }
        }
    }
}

/* A 1-d x: one row, its values and indices. */
static void check_top_k_1d(void)
{
    rig r;
    open_rig(&r, 1, 1);
    g_graph *g = g_graph_new(r.store, BORA_MODE_EVAL);
    bora_graph *gp = &g->pub;
    bora_tensor *x = bora_input(gp, "x", BORA_DTYPE_F64, 1, &AX("expert", 5)), *idx = NULL;
    bora_tensor *v = gp->api->top_k(gp, x, "expert", 2, "choice", &idx);
    /* values and indices in one output: v + 10·index */
    output(g, bora_add(gp, v, gp->api->scale(gp, gp->api->cast(gp, idx, BORA_DTYPE_F64), 10)));
    const double xv[5] = {0.5, 3, -1, 3, 2};
    double got[2];
    CHECK(g_finalize(g) == BORA_OK && g_store_materialize(r.store) == BORA_OK &&
          g_set_input(g, "x", xv, sizeof xv) == BORA_OK && g_run(g) == BORA_OK &&
          g_read(g, g->output, got, sizeof got) == BORA_OK);
    CHECK(got[0] == 3 + 10 * 1 && got[1] == 3 + 10 * 3);
    g_graph_free(g);
    rig_close(&r);
}

/* ---- argsort, bincount, the permutation's round trip -------------------------------------- */

static void check_routing(void)
{
    enum { N = 12, E = 4, C = 3 };
    const int32_t keys[N] = {2, 0, 3, 2, 2, 1, 0, 3, 0, 2, 1, 3};
    const int32_t odd[N] = {5, INT32_MIN, 5, -1, INT32_MAX, 0, -1, 5, INT32_MIN, 0, 7, 5};
    /* reference: stable ascending order by a selection of the least key left, first index wins */
    for (int set = 0; set < 2; set++) {
        const int32_t *k = set ? odd : keys;
        int32_t want[N], used[N] = {0};
        for (int m = 0; m < N; m++) {
            int best = -1;
            for (int i = 0; i < N; i++)
                if (!used[i] && (best < 0 || k[i] < k[best]))
                    best = i;
            used[best] = 1;
            want[m] = best;
        }
        rig r;
        open_rig(&r, 2, 1);
        g_graph *g = g_graph_new(r.store, BORA_MODE_EVAL);
        bora_graph *gp = &g->pub;
        bora_tensor *ki = bora_input(gp, "keys", BORA_DTYPE_I32, 1, &AX("row", N));
        output(g, gp->api->argsort(gp, ki));
        int32_t got[N];
        CHECK(g_finalize(g) == BORA_OK && g_store_materialize(r.store) == BORA_OK &&
              g_set_input(g, "keys", k, sizeof keys) == BORA_OK && g_run(g) == BORA_OK &&
              g_read(g, g->output, got, sizeof got) == BORA_OK);
        for (int m = 0; m < N; m++)
            if (got[m] != want[m]) {
                fprintf(stderr, "argsort (set %d): position %d holds %d, want %d\n", set, m, got[m],
                        want[m]);
                test_failures++;
                break;
            }
        g_graph_free(g);
        rig_close(&r);
    }

    /* bincount, and a key outside the bins failing the run */
    rig r;
    open_rig(&r, 2, 1);
    g_graph *g = g_graph_new(r.store, BORA_MODE_EVAL);
    bora_graph *gp = &g->pub;
    bora_tensor *ki = bora_input(gp, "keys", BORA_DTYPE_I32, 1, &AX("row", N));
    output(g, gp->api->bincount(gp, ki, AX("expert", E)));
    int32_t counts[E], want_counts[E] = {0};
    for (int i = 0; i < N; i++)
        want_counts[keys[i]]++;
    CHECK(g_finalize(g) == BORA_OK && g_store_materialize(r.store) == BORA_OK &&
          g_set_input(g, "keys", keys, sizeof keys) == BORA_OK && g_run(g) == BORA_OK &&
          g_read(g, g->output, counts, sizeof counts) == BORA_OK);
    CHECK(!memcmp(counts, want_counts, sizeof counts));
    int32_t bad[N];
    memcpy(bad, keys, sizeof bad);
    bad[3] = E;
    CHECK(g_set_input(g, "keys", bad, sizeof bad) == BORA_OK && g_run(g) == BORA_ERR_INVALID);
    CHECK_CONTAINS(bora_error_get(), "bincount: key 4 at 3 is outside [0, 4), the bins");
    bad[3] = -1;
    CHECK(g_set_input(g, "keys", bad, sizeof bad) == BORA_OK && g_run(g) == BORA_ERR_INVALID);
    g_graph_free(g);
    rig_close(&r);

    /* rows of x (row, embed) put in key order by embedding(x, argsort(keys)), and back by the
     * inverse permutation argsort(perm): x again, and the sorted rows as a loop picks them */
    for (int back = 0; back < 2; back++) {
        open_rig(&r, 2, 1);
        g = g_graph_new(r.store, BORA_MODE_EVAL);
        gp = &g->pub;
        bora_axis xa[2] = {AX("row", N), AX("embed", C)};
        bora_tensor *x = bora_input(gp, "x", BORA_DTYPE_F64, 2, xa);
        ki = bora_input(gp, "keys", BORA_DTYPE_I32, 1, &AX("row", N));
        bora_tensor *perm = gp->api->argsort(gp, ki);
        bora_tensor *sorted = gp->api->embedding(gp, x, perm, "row");
        output(g,
               back ? gp->api->embedding(gp, sorted, gp->api->argsort(gp, perm), "row") : sorted);
        double xv[N * C], got[N * C];
        for (int i = 0; i < N * C; i++)
            xv[i] = 0.5 * i - 3;
        CHECK(g_finalize(g) == BORA_OK && g_store_materialize(r.store) == BORA_OK &&
              g_set_input(g, "x", xv, sizeof xv) == BORA_OK &&
              g_set_input(g, "keys", keys, sizeof keys) == BORA_OK && g_run(g) == BORA_OK &&
              g_read(g, g->output, got, sizeof got) == BORA_OK);
        if (back) {
            CHECK(!memcmp(got, xv, sizeof got));
        } else { /* the rows of each key in their order: key 0's rows 1, 6, 8 first */
            int m = 0;
            for (int e = 0; e < E; e++)
                for (int i = 0; i < N; i++)
                    if (keys[i] == e) {
                        CHECK(!memcmp(got + m * C, xv + i * C, C * sizeof(double)));
                        m++;
                    }
        }
        g_graph_free(g);
        rig_close(&r);
    }
}

/* Sizes a GPU splits among blocks and warps: top_k of 5 over 300 entries with many ties (and a
 * NaN per row), argsort of 200,000 keys in [-3, 8) and their bincount over [0, 8) after a shift. */
static void check_large_routing(void)
{
    enum { TR_ = 64, D = 300, K = 5, N = 200000 };
    float *x = malloc(sizeof(float) * TR_ * D);
    uint32_t h = 12345;
    for (int i = 0; i < TR_ * D; i++) {
        h = h * 1664525u + 1013904223u;
        x[i] = (float)((h >> 16) % 37) - 18.0f; /* 37 values over 300 entries: ties */
    }
    for (int rr = 0; rr < TR_; rr++)
        x[rr * D + (rr * 7) % D] = NAN;
    rig r;
    open_rig(&r, 2, 1);
    g_graph *g = g_graph_new(r.store, BORA_MODE_EVAL);
    bora_graph *gp = &g->pub;
    bora_axis xa[2] = {AX("row", TR_), AX("entry", D)};
    bora_tensor *xi = bora_input(gp, "x", BORA_DTYPE_F32, 2, xa), *idx = NULL;
    gp->api->top_k(gp, xi, "entry", K, "choice", &idx);
    output(g, idx);
    int32_t got[TR_ * K];
    CHECK(g_finalize(g) == BORA_OK && g_store_materialize(r.store) == BORA_OK &&
          g_set_input(g, "x", x, sizeof(float) * TR_ * D) == BORA_OK && g_run(g) == BORA_OK &&
          g_read(g, g->output, got, sizeof got) == BORA_OK);
    for (int rr = 0, bad = 0; rr < TR_ && !bad; rr++) {
        char picked[D] = {0};
        for (int m = 0; m < K && !bad; m++) {
            int best = -1;
            for (int j = 0; j < D; j++)
                if (!picked[j] && (best < 0 || beats(x[rr * D + j], x[rr * D + best])))
                    best = j;
            picked[best] = 1;
            if (got[rr * K + m] != best) {
                fprintf(stderr, "top_k over %d: row %d choice %d is %d, want %d\n", D, rr, m,
                        got[rr * K + m], best);
                test_failures++, bad = 1;
            }
        }
    }
    g_graph_free(g);
    free(x);

    int32_t *keys = malloc(sizeof(int32_t) * N), *perm = malloc(sizeof(int32_t) * N);
    for (int i = 0; i < N; i++) {
        h = h * 1664525u + 1013904223u;
        keys[i] = (int32_t)((h >> 16) % 11) - 3;
    }
    for (int shifted = 0; shifted < 2; shifted++) {
        g = g_graph_new(r.store, BORA_MODE_EVAL);
        gp = &g->pub;
        bora_tensor *ki = bora_input(gp, "keys", BORA_DTYPE_I32, 1, &AX("row", N));
        output(g, shifted ? gp->api->bincount(gp, ki, AX("expert", 11)) : gp->api->argsort(gp, ki));
        if (shifted)
            for (int i = 0; i < N; i++)
                keys[i] += 3;
        CHECK(g_finalize(g) == BORA_OK &&
              (r.store->arena || g_store_materialize(r.store) == BORA_OK) &&
              g_set_input(g, "keys", keys, sizeof(int32_t) * N) == BORA_OK && g_run(g) == BORA_OK &&
              g_read(g, g->output, perm, sizeof(int32_t) * (shifted ? 11 : N)) == BORA_OK);
        if (shifted) { /* the counts, by a loop per bin */
            for (int e = 0; e < 11; e++) {
                int want = 0;
                for (int i = 0; i < N; i++)
                    want += keys[i] == e;
                CHECK(perm[e] == want);
            }
        } else { /* the stable order: each key's positions in index order, keys ascending */
            int m = 0, bad = 0;
            for (int v = -3; v < 8 && !bad; v++)
                for (int i = 0; i < N && !bad; i++)
                    if (keys[i] == v && perm[m++] != i) {
                        fprintf(stderr, "argsort of %d keys: position %d holds %d, want %d\n", N,
                                m - 1, perm[m - 1], i);
                        test_failures++, bad = 1;
                    }
        }
        g_graph_free(g);
    }
    free(keys);
    free(perm);
    rig_close(&r);
}

/* ---- grouped_matmul forward --------------------------------------------------------------- */

enum { GR = 9, GK = 4, GN = 5, GE = 4 };

/* y (GR, GN) = x_e w_e by group, rows past the sum zero: a loop of plain products in f64. */
static void grouped_ref(const double *x, const double *w, const int32_t *sizes, double *y)
{
    memset(y, 0, sizeof(double) * GR * GN);
    int r0 = 0;
    for (int e = 0; e < GE; e++) {
        for (int r = r0; r < r0 + sizes[e]; r++)
            for (int n = 0; n < GN; n++) {
                double acc = 0;
                for (int k = 0; k < GK; k++)
                    acc += x[r * GK + k] * w[(e * GK + k) * GN + n];
                y[r * GN + n] = acc;
            }
        r0 += sizes[e];
    }
}

/* bf16 of an f32 (round to nearest even), back in f64. */
static double bf16_round(double v)
{
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* One graph per layout and dtype (x as (row, embed) or (embed, row), w as (expert, embed, mlp)
 * or (expert, mlp, embed): the transposed reads), run with six sizes in turn. */
static void check_grouped_forward(void)
{
    static const int32_t sizes[][GE] = {{3, 0, 4, 1}, {0, 0, 9, 0}, {9, 0, 0, 0},
                                        {0, 0, 0, 9}, {2, 2, 2, 2}, {0, 0, 0, 0}};
    double x[GR * GK], w[GE * GK * GN], want[GR * GN];
    for (int i = 0; i < GR * GK; i++)
        x[i] = sin(0.7 * i + 0.2) * 1.3;
    for (int i = 0; i < GE * GK * GN; i++)
        w[i] = cos(0.3 * i + 0.5);
    for (int variant = 0; variant < 5; variant++) {
        /* 0, 1: f64 and f32; 2, 3: transposed x, transposed w (f64); 4: f32 under c=bf16 */
        int dtype = variant == 1 || variant == 4 ? BORA_DTYPE_F32 : BORA_DTYPE_F64;
        size_t esz = bora_dtype_size(dtype);
        rig r;
        open_rig(&r, 2, 1);
        if (variant == 4)
            g_store_mixed(r.store, BORA_DTYPE_BF16, 0, BORA_ABI_MINOR);
        g_graph *g = g_graph_new(r.store, BORA_MODE_EVAL);
        bora_graph *gp = &g->pub;
        bora_axis xa[2] = {AX("row", GR), AX("embed", GK)}, xt[2] = {xa[1], xa[0]};
        bora_axis wa[3] = {AX("expert", GE), AX("embed", GK), AX("mlp", GN)};
        bora_axis wt[3] = {wa[0], wa[2], wa[1]};
        bora_tensor *xi = bora_input(gp, "x", dtype, 2, variant == 2 ? xt : xa);
        bora_tensor *wi = bora_input(gp, "w", dtype, 3, variant == 3 ? wt : wa);
        bora_tensor *si = bora_input(gp, "sizes", BORA_DTYPE_I32, 1, wa);
        output(g, gp->api->grouped_matmul(gp, xi, wi, si, "embed"));
        CHECK(g->output && gp->api->dtype(g->output) == (dtype == BORA_DTYPE_F64 ? dtype : 1));
        /* the inputs in their declared layouts */
        char xd[GR * GK * 8], wd[GE * GK * GN * 8];
        double xr[GR * GK], wr[GE * GK * GN]; /* the values as the product sees them */
        for (int rr = 0; rr < GR; rr++)
            for (int k = 0; k < GK; k++) {
                int at = variant == 2 ? k * GR + rr : rr * GK + k;
                double v = x[rr * GK + k];
                xr[rr * GK + k] = variant == 4              ? bf16_round(v)
                                  : dtype == BORA_DTYPE_F32 ? (float)v
                                                            : v;
                if (dtype == BORA_DTYPE_F32)
                    ((float *)xd)[at] = (float)v;
                else
                    ((double *)xd)[at] = v;
            }
        for (int e = 0; e < GE; e++)
            for (int k = 0; k < GK; k++)
                for (int n = 0; n < GN; n++) {
                    int src = (e * GK + k) * GN + n;
                    int at = variant == 3 ? (e * GN + n) * GK + k : src;
                    wr[src] = variant == 4              ? bf16_round(w[src])
                              : dtype == BORA_DTYPE_F32 ? (float)w[src]
                                                        : w[src];
                    if (dtype == BORA_DTYPE_F32)
                        ((float *)wd)[at] = (float)w[src];
                    else
                        ((double *)wd)[at] = w[src];
                }
        if (g_finalize(g) || g_store_materialize(r.store) ||
            g_set_input(g, "x", xd, GR * GK * esz) || g_set_input(g, "w", wd, GE * GK * GN * esz)) {
            fprintf(stderr, "grouped_matmul/%d: graph failed: %s\n", variant, g->error);
            test_failures++;
        }
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0] && !g->status; s++) {
            union {
                double f64[GR * GN];
                float f32[GR * GN];
            } got;
            if (g_set_input(g, "sizes", sizes[s], sizeof sizes[s]) || g_run(g) ||
                g_read(g, g->output, &got, GR * GN * esz)) {
                fprintf(stderr, "grouped_matmul/%d: run failed: %s\n", variant, bora_error_get());
                test_failures++;
                break;
            }
            grouped_ref(xr, wr, sizes[s], want);
            double tol = dtype == BORA_DTYPE_F64 ? 1e-14 : 1e-6;
            for (int i = 0; i < GR * GN; i++) {
                double have = dtype == BORA_DTYPE_F64 ? got.f64[i] : got.f32[i];
                if (!(fabs(have - want[i]) <= tol * (1 + fabs(want[i])))) {
                    fprintf(stderr, "grouped_matmul/%d sizes %zu: y[%d] %.17g, want %.17g\n",
                            variant, s, i, have, want[i]);
                    test_failures++;
                    break;
                }
            }
        }
        g_graph_free(g);
        rig_close(&r);
    }
}

/* ---- gradients against central differences ------------------------------------------------ */

/* The parameters' gradients of g's 0-d output (after one run) against central differences
 * (h = 1e-6), every element of each named parameter. The runs add into the gradient buffers, so
 * the gradients are taken first. */
static void check_fd(rig *r, g_graph *g, const char *what, int n_params, const char *const *names)
{
    double *grads[8] = {NULL};
    for (int p = 0; p < n_params; p++) {
        long slot = g_store_find(r->store, names[p]);
        size_t nbytes = r->store->slots[slot].nbytes;
        grads[p] = malloc(nbytes);
        copy_out(r, 1, names[p], grads[p], nbytes);
    }
    for (int p = 0; p < n_params; p++) {
        long slot = g_store_find(r->store, names[p]);
        size_t n = r->store->slots[slot].nbytes / sizeof(double);
        const double *got = grads[p];
        for (size_t i = 0; i < n; i++) {
            double keep = 0, lp = 0, lm = 0, v;
            size_t at = i * sizeof(double);
            rig_copy(r, 0, names[p], at, &keep, sizeof keep, 1);
            v = keep + 1e-6;
            rig_copy(r, 0, names[p], at, &v, sizeof v, 0);
            g_run(g);
            g_read(g, g->output, &lp, sizeof lp);
            v = keep - 1e-6;
            rig_copy(r, 0, names[p], at, &v, sizeof v, 0);
            g_run(g);
            g_read(g, g->output, &lm, sizeof lm);
            rig_copy(r, 0, names[p], at, &keep, sizeof keep, 0);
            double fd = (lp - lm) / 2e-6;
            if (!(fabs(fd - got[i]) <= 1e-6 * fmax(fabs(fd), fabs(got[i])) + 1e-8)) {
                fprintf(stderr, "%s: d loss / d %s[%zu]: autodiff %.12g, differences %.12g\n", what,
                        names[p], i, got[i], fd);
                test_failures++;
                break;
            }
        }
    }
    for (int p = 0; p < n_params; p++)
        free(grads[p]);
}

/* Σ y·u + Σ y²·q over a result y with fixed u, q (inputs "__u", "__q", filled here). */
static gval *loss_of(g_graph *g, gval *y)
{
    bora_graph *gp = &g->pub;
    bora_axis ax[BORA_MAX_DIMS];
    const char *names[BORA_MAX_DIMS];
    int n = gp->api->ndim(y);
    for (int i = 0; i < n; i++)
        ax[i] = gp->api->axis(y, i), names[i] = ax[i].name;
    gval *u = bora_input(gp, "__u", BORA_DTYPE_F64, n, ax);
    gval *q = bora_input(gp, "__q", BORA_DTYPE_F64, n, ax);
    gval *t = bora_add(gp, bora_mul(gp, y, u), bora_mul(gp, bora_mul(gp, y, y), q));
    return gp->api->reduce(gp, BORA_OP_SUM, t, n, names);
}

static void fill_uq(g_graph *g, int64_t n)
{
    double *u = malloc(sizeof(double) * (size_t)n), *q = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        u[i] = sin(1.0 + 0.7 * (double)i) + 0.3, q[i] = 0.25 * cos(0.4 + 1.3 * (double)i);
    g_set_input(g, "__u", u, sizeof(double) * (size_t)n);
    g_set_input(g, "__q", q, sizeof(double) * (size_t)n);
    free(u);
    free(q);
}

/* grouped_matmul alone: x (row=7, embed=3), w (expert=3, embed=3, mlp=2), sizes {3, 0, 2}: an
 * empty group (zero gradient) and two rows past the sum (zero output, zero gradient). */
static void check_grouped_gradient(void)
{
    rig r;
    open_rig(&r, 1, 7);
    g_graph *g = g_graph_new(r.store, BORA_MODE_TRAIN);
    bora_graph *gp = &g->pub;
    bora_axis xa[2] = {AX("row", 7), AX("embed", 3)};
    bora_axis wa[3] = {AX("expert", 3), AX("embed", 3), AX("mlp", 2)};
    bora_tensor *x = bora_param(gp, "x", BORA_DTYPE_F64, 2, xa, bora_init_normal(1.0), 0);
    bora_tensor *w = bora_param(gp, "w", BORA_DTYPE_F64, 3, wa, bora_init_normal(1.0), 0);
    bora_tensor *s = bora_input(gp, "sizes", BORA_DTYPE_I32, 1, wa);
    gval *loss = loss_of(g, gp->api->grouped_matmul(gp, x, w, s, "embed"));
    g->output = loss;
    static const int32_t sizes[3] = {3, 0, 2};
    if (!loss || g_autodiff(g, loss) || g_finalize(g) || g_store_materialize(r.store) ||
        g_set_input(g, "sizes", sizes, sizeof sizes) || (fill_uq(g, 14), g_run(g))) {
        fprintf(stderr, "grouped_matmul gradient: graph failed: %s\n", g->error);
        test_failures++;
    } else {
        double dx[21], dw[18];
        copy_out(&r, 1, "x", dx, sizeof dx);
        copy_out(&r, 1, "w", dw, sizeof dw);
        for (int i = 15; i < 21; i++) /* rows 5 and 6 of x */
            CHECK(dx[i] == 0);
        for (int i = 6; i < 12; i++) /* group 1 of w */
            CHECK(dw[i] == 0);
        const char *names[2] = {"x", "w"};
        check_fd(&r, g, "grouped_matmul", 2, names);
    }
    g_graph_free(g);
    rig_close(&r);
}

/* A routed layer as a Mixtral block computes it: router probabilities softmax(logits), the top 2
 * of 4 experts per token with their weights, the (token, choice) rows sorted by expert, each
 * expert's product, the rows put back by the inverse order and summed over the choices with the
 * weights. Gradients to x, the router logits and the experts' w against central differences. */
static gval *routed_layer(g_graph *g, gval *x, gval *logits, gval *w, int64_t E)
{
    bora_graph *gp = &g->pub;
    const bora_graph_api *A = gp->api;
    bora_tensor *idx = NULL;
    bora_tensor *weights = A->top_k(gp, A->softmax(gp, logits, "expert"), "expert", 2, "choice",
                                    &idx); /* (token, choice) */
    const char *tc[2] = {"token", "choice"};
    bora_tensor *keys = idx ? A->merge(gp, idx, 2, tc, "row") : NULL;
    bora_tensor *order = keys ? A->argsort(gp, keys) : NULL;
    bora_tensor *sizes = keys ? A->bincount(gp, keys, AX("expert", E)) : NULL;
    const char *tce[3] = {"token", "choice", "embed"};
    bora_tensor *rep = A->permute(gp, A->broadcast(gp, x, AX("choice", 2)), 3, tce);
    rep = A->merge(gp, rep, 2, tc, "row"); /* (row, embed): each token's row twice */
    bora_tensor *ys = A->grouped_matmul(gp, A->embedding(gp, rep, order, "row"), w, sizes, "embed");
    bora_tensor *back = A->embedding(gp, ys, A->argsort(gp, order), "row"); /* (row, mlp) */
    bora_axis parts[2] = {AX("token", A->axis(x, 0).size), AX("choice", 2)};
    back = A->split(gp, back, "row", 2, parts);
    const char *choice[1] = {"choice"};
    return A->reduce(gp, BORA_OP_SUM, bora_mul(gp, back, weights), 1, choice); /* (token, mlp) */
}

static void check_routed_gradient(void)
{
    rig r;
    open_rig(&r, 1, 3);
    g_graph *g = g_graph_new(r.store, BORA_MODE_TRAIN);
    bora_graph *gp = &g->pub;
    bora_axis xa[2] = {AX("token", 6), AX("embed", 3)}, la[2] = {AX("token", 6), AX("expert", 4)};
    bora_axis wa[3] = {AX("expert", 4), AX("embed", 3), AX("mlp", 2)};
    bora_tensor *x = bora_param(gp, "x", BORA_DTYPE_F64, 2, xa, bora_init_normal(1.0), 0);
    bora_tensor *lg = bora_param(gp, "router", BORA_DTYPE_F64, 2, la, bora_init_normal(1.0), 0);
    bora_tensor *w = bora_param(gp, "w", BORA_DTYPE_F64, 3, wa, bora_init_normal(1.0), 0);
    gval *loss = loss_of(g, routed_layer(g, x, lg, w, 4));
    g->output = loss;
    if (!loss || g_autodiff(g, loss) || g_finalize(g) || g_store_materialize(r.store) ||
        (fill_uq(g, 12), g_run(g))) {
        fprintf(stderr, "routed layer: graph failed: %s %s\n", g->error, bora_error_get());
        test_failures++;
    } else {
        const char *names[3] = {"x", "router", "w"};
        check_fd(&r, g, "routed layer", 3, names);
    }
    g_graph_free(g);
    rig_close(&r);
}

/* Under trainer.mp c=bf16, loss Σ y·u over y = grouped_matmul(x, w) of f32 parameters: the
 * backward's grouped products take bf16 operands (x, w and dy = u rounded) accumulated in f32,
 * dx = bf16(u)·bf16(w_e)ᵀ and dw_e = bf16(x_e)ᵀ·bf16(u_e), against those sums in f64. */
static void check_bf16_gradient(void)
{
    rig r;
    open_rig(&r, 1, 9);
    g_store_mixed(r.store, BORA_DTYPE_BF16, 0, BORA_ABI_MINOR);
    g_graph *g = g_graph_new(r.store, BORA_MODE_TRAIN);
    bora_graph *gp = &g->pub;
    bora_axis xa[2] = {AX("row", GR), AX("embed", GK)}, ya[2] = {AX("row", GR), AX("mlp", GN)};
    bora_axis wa[3] = {AX("expert", GE), AX("embed", GK), AX("mlp", GN)};
    bora_tensor *x = bora_param(gp, "x", BORA_DTYPE_F32, 2, xa, bora_init_normal(1.0), 0);
    bora_tensor *w = bora_param(gp, "w", BORA_DTYPE_F32, 3, wa, bora_init_normal(1.0), 0);
    bora_tensor *s = bora_input(gp, "sizes", BORA_DTYPE_I32, 1, wa);
    bora_tensor *u = bora_input(gp, "u", BORA_DTYPE_F32, 2, ya);
    const char *both[2] = {"row", "mlp"};
    gval *loss = gp->api->reduce(
        gp, BORA_OP_SUM, bora_mul(gp, gp->api->grouped_matmul(gp, x, w, s, "embed"), u), 2, both);
    g->output = loss;
    static const int32_t sizes[GE] = {3, 0, 4, 1};
    float uv[GR * GN];
    for (int i = 0; i < GR * GN; i++)
        uv[i] = (float)(sin(0.9 * i + 0.1) * 1.7);
    if (!loss || g_autodiff(g, loss) || g_finalize(g) || g_store_materialize(r.store) ||
        g_set_input(g, "sizes", sizes, sizeof sizes) || g_set_input(g, "u", uv, sizeof uv) ||
        g_run(g)) {
        fprintf(stderr, "bf16 gradient: graph failed: %s %s\n", g->error, bora_error_get());
        test_failures++;
        goto done;
    }
    float xv[GR * GK], wv[GE * GK * GN], dx[GR * GK], dw[GE * GK * GN];
    copy_out(&r, 0, "x", xv, sizeof xv);
    copy_out(&r, 0, "w", wv, sizeof wv);
    copy_out(&r, 1, "x", dx, sizeof dx);
    copy_out(&r, 1, "w", dw, sizeof dw);
    int e_of[GR], r0 = 0, bad = 0;
    for (int e = 0; e < GE; e++)
        for (int k = 0; k < sizes[e]; k++)
            e_of[r0++] = e;
    for (int rr = 0; rr < GR; rr++) /* row 8 is past the sum: zero */
        for (int k = 0; k < GK; k++) {
            double want = 0;
            for (int n = 0; rr < r0 && n < GN; n++)
                want += bf16_round(uv[rr * GN + n]) * bf16_round(wv[(e_of[rr] * GK + k) * GN + n]);
            bad += !(fabs(dx[rr * GK + k] - want) <= 1e-6 * (1 + fabs(want)));
        }
    for (int e = 0, start = 0; e < GE; start += sizes[e++])
        for (int k = 0; k < GK; k++)
            for (int n = 0; n < GN; n++) {
                double want = 0;
                for (int rr = start; rr < start + sizes[e]; rr++)
                    want += bf16_round(xv[rr * GK + k]) * bf16_round(uv[rr * GN + n]);
                bad += !(fabs(dw[(e * GK + k) * GN + n] - want) <= 1e-6 * (1 + fabs(want)));
            }
    if (bad) {
        fprintf(stderr, "bf16 gradient: %d elements of dx and dw differ from the bf16 sums\n", bad);
        test_failures++;
    }
done:
    g_graph_free(g);
    rig_close(&r);
}

/* ---- threads ------------------------------------------------------------------------------ */

/* An f32 grouped product past one block of rows (700 rows, sizes {650, 0, 40}) and its
 * gradients on threads threads: y, dx, dw, then x and w appended to out (floats). */
enum { TR = 700, TK = 48, TN = 80, TE = 3 };
#define T_OUT (TR * TN + TR * TK + TE * TK * TN)
#define T_ALL (T_OUT + TR * TK + TE * TK * TN)

static int run_threads(int threads, float *out)
{
    rig r;
    open_rig(&r, threads, 5);
    g_graph *g = g_graph_new(r.store, BORA_MODE_TRAIN);
    bora_graph *gp = &g->pub;
    bora_axis xa[2] = {AX("row", TR), AX("embed", TK)};
    bora_axis wa[3] = {AX("expert", TE), AX("mlp", TN), AX("embed", TK)}; /* read transposed */
    bora_tensor *x = bora_param(gp, "x", BORA_DTYPE_F32, 2, xa, bora_init_normal(1.0), 0);
    bora_tensor *w = bora_param(gp, "w", BORA_DTYPE_F32, 3, wa, bora_init_normal(1.0), 0);
    bora_tensor *s = bora_input(gp, "sizes", BORA_DTYPE_I32, 1, wa);
    bora_tensor *y = gp->api->grouped_matmul(gp, x, w, s, "embed");
    const char *both[2] = {"row", "mlp"};
    gval *loss = gp->api->reduce(gp, BORA_OP_SUM, bora_mul(gp, y, y), 2, both);
    static const int32_t sizes[TE] = {650, 0, 40};
    int ok = loss && !g_autodiff(g, loss) && (g->output = y, !g_finalize(g)) &&
             !g_store_materialize(r.store) && !g_set_input(g, "sizes", sizes, sizeof sizes) &&
             !g_run(g) && !g_read(g, y, out, sizeof(float) * TR * TN);
    if (ok) {
        float *at = out + TR * TN;
        copy_out(&r, 1, "x", at, sizeof(float) * TR * TK);
        copy_out(&r, 1, "w", at += TR * TK, sizeof(float) * TE * TK * TN);
        copy_out(&r, 0, "x", at += TE * TK * TN, sizeof(float) * TR * TK);
        copy_out(&r, 0, "w", at + TR * TK, sizeof(float) * TE * TK * TN);
    } else {
        fprintf(stderr, "threads %d: graph failed: %s %s\n", threads, g->error, bora_error_get());
    }
    g_graph_free(g);
    rig_close(&r);
    return ok;
}

/* Whether have is within f32 rounding of a sum whose terms' magnitudes add to scale. */
static int near_sum(double have, double want, double scale)
{
    return fabs(have - want) <= 1e-5 * scale + 1e-30;
}

/* y, dx and dw of run_threads' output against plain loops in f64 over its x and w (dy = 2y, y as
 * the backend gave it): the number of elements that differ. */
static int grouped_plain_check(const float *out)
{
    const float *y = out, *dx = out + TR * TN, *dw = dx + TR * TK;
    const float *x = dw + TE * TK * TN, *w = x + TR * TK;
    static const int sizes[TE] = {650, 0, 40};
    int e_of[TR], bad = 0;
    for (int rr = 0, e = 0, left = sizes[0]; rr < TR; rr++) {
        while (e < TE && left == 0)
            left = ++e < TE ? sizes[e] : 0;
        e_of[rr] = e < TE ? e : -1; /* -1: past the sum */
        left -= e < TE;
    }
    for (int rr = 0; rr < TR; rr++) {
        int e = e_of[rr];
        for (int n = 0; n < TN; n++) {
            double want = 0, scale = 0;
            for (int k = 0; e >= 0 && k < TK; k++) {
                double t = (double)x[rr * TK + k] * w[(e * TN + n) * TK + k];
                want += t, scale += fabs(t);
            }
            bad += !near_sum(y[rr * TN + n], want, scale);
        }
        for (int k = 0; k < TK; k++) {
            double want = 0, scale = 0;
            for (int n = 0; e >= 0 && n < TN; n++) {
                double t = 2.0 * y[rr * TN + n] * w[(e * TN + n) * TK + k];
                want += t, scale += fabs(t);
            }
            bad += !near_sum(dx[rr * TK + k], want, scale);
        }
    }
    for (int e = 0; e < TE; e++)
        for (int n = 0; n < TN; n++)
            for (int k = 0; k < TK; k++) {
                double want = 0, scale = 0;
                for (int rr = 0; rr < TR; rr++)
                    if (e_of[rr] == e) {
                        double t = (double)x[rr * TK + k] * 2.0 * y[rr * TN + n];
                        want += t, scale += fabs(t);
                    }
                bad += !near_sum(dw[(e * TN + n) * TK + k], want, scale);
            }
    return bad;
}

static void check_threads(void)
{
    float *one = calloc(T_ALL, sizeof(float)), *two = calloc(T_ALL, sizeof(float));
    CHECK(run_threads(1, one) && run_threads(2, two));
    CHECK(!memcmp(one, two, T_OUT * sizeof(float)));
    int nonzero = 0; /* the gradient of the empty group is zero, the rest is not */
    for (size_t i = TR * TN + TR * TK; i < T_OUT; i++)
        nonzero += one[i] != 0;
    CHECK(nonzero == 2 * TK * TN);
    int bad = grouped_plain_check(one);
    if (bad) {
        fprintf(stderr, "grouped product of 700 rows: %d elements of y, dx, dw off the f64 loops\n",
                bad);
        test_failures++;
    }
    free(one);
    free(two);
}

/* ---- refusals ----------------------------------------------------------------------------- */

/* Sizes summing past the rows, or negative, fail the run with BORA_ERR_INVALID and a message;
 * bad builds fail naming the tensors. */
static void check_refusals(void)
{
    rig r;
    open_rig(&r, 1, 1);
    g_graph *g = g_graph_new(r.store, BORA_MODE_EVAL);
    bora_graph *gp = &g->pub;
    bora_axis xa[2] = {AX("row", GR), AX("embed", GK)};
    bora_axis wa[3] = {AX("expert", GE), AX("embed", GK), AX("mlp", GN)};
    bora_tensor *x = bora_input(gp, "x", BORA_DTYPE_F64, 2, xa);
    bora_tensor *w = bora_input(gp, "w", BORA_DTYPE_F64, 3, wa);
    bora_tensor *s = bora_input(gp, "sizes", BORA_DTYPE_I32, 1, wa);
    output(g, gp->api->grouped_matmul(gp, x, w, s, "embed"));
    CHECK(g_finalize(g) == BORA_OK && g_store_materialize(r.store) == BORA_OK);
    static const int32_t past[GE] = {3, 2, 5, 0}, negative[GE] = {3, -1, 2, 0};
    CHECK(g_set_input(g, "sizes", past, sizeof past) == BORA_OK && g_run(g) == BORA_ERR_INVALID);
    CHECK_CONTAINS(bora_error_get(),
                   "grouped_matmul: group 2's size 5 takes the sizes' sum past the 9 rows");
    CHECK(g_set_input(g, "sizes", negative, sizeof negative) == BORA_OK &&
          g_run(g) == BORA_ERR_INVALID);
    CHECK_CONTAINS(bora_error_get(), "grouped_matmul: group 1's size -1 is negative");
    g_graph_free(g);

    /* builds */
    struct {
        int what;
        const char *message;
    } bad[] = {
        {0, "grouped_matmul: 'embed' is 4 in x 'x' (row=9, embed=4) but 3 in w 'w3'"},
        {1, "grouped_matmul: w 'w' (expert=4, embed=4, mlp=5) needs the group axis 'group' of "
            "group_sizes 'sizes5'"},
        {2, "grouped_matmul: x 'xf' (row=9, embed=4) and w 'w' (expert=4, embed=4, mlp=5) need "
            "one dtype, f32 or f64"},
        {3, "grouped_matmul: cannot contract 'mlp': 'x' (row=9, embed=4) lacks it"},
        {4, "top_k: k is 5; it must be within [1, 4], the size of 'embed' in x 'x'"},
        {5, "top_k: the new axis 'row' must be a name x 'x' (row=9, embed=4) does not have"},
        {6, "argsort: keys 'x' (row=9, embed=4) must be a 1-d i32 tensor"},
        {7, "bincount: the bins axis 'expert' needs a name and a size in [1, 2^31), not 0"},
        {8, "top_k: x 'xi' (row=9, embed=4) must be f32 or f64"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        g = g_graph_new(r.store, BORA_MODE_EVAL);
        gp = &g->pub;
        const bora_graph_api *A = gp->api;
        x = bora_input(gp, "x", BORA_DTYPE_F64, 2, xa);
        w = bora_input(gp, "w", BORA_DTYPE_F64, 3, wa);
        s = bora_input(gp, "sizes", BORA_DTYPE_I32, 1, wa);
        bora_axis w3[3] = {wa[0], AX("embed", 3), wa[2]};
        switch (bad[i].what) {
        case 0:
            A->grouped_matmul(gp, x, bora_input(gp, "w3", BORA_DTYPE_F64, 3, w3), s, "embed");
            break;
        case 1:
            A->grouped_matmul(
                gp, x, w, bora_input(gp, "sizes5", BORA_DTYPE_I32, 1, &AX("group", 4)), "embed");
            break;
        case 2:
            A->grouped_matmul(gp, bora_input(gp, "xf", BORA_DTYPE_F32, 2, xa), w, s, "embed");
            break;
        case 3: A->grouped_matmul(gp, x, w, s, "mlp"); break;
        case 4: A->top_k(gp, x, "embed", 5, "choice", NULL); break;
        case 5: A->top_k(gp, x, "embed", 2, "row", NULL); break;
        case 6: A->argsort(gp, x); break;
        case 7: A->bincount(gp, A->argsort(gp, s), AX("expert", 0)); break;
        case 8:
            A->top_k(gp, bora_input(gp, "xi", BORA_DTYPE_I32, 2, xa), "embed", 2, "c", NULL);
            break;
        }
        CHECK(g->status == BORA_ERR_INVALID);
        CHECK_CONTAINS(g->error, bad[i].message);
        g_graph_free(g);
    }
    rig_close(&r);
}

int main(int argc, char **argv)
{
    if (argc != 2 && argc != 3) {
        fprintf(stderr, "usage: test_moe_ops PLUGIN_DIR [BACKEND]\n");
        return 2;
    }
    plugin_dir = argv[1];
    if (argc == 3)
        backend_name = argv[2];
    if (strcmp(backend_name, "cpu") != 0) { /* a backend with no usable device here skips */
        rig r;
        bora_status st = rig_try_open_on(&r, plugin_dir, backend_name, 1, 1);
        if (st == BORA_ERR_UNSUPPORTED && strstr(bora_error_get(), "no usable GPU")) {
            printf("SKIP: backend '%s' cannot run here: %s\n", backend_name, bora_error_get());
            return 77;
        }
        if (st != BORA_OK) {
            fprintf(stderr, "test_moe_ops: backend '%s' failed to start: %s\n", backend_name,
                    bora_error_get());
            return 1;
        }
        rig_close(&r);
    }
    printf("test_moe_ops on backend '%s'\n", backend_name);
    check_top_k();
    check_top_k_1d();
    check_routing();
    check_large_routing();
    check_grouped_forward();
    check_grouped_gradient();
    check_routed_gradient();
    check_bf16_gradient();
    check_threads();
    check_refusals();
    return test_summary("test_moe_ops");
}
