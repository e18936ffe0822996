/* Collectives of stages that are threads of one process: a generation-counted barrier under
 * the pipeline's lock, and sums read from every member's slot in member order. */
#include "core/exec/collective.h"

#include "core/dist/dist.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
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

/* What the last member of this process to arrive does for the process (across processes), on
 * generation g's contributions of n numbers, outside the lock; NULL: nothing. */
typedef gp_status (*cross_fn)(gp_coll *c, unsigned long long g, int n);

static gp_status meet_x(gp_coll *c, int member, const double *v, int n, unsigned long long *gen,
                        cross_fn cross) {
  const double t0 = now_s();
  pthread_mutex_lock(c->mu);
  unsigned long long g = c->gen;
  const int row = c->dist ? c->dist->lay.replica * c->members + member : member;
  if (n) memcpy(c->part[(g & 1) * (unsigned)c->rows + (unsigned)row], v, sizeof *v * (size_t)n);
  if (++c->arrived == c->local) {
    c->arrived = 0;
    if (cross) {
      pthread_mutex_unlock(c->mu);
      gp_status s = cross(c, g, n);
      pthread_mutex_lock(c->mu);
      c->cross_status = s;
      if (s != GP_OK) snprintf(c->cross_msg, sizeof c->cross_msg, "%s", gp_error_message());
    }
    c->gen++;
    pthread_cond_broadcast(c->cv);
  }
  struct timespec dl;
  gp_deadline_in(c->watchdog_s, &dl);
  while (c->gen == g && !*c->failed)
    if (pthread_cond_timedwait(c->cv, c->mu, &dl) == ETIMEDOUT) break;
  int ok = c->gen != g;
  gp_status cs = c->cross_status;
  pthread_mutex_unlock(c->mu);
  c->waited[member] += now_s() - t0;
  *gen = g;
  if (!ok)
    return GP_ERR(GP_ERR_RUNTIME, "stage %d: the other stages did not reach the optimizer step",
                  member);
  if (cs != GP_OK) return GP_ERR(cs, "%s", c->cross_msg);
  return GP_OK;
}

static gp_status meet(gp_coll *c, int member, const double *v, int n, unsigned long long *gen) {
  return meet_x(c, member, v, n, gen, NULL);
}

static gp_status threads_barrier(gp_coll *c, int member) {
  unsigned long long g;
  return meet(c, member, NULL, 0, &g);
}

/* v[i] = the sum of generation g's rows in order (rows nobody wrote are zeros: x + 0 = x) */
static gp_status sum_rows(gp_coll *c, unsigned long long g, double *v, int n) {
  /* the slots of generation g stay until g + 2, which needs this member to arrive again */
  const double(*p)[GP_COLL_MAX_SUM] = c->part + (g & 1) * (unsigned)c->rows;
  for (int i = 0; i < n; i++) {
    double s = 0;
    for (int k = 0; k < c->rows; k++)
      s += p[k][i];
    v[i] = s;
  }
  return GP_OK;
}

static gp_status threads_sum(gp_coll *c, int member, double *v, int n) {
  if (n < 0 || n > GP_COLL_MAX_SUM)
    return GP_ERR(GP_ERR_USAGE, "internal: a sum of %d numbers (at most %d)", n, GP_COLL_MAX_SUM);
  unsigned long long g;
  GP_TRY(meet(c, member, v, n, &g));
  return sum_rows(c, g, v, n);
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

static gp_status threads_replica_grads(gp_coll *c, int member, gp_backend *be, float *g,
                                       int64_t n) {
  (void)c, (void)member, (void)be, (void)g, (void)n;
  return GP_OK;
}

static gp_status threads_replica_stats(gp_coll *c, int member, gp_backend *be, float *acc,
                                       int64_t ch, int64_t *count) {
  (void)c, (void)member, (void)be, (void)acc, (void)ch, (void)count;
  return GP_OK;
}

static const gp_coll_ops threads_ops = {
    .barrier = threads_barrier,
    .sum = threads_sum,
    .tied_grads = threads_tied_grads,
    .to_main = threads_to_main,
    .sum_all = threads_sum,
    .replica_grads = threads_replica_grads,
    .replica_stats = threads_replica_stats,
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
  c->local = members;
  c->replicas = 1;
  c->rows = members;
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
  free(c->be);
  memset(c, 0, sizeof *c);
}

void gp_coll_reset(gp_coll *c) {
  c->arrived = 0;
}

/* ---- across processes ---- */

/* Every process's rows of generation g summed into all of them (a row is written by one
 * process, zeros elsewhere), over this replica's processes or every replica's. */
static gp_status cross_sum(gp_coll *c, unsigned long long g, int n, int all) {
  double(*p)[GP_COLL_MAX_SUM] = c->part + (g & 1) * (unsigned)c->rows;
  const int r0 = all ? 0 : c->dist->lay.replica, nr = all ? c->replicas : 1;
  for (int r = 0; r < c->replicas; r++) /* rows of other processes: zeros, not the last use's */
    for (int k = 0; k < c->members; k++)
      if (r != c->dist->lay.replica || !c->be[k]) memset(p[r * c->members + k], 0, sizeof p[0]);
  if (n == 0) n = 1; /* a barrier: one number */
  double *buf = malloc(sizeof *buf * (size_t)(nr * c->members * n));
  if (!buf) return GP_ERR(GP_ERR_NOMEM, "out of memory for a sum across processes");
  for (int i = 0; i < nr * c->members; i++)
    memcpy(buf + (size_t)i * n, p[r0 * c->members + i], sizeof *buf * (size_t)n);
  gp_status s = gp_dist_sum_doubles(c->dist, buf, (int64_t)nr * c->members * n, all);
  for (int i = 0; s == GP_OK && i < nr * c->members; i++)
    memcpy(p[r0 * c->members + i], buf + (size_t)i * n, sizeof *buf * (size_t)n);
  free(buf);
  return s;
}

static gp_status cross_replica(gp_coll *c, unsigned long long g, int n) {
  return cross_sum(c, g, n, 0);
}
static gp_status cross_all(gp_coll *c, unsigned long long g, int n) {
  return cross_sum(c, g, n, 1);
}

static gp_status dist_barrier(gp_coll *c, int member) {
  unsigned long long g;
  return meet_x(c, member, NULL, 0, &g, cross_replica);
}

static gp_status dist_sum_scope(gp_coll *c, int member, double *v, int n, cross_fn cross) {
  if (n < 0 || n > GP_COLL_MAX_SUM)
    return GP_ERR(GP_ERR_USAGE, "internal: a sum of %d numbers (at most %d)", n, GP_COLL_MAX_SUM);
  unsigned long long g;
  GP_TRY(meet_x(c, member, v, n, &g, cross));
  return sum_rows(c, g, v, n);
}

static gp_status dist_sum(gp_coll *c, int member, double *v, int n) {
  return dist_sum_scope(c, member, v, n, cross_replica);
}
static gp_status dist_sum_all(gp_coll *c, int member, double *v, int n) {
  return dist_sum_scope(c, member, v, n, cross_all);
}

/* Each tied group: the copies this process holds summed (member order), then over the
 * replica's processes, written over every local copy: the copies take identical updates. Run
 * by the last local member to arrive, with the others waiting (their backends are idle). */
static gp_status cross_tied(gp_coll *c, unsigned long long g, int n) {
  (void)g, (void)n;
  gp_status s = GP_OK;
  for (int i = 0; s == GP_OK && i < c->tied->n_groups; i++) {
    const gp_tied_rt *tg = &c->tied->g[i];
    int64_t numel = tg->numel;
    double *sum = calloc((size_t)numel, sizeof *sum);
    float *h = malloc((size_t)numel * sizeof *h);
    if (!sum || !h) s = GP_ERR(GP_ERR_NOMEM, "out of memory for tied gradients");
    for (int j = 0; s == GP_OK && j < tg->n; j++) {
      gp_backend *be = c->be[tg->copy[j].stage];
      if (!be) continue;
      s = be->to_host(be, h, tg->copy[j].g, (size_t)numel * sizeof *h);
      for (int64_t e = 0; s == GP_OK && e < numel; e++)
        sum[e] += h[e];
    }
    if (s == GP_OK) s = gp_dist_sum_doubles(c->dist, sum, numel, 0);
    for (int64_t e = 0; s == GP_OK && e < numel; e++)
      h[e] = (float)sum[e];
    for (int j = 0; s == GP_OK && j < tg->n; j++) {
      gp_backend *be = c->be[tg->copy[j].stage];
      if (be) s = be->from_host(be, tg->copy[j].g, h, (size_t)numel * sizeof *h);
    }
    free(sum);
    free(h);
  }
  return s;
}

static gp_status dist_tied_grads(gp_coll *c, int member, gp_backend *be) {
  if (!c->tied || !c->tied->n_groups) return GP_OK;
  GP_TRY(be->sync(be));
  unsigned long long g;
  return meet_x(c, member, NULL, 0, &g, cross_tied);
}

/* Host staging of a device's n floats around fn (in place on the CPU backend). */
static gp_status dist_replica_grads(gp_coll *c, int member, gp_backend *be, float *g, int64_t n) {
  if (c->replicas < 2 || n == 0) return GP_OK;
  if (be->device < 0) return gp_dist_sum_replicas(c->dist, member, g, n);
  float *h = malloc((size_t)n * sizeof *h);
  if (!h) return GP_ERR(GP_ERR_NOMEM, "out of host memory for the gradients' all-reduce");
  gp_status s = be->to_host(be, h, g, (size_t)n * sizeof *h);
  if (s == GP_OK) s = gp_dist_sum_replicas(c->dist, member, h, n);
  if (s == GP_OK) s = be->from_host(be, g, h, (size_t)n * sizeof *h);
  free(h);
  return s;
}

/* Chan et al.'s pooling of (count, mean, sum of squared deviations), replica by replica, the
 * update batchnorm_stats_accumulate makes for one micro-batch after another. */
static gp_status dist_replica_stats(gp_coll *c, int member, gp_backend *be, float *acc, int64_t ch,
                                    int64_t *count) {
  if (c->replicas < 2) return GP_OK;
  const int per = (int)(2 * ch + 1), R = c->replicas;
  float *h = malloc((size_t)(2 * ch) * sizeof *h);
  double *mine = malloc((size_t)per * sizeof *mine), *all = malloc((size_t)(R * per) * sizeof *all);
  gp_status s = h && mine && all ? GP_OK : GP_ERR(GP_ERR_NOMEM, "out of memory for statistics");
  if (s == GP_OK) s = be->to_host(be, h, acc, (size_t)(2 * ch) * sizeof *h);
  for (int64_t j = 0; s == GP_OK && j < 2 * ch; j++)
    mine[j] = h[j];
  if (s == GP_OK) {
    mine[2 * ch] = (double)*count;
    s = gp_dist_gather_replicas(c->dist, member, mine, per, all);
  }
  int64_t total = 0;
  for (int r = 0; s == GP_OK && r < R; r++) {
    const double *x = all + (size_t)r * per;
    const double nb = x[2 * ch], na = (double)total, n = na + nb;
    if (nb <= 0) continue;
    for (int64_t j = 0; j < ch; j++) {
      if (total == 0) {
        h[j] = (float)x[j];
        h[ch + j] = (float)x[ch + j];
        continue;
      }
      double delta = x[j] - h[j];
      h[j] = (float)(h[j] + delta * (nb / n));
      h[ch + j] = (float)(h[ch + j] + x[ch + j] + delta * delta * (na * nb / n));
    }
    total += (int64_t)nb;
  }
  if (s == GP_OK) s = be->from_host(be, acc, h, (size_t)(2 * ch) * sizeof *h);
  if (s == GP_OK) *count = total;
  free(h);
  free(mine);
  free(all);
  return s;
}

static const gp_coll_ops dist_ops = {
    .barrier = dist_barrier,
    .sum = dist_sum,
    .tied_grads = dist_tied_grads,
    .to_main = threads_to_main,
    .sum_all = dist_sum_all,
    .replica_grads = dist_replica_grads,
    .replica_stats = dist_replica_stats,
};

gp_status gp_coll_dist_init(gp_coll *c, int members, int local, struct gp_dist *dist,
                            pthread_mutex_t *mu, pthread_cond_t *cv, const int *failed,
                            double watchdog_s, gp_tied *tied, gp_backend *const *be) {
  GP_TRY(gp_coll_threads_init(c, members, mu, cv, failed, watchdog_s, tied));
  c->ops = &dist_ops;
  c->dist = dist;
  c->local = local;
  c->replicas = dist->lay.replicas;
  c->rows = c->replicas * members;
  free(c->part);
  c->part = calloc(2 * (size_t)c->rows, sizeof *c->part);
  c->be = calloc((size_t)members, sizeof *c->be);
  if (!c->part || !c->be) return GP_ERR(GP_ERR_NOMEM, "out of memory for the stages' collectives");
  for (int k = 0; k < members; k++)
    c->be[k] = be[k];
  return GP_OK;
}
