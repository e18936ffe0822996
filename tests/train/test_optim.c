/* Optimizers and LR schedules against PyTorch (tests/fixtures/optim.safetensors, made by
 * tests/train/make_optim_fixtures.py). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/io/safetensors.h"
#include "core/train/optimizer.h"
#include "tests/support/check.h"

/* f32 updates vs PyTorch's f32 updates over 5 steps: rounding differences only. */
#define TOL_UPDATE 2e-6
/* learning rates: torch computes its schedules by recurrences in double, we in closed form */
#define TOL_LR 1e-6

static int failures, passes;

static void check(int ok, const char *what, double err) {
  CHECK(ok, "%s (max error %.3g)", what, err);
}

static const float *tensor(gp_st_file *f, const char *name, int64_t n) {
  const gp_st_entry *e = gp_st_find(f, name);
  if (!e || gp_shape_numel(&e->shape) != n) {
    printf("FAIL: fixture lacks %s\n", name);
    exit(1);
  }
  return gp_st_data(f, e);
}

static void run_case(gp_st_file *f, gp_backend *be, const char *name, gp_train_spec hp) {
  int64_t n = 37;
  gp_params p = {0};
  p.be = be;
  p.n_train = n;
  p.train = malloc(sizeof(float) * n);
  p.grad = malloc(sizeof(float) * n);
  memcpy(p.train, tensor(f, "w0", n), sizeof(float) * n);
  gp_optimizer o;
  if (gp_optimizer_init(&o, &hp, &p) != GP_OK) {
    printf("FAIL: %s init: %s\n", name, gp_error_message());
    exit(1);
  }
  for (int s = 0; s < 5; s++) {
    char g[8];
    snprintf(g, sizeof g, "g%d", s);
    memcpy(p.grad, tensor(f, g, n), sizeof(float) * n);
    gp_optimizer_step(&o, hp.lr);
  }
  char key[64];
  snprintf(key, sizeof key, "%s.w", name);
  const float *want = tensor(f, key, n);
  double err = 0;
  for (int64_t i = 0; i < n; i++) {
    double e = fabs(p.train[i] - want[i]) / (1.0 + fabs(want[i]));
    if (e > err) err = e;
  }
  check(err < TOL_UPDATE, name, err);
  gp_optimizer_free(&o);
  free(p.train);
  free(p.grad);
}

/* inverse_sqrt against values computed in Python as fairseq's InverseSquareRootSchedule
 * computes them after u = step + 1 updates, and as Vaswani et al. write the rate at step n:
 *   def fairseq(lr, W, init, u):
 *       lr_step = (lr - init) / W; decay = lr * W ** 0.5
 *       return init + u * lr_step if u < W else decay * u ** -0.5
 *   def vaswani(f, d, W, n): return f * d ** -0.5 * min(n ** -0.5, n * W ** -1.5)
 *   [repr(fairseq(5e-4, 10, 0.0, s + 1)) for s in steps], ... */
#define TOL_LR_FORMULA 1e-15 /* relative: the same double operations, or a few roundings apart */
static void inverse_sqrt_cases(gp_train_spec b) {
  static const int64_t steps[] = {0, 1, 4, 8, 9, 10, 11, 25, 49, 999, 99999};
  static const double fairseq0[] = {5e-05,
                                    0.0001,
                                    0.00025,
                                    0.00045000000000000004,
                                    0.0005,
                                    0.0004767312946227962,
                                    0.0004564354645876384,
                                    0.00031008683647302116,
                                    0.00022360679774997898,
                                    4.9999999999999996e-05,
                                    5e-06};
  static const double fairseq_init[] = {0.00010009,
                                        0.00020008,
                                        0.0005000499999999999,
                                        0.0009000099999999999,
                                        0.001,
                                        0.0009534625892455924,
                                        0.0009128709291752768,
                                        0.0006201736729460423,
                                        0.00044721359549995795,
                                        9.999999999999999e-05,
                                        1e-05};
  static const int64_t vsteps[] = {0, 1, 99, 3998, 3999, 4000, 9999, 99999};
  static const double vaswani[] = {
      3.493856214843422e-07, 6.987712429686844e-07, 3.493856214843422e-05, 0.0013971931003158842,
      0.0013975424859373686, 0.001397367825874706,  0.0008838834764831845, 0.00027950849718747374};
  gp_train_spec h = b;
  h.lr = 5e-4, h.schedule = GP_LR_INVERSE_SQRT, h.warmup_steps = 10;
  double err = 0;
  for (int i = 0; i < 11; i++) {
    err = fmax(err, fabs(gp_lr_at(&h, steps[i], 0) - fairseq0[i]) / fairseq0[i]);
    /* the same as lr * min(n / W, sqrt(W / n)), n = step + 1 */
    double n = (double)steps[i] + 1, w = 10, want = 5e-4 * fmin(n / w, sqrt(w / n));
    err = fmax(err, fabs(gp_lr_at(&h, steps[i], 0) - want) / want);
  }
  check(err < TOL_LR_FORMULA, "inverse_sqrt (fairseq, from 0)", err);
  h.lr = 1e-3, h.warmup_init_lr = 1e-7;
  err = 0;
  for (int i = 0; i < 11; i++)
    err = fmax(err, fabs(gp_lr_at(&h, steps[i], 0) - fairseq_init[i]) / fairseq_init[i]);
  check(err < TOL_LR_FORMULA, "inverse_sqrt (fairseq, warmup_init_lr)", err);
  h = b;
  h.lr = 2.0, h.schedule = GP_LR_INVERSE_SQRT, h.warmup_steps = 4000, h.d_model = 512;
  err = 0;
  for (int i = 0; i < 8; i++)
    err = fmax(err, fabs(gp_lr_at(&h, vsteps[i], 0) - vaswani[i]) / vaswani[i]);
  check(err < TOL_LR_FORMULA, "inverse_sqrt (Vaswani, d_model)", err);
}

/* train.schedule: inverse_sqrt in a model file: good values and located errors. */
#define SPEC_HEAD                                                                                  \
  "inputs: {x: [4], label: {shape: [], dtype: i32}}\n"                                             \
  "layers: [{type: linear, out_features: 3}]\nloss: {type: softmax_cross_entropy}\n"
static gp_model *spec_load(const char *train, gp_status *s) {
  char text[1024];
  snprintf(text, sizeof text, "%s%s\n", SPEC_HEAD, train);
  gp_model *m = NULL;
  gp_error_clear();
  *s = gp_model_load_string(text, "t.yaml", NULL, 0, &m);
  return m;
}
static void spec_fails(const char *train, const char *want) {
  gp_status s;
  gp_model *m = spec_load(train, &s);
  int ok = s == GP_ERR_SPEC && !m && strstr(gp_error_message(), want);
  if (!ok)
    printf("  %s\n    got %s: '%s'\n    want '%s'\n", train, gp_status_name(s), gp_error_message(),
           want);
  check(ok, "inverse_sqrt spec error", 0);
  gp_model_free(m);
}
static void inverse_sqrt_spec(void) {
  gp_status s;
  gp_model *m = spec_load("train: {optimizer: {type: adamw, lr: 5e-4}, "
                          "schedule: {type: inverse_sqrt, warmup_steps: 4000}}",
                          &s);
  check(m && m->train.schedule == GP_LR_INVERSE_SQRT && m->train.warmup_steps == 4000 &&
            m->train.d_model == 0 && m->train.warmup_init_lr == 0 && m->train.lr == 5e-4,
        "inverse_sqrt spec", 0);
  gp_model_free(m);
  m = spec_load("train: {optimizer: {type: adamw, lr: 1e-3}, schedule: {type: inverse_sqrt, "
                "warmup_steps: 10, warmup_init_lr: 1e-7}}",
                &s);
  check(m && m->train.warmup_init_lr == 1e-7 && m->train.d_model == 0, "warmup_init_lr spec", 0);
  gp_model_free(m);
  m = spec_load("train: {optimizer: {type: adamw, lr: 2}, schedule: {type: inverse_sqrt, "
                "warmup_steps: 4000, d_model: 512}}",
                &s);
  check(m && m->train.d_model == 512 && m->train.lr == 2, "d_model spec", 0);
  gp_model_free(m);
  /* columns count from 1 on line 4, the train line */
  spec_fails("train: {schedule: inverse_sqrt}",
             "t.yaml:4:19: missing required key 'warmup_steps' for the inverse_sqrt schedule");
  spec_fails("train: {schedule: {type: inverse_sqrt, warmup_steps: 0}}",
             "t.yaml:4:54: warmup_steps: inverse_sqrt needs at least 1");
  spec_fails("train: {schedule: {type: inverse_sqrt, warmup_steps: -3}}",
             "t.yaml:4:54: warmup_steps: -3 must be >= 0");
  spec_fails("train: {schedule: {type: inverse_sqrt, warmup_steps: 10, d_model: 0}}",
             "t.yaml:4:67: d_model: 0 is out of range");
  spec_fails("train: {schedule: {type: inverse_sqrt, warmup_steps: 10, d_model: abc}}",
             "t.yaml:4:67: d_model: expected an integer, got 'abc'");
  spec_fails("train: {optimizer: {type: adamw, lr: 5e-4}, schedule: {type: inverse_sqrt, "
             "warmup_steps: 10, warmup_init_lr: 1e-3}}",
             "t.yaml:4:110: warmup_init_lr: 0.001 is more than lr 0.0005");
  spec_fails("train: {schedule: {type: inverse_sqrt, warmup_steps: 10, warmup_init_lr: -1}}",
             "t.yaml:4:74: warmup_init_lr: -1 must be >= 0");
  spec_fails("train: {schedule: {type: inverse_sqrt, warmup_steps: 10, d_model: 512, "
             "warmup_init_lr: 0}}",
             "t.yaml:4:88: warmup_init_lr: not with d_model");
  spec_fails("train: {schedule: {type: inverse_sqrt, warmup_steps: 10, min_lr: 0}}",
             "t.yaml:4:66: unknown key 'min_lr' for the inverse_sqrt schedule");
  spec_fails("train: {schedule: {type: inverse_sqr, warmup_steps: 10}}",
             "t.yaml:4:26: type: unknown value 'inverse_sqr'; did you mean 'inverse_sqrt'?");
}

int main(int argc, char **argv) {
  const char *path = argc > 1 ? argv[1] : "tests/fixtures/optim.safetensors";
  gp_st_file *f;
  gp_backend *be;
  if (gp_st_read(path, &f) != GP_OK || gp_cpu_backend_create(1, &be) != GP_OK) {
    printf("FAIL: %s\n", gp_error_message());
    return 1;
  }
  gp_train_spec b = {0};
  gp_train_spec h = b;
  h.optimizer = GP_OPT_SGD, h.lr = 0.1, h.momentum = 0.9, h.nesterov = 1, h.weight_decay = 0.01;
  run_case(f, be, "sgd", h);
  h = b;
  h.optimizer = GP_OPT_SGD, h.lr = 0.05;
  run_case(f, be, "sgd_plain", h);
  h = b;
  h.optimizer = GP_OPT_SGD, h.lr = 0.05, h.momentum = 0.8, h.weight_decay = 0.001;
  run_case(f, be, "sgd_momentum", h);
  h = b;
  h.optimizer = GP_OPT_ADAMW, h.lr = 0.01, h.beta1 = 0.9, h.beta2 = 0.99, h.eps = 1e-6;
  h.weight_decay = 0.05;
  run_case(f, be, "adamw", h);
  h = b;
  h.optimizer = GP_OPT_RMSPROP, h.lr = 0.01, h.alpha = 0.9, h.eps = 1e-6, h.weight_decay = 0.01;
  run_case(f, be, "rmsprop", h);
  h = b;
  h.optimizer = GP_OPT_RMSPROP, h.lr = 0.01, h.alpha = 0.95, h.eps = 1e-6, h.momentum = 0.9;
  run_case(f, be, "rmsprop_momentum", h);

  /* schedules */
  h = b;
  h.lr = 0.1, h.schedule = GP_LR_COSINE, h.warmup_steps = 10;
  const float *want = tensor(f, "lr.cosine_warmup", 50);
  double err = 0;
  for (int s = 0; s < 50; s++)
    err = fmax(err, fabs(gp_lr_at(&h, s, 50) - want[s]));
  check(err < TOL_LR, "warm-up + cosine schedule", err);
  h = b;
  h.lr = 0.1, h.schedule = GP_LR_STEP, h.step_size = 7, h.gamma = 0.5;
  want = tensor(f, "lr.step", 50);
  err = 0;
  for (int s = 0; s < 50; s++)
    err = fmax(err, fabs(gp_lr_at(&h, s, 50) - want[s]));
  check(err < TOL_LR, "step schedule", err);
  h = b;
  h.lr = 0.3, h.schedule = GP_LR_CONSTANT;
  check(gp_lr_at(&h, 17, 50) == 0.3, "constant schedule", 0);

  inverse_sqrt_cases(b);
  inverse_sqrt_spec();

  gp_st_free(f);
  gp_backend_destroy(be);
  printf("%d passed, %d failed\n", passes, failures);
  return failures != 0;
}
