/* Training token models through the pipeline: batches of several inputs (i32 ids, masks,
 * per-token labels with ignored padding). (1) softmax_cross_entropy with ignore_index and
 * label smoothing against an independent double-precision computation of PyTorch's
 * F.cross_entropy(ignore_index=-100, label_smoothing=s), loss and weight gradient, for one
 * and for three micro-batches; (2) models/transformer-nmt.yaml and models/transformer-lm.yaml
 * at a tiny size give the same losses and weights for K = 1..4 stages and M = 1..4
 * micro-batches as K = 1, M = 1. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "core/train/trainer.h"
#include "tests/train/token_fixture.h"
#include "tests/support/check.h"
#include "tests/support/train.h"

/* Summation order over micro-batches and stages only: a few float roundings per step. */
#define TOL_REL 2e-5
/* The reference is double, the layer float: a few roundings in a softmax over 5 classes. */
#define TOL_LOSS 1e-5
#define TOL_GRAD 1e-5

static int failures, passes;

static void check(int ok, const char *fmt, double a, double b) {
  CHECK(ok, fmt, a, b);
}

/* ---- (1) the loss against its definition ---- */

#define B 4
#define T 3
#define D 4
#define V 5
#define SMOOTH 0.2

static const char *xent_model = "name: xent\n"
                                "inputs: {x: [3, 4], label: {shape: [3], dtype: i32}}\n"
                                "layers:\n"
                                "  - {type: linear, out_features: 5}\n"
                                "loss: {type: softmax_cross_entropy, label_smoothing: 0.2}\n"
                                "train: {optimizer: {type: sgd, lr: 1.0}}\n";

/* PyTorch's mean cross-entropy with ignore_index and label smoothing: over the N targets
 * that are not ignored, ((1 - s) * nll + s * mean_j(-log p_j)) / N; dz = (p - q) / N with
 * q = (1 - s) onehot + s / V, and 0 for ignored rows. */
static double reference(const float *w, const float *bias, const float *x, const int32_t *y,
                        double *dw, int64_t *n_out, int64_t *correct) {
  int64_t n = 0;
  for (int i = 0; i < B * T; i++)
    n += y[i] != -100;
  double loss = 0;
  memset(dw, 0, sizeof(double) * V * D);
  *correct = 0;
  for (int i = 0; i < B * T; i++) {
    if (y[i] == -100) continue;
    double z[V], mx = -1e300, se = 0;
    int best = 0;
    for (int v = 0; v < V; v++) {
      z[v] = bias[v];
      for (int d = 0; d < D; d++)
        z[v] += (double)w[v * D + d] * x[i * D + d];
      mx = fmax(mx, z[v]);
      if (z[v] > z[best]) best = v;
    }
    *correct += best == y[i];
    for (int v = 0; v < V; v++)
      se += exp(z[v] - mx);
    double lse = mx + log(se), smooth = 0;
    for (int v = 0; v < V; v++)
      smooth += (lse - z[v]) / V;
    loss += ((1 - SMOOTH) * (lse - z[y[i]]) + SMOOTH * smooth) / (double)n;
    for (int v = 0; v < V; v++) {
      double q = SMOOTH / V + (v == y[i] ? 1 - SMOOTH : 0);
      double dz = (exp(z[v] - lse) - q) / (double)n;
      for (int d = 0; d < D; d++)
        dw[v * D + d] += dz * x[i * D + d];
    }
  }
  *n_out = n;
  return loss;
}

static void xent_check(int micro) {
  gp_model *mo;
  if (gp_model_load_string(xent_model, "xent.yaml", NULL, 0, &mo) != GP_OK) gp_t_die("load xent");
  mo->pipeline.micro_batches = micro;
  gp_plan plan;
  gp_trainer t;
  gp_pipeline_opts po = {.cores = 1};
  if (gp_plan_make(mo, &mo->pipeline, &plan) != GP_OK) gp_t_die("plan");
  if (gp_trainer_init(&t, mo, &plan, &po, 7) != GP_OK) gp_t_die("init");
  gp_params *p = gp_pipeline_params(t.pl, 0);
  if (p->n_train != V * D + V) gp_t_die("the linear layer's parameter layout");
  float w0[V * D + V], x[B * T * D];
  int32_t y[B * T];
  memcpy(w0, p->train, sizeof w0);
  gp_rng r;
  gp_rng_seed(&r, 99);
  for (int i = 0; i < B * T * D; i++)
    x[i] = 4.0f * gp_rng_uniform(&r) - 2.0f;
  for (int i = 0; i < B * T; i++)
    y[i] = (int32_t)gp_rng_below(&r, V);
  /* padding: a tail in samples 1 and 3, all of sample 2 (a micro-batch with no target) */
  y[1 * T + 2] = y[2 * T + 0] = y[2 * T + 1] = y[2 * T + 2] = y[3 * T + 1] = y[3 * T + 2] = -100;
  double dw[V * D];
  int64_t n, correct;
  double want = reference(w0, w0 + V * D, x, y, dw, &n, &correct);
  gp_metrics mt;
  if (gp_t_step_xy(&t, x, y, B, 1.0, &mt) != GP_OK) gp_t_die("xent step");
  char what[160];
  snprintf(what, sizeof what, "M=%d: loss %%.9g, want %%.9g (mean over non-ignored tokens)", micro);
  check(fabs(mt.loss - want) <= TOL_LOSS * fabs(want), what, mt.loss, want);
  snprintf(what, sizeof what, "M=%d: %%g targets counted, want %%g", micro);
  check(mt.targets == n, what, (double)mt.targets, (double)n);
  snprintf(what, sizeof what, "M=%d: accuracy %%g, want %%g (per token)", micro);
  check(fabs(mt.accuracy - (double)correct / (double)n) < 1e-12, what, mt.accuracy,
        (double)correct / (double)n);
  double err = 0, ref = 0;
  for (int i = 0; i < V * D; i++) { /* sgd, lr 1: w1 = w0 - grad */
    err = fmax(err, fabs((double)(w0[i] - p->train[i]) - dw[i]));
    ref = fmax(ref, fabs(dw[i]));
  }
  snprintf(what, sizeof what, "M=%d: weight gradient max error %%.3g (max %%.3g)", micro);
  check(err <= TOL_GRAD * ref, what, err, ref);
  gp_trainer_free(&t);
  gp_model_free(mo);
}

/* ---- (2) pipeline equivalence of the Transformer model files ---- */

#define STEPS 3
#define BATCH 8
#define LEN 6
#define VOCAB 13

typedef struct run_out {
  double loss[STEPS];
  float *w;
  int64_t n_w;
} run_out;

static void train(const char *file, const gp_override *ov, int nov, int k, int m,
                  gp_schedule_kind sched, gp_remat remat, run_out *o) {
  gp_trainer t;
  token_fixture_train(file, ov, nov, k, m, sched, remat, STEPS, BATCH, LEN, VOCAB, 1e-2, o->loss,
                      &t);
  o->w = token_fixture_weights(&t, &o->n_w);
  gp_model *mo = (gp_model *)t.m; /* the fixture loaded it: ours to free */
  gp_trainer_free(&t);
  gp_model_free(mo);
}

static void grid(const char *name, const char *file, const gp_override *ov, int nov) {
  run_out want;
  train(file, ov, nov, 1, 1, GP_SCHED_GPIPE, GP_REMAT_NEVER, &want);
  int i = 0;
  for (int k = 1; k <= 4; k++)
    for (int m = 1; m <= 4; m++, i++) {
      if (k == 1 && m == 1) continue;
      run_out got;
      train(file, ov, nov, k, m, (gp_schedule_kind)(i % 2), (gp_remat)(i % 3), &got);
      double dl = 0, dw = 0, ref = 1e-30;
      for (int s = 0; s < STEPS; s++)
        dl = fmax(dl, fabs(got.loss[s] - want.loss[s]) / fabs(want.loss[s]));
      for (int64_t j = 0; j < want.n_w && got.n_w == want.n_w; j++) {
        dw = fmax(dw, fabs((double)got.w[j] - want.w[j]));
        ref = fmax(ref, fabs((double)want.w[j]));
      }
      CHECK(got.n_w == want.n_w && dl <= TOL_REL && dw / ref <= TOL_REL,
            "%s K=%d M=%d: loss rel diff %.3g, weight rel diff %.3g", name, k, m, dl, dw / ref);
      free(got.w);
    }
  free(want.w);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    printf("usage: test_token_models transformer-nmt.yaml transformer-lm.yaml\n");
    return 2;
  }
  xent_check(1);
  xent_check(3);
  static const gp_override lm[] = {
      {"inputs.tokens.shape.0", "6"},    {"inputs.label.shape.0", "6"},
      {"inputs.seg.shape.0", "6"},       {"inputs.pos.shape.0", "6"},
      {"layers.0.num_embeddings", "13"}, {"layers.0.dim", "8"},
      {"layers.1.max_len", "8"},         {"layers.2.p", "0"},
      {"blocks.layer.params.d", "8"},    {"blocks.layer.params.heads", "2"},
      {"blocks.layer.params.ff", "12"},  {"blocks.layer.params.p", "0"},
      {"layers.3.repeat", "3"},          {"layers.5.out_features", "13"},
  };
  grid("transformer-nmt", argv[1], token_fixture_tiny_nmt, TOKEN_TINY_NMT_N);
  grid("transformer-lm", argv[2], lm, (int)(sizeof lm / sizeof lm[0]));
  printf("%d passed, %d failed\n", passes, failures);
  return failures != 0;
}
