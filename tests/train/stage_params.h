/* The pipeline tests' view of a trainer's parameters across its stages. */
#ifndef GP_TEST_STAGE_PARAMS_H
#define GP_TEST_STAGE_PARAMS_H

#include "core/train/trainer.h"

/* Every stage's trainable parameters (buffers 0) or buffers (buffers 1, e.g. batch-norm
 * running statistics) back to back in stage order: malloc'd, *n floats. Exits when out of
 * memory. */
float *stage_params_gather(gp_trainer *t, int buffers, int64_t *n);
/* max |a - b| / max |b| over n floats (0 / tiny when b is all zero). */
double stage_params_rel_diff(const float *a, const float *b, int64_t n);

#endif
