/* tests/graph/test_op_rules.c — the graph API's rules on the CPU backend, beside test_ops.c's
 * per-op checks against references: model state and write_slice (kept between runs and graphs,
 * a start past the end failing the run, misuse failing the build); elementwise semantics the
 * 1.9 ops fix (sign, max/min ties, comparisons, where with NaN, fused chains) against values
 * written here; rms_norm's rules (threads, the ABI version a backend was built for, bf16 reads,
 * the residual fusion, refused options); grouped-query attention's refusals and an older
 * options struct; the soft cap's refusals, older options structs and the ABI version that gives
 * it to the fused kernel; sample's draws treated as constants by autodiff, against finite
 * differences; the mixture-of-experts ops refused on a backend built before ABI 1.13, and run
 * (forward and backward) on this one; model metrics (ABI 1.14): declarations, refusals, the
 * trainer's output and its mean over micro-batches. Every op a check here runs counts; write_slice, sample and
 * the mixture-of-experts ops (test_moe_ops checks them against references), which no case in
 * test_ops differentiates, must run here.
 *
 * usage: test_op_rules PLUGIN_DIR */
#include "../test.h"
#include "rig.h"
#include "train/model_metrics.h"

#include <math.h>

static const char *plugin_dir;
static uint64_t ops_seen[BORA_OP_COUNT_];

#define AX(n, s) ((bora_axis){(n), (s)})

static bora_tensor *P(bora_graph *g, const char *name, int dtype, int n, const bora_axis *axes)
{
    return bora_param(g, name, dtype, n, axes, bora_init_normal(1.0), 0);
}

/* Model state and write_slice: a cache of 5 rows shared by two graphs ("fill" writes 2 rows at
 * row 0 and returns the state; "step" writes one row at a runtime position and returns the
 * masked sum of the state after it), kept between runs and graphs, zeroed on request; a start
 * past the end fails the run; misuse fails the build. */
static void check_write_slice(void)
{
    rig r;
    rig_open(&r, plugin_dir, 1, 1);
    const bora_graph_api *A = &g_api;
    g_graph *fill = g_graph_new(r.store, BORA_MODE_PREFILL);
    g_graph *step = g_graph_new(r.store, BORA_MODE_DECODE);
    bora_axis cache_a[2] = {{"row", 5}, {"col", 3}}, two[2] = {{"col", 3}, {"row", 2}};
    bora_axis one[2] = {{"row", 1}, {"col", 3}};
    bora_tensor *c = A->state(&fill->pub, "cache", BORA_DTYPE_F64, 2, cache_a);
    bora_tensor *x = A->input(&fill->pub, "x", BORA_DTYPE_F64, 2, two); /* other axis order */
    fill->output = A->write_slice(&fill->pub, c, x, "row", NULL);
    CHECK(fill->output != NULL);
    c = A->state(&step->pub, "cache", BORA_DTYPE_F64, 2, cache_a);
    bora_tensor *y = A->input(&step->pub, "y", BORA_DTYPE_F64, 2, one);
    bora_tensor *pos = A->extent(&step->pub, "pos", 4);
    bora_tensor *c2 = A->write_slice(&step->pub, c, y, "row", pos);
    bora_tensor *mask = A->input(&step->pub, "mask", BORA_DTYPE_F64, 1, cache_a);
    const char *rows[] = {"row", "col"};
    step->output = A->reduce(&step->pub, BORA_OP_SUM, bora_mul(&step->pub, c2, mask), 2, rows);
    CHECK(g_finalize(fill) == BORA_OK && g_finalize(step) == BORA_OK);
    CHECK(g_store_materialize(r.store) == BORA_OK);
    double xv[6] = {1, 2, 3, 4, 5, 6}; /* (col, row): rows 0 = {1, 3, 5}, 1 = {2, 4, 6} */
    CHECK(g_set_input(fill, "x", xv, sizeof xv) == BORA_OK && g_run(fill) == BORA_OK);
    double got[15], want[15] = {1, 3, 5, 2, 4, 6};
    CHECK(g_read(fill, fill->output, got, sizeof got) == BORA_OK);
    CHECK(!memcmp(got, want, sizeof got));
    double ones[5] = {1, 1, 1, 1, 1}, yv[3] = {10, 20, 30}, sum = 0;
    int32_t p = 3;
    CHECK(g_set_input(step, "mask", ones, sizeof ones) == BORA_OK);
    CHECK(g_set_input(step, "y", yv, sizeof yv) == BORA_OK);
    CHECK(g_set_input(step, "pos", &p, sizeof p) == BORA_OK);
    CHECK(g_run(step) == BORA_OK && g_read(step, step->output, &sum, sizeof sum) == BORA_OK);
    CHECK(sum == 21 + 60); /* the fill graph's rows are still there, and row 3 is new */
    p = 4;
    g_set_input(step, "pos", &p, sizeof p);
    CHECK(g_run(step) == BORA_OK && g_read(step, step->output, &sum, sizeof sum) == BORA_OK);
    CHECK(sum == 21 + 120);
    for (int k = 0; k < BORA_OP_COUNT_; k++)
        ops_seen[k] += step->op_runs[k];
    /* an extent holds a position 0..max; past the end, the kernel refuses at run time */
    p = 5;
    CHECK(g_set_input(step, "pos", &p, sizeof p) != BORA_OK);
    CHECK(g_store_zero_model_state(r.store) == BORA_OK);
    CHECK(g_run(fill) == BORA_OK && g_read(fill, fill->output, got, sizeof got) == BORA_OK);
    CHECK(!memcmp(got, want, sizeof got)); /* rows 3, 4 zero again */
    g_graph_free(fill);
    g_graph_free(step);
    rig_close(&r);

    /* misuse: a start past the end at run time; a write in a train graph; another shape */
    rig_open(&r, plugin_dir, 1, 1);
    g_graph *g = g_graph_new(r.store, BORA_MODE_DECODE);
    bora_axis three[2] = {{"row", 3}, {"col", 3}};
    c = A->state(&g->pub, "cache", BORA_DTYPE_F64, 2, cache_a);
    x = A->input(&g->pub, "x", BORA_DTYPE_F64, 2, three);
    pos = A->extent(&g->pub, "pos", 4);
    g->output = A->write_slice(&g->pub, c, x, "row", pos);
    CHECK(g_finalize(g) == BORA_OK && g_store_materialize(r.store) == BORA_OK);
    p = 3; /* 3 rows from 3 in 5 */
    g_set_input(g, "pos", &p, sizeof p);
    CHECK(g_run(g) != BORA_OK);
    CHECK_CONTAINS(bora_error_get(), "3 rows from 3 do not fit in 5");
    g_graph_free(g);
    g = g_graph_new(r.store, BORA_MODE_TRAIN);
    CHECK(A->state(&g->pub, "cache", BORA_DTYPE_F32, 2, cache_a) == NULL);
    CHECK_CONTAINS(g->error, "declared again with another shape or dtype");
    g_graph_free(g);
    g = g_graph_new(r.store, BORA_MODE_TRAIN);
    c = A->state(&g->pub, "cache", BORA_DTYPE_F64, 2, cache_a);
    x = A->input(&g->pub, "x", BORA_DTYPE_F64, 2, three);
    CHECK(A->write_slice(&g->pub, c, x, "row", NULL) == NULL);
    CHECK_CONTAINS(g->error, "not written in a graph that is differentiated");
    g_graph_free(g);
    g = g_graph_new(r.store, BORA_MODE_DECODE);
    x = A->input(&g->pub, "x", BORA_DTYPE_F64, 2, three);
    CHECK(A->write_slice(&g->pub, x, x, "row", NULL) == NULL);
    CHECK_CONTAINS(g->error, "is not model state");
    g_graph_free(g);
    g = g_graph_new(r.store, BORA_MODE_DECODE);
    CHECK(A->state(&g->pub, "new", BORA_DTYPE_F64, 2, cache_a) == NULL);
    CHECK_CONTAINS(g->error, "new after the store was allocated");
    g_graph_free(g);
    rig_close(&r);
}

/* An eval graph over f32 input "x" (n) and "y" (n) returning out (made contiguous), run once;
 * its output in got (n floats), and in *fused (if given) how fusion grouped it. 0 on success. */
static int run_xy(bora_tensor *(*build)(bora_graph *, bora_tensor *, bora_tensor *), const float *x,
                  const float *y, int64_t n, float *got, int *fused)
{
    rig rr, *r = &rr;
    rig_open(r, plugin_dir, 2, 3);
    g_graph *g = g_graph_new(r->store, BORA_MODE_EVAL);
    bora_axis ax[1] = {AX("i", n)};
    bora_tensor *xt = bora_input(&g->pub, "x", BORA_DTYPE_F32, 1, ax);
    bora_tensor *yt = bora_input(&g->pub, "y", BORA_DTYPE_F32, 1, ax);
    bora_tensor *out = build(&g->pub, xt, yt);
    if (out && out->base != out)
        out = g->pub.api->contiguous(&g->pub, out);
    g->output = out;
    int rc = !out || g_finalize(g) || g_store_materialize(r->store) ||
             g_set_input(g, "x", x, sizeof(float) * (size_t)n) ||
             g_set_input(g, "y", y, sizeof(float) * (size_t)n) || g_run(g) ||
             g_read(g, out, got, sizeof(float) * (size_t)n);
    if (rc)
        fprintf(stderr, "run_xy: %s\n", g->error[0] ? g->error : bora_error_get());
    if (fused) /* the steps of its one fused group, or minus the number of groups */
        *fused = g->n_fused == 1 ? g->fused[0].n_steps : -(int)g->n_fused;
    g_graph_free(g);
    rig_close(r);
    return rc;
}

static bora_tensor *e_sign(bora_graph *g, bora_tensor *x, bora_tensor *y)
{
    (void)y;
    return bora_unary(g, BORA_OP_SIGN, x);
}
static bora_tensor *e_max_xy(bora_graph *g, bora_tensor *x, bora_tensor *y)
{
    return bora_maximum(g, x, y);
}
static bora_tensor *e_max_yx(bora_graph *g, bora_tensor *x, bora_tensor *y)
{
    return bora_maximum(g, y, x);
}
static bora_tensor *e_min_yx(bora_graph *g, bora_tensor *x, bora_tensor *y)
{
    return bora_minimum(g, y, x);
}
static bora_tensor *e_ne(bora_graph *g, bora_tensor *x, bora_tensor *y)
{
    return bora_not_equal(g, x, y);
}
static bora_tensor *e_le(bora_graph *g, bora_tensor *x, bora_tensor *y)
{
    return bora_less_equal(g, x, y);
}
static bora_tensor *e_where_nan(bora_graph *g, bora_tensor *x, bora_tensor *y)
{
    return bora_where(g, x, y, bora_scalar_like(g, y, -1)); /* a NaN mask selects a */
}
/* a chain of every fusible new op, dense f32, 15 nodes: fused into one group */
static bora_tensor *e_chain(bora_graph *g, bora_tensor *x, bora_tensor *y)
{
    bora_tensor *s = bora_unary(g, BORA_OP_SIN, x), *c = bora_unary(g, BORA_OP_COS, y);
    bora_tensor *m = bora_maximum(g, s, bora_minimum(g, c, bora_unary(g, BORA_OP_ABS, x)));
    bora_tensor *k = bora_add(g, bora_less(g, x, y), bora_equal(g, s, m));
    k = bora_add(g, k, bora_mul(g, bora_less_equal(g, y, x), bora_not_equal(g, c, m)));
    return bora_add(g, bora_mul(g, m, k), bora_unary(g, BORA_OP_SIGN, y));
}

/* The rules the header states, at the points a gradient check cannot see: signed zeros and
 * NaN, ties, integer constants and ramps, the fused path's bits, the errors, and the refusal of
 * a backend built before ABI 1.9. */
static void check_elem_rules(void)
{
    const float x[6] = {0.0f, -0.0f, NAN, 2.0f, -3.0f, 1.0f};
    const float y[6] = {1.0f, 1.0f, 1.0f, NAN, 1.0f, 1.0f};
    float got[6];
    /* sign keeps ±0 and NaN */
    CHECK(run_xy(e_sign, x, y, 6, got, NULL) == 0);
    CHECK(got[0] == 0 && !signbit(got[0]) && got[1] == 0 && signbit(got[1]) && isnan(got[2]) &&
          got[3] == 1 && got[4] == -1 && got[5] == 1);
    /* a NaN in either operand is the result; a tie gives the first operand (-0 vs 0: its sign) */
    CHECK(run_xy(e_max_xy, x, y, 6, got, NULL) == 0);
    CHECK(got[0] == 1 && isnan(got[2]) && isnan(got[3]) && got[4] == 1 && got[5] == 1);
    CHECK(run_xy(e_max_yx, x, y, 6, got, NULL) == 0);
    CHECK(got[0] == 1 && isnan(got[2]) && isnan(got[3]) && got[4] == 1);
    const float z[6] = {-0.0f, 0.0f, 0, 0, 0, 0}, zp[6] = {0.0f, -0.0f, 0, 0, 0, 0};
    CHECK(run_xy(e_min_yx, z, zp, 6, got, NULL) == 0); /* minimum(zp, z): zp's zero */
    CHECK(got[0] == 0 && !signbit(got[0]) && signbit(got[1]));
    CHECK(run_xy(e_max_yx, z, zp, 6, got, NULL) == 0); /* maximum(zp, z): zp's zero */
    CHECK(got[0] == 0 && !signbit(got[0]) && signbit(got[1]));
    /* comparisons with NaN: false, but not_equal's; a NaN mask selects a */
    CHECK(run_xy(e_ne, x, y, 6, got, NULL) == 0);
    CHECK(got[0] == 1 && got[2] == 1 && got[3] == 1 && got[5] == 0);
    CHECK(run_xy(e_le, x, y, 6, got, NULL) == 0);
    CHECK(got[0] == 1 && got[2] == 0 && got[3] == 0 && got[4] == 1 && got[5] == 1);
    CHECK(run_xy(e_where_nan, x, y, 6, got, NULL) == 0);
    CHECK(got[0] == -1 && got[1] == -1 && got[2] == 1 && isnan(got[3]) && got[4] == 1);
    /* the fused path gives the plain kernels' bits */
    enum { N = 3000 };
    float *fx = malloc(sizeof(float) * N), *fy = malloc(sizeof(float) * N);
    float *f1 = malloc(sizeof(float) * N), *f2 = malloc(sizeof(float) * N);
    for (int i = 0; i < N; i++)
        fx[i] = (float)sin(i * 0.37) * 3, fy[i] = i % 7 == 0 ? fx[i] : (float)cos(i * 0.11) * 2;
    int n_fused = 0, n_plain = 0;
    CHECK(run_xy(e_chain, fx, fy, N, f1, &n_fused) == 0);
    setenv("BORA_NO_FUSION", "1", 1);
    CHECK(run_xy(e_chain, fx, fy, N, f2, &n_plain) == 0);
    unsetenv("BORA_NO_FUSION");
    CHECK(n_fused == 15 && n_plain == 0); /* every node of the chain in one group */
    CHECK(!memcmp(f1, f2, sizeof(float) * N));
    free(fx), free(fy), free(f1), free(f2);

    /* ties in the gradient: maximum's goes to its first operand, and clamp passes a value on
     * its bound; sign's is zero */
    rig r;
    rig_open(&r, plugin_dir, 1, 3);
    g_graph *g = g_graph_new(r.store, BORA_MODE_TRAIN);
    bora_graph *gp = &g->pub;
    bora_axis ax[1] = {AX("i", 3)};
    bora_tensor *p = bora_param(gp, "p", BORA_DTYPE_F64, 1, ax, bora_init_constant(0.5), 0);
    bora_tensor *q = bora_param(gp, "q", BORA_DTYPE_F64, 1, ax, bora_init_constant(0.5), 0);
    bora_tensor *w = gp->api->iota(gp, AX("i", 3), BORA_DTYPE_F64, 1, 1); /* 1, 2, 3 */
    bora_tensor *t = bora_add(gp, bora_maximum(gp, p, q), bora_clamp(gp, q, -0.5, 0.5));
    t = bora_add(gp, t, bora_unary(gp, BORA_OP_SIGN, p));
    const char *names[1] = {"i"};
    bora_tensor *loss = gp->api->reduce(gp, BORA_OP_SUM, bora_mul(gp, t, w), 1, names);
    g->output = loss;
    CHECK(loss && g_autodiff(g, loss) == BORA_OK && g_finalize(g) == BORA_OK);
    CHECK(g_store_materialize(r.store) == BORA_OK && g_run(g) == BORA_OK);
    const double *dp = rig_grad(&r, "p"), *dq = rig_grad(&r, "q");
    CHECK(dp[0] == 1 && dp[1] == 2 && dp[2] == 3 && dq[0] == 1 && dq[1] == 2 && dq[2] == 3);
    g_graph_free(g);
    rig_close(&r);
    /* integer constants and ramps are exact (each graph on its own store, allocated for it) */
    rig_open(&r, plugin_dir, 1, 3);
    g = g_graph_new(r.store, BORA_MODE_EVAL);
    gp = &g->pub;
    bora_tensor *ramp = gp->api->iota(gp, AX("i", 4), BORA_DTYPE_I32, 5, -3);
    g->output = ramp;
    int32_t iv[4];
    CHECK(ramp && g_finalize(g) == BORA_OK && g_store_materialize(r.store) == BORA_OK &&
          g_run(g) == BORA_OK && g_read(g, ramp, iv, sizeof iv) == BORA_OK);
    CHECK(iv[0] == 5 && iv[1] == 2 && iv[2] == -1 && iv[3] == -4);
    CHECK(g->op_runs[BORA_OP_IOTA] == 1);
    g_graph_free(g);
    rig_close(&r);
    rig_open(&r, plugin_dir, 1, 3);
    g = g_graph_new(r.store, BORA_MODE_EVAL);
    gp = &g->pub;
    bora_tensor *c7 =
        gp->api->full(gp, BORA_DTYPE_I32, 2, (bora_axis[]){AX("j", 2), AX("k", 3)}, 7);
    g->output = c7;
    int32_t cv[6];
    CHECK(c7 && g_finalize(g) == BORA_OK && g_store_materialize(r.store) == BORA_OK &&
          g_run(g) == BORA_OK && g_read(g, c7, cv, sizeof cv) == BORA_OK);
    for (int i = 0; i < 6; i++)
        CHECK(cv[i] == 7);
    g_graph_free(g);
    g = g_graph_new(r.store, BORA_MODE_EVAL);
    gp = &g->pub;
    /* misuse: each a build error naming what to fix */
    CHECK(gp->api->iota(gp, AX("i", 4), BORA_DTYPE_I32, 0, 0.5) == NULL);
    CHECK_CONTAINS(g->error, "iota along 'i' (4): an i32 ramp needs integer start and step");
    g_graph_free(g);
    g = g_graph_new(r.store, BORA_MODE_EVAL);
    gp = &g->pub;
    CHECK(gp->api->iota(gp, AX("i", 4), BORA_DTYPE_I32, 2147483646.0, 1) == NULL);
    CHECK_CONTAINS(g->error, "every value within i32");
    g_graph_free(g);
    g = g_graph_new(r.store, BORA_MODE_EVAL);
    gp = &g->pub;
    CHECK(gp->api->full(gp, BORA_DTYPE_I32, 0, NULL, 1.5) == NULL);
    CHECK_CONTAINS(g->error, "full: 1.5 is not a value of an integer dtype");
    g_graph_free(g);
    g = g_graph_new(r.store, BORA_MODE_EVAL);
    gp = &g->pub;
    bora_tensor *a32 = bora_input(gp, "a", BORA_DTYPE_F32, 1, ax);
    bora_tensor *b64 = bora_input(gp, "b", BORA_DTYPE_F64, 1, ax);
    CHECK(bora_where(gp, a32, a32, b64) == NULL);
    CHECK_CONTAINS(g->error, "where: the mask 'a' (i=3) and b 'b' (i=3) have different dtypes");
    g_graph_free(g);
    g = g_graph_new(r.store, BORA_MODE_EVAL);
    gp = &g->pub;
    a32 = bora_input(gp, "a", BORA_DTYPE_F32, 1, ax);
    bora_tensor *j32 = bora_input(gp, "j", BORA_DTYPE_F32, 1, (bora_axis[]){AX("j", 2)});
    CHECK(bora_where(gp, a32, a32, j32) == NULL);
    CHECK_CONTAINS(g->error, "has every axis of the others; broadcast one explicitly");
    g_graph_free(g);
    rig_close(&r);

    /* a backend built for ABI 1.8 is never asked for a 1.9 op: the build fails naming it */
    rig_open(&r, plugin_dir, 1, 3);
    g_store_mixed(r.store, 0, 0, 8);
    g = g_graph_new(r.store, BORA_MODE_EVAL);
    gp = &g->pub;
    g->output = bora_unary(gp, BORA_OP_COS, bora_input(gp, "a", BORA_DTYPE_F32, 1, ax));
    CHECK(g_finalize(g) != BORA_OK);
    CHECK_CONTAINS(g->error, "backend 'cpu' was built for ABI 1.8, which has no op 'cos' (ABI "
                             "1.9); rebuild the backend against this SDK");
    g_graph_free(g);
    rig_close(&r);
}

/* rms_norm in f32 over (r=37, d=96), d last, with a weight: y of an eval graph, then dx and
 * dweight of sum(y · m) for a fixed input m, read into out (37·96 + 37·96 + 96 floats).
 * backend_minor is the ABI minor the store believes of the backend, compute trainer.mp's c. 0 on
 * success; the number of fused rms_norm kernels that ran in *fused_runs. */
enum { RMS_R = 37, RMS_D = 96, RMS_OUT = RMS_R * RMS_D * 2 + RMS_D };
static int run_rms(int threads, uint32_t backend_minor, int compute, float *out,
                   uint64_t *fused_runs)
{
    rig r;
    rig_open(&r, plugin_dir, threads, 5);
    g_store_mixed(r.store, compute, 0, backend_minor);
    bora_axis ax[2] = {AX("r", RMS_R), AX("d", RMS_D)};
    g_graph *e = g_graph_new(r.store, BORA_MODE_EVAL), *t = g_graph_new(r.store, BORA_MODE_TRAIN);
    bora_tensor *ye = NULL, *loss = NULL;
    for (int k = 0; k < 2; k++) {
        bora_graph *gp = k ? &t->pub : &e->pub;
        bora_tensor *x = P(gp, "x", BORA_DTYPE_F32, 2, ax),
                    *w = P(gp, "w", BORA_DTYPE_F32, 1, &ax[1]);
        bora_tensor *y = gp->api->rms_norm(gp, x, w, "d", 1e-6, 0);
        if (!k) {
            ye = e->output = y;
            continue;
        }
        bora_tensor *m = bora_input(gp, "m", BORA_DTYPE_F32, 2, ax);
        const char *names[2] = {"r", "d"};
        loss = t->output = gp->api->reduce(gp, BORA_OP_SUM, bora_mul(gp, y, m), 2, names);
    }
    float *m = malloc(sizeof(float) * RMS_R * RMS_D);
    for (int i = 0; i < RMS_R * RMS_D; i++)
        m[i] = (float)sin(0.3 + i * 0.7);
    int rc = !ye || !loss || g_finalize(e) || g_autodiff(t, loss) || g_finalize(t) ||
             g_store_materialize(r.store) || g_run(e) ||
             g_read(e, ye, out, sizeof(float) * RMS_R * RMS_D) ||
             g_set_input(t, "m", m, sizeof(float) * RMS_R * RMS_D) || g_run(t);
    if (rc) {
        fprintf(stderr, "run_rms: %s\n",
                e->error[0]   ? e->error
                : t->error[0] ? t->error
                              : bora_error_get());
    } else {
        memcpy(out + RMS_R * RMS_D, rig_grad(&r, "x"), sizeof(float) * RMS_R * RMS_D);
        memcpy(out + 2 * RMS_R * RMS_D, rig_grad(&r, "w"), sizeof(float) * RMS_D);
        *fused_runs = e->op_runs[BORA_OP_RMS_NORM] + t->op_runs[BORA_OP_RMS_NORM_GRAD];
    }
    free(m);
    g_graph_free(e);
    g_graph_free(t);
    rig_close(&r);
    return rc;
}

/* Under trainer.mp r=bf16: the loss sum(rms_norm(residual(x), w, offset 1) · m) and dw, in out
 * (1 + RMS_D floats), fusion (and with it the planner's bf16 reads) on or off; in *bf16_reads
 * the rms_norm nodes that read the bf16 stream itself. 0 on success. */
static int run_rms_residual(int fusion, float *out, int *bf16_reads)
{
    if (!fusion)
        setenv("BORA_NO_FUSION", "1", 1);
    rig r;
    rig_open(&r, plugin_dir, 2, 5);
    g_store_mixed(r.store, BORA_DTYPE_F32, BORA_DTYPE_BF16, BORA_ABI_MINOR);
    bora_axis ax[2] = {AX("r", RMS_R), AX("d", RMS_D)};
    g_graph *t = g_graph_new(r.store, BORA_MODE_TRAIN);
    bora_graph *gp = &t->pub;
    bora_tensor *x = bora_residual(gp, bora_input(gp, "x", BORA_DTYPE_F32, 2, ax));
    bora_tensor *w = P(gp, "w", BORA_DTYPE_F32, 1, &ax[1]);
    bora_tensor *m = bora_input(gp, "m", BORA_DTYPE_F32, 2, ax);
    const char *names[2] = {"r", "d"};
    bora_tensor *loss = gp->api->reduce(
        gp, BORA_OP_SUM, bora_mul(gp, gp->api->rms_norm(gp, x, w, "d", 1e-6, 1), m), 2, names);
    t->output = loss;
    float *xm = malloc(sizeof(float) * RMS_R * RMS_D * 2);
    for (int i = 0; i < RMS_R * RMS_D * 2; i++)
        xm[i] = (float)sin(0.3 + i * 0.77) * 2;
    int rc = !loss || g_autodiff(t, loss) || g_finalize(t) || g_store_materialize(r.store) ||
             g_set_input(t, "x", xm, sizeof(float) * RMS_R * RMS_D) ||
             g_set_input(t, "m", xm + RMS_R * RMS_D, sizeof(float) * RMS_R * RMS_D) || g_run(t) ||
             g_read(t, loss, out, sizeof(float));
    if (rc) {
        fprintf(stderr, "run_rms_residual: %s\n", t->error[0] ? t->error : bora_error_get());
    } else {
        memcpy(out + 1, rig_grad(&r, "w"), sizeof(float) * RMS_D);
        *bf16_reads = 0;
        for (size_t i = 0; i < t->n_nodes; i++)
            *bf16_reads +=
                (t->nodes[i]->op == BORA_OP_RMS_NORM || t->nodes[i]->op == BORA_OP_RMS_NORM_GRAD) &&
                t->nodes[i]->kernel && t->nodes[i]->in[0]->dtype == BORA_DTYPE_BF16;
    }
    free(xm);
    g_graph_free(t);
    rig_close(&r);
    unsetenv("BORA_NO_FUSION");
    return rc;
}

/* rms_norm beyond the gradient check: its f32 bits the same on 1 and 2 threads and under
 * trainer.mp c=bf16, its decomposition on a backend built before ABI 1.9, its reading of a bf16
 * residual stream (the bits of reading its f32 widening), and the errors of its misuse. */
static void check_rms_norm_rules(void)
{
    float *one = calloc(RMS_OUT, sizeof(float)), *two = calloc(RMS_OUT, sizeof(float));
    float *old = calloc(RMS_OUT, sizeof(float));
    uint64_t runs1 = 0, runs2 = 0, runs_old = 1;
    CHECK(run_rms(1, BORA_ABI_MINOR, BORA_DTYPE_F32, one, &runs1) == 0);
    CHECK(run_rms(2, BORA_ABI_MINOR, BORA_DTYPE_F32, two, &runs2) == 0);
    CHECK(runs1 == 2 && runs2 == 2); /* the fused kernels ran, forward and backward */
    CHECK(!memcmp(one, two, sizeof(float) * RMS_OUT));
    /* a 1.8 backend is never asked for the op: primitives, the same values up to rounding */
    CHECK(run_rms(2, 8, BORA_DTYPE_F32, old, &runs_old) == 0);
    CHECK(runs_old == 0);
    for (int i = 0; i < RMS_OUT; i++)
        if (!(fabsf(old[i] - one[i]) <= 1e-4f * fabsf(one[i]) + 1e-5f)) {
            fprintf(stderr, "rms_norm on a 1.8 backend: element %d is %.8g, fused %.8g\n", i,
                    old[i], one[i]);
            test_failures++;
            break;
        }
    /* under c=bf16 it is computed in f32 as before: the same bits */
    uint64_t runs_bf16 = 0;
    CHECK(run_rms(2, BORA_ABI_MINOR, BORA_DTYPE_BF16, two, &runs_bf16) == 0);
    CHECK(runs_bf16 == 2 && !memcmp(one, two, sizeof(float) * RMS_OUT));
    free(one), free(two), free(old);
    /* under r=bf16 forward and backward read the stream in bf16, with the widening's bits */
    float direct[1 + RMS_D], widened[1 + RMS_D];
    int reads_direct = 0, reads_widened = -1;
    CHECK(run_rms_residual(1, direct, &reads_direct) == 0);
    CHECK(run_rms_residual(0, widened, &reads_widened) == 0);
    CHECK(reads_direct == 2 && reads_widened == 0);
    CHECK(!memcmp(direct, widened, sizeof direct));

    rig r;
    rig_open(&r, plugin_dir, 1, 3);
    bora_axis ax[2] = {AX("r", 3), AX("d", 4)}, other[1] = {AX("e", 4)};
    g_graph *g = g_graph_new(r.store, BORA_MODE_EVAL);
    bora_graph *gp = &g->pub;
    bora_tensor *x = bora_input(gp, "x", BORA_DTYPE_F32, 2, ax);
    CHECK(gp->api->rms_norm(gp, x, NULL, "e", 1e-6, 0) == NULL);
    CHECK_CONTAINS(g->error, "rms_norm: 'x' (r=3, d=4) has no axis 'e'");
    g_graph_free(g);
    g = g_graph_new(r.store, BORA_MODE_EVAL);
    gp = &g->pub;
    x = bora_input(gp, "x", BORA_DTYPE_F32, 2, ax);
    bora_tensor *w = bora_input(gp, "w", BORA_DTYPE_F32, 1, other);
    CHECK(gp->api->rms_norm(gp, x, w, "d", 1e-6, 1) == NULL);
    CHECK_CONTAINS(g->error, "rms_norm: 'w' (e=4) must have exactly the axis 'd' of 'x' (r=3, "
                             "d=4), and its dtype");
    g_graph_free(g);
    g = g_graph_new(r.store, BORA_MODE_EVAL);
    gp = &g->pub;
    x = bora_input(gp, "x", BORA_DTYPE_F32, 2, ax);
    CHECK(gp->api->rms_norm(gp, x, NULL, "d", -1, 0) == NULL);
    CHECK_CONTAINS(g->error, "eps -1 and weight_offset 0 must be finite, eps not negative");
    g_graph_free(g);
    rig_close(&r);
}

/* grouped-query attention's and the window's refusals, and a 1.8-sized options struct, whose
 * (absent) new fields are never read. */
static const char *gqa_build(int hkv, int64_t window, uint32_t struct_size)
{
    static char err[1100];
    rig r;
    rig_open(&r, plugin_dir, 1, 3);
    g_graph *g = g_graph_new(r.store, BORA_MODE_EVAL);
    bora_graph *gp = &g->pub;
    bora_axis qa[4] = {AX("batch", 2), AX("heads", 4), AX("position", 4), AX("head_dim", 3)};
    bora_axis ka[4] = {AX("batch", 2), AX("kv_heads", hkv), AX("key_position", 4),
                       AX("head_dim", 3)};
    bora_tensor *q = bora_input(gp, "q", BORA_DTYPE_F32, 4, qa);
    bora_tensor *k = bora_input(gp, "k", BORA_DTYPE_F32, 4, ka);
    bora_tensor *v = bora_input(gp, "v", BORA_DTYPE_F32, 4, ka);
    bora_attention_opts o = {.struct_size = struct_size,
                             .causal = 1,
                             .head_axis = "heads",
                             .kv_head_axis = "kv_heads",
                             .sliding_window = window};
    bora_tensor *out = gp->api->attention(gp, q, k, v, &o);
    snprintf(err, sizeof err, "%s", out ? "" : g->error);
    g_graph_free(g);
    rig_close(&r);
    return err;
}

static void check_gqa_rules(void)
{
    CHECK(!strcmp(gqa_build(2, 3, sizeof(bora_attention_opts)), ""));
    CHECK_CONTAINS(
        gqa_build(3, 0, sizeof(bora_attention_opts)),
        "attention: kv heads 'kv_heads' of k 'k' (batch=2, kv_heads=3, key_position=4, "
        "head_dim=3) and v 'v' (batch=2, kv_heads=3, key_position=4, head_dim=3) must be "
        "one count dividing the 4 query heads 'heads'");
    CHECK_CONTAINS(gqa_build(2, -1, sizeof(bora_attention_opts)),
                   "attention: sliding_window is -1: it must be 0 (none) or a positive number");
    /* a 1.8 caller's struct ends at upcast: kv_heads is then an axis q lacks */
    CHECK_CONTAINS(gqa_build(2, 0, offsetof(bora_attention_opts, head_axis)),
                   "attention: axis 'heads' of q 'q' (batch=2, heads=4, position=4, "
                   "head_dim=3) differs in 'k' (batch=2, kv_heads=2, key_position=4, head_dim=3)");
}

/* Soft-capped attention (f32, causal, 2 of 4 query heads per kv head, c = 0.9) in an eval graph
 * on a store that believes the backend built for ABI 1.backend_minor, the options struct
 * struct_size bytes long: "" and the output in out (2·4·5·3 floats), with the number of fused
 * attention nodes and of tanh nodes in *fused and *tanhs; or the build's error. */
enum { SC_OUT = 2 * 4 * 5 * 3 };
static const char *softcap_build(double softcap, uint32_t struct_size, uint32_t backend_minor,
                                 float *out, int *fused, int *tanhs)
{
    static char err[1100];
    rig r;
    rig_open(&r, plugin_dir, 1, 3);
    g_store_mixed(r.store, 0, 0, backend_minor);
    g_graph *g = g_graph_new(r.store, BORA_MODE_EVAL);
    bora_graph *gp = &g->pub;
    bora_axis qa[4] = {AX("batch", 2), AX("heads", 4), AX("position", 5), AX("head_dim", 3)};
    bora_axis ka[4] = {AX("batch", 2), AX("kv_heads", 2), AX("key_position", 5), AX("head_dim", 3)};
    bora_tensor *q = P(gp, "q", BORA_DTYPE_F32, 4, qa);
    bora_tensor *k = P(gp, "k", BORA_DTYPE_F32, 4, ka);
    bora_tensor *v = P(gp, "v", BORA_DTYPE_F32, 4, ka);
    /* scores around ±3: a cap of 0.9 bends them all */
    q = gp->api->scale(gp, q, 3.0);
    bora_attention_opts o = {.struct_size = struct_size,
                             .causal = 1,
                             .head_axis = "heads",
                             .kv_head_axis = "kv_heads",
                             .softcap = softcap};
    g->output = gp->api->attention(gp, q, k, v, &o);
    if (g->output && g->output->base != g->output)
        g->output = gp->api->contiguous(gp, g->output);
    err[0] = 0;
    if (!g->output || g_finalize(g) || g_store_materialize(r.store) || g_run(g) ||
        g_read(g, g->output, out, sizeof(float) * SC_OUT)) {
        snprintf(err, sizeof err, "%s", g->error[0] ? g->error : bora_error_get());
    } else {
        *fused = *tanhs = 0;
        for (size_t i = 0; i < g->n_nodes; i++) {
            const gnode *n = g->nodes[i];
            if (n->op == BORA_OP_ATTENTION) {
                (*fused)++;
                if (n->opt.attn.softcap != (struct_size == sizeof o ? softcap : 0))
                    snprintf(err, sizeof err, "the fused node's softcap is %g",
                             n->opt.attn.softcap);
            }
            *tanhs += n->op == BORA_OP_TANH;
        }
    }
    g_graph_free(g);
    rig_close(&r);
    return err;
}

static void check_softcap_rules(void)
{
    float fused_out[SC_OUT], old_out[SC_OUT], plain[SC_OUT], unsized[SC_OUT];
    int fused = -1, tanhs = -1;
    /* refused: negative, infinite, NaN, each named */
    CHECK_CONTAINS(
        softcap_build(-1, sizeof(bora_attention_opts), BORA_ABI_MINOR, fused_out, &fused, &tanhs),
        "attention: softcap is -1: it must be 0 (none) or a positive finite cap");
    CHECK_CONTAINS(softcap_build(INFINITY, sizeof(bora_attention_opts), BORA_ABI_MINOR, fused_out,
                                 &fused, &tanhs),
                   "attention: softcap is inf:");
    CHECK_CONTAINS(
        softcap_build(NAN, sizeof(bora_attention_opts), BORA_ABI_MINOR, fused_out, &fused, &tanhs),
        "attention: softcap is nan:");
    /* a backend built for 1.12: the fused kernel, told the cap */
    CHECK(!strcmp(
        softcap_build(0.9, sizeof(bora_attention_opts), BORA_ABI_MINOR, fused_out, &fused, &tanhs),
        ""));
    CHECK(fused == 1 && tanhs == 0);
    /* one built for 1.11 never sees the cap: the decomposition, with its tanh, the same values */
    CHECK(
        !strcmp(softcap_build(0.9, sizeof(bora_attention_opts), 11, old_out, &fused, &tanhs), ""));
    CHECK(fused == 0 && tanhs == 1);
    double worst = 0, bent = 0;
    CHECK(!strcmp(
        softcap_build(0, sizeof(bora_attention_opts), BORA_ABI_MINOR, plain, &fused, &tanhs), ""));
    for (int i = 0; i < SC_OUT; i++) {
        worst = fmax(worst, fabs(fused_out[i] - old_out[i]));
        bent = fmax(bent, fabs(fused_out[i] - plain[i]));
    }
    if (!(worst <= 1e-5 && bent > 1e-2)) {
        fprintf(stderr,
                "softcap: fused and decomposed differ by %g (want <= 1e-5); capped and plain by "
                "%g (want > 1e-2)\n",
                worst, bent);
        test_failures++;
    }
    /* a cap past f32's range (1e300: no bend at all) runs the loops in double: plain values */
    CHECK(!strcmp(
        softcap_build(1e300, sizeof(bora_attention_opts), BORA_ABI_MINOR, unsized, &fused, &tanhs),
        ""));
    worst = 0;
    for (int i = 0; i < SC_OUT; i++)
        worst = fmax(worst, fabs(unsized[i] - plain[i]));
    if (!(fused == 1 && worst <= 1e-5)) {
        fprintf(stderr, "softcap 1e300: %d fused nodes, %g from the plain values\n", fused, worst);
        test_failures++;
    }
    /* a 1.11 caller's struct ends before softcap: whatever lies there is never read */
    CHECK(!strcmp(softcap_build(-7, offsetof(bora_attention_opts, softcap), BORA_ABI_MINOR, unsized,
                                &fused, &tanhs),
                  ""));
    CHECK(fused == 1 && tanhs == 0 && !memcmp(unsized, plain, sizeof plain));
    /* the CPU backend declares the ABI it was built for, which the host reads as 1.12 or later */
    bora_registry *reg = bora_registry_new();
    CHECK(bora_registry_add_dir(reg, plugin_dir, 1) == BORA_OK);
    bora_registry_load(reg);
    const bora_entry *e = bora_registry_find(reg, BORA_KIND_BACKEND, "cpu");
    CHECK(e && e->file->abi_minor == BORA_ABI_MINOR && BORA_ABI_MINOR >= 12);
    bora_registry_free(reg);
}

/* sample draws integer tokens: no gradient of its own, so autodiff treats them as constants.
 * cross_entropy(logits, t) + sum(logits · t), t = sample(logits), differentiates as if t were
 * given: its gradient against central finite differences (h = 1e-6; the draws do not move under
 * such a step). */
static void check_sample_constant(void)
{
    rig r;
    rig_open(&r, plugin_dir, 2, 9);
    g_graph *g = g_graph_new(r.store, BORA_MODE_TRAIN);
    bora_graph *gp = &g->pub;
    bora_axis ax[2] = {AX("position", 5), AX("vocab", 7)};
    bora_tensor *logits = P(gp, "logits", BORA_DTYPE_F64, 2, ax);
    bora_tensor *counter = bora_input(gp, "counter", BORA_DTYPE_I64, 1, &AX("counter", 2));
    bora_tensor *tokens = gp->api->sample(gp, logits, "vocab", counter, 5, 1);
    /* the tokens also enter the loss as numbers: sum(logits · token) over the vocab */
    gval *as_f64 = gp->api->cast(gp, tokens, BORA_DTYPE_F64);
    const char *both[2] = {"position", "vocab"};
    gval *loss = bora_add(gp, gp->api->cross_entropy(gp, logits, tokens, "vocab", NULL),
                          gp->api->reduce(gp, BORA_OP_SUM, bora_mul(gp, logits, as_f64), 2, both));
    g->output = loss;
    int64_t ctr[2] = {3, 0};
    double got[35], lp, lm;
    if (!loss || g_autodiff(g, loss) || g_finalize(g) || g_store_materialize(r.store) ||
        g_set_input(g, "counter", ctr, sizeof ctr) || g_run(g)) {
        fprintf(stderr, "sample: gradient graph failed: %s\n", g->error);
        test_failures++;
        goto done;
    }
    for (int k = 0; k < BORA_OP_COUNT_; k++)
        ops_seen[k] += g->op_runs[k];
    memcpy(got, rig_grad(&r, "logits"), sizeof got);
    double *p = rig_param(&r, "logits");
    for (int e = 0; e < 35; e++) {
        double keep = p[e];
        p[e] = keep + 1e-6;
        g_run(g);
        g_read(g, loss, &lp, sizeof lp);
        p[e] = keep - 1e-6;
        g_run(g);
        g_read(g, loss, &lm, sizeof lm);
        p[e] = keep;
        double fd = (lp - lm) / 2e-6;
        if (!(fabs(fd - got[e]) <= 1e-6 * fmax(fabs(fd), fabs(got[e])) + 1e-8)) {
            fprintf(stderr,
                    "sample: d loss / d logits[%d]: autodiff %.12g, finite differences %.12g\n", e,
                    got[e], fd);
            test_failures++;
            break;
        }
    }
done:
    g_graph_free(g);
    rig_close(&r);
}

/* A routed layer's gradient graph (top_k, argsort, bincount, grouped_matmul and its weight
 * gradient): refused naming top_k on a backend believed built for ABI 1.12, and run on this one,
 * where the routed rows give the gradients their expected zeros (an expert no token chose). */
static void check_moe_rules(void)
{
    for (int pass = 0; pass < 2; pass++) {
        uint32_t minor = pass ? BORA_ABI_MINOR : 12;
        rig r;
        rig_open(&r, plugin_dir, 1, 4);
        g_store_backend_abi(r.store, minor);
        g_graph *g = g_graph_new(r.store, BORA_MODE_TRAIN);
        bora_graph *gp = &g->pub;
        const bora_graph_api *A = gp->api;
        bora_axis la[2] = {AX("token", 3), AX("expert", 4)};
        bora_axis wa[3] = {AX("expert", 4), AX("embed", 2), AX("mlp", 2)};
        bora_axis xa[2] = {AX("token", 3), AX("embed", 2)};
        bora_tensor *logits = bora_input(gp, "logits", BORA_DTYPE_F64, 2, la), *idx = NULL;
        bora_tensor *weights = A->top_k(gp, logits, "expert", 1, "choice", &idx);
        const char *tc[2] = {"token", "choice"};
        bora_tensor *keys = A->merge(gp, idx, 2, tc, "token");
        bora_tensor *order = A->argsort(gp, keys);
        bora_tensor *xs = A->embedding(gp, P(gp, "x", BORA_DTYPE_F64, 2, xa), order, "token");
        bora_tensor *y = A->grouped_matmul(gp, xs, P(gp, "w", BORA_DTYPE_F64, 3, wa),
                                           A->bincount(gp, keys, wa[0]), "embed");
        const char *ym[2] = {"token", "mlp"}, *c1[1] = {"choice"};
        bora_tensor *loss = A->reduce(
            gp, BORA_OP_SUM, bora_mul(gp, y, A->reduce(gp, BORA_OP_SUM, weights, 1, c1)), 2, ym);
        g->output = loss;
        CHECK(loss && g_autodiff(g, loss) == BORA_OK);
        if (minor < 13) {
            CHECK(g_finalize(g) == BORA_ERR_INVALID);
            CHECK_CONTAINS(g->error,
                           "backend 'cpu' was built for ABI 1.12, which has no op 'top_k' (ABI "
                           "1.13); rebuild the backend against this SDK");
        } else {
            /* tokens 0 and 2 choose expert 3, token 1 expert 0: experts 1 and 2 get nothing */
            const double lv[12] = {0, 1, 2, 5, 9, 1, 2, 3, 0, 0, 0, 1};
            CHECK(g_finalize(g) == BORA_OK && g_store_materialize(r.store) == BORA_OK &&
                  g_set_input(g, "logits", lv, sizeof lv) == BORA_OK && g_run(g) == BORA_OK);
            const double *dw = rig_grad(&r, "w");
            for (int i = 0; i < 16; i++)
                CHECK((dw[i] != 0) == (i < 4 || i >= 12));
            for (int k = 0; k < BORA_OP_COUNT_; k++)
                ops_seen[k] += g->op_runs[k];
        }
        g_graph_free(g);
        rig_close(&r);
    }
}

/* Model metrics (ABI 1.14): a declaration returns its tensor and adds no node; bad names,
 * shapes, dtypes and a second declaration of a name are refused, naming the metric; the trainer's
 * output carries the loss (the f32 bits, widened) and then each metric's elements, and a step's
 * values are the mean over its micro-batches. */
static void check_metric_rules(void)
{
    rig r;
    rig_open(&r, plugin_dir, 1, 4);
    g_graph *g = g_graph_new(r.store, BORA_MODE_TRAIN);
    bora_graph *gp = &g->pub;
    const bora_graph_api *A = gp->api;
    bora_axis va[1] = {AX("expert", 3)};
    bora_tensor *x = bora_input(gp, "x", BORA_DTYPE_F32, 1, va);
    const char *e1[1] = {"expert"};
    bora_tensor *loss =
        A->reduce(gp, BORA_OP_SUM, bora_mul(gp, x, P(gp, "w", BORA_DTYPE_F32, 1, va)), 1, e1);
    size_t nodes = g->n_nodes;
    CHECK(bora_graph_metric(gp, x, "load/layer0") == x);
    CHECK(bora_graph_metric(gp, A->scale(gp, loss, 2.0), "twice") != NULL);
    CHECK(g->n_metrics == 2 && g->n_nodes == nodes + 1 &&
          !strcmp(g->metrics[0].name, "load/layer0"));
    g->output = loss;
    CHECK(g_autodiff(g, loss) == BORA_OK);
    tr_model_metrics m;
    CHECK(tr_model_metrics_build(g, loss, &m) == BORA_OK && m.n == 4 && m.n_scalars == 1);
    CHECK(!strcmp(m.names[0], "train/load/layer0/0") &&
          !strcmp(m.names[2], "train/load/layer0/2") && !strcmp(m.names[3], "train/twice"));
    CHECK(g_finalize(g) == BORA_OK && g_store_materialize(r.store) == BORA_OK);
    const float w[3] = {0.5f, 0.25f, 1.0f / 3.0f}, a[3] = {1, 2, 3}, b[3] = {3, 0, 1.5f};
    CHECK(rig_copy(&r, 0, "w", 0, (void *)w, sizeof w, 0) == BORA_OK);
    double got[2] = {0, 0};
    tr_model_metrics_begin(&m);
    CHECK(g_set_input(g, "x", a, sizeof a) == BORA_OK && g_run(g) == BORA_OK &&
          tr_model_metrics_read(g, &m, &got[0]) == BORA_OK);
    CHECK(g_set_input(g, "x", b, sizeof b) == BORA_OK && g_run(g) == BORA_OK &&
          tr_model_metrics_read(g, &m, &got[1]) == BORA_OK);
    CHECK(tr_model_metrics_values(&m) == 4);
    float l0 = 0.5f * 1 + 0.25f * 2 + (1.0f / 3.0f) * 3, l1 = 0.5f * 3 + 0 + (1.0f / 3.0f) * 1.5f;
    CHECK(fabs(got[0] - l0) < 1e-6 && fabs(got[1] - l1) < 1e-6);
    CHECK(m.out[0].value == 2.0 && m.out[1].value == 1.0 && m.out[2].value == 2.25);
    CHECK(fabs(m.out[3].value - (got[0] + got[1])) < 1e-6); /* 2 x loss, averaged over 2 */
    tr_model_metrics_free(&m);
    g_graph_free(g);
    rig_close(&r);

    /* refusals */
    struct {
        const char *name, *want;
        int ndim, dtype;
        int64_t n;
    } bad[] = {
        {"a b", "metric: the name 'a b' is not 1 to 100 characters", 0, BORA_DTYPE_F32, 1},
        {"/lead", "metric: the name '/lead'", 0, BORA_DTYPE_F32, 1},
        {"", "metric: the name ''", 0, BORA_DTYPE_F32, 1},
        {"loss", "one of the trainer's own", 0, BORA_DTYPE_F32, 1},
        {"tokens/0", "metric: the name 'tokens/0'", 0, BORA_DTYPE_F32, 1},
        {"mat", "metric 'mat': ", 2, BORA_DTYPE_F32, 2},
        {"ints", "metric 'ints': ", 1, BORA_DTYPE_I32, 2},
        {"long", "at most 1024 elements", 1, BORA_DTYPE_F32, BORA_METRIC_MAX_ELEMENTS + 1},
        {"twice", "metric 'twice' is declared twice", 0, BORA_DTYPE_F32, 1},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rig_open(&r, plugin_dir, 1, 4);
        g = g_graph_new(r.store, BORA_MODE_TRAIN);
        gp = &g->pub;
        bora_axis ax[2] = {AX("row", bad[i].n), AX("col", 2)};
        bora_tensor *t = bora_input(gp, "t", bad[i].dtype, bad[i].ndim, ax);
        if (!strcmp(bad[i].name, "twice"))
            bora_graph_metric(gp, t, "twice");
        CHECK(bora_graph_metric(gp, t, bad[i].name) == NULL);
        CHECK_CONTAINS(g->error, bad[i].want);
        g_graph_free(g);
        rig_close(&r);
    }
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_op_rules PLUGIN_DIR\n");
        return 2;
    }
    plugin_dir = argv[1];
    check_write_slice();
    check_elem_rules();
    check_rms_norm_rules();
    check_gqa_rules();
    check_softcap_rules();
    check_sample_constant();
    check_moe_rules();
    check_metric_rules();
    /* the ops test_ops leaves to this test (see its final check) */
    static const int here[] = {BORA_OP_WRITE_SLICE,
                               BORA_OP_SAMPLE,
                               BORA_OP_TOP_K,
                               BORA_OP_ARGSORT,
                               BORA_OP_BINCOUNT,
                               BORA_OP_GROUPED_MATMUL,
                               BORA_OP_GROUPED_MATMUL_GRAD};
    for (size_t i = 0; i < sizeof here / sizeof here[0]; i++)
        if (!ops_seen[here[i]]) {
            fprintf(stderr, "op '%s' (%d) did not run in test_op_rules\n", g_op_name(here[i]),
                    here[i]);
            test_failures++;
        }
    return test_summary("test_op_rules");
}
