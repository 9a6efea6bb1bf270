/* tests/train/optimizer_dump.c — a few optimizer steps of a small set of parameters, dumped for
 * tests/train/optimizers_torch.py to check against optimizers written in float64 PyTorch: the
 * initial values, and for each step the learning rate given, the gradients the apply graph read
 * and the parameters after. The optimizer section is YAML (the case's), checked as `bora train`
 * checks it (its defaults filled in), and its groups made by the trainer's code
 * (core/train/groups.c).
 *
 * The loss is Σ (w²/2 + w³/4) over every parameter; its gradients w + 3w²/4 change with the
 * parameters, so each step's update feeds the next.
 *
 * It also says how the updates ran: how many fused kernels hold parameter updates, and how many
 * updates ran outside them.
 *
 * usage: optimizer_dump PLUGIN_DIR CASE OUT.json   (CASE: lion, muon, muon_plain, groups, muon_group) */
#include "../graph/rig.h"
#include "config/schema.h"
#include "train/groups.h"

#include <math.h>

typedef struct pdesc {
    const char *name;
    int64_t rows, cols; /* cols 0: a vector */
    int no_decay;
    int in_out; /* stored (fan_in, fan_out), as GPT-2's Conv1D: BORA_PARAM_IN_OUT */
} pdesc;

/* Matrices with rows < cols and rows > cols, a square one the decay mask leaves out, vectors;
 * emb.proj is a decayed matrix the "emb.*" group takes. The muon cases add a matrix stored
 * (fan_in, fan_out) = (3, 7), whose Keller scale is sqrt(7/3) where its first axis read as fan_out
 * would give 1. */
static const pdesc all_params[] = {
    {"emb.weight", 10, 4, 1, 0}, {"emb.bias", 4, 0, 1, 0}, {"emb.proj", 5, 4, 0, 0},
    {"h.0.w", 4, 6, 0, 0},       {"h.0.v", 7, 3, 0, 0},    {"h.0.b", 6, 0, 1, 0},
    {"h.0.n", 3, 3, 1, 0},
};
static const pdesc matrices[] = {
    {"h.0.w", 4, 6, 0, 0}, {"h.0.v", 7, 3, 0, 0}, {"h.0.n", 3, 3, 1, 0}, {"h.0.c", 3, 7, 0, 1}};

typedef struct tcase {
    const char *name, *yaml;
    const pdesc *params;
    size_t n_params;
} tcase;

static const tcase cases[] = {
    {"lion",
     "optimizer: {type: lion, learning_rate: 1e-2, beta1: 0.8, beta2: 0.97, weight_decay: 0.5}\n",
     all_params, 7},
    {"muon", "optimizer: {type: muon, learning_rate: 2e-2, weight_decay: 0.3}\n", matrices, 4},
    {"muon_plain",
     "optimizer: {type: muon, learning_rate: 2e-2, momentum: 0.9, nesterov: false, scale: "
     "match_rms_adamw}\n",
     matrices, 4},
    /* emb.bias matches both the first group (by name) and the second (ndim 1): the first wins;
     * emb.weight is no_decay and 2-D, as h.0.n, but the first group takes it; emb.proj, decayed,
     * shows the first group inheriting the base's weight_decay */
    {"groups",
     "optimizer:\n"
     "  type: muon\n"
     "  learning_rate: 2e-2\n"
     "  weight_decay: 0.3\n"
     "  groups:\n"
     "    - {match: [\"emb.*\", \"lm_head.*\"], type: adamw, learning_rate: 3e-3, beta2: 0.9}\n"
     "    - {ndim: 1, type: adamw, weight_decay: 0.0}\n"
     "    - {no_decay: true, ndim: 2, type: lion, learning_rate: 1e-3}\n",
     all_params, 7},
    /* the base's keys left at their defaults (Muon's weight_decay 0) are not the group's: AdamW
     * keeps its own (0.1) */
    {"muon_group",
     "optimizer: {type: muon, learning_rate: 2e-2, groups: [{match: \"h.0.v\", type: adamw, "
     "learning_rate: 1e-2}]}\n",
     matrices, 4},
};

static void dump_values(FILE *f, const float *v, size_t n)
{
    fputc('[', f);
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%s%.9g", i ? ", " : "", (double)v[i]);
    fputc(']', f);
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: optimizer_dump PLUGIN_DIR CASE OUT.json\n");
        return 2;
    }
    const tcase *tc = NULL;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (!strcmp(cases[i].name, argv[2]))
            tc = &cases[i];
    if (!tc) {
        fprintf(stderr, "optimizer_dump: no case '%s'\n", argv[2]);
        return 2;
    }
    rig r;
    rig_open(&r, argv[1], 2, 5);
    bora_cfg *cfg = bora_cfg_new();
    bora_config *opt = NULL;
    const bora_entry *e = NULL;
    double peak = 0;
    if (bora_cfg_load_string(cfg, "case.yaml", tc->yaml, strlen(tc->yaml)) != BORA_OK ||
        bora_config_check(cfg, r.reg, 1) != BORA_OK ||
        bora_config_select(opt = bora_cfg_child(bora_cfg_root(cfg), "optimizer"),
                           BORA_KIND_OPTIMIZER, r.reg, &e) != BORA_OK ||
        bora_cfg_float(opt, "learning_rate", 0, &peak) != BORA_OK) {
        bora_cfg_print_errors(cfg, stderr);
        return 1;
    }
    const bora_optimizer_ops *ops = (const bora_optimizer_ops *)e->ops;
    bora_optimizer *base = NULL;
    if (ops->create(&e->file->host, opt, &base) != BORA_OK) {
        fprintf(stderr, "optimizer_dump: %s\n", bora_error_get());
        return 1;
    }
    g_graph *train = g_graph_new(r.store, BORA_MODE_TRAIN);
    bora_graph *g = &train->pub;
    bora_tensor *loss = NULL;
    for (size_t i = 0; i < tc->n_params; i++) {
        const pdesc *p = &tc->params[i];
        bora_axis ax[2] = {{"r", p->rows}, {"c", p->cols}};
        const char *names[] = {"r", "c"};
        int nd = p->cols ? 2 : 1;
        bora_tensor *w = bora_param(g, p->name, BORA_DTYPE_F32, nd, ax, bora_init_normal(1.0),
                                    (p->no_decay ? BORA_PARAM_NO_DECAY : 0) |
                                        (p->in_out ? BORA_PARAM_IN_OUT : 0));
        bora_tensor *w2 = bora_mul(g, w, w);
        bora_tensor *term =
            bora_add(g, g->api->scale(g, w2, 0.5), g->api->scale(g, bora_mul(g, w2, w), 0.25));
        bora_tensor *sum = g->api->reduce(g, BORA_OP_SUM, term, nd, names);
        loss = loss ? bora_add(g, loss, sum) : sum;
    }
    train->output = loss;
    bora_opt_groups gs;
    bora_apply ap;
    if (g_autodiff(train, loss) != BORA_OK || g_finalize(train) != BORA_OK ||
        bora_opt_groups_make(opt, r.reg, e, base, peak, r.store, &gs) != BORA_OK ||
        bora_apply_build_groups(r.store, gs.n, gs.apply, gs.group_of, 0.0, &ap) != BORA_OK ||
        g_store_materialize(r.store) != BORA_OK) {
        fprintf(stderr, "optimizer_dump: %s\n", bora_error_get());
        return 1;
    }
    FILE *f = fopen(argv[3], "w");
    if (!f) {
        perror(argv[3]);
        return 1;
    }
    fprintf(f, "{\"case\": \"%s\", \"params\": [", tc->name);
    for (size_t i = 0; i < tc->n_params; i++) {
        const pdesc *p = &tc->params[i];
        fprintf(f, "%s\n  {\"name\": \"%s\", \"shape\": [%lld", i ? "," : "", p->name,
                (long long)p->rows);
        if (p->cols)
            fprintf(f, ", %lld", (long long)p->cols);
        fprintf(f,
                "], \"no_decay\": %s, \"in_out\": %s, \"init\": ", p->no_decay ? "true" : "false",
                p->in_out ? "true" : "false");
        dump_values(f, rig_param(&r, p->name), (size_t)(p->rows * (p->cols ? p->cols : 1)));
        fputc('}', f);
    }
    fprintf(f, "],\n \"steps\": [");
    static const double shape[] = {1.0, 0.8, 0.6, 0.4, 0.3}; /* the schedule's, at each step */
    for (int step = 1; step <= 5; step++) {
        double lr = peak * shape[step - 1], norm;
        if (g_run(train) != BORA_OK) {
            fprintf(stderr, "optimizer_dump: %s\n", bora_error_get());
            return 1;
        }
        fprintf(f, "%s\n  {\"lr_factor\": %.17g, \"grads\": [", step > 1 ? "," : "",
                shape[step - 1]);
        for (size_t i = 0; i < tc->n_params; i++) {
            const pdesc *p = &tc->params[i];
            fputs(i ? ", " : "", f);
            dump_values(f, rig_grad(&r, p->name), (size_t)(p->rows * (p->cols ? p->cols : 1)));
        }
        bora_metric mets[TR_MAX_METRICS];
        size_t n_mets;
        if (bora_apply_step(&ap, step, lr, &norm, mets, &n_mets) != BORA_OK) {
            fprintf(stderr, "optimizer_dump: %s\n", bora_error_get());
            return 1;
        }
        fputs("], \"params\": [", f);
        for (size_t i = 0; i < tc->n_params; i++) {
            const pdesc *p = &tc->params[i];
            fputs(i ? ", " : "", f);
            dump_values(f, rig_param(&r, p->name), (size_t)(p->rows * (p->cols ? p->cols : 1)));
        }
        fputs("]}", f);
    }
    /* how the updates ran: fused groups holding parameter updates, and updates outside them */
    int update_groups = 0, outside = 0;
    for (size_t k = 0; k < ap.g->n_fused; k++) {
        const g_fused *fu = &ap.g->fused[k];
        int assigns = 0;
        for (int i = 0; i < fu->n_steps * fu->n_segments; i++)
            assigns += fu->nodes[i]->op == G_ASSIGN && fu->nodes[i]->out[0]->storage == S_PARAM;
        update_groups += assigns > 0;
    }
    for (size_t i = 0; i < ap.g->n_nodes; i++)
        outside += ap.g->nodes[i]->op == G_ASSIGN && ap.g->nodes[i]->out[0]->storage == S_PARAM &&
                   !ap.g->nodes[i]->fused;
    fprintf(f, "],\n \"fused_update_groups\": %d, \"updates_outside\": %d}\n", update_groups,
            outside);
    fclose(f);
    bora_apply_free(&ap);
    bora_opt_groups_free(&gs);
    ops->destroy(base);
    g_graph_free(train);
    bora_cfg_free(cfg);
    rig_close(&r);
    return 0;
}
