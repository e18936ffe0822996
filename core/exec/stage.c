/* A pipeline stage's actions: forward, backward (with re-materialization; whole, or its input
 * half with the weight half deferred to a W action), the optimizer step and its barrier, and
 * the hand-offs of activations and gradients between stages. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "core/spin.h"
#include "core/exec/internal.h"

/* How long a stage spins on its mailbox before it sleeps: a hand-off through the condition
 * variable costs a wake-up (medians of 15-35 us, means up to 70 us on a 16-core VM; forwards at
 * M = 32 took 250 us there), which every micro-batch pays on the critical path. */
#define SPIN_S 200e-6

/* Interleaved: the first chunk's stage of the device this thread is running the chunks of
 * (run_device), and whether any of them has hand-offs to other processes; NULL, 0 otherwise. */
static _Thread_local stage *tl_device;
static _Thread_local int tl_device_net;

static gp_status poll_stage(stage *st, int *pending) {
  for (int q = 0; q < st->n_in; q++)
    if (gp_chan_crosses(st->in[q].ch)) GP_TRY(gp_chan_net_poll(st->in[q].ch, pending));
  for (int o = 0; o < st->n_out; o++)
    if (gp_chan_crosses(st->out[o].ch)) GP_TRY(gp_chan_net_poll(st->out[o].ch, pending));
  return GP_OK;
}

/* Completes this stage's hand-offs with other processes that arrived (counted into its
 * mailbox); *pending: requests still in flight. While a device's thread runs its chunks, every
 * chunk's: a staged (GPU) send starts only at a poll, and the chunk waited for may need, through
 * another process, what another chunk of the device sent. */
static gp_status poll_net(stage *st, int *pending) {
  *pending = 0;
  gp_pipeline *pl = st->pl;
  if (!tl_device || tl_device->pl != pl) return poll_stage(st, pending);
  for (int c = 0; c < pl->chunks; c++)
    GP_TRY(poll_stage(&pl->st[c * pl->devices + tl_device->index], pending));
  return GP_OK;
}

/* wait_for on a stage with hand-offs to other processes: MPI completes nothing by itself, so
 * the stage polls its requests, briefly sleeping between polls, until the counter is there, a
 * stage fails, or the watchdog. want < 0: until nothing is in flight (the command's end). */
static gp_status wait_net(stage *st, _Atomic int *value, int want, const char *what, int micro) {
  gp_pipeline *pl = st->pl;
  const double until = now_s() + pl->watchdog_s;
  if (st->net_fail) return GP_ERR(st->net_fail, "%s", st->net_msg);
  for (int i = 0;; i++) {
    int pending;
    GP_TRY(poll_net(st, &pending));
    if (want < 0 ? pending == 0 : atomic_load_explicit(value, memory_order_acquire) >= want)
      return GP_OK;
    pthread_mutex_lock(&pl->mu);
    int failed = pl->failed;
    pthread_mutex_unlock(&pl->mu);
    if (failed) return GP_ERR(GP_ERR_RUNTIME, "stopped because another stage failed");
    if (now_s() > until)
      return GP_ERR(GP_ERR_RUNTIME,
                    "watchdog: stage %d waited more than %.0f s for %s of micro-batch %d from "
                    "another process",
                    st->index, pl->watchdog_s, what, micro);
    if (i > 64 || !pl->spin) {
      struct timespec ts = {0, 20000};
      nanosleep(&ts, NULL);
    } else {
      gp_cpu_relax();
    }
  }
}

/* Waits until *value >= want (a counter of st's mailbox); fails on another stage's failure or
 * the watchdog. what/micro describe the wait for the watchdog's message. Takes pl->mu. */
static gp_status wait_for(stage *st, _Atomic int *value, int want, const char *what, int micro) {
  gp_pipeline *pl = st->pl;
  if (st->n_net || (tl_device_net && tl_device->pl == pl))
    return wait_net(st, value, want, what, micro);
  if (pl->spin && atomic_load_explicit(value, memory_order_acquire) < want) {
    double until = now_s() + SPIN_S;
    for (int i = 1; atomic_load_explicit(value, memory_order_acquire) < want; i++) {
      if (i % 64 == 0 && now_s() > until) break;
      gp_cpu_relax();
    }
  }
  if (atomic_load_explicit(value, memory_order_acquire) >= want) return GP_OK;
  struct timespec dl;
  gp_deadline_in(pl->watchdog_s, &dl);
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

/* At each layer's end, a stage with hand-offs to other processes moves them on: MPI moves a
 * large message only inside MPI calls of both ends, so without this a value sent before a
 * forward would leave only at the stage's next wait (after all its forwards, in GPipe). An
 * error here is the next wait's to report. */
static void on_layer_net(const gp_exec *e, int node, int backward, int end) {
  stage *st = e->on_layer_ctx;
  if (st->pl->trace && e->training) gp_pl_record_layer(e, node, backward, end);
  if (end && backward) gp_pl_ar_layer(st, node);
  int pending;
  if (!end || st->net_fail || !st->n_net) return;
  if ((st->net_fail = poll_net(st, &pending)) != GP_OK)
    snprintf(st->net_msg, sizeof st->net_msg, "%s", gp_error_message());
}

/* ---- actions ---- */

_Static_assert(GP_EXEC_MAX_HOST == GP_MAX_MODEL_INPUTS, "gp_exec's host copies");

/* The micro-batches' offsets of the step the stage's action belongs to: the next step's while
 * it runs that step's forwards early (run_ahead). */
static const int64_t *offs(const stage *st) {
  return st->ahead ? st->pl->nx.off : st->pl->off;
}

/* The exec of an action on micro-batch `micro` with pass p, whose model inputs' host copies
 * (the caller's batch) it lists. */
static gp_exec exec_for(stage *st, const gp_pass *p, int micro, int training, int recompute,
                        gp_arena *arena) {
  gp_pipeline *pl = st->pl;
  const int64_t *off = offs(st);
  const gp_batch *in = st->ahead ? &pl->nx.in : &pl->in;
  gp_exec e = {.be = st->be,
               .arena = arena,
               .training = training,
               .recompute = recompute,
               .seed = pl->seed,
               .step = st->step,
               .micro = micro,
               .sample_offset = pl->base + off[micro], /* in the global batch */
               .loss_count = training ? (st->ahead ? pl->nx.targets : pl->targets) : 1,
               .on_layer = st->n_net || st->ar.on  ? on_layer_net
                           : pl->trace && training ? gp_pl_record_layer
                                                   : NULL,
               .on_layer_ctx = st,
               .binds = st->params.bind,
               .bind_first = st->first};
  for (int q = 0; q < st->n_in; q++) {
    int t = st->in[q].t;
    if (st->in[q].producer >= 0 || !p->val[t].data) continue;
    const gp_model_input *mi = &pl->m->inputs[t];
    size_t per = (size_t)gp_shape_numel(&mi->shape) * gp_dtype_size(mi->dtype);
    e.host_dev[e.n_host] = p->val[t].data;
    e.host_src[e.n_host++] = (const char *)in->in[t] + (size_t)off[micro] * per;
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

/* At the start of a command: each model input this stage reads, from the caller's batch, into
 * its channel (which stages it where the stage's device needs that). */
static gp_status inputs_begin(stage *st, int training) {
  gp_pipeline *pl = st->pl;
  st->net_fail = GP_OK;
  for (int q = 0; q < st->n_in; q++)
    if (gp_chan_crosses(st->in[q].ch)) GP_TRY(gp_chan_net_begin(st->in[q].ch, pl->off, training));
  for (int o = 0; o < st->n_out; o++)
    if (gp_chan_crosses(st->out[o].ch)) GP_TRY(gp_chan_net_begin(st->out[o].ch, pl->off, training));
  for (int q = 0; q < st->n_in; q++) {
    if (st->in[q].producer >= 0) continue;
    int t = st->in[q].t;
    if (!pl->in.in[t])
      return GP_ERR(GP_ERR_USAGE, "the batch has no data for input '%s'", pl->m->inputs[t].name);
    GP_TRY(gp_chan_input_begin(st->in[q].ch, pl->in.in[t], pl->batch));
  }
  return GP_OK;
}

/* Points the pass's inputs at micro-batch m: model inputs at their rows of the batch, other
 * stages' tensors once they arrived, each through its channel (in place, or copied into the
 * slot's arena: the compute queue then waits for the copies). */
static gp_status gather_inputs(stage *st, int m, gp_pass *p, gp_arena *keep) {
  gp_pipeline *pl = st->pl;
  const gp_model *mo = pl->m;
  gp_backend *be = st->be;
  const int64_t *off = offs(st);
  int64_t n = off[m + 1] - off[m];
  for (int q = 0; q < st->n_in; q++) {
    int t = st->in[q].t, queued = 0;
    if (st->in[q].producer >= 0) continue;
    const gp_model_input *mi = &mo->inputs[t];
    gp_shape sh = gp_shape_batch(n, &mi->shape);
    GP_TRY(gp_chan_input_get(st->in[q].ch, off[m], n, &sh, mi->dtype, keep, &p->val[t], &queued));
    if (queued) GP_TRY(gp_chan_input_end(st->in[q].ch));
  }
  if (!st->n_wait_in) return GP_OK;
  GP_TRY(wait_for(st, &st->box[m].values, st->n_wait_in, "the input", m));
  int pulled = 0;
  for (int q = 0; q < st->n_in; q++)
    if (st->in[q].producer >= 0)
      GP_TRY(gp_chan_recv(st->in[q].ch, m, keep, &p->val[st->in[q].t], &pulled));
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
  const int n_in = st->pl->m->n_inputs;
  if (!st->n_out) return GP_OK;
  void **grad_to = st->grad_to;
  for (int o = 0; o < st->n_out; o++) {
    ext_out *eo = &st->out[o];
    gp_tensor v = p->val[eo->t];
    size_t bytes = gp_tensor_bytes(&v);
    int first_use = 1;
    for (int q = 0; q < o; q++)
      first_use &= st->out[q].t != eo->t;
    /* the activations (or the selective layers') are about to be dropped: keep this one */
    int dropped = copy || (p->remat && eo->t >= n_in && p->remat[eo->t - n_in]);
    if (dropped && first_use) {
      gp_tensor kept;
      GP_TRY(gp_arena_tensor(keep, v.dtype, &v.shape, &kept));
      GP_TRY(st->be->copy(st->be, kept.data, v.data, bytes));
      p->val[eo->t] = kept;
    }
    grad_to[o] = NULL;
    if (want_grads && v.dtype == GP_F32) GP_TRY(gp_arena_alloc(keep, bytes, &grad_to[o]));
  }
  GP_TRY(st->be->event_record(st->be, GP_Q_COMPUTE, st->ev_fwd[m]));
  for (int o = 0; o < st->n_out; o++) {
    ext_out *eo = &st->out[o];
    GP_TRY(gp_chan_send(eo->ch, m, &p->val[eo->t], grad_to[o]));
    st->rec.sent_bytes += (int64_t)gp_tensor_bytes(&p->val[eo->t]);
  }
  return GP_OK;
}

static gp_status predict_micro(stage *st, int m);

/* Runs pass p's forward (F, R), backward (B: whole, or its input half when e->grad_part says
 * so) or weight half (W) of micro-batch m, timed when `timed` (a training step's action, not an
 * evaluation's): its time goes to the statistics and the trace. */
static gp_status timed_pass(stage *st, gp_action_kind kind, int m, gp_pass *p, gp_exec *e,
                            int timed) {
  double t0 = now_s(), c0 = busy_s(st->pl);
  if (timed) GP_TRY(gp_pl_span_begin(st));
  if (kind == GP_A_WEIGHT)
    GP_TRY(gp_pass_backward_weight(p, e));
  else if (kind == GP_A_BACKWARD && e->grad_part == GP_GRAD_INPUT)
    GP_TRY(gp_pass_backward_input(p, e));
  else
    GP_TRY(kind == GP_A_BACKWARD ? gp_pass_backward(p, e) : gp_pass_forward(p, e));
  if (!timed) return GP_OK;
  double t1 = now_s();
  return gp_pl_record(st, kind, m, t0, t1, busy_s(st->pl) - c0, 0);
}

/* Whether micro-batch m of a training step drops its selective layers' activations alone
 * (not when the whole micro-batch recomputes). */
static int selective(const stage *st, int m, int whole) {
  int r = m % st->pl->sched.slots[st->index];
  return st->remat && !whole && r >= st->remat_drop && r < st->remat_drop + st->remat_sel;
}

static gp_status do_forward(stage *st, int m, int drop, int training) {
  gp_pipeline *pl = st->pl;
  int slot = training ? m % pl->sched.slots[st->index] : m;
  gp_pass *p = &st->pass[slot];
  gp_arena *keep = &st->slot_arena[slot];
  pass_clear(p, offs(st)[m + 1] - offs(st)[m]);
  /* selective: the flagged layers' outputs go to the scratch, reset once the forward is done */
  int sel = training && selective(st, m, drop);
  p->remat = sel ? st->remat : NULL;
  p->remat_arena = sel ? &st->scratch : NULL;
  p->remat_only = 0;
  p->pack = training && !drop ? st->pack : NULL;
  GP_TRY(gather_inputs(st, m, p, keep));
  gp_exec e = exec_for(st, p, m, training, 0, drop ? &st->scratch : keep);
  GP_TRY(timed_pass(st, GP_A_FORWARD, m, p, &e, training));
  if (training && st->index == pl->test_nan_stage && st->step == 1 && m == 0) {
    for (int o = 0; o < st->n_out; o++) { /* what it hands on: NaN * y = NaN */
      const gp_tensor *v = &p->val[st->out[o].t];
      if (v->dtype == GP_F32)
        GP_TRY(st->be->axpby(st->be, gp_shape_numel(&v->shape), 0.0f, GP_F32P(v), NAN, GP_F32P(v)));
    }
    if (st->index == pl->k - 1) e.loss_sum = NAN;
  }
  if (training && !isfinite(e.loss_sum))
    return GP_ERR(GP_ERR_RUNTIME, "the loss is %s at step %lld (lower the learning rate?)",
                  isnan(e.loss_sum) ? "NaN" : "infinite", (long long)st->step + 1);
  st->acc.loss_sum += e.loss_sum;
  st->acc.correct += e.correct;
  st->acc.counted += e.counted;
  GP_TRY(send_outputs(st, m, p, keep, drop, training));
  if (!training && pl->pred && st->index == pl->k - 1) GP_TRY(predict_micro(st, m));
  if (drop || sel) {
    GP_TRY(gp_arena_reset(&st->scratch)); /* only dropped forwards use it */
    for (int i = st->first; i < st->end; i++) {
      int t = pl->m->n_inputs + i;
      int sent = 0;
      for (int o = 0; o < st->n_out; o++)
        sent |= st->out[o].t == t;
      if (sel && !st->remat[i]) continue;
      if (sel) p->saved[i] = NULL; /* (it was in the scratch too) */
      if (!sent) memset(&p->val[t], 0, sizeof p->val[t]);
    }
  }
  p->remat = NULL;
  p->remat_arena = NULL;
  p->pack = NULL;
  return GP_OK;
}

/* Hands the gradients of this stage's inputs of micro-batch m to their producers through the
 * channels, then tells each producer: ev_grads[m] marks the end of every write (copies on
 * queue OUT included, which the compute queue then waits for, so the slot's memory is not
 * reused under a copy) before any is posted. Then this stage is done with the values: where
 * the stage's W of m is still to come (it reads them), those it reads in the producer's memory
 * are first copied into the slot, so the producer's slot is freed as it is today (at its own
 * W, which may come before this stage's: waiting there for this one's could deadlock). */
static gp_status send_grads(stage *st, int m, gp_pass *p, gp_arena *keep) {
  gp_pipeline *pl = st->pl;
  gp_backend *be = st->be;
  double t0 = now_s(), c0 = busy_s(pl);
  GP_TRY(gp_pl_span_begin(st)); /* (a hand-off that writes nothing is not recorded) */
  int pushed = 0, any = 0;
  for (int q = 0; q < st->n_in; q++) {
    ext_in *ei = &st->in[q];
    if (ei->producer < 0 || !gp_chan_wants_grad(ei->ch, m)) continue;
    any = 1;
    GP_TRY(gp_chan_send_grad(ei->ch, m, &p->grad[ei->t], keep, &pushed));
  }
  if (any) {
    if (pushed) {
      GP_TRY(be->event_record(be, GP_Q_OUT, st->ev_push[m]));
      GP_TRY(be->event_wait(be, GP_Q_COMPUTE, st->ev_push[m]));
    }
    GP_TRY(be->event_record(be, GP_Q_COMPUTE, st->ev_grads[m]));
    GP_TRY(gp_pl_record(st, GP_A_TRANSFER, m, t0, now_s(), busy_s(pl) - c0, 0));
  }
  for (int q = 0; q < st->n_in; q++) {
    ext_in *ei = &st->in[q];
    if (ei->producer < 0) continue;
    if (gp_chan_wants_grad(ei->ch, m)) {
      gp_chan_post_grad(ei->ch, m);
      st->rec.sent_bytes += (int64_t)gp_tensor_bytes(&ei->ch->slot[m].val);
    }
    if (st->split && ei->ch->kind == GP_CHAN_SHARED && p->val[ei->t].data) {
      gp_tensor kept, *v = &p->val[ei->t];
      GP_TRY(gp_arena_tensor(keep, v->dtype, &v->shape, &kept));
      GP_TRY(be->copy(be, kept.data, v->data, gp_tensor_bytes(v)));
      *v = kept;
    }
    gp_chan_release(ei->ch, m);
  }
  return GP_OK;
}

static gp_status do_backward(stage *st, int m, int recompute) {
  gp_pipeline *pl = st->pl;
  int slot = m % pl->sched.slots[st->index];
  gp_pass *p = &st->pass[slot];
  gp_arena *keep = &st->slot_arena[slot];
  /* The backward's temporaries and re-materialized activations go to the stage's scratch
   * arena, shared by the micro-batches: arenas keep their peak, so a slot that held them
   * would hold a whole micro-batch's activations for good, M times over. Except where W comes
   * later: it reads the gradients B leaves and the activations, so they stay in the slot
   * (which then holds the output gradients too: gp_stage_cost.w_bytes). */
  gp_arena *work = st->split ? keep : &st->scratch;
  gp_backend *be = st->be;
  if (recompute) {
    gp_exec e = exec_for(st, p, m, 1, 1, work);
    GP_TRY(timed_pass(st, GP_A_RECOMPUTE, m, p, &e, 1));
  } else if (selective(st, m, 0)) { /* the flagged layers alone, from what the slot kept */
    gp_exec e = exec_for(st, p, m, 1, 1, work);
    p->remat = st->remat;
    p->remat_only = 1;
    gp_status r = timed_pass(st, GP_A_RECOMPUTE, m, p, &e, 1);
    p->remat = NULL;
    p->remat_only = 0;
    GP_TRY(r);
  }
  GP_TRY(wait_for(st, &st->box[m].grads, st->n_grads_expected, "the gradient", m));
  /* sum the gradients that later stages wrote for this stage's outputs, once their writes
   * have passed */
  for (int o = 0; o < st->n_out; o++) {
    ext_out *eo = &st->out[o];
    float *g;
    GP_TRY(gp_chan_grad(eo->ch, m, &g));
    if (!g) continue;
    gp_tensor *dst = &p->grad[eo->t];
    if (!dst->data) {
      *dst = p->val[eo->t];
      dst->data = g;
    } else {
      GP_TRY(be->axpby(be, gp_shape_numel(&dst->shape), 1.0f, g, 1.0f, GP_F32P(dst)));
    }
  }
  gp_exec e = exec_for(st, p, m, 1, recompute, work);
  if (st->split) { /* what W will not read goes to scratch, freed once B has handed on */
    e.grad_part = GP_GRAD_INPUT;
    e.temp = &st->scratch;
  }
  GP_TRY(timed_pass(st, GP_A_BACKWARD, m, p, &e, 1));
  GP_TRY(send_grads(st, m, p, keep));
  if (st->split) return gp_arena_reset(&st->scratch); /* the slot is W's to free */
  GP_TRY(gp_arena_reset(work));
  /* the slot's memory (this stage's outputs of m) is reused only once every reader is done */
  GP_TRY(wait_for(st, &st->box[m].released, st->n_out, "the release", m));
  return gp_arena_reset(keep);
}

/* W: the weight half of micro-batch m's backward, deferred by the list, then the slot freed as
 * do_backward frees it. Its temporaries go to scratch (nothing outlives it). */
static gp_status do_weight(stage *st, int m) {
  gp_pipeline *pl = st->pl;
  int slot = m % pl->sched.slots[st->index];
  gp_pass *p = &st->pass[slot];
  gp_arena *keep = &st->slot_arena[slot];
  gp_exec e = exec_for(st, p, m, 1, 0, &st->scratch);
  e.grad_part = GP_GRAD_WEIGHT; /* (the trace tells W's layers by it) */
  GP_TRY(timed_pass(st, GP_A_WEIGHT, m, p, &e, 1));
  GP_TRY(gp_arena_reset(&st->scratch));
  GP_TRY(wait_for(st, &st->box[m].released, st->n_out, "the release", m));
  return gp_arena_reset(keep);
}

/* Deferred statistics, tied gradients summed over their copies, clipping by the global norm
 * over all stages, the update. Synchronous under every schedule, W deferred or not: the norm's
 * sum is a barrier, so no stage updates before every stage's last W (or backward) has added
 * its gradients; and without clipping none is needed for the loss's NaN check, which the last
 * stage makes at each forward: a stage's step follows its last backward, which waits for the
 * last stage's last backward, which follows all its forwards; a failed one sends no gradient,
 * so no stage updates. Hence, without clipping, ties or replicas, nothing waits here for
 * another stage, and stage 0 may go on with the next step's forwards (run_ahead). (What the
 * barrier costs: bench/schedules.sh, docs/schedules.md.) */
static gp_status do_step(stage *st) {
  gp_pipeline *pl = st->pl;
  const gp_model *m = pl->m;
  /* replicas: the gradients summed over them (each normalized by the global batch's targets),
   * the statistics pooled as if one replica had seen every micro-batch */
  GP_TRY(gp_pl_ar_finish(st));
  for (int i = st->first; i < st->end; i++) {
    const gp_layer *l = &m->nodes[i].layer;
    gp_layer_bind *b = gp_params_bind(&st->params, i);
    if (b->stats && l->type->stats_floats)
      GP_TRY(pl->coll.ops->replica_stats(&pl->coll, st->index, st->be, b->stats,
                                         l->type->stats_floats(l) / 2, &b->stats_count));
    if (l->type->step_end) GP_TRY(l->type->step_end(l, b, st->be));
  }
  GP_TRY(pl->coll.ops->tied_grads(&pl->coll, st->index, st->be));
  double clip = m->train.clip_grad_norm, ss = 0;
  if (clip > 0) {
    if (pl->tied.n_groups) /* a tied group counts once in the norm */
      GP_TRY(gp_tied_grad_sumsq(&pl->tied, st->index, &st->params, st->be, &ss));
    else if (st->params.n_train)
      GP_TRY(st->be->sumsq(st->be, st->params.n_train, st->params.grad, &ss));
    GP_TRY(pl->coll.ops->sum(&pl->coll, st->index, &ss, 1));
    /* torch.nn.utils.clip_grad_norm_'s factor: clip / (norm + 1e-6) when below 1 */
    double coef = clip / (sqrt(ss) + 1e-6);
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
  const gp_tensor *lg = &st->pass[m].val[mo->n_inputs + mo->output_node];
  int64_t rows = pl->off[m + 1] - pl->off[m], n = gp_shape_numel(&lg->shape);
  int64_t v = lg->shape.d[lg->shape.ndim - 1], pos = n / v, per = pos / rows;
  float *h = malloc((size_t)n * sizeof *h);
  int32_t *am = pl->pred->argmax ? malloc((size_t)pos * sizeof *am) : NULL;
  gp_status s = h && (am || !pl->pred->argmax)
                    ? st->be->to_host(st->be, h, lg->data, (size_t)n * sizeof *h)
                    : GP_ERR(GP_ERR_NOMEM, "out of host memory for the predictions");
  const int32_t *lab = NULL;
  if (mo->label_input >= 0 && gp_shape_numel(&mo->inputs[mo->label_input].shape) == per)
    lab = (const int32_t *)pl->in.in[mo->label_input] + pl->off[m] * per;
  for (int64_t i = 0; s == GP_OK && i < pos; i++) {
    const float *x = h + i * v;
    int64_t best = 0;
    for (int64_t j = 1; j < v; j++) /* torch.argmax: the first NaN, else the first maximum */
      if (x[j] > x[best] || (x[j] != x[j] && x[best] == x[best])) best = j;
    if (am) am[i] = (int32_t)best;
    if (!lab || lab[i] < 0 || lab[i] >= v) continue;
    double z = 0;
    for (int64_t j = 0; j < v; j++)
      z += exp((double)x[j] - x[best]);
    st->nll_sum += log(z) + x[best] - x[lab[i]];
    st->nll_count++;
  }
  if (s == GP_OK && am)
    s = pl->coll.ops->to_main(&pl->coll, st->index,
                              pl->pred->argmax + (pl->base + pl->off[m]) * per, am,
                              (size_t)pos * sizeof *am);
  free(h);
  free(am);
  return s;
}

/* The command's results, summed over the stages (only the last has a loss) in member order,
 * to the main thread: the step's loss and accuracy sums, and the predictions' likelihood. */
static gp_status share_results(stage *st) {
  gp_pipeline *pl = st->pl;
  double v[5] = {st->acc.loss_sum, (double)st->acc.correct, (double)st->acc.counted, st->nll_sum,
                 (double)st->nll_count};
  GP_TRY(pl->coll.ops->sum_all(&pl->coll, st->index, v, 5));
  if (st->index != pl->first_local) return GP_OK;
  pl_results r = {{v[0], (int64_t)v[1], (int64_t)v[2]}, v[3], (int64_t)v[4]};
  return pl->coll.ops->to_main(&pl->coll, st->index, &pl->results, &r, sizeof r);
}

/* Interleaved: the thread of a device's first chunk runs the forwards and backwards of all its
 * chunks in the device's order, so that one thread a device computes, as under the other
 * schedules (chunks taking turns on threads of their own paid a thread's wake-up at almost
 * every action: on the loaded 2-core machine, a tenth of the step). The other chunks' threads,
 * once ready, wait for it, then each steps its own chunk (the steps meet in collectives). */
static gp_status run_device(stage *st) {
  gp_pipeline *pl = st->pl;
  GP_TRY(gp_pl_device_ready(st));
  if (st->index >= pl->devices) return GP_OK; /* the device's F and B ran */
  const int d = st->index;
  tl_device = st;
  tl_device_net = 0;
  for (int c = 0; c < pl->chunks; c++)
    tl_device_net |= pl->st[c * pl->devices + d].n_net > 0;
  for (int i = 0; i < pl->dev_sched.n_actions[d]; i++) {
    const int v = pl->dev_owner[d][i], a = v >= 0 ? pl->dev_at[d][i] : 0;
    if (v < 0) continue; /* the step: each chunk's own */
    stage *cs = &pl->st[v];
    const gp_action *ac = &pl->sched.actions[v][a];
    cs->rec.at = a;
    gp_pl_ar_action(cs, a);
    gp_status r = ac->kind == GP_A_FORWARD ? do_forward(cs, ac->micro, ac->recompute, 1)
                                           : do_backward(cs, ac->micro, ac->recompute);
    if (r != GP_OK) {
      tl_device = NULL, tl_device_net = 0;
      return gp_pl_fail(pl, r, v, ac->micro);
    }
  }
  tl_device = NULL, tl_device_net = 0;
  gp_pl_device_done(st);
  return GP_OK;
}

/* Whether batch b is the one announced as the next (its forwards may have run early). */
static int is_next(const gp_pipeline *pl, const gp_batch *b, int64_t step) {
  if (b->n != pl->nx.batch || step != pl->nx.step) return 0;
  for (int i = 0; i < pl->m->n_inputs; i++)
    if (b->in[i] != pl->nx.in.in[i]) return 0;
  return 1;
}

int gp_pl_overlap_max(const gp_pipeline *pl) {
  /* the update of a stage needs the others' only through the clipping norm's sum, tied weights'
   * gradient sums, or replicas (other processes): then the step is a barrier */
  if (!gp_env_get(GP_ENV_STEP_OVERLAP, 1) || pl->dist || pl->chunks > 1 || pl->k < 2 ||
      pl->m->train.clip_grad_norm > 0 || pl->tied.n_groups || pl->chan_policy != GP_CHAN_AUTO ||
      pl->test_staged || pl->test_nan_stage >= 0)
    return 0;
  for (int s = 0; s < pl->k; s++)
    if (pl->st[s].be->device >= 0 || pl->st[s].rec.tm) return 0; /* CPU stages, host-timed */
  return gp_schedule_early_forwards(&pl->sched);
}

gp_status gp_pl_announce(gp_pipeline *pl, const gp_batch *b, const gp_batch *next, int64_t step) {
  if (pl->ahead && !is_next(pl, b, step))
    return GP_ERR(GP_ERR_USAGE,
                  "internal: step %lld trains a batch other than the one announced "
                  "as the next (whose forwards ran)",
                  (long long)step + 1);
  pl->nx.on = 0;
  if (next && pl->ahead_max && next->n >= pl->micro) {
    pl->nx.on = 1;
    pl->nx.in = *next;
    pl->nx.batch = next->n;
    pl->nx.step = step + 1;
    pl->nx.targets = gp_batch_targets(pl->m, next);
    if (pl->nx.targets == 0) pl->nx.targets = 1;
    const int64_t n = next->n, M = pl->micro;
    for (int m = 0; m <= M; m++)
      pl->nx.off[m] = (n / M) * m + (m < n % M ? m : n % M);
  }
  return GP_OK;
}

/* Stage 0, its step done: the next step's first forwards (pl->nx), each handed on as usual, so
 * that they wait in the later stages' mailboxes across the commands' boundary and the next step
 * starts with no stage idle for want of its first input (see gp_pl_overlap_max for when this
 * is safe). At most its list's leading forwards, and none once every other stage is done with
 * this step: the command ends no later for them than by one forward. They run on the weights
 * just updated, with the next step's offsets, seed and batch, in their slots (which the next
 * command leaves alone), exactly as that step would run them; their times and results are
 * kept for it, their busy time counts where it is spent (this command's span). */
static gp_status run_ahead(stage *st) {
  gp_pipeline *pl = st->pl;
  for (int q = 0; q < st->n_in; q++) /* (model inputs alone: stage 0 reads no other stage) */
    GP_TRY(gp_chan_input_begin(st->in[q].ch, pl->nx.in.in[st->in[q].t], pl->nx.batch));
  const int n = pl->sched.n_actions[st->index];
  double *act = st->rec.act_s;
  gp_step_result acc = st->acc;
  memset(st->ahead_s, 0, sizeof *st->ahead_s * (size_t)n);
  memset(&st->acc, 0, sizeof st->acc);
  st->rec.act_s = st->ahead_s;
  st->ahead = 1;
  st->step = pl->nx.step;
  gp_status r = GP_OK;
  for (int j = 0; j < pl->ahead_max; j++) {
    if (!pl->test_ahead_all &&
        atomic_load_explicit(&pl->tail_done, memory_order_acquire) >= pl->k - 1)
      break;
    st->rec.at = j;
    if ((r = do_forward(st, j, pl->sched.actions[st->index][j].recompute, 1)) != GP_OK) break;
    pl->ahead = j + 1;
    st->rec.early++;
  }
  st->ahead_acc = st->acc;
  st->acc = acc;
  st->rec.act_s = act;
  st->ahead = 0;
  st->step = pl->step;
  for (int q = 0; q < st->n_in; q++)
    GP_TRY(gp_chan_input_begin(st->in[q].ch, pl->in.in[st->in[q].t], pl->batch));
  return r;
}

gp_status gp_pl_run_command(stage *st, cmd_kind cmd) {
  gp_pipeline *pl = st->pl;
  /* stage 0, training: the forwards of this step the last command ran (run_ahead) */
  const int skip = cmd == CMD_TRAIN && st->index == 0 ? pl->ahead : 0;
  if (st->index == 0) pl->ahead = 0;
  st->step = pl->step;
  memset(&st->acc, 0, sizeof st->acc);
  if (skip) st->acc = st->ahead_acc;
  /* the likelihood goes on from the caller's sum, so it adds up in the order it always did */
  const int predicts =
      cmd == CMD_EVAL && pl->pred && st->index == pl->k - 1 && pl->lay.replica == 0;
  st->nll_sum = predicts ? pl->pred->nll_sum : 0;
  st->nll_count = predicts ? pl->pred->nll_count : 0;
  for (int m = 0; m < pl->micro; m++)
    if (m >= skip || cmd != CMD_TRAIN) GP_TRY(gp_arena_reset(&st->slot_arena[m]));
  GP_TRY(inputs_begin(st, cmd == CMD_TRAIN));
  if (cmd == CMD_EVAL) {
    /* No backward follows: the activations go to scratch and each slot keeps only the
     * tensors it sends, so evaluating needs no more memory than training. */
    for (int m = 0; m < pl->micro && pl->off[m + 1] > pl->off[m]; m++)
      GP_TRY(do_forward(st, m, 1, 0));
    if (st->n_net) GP_TRY(wait_net(st, NULL, -1, "the sends", -1));
    return share_results(st);
  }
  GP_TRY(gp_pl_device_step_start(st));
  GP_TRY(gp_params_zero_grad(&st->params));
  const gp_schedule *s = &pl->sched;
  const int n = s->n_actions[st->index];
  memset(st->rec.act_s, 0, sizeof *st->rec.act_s * (size_t)n);
  memset(st->rec.rec_s, 0, sizeof *st->rec.rec_s * (size_t)n);
  if (skip) memcpy(st->rec.act_s, st->ahead_s, sizeof *st->rec.act_s * (size_t)skip);
  if (pl->chunks > 1) GP_TRY(run_device(st));
  for (int a = skip; a < n; a++) {
    const gp_action *ac = &s->actions[st->index][a];
    gp_status r = GP_OK;
    if (pl->chunks > 1 && ac->kind != GP_A_STEP) continue; /* run_device ran it */
    st->rec.at = a;
    gp_pl_ar_action(st, a);
    if (ac->kind == GP_A_FORWARD)
      r = do_forward(st, ac->micro, ac->recompute, 1);
    else if (ac->kind == GP_A_BACKWARD)
      r = do_backward(st, ac->micro, ac->recompute);
    else if (ac->kind == GP_A_WEIGHT)
      r = do_weight(st, ac->micro);
    else {
      double t0 = now_s(), c0 = busy_s(pl);
      const double w0 = pl->coll.waited[st->index];
      r = gp_pl_span_begin(st);
      if (r == GP_OK) r = do_step(st);
      double t1 = now_s();
      /* waiting in the collectives for the other stages is idle, not the step's work */
      if (r == GP_OK)
        r = gp_pl_record(st, GP_A_STEP, -1, t0, t1, busy_s(pl) - c0,
                         pl->coll.waited[st->index] - w0);
      st->rec.steps++;
    }
    if (r != GP_OK) return gp_pl_fail(pl, r, st->index, ac->kind == GP_A_STEP ? -1 : ac->micro);
  }
  if (st->index > 0) atomic_fetch_add_explicit(&pl->tail_done, 1, memory_order_release);
  if (st->index == 0 && pl->nx.on) GP_TRY(run_ahead(st));
  GP_TRY(gp_pl_device_step_end(st));
  /* the hand-offs' buffers are the next command's: every send completed */
  if (st->n_net) GP_TRY(wait_net(st, NULL, -1, "the sends", -1));
  return share_results(st);
}
