/* tests/graph/test_mixed.c — mixed precision (trainer.mp c=bf16) in a graph on the CPU backend.
 * Two products of one activation X, y = X·W and z = X·Vᵀ (V kept (out, in), as a tied output
 * head is), with loss = Σ y·C + Σ z·D, in shapes that cross every block of the bf16 matmul (rows
 * past 512, K past one 1024 panel, columns past 1024; V's rows, a vocabulary's, past two of the
 * 4096-row blocks in which the backend computes a tall gradient such as dV transposed):
 *   - y, z and every gradient equal a double-precision sum over the operands rounded to bf16
 *     (the output gradients C and D rounded too), within f32 accumulation, and differ from the
 *     unrounded sums by bf16's rounding (so the rounding happened);
 *   - the gradients stay f32 (most are not bf16 values) and the f32 path is untouched;
 *   - each operand is rounded once: five casts in all (X, W, V, dy, dz);
 *   - the bits are the same run after run, and on 1 and 2 threads where the products are widened
 *     to f32 for sgemm;
 *   - with the store's bf16 copies of the parameters (as bora train keeps them, written by the
 *     optimizer's pass), the graph casts only dy and dz and gives the same bits; a host-side
 *     write to a parameter, once announced, reaches its copy before the next run (w negated
 *     negates y exactly).
 *
 * usage: test_mixed PLUGIN_DIR */
#include "../test.h"
#include "rig.h"

#include <math.h>

static const char *plugin_dir;

enum { M = 520, K = 1100, N = 1030, N2 = 2 * 4096 + 70 };

static double bf(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static int is_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (u & 0xffffu) == 0;
}

typedef struct run {
    float *y, *z, *dx, *dw, *dv; /* outputs and gradients */
    float *x, *w, *v, *c, *d;    /* parameters and inputs */
    int casts;                   /* bf16 copies in the graph */
    float *y_negated;            /* shadows: y after w was negated on the host */
} run;

static float *grab(const void *p, size_t n)
{
    float *out = malloc(n * sizeof(float));
    memcpy(out, p, n * sizeof(float));
    return out;
}

static void run_free(run *r)
{
    float *all[] = {r->y, r->z, r->dx, r->dw, r->dv, r->x, r->w, r->v, r->c, r->d, r->y_negated};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        free(all[i]);
}

/* Build, run twice (gradients zeroed between), keep the second run's results. With shadows, the
 * store keeps bf16 copies of the parameters. */
static int build_run(int threads, int compute, int shadows, run *out)
{
    memset(out, 0, sizeof *out);
    rig r;
    rig_open(&r, plugin_dir, threads, 5);
    if (shadows)
        g_store_mixed(r.store, compute, 0, BORA_ABI_MINOR);
    else
        r.store->compute_dtype = compute;
    g_graph *g = g_graph_new(r.store, BORA_MODE_TRAIN);
    bora_graph *gp = &g->pub;
    const bora_graph_api *A = gp->api;
    bora_axis ax_x[2] = {{"row", M}, {"in", K}}, ax_w[2] = {{"in", K}, {"out", N}};
    bora_axis ax_v[2] = {{"out2", N2}, {"in", K}};
    bora_axis ax_c[2] = {{"row", M}, {"out", N}}, ax_d[2] = {{"row", M}, {"out2", N2}};
    bora_tensor *X = bora_param(gp, "x", BORA_DTYPE_F32, 2, ax_x, bora_init_normal(1.0), 0);
    bora_tensor *W = bora_param(gp, "w", BORA_DTYPE_F32, 2, ax_w, bora_init_normal(1.0), 0);
    bora_tensor *V = bora_param(gp, "v", BORA_DTYPE_F32, 2, ax_v, bora_init_normal(1.0), 0);
    bora_tensor *C = bora_input(gp, "c", BORA_DTYPE_F32, 2, ax_c);
    bora_tensor *D = bora_input(gp, "d", BORA_DTYPE_F32, 2, ax_d);
    const char *in = "in", *yc[2] = {"row", "out"}, *zc[2] = {"row", "out2"};
    bora_tensor *y = A->dot(gp, X, W, 1, &in, NULL), *z = A->dot(gp, X, V, 1, &in, NULL);
    bora_tensor *ly = A->reduce(gp, BORA_OP_SUM, bora_mul(gp, y, C), 2, yc);
    bora_tensor *lz = A->reduce(gp, BORA_OP_SUM, bora_mul(gp, z, D), 2, zc);
    bora_tensor *loss = bora_add(gp, ly, lz);
    g->output = loss;
    /* forward-only graphs return y and z (the train graph's intermediates are not kept) */
    g_graph *fy = g_graph_new(r.store, BORA_MODE_EVAL), *fz = g_graph_new(r.store, BORA_MODE_EVAL);
    bora_graph *py = &fy->pub, *pz = &fz->pub;
    fy->output = A->contiguous(
        py, A->dot(py, bora_param(py, "x", BORA_DTYPE_F32, 2, ax_x, bora_init_normal(1.0), 0),
                   bora_param(py, "w", BORA_DTYPE_F32, 2, ax_w, bora_init_normal(1.0), 0), 1, &in,
                   NULL));
    fz->output = A->contiguous(
        pz, A->dot(pz, bora_param(pz, "x", BORA_DTYPE_F32, 2, ax_x, bora_init_normal(1.0), 0),
                   bora_param(pz, "v", BORA_DTYPE_F32, 2, ax_v, bora_init_normal(1.0), 0), 1, &in,
                   NULL));
    int ok = loss && g_autodiff(g, loss) == BORA_OK && g_finalize(g) == BORA_OK && fy->output &&
             fz->output && g_finalize(fy) == BORA_OK && g_finalize(fz) == BORA_OK &&
             g_store_materialize(r.store) == BORA_OK;
    if (!ok) {
        fprintf(stderr, "build: %s\n", g->error);
        test_failures++;
        goto done;
    }
    CHECK(A->dtype(y) == BORA_DTYPE_F32 && A->dtype(z) == BORA_DTYPE_F32);
    CHECK(A->dtype(fy->output) == BORA_DTYPE_F32);
    for (size_t i = 0; i < g->n_nodes; i++)
        out->casts +=
            g->nodes[i]->op == BORA_OP_COPY && g->nodes[i]->out[0]->dtype == BORA_DTYPE_BF16;
    /* inputs that are not bf16 values, so rounding them shows */
    float *c = malloc(sizeof(float) * M * N), *d = malloc(sizeof(float) * M * N2);
    for (int i = 0; i < M * N; i++)
        c[i] = (float)(sin(0.37 * i + 1.0) * 0.9 + 0.05);
    for (int i = 0; i < M * N2; i++)
        d[i] = (float)(cos(0.53 * i) * 1.3);
    g_set_input(g, "c", c, sizeof(float) * M * N);
    g_set_input(g, "d", d, sizeof(float) * M * N2);
    float *first = NULL;
    for (int k = 0; k < 2; k++) {
        g_store_zero_grads(r.store);
        CHECK(g_run(g) == BORA_OK);
        if (k == 0)
            first = grab(rig_grad(&r, "x"), M * K);
    }
    CHECK(memcmp(first, rig_grad(&r, "x"), sizeof(float) * M * K) == 0); /* run after run */
    free(first);
    out->y = malloc(sizeof(float) * M * N);
    out->z = malloc(sizeof(float) * M * N2);
    /* the graphs share the store's arena: read each output before the next graph runs */
    CHECK(g_run(fy) == BORA_OK);
    CHECK(g_read(fy, fy->output, out->y, sizeof(float) * M * N) == BORA_OK);
    CHECK(g_run(fz) == BORA_OK);
    CHECK(g_read(fz, fz->output, out->z, sizeof(float) * M * N2) == BORA_OK);
    out->x = grab(rig_param(&r, "x"), M * K);
    out->w = grab(rig_param(&r, "w"), (size_t)K * N);
    out->v = grab(rig_param(&r, "v"), (size_t)N2 * K);
    out->dx = grab(rig_grad(&r, "x"), M * K);
    out->dw = grab(rig_grad(&r, "w"), (size_t)K * N);
    out->dv = grab(rig_grad(&r, "v"), (size_t)N2 * K);
    out->c = c;
    out->d = d;
    if (shadows) { /* w negated on the host: y follows once the store is told */
        long at = g_store_find(r.store, "w");
        for (size_t i = 0; i < (size_t)K * N; i++)
            out->w[i] = -out->w[i];
        CHECK(r.store->ops->copy_in(r.store->backend, r.store->params, r.store->slots[at].offset,
                                    out->w, sizeof(float) * K * N) == BORA_OK);
        for (size_t i = 0; i < (size_t)K * N; i++)
            out->w[i] = -out->w[i];
        g_store_params_changed(r.store);
        out->y_negated = malloc(sizeof(float) * M * N);
        CHECK(g_run(fy) == BORA_OK);
        CHECK(g_read(fy, fy->output, out->y_negated, sizeof(float) * M * N) == BORA_OK);
    }
done:
    g_graph_free(fy);
    g_graph_free(fz);
    g_graph_free(g);
    rig_close(&r);
    return ok;
}

/* Worst error of got against Σ_t a_t b_t, rounded to bf16 and not, over every 7th element,
 * each in units of sqrt(Σ (a_t b_t)²): the f32 sum's error is ~1e-7 √terms of that, bf16's
 * rounding ~1e-3. */
typedef struct errs {
    double rounded, unrounded;
} errs;

static void worse(errs *e, float got, double sr, double su, double scale)
{
    e->rounded = fmax(e->rounded, fabs(got - sr) / scale);
    e->unrounded = fmax(e->unrounded, fabs(got - su) / scale);
}

/* Sums of products a[i sa] b[i sb] over i < n: of the bf16-rounded values, of the f32 ones, and
 * of the rounded products' squares. */
typedef struct sums {
    double rounded, unrounded, squares;
} sums;

static void dot_into(sums *s, const float *a, int64_t sa, const float *b, int64_t sb, int n)
{
    for (int i = 0; i < n; i++) {
        double t = bf(a[i * sa]) * bf(b[i * sb]);
        s->rounded += t, s->squares += t * t, s->unrounded += (double)a[i * sa] * b[i * sb];
    }
}

static void worse_sum(errs *e, float got, sums s)
{
    worse(e, got, s.rounded, s.unrounded, sqrt(s.squares));
}

static void check_values(const run *r)
{
    errs ey = {0, 0}, ez = {0, 0}, edx = {0, 0}, edw = {0, 0}, edv = {0, 0};
    for (int m = 0; m < M; m += 7) {
        for (int n = 0; n < N; n += 7) { /* y = X W */
            sums s = {0, 0, 0};
            dot_into(&s, r->x + m * K, 1, r->w + n, N, K);
            worse_sum(&ey, r->y[m * N + n], s);
        }
        for (int n = 0; n < N2; n += 3) { /* z = X Vᵀ */
            sums s = {0, 0, 0};
            dot_into(&s, r->x + m * K, 1, r->v + n * K, 1, K);
            worse_sum(&ez, r->z[m * N2 + n], s);
        }
        for (int k = 0; k < K; k += 7) { /* dX = C Wᵀ + D V */
            sums s = {0, 0, 0};
            dot_into(&s, r->c + m * N, 1, r->w + k * N, 1, N);
            dot_into(&s, r->d + m * N2, 1, r->v + k, K, N2);
            worse_sum(&edx, r->dx[m * K + k], s);
        }
    }
    for (int k = 0; k < K; k += 7) {
        for (int n = 0; n < N; n += 7) { /* dW = Xᵀ C */
            sums s = {0, 0, 0};
            dot_into(&s, r->x + k, K, r->c + n, N, M);
            worse_sum(&edw, r->dw[k * N + n], s);
        }
        for (int n = 0; n < N2; n += 3) { /* dV = Dᵀ X */
            sums s = {0, 0, 0};
            dot_into(&s, r->d + n, N2, r->x + k, K, M);
            worse_sum(&edv, r->dv[n * K + k], s);
        }
    }
    const char *names[] = {"y", "z", "dx", "dw", "dv"};
    errs all[] = {ey, ez, edx, edw, edv};
    for (int i = 0; i < 5; i++) {
        printf("%-2s: %.2e from the bf16 sum, %.2e from the f32 one\n", names[i], all[i].rounded,
               all[i].unrounded);
        CHECK(all[i].rounded < 2e-5);
        CHECK(all[i].unrounded > 1e-4);
    }
    /* the gradients stay f32: most are not bf16 values */
    size_t f32 = 0;
    for (size_t i = 0; i < (size_t)K * N; i++)
        f32 += !is_bf16(r->dw[i]);
    printf("dw: %zu of %zu elements are not bf16 values\n", f32, (size_t)K * N);
    CHECK(f32 > (size_t)K * N * 9 / 10);
}

static int same(const float *a, const float *b, size_t n)
{
    return memcmp(a, b, n * sizeof(float)) == 0;
}

/* Every check above on one path of the CPU backend's bf16 matmuls (BORA_CPU_BF16_MATMUL):
 * widen (blocks widened to f32 for sgemm) or onednn (oneDNN's bf16 matmul). The widened path
 * keeps f32's promise of the same bits on 1 and 2 threads; oneDNN's splits by the thread count,
 * so only run after run is promised there (docs/design.md §8). *two gets the 2-thread results. */
static int check_path(const char *path, run *two)
{
    setenv("BORA_CPU_BF16_MATMUL", path, 1);
    run one, f32, kept;
    if (!build_run(2, BORA_DTYPE_BF16, 0, two) || !build_run(1, BORA_DTYPE_BF16, 0, &one) ||
        !build_run(2, 0, 0, &f32) || !build_run(2, BORA_DTYPE_BF16, 1, &kept))
        return 0;
    printf("%s: bf16 copies in the graph: %d; with the store's copies of the parameters, %d\n",
           path, two->casts, kept.casts);
    CHECK(two->casts == 5);
    CHECK(kept.casts == 2);
    /* the store's copies are the graph's casts: the same bits */
    CHECK(same(kept.y, two->y, M * N) && same(kept.z, two->z, M * N2));
    CHECK(same(kept.dx, two->dx, M * K) && same(kept.dw, two->dw, (size_t)K * N) &&
          same(kept.dv, two->dv, (size_t)N2 * K));
    size_t negated = 0;
    for (size_t i = 0; i < (size_t)M * N; i++)
        negated += kept.y_negated[i] == -kept.y[i];
    printf("after w was negated on the host: %zu of %zu outputs negated\n", negated, (size_t)M * N);
    CHECK(negated == (size_t)M * N);
    CHECK(f32.casts == 0);
    check_values(two);
    /* the same bits on one thread as on two */
    int threads_same = same(one.y, two->y, M * N) && same(one.z, two->z, M * N2) &&
                       same(one.dx, two->dx, M * K) && same(one.dw, two->dw, (size_t)K * N) &&
                       same(one.dv, two->dv, (size_t)N2 * K);
    printf("%s: 1 and 2 threads give %s bits\n", path, threads_same ? "the same" : "other");
    if (!strcmp(path, "widen"))
        CHECK(threads_same);
    /* without mixed precision, the products are f32's, not bf16's */
    CHECK(!same(f32.y, two->y, M * N));
    CHECK(same(f32.x, two->x, M * K));
    run_free(&one);
    run_free(&f32);
    run_free(&kept);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_mixed PLUGIN_DIR\n");
        return 2;
    }
    plugin_dir = argv[1];
    /* a path the backend does not know is refused by name */
    setenv("BORA_CPU_BF16_MATMUL", "fast", 1);
    rig r;
    CHECK(rig_try_open(&r, plugin_dir, 2, 5) != BORA_OK);
    CHECK(strstr(bora_error_get(), "BORA_CPU_BF16_MATMUL=fast: say onednn or widen") != NULL);
    /* which path the rule picks here, as the backend describes itself */
    unsetenv("BORA_CPU_BF16_MATMUL");
    rig_open(&r, plugin_dir, 2, 5);
    char desc[512] = "";
    r.ops->describe(r.be, desc, sizeof desc);
    printf("backend: %s\n", desc);
    CHECK(strstr(desc, "bf16 matmul: ") != NULL);
    rig_close(&r);

    run widened, onednn;
    if (!check_path("widen", &widened))
        return test_summary("test_mixed");
    setenv("BORA_CPU_BF16_MATMUL", "onednn", 1);
    if (rig_try_open(&r, plugin_dir, 2, 5) != BORA_OK) {
        printf("skip: the onednn path: %s\n", bora_error_get());
    } else {
        r.ops->describe(r.be, desc, sizeof desc);
        printf("onednn: %s\n", desc);
        CHECK(strstr(desc, "bf16 matmul: widened") == NULL);
        rig_close(&r);
        if (check_path("onednn", &onednn)) {
            /* each product ran on oneDNN: its f32 sums differ from sgemm's somewhere */
            CHECK(!same(onednn.y, widened.y, M * N) && !same(onednn.z, widened.z, M * N2));
            CHECK(!same(onednn.dx, widened.dx, M * K) &&
                  !same(onednn.dw, widened.dw, (size_t)K * N) &&
                  !same(onednn.dv, widened.dv, (size_t)N2 * K));
            run_free(&onednn);
        }
    }
    run_free(&widened);
    return test_summary("test_mixed");
}
