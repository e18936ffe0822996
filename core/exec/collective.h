/* Collectives: what the stages of a pipeline combine, through one interface whatever they run
 * on: barriers, sums of a few numbers (the clipping norm's sum of squares, the loss and
 * accuracy sums), the tied weights' gradient sums, and results handed to the main thread
 * (predictions). Sums are taken in member order, so they do not depend on which stage arrives
 * first. The implementation here is for stages that are threads of one process (a mutex and a
 * condition); one over MPI or NCCL fills the same table. */
#ifndef GP_COLLECTIVE_H
#define GP_COLLECTIVE_H

#include <pthread.h>
#include <time.h>

#include "core/backend.h"
#include "core/train/tied.h"

#define GP_COLL_MAX_SUM 8 /* numbers one sum carries */

typedef struct gp_coll gp_coll;

typedef struct gp_coll_ops {
  /* Returns once every member has called it. */
  gp_status (*barrier)(gp_coll *c, int member);
  /* v[0 .. n) of every member summed in member order; every member gets the sums in v. */
  gp_status (*sum)(gp_coll *c, int member, double *v, int n);
  /* Each tied group's copies' gradients (final on every member) summed in member order and
   * written over every copy, so the copies take identical updates. */
  gp_status (*tied_grads)(gp_coll *c, int member, gp_backend *be);
  /* bytes of a member's result (host memory) to dst in the main thread's memory. */
  gp_status (*to_main)(gp_coll *c, int member, void *dst, const void *src, size_t bytes);
  /* sum over every replica's members (the step's results); = sum with one replica */
  gp_status (*sum_all)(gp_coll *c, int member, double *v, int n);
  /* the member's n gradients (its backend's memory) summed over its replicas, in place;
   * a no-op with one replica */
  gp_status (*replica_grads)(gp_coll *c, int member, gp_backend *be, float *g, int64_t n);
  /* batch-norm statistics of the member's replicas pooled in replica order, as if one replica
   * had seen every micro-batch: acc = per channel the mean then the sum of squared deviations
   * (2 x ch floats, the backend's memory) over *count values (see batchnorm_stats_accumulate) */
  gp_status (*replica_stats)(gp_coll *c, int member, gp_backend *be, float *acc, int64_t ch,
                             int64_t *count);
} gp_coll_ops;

struct gp_coll {
  const gp_coll_ops *ops;
  int members;
  /* threads of one process: the pipeline's lock and condition, its failure flag (set under
   * the lock: a waiting member gives up), the watchdog */
  pthread_mutex_t *mu;
  pthread_cond_t *cv;
  const int *failed;
  double watchdog_s;
  gp_tied *tied;
  int arrived;
  unsigned long long gen;
  double (*part)[GP_COLL_MAX_SUM]; /* 2 x rows: contributions, by the generation's parity */
  double *waited; /* members: wall time each spent waiting for the others (its own to reset) */
  /* across processes (gp_coll_dist_init): how many members this process holds (those of a
   * backend in be; a run of them, or a strided set under interleaved schedules), the replicas (rows
   * = replicas x members: replica r's member k at r x members + k), the local members' backends,
   * and what the last local member to arrive does for all */
  int local, replicas, rows;
  struct gp_dist *dist;
  gp_backend **be;
  gp_status cross_status;
  char cross_msg[512];
};

/* The collective of `members` stages that are threads sharing mu and cv (broadcast on failure,
 * with *failed set), their tied groups in tied (NULL or none: no tied weights). */
gp_status gp_coll_threads_init(gp_coll *c, int members, pthread_mutex_t *mu, pthread_cond_t *cv,
                               const int *failed, double watchdog_s, gp_tied *tied);
/* The collective of a pipeline whose members (stages) are spread over processes: this
 * process's `local` members (those with a backend in be) are threads as above; the last to arrive
 * speaks for the process over MPI (dist: its replica's communicators); tied copies held
 * elsewhere are summed across the processes. be: the members' backends (NULL where remote). */
gp_status gp_coll_dist_init(gp_coll *c, int members, int local, struct gp_dist *dist,
                            pthread_mutex_t *mu, pthread_cond_t *cv, const int *failed,
                            double watchdog_s, gp_tied *tied, gp_backend *const *be);
void gp_coll_free(gp_coll *c);

/* An absolute CLOCK_REALTIME deadline s seconds from now, for pthread_cond_timedwait (the
 * collectives' waits and the pipeline's). */
void gp_deadline_in(double s, struct timespec *ts);
/* Forgets members that arrived before a failure (the caller holds mu, no member waits). */
void gp_coll_reset(gp_coll *c);

#endif
