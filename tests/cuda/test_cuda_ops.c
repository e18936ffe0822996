/* The CUDA backend's memory, GEMM, element-wise, bias, reduction and optimizer ops against the
 * CPU backend on random inputs (odd sizes, n = 1, NaN/Inf among the inputs), outputs guarded
 * by sentinel bytes; no device-memory growth over repeated calls; errors come back as status.
 * Exits 77 (skipped) without a CUDA device. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cuda/cuda.h"
#include "gp_config.h"
#include "tests/support/check.h"
#include "tests/cuda/cuda_check.h"

#if GP_HAVE_CUDA
#include <cuda_runtime.h>
#endif

static int failures, passes;

/* The tolerances (normalized MSE), each with its reason. Ops whose arithmetic is the same
 * IEEE operations in the same order on both backends are compared byte for byte instead. */
/* The same IEEE operations on both sides, compared as floats (a NaN's payload differs: CUDA
 * makes canonical NaNs, x86 propagates the input's), so nmse must be exactly 0. */
#define TOL_EXACT 0.0
/* erff/tanhf/expf of CUDA and glibc differ by an ulp or two: nmse ~1e-14. */
#define TOL_TRANSCENDENTAL 1e-10
/* The same float operations in the same order (the kernels avoid FMA contraction): expected
 * to be exact; 1e-10 leaves room for a compiler that contracts on the CPU side. */
#define TOL_ELEMENTWISE 1e-10
/* Sums in another order (double partials on the GPU, float or double on the CPU): ~1e-14. */
#define TOL_REDUCE 1e-10
/* fp32 GEMM in another summation order: ~1e-12 for k <= 300. TF32 tensor cores (10-bit
 * mantissa) would give ~1e-7, so this also checks that TF32 is off. */
#define TOL_GEMM 1e-9
/* sum/sumsq to the host in double, another order: relative to the sum of |terms|. */
#define TOL_SUM_REL 1e-12

#define CPUF(pair) ((float *)(pair).cpu.p)
#define GPUF(pair) ((float *)(pair).gpu.p)
#define CPUI(pair) ((int32_t *)(pair).cpu.p)
#define GPUI(pair) ((int32_t *)(pair).gpu.p)

static const int64_t sizes[] = {1, 7, 256, 1000, 65537};
#define NSIZES (int64_t)(sizeof sizes / sizeof sizes[0])

static float *host_floats(int64_t n) {
  float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
  if (!p) {
    printf("out of host memory\n");
    exit(1);
  }
  return p;
}

/* NaN, +-Inf, signed zeros and saturating values at fixed places (when there is room). Not
 * huge finite ones: their square would dominate the normalized MSE and hide the rest. */
static void add_specials(float *h, int64_t n) {
  if (n < 16) return;
  h[1] = NAN;
  h[3] = INFINITY;
  h[5] = -INFINITY;
  h[7] = 0.0f;
  h[9] = -0.0f;
  h[11] = 30.0f;
  h[13] = -30.0f;
}

/* Both calls succeeded (or says which did not). */
static int both_ok(gp_status a, gp_status b, const char *what) {
  if (a == GP_OK && b == GP_OK) return 1;
  printf("  %s: cpu %s, cuda %s: %s\n", what, gp_status_name(a), gp_status_name(b),
         gp_error_message());
  return 0;
}

/* Allocates a pair or ends the test (the harness cannot go on without buffers). */
static void pair(cc_ctx *c, size_t bytes, const void *host, cc_pair *p) {
  if (cc_pair_alloc(c, bytes, host, p) != GP_OK) {
    printf("allocating %zu bytes failed: %s\n", bytes, gp_error_message());
    exit(1);
  }
}

static void test_memory(cc_ctx *c) {
  for (int64_t si = 0; si < NSIZES; si++) {
    int64_t n = sizes[si];
    size_t bytes = (size_t)n * sizeof(float);
    float *h = host_floats(n);
    cc_fill_normal(h, n, 100 + (uint64_t)n, 1.0f);
    cc_pair src, dst;
    pair(c, bytes, h, &src);
    pair(c, bytes, NULL, &dst);
    char what[64];
    snprintf(what, sizeof what, "copy n=%lld", (long long)n);
    CHECK(both_ok(c->cpu->copy(c->cpu, CPUF(dst), CPUF(src), bytes),
                  c->gpu->copy(c->gpu, GPUF(dst), GPUF(src), bytes), what) &&
              cc_pair_equal(&dst, what),
          "%s", what);
    /* Overlapping ranges both ways (memmove semantics). */
    if (n > 4) {
      size_t part = bytes - 3 * sizeof(float);
      snprintf(what, sizeof what, "overlapping copy n=%lld", (long long)n);
      CHECK(both_ok(c->cpu->copy(c->cpu, CPUF(src) + 3, CPUF(src), part),
                    c->gpu->copy(c->gpu, GPUF(src) + 3, GPUF(src), part), what) &&
                both_ok(c->cpu->copy(c->cpu, CPUF(src), CPUF(src) + 1, part),
                        c->gpu->copy(c->gpu, GPUF(src), GPUF(src) + 1, part), what) &&
                cc_pair_equal(&src, what),
            "%s", what);
    }
    snprintf(what, sizeof what, "zero n=%lld", (long long)n);
    CHECK(both_ok(c->cpu->zero(c->cpu, CPUF(dst), bytes), c->gpu->zero(c->gpu, GPUF(dst), bytes),
                  what) &&
              cc_pair_equal(&dst, what),
          "%s", what);
    cc_pair_free(&src);
    cc_pair_free(&dst);
    free(h);
  }

  /* Scratch grows only and keeps its pointer while big enough. */
  void *s1 = NULL, *s2 = NULL, *s3 = NULL;
  CHECK(c->gpu->scratch(c->gpu, 1000, &s1) == GP_OK && c->gpu->scratch(c->gpu, 10, &s2) == GP_OK &&
            s1 == s2,
        "scratch keeps its buffer for a smaller request");
  CHECK(c->gpu->scratch(c->gpu, 1 << 20, &s3) == GP_OK && s3 != NULL, "scratch grows");
  void *z = NULL;
  CHECK(c->gpu->alloc(c->gpu, 0, &z) == GP_OK && z != NULL, "alloc of 0 bytes gives a pointer");
  c->gpu->free(c->gpu, z);
  c->gpu->free(c->gpu, NULL);
  CHECK(c->gpu->sync(c->gpu) == GP_OK, "sync");
}

static void test_copy2d(cc_ctx *c) {
  static const int64_t shapes[][4] = {/* rows, cols, src_ld, dst_ld */
                                      {1, 1, 1, 1},     {3, 5, 5, 5}, {4, 7, 9, 11},
                                      {33, 17, 20, 17}, {5, 3, 1, 4}, {129, 257, 300, 260}};
  for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
    const int64_t rows = shapes[t][0], cols = shapes[t][1], sld = shapes[t][2], dld = shapes[t][3];
    const int64_t ns = (rows - 1) * sld + cols, nd = (rows - 1) * dld + cols;
    float *h = host_floats(ns);
    cc_fill_normal(h, ns, 7 + (uint64_t)t, 1.0f);
    cc_pair src, dst;
    pair(c, (size_t)ns * sizeof(float), h, &src);
    pair(c, (size_t)nd * sizeof(float), NULL, &dst); /* gaps between rows stay sentinel */
    char what[80];
    snprintf(what, sizeof what, "copy2d %lldx%lld ld %lld/%lld", (long long)rows, (long long)cols,
             (long long)sld, (long long)dld);
    CHECK(both_ok(c->cpu->copy2d(c->cpu, rows, cols, CPUF(src), sld, CPUF(dst), dld),
                  c->gpu->copy2d(c->gpu, rows, cols, GPUF(src), sld, GPUF(dst), dld), what) &&
              cc_pair_equal(&dst, what),
          "%s", what);
    cc_pair_free(&src);
    cc_pair_free(&dst);
    free(h);
  }
}

static void test_gemm(cc_ctx *c) {
  static const int64_t shapes[][3] = {{1, 1, 1},    {7, 5, 3},      {1, 9, 17},  {13, 1, 5},
                                      {33, 17, 65}, {128, 96, 200}, {5, 300, 1}, {4, 6, 0}};
  static const float betas[] = {0.0f, 0.7f, 1.0f};
  for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++)
        for (int bi = 0; bi < 3; bi++) {
          const int64_t m = shapes[t][0], n = shapes[t][1], k = shapes[t][2];
          const float alpha = 1.3f, beta = betas[bi];
          /* Padded leading dimensions: the padding must stay untouched. */
          const int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
          const int64_t lda = ac + 3, ldb = bc + 1, ldc = n + 2;
          const int64_t na = ar * lda + 1, nb = br * ldb + 1, nc = m * ldc;
          float *ha = host_floats(na), *hb = host_floats(nb), *hc = host_floats(nc);
          cc_fill_normal(ha, na, 11 + t, 1.0f);
          cc_fill_normal(hb, nb, 12 + t, 1.0f);
          cc_fill_normal(hc, nc, 13 + t, 1.0f);
          for (int64_t i = 0; i < m; i++)
            for (int64_t j = n; j < ldc; j++)
              hc[i * ldc + j] = NAN; /* padding: a NaN where nothing may be written */
          cc_pair a, b, cp;
          pair(c, (size_t)na * sizeof(float), ha, &a);
          pair(c, (size_t)nb * sizeof(float), hb, &b);
          /* beta == 0: C is not read, so start from the NaN sentinel. */
          pair(c, (size_t)nc * sizeof(float), beta == 0.0f ? NULL : hc, &cp);
          char what[96];
          snprintf(what, sizeof what, "gemm %lldx%lldx%lld ta %d tb %d beta %g", (long long)m,
                   (long long)n, (long long)k, ta, tb, (double)beta);
          int ok = both_ok(c->cpu->gemm(c->cpu, ta, tb, m, n, k, alpha, CPUF(a), lda, CPUF(b), ldb,
                                        beta, CPUF(cp), ldc),
                           c->gpu->gemm(c->gpu, ta, tb, m, n, k, alpha, GPUF(a), lda, GPUF(b), ldb,
                                        beta, GPUF(cp), ldc),
                           what);
          CHECK(ok && cc_pair_compare(&cp, what, nc, TOL_GEMM), "%s", what);
          cc_pair_free(&a);
          cc_pair_free(&b);
          cc_pair_free(&cp);
          free(ha);
          free(hb);
          free(hc);
        }
}

static void test_act(cc_ctx *c) {
  static const char *names[GP_ACTIVATION_COUNT] = {"relu",    "gelu",      "tanh",
                                                   "sigmoid", "gelu_tanh", "silu"};
  for (int act = 0; act < GP_ACTIVATION_COUNT; act++)
    for (int64_t si = 0; si < NSIZES; si++) {
      const int64_t n = sizes[si];
      const size_t bytes = (size_t)n * sizeof(float);
      float *hx = host_floats(n), *hd = host_floats(n);
      cc_fill_normal(hx, n, 21 + (uint64_t)act, 3.0f);
      add_specials(hx, n);
      cc_fill_normal(hd, n, 22, 1.0f);
      cc_pair x, y, dy, dx;
      pair(c, bytes, hx, &x);
      pair(c, bytes, NULL, &y);
      pair(c, bytes, hd, &dy);
      pair(c, bytes, NULL, &dx);
      char what[64];
      snprintf(what, sizeof what, "act_forward %s n=%lld", names[act], (long long)n);
      int ok = both_ok(c->cpu->act_forward(c->cpu, (gp_activation)act, n, CPUF(x), CPUF(y)),
                       c->gpu->act_forward(c->gpu, (gp_activation)act, n, GPUF(x), GPUF(y)), what);
      CHECK(ok && cc_pair_compare(&y, what, n, TOL_TRANSCENDENTAL), "%s", what);
      /* The CUDA backward gets the CPU's forward output, so only backward is compared. */
      float *hy = host_floats(n);
      if (cc_buf_download(&y.cpu, hy, bytes) == GP_OK) (void)cc_pair_upload(&y, hy);
      snprintf(what, sizeof what, "act_backward %s n=%lld", names[act], (long long)n);
      ok = both_ok(
          c->cpu->act_backward(c->cpu, (gp_activation)act, n, CPUF(x), CPUF(y), CPUF(dy), CPUF(dx)),
          c->gpu->act_backward(c->gpu, (gp_activation)act, n, GPUF(x), GPUF(y), GPUF(dy), GPUF(dx)),
          what);
      CHECK(ok && cc_pair_compare(&dx, what, n, TOL_TRANSCENDENTAL), "%s", what);
      cc_pair_free(&x);
      cc_pair_free(&y);
      cc_pair_free(&dy);
      cc_pair_free(&dx);
      free(hx);
      free(hd);
      free(hy);
    }
}

static void test_dropout(cc_ctx *c) {
  static const float ps[] = {0.0f, 0.1f, 0.5f, 0.9f};
  const uint64_t key = 0x0123456789abcdefULL, offset = ((uint64_t)1 << 33) + 5;
  for (size_t pi = 0; pi < sizeof ps / sizeof ps[0]; pi++)
    for (int64_t si = 0; si < NSIZES; si++) {
      const int64_t n = sizes[si];
      const size_t bytes = (size_t)n * sizeof(float);
      const float p = ps[pi];
      float *hx = host_floats(n);
      cc_fill_normal(hx, n, 31, 1.0f);
      add_specials(hx, n);
      cc_pair x, y, dx;
      pair(c, bytes, hx, &x);
      pair(c, bytes, NULL, &y);
      pair(c, bytes, NULL, &dx);
      char what[64];
      /* The same mask function and product on both: identical outputs. */
      snprintf(what, sizeof what, "dropout_forward p=%g n=%lld", (double)p, (long long)n);
      CHECK(both_ok(c->cpu->dropout_forward(c->cpu, n, p, key, offset, CPUF(x), CPUF(y)),
                    c->gpu->dropout_forward(c->gpu, n, p, key, offset, GPUF(x), GPUF(y)), what) &&
                cc_pair_compare(&y, what, n, TOL_EXACT),
            "%s", what);
      snprintf(what, sizeof what, "dropout_backward p=%g n=%lld", (double)p, (long long)n);
      CHECK(both_ok(c->cpu->dropout_backward(c->cpu, n, p, key, offset, CPUF(x), CPUF(dx)),
                    c->gpu->dropout_backward(c->gpu, n, p, key, offset, GPUF(x), GPUF(dx)), what) &&
                cc_pair_compare(&dx, what, n, TOL_EXACT),
            "%s", what);
      /* Recompute, and a micro-batch (the second half at its offset), reproduce the mask. */
      if (n > 1) {
        const int64_t h = n / 2;
        snprintf(what, sizeof what, "dropout recompute/split p=%g n=%lld", (double)p, (long long)n);
        CHECK(c->gpu->dropout_forward(c->gpu, n, p, key, offset, GPUF(x), GPUF(dx)) == GP_OK &&
                  c->gpu->dropout_forward(c->gpu, n - h, p, key, offset + (uint64_t)h, GPUF(x) + h,
                                          GPUF(dx) + h) == GP_OK &&
                  c->cpu->dropout_forward(c->cpu, n, p, key, offset, CPUF(x), CPUF(dx)) == GP_OK &&
                  cc_pair_compare(&dx, what, n, TOL_EXACT),
              "%s", what);
      }
      cc_pair_free(&x);
      cc_pair_free(&y);
      cc_pair_free(&dx);
      free(hx);
    }
}

static void test_axpby(cc_ctx *c) {
  static const float bs[] = {0.0f, 1.0f, -0.3f};
  for (size_t bi = 0; bi < sizeof bs / sizeof bs[0]; bi++)
    for (int64_t si = 0; si < NSIZES; si++) {
      const int64_t n = sizes[si];
      const size_t bytes = (size_t)n * sizeof(float);
      const float a = 1.7f, b = bs[bi];
      float *hx = host_floats(n), *hy = host_floats(n);
      cc_fill_normal(hx, n, 41, 1.0f);
      add_specials(hx, n);
      cc_fill_normal(hy, n, 42, 1.0f);
      cc_pair x, y;
      pair(c, bytes, hx, &x);
      pair(c, bytes, b == 0.0f ? NULL : hy, &y); /* b == 0: y is not read (NaN sentinel) */
      char what[64];
      snprintf(what, sizeof what, "axpby b=%g n=%lld", (double)b, (long long)n);
      CHECK(both_ok(c->cpu->axpby(c->cpu, n, a, CPUF(x), b, CPUF(y)),
                    c->gpu->axpby(c->gpu, n, a, GPUF(x), b, GPUF(y)), what) &&
                cc_pair_compare(&y, what, n, TOL_ELEMENTWISE),
            "%s", what);
      snprintf(what, sizeof what, "axpby x == y b=%g n=%lld", (double)b, (long long)n);
      CHECK(both_ok(c->cpu->axpby(c->cpu, n, a, CPUF(x), b, CPUF(x)),
                    c->gpu->axpby(c->gpu, n, a, GPUF(x), b, GPUF(x)), what) &&
                cc_pair_compare(&x, what, n, TOL_ELEMENTWISE),
            "%s", what);
      cc_pair_free(&x);
      cc_pair_free(&y);
      free(hx);
      free(hy);
    }
}

/* y = a * b, and in place over a and over b (the mul layer's gradients). */
static void test_mul(cc_ctx *c) {
  for (int64_t si = 0; si < NSIZES; si++) {
    const int64_t n = sizes[si];
    const size_t bytes = (size_t)n * sizeof(float);
    float *ha = host_floats(n), *hb = host_floats(n);
    cc_fill_normal(ha, n, 51, 1.0f);
    add_specials(ha, n);
    cc_fill_normal(hb, n, 52, 2.0f);
    cc_pair a, b, y;
    pair(c, bytes, ha, &a);
    pair(c, bytes, hb, &b);
    pair(c, bytes, NULL, &y);
    char what[64];
    snprintf(what, sizeof what, "mul n=%lld", (long long)n);
    CHECK(both_ok(c->cpu->mul(c->cpu, n, CPUF(a), CPUF(b), CPUF(y)),
                  c->gpu->mul(c->gpu, n, GPUF(a), GPUF(b), GPUF(y)), what) &&
              cc_pair_compare(&y, what, n, TOL_ELEMENTWISE),
          "%s", what);
    snprintf(what, sizeof what, "mul y == b n=%lld", (long long)n);
    CHECK(both_ok(c->cpu->mul(c->cpu, n, CPUF(a), CPUF(b), CPUF(b)),
                  c->gpu->mul(c->gpu, n, GPUF(a), GPUF(b), GPUF(b)), what) &&
              cc_pair_compare(&b, what, n, TOL_ELEMENTWISE),
          "%s", what);
    cc_pair_free(&a);
    cc_pair_free(&b);
    cc_pair_free(&y);
    free(ha);
    free(hb);
  }
}

static void test_bias(cc_ctx *c) {
  static const int64_t shapes[][3] = {{1, 1, 1},     {3, 5, 1},    {4, 7, 9},    {2, 300, 1},
                                      {2, 3, 4097},  {1000, 3, 1}, {64, 5, 300}, {3, 2000, 1},
                                      {200, 16, 49}, {1, 1, 70000}};
  for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
    const int64_t n = shapes[t][0], ch = shapes[t][1], inner = shapes[t][2];
    const int64_t total = n * ch * inner;
    float *hy = host_floats(total), *hb = host_floats(ch), *hd = host_floats(ch);
    cc_fill_normal(hy, total, 51 + t, 1.0f);
    cc_fill_normal(hb, ch, 52 + t, 1.0f);
    cc_fill_normal(hd, ch, 53 + t, 1.0f);
    cc_pair y, bias, db;
    pair(c, (size_t)total * sizeof(float), hy, &y);
    pair(c, (size_t)ch * sizeof(float), hb, &bias);
    pair(c, (size_t)ch * sizeof(float), hd, &db); /* += onto existing values */
    char what[80];
    snprintf(what, sizeof what, "bias_add %lldx%lldx%lld", (long long)n, (long long)ch,
             (long long)inner);
    CHECK(both_ok(c->cpu->bias_add(c->cpu, n, ch, inner, CPUF(bias), CPUF(y)),
                  c->gpu->bias_add(c->gpu, n, ch, inner, GPUF(bias), GPUF(y)), what) &&
              cc_pair_equal(&y, what),
          "%s", what);
    snprintf(what, sizeof what, "bias_grad %lldx%lldx%lld", (long long)n, (long long)ch,
             (long long)inner);
    CHECK(both_ok(c->cpu->bias_grad(c->cpu, n, ch, inner, CPUF(y), CPUF(db)),
                  c->gpu->bias_grad(c->gpu, n, ch, inner, GPUF(y), GPUF(db)), what) &&
              cc_pair_compare(&db, what, ch, TOL_REDUCE),
          "%s", what);
    cc_pair_free(&y);
    cc_pair_free(&bias);
    cc_pair_free(&db);
    free(hy);
    free(hb);
    free(hd);
  }
}

static int sums_agree(double want, double got, double scale) {
  if (isnan(want) || isnan(got)) return isnan(want) && isnan(got);
  if (isinf(want) || isinf(got)) return want == got;
  return fabs(want - got) <= TOL_SUM_REL * scale + 1e-300;
}

static void test_sums(cc_ctx *c) {
  for (int special = 0; special < 3; special++)
    for (int64_t si = 0; si < NSIZES; si++) {
      const int64_t n = sizes[si];
      float *hx = host_floats(n);
      cc_fill_normal(hx, n, 61, 2.0f);
      if (special == 1 && n > 4) hx[n / 2] = INFINITY;
      if (special == 2 && n > 4) hx[n - 1] = NAN;
      double scale = 0.0;
      for (int64_t i = 0; i < n; i++)
        scale += fabs((double)hx[i]) * (1.0 + fabs((double)hx[i]));
      cc_buf xb;
      if (cc_buf_alloc(c->gpu, (size_t)n * sizeof(float), hx, &xb) != GP_OK) {
        printf("alloc failed: %s\n", gp_error_message());
        exit(1);
      }
      double w1 = 0, g1 = 0, w2 = 0, g2 = 0;
      CHECK(both_ok(c->cpu->sum(c->cpu, n, hx, &w1), c->gpu->sum(c->gpu, n, xb.p, &g1), "sum") &&
                sums_agree(w1, g1, scale),
            "sum n=%lld special %d: cpu %.17g cuda %.17g", (long long)n, special, w1, g1);
      CHECK(both_ok(c->cpu->sumsq(c->cpu, n, hx, &w2), c->gpu->sumsq(c->gpu, n, xb.p, &g2),
                    "sumsq") &&
                sums_agree(w2, g2, scale),
            "sumsq n=%lld special %d: cpu %.17g cuda %.17g", (long long)n, special, w2, g2);
      CHECK(cc_buf_guards_ok(&xb, "sum input"), "sum input guards");
      cc_buf_free(&xb);
      free(hx);
    }
}

static void test_count_correct(cc_ctx *c) {
  static const int64_t shapes[][2] = {{1, 1}, {5, 10}, {300, 37}, {17, 1000}, {64, 33}};
  for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
    const int64_t n = shapes[t][0], k = shapes[t][1];
    float *hz = host_floats(n * k);
    int32_t *hl = malloc((size_t)n * sizeof(int32_t));
    if (!hl) exit(1);
    /* Small integers: many ties, which the first maximum must win. */
    cc_fill_uniform(hz, n * k, 71 + t, 0.0f, 4.0f);
    for (int64_t i = 0; i < n * k; i++)
      hz[i] = floorf(hz[i]);
    cc_fill_int(hl, n, 72 + t, 0, (int32_t)k);
    for (int64_t i = 0; i < n; i++) {
      const float *z = hz + i * k;
      int64_t best = 0;
      for (int64_t j = 1; j < k; j++)
        if (z[j] > z[best]) best = j;
      if (i % 2 == 0) hl[i] = (int32_t)best; /* half the rows right */
      if (k > 3 && i % 5 == 1) hz[i * k + 2] = NAN;
      if (k > 3 && i % 7 == 3) hz[i * k] = NAN;         /* NaNs win: the first one */
      if (k > 3 && i % 5 == 1 && i % 2 == 0) hl[i] = 2; /* the NaN's index: right, as torch */
      if (k > 3 && i % 11 == 4) hz[i * k + 1] = INFINITY;
    }
    cc_buf zb, lb;
    if (cc_buf_alloc(c->gpu, (size_t)(n * k) * sizeof(float), hz, &zb) != GP_OK ||
        cc_buf_alloc(c->gpu, (size_t)n * sizeof(int32_t), hl, &lb) != GP_OK) {
      printf("alloc failed: %s\n", gp_error_message());
      exit(1);
    }
    int64_t want = -1, got = -2;
    CHECK(both_ok(c->cpu->count_correct(c->cpu, n, k, hz, hl, &want),
                  c->gpu->count_correct(c->gpu, n, k, zb.p, lb.p, &got), "count_correct") &&
              want == got,
          "count_correct %lldx%lld: cpu %lld cuda %lld", (long long)n, (long long)k,
          (long long)want, (long long)got);
    cc_buf_free(&zb);
    cc_buf_free(&lb);
    free(hz);
    free(hl);
  }
}

/* Three steps of each optimizer from the same state; weights and state compared. */
static void test_optim(cc_ctx *c) {
  for (int64_t si = 0; si < NSIZES; si++)
    for (int variant = 0; variant < 3; variant++) {
      const int64_t n = sizes[si];
      const size_t bytes = (size_t)n * sizeof(float);
      float *hw = host_floats(n), *hg = host_floats(n), *hs = host_floats(n);
      cc_fill_normal(hw, n, 81, 1.0f);
      cc_fill_normal(hg, n, 82, 0.1f);
      cc_fill_uniform(hs, n, 83, 0.0f, 0.01f);
      cc_pair w, g, s1, s2;
      pair(c, bytes, hw, &w);
      pair(c, bytes, hg, &g);
      pair(c, bytes, hs, &s1);
      pair(c, bytes, hs, &s2);
      char what[64];
      int ok = 1;
      /* variant 0: no momentum (state buffer NULL); 1: momentum; 2: nesterov / more decay */
      gp_sgd_hp sgd = {0.05f, variant ? 0.9f : 0.0f, variant == 2 ? 0.01f : 1e-4f, variant == 2};
      for (int step = 0; step < 3 && ok; step++)
        ok = both_ok(
            c->cpu->sgd_update(c->cpu, n, &sgd, CPUF(w), CPUF(g), variant ? CPUF(s1) : NULL),
            c->gpu->sgd_update(c->gpu, n, &sgd, GPUF(w), GPUF(g), variant ? GPUF(s1) : NULL),
            "sgd_update");
      snprintf(what, sizeof what, "sgd variant %d n=%lld", variant, (long long)n);
      CHECK(ok && cc_pair_compare(&w, what, n, TOL_ELEMENTWISE) &&
                cc_pair_compare(&s1, what, n, TOL_ELEMENTWISE),
            "%s", what);

      gp_rmsprop_hp rms = {0.01f, 0.99f, 1e-8f, variant ? 0.9f : 0.0f, variant == 2 ? 0.01f : 0.0f};
      ok = 1;
      for (int step = 0; step < 3 && ok; step++)
        ok = both_ok(c->cpu->rmsprop_update(c->cpu, n, &rms, CPUF(w), CPUF(g), CPUF(s2),
                                            variant ? CPUF(s1) : NULL),
                     c->gpu->rmsprop_update(c->gpu, n, &rms, GPUF(w), GPUF(g), GPUF(s2),
                                            variant ? GPUF(s1) : NULL),
                     "rmsprop_update");
      snprintf(what, sizeof what, "rmsprop variant %d n=%lld", variant, (long long)n);
      CHECK(ok && cc_pair_compare(&w, what, n, TOL_ELEMENTWISE) &&
                cc_pair_compare(&s1, what, n, TOL_ELEMENTWISE) &&
                cc_pair_compare(&s2, what, n, TOL_ELEMENTWISE),
            "%s", what);

      ok = 1;
      for (int step = 1; step <= 3 && ok; step++) {
        gp_adamw_hp adam = {1e-3f, 0.9f, 0.999f, 1e-8f, variant ? 0.01f : 0.0f, step};
        ok = both_ok(c->cpu->adamw_update(c->cpu, n, &adam, CPUF(w), CPUF(g), CPUF(s1), CPUF(s2)),
                     c->gpu->adamw_update(c->gpu, n, &adam, GPUF(w), GPUF(g), GPUF(s1), GPUF(s2)),
                     "adamw_update");
      }
      snprintf(what, sizeof what, "adamw variant %d n=%lld", variant, (long long)n);
      CHECK(ok && cc_pair_compare(&w, what, n, TOL_ELEMENTWISE) &&
                cc_pair_compare(&s1, what, n, TOL_ELEMENTWISE) &&
                cc_pair_compare(&s2, what, n, TOL_ELEMENTWISE),
            "%s", what);
      cc_pair_free(&w);
      cc_pair_free(&g);
      cc_pair_free(&s1);
      cc_pair_free(&s2);
      free(hw);
      free(hg);
      free(hs);
    }
}

#if GP_HAVE_CUDA
/* One round of most ops (allocation, scratch, GEMM, reductions, updates) on the GPU. */
static gp_status one_round(gp_backend *be, float *a, float *b, float *cm, int32_t *labels) {
  void *p = NULL, *s = NULL;
  GP_TRY(be->alloc(be, (size_t)1 << 20, &p));
  be->free(be, p);
  GP_TRY(be->scratch(be, (size_t)1 << 16, &s));
  GP_TRY(be->gemm(be, 0, 1, 64, 64, 64, 1.0f, a, 64, b, 64, 0.0f, cm, 64));
  GP_TRY(be->bias_grad(be, 64, 64, 1, cm, a));
  GP_TRY(be->bias_grad(be, 4, 16, 64, cm, b));
  double d;
  int64_t k;
  GP_TRY(be->sum(be, 4096, cm, &d));
  GP_TRY(be->sumsq(be, 4096, cm, &d));
  GP_TRY(be->count_correct(be, 64, 64, cm, labels, &k));
  GP_TRY(be->act_forward(be, GP_ACTIVATION_GELU, 4096, cm, cm));
  GP_TRY(be->dropout_forward(be, 4096, 0.1f, 1, 0, cm, cm));
  gp_sgd_hp hp = {1e-3f, 0.9f, 0.0f, 0};
  GP_TRY(be->sgd_update(be, 4096, &hp, cm, a, b));
  return be->sync(be);
}

static void test_no_growth(cc_ctx *c) {
  gp_backend *be = c->gpu;
  float *a = NULL, *b = NULL, *cm = NULL;
  int32_t *labels = NULL;
  gp_status s = be->alloc(be, 4096 * sizeof(float), (void **)&a);
  if (s == GP_OK) s = be->alloc(be, 4096 * sizeof(float), (void **)&b);
  if (s == GP_OK) s = be->alloc(be, 4096 * sizeof(float), (void **)&cm);
  if (s == GP_OK) s = be->alloc(be, 64 * sizeof(int32_t), (void **)&labels);
  if (s == GP_OK) s = be->zero(be, a, 4096 * sizeof(float));
  if (s == GP_OK) s = be->zero(be, b, 4096 * sizeof(float));
  if (s == GP_OK) s = be->zero(be, labels, 64 * sizeof(int32_t));
  if (s == GP_OK) s = one_round(be, a, b, cm, labels); /* workspaces reach their size */
  size_t free0 = 0, free1 = 0, total = 0;
  CHECK(s == GP_OK && cudaMemGetInfo(&free0, &total) == cudaSuccess, "warm-up round");
  for (int i = 0; i < 50 && s == GP_OK; i++)
    s = one_round(be, a, b, cm, labels);
  CHECK(s == GP_OK && cudaMemGetInfo(&free1, &total) == cudaSuccess, "50 rounds");
  /* 4 MiB of slack for the driver's own bookkeeping; a leak of the 1 MiB allocation per round
   * would be 50 MiB. */
  CHECK(free1 + ((size_t)4 << 20) >= free0, "device memory grew: free %zu -> %zu bytes", free0,
        free1);
  be->free(be, a);
  be->free(be, b);
  be->free(be, cm);
  be->free(be, labels);
}
#else
static void test_no_growth(cc_ctx *c) {
  (void)c;
}
#endif

static void test_errors(cc_ctx *c) {
  gp_backend *be = c->gpu;
  float *buf = NULL;
  CHECK(be->alloc(be, 64 * sizeof(float), (void **)&buf) == GP_OK, "alloc");
  if (!buf) return;
  gp_error_clear();
  CHECK(be->gemm(be, 0, 0, (int64_t)1 << 40, 4, 4, 1.0f, buf, 4, buf, 4, 0.0f, buf, 4) ==
                GP_ERR_RUNTIME &&
            strstr(gp_error_message(), "gemm") != NULL,
        "gemm with m = 2^40 is a status");
  CHECK(be->gemm(be, 0, 0, 4, 4, 8, 1.0f, buf, 4, buf, 4, 0.0f, buf, 4) == GP_ERR_RUNTIME,
        "gemm with lda < k is a status");
  CHECK(be->gemm(be, 0, 0, 4, 4, 4, 1.0f, buf, 4, buf, -1, 0.0f, buf, 4) == GP_ERR_RUNTIME,
        "gemm with a negative ldb is a status");
  CHECK(be->copy2d(be, 4, 8, buf, 8, buf + 32, 4) == GP_ERR_RUNTIME,
        "copy2d with dst_ld < cols is a status");
  CHECK(be->dropout_forward(be, 8, 1.0f, 1, 0, buf, buf) == GP_ERR_RUNTIME &&
            be->dropout_backward(be, 8, NAN, 1, 0, buf, buf) == GP_ERR_RUNTIME,
        "dropout with p outside [0, 1) is a status");
  CHECK(be->act_forward(be, GP_ACTIVATION_COUNT, 8, buf, buf) == GP_ERR_RUNTIME &&
            be->act_backward(be, (gp_activation)-1, 8, buf, buf, buf, buf) == GP_ERR_RUNTIME,
        "an unknown activation is a status");
  void *huge = NULL;
  gp_error_clear();
  CHECK(be->alloc(be, (size_t)1 << 55, &huge) == GP_ERR_FULL && huge == NULL &&
            strstr(gp_error_message(), "out of memory") != NULL,
        "allocating 2^55 bytes is GP_ERR_FULL (device memory)");
  /* The instance still works after all of these. */
  double d = -1.0;
  CHECK(be->zero(be, buf, 64 * sizeof(float)) == GP_OK && be->sum(be, 64, buf, &d) == GP_OK &&
            d == 0.0 && be->sync(be) == GP_OK,
        "the backend works after errors");
  be->free(be, buf);
  gp_backend *bad = NULL;
  CHECK(gp_cuda_backend_create(9999, &bad) == GP_ERR_RUNTIME && bad == NULL,
        "a device that does not exist is GP_ERR_RUNTIME");
  CHECK(gp_cuda_backend_create(-1, &bad) == GP_ERR_RUNTIME && bad == NULL,
        "device -1 is GP_ERR_RUNTIME");
}

int main(void) {
  cc_ctx c;
  int rc = cc_open(&c);
  if (rc) return rc;
  test_memory(&c);
  test_copy2d(&c);
  test_gemm(&c);
  test_act(&c);
  test_dropout(&c);
  test_axpby(&c);
  test_mul(&c);
  test_bias(&c);
  test_sums(&c);
  test_count_correct(&c);
  test_optim(&c);
  test_no_growth(&c);
  test_errors(&c);
  cc_close(&c);
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
