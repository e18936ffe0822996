/* The CUDA backend's fusion ops against the CPU's composition of the unfused ops (what a fused
 * node runs on the CPU, core/fused.c): be->linear_act_forward (cuBLASLt's bias + ReLU / GELU
 * epilogues) against gemm, bias_add and act_forward, in fp32 and bf16, with and without a
 * bias, and the shapes it declines; be->add_layernorm_forward and be->add_rmsnorm_forward
 * against add, then the norm, with and without bf16-mixed's rounding of the sum. Exits 77
 * (skipped) without a CUDA device. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/cuda/cuda_check.h"
#include "tests/support/check.h"

static int failures, passes;

/* The tolerances (normalized MSE), each with its reason. */
/* A GEMM in another summation order (cuBLASLt's kernels against OpenBLAS; bf16: the same
 * rounded operands, f32 sums in another order): ~1e-12 for k <= 300, as test_cuda_ops.c's
 * TOL_GEMM; TF32 (~1e-7) would fail it. The epilogue's GELU (tanh) is the same formula as
 * the CPU's within a few ulps. */
#define TOL_GEMM 1e-9
/* The sum is exact (one IEEE addition on both sides); the norm's row sums in another order
 * (a block tree against the CPU's loop): ~1e-13, as test_cuda_norm.c's TOL_NORM. */
#define TOL_NORM 1e-10

#define CPUF(pair) ((float *)(pair).cpu.p)
#define GPUF(pair) ((float *)(pair).gpu.p)

static const char *act_name(gp_activation a) {
  return a == GP_ACTIVATION_RELU ? "relu" : a == GP_ACTIVATION_GELU ? "gelu" : "gelu tanh";
}

/* One shape, activation, bias and precision: want_taken says whether the op must take it. */
static void linear_act_one(cc_ctx *c, gp_precision prec, gp_activation act, int64_t rows, int64_t n,
                           int64_t k, int bias, int want_taken, uint64_t seed) {
  char what[160];
  snprintf(what, sizeof what, "linear %lldx%lldx%lld + %s%s (%s)", (long long)rows, (long long)n,
           (long long)k, act_name(act), bias ? ", bias" : "",
           prec == GP_PREC_FP32 ? "fp32" : "bf16");
  c->cpu->precision = c->gpu->precision = prec;
  float *hx = malloc(sizeof(float) * (size_t)(rows * k)),
        *hw = malloc(sizeof(float) * (size_t)(n * k));
  float *hb = malloc(sizeof(float) * (size_t)n);
  if (!hx || !hw || !hb) exit(1);
  cc_fill_normal(hx, rows * k, seed, 1.0f);
  cc_fill_normal(hw, n * k, seed + 1, 0.2f);
  cc_fill_normal(hb, n, seed + 2, 0.5f);
  cc_pair x, w, b, pre, z;
  size_t out = sizeof(float) * (size_t)(rows * n);
  gp_status st = cc_pair_alloc(c, sizeof(float) * (size_t)(rows * k), hx, &x);
  if (st == GP_OK) st = cc_pair_alloc(c, sizeof(float) * (size_t)(n * k), hw, &w);
  if (st == GP_OK) st = cc_pair_alloc(c, sizeof(float) * (size_t)n, hb, &b);
  if (st == GP_OK) st = cc_pair_alloc(c, out, NULL, &pre);
  if (st == GP_OK) st = cc_pair_alloc(c, out, NULL, &z);
  if (st != GP_OK) {
    printf("FAIL: %s: alloc: %s\n", what, gp_error_message());
    exit(1);
  }
  const int in_place = act == GP_ACTIVATION_RELU; /* (the fused node's ReLU: pre is z) */
  float *cpre = in_place ? CPUF(z) : CPUF(pre), *gpre = in_place ? GPUF(z) : GPUF(pre);
  /* the CPU: the unfused layers' ops */
  gp_backend *cb = c->cpu;
  st = cb->gemm(cb, 0, 1, rows, n, k, 1.0f, CPUF(x), k, CPUF(w), k, 0.0f, cpre, n);
  if (st == GP_OK && bias) st = cb->bias_add(cb, rows, n, 1, CPUF(b), cpre);
  if (st == GP_OK) st = cb->act_forward(cb, act, rows * n, cpre, CPUF(z));
  CHECK(st == GP_OK, "%s on the CPU", what);
  int taken = -1;
  CHECK(cb->linear_act_forward == NULL, "the CPU composes (no fused op)");
  st = c->gpu->linear_act_forward(c->gpu, act, rows, n, k, GPUF(x), GPUF(w), bias ? GPUF(b) : NULL,
                                  gpre, GPUF(z), &taken);
  CHECK(st == GP_OK && taken == want_taken, "%s: taken %d, want %d", what, taken, want_taken);
  if (st == GP_OK && taken == 1) {
    char w2[200];
    snprintf(w2, sizeof w2, "%s: output", what);
    CHECK(cc_pair_compare(&z, w2, rows * n, TOL_GEMM), "%s", w2);
    if (!in_place) {
      snprintf(w2, sizeof w2, "%s: pre-activation", what);
      CHECK(cc_pair_compare(&pre, w2, rows * n, TOL_GEMM), "%s", w2);
    }
  }
  cc_pair_free(&x);
  cc_pair_free(&w);
  cc_pair_free(&b);
  cc_pair_free(&pre);
  cc_pair_free(&z);
  free(hx);
  free(hw);
  free(hb);
  c->cpu->precision = c->gpu->precision = GP_PREC_FP32;
}

static void test_linear_act(cc_ctx *c) {
  static const gp_activation acts[] = {GP_ACTIVATION_RELU, GP_ACTIVATION_GELU,
                                       GP_ACTIVATION_GELU_TANH};
  static const gp_precision precs[] = {GP_PREC_FP32, GP_PREC_BF16, GP_PREC_BF16_MIXED};
  uint64_t seed = 100;
  for (size_t p = 0; p < 3; p++)
    for (size_t a = 0; a < 3; a++)
      for (int bias = 0; bias < 2; bias++) {
        linear_act_one(c, precs[p], acts[a], 37, 64, 48, bias, 1, seed += 10);
        linear_act_one(c, precs[p], acts[a], 256, 1024, 256, bias, 1, seed += 10); /* a FFN's */
      }
  /* declined: GELU tanh's aux output needs n a multiple of 8; silu has no epilogue */
  linear_act_one(c, GP_PREC_FP32, GP_ACTIVATION_GELU_TANH, 5, 20, 12, 1, 0, 900);
  linear_act_one(c, GP_PREC_FP32, GP_ACTIVATION_SILU, 5, 16, 12, 1, 0, 910);
}

/* add + layernorm (rms 0) or add + rmsnorm (rms 1) */
static void add_norm_one(cc_ctx *c, int rms, int round_sum, int64_t rows, int64_t cols,
                         uint64_t seed) {
  char what[160];
  snprintf(what, sizeof what, "add + %s %lldx%lld%s", rms ? "rmsnorm" : "layernorm",
           (long long)rows, (long long)cols, round_sum ? " (sum rounded to bf16)" : "");
  int64_t n = rows * cols;
  float *ha = malloc(sizeof(float) * (size_t)n), *hb = malloc(sizeof(float) * (size_t)n);
  float *hg = malloc(sizeof(float) * (size_t)cols), *hbeta = malloc(sizeof(float) * (size_t)cols);
  if (!ha || !hb || !hg || !hbeta) exit(1);
  cc_fill_normal(ha, n, seed, 1.0f);
  cc_fill_normal(hb, n, seed + 1, 2.0f);
  cc_fill_uniform(hg, cols, seed + 2, 0.5f, 1.5f);
  cc_fill_normal(hbeta, cols, seed + 3, 0.3f);
  cc_pair a, b, g, be_, s, y, mean, rstd;
  size_t bytes = sizeof(float) * (size_t)n, rb = sizeof(float) * (size_t)rows;
  gp_status st = cc_pair_alloc(c, bytes, ha, &a);
  if (st == GP_OK) st = cc_pair_alloc(c, bytes, hb, &b);
  if (st == GP_OK) st = cc_pair_alloc(c, sizeof(float) * (size_t)cols, hg, &g);
  if (st == GP_OK) st = cc_pair_alloc(c, sizeof(float) * (size_t)cols, hbeta, &be_);
  if (st == GP_OK) st = cc_pair_alloc(c, bytes, NULL, &s);
  if (st == GP_OK) st = cc_pair_alloc(c, bytes, NULL, &y);
  if (st == GP_OK) st = cc_pair_alloc(c, rb, NULL, &mean);
  if (st == GP_OK) st = cc_pair_alloc(c, rb, NULL, &rstd);
  if (st != GP_OK) {
    printf("FAIL: %s: alloc: %s\n", what, gp_error_message());
    exit(1);
  }
  gp_backend *cb = c->cpu, *gb = c->gpu;
  /* the CPU: the add layer's copy and axpby, the pass's rounding, then the norm */
  st = cb->copy(cb, s.cpu.p, a.cpu.p, bytes);
  if (st == GP_OK) st = cb->axpby(cb, n, 1.0f, CPUF(b), 1.0f, CPUF(s));
  if (st == GP_OK && round_sum) st = cb->round_bf16(cb, n, CPUF(s));
  if (st == GP_OK)
    st = rms ? cb->rmsnorm_forward(cb, rows, cols, 1e-5f, CPUF(s), CPUF(g), CPUF(y), CPUF(rstd))
             : cb->layernorm_forward(cb, rows, cols, 1e-5f, CPUF(s), CPUF(g), CPUF(be_), CPUF(y),
                                     CPUF(mean), CPUF(rstd));
  CHECK(st == GP_OK, "%s on the CPU", what);
  CHECK(cb->add_layernorm_forward == NULL && cb->add_rmsnorm_forward == NULL,
        "the CPU composes (no fused op)");
  st = rms ? gb->add_rmsnorm_forward(gb, rows, cols, 1e-5f, round_sum, GPUF(a), GPUF(b), GPUF(g),
                                     GPUF(s), GPUF(y), GPUF(rstd))
           : gb->add_layernorm_forward(gb, rows, cols, 1e-5f, round_sum, GPUF(a), GPUF(b), GPUF(g),
                                       GPUF(be_), GPUF(s), GPUF(y), GPUF(mean), GPUF(rstd));
  CHECK(st == GP_OK, "%s on CUDA", what);
  char w2[200];
  snprintf(w2, sizeof w2, "%s: sum", what);
  CHECK(cc_pair_equal(&s, w2), "%s: the CPU's bits", w2);
  snprintf(w2, sizeof w2, "%s: output", what);
  CHECK(cc_pair_compare(&y, w2, n, TOL_NORM), "%s", w2);
  snprintf(w2, sizeof w2, "%s: rstd", what);
  CHECK(cc_pair_compare(&rstd, w2, rows, TOL_NORM), "%s", w2);
  if (!rms) {
    snprintf(w2, sizeof w2, "%s: mean", what);
    CHECK(cc_pair_compare(&mean, w2, rows, TOL_NORM), "%s", w2);
  }
  cc_pair *all[] = {&a, &b, &g, &be_, &s, &y, &mean, &rstd};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    cc_pair_free(all[i]);
  free(ha);
  free(hb);
  free(hg);
  free(hbeta);
}

static void test_add_norm(cc_ctx *c) {
  uint64_t seed = 2000;
  for (int rms = 0; rms < 2; rms++)
    for (int round_sum = 0; round_sum < 2; round_sum++) {
      add_norm_one(c, rms, round_sum, 7, 33, seed += 10);
      add_norm_one(c, rms, round_sum, 64, 768, seed += 10); /* GPT-2 small's rows */
      add_norm_one(c, rms, round_sum, 3, 2500, seed += 10); /* a wide row */
    }
}

int main(void) {
  cc_ctx c;
  int r = cc_open(&c);
  if (r != 0) return r;
  test_linear_act(&c);
  test_add_norm(&c);
  cc_close(&c);
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
