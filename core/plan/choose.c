/* pipeline.schedule auto: every named schedule simulated on its split, the fastest that fits. */
#include "core/plan/choose.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/plan/plan.h"

gp_status gp_schedule_choose(const gp_unit_costs *c, const gp_partition_req *r, const int *first,
                             gp_schedule_choice *ch, gp_partition *out) {
  memset(ch, 0, sizeof *ch);
  ch->chosen = -1;
  const char *const *names = gp_schedule_names();
  gp_status first_err = GP_OK;
  char first_msg[512] = "";
  for (int i = 0; names[i] && ch->n < GP_CHOOSE_MAX; i++) {
    int at = ch->n++;
    gp_partition_req q = *r;
    q.schedule = (gp_schedule_kind)i;
    ch->kind[at] = q.schedule;
    if (gp_schedule_keeps_all(q.schedule)) { /* they re-materialize nothing */
      if (q.remat == GP_REMAT_ALWAYS || q.remat == GP_REMAT_EXCEPT_LAST) {
        snprintf(ch->why[at], sizeof ch->why[at], "%s re-materializes nothing (remat %s asked)",
                 names[i], gp_remat_names()[q.remat]);
        continue;
      }
      q.remat = GP_REMAT_NEVER;
    }
    ch->remat[at] = q.remat;
    if (q.schedule == GP_SCHED_INTERLEAVED && q.chunks < 2) { /* it needs its own split */
      snprintf(ch->why[at], sizeof ch->why[at], "auto does not weigh interleaved (its V) yet");
      continue;
    }
    gp_partition p;
    gp_status s = first ? gp_partition_evaluate(c, &q, first, &p) : gp_partition_solve(c, &q, &p);
    /* a given split is evaluated, not fitted: a stage past its limit rules the schedule out */
    for (int k = 0; s == GP_OK && first && r->mem_limit && k < p.stages; k++)
      if (r->mem_limit[k] > 0 && p.memory[k] > r->mem_limit[k])
        s = GP_ERR(GP_ERR_USAGE,
                   "%s: stage %d's estimate (%.2f MiB) passes its limit of %.2f MiB on this split",
                   names[i], k, p.memory[k] / 1048576.0, r->mem_limit[k] / 1048576.0);
    if (s != GP_OK) {
      snprintf(ch->why[at], sizeof ch->why[at], "%s", gp_error_message());
      if (first_err == GP_OK) {
        first_err = s;
        snprintf(first_msg, sizeof first_msg, "%s", gp_error_message());
      }
      gp_error_clear();
      continue;
    }
    ch->runs[at] = 1;
    ch->step[at] = p.makespan;
    ch->bubble[at] = p.bubble;
    for (int k = 0; k < p.stages; k++)
      ch->memory[at] = fmax(ch->memory[at], p.memory[k]);
    int b = ch->chosen;
    int better = b < 0 || p.makespan < ch->step[b] * (1 - 5e-3) ||
                 (p.makespan <= ch->step[b] * (1 + 5e-3) && ch->memory[at] < ch->memory[b]);
    if (better) {
      ch->chosen = at;
      *out = p;
    }
  }
  if (ch->chosen < 0)
    return GP_ERR(first_err ? first_err : GP_ERR_USAGE, "%s",
                  first_msg[0] ? first_msg : "schedule auto: no schedule is named");
  return GP_OK;
}

void gp_schedule_choice_str(const gp_schedule_choice *ch, char *buf, size_t n) {
  const char *const *names = gp_schedule_names();
  if (!n) return;
  buf[0] = 0;
  if (ch->chosen < 0) return;
  const double best = ch->step[ch->chosen];
  size_t k = (size_t)snprintf(buf, n, "%s (simulated step 1.00", names[ch->kind[ch->chosen]]);
  for (int i = 0; i < ch->n && k < n; i++) {
    if (i == ch->chosen) continue;
    if (!ch->runs[i])
      k += (size_t)snprintf(buf + k, n - k, "; %s cannot run", names[ch->kind[i]]);
    else
      k += (size_t)snprintf(buf + k, n - k, "; %s %.2f, memory %.2fx", names[ch->kind[i]],
                            best > 0 ? ch->step[i] / best : 1.0,
                            ch->memory[ch->chosen] > 0 ? ch->memory[i] / ch->memory[ch->chosen]
                                                       : 1.0);
  }
  if (k < n) snprintf(buf + k, n - k, ")");
}
