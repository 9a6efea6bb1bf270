/* tests/graph/test_determinism.c — 20 forward/backward/update steps of a small GPT-2 in f32,
 * then a hash of every parameter bit. check_determinism.sh runs it in separate processes and
 * with different thread counts: the hashes must be equal.
 *
 * usage: test_determinism PLUGIN_DIR NUM_THREADS */
#include "rig.h"
#include "tiny_gpt.h"

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: test_determinism PLUGIN_DIR NUM_THREADS\n");
        return 2;
    }
    const tiny_gpt m = {.vocab = 50,
                        .embed = 32,
                        .heads = 4,
                        .layers = 2,
                        .batch = 4,
                        .seq = 16,
                        .mlp = 128,
                        .dtype = BORA_DTYPE_F32};
    rig r;
    rig_open(&r, argv[1], atoi(argv[2]), 1234);
    g_graph *g = g_graph_new(r.store, BORA_MODE_TRAIN);
    bora_tensor *loss = tiny_gpt_build(&g->pub, &m, BORA_MODE_TRAIN);
    g->output = loss;
    if (!loss || g_autodiff(g, loss) || g_finalize(g) || g_store_materialize(r.store)) {
        fprintf(stderr, "build failed: %s\n", g->error);
        return 1;
    }
    int32_t ids[64], targets[64];
    uint32_t x = 17;
    float first = 0, last = 0;
    for (int step = 0; step < 20; step++) {
        for (int i = 0; i < 64; i++) {
            x = x * 1664525u + 1013904223u;
            ids[i] = (int32_t)((x >> 8) % 50);
        }
        for (int i = 0; i < 64; i++) /* learnable: the next token is the previous plus one */
            targets[i] = (ids[i] + 1) % 50;
        if (g_set_input(g, "ids", ids, sizeof ids) ||
            g_set_input(g, "targets", targets, sizeof targets) || g_store_zero_grads(r.store) ||
            g_run(g)) {
            fprintf(stderr, "step %d: %s\n", step, bora_error_get());
            return 1;
        }
        g_read(g, loss, &last, sizeof last);
        if (step == 0)
            first = last;
        float *p = (float *)r.store->param_ptr, *gr = (float *)r.store->grad_ptr;
        for (size_t i = 0; i < r.store->param_bytes / sizeof(float); i++)
            p[i] -= 0.5f * gr[i];
    }
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < r.store->param_bytes; i++)
        h = (h ^ (unsigned char)r.store->param_ptr[i]) * 1099511628211ull;
    printf("params %016llx loss %.9g -> %.9g\n", (unsigned long long)h, first, last);
    g_graph_free(g);
    rig_close(&r);
    return last < first ? 0 : 1; /* it also learns */
}
