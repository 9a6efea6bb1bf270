/* tests/plugins/metric_optimizer.c — "metric_sgd": SGD with momentum that reports one metric of
 * each reduction, for the tests of how the host sums optimizer metrics (train.mpi_metrics_shard:
 * a sharded run's sums must be one process's bits). The update: b <- 0.9·b + g, p <- p - lr·b.
 * Reports: optim/grad_sq (a norm: Σg² in the update), optim/param_mean (a mean over elements:
 * of b after the update, as the parameter itself is not read after its assign in the same graph)
 * and optim/momentum_sum (a sum: Σb after the update). */
#include <bora/optimizer.h>

typedef struct metric_sgd {
    const bora_host *h;
} metric_sgd;

static const char *const slots[] = {"momentum", NULL};
static const char *const scalars[] = {"lr", NULL};
enum { GRAD_SQ, PARAM_MEAN, MOMENTUM_SUM };
static const bora_optimizer_metric metrics[] = {
    {"optim/grad_sq", BORA_METRIC_NORM, 0},
    {"optim/param_mean", BORA_METRIC_MEAN, 0},
    {"optim/momentum_sum", BORA_METRIC_SUM, 0},
    {NULL, 0, 0},
};

static bora_status create(const bora_host *h, const bora_config *cfg, bora_optimizer **out)
{
    (void)cfg;
    metric_sgd *o = h->alloc(h, sizeof *o, 16);
    if (!o)
        return h->fail(h, BORA_ERR_NOMEM, "out of memory");
    o->h = h;
    *out = (bora_optimizer *)o;
    return BORA_OK;
}

static bora_status step_scalars(bora_optimizer *o, int64_t step, double lr, double *v)
{
    (void)o, (void)step;
    v[0] = lr;
    return BORA_OK;
}

/* The sum of all of x's elements in f64, a 0-d tensor: values with all of f64's bits, whose sums
 * depend on the order they are added in (f32 values would add exactly). */
static bora_tensor *sum_all(bora_graph *g, bora_tensor *x)
{
    const bora_graph_api *A = g->api;
    x = A->cast(g, x, BORA_DTYPE_F64);
    int32_t n = A->ndim(x);
    const char *axes[BORA_MAX_DIMS];
    for (int32_t i = 0; i < n; i++)
        axes[i] = A->axis(x, i).name;
    return A->reduce(g, BORA_OP_SUM, x, n, axes);
}

static bora_status update(bora_optimizer *o, bora_graph *g, const bora_param_update *u)
{
    (void)o;
    const bora_graph_api *A = g->api;
    bora_tensor *b = u->state[0], *lr = u->scalars[0];
    bora_tensor *b_decayed = A->scale(g, b, 0.9);
    bora_tensor *b2 = bora_add(g, b_decayed, u->grad);
    bora_tensor *p2 = bora_sub(g, u->param, bora_mul(g, b2, lr));
    bora_status st = A->assign(g, b, b2);
    if (st == BORA_OK)
        st = A->assign(g, u->param, p2);
    if (st == BORA_OK)
        st = u->report(g, u, GRAD_SQ, sum_all(g, bora_mul(g, u->grad, u->grad)));
    return st == BORA_OK ? bora_graph_status(g) : st;
}

static bora_status report(bora_optimizer *o, bora_graph *g, const bora_param_update *u)
{
    (void)o;
    bora_status st = u->report(g, u, PARAM_MEAN, sum_all(g, u->state[0]));
    if (st == BORA_OK)
        st = u->report(g, u, MOMENTUM_SUM, sum_all(g, u->state[0]));
    return st;
}

static void destroy(bora_optimizer *o)
{
    metric_sgd *s = (metric_sgd *)o;
    s->h->free(s->h, s);
}

static const bora_optimizer_ops ops = {
    .hdr = BORA_COMPONENT(bora_optimizer_ops, BORA_KIND_OPTIMIZER, "metric_sgd",
                          "SGD with momentum reporting a norm, a mean and a sum (tests)"),
    .create = create,
    .slots = slots,
    .scalars = scalars,
    .step_scalars = step_scalars,
    .build_update = update,
    .destroy = destroy,
    .metrics = metrics,
    .build_metrics = report,
};

static bora_status init(const bora_host *h)
{
    return h->add(h, &ops.hdr);
}

BORA_PLUGIN_DEFINE("metric_sgd", "1.0.0", init, NULL)
