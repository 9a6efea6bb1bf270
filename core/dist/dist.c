/* core/dist/dist.c — the process group (see dist.h): MPI started only under a launcher, and
 * the host's small exchanges as point-to-point messages with a deadline, so a peer that stops
 * answering is named rather than waited on forever. */
#include "dist.h"

#include "../config/config.h"
#include "../util/log.h"
#include "../util/str.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef BORA_HAVE_MPI
#include <mpi.h>
#endif

static bora_dist g_dist = {.rank = 0, .size = 1, .timeout_s = 600};
static bora_group g_group;

const bora_dist *bora_dist_get(void)
{
    return &g_dist;
}

const bora_group *bora_dist_group(void)
{
    return g_dist.size > 1 ? &g_group : NULL;
}

/* The launcher's word on how many processes there are: *size (0 when it does not say) and the
 * variable that said it; NULL when no launcher's variable is set. */
static const char *launcher(long *size)
{
    static const char *const sized[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};
    *size = 0;
    for (size_t i = 0; i < sizeof sized / sizeof sized[0]; i++) {
        const char *v = getenv(sized[i]);
        if (v && *v) {
            *size = strtol(v, NULL, 10);
            return sized[i];
        }
    }
    const char *pmix = getenv("PMIX_RANK");
    if (pmix && *pmix) { /* srun --mpi=pmix: Slurm says the step's size */
        const char *n = getenv("SLURM_STEP_NUM_TASKS");
        *size = n && *n ? strtol(n, NULL, 10) : 0;
        return "PMIX_RANK";
    }
    return NULL;
}

static bora_status read_timeout(void)
{
    const char *env = getenv("BORA_DIST_TIMEOUT_S");
    if (!env || !*env)
        return BORA_OK;
    double v = 0;
    if (bora_parse_float(env, &v) || !(v > 0) || v > 1e9)
        return bora_error_set(BORA_ERR_CONFIG,
                              "BORA_DIST_TIMEOUT_S: '%s' is not a number of seconds above 0 (how "
                              "long a rank waits for another before ending the run)",
                              env);
    g_dist.timeout_s = v;
    return BORA_OK;
}

#ifdef BORA_HAVE_MPI

static MPI_Comm host_comm = MPI_COMM_NULL, backend_comm = MPI_COMM_NULL;

enum { TAG_HOST = 1 };

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

bora_status bora_dist_init(void)
{
    long size = 0;
    const char *var = launcher(&size);
    g_dist.launcher = var;
    if (read_timeout() != BORA_OK)
        return BORA_ERR_CONFIG;
    if (!var)
        return BORA_OK; /* a plain run: no MPI at all */
    /* MPI's own threads start blocked from SIGINT and SIGTERM, as every thread of bora train
     * but the one that waits for them (trainer.c). */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    int provided = 0, rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != MPI_SUCCESS)
        return bora_error_set(BORA_ERR_IO, "MPI_Init failed (launched by %s=%s)", var, getenv(var));
    g_dist.mpi = 1;
    if (provided < MPI_THREAD_FUNNELED) {
        MPI_Finalize();
        g_dist.mpi = 0;
        return bora_error_set(BORA_ERR_UNSUPPORTED,
                              "this MPI library gives thread level %d, below MPI_THREAD_FUNNELED: "
                              "bora's threads (OpenMP, the data builders) run beside MPI calls "
                              "made by one thread; use an MPI built with thread support",
                              provided);
    }
    /* errors come back as codes (a peer that died), not as the default abort */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_dist.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_dist.size);
    MPI_Comm_dup(MPI_COMM_WORLD, &host_comm);
    MPI_Comm_dup(MPI_COMM_WORLD, &backend_comm);
    MPI_Comm_set_errhandler(host_comm, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(backend_comm, MPI_ERRORS_RETURN);
    g_group = (bora_group){.struct_size = sizeof g_group,
                           .rank = g_dist.rank,
                           .size = g_dist.size,
                           .timeout_s = g_dist.timeout_s,
                           .mpi_comm = &backend_comm};
    return BORA_OK;
}

/* Messages larger than this go in pieces (MPI counts are int). */
#define CHUNK ((size_t)1 << 30)

typedef struct reqs {
    MPI_Request *r;
    int *peer;
    int n, cap;
} reqs;

static int reqs_add(reqs *q, int peer)
{
    if (q->n == q->cap) {
        int cap = q->cap ? 2 * q->cap : 16;
        MPI_Request *r = realloc(q->r, (size_t)cap * sizeof *r);
        if (r)
            q->r = r;
        int *p = realloc(q->peer, (size_t)cap * sizeof *p);
        if (p)
            q->peer = p;
        if (!r || !p)
            return -1;
        q->cap = cap;
    }
    q->peer[q->n] = peer;
    return q->n++;
}

static bora_status post(reqs *q, int send, void *buf, size_t bytes, int peer)
{
    for (size_t at = 0; at < bytes || (at == 0 && bytes == 0); at += CHUNK) {
        size_t len = bytes - at < CHUNK ? bytes - at : CHUNK;
        int i = reqs_add(q, peer);
        if (i < 0)
            return bora_error_set(BORA_ERR_NOMEM, "out of memory");
        int rc = send ? MPI_Isend((char *)buf + at, (int)len, MPI_BYTE, peer, TAG_HOST, host_comm,
                                  &q->r[i])
                      : MPI_Irecv((char *)buf + at, (int)len, MPI_BYTE, peer, TAG_HOST, host_comm,
                                  &q->r[i]);
        if (rc != MPI_SUCCESS)
            return bora_error_set(BORA_ERR_IO, "MPI: cannot reach rank %d", peer);
        if (bytes == 0)
            break;
    }
    return BORA_OK;
}

/* Wait for every request, at most timeout_s (<= 0: no deadline); on a timeout, the ranks still
 * owing a message are named. */
static bora_status wait_all(reqs *q, const char *what, double timeout_s)
{
    double t0 = now_s();
    long pause_ns = 0;
    int *done = malloc((size_t)(q->n ? q->n : 1) * sizeof *done);
    if (!done)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    bora_status st = BORA_OK;
    for (;;) {
        int out = 0;
        if (MPI_Testsome(q->n, q->r, &out, done, MPI_STATUSES_IGNORE) != MPI_SUCCESS) {
            st = bora_error_set(BORA_ERR_IO,
                                "%s: a message to or from another rank failed (did "
                                "a rank die?)",
                                what);
            break;
        }
        if (out == MPI_UNDEFINED)
            break; /* every request is complete */
        if (out > 0)
            continue;
        if (timeout_s > 0 && now_s() - t0 > timeout_s) {
            char who[512] = "";
            size_t len = 0;
            int last = -1;
            for (int i = 0; i < q->n; i++)
                if (q->r[i] != MPI_REQUEST_NULL && q->peer[i] != last && len + 16 < sizeof who) {
                    len += (size_t)snprintf(who + len, sizeof who - len, "%s%d", len ? ", " : "",
                                            q->peer[i]);
                    last = q->peer[i];
                }
            st = bora_error_set(BORA_ERR_IO,
                                "rank %d: no answer from rank %s in %s after %.0f s "
                                "(BORA_DIST_TIMEOUT_S); ending the run",
                                g_dist.rank, who, what, timeout_s);
            /* the caller frees the buffers: MPI must not write to them later */
            for (int i = 0; i < q->n; i++)
                if (q->r[i] != MPI_REQUEST_NULL) {
                    MPI_Cancel(&q->r[i]);
                    MPI_Request_free(&q->r[i]);
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

static void reqs_free(reqs *q)
{
    free(q->r);
    free(q->peer);
}

static bora_status allgather(const void *send, void *recv, size_t bytes, const char *what,
                             double timeout_s)
{
    if (g_dist.size == 1) {
        if (send != recv)
            memmove(recv, send, bytes);
        return BORA_OK;
    }
    char *own = (char *)recv + (size_t)g_dist.rank * bytes;
    if (send != own)
        memmove(own, send, bytes);
    reqs q = {0};
    bora_status st = BORA_OK;
    for (int p = 0; p < g_dist.size && st == BORA_OK; p++)
        if (p != g_dist.rank)
            st = post(&q, 0, (char *)recv + (size_t)p * bytes, bytes, p);
    for (int p = 0; p < g_dist.size && st == BORA_OK; p++)
        if (p != g_dist.rank)
            st = post(&q, 1, own, bytes, p);
    if (st == BORA_OK)
        st = wait_all(&q, what, timeout_s);
    reqs_free(&q);
    return st;
}

bora_status bora_dist_allgather(const void *send, void *recv, size_t bytes, const char *what)
{
    return allgather(send, recv, bytes, what, g_dist.timeout_s);
}

bora_status bora_dist_broadcast(void *data, size_t bytes, int root, const char *what)
{
    if (g_dist.size == 1)
        return BORA_OK;
    reqs q = {0};
    bora_status st = BORA_OK;
    if (g_dist.rank == root) {
        for (int p = 0; p < g_dist.size && st == BORA_OK; p++)
            if (p != root)
                st = post(&q, 1, data, bytes, p);
    } else
        st = post(&q, 0, data, bytes, root);
    if (st == BORA_OK)
        st = wait_all(&q, what, g_dist.timeout_s);
    reqs_free(&q);
    return st;
}

static bora_status one_peer(void *data, size_t bytes, int peer, int send, const char *what)
{
    if (g_dist.size == 1 || peer == g_dist.rank)
        return bora_error_set(BORA_ERR_INVALID, "%s: no other rank %d", what, peer);
    reqs q = {0};
    bora_status st = post(&q, send, data, bytes, peer);
    if (st == BORA_OK)
        st = wait_all(&q, what, g_dist.timeout_s);
    reqs_free(&q);
    return st;
}

bora_status bora_dist_send(const void *data, size_t bytes, int peer, const char *what)
{
    return one_peer((void *)data, bytes, peer, 1, what);
}

bora_status bora_dist_recv(void *data, size_t bytes, int peer, const char *what)
{
    return one_peer(data, bytes, peer, 0, what);
}

bora_status bora_dist_barrier(const char *what, double timeout_s)
{
    if (g_dist.size == 1)
        return BORA_OK;
    char one = 1, *all = calloc((size_t)g_dist.size, 1);
    if (!all)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    bora_status st = allgather(&one, all, 1, what, timeout_s);
    free(all);
    return st;
}

void bora_dist_abort(int rc)
{
    if (!g_dist.mpi || g_dist.size == 1)
        return;
    fflush(stdout);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, rc ? rc : 1);
}

void bora_dist_finalize(void)
{
    if (!g_dist.mpi)
        return;
    MPI_Comm_free(&host_comm);
    MPI_Comm_free(&backend_comm);
    MPI_Finalize();
    g_dist.mpi = 0;
}

#else /* a build without MPI */

bora_status bora_dist_init(void)
{
    long size = 0;
    const char *var = launcher(&size);
    g_dist.launcher = var;
    if (read_timeout() != BORA_OK)
        return BORA_ERR_CONFIG;
    if (var && size > 1)
        return bora_error_set(BORA_ERR_UNSUPPORTED,
                              "launched as one of %ld processes (%s=%s), but this bora was built "
                              "without MPI: every process would train the whole run alone; "
                              "rebuild with MPI (apt-get install libopenmpi-dev, then cmake "
                              "-DBORA_MPI=ON) or run one process",
                              size, var, getenv(var));
    return BORA_OK;
}

bora_status bora_dist_allgather(const void *send, void *recv, size_t bytes, const char *what)
{
    (void)what;
    if (send != recv)
        memmove(recv, send, bytes);
    return BORA_OK;
}

bora_status bora_dist_broadcast(void *data, size_t bytes, int root, const char *what)
{
    (void)data, (void)bytes, (void)root, (void)what;
    return BORA_OK;
}

bora_status bora_dist_send(const void *data, size_t bytes, int peer, const char *what)
{
    (void)data, (void)bytes;
    return bora_error_set(BORA_ERR_INVALID, "%s: no other rank %d", what, peer);
}

bora_status bora_dist_recv(void *data, size_t bytes, int peer, const char *what)
{
    (void)data, (void)bytes;
    return bora_error_set(BORA_ERR_INVALID, "%s: no other rank %d", what, peer);
}

bora_status bora_dist_barrier(const char *what, double timeout_s)
{
    (void)what, (void)timeout_s;
    return BORA_OK;
}

void bora_dist_abort(int rc)
{
    (void)rc;
}

void bora_dist_finalize(void) {}

#endif
