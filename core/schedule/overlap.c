/* The steady-state step of a schedule whose consecutive steps overlap (core/exec/stage.c,
 * run_ahead): stage 0, its update done, runs the next step's first forwards while the later
 * stages finish the step, until every one of them is done. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/schedule/lists.h"

/* A few steps, each starting where the last one left the stages, reach the steady state: the
 * step then repeats, and its period is what a long run measures per step. */
#define STEPS 4

int gp_schedule_early_forwards(const gp_schedule *s) {
  int n = 0; /* stage 0's leading forwards, in order, each in a slot of its own */
  if (s->stages < 2 || s->chunks > 1) return 0;
  while (n < s->n_actions[0] && n < s->slots[0] && s->actions[0][n].kind == GP_A_FORWARD &&
         s->actions[0][n].micro == n)
    n++;
  return n;
}

gp_status gp_schedule_simulate_overlap(const gp_schedule *s, const gp_stage_cost *cost, int ahead,
                                       gp_sim_result *out) {
  GP_TRY(gp_schedule_simulate(s, cost, out));
  const int K = s->stages;
  if (ahead <= 0 || K < 2 || s->chunks > 1) return GP_OK;
  double *free_at = calloc((size_t)K, sizeof *free_at), *end = calloc((size_t)K, sizeof *end);
  double *pre_end = calloc((size_t)ahead, sizeof *pre_end);
  gp_status st = free_at && end && pre_end
                     ? GP_OK
                     : GP_ERR(GP_ERR_NOMEM, "schedule: out of memory for the overlap");
  gp_walk_from from = {free_at, 0, pre_end};
  double start = 0, period = out->makespan; /* a step's command starts when the last ended */
  for (int i = 0; st == GP_OK && i < STEPS; i++) {
    if ((st = gp_schedule_walk_from(s, cost, &from, end)) != GP_OK) break;
    /* stage 0 runs forwards of the next step from its end while another stage is busy (it looks
     * before each), the next command starts once every stage (stage 0's last forward too) is
     * done */
    double tail = 0, t = end[0];
    for (int k = 1; k < K; k++)
      tail = fmax(tail, end[k]);
    from.pre = 0;
    while (from.pre < ahead && t < tail)
      pre_end[from.pre++] = t += cost[0].fwd;
    const double next = fmax(tail, t);
    period = next - start;
    start = next;
    for (int k = 0; k < K; k++)
      free_at[k] = next;
  }
  if (st == GP_OK && period > 0 && period < out->makespan) {
    double busy = 0;
    for (int k = 0; k < K; k++)
      busy += out->stage[k].busy;
    out->makespan = period;
    out->bubble = fmax(0.0, 1.0 - busy / (K * period));
  }
  free(free_at);
  free(end);
  free(pre_end);
  if (st != GP_OK) gp_sim_result_free(out);
  return st;
}
