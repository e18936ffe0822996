/* CPU per-channel bias over [n, c, inner]: the add after a GEMM and its gradient. */
#include "core/cpu/cpu.h"

gp_status gp_cpu_bias_add(gp_backend *be, int64_t n, int64_t c, int64_t inner,
                          const float *restrict bias, float *restrict y) {
  (void)be;
  if (inner == 1) {
    for (int64_t i = 0; i < n; i++) {
      float *restrict row = y + i * c;
      for (int64_t j = 0; j < c; j++)
        row[j] += bias[j];
    }
    return GP_OK;
  }
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < c; j++) {
      float *restrict p = y + (i * c + j) * inner;
      const float b = bias[j];
      for (int64_t k = 0; k < inner; k++)
        p[k] += b;
    }
  return GP_OK;
}

gp_status gp_cpu_bias_grad(gp_backend *be, int64_t n, int64_t c, int64_t inner,
                           const float *restrict dy, float *restrict dbias) {
  (void)be;
  if (inner == 1) {
    for (int64_t i = 0; i < n; i++) {
      const float *restrict row = dy + i * c;
      for (int64_t j = 0; j < c; j++)
        dbias[j] += row[j];
    }
    return GP_OK;
  }
  for (int64_t j = 0; j < c; j++) {
    /* double: a channel of a large batch sums many values of mixed sign. */
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
      s += gp_cpu_rowsum(dy + (i * c + j) * inner, inner);
    dbias[j] += (float)s;
  }
  return GP_OK;
}
