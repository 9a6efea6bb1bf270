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

/* What build_update() receives for one parameter. */
typedef struct bora_param_update {
    uint32_t struct_size;
    uint32_t weight_decay;       /* 1 when the host's decay mask includes this parameter */
    const char *name;            /* the Hugging Face parameter name */
    bora_tensor *param;          /* update it with assign(g, param, new value) */
    bora_tensor *grad;           /* already scaled by the host's clipping factor */
    bora_tensor *const *state;   /* one tensor per slot, in the order of ops->slots; assign too */
    bora_tensor *const *scalars; /* one 0-d f32 input per name in ops->scalars */
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
} bora_optimizer_ops;

#ifdef __cplusplus
}
#endif
#endif /* BORA_OPTIMIZER_H */
