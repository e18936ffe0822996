/* A pipeline's record of where time goes: busy time per action, per-stage statistics, and
 * the Chrome trace-event JSON of every action (and layer) of every stage. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/io/json.h"
#include "core/io/target.h"
#include "core/train/pipeline_internal.h"

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

/* Counts an action's wall time as busy, less `waited` (its waits for other stages), and, when
 * tracing, records it. */
void gp_pl_record(stage *st, char kind, int micro, double t0, double t1, double busy,
                  double waited) {
  const gp_act_kind k = kind == 'F'   ? GP_ACT_FORWARD
                        : kind == 'R' ? GP_ACT_RECOMPUTE
                        : kind == 'B' ? GP_ACT_BACKWARD
                        : kind == 'T' ? GP_ACT_TRANSFER
                                      : GP_ACT_STEP;
  st->wall_kind_s[k] += t1 - t0 - waited;
  (k == GP_ACT_RECOMPUTE ? st->rec_s : st->act_s)[st->at] += t1 - t0 - waited;
  if (st->pl->trace) trace_add(st, (trace_ev){kind, micro, -1, st->pl->step, t0, t1, busy});
}

/* gp_exec's on_layer when tracing: a span per layer, nested in its action's (and not counted
 * as busy time again). On a GPU the span is the host launching the layer, not its kernels. */
void gp_pl_record_layer(const gp_exec *e, int node, int backward, int end) {
  stage *st = e->on_layer_ctx;
  double t = now_s();
  if (!end) {
    st->layer_t0 = t;
    return;
  }
  char kind = backward ? 'b' : e->recompute ? 'r' : 'f';
  trace_add(st, (trace_ev){kind, e->micro, node, st->pl->step, st->layer_t0, t, t - st->layer_t0});
}

void gp_pipeline_stats(const gp_pipeline *pl, int stage_i, gp_stage_stats *out) {
  const stage *st = &pl->st[stage_i];
  out->peak_act_bytes = st->meter.peak;
  out->mem_peak = st->be->mem_peak;
  out->sent_bytes = st->sent_bytes;
  out->first_unit = pl->plan.st[stage_i].first_unit;
  out->end_unit = pl->plan.st[stage_i].end_unit;
  out->wall_busy_s = 0;
  for (int k = 0; k < GP_ACT_KINDS; k++)
    out->wall_busy_s += st->wall_kind_s[k];
  out->span_s = pl->span_s;
  out->fwd_s = st->fwd_s;
  out->bwd_s = st->bwd_s;
  out->steps = st->steps;
  memcpy(out->wall_s, st->wall_kind_s, sizeof out->wall_s);
}

void gp_pipeline_reset_stats(gp_pipeline *pl) {
  pl->span_s = pl->replay_span_s = pl->replay_busy_s = 0;
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
    cost[s] = (gp_stage_cost){.fwd = w[GP_ACT_FORWARD] / per,
                              .bwd = (w[GP_ACT_BACKWARD] + w[GP_ACT_TRANSFER]) / per,
                              .step = w[GP_ACT_STEP] / (double)ss[s].steps};
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

static gp_status write_events(FILE *f, void *ctx) {
  const gp_pipeline *pl = ctx;
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
  return GP_OK;
}

gp_status gp_pipeline_write_trace(const gp_pipeline *pl, const char *path) {
  return gp_io_write_file(path, write_events, (void *)pl);
}
