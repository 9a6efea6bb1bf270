/* tests/train/test_adamw.c — the apply graph with the adamw plugin against AdamW written out
 * here in double precision: two steps (bias corrections differ), weight decay on a matrix but
 * not on a bias, the global norm, clipping, and gradients zeroed afterwards.
 * Tolerance: 2e-6 relative (the graph computes in f32).
 *
 * usage: test_adamw PLUGIN_DIR */
#include "../graph/rig.h"
#include "../test.h"
#include "train/apply.h"

#include <math.h>

static int close_to(double got, double want)
{
    return fabs(got - want) <= 2e-6 * fmax(1.0, fabs(want));
}

static void run(const char *plugin_dir, double max_norm)
{
    rig r;
    rig_open(&r, plugin_dir, 2, 3);
    bora_optimizer *opt;
    const bora_optimizer_ops *ops = rig_adamw(&r, &opt); /* defaults: 0.9 0.95 1e-8 0.1 */
    /* loss = Σ w² + Σ b³: gradients 2w and 3b² */
    g_graph *train = g_graph_new(r.store, BORA_MODE_TRAIN);
    bora_graph *g = &train->pub;
    bora_axis wa[2] = {{"x", 3}, {"y", 2}};
    bora_tensor *w = bora_param(g, "w", BORA_DTYPE_F32, 2, wa, bora_init_normal(1.0), 0);
    bora_tensor *b =
        bora_param(g, "b", BORA_DTYPE_F32, 1, wa + 1, bora_init_constant(0.5), BORA_PARAM_NO_DECAY);
    const char *xy[] = {"x", "y"}, *y[] = {"y"};
    bora_tensor *loss =
        bora_add(g, g->api->reduce(g, BORA_OP_SUM, bora_mul(g, w, w), 2, xy),
                 g->api->reduce(g, BORA_OP_SUM, bora_mul(g, b, bora_mul(g, b, b)), 1, y));
    train->output = loss;
    bora_apply ap;
    CHECK(g_autodiff(train, loss) == BORA_OK && g_finalize(train) == BORA_OK);
    CHECK(bora_apply_build(r.store, ops, opt, max_norm, &ap) == BORA_OK);
    CHECK(g_store_materialize(r.store) == BORA_OK);
    double p[8], m[8] = {0}, v[8] = {0};
    float *pw = rig_param(&r, "w"), *pb = rig_param(&r, "b");
    for (int i = 0; i < 6; i++)
        p[i] = pw[i];
    p[6] = pb[0], p[7] = pb[1];
    for (int step = 1; step <= 2; step++) {
        double lr = step == 1 ? 1e-2 : 5e-3, grad[8], norm2 = 0;
        CHECK(g_run(train) == BORA_OK);
        for (int i = 0; i < 8; i++) {
            grad[i] = i < 6 ? 2 * p[i] : 3 * p[i] * p[i];
            norm2 += grad[i] * grad[i];
        }
        double norm;
        bora_metric mets[TR_MAX_METRICS];
        size_t n_mets;
        CHECK(bora_apply_step(&ap, step, lr, &norm, mets, &n_mets) == BORA_OK);
        CHECK(close_to(norm, sqrt(norm2)));
        double scale = max_norm > 0 && sqrt(norm2) > max_norm ? max_norm / sqrt(norm2) : 1.0;
        for (int i = 0; i < 8; i++) {
            double gi = grad[i] * scale;
            if (i < 6)
                p[i] -= lr * 0.1 * p[i];
            m[i] = 0.9 * m[i] + 0.1 * gi;
            v[i] = 0.95 * v[i] + 0.05 * gi * gi;
            double denom = sqrt(v[i]) / sqrt(1 - pow(0.95, step)) + 1e-8;
            p[i] -= lr / (1 - pow(0.9, step)) * m[i] / denom;
        }
        float *sm = (float *)(r.store->state_ptr + r.store->slots[0].offset);
        float *sv = (float *)(r.store->state_ptr + r.store->param_bytes + r.store->slots[0].offset);
        for (int i = 0; i < 6; i++) {
            if (!close_to(pw[i], p[i]) || !close_to(sm[i], m[i]) || !close_to(sv[i], v[i])) {
                fprintf(stderr,
                        "step %d w[%d]: p %.9g want %.9g, m %.9g want %.9g, v %.9g "
                        "want %.9g\n",
                        step, i, pw[i], p[i], sm[i], m[i], sv[i], v[i]);
                test_failures++;
            }
        }
        CHECK(close_to(pb[0], p[6]) && close_to(pb[1], p[7]));
        float *gw = rig_grad(&r, "w");
        CHECK(gw[0] == 0 && gw[5] == 0); /* zeroed for the next step */
    }
    bora_apply_free(&ap);
    g_graph_free(train);
    ops->destroy(opt);
    rig_close(&r);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_adamw PLUGIN_DIR\n");
        return 2;
    }
    run(argv[1], 0);   /* no clipping */
    run(argv[1], 0.5); /* clipped: the norm is larger */
    return test_summary("test_adamw");
}
