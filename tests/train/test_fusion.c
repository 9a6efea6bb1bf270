/* tests/train/test_fusion.c — elementwise fusion and the multi-tensor optimizer pass: three
 * training steps (train graph, then the apply graph with the adamw plugin and clipping) over
 * parameters of odd sizes (3×2 up to 37×1000, some with weight decay, some without), once fused
 * and once with BORA_NO_FUSION=1. Parameters, both moments, gradient norms and the loss must be
 * the same bits, and the fused apply graph's arena no larger than the unfused one's. The executor's report must show AdamW as one kernel per parameter group (a
 * group for the parameters with decay, one for those without) and the zeroing of gradients as
 * one more, each gradient's Σ g·g for the norm one kernel (BORA_OP_SUM_SQUARES, the bits of MUL
 * then SUM); and the fused step must move fewer bytes, because the update's intermediates stay
 * in scratch tiles. Under trainer.mp c=bf16 the same pass also writes every parameter's bf16 copy:
 * still one kernel per group, no kernel more in all, the copies the bf16 rounding of the new
 * parameters, fused and unfused alike. Then cross-entropy with its gradient, one kernel over the
 * logits in place against two (check_xent), and under c=bf16 that kernel writing the gradient
 * in bf16 for the head's products, no rounding COPY after it, with the unfused bits. On the CPU backend, each update group runs as its
 * one-pass AdamW kernel (its -v message, captured), and still gives the unfused bits.
 *
 * usage: test_fusion PLUGIN_DIR */
#include "../graph/rig.h"
#include "../test.h"
#include "train/apply.h"

#include <math.h>
#include <unistd.h>

typedef struct pdesc {
    const char *name;
    int64_t rows, cols; /* cols 0: a vector */
    int no_decay;
} pdesc;

static const pdesc params[] = {
    {"w1", 37, 1000, 0}, {"b1", 1000, 0, 1}, {"w2", 3, 2, 0},
    {"w3", 61, 83, 0},   {"b3", 83, 0, 1},   {"e", 5003, 0, 1},
};
#define NP (sizeof params / sizeof params[0])

typedef struct outcome {
    void *p, *s;  /* parameter and state blocks after the steps */
    uint16_t *sh; /* c=bf16: the parameters' bf16 copies */
    size_t p_bytes, s_bytes;
    double norms[3];
    float losses[3];
    uint64_t kernels, bytes, fused_runs, fused_nodes, sum_squares;
    size_t arena;   /* the apply graph's */
    char log[4096]; /* fused runs: the debug messages */
    int update_groups, decay_segments, nodecay_segments, updates_outside, copies_outside;
} outcome;

static int is_param_assign(const gnode *n)
{
    return n->op == G_ASSIGN && n->out[0]->storage == S_PARAM;
}

static void set_fusion(int fused)
{
    if (fused)
        unsetenv("BORA_NO_FUSION");
    else
        setenv("BORA_NO_FUSION", "1", 1);
}

static void run(const char *plugin_dir, int fused, int bf16, outcome *o)
{
    memset(o, 0, sizeof *o);
    set_fusion(fused);
    /* fused runs: debug messages to a file, for the backend's word on how it ran the groups */
    FILE *cap = fused ? tmpfile() : NULL;
    int saved = -1;
    if (cap) {
        fflush(stderr);
        saved = dup(2);
        dup2(fileno(cap), 2);
        bora_log_set_level(BORA_LOG_DEBUG);
    }
    rig r;
    rig_open(&r, plugin_dir, 2, 9);
    if (bf16)
        g_store_mixed(r.store, BORA_DTYPE_BF16, 0, BORA_ABI_MINOR);
    bora_optimizer *opt;
    const bora_optimizer_ops *ops = rig_adamw(&r, &opt);
    /* loss = Σ_p Σ gelu(p) · p: every gradient is dense and different */
    g_graph *train = g_graph_new(r.store, BORA_MODE_TRAIN);
    bora_graph *g = &train->pub;
    bora_tensor *loss = NULL;
    for (size_t i = 0; i < NP; i++) {
        bora_axis ax[2] = {{"r", params[i].rows}, {"c", params[i].cols}};
        int nd = params[i].cols ? 2 : 1;
        bora_tensor *p =
            bora_param(g, params[i].name, BORA_DTYPE_F32, nd, ax, bora_init_normal(1.0),
                       params[i].no_decay ? BORA_PARAM_NO_DECAY : 0);
        const char *names[] = {"r", "c"};
        bora_tensor *t = g->api->reduce(
            g, BORA_OP_SUM, bora_mul(g, bora_unary(g, BORA_OP_GELU_TANH, p), p), nd, names);
        loss = loss ? bora_add(g, loss, t) : t;
    }
    train->output = loss;
    bora_apply ap;
    CHECK(g_autodiff(train, loss) == BORA_OK && g_finalize(train) == BORA_OK);
    CHECK(bora_apply_build(r.store, ops, opt, 50.0, &ap) == BORA_OK);
    CHECK(g_store_materialize(r.store) == BORA_OK);
    bora_metric mets[TR_MAX_METRICS];
    size_t n_mets;
    for (int step = 1; step <= 3; step++) {
        CHECK(g_run(train) == BORA_OK);
        CHECK(g_read(train, loss, &o->losses[step - 1], sizeof(float)) == BORA_OK);
        CHECK(bora_apply_step(&ap, step, 1e-2 / step, &o->norms[step - 1], mets, &n_mets) ==
              BORA_OK);
        const float *gz = (const float *)r.store->grad_ptr;
        size_t nonzero = 0;
        for (size_t i = 0; i < r.store->param_bytes / sizeof(float); i++)
            nonzero += gz[i] != 0;
        if (nonzero) {
            fprintf(stderr, "%s, step %d: %zu gradients not zeroed\n", fused ? "fused" : "unfused",
                    step, nonzero);
            test_failures++;
        }
    }
    o->kernels = ap.g->kernels_run;
    o->arena = ap.g->arena_bytes;
    o->bytes = ap.g->bytes_moved;
    o->fused_runs = ap.g->fused_runs;
    o->fused_nodes = ap.g->fused_nodes;
    o->sum_squares = ap.g->op_runs[BORA_OP_SUM_SQUARES] / 3; /* per step */
    /* which fused groups update parameters, and over how many segments */
    for (size_t k = 0; k < ap.g->n_fused; k++) {
        const g_fused *f = &ap.g->fused[k];
        int assigns = 0;
        for (int s = 0; s < f->n_steps * f->n_segments; s++)
            assigns += is_param_assign(f->nodes[s]);
        if (!assigns)
            continue;
        o->update_groups++;
        if (o->update_groups == 1)
            o->decay_segments = f->n_segments;
        else
            o->nodecay_segments = f->n_segments;
    }
    for (size_t i = 0; i < ap.g->n_nodes; i++) {
        const gnode *n = ap.g->nodes[i];
        o->updates_outside += is_param_assign(n) && !n->fused;
        o->copies_outside += n->op == G_ASSIGN && n->out[0]->storage == S_SHADOW && !n->fused;
    }
    o->p_bytes = r.store->param_bytes;
    o->s_bytes = r.store->param_bytes * r.store->n_states;
    o->p = malloc(o->p_bytes);
    o->s = malloc(o->s_bytes);
    memcpy(o->p, r.store->param_ptr, o->p_bytes);
    memcpy(o->s, r.store->state_ptr, o->s_bytes);
    if (bf16) {
        o->sh = malloc(o->p_bytes / 2);
        memcpy(o->sh, r.store->shadow_ptr, o->p_bytes / 2);
    }
    bora_apply_free(&ap);
    g_graph_free(train);
    ops->destroy(opt);
    rig_close(&r);
    if (cap) {
        fflush(stderr);
        dup2(saved, 2);
        close(saved);
        bora_log_set_level(BORA_LOG_WARN);
        rewind(cap);
        size_t got = fread(o->log, 1, sizeof o->log - 1, cap);
        o->log[got] = 0;
        fclose(cap);
    }
    unsetenv("BORA_NO_FUSION");
}

/* Cross-entropy with its gradient: an LM head (h (batch 2, position 7, embed 24) · w (embed 24,
 * vocab 1003), so the logits are the product's dense output), the masked sum of -log p[target]
 * with a z-loss over targets with one ignored, divided by a count fed as an input (the
 * upstream gradient comes from an input, as in training). Fused, the loss and its gradient are
 * one kernel writing over the logits; the loss and every gradient must be the bits of the two
 * kernels with a separate gradient buffer, and the arena must shrink by about the logits' size. */
typedef struct xent_outcome {
    float loss;
    float *grads;
    size_t grad_bytes, arena, naive;
    uint64_t runs_fused, runs_grad;
    int casts; /* c=bf16: COPY nodes rounding the logits' gradient to bf16 */
} xent_outcome;

static void run_xent(const char *plugin_dir, int fused, int bf16, xent_outcome *o)
{
    memset(o, 0, sizeof *o);
    set_fusion(fused);
    rig r;
    rig_open(&r, plugin_dir, 2, 5);
    if (bf16)
        g_store_mixed(r.store, BORA_DTYPE_BF16, 0, BORA_ABI_MINOR);
    g_graph *train = g_graph_new(r.store, BORA_MODE_TRAIN);
    bora_graph *g = &train->pub;
    /* rows enough that the logits and their gradient make the graph's peak */
    bora_axis ha[3] = {{"batch", 2}, {"position", 200}, {"embed", 24}};
    bora_axis wa[2] = {{"embed", 24}, {"vocab", 1003}};
    bora_tensor *h = bora_param(g, "h", BORA_DTYPE_F32, 3, ha, bora_init_normal(1.0), 0);
    bora_tensor *w = bora_param(g, "w", BORA_DTYPE_F32, 2, wa, bora_init_normal(1.0), 0);
    const char *embed[] = {"embed"};
    bora_tensor *logits = g->api->dot(g, h, w, 1, embed, NULL);
    bora_tensor *t = bora_input(g, "targets", BORA_DTYPE_I32, 2, ha);
    bora_xent_opts xo = {sizeof xo, -100, 1e-3};
    bora_tensor *count = bora_input(g, "count", BORA_DTYPE_F32, 0, NULL);
    bora_tensor *loss = bora_div(g, g->api->cross_entropy(g, logits, t, "vocab", &xo), count);
    train->output = loss;
    CHECK(g_autodiff(train, loss) == BORA_OK && g_finalize(train) == BORA_OK);
    CHECK(g_store_materialize(r.store) == BORA_OK);
    int32_t targets[400];
    for (int i = 0; i < 400; i++)
        targets[i] = i == 5 ? -100 : (int32_t)((i * 389 + 17) % 1003);
    float n = 399;
    CHECK(g_set_input(train, "targets", targets, sizeof targets) == BORA_OK);
    CHECK(g_set_input(train, "count", &n, sizeof n) == BORA_OK);
    CHECK(g_run(train) == BORA_OK && g_read(train, loss, &o->loss, sizeof o->loss) == BORA_OK);
    o->grad_bytes = r.store->param_bytes;
    o->grads = malloc(o->grad_bytes);
    memcpy(o->grads, r.store->grad_ptr, o->grad_bytes);
    o->arena = train->arena_bytes;
    o->naive = train->naive_bytes;
    o->runs_fused = train->op_runs[BORA_OP_XENT_FUSED];
    o->runs_grad = train->op_runs[BORA_OP_XENT_GRAD];
    for (size_t i = 0; i < train->n_nodes; i++) {
        const gnode *nd = train->nodes[i];
        o->casts += nd->op == BORA_OP_COPY && nd->out[0]->dtype == BORA_DTYPE_BF16 &&
                    g_numel(nd->out[0]) == 400 * 1003;
    }
    g_graph_free(train);
    rig_close(&r);
    unsetenv("BORA_NO_FUSION");
}

static void check_xent(const char *plugin_dir)
{
    xent_outcome f, u;
    run_xent(plugin_dir, 1, 0, &f);
    run_xent(plugin_dir, 0, 0, &u);
    printf("cross-entropy: loss %.7f; fused: %llu kernel, arena %zu bytes; unfused: %llu "
           "gradient kernel, arena %zu bytes\n",
           f.loss, (unsigned long long)f.runs_fused, f.arena, (unsigned long long)u.runs_grad,
           u.arena);
    CHECK(f.runs_fused == 1 && f.runs_grad == 0);
    CHECK(u.runs_fused == 0 && u.runs_grad == 1);
    CHECK(f.loss == u.loss && f.loss > 0);
    CHECK(f.grads && u.grads && f.grad_bytes == u.grad_bytes);
    if (f.grads && u.grads) {
        size_t differ = 0, nonzero = 0;
        for (size_t i = 0; i < f.grad_bytes / sizeof(float); i++) {
            differ += memcmp(&f.grads[i], &u.grads[i], sizeof(float)) != 0;
            nonzero += f.grads[i] != 0;
        }
        if (differ)
            fprintf(stderr, "cross-entropy: %zu gradients differ fused and unfused\n", differ);
        CHECK(differ == 0);
        CHECK(nonzero > f.grad_bytes / sizeof(float) / 2);
    }
    /* no buffer for the gradient (the logits' bytes, 64-byte aligned), and a smaller peak */
    size_t logits_bytes = (400 * 1003 * sizeof(float) + 63) & ~(size_t)63;
    CHECK(u.naive == f.naive + logits_bytes);
    CHECK(f.arena + logits_bytes * 9 / 10 <= u.arena);
    free(f.grads);
    free(u.grads);
    /* c=bf16: the head's bf16 products read the gradient rounded to bf16; fused, the
     * cross-entropy writes it so (no COPY left) with the bits of the COPY after it */
    run_xent(plugin_dir, 1, 1, &f);
    run_xent(plugin_dir, 0, 1, &u);
    printf("cross-entropy, c=bf16: loss %.7f; gradient casts: %d fused, %d unfused\n", f.loss,
           f.casts, u.casts);
    CHECK(f.runs_fused == 1 && u.runs_grad == 1 && f.casts == 0 && u.casts == 1);
    CHECK(f.loss == u.loss && f.loss > 0 && f.grads && u.grads && f.grad_bytes == u.grad_bytes);
    if (f.grads && u.grads && memcmp(f.grads, u.grads, f.grad_bytes)) {
        fprintf(stderr, "cross-entropy, c=bf16: the gradients differ fused and unfused\n");
        test_failures++;
    }
    free(f.grads);
    free(u.grads);
}

/* bf16 of x, rounded to nearest even (the parameters are finite) */
static uint16_t bf16_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* c=bf16: the same parameters and states as f32 (this loss has no matmul), fused and unfused;
 * the copies the rounding of the parameters; the pass as many kernels as f32's. */
static void check_copies(const char *plugin_dir, const outcome *f32)
{
    outcome f, u;
    run(plugin_dir, 1, 1, &f);
    run(plugin_dir, 0, 1, &u);
    CHECK(f.p && u.p && f.sh && u.sh && f.p_bytes == f32->p_bytes);
    if (f.p && u.p && f.sh && u.sh && f.p_bytes == f32->p_bytes) {
        CHECK(memcmp(f.p, f32->p, f.p_bytes) == 0 && memcmp(f.s, f32->s, f.s_bytes) == 0);
        CHECK(memcmp(u.p, f.p, f.p_bytes) == 0 && memcmp(u.sh, f.sh, f.p_bytes / 2) == 0);
        size_t wrong = 0, n = 0;
        const float *p = f.p;
        for (size_t i = 0; i < NP; i++) {
            size_t count = (size_t)params[i].rows * (size_t)(params[i].cols ? params[i].cols : 1);
            for (size_t e = 0; e < count; e++, n++)
                wrong += f.sh[(p - (const float *)f.p) + e] != bf16_of(p[e]);
            p += (count + 15) / 16 * 16; /* each parameter 64-byte aligned */
        }
        printf("c=bf16: %zu of %zu bf16 copies are not the rounding of their parameter\n", wrong,
               n);
        CHECK(wrong == 0 && n > 0);
    }
    printf("c=bf16: the pass ran %llu kernels (%llu fused groups), against %llu in f32\n",
           (unsigned long long)f.kernels, (unsigned long long)f.fused_runs,
           (unsigned long long)f32->kernels);
    CHECK(f.kernels == f32->kernels && f.fused_runs == 3 && f.update_groups == 2);
    CHECK(strstr(f.log, "runs as AdamW's one-pass update (with weight decay, bf16 copies") &&
          strstr(f.log, "runs as AdamW's one-pass update (without weight decay, bf16 copies"));
    CHECK(f.copies_outside == 0 && f.updates_outside == 0);
    CHECK(u.fused_runs == 0);
    outcome *all[] = {&f, &u};
    for (int i = 0; i < 2; i++) {
        free(all[i]->p);
        free(all[i]->s);
        free(all[i]->sh);
    }
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_fusion PLUGIN_DIR\n");
        return 2;
    }
    bora_log_set_level(BORA_LOG_WARN);
    outcome f, u;
    run(argv[1], 1, 0, &f);
    run(argv[1], 0, 0, &u);
    CHECK(f.p && u.p && f.p_bytes == u.p_bytes && f.s_bytes == u.s_bytes);
    if (f.p && u.p) {
        CHECK(memcmp(f.p, u.p, f.p_bytes) == 0);
        const float *a = f.p, *b = u.p;
        size_t differ = 0;
        for (size_t i = 0; i < f.p_bytes / sizeof(float); i++)
            differ += a[i] != b[i];
        if (differ)
            fprintf(stderr, "%zu of %zu parameters differ\n", differ, f.p_bytes / sizeof(float));
        CHECK(memcmp(f.s, u.s, f.s_bytes) == 0);
    }
    for (int k = 0; k < 3; k++)
        if (f.norms[k] != u.norms[k] || f.losses[k] != u.losses[k])
            fprintf(stderr, "step %d: fused loss %.9g norm %.17g, unfused %.9g %.17g\n", k + 1,
                    f.losses[k], f.norms[k], u.losses[k], u.norms[k]);
    CHECK(memcmp(f.norms, u.norms, sizeof f.norms) == 0);
    CHECK(memcmp(f.losses, u.losses, sizeof f.losses) == 0);
    CHECK(f.losses[2] < f.losses[0]); /* the steps did something */
    printf("losses %.6f %.6f %.6f, norms %.6f %.6f %.6f: the same bits fused and unfused\n",
           f.losses[0], f.losses[1], f.losses[2], f.norms[0], f.norms[1], f.norms[2]);
    printf("apply graph fused: %llu kernels (%llu fused groups standing for %llu nodes), %.2f MB "
           "moved\n",
           (unsigned long long)f.kernels, (unsigned long long)f.fused_runs,
           (unsigned long long)f.fused_nodes, f.bytes / 1e6);
    printf("apply graph unfused: %llu kernels, %.2f MB moved\n", (unsigned long long)u.kernels,
           u.bytes / 1e6);
    printf("AdamW ran as %d kernels: %d parameters with decay, %d without\n", f.update_groups,
           f.decay_segments, f.nodecay_segments);
    CHECK(f.update_groups == 2 && f.decay_segments == 3 && f.nodecay_segments == 3);
    /* the CPU backend ran both groups as its AdamW kernel */
    CHECK(strstr(f.log, "runs as AdamW's one-pass update (with weight decay)") &&
          strstr(f.log, "runs as AdamW's one-pass update (without weight decay)"));
    CHECK(f.updates_outside == 0);
    CHECK(f.fused_runs == 3); /* the two update groups and the zeroing of gradients */
    CHECK(u.fused_runs == 0 && u.update_groups == 0);
    /* the gradient norm: each parameter's Σ g·g one kernel, not a MUL and a SUM */
    printf("gradient norm: %llu sums of squares fused, %llu unfused\n",
           (unsigned long long)f.sum_squares, (unsigned long long)u.sum_squares);
    CHECK(f.sum_squares == NP && u.sum_squares == 0);
    CHECK(f.kernels == u.kernels - f.fused_nodes + f.fused_runs - f.sum_squares);
    CHECK(f.bytes < u.bytes / 2);
    /* the update's intermediates live in scratch tiles while the group runs, so they need no
     * more arena than the node-by-node run a declined group falls back to, not all at once */
    printf("apply graph arena: %zu bytes fused, %zu unfused\n", f.arena, u.arena);
    CHECK(f.arena <= u.arena && f.arena > 0);
    check_copies(argv[1], &f);
    free(f.p);
    free(f.s);
    free(u.p);
    free(u.s);
    check_xent(argv[1]);
    return test_summary("test_fusion");
}
