/* The lists of the newer schedules for gp_schedule_build: internal to core/schedule/. */
#ifndef GP_SCHEDULE_LISTS_H
#define GP_SCHEDULE_LISTS_H

#include "core/schedule/schedule.h"

/* Fills lists[s] (room for 3M + 1 actions each) and n_actions[s] for K stages and M
 * micro-batches: forwards, backwards (B) and weight halves (W), then the step. */
gp_status gp_zb_fill(gp_schedule_kind kind, int K, int M, gp_action **lists, int *n_actions);

/* Interleaved 1F1B (interleaved.c): fills lists[s] (room for 2 V M + 1 actions each) for K
 * stages of V chunks and M micro-batches, M a multiple of K. */
void gp_interleaved_fill(int K, int M, int V, gp_action **lists, int *n_actions);

/* Where a step starts (overlap.c): each stage free from free_at[s], and stage 0's first `pre`
 * forwards already run, ending at pre_end[m] (run ahead, before the step). */
typedef struct gp_walk_from {
  const double *free_at;
  int pre;
  const double *pre_end;
} gp_walk_from;

/* The step simulated from there with costs cost (one chunk a stage): each stage's end in
 * end[s]. */
gp_status gp_schedule_walk_from(const gp_schedule *s, const gp_stage_cost *cost,
                                const gp_walk_from *from, double *end);

#endif
