/* softmax_cross_entropy keeping its probabilities over the logits (gp_exec.over_input, as the
 * executor allows where nothing else reads them) and writing their gradient there: loss,
 * accumulators (loss sum, correct predictions, targets) and input gradient bit for bit those
 * of the separate buffers, with label smoothing, ignored targets (some, all), rows whose
 * maximum is tied (count_correct must read the logits, not the probabilities, which tie more
 * often) and a re-materializing forward; the per-pixel axis declines (its state stays apart).
 * Usage: test_layers_xent_over */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "tests/layers/harness.h"

enum { B = 3, T = 5, K = 37 };

static int passed, failed;

typedef struct result {
  float loss[B * T], din[B * T * K];
  double loss_sum;
  int64_t correct, counted;
  int over; /* the state was kept over the logits */
} result;

/* Logits with ties the probabilities add: 0.3 and the next float (2^-25 apart) have
 * exponentials (of their difference to the maximum) that round alike, so the argmax of such a
 * row (the first maximum) differs where it is taken of the probabilities. */
static void fill(float *z, int32_t *y, int ignored) {
  gp_rng r;
  gp_rng_seed(&r, 7);
  for (int64_t i = 0; i < B * T * K; i++)
    z[i] = 2.0f * gp_rng_uniform(&r) - 2.0f; /* below the tied pair */
  for (int64_t row = 0; row < B * T; row++) {
    float *zr = z + row * K;
    if (row % 2 == 0) { /* class 3 the argmax by one ulp over class 1 */
      zr[1] = 0.3f;
      zr[3] = nextafterf(0.3f, 1.0f);
    }
    y[row] = (int32_t)((row * 7 + 3) % K);
    if (row % 4 == 0) y[row] = 3; /* a correct prediction, by the margin */
  }
  if (ignored == 1)
    y[2] = y[7] = y[8] = -100;
  else if (ignored == 2)
    for (int64_t row = 0; row < B * T; row++)
      y[row] = -100;
}

static int run(const char *yaml, int axis0, int over, int recompute, int ignored, result *o) {
  gp_backend *be;
  if (gp_cpu_backend_create(1, &be) != GP_OK) return 0;
  gp_shape sh[2] = {{2, {T, K}}, {1, {T}}};
  if (axis0) sh[0] = (gp_shape){2, {K, T}};
  gp_dtype dt[2] = {GP_F32, GP_I32};
  lt_layer t;
  if (!lt_build_or_report(&t, be, yaml, 2, sh, dt, B)) {
    gp_backend_destroy(be);
    return 0;
  }
  float z[B * T * K];
  int32_t y[B * T];
  fill(z, y, ignored);
  if (axis0) { /* the same logits with the classes first: [B, K, T] */
    for (int64_t b = 0; b < B; b++)
      for (int64_t i = 0; i < T; i++)
        for (int64_t c = 0; c < K; c++)
          GP_F32P(&t.in[0])[(b * K + c) * T + i] = z[(b * T + i) * K + c];
  } else {
    memcpy(t.in[0].data, z, sizeof z);
  }
  memcpy(t.in[1].data, y, sizeof y);
  t.e.over_input = over;
  t.e.recompute = recompute;
  gp_status s = lt_forward(&t);
  o->over = s == GP_OK && t.saved == t.in[0].data;
  /* what the executor does: the gradient goes where the state is */
  if (s == GP_OK && o->over) t.din[0].data = t.in[0].data;
  if (s == GP_OK) s = lt_backward(&t);
  if (s != GP_OK) printf("  %s: %s\n", yaml, gp_error_message());
  if (s == GP_OK) {
    memcpy(o->loss, t.out.data, sizeof o->loss);
    memcpy(o->din, t.din[0].data, sizeof o->din);
    o->loss_sum = t.e.loss_sum;
    o->correct = t.e.correct;
    o->counted = t.e.counted;
  }
  lt_layer_free(&t);
  gp_backend_destroy(be);
  return s == GP_OK;
}

static void one(const char *yaml, int axis0, int recompute, int ignored) {
  static result a, b;
  char what[256];
  snprintf(what, sizeof what, "%s%s, %s ignored", yaml, recompute ? ", recompute" : "",
           ignored == 2 ? "all"
           : ignored    ? "some"
                        : "none");
  int ok =
      run(yaml, axis0, 0, recompute, ignored, &a) && run(yaml, axis0, 1, recompute, ignored, &b);
  if (ok && (a.over || b.over == axis0)) {
    printf("  state over the logits: %d without over_input, %d with (want 0, %d)\n", a.over, b.over,
           !axis0);
    ok = 0;
  }
  if (ok && (memcmp(a.loss, b.loss, sizeof a.loss) || memcmp(a.din, b.din, sizeof a.din))) {
    printf("  loss or input gradient differ\n");
    ok = 0;
  }
  if (ok && (a.loss_sum != b.loss_sum || a.correct != b.correct || a.counted != b.counted)) {
    printf("  loss sum %.17g / %.17g, correct %lld / %lld, counted %lld / %lld\n", a.loss_sum,
           b.loss_sum, (long long)a.correct, (long long)b.correct, (long long)a.counted,
           (long long)b.counted);
    ok = 0;
  }
  /* the tied rows count: class 3 wins by its margin in every even row labelled 3 */
  if (ok && !recompute && ignored == 0 && !axis0 && a.correct < 2) {
    printf("  correct %lld: the tied rows were not counted\n", (long long)a.correct);
    ok = 0;
  }
  lt_tally(ok, what, &passed, &failed);
}

int main(void) {
  const char *confs[] = {"{type: softmax_cross_entropy}",
                         "{type: softmax_cross_entropy, label_smoothing: 0.1}"};
  for (int c = 0; c < 2; c++)
    for (int ig = 0; ig < 3; ig++)
      for (int rc = 0; rc < 2; rc++)
        one(confs[c], 0, rc, ig);
  one("{type: softmax_cross_entropy, axis: 0}", 1, 0, 1);
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
