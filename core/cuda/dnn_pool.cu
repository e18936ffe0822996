// 2-D max and average pooling on the CUDA backend, with own kernels rather than cuDNN's so
// that results match the CPU reference (core/cpu/pool.c) bit for bit: the same window
// clipping, the same first-maximum and NaN rules for the argmax, and the same summation
// order. Backward is a gather (each input cell sums the windows that hold it, in the CPU's
// order of outputs), so it needs no atomics and is deterministic.
#include <math.h>

#include "core/cuda/dnn_internal.h"

// The CPU's unrolled 2x2 stride-2 path (used there whenever the window is 2x2/2 unpadded),
// reproduced as is: the same answer as the general loop, NaNs included. Only where the windows
// lie inside the plane: beyond that the CPU path reads out of bounds.
static int is_2x2(const gp_pool2d_desc *d) {
  return d->kh == 2 && d->kw == 2 && d->sh == 2 && d->sw == 2 && d->ph == 0 && d->pw == 0 &&
         2 * d->oh <= d->h && 2 * d->ow <= d->w;
}

// Pass-by-value geometry for the kernels.
struct pool_geo {
  int64_t planes, h, w, oh, ow, kh, kw, sh, sw, ph, pw;
  int count_pad;
};

static pool_geo geo_of(const gp_pool2d_desc *d) {
  pool_geo g = {d->n * d->c, d->h,  d->w,  d->oh, d->ow, d->kh,
                d->kw,       d->sh, d->sw, d->ph, d->pw, d->count_pad};
  return g;
}

// Clipped window [*y0, *y1) x [*x0, *x1) of output (oy, ox).
static __device__ __forceinline__ void window(const pool_geo &g, int64_t oy, int64_t ox,
                                              int64_t *y0, int64_t *y1, int64_t *x0, int64_t *x1) {
  int64_t a = oy * g.sh - g.ph, b = ox * g.sw - g.pw;
  *y0 = a < 0 ? 0 : a;
  *y1 = a + g.kh > g.h ? g.h : a + g.kh;
  *x0 = b < 0 ? 0 : b;
  *x1 = b + g.kw > g.w ? g.w : b + g.kw;
}

// Whether v, coming after u in the window, takes its place as the general loop would: v is
// larger, or v is a NaN and u is not (the first NaN wins). The CPU's max_takes.
static __device__ __forceinline__ int max_takes(float v, float u) {
  return !(v <= u) && u == u;
}

__global__ void max_fwd_kernel(pool_geo g, int fast, const float *__restrict__ x,
                               float *__restrict__ y, int32_t *__restrict__ am) {
  const int64_t ohw = g.oh * g.ow, total = g.planes * ohw;
  for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < total;
       o += (int64_t)gridDim.x * blockDim.x) {
    const int64_t p = o / ohw, r = o - p * ohw, oy = r / g.ow, ox = r - oy * g.ow;
    const float *xp = x + p * g.h * g.w;
    if (fast) {
      const int64_t i = 2 * ox;
      const float *r0 = xp + 2 * oy * g.w, *r1 = r0 + g.w;
      float a = r0[i], b = r0[i + 1], c = r1[i], e = r1[i + 1];
      int32_t ia = (int32_t)(2 * oy * g.w + i);
      int32_t ib = ia + 1, ic = ia + (int32_t)g.w, ie = ic + 1;
      const int t1 = max_takes(b, a), t2 = max_takes(e, c);
      float m1 = t1 ? b : a, m2 = t2 ? e : c;
      int32_t j1 = t1 ? ib : ia, j2 = t2 ? ie : ic;
      const int t = max_takes(m2, m1);
      y[o] = t ? m2 : m1;
      am[o] = t ? j2 : j1;
      continue;
    }
    int64_t y0, y1, x0, x1;
    window(g, oy, ox, &y0, &y1, &x0, &x1);
    float best = -INFINITY;
    int64_t at = -1;
    for (int64_t iy = y0; iy < y1; iy++)
      for (int64_t ix = x0; ix < x1; ix++) {
        float v = xp[iy * g.w + ix];
        if (v > best || at < 0 || isnan(v)) { // first maximum wins; a NaN wins and stops
          best = v;
          at = iy * g.w + ix;
          if (isnan(v)) goto done;
        }
      }
  done:
    y[o] = at < 0 ? 0.0f : best;
    am[o] = (int32_t)at;
  }
}

// The CPU's sum of a whole plane (gp_cpu_rowsum): lane u of 8 adds elements u, u + 8, ...;
// the lanes as ((0 + 1) + (2 + 3)) + ((4 + 5) + (6 + 7)); then the rest in order.
static __device__ float plane_sum(const float *p, int64_t n) {
  float a[8] = {0};
  int64_t k = 0;
  for (; k + 8 <= n; k += 8)
    for (int u = 0; u < 8; u++)
      a[u] = __fadd_rn(a[u], p[k + u]);
  float s = __fadd_rn(__fadd_rn(__fadd_rn(a[0], a[1]), __fadd_rn(a[2], a[3])),
                      __fadd_rn(__fadd_rn(a[4], a[5]), __fadd_rn(a[6], a[7])));
  for (; k < n; k++)
    s = __fadd_rn(s, p[k]);
  return s;
}

__global__ void avg_fwd_kernel(pool_geo g, const float *__restrict__ x, float *__restrict__ y) {
  const int64_t ohw = g.oh * g.ow, total = g.planes * ohw;
  // one window over the whole plane (global average pooling): summed as the CPU sums it
  const bool whole = g.oh == 1 && g.ow == 1 && g.kh == g.h && g.kw == g.w && g.ph == 0 && g.pw == 0;
  const float full = 1.0f / (float)(g.kh * g.kw);
  for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < total;
       o += (int64_t)gridDim.x * blockDim.x) {
    const int64_t p = o / ohw, r = o - p * ohw, oy = r / g.ow, ox = r - oy * g.ow;
    const float *xp = x + p * g.h * g.w;
    int64_t y0, y1, x0, x1;
    window(g, oy, ox, &y0, &y1, &x0, &x1);
    float s = 0.0f;
    if (whole) {
      s = plane_sum(xp, g.h * g.w);
    } else {
      for (int64_t iy = y0; iy < y1; iy++)
        for (int64_t ix = x0; ix < x1; ix++)
          s = __fadd_rn(s, xp[iy * g.w + ix]);
    }
    int64_t cnt = (y1 - y0) * (x1 - x0);
    y[o] = g.count_pad ? __fmul_rn(s, full) : (cnt > 0 ? s / (float)cnt : 0.0f);
  }
}

// Outputs whose window holds input row iy: [*lo, *hi) (same along columns).
static __device__ __forceinline__ void covering(int64_t i, int64_t k, int64_t s, int64_t pad,
                                                int64_t out, int64_t *lo, int64_t *hi) {
  int64_t a = i + pad - k + 1; // oy * s >= a
  *lo = a <= 0 ? 0 : (a + s - 1) / s;
  int64_t b = (i + pad) / s + 1; // oy * s <= i + pad
  *hi = b < out ? b : out;
}

// dx = the dy of the outputs whose argmax is this cell, summed in output order (the CPU's
// scatter order), so sums of overlapping windows round the same way.
__global__ void max_bwd_kernel(pool_geo g, const float *__restrict__ dy,
                               const int32_t *__restrict__ am, float *__restrict__ dx) {
  const int64_t hw = g.h * g.w, total = g.planes * hw, ohw = g.oh * g.ow;
  for (int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; q < total;
       q += (int64_t)gridDim.x * blockDim.x) {
    const int64_t p = q / hw, r = q - p * hw, iy = r / g.w, ix = r - iy * g.w;
    int64_t oy0, oy1, ox0, ox1;
    covering(iy, g.kh, g.sh, g.ph, g.oh, &oy0, &oy1);
    covering(ix, g.kw, g.sw, g.pw, g.ow, &ox0, &ox1);
    const int32_t *ap = am + p * ohw;
    const float *dp = dy + p * ohw;
    float acc = 0.0f;
    for (int64_t oy = oy0; oy < oy1; oy++)
      for (int64_t ox = ox0; ox < ox1; ox++)
        if (ap[oy * g.ow + ox] == (int32_t)r) acc = __fadd_rn(acc, dp[oy * g.ow + ox]);
    dx[q] = acc;
  }
}

__global__ void avg_bwd_kernel(pool_geo g, const float *__restrict__ dy, float *__restrict__ dx) {
  const int64_t hw = g.h * g.w, total = g.planes * hw, ohw = g.oh * g.ow;
  const float full = 1.0f / (float)(g.kh * g.kw);
  for (int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; q < total;
       q += (int64_t)gridDim.x * blockDim.x) {
    const int64_t p = q / hw, r = q - p * hw, iy = r / g.w, ix = r - iy * g.w;
    int64_t oy0, oy1, ox0, ox1;
    covering(iy, g.kh, g.sh, g.ph, g.oh, &oy0, &oy1);
    covering(ix, g.kw, g.sw, g.pw, g.ow, &ox0, &ox1);
    const float *dp = dy + p * ohw;
    float acc = 0.0f;
    for (int64_t oy = oy0; oy < oy1; oy++)
      for (int64_t ox = ox0; ox < ox1; ox++) {
        int64_t y0, y1, x0, x1;
        window(g, oy, ox, &y0, &y1, &x0, &x1);
        int64_t cnt = (y1 - y0) * (x1 - x0);
        if (cnt <= 0) continue;
        float f = g.count_pad ? full : 1.0f / (float)cnt;
        acc = __fadd_rn(acc, __fmul_rn(dp[oy * g.ow + ox], f));
      }
    dx[q] = acc;
  }
}

static gp_status pool_forward(gp_backend *be, gp_pool kind, const gp_pool2d_desc *d, const float *x,
                              float *y, int32_t *argmax) {
  GP_TRY(gp_cuda_use(be));
  GP_TRY(gp_pool2d_desc_check(d));
  if (kind == GP_POOL_MAX && !argmax)
    return GP_ERR(GP_ERR_RUNTIME, "max pooling needs an argmax buffer");
  if (kind != GP_POOL_MAX && kind != GP_POOL_AVG)
    return GP_ERR(GP_ERR_RUNTIME, "unknown pooling kind %d", (int)kind);
  const pool_geo g = geo_of(d);
  const int64_t total = g.planes * g.oh * g.ow;
  if (total == 0) return GP_OK;
  cudaStream_t s = gp_cuda_of(be)->stream;
  unsigned blocks = gp_dnn_blocks(be, total, GP_DNN_BLOCK);
  if (kind == GP_POOL_MAX) {
    max_fwd_kernel<<<blocks, GP_DNN_BLOCK, 0, s>>>(g, is_2x2(d), x, y, argmax);
    GP_CUDA_LAUNCHED("max_fwd_kernel");
  } else {
    avg_fwd_kernel<<<blocks, GP_DNN_BLOCK, 0, s>>>(g, x, y);
    GP_CUDA_LAUNCHED("avg_fwd_kernel");
  }
  return GP_OK;
}

static gp_status pool_backward(gp_backend *be, gp_pool kind, const gp_pool2d_desc *d,
                               const float *dy, const int32_t *argmax, float *dx) {
  GP_TRY(gp_cuda_use(be));
  GP_TRY(gp_pool2d_desc_check(d));
  if (kind == GP_POOL_MAX && !argmax)
    return GP_ERR(GP_ERR_RUNTIME, "max pooling needs an argmax buffer");
  if (kind != GP_POOL_MAX && kind != GP_POOL_AVG)
    return GP_ERR(GP_ERR_RUNTIME, "unknown pooling kind %d", (int)kind);
  const pool_geo g = geo_of(d);
  const int64_t total = g.planes * g.h * g.w;
  if (total == 0) return GP_OK;
  cudaStream_t s = gp_cuda_of(be)->stream;
  unsigned blocks = gp_dnn_blocks(be, total, GP_DNN_BLOCK);
  if (kind == GP_POOL_MAX) {
    max_bwd_kernel<<<blocks, GP_DNN_BLOCK, 0, s>>>(g, dy, argmax, dx);
    GP_CUDA_LAUNCHED("max_bwd_kernel");
  } else {
    avg_bwd_kernel<<<blocks, GP_DNN_BLOCK, 0, s>>>(g, dy, dx);
    GP_CUDA_LAUNCHED("avg_bwd_kernel");
  }
  return GP_OK;
}

void gp_dnn_install_pool(gp_backend *be) {
  be->pool2d_forward = pool_forward;
  be->pool2d_backward = pool_backward;
}
