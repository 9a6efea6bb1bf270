/* tests/backend/test_collectives.c — the CPU backend's collectives (ABI 1.16) under mpirun:
 * reduce-scatter into a running sum, all-gather, all-reduce and broadcast, over counts that
 * split evenly, unevenly and into empty slices. Every rank makes every rank's data from a
 * formula, so the expected results are computed here with plain loops, a left fold in rank
 * order, without any message; values of mixed magnitudes make that order show in the bits (the
 * test checks that the reverse order would differ). Run with 3 ranks:
 *
 *     mpirun -np 3 test_collectives PLUGIN_DIR */
#include "../graph/rig.h"
#include "../test.h"
#include "dist/dist.h"

#include <math.h>
#include <stdint.h>

/* rank q's element i: a float with an exponent that varies, so sums round */
static float value(int q, size_t i, int salt)
{
    uint32_t h = (uint32_t)(q * 2654435761u) ^ (uint32_t)(i * 2246822519u) ^ (uint32_t)salt;
    h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
    return ldexpf((float)((int)(h % 2001) - 1000) / 1000.1f, (int)(h >> 24) % 24 - 12);
}

static size_t slice_step(size_t count, int size)
{
    return count / (size_t)size + (count % (size_t)size != 0);
}

static size_t slice_len(size_t count, int size, int r)
{
    size_t s = slice_step(count, size), at = (size_t)r * s;
    return at >= count ? 0 : count - at < s ? count - at : s;
}

static void check_reduce_scatter(rig *r, int rank, int size, size_t count)
{
    float *send = malloc((count ? count : 1) * sizeof *send);
    size_t s = slice_step(count, size), len = slice_len(count, size, rank);
    float *acc = malloc((s ? s : 1) * sizeof *acc), *want = malloc((s ? s : 1) * sizeof *want);
    for (size_t i = 0; i < count; i++)
        send[i] = value(rank, i, 1);
    int order_shows = 0;
    for (size_t i = 0; i < len; i++) {
        size_t g = (size_t)rank * s + i;
        acc[i] = want[i] = value(-1, g, 2); /* the running sum before this call */
        float back = acc[i];
        for (int q = 0; q < size; q++)
            want[i] = want[i] + value(q, g, 1);
        for (int q = size; q-- > 0;)
            back = back + value(q, g, 1);
        order_shows |= back != want[i];
    }
    CHECK(r->ops->reduce_scatter(r->be, send, acc, count, BORA_DTYPE_F32, BORA_REDUCE_SUM) ==
          BORA_OK);
    size_t bad = 0;
    for (size_t i = 0; i < len; i++)
        bad += memcmp(&acc[i], &want[i], sizeof(float)) != 0;
    if (bad)
        fprintf(stderr, "rank %d: reduce_scatter of %zu: %zu of %zu elements differ\n", rank, count,
                bad, len);
    CHECK(bad == 0);
    if (len > 100)
        CHECK(order_shows); /* the data can tell rank order from its reverse */
    /* then the whole sum gathered */
    float *all = malloc((count ? count : 1) * sizeof *all);
    CHECK(r->ops->all_gather(r->be, acc, all, count, BORA_DTYPE_F32) == BORA_OK);
    bad = 0;
    for (size_t g = 0; g < count; g++) {
        float w = value(-1, g, 2);
        for (int q = 0; q < size; q++)
            w = w + value(q, g, 1);
        bad += memcmp(&all[g], &w, sizeof w) != 0;
    }
    if (bad)
        fprintf(stderr, "rank %d: all_gather of %zu: %zu elements differ\n", rank, count, bad);
    CHECK(bad == 0);
    free(send), free(acc), free(want), free(all);
}

static void check_all_reduce(rig *r, int rank, int size, size_t count)
{
    double *x = malloc(count * sizeof *x);
    float *m = malloc(count * sizeof *m);
    for (size_t i = 0; i < count; i++) {
        x[i] = (double)value(rank, i, 3) * (1 + 1e-9 * (double)rank);
        m[i] = value(rank, i, 4);
    }
    CHECK(r->ops->all_reduce(r->be, x, count, BORA_DTYPE_F64, BORA_REDUCE_SUM) == BORA_OK);
    CHECK(r->ops->all_reduce(r->be, m, count, BORA_DTYPE_F32, BORA_REDUCE_MAX) == BORA_OK);
    size_t bad = 0;
    for (size_t i = 0; i < count; i++) {
        double w = (double)value(0, i, 3);
        float mw = value(0, i, 4);
        for (int q = 1; q < size; q++) {
            w = w + (double)value(q, i, 3) * (1 + 1e-9 * (double)q);
            mw = value(q, i, 4) > mw ? value(q, i, 4) : mw;
        }
        bad += memcmp(&x[i], &w, sizeof w) != 0 || m[i] != mw;
    }
    if (bad)
        fprintf(stderr, "rank %d: all_reduce of %zu: %zu elements differ\n", rank, count, bad);
    CHECK(bad == 0);
    free(x), free(m);
}

static void check_broadcast(rig *r, int rank, int size, size_t count)
{
    int root = size - 1;
    float *x = malloc(count * sizeof *x);
    for (size_t i = 0; i < count; i++)
        x[i] = value(rank, i, 5);
    CHECK(r->ops->broadcast(r->be, x, count, BORA_DTYPE_F32, root) == BORA_OK);
    size_t bad = 0;
    for (size_t i = 0; i < count; i++)
        bad += x[i] != value(root, i, 5);
    CHECK(bad == 0);
    CHECK(r->ops->broadcast(r->be, x, count, BORA_DTYPE_F32, size) != BORA_OK); /* no such rank */
    free(x);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: mpirun -np 3 %s PLUGIN_DIR\n", argv[0]);
        return 2;
    }
    if (bora_dist_init() != BORA_OK) {
        fprintf(stderr, "%s\n", bora_error_get());
        return 1;
    }
    const bora_dist *d = bora_dist_get();
    rig r;
    rig_open(&r, argv[1], 1, 1);
    CHECK(r.ops->group_join && r.ops->reduce_scatter && r.ops->all_gather);
    bora_group one = {sizeof one, 0, 1, 600, NULL};
    CHECK(r.ops->group_join(r.be, d->size > 1 ? bora_dist_group() : &one) == BORA_OK);
    static const size_t counts[] = {10, 2, 1, 0, 1000003};
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
        check_reduce_scatter(&r, d->rank, d->size, counts[k]);
    check_all_reduce(&r, d->rank, d->size, 100001);
    check_all_reduce(&r, d->rank, d->size, 2);
    check_broadcast(&r, d->rank, d->size, 4099);
    rig_close(&r);
    if (!test_failures)
        printf("test_collectives: rank %d of %d: all checks passed\n", d->rank, d->size);
    int rc = test_failures ? 1 : 0;
    bora_dist_finalize();
    return rc;
}
