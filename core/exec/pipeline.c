/* The pipeline executor: setup, the stage threads, the main thread's side (commands, failure,
 * the watchdog and wedged stages). A stage's actions are in stage.c, tracing and
 * statistics in trace.c. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cuda/cuda.h"
#include "core/dist/dist.h"
#include "core/dist/nccl.h"
#include "core/env.h"
#include "core/exec/graphs.h"
#include "core/exec/bfstore.h"
#include "core/exec/internal.h"

/* Wakes every waiter: the main thread, the barrier and each stage waiting for its inputs.
 * Holds pl->mu. */
static void wake_all(gp_pipeline *pl) {
  pthread_cond_broadcast(&pl->cv);
  for (int i = 0; pl->st && i < pl->k; i++)
    pthread_cond_broadcast(&pl->st[i].arrived);
}

/* Records the first failure (with where it happened) and wakes everyone. Holds no lock. */
gp_status gp_pl_fail(gp_pipeline *pl, gp_status s, int stage_i, int micro) {
  pthread_mutex_lock(&pl->mu);
  if (!pl->failed) {
    pl->failed = 1;
    pl->fail_status = s;
    if (micro >= 0)
      snprintf(pl->fail_msg, sizeof pl->fail_msg, "stage %d, micro-batch %d: %s", stage_i, micro,
               gp_error_message());
    else
      snprintf(pl->fail_msg, sizeof pl->fail_msg, "stage %d: %s", stage_i, gp_error_message());
  }
  wake_all(pl);
  pthread_mutex_unlock(&pl->mu);
  return s;
}

/* ---- setup ---- */

static int producer_of(const gp_pipeline *pl, int t) {
  int n = t - pl->m->n_inputs;
  if (n < 0) return -1;
  for (int s = 0; s < pl->k; s++)
    if (n >= pl->st[s].first && n < pl->st[s].end) return s;
  return -1;
}

static gp_status find_boundaries(gp_pipeline *pl) {
  const gp_model *m = pl->m;
  for (int s = 0; s < pl->k; s++) {
    stage *st = &pl->st[s];
    st->in = calloc((size_t)(m->n_inputs + m->n_nodes), sizeof *st->in);
    if (!st->in) return GP_ERR(GP_ERR_NOMEM, "out of memory planning the pipeline");
    for (int i = st->first; i < st->end; i++)
      for (int j = 0; j < m->nodes[i].n_in; j++) {
        int t = m->nodes[i].in[j], node = t - m->n_inputs, dup = 0;
        if (node >= st->first && node < st->end) continue;
        for (int q = 0; q < st->n_in; q++)
          dup |= st->in[q].t == t;
        if (dup) continue;
        st->in[st->n_in].t = t;
        st->in[st->n_in].producer = producer_of(pl, t);
        if (st->in[st->n_in].producer >= 0) st->n_wait_in++;
        st->n_in++;
      }
  }
  for (int s = 0; s < pl->k; s++) {
    stage *st = &pl->st[s];
    st->out = calloc((size_t)(pl->k * (st->end - st->first) + 1), sizeof *st->out);
    st->grad_to = calloc((size_t)(pl->k * (st->end - st->first) + 1), sizeof *st->grad_to);
    if (!st->out || !st->grad_to)
      return GP_ERR(GP_ERR_NOMEM, "out of memory planning the pipeline");
    for (int c = s + 1; c < pl->k; c++)
      for (int q = 0; q < pl->st[c].n_in; q++)
        if (pl->st[c].in[q].producer == s) {
          ext_out *o = &st->out[st->n_out++];
          o->t = pl->st[c].in[q].t;
          o->consumer = c;
          /* every f32 output gets a gradient back, zeros where nothing trains */
          if (m->nodes[o->t - m->n_inputs].layer.out_dtype == GP_F32) st->n_grads_expected++;
        }
  }
  return GP_OK;
}

static gp_chan_inbox inbox_of(gp_pipeline *pl, stage *st) {
  return (gp_chan_inbox){&pl->mu, &st->arrived, st->box};
}

static int is_cuda(const gp_pipeline *pl, int s) {
  return strncmp(pl->plan.st[s].device, "cuda", 4) == 0;
}

/* Whether GPU stages of different processes use NCCL (pl->nccl): built in, and GP_NCCL not 0 in
 * any process, every process deciding alike (or an edge's two ends would disagree). Asked of
 * the processes only where a GPU stage's edge crosses processes or its gradients cross
 * replicas (the plan, hence the answer, is the same everywhere). */
static gp_status nccl_agree(gp_pipeline *pl) {
  pl->nccl = 0;
  if (!pl->dist) return GP_OK;
  int any = 0;
  for (int s = 0; s < pl->k; s++) {
    if (!is_cuda(pl, s)) continue;
    any |= pl->lay.replicas > 1;
    for (int q = 0; q < pl->st[s].n_in; q++) {
      int p = pl->st[s].in[q].producer;
      any |=
          p >= 0 && is_cuda(pl, p) && gp_layout_owner(&pl->lay, p) != gp_layout_owner(&pl->lay, s);
    }
  }
  if (!any) return GP_OK;
  return gp_dist_all(pl->dist, gp_nccl_built() && gp_env_get(GP_ENV_NCCL, 1), &pl->nccl);
}

/* One channel per edge, of the kind the two ends' memory asks for (or copies, when the
 * policy forces them), once the stages' backends exist. An edge between this process and
 * another is a GP_CHAN_NET of this process's end, or a GP_CHAN_NCCL one between GPU stages
 * (gp_chan_cross_kind; its communicators are made here, edge after edge, by both ends); one with
 * no end here stays unused (every process numbers the edges alike: an edge's index is its
 * tag). */
static gp_status make_channels(gp_pipeline *pl) {
  int n = 0;
  for (int s = 0; s < pl->k; s++)
    n += pl->st[s].n_in;
  if (!(pl->chan = calloc((size_t)n + 1, sizeof *pl->chan)))
    return GP_ERR(GP_ERR_NOMEM, "out of memory for the channels");
  const int copy = pl->chan_policy == GP_CHAN_FORCE_COPY;
  for (int s = 0; s < pl->k; s++) {
    stage *st = &pl->st[s];
    const int here = gp_layout_local(&pl->lay, s);
    for (int q = 0; q < st->n_in; q++) {
      ext_in *ei = &st->in[q];
      gp_chan *c = &pl->chan[pl->n_chan];
      const int edge = pl->n_chan;
      ei->ch = c;
      pl->n_chan++;
      if (ei->producer < 0) {
        if (!here) continue;
        const gp_model_input *mi = &pl->m->inputs[ei->t];
        size_t row = (size_t)gp_shape_numel(&mi->shape) * gp_dtype_size(mi->dtype);
        gp_chan_kind kind = st->be->device >= 0 || copy ? GP_CHAN_STAGED : GP_CHAN_HOST;
        GP_TRY(gp_chan_init_input(c, kind, ei->t, pl->micro, row, st->be));
        continue;
      }
      stage *ps = &pl->st[ei->producer];
      const int there = gp_layout_local(&pl->lay, ei->producer);
      for (int o = 0; o < ps->n_out; o++)
        if (ps->out[o].t == ei->t && ps->out[o].consumer == s) ps->out[o].ch = c;
      if (here && there) {
        gp_chan_kind kind = ps->place == st->place ? GP_CHAN_SHARED : GP_CHAN_COPY;
        GP_TRY(gp_chan_init(c, kind, ei->t, pl->micro, ps->be, ps->ev_fwd, inbox_of(pl, ps), st->be,
                            st->ev_grads, inbox_of(pl, st)));
      } else if (here || there) {
        const gp_layer *l = &pl->m->nodes[ei->t - pl->m->n_inputs].layer;
        stage *mine = there ? ps : st;
        int peer = gp_layout_owner(&pl->lay, there ? s : ei->producer);
        GP_TRY(gp_chan_init_net(c, ei->t, pl->micro, pl->dist, there, peer, 2 * edge, mine->be,
                                inbox_of(pl, mine), &l->out_shape, l->out_dtype,
                                mine->be->device >= 0 || pl->test_staged));
        mine->n_net++;
        if (gp_chan_cross_kind(pl->plan.st[ei->producer].device, pl->plan.st[s].device, pl->nccl,
                               gp_chan_same_order(&pl->sched, ei->producer, s)) == GP_CHAN_NCCL)
          GP_TRY(gp_chan_nccl_connect(c, mine->be->device));
      }
    }
  }
  return GP_OK;
}

/* The stage's backend on its plan device ("cpu" or "cuda:N"), with the pipeline's precision
 * and memory cap, and where its memory is: stages on one device share it, unless the tests
 * ask for copies everywhere. */
static gp_status stage_backend(gp_pipeline *pl, stage *st) {
  const char *dev = pl->plan.st[st->index].device;
  gp_status s;
  if (strncmp(dev, "cuda:", 5) == 0)
    s = gp_cuda_backend_create(atoi(dev + 5), &st->be);
  else
    s = gp_cpu_backend_create(pl->threads_per_stage, &st->be);
  GP_TRY(s);
  if (pl->test_backend) pl->test_backend(st->be);
  st->be->precision = pl->precision;
  st->be->nondeterministic = pl->nondeterministic;
  st->be->mem_limit = pl->mem_limit;
  st->place = pl->chan_policy == GP_CHAN_FORCE_COPY ? st->index : st->be->device;
  return GP_OK;
}

static gp_status events_make(gp_backend *be, int n, gp_event ***out) {
  if (!(*out = calloc((size_t)n, sizeof **out)))
    return GP_ERR(GP_ERR_NOMEM, "out of memory for events");
  for (int i = 0; i < n; i++)
    GP_TRY(be->event_create(be, &(*out)[i]));
  return GP_OK;
}

static void events_free(gp_backend *be, int n, gp_event **ev) {
  for (int i = 0; ev && i < n; i++)
    be->event_destroy(be, ev[i]);
  free(ev);
}

static gp_status stage_init(gp_pipeline *pl, stage *st) {
  int M = pl->micro;
  if (!gp_layout_local(&pl->lay, st->index)) { /* held by another process: its range alone */
    st->params.first_node = st->first;
    st->params.end_node = st->end;
    return GP_OK;
  }
  GP_TRY(stage_backend(pl, st));
  GP_TRY(events_make(st->be, M, &st->ev_fwd));
  GP_TRY(events_make(st->be, M, &st->ev_grads));
  GP_TRY(events_make(st->be, M, &st->ev_pull));
  GP_TRY(events_make(st->be, M, &st->ev_push));
  GP_TRY(gp_params_init(&st->params, pl->m, st->first, st->end, st->be, pl->seed));
  GP_TRY(gp_optimizer_init(&st->opt, &pl->m->train, &st->params));
  st->have_opt = 1;
  st->slot_arena = calloc((size_t)M, sizeof *st->slot_arena);
  st->pass = calloc((size_t)M, sizeof *st->pass);
  st->box = calloc((size_t)M, sizeof *st->box);
  const size_t acts = (size_t)pl->sched.n_actions[st->index];
  st->ar.last_b = -1;
  for (int a = 0; a < (int)acts; a++)
    st->split |= pl->sched.actions[st->index][a].kind == GP_A_WEIGHT;
  for (int a = 0; a < (int)acts; a++)
    if (pl->sched.actions[st->index][a].kind == (st->split ? GP_A_WEIGHT : GP_A_BACKWARD))
      st->ar.last_b = a;
  st->rec.act_s = calloc(acts, sizeof *st->rec.act_s);
  st->rec.rec_s = calloc(acts, sizeof *st->rec.rec_s);
  st->ahead_s = calloc(acts, sizeof *st->ahead_s);
  if (!st->slot_arena || !st->pass || !st->box || !st->rec.act_s || !st->rec.rec_s || !st->ahead_s)
    return GP_ERR(GP_ERR_NOMEM, "out of memory for stage %d", st->index);
  /* a device stage's actions are timed on its queue: at most three spans an action (a
   * backward's recompute, itself, its hand-off), two timers a span, and the reference */
  if (((st->be->device >= 0 && pl->device_timing == 0) || pl->device_timing > 0) &&
      st->be->timer_create && st->be->event_elapsed) {
    st->rec.cap_span = 3 * (int)acts;
    st->rec.span = calloc((size_t)st->rec.cap_span, sizeof *st->rec.span);
    st->rec.tm = calloc(2 * (size_t)st->rec.cap_span + 1, sizeof *st->rec.tm);
    if (!st->rec.span || !st->rec.tm)
      return GP_ERR(GP_ERR_NOMEM, "out of memory for stage %d", st->index);
    for (int i = 0; i <= 2 * st->rec.cap_span; i++)
      GP_TRY(st->be->timer_create(st->be, &st->rec.tm[i]));
  }
  gp_arena_init(&st->scratch, st->be, 0);
  st->scratch.meter = &st->meter;
  for (int m = 0; m < M; m++) {
    gp_arena_init(&st->slot_arena[m], st->be, 0);
    st->slot_arena[m].meter = &st->meter;
    GP_TRY(gp_pass_init(&st->pass[m], pl->m, st->first, st->end, 0));
  }
  GP_TRY(gp_graphs_init(pl->m, st->first, st->end, st->be, &st->graphs));
  for (int m = 0; m < M; m++)
    st->pass[m].graphs = st->graphs;
  if (st->remat_sel > 0) {
    if (!(st->remat = calloc((size_t)pl->m->n_nodes, 1)))
      return GP_ERR(GP_ERR_NOMEM, "out of memory for stage %d", st->index);
    gp_stage_remat_set(pl->m, st->pass[0].reader, st->first, st->end, st->remat, NULL);
  }
  return gp_bfstore_stage_init(st, M); /* what the slots keep for backward, in 16 bits */
}

/* Pins stage s to its share of the CPUs this process may use (the n-th allowed CPU, not CPU
 * id n: a container's cpuset need not start at 0). */
static void pin_thread(gp_pipeline *pl, int s) {
  if (!pl->pin || pl->cores < 1) return;
  cpu_set_t allowed, set;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
  int ids[CPU_SETSIZE], n = 0;
  for (int c = 0; c < CPU_SETSIZE && n < pl->cores; c++)
    if (CPU_ISSET(c, &allowed)) ids[n++] = c;
  if (n == 0) return;
  CPU_ZERO(&set);
  /* a device's chunks (interleaved) run on its cores, one at a time */
  int per = n / pl->devices;
  s %= pl->devices;
  if (per < 1)
    CPU_SET(ids[s % n], &set);
  else
    for (int c = 0; c < per; c++)
      CPU_SET(ids[s * per + c], &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static void *worker(void *arg) {
  stage *st = arg;
  gp_pipeline *pl = st->pl;
  pin_thread(pl, st->index);
  uint64_t seen = 0;
  for (;;) {
    pthread_mutex_lock(&pl->mu);
    while (pl->generation == seen)
      pthread_cond_wait(&pl->cv, &pl->mu);
    seen = pl->generation;
    cmd_kind cmd = pl->cmd;
    pthread_mutex_unlock(&pl->mu);
    if (cmd == CMD_EXIT) break;
    gp_status s = gp_pl_run_command(st, cmd);
    if (s != GP_OK) gp_pl_fail(pl, s, st->index, -1);
    pthread_mutex_lock(&pl->mu);
    pl->done++;
    st->finished = seen;
    pthread_cond_broadcast(&pl->cv);
    pthread_mutex_unlock(&pl->mu);
  }
  return NULL;
}

/* ---- the main thread's side ---- */

/* Called by the main thread, holding pl->mu, when a stage has not stopped stop_s after a
 * failure: it is inside a computation that does not return (OpenBLAS retries a failed
 * allocation forever under a small `ulimit -v`; the stage waiting on it failed with the
 * watchdog, and nothing else would ever report). The failure is reported, naming that stage. */
static void wedge(gp_pipeline *pl) {
  int s = pl->first_local;
  for (int i = pl->k - 1; i >= 0; i--) /* the first local stage that did not finish */
    if (gp_layout_local(&pl->lay, i) && pl->st[i].finished != pl->generation) s = i;
  pl->wedged = 1;
  size_t len = strlen(pl->fail_msg);
  snprintf(pl->fail_msg + len, sizeof pl->fail_msg - len,
           " (stage %d did not stop within %.3g s: stuck in a computation)", s, pl->stop_s);
}

/* Whether a stage that did not stop is still running (it may finish later). Holds pl->mu. */
static int still_wedged(gp_pipeline *pl) {
  if (pl->wedged && pl->done >= pl->n_local) pl->wedged = 0;
  return pl->wedged;
}

static gp_status issue(gp_pipeline *pl, cmd_kind cmd) {
  pthread_mutex_lock(&pl->mu);
  if (still_wedged(pl)) {
    pthread_mutex_unlock(&pl->mu);
    return GP_ERR(GP_ERR_RUNTIME, "the pipeline is stopped: %s", pl->fail_msg);
  }
  /* the next step's forwards stage 0 ran early (run_ahead) sit in the later stages' mailboxes
   * above this step's, which every one of them received */
  const int ahead = cmd == CMD_TRAIN ? pl->ahead : 0;
  atomic_store_explicit(&pl->tail_done, 0, memory_order_relaxed);
  for (int s = 0; s < pl->k; s++)
    for (int m = 0; gp_layout_local(&pl->lay, s) && m < pl->micro; m++) {
      if (s > 0 && m < ahead)
        atomic_fetch_sub_explicit(&pl->st[s].box[m].values, pl->st[s].n_wait_in,
                                  memory_order_relaxed);
      else
        atomic_store_explicit(&pl->st[s].box[m].values, 0, memory_order_relaxed);
      atomic_store_explicit(&pl->st[s].box[m].grads, 0, memory_order_relaxed);
      atomic_store_explicit(&pl->st[s].box[m].released, 0, memory_order_relaxed);
    }
  if (cmd == CMD_TRAIN) gp_pl_turns_reset(pl);
  pl->cmd = cmd;
  pl->done = 0;
  pl->failed = 0;
  gp_coll_reset(&pl->coll);
  pl->generation++;
  pthread_cond_broadcast(&pl->cv);
  while (pl->done < pl->n_local && !pl->failed)
    pthread_cond_wait(&pl->cv, &pl->mu);
  if (pl->done < pl->n_local) { /* a failure: the others stop at their next wait, or never */
    struct timespec dl;
    gp_deadline_in(pl->stop_s, &dl);
    while (pl->done < pl->n_local && pthread_cond_timedwait(&pl->cv, &pl->mu, &dl) != ETIMEDOUT)
      ;
    if (pl->done < pl->n_local) wedge(pl);
  }
  int failed = pl->failed;
  pthread_mutex_unlock(&pl->mu);
  if (failed) return GP_ERR(pl->fail_status, "%s", pl->fail_msg);
  return GP_OK;
}

/* GP_OK unless a stage that did not stop still runs: then nothing it reads may change. */
static gp_status usable(gp_pipeline *pl) {
  pthread_mutex_lock(&pl->mu);
  gp_status s = still_wedged(pl)
                    ? GP_ERR(GP_ERR_RUNTIME, "the pipeline is stopped: %s", pl->fail_msg)
                    : GP_OK;
  pthread_mutex_unlock(&pl->mu);
  return s;
}

static gp_status split(gp_pipeline *pl, int64_t batch, int training) {
  GP_TRY(usable(pl));
  int M = pl->micro;
  if (training && batch < M)
    return GP_ERR(GP_ERR_USAGE, "a batch of %lld cannot be split into %d micro-batches",
                  (long long)batch, M);
  /* uneven when M does not divide the batch: the first batch % M micro-batches get one more */
  for (int m = 0; m <= M; m++)
    pl->off[m] = (batch / M) * m + (m < batch % M ? m : batch % M);
  return GP_OK;
}

int64_t gp_batch_targets(const gp_model *m, const gp_batch *b) {
  /* f32 targets (mse, l1, bce_with_logits): the loss is averaged over the samples' elements */
  if (m->label_input < 0 || !b->in[m->label_input] || m->inputs[m->label_input].dtype != GP_I32)
    return b->n;
  const int32_t *y = b->in[m->label_input];
  int64_t n = b->n * gp_shape_numel(&m->inputs[m->label_input].shape), c = 0;
  for (int64_t i = 0; i < n; i++)
    c += y[i] >= 0;
  return c;
}

void gp_batch_share(int64_t n, int r, int R, int64_t *lo, int64_t *hi) {
  *lo = (n / R) * r + (r < n % R ? r : n % R);
  *hi = *lo + n / R + (r < n % R);
}

/* This replica's contiguous share of the global batch b (every process has that much of it):
 * the rows [*base, *base + n) of each input. */
static gp_batch replica_share(const gp_pipeline *pl, const gp_batch *b, int64_t *base) {
  const int R = pl->lay.replicas, r = pl->lay.replica;
  *base = 0;
  if (R == 1) return *b;
  int64_t lo, hi;
  gp_batch_share(b->n, r, R, &lo, &hi);
  gp_batch out = *b;
  out.n = hi - lo;
  for (int i = 0; i < pl->m->n_inputs; i++) {
    const gp_model_input *mi = &pl->m->inputs[i];
    size_t per = (size_t)gp_shape_numel(&mi->shape) * gp_dtype_size(mi->dtype);
    if (b->in[i]) out.in[i] = (const char *)b->in[i] + (size_t)lo * per;
  }
  if (b->target) out.target = b->target + lo * b->target_numel;
  *base = lo;
  return out;
}

gp_status gp_pipeline_train_step(gp_pipeline *pl, const gp_batch *b, int64_t step, double lr,
                                 gp_step_result *out) {
  return gp_pipeline_train_step_ahead(pl, b, NULL, step, lr, out);
}

gp_status gp_pipeline_train_step_ahead(gp_pipeline *pl, const gp_batch *b, const gp_batch *next,
                                       int64_t step, double lr, gp_step_result *out) {
  GP_TRY(gp_pl_announce(pl, b, next, step));
  int64_t base;
  gp_batch mine = replica_share(pl, b, &base);
  if (pl->lay.replicas > 1 && mine.n < pl->micro)
    return GP_ERR(GP_ERR_USAGE,
                  "a batch of %lld over %d replicas leaves %lld samples a replica, "
                  "fewer than its %d micro-batches",
                  (long long)b->n, pl->lay.replicas, (long long)mine.n, pl->micro);
  GP_TRY(split(pl, mine.n, 1)); /* (a stage still running a failed command: nothing written) */
  pl->base = base;
  pl->in = mine;
  pl->batch = mine.n;
  /* no target at all: a zero loss and zero gradients, not a division by zero; the loss is the
   * mean over the global batch's targets, whichever replica holds them */
  pl->targets = gp_batch_targets(pl->m, b);
  if (pl->targets == 0) pl->targets = 1;
  pl->step = step;
  pl->lr = lr;
  double before[GP_MAX_DEVICES];
  for (int s = 0; s < pl->k; s++)
    before[s] = gp_pl_stage_busy(&pl->st[s]);
  double t0 = now_s();
  gp_status rc = issue(pl, CMD_TRAIN);
  if (rc != GP_OK) { /* what ran early is lost with the step */
    pl->ahead = 0;
    pl->nx.on = 0;
    return rc;
  }
  pl->span_s += now_s() - t0;
  double pace = 0, dev[GP_MAX_DEVICES] = {0}; /* the device that set the step's pace: the
                                                 busiest in it (its chunks' times together) */
  for (int s = 0; s < pl->k; s++)
    dev[s % pl->devices] += gp_pl_stage_busy(&pl->st[s]) - before[s];
  for (int d = 0; d < pl->devices; d++)
    pace = fmax(pace, dev[d]);
  pl->pace_busy_s += pace;
  *out = pl->results.step;
  if (pl->n_local == pl->k && pl->chunks > 1)
    gp_pl_replay_chunks(pl);
  else if (pl->n_local == pl->k)
    gp_pl_replay(pl);
  else
    pl->replay_lost = 1; /* the other processes' actions are not timed here */
  return GP_OK;
}

gp_status gp_pipeline_eval(gp_pipeline *pl, const gp_batch *b, gp_step_result *out) {
  if (pl->ahead)
    return GP_ERR(GP_ERR_USAGE, "internal: an evaluation between a step and the next one it "
                                "announced (whose forwards ran)");
  int64_t base;
  gp_batch mine = replica_share(pl, b, &base);
  GP_TRY(split(pl, mine.n, 0));
  pl->base = base;
  pl->in = mine;
  pl->batch = mine.n;
  GP_TRY(issue(pl, CMD_EVAL));
  const gp_step_result *r = &pl->results.step;
  out->loss_sum += r->loss_sum;
  out->correct += r->correct;
  out->counted += r->counted;
  return GP_OK;
}

gp_status gp_pipeline_predict(gp_pipeline *pl, const gp_batch *b, gp_prediction *pred,
                              gp_step_result *out) {
  GP_TRY(usable(pl));
  const gp_model *m = pl->m;
  const gp_layer *ol = &m->nodes[m->output_node].layer;
  /* across processes: each replica's last stage fills its rows, the rest stay -1 and the
   * maximum over the processes gathers them (token ids are >= 0) */
  const int64_t per = gp_shape_numel(&ol->out_shape) / ol->out_shape.d[ol->out_shape.ndim - 1];
  if (pl->dist && pred->argmax)
    for (int64_t i = 0; i < b->n * per; i++)
      pred->argmax[i] = -1;
  pl->pred = pred;
  gp_status s = gp_pipeline_eval(pl, b, out);
  pl->pred = NULL;
  if (s == GP_OK && pl->dist && pred->argmax)
    s = gp_dist_max_i32(pl->dist, pred->argmax, b->n * per);
  if (s == GP_OK) {
    pred->nll_sum = pl->results.nll_sum;
    pred->nll_count = pl->results.nll_count;
  }
  return s;
}

gp_status gp_pipeline_create(const gp_model *m, const gp_plan *plan, uint64_t seed,
                             const gp_pipeline_opts *o, gp_pipeline **out) {
  *out = NULL;
  if (plan->micro > GP_MAX_MICRO_BATCHES)
    return GP_ERR(GP_ERR_USAGE, "at most %d micro-batches", GP_MAX_MICRO_BATCHES);
  gp_pipeline *pl = calloc(1, sizeof *pl);
  if (!pl) return GP_ERR(GP_ERR_NOMEM, "out of memory for the pipeline");
  pl->m = m;
  pl->plan = *plan;
  pl->k = plan->stages;
  pl->dist = o && o->dist && o->dist->world > 1 ? o->dist : NULL;
  if (pl->dist)
    pl->lay = pl->dist->lay;
  else
    gp_layout_single(pl->k, &pl->lay);
  if (pl->lay.stages != pl->k) {
    int ls = pl->lay.stages;
    free(pl);
    return GP_ERR(GP_ERR_USAGE, "internal: a layout of %d stages for a plan of %d", ls,
                  plan->stages);
  }
  const char *tv = getenv("GP_TEST_NO_ALLREDUCE"), *tn = getenv("GP_TEST_NAN_STAGE");
  const char *ts = getenv("GP_TEST_STAGED");
  pl->test_no_allreduce = tv && strcmp(tv, "1") == 0;
  pl->test_staged = ts && strcmp(ts, "1") == 0;
  const char *ta = getenv("GP_TEST_AHEAD_ALL");
  pl->test_ahead_all = ta && strcmp(ta, "1") == 0;
  pl->test_nan_stage = tn && *tn ? atoi(tn) : -1;
  /* a contiguous run of stages, or (interleaved) its devices' chunks, a strided set */
  pl->n_local = gp_layout_held(&pl->lay, pl->lay.pos);
  pl->first_local = pl->k;
  for (int i = pl->k - 1; i >= 0; i--)
    if (gp_layout_local(&pl->lay, i)) pl->first_local = i;
  pl->micro = plan->micro;
  pl->seed = seed;
  pl->watchdog_s = o && o->watchdog_s > 0 ? o->watchdog_s : 300;
  pl->stop_s = o && o->stop_s > 0 ? o->stop_s : 10;
  pl->pin = o ? o->pin : 0;
  pl->trace = o ? o->trace : 0;
  pl->chan_policy = o ? o->channels : GP_CHAN_AUTO;
  /* device timing: always on GPU stages (GP_DEVICE_TIMING=0 turns it off there, to compare:
   * host launch times, no wait at the step's end); on CPU stages when the tests ask */
  pl->device_timing = o && o->device_timing ? 1 : gp_env_get(GP_ENV_DEVICE_TIMING, 1) ? 0 : -1;
  pl->test_backend = o ? o->test_backend : NULL;
  pl->precision = o ? o->precision : GP_PREC_FP32;
  pl->nondeterministic = o ? o->nondeterministic : 0;
  pl->mem_limit = o ? o->mem_limit : 0;
  pl->cores = o && o->cores > 0 ? o->cores : gp_cpu_cores();
  pl->chunks = gp_plan_chunks(plan);
  pl->devices = pl->k / pl->chunks;
  /* a device's chunks run one at a time, each on all of the device's cores */
  const int busy_local = pl->n_local / pl->chunks > 0 ? pl->n_local / pl->chunks : 1;
  pl->threads_per_stage = pl->cores / busy_local > 1 ? pl->cores / busy_local : 1;
  /* spinning is free only where no other stage needs the core; GP_PIPELINE_SPIN=0 turns it
   * off (to compare) */
  pl->spin = pl->cores >= busy_local && gp_env_get(GP_ENV_PIPELINE_SPIN, 1);
  pthread_mutex_init(&pl->mu, NULL);
  pthread_cond_init(&pl->cv, NULL);
  gp_status s = GP_OK;
  if ((pl->chunks > 1) != (plan->schedule == GP_SCHED_INTERLEAVED))
    s = GP_ERR(GP_ERR_USAGE, "the interleaved schedule and virtual stages (%d) go together",
               pl->chunks);
  /* a device's chunks are run by one thread: across processes, all on one (gp_layout_interleave) */
  if (s == GP_OK && pl->dist && (pl->lay.chunks > 1 ? pl->lay.chunks : 1) != pl->chunks)
    s = GP_ERR(GP_ERR_USAGE, "internal: a layout of %d chunks a device for a plan of %d",
               pl->lay.chunks > 1 ? pl->lay.chunks : 1, pl->chunks);
  if (s == GP_OK && pl->chunks > 1 && plan->remat != GP_REMAT_NEVER)
    s = GP_ERR(GP_ERR_USAGE, "the interleaved schedule re-materializes nothing yet: use remat "
                             "never (--remat never)");
  if (s == GP_OK && !(pl->st = calloc((size_t)pl->k, sizeof *pl->st)))
    s = GP_ERR(GP_ERR_NOMEM, "out of memory for the pipeline");
  if (s == GP_OK && pl->chunks > 1) {
    s = gp_pl_chunks_init(pl);
  } else if (s == GP_OK) {
    s = plan->remat == GP_REMAT_AUTO
            ? gp_schedule_build_drops(plan->schedule, pl->k, pl->micro, plan->remat_drop,
                                      &pl->sched)
            : gp_schedule_build(plan->schedule, plan->remat, pl->k, pl->micro, &pl->sched);
    if (s == GP_OK) s = gp_schedule_validate(&pl->sched);
  }
  for (int i = 0; s == GP_OK && i < pl->k; i++) {
    pl->st[i].pl = pl;
    pl->st[i].index = i;
    pl->st[i].first = plan->st[i].first_node;
    pl->st[i].end = plan->st[i].end_node;
    if (plan->remat == GP_REMAT_AUTO) {
      pl->st[i].remat_drop = plan->remat_drop[i];
      pl->st[i].remat_sel = plan->remat_sel[i];
    }
    pthread_cond_init(&pl->st[i].arrived, NULL);
  }
  if (s == GP_OK) s = find_boundaries(pl);
  for (int i = 0; s == GP_OK && i < pl->k; i++)
    if ((s = stage_init(pl, &pl->st[i])) != GP_OK)
      s = gp_error_prefix(s, "stage %d (%s): ", i, plan->st[i].device);
  if (s == GP_OK) s = nccl_agree(pl);
  if (s == GP_OK) s = make_channels(pl);
  if (s == GP_OK) s = gp_pl_ar_init(pl);
  if (s == GP_OK) {
    gp_params *ps[GP_MAX_DEVICES];
    gp_backend *bes[GP_MAX_DEVICES];
    int places[GP_MAX_DEVICES];
    for (int i = 0; i < pl->k; i++) {
      ps[i] = &pl->st[i].params;
      bes[i] = pl->st[i].be;
      places[i] = pl->st[i].place;
    }
    s = gp_tied_init(&pl->tied, m, pl->k, ps, bes, places);
    if (s == GP_OK && pl->dist)
      s = gp_coll_dist_init(&pl->coll, pl->k, pl->n_local, pl->dist, &pl->mu, &pl->cv, &pl->failed,
                            pl->watchdog_s, &pl->tied, bes);
    else if (s == GP_OK)
      s = gp_coll_threads_init(&pl->coll, pl->k, &pl->mu, &pl->cv, &pl->failed, pl->watchdog_s,
                               &pl->tied);
  }
  if (s == GP_OK) pl->ahead_max = gp_pl_overlap_max(pl);
  /* across processes, the clocks of the traces start together (within the barrier's skew) */
  if (s == GP_OK && pl->dist) s = gp_dist_barrier(pl->dist);
  pl->t_origin = now_s();
  for (int i = 0; s == GP_OK && i < pl->k; i++) {
    if (!gp_layout_local(&pl->lay, i)) continue;
    if (pthread_create(&pl->st[i].thread, NULL, worker, &pl->st[i]) != 0)
      s = GP_ERR(GP_ERR_RUNTIME, "cannot start the worker thread of stage %d", i);
    else
      pl->st[i].started = 1;
  }
  if (s != GP_OK) {
    gp_pipeline_free(pl);
    return s;
  }
  *out = pl;
  return GP_OK;
}

void gp_pipeline_free(gp_pipeline *pl) {
  if (!pl) return;
  pthread_mutex_lock(&pl->mu);
  int wedged = still_wedged(pl);
  pl->cmd = CMD_EXIT;
  pl->generation++;
  pthread_cond_broadcast(&pl->cv);
  pthread_mutex_unlock(&pl->mu);
  /* a stuck stage still uses the pipeline: left as it is (the process is about to end) */
  if (wedged) return;
  gp_tied_free(&pl->tied); /* idle workers do not touch it; the backends must still be alive */
  for (int i = 0; pl->st && i < pl->k; i++) {
    stage *st = &pl->st[i];
    if (st->started) pthread_join(st->thread, NULL);
    st->started = 0;
    if (st->be) (void)st->be->sync(st->be); /* nothing queued may still use what is freed */
  }
  for (int c = 0; c < pl->n_chan; c++)
    gp_chan_free(&pl->chan[c]);
  free(pl->chan);
  for (int i = 0; pl->st && i < pl->k; i++) {
    stage *st = &pl->st[i];
    if (st->started) pthread_join(st->thread, NULL);
    for (int m = 0; m < pl->micro; m++) {
      if (st->slot_arena) gp_arena_free(&st->slot_arena[m]);
      if (st->pass) gp_pass_free(&st->pass[m]);
    }
    if (st->be) {
      (void)st->be->sync(st->be); /* nothing queued may still use what is freed below */
      gp_graphs_free(st->graphs);
      gp_arena_free(&st->scratch);
      gp_arena_free(&st->widen);
      events_free(st->be, pl->micro, st->ev_fwd);
      events_free(st->be, pl->micro, st->ev_grads);
      events_free(st->be, pl->micro, st->ev_pull);
      events_free(st->be, pl->micro, st->ev_push);
      if (st->rec.tm) events_free(st->be, 2 * st->rec.cap_span + 1, st->rec.tm);
      if (st->rec.ltm) events_free(st->be, 2 * st->rec.cap_lspan, st->rec.ltm);
    }
    gp_pl_ar_free(st);
    if (st->have_opt) gp_optimizer_free(&st->opt);
    gp_params_free(&st->params);
    free(st->slot_arena);
    free(st->pass);
    free(st->remat);
    free(st->pack);
    free(st->box);
    free(st->in);
    free(st->out);
    free(st->grad_to);
    free(st->rec.ev);
    free(st->rec.act_s);
    free(st->rec.rec_s);
    free(st->ahead_s);
    free(st->rec.span);
    free(st->rec.lspan);
    gp_backend_destroy(st->be);
    pthread_cond_destroy(&st->arrived);
  }
  gp_pl_chunks_free(pl);
  free(pl->st);
  gp_coll_free(&pl->coll);
  gp_schedule_free(&pl->sched);
  pthread_mutex_destroy(&pl->mu);
  pthread_cond_destroy(&pl->cv);
  free(pl);
}

gp_status gp_pipeline_sync(gp_pipeline *pl) {
  for (int i = 0; i < pl->k; i++)
    if (pl->st[i].be) GP_TRY(pl->st[i].be->sync(pl->st[i].be));
  return GP_OK;
}

int gp_pipeline_wedged(gp_pipeline *pl) {
  pthread_mutex_lock(&pl->mu);
  int w = still_wedged(pl);
  pthread_mutex_unlock(&pl->mu);
  return w;
}

int gp_pipeline_stages(const gp_pipeline *pl) {
  return pl->k;
}

const gp_schedule *gp_pipeline_schedule(const gp_pipeline *pl) {
  return pl->chunks > 1 ? &pl->dev_sched : &pl->sched;
}

int gp_pipeline_chunks(const gp_pipeline *pl) {
  return pl->chunks;
}

const gp_layout *gp_pipeline_layout(const gp_pipeline *pl) {
  return &pl->lay;
}

void gp_pipeline_inputs_used(const gp_pipeline *pl, unsigned char used[GP_MAX_MODEL_INPUTS]) {
  memset(used, 0, GP_MAX_MODEL_INPUTS);
  for (int s = 0; s < pl->k; s++)
    for (int q = 0; gp_layout_local(&pl->lay, s) && q < pl->st[s].n_in;
         q++) /* the edges from model inputs (find_boundaries) */
      if (pl->st[s].in[q].t < pl->m->n_inputs) used[pl->st[s].in[q].t] = 1;
  /* the loss's normalization counts the global batch's targets on every process, and the last
   * stage's predictions read the labels besides its inputs */
  if (pl->m->label_input >= 0) used[pl->m->label_input] = 1;
}

void gp_pipeline_share(const gp_pipeline *pl, int64_t *first, int64_t *n) {
  *first = pl->base;
  *n = pl->batch;
}

int gp_pipeline_local(const gp_pipeline *pl, int stage_i) {
  return gp_layout_local(&pl->lay, stage_i);
}

gp_params *gp_pipeline_params(gp_pipeline *pl, int stage_i) {
  return pl->st[stage_i].be ? &pl->st[stage_i].params : NULL;
}

gp_optimizer *gp_pipeline_optimizer(gp_pipeline *pl, int stage_i) {
  return pl->st[stage_i].have_opt ? &pl->st[stage_i].opt : NULL;
}

gp_backend *gp_pipeline_backend(gp_pipeline *pl, int stage_i) {
  return pl->st[stage_i].be;
}
