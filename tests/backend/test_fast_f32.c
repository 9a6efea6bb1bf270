/* tests/backend/test_fast_f32.c — the CPU backend's fast f32 kernels at the sizes a model meets
 * (blocked attention on oneDNN, forward and backward, also with head widths and key counts that
 * are not whole registers, and with soft-capped scores, c·tanh(s / c); a tied embedding and LM head, whose weight gradient is the head's
 * product computed in the table's own order with the embedding's rows added onto it in place, one
 * SCATTER_ADD and no table add left in the graph; LayerNorm over dense rows) against the
 * backend's f64 path on the same
 * values: a graph is built twice, in f32 and in f64, the f64 parameters are set to the f32 ones,
 * and the loss Σ out·w, its output and every parameter's gradient are compared (relative to the
 * largest magnitude of each tensor: 2e-5 forward, 1e-4 gradients). The f32 results must also be
 * the same bits at 1 and 2 threads (the 1-thread run's train graph writing its gradients
 * straight into their buffers, as a step of one micro-batch does, the other adding them).
 *
 * usage: test_fast_f32 PLUGIN_DIR */
#include "../graph/rig.h"
#include "../test.h"

#include <math.h>

static const char *plugin_dir;
static int write_grads; /* the train graph writes its gradients (one micro-batch a step) */

#define AX(n, s) ((bora_axis){(n), (s)})

typedef struct acase {
    const char *name;
    int64_t B, H, T, S, E;
    int causal, segments, key_length; /* key_length: the runtime extent's value, 0: none */
    int q_strided;                    /* q given as (batch, position, heads, head_dim) */
    int kind;         /* TIED: ids (B, T) of a vocabulary of S into a table (S, E), then the logits
               * against the same table; NORM: LayerNorm of (B, T, E) over E */
    int64_t kv_heads; /* grouped-query attention: k and v with this many heads (0: H) */
    int64_t window;   /* the sliding window (0: none) */
    double softcap;   /* the soft cap c (0: none) */
} acase;

enum { ATTENTION, TIED, NORM };

static const acase cases[] = {
    {"causal 2x3x150x64", 2, 3, 150, 150, 64, 1, 0, 0, 0, 0, 0, 0, 0},
    {"causal, q strided", 2, 2, 130, 130, 32, 1, 0, 0, 1, 0, 0, 0, 0},
    {"not causal", 1, 2, 70, 70, 16, 0, 0, 0, 0, 0, 0, 0, 0},
    {"head width 20 (columns past whole registers)", 1, 2, 45, 45, 20, 1, 0, 0, 0, 0, 0, 0, 0},
    {"head width 24, 67 keys", 1, 1, 67, 67, 24, 0, 0, 0, 0, 0, 0, 0, 0},
    {"segments", 2, 2, 100, 100, 16, 1, 1, 0, 0, 0, 0, 0, 0},
    {"decode: 5 queries over a cache of 200, 170 filled", 2, 2, 5, 200, 16, 1, 0, 170, 0, 0, 0, 0,
     0},
    {"decode: one query", 1, 3, 1, 90, 64, 1, 0, 77, 0, 0, 0, 0, 0},
    {"grouped-query 4 heads over 2, causal, window 50", 2, 4, 130, 130, 32, 1, 0, 0, 0, 0, 2, 50,
     0},
    {"grouped-query 4 heads over 1, segments, window 30", 1, 4, 100, 100, 16, 1, 1, 0, 0, 0, 1, 30,
     0},
    {"window 20, not causal", 1, 2, 70, 70, 16, 0, 0, 0, 0, 0, 0, 20, 0},
    {"decode over 2 kv heads, window 64: 5 queries, 170 of 200", 2, 4, 5, 200, 16, 1, 0, 170, 0, 0,
     2, 64, 0},
    {"soft cap 1, causal, grouped 4 over 2, window 50", 2, 4, 130, 130, 32, 1, 0, 0, 0, 0, 2, 50,
     1.0},
    {"soft cap 0.7, segments, head width 20", 2, 2, 100, 100, 20, 1, 1, 0, 0, 0, 0, 0, 0.7},
    {"soft cap 1.5, not causal, q strided", 1, 2, 70, 70, 16, 0, 0, 0, 1, 0, 0, 0, 1.5},
    {"soft cap 2, decode: 5 queries over 200, 170 filled", 2, 4, 5, 200, 16, 1, 0, 170, 0, 0, 2, 0,
     2.0},
    {"tied embedding 2x300 over a vocabulary of 700x96", 2, 0, 300, 700, 96, 0, 0, 0, 0, TIED, 0, 0,
     0},
    {"layernorm 3x70x200", 3, 0, 70, 0, 200, 0, 0, 0, 0, NORM, 0, 0, 0},
    {"layernorm 2x9x37 (rows shorter than 16 lanes twice)", 2, 0, 9, 0, 37, 0, 0, 0, 0, NORM, 0, 0,
     0},
};

static int32_t seg_of(int64_t b, int64_t t)
{
    return (int32_t)((t + 7 * b) / 37); /* documents of 37 positions, shifted per row */
}

/* Token ids with repeats (each id several times, so the scatter-add really adds). */
static int32_t id_of(int64_t b, int64_t t, int64_t vocab)
{
    return (int32_t)((b * 131 + t * 7) % (vocab / 2));
}

/* logits = dot(table[ids], table) over embed, the table (vocab, embed) seen transposed */
static bora_tensor *build_tied(bora_graph *g, const acase *c, int dt)
{
    bora_axis ta[2] = {AX("vocab", c->S), AX("embed", c->E)};
    bora_axis ia[2] = {AX("batch", c->B), AX("position", c->T)};
    bora_tensor *table = bora_param(g, "a", dt, 2, ta, bora_init_normal(1.0), 0);
    bora_tensor *ids = bora_input(g, "ids", BORA_DTYPE_I32, 2, ia);
    bora_tensor *x = g->api->embedding(g, table, ids, "vocab");
    const char *contract[1] = {"embed"};
    return x ? g->api->dot(g, g->api->unary(g, BORA_OP_TANH, x), table, 1, contract, NULL) : NULL;
}

/* out = attention(a, b, c) (or the tied case's logits); loss = Σ out · w. Returns the loss,
 * sets *out. */
static bora_tensor *build(bora_graph *g, const acase *c, int dt, bora_tensor **out)
{
    const bora_graph_api *A = g->api;
    if (c->kind == TIED) {
        *out = build_tied(g, c, dt);
        goto weigh;
    }
    if (c->kind == NORM) {
        bora_axis xa[3] = {AX("batch", c->B), AX("position", c->T), AX("embed", c->E)};
        bora_tensor *x = bora_param(g, "a", dt, 3, xa, bora_init_normal(1.0), 0);
        bora_tensor *gm = bora_param(g, "b", dt, 1, xa + 2, bora_init_normal(1.0), 0);
        bora_tensor *bt = bora_param(g, "c", dt, 1, xa + 2, bora_init_normal(1.0), 0);
        /* columns shifted by up to ±40: rows whose mean is far from their spread */
        x = bora_add(g, A->scale(g, x, 3.0), A->scale(g, A->unary(g, BORA_OP_TANH, bt), 40.0));
        *out = A->layernorm(g, x, gm, bt, "embed", 1e-5);
        goto weigh;
    }
    bora_axis qa[4] = {AX("batch", c->B), AX("heads", c->H), AX("position", c->T),
                       AX("head_dim", c->E)};
    if (c->q_strided)
        qa[1] = AX("position", c->T), qa[2] = AX("heads", c->H);
    bora_axis ka[4] = {AX("batch", c->B),
                       AX(c->kv_heads ? "kv_heads" : "heads", c->kv_heads ? c->kv_heads : c->H),
                       AX("key_position", c->S), AX("head_dim", c->E)};
    bora_tensor *q = bora_param(g, "a", dt, 4, qa, bora_init_normal(1.0), 0);
    bora_tensor *k = bora_param(g, "b", dt, 4, ka, bora_init_normal(1.0), 0);
    bora_tensor *v = bora_param(g, "c", dt, 4, ka, bora_init_normal(1.0), 0);
    bora_attention_opts o = {.struct_size = sizeof o,
                             .causal = c->causal,
                             .head_axis = "heads",
                             .kv_head_axis = c->kv_heads ? "kv_heads" : NULL,
                             .sliding_window = c->window,
                             .softcap = c->softcap};
    if (c->segments) {
        bora_axis sa[2] = {AX("batch", c->B), AX("position", c->T)};
        o.segment_ids = bora_input(g, "seg", BORA_DTYPE_I32, 2, sa);
    }
    if (c->key_length)
        o.key_length = A->extent(g, "klen", (int32_t)c->S);
    *out = A->attention(g, q, k, v, &o);
weigh:
    if (!*out)
        return NULL;
    bora_axis ax[4];
    const char *names[4];
    for (int i = 0; i < (*out)->ndim; i++)
        ax[i] = A->axis(*out, i), names[i] = ax[i].name;
    bora_tensor *w = bora_input(g, "w", dt, (*out)->ndim, ax);
    bora_tensor *loss = A->reduce(g, BORA_OP_SUM, bora_mul(g, *out, w), (*out)->ndim, names);
    if (*out && (*out)->base != *out)
        *out = A->contiguous(g, *out);
    return loss && loss->base != loss ? A->contiguous(g, loss) : loss;
}

typedef struct result {
    double *out, *grads; /* as doubles */
    size_t n_out, n_grads;
    void *raw_out, *raw_grads; /* the f32 bits */
} result;

static void result_free(result *r)
{
    free(r->out);
    free(r->grads);
    free(r->raw_out);
    free(r->raw_grads);
}

/* Run the case in dt with `threads`; f64 parameters are copied from `from` (an f32 run's). */
static int run_case(const acase *c, int dt, int threads, const rig *from, result *res, rig *keep)
{
    rig r;
    rig_open(&r, plugin_dir, threads, 5);
    g_store_mixed(r.store, 0, 0, BORA_ABI_MINOR); /* f32, with what this backend's ABI allows */
    /* the output from an eval graph (a train graph's arena reuses its bytes), the gradients
     * from a train graph; both over the same parameters */
    g_graph *ge = g_graph_new(r.store, BORA_MODE_EVAL), *g = g_graph_new(r.store, BORA_MODE_TRAIN);
    g->grads_write = write_grads;
    bora_tensor *out = NULL, *eout = NULL, *loss = build(&g->pub, c, dt, &out);
    build(&ge->pub, c, dt, &eout);
    g->output = loss;
    ge->output = eout;
    int ok = loss && eout && g_autodiff(g, loss) == BORA_OK && g_finalize(g) == BORA_OK &&
             g_finalize(ge) == BORA_OK && g_store_materialize(r.store) == BORA_OK;
    if (!ok) {
        fprintf(stderr, "%s: build failed: %s%s\n", c->name, g->error, ge->error);
        test_failures++;
        g_graph_free(g);
        g_graph_free(ge);
        rig_close(&r);
        return 0;
    }
    if (c->kind == TIED) {
        /* the table's two gradients in one node: the rows added onto the head's product, in
         * its own storage (no table of zeros, no add of two tables) */
        int into = 0, in_place = 0, adds = 0;
        for (size_t i = 0; i < g->n_nodes; i++) {
            const gnode *n = g->nodes[i];
            if (n->op == BORA_OP_SCATTER_ADD && n->nin == 3) {
                into++;
                in_place +=
                    n->in[2]->base == n->out[0]->base ||
                    (n->in[2]->base->storage == S_GRAD && n->out[0]->base->storage == S_GRAD &&
                     n->in[2]->base->slot == n->out[0]->base->slot);
            }
            adds += n->op == BORA_OP_ADD && n->out[0]->ndim == 2 && n->out[0]->dims[0] == c->S &&
                    n->out[0]->dims[1] == c->E;
        }
        if (into != 1 || in_place != 1 || adds != 0) {
            fprintf(stderr,
                    "%s: %d scatter_add onto the head's product (%d in place), %d table adds "
                    "left (want 1, 1, 0)\n",
                    c->name, into, in_place, adds);
            test_failures++;
        }
    }
    size_t es = bora_dtype_size(dt);
    if (from) { /* the f32 run's parameter values, widened */
        for (size_t s = 0; s < r.store->n_slots; s++) {
            const g_slot *sl = &r.store->slots[s];
            const float *src = rig_param((rig *)from, sl->name);
            double *dst = rig_param(&r, sl->name);
            for (size_t i = 0; i < sl->nbytes / es; i++)
                dst[i] = src[i];
        }
    }
    int64_t n_out = g_numel(out);
    void *w = malloc((size_t)n_out * es);
    for (int64_t i = 0; i < n_out; i++) {
        double x = sin(1.0 + (double)i * 0.37) + 0.2;
        if (dt == BORA_DTYPE_F32)
            ((float *)w)[i] = (float)x;
        else
            ((double *)w)[i] = (double)(float)x;
    }
    g_set_input(g, "w", w, (size_t)n_out * es);
    g_set_input(ge, "w", w, (size_t)n_out * es);
    free(w);
    if (c->segments) {
        int32_t *seg = malloc(sizeof(int32_t) * (size_t)(c->B * c->T));
        for (int64_t b = 0; b < c->B; b++)
            for (int64_t t = 0; t < c->T; t++)
                seg[b * c->T + t] = seg_of(b, t);
        g_set_input(g, "seg", seg, sizeof(int32_t) * (size_t)(c->B * c->T));
        g_set_input(ge, "seg", seg, sizeof(int32_t) * (size_t)(c->B * c->T));
        free(seg);
    }
    if (c->kind == TIED) {
        int32_t *ids = malloc(sizeof(int32_t) * (size_t)(c->B * c->T));
        for (int64_t b = 0; b < c->B; b++)
            for (int64_t t = 0; t < c->T; t++)
                ids[b * c->T + t] = id_of(b, t, c->S);
        g_set_input(g, "ids", ids, sizeof(int32_t) * (size_t)(c->B * c->T));
        g_set_input(ge, "ids", ids, sizeof(int32_t) * (size_t)(c->B * c->T));
        free(ids);
    }
    if (c->key_length) {
        int32_t L = c->key_length;
        g_set_input(g, "klen", &L, sizeof L);
        g_set_input(ge, "klen", &L, sizeof L);
    }
    CHECK(g_run(ge) == BORA_OK);
    res->n_out = (size_t)n_out;
    res->raw_out = malloc((size_t)n_out * es);
    CHECK(g_read(ge, eout, res->raw_out, (size_t)n_out * es) == BORA_OK);
    CHECK(g_run(g) == BORA_OK);
    /* the gradients slot by slot, in slot order (the padding between slots depends on dt) */
    res->n_grads = 0;
    for (size_t s = 0; s < r.store->n_slots; s++)
        res->n_grads += r.store->slots[s].nbytes / es;
    res->raw_grads = malloc(res->n_grads * es);
    res->grads = malloc(sizeof(double) * res->n_grads);
    size_t at = 0;
    for (size_t s = 0; s < r.store->n_slots; s++) {
        const g_slot *sl = &r.store->slots[s];
        memcpy((char *)res->raw_grads + at * es, r.store->grad_ptr + sl->offset, sl->nbytes);
        at += sl->nbytes / es;
    }
    res->out = malloc(sizeof(double) * res->n_out);
    for (size_t i = 0; i < res->n_out; i++)
        res->out[i] =
            dt == BORA_DTYPE_F32 ? ((float *)res->raw_out)[i] : ((double *)res->raw_out)[i];
    for (size_t i = 0; i < res->n_grads; i++)
        res->grads[i] =
            dt == BORA_DTYPE_F32 ? ((float *)res->raw_grads)[i] : ((double *)res->raw_grads)[i];
    g_graph_free(g);
    g_graph_free(ge);
    if (keep)
        *keep = r;
    else
        rig_close(&r);
    return 1;
}

static void compare(const char *what, const char *cname, const double *got, const double *want,
                    size_t n, double rel)
{
    double big = 0, worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++)
        big = fmax(big, fabs(want[i]));
    for (size_t i = 0; i < n; i++) {
        double d = fabs(got[i] - want[i]);
        if (!(d <= worst)) /* NaN counts as the worst */
            worst = d, at = i;
    }
    if (!(worst <= rel * big)) {
        fprintf(stderr, "%s, %s: element %zu is %.9g, the f64 path %.9g (largest %.3g)\n", cname,
                what, at, got[at], want[at], big);
        test_failures++;
    }
    if (big == 0) {
        fprintf(stderr, "%s, %s: all zero\n", cname, what);
        test_failures++;
    }
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PLUGIN_DIR\n", argv[0]);
        return 2;
    }
    plugin_dir = argv[1];
    bora_log_set_level(BORA_LOG_WARN);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const acase *c = &cases[i];
        int failures_before = test_failures;
        result f32 = {0}, f32_1 = {0}, f64 = {0};
        rig r32;
        if (!run_case(c, BORA_DTYPE_F32, 2, NULL, &f32, &r32))
            continue;
        run_case(c, BORA_DTYPE_F64, 2, &r32, &f64, NULL);
        rig_close(&r32);
        write_grads = 1; /* the same bits whether gradients are written or added to zeros */
        run_case(c, BORA_DTYPE_F32, 1, NULL, &f32_1, NULL);
        write_grads = 0;
        /* the loops of the reference kernel round differently: the fast path really ran */
        result ref = {0};
        if (c->kind != ATTENTION)
            goto same_threads;
        setenv("BORA_CPU_REFERENCE_ATTENTION", "1", 1);
        run_case(c, BORA_DTYPE_F32, 2, NULL, &ref, NULL);
        unsetenv("BORA_CPU_REFERENCE_ATTENTION");
        compare("output (reference loops)", c->name, ref.out, f64.out, f32.n_out, 2e-5);
        if (!memcmp(f32.raw_grads, ref.raw_grads, f32.n_grads * 4)) {
            fprintf(stderr, "%s: the blocked kernel gave the reference loops' bits\n", c->name);
            test_failures++;
        }
        result_free(&ref);
    same_threads:
        compare("output", c->name, f32.out, f64.out, f32.n_out, 2e-5);
        compare("gradients", c->name, f32.grads, f64.grads, f32.n_grads, 1e-4);
        if (memcmp(f32.raw_out, f32_1.raw_out, f32.n_out * 4) ||
            memcmp(f32.raw_grads, f32_1.raw_grads, f32.n_grads * 4)) {
            fprintf(stderr, "%s: 1 and 2 threads give different bits\n", c->name);
            test_failures++;
        }
        if (test_failures == failures_before)
            printf("%-52s f32 within tolerance of f64, same bits at 1 and 2 threads\n", c->name);
        result_free(&f32);
        result_free(&f32_1);
        result_free(&f64);
    }
    if (test_failures)
        fprintf(stderr, "test_fast_f32: %d failure(s)\n", test_failures);
    return test_failures ? 1 : 0;
}
