/* CPU per-channel bias over [n, c, inner]: the add after a GEMM and its gradient, split over
 * the instance's threads by planes (add) and channels (gradient: each channel's sum stays
 * on one thread, in the same order whatever the split). */
#include "core/cpu/cpu.h"

typedef struct bias_args {
  int64_t n, c, inner;
  const float *in;
  float *out;
} bias_args;

/* planes [lo, hi) of [n, c] (or, with inner == 1, rows [lo, hi) of n) */
static gp_status add_part(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)worker;
  const bias_args *b = ctx;
  const float *restrict bias = b->in;
  if (b->inner == 1) {
    for (int64_t i = lo; i < hi; i++) {
      float *restrict row = b->out + i * b->c;
      for (int64_t j = 0; j < b->c; j++)
        row[j] += bias[j];
    }
    return GP_OK;
  }
  for (int64_t pl = lo; pl < hi; pl++) {
    float *restrict p = b->out + pl * b->inner;
    const float v = bias[pl % b->c];
    for (int64_t k = 0; k < b->inner; k++)
      p[k] += v;
  }
  return GP_OK;
}

gp_status gp_cpu_bias_add(gp_backend *be, int64_t n, int64_t c, int64_t inner, const float *bias,
                          float *y) {
  bias_args b = {n, c, inner, bias, y};
  if (inner == 1)
    return gp_cpu_parallel_for(be, n, GP_CPU_GRAIN / (c > 0 ? c : 1) + 1, add_part, &b);
  return gp_cpu_parallel_for(be, n * c, GP_CPU_GRAIN / inner + 1, add_part, &b);
}

/* channels [lo, hi) */
static gp_status grad_part(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)worker;
  const bias_args *b = ctx;
  const float *restrict dy = b->in;
  float *restrict dbias = b->out;
  if (b->inner == 1) {
    for (int64_t i = 0; i < b->n; i++) {
      const float *restrict row = dy + i * b->c;
      for (int64_t j = lo; j < hi; j++)
        dbias[j] += row[j];
    }
    return GP_OK;
  }
  for (int64_t j = lo; j < hi; j++) {
    /* double: a channel of a large batch sums many values of mixed sign. */
    double s = 0.0;
    for (int64_t i = 0; i < b->n; i++)
      s += gp_cpu_rowsum(dy + (i * b->c + j) * b->inner, b->inner);
    dbias[j] += (float)s;
  }
  return GP_OK;
}

gp_status gp_cpu_bias_grad(gp_backend *be, int64_t n, int64_t c, int64_t inner, const float *dy,
                           float *dbias) {
  bias_args b = {n, c, inner, dy, dbias};
  /* rows of [n, c] stay on one thread: splitting c would make them short */
  if (inner == 1) return grad_part(&b, 0, c, 0);
  int64_t per = n * inner;
  return gp_cpu_parallel_for(be, c, GP_CPU_GRAIN / (per > 0 ? per : 1) + 1, grad_part, &b);
}
