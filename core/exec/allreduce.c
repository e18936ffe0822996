/* A stage's gradients summed over its replicas, overlapped with its last backward: buckets of
 * the flat gradient buffer start as soon as the backward has passed every node in them, and move
 * on at each later layer's end; the step starts the rest and waits. A CPU stage's buckets are
 * MPI_Iallreduce on the stage's own communicator, in place. A GPU stage's are ncclAllReduce on
 * its replicas' NCCL communicator, queued after the compute stream's mark (the host never
 * waits; the step's compute waits for the communicator's stream), or, without NCCL, MPI on a
 * page-locked host copy: copied out on queue OUT after the compute mark, summed once the copy
 * passed, copied back on queue IN, which the step's compute waits for. The GPU paths have not
 * run on a GPU yet. The tests' GP_TEST_NO_ALLREDUCE sums nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/cuda/cuda.h"
#include "core/dist/dist.h"
#include "core/dist/nccl.h"
#include "core/exec/internal.h"

#define BUCKET_FLOATS ((int64_t)64 * 1024) /* 256 KiB: a few buckets even in small models */

/* A GPU stage's bucket summed by MPI: where it is. */
typedef enum { AR_OUT, AR_SUM, AR_BACK } ar_state;
struct gp_ar_bucket {
  int64_t lo, hi;
  ar_state state;
  gp_event *ev; /* its copy out's end, then (the last bucket's) the copies back */
  struct gp_net_req *req;
};

static int overlapped(const stage *st) {
  const gp_pipeline *pl = st->pl;
  return pl->dist && pl->lay.replicas > 1 && !pl->test_no_allreduce && st->params.n_train > 0 &&
         (st->be->device < 0 || st->ar.nccl || st->ar.host);
}

/* Summed by MPI on the page-locked host copy: a GPU stage without NCCL (tests: any stage) */
static int staged(const stage *st) {
  return st->be->device >= 0 ? !st->pl->nccl : st->pl->test_staged;
}

gp_status gp_pl_ar_init(gp_pipeline *pl) {
  if (!pl->dist || pl->lay.replicas < 2) return GP_OK;
  for (int i = 0; i < pl->k; i++) {
    stage *st = &pl->st[i];
    if (!gp_layout_local(&pl->lay, i) || st->params.n_train == 0) continue;
    if (st->be->device >= 0 && pl->nccl)
      GP_TRY(gp_nccl_replicas(pl->dist, i, st->be->device, &st->ar.nccl));
    else if (staged(st))
      GP_TRY(st->be->host_alloc(st->be, (size_t)st->params.n_train * sizeof(float),
                                (void **)&st->ar.host));
  }
  return GP_OK;
}

/* Each node's first gradient float (nodes lie in order in the buffer), once. */
static int offsets(stage *st) {
  if (st->ar.node_off) return 1;
  const int n = st->end - st->first;
  if (!(st->ar.node_off = malloc(sizeof *st->ar.node_off * (size_t)(n > 0 ? n : 1)))) return 0;
  const gp_model *m = st->pl->m;
  for (int i = st->first; i < st->end; i++) {
    const gp_layer *l = &m->nodes[i].layer;
    const gp_layer_bind *b = gp_params_bind(&st->params, i);
    int64_t lo = -1;
    for (int p = 0; p < l->n_params; p++)
      if (b->grad[p] && (lo < 0 || b->grad[p] - st->params.grad < lo))
        lo = b->grad[p] - st->params.grad;
    st->ar.node_off[i - st->first] = lo;
  }
  return 1;
}

void gp_pl_ar_action(stage *st, int a) {
  stage_ar *ar = &st->ar;
  if (a != ar->last_b || !overlapped(st) || !offsets(st)) return;
  ar->on = 1;
  ar->lo = ar->hi = st->params.n_train;
  ar->n_req = 0;
  ar->n_bucket = 0;
  ar->t_first = 0;
}

/* A GPU stage's bucket [lo, hi) by MPI: its copy to the host queued on OUT after the compute
 * stream's work so far (the backward that finished its gradients). */
static gp_status start_staged(stage *st, int64_t lo, int64_t hi) {
  stage_ar *ar = &st->ar;
  gp_backend *be = st->be;
  if (ar->n_bucket == ar->cap_bucket) { /* grows in the first steps only */
    int cap = ar->cap_bucket ? 2 * ar->cap_bucket : 16;
    struct gp_ar_bucket *b = realloc(ar->bucket, sizeof *b * (size_t)cap);
    if (!b) return GP_ERR(GP_ERR_NOMEM, "out of memory for the all-reduce's buckets");
    for (int i = ar->cap_bucket; i < cap; i++)
      b[i] = (struct gp_ar_bucket){0};
    ar->bucket = b;
    ar->cap_bucket = cap;
  }
  struct gp_ar_bucket *b = &ar->bucket[ar->n_bucket];
  if (!b->ev) GP_TRY(be->event_create(be, &b->ev));
  b->lo = lo;
  b->hi = hi;
  b->state = AR_OUT;
  b->req = NULL;
  ar->n_bucket++;
  const size_t bytes = (size_t)(hi - lo) * sizeof(float);
  GP_TRY(be->event_record(be, GP_Q_COMPUTE, b->ev));
  GP_TRY(be->event_wait(be, GP_Q_OUT, b->ev));
  GP_TRY(be->to_host_on(be, GP_Q_OUT, ar->host + lo, st->params.grad + lo, bytes));
  return be->event_record(be, GP_Q_OUT, b->ev);
}

/* Moves a GPU stage's MPI buckets on: a copy out that passed starts its sum, a sum done queues
 * its copy back on IN; *left: buckets still copying out or summing. */
static gp_status progress_staged(stage *st, int *left) {
  stage_ar *ar = &st->ar;
  gp_backend *be = st->be;
  for (int i = 0; i < ar->n_bucket; i++) {
    struct gp_ar_bucket *b = &ar->bucket[i];
    int done = 0;
    if (b->state == AR_OUT) {
      GP_TRY(be->event_query(be, b->ev, &done));
      if (done) {
        GP_TRY(gp_dist_isum_replicas(st->pl->dist, st->index, ar->host + b->lo, b->hi - b->lo,
                                     &b->req));
        b->state = AR_SUM;
        done = 0;
      }
    }
    if (b->state == AR_SUM) {
      GP_TRY(gp_net_test(&b->req, &done));
      if (done) {
        GP_TRY(be->from_host_on(be, GP_Q_IN, st->params.grad + b->lo, ar->host + b->lo,
                                (size_t)(b->hi - b->lo) * sizeof(float)));
        b->state = AR_BACK;
      }
    }
    *left += b->state != AR_BACK;
  }
  return GP_OK;
}

static gp_status start(stage *st, int64_t lo, int64_t hi) {
  stage_ar *ar = &st->ar;
  if (hi <= lo) return GP_OK;
  if (ar->host || ar->nccl) {
    if (ar->n_bucket == 0 && ar->t_first == 0) ar->t_first = now_s();
    ar->bytes += (hi - lo) * (int64_t)sizeof(float);
    if (ar->host) return start_staged(st, lo, hi);
    /* after the compute stream's work so far: the backward that finished these gradients */
    return gp_nccl_allreduce(ar->nccl, st->params.grad + lo, hi - lo,
                             gp_cuda_queue(st->be, GP_Q_COMPUTE));
  }
  if (ar->n_req == ar->cap_req) {
    int cap = ar->cap_req ? 2 * ar->cap_req : 16;
    struct gp_net_req **r = realloc(ar->req, sizeof *r * (size_t)cap);
    if (!r) return GP_ERR(GP_ERR_NOMEM, "out of memory for the all-reduce's buckets");
    ar->req = r;
    ar->cap_req = cap;
  }
  if (ar->n_req == 0) ar->t_first = now_s();
  GP_TRY(gp_dist_isum_replicas(st->pl->dist, st->index, st->params.grad + lo, hi - lo,
                               &ar->req[ar->n_req]));
  ar->n_req++;
  ar->bytes += (hi - lo) * (int64_t)sizeof(float);
  return GP_OK;
}

/* Moves the buckets in flight on; *left: how many are. */
static gp_status progress(stage *st, int *left) {
  *left = 0;
  if (st->ar.host) return progress_staged(st, left);
  for (int i = 0; i < st->ar.n_req; i++) {
    int done;
    GP_TRY(gp_net_test(&st->ar.req[i], &done));
    *left += !done;
  }
  return GP_OK;
}

void gp_pl_ar_layer(stage *st, int node) {
  stage_ar *ar = &st->ar;
  if (!ar->on || st->net_fail) return;
  int64_t off = ar->node_off[node - st->first];
  if (off >= 0 && off < ar->lo) ar->lo = off;
  int left;
  gp_status s = ar->hi - ar->lo >= BUCKET_FLOATS ? start(st, ar->lo, ar->hi) : GP_OK;
  if (s == GP_OK && ar->hi - ar->lo >= BUCKET_FLOATS) ar->hi = ar->lo;
  if (s == GP_OK) s = progress(st, &left);
  if ((st->net_fail = s) != GP_OK)
    snprintf(st->net_msg, sizeof st->net_msg, "%s", gp_error_message());
}

gp_status gp_pl_ar_finish(stage *st) {
  gp_pipeline *pl = st->pl;
  stage_ar *ar = &st->ar;
  if (!ar->on) {
    if (pl->test_no_allreduce) return GP_OK;
    return pl->coll.ops->replica_grads(&pl->coll, st->index, st->be, st->params.grad,
                                       st->params.n_train);
  }
  ar->on = 0;
  if (st->net_fail) return GP_ERR(st->net_fail, "%s", st->net_msg);
  const double t0 = now_s(), until = t0 + pl->watchdog_s;
  GP_TRY(start(st, 0, ar->hi)); /* the rest: the first nodes' gradients */
  for (int left = 1;;) {
    GP_TRY(progress(st, &left));
    if (!left) break;
    if (now_s() > until)
      return GP_ERR(GP_ERR_RUNTIME,
                    "watchdog: stage %d waited more than %.0f s for the "
                    "gradients' all-reduce",
                    st->index, pl->watchdog_s);
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
  }
  /* a GPU stage's step waits for the sums on its compute stream, not on the host */
  if (ar->nccl) GP_TRY(gp_nccl_join(ar->nccl, gp_cuda_queue(st->be, GP_Q_COMPUTE)));
  if (ar->host && ar->n_bucket) {
    gp_event *back = ar->bucket[ar->n_bucket - 1].ev; /* its copy out passed long ago */
    GP_TRY(st->be->event_record(st->be, GP_Q_IN, back));
    GP_TRY(st->be->event_wait(st->be, GP_Q_COMPUTE, back));
  }
  const double t1 = now_s();
  ar->span_s += t1 - ar->t_first;
  ar->wait_s += t1 - t0;
  ar->steps++;
  return GP_OK;
}

void gp_pl_ar_free(stage *st) {
  stage_ar *ar = &st->ar;
  for (int i = 0; i < ar->n_req; i++)
    gp_net_drop(&ar->req[i]);
  free(ar->req);
  free(ar->node_off);
  for (int i = 0; i < ar->cap_bucket; i++) {
    gp_net_drop(&ar->bucket[i].req);
    if (ar->bucket[i].ev) st->be->event_destroy(st->be, ar->bucket[i].ev);
  }
  free(ar->bucket);
  if (ar->host) st->be->host_free(st->be, ar->host);
  gp_nccl_free(ar->nccl);
}
