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

#endif
