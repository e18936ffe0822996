/* CPU batch norm over [n, c, inner] and layer norm over [rows, cols]: two passes each
 * (statistics, then output), with vectorizable reductions. */
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
    for (int u = 0; u < LANES; u++)
      a[u] += p[k + u];
  float s = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
  for (; k < n; k++)
    s += p[k];
  return s;
}

static float rowsqdev(const float *restrict p, int64_t n, float m) {
  float a[LANES] = {0};
  int64_t k = 0;
  for (; k + LANES <= n; k += LANES)
    for (int u = 0; u < LANES; u++)
      a[u] += (p[k + u] - m) * (p[k + u] - m);
  float s = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
  for (; k < n; k++)
    s += (p[k] - m) * (p[k] - m);
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
static void rowsum2(const float *restrict g, const float *restrict x, int64_t n, float m, float *sg,
                    float *sgx) {
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
/* y = x * scale + shift over one row. */
static void row_affine(int64_t inner, float scale, float shift, const float *restrict x,
                       float *restrict y) {
  for (int64_t k = 0; k < inner; k++)
    y[k] = x[k] * scale + shift;
}

/* Per-channel double accumulators for the passes below, from the instance's scratch (so the
 * step loop does not allocate). */
static gp_status accumulators(gp_backend *be, int64_t c, double **out) {
  GP_TRY(gp_cpu_scratch(be, (size_t)(4 * c) * sizeof(double), (void **)out));
  for (int64_t j = 0; j < 4 * c; j++)
    (*out)[j] = 0.0;
  return GP_OK;
}

/* The passes run in memory order (sample by sample, channel by channel) so that every pass
 * is one sequential stream, which the hardware prefetches well. The statistics are taken in
 * one pass over data shifted by one of their own values per channel (its first), which is
 * within a few standard deviations of the mean, so E[v^2] - E[v]^2 does not cancel the way
 * it does for unshifted data. */
gp_status gp_cpu_batchnorm_forward_train(gp_backend *be, int64_t n, int64_t c, int64_t inner,
                                         float eps, const float *x, const float *gamma,
                                         const float *beta, float *y, float *mean, float *invstd) {
  const int64_t count = n * inner;
  if (count <= 0) return GP_ERR(GP_ERR_RUNTIME, "batch norm over an empty batch");
  double *acc;
  GP_TRY(accumulators(be, c, &acc));
  double *s1 = acc, *s2 = acc + c, *scale = acc + 2 * c, *shift = acc + 3 * c;
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < c; j++) {
      float a, b;
      rowmoments(x + (i * c + j) * inner, inner, x[j * inner], &a, &b);
      s1[j] += a;
      s2[j] += b;
    }
  for (int64_t j = 0; j < c; j++) {
    const double m = s1[j] / (double)count, v = s2[j] / (double)count - m * m;
    const float mf = (float)(x[j * inner] + m);
    const float is = 1.0f / sqrtf((float)(v > 0.0 ? v : 0.0) + eps);
    mean[j] = mf;
    invstd[j] = is;
    scale[j] = gamma[j] * is;
    shift[j] = beta[j] - mf * (float)scale[j];
  }
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < c; j++)
      row_affine(inner, (float)scale[j], (float)shift[j], x + (i * c + j) * inner,
                 y + (i * c + j) * inner);
  return GP_OK;
}

gp_status gp_cpu_batchnorm_forward_eval(gp_backend *be, int64_t n, int64_t c, int64_t inner,
                                        float eps, const float *x, const float *gamma,
                                        const float *beta, const float *run_mean,
                                        const float *run_var, float *y) {
  (void)be;
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < c; j++) {
      float scale = gamma[j] / sqrtf(run_var[j] + eps);
      row_affine(inner, scale, beta[j] - run_mean[j] * scale, x + (i * c + j) * inner,
                 y + (i * c + j) * inner);
    }
  return GP_OK;
}

/* dx = gamma * invstd / N * (N dy - sum(dy) - xhat * sum(dy xhat)). */
gp_status gp_cpu_batchnorm_backward(gp_backend *be, int64_t n, int64_t c, int64_t inner,
                                    const float *x, const float *dy, const float *gamma,
                                    const float *mean, const float *invstd, float *dx,
                                    float *dgamma, float *dbeta) {
  const int64_t count = n * inner;
  if (count <= 0) return GP_ERR(GP_ERR_RUNTIME, "batch norm over an empty batch");
  double *acc;
  GP_TRY(accumulators(be, c, &acc));
  double *sdy = acc, *sdyx = acc + c, *k1 = acc + 2 * c, *k2 = acc + 3 * c;
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < c; j++) {
      float a, b;
      rowsum2(dy + (i * c + j) * inner, x + (i * c + j) * inner, inner, mean[j], &a, &b);
      sdy[j] += a;
      sdyx[j] += b;
    }
  for (int64_t j = 0; j < c; j++) {
    const double is = invstd[j], sx = sdyx[j] * is; /* sum(dy * xhat) */
    if (dgamma) dgamma[j] += (float)sx;
    if (dbeta) dbeta[j] += (float)sdy[j];
    /* dx = k1 dy + k2 (x - m) + k0 = k1 dy + k2 x + (k0 - k2 m); the constant reuses sdy. */
    k1[j] = gamma[j] * is;
    k2[j] = -gamma[j] * is * is * sx / (double)count;
    sdy[j] = -gamma[j] * is * sdy[j] / (double)count - k2[j] * mean[j];
  }
  if (!dx) return GP_OK;
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < c; j++) {
      const int64_t o = (i * c + j) * inner;
      const float *restrict xp = x + o, *restrict gp = dy + o;
      float *restrict dp = dx + o;
      const float a = (float)k1[j], b = (float)k2[j], k0 = (float)sdy[j];
      for (int64_t k = 0; k < inner; k++)
        dp[k] = a * gp[k] + b * xp[k] + k0;
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
                                   const float *x, const float *gamma, const float *beta, float *y,
                                   float *mean, float *rstd) {
  (void)be;
  if (cols <= 0) return GP_ERR(GP_ERR_RUNTIME, "layer norm over an empty row");
  for (int64_t r = 0; r < rows; r++) {
    const float *restrict xp = x + r * cols;
    float *restrict yp = y + r * cols;
    const float m = gp_cpu_rowsum(xp, cols) / (float)cols;
    const float v = rowsqdev(xp, cols, m);
    const float rs = 1.0f / sqrtf(v / (float)cols + eps);
    for (int64_t k = 0; k < cols; k++)
      yp[k] = (xp[k] - m) * rs * gamma[k] + beta[k];
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
