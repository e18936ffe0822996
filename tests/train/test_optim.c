/* Optimizers and LR schedules against PyTorch (tests/fixtures/optim.safetensors, made by
 * tests/train/make_optim_fixtures.py). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/io/safetensors.h"
#include "core/train/optimizer.h"

/* f32 updates vs PyTorch's f32 updates over 5 steps: rounding differences only. */
#define TOL_UPDATE 2e-6
/* learning rates: torch computes its schedules by recurrences in double, we in closed form */
#define TOL_LR 1e-6

static int failures, passes;

static void check(int ok, const char *what, double err) {
  if (!ok) {
    printf("FAIL: %s (max error %.3g)\n", what, err);
    failures++;
  } else {
    passes++;
  }
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

  gp_st_free(f);
  gp_backend_destroy(be);
  printf("%d passed, %d failed\n", passes, failures);
  return failures != 0;
}
