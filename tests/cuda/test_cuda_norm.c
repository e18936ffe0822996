/* The CUDA backend's batch, layer and RMS norms against the CPU backend on random inputs:
 * forward in training and evaluation, statistics accumulated over micro-batches and pooled,
 * every backward (dx, dgamma, dbeta, alone and together, accumulating from random values); and
 * a norm's backward in a layer's halves (dx, then dgamma and dbeta) gives one call's bytes.
 * Exits 77 (skipped) without a CUDA device. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp_config.h"

static int failures, passes;

#include "tests/cuda/dnn_check.h"

/* Statistics summed in another order (double per element on the GPU, float rows in double on
 * the CPU; float trees for layer norm): ~1e-13 after normalization. */
#define TOL_NORM 1e-10
/* The same IEEE operations in the same order on both backends: finite values equal. */
#define TOL_EXACT 0.0

/* ---- a norm's backward in halves ---- */

/* One backward call of a norm on one side (0 CPU, 1 CUDA); dx, dg, db each may be NULL. */
typedef gp_status (*norm_back)(const void *ctx, gp_backend *be, int side, float *dx, float *dg,
                               float *db);

/* A layer's halves (layers/batchnorm.c, layernorm.c: B dx alone, then W dgamma and dbeta
 * alone) give the bytes of one call on each backend, the gradients starting from hdg, hdb. */
static void check_halves(cc_ctx *c, const char *what, norm_back f, const void *ctx, cc_pair *dx,
                         int64_t nx, cc_pair *dg, cc_pair *db, int64_t np, const float *hdg,
                         const float *hdb) {
  size_t bytes = (size_t)(nx + 2 * np) * 4;
  float *want = xmalloc(bytes), *got = xmalloc(bytes);
  for (int side = 0; side < 2; side++) {
    gp_backend *be = side ? c->gpu : c->cpu;
    cc_buf *bx = side ? &dx->gpu : &dx->cpu, *bg = side ? &dg->gpu : &dg->cpu;
    cc_buf *bb = side ? &db->gpu : &db->cpu;
    float *out[2] = {want, got};
    for (int split = 0; split < 2; split++) {
      gp_status st = cc_buf_upload(bg, hdg, (size_t)np * 4);
      if (st == GP_OK) st = cc_buf_upload(bb, hdb, (size_t)np * 4);
      if (st == GP_OK && !split) st = f(ctx, be, side, bx->p, bg->p, bb->p);
      if (st == GP_OK && split) st = f(ctx, be, side, bx->p, NULL, NULL);
      if (st == GP_OK && split) st = f(ctx, be, side, NULL, bg->p, bb->p);
      if (st == GP_OK) st = cc_buf_download(bx, out[split], (size_t)nx * 4);
      if (st == GP_OK) st = cc_buf_download(bg, out[split] + nx, (size_t)np * 4);
      if (st == GP_OK) st = cc_buf_download(bb, out[split] + nx + np, (size_t)np * 4);
      CHECK(st == GP_OK, "%s halves on %s: %s", what, be->name, gp_error_message());
    }
    CHECK(memcmp(want, got, bytes) == 0,
          "%s on %s: dx alone, then dgamma and dbeta alone, differ "
          "from one call",
          what, be->name);
  }
  free(want);
  free(got);
}

typedef struct norm_args {
  int64_t a, b, inner; /* batch norm: n, c, inner; layer norm: rows, cols */
  const cc_pair *x, *dy, *g, *mean, *inv;
} norm_args;

#define SIDE(q) ((float *)(side ? (q)->gpu.p : (q)->cpu.p))

static gp_status bn_back(const void *ctx, gp_backend *be, int side, float *dx, float *dg,
                         float *db) {
  const norm_args *k = ctx;
  return be->batchnorm_backward(be, k->a, k->b, k->inner, SIDE(k->x), SIDE(k->dy), SIDE(k->g),
                                SIDE(k->mean), SIDE(k->inv), dx, dg, db);
}

static gp_status ln_back(const void *ctx, gp_backend *be, int side, float *dx, float *dg,
                         float *db) {
  const norm_args *k = ctx;
  return be->layernorm_backward(be, k->a, k->b, SIDE(k->x), SIDE(k->dy), SIDE(k->g), SIDE(k->mean),
                                SIDE(k->inv), dx, dg, db);
}

/* ---- batch norm ---- */

static void test_bn_one(cc_ctx *c, int64_t n, int64_t ch, int64_t inner, uint64_t seed) {
  char what[96];
  snprintf(what, sizeof what, "batchnorm [%lld, %lld, %lld]", (long long)n, (long long)ch,
           (long long)inner);
  const int64_t nx = n * ch * inner, count = n * inner;
  const float eps = 1e-5f;
  float *hx = normal(nx, seed, 2.0f, 5.0f), *hdy = normal(nx, seed + 1, 1.0f, 0.0f);
  float *hg = normal(ch, seed + 2, 0.5f, 1.0f), *hb = normal(ch, seed + 3, 0.5f, 0.0f);
  float *hdg = normal(ch, seed + 4, 1.0f, 0.0f), *hdb = normal(ch, seed + 5, 1.0f, 0.0f);
  float *hrm = normal(ch, seed + 6, 1.0f, 0.0f), *hrv = normal(ch, seed + 7, 0.3f, 1.5f);
  float *hacc = normal(2 * ch, seed + 8, 1.0f, 2.0f);
  cc_pair x, dy, g, b, y, mean, inv, dx, dg, db, rm, rv, acc;
  mk(c, &x, (size_t)nx * 4, hx);
  mk(c, &dy, (size_t)nx * 4, hdy);
  mk(c, &g, (size_t)ch * 4, hg);
  mk(c, &b, (size_t)ch * 4, hb);
  mk(c, &y, (size_t)nx * 4, NULL);
  mk(c, &mean, (size_t)ch * 4, NULL);
  mk(c, &inv, (size_t)ch * 4, NULL);
  mk(c, &dx, (size_t)nx * 4, NULL);
  mk(c, &dg, (size_t)ch * 4, hdg);
  mk(c, &db, (size_t)ch * 4, hdb);
  mk(c, &rm, (size_t)ch * 4, hrm);
  mk(c, &rv, (size_t)ch * 4, hrv);
  mk(c, &acc, (size_t)(2 * ch) * 4, hacc);
  char msg[160];

  BOTH(c,
       be->batchnorm_forward_train(be, n, ch, inner, eps, F(x), F(g), F(b), F(y), F(mean), F(inv)));
  snprintf(msg, sizeof msg, "%s train y", what);
  cmp(&y, msg, nx, TOL_NORM);
  snprintf(msg, sizeof msg, "%s mean", what);
  cmp(&mean, msg, ch, TOL_NORM);
  snprintf(msg, sizeof msg, "%s invstd", what);
  cmp(&inv, msg, ch, TOL_NORM);

  /* Backward and the running statistics from the same (CPU) statistics on both sides. */
  float *hmean = xmalloc((size_t)ch * 4), *hinv = xmalloc((size_t)ch * 4);
  CHECK(cc_buf_download(&mean.cpu, hmean, (size_t)ch * 4) == GP_OK, "download");
  CHECK(cc_buf_download(&inv.cpu, hinv, (size_t)ch * 4) == GP_OK, "download");
  CHECK(cc_pair_upload(&mean, hmean) == GP_OK && cc_pair_upload(&inv, hinv) == GP_OK, "upload");
  BOTH(c, be->batchnorm_backward(be, n, ch, inner, F(x), F(dy), F(g), F(mean), F(inv), F(dx), F(dg),
                                 F(db)));
  snprintf(msg, sizeof msg, "%s dx", what);
  cmp(&dx, msg, nx, TOL_NORM);
  snprintf(msg, sizeof msg, "%s dgamma (+=)", what);
  cmp(&dg, msg, ch, TOL_NORM);
  snprintf(msg, sizeof msg, "%s dbeta (+=)", what);
  cmp(&db, msg, ch, TOL_NORM);
  /* Without dx and dgamma (a frozen scale, the first layer). */
  BOTH(c, be->batchnorm_backward(be, n, ch, inner, F(x), F(dy), F(g), F(mean), F(inv), NULL, NULL,
                                 F(db)));
  snprintf(msg, sizeof msg, "%s dbeta only (+=)", what);
  cmp(&db, msg, ch, TOL_NORM);
  norm_args na = {n, ch, inner, &x, &dy, &g, &mean, &inv};
  check_halves(c, what, bn_back, &na, &dx, nx, &dg, &db, ch, hdg, hdb);

  /* the first micro-batch's statistics, then another's (other means: inv) pooled with them */
  BOTH(c, be->batchnorm_stats_accumulate(be, ch, 0, count, eps, F(mean), F(inv), F(acc)));
  snprintf(msg, sizeof msg, "%s stats accumulate", what);
  cmp(&acc, msg, 2 * ch, TOL_EXACT);
  BOTH(c, be->batchnorm_stats_accumulate(be, ch, count, count + 3, eps, F(inv), F(inv), F(acc)));
  snprintf(msg, sizeof msg, "%s stats pooled", what);
  cmp(&acc, msg, 2 * ch, TOL_EXACT);
  BOTH(c, be->batchnorm_stats_apply(be, ch, 0.1f, 2 * count + 3, F(acc), F(rm), F(rv)));
  snprintf(msg, sizeof msg, "%s running mean", what);
  cmp(&rm, msg, ch, TOL_EXACT);
  snprintf(msg, sizeof msg, "%s running var", what);
  cmp(&rv, msg, ch, TOL_EXACT);
  snprintf(msg, sizeof msg, "%s accumulators cleared", what);
  cmp(&acc, msg, 2 * ch, TOL_EXACT);

  BOTH(c, be->batchnorm_forward_eval(be, n, ch, inner, eps, F(x), F(g), F(b), F(rm), F(rv), F(y)));
  snprintf(msg, sizeof msg, "%s eval y", what);
  cmp(&y, msg, nx, TOL_EXACT);

  cc_pair *all[] = {&x, &dy, &g, &b, &y, &mean, &inv, &dx, &dg, &db, &rm, &rv, &acc};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    cc_pair_free(all[i]);
  float *hs[] = {hx, hdy, hg, hb, hdg, hdb, hrm, hrv, hacc, hmean, hinv};
  for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++)
    free(hs[i]);
}

static void test_bn(cc_ctx *c) {
  test_bn_one(c, 4, 3, 25, 400);
  test_bn_one(c, 2, 16, 1, 410);   /* after a linear layer: inner 1 */
  test_bn_one(c, 8, 5, 1000, 420); /* several blocks per channel */
  test_bn_one(c, 1, 2, 7, 430);    /* one sample */
  test_bn_one(c, 3, 70, 9, 440);
  gp_backend *g = c->gpu;
  float *p = NULL;
  expect_error(g->batchnorm_forward_train(g, 0, 3, 4, 1e-5f, p, p, p, p, p, p), GP_ERR_RUNTIME,
               "empty batch", "batch norm over no samples");
}

/* ---- layer norm ---- */

static void test_ln_one(cc_ctx *c, int64_t rows, int64_t cols, uint64_t seed) {
  char what[96];
  snprintf(what, sizeof what, "layernorm [%lld, %lld]", (long long)rows, (long long)cols);
  const int64_t nx = rows * cols;
  const float eps = 1e-5f;
  float *hx = normal(nx, seed, 1.5f, 3.0f), *hdy = normal(nx, seed + 1, 1.0f, 0.0f);
  float *hg = normal(cols, seed + 2, 0.5f, 1.0f), *hb = normal(cols, seed + 3, 0.5f, 0.0f);
  float *hdg = normal(cols, seed + 4, 1.0f, 0.0f), *hdb = normal(cols, seed + 5, 1.0f, 0.0f);
  cc_pair x, dy, g, b, y, mean, rstd, dx, dg, db;
  mk(c, &x, (size_t)nx * 4, hx);
  mk(c, &dy, (size_t)nx * 4, hdy);
  mk(c, &g, (size_t)cols * 4, hg);
  mk(c, &b, (size_t)cols * 4, hb);
  mk(c, &y, (size_t)nx * 4, NULL);
  mk(c, &mean, (size_t)rows * 4, NULL);
  mk(c, &rstd, (size_t)rows * 4, NULL);
  mk(c, &dx, (size_t)nx * 4, NULL);
  mk(c, &dg, (size_t)cols * 4, hdg);
  mk(c, &db, (size_t)cols * 4, hdb);
  char msg[160];
  BOTH(c, be->layernorm_forward(be, rows, cols, eps, F(x), F(g), F(b), F(y), F(mean), F(rstd)));
  snprintf(msg, sizeof msg, "%s y", what);
  cmp(&y, msg, nx, TOL_NORM);
  snprintf(msg, sizeof msg, "%s mean", what);
  cmp(&mean, msg, rows, TOL_NORM);
  snprintf(msg, sizeof msg, "%s rstd", what);
  cmp(&rstd, msg, rows, TOL_NORM);
  /* mean and rstd are optional outputs */
  BOTH(c, be->layernorm_forward(be, rows, cols, eps, F(x), F(g), F(b), F(y), NULL, NULL));
  snprintf(msg, sizeof msg, "%s y without statistics", what);
  cmp(&y, msg, nx, TOL_NORM);

  float *hm = xmalloc((size_t)rows * 4), *hr = xmalloc((size_t)rows * 4);
  CHECK(cc_buf_download(&mean.cpu, hm, (size_t)rows * 4) == GP_OK, "download");
  CHECK(cc_buf_download(&rstd.cpu, hr, (size_t)rows * 4) == GP_OK, "download");
  CHECK(cc_pair_upload(&mean, hm) == GP_OK && cc_pair_upload(&rstd, hr) == GP_OK, "upload");
  BOTH(c, be->layernorm_backward(be, rows, cols, F(x), F(dy), F(g), F(mean), F(rstd), F(dx), F(dg),
                                 F(db)));
  snprintf(msg, sizeof msg, "%s dx", what);
  cmp(&dx, msg, nx, TOL_NORM);
  snprintf(msg, sizeof msg, "%s dgamma (+=)", what);
  cmp(&dg, msg, cols, TOL_NORM);
  snprintf(msg, sizeof msg, "%s dbeta (+=)", what);
  cmp(&db, msg, cols, TOL_NORM);
  BOTH(c, be->layernorm_backward(be, rows, cols, F(x), F(dy), F(g), F(mean), F(rstd), NULL, NULL,
                                 F(db)));
  snprintf(msg, sizeof msg, "%s dbeta only (+=)", what);
  cmp(&db, msg, cols, TOL_NORM);
  norm_args na = {rows, cols, 0, &x, &dy, &g, &mean, &rstd};
  check_halves(c, what, ln_back, &na, &dx, nx, &dg, &db, cols, hdg, hdb);

  cc_pair *all[] = {&x, &dy, &g, &b, &y, &mean, &rstd, &dx, &dg, &db};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    cc_pair_free(all[i]);
  float *hs[] = {hx, hdy, hg, hb, hdg, hdb, hm, hr};
  for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++)
    free(hs[i]);
}

static void test_ln(cc_ctx *c) {
  test_ln_one(c, 7, 33, 500);
  test_ln_one(c, 64, 512, 510);
  test_ln_one(c, 3, 1, 520);
  test_ln_one(c, 5, 2500, 530); /* a wide row: 512 threads */
  test_ln_one(c, 300, 20, 540); /* many rows: several row ranges for dgamma */
}

/* ---- RMS norm ---- */

static void test_rms_one(cc_ctx *c, int64_t rows, int64_t cols, uint64_t seed) {
  char what[96], msg[160];
  snprintf(what, sizeof what, "rmsnorm [%lld, %lld]", (long long)rows, (long long)cols);
  const int64_t nx = rows * cols;
  const float eps = 1e-6f;
  float *hx = normal(nx, seed, 1.5f, 0.5f), *hdy = normal(nx, seed + 1, 1.0f, 0.0f);
  float *hw = normal(cols, seed + 2, 0.5f, 1.0f), *hdw = normal(cols, seed + 3, 1.0f, 0.0f);
  cc_pair x, dy, w, y, rstd, dx, dw;
  mk(c, &x, (size_t)nx * 4, hx);
  mk(c, &dy, (size_t)nx * 4, hdy);
  mk(c, &w, (size_t)cols * 4, hw);
  mk(c, &y, (size_t)nx * 4, NULL);
  mk(c, &rstd, (size_t)rows * 4, NULL);
  mk(c, &dx, (size_t)nx * 4, NULL);
  mk(c, &dw, (size_t)cols * 4, hdw);
  BOTH(c, be->rmsnorm_forward(be, rows, cols, eps, F(x), F(w), F(y), F(rstd)));
  snprintf(msg, sizeof msg, "%s y", what);
  cmp(&y, msg, nx, TOL_NORM);
  snprintf(msg, sizeof msg, "%s rstd", what);
  cmp(&rstd, msg, rows, TOL_NORM);
  float *hr = xmalloc((size_t)rows * 4);
  CHECK(cc_buf_download(&rstd.cpu, hr, (size_t)rows * 4) == GP_OK, "download");
  CHECK(cc_pair_upload(&rstd, hr) == GP_OK, "upload");
  BOTH(c, be->rmsnorm_backward(be, rows, cols, F(x), F(dy), F(w), F(rstd), F(dx), F(dw)));
  snprintf(msg, sizeof msg, "%s dx", what);
  cmp(&dx, msg, nx, TOL_NORM);
  snprintf(msg, sizeof msg, "%s dw (+=)", what);
  cmp(&dw, msg, cols, TOL_NORM);
  /* The layer's halves: dx alone (B), then dw alone (W), give one call's bytes. */
  size_t bytes = (size_t)(nx + cols) * 4;
  float *want = xmalloc(bytes), *got = xmalloc(bytes);
  for (int side = 0; side < 2; side++) {
    gp_backend *be = side ? c->gpu : c->cpu;
    cc_buf *bx = side ? &dx.gpu : &dx.cpu, *bw = side ? &dw.gpu : &dw.cpu;
    const float *px = side ? GPUF(x) : CPUF(x), *pdy = side ? GPUF(dy) : CPUF(dy);
    const float *pw = side ? GPUF(w) : CPUF(w), *pr = side ? GPUF(rstd) : CPUF(rstd);
    float *out[2] = {want, got};
    for (int split = 0; split < 2; split++) {
      gp_status st = cc_buf_upload(bw, hdw, (size_t)cols * 4);
      float *ddx = (float *)bx->p, *ddw = (float *)bw->p;
      if (st == GP_OK && !split)
        st = be->rmsnorm_backward(be, rows, cols, px, pdy, pw, pr, ddx, ddw);
      if (st == GP_OK && split)
        st = be->rmsnorm_backward(be, rows, cols, px, pdy, pw, pr, ddx, NULL);
      if (st == GP_OK && split)
        st = be->rmsnorm_backward(be, rows, cols, px, pdy, pw, pr, NULL, ddw);
      if (st == GP_OK) st = cc_buf_download(bx, out[split], (size_t)nx * 4);
      if (st == GP_OK) st = cc_buf_download(bw, out[split] + nx, (size_t)cols * 4);
      CHECK(st == GP_OK, "%s halves on %s: %s", what, be->name, gp_error_message());
    }
    CHECK(memcmp(want, got, bytes) == 0, "%s on %s: dx alone, then dw alone, differ from one call",
          what, be->name);
  }
  free(want);
  free(got);
  cc_pair *all[] = {&x, &dy, &w, &y, &rstd, &dx, &dw};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    cc_pair_free(all[i]);
  float *hs[] = {hx, hdy, hw, hdw, hr};
  for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++)
    free(hs[i]);
}

static void test_rms(cc_ctx *c) {
  test_rms_one(c, 7, 33, 600);
  test_rms_one(c, 64, 256, 610); /* Llama-like rows */
  test_rms_one(c, 3, 1, 620);
  test_rms_one(c, 5, 2500, 630); /* a wide row: 512 threads */
  test_rms_one(c, 300, 20, 640); /* many rows: several row ranges for dw */
}

int main(void) {
  cc_ctx c;
  int r = cc_open(&c);
  if (r != 0) return r;
  test_bn(&c);
  test_ln(&c);
  test_rms(&c);
  cc_close(&c);
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
