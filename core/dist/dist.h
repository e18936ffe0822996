/* The processes of a run. MPI is started only when a launcher (mpirun, mpiexec, srun) started
 * more than one process, so W = 1 is plain gpipe with no MPI at all, and a build without MPI
 * (-Dmpi=disabled) runs everywhere. Every MPI call of gpipe is behind this header (mpi.c, or
 * nompi.c where MPI is absent): the channels between stages of different processes, the
 * collectives of the pipeline's stages and replicas, the main thread's agreements, and the
 * liveness check that notices a process that died or stopped answering. */
#ifndef GP_DIST_H
#define GP_DIST_H

#include <stddef.h>
#include <stdint.h>

#include "core/dist/layout.h"
#include "core/status.h"

typedef struct gp_dist_impl gp_dist_impl;

typedef struct gp_dist {
  int world, rank;            /* W processes, this one */
  int local_rank, local_size; /* among the processes of this host */
  char host[64];              /* this host's name */
  gp_layout lay;              /* gp_dist_set_layout's */
  gp_dist_impl *impl;         /* NULL: one process, no MPI */
} gp_dist;

/* The processes the launcher started, from its environment (Open MPI, MPICH/Hydra, Slurm);
 * 1 when none. */
int gp_dist_launched(void);
/* This process's place. Starts MPI (with MPI_THREAD_MULTIPLE: every stage thread hands its
 * own tensors) when gp_dist_launched() > 1; errors if this build has no MPI then. */
gp_status gp_dist_init(gp_dist *d);
/* Ends MPI where it was started (after the liveness check stopped). */
void gp_dist_finalize(gp_dist *d);
/* Ends every process of the run with `code` (MPI_Abort); returns only in one process. The
 * others are told first (briefly waited for), so that only this process's line reports the
 * end: their liveness checks and errors stay silent (gp_dist_ended). */
void gp_dist_abort(gp_dist *d, int code);
/* Whether a process of this host is gone (killed, out of memory): 1 with "lost rank R (host,
 * pid P): ..." in buf, the cause to report in place of the MPI error its loss made here. */
int gp_dist_lost(const gp_dist *d, char *buf, size_t n);
/* Whether another process ended the run (its line says why). */
int gp_dist_ended(const gp_dist *d);
/* Called once (on the liveness thread) when another process ends the run: the program's own
 * lines about the end go quiet. */
void gp_dist_on_end(gp_dist *d, void (*fn)(void));
/* "rank 3 (host7)", or "" in one process: what gpipe's lines start with across processes. */
const char *gp_dist_who(const gp_dist *d);

/* The communicators of a layout (collective over every process: all call it with the same
 * W, R, K and stage map): each replica's own for its stages' hand-offs and sums, and per
 * stage this process holds, one across the replicas for its gradients. */
gp_status gp_dist_set_layout(gp_dist *d, const gp_layout *l);

/* ---- the main thread's agreements (every process calls them, in the same order) ---- */
gp_status gp_dist_barrier(gp_dist *d);
/* bytes at buf from `root` to every process. */
gp_status gp_dist_bcast(gp_dist *d, void *buf, size_t bytes, int root);
/* The maximum over the processes of v[0 .. n). */
gp_status gp_dist_max(gp_dist *d, int64_t *v, int n);
/* The maximum over the processes of each of v[0 .. n) (int32). */
gp_status gp_dist_max_i32(gp_dist *d, int32_t *v, int64_t n);
/* Whether every process's flag is set: 1 when all are, 0 otherwise. */
gp_status gp_dist_all(gp_dist *d, int flag, int *all);

/* ---- NCCL's bootstrap (core/dist/nccl.c): the main thread shares a communicator's id ---- */
/* bytes at buf from position `from` of this replica to position `to`: only those two call it,
 * on their main threads (MPI_Send / MPI_Recv). */
gp_status gp_dist_pair_share(gp_dist *d, int from, int to, void *buf, size_t bytes);
/* bytes at buf from replica 0's process of stage s to the other replicas' (MPI_Bcast on the
 * stage's communicator): every process that holds stage s calls it, on its main thread. */
gp_status gp_dist_bcast_replicas(gp_dist *d, int s, void *buf, size_t bytes);

/* ---- the links, measured (gpipe-bench; every process calls them, in the same order) ---- */
/* The one-way time of a `bytes` message between ranks 0 and 1: the median of `trips` round
 * trips, halved (the other ranks wait); on every process. */
gp_status gp_dist_pingpong(gp_dist *d, size_t bytes, int trips, double *one_way_s);
/* The median time of `reps` all-reduces (sums) of `bytes` of floats over every process; on
 * every process. */
gp_status gp_dist_allreduce_time(gp_dist *d, size_t bytes, int reps, double *s);

/* ---- point to point between the positions of this process's replica (any thread) ---- */
typedef struct gp_net_req gp_net_req;
gp_status gp_net_isend(gp_dist *d, int pos, int tag, const void *buf, size_t bytes,
                       gp_net_req **out);
gp_status gp_net_irecv(gp_dist *d, int pos, int tag, void *buf, size_t bytes, gp_net_req **out);
/* 1 once *r completed (then *r is freed and NULL; a receive of another size is an error),
 * 0 while it is in flight. NULL *r: completed. */
gp_status gp_net_test(gp_net_req **r, int *done);
/* Gives up a request in flight (a failed step): cancels it where MPI can, frees it. */
void gp_net_drop(gp_net_req **r);
/* The largest tag this MPI allows (at least 32767). */
int gp_net_tag_max(gp_dist *d);

/* ---- collectives of the pipeline's stage threads (one thread of a process at a time) ---- */
/* n doubles summed elementwise over the processes of this replica (all_replicas: of every
 * replica). */
gp_status gp_dist_sum_doubles(gp_dist *d, double *v, int64_t n, int all_replicas);
/* Stage s's n floats summed over its R replicas, in place (the stage's own communicator: the
 * threads of different stages may call it at once). */
gp_status gp_dist_sum_replicas(gp_dist *d, int s, float *v, int64_t n);
/* The same, started (MPI_Iallreduce): done when gp_net_test says so; v is MPI's until then. */
gp_status gp_dist_isum_replicas(gp_dist *d, int s, float *v, int64_t n, gp_net_req **out);
/* Each replica's n doubles of stage s, gathered in replica order into out (R x n). */
gp_status gp_dist_gather_replicas(gp_dist *d, int s, const double *v, int n, double *out);

/* ---- liveness: a thread that exchanges a heartbeat with the neighbouring ranks ---- */
/* Starts it: a rank not heard from for timeout_s seconds ends the run (one line naming it on
 * file descriptor err_fd, then MPI_Abort). No-op in one process. */
gp_status gp_dist_liveness_start(gp_dist *d, double timeout_s, const char *prog, int err_fd);
void gp_dist_liveness_stop(gp_dist *d);

#endif
