/* Collectives of stages that are threads of one process: a generation-counted barrier under
 * the pipeline's lock, and sums read from every member's slot in member order. */
#include "core/exec/collective.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void gp_deadline_in(double s, struct timespec *ts) {
  clock_gettime(CLOCK_REALTIME, ts);
  double whole = floor(s);
  ts->tv_sec += (time_t)whole;
  ts->tv_nsec += (long)((s - whole) * 1e9);
  if (ts->tv_nsec >= 1000000000L) {
    ts->tv_sec++;
    ts->tv_nsec -= 1000000000L;
  }
}

/* Arrives with v[0 .. n) (n may be 0) in this generation's slot and waits for the others; *gen
 * is the generation it met in. */
static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static gp_status meet(gp_coll *c, int member, const double *v, int n, unsigned long long *gen) {
  const double t0 = now_s();
  pthread_mutex_lock(c->mu);
  unsigned long long g = c->gen;
  if (n)
    memcpy(c->part[(g & 1) * (unsigned)c->members + (unsigned)member], v, sizeof *v * (size_t)n);
  if (++c->arrived == c->members) {
    c->arrived = 0;
    c->gen++;
    pthread_cond_broadcast(c->cv);
  }
  struct timespec dl;
  gp_deadline_in(c->watchdog_s, &dl);
  while (c->gen == g && !*c->failed)
    if (pthread_cond_timedwait(c->cv, c->mu, &dl) == ETIMEDOUT) break;
  int ok = c->gen != g;
  pthread_mutex_unlock(c->mu);
  c->waited[member] += now_s() - t0;
  *gen = g;
  if (!ok)
    return GP_ERR(GP_ERR_RUNTIME, "stage %d: the other stages did not reach the optimizer step",
                  member);
  return GP_OK;
}

static gp_status threads_barrier(gp_coll *c, int member) {
  unsigned long long g;
  return meet(c, member, NULL, 0, &g);
}

static gp_status threads_sum(gp_coll *c, int member, double *v, int n) {
  if (n < 0 || n > GP_COLL_MAX_SUM)
    return GP_ERR(GP_ERR_USAGE, "internal: a sum of %d numbers (at most %d)", n, GP_COLL_MAX_SUM);
  unsigned long long g;
  GP_TRY(meet(c, member, v, n, &g));
  /* the slots of generation g stay until g + 2, which needs this member to arrive again */
  const double(*p)[GP_COLL_MAX_SUM] = c->part + (g & 1) * (unsigned)c->members;
  for (int i = 0; i < n; i++) {
    double s = 0;
    for (int k = 0; k < c->members; k++)
      s += p[k][i];
    v[i] = s;
  }
  return GP_OK;
}

/* Sums written after every gradient is final, read after every sum is (the syncs order a
 * device's queued work before other stages read its memory). */
static gp_status threads_tied_grads(gp_coll *c, int member, gp_backend *be) {
  if (!c->tied || !c->tied->n_groups) return GP_OK;
  GP_TRY(be->sync(be));
  GP_TRY(threads_barrier(c, member));
  GP_TRY(gp_tied_sum(c->tied, member, be));
  GP_TRY(be->sync(be));
  GP_TRY(threads_barrier(c, member));
  return gp_tied_scatter(c->tied, member, be);
}

static gp_status threads_to_main(gp_coll *c, int member, void *dst, const void *src, size_t bytes) {
  (void)c;
  (void)member;
  if (bytes) memcpy(dst, src, bytes);
  return GP_OK;
}

static const gp_coll_ops threads_ops = {
    .barrier = threads_barrier,
    .sum = threads_sum,
    .tied_grads = threads_tied_grads,
    .to_main = threads_to_main,
};

gp_status gp_coll_threads_init(gp_coll *c, int members, pthread_mutex_t *mu, pthread_cond_t *cv,
                               const int *failed, double watchdog_s, gp_tied *tied) {
  memset(c, 0, sizeof *c);
  c->ops = &threads_ops;
  c->members = members;
  c->mu = mu;
  c->cv = cv;
  c->failed = failed;
  c->watchdog_s = watchdog_s;
  c->tied = tied;
  c->part = calloc(2 * (size_t)members, sizeof *c->part);
  c->waited = calloc((size_t)members, sizeof *c->waited);
  if (!c->part || !c->waited)
    return GP_ERR(GP_ERR_NOMEM, "out of memory for the stages' collectives");
  return GP_OK;
}

void gp_coll_free(gp_coll *c) {
  if (!c) return;
  free(c->part);
  free(c->waited);
  memset(c, 0, sizeof *c);
}

void gp_coll_reset(gp_coll *c) {
  c->arrived = 0;
}
