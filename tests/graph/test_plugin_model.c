/* tests/graph/test_plugin_model.c — a model plugin builds its graphs through the graph API it
 * reaches from the graph handle: a train graph (differentiated by the host) and an eval graph
 * bound to the same parameters by name, reading the inputs bora fills; an unsupported mode is
 * refused with the plugin's message. A few plain gradient-descent steps make the training loss
 * fall.
 *
 * usage: test_plugin_model FIXTURE_PLUGIN_DIR CPU_PLUGIN_DIR */
#include "../test.h"
#include "rig.h"

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: test_plugin_model FIXTURE_PLUGIN_DIR CPU_PLUGIN_DIR\n");
        return 2;
    }
    rig r;
    rig_open(&r, argv[2], 1, 3);
    bora_registry *reg = bora_registry_new();
    CHECK(bora_registry_add_dir(reg, argv[1], 1) == BORA_OK);
    bora_registry_load(reg);
    const bora_entry *e = bora_registry_find(reg, BORA_KIND_MODEL, "fixture");
    CHECK(e != NULL);
    if (!e)
        return test_summary("test_plugin_model");
    const bora_model_ops *ops = (const bora_model_ops *)e->ops;
    bora_cfg *cfg = bora_cfg_new();
    CHECK(bora_cfg_load_string(cfg, "model.yaml", "width: 5\n", 9) == BORA_OK);
    bora_model *m = NULL;
    CHECK(ops->create(&e->file->host, bora_cfg_root(cfg), &m) == BORA_OK);

    g_graph *train = g_graph_new(r.store, BORA_MODE_TRAIN),
            *eval = g_graph_new(r.store, BORA_MODE_EVAL);
    bora_tensor *loss = NULL, *logits = NULL;
    CHECK(ops->build(m, &train->pub, BORA_MODE_TRAIN, &loss) == BORA_OK);
    CHECK(ops->build(m, &eval->pub, BORA_MODE_EVAL, &logits) == BORA_OK);
    CHECK(r.store->n_slots == 2);
    g_graph *dec = g_graph_new(r.store, BORA_MODE_DECODE);
    bora_tensor *none = NULL;
    CHECK(ops->build(m, &dec->pub, BORA_MODE_DECODE, &none) == BORA_ERR_UNSUPPORTED);
    CHECK_CONTAINS(bora_error_get(), "fixture-model: fixture has no graph for mode 5");
    g_graph_free(dec);

    train->output = loss;
    if (logits && logits->base != logits)
        logits = eval->pub.api->contiguous(&eval->pub, logits);
    eval->output = logits;
    CHECK(loss && g_autodiff(train, loss) == BORA_OK && g_finalize(train) == BORA_OK);
    CHECK(logits && g_finalize(eval) == BORA_OK && g_store_materialize(r.store) == BORA_OK);
    int32_t x[4] = {4, 0, 3, 1}, y[4] = {0, 1, 2, 1}; /* one sequence of four tokens */
    CHECK(g_set_input(train, "input_ids", x, sizeof x) == BORA_OK);
    CHECK(g_set_input(train, "targets", y, sizeof y) == BORA_OK);
    CHECK(g_set_input(eval, "input_ids", x, sizeof x) == BORA_OK);
    float first = 0, last = 0;
    for (int step = 0; step < 30; step++) {
        CHECK(g_store_zero_grads(r.store) == BORA_OK && g_run(train) == BORA_OK);
        CHECK(g_read(train, loss, &last, sizeof last) == BORA_OK);
        if (step == 0)
            first = last;
        float *p = (float *)r.store->param_ptr, *gr = (float *)r.store->grad_ptr;
        for (size_t i = 0; i < r.store->param_bytes / sizeof(float); i++)
            p[i] -= 0.5f * gr[i];
    }
    printf("test_plugin_model: loss %.4f -> %.4f\n", first, last);
    CHECK(last < first * 0.5f);
    /* The eval graph sees the trained parameters: its logits pick the labels. */
    float lg[12];
    CHECK(g_run(eval) == BORA_OK && g_read(eval, logits, lg, sizeof lg) == BORA_OK);
    int right = 0;
    for (int i = 0; i < 4; i++) {
        int best = 0;
        for (int c = 1; c < 3; c++)
            if (lg[i * 3 + c] > lg[i * 3 + best])
                best = c;
        right += best == y[i];
    }
    CHECK(right == 4);
    g_graph_free(train);
    g_graph_free(eval);
    ops->destroy(m);
    bora_cfg_free(cfg);
    bora_registry_free(reg);
    rig_close(&r);
    return test_summary("test_plugin_model");
}
