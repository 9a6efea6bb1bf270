/* tests/train/sophia_dump.c — a few Sophia steps of a small GPT-2 (the gpt2 plugin), run as
 * `bora train` runs them (core/train/trainer.c, step_once: the micro-batches into the gradients,
 * on estimate steps the Hessian estimate (core/train/hessian.c) folded into the optimizer's
 * state, then the apply graph), and dumped for tests/train/sophia_torch.py to check against
 * Sophia written in float64 PyTorch:
 *   OUT/model.safetensors    the initial parameters (Hugging Face names), OUT/config.json;
 *   OUT/inputs.safetensors   input_ids and targets, (steps, rows, seq_len), some targets -100;
 *   OUT/step-K.safetensors   the parameters after step K (param.NAME) and, on estimate steps,
 *                            the store's tangent (tangent.NAME: Hutchinson's z) and hvp blocks
 *                            (hvp.NAME: H·z, or Gauss-Newton-Bartlett's ĝ);
 *   OUT/run.json             the case, its learning rates, seed, micro-batch size and each
 *                            step's logged metrics.
 * No checkpoint or data loader: the rows are made here, so the reference reads the same ones.
 *
 * usage: sophia_dump PLUGIN_DIR CASE OUT_DIR
 *   CASE: h, h_micro (2 micro-batches of 4 rows, not 1 of 8), g, g_micro, g_first (g_micro with
 *         hessian_micro_batches: 1) */
#include "../graph/rig.h"
#include "ckpt/safetensors.h"
#include "config/schema.h"
#include "train/groups.h"
#include "train/hessian.h"
#include "train/inputs.h"

#include <math.h>

#define ROWS 8
#define T 16
#define V 50
#define STEPS 4
#define SEED 5

typedef struct tcase {
    const char *name, *optimizer;
    int64_t micro;
} tcase;

/* γ and ρ chosen so that some coordinates are clipped and some are not; ε so that a
 * coordinate's ratio m̂ / max(γ·h, ε) is not f32 noise over f32 noise (the attention's key
 * biases have zero gradient and curvature in exact arithmetic). */
#define SOPHIA_KEYS                                                              \
    "learning_rate: 2e-2, beta1: 0.9, beta2: 0.9, rho: 0.5, weight_decay: 0.3, " \
    "update_interval: 2"
#define SOPHIA_H "{type: sophia_h, gamma: 2.0, epsilon: 5e-3, " SOPHIA_KEYS
#define SOPHIA_G "{type: sophia_g, gamma: 4.0, epsilon: 1e-3, " SOPHIA_KEYS
static const tcase cases[] = {
    {"h", SOPHIA_H "}", ROWS},
    {"h_micro", SOPHIA_H "}", ROWS / 2},
    {"g", SOPHIA_G "}", ROWS},
    {"g_micro", SOPHIA_G "}", ROWS / 2},
    {"g_first", SOPHIA_G ", hessian_micro_batches: 1}", ROWS / 2},
};
static const double lr_factor[STEPS] = {1.0, 0.8, 0.6, 0.4}; /* the schedule's, at each step */

static int fail(const char *what)
{
    fprintf(stderr, "sophia_dump: %s: %s\n", what, bora_error_get());
    return 1;
}

/* Every parameter (param.NAME), and with hess its tangent and hvp blocks, into path. */
static int write_step(g_store *s, const char *path, int hess)
{
    size_t n = s->n_slots, k = 0;
    bora_st_entry *e = calloc(3 * n, sizeof *e);
    char **names = calloc(3 * n, sizeof *names);
    float **data = calloc(3 * n, sizeof *data);
    static const char *const prefix[3] = {"param", "tangent", "hvp"};
    static const int block[3] = {S_PARAM, S_TANGENT, S_HVP};
    int rc = !e || !names || !data;
    for (size_t i = 0; i < n && !rc; i++) {
        const g_slot *p = &s->slots[i];
        for (int b = 0; b < (hess ? 3 : 1) && !rc; b++, k++) {
            names[k] = malloc(strlen(p->name) + 16);
            data[k] = malloc(p->nbytes);
            rc = !names[k] || !data[k] || p->dtype != BORA_DTYPE_F32;
            if (!rc) {
                sprintf(names[k], "%s.%s", prefix[b], p->name);
                rc = g_store_read(s, block[b], (long)i, data[k], p->nbytes) != BORA_OK;
            }
            e[k] = (bora_st_entry){names[k], BORA_DTYPE_F32, p->ndim, p->dims, data[k]};
        }
    }
    if (!rc)
        rc = bora_st_write(path, e, k, NULL, 0) != BORA_OK;
    for (size_t i = 0; names && data && i < 3 * n; i++) {
        free(names[i]);
        free(data[i]);
    }
    free(names);
    free(data);
    free(e);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: sophia_dump PLUGIN_DIR CASE OUT_DIR\n");
        return 2;
    }
    const tcase *tc = NULL;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (!strcmp(cases[i].name, argv[2]))
            tc = &cases[i];
    if (!tc) {
        fprintf(stderr, "sophia_dump: no case '%s'\n", argv[2]);
        return 2;
    }
    rig r;
    rig_open(&r, argv[1], 2, SEED);
    const bora_entry *me = bora_registry_find(r.reg, BORA_KIND_MODEL, "gpt2");
    if (!me)
        return fail("gpt2");
    const bora_model_ops *mops = (const bora_model_ops *)me->ops;
    char yaml[1024];
    snprintf(yaml, sizeof yaml,
             "model: {type: gpt2, seq_len: %d, hidden_dim: 16, num_layers: 1, num_heads: 2, "
             "vocab_size: %d, initializer_range: 0.3}\noptimizer: %s\n",
             T, V, tc->optimizer);
    bora_cfg *cfg = bora_cfg_new();
    bora_config *opt = NULL;
    const bora_entry *e = NULL;
    double peak = 0;
    if (bora_cfg_load_string(cfg, "case.yaml", yaml, strlen(yaml)) != BORA_OK ||
        bora_config_check(cfg, r.reg, 1) != BORA_OK ||
        bora_config_select(opt = bora_cfg_child(bora_cfg_root(cfg), "optimizer"),
                           BORA_KIND_OPTIMIZER, r.reg, &e) != BORA_OK ||
        bora_cfg_float(opt, "learning_rate", 0, &peak) != BORA_OK) {
        bora_cfg_print_errors(cfg, stderr);
        return 1;
    }
    const bora_optimizer_ops *ops = (const bora_optimizer_ops *)e->ops;
    bora_optimizer *base = NULL;
    bora_model *model = NULL;
    if (ops->create(&e->file->host, opt, &base) != BORA_OK ||
        mops->create(&me->file->host, bora_cfg_child(bora_cfg_root(cfg), "model"), &model))
        return fail("create");

    /* the train graph as the trainer builds it: the summed loss times loss_scale */
    g_graph *train = g_graph_new(r.store, BORA_MODE_TRAIN);
    train->batch = tc->micro;
    train->grads_write = tc->micro == ROWS;
    bora_graph *g = &train->pub;
    bora_tensor *loss_sum = NULL;
    if (mops->build(model, g, BORA_MODE_TRAIN, &loss_sum) != BORA_OK)
        return fail("build");
    bora_tensor *scale_in = bora_input(g, "loss_scale", BORA_DTYPE_F32, 0, NULL);
    train->output = bora_mul(g, loss_sum, scale_in);
    bora_opt_groups gs;
    bora_apply ap;
    bora_hessian hess;
    bora_hessian_spec spec;
    unsigned char wants[8] = {0};
    if (g_autodiff(train, train->output) != BORA_OK || g_finalize(train) != BORA_OK)
        return fail(train->error);
    if (bora_opt_groups_make(opt, r.reg, e, base, peak, r.store, &gs) != BORA_OK ||
        bora_apply_build_groups(r.store, gs.n, gs.apply, gs.group_of, 0.0, &ap) != BORA_OK ||
        bora_hessian_wanted(&ap, &spec, wants) != 1 ||
        bora_hessian_build(&hess, r.store, mops, model, tc->micro, &ap, gs.group_of, wants,
                           &spec) != BORA_OK ||
        g_store_materialize(r.store) != BORA_OK)
        return fail("the apply and estimate graphs");
    hess.seq_len = T;

    /* each step's rows: ids from an LCG, targets the next id, -100 at each row's end and at
     * every seventh cell */
    static int32_t ids[STEPS][ROWS * T], targets[STEPS][ROWS * T], segs[ROWS * T];
    uint32_t x = 12345;
    for (int s = 0; s < STEPS; s++)
        for (int i = 0; i < ROWS * T; i++) {
            x = x * 1103515245u + 12345u;
            ids[s][i] = (int32_t)((x >> 16) % V);
        }
    for (int s = 0; s < STEPS; s++)
        for (int i = 0; i < ROWS * T; i++)
            targets[s][i] = (i % T == T - 1 || i % 7 == 3) ? -100 : ids[s][i + 1];

    char path[4096];
    size_t n = r.store->n_slots;
    bora_st_entry *pe = calloc(n, sizeof *pe);
    for (size_t i = 0; i < n; i++) {
        const g_slot *s = &r.store->slots[i];
        pe[i] =
            (bora_st_entry){s->name, s->dtype, s->ndim, s->dims, r.store->param_ptr + s->offset};
    }
    int64_t ishape[3] = {STEPS, ROWS, T};
    bora_st_entry ins[2] = {{"input_ids", BORA_DTYPE_I32, 3, ishape, ids},
                            {"targets", BORA_DTYPE_I32, 3, ishape, targets}};
    char cfgbuf[2048];
    size_t cl;
    snprintf(path, sizeof path, "%s/model.safetensors", argv[3]);
    if (bora_st_write(path, pe, n, NULL, 0) != BORA_OK)
        return fail(path);
    snprintf(path, sizeof path, "%s/inputs.safetensors", argv[3]);
    if (bora_st_write(path, ins, 2, NULL, 0) != BORA_OK)
        return fail(path);
    snprintf(path, sizeof path, "%s/config.json", argv[3]);
    FILE *f = fopen(path, "w");
    if (!f || mops->hf_config(model, cfgbuf, sizeof cfgbuf, &cl) != BORA_OK)
        return fail(path);
    fwrite(cfgbuf, 1, cl, f);
    fclose(f);
    free(pe);

    snprintf(path, sizeof path, "%s/run.json", argv[3]);
    FILE *js = fopen(path, "w");
    if (!js)
        return fail(path);
    fprintf(js, "{\"case\": \"%s\", \"seed\": %d, \"micro\": %lld, \"steps\": [", tc->name, SEED,
            (long long)tc->micro);
    int64_t cells = tc->micro * T, n_micro = ROWS / tc->micro;
    for (int step = 1; step <= STEPS; step++) {
        double lr = peak * lr_factor[step - 1], norm = 0;
        int64_t count = 0;
        for (int i = 0; i < ROWS * T; i++)
            count += targets[step - 1][i] != -100;
        float scale = (float)(1.0 / (double)count);
        for (int64_t m = 0; m < n_micro; m++) {
            size_t at = (size_t)(m * cells), bytes = (size_t)cells * sizeof(int32_t);
            if (g_set_input(train, "input_ids", ids[step - 1] + at, bytes) ||
                g_set_input(train, "targets", targets[step - 1] + at, bytes) ||
                (bora_inputs_reads(train, "segment_ids") &&
                 g_set_input(train, "segment_ids", segs, bytes)) ||
                g_set_input(train, "loss_scale", &scale, sizeof scale) || g_run(train))
                return fail(train->status ? train->error : "train");
        }
        bora_metric mets[2 * TR_MAX_METRICS + 2];
        size_t n_hess = 0, n_opt = 0;
        int due = bora_hessian_due(&hess, step);
        if (due && bora_hessian_step(&hess, step, lr, ids[step - 1], targets[step - 1], segs,
                                     tc->micro, n_micro, mets, &n_hess) != BORA_OK)
            return fail("estimate");
        if (bora_apply_step(&ap, step, lr, &norm, mets + n_hess, &n_opt) != BORA_OK)
            return fail("apply");
        snprintf(path, sizeof path, "%s/step-%d.safetensors", argv[3], step);
        if (write_step(r.store, path, due))
            return fail(path);
        fprintf(js, "%s\n  {\"lr_factor\": %.17g, \"estimate\": %s, \"metrics\": {",
                step > 1 ? "," : "", lr_factor[step - 1], due ? "true" : "false");
        for (size_t i = 0; i < n_hess + n_opt; i++)
            fprintf(js, "%s\"%s\": %.17g", i ? ", " : "", mets[i].name, mets[i].value);
        fputs("}}", js);
    }
    fputs("]}\n", js);
    fclose(js);
    bora_hessian_free(&hess);
    bora_apply_free(&ap);
    bora_opt_groups_free(&gs);
    ops->destroy(base);
    mops->destroy(model);
    g_graph_free(train);
    bora_cfg_free(cfg);
    rig_close(&r);
    return 0;
}
