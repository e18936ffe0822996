/* The pipeline executor: stage workers, their hand-offs, failure and the watchdog. */
#include "core/train/pipeline.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/cuda/cuda.h"
#include "core/io/json.h"
#include "core/io/target.h"
#include "core/spin.h"
#include "core/train/exec.h"
#include "core/train/tied.h"

#define MSG_MAX 1024

/* A tensor this stage reads that another stage (or the input) produces. */
typedef struct ext_in {
  int t;        /* tensor id */
  int producer; /* stage, or -1 for a model input */
} ext_in;

/* A tensor this stage produces that a later stage reads. */
typedef struct ext_out {
  int t;        /* tensor id */
  int consumer; /* stage */
  int k;        /* index in the consumer's ext_in */
  float *grad;  /* send_outputs: the gradient buffer being handed over */
} ext_out;

/* What stage s has received for micro-batch m. */
typedef struct mailbox {
  gp_tensor *val;  /* per ext_in: the value */
  float **grad_to; /* per ext_in: where the producer wants the gradient (NULL: none) */
  /* written under pl->mu (release), read by the waiting stage with or without it (acquire) */
  _Atomic int ready; /* values delivered */
  _Atomic int grads; /* gradients delivered for this stage's ext_outs */
} mailbox;

typedef enum cmd_kind { CMD_NONE, CMD_TRAIN, CMD_EVAL, CMD_EXIT } cmd_kind;

/* One traced action: 'F', 'B', 'R' (a backward's recompute), 'T' (gradients handed back) or
 * 'S' (optimizer step); or one layer inside an action: 'f', 'b', 'r' (forward, backward,
 * recompute of node `node`). */
typedef struct trace_ev {
  char kind;
  int micro, node;
  int64_t step;
  double t0, t1, busy; /* wall start and end; compute time (see busy_s) */
} trace_ev;

/* A stage's host staging of its model inputs for asynchronous copies to its device: the
 * whole mini-batch, page-locked, reused once the last command's copies have passed. */
typedef struct staging {
  char *host;
  size_t bytes, cap;
  size_t at[GP_MAX_MODEL_INPUTS]; /* offset of each model input */
  gp_event *done;                 /* after the last copy out of it */
} staging;

typedef struct stage {
  gp_pipeline *pl;
  int index, first, end;
  int place; /* memory space: stages with equal places share memory (plain hand-offs) */
  gp_backend *be;
  /* per micro-batch: outputs ready (compute); gradients written for the producers (compute);
   * the copies of inputs (queue IN) and of gradients (queue OUT) done */
  gp_event **ev_fwd, **ev_grads, **ev_pull, **ev_push;
  staging stg;
  gp_params params;
  gp_optimizer opt;
  int have_opt;
  gp_arena *slot_arena; /* M arenas: one per micro-batch slot */
  gp_arena scratch;     /* forwards whose activations are dropped (re-materialization) */
  gp_mem_meter meter;
  gp_pass *pass; /* M passes */
  int n_in, n_out, n_grads_expected, n_wait_in;
  ext_in *in;
  ext_out *out;
  mailbox *box;           /* M */
  pthread_cond_t arrived; /* with pl->mu: something arrived in box (or a stage failed) */
  pthread_t thread;
  int started;
  uint64_t finished; /* the generation of the last command it finished (under pl->mu) */
  int64_t sent_bytes;
  double fwd_s, bwd_s, wall_busy_s;
  int64_t steps;
  trace_ev *ev;
  int64_t n_ev, cap_ev;
  double layer_t0; /* record_layer: when the current layer started */
  gp_step_result acc;
} stage;

struct gp_pipeline {
  gp_model *m;
  gp_plan plan;
  gp_schedule sched;
  int k, micro;
  stage *st;
  uint64_t seed;
  double watchdog_s;
  int pin, cores, threads_per_stage, trace, copy_all;
  int spin; /* stages wait for their inputs by spinning first (each has cores of its own) */
  gp_precision precision;
  int nondeterministic;
  size_t mem_limit;
  double t_origin;
  double span_s; /* wall time of the training steps since the last reset */
  pthread_mutex_t mu;
  pthread_cond_t cv; /* commands, completions, the step barrier, failures */
  /* the current command */
  cmd_kind cmd;
  uint64_t generation;
  int done;
  gp_batch in;
  int64_t batch, step;
  int64_t targets; /* the mini-batch's targets: the loss's normalizer */
  double lr;
  int64_t off[GP_SPEC_MAX_REPEAT]; /* micro-batch m: samples [off[m], off[m+1]) */
  gp_prediction *pred;             /* gp_pipeline_predict: what the last stage fills */
  /* tied parameters: their copies and gradient sums */
  gp_tied tied;
  /* the optimizer step's barrier (tied gradients, global-norm clipping) */
  double sumsq;
  int arrived;
  uint64_t barrier_gen;
  /* the first failure */
  int failed;
  gp_status fail_status;
  char fail_msg[MSG_MAX];
  /* how long the main thread waits for the stages to stop after a failure */
  double stop_s;
  /* a stage did not stop after a failure (stuck inside a library call): its thread and what
   * it uses cannot be joined or freed, and the pipeline takes no more commands */
  int wedged;
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The compute time of an action: this thread's CPU time when the stage's BLAS runs on this
 * thread alone (so stages sharing cores are not charged for each other), else wall time. */
static double busy_s(const gp_pipeline *pl) {
  if (pl->threads_per_stage > 1) return now_s();
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Appends a trace event (a gap when out of memory beats a failed step); the array only
 * grows, so steady state does not allocate. */
static void trace_add(stage *st, trace_ev ev) {
  if (st->n_ev == st->cap_ev) {
    int64_t cap = st->cap_ev ? st->cap_ev * 2 : 1024;
    trace_ev *grown = realloc(st->ev, (size_t)cap * sizeof *grown);
    if (!grown) return;
    st->ev = grown;
    st->cap_ev = cap;
  }
  st->ev[st->n_ev++] = ev;
}

/* Counts an action's wall time as busy and, when tracing, records it. */
static void record(stage *st, char kind, int micro, double t0, double t1, double busy) {
  st->wall_busy_s += t1 - t0;
  if (st->pl->trace) trace_add(st, (trace_ev){kind, micro, -1, st->pl->step, t0, t1, busy});
}

/* gp_exec's on_layer when tracing: a span per layer, nested in its action's (and not counted
 * as busy time again). On a GPU the span is the host launching the layer, not its kernels. */
static void record_layer(const gp_exec *e, int node, int backward, int end) {
  stage *st = e->on_layer_ctx;
  double t = now_s();
  if (!end) {
    st->layer_t0 = t;
    return;
  }
  char kind = backward ? 'b' : e->recompute ? 'r' : 'f';
  trace_add(st, (trace_ev){kind, e->micro, node, st->pl->step, st->layer_t0, t, t - st->layer_t0});
}

static void deadline_in(double s, struct timespec *ts) {
  clock_gettime(CLOCK_REALTIME, ts);
  double whole = floor(s);
  ts->tv_sec += (time_t)whole;
  ts->tv_nsec += (long)((s - whole) * 1e9);
  if (ts->tv_nsec >= 1000000000L) {
    ts->tv_sec++;
    ts->tv_nsec -= 1000000000L;
  }
}

/* Wakes every waiter: the main thread, the barrier and each stage waiting for its inputs.
 * Holds pl->mu. */
static void wake_all(gp_pipeline *pl) {
  pthread_cond_broadcast(&pl->cv);
  for (int i = 0; pl->st && i < pl->k; i++)
    pthread_cond_broadcast(&pl->st[i].arrived);
}

/* Records the first failure (with where it happened) and wakes everyone. Holds no lock. */
static gp_status fail(gp_pipeline *pl, gp_status s, int stage_i, int micro) {
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

/* How long a stage spins on its mailbox before it sleeps: a hand-off through the condition
 * variable costs a wake-up (medians of 15-35 us, means up to 70 us on a 16-core VM; forwards at
 * M = 32 took 250 us there), which every micro-batch pays on the critical path. */
#define SPIN_S 200e-6

/* Waits until *value >= want (a counter of st's mailbox); fails on another stage's failure or
 * the watchdog. what/micro describe the wait for the watchdog's message. Takes pl->mu. */
static gp_status wait_for(stage *st, _Atomic int *value, int want, const char *what, int micro) {
  gp_pipeline *pl = st->pl;
  if (pl->spin && atomic_load_explicit(value, memory_order_acquire) < want) {
    double until = now_s() + SPIN_S;
    for (int i = 1; atomic_load_explicit(value, memory_order_acquire) < want; i++) {
      if (i % 64 == 0 && now_s() > until) break;
      gp_cpu_relax();
    }
  }
  if (atomic_load_explicit(value, memory_order_acquire) >= want) return GP_OK;
  struct timespec dl;
  deadline_in(pl->watchdog_s, &dl);
  pthread_mutex_lock(&pl->mu);
  gp_status s = GP_OK;
  while (atomic_load_explicit(value, memory_order_acquire) < want && !pl->failed) {
    int rc = pthread_cond_timedwait(&st->arrived, &pl->mu, &dl);
    if (rc == ETIMEDOUT && atomic_load_explicit(value, memory_order_acquire) < want &&
        !pl->failed) {
      s = GP_ERR(GP_ERR_RUNTIME,
                 "watchdog: stage %d waited more than %.0f s for %s of micro-batch %d", st->index,
                 pl->watchdog_s, what, micro);
      break;
    }
  }
  if (s == GP_OK && pl->failed) s = GP_ERR(GP_ERR_RUNTIME, "stopped because another stage failed");
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
    if (!st->out) return GP_ERR(GP_ERR_NOMEM, "out of memory planning the pipeline");
    for (int c = s + 1; c < pl->k; c++)
      for (int q = 0; q < pl->st[c].n_in; q++)
        if (pl->st[c].in[q].producer == s) {
          ext_out *o = &st->out[st->n_out++];
          o->t = pl->st[c].in[q].t;
          o->consumer = c;
          o->k = q;
          /* every f32 output gets a gradient back, zeros where nothing trains: it is also the
           * consumer's word that it is done with the producer's slot (see do_backward) */
          if (m->nodes[o->t - m->n_inputs].layer.out_dtype == GP_F32) st->n_grads_expected++;
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
  st->be->precision = pl->precision;
  st->be->nondeterministic = pl->nondeterministic;
  st->be->mem_limit = pl->mem_limit;
  st->place = pl->copy_all ? st->index : st->be->device;
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
  GP_TRY(stage_backend(pl, st));
  GP_TRY(events_make(st->be, M, &st->ev_fwd));
  GP_TRY(events_make(st->be, M, &st->ev_grads));
  GP_TRY(events_make(st->be, M, &st->ev_pull));
  GP_TRY(events_make(st->be, M, &st->ev_push));
  GP_TRY(st->be->event_create(st->be, &st->stg.done));
  GP_TRY(gp_params_init(&st->params, pl->m, st->first, st->end, st->be, pl->seed));
  GP_TRY(gp_optimizer_init(&st->opt, &pl->m->train, &st->params));
  st->have_opt = 1;
  st->slot_arena = calloc((size_t)M, sizeof *st->slot_arena);
  st->pass = calloc((size_t)M, sizeof *st->pass);
  st->box = calloc((size_t)M, sizeof *st->box);
  if (!st->slot_arena || !st->pass || !st->box)
    return GP_ERR(GP_ERR_NOMEM, "out of memory for stage %d", st->index);
  gp_arena_init(&st->scratch, st->be, 0);
  st->scratch.meter = &st->meter;
  for (int m = 0; m < M; m++) {
    gp_arena_init(&st->slot_arena[m], st->be, 0);
    st->slot_arena[m].meter = &st->meter;
    GP_TRY(gp_pass_init(&st->pass[m], pl->m, st->first, st->end, 0));
    st->box[m].val = calloc((size_t)(st->n_in + 1), sizeof *st->box[m].val);
    st->box[m].grad_to = calloc((size_t)(st->n_in + 1), sizeof *st->box[m].grad_to);
    if (!st->box[m].val || !st->box[m].grad_to)
      return GP_ERR(GP_ERR_NOMEM, "out of memory for stage %d", st->index);
  }
  return GP_OK;
}

/* ---- actions ---- */

_Static_assert(GP_EXEC_MAX_HOST == GP_MAX_MODEL_INPUTS, "gp_exec's host copies");

/* The exec of an action on micro-batch `micro` with pass p, whose model inputs' host copies
 * (the caller's batch) it lists. */
static gp_exec exec_for(stage *st, const gp_pass *p, int micro, int training, int recompute,
                        gp_arena *arena) {
  gp_pipeline *pl = st->pl;
  gp_exec e = {.be = st->be,
               .arena = arena,
               .training = training,
               .recompute = recompute,
               .seed = pl->seed,
               .step = pl->step,
               .micro = micro,
               .sample_offset = pl->off[micro],
               .loss_count = training ? pl->targets : 1,
               .on_layer = pl->trace && training ? record_layer : NULL,
               .on_layer_ctx = st};
  for (int q = 0; q < st->n_in; q++) {
    int t = st->in[q].t;
    if (st->in[q].producer >= 0 || !p->val[t].data) continue;
    const gp_model_input *mi = &pl->m->inputs[t];
    size_t per = (size_t)gp_shape_numel(&mi->shape) * gp_dtype_size(mi->dtype);
    e.host_dev[e.n_host] = p->val[t].data;
    e.host_src[e.n_host++] = (const char *)pl->in.in[t] + (size_t)pl->off[micro] * per;
  }
  return e;
}

static void pass_clear(gp_pass *p, int64_t batch) {
  size_t nt = (size_t)(p->m->n_inputs + p->m->n_nodes);
  memset(p->val, 0, nt * sizeof *p->val);
  memset(p->grad, 0, nt * sizeof *p->grad);
  memset(p->saved, 0, (size_t)p->m->n_nodes * sizeof *p->saved);
  p->batch = batch;
}

/* A GPU stage, at the start of a command: its model inputs of the whole mini-batch into its
 * page-locked staging, once the last command's copies out of it have passed, so the
 * per-micro-batch copies to the device need not block the host. */
static gp_status staging_fill(stage *st) {
  gp_pipeline *pl = st->pl;
  const gp_model *mo = pl->m;
  gp_backend *be = st->be;
  size_t need = 0;
  for (int q = 0; q < st->n_in; q++) {
    int t = st->in[q].t;
    if (st->in[q].producer >= 0) continue;
    const gp_model_input *mi = &mo->inputs[t];
    if (!pl->in.in[t])
      return GP_ERR(GP_ERR_USAGE, "the batch has no data for input '%s'", mi->name);
    size_t per = (size_t)gp_shape_numel(&mi->shape) * gp_dtype_size(mi->dtype);
    st->stg.at[t] = need;
    need += ((size_t)pl->batch * per + 63) & ~(size_t)63;
  }
  if (!need) return GP_OK;
  GP_TRY(be->event_sync(be, st->stg.done));
  if (need > st->stg.cap) {
    be->host_free(be, st->stg.host);
    st->stg.host = NULL;
    st->stg.cap = 0;
    GP_TRY(be->host_alloc(be, need, (void **)&st->stg.host));
    st->stg.cap = need;
  }
  for (int q = 0; q < st->n_in; q++) {
    int t = st->in[q].t;
    if (st->in[q].producer >= 0) continue;
    const gp_model_input *mi = &mo->inputs[t];
    size_t per = (size_t)gp_shape_numel(&mi->shape) * gp_dtype_size(mi->dtype);
    memcpy(st->stg.host + st->stg.at[t], pl->in.in[t], (size_t)pl->batch * per);
  }
  return GP_OK;
}

/* Points the pass's inputs at micro-batch m: model inputs at their rows of the host batch (a
 * GPU stage: copied from its staging into the slot's arena, without waiting), other stages' tensors
 * from the mailbox, waiting for them: a producer's tensor is used in place where it shares
 * the memory (the compute queue waits for the producer's), else copied into the slot's arena
 * on queue IN (which waits for the producer; the compute queue waits for the copy). */
static gp_status gather_inputs(stage *st, int m, gp_pass *p, gp_arena *keep) {
  gp_pipeline *pl = st->pl;
  const gp_model *mo = pl->m;
  gp_backend *be = st->be;
  int64_t n = pl->off[m + 1] - pl->off[m];
  int staged = 0;
  for (int q = 0; q < st->n_in; q++) {
    int t = st->in[q].t;
    if (st->in[q].producer >= 0) continue;
    const gp_model_input *mi = &mo->inputs[t];
    gp_shape sh = gp_shape_batch(n, &mi->shape);
    size_t per = (size_t)gp_shape_numel(&mi->shape) * gp_dtype_size(mi->dtype);
    const char *src = pl->in.in[t];
    if (!src) return GP_ERR(GP_ERR_USAGE, "the batch has no data for input '%s'", mi->name);
    size_t at = (size_t)pl->off[m] * per, bytes = (size_t)n * per;
    if (be->device < 0) {
      /* read where it is: the step returns only when every stage is done with the batch,
       * and nothing writes over a model input (gp_node_in_place) */
      p->val[t] = (gp_tensor){(void *)(src + at), sh, mi->dtype, -1};
    } else {
      GP_TRY(gp_arena_tensor(keep, mi->dtype, &sh, &p->val[t]));
      GP_TRY(be->from_host_async(be, p->val[t].data, st->stg.host + st->stg.at[t] + at, bytes));
      staged = 1;
    }
  }
  if (staged) GP_TRY(be->event_record(be, GP_Q_COMPUTE, st->stg.done));
  if (!st->n_wait_in) return GP_OK;
  GP_TRY(wait_for(st, &st->box[m].ready, st->n_wait_in, "the input", m));
  int pulled = 0;
  for (int q = 0; q < st->n_in; q++) {
    if (st->in[q].producer < 0) continue;
    const stage *ps = &pl->st[st->in[q].producer];
    gp_tensor v = st->box[m].val[q];
    if (ps->place == st->place) {
      GP_TRY(be->event_wait(be, GP_Q_COMPUTE, ps->ev_fwd[m]));
      p->val[st->in[q].t] = v;
      continue;
    }
    gp_tensor mine;
    GP_TRY(gp_arena_tensor(keep, v.dtype, &v.shape, &mine));
    GP_TRY(be->event_wait(be, GP_Q_IN, ps->ev_fwd[m]));
    GP_TRY(be->copy_peer(be, GP_Q_IN, mine.data, be->device, v.data, ps->be->device,
                         gp_tensor_bytes(&v)));
    p->val[st->in[q].t] = mine;
    pulled = 1;
  }
  if (pulled) {
    GP_TRY(be->event_record(be, GP_Q_IN, st->ev_pull[m]));
    GP_TRY(be->event_wait(be, GP_Q_COMPUTE, st->ev_pull[m]));
  }
  return GP_OK;
}

/* Hands this stage's outputs of micro-batch m to the stages that read them, with a gradient
 * buffer for each (in the slot arena, alive until this stage's backward of m). The compute
 * queue's mark ev_fwd[m] is recorded before any is posted: what consumers wait for. */
static gp_status send_outputs(stage *st, int m, gp_pass *p, gp_arena *keep, int copy,
                              int want_grads) {
  gp_pipeline *pl = st->pl;
  if (!st->n_out) return GP_OK;
  for (int o = 0; o < st->n_out; o++) {
    ext_out *eo = &st->out[o];
    gp_tensor v = p->val[eo->t];
    size_t bytes = gp_tensor_bytes(&v);
    int first_use = 1;
    for (int q = 0; q < o; q++)
      first_use &= st->out[q].t != eo->t;
    if (copy && first_use) { /* the activations are about to be dropped: keep this one */
      gp_tensor kept;
      GP_TRY(gp_arena_tensor(keep, v.dtype, &v.shape, &kept));
      GP_TRY(st->be->copy(st->be, kept.data, v.data, bytes));
      p->val[eo->t] = kept;
    }
    eo->grad = NULL;
    if (want_grads && v.dtype == GP_F32) GP_TRY(gp_arena_alloc(keep, bytes, (void **)&eo->grad));
  }
  GP_TRY(st->be->event_record(st->be, GP_Q_COMPUTE, st->ev_fwd[m]));
  pthread_mutex_lock(&pl->mu);
  for (int o = 0; o < st->n_out; o++) {
    ext_out *eo = &st->out[o];
    mailbox *b = &pl->st[eo->consumer].box[m];
    b->val[eo->k] = p->val[eo->t];
    b->grad_to[eo->k] = eo->grad;
    atomic_fetch_add_explicit(&b->ready, 1, memory_order_release);
    pthread_cond_signal(&pl->st[eo->consumer].arrived);
    st->sent_bytes += (int64_t)gp_tensor_bytes(&p->val[eo->t]);
  }
  pthread_mutex_unlock(&pl->mu);
  return GP_OK;
}

static gp_status predict_micro(stage *st, int m);

static gp_status do_forward(stage *st, int m, int drop, int training) {
  gp_pipeline *pl = st->pl;
  int slot = training ? m % pl->sched.slots[st->index] : m;
  gp_pass *p = &st->pass[slot];
  gp_arena *keep = &st->slot_arena[slot];
  pass_clear(p, pl->off[m + 1] - pl->off[m]);
  GP_TRY(gather_inputs(st, m, p, keep));
  gp_exec e = exec_for(st, p, m, training, 0, drop ? &st->scratch : keep);
  double t0 = now_s(), c0 = busy_s(pl);
  GP_TRY(gp_pass_forward(p, &e));
  double t1 = now_s();
  if (training) {
    double b = busy_s(pl) - c0;
    st->fwd_s += b;
    record(st, 'F', m, t0, t1, b);
  }
  if (training && !isfinite(e.loss_sum))
    return GP_ERR(GP_ERR_RUNTIME, "the loss is %s at step %lld (lower the learning rate?)",
                  isnan(e.loss_sum) ? "NaN" : "infinite", (long long)pl->step + 1);
  st->acc.loss_sum += e.loss_sum;
  st->acc.correct += e.correct;
  st->acc.counted += e.counted;
  GP_TRY(send_outputs(st, m, p, keep, drop, training));
  if (!training && pl->pred && st->index == pl->k - 1) GP_TRY(predict_micro(st, m));
  if (drop) {
    GP_TRY(gp_arena_reset(&st->scratch)); /* only dropped forwards use it */
    for (int i = st->first; i < st->end; i++) {
      int t = pl->m->n_inputs + i;
      int sent = 0;
      for (int o = 0; o < st->n_out; o++)
        sent |= st->out[o].t == t;
      if (!sent) memset(&p->val[t], 0, sizeof p->val[t]);
    }
  }
  return GP_OK;
}

/* Writes the gradients of this stage's inputs of micro-batch m where their producers asked:
 * on the compute queue where the producer shares the memory, else by copies on queue OUT
 * (after the backward; the compute queue then waits for them, so the slot's memory is not
 * reused under a copy). ev_grads[m] marks the end of every write, before any is posted. */
static gp_status send_grads(stage *st, int m, gp_pass *p, gp_arena *keep) {
  gp_pipeline *pl = st->pl;
  gp_backend *be = st->be;
  double t0 = now_s(), c0 = busy_s(pl);
  int pushed = 0, any = 0;
  for (int q = 0; q < st->n_in; q++) {
    float *to = st->box[m].grad_to[q];
    ext_in *ei = &st->in[q];
    if (ei->producer < 0 || !to) continue;
    const stage *ps = &pl->st[ei->producer];
    gp_tensor *g = &p->grad[ei->t];
    size_t bytes = gp_tensor_bytes(&st->box[m].val[q]);
    any = 1;
    if (ps->place == st->place) {
      if (g->data)
        GP_TRY(be->copy(be, to, g->data, bytes));
      else
        GP_TRY(be->zero(be, to, bytes));
      continue;
    }
    const void *src = g->data;
    if (!src) { /* no gradient reached it: send zeros */
      void *z;
      GP_TRY(gp_arena_alloc(keep, bytes, &z));
      GP_TRY(be->zero(be, z, bytes));
      src = z;
    }
    if (!pushed) {
      GP_TRY(be->event_record(be, GP_Q_COMPUTE, st->ev_grads[m]));
      GP_TRY(be->event_wait(be, GP_Q_OUT, st->ev_grads[m]));
      pushed = 1;
    }
    GP_TRY(be->copy_peer(be, GP_Q_OUT, to, ps->be->device, src, be->device, bytes));
  }
  if (!any) return GP_OK;
  if (pushed) {
    GP_TRY(be->event_record(be, GP_Q_OUT, st->ev_push[m]));
    GP_TRY(be->event_wait(be, GP_Q_COMPUTE, st->ev_push[m]));
  }
  GP_TRY(be->event_record(be, GP_Q_COMPUTE, st->ev_grads[m]));
  record(st, 'T', m, t0, now_s(), busy_s(pl) - c0);
  pthread_mutex_lock(&pl->mu);
  for (int q = 0; q < st->n_in; q++) {
    if (st->in[q].producer < 0 || !st->box[m].grad_to[q]) continue;
    stage *ps = &pl->st[st->in[q].producer];
    atomic_fetch_add_explicit(&ps->box[m].grads, 1, memory_order_release);
    pthread_cond_signal(&ps->arrived);
    st->sent_bytes += (int64_t)gp_tensor_bytes(&st->box[m].val[q]);
  }
  pthread_mutex_unlock(&pl->mu);
  return GP_OK;
}

static gp_status do_backward(stage *st, int m, int recompute) {
  gp_pipeline *pl = st->pl;
  int slot = m % pl->sched.slots[st->index];
  gp_pass *p = &st->pass[slot];
  gp_arena *keep = &st->slot_arena[slot];
  /* The backward's temporaries and re-materialized activations go to the stage's scratch
   * arena, shared by the micro-batches: arenas keep their peak, so a slot that held them
   * would hold a whole micro-batch's activations for good, M times over. */
  gp_arena *work = &st->scratch;
  gp_backend *be = st->be;
  if (recompute) {
    gp_exec e = exec_for(st, p, m, 1, 1, work);
    double t0 = now_s(), c0 = busy_s(pl);
    GP_TRY(gp_pass_forward(p, &e));
    double t1 = now_s();
    double b = busy_s(pl) - c0;
    st->bwd_s += b;
    record(st, 'R', m, t0, t1, b);
  }
  GP_TRY(wait_for(st, &st->box[m].grads, st->n_grads_expected, "the gradient", m));
  /* sum the gradients that later stages wrote for this stage's outputs, once their writes
   * have passed */
  for (int o = 0; o < st->n_out; o++) {
    ext_out *eo = &st->out[o];
    float *g = pl->st[eo->consumer].box[m].grad_to[eo->k];
    if (!g) continue;
    GP_TRY(be->event_wait(be, GP_Q_COMPUTE, pl->st[eo->consumer].ev_grads[m]));
    gp_tensor *dst = &p->grad[eo->t];
    if (!dst->data) {
      *dst = p->val[eo->t];
      dst->data = g;
    } else {
      GP_TRY(be->axpby(be, gp_shape_numel(&dst->shape), 1.0f, g, 1.0f, GP_F32P(dst)));
    }
  }
  gp_exec e = exec_for(st, p, m, 1, recompute, work);
  double t0 = now_s(), c0 = busy_s(pl);
  GP_TRY(gp_pass_backward(p, &e));
  double t1 = now_s();
  double b = busy_s(pl) - c0;
  st->bwd_s += b;
  record(st, 'B', m, t0, t1, b);
  GP_TRY(send_grads(st, m, p, keep));
  GP_TRY(gp_arena_reset(work));
  return gp_arena_reset(keep);
}

/* The optimizer step's barrier: returns when all K stages have arrived, add summed into
 * pl->sumsq on the way (*total, if wanted, is the sum of every stage's add). */
static gp_status step_barrier(stage *st, double add, double *total) {
  gp_pipeline *pl = st->pl;
  pthread_mutex_lock(&pl->mu);
  uint64_t gen = pl->barrier_gen;
  pl->sumsq += add;
  if (++pl->arrived == pl->k) {
    pl->arrived = 0;
    pl->barrier_gen++;
    pthread_cond_broadcast(&pl->cv);
  }
  struct timespec dl;
  deadline_in(pl->watchdog_s, &dl);
  while (pl->barrier_gen == gen && !pl->failed)
    if (pthread_cond_timedwait(&pl->cv, &pl->mu, &dl) == ETIMEDOUT) break;
  int ok = pl->barrier_gen != gen;
  if (total) *total = pl->sumsq;
  pthread_mutex_unlock(&pl->mu);
  if (!ok)
    return GP_ERR(GP_ERR_RUNTIME, "stage %d: the other stages did not reach the optimizer step",
                  st->index);
  return GP_OK;
}

/* Deferred statistics, tied gradients summed over their copies, clipping by the global norm
 * over all stages, the update. */
static gp_status do_step(stage *st) {
  gp_pipeline *pl = st->pl;
  const gp_model *m = pl->m;
  for (int i = st->first; i < st->end; i++) {
    gp_layer *l = &m->nodes[i].layer;
    if (l->type->step_end) GP_TRY(l->type->step_end(l, st->be));
  }
  /* tied copies: sums written after every gradient is final, read after every sum is (the
   * syncs order a device's queued work before other stages read its memory) */
  if (pl->tied.n_groups) {
    GP_TRY(st->be->sync(st->be));
    GP_TRY(step_barrier(st, 0, NULL));
    GP_TRY(gp_tied_sum(&pl->tied, st->index, st->be));
    GP_TRY(st->be->sync(st->be));
    GP_TRY(step_barrier(st, 0, NULL));
    GP_TRY(gp_tied_scatter(&pl->tied, st->index, st->be));
  }
  double clip = m->train.clip_grad_norm, ss = 0;
  if (clip > 0) {
    if (pl->tied.n_groups) /* a tied group counts once in the norm */
      GP_TRY(gp_tied_grad_sumsq(&pl->tied, st->index, &st->params, st->be, &ss));
    else if (st->params.n_train)
      GP_TRY(st->be->sumsq(st->be, st->params.n_train, st->params.grad, &ss));
    double sumsq;
    GP_TRY(step_barrier(st, ss, &sumsq));
    /* torch.nn.utils.clip_grad_norm_'s factor: clip / (norm + 1e-6) when below 1 */
    double coef = clip / (sqrt(sumsq) + 1e-6);
    if (coef < 1 && st->params.n_train)
      GP_TRY(st->be->axpby(st->be, st->params.n_train, 0.0f, st->params.grad, (float)coef,
                           st->params.grad));
  }
  return gp_optimizer_step(&st->opt, pl->lr);
}

/* The last stage after an evaluation forward of micro-batch m: the argmax of the logits at
 * every position, and the unsmoothed log-likelihood of the labels that count. */
static gp_status predict_micro(stage *st, int m) {
  gp_pipeline *pl = st->pl;
  const gp_model *mo = pl->m;
  gp_prediction *pr = pl->pred;
  const gp_tensor *lg = &st->pass[m].val[mo->n_inputs + mo->output_node];
  int64_t rows = pl->off[m + 1] - pl->off[m], n = gp_shape_numel(&lg->shape);
  int64_t v = lg->shape.d[lg->shape.ndim - 1], pos = n / v, per = pos / rows;
  float *h = malloc((size_t)n * sizeof *h);
  if (!h) return GP_ERR(GP_ERR_NOMEM, "out of host memory for the predictions");
  gp_status s = st->be->to_host(st->be, h, lg->data, (size_t)n * sizeof *h);
  const int32_t *lab = NULL;
  if (mo->label_input >= 0 && gp_shape_numel(&mo->inputs[mo->label_input].shape) == per)
    lab = (const int32_t *)pl->in.in[mo->label_input] + pl->off[m] * per;
  for (int64_t i = 0; s == GP_OK && i < pos; i++) {
    const float *x = h + i * v;
    int64_t best = 0;
    for (int64_t j = 1; j < v; j++) /* torch.argmax: the first NaN, else the first maximum */
      if (x[j] > x[best] || (x[j] != x[j] && x[best] == x[best])) best = j;
    if (pr->argmax) pr->argmax[pl->off[m] * per + i] = (int32_t)best;
    if (!lab || lab[i] < 0 || lab[i] >= v) continue;
    double z = 0;
    for (int64_t j = 0; j < v; j++)
      z += exp((double)x[j] - x[best]);
    pr->nll_sum += log(z) + x[best] - x[lab[i]];
    pr->nll_count++;
  }
  free(h);
  return s;
}

static gp_status run_command(stage *st, cmd_kind cmd) {
  gp_pipeline *pl = st->pl;
  memset(&st->acc, 0, sizeof st->acc);
  for (int m = 0; m < pl->micro; m++)
    GP_TRY(gp_arena_reset(&st->slot_arena[m]));
  if (st->be->device >= 0) GP_TRY(staging_fill(st));
  if (cmd == CMD_EVAL) {
    /* No backward follows: the activations go to scratch and each slot keeps only the
     * tensors it sends, so evaluating needs no more memory than training. */
    for (int m = 0; m < pl->micro && pl->off[m + 1] > pl->off[m]; m++)
      GP_TRY(do_forward(st, m, 1, 0));
    return GP_OK;
  }
  GP_TRY(gp_params_zero_grad(&st->params));
  const gp_schedule *s = &pl->sched;
  for (int a = 0; a < s->n_actions[st->index]; a++) {
    const gp_action *ac = &s->actions[st->index][a];
    gp_status r = GP_OK;
    if (ac->kind == GP_A_FORWARD)
      r = do_forward(st, ac->micro, ac->recompute, 1);
    else if (ac->kind == GP_A_BACKWARD)
      r = do_backward(st, ac->micro, ac->recompute);
    else {
      double t0 = now_s(), c0 = busy_s(pl);
      r = do_step(st);
      double t1 = now_s();
      record(st, 'S', -1, t0, t1, busy_s(pl) - c0);
      st->steps++;
    }
    if (r != GP_OK) return fail(pl, r, st->index, ac->kind == GP_A_STEP ? -1 : ac->micro);
  }
  return GP_OK;
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
  int per = n / pl->k;
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
    gp_status s = run_command(st, cmd);
    if (s != GP_OK) fail(pl, s, st->index, -1);
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
  int s = 0;
  while (s < pl->k - 1 && pl->st[s].finished == pl->generation)
    s++;
  pl->wedged = 1;
  size_t len = strlen(pl->fail_msg);
  snprintf(pl->fail_msg + len, sizeof pl->fail_msg - len,
           " (stage %d did not stop within %.3g s: stuck in a computation)", s, pl->stop_s);
}

/* Whether a stage that did not stop is still running (it may finish later). Holds pl->mu. */
static int still_wedged(gp_pipeline *pl) {
  if (pl->wedged && pl->done >= pl->k) pl->wedged = 0;
  return pl->wedged;
}

static gp_status issue(gp_pipeline *pl, cmd_kind cmd) {
  pthread_mutex_lock(&pl->mu);
  if (still_wedged(pl)) {
    pthread_mutex_unlock(&pl->mu);
    return GP_ERR(GP_ERR_RUNTIME, "the pipeline is stopped: %s", pl->fail_msg);
  }
  for (int s = 0; s < pl->k; s++)
    for (int m = 0; m < pl->micro; m++) {
      atomic_store_explicit(&pl->st[s].box[m].ready, 0, memory_order_relaxed);
      atomic_store_explicit(&pl->st[s].box[m].grads, 0, memory_order_relaxed);
    }
  pl->cmd = cmd;
  pl->done = 0;
  pl->failed = 0;
  pl->arrived = 0;
  pl->sumsq = 0;
  pl->generation++;
  pthread_cond_broadcast(&pl->cv);
  while (pl->done < pl->k && !pl->failed)
    pthread_cond_wait(&pl->cv, &pl->mu);
  if (pl->done < pl->k) { /* a failure: the others stop at their next wait, or never */
    struct timespec dl;
    deadline_in(pl->stop_s, &dl);
    while (pl->done < pl->k && pthread_cond_timedwait(&pl->cv, &pl->mu, &dl) != ETIMEDOUT)
      ;
    if (pl->done < pl->k) wedge(pl);
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
  if (m->label_input < 0 || !b->in[m->label_input]) return b->n;
  const int32_t *y = b->in[m->label_input];
  int64_t n = b->n * gp_shape_numel(&m->inputs[m->label_input].shape), c = 0;
  for (int64_t i = 0; i < n; i++)
    c += y[i] >= 0;
  return c;
}

gp_status gp_pipeline_train_step(gp_pipeline *pl, const gp_batch *b, int64_t step, double lr,
                                 gp_step_result *out) {
  GP_TRY(split(pl, b->n, 1));
  pl->in = *b;
  pl->batch = b->n;
  /* no target at all: a zero loss and zero gradients, not a division by zero */
  pl->targets = gp_batch_targets(pl->m, b);
  if (pl->targets == 0) pl->targets = 1;
  pl->step = step;
  pl->lr = lr;
  double t0 = now_s();
  GP_TRY(issue(pl, CMD_TRAIN));
  pl->span_s += now_s() - t0;
  *out = pl->st[pl->k - 1].acc;
  return GP_OK;
}

gp_status gp_pipeline_eval(gp_pipeline *pl, const gp_batch *b, gp_step_result *out) {
  GP_TRY(split(pl, b->n, 0));
  pl->in = *b;
  pl->batch = b->n;
  GP_TRY(issue(pl, CMD_EVAL));
  const gp_step_result *r = &pl->st[pl->k - 1].acc;
  out->loss_sum += r->loss_sum;
  out->correct += r->correct;
  out->counted += r->counted;
  return GP_OK;
}

gp_status gp_pipeline_predict(gp_pipeline *pl, const gp_batch *b, gp_prediction *pred,
                              gp_step_result *out) {
  GP_TRY(usable(pl));
  pl->pred = pred;
  gp_status s = gp_pipeline_eval(pl, b, out);
  pl->pred = NULL;
  return s;
}

gp_status gp_pipeline_create(gp_model *m, const gp_plan *plan, uint64_t seed,
                             const gp_pipeline_opts *o, gp_pipeline **out) {
  *out = NULL;
  if (plan->micro > GP_SPEC_MAX_REPEAT - 1)
    return GP_ERR(GP_ERR_USAGE, "at most %d micro-batches", GP_SPEC_MAX_REPEAT - 1);
  gp_pipeline *pl = calloc(1, sizeof *pl);
  if (!pl) return GP_ERR(GP_ERR_NOMEM, "out of memory for the pipeline");
  pl->m = m;
  pl->plan = *plan;
  pl->k = plan->stages;
  pl->micro = plan->micro;
  pl->seed = seed;
  pl->watchdog_s = o && o->watchdog_s > 0 ? o->watchdog_s : 300;
  pl->stop_s = o && o->stop_s > 0 ? o->stop_s : 10;
  pl->pin = o ? o->pin : 0;
  pl->trace = o ? o->trace : 0;
  pl->copy_all = o ? o->copy_all : 0;
  pl->precision = o ? o->precision : GP_PREC_FP32;
  pl->nondeterministic = o ? o->nondeterministic : 0;
  pl->mem_limit = o ? o->mem_limit : 0;
  pl->t_origin = now_s();
  pl->cores = o && o->cores > 0 ? o->cores : gp_cpu_cores();
  pl->threads_per_stage = pl->cores / pl->k > 1 ? pl->cores / pl->k : 1;
  /* spinning is free only where no other stage needs the core; GP_PIPELINE_SPIN=0 turns it
   * off (to compare) */
  const char *spin = getenv("GP_PIPELINE_SPIN");
  pl->spin = pl->cores >= pl->k && !(spin && spin[0] == '0');
  pthread_mutex_init(&pl->mu, NULL);
  pthread_cond_init(&pl->cv, NULL);
  gp_status s = gp_schedule_build(plan->schedule, plan->remat, pl->k, pl->micro, &pl->sched);
  if (s == GP_OK) s = gp_schedule_validate(&pl->sched);
  if (s == GP_OK && !(pl->st = calloc((size_t)pl->k, sizeof *pl->st)))
    s = GP_ERR(GP_ERR_NOMEM, "out of memory for the pipeline");
  for (int i = 0; s == GP_OK && i < pl->k; i++) {
    pl->st[i].pl = pl;
    pl->st[i].index = i;
    pl->st[i].first = plan->st[i].first_node;
    pl->st[i].end = plan->st[i].end_node;
    pthread_cond_init(&pl->st[i].arrived, NULL);
  }
  if (s == GP_OK) s = find_boundaries(pl);
  for (int i = 0; s == GP_OK && i < pl->k; i++)
    if ((s = stage_init(pl, &pl->st[i])) != GP_OK)
      s = gp_error_prefix(s, "stage %d (%s): ", i, plan->st[i].device);
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
  }
  for (int i = 0; s == GP_OK && i < pl->k; i++) {
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
    for (int m = 0; m < pl->micro; m++) {
      if (st->slot_arena) gp_arena_free(&st->slot_arena[m]);
      if (st->pass) gp_pass_free(&st->pass[m]);
      if (st->box) {
        free(st->box[m].val);
        free(st->box[m].grad_to);
      }
    }
    if (st->be) {
      (void)st->be->sync(st->be); /* nothing queued may still use what is freed below */
      gp_arena_free(&st->scratch);
      events_free(st->be, pl->micro, st->ev_fwd);
      events_free(st->be, pl->micro, st->ev_grads);
      events_free(st->be, pl->micro, st->ev_pull);
      events_free(st->be, pl->micro, st->ev_push);
      st->be->event_destroy(st->be, st->stg.done);
      st->be->host_free(st->be, st->stg.host);
    }
    if (st->have_opt) gp_optimizer_free(&st->opt);
    gp_params_free(&st->params);
    free(st->slot_arena);
    free(st->pass);
    free(st->box);
    free(st->in);
    free(st->out);
    free(st->ev);
    gp_backend_destroy(st->be);
    pthread_cond_destroy(&st->arrived);
  }
  free(pl->st);
  gp_schedule_free(&pl->sched);
  pthread_mutex_destroy(&pl->mu);
  pthread_cond_destroy(&pl->cv);
  free(pl);
}

gp_status gp_pipeline_sync(gp_pipeline *pl) {
  for (int i = 0; i < pl->k; i++)
    GP_TRY(pl->st[i].be->sync(pl->st[i].be));
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

gp_params *gp_pipeline_params(gp_pipeline *pl, int stage_i) {
  return &pl->st[stage_i].params;
}

gp_optimizer *gp_pipeline_optimizer(gp_pipeline *pl, int stage_i) {
  return &pl->st[stage_i].opt;
}

gp_backend *gp_pipeline_backend(gp_pipeline *pl, int stage_i) {
  return pl->st[stage_i].be;
}

void gp_pipeline_stats(const gp_pipeline *pl, int stage_i, gp_stage_stats *out) {
  const stage *st = &pl->st[stage_i];
  out->peak_act_bytes = st->meter.peak;
  out->mem_peak = st->be->mem_peak;
  out->sent_bytes = st->sent_bytes;
  out->first_unit = pl->plan.st[stage_i].first_unit;
  out->end_unit = pl->plan.st[stage_i].end_unit;
  out->wall_busy_s = st->wall_busy_s;
  out->span_s = pl->span_s;
  out->fwd_s = st->fwd_s;
  out->bwd_s = st->bwd_s;
  out->steps = st->steps;
}

void gp_pipeline_reset_stats(gp_pipeline *pl) {
  pl->span_s = 0;
  for (int i = 0; i < pl->k; i++) {
    pl->st[i].meter.peak = pl->st[i].meter.live;
    pl->st[i].be->mem_peak = pl->st[i].be->mem_used;
    pl->st[i].sent_bytes = 0;
    pl->st[i].fwd_s = pl->st[i].bwd_s = pl->st[i].wall_busy_s = 0;
    pl->st[i].steps = 0;
  }
}

/* One layer's span (category "layer", named by the layer's path), nested in its action. */
static void write_layer_event(FILE *f, const gp_pipeline *pl, int s, const trace_ev *e) {
  const gp_layer *l = &pl->m->nodes[e->node].layer;
  const char *pass = e->kind == 'b' ? "backward" : e->kind == 'r' ? "recompute" : "forward";
  fprintf(f, ",\n{\"name\": ");
  gp_json_write_str(f, l->path);
  fprintf(f,
          ", \"cat\": \"layer\", \"ph\": \"X\", \"pid\": 0, \"tid\": %d, \"ts\": %.3f, "
          "\"dur\": %.3f, \"args\": {\"step\": %lld, \"micro_batch\": %d, \"pass\": \"%s\", "
          "\"type\": \"%s\"}}",
          s, (e->t0 - pl->t_origin) * 1e6, (e->t1 - e->t0) * 1e6, (long long)e->step + 1, e->micro,
          pass, l->type->name);
}

gp_status gp_pipeline_write_trace(const gp_pipeline *pl, const char *path) {
  char dst[4096], tmp[4200];
  GP_TRY(gp_io_write_target(path, dst, sizeof dst));
  GP_TRY(gp_io_temp_name(dst, tmp, sizeof tmp));
  gp_io_temp_claim(tmp);
  FILE *f = fopen(tmp, "w");
  if (!f) {
    gp_status s = GP_ERR(GP_ERR_IO, "%s: cannot write the trace: %s", path, strerror(errno));
    gp_io_temp_release(tmp);
    return s;
  }
  fprintf(f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
  const char *sep = "";
  for (int s = 0; s < pl->k; s++) {
    const stage *st = &pl->st[s];
    fprintf(f,
            "%s{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": %d, "
            "\"args\": {\"name\": \"stage %d (units %d..%d)\"}}",
            sep, s, s, pl->plan.st[s].first_unit, pl->plan.st[s].end_unit - 1);
    sep = ",\n";
    for (int64_t i = 0; i < st->n_ev; i++) {
      const trace_ev *e = &st->ev[i];
      if (e->node >= 0) {
        write_layer_event(f, pl, s, e);
        continue;
      }
      const char *cat = e->kind == 'F'   ? "forward"
                        : e->kind == 'B' ? "backward"
                        : e->kind == 'R' ? "recompute"
                        : e->kind == 'T' ? "transfer"
                                         : "optimizer";
      char name[32];
      if (e->kind == 'S')
        snprintf(name, sizeof name, "step");
      else
        snprintf(name, sizeof name, "%c%d", e->kind, e->micro);
      fprintf(f,
              "%s{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": 0, "
              "\"tid\": %d, \"ts\": %.3f, \"dur\": %.3f, \"args\": {\"step\": %lld, "
              "\"micro_batch\": %d, \"compute_us\": %.3f}}",
              sep, name, cat, s, (e->t0 - pl->t_origin) * 1e6, (e->t1 - e->t0) * 1e6,
              (long long)e->step + 1, e->micro, e->busy * 1e6);
    }
  }
  fprintf(f, "\n]}\n");
  int bad = ferror(f) | (fflush(f) != 0);
  bad |= fsync(fileno(f)) != 0;
  bad |= fclose(f) != 0;
  gp_status s = GP_OK;
  if (bad || rename(tmp, dst) != 0) {
    s = GP_ERR(GP_ERR_IO, "%s: writing the trace failed: %s", path, strerror(errno));
    remove(tmp);
  }
  gp_io_temp_release(tmp);
  return s;
}
