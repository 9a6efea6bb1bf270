/* plugins/optimizers/sophia — Sophia (Liu, Li, Hall, Liang and Ma, "Sophia: A Scalable Stochastic
 * Second-order Optimizer for Language Model Pre-training", 2023), Algorithm 3:
 *   m <- β1·m + (1-β1)·g
 *   every k steps (t = 1, 1 + k, ...):  h <- β2·h + (1-β2)·ĥ   (ĥ from the host, at the step's θ)
 *   θ <- θ - lr·wd·θ                      (decoupled decay, for parameters the mask includes)
 *   θ <- θ - lr · clip(m̂ / max(γ·h, ε), -ρ, ρ),   m̂ = m / (1 - β1^t)
 * with two estimators of the Hessian's diagonal ĥ, both computed by the host:
 *   sophia_h: Hutchinson's z ⊙ (H z), z standard normal (Algorithm 1);
 *   sophia_g: Gauss-Newton-Bartlett B · ĝ ⊙ ĝ, ĝ the gradient at labels drawn from the model's
 *             own distribution and B their count (Algorithm 2).
 * The defaults are Levanter's (BaseSophiaConfig: β1 0.96, β2 0.99, ε 1e-12, ρ 1, weight decay
 * 0.1; γ 0.01 for H and 0.05 for G; an estimate every 10 steps), m̂ bias-corrected as Levanter
 * does. Logs optim/hessian_norm (‖h‖ as the step uses it) and optim/unclipped_fraction (the
 * share of coordinates with |m̂ / max(γ·h, ε)| < ρ). */
#include <bora/optimizer.h>

#include <math.h>
#include <string.h>

typedef struct sophia {
    const bora_host *h;
    int kind; /* BORA_HESSIAN_HUTCHINSON or BORA_HESSIAN_GNB */
    double beta1, beta2, epsilon, gamma, rho, weight_decay;
    int64_t update_interval, micro_batches;
    int log_metrics;
} sophia;

/* clang-format off */
#define SOPHIA_KEYS                                                                              \
    {"beta1", BORA_KEY_FLOAT, 0, "0.96", "decay of the gradient's moving average, in [0, 1)"},     \
    {"beta2", BORA_KEY_FLOAT, 0, "0.99", "decay of the Hessian estimate's moving average, in [0, 1)"}, \
    {"rho", BORA_KEY_FLOAT, 0, "1.0", "ρ: each coordinate's update is clipped to ±ρ, above 0"},    \
    {"epsilon", BORA_KEY_FLOAT, 0, "1e-12", "ε: the denominator's floor, above 0"},                \
    {"weight_decay", BORA_KEY_FLOAT, 0, "0.1",                                                     \
     "decoupled weight decay, 0 or more (not where the model's mask excludes it: norms, "         \
     "biases, GPT-2's embeddings)"},                                                               \
    {"update_interval", BORA_KEY_INT, 0, "10", "k: a Hessian estimate at steps 1, 1 + k, 1 + 2k, ..."}, \
    {"log_metrics", BORA_KEY_BOOL, 0, "true",                                                      \
     "log optim/hessian_norm and optim/unclipped_fraction each step"},                             \
    {"hessian_micro_batches", BORA_KEY_INT, 0, "0",                                                \
     "the estimate reads the step's first this many micro-batches (0: all of them)"},              \
    {NULL, 0, 0, NULL, NULL}
/* clang-format on */

static const bora_key sophia_h_keys[] = {
    {"gamma", BORA_KEY_FLOAT, 0, "0.01", "γ: the Hessian's scale in max(γ·h, ε), above 0"},
    SOPHIA_KEYS};
static const bora_key sophia_g_keys[] = {
    {"gamma", BORA_KEY_FLOAT, 0, "0.05", "γ: the Hessian's scale in max(γ·h, ε), above 0"},
    SOPHIA_KEYS};

static const char *const sophia_slots[] = {"m", "h", NULL};
/* step = lr, decay = lr·wd, bc1 = 1/(1-β1^t) */
/* lr, decay = lr·wd, bc1 = 1/(1-β1^t), and the constants ε, ρ and -ρ as inputs too: a constant
 * made in the graph is a kernel of its own between two parameters' updates, which would keep the
 * planner from running the updates as one multi-tensor pass */
static const char *const sophia_scalars[] = {"lr", "decay", "bc1", "eps", "rho", "neg_rho", NULL};
enum { METRIC_HESSIAN_NORM, METRIC_UNCLIPPED };
static const bora_optimizer_metric sophia_metrics[] = {
    {"optim/hessian_norm", BORA_METRIC_NORM, 0},
    {"optim/unclipped_fraction", BORA_METRIC_MEAN, 0},
    {NULL, 0, 0},
};

static bora_status create(const bora_host *h, const bora_config *cfg, int kind,
                          bora_optimizer **out)
{
    sophia *s = h->alloc(h, sizeof *s, 16);
    if (!s)
        return h->fail(h, BORA_ERR_NOMEM, "out of memory");
    memset(s, 0, sizeof *s);
    s->h = h;
    s->kind = kind;
    bora_status st = h->config_float(h, cfg, "beta1", 0.96, &s->beta1);
    if (st == BORA_OK)
        st = h->config_float(h, cfg, "beta2", 0.99, &s->beta2);
    if (st == BORA_OK)
        st = h->config_float(h, cfg, "gamma", kind == BORA_HESSIAN_GNB ? 0.05 : 0.01, &s->gamma);
    if (st == BORA_OK)
        st = h->config_float(h, cfg, "rho", 1.0, &s->rho);
    if (st == BORA_OK)
        st = h->config_float(h, cfg, "epsilon", 1e-12, &s->epsilon);
    if (st == BORA_OK)
        st = h->config_float(h, cfg, "weight_decay", 0.1, &s->weight_decay);
    if (st == BORA_OK)
        st = h->config_int(h, cfg, "update_interval", 10, &s->update_interval);
    if (st == BORA_OK)
        st = h->config_int(h, cfg, "hessian_micro_batches", 0, &s->micro_batches);
    if (st == BORA_OK)
        st = h->config_bool(h, cfg, "log_metrics", 1, &s->log_metrics);
    /* Each range written so that NaN falls outside it. */
    if (st == BORA_OK && !(s->beta1 >= 0 && s->beta1 < 1))
        st = h->fail(h, BORA_ERR_CONFIG, "optimizer.beta1: %g is not in [0, 1)", s->beta1);
    if (st == BORA_OK && !(s->beta2 >= 0 && s->beta2 < 1))
        st = h->fail(h, BORA_ERR_CONFIG, "optimizer.beta2: %g is not in [0, 1)", s->beta2);
    if (st == BORA_OK && !(s->gamma > 0 && isfinite(s->gamma)))
        st = h->fail(h, BORA_ERR_CONFIG, "optimizer.gamma: %g is not a number above 0", s->gamma);
    if (st == BORA_OK && !(s->rho > 0 && isfinite(s->rho)))
        st = h->fail(h, BORA_ERR_CONFIG, "optimizer.rho: %g is not a number above 0", s->rho);
    if (st == BORA_OK && !(s->epsilon > 0 && isfinite(s->epsilon)))
        st = h->fail(h, BORA_ERR_CONFIG, "optimizer.epsilon: %g is not a number above 0",
                     s->epsilon);
    if (st == BORA_OK && !(s->weight_decay >= 0 && isfinite(s->weight_decay)))
        st = h->fail(h, BORA_ERR_CONFIG, "optimizer.weight_decay: %g is not 0 or more",
                     s->weight_decay);
    if (st == BORA_OK && s->update_interval < 1)
        st = h->fail(h, BORA_ERR_CONFIG, "optimizer.update_interval: %lld is not 1 or more",
                     (long long)s->update_interval);
    if (st == BORA_OK && s->micro_batches < 0)
        st = h->fail(h, BORA_ERR_CONFIG, "optimizer.hessian_micro_batches: %lld is below 0",
                     (long long)s->micro_batches);
    if (st != BORA_OK) {
        h->free(h, s);
        return st;
    }
    *out = (bora_optimizer *)s;
    return BORA_OK;
}

static bora_status create_h(const bora_host *h, const bora_config *cfg, bora_optimizer **out)
{
    return create(h, cfg, BORA_HESSIAN_HUTCHINSON, out);
}

static bora_status create_g(const bora_host *h, const bora_config *cfg, bora_optimizer **out)
{
    return create(h, cfg, BORA_HESSIAN_GNB, out);
}

static void destroy(bora_optimizer *o)
{
    sophia *s = (sophia *)o;
    s->h->free(s->h, s);
}

static bora_status step_scalars(bora_optimizer *o, int64_t step, double lr, double *v)
{
    const sophia *s = (const sophia *)o;
    if (step < 1)
        return s->h->fail(s->h, BORA_ERR_INVALID, "optimizer steps count from 1, not %lld",
                          (long long)step);
    v[0] = lr;
    v[1] = lr * s->weight_decay;
    v[2] = 1.0 / (1.0 - pow(s->beta1, (double)step));
    v[3] = s->epsilon;
    v[4] = s->rho;
    v[5] = -s->rho;
    return BORA_OK;
}

static bora_status hessian(bora_optimizer *o, bora_hessian_spec *spec)
{
    const sophia *s = (const sophia *)o;
    spec->kind = s->kind;
    spec->interval = s->update_interval;
    spec->micro_batches = s->micro_batches;
    return BORA_OK;
}

/* The sum of all of x's elements, a 0-d tensor. */
static bora_tensor *sum_all(bora_graph *g, bora_tensor *x)
{
    const bora_graph_api *A = g->api;
    int32_t n = A->ndim(x);
    const char *axes[BORA_MAX_DIMS];
    for (int32_t i = 0; i < n; i++)
        axes[i] = A->axis(x, i).name;
    return A->reduce(g, BORA_OP_SUM, x, n, axes);
}

/* h <- β2·h + (1-β2)·ĥ, with ĥ the host's estimate in u->grad. */
static bora_status hessian_update(bora_optimizer *o, bora_graph *g, const bora_param_update *u)
{
    const sophia *s = (const sophia *)o;
    const bora_graph_api *A = g->api;
    bora_tensor *h = u->state[1];
    bora_tensor *h1 = A->scale(g, h, s->beta2), *e1 = A->scale(g, u->grad, 1.0 - s->beta2);
    bora_status st = A->assign(g, h, bora_add(g, h1, e1));
    return st == BORA_OK ? bora_graph_status(g) : st;
}

static bora_status update(bora_optimizer *o, bora_graph *g, const bora_param_update *u)
{
    const sophia *s = (const sophia *)o;
    const bora_graph_api *A = g->api;
    bora_tensor *gr = u->grad, *m = u->state[0], *h = u->state[1];
    bora_tensor *lr = u->scalars[0], *decay = u->scalars[1], *bc1 = u->scalars[2];
    bora_tensor *eps = u->scalars[3], *rho = u->scalars[4], *neg_rho = u->scalars[5];
    /* each operand named, so the nodes come in one order whatever the compiler's order of
     * evaluating arguments */
    bora_tensor *g1 = A->scale(g, gr, 1.0 - s->beta1), *m1 = A->scale(g, m, s->beta1);
    bora_tensor *m2 = bora_add(g, m1, g1);
    bora_tensor *mhat = bora_mul(g, m2, bc1);
    bora_tensor *den = bora_maximum(g, A->scale(g, h, s->gamma), eps);
    bora_tensor *ratio = bora_div(g, mhat, den);
    /* clip(r, -ρ, ρ) as bora_clamp computes it: maximum first, then minimum */
    bora_tensor *clipped = bora_minimum(g, bora_maximum(g, ratio, neg_rho), rho);
    bora_tensor *p = u->param;
    if (u->weight_decay)
        p = bora_sub(g, p, bora_mul(g, p, decay));
    bora_tensor *p2 = bora_sub(g, p, bora_mul(g, clipped, lr));
    bora_status st = BORA_OK;
    if (st == BORA_OK)
        st = A->assign(g, m, m2);
    if (st == BORA_OK)
        st = A->assign(g, u->param, p2);
    return st == BORA_OK ? bora_graph_status(g) : st;
}

/* The metrics, after every parameter's update (build_metrics): the ratio again from the updated
 * m and h, the same values the update clipped. */
static bora_status metrics(bora_optimizer *o, bora_graph *g, const bora_param_update *u)
{
    const sophia *s = (const sophia *)o;
    if (!u->report || !s->log_metrics)
        return BORA_OK;
    const bora_graph_api *A = g->api;
    bora_tensor *m = u->state[0], *h = u->state[1];
    bora_tensor *bc1 = u->scalars[2], *eps = u->scalars[3], *rho = u->scalars[4];
    bora_tensor *mhat = bora_mul(g, m, bc1);
    bora_tensor *den = bora_maximum(g, A->scale(g, h, s->gamma), eps);
    bora_tensor *ratio = bora_div(g, mhat, den);
    bora_tensor *inside = bora_less(g, bora_unary(g, BORA_OP_ABS, ratio), rho);
    bora_status st = u->report(g, u, METRIC_UNCLIPPED, sum_all(g, inside));
    if (st == BORA_OK)
        st = u->report(g, u, METRIC_HESSIAN_NORM, sum_all(g, bora_mul(g, h, h)));
    return st == BORA_OK ? bora_graph_status(g) : st;
}

static const bora_optimizer_ops sophia_h_ops = {
    .hdr = {sizeof(bora_optimizer_ops), BORA_KIND_OPTIMIZER, "sophia_h",
            "Sophia with Hutchinson's Hessian estimate", sophia_h_keys},
    .create = create_h,
    .slots = sophia_slots,
    .scalars = sophia_scalars,
    .step_scalars = step_scalars,
    .build_update = update,
    .destroy = destroy,
    .hessian = hessian,
    .build_hessian_update = hessian_update,
    .metrics = sophia_metrics,
    .build_metrics = metrics,
};

static const bora_optimizer_ops sophia_g_ops = {
    .hdr = {sizeof(bora_optimizer_ops), BORA_KIND_OPTIMIZER, "sophia_g",
            "Sophia with the Gauss-Newton-Bartlett Hessian estimate", sophia_g_keys},
    .create = create_g,
    .slots = sophia_slots,
    .scalars = sophia_scalars,
    .step_scalars = step_scalars,
    .build_update = update,
    .destroy = destroy,
    .hessian = hessian,
    .build_hessian_update = hessian_update,
    .metrics = sophia_metrics,
    .build_metrics = metrics,
};

static bora_status sophia_init(const bora_host *h)
{
    bora_status st = h->add(h, &sophia_h_ops.hdr);
    return st == BORA_OK ? h->add(h, &sophia_g_ops.hdr) : st;
}

BORA_PLUGIN_DEFINE("sophia", "0.1.0", sophia_init, NULL)
