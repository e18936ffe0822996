/* A pipeline's record of where time goes: busy time per action, per-stage statistics, and
 * the Chrome trace-event JSON of every action (and layer) of every stage. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/io/json.h"
#include "core/io/target.h"
#include "core/exec/internal.h"

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

/* Adds d seconds of action `at` (of kind `kind`) to the stage's statistics; `compute` (host:
 * see busy_s; device: d) to its forward or backward time. */
static void account(stage *st, gp_action_kind k, int at, double d, double compute) {
  st->wall_kind_s[k] += d;
  (k == GP_A_RECOMPUTE ? st->rec_s : st->act_s)[at] += d;
  if (k == GP_A_FORWARD) st->fwd_s += compute;
  if (k == GP_A_RECOMPUTE || k == GP_A_BACKWARD) st->bwd_s += compute;
}

gp_status gp_pl_record(stage *st, gp_action_kind kind, int micro, double t0, double t1,
                       double busy, double waited) {
  if (st->pl->trace) trace_add(st, (trace_ev){kind, micro, -1, st->pl->step, t0, t1, busy, 0});
  if (!st->tm) {
    account(st, kind, st->at, t1 - t0 - waited, busy);
    return GP_OK;
  }
  if (st->n_span >= st->cap_span)
    return GP_ERR(GP_ERR_RUNTIME, "stage %d: more timed actions in a step than its schedule has",
                  st->index);
  GP_TRY(st->be->event_record(st->be, GP_Q_COMPUTE, st->tm[2 * st->n_span + 1]));
  st->span[st->n_span++] = (device_span){kind, micro, st->at, waited};
  return GP_OK;
}

gp_status gp_pl_span_begin(stage *st) {
  if (!st->tm || st->n_span >= st->cap_span) return GP_OK; /* gp_pl_record says it */
  return st->be->event_record(st->be, GP_Q_COMPUTE, st->tm[2 * st->n_span]);
}

gp_status gp_pl_device_step_start(stage *st) {
  if (!st->tm) return GP_OK;
  gp_backend *be = st->be;
  /* on an idle queue the reference passes as it is recorded, so device times map to host
   * times by one offset (the host spans of the trace and the device's line up) */
  GP_TRY(be->sync(be));
  st->n_span = st->n_lspan = 0;
  st->ref_host = now_s();
  return be->event_record(be, GP_Q_COMPUTE, st->tm[2 * st->cap_span]);
}

/* Where timer pair i of tm passed, in seconds after the step's reference. */
static gp_status pair_times(stage *st, gp_event **tm, int i, double *a, double *b) {
  gp_event *ref = st->tm[2 * st->cap_span];
  GP_TRY(st->be->event_elapsed(st->be, ref, tm[2 * i], a));
  return st->be->event_elapsed(st->be, ref, tm[2 * i + 1], b);
}

gp_status gp_pl_device_step_end(stage *st) {
  if (!st->tm) return GP_OK;
  GP_TRY(st->be->sync(st->be));
  for (int i = 0; i < st->n_lspan; i++) {
    trace_ev ev = st->lspan[i];
    double a, b;
    GP_TRY(pair_times(st, st->ltm, i, &a, &b));
    ev.t0 = st->ref_host + a;
    ev.t1 = st->ref_host + b;
    ev.busy = b - a;
    trace_add(st, ev);
  }
  for (int i = 0; i < st->n_span; i++) {
    const device_span *sp = &st->span[i];
    double a, b;
    GP_TRY(pair_times(st, st->tm, i, &a, &b));
    /* the host's waits at the step's barriers left the queue idle (each barrier follows a
     * read of a device value, which drains it) */
    double d = b - a - sp->waited;
    if (d < 0) d = 0;
    account(st, sp->kind, sp->at, d, d);
    if (st->pl->trace)
      trace_add(st, (trace_ev){sp->kind, sp->micro, -1, st->pl->step, st->ref_host + a,
                               st->ref_host + b, d, 1});
  }
  return GP_OK;
}

/* Room for one more layer span's timers on a device-timed stage (0 when it cannot grow:
 * that layer is left out of the device row, a gap in the trace rather than a failed step). */
static int layer_room(stage *st) {
  if (st->n_lspan < st->cap_lspan) return 1;
  int cap = st->cap_lspan ? 2 * st->cap_lspan : 256;
  gp_event **ltm = realloc(st->ltm, 2 * (size_t)cap * sizeof *ltm);
  if (!ltm) return 0;
  st->ltm = ltm;
  trace_ev *sp = realloc(st->lspan, (size_t)cap * sizeof *sp);
  if (!sp) return 0;
  st->lspan = sp;
  for (int i = 2 * st->cap_lspan; i < 2 * cap; i++)
    if (st->be->timer_create(st->be, &ltm[i]) != GP_OK) {
      for (int j = 2 * st->cap_lspan; j < i; j++)
        st->be->event_destroy(st->be, ltm[j]);
      return 0;
    }
  st->cap_lspan = cap;
  return 1;
}

/* gp_exec's on_layer when tracing: a span per layer, nested in its action's (and not counted
 * as busy time again). On a GPU the host's span is the launch; the device row gets the layer
 * as the GPU ran it (timers, read with the actions'). */
void gp_pl_record_layer(const gp_exec *e, int node, int backward, int end) {
  stage *st = e->on_layer_ctx;
  double t = now_s();
  gp_action_kind kind = backward ? GP_A_BACKWARD : e->recompute ? GP_A_RECOMPUTE : GP_A_FORWARD;
  if (st->tm) {
    /* a timer that cannot be recorded leaves the device row without this layer */
    if (!end && layer_room(st))
      st->lspan[st->n_lspan].node =
          st->be->event_record(st->be, GP_Q_COMPUTE, st->ltm[2 * st->n_lspan]) == GP_OK ? node : -1;
    else if (end && st->n_lspan < st->cap_lspan && st->lspan[st->n_lspan].node == node &&
             st->be->event_record(st->be, GP_Q_COMPUTE, st->ltm[2 * st->n_lspan + 1]) == GP_OK)
      st->lspan[st->n_lspan++] = (trace_ev){kind, e->micro, node, st->pl->step, 0, 0, 0, 1};
  }
  if (!end) {
    st->layer_t0 = t;
    return;
  }
  trace_add(st,
            (trace_ev){kind, e->micro, node, st->pl->step, st->layer_t0, t, t - st->layer_t0, 0});
}

void gp_pipeline_stats(const gp_pipeline *pl, int stage_i, gp_stage_stats *out) {
  const stage *st = &pl->st[stage_i];
  out->peak_act_bytes = st->meter.peak;
  out->mem_peak = st->be->mem_peak;
  out->sent_bytes = st->sent_bytes;
  out->first_unit = pl->plan.st[stage_i].first_unit;
  out->end_unit = pl->plan.st[stage_i].end_unit;
  out->wall_busy_s = gp_pl_stage_busy(st);
  out->span_s = pl->span_s;
  out->fwd_s = st->fwd_s;
  out->bwd_s = st->bwd_s;
  out->steps = st->steps;
  memcpy(out->wall_s, st->wall_kind_s, sizeof out->wall_s);
  out->device_time = st->tm != NULL;
}

void gp_pipeline_reset_stats(gp_pipeline *pl) {
  pl->span_s = pl->replay_span_s = pl->replay_busy_s = pl->pace_busy_s = 0;
  pl->replay_lost = 0;
  for (int i = 0; i < pl->k; i++) {
    pl->st[i].meter.peak = pl->st[i].meter.live;
    pl->st[i].be->mem_peak = pl->st[i].be->mem_used;
    pl->st[i].sent_bytes = 0;
    pl->st[i].fwd_s = pl->st[i].bwd_s = 0;
    memset(pl->st[i].wall_kind_s, 0, sizeof pl->st[i].wall_kind_s);
    pl->st[i].steps = 0;
  }
}

gp_status gp_bubble_sim(const gp_schedule *sc, const gp_stage_stats *ss, double *out) {
  const int K = sc->stages, M = sc->micro;
  gp_stage_cost cost[GP_MAX_DEVICES] = {{0}};
  *out = NAN;
  if (K > GP_MAX_DEVICES)
    return GP_ERR(GP_ERR_USAGE, "bubble: %d stages, at most %d", K, GP_MAX_DEVICES);
  for (int s = 0; s < K; s++) {
    if (ss[s].steps < 1) return GP_OK;
    const double *w = ss[s].wall_s, per = (double)ss[s].steps * M;
    cost[s] = (gp_stage_cost){.fwd = w[GP_A_FORWARD] / per,
                              .bwd = (w[GP_A_BACKWARD] + w[GP_A_TRANSFER]) / per,
                              .step = w[GP_A_STEP] / (double)ss[s].steps};
  }
  gp_sim_result r;
  GP_TRY(gp_schedule_simulate(sc, cost, &r));
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

/* The trace row of stage s's device spans. */
static int device_tid(int s) {
  return GP_MAX_DEVICES + s;
}

/* One layer's span (category "layer", named by the layer's path), nested in its action. */
static void write_layer_event(FILE *f, const gp_pipeline *pl, int s, const trace_ev *e) {
  const gp_layer *l = &pl->m->nodes[e->node].layer;
  const char *pass = gp_action_name(e->kind);
  fprintf(f, ",\n{\"name\": ");
  gp_json_write_str(f, l->path);
  fprintf(f,
          ", \"cat\": \"layer\", \"ph\": \"X\", \"pid\": 0, \"tid\": %d, \"ts\": %.3f, "
          "\"dur\": %.3f, \"args\": {\"step\": %lld, \"micro_batch\": %d, \"pass\": \"%s\", "
          "\"type\": \"%s\"}}",
          e->device ? device_tid(s) : s, (e->t0 - pl->t_origin) * 1e6, (e->t1 - e->t0) * 1e6,
          (long long)e->step + 1, e->micro, pass, l->type->name);
}

static gp_status write_events(FILE *f, void *ctx) {
  const gp_pipeline *pl = ctx;
  fprintf(f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
  const char *sep = "";
  for (int s = 0; s < pl->k; s++) {
    const stage *st = &pl->st[s];
    /* a device-timed stage has two rows: the host launching the actions (and their layers),
     * and below it the device running them */
    fprintf(f,
            "%s{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": %d, "
            "\"args\": {\"name\": \"stage %d (units %d..%d)%s\"}}",
            sep, s, s, pl->plan.st[s].first_unit, pl->plan.st[s].end_unit - 1,
            st->tm ? ", host" : "");
    sep = ",\n";
    if (st->tm)
      fprintf(f,
              "%s{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": %d, "
              "\"args\": {\"name\": \"stage %d on %s, device time\"}},\n"
              "{\"name\": \"thread_sort_index\", \"ph\": \"M\", \"pid\": 0, \"tid\": %d, "
              "\"args\": {\"sort_index\": %d}},\n"
              "{\"name\": \"thread_sort_index\", \"ph\": \"M\", \"pid\": 0, \"tid\": %d, "
              "\"args\": {\"sort_index\": %d}}",
              sep, device_tid(s), s, pl->plan.st[s].device, device_tid(s), 2 * s + 1, s, 2 * s);
    for (int64_t i = 0; i < st->n_ev; i++) {
      const trace_ev *e = &st->ev[i];
      if (e->node >= 0) {
        write_layer_event(f, pl, s, e);
        continue;
      }
      /* the trace's names as before: "optimizer" for the step's category, "step" its name */
      const char *cat = e->kind == GP_A_STEP ? "optimizer" : gp_action_name(e->kind);
      char name[32];
      if (e->kind == GP_A_STEP)
        snprintf(name, sizeof name, "step");
      else
        snprintf(name, sizeof name, "%s%d", gp_action_letter(e->kind), e->micro);
      fprintf(f,
              "%s{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": 0, "
              "\"tid\": %d, \"ts\": %.3f, \"dur\": %.3f, \"args\": {\"step\": %lld, "
              "\"micro_batch\": %d, \"compute_us\": %.3f}}",
              sep, name, cat, e->device ? device_tid(s) : s, (e->t0 - pl->t_origin) * 1e6,
              (e->t1 - e->t0) * 1e6, (long long)e->step + 1, e->micro, e->busy * 1e6);
    }
  }
  fprintf(f, "\n]}\n");
  return GP_OK;
}

gp_status gp_pipeline_write_trace(const gp_pipeline *pl, const char *path) {
  return gp_io_write_file(path, write_events, (void *)pl);
}
