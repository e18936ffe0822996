/* Fused attention (the CUDA backend's sdpa_forward / sdpa_backward, cuDNN's flash attention)
 * against the plain path on the same GPU in bf16: the chain layers/attention.c runs without it
 * (bf16 GEMMs per head, the masked softmax, its backward), over causal and not, key-padding
 * masks (f32 and i32), grouped-query heads (8 query heads on 2 key/value heads), sequence
 * lengths that are not multiples of 64, head widths 64 and 128. Q, K and V are strided views
 * of one [rows, (H + 2 Hkv) D] block, as the layer's projections are. Compared: the context
 * and all three input gradients, with the deterministic backward and (three of the shapes)
 * the nondeterministic one. Prints the cuDNN version; exits 77 without a CUDA device. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp_config.h"
#include "tests/cuda/cuda_check.h"

#if GP_HAVE_CUDA
size_t cudnnGetVersion(void);
#endif

/* How far the fused result may be from the plain path's: max |fused - plain| / max |plain|
 * over the tensor. bf16 keeps 8 significant bits, so one rounding moves a value by up to
 * 2^-9 (0.2%) of itself. Both paths round Q, K, V, dO and the probabilities to bf16; the
 * fused one also rounds its outputs, and rounds P unnormalized inside its tiles (online
 * softmax) where the plain path rounds the normalized P, so P's roundings fall differently. */
typedef struct tol {
  const char *what;
  double rel;
  const char *why;
} tol;
static const tol tols[] = {
    {"o", 1e-2,
     "its own rounding (2^-9 relative) and P's differing roundings, which average over the keys: "
     "about 2^-9 of |o|; 5 x that"},
    {"dq", 3e-2,
     "dS = P (dP - rowsum(dO O)) cancels: the fused rowsum reads the bf16-rounded O, the plain "
     "one sums P dP in f32, and the difference is amplified where dP is near its row's mean"},
    {"dk", 3e-2, "as dq (dS^T Q)"},
    {"dv", 1e-2, "P^T dO: P's roundings (2^-9 relative each) and the output's own rounding"},
};

typedef struct attn_case {
  int64_t b, h, hk, t, d;
  int causal;
  int mask; /* 0 none, 1 f32, 2 i32 */
} attn_case;

static const attn_case cases[] = {
    {2, 8, 8, 128, 64, 0, 0}, {2, 8, 8, 128, 64, 1, 0},  {2, 8, 2, 100, 64, 1, 0},
    {2, 8, 2, 77, 128, 0, 1}, {3, 8, 2, 130, 128, 1, 2}, {1, 12, 12, 256, 64, 1, 0},
    {2, 4, 1, 64, 128, 1, 1},
};

static int failures, passes;

static void *xmalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) {
    printf("out of host memory\n");
    exit(1);
  }
  return p;
}

#define TRY(call)                                                                                  \
  do {                                                                                             \
    if ((call) != GP_OK) {                                                                         \
      printf("FAIL %s: %s\n", #call, gp_error_message());                                          \
      failures++;                                                                                  \
      goto done;                                                                                   \
    }                                                                                              \
  } while (0)

/* The plain path, as layers/attention.c runs it: P [b, h, t, t] and ctx [b t, h d] from the
 * strided q, k, v (row stride ld); with dctx, dqkv (laid out like qkv) from it. */
static gp_status plain(gp_backend *be, const attn_case *k, const gp_attn_softmax_desc *sd,
                       const float *qkv, int64_t ld, float *p, float *ctx, const float *dctx,
                       float *dp, float *dqkv) {
  const int64_t t = k->t, d = k->d, hd = k->h * d, grp = k->h / k->hk;
  const float scale = (float)(1.0 / sqrt((double)d));
  const float *q = qkv, *kk = qkv + hd, *v = qkv + hd + k->hk * d;
  for (int64_t b = 0; b < k->b; b++)
    for (int64_t h = 0; h < k->h; h++)
      GP_TRY(be->gemm(be, 0, 1, t, t, d, scale, q + b * t * ld + h * d, ld,
                      kk + b * t * ld + h / grp * d, ld, 0.0f, p + (b * k->h + h) * t * t, t));
  GP_TRY(be->attn_softmax_forward(be, sd, p, p));
  for (int64_t b = 0; b < k->b; b++)
    for (int64_t h = 0; h < k->h; h++)
      GP_TRY(be->gemm(be, 0, 0, t, d, t, 1.0f, p + (b * k->h + h) * t * t, t,
                      v + b * t * ld + h / grp * d, ld, 0.0f, ctx + b * t * hd + h * d, hd));
  if (!dctx) return GP_OK;
  float *dq = dqkv, *dk = dqkv + hd, *dv = dqkv + hd + k->hk * d;
  for (int64_t b = 0; b < k->b; b++)
    for (int64_t h = 0; h < k->h; h++) {
      const int64_t sc = (b * k->h + h) * t * t, kv = b * t * ld + h / grp * d;
      const float beta = h % grp ? 1.0f : 0.0f;
      GP_TRY(be->gemm(be, 0, 1, t, t, d, 1.0f, dctx + b * t * hd + h * d, hd, v + kv, ld, 0.0f,
                      dp + sc, t));
      GP_TRY(be->gemm(be, 1, 0, t, d, t, 1.0f, p + sc, t, dctx + b * t * hd + h * d, hd, beta,
                      dv + kv, ld));
    }
  GP_TRY(be->softmax_backward(be, k->b * k->h * t, t, p, dp, dp));
  for (int64_t b = 0; b < k->b; b++)
    for (int64_t h = 0; h < k->h; h++) {
      const int64_t sc = (b * k->h + h) * t * t, kv = b * t * ld + h / grp * d,
                    qo = b * t * ld + h * d;
      const float beta = h % grp ? 1.0f : 0.0f;
      GP_TRY(be->gemm(be, 0, 0, t, d, t, scale, dp + sc, t, kk + kv, ld, 0.0f, dq + qo, ld));
      GP_TRY(be->gemm(be, 1, 0, t, d, t, scale, dp + sc, t, q + qo, ld, beta, dk + kv, ld));
    }
  return GP_OK;
}

/* max |got - ref| / max |ref| over the columns [c0, c0 + w) of rows of stride ld. */
static double rel_err(const float *ref, const float *got, int64_t rows, int64_t ld, int64_t c0,
                      int64_t w) {
  double dmax = 0, rmax = 0;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = c0; c < c0 + w; c++) {
      const double a = ref[r * ld + c], g = got[r * ld + c];
      if (!isfinite(g)) return INFINITY;
      if (fabs(a) > rmax) rmax = fabs(a);
      if (fabs(g - a) > dmax) dmax = fabs(g - a);
    }
  return rmax > 0 ? dmax / rmax : dmax;
}

static void check(const char *name, int which, double err) {
  const tol *t = &tols[which];
  if (err <= t->rel) {
    passes++;
    return;
  }
  failures++;
  printf("FAIL %s %s: max |fused - plain| / max |plain| = %.3g > %.3g (%s)\n", name, t->what, err,
         t->rel, t->why);
}

static void run_case(gp_backend *be, const attn_case *k) {
  const int64_t t = k->t, d = k->d, hd = k->h * d, ld = (k->h + 2 * k->hk) * d, rows = k->b * t,
                nscore = k->b * k->h * t * t;
  char name[96];
  snprintf(name, sizeof name, "b%lld h%lld/%lld t%lld d%lld%s%s%s", (long long)k->b,
           (long long)k->h, (long long)k->hk, (long long)t, (long long)d,
           k->causal ? " causal" : "",
           k->mask == 1   ? " mask f32"
           : k->mask == 2 ? " mask i32"
                          : "",
           be->nondeterministic ? " nondeterministic" : "");
  float *h_qkv = xmalloc((size_t)(rows * ld) * 4), *h_dctx = xmalloc((size_t)(rows * hd) * 4);
  float *h_keep = xmalloc((size_t)(k->b * t) * 4);
  int32_t *h_keep_i = xmalloc((size_t)(k->b * t) * 4);
  float *ref = xmalloc((size_t)(rows * ld) * 4), *got = xmalloc((size_t)(rows * ld) * 4);
  cc_fill_normal(h_qkv, rows * ld, 11 + (uint64_t)t, 1.0f);
  cc_fill_normal(h_dctx, rows * hd, 12 + (uint64_t)t, 1.0f);
  for (int64_t b = 0; b < k->b; b++) /* right padding: sample b keeps t - 7 b - 3 keys */
    for (int64_t j = 0; j < t; j++) {
      h_keep_i[b * t + j] = j < t - 7 * b - 3;
      h_keep[b * t + j] = (float)h_keep_i[b * t + j];
    }
  cc_buf qkv = {0}, keep = {0}, dctx = {0}, p = {0}, dp = {0}, ctx = {0}, ctx2 = {0}, lse = {0},
         dqkv = {0}, dqkv2 = {0};
  TRY(cc_buf_alloc(be, (size_t)(rows * ld) * 4, h_qkv, &qkv));
  TRY(cc_buf_alloc(be, (size_t)(k->b * t) * 4, k->mask == 2 ? (void *)h_keep_i : h_keep, &keep));
  TRY(cc_buf_alloc(be, (size_t)(rows * hd) * 4, h_dctx, &dctx));
  TRY(cc_buf_alloc(be, (size_t)nscore * 4, NULL, &p));
  TRY(cc_buf_alloc(be, (size_t)nscore * 4, NULL, &dp));
  TRY(cc_buf_alloc(be, (size_t)(rows * hd) * 4, NULL, &ctx));
  TRY(cc_buf_alloc(be, (size_t)(rows * hd) * 4, NULL, &ctx2));
  TRY(cc_buf_alloc(be, (size_t)(k->b * k->h * t) * 4, NULL, &lse));
  TRY(cc_buf_alloc(be, (size_t)(rows * ld) * 4, NULL, &dqkv));
  TRY(cc_buf_alloc(be, (size_t)(rows * ld) * 4, NULL, &dqkv2));
  gp_attn_softmax_desc sd = {k->b, k->h, t, t, k->causal, NULL, NULL, NULL, NULL};
  gp_sdpa_desc fd = {.batch = k->b,
                     .heads = k->h,
                     .kv_heads = k->hk,
                     .tq = t,
                     .tk = t,
                     .dh = d,
                     .ldq = ld,
                     .ldkv = ld,
                     .scale = (float)(1.0 / sqrt((double)d)),
                     .causal = k->causal,
                     .training = 1};
  if (k->mask == 1) sd.keep_f32 = fd.keep_f32 = keep.p;
  if (k->mask == 2) sd.keep_i32 = fd.keep_i32 = keep.p;
  TRY(plain(be, k, &sd, qkv.p, ld, p.p, ctx.p, dctx.p, dp.p, dqkv.p));
  const float *q = qkv.p;
  int taken = 0;
  TRY(be->sdpa_forward(be, &fd, q, q + hd, q + hd + k->hk * d, ctx2.p, lse.p, &taken));
  if (!taken) {
    failures++;
    printf("FAIL %s: the fused path was not taken (the line above says why)\n", name);
    goto done;
  }
  float *dq2 = dqkv2.p;
  TRY(be->sdpa_backward(be, &fd, q, q + hd, q + hd + k->hk * d, ctx2.p, lse.p, dctx.p, dq2,
                        dq2 + hd, dq2 + hd + k->hk * d));
  TRY(be->sync(be));
  TRY(cc_buf_download(&ctx, ref, (size_t)(rows * hd) * 4));
  TRY(cc_buf_download(&ctx2, got, (size_t)(rows * hd) * 4));
  check(name, 0, rel_err(ref, got, rows, hd, 0, hd));
  TRY(cc_buf_download(&dqkv, ref, (size_t)(rows * ld) * 4));
  TRY(cc_buf_download(&dqkv2, got, (size_t)(rows * ld) * 4));
  check(name, 1, rel_err(ref, got, rows, ld, 0, hd));
  check(name, 2, rel_err(ref, got, rows, ld, hd, k->hk * d));
  check(name, 3, rel_err(ref, got, rows, ld, hd + k->hk * d, k->hk * d));
  const cc_buf *all[] = {&qkv, &keep, &dctx, &ctx2, &lse, &dqkv2};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    if (!cc_buf_guards_ok(all[i], name)) failures++;
done:
  cc_buf_free(&qkv);
  cc_buf_free(&keep);
  cc_buf_free(&dctx);
  cc_buf_free(&p);
  cc_buf_free(&dp);
  cc_buf_free(&ctx);
  cc_buf_free(&ctx2);
  cc_buf_free(&lse);
  cc_buf_free(&dqkv);
  cc_buf_free(&dqkv2);
  free(h_qkv);
  free(h_dctx);
  free(h_keep);
  free(h_keep_i);
  free(ref);
  free(got);
}

int main(void) {
  cc_ctx c;
  int r = cc_open(&c);
  if (r != 0) return r;
#if GP_HAVE_CUDA
  printf("cuDNN %zu\n", cudnnGetVersion());
#endif
  gp_backend *be = c.gpu;
  if (!be->sdpa_forward || !be->sdpa_backward) {
    printf("FAIL: the CUDA backend has no fused attention (built against cuDNN older than 9)\n");
    cc_close(&c);
    return 1;
  }
  be->precision = GP_PREC_BF16;
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
    run_case(be, &cases[i]);
  /* --nondeterministic: the backward sums dQ in f32 across key blocks (another graph) */
  be->nondeterministic = 1;
  for (size_t i = 2; i < 5; i++)
    run_case(be, &cases[i]);
  cc_close(&c);
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
