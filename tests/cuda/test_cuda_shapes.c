/* The CUDA backend's permute, group norm and element-wise losses (layers permute, groupnorm,
 * mse, l1, bce_with_logits) against the CPU backend on random inputs; a group norm's backward
 * in a layer's halves (dx, then dw and db) gives one call's bytes. Exits 77 (skipped) without
 * a CUDA device. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures, passes;

#include "tests/cuda/dnn_check.h"

/* Statistics summed in another order (double on both, another tree): ~1e-13 after
 * normalization. */
#define TOL_NORM 1e-10
/* A copy: equal. */
#define TOL_EXACT 0.0
/* expf, log1pf of CUDA's math library against glibc's: a few ulp */
#define TOL_MATH 1e-10

static void test_permute_one(cc_ctx *c, int ndim, const int64_t *dims, const int *perm,
                             uint64_t seed) {
  char what[96];
  int64_t n = 1;
  for (int j = 0; j < ndim; j++)
    n *= dims[j];
  snprintf(what, sizeof what, "permute of %d axes (%lld floats), seed %llu", ndim, (long long)n,
           (unsigned long long)seed);
  float *hx = normal(n, seed, 1.0f, 0.0f);
  cc_pair x, y;
  mk(c, &x, (size_t)n * 4, hx);
  mk(c, &y, (size_t)n * 4, NULL);
  BOTH(c, be->permute(be, ndim, dims, perm, F(x), F(y)));
  cmp(&y, what, n, TOL_EXACT);
  /* the CPU's against the definition, on the host */
  float *hy = xmalloc((size_t)n * 4);
  CHECK(cc_buf_download(&y.cpu, hy, (size_t)n * 4) == GP_OK, "download");
  int64_t is[9], bad = 0;
  for (int j = ndim - 1, s = 1; j >= 0; s *= (int)dims[j], j--)
    is[j] = s;
  for (int64_t i = 0; i < n; i++) {
    int64_t o = i, src = 0;
    for (int j = ndim - 1; j >= 0; j--) {
      src += (o % dims[perm[j]]) * is[perm[j]];
      o /= dims[perm[j]];
    }
    bad += hy[i] != hx[src];
  }
  CHECK(bad == 0, "%s: the CPU's has %lld elements out of place", what, (long long)bad);
  cc_pair_free(&x);
  cc_pair_free(&y);
  free(hx);
  free(hy);
}

static void test_permute(cc_ctx *c) {
  const int64_t d1[] = {2, 3, 40, 37};
  const int p1[] = {0, 2, 3, 1}; /* channels last: tiles and their tails */
  test_permute_one(c, 4, d1, p1, 700);
  const int64_t d2[] = {3, 5, 4, 8};
  const int p2[] = {0, 2, 1, 3}; /* heads first: row copies */
  test_permute_one(c, 4, d2, p2, 710);
  const int64_t d3[] = {2, 3, 4, 5, 6};
  const int p3[] = {0, 4, 2, 1, 3};
  test_permute_one(c, 5, d3, p3, 720);
}

static void test_gn_one(cc_ctx *c, int64_t n, int64_t ch, int64_t inner, int64_t groups,
                        uint64_t seed) {
  char what[96], msg[160];
  snprintf(what, sizeof what, "groupnorm [%lld, %lld, %lld] in %lld", (long long)n, (long long)ch,
           (long long)inner, (long long)groups);
  const int64_t nx = n * ch * inner, ng = n * groups;
  const float eps = 1e-5f;
  float *hx = normal(nx, seed, 1.5f, 0.5f), *hdy = normal(nx, seed + 1, 1.0f, 0.0f);
  float *hw = normal(ch, seed + 2, 0.5f, 1.0f), *hb = normal(ch, seed + 3, 0.5f, 0.0f);
  float *hdw = normal(ch, seed + 4, 1.0f, 0.0f), *hdb = normal(ch, seed + 5, 1.0f, 0.0f);
  cc_pair x, dy, w, b, y, mean, rstd, dx, dw, db;
  mk(c, &x, (size_t)nx * 4, hx);
  mk(c, &dy, (size_t)nx * 4, hdy);
  mk(c, &w, (size_t)ch * 4, hw);
  mk(c, &b, (size_t)ch * 4, hb);
  mk(c, &y, (size_t)nx * 4, NULL);
  mk(c, &mean, (size_t)ng * 4, NULL);
  mk(c, &rstd, (size_t)ng * 4, NULL);
  mk(c, &dx, (size_t)nx * 4, NULL);
  mk(c, &dw, (size_t)ch * 4, hdw);
  mk(c, &db, (size_t)ch * 4, hdb);
  BOTH(c, be->groupnorm_forward(be, n, ch, inner, groups, eps, F(x), F(w), F(b), F(y), F(mean),
                                F(rstd)));
  snprintf(msg, sizeof msg, "%s y", what);
  cmp(&y, msg, nx, TOL_NORM);
  snprintf(msg, sizeof msg, "%s rstd", what);
  cmp(&rstd, msg, ng, TOL_NORM);
  float *hm = xmalloc((size_t)ng * 4), *hr = xmalloc((size_t)ng * 4);
  CHECK(cc_buf_download(&mean.cpu, hm, (size_t)ng * 4) == GP_OK, "download");
  CHECK(cc_buf_download(&rstd.cpu, hr, (size_t)ng * 4) == GP_OK, "download");
  CHECK(cc_pair_upload(&mean, hm) == GP_OK && cc_pair_upload(&rstd, hr) == GP_OK, "upload");
  BOTH(c, be->groupnorm_backward(be, n, ch, inner, groups, F(x), F(dy), F(w), F(mean), F(rstd),
                                 F(dx), F(dw), F(db)));
  snprintf(msg, sizeof msg, "%s dx", what);
  cmp(&dx, msg, nx, TOL_NORM);
  snprintf(msg, sizeof msg, "%s dw (+=)", what);
  cmp(&dw, msg, ch, TOL_NORM);
  snprintf(msg, sizeof msg, "%s db (+=)", what);
  cmp(&db, msg, ch, TOL_NORM);
  /* The layer's halves: dx alone (B), then dw and db alone (W), give one call's bytes. */
  size_t bytes = (size_t)(nx + 2 * ch) * 4;
  float *want = xmalloc(bytes), *got = xmalloc(bytes);
  for (int side = 0; side < 2; side++) {
    gp_backend *be = side ? c->gpu : c->cpu;
    cc_buf *bx = side ? &dx.gpu : &dx.cpu, *bw = side ? &dw.gpu : &dw.cpu;
    cc_buf *bb = side ? &db.gpu : &db.cpu;
    const float *px = side ? GPUF(x) : CPUF(x), *pdy = side ? GPUF(dy) : CPUF(dy);
    const float *pw = side ? GPUF(w) : CPUF(w), *pm = side ? GPUF(mean) : CPUF(mean);
    const float *pr = side ? GPUF(rstd) : CPUF(rstd);
    float *out[2] = {want, got};
    for (int split = 0; split < 2; split++) {
      gp_status st = cc_buf_upload(bw, hdw, (size_t)ch * 4);
      if (st == GP_OK) st = cc_buf_upload(bb, hdb, (size_t)ch * 4);
      float *ddx = (float *)bx->p, *ddw = (float *)bw->p, *ddb = (float *)bb->p;
      if (st == GP_OK && !split)
        st = be->groupnorm_backward(be, n, ch, inner, groups, px, pdy, pw, pm, pr, ddx, ddw, ddb);
      if (st == GP_OK && split)
        st = be->groupnorm_backward(be, n, ch, inner, groups, px, pdy, pw, pm, pr, ddx, NULL, NULL);
      if (st == GP_OK && split)
        st = be->groupnorm_backward(be, n, ch, inner, groups, px, pdy, pw, pm, pr, NULL, ddw, ddb);
      if (st == GP_OK) st = cc_buf_download(bx, out[split], (size_t)nx * 4);
      if (st == GP_OK) st = cc_buf_download(bw, out[split] + nx, (size_t)ch * 4);
      if (st == GP_OK) st = cc_buf_download(bb, out[split] + nx + ch, (size_t)ch * 4);
      CHECK(st == GP_OK, "%s halves on %s: %s", what, be->name, gp_error_message());
    }
    CHECK(memcmp(want, got, bytes) == 0, "%s on %s: dx alone, then dw and db, differ from one call",
          what, be->name);
  }
  free(want);
  free(got);
  cc_pair *all[] = {&x, &dy, &w, &b, &y, &mean, &rstd, &dx, &dw, &db};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    cc_pair_free(all[i]);
  float *hs[] = {hx, hdy, hw, hb, hdw, hdb, hm, hr};
  for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++)
    free(hs[i]);
}

static void test_gn(cc_ctx *c) {
  test_gn_one(c, 2, 8, 25, 4, 800);
  test_gn_one(c, 2, 64, 1024, 32, 810); /* a U-Net level: 32 groups of 2 channels of 32 x 32 */
  test_gn_one(c, 3, 6, 1, 3, 820);      /* [C] alone */
  test_gn_one(c, 1, 4, 3000, 1, 830);   /* one group: a wide row */
}

static void test_loss(cc_ctx *c) {
  static const char *const names[] = {"mse", "l1", "bce_with_logits"};
  const int64_t n = 5000;
  float *hp = normal(n, 900, 4.0f, 0.0f), *ht = xmalloc((size_t)n * 4);
  cc_fill_uniform(ht, n, 901, 0.0f, 1.0f);
  hp[0] = 90.0f, hp[1] = -90.0f; /* where e^-p or e^p overflows */
  ht[2] = hp[2];                 /* l1's kink: gradient 0 */
  cc_pair p, t, out;
  mk(c, &p, (size_t)n * 4, hp);
  mk(c, &t, (size_t)n * 4, ht);
  mk(c, &out, (size_t)n * 4, NULL);
  for (int k = 0; k < 3; k++) {
    char msg[96];
    BOTH(c, be->eltloss_forward(be, (gp_eltloss)k, n, F(p), F(t), F(out)));
    snprintf(msg, sizeof msg, "%s forward", names[k]);
    cmp(&out, msg, n, TOL_MATH);
    BOTH(c, be->eltloss_backward(be, (gp_eltloss)k, n, 0.25f, F(p), F(t), F(out)));
    snprintf(msg, sizeof msg, "%s backward", names[k]);
    cmp(&out, msg, n, TOL_MATH);
  }
  cc_pair_free(&p);
  cc_pair_free(&t);
  cc_pair_free(&out);
  free(hp);
  free(ht);
}

int main(void) {
  cc_ctx c;
  int r = cc_open(&c);
  if (r != 0) return r;
  test_permute(&c);
  test_gn(&c);
  test_loss(&c);
  cc_close(&c);
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
