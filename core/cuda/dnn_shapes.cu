// Permute, group norm and the element-wise losses of f32 targets on the CUDA backend, with
// the CPU reference's formulas (core/cpu/shapes.c): a thread per output element for permute,
// a block per (sample, group) for the norm's statistics and dx, a block per channel for its
// weight and bias gradients, so every result is deterministic.
#include <math.h>

#include "core/cuda/dnn_internal.h"
#include "core/tensor.h"

namespace {

struct perm_desc {
  int ndim;
  int64_t od[GP_MAX_DIMS + 1];  // output extents
  int64_t src[GP_MAX_DIMS + 1]; // source stride of each output axis
};

__global__ void permute_kernel(int64_t total, perm_desc d, const float *__restrict__ x,
                               float *__restrict__ y) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t o = i, s = 0;
    for (int j = d.ndim - 1; j >= 0; j--) {
      s += (o % d.od[j]) * d.src[j];
      o /= d.od[j];
    }
    y[i] = x[s];
  }
}

gp_status cuda_permute(gp_backend *be, int ndim, const int64_t *dims, const int *perm,
                       const float *x, float *y) {
  GP_TRY(gp_cuda_use(be));
  if (ndim < 1 || ndim > GP_MAX_DIMS + 1)
    return GP_ERR(GP_ERR_RUNTIME, "permute of %d axes (1 to %d)", ndim, GP_MAX_DIMS + 1);
  int64_t is[GP_MAX_DIMS + 1], total = 1;
  for (int j = ndim - 1; j >= 0; j--) {
    is[j] = total;
    total *= dims[j];
  }
  if (total == 0) return GP_OK;
  perm_desc d;
  d.ndim = ndim;
  for (int j = 0; j < ndim; j++) {
    d.od[j] = dims[perm[j]];
    d.src[j] = is[perm[j]];
  }
  permute_kernel<<<gp_dnn_blocks(be, total, GP_DNN_BLOCK), GP_DNN_BLOCK, 0,
                   gp_cuda_of(be)->stream>>>(total, d, x, y);
  GP_CUDA_LAUNCHED("permute_kernel");
  return GP_OK;
}

// Sums in double, as the CPU's.
__global__ void gn_fwd_kernel(int64_t rows, int64_t groups, int64_t cg, int64_t inner, float eps,
                              const float *__restrict__ x, const float *__restrict__ w,
                              const float *__restrict__ b, float *__restrict__ y,
                              float *__restrict__ mean, float *__restrict__ rstd) {
  __shared__ double sh[32];
  const int64_t len = cg * inner;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *xp = x + r * len;
    double s = 0.0;
    for (int64_t k = threadIdx.x; k < len; k += blockDim.x)
      s += xp[k];
    s = gp_dnn_block_reduce(s, 0.0, gp_dnn_add(), sh);
    const float m = (float)(s / (double)len);
    double q = 0.0;
    for (int64_t k = threadIdx.x; k < len; k += blockDim.x) {
      const double dd = (double)__fsub_rn(xp[k], m);
      q += dd * dd;
    }
    q = gp_dnn_block_reduce(q, 0.0, gp_dnn_add(), sh);
    const float rs = (float)(1.0 / sqrt(q / (double)len + (double)eps));
    const int64_t ch0 = (r % groups) * cg;
    float *yp = y + r * len;
    for (int64_t k = threadIdx.x; k < len; k += blockDim.x) {
      const int64_t ch = ch0 + k / inner;
      yp[k] = __fadd_rn(__fmul_rn(__fsub_rn(xp[k], m), __fmul_rn(w[ch], rs)), b[ch]);
    }
    if (threadIdx.x == 0) {
      mean[r] = m;
      rstd[r] = rs;
    }
  }
}

__global__ void gn_dx_kernel(int64_t rows, int64_t groups, int64_t cg, int64_t inner,
                             const float *__restrict__ x, const float *__restrict__ dy,
                             const float *__restrict__ w, const float *__restrict__ mean,
                             const float *__restrict__ rstd, float *__restrict__ dx) {
  __shared__ double sh[32];
  const int64_t len = cg * inner;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *xp = x + r * len, *gp = dy + r * len;
    const float m = mean[r], rs = rstd[r];
    const int64_t ch0 = (r % groups) * cg;
    double sg = 0.0, sgx = 0.0;
    for (int64_t k = threadIdx.x; k < len; k += blockDim.x) {
      const float g = __fmul_rn(gp[k], w[ch0 + k / inner]);
      sg += g;
      sgx += __fmul_rn(g, __fmul_rn(__fsub_rn(xp[k], m), rs));
    }
    sg = gp_dnn_block_reduce(sg, 0.0, gp_dnn_add(), sh);
    sgx = gp_dnn_block_reduce(sgx, 0.0, gp_dnn_add(), sh);
    const float mg = (float)(sg / (double)len), mgx = (float)(sgx / (double)len);
    float *dp = dx + r * len;
    for (int64_t k = threadIdx.x; k < len; k += blockDim.x) {
      const float g = __fmul_rn(gp[k], w[ch0 + k / inner]);
      const float xh = __fmul_rn(__fsub_rn(xp[k], m), rs);
      dp[k] = __fmul_rn(rs, __fsub_rn(__fsub_rn(g, mg), __fmul_rn(xh, mgx)));
    }
  }
}

__global__ void gn_dw_kernel(int64_t n, int64_t c, int64_t groups, int64_t cg, int64_t inner,
                             const float *__restrict__ x, const float *__restrict__ dy,
                             const float *__restrict__ mean, const float *__restrict__ rstd,
                             float *__restrict__ dw, float *__restrict__ db) {
  __shared__ double sh[32];
  for (int64_t ch = blockIdx.x; ch < c; ch += gridDim.x) {
    double sw = 0.0, sb = 0.0;
    for (int64_t i = 0; i < n; i++) {
      const int64_t r = i * groups + ch / cg;
      const float m = mean[r], rs = rstd[r];
      const float *xc = x + (i * c + ch) * inner, *gc = dy + (i * c + ch) * inner;
      for (int64_t k = threadIdx.x; k < inner; k += blockDim.x) {
        sw += __fmul_rn(gc[k], __fmul_rn(__fsub_rn(xc[k], m), rs));
        sb += gc[k];
      }
    }
    sw = gp_dnn_block_reduce(sw, 0.0, gp_dnn_add(), sh);
    sb = gp_dnn_block_reduce(sb, 0.0, gp_dnn_add(), sh);
    if (threadIdx.x == 0) {
      if (dw) dw[ch] += (float)sw;
      if (db) db[ch] += (float)sb;
    }
  }
}

gp_status gn_check(int64_t c, int64_t groups) {
  if (groups <= 0 || c % groups)
    return GP_ERR(GP_ERR_RUNTIME, "group norm of %lld channels in %lld groups", (long long)c,
                  (long long)groups);
  return GP_OK;
}

gp_status cuda_gn_forward(gp_backend *be, int64_t n, int64_t c, int64_t inner, int64_t groups,
                          float eps, const float *x, const float *w, const float *b, float *y,
                          float *mean, float *rstd) {
  GP_TRY(gp_cuda_use(be));
  GP_TRY(gn_check(c, groups));
  const int64_t rows = n * groups, cg = c / groups;
  if (rows <= 0 || inner <= 0) return GP_OK;
  const int t = gp_dnn_row_threads(cg * inner);
  gn_fwd_kernel<<<gp_dnn_blocks(be, rows * t, t), t, 0, gp_cuda_of(be)->stream>>>(
      rows, groups, cg, inner, eps, x, w, b, y, mean, rstd);
  GP_CUDA_LAUNCHED("gn_fwd_kernel");
  return GP_OK;
}

gp_status cuda_gn_backward(gp_backend *be, int64_t n, int64_t c, int64_t inner, int64_t groups,
                           const float *x, const float *dy, const float *w, const float *mean,
                           const float *rstd, float *dx, float *dw, float *db) {
  GP_TRY(gp_cuda_use(be));
  GP_TRY(gn_check(c, groups));
  const int64_t rows = n * groups, cg = c / groups;
  if (rows <= 0 || inner <= 0) return GP_OK;
  cudaStream_t s = gp_cuda_of(be)->stream;
  if (dw || db) {
    const int t = gp_dnn_row_threads(inner);
    gn_dw_kernel<<<gp_dnn_blocks(be, c * t, t), t, 0, s>>>(n, c, groups, cg, inner, x, dy, mean,
                                                           rstd, dw, db);
    GP_CUDA_LAUNCHED("gn_dw_kernel");
  }
  if (dx) {
    const int t = gp_dnn_row_threads(cg * inner);
    gn_dx_kernel<<<gp_dnn_blocks(be, rows * t, t), t, 0, s>>>(rows, groups, cg, inner, x, dy, w,
                                                              mean, rstd, dx);
    GP_CUDA_LAUNCHED("gn_dx_kernel");
  }
  return GP_OK;
}

__global__ void el_fwd_kernel(gp_eltloss kind, int64_t n, const float *__restrict__ p,
                              const float *__restrict__ t, float *__restrict__ out) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float v = p[i], d = __fsub_rn(v, t[i]);
    if (kind == GP_ELTLOSS_MSE)
      out[i] = __fmul_rn(d, d);
    else if (kind == GP_ELTLOSS_L1)
      out[i] = fabsf(d);
    else
      out[i] = __fadd_rn(__fsub_rn(fmaxf(v, 0.0f), __fmul_rn(v, t[i])), log1pf(expf(-fabsf(v))));
  }
}

__global__ void el_bwd_kernel(gp_eltloss kind, int64_t n, float scale, const float *__restrict__ p,
                              const float *__restrict__ t, float *__restrict__ out) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float v = p[i], d = __fsub_rn(v, t[i]);
    if (kind == GP_ELTLOSS_MSE)
      out[i] = __fmul_rn(scale, __fmul_rn(2.0f, d));
    else if (kind == GP_ELTLOSS_L1)
      out[i] = d > 0.0f ? scale : d < 0.0f ? -scale : 0.0f;
    else
      out[i] = __fmul_rn(scale, __fsub_rn(1.0f / (1.0f + expf(-v)), t[i]));
  }
}

gp_status cuda_el_forward(gp_backend *be, gp_eltloss kind, int64_t n, const float *p,
                          const float *t, float *loss) {
  GP_TRY(gp_cuda_use(be));
  if (n <= 0) return GP_OK;
  el_fwd_kernel<<<gp_dnn_blocks(be, n, GP_DNN_BLOCK), GP_DNN_BLOCK, 0, gp_cuda_of(be)->stream>>>(
      kind, n, p, t, loss);
  GP_CUDA_LAUNCHED("el_fwd_kernel");
  return GP_OK;
}

gp_status cuda_el_backward(gp_backend *be, gp_eltloss kind, int64_t n, float scale, const float *p,
                           const float *t, float *dp) {
  GP_TRY(gp_cuda_use(be));
  if (n <= 0) return GP_OK;
  el_bwd_kernel<<<gp_dnn_blocks(be, n, GP_DNN_BLOCK), GP_DNN_BLOCK, 0, gp_cuda_of(be)->stream>>>(
      kind, n, scale, p, t, dp);
  GP_CUDA_LAUNCHED("el_bwd_kernel");
  return GP_OK;
}

} // namespace

void gp_dnn_install_shapes(gp_backend *be) {
  be->permute = cuda_permute;
  be->groupnorm_forward = cuda_gn_forward;
  be->groupnorm_backward = cuda_gn_backward;
  be->eltloss_forward = cuda_el_forward;
  be->eltloss_backward = cuda_el_backward;
}
