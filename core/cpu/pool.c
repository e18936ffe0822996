/* CPU 2-D max and average pooling over NCHW, one plane at a time. Padding never wins a max
 * (it is -inf, as in PyTorch); for average it counts in the divisor only when count_pad. */
#include <math.h>
#include <string.h>

#include "core/cpu/cpu.h"
#include "core/cpu/vmath.h"

/* Whether v, coming after u in the window, takes its place as max_plane's scan would: v is
 * larger, or v is a NaN and u is not (the first NaN wins). */
static inline int max_takes(float v, float u) {
  return !(v <= u) && u == u;
}

/* max_takes on four lanes: all ones where v takes u's place. */
static inline gp_v4i max_takes4(gp_v4f v, gp_v4f u) {
  return ~(v <= u) & (u == u);
}

/* The even and the odd lanes of the eight floats p, q. */
static inline gp_v4f evens(gp_v4f p, gp_v4f q) {
  return __builtin_shufflevector(p, q, 0, 2, 4, 6);
}

static inline gp_v4f odds(gp_v4f p, gp_v4f q) {
  return __builtin_shufflevector(p, q, 1, 3, 5, 7);
}

/* The window of output (oy, ox) clipped to the input: rows [*y0, *y1), columns [*x0, *x1). */
static void window(const gp_pool2d_desc *d, int64_t oy, int64_t ox, int64_t *y0, int64_t *y1,
                   int64_t *x0, int64_t *x1) {
  *y0 = oy * d->sh - d->ph, *y1 = *y0 + d->kh;
  *x0 = ox * d->sw - d->pw, *x1 = *x0 + d->kw;
  if (*y0 < 0) *y0 = 0;
  if (*y1 > d->h) *y1 = d->h;
  if (*x0 < 0) *x0 = 0;
  if (*x1 > d->w) *x1 = d->w;
}

/* The outputs of row oy whose window lies inside the input: [*a, *b), empty where the row's
 * window is clipped above or below. */
static void inside(const gp_pool2d_desc *d, int64_t oy, int64_t *a, int64_t *b) {
  const int64_t y0 = oy * d->sh - d->ph, last = d->w - d->kw + d->pw; /* last x0 + pw */
  *a = *b = 0;
  if (y0 < 0 || y0 + d->kh > d->h || last < 0) return;
  *a = (d->pw + d->sw - 1) / d->sw;
  *b = last / d->sw + 1;
  if (*b > d->ow) *b = d->ow;
  if (*a > *b) *a = *b;
}

/* Where four outputs from ox on are computed, outputs before b only: the last group of a row
 * (at least four long) overlaps the one before it instead of leaving a scalar tail. Each output
 * is computed alone, so those written twice get the same bits twice. */
static inline int64_t last4(int64_t ox, int64_t b) {
  return ox + 4 > b ? b - 4 : ox;
}

/* Four floats sw apart. */
static inline gp_v4f load_strided(const float *p, int64_t sw) {
  return sw == 1 ? gp_v4f_load(p) : (gp_v4f){p[0], p[sw], p[2 * sw], p[3 * sw]};
}

/* One output of max pooling, its window scanned in row-major order: the first maximum wins,
 * and a NaN (so a diverged input stays visible downstream, as in PyTorch), the first one. */
static void max_one(const gp_pool2d_desc *d, const float *restrict x, int64_t oy, int64_t ox,
                    float *restrict y, int32_t *restrict am) {
  int64_t y0, y1, x0, x1;
  window(d, oy, ox, &y0, &y1, &x0, &x1);
  float best = -INFINITY;
  int64_t at = -1;
  for (int64_t iy = y0; iy < y1; iy++)
    for (int64_t ix = x0; ix < x1; ix++) {
      float v = x[iy * d->w + ix];
      if (v > best || (at < 0) || isnan(v)) {
        best = v;
        at = iy * d->w + ix;
        if (isnan(v)) goto done;
      }
    }
done:
  y[oy * d->ow + ox] = at < 0 ? 0.0f : best;
  am[oy * d->ow + ox] = (int32_t)at;
}

/* Any window: four outputs at a time where their windows lie inside the input (the scan of
 * max_one as blends: max_takes is the same rule), the clipped ones one at a time. */
static void max_plane(const gp_pool2d_desc *d, const float *restrict x, float *restrict y,
                      int32_t *restrict am) {
  const int64_t w = d->w, sw = d->sw;
  const gp_v4i lane = {0, (int32_t)sw, (int32_t)(2 * sw), (int32_t)(3 * sw)};
  for (int64_t oy = 0; oy < d->oh; oy++) {
    int64_t a, b, ox = 0;
    inside(d, oy, &a, &b);
    for (; ox < a; ox++)
      max_one(d, x, oy, ox, y, am);
    for (; b - a >= 4 && ox < b; ox += 4) {
      ox = last4(ox, b);
      const int64_t at0 = (oy * d->sh - d->ph) * w + ox * sw - d->pw;
      gp_v4f best = load_strided(x + at0, sw);
      gp_v4i idx = lane + (int32_t)at0;
      for (int64_t ky = 0; ky < d->kh; ky++)
        for (int64_t kx = ky ? 0 : 1; kx < d->kw; kx++) {
          const int64_t at = at0 + ky * w + kx;
          const gp_v4f v = load_strided(x + at, sw);
          const gp_v4i t = max_takes4(v, best);
          best = gp_v4f_select(t, v, best);
          idx = ((lane + (int32_t)at) & t) | (idx & ~t);
        }
      gp_v4f_store(y + oy * d->ow + ox, best);
      memcpy(am + oy * d->ow + ox, &idx, sizeof idx);
    }
    for (; ox < d->ow; ox++)
      max_one(d, x, oy, ox, y, am);
  }
}

/* The common 2x2 stride-2 window without padding: the same answer as max_plane, four windows
 * at a time (each row's pairs split into left and right cells by shuffles, the two-step
 * comparison as blends), rows shorter than four one output at a time. An index is the left cell's
 * plus 1 (right) and w (lower): a mask of all ones is -1. */
static void max_plane_2x2(const gp_pool2d_desc *d, const float *restrict x, float *restrict y,
                          int32_t *restrict am) {
  const int64_t w = d->w, ow = d->ow;
  for (int64_t oy = 0; oy < d->oh; oy++) {
    const float *r0 = x + 2 * oy * w, *r1 = r0 + w;
    float *yo = y + oy * ow;
    int32_t *ao = am + oy * ow;
    int64_t ox = 0;
    for (; ow >= 4 && ox < ow; ox += 4) {
      ox = last4(ox, ow);
      const int64_t i = 2 * ox;
      const gp_v4f p0 = gp_v4f_load(r0 + i), p1 = gp_v4f_load(r0 + i + 4);
      const gp_v4f q0 = gp_v4f_load(r1 + i), q1 = gp_v4f_load(r1 + i + 4);
      const gp_v4f a = evens(p0, p1), b = odds(p0, p1), c = evens(q0, q1), e = odds(q0, q1);
      const gp_v4i ia = (gp_v4i){0, 2, 4, 6} + (int32_t)(2 * oy * w + i);
      const gp_v4i t1 = max_takes4(b, a), t2 = max_takes4(e, c);
      const gp_v4f m1 = gp_v4f_select(t1, b, a), m2 = gp_v4f_select(t2, e, c);
      const gp_v4i j1 = ia - t1, j2 = ia + (int32_t)w - t2;
      const gp_v4i t = max_takes4(m2, m1);
      gp_v4f_store(yo + ox, gp_v4f_select(t, m2, m1));
      const gp_v4i j = (j2 & t) | (j1 & ~t);
      memcpy(ao + ox, &j, sizeof j);
    }
    for (; ox < ow; ox++) {
      const int64_t i = 2 * ox;
      float a = r0[i], b = r0[i + 1], c = r1[i], e = r1[i + 1];
      int32_t ia = (int32_t)(2 * oy * w + i);
      int32_t ib = ia + 1, ic = ia + (int32_t)w, ie = ic + 1;
      const int t1 = max_takes(b, a), t2 = max_takes(e, c);
      float m1 = t1 ? b : a, m2 = t2 ? e : c;
      int32_t j1 = t1 ? ib : ia, j2 = t2 ? ie : ic;
      const int t = max_takes(m2, m1);
      yo[ox] = t ? m2 : m1;
      ao[ox] = t ? j2 : j1;
    }
  }
}

static int is_2x2(const gp_pool2d_desc *d) {
  return d->kh == 2 && d->kw == 2 && d->sh == 2 && d->sw == 2 && d->ph == 0 && d->pw == 0;
}

/* Each window's gradient to the cell its argmax names, 0 to the other three: four windows at a
 * time (a cell's value is g where the argmax equals its index, interleaved back into rows). */
static void max_back_2x2(const gp_pool2d_desc *d, const float *restrict dy,
                         const int32_t *restrict am, float *restrict dx) {
  const int64_t w = d->w, ow = d->ow;
  const gp_v4f zero = gp_v4f_splat(0.0f);
  for (int64_t oy = 0; oy < d->oh; oy++) {
    float *r0 = dx + 2 * oy * w, *r1 = r0 + w;
    const float *go = dy + oy * ow;
    const int32_t *ao = am + oy * ow;
    int64_t ox = 0;
    for (; ow >= 4 && ox < ow; ox += 4) {
      ox = last4(ox, ow);
      const int64_t i = 2 * ox;
      const gp_v4f g = gp_v4f_load(go + ox);
      gp_v4i m;
      memcpy(&m, ao + ox, sizeof m);
      const gp_v4i ia = (gp_v4i){0, 2, 4, 6} + (int32_t)(2 * oy * w + i);
      const gp_v4i ic = ia + (int32_t)w;
      const gp_v4f ga = gp_v4f_select(m == ia, g, zero), gb = gp_v4f_select(m == ia + 1, g, zero);
      const gp_v4f gc = gp_v4f_select(m == ic, g, zero), ge = gp_v4f_select(m == ic + 1, g, zero);
      gp_v4f_store(r0 + i, __builtin_shufflevector(ga, gb, 0, 4, 1, 5));
      gp_v4f_store(r0 + i + 4, __builtin_shufflevector(ga, gb, 2, 6, 3, 7));
      gp_v4f_store(r1 + i, __builtin_shufflevector(gc, ge, 0, 4, 1, 5));
      gp_v4f_store(r1 + i + 4, __builtin_shufflevector(gc, ge, 2, 6, 3, 7));
    }
    for (; ox < ow; ox++) {
      const int64_t i = 2 * ox, r = ao[ox] - (2 * oy * w + i);
      const int down = r >= w, right = (down ? r - w : r) != 0;
      const float g = go[ox];
      const float g0 = down ? 0.0f : g, g1 = down ? g : 0.0f;
      r0[i] = right ? 0.0f : g0;
      r0[i + 1] = right ? g0 : 0.0f;
      r1[i] = right ? 0.0f : g1;
      r1[i + 1] = right ? g1 : 0.0f;
    }
  }
}

/* One window that is the whole plane (global average pooling). */
static int whole_plane(const gp_pool2d_desc *d) {
  return d->oh == 1 && d->ow == 1 && d->kh == d->h && d->kw == d->w && d->ph == 0 && d->pw == 0;
}

static float avg_one(const gp_pool2d_desc *d, const float *restrict x, int64_t oy, int64_t ox) {
  int64_t y0, y1, x0, x1;
  window(d, oy, ox, &y0, &y1, &x0, &x1);
  float s = 0.0f;
  for (int64_t iy = y0; iy < y1; iy++)
    for (int64_t ix = x0; ix < x1; ix++)
      s += x[iy * d->w + ix];
  const int64_t cnt = (y1 - y0) * (x1 - x0);
  return d->count_pad ? s * (1.0f / (float)(d->kh * d->kw)) : (cnt > 0 ? s / (float)cnt : 0.0f);
}

/* Four outputs at a time where their windows lie inside the input, each lane summing its window
 * in avg_one's order (the same bits), the clipped ones one at a time. */
static void avg_plane(const gp_pool2d_desc *d, const float *restrict x, float *restrict y) {
  const float full = 1.0f / (float)(d->kh * d->kw);
  if (whole_plane(d)) { /* 8 partial sums, not one chain of dependent adds */
    const float s = gp_cpu_rowsum(x, d->h * d->w);
    y[0] = d->count_pad ? s * full : s / (float)(d->h * d->w);
    return;
  }
  const int64_t w = d->w, sw = d->sw;
  for (int64_t oy = 0; oy < d->oh; oy++) {
    int64_t a, b, ox = 0;
    inside(d, oy, &a, &b);
    for (; ox < a; ox++)
      y[oy * d->ow + ox] = avg_one(d, x, oy, ox);
    for (; b - a >= 4 && ox < b; ox += 4) {
      ox = last4(ox, b);
      const int64_t at0 = (oy * d->sh - d->ph) * w + ox * sw - d->pw;
      gp_v4f s = gp_v4f_splat(0.0f);
      for (int64_t ky = 0; ky < d->kh; ky++)
        for (int64_t kx = 0; kx < d->kw; kx++)
          s += load_strided(x + at0 + ky * w + kx, sw);
      gp_v4f_store(y + oy * d->ow + ox, d->count_pad ? s * full : s / (float)(d->kh * d->kw));
    }
    for (; ox < d->ow; ox++)
      y[oy * d->ow + ox] = avg_one(d, x, oy, ox);
  }
}

/* Both directions are split over the instance's threads by planes, which are independent. */
typedef struct pool_args {
  gp_pool kind;
  const gp_pool2d_desc *d;
  const float *in;
  float *out;
  int32_t *argmax_out;
  const int32_t *argmax;
  float *grads; /* average pooling's backward: one plane of output gradients per worker */
} pool_args;

static gp_status forward_part(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)worker;
  const pool_args *a = ctx;
  const gp_pool2d_desc *d = a->d;
  const int64_t hw = d->h * d->w, ohw = d->oh * d->ow;
  const int fast = is_2x2(d);
  for (int64_t p = lo; p < hi; p++) {
    if (a->kind == GP_POOL_AVG)
      avg_plane(d, a->in + p * hw, a->out + p * ohw);
    else if (fast)
      max_plane_2x2(d, a->in + p * hw, a->out + p * ohw, a->argmax_out + p * ohw);
    else
      max_plane(d, a->in + p * hw, a->out + p * ohw, a->argmax_out + p * ohw);
  }
  return GP_OK;
}

static int64_t plane_grain(const gp_pool2d_desc *d) {
  return GP_CPU_GRAIN / (d->h * d->w > 0 ? d->h * d->w : 1) + 1;
}

gp_status gp_cpu_pool2d_forward(gp_backend *be, gp_pool kind, const gp_pool2d_desc *d,
                                const float *x, float *y, int32_t *argmax) {
  GP_TRY(gp_pool2d_desc_check(d));
  if (kind == GP_POOL_MAX && !argmax)
    return GP_ERR(GP_ERR_RUNTIME, "max pooling needs an argmax buffer");
  if (kind != GP_POOL_MAX && kind != GP_POOL_AVG)
    return GP_ERR(GP_ERR_RUNTIME, "unknown pooling kind %d", (int)kind);
  pool_args a = {.kind = kind, .d = d, .in = x, .out = y, .argmax_out = argmax};
  return gp_cpu_parallel_for(be, d->n * d->c, plane_grain(d), forward_part, &a);
}

/* Output (oy, ox)'s gradient divided as its forward divided: by the window's size (count_pad)
 * or by the cells it counted; 0 for a window that counted none (it covers no cell). */
static float avg_grad_one(const gp_pool2d_desc *d, float dy, int64_t oy, int64_t ox) {
  int64_t y0, y1, x0, x1;
  window(d, oy, ox, &y0, &y1, &x0, &x1);
  const int64_t cnt = (y1 - y0) * (x1 - x0);
  if (cnt <= 0) return 0.0f;
  return dy * (d->count_pad ? 1.0f / (float)(d->kh * d->kw) : 1.0f / (float)cnt);
}

/* Every output's: where its window lies inside the input it counts kh * kw cells, either way. */
static void avg_grads(const gp_pool2d_desc *d, const float *restrict dyp, float *restrict g) {
  const float full = 1.0f / (float)(d->kh * d->kw);
  for (int64_t oy = 0; oy < d->oh; oy++) {
    const float *restrict dr = dyp + oy * d->ow;
    float *restrict gr = g + oy * d->ow;
    int64_t a, b;
    inside(d, oy, &a, &b);
    for (int64_t ox = 0; ox < a; ox++)
      gr[ox] = avg_grad_one(d, dr[ox], oy, ox);
    for (int64_t ox = a; ox < b; ox++)
      gr[ox] = dr[ox] * full;
    for (int64_t ox = b; ox < d->ow; ox++)
      gr[ox] = avg_grad_one(d, dr[ox], oy, ox);
  }
}

/* The outputs whose windows cover input position i along one axis (size k, stride s, padding p,
 * n outputs): [*lo, *hi]. */
static void covering(int64_t i, int64_t k, int64_t s, int64_t p, int64_t n, int64_t *lo,
                     int64_t *hi) {
  const int64_t first = i + p - k + 1;
  *lo = first <= 0 ? 0 : (first + s - 1) / s;
  *hi = (i + p) / s;
  if (*hi > n - 1) *hi = n - 1;
}

/* One input cell's gradient: the gradients of the outputs covering it, added from 0 in the
 * outputs' row-major order, the order in which a scatter over the outputs would add them. */
static float avg_gather(const gp_pool2d_desc *d, const float *restrict g, int64_t iy, int64_t ix) {
  int64_t oy0, oy1, ox0, ox1;
  covering(iy, d->kh, d->sh, d->ph, d->oh, &oy0, &oy1);
  covering(ix, d->kw, d->sw, d->pw, d->ow, &ox0, &ox1);
  float s = 0.0f;
  for (int64_t oy = oy0; oy <= oy1; oy++)
    for (int64_t ox = ox0; ox <= ox1; ox++)
      s += g[oy * d->ow + ox];
  return s;
}

/* With stride 1 along the rows, every cell gathers (no clearing pass, no read-modify-write of
 * dx), and the cells whose covering outputs are all inside the row go four at a time: lane l's
 * outputs are lane 0's shifted by l, so each is one unaligned load per (output row, tap), in
 * avg_gather's order (the same bits). Larger strides scatter (avg_back_scatter): there most
 * cells are covered by few outputs or none, and a gather per cell cost ResNet-56's 1x1
 * stride-2 subsampling twice the time. */
static void avg_back_plane(const gp_pool2d_desc *d, const float *restrict g, float *restrict dxp) {
  const int64_t w = d->w, ow = d->ow, kw = d->kw, pw = d->pw;
  /* cells [a, b) of a row with stride 1: ix + pw - kw + 1 >= 0 and ix + pw <= ow - 1 */
  int64_t a = 0, b = 0;
  if (d->sw == 1) {
    a = kw - 1 - pw > 0 ? kw - 1 - pw : 0;
    b = ow - pw < w ? ow - pw : w;
    if (b < a) b = a;
  }
  for (int64_t iy = 0; iy < d->h; iy++) {
    float *restrict row = dxp + iy * w;
    int64_t oy0, oy1, ix = 0;
    covering(iy, d->kh, d->sh, d->ph, d->oh, &oy0, &oy1);
    for (; ix < a; ix++)
      row[ix] = avg_gather(d, g, iy, ix);
    for (; b - a >= 4 && ix < b; ix += 4) {
      ix = last4(ix, b);
      gp_v4f s = gp_v4f_splat(0.0f);
      for (int64_t oy = oy0; oy <= oy1; oy++) {
        const float *gr = g + oy * ow + ix + pw - kw + 1;
        for (int64_t t = 0; t < kw; t++)
          s += gp_v4f_load(gr + t);
      }
      gp_v4f_store(row + ix, s);
    }
    for (; ix < w; ix++)
      row[ix] = avg_gather(d, g, iy, ix);
  }
}

/* Each output's share added to the cells of its window, the outputs in row-major order. */
static void avg_back_scatter(const gp_pool2d_desc *d, const float *restrict dyp,
                             float *restrict dxp) {
  for (int64_t oy = 0; oy < d->oh; oy++)
    for (int64_t ox = 0; ox < d->ow; ox++) {
      int64_t y0, y1, x0, x1;
      window(d, oy, ox, &y0, &y1, &x0, &x1);
      const float g = avg_grad_one(d, dyp[oy * d->ow + ox], oy, ox);
      for (int64_t iy = y0; iy < y1; iy++)
        for (int64_t ix = x0; ix < x1; ix++)
          dxp[iy * d->w + ix] += g;
    }
}

/* The 2x2 windows tile the plane: every input cell is written once, no clearing pass. */
static int tiles_2x2(const gp_pool2d_desc *d) {
  return is_2x2(d) && d->h == 2 * d->oh && d->w == 2 * d->ow;
}

static gp_status backward_part(void *ctx, int64_t lo, int64_t hi, int worker) {
  const pool_args *a = ctx;
  const gp_pool2d_desc *d = a->d;
  const int64_t hw = d->h * d->w, ohw = d->oh * d->ow;
  const int tiles = a->kind == GP_POOL_MAX && tiles_2x2(d);
  for (int64_t p = lo; p < hi; p++) {
    float *restrict dxp = a->out + p * hw;
    const float *restrict dyp = a->in + p * ohw;
    if (tiles) {
      max_back_2x2(d, dyp, a->argmax + p * ohw, dxp);
      continue;
    }
    if (a->kind == GP_POOL_AVG && whole_plane(d)) {
      const float g = dyp[0] * (d->count_pad ? 1.0f / (float)(d->kh * d->kw) : 1.0f / (float)hw);
      for (int64_t i = 0; i < hw; i++)
        dxp[i] = g;
      continue;
    }
    if (a->kind == GP_POOL_AVG && d->sw == 1) {
      float *restrict g = a->grads + (int64_t)worker * ohw;
      avg_grads(d, dyp, g);
      avg_back_plane(d, g, dxp);
      continue;
    }
    memset(dxp, 0, (size_t)hw * sizeof(float));
    if (a->kind == GP_POOL_AVG) {
      avg_back_scatter(d, dyp, dxp);
      continue;
    }
    const int32_t *restrict ap = a->argmax + p * ohw;
    for (int64_t i = 0; i < ohw; i++)
      if (ap[i] >= 0) dxp[ap[i]] += dyp[i];
  }
  return GP_OK;
}

gp_status gp_cpu_pool2d_backward(gp_backend *be, gp_pool kind, const gp_pool2d_desc *d,
                                 const float *dy, const int32_t *argmax, float *dx) {
  GP_TRY(gp_pool2d_desc_check(d));
  if (kind == GP_POOL_MAX && !argmax)
    return GP_ERR(GP_ERR_RUNTIME, "max pooling needs an argmax buffer");
  if (kind != GP_POOL_MAX && kind != GP_POOL_AVG)
    return GP_ERR(GP_ERR_RUNTIME, "unknown pooling kind %d", (int)kind);
  pool_args a = {.kind = kind, .d = d, .in = dy, .out = dx, .argmax = argmax};
  if (kind == GP_POOL_AVG && !whole_plane(d) && d->sw == 1)
    GP_TRY(gp_cpu_scratch(be, (size_t)(be->threads * d->oh * d->ow) * sizeof(float),
                          (void **)&a.grads));
  return gp_cpu_parallel_for(be, d->n * d->c, plane_grain(d), backward_part, &a);
}
