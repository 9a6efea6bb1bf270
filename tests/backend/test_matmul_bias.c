/* tests/backend/test_matmul_bias.c — a linear layer's bias added by the bf16 product itself
 * (BORA_OP_MATMUL's third input, ABI 1.8) on the CPU backend:
 *   - the kernel: where oneDNN runs the bf16 products, a product with a bias gives the bits of the
 *     same product without it followed by the f32 add, bit for bit, in shapes that cross oneDNN's
 *     blocks (K past 1024, rows past 512), in a batch, with C's rows strided, with a bias shaped
 *     like the layer's output rather than C, and on the route a tall transposed product takes (run
 *     there without the bias, then added); a bias that is not one row is refused, not read;
 *   - the lookup: offered for bf16 operands with an f32 bias only where oneDNN runs the products
 *     (where they are widened for sgemm the add would cost the same pass), never in f32;
 *   - the graph: under trainer.mp c=bf16 a two-layer MLP with biases and a residual has both its
 *     bias adds taken into the products (no bias ADD left, nor the buffers of its sums), and
 *     its loss and every gradient keep the bits of BORA_NO_FUSION's graph; a bias the graph
 *     computes (tanh of a parameter) stays an ADD, with the same bits; where the products are
 *     widened, and in f32, nothing is taken.
 * On a CPU where oneDNN has no bf16 matmul the test says so and checks the widened rig only.
 *
 * usage: test_matmul_bias PLUGIN_DIR */
#include "../graph/rig.h"
#include "../test.h"

#include <math.h>

static const char *plugin_dir;

static uint16_t bf16_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static float value_of(int64_t i, double scale)
{
    return (float)(scale * sin(0.37 * (double)i + 0.11));
}

static bora_tensor_desc desc(void *data, int dtype, int ndim, const int64_t *dims,
                             const int64_t *strides)
{
    bora_tensor_desc d = {.data = data, .dtype = dtype, .ndim = ndim};
    memcpy(d.dims, dims, sizeof(int64_t) * (size_t)ndim);
    memcpy(d.strides, strides, sizeof(int64_t) * (size_t)ndim);
    return d;
}

typedef struct kcase {
    const char *name;
    int64_t B, M, K, N;
    int a_transposed; /* A stored (K, M): a tall weight gradient's transposed route */
    int64_t c_pad;    /* extra elements after each row of C */
    int bias_3d;      /* the bias as the layer's (batch, position, N) view, strides (0, 0, 1) */
} kcase;

static const kcase kcases[] = {
    {"1000 x 1100 x 1030", 1, 1000, 1100, 1030, 0, 0, 0},
    {"400 x 96 x 384, bias as a (2, 200, 384) view", 1, 400, 96, 384, 0, 0, 1},
    {"batch of 3, 70 x 130 x 50", 3, 70, 130, 50, 0, 0, 0},
    {"C's rows strided (+5), 130 x 64 x 77", 1, 130, 64, 77, 0, 5, 0},
    {"A transposed, 8300 x 256 x 24 (the transposed route)", 1, 8300, 256, 24, 1, 0, 0},
};

/* Run the case's product with and without its bias; the bits must agree after the f32 add. */
static void check_kernel(rig *r, const kcase *c)
{
    int32_t dt4[4] = {BORA_DTYPE_BF16, BORA_DTYPE_BF16, BORA_DTYPE_F32, BORA_DTYPE_F32};
    bora_kernel_fn with = r->ops->kernel(r->be, BORA_OP_MATMUL, dt4, 4);
    int32_t dt3[3] = {BORA_DTYPE_BF16, BORA_DTYPE_BF16, BORA_DTYPE_F32};
    bora_kernel_fn without = r->ops->kernel(r->be, BORA_OP_MATMUL, dt3, 3);
    CHECK(with && without);
    if (!with || !without)
        return;
    int64_t B = c->B, M = c->M, K = c->K, N = c->N, ldc = N + c->c_pad;
    uint16_t *a = malloc(sizeof(uint16_t) * (size_t)(B * M * K));
    uint16_t *w = malloc(sizeof(uint16_t) * (size_t)(B * K * N));
    float *bias = malloc(sizeof(float) * (size_t)N);
    size_t c_elems = (size_t)(B * M * ldc);
    float *c1 = malloc(sizeof(float) * c_elems), *c2 = malloc(sizeof(float) * c_elems);
    for (int64_t i = 0; i < B * M * K; i++)
        a[i] = bf16_of(value_of(i, 1.0));
    for (int64_t i = 0; i < B * K * N; i++)
        w[i] = bf16_of(value_of(3 * i + 1, 0.05));
    for (int64_t i = 0; i < N; i++)
        bias[i] = value_of(7 * i + 2, 0.5);
    for (size_t i = 0; i < c_elems; i++)
        c1[i] = c2[i] = -777.0f; /* the padding must stay as it is */
    int64_t ad[3] = {B, M, K}, as[3] = {M * K, K, 1};
    if (c->a_transposed)
        as[1] = 1, as[2] = M;
    int64_t wd[3] = {B, K, N}, ws[3] = {K * N, N, 1};
    int64_t cd[3] = {B, M, N}, cs[3] = {M * ldc, ldc, 1};
    int64_t bd3[3] = {2, M / 2, N}, bs3[3] = {0, 0, 1}, bd1[1] = {N}, bs1[1] = {1};
    bora_tensor_desc in[3] = {desc(a, BORA_DTYPE_BF16, 3, ad, as),
                              desc(w, BORA_DTYPE_BF16, 3, wd, ws),
                              c->bias_3d ? desc(bias, BORA_DTYPE_F32, 3, bd3, bs3)
                                         : desc(bias, BORA_DTYPE_F32, 1, bd1, bs1)};
    bora_tensor_desc out1 = desc(c1, BORA_DTYPE_F32, 3, cd, cs);
    bora_tensor_desc out2 = desc(c2, BORA_DTYPE_F32, 3, cd, cs);
    bora_kernel_args a3 = {sizeof a3, BORA_OP_MATMUL, NULL, 3, 1, in, &out1, NULL, 0};
    bora_kernel_args a2 = {sizeof a2, BORA_OP_MATMUL, NULL, 2, 1, in, &out2, NULL, 0};
    CHECK(r->ops->prepare(r->be, &a3) == BORA_OK && r->ops->prepare(r->be, &a2) == BORA_OK);
    CHECK(with(r->be, &a3) == BORA_OK && without(r->be, &a2) == BORA_OK);
    size_t differ = 0, moved = 0;
    for (int64_t bm = 0; bm < B * M; bm++)
        for (int64_t j = 0; j < ldc; j++) {
            size_t at = (size_t)(bm * ldc + j);
            float want = j < N ? c2[at] + bias[j] : -777.0f;
            differ += memcmp(&c1[at], &want, sizeof want) != 0;
            moved += j < N && c1[at] != c2[at];
        }
    /* the product itself, against a double sum at a few places */
    double worst = 0;
    for (int64_t s = 0; s < 64; s++) {
        int64_t bi = s % B, m = (s * 131) % M, n = (s * 37) % N;
        double sum = bias[n];
        for (int64_t k = 0; k < K; k++) {
            uint16_t av = a[bi * M * K + (c->a_transposed ? k * M + m : m * K + k)];
            uint16_t wv = w[bi * K * N + k * N + n];
            uint32_t au = (uint32_t)av << 16, wu = (uint32_t)wv << 16;
            float af, wf;
            memcpy(&af, &au, sizeof af);
            memcpy(&wf, &wu, sizeof wf);
            sum += (double)af * wf;
        }
        double d = fabs(c1[(bi * M + m) * ldc + n] - sum) / (1.0 + fabs(sum));
        worst = d > worst ? d : worst;
    }
    printf("%-54s %zu of %lld differ from the product then the add; %.2g from double\n", c->name,
           differ, (long long)(B * M * N), worst);
    CHECK(differ == 0);
    CHECK(moved > (size_t)(B * M * N) / 2); /* the bias was added */
    CHECK(worst < 1e-5);
    free(a);
    free(w);
    free(bias);
    free(c1);
    free(c2);
}

/* A bias that is not one row (a row axis with a stride) is refused without a write. */
static void check_refusal(rig *r)
{
    int32_t dt4[4] = {BORA_DTYPE_BF16, BORA_DTYPE_BF16, BORA_DTYPE_F32, BORA_DTYPE_F32};
    bora_kernel_fn with = r->ops->kernel(r->be, BORA_OP_MATMUL, dt4, 4);
    if (!with)
        return;
    uint16_t a[4 * 8] = {0}, w[8 * 3] = {0};
    float bias[4 * 3] = {0}, c[4 * 3];
    for (int i = 0; i < 12; i++)
        c[i] = 5.0f;
    int64_t ad[3] = {1, 4, 8}, as[3] = {32, 8, 1}, wd[3] = {1, 8, 3}, ws[3] = {24, 3, 1};
    int64_t cd[3] = {1, 4, 3}, cs[3] = {12, 3, 1}, bd[2] = {4, 3}, bs[2] = {3, 1};
    bora_tensor_desc in[3] = {desc(a, BORA_DTYPE_BF16, 3, ad, as),
                              desc(w, BORA_DTYPE_BF16, 3, wd, ws),
                              desc(bias, BORA_DTYPE_F32, 2, bd, bs)};
    bora_tensor_desc out = desc(c, BORA_DTYPE_F32, 3, cd, cs);
    bora_kernel_args args = {sizeof args, BORA_OP_MATMUL, NULL, 3, 1, in, &out, NULL, 0};
    bora_status st = with(r->be, &args);
    int untouched = 1;
    for (int i = 0; i < 12; i++)
        untouched &= c[i] == 5.0f;
    printf("a (4, 3) bias of distinct rows: %s\n", st == BORA_ERR_INVALID ? bora_error_get() : "?");
    CHECK(st == BORA_ERR_INVALID && untouched);
}

/* ---- the graph ------------------------------------------------------------------------------ */

enum { BATCH = 2, POS = 200, EMBED = 96, HIDDEN = 384 };

typedef struct gres {
    float loss;
    float *grads;
    size_t grad_bytes, naive; /* naive: the arena's buffers, each alone */
    int with_bias, bias_adds; /* MATMUL nodes with a bias; ADDs of a product and a broadcast */
} gres;

/* out = (gelu(x·W1 + b1))·W2 + b2 + x; loss = Σ out · C. computed: the second bias is
 * tanh(b2), a value the graph computes (which must stay an ADD). */
static int run_mlp(int compute, int fused, const char *matmul_env, int computed, gres *o)
{
    memset(o, 0, sizeof *o);
    if (fused)
        unsetenv("BORA_NO_FUSION");
    else
        setenv("BORA_NO_FUSION", "1", 1);
    setenv("BORA_CPU_BF16_MATMUL", matmul_env, 1);
    rig r;
    rig_open(&r, plugin_dir, 2, 9);
    g_store_mixed(r.store, compute, 0, BORA_ABI_MINOR);
    g_graph *g = g_graph_new(r.store, BORA_MODE_TRAIN);
    bora_graph *gp = &g->pub;
    bora_axis xa[3] = {{"batch", BATCH}, {"position", POS}, {"embed", EMBED}};
    bora_axis w1a[2] = {{"embed", EMBED}, {"hidden", HIDDEN}}, b1a[1] = {{"hidden", HIDDEN}};
    bora_axis w2a[2] = {{"hidden", HIDDEN}, {"embed", EMBED}}, b2a[1] = {{"embed", EMBED}};
    bora_tensor *x = bora_param(gp, "x", BORA_DTYPE_F32, 3, xa, bora_init_normal(1.0), 0);
    bora_tensor *w1 = bora_param(gp, "w1", BORA_DTYPE_F32, 2, w1a, bora_init_normal(0.1), 0);
    bora_tensor *b1 = bora_param(gp, "b1", BORA_DTYPE_F32, 1, b1a, bora_init_normal(0.5), 0);
    bora_tensor *w2 = bora_param(gp, "w2", BORA_DTYPE_F32, 2, w2a, bora_init_normal(0.1), 0);
    bora_tensor *b2 = bora_param(gp, "b2", BORA_DTYPE_F32, 1, b2a, bora_init_normal(0.5), 0);
    if (computed)
        b2 = bora_unary(gp, BORA_OP_TANH, b2);
    const char *embed[] = {"embed"}, *hidden[] = {"hidden"};
    bora_dot_opts o1 = {sizeof o1, BORA_OP_GELU_TANH, b1}, o2 = {sizeof o2, 0, b2};
    bora_tensor *h = gp->api->dot(gp, x, w1, 1, embed, &o1);
    bora_tensor *y = bora_add(gp, gp->api->dot(gp, h, w2, 1, hidden, &o2), x);
    bora_tensor *cw = bora_input(gp, "c", BORA_DTYPE_F32, 3, xa);
    const char *all[] = {"batch", "position", "embed"};
    bora_tensor *loss = gp->api->reduce(gp, BORA_OP_SUM, bora_mul(gp, y, cw), 3, all);
    g->output = loss;
    int ok = loss && g_autodiff(g, loss) == BORA_OK && g_finalize(g) == BORA_OK &&
             g_store_materialize(r.store) == BORA_OK;
    if (!ok) {
        fprintf(stderr, "mlp: build failed: %s\n", g->error);
        test_failures++;
    } else {
        float *c = malloc(sizeof(float) * BATCH * POS * EMBED);
        for (int64_t i = 0; i < BATCH * POS * EMBED; i++)
            c[i] = value_of(5 * i + 3, 1.0);
        CHECK(g_set_input(g, "c", c, sizeof(float) * BATCH * POS * EMBED) == BORA_OK);
        free(c);
        CHECK(g_store_zero_grads(r.store) == BORA_OK && g_run(g) == BORA_OK &&
              g_read(g, loss, &o->loss, sizeof o->loss) == BORA_OK);
        o->grad_bytes = r.store->param_bytes;
        o->grads = malloc(o->grad_bytes);
        memcpy(o->grads, r.store->grad_ptr, o->grad_bytes);
        o->naive = g->naive_bytes;
        for (size_t i = 0; i < g->n_nodes; i++) {
            const gnode *n = g->nodes[i];
            o->with_bias += n->op == BORA_OP_MATMUL && n->nin == 3;
            if (n->op != BORA_OP_ADD || n->nin != 2)
                continue;
            for (int k = 0; k < 2; k++) {
                const gval *p = n->in[k], *b = n->in[1 - k];
                int broadcast = 0;
                for (int d = 0; d < b->ndim; d++)
                    broadcast |= b->dims[d] > 1 && b->strides[d] == 0;
                o->bias_adds += broadcast && p->base->node && p->base->node->op == BORA_OP_MATMUL;
            }
        }
    }
    g_graph_free(g);
    rig_close(&r);
    unsetenv("BORA_NO_FUSION");
    return ok;
}

/* The fused run against the unfused one: the same loss and gradient bits; taken: how many bias
 * adds the fused graph's products must have taken. The fused graph's buffers in bytes, or 0. */
static size_t check_mlp(int compute, const char *matmul_env, int computed, int taken)
{
    gres f = {0}, u = {0};
    const char *what =
        compute == BORA_DTYPE_BF16 ? (computed ? "c=bf16, b2 computed" : "c=bf16") : "f32";
    if (!run_mlp(compute, 1, matmul_env, computed, &f) ||
        !run_mlp(compute, 0, matmul_env, computed, &u)) {
        free(f.grads);
        free(u.grads);
        return 0;
    }
    size_t differ = 0, n = f.grad_bytes / sizeof(float), nonzero = 0;
    for (size_t i = 0; i < n && f.grad_bytes == u.grad_bytes; i++) {
        differ += memcmp(&f.grads[i], &u.grads[i], sizeof(float)) != 0;
        nonzero += f.grads[i] != 0;
    }
    printf("mlp, %s, products %s: loss %.6f; %d bias adds taken by the products (%d left); %zu "
           "of %zu gradients differ from the unfused graph's\n",
           what, matmul_env, f.loss, f.with_bias, f.bias_adds, differ, n);
    CHECK(f.with_bias == taken && u.with_bias == 0);
    CHECK(f.bias_adds == 2 - taken && u.bias_adds == 2);
    CHECK(memcmp(&f.loss, &u.loss, sizeof f.loss) == 0 && f.loss != 0);
    CHECK(f.grad_bytes == u.grad_bytes && differ == 0 && nonzero > n / 2);
    free(f.grads);
    free(u.grads);
    return f.naive;
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
    rig r;
    size_t taken_bytes = 0;
    int onednn = rig_try_open(&r, plugin_dir, 2, 5) == BORA_OK;
    if (onednn) {
        for (size_t i = 0; i < sizeof kcases / sizeof kcases[0]; i++)
            check_kernel(&r, &kcases[i]);
        check_refusal(&r);
        int32_t f32[4] = {BORA_DTYPE_F32, BORA_DTYPE_F32, BORA_DTYPE_F32, BORA_DTYPE_F32};
        CHECK(r.ops->kernel(r.be, BORA_OP_MATMUL, f32, 4) == NULL);
        rig_close(&r);
        taken_bytes = check_mlp(BORA_DTYPE_BF16, "onednn", 0, 2);
        check_mlp(BORA_DTYPE_BF16, "onednn", 1, 1); /* a computed bias stays an ADD */
    } else {
        printf("oneDNN has no bf16 matmul on this CPU: checking only the widened products\n");
    }
    setenv("BORA_CPU_BF16_MATMUL", "widen", 1);
    rig_open(&r, plugin_dir, 2, 5);
    int32_t dt4[4] = {BORA_DTYPE_BF16, BORA_DTYPE_BF16, BORA_DTYPE_F32, BORA_DTYPE_F32};
    CHECK(r.ops->kernel(r.be, BORA_OP_MATMUL, dt4, 4) == NULL);
    rig_close(&r);
    size_t widened_bytes = check_mlp(BORA_DTYPE_BF16, "widen", 0, 0);
    check_mlp(BORA_DTYPE_F32, "widen", 0, 0);
    if (onednn) { /* the sums (the layers' outputs) live in their products' buffers */
        size_t sums = sizeof(float) * BATCH * POS * (HIDDEN + EMBED);
        printf("mlp, c=bf16: the arena's buffers take %zu bytes with the bias adds taken, %zu "
               "without\n",
               taken_bytes, widened_bytes);
        CHECK(taken_bytes + sums == widened_bytes);
    }
    return test_summary("test_matmul_bias");
}
