/* gpipe's MPI: started only under a launcher with more than one process; standard MPI-3 calls
 * only (Open MPI and MPICH). Every communicator returns its errors (MPI_ERRORS_RETURN), which
 * become gp_status lines; a process that died or stopped is the liveness thread's to notice. */
#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/dist/dist.h"
#include "core/env.h"

struct gp_dist_impl {
  MPI_Comm main;   /* the main thread's agreements */
  MPI_Comm p2p;    /* this replica's positions: hand-offs */
  MPI_Comm coll;   /* this replica's positions: the stages' sums */
  MPI_Comm all;    /* every process: sums over the replicas */
  MPI_Comm hb;     /* the liveness thread's */
  MPI_Comm *stage; /* K: across the replicas, for the stages this process holds (else NULL) */
  int n_stage;
  int tag_max;
  pthread_t hb_thread;
  int hb_running;
  _Atomic int hb_stop;
  double hb_timeout;
  int hb_fd; /* where its line goes */
  char hb_prog[64];
  char who[96];
  /* the other processes of this host: world rank and pid, watched by the liveness thread */
  int n_near, *near_rank;
  int *near_pid;
  _Atomic int ended;    /* another process is ending the run (or this one is) */
  void (*on_end)(void); /* the program's: go quiet */
};

#define TAG_BEAT 7
#define TAG_END 8

struct gp_net_req {
  MPI_Request r;
  size_t bytes;
  int recv;
};

static gp_status mpi_err(int rc, const char *what) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  msg[len] = 0;
  return GP_ERR(GP_ERR_RUNTIME, "MPI %s failed: %s", what, msg);
}
#define MPI_TRY(call, what)                                                                        \
  do {                                                                                             \
    int rc_ = (call);                                                                              \
    if (rc_ != MPI_SUCCESS) return mpi_err(rc_, what);                                             \
  } while (0)

static gp_status comm_dup(MPI_Comm from, MPI_Comm *out) {
  MPI_TRY(MPI_Comm_dup(from, out), "MPI_Comm_dup");
  MPI_TRY(MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  return GP_OK;
}

gp_status gp_dist_init(gp_dist *d) {
  memset(d, 0, sizeof *d);
  d->world = 1;
  d->local_size = 1;
  gethostname(d->host, sizeof d->host - 1);
  gp_layout_single(1, &d->lay);
  if (gp_dist_launched() <= 1) return GP_OK;
  int provided = 0, inited = 0;
  MPI_Initialized(&inited);
  if (!inited && MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
    return GP_ERR(GP_ERR_RUNTIME, "MPI_Init_thread failed");
  if (inited) MPI_Query_thread(&provided);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &d->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &d->world);
  gp_dist_impl *x = calloc(1, sizeof *x);
  if (!x) return GP_ERR(GP_ERR_NOMEM, "out of memory starting MPI");
  d->impl = x;
  x->main = x->p2p = x->coll = x->all = x->hb = MPI_COMM_NULL;
  snprintf(x->who, sizeof x->who, "rank %d (%s)", d->rank, d->host);
  if (provided < MPI_THREAD_MULTIPLE)
    return GP_ERR(GP_ERR_RUNTIME,
                  "this MPI gives thread level %d, gpipe needs MPI_THREAD_MULTIPLE (each stage "
                  "thread hands its own tensors): use an MPI built with thread support",
                  provided);
  MPI_Comm local;
  MPI_TRY(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, d->rank, MPI_INFO_NULL, &local),
          "MPI_Comm_split_type");
  MPI_Comm_rank(local, &d->local_rank);
  MPI_Comm_size(local, &d->local_size);
  int me[2] = {d->rank, (int)getpid()}, *all = malloc(sizeof *all * 2 * (size_t)d->local_size);
  x->near_rank = malloc(sizeof *x->near_rank * (size_t)d->local_size);
  x->near_pid = malloc(sizeof *x->near_pid * (size_t)d->local_size);
  if (!all || !x->near_rank || !x->near_pid) {
    free(all);
    MPI_Comm_free(&local);
    return GP_ERR(GP_ERR_NOMEM, "out of memory starting MPI");
  }
  int rc = MPI_Allgather(me, 2, MPI_INT, all, 2, MPI_INT, local);
  for (int i = 0; rc == MPI_SUCCESS && i < d->local_size; i++)
    if (all[2 * i] != d->rank) {
      x->near_rank[x->n_near] = all[2 * i];
      x->near_pid[x->n_near++] = all[2 * i + 1];
    }
  free(all);
  MPI_Comm_free(&local);
  if (rc != MPI_SUCCESS) return mpi_err(rc, "MPI_Allgather");
  GP_TRY(comm_dup(MPI_COMM_WORLD, &x->main));
  GP_TRY(comm_dup(MPI_COMM_WORLD, &x->all));
  GP_TRY(comm_dup(MPI_COMM_WORLD, &x->hb));
  void *ub = NULL;
  int flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
  x->tag_max = flag && ub ? *(int *)ub : 32767;
  gp_layout_single(1, &d->lay);
  return GP_OK;
}

static void comm_free(MPI_Comm *c) {
  if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
}

void gp_dist_finalize(gp_dist *d) {
  gp_dist_impl *x = d->impl;
  if (!x) return;
  /* every process is here before any stops its beats: none takes the others' end for a loss */
  MPI_Barrier(x->main);
  gp_dist_liveness_stop(d);
  for (int s = 0; s < x->n_stage; s++)
    comm_free(&x->stage[s]);
  free(x->stage);
  free(x->near_rank);
  free(x->near_pid);
  comm_free(&x->main);
  comm_free(&x->p2p);
  comm_free(&x->coll);
  comm_free(&x->all);
  comm_free(&x->hb);
  free(x);
  d->impl = NULL;
  MPI_Finalize();
}

void gp_dist_abort(gp_dist *d, int code) {
  fflush(stdout);
  fflush(stderr);
  if (!d || !d->impl) return;
  gp_dist_impl *x = d->impl;
  if (x->on_end) x->on_end(); /* the launcher's SIGTERM to this process too: no more lines */
  if (!atomic_exchange(&x->ended, 1)) { /* the first to end it tells the others */
    MPI_Request *rq = malloc(sizeof *rq * (size_t)d->world);
    int note = d->rank, n = 0;
    for (int r = 0; rq && r < d->world; r++)
      if (r != d->rank && MPI_Isend(&note, 1, MPI_INT, r, TAG_END, x->hb, &rq[n]) == MPI_SUCCESS)
        n++;
    for (int i = 0, all = 0; rq && i < 50 && !all; i++) { /* 0.25 s at most */
      MPI_Testall(n, rq, &all, MPI_STATUSES_IGNORE);
      struct timespec ts = {0, 5 * 1000 * 1000};
      if (!all) nanosleep(&ts, NULL);
    }
    if (rq) {                                      /* the notices still in flight matter no more */
      struct timespec ts = {0, 100 * 1000 * 1000}; /* their liveness threads hear it */
      nanosleep(&ts, NULL);
    }
    free(rq);
  }
  MPI_Abort(MPI_COMM_WORLD, code);
}

int gp_dist_ended(const gp_dist *d) {
  return d && d->impl && atomic_load(&d->impl->ended);
}

void gp_dist_on_end(gp_dist *d, void (*fn)(void)) {
  if (d && d->impl) d->impl->on_end = fn;
}

const char *gp_dist_who(const gp_dist *d) {
  return d && d->impl ? d->impl->who : "";
}

gp_status gp_dist_set_layout(gp_dist *d, const gp_layout *l) {
  d->lay = *l;
  gp_dist_impl *x = d->impl;
  if (!x) return GP_OK;
  comm_free(&x->p2p);
  comm_free(&x->coll);
  for (int s = 0; s < x->n_stage; s++)
    comm_free(&x->stage[s]);
  free(x->stage);
  x->stage = NULL;
  x->n_stage = 0;
  MPI_Comm replica, across;
  MPI_TRY(MPI_Comm_split(MPI_COMM_WORLD, l->replica, l->pos, &replica), "MPI_Comm_split");
  gp_status s = comm_dup(replica, &x->p2p);
  if (s == GP_OK) s = comm_dup(replica, &x->coll);
  MPI_Comm_free(&replica);
  GP_TRY(s);
  MPI_TRY(MPI_Comm_split(MPI_COMM_WORLD, l->pos, l->replica, &across), "MPI_Comm_split");
  if (!(x->stage = calloc((size_t)l->stages, sizeof *x->stage))) {
    MPI_Comm_free(&across);
    return GP_ERR(GP_ERR_NOMEM, "out of memory for the communicators");
  }
  x->n_stage = l->stages;
  for (int k = 0; k < l->stages; k++)
    x->stage[k] = MPI_COMM_NULL;
  /* every process of a position holds the same stages: the dups match across replicas */
  for (int k = 0; s == GP_OK && k < l->stages; k++)
    if (gp_layout_local(l, k)) s = comm_dup(across, &x->stage[k]);
  MPI_Comm_free(&across);
  return s;
}

/* ---- the main thread's agreements ---- */

gp_status gp_dist_barrier(gp_dist *d) {
  if (!d || !d->impl) return GP_OK;
  MPI_TRY(MPI_Barrier(d->impl->main), "MPI_Barrier");
  return GP_OK;
}

gp_status gp_dist_bcast(gp_dist *d, void *buf, size_t bytes, int root) {
  if (!d || !d->impl) return GP_OK;
  MPI_TRY(MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, d->impl->main), "MPI_Bcast");
  return GP_OK;
}

gp_status gp_dist_max(gp_dist *d, int64_t *v, int n) {
  if (!d || !d->impl) return GP_OK;
  MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_INT64_T, MPI_MAX, d->impl->main), "MPI_Allreduce");
  return GP_OK;
}

gp_status gp_dist_max_i32(gp_dist *d, int32_t *v, int64_t n) {
  if (!d || !d->impl) return GP_OK;
  const int64_t chunk = (int64_t)1 << 30;
  for (int64_t at = 0; at < n; at += chunk) {
    int len = (int)(n - at < chunk ? n - at : chunk);
    MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, v + at, len, MPI_INT32_T, MPI_MAX, d->impl->main),
            "MPI_Allreduce");
  }
  return GP_OK;
}

gp_status gp_dist_all(gp_dist *d, int flag, int *all) {
  *all = flag;
  if (!d || !d->impl) return GP_OK;
  MPI_TRY(MPI_Allreduce(&flag, all, 1, MPI_INT, MPI_LAND, d->impl->main), "MPI_Allreduce");
  return GP_OK;
}

/* ---- NCCL's bootstrap ---- */

#define TAG_NCCL_ID 10

/* on the replica's collective communicator: the stage threads' sums are collectives there, which
 * never match a point-to-point message */
gp_status gp_dist_pair_share(gp_dist *d, int from, int to, void *buf, size_t bytes) {
  if (!d || !d->impl) return GP_ERR(GP_ERR_RUNTIME, "internal: a pair of processes in one");
  if (d->lay.pos == from)
    MPI_TRY(MPI_Send(buf, (int)bytes, MPI_BYTE, to, TAG_NCCL_ID, d->impl->coll), "MPI_Send");
  else if (d->lay.pos == to)
    MPI_TRY(
        MPI_Recv(buf, (int)bytes, MPI_BYTE, from, TAG_NCCL_ID, d->impl->coll, MPI_STATUS_IGNORE),
        "MPI_Recv");
  return GP_OK;
}

gp_status gp_dist_bcast_replicas(gp_dist *d, int s, void *buf, size_t bytes) {
  if (!d || !d->impl || d->lay.replicas < 2) return GP_OK;
  MPI_Comm c = s < d->impl->n_stage ? d->impl->stage[s] : MPI_COMM_NULL;
  if (c == MPI_COMM_NULL) return GP_ERR(GP_ERR_RUNTIME, "internal: stage %d is not held here", s);
  MPI_TRY(MPI_Bcast(buf, (int)bytes, MPI_BYTE, 0, c), "MPI_Bcast");
  return GP_OK;
}

/* ---- the links, measured ---- */

#define TAG_PING 9

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return 0.5 * (v[(n - 1) / 2] + v[n / 2]);
}

gp_status gp_dist_pingpong(gp_dist *d, size_t bytes, int trips, double *one_way_s) {
  *one_way_s = 0;
  if (!d || !d->impl || d->world < 2 || trips < 1) return GP_OK;
  if (bytes > INT32_MAX) return GP_ERR(GP_ERR_USAGE, "internal: a ping of %zu bytes", bytes);
  char *buf = calloc(bytes ? bytes : 1, 1);
  double *t = malloc(sizeof *t * (size_t)trips);
  if (!buf || !t) {
    free(buf);
    free(t);
    return GP_ERR(GP_ERR_NOMEM, "out of memory measuring the hand-offs");
  }
  MPI_Comm c = d->impl->main;
  int rc = MPI_Barrier(c);
  for (int i = 0; rc == MPI_SUCCESS && i < trips && d->rank < 2; i++) {
    double t0 = MPI_Wtime();
    if (d->rank == 0) {
      rc = MPI_Send(buf, (int)bytes, MPI_BYTE, 1, TAG_PING, c);
      if (rc == MPI_SUCCESS)
        rc = MPI_Recv(buf, (int)bytes, MPI_BYTE, 1, TAG_PING, c, MPI_STATUS_IGNORE);
    } else {
      rc = MPI_Recv(buf, (int)bytes, MPI_BYTE, 0, TAG_PING, c, MPI_STATUS_IGNORE);
      if (rc == MPI_SUCCESS) rc = MPI_Send(buf, (int)bytes, MPI_BYTE, 0, TAG_PING, c);
    }
    t[i] = MPI_Wtime() - t0;
  }
  double v = rc == MPI_SUCCESS && d->rank == 0 ? median(t, trips) / 2 : 0;
  free(buf);
  free(t);
  if (rc != MPI_SUCCESS) return mpi_err(rc, "MPI_Send/MPI_Recv");
  MPI_TRY(MPI_Bcast(&v, 1, MPI_DOUBLE, 0, c), "MPI_Bcast");
  *one_way_s = v;
  return GP_OK;
}

gp_status gp_dist_allreduce_time(gp_dist *d, size_t bytes, int reps, double *s) {
  *s = 0;
  if (!d || !d->impl || reps < 1) return GP_OK;
  size_t n = bytes / sizeof(float);
  if (n < 1 || n > INT32_MAX)
    return GP_ERR(GP_ERR_USAGE, "internal: an all-reduce of %zu bytes", bytes);
  float *v = calloc(n, sizeof *v);
  double *t = malloc(sizeof *t * (size_t)reps);
  if (!v || !t) {
    free(v);
    free(t);
    return GP_ERR(GP_ERR_NOMEM, "out of memory measuring the all-reduce");
  }
  MPI_Comm c = d->impl->main;
  int rc = MPI_Barrier(c);
  for (int i = 0; rc == MPI_SUCCESS && i < reps; i++) {
    double t0 = MPI_Wtime();
    rc = MPI_Allreduce(MPI_IN_PLACE, v, (int)n, MPI_FLOAT, MPI_SUM, c);
    t[i] = MPI_Wtime() - t0;
  }
  /* each process times its own part: the slowest's is the collective's */
  double m = rc == MPI_SUCCESS ? median(t, reps) : 0;
  free(v);
  free(t);
  if (rc != MPI_SUCCESS) return mpi_err(rc, "MPI_Allreduce");
  MPI_TRY(MPI_Allreduce(&m, s, 1, MPI_DOUBLE, MPI_MAX, c), "MPI_Allreduce");
  return GP_OK;
}

/* ---- point to point ---- */

static gp_status post(gp_dist *d, int recv, int pos, int tag, void *buf, size_t bytes,
                      gp_net_req **out) {
  if (bytes > (size_t)1 << 31)
    return GP_ERR(GP_ERR_USAGE,
                  "a hand-off of %zu bytes: at most 2 GiB a micro-batch between "
                  "processes (use more micro-batches)",
                  bytes);
  gp_net_req *r = malloc(sizeof *r);
  if (!r) return GP_ERR(GP_ERR_NOMEM, "out of memory for a hand-off");
  r->bytes = bytes;
  r->recv = recv;
  int rc = recv ? MPI_Irecv(buf, (int)bytes, MPI_BYTE, pos, tag, d->impl->p2p, &r->r)
                : MPI_Isend(buf, (int)bytes, MPI_BYTE, pos, tag, d->impl->p2p, &r->r);
  if (rc != MPI_SUCCESS) {
    free(r);
    return mpi_err(rc, recv ? "MPI_Irecv" : "MPI_Isend");
  }
  *out = r;
  return GP_OK;
}

gp_status gp_net_isend(gp_dist *d, int pos, int tag, const void *buf, size_t bytes,
                       gp_net_req **out) {
  return post(d, 0, pos, tag, (void *)buf, bytes, out);
}

gp_status gp_net_irecv(gp_dist *d, int pos, int tag, void *buf, size_t bytes, gp_net_req **out) {
  return post(d, 1, pos, tag, buf, bytes, out);
}

gp_status gp_net_test(gp_net_req **r, int *done) {
  *done = 1;
  if (!*r) return GP_OK;
  int flag = 0;
  MPI_Status st;
  int rc = MPI_Test(&(*r)->r, &flag, &st);
  if (rc != MPI_SUCCESS) {
    free(*r);
    *r = NULL;
    return mpi_err(rc, "MPI_Test");
  }
  if (!flag) {
    *done = 0;
    return GP_OK;
  }
  int count = 0;
  if ((*r)->recv) MPI_Get_count(&st, MPI_BYTE, &count);
  size_t want = (*r)->bytes;
  int recv = (*r)->recv;
  free(*r);
  *r = NULL;
  if (recv && (size_t)count != want)
    return GP_ERR(GP_ERR_RUNTIME,
                  "a hand-off of %d bytes arrived where %zu were expected "
                  "(the processes run different models or plans?)",
                  count, want);
  return GP_OK;
}

void gp_net_drop(gp_net_req **r) {
  if (!*r) return;
  int flag = 0;
  MPI_Test(&(*r)->r, &flag, MPI_STATUS_IGNORE);
  if (!flag) {
    MPI_Cancel(&(*r)->r);
    MPI_Request_free(&(*r)->r);
  }
  free(*r);
  *r = NULL;
}

int gp_net_tag_max(gp_dist *d) {
  return d && d->impl ? d->impl->tag_max : 32767;
}

/* ---- the stage threads' collectives ---- */

gp_status gp_dist_sum_doubles(gp_dist *d, double *v, int64_t n, int all_replicas) {
  if (!d || !d->impl) return GP_OK;
  MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, v, (int)n, MPI_DOUBLE, MPI_SUM,
                        all_replicas ? d->impl->all : d->impl->coll),
          "MPI_Allreduce");
  return GP_OK;
}

gp_status gp_dist_sum_replicas(gp_dist *d, int s, float *v, int64_t n) {
  if (!d || !d->impl || d->lay.replicas < 2) return GP_OK;
  MPI_Comm c = s < d->impl->n_stage ? d->impl->stage[s] : MPI_COMM_NULL;
  if (c == MPI_COMM_NULL) return GP_ERR(GP_ERR_RUNTIME, "internal: stage %d is not held here", s);
  const int64_t chunk = (int64_t)1 << 30; /* MPI counts are ints */
  for (int64_t at = 0; at < n; at += chunk) {
    int len = (int)(n - at < chunk ? n - at : chunk);
    MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, v + at, len, MPI_FLOAT, MPI_SUM, c), "MPI_Allreduce");
  }
  return GP_OK;
}

gp_status gp_dist_isum_replicas(gp_dist *d, int s, float *v, int64_t n, gp_net_req **out) {
  MPI_Comm c = d && d->impl && s < d->impl->n_stage ? d->impl->stage[s] : MPI_COMM_NULL;
  if (c == MPI_COMM_NULL) return GP_ERR(GP_ERR_RUNTIME, "internal: stage %d is not held here", s);
  if (n > INT32_MAX) return GP_ERR(GP_ERR_USAGE, "internal: a bucket of %lld floats", (long long)n);
  gp_net_req *r = malloc(sizeof *r);
  if (!r) return GP_ERR(GP_ERR_NOMEM, "out of memory for an all-reduce");
  r->bytes = (size_t)n * sizeof *v;
  r->recv = 0;
  int rc = MPI_Iallreduce(MPI_IN_PLACE, v, (int)n, MPI_FLOAT, MPI_SUM, c, &r->r);
  if (rc != MPI_SUCCESS) {
    free(r);
    return mpi_err(rc, "MPI_Iallreduce");
  }
  *out = r;
  return GP_OK;
}

gp_status gp_dist_gather_replicas(gp_dist *d, int s, const double *v, int n, double *out) {
  if (!d || !d->impl || d->lay.replicas < 2) {
    memcpy(out, v, sizeof *v * (size_t)n);
    return GP_OK;
  }
  MPI_Comm c = s < d->impl->n_stage ? d->impl->stage[s] : MPI_COMM_NULL;
  if (c == MPI_COMM_NULL) return GP_ERR(GP_ERR_RUNTIME, "internal: stage %d is not held here", s);
  MPI_TRY(MPI_Allgather(v, n, MPI_DOUBLE, out, n, MPI_DOUBLE, c), "MPI_Allgather");
  return GP_OK;
}

/* ---- liveness ---- */

static double mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Whether process pid is gone: no such process, or a zombie not yet reaped (a process killed
 * by SIGKILL or the OOM killer). */
static int pid_gone(int pid) {
  char path[64], buf[256];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE *f = fopen(path, "r");
  if (!f) return 1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  const char *p = strrchr(buf, ')'); /* "pid (comm) S ...": the state after the name */
  return p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}

int gp_dist_lost(const gp_dist *d, char *buf, size_t n) {
  const gp_dist_impl *x = d ? d->impl : NULL;
  for (int i = 0; x && i < x->n_near; i++)
    if (pid_gone(x->near_pid[i])) {
      snprintf(buf, n,
               "lost rank %d (%s, pid %d): the process is gone (killed, or out of "
               "memory?)",
               x->near_rank[i], d->host, x->near_pid[i]);
      return 1;
    }
  return 0;
}

/* Every 0.5 s a beat to the next rank; the previous rank's beats are awaited. Silence longer
 * than the timeout names the previous rank and ends the run: a stopped or lost process
 * answers nothing, and without this every wait on it would last as long as the watchdog. */
static void *liveness(void *arg) {
  gp_dist *d = arg;
  gp_dist_impl *x = d->impl;
  const int next = (d->rank + 1) % d->world, prev = (d->rank + d->world - 1) % d->world;
  int in = 0, out = 1;
  MPI_Request rr, sr = MPI_REQUEST_NULL, er;
  int ender = -1;
  MPI_Irecv(&in, 1, MPI_INT, prev, TAG_BEAT, x->hb, &rr);
  MPI_Irecv(&ender, 1, MPI_INT, MPI_ANY_SOURCE, TAG_END, x->hb, &er);
  double heard = mono_s(), sent = 0;
  double last = mono_s();
  while (!atomic_load(&x->hb_stop)) {
    double now = mono_s();
    /* this process was itself stopped (SIGSTOP, then SIGCONT as the launcher ends the run):
     * the silence was its own, not the others' */
    if (now - last > 1.0) heard = now;
    last = now;
    if (now - sent >= 0.5) {
      int flag = 1;
      if (sr != MPI_REQUEST_NULL) MPI_Test(&sr, &flag, MPI_STATUS_IGNORE);
      if (flag) MPI_Isend(&out, 1, MPI_INT, next, TAG_BEAT, x->hb, &sr);
      sent = now;
    }
    int flag = 0;
    if (!atomic_load(&x->ended)) MPI_Test(&er, &flag, MPI_STATUS_IGNORE);
    if (flag || atomic_load(&x->ended)) { /* another process ends the run and says why */
      if (flag && !atomic_exchange(&x->ended, 1) && x->on_end) x->on_end();
      struct timespec ts = {0, 20 * 1000 * 1000};
      nanosleep(&ts, NULL);
      continue;
    }
    if (MPI_Test(&rr, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      dprintf(x->hb_fd, "%s: %s: lost rank %d: its connection failed\n", x->hb_prog, x->who, prev);
      gp_dist_abort(d, 1);
    }
    if (flag) {
      heard = now;
      MPI_Irecv(&in, 1, MPI_INT, prev, TAG_BEAT, x->hb, &rr);
    } else if (now - heard > x->hb_timeout) {
      dprintf(x->hb_fd,
              "%s: %s: rank %d stopped answering (no heartbeat for %.0f s): ending the "
              "run\n",
              x->hb_prog, x->who, prev, x->hb_timeout);
      gp_dist_abort(d, 1);
    }
    /* a process of this host that died is seen at once: the launcher ends the run a moment
     * later, and this line says which rank was lost */
    char lost[256];
    if (gp_dist_lost(d, lost, sizeof lost)) {
      dprintf(x->hb_fd, "%s: %s: %s: ending the run\n", x->hb_prog, x->who, lost);
      gp_dist_abort(d, 1);
    }
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  MPI_Cancel(&rr);
  MPI_Request_free(&rr);
  MPI_Cancel(&er);
  MPI_Request_free(&er);
  if (sr != MPI_REQUEST_NULL) MPI_Request_free(&sr);
  return NULL;
}

gp_status gp_dist_liveness_start(gp_dist *d, double timeout_s, const char *prog, int err_fd) {
  gp_dist_impl *x = d->impl;
  if (!x || x->hb_running) return GP_OK;
  x->hb_timeout = timeout_s > 0 ? timeout_s : 30;
  x->hb_fd = err_fd;
  snprintf(x->hb_prog, sizeof x->hb_prog, "%s", prog);
  atomic_store(&x->hb_stop, 0);
  if (pthread_create(&x->hb_thread, NULL, liveness, d) != 0)
    return GP_ERR(GP_ERR_RUNTIME, "cannot start the liveness thread");
  x->hb_running = 1;
  return GP_OK;
}

void gp_dist_liveness_stop(gp_dist *d) {
  gp_dist_impl *x = d->impl;
  if (!x || !x->hb_running) return;
  atomic_store(&x->hb_stop, 1);
  pthread_join(x->hb_thread, NULL);
  x->hb_running = 0;
}
