/* The losses of f32 targets (mse, l1, bce_with_logits) through the pipeline: a small U-Net-like
 * model (conv2d, groupnorm, silu, permute, linear, reshape) whose target is an f32 model input
 * with negative values. A training step's loss is the mean over every element of the whole
 * mini-batch: the evaluation's mean of the same batch before the step, for K = 1, M = 1 and
 * K = 2, M = 4 alike; and K, M change neither the losses of later steps nor the weights. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "core/train/trainer.h"
#include "tests/support/check.h"
#include "tests/train/stage_params.h"

/* Summation order over micro-batches only (as test_pipeline_equiv.c) */
#define TOL_REL 1e-5
#define STEPS 3
#define BATCH 8

static int failures, passes;

static const char *model_text = "name: f32loss\n"
                                "inputs:\n"
                                "  image: {shape: [2, 4, 4], dtype: f32}\n"
                                "  target: {shape: [2, 4, 4], dtype: f32}\n"
                                "layers:\n"
                                "  - {type: conv2d, out_channels: 4, kernel: 3, padding: 1, "
                                "from: image}\n"
                                "  - {type: groupnorm, groups: 2}\n"
                                "  - {type: silu}\n"
                                "  - {type: permute, axes: [1, 2, 0]}\n"
                                "  - {type: linear, out_features: 2}\n"
                                "  - {type: permute, axes: [2, 0, 1]}\n"
                                "  - {type: reshape, shape: [2, -1]}\n"
                                "  - {type: reshape, shape: [2, 4, 4]}\n"
                                "loss: %s\n";

typedef struct run_out {
  double loss[STEPS], eval0;
  float *w;
  int64_t n_w;
} run_out;

static void fill(int step, float *x, float *t) {
  gp_rng r;
  gp_rng_seed(&r, 500 + (uint64_t)step);
  for (int64_t i = 0; i < BATCH * 32; i++) {
    x[i] = 2.0f * gp_rng_uniform(&r) - 1.0f;
    t[i] = gp_rng_uniform(&r) - 0.5f; /* half negative: none may be taken for an ignored label */
  }
}

static void train(const char *loss, int k, int m, run_out *o) {
  char text[2048];
  snprintf(text, sizeof text, model_text, loss);
  gp_model *mo;
  if (gp_model_load_string(text, "f32loss.yaml", NULL, 0, &mo) != GP_OK) gp_t_die("load");
  mo->pipeline.stages = k;
  mo->pipeline.micro_batches = m;
  mo->pipeline.n_balance = 0;
  gp_plan plan;
  gp_trainer t;
  gp_pipeline_opts po = {.cores = 1};
  if (gp_plan_make(mo, &mo->pipeline, &plan) != GP_OK) gp_t_die("plan");
  /* the pipeline alone, without gp_trainer_init (a trainer's fields, for stage_params_gather);
   * the trainer's own f32-target path is tests/train/test_unet.c's */
  memset(&t, 0, sizeof t);
  t.m = mo;
  t.plan = plan;
  if (gp_pipeline_create(mo, &plan, 42, &po, &t.pl) != GP_OK) gp_t_die("pipeline");
  float x[BATCH * 32], tg[BATCH * 32];
  gp_batch b = {.in = {x, tg}, .n = BATCH};
  for (int s = 0; s < STEPS; s++) {
    fill(0, x, tg); /* one batch: the loss must fall */
    if (s == 0) {
      gp_step_result r = {0};
      if (gp_pipeline_eval(t.pl, &b, &r) != GP_OK) gp_t_die("eval");
      o->eval0 = r.counted ? r.loss_sum / (double)r.counted : NAN;
    }
    gp_step_result r;
    if (gp_pipeline_train_step(t.pl, &b, s, 0.1, &r) != GP_OK) gp_t_die("step");
    o->loss[s] = r.loss_sum;
  }
  o->w = stage_params_gather(&t, 0, &o->n_w);
  gp_pipeline_free(t.pl);
  gp_model_free(mo);
}

static int close_rel(double a, double b) {
  return fabs(a - b) <= TOL_REL * fmax(fabs(a), fabs(b)) + 1e-12;
}

int main(void) {
  static const char *const losses[] = {"mse", "l1", "bce_with_logits"};
  for (int i = 0; i < 3; i++) {
    run_out want = {0}, got = {0};
    train(losses[i], 1, 1, &want);
    train(losses[i], 2, 4, &got);
    const run_out *both[2] = {&want, &got};
    for (int j = 0; j < 2; j++)
      CHECK(close_rel(both[j]->loss[0], both[j]->eval0),
            "%s, %s: step 0's loss %.9g is not the mean over the batch's elements %.9g", losses[i],
            j ? "K = 2, M = 4" : "K = 1, M = 1", both[j]->loss[0], both[j]->eval0);
    for (int s = 0; s < STEPS; s++)
      CHECK(close_rel(got.loss[s], want.loss[s]),
            "%s: step %d loss %.9g with K = 2, M = 4, %.9g "
            "with K = 1, M = 1",
            losses[i], s, got.loss[s], want.loss[s]);
    int64_t bad = got.n_w != want.n_w;
    for (int64_t j = 0; !bad && j < want.n_w; j++)
      bad += !close_rel(got.w[j], want.w[j]);
    CHECK(bad == 0, "%s: the weights after %d steps differ between K = 2, M = 4 and K = 1, M = 1",
          losses[i], STEPS);
    CHECK(want.loss[STEPS - 1] < want.loss[0], "%s: the loss did not fall (%.6g to %.6g)",
          losses[i], want.loss[0], want.loss[STEPS - 1]);
    printf("%s: losses %.6g %.6g %.6g (K = 1, M = 1); eval of step 0 %.6g\n", losses[i],
           want.loss[0], want.loss[1], want.loss[2], want.eval0);
    free(want.w);
    free(got.w);
  }
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
