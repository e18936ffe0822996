/* exp, erf and log1p on four floats at a time (GCC vector extensions on SSE2, the build's
 * baseline), for the CPU kernels' transcendental loops: softmax rows, GELU, attention. glibc's expf
 * and erff are calls the compiler cannot vectorize; these take about a tenth of the time. No FMA
 * and no dispatch by CPU, so every x86-64 machine computes the same bits, and a scalar is
 * computed as lane 0 of a vector (gp_expf), so an element's value never depends on where it
 * falls in a loop.
 * Accuracy: exp is Cephes' expf (range reduction by ln 2 in two parts, a degree-5 polynomial),
 * within 2 ulp of the correctly rounded value on [-87, 88], gradual underflow below, +inf
 * above 88.72, NaN for NaN. erf is a rational function of x^2 (below): absolute error below
 * 5e-7 (2.2e-7 for |x| < 1, 4.7e-7 on [3, 4): about 8 ulp of 1, against glibc's 1), which
 * GELU's 0.5 x (1 + erf(x / sqrt 2)) turns into 1e-6 at most, far below a float GEMM's
 * rounding; it takes 1.3 ns a float against glibc erff's 12 (one thread of a 2-core Sapphire
 * Rapids VM). tests/layers/test_vmath.c checks both against libm. */
#ifndef GP_CPU_VMATH_H
#define GP_CPU_VMATH_H

#include <stdint.h>
#include <string.h>

typedef float gp_v4f __attribute__((vector_size(16)));
typedef int32_t gp_v4i __attribute__((vector_size(16)));
typedef uint32_t gp_v4u __attribute__((vector_size(16)));
typedef double gp_v2d __attribute__((vector_size(16)));

static inline gp_v4f gp_v4f_load(const float *p) {
  gp_v4f v;
  memcpy(&v, p, sizeof v);
  return v;
}

static inline void gp_v4f_store(float *p, gp_v4f v) {
  memcpy(p, &v, sizeof v);
}

/* The first n (< 4) floats of p, zeros after them; and the store of as many. */
static inline gp_v4f gp_v4f_load_part(const float *p, int64_t n) {
  gp_v4f v = {0};
  for (int64_t i = 0; i < n; i++)
    v[i] = p[i];
  return v;
}

static inline void gp_v4f_store_part(float *p, gp_v4f v, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    p[i] = v[i];
}

static inline gp_v4f gp_v4f_splat(float x) {
  return (gp_v4f){x, x, x, x};
}

/* m ? a : b lane by lane, m from a comparison (all ones or zero). */
static inline gp_v4f gp_v4f_select(gp_v4i m, gp_v4f a, gp_v4f b) {
  return (gp_v4f)(((gp_v4i)a & m) | ((gp_v4i)b & ~m));
}

/* Adds the four lanes to two double accumulators: lanes 0, 1 to a, 2, 3 to b. */
static inline void gp_v4f_acc_double(gp_v2d *a, gp_v2d *b, gp_v4f v) {
  *a += (gp_v2d){v[0], v[1]};
  *b += (gp_v2d){v[2], v[3]};
}

static inline gp_v4f gp_v4f_exp(gp_v4f x) {
  /* Clamped so that n below stays within [-150, 145]: below -104 the result is 0 anyway
   * (e^-104 < 2^-149), above 100 it is +inf. A NaN fails both tests and stays NaN. */
  x = gp_v4f_select(x < -104.0f, gp_v4f_splat(-104.0f), x);
  x = gp_v4f_select(x > 100.0f, gp_v4f_splat(100.0f), x);
  /* n = round(x / ln 2) by the 1.5 * 2^23 trick (round to nearest even, |x / ln 2| < 2^22) */
  const gp_v4f magic = gp_v4f_splat(12582912.0f);
  gp_v4f fn = (x * 1.44269504088896341f + magic) - magic;
  /* r = x - n ln 2, ln 2 in two parts so that n * C1 is exact */
  gp_v4f r = x - fn * 0.693359375f;
  r = r - fn * -2.12194440e-4f;
  gp_v4f y = gp_v4f_splat(1.9875691500e-4f);
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * (r * r) + r + 1.0f;
  /* times 2^n in two halves, each a normal float, so that the one rounding of the result is
   * the last multiply (gradual underflow, overflow to +inf) */
  gp_v4i n = __builtin_convertvector(fn, gp_v4i);
  gp_v4i n1 = n >> 1, n2 = n - n1;
  gp_v4f s1 = (gp_v4f)(((gp_v4u)(n1 + 127)) << 23);
  gp_v4f s2 = (gp_v4f)(((gp_v4u)(n2 + 127)) << 23);
  return y * s1 * s2;
}

/* x P(x^2) / Q(x^2) on x clamped to [-4, 4] (erf(4) is 1 - 1.5e-8): the rational fit of
 * Eigen's and XLA's float erf, evaluated in float. Odd; a NaN stays NaN. */
static inline gp_v4f gp_v4f_erf(gp_v4f x) {
  x = gp_v4f_select(x < -4.0f, gp_v4f_splat(-4.0f), x);
  x = gp_v4f_select(x > 4.0f, gp_v4f_splat(4.0f), x);
  gp_v4f x2 = x * x;
  gp_v4f p = gp_v4f_splat(-2.72614225801306e-10f);
  p = p * x2 + 2.77068142495902e-08f;
  p = p * x2 - 2.10102402082508e-06f;
  p = p * x2 - 5.69250639462346e-05f;
  p = p * x2 - 7.34990630326855e-04f;
  p = p * x2 - 2.95459980854025e-03f;
  p = p * x2 - 1.60960333262415e-02f;
  gp_v4f q = gp_v4f_splat(-1.45660718464996e-05f);
  q = q * x2 - 2.13374055278905e-04f;
  q = q * x2 - 1.68282697438203e-03f;
  q = q * x2 - 7.37332916720468e-03f;
  q = q * x2 - 1.42647390514189e-02f;
  return x * (p / q); /* p / q first: x * p would underflow for the smallest x */
}

/* log(1 + u) for u >= 0 (bce_with_logits' softplus takes it of e^-|z| in (0, 1]): Cephes'
 * logf (the mantissa m in [sqrt(1/2), sqrt 2), a degree-9 polynomial in m - 1, ln 2 in two
 * parts) of x = 1 + u, times u / (x - 1), which cancels the rounding of 1 + u (Goldberg's
 * trick); u itself where x rounds to 1. Within 2 ulp of log1p over [0, +inf) (every 7th float
 * checked against libm in double); +inf stays +inf, NaN stays NaN. */
static inline gp_v4f gp_v4f_log1p(gp_v4f u) {
  const gp_v4f x = u + 1.0f;
  const gp_v4i xi = (gp_v4i)x;
  gp_v4i e = ((xi >> 23) & 0xff) - 126; /* x = m 2^e, m in [1/2, 1) (x >= 1: no subnormals) */
  gp_v4f m = (gp_v4f)((xi & 0x007fffff) | 0x3f000000);
  const gp_v4i small = m < 0.707106781186547524f;
  e = e - (small & 1);
  m = gp_v4f_select(small, m + m, m) - 1.0f; /* m - 1 in [sqrt(1/2) - 1, sqrt 2 - 1) */
  const gp_v4f fe = __builtin_convertvector(e, gp_v4f), z = m * m;
  gp_v4f y = gp_v4f_splat(7.0376836292e-2f);
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
  gp_v4f l = (m + y) + fe * 0.693359375f;
  const gp_v4f d = x - 1.0f;
  l = gp_v4f_select(d == 0.0f, u, l * (u / d));
  /* +inf: the mantissa trick gives a finite value (and inf / inf a NaN) */
  return gp_v4f_select(x == __builtin_inff(), x, l);
}

/* Scalars, as lane 0 of the vector functions: the same bits as inside a vector loop. */
static inline float gp_expf(float x) {
  return gp_v4f_exp(gp_v4f_splat(x))[0];
}

static inline float gp_erff(float x) {
  return gp_v4f_erf(gp_v4f_splat(x))[0];
}

static inline float gp_log1pf(float x) {
  return gp_v4f_log1p(gp_v4f_splat(x))[0];
}

#endif
