/* The U-Net decoder's ops on the CUDA backend against the CPU backend: resize2d (upsample:
 * nearest and bilinear, align_corners both ways, scale factors and sizes, integer and not),
 * forward and backward; and the convolutions conv_transpose2d runs on, at its descriptors
 * (the convolution from its output's shape to its input's: output_padding leaves rows no
 * window reaches), every direction; and conv1d's ([C, 1, L] images). Exits 77 (skipped) without a
 * CUDA device. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp_config.h"

static int failures, passes;

#include "tests/cuda/dnn_check.h"

/* Forward: the same products and sums in the same order on both (no contraction): equal.
 * Backward: the CPU scatters each output's four shares, CUDA gathers each input's shares in
 * the same output order but adds the two weights of a clamped edge index first: an ulp or
 * so at the edges, ~1e-15 normalized. */
#define TOL_EXACT 0.0
#define TOL_RESIZE_BWD 1e-12
/* fp32 convolution in cuDNN's order against im2col + GEMM (as test_cuda_dnn.c) */
#define TOL_CONV 1e-8

static void test_resize_one(cc_ctx *c, int64_t n, int64_t h, int64_t w, int64_t oh, int64_t ow,
                            int bilinear, int align, double factor, uint64_t seed) {
  gp_resize2d_desc d = {n, h, w, oh, ow, bilinear, align, factor, factor};
  char what[160];
  snprintf(what, sizeof what, "resize %s%s %lldx%lldx%lld -> %lldx%lld factor %g",
           bilinear ? "bilinear" : "nearest", align ? " align_corners" : "", (long long)n,
           (long long)h, (long long)w, (long long)oh, (long long)ow, factor);
  const int64_t nx = n * h * w, ny = n * oh * ow;
  float *hx = normal(nx, seed, 1.0f, 0.0f), *hdy = normal(ny, seed + 1, 1.0f, 0.0f);
  cc_pair x, y, dy, dx;
  mk(c, &x, (size_t)nx * 4, hx);
  mk(c, &y, (size_t)ny * 4, NULL);
  mk(c, &dy, (size_t)ny * 4, hdy);
  mk(c, &dx, (size_t)nx * 4, NULL);
  char msg[200];
  BOTH(c, be->resize2d_forward(be, &d, F(x), F(y)));
  snprintf(msg, sizeof msg, "%s forward", what);
  cmp(&y, msg, ny, TOL_EXACT);
  BOTH(c, be->resize2d_backward(be, &d, F(dy), F(dx)));
  snprintf(msg, sizeof msg, "%s backward", what);
  cmp(&dx, msg, nx, bilinear ? TOL_RESIZE_BWD : TOL_EXACT);
  cc_pair_free(&x);
  cc_pair_free(&y);
  cc_pair_free(&dy);
  cc_pair_free(&dx);
  free(hx);
  free(hdy);
}

static void test_resize(cc_ctx *c) {
  for (int bl = 0; bl < 2; bl++) {
    test_resize_one(c, 6, 7, 7, 14, 14, bl, 0, 2.0, 10 + bl); /* x2: nearest's shift path */
    test_resize_one(c, 4, 5, 7, 7, 10, bl, 0, 1.5, 20 + bl);  /* 1 / scale_factor */
    test_resize_one(c, 4, 5, 7, 9, 4, bl, 0, 0.0, 30 + bl);   /* size: in / out, one axis down */
    test_resize_one(c, 3, 4, 4, 4, 4, bl, 0, 0.0, 40 + bl);   /* same size */
  }
  test_resize_one(c, 6, 7, 7, 14, 14, 1, 1, 2.0, 50);
  test_resize_one(c, 4, 5, 7, 8, 3, 1, 1, 0.0, 60);
  test_resize_one(c, 2, 1, 5, 1, 9, 1, 1, 0.0, 70); /* out 1: scale 0 */
}

/* The convolution conv_transpose2d runs for input [c, h, w] to [k, oh, ow]. */
static void test_convt_one(cc_ctx *c, int64_t n, int64_t ci, int64_t h, int64_t w, int64_t k,
                           int64_t kh, int64_t s, int64_t p, int64_t op, int64_t dil, int64_t g,
                           uint64_t seed) {
  const int64_t oh = (h - 1) * s - 2 * p + dil * (kh - 1) + op + 1;
  const int64_t ow = (w - 1) * s - 2 * p + dil * (kh - 1) + op + 1;
  gp_conv2d_desc d = {n, k, oh, ow, ci, h, w, kh, kh, s, s, p, p, dil, dil, g};
  char what[160];
  snprintf(
      what, sizeof what,
      "conv_transpose2d %lldx%lldx%lldx%lld -> %lldx%lldx%lld k%lld s%lld p%lld op%lld d%lld g%lld",
      (long long)n, (long long)ci, (long long)h, (long long)w, (long long)k, (long long)oh,
      (long long)ow, (long long)kh, (long long)s, (long long)p, (long long)op, (long long)dil,
      (long long)g);
  const int64_t nin = n * ci * h * w, nout = n * k * oh * ow, nw = ci * (k / g) * kh * kh;
  float *hx = normal(nin, seed, 1.0f, 0.0f), *hw = normal(nw, seed + 1, 0.3f, 0.0f);
  float *hdy = normal(nout, seed + 2, 1.0f, 0.0f), *hdw = normal(nw, seed + 3, 1.0f, 0.0f);
  cc_pair x, wt, y, dy, dx, dw;
  mk(c, &x, (size_t)nin * 4, hx);
  mk(c, &wt, (size_t)nw * 4, hw);
  mk(c, &y, (size_t)nout * 4, NULL);
  mk(c, &dy, (size_t)nout * 4, hdy);
  mk(c, &dx, (size_t)nin * 4, NULL);
  mk(c, &dw, (size_t)nw * 4, hdw);
  char msg[240];
  BOTH(c, be->conv2d_backward_data(be, &d, F(x), F(wt), F(y)));
  snprintf(msg, sizeof msg, "%s forward", what);
  cmp(&y, msg, nout, TOL_CONV);
  BOTH(c, be->conv2d_forward(be, &d, F(dy), F(wt), NULL, F(dx)));
  snprintf(msg, sizeof msg, "%s input gradient", what);
  cmp(&dx, msg, nin, TOL_CONV);
  BOTH(c, be->conv2d_backward_filter(be, &d, F(dy), F(x), F(dw), NULL));
  snprintf(msg, sizeof msg, "%s weight gradient (+=)", what);
  cmp(&dw, msg, nw, TOL_CONV);
  cc_pair_free(&x);
  cc_pair_free(&wt);
  cc_pair_free(&y);
  cc_pair_free(&dy);
  cc_pair_free(&dx);
  cc_pair_free(&dw);
  free(hx);
  free(hw);
  free(hdy);
  free(hdw);
}

static void test_convt(cc_ctx *c) {
  test_convt_one(c, 4, 16, 7, 7, 8, 2, 2, 0, 0, 1, 1, 100); /* U-Net's: 7x7 -> 14x14 */
  test_convt_one(c, 2, 4, 5, 4, 3, 3, 2, 1, 1, 1, 1, 110);  /* output_padding */
  test_convt_one(c, 2, 6, 4, 3, 6, 3, 2, 0, 1, 2, 3, 120);  /* groups, dilation */
}

/* conv1d's convolution: a [c, 1, len] image under a [1, kernel] window. */
static void test_conv1d_one(cc_ctx *c, int64_t n, int64_t ci, int64_t len, int64_t k, int64_t kw,
                            int64_t s, int64_t p, int64_t dil, int64_t g, uint64_t seed) {
  const int64_t ol = (len + 2 * p - dil * (kw - 1) - 1) / s + 1;
  gp_conv2d_desc d = {n, ci, 1, len, k, 1, ol, 1, kw, 1, s, 0, p, 1, dil, g};
  char what[160];
  snprintf(what, sizeof what, "conv1d %lldx%lldx%lld -> %lldx%lld k%lld s%lld p%lld d%lld g%lld",
           (long long)n, (long long)ci, (long long)len, (long long)k, (long long)ol, (long long)kw,
           (long long)s, (long long)p, (long long)dil, (long long)g);
  const int64_t nx = n * ci * len, ny = n * k * ol, nw = k * (ci / g) * kw;
  float *hx = normal(nx, seed, 1.0f, 0.0f), *hw = normal(nw, seed + 1, 0.3f, 0.0f);
  float *hb = normal(k, seed + 2, 1.0f, 0.0f), *hdy = normal(ny, seed + 3, 1.0f, 0.0f);
  float *hdw = normal(nw, seed + 4, 1.0f, 0.0f), *hdb = normal(k, seed + 5, 1.0f, 0.0f);
  cc_pair x, wt, b, y, dy, dx, dw, db;
  mk(c, &x, (size_t)nx * 4, hx);
  mk(c, &wt, (size_t)nw * 4, hw);
  mk(c, &b, (size_t)k * 4, hb);
  mk(c, &y, (size_t)ny * 4, NULL);
  mk(c, &dy, (size_t)ny * 4, hdy);
  mk(c, &dx, (size_t)nx * 4, NULL);
  mk(c, &dw, (size_t)nw * 4, hdw);
  mk(c, &db, (size_t)k * 4, hdb);
  char msg[240];
  BOTH(c, be->conv2d_forward(be, &d, F(x), F(wt), F(b), F(y)));
  snprintf(msg, sizeof msg, "%s forward", what);
  cmp(&y, msg, ny, TOL_CONV);
  BOTH(c, be->conv2d_backward_data(be, &d, F(dy), F(wt), F(dx)));
  snprintf(msg, sizeof msg, "%s input gradient", what);
  cmp(&dx, msg, nx, TOL_CONV);
  BOTH(c, be->conv2d_backward_filter(be, &d, F(x), F(dy), F(dw), F(db)));
  snprintf(msg, sizeof msg, "%s weight gradient (+=)", what);
  cmp(&dw, msg, nw, TOL_CONV);
  snprintf(msg, sizeof msg, "%s bias gradient (+=)", what);
  cmp(&db, msg, k, TOL_CONV);
  cc_pair *all[] = {&x, &wt, &b, &y, &dy, &dx, &dw, &db};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    cc_pair_free(all[i]);
  free(hx);
  free(hw);
  free(hb);
  free(hdy);
  free(hdw);
  free(hdb);
}

int main(void) {
  cc_ctx c;
  int r = cc_open(&c);
  if (r != 0) return r;
  test_resize(&c);
  test_convt(&c);
  test_conv1d_one(&c, 4, 16, 50, 8, 3, 1, 1, 1, 1, 200);
  test_conv1d_one(&c, 2, 4, 11, 6, 3, 2, 2, 2, 2, 210);
  cc_close(&c);
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
