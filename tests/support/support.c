/* The functions of tests/support: what unit tests and benchmarks would otherwise each copy. */
#include <stdlib.h>

#include "tests/support/check.h"
#include "tests/support/train.h"

void gp_t_die(const char *what) {
  printf("FAIL: %s: %s\n", what, gp_error_message());
  exit(1);
}

gp_status gp_t_step_xy(gp_trainer *t, const float *x, const int32_t *y, int64_t n, double lr,
                       gp_metrics *out) {
  gp_batch b;
  GP_TRY(gp_batch_xy(t->m, x, y, n, &b));
  return gp_trainer_step(t, &b, lr, out);
}
