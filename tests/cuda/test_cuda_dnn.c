/* The CUDA backend's dnn-family ops (convolution on cuDNN; pooling, embeddings, attention
 * softmax, softmax backward and cross-entropy on own kernels; the norms: test_cuda_norm.c) against
 * the CPU backend on random inputs: odd sizes, stride 2, padding, groups, depthwise,
 * dilation, ties and NaN in pooling windows, causal attention with key masks and segment ids,
 * every forward and backward, outputs guarded by sentinel bytes, accumulating outputs
 * starting from random values. Also: the convolution algorithm is searched once per shape
 * and direction and then found in the cache, repeated calls give identical bits, and bad ids,
 * labels, masks and segment ids come back as the CPU's errors. Exits 77 (skipped) without a
 * CUDA device. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp_config.h"
#include "tests/support/check.h"
#include "tests/cuda/cuda_check.h"

#if GP_HAVE_CUDA
#include "core/cuda/dnn.h"
#endif

static int failures, passes;

/* The tolerances (normalized MSE), each with its reason. */
/* The same IEEE operations in the same order on both backends (the kernels round every
 * product and sum as the CPU does, no FMA contraction): finite values equal, NaN/Inf at the
 * same places (a NaN's payload may differ, so floats are not compared byte for byte). */
#define TOL_EXACT 0.0
/* fp32 convolution in cuDNN's summation order (and Winograd/FFT transforms) against im2col +
 * GEMM: ~1e-12. TF32 tensor cores (10-bit mantissa) would give ~1e-7: this checks they are
 * off. */
#define TOL_CONV 1e-8
/* Statistics summed in another order (double per element on the GPU, float rows in double on
 * the CPU; float trees for layer norm): ~1e-13 after normalization. */
#define TOL_NORM 1e-10
/* CUDA's expf differs from glibc's by an ulp or two; sums in double: ~1e-14. */
#define TOL_SOFTMAX 1e-10
/* rope: CUDA's powf, cosf and sinf against glibc's, an ulp or two of each angle's: ~1e-13. */
#define TOL_ROPE 1e-10

#include "tests/cuda/dnn_check.h"

/* ---- convolution ---- */

static gp_conv2d_desc conv_desc(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k, int64_t kh,
                                int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw,
                                int64_t dh, int64_t dw, int64_t g) {
  gp_conv2d_desc d = {n, c, h, w, k, 0, 0, kh, kw, sh, sw, ph, pw, dh, dw, g};
  d.oh = (h + 2 * ph - dh * (kh - 1) - 1) / sh + 1;
  d.ow = (w + 2 * pw - dw * (kw - 1) - 1) / sw + 1;
  return d;
}

#if GP_HAVE_CUDA
static void conv_stats(cc_ctx *c, int64_t *searches, int64_t *hits) {
  CHECK(gp_cuda_conv_cache_stats(c->gpu, searches, hits) == GP_OK, "conv cache stats");
}
#else
static void conv_stats(cc_ctx *c, int64_t *searches, int64_t *hits) {
  (void)c;
  *searches = *hits = 0;
}
#endif

static void test_conv_one(cc_ctx *c, const gp_conv2d_desc *d, int bias, uint64_t seed) {
  char what[160];
  snprintf(what, sizeof what,
           "conv %lldx%lldx%lldx%lld k%lld %lldx%lld s%lld,%lld p%lld,%lld d%lld,%lld g%lld",
           (long long)d->n, (long long)d->c, (long long)d->h, (long long)d->w, (long long)d->k,
           (long long)d->kh, (long long)d->kw, (long long)d->sh, (long long)d->sw, (long long)d->ph,
           (long long)d->pw, (long long)d->dh, (long long)d->dw, (long long)d->groups);
  const int64_t nx = d->n * d->c * d->h * d->w, ny = d->n * d->k * d->oh * d->ow;
  const int64_t nw = d->k * (d->c / d->groups) * d->kh * d->kw;
  float *hx = normal(nx, seed, 1.0f, 0.0f), *hw = normal(nw, seed + 1, 0.3f, 0.0f);
  float *hb = normal(d->k, seed + 2, 1.0f, 0.0f), *hdy = normal(ny, seed + 3, 1.0f, 0.0f);
  float *hdw = normal(nw, seed + 4, 1.0f, 0.0f), *hdb = normal(d->k, seed + 5, 1.0f, 0.0f);
  cc_pair x, w, b, y, dy, dx, dw, db;
  mk(c, &x, (size_t)nx * 4, hx);
  mk(c, &w, (size_t)nw * 4, hw);
  mk(c, &b, (size_t)d->k * 4, hb);
  mk(c, &y, (size_t)ny * 4, NULL);
  mk(c, &dy, (size_t)ny * 4, hdy);
  mk(c, &dx, (size_t)nx * 4, NULL);
  mk(c, &dw, (size_t)nw * 4, hdw);
  mk(c, &db, (size_t)d->k * 4, hdb);
  int64_t s0, h0, s1, h1;
  conv_stats(c, &s0, &h0);

  char msg[200];
  BOTH(c, be->conv2d_forward(be, d, F(x), F(w), bias ? F(b) : NULL, F(y)));
  snprintf(msg, sizeof msg, "%s forward", what);
  cmp(&y, msg, ny, TOL_CONV);
  BOTH(c, be->conv2d_backward_data(be, d, F(dy), F(w), F(dx)));
  snprintf(msg, sizeof msg, "%s backward data", what);
  cmp(&dx, msg, nx, TOL_CONV);
  BOTH(c, be->conv2d_backward_filter(be, d, F(x), F(dy), F(dw), bias ? F(db) : NULL));
  snprintf(msg, sizeof msg, "%s backward filter (+=)", what);
  cmp(&dw, msg, nw, TOL_CONV);
  snprintf(msg, sizeof msg, "%s bias gradient (+=)", what);
  cmp(&db, msg, d->k, TOL_NORM); /* untouched (both start equal) when bias is off */

  /* A new shape: one search per direction, no hit. Then every direction again: three hits,
   * no search, and the same bits (the chosen algorithms are deterministic). */
  conv_stats(c, &s1, &h1);
#if GP_HAVE_CUDA
  CHECK(s1 == s0 + 3 && h1 == h0, "%s: %lld searches, %lld hits (want 3, 0)", what,
        (long long)(s1 - s0), (long long)(h1 - h0));
#endif
  float *first_y = xmalloc((size_t)ny * 4), *first_dw = xmalloc((size_t)nw * 4);
  float *again = xmalloc((size_t)(nx > nw ? (nx > ny ? nx : ny) : (nw > ny ? nw : ny)) * 4);
  CHECK(cc_buf_download(&y.gpu, first_y, (size_t)ny * 4) == GP_OK, "download");
  CHECK(cc_buf_download(&dw.gpu, first_dw, (size_t)nw * 4) == GP_OK, "download");
  CHECK(cc_buf_upload(&dw.gpu, hdw, (size_t)nw * 4) == GP_OK, "upload");
  gp_backend *g = c->gpu;
  CHECK(g->conv2d_forward(g, d, GPUF(x), GPUF(w), bias ? GPUF(b) : NULL, GPUF(y)) == GP_OK,
        "%s forward again", what);
  CHECK(g->conv2d_backward_data(g, d, GPUF(dy), GPUF(w), GPUF(dx)) == GP_OK,
        "%s backward data again", what);
  CHECK(g->conv2d_backward_filter(g, d, GPUF(x), GPUF(dy), GPUF(dw), NULL) == GP_OK,
        "%s backward filter again", what);
  conv_stats(c, &s0, &h0);
#if GP_HAVE_CUDA
  CHECK(s0 == s1 && h0 == h1 + 3, "%s again: %lld searches, %lld hits (want 0, 3)", what,
        (long long)(s0 - s1), (long long)(h0 - h1));
#endif
  CHECK(cc_buf_download(&y.gpu, again, (size_t)ny * 4) == GP_OK, "download");
  CHECK(memcmp(again, first_y, (size_t)ny * 4) == 0, "%s: forward differs on the second call",
        what);
  CHECK(cc_buf_download(&dw.gpu, again, (size_t)nw * 4) == GP_OK, "download");
  CHECK(memcmp(again, first_dw, (size_t)nw * 4) == 0,
        "%s: backward filter differs on the second call", what);
  CHECK(cc_buf_guards_ok(&y.gpu, what) && cc_buf_guards_ok(&dx.gpu, what) &&
            cc_buf_guards_ok(&dw.gpu, what),
        "%s: guards after the second calls", what);

  free(first_y);
  free(first_dw);
  free(again);
  cc_pair *all[] = {&x, &w, &b, &y, &dy, &dx, &dw, &db};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    cc_pair_free(all[i]);
  free(hx);
  free(hw);
  free(hb);
  free(hdy);
  free(hdw);
  free(hdb);
}

static void test_conv(cc_ctx *c) {
  const gp_conv2d_desc ds[] = {
      conv_desc(2, 3, 7, 9, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1),     /* "same" 3x3 */
      conv_desc(3, 4, 11, 10, 6, 3, 5, 2, 2, 1, 2, 1, 1, 1),   /* stride 2, odd sizes */
      conv_desc(2, 4, 8, 8, 6, 3, 3, 1, 1, 1, 1, 1, 1, 2),     /* 2 groups */
      conv_desc(2, 8, 9, 9, 8, 3, 3, 2, 2, 1, 1, 1, 1, 8),     /* depthwise, stride 2 */
      conv_desc(1, 3, 12, 12, 4, 3, 3, 1, 1, 2, 2, 2, 2, 1),   /* dilation 2 */
      conv_desc(4, 16, 5, 5, 8, 1, 1, 1, 1, 0, 0, 1, 1, 1),    /* 1x1 */
      conv_desc(2, 6, 10, 13, 9, 2, 3, 1, 2, 0, 1, 2, 1, 3),   /* mixed per axis, 3 groups */
      conv_desc(1, 3, 32, 32, 16, 7, 7, 2, 2, 3, 3, 1, 1, 1),  /* stem-like 7x7/2 */
      conv_desc(8, 32, 14, 14, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1), /* a ResNet-ish block */
  };
  for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++)
    test_conv_one(c, &ds[i], (int)(i % 3 != 2), 100 + 10 * i);

  /* A descriptor whose output size does not match is refused, as on the CPU. */
  gp_conv2d_desc bad = ds[0];
  bad.ow += 1;
  gp_backend *g = c->gpu;
  float *p = NULL;
  expect_error(g->conv2d_forward(g, &bad, p, p, p, p), GP_ERR_RUNTIME, "does not match",
               "conv with a wrong output size");
}

/* ---- pooling ---- */

static gp_pool2d_desc pool_desc(int64_t n, int64_t c, int64_t h, int64_t w, int64_t kh, int64_t kw,
                                int64_t sh, int64_t sw, int64_t ph, int64_t pw, int count_pad) {
  gp_pool2d_desc d = {n, c, h, w, 0, 0, kh, kw, sh, sw, ph, pw, count_pad};
  d.oh = (h + 2 * ph - kh) / sh + 1;
  d.ow = (w + 2 * pw - kw) / sw + 1;
  return d;
}

/* kind of input: 0 normal, 1 few distinct values (ties), 2 with NaN and -Inf */
static void test_pool_one(cc_ctx *c, gp_pool kind, const gp_pool2d_desc *d, int input,
                          uint64_t seed) {
  char what[160];
  snprintf(what, sizeof what, "%s pool %lldx%lldx%lldx%lld %lldx%lld s%lld,%lld p%lld,%lld%s%s",
           kind == GP_POOL_MAX ? "max" : "avg", (long long)d->n, (long long)d->c, (long long)d->h,
           (long long)d->w, (long long)d->kh, (long long)d->kw, (long long)d->sh, (long long)d->sw,
           (long long)d->ph, (long long)d->pw, d->count_pad ? " count_pad" : "",
           input == 1   ? " ties"
           : input == 2 ? " NaN"
                        : "");
  const int64_t nx = d->n * d->c * d->h * d->w, ny = d->n * d->c * d->oh * d->ow;
  float *hx = normal(nx, seed, 1.0f, 0.0f), *hdy = normal(ny, seed + 1, 1.0f, 0.0f);
  if (input == 1) {
    int32_t *q = ints(nx, seed + 2, 0, 3);
    for (int64_t i = 0; i < nx; i++)
      hx[i] = (float)q[i];
    free(q);
  } else if (input == 2) {
    for (int64_t i = 5; i < nx; i += 37)
      hx[i] = NAN;
    for (int64_t i = 11; i < nx; i += 53)
      hx[i] = -INFINITY;
  }
  cc_pair x, y, am, dy, dx;
  mk(c, &x, (size_t)nx * 4, hx);
  mk(c, &y, (size_t)ny * 4, NULL);
  mk(c, &am, (size_t)ny * 4, NULL);
  mk(c, &dy, (size_t)ny * 4, hdy);
  mk(c, &dx, (size_t)nx * 4, NULL);
  int32_t *amp = NULL;
  char msg[200];
  BOTH(c, be->pool2d_forward(be, kind, d, F(x), F(y), kind == GP_POOL_MAX ? I(am) : amp));
  snprintf(msg, sizeof msg, "%s forward", what);
  cmp(&y, msg, ny, TOL_EXACT);
  if (kind == GP_POOL_MAX) {
    snprintf(msg, sizeof msg, "%s argmax", what);
    CHECK(cc_pair_equal(&am, msg), "%s", msg);
  }
  BOTH(c, be->pool2d_backward(be, kind, d, F(dy), kind == GP_POOL_MAX ? I(am) : amp, F(dx)));
  snprintf(msg, sizeof msg, "%s backward", what);
  cmp(&dx, msg, nx, TOL_EXACT);
  cc_pair_free(&x);
  cc_pair_free(&y);
  cc_pair_free(&am);
  cc_pair_free(&dy);
  cc_pair_free(&dx);
  free(hx);
  free(hdy);
}

static void test_pool(cc_ctx *c) {
  const gp_pool2d_desc mx[] = {
      pool_desc(2, 3, 9, 11, 3, 3, 2, 2, 1, 1, 0), /* overlapping windows, padding */
      pool_desc(2, 3, 8, 10, 2, 2, 2, 2, 0, 0, 0), /* the CPU's unrolled 2x2 path, tiling */
      pool_desc(2, 3, 9, 7, 2, 2, 2, 2, 0, 0, 0),  /* 2x2 with a row and column left over */
      pool_desc(1, 4, 6, 6, 3, 3, 1, 1, 1, 1, 0),  /* stride 1 */
      pool_desc(3, 2, 10, 5, 4, 2, 3, 1, 2, 1, 0), /* per-axis windows */
  };
  for (size_t i = 0; i < sizeof mx / sizeof mx[0]; i++)
    for (int input = 0; input < 3; input++)
      test_pool_one(c, GP_POOL_MAX, &mx[i], input, 200 + 10 * i + input);
  const gp_pool2d_desc av[] = {
      pool_desc(2, 3, 9, 11, 3, 3, 2, 2, 1, 1, 0), pool_desc(2, 3, 9, 11, 3, 3, 2, 2, 1, 1, 1),
      pool_desc(2, 5, 7, 7, 7, 7, 1, 1, 0, 0, 0), /* global average */
      pool_desc(3, 2, 10, 5, 4, 2, 3, 1, 2, 1, 0), pool_desc(3, 2, 10, 5, 4, 2, 3, 1, 2, 1, 1),
  };
  for (size_t i = 0; i < sizeof av / sizeof av[0]; i++)
    for (int input = 0; input < 3; input += 2)
      test_pool_one(c, GP_POOL_AVG, &av[i], input, 300 + 10 * i + input);
}

/* ---- embedding ---- */

static void test_emb_one(cc_ctx *c, int64_t n, int64_t dim, int64_t vocab, float scale,
                         int64_t skip, uint64_t seed) {
  char what[128];
  snprintf(what, sizeof what, "embedding n %lld dim %lld vocab %lld scale %g skip %lld",
           (long long)n, (long long)dim, (long long)vocab, (double)scale, (long long)skip);
  int32_t *hid = ints(n, seed, 0, (int32_t)vocab);
  if (skip >= 0 && n > 4) hid[1] = hid[3] = (int32_t)skip;
  float *ht = normal(vocab * dim, seed + 1, 1.0f, 0.0f),
        *hdy = normal(n * dim, seed + 2, 1.0f, 0.0f);
  float *hdt = normal(vocab * dim, seed + 3, 1.0f, 0.0f);
  cc_pair ids, table, y, dy, dt;
  mk(c, &ids, (size_t)n * 4, hid);
  mk(c, &table, (size_t)(vocab * dim) * 4, ht);
  mk(c, &y, (size_t)(n * dim) * 4, NULL);
  mk(c, &dy, (size_t)(n * dim) * 4, hdy);
  mk(c, &dt, (size_t)(vocab * dim) * 4, hdt);
  char msg[200];
  BOTH(c, be->embedding_forward(be, n, dim, vocab, I(ids), F(table), scale, F(y)));
  snprintf(msg, sizeof msg, "%s forward", what);
  cmp(&y, msg, n * dim, TOL_EXACT);
  /* Rows shared by several positions sum in position order on both: the same bits. */
  BOTH(c, be->embedding_backward(be, n, dim, vocab, I(ids), F(dy), scale, skip, F(dt)));
  snprintf(msg, sizeof msg, "%s backward (+=)", what);
  cmp(&dt, msg, vocab * dim, TOL_EXACT);
  cc_pair_free(&ids);
  cc_pair_free(&table);
  cc_pair_free(&y);
  cc_pair_free(&dy);
  cc_pair_free(&dt);
  free(hid);
  free(ht);
  free(hdy);
  free(hdt);
}

static void test_emb(cc_ctx *c) {
  test_emb_one(c, 50, 24, 17, 1.0f, -1, 600); /* many repeats */
  test_emb_one(c, 50, 24, 17, 0.5f, 3, 610);  /* scaled, a padding row */
  test_emb_one(c, 3000, 64, 1000, 8.0f, 0, 620);
  test_emb_one(c, 7, 600, 5, 1.0f, -1, 630); /* wide rows */
  test_emb_one(c, 1, 3, 100000, 1.0f, -1, 640);

  /* An id out of range: GP_ERR_DATA naming it and its position, nothing written. */
  const int64_t n = 12, dim = 4, vocab = 17;
  int32_t *hid = ints(n, 650, 0, (int32_t)vocab);
  hid[7] = 17;
  hid[9] = -2;
  float *ht = normal(vocab * dim, 651, 1.0f, 0.0f);
  cc_pair ids, table, y;
  mk(c, &ids, (size_t)n * 4, hid);
  mk(c, &table, (size_t)(vocab * dim) * 4, ht);
  mk(c, &y, (size_t)(n * dim) * 4, NULL);
  for (int side = 0; side < 2; side++) {
    gp_backend *be = side ? c->gpu : c->cpu;
    gp_status s =
        be->embedding_forward(be, n, dim, vocab, side ? GPUI(ids) : CPUI(ids),
                              side ? GPUF(table) : CPUF(table), 1.0f, side ? GPUF(y) : CPUF(y));
    expect_error(s, GP_ERR_DATA, "token id 17 at position 7 is outside [0, 17)",
                 side ? "cuda embedding, bad id" : "cpu embedding, bad id");
    s = be->embedding_backward(be, n, dim, vocab, side ? GPUI(ids) : CPUI(ids),
                               side ? GPUF(y) : CPUF(y), 1.0f, -1,
                               side ? GPUF(table) : CPUF(table));
    expect_error(s, GP_ERR_DATA, "token id 17 at position 7",
                 side ? "cuda embedding backward, bad id" : "cpu embedding backward, bad id");
  }
  CHECK(cc_pair_equal(&y, "embedding output after a bad id (untouched)"), "untouched output");
  CHECK(cc_pair_equal(&table, "embedding table after a bad id (untouched)"), "untouched table");
  hid[7] = 3;
  CHECK(cc_pair_upload(&ids, hid) == GP_OK, "upload");
  gp_backend *g = c->gpu;
  expect_error(g->embedding_forward(g, n, dim, vocab, GPUI(ids), GPUF(table), 1.0f, GPUF(y)),
               GP_ERR_DATA, "token id -2 at position 9", "cuda embedding, negative id");
  cc_pair_free(&ids);
  cc_pair_free(&table);
  cc_pair_free(&y);
  free(hid);
  free(ht);
}

/* ---- attention softmax and softmax backward ---- */

enum { MASK_NONE, MASK_F32, MASK_I32 };

/* seg: 0 none, 1 the same ids for queries and keys (self-attention of packed rows, one
 * pointer), 2 separate ids (cross-attention). */
static void test_attn_one(cc_ctx *c, int64_t batch, int64_t heads, int64_t tq, int64_t tk,
                          int causal, int mask, int seg, int in_place, uint64_t seed) {
  char what[160];
  snprintf(what, sizeof what, "attention softmax [%lld, %lld, %lld, %lld]%s%s%s%s",
           (long long)batch, (long long)heads, (long long)tq, (long long)tk,
           causal ? " causal" : "",
           mask == MASK_F32   ? " keep f32"
           : mask == MASK_I32 ? " keep i32"
                              : "",
           seg == 1   ? " segments"
           : seg == 2 ? " cross segments"
                      : "",
           in_place ? " in place" : "");
  const int64_t ns = batch * heads * tq * tk;
  float *hs = normal(ns, seed, 3.0f, 0.0f);
  int32_t *hk = ints(batch * tk, seed + 1, 0, 4); /* about 1 in 4 keys padded */
  float *hkf = xmalloc((size_t)(batch * tk) * 4);
  for (int64_t i = 0; i < batch * tk; i++) {
    hk[i] = hk[i] != 0;
    hkf[i] = (float)hk[i];
  }
  if (batch > 1)
    for (int64_t j = 0; j < tk; j++) /* sample 1 has no key at all: its rows are all 0 */
      hk[tk + j] = 0, hkf[tk + j] = 0.0f;
  /* Segments: sentences of random lengths, then padding (0) at the end of each row. */
  int32_t *hsq = xmalloc((size_t)(batch * tq) * 4), *hsk = xmalloc((size_t)(batch * tk) * 4);
  int32_t *len = ints(batch * (tq + tk) + 1, seed + 2, 1, 4);
  for (int64_t b = 0; b < batch; b++) {
    int32_t s = 1, left = len[b * (tq + tk)];
    for (int64_t i = 0; i < tq; i++) {
      hsq[b * tq + i] = i + 2 >= tq ? 0 : s;
      if (--left == 0) s++, left = len[b * (tq + tk) + i + 1];
    }
    s = 1, left = len[b * (tq + tk) + tq];
    for (int64_t j = 0; j < tk; j++) {
      hsk[b * tk + j] = j + 1 >= tk ? 0 : s;
      if (--left == 0) s++, left = len[b * (tq + tk) + tq + j + 1];
    }
  }
  cc_pair sc, pr, kf, ki, sq, sk;
  mk(c, &sc, (size_t)ns * 4, hs);
  mk(c, &pr, (size_t)ns * 4, NULL);
  mk(c, &kf, (size_t)(batch * tk) * 4, hkf);
  mk(c, &ki, (size_t)(batch * tk) * 4, hk);
  mk(c, &sq, (size_t)(batch * tq) * 4, seg == 1 ? hsk : hsq); /* self: tq == tk */
  mk(c, &sk, (size_t)(batch * tk) * 4, hsk);
  for (int side_ = 0; side_ < 2; side_++) {
    gp_backend *be = side_ ? c->gpu : c->cpu;
    gp_attn_softmax_desc d = {batch, heads, tq, tk, causal, NULL, NULL, NULL, NULL};
    if (mask == MASK_F32) d.keep_f32 = F(kf);
    if (mask == MASK_I32) d.keep_i32 = I(ki);
    if (seg == 1) d.seg_q = d.seg_k = I(sq);
    if (seg == 2) d.seg_q = I(sq), d.seg_k = I(sk);
    gp_status s = be->attn_softmax_forward(be, &d, F(sc), in_place ? F(sc) : F(pr));
    CHECK(s == GP_OK, "%s on %s", what, be->name);
  }
  cmp(in_place ? &sc : &pr, what, ns, TOL_SOFTMAX);

  /* softmax backward through these probabilities (dx over dy in place for the in-place case) */
  float *hy = xmalloc((size_t)ns * 4), *hdy = normal(ns, seed + 3, 1.0f, 0.0f);
  CHECK(cc_buf_download(in_place ? &sc.cpu : &pr.cpu, hy, (size_t)ns * 4) == GP_OK, "download");
  cc_pair y, dy, dx;
  mk(c, &y, (size_t)ns * 4, hy);
  mk(c, &dy, (size_t)ns * 4, hdy);
  mk(c, &dx, (size_t)ns * 4, NULL);
  BOTH(c, be->softmax_backward(be, batch * heads * tq, tk, F(y), F(dy), in_place ? F(dy) : F(dx)));
  char msg[200];
  snprintf(msg, sizeof msg, "%s: softmax backward", what);
  cmp(in_place ? &dy : &dx, msg, ns, TOL_SOFTMAX);

  cc_pair *all[] = {&sc, &pr, &kf, &ki, &sq, &sk, &y, &dy, &dx};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    cc_pair_free(all[i]);
  free(hs);
  free(hk);
  free(hkf);
  free(hsq);
  free(hsk);
  free(len);
  free(hy);
  free(hdy);
}

static void test_attn(cc_ctx *c) {
  test_attn_one(c, 2, 3, 5, 7, 0, MASK_NONE, 0, 0, 700);
  test_attn_one(c, 2, 3, 6, 6, 1, MASK_NONE, 0, 1, 710);
  test_attn_one(c, 3, 2, 5, 9, 0, MASK_F32, 0, 0, 720);
  test_attn_one(c, 3, 2, 9, 9, 1, MASK_I32, 0, 0, 730);
  test_attn_one(c, 2, 2, 12, 12, 1, MASK_NONE, 1, 0, 740); /* packed rows, causal */
  test_attn_one(c, 2, 2, 10, 13, 0, MASK_I32, 2, 1, 750);  /* cross, with a key mask */
  test_attn_one(c, 1, 2, 3, 1100, 0, MASK_F32, 0, 0, 760); /* long rows */
  test_attn_one(c, 1, 1, 300, 300, 1, MASK_NONE, 0, 0, 770);

  /* Bad masks and segment ids: GP_ERR_DATA naming the value and place, as on the CPU. */
  const int64_t batch = 2, tk = 4, ns = batch * 1 * 4 * tk;
  float *hs = normal(ns, 780, 1.0f, 0.0f);
  float hkf[8] = {1, 1, 0, 1, 1, 1, 0.5f, 1};
  int32_t hseg[8] = {1, 1, 2, 0, 1, -3, 1, 0};
  cc_pair sc, kf, seg;
  mk(c, &sc, (size_t)ns * 4, hs);
  mk(c, &kf, sizeof hkf, hkf);
  mk(c, &seg, sizeof hseg, hseg);
  for (int side_ = 0; side_ < 2; side_++) {
    gp_backend *be = side_ ? c->gpu : c->cpu;
    gp_attn_softmax_desc d = {batch, 1, 4, tk, 0, F(kf), NULL, NULL, NULL};
    expect_error(be->attn_softmax_forward(be, &d, F(sc), F(sc)), GP_ERR_DATA,
                 "mask value 0.5 of sample 1, key 2 is not 0", side_ ? "cuda mask" : "cpu mask");
    d.keep_f32 = NULL;
    d.seg_q = d.seg_k = I(seg);
    expect_error(be->attn_softmax_forward(be, &d, F(sc), F(sc)), GP_ERR_DATA,
                 "segment id -3 of sample 1, query 1 is negative",
                 side_ ? "cuda segments" : "cpu segments");
    d.seg_k = NULL;
    expect_error(be->attn_softmax_forward(be, &d, F(sc), F(sc)), GP_ERR_RUNTIME,
                 "must be given together", side_ ? "cuda half segments" : "cpu half segments");
  }
  cc_pair_free(&sc);
  cc_pair_free(&kf);
  cc_pair_free(&seg);
  free(hs);
}

/* ---- rotary position embedding ---- */

/* Rows of `heads` heads of dh, at row stride ld (the columns past heads * dh, as V's in the
 * attention layer's [Q K V] rows, must stay untouched), positions restarting per packed
 * sentence and up to 4000 (angles far from 0); forward, then back. */
static void test_rope_one(cc_ctx *c, int64_t rows, int64_t heads, int64_t dh, int64_t ld,
                          double theta, uint64_t seed) {
  char what[128];
  snprintf(what, sizeof what, "rope rows %lld heads %lld dh %lld ld %lld theta %g", (long long)rows,
           (long long)heads, (long long)dh, (long long)ld, theta);
  const int64_t n = rows * ld;
  float *hx = normal(n, seed, 1.0f, 0.0f);
  int32_t *hp = ints(rows, seed + 1, 0, 4000);
  for (int64_t r = 0; r < rows; r++)
    if (r % 7 < 3) hp[r] = (int32_t)(r % 7); /* packed sentences starting again at 0 */
  cc_pair x, pos;
  mk(c, &x, (size_t)n * 4, hx);
  mk(c, &pos, (size_t)rows * 4, hp);
  BOTH(c, be->rope(be, rows, heads, dh, ld, theta, I(pos), 0, F(x)));
  cmp(&x, what, n, TOL_ROPE);
  char msg[160];
  snprintf(msg, sizeof msg, "%s: turned back", what);
  BOTH(c, be->rope(be, rows, heads, dh, ld, theta, I(pos), 1, F(x)));
  cmp(&x, msg, n, TOL_ROPE);
  float *back = xmalloc((size_t)n * 4);
  CHECK(cc_buf_download(&x.cpu, back, (size_t)n * 4) == GP_OK, "download");
  double worst = 0;
  int untouched = 1;
  for (int64_t i = 0; i < n; i++) {
    double e = fabs((double)back[i] - (double)hx[i]);
    worst = e > worst ? e : worst;
    if (i % ld >= heads * dh) untouched &= back[i] == hx[i];
  }
  CHECK(worst < 1e-5 && untouched, "%s: the turn back is off by %g, columns past the heads %s",
        what, worst, untouched ? "untouched" : "changed");
  cc_pair_free(&x);
  cc_pair_free(&pos);
  free(hx);
  free(hp);
  free(back);
}

static void test_rope(cc_ctx *c) {
  test_rope_one(c, 37, 3, 8, 3 * 8 + 8, 10000.0, 790); /* [Q (2 heads) K (1)] then V */
  test_rope_one(c, 1024, 10, 32, 384, 500000.0, 791);  /* llama-like: 8 + 2 heads of 32 */
  test_rope_one(c, 5, 1, 2, 2, 1.5, 792);
  /* a bad position: GP_ERR_DATA naming it and its token, as on the CPU */
  int32_t hp[3] = {0, 1, -2};
  float hx[6] = {1, 2, 3, 4, 5, 6};
  cc_pair x, pos;
  mk(c, &x, sizeof hx, hx);
  mk(c, &pos, sizeof hp, hp);
  for (int side_ = 0; side_ < 2; side_++) {
    gp_backend *be = side_ ? c->gpu : c->cpu;
    expect_error(be->rope(be, 3, 1, 2, 2, 10000.0, I(pos), 0, F(x)), GP_ERR_DATA,
                 "position -2 of token 2", side_ ? "cuda rope position" : "cpu rope position");
  }
  cc_pair_free(&x);
  cc_pair_free(&pos);
}

/* ---- softmax cross-entropy ---- */

/* 1 when the GPU sides of a and b hold the same n floats (NaN where the other has NaN). */
static int same_on_gpu(const cc_pair *a, const cc_pair *b, int64_t n) {
  float *ha = xmalloc((size_t)n * 4), *hb = xmalloc((size_t)n * 4);
  int ok = cc_buf_download(&a->gpu, ha, (size_t)n * 4) == GP_OK &&
           cc_buf_download(&b->gpu, hb, (size_t)n * 4) == GP_OK;
  for (int64_t i = 0; ok && i < n; i++)
    ok = ha[i] == hb[i] || (isnan(ha[i]) && isnan(hb[i]));
  free(ha), free(hb);
  return ok;
}

/* The loss keeps its probabilities over the logits and writes their gradient over them
 * (gp_layer_type.saves_over_input): the ops with probs = logits and dlogits = probs give on
 * each backend what they give apart (p, loss, d: the separate buffers' results). */
static void test_xent_over(cc_ctx *c, const char *what, int64_t n, int64_t k, float smoothing,
                           const float *hz, const float *hp, cc_pair *lab, const cc_pair *p,
                           const cc_pair *loss, const cc_pair *d) {
  char msg[200];
  cc_pair zz, l2;
  mk(c, &zz, (size_t)(n * k) * 4, hz);
  mk(c, &l2, (size_t)n * 4, NULL);
  BOTH(c, be->softmax_xent_forward(be, n, k, smoothing, F(zz), I(*lab), F(zz), F(l2)));
  snprintf(msg, sizeof msg, "%s, probs over the logits", what);
  cmp(&zz, msg, n * k, TOL_SOFTMAX);
  CHECK(same_on_gpu(&zz, p, n * k) && same_on_gpu(&l2, loss, n), "%s: as apart on cuda", msg);
  CHECK(cc_pair_upload(&zz, hp) == GP_OK, "upload");
  const float scale = 1.0f / (float)n;
  BOTH(c, be->softmax_xent_backward(be, n, k, smoothing, scale, F(zz), I(*lab), F(zz)));
  snprintf(msg, sizeof msg, "%s, dlogits over the probabilities", what);
  cmp(&zz, msg, n * k, TOL_EXACT);
  CHECK(same_on_gpu(&zz, d, n * k), "%s: as apart on cuda", msg);
  cc_pair_free(&zz);
  cc_pair_free(&l2);
}

static void test_xent_one(cc_ctx *c, int64_t n, int64_t k, float smoothing, int specials,
                          uint64_t seed) {
  char what[128];
  snprintf(what, sizeof what, "softmax xent n %lld k %lld smoothing %g%s", (long long)n,
           (long long)k, (double)smoothing, specials ? " with NaN/large logits" : "");
  float *hz = normal(n * k, seed, 3.0f, 0.0f);
  int32_t *hl = ints(n, seed + 1, 0, (int32_t)k);
  if (specials && n >= 4 && k >= 4) {
    hz[0 * k + 0] = NAN;   /* NaN first: the CPU's running maximum starts there */
    hz[1 * k + 3] = NAN;   /* NaN later */
    hz[2 * k + 1] = 80.0f; /* a dominant class: other probabilities underflow */
    hz[3 * k + 2] = -INFINITY;
  }
  cc_pair z, lab, p, loss, d;
  mk(c, &z, (size_t)(n * k) * 4, hz);
  mk(c, &lab, (size_t)n * 4, hl);
  mk(c, &p, (size_t)(n * k) * 4, NULL);
  mk(c, &loss, (size_t)n * 4, NULL);
  mk(c, &d, (size_t)(n * k) * 4, NULL);
  char msg[200];
  BOTH(c, be->softmax_xent_forward(be, n, k, smoothing, F(z), I(lab), F(p), F(loss)));
  snprintf(msg, sizeof msg, "%s probs", what);
  cmp(&p, msg, n * k, TOL_SOFTMAX);
  snprintf(msg, sizeof msg, "%s loss", what);
  cmp(&loss, msg, n, TOL_SOFTMAX);
  /* Backward from the same probabilities: the same float operations, exact. */
  float *hp = xmalloc((size_t)(n * k) * 4);
  CHECK(cc_buf_download(&p.cpu, hp, (size_t)(n * k) * 4) == GP_OK, "download");
  CHECK(cc_pair_upload(&p, hp) == GP_OK, "upload");
  const float scale = 1.0f / (float)n;
  BOTH(c, be->softmax_xent_backward(be, n, k, smoothing, scale, F(p), I(lab), F(d)));
  snprintf(msg, sizeof msg, "%s dlogits", what);
  cmp(&d, msg, n * k, TOL_EXACT);
  test_xent_over(c, what, n, k, smoothing, hz, hp, &lab, &p, &loss, &d);
  cc_pair *all[] = {&z, &lab, &p, &loss, &d};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    cc_pair_free(all[i]);
  free(hz);
  free(hl);
  free(hp);
}

static void test_xent(cc_ctx *c) {
  test_xent_one(c, 9, 11, 0.0f, 0, 800);
  test_xent_one(c, 9, 11, 0.1f, 1, 810);
  test_xent_one(c, 3, 5000, 0.1f, 0, 820); /* a vocabulary-sized row */
  test_xent_one(c, 64, 10, 0.0f, 1, 830);

  /* Ignored targets never reach the op (the layer passes only the rows it counts); a label
   * outside [0, k) is an error naming it and its sample, as on the CPU. */
  const int64_t n = 6, k = 11;
  float *hz = normal(n * k, 840, 1.0f, 0.0f);
  int32_t hl[6] = {0, 3, 10, 2, 11, -100};
  cc_pair z, lab, p, loss;
  mk(c, &z, (size_t)(n * k) * 4, hz);
  mk(c, &lab, sizeof hl, hl);
  mk(c, &p, (size_t)(n * k) * 4, NULL);
  mk(c, &loss, (size_t)n * 4, NULL);
  for (int side_ = 0; side_ < 2; side_++) {
    gp_backend *be = side_ ? c->gpu : c->cpu;
    expect_error(be->softmax_xent_forward(be, n, k, 0.0f, F(z), I(lab), F(p), F(loss)),
                 GP_ERR_RUNTIME, "label 11 of sample 4 is outside [0, 11)",
                 side_ ? "cuda xent forward, bad label" : "cpu xent forward, bad label");
    expect_error(be->softmax_xent_backward(be, n, k, 0.0f, 1.0f, F(z), I(lab), F(p)),
                 GP_ERR_RUNTIME, "label 11 of sample 4",
                 side_ ? "cuda xent backward, bad label" : "cpu xent backward, bad label");
  }
  CHECK(cc_buf_guards_ok(&p.gpu, "xent after a bad label") &&
            cc_buf_guards_ok(&loss.gpu, "xent after a bad label"),
        "guards");
  cc_pair_free(&z);
  cc_pair_free(&lab);
  cc_pair_free(&p);
  cc_pair_free(&loss);
  free(hz);
}

/* fp32 means fp32: no direction of a convolution may round its operands to TF32 (10 mantissa
 * bits), which Ampere and later do under cuDNN's default math type (the backend asks for FMA
 * math). Operands 1 + 2^-12 need 12 bits: in fp32 each product is 1 + 2^-11 (the 2^-24 rounds
 * away to even), in TF32 exactly 1, so an interior output of a 3x3 over 16 channels is
 * 144.0703125 against 144. A ResNet-56 shape: under the default math its backward filter
 * did round, on an H100. */
static void test_conv_no_tf32(cc_ctx *c) {
  const gp_conv2d_desc d = conv_desc(128, 16, 32, 32, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1);
  const int64_t nx = d.n * d.c * d.h * d.w, ny = d.n * d.k * d.oh * d.ow, nw = d.k * d.c * 9;
  const int64_t big = nx > ny ? nx : ny;
  float *h = malloc(sizeof(float) * (size_t)big), *out = malloc(sizeof(float) * (size_t)big);
  if (!h || !out) {
    CHECK(0, "out of host memory");
    free(h), free(out);
    return;
  }
  for (int64_t i = 0; i < big; i++)
    h[i] = 1.0f + 0x1p-12f;
  cc_pair x, w, y, dy, dx, dw;
  mk(c, &x, (size_t)nx * 4, h);
  mk(c, &w, (size_t)nw * 4, h);
  mk(c, &y, (size_t)ny * 4, NULL);
  mk(c, &dy, (size_t)ny * 4, h);
  mk(c, &dx, (size_t)nx * 4, NULL);
  memset(out, 0, sizeof(float) * (size_t)nw);
  mk(c, &dw, (size_t)nw * 4, out);
  const float want = 144.0703125f;
  const int64_t mid = (5 * d.h + 7) + d.h * d.w; /* an interior pixel of channel 1 */
  struct {
    const char *what;
    gp_status st;
    cc_pair *p;
    int64_t n, at;
    float want;
  } r[3];
  gp_backend *g = c->gpu;
  r[0].st = g->conv2d_forward(g, &d, GPUF(x), GPUF(w), NULL, GPUF(y));
  r[0].what = "forward", r[0].p = &y, r[0].n = ny, r[0].at = mid, r[0].want = want;
  r[1].st = g->conv2d_backward_data(g, &d, GPUF(dy), GPUF(w), GPUF(dx));
  r[1].what = "backward data", r[1].p = &dx, r[1].n = nx, r[1].at = mid, r[1].want = want;
  /* the filter gradient sums over 128 x 32 x 32 positions, less the padded border: within
   * fp32 summation error of (1 + 2^-11) x its count, far from the count itself */
  r[2].st = g->conv2d_backward_filter(g, &d, GPUF(x), GPUF(dy), GPUF(dw), NULL);
  r[2].what = "backward filter", r[2].p = &dw, r[2].n = nw, r[2].at = 4; /* the centre tap */
  r[2].want = (float)(128.0 * 32 * 32 * (1.0 + 0x1p-11));
  for (int i = 0; i < 3; i++) {
    CHECK(r[i].st == GP_OK, "no-TF32 %s: %s", r[i].what, gp_error_message());
    CHECK(cc_buf_download(&r[i].p->gpu, out, (size_t)r[i].n * 4) == GP_OK, "download");
    double got = out[r[i].at], rel = fabs(got - r[i].want) / r[i].want;
    /* TF32 is off by 2^-11 (4.9e-4) relatively; fp32 summation by far less */
    CHECK(rel < 1e-4, "no-TF32 %s: %.7g, want %.7g (TF32 gives %.7g)", r[i].what, got,
          (double)r[i].want, r[i].want / (1.0 + 0x1p-11));
  }
  cc_pair *all[] = {&x, &w, &y, &dy, &dx, &dw};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    cc_pair_free(all[i]);
  free(h), free(out);
}

int main(void) {
  cc_ctx c;
  int r = cc_open(&c);
  if (r != 0) return r;
  test_conv(&c);
  test_conv_no_tf32(&c); /* a build without CUDA skipped at cc_open */
  test_pool(&c);
  test_emb(&c);
  test_attn(&c);
  test_rope(&c);
  test_xent(&c);
  cc_close(&c);
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
