/* CPU optimizer updates over flat buffers (PyTorch's update rules, decoupled decay for
 * AdamW, L2 decay added to the gradient for SGD and RMSProp), split over the instance's
 * threads (element-wise, so the split changes nothing). */
#include <math.h>

#include "core/cpu/cpu.h"

typedef struct opt_args {
  const void *hp;
  float *w, *s1, *s2;
  const float *g;
} opt_args;

static gp_status sgd_part(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)worker;
  const opt_args *o = ctx;
  const gp_sgd_hp *hp = o->hp;
  /* hyperparameters in locals: read through hp, every store to w could change them, and the
   * loops would not vectorize */
  const float lr = hp->lr, mu = hp->momentum, wd = hp->weight_decay;
  const int nesterov = hp->nesterov;
  float *restrict w = o->w, *restrict buf = o->s1;
  const float *restrict g = o->g;
  if (mu == 0.0f) {
    for (int64_t i = lo; i < hi; i++)
      w[i] -= lr * (g[i] + wd * w[i]);
    return GP_OK;
  }
  for (int64_t i = lo; i < hi; i++) {
    float d = g[i] + wd * w[i];
    buf[i] = mu * buf[i] + d;
    d = nesterov ? d + mu * buf[i] : buf[i];
    w[i] -= lr * d;
  }
  return GP_OK;
}

gp_status gp_cpu_sgd_update(gp_backend *be, int64_t n, const gp_sgd_hp *hp, float *w,
                            const float *g, float *buf) {
  opt_args o = {hp, w, buf, NULL, g};
  return gp_cpu_parallel_for(be, n, GP_CPU_GRAIN, sgd_part, &o);
}

static gp_status adamw_part(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)worker;
  const opt_args *o = ctx;
  const gp_adamw_hp *hp = o->hp;
  const float b1 = hp->beta1, b2 = hp->beta2;
  const float c1 = 1.0f - (float)pow(b1, (double)hp->t);
  const float c2 = 1.0f - (float)pow(b2, (double)hp->t);
  const float step = hp->lr / c1, sc2 = sqrtf(c2), decay = 1.0f - hp->lr * hp->weight_decay;
  const float eps = hp->eps;
  float *restrict w = o->w, *restrict m = o->s1, *restrict v = o->s2;
  const float *restrict g = o->g;
  for (int64_t i = lo; i < hi; i++) {
    m[i] = b1 * m[i] + (1.0f - b1) * g[i];
    v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
    w[i] = w[i] * decay - step * m[i] / (sqrtf(v[i]) / sc2 + eps);
  }
  return GP_OK;
}

gp_status gp_cpu_adamw_update(gp_backend *be, int64_t n, const gp_adamw_hp *hp, float *w,
                              const float *g, float *m, float *v) {
  opt_args o = {hp, w, m, v, g};
  return gp_cpu_parallel_for(be, n, GP_CPU_GRAIN / 2, adamw_part, &o);
}

static gp_status rmsprop_part(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)worker;
  const opt_args *o = ctx;
  const gp_rmsprop_hp *hp = o->hp;
  const float a = hp->alpha, mu = hp->momentum, wd = hp->weight_decay, lr = hp->lr;
  const float eps = hp->eps;
  float *restrict w = o->w, *restrict sq = o->s1, *restrict buf = o->s2;
  const float *restrict g = o->g;
  for (int64_t i = lo; i < hi; i++) {
    float d = g[i] + wd * w[i];
    sq[i] = a * sq[i] + (1.0f - a) * d * d;
    float u = d / (sqrtf(sq[i]) + eps);
    if (mu != 0.0f) {
      buf[i] = mu * buf[i] + u;
      u = buf[i];
    }
    w[i] -= lr * u;
  }
  return GP_OK;
}

gp_status gp_cpu_rmsprop_update(gp_backend *be, int64_t n, const gp_rmsprop_hp *hp, float *w,
                                const float *g, float *sq, float *buf) {
  opt_args o = {hp, w, sq, buf, g};
  return gp_cpu_parallel_for(be, n, GP_CPU_GRAIN / 2, rmsprop_part, &o);
}
