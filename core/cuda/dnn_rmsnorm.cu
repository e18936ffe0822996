// RMS norm over [rows, cols] on the CUDA backend, with the CPU reference's formulas
// (core/cpu/rmsnorm.c): a block per row for rstd and dx, the weight gradient as column sums
// over row ranges in double, then over the ranges in order, so results are deterministic.
// Products are rounded as the CPU rounds them (no fused multiply-add).
#include <math.h>

#include "core/cuda/dnn_internal.h"

namespace {

__global__ void rms_fwd_kernel(int64_t rows, int64_t cols, float eps, const float *__restrict__ x,
                               const float *__restrict__ w, float *__restrict__ y,
                               float *__restrict__ rstd) {
  __shared__ float sh[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *xp = x + r * cols;
    float q = 0.0f;
    for (int64_t k = threadIdx.x; k < cols; k += blockDim.x)
      q = __fadd_rn(q, __fmul_rn(xp[k], xp[k]));
    const float ss = gp_dnn_block_reduce(q, 0.0f, gp_dnn_add(), sh);
    const float rs = 1.0f / sqrtf(ss / (float)cols + eps);
    float *yp = y + r * cols;
    for (int64_t k = threadIdx.x; k < cols; k += blockDim.x)
      yp[k] = __fmul_rn(__fmul_rn(xp[k], rs), w[k]);
    if (threadIdx.x == 0 && rstd) rstd[r] = rs;
  }
}

// dx = rstd (g - xhat mean(g xhat)), g = dy w, xhat = x rstd, per row.
__global__ void rms_dx_kernel(int64_t rows, int64_t cols, const float *__restrict__ x,
                              const float *__restrict__ dy, const float *__restrict__ w,
                              const float *__restrict__ rstd, float *__restrict__ dx) {
  __shared__ float sh[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *xp = x + r * cols, *gp = dy + r * cols;
    const float rs = rstd[r];
    float s = 0.0f;
    for (int64_t k = threadIdx.x; k < cols; k += blockDim.x)
      s = __fadd_rn(s, __fmul_rn(__fmul_rn(gp[k], w[k]), xp[k]));
    s = gp_dnn_block_reduce(s, 0.0f, gp_dnn_add(), sh);
    const float c = __fmul_rn(s, rs) / (float)cols;
    float *dp = dx + r * cols;
    for (int64_t k = threadIdx.x; k < cols; k += blockDim.x)
      dp[k] = __fmul_rn(rs, __fsub_rn(__fmul_rn(gp[k], w[k]), __fmul_rn(__fmul_rn(xp[k], rs), c)));
  }
}

// part[p * cols + k] = the sum over rows [p * rchunk, ...) of dy xhat.
__global__ void rms_dw_partial_kernel(int64_t rows, int64_t cols, int64_t rchunk,
                                      const float *__restrict__ x, const float *__restrict__ dy,
                                      const float *__restrict__ rstd, double *__restrict__ part) {
  const int64_t r0 = blockIdx.y * rchunk, r1 = r0 + rchunk < rows ? r0 + rchunk : rows;
  for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < cols;
       k += (int64_t)gridDim.x * blockDim.x) {
    double s = 0.0;
    for (int64_t r = r0; r < r1; r++)
      s += __fmul_rn(dy[r * cols + k], __fmul_rn(x[r * cols + k], rstd[r]));
    part[blockIdx.y * cols + k] = s;
  }
}

__global__ void rms_dw_final_kernel(int64_t cols, unsigned parts, const double *__restrict__ part,
                                    float *__restrict__ dw) {
  for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < cols;
       k += (int64_t)gridDim.x * blockDim.x) {
    double s = 0.0;
    for (unsigned p = 0; p < parts; p++)
      s += part[p * cols + k];
    dw[k] += (float)s;
  }
}

gp_status rms_forward(gp_backend *be, int64_t rows, int64_t cols, float eps, const float *x,
                      const float *w, float *y, float *rstd) {
  GP_TRY(gp_cuda_use(be));
  if (cols <= 0) return GP_ERR(GP_ERR_RUNTIME, "rms norm over an empty row");
  if (rows <= 0) return GP_OK;
  const int t = gp_dnn_row_threads(cols);
  rms_fwd_kernel<<<gp_dnn_blocks(be, rows * t, t), t, 0, gp_cuda_of(be)->stream>>>(rows, cols, eps,
                                                                                   x, w, y, rstd);
  GP_CUDA_LAUNCHED("rms_fwd_kernel");
  return GP_OK;
}

gp_status rms_backward(gp_backend *be, int64_t rows, int64_t cols, const float *x, const float *dy,
                       const float *w, const float *rstd, float *dx, float *dw) {
  GP_TRY(gp_cuda_use(be));
  if (cols <= 0) return GP_ERR(GP_ERR_RUNTIME, "rms norm over an empty row");
  if (rows <= 0) return GP_OK;
  cudaStream_t s = gp_cuda_of(be)->stream;
  if (dw) {
    // Row ranges of at least 32 rows, enough of them to fill the device (as layer norm's).
    const int64_t cblocks = (cols + GP_DNN_BLOCK - 1) / GP_DNN_BLOCK;
    int64_t parts = 4 * (int64_t)gp_dnn_of(be)->sms / (cblocks < 1 ? 1 : cblocks);
    if (parts > (rows + 31) / 32) parts = (rows + 31) / 32;
    if (parts > 4096) parts = 4096;
    if (parts < 1) parts = 1;
    const int64_t rchunk = (rows + parts - 1) / parts;
    parts = (rows + rchunk - 1) / rchunk;
    void *work;
    GP_TRY(gp_dnn_work(be, (size_t)(parts * cols) * sizeof(double), &work));
    dim3 grid((unsigned)(cblocks < 65535 ? cblocks : 65535), (unsigned)parts);
    rms_dw_partial_kernel<<<grid, GP_DNN_BLOCK, 0, s>>>(rows, cols, rchunk, x, dy, rstd,
                                                        (double *)work);
    GP_CUDA_LAUNCHED("rms_dw_partial_kernel");
    rms_dw_final_kernel<<<gp_dnn_blocks(be, cols, GP_DNN_BLOCK), GP_DNN_BLOCK, 0, s>>>(
        cols, (unsigned)parts, (const double *)work, dw);
    GP_CUDA_LAUNCHED("rms_dw_final_kernel");
  }
  if (dx) {
    const int t = gp_dnn_row_threads(cols);
    rms_dx_kernel<<<gp_dnn_blocks(be, rows * t, t), t, 0, s>>>(rows, cols, x, dy, w, rstd, dx);
    GP_CUDA_LAUNCHED("rms_dx_kernel");
  }
  return GP_OK;
}

} // namespace

void gp_dnn_install_rmsnorm(gp_backend *be) {
  be->rmsnorm_forward = rms_forward;
  be->rmsnorm_backward = rms_backward;
}
