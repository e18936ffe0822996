/* Optimizers over a stage's contiguous parameter buffer, and learning-rate schedules. */
#ifndef GP_OPTIMIZER_H
#define GP_OPTIMIZER_H

#include "core/spec/spec.h"
#include "core/train/params.h"

typedef struct gp_optimizer {
  gp_train_spec hp;
  gp_params *p;
  int n_slots;                   /* gp_optimizer_slots: state buffers, each p->n_train floats */
  float *slot[GP_OPT_MAX_SLOTS]; /* sgd: momentum; adamw: m, v; rmsprop: square avg, momentum */
  const char *slot_name[GP_OPT_MAX_SLOTS];
  int64_t t; /* updates done */
} gp_optimizer;

gp_status gp_optimizer_init(gp_optimizer *o, const gp_train_spec *hp, gp_params *p);
void gp_optimizer_free(gp_optimizer *o);
/* One update with learning rate lr (gradients are already summed over micro-batches). */
gp_status gp_optimizer_step(gp_optimizer *o, double lr);

/* Learning rate at step (0-based) of total: linear warm-up, then the schedule.
 * inverse_sqrt (total unused), with n = step + 1 and W = warmup_steps:
 *   init + n * (lr - init) / W while n < W, then lr * sqrt(W / n)  (fairseq's inverse_sqrt;
 *   init = warmup_init_lr, default 0: lr * min(n / W, sqrt(W / n)), the peak lr at n = W);
 *   with d_model > 0: lr * d_model^-0.5 * min(n^-0.5, n * W^-1.5)   (Vaswani et al. 2017).
 * fairseq sets its rate after n updates and uses it for update n + 1, so its first update
 * runs at init; here update n (1-based, = step + 1) runs at the rate for n. */
double gp_lr_at(const gp_train_spec *t, int64_t step, int64_t total);

#endif
