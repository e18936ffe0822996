/* CPU batch norm over [n, c, inner] and layer norm over [rows, cols]: two passes each
 * (statistics, then output), with vectorizable reductions. */
#include <math.h>
#include <string.h>

#include "core/cpu/cpu.h"

/* Reductions with 8 independent partial sums: a single accumulator is one long chain of
 * dependent adds (4 cycles each) that strict IEEE order forbids the compiler to split. The
 * 8 lanes are two 4-float GCC vectors, one SSE register each on the baseline ISA: written as
 * 8 scalar accumulators, GCC vectorized across iterations instead and added each vector's
 * lanes one by one (about 1 float per ns). Lane u sums elements u, u + 8, ...: the same
 * order, so the same results, as the scalar code. */
typedef float v4f __attribute__((vector_size(16)));

static inline v4f load4(const float *p) {
  v4f v;
  memcpy(&v, p, sizeof v);
  return v;
}

/* ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)) of the lanes of lo (0-3) and hi (4-7) */
static inline float lanes_sum(v4f lo, v4f hi) {
  return ((lo[0] + lo[1]) + (lo[2] + lo[3])) + ((hi[0] + hi[1]) + (hi[2] + hi[3]));
}

#define LANES 8

float gp_cpu_rowsum(const float *restrict p, int64_t n) {
  v4f a0 = {0}, a1 = {0};
  int64_t k = 0;
  for (; k + LANES <= n; k += LANES) {
    a0 += load4(p + k);
    a1 += load4(p + k + 4);
  }
  float s = lanes_sum(a0, a1);
  for (; k < n; k++)
    s += p[k];
  return s;
}

/* sum(x - k) and sum((x - k)^2) of one row. */
static void rowmoments(const float *restrict p, int64_t n, float k, float *s1, float *s2) {
  v4f a0 = {0}, a1 = {0}, b0 = {0}, b1 = {0};
  int64_t i = 0;
  for (; i + LANES <= n; i += LANES) {
    v4f v0 = load4(p + i) - k, v1 = load4(p + i + 4) - k;
    a0 += v0;
    a1 += v1;
    b0 += v0 * v0;
    b1 += v1 * v1;
  }
  float s = lanes_sum(a0, a1), t = lanes_sum(b0, b1);
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
  v4f a0 = {0}, a1 = {0}, b0 = {0}, b1 = {0};
  int64_t k = 0;
  for (; k + LANES <= n; k += LANES) {
    v4f g0 = load4(g + k), g1 = load4(g + k + 4);
    a0 += g0;
    a1 += g1;
    b0 += g0 * (load4(x + k) - m);
    b1 += g1 * (load4(x + k + 4) - m);
  }
  float s = lanes_sum(a0, a1), t = lanes_sum(b0, b1);
  for (; k < n; k++) {
    s += g[k];
    t += g[k] * (x[k] - m);
  }
  *sg = s;
  *sgx = t;
}

/* Sums over one channel's n rows of `inner` floats (row stride c * inner): float within a
 * row, double across rows, so large batches do not lose the small terms. */
/* y = (x - center) * scale + shift over one row: centred first, so that a mean large against
 * the spread does not leave x * scale and the shift to cancel each other's rounding. */
static void row_affine(int64_t inner, float center, float scale, float shift,
                       const float *restrict x, float *restrict y) {
  for (int64_t k = 0; k < inner; k++)
    y[k] = (x[k] - center) * scale + shift;
}

/* The passes are split over the instance's threads: the statistics by channels (each
 * channel's sums on one thread, in sample order whatever the split), the affine maps by
 * planes. The statistics are taken in one pass over data shifted by one of their own values
 * per channel (its first), which is within a few standard deviations of the mean, so
 * E[v^2] - E[v]^2 does not cancel the way it does for unshifted data. */
typedef struct bn_args {
  int64_t n, c, inner;
  float eps;
  const float *x, *dy, *gamma, *beta, *mean, *invstd;
  float *y, *out_mean, *out_invstd, *dgamma, *dbeta;
  /* per channel: y = k1 (x - k2) + k0 (forward), dx = k1 dy + k2 (x - mean) + k0 */
  double *k1, *k2, *k0;
} bn_args;

static gp_status bn_stats_part(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)worker;
  const bn_args *b = ctx;
  const int64_t inner = b->inner, c = b->c, count = b->n * inner;
  const float *x = b->x;
  for (int64_t j = lo; j < hi; j++) {
    double s1 = 0.0, s2 = 0.0;
    for (int64_t i = 0; i < b->n; i++) {
      float a, q;
      rowmoments(x + (i * c + j) * inner, inner, x[j * inner], &a, &q);
      s1 += a;
      s2 += q;
    }
    const double m = s1 / (double)count, v = s2 / (double)count - m * m;
    const float mf = (float)(x[j * inner] + m);
    const float is = 1.0f / sqrtf((float)(v > 0.0 ? v : 0.0) + b->eps);
    b->out_mean[j] = mf;
    b->out_invstd[j] = is;
    b->k1[j] = b->gamma[j] * is;
    b->k2[j] = mf;
    b->k0[j] = b->beta[j];
  }
  return GP_OK;
}

/* planes [lo, hi): y = k1 (x - k2) + k0 */
static gp_status bn_affine_part(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)worker;
  const bn_args *b = ctx;
  for (int64_t p = lo; p < hi; p++) {
    const int64_t j = p % b->c;
    row_affine(b->inner, (float)b->k2[j], (float)b->k1[j], (float)b->k0[j], b->x + p * b->inner,
               b->y + p * b->inner);
  }
  return GP_OK;
}

/* Per-channel coefficients from the instance's scratch (so the step loop does not allocate). */
static gp_status coefficients(gp_backend *be, bn_args *b) {
  double *acc;
  GP_TRY(gp_cpu_scratch(be, (size_t)(3 * b->c) * sizeof(double), (void **)&acc));
  b->k1 = acc;
  b->k2 = acc + b->c;
  b->k0 = acc + 2 * b->c;
  return GP_OK;
}

static int64_t plane_grain(int64_t inner) {
  return GP_CPU_GRAIN / (inner > 0 ? inner : 1) + 1;
}

gp_status gp_cpu_batchnorm_forward_train(gp_backend *be, int64_t n, int64_t c, int64_t inner,
                                         float eps, const float *x, const float *gamma,
                                         const float *beta, float *y, float *mean, float *invstd) {
  if (n * inner <= 0) return GP_ERR(GP_ERR_RUNTIME, "batch norm over an empty batch");
  bn_args b = {.n = n,
               .c = c,
               .inner = inner,
               .eps = eps,
               .x = x,
               .gamma = gamma,
               .beta = beta,
               .y = y,
               .out_mean = mean,
               .out_invstd = invstd};
  GP_TRY(coefficients(be, &b));
  GP_TRY(gp_cpu_parallel_for(be, c, plane_grain(n * inner), bn_stats_part, &b));
  return gp_cpu_parallel_for(be, n * c, plane_grain(inner), bn_affine_part, &b);
}

gp_status gp_cpu_batchnorm_forward_eval(gp_backend *be, int64_t n, int64_t c, int64_t inner,
                                        float eps, const float *x, const float *gamma,
                                        const float *beta, const float *run_mean,
                                        const float *run_var, float *y) {
  bn_args b = {.n = n, .c = c, .inner = inner, .x = x, .y = y};
  GP_TRY(coefficients(be, &b));
  for (int64_t j = 0; j < c; j++) {
    float scale = gamma[j] / sqrtf(run_var[j] + eps);
    b.k1[j] = scale;
    b.k2[j] = run_mean[j];
    b.k0[j] = beta[j];
  }
  return gp_cpu_parallel_for(be, n * c, plane_grain(inner), bn_affine_part, &b);
}

/* dx = gamma * invstd / N * (N dy - sum(dy) - xhat * sum(dy xhat)): the sums per channel. */
static gp_status bn_grad_part(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)worker;
  const bn_args *b = ctx;
  const int64_t inner = b->inner, c = b->c, count = b->n * inner;
  for (int64_t j = lo; j < hi; j++) {
    double sdy = 0.0, sdyx = 0.0;
    for (int64_t i = 0; i < b->n; i++) {
      float a, q;
      rowsum2(b->dy + (i * c + j) * inner, b->x + (i * c + j) * inner, inner, b->mean[j], &a, &q);
      sdy += a;
      sdyx += q;
    }
    const double is = b->invstd[j], sx = sdyx * is; /* sum(dy * xhat) */
    if (b->dgamma) b->dgamma[j] += (float)sx;
    if (b->dbeta) b->dbeta[j] += (float)sdy;
    b->k1[j] = b->gamma[j] * is;
    b->k2[j] = -b->gamma[j] * is * is * sx / (double)count;
    b->k0[j] = -b->gamma[j] * is * sdy / (double)count;
  }
  return GP_OK;
}

static gp_status bn_dx_part(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)worker;
  const bn_args *b = ctx;
  for (int64_t p = lo; p < hi; p++) {
    const int64_t j = p % b->c, o = p * b->inner;
    const float *restrict xp = b->x + o, *restrict gp = b->dy + o;
    float *restrict dp = b->y + o;
    const float a = (float)b->k1[j], q = (float)b->k2[j], k0 = (float)b->k0[j], m = b->mean[j];
    for (int64_t k = 0; k < b->inner; k++) /* x - m first: no cancellation where m is large */
      dp[k] = a * gp[k] + q * (xp[k] - m) + k0;
  }
  return GP_OK;
}

gp_status gp_cpu_batchnorm_backward(gp_backend *be, int64_t n, int64_t c, int64_t inner,
                                    const float *x, const float *dy, const float *gamma,
                                    const float *mean, const float *invstd, float *dx,
                                    float *dgamma, float *dbeta) {
  if (n * inner <= 0) return GP_ERR(GP_ERR_RUNTIME, "batch norm over an empty batch");
  bn_args b = {.n = n,
               .c = c,
               .inner = inner,
               .x = x,
               .dy = dy,
               .gamma = gamma,
               .mean = mean,
               .invstd = invstd,
               .y = dx,
               .dgamma = dgamma,
               .dbeta = dbeta};
  GP_TRY(coefficients(be, &b));
  GP_TRY(gp_cpu_parallel_for(be, c, plane_grain(2 * n * inner), bn_grad_part, &b));
  if (!dx) return GP_OK;
  return gp_cpu_parallel_for(be, n * c, plane_grain(inner), bn_dx_part, &b);
}

gp_status gp_cpu_batchnorm_stats_accumulate(gp_backend *be, int64_t c, int64_t before,
                                            int64_t count, float eps, const float *mean,
                                            const float *invstd, float *acc) {
  (void)be;
  const double na = (double)before, nb = (double)count, n = na + nb;
  const double q = nb / n, w = na * nb / n; /* the new values' share; the deviations' weight */
  for (int64_t j = 0; j < c; j++) {
    double var = 1.0 / ((double)invstd[j] * invstd[j]) - eps;
    if (var < 0.0) var = 0.0;
    if (before == 0) { /* the first: whatever acc holds is not pooled */
      acc[j] = mean[j];
      acc[c + j] = (float)(var * nb);
      continue;
    }
    double delta = (double)mean[j] - acc[j];
    acc[j] = (float)(acc[j] + delta * q);
    acc[c + j] = (float)(acc[c + j] + var * nb + delta * delta * w);
  }
  return GP_OK;
}

gp_status gp_cpu_batchnorm_stats_apply(gp_backend *be, int64_t c, float momentum, int64_t n,
                                       float *acc, float *run_mean, float *run_var) {
  (void)be;
  if (n <= 0) return GP_OK;
  /* PyTorch keeps the unbiased variance in running_var (Bessel's correction). */
  const float inv = (float)(1.0 / (double)(n > 1 ? n - 1 : 1));
  for (int64_t j = 0; j < c; j++) {
    run_mean[j] = (1.0f - momentum) * run_mean[j] + momentum * acc[j];
    run_var[j] = (1.0f - momentum) * run_var[j] + momentum * (acc[c + j] * inv);
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
    /* The moments about a first estimate of the mean: where the mean is large against the
     * spread, the float sum behind that estimate is off by several ulp of it, and the sum of
     * the deviations from it corrects it to within rounding. */
    const float m0 = gp_cpu_rowsum(xp, cols) / (float)cols;
    float s1, s2;
    rowmoments(xp, cols, m0, &s1, &s2);
    const float d = s1 / (float)cols, m = m0 + d;
    const float v = s2 / (float)cols - d * d;
    const float rs = 1.0f / sqrtf((v > 0.0f ? v : 0.0f) + eps);
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
