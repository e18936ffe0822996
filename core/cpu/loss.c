/* CPU softmax cross-entropy (with label smoothing) and the host-side reductions the
 * trainer reads: sums, sums of squares, correct predictions. */
#include <math.h>

#include "core/cpu/cpu.h"

static gp_status check_label(int32_t y, int64_t k, int64_t row) {
  if (y < 0 || y >= k)
    return GP_ERR(GP_ERR_RUNTIME, "label %d of sample %lld is outside [0, %lld)", (int)y,
                  (long long)row, (long long)k);
  return GP_OK;
}

gp_status gp_cpu_softmax_xent_forward(gp_backend *be, int64_t n, int64_t k, float smoothing,
                                      const float *logits, const int32_t *labels, float *probs,
                                      float *loss) {
  (void)be;
  if (k <= 0) return GP_ERR(GP_ERR_RUNTIME, "softmax over %lld classes", (long long)k);
  for (int64_t i = 0; i < n; i++) {
    GP_TRY(check_label(labels[i], k, i));
    const float *restrict z = logits + i * k;
    float *restrict p = probs + i * k;
    float mx = z[0];
    for (int64_t j = 1; j < k; j++)
      mx = z[j] > mx ? z[j] : mx;
    double se = 0.0, sz = 0.0;
    for (int64_t j = 0; j < k; j++) {
      float e = expf(z[j] - mx);
      p[j] = e;
      se += e;
      sz += z[j] - mx;
    }
    const float inv = (float)(1.0 / se);
    for (int64_t j = 0; j < k; j++)
      p[j] *= inv;
    /* log p_j = z_j - mx - log(se): exact even where p_j underflows to 0. */
    double lse = log(se);
    double nll = -((double)z[labels[i]] - mx - lse);
    double smooth = -(sz / (double)k - lse);
    loss[i] = (float)((1.0 - smoothing) * nll + smoothing * smooth);
  }
  return GP_OK;
}

gp_status gp_cpu_softmax_xent_backward(gp_backend *be, int64_t n, int64_t k, float smoothing,
                                       float scale, const float *probs, const int32_t *labels,
                                       float *dlogits) {
  (void)be;
  const float off = smoothing / (float)k, on = 1.0f - smoothing;
  for (int64_t i = 0; i < n; i++) {
    GP_TRY(check_label(labels[i], k, i));
    const float *restrict p = probs + i * k;
    float *restrict d = dlogits + i * k;
    for (int64_t j = 0; j < k; j++)
      d[j] = scale * (p[j] - off);
    d[labels[i]] -= scale * on;
  }
  return GP_OK;
}

gp_status gp_cpu_sum(gp_backend *be, int64_t n, const float *x, double *host_out) {
  (void)be;
  double s = 0.0;
  for (int64_t i = 0; i < n; i++)
    s += x[i];
  *host_out = s;
  return GP_OK;
}

gp_status gp_cpu_sumsq(gp_backend *be, int64_t n, const float *x, double *host_out) {
  (void)be;
  double s = 0.0;
  for (int64_t i = 0; i < n; i++)
    s += (double)x[i] * x[i];
  *host_out = s;
  return GP_OK;
}

gp_status gp_cpu_count_correct(gp_backend *be, int64_t n, int64_t k, const float *logits,
                               const int32_t *labels, int64_t *host_out) {
  (void)be;
  int64_t ok = 0;
  for (int64_t i = 0; i < n; i++) {
    const float *z = logits + i * k;
    int64_t best = 0;
    for (int64_t j = 1; j < k; j++)
      if (z[j] > z[best]) best = j; /* first maximum wins, as torch.argmax */
    ok += best == labels[i];
  }
  *host_out = ok;
  return GP_OK;
}
