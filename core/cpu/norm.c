/* CPU batch norm over [n, c, inner] and layer norm over [rows, cols]. Batch norm works one
 * channel at a time: a channel of a micro-batch is usually small enough to stay in cache
 * across its passes (mean, variance, output), which keeps two-pass accuracy cheap. */
#include <math.h>

#include "core/cpu/cpu.h"

/* Sum of one channel's n rows of `inner` floats (row stride c * inner); float within a row,
 * double across rows, so large batches do not lose the small terms. */
static double chan_sum(int64_t n, int64_t stride, int64_t inner, const float *restrict x) {
  double s = 0.0;
  for (int64_t i = 0; i < n; i++) {
    const float *restrict p = x + i * stride;
    float part = 0.0f;
    for (int64_t k = 0; k < inner; k++) part += p[k];
    s += part;
  }
  return s;
}

static double chan_sqdev(int64_t n, int64_t stride, int64_t inner, float mean,
                         const float *restrict x) {
  double s = 0.0;
  for (int64_t i = 0; i < n; i++) {
    const float *restrict p = x + i * stride;
    float part = 0.0f;
    for (int64_t k = 0; k < inner; k++) {
      float v = p[k] - mean;
      part += v * v;
    }
    s += part;
  }
  return s;
}

/* y = x * scale + shift over one channel. */
static void chan_affine(int64_t n, int64_t stride, int64_t inner, float scale, float shift,
                        const float *restrict x, float *restrict y) {
  for (int64_t i = 0; i < n; i++) {
    const float *restrict p = x + i * stride;
    float *restrict q = y + i * stride;
    for (int64_t k = 0; k < inner; k++) q[k] = p[k] * scale + shift;
  }
}

gp_status gp_cpu_batchnorm_forward_train(gp_backend *be, int64_t n, int64_t c, int64_t inner,
                                         float eps, const float *x, const float *gamma,
                                         const float *beta, float *y, float *mean,
                                         float *invstd) {
  (void)be;
  const int64_t count = n * inner, stride = c * inner;
  if (count <= 0) return GP_ERR(GP_ERR_RUNTIME, "batch norm over an empty batch");
  for (int64_t j = 0; j < c; j++) {
    const float *xc = x + j * inner;
    float m = (float)(chan_sum(n, stride, inner, xc) / (double)count);
    float var = (float)(chan_sqdev(n, stride, inner, m, xc) / (double)count);
    float is = 1.0f / sqrtf(var + eps);
    mean[j] = m;
    invstd[j] = is;
    float scale = gamma[j] * is;
    chan_affine(n, stride, inner, scale, beta[j] - m * scale, xc, y + j * inner);
  }
  return GP_OK;
}

gp_status gp_cpu_batchnorm_forward_eval(gp_backend *be, int64_t n, int64_t c, int64_t inner,
                                        float eps, const float *x, const float *gamma,
                                        const float *beta, const float *run_mean,
                                        const float *run_var, float *y) {
  (void)be;
  const int64_t stride = c * inner;
  for (int64_t j = 0; j < c; j++) {
    float scale = gamma[j] / sqrtf(run_var[j] + eps);
    chan_affine(n, stride, inner, scale, beta[j] - run_mean[j] * scale, x + j * inner,
                y + j * inner);
  }
  return GP_OK;
}

/* dx = gamma * invstd / N * (N dy - sum(dy) - xhat * sum(dy xhat)). */
gp_status gp_cpu_batchnorm_backward(gp_backend *be, int64_t n, int64_t c, int64_t inner,
                                    const float *x, const float *dy, const float *gamma,
                                    const float *mean, const float *invstd, float *dx,
                                    float *dgamma, float *dbeta) {
  (void)be;
  const int64_t count = n * inner, stride = c * inner;
  if (count <= 0) return GP_ERR(GP_ERR_RUNTIME, "batch norm over an empty batch");
  for (int64_t j = 0; j < c; j++) {
    const float m = mean[j], is = invstd[j];
    double sdy = 0.0, sdyx = 0.0;
    for (int64_t i = 0; i < n; i++) {
      const float *restrict xp = x + i * stride + j * inner;
      const float *restrict gp = dy + i * stride + j * inner;
      float a = 0.0f, b = 0.0f;
      for (int64_t k = 0; k < inner; k++) {
        a += gp[k];
        b += gp[k] * (xp[k] - m);
      }
      sdy += a;
      sdyx += b;
    }
    sdyx *= is; /* sum(dy * xhat) */
    if (dgamma) dgamma[j] += (float)sdyx;
    if (dbeta) dbeta[j] += (float)sdy;
    if (!dx) continue;
    /* dx = k1 * dy + k2 * (x - m) + k0 */
    const float k1 = gamma[j] * is;
    const float k2 = -(float)(gamma[j] * (double)is * is * sdyx / (double)count);
    const float k0 = -(float)(gamma[j] * (double)is * sdy / (double)count) - k2 * m;
    for (int64_t i = 0; i < n; i++) {
      const float *restrict xp = x + i * stride + j * inner;
      const float *restrict gp = dy + i * stride + j * inner;
      float *restrict dp = dx + i * stride + j * inner;
      for (int64_t k = 0; k < inner; k++) dp[k] = k1 * gp[k] + k2 * xp[k] + k0;
    }
  }
  return GP_OK;
}

gp_status gp_cpu_batchnorm_stats_accumulate(gp_backend *be, int64_t c, int64_t count, float eps,
                                            const float *mean, const float *invstd, float *acc) {
  (void)be;
  /* PyTorch keeps the unbiased variance in running_var (Bessel's correction). */
  double bessel = count > 1 ? (double)count / (double)(count - 1) : 1.0;
  for (int64_t j = 0; j < c; j++) {
    double var = 1.0 / ((double)invstd[j] * invstd[j]) - eps;
    if (var < 0.0) var = 0.0;
    acc[j] += mean[j];
    acc[c + j] += (float)(var * bessel);
  }
  return GP_OK;
}

gp_status gp_cpu_batchnorm_stats_apply(gp_backend *be, int64_t c, float momentum, int n_acc,
                                       float *acc, float *run_mean, float *run_var) {
  (void)be;
  if (n_acc <= 0) return GP_OK;
  const float inv = 1.0f / (float)n_acc;
  for (int64_t j = 0; j < c; j++) {
    run_mean[j] = (1.0f - momentum) * run_mean[j] + momentum * acc[j] * inv;
    run_var[j] = (1.0f - momentum) * run_var[j] + momentum * acc[c + j] * inv;
    acc[j] = acc[c + j] = 0.0f;
  }
  return GP_OK;
}

gp_status gp_cpu_layernorm_forward(gp_backend *be, int64_t rows, int64_t cols, float eps,
                                   const float *x, const float *gamma, const float *beta,
                                   float *y, float *mean, float *rstd) {
  (void)be;
  if (cols <= 0) return GP_ERR(GP_ERR_RUNTIME, "layer norm over an empty row");
  for (int64_t r = 0; r < rows; r++) {
    const float *restrict xp = x + r * cols;
    float *restrict yp = y + r * cols;
    float s = 0.0f;
    for (int64_t k = 0; k < cols; k++) s += xp[k];
    const float m = s / (float)cols;
    float v = 0.0f;
    for (int64_t k = 0; k < cols; k++) v += (xp[k] - m) * (xp[k] - m);
    const float rs = 1.0f / sqrtf(v / (float)cols + eps);
    for (int64_t k = 0; k < cols; k++) yp[k] = (xp[k] - m) * rs * gamma[k] + beta[k];
    if (mean) mean[r] = m;
    if (rstd) rstd[r] = rs;
  }
  return GP_OK;
}

/* dx = rstd * (g dy - mean(g dy) - xhat mean(g dy xhat)). */
gp_status gp_cpu_layernorm_backward(gp_backend *be, int64_t rows, int64_t cols, const float *x,
                                    const float *dy, const float *gamma, const float *mean,
                                    const float *rstd, float *dx, float *dgamma, float *dbeta) {
  (void)be;
  if (cols <= 0) return GP_ERR(GP_ERR_RUNTIME, "layer norm over an empty row");
  for (int64_t r = 0; r < rows; r++) {
    const float *restrict xp = x + r * cols;
    const float *restrict gp = dy + r * cols;
    const float m = mean[r], rs = rstd[r];
    float a = 0.0f, b = 0.0f;
    for (int64_t k = 0; k < cols; k++) {
      float xh = (xp[k] - m) * rs;
      float gd = gamma[k] * gp[k];
      a += gd;
      b += gd * xh;
      if (dgamma) dgamma[k] += gp[k] * xh;
      if (dbeta) dbeta[k] += gp[k];
    }
    if (!dx) continue;
    a /= (float)cols;
    b /= (float)cols;
    float *restrict dp = dx + r * cols;
    for (int64_t k = 0; k < cols; k++) {
      float xh = (xp[k] - m) * rs;
      dp[k] = rs * (gamma[k] * gp[k] - a - xh * b);
    }
  }
  return GP_OK;
}
