/* tests/graph/test_decompose.c — a backend without the fused kernels (layernorm, softmax,
 * log-softmax) still runs a model: the builder emits each op's decomposition into primitives.
 * The small GPT-2 in f64 on such a backend matches the fused one's loss and gradients, and
 * none of the fused kernels ran.
 *
 * usage: test_decompose PLUGIN_DIR */
#include "../test.h"
#include "rig.h"
#include "tiny_gpt.h"

#include <math.h>

static bora_kernel_fn (*cpu_kernel_fn)(bora_backend *, uint32_t, const int32_t *, uint32_t);

static bora_kernel_fn without_fused(bora_backend *b, uint32_t op, const int32_t *dt, uint32_t n)
{
    if (op == BORA_OP_LAYERNORM || op == BORA_OP_LAYERNORM_GRAD || op == BORA_OP_SOFTMAX ||
        op == BORA_OP_LOG_SOFTMAX)
        return NULL;
    return cpu_kernel_fn(b, op, dt, n);
}

static const tiny_gpt M = {.vocab = 7,
                           .embed = 8,
                           .heads = 2,
                           .layers = 2,
                           .batch = 2,
                           .seq = 4,
                           .mlp = 16,
                           .dtype = BORA_DTYPE_F64};
static const int32_t ids[8] = {1, 4, 6, 0, 2, 2, 5, 3};
static const int32_t targets[8] = {4, 6, 0, 2, 2, 5, 3, -100};

/* Loss and gradients of the model (plus a softmax term, so softmax is used too). */
static double run(rig *r, g_graph *g, double *grads)
{
    bora_tensor *loss = tiny_gpt_build(&g->pub, &M, BORA_MODE_TRAIN);
    bora_axis ax[2] = {{"batch", 2}, {"vocab", 7}};
    bora_tensor *w = bora_param(&g->pub, "extra", BORA_DTYPE_F64, 2, ax, bora_init_normal(1), 0);
    const char *all[] = {"batch", "vocab"};
    bora_tensor *sm = g->pub.api->softmax(&g->pub, w, "vocab");
    bora_tensor *t = g->pub.api->reduce(&g->pub, BORA_OP_SUM, bora_mul(&g->pub, sm, w), 2, all);
    loss = bora_add(&g->pub, loss, t);
    g->output = loss;
    if (!loss || g_autodiff(g, loss) || g_finalize(g) || g_store_materialize(r->store)) {
        fprintf(stderr, "build: %s\n", g->error);
        return NAN;
    }
    g_set_input(g, "ids", ids, sizeof ids);
    g_set_input(g, "targets", targets, sizeof targets);
    double L = NAN;
    if (g_run(g) == BORA_OK)
        g_read(g, loss, &L, sizeof L);
    memcpy(grads, r->store->grad_ptr, r->store->param_bytes);
    return L;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_decompose PLUGIN_DIR\n");
        return 2;
    }
    rig fused, plain;
    rig_open(&fused, argv[1], 2, 5);
    rig_open(&plain, argv[1], 2, 5);
    /* The same backend, seen through a table that lacks the fused kernels. */
    static bora_backend_ops ops;
    ops = *plain.ops;
    cpu_kernel_fn = ops.kernel;
    ops.kernel = without_fused;
    plain.store->ops = &ops;

    g_graph *gf = g_graph_new(fused.store, BORA_MODE_TRAIN);
    g_graph *gp = g_graph_new(plain.store, BORA_MODE_TRAIN);
    double *grad_f = malloc(1 << 20), *grad_p = malloc(1 << 20);
    double lf = run(&fused, gf, grad_f), lp = run(&plain, gp, grad_p);
    printf("test_decompose: loss fused %.15f, decomposed %.15f; %zu against %zu nodes\n", lf, lp,
           gf->n_nodes, gp->n_nodes);
    CHECK(fabs(lf - lp) <= 1e-12 * fabs(lf));
    CHECK(fused.store->param_bytes == plain.store->param_bytes);
    size_t n = fused.store->param_bytes / sizeof(double);
    double worst = 0;
    for (size_t i = 0; i < n; i++)
        worst = fmax(worst, fabs(grad_f[i] - grad_p[i]) / (fabs(grad_f[i]) + 1e-6));
    printf("test_decompose: largest gradient difference %.3g (relative, +1e-6)\n", worst);
    CHECK(worst < 1e-9);
    CHECK(gf->op_runs[BORA_OP_LAYERNORM] > 0 && gf->op_runs[BORA_OP_SOFTMAX] > 0);
    CHECK(gp->op_runs[BORA_OP_LAYERNORM] == 0 && gp->op_runs[BORA_OP_LAYERNORM_GRAD] == 0 &&
          gp->op_runs[BORA_OP_SOFTMAX] == 0 && gp->op_runs[BORA_OP_LOG_SOFTMAX] == 0);
    free(grad_f);
    free(grad_p);
    g_graph_free(gf);
    g_graph_free(gp);
    rig_close(&fused);
    rig_close(&plain);
    return test_summary("test_decompose");
}
