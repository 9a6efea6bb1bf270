/* tests/graph/test_init.c — parameter initialisation: every element of a materialised parameter
 * is g_init_value(seed, name, init, index), bit for bit, whether the store filled it on one thread
 * or split a large parameter among the cores; normal(σ) values have the mean, spread and tails of
 * a normal distribution; the same name and seed give the same values in another store, another
 * name or seed different ones.
 *
 * usage: test_init PLUGIN_DIR */
#include "../test.h"
#include "rig.h"

#include <math.h>

typedef struct pspec {
    const char *name;
    int64_t rows, cols;
    bora_init init;
} pspec;

/* Materialise the parameters in a store with this seed; their values copied out, in order. */
static float *materialise(const char *plugin_dir, uint64_t seed, const pspec *ps, int np,
                          size_t *offsets)
{
    rig r;
    rig_open(&r, plugin_dir, 2, seed);
    g_graph *g = g_graph_new(r.store, BORA_MODE_TRAIN);
    for (int i = 0; i < np; i++) {
        bora_axis ax[2] = {{"r", ps[i].rows}, {"c", ps[i].cols}};
        CHECK(bora_param(&g->pub, ps[i].name, BORA_DTYPE_F32, 2, ax, ps[i].init, 0) != NULL);
    }
    CHECK(g_store_materialize(r.store) == BORA_OK);
    float *out = malloc(r.store->param_bytes);
    memcpy(out, r.store->param_ptr, r.store->param_bytes);
    for (int i = 0; i < np; i++)
        offsets[i] = r.store->slots[g_store_find(r.store, ps[i].name)].offset / sizeof(float);
    g_graph_free(g);
    rig_close(&r);
    return out;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_init PLUGIN_DIR\n");
        return 2;
    }
    bora_log_set_level(BORA_LOG_WARN);
    /* 3,000,009 elements: split among the cores; the others filled on one thread */
    const pspec ps[] = {{"h.0.mlp.c_fc.weight", 3, 1000003, bora_init_normal(0.02)},
                        {"small", 7, 5, bora_init_normal(1.0)},
                        {"gain", 4, 8, bora_init_ones()},
                        {"bias", 4, 8, bora_init_zeros()}};
    enum { NP = 4 };
    size_t off[NP], off2[NP], off3[NP];
    float *a = materialise(argv[1], 42, ps, NP, off);
    size_t wrong = 0, n_all = 0;
    for (int i = 0; i < NP; i++) {
        size_t n = (size_t)(ps[i].rows * ps[i].cols);
        for (size_t e = 0; e < n; e++, n_all++) {
            float want = (float)g_init_value(42, ps[i].name, ps[i].init, e);
            wrong += memcmp(&a[off[i] + e], &want, sizeof want) != 0;
        }
    }
    printf("%zu of %zu initial values differ from g_init_value\n", wrong, n_all);
    CHECK(wrong == 0 && n_all > 3000000);

    /* the large normal(0.02): mean, standard deviation, share beyond 2σ (4.55%) */
    size_t n = (size_t)(ps[0].rows * ps[0].cols), beyond = 0;
    double sum = 0, sq = 0;
    for (size_t e = 0; e < n; e++) {
        double v = a[off[0] + e];
        sum += v, sq += v * v;
        beyond += fabs(v) > 0.04;
    }
    double mean = sum / (double)n, sd = sqrt(sq / (double)n - mean * mean);
    printf("normal(0.02) over %zu values: mean %.3g, sd %.6f, beyond 2 sd %.4f%%\n", n, mean, sd,
           100.0 * (double)beyond / (double)n);
    CHECK(fabs(mean) < 5 * 0.02 / sqrt((double)n));
    CHECK(fabs(sd - 0.02) < 0.0002);
    CHECK(fabs((double)beyond / (double)n - 0.0455) < 0.001);
    CHECK(a[off[2]] == 1.0f && a[off[3]] == 0.0f);

    /* the same seed in a new store: the same bits; another seed: other values */
    float *b = materialise(argv[1], 42, ps, NP, off2);
    float *c = materialise(argv[1], 43, ps, NP, off3);
    CHECK(memcmp(&a[off[0]], &b[off2[0]], n * sizeof(float)) == 0);
    size_t same = 0;
    for (size_t e = 0; e < n; e++)
        same += a[off[0] + e] == c[off3[0] + e];
    CHECK(same < n / 1000);
    free(a);
    free(b);
    free(c);
    return test_summary("test_init");
}
