/* GP_PREC_BF16 on the CPU backend: the rounding to bfloat16 on hand-picked and random values
 * against a reference that measures distances in double; GEMM and the three convolutions
 * against references that round the operands with that reference, accumulate in double and
 * (convolutions) round the result; fp32 mode unchanged. */
#include <cblas.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/cpu/cpu.h"
#include "tests/support/check.h"

static int failures, passes;

/* Tolerances, each with its reason. */
/* f32 accumulation of K terms: |error| <= ACC_ULPS_PER_TERM * K * 2^-24 * sum |term| (the
 * classic bound is (K - 1) u; doubled for the final scaling and addition of the GEMM and the
 * col2im sums of backward data). Missing operand rounding errs by ~2^-9 per term, far more. */
#define ACC_ULPS_PER_TERM 2.0
/* fp32 mode against the double reference of the unrounded operands: the same bound. */

static uint32_t bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static float from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* The reference rounding, independent of the bit trick: of the two bf16 values around f
 * (truncated, and one bf16 ulp further from zero), the nearer in double; a tie goes to the
 * even one. Beyond the largest finite bf16 the far neighbour is Inf, which IEEE rounding
 * treats as the next value after it (2^128). */
static float ref_round(float f) {
  if (isnan(f) || isinf(f) || f == 0.0f) return f;
  uint32_t u = bits(f), lo = u & 0xffff0000u;
  if (lo == u) return f;
  uint32_t hi = lo + 0x10000u; /* same sign, larger magnitude (may be the Inf pattern) */
  double a = fabs((double)f), dlo = a - fabs((double)from_bits(lo));
  double far = (hi & 0x7fffffffu) == 0x7f800000u ? ldexp(1.0, 128) : fabs((double)from_bits(hi));
  double dhi = far - a;
  if (dlo < dhi) return from_bits(lo);
  if (dhi < dlo) return from_bits(hi);
  return ((lo >> 16) & 1u) ? from_bits(hi) : from_bits(lo);
}

static uint64_t mix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static void fill(float *p, int64_t n, uint64_t seed) {
  for (int64_t i = 0; i < n; i++)
    p[i] = (float)((double)(mix(&seed) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void test_rounding(void) {
  static const struct {
    uint32_t in;
    uint16_t out;
    const char *what;
  } cases[] = {
      {0x3f800000u, 0x3f80, "1"},
      {0x3f808000u, 0x3f80, "1 + 2^-8: a tie, to the even 1"},
      {0x3f818000u, 0x3f82, "1 + 3 2^-8: a tie, to the even 1 + 2^-6"},
      {0x3f808001u, 0x3f81, "just above a tie: up"},
      {0x3f807fffu, 0x3f80, "just below a tie: down"},
      {0xbf818000u, 0xbf82, "negative tie, to even"},
      {0x7f7fffffu, 0x7f80, "FLT_MAX: past the largest bf16 and half an ulp: Inf"},
      {0x7f7f7fffu, 0x7f7f, "just below that tie: the largest finite bf16"},
      {0x7f7f8000u, 0x7f80, "the tie above the largest bf16 (odd): Inf"},
      {0x7f7e8000u, 0x7f7e, "a tie below it with an even lower neighbour"},
      {0xff7fffffu, 0xff80, "-FLT_MAX: -Inf"},
      {0x00000001u, 0x0000, "smallest subnormal: 0"},
      {0x00008000u, 0x0000, "subnormal tie, to the even 0"},
      {0x00018000u, 0x0002, "subnormal tie, to even 2"},
      {0x00008001u, 0x0001, "just above: the smallest bf16 subnormal"},
      {0x007fffffu, 0x0080, "largest subnormal: up to the smallest normal"},
      {0x80000001u, 0x8000, "negative tiny: -0"},
      {0x00000000u, 0x0000, "+0"},
      {0x80000000u, 0x8000, "-0"},
      {0x7f800000u, 0x7f80, "Inf"},
      {0xff800000u, 0xff80, "-Inf"},
      {0x7fc00000u, 0x7fc0, "quiet NaN"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint16_t got = gp_bf16_from_f32(from_bits(cases[i].in));
    CHECK(got == cases[i].out, "%s: 0x%08x -> 0x%04x, want 0x%04x", cases[i].what, cases[i].in, got,
          cases[i].out);
    CHECK(bits(ref_round(from_bits(cases[i].in))) == (uint32_t)cases[i].out << 16,
          "the reference disagrees on %s", cases[i].what);
  }
  /* NaNs whose rounding would carry into the Inf pattern stay NaN, sign kept. */
  static const uint32_t nans[] = {0x7f800001u, 0x7f80ffffu, 0x7fffffffu, 0xff800001u, 0xffffffffu};
  for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
    float r = gp_bf16_round(from_bits(nans[i]));
    CHECK(isnan(r) && (bits(r) >> 31) == (nans[i] >> 31), "NaN 0x%08x -> 0x%08x", nans[i], bits(r));
  }
  /* Random bit patterns (every exponent, subnormals, ties) against the reference. */
  uint64_t seed = 7;
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < (1 << 20); i++) {
    uint32_t u = (uint32_t)mix(&seed);
    if (i % 4 == 1) u = (u & 0xffff0000u) | 0x8000u; /* an exact tie */
    if (i % 4 == 2) u &= 0x807fffffu;                /* a subnormal */
    float f = from_bits(u);
    if (isnan(f)) continue;
    float got = gp_bf16_round(f), want = ref_round(f);
    if (bits(got) != bits(want) && bad++ == 0) first = (int64_t)u;
  }
  CHECK(bad == 0, "%lld random values round differently from the reference (first 0x%08llx)",
        (long long)bad, (long long)first);
  /* Rounding is idempotent; the array form equals the scalar one, also in place. */
  float v[257], w[257];
  fill(v, 257, 11);
  gp_bf16_round_array(257, v, w);
  int same = 1;
  for (int i = 0; i < 257; i++)
    same &= bits(w[i]) == bits(gp_bf16_round(v[i])) && bits(gp_bf16_round(w[i])) == bits(w[i]);
  gp_bf16_round_array(257, v, v);
  same &= memcmp(v, w, sizeof v) == 0;
  CHECK(same, "round_array differs from the scalar rounding or is not idempotent");
}

/* ---- GEMM ---- */

/* C = alpha op(A) op(B) + beta C0 in double over operands rounded with ref_round (or not),
 * and the error bound of f32 accumulation per element. */
static void ref_gemm(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                     const float *b, int ldb, float beta, const float *c0, int ldc, int round,
                     double *out, double *tol) {
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) {
      double s = 0, mag = 0;
      for (int p = 0; p < k; p++) {
        float av = ta ? a[p * lda + i] : a[i * lda + p];
        float bv = tb ? b[j * ldb + p] : b[p * ldb + j];
        if (round) av = ref_round(av), bv = ref_round(bv);
        s += (double)av * bv;
        mag += fabs((double)av * bv);
      }
      double cv = beta == 0.0f ? 0.0 : (double)beta * c0[i * ldc + j];
      out[i * n + j] = alpha * s + cv;
      tol[i * n + j] =
          ACC_ULPS_PER_TERM * (k + 2) * ldexp(1.0, -24) * (fabs(alpha) * mag + fabs(cv)) + 1e-30;
    }
}

static void test_gemm(gp_backend *be) {
  const int m = 19, n = 23, k = 300, pad = 5;
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      for (int bi = 0; bi < 2; bi++) {
        const float alpha = 0.75f, beta = bi ? 0.5f : 0.0f;
        const int lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
        const int ar = ta ? k : m, br = tb ? n : k;
        float *a = malloc(sizeof(float) * ar * lda), *b = malloc(sizeof(float) * br * ldb);
        float *c0 = malloc(sizeof(float) * m * ldc), *c = malloc(sizeof(float) * m * ldc);
        float *c32 = malloc(sizeof(float) * m * ldc), *cblas = malloc(sizeof(float) * m * ldc);
        double *ref = malloc(sizeof(double) * m * n), *tol = malloc(sizeof(double) * m * n);
        double *ref32 = malloc(sizeof(double) * m * n), *tol32 = malloc(sizeof(double) * m * n);
        fill(a, ar * lda, 100 + ta * 4 + tb * 2 + bi);
        fill(b, br * ldb, 200 + ta * 4 + tb * 2 + bi);
        fill(c0, m * ldc, 300);
        if (!bi) /* beta 0: C is not read */
          for (int i = 0; i < m * ldc; i++)
            c0[i] = NAN;
        memcpy(c, c0, sizeof(float) * m * ldc);
        memcpy(c32, c0, sizeof(float) * m * ldc);
        memcpy(cblas, c0, sizeof(float) * m * ldc);
        ref_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c0, ldc, 1, ref, tol);
        ref_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c0, ldc, 0, ref32, tol32);

        be->precision = GP_PREC_BF16;
        CHECK(be->gemm(be, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) == GP_OK,
              "bf16 gemm");
        be->precision = GP_PREC_FP32;
        CHECK(be->gemm(be, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c32, ldc) == GP_OK,
              "fp32 gemm");
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    m, n, k, alpha, a, lda, b, ldb, beta, cblas, ldc);

        int64_t bad = 0, bad32 = 0, far = 0, pads = 0;
        for (int i = 0; i < m; i++) {
          for (int j = 0; j < n; j++) {
            double r = ref[i * n + j], g = c[i * ldc + j];
            if (!(fabs(g - r) <= tol[i * n + j])) bad++;
            if (!(fabs((double)c32[i * ldc + j] - ref32[i * n + j]) <= tol32[i * n + j])) bad32++;
            /* the unrounded product is far outside the bf16 bound: the test can tell */
            if (fabs(ref32[i * n + j] - r) > tol[i * n + j]) far++;
          }
          for (int j = n; j < ldc; j++)
            pads += bits(c[i * ldc + j]) != bits(c0[i * ldc + j]);
        }
        CHECK(bad == 0, "bf16 gemm ta %d tb %d beta %g: %lld of %d outside the bound", ta, tb, beta,
              (long long)bad, m * n);
        CHECK(far > m * n / 2, "bf16 gemm ta %d tb %d: rounding changes only %lld of %d", ta, tb,
              (long long)far, m * n);
        CHECK(pads == 0, "bf16 gemm wrote %lld padding elements", (long long)pads);
        CHECK(bad32 == 0, "fp32 gemm ta %d tb %d: %lld outside the f32 bound", ta, tb,
              (long long)bad32);
        CHECK(memcmp(c32, cblas, sizeof(float) * m * ldc) == 0,
              "fp32 gemm ta %d tb %d beta %g is not bit-identical to cblas_sgemm", ta, tb, beta);
        free(a), free(b), free(c0), free(c), free(c32), free(cblas);
        free(ref), free(tol), free(ref32), free(tol32);
      }
}

/* Operands in the instance's scratch (as attention keeps them) survive the bf16 copies, and
 * the copies are memory of the instance. */
static void test_gemm_scratch(gp_backend *be) {
  const int m = 8, n = 9, k = 40;
  float *s = NULL, b[40 * 9], c[8 * 9], want[8 * 9];
  fill(b, k * n, 5);
  CHECK(be->scratch(be, sizeof(float) * m * k, (void **)&s) == GP_OK, "scratch");
  if (!s) return;
  fill(s, m * k, 6);
  float a_copy[8 * 40];
  memcpy(a_copy, s, sizeof a_copy);
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) {
      float acc = 0;
      for (int p = 0; p < k; p++)
        acc += ref_round(a_copy[i * k + p]) * ref_round(b[p * n + j]);
      want[i * n + j] = acc;
    }
  size_t used = be->mem_used;
  be->precision = GP_PREC_BF16;
  CHECK(be->gemm(be, 0, 0, m, n, k, 1.0f, s, k, b, n, 0.0f, c, n) == GP_OK, "gemm");
  be->precision = GP_PREC_FP32;
  CHECK(memcmp(s, a_copy, sizeof a_copy) == 0, "the operand in scratch was changed");
  double worst = 0;
  for (int i = 0; i < m * n; i++)
    worst = fmax(worst, fabs((double)c[i] - want[i]));
  CHECK(worst < 1e-4, "gemm on a scratch operand: off by %g", worst);
  CHECK(be->mem_used >= used, "mem_used shrank");
}

/* ---- convolution ---- */

typedef struct shape {
  gp_conv2d_desc d;
  const char *name;
} shape;

static int64_t out_dim(int64_t in, int64_t k, int64_t s, int64_t p, int64_t dil) {
  return (in + 2 * p - dil * (k - 1) - 1) / s + 1;
}

static gp_conv2d_desc make(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k, int64_t kh,
                           int64_t kw, int64_t s, int64_t p, int64_t dil, int64_t g) {
  gp_conv2d_desc d = {n, c, h, w, k, 0, 0, kh, kw, s, s, p, p, dil, dil, g};
  d.oh = out_dim(h, kh, s, p, dil);
  d.ow = out_dim(w, kw, s, p, dil);
  return d;
}

/* Index of input (ni, ci, iy, ix) read by output (ni, ko, oy, ox) at tap (a, b), or -1. */
static int64_t tap_in(const gp_conv2d_desc *d, int64_t ni, int64_t ci, int64_t oy, int64_t ox,
                      int64_t a, int64_t b) {
  int64_t iy = oy * d->sh - d->ph + a * d->dh, ix = ox * d->sw - d->pw + b * d->dw;
  if (iy < 0 || iy >= d->h || ix < 0 || ix >= d->w) return -1;
  return ((ni * d->c + ci) * d->h + iy) * d->w + ix;
}

/* The three directions in double over (optionally) rounded operands; out and its bound. */
static void ref_conv(const gp_conv2d_desc *d, int dir, const float *x, const float *w,
                     const float *dy, int round, double *out, double *tol) {
  const int64_t cg = d->c / d->groups, kg = d->k / d->groups;
  const int64_t nx = d->n * d->c * d->h * d->w, nwt = d->k * cg * d->kh * d->kw;
  const int64_t ny = d->n * d->k * d->oh * d->ow;
  const int64_t nout = dir == 0 ? ny : dir == 1 ? nx : nwt;
  double *mag = calloc((size_t)nout, sizeof(double));
  int64_t *terms = calloc((size_t)nout, sizeof(int64_t));
  memset(out, 0, sizeof(double) * nout);
#define R(v) (round ? ref_round(v) : (v))
  for (int64_t ni = 0; ni < d->n; ni++)
    for (int64_t ko = 0; ko < d->k; ko++)
      for (int64_t oy = 0; oy < d->oh; oy++)
        for (int64_t ox = 0; ox < d->ow; ox++) {
          int64_t yi = ((ni * d->k + ko) * d->oh + oy) * d->ow + ox, grp = ko / kg;
          for (int64_t cj = 0; cj < cg; cj++)
            for (int64_t a = 0; a < d->kh; a++)
              for (int64_t b = 0; b < d->kw; b++) {
                int64_t wi = ((ko * cg + cj) * d->kh + a) * d->kw + b;
                int64_t xi = tap_in(d, ni, grp * cg + cj, oy, ox, a, b);
                if (xi < 0) continue; /* a padding tap */
                int64_t o = dir == 0 ? yi : dir == 1 ? xi : wi;
                double p = dir == 0   ? (double)R(x[xi]) * R(w[wi])
                           : dir == 1 ? (double)R(dy[yi]) * R(w[wi])
                                      : (double)R(x[xi]) * R(dy[yi]);
                out[o] += p;
                mag[o] += fabs(p);
                terms[o]++;
              }
        }
#undef R
  for (int64_t i = 0; i < nout; i++)
    tol[i] = ACC_ULPS_PER_TERM * (double)(terms[i] + 2) * ldexp(1.0, -24) * mag[i] + 1e-30;
  free(mag);
  free(terms);
}

/* got (the f32 result of a bf16 convolution, before bias or accumulation) is the bf16
 * rounding of a value within tol of ref: rounding is monotone, so it lies between the
 * roundings of the ends. */
static int bracketed(float got, double ref, double tol) {
  float lo = gp_bf16_round((float)(ref - tol)), hi = gp_bf16_round((float)(ref + tol));
  return got >= lo && got <= hi && bits(gp_bf16_round(got)) == bits(got);
}

static void test_conv_shape(gp_backend *be, const shape *sh) {
  const gp_conv2d_desc *d = &sh->d;
  const int64_t cg = d->c / d->groups;
  const int64_t nx = d->n * d->c * d->h * d->w, nwt = d->k * cg * d->kh * d->kw;
  const int64_t ny = d->n * d->k * d->oh * d->ow, ohw = d->oh * d->ow;
  const int64_t nmax = nx > ny ? (nx > nwt ? nx : nwt) : (ny > nwt ? ny : nwt);
  float *x = malloc(sizeof(float) * nx), *w = malloc(sizeof(float) * nwt);
  float *dy = malloc(sizeof(float) * ny), *bias = malloc(sizeof(float) * d->k);
  float *got = malloc(sizeof(float) * nmax), *got2 = malloc(sizeof(float) * nmax);
  float *dw0 = malloc(sizeof(float) * nwt), *db = calloc((size_t)d->k, sizeof(float));
  double *ref = malloc(sizeof(double) * nmax), *tol = malloc(sizeof(double) * nmax);
  fill(x, nx, 1), fill(w, nwt, 2), fill(dy, ny, 3), fill(bias, d->k, 4), fill(dw0, nwt, 5);
  const int64_t nout[3] = {ny, nx, nwt};
  static const char *const dir_name[3] = {"forward", "backward data", "backward filter"};

  for (int prec = 0; prec < 2; prec++) {
    be->precision = prec ? GP_PREC_BF16 : GP_PREC_FP32;
    for (int dir = 0; dir < 3; dir++) {
      gp_status s;
      if (dir == 0) {
        s = be->conv2d_forward(be, d, x, w, NULL, got);
      } else if (dir == 1) {
        s = be->conv2d_backward_data(be, d, dy, w, got);
      } else {
        memset(got, 0, sizeof(float) * nwt);
        s = be->conv2d_backward_filter(be, d, x, dy, got, NULL);
      }
      CHECK(s == GP_OK, "%s %s %s", sh->name, prec ? "bf16" : "fp32", dir_name[dir]);
      ref_conv(d, dir, x, w, dy, prec, ref, tol);
      int64_t bad = 0, first = -1, unrounded = 0;
      for (int64_t i = 0; i < nout[dir]; i++) {
        int ok = prec ? bracketed(got[i], ref[i], tol[i]) : fabs(got[i] - ref[i]) <= tol[i];
        if (!ok && bad++ == 0) first = i;
        unrounded += bits(got[i]) & 0xffffu ? 1 : 0;
      }
      CHECK(bad == 0, "%s %s %s: %lld of %lld wrong (first %lld: %.9g, reference %.9g +- %.3g)",
            sh->name, prec ? "bf16" : "fp32", dir_name[dir], (long long)bad, (long long)nout[dir],
            (long long)first, first >= 0 ? got[first] : 0.0, first >= 0 ? ref[first] : 0.0,
            first >= 0 ? tol[first] : 0.0);
      if (!prec) /* fp32 mode does not round its results */
        CHECK(unrounded > nout[dir] / 2, "%s fp32 %s: only %lld of %lld results off the bf16 grid",
              sh->name, dir_name[dir], (long long)unrounded, (long long)nout[dir]);
    }
    /* Bias (forward) and accumulation (filter) come after the rounding, in f32. */
    CHECK(be->conv2d_forward(be, d, x, w, NULL, got) == GP_OK, "forward");
    CHECK(be->conv2d_forward(be, d, x, w, bias, got2) == GP_OK, "forward with bias");
    int64_t bad = 0;
    for (int64_t i = 0; i < ny; i++)
      bad += bits(got2[i]) != bits(got[i] + bias[(i / ohw) % d->k]);
    CHECK(bad == 0, "%s %s: forward with bias is not the result plus the bias (%lld)", sh->name,
          prec ? "bf16" : "fp32", (long long)bad);
    memset(got, 0, sizeof(float) * nwt);
    memcpy(got2, dw0, sizeof(float) * nwt);
    CHECK(be->conv2d_backward_filter(be, d, x, dy, got, NULL) == GP_OK, "filter from 0");
    CHECK(be->conv2d_backward_filter(be, d, x, dy, got2, db) == GP_OK, "filter onto dw0");
    bad = 0;
    for (int64_t i = 0; i < nwt; i++)
      bad += bits(got2[i]) != bits(dw0[i] + got[i]);
    /* (fp32 mode adds each chunk of samples to dw in turn) */
    if (prec)
      CHECK(bad == 0, "%s bf16: dw += is not dw0 + the result (%lld)", sh->name, (long long)bad);
    /* dbias: the f32 sum of the unrounded dy, in both modes */
    float dbias_want[64] = {0};
    CHECK(gp_cpu_bias_grad(be, d->n, d->k, ohw, dy, dbias_want) == GP_OK, "bias grad");
    CHECK(memcmp(db, dbias_want, sizeof(float) * d->k) == 0, "%s %s: dbias differs", sh->name,
          prec ? "bf16" : "fp32");
    memset(db, 0, sizeof(float) * d->k);
  }
  be->precision = GP_PREC_FP32;
  free(x), free(w), free(dy), free(bias), free(got), free(got2), free(dw0), free(db);
  free(ref), free(tol);
}

static void test_conv(gp_backend *be) {
  const shape shapes[] = {
      {make(3, 4, 9, 9, 6, 3, 3, 1, 1, 1, 1), "3x3 same (block im2col)"},
      {make(2, 3, 11, 10, 5, 3, 3, 2, 1, 1, 1), "3x3 stride 2"},
      {make(2, 4, 8, 8, 6, 3, 3, 1, 2, 2, 2), "dilation 2, 2 groups"},
      {make(2, 6, 7, 7, 6, 3, 3, 1, 1, 1, 6), "depthwise"},
      {make(4, 8, 5, 5, 7, 1, 1, 1, 0, 1, 1), "1x1"},
      {make(1, 3, 20, 20, 8, 5, 5, 1, 2, 1, 1), "5x5, one sample"},
      {make(2, 2, 6, 6, 3, 3, 3, 1, 0, 1, 1), "no padding (chunked GEMM)"},
      /* stride 1 with padding beyond the kernel's extent: the column route, not the
       * transposed forward (which would need negative padding) */
      {make(2, 3, 5, 5, 4, 3, 3, 1, 3, 1, 1), "padding 3 on 3x3 (col2im)"},
      /* shapes for direct_conv.c (fp32, stride 1): 7 output channels (a block of 6 and one
       * of 1), rows of 13 (a full vector and one of 5 lanes) */
      {make(3, 16, 14, 13, 7, 3, 3, 1, 1, 1, 1), "direct: 7 channels, rows of 13"},
      /* rows of 8: a tile's two vectors in two rows; dilation 2, 2 groups of 5 channels */
      {make(3, 8, 8, 8, 10, 3, 3, 1, 2, 2, 2), "direct: rows of 8, dilation, groups"},
      /* 5x5, rows of 7 (masked in backward-filter), 9 channels (6 + 3), one sample */
      {make(1, 6, 7, 7, 9, 5, 5, 1, 2, 1, 1), "direct: 5x5, rows of 7"},
      /* no padding: backward-data's transposed convolution pads 2 (rows of 12 and 14) */
      {make(2, 4, 14, 14, 8, 3, 3, 1, 0, 1, 1), "direct: unpadded, transposed padded"},
      /* 40 rows of 5 vectors: backward-filter visits bands of rows; 7 samples of 557 KB
       * padded: two chunks of padded samples */
      {make(2, 4, 40, 40, 4, 3, 3, 1, 1, 1, 1), "direct: bands of rows"},
      {make(9, 32, 64, 64, 4, 3, 3, 1, 1, 1, 1), "direct: two chunks"},
      /* for the AVX-512 tiles (vectors of 16, 4 per tile, 4 channels per filter tile): rows
       * of 16 (one vector) and of 20 (a full vector and one of 4 lanes), 11 rows (a tile of 3
       * vectors at a plane's end), 9 channels out (filter tiles of 4, 4 and 1) */
      {make(2, 5, 11, 16, 9, 3, 3, 1, 1, 1, 1), "direct: rows of 16, 11 rows"},
      {make(3, 4, 6, 20, 6, 3, 3, 1, 1, 1, 1), "direct: rows of 20"},
      /* padding 3: the zeros above, between and below the rows run over several vectors */
      {make(3, 3, 12, 12, 6, 7, 7, 1, 3, 1, 1), "direct: 7x7, padding 3, rows of 12"},
  };
  /* every shape through each CPU path where they differ: direct_conv.c with AVX-512 tiles
   * and with AVX2 tiles (as far as this CPU has them), and im2col + GEMM */
  for (int direct = GP_CPU_DIRECT_AVX512; direct >= 0; direct--) {
    if (gp_cpu_direct_conv_set(direct) != direct) continue;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
      const gp_conv2d_desc *d = &shapes[i].d;
      if (direct && !gp_cpu_direct_conv_ok(be, d, 1)) continue;    /* the same with both */
      if (d->n * d->c * d->h * d->w > 500000 && !direct) continue; /* GEMM has it covered */
      test_conv_shape(be, &shapes[i]);
    }
  }
  gp_cpu_direct_conv_set(GP_CPU_DIRECT_AVX512);
  /* the AVX-512 forward tile sums each output in the AVX2 tile's order: the same bytes (so
   * a machine's vector width never changes a forward result); rows of 16, 20 and 28 */
  if (gp_cpu_direct_conv_set(GP_CPU_DIRECT_AVX512) == GP_CPU_DIRECT_AVX512) {
    const gp_conv2d_desc wide[] = {make(2, 5, 11, 16, 9, 3, 3, 1, 1, 1, 1),
                                   make(3, 4, 6, 20, 6, 3, 3, 1, 1, 1, 1),
                                   make(2, 8, 9, 28, 7, 5, 5, 1, 2, 1, 1)};
    for (size_t i = 0; i < sizeof wide / sizeof wide[0]; i++) {
      const gp_conv2d_desc *d = &wide[i];
      const int64_t nx = d->n * d->c * d->h * d->w, nw = d->k * d->c * d->kh * d->kw;
      const int64_t ny = d->n * d->k * d->oh * d->ow;
      float *x = malloc(sizeof(float) * nx), *w = malloc(sizeof(float) * nw);
      float *bias = malloc(sizeof(float) * d->k), *y[2] = {NULL, NULL};
      fill(x, nx, 11), fill(w, nw, 12), fill(bias, d->k, 13);
      for (int v = 0; v < 2; v++) {
        y[v] = malloc(sizeof(float) * ny);
        gp_cpu_direct_conv_set(v ? GP_CPU_DIRECT_AVX2 : GP_CPU_DIRECT_AVX512);
        CHECK(gp_cpu_direct_conv_ok(be, d, 0) &&
                  be->conv2d_forward(be, d, x, w, bias, y[v]) == GP_OK,
              "direct forward %zu", i);
      }
      CHECK(memcmp(y[0], y[1], sizeof(float) * ny) == 0,
            "rows of %lld: the AVX-512 and AVX2 forwards differ", (long long)d->ow);
      free(x), free(w), free(bias), free(y[0]), free(y[1]);
    }
    gp_cpu_direct_conv_set(GP_CPU_DIRECT_AVX512);
  }
}

/* Two instances in bf16 mode, destroyed in either order, each with its own buffers (ASan
 * sees a leak or a use after free). */
static void test_instances(void) {
  gp_backend *a = NULL, *b = NULL;
  CHECK(gp_cpu_backend_create(1, &a) == GP_OK && gp_cpu_backend_create(1, &b) == GP_OK, "create");
  if (!a || !b) return;
  a->precision = b->precision = GP_PREC_BF16;
  float x[64], y[64], z[16];
  fill(x, 64, 9), fill(y, 64, 10);
  size_t before = a->mem_used;
  CHECK(a->gemm(a, 0, 0, 4, 4, 16, 1.0f, x, 16, y, 4, 0.0f, z, 4) == GP_OK, "gemm a");
  CHECK(a->mem_used >= before + 2 * 64 * sizeof(float), "the operand copies are not counted");
  CHECK(b->gemm(b, 1, 1, 4, 4, 16, 1.0f, x, 4, y, 16, 0.0f, z, 4) == GP_OK, "gemm b");
  gp_backend_destroy(a);
  CHECK(b->gemm(b, 0, 1, 4, 4, 16, 1.0f, x, 16, y, 16, 0.0f, z, 4) == GP_OK, "gemm b after a");
  gp_backend_destroy(b);
}

int main(void) {
  gp_backend *be = NULL;
  if (gp_cpu_backend_create(1, &be) != GP_OK) {
    printf("FAIL: cannot create a CPU backend: %s\n", gp_error_message());
    return 1;
  }
  CHECK(be->precision == GP_PREC_FP32, "a new instance is not fp32");
  test_rounding();
  test_gemm(be);
  test_gemm_scratch(be);
  test_conv(be);
  gp_backend_destroy(be);
  test_instances();
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
