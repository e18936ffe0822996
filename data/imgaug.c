/* RandomResizedCrop / Resize + CenterCrop geometry and the antialiased bilinear resampler.
 * The resampler follows PIL's ImagingResample: output pixel i of an axis is centred at
 * in0 + (i + 0.5) * scale in source coordinates, and takes the source pixels within
 * max(scale, 1) of it with triangle weights, renormalized over the taps that exist. */
#include "data/imgaug.h"

#include <math.h>
#include <stdlib.h>

#include "core/rng.h"

#define MAX_OUT 8192

static double unif(gp_rng *r) {
  return (double)(gp_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

gp_rrc gp_rrc_draw(uint64_t seed, int64_t epoch, int64_t sample, int w, int h, double scale_min,
                   double scale_max, double ratio_min, double ratio_max) {
  gp_rng r;
  uint64_t key = gp_hash_combine(gp_hash_str(seed, "random-resized-crop"), (uint64_t)epoch);
  gp_rng_seed(&r, gp_hash_combine(key, (uint64_t)sample));
  gp_rrc c = {0, 0, w, h, 0};
  double area = (double)w * h, lr0 = log(ratio_min), lr1 = log(ratio_max);
  int found = 0;
  for (int attempt = 0; attempt < 10 && !found; attempt++) {
    double target = area * (scale_min + (scale_max - scale_min) * unif(&r));
    double aspect = exp(lr0 + (lr1 - lr0) * unif(&r));
    /* rint rounds half to even, as Python's round() */
    double cw = rint(sqrt(target * aspect)), ch = rint(sqrt(target / aspect));
    if (cw > 0 && cw <= w && ch > 0 && ch <= h) {
      c.w = (int)cw;
      c.h = (int)ch;
      c.y = (int)gp_rng_below(&r, (uint64_t)(h - c.h + 1));
      c.x = (int)gp_rng_below(&r, (uint64_t)(w - c.w + 1));
      found = 1;
    }
  }
  if (!found) {
    double in_ratio = (double)w / h;
    if (in_ratio < ratio_min) {
      c.w = w;
      c.h = (int)rint(w / ratio_min);
    } else if (in_ratio > ratio_max) {
      c.h = h;
      c.w = (int)rint(h * ratio_max);
    }
    if (c.w < 1) c.w = 1;
    if (c.h < 1) c.h = 1;
    c.x = (w - c.w) / 2;
    c.y = (h - c.h) / 2;
  }
  c.flip = (int)gp_rng_below(&r, 2);
  return c;
}

gp_rect gp_eval_rect(int w, int h, int resize, int crop) {
  /* torchvision: new_long = int(new_short * long / short); CenterCrop offsets round(). */
  int nw = resize, nh = resize;
  if (w < h) nh = (int)((double)resize * h / w);
  if (w > h) nw = (int)((double)resize * w / h);
  double sx = (double)w / nw, sy = (double)h / nh;
  gp_rect r;
  r.x = rint((nw - crop) / 2.0) * sx;
  r.y = rint((nh - crop) / 2.0) * sy;
  r.w = crop * sx;
  r.h = crop * sy;
  r.clip = 0;
  return r;
}

/* Taps of one axis: output i reads src[first[i] .. first[i] + count[i]) with weights
 * w[i * k ..]; the taps stay in [lo, hi). */
typedef struct axis {
  int k;
  int *first, *count;
  float *w;
} axis;

static void make_axis(axis *a, double in0, double len, int lo, int hi, int out) {
  double scale = len / out, fs = scale > 1 ? scale : 1, support = fs;
  for (int i = 0; i < out; i++) {
    double c = in0 + (i + 0.5) * scale;
    int x0 = (int)floor(c - support + 0.5), x1 = (int)floor(c + support + 0.5);
    if (x0 < lo) x0 = lo;
    if (x1 > hi) x1 = hi;
    if (x1 - x0 > a->k) x1 = x0 + a->k;
    float *w = a->w + (size_t)i * a->k;
    double sum = 0;
    for (int x = x0; x < x1; x++) {
      double t = fabs((x - c + 0.5) / fs);
      w[x - x0] = t < 1 ? (float)(1 - t) : 0.0f;
      sum += w[x - x0];
    }
    if (!(sum > 0)) { /* no tap in reach (a rectangle at the very edge): nearest pixel */
      x0 = (int)floor(c);
      x0 = x0 < lo ? lo : x0 >= hi ? hi - 1 : x0;
      x1 = x0 + 1;
      w[0] = 1;
      sum = 1;
    }
    for (int x = 0; x < x1 - x0; x++)
      w[x] = (float)(w[x] / sum);
    a->first[i] = x0;
    a->count[i] = x1 - x0;
  }
}

static int taps_for(double len, int out) {
  double s = len / out;
  return 2 * (int)ceil(s > 1 ? s : 1) + 1;
}

gp_status gp_image_crop_resize(const gp_image *src, gp_rect r, int out_w, int out_h, int flip,
                               const float mean[3], const float std[3], float *dst) {
  const int W = src->w, H = src->h;
  double eps = 1e-6 * (W > H ? W : H);
  if (W <= 0 || H <= 0 || !src->px || out_w <= 0 || out_h <= 0 || out_w > MAX_OUT ||
      out_h > MAX_OUT || !(r.w > 0) || !(r.h > 0) || !(r.x >= -eps) || !(r.y >= -eps) ||
      !(r.x + r.w <= W + eps) || !(r.y + r.h <= H + eps))
    return GP_ERR(GP_ERR_RUNTIME, "crop %.2f,%.2f %.2fx%.2f to %dx%d outside a %dx%d image", r.x,
                  r.y, r.w, r.h, out_w, out_h, W, H);
  int xlo = 0, xhi = W, ylo = 0, yhi = H;
  if (r.clip) {
    xlo = (int)floor(r.x + eps);
    ylo = (int)floor(r.y + eps);
    xhi = (int)ceil(r.x + r.w - eps);
    yhi = (int)ceil(r.y + r.h - eps);
    xlo = xlo < 0 ? 0 : xlo;
    ylo = ylo < 0 ? 0 : ylo;
    xhi = xhi > W ? W : xhi <= xlo ? xlo + 1 : xhi;
    yhi = yhi > H ? H : yhi <= ylo ? ylo + 1 : yhi;
  }
  axis ax = {taps_for(r.w, out_w), NULL, NULL, NULL}, ay = {taps_for(r.h, out_h), NULL, NULL, NULL};
  /* The rows the vertical taps can reach bound the intermediate image. */
  int row_span = (int)ceil(r.h) + 2 * ay.k + 2;
  if (row_span > yhi - ylo) row_span = yhi - ylo;
  size_t n_int = 2 * (size_t)(out_w + out_h);
  size_t n_flt = (size_t)out_w * ax.k + (size_t)out_h * ay.k + (size_t)row_span * out_w * 3 +
                 (size_t)out_w * 3;
  void *mem = malloc(n_int * sizeof(int) + n_flt * sizeof(float));
  if (!mem) return GP_ERR(GP_ERR_NOMEM, "out of memory resizing to %dx%d", out_w, out_h);
  float *fp = (float *)mem;
  ax.w = fp;
  ay.w = ax.w + (size_t)out_w * ax.k;
  float *tmp = ay.w + (size_t)out_h * ay.k;
  float *acc = tmp + (size_t)row_span * out_w * 3;
  int *ip = (int *)(acc + (size_t)out_w * 3);
  ax.first = ip;
  ax.count = ax.first + out_w;
  ay.first = ax.count + out_w;
  ay.count = ay.first + out_h;
  make_axis(&ax, r.x, r.w, xlo, xhi, out_w);
  make_axis(&ay, r.y, r.h, ylo, yhi, out_h);
  int y0 = ay.first[0], y1 = y0;
  for (int i = 0; i < out_h; i++) {
    if (ay.first[i] < y0) y0 = ay.first[i];
    if (ay.first[i] + ay.count[i] > y1) y1 = ay.first[i] + ay.count[i];
  }
  if (y1 - y0 > row_span) { /* cannot happen with the bound above; refuse rather than overrun */
    free(mem);
    return GP_ERR(GP_ERR_RUNTIME, "resize: %d rows needed, %d planned", y1 - y0, row_span);
  }
  /* Horizontal pass over the rows needed: tmp[y - y0][x][c]. */
  for (int y = y0; y < y1; y++) {
    const uint8_t *s = src->px + (size_t)y * W * 3;
    float *t = tmp + (size_t)(y - y0) * out_w * 3;
    for (int i = 0; i < out_w; i++) {
      const float *w = ax.w + (size_t)i * ax.k;
      const uint8_t *p = s + (size_t)ax.first[i] * 3;
      float a0 = 0, a1 = 0, a2 = 0;
      for (int k = 0; k < ax.count[i]; k++, p += 3) {
        a0 += w[k] * p[0];
        a1 += w[k] * p[1];
        a2 += w[k] * p[2];
      }
      t[3 * i] = a0;
      t[3 * i + 1] = a1;
      t[3 * i + 2] = a2;
    }
  }
  /* Vertical pass, then normalize, mirror and scatter into the planes. */
  float sc[3], of[3];
  for (int c = 0; c < 3; c++) {
    sc[c] = 1.0f / (255.0f * std[c]);
    of[c] = -mean[c] / std[c];
  }
  const size_t plane = (size_t)out_w * out_h, n3 = (size_t)out_w * 3;
  for (int j = 0; j < out_h; j++) {
    const float *w = ay.w + (size_t)j * ay.k;
    const float *t = tmp + (size_t)(ay.first[j] - y0) * n3;
    for (size_t q = 0; q < n3; q++)
      acc[q] = w[0] * t[q];
    for (int k = 1; k < ay.count[j]; k++)
      for (size_t q = 0; q < n3; q++)
        acc[q] += w[k] * t[k * n3 + q];
    for (int c = 0; c < 3; c++) {
      float *d = dst + c * plane + (size_t)j * out_w;
      for (int i = 0; i < out_w; i++)
        d[flip ? out_w - 1 - i : i] = acc[3 * i + c] * sc[c] + of[c];
    }
  }
  free(mem);
  return GP_OK;
}

gp_status gp_imagenet_sample(const uint8_t *jpg, size_t n, int train, uint64_t seed, int64_t epoch,
                             int64_t sample, int out_side, const float mean[3], const float std[3],
                             gp_image *scratch, float *out, const char *where) {
  if (out_side <= 0 || out_side > MAX_OUT)
    return GP_ERR(GP_ERR_RUNTIME, "image side %d out of range", out_side);
  int W = 0, H = 0;
  GP_TRY(gp_jpeg_info(jpg, n, where, &W, &H));
  int shorter = W < H ? W : H, min_side, flip = 0;
  gp_rect r;
  if (train) {
    gp_rrc c = gp_rrc_draw(seed, epoch, sample, W, H, 0.08, 1.0, 3.0 / 4.0, 4.0 / 3.0);
    r = (gp_rect){c.x, c.y, c.w, c.h, 1};
    flip = c.flip;
    /* Keep >= out_side decoded pixels across the crop's shorter side. */
    int crop_short = c.w < c.h ? c.w : c.h;
    min_side = (int)(((int64_t)shorter * out_side + crop_short - 1) / crop_short);
  } else {
    int resize = (out_side * 256 + 112) / 224;
    r = gp_eval_rect(W, H, resize, out_side);
    min_side = resize;
  }
  GP_TRY(gp_jpeg_decode(jpg, n, min_side, where, scratch));
  /* libjpeg maps each 8x8 block to m x m: the exact scale is m / 8 (the last output row or
   * column may cover less than a full block). */
  double s = gp_jpeg_scale_for(shorter, min_side) / 8.0;
  r.x *= s;
  r.y *= s;
  r.w *= s;
  r.h *= s;
  return gp_image_crop_resize(scratch, r, out_side, out_side, flip, mean, std, out);
}
