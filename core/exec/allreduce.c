/* A stage's gradients summed over its replicas, overlapped with its last backward: buckets of
 * the flat gradient buffer start (MPI_Iallreduce on the stage's own communicator) as soon as
 * the backward has passed every node in them, and move on at each later layer's end; the step
 * starts the rest and waits. Device stages (and the tests' GP_TEST_NO_ALLREDUCE) go through the
 * collective's blocking sum, or none. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/dist/dist.h"
#include "core/exec/internal.h"

#define BUCKET_FLOATS ((int64_t)64 * 1024) /* 256 KiB: a few buckets even in small models */

static int overlapped(const stage *st) {
  const gp_pipeline *pl = st->pl;
  return pl->dist && pl->lay.replicas > 1 && !pl->test_no_allreduce && st->be->device < 0 &&
         st->params.n_train > 0;
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
  ar->t_first = 0;
}

static gp_status start(stage *st, int64_t lo, int64_t hi) {
  stage_ar *ar = &st->ar;
  if (hi <= lo) return GP_OK;
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
  const double t1 = now_s();
  ar->span_s += t1 - ar->t_first;
  ar->wait_s += t1 - t0;
  ar->steps++;
  return GP_OK;
}

void gp_pl_ar_free(stage *st) {
  for (int i = 0; i < st->ar.n_req; i++)
    gp_net_drop(&st->ar.req[i]);
  free(st->ar.req);
  free(st->ar.node_off);
}
