/* CPU 2-D resizing (nearest and bilinear upsampling), a plane at a time: indices and
 * weights per output row and column once (core/resize2d.h), then gathers forward and
 * scatters backward in output order, as PyTorch's CPU kernels. */
#include <stdlib.h>
#include <string.h>

#include "core/cpu/cpu.h"
#include "core/resize2d.h"

typedef struct axis {
  int64_t *i0, *i1;
  float *l0, *l1;
} axis;

static void axis_fill(const gp_resize2d_desc *d, int64_t in, int64_t out, double factor, axis *a) {
  float scale = gp_resize_scale(in, out, factor, d->bilinear, d->align_corners);
  for (int64_t o = 0; o < out; o++) {
    if (!d->bilinear) {
      a->i0[o] = a->i1[o] = gp_resize_nearest(o, in, out, scale);
      a->l0[o] = 1.0f, a->l1[o] = 0.0f;
      continue;
    }
    float l;
    int64_t i = gp_resize_linear(o, in, scale, d->align_corners, &l);
    a->i0[o] = i, a->i1[o] = i + (i < in - 1);
    a->l0[o] = 1.0f - l, a->l1[o] = l;
  }
}

/* Both axes' tables in one allocation (freed by the caller). */
static gp_status tables(const gp_resize2d_desc *d, axis *ah, axis *aw, void **mem) {
  GP_TRY(gp_resize2d_desc_check(d));
  int64_t n = d->oh + d->ow;
  char *p = malloc((size_t)n * (2 * sizeof(int64_t) + 2 * sizeof(float)));
  if (!p) return GP_ERR(GP_ERR_NOMEM, "resize2d: out of memory for %lld indices", (long long)n);
  *mem = p;
  axis *as[2] = {ah, aw};
  int64_t len[2] = {d->oh, d->ow};
  for (int k = 0; k < 2; k++) {
    as[k]->i0 = (int64_t *)p, p += len[k] * sizeof(int64_t);
    as[k]->i1 = (int64_t *)p, p += len[k] * sizeof(int64_t);
    as[k]->l0 = (float *)p, p += len[k] * sizeof(float);
    as[k]->l1 = (float *)p, p += len[k] * sizeof(float);
  }
  axis_fill(d, d->h, d->oh, d->scale_h, ah);
  axis_fill(d, d->w, d->ow, d->scale_w, aw);
  return GP_OK;
}

typedef struct job {
  const gp_resize2d_desc *d;
  const axis *ah, *aw;
  const float *src;
  float *dst;
} job;

static gp_status fwd_planes(void *arg, int64_t p0, int64_t p1, int worker) {
  (void)worker;
  const job *j = (const job *)arg;
  const gp_resize2d_desc *d = j->d;
  for (int64_t p = p0; p < p1; p++) {
    const float *x = j->src + p * d->h * d->w;
    float *y = j->dst + p * d->oh * d->ow;
    for (int64_t oy = 0; oy < d->oh; oy++) {
      const float *r0 = x + j->ah->i0[oy] * d->w, *r1 = x + j->ah->i1[oy] * d->w;
      const float h0 = j->ah->l0[oy], h1 = j->ah->l1[oy];
      float *yr = y + oy * d->ow;
      if (!d->bilinear) {
        for (int64_t ox = 0; ox < d->ow; ox++)
          yr[ox] = r0[j->aw->i0[ox]];
        continue;
      }
      for (int64_t ox = 0; ox < d->ow; ox++) {
        const int64_t a = j->aw->i0[ox], b = j->aw->i1[ox];
        const float w0 = j->aw->l0[ox], w1 = j->aw->l1[ox];
        yr[ox] = h0 * (w0 * r0[a] + w1 * r0[b]) + h1 * (w0 * r1[a] + w1 * r1[b]);
      }
    }
  }
  return GP_OK;
}

static gp_status bwd_planes(void *arg, int64_t p0, int64_t p1, int worker) {
  (void)worker;
  const job *j = (const job *)arg;
  const gp_resize2d_desc *d = j->d;
  for (int64_t p = p0; p < p1; p++) {
    const float *g = j->src + p * d->oh * d->ow;
    float *dx = j->dst + p * d->h * d->w;
    memset(dx, 0, (size_t)(d->h * d->w) * sizeof(float));
    for (int64_t oy = 0; oy < d->oh; oy++) {
      float *r0 = dx + j->ah->i0[oy] * d->w, *r1 = dx + j->ah->i1[oy] * d->w;
      const float h0 = j->ah->l0[oy], h1 = j->ah->l1[oy];
      const float *gr = g + oy * d->ow;
      if (!d->bilinear) {
        for (int64_t ox = 0; ox < d->ow; ox++)
          r0[j->aw->i0[ox]] += gr[ox];
        continue;
      }
      for (int64_t ox = 0; ox < d->ow; ox++) {
        const int64_t a = j->aw->i0[ox], b = j->aw->i1[ox];
        const float w0 = j->aw->l0[ox], w1 = j->aw->l1[ox], v = gr[ox];
        r0[a] += h0 * w0 * v;
        r0[b] += h0 * w1 * v;
        r1[a] += h1 * w0 * v;
        r1[b] += h1 * w1 * v;
      }
    }
  }
  return GP_OK;
}

static gp_status run(gp_backend *be, const gp_resize2d_desc *d, const float *src, float *dst,
                     gp_cpu_task fn) {
  axis ah, aw;
  void *mem = NULL;
  GP_TRY(tables(d, &ah, &aw, &mem));
  job j = {d, &ah, &aw, src, dst};
  gp_status s = gp_cpu_parallel(be, d->n, fn, &j);
  free(mem);
  return s;
}

gp_status gp_cpu_resize2d_forward(gp_backend *be, const gp_resize2d_desc *d, const float *x,
                                  float *y) {
  return run(be, d, x, y, fwd_planes);
}

gp_status gp_cpu_resize2d_backward(gp_backend *be, const gp_resize2d_desc *d, const float *dy,
                                   float *dx) {
  return run(be, d, dy, dx, bwd_planes);
}
