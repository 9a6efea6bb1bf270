/* plugins/backends/cpu/collective.c — collectives over the host's process group (ABI 1.16), on
 * MPI point-to-point messages: every rank's slice is sent whole and the combining is ours, a
 * left fold in rank order (((x_0 + x_1) + x_2) + ...), so the bits never depend on which
 * message came first, nor on MPI's own reduction algorithms. Every wait has the group's
 * deadline and names the ranks still owing a message. Built without MPI, a group of one only. */
#define _POSIX_C_SOURCE 200809L
#include "cpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef BORA_HAVE_MPI
#include <mpi.h>
#endif

bora_status cpu_group_join(bora_backend *b, const bora_group *g)
{
    if (!g || g->struct_size < sizeof(bora_group) || g->size < 1 || g->rank < 0 ||
        g->rank >= g->size || !(g->timeout_s > 0))
        return b->h->fail(b->h, BORA_ERR_INVALID, "group_join: not a process group");
#ifdef BORA_HAVE_MPI
    if (g->size > 1 && !g->mpi_comm)
        return b->h->fail(b->h, BORA_ERR_UNSUPPORTED,
                          "the CPU backend's collectives run over MPI; this group has none");
#else
    if (g->size > 1)
        return b->h->fail(b->h, BORA_ERR_UNSUPPORTED,
                          "this CPU backend was built without MPI (BORA_MPI=OFF): it cannot "
                          "join a group of %d processes",
                          g->size);
#endif
    b->rank = g->rank;
    b->size = g->size;
    b->timeout_s = g->timeout_s;
    b->comm = g->mpi_comm;
    return BORA_OK;
}

/* Rank r's slice of count elements: [r·s, r·s + len) with s = ceil(count / size). */
static size_t slice_step(const bora_backend *b, size_t count)
{
    size_t n = (size_t)(b->size > 0 ? b->size : 1);
    return count / n + (count % n != 0);
}

static size_t slice_len(const bora_backend *b, size_t count, int r)
{
    size_t s = slice_step(b, count), at = (size_t)r * s;
    return at >= count ? 0 : count - at < s ? count - at : s;
}

/* acc[i] = acc[i] op x[i], one rounding per element (element i is touched at index i only, so
 * the bits are those of a scalar loop). */
static bora_status fold(bora_backend *b, void *acc, const void *x, size_t n, int32_t dtype,
                        int32_t op)
{
    if (dtype == BORA_DTYPE_F32 && op == BORA_REDUCE_SUM) {
        float *a = acc;
        const float *y = x;
        for (size_t i = 0; i < n; i++)
            a[i] = a[i] + y[i];
    } else if (dtype == BORA_DTYPE_F64 && op == BORA_REDUCE_SUM) {
        double *a = acc;
        const double *y = x;
        for (size_t i = 0; i < n; i++)
            a[i] = a[i] + y[i];
    } else if (dtype == BORA_DTYPE_F32 && op == BORA_REDUCE_MAX) {
        float *a = acc;
        const float *y = x;
        for (size_t i = 0; i < n; i++)
            a[i] = y[i] > a[i] || y[i] != y[i] ? y[i] : a[i];
    } else if (dtype == BORA_DTYPE_F64 && op == BORA_REDUCE_MAX) {
        double *a = acc;
        const double *y = x;
        for (size_t i = 0; i < n; i++)
            a[i] = y[i] > a[i] || y[i] != y[i] ? y[i] : a[i];
    } else
        return b->h->fail(b->h, BORA_ERR_UNSUPPORTED,
                          "collectives reduce f32 and f64 by sum or max, not dtype %d op %d",
                          (int)dtype, (int)op);
    return BORA_OK;
}

#ifdef BORA_HAVE_MPI

enum { TAG_REDUCE_SCATTER = 101, TAG_ALL_GATHER, TAG_ALL_REDUCE, TAG_BROADCAST };
#define CHUNK ((size_t)1 << 30) /* MPI counts are int: larger messages go in pieces */

typedef struct msgs {
    MPI_Request *r;
    int *peer;
    int n, cap;
} msgs;

static bora_status post(bora_backend *b, msgs *m, int send, void *buf, size_t bytes, int peer,
                        int tag)
{
    MPI_Comm comm = *(const MPI_Comm *)b->comm;
    size_t at = 0;
    do {
        size_t len = bytes - at < CHUNK ? bytes - at : CHUNK;
        if (m->n == m->cap) {
            int cap = m->cap ? 2 * m->cap : 16;
            MPI_Request *r = realloc(m->r, (size_t)cap * sizeof *r);
            if (r)
                m->r = r;
            int *p = realloc(m->peer, (size_t)cap * sizeof *p);
            if (p)
                m->peer = p;
            if (!r || !p)
                return b->h->fail(b->h, BORA_ERR_NOMEM, "out of memory");
            m->cap = cap;
        }
        int rc =
            send ? MPI_Isend((char *)buf + at, (int)len, MPI_BYTE, peer, tag, comm, &m->r[m->n])
                 : MPI_Irecv((char *)buf + at, (int)len, MPI_BYTE, peer, tag, comm, &m->r[m->n]);
        if (rc != MPI_SUCCESS)
            return b->h->fail(b->h, BORA_ERR_IO, "MPI: cannot reach rank %d", peer);
        m->peer[m->n++] = peer;
        at += len;
    } while (at < bytes);
    return BORA_OK;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Wait for every message, at most the group's timeout; then name the ranks still owing one. */
static bora_status wait_all(bora_backend *b, msgs *m, const char *what)
{
    int *done = malloc((size_t)(m->n ? m->n : 1) * sizeof *done);
    if (!done)
        return b->h->fail(b->h, BORA_ERR_NOMEM, "out of memory");
    double t0 = now_s();
    long pause_ns = 0;
    bora_status st = BORA_OK;
    for (;;) {
        int out = 0;
        if (MPI_Testsome(m->n, m->r, &out, done, MPI_STATUSES_IGNORE) != MPI_SUCCESS) {
            st = b->h->fail(b->h, BORA_ERR_IO,
                            "%s: a message to or from another rank failed (did a rank die?)", what);
            break;
        }
        if (out == MPI_UNDEFINED)
            break;
        if (out > 0)
            continue;
        if (now_s() - t0 > b->timeout_s) {
            char who[512] = "";
            size_t len = 0;
            int last = -1;
            for (int i = 0; i < m->n; i++)
                if (m->r[i] != MPI_REQUEST_NULL && m->peer[i] != last && len + 16 < sizeof who) {
                    len += (size_t)snprintf(who + len, sizeof who - len, "%s%d", len ? ", " : "",
                                            m->peer[i]);
                    last = m->peer[i];
                }
            st = b->h->fail(b->h, BORA_ERR_IO,
                            "rank %d: no answer from rank %s in %s after %.0f s "
                            "(BORA_DIST_TIMEOUT_S); ending the run",
                            b->rank, who, what, b->timeout_s);
            /* the caller frees the buffers: MPI must not write to them later */
            for (int i = 0; i < m->n; i++)
                if (m->r[i] != MPI_REQUEST_NULL) {
                    MPI_Cancel(&m->r[i]);
                    MPI_Request_free(&m->r[i]);
                }
            break;
        }
        /* MPI moves large messages only while both sides are in its calls: poll without pause
         * for the first 100 ms (a step's usual wait), then every 100 µs (a peer far behind) */
        if (pause_ns || now_s() - t0 > 0.1) {
            struct timespec ts = {0, pause_ns = 100000};
            nanosleep(&ts, NULL);
        }
    }
    free(done);
    return st;
}

/* Every rank's slice of send (count elements) into parts (size × len elements, rank order),
 * this rank's own included. */
static bora_status exchange_slices(bora_backend *b, const void *send, void *parts, size_t count,
                                   size_t es, int tag, const char *what)
{
    size_t s = slice_step(b, count), len = slice_len(b, count, b->rank);
    msgs m = {0};
    bora_status st = BORA_OK;
    for (int q = 0; q < b->size && st == BORA_OK; q++)
        if (q != b->rank)
            st = post(b, &m, 0, (char *)parts + (size_t)q * len * es, len * es, q, tag);
    for (int q = 0; q < b->size && st == BORA_OK; q++)
        if (q != b->rank)
            st = post(b, &m, 1, (char *)send + (size_t)q * s * es, slice_len(b, count, q) * es, q,
                      tag);
    memcpy((char *)parts + (size_t)b->rank * len * es,
           (const char *)send + (size_t)b->rank * s * es, len * es);
    if (st == BORA_OK)
        st = wait_all(b, &m, what);
    free(m.r);
    free(m.peer);
    return st;
}

static bora_status gather_slices(bora_backend *b, void *recv, size_t count, size_t es, int tag,
                                 const char *what)
{
    size_t s = slice_step(b, count);
    char *own = (char *)recv + (size_t)b->rank * s * es;
    msgs m = {0};
    bora_status st = BORA_OK;
    for (int q = 0; q < b->size && st == BORA_OK; q++)
        if (q != b->rank)
            st = post(b, &m, 0, (char *)recv + (size_t)q * s * es, slice_len(b, count, q) * es, q,
                      tag);
    for (int q = 0; q < b->size && st == BORA_OK; q++)
        if (q != b->rank)
            st = post(b, &m, 1, own, slice_len(b, count, b->rank) * es, q, tag);
    if (st == BORA_OK)
        st = wait_all(b, &m, what);
    free(m.r);
    free(m.peer);
    return st;
}

#endif

static bora_status no_group(bora_backend *b)
{
    return b->h->fail(b->h, BORA_ERR_INVALID, "a collective before group_join");
}

bora_status cpu_reduce_scatter(bora_backend *b, const void *send, void *recv, size_t count,
                               int32_t dtype, int32_t op)
{
    if (b->size < 1)
        return no_group(b);
    size_t es = bora_dtype_size(dtype), len = slice_len(b, count, b->rank);
    if (b->size == 1)
        return fold(b, recv, send, count, dtype, op);
#ifdef BORA_HAVE_MPI
    size_t bytes;
    if (!es || __builtin_mul_overflow(len * es, (size_t)b->size, &bytes))
        return b->h->fail(b->h, BORA_ERR_INVALID, "reduce_scatter: %zu elements of dtype %d", count,
                          (int)dtype);
    char *parts = cpu_scratch(b, bytes);
    if (!parts)
        return b->h->fail(b->h, BORA_ERR_NOMEM, "reduce_scatter: cannot allocate %zu bytes", bytes);
    bora_status st =
        exchange_slices(b, send, parts, count, es, TAG_REDUCE_SCATTER, "the gradients' reduction");
    for (int q = 0; q < b->size && st == BORA_OK; q++)
        st = fold(b, recv, parts + (size_t)q * len * es, len, dtype, op);
    return st;
#else
    (void)es, (void)len;
    return no_group(b);
#endif
}

bora_status cpu_all_gather(bora_backend *b, const void *send, void *recv, size_t count,
                           int32_t dtype)
{
    if (b->size < 1)
        return no_group(b);
    size_t es = bora_dtype_size(dtype), s = slice_step(b, count);
    char *own = (char *)recv + (size_t)b->rank * s * es;
    if (send != own)
        memmove(own, send, slice_len(b, count, b->rank) * es);
    if (b->size == 1)
        return BORA_OK;
#ifdef BORA_HAVE_MPI
    return gather_slices(b, recv, count, es, TAG_ALL_GATHER, "the all-gather");
#else
    return no_group(b);
#endif
}

bora_status cpu_all_reduce(bora_backend *b, void *data, size_t count, int32_t dtype, int32_t op)
{
    if (b->size < 1)
        return no_group(b);
    if (b->size == 1)
        return BORA_OK;
#ifdef BORA_HAVE_MPI
    /* each rank folds its slice of everyone's data, x_0 first, then all gather */
    size_t es = bora_dtype_size(dtype), len = slice_len(b, count, b->rank), bytes;
    if (!es || __builtin_mul_overflow(len * es, (size_t)b->size, &bytes))
        return b->h->fail(b->h, BORA_ERR_INVALID, "all_reduce: %zu elements of dtype %d", count,
                          (int)dtype);
    char *parts = cpu_scratch(b, bytes);
    if (!parts)
        return b->h->fail(b->h, BORA_ERR_NOMEM, "all_reduce: cannot allocate %zu bytes", bytes);
    bora_status st = exchange_slices(b, data, parts, count, es, TAG_ALL_REDUCE, "the all-reduce");
    char *own = (char *)data + (size_t)b->rank * slice_step(b, count) * es;
    if (st == BORA_OK)
        memcpy(own, parts, len * es);
    for (int q = 1; q < b->size && st == BORA_OK; q++)
        st = fold(b, own, parts + (size_t)q * len * es, len, dtype, op);
    if (st == BORA_OK)
        st = gather_slices(b, data, count, es, TAG_ALL_REDUCE, "the all-reduce");
    return st;
#else
    (void)data, (void)count, (void)dtype, (void)op;
    return no_group(b);
#endif
}

bora_status cpu_broadcast(bora_backend *b, void *data, size_t count, int32_t dtype, int32_t root)
{
    if (b->size < 1)
        return no_group(b);
    if (root < 0 || root >= b->size)
        return b->h->fail(b->h, BORA_ERR_INVALID, "broadcast: no rank %d in a group of %d",
                          (int)root, b->size);
    if (b->size == 1)
        return BORA_OK;
#ifdef BORA_HAVE_MPI
    size_t bytes = count * bora_dtype_size(dtype);
    msgs m = {0};
    bora_status st = BORA_OK;
    if (b->rank == root) {
        for (int q = 0; q < b->size && st == BORA_OK; q++)
            if (q != root)
                st = post(b, &m, 1, data, bytes, q, TAG_BROADCAST);
    } else
        st = post(b, &m, 0, data, bytes, root, TAG_BROADCAST);
    if (st == BORA_OK)
        st = wait_all(b, &m, "the broadcast");
    free(m.r);
    free(m.peer);
    return st;
#else
    (void)data, (void)count, (void)dtype;
    return no_group(b);
#endif
}
