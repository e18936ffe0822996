// Batch norm over [n, c, inner] and layer norm over [rows, cols] on the CUDA backend, with
// the CPU reference's formulas (core/cpu/norm.c): statistics shifted by the channel's first
// value, biased variance in the forward pass, Bessel's correction only for the running
// variance, eps inside the square root. Element-wise steps round each product and sum the way
// the CPU does (no fused multiply-add); the reductions sum in a fixed order (partials per
// block, then per channel in block order), so results are deterministic, and close to the
// CPU's (their order differs).
#include <math.h>

#include "core/cuda/dnn_internal.h"

// Per-channel partial sums over [n, c, inner]: what they sum.
enum { SUM_STATS, SUM_BACK, SUM_PLAIN };

// Elements of a channel per block of the partial sums (at least).
#define CHAN_MIN_CHUNK 2048

// Grid of the per-channel sums: channel blocks x parts of a channel, each part a chunk of
// the channel's n * inner elements.
struct chan_plan {
  unsigned cblocks, parts;
  int64_t chunk;
};

static chan_plan chan_plan_of(gp_backend *be, int64_t c, int64_t count) {
  chan_plan p;
  int64_t target = 4 * (int64_t)gp_dnn_of(be)->sms;
  int64_t parts = (target + c - 1) / c;
  int64_t most = (count + CHAN_MIN_CHUNK - 1) / CHAN_MIN_CHUNK;
  if (parts > most) parts = most;
  if (parts > 4096) parts = 4096;
  if (parts < 1) parts = 1;
  p.chunk = (count + parts - 1) / parts;
  p.parts = (unsigned)((count + p.chunk - 1) / p.chunk);
  p.cblocks = (unsigned)(c < 65535 ? c : 65535);
  return p;
}

// part[(j * parts + p) * 2 + {0, 1}]: STATS sum(x - x0) and sum((x - x0)^2) with x0 the
// channel's first value; BACK sum(dy) and sum(dy (x - mean)); PLAIN sum(a).
template <int MODE>
__global__ void chan_partial_kernel(int64_t n, int64_t c, int64_t inner, int64_t chunk,
                                    const float *__restrict__ a, const float *__restrict__ b,
                                    const float *__restrict__ mean, double *__restrict__ part) {
  __shared__ double sh[32];
  const int64_t count = n * inner;
  const int64_t e0 = blockIdx.y * chunk, e1 = e0 + chunk < count ? e0 + chunk : count;
  for (int64_t j = blockIdx.x; j < c; j += gridDim.x) {
    const float shift = MODE == SUM_STATS ? a[j * inner] : MODE == SUM_BACK ? mean[j] : 0.0f;
    double s1 = 0.0, s2 = 0.0;
    for (int64_t e = e0 + threadIdx.x; e < e1; e += blockDim.x) {
      const int64_t i = e / inner, o = (i * c + j) * inner + (e - i * inner);
      if (MODE == SUM_STATS) {
        const float v = a[o] - shift;
        s1 += v;
        s2 += __fmul_rn(v, v);
      } else if (MODE == SUM_BACK) {
        const float g = a[o];
        s1 += g;
        s2 += __fmul_rn(g, b[o] - shift);
      } else {
        s1 += a[o];
      }
    }
    s1 = gp_dnn_block_reduce(s1, 0.0, gp_dnn_add(), sh);
    if (MODE != SUM_PLAIN) s2 = gp_dnn_block_reduce(s2, 0.0, gp_dnn_add(), sh);
    if (threadIdx.x == 0) {
      double *q = part + (j * gridDim.y + blockIdx.y) * 2;
      q[0] = s1;
      q[1] = s2;
    }
  }
}

// Sums of channel j's parts, in part order.
static __device__ __forceinline__ void chan_total(const double *part, int64_t j, unsigned parts,
                                                  double *s1, double *s2) {
  double a = 0.0, b = 0.0;
  for (unsigned p = 0; p < parts; p++) {
    a += part[(j * parts + p) * 2];
    b += part[(j * parts + p) * 2 + 1];
  }
  *s1 = a;
  *s2 = b;
}

static gp_status chan_sums(gp_backend *be, int mode, int64_t n, int64_t c, int64_t inner,
                           const float *a, const float *b, const float *mean, size_t extra,
                           chan_plan *plan, double **part, void **extra_p) {
  *plan = chan_plan_of(be, c, n * inner);
  size_t pbytes = ((size_t)c * plan->parts * 2 * sizeof(double) + 255) & ~(size_t)255;
  void *w;
  GP_TRY(gp_dnn_work(be, pbytes + extra, &w));
  *part = (double *)w;
  *extra_p = (char *)w + pbytes;
  dim3 grid(plan->cblocks, plan->parts);
  cudaStream_t s = gp_cuda_of(be)->stream;
  if (mode == SUM_STATS)
    chan_partial_kernel<SUM_STATS>
        <<<grid, GP_DNN_BLOCK, 0, s>>>(n, c, inner, plan->chunk, a, b, mean, *part);
  else if (mode == SUM_BACK)
    chan_partial_kernel<SUM_BACK>
        <<<grid, GP_DNN_BLOCK, 0, s>>>(n, c, inner, plan->chunk, a, b, mean, *part);
  else
    chan_partial_kernel<SUM_PLAIN>
        <<<grid, GP_DNN_BLOCK, 0, s>>>(n, c, inner, plan->chunk, a, b, mean, *part);
  GP_CUDA_LAUNCHED("chan_partial_kernel");
  return GP_OK;
}

__global__ void chan_sum_final_kernel(int64_t c, unsigned parts, const double *__restrict__ part,
                                      float *__restrict__ out) {
  for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < c;
       j += (int64_t)gridDim.x * blockDim.x) {
    double s1, s2;
    chan_total(part, j, parts, &s1, &s2);
    out[j] += (float)s1;
  }
}

gp_status gp_dnn_channel_sum(gp_backend *be, int64_t n, int64_t c, int64_t inner, const float *dy,
                             float *dbias) {
  if (n * inner == 0 || c == 0) return GP_OK;
  chan_plan plan;
  double *part;
  void *extra;
  GP_TRY(chan_sums(be, SUM_PLAIN, n, c, inner, dy, NULL, NULL, 0, &plan, &part, &extra));
  chan_sum_final_kernel<<<gp_dnn_blocks(be, c, GP_DNN_BLOCK), GP_DNN_BLOCK, 0,
                          gp_cuda_of(be)->stream>>>(c, plan.parts, part, dbias);
  GP_CUDA_LAUNCHED("chan_sum_final_kernel");
  return GP_OK;
}

/* ---- batch norm ---- */

// Mean and invstd from the shifted moments, and the affine map y = (x - mean) * scale + shift
// (shift = beta), centred first as on the CPU: no cancellation where the mean is large.
__global__ void bn_stats_final_kernel(int64_t c, int64_t inner, int64_t count, float eps,
                                      unsigned parts, const double *__restrict__ part,
                                      const float *__restrict__ x, const float *__restrict__ gamma,
                                      const float *__restrict__ beta, float *__restrict__ mean,
                                      float *__restrict__ invstd, float *__restrict__ scale,
                                      float *__restrict__ shift) {
  for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < c;
       j += (int64_t)gridDim.x * blockDim.x) {
    double s1, s2;
    chan_total(part, j, parts, &s1, &s2);
    const double m = s1 / (double)count, v = s2 / (double)count - __dmul_rn(m, m);
    const float mf = (float)((double)x[j * inner] + m);
    const float is = 1.0f / sqrtf((float)(v > 0.0 ? v : 0.0) + eps);
    mean[j] = mf;
    invstd[j] = is;
    const float sc = __fmul_rn(gamma[j], is);
    scale[j] = sc;
    shift[j] = beta[j];
  }
}

// y = (x - mean[j]) * scale[j] + shift[j] over [n, c, inner].
__global__ void bn_affine_kernel(int64_t total, int64_t c, int64_t inner,
                                 const float *__restrict__ mean, const float *__restrict__ scale,
                                 const float *__restrict__ shift, const float *__restrict__ x,
                                 float *__restrict__ y) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t j = (e / inner) % c;
    y[e] = __fadd_rn(__fmul_rn(__fsub_rn(x[e], mean[j]), scale[j]), shift[j]);
  }
}

static gp_status bn_forward_train(gp_backend *be, int64_t n, int64_t c, int64_t inner, float eps,
                                  const float *x, const float *gamma, const float *beta, float *y,
                                  float *mean, float *invstd) {
  GP_TRY(gp_cuda_use(be));
  const int64_t count = n * inner;
  if (count <= 0) return GP_ERR(GP_ERR_RUNTIME, "batch norm over an empty batch");
  if (c <= 0) return GP_OK;
  chan_plan plan;
  double *part;
  void *extra;
  GP_TRY(chan_sums(be, SUM_STATS, n, c, inner, x, NULL, NULL, (size_t)(2 * c) * sizeof(float),
                   &plan, &part, &extra));
  float *scale = (float *)extra, *shift = scale + c;
  cudaStream_t s = gp_cuda_of(be)->stream;
  bn_stats_final_kernel<<<gp_dnn_blocks(be, c, GP_DNN_BLOCK), GP_DNN_BLOCK, 0, s>>>(
      c, inner, count, eps, plan.parts, part, x, gamma, beta, mean, invstd, scale, shift);
  GP_CUDA_LAUNCHED("bn_stats_final_kernel");
  const int64_t total = n * c * inner;
  bn_affine_kernel<<<gp_dnn_blocks(be, total, GP_DNN_BLOCK), GP_DNN_BLOCK, 0, s>>>(
      total, c, inner, mean, scale, shift, x, y);
  GP_CUDA_LAUNCHED("bn_affine_kernel");
  return GP_OK;
}

__global__ void bn_eval_kernel(int64_t total, int64_t c, int64_t inner, float eps,
                               const float *__restrict__ x, const float *__restrict__ gamma,
                               const float *__restrict__ beta, const float *__restrict__ rm,
                               const float *__restrict__ rv, float *__restrict__ y) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t j = (e / inner) % c;
    const float scale = gamma[j] / sqrtf(rv[j] + eps);
    y[e] = __fadd_rn(__fmul_rn(__fsub_rn(x[e], rm[j]), scale), beta[j]);
  }
}

static gp_status bn_forward_eval(gp_backend *be, int64_t n, int64_t c, int64_t inner, float eps,
                                 const float *x, const float *gamma, const float *beta,
                                 const float *run_mean, const float *run_var, float *y) {
  GP_TRY(gp_cuda_use(be));
  const int64_t total = n * c * inner;
  if (total <= 0) return GP_OK;
  bn_eval_kernel<<<gp_dnn_blocks(be, total, GP_DNN_BLOCK), GP_DNN_BLOCK, 0,
                   gp_cuda_of(be)->stream>>>(total, c, inner, eps, x, gamma, beta, run_mean,
                                             run_var, y);
  GP_CUDA_LAUNCHED("bn_eval_kernel");
  return GP_OK;
}

// Parameter gradients and dx = k1 dy + k2 (x - mean) + k0 per channel (the CPU's form).
__global__ void bn_back_final_kernel(int64_t c, int64_t count, unsigned parts,
                                     const double *__restrict__ part,
                                     const float *__restrict__ gamma,
                                     const float *__restrict__ mean,
                                     const float *__restrict__ invstd, float *__restrict__ dgamma,
                                     float *__restrict__ dbeta, float *__restrict__ k) {
  for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < c;
       j += (int64_t)gridDim.x * blockDim.x) {
    double sdy, sdyx;
    chan_total(part, j, parts, &sdy, &sdyx);
    const double is = invstd[j], sx = sdyx * is; // sum(dy * xhat)
    if (dgamma) dgamma[j] += (float)sx;
    if (dbeta) dbeta[j] += (float)sdy;
    const double k1 = gamma[j] * is;
    const double k2 = -gamma[j] * is * is * sx / (double)count;
    const double k0 = -gamma[j] * is * sdy / (double)count;
    k[3 * j] = (float)k1;
    k[3 * j + 1] = (float)k2;
    k[3 * j + 2] = (float)k0;
  }
}

__global__ void bn_dx_kernel(int64_t total, int64_t c, int64_t inner, const float *__restrict__ k,
                             const float *__restrict__ mean, const float *__restrict__ x,
                             const float *__restrict__ dy, float *__restrict__ dx) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t j = (e / inner) % c;
    const float a = k[3 * j], b = k[3 * j + 1], k0 = k[3 * j + 2];
    dx[e] = __fadd_rn(__fadd_rn(__fmul_rn(a, dy[e]), __fmul_rn(b, __fsub_rn(x[e], mean[j]))), k0);
  }
}

static gp_status bn_backward(gp_backend *be, int64_t n, int64_t c, int64_t inner, const float *x,
                             const float *dy, const float *gamma, const float *mean,
                             const float *invstd, float *dx, float *dgamma, float *dbeta) {
  GP_TRY(gp_cuda_use(be));
  const int64_t count = n * inner;
  if (count <= 0) return GP_ERR(GP_ERR_RUNTIME, "batch norm over an empty batch");
  if (c <= 0) return GP_OK;
  chan_plan plan;
  double *part;
  void *extra;
  GP_TRY(chan_sums(be, SUM_BACK, n, c, inner, dy, x, mean, (size_t)(3 * c) * sizeof(float), &plan,
                   &part, &extra));
  float *k = (float *)extra;
  cudaStream_t s = gp_cuda_of(be)->stream;
  bn_back_final_kernel<<<gp_dnn_blocks(be, c, GP_DNN_BLOCK), GP_DNN_BLOCK, 0, s>>>(
      c, count, plan.parts, part, gamma, mean, invstd, dgamma, dbeta, k);
  GP_CUDA_LAUNCHED("bn_back_final_kernel");
  if (!dx) return GP_OK;
  const int64_t total = n * c * inner;
  bn_dx_kernel<<<gp_dnn_blocks(be, total, GP_DNN_BLOCK), GP_DNN_BLOCK, 0, s>>>(total, c, inner, k,
                                                                               mean, x, dy, dx);
  GP_CUDA_LAUNCHED("bn_dx_kernel");
  return GP_OK;
}

// Chan et al.'s pooling, as gp_cpu_batchnorm_stats_accumulate (the same double operations)
__global__ void bn_stats_acc_kernel(int64_t c, int first, double nb, double q, double w, float eps,
                                    const float *__restrict__ mean,
                                    const float *__restrict__ invstd, float *__restrict__ acc) {
  for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < c;
       j += (int64_t)gridDim.x * blockDim.x) {
    double var = __dsub_rn(__ddiv_rn(1.0, __dmul_rn((double)invstd[j], (double)invstd[j])), eps);
    if (var < 0.0) var = 0.0;
    if (first) {
      acc[j] = mean[j];
      acc[c + j] = (float)__dmul_rn(var, nb);
      continue;
    }
    double a = acc[j], delta = __dsub_rn((double)mean[j], a);
    acc[j] = (float)__dadd_rn(a, __dmul_rn(delta, q));
    acc[c + j] = (float)__dadd_rn(__dadd_rn((double)acc[c + j], __dmul_rn(var, nb)),
                                  __dmul_rn(__dmul_rn(delta, delta), w));
  }
}

static gp_status bn_stats_accumulate(gp_backend *be, int64_t c, int64_t before, int64_t count,
                                     float eps, const float *mean, const float *invstd,
                                     float *acc) {
  GP_TRY(gp_cuda_use(be));
  if (c <= 0) return GP_OK;
  const double na = (double)before, nb = (double)count, n = na + nb;
  const double q = nb / n, w = na * nb / n;
  bn_stats_acc_kernel<<<gp_dnn_blocks(be, c, GP_DNN_BLOCK), GP_DNN_BLOCK, 0,
                        gp_cuda_of(be)->stream>>>(c, before == 0, nb, q, w, eps, mean, invstd, acc);
  GP_CUDA_LAUNCHED("bn_stats_acc_kernel");
  return GP_OK;
}

__global__ void bn_stats_apply_kernel(int64_t c, float momentum, float inv, float *__restrict__ acc,
                                      float *__restrict__ rm, float *__restrict__ rv) {
  for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < c;
       j += (int64_t)gridDim.x * blockDim.x) {
    const float keep = 1.0f - momentum;
    rm[j] = __fadd_rn(__fmul_rn(keep, rm[j]), __fmul_rn(momentum, acc[j]));
    rv[j] = __fadd_rn(__fmul_rn(keep, rv[j]), __fmul_rn(momentum, __fmul_rn(acc[c + j], inv)));
    acc[j] = acc[c + j] = 0.0f;
  }
}

static gp_status bn_stats_apply(gp_backend *be, int64_t c, float momentum, int64_t n, float *acc,
                                float *run_mean, float *run_var) {
  GP_TRY(gp_cuda_use(be));
  if (n <= 0 || c <= 0) return GP_OK;
  // PyTorch keeps the unbiased variance in running_var (Bessel's correction).
  const float inv = (float)(1.0 / (double)(n > 1 ? n - 1 : 1));
  bn_stats_apply_kernel<<<gp_dnn_blocks(be, c, GP_DNN_BLOCK), GP_DNN_BLOCK, 0,
                          gp_cuda_of(be)->stream>>>(c, momentum, inv, acc, run_mean, run_var);
  GP_CUDA_LAUNCHED("bn_stats_apply_kernel");
  return GP_OK;
}

/* ---- layer norm: a block per row for the row statistics and dx; the parameter gradients
 * as column sums over row ranges, then over the ranges in order ---- */

__global__ void ln_fwd_kernel(int64_t rows, int64_t cols, float eps, const float *__restrict__ x,
                              const float *__restrict__ gamma, const float *__restrict__ beta,
                              float *__restrict__ y, float *__restrict__ mean,
                              float *__restrict__ rstd) {
  __shared__ float sh[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *xp = x + r * cols;
    float s = 0.0f;
    for (int64_t k = threadIdx.x; k < cols; k += blockDim.x)
      s += xp[k];
    // moments about a first estimate of the mean, which the deviations' sum then corrects
    // (as on the CPU: where the mean is large against the spread the float sum is off)
    const float m0 = gp_dnn_block_reduce(s, 0.0f, gp_dnn_add(), sh) / (float)cols;
    float p = 0.0f, q = 0.0f;
    for (int64_t k = threadIdx.x; k < cols; k += blockDim.x) {
      const float v = __fsub_rn(xp[k], m0);
      p = __fadd_rn(p, v);
      q = __fadd_rn(q, __fmul_rn(v, v));
    }
    const float d = gp_dnn_block_reduce(p, 0.0f, gp_dnn_add(), sh) / (float)cols;
    const float s2 = gp_dnn_block_reduce(q, 0.0f, gp_dnn_add(), sh);
    const float m = m0 + d, v = __fsub_rn(s2 / (float)cols, __fmul_rn(d, d));
    const float rs = 1.0f / sqrtf((v > 0.0f ? v : 0.0f) + eps);
    float *yp = y + r * cols;
    for (int64_t k = threadIdx.x; k < cols; k += blockDim.x)
      yp[k] = __fadd_rn(__fmul_rn(__fmul_rn(xp[k] - m, rs), gamma[k]), beta[k]);
    if (threadIdx.x == 0) {
      if (mean) mean[r] = m;
      if (rstd) rstd[r] = rs;
    }
  }
}

static gp_status ln_forward(gp_backend *be, int64_t rows, int64_t cols, float eps, const float *x,
                            const float *gamma, const float *beta, float *y, float *mean,
                            float *rstd) {
  GP_TRY(gp_cuda_use(be));
  if (cols <= 0) return GP_ERR(GP_ERR_RUNTIME, "layer norm over an empty row");
  if (rows <= 0) return GP_OK;
  const int t = gp_dnn_row_threads(cols);
  ln_fwd_kernel<<<gp_dnn_blocks(be, rows * t, t), t, 0, gp_cuda_of(be)->stream>>>(
      rows, cols, eps, x, gamma, beta, y, mean, rstd);
  GP_CUDA_LAUNCHED("ln_fwd_kernel");
  return GP_OK;
}

// dx = rstd * (g dy - mean(g dy) - xhat mean(g dy xhat)) per row.
__global__ void ln_dx_kernel(int64_t rows, int64_t cols, const float *__restrict__ x,
                             const float *__restrict__ dy, const float *__restrict__ gamma,
                             const float *__restrict__ mean, const float *__restrict__ rstd,
                             float *__restrict__ dx) {
  __shared__ float sh[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *xp = x + r * cols, *gp = dy + r * cols;
    const float m = mean[r], rs = rstd[r];
    float a = 0.0f, b = 0.0f;
    for (int64_t k = threadIdx.x; k < cols; k += blockDim.x) {
      const float xh = __fmul_rn(xp[k] - m, rs), gd = __fmul_rn(gamma[k], gp[k]);
      a += gd;
      b = __fadd_rn(b, __fmul_rn(gd, xh));
    }
    a = gp_dnn_block_reduce(a, 0.0f, gp_dnn_add(), sh) / (float)cols;
    b = gp_dnn_block_reduce(b, 0.0f, gp_dnn_add(), sh) / (float)cols;
    float *dp = dx + r * cols;
    for (int64_t k = threadIdx.x; k < cols; k += blockDim.x) {
      const float xh = __fmul_rn(xp[k] - m, rs), gd = __fmul_rn(gamma[k], gp[k]);
      dp[k] = __fmul_rn(rs, __fsub_rn(gd - a, __fmul_rn(xh, b)));
    }
  }
}

// part[(p * cols + k) * 2 + {0, 1}] = sums over rows [p * rchunk, ...) of dy xhat and dy.
__global__ void ln_param_partial_kernel(int64_t rows, int64_t cols, int64_t rchunk,
                                        const float *__restrict__ x, const float *__restrict__ dy,
                                        const float *__restrict__ mean,
                                        const float *__restrict__ rstd, double *__restrict__ part) {
  const int64_t r0 = blockIdx.y * rchunk, r1 = r0 + rchunk < rows ? r0 + rchunk : rows;
  for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < cols;
       k += (int64_t)gridDim.x * blockDim.x) {
    double sg = 0.0, sb = 0.0;
    for (int64_t r = r0; r < r1; r++) {
      const float g = dy[r * cols + k];
      const float xh = __fmul_rn(x[r * cols + k] - mean[r], rstd[r]);
      sg += __fmul_rn(g, xh);
      sb += g;
    }
    double *q = part + (blockIdx.y * cols + k) * 2;
    q[0] = sg;
    q[1] = sb;
  }
}

__global__ void ln_param_final_kernel(int64_t cols, unsigned parts, const double *__restrict__ part,
                                      float *__restrict__ dgamma, float *__restrict__ dbeta) {
  for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < cols;
       k += (int64_t)gridDim.x * blockDim.x) {
    double sg = 0.0, sb = 0.0;
    for (unsigned p = 0; p < parts; p++) {
      sg += part[(p * cols + k) * 2];
      sb += part[(p * cols + k) * 2 + 1];
    }
    if (dgamma) dgamma[k] += (float)sg;
    if (dbeta) dbeta[k] += (float)sb;
  }
}

static gp_status ln_backward(gp_backend *be, int64_t rows, int64_t cols, const float *x,
                             const float *dy, const float *gamma, const float *mean,
                             const float *rstd, float *dx, float *dgamma, float *dbeta) {
  GP_TRY(gp_cuda_use(be));
  if (cols <= 0) return GP_ERR(GP_ERR_RUNTIME, "layer norm over an empty row");
  if (rows <= 0) return GP_OK;
  cudaStream_t s = gp_cuda_of(be)->stream;
  if (dgamma || dbeta) {
    // Row ranges of at least 32 rows, enough of them to fill the device.
    const int64_t cblocks = (cols + GP_DNN_BLOCK - 1) / GP_DNN_BLOCK;
    int64_t parts = 4 * (int64_t)gp_dnn_of(be)->sms / (cblocks < 1 ? 1 : cblocks);
    if (parts > (rows + 31) / 32) parts = (rows + 31) / 32;
    if (parts > 4096) parts = 4096;
    if (parts < 1) parts = 1;
    const int64_t rchunk = (rows + parts - 1) / parts;
    parts = (rows + rchunk - 1) / rchunk;
    void *w;
    GP_TRY(gp_dnn_work(be, (size_t)(parts * cols * 2) * sizeof(double), &w));
    dim3 grid((unsigned)(cblocks < 65535 ? cblocks : 65535), (unsigned)parts);
    ln_param_partial_kernel<<<grid, GP_DNN_BLOCK, 0, s>>>(rows, cols, rchunk, x, dy, mean, rstd,
                                                          (double *)w);
    GP_CUDA_LAUNCHED("ln_param_partial_kernel");
    ln_param_final_kernel<<<gp_dnn_blocks(be, cols, GP_DNN_BLOCK), GP_DNN_BLOCK, 0, s>>>(
        cols, (unsigned)parts, (const double *)w, dgamma, dbeta);
    GP_CUDA_LAUNCHED("ln_param_final_kernel");
  }
  if (dx) {
    const int t = gp_dnn_row_threads(cols);
    ln_dx_kernel<<<gp_dnn_blocks(be, rows * t, t), t, 0, s>>>(rows, cols, x, dy, gamma, mean, rstd,
                                                              dx);
    GP_CUDA_LAUNCHED("ln_dx_kernel");
  }
  return GP_OK;
}

void gp_dnn_install_norm(gp_backend *be) {
  be->batchnorm_forward_train = bn_forward_train;
  be->batchnorm_forward_eval = bn_forward_eval;
  be->batchnorm_backward = bn_backward;
  be->batchnorm_stats_accumulate = bn_stats_accumulate;
  be->batchnorm_stats_apply = bn_stats_apply;
  be->layernorm_forward = ln_forward;
  be->layernorm_backward = ln_backward;
}
