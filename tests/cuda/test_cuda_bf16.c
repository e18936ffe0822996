/* GP_PREC_BF16 on the CUDA backend against the CPU backend's emulation (core/cpu/bf16.c):
 * the rounding kernel on hand-picked values (through a k = 1 GEMM, whose products of bf16
 * values are exact), GEMMs in all four transpose combinations with padded leading dimensions,
 * the three convolution directions over several shapes (results on the bf16 grid, bias and
 * accumulation in f32, the algorithm cache keyed on the precision), and a few training steps
 * of a small CNN through a two-stage pipeline on cuda:0 against the same on the CPU. Exits 77
 * (skipped) without a CUDA device. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "core/train/trainer.h"
#include "gp_config.h"
#include "tests/support/check.h"
#include "tests/cuda/cuda_check.h"
#include "tests/support/train.h"

#if GP_HAVE_CUDA
#include "core/cuda/dnn.h"
#endif

static int failures, passes;

/* The tolerances (normalized MSE unless said otherwise), each with its reason. */
/* Products of bf16 values are exact in f32: a k = 1 GEMM must give the CPU's bits (the
 * rounding kernel is the CPU's function); NaN and Inf at the same places. */
#define TOL_EXACT 0.0
/* The same bf16 operands on both sides, exact products, f32 sums in another order: ~1e-13.
 * Operands not rounded (or TF32) would give ~1e-6. */
#define TOL_GEMM 1e-9
/* Convolution results are rounded to bf16 on both sides; summation order moves a result
 * across a rounding boundary only when it lies within ~1e-7 of one, a bf16 ulp (2^-8) off
 * then: ~1e-10 in all. Truncating instead of rounding, or unrounded operands: ~1e-6. */
#define TOL_CONV 1e-7
/* The CUDA result must differ from the CPU's fp32 result by at least this much, or bf16 did
 * not happen (bf16 operands: ~1e-6). */
#define MIN_BF16_EFFECT 1e-8
/* Training: the same bf16 arithmetic in other summation orders, through 3 SGD steps; a
 * rounding flip moves an operand by 2^-8 of itself, a step of bf16 against fp32 moves the
 * weights by ~1e-3. Relative to the largest value. */
#define TOL_TRAIN 2e-3

static void *xmalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) {
    printf("out of host memory\n");
    exit(1);
  }
  return p;
}

static void mk(cc_ctx *c, cc_pair *p, size_t bytes, const void *host) {
  if (cc_pair_alloc(c, bytes, host, p) != GP_OK) {
    printf("allocating %zu bytes failed: %s\n", bytes, gp_error_message());
    exit(1);
  }
}

static float *normal(int64_t n, uint64_t seed, float sd) {
  float *h = xmalloc((size_t)n * sizeof(float));
  cc_fill_normal(h, n, seed, sd);
  return h;
}

static float from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static void set_precision(cc_ctx *c, gp_precision p) {
  c->cpu->precision = c->gpu->precision = p;
}

#define CPUF(q) ((float *)(q).cpu.p)
#define GPUF(q) ((float *)(q).gpu.p)

/* nmse of the CUDA side of p against a host reference (n floats). */
static double gpu_nmse(const cc_pair *p, const float *ref, int64_t n) {
  float *g = xmalloc((size_t)n * sizeof(float));
  double r = 1e30;
  if (cc_buf_download(&p->gpu, g, (size_t)n * sizeof(float)) == GP_OK) r = cc_nmse(ref, g, n);
  free(g);
  return r;
}

/* ---- rounding, through exact products ---- */

static void test_rounding(cc_ctx *c) {
  static const uint32_t av[] = {
      0x3f808000u, /* 1 + 2^-8: a tie, to even (1) */
      0x3f818000u, /* 1 + 3 2^-8: a tie, to even (1 + 2^-6) */
      0x3f808001u, /* just above a tie */
      0x3f807fffu, /* just below */
      0xbf818000u, /* negative tie */
      0x7f7fffffu, /* FLT_MAX: Inf */
      0x7f7f7fffu, /* the largest finite bf16 */
      0x7f7f8000u, /* the tie above it: Inf */
      0x7f800000u, /* Inf */
      0x7fc00000u, /* NaN */
      0x7f800001u, /* a NaN the addition would carry into Inf */
      0x3eaaaaabu, /* 1/3 */
      0x00000000u, /* 0 */
      0x1f800000u, /* 2^-64: products stay normal */
  };
  const int64_t m = (int64_t)(sizeof av / sizeof av[0]), n = 3;
  float ha[sizeof av / sizeof av[0]], hb[3] = {1.0f, -0.5f, 3.0f};
  for (int64_t i = 0; i < m; i++)
    ha[i] = from_bits(av[i]);
  cc_pair a, b, cp;
  mk(c, &a, sizeof ha, ha);
  mk(c, &b, sizeof hb, hb);
  mk(c, &cp, (size_t)(m * n) * sizeof(float), NULL);
  set_precision(c, GP_PREC_BF16);
  CHECK(c->cpu->gemm(c->cpu, 0, 0, m, n, 1, 1.0f, CPUF(a), 1, CPUF(b), n, 0.0f, CPUF(cp), n) ==
            GP_OK,
        "cpu gemm k = 1");
  CHECK(c->gpu->gemm(c->gpu, 0, 0, m, n, 1, 1.0f, GPUF(a), 1, GPUF(b), n, 0.0f, GPUF(cp), n) ==
            GP_OK,
        "cuda gemm k = 1");
  set_precision(c, GP_PREC_FP32);
  CHECK(cc_pair_compare(&cp, "bf16 outer product of special values", m * n, TOL_EXACT),
        "rounding on the GPU differs from the CPU's");
  cc_pair_free(&a);
  cc_pair_free(&b);
  cc_pair_free(&cp);
}

/* ---- GEMM ---- */

static void test_gemm(cc_ctx *c) {
  static const int64_t shapes[][3] = {{7, 5, 3}, {33, 17, 65}, {128, 96, 200}, {1, 300, 77}};
  static const float betas[] = {0.0f, 0.7f};
  for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++)
        for (int bi = 0; bi < 2; bi++) {
          const int64_t m = shapes[t][0], n = shapes[t][1], k = shapes[t][2];
          const float alpha = 1.3f, beta = betas[bi];
          const int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
          const int64_t lda = ac + 3, ldb = bc + 1, ldc = n + 2;
          const int64_t na = ar * lda, nb = br * ldb, nc = m * ldc;
          float *ha = normal(na, 21 + t, 1.0f), *hb = normal(nb, 22 + t, 1.0f);
          float *hc = normal(nc, 23 + t, 1.0f), *f32 = xmalloc((size_t)nc * sizeof(float));
          for (int64_t i = 0; i < m; i++)
            for (int64_t j = n; j < ldc; j++)
              hc[i * ldc + j] = NAN; /* padding: must stay untouched */
          cc_pair a, b, cp;
          mk(c, &a, (size_t)na * 4, ha);
          mk(c, &b, (size_t)nb * 4, hb);
          mk(c, &cp, (size_t)nc * 4, beta == 0.0f ? NULL : hc); /* beta 0: C is not read */
          char what[96];
          snprintf(what, sizeof what, "bf16 gemm %lldx%lldx%lld ta %d tb %d beta %g", (long long)m,
                   (long long)n, (long long)k, ta, tb, (double)beta);
          /* fp32 on the CPU, into a host copy: the size of bf16's effect */
          memcpy(f32, hc, (size_t)nc * 4);
          CHECK(c->cpu->gemm(c->cpu, ta, tb, m, n, k, alpha, CPUF(a), lda, CPUF(b), ldb, beta, f32,
                             ldc) == GP_OK,
                "%s: cpu fp32", what);
          set_precision(c, GP_PREC_BF16);
          gp_status sc = c->cpu->gemm(c->cpu, ta, tb, m, n, k, alpha, CPUF(a), lda, CPUF(b), ldb,
                                      beta, CPUF(cp), ldc);
          gp_status sg = c->gpu->gemm(c->gpu, ta, tb, m, n, k, alpha, GPUF(a), lda, GPUF(b), ldb,
                                      beta, GPUF(cp), ldc);
          set_precision(c, GP_PREC_FP32);
          CHECK(sc == GP_OK && sg == GP_OK, "%s: cpu %s, cuda %s", what, gp_status_name(sc),
                gp_status_name(sg));
          CHECK(cc_pair_compare(&cp, what, nc, TOL_GEMM), "%s", what);
          double effect = gpu_nmse(&cp, f32, nc);
          CHECK(effect > MIN_BF16_EFFECT, "%s: nmse %.3g against fp32: not bf16", what, effect);
          cc_pair_free(&a);
          cc_pair_free(&b);
          cc_pair_free(&cp);
          free(ha), free(hb), free(hc), free(f32);
        }
}

/* ---- convolution ---- */

static gp_conv2d_desc conv_desc(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k, int64_t kh,
                                int64_t kw, int64_t s, int64_t p, int64_t dil, int64_t g) {
  gp_conv2d_desc d = {n, c, h, w, k, 0, 0, kh, kw, s, s, p, p, dil, dil, g};
  d.oh = (h + 2 * p - dil * (kh - 1) - 1) / s + 1;
  d.ow = (w + 2 * p - dil * (kw - 1) - 1) / s + 1;
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

/* Every finite value of the CUDA side is a bf16 value (its low 16 bits are zero). */
static int64_t off_grid(const cc_buf *b, int64_t n) {
  float *h = xmalloc((size_t)n * sizeof(float));
  int64_t bad = n;
  if (cc_buf_download(b, h, (size_t)n * sizeof(float)) == GP_OK) {
    bad = 0;
    for (int64_t i = 0; i < n; i++) {
      uint32_t u;
      memcpy(&u, &h[i], sizeof u);
      bad += isfinite(h[i]) && (u & 0xffffu) != 0;
    }
  }
  free(h);
  return bad;
}

static void test_conv_one(cc_ctx *c, const gp_conv2d_desc *d, uint64_t seed) {
  char what[160], msg[220];
  snprintf(what, sizeof what,
           "bf16 conv %lldx%lldx%lldx%lld k%lld %lldx%lld s%lld p%lld d%lld g%lld", (long long)d->n,
           (long long)d->c, (long long)d->h, (long long)d->w, (long long)d->k, (long long)d->kh,
           (long long)d->kw, (long long)d->sh, (long long)d->ph, (long long)d->dh,
           (long long)d->groups);
  const int64_t nx = d->n * d->c * d->h * d->w, ny = d->n * d->k * d->oh * d->ow;
  const int64_t nw = d->k * (d->c / d->groups) * d->kh * d->kw;
  float *hx = normal(nx, seed, 1.0f), *hw = normal(nw, seed + 1, 0.3f);
  float *hb = normal(d->k, seed + 2, 1.0f), *hdy = normal(ny, seed + 3, 1.0f);
  float *hdw = normal(nw, seed + 4, 1.0f), *hdb = normal(d->k, seed + 5, 1.0f);
  float *f32 = xmalloc((size_t)(ny > nx ? ny : nx) * sizeof(float));
  cc_pair x, w, b, y, yb, dy, dx, dw, db;
  mk(c, &x, (size_t)nx * 4, hx);
  mk(c, &w, (size_t)nw * 4, hw);
  mk(c, &b, (size_t)d->k * 4, hb);
  mk(c, &y, (size_t)ny * 4, NULL);
  mk(c, &yb, (size_t)ny * 4, NULL);
  mk(c, &dy, (size_t)ny * 4, hdy);
  mk(c, &dx, (size_t)nx * 4, NULL);
  mk(c, &dw, (size_t)nw * 4, hdw);
  mk(c, &db, (size_t)d->k * 4, hdb);

  /* fp32 on the CPU: how far bf16 must move the forward result */
  CHECK(c->cpu->conv2d_forward(c->cpu, d, CPUF(x), CPUF(w), NULL, f32) == GP_OK, "cpu fp32");
  int64_t s0, h0, s1, h1, s2, h2;
  conv_stats(c, &s0, &h0);
  set_precision(c, GP_PREC_BF16);
  for (int side = 0; side < 2; side++) {
    gp_backend *be = side ? c->gpu : c->cpu;
#define P(q) (side ? GPUF(q) : CPUF(q))
    CHECK(be->conv2d_forward(be, d, P(x), P(w), NULL, P(y)) == GP_OK, "%s forward on %s", what,
          be->name);
    CHECK(be->conv2d_forward(be, d, P(x), P(w), P(b), P(yb)) == GP_OK, "%s forward+bias on %s",
          what, be->name);
    CHECK(be->conv2d_backward_data(be, d, P(dy), P(w), P(dx)) == GP_OK, "%s data on %s", what,
          be->name);
    CHECK(be->conv2d_backward_filter(be, d, P(x), P(dy), P(dw), P(db)) == GP_OK, "%s filter on %s",
          what, be->name);
#undef P
  }
  conv_stats(c, &s1, &h1);
  /* and once more: the cache answers, the bits repeat */
  float *again = xmalloc((size_t)ny * sizeof(float)), *first = xmalloc((size_t)ny * sizeof(float));
  CHECK(cc_buf_download(&y.gpu, first, (size_t)ny * 4) == GP_OK, "download");
  CHECK(c->gpu->conv2d_forward(c->gpu, d, GPUF(x), GPUF(w), NULL, GPUF(y)) == GP_OK, "again");
  CHECK(cc_buf_download(&y.gpu, again, (size_t)ny * 4) == GP_OK, "download");
  CHECK(memcmp(first, again, (size_t)ny * 4) == 0, "%s: a second forward differs", what);
  conv_stats(c, &s2, &h2);
  set_precision(c, GP_PREC_FP32);

  snprintf(msg, sizeof msg, "%s forward", what);
  CHECK(cc_pair_compare(&y, msg, ny, TOL_CONV), "%s", msg);
  CHECK(off_grid(&y.gpu, ny) == 0, "%s: results off the bf16 grid", msg);
  double effect = gpu_nmse(&y, f32, ny);
  CHECK(effect > MIN_BF16_EFFECT, "%s: nmse %.3g against fp32: not bf16", msg, effect);
  snprintf(msg, sizeof msg, "%s forward with bias", what);
  CHECK(cc_pair_compare(&yb, msg, ny, TOL_CONV), "%s", msg);
  snprintf(msg, sizeof msg, "%s backward data", what);
  CHECK(cc_pair_compare(&dx, msg, nx, TOL_CONV), "%s", msg);
  CHECK(off_grid(&dx.gpu, nx) == 0, "%s: results off the bf16 grid", msg);
  snprintf(msg, sizeof msg, "%s backward filter (+=)", what);
  CHECK(cc_pair_compare(&dw, msg, nw, TOL_CONV), "%s", msg);
  snprintf(msg, sizeof msg, "%s bias gradient (+=)", what);
  CHECK(cc_pair_compare(&db, msg, d->k, 1e-10), "%s", msg);
#if GP_HAVE_CUDA
  /* a bf16 entry of its own (the fp32 tests or an earlier shape never made it): three
   * searches; then only hits */
  CHECK(s1 - s0 == 3 && h1 - h0 == 1, "%s: %lld searches, %lld hits (want 3, 1)", what,
        (long long)(s1 - s0), (long long)(h1 - h0));
  CHECK(s2 == s1 && h2 == h1 + 1, "%s: the repeat searched again", what);
#else
  (void)s2, (void)h2;
#endif
  cc_pair *all[] = {&x, &w, &b, &y, &yb, &dy, &dx, &dw, &db};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    cc_pair_free(all[i]);
  free(hx), free(hw), free(hb), free(hdy), free(hdw), free(hdb), free(f32), free(again),
      free(first);
}

static void test_conv(cc_ctx *c) {
  const gp_conv2d_desc shapes[] = {
      conv_desc(4, 8, 13, 11, 16, 3, 3, 1, 1, 1, 1),
      conv_desc(3, 6, 15, 15, 10, 3, 3, 2, 1, 1, 1),
      conv_desc(2, 8, 9, 9, 12, 3, 3, 1, 2, 2, 2),
      conv_desc(2, 16, 10, 10, 16, 3, 3, 1, 1, 1, 16),
      conv_desc(8, 32, 7, 7, 24, 1, 1, 1, 0, 1, 1),
      conv_desc(2, 3, 32, 32, 16, 7, 7, 2, 3, 1, 1),
  };
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
    test_conv_one(c, &shapes[i], 100 + 10 * i);
  /* The same shape in fp32 after bf16: its own entry (a search), an fp32 result. */
  const gp_conv2d_desc *d = &shapes[0];
  const int64_t nx = d->n * d->c * d->h * d->w, ny = d->n * d->k * d->oh * d->ow;
  const int64_t nw = d->k * d->c * d->kh * d->kw;
  float *hx = normal(nx, 100, 1.0f), *hw = normal(nw, 101, 0.3f);
  cc_pair x, w, y;
  mk(c, &x, (size_t)nx * 4, hx);
  mk(c, &w, (size_t)nw * 4, hw);
  mk(c, &y, (size_t)ny * 4, NULL);
  int64_t s0, h0, s1, h1;
  conv_stats(c, &s0, &h0);
  CHECK(c->cpu->conv2d_forward(c->cpu, d, CPUF(x), CPUF(w), NULL, CPUF(y)) == GP_OK &&
            c->gpu->conv2d_forward(c->gpu, d, GPUF(x), GPUF(w), NULL, GPUF(y)) == GP_OK,
        "fp32 forward after bf16");
  conv_stats(c, &s1, &h1);
  CHECK(cc_pair_compare(&y, "fp32 conv after bf16 of the same shape", ny, 1e-8), "fp32 after bf16");
#if GP_HAVE_CUDA
  CHECK(s1 == s0 + 1, "fp32 after bf16 of the same shape: %lld searches (want 1)",
        (long long)(s1 - s0));
#endif
  cc_pair_free(&x), cc_pair_free(&w), cc_pair_free(&y);
  free(hx), free(hw);
}

/* ---- training through the pipeline ---- */

static const char *cnn = "name: cnn\n"
                         "inputs: {x: [3, 8, 8], label: {shape: [], dtype: i32}}\n"
                         "layers:\n"
                         "  - {type: conv2d, out_channels: 8, kernel: 3, padding: 1}\n"
                         "  - {type: relu}\n"
                         "  - {type: maxpool, kernel: 2}\n"
                         "  - {type: conv2d, out_channels: 8, kernel: 3, padding: 1}\n"
                         "  - {type: tanh}\n"
                         "  - {type: flatten}\n"
                         "  - {type: linear, out_features: 16}\n"
                         "  - {type: relu}\n"
                         "  - {type: linear, out_features: 5}\n"
                         "loss: {type: softmax_cross_entropy}\n"
                         "train: {optimizer: {type: sgd, lr: 0.1, momentum: 0.9}}\n";

#define STEPS 3
#define BATCH 12

/* 3 steps of the CNN in bf16, 2 stages and 2 micro-batches on `device`: the losses and every
 * stage's weights (copied to the host). 0 when it could not run (message printed). */
static int train_cnn(const char *device, double *loss, float **w, int64_t *n_w) {
  gp_model *mo = NULL;
  if (gp_model_load_string(cnn, "bf16.yaml", NULL, 0, &mo) != GP_OK) {
    printf("FAIL: load: %s\n", gp_error_message());
    return 0;
  }
  mo->pipeline.stages = 2;
  mo->pipeline.micro_batches = 2;
  mo->pipeline.n_balance = 0;
  mo->pipeline.n_devices = 1;
  snprintf(mo->pipeline.devices[0], sizeof mo->pipeline.devices[0], "%s", device);
  gp_plan plan;
  gp_trainer t;
  gp_pipeline_opts po = {.cores = 1, .precision = GP_PREC_BF16};
  int ok = gp_plan_make(mo, &mo->pipeline, &plan) == GP_OK &&
           gp_trainer_init(&t, mo, &plan, &po, 42) == GP_OK;
  if (!ok) {
    printf("FAIL: %s: pipeline: %s\n", device, gp_error_message());
    gp_model_free(mo);
    return 0;
  }
  const int64_t per = gp_shape_numel(&mo->inputs[0].shape);
  float *x = xmalloc(sizeof(float) * (size_t)(BATCH * per));
  int32_t y[BATCH];
  for (int s = 0; ok && s < STEPS; s++) {
    gp_rng r;
    gp_rng_seed(&r, 500 + (uint64_t)s);
    for (int64_t i = 0; i < BATCH * per; i++)
      x[i] = 2.0f * gp_rng_uniform(&r) - 1.0f;
    for (int i = 0; i < BATCH; i++)
      y[i] = (int32_t)gp_rng_below(&r, 5);
    gp_metrics mt;
    ok = gp_t_step_xy(&t, x, y, BATCH, mo->train.lr, &mt) == GP_OK;
    if (ok) loss[s] = mt.loss;
  }
  ok = ok && gp_pipeline_sync(t.pl) == GP_OK;
  *n_w = 0;
  for (int s = 0; s < gp_pipeline_stages(t.pl); s++)
    *n_w += gp_pipeline_params(t.pl, s)->n_train;
  *w = xmalloc(sizeof(float) * (size_t)(*n_w));
  int64_t at = 0;
  for (int s = 0; ok && s < gp_pipeline_stages(t.pl); s++) {
    gp_params *p = gp_pipeline_params(t.pl, s);
    gp_backend *be = gp_pipeline_backend(t.pl, s);
    ok = be->precision == GP_PREC_BF16 &&
         be->to_host(be, *w + at, p->train, sizeof(float) * (size_t)p->n_train) == GP_OK;
    at += p->n_train;
  }
  if (!ok) printf("FAIL: %s: training: %s\n", device, gp_error_message());
  free(x);
  gp_trainer_free(&t);
  gp_model_free(mo);
  return ok;
}

static void test_training(void) {
  double lc[STEPS], lg[STEPS];
  float *wc = NULL, *wg = NULL;
  int64_t nc = 0, ng = 0;
  int okc = train_cnn("cpu", lc, &wc, &nc), okg = train_cnn("cuda:0", lg, &wg, &ng);
  CHECK(okc && okg, "training on the cpu (%d) and on cuda:0 (%d)", okc, okg);
  if (okc && okg) {
    double dl = 0, dw = 0, ref = 1e-30;
    for (int s = 0; s < STEPS; s++)
      dl = fmax(dl, fabs(lg[s] - lc[s]) / fabs(lc[s]));
    for (int64_t i = 0; i < nc && nc == ng; i++) {
      dw = fmax(dw, fabs((double)wg[i] - wc[i]));
      ref = fmax(ref, fabs((double)wc[i]));
    }
    CHECK(nc == ng && dl <= TOL_TRAIN && dw / ref <= TOL_TRAIN,
          "bf16 training on cuda:0 against the cpu: loss rel diff %.3g, weight rel diff %.3g "
          "(%lld vs %lld weights)",
          dl, dw / ref, (long long)nc, (long long)ng);
  }
  free(wc);
  free(wg);
}

int main(void) {
  cc_ctx c;
  int r = cc_open(&c);
  if (r != 0) return r;
  test_rounding(&c);
  test_gemm(&c);
  test_conv(&c);
  cc_close(&c);
  test_training();
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
