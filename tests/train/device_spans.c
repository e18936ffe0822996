/* Checks of a device-timed pipeline's spans: see device_spans.h. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/exec/internal.h"
#include "tests/train/device_spans.h"

static int failed, made;

static void check(int ok, const char *what, const char *cfg) {
  made++;
  if (ok) return;
  failed++;
  printf("FAIL: %s: %s\n", cfg, what);
}

/* The device rows of a timed run against its host rows and statistics. */
int device_spans_check(const gp_pipeline *pl, int steps, int micro, const char *cfg, int *checks) {
  failed = made = 0;
  for (int s = 0; s < pl->k; s++) {
    const stage *st = &pl->st[s];
    check(st->rec.tm != NULL, "the stage is device-timed", cfg);
    if (!st->rec.tm) break;
    int host[GP_A_KINDS] = {0}, dev[GP_A_KINDS] = {0};
    double sum[GP_A_KINDS] = {0}, prev_end = -INFINITY;
    int tags = 1, order = 1;
    const trace_ev *h = st->rec.ev, *end = st->rec.ev + st->rec.n_ev;
    for (const trace_ev *e = st->rec.ev; e < end; e++) {
      int k = (int)e->kind;
      if (e->node >= 0) continue;
      if (!e->device) {
        host[k]++;
        continue;
      }
      dev[k]++;
      sum[k] += e->busy;
      /* the n-th device span of a step is the n-th host action (layers aside) */
      while (h < end && (h->device || h->node >= 0))
        h++;
      tags &= h < end && h->kind == e->kind && h->micro == e->micro && h->step == e->step;
      if (h < end) h++;
      order &= e->t0 >= prev_end && e->t1 >= e->t0;
      prev_end = e->t1;
      if (e->kind == GP_A_STEP) prev_end = -INFINITY; /* the next step has its own reference */
    }
    char what[160];
    for (int k = 0; k < GP_A_KINDS; k++) {
      snprintf(what, sizeof what, "stage %d: %d host %s spans, %d device ones", s, host[k],
               gp_action_letter(k), dev[k]);
      check(host[k] == dev[k], what, cfg);
      snprintf(what, sizeof what, "stage %d: %s time %.9f s, its device spans %.9f s", s,
               gp_action_letter(k), st->rec.wall_kind_s[k], sum[k]);
      check(fabs(st->rec.wall_kind_s[k] - sum[k]) <= 1e-9 * (1 + sum[k]), what, cfg);
    }
    snprintf(what, sizeof what, "stage %d: %d forwards, %d backwards, %d steps", s,
             dev[GP_A_FORWARD], dev[GP_A_BACKWARD], dev[GP_A_STEP]);
    check(dev[GP_A_FORWARD] == steps * micro && dev[GP_A_BACKWARD] == steps * micro &&
              dev[GP_A_STEP] == steps,
          what, cfg);
    snprintf(what, sizeof what, "stage %d: %d hand-offs back", s, dev[GP_A_TRANSFER]);
    check(dev[GP_A_TRANSFER] == (s > 0 ? steps * micro : 0), what, cfg);
    check(tags, "each device span is tagged as the host action it times", cfg);
    /* a span's time is its length, less the host's waits at the step's barriers (clipping's:
     * the queue was idle then); the last step's waits are still there to see */
    int lengths = 1, last_s = -1;
    for (int64_t i = 0; i < st->rec.n_ev; i++) {
      const trace_ev *e = &st->rec.ev[i];
      if (!e->device) continue;
      if (e->kind == GP_A_STEP) last_s = (int)i;
      lengths &= e->kind == GP_A_STEP || fabs(e->busy - (e->t1 - e->t0)) <= 1e-8;
    }
    check(lengths, "an action's device time is its span's length", cfg);
    const double waited = st->rec.span[st->rec.n_span - 1].waited;
    const trace_ev *ls = &st->rec.ev[last_s > 0 ? last_s : 0];
    snprintf(what, sizeof what, "stage %d: the last step %.9f s, its span %.9f s, waits %.9f s", s,
             ls->busy, ls->t1 - ls->t0, waited);
    check(last_s > 0 && st->rec.span[st->rec.n_span - 1].kind == GP_A_STEP && waited > 0 &&
              fabs(ls->busy - fmax(0, ls->t1 - ls->t0 - waited)) <= 1e-8,
          what, cfg);
    check(order, "a stage's device spans follow each other", cfg);
    double b = st->rec.wall_kind_s[GP_A_BACKWARD] + st->rec.wall_kind_s[GP_A_RECOMPUTE];
    check(st->rec.fwd_s == st->rec.wall_kind_s[GP_A_FORWARD] &&
              fabs(st->rec.bwd_s - b) <= 1e-9 * (1 + b),
          "forward and backward times are the device's", cfg);
  }
  /* every device span lies inside the run */
  double d0 = INFINITY, d1 = -INFINITY;
  for (int s = 0; s < pl->k; s++)
    for (int64_t i = 0; i < pl->st[s].rec.n_ev; i++)
      if (pl->st[s].rec.ev[i].device) {
        d0 = fmin(d0, pl->st[s].rec.ev[i].t0);
        d1 = fmax(d1, pl->st[s].rec.ev[i].t1);
      }
  check(d0 >= pl->t_origin && d1 <= now_s(), "device spans inside the run", cfg);
  /* the bubbles are the devices' (interleaved: a device's chunks together) */
  double bubble = 0, least = 1;
  gp_stage_stats all[GP_MAX_DEVICES];
  const int v = gp_pipeline_chunks(pl), devs = pl->k / v;
  for (int s = 0; s < pl->k; s++) {
    gp_pipeline_stats(pl, s, &all[s]);
    check(all[s].device_time == 1, "the statistics say they are the device's", cfg);
  }
  for (int d = 0; d < devs; d++) {
    bubble += gp_device_idle(all, pl->k, v, d) / devs;
    least = fmin(least, gp_device_idle(all, pl->k, v, d));
  }
  double rep = gp_pipeline_bubble_replayed(pl);
  char what[112];
  snprintf(what, sizeof what, "0 <= replayed bubble %.4f <= measured %.4f < 1", rep, bubble);
  check(rep >= 0 && rep <= bubble + 1e-9 && bubble < 1, what, cfg);
  /* each step's busiest stage idles no more than any stage does over the steps */
  double slow = gp_pipeline_bubble_bottleneck(pl);
  snprintf(what, sizeof what, "0 <= the slowest stage's idle %.4f <= the least idle stage's %.4f",
           slow, least);
  check(slow >= 0 && slow <= least + 1e-9, what, cfg);
  *checks += made;
  return failed;
}
