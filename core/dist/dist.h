/* core/dist/dist.h — the process group of a run launched as several processes.
 *
 * `mpirun -np N bora train run.yaml` (or `srun`) starts N copies of bora; each learns its rank
 * from MPI, which bora_dist_init starts only when a launcher's variables say it runs under one
 * (OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_SIZE/PMI_RANK): a plain `bora train` never touches MPI.
 * A bora built without MPI (BORA_MPI=OFF) launched as one of several processes is refused,
 * naming the variable that said so. The group's small host-side exchanges (token counts,
 * losses, a stop flag, a run id) are here; the gradients go through the backend's collectives
 * (bora_backend_ops.reduce_scatter, all_gather), which this module hands the communicator.
 *
 * Every wait has a deadline (BORA_DIST_TIMEOUT_S, 600 s by default): a peer that does not
 * answer in time is named, and the caller ends the whole group (bora_dist_abort), so no rank
 * hangs on a dead one. */
#ifndef BORA_CORE_DIST_H
#define BORA_CORE_DIST_H

#include <bora/backend.h>
#include <stddef.h>

typedef struct bora_dist {
    int rank, size; /* 0 and 1 for a plain run */
    int mpi;        /* MPI was started (bora_dist_finalize ends it) */
    double timeout_s;
    const char *launcher; /* the variable that said how many processes, or NULL */
} bora_dist;

/* Start the group (once per process): MPI when launched under mpirun or srun, else a group of
 * one. An error names the variable and what to do (a build without MPI, a bad timeout). */
bora_status bora_dist_init(void);
/* The group (rank 0 of 1 before bora_dist_init or without a launcher). */
const bora_dist *bora_dist_get(void);
/* The group as a backend joins it (bora_group); NULL for a group of one. */
const bora_group *bora_dist_group(void);

/* Every rank's `bytes` bytes, in rank order, into recv (size × bytes); send may be recv's own
 * slot. `what` names the exchange in a timeout's message. */
bora_status bora_dist_allgather(const void *send, void *recv, size_t bytes, const char *what);
/* root's bytes to every rank. */
bora_status bora_dist_broadcast(void *data, size_t bytes, int root, const char *what);
/* bytes to one peer, or from one (a sharded optimizer's state gathered for a checkpoint). */
bora_status bora_dist_send(const void *data, size_t bytes, int peer, const char *what);
bora_status bora_dist_recv(void *data, size_t bytes, int peer, const char *what);
/* Wait for every rank; timeout_s <= 0: no deadline (a rank building the token cache). */
bora_status bora_dist_barrier(const char *what, double timeout_s);

/* End every process of the group with rc (MPI_Abort), after this one's message was printed.
 * Returns only in a group of one. */
void bora_dist_abort(int rc);
/* Leave the group at a normal end. */
void bora_dist_finalize(void);

#endif
