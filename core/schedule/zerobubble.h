/* The zero-bubble lists (ZB-H1, ZB-H2) for gp_schedule_build: internal to core/schedule/. */
#ifndef GP_ZEROBUBBLE_H
#define GP_ZEROBUBBLE_H

#include "core/schedule/schedule.h"

/* Fills lists[s] (room for 3M + 1 actions each) and n_actions[s] for K stages and M
 * micro-batches: forwards, backwards (B) and weight halves (W), then the step. */
gp_status gp_zb_fill(gp_schedule_kind kind, int K, int M, gp_action **lists, int *n_actions);

#endif
