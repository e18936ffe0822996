// 2-D resizing (nearest and bilinear upsampling) on the CUDA backend with the CPU's indices
// and weights (core/resize2d.h). The backward gathers: each input pixel sums the outputs that
// read it, found by binary search (source indices grow with the output index), so no atomics
// and the sum is deterministic.
#include "core/cuda/dnn_internal.h"
#include "core/resize2d.h"

namespace {

struct axis_t {
  int64_t in, out;
  float scale;
};

__device__ __forceinline__ int64_t src0(const axis_t &a, int bilinear, int ac, int64_t o,
                                        float *l) {
  if (!bilinear) {
    *l = 0.0f;
    return gp_resize_nearest(o, a.in, a.out, a.scale);
  }
  return gp_resize_linear(o, a.in, a.scale, ac, l);
}

__global__ void resize_fwd_kernel(gp_resize2d_desc d, axis_t ah, axis_t aw,
                                  const float *__restrict__ x, float *__restrict__ y) {
  const int64_t total = d.n * d.oh * d.ow;
  for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total;
       t += (int64_t)gridDim.x * blockDim.x) {
    const int64_t ox = t % d.ow, oy = t / d.ow % d.oh, p = t / (d.ow * d.oh);
    float lh, lw;
    const int64_t h0 = src0(ah, d.bilinear, d.align_corners, oy, &lh);
    const int64_t w0 = src0(aw, d.bilinear, d.align_corners, ox, &lw);
    const float *xp = x + p * d.h * d.w;
    if (!d.bilinear) {
      y[t] = xp[h0 * d.w + w0];
      continue;
    }
    const int64_t h1 = h0 + (h0 < d.h - 1), w1 = w0 + (w0 < d.w - 1);
    const float a0 = __fsub_rn(1.0f, lh), b0 = __fsub_rn(1.0f, lw);
    const float r0 = __fadd_rn(__fmul_rn(b0, xp[h0 * d.w + w0]), __fmul_rn(lw, xp[h0 * d.w + w1]));
    const float r1 = __fadd_rn(__fmul_rn(b0, xp[h1 * d.w + w0]), __fmul_rn(lw, xp[h1 * d.w + w1]));
    y[t] = __fadd_rn(__fmul_rn(a0, r0), __fmul_rn(lh, r1));
  }
}

// The first output index whose first source index is >= i.
__device__ int64_t first_at(const axis_t &a, int bilinear, int ac, int64_t i) {
  int64_t lo = 0, hi = a.out;
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    float l;
    if (src0(a, bilinear, ac, mid, &l) < i)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

// The weight with which output o of axis a reads input i.
__device__ __forceinline__ float weight(const axis_t &a, int bilinear, int ac, int64_t o,
                                        int64_t i) {
  float l;
  const int64_t i0 = src0(a, bilinear, ac, o, &l);
  if (!bilinear) return i0 == i ? 1.0f : 0.0f;
  const int64_t i1 = i0 + (i0 < a.in - 1);
  float w = 0.0f;
  if (i0 == i) w = __fsub_rn(1.0f, l);
  if (i1 == i) w = __fadd_rn(w, l);
  return w;
}

__global__ void resize_bwd_kernel(gp_resize2d_desc d, axis_t ah, axis_t aw,
                                  const float *__restrict__ dy, float *__restrict__ dx) {
  const int64_t total = d.n * d.h * d.w;
  const int back = d.bilinear ? 1 : 0; // a bilinear output reads i from i0 = i - 1 too
  for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total;
       t += (int64_t)gridDim.x * blockDim.x) {
    const int64_t ix = t % d.w, iy = t / d.w % d.h, p = t / (d.w * d.h);
    const int64_t y0 = first_at(ah, d.bilinear, d.align_corners, iy - back);
    const int64_t y1 = first_at(ah, d.bilinear, d.align_corners, iy + 1);
    const int64_t x0 = first_at(aw, d.bilinear, d.align_corners, ix - back);
    const int64_t x1 = first_at(aw, d.bilinear, d.align_corners, ix + 1);
    const float *g = dy + p * d.oh * d.ow;
    float s = 0.0f;
    for (int64_t oy = y0; oy < y1; oy++) {
      const float wy = weight(ah, d.bilinear, d.align_corners, oy, iy);
      for (int64_t ox = x0; ox < x1; ox++)
        s = __fadd_rn(s, __fmul_rn(__fmul_rn(wy, weight(aw, d.bilinear, d.align_corners, ox, ix)),
                                   g[oy * d.ow + ox]));
    }
    dx[t] = s;
  }
}

void axes(const gp_resize2d_desc *d, axis_t *ah, axis_t *aw) {
  *ah = {d->h, d->oh, gp_resize_scale(d->h, d->oh, d->scale_h, d->bilinear, d->align_corners)};
  *aw = {d->w, d->ow, gp_resize_scale(d->w, d->ow, d->scale_w, d->bilinear, d->align_corners)};
}

gp_status resize_forward(gp_backend *be, const gp_resize2d_desc *d, const float *x, float *y) {
  GP_TRY(gp_resize2d_desc_check(d));
  const int64_t total = d->n * d->oh * d->ow;
  if (total == 0) return GP_OK;
  axis_t ah, aw;
  axes(d, &ah, &aw);
  resize_fwd_kernel<<<gp_dnn_blocks(be, total, GP_DNN_BLOCK), GP_DNN_BLOCK, 0,
                      gp_cuda_of(be)->stream>>>(*d, ah, aw, x, y);
  GP_CUDA_LAUNCHED("resize_fwd_kernel");
  return GP_OK;
}

gp_status resize_backward(gp_backend *be, const gp_resize2d_desc *d, const float *dy, float *dx) {
  GP_TRY(gp_resize2d_desc_check(d));
  const int64_t total = d->n * d->h * d->w;
  if (total == 0) return GP_OK;
  axis_t ah, aw;
  axes(d, &ah, &aw);
  resize_bwd_kernel<<<gp_dnn_blocks(be, total, GP_DNN_BLOCK), GP_DNN_BLOCK, 0,
                      gp_cuda_of(be)->stream>>>(*d, ah, aw, dy, dx);
  GP_CUDA_LAUNCHED("resize_bwd_kernel");
  return GP_OK;
}

} // namespace

void gp_dnn_install_resize(gp_backend *be) {
  be->resize2d_forward = resize_forward;
  be->resize2d_backward = resize_backward;
}
