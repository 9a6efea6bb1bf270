/* plugins/optimizers/lion — Lion (Chen et al. 2023, "Symbolic Discovery of Optimization
 * Algorithms"), the sign of an interpolated momentum:
 *   c <- β1·m + (1-β1)·g
 *   p <- p - lr·(sign(c) + λ·p)           (λ·p only for parameters the decay mask includes)
 *   m <- β2·m + (1-β2)·g
 * built from elementwise graph ops, one chain per parameter, so the backend runs a run of
 * updates as one fused pass. */
#include <bora/optimizer.h>

#include <math.h>

typedef struct lion {
    const bora_host *h;
    double beta1, beta2, weight_decay;
} lion;

static const bora_key lion_keys[] = {
    {"beta1", BORA_KEY_FLOAT, 0, "0.9", "weight of the momentum in the update's sign, in [0, 1)"},
    {"beta2", BORA_KEY_FLOAT, 0, "0.99", "decay of the momentum, in [0, 1)"},
    {"weight_decay", BORA_KEY_FLOAT, 0, "0.1",
     "decoupled weight decay λ, 0 or more (not where the model's mask excludes it: norms, biases, "
     "GPT-2's embeddings)"},
    {NULL, 0, 0, NULL, NULL},
};

static const char *const lion_slots[] = {"m", NULL};
/* decay = lr·λ, lr */
static const char *const lion_scalars[] = {"decay", "lr", NULL};

static bora_status lion_create(const bora_host *h, const bora_config *cfg, bora_optimizer **out)
{
    lion *l = h->alloc(h, sizeof *l, 16);
    if (!l)
        return h->fail(h, BORA_ERR_NOMEM, "out of memory");
    l->h = h;
    bora_status st = h->config_float(h, cfg, "beta1", 0.9, &l->beta1);
    if (st == BORA_OK)
        st = h->config_float(h, cfg, "beta2", 0.99, &l->beta2);
    if (st == BORA_OK)
        st = h->config_float(h, cfg, "weight_decay", 0.1, &l->weight_decay);
    /* Each range written so that NaN falls outside it. */
    if (st == BORA_OK && !(l->beta1 >= 0 && l->beta1 < 1))
        st = h->fail(h, BORA_ERR_CONFIG, "optimizer.beta1: %g is not in [0, 1)", l->beta1);
    if (st == BORA_OK && !(l->beta2 >= 0 && l->beta2 < 1))
        st = h->fail(h, BORA_ERR_CONFIG, "optimizer.beta2: %g is not in [0, 1)", l->beta2);
    if (st == BORA_OK && !(l->weight_decay >= 0 && isfinite(l->weight_decay)))
        st = h->fail(h, BORA_ERR_CONFIG, "optimizer.weight_decay: %g is not 0 or more",
                     l->weight_decay);
    if (st != BORA_OK) {
        h->free(h, l);
        return st;
    }
    *out = (bora_optimizer *)l;
    return BORA_OK;
}

static void lion_destroy(bora_optimizer *o)
{
    lion *l = (lion *)o;
    l->h->free(l->h, l);
}

static bora_status lion_step_scalars(bora_optimizer *o, int64_t step, double lr, double *v)
{
    const lion *l = (const lion *)o;
    if (step < 1)
        return l->h->fail(l->h, BORA_ERR_INVALID, "optimizer steps count from 1, not %lld",
                          (long long)step);
    v[0] = lr * l->weight_decay;
    v[1] = lr;
    return BORA_OK;
}

static bora_status lion_update(bora_optimizer *o, bora_graph *g, const bora_param_update *u)
{
    const lion *l = (const lion *)o;
    const bora_graph_api *A = g->api;
    bora_tensor *gr = u->grad, *m = u->state[0], *decay = u->scalars[0], *lr = u->scalars[1];
    /* each operand named, so the nodes come in one order whatever the compiler's order of
     * evaluating arguments */
    bora_tensor *m1 = A->scale(g, m, l->beta1), *g1 = A->scale(g, gr, 1.0 - l->beta1);
    bora_tensor *c = bora_add(g, m1, g1);
    bora_tensor *step = bora_mul(g, bora_unary(g, BORA_OP_SIGN, c), lr);
    bora_tensor *p = u->param;
    if (u->weight_decay)
        p = bora_sub(g, p, bora_mul(g, p, decay));
    bora_tensor *p2 = bora_sub(g, p, step);
    bora_tensor *m2 = A->scale(g, m, l->beta2), *g2 = A->scale(g, gr, 1.0 - l->beta2);
    bora_tensor *m3 = bora_add(g, m2, g2);
    bora_status st = A->assign(g, m, m3);
    if (st == BORA_OK)
        st = A->assign(g, u->param, p2);
    return st == BORA_OK ? bora_graph_status(g) : st;
}

static const bora_optimizer_ops lion_ops = {
    .hdr = {sizeof(bora_optimizer_ops), BORA_KIND_OPTIMIZER, "lion",
            "Lion: the sign of an interpolated momentum, with decoupled weight decay", lion_keys},
    .create = lion_create,
    .slots = lion_slots,
    .scalars = lion_scalars,
    .step_scalars = lion_step_scalars,
    .build_update = lion_update,
    .destroy = lion_destroy,
};

static bora_status lion_init(const bora_host *h)
{
    return h->add(h, &lion_ops.hdr);
}

BORA_PLUGIN_DEFINE("lion", "0.1.0", lion_init, NULL)
