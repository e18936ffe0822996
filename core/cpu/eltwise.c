/* CPU element-wise operations: activations, dropout, axpby, products, strided copies. Loops are
 * kept free of calls and branches where the compiler can vectorize them. */
#include <math.h>
#include <string.h>

#include "core/cpu/cpu.h"
#include "core/cpu/vmath.h"
#include "core/rng.h"

#define SQRT1_2 0.70710678118654752440f
#define INV_SQRT_2PI 0.39894228040143267794f
#define GELU_TANH_C 0.79788456080286535588f /* sqrt(2 / pi) */
#define GELU_TANH_A 0.044715f

/* The tanh GELU, 0.5 v (1 + tanh(u)) with u = sqrt(2 / pi) (v + 0.044715 v^3), as v s with
 * s = 0.5 (1 + tanh(u)) = 1 / (1 + e^-2u): 1 + tanh(u) cancels where v is negative (at v = -4
 * it is 3e-5, and an ulp of tanh near -1 is 6e-8), the logistic form keeps s to a few ulp.
 * e^-2u overflows to +inf for v below about -9.3: s = 0. The CUDA kernel computes the same. */
static inline gp_v4f gelu_tanh_s(gp_v4f v) {
  gp_v4f u = GELU_TANH_C * (v + GELU_TANH_A * v * v * v);
  return 1.0f / (1.0f + gp_v4f_exp(-2.0f * u));
}

static inline gp_v4f gelu(gp_v4f v) {
  return 0.5f * v * (1.0f + gp_v4f_erf(v * SQRT1_2));
}

static inline gp_v4f gelu_tanh(gp_v4f v) {
  return v * gelu_tanh_s(v);
}

/* dy * gelu'(v) */
static inline gp_v4f gelu_grad(gp_v4f v, gp_v4f dy) {
  gp_v4f cdf = 0.5f * (1.0f + gp_v4f_erf(v * SQRT1_2));
  gp_v4f pdf = INV_SQRT_2PI * gp_v4f_exp(-0.5f * v * v);
  return dy * (cdf + v * pdf);
}

/* d/dv [v s] = s + v s' with s' = 2 s (1 - s) du/dv (as 1 - tanh^2 = 4 s (1 - s)); 1 - s as
 * 1 / (1 + e^2u), not by subtracting s from 1 (which loses its digits where s is near 1, and
 * 2 v du/dv multiplies that loss by up to 100). */
static inline gp_v4f gelu_tanh_grad(gp_v4f v, gp_v4f dy) {
  gp_v4f u = GELU_TANH_C * (v + GELU_TANH_A * v * v * v);
  gp_v4f s = 1.0f / (1.0f + gp_v4f_exp(-2.0f * u)), r = 1.0f / (1.0f + gp_v4f_exp(2.0f * u));
  gp_v4f du = GELU_TANH_C * (1.0f + 3.0f * GELU_TANH_A * v * v);
  return dy * (s + 2.0f * v * du * (s * r));
}

/* SiLU as PyTorch computes it: x / (1 + e^-x); e^-x overflows to +inf below x = -88.7,
 * giving -0 (PyTorch's value there too). */
static inline gp_v4f silu(gp_v4f v) {
  return v / (1.0f + gp_v4f_exp(-v));
}

/* dy s (1 + x (1 - s)), s = sigmoid(x): PyTorch's silu_backward, operation for operation. */
static inline gp_v4f silu_grad(gp_v4f v, gp_v4f dy) {
  gp_v4f s = 1.0f / (1.0f + gp_v4f_exp(-v));
  return dy * s * (1.0f + v * (1.0f - s));
}

#if defined(__x86_64__) && defined(__GNUC__)
/* SiLU's loops on 8 lanes where the CPU has AVX2: gp_v4f_exp (core/cpu/vmath.h) and the
 * formulas above written again for 8 floats, operation for operation and without FMA, so every
 * lane rounds as the 4-lane code does and the bits do not depend on the CPU (test_vmath.c
 * checks). Twice the floats per instruction: SiLU at [1024, 688] took 1.6 ms forward on one
 * thread of a 2-core EPYC VM with the 4-lane code, PyTorch's AVX2 kernel half that. */
typedef float s8f __attribute__((vector_size(32)));
typedef int32_t s8i __attribute__((vector_size(32)));
typedef uint32_t s8u __attribute__((vector_size(32)));

__attribute__((target("avx2"))) static inline s8f s8f_select(s8i m, s8f a, s8f b) {
  return (s8f)(((s8i)a & m) | ((s8i)b & ~m));
}

__attribute__((target("avx2"))) static inline s8f s8f_exp(s8f x) {
  const s8f zero = {0};
  x = s8f_select(x < -104.0f, zero - 104.0f, x);
  x = s8f_select(x > 100.0f, zero + 100.0f, x);
  const s8f magic = zero + 12582912.0f;
  s8f fn = (x * 1.44269504088896341f + magic) - magic;
  s8f r = x - fn * 0.693359375f;
  r = r - fn * -2.12194440e-4f;
  s8f y = zero + 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * (r * r) + r + 1.0f;
  s8i n = __builtin_convertvector(fn, s8i);
  s8i n1 = n >> 1, n2 = n - n1;
  s8f s1 = (s8f)(((s8u)(n1 + 127)) << 23);
  s8f s2 = (s8f)(((s8u)(n2 + 127)) << 23);
  return y * s1 * s2;
}

/* The 8-float blocks of silu (g NULL) or silu_grad over [0, n); returns where they end. */
__attribute__((target("avx2"))) static int64_t silu_x8(int64_t n, const float *x, const float *g,
                                                       float *y) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    s8f v, d;
    memcpy(&v, x + i, sizeof v);
    if (g) {
      memcpy(&d, g + i, sizeof d);
      s8f s = 1.0f / (1.0f + s8f_exp(-v));
      v = d * s * (1.0f + v * (1.0f - s));
    } else {
      v = v / (1.0f + s8f_exp(-v));
    }
    memcpy(y + i, &v, sizeof v);
  }
  return i;
}

/* x = e^x over the 8-float blocks of [0, n); returns where they end. */
__attribute__((target("avx2"))) static int64_t exp_x8(int64_t n, float *x) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    s8f v;
    memcpy(&v, x + i, sizeof v);
    v = s8f_exp(v);
    memcpy(x + i, &v, sizeof v);
  }
  return i;
}

/* vmath.h's log1p on 8 lanes, operation for operation (the same bits as gp_v4f_log1p). */
__attribute__((target("avx2"))) static inline s8f s8f_log1p(s8f u) {
  const s8f zero = {0}, x = u + 1.0f;
  const s8i xi = (s8i)x;
  s8i e = ((xi >> 23) & 0xff) - 126;
  s8f m = (s8f)((xi & 0x007fffff) | 0x3f000000);
  const s8i small = m < 0.707106781186547524f;
  e = e - (small & 1);
  m = s8f_select(small, m + m, m) - 1.0f;
  const s8f fe = __builtin_convertvector(e, s8f), z = m * m;
  s8f y = zero + 7.0376836292e-2f;
  y = y * m - 1.1514610310e-1f;
  y = y * m + 1.1676998740e-1f;
  y = y * m - 1.2420140846e-1f;
  y = y * m + 1.4249322787e-1f;
  y = y * m - 1.6668057665e-1f;
  y = y * m + 2.0000714765e-1f;
  y = y * m - 2.4999993993e-1f;
  y = y * m + 3.3333331174e-1f;
  y = y * m * z;
  y = y + fe * -2.12194440e-4f;
  y = y - 0.5f * z;
  s8f l = (m + y) + fe * 0.693359375f;
  const s8f d = x - 1.0f;
  l = s8f_select(d == 0.0f, u, l * (u / d));
  return s8f_select(x == __builtin_inff(), x, l);
}

/* bce_with_logits' loss (grad 0) or its gradient times scale over the 8-float blocks of
 * [0, n), as shapes.c's 4-lane bce_v4 and bce_grad_v4 compute them; returns where they end. */
__attribute__((target("avx2"))) static int64_t bce_x8(int64_t n, const float *p, const float *t,
                                                      float scale, int grad, float *out) {
  const s8f zero = {0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    s8f v, w;
    memcpy(&v, p + i, sizeof v);
    memcpy(&w, t + i, sizeof w);
    if (grad) {
      v = scale * (1.0f / (1.0f + s8f_exp(-v)) - w);
    } else {
      const s8f av = s8f_select(v < zero, -v, v);
      v = (s8f_select(v > zero, v, zero) - v * w) + s8f_log1p(s8f_exp(-av));
    }
    memcpy(out + i, &v, sizeof v);
  }
  return i;
}

static int have_avx2(void) {
  static _Atomic int have = -1; /* the workers of a team may ask first together */
  if (have < 0) have = __builtin_cpu_supports("avx2");
  return have;
}

/* 1: silu may take the AVX2 loops (tests turn them off to compare the two). */
static _Atomic int silu_avx2_allowed = 1;
void gp_cpu_silu_avx2_set(int on) {
  silu_avx2_allowed = on;
}

static int64_t silu_wide(int64_t n, const float *x, const float *g, float *y) {
  return silu_avx2_allowed && have_avx2() ? silu_x8(n, x, g, y) : 0;
}

static int64_t exp_wide(int64_t n, float *x) {
  return silu_avx2_allowed && have_avx2() ? exp_x8(n, x) : 0;
}

int64_t gp_cpu_bce_wide(int64_t n, const float *p, const float *t, float scale, int grad,
                        float *out) {
  return silu_avx2_allowed && have_avx2() ? bce_x8(n, p, t, scale, grad, out) : 0;
}
#else
void gp_cpu_silu_avx2_set(int on) {
  (void)on;
}
static int64_t silu_wide(int64_t n, const float *x, const float *g, float *y) {
  (void)n, (void)x, (void)g, (void)y;
  return 0;
}
static int64_t exp_wide(int64_t n, float *x) {
  (void)n, (void)x;
  return 0;
}
int64_t gp_cpu_bce_wide(int64_t n, const float *p, const float *t, float scale, int grad,
                        float *out) {
  (void)n, (void)p, (void)t, (void)scale, (void)grad, (void)out;
  return 0;
}
#endif

void gp_cpu_exp_inplace(int64_t n, float *x) {
  int64_t i = exp_wide(n, x);
  for (; i + 4 <= n; i += 4)
    gp_v4f_store(x + i, gp_v4f_exp(gp_v4f_load(x + i)));
  if (i < n) gp_v4f_store_part(x + i, gp_v4f_exp(gp_v4f_load_part(x + i, n - i)), n - i);
}

/* y = f(x) and y = f(x, g), four floats at a time, the last few as a vector padded with
 * zeros: every element goes through the same code. Inlined with f. */
static inline void map4(int64_t n, const float *x, float *y, gp_v4f (*f)(gp_v4f)) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    gp_v4f_store(y + i, f(gp_v4f_load(x + i)));
  if (i < n) gp_v4f_store_part(y + i, f(gp_v4f_load_part(x + i, n - i)), n - i);
}

static inline void map4_2(int64_t n, const float *x, const float *g, float *y,
                          gp_v4f (*f)(gp_v4f, gp_v4f)) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    gp_v4f_store(y + i, f(gp_v4f_load(x + i), gp_v4f_load(g + i)));
  if (i < n)
    gp_v4f_store_part(y + i, f(gp_v4f_load_part(x + i, n - i), gp_v4f_load_part(g + i, n - i)),
                      n - i);
}

/* y may be x (an in-place ReLU: gp_layer_type.forward_in_place). */
static gp_status act_forward(gp_activation act, int64_t n, const float *x, float *y) {
  switch (act) {
  case GP_ACTIVATION_RELU:
    /* As PyTorch: a NaN stays a NaN (a diverged value must reach the loss), -0 stays -0. */
    for (int64_t i = 0; i < n; i++)
      y[i] = x[i] < 0.0f ? 0.0f : x[i];
    return GP_OK;
  case GP_ACTIVATION_GELU:
    map4(n, x, y, gelu);
    return GP_OK;
  case GP_ACTIVATION_GELU_TANH:
    map4(n, x, y, gelu_tanh);
    return GP_OK;
  case GP_ACTIVATION_SILU: {
    int64_t i = silu_wide(n, x, NULL, y);
    map4(n - i, x + i, y + i, silu);
    return GP_OK;
  }
  case GP_ACTIVATION_TANH:
    for (int64_t i = 0; i < n; i++)
      y[i] = tanhf(x[i]);
    return GP_OK;
  case GP_ACTIVATION_SIGMOID:
    /* Two forms so exp never overflows into inf/inf for large |x|. */
    for (int64_t i = 0; i < n; i++) {
      float v = x[i];
      if (v >= 0.0f) {
        y[i] = 1.0f / (1.0f + expf(-v));
      } else {
        float z = expf(v);
        y[i] = z / (1.0f + z);
      }
    }
    return GP_OK;
  case GP_ACTIVATION_COUNT:
    break;
  }
  return GP_ERR(GP_ERR_RUNTIME, "unknown activation %d", (int)act);
}

/* relu, both gelus and silu read x; tanh and sigmoid read y (the forward output). */
static gp_status act_backward(gp_activation act, int64_t n, const float *restrict x,
                              const float *restrict y, const float *restrict dy,
                              float *restrict dx) {
  switch (act) {
  case GP_ACTIVATION_RELU:
    /* dy is loaded unconditionally so the select vectorizes instead of branching. A NaN passes
     * the gradient, as PyTorch's threshold_backward (x is x or y: the same sign and NaNs). */
    for (int64_t i = 0; i < n; i++) {
      float g = dy[i];
      dx[i] = x[i] <= 0.0f ? 0.0f : g;
    }
    return GP_OK;
  case GP_ACTIVATION_GELU:
    map4_2(n, x, dy, dx, gelu_grad);
    return GP_OK;
  case GP_ACTIVATION_GELU_TANH:
    map4_2(n, x, dy, dx, gelu_tanh_grad);
    return GP_OK;
  case GP_ACTIVATION_SILU: {
    int64_t i = silu_wide(n, x, dy, dx);
    map4_2(n - i, x + i, dy + i, dx + i, silu_grad);
    return GP_OK;
  }
  case GP_ACTIVATION_TANH:
    for (int64_t i = 0; i < n; i++)
      dx[i] = dy[i] * (1.0f - y[i] * y[i]);
    return GP_OK;
  case GP_ACTIVATION_SIGMOID:
    for (int64_t i = 0; i < n; i++)
      dx[i] = dy[i] * y[i] * (1.0f - y[i]);
    return GP_OK;
  case GP_ACTIVATION_COUNT:
    break;
  }
  return GP_ERR(GP_ERR_RUNTIME, "unknown activation %d", (int)act);
}

/* The table's entries split the loops over the instance's threads (team.c): each part is
 * the same loop over a slice, so the results do not depend on the split. */
typedef struct ew_args {
  gp_activation act;
  float p, a, b;
  uint64_t key, offset;
  const float *x, *y, *dy;
  float *out;
} ew_args;

static gp_status act_forward_part(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)worker;
  const ew_args *e = ctx;
  return act_forward(e->act, hi - lo, e->x + lo, e->out + lo);
}

gp_status gp_cpu_act_forward(gp_backend *be, gp_activation act, int64_t n, const float *x,
                             float *y) {
  ew_args e = {.act = act, .x = x, .out = y};
  if (n <= 0) return act_forward(act, 0, x, y); /* still reports an unknown activation */
  return gp_cpu_parallel_for(be, n, GP_CPU_GRAIN, act_forward_part, &e);
}

static gp_status act_backward_part(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)worker;
  const ew_args *e = ctx;
  return act_backward(e->act, hi - lo, e->x ? e->x + lo : NULL, e->y ? e->y + lo : NULL, e->dy + lo,
                      e->out + lo);
}

gp_status gp_cpu_act_backward(gp_backend *be, gp_activation act, int64_t n, const float *x,
                              const float *y, const float *dy, float *dx) {
  ew_args e = {.act = act, .x = x, .y = y, .dy = dy, .out = dx};
  if (n <= 0) return act_backward(act, 0, x, y, dy, dx);
  return gp_cpu_parallel_for(be, n, GP_CPU_GRAIN, act_backward_part, &e);
}

static gp_status check_p(float p) {
  if (!(p >= 0.0f && p < 1.0f))
    return GP_ERR(GP_ERR_RUNTIME, "dropout probability %g is outside [0, 1)", (double)p);
  return GP_OK;
}

#if defined(__x86_64__) && defined(__GNUC__)
/* gp_counter_uniform on 8 counters at once: AVX-512DQ multiplies 64-bit lanes (vpmullq),
 * which SSE2 and AVX2 cannot; integer arithmetic, so the same bits as the scalar loop. The
 * comparison u / 2^24 >= p is u >= ceil(p 2^24), exactly (u < 2^24, p a float). */
typedef uint64_t v8u64 __attribute__((vector_size(64)));
typedef int32_t v8i32 __attribute__((vector_size(32)));
typedef float v8f __attribute__((vector_size(32)));

__attribute__((target("avx512f,avx512dq,avx512vl"))) static inline v8u64 hash64_x8(v8u64 x) {
  GP_SPLITMIX64(x);
  return x;
}

__attribute__((target("avx512f,avx512dq,avx512vl"))) static int64_t
dropout_x8(const ew_args *e, int64_t lo, int64_t hi, float scale) {
  const uint64_t thr = (uint64_t)ceil((double)e->p * 16777216.0);
  const float *x = e->x;
  float *y = e->out;
  const v8u64 step = {0, 1, 2, 3, 4, 5, 6, 7};
  int64_t i = lo;
  for (; i + 8 <= hi; i += 8) {
    v8u64 c = e->offset + (uint64_t)i + step;
    v8u64 u = hash64_x8(e->key ^ hash64_x8(c)) >> 40;
    v8i32 keep = __builtin_convertvector(u >= thr, v8i32);
    v8f v, s = (v8f)((v8i32)((v8f){0} + scale) & keep);
    memcpy(&v, x + i, sizeof v);
    v = v * s; /* not a mask of x * scale: a dropped NaN or infinity gives NaN */
    memcpy(y + i, &v, sizeof v);
  }
  return i;
}

static int have_avx512dq(void) {
  static _Atomic int have = -1; /* the workers of a team may ask first together */
  if (have < 0)
    have = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vl");
  return have;
}
#endif

/* y = x * (mask * scale), the mask drawn from (key, offset + i) for element i: multiplied as
 * PyTorch does, so a dropped NaN or infinity gives NaN rather than hiding it. */
static gp_status dropout_part(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)worker;
  const ew_args *e = ctx;
  const float p = e->p, scale = 1.0f / (1.0f - p);
  const float *x = e->x; /* y may be x (an in-place dropout) */
  float *y = e->out;
  int64_t i = lo;
#if defined(__x86_64__) && defined(__GNUC__)
  if (have_avx512dq()) i = dropout_x8(e, lo, hi, scale);
#endif
  for (; i < hi; i++)
    y[i] = x[i] * (gp_counter_uniform(e->key, e->offset + (uint64_t)i) >= p ? scale : 0.0f);
  return GP_OK;
}

gp_status gp_cpu_dropout_forward(gp_backend *be, int64_t n, float p, uint64_t key, uint64_t offset,
                                 const float *x, float *y) {
  GP_TRY(check_p(p));
  ew_args e = {.p = p, .key = key, .offset = offset, .x = x, .out = y};
  return gp_cpu_parallel_for(be, n, GP_CPU_GRAIN / 4, dropout_part, &e);
}

gp_status gp_cpu_dropout_backward(gp_backend *be, int64_t n, float p, uint64_t key, uint64_t offset,
                                  const float *dy, float *dx) {
  GP_TRY(check_p(p));
  ew_args e = {.p = p, .key = key, .offset = offset, .x = dy, .out = dx};
  return gp_cpu_parallel_for(be, n, GP_CPU_GRAIN / 4, dropout_part, &e);
}

static gp_status axpby_part(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)worker;
  const ew_args *e = ctx;
  const float a = e->a, b = e->b, *x = e->x + lo;
  float *y = e->out + lo;
  const int64_t n = hi - lo;
  /* x and y may be the same buffer (y = (a + b) y), so no restrict here. */
  if (b == 0.0f) {
    for (int64_t i = 0; i < n; i++)
      y[i] = a * x[i];
  } else if (b == 1.0f) {
    for (int64_t i = 0; i < n; i++)
      y[i] += a * x[i];
  } else {
    for (int64_t i = 0; i < n; i++)
      y[i] = a * x[i] + b * y[i];
  }
  return GP_OK;
}

gp_status gp_cpu_axpby(gp_backend *be, int64_t n, float a, const float *x, float b, float *y) {
  ew_args e = {.a = a, .b = b, .x = x, .out = y};
  return gp_cpu_parallel_for(be, n, GP_CPU_GRAIN, axpby_part, &e);
}

static gp_status mul_part(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)worker;
  const ew_args *e = ctx;
  const float *a = e->x + lo, *b = e->y + lo;
  float *y = e->out + lo; /* may be a or b: no restrict */
  for (int64_t i = 0; i < hi - lo; i++)
    y[i] = a[i] * b[i];
  return GP_OK;
}

gp_status gp_cpu_mul(gp_backend *be, int64_t n, const float *a, const float *b, float *y) {
  ew_args e = {.x = a, .y = b, .out = y};
  return gp_cpu_parallel_for(be, n, GP_CPU_GRAIN, mul_part, &e);
}

gp_status gp_cpu_copy2d(gp_backend *be, int64_t rows, int64_t cols, const float *src,
                        int64_t src_ld, float *dst, int64_t dst_ld) {
  (void)be;
  if (rows <= 0 || cols <= 0) return GP_OK;
  if (src_ld == cols && dst_ld == cols) {
    memmove(dst, src, (size_t)(rows * cols) * sizeof(float));
    return GP_OK;
  }
  for (int64_t r = 0; r < rows; r++)
    memmove(dst + r * dst_ld, src + r * src_ld, (size_t)cols * sizeof(float));
  return GP_OK;
}
