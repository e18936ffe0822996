/* Channels between stages, and from the host batch to the stages that read model inputs: the
 * one place that knows whether two stages share memory. */
#include "core/exec/channel.h"

#include "core/dist/dist.h"
#include "core/dist/nccl.h"
#include "core/exec/chan_nccl.h"

#include <stdlib.h>
#include <string.h>

static const char *const kind_names[GP_CHAN_KINDS] = {"host", "staged", "shared",
                                                      "copy", "net",    "nccl"};
_Static_assert(sizeof kind_names / sizeof *kind_names == GP_CHAN_KINDS, "a name per kind");

const char *gp_chan_kind_name(gp_chan_kind k) {
  return k >= 0 && k < GP_CHAN_KINDS ? kind_names[k] : "?";
}

int gp_chan_crosses(const gp_chan *c) {
  return c->kind == GP_CHAN_NET || c->kind == GP_CHAN_NCCL;
}

gp_chan_kind gp_chan_cross_kind(const char *src_dev, const char *dst_dev, int nccl,
                                int same_order) {
  const int cuda = strncmp(src_dev, "cuda", 4) == 0 && strncmp(dst_dev, "cuda", 4) == 0;
  return cuda && nccl && same_order ? GP_CHAN_NCCL : GP_CHAN_NET;
}

/* A GP_CHAN_NET end's backend. */
static gp_backend *net_be(const gp_chan *c) {
  return c->producer_end ? c->src : c->dst;
}

static gp_status slots_make(gp_chan *c, int micro) {
  c->micro = micro;
  if (!(c->slot = calloc((size_t)micro, sizeof *c->slot)))
    return GP_ERR(GP_ERR_NOMEM, "out of memory for a channel");
  return GP_OK;
}

gp_status gp_chan_init(gp_chan *c, gp_chan_kind kind, int t, int micro, gp_backend *src,
                       gp_event **src_done, gp_chan_inbox to_producer, gp_backend *dst,
                       gp_event **dst_done, gp_chan_inbox to_reader) {
  memset(c, 0, sizeof *c);
  if (kind != GP_CHAN_SHARED && kind != GP_CHAN_COPY)
    return GP_ERR(GP_ERR_USAGE, "internal: a stage's tensor goes by a shared or a copy channel");
  c->kind = kind;
  c->t = t;
  c->src = src;
  c->src_done = src_done;
  c->to_producer = to_producer;
  c->dst = dst;
  c->dst_done = dst_done;
  c->to_reader = to_reader;
  GP_TRY(slots_make(c, micro));
  if (kind == GP_CHAN_COPY)
    for (int m = 0; m < micro; m++)
      GP_TRY(dst->event_create(dst, &c->slot[m].mark));
  return GP_OK;
}

gp_status gp_chan_init_input(gp_chan *c, gp_chan_kind kind, int t, int micro, size_t row_bytes,
                             gp_backend *dst) {
  memset(c, 0, sizeof *c);
  if (kind != GP_CHAN_HOST && kind != GP_CHAN_STAGED)
    return GP_ERR(GP_ERR_USAGE, "internal: a model input goes by a host or a staged channel");
  c->kind = kind;
  c->t = t;
  c->dst = dst;
  c->row_bytes = row_bytes;
  GP_TRY(slots_make(c, micro));
  if (kind == GP_CHAN_STAGED) GP_TRY(dst->event_create(dst, &c->host_free));
  return GP_OK;
}

gp_status gp_chan_init_net(gp_chan *c, int t, int micro, struct gp_dist *dist, int producer_end,
                           int peer, int tag, gp_backend *be, gp_chan_inbox inbox,
                           const gp_shape *row_shape, gp_dtype dtype, int staged) {
  memset(c, 0, sizeof *c);
  c->kind = GP_CHAN_NET;
  c->staged = staged;
  c->t = t;
  c->dist = dist;
  c->producer_end = producer_end;
  c->peer = peer;
  c->tag = tag;
  c->row_shape = *row_shape;
  c->dtype = dtype;
  c->row_bytes = (size_t)gp_shape_numel(row_shape) * gp_dtype_size(dtype);
  if (producer_end) {
    c->src = be;
    c->to_producer = inbox;
  } else {
    c->dst = be;
    c->to_reader = inbox;
  }
  if ((int64_t)(tag + 2) * micro - 1 > gp_net_tag_max(dist))
    return GP_ERR(GP_ERR_USAGE,
                  "%d edges x %d micro-batches of hand-offs between processes: this MPI's tags "
                  "stop at %d (fewer micro-batches or stages)",
                  tag / 2 + 1, micro, gp_net_tag_max(dist));
  GP_TRY(slots_make(c, micro));
  if (!(c->net = calloc((size_t)micro, sizeof *c->net)))
    return GP_ERR(GP_ERR_NOMEM, "out of memory for a channel");
  for (int m = 0; c->staged && m < micro; m++) {
    GP_TRY(be->event_create(be, &c->net[m].val_ev));
    GP_TRY(be->event_create(be, &c->net[m].grad_ev));
  }
  return GP_OK;
}

void gp_chan_free(gp_chan *c) {
  if (!c) return;
  if (c->net) {
    gp_chan_net_drop(c);
    gp_backend *be = net_be(c);
    for (int m = 0; m < c->micro; m++) {
      gp_chan_net *n = &c->net[m];
      if (!c->staged) {
        free(n->val);
        free(n->grad);
        continue;
      }
      be->host_free(be, n->val);
      be->host_free(be, n->grad);
      be->event_destroy(be, n->val_ev);
      be->event_destroy(be, n->grad_ev);
    }
    free(c->net);
  }
  gp_nccl_free(c->nccl_val);
  gp_nccl_free(c->nccl_grad);
  for (int m = 0; c->slot && m < c->micro; m++)
    if (c->slot[m].mark) c->dst->event_destroy(c->dst, c->slot[m].mark);
  if (c->host_free) c->dst->event_destroy(c->dst, c->host_free);
  if (c->host) c->dst->host_free(c->dst, c->host);
  free(c->slot);
  memset(c, 0, sizeof *c);
}

/* ---- model inputs ---- */

gp_status gp_chan_input_begin(gp_chan *c, const void *host, int64_t n) {
  if (!host) return GP_ERR(GP_ERR_USAGE, "the batch has no data for this input");
  c->rows = host;
  if (c->kind != GP_CHAN_STAGED) return GP_OK;
  gp_backend *be = c->dst;
  size_t need = (size_t)n * c->row_bytes;
  GP_TRY(be->event_sync(be, c->host_free));
  if (need > c->cap) {
    be->host_free(be, c->host);
    c->host = NULL;
    c->cap = 0;
    GP_TRY(be->host_alloc(be, need, (void **)&c->host));
    c->cap = need;
  }
  memcpy(c->host, host, need);
  return GP_OK;
}

gp_status gp_chan_input_get(gp_chan *c, int64_t at, int64_t n, const gp_shape *sh, gp_dtype dt,
                            gp_arena *own, gp_tensor *out, int *queued) {
  size_t off = (size_t)at * c->row_bytes, bytes = (size_t)n * c->row_bytes;
  if (c->kind == GP_CHAN_HOST) {
    /* read where it is: the step returns only when every stage is done with the batch, and
     * nothing writes over a model input (gp_node_in_place) */
    *out = (gp_tensor){(void *)(c->rows + off), *sh, dt, -1};
    return GP_OK;
  }
  GP_TRY(gp_arena_tensor(own, dt, sh, out));
  GP_TRY(c->dst->from_host_async(c->dst, out->data, c->host + off, bytes));
  *queued = 1;
  return GP_OK;
}

gp_status gp_chan_input_end(gp_chan *c) {
  if (c->kind != GP_CHAN_STAGED) return GP_OK;
  return c->dst->event_record(c->dst, GP_Q_COMPUTE, c->host_free);
}

/* ---- node tensors ---- */

/* Adds one to a counter of the stage behind inbox b and wakes it. */
void gp_chan_deliver(const gp_chan_inbox *b, _Atomic int *counter) {
  pthread_mutex_lock(b->mu);
  atomic_fetch_add_explicit(counter, 1, memory_order_release);
  pthread_cond_signal(b->cv);
  pthread_mutex_unlock(b->mu);
}

/* The message's tag: the edge's value (dir 0) or gradient (dir 1) of micro-batch m, so that a
 * schedule's order of micro-batches does not matter (gradients come back in another order). */
static int tag_of(const gp_chan *c, int dir, int m) {
  return (c->tag + dir) * c->micro + m;
}

/* Host room of at least `bytes` in *buf (keeping what fits). */
static gp_status room(void **buf, size_t *cap, size_t bytes) {
  if (bytes <= *cap) return GP_OK;
  void *p = realloc(*buf, bytes);
  if (!p) return GP_ERR(GP_ERR_NOMEM, "out of host memory for a hand-off of %zu bytes", bytes);
  *buf = p;
  *cap = bytes;
  return GP_OK;
}

/* A GP_CHAN_NET end's host room: a CPU stage's from malloc (room), a staged (GPU) end's
 * page-locked, so that its copies run on the copy queues while the host goes on (nothing in it is
 * kept: it is written again only after the copies out of it passed). */
static gp_status net_room(gp_chan *c, void **buf, size_t *cap, size_t bytes) {
  gp_backend *be = net_be(c);
  if (!c->staged) return room(buf, cap, bytes);
  if (bytes <= *cap) return GP_OK;
  be->host_free(be, *buf);
  *buf = NULL;
  *cap = 0;
  GP_TRY(be->host_alloc(be, bytes, buf));
  *cap = bytes;
  return GP_OK;
}

/* A GPU end: bytes from device memory src into the host buffer on queue OUT, after the compute
 * queue's work so far (what made src); ev marks the copy's end, which the send waits for. */
static gp_status net_copy_out(gp_backend *be, gp_event *ev, void *host, const void *src,
                              size_t bytes) {
  GP_TRY(be->event_record(be, GP_Q_COMPUTE, ev));
  GP_TRY(be->event_wait(be, GP_Q_OUT, ev));
  GP_TRY(be->to_host_on(be, GP_Q_OUT, host, src, bytes));
  return be->event_record(be, GP_Q_OUT, ev);
}

/* A GPU end: bytes from the host buffer into device memory dst on queue IN, after the compute
 * queue's work so far (which may still use dst's arena memory); the compute queue then waits for
 * it (ev, which also tells when the buffer may be written again). */
static gp_status net_copy_in(gp_backend *be, gp_event *ev, void *dst, const void *host,
                             size_t bytes) {
  GP_TRY(be->event_record(be, GP_Q_COMPUTE, ev));
  GP_TRY(be->event_wait(be, GP_Q_IN, ev));
  GP_TRY(be->from_host_on(be, GP_Q_IN, dst, host, bytes));
  return be->event_record(be, GP_Q_IN, ev);
}

/* The producer's end: the value staged in host memory and sent; the gradient's receive posted
 * at once (straight into grad_to on the host). A CPU producer's memory is free as soon as the
 * value is staged; a GPU's value is staged by an asynchronous copy, and its send and release
 * wait for it (gp_chan_net_poll). */
static gp_status net_send(gp_chan *c, int m, const gp_tensor *v, void *grad_to) {
  gp_chan_net *n = &c->net[m];
  gp_backend *be = c->src;
  size_t bytes = gp_tensor_bytes(v);
  if (n->val_req || n->grad_req || n->val_out)
    return GP_ERR(GP_ERR_RUNTIME, "internal: micro-batch %d's hand-off is still in flight", m);
  GP_TRY(net_room(c, &n->val, &n->val_cap, bytes));
  c->slot[m].val = *v;
  c->slot[m].grad_to = grad_to;
  if (!c->staged) {
    GP_TRY(be->to_host(be, n->val, v->data, bytes));
    GP_TRY(gp_net_isend(c->dist, c->peer, tag_of(c, 0, m), n->val, bytes, &n->val_req));
  } else {
    GP_TRY(net_copy_out(be, n->val_ev, n->val, v->data, bytes));
    n->val_bytes = bytes;
    n->val_out = 1;
  }
  if (grad_to) {
    void *into = grad_to;
    if (c->staged) {
      /* the last command's copy out of the buffer has long passed: this seldom waits */
      if (n->grad_in) GP_TRY(be->event_sync(be, n->grad_ev));
      n->grad_in = 0;
      GP_TRY(net_room(c, &n->grad, &n->grad_cap, bytes));
      into = n->grad;
    }
    GP_TRY(gp_net_irecv(c->dist, c->peer, tag_of(c, 1, m), into, bytes, &n->grad_req));
  }
  if (!c->staged) gp_chan_deliver(&c->to_producer, &c->to_producer.count[m].released);
  return GP_OK;
}

/* A GPU end's send whose copy to the host has passed starts (a value's producer memory is then
 * released); one still copying counts in *pending. */
static gp_status net_out(gp_chan *c, int m, int grad, int *pending) {
  gp_chan_net *n = &c->net[m];
  gp_backend *be = net_be(c);
  int passed;
  GP_TRY(be->event_query(be, grad ? n->grad_ev : n->val_ev, &passed));
  if (!passed) {
    ++*pending;
    return GP_OK;
  }
  if (grad) {
    n->grad_out = 0;
    return gp_net_isend(c->dist, c->peer, tag_of(c, 1, m), n->grad, n->grad_bytes, &n->grad_req);
  }
  n->val_out = 0;
  GP_TRY(gp_net_isend(c->dist, c->peer, tag_of(c, 0, m), n->val, n->val_bytes, &n->val_req));
  gp_chan_deliver(&c->to_producer, &c->to_producer.count[m].released);
  return GP_OK;
}

gp_status gp_chan_send(gp_chan *c, int m, const gp_tensor *v, void *grad_to) {
  if (c->kind == GP_CHAN_NET) return net_send(c, m, v, grad_to);
  if (c->kind == GP_CHAN_NCCL) return gp_chan_nccl_send(c, m, v, grad_to);
  c->slot[m].val = *v;
  c->slot[m].grad_to = grad_to;
  gp_chan_deliver(&c->to_reader, &c->to_reader.count[m].values);
  return GP_OK;
}

gp_status gp_chan_recv(gp_chan *c, int m, gp_arena *own, gp_tensor *out, int *pulled) {
  gp_backend *be = c->dst;
  const gp_tensor *v = &c->slot[m].val;
  if (c->kind == GP_CHAN_NET) { /* the reader's end: the value arrived in host memory */
    gp_chan_net *n = &c->net[m];
    gp_shape sh = gp_shape_batch(n->rows, &c->row_shape);
    if (!c->staged) {
      *out = (gp_tensor){n->val, sh, c->dtype, -1};
      return GP_OK;
    }
    GP_TRY(gp_arena_tensor(own, c->dtype, &sh, out));
    /* the buffer is received into again only after this copy passed (gp_chan_net_begin) */
    GP_TRY(net_copy_in(be, n->val_ev, out->data, n->val, (size_t)n->rows * c->row_bytes));
    n->val_in = 1;
    *pulled = 1;
    return GP_OK;
  }
  if (c->kind == GP_CHAN_NCCL) return gp_chan_nccl_recv(c, m, own, out);
  if (c->kind == GP_CHAN_SHARED) {
    GP_TRY(be->event_wait(be, GP_Q_COMPUTE, c->src_done[m]));
    *out = *v;
    return GP_OK;
  }
  GP_TRY(gp_arena_tensor(own, v->dtype, &v->shape, out));
  GP_TRY(be->event_wait(be, GP_Q_IN, c->src_done[m]));
  GP_TRY(be->copy_peer(be, GP_Q_IN, out->data, be->device, v->data, c->src->device,
                       gp_tensor_bytes(v)));
  *pulled = 1;
  return GP_OK;
}

int gp_chan_wants_grad(const gp_chan *c, int m) {
  if (gp_chan_crosses(c) && !c->producer_end) return c->training && c->dtype == GP_F32;
  return c->slot[m].grad_to != NULL;
}

/* The reader's end: the gradient (zeros where none reached the value) staged and sent; a GPU's
 * by an asynchronous copy the send waits for (gp_chan_net_poll), and the compute queue waits for
 * it before it reuses g's memory (*pushed). */
static gp_status net_send_grad(gp_chan *c, int m, const gp_tensor *g, int *pushed) {
  gp_chan_net *n = &c->net[m];
  size_t bytes = (size_t)n->rows * c->row_bytes;
  if (c->staged && (n->grad_req || n->grad_out))
    return GP_ERR(GP_ERR_RUNTIME, "internal: micro-batch %d's gradient is still in flight", m);
  GP_TRY(net_room(c, &n->grad, &n->grad_cap, bytes));
  if (c->staged && g->data) {
    GP_TRY(net_copy_out(c->dst, n->grad_ev, n->grad, g->data, bytes));
    n->grad_bytes = bytes;
    n->grad_out = 1;
    *pushed = 1;
    return GP_OK;
  }
  if (g->data)
    GP_TRY(c->dst->to_host(c->dst, n->grad, g->data, bytes));
  else
    memset(n->grad, 0, bytes);
  return gp_net_isend(c->dist, c->peer, tag_of(c, 1, m), n->grad, bytes, &n->grad_req);
}

gp_status gp_chan_send_grad(gp_chan *c, int m, const gp_tensor *g, gp_arena *own, int *pushed) {
  gp_chan_slot *sl = &c->slot[m];
  if (c->kind == GP_CHAN_NET)
    return gp_chan_wants_grad(c, m) ? net_send_grad(c, m, g, pushed) : GP_OK;
  if (c->kind == GP_CHAN_NCCL)
    return gp_chan_wants_grad(c, m) ? gp_chan_nccl_send_grad(c, m, g, own) : GP_OK;
  if (!sl->grad_to) return GP_OK;
  gp_backend *be = c->dst;
  size_t bytes = gp_tensor_bytes(&sl->val);
  if (c->kind == GP_CHAN_SHARED)
    return g->data ? be->copy(be, sl->grad_to, g->data, bytes) : be->zero(be, sl->grad_to, bytes);
  const void *src = g->data;
  if (!src) { /* no gradient reached it: send zeros */
    void *z;
    GP_TRY(gp_arena_alloc(own, bytes, &z));
    GP_TRY(be->zero(be, z, bytes));
    src = z;
  }
  /* the copy starts after the compute queue's work so far (the backward that made g) */
  GP_TRY(be->event_record(be, GP_Q_COMPUTE, sl->mark));
  GP_TRY(be->event_wait(be, GP_Q_OUT, sl->mark));
  GP_TRY(be->copy_peer(be, GP_Q_OUT, sl->grad_to, c->src->device, src, be->device, bytes));
  *pushed = 1;
  return GP_OK;
}

void gp_chan_post_grad(gp_chan *c, int m) {
  if (gp_chan_crosses(c)) return; /* the gradient's arrival tells the producer */
  if (c->slot[m].grad_to) gp_chan_deliver(&c->to_producer, &c->to_producer.count[m].grads);
}

gp_status gp_chan_grad(gp_chan *c, int m, float **out) {
  *out = c->slot[m].grad_to;
  if (!*out) return GP_OK;
  if (c->kind == GP_CHAN_NCCL) return gp_chan_nccl_grad(c, m, *out);
  if (c->kind == GP_CHAN_NET) {
    gp_chan_net *n = &c->net[m];
    if (!c->staged) return GP_OK;
    GP_TRY(net_copy_in(c->src, n->grad_ev, *out, n->grad, gp_tensor_bytes(&c->slot[m].val)));
    n->grad_in = 1;
    return c->src->event_wait(c->src, GP_Q_COMPUTE, n->grad_ev);
  }
  return c->src->event_wait(c->src, GP_Q_COMPUTE, c->dst_done[m]);
}

void gp_chan_release(gp_chan *c, int m) {
  if (gp_chan_crosses(c)) return; /* the value was a copy: nothing of the producer's held */
  gp_chan_deliver(&c->to_producer, &c->to_producer.count[m].released);
}

/* ---- between processes ---- */

gp_status gp_chan_net_begin(gp_chan *c, const int64_t *off, int training) {
  if (c->kind == GP_CHAN_NCCL) return gp_chan_nccl_begin(c, off, training);
  c->training = training;
  for (int m = 0; m < c->micro; m++) {
    gp_chan_net *n = &c->net[m];
    if (n->val_req || n->grad_req)
      return GP_ERR(GP_ERR_RUNTIME, "internal: a hand-off of the last command is in flight");
    c->slot[m].grad_to = NULL;
    n->rows = off[m + 1] - off[m];
    if (c->producer_end || n->rows == 0) continue;
    size_t bytes = (size_t)n->rows * c->row_bytes;
    /* a GPU reader: the last command's copy out of the buffer has long passed */
    if (n->val_in) GP_TRY(c->dst->event_sync(c->dst, n->val_ev));
    n->val_in = 0;
    GP_TRY(net_room(c, &n->val, &n->val_cap, bytes));
    GP_TRY(gp_net_irecv(c->dist, c->peer, tag_of(c, 0, m), n->val, bytes, &n->val_req));
  }
  return GP_OK;
}

gp_status gp_chan_net_poll(gp_chan *c, int *pending) {
  if (c->kind == GP_CHAN_NCCL) return gp_chan_nccl_poll(c, pending);
  for (int m = 0; m < c->micro; m++) {
    gp_chan_net *n = &c->net[m];
    int done;
    if (n->val_out) GP_TRY(net_out(c, m, 0, pending));
    if (n->grad_out) GP_TRY(net_out(c, m, 1, pending));
    if (n->val_req) {
      GP_TRY(gp_net_test(&n->val_req, &done));
      if (!done)
        ++*pending;
      else if (!c->producer_end)
        gp_chan_deliver(&c->to_reader, &c->to_reader.count[m].values);
    }
    if (n->grad_req) {
      GP_TRY(gp_net_test(&n->grad_req, &done));
      if (!done)
        ++*pending;
      else if (c->producer_end)
        gp_chan_deliver(&c->to_producer, &c->to_producer.count[m].grads);
    }
  }
  return GP_OK;
}

void gp_chan_net_drop(gp_chan *c) {
  for (int m = 0; c->net && m < c->micro; m++) {
    gp_net_drop(&c->net[m].val_req);
    gp_net_drop(&c->net[m].grad_req);
    /* copies still queued finish on the device (the buffers are freed after a sync) */
    c->net[m].val_out = c->net[m].grad_out = c->net[m].sent = c->net[m].arrived = 0;
  }
}
