/* tests/graph/test_conv1d.c — the 1-d convolution (ABI 1.15) on the CPU backend.
 *
 * With --dump it prints, for each case (Whisper's two convolutions in small, no batch axis with
 * the length first, two batch axes around the length, a stride leaving positions unread, padding
 * past the kernel, a 1-wide kernel) in f64, f32 and under trainer.mp c=bf16, on the kernels and
 * on the decomposition an older backend gets: x, w, the upstream gradient u, and what the C
 * computed for y = conv1d(x, w) and the gradients of Σ y·u to x and w. check_conv1d.sh hands
 * that to conv1d_reference.py, which recomputes all three with PyTorch's float64 conv1d and
 * autograd.
 *
 * Without it: gradients of a loss with a square term against central differences in f64
 * (kernel and decomposition), the kernels equal to the decomposition (f32, Whisper-sized
 * channels, and a shape whose windows exceed one chunk of the kernel's scratch), the same bits
 * at 1 and 2 threads (f32 and bf16 products), and bad calls refused with their messages.
 *
 * usage: test_conv1d PLUGIN_DIR [--dump] */
#include "../test.h"
#include "rig.h"

#include <math.h>

static const char *plugin_dir;

#define AX(n, s) ((bora_axis){(n), (s)})

typedef struct conv_case {
    const char *name;
    int nx;
    bora_axis x[4]; /* x's axes in its order */
    bora_axis w[3]; /* w's axes in its order */
    const char *length, *in, *kernel;
    int stride;
    int64_t padding;
} conv_case;

static const conv_case cases[] = {
    {"whisper_conv1",
     3,
     {{"batch", 2}, {"mel", 5}, {"frame", 16}},
     {{"embed", 4}, {"mel", 5}, {"kernel", 3}},
     "frame",
     "mel",
     "kernel",
     1,
     1},
    {"whisper_conv2",
     3,
     {{"batch", 2}, {"embed", 4}, {"frame", 16}},
     {{"out", 6}, {"embed", 4}, {"kernel", 3}},
     "frame",
     "embed",
     "kernel",
     2,
     1},
    {"length_first",
     2,
     {{"frame", 11}, {"chan", 3}},
     {{"kernel", 4}, {"out", 2}, {"chan", 3}},
     "frame",
     "chan",
     "kernel",
     3,
     0},
    {"two_batches",
     4,
     {{"a", 2}, {"frame", 9}, {"b", 3}, {"chan", 2}},
     {{"out", 3}, {"chan", 2}, {"kernel", 2}},
     "frame",
     "chan",
     "kernel",
     2,
     2},
    {"pad_past_kernel",
     3,
     {{"batch", 1}, {"chan", 2}, {"frame", 4}},
     {{"out", 2}, {"chan", 2}, {"kernel", 2}},
     "frame",
     "chan",
     "kernel",
     0,
     3},
    {"pointwise",
     3,
     {{"batch", 2}, {"chan", 3}, {"frame", 5}},
     {{"out", 4}, {"chan", 3}, {"kernel", 1}},
     "frame",
     "chan",
     "kernel",
     1,
     0},
};
#define N_CASES (sizeof cases / sizeof cases[0])

static int64_t numel(int n, const bora_axis *ax)
{
    int64_t k = 1;
    for (int i = 0; i < n; i++)
        k *= ax[i].size;
    return k;
}

static void copy_out(rig *r, int grad, const char *name, void *dst, size_t n)
{
    if (rig_copy(r, grad, name, 0, dst, n, 1) != BORA_OK) {
        fprintf(stderr, "copy of %s%s failed: %s\n", grad ? "d " : "", name, bora_error_get());
        test_failures++;
        memset(dst, 0, n);
    }
}

static bora_conv1d_opts opts_of(const conv_case *c)
{
    return (bora_conv1d_opts){
        sizeof(bora_conv1d_opts), c->stride, c->padding, c->length, c->in, c->kernel};
}

/* What one run computed, as doubles: x, w, u, y, dx, dw (each n_* long). */
typedef struct conv_run {
    int64_t nx, nw, ny;
    int ny_axes;
    bora_axis y[4];
    double *x, *w, *u, *y_v, *dx, *dw;
} conv_run;

static void run_free(conv_run *o)
{
    free(o->x), free(o->w), free(o->u), free(o->y_v), free(o->dx), free(o->dw);
}

static double *widen(const void *p, int dtype, int64_t n)
{
    double *d = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++)
        d[i] = dtype == BORA_DTYPE_F64 ? ((const double *)p)[i] : ((const float *)p)[i];
    return d;
}

/* Case c on threads threads: params x and w (dtype; f32 under mixed, with c=bf16), loss Σ y·u
 * (+ Σ y²·u/4 with square), on the kernels or (abi 14) the decomposition. 0, or -1 when the
 * graph failed (reported). */
static int run_case(const conv_case *c, int dtype, int mixed, int abi, int threads, int square,
                    conv_run *o)
{
    memset(o, 0, sizeof *o);
    rig r;
    rig_open(&r, plugin_dir, threads, 11);
    if (mixed)
        g_store_mixed(r.store, BORA_DTYPE_BF16, 0, (uint32_t)abi);
    else
        g_store_backend_abi(r.store, (uint32_t)abi);
    g_graph *g = g_graph_new(r.store, BORA_MODE_TRAIN);
    bora_graph *gp = &g->pub;
    bora_tensor *x = bora_param(gp, "x", dtype, c->nx, c->x, bora_init_normal(1.0), 0);
    bora_tensor *w = bora_param(gp, "w", dtype, 3, c->w, bora_init_normal(0.5), 0);
    bora_conv1d_opts op = opts_of(c);
    bora_tensor *y = bora_conv1d(gp, x, w, &op);
    int ok = y != NULL;
    gval *loss = NULL;
    if (ok) {
        o->ny_axes = gp->api->ndim(y);
        const char *names[4];
        for (int i = 0; i < o->ny_axes; i++)
            o->y[i] = gp->api->axis(y, i), names[i] = o->y[i].name;
        bora_tensor *u = bora_input(gp, "u", dtype, o->ny_axes, o->y);
        gval *t = bora_mul(gp, y, u);
        if (square)
            t = bora_add(gp, t, gp->api->scale(gp, bora_mul(gp, bora_mul(gp, y, y), u), 0.25));
        loss = gp->api->reduce(gp, BORA_OP_SUM, t, o->ny_axes, names);
        y = gp->api->contiguous(gp, y);
    }
    o->nx = numel(c->nx, c->x), o->nw = numel(3, c->w), o->ny = numel(o->ny_axes, o->y);
    size_t e = bora_dtype_size(dtype);
    char *uv = malloc(e * (size_t)o->ny);
    for (int64_t i = 0; i < o->ny; i++) {
        double v = sin(0.37 * (double)i + 0.2) * 1.3;
        if (dtype == BORA_DTYPE_F64)
            ((double *)uv)[i] = v;
        else
            ((float *)uv)[i] = (float)v;
    }
    ok = ok && loss && !g_autodiff(g, loss) && (g->output = y, !g_finalize(g)) &&
         !g_store_materialize(r.store) && !g_set_input(g, "u", uv, e * (size_t)o->ny) && !g_run(g);
    if (ok) {
        char *buf = malloc(e * (size_t)(o->nx + o->nw + o->ny));
        g_read(g, y, buf, e * (size_t)o->ny);
        o->y_v = widen(buf, dtype, o->ny);
        copy_out(&r, 0, "x", buf, e * (size_t)o->nx);
        o->x = widen(buf, dtype, o->nx);
        copy_out(&r, 0, "w", buf, e * (size_t)o->nw);
        o->w = widen(buf, dtype, o->nw);
        copy_out(&r, 1, "x", buf, e * (size_t)o->nx);
        o->dx = widen(buf, dtype, o->nx);
        copy_out(&r, 1, "w", buf, e * (size_t)o->nw);
        o->dw = widen(buf, dtype, o->nw);
        o->u = widen(uv, dtype, o->ny);
        free(buf);
        /* the kernels ran where asked for, and only there */
        int kernels = g->op_runs[BORA_OP_CONV1D] > 0 && g->op_runs[BORA_OP_CONV1D_GRAD_INPUT] > 0 &&
                      g->op_runs[BORA_OP_CONV1D_GRAD_WEIGHT] > 0;
        int none = g->op_runs[BORA_OP_CONV1D] + g->op_runs[BORA_OP_CONV1D_GRAD_INPUT] +
                       g->op_runs[BORA_OP_CONV1D_GRAD_WEIGHT] ==
                   0;
        if (abi >= 15 ? !kernels : !none) {
            fprintf(stderr, "%s: ABI 1.%d: the conv1d kernels %s\n", c->name, abi,
                    abi >= 15 ? "did not run" : "ran on an older backend");
            test_failures++;
        }
    } else {
        fprintf(stderr, "%s: graph failed: %s %s\n", c->name, g->error, bora_error_get());
        test_failures++;
    }
    free(uv);
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

static void print_axes(const char *what, int n, const bora_axis *ax)
{
    printf("%s", what);
    for (int i = 0; i < n; i++)
        printf(" %s:%lld", ax[i].name, (long long)ax[i].size);
    printf("\n");
}

/* Every case in f64, f32 and c=bf16, kernels and decomposition, for conv1d_reference.py. */
static void dump(void)
{
    static const struct {
        const char *name;
        int dtype, mixed;
    } kinds[3] = {
        {"f64", BORA_DTYPE_F64, 0}, {"f32", BORA_DTYPE_F32, 0}, {"bf16", BORA_DTYPE_F32, 1}};
    for (size_t i = 0; i < N_CASES; i++)
        for (int k = 0; k < 3; k++)
            for (int abi = 14; abi <= 15; abi++) {
                const conv_case *c = &cases[i];
                conv_run o;
                if (run_case(c, kinds[k].dtype, kinds[k].mixed, abi, 2, 0, &o))
                    continue;
                printf("case %s %s %s stride %d padding %lld length %s in %s kernel %s\n", c->name,
                       kinds[k].name, abi >= 15 ? "kernel" : "decomposed", c->stride,
                       (long long)c->padding, c->length, c->in, c->kernel);
                print_axes("xaxes", c->nx, c->x);
                print_axes("waxes", 3, c->w);
                print_axes("yaxes", o.ny_axes, o.y);
                print_values("x", o.x, o.nx);
                print_values("w", o.w, o.nw);
                print_values("u", o.u, o.ny);
                print_values("y", o.y_v, o.ny);
                print_values("dx", o.dx, o.nx);
                print_values("dw", o.dw, o.nw);
                run_free(&o);
            }
}

/* ---- gradients against central differences ------------------------------------------------ */

/* f64, loss Σ y·u + Σ y²·u/4 (so dy depends on y): each parameter element moved by ±h. */
static void check_fd(const conv_case *c, int abi)
{
    rig r;
    rig_open(&r, plugin_dir, 2, 3);
    g_store_backend_abi(r.store, (uint32_t)abi);
    g_graph *g = g_graph_new(r.store, BORA_MODE_TRAIN);
    bora_graph *gp = &g->pub;
    bora_tensor *x = bora_param(gp, "x", BORA_DTYPE_F64, c->nx, c->x, bora_init_normal(1.0), 0);
    bora_tensor *w = bora_param(gp, "w", BORA_DTYPE_F64, 3, c->w, bora_init_normal(0.5), 0);
    bora_conv1d_opts op = opts_of(c);
    bora_tensor *y = bora_conv1d(gp, x, w, &op);
    int n = y ? gp->api->ndim(y) : 0;
    bora_axis ya[4];
    const char *names[4];
    for (int i = 0; i < n; i++)
        ya[i] = gp->api->axis(y, i), names[i] = ya[i].name;
    bora_tensor *u = bora_input(gp, "u", BORA_DTYPE_F64, n, ya);
    gval *loss =
        y ? gp->api->reduce(gp, BORA_OP_SUM,
                            bora_add(gp, bora_mul(gp, y, u),
                                     gp->api->scale(gp, bora_mul(gp, bora_mul(gp, y, y), u), 0.25)),
                            n, names)
          : NULL;
    int64_t ny = numel(n, ya);
    double *uv = malloc(sizeof(double) * (size_t)ny);
    for (int64_t i = 0; i < ny; i++)
        uv[i] = cos(0.7 * (double)i + 0.3);
    g->output = loss;
    if (!loss || g_autodiff(g, loss) || g_finalize(g) || g_store_materialize(r.store) ||
        g_set_input(g, "u", uv, sizeof(double) * (size_t)ny) || g_run(g)) {
        fprintf(stderr, "%s: fd graph failed: %s %s\n", c->name, g->error, bora_error_get());
        test_failures++;
        goto done;
    }
    const char *params[2] = {"x", "w"};
    int64_t counts[2] = {numel(c->nx, c->x), numel(3, c->w)};
    double *grads[2]; /* taken first: every run adds into the gradient buffers */
    for (int p = 0; p < 2; p++) {
        grads[p] = malloc(sizeof(double) * (size_t)counts[p]);
        copy_out(&r, 1, params[p], grads[p], sizeof(double) * (size_t)counts[p]);
    }
    for (int p = 0; p < 2; p++) {
        double *grad = grads[p];
        for (int64_t i = 0; i < counts[p]; i++) {
            double keep, v, lp, lm, h = 1e-6;
            size_t at = (size_t)i * sizeof(double);
            rig_copy(&r, 0, params[p], at, &keep, sizeof keep, 1);
            v = keep + h;
            rig_copy(&r, 0, params[p], at, &v, sizeof v, 0);
            g_run(g);
            g_read(g, g->output, &lp, sizeof lp);
            v = keep - h;
            rig_copy(&r, 0, params[p], at, &v, sizeof v, 0);
            g_run(g);
            g_read(g, g->output, &lm, sizeof lm);
            rig_copy(&r, 0, params[p], at, &keep, sizeof keep, 0);
            double fd = (lp - lm) / (2 * h);
            if (!(fabs(fd - grad[i]) <= 1e-6 * fmax(fabs(fd), fabs(grad[i])) + 1e-7)) {
                fprintf(stderr,
                        "%s (ABI 1.%d): d loss / d %s[%lld]: autodiff %.12g, differences %.12g\n",
                        c->name, abi, params[p], (long long)i, grad[i], fd);
                test_failures++;
                break;
            }
        }
        free(grad);
    }
done:
    free(uv);
    g_graph_free(g);
    rig_close(&r);
}

/* ---- the kernels against the decomposition, and across thread counts --------------------- */

/* Whether a and b agree within tol of the largest magnitude in b (0: bitwise). */
static int close_to(const char *what, const double *a, const double *b, int64_t n, double tol)
{
    double scale = 0;
    for (int64_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(b[i]));
    for (int64_t i = 0; i < n; i++) {
        int same =
            tol == 0 ? memcmp(&a[i], &b[i], sizeof a[i]) == 0 : fabs(a[i] - b[i]) <= tol * scale;
        if (!same) {
            fprintf(stderr, "%s: element %lld is %.9g, want %.9g (scale %g)\n", what, (long long)i,
                    a[i], b[i], scale);
            test_failures++;
            return 0;
        }
    }
    return 1;
}

static void compare_runs(const char *what, const conv_run *a, const conv_run *b, double tol)
{
    char m[160];
    snprintf(m, sizeof m, "%s: y", what);
    close_to(m, a->y_v, b->y_v, a->ny, tol);
    snprintf(m, sizeof m, "%s: dx", what);
    close_to(m, a->dx, b->dx, a->nx, tol);
    snprintf(m, sizeof m, "%s: dw", what);
    close_to(m, a->dw, b->dw, a->nw, tol);
}

/* Whisper-tiny's stem with fewer frames: conv1 80 -> 96 channels (K 3, pad 1), conv2 96 -> 96
 * (stride 2); and a shape whose windows (256·4 × 8192 f32, 32 MiB a batch row) take more than
 * the kernel's 64 MiB scratch for two rows, so the rows go in chunks. */
static const conv_case big[] = {
    {"conv1_80",
     3,
     {{"batch", 2}, {"mel", 80}, {"frame", 300}},
     {{"embed", 96}, {"mel", 80}, {"kernel", 3}},
     "frame",
     "mel",
     "kernel",
     1,
     1},
    {"conv2_96",
     3,
     {{"batch", 2}, {"embed", 96}, {"frame", 300}},
     {{"out", 96}, {"embed", 96}, {"kernel", 3}},
     "frame",
     "embed",
     "kernel",
     2,
     1},
    {"chunked",
     3,
     {{"batch", 3}, {"chan", 256}, {"frame", 8195}},
     {{"out", 4}, {"chan", 256}, {"kernel", 4}},
     "frame",
     "chan",
     "kernel",
     1,
     0},
};

static void check_big(void)
{
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
        const conv_case *c = &big[i];
        conv_run k1, k2, d2, b1, b2;
        char what[128];
        if (run_case(c, BORA_DTYPE_F32, 0, 15, 2, 0, &k2) == 0 &&
            run_case(c, BORA_DTYPE_F32, 0, 14, 2, 0, &d2) == 0) {
            snprintf(what, sizeof what, "%s: kernels against the decomposition", c->name);
            compare_runs(what, &k2, &d2, 1e-5);
            run_free(&d2);
            if (i < 2 && run_case(c, BORA_DTYPE_F32, 0, 15, 1, 0, &k1) == 0) {
                snprintf(what, sizeof what, "%s: f32 at 1 and 2 threads", c->name);
                compare_runs(what, &k1, &k2, 0);
                run_free(&k1);
            }
            run_free(&k2);
        }
        if (i < 2 && run_case(c, BORA_DTYPE_F32, 1, 15, 1, 0, &b1) == 0 &&
            run_case(c, BORA_DTYPE_F32, 1, 15, 2, 0, &b2) == 0) {
            snprintf(what, sizeof what, "%s: bf16 products at 1 and 2 threads", c->name);
            compare_runs(what, &b1, &b2, 0);
            run_free(&b1);
            run_free(&b2);
        }
    }
}

/* ---- refusals ----------------------------------------------------------------------------- */

static void check_refusals(void)
{
    static const struct {
        const char *want;
        int64_t L, K;
        int stride;
        int64_t padding;
        int dtype;
        const char *length, *in, *kernel, *w_in, *w_out;
    } bad[] = {
        {"stride -1 must be at least 1", 8, 3, -1, 0, BORA_DTYPE_F32, "frame", "chan", "kernel",
         "chan", "out"},
        {"padding -2 within 0..2^60", 8, 3, 1, -2, BORA_DTYPE_F32, "frame", "chan", "kernel",
         "chan", "out"},
        {"is longer than the length 'frame'", 3, 6, 1, 1, BORA_DTYPE_F32, "frame", "chan", "kernel",
         "chan", "out"},
        {"needs the length axis 'time'", 8, 3, 1, 0, BORA_DTYPE_F32, "time", "chan", "kernel",
         "chan", "out"},
        {"(two different names)", 8, 3, 1, 0, BORA_DTYPE_F32, "frame", "frame", "kernel", "chan",
         "out"},
        {"the kernel 'taps'", 8, 3, 1, 0, BORA_DTYPE_F32, "frame", "chan", "taps", "chan", "out"},
        {"input channels 'chan' are 4 in x", 8, 3, 1, 0, BORA_DTYPE_F32, "frame", "chan", "kernel",
         "chan5", "out"},
        {"output axis 'batch'", 8, 3, 1, 0, BORA_DTYPE_F32, "frame", "chan", "kernel", "chan",
         "batch"},
        {"need one dtype, f32 or f64", 8, 3, 1, 0, BORA_DTYPE_BF16, "frame", "chan", "kernel",
         "chan", "out"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rig r;
        rig_open(&r, plugin_dir, 1, 1);
        g_graph *g = g_graph_new(r.store, BORA_MODE_EVAL);
        bora_graph *gp = &g->pub;
        bora_axis xa[3] = {AX("batch", 2), AX("chan", 4), AX("frame", bad[i].L)};
        int wide = !strcmp(bad[i].w_in, "chan5");
        bora_axis wa[3] = {AX(bad[i].w_out, 2), AX(wide ? "chan" : bad[i].w_in, wide ? 5 : 4),
                           AX("kernel", bad[i].K)};
        bora_tensor *x = bora_input(gp, "x", bad[i].dtype, 3, xa);
        bora_tensor *w = bora_input(gp, "w", bad[i].dtype, 3, wa);
        bora_conv1d_opts o = {sizeof o,      bad[i].stride, bad[i].padding,
                              bad[i].length, bad[i].in,     bad[i].kernel};
        CHECK(bora_conv1d(gp, x, w, &o) == NULL);
        CHECK(bora_graph_status(gp) == BORA_ERR_INVALID || bora_graph_status(gp) != BORA_OK);
        CHECK_CONTAINS(g->error, bad[i].want);
        g_graph_free(g);
        rig_close(&r);
    }
    /* no options, and options without axis names */
    rig r;
    rig_open(&r, plugin_dir, 1, 1);
    g_graph *g = g_graph_new(r.store, BORA_MODE_EVAL);
    bora_graph *gp = &g->pub;
    bora_axis xa[3] = {AX("batch", 2), AX("chan", 4), AX("frame", 8)};
    bora_axis wa[3] = {AX("out", 2), AX("chan", 4), AX("kernel", 3)};
    bora_tensor *x = bora_input(gp, "x", BORA_DTYPE_F32, 3, xa);
    bora_tensor *w = bora_input(gp, "w", BORA_DTYPE_F32, 3, wa);
    bora_conv1d_opts o = {sizeof o, 1, 0, "frame", NULL, "kernel"};
    CHECK(bora_conv1d(gp, x, w, &o) == NULL);
    CHECK_CONTAINS(g->error, "length_axis, in_axis and kernel_axis named");
    g_graph_free(g);
    rig_close(&r);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_conv1d PLUGIN_DIR [--dump]\n");
        return 2;
    }
    plugin_dir = argv[1];
    if (argc > 2 && !strcmp(argv[2], "--dump")) {
        dump();
        return test_failures ? 1 : 0;
    }
    for (size_t i = 0; i < N_CASES; i++) {
        check_fd(&cases[i], 15);
        check_fd(&cases[i], 14);
    }
    check_big();
    check_refusals();
    return test_summary("test_conv1d");
}
