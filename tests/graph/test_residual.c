/* tests/graph/test_residual.c — a bf16 residual stream (trainer.mp r=bf16, bora_residual) on the
 * CPU backend. A two-block residual network over rows of width E,
 *     x0 = residual(X);  x(l+1) = residual(x(l) + tanh(LN_l(x(l)) W_l));  loss = Σ LN_f(x2) · C,
 * is built with the stream in bf16 and in f32, and checked:
 *   - under bf16 every value of the stream is a bf16 value, and each is its predecessor plus the
 *     block's output rounded to bf16 (a double-precision block from the graph's own x(l));
 *   - the loss and every gradient equal a double-precision forward and backward pass over the
 *     graph's own stream values, with the rounding passed through unchanged (straight-through):
 *     gradients stay f32 and are those of the rounded activations; under f32 the same
 *     reference holds for the unrounded stream, and the two runs' gradients differ;
 *   - fused and unfused runs give the same bits (the planner lets LayerNorm and its gradient
 *     read the bf16 stream and fuses the widening into the residual add's chain), and so does
 *     recomputation between checkpoints;
 *   - with fusion no f32 copy of the stream is ever written to memory, and what the forward
 *     pass keeps for the backward holds the stream in bf16 (half its f32 bytes), the rest alike;
 *   - a host whose backend was built before ABI 1.6 still runs it (the widenings in memory).
 *
 * usage: test_residual PLUGIN_DIR */
#include "../test.h"
#include "rig.h"

#include <math.h>

static const char *plugin_dir;

enum { R = 64, E = 48, L = 2, LAYERS_PLUS = L + 1 };
#define EPS 1e-5

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

/* What a run gives back. */
typedef struct run {
    float loss;
    float xs[LAYERS_PLUS][R * E];    /* the stream x0..x2, from eval graphs */
    float w[L][E * E], dw[L][E * E]; /* W_l and its gradient */
    float gamma[LAYERS_PLUS][E], dgamma[LAYERS_PLUS][E], dbeta[LAYERS_PLUS][E];
    float x_in[R * E], c[R * E]; /* the inputs */
    int widenings_in_memory, ln_bf16, residuals;
    size_t kept; /* bytes of the arena values kept from the forward pass into the backward */
} run;

static bora_tensor *ln(bora_graph *g, int l, bora_tensor *x)
{
    char w[32], b[32];
    snprintf(w, sizeof w, "ln.%d.weight", l);
    snprintf(b, sizeof b, "ln.%d.bias", l);
    bora_axis e = {"embed", E};
    return g->api->layernorm(g, x, bora_param(g, w, BORA_DTYPE_F32, 1, &e, bora_init_ones(), 0),
                             bora_param(g, b, BORA_DTYPE_F32, 1, &e, bora_init_zeros(), 0), "embed",
                             EPS);
}

/* The network up to x(depth) (its value), or, with depth < 0, to the loss. */
static bora_tensor *net(bora_graph *g, int depth, int checkpoints)
{
    const bora_graph_api *A = g->api;
    bora_axis ax[2] = {{"row", R}, {"embed", E}}, wa[2] = {{"embed", E}, {"out", E}};
    bora_tensor *x = bora_residual(g, bora_input(g, "x", BORA_DTYPE_F32, 2, ax));
    for (int l = 0; l < L && l != depth; l++) {
        if (checkpoints)
            x = A->checkpoint(g, x);
        char name[16];
        snprintf(name, sizeof name, "w.%d", l);
        bora_tensor *W = bora_param(g, name, BORA_DTYPE_F32, 2, wa, bora_init_normal(0.15), 0);
        const char *k[] = {"embed"};
        bora_tensor *h = bora_unary(g, BORA_OP_TANH, bora_dot(g, ln(g, l, x), W, 1, k));
        x = bora_residual(g, bora_add(g, x, bora_rename(g, h, "out", "embed")));
    }
    if (depth >= 0)
        return A->contiguous(g, x);
    if (checkpoints)
        x = A->checkpoint(g, x);
    const char *all[2] = {"row", "embed"};
    bora_tensor *C = bora_input(g, "c", BORA_DTYPE_F32, 2, ax);
    return A->reduce(g, BORA_OP_SUM, bora_mul(g, ln(g, L, x), C), 2, all);
}

static void count_plan(const g_graph *g, run *out)
{
    int turn = g->output->node->id; /* the loss: the backward pass starts after it */
    for (size_t i = 0; i < g->n_vals; i++) {
        const gval *v = g->vals[i];
        if (v->base == v && v->storage == S_ARENA && v->first_use >= 0 && v->first_use < turn &&
            v->last_use > turn)
            out->kept += (size_t)g_numel(v) * bora_dtype_size(v->dtype);
    }
    for (size_t i = 0; i < g->n_nodes; i++) {
        const gnode *n = g->nodes[i];
        if (!n->kernel)
            continue; /* not run */
        if (n->op == BORA_OP_COPY && n->in[0]->dtype == BORA_DTYPE_BF16 &&
            n->out[0]->dtype == BORA_DTYPE_F32) {
            int tiled = 0;
            if (n->fused) {
                const g_fused *f = &g->fused[n->fused - 1];
                for (int j = 0; j < f->n_steps * f->n_segments; j++)
                    tiled |= f->nodes[j] == n && g_fused_in_tile(f, j);
            }
            out->widenings_in_memory += !tiled;
        }
        out->ln_bf16 += (n->op == BORA_OP_LAYERNORM || n->op == BORA_OP_LAYERNORM_GRAD) &&
                        n->in[0]->dtype == BORA_DTYPE_BF16;
    }
}

/* Build and run with the stream in `residual` (f32 or bf16), fusion on or off, with or without
 * checkpoints; abi_minor is what the store is told the backend was built for. */
static int build_run(int residual, int fusion, int checkpoints, uint32_t abi_minor, run *out)
{
    memset(out, 0, sizeof *out);
    if (fusion)
        unsetenv("BORA_NO_FUSION");
    else
        setenv("BORA_NO_FUSION", "1", 1);
    rig r;
    rig_open(&r, plugin_dir, 2, 11);
    g_store_mixed(r.store, BORA_DTYPE_F32, residual, abi_minor);
    g_graph *g = g_graph_new(r.store, BORA_MODE_TRAIN), *ev[LAYERS_PLUS];
    g->output = net(&g->pub, -1, checkpoints);
    int ok = g->output && g_autodiff(g, g->output) == BORA_OK && g_finalize(g) == BORA_OK;
    out->residuals = g->residuals;
    for (int l = 0; l < LAYERS_PLUS; l++) {
        ev[l] = g_graph_new(r.store, BORA_MODE_EVAL);
        ev[l]->output = net(&ev[l]->pub, l, 0);
        ok = ok && ev[l]->output && g_finalize(ev[l]) == BORA_OK;
    }
    ok = ok && g_store_materialize(r.store) == BORA_OK;
    if (!ok) {
        fprintf(stderr, "build: %s\n", g->status ? g->error : "an eval graph failed");
        test_failures++;
        goto done;
    }
    count_plan(g, out);
    for (int i = 0; i < R * E; i++) {
        out->x_in[i] = (float)(sin(0.71 * i + 0.3) * 1.7);
        out->c[i] = (float)(cos(0.37 * i) * 0.8 + 0.1);
    }
    for (int l = 0; l < LAYERS_PLUS; l++) {
        CHECK(g_set_input(ev[l], "x", out->x_in, sizeof out->x_in) == BORA_OK);
        CHECK(g_run(ev[l]) == BORA_OK);
        CHECK(g_read(ev[l], ev[l]->output, out->xs[l], sizeof out->xs[l]) == BORA_OK);
    }
    CHECK(g_set_input(g, "x", out->x_in, sizeof out->x_in) == BORA_OK);
    CHECK(g_set_input(g, "c", out->c, sizeof out->c) == BORA_OK);
    g_store_zero_grads(r.store);
    CHECK(g_run(g) == BORA_OK);
    CHECK(g_read(g, g->output, &out->loss, sizeof out->loss) == BORA_OK);
    for (int l = 0; l < L; l++) {
        char name[16];
        snprintf(name, sizeof name, "w.%d", l);
        memcpy(out->w[l], rig_param(&r, name), sizeof out->w[l]);
        memcpy(out->dw[l], rig_grad(&r, name), sizeof out->dw[l]);
    }
    for (int l = 0; l < LAYERS_PLUS; l++) {
        char w[32], b[32];
        snprintf(w, sizeof w, "ln.%d.weight", l);
        snprintf(b, sizeof b, "ln.%d.bias", l);
        memcpy(out->gamma[l], rig_param(&r, w), sizeof out->gamma[l]);
        memcpy(out->dgamma[l], rig_grad(&r, w), sizeof out->dgamma[l]);
        memcpy(out->dbeta[l], rig_grad(&r, b), sizeof out->dbeta[l]);
    }
done:
    for (int l = 0; l < LAYERS_PLUS; l++)
        g_graph_free(ev[l]);
    g_graph_free(g);
    rig_close(&r);
    unsetenv("BORA_NO_FUSION");
    return ok;
}

/* LayerNorm of one row in double (beta is zero, as initialised): xhat and y = xhat gamma. */
static void ln_row(const float *x, const float *gamma, double *xhat, double *y, double *rstd)
{
    double mean = 0, var = 0;
    for (int e = 0; e < E; e++)
        mean += x[e];
    mean /= E;
    for (int e = 0; e < E; e++)
        var += (x[e] - mean) * (x[e] - mean);
    *rstd = 1.0 / sqrt(var / E + EPS);
    for (int e = 0; e < E; e++) {
        xhat[e] = (x[e] - mean) * *rstd;
        y[e] = xhat[e] * gamma[e];
    }
}

/* Its backward for one row: dx from dy, and the row's terms of dgamma and dbeta. */
static void ln_row_grad(const double *xhat, double rstd, const float *gamma, const double *dy,
                        double *dx, double *dgamma, double *dbeta)
{
    double mg = 0, mgx = 0;
    for (int e = 0; e < E; e++) {
        double gg = dy[e] * gamma[e];
        mg += gg, mgx += gg * xhat[e];
        dgamma[e] += dy[e] * xhat[e];
        dbeta[e] += dy[e];
    }
    mg /= E, mgx /= E;
    for (int e = 0; e < E; e++)
        dx[e] = rstd * (dy[e] * gamma[e] - mg - xhat[e] * mgx);
}

/* Largest |got - want| over the largest |want|. */
static double rel_err(const float *got, const double *want, int n)
{
    double err = 0, scale = 0;
    for (int i = 0; i < n; i++) {
        err = fmax(err, fabs(got[i] - want[i]));
        scale = fmax(scale, fabs(want[i]));
    }
    return err / scale;
}

/* The reference: forward from the run's own stream values, backward straight through the
 * rounding. Returns the worst relative error of the loss and the gradients; with rounded, also
 * checks each x(l+1) against x(l) plus its block rounded to bf16. */
static double check_reference(const run *u, int rounded)
{
    static double n[L][R][E], xh[LAYERS_PLUS][R][E], rs[LAYERS_PLUS][R], h[L][R][E];
    static double g[R][E], dw[L][E * E], dgam[LAYERS_PLUS][E], dbet[LAYERS_PLUS][E];
    memset(dw, 0, sizeof dw), memset(dgam, 0, sizeof dgam), memset(dbet, 0, sizeof dbet);
    int exact = 0, near = 0;
    for (int l = 0; l < L; l++)
        for (int r = 0; r < R; r++) {
            ln_row(u->xs[l] + r * E, u->gamma[l], xh[l][r], n[l][r], &rs[l][r]);
            for (int o = 0; o < E; o++) {
                double a = 0;
                for (int e = 0; e < E; e++)
                    a += n[l][r][e] * u->w[l][e * E + o];
                h[l][r][o] = tanh(a);
                double want = (double)u->xs[l][r * E + o] + h[l][r][o];
                if (rounded)
                    want = bf((float)want);
                double got = u->xs[l + 1][r * E + o];
                exact += got == want;
                double tol = rounded ? fabs(want) / 128 + 1e-6 : 1e-5 * (fabs(want) + 1);
                near += fabs(got - want) <= tol;
            }
        }
    printf("  stream: %d of %d values as the reference's, %d within %s\n", exact, L * R * E, near,
           rounded ? "a bf16 step" : "1e-5");
    CHECK(near == L * R * E);
    if (rounded)
        CHECK(exact >= L * R * E * 99 / 100);
    /* the loss and its gradient through LN_f */
    double loss = 0, y[E], dx[E];
    for (int r = 0; r < R; r++) {
        ln_row(u->xs[L] + r * E, u->gamma[L], xh[L][r], y, &rs[L][r]);
        double dy[E];
        for (int e = 0; e < E; e++) {
            loss += y[e] * u->c[r * E + e];
            dy[e] = u->c[r * E + e];
        }
        ln_row_grad(xh[L][r], rs[L][r], u->gamma[L], dy, g[r], dgam[L], dbet[L]);
    }
    for (int l = L - 1; l >= 0; l--)
        for (int r = 0; r < R; r++) {
            double gh[E], gn[E];
            for (int o = 0; o < E; o++)
                gh[o] = g[r][o] * (1 - h[l][r][o] * h[l][r][o]);
            for (int e = 0; e < E; e++) {
                gn[e] = 0;
                for (int o = 0; o < E; o++) {
                    gn[e] += gh[o] * u->w[l][e * E + o];
                    dw[l][e * E + o] += n[l][r][e] * gh[o];
                }
            }
            ln_row_grad(xh[l][r], rs[l][r], u->gamma[l], gn, dx, dgam[l], dbet[l]);
            for (int e = 0; e < E; e++)
                g[r][e] += dx[e]; /* the stream's gradient passes the rounding unchanged */
        }
    double worst = fabs(u->loss - loss) / fabs(loss);
    for (int l = 0; l < L; l++)
        worst = fmax(worst, rel_err(u->dw[l], dw[l], E * E));
    for (int l = 0; l < LAYERS_PLUS; l++)
        worst =
            fmax(worst, fmax(rel_err(u->dgamma[l], dgam[l], E), rel_err(u->dbeta[l], dbet[l], E)));
    return worst;
}

static int same_run(const run *a, const run *b)
{
    return a->loss == b->loss && !memcmp(a->xs, b->xs, sizeof a->xs) &&
           !memcmp(a->dw, b->dw, sizeof a->dw) && !memcmp(a->dgamma, b->dgamma, sizeof a->dgamma) &&
           !memcmp(a->dbeta, b->dbeta, sizeof a->dbeta);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_residual PLUGIN_DIR\n");
        return 2;
    }
    plugin_dir = argv[1];
    static run bf, bf_unfused, bf_ckpt, bf_old, f32;
    if (!build_run(BORA_DTYPE_BF16, 1, 0, BORA_ABI_MINOR, &bf) ||
        !build_run(BORA_DTYPE_BF16, 0, 0, BORA_ABI_MINOR, &bf_unfused) ||
        !build_run(BORA_DTYPE_BF16, 1, 1, BORA_ABI_MINOR, &bf_ckpt) ||
        !build_run(BORA_DTYPE_BF16, 1, 0, 5, &bf_old) ||
        !build_run(BORA_DTYPE_F32, 1, 0, BORA_ABI_MINOR, &f32))
        return test_summary("test_residual");
    printf("r=bf16: %d residual values; loss %.7g (f32 stream: %.7g)\n", bf.residuals, bf.loss,
           f32.loss);
    CHECK(bf.residuals == L + 1 && f32.residuals == 0);

    /* the stream is bf16 values under bf16, and mostly not under f32 */
    size_t not_bf16 = 0, f32_not_bf16 = 0;
    for (int l = 0; l < LAYERS_PLUS; l++)
        for (int i = 0; i < R * E; i++)
            not_bf16 += !is_bf16(bf.xs[l][i]), f32_not_bf16 += !is_bf16(f32.xs[l][i]);
    printf("stream values that are not bf16 values: %zu under r=bf16, %zu under f32\n", not_bf16,
           f32_not_bf16);
    CHECK(not_bf16 == 0);
    CHECK(f32_not_bf16 > (size_t)LAYERS_PLUS * R * E * 9 / 10);

    /* against double precision over each run's own stream */
    double e_bf = check_reference(&bf, 1), e_f32 = check_reference(&f32, 0);
    printf("loss and gradients against the reference: %.2e (r=bf16), %.2e (f32)\n", e_bf, e_f32);
    CHECK(e_bf < 2e-5);
    CHECK(e_f32 < 2e-5);
    double d = 0, s = 0;
    for (int i = 0; i < E * E; i++)
        d = fmax(d, fabs(bf.dw[0][i] - f32.dw[0][i])), s = fmax(s, fabs(f32.dw[0][i]));
    printf("dw.0 under r=bf16 against f32: %.2e of its largest\n", d / s);
    CHECK(d / s > 1e-4);

    /* the same bits fused and unfused, with recomputation, and on a pre-1.6 backend */
    CHECK(same_run(&bf, &bf_unfused));
    CHECK(same_run(&bf, &bf_ckpt));
    CHECK(same_run(&bf, &bf_old));

    /* no f32 copy of the stream in memory with fusion; LayerNorm reads bf16 */
    printf("widenings written to memory: %d fused, %d unfused, %d on a 1.5 backend; LayerNorm "
           "nodes reading bf16: %d\n",
           bf.widenings_in_memory, bf_unfused.widenings_in_memory, bf_old.widenings_in_memory,
           bf.ln_bf16);
    CHECK(bf.widenings_in_memory == 0);
    CHECK(bf_unfused.widenings_in_memory > 0 && bf_old.widenings_in_memory > 0);
    CHECK(bf.ln_bf16 == 2 * LAYERS_PLUS); /* forward and gradient of each LayerNorm */
    /* kept for the backward pass: the stream in bf16 (x0..x2; LayerNorm's gradients read them)
     * instead of f32 (x1 and x2; x0 is then the input itself, outside the arena), the rest
     * alike */
    printf("kept from the forward pass into the backward: %zu bytes (r=bf16), %zu (f32)\n", bf.kept,
           f32.kept);
    CHECK(bf.kept - (size_t)LAYERS_PLUS * R * E * 2 == f32.kept - (size_t)L * R * E * 4);
    return test_summary("test_residual");
}
