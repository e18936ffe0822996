/* CPU batch norm over [n, c, inner] and layer norm over [rows, cols]. Batch norm works one
 * channel at a time: a channel of a micro-batch is usually small enough to stay in cache
 * across its passes (statistics, then output). */
#include <math.h>

#include "core/cpu/cpu.h"

/* Reductions with 8 independent partial sums: a single accumulator is one long chain of
 * dependent adds (4 cycles each) that strict IEEE order forbids the compiler to split; 8
 * lanes it can vectorize. */
#define LANES 8

float gp_cpu_rowsum(const float *restrict p, int64_t n) {
  float a[LANES] = {0};
  int64_t k = 0;
  for (; k + LANES <= n; k += LANES)
    for (int u = 0; u < LANES; u++) a[u] += p[k + u];
  float s = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
  for (; k < n; k++) s += p[k];
  return s;
}

static float rowsqdev(const float *restrict p, int64_t n, float m) {
  float a[LANES] = {0};
  int64_t k = 0;
  for (; k + LANES <= n; k += LANES)
    for (int u = 0; u < LANES; u++) a[u] += (p[k + u] - m) * (p[k + u] - m);
  float s = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
  for (; k < n; k++) s += (p[k] - m) * (p[k] - m);
  return s;
}

/* sum(x - k) and sum((x - k)^2) of one row. */
static void rowmoments(const float *restrict p, int64_t n, float k, float *s1, float *s2) {
  float a[LANES] = {0}, b[LANES] = {0};
  int64_t i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int u = 0; u < LANES; u++) {
      float v = p[i + u] - k;
      a[u] += v;
      b[u] += v * v;
    }
  float s = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
  float t = ((b[0] + b[1]) + (b[2] + b[3])) + ((b[4] + b[5]) + (b[6] + b[7]));
  for (; i < n; i++) {
    float v = p[i] - k;
    s += v;
    t += v * v;
  }
  *s1 = s;
  *s2 = t;
}

/* sum(g) and sum(g * (x - m)) of one row. */
static void rowsum2(const float *restrict g, const float *restrict x, int64_t n, float m,
                    float *sg, float *sgx) {
  float a[LANES] = {0}, b[LANES] = {0};
  int64_t k = 0;
  for (; k + LANES <= n; k += LANES)
    for (int u = 0; u < LANES; u++) {
      a[u] += g[k + u];
      b[u] += g[k + u] * (x[k + u] - m);
    }
  float s = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
  float t = ((b[0] + b[1]) + (b[2] + b[3])) + ((b[4] + b[5]) + (b[6] + b[7]));
  for (; k < n; k++) {
    s += g[k];
    t += g[k] * (x[k] - m);
  }
  *sg = s;
  *sgx = t;
}

/* Sums over one channel's n rows of `inner` floats (row stride c * inner): float within a
 * row, double across rows, so large batches do not lose the small terms. */
/* Mean and biased variance of one channel in one pass. The data are shifted by one of
 * their own values (the first), which is within a few standard deviations of the mean, so
 * E[v^2] - E[v]^2 does not cancel catastrophically the way it does for unshifted data. */
static void chan_moments(int64_t n, int64_t stride, int64_t inner, const float *x, float *mean,
                         float *var) {
  const float k = x[0];
  double s1 = 0.0, s2 = 0.0;
  for (int64_t i = 0; i < n; i++) {
    float a, b;
    rowmoments(x + i * stride, inner, k, &a, &b);
    s1 += a;
    s2 += b;
  }
  const double cnt = (double)(n * inner), m = s1 / cnt;
  double v = s2 / cnt - m * m;
  *mean = (float)(k + m);
  *var = (float)(v > 0.0 ? v : 0.0);
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
    float m, var;
    chan_moments(n, stride, inner, xc, &m, &var);
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
      float a, b;
      rowsum2(dy + i * stride + j * inner, x + i * stride + j * inner, inner, m, &a, &b);
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
    const float m = gp_cpu_rowsum(xp, cols) / (float)cols;
    const float v = rowsqdev(xp, cols, m);
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
