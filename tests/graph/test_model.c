/* tests/graph/test_model.c — a 2-layer GPT-2 built with the public API, end to end on the CPU
 * backend: every parameter's gradient against central finite differences in f64; a second
 * graph (eval) binding the same parameters by name and agreeing with the train graph's loss;
 * the memory plan smaller than the naive sum; the executor's report stable across runs; and
 * recomputation between block boundaries giving bitwise the same gradients in a smaller arena,
 * in f64 and in f32 with mixed precision (c=bf16: the recomputed bf16 copies give the same bits);
 * and a graph that writes its gradients (one micro-batch a step) giving the added ones' values.
 *
 * usage: test_model PLUGIN_DIR */
#include "../test.h"
#include "rig.h"
#include "tiny_gpt.h"

#include <math.h>

static const tiny_gpt M = {.vocab = 7,
                           .embed = 8,
                           .heads = 2,
                           .layers = 2,
                           .batch = 2,
                           .seq = 4,
                           .mlp = 16,
                           .dtype = BORA_DTYPE_F64};
static const int32_t ids[8] = {1, 4, 6, 0, 2, 2, 5, 3};
static const int32_t targets[8] = {4, 6, 0, 2, 2, 5, 3, -100};

/* The f32 model with c=bf16 on one store: its gradients, and the graph's bf16 casts. */
static void *bf16_grads(const char *plugin_dir, int recompute, size_t *bytes, int *casts)
{
    tiny_gpt m = M;
    m.dtype = BORA_DTYPE_F32;
    rig r;
    rig_open(&r, plugin_dir, 2, 42);
    r.store->compute_dtype = BORA_DTYPE_BF16;
    g_graph *g = g_graph_new(r.store, BORA_MODE_TRAIN);
    g->recompute = recompute;
    bora_tensor *loss = tiny_gpt_build(&g->pub, &m, BORA_MODE_TRAIN);
    g->output = loss;
    void *out = NULL;
    *casts = 0;
    if (loss && g_autodiff(g, loss) == BORA_OK && g_finalize(g) == BORA_OK &&
        g_store_materialize(r.store) == BORA_OK && g_set_input(g, "ids", ids, sizeof ids) == 0 &&
        g_set_input(g, "targets", targets, sizeof targets) == 0 && g_run(g) == BORA_OK) {
        *bytes = r.store->param_bytes;
        out = malloc(*bytes);
        memcpy(out, r.store->grad_ptr, *bytes);
        for (size_t i = 0; i < g->n_nodes; i++)
            *casts +=
                g->nodes[i]->op == BORA_OP_COPY && g->nodes[i]->out[0]->dtype == BORA_DTYPE_BF16;
    } else {
        fprintf(stderr, "bf16 graph failed: %s\n", g->error);
    }
    g_graph_free(g);
    rig_close(&r);
    return out;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_model PLUGIN_DIR\n");
        return 2;
    }
    rig r;
    rig_open(&r, argv[1], 2, 42);
    g_graph *train = g_graph_new(r.store, BORA_MODE_TRAIN);
    train->recompute = 0; /* this one keeps its activations; the second graph recomputes */
    bora_tensor *loss = tiny_gpt_build(&train->pub, &M, BORA_MODE_TRAIN);
    train->output = loss;
    CHECK(loss && g_autodiff(train, loss) == BORA_OK && g_finalize(train) == BORA_OK);
    size_t n_params = r.store->n_slots;
    /* The eval graph declares the same names: bound to the same storage, nothing new. */
    g_graph *eval = g_graph_new(r.store, BORA_MODE_EVAL);
    bora_tensor *logits = tiny_gpt_build(&eval->pub, &M, BORA_MODE_EVAL);
    if (logits && logits->base != logits)
        logits = eval->pub.api->contiguous(&eval->pub, logits);
    eval->output = logits;
    CHECK(logits && g_finalize(eval) == BORA_OK);
    CHECK(r.store->n_slots == n_params);
    if (train->status || eval->status) {
        fprintf(stderr, "build failed: %s %s\n", train->error, eval->error);
        return test_summary("test_model");
    }
    CHECK(g_store_materialize(r.store) == BORA_OK);
    printf("test_model: %zu parameters, train graph %zu nodes, arena %zu bytes (naive %zu), "
           "shared arena %zu\n",
           n_params, train->n_nodes, train->arena_bytes, train->naive_bytes, r.store->arena_bytes);
    CHECK(train->arena_bytes < train->naive_bytes / 2);

    CHECK(g_set_input(train, "ids", ids, sizeof ids) == BORA_OK);
    CHECK(g_set_input(train, "targets", targets, sizeof targets) == BORA_OK);
    CHECK(g_set_input(eval, "ids", ids, sizeof ids) == BORA_OK);
    CHECK(g_set_input(train, "ids", ids, 3) == BORA_ERR_INVALID);
    CHECK(g_set_input(train, "nope", ids, sizeof ids) == BORA_ERR_NOT_FOUND);
    CHECK(g_run(train) == BORA_OK);
    uint64_t kernels = train->kernels_run, bytes = train->bytes_moved;
    CHECK(kernels > 50 && bytes > 0);
    double L;
    CHECK(g_read(train, loss, &L, sizeof L) == BORA_OK);
    double *grads = malloc(r.store->param_bytes);
    memcpy(grads, r.store->grad_ptr, r.store->param_bytes);

    /* The eval graph's logits give the same loss, computed here. */
    CHECK(g_run(eval) == BORA_OK);
    double lg[2 * 4 * 7], ref = 0;
    CHECK(g_read(eval, logits, lg, sizeof lg) == BORA_OK);
    for (int p = 0; p < 8; p++) {
        if (targets[p] < 0)
            continue;
        double m = -INFINITY, s = 0;
        for (int v = 0; v < 7; v++)
            m = fmax(m, lg[p * 7 + v]);
        for (int v = 0; v < 7; v++)
            s += exp(lg[p * 7 + v] - m);
        ref += m + log(s) - lg[p * 7 + targets[p]];
    }
    ref /= 8;
    CHECK(fabs(ref - L) < 1e-12);
    printf("test_model: loss %.12f (from eval logits %.12f)\n", L, ref);

    /* Every parameter against finite differences (a few elements of each). */
    int checked = 0;
    for (size_t s = 0; s < r.store->n_slots; s++) {
        const g_slot *slot = &r.store->slots[s];
        double *p = rig_param(&r, slot->name), *gr = grads + slot->offset / sizeof(double);
        size_t n = slot->nbytes / sizeof(double);
        for (size_t e = 0; e < n; e += n / 5 + 1) {
            double keep = p[e], h = 1e-5, lp, lm;
            p[e] = keep + h;
            g_run(train);
            g_read(train, loss, &lp, sizeof lp);
            p[e] = keep - h;
            g_run(train);
            g_read(train, loss, &lm, sizeof lm);
            p[e] = keep;
            double fd = (lp - lm) / (2 * h);
            checked++;
            if (!(fabs(fd - gr[e]) <= 1e-6 * fmax(fabs(fd), fabs(gr[e])) + 1e-9)) {
                fprintf(stderr, "d loss / d %s[%zu]: autodiff %.12g, finite differences %.12g\n",
                        slot->name, e, gr[e], fd);
                test_failures++;
            }
        }
    }
    CHECK(train->kernels_run == kernels && train->bytes_moved == bytes);
    printf("test_model: %d gradient elements checked, %llu kernels and %llu bytes per step\n",
           checked, (unsigned long long)kernels, (unsigned long long)bytes);

    /* Recompute: the same model and seed with recomputation on gives the same bits. */
    rig r2;
    rig_open(&r2, argv[1], 2, 42);
    g_graph *rc = g_graph_new(r2.store, BORA_MODE_TRAIN);
    rc->recompute = 1;
    bora_tensor *loss2 = tiny_gpt_build(&rc->pub, &M, BORA_MODE_TRAIN);
    rc->output = loss2;
    CHECK(loss2 && g_autodiff(rc, loss2) == BORA_OK && g_finalize(rc) == BORA_OK &&
          g_store_materialize(r2.store) == BORA_OK);
    CHECK(g_set_input(rc, "ids", ids, sizeof ids) == BORA_OK);
    CHECK(g_set_input(rc, "targets", targets, sizeof targets) == BORA_OK);
    CHECK(g_run(rc) == BORA_OK);
    double L2;
    CHECK(g_read(rc, loss2, &L2, sizeof L2) == BORA_OK);
    CHECK(memcmp(&L, &L2, sizeof L) == 0);
    CHECK(r2.store->param_bytes == r.store->param_bytes);
    CHECK(memcmp(grads, r2.store->grad_ptr, r.store->param_bytes) == 0);
    printf("test_model: recompute: %zu nodes, arena %zu bytes against %zu stored; gradients "
           "bitwise %s\n",
           rc->n_nodes, rc->arena_bytes, train->arena_bytes,
           memcmp(grads, r2.store->grad_ptr, r.store->param_bytes) ? "DIFFERENT" : "equal");
    CHECK(rc->arena_bytes < train->arena_bytes);
    CHECK(rc->n_nodes > train->n_nodes);
    g_graph_free(rc);
    rig_close(&r2);

    /* One micro-batch a step (grads_write): each gradient is written, not added, most by the
     * node that computes it: the same values as adding into zeroed buffers whatever the buffers
     * held before, fewer kernels, and a second run writes again instead of adding. */
    rig r3;
    rig_open(&r3, argv[1], 2, 42);
    g_graph *wr = g_graph_new(r3.store, BORA_MODE_TRAIN);
    wr->recompute = 0;
    wr->grads_write = 1;
    bora_tensor *loss3 = tiny_gpt_build(&wr->pub, &M, BORA_MODE_TRAIN);
    wr->output = loss3;
    CHECK(loss3 && g_autodiff(wr, loss3) == BORA_OK && g_finalize(wr) == BORA_OK &&
          g_store_materialize(r3.store) == BORA_OK);
    CHECK(r3.store->grad_writers == 1 && r3.store->grad_adders == 0);
    CHECK(r.store->grad_writers == 0 && r.store->grad_adders == 1);
    int adds = 0, copies = 0, in_place = 0;
    for (size_t i = 0; i < wr->n_nodes; i++) {
        const gnode *n = wr->nodes[i];
        adds += n->op == G_GRAD;
        copies += n->op == G_ASSIGN;
        for (int o = 0; o < n->nout; o++)
            in_place += n->op != G_ASSIGN && n->out[o]->storage == S_GRAD;
    }
    printf("test_model: gradients written: %d by their own node, %d by a copy, %d added\n",
           in_place, copies, adds);
    CHECK(adds == 0 && in_place > copies && in_place + copies == (int)n_params);
    memset(r3.store->grad_ptr, 0x7f, r3.store->param_bytes); /* not zero: nothing may add to it */
    CHECK(g_set_input(wr, "ids", ids, sizeof ids) == BORA_OK);
    CHECK(g_set_input(wr, "targets", targets, sizeof targets) == BORA_OK);
    for (int run = 0; run < 2; run++) {
        CHECK(g_run(wr) == BORA_OK);
        const double *w = (const double *)r3.store->grad_ptr;
        size_t differ = 0, n = r3.store->param_bytes / sizeof(double);
        for (size_t e = 0; e < n; e++)
            differ += !(w[e] == grads[e]);
        printf("test_model: run %d writing gradients: %zu of %zu differ from adding them; %llu "
               "kernels against %llu\n",
               run + 1, differ, n, (unsigned long long)wr->kernels_run,
               (unsigned long long)kernels);
        CHECK(differ == 0);
    }
    CHECK(wr->kernels_run < kernels);
    g_graph_free(wr);
    rig_close(&r3);

    /* Mixed precision with recomputation: the blocks' bf16 copies are made again, the same bits. */
    size_t nb0 = 0, nb1 = 0;
    int casts0, casts1;
    void *g0 = bf16_grads(argv[1], 0, &nb0, &casts0), *g1 = bf16_grads(argv[1], 1, &nb1, &casts1);
    CHECK(g0 && g1 && nb0 == nb1 && memcmp(g0, g1, nb0) == 0);
    printf("test_model: c=bf16: %d bf16 casts stored, %d with recomputation; gradients bitwise "
           "%s\n",
           casts0, casts1, g0 && g1 && !memcmp(g0, g1, nb0) ? "equal" : "DIFFERENT");
    CHECK(casts0 > 0 && casts1 > casts0);
    free(g0);
    free(g1);

    free(grads);
    g_graph_free(train);
    g_graph_free(eval);
    rig_close(&r);
    return test_summary("test_model");
}
