/* The schedule `auto` stands for (pipeline.schedule: auto, --schedule auto, the default): of
 * the schedules gp_schedule_names lists that can run the request, the one whose simulated step
 * is shortest on the split the partitioner makes for it (or on a given split) within the memory
 * limits; on a tie (within 0.5%), the one whose fullest stage needs the least memory. */
#ifndef GP_CHOOSE_H
#define GP_CHOOSE_H

#include "core/plan/solve.h"

#define GP_CHOOSE_MAX 8 /* candidates */

typedef struct gp_schedule_choice {
  int n; /* candidates considered, in gp_schedule_names order */
  gp_schedule_kind kind[GP_CHOOSE_MAX];
  gp_remat remat[GP_CHOOSE_MAX]; /* the request's, never for the zero-bubble schedules */
  int runs[GP_CHOOSE_MAX];       /* 0: refused (why[i] says why) */
  double step[GP_CHOOSE_MAX];    /* simulated step, in the costs' unit */
  double bubble[GP_CHOOSE_MAX];  /* of that simulation */
  double memory[GP_CHOOSE_MAX];  /* the fullest stage's estimate, bytes */
  char why[GP_CHOOSE_MAX][160];  /* a refused candidate's reason */
  int chosen;                    /* index of the choice */
} gp_schedule_choice;

/* r->schedule is ignored; the schedules that re-materialize nothing (gp_schedule_keeps_all)
 * run never under r->remat auto or never, and are left out under always or except_last (what
 * the request asked); first: a given split (K + 1 entries), or NULL for the partitioner's
 * split of each candidate. *out: the chosen candidate's partition. When no candidate runs, the
 * first candidate's error. */
gp_status gp_schedule_choose(const gp_unit_costs *c, const gp_partition_req *r, const int *first,
                             gp_schedule_choice *ch, gp_partition *out);

/* "1f1b (simulated step 1.00; gpipe 1.22, memory 1.10x; zb-h2 cannot run)": the choice, then
 * the others' steps and fullest stages relative to it, in buf of n bytes. */
void gp_schedule_choice_str(const gp_schedule_choice *ch, char *buf, size_t n);

#endif
