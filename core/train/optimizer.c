/* SGD (momentum, Nesterov, weight decay), AdamW and RMSProp over flat buffers; LR schedules. */
#include "core/train/optimizer.h"

#include <math.h>
#include <string.h>

gp_status gp_optimizer_init(gp_optimizer *o, const gp_train_spec *hp, gp_params *p) {
  memset(o, 0, sizeof *o);
  o->hp = *hp;
  o->p = p;
  o->n_slots = gp_optimizer_slots(hp);
  switch (hp->optimizer) {
  case GP_OPT_SGD:
    o->slot_name[0] = "momentum";
    break;
  case GP_OPT_ADAMW:
    o->slot_name[0] = "exp_avg";
    o->slot_name[1] = "exp_avg_sq";
    break;
  case GP_OPT_RMSPROP:
    o->slot_name[0] = "square_avg";
    o->slot_name[1] = "momentum";
    break;
  }
  /* one contiguous buffer for all state, like the parameters and gradients */
  size_t bytes = (size_t)p->n_train * sizeof(float) * (size_t)o->n_slots;
  if (!bytes) return GP_OK;
  GP_TRY(p->be->alloc(p->be, bytes, (void **)&o->slot[0]));
  GP_TRY(p->be->zero(p->be, o->slot[0], bytes));
  for (int i = 1; i < o->n_slots; i++)
    o->slot[i] = o->slot[0] + (size_t)i * (size_t)p->n_train;
  return GP_OK;
}

void gp_optimizer_free(gp_optimizer *o) {
  if (!o || !o->p) return;
  o->p->be->free(o->p->be, o->slot[0]);
  memset(o, 0, sizeof *o);
}

gp_status gp_optimizer_step(gp_optimizer *o, double lr) {
  gp_params *p = o->p;
  gp_backend *be = p->be;
  o->t++;
  if (!p->n_train) return GP_OK;
  const gp_train_spec *h = &o->hp;
  switch (h->optimizer) {
  case GP_OPT_SGD: {
    gp_sgd_hp hp = {(float)lr, (float)h->momentum, (float)h->weight_decay, h->nesterov};
    return be->sgd_update(be, p->n_train, &hp, p->train, p->grad, o->slot[0]);
  }
  case GP_OPT_ADAMW: {
    gp_adamw_hp hp = {(float)lr,     (float)h->beta1,        (float)h->beta2,
                      (float)h->eps, (float)h->weight_decay, o->t};
    return be->adamw_update(be, p->n_train, &hp, p->train, p->grad, o->slot[0], o->slot[1]);
  }
  case GP_OPT_RMSPROP: {
    gp_rmsprop_hp hp = {(float)lr, (float)h->alpha, (float)h->eps, (float)h->momentum,
                        (float)h->weight_decay};
    return be->rmsprop_update(be, p->n_train, &hp, p->train, p->grad, o->slot[0], o->slot[1]);
  }
  }
  return GP_ERR(GP_ERR_UNSUPPORTED, "unknown optimizer");
}

/* Update n = step + 1 of W = warmup_steps, as fairseq's inverse_sqrt computes its rate
 * after n updates (lr_step, decay_factor and n ** -0.5 written as it writes them), or
 * Vaswani et al.'s d_model^-0.5 * min(n^-0.5, n * W^-1.5) scaled by lr. */
static double inverse_sqrt(const gp_train_spec *t, int64_t step) {
  double n = (double)step + 1.0, w = (double)(t->warmup_steps > 0 ? t->warmup_steps : 1);
  if (t->d_model > 0)
    return t->lr * pow((double)t->d_model, -0.5) * fmin(pow(n, -0.5), n * pow(w, -1.5));
  if (n < w) return t->warmup_init_lr + n * ((t->lr - t->warmup_init_lr) / w);
  return t->lr * pow(w, 0.5) * pow(n, -0.5);
}

double gp_lr_at(const gp_train_spec *t, int64_t step, int64_t total) {
  if (t->schedule == GP_LR_INVERSE_SQRT) return inverse_sqrt(t, step); /* its own warm-up */
  if (t->warmup_steps > 0 && step < t->warmup_steps)
    return t->lr * (double)(step + 1) / (double)t->warmup_steps;
  int64_t s = step - t->warmup_steps, span = total - t->warmup_steps;
  switch (t->schedule) {
  case GP_LR_CONSTANT:
    return t->lr;
  case GP_LR_STEP:
    return t->lr * pow(t->gamma, (double)(t->step_size > 0 ? s / t->step_size : 0));
  case GP_LR_COSINE:
    if (span <= 0) return t->lr;
    return t->min_lr + (t->lr - t->min_lr) * 0.5 * (1.0 + cos(M_PI * (double)s / (double)span));
  case GP_LR_INVERSE_SQRT:
    break;
  }
  return t->lr;
}
