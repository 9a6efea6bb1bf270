/* plugins/optimizers/adamw — AdamW (Loshchilov & Hutter), as PyTorch's torch.optim.AdamW:
 *   p <- p - lr·wd·p                      (decoupled decay, for parameters the mask includes)
 *   m <- β1·m + (1-β1)·g,  v <- β2·v + (1-β2)·g²
 *   p <- p - lr/(1-β1^t) · m / (sqrt(v)/sqrt(1-β2^t) + ε)
 * built from graph ops; the bias corrections are per-step scalars computed on the host in f64.
 * Registered as adamw and as adam (Levanter's name for the same thing). */
#include <bora/optimizer.h>

#include <math.h>

typedef struct adamw {
    const bora_host *h;
    double beta1, beta2, epsilon, weight_decay;
} adamw;

static const bora_key adamw_keys[] = {
    {"beta1", BORA_KEY_FLOAT, 0, "0.9", "decay of the first moment, in [0, 1)"},
    {"beta2", BORA_KEY_FLOAT, 0, "0.95", "decay of the second moment, in [0, 1)"},
    {"epsilon", BORA_KEY_FLOAT, 0, "1e-8", "added to the second moment's square root (above 0)"},
    {"weight_decay", BORA_KEY_FLOAT, 0, "0.1",
     "decoupled weight decay, 0 or more (not where the model's mask excludes it: norms, biases, "
     "GPT-2's embeddings)"},
    {NULL, 0, 0, NULL, NULL},
};

static const char *const adamw_slots[] = {"m", "v", NULL};
/* decay = lr·wd, step_size = lr/(1-β1^t), inv_bc2 = 1/sqrt(1-β2^t), eps = ε */
static const char *const adamw_scalars[] = {"decay", "step_size", "inv_bc2", "eps", NULL};

static bora_status adamw_create(const bora_host *h, const bora_config *cfg, bora_optimizer **out)
{
    adamw *a = h->alloc(h, sizeof *a, 16);
    if (!a)
        return h->fail(h, BORA_ERR_NOMEM, "out of memory");
    a->h = h;
    bora_status st = h->config_float(h, cfg, "beta1", 0.9, &a->beta1);
    if (st == BORA_OK)
        st = h->config_float(h, cfg, "beta2", 0.95, &a->beta2);
    if (st == BORA_OK)
        st = h->config_float(h, cfg, "epsilon", 1e-8, &a->epsilon);
    if (st == BORA_OK)
        st = h->config_float(h, cfg, "weight_decay", 0.1, &a->weight_decay);
    /* Each range written so that NaN falls outside it. */
    if (st == BORA_OK && !(a->beta1 >= 0 && a->beta1 < 1))
        st = h->fail(h, BORA_ERR_CONFIG, "optimizer.beta1: %g is not in [0, 1)", a->beta1);
    if (st == BORA_OK && !(a->beta2 >= 0 && a->beta2 < 1))
        st = h->fail(h, BORA_ERR_CONFIG, "optimizer.beta2: %g is not in [0, 1)", a->beta2);
    if (st == BORA_OK && !(a->epsilon > 0 && isfinite(a->epsilon)))
        st = h->fail(h, BORA_ERR_CONFIG, "optimizer.epsilon: %g is not a number above 0",
                     a->epsilon);
    if (st == BORA_OK && !(a->weight_decay >= 0 && isfinite(a->weight_decay)))
        st = h->fail(h, BORA_ERR_CONFIG, "optimizer.weight_decay: %g is not 0 or more",
                     a->weight_decay);
    if (st != BORA_OK) {
        h->free(h, a);
        return st;
    }
    *out = (bora_optimizer *)a;
    return BORA_OK;
}

static void adamw_destroy(bora_optimizer *o)
{
    adamw *a = (adamw *)o;
    a->h->free(a->h, a);
}

static bora_status adamw_step_scalars(bora_optimizer *o, int64_t step, double lr, double *v)
{
    const adamw *a = (const adamw *)o;
    if (step < 1)
        return a->h->fail(a->h, BORA_ERR_INVALID, "optimizer steps count from 1, not %lld",
                          (long long)step);
    v[0] = lr * a->weight_decay;
    v[1] = lr / (1.0 - pow(a->beta1, (double)step));
    v[2] = 1.0 / sqrt(1.0 - pow(a->beta2, (double)step));
    v[3] = a->epsilon;
    return BORA_OK;
}

static bora_status adamw_update(bora_optimizer *o, bora_graph *g, const bora_param_update *u)
{
    const adamw *a = (const adamw *)o;
    const bora_graph_api *A = g->api;
    bora_tensor *gr = u->grad, *m = u->state[0], *v = u->state[1];
    bora_tensor *decay = u->scalars[0], *step_size = u->scalars[1], *inv_bc2 = u->scalars[2],
                *eps = u->scalars[3];
    /* each operand named, so the nodes come in one order whatever the compiler's order of
     * evaluating arguments (backends may recognise the chain: the CPU's one-pass AdamW) */
    bora_tensor *g1 = A->scale(g, gr, 1.0 - a->beta1), *m1 = A->scale(g, m, a->beta1);
    bora_tensor *m2 = bora_add(g, m1, g1);
    bora_tensor *g2 = A->scale(g, bora_mul(g, gr, gr), 1.0 - a->beta2);
    bora_tensor *v1 = A->scale(g, v, a->beta2);
    bora_tensor *v2 = bora_add(g, v1, g2);
    bora_tensor *denom = bora_add(g, bora_mul(g, bora_unary(g, BORA_OP_SQRT, v2), inv_bc2), eps);
    bora_tensor *upd = bora_mul(g, bora_div(g, m2, denom), step_size);
    bora_tensor *p = u->param;
    if (u->weight_decay)
        p = bora_sub(g, p, bora_mul(g, p, decay));
    bora_tensor *p2 = bora_sub(g, p, upd);
    bora_status st = A->assign(g, m, m2);
    if (st == BORA_OK)
        st = A->assign(g, v, v2);
    if (st == BORA_OK)
        st = A->assign(g, u->param, p2);
    return st == BORA_OK ? bora_graph_status(g) : st;
}

static const bora_optimizer_ops adamw_ops = {
    .hdr = {sizeof(bora_optimizer_ops), BORA_KIND_OPTIMIZER, "adamw",
            "AdamW with decoupled weight decay", adamw_keys},
    .create = adamw_create,
    .slots = adamw_slots,
    .scalars = adamw_scalars,
    .step_scalars = adamw_step_scalars,
    .build_update = adamw_update,
    .destroy = adamw_destroy,
};

static const bora_optimizer_ops adam_ops = {
    .hdr = {sizeof(bora_optimizer_ops), BORA_KIND_OPTIMIZER, "adam",
            "AdamW with decoupled weight decay (alias of adamw)", adamw_keys},
    .create = adamw_create,
    .slots = adamw_slots,
    .scalars = adamw_scalars,
    .step_scalars = adamw_step_scalars,
    .build_update = adamw_update,
    .destroy = adamw_destroy,
};

static bora_status adamw_init(const bora_host *h)
{
    bora_status st = h->add(h, &adamw_ops.hdr);
    return st == BORA_OK ? h->add(h, &adam_ops.hdr) : st;
}

BORA_PLUGIN_DEFINE("adamw", "0.1.0", adamw_init, NULL)
