/* CPU RMS norm over the last dim of [rows, cols] (Llama's LlamaRMSNorm, in f32): rows split
 * over the instance's threads, the weight gradient over columns, so no result depends on the
 * thread count. */
#include <math.h>
#include <string.h>

#include "core/cpu/cpu.h"

typedef float v4f __attribute__((vector_size(16)));

static inline v4f load4(const float *p) {
  v4f v;
  memcpy(&v, p, sizeof v);
  return v;
}

static inline float lanes_sum(v4f lo, v4f hi) {
  return ((lo[0] + lo[1]) + (lo[2] + lo[3])) + ((hi[0] + hi[1]) + (hi[2] + hi[3]));
}

/* sum(a * b) with 8 partial sums: one accumulator would be a chain of dependent adds that
 * strict IEEE order keeps the compiler from splitting (as norm.c's row sums). */
static float dot8(const float *restrict a, const float *restrict b, int64_t n) {
  v4f s0 = {0}, s1 = {0};
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    s0 += load4(a + k) * load4(b + k);
    s1 += load4(a + k + 4) * load4(b + k + 4);
  }
  float s = lanes_sum(s0, s1);
  for (; k < n; k++)
    s += a[k] * b[k];
  return s;
}

typedef struct rms_args {
  int64_t rows, cols;
  float eps;
  const float *x, *dy, *w, *rstd_in;
  float *y, *rstd, *dx, *dw;
} rms_args;

static gp_status fwd_part(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)worker;
  const rms_args *a = ctx;
  const int64_t cols = a->cols;
  for (int64_t r = lo; r < hi; r++) {
    const float *restrict xp = a->x + r * cols;
    float *restrict yp = a->y + r * cols;
    const float *restrict w = a->w;
    /* as LlamaRMSNorm: x * rsqrt(mean(x^2) + eps), then times the weight */
    const float rs = 1.0f / sqrtf(dot8(xp, xp, cols) / (float)cols + a->eps);
    for (int64_t k = 0; k < cols; k++)
      yp[k] = xp[k] * rs * w[k];
    if (a->rstd) a->rstd[r] = rs;
  }
  return GP_OK;
}

gp_status gp_cpu_rmsnorm_forward(gp_backend *be, int64_t rows, int64_t cols, float eps,
                                 const float *x, const float *w, float *y, float *rstd) {
  if (cols <= 0) return GP_ERR(GP_ERR_RUNTIME, "rms norm over an empty row");
  if (rows <= 0) return GP_OK;
  rms_args a = {.rows = rows, .cols = cols, .eps = eps, .x = x, .w = w, .y = y, .rstd = rstd};
  return gp_cpu_parallel_for(be, rows, gp_cpu_row_grain(cols), fwd_part, &a);
}

/* dx = rstd (g - xhat mean(g xhat)), g = dy w, xhat = x rstd: rstd's own derivative is
 * -rstd^3 x / cols, which folds into the second term. */
static gp_status dx_part(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)worker;
  const rms_args *a = ctx;
  const int64_t cols = a->cols;
  for (int64_t r = lo; r < hi; r++) {
    const float *restrict xp = a->x + r * cols;
    const float *restrict gp = a->dy + r * cols;
    const float *restrict w = a->w;
    float *restrict dp = a->dx + r * cols;
    const float rs = a->rstd_in[r];
    /* sum(dy w x) rstd, not sum(dy w (x rstd)): one product fewer per element */
    v4f s0 = {0}, s1 = {0};
    int64_t k = 0;
    for (; k + 8 <= cols; k += 8) {
      s0 += load4(gp + k) * load4(w + k) * load4(xp + k);
      s1 += load4(gp + k + 4) * load4(w + k + 4) * load4(xp + k + 4);
    }
    float s = lanes_sum(s0, s1);
    for (; k < cols; k++)
      s += gp[k] * w[k] * xp[k];
    const float c = s * rs / (float)cols;
    for (k = 0; k < cols; k++)
      dp[k] = rs * (gp[k] * w[k] - xp[k] * rs * c);
  }
  return GP_OK;
}

/* dw[k] += dy[r, k] xhat[r, k] over the rows in order, for the columns [lo, hi): the same sum
 * however the columns are split. */
static gp_status dw_part(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)worker;
  const rms_args *a = ctx;
  const int64_t cols = a->cols, n = hi - lo;
  float *restrict dw = a->dw + lo;
  for (int64_t r = 0; r < a->rows; r++) {
    const float *restrict xp = a->x + r * cols + lo;
    const float *restrict gp = a->dy + r * cols + lo;
    const float rs = a->rstd_in[r];
    for (int64_t k = 0; k < n; k++)
      dw[k] += gp[k] * (xp[k] * rs);
  }
  return GP_OK;
}

gp_status gp_cpu_rmsnorm_backward(gp_backend *be, int64_t rows, int64_t cols, const float *x,
                                  const float *dy, const float *w, const float *rstd, float *dx,
                                  float *dw) {
  if (cols <= 0) return GP_ERR(GP_ERR_RUNTIME, "rms norm over an empty row");
  if (rows <= 0) return GP_OK;
  rms_args a = {
      .rows = rows, .cols = cols, .x = x, .dy = dy, .w = w, .rstd_in = rstd, .dx = dx, .dw = dw};
  if (dx) GP_TRY(gp_cpu_parallel_for(be, rows, gp_cpu_row_grain(cols), dx_part, &a));
  if (dw) GP_TRY(gp_cpu_parallel_for(be, cols, gp_cpu_row_grain(rows), dw_part, &a));
  return GP_OK;
}
