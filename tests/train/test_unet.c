/* models/unet.yaml trained as a denoiser through the data path of data.task: denoise: K, M and
 * the schedule change neither the losses nor the weights (K = 1, M = 1 against K = 3, M = 4
 * under gpipe and zb-h1, balance 3,4,5 so both long skips cross stage boundaries, enc1's two of
 * them), with the model's AdamW and with SGD; the noise of a row is a function of (seed, epoch,
 * position) alone, not of the rows drawn with it; the evaluation's noisy-input PSNR is the noise's,
 * -20 log10(noise_std). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/train/trainer.h"
#include "data/data.h"
#include "data/denoise.h"
#include "tests/support/check.h"
#include "tests/train/stage_params.h"

/* Tolerances, with why:
 * TOL_REL: summation order over micro-batches only (as test_pipeline_equiv.c): the losses, and
 * the weights SGD trains, whose steps are linear in the gradients.
 * TOL_ADAM_REL: the weights AdamW trains: it divides each gradient by its own running size
 * (the first step moves an element by lr g / (|g| + eps)), so an element whose gradient is
 * near eps = 1e-8, rounding level (one in enc2.conv1 here), moves by a fraction of lr that the
 * summation order changes: 1.14e-5 measured, all of it from the first step (SGD: 5.9e-8).
 * TOL_PSNR_DB: the mean of 8 x 784 squared normals is within a few percent of the variance
 * (its relative std is sqrt(2 / 6272) = 1.8 %, 0.08 dB). */
#define TOL_REL 1e-5
#define TOL_ADAM_REL 1e-4
#define TOL_PSNR_DB 0.3
#define STEPS 2
#define BATCH 8

static int failures, passes;

typedef struct run_out {
  double loss[STEPS];
  float *w;
  int64_t n_w;
} run_out;

static gp_model *load(const char *file) {
  gp_model *mo;
  if (gp_model_load(file, NULL, 0, &mo) != GP_OK) gp_t_die(gp_error_message());
  return mo;
}

static gp_schedule_kind sched_of(const char *name) {
  const char *const *sn = gp_schedule_names();
  for (int i = 0; sn[i]; i++)
    if (!strcmp(sn[i], name)) return (gp_schedule_kind)i;
  gp_t_die(name);
}

static void train(const char *file, int k, int m, const char *sched, int sgd, run_out *o) {
  static const int balance[3] = {3, 4, 5};
  gp_model *mo = load(file);
  if (sgd) {
    mo->train.optimizer = GP_OPT_SGD;
    mo->train.lr = 0.05;
    mo->train.momentum = 0.9;
  }
  mo->pipeline.stages = k;
  mo->pipeline.micro_batches = m;
  mo->pipeline.schedule = sched_of(sched);
  mo->pipeline.n_balance = k == 3 ? 3 : 0;
  for (int s = 0; k == 3 && s < 3; s++)
    mo->pipeline.balance[s] = balance[s];
  gp_plan plan;
  gp_trainer t;
  gp_pipeline_opts po = {.cores = 1};
  if (gp_plan_make(mo, &mo->pipeline, &plan) != GP_OK) gp_t_die(gp_error_message());
  if (gp_trainer_init(&t, mo, &plan, &po, 42) != GP_OK) gp_t_die(gp_error_message());
  gp_data d;
  gp_data_opts dopt = {.synthetic = 1, .train = 1, .batch = BATCH, .seed = 7};
  if (gp_data_open(mo, &dopt, &d) != GP_OK) gp_t_die(gp_error_message());
  for (int s = 0; s < STEPS; s++) {
    gp_batch b;
    gp_metrics mt;
    if (gp_batch_source_next(d.train, &b, NULL) != GP_OK) gp_t_die("batch");
    if (gp_trainer_step(&t, &b, mo->train.lr, &mt) != GP_OK) gp_t_die(gp_error_message());
    o->loss[s] = mt.loss;
  }
  o->w = stage_params_gather(&t, 0, &o->n_w);
  gp_data_close(&d);
  gp_trainer_free(&t);
  gp_model_free(mo);
}

/* A row's noise is the same whether drawn with its batch or alone, and differs between rows,
 * epochs and splits. */
static void noise_is_per_sample(const gp_model *mo) {
  const gp_shape *sh = &mo->inputs[0].shape;
  const int64_t numel = gp_shape_numel(sh);
  float *x = calloc((size_t)(4 * numel), sizeof(float)), *t = malloc((size_t)(4 * numel) * 4);
  float *x1 = calloc((size_t)numel, sizeof(float)), *t1 = malloc((size_t)numel * 4);
  float *x2 = calloc((size_t)numel, sizeof(float));
  if (!x || !t || !x1 || !t1 || !x2) gp_t_die("out of memory");
  gp_denoise dn, alone, test;
  gp_denoise_init(&dn, &mo->data, sh, 1, 7);
  gp_denoise_init(&alone, &mo->data, sh, 1, 7);
  gp_denoise_init(&test, &mo->data, sh, 0, 7);
  gp_denoise_apply(&dn, 3, 100, 4, x, t); /* rows 100..103 of epoch 3 */
  gp_denoise_apply(&alone, 3, 102, 1, x1, t1);
  CHECK(!memcmp(x + 2 * numel, x1, (size_t)numel * sizeof(float)),
        "row 102's noise differs drawn alone and in a batch from row 100");
  CHECK(memcmp(x + numel, x + 2 * numel, (size_t)numel * sizeof(float)) != 0,
        "rows 101 and 102 have the same noise");
  memset(x1, 0, (size_t)numel * sizeof(float));
  gp_denoise_apply(&alone, 4, 102, 1, x1, t1);
  CHECK(memcmp(x + 2 * numel, x1, (size_t)numel * sizeof(float)) != 0,
        "row 102 has the same noise in epochs 3 and 4");
  memset(x1, 0, (size_t)numel * sizeof(float));
  gp_denoise_apply(&test, 3, 102, 1, x1, t1);
  gp_denoise_apply(&test, 4, 102, 1, x2, t1);
  CHECK(!memcmp(x1, x2, (size_t)numel * sizeof(float)),
        "the test split's noise changes between passes");
  /* data.normalize: the noisy input is normalized, the target is not */
  gp_data_spec spec = mo->data;
  spec.n_norm = 1;
  spec.mean[0] = 0.25f;
  spec.std[0] = 0.5f;
  gp_denoise norm;
  gp_denoise_init(&norm, &spec, sh, 0, 7);
  for (int64_t k = 0; k < numel; k++)
    x1[k] = x2[k] = (float)(k % 7) / 7.0f;
  memcpy(t, x1, (size_t)numel * sizeof(float));
  gp_denoise_apply(&test, 5, 9, 1, x1, t1);
  gp_denoise_apply(&norm, 5, 9, 1, x2, t1);
  int64_t bad = memcmp(t1, t, (size_t)numel * sizeof(float)) != 0;
  for (int64_t k = 0; k < numel; k++)
    bad += fabsf(x2[k] * 0.5f + 0.25f - x1[k]) > 1e-6f;
  CHECK(bad == 0, "with normalize mean 0.25, std 0.5: %lld of %lld elements (or the target) off",
        (long long)bad, (long long)numel);
  free(x);
  free(t);
  free(x1);
  free(t1);
  free(x2);
}

/* The evaluation of a synthetic test split: its noisy input's PSNR is the noise's. */
static void input_psnr(const char *file) {
  gp_model *mo = load(file);
  gp_plan plan;
  gp_trainer t;
  gp_pipeline_opts po = {.cores = 1};
  if (gp_plan_make(mo, &mo->pipeline, &plan) != GP_OK) gp_t_die(gp_error_message());
  if (gp_trainer_init(&t, mo, &plan, &po, 42) != GP_OK) gp_t_die(gp_error_message());
  gp_data d;
  gp_data_opts dopt = {.synthetic = 1, .eval = 1, .batch = BATCH / 2, .seed = 7};
  if (gp_data_open(mo, &dopt, &d) != GP_OK) gp_t_die(gp_error_message());
  gp_metrics ev;
  if (gp_trainer_evaluate(&t, d.test, &ev) != GP_OK) gp_t_die(gp_error_message());
  const double want = -20.0 * log10(mo->data.noise_std);
  CHECK(fabs(ev.input_psnr - want) < TOL_PSNR_DB, "noisy input PSNR %.3f dB, the noise's %.3f dB",
        ev.input_psnr, want);
  CHECK(fabs(ev.psnr - 10.0 * log10(1.0 / ev.loss)) < 1e-9, "PSNR %.4f dB is not that of MSE %.6g",
        ev.psnr, ev.loss);
  printf("eval: loss %.5f  PSNR %.3f dB  noisy input %.3f dB (%lld samples)\n", ev.loss, ev.psnr,
         ev.input_psnr, (long long)ev.samples);
  gp_data_close(&d);
  gp_trainer_free(&t);
  gp_model_free(mo);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s models/unet.yaml\n", argv[0]);
    return 2;
  }
  gp_model *mo = load(argv[1]);
  noise_is_per_sample(mo);
  gp_model_free(mo);
  input_psnr(argv[1]);
  static const char *const scheds[] = {"gpipe", "zb-h1"}, *const opt[] = {"adamw", "sgd"};
  for (int sgd = 0; sgd < 2; sgd++) {
    run_out want = {0};
    train(argv[1], 1, 1, "gpipe", sgd, &want);
    const double tol = sgd ? TOL_REL : TOL_ADAM_REL;
    for (int i = 0; i < 2; i++) {
      run_out got = {0};
      train(argv[1], 3, 4, scheds[i], sgd, &got);
      for (int s = 0; s < STEPS; s++)
        CHECK(fabs(got.loss[s] - want.loss[s]) <= TOL_REL * fabs(want.loss[s]),
              "%s, %s K = 3, M = 4: step %d loss %.9g, K = 1, M = 1 %.9g", opt[sgd], scheds[i], s,
              got.loss[s], want.loss[s]);
      double rel = got.n_w == want.n_w ? stage_params_rel_diff(got.w, want.w, want.n_w) : INFINITY;
      CHECK(rel <= tol, "%s, %s K = 3, M = 4: weights after %d steps differ by %.3g (relative)",
            opt[sgd], scheds[i], STEPS, rel);
      printf("%s, %s K = 3, M = 4: losses %.6f %.6f, weight rel diff %.3g\n", opt[sgd], scheds[i],
             got.loss[0], got.loss[1], rel);
      free(got.w);
    }
    CHECK(want.loss[1] < want.loss[0], "%s: the loss did not fall (%.6g to %.6g)", opt[sgd],
          want.loss[0], want.loss[1]);
    free(want.w);
  }
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
