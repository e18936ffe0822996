/* Dropout cannot be compared with PyTorch (different RNG), so it is checked against its
 * contract instead: element i of a micro-batch is kept iff gp_counter_uniform(key,
 * sample_offset * per_sample + i) >= p with key = gp_layer_rng_key (seed, step, layer path),
 * kept values are scaled by 1/(1-p), backward uses the same mask, a recompute reproduces
 * it, a micro-batch gets the mask of the same samples in the whole mini-batch (so M does not
 * change it), another step or layer changes it, the kept fraction is near 1 - p, and
 * evaluation mode (or p = 0) is the identity. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "tests/layers/harness.h"
#include "tests/support/check.h"

#define N_FEAT 5000
#define BATCH 4
#define P 0.3
#define OFFSET 6 /* the micro-batch's first sample in the mini-batch */

static int failures, passes;

static void tally(int ok) {
  if (ok)
    passes++;
  else
    failures++;
}

static void expect(int ok, const char *what) {
  CHECK(ok, "%s", what);
}

/* Builds dropout with p on [BATCH, N_FEAT]; x in [0.5, 1.5] so a zero output is a drop. */
static int build(lt_layer *t, gp_backend *be, double p) {
  char yaml[64];
  gp_shape s = {1, {N_FEAT}};
  snprintf(yaml, sizeof yaml, "{type: dropout, p: %g}", p);
  gp_status st = lt_layer_build(t, be, yaml, 1, &s, NULL, BATCH);
  if (st == GP_ERR_UNSUPPORTED) {
    printf("FAIL: layer type dropout is not registered\n");
    lt_layer_free(t);
    return 0;
  }
  if (st != GP_OK) {
    printf("FAIL: build %s: %s\n", yaml, gp_error_message());
    lt_layer_free(t);
    return 0;
  }
  lt_fill_uniform(7, GP_F32P(&t->in[0]), BATCH * N_FEAT, 0.5f, 1.5f);
  lt_fill_uniform(8, GP_F32P(&t->dout), BATCH * N_FEAT, 0.5f, 1.5f);
  t->e.step = 7;
  t->e.micro = 2;
  t->e.sample_offset = OFFSET;
  return 1;
}

static int run(lt_layer *t, int backward) {
  gp_status s = lt_forward(t);
  if (s == GP_OK && backward) s = lt_backward(t);
  if (s != GP_OK) {
    printf("  FAIL dropout: %s (%s)\n", gp_error_message(), gp_error_origin());
    failures++;
    return 0;
  }
  return 1;
}

static unsigned char *mask_of(const float *y, int64_t n) {
  unsigned char *m = malloc((size_t)n);
  for (int64_t i = 0; i < n; i++)
    m[i] = y[i] != 0.0f;
  return m;
}

static double agreement(const unsigned char *a, const unsigned char *b, int64_t n) {
  int64_t same = 0;
  for (int64_t i = 0; i < n; i++)
    same += a[i] == b[i];
  return (double)same / (double)n;
}

int main(void) {
  gp_backend *be;
  if (gp_cpu_backend_create(1, &be) != GP_OK) {
    printf("FAIL: cpu backend: %s\n", gp_error_message());
    return 1;
  }
  const int64_t n = BATCH * N_FEAT;
  lt_layer t;
  if (!build(&t, be, P)) {
    gp_backend_destroy(be);
    printf("0 passed, 1 failed\n");
    return 1;
  }
  float *want = malloc((size_t)n * sizeof *want);
  unsigned char *m0 = NULL, *m1 = NULL;

  /* Training: the mask is the contract's, kept values scaled, backward the same mask. */
  if (!run(&t, 1)) goto out;
  const float *x = GP_F32P(&t.in[0]), *y = GP_F32P(&t.out), *dy = GP_F32P(&t.dout),
              *dx = GP_F32P(&t.din[0]);
  uint64_t key = gp_layer_rng_key(&t.l, &t.e);
  int64_t kept = 0, wrong_fwd = 0, wrong_bwd = 0;
  for (int64_t i = 0; i < n; i++) {
    int k = gp_counter_uniform(key, (uint64_t)(OFFSET * N_FEAT + i)) >= (float)P;
    kept += k;
    wrong_fwd += (y[i] != 0.0f) != k;
    wrong_bwd += (dx[i] != 0.0f) != k;
  }
  printf("dropout p = %g: kept %lld of %lld (%.4f); %lld forward and %lld backward mask "
         "elements differ from gp_counter_uniform(key, offset + i) >= p\n",
         P, (long long)kept, (long long)n, (double)kept / (double)n, (long long)wrong_fwd,
         (long long)wrong_bwd);
  expect(!wrong_fwd, "forward mask is not the contract's (core/backend.h dropout_forward)");
  expect(!wrong_bwd, "backward mask is not the contract's (or not the forward's)");
  int64_t kept_y = 0;
  for (int64_t i = 0; i < n; i++)
    kept_y += y[i] != 0.0f;
  double sigma = sqrt(P * (1 - P) / (double)n);
  double z = fabs((double)kept_y / (double)n - (1 - P)) / sigma;
  expect(z <= lt_tol_get(LT_TOL_DROPOUT)->atol, "kept fraction is not near 1 - p");
  for (int64_t i = 0; i < n; i++)
    want[i] = y[i] != 0.0f ? x[i] / (float)(1 - P) : 0.0f;
  tally(
      lt_compare_f("dropout forward: kept values are x / (1 - p)", y, want, n, LT_TOL_SCALE, NULL));
  for (int64_t i = 0; i < n; i++)
    want[i] = y[i] != 0.0f ? dy[i] / (float)(1 - P) : 0.0f;
  tally(lt_compare_f("dropout backward: dx = dy / (1 - p) where kept, same mask", dx, want, n,
                     LT_TOL_SCALE, NULL));
  m0 = mask_of(y, n);

  /* A recompute forward reproduces the mask bit for bit. */
  memcpy(want, y, (size_t)n * sizeof *want);
  t.e.recompute = 1;
  if (!run(&t, 0)) goto out;
  tally(lt_compare_f("dropout: recompute forward", y, want, n, LT_TOL_EXACT, NULL));
  t.e.recompute = 0;

  /* The second half of the batch run alone as a micro-batch (its own micro index, offset
   * two samples later) gets exactly the second half of the mask. */
  {
    lt_layer h;
    gp_shape fs = {1, {N_FEAT}};
    if (lt_layer_build(&h, be, "{type: dropout, p: 0.3}", 1, &fs, NULL, BATCH / 2) != GP_OK) {
      printf("  FAIL dropout half batch: %s\n", gp_error_message());
      failures++;
    } else {
      const int64_t half = (BATCH / 2) * N_FEAT;
      memcpy(h.in[0].data, x + half, (size_t)half * sizeof(float));
      h.e.step = 7;
      h.e.micro = 5;
      h.e.sample_offset = OFFSET + BATCH / 2;
      if (run(&h, 0))
        tally(lt_compare_f("dropout: a micro-batch of the last samples vs the same samples in the "
                           "whole batch",
                           GP_F32P(&h.out), y + half, half, LT_TOL_EXACT, NULL));
    }
    lt_layer_free(&h);
  }

  /* Another step or layer path gives another mask (two independent masks agree on
   * p^2 + (1-p)^2 = 58% of elements). */
  const char *what[2] = {"next step", "another layer path"};
  for (int v = 0; v < 2; v++) {
    char *path = t.l.path;
    if (v == 0) t.e.step++;
    if (v == 1) t.l.path = "layer2";
    int ok = run(&t, 0);
    t.l.path = path;
    t.e.step = 7;
    if (!ok) goto out;
    free(m1);
    m1 = mask_of(y, n);
    double a = agreement(m0, m1, n);
    printf("dropout: %s agrees with the first mask on %.3f of elements\n", what[v], a);
    char msg[96];
    snprintf(msg, sizeof msg, "dropout: the %s reuses the mask", what[v]);
    expect(a <= 0.9, msg);
  }

  /* NaN and infinity are not hidden by a drop: y = x * mask * scale as in PyTorch, so a dropped
   * NaN or infinity gives NaN (a finite loss must not come from a model gone non-finite). */
  {
    float *xin = GP_F32P(&t.in[0]), *din = GP_F32P(&t.dout);
    float saved[8], saved_d[8];
    int64_t at[8];
    int nk = 0, nd = 0; /* the first 4 kept and the first 4 dropped elements */
    for (int64_t i = 0; nk + nd < 8 && i < n; i++) {
      int k = gp_counter_uniform(key, (uint64_t)(OFFSET * N_FEAT + i)) >= (float)P;
      if (k && nk < 4) at[nk++ + nd] = i;
      if (!k && nd < 4) at[nk + nd++] = i;
    }
    for (int j = 0; j < 8; j++) {
      saved[j] = xin[at[j]], saved_d[j] = din[at[j]];
      xin[at[j]] = din[at[j]] = j % 2 ? INFINITY : NAN;
    }
    int ok = run(&t, 1);
    int64_t bad = 0, dropped = 0;
    for (int j = 0; ok && j < 8; j++) {
      int k = gp_counter_uniform(key, (uint64_t)(OFFSET * N_FEAT + at[j])) >= (float)P;
      dropped += !k;
      int want_nan = !k || j % 2 == 0;
      bad += want_nan ? !(isnan(y[at[j]]) && isnan(dx[at[j]]))
                      : !(isinf(y[at[j]]) && isinf(dx[at[j]]));
    }
    printf("dropout: %lld of 8 non-finite inputs dropped; %lld outputs not NaN (dropped or NaN) "
           "or infinite (kept infinity)\n",
           (long long)dropped, (long long)bad);
    expect(ok && dropped == 4, "dropout: 4 of the non-finite inputs should be dropped");
    expect(ok && !bad, "dropout hides a non-finite input it drops (PyTorch gives NaN)");
    for (int j = 0; j < 8; j++)
      xin[at[j]] = saved[j], din[at[j]] = saved_d[j];
  }

  /* Evaluation: the identity both ways. */
  t.e.training = 0;
  if (!run(&t, 1)) goto out;
  tally(lt_compare_f("dropout eval: y = x", y, x, n, LT_TOL_EXACT, NULL));
  tally(lt_compare_f("dropout eval: dx = dy", dx, dy, n, LT_TOL_EXACT, NULL));
  lt_layer_free(&t);

  /* p = 0 in training: the identity too. */
  if (!build(&t, be, 0.0)) {
    failures++;
    goto done;
  }
  if (!run(&t, 1)) goto out;
  x = GP_F32P(&t.in[0]);
  tally(lt_compare_f("dropout p = 0: y = x", GP_F32P(&t.out), x, n, LT_TOL_EXACT, NULL));
  tally(lt_compare_f("dropout p = 0: dx = dy", GP_F32P(&t.din[0]), GP_F32P(&t.dout), n,
                     LT_TOL_EXACT, NULL));
out:
  lt_layer_free(&t);
done:
  free(want);
  free(m0);
  free(m1);
  gp_backend_destroy(be);
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
