/* tests/graph/test_ops.c — every op of the graph API on the CPU backend:
 *   forward, f32 and f64, against a naive double-precision reference written here
 *   (tolerances: f64 1e-10 relative, f32 2e-4 relative plus 1e-5 absolute);
 *   backward, through the f64 path, against central finite differences of the loss
 *   sum(out · w) for a fixed random w (h = 1e-6, tolerance 1e-6 relative plus 1e-8 absolute;
 *   the layout case, which casts through f32, h = 1e-3 and 1e-2; the long reductions, whose loss
 *   is near 1e5, h = 1e-3 and 1e-5);
 *   everything twice: on the backend as it is, and through a table without the fused kernels
 *   (layernorm, rms_norm, softmax, log-softmax, cross-entropy, attention, rope), so their
 *   decompositions into
 *   primitives are checked the same way;
 *   and, at the end, a check that every kernel op id ran in some gradient check, so an op
 *   added without a case fails here.
 * With a backend named (cuda), the cases run on it instead (the host reaches its memory only
 * by copies): a case needing an op it has no kernel for, and which the host cannot decompose,
 * is skipped only where expected_skips lists the op for that backend, and fails otherwise.
 * Exits 77 (skipped) when the backend reports no usable device here (no GPU); any other
 * failure to create it fails. The CPU backend's own rules are test_op_rules.c's.
 *
 * usage: test_ops PLUGIN_DIR [BACKEND] */
#include "../test.h"
#include "rig.h"

#include <math.h>

static const char *plugin_dir;
static const char *backend_name = "cpu";
static int n_skipped; /* cases the named backend has no kernel for */
static uint64_t ops_seen[BORA_OP_COUNT_];
static int decomposed; /* run without the fused kernels */
static bora_kernel_fn (*backend_kernel)(bora_backend *, uint32_t, const int32_t *, uint32_t);
static bora_backend_ops unfused_ops;

static bora_kernel_fn without_fused(bora_backend *b, uint32_t op, const int32_t *dt, uint32_t n)
{
    switch (op) {
    case BORA_OP_LAYERNORM:
    case BORA_OP_LAYERNORM_GRAD:
    case BORA_OP_RMS_NORM:
    case BORA_OP_RMS_NORM_GRAD:
    case BORA_OP_SOFTMAX:
    case BORA_OP_LOG_SOFTMAX:
    case BORA_OP_XENT:
    case BORA_OP_XENT_GRAD:
    case BORA_OP_XENT_FUSED:
    case BORA_OP_ATTENTION:
    case BORA_OP_ATTENTION_GRAD:
    case BORA_OP_ROPE: return NULL;
    default: return backend_kernel(b, op, dt, n);
    }
}

/* The test's rig: the backend under test, seen without its fused kernels when decomposed is
 * set. */
static void open_rig(rig *r, uint64_t seed)
{
    if (rig_try_open_on(r, plugin_dir, backend_name, 2, seed) != BORA_OK) {
        fprintf(stderr, "rig: %s\n", bora_error_get());
        exit(1);
    }
    if (decomposed) {
        unfused_ops = *r->ops;
        backend_kernel = r->ops->kernel;
        unfused_ops.kernel = without_fused;
        r->store->ops = &unfused_ops;
    }
}

/* ---- helpers over the public API ---------------------------------------------------------- */

#define AX(n, s) ((bora_axis){(n), (s)})

static bora_tensor *P(bora_graph *g, const char *name, int dtype, int n, const bora_axis *axes)
{
    return bora_param(g, name, dtype, n, axes, bora_init_normal(1.0), 0);
}

static int64_t numel_axes(int n, const bora_axis *axes)
{
    int64_t k = 1;
    for (int i = 0; i < n; i++)
        k *= axes[i].size;
    return k;
}

/* A parameter's values as doubles (the f64 store), copied from the backend. */
static double *vals(rig *r, const char *name)
{
    long i = g_store_find(r->store, name);
    if (i < 0)
        return NULL;
    const g_slot *s = &r->store->slots[i];
    size_t n = s->nbytes / bora_dtype_size(s->dtype);
    double *out = malloc(n * sizeof *out);
    void *raw = malloc(s->nbytes);
    CHECK(rig_copy(r, 0, name, 0, raw, s->nbytes, 1) == BORA_OK);
    for (size_t k = 0; k < n; k++)
        out[k] = s->dtype == BORA_DTYPE_F64 ? ((double *)raw)[k] : ((float *)raw)[k];
    free(raw);
    return out;
}

/* The ops a backend other than the CPU's is known to lack, with no decomposition the host could
 * run instead: a case needing one is skipped there. A case that fails for want of any other
 * kernel fails the test, so a kernel that goes missing does not pass unseen. */
static const struct {
    const char *backend, *op; /* op as the build's error names it: g_op_name() */
} expected_skips[] = {
    {NULL, NULL}, /* none today: cuda has every op the host cannot decompose */
};

/* A build that failed for want of a kernel on a backend other than the CPU's: listed and
 * skipped where expected_skips names the op for it (1), else left to fail (0). */
static int skipped_here(const char *what, int v, const char *error)
{
    const char *at = strstr(error, "has no kernel for '");
    if (!strcmp(backend_name, "cpu") || !at)
        return 0;
    at += strlen("has no kernel for '");
    for (size_t i = 0; i < sizeof expected_skips / sizeof expected_skips[0]; i++) {
        if (!expected_skips[i].backend)
            continue;
        size_t n = strlen(expected_skips[i].op);
        if (!strcmp(expected_skips[i].backend, backend_name) &&
            !strncmp(at, expected_skips[i].op, n) && at[n] == '\'') {
            printf("skip: %s/%d%s: %s\n", what, v, decomposed ? " (decomposed)" : "", error);
            n_skipped++;
            return 1;
        }
    }
    fprintf(stderr, "%s/%d%s: a kernel '%s' lacks, not in expected_skips: %s\n", what, v,
            decomposed ? " (decomposed)" : "", backend_name, error);
    return 0;
}

/* ---- the cases ---------------------------------------------------------------------------- */

/* Integer inputs some cases use. */
static const int32_t ids6[6] = {3, 0, 5, 3, 1, 2};        /* (batch=2, position=3) */
static const int32_t targets6[6] = {4, 0, -100, 2, 1, 3}; /* one ignored position */
static const int32_t seg8[8] = {0, 0, 1, 1, 0, 1, 1, 1};  /* (batch=2, position=4) */

typedef struct ocase ocase;
struct ocase {
    const char *name;
    bora_tensor *(*build)(bora_graph *g, int dtype, int variant);
    /* reference output (row-major in the output's axis order) from the f64 parameters */
    void (*ref)(rig *r, int variant, double *out);
    int variants;
    double grad_tol; /* 0: the default */
};

static double un(int op, double x)
{
    switch (op) {
    case BORA_OP_NEG: return -x;
    case BORA_OP_EXP: return exp(x);
    case BORA_OP_LOG: return log(x);
    case BORA_OP_SQRT: return sqrt(x);
    case BORA_OP_RSQRT: return 1 / sqrt(x);
    case BORA_OP_TANH: return tanh(x);
    case BORA_OP_SIGMOID: return 1 / (1 + exp(-x));
    case BORA_OP_RELU: return x > 0 ? x : 0;
    case BORA_OP_SILU: return x / (1 + exp(-x));
    case BORA_OP_GELU_TANH:
        return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case BORA_OP_GELU_EXACT: return 0.5 * x * (1 + erf(x / sqrt(2)));
    case BORA_OP_SIN: return sin(x);
    case BORA_OP_COS: return cos(x);
    case BORA_OP_ABS: return fabs(x);
    case BORA_OP_SIGN: return x > 0 ? 1 : x < 0 ? -1 : x;
    default: return NAN;
    }
}

/* unary: variant picks the op; log/sqrt/rsqrt see exp(a) > 0. */
static const int unary_ops[] = {BORA_OP_NEG,   BORA_OP_EXP,       BORA_OP_LOG,        BORA_OP_SQRT,
                                BORA_OP_RSQRT, BORA_OP_TANH,      BORA_OP_SIGMOID,    BORA_OP_RELU,
                                BORA_OP_SILU,  BORA_OP_GELU_TANH, BORA_OP_GELU_EXACT, BORA_OP_SIN,
                                BORA_OP_COS,   BORA_OP_ABS,       BORA_OP_SIGN};
static int positive_only(int op)
{
    return op == BORA_OP_LOG || op == BORA_OP_SQRT || op == BORA_OP_RSQRT;
}
static bora_tensor *b_unary(bora_graph *g, int dt, int v)
{
    bora_axis ax[2] = {AX("x", 3), AX("y", 4)};
    bora_tensor *a = P(g, "a", dt, 2, ax);
    int op = unary_ops[v];
    if (positive_only(op))
        a = bora_unary(g, BORA_OP_EXP, a);
    return bora_unary(g, op, a);
}
static void r_unary(rig *r, int v, double *out)
{
    double *a = vals(r, "a");
    int op = unary_ops[v];
    for (int i = 0; i < 12; i++)
        out[i] = un(op, positive_only(op) ? exp(a[i]) : a[i]);
    free(a);
}

/* ABI 1.9's binary ops, masks, where, clamp, constants and ramps over a (x, y) and b (y), b
 * broadcast by name; comparisons are checked as mask · a, so a gradient passes through. */
static bora_tensor *b_elem(bora_graph *g, int dt, int v)
{
    const bora_graph_api *A = g->api;
    bora_axis ax[2] = {AX("x", 3), AX("y", 4)};
    bora_tensor *a = P(g, "a", dt, 2, ax), *b = P(g, "b", dt, 1, ax + 1);
    switch (v) {
    case 0: return bora_minimum(g, a, b);
    case 1: return bora_maximum(g, b, a); /* the broadcast operand first */
    case 2: return bora_mul(g, bora_less(g, a, b), a);
    case 3: return bora_mul(g, bora_greater_equal(g, a, b), a); /* less_equal (b, a) */
    case 4: return bora_mul(g, bora_equal(g, a, bora_maximum(g, a, b)), a);
    case 5: return bora_mul(g, bora_not_equal(g, a, bora_maximum(g, a, b)), a);
    case 6: return bora_where(g, bora_less(g, a, b), a, bora_unary(g, BORA_OP_EXP, b));
    case 7: /* a (y) mask, a 0-d b */
        return bora_where(g, bora_greater(g, b, bora_scalar_like(g, b, 0)), a,
                          A->full(g, dt, 0, NULL, 0.25));
    case 8: return bora_clamp(g, a, -0.5, 0.5);
    case 9: return bora_mul(g, a, A->iota(g, AX("y", 4), dt, 0.5, -0.25));
    default: return bora_add(g, a, A->full(g, dt, 2, ax, 2.0));
    }
}
static void r_elem(rig *r, int v, double *out)
{
    double *a = vals(r, "a"), *b = vals(r, "b");
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) {
            double x = a[i * 4 + j], y = b[j], m = fmax(x, y), o;
            switch (v) {
            case 0: o = fmin(x, y); break;
            case 1: o = m; break;
            case 2: o = x < y ? x : 0; break;
            case 3: o = x >= y ? x : 0; break;
            case 4: o = x == m ? x : 0; break;
            case 5: o = x != m ? x : 0; break;
            case 6: o = x < y ? x : exp(y); break;
            case 7: o = y > 0 ? x : 0.25; break;
            case 8: o = fmin(fmax(x, -0.5), 0.5); break;
            case 9: o = x * (0.5 - 0.25 * j); break;
            default: o = x + 2;
            }
            out[i * 4 + j] = o;
        }
    free(a);
    free(b);
}

/* binary with broadcasting by name: a (x, y) op b (y); div divides by exp(b). */
static const int binary_ops[] = {BORA_OP_ADD, BORA_OP_SUB, BORA_OP_MUL, BORA_OP_DIV};
static bora_tensor *b_binary(bora_graph *g, int dt, int v)
{
    bora_axis ax[2] = {AX("x", 3), AX("y", 4)};
    bora_tensor *a = P(g, "a", dt, 2, ax), *b = P(g, "b", dt, 1, ax + 1);
    if (binary_ops[v] == BORA_OP_DIV)
        b = bora_unary(g, BORA_OP_EXP, b);
    /* b op a too, so the broadcast operand is on both sides */
    return v % 2 ? g->api->binary(g, binary_ops[v], b, a) : g->api->binary(g, binary_ops[v], a, b);
}
static void r_binary(rig *r, int v, double *out)
{
    double *a = vals(r, "a"), *b = vals(r, "b");
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) {
            double x = a[i * 4 + j], y = binary_ops[v] == BORA_OP_DIV ? exp(b[j]) : b[j];
            if (v % 2) {
                double t = x;
                x = y, y = t;
            }
            out[i * 4 + j] = v == 0 ? x + y : v == 1 ? x - y : v == 2 ? x * y : x / y;
        }
    free(a);
    free(b);
}

/* scale, sum over y, mean over x, max over y (the output order is the input's remaining axes) */
static bora_tensor *b_reduce(bora_graph *g, int dt, int v)
{
    bora_axis ax[3] = {AX("x", 3), AX("y", 4), AX("z", 2)};
    bora_tensor *a = P(g, "a", dt, 3, ax);
    const char *y[] = {"y"}, *x[] = {"x"}, *yz[] = {"y", "z"};
    switch (v) {
    case 0: return g->api->scale(g, a, -1.75);
    case 1: return g->api->reduce(g, BORA_OP_SUM, a, 1, y);
    case 2: return g->api->reduce(g, 0, a, 1, x);
    case 3: return g->api->reduce(g, BORA_OP_MAX, a, 1, y);
    default: /* Σ a·a: the planner makes it one SUM_SQUARES kernel in f32 */
        return g->api->reduce(g, BORA_OP_SUM, bora_mul(g, a, a), 2, yz);
    }
}
static void r_reduce(rig *r, int v, double *out)
{
    double *a = vals(r, "a");
#define A3(i, j, k) a[((i)*4 + (j)) * 2 + (k)]
    if (v == 0)
        for (int i = 0; i < 24; i++)
            out[i] = -1.75 * a[i];
    else if (v == 4)
        for (int i = 0; i < 3; i++) {
            out[i] = 0;
            for (int j = 0; j < 8; j++)
                out[i] += a[i * 8 + j] * a[i * 8 + j];
        }
    else if (v == 1 || v == 3)
        for (int i = 0; i < 3; i++)
            for (int k = 0; k < 2; k++) {
                double acc = v == 1 ? 0 : -INFINITY;
                for (int j = 0; j < 4; j++)
                    acc = v == 1 ? acc + A3(i, j, k) : fmax(acc, A3(i, j, k));
                out[i * 2 + k] = acc;
            }
    else
        for (int j = 0; j < 4; j++)
            for (int k = 0; k < 2; k++)
                out[j * 2 + k] = (A3(0, j, k) + A3(1, j, k) + A3(2, j, k)) / 3;
#undef A3
    free(a);
}

/* Reductions long or many enough that a GPU backend splits them otherwise than the small cases
 * (a thread per output, runs then partials): Σ and max over 140,000 elements, Σ·Σ of squares
 * (a gradient norm), and Σ over a short axis for 20,000 outputs. */
#define BIG_N 140000
#define WIDE_N 20000
static bora_tensor *b_reduce_big(bora_graph *g, int dt, int v)
{
    bora_axis n[1] = {AX("n", BIG_N)}, xy[2] = {AX("x", 5), AX("y", WIDE_N)};
    const char *all[] = {"n"}, *x[] = {"x"};
    if (v == 3)
        return g->api->reduce(g, BORA_OP_SUM, P(g, "a", dt, 2, xy), 1, x);
    bora_tensor *a = P(g, "a", dt, 1, n);
    if (v == 2)
        a = bora_mul(g, a, a);
    return g->api->reduce(g, v == 1 ? BORA_OP_MAX : BORA_OP_SUM, a, 1, all);
}
static void r_reduce_big(rig *r, int v, double *out)
{
    double *a = vals(r, "a");
    if (v == 3) {
        for (int j = 0; j < WIDE_N; j++) {
            out[j] = 0;
            for (int i = 0; i < 5; i++)
                out[j] += a[i * WIDE_N + j];
        }
    } else {
        double acc = v == 1 ? -INFINITY : 0;
        for (int i = 0; i < BIG_N; i++)
            acc = v == 1 ? fmax(acc, a[i]) : acc + (v == 2 ? a[i] * a[i] : a[i]);
        out[0] = acc;
    }
    free(a);
}

/* dot: a (batch, m, k) · b (k, n) and with a shared batch axis; then with bias and GELU. */
static bora_tensor *b_dot(bora_graph *g, int dt, int v)
{
    bora_axis aa[3] = {AX("batch", 2), AX("m", 3), AX("k", 4)};
    bora_axis ba[3] = {AX("batch", 2), AX("k", 4), AX("n", 5)};
    bora_tensor *a = P(g, "a", dt, 3, aa);
    bora_tensor *b = v == 1 ? P(g, "b", dt, 3, ba) : P(g, "b", dt, 2, ba + 1);
    const char *k[] = {"k"};
    if (v == 2) {
        bora_tensor *bias = P(g, "c", dt, 1, ba + 2);
        bora_dot_opts o = {sizeof o, BORA_OP_GELU_TANH, bias};
        return g->api->dot(g, a, b, 1, k, &o);
    }
    /* transposed operand: b given as (n, k) */
    if (v == 3) {
        const char *nk[] = {"n", "k"};
        return bora_dot(g, a, g->api->contiguous(g, g->api->permute(g, b, 2, nk)), 1, k);
    }
    return bora_dot(g, a, b, 1, k);
}
static void r_dot(rig *r, int v, double *out)
{
    double *a = vals(r, "a"), *b = vals(r, "b"), *c = v == 2 ? vals(r, "c") : NULL;
    for (int bi = 0; bi < 2; bi++)
        for (int m = 0; m < 3; m++)
            for (int n = 0; n < 5; n++) {
                double acc = 0;
                for (int k = 0; k < 4; k++)
                    acc +=
                        a[(bi * 3 + m) * 4 + k] * (v == 1 ? b[(bi * 4 + k) * 5 + n] : b[k * 5 + n]);
                if (c)
                    acc = un(BORA_OP_GELU_TANH, acc + c[n]);
                out[(bi * 3 + m) * 5 + n] = acc;
            }
    free(a);
    free(b);
    free(c);
}

/* layernorm over d, with x given as (d, r) so the normalised axis is not the last. */
static bora_tensor *b_layernorm(bora_graph *g, int dt, int v)
{
    (void)v;
    bora_axis ax[2] = {AX("d", 5), AX("r", 3)};
    bora_tensor *x = P(g, "a", dt, 2, ax), *w = P(g, "b", dt, 1, ax), *b = P(g, "c", dt, 1, ax);
    return g->api->layernorm(g, x, w, b, "d", 1e-5);
}
static void r_layernorm(rig *r, int v, double *out)
{
    (void)v;
    double *x = vals(r, "a"), *w = vals(r, "b"), *b = vals(r, "c");
    for (int j = 0; j < 3; j++) {
        double mean = 0, var = 0;
        for (int d = 0; d < 5; d++)
            mean += x[d * 3 + j] / 5;
        for (int d = 0; d < 5; d++)
            var += (x[d * 3 + j] - mean) * (x[d * 3 + j] - mean) / 5;
        for (int d = 0; d < 5; d++)
            out[d * 3 + j] = (x[d * 3 + j] - mean) / sqrt(var + 1e-5) * w[d] + b[d];
    }
    free(x);
    free(w);
    free(b);
}

/* rms_norm over d, with x given as (d, r) so the normalised axis is not the last: variant 0 with
 * a weight (Llama's), 1 without one, 2 with weight_offset 1 (Gemma's x·(1 + w)); 3 (the case
 * "rms_norm, long rows", whose loss is larger) as 0 over 700 dims, a row longer than a GPU
 * block's threads. */
static int rms_dims(int v)
{
    return v == 3 ? 700 : 5;
}
static bora_tensor *b_rms_norm(bora_graph *g, int dt, int v)
{
    bora_axis ax[2] = {AX("d", rms_dims(v)), AX("r", 3)};
    bora_tensor *x = P(g, "a", dt, 2, ax), *w = v == 1 ? NULL : P(g, "b", dt, 1, ax);
    return g->api->rms_norm(g, x, w, "d", 1e-5, v == 2 ? 1.0 : 0.0);
}
static void r_rms_norm(rig *r, int v, double *out)
{
    double *x = vals(r, "a"), *w = v == 1 ? NULL : vals(r, "b");
    int D = rms_dims(v);
    for (int j = 0; j < 3; j++) {
        double ms = 0;
        for (int d = 0; d < D; d++)
            ms += x[d * 3 + j] * x[d * 3 + j] / D;
        for (int d = 0; d < D; d++)
            out[d * 3 + j] = x[d * 3 + j] / sqrt(ms + 1e-5) * (w ? w[d] + (v == 2) : 1);
    }
    free(x);
    free(w);
}
static bora_tensor *b_rms_norm_long(bora_graph *g, int dt, int v)
{
    (void)v;
    return b_rms_norm(g, dt, 3);
}
static void r_rms_norm_long(rig *r, int v, double *out)
{
    (void)v;
    r_rms_norm(r, 3, out);
}

/* softmax and log-softmax over y of a (y, x). */
static bora_tensor *b_softmax(bora_graph *g, int dt, int v)
{
    bora_axis ax[2] = {AX("y", 5), AX("x", 3)};
    bora_tensor *a = P(g, "a", dt, 2, ax);
    return v ? g->api->log_softmax(g, a, "y") : g->api->softmax(g, a, "y");
}
static void r_softmax(rig *r, int v, double *out)
{
    double *a = vals(r, "a");
    for (int x = 0; x < 3; x++) {
        double m = -INFINITY, s = 0;
        for (int y = 0; y < 5; y++)
            m = fmax(m, a[y * 3 + x]);
        for (int y = 0; y < 5; y++)
            s += exp(a[y * 3 + x] - m);
        for (int y = 0; y < 5; y++)
            out[y * 3 + x] = v ? a[y * 3 + x] - m - log(s) : exp(a[y * 3 + x] - m) / s;
    }
    free(a);
}

/* cross-entropy: logits (vocab, batch, position), targets (batch, position), one ignored;
 * odd variants add a z-loss. Variants 0, 1 read the parameter itself (vocab strided: the loss
 * and its gradient run as two kernels); 2, 3 a dense (batch, position, vocab) copy of it, which
 * nothing else reads, so the loss and gradient run as one kernel writing over the copy; 4 the
 * same copy with the loss squared, whose upstream gradient needs the loss first (two kernels). */
static bora_tensor *b_xent(bora_graph *g, int dt, int v)
{
    bora_axis ax[3] = {AX("vocab", 5), AX("batch", 2), AX("position", 3)};
    bora_tensor *l = P(g, "a", dt, 3, ax);
    bora_tensor *t = bora_input(g, "targets", BORA_DTYPE_I32, 2, ax + 1);
    if (v >= 2) {
        const char *order[3] = {"batch", "position", "vocab"};
        l = g->api->contiguous(g, g->api->permute(g, l, 3, order));
    }
    bora_xent_opts o = {sizeof o, -100, v & 1 ? 0.01 : 0.0};
    bora_tensor *loss = g->api->cross_entropy(g, l, t, "vocab", &o);
    return v == 4 ? bora_mul(g, loss, loss) : loss;
}
static void r_xent(rig *r, int v, double *out)
{
    double *a = vals(r, "a"), total = 0;
    for (int p = 0; p < 6; p++) {
        if (targets6[p] < 0)
            continue;
        double m = -INFINITY, s = 0;
        for (int k = 0; k < 5; k++)
            m = fmax(m, a[k * 6 + p]);
        for (int k = 0; k < 5; k++)
            s += exp(a[k * 6 + p] - m);
        double lse = m + log(s);
        total += lse - a[targets6[p] * 6 + p] + (v & 1 ? 0.01 * lse * lse : 0);
    }
    out[0] = v == 4 ? total * total : total;
    free(a);
}

/* Long rows, past a GPU block's 256 threads, so a row kernel loops over its columns: 130 rows
 * of softmax over 300 columns (v0), log-softmax over 600 (v1), layernorm over 333 (v2), and
 * cross-entropy over a vocab of 520 with one target ignored (v3). For time, only with the fused
 * kernels (the small cases check the decompositions) and finite differences on the first 8
 * elements of each parameter. */
enum { LR_ROWS = 130 };
static const int64_t long_cols[4] = {300, 600, 333, 520};
static int32_t long_targets[LR_ROWS];

static bora_tensor *b_long_rows(bora_graph *g, int dt, int v)
{
    bora_axis ax[2] = {AX("row", LR_ROWS), AX("col", long_cols[v])};
    bora_tensor *x = P(g, "a", dt, 2, ax);
    if (v == 0 || v == 1)
        return v ? g->api->log_softmax(g, x, "col") : g->api->softmax(g, x, "col");
    if (v == 2)
        return g->api->layernorm(g, x, P(g, "b", dt, 1, ax + 1), P(g, "c", dt, 1, ax + 1), "col",
                                 1e-5);
    bora_tensor *t = bora_input(g, "long_targets", BORA_DTYPE_I32, 1, ax);
    bora_xent_opts o = {sizeof o, -100, 0.0};
    return g->api->cross_entropy(g, x, t, "col", &o);
}
static void r_long_rows(rig *r, int v, double *out)
{
    int64_t n = long_cols[v];
    double *x = vals(r, "a"), *w = v == 2 ? vals(r, "b") : NULL, *b = v == 2 ? vals(r, "c") : NULL;
    if (v == 3)
        out[0] = 0;
    for (int i = 0; i < LR_ROWS; i++) {
        const double *row = x + i * n;
        double m = -INFINITY, s = 0, mean = 0, var = 0;
        for (int64_t j = 0; j < n; j++) {
            m = fmax(m, row[j]);
            mean += row[j] / (double)n;
        }
        for (int64_t j = 0; j < n; j++) {
            s += exp(row[j] - m);
            var += (row[j] - mean) * (row[j] - mean) / (double)n;
        }
        if (v == 3 && long_targets[i] >= 0)
            out[0] += m + log(s) - row[long_targets[i]];
        for (int64_t j = 0; j < n && v < 3; j++)
            out[i * n + j] = v == 0   ? exp(row[j] - m) / s
                             : v == 1 ? row[j] - m - log(s)
                                      : (row[j] - mean) / sqrt(var + 1e-5) * w[j] + b[j];
    }
    free(x);
    free(w);
    free(b);
}

/* embedding: table (embed, vocab) — vocab not first — by ids (batch, position). */
static bora_tensor *b_embedding(bora_graph *g, int dt, int v)
{
    (void)v;
    bora_axis ax[2] = {AX("embed", 4), AX("vocab", 6)};
    bora_axis ia[2] = {AX("batch", 2), AX("position", 3)};
    bora_tensor *t = P(g, "a", dt, 2, ax);
    bora_tensor *ids = bora_input(g, "ids", BORA_DTYPE_I32, 2, ia);
    return g->api->embedding(g, t, ids, "vocab");
}
static void r_embedding(rig *r, int v, double *out)
{
    (void)v;
    double *t = vals(r, "a");
    for (int p = 0; p < 6; p++)
        for (int e = 0; e < 4; e++)
            out[p * 4 + e] = t[e * 6 + ids6[p]];
    free(t);
}

/* attention: q (batch, heads, position, head_dim), causal; variant 1 with segment ids;
 * variant 2 not causal. */
/* variant 3: decoding over a cache — 2 queries, 5 key slots of which a runtime extent says 4
 * are filled; the queries sit at positions 2 and 3. */
static bora_tensor *b_attention_decode(bora_graph *g, int dt)
{
    bora_axis qa[4] = {AX("batch", 2), AX("heads", 2), AX("position", 2), AX("head_dim", 3)};
    bora_axis ka[4] = {AX("batch", 2), AX("heads", 2), AX("key_position", 5), AX("head_dim", 3)};
    bora_tensor *q = P(g, "a", dt, 4, qa), *k = P(g, "b", dt, 4, ka), *vv = P(g, "c", dt, 4, ka);
    bora_attention_opts o = {
        .struct_size = sizeof o, .causal = 1, .key_length = g->api->extent(g, "klen", 5)};
    return g->api->attention(g, q, k, vv, &o);
}

static bora_tensor *b_attention(bora_graph *g, int dt, int v)
{
    if (v == 3)
        return b_attention_decode(g, dt);
    bora_axis qa[4] = {AX("batch", 2), AX("heads", 2), AX("position", 4), AX("head_dim", 3)};
    bora_axis ka[4] = {AX("batch", 2), AX("heads", 2), AX("key_position", 4), AX("head_dim", 3)};
    bora_tensor *q = P(g, "a", dt, 4, qa), *k = P(g, "b", dt, 4, ka), *vv = P(g, "c", dt, 4, ka);
    bora_attention_opts o = {.struct_size = sizeof o, .causal = v != 2};
    if (v == 1) {
        bora_axis sa[2] = {AX("batch", 2), AX("position", 4)};
        o.segment_ids = bora_input(g, "seg", BORA_DTYPE_I32, 2, sa);
    }
    return g->api->attention(g, q, k, vv, &o);
}
static void r_attention_decode(rig *r, double *out)
{
    double *q = vals(r, "a"), *k = vals(r, "b"), *vv = vals(r, "c");
    for (int b = 0; b < 2; b++)
        for (int h = 0; h < 2; h++)
            for (int t = 0; t < 2; t++) {
                double s[5], m = -INFINITY, z = 0;
                for (int j = 0; j < 5; j++) {
                    s[j] = -INFINITY;
                    if (j >= 4 || j > 2 + t)
                        continue;
                    double d = 0;
                    for (int e = 0; e < 3; e++)
                        d +=
                            q[(((b * 2 + h) * 2 + t) * 3) + e] * k[(((b * 2 + h) * 5 + j) * 3) + e];
                    s[j] = d / sqrt(3.0);
                    m = fmax(m, s[j]);
                }
                for (int j = 0; j < 5; j++)
                    z += s[j] == -INFINITY ? 0 : exp(s[j] - m);
                for (int e = 0; e < 3; e++) {
                    double acc = 0;
                    for (int j = 0; j < 5; j++)
                        if (s[j] != -INFINITY)
                            acc += exp(s[j] - m) / z * vv[(((b * 2 + h) * 5 + j) * 3) + e];
                    out[((b * 2 + h) * 2 + t) * 3 + e] = acc;
                }
            }
    free(q);
    free(k);
    free(vv);
}

static void r_attention(rig *r, int v, double *out)
{
    if (v == 3) {
        r_attention_decode(r, out);
        return;
    }
    double *q = vals(r, "a"), *k = vals(r, "b"), *vv = vals(r, "c");
#define I4(b, h, t, e) ((((b)*2 + (h)) * 4 + (t)) * 3 + (e))
    for (int b = 0; b < 2; b++)
        for (int h = 0; h < 2; h++)
            for (int t = 0; t < 4; t++) {
                double s[4], m = -INFINITY, z = 0;
                for (int j = 0; j < 4; j++) {
                    int ok = (v == 2 || j <= t) && (v != 1 || seg8[b * 4 + t] == seg8[b * 4 + j]);
                    s[j] = -INFINITY;
                    if (!ok)
                        continue;
                    double d = 0;
                    for (int e = 0; e < 3; e++)
                        d += q[I4(b, h, t, e)] * k[I4(b, h, j, e)];
                    s[j] = d / sqrt(3.0);
                    m = fmax(m, s[j]);
                }
                for (int j = 0; j < 4; j++)
                    z += s[j] == -INFINITY ? 0 : exp(s[j] - m);
                for (int e = 0; e < 3; e++) {
                    double acc = 0;
                    for (int j = 0; j < 4; j++)
                        acc += s[j] == -INFINITY ? 0 : exp(s[j] - m) / z * vv[I4(b, h, j, e)];
                    out[I4(b, h, t, e)] = acc;
                }
            }
#undef I4
    free(q);
    free(k);
    free(vv);
}

/* grouped-query attention and the sliding window: q (batch 2, heads 4, position, head_dim 3),
 * k and v (batch 2, kv_heads, key_position, head_dim 3); query head h reads kv head h / (4 /
 * kv_heads). Variant 0: 2 kv heads, causal, window 2; 1: 1 kv head, causal, segment ids, window
 * 3; 2: 2 kv heads, not causal, no window; 3: 2 kv heads, window 2, decoding 2 queries over 5
 * key slots of which the extent says 4 are filled; 4: 2 kv heads, not causal, window 2 (only
 * keys j > i - 2). Variants 5 to 9 soft-cap the scores (c·tanh(s / c) before the masks): 5: 4 kv
 * heads (no grouping), not causal, c = 0.7; 6: as 0, c = 1; 7: as 1, c = 0.5; 8: as 3 (decoding),
 * c = 0.8; 9: 2 kv heads, causal, no window, c = 50 (Gemma 2's cap, barely bending). */
typedef struct gqa_variant {
    int hkv, T, S, causal, seg, window, decode;
    double softcap;
} gqa_variant;
static const gqa_variant gqa_variants[10] = {
    {2, 4, 4, 1, 0, 2, 0, 0},   {1, 4, 4, 1, 1, 3, 0, 0},   {2, 4, 4, 0, 0, 0, 0, 0},
    {2, 2, 5, 1, 0, 2, 1, 0},   {2, 4, 4, 0, 0, 2, 0, 0},   {4, 4, 4, 0, 0, 0, 0, 0.7},
    {2, 4, 4, 1, 0, 2, 0, 1.0}, {1, 4, 4, 1, 1, 3, 0, 0.5}, {2, 2, 5, 1, 0, 2, 1, 0.8},
    {2, 4, 4, 1, 0, 0, 0, 50},
};

static bora_tensor *b_attention_gqa(bora_graph *g, int dt, int v)
{
    const gqa_variant *c = &gqa_variants[v];
    bora_axis qa[4] = {AX("batch", 2), AX("heads", 4), AX("position", c->T), AX("head_dim", 3)};
    bora_axis ka[4] = {AX("batch", 2), AX("kv_heads", c->hkv), AX("key_position", c->S),
                       AX("head_dim", 3)};
    bora_tensor *q = P(g, "a", dt, 4, qa), *k = P(g, "b", dt, 4, ka), *vv = P(g, "c", dt, 4, ka);
    bora_attention_opts o = {.struct_size = sizeof o,
                             .causal = c->causal,
                             .head_axis = "heads",
                             .kv_head_axis = "kv_heads",
                             .sliding_window = c->window,
                             .softcap = c->softcap};
    if (c->seg) {
        bora_axis sa[2] = {AX("batch", 2), AX("position", 4)};
        o.segment_ids = bora_input(g, "seg", BORA_DTYPE_I32, 2, sa);
    }
    if (c->decode)
        o.key_length = g->api->extent(g, "klen", c->S);
    return g->api->attention(g, q, k, vv, &o);
}

static void r_attention_gqa(rig *r, int v, double *out)
{
    const gqa_variant *c = &gqa_variants[v];
    double *q = vals(r, "a"), *k = vals(r, "b"), *vv = vals(r, "c");
    int T = c->T, S = c->S, L = c->decode ? 4 : S, G = 4 / c->hkv;
    for (int b = 0; b < 2; b++)
        for (int h = 0; h < 4; h++)
            for (int t = 0; t < T; t++) {
                int i = L - T + t, j0 = h / G; /* the query's position; its kv head */
                double s[8], m = -INFINITY, z = 0;
                for (int j = 0; j < S; j++) {
                    int ok = j < L && (!c->causal || j <= i) && (!c->window || j > i - c->window) &&
                             (!c->seg || seg8[b * 4 + t] == seg8[b * 4 + j]);
                    s[j] = -INFINITY;
                    if (!ok)
                        continue;
                    double d = 0;
                    for (int e = 0; e < 3; e++)
                        d += q[((b * 4 + h) * T + t) * 3 + e] *
                             k[((b * c->hkv + j0) * S + j) * 3 + e];
                    s[j] = d / sqrt(3.0);
                    if (c->softcap) /* Gemma 2: tanh(s / c)·c, then the mask */
                        s[j] = tanh(s[j] / c->softcap) * c->softcap;
                    m = fmax(m, s[j]);
                }
                for (int j = 0; j < S; j++)
                    z += s[j] == -INFINITY ? 0 : exp(s[j] - m);
                for (int e = 0; e < 3; e++) {
                    double acc = 0;
                    for (int j = 0; j < S; j++)
                        if (s[j] != -INFINITY)
                            acc += exp(s[j] - m) / z * vv[((b * c->hkv + j0) * S + j) * 3 + e];
                    out[((b * 4 + h) * T + t) * 3 + e] = acc;
                }
            }
    free(q);
    free(k);
    free(vv);
}

/* attention over shapes that fill no tile exactly (a GPU kernel's query and key tiles, its
 * head-dim lanes): q (batch, heads, head_dim, position), k and v (batch, kv_heads, head_dim,
 * key_position), the head dim outer so that the gradient check's first 40 elements of each are
 * dim 0 of 40 positions, across the kernels' blocks of positions (and the operands strided). 0: 4 heads over 2 kv heads, 45 positions, head_dim 80, causal, window 20, soft cap
 * 0.9, all at once; 1: 2 heads over 1, 37 queries over 45 key slots of which the extent klen2
 * says 20 are filled, head_dim 160, causal: the queries at positions t - 17 < 0 see no key
 * (output 0, no gradient); 2: batch 2, one head, 33 positions, head_dim 128, not causal;
 * cross-attention, not causal: 3: 70 queries over 33 keys (2 heads over 1 kv head), head_dim 16,
 * 4: 20 queries over 75 keys, head_dim 24. */
typedef struct tile_variant {
    int B, H, hkv, T, S, E, causal, window, klen;
    double softcap;
} tile_variant;
static const tile_variant tile_variants[5] = {
    {1, 4, 2, 45, 45, 80, 1, 20, 0, 0.9},
    {1, 2, 1, 37, 45, 160, 1, 0, 20, 0},
    {2, 1, 1, 33, 33, 128, 0, 0, 0, 0},
    {1, 2, 1, 70, 33, 16, 0, 0, 0, 0}, /* cross-attention: more queries than keys */
    {1, 1, 1, 20, 75, 24, 0, 0, 0, 0}, /* and fewer */
};
static bora_tensor *b_attention_tiles(bora_graph *g, int dt, int v)
{
    const tile_variant *c = &tile_variants[v];
    bora_axis qa[4] = {AX("batch", c->B), AX("heads", c->H), AX("head_dim", c->E),
                       AX("position", c->T)};
    bora_axis ka[4] = {AX("batch", c->B), AX("kv_heads", c->hkv), AX("head_dim", c->E),
                       AX("key_position", c->S)};
    bora_tensor *q = P(g, "a", dt, 4, qa), *k = P(g, "b", dt, 4, ka), *vv = P(g, "c", dt, 4, ka);
    bora_attention_opts o = {.struct_size = sizeof o,
                             .causal = c->causal,
                             .head_axis = "heads",
                             .kv_head_axis = "kv_heads",
                             .sliding_window = c->window,
                             .softcap = c->softcap};
    if (c->klen)
        o.key_length = g->api->extent(g, "klen2", c->S);
    return g->api->attention(g, q, k, vv, &o);
}
static void r_attention_tiles(rig *r, int v, double *out)
{
    const tile_variant *c = &tile_variants[v];
    double *q = vals(r, "a"), *k = vals(r, "b"), *vv = vals(r, "c");
    int T = c->T, S = c->S, E = c->E, L = c->klen ? c->klen : S, G = c->H / c->hkv;
    double *s = malloc(sizeof(double) * (size_t)S);
    for (int b = 0; b < c->B; b++)
        for (int h = 0; h < c->H; h++)
            for (int t = 0; t < T; t++) {
                int i = L - T + t, hk = h / G; /* the query's position; its kv head */
                const double *qh = q + (size_t)(b * c->H + h) * E * T; /* (E, T) */
                const double *kh = k + (size_t)(b * c->hkv + hk) * E * S;
                const double *vh = vv + (size_t)(b * c->hkv + hk) * E * S;
                double m = -INFINITY, z = 0;
                for (int j = 0; j < S; j++) {
                    s[j] = -INFINITY;
                    if (j >= L || (c->causal && j > i) || (c->window && j <= i - c->window))
                        continue;
                    double d = 0;
                    for (int e = 0; e < E; e++)
                        d += qh[e * T + t] * kh[e * S + j];
                    s[j] = d / sqrt((double)E);
                    if (c->softcap)
                        s[j] = tanh(s[j] / c->softcap) * c->softcap;
                    m = fmax(m, s[j]);
                }
                for (int j = 0; j < S; j++)
                    z += s[j] == -INFINITY ? 0 : exp(s[j] - m);
                for (int e = 0; e < E; e++) {
                    double acc = 0; /* no key visible (z = 0): 0 */
                    for (int j = 0; j < S; j++)
                        if (s[j] != -INFINITY)
                            acc += exp(s[j] - m) / z * vh[e * S + j];
                    out[((size_t)(b * c->H + h) * E + e) * T + t] = acc;
                }
            }
    free(s);
    free(q);
    free(k);
    free(vv);
}

/* rope over a (batch, position, heads, head_dim) parameter, the reference computed here in
 * double from theta^(-2i/D) (default; linear divides by the factor; dynamic NTK raises the base
 * to theta·(factor·L/orig - (factor-1))^(D/(D-2)) for the graph's L positions):
 *   0: rotate-half, every dim; 1: interleaved, 4 of 6 dims, offset 2;
 *   2: rotate-half, 4 of 8 dims, offset 1, x laid out (head_dim, position) (strided rows);
 *   3: one position at a runtime position (rpos = 3, at most 5), interleaved, linear ×2;
 *   4: dynamic NTK past its original length (orig 4, factor 2, 6 positions). */
typedef struct rope_case {
    int T, H, D, layout, kind;
    int64_t offset;
    int runtime;
} rope_case;
static const rope_case rope_cases[] = {
    {3, 8, 8, BORA_ROPE_ROTATE_HALF, BORA_ROPE_DEFAULT, 0, 0},
    {3, 6, 4, BORA_ROPE_INTERLEAVED, BORA_ROPE_DEFAULT, 2, 0},
    {3, 8, 4, BORA_ROPE_ROTATE_HALF, BORA_ROPE_DEFAULT, 1, 0},
    {1, 6, 6, BORA_ROPE_INTERLEAVED, BORA_ROPE_LINEAR, 0, 1},
    {6, 8, 8, BORA_ROPE_ROTATE_HALF, BORA_ROPE_DYNAMIC, 0, 0},
};
static bora_tensor *b_rope(bora_graph *g, int dt, int v)
{
    const rope_case *c = &rope_cases[v];
    bora_axis ax[4] = {AX("batch", 2), AX("position", c->T), AX("heads", 2), AX("head_dim", c->H)};
    if (v == 2) /* (batch, head_dim, heads, position) */
        ax[1] = AX("head_dim", c->H), ax[3] = AX("position", c->T);
    bora_tensor *x = P(g, "a", dt, 4, ax);
    bora_rope_spec s = bora_rope_spec_default();
    s.kind = c->kind;
    s.theta = 100;
    s.rotary_dims = c->D;
    s.factor = c->kind == BORA_ROPE_DEFAULT ? 1 : 2;
    s.original_max_position_embeddings = 4;
    bora_rope_opts o = {
        .struct_size = sizeof o, .layout = c->layout, .spec = &s, .offset = c->offset};
    if (c->runtime)
        o.position = g->api->extent(g, "rpos", 5);
    bora_tensor *y = g->api->rope(g, x, &o);
    if (v == 2) { /* back to (batch, position, heads, head_dim) for the reference */
        const char *order[4] = {"batch", "position", "heads", "head_dim"};
        y = g->api->permute(g, y, 4, order);
    }
    return y;
}
static void r_rope(rig *r, int v, double *out)
{
    const rope_case *c = &rope_cases[v];
    double *a = vals(r, "a"), base = 100;
    int T = c->T, H = c->H, D = c->D;
    if (c->kind == BORA_ROPE_DYNAMIC) /* L = offset + T positions in the graph's table */
        base = 100 * pow(2.0 * T / 4 - 1, (double)D / (D - 2));
    for (int b = 0; b < 2; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < 2; h++)
                for (int d = 0; d < H; d++) {
                    /* x[b][t][h][d], in the parameter's own layout */
                    int64_t xi =
                        v == 2 ? ((b * H + d) * 2 + h) * T + t : ((b * T + t) * 2 + h) * H + d;
                    double p = (double)(c->offset + t + (c->runtime ? 3 : 0)), y;
                    if (d >= D) {
                        y = a[xi];
                    } else {
                        int inter = c->layout == BORA_ROPE_INTERLEAVED;
                        int i = inter ? d / 2 : d % (D / 2);     /* frequency index */
                        int e = inter ? d ^ 1 : (d + D / 2) % D; /* the pair's other dim */
                        double sgn = inter ? (d & 1 ? 1 : -1) : (d < D / 2 ? -1 : 1);
                        double f = pow(base, -2.0 * i / D) / (c->kind == BORA_ROPE_LINEAR ? 2 : 1);
                        int64_t ei = xi + (int64_t)(e - d) * (v == 2 ? 2 * T : 1);
                        y = a[xi] * cos(p * f) + sgn * a[ei] * sin(p * f);
                    }
                    out[((b * T + t) * 2 + h) * H + d] = y;
                }
    free(a);
}

/* views and layout: slice, rename, split, merge, broadcast, permute, contiguous, concat, cast;
 * the gradients of several slices of one tensor. */
static bora_tensor *b_layout(bora_graph *g, int dt, int v)
{
    bora_axis ax[2] = {AX("x", 4), AX("y", 6)};
    bora_axis bx[2] = {AX("x", 2), AX("y", 6)};
    bora_tensor *a = P(g, "a", dt, 2, ax);
    const bora_graph_api *A = g->api;
    switch (v) {
    case 0: { /* slice y 1..5, split y into (p=2, q=2), rename x->w, merge (w, p) */
        bora_axis parts[2] = {AX("p", 2), AX("q", 2)};
        bora_tensor *t = A->split(g, A->slice(g, a, "y", 1, 4), "y", 2, parts);
        t = bora_rename(g, t, "x", "w");
        const char *wp[] = {"w", "p"};
        return A->contiguous(g, A->merge(g, t, 2, wp, "wp"));
    }
    case 1: { /* concat along x with b (x=2) */
        bora_tensor *b = P(g, "b", dt, 2, bx);
        bora_tensor *xs[2] = {a, b};
        return A->concat(g, "x", 2, xs);
    }
    case 2: /* broadcast over a new axis, then permute */
    {
        const char *order[] = {"y", "z", "x"};
        return A->contiguous(g, A->permute(g, A->broadcast(g, a, AX("z", 2)), 3, order));
    }
    case 4: { /* three slices tiling y: their gradients join into one concat */
        bora_tensor *s1 = A->slice(g, a, "y", 0, 2), *s2 = A->slice(g, a, "y", 2, 2);
        bora_tensor *s3 = A->slice(g, a, "y", 4, 2);
        return bora_add(g, bora_add(g, A->scale(g, A->unary(g, BORA_OP_TANH, s3), 3.0), s1),
                        A->scale(g, s2, 2.0));
    }
    case 5: { /* overlapping and separated slices: their gradients add */
        bora_tensor *s1 = A->slice(g, a, "y", 0, 2), *s2 = A->slice(g, a, "y", 1, 2);
        bora_tensor *s3 = A->slice(g, a, "y", 4, 2);
        return bora_add(g, bora_mul(g, s1, s2), s3);
    }
    default: /* cast to the other float type and back */
        return A->cast(
            g,
            A->unary(g, BORA_OP_TANH,
                     A->cast(g, a, dt == BORA_DTYPE_F64 ? BORA_DTYPE_F32 : BORA_DTYPE_F64)),
            dt);
    }
}
static void r_layout(rig *r, int v, double *out)
{
    double *a = vals(r, "a"), *b = v == 1 ? vals(r, "b") : NULL;
    if (v == 0) /* (wp = x*2 + p, q) = a[x, 1 + p*2 + q] */
        for (int x = 0; x < 4; x++)
            for (int p = 0; p < 2; p++)
                for (int q = 0; q < 2; q++)
                    out[(x * 2 + p) * 2 + q] = a[x * 6 + 1 + p * 2 + q];
    else if (v == 1)
        for (int i = 0; i < 36; i++)
            out[i] = i < 24 ? a[i] : b[i - 24];
    else if (v == 2)
        for (int y = 0; y < 6; y++)
            for (int z = 0; z < 2; z++)
                for (int x = 0; x < 4; x++)
                    out[(y * 2 + z) * 4 + x] = a[x * 6 + y];
    else if (v == 4)
        for (int x = 0; x < 4; x++)
            for (int j = 0; j < 2; j++)
                out[x * 2 + j] = 3 * tanh(a[x * 6 + 4 + j]) + a[x * 6 + j] + 2 * a[x * 6 + 2 + j];
    else if (v == 5)
        for (int x = 0; x < 4; x++)
            for (int j = 0; j < 2; j++)
                out[x * 2 + j] = a[x * 6 + j] * a[x * 6 + 1 + j] + a[x * 6 + 4 + j];
    else
        for (int i = 0; i < 24; i++)
            out[i] = tanh((double)(float)a[i]); /* the exact tanh of the f32 input */
    free(a);
    free(b);
}

static const ocase cases[] = {
    {"unary", b_unary, r_unary, 15, 0},
    {"binary", b_binary, r_binary, 4, 0},
    {"elementwise 1.9", b_elem, r_elem, 11, 0},
    {"scale/reduce", b_reduce, r_reduce, 5, 0},
    {"reduce, long and wide", b_reduce_big, r_reduce_big, 4, 1e-5}, /* a loss near 1e5 */
    {"dot", b_dot, r_dot, 4, 0},
    {"layernorm", b_layernorm, r_layernorm, 1, 0},
    {"rms_norm", b_rms_norm, r_rms_norm, 3, 0},
    {"rms_norm, long rows", b_rms_norm_long, r_rms_norm_long, 1, 1e-5},
    {"softmax", b_softmax, r_softmax, 2, 0},
    {"long rows", b_long_rows, r_long_rows, 4, 1e-5}, /* losses near 1e5 */
    {"cross_entropy", b_xent, r_xent, 5, 0},
    {"embedding", b_embedding, r_embedding, 1, 0},
    {"attention", b_attention, r_attention, 4, 0},
    {"attention gqa/window/softcap", b_attention_gqa, r_attention_gqa, 10, 0},
    {"attention tiles", b_attention_tiles, r_attention_tiles, 5, 1e-5}, /* losses near 1e2 */
    {"rope", b_rope, r_rope, 5, 0},
    {"layout", b_layout, r_layout, 6, 1e-2}, /* variant 3 passes through f32: looser */
};

/* ---- running ------------------------------------------------------------------------------ */

static void fill_int_inputs(g_graph *g)
{
    g_set_input(g, "targets", targets6, sizeof targets6);
    g_set_input(g, "ids", ids6, sizeof ids6);
    g_set_input(g, "seg", seg8, sizeof seg8);
    for (int i = 0; i < LR_ROWS; i++) /* spread over the vocab, one ignored */
        long_targets[i] = i == 7 ? -100 : (int32_t)((i * 7919) % 520);
    g_set_input(g, "long_targets", long_targets, sizeof long_targets);
    int32_t klen = 4, klen2 = 20;
    g_set_input(g, "klen", &klen, sizeof klen);
    g_set_input(g, "klen2", &klen2, sizeof klen2);
    int32_t rpos = 3;
    g_set_input(g, "rpos", &rpos, sizeof rpos);
}

static void check_forward(const ocase *c, int v, int dt)
{
    rig r;
    open_rig(&r, 7);
    g_graph *g = g_graph_new(r.store, BORA_MODE_EVAL);
    bora_tensor *out = c->build(&g->pub, dt, v);
    if (out && out->base != out)
        out = g->pub.api->contiguous(&g->pub, out);
    g->output = out;
    if (!out || g_finalize(g) || g_store_materialize(r.store)) {
        if (skipped_here(c->name, v, g->error))
            goto done;
        fprintf(stderr, "%s/%d%s: build failed: %s\n", c->name, v,
                decomposed ? " (decomposed)" : "", g->error);
        test_failures++;
        goto done;
    }
    fill_int_inputs(g);
    CHECK(g_run(g) == BORA_OK);
    /* made by the planner from MUL and SUM after autodiff, so it has no gradient of its own:
     * checked here, forward, in f32 (the CPU backend has it for f32 only) */
    ops_seen[BORA_OP_SUM_SQUARES] += g->op_runs[BORA_OP_SUM_SQUARES];
    if (c->build == b_attention && v == 3) { /* an extent past its maximum is refused */
        int32_t too_long = 6;
        CHECK(g_set_input(g, "klen", &too_long, sizeof too_long) == BORA_ERR_INVALID);
        CHECK_CONTAINS(bora_error_get(), "extent 'klen' is 6, outside 0..5");
    }
    int64_t n = g_numel(out);
    double *want = calloc((size_t)n, sizeof *want), *got = calloc((size_t)n, sizeof *got);
    void *raw = malloc((size_t)n * bora_dtype_size(dt));
    CHECK(g_read(g, out, raw, (size_t)n * bora_dtype_size(dt)) == BORA_OK);
    c->ref(&r, v, want);
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        got[i] = dt == BORA_DTYPE_F64 ? ((double *)raw)[i] : ((float *)raw)[i];
        double tol =
            dt == BORA_DTYPE_F64 ? 1e-10 * fmax(1, fabs(want[i])) : 2e-4 * fabs(want[i]) + 1e-5;
        if (c->build == b_layout && v == 3 && dt == BORA_DTYPE_F64)
            tol = 2.5e-7 * fabs(want[i]); /* tanh in f32: within 2 ulp, then rounded */
        if (!(fabs(got[i] - want[i]) <= tol)) {
            fprintf(stderr, "%s/%d %s%s: element %lld is %.10g, reference %.10g\n", c->name, v,
                    dt == BORA_DTYPE_F64 ? "f64" : "f32", decomposed ? " (decomposed)" : "",
                    (long long)i, got[i], want[i]);
            test_failures++;
            break;
        }
        worst = fmax(worst, fabs(got[i] - want[i]));
    }
    free(want);
    free(got);
    free(raw);
done:
    g_graph_free(g);
    rig_close(&r);
}

/* loss = Σ out · w, with w a fixed pseudo-random input. */
static void check_gradient(const ocase *c, int v)
{
    rig r;
    open_rig(&r, 11);
    g_graph *g = g_graph_new(r.store, BORA_MODE_TRAIN);
    bora_graph *gp = &g->pub;
    bora_tensor *out = c->build(gp, BORA_DTYPE_F64, v), *loss = NULL;
    double *w = NULL;
    if (out) {
        bora_axis ax[BORA_MAX_DIMS];
        const char *names[BORA_MAX_DIMS];
        for (int i = 0; i < out->ndim; i++)
            ax[i] = gp->api->axis(out, i), names[i] = ax[i].name;
        bora_tensor *wt = bora_input(gp, "__w", BORA_DTYPE_F64, out->ndim, ax);
        bora_tensor *prod = bora_mul(gp, out, wt);
        loss = out->ndim ? gp->api->reduce(gp, BORA_OP_SUM, prod, out->ndim, names) : prod;
        if (loss && loss->base != loss)
            loss = gp->api->contiguous(gp, loss);
        int64_t n = numel_axes(out->ndim, ax);
        w = malloc(sizeof(double) * (size_t)n);
        for (int64_t i = 0; i < n; i++)
            w[i] = sin(1.0 + (double)i * 0.7) + 0.3;
    }
    g->output = loss;
    if (!loss || g_autodiff(g, loss) || g_finalize(g) || g_store_materialize(r.store)) {
        if (skipped_here(c->name, v, g->error))
            goto done;
        fprintf(stderr, "%s/%d: gradient graph failed: %s\n", c->name, v, g->error);
        test_failures++;
        goto done;
    }
    fill_int_inputs(g);
    g_set_input(g, "__w", w, sizeof(double) * (size_t)g_numel(out));
    CHECK(g_run(g) == BORA_OK);
    for (int k = 0; k < BORA_OP_COUNT_; k++)
        ops_seen[k] += g->op_runs[k];
    /* Analytic gradients now: every later run adds into them again. */
    double *grads = malloc(r.store->param_bytes);
    CHECK(r.ops->copy_out(r.be, grads, r.store->grads, 0, r.store->param_bytes) == BORA_OK);
    for (size_t s = 0; s < r.store->n_slots; s++) {
        const g_slot *slot = &r.store->slots[s];
        size_t n = slot->nbytes / sizeof(double);
        double *grad = grads + slot->offset / sizeof(double), *p = vals(&r, slot->name);
        for (size_t e = 0; e < n && e < (c->build == b_long_rows ? 8u : 40u); e++) {
            double keep = p[e], h = c->grad_tol ? 1e-3 : 1e-6, lp, lm, set;
            size_t at = e * sizeof(double);
            set = keep + h;
            rig_copy(&r, 0, slot->name, at, &set, sizeof set, 0);
            g_run(g);
            g_read(g, loss, &lp, sizeof lp);
            set = keep - h;
            rig_copy(&r, 0, slot->name, at, &set, sizeof set, 0);
            g_run(g);
            g_read(g, loss, &lm, sizeof lm);
            rig_copy(&r, 0, slot->name, at, &keep, sizeof keep, 0);
            double fd = (lp - lm) / (2 * h);
            double tol = (c->grad_tol ? c->grad_tol : 1e-6) * fmax(fabs(fd), fabs(grad[e])) + 1e-8;
            if (!(fabs(fd - grad[e]) <= tol)) {
                fprintf(stderr,
                        "%s/%d: d loss / d %s[%zu]: autodiff %.12g, finite differences "
                        "%.12g\n",
                        c->name, v, slot->name, e, grad[e], fd);
                test_failures++;
                break;
            }
        }
        free(p);
    }
    free(grads);
done:
    free(w);
    g_graph_free(g);
    rig_close(&r);
}

/* Decoding over a grouped-query cache with a window, one position at a time (T = 1, the key
 * length the filled slots), gives the full causal forward's rows: f32, fused kernel and
 * decomposition, within 1e-6 relative plus 1e-7 (the products' blocks differ). */
enum { DB = 2, DH = 4, DHK = 2, DT = 7, DE = 5, DW = 3 };

static bora_tensor *decode_graph(bora_graph *gp, int T, int decode)
{
    bora_axis qa[4] = {AX("batch", DB), AX("heads", DH), AX("position", T), AX("head_dim", DE)};
    bora_axis ka[4] = {AX("batch", DB), AX("kv_heads", DHK), AX("key_position", DT),
                       AX("head_dim", DE)};
    bora_attention_opts o = {.struct_size = sizeof o,
                             .causal = 1,
                             .head_axis = "heads",
                             .kv_head_axis = "kv_heads",
                             .sliding_window = DW};
    if (decode)
        o.key_length = gp->api->extent(gp, "klen", DT);
    bora_tensor *q = bora_input(gp, "q", BORA_DTYPE_F32, 4, qa);
    bora_tensor *k = bora_input(gp, "k", BORA_DTYPE_F32, 4, ka);
    bora_tensor *v = bora_input(gp, "v", BORA_DTYPE_F32, 4, ka);
    bora_tensor *out = gp->api->attention(gp, q, k, v, &o);
    return out ? gp->api->contiguous(gp, out) : NULL;
}

static void check_gqa_decode(void)
{
    enum { NQ = DB * DH * DT * DE, NK = DB * DHK * DT * DE };
    static float q[NQ], k[NK], v[NK], full[NQ], q1[DB * DH * DE], o1[DB * DH * DE];
    for (int i = 0; i < NQ; i++)
        q[i] = (float)sin(0.37 * i + 0.1);
    for (int i = 0; i < NK; i++)
        k[i] = (float)cos(0.53 * i), v[i] = (float)sin(0.71 * i + 1.3);
    rig r;
    open_rig(&r, 5);
    g_graph *gf = g_graph_new(r.store, BORA_MODE_EVAL), *gd = g_graph_new(r.store, BORA_MODE_EVAL);
    gf->output = decode_graph(&gf->pub, DT, 0);
    gd->output = decode_graph(&gd->pub, 1, 1);
    if (!gf->output || !gd->output || g_finalize(gf) || g_finalize(gd) ||
        g_store_materialize(r.store)) {
        fprintf(stderr, "gqa decode: build failed: %s %s\n", gf->error, gd->error);
        test_failures++;
        goto done;
    }
    CHECK(g_set_input(gf, "q", q, sizeof q) == BORA_OK);
    CHECK(g_set_input(gf, "k", k, sizeof k) == BORA_OK);
    CHECK(g_set_input(gf, "v", v, sizeof v) == BORA_OK);
    CHECK(g_run(gf) == BORA_OK);
    CHECK(g_read(gf, gf->output, full, sizeof full) == BORA_OK);
    CHECK(g_set_input(gd, "k", k, sizeof k) == BORA_OK);
    CHECK(g_set_input(gd, "v", v, sizeof v) == BORA_OK);
    for (int32_t L = 1; L <= DT; L++) { /* the query at position L - 1 over L filled slots */
        for (int bh = 0; bh < DB * DH; bh++)
            for (int e = 0; e < DE; e++)
                q1[bh * DE + e] = q[(bh * DT + L - 1) * DE + e];
        CHECK(g_set_input(gd, "q", q1, sizeof q1) == BORA_OK);
        CHECK(g_set_input(gd, "klen", &L, sizeof L) == BORA_OK);
        CHECK(g_run(gd) == BORA_OK);
        CHECK(g_read(gd, gd->output, o1, sizeof o1) == BORA_OK);
        for (int bh = 0; bh < DB * DH; bh++)
            for (int e = 0; e < DE; e++) {
                float want = full[(bh * DT + L - 1) * DE + e], got = o1[bh * DE + e];
                if (!(fabsf(got - want) <= 1e-6f * fabsf(want) + 1e-7f)) {
                    fprintf(stderr, "gqa decode%s: position %d, row %d: %.9g, full forward %.9g\n",
                            decomposed ? " (decomposed)" : "", L - 1, bh, got, want);
                    test_failures++;
                    goto done;
                }
            }
    }
done:
    g_graph_free(gd);
    g_graph_free(gf);
    rig_close(&r);
}

int main(int argc, char **argv)
{
    if (argc != 2 && argc != 3) {
        fprintf(stderr, "usage: test_ops PLUGIN_DIR [BACKEND]\n");
        return 2;
    }
    plugin_dir = argv[1];
    if (argc == 3)
        backend_name = argv[2];
    int on_cpu = !strcmp(backend_name, "cpu");
    if (!on_cpu) { /* a backend with no usable device here (no GPU) skips the test */
        rig r;
        bora_status st = rig_try_open_on(&r, plugin_dir, backend_name, 2, 1);
        if (st == BORA_ERR_UNSUPPORTED && strstr(bora_error_get(), "no usable GPU")) {
            printf("SKIP: backend '%s' cannot run here: %s\n", backend_name, bora_error_get());
            return 77;
        }
        if (st != BORA_OK) { /* any other failure to start is the backend's own */
            fprintf(stderr, "test_ops: backend '%s' failed to start: %s\n", backend_name,
                    bora_error_get());
            return 1;
        }
        char what[512] = "";
        if (r.ops->describe)
            r.ops->describe(r.be, what, sizeof what);
        printf("test_ops on backend '%s': %s\n", backend_name, what);
        rig_close(&r);
    }
    int n_checks = 0;
    for (decomposed = 0; decomposed < 2; decomposed++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
            for (int v = 0; v < cases[i].variants && !(decomposed && cases[i].build == b_long_rows);
                 v++) {
                check_forward(&cases[i], v, BORA_DTYPE_F64);
                check_forward(&cases[i], v, BORA_DTYPE_F32);
                check_gradient(&cases[i], v);
                n_checks += 3;
            }
    if (!on_cpu) { /* what ran there, what did not */
        for (int op = 1; op < BORA_OP_COUNT_; op++)
            if (!ops_seen[op])
                printf("op '%s' (%d): no kernel on '%s' ran\n", g_op_name(op), op, backend_name);
        printf("test_ops: %d checks over %zu cases on '%s', %d skipped\n", n_checks,
               sizeof cases / sizeof cases[0], backend_name, n_skipped);
        return test_summary("test_ops");
    }
    for (decomposed = 0; decomposed < 2; decomposed++)
        check_gqa_decode();
    /* Every kernel op ran in some gradient check (forward or backward), or in its own check
     * when nothing differentiates through it: sum_squares here, write_slice and sample in
     * test_op_rules (which checks that they ran; sample's draws are checked against an
     * independent reference in test_sample), and the mixture-of-experts ops too, whose
     * references and gradient checks are test_moe_ops', and conv1d's, test_conv1d's. */
    for (int op = 1; op < BORA_OP_COUNT_; op++)
        if (!ops_seen[op] && op != BORA_OP_WRITE_SLICE && op != BORA_OP_SAMPLE &&
            (op < BORA_OP_TOP_K || op > BORA_OP_GROUPED_MATMUL_GRAD) &&
            (op < BORA_OP_CONV1D || op > BORA_OP_CONV1D_GRAD_WEIGHT)) {
            fprintf(stderr, "op '%s' (%d) has no gradient case in test_ops\n", g_op_name(op), op);
            test_failures++;
        }
    printf("test_ops: %d checks over %zu cases\n", n_checks, sizeof cases / sizeof cases[0]);
    return test_summary("test_ops");
}
