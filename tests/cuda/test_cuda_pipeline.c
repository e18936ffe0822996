/* The pipeline on GPUs: K, M, re-materialization and where the stages are (several on one
 * GPU, copies between stages as between devices, several GPUs when the machine has them)
 * change the results no more than summation order does, measured against the CPU pipeline
 * with the same K and M; and training does not grow device memory from step to step. Exits
 * 77 (skipped) without a GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cuda/probe.h"
#include "core/rng.h"
#include "core/exec/internal.h"
#include "core/train/trainer.h"
#include "tests/support/check.h"
#include "tests/train/device_spans.h"
#include "tests/train/stage_params.h"
#include "tests/support/train.h"

static int failures, passes;

/* fp32 on another backend: cuDNN and cuBLAS sum in other orders than OpenBLAS and im2col,
 * and a few steps of training carry that along. */
#define TOL_CPU 2e-4
/* the same backend, other K/M/placement: summation order over micro-batches only, and
 * cuDNN's algorithm choice, which may differ between two pipelines */
#define TOL_GPU 2e-5
#define STEPS 3

/* Batch norm, a skip connection over several stages, dropout, AdamW with clipping. */
static const char *resnet = "name: res\n"
                            "inputs: {x: [3, 8, 8], label: {shape: [], dtype: i32}}\n"
                            "layers:\n"
                            "  - {type: conv2d, out_channels: 8, kernel: 3, padding: 1, "
                            "bias: false, name: c0}\n"
                            "  - {type: batchnorm}\n"
                            "  - {type: relu}\n"
                            "  - {type: conv2d, out_channels: 8, kernel: 3, padding: 1}\n"
                            "  - {type: relu}\n"
                            "  - {type: conv2d, out_channels: 8, kernel: 3, padding: 1, name: c2}\n"
                            "  - {type: add, from: [c2, c0]}\n"
                            "  - {type: maxpool, kernel: 2}\n"
                            "  - {type: dropout, p: 0.2}\n"
                            "  - {type: flatten}\n"
                            "  - {type: linear, out_features: 16}\n"
                            "  - {type: gelu}\n"
                            "  - {type: linear, out_features: 5}\n"
                            "loss: {type: softmax_cross_entropy, label_smoothing: 0.1}\n"
                            "train: {clip_grad_norm: 1.0, optimizer: {type: adamw, lr: 0.01}}\n";

typedef struct cfg {
  int k, m;
  gp_schedule_kind sched;
  gp_remat remat;
  const char *dev; /* "cpu", "cuda:0" (every stage), or "cuda:*" (stage s on GPU s % n) */
  int copy_all;
} cfg;

typedef struct run_out {
  double loss[STEPS];
  float *w, *buf;
  int64_t n_w, n_buf;
} run_out;

static void batch_data(const gp_model *mo, int64_t batch, int step, float *x, int32_t *y) {
  int64_t per = gp_shape_numel(&mo->inputs[0].shape);
  gp_rng r;
  gp_rng_seed(&r, 1000 + (uint64_t)step);
  for (int64_t i = 0; i < batch * per; i++)
    x[i] = 2.0f * gp_rng_uniform(&r) - 1.0f;
  for (int64_t i = 0; i < batch; i++)
    y[i] = (int32_t)gp_rng_below(&r, 5);
}

static gp_model *load(const cfg *c) {
  gp_model *mo;
  if (gp_model_load_string(resnet, "res.yaml", NULL, 0, &mo) != GP_OK) return NULL;
  mo->pipeline.stages = c->k;
  mo->pipeline.micro_batches = c->m;
  mo->pipeline.schedule = c->sched;
  mo->pipeline.remat = c->remat;
  mo->pipeline.n_balance = 0;
  mo->pipeline.n_devices = c->k;
  int gpus = gp_cuda_device_count();
  for (int s = 0; s < c->k; s++) {
    if (strcmp(c->dev, "cuda:*") == 0)
      snprintf(mo->pipeline.devices[s], sizeof mo->pipeline.devices[s], "cuda:%d", s % gpus);
    else
      snprintf(mo->pipeline.devices[s], sizeof mo->pipeline.devices[s], "%s", c->dev);
  }
  return mo;
}

/* Trains STEPS steps of a batch of 12; 0 and a message on failure. */
static int train(const cfg *c, run_out *o) {
  memset(o, 0, sizeof *o);
  gp_model *mo = load(c);
  gp_plan plan;
  gp_trainer t;
  gp_pipeline_opts po = {.cores = 1, .channels = c->copy_all ? GP_CHAN_FORCE_COPY : GP_CHAN_AUTO};
  if (!mo || gp_plan_make(mo, &mo->pipeline, &plan) != GP_OK ||
      gp_trainer_init(&t, mo, &plan, &po, 42) != GP_OK) {
    printf("FAIL: K=%d M=%d on %s: %s\n", c->k, c->m, c->dev, gp_error_message());
    gp_model_free(mo);
    return 0;
  }
  const int64_t batch = 12;
  float *x = malloc(sizeof(float) * (size_t)(batch * gp_shape_numel(&mo->inputs[0].shape)));
  int32_t *y = malloc(sizeof(int32_t) * (size_t)batch);
  int ok = x && y;
  for (int s = 0; ok && s < STEPS; s++) {
    gp_metrics mt;
    batch_data(mo, batch, s, x, y);
    ok = gp_t_step_xy(&t, x, y, batch, mo->train.lr, &mt) == GP_OK;
    o->loss[s] = mt.loss;
  }
  if (!ok) printf("FAIL: K=%d M=%d on %s: %s\n", c->k, c->m, c->dev, gp_error_message());
  if (ok) {
    o->w = stage_params_gather(&t, 0, &o->n_w);
    o->buf = stage_params_gather(&t, 1, &o->n_buf);
  }
  free(x);
  free(y);
  gp_trainer_free(&t);
  gp_model_free(mo);
  return ok;
}

static void free_out(run_out *o) {
  free(o->w);
  free(o->buf);
}

static void compare(const char *what, const cfg *c, const run_out *got, const run_out *want,
                    double tol) {
  static const char *sn[] = {"gpipe", "1f1b"}, *rn[] = {"always", "except_last", "never"};
  double dl = 0, dw = 1, db = 1;
  if (got->w && want->w && got->n_w == want->n_w && got->n_buf == want->n_buf) {
    for (int s = 0; s < STEPS; s++)
      dl = fmax(dl, fabs(got->loss[s] - want->loss[s]) / fabs(want->loss[s]));
    dw = stage_params_rel_diff(got->w, want->w, want->n_w);
    db = stage_params_rel_diff(got->buf, want->buf, want->n_buf);
  }
  printf("%s: K=%d M=%d: loss %.3g, weights %.3g, statistics %.3g\n", what, c->k, c->m, dl, dw, db);
  CHECK(dl <= tol && dw <= tol && db <= tol,
        "%s: K=%d M=%d %s remat %s on %s%s: loss %.3g, weights %.3g, statistics %.3g (tol %g)",
        what, c->k, c->m, sn[c->sched], rn[c->remat], c->dev, c->copy_all ? " (copies)" : "", dl,
        dw, db, tol);
}

/* Every (K, M) of a small grid, both schedules, every re-materialization mode: the GPU
 * pipeline against the CPU pipeline of the same K and M (batch-norm statistics are per
 * micro-batch, so only the same K and M agree), and the same K and M with copies between the
 * stages (the path between devices) against hand-offs in place. */
static void grid(void) {
  static const int ks[] = {1, 2, 4}, ms[] = {1, 2, 4};
  int i = 0;
  for (int a = 0; a < 3; a++)
    for (int b = 0; b < 3; b++, i++) {
      cfg c = {ks[a], ms[b], (gp_schedule_kind)(i % 2), (gp_remat)(i % 3), "cpu", 0};
      run_out cpu, gpu, apart;
      if (!train(&c, &cpu)) {
        failures++;
        continue;
      }
      c.dev = "cuda:0";
      int ok = train(&c, &gpu);
      compare("GPU against CPU", &c, &gpu, &cpu, TOL_CPU);
      if (ok && c.k > 1) {
        c.copy_all = 1;
        train(&c, &apart);
        compare("copies between stages against hand-offs", &c, &apart, &gpu, TOL_GPU);
        free_out(&apart);
      }
      free_out(&cpu);
      free_out(&gpu);
    }
}

/* Stages on different GPUs (peer copies, or staged where the devices cannot reach each
 * other), when there are several. */
static void devices(void) {
  int n = gp_cuda_device_count();
  if (n < 2) {
    printf("one GPU: the stages-on-several-GPUs check is skipped\n");
    return;
  }
  cfg c = {n < 4 ? n : 4, 4, GP_SCHED_1F1B, GP_REMAT_ALWAYS, "cpu", 0};
  run_out cpu, gpu;
  if (!train(&c, &cpu)) {
    failures++;
    return;
  }
  c.dev = "cuda:*";
  train(&c, &gpu);
  compare("several GPUs against CPU", &c, &gpu, &cpu, TOL_CPU);
  free_out(&cpu);
  free_out(&gpu);
}

/* The model and a trainer of configuration c with options po; NULL (a failed check named
 * `what`) when they cannot be made. */
static gp_model *trainer_for(const cfg *c, const gp_pipeline_opts *po, gp_trainer *t,
                             const char *what) {
  gp_model *mo = load(c);
  gp_plan plan;
  if (!mo || gp_plan_make(mo, &mo->pipeline, &plan) != GP_OK ||
      gp_trainer_init(t, mo, &plan, po, 42) != GP_OK) {
    CHECK(0, "%s setup: %s", what, gp_error_message());
    gp_model_free(mo);
    return NULL;
  }
  return mo;
}

/* After a few steps the arenas and caches have their size: 20 more steps allocate nothing,
 * by the backends' own count and by the device's free memory. */
static void no_growth(void) {
  cfg c = {2, 4, GP_SCHED_GPIPE, GP_REMAT_ALWAYS, "cuda:0", 0};
  gp_trainer t;
  gp_model *mo = trainer_for(&c, &(gp_pipeline_opts){.cores = 1}, &t, "memory check");
  if (!mo) return;
  const int64_t batch = 12;
  float x[12 * 3 * 8 * 8];
  int32_t y[12];
  size_t used[2][2] = {{0}}, free_b[2] = {0}, total = 0;
  int ok = 1;
  for (int s = 0; ok && s < 25; s++) {
    gp_metrics mt;
    batch_data(mo, batch, s, x, y);
    ok = gp_t_step_xy(&t, x, y, batch, mo->train.lr, &mt) == GP_OK &&
         gp_pipeline_sync(t.pl) == GP_OK;
    if (s == 4 || s == 24) {
      int w = s == 24;
      for (int st = 0; st < 2; st++)
        used[w][st] = gp_pipeline_backend(t.pl, st)->mem_used;
      ok = ok && gp_cuda_mem_info(0, &free_b[w], &total) == 0;
    }
  }
  CHECK(ok, "memory check training: %s", gp_error_message());
  CHECK(used[0][0] == used[1][0] && used[0][1] == used[1][1],
        "backend memory after step 5 and step 25: stage 0 %zu and %zu, stage 1 %zu and %zu",
        used[0][0], used[1][0], used[0][1], used[1][1]);
  CHECK(free_b[0] == free_b[1], "free device memory after step 5 and step 25: %zu and %zu",
        free_b[0], free_b[1]);
  gp_trainer_free(&t);
  gp_model_free(mo);
}

/* A GPU stage's actions are timed on its stream: the spans' checks of the CPU's device-timing
 * test (tests/train/test_pipeline_timing.c) on cuda:0, and, for the log, how the device's time
 * compares with the host's launches. */
static void device_time(void) {
  cfg c = {2, 4, GP_SCHED_GPIPE, GP_REMAT_ALWAYS, "cuda:0", 0};
  gp_trainer t;
  gp_model *mo = trainer_for(&c, &(gp_pipeline_opts){.cores = 1, .trace = 1}, &t, "device time");
  if (!mo) return;
  const gp_pipeline *pl = t.pl;
  const int64_t batch = 12;
  float x[12 * 3 * 8 * 8];
  int32_t y[12];
  int ok = 1;
  for (int s = 0; ok && s < STEPS; s++) {
    gp_metrics mt;
    batch_data(mo, batch, s, x, y);
    ok = gp_t_step_xy(&t, x, y, batch, mo->train.lr, &mt) == GP_OK;
  }
  CHECK(ok, "device time training: %s", gp_error_message());
  if (ok) {
    int checks = 0, bad = device_spans_check(pl, STEPS, c.m, "cuda:0 K=2 M=4", &checks);
    CHECK(bad == 0, "device spans: %d of %d checks failed", bad, checks);
    for (int st = 0; st < c.k; st++) {
      double host = 0, dev = 0;
      for (int64_t i = 0; i < pl->st[st].rec.n_ev; i++) {
        const trace_ev *e = &pl->st[st].rec.ev[i];
        if (e->node < 0) *(e->device ? &dev : &host) += e->t1 - e->t0;
      }
      printf("stage %d: actions %.3f ms on the device, %.3f ms launching them\n", st, 1e3 * dev,
             1e3 * host);
    }
  }
  gp_trainer_free(&t);
  gp_model_free(mo);
}

int main(void) {
  if (gp_cuda_device_count() < 1) {
    printf("skip: no CUDA device (or this build has no CUDA)\n");
    return 77;
  }
  grid();
  devices();
  no_growth();
  device_time();
  printf("%d passed, %d failed\n", passes, failures);
  return failures != 0;
}
