/* Helpers shared by all layers: a backward's halves, RNG keys and deterministic
 * initialization. */
#include "core/layer.h"

#include <math.h>
#include <string.h>

#include "core/rng.h"

gp_status gp_layer_backward_part(const gp_layer *l, gp_exec *e, gp_grad_part part,
                                 const gp_tensor *in, const gp_tensor *out, const gp_tensor *dout,
                                 gp_tensor *din, void *saved) {
  gp_tensor none[GP_MAX_INPUTS];
  if (part == GP_GRAD_WEIGHT) {
    if (l->n_params == 0) return GP_OK;
    memset(none, 0, sizeof none);
    for (int i = 0; i < l->n_in && i < GP_MAX_INPUTS; i++)
      none[i].shape = in[i].shape, none[i].dtype = GP_F32, none[i].device = in[i].device;
    din = none;
  }
  gp_grad_part was = e->grad_part;
  e->grad_part = part;
  gp_status st = l->type->backward(l, e, in, out, dout, din, saved);
  e->grad_part = was;
  return st;
}

uint64_t gp_layer_rng_key(const gp_layer *l, const gp_exec *e) {
  uint64_t h = gp_hash_combine(e->seed, (uint64_t)e->step);
  return gp_hash_str(h, l->path);
}

void gp_param_init_host(const gp_layer *l, int i, uint64_t seed, float *host) {
  const gp_param_desc *p = &l->pdesc[i];
  int64_t n = gp_shape_numel(&p->shape);
  gp_rng r;
  gp_rng_seed(&r, gp_hash_str(gp_hash_str(seed, l->path), p->name));
  double fan = p->fan_in > 0 ? (double)p->fan_in : 1.0;
  switch (p->init) {
  case GP_INIT_ZEROS:
    for (int64_t j = 0; j < n; j++)
      host[j] = 0.0f;
    break;
  case GP_INIT_ONES:
    for (int64_t j = 0; j < n; j++)
      host[j] = 1.0f;
    break;
  case GP_INIT_UNIFORM_FAN_IN: {
    float b = (float)(1.0 / sqrt(fan));
    for (int64_t j = 0; j < n; j++)
      host[j] = (2.0f * gp_rng_uniform(&r) - 1.0f) * b;
    break;
  }
  case GP_INIT_KAIMING_NORMAL: {
    float sd = (float)sqrt(2.0 / fan);
    for (int64_t j = 0; j < n; j++)
      host[j] = gp_rng_normal(&r) * sd;
    break;
  }
  case GP_INIT_NORMAL_FAN_IN: {
    float sd = (float)sqrt(1.0 / fan);
    for (int64_t j = 0; j < n; j++)
      host[j] = gp_rng_normal(&r) * sd;
    break;
  }
  case GP_INIT_NORMAL:
    for (int64_t j = 0; j < n; j++)
      host[j] = gp_rng_normal(&r);
    break;
  case GP_INIT_NORMAL_STD: {
    float sd = (float)p->std;
    for (int64_t j = 0; j < n; j++)
      host[j] = gp_rng_normal(&r) * sd;
    break;
  }
  case GP_INIT_XAVIER_UNIFORM: {
    float a = (float)sqrt(6.0 / (fan + (double)n / fan));
    for (int64_t j = 0; j < n; j++)
      host[j] = (2.0f * gp_rng_uniform(&r) - 1.0f) * a;
    break;
  }
  case GP_INIT_SINUSOIDAL: {
    int64_t dim = p->shape.ndim > 0 ? p->shape.d[p->shape.ndim - 1] : 1;
    for (int64_t j = 0; j < n; j++) {
      int64_t pos = j / dim, c = j % dim;
      /* in double, then rounded once: the table does not depend on float evaluation order */
      double angle = (double)pos * exp(-log(10000.0) * (double)(c - c % 2) / (double)dim);
      host[j] = (float)(c % 2 ? cos(angle) : sin(angle));
    }
    break;
  }
  }
  if (p->has_zero_row && p->shape.ndim > 0 && p->zero_row >= 0 && p->zero_row < p->shape.d[0]) {
    int64_t row = n / p->shape.d[0];
    for (int64_t j = 0; j < row; j++)
      host[p->zero_row * row + j] = 0.0f;
  }
}
