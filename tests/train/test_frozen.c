/* tests/train/test_frozen.c — frozen parameters (BORA_PARAM_FROZEN) and the sinusoids init
 * (BORA_INIT_SINUSOIDS). A loss reads a trainable w and a frozen f, so f would get a gradient
 * and an update if it were not frozen: after three AdamW steps f keeps its initial bits, its
 * gradient stays zero, the global norm is w's alone (written out here in double), f has no
 * optimizer state (none in the apply graph's slot table, none in optimizer.safetensors), and the
 * checkpoint's model.safetensors holds f with its values. f's initial values are Whisper's
 * sinusoids, computed here in double from the formula (within f32's rounding of the angle);
 * sinusoids over an odd or a 3-d table are refused, naming the parameter.
 *
 * usage: test_frozen PLUGIN_DIR WORK_DIR */
#include "../graph/rig.h"
#include "../test.h"
#include "ckpt/checkpoint.h"
#include "ckpt/safetensors.h"
#include "train/apply.h"

#include <math.h>

enum { T = 6, C = 8 };

/* sinusoids(T, C)[t][c] in double: sin(t·f_i) then cos(t·f_i), f_i = 10000^(-i/(C/2 - 1)) */
static double sinusoid(int t, int c)
{
    int half = C / 2, i = c < half ? c : c - half;
    double angle = t * exp(-i * log(10000.0) / (half - 1));
    return c < half ? sin(angle) : cos(angle);
}

static void refused(const char *plugin_dir, int ndim, const bora_axis *axes)
{
    rig r;
    rig_open(&r, plugin_dir, 1, 3);
    g_graph *g = g_graph_new(r.store, BORA_MODE_TRAIN);
    CHECK(bora_param(&g->pub, "bad", BORA_DTYPE_F32, ndim, axes, bora_init_sinusoids(), 0) == NULL);
    printf("refused: %s\n", g->error);
    CHECK(strstr(g->error, "'bad'") && strstr(g->error, "sinusoids"));
    g_graph_free(g);
    rig_close(&r);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: test_frozen PLUGIN_DIR WORK_DIR\n");
        return 2;
    }
    bora_log_set_level(BORA_LOG_WARN);
    rig r;
    rig_open(&r, argv[1], 2, 3);
    bora_optimizer *opt;
    const bora_optimizer_ops *ops = rig_adamw(&r, &opt);
    /* loss = Σ (w·f)²: gradients 2·w·f² to w and 2·w²·f to f (were it trainable) */
    g_graph *train = g_graph_new(r.store, BORA_MODE_TRAIN);
    bora_graph *g = &train->pub;
    bora_axis ax[2] = {{"t", T}, {"c", C}};
    bora_tensor *w = bora_param(g, "w", BORA_DTYPE_F32, 2, ax, bora_init_normal(1.0), 0);
    bora_tensor *f = bora_param(g, "f", BORA_DTYPE_F32, 2, ax, bora_init_sinusoids(),
                                BORA_PARAM_FROZEN | BORA_PARAM_NO_DECAY);
    const char *tc[] = {"t", "c"};
    bora_tensor *wf = bora_mul(g, w, f);
    bora_tensor *loss = g->api->reduce(g, BORA_OP_SUM, bora_mul(g, wf, wf), 2, tc);
    train->output = loss;
    bora_apply ap;
    CHECK(g_autodiff(train, loss) == BORA_OK && g_finalize(train) == BORA_OK);
    CHECK(bora_apply_build(r.store, ops, opt, 0, &ap) == BORA_OK);
    CHECK(g_store_materialize(r.store) == BORA_OK);
    long fi = g_store_find(r.store, "f"), wi = g_store_find(r.store, "w");
    CHECK(ap.slots[fi] == NULL && ap.slots[wi] != NULL);

    float *pf = rig_param(&r, "f"), *pw = rig_param(&r, "w"), f0[T * C];
    memcpy(f0, pf, sizeof f0);
    double worst = 0;
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++)
            worst = fmax(worst, fabs(f0[t * C + c] - sinusoid(t, c)));
    printf("sinusoids: largest difference from the formula in double %.3g\n", worst);
    CHECK(worst < 2e-6);
    CHECK(f0[0] == 0.0f && f0[C / 2] == 1.0f); /* t = 0: sin 0, cos 0 */

    for (int step = 1; step <= 3; step++) {
        double w_before[T * C], norm2 = 0;
        for (int i = 0; i < T * C; i++)
            w_before[i] = pw[i];
        CHECK(g_run(train) == BORA_OK);
        for (int i = 0; i < T * C; i++) {
            double gw = 2.0 * w_before[i] * (double)pf[i] * (double)pf[i];
            norm2 += gw * gw;
        }
        float *gf = rig_grad(&r, "f");
        int zero = 1;
        for (int i = 0; i < T * C; i++)
            zero &= gf[i] == 0.0f;
        CHECK(zero);
        double norm;
        bora_metric mets[TR_MAX_METRICS];
        size_t n_mets;
        CHECK(bora_apply_step(&ap, step, 1e-2, &norm, mets, &n_mets) == BORA_OK);
        printf("step %d: gradient norm %.9g, w's alone %.9g\n", step, norm, sqrt(norm2));
        CHECK(fabs(norm - sqrt(norm2)) <= 2e-6 * sqrt(norm2));
        CHECK(!memcmp(pf, f0, sizeof f0));
        CHECK(pw[0] != (float)w_before[0]);
    }
    /* f's place in the optimizer's state blocks was never written */
    for (size_t b = 0; b < r.store->n_states; b++) {
        const float *sf = (const float *)(r.store->state_ptr + b * r.store->param_bytes +
                                          r.store->slots[fi].offset);
        int zero = 1;
        for (int i = 0; i < T * C; i++)
            zero &= sf[i] == 0.0f;
        CHECK(zero);
    }

    char dir[4096];
    CHECK(bora_ckpt_save(r.store, ap.slots, argv[2], 3, "{}", dir, sizeof dir) == BORA_OK);
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    bora_safetensors *st = NULL;
    CHECK(bora_st_open(path, &st) == BORA_OK);
    const bora_st_tensor *tf = st ? bora_st_find(st, "f") : NULL;
    float saved[T * C] = {0};
    CHECK(tf && bora_st_read(st, tf, saved, sizeof saved) == BORA_OK);
    CHECK(!memcmp(saved, f0, sizeof f0));
    bora_st_close(st);
    snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
    CHECK(bora_st_open(path, &st) == BORA_OK);
    size_t of_f = 0, of_w = 0;
    for (size_t i = 0; st && i < st->n_tensors; i++) {
        const char *name = st->tensors[i].name, *dot = strrchr(name, '.');
        of_f += dot && !strcmp(dot, ".f");
        of_w += dot && !strcmp(dot, ".w");
    }
    printf("optimizer.safetensors: %zu tensors of w, %zu of f\n", of_w, of_f);
    CHECK(of_w == 2 && of_f == 0);
    bora_st_close(st);
    bora_apply_free(&ap);
    g_graph_free(train);
    ops->destroy(opt);
    rig_close(&r);

    bora_axis odd[2] = {{"t", 4}, {"c", 7}}, three[3] = {{"a", 2}, {"t", 4}, {"c", 8}};
    refused(argv[1], 2, odd);
    refused(argv[1], 3, three);
    return test_summary("test_frozen");
}
