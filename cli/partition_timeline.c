/* gpipe-partition --timeline: the simulated schedule of a partition, drawn as text. */
#include <stdio.h>
#include <string.h>

#include "cli/partition.h"
#include "core/plan/plan.h"

#define TL_WIDTH 100

/* The costs predictions are made from: under --by params the weights are no time, so the
 * stage times, bubble, speed-ups and timeline use the analytic FLOPs there. */
gp_unit_costs gp_part_time_costs(const gp_part_request *q, const gp_unit_costs *c) {
  gp_unit_costs t = *c;
  if (q->by == GP_COST_PARAMS) t.fwd = c->fwd_flops, t.bwd = c->bwd_flops;
  return t;
}

/* The simulated schedule of this partition (tc: gp_part_time_costs). */
gp_status gp_part_simulate(const gp_part_request *q, const gp_unit_costs *tc, const gp_partition *p,
                           gp_sim_events *ev, double *makespan) {
  gp_stage_cost cost[GP_MAX_DEVICES];
  for (int s = 0; s < p->stages; s++) {
    double f = 0, b = 0, w = 0;
    for (int u = p->first[s]; u < p->first[s + 1]; u++) {
      f += tc->fwd[u];
      b += tc->bwd[u];
      w += tc->params[u] > 0 ? 0.5 * tc->bwd[u] : 0.0; /* W's share, as the planner's */
    }
    cost[s] =
        (gp_stage_cost){.fwd = f / q->speed[s], .bwd = b / q->speed[s], .wgt = w / q->speed[s]};
  }
  gp_schedule sc; /* interleaved: a list a stage (device), costs a chunk */
  if (q->chunks > 1)
    GP_TRY(gp_schedule_build_interleaved(p->stages / q->chunks, q->micro, q->chunks, &sc));
  else if (q->remat == GP_REMAT_AUTO)
    GP_TRY(gp_schedule_build_drops(q->schedule, p->stages, q->micro, p->drop, &sc));
  else
    GP_TRY(gp_schedule_build(q->schedule, q->remat, p->stages, q->micro, &sc));
  gp_sim_result res;
  gp_status st = gp_schedule_simulate_events(&sc, cost, &res, ev);
  if (st == GP_OK) *makespan = res.makespan;
  gp_sim_result_free(&res);
  gp_schedule_free(&sc);
  return st;
}

/* One segment of a row: the letter, then the micro-batch number where it fits. */
static void paint(char *row, double scale, double t0, double t1, char ch, int micro) {
  int a = (int)lround(t0 * scale), b = (int)lround(t1 * scale);
  if (a >= TL_WIDTH) a = TL_WIDTH - 1;
  if (b <= a) b = a + 1; /* everything that ran shows, if only as one cell */
  if (b > TL_WIDTH) b = TL_WIDTH;
  memset(row + a, ch, (size_t)(b - a));
  char num[16];
  int len = snprintf(num, sizeof num, "%d", micro);
  if (b - a >= len + 1) memcpy(row + a + 1, num, (size_t)len);
}

/* Interleaved: each chunk of a stage its letters (chunk 0 F and B, as other schedules). */
static char fwd_letter(int chunk) {
  return chunk < 4 ? "FGHI"[chunk] : '+';
}
static char bwd_letter(int chunk) {
  return chunk < 4 ? "BCDE"[chunk] : '-';
}

void gp_part_print_timeline(const gp_part_request *q, const gp_sim_events *ev, double makespan) {
  static const char *const unit[] = {"FLOP", "FLOP", "s"};
  double scale = makespan > 0 ? TL_WIDTH / makespan : 0;
  char col[32];
  double per = makespan / TL_WIDTH;
  if (q->by == GP_COST_TIME)
    snprintf(col, sizeof col, "%.3g ms", per * 1e3);
  else
    snprintf(col, sizeof col, "%.3g G%s", per / 1e9, unit[q->by]);
  const int devs = q->stages / q->chunks;
  printf("\ntimeline (%s, %d stage%s x %d micro-batch%s; one column = %s%s)\n",
         gp_schedule_names()[q->schedule], devs, devs == 1 ? "" : "s", q->micro,
         q->micro == 1 ? "" : "es", col,
         q->by == GP_COST_FLOPS    ? " of work"
         : q->by == GP_COST_PARAMS ? " of work (by FLOPs)"
                                   : "");
  for (int s = 0; s < ev->stages; s++) {
    char row[TL_WIDTH + 1];
    memset(row, '.', TL_WIDTH);
    row[TL_WIDTH] = 0;
    for (int i = 0; i < ev->n[s]; i++) {
      const gp_sim_event *e = &ev->event[s][i];
      if (e->kind == GP_A_FORWARD) {
        paint(row, scale, e->start, e->end, fwd_letter(e->chunk), e->micro);
      } else if (e->kind == GP_A_WEIGHT) {
        paint(row, scale, e->start, e->end, 'W', e->micro);
      } else {
        if (e->rend > e->rstart) paint(row, scale, e->rstart, e->rend, 'R', e->micro);
        paint(row, scale, e->start, e->end, bwd_letter(e->chunk), e->micro);
      }
    }
    printf("%5d |%s|\n", s, row);
  }
  if (q->chunks > 1) {
    printf("legend: stage s's chunks by letter: ");
    for (int c = 0; c < q->chunks && c < 4; c++)
      if (c)
        printf(", %c/%c chunk s + %d", fwd_letter(c), bwd_letter(c), c * devs);
      else
        printf("%c/%c chunk s", fwd_letter(c), bwd_letter(c));
    printf("%s (forward/backward), each followed by its micro-batch where it fits; . idle\n",
           q->chunks > 4 ? ", +/- the others" : "");
    return;
  }
  printf("legend: F forward, R recompute, B backward%s, each followed by its micro-batch where it "
         "fits; . idle\n",
         q->schedule == GP_SCHED_ZB_H1 || q->schedule == GP_SCHED_ZB_H2
             ? " (input gradients), W weight gradients"
             : "");
}
