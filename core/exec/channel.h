/* Channels: every tensor that crosses stages goes through one, an edge from the stage that makes
 * it (or the host batch, for a model input) to a stage that reads it: the value forward, its
 * gradient back, and the reader's word that it is done with a micro-batch. The receiver owns
 * the memory it receives into: a value is read where it lies only when the two stages share
 * memory, else copied into the reader's arena; a gradient is written by the channel into the
 * buffer the producer posted with the value (as MPI would receive into it), never through a
 * pointer the sender holds. The kind is chosen once per edge when the pipeline is made; stage
 * code calls the same functions whatever it is. */
#ifndef GP_CHANNEL_H
#define GP_CHANNEL_H

#include <pthread.h>
#include <stdatomic.h>

#include "core/arena.h"
#include "core/backend.h"

typedef enum gp_chan_kind {
  GP_CHAN_HOST,   /* a model input read where it lies in the host batch (a CPU stage) */
  GP_CHAN_STAGED, /* a model input staged in page-locked host memory, copied asynchronously */
  GP_CHAN_SHARED, /* stages sharing memory: the reader uses the producer's tensor in place */
  GP_CHAN_COPY,   /* a copy into the reader's memory (device peer copy, or through the host) */
  GP_CHAN_NET,    /* stages in different processes: value and gradient cross by MPI (only this
                     process's end of the edge is here); a GPU stage's end stages them in
                     page-locked host memory with copies on its IN and OUT queues */
  /* GPU stages in different processes: value and gradient cross by ncclSend / ncclRecv, device
   * to device (core/exec/chan_nccl.c). A kind of its own rather than a flag on GP_CHAN_NET: it
   * shares nothing of NET's host buffers and MPI requests, and the stage asks its kind where
   * the two differ (the host never waits for an NCCL transfer; the streams do) */
  GP_CHAN_NCCL,
  GP_CHAN_KINDS
} gp_chan_kind;

/* Which kinds the pipeline picks: the natural one per edge, or copies everywhere (tests: as if
 * every stage had its own device, so the copying kinds run on one machine too). */
typedef enum gp_chan_policy { GP_CHAN_AUTO, GP_CHAN_FORCE_COPY } gp_chan_policy;

/* What a stage counts per micro-batch, written by the channels that deliver to it (under the
 * stage's lock, release) and read by the stage with or without it (acquire). */
typedef struct gp_chan_count {
  _Atomic int values;   /* values arrived for the stage's inputs */
  _Atomic int grads;    /* gradients arrived for the stage's outputs */
  _Atomic int released; /* readers done with the stage's outputs */
} gp_chan_count;

/* Where a stage is woken: its lock, its condition and its counters (one per micro-batch). */
typedef struct gp_chan_inbox {
  pthread_mutex_t *mu;
  pthread_cond_t *cv;
  gp_chan_count *count;
} gp_chan_inbox;

/* Per micro-batch: what is in flight on the edge. */
typedef struct gp_chan_slot {
  gp_tensor val;  /* the producer's tensor (in its memory) */
  void *grad_to;  /* the producer's buffer for the gradient (NULL: none wanted) */
  void *zeros;    /* GP_CHAN_COPY: zeros sent for a gradient nothing reached (reader's arena) */
  gp_event *mark; /* GP_CHAN_COPY: the reader's compute mark its gradient copy waits for */
} gp_chan_slot;

/* GP_CHAN_NET, per micro-batch: the host buffers a value and its gradient cross in, and the
 * requests in flight (core/dist/dist.h). A GPU end's buffers are page-locked, and its copies
 * run on the copy queues: a send waits (val_out, grad_out) until its copy to the host passed
 * its event, and a buffer is written again only after the copy out of it passed (val_in,
 * grad_in). GP_CHAN_NCCL uses rows, sent (a value's send in flight: its release waits) and
 * arrived (a value to count as arrived at the next poll). */
struct gp_net_req;
typedef struct gp_chan_net {
  void *val, *grad;
  size_t val_cap, grad_cap;
  int64_t rows;
  struct gp_net_req *val_req, *grad_req;
  gp_event *val_ev, *grad_ev; /* a GPU end's: its copies' marks */
  size_t val_bytes, grad_bytes;
  int val_out, grad_out, val_in, grad_in;
  int sent, arrived;
} gp_chan_net;

struct gp_dist;
struct gp_nccl;

typedef struct gp_chan {
  gp_chan_kind kind;
  int t; /* tensor id */
  int micro;
  gp_backend *src, *dst;     /* producer's backend (NULL for a model input) and reader's */
  gp_event **src_done;       /* producer: per micro-batch, after the value was made */
  gp_event **dst_done;       /* reader: per micro-batch, after its gradients were written */
  gp_chan_inbox to_reader;   /* values arrive here */
  gp_chan_inbox to_producer; /* gradients and releases arrive here */
  gp_chan_slot *slot;        /* micro entries */
  /* model inputs: this command's rows in the host batch, and (GP_CHAN_STAGED) their
   * page-locked copy */
  const char *rows;
  size_t row_bytes;
  char *host;
  size_t cap;
  gp_event *host_free; /* after the last copy out of the staging */
  /* GP_CHAN_NET: this process's end (1: the producer's), the other end's position in the
   * replica, the edge's tag (2 x its index: values; + 1 gradients; times M plus the micro-batch),
   * the value's per-sample shape and dtype, whether this command sends gradients back, and micro
   * entries */
  struct gp_dist *dist;
  int producer_end, peer, tag, training;
  gp_shape row_shape;
  gp_dtype dtype;
  gp_chan_net *net;
  int staged; /* page-locked host buffers and queued copies: a GPU end (tests: a CPU end too) */
  /* GP_CHAN_NCCL (with net's rows and flags): a communicator of the two ends per direction, so
   * that values and gradients never queue behind each other on one stream (each end is driven
   * by its stage thread alone, as NCCL asks) */
  struct gp_nccl *nccl_val, *nccl_grad;
} gp_chan;

/* A node tensor's edge: from producer backend src to reader dst, each with its per-micro-batch
 * marks; kind GP_CHAN_SHARED or GP_CHAN_COPY. */
gp_status gp_chan_init(gp_chan *c, gp_chan_kind kind, int t, int micro, gp_backend *src,
                       gp_event **src_done, gp_chan_inbox to_producer, gp_backend *dst,
                       gp_event **dst_done, gp_chan_inbox to_reader);
/* A model input's edge to reader dst (kind GP_CHAN_HOST or GP_CHAN_STAGED), rows of row_bytes. */
gp_status gp_chan_init_input(gp_chan *c, gp_chan_kind kind, int t, int micro, size_t row_bytes,
                             gp_backend *dst);
/* A node tensor's edge between processes: this process holds the producer (producer_end: be,
 * its marks and inbox are the producer's) or the reader; the value is row_shape per sample.
 * staged: this end stages through page-locked host memory with copies queued on be's IN and
 * OUT queues (a GPU's end; the tests' GP_TEST_STAGED=1 runs that path on CPU ends too, whose
 * queued copies are plain ones), else MPI reads and writes host tensors where they lie. */
gp_status gp_chan_init_net(gp_chan *c, int t, int micro, struct gp_dist *dist, int producer_end,
                           int peer, int tag, gp_backend *be, gp_chan_inbox inbox,
                           const gp_shape *row_shape, gp_dtype dtype, int staged);
/* Makes a GP_CHAN_NET edge between two GPU stages a GP_CHAN_NCCL one: its communicators with the
 * other end (both ends call it on their main threads, every process in the edges' order). */
gp_status gp_chan_nccl_connect(gp_chan *c, int device);
/* The kind of an edge between stages of different processes, from its ends' devices ("cpu",
 * "cuda:N"): GP_CHAN_NCCL when both are CUDA, `nccl` (built in, not turned off by GP_NCCL=0,
 * agreed by every process) and `same_order` (the two stages run their micro-batches' forwards
 * and backwards in the same order: NCCL matches a pair's transfers in the order they are
 * queued); else GP_CHAN_NET. */
gp_chan_kind gp_chan_cross_kind(const char *src_dev, const char *dst_dev, int nccl, int same_order);
/* Whether stages a and b of schedule sc run their micro-batches' forwards, and their backwards,
 * in the same order (gp_chan_cross_kind's same_order). */
struct gp_schedule;
int gp_chan_same_order(const struct gp_schedule *sc, int a, int b);
/* Whether the edge crosses processes (GP_CHAN_NET or GP_CHAN_NCCL). */
int gp_chan_crosses(const gp_chan *c);
void gp_chan_free(gp_chan *c);
const char *gp_chan_kind_name(gp_chan_kind k);

/* ---- model inputs ---- */
/* At the start of a command: the batch's rows of this input (n rows at host), staged when the
 * kind stages (after the last command's copies out of the staging have passed). */
gp_status gp_chan_input_begin(gp_chan *c, const void *host, int64_t n);
/* Rows [at, at + n) of the batch as a tensor of the reader's (shape sh, dtype dt): in place,
 * or queued as a copy on the reader's compute queue into its arena. *queued: a copy was. */
gp_status gp_chan_input_get(gp_chan *c, int64_t at, int64_t n, const gp_shape *sh, gp_dtype dt,
                            gp_arena *own, gp_tensor *out, int *queued);
/* After the reader queued its copies of this command: marks the staging busy until they pass. */
gp_status gp_chan_input_end(gp_chan *c);

/* ---- node tensors ---- */
/* Producer: posts micro-batch m's value, with its own buffer for the gradient (NULL: none).
 * The producer's src_done[m] must be recorded before. */
gp_status gp_chan_send(gp_chan *c, int m, const gp_tensor *v, void *grad_to);
/* Reader, once the value arrived: the tensor in the reader's memory (in place where shared;
 * else a copy queued on the reader's IN queue into `own`, *pulled set: the reader then orders
 * its compute queue after IN). */
gp_status gp_chan_recv(gp_chan *c, int m, gp_arena *own, gp_tensor *out, int *pulled);
/* Reader: writes the gradient g of micro-batch m (g->data NULL: zeros) into the producer's
 * buffer, on the compute queue where shared, else by a copy on queue OUT after the compute
 * queue's work so far (*pushed set: the reader then orders its compute queue after OUT and
 * records dst_done[m]). `own` holds the zeros a copy needs. No-op when no gradient is wanted. */
gp_status gp_chan_send_grad(gp_chan *c, int m, const gp_tensor *g, gp_arena *own, int *pushed);
int gp_chan_wants_grad(const gp_chan *c, int m);
/* Reader, after dst_done[m] is recorded: tells the producer its gradient is there. */
void gp_chan_post_grad(gp_chan *c, int m);
/* Producer, once the gradient arrived: orders its compute queue after the reader's writes and
 * returns the buffer (NULL where none was wanted). */
gp_status gp_chan_grad(gp_chan *c, int m, float **out);
/* Reader: done with micro-batch m's value (it may be reused once every reader said so). */
void gp_chan_release(gp_chan *c, int m);

/* ---- between processes (GP_CHAN_NET, GP_CHAN_NCCL) ---- */
/* At a command's start, by this process's end: the reader posts the receives of every
 * micro-batch (rows[m] rows; none where 0), so the producer's sends complete as they are made;
 * `training`: gradients go back. */
gp_status gp_chan_net_begin(gp_chan *c, const int64_t *off, int training);
/* Completes what arrived: values (reader) and gradients (producer) counted into this end's
 * inbox; sends whose copy to the host passed start. *pending: requests still in flight (sends
 * and their copies included). */
gp_status gp_chan_net_poll(gp_chan *c, int *pending);
/* A failed command: drops every request in flight. */
void gp_chan_net_drop(gp_chan *c);

#endif
