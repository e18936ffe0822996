/* GP_CHAN_NCCL: GPU stages in different processes hand values forward and gradients back device
 * to device with ncclSend / ncclRecv (core/dist/nccl.h), each direction on a communicator and
 * stream of its own, ordered against the stages' compute streams by events. The host never
 * waits for a transfer: a value counts as arrived when the command starts (the reader's compute
 * stream waits for its receive), a gradient as soon as its value was sent (the producer's
 * compute stream waits for its receive); only the release of a value sent waits, polled, until
 * the send has passed. NCCL matches a pair's transfers in the order both ends queue them, which
 * the stages' schedules keep (gp_chan_cross_kind's same_order). Not run on a GPU yet. */
#include "core/exec/chan_nccl.h"

#include "core/cuda/cuda.h"
#include "core/dist/nccl.h"
#include "core/schedule/schedule.h"

gp_status gp_chan_nccl_connect(gp_chan *c, int device) {
  if (c->kind != GP_CHAN_NET)
    return GP_ERR(GP_ERR_RUNTIME, "internal: an NCCL edge made from a %s one",
                  gp_chan_kind_name(c->kind));
  /* the producer's end makes the ids; both ends make the value's communicator first */
  GP_TRY(gp_nccl_pair(c->dist, c->peer, c->producer_end, device, c->micro, &c->nccl_val));
  GP_TRY(gp_nccl_pair(c->dist, c->peer, c->producer_end, device, 0, &c->nccl_grad));
  c->kind = GP_CHAN_NCCL;
  return GP_OK;
}

int gp_chan_same_order(const gp_schedule *sc, int a, int b) {
  for (int kind = GP_A_FORWARD; kind <= GP_A_BACKWARD; kind++) {
    const gp_action *x = sc->actions[a], *y = sc->actions[b];
    int i = 0, j = 0;
    const int na = sc->n_actions[a], nb = sc->n_actions[b];
    for (;;) {
      while (i < na && x[i].kind != (gp_action_kind)kind)
        i++;
      while (j < nb && y[j].kind != (gp_action_kind)kind)
        j++;
      if (i == na || j == nb) {
        if (i != na || j != nb) return 0;
        break;
      }
      if (x[i].micro != y[j].micro || x[i].chunk != y[j].chunk) return 0;
      i++, j++;
    }
  }
  return 1;
}

static void *compute_of(gp_backend *be) {
  return gp_cuda_queue(be, GP_Q_COMPUTE);
}

gp_status gp_chan_nccl_begin(gp_chan *c, const int64_t *off, int training) {
  c->training = training;
  for (int m = 0; m < c->micro; m++) {
    gp_chan_net *n = &c->net[m];
    if (n->sent)
      return GP_ERR(GP_ERR_RUNTIME, "internal: a hand-off of the last command is in flight");
    c->slot[m].grad_to = NULL;
    n->rows = off[m + 1] - off[m];
    n->arrived = !c->producer_end && n->rows > 0; /* counted at the next poll */
  }
  return GP_OK;
}

gp_status gp_chan_nccl_send(gp_chan *c, int m, const gp_tensor *v, void *grad_to) {
  gp_chan_net *n = &c->net[m];
  if (n->sent)
    return GP_ERR(GP_ERR_RUNTIME, "internal: micro-batch %d's hand-off is still in flight", m);
  c->slot[m].val = *v;
  c->slot[m].grad_to = grad_to;
  /* after the compute stream's work so far: the forward that made v */
  GP_TRY(gp_nccl_send(c->nccl_val, v->data, gp_tensor_bytes(v), compute_of(c->src)));
  GP_TRY(gp_nccl_mark(c->nccl_val, m));
  n->sent = 1;
  if (grad_to) gp_chan_deliver(&c->to_producer, &c->to_producer.count[m].grads);
  return GP_OK;
}

gp_status gp_chan_nccl_recv(gp_chan *c, int m, gp_arena *own, gp_tensor *out) {
  gp_chan_net *n = &c->net[m];
  gp_shape sh = gp_shape_batch(n->rows, &c->row_shape);
  GP_TRY(gp_arena_tensor(own, c->dtype, &sh, out));
  void *compute = compute_of(c->dst);
  /* after the compute stream's work so far (which may still use the arena's memory); the
   * compute stream then waits for the value */
  GP_TRY(gp_nccl_recv(c->nccl_val, out->data, (size_t)n->rows * c->row_bytes, compute));
  return gp_nccl_join(c->nccl_val, compute);
}

gp_status gp_chan_nccl_send_grad(gp_chan *c, int m, const gp_tensor *g, gp_arena *own) {
  gp_backend *be = c->dst;
  size_t bytes = (size_t)c->net[m].rows * c->row_bytes;
  const void *src = g->data;
  if (!src) { /* no gradient reached the value: zeros */
    void *z;
    GP_TRY(gp_arena_alloc(own, bytes, &z));
    GP_TRY(be->zero(be, z, bytes));
    src = z;
  }
  void *compute = compute_of(be);
  GP_TRY(gp_nccl_send(c->nccl_grad, src, bytes, compute));
  /* the compute stream reuses the gradient's memory only once the send has read it */
  return gp_nccl_join(c->nccl_grad, compute);
}

gp_status gp_chan_nccl_grad(gp_chan *c, int m, float *into) {
  void *compute = compute_of(c->src);
  GP_TRY(gp_nccl_recv(c->nccl_grad, into, gp_tensor_bytes(&c->slot[m].val), compute));
  return gp_nccl_join(c->nccl_grad, compute);
}

gp_status gp_chan_nccl_poll(gp_chan *c, int *pending) {
  for (int m = 0; m < c->micro; m++) {
    gp_chan_net *n = &c->net[m];
    if (n->arrived) {
      n->arrived = 0;
      gp_chan_deliver(&c->to_reader, &c->to_reader.count[m].values);
    }
    if (!n->sent) continue;
    int passed;
    GP_TRY(gp_nccl_passed(c->nccl_val, m, &passed));
    if (!passed) {
      ++*pending;
      continue;
    }
    n->sent = 0;
    gp_chan_deliver(&c->to_producer, &c->to_producer.count[m].released);
  }
  return GP_OK;
}
