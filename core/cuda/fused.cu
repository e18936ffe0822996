// The residual add and the norm after it in one kernel (be->add_layernorm_forward,
// be->add_rmsnorm_forward): a block per row writes s = a + b (bf16-mixed: rounded, as the
// unfused pass rounds the add's output), then normalizes the s it wrote, with the formulas of
// dnn_norm.cu's and dnn_rmsnorm.cu's forward kernels (the CPU's: no fused multiply-add).
// One read of a and b instead of the add's two reads and a write, then the norm's read.
#include <math.h>

#include "core/cuda/dnn_internal.h"
#include "core/cuda/fused.h"

namespace {

// bf16.cu's rounding (the CPU's: to nearest, ties to even, a NaN quieted with its sign).
__device__ __forceinline__ float round_bf16(float f) {
  const uint32_t u = __float_as_uint(f);
  const uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t q = (u | 0x00400000u) >> 16;
  return __uint_as_float((uint32_t)((u & 0x7fffffffu) > 0x7f800000u ? q : r) << 16);
}

// s[k] = a[k] + b[k] over this row, by this thread's columns (read back by the same thread:
// no barrier needed); returns the thread's part of the sum of s.
__device__ __forceinline__ float add_row(int64_t cols, int round_sum, const float *a,
                                         const float *b, float *s) {
  float t = 0.0f;
  for (int64_t k = threadIdx.x; k < cols; k += blockDim.x) {
    float v = __fadd_rn(a[k], b[k]);
    if (round_sum) v = round_bf16(v);
    s[k] = v;
    t += v;
  }
  return t;
}

__global__ void add_ln_kernel(int64_t rows, int64_t cols, float eps, int round_sum,
                              const float *__restrict__ a, const float *__restrict__ b,
                              const float *__restrict__ gamma, const float *__restrict__ beta,
                              float *__restrict__ s, float *__restrict__ y,
                              float *__restrict__ mean, float *__restrict__ rstd) {
  __shared__ float sh[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    float *sp = s + r * cols;
    const float t = add_row(cols, round_sum, a + r * cols, b + r * cols, sp);
    // as ln_fwd_kernel: moments about a first estimate of the mean, corrected by the
    // deviations' sum
    const float m0 = gp_dnn_block_reduce(t, 0.0f, gp_dnn_add(), sh) / (float)cols;
    float p = 0.0f, q = 0.0f;
    for (int64_t k = threadIdx.x; k < cols; k += blockDim.x) {
      const float v = __fsub_rn(sp[k], m0);
      p = __fadd_rn(p, v);
      q = __fadd_rn(q, __fmul_rn(v, v));
    }
    const float d = gp_dnn_block_reduce(p, 0.0f, gp_dnn_add(), sh) / (float)cols;
    const float s2 = gp_dnn_block_reduce(q, 0.0f, gp_dnn_add(), sh);
    const float m = m0 + d, v = __fsub_rn(s2 / (float)cols, __fmul_rn(d, d));
    const float rs = 1.0f / sqrtf((v > 0.0f ? v : 0.0f) + eps);
    float *yp = y + r * cols;
    for (int64_t k = threadIdx.x; k < cols; k += blockDim.x)
      yp[k] = __fadd_rn(__fmul_rn(__fmul_rn(sp[k] - m, rs), gamma[k]), beta[k]);
    if (threadIdx.x == 0) {
      if (mean) mean[r] = m;
      if (rstd) rstd[r] = rs;
    }
  }
}

__global__ void add_rms_kernel(int64_t rows, int64_t cols, float eps, int round_sum,
                               const float *__restrict__ a, const float *__restrict__ b,
                               const float *__restrict__ w, float *__restrict__ s,
                               float *__restrict__ y, float *__restrict__ rstd) {
  __shared__ float sh[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    float *sp = s + r * cols;
    (void)add_row(cols, round_sum, a + r * cols, b + r * cols, sp);
    float q = 0.0f;
    for (int64_t k = threadIdx.x; k < cols; k += blockDim.x)
      q = __fadd_rn(q, __fmul_rn(sp[k], sp[k]));
    const float ss = gp_dnn_block_reduce(q, 0.0f, gp_dnn_add(), sh);
    const float rs = 1.0f / sqrtf(ss / (float)cols + eps);
    float *yp = y + r * cols;
    for (int64_t k = threadIdx.x; k < cols; k += blockDim.x)
      yp[k] = __fmul_rn(__fmul_rn(sp[k], rs), w[k]);
    if (threadIdx.x == 0 && rstd) rstd[r] = rs;
  }
}

gp_status add_ln_forward(gp_backend *be, int64_t rows, int64_t cols, float eps, int round_sum,
                         const float *a, const float *b, const float *gamma, const float *beta,
                         float *s, float *y, float *mean, float *rstd) {
  GP_TRY(gp_cuda_use(be));
  if (cols <= 0) return GP_ERR(GP_ERR_RUNTIME, "layer norm over an empty row");
  if (rows <= 0) return GP_OK;
  const int t = gp_dnn_row_threads(cols);
  add_ln_kernel<<<gp_dnn_blocks(be, rows * t, t), t, 0, gp_cuda_of(be)->stream>>>(
      rows, cols, eps, round_sum, a, b, gamma, beta, s, y, mean, rstd);
  GP_CUDA_LAUNCHED("add_ln_kernel");
  return GP_OK;
}

gp_status add_rms_forward(gp_backend *be, int64_t rows, int64_t cols, float eps, int round_sum,
                          const float *a, const float *b, const float *w, float *s, float *y,
                          float *rstd) {
  GP_TRY(gp_cuda_use(be));
  if (cols <= 0) return GP_ERR(GP_ERR_RUNTIME, "rms norm over an empty row");
  if (rows <= 0) return GP_OK;
  const int t = gp_dnn_row_threads(cols);
  add_rms_kernel<<<gp_dnn_blocks(be, rows * t, t), t, 0, gp_cuda_of(be)->stream>>>(
      rows, cols, eps, round_sum, a, b, w, s, y, rstd);
  GP_CUDA_LAUNCHED("add_rms_kernel");
  return GP_OK;
}

} // namespace

void gp_cuda_fused_install(gp_backend *be) {
  be->linear_act_forward = gp_cuda_lt_linear_act;
  be->add_layernorm_forward = add_ln_forward;
  be->add_rmsnorm_forward = add_rms_forward;
}
