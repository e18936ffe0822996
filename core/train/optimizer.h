/* Optimizers over a stage's contiguous parameter buffer, and learning-rate schedules. */
#ifndef GP_OPTIMIZER_H
#define GP_OPTIMIZER_H

#include "core/spec/spec.h"
#include "core/train/params.h"

#define GP_OPT_MAX_SLOTS 2

typedef struct gp_optimizer {
  gp_train_spec hp;
  gp_params *p;
  int n_slots;                   /* state buffers, each p->n_train floats */
  float *slot[GP_OPT_MAX_SLOTS]; /* sgd: momentum; adamw: m, v; rmsprop: square avg, momentum */
  const char *slot_name[GP_OPT_MAX_SLOTS];
  int64_t t; /* updates done */
} gp_optimizer;

gp_status gp_optimizer_init(gp_optimizer *o, const gp_train_spec *hp, gp_params *p);
void gp_optimizer_free(gp_optimizer *o);
/* One update with learning rate lr (gradients are already summed over micro-batches). */
gp_status gp_optimizer_step(gp_optimizer *o, double lr);

/* Learning rate at step (0-based) of total: linear warm-up, then the schedule. */
double gp_lr_at(const gp_train_spec *t, int64_t step, int64_t total);

#endif
