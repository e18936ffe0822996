/* Training helpers that tests and benchmarks share (tests/support's library). */
#ifndef GP_TESTS_SUPPORT_TRAIN_H
#define GP_TESTS_SUPPORT_TRAIN_H

#include "core/train/trainer.h"

/* One step on (x, y) arrays of n samples, through the trainer's one step function. */
gp_status gp_t_step_xy(gp_trainer *t, const float *x, const int32_t *y, int64_t n, double lr,
                       gp_metrics *out);

#endif
