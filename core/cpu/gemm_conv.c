/* CPU convolution as im2col + GEMM, per group, over a chunk of the batch: the column matrix
 * is [C/g * kh * kw, chunk * OH * OW] and one GEMM covers the chunk. The chunk is as small
 * as keeps the GEMM efficient, so the columns stay in cache between im2col and the GEMM:
 * one sample when its output plane is large enough (then the GEMM writes NCHW directly),
 * else enough samples for MIN_GEMM_N columns, scattered to NCHW afterwards. */
#include <stdint.h>
#include <string.h>

#include "core/cpu/cpu.h"

/* Measured with single-threaded OpenBLAS sgemm (Zen, m = 16..128, k = 144..1152): the
 * efficiency reaches its plateau at about 128 columns; per-sample GEMMs over 14x14 planes
 * ran as fast as one GEMM over 64 samples, without the scatter and with the columns in L2. */
#define MIN_GEMM_N 128
/* Upper bound on the scratch of one chunk (columns plus GEMM output). */
#define CHUNK_BYTES ((int64_t)8 << 20)

typedef struct conv_geom {
  int64_t cg, kg;  /* channels per group in and out */
  int64_t ckk;     /* rows of the column matrix: cg * kh * kw */
  int64_t hw, ohw; /* input and output plane sizes */
  int64_t chunk;   /* samples per GEMM */
} conv_geom;

static gp_status check_desc(const gp_backend *be, const gp_conv2d_desc *d, conv_geom *g) {
  GP_TRY(gp_conv2d_desc_check(d));
  g->cg = d->c / d->groups;
  g->kg = d->k / d->groups;
  g->ckk = g->cg * d->kh * d->kw;
  g->hw = d->h * d->w;
  g->ohw = d->oh * d->ow;
  if (g->ckk + g->kg > INT64_MAX / 16 / g->ohw)
    return GP_ERR(GP_ERR_RUNTIME, "conv2d: the column matrix of one sample is too large");
  int64_t per = (g->ckk + g->kg) * g->ohw * (int64_t)sizeof(float);
  /* With several BLAS threads each needs its share of columns for the split to pay off. */
  const int64_t min_n = MIN_GEMM_N * (be->threads > 1 ? be->threads : 1);
  int64_t chunk = (min_n + g->ohw - 1) / g->ohw;
  if (chunk > CHUNK_BYTES / per) chunk = CHUNK_BYTES / per;
  if (chunk > d->n) chunk = d->n;
  if (chunk < 1) chunk = 1;
  g->chunk = chunk;
  return GP_OK;
}

/* First and one-past-last output column ox whose input column ox * s + off is inside
 * [0, w). */
static void valid_range(int64_t s, int64_t off, int64_t w, int64_t ow, int64_t *lo, int64_t *hi) {
  int64_t a = off >= 0 ? 0 : (-off + s - 1) / s;
  int64_t b = off > w - 1 ? 0 : (w - 1 - off) / s + 1;
  if (a > ow) a = ow;
  if (b > ow) b = ow;
  if (b < a) b = a;
  *lo = a;
  *hi = b;
}

/* Stride 1 with an output as wide as the input (the common "same" convolution): for one
 * kernel tap, the valid output rows read consecutive input rows with the same row stride, so
 * the tap's whole column row is one shifted block of the input plane. The block is clipped to
 * the plane; the columns that fell outside the input (ox < lo, ox >= hi) are fixed up. */
static int is_block(const gp_conv2d_desc *d) {
  return d->sh == 1 && d->sw == 1 && d->ow == d->w;
}

/* Valid output rows [*oy0, *oy1) of tap row a and the block's start in the input plane. */
static int64_t block_rows(const gp_conv2d_desc *d, int64_t a, int64_t xoff, int64_t *oy0,
                          int64_t *oy1) {
  int64_t yoff = a * d->dh - d->ph;
  int64_t r0 = yoff < 0 ? -yoff : 0, r1 = d->h - yoff;
  if (r1 > d->oh) r1 = d->oh;
  if (r1 < r0) r1 = r0;
  *oy0 = r0;
  *oy1 = r1;
  return (r0 + yoff) * d->w + xoff;
}

static void im2col_tap_block(const gp_conv2d_desc *d, int64_t a, int64_t b,
                             const float *restrict xp, float *restrict row) {
  const int64_t ow = d->ow, hw = d->h * d->w, xoff = b * d->dw - d->pw;
  int64_t oy0, oy1, lo, hi;
  int64_t st = block_rows(d, a, xoff, &oy0, &oy1);
  valid_range(1, xoff, d->w, ow, &lo, &hi);
  if (oy0 > 0) memset(row, 0, (size_t)(oy0 * ow) * sizeof(float));
  if (oy1 < d->oh) memset(row + oy1 * ow, 0, (size_t)((d->oh - oy1) * ow) * sizeof(float));
  int64_t k0 = 0, k1 = (oy1 - oy0) * ow;
  if (st + k0 < 0) k0 = -st;
  if (st + k1 > hw) k1 = hw - st;
  float *dst = row + oy0 * ow;
  if (k1 > k0) memcpy(dst + k0, xp + st + k0, (size_t)(k1 - k0) * sizeof(float));
  if (lo > 0 || hi < ow)
    for (int64_t oy = oy0; oy < oy1; oy++) {
      float *restrict r = row + oy * ow;
      for (int64_t ox = 0; ox < lo; ox++)
        r[ox] = 0.0f;
      for (int64_t ox = hi; ox < ow; ox++)
        r[ox] = 0.0f;
    }
}

/* The adjoint; clears the outside columns of `row` (scratch) so the block add is exact. */
static void col2im_tap_block(const gp_conv2d_desc *d, int64_t a, int64_t b, float *restrict row,
                             float *restrict xp) {
  const int64_t ow = d->ow, hw = d->h * d->w, xoff = b * d->dw - d->pw;
  int64_t oy0, oy1, lo, hi;
  int64_t st = block_rows(d, a, xoff, &oy0, &oy1);
  valid_range(1, xoff, d->w, ow, &lo, &hi);
  if (lo > 0 || hi < ow)
    for (int64_t oy = oy0; oy < oy1; oy++) {
      float *restrict r = row + oy * ow;
      for (int64_t ox = 0; ox < lo; ox++)
        r[ox] = 0.0f;
      for (int64_t ox = hi; ox < ow; ox++)
        r[ox] = 0.0f;
    }
  int64_t k0 = 0, k1 = (oy1 - oy0) * ow;
  if (st + k0 < 0) k0 = -st;
  if (st + k1 > hw) k1 = hw - st;
  const float *restrict src = row + oy0 * ow;
  float *restrict dst = xp + st;
  for (int64_t k = k0; k < k1; k++)
    dst[k] += src[k];
}

/* Columns of samples [0, ns) of group g (x points at the first sample of the chunk) into
 * col, whose row stride is ld = chunk * ohw. */
static void im2col(const gp_conv2d_desc *d, const conv_geom *g, int64_t ns, int64_t grp,
                   const float *restrict x, float *restrict col, int64_t ld) {
  const int64_t ow = d->ow;
  const int block = is_block(d);
  for (int64_t s = 0; s < ns; s++) {
    const float *xs = x + (s * d->c + grp * g->cg) * g->hw;
    for (int64_t ci = 0; ci < g->cg; ci++) {
      const float *xp = xs + ci * g->hw;
      for (int64_t a = 0; a < d->kh; a++)
        for (int64_t b = 0; b < d->kw; b++) {
          float *row = col + ((ci * d->kh + a) * d->kw + b) * ld + s * g->ohw;
          if (block) {
            im2col_tap_block(d, a, b, xp, row);
            continue;
          }
          int64_t xoff = b * d->dw - d->pw, lo, hi;
          valid_range(d->sw, xoff, d->w, ow, &lo, &hi);
          for (int64_t oy = 0; oy < d->oh; oy++) {
            float *restrict dst = row + oy * ow;
            int64_t iy = oy * d->sh - d->ph + a * d->dh;
            if (iy < 0 || iy >= d->h) {
              memset(dst, 0, (size_t)ow * sizeof(float));
              continue;
            }
            const float *restrict src = xp + iy * d->w;
            for (int64_t ox = 0; ox < lo; ox++)
              dst[ox] = 0.0f;
            if (d->sw == 1) {
              if (hi > lo) memcpy(dst + lo, src + lo + xoff, (size_t)(hi - lo) * sizeof(float));
            } else {
              const int64_t sw = d->sw;
              for (int64_t ox = lo; ox < hi; ox++)
                dst[ox] = src[ox * sw + xoff];
            }
            for (int64_t ox = hi; ox < ow; ox++)
              dst[ox] = 0.0f;
          }
        }
    }
  }
}

/* The adjoint of im2col: dx += col scattered back (dx of the chunk must be zeroed first).
 * col is scratch and may be modified. */
static void col2im(const gp_conv2d_desc *d, const conv_geom *g, int64_t ns, int64_t grp,
                   float *restrict col, int64_t ld, float *restrict dx) {
  const int64_t ow = d->ow;
  const int block = is_block(d);
  for (int64_t s = 0; s < ns; s++) {
    float *xs = dx + (s * d->c + grp * g->cg) * g->hw;
    for (int64_t ci = 0; ci < g->cg; ci++) {
      float *xp = xs + ci * g->hw;
      for (int64_t a = 0; a < d->kh; a++)
        for (int64_t b = 0; b < d->kw; b++) {
          float *row = col + ((ci * d->kh + a) * d->kw + b) * ld + s * g->ohw;
          if (block) {
            col2im_tap_block(d, a, b, row, xp);
            continue;
          }
          int64_t xoff = b * d->dw - d->pw, lo, hi;
          valid_range(d->sw, xoff, d->w, ow, &lo, &hi);
          for (int64_t oy = 0; oy < d->oh; oy++) {
            int64_t iy = oy * d->sh - d->ph + a * d->dh;
            if (iy < 0 || iy >= d->h) continue;
            const float *restrict src = row + oy * ow;
            float *restrict dst = xp + iy * d->w;
            if (d->sw == 1) {
              for (int64_t ox = lo; ox < hi; ox++)
                dst[ox + xoff] += src[ox];
            } else {
              const int64_t sw = d->sw;
              for (int64_t ox = lo; ox < hi; ox++)
                dst[ox * sw + xoff] += src[ox];
            }
          }
        }
    }
  }
}

/* [kg, ns * ohw] (row stride ld) <-> the group's planes of ns NCHW samples. */
static void scatter_out(const gp_conv2d_desc *d, const conv_geom *g, int64_t ns, int64_t grp,
                        const float *restrict buf, int64_t ld, const float *bias,
                        float *restrict y) {
  for (int64_t s = 0; s < ns; s++)
    for (int64_t ko = 0; ko < g->kg; ko++) {
      const float *restrict src = buf + ko * ld + s * g->ohw;
      float *restrict dst = y + (s * d->k + grp * g->kg + ko) * g->ohw;
      const float b = bias ? bias[grp * g->kg + ko] : 0.0f;
      for (int64_t i = 0; i < g->ohw; i++)
        dst[i] = src[i] + b;
    }
}

static void gather_dy(const gp_conv2d_desc *d, const conv_geom *g, int64_t ns, int64_t grp,
                      const float *restrict dy, float *restrict buf, int64_t ld) {
  for (int64_t s = 0; s < ns; s++)
    for (int64_t ko = 0; ko < g->kg; ko++)
      memcpy(buf + ko * ld + s * g->ohw, dy + (s * d->k + grp * g->kg + ko) * g->ohw,
             (size_t)g->ohw * sizeof(float));
}

gp_status gp_cpu_conv2d_forward_unrounded(gp_backend *be, const gp_conv2d_desc *d, const float *x,
                                          const float *w, const float *bias, float *y) {
  conv_geom g = {0};
  GP_TRY(check_desc(be, d, &g));
  if (d->n == 0) return GP_OK;
  const int64_t ld = g.chunk * g.ohw;
  float *col, *buf;
  GP_TRY(gp_cpu_scratch(be, (size_t)((g.ckk + g.kg) * ld) * sizeof(float), (void **)&col));
  buf = col + g.ckk * ld;
  for (int64_t s0 = 0; s0 < d->n; s0 += g.chunk) {
    int64_t ns = d->n - s0 < g.chunk ? d->n - s0 : g.chunk;
    const float *xs = x + s0 * d->c * g.hw;
    float *ys = y + s0 * d->k * g.ohw;
    for (int64_t grp = 0; grp < d->groups; grp++) {
      im2col(d, &g, ns, grp, xs, col, ld);
      /* With one sample the GEMM's rows are already the output planes: no scatter. */
      if (ns == 1) {
        float *yg = ys + grp * g.kg * g.ohw;
        GP_TRY(gp_cpu_gemm(be, 0, 0, g.kg, g.ohw, g.ckk, 1.0f, w + grp * g.kg * g.ckk, g.ckk, col,
                           ld, 0.0f, yg, g.ohw));
        if (bias) GP_TRY(gp_cpu_bias_add(be, 1, g.kg, g.ohw, bias + grp * g.kg, yg));
        continue;
      }
      GP_TRY(gp_cpu_gemm(be, 0, 0, g.kg, ns * g.ohw, g.ckk, 1.0f, w + grp * g.kg * g.ckk, g.ckk,
                         col, ld, 0.0f, buf, ld));
      scatter_out(d, &g, ns, grp, buf, ld, bias, ys);
    }
  }
  return GP_OK;
}

gp_status gp_cpu_conv2d_backward_data_unrounded(gp_backend *be, const gp_conv2d_desc *d,
                                                const float *dy, const float *w, float *dx) {
  conv_geom g = {0};
  GP_TRY(check_desc(be, d, &g));
  if (d->n == 0) return GP_OK;
  const int64_t ld = g.chunk * g.ohw;
  float *col, *buf;
  GP_TRY(gp_cpu_scratch(be, (size_t)((g.ckk + g.kg) * ld) * sizeof(float), (void **)&col));
  buf = col + g.ckk * ld;
  memset(dx, 0, (size_t)(d->n * d->c * g.hw) * sizeof(float));
  for (int64_t s0 = 0; s0 < d->n; s0 += g.chunk) {
    int64_t ns = d->n - s0 < g.chunk ? d->n - s0 : g.chunk;
    const float *dys = dy + s0 * d->k * g.ohw;
    float *dxs = dx + s0 * d->c * g.hw;
    for (int64_t grp = 0; grp < d->groups; grp++) {
      const float *dyg = buf;
      int64_t ldy = ld;
      if (ns == 1) {
        dyg = dys + grp * g.kg * g.ohw; /* already [kg, ohw] */
        ldy = g.ohw;
      } else {
        gather_dy(d, &g, ns, grp, dys, buf, ld);
      }
      /* dcol[ckk, ns * ohw] = W_g^T dY_g */
      GP_TRY(gp_cpu_gemm(be, 1, 0, g.ckk, ns * g.ohw, g.kg, 1.0f, w + grp * g.kg * g.ckk, g.ckk,
                         dyg, ldy, 0.0f, col, ld));
      col2im(d, &g, ns, grp, col, ld, dxs);
    }
  }
  return GP_OK;
}

gp_status gp_cpu_conv2d_backward_filter_unrounded(gp_backend *be, const gp_conv2d_desc *d,
                                                  const float *x, const float *dy, float *dw,
                                                  float *dbias) {
  conv_geom g = {0};
  GP_TRY(check_desc(be, d, &g));
  if (d->n == 0) return GP_OK;
  const int64_t ld = g.chunk * g.ohw;
  float *col, *buf;
  GP_TRY(gp_cpu_scratch(be, (size_t)((g.ckk + g.kg) * ld) * sizeof(float), (void **)&col));
  buf = col + g.ckk * ld;
  for (int64_t s0 = 0; s0 < d->n; s0 += g.chunk) {
    int64_t ns = d->n - s0 < g.chunk ? d->n - s0 : g.chunk;
    const float *xs = x + s0 * d->c * g.hw;
    const float *dys = dy + s0 * d->k * g.ohw;
    for (int64_t grp = 0; grp < d->groups; grp++) {
      const float *dyg = buf;
      int64_t ldy = ld;
      if (ns == 1) {
        dyg = dys + grp * g.kg * g.ohw;
        ldy = g.ohw;
      } else {
        gather_dy(d, &g, ns, grp, dys, buf, ld);
      }
      im2col(d, &g, ns, grp, xs, col, ld);
      /* dW_g[kg, ckk] += dY_g col^T */
      GP_TRY(gp_cpu_gemm(be, 0, 1, g.kg, g.ckk, ns * g.ohw, 1.0f, dyg, ldy, col, ld, 1.0f,
                         dw + grp * g.kg * g.ckk, g.ckk));
    }
  }
  if (dbias) GP_TRY(gp_cpu_bias_grad(be, d->n, d->k, g.ohw, dy, dbias));
  return GP_OK;
}

/* The table's entries: in bf16 mode the result is rounded too (bf16.c). */
gp_status gp_cpu_conv2d_forward(gp_backend *be, const gp_conv2d_desc *d, const float *x,
                                const float *w, const float *bias, float *y) {
  if (be->precision == GP_PREC_BF16) return gp_cpu_bf16_conv2d_forward(be, d, x, w, bias, y);
  return gp_cpu_conv2d_forward_unrounded(be, d, x, w, bias, y);
}

gp_status gp_cpu_conv2d_backward_data(gp_backend *be, const gp_conv2d_desc *d, const float *dy,
                                      const float *w, float *dx) {
  if (be->precision == GP_PREC_BF16) return gp_cpu_bf16_conv2d_backward_data(be, d, dy, w, dx);
  return gp_cpu_conv2d_backward_data_unrounded(be, d, dy, w, dx);
}

gp_status gp_cpu_conv2d_backward_filter(gp_backend *be, const gp_conv2d_desc *d, const float *x,
                                        const float *dy, float *dw, float *dbias) {
  if (be->precision == GP_PREC_BF16)
    return gp_cpu_bf16_conv2d_backward_filter(be, d, x, dy, dw, dbias);
  return gp_cpu_conv2d_backward_filter_unrounded(be, d, x, dy, dw, dbias);
}
