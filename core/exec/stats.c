/* A pipeline's record of where time goes: busy time per action (host or device timed), per-stage
 * statistics, and the bubble simulated and replayed from them (interleaved: per device, each
 * chunk a stage of its own). */
#include <math.h>
#include <string.h>

#include "core/exec/internal.h"

/* Adds d seconds of action `at` (of kind `kind`) to the stage's statistics; `compute` (host:
 * see busy_s; device: d) to its forward or backward time. */
static void account(stage *st, gp_action_kind k, int at, double d, double compute) {
  st->rec.wall_kind_s[k] += d;
  (k == GP_A_RECOMPUTE ? st->rec.rec_s : st->rec.act_s)[at] += d;
  if (k == GP_A_FORWARD) st->rec.fwd_s += compute;
  if (k == GP_A_RECOMPUTE || k == GP_A_BACKWARD || k == GP_A_WEIGHT) st->rec.bwd_s += compute;
}

gp_status gp_pl_record(stage *st, gp_action_kind kind, int micro, double t0, double t1, double busy,
                       double waited) {
  if (st->pl->trace) gp_pl_trace_add(st, (trace_ev){kind, micro, -1, st->step, t0, t1, busy, 0});
  if (!st->rec.tm) {
    account(st, kind, st->rec.at, t1 - t0 - waited, busy);
    return GP_OK;
  }
  if (st->rec.n_span >= st->rec.cap_span)
    return GP_ERR(GP_ERR_RUNTIME, "stage %d: more timed actions in a step than its schedule has",
                  st->index);
  GP_TRY(st->be->event_record(st->be, GP_Q_COMPUTE, st->rec.tm[2 * st->rec.n_span + 1]));
  st->rec.span[st->rec.n_span++] = (device_span){kind, micro, st->rec.at, waited};
  return GP_OK;
}

gp_status gp_pl_span_begin(stage *st) {
  if (!st->rec.tm || st->rec.n_span >= st->rec.cap_span) return GP_OK; /* gp_pl_record says it */
  return st->be->event_record(st->be, GP_Q_COMPUTE, st->rec.tm[2 * st->rec.n_span]);
}

gp_status gp_pl_device_step_start(stage *st) {
  if (!st->rec.tm) return GP_OK;
  gp_backend *be = st->be;
  /* on an idle queue the reference passes as it is recorded, so device times map to host
   * times by one offset (the host spans of the trace and the device's line up) */
  GP_TRY(be->sync(be));
  st->rec.n_span = st->rec.n_lspan = 0;
  st->rec.ref_host = now_s();
  return be->event_record(be, GP_Q_COMPUTE, st->rec.tm[2 * st->rec.cap_span]);
}

/* Where timer pair i of tm passed, in seconds after the step's reference. */
static gp_status pair_times(stage *st, gp_event **tm, int i, double *a, double *b) {
  gp_event *ref = st->rec.tm[2 * st->rec.cap_span];
  GP_TRY(st->be->event_elapsed(st->be, ref, tm[2 * i], a));
  return st->be->event_elapsed(st->be, ref, tm[2 * i + 1], b);
}

gp_status gp_pl_device_step_end(stage *st) {
  if (!st->rec.tm) return GP_OK;
  GP_TRY(st->be->sync(st->be));
  for (int i = 0; i < st->rec.n_lspan; i++) {
    trace_ev ev = st->rec.lspan[i];
    double a, b;
    GP_TRY(pair_times(st, st->rec.ltm, i, &a, &b));
    ev.t0 = st->rec.ref_host + a;
    ev.t1 = st->rec.ref_host + b;
    ev.busy = b - a;
    gp_pl_trace_add(st, ev);
  }
  for (int i = 0; i < st->rec.n_span; i++) {
    const device_span *sp = &st->rec.span[i];
    double a, b;
    GP_TRY(pair_times(st, st->rec.tm, i, &a, &b));
    /* the host's waits at the step's barriers left the queue idle (each barrier follows a
     * read of a device value, which drains it) */
    double d = b - a - sp->waited;
    if (d < 0) d = 0;
    account(st, sp->kind, sp->at, d, d);
    if (st->pl->trace)
      gp_pl_trace_add(st, (trace_ev){sp->kind, sp->micro, -1, st->step, st->rec.ref_host + a,
                                     st->rec.ref_host + b, d, 1});
  }
  return GP_OK;
}

void gp_pipeline_stats(const gp_pipeline *pl, int stage_i, gp_stage_stats *out) {
  const stage *st = &pl->st[stage_i];
  out->peak_act_bytes = st->meter.peak;
  out->mem_peak = st->be ? st->be->mem_peak : 0; /* 0: held by another process */
  out->sent_bytes = st->rec.sent_bytes;
  out->first_unit = pl->plan.st[stage_i].first_unit;
  out->end_unit = pl->plan.st[stage_i].end_unit;
  out->wall_busy_s = gp_pl_stage_busy(st);
  out->span_s = pl->span_s;
  out->fwd_s = st->rec.fwd_s;
  out->bwd_s = st->rec.bwd_s;
  out->steps = st->rec.steps;
  out->early = st->rec.early;
  memcpy(out->wall_s, st->rec.wall_kind_s, sizeof out->wall_s);
  out->device_time = st->rec.tm != NULL;
  out->allreduce_s = st->ar.span_s;
  out->allreduce_wait_s = st->ar.wait_s;
  out->allreduce_bytes = st->ar.bytes;
  out->allreduce_steps = st->ar.steps;
}

void gp_pipeline_reset_stats(gp_pipeline *pl) {
  pl->span_s = pl->replay_span_s = pl->replay_busy_s = pl->pace_busy_s = 0;
  pl->replay_lost = 0;
  for (int i = 0; i < pl->k; i++) {
    pl->st[i].meter.peak = pl->st[i].meter.live;
    if (pl->st[i].be) pl->st[i].be->mem_peak = pl->st[i].be->mem_used;
    pl->st[i].rec.sent_bytes = 0;
    pl->st[i].rec.fwd_s = pl->st[i].rec.bwd_s = 0;
    memset(pl->st[i].rec.wall_kind_s, 0, sizeof pl->st[i].rec.wall_kind_s);
    pl->st[i].rec.steps = pl->st[i].rec.early = 0;
    pl->st[i].ar.span_s = pl->st[i].ar.wait_s = 0;
    pl->st[i].ar.bytes = pl->st[i].ar.steps = 0;
  }
}

gp_status gp_bubble_sim(const gp_schedule *sc, const gp_stage_stats *ss, double *out) {
  /* steps that overlapped (stage 0 ran forwards early) are simulated overlapped */
  const int ahead = ss[0].early > 0 ? gp_schedule_early_forwards(sc) : 0;
  /* interleaved: a cost per chunk (virtual stage), ss[] being the chunks' stages */
  const int K = sc->stages * (sc->chunks > 1 ? sc->chunks : 1), M = sc->micro;
  gp_stage_cost cost[GP_MAX_DEVICES] = {{0}};
  *out = NAN;
  if (K > GP_MAX_DEVICES)
    return GP_ERR(GP_ERR_USAGE, "bubble: %d stages, at most %d", K, GP_MAX_DEVICES);
  for (int s = 0; s < K; s++) {
    if (ss[s].steps < 1) return GP_OK;
    const double *w = ss[s].wall_s, per = (double)ss[s].steps * M;
    /* a list with W: bwd is B and W together, wgt W's share */
    cost[s] = (gp_stage_cost){.fwd = w[GP_A_FORWARD] / per,
                              .bwd = (w[GP_A_BACKWARD] + w[GP_A_TRANSFER] + w[GP_A_WEIGHT]) / per,
                              .wgt = w[GP_A_WEIGHT] / per,
                              .step = w[GP_A_STEP] / (double)ss[s].steps};
  }
  gp_sim_result r;
  GP_TRY(gp_schedule_simulate_overlap(sc, cost, ahead, &r));
  *out = r.bubble;
  gp_sim_result_free(&r);
  return GP_OK;
}

gp_status gp_pipeline_bubble_sim(const gp_pipeline *pl, double *out) {
  gp_stage_stats ss[GP_MAX_DEVICES];
  for (int s = 0; s < pl->k; s++)
    gp_pipeline_stats(pl, s, &ss[s]);
  return gp_bubble_sim(&pl->sched, ss, out);
}

/* The step just run, replayed with each action's own time and instant hand-offs. A statistic:
 * where it cannot be had (out of memory), the replayed bubble is NAN until the next reset and
 * the step stands. */
void gp_pl_replay(gp_pipeline *pl) {
  const double *dur[GP_MAX_DEVICES], *rdur[GP_MAX_DEVICES];
  for (int s = 0; s < pl->k; s++) {
    dur[s] = pl->st[s].rec.act_s;
    rdur[s] = pl->st[s].rec.rec_s;
  }
  double span, busy;
  if (gp_schedule_replay(&pl->sched, dur, rdur, &span, &busy) != GP_OK) pl->replay_lost = 1;
  pl->replay_span_s += span;
  pl->replay_busy_s += busy;
}

int gp_pipeline_overlap(const gp_pipeline *pl) {
  return pl->ahead_max;
}

double gp_pipeline_bubble_replayed(const gp_pipeline *pl) {
  if (pl->replay_lost || pl->replay_span_s <= 0) return NAN;
  double idle = 1.0 - pl->replay_busy_s / (pl->devices * pl->replay_span_s);
  return idle < 0 ? 0 : idle;
}

double gp_pipeline_bubble_bottleneck(const gp_pipeline *pl) {
  if (pl->span_s <= 0) return NAN;
  double idle = 1.0 - pl->pace_busy_s / pl->span_s;
  return idle < 0 ? 0 : idle;
}
