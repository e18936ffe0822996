// CUDA element-wise ops: activations, dropout, axpby, products, strided copies and the
// optimizer updates.
// Each kernel is a grid-stride loop with 64-bit indices; formulas follow core/cpu (eltwise.c,
// optim.c) operation for operation. Where the CPU does plain float arithmetic, the kernels
// use the _rn intrinsics so nvcc does not contract a*b+c into an FMA: the results then match
// the CPU bit for bit (the CPU build does not contract either: ISO C mode, x86-64 baseline).
#include <math.h>

#include "core/cuda/ops.h"

#define SQRT1_2 0.70710678118654752440f
#define INV_SQRT_2PI 0.39894228040143267794f
#define GELU_TANH_C 0.79788456080286535588f /* sqrt(2 / pi) */
#define GELU_TANH_A 0.044715f

#define GRID_LOOP(i, n)                                                                            \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                        \
       i += (int64_t)blockDim.x * gridDim.x)

namespace {

__device__ __forceinline__ float mul(float a, float b) {
  return __fmul_rn(a, b);
}
__device__ __forceinline__ float add(float a, float b) {
  return __fadd_rn(a, b);
}
__device__ __forceinline__ float sub(float a, float b) {
  return __fsub_rn(a, b);
}

/* ---- activations ---- */

// 0.5 (1 + tanh(u)) of the tanh GELU as a logistic: no cancellation where v < 0
__device__ __forceinline__ float gelu_tanh_s(float v) {
  const float u = GELU_TANH_C * (v + GELU_TANH_A * v * v * v);
  return 1.0f / (1.0f + expf(-2.0f * u));
}

template <int ACT> __device__ __forceinline__ float act_f(float v) {
  switch (ACT) {
  case GP_ACTIVATION_RELU: // as the CPU and PyTorch: a NaN stays a NaN, -0 stays -0
    return v < 0.0f ? 0.0f : v;
  case GP_ACTIVATION_GELU:
    return 0.5f * v * (1.0f + erff(v * SQRT1_2));
  case GP_ACTIVATION_GELU_TANH: // v s, s = 0.5 (1 + tanh(u)) = 1 / (1 + e^-2u): the CPU's form
    return v * gelu_tanh_s(v);
  case GP_ACTIVATION_TANH:
    return tanhf(v);
  case GP_ACTIVATION_SILU: // x / (1 + e^-x): the CPU's and PyTorch's form
    return v / (1.0f + expf(-v));
  default: // GP_ACTIVATION_SIGMOID: two forms so exp never overflows into inf/inf
    if (v >= 0.0f) return 1.0f / (1.0f + expf(-v));
    float z = expf(v);
    return z / (1.0f + z);
  }
}

template <int ACT> __global__ void act_forward_k(int64_t n, const float *x, float *y) {
  GRID_LOOP(i, n) y[i] = act_f<ACT>(x[i]);
}

// relu, both gelus and silu read x; tanh and sigmoid read y (x may be NULL for them).
template <int ACT>
__global__ void act_backward_k(int64_t n, const float *x, const float *y, const float *dy,
                               float *dx) {
  GRID_LOOP(i, n) {
    float g = dy[i], d;
    if (ACT == GP_ACTIVATION_RELU) {
      d = x[i] <= 0.0f ? 0.0f : g; // a NaN passes the gradient, as on the CPU
    } else if (ACT == GP_ACTIVATION_GELU) {
      float v = x[i];
      float cdf = 0.5f * (1.0f + erff(v * SQRT1_2));
      float pdf = INV_SQRT_2PI * expf(-0.5f * v * v);
      d = g * (cdf + v * pdf);
    } else if (ACT == GP_ACTIVATION_GELU_TANH) {
      float v = x[i];
      // s + v s', s' = 2 s (1 - s) du/dv, 1 - s = 1 / (1 + e^2u): the CPU's form
      float u = GELU_TANH_C * (v + GELU_TANH_A * v * v * v);
      float s = 1.0f / (1.0f + expf(-2.0f * u)), r = 1.0f / (1.0f + expf(2.0f * u));
      float du = GELU_TANH_C * (1.0f + 3.0f * GELU_TANH_A * v * v);
      d = g * (s + 2.0f * v * du * (s * r));
    } else if (ACT == GP_ACTIVATION_SILU) {
      // dy s (1 + x (1 - s)): the CPU's form, rounded as it rounds
      float v = x[i], s = 1.0f / (1.0f + expf(-v));
      d = mul(mul(g, s), add(1.0f, mul(v, sub(1.0f, s))));
    } else if (ACT == GP_ACTIVATION_TANH) {
      d = mul(g, sub(1.0f, mul(y[i], y[i])));
    } else {
      d = mul(mul(g, y[i]), sub(1.0f, y[i]));
    }
    dx[i] = d;
  }
}

/* ---- dropout: core/rng.h's gp_counter_uniform, so masks equal the CPU's ---- */

__device__ __forceinline__ uint64_t hash64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

__device__ __forceinline__ float counter_uniform(uint64_t key, uint64_t counter) {
  return (float)(hash64(key ^ hash64(counter)) >> 40) * (1.0f / 16777216.0f);
}

__global__ void dropout_k(int64_t n, float p, float scale, uint64_t key, uint64_t offset,
                          const float *x, float *y) {
  /* x * (mask * scale) as PyTorch: a dropped NaN or infinity gives NaN, not 0 */
  GRID_LOOP(i, n) y[i] = mul(x[i], counter_uniform(key, offset + (uint64_t)i) >= p ? scale : 0.0f);
}

/* ---- axpby, copies ---- */

// mode 0: y = a x (y not read); 1: y += a x; 2: y = a x + b y. x may be y.
__global__ void axpby_k(int64_t n, int mode, float a, const float *x, float b, float *y) {
  GRID_LOOP(i, n) {
    float ax = mul(a, x[i]);
    y[i] = mode == 0 ? ax : mode == 1 ? add(y[i], ax) : add(ax, mul(b, y[i]));
  }
}

__global__ void mul_k(int64_t n, const float *a, const float *b, float *y) {
  GRID_LOOP(i, n) y[i] = mul(a[i], b[i]);
}

__global__ void copy2d_k(int64_t rows, int64_t cols, const float *src, int64_t src_ld, float *dst,
                         int64_t dst_ld) {
  GRID_LOOP(i, rows * cols) {
    int64_t r = i / cols, j = i - r * cols;
    dst[r * dst_ld + j] = src[r * src_ld + j];
  }
}

__global__ void scale2d_k(int64_t m, int64_t n, float beta, float *c, int64_t ldc) {
  GRID_LOOP(i, m * n) {
    int64_t r = i / n, j = i - r * n;
    float *p = c + r * ldc + j;
    *p = beta == 0.0f ? 0.0f : mul(beta, *p);
  }
}

/* ---- optimizers (core/cpu/optim.c) ---- */

__global__ void sgd_k(int64_t n, float lr, float mu, float wd, int nesterov, float *w,
                      const float *g, float *buf) {
  GRID_LOOP(i, n) {
    float d = add(g[i], mul(wd, w[i]));
    if (mu != 0.0f) {
      float b = add(mul(mu, buf[i]), d);
      buf[i] = b;
      d = nesterov ? add(d, mul(mu, b)) : b;
    }
    w[i] = sub(w[i], mul(lr, d));
  }
}

__global__ void adamw_k(int64_t n, float b1, float b2, float eps, float step, float sc2,
                        float decay, float *w, const float *g, float *m, float *v) {
  GRID_LOOP(i, n) {
    float gi = g[i];
    float mi = add(mul(b1, m[i]), mul(sub(1.0f, b1), gi));
    float vi = add(mul(b2, v[i]), mul(mul(sub(1.0f, b2), gi), gi));
    m[i] = mi;
    v[i] = vi;
    float den = add(__fdiv_rn(__fsqrt_rn(vi), sc2), eps);
    w[i] = sub(mul(w[i], decay), __fdiv_rn(mul(step, mi), den));
  }
}

__global__ void rmsprop_k(int64_t n, float lr, float alpha, float eps, float mu, float wd, float *w,
                          const float *g, float *sq, float *buf) {
  GRID_LOOP(i, n) {
    float d = add(g[i], mul(wd, w[i]));
    float s = add(mul(alpha, sq[i]), mul(mul(sub(1.0f, alpha), d), d));
    sq[i] = s;
    float u = __fdiv_rn(d, add(__fsqrt_rn(s), eps));
    if (mu != 0.0f) {
      u = add(mul(mu, buf[i]), u);
      buf[i] = u;
    }
    w[i] = sub(w[i], mul(lr, u));
  }
}

cudaStream_t stream_of(gp_backend *be) {
  return gp_cuda_of(be)->stream;
}

} // namespace

gp_status gp_cuda_act_forward(gp_backend *be, gp_activation act, int64_t n, const float *x,
                              float *y) {
  if ((int)act < 0 || (int)act >= (int)GP_ACTIVATION_COUNT)
    return GP_ERR(GP_ERR_RUNTIME, "unknown activation %d", (int)act);
  if (n <= 0) return GP_OK;
  GP_TRY(gp_cuda_use(be));
  const unsigned nb = gp_cuda_blocks(be, n);
  cudaStream_t st = stream_of(be);
  switch (act) {
  case GP_ACTIVATION_RELU:
    act_forward_k<GP_ACTIVATION_RELU><<<nb, GP_CUDA_BLOCK, 0, st>>>(n, x, y);
    break;
  case GP_ACTIVATION_GELU:
    act_forward_k<GP_ACTIVATION_GELU><<<nb, GP_CUDA_BLOCK, 0, st>>>(n, x, y);
    break;
  case GP_ACTIVATION_GELU_TANH:
    act_forward_k<GP_ACTIVATION_GELU_TANH><<<nb, GP_CUDA_BLOCK, 0, st>>>(n, x, y);
    break;
  case GP_ACTIVATION_TANH:
    act_forward_k<GP_ACTIVATION_TANH><<<nb, GP_CUDA_BLOCK, 0, st>>>(n, x, y);
    break;
  case GP_ACTIVATION_SILU:
    act_forward_k<GP_ACTIVATION_SILU><<<nb, GP_CUDA_BLOCK, 0, st>>>(n, x, y);
    break;
  default:
    act_forward_k<GP_ACTIVATION_SIGMOID><<<nb, GP_CUDA_BLOCK, 0, st>>>(n, x, y);
    break;
  }
  GP_CUDA_LAUNCHED("act_forward kernel");
  return GP_OK;
}

gp_status gp_cuda_act_backward(gp_backend *be, gp_activation act, int64_t n, const float *x,
                               const float *y, const float *dy, float *dx) {
  if ((int)act < 0 || (int)act >= (int)GP_ACTIVATION_COUNT)
    return GP_ERR(GP_ERR_RUNTIME, "unknown activation %d", (int)act);
  if (n <= 0) return GP_OK;
  GP_TRY(gp_cuda_use(be));
  const unsigned nb = gp_cuda_blocks(be, n);
  cudaStream_t st = stream_of(be);
  switch (act) {
  case GP_ACTIVATION_RELU:
    act_backward_k<GP_ACTIVATION_RELU><<<nb, GP_CUDA_BLOCK, 0, st>>>(n, x, y, dy, dx);
    break;
  case GP_ACTIVATION_GELU:
    act_backward_k<GP_ACTIVATION_GELU><<<nb, GP_CUDA_BLOCK, 0, st>>>(n, x, y, dy, dx);
    break;
  case GP_ACTIVATION_GELU_TANH:
    act_backward_k<GP_ACTIVATION_GELU_TANH><<<nb, GP_CUDA_BLOCK, 0, st>>>(n, x, y, dy, dx);
    break;
  case GP_ACTIVATION_TANH:
    act_backward_k<GP_ACTIVATION_TANH><<<nb, GP_CUDA_BLOCK, 0, st>>>(n, x, y, dy, dx);
    break;
  case GP_ACTIVATION_SILU:
    act_backward_k<GP_ACTIVATION_SILU><<<nb, GP_CUDA_BLOCK, 0, st>>>(n, x, y, dy, dx);
    break;
  default:
    act_backward_k<GP_ACTIVATION_SIGMOID><<<nb, GP_CUDA_BLOCK, 0, st>>>(n, x, y, dy, dx);
    break;
  }
  GP_CUDA_LAUNCHED("act_backward kernel");
  return GP_OK;
}

static gp_status check_p(float p) {
  if (!(p >= 0.0f && p < 1.0f))
    return GP_ERR(GP_ERR_RUNTIME, "dropout probability %g is outside [0, 1)", (double)p);
  return GP_OK;
}

// Forward and backward apply the same mask and scale: one kernel.
static gp_status dropout(gp_backend *be, int64_t n, float p, uint64_t key, uint64_t offset,
                         const float *x, float *y) {
  GP_TRY(check_p(p));
  if (n <= 0) return GP_OK;
  GP_TRY(gp_cuda_use(be));
  // a replayed graph would replay the recorded key, and the key changes with each step
  GP_TRY(gp_cuda_unsafe(be, "dropout's mask key changes with each step"));
  const float scale = 1.0f / (1.0f - p);
  dropout_k<<<gp_cuda_blocks(be, n), GP_CUDA_BLOCK, 0, stream_of(be)>>>(n, p, scale, key, offset, x,
                                                                        y);
  GP_CUDA_LAUNCHED("dropout kernel");
  return GP_OK;
}

gp_status gp_cuda_dropout_forward(gp_backend *be, int64_t n, float p, uint64_t key, uint64_t offset,
                                  const float *x, float *y) {
  return dropout(be, n, p, key, offset, x, y);
}

gp_status gp_cuda_dropout_backward(gp_backend *be, int64_t n, float p, uint64_t key,
                                   uint64_t offset, const float *dy, float *dx) {
  return dropout(be, n, p, key, offset, dy, dx);
}

gp_status gp_cuda_axpby(gp_backend *be, int64_t n, float a, const float *x, float b, float *y) {
  if (n <= 0) return GP_OK;
  GP_TRY(gp_cuda_use(be));
  const int mode = b == 0.0f ? 0 : b == 1.0f ? 1 : 2;
  axpby_k<<<gp_cuda_blocks(be, n), GP_CUDA_BLOCK, 0, stream_of(be)>>>(n, mode, a, x, b, y);
  GP_CUDA_LAUNCHED("axpby kernel");
  return GP_OK;
}

gp_status gp_cuda_mul(gp_backend *be, int64_t n, const float *a, const float *b, float *y) {
  if (n <= 0) return GP_OK;
  GP_TRY(gp_cuda_use(be));
  mul_k<<<gp_cuda_blocks(be, n), GP_CUDA_BLOCK, 0, stream_of(be)>>>(n, a, b, y);
  GP_CUDA_LAUNCHED("mul kernel");
  return GP_OK;
}

gp_status gp_cuda_copy2d(gp_backend *be, int64_t rows, int64_t cols, const float *src,
                         int64_t src_ld, float *dst, int64_t dst_ld) {
  if (rows <= 0 || cols <= 0) return GP_OK;
  // Rows written in parallel must not overlap (the CPU copies them one after another).
  if (src_ld < 0 || dst_ld < cols || rows > INT64_MAX / cols)
    return GP_ERR(GP_ERR_RUNTIME, "copy2d: %lld x %lld with src_ld %lld, dst_ld %lld",
                  (long long)rows, (long long)cols, (long long)src_ld, (long long)dst_ld);
  if (src_ld == cols && dst_ld == cols)
    return be->copy(be, dst, src, (size_t)(rows * cols) * sizeof(float));
  GP_TRY(gp_cuda_use(be));
  copy2d_k<<<gp_cuda_blocks(be, rows * cols), GP_CUDA_BLOCK, 0, stream_of(be)>>>(
      rows, cols, src, src_ld, dst, dst_ld);
  GP_CUDA_LAUNCHED("copy2d kernel");
  return GP_OK;
}

gp_status gp_cuda_scale2d(gp_backend *be, int64_t m, int64_t n, float beta, float *c, int64_t ldc) {
  if (m <= 0 || n <= 0) return GP_OK;
  if (ldc < n || m > INT64_MAX / n)
    return GP_ERR(GP_ERR_RUNTIME, "gemm: ldc %lld < n %lld", (long long)ldc, (long long)n);
  GP_TRY(gp_cuda_use(be));
  scale2d_k<<<gp_cuda_blocks(be, m * n), GP_CUDA_BLOCK, 0, stream_of(be)>>>(m, n, beta, c, ldc);
  GP_CUDA_LAUNCHED("gemm k=0 scale kernel");
  return GP_OK;
}

gp_status gp_cuda_sgd_update(gp_backend *be, int64_t n, const gp_sgd_hp *hp, float *w,
                             const float *g, float *buf) {
  if (n <= 0) return GP_OK;
  GP_TRY(gp_cuda_use(be));
  sgd_k<<<gp_cuda_blocks(be, n), GP_CUDA_BLOCK, 0, stream_of(be)>>>(
      n, hp->lr, hp->momentum, hp->weight_decay, hp->nesterov, w, g, buf);
  GP_CUDA_LAUNCHED("sgd_update kernel");
  return GP_OK;
}

gp_status gp_cuda_adamw_update(gp_backend *be, int64_t n, const gp_adamw_hp *hp, float *w,
                               const float *g, float *m, float *v) {
  if (n <= 0) return GP_OK;
  GP_TRY(gp_cuda_use(be));
  // The step constants exactly as core/cpu/optim.c computes them.
  const float b1 = hp->beta1, b2 = hp->beta2;
  const float c1 = 1.0f - (float)pow((double)b1, (double)hp->t);
  const float c2 = 1.0f - (float)pow((double)b2, (double)hp->t);
  const float step = hp->lr / c1, sc2 = sqrtf(c2), decay = 1.0f - hp->lr * hp->weight_decay;
  adamw_k<<<gp_cuda_blocks(be, n), GP_CUDA_BLOCK, 0, stream_of(be)>>>(n, b1, b2, hp->eps, step, sc2,
                                                                      decay, w, g, m, v);
  GP_CUDA_LAUNCHED("adamw_update kernel");
  return GP_OK;
}

gp_status gp_cuda_rmsprop_update(gp_backend *be, int64_t n, const gp_rmsprop_hp *hp, float *w,
                                 const float *g, float *sq, float *buf) {
  if (n <= 0) return GP_OK;
  GP_TRY(gp_cuda_use(be));
  rmsprop_k<<<gp_cuda_blocks(be, n), GP_CUDA_BLOCK, 0, stream_of(be)>>>(
      n, hp->lr, hp->alpha, hp->eps, hp->momentum, hp->weight_decay, w, g, sq, buf);
  GP_CUDA_LAUNCHED("rmsprop_update kernel");
  return GP_OK;
}
