/* CPU convolution as im2col + GEMM, per group, over a chunk of the batch: the column matrix
 * is [C/g * kh * kw, chunk * OH * OW] and one GEMM covers the chunk. The chunk is as small
 * as keeps the GEMM efficient, so the columns stay in cache between im2col and the GEMM:
 * one sample when its output plane is large enough (then the GEMM writes NCHW directly),
 * else enough samples for MIN_GEMM_N columns, scattered to NCHW afterwards. Backward-data
 * with stride 1 is a forward convolution of dy (backward_data_transposed); other strides
 * take the column route: dcol = W^T dy, then col2im. Stride 1 in fp32 on a CPU with AVX2 and
 * FMA goes to direct_conv.c instead where that is faster (gp_cpu_direct_conv_ok).
 *
 * Threads (team.c): forward and backward-data give each worker whole chunks, with its own
 * columns, so im2col and col2im run in parallel too; with fewer chunks than workers, the
 * chunks are made larger and each GEMM is split instead. Backward-filter splits the rows of
 * the column matrix (the columns of dW): each worker builds its rows and their slice of dW.
 * No split is along a GEMM's inner dimension, but OpenBLAS's kernels round a product
 * differently depending on where it falls in their tiles, so the last bits do depend on the
 * thread count (and are the same run to run for a given count). */
#include <stdint.h>
#include <string.h>

#include "core/cpu/cpu.h"

/* Measured with single-threaded OpenBLAS sgemm (Zen, m = 16..128, k = 144..1152): the
 * efficiency reaches its plateau at about 128 columns; per-sample GEMMs over 14x14 planes
 * ran as fast as one GEMM over 64 samples, without the scatter and with the columns in L2. */
#define MIN_GEMM_N 128
/* Backward-filter's chunks: columns per GEMM (its inner dimension), whatever the thread
 * count, so the chunks that dW sums one after another do not change with it. */
#define FILTER_GEMM_K 512
/* Upper bound on the scratch of one chunk (columns plus GEMM output). */
#define CHUNK_BYTES ((int64_t)8 << 20)

typedef struct conv_geom {
  int64_t cg, kg;  /* channels per group in and out */
  int64_t ckk;     /* rows of the column matrix: cg * kh * kw */
  int64_t hw, ohw; /* input and output plane sizes */
  int64_t chunk;   /* samples per GEMM */
} conv_geom;

/* d was checked (gp_conv2d_desc_check) by the entry point that calls this. */
static gp_status geometry(const gp_conv2d_desc *d, conv_geom *g) {
  g->cg = d->c / d->groups;
  g->kg = d->k / d->groups;
  g->ckk = g->cg * d->kh * d->kw;
  g->hw = d->h * d->w;
  g->ohw = d->oh * d->ow;
  if (g->ckk + g->kg > INT64_MAX / 16 / g->ohw)
    return GP_ERR(GP_ERR_RUNTIME, "conv2d: the column matrix of one sample is too large");
  return GP_OK;
}

/* Samples per chunk for GEMMs of at least min_n columns. */
static void set_chunk(const gp_conv2d_desc *d, conv_geom *g, int64_t min_n) {
  int64_t per = (g->ckk + g->kg) * g->ohw * (int64_t)sizeof(float);
  int64_t chunk = (min_n + g->ohw - 1) / g->ohw;
  if (chunk > CHUNK_BYTES / per) chunk = CHUNK_BYTES / per;
  if (chunk > d->n) chunk = d->n;
  if (chunk < 1) chunk = 1;
  g->chunk = chunk;
}

/* Forward and backward-data over chunks: either each worker takes whole chunks (the GEMMs on
 * its own thread), or, with fewer chunks than workers, chunks for all workers' columns and
 * one worker walking them with split GEMMs. */
typedef struct conv_job {
  gp_backend *be;
  const gp_conv2d_desc *d;
  conv_geom g;
  int split_gemm;
  int64_t chunks;
  const float *x, *w, *bias, *dy;
  float *y, *dx;
  float *lead;        /* the caller's floats at the scratch's start (job_plan's lead) */
  float *scratch;     /* workers' columns and GEMM outputs, per_worker floats each */
  int64_t per_worker; /* (ckk + kg) * chunk * ohw */
} conv_job;

/* The scratch holds `lead` floats for the caller first (64-byte aligned), then the workers'. */
static gp_status job_plan(gp_backend *be, const gp_conv2d_desc *d, int64_t lead, conv_job *j) {
  j->be = be;
  j->d = d;
  GP_TRY(geometry(d, &j->g));
  set_chunk(d, &j->g, MIN_GEMM_N);
  j->chunks = (d->n + j->g.chunk - 1) / j->g.chunk;
  int workers = gp_cpu_workers(be, j->chunks);
  if (workers < be->threads && gp_cpu_workers(be, be->threads) > 1) {
    /* Too few chunks to go round: larger ones, walked by one worker, each GEMM split. */
    set_chunk(d, &j->g, MIN_GEMM_N * be->threads);
    j->chunks = (d->n + j->g.chunk - 1) / j->g.chunk;
    j->split_gemm = 1;
    workers = 1;
  }
  j->per_worker = (j->g.ckk + j->g.kg) * j->g.chunk * j->g.ohw;
  lead = (lead + 15) & ~(int64_t)15;
  GP_TRY(gp_cpu_scratch(be, (size_t)(lead + j->per_worker * workers) * sizeof(float),
                        (void **)&j->lead));
  j->scratch = j->lead + lead;
  return GP_OK;
}

static gp_status job_gemm(const conv_job *j, int worker, int trans_a, int trans_b, int64_t m,
                          int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                          int64_t ldb, float *c, int64_t ldc) {
  if (j->split_gemm)
    return gp_cpu_gemm(j->be, trans_a, trans_b, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
  return gp_cpu_gemm_serial(j->be, worker, trans_a, trans_b, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c,
                            ldc);
}

/* Worker w's columns and GEMM output; chunk c's first sample and sample count. */
static void job_chunk(const conv_job *j, int worker, int64_t c, float **col, float **buf,
                      int64_t *s0, int64_t *ns) {
  *col = j->scratch + worker * j->per_worker;
  *buf = *col + j->g.ckk * j->g.chunk * j->g.ohw;
  *s0 = c * j->g.chunk;
  *ns = j->d->n - *s0 < j->g.chunk ? j->d->n - *s0 : j->g.chunk;
}

static gp_status job_run(conv_job *j, gp_cpu_task fn) {
  if (j->split_gemm) return fn(j, 0, j->chunks, 0);
  return gp_cpu_parallel(j->be, j->chunks, fn, j);
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

/* Rows [r0, r1) of the column matrix for sample s (xs: its group's first channel) into col,
 * whose row stride is ld; sample s's columns start at s * ohw. A row is one (channel, tap). */
static void im2col_rows(const gp_conv2d_desc *d, const conv_geom *g, int64_t s, int64_t r0,
                        int64_t r1, const float *restrict xs, float *restrict col, int64_t ld) {
  const int64_t ow = d->ow, kk = d->kh * d->kw;
  const int block = is_block(d);
  for (int64_t r = r0; r < r1; r++) {
    const int64_t ci = r / kk, a = r % kk / d->kw, b = r % d->kw;
    const float *xp = xs + ci * g->hw;
    float *row = col + r * ld + s * g->ohw;
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

/* Rows [r0, r1) of the columns of samples [0, ns) of group grp (x points at the first sample
 * of the chunk). */
static void im2col(const gp_conv2d_desc *d, const conv_geom *g, int64_t ns, int64_t grp, int64_t r0,
                   int64_t r1, const float *x, float *col, int64_t ld) {
  for (int64_t s = 0; s < ns; s++)
    im2col_rows(d, g, s, r0, r1, x + (s * d->c + grp * g->cg) * g->hw, col, ld);
}

/* The adjoint of im2col: dx += col scattered back (dx of the chunk must be zeroed first).
 * Only strides other than 1 come here (stride 1 takes backward_data_transposed). */
static void col2im(const gp_conv2d_desc *d, const conv_geom *g, int64_t ns, int64_t grp,
                   const float *restrict col, int64_t ld, float *restrict dx) {
  const int64_t ow = d->ow;
  for (int64_t s = 0; s < ns; s++) {
    float *xs = dx + (s * d->c + grp * g->cg) * g->hw;
    for (int64_t ci = 0; ci < g->cg; ci++) {
      float *xp = xs + ci * g->hw;
      for (int64_t a = 0; a < d->kh; a++)
        for (int64_t b = 0; b < d->kw; b++) {
          const float *row = col + ((ci * d->kh + a) * d->kw + b) * ld + s * g->ohw;
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

static gp_status forward_chunks(void *ctx, int64_t lo, int64_t hi, int worker) {
  const conv_job *j = ctx;
  const gp_conv2d_desc *d = j->d;
  const conv_geom *g = &j->g;
  const int64_t ld = g->chunk * g->ohw;
  for (int64_t c = lo; c < hi; c++) {
    float *col, *buf;
    int64_t s0, ns;
    job_chunk(j, worker, c, &col, &buf, &s0, &ns);
    const float *xs = j->x + s0 * d->c * g->hw;
    float *ys = j->y + s0 * d->k * g->ohw;
    for (int64_t grp = 0; grp < d->groups; grp++) {
      const float *wg = j->w + grp * g->kg * g->ckk;
      im2col(d, g, ns, grp, 0, g->ckk, xs, col, ld);
      /* With one sample the GEMM's rows are already the output planes: no scatter. */
      if (ns == 1) {
        float *yg = ys + grp * g->kg * g->ohw;
        GP_TRY(job_gemm(j, worker, 0, 0, g->kg, g->ohw, g->ckk, wg, g->ckk, col, ld, yg, g->ohw));
        if (j->bias) GP_TRY(gp_cpu_bias_add(j->be, 1, g->kg, g->ohw, j->bias + grp * g->kg, yg));
        continue;
      }
      GP_TRY(job_gemm(j, worker, 0, 0, g->kg, ns * g->ohw, g->ckk, wg, g->ckk, col, ld, buf, ld));
      scatter_out(d, g, ns, grp, buf, ld, j->bias, ys);
    }
  }
  return GP_OK;
}

gp_status gp_cpu_conv2d_forward_unrounded(gp_backend *be, const gp_conv2d_desc *d, const float *x,
                                          const float *w, const float *bias, float *y) {
  conv_job j = {.x = x, .w = w, .bias = bias, .y = y};
  GP_TRY(gp_conv2d_desc_check(d));
  if (d->n == 0) return GP_OK;
  if (gp_cpu_direct_conv_ok(be, d, 0)) return gp_cpu_direct_conv_forward(be, d, x, w, bias, y);
  GP_TRY(job_plan(be, d, 0, &j));
  return job_run(&j, forward_chunks);
}

static gp_status backward_data_chunks(void *ctx, int64_t lo, int64_t hi, int worker) {
  const conv_job *j = ctx;
  const gp_conv2d_desc *d = j->d;
  const conv_geom *g = &j->g;
  const int64_t ld = g->chunk * g->ohw;
  for (int64_t c = lo; c < hi; c++) {
    float *col, *buf;
    int64_t s0, ns;
    job_chunk(j, worker, c, &col, &buf, &s0, &ns);
    const float *dys = j->dy + s0 * d->k * g->ohw;
    float *dxs = j->dx + s0 * d->c * g->hw;
    memset(dxs, 0, (size_t)(ns * d->c * g->hw) * sizeof(float));
    for (int64_t grp = 0; grp < d->groups; grp++) {
      const float *dyg = buf;
      int64_t ldy = ld;
      if (ns == 1) {
        dyg = dys + grp * g->kg * g->ohw; /* already [kg, ohw] */
        ldy = g->ohw;
      } else {
        gather_dy(d, g, ns, grp, dys, buf, ld);
      }
      /* dcol[ckk, ns * ohw] = W_g^T dY_g */
      GP_TRY(job_gemm(j, worker, 1, 0, g->ckk, ns * g->ohw, g->kg, j->w + grp * g->kg * g->ckk,
                      g->ckk, dyg, ldy, col, ld));
      col2im(d, g, ns, grp, col, ld, dxs);
    }
  }
  return GP_OK;
}

/* With stride 1, backward-data is the forward convolution of dy with the filters transposed
 * (in and out channels swapped within each group, taps flipped) and the complementary
 * padding dilation * (kernel - 1) - padding, whose output is exactly the input's size. Its GEMM
 * runs over K/groups * kh * kw instead of K/groups and writes dx itself, where the column
 * route writes a matrix kh * kw times the input's size and scatters it back with col2im:
 * 1.47x faster at 16 and 32 channels on 3x3 kernels (2-core Zen VM), equal at 64. */
static int transposable(const gp_conv2d_desc *d) {
  return d->sh == 1 && d->sw == 1 && d->ph <= d->dh * (d->kh - 1) && d->pw <= d->dw * (d->kw - 1);
}

static gp_status backward_data_transposed(gp_backend *be, const gp_conv2d_desc *d, const float *dy,
                                          const float *w, float *dx) {
  const gp_conv2d_desc t = {.n = d->n,
                            .c = d->k,
                            .h = d->oh,
                            .w = d->ow,
                            .k = d->c,
                            .oh = d->h,
                            .ow = d->w,
                            .kh = d->kh,
                            .kw = d->kw,
                            .sh = 1,
                            .sw = 1,
                            .ph = d->dh * (d->kh - 1) - d->ph,
                            .pw = d->dw * (d->kw - 1) - d->pw,
                            .dh = d->dh,
                            .dw = d->dw,
                            .groups = d->groups};
  if (gp_cpu_direct_conv_ok(be, &t, 0)) return gp_cpu_direct_conv_transposed(be, &t, dy, w, dx);
  const int64_t cg = d->c / d->groups, kg = d->k / d->groups, kk = d->kh * d->kw;
  conv_job j = {.x = dy, .y = dx};
  GP_TRY(job_plan(be, &t, d->k * cg * kk, &j));
  /* wt[grp*cg + ci][ko][tap] = w[grp*kg + ko][ci][kk - 1 - tap] */
  float *wt = j.lead;
  for (int64_t grp = 0; grp < d->groups; grp++)
    for (int64_t ko = 0; ko < kg; ko++)
      for (int64_t ci = 0; ci < cg; ci++) {
        const float *src = w + ((grp * kg + ko) * cg + ci) * kk;
        float *dst = wt + ((grp * cg + ci) * kg + ko) * kk;
        for (int64_t tap = 0; tap < kk; tap++)
          dst[tap] = src[kk - 1 - tap];
      }
  j.w = wt;
  return job_run(&j, forward_chunks);
}

gp_status gp_cpu_conv2d_backward_data_unrounded(gp_backend *be, const gp_conv2d_desc *d,
                                                const float *dy, const float *w, float *dx) {
  conv_job j = {.dy = dy, .w = w, .dx = dx};
  GP_TRY(gp_conv2d_desc_check(d));
  if (d->n == 0) return GP_OK;
  if (transposable(d)) return backward_data_transposed(be, d, dy, w, dx);
  GP_TRY(job_plan(be, d, 0, &j));
  return job_run(&j, backward_data_chunks);
}

/* One chunk and group of backward-filter, split by rows of the column matrix into `parts`
 * parts of whole 16-row units. */
typedef struct filter_job {
  gp_backend *be;
  const gp_conv2d_desc *d;
  const conv_geom *g;
  int64_t ns, grp, ld, ldy, parts;
  const float *xs, *dyg;
  float *col, *dw;
} filter_job;

static gp_status filter_rows(void *ctx, int64_t lo, int64_t hi, int worker) {
  const filter_job *f = ctx;
  const conv_geom *g = f->g;
  /* split points on multiples of 16 rows */
  const int64_t units = (g->ckk + 15) / 16;
  int64_t r0 = units * lo / f->parts * 16, r1 = units * hi / f->parts * 16;
  if (r1 > g->ckk) r1 = g->ckk;
  if (r1 <= r0) return GP_OK;
  im2col(f->d, g, f->ns, f->grp, r0, r1, f->xs, f->col, f->ld);
  /* dW_g[kg, r0:r1] += dY_g col[r0:r1]^T */
  return gp_cpu_gemm_serial(f->be, worker, 0, 1, g->kg, r1 - r0, f->ns * g->ohw, 1.0f, f->dyg,
                            f->ldy, f->col + r0 * f->ld, f->ld, 1.0f,
                            f->dw + f->grp * g->kg * g->ckk + r0, g->ckk);
}

gp_status gp_cpu_conv2d_backward_filter_unrounded(gp_backend *be, const gp_conv2d_desc *d,
                                                  const float *x, const float *dy, float *dw,
                                                  float *dbias) {
  conv_geom g = {0};
  GP_TRY(gp_conv2d_desc_check(d));
  GP_TRY(geometry(d, &g));
  if (d->n == 0) return GP_OK;
  if (gp_cpu_direct_conv_ok(be, d, 1)) {
    GP_TRY(gp_cpu_direct_conv_filter(be, d, x, dy, dw));
    return dbias ? gp_cpu_bias_grad(be, d->n, d->k, g.ohw, dy, dbias) : GP_OK;
  }
  set_chunk(d, &g, FILTER_GEMM_K);
  const int64_t ld = g.chunk * g.ohw;
  float *col, *buf;
  GP_TRY(gp_cpu_scratch(be, (size_t)((g.ckk + g.kg) * ld) * sizeof(float), (void **)&col));
  buf = col + g.ckk * ld;
  for (int64_t s0 = 0; s0 < d->n; s0 += g.chunk) {
    int64_t ns = d->n - s0 < g.chunk ? d->n - s0 : g.chunk;
    const float *dys = dy + s0 * d->k * g.ohw;
    for (int64_t grp = 0; grp < d->groups; grp++) {
      filter_job f = {be, d, &g, ns, grp, ld, ld, 1, x + s0 * d->c * g.hw, buf, col, dw};
      if (ns == 1) {
        f.dyg = dys + grp * g.kg * g.ohw;
        f.ldy = g.ohw;
      } else {
        gather_dy(d, &g, ns, grp, dys, buf, ld);
      }
      /* parts with at least 2^19 multiply-adds each, and at most a part per row */
      int64_t macs = g.kg * g.ckk * ns * g.ohw;
      f.parts = macs >> 19 < (g.ckk + 15) / 16 ? macs >> 19 : (g.ckk + 15) / 16;
      if (f.parts < 1) f.parts = 1;
      if (f.parts > gp_cpu_max_parts(be)) f.parts = gp_cpu_max_parts(be);
      GP_TRY(gp_cpu_parallel(be, f.parts, filter_rows, &f));
    }
  }
  if (dbias) GP_TRY(gp_cpu_bias_grad(be, d->n, d->k, g.ohw, dy, dbias));
  return GP_OK;
}

/* The table's entries: in bf16 mode the result is rounded too (bf16.c). */
gp_status gp_cpu_conv2d_forward(gp_backend *be, const gp_conv2d_desc *d, const float *x,
                                const float *w, const float *bias, float *y) {
  if (be->precision != GP_PREC_FP32) return gp_cpu_bf16_conv2d_forward(be, d, x, w, bias, y);
  return gp_cpu_conv2d_forward_unrounded(be, d, x, w, bias, y);
}

gp_status gp_cpu_conv2d_backward_data(gp_backend *be, const gp_conv2d_desc *d, const float *dy,
                                      const float *w, float *dx) {
  if (be->precision != GP_PREC_FP32) return gp_cpu_bf16_conv2d_backward_data(be, d, dy, w, dx);
  return gp_cpu_conv2d_backward_data_unrounded(be, d, dy, w, dx);
}

gp_status gp_cpu_conv2d_backward_filter(gp_backend *be, const gp_conv2d_desc *d, const float *x,
                                        const float *dy, float *dw, float *dbias) {
  /* BF16_MIXED: operands rounded (by the GEMMs), dw not rounded, so M changes nothing */
  if (be->precision == GP_PREC_BF16)
    return gp_cpu_bf16_conv2d_backward_filter(be, d, x, dy, dw, dbias);
  return gp_cpu_conv2d_backward_filter_unrounded(be, d, x, dy, dw, dbias);
}
