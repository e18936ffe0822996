/* CPU permute, group norm and the element-wise losses of f32 targets (layers permute,
 * groupnorm, mse, l1, bce_with_logits): work split over rows, groups or channels, so no
 * result depends on the thread count. */
#include <math.h>
#include <string.h>

#include "core/cpu/cpu.h"
#include "core/cpu/vmath.h"
#include "core/tensor.h"

typedef float v4f __attribute__((vector_size(16)));

static inline v4f load4(const float *p) {
  v4f v;
  memcpy(&v, p, sizeof v);
  return v;
}

/* ---- permute ---- */

#define PERM_TILE 32

/* The output as outer axes (an odometer) around one of two inner loops: a row copy when the
 * last axis stays last, else a tiled transpose of the output axis that holds the input's last
 * axis (source stride 1) against the output's last axis (destination stride 1). */
typedef struct perm_args {
  int n_outer;
  int64_t odim[GP_MAX_DIMS + 1], osrc[GP_MAX_DIMS + 1], odst[GP_MAX_DIMS + 1];
  int64_t dl, sl;    /* the last output axis: extent and source stride */
  int64_t da, dst_a; /* the transposed pair's other axis: extent and destination stride */
  int64_t tiles;     /* units per outer index: tiles of da (1 for a row copy) */
  const float *x;
  float *y;
} perm_args;

/* y[r * ys + c] = x[c * xs + r] for r, c < 4: four loads, the SSE transpose, four stores
 * (the scalar loop's strided reads and writes ran at 0.5x PyTorch's time for [C, H, W] ->
 * [H, W, C]). */
static inline void transpose4(const float *x, int64_t xs, float *y, int64_t ys) {
  typedef int32_t v4i __attribute__((vector_size(16)));
  const v4f a = load4(x), b = load4(x + xs), c = load4(x + 2 * xs), d = load4(x + 3 * xs);
  const v4f ab0 = __builtin_shuffle(a, b, (v4i){0, 4, 1, 5}); /* a0 b0 a1 b1 */
  const v4f ab1 = __builtin_shuffle(a, b, (v4i){2, 6, 3, 7}); /* a2 b2 a3 b3 */
  const v4f cd0 = __builtin_shuffle(c, d, (v4i){0, 4, 1, 5});
  const v4f cd1 = __builtin_shuffle(c, d, (v4i){2, 6, 3, 7});
  const v4f r0 = __builtin_shuffle(ab0, cd0, (v4i){0, 1, 4, 5});
  const v4f r1 = __builtin_shuffle(ab0, cd0, (v4i){2, 3, 6, 7});
  const v4f r2 = __builtin_shuffle(ab1, cd1, (v4i){0, 1, 4, 5});
  const v4f r3 = __builtin_shuffle(ab1, cd1, (v4i){2, 3, 6, 7});
  memcpy(y, &r0, sizeof r0);
  memcpy(y + ys, &r1, sizeof r1);
  memcpy(y + 2 * ys, &r2, sizeof r2);
  memcpy(y + 3 * ys, &r3, sizeof r3);
}

/* The odometer is set once per part, then stepped: a division per outer axis per unit cost
 * more than copying a row of 64 floats (permute [64, 4, 64] -> [4, 64, 64] ran at 0.56x
 * PyTorch's time). */
static gp_status perm_part(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)worker;
  const perm_args *a = ctx;
  int64_t idx[GP_MAX_DIMS + 1], xs = 0, ys = 0, o = lo / a->tiles, t = lo % a->tiles;
  for (int j = a->n_outer - 1; j >= 0; j--) {
    idx[j] = o % a->odim[j];
    o /= a->odim[j];
    xs += idx[j] * a->osrc[j];
    ys += idx[j] * a->odst[j];
  }
  for (int64_t u = lo; u < hi; u++) {
    const float *restrict x = a->x + xs;
    float *restrict y = a->y + ys;
    if (a->sl == 1) {
      memcpy(y, x, (size_t)a->dl * sizeof *y);
    } else {
      const int64_t i0 = t * PERM_TILE, i1 = i0 + PERM_TILE < a->da ? i0 + PERM_TILE : a->da;
      for (int64_t l0 = 0; l0 < a->dl; l0 += PERM_TILE) {
        const int64_t l1 = l0 + PERM_TILE < a->dl ? l0 + PERM_TILE : a->dl;
        int64_t i = i0;
        for (; i + 4 <= i1; i += 4) { /* 4 x 4 blocks by shuffles, then the last columns */
          int64_t l = l0;
          for (; l + 4 <= l1; l += 4)
            transpose4(x + i + l * a->sl, a->sl, y + i * a->dst_a + l, a->dst_a);
          for (; l < l1; l++)
            for (int64_t r = 0; r < 4; r++)
              y[(i + r) * a->dst_a + l] = x[i + r + l * a->sl];
        }
        for (; i < i1; i++)
          for (int64_t l = l0; l < l1; l++)
            y[i * a->dst_a + l] = x[i + l * a->sl];
      }
    }
    if (++t < a->tiles) continue;
    t = 0;
    for (int j = a->n_outer - 1; j >= 0; j--) { /* the next outer index */
      xs += a->osrc[j];
      ys += a->odst[j];
      if (++idx[j] < a->odim[j]) break;
      idx[j] = 0;
      xs -= a->odim[j] * a->osrc[j];
      ys -= a->odim[j] * a->odst[j];
    }
  }
  return GP_OK;
}

static gp_status cpu_permute(gp_backend *be, int ndim, const int64_t *dims, const int *perm,
                             const float *x, float *y) {
  if (ndim < 1 || ndim > GP_MAX_DIMS + 1)
    return GP_ERR(GP_ERR_RUNTIME, "permute of %d axes (1 to %d)", ndim, GP_MAX_DIMS + 1);
  int64_t is[GP_MAX_DIMS + 1], os[GP_MAX_DIMS + 1], od[GP_MAX_DIMS + 1], total = 1;
  for (int j = ndim - 1; j >= 0; j--) {
    is[j] = total;
    total *= dims[j];
  }
  for (int j = 0; j < ndim; j++)
    od[j] = dims[perm[j]];
  int64_t s = 1;
  for (int j = ndim - 1; j >= 0; j--) {
    os[j] = s;
    s *= od[j];
  }
  if (total == 0) return GP_OK;
  perm_args a = {.x = x, .y = y, .dl = od[ndim - 1], .sl = is[perm[ndim - 1]], .da = 1, .tiles = 1};
  int ax = -1; /* the output axis holding the input's last */
  for (int j = 0; j < ndim; j++)
    if (perm[j] == ndim - 1) ax = j;
  if (ax != ndim - 1) {
    a.da = od[ax];
    a.dst_a = os[ax];
    a.tiles = (a.da + PERM_TILE - 1) / PERM_TILE;
  }
  for (int j = 0; j < ndim - 1; j++) {
    if (j == ax) continue;
    a.odim[a.n_outer] = od[j];
    a.osrc[a.n_outer] = is[perm[j]];
    a.odst[a.n_outer] = os[j];
    a.n_outer++;
  }
  const int64_t units = total / (a.dl * a.da) * a.tiles;
  const int64_t per_unit = a.dl * (a.da < PERM_TILE ? a.da : PERM_TILE);
  return gp_cpu_parallel_for(be, units, gp_cpu_row_grain(per_unit), perm_part, &a);
}

/* ---- group norm ---- */

typedef struct gn_args {
  int64_t n, c, inner, groups, cg; /* cg: channels per group */
  float eps;
  const float *x, *w, *b, *dy, *mean_in, *rstd_in;
  float *y, *mean, *rstd, *dx;
  double *sums; /* backward: sum(dy) and sum(dy xhat) per (sample, channel) */
} gn_args;

/* Sums over a group: 8 float lanes within chunks of GN_CHUNK values (vectors: strict IEEE
 * order keeps the compiler from splitting one accumulator), the chunks in double: a group of a
 * U-Net's first level holds 10^5 values and more. Double accumulators in the loops ran
 * 4.7x PyTorch's time. */
#define GN_CHUNK 2048

static inline float lanes8(v4f lo, v4f hi) {
  return ((lo[0] + lo[1]) + (lo[2] + lo[3])) + ((hi[0] + hi[1]) + (hi[2] + hi[3]));
}

/* sum(x - shift) and sum((x - shift)^2) */
static void gn_moments(const float *restrict x, int64_t n, float shift, double *s1, double *s2) {
  double t1 = 0.0, t2 = 0.0;
  const v4f sh = {shift, shift, shift, shift};
  for (int64_t c0 = 0; c0 < n; c0 += GN_CHUNK) {
    const int64_t c1 = c0 + GN_CHUNK < n ? c0 + GN_CHUNK : n;
    v4f a1 = {0}, b1 = {0}, a2 = {0}, b2 = {0};
    float r1 = 0.0f, r2 = 0.0f;
    int64_t k = c0;
    for (; k + 8 <= c1; k += 8) {
      const v4f d0 = load4(x + k) - sh, d1 = load4(x + k + 4) - sh;
      a1 += d0;
      b1 += d1;
      a2 += d0 * d0;
      b2 += d1 * d1;
    }
    for (; k < c1; k++) {
      const float d = x[k] - shift;
      r1 += d;
      r2 += d * d;
    }
    t1 += (double)lanes8(a1, b1) + (double)r1;
    t2 += (double)lanes8(a2, b2) + (double)r2;
  }
  *s1 = t1;
  *s2 = t2;
}

/* adds sum(dy w) to *sg and sum(dy w xhat) to *sgx, xhat = (x - mean) rs */
static void gn_dsums(const float *restrict x, const float *restrict dy, int64_t n, float w,
                     float mean, float rs, double *sg, double *sgx) {
  double t1 = 0.0, t2 = 0.0;
  const v4f vw = {w, w, w, w}, vm = {mean, mean, mean, mean}, vr = {rs, rs, rs, rs};
  for (int64_t c0 = 0; c0 < n; c0 += GN_CHUNK) {
    const int64_t c1 = c0 + GN_CHUNK < n ? c0 + GN_CHUNK : n;
    v4f a1 = {0}, b1 = {0}, a2 = {0}, b2 = {0};
    float r1 = 0.0f, r2 = 0.0f;
    int64_t k = c0;
    for (; k + 8 <= c1; k += 8) {
      const v4f g0 = load4(dy + k) * vw, g1 = load4(dy + k + 4) * vw;
      a1 += g0;
      b1 += g1;
      a2 += g0 * ((load4(x + k) - vm) * vr);
      b2 += g1 * ((load4(x + k + 4) - vm) * vr);
    }
    for (; k < c1; k++) {
      const float g = dy[k] * w;
      r1 += g;
      r2 += g * ((x[k] - mean) * rs);
    }
    t1 += (double)lanes8(a1, b1) + (double)r1;
    t2 += (double)lanes8(a2, b2) + (double)r2;
  }
  *sg += t1;
  *sgx += t2;
}

/* Rows are (sample, group): cg * inner contiguous floats. The moments are taken in one pass
 * about the row's first value, then corrected (no cancellation for data far from 0): a pass
 * for the mean and one about it, then the output, ran at 0.7x PyTorch's time. */
static gp_status gn_fwd_part(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)worker;
  const gn_args *a = ctx;
  const int64_t len = a->cg * a->inner;
  for (int64_t r = lo; r < hi; r++) {
    const float *restrict x = a->x + r * len;
    float *restrict y = a->y + r * len;
    double s1, s2;
    gn_moments(x, len, x[0], &s1, &s2);
    const double dm = s1 / (double)len; /* the mean's distance from x[0] */
    const float mean = (float)((double)x[0] + dm);
    const double var = s2 / (double)len - dm * dm;
    const float rs = (float)(1.0 / sqrt((var > 0.0 ? var : 0.0) + (double)a->eps));
    const int64_t ch0 = (r % a->groups) * a->cg;
    for (int64_t ci = 0; ci < a->cg; ci++) {
      const float w = a->w[ch0 + ci] * rs, b = a->b[ch0 + ci];
      const float *restrict xc = x + ci * a->inner;
      float *restrict yc = y + ci * a->inner;
      for (int64_t k = 0; k < a->inner; k++)
        yc[k] = (xc[k] - mean) * w + b;
    }
    a->mean[r] = mean;
    a->rstd[r] = rs;
  }
  return GP_OK;
}

/* Backward in one read of x and dy where the rows stay in cache: per (sample, group) row,
 * each channel's sum(dy) and sum(dy xhat) (kept, in double, for dw and db), then, for B,
 * dx = rstd (g - mean(g) - xhat mean(g xhat)) with g = dy w[ch], the row's means from those
 * sums. A pass for dw and db over the whole tensor, then one for dx, ran at 0.75x PyTorch's
 * time. B and W each compute the sums the same way, so B then W gives the bytes of one call. */
static gp_status gn_bwd_part(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)worker;
  const gn_args *a = ctx;
  const int64_t len = a->cg * a->inner;
  for (int64_t r = lo; r < hi; r++) {
    const float *restrict x = a->x + r * len, *restrict dy = a->dy + r * len;
    const float mean = a->mean_in[r], rs = a->rstd_in[r];
    const int64_t ch0 = (r % a->groups) * a->cg, at = (r / a->groups) * a->c + ch0;
    double sg = 0.0, sgx = 0.0;
    for (int64_t ci = 0; ci < a->cg; ci++) {
      double s1 = 0.0, s2 = 0.0;
      gn_dsums(x + ci * a->inner, dy + ci * a->inner, a->inner, 1.0f, mean, rs, &s1, &s2);
      a->sums[2 * (at + ci)] = s1;
      a->sums[2 * (at + ci) + 1] = s2;
      sg += (double)a->w[ch0 + ci] * s1;
      sgx += (double)a->w[ch0 + ci] * s2;
    }
    if (!a->dx) continue;
    const float mg = (float)(sg / (double)len), mgx = (float)(sgx / (double)len);
    float *restrict dx = a->dx + r * len;
    for (int64_t ci = 0; ci < a->cg; ci++) {
      const float w = a->w[ch0 + ci];
      const float *restrict xc = x + ci * a->inner, *restrict gc = dy + ci * a->inner;
      float *restrict dc = dx + ci * a->inner;
      for (int64_t k = 0; k < a->inner; k++)
        dc[k] = rs * (gc[k] * w - mg - (xc[k] - mean) * rs * mgx);
    }
  }
  return GP_OK;
}

static gp_status gn_check(int64_t c, int64_t groups) {
  if (groups <= 0 || c % groups)
    return GP_ERR(GP_ERR_RUNTIME, "group norm of %lld channels in %lld groups", (long long)c,
                  (long long)groups);
  return GP_OK;
}

static gp_status cpu_groupnorm_forward(gp_backend *be, int64_t n, int64_t c, int64_t inner,
                                       int64_t groups, float eps, const float *x, const float *w,
                                       const float *b, float *y, float *mean, float *rstd) {
  GP_TRY(gn_check(c, groups));
  gn_args a = {.n = n,
               .c = c,
               .inner = inner,
               .groups = groups,
               .cg = c / groups,
               .eps = eps,
               .x = x,
               .w = w,
               .b = b,
               .y = y,
               .mean = mean,
               .rstd = rstd};
  return gp_cpu_parallel_for(be, n * groups, gp_cpu_row_grain(a.cg * inner), gn_fwd_part, &a);
}

static gp_status cpu_groupnorm_backward(gp_backend *be, int64_t n, int64_t c, int64_t inner,
                                        int64_t groups, const float *x, const float *dy,
                                        const float *w, const float *mean, const float *rstd,
                                        float *dx, float *dw, float *db) {
  GP_TRY(gn_check(c, groups));
  gn_args a = {.n = n,
               .c = c,
               .inner = inner,
               .groups = groups,
               .cg = c / groups,
               .x = x,
               .dy = dy,
               .w = w,
               .mean_in = mean,
               .rstd_in = rstd,
               .dx = dx};
  GP_TRY(gp_cpu_scratch(be, (size_t)(2 * n * c) * sizeof(double), (void **)&a.sums));
  GP_TRY(gp_cpu_parallel_for(be, n * groups, gp_cpu_row_grain(a.cg * inner), gn_bwd_part, &a));
  /* dw, db per channel, over the samples in order */
  for (int64_t ch = 0; (dw || db) && ch < c; ch++) {
    double sb = 0.0, sw = 0.0;
    for (int64_t i = 0; i < n; i++) {
      sb += a.sums[2 * (i * c + ch)];
      sw += a.sums[2 * (i * c + ch) + 1];
    }
    if (dw) dw[ch] += (float)sw;
    if (db) db[ch] += (float)sb;
  }
  return GP_OK;
}

/* ---- element-wise losses ---- */

typedef struct el_args {
  gp_eltloss kind;
  float scale;
  const float *p, *t;
  float *out;
} el_args;

/* bce_with_logits on four floats at a time with vmath.h's exp and log1p: glibc's expf and
 * log1pf are calls the compiler cannot vectorize, and took 2.4x PyTorch's time. A partial
 * vector at the end goes through the same functions, so no element's value depends on where
 * the thread split falls. Where the CPU has AVX2 the 8-float blocks go first through
 * gp_cpu_bce_wide (eltwise.c), the same operations on 8 lanes: PyTorch's kernel is 8 lanes
 * wide, and at one thread ours on 4 was 0.79x its speed. */
static inline gp_v4f bce_v4(gp_v4f p, gp_v4f t) {
  const gp_v4f z = gp_v4f_splat(0.0f), ap = gp_v4f_select(p < z, -p, p);
  /* max(p, 0) - p t + log(1 + exp(-|p|)): no overflow for any p */
  return (gp_v4f_select(p > z, p, z) - p * t) + gp_v4f_log1p(gp_v4f_exp(-ap));
}

static void bce_forward(int64_t lo, int64_t hi, const float *restrict p, const float *restrict t,
                        float *restrict out) {
  int64_t i = lo + gp_cpu_bce_wide(hi - lo, p + lo, t + lo, 0.0f, 0, out + lo);
  for (; i + 4 <= hi; i += 4)
    gp_v4f_store(out + i, bce_v4(gp_v4f_load(p + i), gp_v4f_load(t + i)));
  if (i < hi)
    gp_v4f_store_part(
        out + i, bce_v4(gp_v4f_load_part(p + i, hi - i), gp_v4f_load_part(t + i, hi - i)), hi - i);
}

/* scale (sigmoid(p) - t); e^-p overflows to +inf below p = -88.7, and 1 / inf is 0 */
static inline gp_v4f bce_grad_v4(gp_v4f p, gp_v4f t, float scale) {
  return scale * (1.0f / (1.0f + gp_v4f_exp(-p)) - t);
}

static void bce_backward(int64_t lo, int64_t hi, float scale, const float *restrict p,
                         const float *restrict t, float *restrict out) {
  int64_t i = lo + gp_cpu_bce_wide(hi - lo, p + lo, t + lo, scale, 1, out + lo);
  for (; i + 4 <= hi; i += 4)
    gp_v4f_store(out + i, bce_grad_v4(gp_v4f_load(p + i), gp_v4f_load(t + i), scale));
  if (i < hi)
    gp_v4f_store_part(
        out + i,
        bce_grad_v4(gp_v4f_load_part(p + i, hi - i), gp_v4f_load_part(t + i, hi - i), scale),
        hi - i);
}

/* Locals and one loop per kind: a store through out could alias the struct's fields, and a
 * switch inside the loop kept the compiler from vectorizing (l1 ran 2x PyTorch's time). */
static gp_status el_fwd_part(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)worker;
  const el_args *a = ctx;
  const float *restrict p = a->p, *restrict t = a->t;
  float *restrict out = a->out;
  switch (a->kind) {
  case GP_ELTLOSS_MSE:
    for (int64_t i = lo; i < hi; i++)
      out[i] = (p[i] - t[i]) * (p[i] - t[i]);
    break;
  case GP_ELTLOSS_L1:
    for (int64_t i = lo; i < hi; i++)
      out[i] = fabsf(p[i] - t[i]);
    break;
  case GP_ELTLOSS_BCE_LOGITS:
    bce_forward(lo, hi, p, t, out);
    break;
  }
  return GP_OK;
}

static gp_status el_bwd_part(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)worker;
  const el_args *a = ctx;
  const float *restrict p = a->p, *restrict t = a->t;
  float *restrict out = a->out;
  const float scale = a->scale;
  switch (a->kind) {
  case GP_ELTLOSS_MSE:
    for (int64_t i = lo; i < hi; i++)
      out[i] = scale * (2.0f * (p[i] - t[i]));
    break;
  case GP_ELTLOSS_L1: /* sign(p - t), 0 where equal */
    for (int64_t i = lo; i < hi; i++) {
      const float d = p[i] - t[i];
      out[i] = scale * ((float)(d > 0.0f) - (float)(d < 0.0f));
    }
    break;
  case GP_ELTLOSS_BCE_LOGITS:
    bce_backward(lo, hi, scale, p, t, out);
    break;
  }
  return GP_OK;
}

static gp_status cpu_eltloss_forward(gp_backend *be, gp_eltloss kind, int64_t n, const float *p,
                                     const float *t, float *loss) {
  el_args a = {.kind = kind, .p = p, .t = t, .out = loss};
  return gp_cpu_parallel_for(be, n, GP_CPU_GRAIN, el_fwd_part, &a);
}

static gp_status cpu_eltloss_backward(gp_backend *be, gp_eltloss kind, int64_t n, float scale,
                                      const float *p, const float *t, float *dp) {
  el_args a = {.kind = kind, .scale = scale, .p = p, .t = t, .out = dp};
  return gp_cpu_parallel_for(be, n, GP_CPU_GRAIN, el_bwd_part, &a);
}

void gp_cpu_install_shapes(gp_backend *be) {
  be->permute = cpu_permute;
  be->groupnorm_forward = cpu_groupnorm_forward;
  be->groupnorm_backward = cpu_groupnorm_backward;
  be->eltloss_forward = cpu_eltloss_forward;
  be->eltloss_backward = cpu_eltloss_backward;
}
