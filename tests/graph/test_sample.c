/* tests/graph/test_sample.c — bora_graph_api.sample (BORA_OP_SAMPLE) on a backend (the CPU's
 * unless one is named; exit 77 when it reports no usable GPU here):
 *   --dump prints cases (logits, their axes, seed, stream, counter) and the tokens drawn, for
 *   sample_reference.py to redraw with its own Philox4x32-10 and inverse CDF: exact tokens;
 *   frequencies of many rows with the same logits against the exact softmax (chi-square);
 *   the same tokens at 1 and 2 threads, and from a batch split in two (the counter's first
 *   row) as from the whole; bf16 logits draw as the same values in f32;
 *   non-finite logits give -1, the rows beside them unaffected;
 *   bad calls fail the build naming the tensor; a backend built before ABI 1.11 is never asked
 *   for the op; a counter out of range fails the run.
 * (The draw as a constant to autodiff is test_ops' "sample" check.)
 *
 * usage: test_sample PLUGIN_DIR [--dump] [BACKEND] */
#include "../test.h"
#include "rig.h"

#include <math.h>
#include <stdint.h>

static const char *plugin_dir;
static const char *backend_name = "cpu";

/* The rig on the backend under test (num_threads: the CPU backend's key); exits on failure. */
static void open_rig(rig *r, int num_threads)
{
    if (rig_try_open_on(r, plugin_dir, backend_name, num_threads, 1) != BORA_OK) {
        fprintf(stderr, "rig: %s\n", bora_error_get());
        exit(1);
    }
}

typedef struct scase {
    const char *name;
    int dtype;
    int ndim;
    bora_axis axes[3];
    const char *vocab;
    uint64_t seed, stream;
    int64_t step, first;
} scase;

/* Draw over logits (row-major in c->axes, f64 values exactly representable in c->dtype) on a
 * backend (threads: the CPU's) believed built for ABI 1.abi_minor: the status, tokens in out
 * (row-major over the other axes), the graph's error in err. */
static bora_status draw(const scase *c, const double *logits, int threads, uint32_t abi_minor,
                        int32_t *out, char *err, size_t err_cap)
{
    rig r;
    open_rig(&r, threads);
    if (abi_minor)
        g_store_backend_abi(r.store, abi_minor);
    g_graph *g = g_graph_new(r.store, BORA_MODE_EVAL);
    bora_graph *gp = &g->pub;
    bora_tensor *x = bora_input(gp, "logits", c->dtype, c->ndim, c->axes);
    bora_tensor *counter = bora_input(gp, "counter", BORA_DTYPE_I64, 1, &(bora_axis){"ctr", 2});
    bora_tensor *t = gp->api->sample(gp, x, c->vocab, counter, c->seed, c->stream);
    if (t && t->base != t)
        t = gp->api->contiguous(gp, t);
    g->output = t;
    int64_t n = 1, rows = 1;
    for (int i = 0; i < c->ndim; i++) {
        n *= c->axes[i].size;
        rows *= strcmp(c->axes[i].name, c->vocab) ? c->axes[i].size : 1;
    }
    int64_t ctr[2] = {c->step, c->first};
    size_t esz = bora_dtype_size(c->dtype);
    void *data = malloc((size_t)n * esz);
    for (int64_t i = 0; i < n; i++)
        if (c->dtype == BORA_DTYPE_F32)
            ((float *)data)[i] = (float)logits[i];
        else if (c->dtype == BORA_DTYPE_BF16) { /* the top half of an f32 (values exact in bf16) */
            float f = (float)logits[i];
            uint32_t bits;
            memcpy(&bits, &f, sizeof bits);
            ((uint16_t *)data)[i] = (uint16_t)(bits >> 16);
        } else
            ((double *)data)[i] = logits[i];
    bora_status st = BORA_ERR_INVALID;
    if (t && g_finalize(g) == BORA_OK && g_store_materialize(r.store) == BORA_OK &&
        g_set_input(g, "logits", data, (size_t)n * esz) == BORA_OK &&
        g_set_input(g, "counter", ctr, sizeof ctr) == BORA_OK) {
        st = g_run(g);
        if (st == BORA_OK)
            st = g_read(g, t, out, (size_t)rows * sizeof *out);
        if (st != BORA_OK)
            snprintf(g->error, sizeof g->error, "%s", bora_error_get());
    }
    if (err)
        snprintf(err, err_cap, "%s", g->error);
    free(data);
    g_graph_free(g);
    rig_close(&r);
    return st;
}

/* A reproducible spread of logits in [lo, hi), rounded to dtype. */
static void fill(double *x, int64_t n, uint64_t seed, double lo, double hi, int dtype)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        double v = lo + (hi - lo) * (double)(s >> 11) * 0x1p-53;
        x[i] = dtype == BORA_DTYPE_F32 ? (double)(float)v : v;
    }
}

static int64_t numel(const scase *c)
{
    int64_t n = 1;
    for (int i = 0; i < c->ndim; i++)
        n *= c->axes[i].size;
    return n;
}

/* ---- exact tokens, for the independent reference ----------------------------------------- */

static const scase dump_cases[] = {
    {"f64",
     BORA_DTYPE_F64,
     2,
     {{"position", 64}, {"vocab", 10}},
     "vocab",
     0x0123456789abcdefull,
     1,
     7,
     0},
    /* the vocab axis in the middle: rows are (batch, position) row-major */
    {"f32 vocab between",
     BORA_DTYPE_F32,
     3,
     {{"batch", 2}, {"vocab", 33}, {"position", 25}},
     "vocab",
     42,
     2,
     123456,
     1000},
    /* rows past 2^32 (the row's high word), every other word at its largest */
    {"high words",
     BORA_DTYPE_F64,
     2,
     {{"position", 20}, {"vocab", 5}},
     "vocab",
     0xffffffffffffffffull,
     0xffffffffull,
     0xffffffffll,
     0xfffffff6ll},
    /* a wide vocab of equal logits in f32 (set below): the running sum climbs to 16384 in equal
     * steps of e^-0.1, each rounded the same way were it kept in f32, which would move about
     * three tokens in four */
    {"f32 wide", BORA_DTYPE_F32, 2, {{"position", 16}, {"vocab", 16384}}, "vocab", 7, 3, 1, 0},
    /* one row, a 0-d result */
    {"one row", BORA_DTYPE_F64, 1, {{"vocab", 9}}, "vocab", 11, 4, 2, 5},
    /* non-finite and extreme logits (set below) */
    {"special", BORA_DTYPE_F64, 2, {{"position", 8}, {"vocab", 6}}, "vocab", 99, 5, 3, 0},
};

static void special_rows(double *x)
{
    x[0 * 6 + 2] = INFINITY;
    x[1 * 6 + 4] = NAN;
    x[2 * 6 + 0] = -INFINITY;
    for (int v = 0; v < 6; v++) {
        x[3 * 6 + v] = -INFINITY;               /* no mass at all */
        x[4 * 6 + v] = v == 3 ? 1e300 : -1e300; /* every other weight underflows to 0 */
        x[5 * 6 + v] = v % 2 ? 700.0 : -800.0;  /* half the weights underflow */
    }
}

static void dump(void)
{
    for (size_t k = 0; k < sizeof dump_cases / sizeof *dump_cases; k++) {
        const scase *c = &dump_cases[k];
        int64_t n = numel(c), rows = n;
        double *x = malloc((size_t)n * sizeof *x);
        fill(x, n, k + 1, -4, 4, c->dtype);
        if (!strcmp(c->name, "f32 wide"))
            for (int64_t i = 0; i < n; i++) /* a few stay random, the first of a row is the max */
                x[i] = i % 16384 == 0 ? 0.0 : i % 1001 ? (double)-0.1f : x[i] / 8;
        if (!strcmp(c->name, "special"))
            special_rows(x);
        printf("case %s|%s %llu %llu %lld %lld\n", c->name,
               c->dtype == BORA_DTYPE_F32 ? "f32" : "f64", (unsigned long long)c->seed,
               (unsigned long long)c->stream, (long long)c->step, (long long)c->first);
        printf("axes");
        for (int i = 0; i < c->ndim; i++) {
            printf(" %s=%lld", c->axes[i].name, (long long)c->axes[i].size);
            if (!strcmp(c->axes[i].name, c->vocab))
                rows /= c->axes[i].size;
        }
        printf("\nvocab %s\nlogits", c->vocab);
        for (int64_t i = 0; i < n; i++)
            printf(" %a", x[i]);
        int32_t *t = malloc((size_t)rows * sizeof *t);
        char err[1024];
        if (draw(c, x, 2, 0, t, err, sizeof err) != BORA_OK) {
            fprintf(stderr, "%s: %s\n", c->name, err);
            exit(1);
        }
        printf("\ntokens");
        for (int64_t i = 0; i < rows; i++)
            printf(" %d", t[i]);
        printf("\n");
        free(t);
        free(x);
    }
}

/* ---- distribution --------------------------------------------------------------------------- */

/* R = 10^5 rows of the same 8 logits: the frequencies against softmax(logits) computed here in
 * double. Over 7 degrees of freedom P(chi-square > 40) is 1.3e-6 for a sampler that draws from the
 * softmax, and the draws are fixed by the seed, so the check is stable; a probability of 0.4 off
 * by 0.013 (8 standard deviations of its count) takes chi-square past 40 on its own. */
static void check_distribution(int dtype)
{
    enum { R = 100000, V = 8 };
    static const double l[V] = {0.0, 1.0, -1.0, 2.0, 0.5, -3.0, 1.5, -0.5};
    scase c = {"distribution", dtype, 2, {{"position", R}, {"vocab", V}}, "vocab", 2024, 6, 5, 0};
    double *x = malloc(sizeof(double) * R * V);
    for (int r = 0; r < R; r++)
        for (int v = 0; v < V; v++)
            x[r * V + v] = l[v];
    int32_t *t = malloc(sizeof(int32_t) * R);
    char err[1024];
    CHECK(draw(&c, x, 2, 0, t, err, sizeof err) == BORA_OK);
    double count[V] = {0}, p[V], total = 0, chi2 = 0;
    int bad = 0;
    for (int r = 0; r < R; r++)
        if (t[r] >= 0 && t[r] < V)
            count[t[r]]++;
        else
            bad++;
    for (int v = 0; v < V; v++)
        total += exp(l[v]);
    for (int v = 0; v < V; v++) {
        p[v] = exp(l[v]) / total;
        chi2 += (count[v] - R * p[v]) * (count[v] - R * p[v]) / (R * p[v]);
    }
    CHECK(bad == 0);
    if (!(chi2 < 40.0)) {
        fprintf(stderr, "distribution (%s): chi-square %.2f over 7 degrees of freedom; counts",
                dtype == BORA_DTYPE_F32 ? "f32" : "f64", chi2);
        for (int v = 0; v < V; v++)
            fprintf(stderr, " %.0f (%.1f)", count[v], R * p[v]);
        fprintf(stderr, "\n");
        test_failures++;
    }
    free(t);
    free(x);
}

/* ---- determinism: threads and splits ------------------------------------------------------ */

static void check_splits(void)
{
    enum { B = 4, T = 6, V = 11 };
    scase whole = {"whole", BORA_DTYPE_F32, 3, {{"batch", B}, {"position", T}, {"vocab", V}},
                   "vocab", 31337,          1, 17,
                   0};
    double x[B * T * V];
    fill(x, B * T * V, 77, -2, 2, BORA_DTYPE_F32);
    int32_t t1[B * T], t2[B * T], halves[B * T];
    char err[1024];
    CHECK(draw(&whole, x, 1, 0, t1, err, sizeof err) == BORA_OK);
    CHECK(draw(&whole, x, 2, 0, t2, err, sizeof err) == BORA_OK);
    CHECK(!memcmp(t1, t2, sizeof t1));
    /* two micro-batches of 2 sequences: the second's first row is 2 · T */
    scase half = whole;
    half.axes[0].size = B / 2;
    CHECK(draw(&half, x, 2, 0, halves, err, sizeof err) == BORA_OK);
    half.first = (B / 2) * T;
    CHECK(draw(&half, x + (B / 2) * T * V, 2, 0, halves + (B / 2) * T, err, sizeof err) == BORA_OK);
    CHECK(!memcmp(t1, halves, sizeof t1));
    /* bf16 logits are widened to f32: the same tokens from the same values */
    double eighths[B * T * V];
    for (int i = 0; i < B * T * V; i++)
        eighths[i] = round(x[i] * 8) / 8;
    scase bf = whole;
    bf.dtype = BORA_DTYPE_BF16;
    int32_t tb[B * T];
    CHECK(draw(&whole, eighths, 2, 0, t2, err, sizeof err) == BORA_OK);
    CHECK(draw(&bf, eighths, 2, 0, tb, err, sizeof err) == BORA_OK);
    CHECK(!memcmp(t2, tb, sizeof tb));
    /* and the counter matters: another step draws other tokens */
    whole.step++;
    CHECK(draw(&whole, x, 2, 0, t2, err, sizeof err) == BORA_OK);
    CHECK(memcmp(t1, t2, sizeof t1) != 0);
}

/* ---- non-finite rows ---------------------------------------------------------------------- */

static void check_nonfinite(void)
{
    scase c = {"special", BORA_DTYPE_F64, 2, {{"position", 8}, {"vocab", 6}}, "vocab", 99, 5, 3, 0};
    double x[48];
    fill(x, 48, 5, -1, 1, BORA_DTYPE_F64);
    int32_t clean[8], t[8];
    char err[1024];
    CHECK(draw(&c, x, 2, 0, clean, err, sizeof err) == BORA_OK);
    special_rows(x);
    CHECK(draw(&c, x, 2, 0, t, err, sizeof err) == BORA_OK);
    CHECK(t[0] == -1 && t[1] == -1 && t[2] == -1 && t[3] == -1); /* +inf, nan, -inf, all -inf */
    CHECK(t[4] == 3);     /* the only weight that does not underflow */
    CHECK(t[5] % 2 == 1); /* only the odd ones have mass */
    CHECK(t[6] == clean[6] && t[7] == clean[7]);
}

/* ---- misuse ------------------------------------------------------------------------------- */

static void check_misuse(void)
{
    rig r;
    open_rig(&r, 1);
    g_graph *g = g_graph_new(r.store, BORA_MODE_EVAL);
    bora_graph *gp = &g->pub;
    bora_axis ax[2] = {{"position", 3}, {"vocab", 4}};
    bora_tensor *x = bora_input(gp, "x", BORA_DTYPE_F32, 2, ax);
    bora_tensor *c64 = bora_input(gp, "c64", BORA_DTYPE_I64, 1, &(bora_axis){"ctr", 2});
    bora_tensor *c32 = bora_input(gp, "c32", BORA_DTYPE_I32, 1, &(bora_axis){"ctr", 2});
    bora_tensor *c3 = bora_input(gp, "c3", BORA_DTYPE_I64, 1, &(bora_axis){"ctr3", 3});
    bora_tensor *ids = bora_input(gp, "ids", BORA_DTYPE_I32, 2, ax);
    const struct {
        bora_tensor *x, *counter;
        const char *axis;
        uint64_t stream;
        const char *error;
    } bad[] = {
        {x, c64, "embed", 0, "sample: logits 'x' (position=3, vocab=4) have no axis 'embed'"},
        {x, c32, "vocab", 0, "must be a 1-d i64 tensor of 2 (step, first row)"},
        {x, c3, "vocab", 0, "sample: counter 'c3' (ctr3=3) must be a 1-d i64 tensor of 2"},
        {ids, c64, "vocab", 0,
         "sample: logits 'ids' (position=3, vocab=4) must be of a float dtype"},
        {x, c64, "vocab", 1ull << 32, "stream 4294967296 does not fit Philox's 32-bit"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        g->status = BORA_OK;
        g->error[0] = 0;
        CHECK(gp->api->sample(gp, bad[i].x, bad[i].axis, bad[i].counter, 1, bad[i].stream) == NULL);
        CHECK_CONTAINS(g->error, bad[i].error);
    }
    g_graph_free(g);
    rig_close(&r);

    /* a backend built for ABI 1.10 is never asked for the op: the build fails naming it */
    scase c = {"old", BORA_DTYPE_F32, 2, {{"position", 3}, {"vocab", 4}}, "vocab", 1, 1, 0, 0};
    double xv[12] = {0};
    int32_t t[3];
    char err[1024];
    CHECK(draw(&c, xv, 1, 10, t, err, sizeof err) != BORA_OK);
    char want[160];
    snprintf(want, sizeof want, "backend '%s' was built for ABI 1.10", backend_name);
    CHECK_CONTAINS(err, want);
    CHECK_CONTAINS(err,
                   "which has no op 'sample' (ABI 1.11); rebuild the backend against this SDK");
    CHECK(draw(&c, xv, 1, 11, t, err, sizeof err) == BORA_OK);
    /* a counter out of range fails the run */
    c.step = -1;
    CHECK(draw(&c, xv, 1, 0, t, err, sizeof err) != BORA_OK);
    CHECK_CONTAINS(err, "sample: counter (step -1, first row 0) is outside");
    c.step = 1ll << 32;
    CHECK(draw(&c, xv, 1, 0, t, err, sizeof err) != BORA_OK);
    c.step = 0, c.first = -3;
    CHECK(draw(&c, xv, 1, 0, t, err, sizeof err) != BORA_OK);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_sample PLUGIN_DIR [--dump] [BACKEND]\n");
        return 2;
    }
    plugin_dir = argv[1];
    int want_dump = 0;
    for (int i = 2; i < argc; i++)
        if (!strcmp(argv[i], "--dump"))
            want_dump = 1;
        else
            backend_name = argv[i];
    if (strcmp(backend_name, "cpu") != 0) { /* a backend with no usable device here skips */
        rig r;
        bora_status st = rig_try_open_on(&r, plugin_dir, backend_name, 1, 1);
        if (st == BORA_ERR_UNSUPPORTED && strstr(bora_error_get(), "no usable GPU")) {
            printf("SKIP: backend '%s' cannot run here: %s\n", backend_name, bora_error_get());
            return 77;
        }
        if (st != BORA_OK) {
            fprintf(stderr, "test_sample: backend '%s' failed to start: %s\n", backend_name,
                    bora_error_get());
            return 1;
        }
        rig_close(&r);
    }
    if (want_dump) {
        dump();
        return 0;
    }
    check_distribution(BORA_DTYPE_F64);
    check_distribution(BORA_DTYPE_F32);
    check_splits();
    check_nonfinite();
    check_misuse();
    return test_summary("test_sample");
}
