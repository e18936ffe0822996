/* core/cpu/vmath.h against libm in double: exp within 2 ulp of the correctly rounded value
 * over every float in [-87, 88] that is a multiple of 2^-12 (and a random sample of all the
 * others), its underflow, overflow, NaN and -inf; erf within 5e-7 absolute, odd, and
 * +-1 in the tails; log1p within 2 ulp on [0, +inf); and a scalar gives the bits of the same value
 * inside a vector. Then the CPU kernels built on them against double references at sizes with and
 * without a partial vector: softmax cross-entropy (with label smoothing; over a middle axis against
 * rows), GELU forward and backward, SiLU's AVX2 loops against its 4-lane ones, and count_correct's
 * argmax (first maximum, NaN, infinity), and pooling's vector paths. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/cpu/cpu.h"
#include "core/cpu/vmath.h"
#include "tests/support/check.h"

static int failures, passes;

static uint32_t bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

/* Distance in units in the last place between two finite floats of the same sign. */
static int64_t ulps(float a, float b) {
  int64_t d = (int64_t)bits(a) - (int64_t)bits(b);
  return d < 0 ? -d : d;
}

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static uint32_t next32(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng >> 16);
}

static int64_t worst_exp = 0;
static float worst_exp_at = 0.0f;
static double worst_erf = 0.0;
static float worst_erf_at = 0.0f;

static void check_exp(float x) {
  float got = gp_expf(x);
  float want = (float)exp((double)x);
  int64_t u = ulps(got, want);
  if (u > worst_exp) {
    worst_exp = u;
    worst_exp_at = x;
  }
}

static void check_erf(float x) {
  double d = fabs((double)gp_erff(x) - erf((double)x));
  if (d > worst_erf) {
    worst_erf = d;
    worst_erf_at = x;
  }
}

static float frand(void) {
  return (float)(next32() >> 8) / 16777216.0f;
}

static void check_xent(gp_backend *be, int64_t n, int64_t k, float smoothing) {
  float *z = malloc(sizeof(float) * (size_t)(n * k)), *p = malloc(sizeof(float) * (size_t)(n * k));
  float *loss = malloc(sizeof(float) * (size_t)n);
  int32_t *y = malloc(sizeof(int32_t) * (size_t)n);
  for (int64_t i = 0; i < n * k; i++)
    z[i] = 30.0f * frand() - 15.0f;
  for (int64_t i = 0; i < n; i++)
    y[i] = (int32_t)(next32() % (uint32_t)k);
  CHECK(be->softmax_xent_forward(be, n, k, smoothing, z, y, p, loss) == GP_OK, "xent %lldx%lld",
        (long long)n, (long long)k);
  double wp = 0, wl = 0;
  for (int64_t i = 0; i < n; i++) {
    const float *r = z + i * k;
    double mx = r[0], se = 0, sz = 0;
    for (int64_t j = 1; j < k; j++)
      mx = fmax(mx, r[j]);
    for (int64_t j = 0; j < k; j++) {
      se += exp(r[j] - mx);
      sz += r[j] - mx;
    }
    for (int64_t j = 0; j < k; j++)
      wp = fmax(wp, fabs(p[i * k + j] - exp(r[j] - mx) / se));
    double lse = log(se),
           want = (1 - smoothing) * -(r[y[i]] - mx - lse) + smoothing * -(sz / k - lse);
    wl = fmax(wl, fabs(loss[i] - want) / fmax(1.0, fabs(want)));
  }
  CHECK(wp < 3e-7 && wl < 3e-7,
        "xent %lldx%lld smoothing %g: probabilities off by %.3g, losses %.3g", (long long)n,
        (long long)k, (double)smoothing, wp, wl);
  free(z);
  free(p);
  free(loss);
  free(y);
}

/* The middle-axis ops (softmax_xent_axis_*) against the row ops on the same logits moved
 * classes-last: probabilities (e * inv), losses, the correct count (with a NaN logit and
 * ignored labels, -1), and the gradient, with and without smoothing, at widths that leave a
 * partial tile and a partial vector. */
static void check_xent_axis(gp_backend *be, int64_t outer, int64_t k, int64_t inner,
                            float smoothing) {
  const int64_t n = outer * inner, nk = n * k;
  float *z = malloc(sizeof(float) * (size_t)nk), *zr = malloc(sizeof(float) * (size_t)nk);
  float *e = malloc(sizeof(float) * (size_t)nk), *pr = malloc(sizeof(float) * (size_t)nk);
  float *d = malloc(sizeof(float) * (size_t)nk), *dr = malloc(sizeof(float) * (size_t)nk);
  float *inv = malloc(sizeof(float) * (size_t)n), *loss = malloc(sizeof(float) * (size_t)n);
  float *lossr = malloc(sizeof(float) * (size_t)n);
  int32_t *y = malloc(sizeof(int32_t) * (size_t)n), *raw = malloc(sizeof(int32_t) * (size_t)n);
  int32_t *yr = malloc(sizeof(int32_t) * (size_t)n);
  for (int64_t i = 0; i < nk; i++)
    z[i] = 30.0f * frand() - 15.0f;
  if (nk > 7) z[7] = NAN; /* argmax: the first NaN */
  for (int64_t i = 0; i < n; i++) {
    raw[i] = (int32_t)(next32() % (uint32_t)k);
    if (i % 5 == 3) raw[i] = -100; /* ignored */
    y[i] = raw[i] < 0 ? -1 : raw[i];
    yr[i] = raw[i] < 0 ? 0 : raw[i];
  }
  for (int64_t o = 0; o < outer; o++) /* [outer, k, inner] -> rows [outer * inner, k] */
    for (int64_t j = 0; j < k; j++)
      for (int64_t i = 0; i < inner; i++)
        zr[((o * inner) + i) * k + j] = z[(o * k + j) * inner + i];
  int64_t ok = -1, okr = -2;
  const float scale = 0.01f;
  int fine = be->softmax_xent_axis_forward(be, outer, k, inner, smoothing, z, y, raw, e, inv, loss,
                                           &ok) == GP_OK &&
             be->softmax_xent_axis_backward(be, outer, k, inner, smoothing, scale, e, inv, y, d) ==
                 GP_OK &&
             be->softmax_xent_forward(be, n, k, smoothing, zr, yr, pr, lossr) == GP_OK &&
             be->softmax_xent_backward(be, n, k, smoothing, scale, pr, yr, dr) == GP_OK &&
             be->count_correct(be, n, k, zr, raw, &okr) == GP_OK;
  double wp = 0, wl = 0, wd = 0;
  for (int64_t o = 0; fine && o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      const int64_t r = o * inner + i,
                    nan_row = nk > 7 && r == (7 / (k * inner)) * inner + 7 % inner;
      const int ignored = y[r] < 0;
      const double want_loss = ignored ? 0.0 : lossr[r];
      if (!nan_row) wl = fmax(wl, fabs(loss[r] - want_loss) / fmax(1.0, fabs(want_loss)));
      for (int64_t j = 0; j < k && !nan_row; j++) {
        const int64_t at = (o * k + j) * inner + i;
        wp = fmax(wp, fabs((double)e[at] * inv[r] - pr[r * k + j]));
        wd = fmax(wd, fabs(d[at] - (ignored ? 0.0f : dr[r * k + j])));
      }
    }
  CHECK(fine && ok == okr && wp < 3e-7 && wl < 3e-7 && wd < 3e-7 * scale,
        "xent axis [%lld, %lld, %lld] smoothing %g: correct %lld (rows: %lld); probabilities off "
        "by %.3g, losses %.3g, gradients %.3g",
        (long long)outer, (long long)k, (long long)inner, (double)smoothing, (long long)ok,
        (long long)okr, wp, wl, wd);
  free(z), free(zr), free(e), free(pr), free(d), free(dr), free(inv), free(loss), free(lossr);
  free(y), free(raw), free(yr);
}

/* The backend's permute against index arithmetic, at sizes that take its 4 x 4 shuffle blocks
 * and leave rows and columns outside them (9, 13, 7 and 37 are not multiples of 4). */
static void check_permute(gp_backend *be) {
  static const int64_t dims[4] = {2, 9, 37, 13};
  static const int perms[][4] = {{0, 2, 3, 1}, {0, 3, 1, 2}, {0, 2, 1, 3}, {1, 3, 2, 0}};
  const int64_t n = 2 * 9 * 37 * 13;
  float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
  for (int64_t i = 0; i < n; i++)
    x[i] = (float)i;
  for (size_t q = 0; q < sizeof perms / sizeof perms[0]; q++) {
    const int *pm = perms[q];
    int64_t od[4], bad = 0;
    for (int j = 0; j < 4; j++)
      od[j] = dims[pm[j]];
    int ok = be->permute(be, 4, dims, pm, x, y) == GP_OK;
    for (int64_t a = 0; ok && a < od[0]; a++)
      for (int64_t b = 0; b < od[1]; b++)
        for (int64_t c = 0; c < od[2]; c++)
          for (int64_t d = 0; d < od[3]; d++) {
            int64_t idx[4] = {0}, o[4] = {a, b, c, d};
            for (int j = 0; j < 4; j++)
              idx[pm[j]] = o[j];
            const int64_t src = ((idx[0] * dims[1] + idx[1]) * dims[2] + idx[2]) * dims[3] + idx[3];
            bad += y[((a * od[1] + b) * od[2] + c) * od[3] + d] != x[src];
          }
    CHECK(ok && bad == 0, "permute (%d, %d, %d, %d): %lld elements misplaced", pm[0], pm[1], pm[2],
          pm[3], (long long)bad);
  }
  free(x);
  free(y);
}

static int64_t worst_log1p = 0;
static float worst_log1p_at = 0.0f;

static void check_log1p(float x) {
  int64_t u = ulps(gp_log1pf(x), (float)log1p((double)x));
  if (u > worst_log1p) {
    worst_log1p = u;
    worst_log1p_at = x;
  }
}

/* A class with logit -inf: its probability is 0, its loss +inf; without smoothing every other
 * label's loss stays finite (0 * the infinite smoothing term is not added), with smoothing
 * every loss is +inf. The -inf in a full vector of four and in the tail. */
static void check_xent_neg_inf(gp_backend *be) {
  enum { K = 6 };
  for (int at = 1; at < K; at += 4)
    for (int label = 0; label < 2; label++)
      for (int smoothed = 0; smoothed < 2; smoothed++) {
        float z[K] = {0.5f, -1.0f, 2.0f, 0.25f, 1.0f, -0.5f}, p[K], loss = 0.0f;
        z[at] = -INFINITY;
        const int32_t y = label ? at : 0;
        CHECK(be->softmax_xent_forward(be, 1, K, smoothed ? 0.1f : 0.0f, z, &y, p, &loss) ==
                      GP_OK &&
                  p[at] == 0.0f,
              "xent -inf at %d: probability %g", at, (double)p[at]);
        const int want_inf = label || smoothed;
        CHECK(want_inf ? isinf(loss) && loss > 0 : isfinite(loss),
              "xent -inf at %d, label %d, smoothing %d: loss %g", at, (int)y, smoothed,
              (double)loss);
      }
}

/* GELU (erf) and the tanh GELU against double references, forward and backward.
 * erf: forward within 1e-6 of max(1, |x|) (the rational erf is 5e-7 absolute). tanh: a small
 * relative error also where v < 0, where 0.5 v (1 + tanh(u)) cancels; it grows only with |u|
 * (u is rounded to float before the exponential). */
static void check_gelu(gp_backend *be, gp_activation act, int64_t n) {
  const int tanh_form = act == GP_ACTIVATION_GELU_TANH;
  float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
  float *g = malloc(sizeof(float) * (size_t)n), *dx = malloc(sizeof(float) * (size_t)n);
  for (int64_t i = 0; i < n; i++) {
    x[i] = tanh_form ? 18.0f * frand() - 10.0f : 16.0f * frand() - 8.0f;
    g[i] = 2.0f * frand() - 1.0f;
  }
  CHECK(be->act_forward(be, act, n, x, y) == GP_OK &&
            be->act_backward(be, act, n, x, y, g, dx) == GP_OK,
        "gelu %d %lld", (int)act, (long long)n);
  const double c = sqrt(2.0 / M_PI), a = 0.044715;
  double wf = 0, wb = 0;
  for (int64_t i = 0; i < n; i++) {
    const double v = x[i];
    if (tanh_form) {
      double u = c * (v + a * v * v * v), s = 1.0 / (1.0 + exp(-2.0 * u));
      double ref = v * s, dref = g[i] * (s + 2.0 * v * c * (1.0 + 3.0 * a * v * v) * s * (1.0 - s));
      if (ref != 0.0) wf = fmax(wf, fabs(y[i] - ref) / fabs(ref) / (1.0 + 2.0 * fabs(u)));
      wb = fmax(wb, fabs(dx[i] - dref));
    } else {
      double cdf = 0.5 * (1 + erf(v / sqrt(2.0))), pdf = exp(-0.5 * v * v) / sqrt(2 * M_PI);
      wf = fmax(wf, fabs(y[i] - v * cdf) / fmax(1.0, fabs(v)));
      wb = fmax(wb, fabs(dx[i] - g[i] * (cdf + v * pdf)));
    }
  }
  CHECK(wf < 1e-6 && wb < 1e-6, "%s %lld: forward off by %.3g (%s), backward %.3g",
        tanh_form ? "gelu_tanh" : "gelu", (long long)n, wf,
        tanh_form ? "relative, per 1 + 2|u|" : "relative to max(1, |x|)", wb);
  free(x);
  free(y);
  free(g);
  free(dx);
}

static void check_argmax(gp_backend *be, int64_t n, int64_t k) {
  float *z = malloc(sizeof(float) * (size_t)(n * k));
  int32_t *y = malloc(sizeof(int32_t) * (size_t)n);
  int64_t want = 0, got = -1;
  for (int64_t i = 0; i < n; i++) {
    float *r = z + i * k;
    for (int64_t j = 0; j < k; j++)
      r[j] = (float)(next32() % 4); /* many ties: the first maximum wins */
    if (k > 3 && i % 5 == 1) r[2] = NAN;
    if (k > 3 && i % 7 == 3) r[0] = NAN;
    if (k > 3 && i % 11 == 4) r[k - 1] = INFINITY;
    int64_t best = 0; /* torch.argmax: the first NaN, else the first maximum */
    for (int64_t j = 1; j < k; j++)
      if (r[best] == r[best] && (r[j] > r[best] || r[j] != r[j])) best = j;
    y[i] = i % 2 ? (int32_t)best : (int32_t)(next32() % (uint32_t)k);
    want += y[i] == best;
  }
  CHECK(be->count_correct(be, n, k, z, y, &got) == GP_OK && got == want,
        "count_correct %lldx%lld: %lld, want %lld", (long long)n, (long long)k, (long long)got,
        (long long)want);
  free(z);
  free(y);
}

/* Max pooling (the CPU's vector paths: 2x2 stride 2, and any window four outputs at a time
 * where the windows lie inside the input, a row's last four overlapping the ones before; scalar at
 * the borders and in rows shorter than four) against a scan of each clipped window in row-major
 * order: the first maximum wins, and the first NaN; the backward puts each window's gradient on the
 * cell its argmax names (summed where windows overlap). Values from a small set (many ties), with
 * NaN, +-inf and -0. Average pooling: the same bits as that scan's sum divided as the layer does
 * (count_pad or the clipped count), and backward the same bits as adding each output's share to
 * its cells in the outputs' order (the CPU gathers them per cell, four cells at a time with
 * stride 1). */
static void check_pool(gp_backend *be, int64_t h, int64_t w, int64_t k, int64_t st, int64_t pd,
                       int count_pad) {
  const int64_t n = 2, c = 3, planes = n * c;
  const int64_t oh = (h + 2 * pd - k) / st + 1, ow = (w + 2 * pd - k) / st + 1;
  gp_pool2d_desc d = {n, c, h, w, oh, ow, k, k, st, st, pd, pd, count_pad};
  const size_t in = (size_t)(planes * h * w), on = (size_t)(planes * oh * ow);
  float *x = malloc(sizeof(float) * in), *y = malloc(sizeof(float) * on);
  float *ya = malloc(sizeof(float) * on), *dy = malloc(sizeof(float) * on);
  float *dx = malloc(sizeof(float) * in), *want_dx = calloc(in, sizeof(float));
  float *dxa = malloc(sizeof(float) * in), *want_dxa = calloc(in, sizeof(float));
  int32_t *am = malloc(sizeof(int32_t) * on);
  static const float vals[] = {0.0f, -0.0f, 1.0f, 1.0f, 2.0f, -3.0f, NAN, INFINITY, -INFINITY};
  static const float fin[] = {0.0f, -0.0f, 1.0f, 0.1f, 2.5f, -3.0f, 1e-3f, 7.0f, -0.7f};
  for (size_t i = 0; i < on; i++)
    dy[i] = (float)(i % 7 + 1);
  int bad = 0;
  for (int avg = 0; avg < 2; avg++) {
    for (size_t i = 0; i < in; i++)
      x[i] = (avg ? fin : vals)[next32() % 9];
    if (avg)
      bad |= be->pool2d_forward(be, GP_POOL_AVG, &d, x, ya, NULL) != GP_OK ||
             be->pool2d_backward(be, GP_POOL_AVG, &d, dy, NULL, dxa) != GP_OK;
    else
      bad |= be->pool2d_forward(be, GP_POOL_MAX, &d, x, y, am) != GP_OK ||
             be->pool2d_backward(be, GP_POOL_MAX, &d, dy, am, dx) != GP_OK;
    for (int64_t p = 0; p < planes && !bad; p++)
      for (int64_t oy = 0; oy < oh; oy++)
        for (int64_t ox = 0; ox < ow; ox++) {
          const float *xp = x + p * h * w;
          const int64_t o = p * oh * ow + oy * ow + ox;
          int64_t at = -1, cnt = 0;
          float sum = 0.0f;
          for (int64_t iy = oy * st - pd; iy < oy * st - pd + k; iy++)
            for (int64_t ix = ox * st - pd; ix < ox * st - pd + k; ix++) {
              if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
              const int64_t j = iy * w + ix;
              sum += xp[j], cnt++;
              if (at >= 0 && isnan(xp[at])) continue;
              if (at < 0 || xp[j] > xp[at] || isnan(xp[j])) at = j;
            }
          if (avg) {
            const float want = count_pad ? sum * (1.0f / (float)(k * k)) : sum / (float)cnt;
            bad |= bits(ya[o]) != bits(want);
            /* the backward: each output's share added to its cells in the outputs' order */
            const float g = dy[o] * (count_pad ? 1.0f / (float)(k * k) : 1.0f / (float)cnt);
            for (int64_t iy = oy * st - pd; iy < oy * st - pd + k; iy++)
              for (int64_t ix = ox * st - pd; ix < ox * st - pd + k; ix++)
                if (iy >= 0 && iy < h && ix >= 0 && ix < w) want_dxa[p * h * w + iy * w + ix] += g;
          } else {
            bad |= am[o] != at || bits(y[o]) != bits(xp[at]);
            want_dx[p * h * w + at] += dy[o];
          }
        }
  }
  for (size_t i = 0; i < in && !bad; i++)
    bad |= dx[i] != want_dx[i] || bits(dxa[i]) != bits(want_dxa[i]);
  CHECK(!bad,
        "pooling %lldx%lld, window %lld stride %lld padding %lld%s: max (forward, argmax, "
        "backward) or average differs from a scan of each window",
        (long long)h, (long long)w, (long long)k, (long long)st, (long long)pd,
        count_pad ? " count_pad" : "");
  free(x);
  free(y);
  free(ya);
  free(dy);
  free(dx);
  free(want_dx);
  free(dxa);
  free(want_dxa);
  free(am);
}

/* SiLU's 8-lane AVX2 loops (core/cpu/eltwise.c) give the bits of its 4-lane ones, forward
 * and backward, over values from -110 to 110 (exp's clamps and overflow among them) and NaN,
 * +-inf; and both are within 1e-6 relative (plus 1e-30) of x / (1 + e^-x) and its derivative
 * in double. */
static void check_silu(gp_backend *be, int64_t n) {
  float *x = malloc((size_t)n * 4), *dy = malloc((size_t)n * 4), *out[2][2];
  for (int k = 0; k < 2; k++)
    for (int j = 0; j < 2; j++)
      out[k][j] = malloc((size_t)n * 4);
  for (int64_t i = 0; i < n; i++) {
    x[i] = (float)(-110.0 + 220.0 * (double)((i * 7919) % n) / (double)n);
    dy[i] = (float)(0.5 + (double)(i % 5) * 0.25);
  }
  if (n > 10) x[3] = NAN, x[5] = INFINITY, x[9] = -INFINITY, x[10] = -88.5f;
  int ok = 1;
  for (int wide = 0; wide < 2; wide++) {
    gp_cpu_silu_avx2_set(wide);
    ok &= be->act_forward(be, GP_ACTIVATION_SILU, n, x, out[wide][0]) == GP_OK;
    ok &= be->act_backward(be, GP_ACTIVATION_SILU, n, x, NULL, dy, out[wide][1]) == GP_OK;
  }
  gp_cpu_silu_avx2_set(1);
  CHECK(ok, "silu n=%lld runs", (long long)n);
  CHECK(memcmp(out[0][0], out[1][0], (size_t)n * 4) == 0 &&
            memcmp(out[0][1], out[1][1], (size_t)n * 4) == 0,
        "silu n=%lld: the AVX2 loops give the 4-lane loops' bits", (long long)n);
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++) {
    double v = x[i], s = 1.0 / (1.0 + exp(-v)), y = v * s;
    double g = dy[i] * s * (1.0 + v * (1.0 - s));
    if (isnan(v)) {
      bad += !isnan(out[0][0][i]);
      continue;
    }
    if (isinf(v)) continue; /* inf / inf and 0 * inf: NaN, as PyTorch */
    /* the derivative's terms cancel near x = -1.28: relative to their size, not the sum's */
    double gs = dy[i] * s * (1.0 + fabs(v * (1.0 - s)));
    bad += fabs(out[0][0][i] - y) > 1e-6 * fabs(y) + 1e-30;
    bad += fabs(out[0][1][i] - g) > 1e-6 * gs + 1e-30;
  }
  CHECK(bad == 0, "silu n=%lld: %lld values off x / (1 + e^-x) and its derivative", (long long)n,
        (long long)bad);
  for (int k = 0; k < 2; k++)
    for (int j = 0; j < 2; j++)
      free(out[k][j]);
  free(x);
  free(dy);
}

/* bce_with_logits' 8-lane AVX2 loops (core/cpu/eltwise.c) give the bits of its 4-lane ones
 * (core/cpu/shapes.c), loss and gradient, over logits from -110 to 110 and NaN, +-inf, with
 * targets in [0, 1]; and both are within 1e-6 relative (plus 1e-30) of
 * max(p, 0) - p t + log(1 + e^-|p|) and scale (sigmoid(p) - t) in double. */
static void check_bce(gp_backend *be, int64_t n) {
  float *p = malloc((size_t)n * 4), *t = malloc((size_t)n * 4), *out[2][2];
  for (int k = 0; k < 2; k++)
    for (int j = 0; j < 2; j++)
      out[k][j] = malloc((size_t)n * 4);
  for (int64_t i = 0; i < n; i++) {
    p[i] = (float)(-110.0 + 220.0 * (double)((i * 7919) % n) / (double)n);
    t[i] = (float)((double)(i % 9) / 8.0);
  }
  if (n > 10) p[3] = NAN, p[5] = INFINITY, p[9] = -INFINITY, p[10] = -88.5f;
  const float scale = 1.0f / (float)n;
  int ok = 1;
  for (int wide = 0; wide < 2; wide++) {
    gp_cpu_silu_avx2_set(wide);
    ok &= be->eltloss_forward(be, GP_ELTLOSS_BCE_LOGITS, n, p, t, out[wide][0]) == GP_OK;
    ok &= be->eltloss_backward(be, GP_ELTLOSS_BCE_LOGITS, n, scale, p, t, out[wide][1]) == GP_OK;
  }
  gp_cpu_silu_avx2_set(1);
  CHECK(ok, "bce_with_logits n=%lld runs", (long long)n);
  CHECK(memcmp(out[0][0], out[1][0], (size_t)n * 4) == 0 &&
            memcmp(out[0][1], out[1][1], (size_t)n * 4) == 0,
        "bce_with_logits n=%lld: the AVX2 loops give the 4-lane loops' bits", (long long)n);
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++) {
    double v = p[i], w = t[i];
    if (isnan(v)) {
      bad += !isnan(out[1][0][i]) + !isnan(out[1][1][i]);
      continue;
    }
    if (isinf(v)) continue; /* inf - inf in the loss: NaN, as PyTorch's */
    double l = (v > 0 ? v : 0) - v * w + log1p(exp(-fabs(v)));
    double g = scale * (1.0 / (1.0 + exp(-v)) - w);
    double lm = (v > 0 ? v : 0) + fabs(v * w) + log1p(exp(-fabs(v))); /* the terms' size */
    bad += fabs(out[1][0][i] - l) > 1e-6 * lm + 1e-30;
    bad += fabs(out[1][1][i] - g) > 1e-6 * scale * (1.0 + w) + 1e-30;
  }
  CHECK(bad == 0, "bce_with_logits n=%lld: %lld values off the loss and its gradient in double",
        (long long)n, (long long)bad);
  for (int k = 0; k < 2; k++)
    for (int j = 0; j < 2; j++)
      free(out[k][j]);
  free(p);
  free(t);
}

int main(void) {
  for (int64_t i = -87 * 4096; i <= 88 * 4096; i++)
    check_exp((float)i / 4096.0f);
  for (int i = 0; i < 2000000; i++) {
    float x = -87.0f + 175.0f * (float)(next32() >> 8) / 16777216.0f;
    check_exp(x);
  }
  printf("exp: worst %lld ulp at %.9g\n", (long long)worst_exp, (double)worst_exp_at);
  CHECK(worst_exp <= 2, "exp");

  /* underflow: gradual, then 0; overflow to +inf; special values */
  CHECK(gp_expf(-87.5f) > 0.0f && gp_expf(-87.5f) < FLT_MIN, "gradual underflow");
  CHECK(fabs((double)gp_expf(-95.0f) - exp(-95.0)) <= 2.0 * 1.401298464e-45, "denormal accuracy");
  CHECK(gp_expf(-104.0f) == 0.0f && gp_expf(-1000.0f) == 0.0f && gp_expf(-INFINITY) == 0.0f,
        "underflow to 0");
  CHECK(isinf(gp_expf(89.0f)) && isinf(gp_expf(1000.0f)) && isinf(gp_expf(INFINITY)),
        "overflow to +inf");
  CHECK(gp_expf(88.7f) < INFINITY && ulps(gp_expf(88.7f), (float)exp((double)88.7f)) <= 2,
        "near the overflow");
  CHECK(gp_expf(0.0f) == 1.0f && gp_expf(-0.0f) == 1.0f, "exp(0)");
  CHECK(isnan(gp_expf(NAN)), "NaN");

  for (int64_t i = -6 * 65536; i <= 6 * 65536; i++)
    check_erf((float)i / 65536.0f);
  for (int i = 0; i < 1000000; i++)
    check_erf(-10.0f + 20.0f * (float)(next32() >> 8) / 16777216.0f);
  printf("erf: worst absolute error %.3g at %.9g\n", worst_erf, (double)worst_erf_at);
  CHECK(worst_erf <= 5e-7, "erf");
  for (int i = 0; i < 100000; i++) {
    float x = (float)(next32() >> 8) / 16777216.0f * 8.0f;
    CHECK(bits(gp_erff(-x)) == (bits(gp_erff(x)) ^ 0x80000000u), "odd");
  }
  CHECK(gp_erff(1e-45f) > 0.0f &&
            fabs((double)gp_erff(1e-20f) / (1e-20 * 1.1283791670955126) - 1) < 1e-6,
        "tiny x: erf(x) = 2x / sqrt(pi), no underflow");
  CHECK(gp_erff(10.0f) == 1.0f && gp_erff(-10.0f) == -1.0f, "tails");
  CHECK(gp_erff(INFINITY) == 1.0f && gp_erff(-INFINITY) == -1.0f, "infinities");
  CHECK(isnan(gp_erff(NAN)), "NaN");

  /* log1p (bce_with_logits' softplus) on [0, +inf): every 61st float, then special values */
  for (uint32_t b = 0; b < 0x7f800000u; b += 61) {
    float x;
    memcpy(&x, &b, sizeof x);
    check_log1p(x);
  }
  printf("log1p: worst %lld ulp at %.9g\n", (long long)worst_log1p, (double)worst_log1p_at);
  CHECK(worst_log1p <= 2, "log1p");
  CHECK(gp_log1pf(0.0f) == 0.0f && isinf(gp_log1pf(INFINITY)) && isnan(gp_log1pf(NAN)),
        "log1p of 0, +inf, NaN");

  /* every lane computes the same function: a scalar equals its value inside a vector */
  float xs[4] = {-3.25f, 0.5f, 17.0f, -0.001f};
  gp_v4f e = gp_v4f_exp(gp_v4f_load(xs)), r = gp_v4f_erf(gp_v4f_load(xs));
  for (int l = 0; l < 4; l++) {
    CHECK(bits(e[l]) == bits(gp_expf(xs[l])), "exp lane %d", l);
    CHECK(bits(r[l]) == bits(gp_erff(xs[l])), "erf lane %d", l);
  }

  gp_backend *be;
  if (gp_cpu_backend_create(2, &be) != GP_OK) return 1;
  static const int64_t ks[] = {1, 3, 5, 8, 13, 1000, 8001};
  for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
    check_xent(be, 37, ks[i], 0.0f);
    check_xent(be, 37, ks[i], 0.1f);
    check_argmax(be, 53, ks[i]);
  }
  check_xent_neg_inf(be);
  check_permute(be);
  static const int64_t axis_k[] = {1, 3, 10, 37}, axis_inner[] = {1, 5, 67, 130};
  for (size_t i = 0; i < 4; i++)
    for (size_t j = 0; j < 4; j++) {
      check_xent_axis(be, 3, axis_k[i], axis_inner[j], 0.0f);
      check_xent_axis(be, 3, axis_k[i], axis_inner[j], 0.1f);
    }
  for (int t = 0; t < 2; t++) {
    check_gelu(be, t ? GP_ACTIVATION_GELU_TANH : GP_ACTIVATION_GELU, 3);
    check_gelu(be, t ? GP_ACTIVATION_GELU_TANH : GP_ACTIVATION_GELU, 100003);
  }
  check_silu(be, 13);
  check_silu(be, 100003);
  check_bce(be, 13);
  check_bce(be, 100003);
  for (int64_t w = 2; w <= 21; w++) {
    check_pool(be, w % 3 ? 6 : 7, w, 2, 2, 0, 0);
    if (w >= 3) check_pool(be, 5 + w % 2, w, 3, 1, 1, (int)(w % 2));
    if (w >= 3) check_pool(be, 7, w, 3, 2, 1, (int)(w % 3 == 0));
  }
  check_pool(be, 9, 17, 4, 3, 2, 0);
  check_pool(be, 4, 4, 3, 1, 0, 0);
  check_pool(be, 8, 23, 5, 1, 2, 1);
  check_pool(be, 6, 13, 2, 1, 0, 0);
  be->destroy(be);
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
