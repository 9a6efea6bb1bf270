/* bench/dist/bench_collectives.c — the time of one data parallel step's gradient traffic:
 * the CPU backend's reduce-scatter into a running sum and all-gather of COUNT f32 values (the
 * gradient block), REPEAT times after a barrier, under mpirun. Rank 0 prints the mean time and
 * the bus bandwidth, 2 (N - 1) / N × 4 × COUNT bytes per rank over that time.
 *
 *     mpirun -np 2 bench_collectives PLUGIN_DIR [COUNT [REPEAT]] */
#include "config/config.h"
#include "dist/dist.h"
#include "plugin/registry.h"
#include "util/log.h"
#include "util/str.h"

#include <bora/backend.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: mpirun -np N %s PLUGIN_DIR [COUNT [REPEAT]]\n", argv[0]);
        return 2;
    }
    size_t count = argc > 2 ? strtoull(argv[2], NULL, 10) : 10u << 20;
    int repeat = argc > 3 ? atoi(argv[3]) : 20;
    if (bora_dist_init() != BORA_OK) {
        fprintf(stderr, "%s\n", bora_error_get());
        return 1;
    }
    const bora_dist *d = bora_dist_get();
    bora_registry *reg = bora_registry_new();
    bora_registry_add_dir(reg, argv[1], 1);
    bora_registry_load(reg);
    const bora_entry *e = bora_registry_find(reg, BORA_KIND_BACKEND, "cpu");
    bora_cfg *cfg = bora_cfg_new();
    bora_cfg_load_string(cfg, "bench.yaml", "num_threads: 1\n", strlen("num_threads: 1\n"));
    const bora_backend_ops *ops = e ? (const bora_backend_ops *)e->ops : NULL;
    bora_backend *be = NULL;
    if (!ops || ops->create(&e->file->host, bora_cfg_root(cfg), &be) != BORA_OK ||
        (d->size > 1 && ops->group_join(be, bora_dist_group()) != BORA_OK)) {
        fprintf(stderr, "bench_collectives: %s\n", bora_error_get());
        return 1;
    }
    size_t slice = count / (size_t)d->size + 1;
    float *grad = calloc(count, sizeof *grad), *acc = calloc(slice, sizeof *acc);
    for (size_t i = 0; i < count; i++)
        grad[i] = (float)(i % 1000) * 1e-3f;
    double total = 0;
    for (int k = -2; k < repeat; k++) { /* two rounds to warm up */
        bora_dist_barrier("the benchmark", 0);
        double t0 = bora_now_s();
        memset(acc, 0, slice * sizeof *acc);
        if (ops->reduce_scatter(be, grad, acc, count, BORA_DTYPE_F32, BORA_REDUCE_SUM) != BORA_OK ||
            ops->all_gather(be, acc, grad, count, BORA_DTYPE_F32) != BORA_OK) {
            fprintf(stderr, "bench_collectives: %s\n", bora_error_get());
            return 1;
        }
        if (k >= 0)
            total += bora_now_s() - t0;
    }
    double mean = total / repeat, bytes = 2.0 * (d->size - 1) / d->size * 4.0 * (double)count;
    if (d->rank == 0)
        printf("ranks %d  count %zu (%.1f MB of f32)  reduce-scatter + all-gather %.2f ms  bus "
               "bandwidth %.2f GB/s\n",
               d->size, count, 4e-6 * (double)count, mean * 1e3, bytes / mean / 1e9);
    free(grad), free(acc);
    ops->destroy(be);
    bora_cfg_free(cfg);
    bora_registry_free(reg);
    bora_dist_finalize();
    return 0;
}
