/* ImageNet geometry: RandomResizedCrop draws (bounds, determinism, and their distribution
 * against statistics of torchvision's algorithm computed independently in Python), the
 * resampler against a direct non-separable evaluation of PIL's antialiased bilinear filter and
 * against hand-computed cases (constant, ramp, flip, checkers), eval rectangles worked out by
 * hand from torchvision's Resize(256) + CenterCrop(224), and gp_imagenet_sample: the DCT-scaled
 * path against a full-size decode, determinism, and two threads at once. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "data/imgaug.h"
#include "data/jpeg.h"
#include "tests/support/check.h"
#include "tests/data/jpeg_fixture.h"

static int failures, passes;

/* Tolerances (in v / 255 units unless said):
 * - resampler vs the double-precision direct reference: float accumulation (measured 1.2e-7).
 * - RRC statistics: 4 standard errors of 20000 draws (sd 0.22 area, 0.17 log-ratio).
 * - DCT-scaled vs full-size decode of the same crop: the scaled IDCT is a box-like prefilter,
 *   different from the triangle; on smooth content the mean difference is about 0.001. */
#define TOL_REF 1e-5
#define TOL_DCT_MEAN 0.004

static const float zero3[3] = {0, 0, 0}, one3[3] = {1, 1, 1};

static gp_rrc draw(int64_t s, int64_t e, int w, int h) {
  return gp_rrc_draw(42, e, s, w, h, 0.08, 1.0, 3.0 / 4.0, 4.0 / 3.0);
}

static void test_rrc(void) {
  static const struct {
    int w, h;
    double area, lr, fallback; /* means from tests/data: numpy over 400k draws */
  } ref[] = {{500, 375, 0.4332, 0.0310, 0},
             {1000, 1000, 0.4783, -0.0002, 0},
             {200, 800, 0.1921, -0.0704, 0.1217}};
  const int N = 20000;
  for (int k = 0; k < 3; k++) {
    int W = ref[k].w, H = ref[k].h, out = 0, fb = 0;
    double sa = 0, slr = 0;
    /* the fallback crop of this image: the ratio-clamped centre */
    int fw = W, fh = H;
    if ((double)W / H < 0.75) fh = (int)rint(W / 0.75);
    if ((double)W / H > 4.0 / 3) fw = (int)rint(H * 4.0 / 3);
    for (int i = 0; i < N; i++) {
      gp_rrc c = draw(i, 1, W, H);
      if (c.x < 0 || c.y < 0 || c.w < 1 || c.h < 1 || c.x + c.w > W || c.y + c.h > H) out++;
      double a = (double)c.w * c.h / ((double)W * H), r = (double)c.w / c.h;
      int is_fb = c.w == fw && c.h == fh && c.x == (W - fw) / 2 && c.y == (H - fh) / 2;
      /* Rounding the sides moves area and ratio by at most half a pixel per side. */
      double slack = 1.0 / (c.w < c.h ? c.w : c.h);
      if (!is_fb && (a < 0.08 * (1 - 2 * slack) || r < 0.75 * (1 - 2 * slack) ||
                     r > 4.0 / 3 * (1 + 2 * slack)))
        out++;
      fb += is_fb && (fw != W || fh != H);
      sa += a;
      slr += log(r);
    }
    CHECK(out == 0, "%dx%d: %d draws outside the image or the ranges", W, H, out);
    CHECK(fabs(sa / N - ref[k].area) < 4 * 0.23 / sqrt(N), "%dx%d: mean area %.4f vs %.4f", W, H,
          sa / N, ref[k].area);
    CHECK(fabs(slr / N - ref[k].lr) < 4 * 0.18 / sqrt(N), "%dx%d: mean log ratio %.4f vs %.4f", W,
          H, slr / N, ref[k].lr);
    CHECK(fabs((double)fb / N - ref[k].fallback) < 0.01, "%dx%d: fallback rate %.4f vs %.4f", W, H,
          (double)fb / N, ref[k].fallback);
  }
  /* Nothing of 8% area and ratio <= 4/3 fits in 1000x10: always the centre fallback. */
  int bad = 0;
  for (int i = 0; i < 200; i++) {
    gp_rrc c = draw(i, 0, 1000, 10);
    bad += c.w != 13 || c.h != 10 || c.x != 493 || c.y != 0;
  }
  CHECK(bad == 0, "1000x10 falls back to 13x10 at 493 (%d not)", bad);
  int same = 1, dif_s = 0, dif_e = 0, flips = 0;
  for (int i = 0; i < 1000; i++) {
    gp_rrc a = draw(i, 3, 640, 480), b = draw(i, 3, 640, 480);
    gp_rrc s = draw(i + 1, 3, 640, 480), e = draw(i, 4, 640, 480);
    same &= memcmp(&a, &b, sizeof a) == 0;
    dif_s += memcmp(&a, &s, sizeof a) != 0;
    dif_e += memcmp(&a, &e, sizeof a) != 0;
    flips += a.flip;
  }
  CHECK(same, "a draw depends only on (seed, epoch, sample)");
  CHECK(dif_s > 990 && dif_e > 990, "draws differ across samples (%d) and epochs (%d)", dif_s,
        dif_e);
  CHECK(flips > 430 && flips < 570, "flips %d of 1000", flips);
}

/* PIL's antialiased bilinear resample evaluated directly: every pixel of the bounds weighted
 * by the 2-D product of triangles, in double. Independent of the separable implementation. */
static double tri(int x, double c, double fs) {
  double t = fabs((x + 0.5 - c) / fs);
  return t < 1 ? 1 - t : 0;
}

static void ref_resize(const gp_image *s, gp_rect r, int ow, int oh, int flip, float *dst) {
  double sx = r.w / ow, sy = r.h / oh, fx = sx > 1 ? sx : 1, fy = sy > 1 ? sy : 1;
  int x0 = 0, x1 = s->w, y0 = 0, y1 = s->h;
  if (r.clip) {
    x0 = (int)floor(r.x + 1e-9), x1 = (int)ceil(r.x + r.w - 1e-9);
    y0 = (int)floor(r.y + 1e-9), y1 = (int)ceil(r.y + r.h - 1e-9);
  }
  for (int j = 0; j < oh; j++)
    for (int i = 0; i < ow; i++) {
      double cx = r.x + (i + 0.5) * sx, cy = r.y + (j + 0.5) * sy, acc[3] = {0}, wsum = 0;
      for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++) {
          double w = tri(x, cx, fx) * tri(y, cy, fy);
          wsum += w;
          for (int c = 0; c < 3; c++)
            acc[c] += w * s->px[((size_t)y * s->w + x) * 3 + c];
        }
      for (int c = 0; c < 3; c++)
        dst[(size_t)c * ow * oh + (size_t)j * ow + (flip ? ow - 1 - i : i)] =
            (float)(acc[c] / wsum / 255.0);
    }
}

static double max_diff(const float *a, const float *b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; i++)
    m = fmax(m, fabs((double)a[i] - b[i]));
  return m;
}

static void test_resize(void) {
  gp_image s = {0};
  gp_image_reserve(&s, 61, 47);
  gp_rng r;
  gp_rng_seed(&r, 5);
  for (size_t i = 0; i < (size_t)61 * 47 * 3; i++)
    s.px[i] = (uint8_t)gp_rng_below(&r, 256);
  static const struct {
    gp_rect r;
    int ow, oh, flip;
  } cases[] = {
      {{0, 0, 61, 47, 1}, 20, 15, 0},           /* downscale 3x */
      {{5, 7, 30, 20, 1}, 13, 9, 1},            /* crop, clipped, flipped */
      {{5, 7, 30, 20, 0}, 13, 9, 0},            /* same crop, filter sees neighbours */
      {{10, 3, 8, 6, 1}, 32, 24, 0},            /* upscale 4x */
      {{12.3, 4.7, 30.5, 21.25, 0}, 17, 11, 0}, /* fractional, as eval gives */
      {{0, 0, 61, 47, 1}, 61, 47, 0},           /* identity */
      {{40, 0, 21, 47, 1}, 7, 40, 1},           /* mixed: down in x, up in y */
  };
  float *got = malloc(sizeof(float) * 3 * 64 * 64), *want = malloc(sizeof(float) * 3 * 64 * 64);
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    size_t n = (size_t)3 * cases[k].ow * cases[k].oh;
    CHECK(gp_image_crop_resize(&s, cases[k].r, cases[k].ow, cases[k].oh, cases[k].flip, zero3, one3,
                               got) == GP_OK,
          "case %zu", k);
    ref_resize(&s, cases[k].r, cases[k].ow, cases[k].oh, cases[k].flip, want);
    double d = max_diff(got, want, n);
    CHECK(d < TOL_REF, "case %zu: max difference from the direct filter %.2g", k, d);
  }
  /* Identity crop returns the pixels themselves. */
  gp_image_crop_resize(&s, (gp_rect){0, 0, 61, 47, 1}, 61, 47, 0, zero3, one3, got);
  int bad = 0;
  for (int y = 0; y < 47; y++)
    for (int x = 0; x < 61; x++)
      for (int c = 0; c < 3; c++)
        bad += fabsf(got[c * 61 * 47 + y * 61 + x] * 255 - s.px[(y * 61 + x) * 3 + c]) > 1e-3f;
  CHECK(bad == 0, "identity resize changes %d values", bad);
  /* Flip mirrors exactly. */
  gp_rect fr = {3.5, 2, 40, 30, 0};
  gp_image_crop_resize(&s, fr, 16, 12, 0, zero3, one3, got);
  gp_image_crop_resize(&s, fr, 16, 12, 1, zero3, one3, want);
  bad = 0;
  for (int c = 0; c < 3; c++)
    for (int y = 0; y < 12; y++)
      for (int x = 0; x < 16; x++)
        bad += got[c * 192 + y * 16 + x] != want[c * 192 + y * 16 + 15 - x];
  CHECK(bad == 0, "flip is the exact mirror (%d differ)", bad);
  /* Constant image: constant output, normalized. */
  memset(s.px, 77, (size_t)61 * 47 * 3);
  const float mean[3] = {0.485f, 0.456f, 0.406f}, sd[3] = {0.229f, 0.224f, 0.225f};
  gp_image_crop_resize(&s, (gp_rect){1.5, 2.25, 50, 33.3, 0}, 29, 31, 1, mean, sd, got);
  double worst = 0;
  for (int c = 0; c < 3; c++)
    for (int i = 0; i < 29 * 31; i++)
      worst = fmax(worst, fabs(got[c * 29 * 31 + i] - (77 / 255.0 - mean[c]) / sd[c]));
  CHECK(worst < 1e-5, "constant stays constant (%.2g)", worst);
  /* Horizontal ramp 2x, halved: interior outputs 4i + 1 (weights 1/4 3/4 3/4 1/4). */
  gp_image_reserve(&s, 100, 4);
  for (int y = 0; y < 4; y++)
    for (int x = 0; x < 100; x++)
      for (int c = 0; c < 3; c++)
        s.px[(y * 100 + x) * 3 + c] = (uint8_t)(2 * x);
  gp_image_crop_resize(&s, (gp_rect){0, 0, 100, 4, 1}, 50, 2, 0, zero3, one3, got);
  worst = 0;
  for (int y = 0; y < 2; y++)
    for (int i = 1; i < 49; i++)
      worst = fmax(worst, fabs(got[y * 50 + i] * 255 - (4 * i + 1)));
  CHECK(worst < 1e-3, "ramp stays a ramp downscaled (%.2g)", worst);
  /* Upscaled 4x from x = 10..20: linear interpolation 2 * (c - 0.5) between pixel centres. */
  gp_image_crop_resize(&s, (gp_rect){10, 0, 10, 4, 0}, 40, 4, 0, zero3, one3, got);
  worst = 0;
  for (int i = 0; i < 40; i++)
    worst = fmax(worst, fabs(got[i] * 255 - 2 * (10 + (i + 0.5) / 4 - 0.5)));
  CHECK(worst < 1e-3, "ramp stays a ramp upscaled (%.2g)", worst);
  /* Checkers: 2x2 to 1x1 and 4x4 to 1x1 average to exactly half. */
  for (int side = 2; side <= 4; side += 2) {
    gp_image_reserve(&s, side, side);
    for (int i = 0; i < side * side; i++)
      memset(s.px + 3 * i, ((i / side + i % side) & 1) * 255, 3);
    gp_image_crop_resize(&s, (gp_rect){0, 0, side, side, 1}, 1, 1, 0, zero3, one3, got);
    CHECK(fabsf(got[0] - 0.5f) < 1e-6f && got[1] == got[0], "%dx%d checker averages to %.6f", side,
          side, got[0]);
  }
  CHECK(gp_image_crop_resize(&s, (gp_rect){1, 1, 4, 4, 1}, 2, 2, 0, zero3, one3, got) ==
            GP_ERR_RUNTIME,
        "a rectangle outside the image is refused");
  free(got);
  free(want);
  gp_image_free(&s);
}

static void test_eval_rect(void) {
  /* Worked by hand: 500x375 -> Resize(256) gives 341x256 (int(256*500/375) = 341), crop offsets
   * round(58.5) = 58 (half to even), round(16) = 16; in source pixels x 500/341, y 375/256. */
  static const struct {
    int w, h;
    double x, y, cw, ch;
  } cases[] = {
      {500, 375, 58 * 500.0 / 341, 16 * 375.0 / 256, 224 * 500.0 / 341, 224 * 375.0 / 256},
      {375, 500, 16 * 375.0 / 256, 58 * 500.0 / 341, 224 * 375.0 / 256, 224 * 500.0 / 341},
      {256, 256, 16, 16, 224, 224},
      {300, 200, 62.5, 12.5, 175, 175}, /* 384x256: offsets 80, 16 */
      {343, 256, 60, 16, 224, 224},     /* round(59.5) = 60 */
      {1024, 768, 58 * 1024.0 / 341, 16 * 3.0, 224 * 1024.0 / 341, 224 * 3.0},
      {100, 80, 48 * 100.0 / 320, 16 * 80.0 / 256, 70, 70}, /* upscaled: 320x256 */
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    gp_rect r = gp_eval_rect(cases[k].w, cases[k].h, 256, 224);
    CHECK(fabs(r.x - cases[k].x) < 1e-9 && fabs(r.y - cases[k].y) < 1e-9 &&
              fabs(r.w - cases[k].cw) < 1e-9 && fabs(r.h - cases[k].ch) < 1e-9 && !r.clip,
          "%dx%d: %.4f,%.4f %.4fx%.4f, want %.4f,%.4f %.4fx%.4f", cases[k].w, cases[k].h, r.x, r.y,
          r.w, r.h, cases[k].x, cases[k].y, cases[k].cw, cases[k].ch);
  }
}

typedef struct job {
  const uint8_t *jpg;
  size_t n;
  float *out;
  int count, side;
  gp_status st;
} job;

static const float in_mean[3] = {0.485f, 0.456f, 0.406f}, in_std[3] = {0.229f, 0.224f, 0.225f};

static void *run_job(void *p) {
  job *j = p;
  gp_image img = {0};
  j->st = GP_OK;
  size_t per = (size_t)3 * j->side * j->side;
  for (int i = 0; i < j->count && j->st == GP_OK; i++)
    j->st = gp_imagenet_sample(j->jpg, j->n, i % 2 == 0, 7, 2, i, j->side, in_mean, in_std, &img,
                               j->out + i * per, "thread.jpg");
  gp_image_free(&img);
  return NULL;
}

static void test_sample(void) {
  const int w = 1024, h = 768, S = 224;
  uint8_t *px = malloc((size_t)w * h * 3);
  jfix_natural(px, w, h, 9);
  size_t n = 0;
  uint8_t *j = jfix_encode(px, w, h, 3, 95, 0, &n);
  size_t per = (size_t)3 * S * S;
  float *a = malloc(sizeof(float) * per), *b = malloc(sizeof(float) * per);
  gp_image img = {0}, full = {0};
  CHECK(gp_jpeg_decode(j, n, 0, "full", &full) == GP_OK, "full decode");
  /* Eval: DCT-scaled (1/2: 512x384) path vs the full-size decode with the same geometry. */
  CHECK(gp_imagenet_sample(j, n, 0, 1, 0, 0, S, in_mean, in_std, &img, a, "x.jpg") == GP_OK,
        "eval sample");
  CHECK(img.w == 512 && img.h == 384, "eval decoded at 1/2: %dx%d", img.w, img.h);
  gp_image_crop_resize(&full, gp_eval_rect(w, h, 256, S), S, S, 0, in_mean, in_std, b);
  double e = 0;
  for (size_t i = 0; i < per; i++)
    e += fabs(a[i] - b[i]) * in_std[i / (S * S)];
  CHECK(e / per < TOL_DCT_MEAN, "eval: scaled vs full decode mean difference %.4f", e / per);
  /* Train: the same check for several crops, and determinism. */
  for (int64_t s = 0; s < 6; s++) {
    CHECK(gp_imagenet_sample(j, n, 1, 1, 3, s, S, in_mean, in_std, &img, a, "x.jpg") == GP_OK,
          "train sample %lld", (long long)s);
    gp_rrc c = gp_rrc_draw(1, 3, s, w, h, 0.08, 1.0, 3.0 / 4.0, 4.0 / 3.0);
    gp_image_crop_resize(&full, (gp_rect){c.x, c.y, c.w, c.h, 1}, S, S, c.flip, in_mean, in_std, b);
    e = 0;
    for (size_t i = 0; i < per; i++)
      e += fabs(a[i] - b[i]) * in_std[i / (S * S)];
    CHECK(e / per < TOL_DCT_MEAN, "train %lld (crop %dx%d, decoded %dx%d): mean difference %.4f",
          (long long)s, c.w, c.h, img.w, img.h, e / per);
    /* At least S decoded pixels across the crop, but for the ceil() of the scaled size. */
    int mn = c.w < c.h ? c.w : c.h, m = gp_jpeg_scale_for(h, 1);
    for (m = 1; m < 8 && (h * m + 7) / 8 != img.h; m *= 2)
      ;
    CHECK(mn * m / 8.0 > S - 1, "crop %d at scale %d/8 keeps about %d decoded pixels", mn, m, S);
    CHECK(m == 1 || mn * (m / 2) / 8.0 < S, "scale %d/8 is the smallest enough", m);
  }
  gp_imagenet_sample(j, n, 1, 1, 3, 5, S, in_mean, in_std, &img, b, "x.jpg");
  CHECK(memcmp(a, b, sizeof(float) * per) == 0, "same (seed, epoch, sample), same output");
  gp_imagenet_sample(j, n, 1, 1, 4, 5, S, in_mean, in_std, &img, b, "x.jpg");
  CHECK(memcmp(a, b, sizeof(float) * per) != 0, "another epoch, another crop");
  /* Errors name the sample. */
  CHECK(gp_imagenet_sample(j, n / 3, 1, 1, 0, 0, S, in_mean, in_std, &img, a,
                           "shard-7.tar: member k.jpg") == GP_ERR_DATA &&
            strstr(gp_error_message(), "shard-7.tar: member k.jpg: undecodable JPEG"),
        "truncated sample refused with where");
  /* Two threads at once give what one thread gives. */
  const int cnt = 6, side = 96;
  size_t per2 = (size_t)3 * side * side;
  float *seq = malloc(sizeof(float) * per2 * cnt), *t1 = malloc(sizeof(float) * per2 * cnt),
        *t2 = malloc(sizeof(float) * per2 * cnt);
  job js = {j, n, seq, cnt, side, GP_OK}, j1 = {j, n, t1, cnt, side, GP_OK},
      j2 = {j, n, t2, cnt, side, GP_OK};
  run_job(&js);
  pthread_t p1, p2;
  pthread_create(&p1, NULL, run_job, &j1);
  pthread_create(&p2, NULL, run_job, &j2);
  pthread_join(p1, NULL);
  pthread_join(p2, NULL);
  CHECK(js.st == GP_OK && j1.st == GP_OK && j2.st == GP_OK, "threads ran");
  CHECK(memcmp(seq, t1, sizeof(float) * per2 * cnt) == 0 &&
            memcmp(seq, t2, sizeof(float) * per2 * cnt) == 0,
        "threads agree with one thread");
  free(seq);
  free(t1);
  free(t2);
  gp_image_free(&img);
  gp_image_free(&full);
  free(a);
  free(b);
  free(j);
  free(px);
}

int main(void) {
  test_rrc();
  test_resize();
  test_eval_rect();
  test_sample();
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
