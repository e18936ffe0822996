/* The Chrome trace-event JSON of every action (and layer) of every stage, and the layers' spans
 * that go into it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dist/dist.h"
#include "core/io/json.h"
#include "core/io/target.h"
#include "core/exec/internal.h"

/* Appends a trace event (a gap when out of memory beats a failed step); the array only
 * grows, so steady state does not allocate. */
void gp_pl_trace_add(stage *st, trace_ev ev) {
  if (st->rec.n_ev == st->rec.cap_ev) {
    int64_t cap = st->rec.cap_ev ? st->rec.cap_ev * 2 : 1024;
    trace_ev *grown = realloc(st->rec.ev, (size_t)cap * sizeof *grown);
    if (!grown) return;
    st->rec.ev = grown;
    st->rec.cap_ev = cap;
  }
  st->rec.ev[st->rec.n_ev++] = ev;
}

/* Room for one more layer span's timers on a device-timed stage (0 when it cannot grow:
 * that layer is left out of the device row, a gap in the trace rather than a failed step). */
static int layer_room(stage *st) {
  if (st->rec.n_lspan < st->rec.cap_lspan) return 1;
  int cap = st->rec.cap_lspan ? 2 * st->rec.cap_lspan : 256;
  gp_event **ltm = realloc(st->rec.ltm, 2 * (size_t)cap * sizeof *ltm);
  if (!ltm) return 0;
  st->rec.ltm = ltm;
  trace_ev *sp = realloc(st->rec.lspan, (size_t)cap * sizeof *sp);
  if (!sp) return 0;
  st->rec.lspan = sp;
  for (int i = 2 * st->rec.cap_lspan; i < 2 * cap; i++)
    if (st->be->timer_create(st->be, &ltm[i]) != GP_OK) {
      for (int j = 2 * st->rec.cap_lspan; j < i; j++)
        st->be->event_destroy(st->be, ltm[j]);
      return 0;
    }
  st->rec.cap_lspan = cap;
  return 1;
}

/* gp_exec's on_layer when tracing: a span per layer, nested in its action's (and not counted
 * as busy time again). On a GPU the host's span is the launch; the device row gets the layer
 * as the GPU ran it (timers, read with the actions'). */
void gp_pl_record_layer(const gp_exec *e, int node, int backward, int end) {
  stage *st = e->on_layer_ctx;
  double t = now_s();
  gp_action_kind kind = backward ? (e->grad_part == GP_GRAD_WEIGHT ? GP_A_WEIGHT : GP_A_BACKWARD)
                        : e->recompute ? GP_A_RECOMPUTE
                                       : GP_A_FORWARD;
  if (st->rec.tm) {
    /* a timer that cannot be recorded leaves the device row without this layer */
    if (!end && layer_room(st))
      st->rec.lspan[st->rec.n_lspan].node =
          st->be->event_record(st->be, GP_Q_COMPUTE, st->rec.ltm[2 * st->rec.n_lspan]) == GP_OK
              ? node
              : -1;
    else if (end && st->rec.n_lspan < st->rec.cap_lspan &&
             st->rec.lspan[st->rec.n_lspan].node == node &&
             st->be->event_record(st->be, GP_Q_COMPUTE, st->rec.ltm[2 * st->rec.n_lspan + 1]) ==
                 GP_OK)
      st->rec.lspan[st->rec.n_lspan++] = (trace_ev){kind, e->micro, node, st->step, 0, 0, 0, 1};
  }
  if (!end) {
    st->rec.layer_t0 = t;
    return;
  }
  gp_pl_trace_add(
      st, (trace_ev){kind, e->micro, node, st->step, st->rec.layer_t0, t, t - st->rec.layer_t0, 0});
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
          ", \"cat\": \"layer\", \"ph\": \"X\", \"pid\": %d, \"tid\": %d, \"ts\": %.3f, "
          "\"dur\": %.3f, \"args\": {\"step\": %lld, \"micro_batch\": %d, \"pass\": \"%s\", "
          "\"type\": \"%s\"}}",
          pl->lay.rank, e->device ? device_tid(s) : s, (e->t0 - pl->t_origin) * 1e6,
          (e->t1 - e->t0) * 1e6, (long long)e->step + 1, e->micro, pass, l->type->name);
}

/* This process's events (its stages', process row pid = its rank), each line after the first
 * starting with ",\n". */
static void write_stages(FILE *f, const gp_pipeline *pl) {
  const char *sep = "";
  const int pid = pl->lay.rank;
  if (pl->dist) {
    fprintf(f,
            "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": {\"name\": "
            "\"rank %d: replica %d, position %d\"}},\n"
            "{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": %d, \"args\": "
            "{\"sort_index\": %d}}",
            pid, pid, pl->lay.replica, pl->lay.pos, pid, pid);
    sep = ",\n";
  }
  for (int s = 0; s < pl->k; s++) {
    if (!gp_layout_local(&pl->lay, s)) continue;
    const stage *st = &pl->st[s];
    /* a device-timed stage has two rows: the host launching the actions (and their layers),
     * and below it the device running them */
    char who[48]; /* interleaved: a row per chunk, named with its device (stage) */
    if (pl->chunks > 1)
      snprintf(who, sizeof who, "chunk %d on stage %d", s, s % pl->devices);
    else
      snprintf(who, sizeof who, "stage %d", s);
    fprintf(f,
            "%s{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, "
            "\"args\": {\"name\": \"%s (units %d..%d)%s\"}}",
            sep, pid, s, who, pl->plan.st[s].first_unit, pl->plan.st[s].end_unit - 1,
            st->rec.tm ? ", host" : "");
    sep = ",\n";
    if (st->rec.tm)
      fprintf(f,
              "%s{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, "
              "\"args\": {\"name\": \"stage %d on %s, device time\"}},\n"
              "{\"name\": \"thread_sort_index\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, "
              "\"args\": {\"sort_index\": %d}},\n"
              "{\"name\": \"thread_sort_index\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, "
              "\"args\": {\"sort_index\": %d}}",
              sep, pid, device_tid(s), s, pl->plan.st[s].device, pid, device_tid(s), 2 * s + 1, pid,
              s, 2 * s);
    for (int64_t i = 0; i < st->rec.n_ev; i++) {
      const trace_ev *e = &st->rec.ev[i];
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
              "%s{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": %d, "
              "\"tid\": %d, \"ts\": %.3f, \"dur\": %.3f, \"args\": {\"step\": %lld, "
              "\"micro_batch\": %d, \"compute_us\": %.3f}}",
              sep, name, cat, pid, e->device ? device_tid(s) : s, (e->t0 - pl->t_origin) * 1e6,
              (e->t1 - e->t0) * 1e6, (long long)e->step + 1, e->micro, e->busy * 1e6);
    }
  }
}

/* A process's fragment: its events as written, to be joined into rank 0's trace. */
static gp_status write_fragment(FILE *f, void *ctx) {
  write_stages(f, ctx);
  return GP_OK;
}

typedef struct trace_ctx {
  const gp_pipeline *pl;
  const char *path;
} trace_ctx;

/* The trace: this process's events, then (rank 0 across processes) every other rank's fragment
 * PATH.rankN, copied as it is. */
static gp_status write_events(FILE *f, void *ctx) {
  const trace_ctx *c = ctx;
  fprintf(f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
  write_stages(f, c->pl);
  for (int r = 1; c->pl->dist && r < c->pl->lay.world; r++) {
    char part[4200], buf[65536];
    snprintf(part, sizeof part, "%.4000s.rank%d", c->path, r);
    FILE *in = fopen(part, "rb");
    if (!in) return GP_ERR(GP_ERR_IO, "%s: rank %d's part of the trace is missing", part, r);
    size_t n;
    int first = 1;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0) {
      if (first) fputs(",\n", f);
      first = 0;
      fwrite(buf, 1, n, f);
    }
    fclose(in);
  }
  fprintf(f, "\n]}\n");
  return GP_OK;
}

gp_status gp_pipeline_write_trace(const gp_pipeline *pl, const char *path) {
  trace_ctx c = {pl, path};
  if (!pl->dist) return gp_io_write_file(path, write_events, &c);
  /* across processes (every one calls this): each writes its fragment beside the trace (a
   * folder every host sees), rank 0 joins them into one trace, a process row per rank */
  char part[4200];
  snprintf(part, sizeof part, "%.4000s.rank%d", path, pl->lay.rank);
  gp_status s = pl->lay.rank ? gp_io_write_file(part, write_fragment, (void *)pl) : GP_OK;
  int all;
  gp_status b = gp_dist_all(pl->dist, s == GP_OK, &all);
  if (s != GP_OK || b != GP_OK) return s != GP_OK ? s : b;
  if (!all) return GP_ERR(GP_ERR_IO, "%s: another process could not write its part", path);
  if (pl->lay.rank == 0) s = gp_io_write_file(path, write_events, &c);
  for (int r = 1; pl->lay.rank == 0 && r < pl->lay.world; r++) {
    snprintf(part, sizeof part, "%.4000s.rank%d", path, r);
    remove(part);
  }
  return s;
}
