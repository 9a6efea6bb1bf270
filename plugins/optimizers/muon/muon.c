/* plugins/optimizers/muon — Muon (Jordan et al. 2024, github.com/KellerJordan/Muon): momentum
 * orthogonalized by a quintic Newton–Schulz iteration, for matrices.
 *   buf <- β·buf + (1-β)·g
 *   u    = nesterov ? (1-β)·g + β·buf : buf
 *   X    = u / (‖u‖_F + 1e-7); five times: A = X·Xᵀ, X <- a·X + (b·A + c·A·A)·X
 *          (X's shorter axis is the one A spans: the reference transposes when rows > cols)
 *   p   <- p·(1 - lr·λ) - lr·s·X          (the decay only where the host's mask includes p)
 * with (a, b, c) = (3.4445, -4.7750, 2.0315) and s = max(1, rows/cols)^0.5 (Keller's rule) or
 * 0.2·sqrt(max(rows, cols)) (scale: match_rms_adamw; Liu et al. 2025). Rows are fan_out: a
 * parameter's first axis, or its second where it is flagged BORA_PARAM_IN_OUT (GPT-2's Conv1D).
 * Built from bora_dot on named axes, in f32 (the reference iterates in bf16). */
#include <bora/optimizer.h>

#include <math.h>
#include <stddef.h>
#include <string.h>

typedef struct muon {
    const bora_host *h;
    double momentum, weight_decay;
    int nesterov, match_rms;
} muon;

static const bora_key muon_keys[] = {
    {"momentum", BORA_KEY_FLOAT, 0, "0.95", "decay β of the momentum buffer, in [0, 1)"},
    {"nesterov", BORA_KEY_BOOL, 0, "true",
     "orthogonalize (1-β)·g + β·buf rather than the buffer itself"},
    {"weight_decay", BORA_KEY_FLOAT, 0, "0.0",
     "decoupled weight decay λ, 0 or more (not where the model's mask excludes it: norms, biases, "
     "GPT-2's embeddings)"},
    {"scale", BORA_KEY_STRING, 0, "keller",
     "the update's scale: keller, max(1, fan_out/fan_in)^0.5; or match_rms_adamw, "
     "0.2·sqrt(max(rows, cols))"},
    {NULL, 0, 0, NULL, NULL},
};

static const char *const muon_slots[] = {"momentum", NULL};
/* keep = 1 - lr·λ, lr */
static const char *const muon_scalars[] = {"keep", "lr", NULL};

/* The quintic iteration's coefficients and its count (Keller Jordan's). */
static const double ns_a = 3.4445, ns_b = -4.7750, ns_c = 2.0315;
enum { NS_STEPS = 5 };

static bora_status muon_create(const bora_host *h, const bora_config *cfg, bora_optimizer **out)
{
    muon *m = h->alloc(h, sizeof *m, 16);
    if (!m)
        return h->fail(h, BORA_ERR_NOMEM, "out of memory");
    m->h = h;
    const char *scale = "keller";
    bora_status st = h->config_float(h, cfg, "momentum", 0.95, &m->momentum);
    if (st == BORA_OK)
        st = h->config_bool(h, cfg, "nesterov", 1, &m->nesterov);
    if (st == BORA_OK)
        st = h->config_float(h, cfg, "weight_decay", 0.0, &m->weight_decay);
    if (st == BORA_OK)
        st = h->config_string(h, cfg, "scale", "keller", &scale);
    if (st == BORA_OK && !(m->momentum >= 0 && m->momentum < 1))
        st = h->fail(h, BORA_ERR_CONFIG, "optimizer.momentum: %g is not in [0, 1)", m->momentum);
    if (st == BORA_OK && !(m->weight_decay >= 0 && isfinite(m->weight_decay)))
        st = h->fail(h, BORA_ERR_CONFIG, "optimizer.weight_decay: %g is not 0 or more",
                     m->weight_decay);
    if (st == BORA_OK && strcmp(scale, "keller") != 0 && strcmp(scale, "match_rms_adamw") != 0)
        st = h->fail(h, BORA_ERR_CONFIG,
                     "optimizer.scale: '%s' is not a scale rule; keller or match_rms_adamw", scale);
    m->match_rms = st == BORA_OK && !strcmp(scale, "match_rms_adamw");
    if (st != BORA_OK) {
        h->free(h, m);
        return st;
    }
    *out = (bora_optimizer *)m;
    return BORA_OK;
}

static void muon_destroy(bora_optimizer *o)
{
    muon *m = (muon *)o;
    m->h->free(m->h, m);
}

static bora_status muon_step_scalars(bora_optimizer *o, int64_t step, double lr, double *v)
{
    const muon *m = (const muon *)o;
    if (step < 1)
        return m->h->fail(m->h, BORA_ERR_INVALID, "optimizer steps count from 1, not %lld",
                          (long long)step);
    v[0] = 1.0 - lr * m->weight_decay;
    v[1] = lr;
    return BORA_OK;
}

/* The name the Gram matrices' second axis takes while the iteration runs. */
static const char *const other = "muon.other";

/* X (gram, contract) -> the five iterations' result; A = X·Xᵀ spans the gram axis. */
static bora_tensor *newton_schulz(bora_graph *g, bora_tensor *x, const char *gram,
                                  const char *contract)
{
    const bora_graph_api *A = g->api;
    const char *over_contract[] = {contract}, *over_other[] = {other};
    for (int i = 0; i < NS_STEPS; i++) {
        bora_tensor *xt = bora_rename(g, x, gram, other);       /* (other, contract) */
        bora_tensor *gm = bora_dot(g, x, xt, 1, over_contract); /* A: (gram, other) */
        /* A·A: A's second axis against the first of a copy of A renamed (other, other') */
        bora_tensor *right = bora_rename(g, bora_rename(g, gm, other, "muon.other2"), gram, other);
        bora_tensor *gm2 = bora_rename(g, bora_dot(g, gm, right, 1, over_other), "muon.other2",
                                       other); /* (gram, other) */
        bora_tensor *b1 = A->scale(g, gm, ns_b), *b2 = A->scale(g, gm2, ns_c);
        bora_tensor *bm = bora_add(g, b1, b2);
        bora_tensor *bx = bora_dot(g, bm, xt, 1, over_other); /* (gram, contract) */
        bora_tensor *ax = A->scale(g, x, ns_a);
        x = bora_add(g, ax, bx);
    }
    return x;
}

static bora_status muon_update(bora_optimizer *o, bora_graph *g, const bora_param_update *u)
{
    const muon *mu = (const muon *)o;
    const bora_graph_api *A = g->api;
    if (A->ndim(u->param) != 2)
        return mu->h->fail(mu->h, BORA_ERR_CONFIG,
                           "parameter '%s' has %d axes; Muon updates matrices only: give it "
                           "another optimizer with optimizer.groups, such as {ndim: 1, type: "
                           "adamw} (plugins/optimizers/muon/README.md)",
                           u->name, (int)A->ndim(u->param));
    bora_axis rows = A->axis(u->param, 0), cols = A->axis(u->param, 1);
    bora_tensor *gr = u->grad, *buf = u->state[0], *keep = u->scalars[0], *lr = u->scalars[1];
    double beta = mu->momentum;
    bora_tensor *b1 = A->scale(g, buf, beta), *g1 = A->scale(g, gr, 1.0 - beta);
    bora_tensor *buf2 = bora_add(g, b1, g1);
    bora_tensor *upd = buf2;
    if (mu->nesterov) {
        bora_tensor *g2 = A->scale(g, gr, 1.0 - beta), *b2 = A->scale(g, buf2, beta);
        upd = bora_add(g, g2, b2);
    }
    /* X = u / (‖u‖_F + 1e-7) */
    const char *both[] = {rows.name, cols.name};
    bora_tensor *sq = A->reduce(g, BORA_OP_SUM, bora_mul(g, upd, upd), 2, both);
    bora_tensor *nrm = bora_unary(g, BORA_OP_SQRT, sq);
    bora_tensor *den = bora_add(g, nrm, bora_scalar_like(g, nrm, 1e-7));
    bora_tensor *x = bora_div(g, upd, den);
    x = rows.size > cols.size ? newton_schulz(g, x, cols.name, rows.name)
                              : newton_schulz(g, x, rows.name, cols.name);
    /* Keller's rule reads an nn.Linear, (fan_out, fan_in): max(1, fan_out/fan_in)^0.5; a
     * matrix flagged BORA_PARAM_IN_OUT (GPT-2's Conv1D) is stored the other way round */
    int in_out = u->struct_size >= offsetof(bora_param_update, flags) + sizeof u->flags &&
                 (u->flags & BORA_PARAM_IN_OUT);
    double fan_out = (double)(in_out ? cols.size : rows.size);
    double fan_in = (double)(in_out ? rows.size : cols.size);
    double s = mu->match_rms ? 0.2 * sqrt(fan_out > fan_in ? fan_out : fan_in)
                             : sqrt(fan_out / fan_in > 1 ? fan_out / fan_in : 1);
    bora_tensor *p = u->param;
    if (u->weight_decay)
        p = bora_mul(g, p, keep);
    bora_tensor *step = bora_mul(g, A->scale(g, x, s), lr);
    bora_tensor *p2 = bora_sub(g, p, step);
    bora_status st = A->assign(g, buf, buf2);
    if (st == BORA_OK)
        st = A->assign(g, u->param, p2);
    return st == BORA_OK ? bora_graph_status(g) : st;
}

static const bora_optimizer_ops muon_ops = {
    .hdr = {sizeof(bora_optimizer_ops), BORA_KIND_OPTIMIZER, "muon",
            "Muon: momentum orthogonalized by Newton-Schulz, for matrices", muon_keys},
    .create = muon_create,
    .slots = muon_slots,
    .scalars = muon_scalars,
    .step_scalars = muon_step_scalars,
    .build_update = muon_update,
    .destroy = muon_destroy,
};

static bora_status muon_init(const bora_host *h)
{
    return h->add(h, &muon_ops.hdr);
}

BORA_PLUGIN_DEFINE("muon", "0.1.0", muon_init, NULL)
