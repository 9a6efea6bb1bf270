/* bora/optimizer.h — optimizers, written as graph ops.
 *
 * An optimizer declares per-parameter state slots (AdamW: "m" and "v") and builds each
 * parameter's update from graph ops; learning-rate schedules, warm-up, weight-decay masks and
 * gradient clipping belong to the host, so every optimizer gets them (docs/design.md §5). A
 * worked example, a complete optimizer plugin, plain SGD:
 *
 *     #include <bora/optimizer.h>
 *
 *     typedef struct sgd { const bora_host *h; } sgd;
 *
 *     static const char *const sgd_slots[] = {NULL};      // no state
 *     static const char *const sgd_scalars[] = {"lr", NULL};
 *
 *     static bora_status sgd_create(const bora_host *h, const bora_config *cfg,
 *                                   bora_optimizer **out)
 *     {
 *         (void)cfg; // the host reads learning_rate, the schedule and clipping itself
 *         sgd *o = h->alloc(h, sizeof *o, 16);
 *         if (!o)
 *             return h->fail(h, BORA_ERR_NOMEM, "out of memory");
 *         o->h = h;
 *         *out = (bora_optimizer *)o;
 *         return BORA_OK;
 *     }
 *     static bora_status sgd_scalars_for(bora_optimizer *o, int64_t step, double lr, double *v)
 *     {
 *         (void)o;
 *         (void)step;
 *         v[0] = lr;
 *         return BORA_OK;
 *     }
 *     static bora_status sgd_update(bora_optimizer *o, bora_graph *g, const bora_param_update *u)
 *     {
 *         (void)o;
 *         // param <- param - lr * grad, with lr a 0-d per-step input
 *         bora_tensor *step = bora_mul(g, u->grad, u->scalars[0]);
 *         return g->api->assign(g, u->param, bora_sub(g, u->param, step));
 *     }
 *     static void sgd_destroy(bora_optimizer *o)
 *     {
 *         sgd *s = (sgd *)o;
 *         s->h->free(s->h, s);
 *     }
 *     static const bora_optimizer_ops sgd_ops = {
 *         .hdr = BORA_COMPONENT(bora_optimizer_ops, BORA_KIND_OPTIMIZER, "sgd", "plain SGD"),
 *         .create = sgd_create,
 *         .slots = sgd_slots,
 *         .scalars = sgd_scalars,
 *         .step_scalars = sgd_scalars_for,
 *         .build_update = sgd_update,
 *         .destroy = sgd_destroy,
 *     };
 *     static bora_status sgd_init(const bora_host *h)
 *     {
 *         return h->add(h, &sgd_ops.hdr);
 *     }
 *     BORA_PLUGIN_DEFINE("sgd", "1.0.0", sgd_init, NULL)
 */
#ifndef BORA_OPTIMIZER_H
#define BORA_OPTIMIZER_H

#include <bora/graph.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bora_optimizer bora_optimizer; /* an optimizer instance; owned by its plugin */

/* ABI 1.11: the second-order estimates the host can make for an optimizer (docs/optimizers.md). */
typedef enum bora_hessian_kind {
    BORA_HESSIAN_NONE = 0,
    /* Hutchinson's diagonal estimate z ⊙ (H z), H the Hessian of the training loss and z standard
     * normal, drawn with Philox keyed by (seed, step, parameter name, element) */
    BORA_HESSIAN_HUTCHINSON = 1,
    /* Gauss-Newton-Bartlett: B · ĝ ⊙ ĝ, ĝ the gradient of the mean loss at labels drawn from the
     * model's own softmax (BORA_OP_SAMPLE), B the estimate's count of loss tokens */
    BORA_HESSIAN_GNB = 2
} bora_hessian_kind;

/* What an optimizer asks of the host's estimate (ABI 1.11). */
typedef struct bora_hessian_spec {
    uint32_t struct_size;
    int32_t kind;          /* a bora_hessian_kind */
    int64_t interval;      /* estimate at steps 1, 1 + interval, 1 + 2·interval, ... (>= 1) */
    int64_t micro_batches; /* of the step's micro-batches, the first this many (0: all) */
} bora_hessian_spec;

/* How a metric's per-parameter reports combine into the value logged each step (ABI 1.11). */
typedef enum bora_metric_reduce {
    BORA_METRIC_SUM = 1,  /* the sum of the reports */
    BORA_METRIC_NORM = 2, /* the square root of the sum (report squared sums) */
    BORA_METRIC_MEAN = 3  /* the sum over the element count of the parameters reported */
} bora_metric_reduce;

typedef struct bora_optimizer_metric {
    const char *name; /* as logged: "optim/hessian_norm" */
    int32_t reduce;   /* a bora_metric_reduce */
    int32_t reserved;
} bora_optimizer_metric;

/* What build_update() receives for one parameter. */
typedef struct bora_param_update {
    uint32_t struct_size;
    uint32_t weight_decay;       /* 1 when the host's decay mask includes this parameter */
    const char *name;            /* the Hugging Face parameter name */
    bora_tensor *param;          /* update it with assign(g, param, new value) */
    bora_tensor *grad;           /* already scaled by the host's clipping factor */
    bora_tensor *const *state;   /* one tensor per slot, in the order of ops->slots; assign too */
    bora_tensor *const *scalars; /* one 0-d f32 input per name in ops->scalars */
    /* ABI 1.11: add value (0-d, any float dtype) to this step's metric i of ops->metrics; the
     * host sums the reports in f64 in the apply graph's fixed order. NULL on an older host. */
    bora_status (*report)(bora_graph *g, const struct bora_param_update *u, int32_t metric,
                          bora_tensor *value);
    void *host_private;
    /* ABI 1.11: the parameter's BORA_PARAM_* flags (BORA_PARAM_IN_OUT: a matrix stored
     * (fan_in, fan_out)); read it only where struct_size reaches it. */
    uint32_t flags;
} bora_param_update;

typedef struct bora_optimizer_ops {
    bora_component hdr;

    /* Read the optimizer's configuration subtree (optimizer: in YAML). */
    bora_status (*create)(const bora_host *h, const bora_config *cfg, bora_optimizer **out);
    /* Names of the per-parameter state slots, NULL-terminated; saved in checkpoints as
     * <slot>.<parameter name>, zero at the start. */
    const char *const *slots;
    /* Names of the per-step scalars the update reads, NULL-terminated (e.g. "lr"). */
    const char *const *scalars;
    /* Their values for a step (1-based), given the schedule's learning rate; computed on the
     * host in f64 (bias corrections and the like), so the graph is never rebuilt. */
    bora_status (*step_scalars)(bora_optimizer *o, int64_t step, double learning_rate,
                                double *values);
    /* Append the update of one parameter to the apply graph. */
    bora_status (*build_update)(bora_optimizer *o, bora_graph *g, const bora_param_update *u);
    void (*destroy)(bora_optimizer *o);

    /* ABI 1.11, all optional. The estimate this instance wants, if any (fill spec; its kind
     * stays BORA_HESSIAN_NONE for none). On an estimate step the host computes it at the step's
     * parameters, before the update, and calls build_hessian_update for every parameter with
     * u->grad the estimate (the state and scalars as for build_update, the scalars those of the
     * same step): the optimizer folds it into its state there (an EMA), then build_update runs. */
    bora_status (*hessian)(bora_optimizer *o, bora_hessian_spec *spec);
    bora_status (*build_hessian_update)(bora_optimizer *o, bora_graph *g,
                                        const bora_param_update *u);
    /* Metrics the updates report through u->report, terminated by a NULL name; logged by the
     * host at every step (a metric reported only on estimate steps is logged on those). */
    const bora_optimizer_metric *metrics;
    /* Optional: called for every parameter after every parameter's build_update, with u->state
     * holding the updated state (u->grad as the update saw it): report metrics here rather than
     * in build_update, so that their sums do not sit between two parameters' updates and the
     * updates still run as one multi-tensor pass. */
    bora_status (*build_metrics)(bora_optimizer *o, bora_graph *g, const bora_param_update *u);
} bora_optimizer_ops;

#ifdef __cplusplus
}
#endif
#endif /* BORA_OPTIMIZER_H */
